#!/usr/bin/env python3
"""An MCP server behind an authorization server that only allows the client credentials grant.

No packaged server offers the grants of the MCP authorization extensions, so this one is ours:
FastMCP 4.2.3 serves the MCP endpoint (Streamable HTTP at http://127.0.0.1:PORT/mcp) with a
`RemoteAuthProvider` (its Protected Resource Metadata names this process as the authorization
server, and its bearer check answers 401 with `WWW-Authenticate: Bearer ... resource_metadata=`
without a valid token); two custom routes are the authorization server:
    /.well-known/oauth-authorization-server   RFC 8414 metadata: grant_types_supported is
                                              ["client_credentials"] (and the JWT bearer grant
                                              with the flags below); no authorization_endpoint,
                                              no code_challenge_methods_supported and no
                                              response types, as RFC 8414 section 2 allows a
                                              server no grant of which uses the authorization
                                              endpoint (/authorize still answers, and counts,
                                              any request that tries a browser grant anyway)
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
    --idp-id-token-file FILE                 an enterprise identity provider too, at /idp/token:
                                             the RFC 8693 token exchange of the ID token in FILE
                                             (subject_token_type id_token, requested_token_type
                                             id-jag, audience this issuer, resource the MCP URL)
                                             for an identity assertion, which /token then takes
                                             in the JWT bearer grant from the client
                                             authenticated with its secret (SEP-990)
    --client-public-key FILE                 also authenticate the client by private_key_jwt
                                             (RFC 7523 section 2.2): a client_assertion verified
                                             with this PEM public key (ES256 or RS256), `aud`
                                             the issuer, `iss` = `sub` = the client id, `exp`
    --dpop                                   DPoP (RFC 9449): the metadata lists ES256 in
                                             dpop_signing_alg_values_supported, a grant needs a
                                             valid proof (PyJWT verifies it: typ, jwk, signature,
                                             htm, htu, iat, a new jti) and gets a token_type DPoP
                                             token bound to the proof key's thumbprint; the MCP
                                             endpoint then takes only `Authorization: DPoP` with
                                             a valid proof (and ath, and the bound key), else 401
    --dpop-nonce N                           with --dpop: the token endpoint answers a proof
                                             without nonce N 400 use_dpop_nonce, the MCP endpoint
                                             401 `DPoP error="use_dpop_nonce"`, both with
                                             `DPoP-Nonce: N`
    --record-dir DIR                         DIR/counts.json: {"grants", "refused", "authorize",
                                             "jwt_bearer", "assertions", "exchanges", "dpop_ok", "dpop_bad", "as_nonce",
                                             "rs_nonce"}
                                             kept up to date; every token granted appended to
                                             DIR/issued.txt
Tools: echo(message) -> message; add(a, b) -> a + b.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import hashlib
import json
import os
import secrets
import time
from urllib.parse import unquote_plus

from _listen import listen

os.environ.setdefault("FASTMCP_SHOW_SERVER_BANNER", "false")
os.environ.setdefault("FASTMCP_CHECK_FOR_UPDATES", "off")

import jwt  # noqa: E402  (PyJWT, with cryptography)
import uvicorn  # noqa: E402
from fastmcp import FastMCP  # noqa: E402
from fastmcp.server.auth.auth import AccessToken, RemoteAuthProvider, TokenVerifier  # noqa: E402
from starlette.requests import Request  # noqa: E402
from starlette.responses import JSONResponse  # noqa: E402


class Record:
    def __init__(self, folder: str | None):
        self.folder = folder
        self.counts = {
            "grants": 0,
            "refused": 0,
            "authorize": 0,
            "jwt_bearer": 0,
            "assertions": 0,
            "exchanges": 0,
            "dpop_ok": 0,
            "dpop_bad": 0,
            "as_nonce": 0,
            "rs_nonce": 0,
        }
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
        self.bound: dict[str, str] = {}

    def grant(self, client_id: str, ttl: int) -> str:
        token = "cc-" + secrets.token_urlsafe(24)
        self.live[token] = (client_id, int(time.time()) + ttl)
        return token

    async def verify_token(self, token: str) -> AccessToken | None:
        found = self.live.get(token)
        if found is None or found[1] < time.time():
            return None
        return AccessToken(token=token, client_id=found[0], scopes=[], expires_at=found[1])


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def thumbprint(jwk: dict) -> str:
    """RFC 7638 of an EC key."""
    canon = json.dumps(
        {"crv": jwk["crv"], "kty": jwk["kty"], "x": jwk["x"], "y": jwk["y"]},
        separators=(",", ":"),
        sort_keys=True,
    )
    return b64url(hashlib.sha256(canon.encode()).digest())


SEEN_JTI: set[str] = set()


def check_proof(proof: str | None, method: str, url: str, token: str | None) -> tuple[dict, str]:
    """A DPoP proof checked (RFC 9449 section 4.3): its claims and its key's thumbprint."""
    if not proof or "," in proof:
        raise ValueError("no single DPoP proof")
    head = jwt.get_unverified_header(proof)
    if head.get("typ") != "dpop+jwt" or head.get("alg") != "ES256":
        raise ValueError("typ/alg")
    jwk = head.get("jwk") or {}
    if "d" in jwk:
        raise ValueError("private key in jwk")
    key = jwt.PyJWK(jwk, "ES256")
    claims = jwt.decode(proof, key.key, algorithms=["ES256"], options={"verify_aud": False})
    if claims.get("htm") != method or claims.get("htu") != url:
        raise ValueError(f"htm/htu {claims.get('htm')} {claims.get('htu')}")
    if abs(time.time() - claims.get("iat", 0)) > 300:
        raise ValueError("iat")
    jti = claims.get("jti")
    if not isinstance(jti, str) or jti in SEEN_JTI:
        raise ValueError("jti replayed")
    SEEN_JTI.add(jti)
    if token is not None:
        if claims.get("ath") != b64url(hashlib.sha256(token.encode()).digest()):
            raise ValueError("ath")
    return claims, thumbprint(jwk)


