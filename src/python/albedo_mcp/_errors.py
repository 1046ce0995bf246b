"""The binding's exceptions. Each says whether the request ran.

    McpError                      base; `.ran` is False, None (unknown) or True
    ├── NotRun                    the request did not reach the server: safe to try again
    │   ├── ServerUnavailable     the server is not connected (unavailable, left out, starting)
    │   ├── NeedsSignIn           the server wants the user to sign in (web pane or CLI)
    │   ├── UnknownTool           no such tool in this session (now)
    │   ├── BadArguments          the arguments were refused before the tool ran
    │   ├── SessionNotFound       the session is gone (deleted, or closed when idle)
    │   ├── DaemonUnreachable     no daemon accepted the connection
    │   └── ConfigError           the daemon's address or token cannot be used
    ├── UnknownOutcome            the request may or may not have run: inspect before acting
    │   ├── TransportLost         the connection to the daemon broke mid-request
    │   └── TimedOut              no answer in time
    └── ServerError               the server ran the request and answered with a JSON-RPC
                                  error or an unusable result

A tool that reports its own failure (`isError: true`) does not raise: it is a result.
Nothing here is retried by the binding.
"""

from __future__ import annotations

from typing import Any, ClassVar


class McpError(Exception):
    """A failure that is not the tool's own error result."""

    #: False: the request did not run; None: unknown; True: it ran and failed.
    ran: ClassVar[bool | None] = None

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        code: str | None = None,
        tool: str | None = None,
        server: str | None = None,
        body: Any = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        #: The daemon's HTTP status (None when no answer came).
        self.status = status
        #: The daemon's error code (`unavailable`, `no_such_tool`, ...), or the binding's.
        self.code = code
        #: The tool name as given to the call.
        self.tool = tool
        #: The server, when known.
        self.server = server
        #: The daemon's whole error answer (untrusted data, never evaluated).
        self.body = body

    def __reduce__(self) -> Any:
        return (_rebuild, (type(self), self.message, self.__dict__))


def _rebuild(cls: type[McpError], message: str, state: dict[str, Any]) -> McpError:
    e = cls.__new__(cls)
    Exception.__init__(e, message)
    e.__dict__.update(state)
    return e


class NotRun(McpError):
    """The request did not reach the server: nothing happened there."""

    ran = False


class ServerUnavailable(NotRun):
    """The server is not connected in this session (unavailable, left out, connecting)."""


class NeedsSignIn(NotRun):
    """The server needs the user to sign in (`albedo-mcp web`, or the sign-in API)."""


class UnknownTool(NotRun):
    """No tool of that name in the session (the binding re-lists its tools when it sees this)."""


class BadArguments(NotRun):
    """The arguments were refused before the tool ran (not an object, missing `uri`, the
    server's JSON-RPC `invalid params`, a body over the daemon's limit)."""


class SessionNotFound(NotRun):
    """The session does not exist (deleted, or closed after being idle)."""


class DaemonUnreachable(NotRun):
    """No daemon accepted the connection (start it with `albedo-mcp serve`)."""


class ConfigError(NotRun):
    """The daemon's address or the API token cannot be used."""


class UnknownOutcome(McpError):
    """The request may or may not have run. It is not retried; inspect before acting again."""

    ran = None


class TransportLost(UnknownOutcome):
    """The connection to the daemon (or the daemon's to the server) broke mid-request."""


class TimedOut(UnknownOutcome):
    """No answer in time."""


class ServerError(McpError):
    """The server handled the request and answered with a JSON-RPC error, or with a result
    the daemon could not use. `.rpc` holds the JSON-RPC error object when there is one."""

    ran = True

    @property
    def rpc(self) -> Any:
        if isinstance(self.body, dict):
            err = self.body.get("error")
            if isinstance(err, dict):
                return err.get("rpc")
        return None
