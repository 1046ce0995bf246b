#!/usr/bin/env bash
# The official MCP conformance runners against `albedo-mcp conformance-client`: every client
# scenario of each runner.
#
# Each scenario: the runner (under Node 22) starts the scenario's mock server, runs
# `<wrapper> <url>` (the wrapper execs `albedo-mcp conformance-client "$@"`, since the
# runner splits --command on spaces), and judges what it saw. Scenarios run one at a time (the
# runner's `--suite` runs a whole suite at once, which on 2 cores could race timing-sensitive
# scenarios such as sse-retry), each under a timeout; then, with no scenario named, the
# prerelease runner's whole `--suite all` once more at once, as a user would run it.
#
# Scenarios: all the client scenarios the stable runner (0.1.16) lists, all those the
# prerelease runner (0.2.0-alpha.12) lists for `--spec-version 2026-07-28`, run with that spec
# version, and the prerelease runner's `[extension]` scenarios (the authorization extensions:
# client credentials, workload identity, enterprise-managed authorization, DPoP), run without
# a spec version (the filter leaves extensions out); the lists come from the runners
# themselves (`list --client`), so a scenario a runner adds is run too. Not applicable, and
# not run (neither a pass nor a failure):
# - sep-2640-client-* (prerelease, [extension]): the skills extension (SEP-2640), which albedo
#   does not implement; it never calls skills/list, and the runner then skips the scenario's
#   only check ("Passed: 0/0").
# The conformance client, unlike the daemon, declares elicitation (form mode) and accepts a
# form with its defaults (src/cli/conformance.rs): elicitation-sep1034-client-defaults (stable)
# and sep-2322-client-request-state (prerelease, MRTR inputResponses) are run like the others.
#
# Expected failures: tests/conformance-expected-failures.yml (the runners' `--expected-failures`
# format, one file for both; it says why for each; none today: `client: []`). The `auth/*`
# scenarios sign in headless through src/oauth/ (see src/cli/conformance/auth.rs), the
# extensions' grants without a browser. Every scenario is run with it:
# - PASS   the runner exits 0 and reports every check passed with no warning ("Passed: N/N, 0
#          failed, 0 warnings", N > 0) and the client exited 0 ("OVERALL: PASSED");
# - XFAIL  the scenario has entries in the file and the runner found exactly those failing
#          (it exits 0); counted apart, not as a pass;
# - FAIL   anything else: a failure the file does not list, a listed scenario or check that now
#          passes (a stale entry: the runner exits 1; remove it), a timeout, no result.
# An entry of the file that names no scenario of either runner is a failure too.
#
# Mock servers bind 127.0.0.1 only: the runner runs with the localhost preload
# (tests/peers/localhost.cjs), and the client dials the runner's `localhost` as 127.0.0.1.
# Logs and checks.json: target/conformance/<runner>/<scenario>/. The whole run (69 scenarios,
# 65 run, then `--suite all`) took 27 s with the debug build already made: 66 passed (stable
# 26, prerelease 39, and the prerelease runner's `client --suite all` at once: "Total: 524
# passed, 0 failed, 0 warnings"), no expected failure, 4 not applicable; each scenario takes 0
# to 4 s.
#
# Usage: bash tests/conformance.sh [SCENARIO...]   (default: all of them; a name selects that
# scenario in every runner that has it). Prints one line per scenario, then a line with the
# expected failures and the scenarios not applicable, then `conformance: N passed, M failed`;
# exits 1 when any failed.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# shellcheck source=peers/env.sh
source tests/peers/env.sh

NEXT_SPEC=2026-07-28
EXPECTED_FAILURES="$ALBEDO_REPO/tests/conformance-expected-failures.yml"
# Scenarios that do not apply to albedo (see the header): not run.
NOT_APPLICABLE=(sep-2640-client-no-prefetch sep-2640-client-verify-digest
  sep-2640-client-verify-size sep-2640-client-verify-frontmatter)
# Per scenario; the runner's own client timeout is 30 s.
SCENARIO_TIMEOUT=${CONFORMANCE_SCENARIO_TIMEOUT:-90}

for f in "$PEERS_NODE22" "$CONFORMANCE_STABLE_JS" "$CONFORMANCE_NEXT_JS" "$PEERS_LOCALHOST_CJS" \
  "$EXPECTED_FAILURES"; do
  if [ ! -e "$f" ]; then
    echo "conformance: $f is missing; run tests/peers/install.sh" >&2
    echo "conformance: 0 passed, 1 failed"
    exit 1
  fi
