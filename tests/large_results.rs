//! Large results of every shape through the daemon's API, over stdio, HTTP JSON and SSE: a
//! result of 1 MiB and more is checked as JSON while it arrives (`protocol::check`), and only
//! the rest of its message is parsed afterwards. A good one reaches the caller byte for byte
//! (UTF-8, escapes and all), one with its own `outcome` as its last key gets albedo's, and one
//! that turns out not to be JSON near its very end (a cut, a bad escape, a control character,
//! a byte that is not UTF-8) is refused as before: the call's outcome is unknown, and the next
//! call works. The fixture is `tests/fixtures/large_shapes.py` (stdio) and
//! `tests/fixtures/http_faults.py`'s `shaped` tool (HTTP), which write the messages as raw text.

mod common;
use common::*;
use serde_json::{json, Value};

const BYTES: usize = 1 << 20;

fn servers(servers: Value) -> Value {
    json!({"enabled": {"mcp": true}, "mcp": {"servers": servers}})
}

/// The text the fixture writes for `n` (its `text_of`).
fn text_of(n: usize) -> String {
    let piece = "ascii é€😀 \"quoted\" \\ back/slash\nline é 😀 ";
    piece.repeat((n / piece.len()).max(1))
}

const BROKEN: [&str; 4] = ["broken_end", "bad_escape", "control_char", "bad_utf8"];

/// Every shape through `tool` of session `id`; `extra`: more arguments.
fn every_shape(d: &Daemon, id: &str, tool: &str, extra: Value) {
    let args = |shape: &str| {
        let mut a = json!({"bytes": BYTES, "shape": shape});
        if let (Some(a), Some(e)) = (a.as_object_mut(), extra.as_object()) {
            a.extend(e.clone());
        }
        a
    };
    let want = text_of(BYTES);
    for round in 0..2 {
        let (st, r) = d.call(id, tool, args("plain"));
        assert_eq!(st, 200, "round {round}: {}", short(&r));
        assert_eq!(r["outcome"], "ok");
        assert_eq!(r["isError"], false);
        assert!(
            r["content"][0]["text"].as_str() == Some(want.as_str()),
            "round {round}: the text changed on its way ({} bytes)",
            r["content"][0]["text"].as_str().map_or(0, str::len)
        );
    }
    let (st, r) = d.call(id, tool, args("outcome_last"));
    assert_eq!(st, 200, "{}", short(&r));
    assert_eq!(r["outcome"], "ok", "albedo's outcome replaces the server's");
    assert_eq!(r["content"][0]["text"].as_str(), Some(want.as_str()));
    for shape in BROKEN {
        let (st, r) = d.call(id, tool, args(shape));
        assert_eq!(st, 502, "{shape}: {}", short(&r));
        assert_eq!(r["outcome"], "unknown", "{shape}: {}", short(&r));
        let (st, r) = d.call(id, tool, args("plain"));
        assert_eq!(st, 200, "after {shape}: {}", short(&r));
    }
}

fn short(v: &Value) -> String {
    v.to_string().chars().take(300).collect()
}

#[test]
fn large_results_over_stdio() {
    let server = fixture_server("large_shapes.py", &[]);
    let mut server = server;
    server["callTimeoutMs"] = json!(3000);
    let d = Daemon::start(servers(json!({ "big": server })));
    let (id, view) = d.session(json!({}));
    assert!(
        view["warnings"].as_array().is_some_and(Vec::is_empty),
        "{view}"
    );
    every_shape(&d, &id, "mcp__big__shaped", json!({}));
}

#[test]
fn large_results_over_http_json_and_sse() {
    let (fx, _log) = http_faults(&[]);
    let d = Daemon::start(servers(json!({
        "big": {"type": "http", "url": fx.url, "callTimeoutMs": 5000},
    })));
    let (id, view) = d.session(json!({}));
    assert!(
        view["warnings"].as_array().is_some_and(Vec::is_empty),
        "{view}"
    );
    every_shape(&d, &id, "mcp__big__shaped", json!({}));
    every_shape(&d, &id, "mcp__big__shaped", json!({"sse": true}));
}
