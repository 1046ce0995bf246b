#!/usr/bin/env bash
# A throwaway PostgreSQL for the catalogue store's PostgreSQL test: installs Debian's
# `postgresql` and `libpq-dev` when missing (apt-get; root or sudo), then starts a private
# cluster listening on 127.0.0.1 only, port 54329, data under /tmp, trust authentication, and
# prints its URL on stdout (everything else goes to stderr). Idempotent: a cluster already
# running is reused.
#
#   export ALBEDO_TEST_POSTGRES_URL="$(bash tests/peers/postgres.sh)"
#   cargo test --features postgres --lib store::catalogue
#   bash tests/peers/postgres.sh --stop      # stop it and delete its data
#   bash tests/peers/postgres.sh --status    # exit 0 when the cluster is running (installs nothing)
#
# Environment: ALBEDO_PG_PORT (default 54329), ALBEDO_PG_DIR (default /tmp/albedo-pg-PORT).
set -euo pipefail

PORT="${ALBEDO_PG_PORT:-54329}"
DIR="${ALBEDO_PG_DIR:-/tmp/albedo-pg-$PORT}"
DB=albedo_test
URL="postgres://postgres@127.0.0.1:$PORT/$DB"

log() { echo "postgres.sh: $*" >&2; }

as_root() {
  if [ "$(id -u)" = 0 ]; then "$@"
  elif command -v sudo >/dev/null; then sudo "$@"
  else log "need root (or sudo) to install packages"; exit 1
  fi
}

bindir() { { ls -d /usr/lib/postgresql/*/bin 2>/dev/null || true; } | sort -V | tail -n 1; }

# The server refuses to run as root: as root, run it as the `postgres` user the package made.
as_pg() {
  if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

BIN="$(bindir)"

if [ "${1:-}" = "--status" ]; then
  if [ -n "$BIN" ] && [ -f "$DIR/data/PG_VERSION" ] \
      && as_pg "$BIN/pg_ctl" -D "$DIR/data" status >/dev/null 2>&1; then
    exit 0
  fi
  exit 1
fi

if [ "${1:-}" = "--stop" ]; then
  if [ -n "$BIN" ] && [ -d "$DIR/data" ]; then
    as_pg "$BIN/pg_ctl" -D "$DIR/data" -m fast -w stop >&2 || true
  fi
  rm -rf "$DIR"
  exit 0
fi

if [ -z "$BIN" ] || [ ! -x "$BIN/initdb" ] || ! dpkg -s libpq-dev >/dev/null 2>&1; then
  log "installing postgresql and libpq-dev"
  export DEBIAN_FRONTEND=noninteractive
  as_root apt-get update -qq >&2
  as_root apt-get install -y -qq --no-install-recommends postgresql libpq-dev >&2
  BIN="$(bindir)"
  [ -n "$BIN" ] || { log "no /usr/lib/postgresql/*/bin after installing"; exit 1; }
fi

if [ -f "$DIR/data/PG_VERSION" ] && as_pg "$BIN/pg_ctl" -D "$DIR/data" status >/dev/null 2>&1; then
  log "reusing the cluster in $DIR"
else
  if [ ! -f "$DIR/data/PG_VERSION" ]; then
    rm -rf "$DIR"
    mkdir -p "$DIR"
    if [ "$(id -u)" = 0 ]; then chown postgres: "$DIR"; fi
    as_pg "$BIN/initdb" -D "$DIR/data" -U postgres -A trust -E UTF8 --locale=C.UTF-8 \
      --no-sync >"$DIR/initdb.log" 2>&1 || { cat "$DIR/initdb.log" >&2; exit 1; }
  fi
  # Throwaway data: no fsync. The Unix socket stays in $DIR, away from /var/run/postgresql.
  if ! as_pg "$BIN/pg_ctl" -D "$DIR/data" -l "$DIR/server.log" -w -t 60 \
      -o "-c listen_addresses=127.0.0.1 -p $PORT -k $DIR -c fsync=off -c synchronous_commit=off -c full_page_writes=off" \
      start >&2; then
    cat "$DIR/server.log" >&2 || true
    exit 1
  fi
fi

psql_() { "$BIN/psql" -h 127.0.0.1 -p "$PORT" -U postgres -X -q -tA "$@"; }
if [ "$(psql_ -d postgres -c "SELECT 1 FROM pg_database WHERE datname = '$DB'")" != 1 ]; then
  psql_ -d postgres -c "CREATE DATABASE $DB" >&2
fi
psql_ -d "$DB" -c "SELECT 1" >/dev/null
echo "$URL"
