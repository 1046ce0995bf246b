"""The asyncio client: one daemon session's MCP tools as Python calls."""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Awaitable, Callable, Coroutine, Generator, Iterator, Mapping
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any
from urllib.parse import quote

import httpx

from ._errors import (
    BadArguments,
    DaemonUnreachable,
    McpError,
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
from ._locate import Endpoint, locate

#: The only extension whose tools the binding shows. Tools the daemon marks with another
#: `extension` (editor-supplied servers, `editor-mcp`) are never listed, minted or called.
EXTENSION = "mcp"

_JSON_HEADERS = {"content-type": "application/json"}
# One encoder for every call (json.dumps with options builds a new one each time).
_ENCODE = json.JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode
_UNSET: Any = object()


@dataclass(frozen=True)
class Tool:
    """One operation of the session, as the daemon advertises it (untrusted data: the
    description and schema come from the MCP server and are never evaluated)."""

    #: The advertised name (`mcp__<server>__<tool>`, or its short form).
    name: str
    #: The server's name in the settings.
    server: str
    #: The server's own name for the tool; None for the built-in `read_resource` and
    #: `get_prompt` operations.
    tool: str | None
    description: str
    #: The JSON Schema of the arguments.
    inputSchema: dict[str, Any] = field(repr=False)
    #: The whole record as the daemon sent it.
    raw: dict[str, Any] = field(repr=False, compare=False)

    @property
    def input_schema(self) -> dict[str, Any]:
        return self.inputSchema

    @property
    def deferred(self) -> bool:
        """Whether the daemon defers it for models (not in the session's loaded tool list
        until a search or a call loads it); it can be called all the same."""
        return self.raw.get("deferred") is True

    @property
    def member(self) -> str:
        """Its name under `mcp.<server>`: the server's own tool name (`read_resource` and
        `get_prompt` for the built-in operations)."""
        if self.tool is not None:
            return self.tool
        prefix = f"mcp__{self.server}__"
        return self.name[len(prefix) :] if self.name.startswith(prefix) else self.name

    @property
    def path(self) -> str:
        """`server/tool`, the other name a call accepts."""
        return f"{self.server}/{self.member}"

    @classmethod
    def from_json(cls, v: Any) -> Tool:
        if not isinstance(v, dict) or not isinstance(v.get("name"), str):
            raise McpError("the daemon sent a tool record without a name", body=v)
        schema = v.get("inputSchema")
        tool = v.get("tool")
        return cls(
            name=v["name"],
            server=str(v.get("server") or ""),
            tool=tool if isinstance(tool, str) else None,
            description=str(v.get("description") or ""),
            inputSchema=schema if isinstance(schema, dict) else {},
            raw=v,
        )


class CallResult:
    """A tool's result: `content`, `structuredContent`, `isError` (untrusted data from the
    MCP server, parsed as JSON and never evaluated). `raw` is the whole result; other fields
    (a resource's `contents`, a prompt's `messages`) are reachable as `r["contents"]`."""

    __slots__ = ("raw",)

    def __init__(self, raw: dict[str, Any]) -> None:
        self.raw = raw

    @property
    def isError(self) -> bool:  # noqa: N802 - the MCP field's name
        return self.raw.get("isError") is True

    @property
    def content(self) -> list[Any]:
        c = self.raw.get("content")
        return c if isinstance(c, list) else []

    @property
    def structuredContent(self) -> Any:  # noqa: N802 - the MCP field's name
        return self.raw.get("structuredContent")

    @property
    def meta(self) -> Any:
        return self.raw.get("_meta")

    is_error = isError
    structured_content = structuredContent

    @property
    def text(self) -> str:
        """The text items of `content`, joined with newlines (a convenience)."""
        return "\n".join(
            str(c.get("text", "")) for c in self.content if isinstance(c, dict) and c.get("type") == "text"
        )

    def __getitem__(self, key: str) -> Any:
        return self.raw[key]

    def get(self, key: str, default: Any = None) -> Any:
        return self.raw.get(key, default)

    def __contains__(self, key: object) -> bool:
        return key in self.raw

    def __eq__(self, other: object) -> bool:
        return isinstance(other, CallResult) and other.raw == self.raw

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        if "content" in self.raw:
            return f"CallResult(isError={self.isError}, content={self.content!r:.200})"
        return f"CallResult({self.raw!r:.200})"


class ToolMethod:
    """`mcp.<server>.<tool>`: calls the tool by its advertised name."""

    def __init__(self, session: McpSession, tool: Tool) -> None:
        self._session = session
        self.tool = tool
        self.__doc__ = tool.description

    def __call__(self, arguments: Mapping[str, Any] | None = None, /, **kwargs: Any) -> Awaitable[CallResult]:
        return self._session.call(self.tool.name, arguments, **kwargs)

    def __repr__(self) -> str:
        return f"<tool {self.tool.path} ({self.tool.name})>"


class ServerTools:
    """`mcp.<server>`: the server's tools as methods; a name that is not a Python identifier
    through `getattr(mcp.<server>, "name")` or `mcp.<server>["name"]`."""

    __slots__ = ("_st_server", "_st_methods")

    def __init__(self, server: str, methods: dict[str, ToolMethod]) -> None:
        self._st_server = server
        self._st_methods = methods

    def __getattr__(self, name: str) -> ToolMethod:
        try:
            return self._st_methods[name]
        except KeyError:
            raise AttributeError(
                f"server {self._st_server!r} has no tool {name!r} in this session "
                "(await mcp.refresh() to re-list, or mcp.call it by name)"
            ) from None

    def __getitem__(self, name: str) -> ToolMethod:
        try:
            return self._st_methods[name]
        except KeyError:
            raise KeyError(name) from None

    def __contains__(self, name: object) -> bool:
        return name in self._st_methods

    def __iter__(self) -> Iterator[str]:
        return iter(self._st_methods)

    def __len__(self) -> int:
        return len(self._st_methods)

    def __dir__(self) -> list[str]:
        return sorted(self._st_methods)

    def __repr__(self) -> str:
        return f"<server {self._st_server!r}: {', '.join(sorted(self._st_methods))}>"


def _json_body(r: httpx.Response) -> Any:
    try:
        return json.loads(r.content)
    except (ValueError, RecursionError):
        return None


def _server_of(name: str) -> str | None:
    """The server a call name points at: `server/tool`, or `mcp__<server>__...` (a server
    name never holds `__`)."""
    if "/" in name:
        return name.split("/", 1)[0]
    if name.startswith("mcp__"):
        rest = name[5:]
        if "__" in rest:
            return rest.split("__", 1)[0]
    return None


def _transport_error(e: httpx.HTTPError, at: str, what: str, tool: str | None) -> McpError:
    """An httpx failure as the binding's error: not run when no connection was made, unknown
    outcome once a request may have left."""
    if isinstance(e, (httpx.ConnectError, httpx.ConnectTimeout, httpx.UnsupportedProtocol)):
        return DaemonUnreachable(
            f"no daemon answers at {at} ({e or type(e).__name__}); start it with: albedo-mcp serve",
            code="unreachable",
            tool=tool,
        )
    if isinstance(e, httpx.PoolTimeout):
        return NotRun(f"{what}: no connection to the daemon became free in time", code="pool_timeout", tool=tool)
    if isinstance(e, httpx.TimeoutException):
        return TimedOut(
            f"{what}: no answer from the daemon at {at} in time ({type(e).__name__}); it may or "
            "may not have run: inspect before acting again",
            code="timeout",
            tool=tool,
        )
    return TransportLost(
        f"{what}: the connection to the daemon at {at} broke ({type(e).__name__}: {e}); it may "
        "or may not have run: inspect before acting again",
        code="transport_lost",
        tool=tool,
    )


def error_from_answer(status: int, body: Any, tool: str | None = None) -> McpError:
    """The exception for the daemon's error answer (HTTP status, `outcome`, error code)."""
    err = body.get("error") if isinstance(body, dict) else None
    err = err if isinstance(err, dict) else {}
    code = err.get("code") if isinstance(err.get("code"), str) else None
    message = str(err.get("message") or f"the daemon answered HTTP {status}")
    outcome = body.get("outcome") if isinstance(body, dict) else None
    kw: dict[str, Any] = {"status": status, "code": code, "tool": tool, "body": body}
    if outcome == "unknown":
        return UnknownOutcome(message, **kw)
    if code == "needs_sign_in":
        return NeedsSignIn(message, **kw)
    if code == "unavailable":
        return ServerUnavailable(message, **kw)
    if code in ("no_such_tool",) or (code == "not_found" and "tool" in message):
        return UnknownTool(message, **kw)
    if code == "not_found" and "session" in message:
        return SessionNotFound(message, **kw)
    if code == "server_error":
        rpc = err.get("rpc")
        if isinstance(rpc, dict) and rpc.get("code") == -32602:
            return BadArguments(message, **kw)
        return ServerError(message, **kw)
    if code == "invalid_result" or outcome == "error":
        return ServerError(message, **kw)
    if code == "bad_request" or status in (400, 413, 415, 422):
        return BadArguments(message, **kw)
    if outcome == "not_run" or 400 <= status < 500:
        return NotRun(message, **kw)
    return UnknownOutcome(message, **kw)


class McpSession:
    """One daemon session's MCP tools. Make one with `await albedo_mcp.connect(...)`.

    How its methods follow the session: at connect it lists the tools and mints
    `mcp.<server>.<tool>`; a background task follows the session's events stream
    (`GET /sessions/{id}/events`) and re-lists whenever the session publishes a new
    generation (a reload, a settings change, a server that joined, capabilities that
    changed). A call answered "no such tool" re-lists at once too (and still raises: nothing
    is retried). For a session the binding created (`connect()` without `session=`) no agent
    host ends turns, so the binding ends one itself when the daemon says capabilities
    changed or a server came back, which applies them at once; on a session it joined
    (`session="<id>"`), changes apply at the host's next turn end, as for the model.
    """

    def __init__(
        self,
        http: httpx.AsyncClient,
        endpoint: Endpoint,
        session_id: str,
        *,
        owned: bool,
        follow: bool = True,
    ) -> None:
        self._http = http
        self._endpoint = endpoint
        self._id = session_id
        self._owned = owned
        self._follow_events = follow
        self._prefix = f"/sessions/{quote(session_id, safe='')}"
        self._paths: dict[str, str] = {}
        self._tools: list[Tool] = []
        self._by_name: dict[str, Tool] = {}
        self._servers: dict[str, ServerTools] = {}
        self._hidden: set[str] = set()
        self._generation = -1
        self._closed = False
        self._follow_task: asyncio.Task[None] | None = None
        self._stream_open = asyncio.Event()
        self._relist_lock = asyncio.Lock()

    # -- the session -----------------------------------------------------------------------

    @property
    def session_id(self) -> str:
        return self._id

    @property
    def owns_session(self) -> bool:
        """Whether the binding created the session (and deletes it when closed)."""
        return self._owned

    @property
    def generation(self) -> int:
        """The session's generation the minted methods follow."""
        return self._generation

    @property
    def endpoint(self) -> Endpoint:
        return self._endpoint

    @property
    def servers(self) -> dict[str, ServerTools]:
        """Each server's minted methods (a snapshot of the current generation)."""
        return dict(self._servers)

    def server(self, name: str) -> ServerTools:
        """One server's methods, also for a server whose name is taken by a method here
        (`tools`, `call`, ...) or is not a Python identifier."""
        try:
            return self._servers[name]
        except KeyError:
            raise UnknownTool(f"no MCP server {name!r} with tools in this session", server=name) from None

    def __getattr__(self, name: str) -> ServerTools:
        if name.startswith("__") or "_servers" not in self.__dict__:
            raise AttributeError(name)
        try:
            return self._servers[name]
        except KeyError:
            raise AttributeError(
                f"no MCP server {name!r} with tools in this session (servers: {', '.join(sorted(self._servers)) or 'none'})"
            ) from None

    def __dir__(self) -> list[str]:
        return sorted(set(super().__dir__()) | {s for s in self._servers if s.isidentifier()})

    def __repr__(self) -> str:
        return (
            f"<albedo_mcp session {self._id} at {self._endpoint.describe()}: "
            f"{len(self._tools)} tools, generation {self._generation}>"
        )

    # -- the API -------------------------------------------------------------------------------

    async def tools(self, server: str | None = None) -> list[Tool]:
        """The session's live operations (names, descriptions, servers, schemas), also the
        ones the daemon defers behind `mcp__search` for models (`Tool.deferred`: code has no
        context to save, and calling one loads it); also re-mints `mcp.<server>.<tool>`."""
        r = await self._get(f"{self._prefix}/tools?all=true", "listing the tools")
        body = _json_body(r)
        if not isinstance(body, dict) or not isinstance(body.get("tools"), list):
            raise McpError("the daemon's tool list is not the documented JSON", status=r.status_code, body=body)
        generation = body.get("generation")
        gen = generation if isinstance(generation, int) else 0
        tools: list[Tool] = []
        hidden: set[str] = set()
        for v in body["tools"]:
            t = Tool.from_json(v)
            if v.get("extension", EXTENSION) != EXTENSION:
                hidden.add(t.name)
                continue
            tools.append(t)
        self._install(gen, tools, hidden)
        return [t for t in tools if server is None or t.server == server]

    async def describe(self, name: str) -> Tool:
        """One operation and its parameter schema, by advertised name or `server/tool`."""
        if name in self._hidden:
            raise UnknownTool(f"no tool {name!r} in this session", code="no_such_tool", tool=name)
        r = await self._get(f"{self._prefix}/tools/{self._segment(name)}", f"describing {name!r}", tool=name)
        body = _json_body(r)
        if not isinstance(body, dict):
            raise McpError("the daemon's tool record is not JSON", status=r.status_code, tool=name)
        if body.get("extension", EXTENSION) != EXTENSION:
            raise UnknownTool(f"no tool {name!r} in this session", code="no_such_tool", tool=name)
        return Tool.from_json(body)

    async def call(self, name: str, arguments: Mapping[str, Any] | None = None, /, **kwargs: Any) -> CallResult:
        """Call a tool by advertised name or `server/tool`. The arguments are the mapping
        given, updated with the keyword arguments (so `call("srv/get_prompt", name="greet",
        arguments={...})` passes `name` and `arguments` to the tool). A tool's own error is
        a result with `isError` set; everything else raises (see the exceptions), and
        nothing is retried."""
        if arguments is None:
            args: Mapping[str, Any] = kwargs
        elif not isinstance(arguments, Mapping):
            raise BadArguments(
                f"the arguments of {name!r} must be a mapping (a dict), not {type(arguments).__name__}",
                code="bad_request",
                tool=name,
            )
        else:
            args = {**arguments, **kwargs} if kwargs else arguments
        if name in self._hidden:
            raise UnknownTool(f"no tool {name!r} in this session", code="no_such_tool", tool=name)
        try:
            content = _ENCODE({"arguments": args}).encode()
        except (TypeError, ValueError) as e:
            raise BadArguments(f"the arguments of {name!r} are not JSON: {e}", code="bad_request", tool=name) from e
        path = self._paths.get(name)
        if path is None:
            path = self._call_path(name)
        try:
            r = await self._http.post(path, content=content)
        except httpx.HTTPError as e:
            raise _transport_error(e, self._endpoint.describe(), f"calling {name!r}", name) from e
        if r.status_code == 200:
            body = _json_body(r)
            if not isinstance(body, dict):
                raise ServerError(f"the answer to {name!r} is not a JSON object", status=200, tool=name)
            body.pop("outcome", None)
            return CallResult(body)
        raise await self._call_error(r, name)

    async def refresh(self) -> list[Tool]:
        """Re-list the tools now. On a session the binding created, first end a turn, so
        that changes the daemon holds for the end of a turn apply."""
        if self._owned:
            await self._end_turn()
        return await self.tools()

    async def aclose(self) -> None:
        """Stop following the session; delete it if the binding created it. Idempotent."""
        if self._closed:
            return
        self._closed = True
        task, self._follow_task = self._follow_task, None
        if task is not None:
            task.cancel()
            try:
                await task
            except (asyncio.CancelledError, Exception):  # noqa: BLE001 - closing
                pass
        try:
            if self._owned:
                try:
                    await self._http.delete(self._prefix)
                except httpx.HTTPError:
                    pass
        finally:
            await self._http.aclose()

    async def __aenter__(self) -> McpSession:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    # -- internals -------------------------------------------------------------------------

    def _segment(self, name: str) -> str:
        return quote(name, safe="")

    def _call_path(self, name: str) -> str:
        path = f"{self._prefix}/tools/{self._segment(name)}/call"
        if len(self._paths) < 10_000:
            self._paths[name] = path
        return path

    def _install(self, generation: int, tools: list[Tool], hidden: set[str]) -> None:
        if generation < self._generation:
            return  # an older answer that arrived late
        self._generation = generation
        self._tools = tools
        self._by_name = {t.name: t for t in tools}
        self._hidden = hidden
        grouped: dict[str, dict[str, ToolMethod]] = {}
        for t in tools:
            methods = grouped.setdefault(t.server, {})
            methods.setdefault(t.member, ToolMethod(self, t))
            self._call_path(t.name)
        self._servers = {s: ServerTools(s, m) for s, m in grouped.items()}

    async def _get(self, path: str, what: str, tool: str | None = None) -> httpx.Response:
        try:
            r = await self._http.get(path)
        except httpx.HTTPError as e:
            raise _transport_error(e, self._endpoint.describe(), what, tool) from e
        if r.status_code != 200:
            raise error_from_answer(r.status_code, _json_body(r), tool)
        return r

    async def _call_error(self, r: httpx.Response, name: str) -> McpError:
        body = _json_body(r)
        e = error_from_answer(r.status_code, body, name)
        e.server = _server_of(name) or (self._by_name[name].server if name in self._by_name else None)
        if isinstance(e, UnknownTool):
            # The list may be stale: re-list, and say why the tool is missing when its
            # server is there but not connected. Never retried.
            try:
                await self._relist()
                if e.server is None or e.server in self._servers:
                    return e  # the server is there; the tool is not
                view = await self._view()
            except McpError:
                return e
            for s in view.get("servers") or []:
                if isinstance(s, dict) and s.get("name") == e.server:
                    state = s.get("state")
                    why = s.get("last_error") or s.get("warning") or ""
                    kw: dict[str, Any] = {"status": e.status, "tool": name, "server": e.server, "body": body}
                    if state == "needs_sign_in":
                        return NeedsSignIn(
                            f"MCP server {e.server!r} needs the user to sign in; {name!r} did not run",
                            code="needs_sign_in",
                            **kw,
                        )
                    if state in ("unavailable", "left_out", "connecting"):
                        return ServerUnavailable(
                            f"MCP server {e.server!r} is {state.replace('_', ' ')}{': ' + str(why) if why else ''}; "
                            f"{name!r} did not run",
                            code="unavailable",
                            **kw,
                        )
        return e

    async def _view(self) -> dict[str, Any]:
        r = await self._get(self._prefix, "reading the session")
        body = _json_body(r)
        return body if isinstance(body, dict) else {}

    async def _relist(self) -> None:
        async with self._relist_lock:
            await self.tools()

    async def _end_turn(self) -> bool:
        try:
            r = await self._http.post(
                f"{self._prefix}/activity", content=b'{"kind":"turn_end"}', headers=_JSON_HEADERS
            )
        except httpx.HTTPError as e:
            raise _transport_error(e, self._endpoint.describe(), "ending a turn", None) from e
        if r.status_code != 200:
            raise error_from_answer(r.status_code, _json_body(r))
        body = _json_body(r)
        return isinstance(body, dict) and body.get("refresh") is True

    def _start_following(self) -> None:
        if self._follow_events and self._follow_task is None:
            self._follow_task = asyncio.get_running_loop().create_task(
                self._follow(), name=f"albedo_mcp events {self._id}"
            )

    async def _follow(self) -> None:
        """Follow the session's events; re-list on a new generation. Reconnects (and
        re-lists, since events may have been missed) until the session is gone."""
        try:
            await self._follow_stream()
        finally:
            self._stream_open.set()  # connect() waits no longer

    async def _follow_stream(self) -> None:
        delay = 0.2
        first = True
        timeout = httpx.Timeout(10.0, read=None)
        while not self._closed:
            try:
                async with self._http.stream("GET", f"{self._prefix}/events", timeout=timeout) as r:
                    if r.status_code in (401, 403, 404):
                        return  # the session is gone (or the token changed): nothing to follow
                    if r.status_code != 200:
                        raise httpx.TransportError(f"HTTP {r.status_code}")
                    self._stream_open.set()
                    if not first:
                        await self._quietly(self._relist())
                    first = False
                    delay = 0.2
                    kind = ""
                    data: list[str] = []
                    async for line in r.aiter_lines():
                        if line == "":
                            if kind or data:
                                await self._on_event(kind, "\n".join(data))
                            kind, data = "", []
                        elif line.startswith(":"):
                            continue
                        elif line.startswith("event:"):
                            kind = line[6:].strip()
                        elif line.startswith("data:"):
                            v = line[5:]
                            data.append(v[1:] if v.startswith(" ") else v)
            except asyncio.CancelledError:
                raise
            except Exception:  # noqa: BLE001 - the stream broke: reconnect after a pause
                pass
            self._stream_open.set()  # connect() waits no longer
            if self._closed:
                return
            await asyncio.sleep(delay)
            delay = min(delay * 2, 5.0)

    async def _on_event(self, kind: str, data: str) -> None:
        try:
            ev = json.loads(data) if data else {}
        except (ValueError, RecursionError):
            ev = {}
        gen = ev.get("generation") if isinstance(ev, dict) else None
        if kind in ("catalogue_changed", "server_up") and self._owned:
            # No host ends this session's turns: end one, which applies the change.
            if await self._quietly(self._end_turn()):
                await self._quietly(self._relist())
            return
        if isinstance(gen, int) and gen > self._generation:
            await self._quietly(self._relist())

    async def _quietly(self, aw: Awaitable[Any]) -> Any:
        try:
            return await aw
        except McpError:
            return None


class _Connecting:
    """What `connect()` answers: await it for the session, or use it as `async with`."""

    def __init__(self, coro_factory: Callable[[], Coroutine[Any, Any, McpSession]]) -> None:
        self._factory = coro_factory
        self._session: McpSession | None = None

    def __await__(self) -> Generator[Any, None, McpSession]:
        return self._factory().__await__()

    async def __aenter__(self) -> McpSession:
        self._session = await self._factory()
        return self._session

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._session is not None:
            await self._session.aclose()


def connect(
    session: str | None = None,
    *,
    daemon: str | None = None,
    token: str | None = None,
    home: str | os.PathLike[str] | None = None,
    timeout: float | None = 600.0,
    connect_timeout: float = 10.0,
    max_connections: int = 256,
    follow: bool = True,
) -> _Connecting:
    """Connect to a daemon session: `session=None` creates one with the MCP extension on
    (deleted again by `aclose()`), `session="<id>"` joins an existing one (left open).

    The daemon is found like the CLI finds it (`daemon=`, else `ALBEDO_DAEMON`, else the
    socket in `$ALBEDO_HOME`, else TCP at `config.toml`'s `listen` with the API token).
    `timeout` bounds each request (the daemon times tool calls out itself, by default after
    60 s, so keep it longer); one connection pool of up to `max_connections` serves every
    call in flight. `follow=False` does not follow the events stream (the minted methods
    then change only on `refresh()`, `tools()` or a call that meets an unknown tool).

        mcp = await albedo_mcp.connect()
        async with albedo_mcp.connect() as mcp: ...
    """

    async def open_() -> McpSession:
        ep = locate(daemon, home=home, token=token)
        # Every body the binding sends is JSON: the content type is the client's default.
        headers = {
            "accept": "application/json",
            "content-type": "application/json",
            "user-agent": "albedo-mcp-python/0.1",
        }
        if ep.token and not ep.uds:
            headers["authorization"] = f"Bearer {ep.token}"
        transport = httpx.AsyncHTTPTransport(
            uds=ep.uds,
            verify=ep.verify,
            limits=httpx.Limits(max_connections=max_connections, max_keepalive_connections=max_connections),
        )
        http = httpx.AsyncClient(
            transport=transport,
            base_url=ep.base_url,
            headers=headers,
            timeout=httpx.Timeout(timeout, connect=connect_timeout, pool=None),
        )
        try:
            if session is None:
                try:
                    r = await http.post(
                        "/sessions", content=b'{"extensions":{"mcp":true}}', headers=_JSON_HEADERS
                    )
                except httpx.HTTPError as e:
                    raise _transport_error(e, ep.describe(), "creating a session", None) from e
                if r.status_code != 201:
                    raise error_from_answer(r.status_code, _json_body(r))
                body = _json_body(r)
                sid = body.get("id") if isinstance(body, dict) else None
                if not isinstance(sid, str):
                    raise McpError("the daemon's new session has no id", status=r.status_code, body=body)
                mcp = McpSession(http, ep, sid, owned=True, follow=follow)
            else:
                mcp = McpSession(http, ep, session, owned=False, follow=follow)
            try:
                mcp._start_following()
                if mcp._follow_task is not None:
                    # List after the stream is open, so that no change falls in between.
                    try:
                        await asyncio.wait_for(mcp._stream_open.wait(), 5.0)
                    except TimeoutError:
                        pass
                await mcp.tools()
            except BaseException:
                await mcp.aclose()
                raise
            return mcp
        except BaseException:
            if not http.is_closed:
                await http.aclose()
            raise

    return _Connecting(open_)
