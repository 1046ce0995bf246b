#!/usr/bin/env bash
# Runs every test: the Rust tests (which use the peers in .peers/ and the fixtures), the
# Python binding's (pytest, src/python/tests), the PostgreSQL ones, then the conformance suites
# (tests/conformance.sh) when present. Exits non-zero on any failure.
#
# PostgreSQL: with ALBEDO_TEST_POSTGRES_URL set, that database is used. Otherwise this script
# starts the throwaway cluster of tests/peers/postgres.sh (installing Debian's packages when
# they are missing needs root or sudo) and stops it at the end if it started it. If it cannot,
# the PostgreSQL tests are skipped and the LAST LINES of the output say so, unless
# ALBEDO_TEST_REQUIRE_POSTGRES=1 (as .ci/run sets it): then that is a failure, and so is any
# PostgreSQL test that finds no URL.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# shellcheck source=peers/env.sh
source tests/peers/env.sh
bash tests/peers/install.sh   # idempotent; well under a second when everything is in place

skipped=()
stop_postgres=0
finish() {
  local rc=$?
  if [ "$stop_postgres" = 1 ]; then
    bash tests/peers/postgres.sh --stop >/dev/null 2>&1 || true
  fi
  if [ "${#skipped[@]}" -gt 0 ]; then
    echo
    echo "################################################################################"
    for s in "${skipped[@]}"; do
      echo "run-all.sh: SKIPPED: $s"
    done
    echo "################################################################################"
  fi
  exit "$rc"
}
trap finish EXIT

if [ -z "${ALBEDO_TEST_POSTGRES_URL:-}" ]; then
  already=0
  if bash tests/peers/postgres.sh --status; then already=1; fi
  if url="$(bash tests/peers/postgres.sh)"; then
    export ALBEDO_TEST_POSTGRES_URL="$url"
    # A cluster that was running before (another run's) is left running.
    if [ "$already" = 0 ]; then stop_postgres=1; fi
  elif [ "${ALBEDO_TEST_REQUIRE_POSTGRES:-}" = 1 ]; then
    echo "run-all.sh: ALBEDO_TEST_REQUIRE_POSTGRES=1 and PostgreSQL could not be started" >&2
    exit 1
  else
    skipped+=("the PostgreSQL tests (cargo test --features postgres): tests/peers/postgres.sh could not start PostgreSQL; set ALBEDO_TEST_POSTGRES_URL or fix that and run again")
  fi
fi
if [ -n "${ALBEDO_TEST_POSTGRES_URL:-}" ]; then
  # From here on a PostgreSQL test that does not find the URL fails instead of skipping.
  export ALBEDO_TEST_REQUIRE_POSTGRES=1
fi

if ! command -v tmux >/dev/null && [ "${ALBEDO_TEST_REQUIRE_TMUX:-}" != 1 ]; then
  skipped+=("the terminal form's tests (tests/tui.rs): no tmux on this machine; apt-get install -y tmux (.ci/run does)")
fi
if ! command -v chromium >/dev/null && [ "${ALBEDO_TEST_REQUIRE_BROWSER:-}" != 1 ]; then
  skipped+=("the browser tests (tests/browser.rs, tests/web_pane.rs): no chromium on this machine; apt-get install -y chromium (.ci/run does)")
fi

# Includes tests/bench.rs: the benchmark in its quick mode (tiny sizes, about 30 s, plus a first
# debug build of its rmcp client, about 70 s), run so that it cannot rot, not for figures
# (README, "Benchmarks"). A debug build: the release build of the crate and of rmcp would add
# about 10 minutes.
cargo test --all-targets 2>&1
# The Python binding (src/python): pytest against the daemon binary `cargo test` just built
# (target/debug/albedo-mcp) and the real servers, in the peers venv (about a minute).
(cd src/python && ALBEDO_BIN="$PWD/../../target/debug/albedo-mcp" \
  "$PEERS_VENV_PY" -m pytest -q -p no:cacheprovider tests) 2>&1
if [ -n "${ALBEDO_TEST_POSTGRES_URL:-}" ]; then
  # The same catalogue store on PostgreSQL (a build with libpq), and two daemons sharing it.
  cargo test --features postgres --lib store::catalogue 2>&1
  cargo test --features postgres --test postgres_daemon 2>&1
fi
if [ -f tests/conformance.sh ]; then
  bash tests/conformance.sh
fi