class DpopGate:
    """In front of the whole app: `Authorization: DPoP` with a valid proof becomes the bearer
    FastMCP checks; anything else at /mcp is refused with a DPoP challenge."""

    def __init__(self, app, base: str, args, rec, tokens):
        self.app, self.base, self.args, self.rec, self.tokens = app, base, args, rec, tokens

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope["path"] != "/mcp":
            return await self.app(scope, receive, send)
        headers = {k.decode().lower(): v.decode() for k, v in scope["headers"]}
        auth = headers.get("authorization", "")
        scheme, _, token = auth.partition(" ")
        challenge = f'DPoP resource_metadata="{self.base}/.well-known/oauth-protected-resource/mcp"'
        try:
            if scheme.lower() != "dpop":
                raise ValueError("not the DPoP scheme")
            claims, jkt = check_proof(
                headers.get("dpop"), scope["method"], f"{self.base}/mcp", token
            )
            if self.tokens.bound.get(token) != jkt:
                raise ValueError("not the key the token is bound to")
        except Exception as e:  # noqa: BLE001  (any bad proof is a 401)
            self.rec.bump("dpop_bad")
            return await reply(send, 401, {"error": "invalid_token", "error_description": str(e)},
                               [("www-authenticate", challenge)])
        if self.args.dpop_nonce and claims.get("nonce") != self.args.dpop_nonce:
            self.rec.bump("rs_nonce")
            return await reply(send, 401, {"error": "use_dpop_nonce"}, [
                ("www-authenticate", 'DPoP error="use_dpop_nonce"'),
                ("dpop-nonce", self.args.dpop_nonce),
            ])
        self.rec.bump("dpop_ok")
        scope = dict(scope)
        scope["headers"] = [
            (k, f"Bearer {token}".encode() if k.lower() == b"authorization" else v)
            for k, v in scope["headers"]
            if k.lower() != b"dpop"
        ]
        return await self.app(scope, receive, send)


async def reply(send, status: int, body: dict, headers: list) -> None:
    raw = json.dumps(body).encode()
    hs = [(b"content-type", b"application/json"), (b"content-length", str(len(raw)).encode())]
    hs += [(k.encode(), v.encode()) for k, v in headers]
    await send({"type": "http.response.start", "status": status, "headers": hs})
    await send({"type": "http.response.body", "body": raw})


def error(status: int, code: str, description: str) -> JSONResponse:
    return JSONResponse({"error": code, "error_description": description}, status_code=status)


