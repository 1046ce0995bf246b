#!/usr/bin/env python3
"""Test server written with the real Python MCP SDK (`mcp` 2.3.0, `MCPServer`).

Run with the peers venv:  .peers/venv/bin/python tests/servers/py_mcp_server.py
    --transport stdio            (default) newline-delimited JSON-RPC on stdin/stdout
    --transport http --port N    Streamable HTTP at http://127.0.0.1:N/mcp (binds 127.0.0.1;
                                 --host to change). --port 0 takes a free port.
    --port-file FILE             (http) write the bound port (decimal, newline) to FILE once the
                                 socket listens; connections made after that are served.
    --stateless                  (http) stateless_http=True, no sessions
    --json-response              (http) answer POSTs with application/json, not SSE
    --log-level LEVEL            SDK/uvicorn log level (default WARNING; logs go to stderr)
    --require-token-file FILE    (http) the SDK's own bearer-token check (AuthSettings + a
                                 TokenVerifier): a request without `Authorization: Bearer
                                 <FILE's text>` is answered 401 with WWW-Authenticate
    ARG...                       any further arguments are ignored (process_info shows them)

Speaks both eras as the SDK does: `initialize` (legacy, sessionful on HTTP) and
`server/discover` (2026-07-28), on the same endpoint.

Tools:
  echo(message: str) -> str           returns message unchanged
  add(a: int, b: int) -> int          returns a + b
  probe_client(channel="request")     while handling the call, sends the client a `ping`
                                      request and then a `roots/list` request (server->client,
                                      legacy era) and returns one text line for each:
                                        "ping: result {}"
                                        "roots/list: error -32601 Method not found"
                                      i.e. "<method>: result <json>" or
                                      "<method>: error <code> <message>", or
                                      "<method>: timeout" / "<method>: exception <type>: <text>".
                                      channel="request" (default) sends them on the tool call's
                                      own response stream (related request); "standalone" on the
                                      connection's standalone channel (HTTP: the GET stream).
  process_info() -> str               JSON text {"argv": [...], "cwd": "...", "environ": {...}}:
                                      this process's exact argument vector (/proc/self/cmdline,
                                      the interpreter first), working directory, and the
                                      environment it was started with (/proc/self/environ, so
                                      what Python adds itself, e.g. LC_CTYPE, is not counted).
  stderr_flood(kib: int, marker: str) writes `kib` lines of 1 KiB (`marker` repeated) on stderr,
                                      unbuffered (a stderr nobody reads would block it), then
                                      returns "wrote <n> bytes to stderr".
Resource:  memo://hello   text/plain "Hello from py_mcp_server"
Prompt:    greet(name: str) -> one user message "Hello, <name>!"
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys

from _listen import listen

import anyio
from mcp import types
from mcp.server.mcpserver import Context, MCPServer
from mcp.shared.exceptions import MCPError
from mcp.shared.message import ServerMessageMetadata

PROBE_TIMEOUT_S = 5.0

mcp = MCPServer("py-mcp-server", version="1.0.0", instructions="albedo-mcp test server (mcp 2.3.0)")


@mcp.tool()
def echo(message: str) -> str:
    """Echo the message back unchanged."""
    return message


@mcp.tool()
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


async def _probe(ctx: Context, method: str, request: types.ServerRequest, result_type, related) -> str:
    meta = ServerMessageMetadata(related_request_id=related) if related is not None else None
    try:
        with anyio.fail_after(PROBE_TIMEOUT_S + 1):
            result = await ctx.session.send_request(
                request, result_type, request_read_timeout_seconds=PROBE_TIMEOUT_S, metadata=meta
            )
    except MCPError as e:
        return f"{method}: error {e.code} {e.message}"
    except TimeoutError:
        return f"{method}: timeout"
    except Exception as e:  # noqa: BLE001 - report anything the SDK raised
        return f"{method}: exception {type(e).__name__}: {e}"
    dumped = result.model_dump(by_alias=True, mode="json", exclude_none=True)
    return f"{method}: result {json.dumps(dumped, sort_keys=True, separators=(',', ':'))}"


@mcp.tool()
async def probe_client(ctx: Context, channel: str = "request") -> str:
    """Send the client a ping and a roots/list request; describe what came back for each."""
    related = ctx.request_id if channel != "standalone" else None
    lines = [
        await _probe(ctx, "ping", types.PingRequest(), types.EmptyResult, related),
        await _probe(ctx, "roots/list", types.ListRootsRequest(), types.ListRootsResult, related),
    ]
    return "\n".join(lines)


def _nul_list(path: str) -> list[str]:
    """A NUL-terminated list (/proc/self/cmdline, /proc/self/environ); empty items kept."""
    with open(path, "rb") as f:
        parts = f.read().split(b"\0")
    if parts and parts[-1] == b"":
        parts.pop()
    return [x.decode("utf-8", "surrogateescape") for x in parts]


@mcp.tool()
def process_info() -> str:
    """This process's argv, working directory and initial environment, as JSON."""
    environ = dict(kv.split("=", 1) for kv in _nul_list("/proc/self/environ") if "=" in kv)
    return json.dumps({"argv": _nul_list("/proc/self/cmdline"), "cwd": os.getcwd(), "environ": environ})


@mcp.tool()
def stderr_flood(kib: int, marker: str) -> str:
    """Write `kib` lines of 1 KiB (`marker` repeated) on stderr, unbuffered."""
    line = ((marker or "x") * 1024).encode()[:1023] + b"\n"
    total = 0
    for _ in range(kib):
        view = memoryview(line)
        while view:
            n = os.write(2, view)
            view = view[n:]
            total += n
    return f"wrote {total} bytes to stderr"


@mcp.resource("memo://hello", name="hello", mime_type="text/plain", description="A short memo")
def memo_hello() -> str:
    return "Hello from py_mcp_server"


@mcp.prompt()
def greet(name: str) -> str:
    """Greet someone by name."""
    return f"Hello, {name}!"


def require_token(expected: str, port: int, host: str) -> None:
    """Turn on the SDK's bearer-token check for one static token."""
    from mcp.server.auth.provider import AccessToken
    from mcp.server.auth.settings import AuthSettings

    class StaticVerifier:
        async def verify_token(self, token: str):
            if token != expected:
                return None
            return AccessToken(token=token, client_id="albedo-test", scopes=[])

    url = f"http://{host}:{port}"
    mcp.settings.auth = AuthSettings(issuer_url=url, resource_server_url=f"{url}/mcp")
    mcp._token_verifier = StaticVerifier()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--transport", choices=["stdio", "http"], default="stdio")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port-file")
    ap.add_argument("--stateless", action="store_true")
    ap.add_argument("--json-response", action="store_true")
    ap.add_argument("--log-level", default="WARNING")
    ap.add_argument("--require-token-file")
    ap.add_argument("rest", nargs="*", help="ignored (process_info shows them)")
    args = ap.parse_args()
    mcp.settings.log_level = args.log_level.upper()
    logging.getLogger().setLevel(args.log_level.upper())
    if args.transport == "stdio":
        mcp.run("stdio")
        return
    sock = listen("py_mcp_server", args.host, args.port, args.port_file)
    import uvicorn

    if args.require_token_file:
        with open(args.require_token_file) as f:
            require_token(f.read().strip(), sock.getsockname()[1], args.host)

    app = mcp.streamable_http_app(
        stateless_http=args.stateless, json_response=args.json_response, host=args.host
    )
    config = uvicorn.Config(app, log_level=args.log_level.lower())
    anyio.run(lambda: uvicorn.Server(config).serve(sockets=[sock]))


if __name__ == "__main__":
    main()
