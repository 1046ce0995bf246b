//! A hostile stdio server (`tests/fixtures/hostile_stdio.py`) against the daemon: it floods
//! pings and never reads its stdin again, so that every answer the daemon writes stays queued
//! on the daemon's side. The daemon's memory must stay bounded (its answers queue up to
//! 32 MiB; server requests beyond 100/s, burst 200, are dropped, and a flood far over that
//! closes the connection), the connection must close (the call in flight answers `unknown`,
//! the server process ends) and a later call must dial again.
//!
//! Memory is the daemon's VmRSS (`/proc/<pid>/status`), sampled while the flood runs.

mod common;
use common::rss::{rss, RssWatch};
use common::*;
use serde_json::{json, Value};
use std::path::Path;
use std::time::Duration;

const MIB: u64 = 1024 * 1024;
/// The daemon's resident memory may grow by at most this much during a flood (the writer
/// queue's 32 MiB, a line being read, the writer's batch, and allocator slack).
const RSS_GROWTH_BOUND: u64 = 64 * MIB;

fn servers(servers: Value) -> Value {
    json!({"enabled": {"mcp": true}, "mcp": {"servers": servers}})
}

fn p(path: &Path) -> String {
    path.display().to_string()
}

fn echo_ok(d: &Daemon, id: &str) {
    let (st, r) = d.call(id, "mcp__flood__echo", json!({"message": "still here"}));
    assert_eq!(st, 200, "{r}");
    assert_eq!(r["content"][0]["text"], "still here", "{r}");
}

fn ignored(d: &Daemon, id: &str) -> u64 {
    let (_, v) = d.get(&format!("/sessions/{id}"));
    v["servers"][0]["ignored_messages"].as_u64().unwrap_or(0)
}

/// Start the daemon with the flood fixture, open a session, call echo once; the daemon,
/// the session id and the server's first pid.
fn flood_session(tmp: &Path) -> (Daemon, String, i32) {
    let pidfile = tmp.join("pid");
    let mut def = fixture_server("hostile_stdio.py", &["--pidfile", &p(&pidfile)]);
    def["callTimeoutMs"] = json!(30000);
    let d = Daemon::start(servers(json!({ "flood": def })));
    let (id, view) = d.session(json!({}));
    assert!(view["error"].is_null(), "{view}");
    echo_ok(&d, &id);
    let pid = read_pid(&pidfile).expect("the fixture wrote its pid");
    (d, id, pid)
}

/// After a flood: the call answered `unknown`, the server process ended, the next call
/// dials a new one.
fn closed_and_redialled(d: &Daemon, id: &str, tmp: &Path, first: i32, call: (u16, Value)) {
    let (st, r) = call;
    assert_eq!(st, 502, "{r}");
    assert_eq!(r["outcome"], "unknown", "{r}");
    assert!(
        wait_until(Duration::from_secs(15), || !alive(first)),
        "the flooding server (pid {first}) is still running: the connection was not closed"
    );
    echo_ok(d, id);
    let second = read_pid(&tmp.join("pid")).unwrap_or(first);
    assert_ne!(second, first, "the later call did not dial a new server");
}

#[test]
fn pings_with_1_mib_ids_from_a_server_that_does_not_read_fill_at_most_32_mib_then_close() {
    let tmp = tempfile::tempdir().unwrap();
    let (d, id, first) = flood_session(tmp.path());
    let base = rss(d.pid());
    let watch = RssWatch::start(d.pid());
    // 600 pings whose answers echo a 1 MiB id: 600 MiB if the daemon queued them all.
    let call = d.call(
        &id,
        "mcp__flood__flood",
        json!({"count": 600, "id_bytes": 1 << 20}),
    );
    let peak = watch.peak();
    eprintln!(
        "daemon VmRSS: {} MiB before the flood, peak {} MiB (bound: +{} MiB)",
        base / MIB,
        peak / MIB,
        RSS_GROWTH_BOUND / MIB
    );
    assert!(
        peak <= base + RSS_GROWTH_BOUND,
        "the daemon grew from {} MiB to {} MiB",
        base / MIB,
        peak / MIB
    );
    let log = d.log();
    assert!(log.contains("32 MiB"), "no writer-queue overflow logged");
    closed_and_redialled(&d, &id, tmp.path(), first, call);
}

#[test]
fn a_flood_of_small_pings_is_rate_limited_then_closes_the_connection() {
    let tmp = tempfile::tempdir().unwrap();
    let (d, id, first) = flood_session(tmp.path());
    let base = rss(d.pid());
    let watch = RssWatch::start(d.pid());
    // Two million pings as fast as the pipe takes them, far over 100/s.
    let call = d.call(
        &id,
        "mcp__flood__flood",
        json!({"count": 2_000_000, "id_bytes": 0}),
    );
    let peak = watch.peak();
    eprintln!(
        "daemon VmRSS: {} MiB before the flood, peak {} MiB (bound: +{} MiB)",
        base / MIB,
        peak / MIB,
        RSS_GROWTH_BOUND / MIB
    );
    assert!(
        peak <= base + RSS_GROWTH_BOUND,
        "the daemon grew from {} MiB to {} MiB",
        base / MIB,
        peak / MIB
    );
    closed_and_redialled(&d, &id, tmp.path(), first, call);
    // The requests over the limit were dropped and counted (at least the 1,000 of the
    // flood allowance, beyond the burst of 200).
    let n = ignored(&d, &id);
    assert!(n >= 1000, "ignored_messages = {n}");
}

/// A result goes out as the text the server sent, with albedo's `outcome` beside its keys;
/// odd shapes still make valid answers: a result with an `outcome` of its own (albedo's
/// replaces it), an empty object, and a result that is not an object (under `result`).
#[test]
fn results_of_odd_shapes_make_valid_answers() {
    let d = Daemon::start(servers(json!({
        "flood": fixture_server("hostile_stdio.py", &[])
    })));
    let (id, _) = d.session(json!({}));
    let call = |kind: &str| {
        let (st, r) = d.call(&id, "mcp__flood__odd", json!({ "kind": kind }));
        assert_eq!(st, 200, "{kind}: {r}");
        assert_eq!(r["outcome"], "ok", "{kind}: {r}");
        r
    };
    let r = call("outcome");
    assert_eq!(r["content"][0]["text"], "mine", "{r}");
    assert_eq!(
        r.as_object().unwrap().len(),
        2,
        "one outcome, albedo's: {r}"
    );
    assert_eq!(call("empty"), json!({"outcome": "ok"}));
    assert_eq!(call("array"), json!({"outcome": "ok", "result": [1, 2]}));
    let r = call("unicode");
    assert_eq!(r["content"][0]["text"], "é \u{2028} \"q\" \\ 🦀", "{r}");
}
