"""The binding against a live daemon and real servers (server-everything, the Python `mcp`
SDK server, the binding_tools.py fixture)."""

from __future__ import annotations

import asyncio
import json
import os
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

import albedo_mcp
from albedo_mcp import (
    BadArguments,
    DaemonUnreachable,
    NeedsSignIn,
    NotRun,
    ServerError,
    ServerUnavailable,
    SessionNotFound,
    TimedOut,
    TransportLost,
    UnknownOutcome,
    UnknownTool,
)

from .conftest import FIXTURES, PY_MCP_SERVER, VENV_PY, Daemon, everything, fixture, free_port, py_server


async def wait_for(pred: Any, timeout: float = 15.0, what: str = "the condition") -> None:
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.05)


@pytest.mark.parametrize("via", ["socket", "tcp"])
async def test_connect_lists_tools_and_closing_deletes_the_session(daemon: Daemon, via: str) -> None:
    mcp = await albedo_mcp.connect(**daemon.kwargs(via))
    try:
        assert mcp.owns_session
        if via == "socket":
            assert mcp.endpoint.uds and mcp.endpoint.uds.endswith("albedo.sock")
        else:
            assert mcp.endpoint.uds is None and mcp.endpoint.base_url == daemon.base
        tools = await mcp.tools()
        names = {t.name for t in tools}
        assert {"mcp__everything__echo", "mcp__py__add", "mcp__bt__grow"} <= names, names
        echo = next(t for t in tools if t.name == "mcp__everything__echo")
        assert echo.server == "everything" and echo.tool == "echo" and echo.path == "everything/echo"
        assert echo.description and echo.inputSchema["type"] == "object"
        assert "message" in echo.input_schema["properties"]
        # The built-in operations per server that offers resources or prompts.
        assert {"mcp__py__read_resource", "mcp__py__get_prompt"} <= names
        assert {t.server for t in await mcp.tools(server="py")} == {"py"}
        assert mcp.generation >= 1
        assert {"everything", "py", "bt"} <= set(mcp.servers)
        sid = mcp.session_id
        assert daemon.api.get(f"/sessions/{sid}").status_code == 200
    finally:
        await mcp.aclose()
    assert daemon.api.get(f"/sessions/{sid}").status_code == 404
    await mcp.aclose()  # idempotent


async def test_async_with_and_joining_an_existing_session_leaves_it_open(daemon: Daemon) -> None:
    sid = daemon.new_session()
    async with albedo_mcp.connect(sid, **daemon.kwargs()) as mcp:
        assert not mcp.owns_session and mcp.session_id == sid
        r = await mcp.py.echo(message="joined")
        assert r.text == "joined"
    assert daemon.api.get(f"/sessions/{sid}").status_code == 200
    daemon.api.delete(f"/sessions/{sid}")


async def test_describe_by_advertised_name_and_server_slash_tool(daemon: Daemon) -> None:
    async with albedo_mcp.connect(**daemon.kwargs()) as mcp:
        a = await mcp.describe("mcp__py__add")
        b = await mcp.describe("py/add")
        assert a == b
        assert a.name == "mcp__py__add" and a.server == "py" and a.tool == "add"
        assert set(a.inputSchema["properties"]) == {"a", "b"}
        rr = await mcp.describe("py/read_resource")
        assert rr.name == "mcp__py__read_resource" and rr.tool is None and rr.member == "read_resource"
        odd = await mcp.describe("bt/odd?#%name")
        assert odd.tool == "odd?#%name"
        with pytest.raises(UnknownTool) as e:
            await mcp.describe("py/no_such")
        assert e.value.ran is False and e.value.status == 404


