//! A hostile Streamable HTTP server (`tests/fixtures/hostile_http.py`) against the daemon,
//! doing on demand what no real peer does, each with the bound the daemon keeps:
//! - ids of 1 MiB (JSON-RPC response ids, SSE event ids on a call's stream and on the
//!   listening stream): the daemon's VmRSS stays within [`IDS_RSS_GROWTH_BOUND`] of where it
//!   started, calls keep working, a call whose stream carries such an event id is lost;
//! - a 16 MiB JSON-RPC batch of pings: refused from a server that negotiated 2025-11-25 (no
//!   answer POSTed at all), accepted from one that negotiated 2025-03-26 with answers bounded
//!   by the rate limit (100/s, burst 200), and the flood far over it closes the connection;
//! - `retry: 0`: the listening stream reopens at most once a second, a resumption at most
//!   every 250 ms (GETs counted against the time that passed);
//! - refusal bodies full of ANSI escapes and line breaks: the error a call answers with has no
//!   control character and is short.
//!
//! The fixture logs every request it gets (`log.jsonl` in its folder); everything binds
//! 127.0.0.1.

mod common;

use common::rss::{rss, RssWatch};
use common::{Daemon, HttpPeer};
use serde_json::{json, Value};
use std::time::{Duration, Instant};

const MIB: u64 = 1024 * 1024;
/// How much the daemon's resident memory may grow while a server sends 1 MiB ids (each
/// event is read and dropped; none is kept).
const IDS_RSS_GROWTH_BOUND: u64 = 64 * MIB;

/// The hostile fixture with `args`, logging to `log.jsonl` in its folder.
fn hostile(args: &[&str]) -> HttpPeer {
    let dir = tempfile::tempdir().unwrap();
    let mut a = vec![
        common::fixture("hostile_http.py"),
        "--log".into(),
        dir.path().join("log.jsonl").display().to_string(),
    ];
    a.extend(args.iter().map(|s| s.to_string()));
    HttpPeer::start_in(dir, "python3", &a, "http")
}

/// What the fixture logged, one object per request.
fn requests(peer: &HttpPeer) -> Vec<Value> {
    common::logged(&peer.file("log.jsonl"))
}

fn count(peer: &HttpPeer, f: impl Fn(&Value) -> bool) -> usize {
    requests(peer).iter().filter(|r| f(r)).count()
}

/// POSTs that carried our answer to a server request.
fn answers(peer: &HttpPeer) -> usize {
    count(peer, |r| r["method"] == "POST" && r["kind"] == "response")
}

fn daemon_for(peer: &HttpPeer, call_timeout_ms: u64) -> (Daemon, String) {
    let d = Daemon::start(json!({"enabled": {"mcp": true}, "mcp": {"servers": {
        "h": {"type": "http", "url": peer.url, "callTimeoutMs": call_timeout_ms}
    }}}));
    let (id, view) = d.session(json!({}));
    assert!(view["error"].is_null(), "{view}");
    assert_eq!(view["servers"][0]["state"], "connected", "{view}");
    echo_ok(&d, &id);
    (d, id)
}

fn echo_ok(d: &Daemon, id: &str) {
    let (st, r) = d.call(id, "mcp__h__echo", json!({"message": "still here"}));
    assert_eq!(st, 200, "{r}");
    assert_eq!(r["content"][0]["text"], "still here", "{r}");
}

fn text(r: &Value) -> &str {
    r["content"][0]["text"].as_str().unwrap_or("")
}

fn ignored(d: &Daemon, id: &str) -> u64 {
    let (_, v) = d.get(&format!("/sessions/{id}"));
    v["servers"][0]["ignored_messages"].as_u64().unwrap_or(0)
}

/// Poll for up to `limit`; true as soon as `f` holds (false: it never did).
fn within(limit: Duration, f: impl FnMut() -> bool) -> bool {
    common::wait_until(limit, f)
}

// ---- 1. ids of 1 MiB ----------------------------------------------------------------------

