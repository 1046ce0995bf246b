"""Finding the daemon, the way every local client does (the CLI's `locate`, `store::token`).

1. `daemon=` (or `ALBEDO_DAEMON` when it is set and not blank): a URL, `host:port`, a bare
   port, or a socket path (`unix:PATH`, `/...`, `./...`, `../...`, `~/...`).
2. Else the socket `$ALBEDO_HOME/albedo.sock` when it is a socket the user owns and a daemon
   accepts a connection on it (no token needed).
3. Else TCP at `config.toml`'s `listen` (`ALBEDO_LISTEN` overrides it; a wildcard address is
   reached over loopback; `https` when `tls_cert` is set), default `127.0.0.1:7420`.

Over TCP the token is `ALBEDO_TOKEN` when set, else the file `$ALBEDO_HOME/api-token` (which
must be private: mode 0600, owned by the user), and the file's token is sent only to a
loopback address or the configured address: a daemon named elsewhere gets its token from
`ALBEDO_TOKEN` (or `token=`).
"""

from __future__ import annotations

import ipaddress
import os
import socket
import ssl
import stat
import tomllib
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from ._errors import ConfigError

DEFAULT_LISTEN = "127.0.0.1:7420"
TOKEN_FILE = "api-token"
SOCKET_FILE = "albedo.sock"


@dataclass(frozen=True)
class Endpoint:
    """Where the daemon is: a Unix socket, or a base URL with the token to send."""

    base_url: str
    uds: str | None = None
    token: str | None = None
    verify: ssl.SSLContext | bool = True

    def describe(self) -> str:
        return f"unix:{self.uds}" if self.uds else self.base_url

    def __repr__(self) -> str:  # never shows the token
        tok = ", token=..." if self.token else ""
        return f"Endpoint({self.describe()!r}{tok})"


def albedo_home(home: str | os.PathLike[str] | None = None) -> Path:
    if home is not None:
        return Path(home)
    env = os.environ.get("ALBEDO_HOME")
    if env:
        return Path(env)
    return Path.home() / ".albedo"


def _valid_token(v: str) -> bool:
    return 16 <= len(v) <= 512 and all(33 <= ord(c) <= 126 for c in v)


def read_token_file(home: Path) -> str | None:
    """The token in `home/api-token`; None when there is none. A file group or others can
    access, or that another user owns, is refused unread, as the daemon does."""
    path = home / TOKEN_FILE
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError as e:
        raise ConfigError(f"cannot use the API token file {path}: {e}") from e
    try:
        st = os.fstat(fd)
        mode = stat.S_IMODE(st.st_mode)
        if mode & 0o077:
            raise ConfigError(
                f"the API token file {path} has mode {mode:04o}: group or others can read it, so "
                "it is not used; run `albedo-mcp token --rotate`"
            )
        if st.st_uid != os.geteuid():
            raise ConfigError(f"the API token file {path} belongs to another user (uid {st.st_uid})")
        with os.fdopen(fd, "rb", closefd=False) as f:
            text = f.read(4096).decode("utf-8", "replace").strip()
    finally:
        os.close(fd)
    if not _valid_token(text):
        raise ConfigError(f"the API token file {path} does not hold a token; run `albedo-mcp token --rotate`")
    return text


def client_token(home: Path) -> str | None:
    """`ALBEDO_TOKEN` when set (None if it is not a token's shape), else the file's."""
    env = os.environ.get("ALBEDO_TOKEN")
    if env is not None:
        v = env.strip()
        return v if _valid_token(v) else None
    return read_token_file(home)


def _load_config(home: Path) -> dict[str, object]:
    path = home / "config.toml"
    try:
        with open(path, "rb") as f:
            return tomllib.load(f)
    except FileNotFoundError:
        return {}
    except (OSError, tomllib.TOMLDecodeError):
        return {}


def _tls_context(cfg: dict[str, object]) -> ssl.SSLContext | bool:
    files = cfg.get("ca_files")
    env = os.environ.get("ALBEDO_CA_FILES")
    if isinstance(env, str) and env.strip():
        files = [p for p in env.split(",") if p.strip()]
    if not isinstance(files, list) or not files:
        return True
    ctx = ssl.create_default_context()
    for p in files:
        if isinstance(p, str):
            ctx.load_verify_locations(cafile=p)
    return ctx


