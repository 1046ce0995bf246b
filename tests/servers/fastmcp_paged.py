#!/usr/bin/env python3
"""Test server written with FastMCP 4.2.3: 25 tools, lists paginated 5 per page.

Run with the peers venv:  .peers/venv/bin/python tests/servers/fastmcp_paged.py
    --transport stdio            (default) newline-delimited JSON-RPC on stdin/stdout
    --transport http --port N    Streamable HTTP at http://127.0.0.1:N/mcp (binds 127.0.0.1;
                                 --host to change). --port 0 takes a free port.
    --port-file FILE             (http) write the bound port (decimal, newline) to FILE once the
                                 socket listens; connections made after that are served.
    --page-size N                list page size (default 5; FastMCP's `list_page_size`)
    --stateless                  (http) stateless_http=True
    --json-response              (http) answer POSTs with application/json, not SSE
    --log-level LEVEL            default WARNING (stderr)

Tools t00 .. t24, each `tNN(message: str) -> str` returning "tNN: <message>".
tools/list returns 5 tools per page; `nextCursor` is an opaque string (base64 of the offset);
the last page has no nextCursor. Speaks both eras (initialize and server/discover).
"""

from __future__ import annotations

import argparse
import os
import sys

from _listen import listen

# No banner and no update check against PyPI at start (tests run offline, on stdio).
os.environ.setdefault("FASTMCP_SHOW_SERVER_BANNER", "false")
os.environ.setdefault("FASTMCP_CHECK_FOR_UPDATES", "off")

from fastmcp import FastMCP  # noqa: E402
from fastmcp.tools import Tool  # noqa: E402

N_TOOLS = 25


def make_tool(i: int) -> Tool:
    name = f"t{i:02d}"

    def fn(message: str) -> str:
        return f"{name}: {message}"

    fn.__name__ = name
    fn.__doc__ = f"Echo tool number {i}: returns '{name}: <message>'."
    return Tool.from_function(fn, name=name)


def build(page_size: int) -> FastMCP:
    return FastMCP(
        "fastmcp-paged",
        version="1.0.0",
        instructions="albedo-mcp test server (FastMCP 4.2.3, paginated lists)",
        tools=[make_tool(i) for i in range(N_TOOLS)],
        list_page_size=page_size,
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--transport", choices=["stdio", "http"], default="stdio")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port-file")
    ap.add_argument("--page-size", type=int, default=5)
    ap.add_argument("--stateless", action="store_true")
    ap.add_argument("--json-response", action="store_true")
    ap.add_argument("--log-level", default="WARNING")
    args = ap.parse_args()
    server = build(args.page_size)
    if args.transport == "stdio":
        server.run("stdio", show_banner=False, log_level=args.log_level)
        return
    sock = listen("fastmcp_paged", args.host, args.port, args.port_file)
    port = sock.getsockname()[1]
    server.run(
        "http",
        show_banner=False,
        host=args.host,
        port=port,
        log_level=args.log_level,
        path="/mcp",
        sockets=[sock],
        stateless_http=args.stateless,
        json_response=args.json_response,
    )


if __name__ == "__main__":
    main()
