"""The live daemon and real servers the binding's tests run against.

The daemon is the built binary (`ALBEDO_BIN`, default `target/debug/albedo-mcp` of this
repository: `cargo build` first; tests/run-all.sh runs this after `cargo test`), started as
`serve --listen 127.0.0.1:0 --ready-file F` on a temporary `$ALBEDO_HOME` holding
`extensions.json`, as tests/common/mod.rs does. The servers are server-everything (node),
the Python `mcp` SDK server (tests/servers/py_mcp_server.py) and the stdlib fixture
tests/fixtures/binding_tools.py, found through tests/peers/env.sh's variables (or the fixed
paths under .peers/).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

REPO = Path(__file__).resolve().parents[3]
PEERS = Path(os.environ.get("ALBEDO_PEERS") or REPO / ".peers")
VENV_PY = os.environ.get("PEERS_VENV_PY") or str(PEERS / "venv/bin/python")
EVERYTHING_JS = os.environ.get("EVERYTHING_JS") or str(
    PEERS / "npm/node_modules/@modelcontextprotocol/server-everything/dist/index.js"
)
PY_MCP_SERVER = os.environ.get("PY_MCP_SERVER") or str(REPO / "tests/servers/py_mcp_server.py")
FIXTURES = Path(os.environ.get("ALBEDO_FIXTURES") or REPO / "tests/fixtures")
BIN = os.environ.get("ALBEDO_BIN") or str(REPO / "target/debug/albedo-mcp")


def everything() -> dict[str, Any]:
    return {"type": "stdio", "command": "node", "args": [EVERYTHING_JS]}


def py_server() -> dict[str, Any]:
    return {"type": "stdio", "command": VENV_PY, "args": [PY_MCP_SERVER]}


def fixture(name: str, *args: str) -> dict[str, Any]:
    return {"type": "stdio", "command": sys.executable, "args": [str(FIXTURES / name), *args]}


def free_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class Daemon:
    """A running daemon on its own home; `stop()` kills it."""

    def __init__(
        self,
        servers: dict[str, Any],
        *,
        enabled: bool = True,
        extra: dict[str, Any] | None = None,
        env: dict[str, str] | None = None,
    ):
        if not os.path.exists(BIN):
            pytest.fail(f"no daemon binary at {BIN}: run `cargo build` first (or set ALBEDO_BIN)")
        self.dir = tempfile.mkdtemp(prefix="albedo-py-")
        self.home = Path(self.dir)
        ext: dict[str, Any] = {"enabled": {"mcp": enabled}, "mcp": {"servers": servers, **(extra or {})}}
        (self.home / "extensions.json").write_text(json.dumps(ext, indent=2))
        ready = self.home / "ready"
        extra_env = env or {}
        env = {**os.environ, "ALBEDO_HOME": str(self.home), "ALBEDO_LOG": "albedo_mcp=debug,info"}
        for k in ("ALBEDO_DAEMON", "ALBEDO_TOKEN", "ALBEDO_LISTEN"):
            env.pop(k, None)
        env.update(extra_env)
        self.log_path = self.home / "daemon.log"
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(
                [BIN, "serve", "--listen", "127.0.0.1:0", "--ready-file", str(ready)],
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=log,
            )
        deadline = time.monotonic() + 20
        while True:
            try:
                text = ready.read_text()
            except FileNotFoundError:
                text = ""
            if text:
                break
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the daemon did not start:\n{self.log()}")
            time.sleep(0.02)
        self.addr = text.splitlines()[0].strip()
        self.base = f"http://{self.addr}"
        self.token = (self.home / "api-token").read_text().strip()
        self.api = httpx.Client(
            base_url=self.base, headers={"authorization": f"Bearer {self.token}"}, timeout=60
        )

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-8000:]
        except OSError:
            return ""

    def kwargs(self, via: str = "socket") -> dict[str, Any]:
        """connect() arguments reaching this daemon over the socket (found in `home`) or TCP."""
        if via == "socket":
            return {"home": self.home}
        return {"home": self.home, "daemon": self.base}

    def new_session(self, mcp: bool = True) -> str:
        r = self.api.post("/sessions", json={"extensions": {"mcp": mcp}})
        assert r.status_code == 201, r.text
        return str(r.json()["id"])

    def children(self) -> list[tuple[int, str]]:
        """(pid, command line) of the daemon's live child processes."""
        out = []
        for p in Path("/proc").iterdir():
            if not p.name.isdigit():
                continue
            try:
                stat = (p / "stat").read_text()
                ppid = int(stat.rsplit(")", 1)[1].split()[1])
                if ppid != self.proc.pid:
                    continue
                state = stat.rsplit(")", 1)[1].split()[0]
                if state == "Z":
                    continue
                cmd = (p / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except (OSError, ValueError, IndexError):
                continue
            out.append((int(p.name), cmd))
        return out

    def kill_child(self, needle: str) -> int:
        for pid, cmd in self.children():
            if needle in cmd:
                os.kill(pid, signal.SIGKILL)
                return pid
        raise AssertionError(f"no child of the daemon runs {needle!r}: {self.children()}")

    def stop(self) -> None:
        self.api.close()
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        shutil.rmtree(self.dir, ignore_errors=True)


def standard_servers() -> dict[str, Any]:
    return {
        "everything": everything(),
        "py": py_server(),
        "bt": fixture("binding_tools.py"),
    }


@pytest.fixture(scope="session")
def daemon() -> Iterator[Daemon]:
    """One daemon for the tests that leave it as they found it."""
    d = Daemon(standard_servers())
    yield d
    d.stop()


@pytest.fixture
def fresh_daemon() -> Iterator[Daemon]:
    """A daemon of its own, for a test that kills or changes things."""
    made: list[Daemon] = []

    def make(servers: dict[str, Any] | None = None, **kw: Any) -> Daemon:
        d = Daemon(servers if servers is not None else standard_servers(), **kw)
        made.append(d)
        return d

    yield make  # type: ignore[misc]
    for d in made:
        d.stop()
