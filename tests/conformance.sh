#!/usr/bin/env bash
# The official MCP conformance runner against `albedo-mcp conformance-client`.
#
# Each scenario: the runner (under Node 22) starts the scenario's mock server, runs
# `<wrapper> <url>` (the wrapper execs `albedo-mcp conformance-client "$@"`, since the
# runner splits --command on spaces), and judges what it saw. A scenario passes when the
# runner exits 0 and reports every check passed with no warning ("Passed: N/N, 0 failed,
# 0 warnings", N > 0; a scenario the runner skips as not applicable is not a pass).
#
# Mock servers bind 127.0.0.1 only: the runner runs with the localhost preload
# (tests/peers/localhost.cjs), and the client dials the runner's `localhost` as 127.0.0.1.
#
# Scenarios: the stable runner (0.1.16) `initialize`, `tools_call`, `sse-retry`; the prerelease
# runner (0.2.0-alpha.12) with `--spec-version 2026-07-28` for the 2026-07-28 ones. Auth
# scenarios are not run. Logs and checks.json: target/conformance/<runner>/<scenario>/.
#
# Usage: bash tests/conformance.sh [SCENARIO...]   (default: all of them; a name selects that
# scenario in every runner that has it). Prints one line per scenario, then
# `conformance: N passed, M failed`; exits 1 when any failed.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# shellcheck source=peers/env.sh
source tests/peers/env.sh

STABLE_SCENARIOS=(initialize tools_call sse-retry)
NEXT_SPEC=2026-07-28
NEXT_SCENARIOS=(
  tools_call
  request-metadata
  http-standard-headers
  http-custom-headers
  http-invalid-tool-headers
  json-schema-ref-no-deref
  json-schema-2020-12-preservation
)
# Per scenario; the runner's own client timeout is 30 s.
SCENARIO_TIMEOUT=${CONFORMANCE_SCENARIO_TIMEOUT:-90}

for f in "$PEERS_NODE22" "$CONFORMANCE_STABLE_JS" "$CONFORMANCE_NEXT_JS" "$PEERS_LOCALHOST_CJS"; do
  if [ ! -e "$f" ]; then
    echo "conformance: $f is missing; run tests/peers/install.sh" >&2
    echo "conformance: 0 passed, 1 failed"
    exit 1
  fi
done

cargo build --quiet --bin albedo-mcp
BIN="$ALBEDO_REPO/target/debug/albedo-mcp"
OUT="$ALBEDO_REPO/target/conformance"
mkdir -p "$OUT"

WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
WRAPPER="$WORK/albedo-conformance-client"
printf '#!/bin/sh\nexec "%s" conformance-client "$@"\n' "$BIN" > "$WRAPPER"
chmod +x "$WRAPPER"
case "$WRAPPER" in
  *' '*) echo "conformance: the wrapper path $WRAPPER has a space; set TMPDIR" >&2; exit 1 ;;
esac

wanted() {
  local name=$1
  [ ${#ONLY[@]} -eq 0 ] && return 0
  local s
  for s in "${ONLY[@]}"; do [ "$s" = "$name" ] && return 0; done
  return 1
}
ONLY=("$@")

passed=0
failed=0

# run_scenario LABEL RUNNER_JS SCENARIO [EXTRA RUNNER ARGS...]
run_scenario() {
  local label=$1 js=$2 scenario=$3
  shift 3
  local dir="$OUT/$label/${scenario//\//_}"
  rm -rf "$dir"
  mkdir -p "$dir"
  local log="$dir/runner.log"
  local rc=0
  local started=$SECONDS
  NODE_OPTIONS="--require $PEERS_LOCALHOST_CJS" PATH="$PEERS_NODE22_BIN:$PATH" \
    timeout "$SCENARIO_TIMEOUT" "$PEERS_NODE22" "$js" client \
      --command "$WRAPPER" --scenario "$scenario" -o "$dir" "$@" >"$log" 2>&1 || rc=$?
  local took=$((SECONDS - started))
  local summary
  summary="$(grep -a -E '^Passed: [0-9]+/[0-9]+' "$log" | tail -n 1 || true)"
  if [ "$rc" -eq 0 ] && printf '%s\n' "$summary" | grep -q -E '^Passed: ([1-9][0-9]*)/\1, 0 failed, 0 warnings'; then
    passed=$((passed + 1))
    printf 'PASS  %-6s %-34s %s (%ss)\n' "$label" "$scenario" "$summary" "$took"
  else
    failed=$((failed + 1))
    [ -n "$summary" ] || summary="no result (runner exit $rc)"
    printf 'FAIL  %-6s %-34s %s (%ss); log: %s\n' "$label" "$scenario" "$summary" "$took" "$log"
    # The failed checks and what the client said, without colour codes.
    sed 's/\x1b\[[0-9;]*m//g' "$log" |
      grep -a -E 'FAILURE|WARNING|Error:|Warning:|SKIPPED: scenario|timed out|conformance-client|exited with' |
      head -n 40 | sed 's/^/      /' || true
  fi
}

for s in "${STABLE_SCENARIOS[@]}"; do
  if wanted "$s"; then
    run_scenario stable "$CONFORMANCE_STABLE_JS" "$s"
  fi
done
for s in "${NEXT_SCENARIOS[@]}"; do
  if wanted "$s"; then
    run_scenario next "$CONFORMANCE_NEXT_JS" "$s" --spec-version "$NEXT_SPEC"
  fi
done

if [ $((passed + failed)) -eq 0 ]; then
  echo "conformance: no scenario matched: ${ONLY[*]}" >&2
  failed=1
fi
echo "conformance: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
