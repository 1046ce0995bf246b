# Sourced by test scripts (bash): exports where the real MCP peers live.
# Everything is installed by tests/peers/install.sh into $REPO/.peers/ (see the layout comment
# at the top of install.sh). Sourcing this file installs nothing and needs no network.
# Rust tests read these variables when set, and fall back to the same fixed paths otherwise.
_albedo_env_dir="$(cd "$(dirname "${BASH_SOURCE[0]:-$0}")" && pwd)"
ALBEDO_REPO="$(cd "$_albedo_env_dir/../.." && pwd)"
unset _albedo_env_dir
export ALBEDO_REPO
export ALBEDO_PEERS="$ALBEDO_REPO/.peers"
# Node 22 binary, for the conformance runner only (the machine's node 20 runs the servers).
export PEERS_NODE22="$ALBEDO_PEERS/node22/bin/node"
export PEERS_NODE22_BIN="$ALBEDO_PEERS/node22/bin"
# node_modules holding server-everything, server-filesystem and the TS SDK v2 packages.
export PEERS_NPM_MODULES="$ALBEDO_PEERS/npm/node_modules"
# server-everything: `node $EVERYTHING_JS [stdio|streamableHttp|sse]`, HTTP port from env PORT.
export EVERYTHING_JS="$PEERS_NPM_MODULES/@modelcontextprotocol/server-everything/dist/index.js"
# server-filesystem (stdio only): `node $FILESYSTEM_JS ALLOWED_DIR...`
export FILESYSTEM_JS="$PEERS_NPM_MODULES/@modelcontextprotocol/server-filesystem/dist/index.js"
# Conformance runners (run with $PEERS_NODE22): 0.1.16 and 0.2.0-alpha.12.
export CONFORMANCE_STABLE_JS="$ALBEDO_PEERS/conformance-stable/node_modules/@modelcontextprotocol/conformance/dist/index.js"
export CONFORMANCE_NEXT_JS="$ALBEDO_PEERS/conformance-next/node_modules/@modelcontextprotocol/conformance/dist/index.js"
# Python venv with mcp==2.3.0 and fastmcp==4.2.3.
export PEERS_VENV_PY="$ALBEDO_PEERS/venv/bin/python"
# `node --require $PEERS_LOCALHOST_CJS ...` makes listen() without a host bind 127.0.0.1.
export PEERS_LOCALHOST_CJS="$ALBEDO_REPO/tests/peers/localhost.cjs"
# Test servers (Python, run with $PEERS_VENV_PY) and fault fixtures (stdlib only, python3).
export PY_MCP_SERVER="$ALBEDO_REPO/tests/servers/py_mcp_server.py"
export FASTMCP_PAGED="$ALBEDO_REPO/tests/servers/fastmcp_paged.py"
# OAuth-protected peers: FastMCP with its in-memory OAuth provider (see its docstring), and the
# TS SDK v1 example `node --require $PEERS_LOCALHOST_CJS $TS_OAUTH_EXAMPLE_JS --oauth` (env
# MCP_PORT, MCP_AUTH_PORT; its URL is http://localhost:$MCP_PORT/mcp).
export FASTMCP_OAUTH="$ALBEDO_REPO/tests/servers/fastmcp_oauth.py"
export TS_OAUTH_EXAMPLE_JS="$PEERS_NPM_MODULES/@modelcontextprotocol/sdk/dist/esm/examples/server/simpleStreamableHttp.js"
export ALBEDO_FIXTURES="$ALBEDO_REPO/tests/fixtures"