def build(base: str, args, rec: Record) -> tuple[FastMCP, Tokens]:
    tokens = Tokens(base_url=base)
    auth = RemoteAuthProvider(token_verifier=tokens, authorization_servers=[base], base_url=base)
    mcp = FastMCP("fastmcp-client-credentials", version="1.0.0", auth=auth)

    @mcp.custom_route("/.well-known/oauth-authorization-server", methods=["GET"])
    async def metadata(request: Request) -> JSONResponse:
        return JSONResponse(
            {
                "issuer": base,
                "token_endpoint": f"{base}/token",
                "grant_types_supported": ["client_credentials"]
                + (
                    ["urn:ietf:params:oauth:grant-type:jwt-bearer"]
                    if args.jwt_bearer_file or args.idp_id_token_file
                    else []
                ),
                "token_endpoint_auth_methods_supported": [
                    "client_secret_basic",
                    "client_secret_post",
                ]
                + (["private_key_jwt"] if args.client_public_key else []),
                "response_types_supported": [],
                **({"dpop_signing_alg_values_supported": ["ES256"]} if args.dpop else {}),
            }
        )

    issued_assertions: set[str] = set()

    @mcp.custom_route("/idp/token", methods=["POST"])
    async def idp_token(request: Request) -> JSONResponse:
        form = await request.form()
        if not args.idp_id_token_file:
            return error(404, "not_found", "no identity provider here")
        with open(args.idp_id_token_file) as f:
            id_token = f.read().strip()
        want = {
            "grant_type": "urn:ietf:params:oauth:grant-type:token-exchange",
            "subject_token": id_token,
            "subject_token_type": "urn:ietf:params:oauth:token-type:id_token",
            "requested_token_type": "urn:ietf:params:oauth:token-type:id-jag",
            "audience": base,
            "resource": f"{base}/mcp",
        }
        wrong = [k for k, v in want.items() if form.get(k) != v]
        if wrong:
            rec.bump("refused")
            return error(400, "invalid_request", "wrong or missing: " + ", ".join(wrong))
        assertion = "idjag-" + secrets.token_urlsafe(24)
        issued_assertions.add(assertion)
        rec.issued(assertion)
        rec.bump("exchanges")
        return JSONResponse(
            {
                "access_token": assertion,
                "issued_token_type": "urn:ietf:params:oauth:token-type:id-jag",
                "token_type": "N_A",
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
        if args.idp_id_token_file and form.get("grant_type") == jwt_bearer:
            header = request.headers.get("authorization", "")
            raw = base64.b64decode(header[6:]).decode() if header.startswith("Basic ") else ":"
            cid, _, sec = raw.partition(":")
            if (unquote_plus(cid), unquote_plus(sec)) != (args.client_id, args.client_secret):
                rec.bump("refused")
                return error(401, "invalid_client", "client_secret_basic expected")
            if form.get("assertion") not in issued_assertions:
                rec.bump("refused")
                return error(400, "invalid_grant", "not an identity assertion this issuer knows")
            t = tokens.grant(args.client_id, args.token_ttl)
            rec.issued(t)
            rec.bump("jwt_bearer")
            return JSONResponse({"access_token": t, "token_type": "Bearer", "expires_in": args.token_ttl})
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
        if args.client_public_key and form.get("client_assertion_type") == (
            "urn:ietf:params:oauth:client-assertion-type:jwt-bearer"
        ):
            with open(args.client_public_key) as f:
                public = f.read()
            try:
                claims = jwt.decode(
                    form.get("client_assertion", ""),
                    public,
                    algorithms=["ES256", "RS256"],
                    audience=[base, base + "/"],
                    options={"require": ["exp", "iat", "jti", "iss", "sub", "aud"]},
                )
            except Exception as e:  # noqa: BLE001
                rec.bump("refused")
                return error(401, "invalid_client", f"client assertion: {e}")
            if claims["iss"] != args.client_id or claims["sub"] != args.client_id:
                rec.bump("refused")
                return error(401, "invalid_client", "iss/sub is not the client id")
            rec.bump("assertions")
            # Authenticated by its key: as good as the right secret.
            client_id, secret = args.client_id, args.client_secret
        if args.grant_delay:
            await asyncio.sleep(args.grant_delay)
        if client_id == args.refuse_client:
            rec.bump("refused")
            return error(400, "unauthorized_client", "this client may not use client_credentials")
        if client_id != args.client_id or secret != args.client_secret:
            rec.bump("refused")
            return error(401, "invalid_client", "unknown client or wrong secret")
        jkt = None
        if args.dpop:
            try:
                claims, jkt = check_proof(request.headers.get("dpop"), "POST", f"{base}/token", None)
            except Exception as e:  # noqa: BLE001
                rec.bump("dpop_bad")
                return error(400, "invalid_dpop_proof", str(e))
            if args.dpop_nonce and claims.get("nonce") != args.dpop_nonce:
                rec.bump("as_nonce")
                r = error(400, "use_dpop_nonce", "a nonce is required")
                r.headers["DPoP-Nonce"] = args.dpop_nonce
                return r
        t = tokens.grant(client_id, args.token_ttl)
        if jkt:
            tokens.bound[t] = jkt
        rec.issued(t)
        rec.bump("grants")
        return JSONResponse(
            {
                "access_token": t,
                "token_type": "DPoP" if jkt else "Bearer",
                "expires_in": args.token_ttl,
            },
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

    return mcp, tokens


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port-file")
    ap.add_argument("--client-id", default="svc-client")
    ap.add_argument("--client-secret", default="svc-secret")
    ap.add_argument("--refuse-client")
    ap.add_argument("--jwt-bearer-file")
    ap.add_argument("--client-public-key")
    ap.add_argument("--idp-id-token-file")
    ap.add_argument("--dpop", action="store_true")
    ap.add_argument("--dpop-nonce")
    ap.add_argument("--token-ttl", type=int, default=3600)
    ap.add_argument("--grant-delay", type=float, default=0.0)
    ap.add_argument("--record-dir")
    ap.add_argument("--log-level", default="WARNING")
    args = ap.parse_args()
    sock = listen("fastmcp_client_credentials", args.host, args.port, args.port_file)
    port = sock.getsockname()[1]
    rec = Record(args.record_dir)
    base = f"http://{args.host}:{port}"
    server, tokens = build(base, args, rec)
    if not args.dpop:
        server.run(
            "http",
            show_banner=False,
            host=args.host,
            port=port,
            log_level=args.log_level,
            path="/mcp",
            sockets=[sock],
        )
        return
    app = DpopGate(server.http_app(path="/mcp"), base, args, rec, tokens)
    config = uvicorn.Config(app, log_level=args.log_level.lower(), lifespan="on")
    asyncio.run(uvicorn.Server(config).serve(sockets=[sock]))


if __name__ == "__main__":
    main()