#[test]
fn ids_of_1_mib_are_never_kept_and_calls_still_work() {
    // The listening stream brings 300 events with 1 MiB event ids; the big_ids call's stream
    // 300 responses with 1 MiB string ids.
    let peer = hostile(&["--get", "bigids", "--n", "300"]);
    let (d, id) = daemon_for(&peer, 30000);
    let base = rss(d.pid());
    let watch = RssWatch::start(d.pid());

    let (st, r) = d.call(&id, "mcp__h__big_ids", json!({}));
    assert_eq!(st, 200, "{r}");
    assert_eq!(text(&r), "after big ids");

    // An event id over 256 bytes ends its stream: the call is lost, its outcome unknown.
    let (st, r) = d.call(&id, "mcp__h__bad_event_id", json!({}));
    assert_eq!(st, 502, "{r}");
    assert_eq!(r["outcome"], "unknown", "{r}");

    // The listening stream met a 1 MiB event id at once and ended; it is reopened on its
    // schedule (1 s, 2 s, ...), never with that id as Last-Event-ID.
    assert!(
        within(Duration::from_secs(20), || count(&peer, |r| r["method"]
            == "GET")
            >= 3),
        "the listening stream was not reopened: {:?}",
        requests(&peer)
    );
    // One request's lost stream is not a lost session: no DELETE, no second handshake.
    assert_eq!(
        count(&peer, |r| r["method"] == "DELETE"),
        0,
        "{:?}",
        requests(&peer)
    );
    assert_eq!(
        count(&peer, |r| r["rpc"] == "initialize"),
        1,
        "{:?}",
        requests(&peer)
    );
    echo_ok(&d, &id);
    let peak = watch.peak();
    eprintln!(
        "daemon VmRSS: {} MiB before, peak {} MiB, bound +{} MiB",
        base / MIB,
        peak / MIB,
        IDS_RSS_GROWTH_BOUND / MIB
    );
    assert!(
        peak <= base + IDS_RSS_GROWTH_BOUND,
        "the daemon grew from {} MiB to {} MiB",
        base / MIB,
        peak / MIB
    );
    assert_eq!(
        count(&peer, |r| r["method"] == "GET"
            && !r["last_event_id"].is_null()),
        0,
        "a GET carried a Last-Event-ID"
    );
    // The 300 orphan responses were counted as ignored.
    let n = ignored(&d, &id);
    assert!(n >= 300, "ignored_messages = {n}");
}

// ---- 2. batches ---------------------------------------------------------------------------

#[test]
fn a_16_mib_batch_of_pings_from_a_2025_11_25_server_is_refused_without_a_post() {
    let peer = hostile(&[]);
    let (d, id) = daemon_for(&peer, 30000);
    let posts_before = count(&peer, |r| r["method"] == "POST");
    let (st, r) = d.call(&id, "mcp__h__batch", json!({"big": true}));
    // A batch is a protocol error in this era: the answer it held is lost with it.
    assert_eq!(st, 502, "{r}");
    assert_eq!(r["outcome"], "unknown", "{r}");
    let msg = r["error"]["message"].as_str().unwrap_or("");
    assert!(msg.contains("batch"), "{msg}");
    // No answer to any of its pings is ever POSTed (polled for 3 s).
    assert!(
        !within(Duration::from_secs(3), || answers(&peer) > 0),
        "{} answers POSTed",
        answers(&peer)
    );
    let posts = count(&peer, |r| r["method"] == "POST") - posts_before;
    eprintln!("POSTs the server received for the batch call: {posts}");
    assert!(posts <= 2, "{posts} POSTs");
    assert!(ignored(&d, &id) >= 1);
    echo_ok(&d, &id);
}

#[test]
fn a_batch_from_a_2025_03_26_server_is_accepted_with_answers_bounded_by_the_rate_limit() {
    let peer = hostile(&["--version", "2025-03-26"]);
    let (d, id) = daemon_for(&peer, 30000);
    let (_, v) = d.get(&format!("/sessions/{id}"));
    assert_eq!(v["servers"][0]["protocol_version"], "2025-03-26", "{v}");
    let inits = || count(&peer, |r| r["rpc"] == "initialize");
    // Answers keep coming for a while if they are not bounded: each step polls for 3 s.
    let over = |limit: usize| within(Duration::from_secs(3), || answers(&peer) > limit);

    // Within the burst of 200: every ping is answered.
    let (st, r) = d.call(&id, "mcp__h__batch", json!({"pings": 150}));
    assert_eq!(st, 200, "{r}");
    assert_eq!(text(&r), "batched");
    assert!(
        within(Duration::from_secs(20), || answers(&peer) >= 150),
        "{} of 150 pings answered",
        answers(&peer)
    );
    assert!(!over(150), "{} answers to 150 pings", answers(&peer));

    // 900 more: what is left of the burst (and what refilled at 100/s) is answered, the rest
    // dropped and counted; 100 a second refill, so no more than 100 per second waited.
    let t0 = Instant::now();
    let (st, r) = d.call(&id, "mcp__h__batch", json!({"pings": 900}));
    assert_eq!(st, 200, "{r}");
    let limit = |t: Instant| 200 + 100 * (t.elapsed().as_secs() as usize + 1);
    assert!(
        !over(150 + limit(t0)),
        "{} answers after {:?}",
        answers(&peer),
        t0.elapsed()
    );
    let n = answers(&peer) - 150;
    eprintln!("answers POSTed: 150 for 150 pings, {n} for 900 more");
    assert!(n <= limit(t0), "{n} answers");
    assert!(n < 900, "{n} answers");
    let dropped = ignored(&d, &id);
    assert!(dropped >= 500, "ignored_messages = {dropped}");
    assert_eq!(inits(), 1, "900 pings at once are not yet a flood");

    // 16 MiB of pings (about 370,000) with the result first: the result arrives; the flood
    // far over the limit closes the connection, and what was queued is not posted.
    let before = answers(&peer);
    let t0 = Instant::now();
    let (st, r) = d.call(&id, "mcp__h__batch", json!({"big": true}));
    assert_eq!(st, 200, "{r}");
    assert_eq!(text(&r), "batched");
    assert!(!over(before + limit(t0)), "{} answers", answers(&peer));
    eprintln!(
        "answers POSTed for the 16 MiB batch: {}",
        answers(&peer) - before
    );
    let dropped = ignored(&d, &id);
    assert!(dropped >= 1000, "ignored_messages = {dropped}");
    // The connection was closed: the next call dials again.
    echo_ok(&d, &id);
    assert_eq!(inits(), 2, "the next call did not dial again");
}