async def test_call_both_name_forms_minted_methods_and_non_identifier_names(daemon: Daemon) -> None:
    async with albedo_mcp.connect(**daemon.kwargs()) as mcp:
        r1 = await mcp.call("mcp__everything__echo", {"message": "one"})
        r2 = await mcp.call("everything/echo", message="two")
        r3 = await mcp.everything.echo(message="three")
        assert [r.text for r in (r1, r2, r3)] == ["Echo: one", "Echo: two", "Echo: three"]
        assert not r1.isError and not r1.is_error
        assert r1.content == [{"type": "text", "text": "Echo: one"}]
        # Non-identifier names: getattr, item access, server(), and call with server/tool.
        s = await getattr(mcp.everything, "get-sum")(a=2, b=3)
        assert "5" in s.text, s
        assert "5" in (await mcp.server("everything")["get-sum"]({"a": 1, "b": 4})).text.replace("1 + 4", "")
        d = await getattr(mcp.bt, "dotted.name")(x=1)
        assert json.loads(d.text) == {"x": 1}
        o = await mcp.call("bt/odd?#%name", {"k": "v"}, extra=True)
        assert json.loads(o.text) == {"k": "v", "extra": True}
        o2 = await getattr(mcp.bt, "odd?#%name")()
        assert json.loads(o2.text) == {}
        # structuredContent
        sc = await getattr(mcp.everything, "get-structured-content")(location="New York")
        assert isinstance(sc.structuredContent, dict) and sc.structured_content == sc.structuredContent
        # The built-in operations: `name` and `arguments` are the tool's own arguments.
        res = await mcp.py.read_resource(uri="memo://hello")
        assert res["contents"][0]["text"] == "Hello from py_mcp_server"
        pr = await mcp.call("py/get_prompt", name="greet", arguments={"name": "Bob"})
        assert pr["messages"][0]["content"]["text"] == "Hello, Bob!"
        # A minted method knows its tool; its docstring is the (untrusted) description.
        assert mcp.py.add.tool.name == "mcp__py__add" and mcp.py.add.__doc__ == "Add two integers."
        assert "add" in dir(mcp.py) and "py" in dir(mcp)
        with pytest.raises(AttributeError):
            mcp.py.no_such_tool  # noqa: B018
        with pytest.raises(AttributeError):
            mcp.no_such_server  # noqa: B018


async def test_results_are_data_never_evaluated(daemon: Daemon) -> None:
    payload = "__import__('os').system('echo pwned') {{7*7}} ${HOME} `id`"
    async with albedo_mcp.connect(**daemon.kwargs()) as mcp:
        r = await mcp.py.echo(message=payload)
        assert r.text == payload and r.content[0]["text"] == payload


async def test_a_tool_error_is_a_result_not_an_exception(daemon: Daemon) -> None:
    async with albedo_mcp.connect(**daemon.kwargs()) as mcp:
        r = await mcp.bt.tool_error()
        assert r.isError is True and r.text == "the tool failed"
        # The Python SDK reports invalid arguments as a tool error too.
        r = await mcp.py.add(a=1, b="not a number")
        assert r.isError is True and "validation error" in r.text


async def test_unknown_tool_both_name_forms_and_a_hidden_server(daemon: Daemon) -> None:
    async with albedo_mcp.connect(**daemon.kwargs()) as mcp:
        for name in ("py/nope", "mcp__py__nope", "nothing_like_a_tool"):
            with pytest.raises(UnknownTool) as e:
                await mcp.call(name)
            assert isinstance(e.value, NotRun) and e.value.ran is False
            assert e.value.status == 404 and e.value.code == "no_such_tool" and e.value.tool == name
        assert e.value.server is None
        with pytest.raises(UnknownTool):
            mcp.server("nope")


async def test_bad_arguments_in_every_form(daemon: Daemon) -> None:
    async with albedo_mcp.connect(**daemon.kwargs()) as mcp:
        with pytest.raises(BadArguments) as e:
            await mcp.call("py/read_resource")  # the daemon: read_resource needs a string uri
        assert e.value.status == 400 and e.value.ran is False
        with pytest.raises(BadArguments) as e:
            await mcp.call("py/echo", ["not", "a", "mapping"])  # type: ignore[arg-type]
        assert e.value.status is None
        with pytest.raises(BadArguments):
            await mcp.call("py/echo", message=object())
        with pytest.raises(BadArguments):
            await mcp.call("py/echo", message=float("nan"))
        # The server's JSON-RPC "invalid params": refused before the tool ran.
        with pytest.raises(BadArguments) as e:
            await mcp.bt.rpc_error(code=-32602)
        assert e.value.status == 502 and e.value.body["error"]["rpc"]["code"] == -32602


async def test_a_json_rpc_error_is_a_server_error_that_ran(daemon: Daemon) -> None:
    async with albedo_mcp.connect(**daemon.kwargs()) as mcp:
        with pytest.raises(ServerError) as e:
            await mcp.bt.rpc_error(code=-32000)
        assert e.value.ran is True and e.value.rpc["code"] == -32000
        assert e.value.rpc["message"] == "refused by the fixture"
        assert e.value.server == "bt"


