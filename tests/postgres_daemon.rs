//! The daemon end to end on PostgreSQL (a build with `--features postgres`, and
//! `ALBEDO_TEST_POSTGRES_URL` naming a database, as `tests/run-all.sh` sets it up with
//! `tests/peers/postgres.sh`): two daemons with different homes share one catalogue store,
//! as replicas do, so a server one of them discovered is never waited on by the other.
//! Without the URL the test says so and passes (the SQLite side is `tests/lifecycle.rs`),
//! unless `ALBEDO_TEST_REQUIRE_POSTGRES=1` (set by `.ci/run`, and by `tests/run-all.sh` when
//! it started PostgreSQL): then a missing URL fails it.
#![cfg(feature = "postgres")]

mod common;
use common::*;
use serde_json::json;
use std::time::{Duration, Instant};

#[test]
fn daemons_sharing_a_postgres_store_never_wait_on_a_server_either_has_heard_from() {
    let url = match std::env::var("ALBEDO_TEST_POSTGRES_URL") {
        Ok(url) if !url.is_empty() => url,
        _ if required("POSTGRES") => panic!(
            "ALBEDO_TEST_REQUIRE_POSTGRES=1 but ALBEDO_TEST_POSTGRES_URL is not set: \
             PostgreSQL was set up for this run and the test cannot use it"
        ),
        _ => {
            eprintln!("ALBEDO_TEST_POSTGRES_URL is not set: skipped");
            return;
        }
    };
    // The log's path is in the server's arguments: a configuration (and fingerprint) of its
    // own on every run, so rows left by earlier runs in the shared database do not count.
    let log = tempfile::NamedTempFile::new().unwrap();
    let server = fixture_server(
        "slow_start.py",
        &["--log", log.path().to_str().unwrap(), "--delay-ms", "1500"],
    );
    let ext = json!({"enabled": {"mcp": true}, "mcp": {"servers": {"pgslow": server}}});
    let env = [("ALBEDO_DATABASE_URL", url.as_str())];

    // The first daemon has never heard of the server: preparation waits for it, then the
    // catalogue is saved in PostgreSQL.
    let a = Daemon::start_env(ext.clone(), &env);
    let t = Instant::now();
    let (id, view) = a.session(json!({}));
    assert!(t.elapsed() >= Duration::from_millis(1500), "{view}");
    assert!(a.tool_names(&id).contains(&"mcp__pgslow__echo".to_owned()));
    assert!(!std::path::Path::new(&a.home.path().join("albedo.db")).exists());

    // A second daemon, another home with the same fingerprint key (replicas share the key
    // file: README, Configuration), the same database: advertised from the saved catalogue
    // before the server is sent anything.
    std::fs::write(log.path(), "").unwrap();
    let home_b = tempfile::tempdir().unwrap();
    std::fs::write(home_b.path().join("extensions.json"), ext.to_string()).unwrap();
    let key_b = home_b.path().join("fingerprint.key");
    std::fs::copy(a.home.path().join("fingerprint.key"), &key_b).unwrap();
    let b = Daemon::start_in(home_b, &env);
    let t = Instant::now();
    let (id, view) = b.session(json!({}));
    let opened = t.elapsed();
    assert!(
        b.tool_names(&id).contains(&"mcp__pgslow__echo".to_owned()),
        "{view}"
    );
    assert!(opened < Duration::from_millis(1500), "waited {opened:?}");
    assert!(
        logged(log.path()).is_empty(),
        "the server was already talked to"
    );
    // And the call works (it dials the server then).
    let (st, r) = b.call(&id, "mcp__pgslow__echo", json!({"message": "pg"}));
    assert_eq!(st, 200, "{r}");
}