// ---- 3. retry: 0 --------------------------------------------------------------------------

#[test]
fn retry_0_reopens_the_listening_stream_at_most_once_a_second() {
    let peer = hostile(&["--get", "retry0"]);
    let (_d, _id) = daemon_for(&peer, 30000);
    let gets = || count(&peer, |r| r["method"] == "GET");
    assert!(
        within(Duration::from_secs(10), || gets() >= 1),
        "no listening stream"
    );
    let (t0, g0) = (Instant::now(), gets());
    std::thread::sleep(Duration::from_secs(3));
    let (elapsed, n) = (t0.elapsed(), gets() - g0);
    eprintln!("GETs of the listening stream in {elapsed:?}: {n}");
    // One wait of at least a second before each reopening.
    assert!(
        n as u64 <= elapsed.as_secs() + 1,
        "{n} GETs in {elapsed:?} (retry: 0 obeyed)"
    );
}

#[test]
fn retry_0_resumes_a_broken_stream_at_most_every_250_ms() {
    let peer = hostile(&[]);
    let (d, id) = daemon_for(&peer, 3000);
    let t0 = Instant::now();
    // Every resumption brings one new event and breaks again: resumed until the call's
    // timeout, never answered.
    let (st, r) = d.call(&id, "mcp__h__cut0", json!({}));
    let elapsed = t0.elapsed();
    assert_eq!(st, 502, "{r}");
    assert_eq!(r["outcome"], "unknown", "{r}");
    let resumptions = count(&peer, |r| {
        r["method"] == "GET"
            && r["last_event_id"]
                .as_str()
                .is_some_and(|l| l.starts_with("c-"))
    });
    eprintln!("resumptions in {elapsed:?}: {resumptions}");
    assert!(resumptions >= 1, "never resumed");
    assert!(
        resumptions as u128 <= elapsed.as_millis() / 250 + 1,
        "{resumptions} resumptions in {elapsed:?}"
    );
}

// ---- 4. text from the server in errors ----------------------------------------------------

/// Every string in `v`, with where it is.
fn strings(v: &Value, at: String, out: &mut Vec<(String, String)>) {
    match v {
        Value::String(s) => out.push((at, s.clone())),
        Value::Array(a) => {
            for (i, x) in a.iter().enumerate() {
                strings(x, format!("{at}[{i}]"), out);
            }
        }
        Value::Object(o) => {
            for (k, x) in o {
                strings(x, format!("{at}.{k}"), out);
            }
        }
        _ => {}
    }
}

fn assert_clean(r: &Value) {
    let mut all = Vec::new();
    strings(r, String::new(), &mut all);
    for (at, s) in &all {
        let bad: Vec<char> = s
            .chars()
            .filter(|c| c.is_control() || ('\u{202a}'..='\u{202e}').contains(c))
            .collect();
        assert!(
            bad.is_empty(),
            "{at} holds control characters {bad:?}: {s:?}"
        );
        assert!(s.chars().count() <= 400, "{at} is {} chars long", s.len());
    }
}

#[test]
fn refusal_bodies_full_of_ansi_escapes_reach_errors_short_and_without_control_characters() {
    let peer = hostile(&[]);
    let (d, id) = daemon_for(&peer, 30000);
    // A 400 whose body is a JSON-RPC error: the call's error.
    let (st, r) = d.call(&id, "mcp__h__ansi_rpc", json!({}));
    assert_eq!(st, 502, "{r}");
    assert_eq!(r["outcome"], "error", "{r}");
    eprintln!("{r}");
    assert_clean(&r);
    assert!(
        r["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("ERROR")),
        "{r}"
    );
    // A 503 with a text body: not run.
    let (st, r) = d.call(&id, "mcp__h__ansi_plain", json!({}));
    assert_eq!(st, 503, "{r}");
    eprintln!("{r}");
    assert_clean(&r);
    echo_ok(&d, &id);
}
