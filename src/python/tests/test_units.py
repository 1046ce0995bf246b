"""The binding's pieces without a daemon: the error mapping, the editor filter, finding the
daemon."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import httpx
import pytest

import albedo_mcp
from albedo_mcp import (
    BadArguments,
    NeedsSignIn,
    NotRun,
    ServerError,
    ServerUnavailable,
    SessionNotFound,
    UnknownOutcome,
    UnknownTool,
    error_from_answer,
)
from albedo_mcp._client import McpSession
from albedo_mcp._locate import Endpoint, locate, parse_daemon


def answer(code: str, outcome: str | None, rpc: Any = None, message: str = "m") -> dict[str, Any]:
    err: dict[str, Any] = {"code": code, "message": message}
    if rpc is not None:
        err["rpc"] = rpc
    body: dict[str, Any] = {"error": err}
    if outcome is not None:
        body["outcome"] = outcome
    return body


@pytest.mark.parametrize(
    ("status", "body", "kind"),
    [
        (503, answer("unavailable", "not_run"), ServerUnavailable),
        (503, answer("needs_sign_in", "not_run"), NeedsSignIn),
        (503, answer("not_run", "not_run"), NotRun),
        (404, answer("no_such_tool", "not_run"), UnknownTool),
        (404, answer("not_found", None, message="no such session"), SessionNotFound),
        (404, answer("not_found", None, message="no such tool"), UnknownTool),
        (400, answer("bad_request", "not_run"), BadArguments),
        (413, answer("payload_too_large", None), BadArguments),
        (502, answer("outcome_unknown", "unknown"), UnknownOutcome),
        (502, answer("server_error", "error", {"code": -32602, "message": "bad"}), BadArguments),
        (502, answer("server_error", "error", {"code": -32603, "message": "x"}), ServerError),
        (502, answer("invalid_result", "error"), ServerError),
        (401, answer("unauthorized", None), NotRun),
        (429, answer("too_many_sessions", "not_run"), NotRun),
        (500, answer("internal", None), UnknownOutcome),
        (502, None, UnknownOutcome),
    ],
)
def test_error_mapping(status: int, body: Any, kind: type) -> None:
    e = error_from_answer(status, body, "a/b")
    assert type(e) is kind, (e, kind)
    assert e.status == status and e.tool == "a/b"
    assert e.ran is {NotRun: False, UnknownOutcome: None, ServerError: True}[next(
        k for k in (NotRun, UnknownOutcome, ServerError) if isinstance(e, k)
    )]


def test_the_exception_tree() -> None:
    for k in (albedo_mcp.ServerUnavailable, albedo_mcp.NeedsSignIn, albedo_mcp.UnknownTool,
              albedo_mcp.BadArguments, albedo_mcp.SessionNotFound, albedo_mcp.DaemonUnreachable,
              albedo_mcp.ConfigError):
        assert issubclass(k, albedo_mcp.NotRun) and k.ran is False
    for k in (albedo_mcp.TransportLost, albedo_mcp.TimedOut):
        assert issubclass(k, albedo_mcp.UnknownOutcome) and k.ran is None
    assert albedo_mcp.ServerError.ran is True
    assert all(issubclass(k, albedo_mcp.McpError) for k in (albedo_mcp.NotRun, albedo_mcp.UnknownOutcome))


async def test_tools_of_another_extension_are_never_listed_minted_or_called() -> None:
    """If the daemon ever lists editor-supplied tools (marked with their `extension`), the
    binding hides them."""
    calls: list[str] = []

    def handler(req: httpx.Request) -> httpx.Response:
        calls.append(f"{req.method} {req.url.raw_path.decode()}")
        if req.url.path.endswith("/tools"):
            return httpx.Response(200, json={"generation": 3, "tools": [
                {"name": "mcp__a__t", "server": "a", "tool": "t", "description": "", "inputSchema": {}},
                {"name": "editor__e__t", "server": "e", "tool": "t", "description": "",
                 "inputSchema": {}, "extension": "editor-mcp"},
            ]})
        return httpx.Response(200, json={"outcome": "ok", "content": []})

    http = httpx.AsyncClient(transport=httpx.MockTransport(handler), base_url="http://localhost")
    mcp = McpSession(http, Endpoint("http://localhost"), "s1-x", owned=False, follow=False)
    tools = await mcp.tools()
    assert [t.name for t in tools] == ["mcp__a__t"] and set(mcp.servers) == {"a"}
    with pytest.raises(UnknownTool):
        await mcp.call("editor__e__t")
    with pytest.raises(UnknownTool):
        await mcp.describe("editor__e__t")
    assert (await mcp.a.t()).isError is False
    assert calls == ["GET /sessions/s1-x/tools?all=true", "POST /sessions/s1-x/tools/mcp__a__t/call"]
    await mcp.aclose()


async def test_names_are_percent_encoded_as_one_segment() -> None:
    seen: list[str] = []

    def handler(req: httpx.Request) -> httpx.Response:
        seen.append(req.url.raw_path.decode())
        return httpx.Response(200, json={"outcome": "ok", "content": [], "isError": True})

    http = httpx.AsyncClient(transport=httpx.MockTransport(handler), base_url="http://localhost")
    mcp = McpSession(http, Endpoint("http://localhost"), "s1-x", owned=False, follow=False)
    r = await mcp.call("srv/odd?#% name/x")
    assert r.isError is True
    assert seen == ["/sessions/s1-x/tools/srv%2Fodd%3F%23%25%20name%2Fx/call"]
    await mcp.aclose()


def test_parse_daemon_like_the_cli() -> None:
    assert parse_daemon("7420") == ("url", "http://127.0.0.1:7420")
    assert parse_daemon("localhost:9") == ("url", "http://localhost:9")
    assert parse_daemon("example.test") == ("url", "http://example.test:7420")
    assert parse_daemon("https://h:1/") == ("url", "https://h:1")
    assert parse_daemon("unix:/x/s") == ("socket", "/x/s")
    assert parse_daemon("./s") == ("socket", "./s")
    assert parse_daemon("~/s")[1] == str(Path.home() / "s")
    for bad in ("", "ftp://h", "http://u:p@h:1", "http://h:1/?q"):
        with pytest.raises(albedo_mcp.ConfigError):
            parse_daemon(bad)


def test_locate_the_token_goes_to_loopback_and_the_configured_address_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for k in ("ALBEDO_DAEMON", "ALBEDO_TOKEN", "ALBEDO_LISTEN", "ALBEDO_HOME", "ALBEDO_TLS_CERT"):
        monkeypatch.delenv(k, raising=False)
    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    tok = "albedo_" + "t" * 43
    (home / "api-token").write_text(tok + "\n")
    os.chmod(home / "api-token", 0o600)
    (home / "config.toml").write_text('listen = "0.0.0.0:7555"\n')
    # No socket answers: TCP at the configured address, wildcard over loopback.
    ep = locate(home=home)
    assert ep.uds is None and ep.base_url == "http://127.0.0.1:7555" and ep.token == tok
    assert tok not in repr(ep)
    assert locate("127.0.0.2:1", home=home).token == tok
    assert locate("http://daemon.example:7420", home=home).token is None
    monkeypatch.setenv("ALBEDO_TOKEN", "albedo_" + "e" * 43)
    assert locate("http://daemon.example:7420", home=home).token == "albedo_" + "e" * 43
    monkeypatch.delenv("ALBEDO_TOKEN")
    monkeypatch.setenv("ALBEDO_LISTEN", "127.0.0.1:7999")
    assert locate(home=home).base_url == "http://127.0.0.1:7999"
    monkeypatch.setenv("ALBEDO_DAEMON", "unix:/nowhere.sock")
    assert locate(home=home).uds == "/nowhere.sock"
    monkeypatch.delenv("ALBEDO_DAEMON")
    # A token file others can read is refused, as the daemon refuses it.
    os.chmod(home / "api-token", 0o644)
    with pytest.raises(albedo_mcp.ConfigError):
        locate(home=home)


def test_the_package_builds_a_typed_wheel(tmp_path: Path) -> None:
    import subprocess
    import sys
    import zipfile

    import shutil

    # A copy: building in the tree would leave build/ and *.egg-info there.
    src = tmp_path / "src"
    shutil.copytree(
        Path(albedo_mcp.__file__).parents[1],
        src,
        ignore=shutil.ignore_patterns("tests", "build", "*.egg-info", "__pycache__", ".pytest_cache"),
    )
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(tmp_path / "dist"),
         str(src)],
        check=True,
        cwd=tmp_path,
    )
    (wheel,) = (tmp_path / "dist").glob("albedo_mcp-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "albedo_mcp/py.typed" in names and "albedo_mcp/_client.py" in names
    meta = next(n for n in names if n.endswith("METADATA"))
    text = zipfile.ZipFile(wheel).read(meta).decode()
    required = [line for line in text.splitlines() if line.startswith("Requires-Dist:") and "extra ==" not in line]
    assert [r.split()[1].split("<")[0].split(">")[0] for r in required] == ["httpx", "sniffio"], required


def test_the_package_is_typed_strictly() -> None:
    """`py.typed` promises types: mypy --strict finds nothing in the package."""
    import subprocess
    import sys

    pkg = Path(albedo_mcp.__file__).parent
    r = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-incremental", "--cache-dir", "/dev/null", str(pkg)],
        capture_output=True,
        text=True,
        cwd=pkg.parent,
    )
    assert r.returncode == 0, r.stdout + r.stderr
