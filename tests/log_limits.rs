//! A server cannot flood the daemon's log: warnings about what one connection's server sent
//! are limited to 10 a minute (the next one says how many were left out), and its text
//! reaches the log without control characters.

mod common;
use common::*;
use serde_json::json;

#[test]
fn a_server_printing_thousands_of_garbage_lines_gets_ten_warnings_a_minute() {
    let d = Daemon::start(json!({"enabled": {"mcp": true}, "mcp": {"servers": {
        "g": fixture_server("garbage.py", &[])}}}));
    let (id, _) = d.session(json!({}));
    let (st, v) = d.call(&id, "mcp__g__spew", json!({"lines": 5000}));
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["content"][0]["text"], "spewed");
    let log = d.log();
    let n = log.matches("not JSON-RPC").count();
    assert!((1..=10).contains(&n), "{n} warnings for 5000 garbage lines");
    // The server's escape sequences never reach the log as escapes.
    assert!(
        !log.contains('\u{1b}'),
        "an escape character reached the log"
    );
    // Every line was still counted.
    let (_, view) = d.get(&format!("/sessions/{id}"));
    let ignored = view["servers"][0]["ignored_messages"].as_u64().unwrap_or(0);
    assert!(ignored >= 5000, "{view}");
}
