"""A blocking facade for scripts: the asyncio client on its own event loop thread (so it
also works where a loop already runs, as in a notebook)."""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Coroutine, Iterator, Mapping
from types import TracebackType
from typing import Any, TypeVar

from ._client import CallResult, McpSession, ServerTools, Tool, ToolMethod, connect

T = TypeVar("T")


class _SyncToolMethod:
    def __init__(self, owner: SyncMcp, method: ToolMethod) -> None:
        self._owner = owner
        self._method = method
        self.tool = method.tool
        self.__doc__ = method.tool.description

    def __call__(self, arguments: Mapping[str, Any] | None = None, /, **kwargs: Any) -> CallResult:
        return self._owner._run(self._owner._mcp.call(self.tool.name, arguments, **kwargs))

    def __repr__(self) -> str:
        return f"<tool {self.tool.path} ({self.tool.name}), blocking>"


class SyncServerTools:
    __slots__ = ("_sst_owner", "_sst_tools")

    def __init__(self, owner: SyncMcp, tools: ServerTools) -> None:
        self._sst_owner = owner
        self._sst_tools = tools

    def __getattr__(self, name: str) -> _SyncToolMethod:
        return _SyncToolMethod(self._sst_owner, getattr(self._sst_tools, name))

    def __getitem__(self, name: str) -> _SyncToolMethod:
        return _SyncToolMethod(self._sst_owner, self._sst_tools[name])

    def __contains__(self, name: object) -> bool:
        return name in self._sst_tools

    def __iter__(self) -> Iterator[str]:
        return iter(self._sst_tools)

    def __dir__(self) -> list[str]:
        return dir(self._sst_tools)

    def __repr__(self) -> str:
        return repr(self._sst_tools)


class SyncMcp:
    """The same operations as `McpSession`, blocking: `tools()`, `describe()`, `call()`,
    `mcp.<server>.<tool>(...)`, `refresh()`, `close()` (or `with`)."""

    def __init__(self, session: str | None = None, **kwargs: Any) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="albedo_mcp", daemon=True)
        self._thread.start()
        self._closed = False
        try:
            self._mcp: McpSession = self._run(self._open(session, kwargs))
        except BaseException:
            self._stop()
            raise

    @staticmethod
    async def _open(session: str | None, kwargs: dict[str, Any]) -> McpSession:
        return await connect(session, **kwargs)

    def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        if self._closed:
            coro.close()
            raise RuntimeError("this albedo_mcp client is closed")
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    def _stop(self) -> None:
        self._closed = True
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        if not self._thread.is_alive():
            self._loop.close()

    @property
    def session_id(self) -> str:
        return self._mcp.session_id

    @property
    def generation(self) -> int:
        return self._mcp.generation

    @property
    def aio(self) -> McpSession:
        """The asyncio client underneath (its coroutines run on this facade's loop thread)."""
        return self._mcp

    def tools(self, server: str | None = None) -> list[Tool]:
        return self._run(self._mcp.tools(server))

    def describe(self, name: str) -> Tool:
        return self._run(self._mcp.describe(name))

    def call(self, name: str, arguments: Mapping[str, Any] | None = None, /, **kwargs: Any) -> CallResult:
        return self._run(self._mcp.call(name, arguments, **kwargs))

    def refresh(self) -> list[Tool]:
        return self._run(self._mcp.refresh())

    def server(self, name: str) -> SyncServerTools:
        return SyncServerTools(self, self._mcp.server(name))

    def __getattr__(self, name: str) -> SyncServerTools:
        if name.startswith("_"):
            raise AttributeError(name)
        return SyncServerTools(self, getattr(self._mcp, name))

    def __dir__(self) -> list[str]:
        return sorted(set(super().__dir__()) | {s for s in self._mcp.servers if s.isidentifier()})

    def close(self) -> None:
        if self._closed:
            return
        try:
            self._run(self._mcp.aclose())
        finally:
            self._stop()

    def __enter__(self) -> SyncMcp:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return repr(self._mcp).replace("<albedo_mcp session", "<albedo_mcp blocking session", 1)


def connect_sync(
    session: str | None = None,
    *,
    daemon: str | None = None,
    token: str | None = None,
    home: str | os.PathLike[str] | None = None,
    **kwargs: Any,
) -> SyncMcp:
    """`connect()` for scripts: blocking calls (`mcp.call(...)`, `mcp.<server>.<tool>(...)`)."""
    return SyncMcp(session, daemon=daemon, token=token, home=home, **kwargs)
