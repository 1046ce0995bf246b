"""The listening socket of an HTTP test server: bound before the server starts (so that
`--port 0` takes a free port), announced on stderr, and written to `--port-file` (atomically,
with a newline) for the test that started the server to read."""

import os
import socket
import sys


def listen(name: str, host: str, port: int, port_file: str | None) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(128)
    bound = sock.getsockname()[1]
    print(f"{name}: listening on http://{host}:{bound}/mcp", file=sys.stderr, flush=True)
    if port_file:
        tmp = port_file + ".tmp"
        with open(tmp, "w") as f:
            f.write(f"{bound}\n")
        os.replace(tmp, port_file)
    return sock
