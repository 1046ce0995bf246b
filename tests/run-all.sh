#!/usr/bin/env bash
# Runs every test: the Rust tests (which use the peers in .peers/ and the fixtures), then the
# conformance suites (tests/conformance.sh) when present. Exits non-zero on any failure.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# shellcheck source=peers/env.sh
source tests/peers/env.sh
bash tests/peers/install.sh   # idempotent; well under a second when everything is in place
# Includes tests/bench.rs: the benchmark in its quick mode (tiny sizes, about 30 s, plus a first
# debug build of its rmcp client, about 70 s), run so that it cannot rot, not for figures
# (README, "Benchmarks"). A debug build: the release build of the crate and of rmcp would add
# about 10 minutes.
cargo test --all-targets 2>&1
if [ -n "${ALBEDO_TEST_POSTGRES_URL:-}" ]; then
  # The same catalogue store on PostgreSQL (a build with libpq), and two daemons sharing it.
  cargo test --features postgres --lib store::catalogue 2>&1
  cargo test --features postgres --test postgres_daemon 2>&1
fi
if [ -f tests/conformance.sh ]; then
  bash tests/conformance.sh
fi
