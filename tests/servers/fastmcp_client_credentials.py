#!/usr/bin/env python3
"""An MCP server behind an authorization server that only allows the client credentials grant.

No packaged server offers the grants of the MCP authorization extensions, so this one is ours:
FastMCP 4.2.3 serves the MCP endpoint (Streamable HTTP at http://127.0.0.1:PORT/mcp) with a
`RemoteAuthProvider` (its Protected Resource Metadata names this process as the authorization
server, and its bearer check answers 401 with `WWW-Authenticate: Bearer ... resource_metadata=`
without a valid token); two custom routes are the authorization server:
    /.well-known/oauth-authorization-server   RFC 8414 metadata: grant_types_supported is
                                              ["client_credentials"] (an authorization_endpoint
                                              is listed, as albedo's discovery requires, and
                                              refuses every request: no browser grant here)
    /token   client_credentials only (any other grant: 400 unsupported_grant_type; see
             --jwt-bearer-file), the client
             authenticated with client_secret_basic or client_secret_post; a client named by
             --refuse-client is answered 400 unauthorized_client, a wrong secret 401
             invalid_client. Tokens are random, live --token-ttl seconds (`expires_in`).

Run with the peers venv:  .peers/venv/bin/python tests/servers/fastmcp_client_credentials.py
    --port N / --host H / --port-file FILE   as the other test servers (_listen.py)
    --client-id ID --client-secret S         the one client (default svc-client / svc-secret)
    --refuse-client ID                       answer this client unauthorized_client
    --jwt-bearer-file FILE                   also allow the JWT bearer grant
                                             (urn:ietf:params:oauth:grant-type:jwt-bearer), for
                                             an `assertion` equal to FILE's text as it is at the
                                             request (the stand-in for a workload identity
                                             issuer this server trusts); another assertion is
                                             400 invalid_grant
    --token-ttl SECS                         default 3600
    --grant-delay SECS                       wait this long in each grant (default 0), so that
                                             concurrent grants would overlap
    --record-dir DIR                         DIR/counts.json: {"grants", "refused", "authorize"}
                                             kept up to date; every token granted appended to
                                             DIR/issued.txt
Tools: echo(message) -> message; add(a, b) -> a + b.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import secrets
import time
from urllib.parse import unquote_plus

from _listen import listen

os.environ.setdefault("FASTMCP_SHOW_SERVER_BANNER", "false")
os.environ.setdefault("FASTMCP_CHECK_FOR_UPDATES", "off")

from fastmcp import FastMCP  # noqa: E402
from fastmcp.server.auth.auth import AccessToken, RemoteAuthProvider, TokenVerifier  # noqa: E402
from starlette.requests import Request  # noqa: E402
from starlette.responses import JSONResponse  # noqa: E402


class Record:
    def __init__(self, folder: str | None):
        self.folder = folder
        self.counts = {"grants": 0, "refused": 0, "authorize": 0, "jwt_bearer": 0}
        self._write()

    def bump(self, what: str) -> None:
        self.counts[what] += 1
        self._write()

    def issued(self, token: str) -> None:
        if self.folder:
            with open(os.path.join(self.folder, "issued.txt"), "a") as f:
                f.write(token + "\n")

    def _write(self) -> None:
        if not self.folder:
            return
        path = os.path.join(self.folder, "counts.json")
        with open(path + ".tmp", "w") as f:
            json.dump(self.counts, f)
        os.replace(path + ".tmp", path)


class Tokens(TokenVerifier):
    """The tokens /token granted, checked on every MCP request."""

    def __init__(self, **kw):
        super().__init__(**kw)
        self.live: dict[str, tuple[str, int]] = {}

    def grant(self, client_id: str, ttl: int) -> str:
        token = "cc-" + secrets.token_urlsafe(24)
        self.live[token] = (client_id, int(time.time()) + ttl)
        return token

    async def verify_token(self, token: str) -> AccessToken | None:
        found = self.live.get(token)
        if found is None or found[1] < time.time():
            return None
        return AccessToken(token=token, client_id=found[0], scopes=[], expires_at=found[1])


def error(status: int, code: str, description: str) -> JSONResponse:
    return JSONResponse({"error": code, "error_description": description}, status_code=status)


def build(base: str, args, rec: Record) -> FastMCP:
    tokens = Tokens(base_url=base)
    auth = RemoteAuthProvider(token_verifier=tokens, authorization_servers=[base], base_url=base)
    mcp = FastMCP("fastmcp-client-credentials", version="1.0.0", auth=auth)

    @mcp.custom_route("/.well-known/oauth-authorization-server", methods=["GET"])
    async def metadata(request: Request) -> JSONResponse:
        return JSONResponse(
            {
                "issuer": base,
                "authorization_endpoint": f"{base}/authorize",
                "token_endpoint": f"{base}/token",
                "grant_types_supported": ["client_credentials"]
                + (["urn:ietf:params:oauth:grant-type:jwt-bearer"] if args.jwt_bearer_file else []),
                "token_endpoint_auth_methods_supported": [
                    "client_secret_basic",
                    "client_secret_post",
                ],
                "response_types_supported": ["code"],
                "code_challenge_methods_supported": ["S256"],
            }
        )

    @mcp.custom_route("/authorize", methods=["GET"])
    async def authorize(request: Request) -> JSONResponse:
        rec.bump("authorize")
        return error(400, "unsupported_response_type", "only the client credentials grant")

    @mcp.custom_route("/token", methods=["POST"])
    async def token(request: Request) -> JSONResponse:
        form = await request.form()
        jwt_bearer = "urn:ietf:params:oauth:grant-type:jwt-bearer"
        if args.jwt_bearer_file and form.get("grant_type") == jwt_bearer:
            with open(args.jwt_bearer_file) as f:
                trusted = f.read().strip()
            if form.get("assertion") != trusted:
                rec.bump("refused")
                return error(400, "invalid_grant", "the assertion is not trusted")
            t = tokens.grant("workload", args.token_ttl)
            rec.issued(t)
            rec.bump("jwt_bearer")
            return JSONResponse({"access_token": t, "token_type": "Bearer", "expires_in": args.token_ttl})
        if form.get("grant_type") != "client_credentials":
            rec.bump("refused")
            return error(400, "unsupported_grant_type", "only client_credentials")
        client_id, secret = form.get("client_id"), form.get("client_secret")
        header = request.headers.get("authorization", "")
        if header.startswith("Basic "):
            raw = base64.b64decode(header[6:]).decode()
            cid, _, sec = raw.partition(":")
            client_id, secret = unquote_plus(cid), unquote_plus(sec)
        if args.grant_delay:
            await asyncio.sleep(args.grant_delay)
        if client_id == args.refuse_client:
            rec.bump("refused")
            return error(400, "unauthorized_client", "this client may not use client_credentials")
        if client_id != args.client_id or secret != args.client_secret:
            rec.bump("refused")
            return error(401, "invalid_client", "unknown client or wrong secret")
        t = tokens.grant(client_id, args.token_ttl)
        rec.issued(t)
        rec.bump("grants")
        return JSONResponse(
            {"access_token": t, "token_type": "Bearer", "expires_in": args.token_ttl},
            headers={"Cache-Control": "no-store"},
        )

    @mcp.tool()
    def echo(message: str) -> str:
        """Echo the message back unchanged."""
        return message

    @mcp.tool()
    def add(a: int, b: int) -> int:
        """Add two integers."""
        return a + b

    return mcp


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port-file")
    ap.add_argument("--client-id", default="svc-client")
    ap.add_argument("--client-secret", default="svc-secret")
    ap.add_argument("--refuse-client")
    ap.add_argument("--jwt-bearer-file")
    ap.add_argument("--token-ttl", type=int, default=3600)
    ap.add_argument("--grant-delay", type=float, default=0.0)
    ap.add_argument("--record-dir")
    ap.add_argument("--log-level", default="WARNING")
    args = ap.parse_args()
    sock = listen("fastmcp_client_credentials", args.host, args.port, args.port_file)
    port = sock.getsockname()[1]
    rec = Record(args.record_dir)
    server = build(f"http://{args.host}:{port}", args, rec)
    server.run(
        "http",
        show_banner=False,
        host=args.host,
        port=port,
        log_level=args.log_level,
        path="/mcp",
        sockets=[sock],
    )


if __name__ == "__main__":
    main()
