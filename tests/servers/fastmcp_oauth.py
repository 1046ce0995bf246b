#!/usr/bin/env python3
"""OAuth-protected test server written with FastMCP 4.2.3 and its InMemoryOAuthProvider.

One process is both the MCP server (Streamable HTTP at http://127.0.0.1:PORT/mcp, which answers
401 with `WWW-Authenticate: Bearer ... resource_metadata=...` without a valid token) and its
authorization server (the SDK's routes, as FastMCP mounts them):
    /.well-known/oauth-protected-resource/mcp   Protected Resource Metadata (RFC 9728)
    /.well-known/oauth-authorization-server     AS metadata (RFC 8414), issuer http://127.0.0.1:PORT/
    /register   Dynamic Client Registration (RFC 7591)
    /authorize  auto-approves: answers 302 to the redirect_uri with code and state at once
    /token      authorization_code (PKCE S256) and refresh_token grants (refresh tokens rotate)
    /revoke     token revocation
Nothing here mocks the protocol: the handlers are the SDK's; the provider only counts, can be
told to refuse refreshes, and keeps a refresh token usable after its access token expired (the
in-memory provider revoked both when an expired access token was presented).

Run with the peers venv:  .peers/venv/bin/python tests/servers/fastmcp_oauth.py
    --port N                 default 0 (a free port); binds 127.0.0.1 (--host to change)
    --port-file FILE         write the bound port (decimal, newline) once the socket listens
    --token-ttl SECS         access token lifetime, also the `expires_in` granted (default 3600).
                             albedo refreshes a token within 60 s of its expiry, so a TTL of 63
                             looks fresh for about 3 s and then is refreshed before a request.
    --hide-expiry            grant tokens without `expires_in` (the client only learns of the
                             expiry from a 401)
    --refresh-delay SECS     wait this long in each refresh_token grant before answering
                             (default 0), so that concurrent refreshes would overlap
    --refuse-refresh-file F  while F exists, refresh_token grants are refused (invalid_grant)
    --record-dir DIR         keep DIR/counts.json up to date: {"register", "authorize", "code",
                             "refresh", "refresh_refused", "revoke", "resources"} (numbers of
                             each request the provider handled; "resources" the RFC 8707
                             `resource` of each authorization), and append every token granted
                             (access and refresh, one a line) to DIR/issued.txt, and every
                             bearer token a request to the MCP endpoint presented to
                             DIR/presented.txt
    --scopes "A B"           the scopes clients may register and ask for (default "mcp:tools");
                             the Protected Resource Metadata lists them in scopes_supported
    --required-scopes "A B"  scopes every request's token must have: one without them is
                             answered 403 insufficient_scope (the challenge names them)
    --grant-first-only "A"   the first authorization grants only these of the scopes asked
                             for (a user who approved less), later ones all of them
    --id-token-email EMAIL   the code grant also answers an OpenID Connect `id_token` (HS256,
                             a key of this process) with iss = the issuer, aud = the client,
                             sub "user-1" and this `email`, as an OIDC provider would
    --log-level LEVEL        default WARNING (stderr)

Tools:
  echo(message: str) -> str   returns message unchanged
  whoami() -> str             JSON {"client_id": ..., "scopes": [...]} of the caller's token
                              (never the token)
  add(a: int, b: int) -> int  returns a + b
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import time

from _listen import listen

os.environ.setdefault("FASTMCP_SHOW_SERVER_BANNER", "false")
os.environ.setdefault("FASTMCP_CHECK_FOR_UPDATES", "off")

from fastmcp import FastMCP  # noqa: E402
from fastmcp.server.auth.auth import ClientRegistrationOptions, RevocationOptions  # noqa: E402
from fastmcp.server.auth.providers import in_memory  # noqa: E402
from fastmcp.server.auth.providers.in_memory import InMemoryOAuthProvider  # noqa: E402
from fastmcp.server.dependencies import get_access_token  # noqa: E402
from mcp.server.auth.provider import TokenError  # noqa: E402
from mcp.shared.auth import OAuthToken  # noqa: E402


class OidcToken(OAuthToken):
    """A token answer with an OpenID Connect ID token."""

    id_token: str | None = None


class Recorder:
    """counts.json and issued.txt in the record folder (nothing when there is none)."""

    def __init__(self, folder: str | None):
        self.folder = folder
        self.counts: dict = {
            "register": 0,
            "authorize": 0,
            "code": 0,
            "refresh": 0,
            "refresh_refused": 0,
            "revoke": 0,
            "resources": [],
        }
        self._write()

    def bump(self, what: str) -> None:
        self.counts[what] += 1
        self._write()

    def resource(self, value: str | None) -> None:
        self.counts["resources"].append(value)
        self._write()

    def issued(self, *tokens: str | None) -> None:
        if not self.folder:
            return
        with open(os.path.join(self.folder, "issued.txt"), "a") as f:
            for t in tokens:
                if t:
                    f.write(t + "\n")

    def presented(self, token: str) -> None:
        if not self.folder:
            return
        with open(os.path.join(self.folder, "presented.txt"), "a") as f:
            f.write(token.replace("\n", " ") + "\n")

    def _write(self) -> None:
        if not self.folder:
            return
        path = os.path.join(self.folder, "counts.json")
        with open(path + ".tmp", "w") as f:
            json.dump(self.counts, f)
        os.replace(path + ".tmp", path)


class TestProvider(InMemoryOAuthProvider):
    """The in-memory provider, counting what it does, with refreshes that can be refused."""

    def __init__(
        self, *, rec: Recorder, refuse_file, refresh_delay, hide_expiry, grant_first_only, **kw
    ):
        super().__init__(**kw)
        self.grant_first_only = grant_first_only
        self.rec = rec
        self.refuse_file = refuse_file
        self.refresh_delay = refresh_delay
        self.hide_expiry = hide_expiry
        self.id_token_email = None
        self.issuer = None

    def _granted(self, token):
        self.rec.issued(token.access_token, token.refresh_token)
        if self.hide_expiry:
            token.expires_in = None
        return token

    async def register_client(self, client_info):
        await super().register_client(client_info)
        self.rec.bump("register")

    async def authorize(self, client, params):
        self.rec.bump("authorize")
        self.rec.resource(params.resource)
        if self.grant_first_only is not None and self.rec.counts["authorize"] == 1:
            params.scopes = [x for x in (params.scopes or []) if x in self.grant_first_only]
        return await super().authorize(client, params)

    async def exchange_authorization_code(self, client, authorization_code):
        token = await super().exchange_authorization_code(client, authorization_code)
        self.rec.bump("code")
        token = self._granted(token)
        if self.id_token_email:
            import secrets

            import jwt

            now = int(time.time())
            claims = {
                "iss": self.issuer,
                "aud": client.client_id,
                "sub": "user-1",
                "email": self.id_token_email,
                "iat": now,
                "exp": now + 3600,
            }
            id_token = jwt.encode(claims, secrets.token_bytes(32), algorithm="HS256")
            token = OidcToken(**token.model_dump(), id_token=id_token)
        return token

    async def exchange_refresh_token(self, client, refresh_token, scopes):
        if self.refresh_delay:
            await asyncio.sleep(self.refresh_delay)
        if self.refuse_file and os.path.exists(self.refuse_file):
            self.rec.bump("refresh_refused")
            raise TokenError("invalid_grant", "refresh refused (the test's refuse-refresh file exists)")
        token = await super().exchange_refresh_token(client, refresh_token, scopes)
        self.rec.bump("refresh")
        return self._granted(token)

    async def load_access_token(self, token: str):
        self.rec.presented(token)
        # The in-memory provider revokes an expired access token's refresh token too when the
        # token is presented, so a client that learns of the expiry from the 401 could never
        # refresh. Authorization servers keep the refresh token: so does this one.
        tok = self.access_tokens.get(token)
        if tok is not None and tok.expires_at is not None and tok.expires_at < time.time():
            return None
        return tok

    async def revoke_token(self, token):
        await super().revoke_token(token)
        self.rec.bump("revoke")


def build(base_url: str, args, rec: Recorder) -> FastMCP:
    in_memory.DEFAULT_ACCESS_TOKEN_EXPIRY_SECONDS = args.token_ttl
    scopes = args.scopes.split() or None
    auth = TestProvider(
        rec=rec,
        refuse_file=args.refuse_refresh_file,
        refresh_delay=args.refresh_delay,
        hide_expiry=args.hide_expiry,
        grant_first_only=args.grant_first_only.split() if args.grant_first_only else None,
        base_url=base_url,
        required_scopes=args.required_scopes.split() or None,
        client_registration_options=ClientRegistrationOptions(
            enabled=True, valid_scopes=scopes, default_scopes=scopes
        ),
        revocation_options=RevocationOptions(enabled=True),
    )
    auth.id_token_email = args.id_token_email
    auth.issuer = base_url.rstrip("/") + "/"
    mcp = FastMCP(
        "fastmcp-oauth",
        version="1.0.0",
        instructions="albedo-mcp test server (FastMCP 4.2.3, OAuth-protected)",
        auth=auth,
    )

    @mcp.tool()
    def echo(message: str) -> str:
        """Echo the message back unchanged."""
        return message

    @mcp.tool()
    def whoami() -> str:
        """The client id and scopes of the caller's access token."""
        tok = get_access_token()
        if tok is None:
            return json.dumps({"client_id": None, "scopes": []})
        return json.dumps({"client_id": tok.client_id, "scopes": list(tok.scopes)})

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
    ap.add_argument("--token-ttl", type=int, default=3600)
    ap.add_argument("--hide-expiry", action="store_true")
    ap.add_argument("--refresh-delay", type=float, default=0.0)
    ap.add_argument("--refuse-refresh-file")
    ap.add_argument("--record-dir")
    ap.add_argument("--scopes", default="mcp:tools")
    ap.add_argument("--required-scopes", default="")
    ap.add_argument("--grant-first-only")
    ap.add_argument("--id-token-email")
    ap.add_argument("--log-level", default="WARNING")
    args = ap.parse_args()
    sock = listen("fastmcp_oauth", args.host, args.port, args.port_file)
    port = sock.getsockname()[1]
    rec = Recorder(args.record_dir)
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