def configured_base(home: Path) -> tuple[str, dict[str, object]]:
    cfg = _load_config(home)
    listen = os.environ.get("ALBEDO_LISTEN", "").strip() or str(cfg.get("listen") or DEFAULT_LISTEN)
    tls = bool(os.environ.get("ALBEDO_TLS_CERT") or cfg.get("tls_cert"))
    listen = listen.strip()
    hostport = listen
    host, sep, port = listen.rpartition(":")
    if sep:
        h = host.strip("[]")
        try:
            ip = ipaddress.ip_address(h)
        except ValueError:
            ip = None
        if ip is not None and ip.is_unspecified:
            hostport = f"127.0.0.1:{port}" if ip.version == 4 else f"[::1]:{port}"
    return f"{'https' if tls else 'http'}://{hostport}", cfg


def _is_loopback_url(base: str) -> bool:
    host = urlsplit(base).hostname
    if host is None:
        return False
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def parse_daemon(given: str) -> tuple[str, str]:
    """("socket", path) or ("url", base URL without a trailing `/`), as the CLI reads
    `--daemon`."""
    n = given.strip()
    if not n:
        raise ConfigError(f"{given!r} is not a daemon address (it is empty)")
    if n.startswith("unix:"):
        p = n[len("unix:") :]
        if not p:
            raise ConfigError(f"{given!r} is not a daemon address (no socket path after unix:)")
        return "socket", p
    if n.startswith(("/", "./", "../")):
        return "socket", n
    if n.startswith("~/"):
        return "socket", str(Path.home() / n[2:])
    if "://" in n:
        url = n
    elif n.isdigit():
        url = f"http://127.0.0.1:{n}"
    else:
        has_port = ("]:" in n) if n.startswith("[") else (":" in n)
        url = f"http://{n}" if has_port else f"http://{n}:{DEFAULT_LISTEN.rsplit(':', 1)[1]}"
    u = urlsplit(url)
    if u.scheme not in ("http", "https"):
        raise ConfigError(f"{given!r} is not a daemon address (the scheme must be http or https)")
    if not u.hostname:
        raise ConfigError(f"{given!r} is not a daemon address (no host)")
    if u.query or u.fragment:
        raise ConfigError(f"{given!r} is not a daemon address (a query or fragment has no place in it)")
    if u.username or u.password:
        raise ConfigError(f"{given!r} is not a daemon address (credentials have no place in it; use ALBEDO_TOKEN)")
    return "url", url.rstrip("/")


def socket_answers(path: Path) -> bool:
    """The user's own daemon answers on the socket: a socket the user owns that accepts."""
    try:
        st = os.lstat(path)
    except OSError:
        return False
    if not stat.S_ISSOCK(st.st_mode) or st.st_uid != os.geteuid():
        return False
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.settimeout(2.0)
        s.connect(str(path))
        return True
    except OSError:
        return False
    finally:
        s.close()


def locate(
    daemon: str | None = None,
    *,
    home: str | os.PathLike[str] | None = None,
    token: str | None = None,
) -> Endpoint:
    """Where the daemon is, and the token to send (see the module's doc)."""
    h = albedo_home(home)
    named = daemon if daemon is not None else os.environ.get("ALBEDO_DAEMON")
    if named is not None and named.strip():
        kind, where = parse_daemon(named)
        if kind == "socket":
            return Endpoint(base_url="http://localhost", uds=where)
        base = where
        conf_base, cfg = configured_base(h)
        if token is None and (
            "ALBEDO_TOKEN" in os.environ or _is_loopback_url(base) or base == conf_base
        ):
            token = client_token(h)
        return Endpoint(base_url=base, token=token, verify=_tls_context(cfg))
    sock = h / SOCKET_FILE
    if socket_answers(sock):
        return Endpoint(base_url="http://localhost", uds=str(sock))
    base, cfg = configured_base(h)
    if token is None:
        token = client_token(h)
    return Endpoint(base_url=base, token=token, verify=_tls_context(cfg))