async def test_a_server_that_exits_mid_call_is_an_unknown_outcome(fresh_daemon: Any) -> None:
    d: Daemon = fresh_daemon({"bt": fixture("binding_tools.py"), "x": fixture("exits_mid_call.py")})
    async with albedo_mcp.connect(**d.kwargs()) as mcp:
        for call in (mcp.bt.crash, mcp.x.crash):
            with pytest.raises(UnknownOutcome) as e:
                await call()
            assert e.value.ran is None and e.value.code == "outcome_unknown" and e.value.status == 502
        # Not retried, and the server is dialled again for the next call.
        assert (await mcp.bt.echo(message="back")).text == "back"


def sleep_logged(log: Path) -> bool:
    """The fixture received a call of its `sleep` tool (its --log)."""
    try:
        return '"name":"sleep"' in log.read_text()
    except OSError:
        return False


async def test_a_server_killed_mid_call_is_an_unknown_outcome(fresh_daemon: Any, tmp_path: Path) -> None:
    log = tmp_path / "bt.log"
    d: Daemon = fresh_daemon({"bt": fixture("binding_tools.py", "--log", str(log))})
    async with albedo_mcp.connect(**d.kwargs()) as mcp:
        call = asyncio.create_task(mcp.bt.sleep(seconds=30))
        await wait_for(lambda: sleep_logged(log), what="the call to reach the server")
        d.kill_child("binding_tools.py")
        with pytest.raises(UnknownOutcome) as e:
            await asyncio.wait_for(call, 20)
        assert type(e.value) is UnknownOutcome and e.value.ran is None


async def test_the_daemon_killed_mid_call_is_a_lost_transport(fresh_daemon: Any, tmp_path: Path) -> None:
    for via in ("socket", "tcp"):
        log = tmp_path / f"bt-{via}.log"
        d: Daemon = fresh_daemon({"bt": fixture("binding_tools.py", "--log", str(log))})
        mcp = await albedo_mcp.connect(**d.kwargs(via))
        call = asyncio.create_task(mcp.bt.sleep(seconds=30))
        await wait_for(lambda: sleep_logged(log), what="the call to reach the server")
        d.proc.kill()
        d.proc.wait()
        with pytest.raises(TransportLost) as e:
            await asyncio.wait_for(call, 20)
        assert isinstance(e.value, UnknownOutcome) and e.value.ran is None
        # With no daemon, the next request does not run.
        with pytest.raises(NotRun):
            await mcp.bt.echo(message="x")
        await mcp.aclose()


async def test_a_call_that_outlasts_the_binding_timeout_is_timed_out(daemon: Daemon) -> None:
    sid = daemon.new_session()  # made beforehand: opening one may take longer than the timeout
    async with albedo_mcp.connect(sid, **daemon.kwargs(), timeout=0.5) as mcp:
        with pytest.raises(TimedOut) as e:
            await mcp.bt.sleep(seconds=1.5)
        assert isinstance(e.value, UnknownOutcome) and e.value.ran is None
    daemon.api.delete(f"/sessions/{sid}")


async def test_the_daemon_call_timeout_is_an_unknown_outcome(fresh_daemon: Any) -> None:
    bt = {**fixture("binding_tools.py"), "callTimeoutMs": 300}
    d: Daemon = fresh_daemon({"bt": bt})
    async with albedo_mcp.connect(**d.kwargs()) as mcp:
        with pytest.raises(UnknownOutcome) as e:
            await mcp.bt.sleep(seconds=3)
        assert e.value.status == 502 and "no answer" in str(e.value)


async def test_no_daemon_and_no_session_do_not_run(daemon: Daemon) -> None:
    with pytest.raises(DaemonUnreachable) as e:
        await albedo_mcp.connect(daemon=f"127.0.0.1:{free_port()}", home=daemon.home)
    assert e.value.ran is False
    with pytest.raises(DaemonUnreachable):
        await albedo_mcp.connect(daemon=str(daemon.home / "no.sock"))
    with pytest.raises(SessionNotFound) as e2:
        await albedo_mcp.connect("s999-deadbeef", **daemon.kwargs())
    assert e2.value.status == 404
    # A wrong token is refused before anything runs.
    with pytest.raises(NotRun) as e3:
        await albedo_mcp.connect(daemon=daemon.base, token="albedo_" + "x" * 43, home=daemon.home)
    assert e3.value.status == 401