done

# list_scenarios RUNNER_JS [ARGS...]: the client scenarios the runner lists, one a line.
list_scenarios() {
  local js=$1
  shift
  "$PEERS_NODE22" "$js" list --client "$@" | sed -n 's/^  - \([^ ]*\).*$/\1/p'
}
# list_extensions RUNNER_JS: the client scenarios the runner marks `[extension]`.
list_extensions() {
  "$PEERS_NODE22" "$1" list --client | sed -n 's/^  - \([^ ]*\) \[extension\].*$/\1/p'
}
STABLE_SCENARIOS=()
NEXT_SCENARIOS=()
NEXT_EXTENSIONS=()
mapfile -t STABLE_SCENARIOS < <(list_scenarios "$CONFORMANCE_STABLE_JS")
mapfile -t NEXT_SCENARIOS < <(list_scenarios "$CONFORMANCE_NEXT_JS" --spec-version "$NEXT_SPEC")
mapfile -t NEXT_EXTENSIONS < <(list_extensions "$CONFORMANCE_NEXT_JS")
if [ ${#STABLE_SCENARIOS[@]} -eq 0 ] || [ ${#NEXT_SCENARIOS[@]} -eq 0 ] ||
  [ ${#NEXT_EXTENSIONS[@]} -eq 0 ]; then
  echo "conformance: a runner listed no client scenario (stable: ${#STABLE_SCENARIOS[@]}," \
    "next: ${#NEXT_SCENARIOS[@]}, next extensions: ${#NEXT_EXTENSIONS[@]}); has its" \
    "\`list\` output changed?" >&2
  echo "conformance: 0 passed, 1 failed"
  exit 1
fi
# The entries of the expected-failures file: `<scenario>` or `<scenario>:<check-id>`.
EXPECTED=()
mapfile -t EXPECTED < <(sed -n 's/^[[:space:]]*-[[:space:]]*\([^#[:space:]]*\).*$/\1/p' "$EXPECTED_FAILURES")

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

ONLY=("$@")
wanted() {
  local name=$1
  [ ${#ONLY[@]} -eq 0 ] && return 0
  local s
  for s in "${ONLY[@]}"; do [ "$s" = "$name" ] && return 0; done
  return 1
}
# in LIST... -- NAME: whether NAME is one of LIST.
in_list() {
  local name=${!#} s
  for s in "${@:1:$#-1}"; do [ "$s" = "$name" ] && return 0; done
  return 1
}
# Whether the expected-failures file has an entry for the scenario (whole or per check).
listed() {
  local e
  for e in ${EXPECTED[@]+"${EXPECTED[@]}"}; do
    [ "${e%%:*}" = "$1" ] && return 0
  done
  return 1
}

passed=0
failed=0
xfailed=0
not_applicable=0
started_all=$SECONDS

# Every entry of the file must name a scenario some runner has, and not one that does not apply.
for e in ${EXPECTED[@]+"${EXPECTED[@]}"}; do
  s=${e%%:*}
  if ! in_list "${STABLE_SCENARIOS[@]}" "${NEXT_SCENARIOS[@]}" "${NEXT_EXTENSIONS[@]}" "$s" ||
    in_list "${NOT_APPLICABLE[@]}" "$s"; then
    failed=$((failed + 1))
    printf 'FAIL  %-6s %-44s %s\n' "-" "$e" \
      "an entry of tests/conformance-expected-failures.yml that names no scenario to run"
  fi
done

# run_scenario LABEL RUNNER_JS SCENARIO [EXTRA RUNNER ARGS...]
run_scenario() {
  local label=$1 js=$2 scenario=$3
  shift 3
  if in_list "${NOT_APPLICABLE[@]}" "$scenario"; then
    not_applicable=$((not_applicable + 1))
    printf 'N/A   %-6s %-44s %s\n' "$label" "$scenario" "not run: it does not apply to albedo (see tests/conformance.sh)"
    return
  fi
  local dir="$OUT/$label/${scenario//\//_}"
  rm -rf "$dir"
  mkdir -p "$dir"
  local log="$dir/runner.log"
  local rc=0
  local started=$SECONDS
  NODE_OPTIONS="--require $PEERS_LOCALHOST_CJS" PATH="$PEERS_NODE22_BIN:$PATH" \
    timeout "$SCENARIO_TIMEOUT" "$PEERS_NODE22" "$js" client \
      --command "$WRAPPER" --scenario "$scenario" -o "$dir" \
      --expected-failures "$EXPECTED_FAILURES" "$@" >"$log" 2>&1 || rc=$?
  local took=$((SECONDS - started))
  local summary clean=0
  summary="$(grep -a -E '^Passed: [0-9]+/[0-9]+' "$log" | tail -n 1 || true)"
  if printf '%s\n' "$summary" | grep -q -E '^Passed: ([1-9][0-9]*)/\1, 0 failed, 0 warnings' &&
    grep -a -q 'OVERALL: PASSED' "$log"; then
    clean=1
  fi
  [ -n "$summary" ] || summary="no result (runner exit $rc)"
  if [ "$rc" -eq 0 ] && [ "$clean" -eq 1 ]; then
    passed=$((passed + 1))
    printf 'PASS  %-6s %-44s %s (%ss)\n' "$label" "$scenario" "$summary" "$took"
  elif [ "$rc" -eq 0 ] && listed "$scenario"; then
    xfailed=$((xfailed + 1))
    printf 'XFAIL %-6s %-44s %s (%ss), as tests/conformance-expected-failures.yml says\n' \
      "$label" "$scenario" "$summary" "$took"
  else
    failed=$((failed + 1))
    printf 'FAIL  %-6s %-44s %s (%ss); log: %s\n' "$label" "$scenario" "$summary" "$took" "$log"
    # The failed checks, the baseline's verdict and what the client said, without colour codes.
    sed 's/\x1b\[[0-9;]*m//g' "$log" |
      grep -a -E 'FAILURE|WARNING|Error:|Warning:|SKIPPED: scenario|timed out|albedo-mcp conformance-client:|exited with|Stale baseline|Unexpected failures|^  [~✓✗] ' |
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
for s in "${NEXT_EXTENSIONS[@]}"; do
  if wanted "$s"; then
    run_scenario next "$CONFORMANCE_NEXT_JS" "$s"
  fi
done

# The prerelease runner's whole client suite at once (`client --suite all`, every scenario of
# every spec version and the extensions, as a user would run it), only with no scenario named:
# PASS when the runner exits 0 with "Total: N passed, 0 failed, 0 warnings".
if [ ${#ONLY[@]} -eq 0 ]; then
  dir="$OUT/next/suite-all"
  rm -rf "$dir"
  mkdir -p "$dir"
  rc=0
  started=$SECONDS
  NODE_OPTIONS="--require $PEERS_LOCALHOST_CJS" PATH="$PEERS_NODE22_BIN:$PATH" \
    timeout "${CONFORMANCE_SUITE_TIMEOUT:-900}" "$PEERS_NODE22" "$CONFORMANCE_NEXT_JS" client \
      --command "$WRAPPER" --suite all -o "$dir" \
      --expected-failures "$EXPECTED_FAILURES" >"$dir/runner.log" 2>&1 || rc=$?
  total="$(sed 's/\x1b\[[0-9;]*m//g' "$dir/runner.log" | grep -a -E '^Total: ' | tail -n 1 || true)"
  if [ "$rc" -eq 0 ] && printf '%s\n' "$total" | grep -q -E '^Total: [1-9][0-9]* passed, 0 failed, 0 warnings'; then
    passed=$((passed + 1))
    printf 'PASS  %-6s %-44s %s (%ss)\n' next "--suite all" "$total" "$((SECONDS - started))"
  else
    failed=$((failed + 1))
    printf 'FAIL  %-6s %-44s %s (runner exit %s, %ss); log: %s\n' next "--suite all" \
      "${total:-no total}" "$rc" "$((SECONDS - started))" "$dir/runner.log"
  fi
fi

if [ $((passed + failed + xfailed + not_applicable)) -eq 0 ]; then
  echo "conformance: no scenario matched: ${ONLY[*]}" >&2
  failed=1
fi
echo "conformance: $xfailed expected failures (tests/conformance-expected-failures.yml)," \
  "$not_applicable not applicable; $((SECONDS - started_all)) s"
echo "conformance: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