async def test_a_server_that_cannot_start_is_unavailable(fresh_daemon: Any) -> None:
    d: Daemon = fresh_daemon(
        {
            "py": py_server(),
            "broken": {"type": "stdio", "command": str(FIXTURES / "no-such-program"), "startupTimeoutMs": 2000},
        }
    )
    async with albedo_mcp.connect(**d.kwargs()) as mcp:
        assert "broken" not in mcp.servers
        with pytest.raises(ServerUnavailable) as e:
            await mcp.call("broken/anything")
        assert e.value.ran is False and e.value.server == "broken"
        with pytest.raises(ServerUnavailable):
            await mcp.call("mcp__broken__anything")


async def test_a_server_that_wants_a_sign_in_needs_sign_in(fresh_daemon: Any, tmp_path: Any) -> None:
    import subprocess
    import sys

    pf = tmp_path / "port"
    peer = subprocess.Popen(
        [sys.executable, str(FIXTURES / "http_unauthorized.py"), "--port-file", str(pf)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 10
        while not (pf.exists() and pf.read_text().strip()):
            assert time.monotonic() < deadline
            await asyncio.sleep(0.02)
        url = f"http://127.0.0.1:{pf.read_text().strip()}/mcp"
        d: Daemon = fresh_daemon({"py": py_server(), "locked": {"type": "http", "url": url}})
        async with albedo_mcp.connect(**d.kwargs()) as mcp:
            with pytest.raises(NeedsSignIn) as e:
                await mcp.call("locked/search", q="x")
            assert e.value.ran is False and e.value.server == "locked"
    finally:
        peer.kill()
        peer.wait()


async def test_a_token_refused_mid_session_needs_sign_in(fresh_daemon: Any, tmp_path: Any) -> None:
    """The daemon's own `needs_sign_in` code: a server that accepted the bearer token, then
    (restarted with another) answers 401 to a call."""
    import subprocess

    port = free_port()
    tok = tmp_path / "token"
    tok.write_text("first-token-0123456789")

    def start() -> subprocess.Popen[bytes]:
        pf = tmp_path / "port"
        pf.unlink(missing_ok=True)
        p = subprocess.Popen(
            [VENV_PY, PY_MCP_SERVER,
             "--transport", "http", "--stateless", "--json-response", "--port", str(port),
             "--port-file", str(pf), "--require-token-file", str(tok)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 20
        while not (pf.exists() and pf.read_text().strip()):
            assert time.monotonic() < deadline and p.poll() is None, "the py server did not start"
            time.sleep(0.05)
        return p

    peer = start()
    try:
        url = f"http://127.0.0.1:{port}/mcp"
        d: Daemon = fresh_daemon(
            {"remote": {"type": "http", "url": url, "bearerTokenEnvVar": "PY_TEST_TOKEN"}},
            env={"PY_TEST_TOKEN": "first-token-0123456789"},
        )
        async with albedo_mcp.connect(**d.kwargs()) as mcp:
            assert (await mcp.remote.echo(message="ok")).text == "ok"
            peer.kill()
            peer.wait()
            tok.write_text("second-token-0123456789")
            peer = start()
            with pytest.raises(NeedsSignIn) as e:
                await mcp.remote.echo(message="refused")
            assert e.value.code == "needs_sign_in" and e.value.status == 503 and e.value.ran is False
    finally:
        peer.kill()
        peer.wait()


async def test_gather_keeps_the_results_when_one_call_fails(fresh_daemon: Any) -> None:
    d: Daemon = fresh_daemon()
    async with albedo_mcp.connect(**d.kwargs()) as mcp:
        calls = [mcp.everything.echo(message=f"m{i}") for i in range(40)]
        calls += [mcp.py.add(a=i, b=1) for i in range(20)]
        calls.insert(17, mcp.bt.crash())
        calls.insert(33, mcp.call("py/nope"))
        out = await asyncio.gather(*calls, return_exceptions=True)
        assert isinstance(out[17], UnknownOutcome), out[17]
        assert isinstance(out[33], UnknownTool), out[33]
        ok = [r for i, r in enumerate(out) if i not in (17, 33)]
        assert all(isinstance(r, albedo_mcp.CallResult) and not r.isError for r in ok), ok
        assert [r.text for r in ok[:40]] == [f"Echo: m{i}" for i in range(40)]
        assert [r.text for r in ok[40:]] == [str(i + 1) for i in range(20)]


async def test_many_in_flight_share_one_pool(daemon: Daemon) -> None:
    async with albedo_mcp.connect(**daemon.kwargs(), max_connections=8) as mcp:
        out = await asyncio.gather(*(mcp.py.echo(message=str(i)) for i in range(200)))
        assert [r.text for r in out] == [str(i) for i in range(200)]


async def test_tools_that_change_while_connected_list_changed(fresh_daemon: Any) -> None:
    """A server's list_changed: on a session the binding created it applies at once (the
    binding ends a turn); on a joined session, at the host's turn end."""
    d: Daemon = fresh_daemon({"bt": fixture("binding_tools.py")})
    async with albedo_mcp.connect(**d.kwargs()) as mcp:
        g0 = mcp.generation
        assert "fresh" not in mcp.bt
        assert (await mcp.bt.grow(name="fresh")).text == "grew fresh"
        await wait_for(lambda: "fresh" in mcp.bt, what="the minted method of a new tool")
        assert mcp.generation > g0
        assert json.loads((await mcp.bt.fresh(n=1)).text) == {"n": 1}
        assert "mcp__bt__fresh" in {t.name for t in await mcp.tools()}

    sid = d.new_session()
    async with albedo_mcp.connect(sid, **d.kwargs()) as joined:
        g0 = joined.generation
        await joined.bt.grow(name="later")
        await asyncio.sleep(1.0)
        assert "later" not in joined.bt, "applied before the host's turn ended"
        r = d.api.post(f"/sessions/{sid}/activity", json={"kind": "turn_end"})
        assert r.status_code == 200 and r.json()["refresh"] is True, r.text
        await wait_for(lambda: "later" in joined.bt, what="the host's turn end to apply the change")
        assert joined.generation > g0
    d.api.delete(f"/sessions/{sid}")


async def test_tools_that_change_while_connected_settings(fresh_daemon: Any) -> None:
    """Settings changed through the API (a server switched off for the session, the settings
    PATCHed): the binding follows the new generation."""
    d: Daemon = fresh_daemon({"py": py_server(), "bt": fixture("binding_tools.py")})
    sid = d.new_session()
    async with albedo_mcp.connect(sid, **d.kwargs()) as mcp:
        assert "py" in mcp.servers
        r = d.api.put(f"/sessions/{sid}/servers/py", json={"enabled": False})
        assert r.status_code == 200, r.text
        await wait_for(lambda: "py" not in mcp.servers, what="py to leave")
        r = d.api.put(f"/sessions/{sid}/servers/py", json={"enabled": True})
        assert r.status_code == 200, r.text
        await wait_for(lambda: "py" in mcp.servers, what="py to come back")
        # A server added through the settings API joins every session.
        r = d.api.patch("/settings/mcp", json={"servers": {"everything": everything()}})
        assert r.status_code == 200, r.text
        await wait_for(lambda: "everything" in mcp.servers, timeout=30, what="everything to join")
        assert (await mcp.everything.echo(message="new")).text == "Echo: new"
    d.api.delete(f"/sessions/{sid}")


async def test_a_stale_method_raises_unknown_tool_and_re_lists(fresh_daemon: Any) -> None:
    d: Daemon = fresh_daemon({"py": py_server(), "bt": fixture("binding_tools.py")})
    sid = d.new_session()
    async with albedo_mcp.connect(sid, **d.kwargs(), follow=False) as mcp:
        stale = mcp.py.echo
        g0 = mcp.generation
        assert d.api.put(f"/sessions/{sid}/servers/py", json={"enabled": False}).status_code == 200
        assert "py" in mcp.servers  # not following: nothing changed yet
        with pytest.raises(UnknownTool):
            await stale(message="x")
        assert "py" not in mcp.servers and mcp.generation > g0  # re-listed, not retried
    d.api.delete(f"/sessions/{sid}")


async def test_editor_servers_never_appear(daemon: Daemon) -> None:
    """Today the daemon has no editor-supplied servers; every tool it lists is the `mcp`
    extension's (the filter on a marked tool is tested in test_units.py)."""
    async with albedo_mcp.connect(**daemon.kwargs()) as mcp:
        tools = await mcp.tools()
        assert tools and all(t.raw.get("extension", "mcp") == "mcp" for t in tools)
        assert all(t.name.startswith("mcp__") for t in tools)


def test_the_blocking_facade(daemon: Daemon) -> None:
    with albedo_mcp.connect_sync(**daemon.kwargs()) as mcp:
        sid = mcp.session_id
        assert "mcp__py__add" in {t.name for t in mcp.tools()}
        assert mcp.describe("py/add").tool == "add"
        assert mcp.call("py/add", a=2, b=2).text == "4"
        assert mcp.py.add(a=3, b=4).text == "7"
        assert getattr(mcp.everything, "get-sum")(a=1, b=1).isError is False
        assert mcp.server("bt")["dotted.name"]().text == "{}"
        assert mcp.bt.tool_error().isError
        with pytest.raises(UnknownTool):
            mcp.call("py/nope")
        assert mcp.generation >= 1 and "py" in dir(mcp)
    assert daemon.api.get(f"/sessions/{sid}").status_code == 404
    with pytest.raises(RuntimeError):
        mcp.call("py/add", a=1, b=1)


def test_the_blocking_facade_works_where_a_loop_runs(daemon: Daemon) -> None:
    async def inside() -> str:
        # A notebook's cell: a loop already runs in this thread.
        with albedo_mcp.connect_sync(**daemon.kwargs()) as mcp:
            return mcp.py.echo(message="nested").text

    assert asyncio.run(inside()) == "nested"


def test_raw_httpx_sees_the_same_answers(daemon: Daemon) -> None:
    """The binding's records are the API's JSON (less `outcome`)."""
    sid = daemon.new_session()
    raw = daemon.api.post(f"/sessions/{sid}/tools/py%2Fadd/call", json={"arguments": {"a": 1, "b": 2}}).json()
    with albedo_mcp.connect_sync(sid, **daemon.kwargs()) as mcp:
        r = mcp.call("py/add", a=1, b=2)
    assert {**r.raw, "outcome": "ok"} == raw
    daemon.api.delete(f"/sessions/{sid}")


def test_errors_survive_pickling() -> None:
    import pickle

    e = albedo_mcp.UnknownOutcome("lost", status=502, code="outcome_unknown", tool="a/b")
    f = pickle.loads(pickle.dumps(e))
    assert type(f) is albedo_mcp.UnknownOutcome and f.status == 502 and str(f) == "lost"


def test_httpx_is_the_only_real_dependency() -> None:
    import tomllib
    from pathlib import Path

    meta = tomllib.loads((Path(albedo_mcp.__file__).parents[1] / "pyproject.toml").read_text())
    assert [d.split(">")[0].split("=")[0] for d in meta["project"]["dependencies"]] == ["httpx", "sniffio"]
    assert isinstance(httpx.__version__, str)


async def test_tools_lists_deferred_tools_and_calls_them(fresh_daemon: Any) -> None:
    """A session that defers every tool (behind `mcp__search`, for models): the binding is
    code, so `tools()` lists them all, flagged, and a minted method calls one (loading it)."""
    d: Daemon = fresh_daemon({"py": py_server(), "bt": fixture("binding_tools.py")})
    r = d.api.post("/sessions", json={"defer_tools": "always"})
    assert r.status_code == 201, r.text
    sid = r.json()["id"]
    loaded = d.api.get(f"/sessions/{sid}/tools").json()["tools"]
    assert [t["name"] for t in loaded] == ["mcp__search"]
    async with albedo_mcp.connect(sid, **d.kwargs()) as mcp:
        tools = await mcp.tools()
        names = {t.name for t in tools}
        assert "mcp__py__echo" in names and "mcp__search" not in names
        assert all(t.deferred for t in tools)
        assert (await mcp.py.echo(message="deferred")).text == "deferred"
        listed = {t.name: t for t in await mcp.tools()}
        assert not listed["mcp__py__echo"].deferred and listed["mcp__py__add"].deferred
    loaded = [t["name"] for t in d.api.get(f"/sessions/{sid}/tools").json()["tools"]]
    assert loaded == ["mcp__search", "mcp__py__echo"]
    d.api.delete(f"/sessions/{sid}")
