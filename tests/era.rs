//! The 2026-07-28 era and era detection, through the daemon's HTTP API: real modern peers
//! (TypeScript SDK v2, Python mcp, FastMCP) over stdio and HTTP, older peers still detected as
//! such, and fixtures for the probe's corner cases.

mod common;
use common::*;
use serde_json::{json, Value};
use std::path::Path;
use std::time::{Duration, Instant};

fn node_modules() -> String {
    peers().join("npm/node_modules").display().to_string()
}

fn ts_v2_stdio() -> Value {
    json!({"type": "stdio", "command": "node",
           "args": [server_script("ts_v2_server.mjs"), node_modules()]})
}

/// An HTTP peer on a free port: `program args... --port 0 --port-file F`.
/// The TypeScript SDK v2 test server over HTTP, with `extra` arguments.
fn ts_v2_http(extra: &[String]) -> HttpPeer {
    let mut args = vec![
        server_script("ts_v2_server.mjs"),
        node_modules(),
        "--transport".into(),
        "http".into(),
    ];
    args.extend_from_slice(extra);
    start_peer("node", &args)
}

fn start_peer(program: &str, args: &[String]) -> HttpPeer {
    let mut a = args.to_vec();
    a.extend(["--port".into(), "0".into()]);
    HttpPeer::start(program, &a)
}

fn server<'a>(view: &'a Value, name: &str) -> &'a Value {
    view["servers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == name)
        .unwrap()
}

fn session_view(d: &Daemon, id: &str) -> Value {
    d.get(&format!("/sessions/{id}")).1
}

#[test]
fn eras_are_detected_on_both_transports() {
    let ts = ts_v2_http(&[]);
    let py = start_peer(
        &venv_python(),
        &[
            server_script("py_mcp_server.py"),
            "--transport".into(),
            "http".into(),
        ],
    );
    let fm = start_peer(
        &venv_python(),
        &[
            server_script("fastmcp_paged.py"),
            "--transport".into(),
            "http".into(),
        ],
    );
    let ev = HttpPeer::everything();
    let d = Daemon::start(json!({"enabled": {"mcp": true}, "mcp": {"servers": {
        "ts_stdio": ts_v2_stdio(),
        "ts_http": {"type": "http", "url": ts.url},
        "py_http": {"type": "http", "url": py.url},
        "fm_http": {"type": "http", "url": fm.url},
        "fm_stdio": {"type": "stdio", "command": venv_python(),
                     "args": [server_script("fastmcp_paged.py"), "--transport", "stdio"]},
        "ev_http": {"type": "http", "url": ev.url},
        "ev_stdio": {"type": "stdio", "command": "node", "args": [everything_js()]},
        "fs_stdio": {"type": "stdio", "command": "node", "args": [filesystem_js(), "/tmp"]}
    }}}));
    let (id, view) = d.session(json!({}));
    assert!(view["warnings"].as_array().unwrap().is_empty(), "{view}");
    let v = session_view(&d, &id);
    for (name, era, version) in [
        ("ts_stdio", "modern", "2026-07-28"),
        ("ts_http", "modern", "2026-07-28"),
        ("py_http", "modern", "2026-07-28"),
        ("fm_http", "modern", "2026-07-28"),
        ("fm_stdio", "modern", "2026-07-28"),
        ("ev_http", "legacy", "2025-11-25"),
        ("ev_stdio", "legacy", "2025-11-25"),
        ("fs_stdio", "legacy", "2025-11-25"),
    ] {
        let s = server(&v, name);
        assert_eq!(s["state"], "connected", "{name}: {v}");
        assert_eq!(s["era"], era, "{name}: {v}");
        assert_eq!(s["protocol_version"], version, "{name}: {v}");
    }
    // Modern calls on every transport.
    for tool in [
        "mcp__ts_stdio__echo",
        "mcp__ts_http__echo",
        "mcp__py_http__echo",
    ] {
        let (st, r) = d.call(&id, tool, json!({"message": "m"}));
        assert_eq!(st, 200, "{tool}: {r}");
    }
    let (st, r) = d.call(&id, "mcp__fm_http__t01", json!({"text": "x"}));
    assert_eq!(st, 200, "{r}");
    let (st, r) = d.call(&id, "mcp__ev_http__echo", json!({"message": "legacy http"}));
    assert_eq!(st, 200, "{r}");
    // x-mcp-header: the argument is mirrored into Mcp-Param-Region over HTTP.
    let (st, r) = d.call(
        &id,
        "mcp__ts_http__region_tool",
        json!({"region": "Hello, 世界"}),
    );
    assert_eq!(st, 200, "{r}");
    assert_eq!(
        r["structuredContent"]["header"], "=?base64?SGVsbG8sIOS4lueVjA==?=",
        "{r}"
    );
    let (st, r) = d.call(
        &id,
        "mcp__ts_http__region_tool",
        json!({"region": "us-west1"}),
    );
    assert_eq!(st, 200, "{r}");
    assert_eq!(r["structuredContent"]["header"], "us-west1", "{r}");
    // Resources over the modern era.
    let (st, r) = d.call(
        &id,
        "mcp__py_http__read_resource",
        json!({"uri": "memo://hello"}),
    );
    assert_eq!(st, 200, "{r}");
}

#[test]
fn a_tool_added_at_run_time_reaches_the_session_through_subscriptions_listen() {
    let ts = ts_v2_http(&[]);
    let d = Daemon::start(json!({"enabled": {"mcp": true}, "mcp": {"servers": {
        "ts": ts_v2_stdio(),
        "tsh": {"type": "http", "url": ts.url}}}}));
    let (id, _) = d.session(json!({}));
    // Give the listens a moment to be acknowledged.
    std::thread::sleep(Duration::from_millis(500));
    let gen = d.get(&format!("/sessions/{id}/tools")).1["generation"]
        .as_u64()
        .unwrap();
    d.post(
        &format!("/sessions/{id}/activity"),
        json!({"kind": "submit"}),
    );
    for server in ["ts", "tsh"] {
        let (st, r) = d.call(
            &id,
            &format!("mcp__{server}__add_tool"),
            json!({"name": format!("fresh_{server}")}),
        );
        assert_eq!(st, 200, "{r}");
    }
    std::thread::sleep(Duration::from_millis(1000));
    // Not mid-turn.
    assert_eq!(
        d.get(&format!("/sessions/{id}/tools")).1["generation"]
            .as_u64()
            .unwrap(),
        gen
    );
    let (_, a) = d.post(
        &format!("/sessions/{id}/activity"),
        json!({"kind": "turn_end"}),
    );
    assert_eq!(a["refresh"], true, "{a}");
    let names = d.tool_names(&id);
    assert!(names.contains(&"mcp__ts__fresh_ts".to_owned()), "{names:?}");
    assert!(
        names.contains(&"mcp__tsh__fresh_tsh".to_owned()),
        "{names:?}"
    );
    let (st, r) = d.call(&id, "mcp__ts__fresh_ts", json!({"message": "new"}));
    assert_eq!(st, 200, "{r}");
}

#[test]
fn the_probe_corner_cases() {
    let dir = tempfile::tempdir().unwrap();
    let log = |n: &str| dir.path().join(format!("{n}.log")).display().to_string();
    let d = Daemon::start(json!({"enabled": {"mcp": true}, "mcp": {"servers": {
        "silent": fixture_server("era_silent_discover.py", &["--log", &log("silent")]),
        "late": fixture_server("era_late_discover.py", &["--log", &log("late")]),
        "only0618": fixture_server("era_only_0618.py", &["--log", &log("only0618")]),
        "none": fixture_server("era_none.py", &["--log", &log("none")]),
        "modern": fixture_server("modern_stdio.py", &["--log", &log("modern")])
    }}}));
    let t = Instant::now();
    let (id, view) = d.session(json!({}));
    assert!(t.elapsed() < Duration::from_secs(10));
    let v = session_view(&d, &id);
    // A server that ignores server/discover gets initialize after it. (When: the one-second
    // rule is `tests/handshake.rs`, on a paused clock. The fixture reads the probe late,
    // while Python starts up, so no time it could stamp would say what the client waited.)
    assert_eq!(server(&v, "silent")["era"], "legacy", "{v}");
    let methods: Vec<Value> = logged(Path::new(&log("silent")))
        .iter()
        .map(|m| m["method"].clone())
        .collect();
    assert_eq!(
        methods[..2],
        [json!("server/discover"), json!("initialize")],
        "{methods:?}"
    );
    // A late discovery answer after initialize was answered is ignored.
    assert_eq!(server(&v, "late")["era"], "legacy", "{v}");
    let (st, r) = d.call(&id, "mcp__late__echo", json!({"message": "x"}));
    assert_eq!(st, 200, "{r}");
    // -32022 naming only 2025-06-18: initialize, settling on 2025-06-18.
    assert_eq!(
        server(&v, "only0618")["protocol_version"],
        "2025-06-18",
        "{v}"
    );
    assert!(logged(Path::new(&log("only0618")))
        .iter()
        .any(|m| m["method"] == "initialize"));
    // Naming nothing albedo speaks: refused, with what it offered.
    assert_eq!(server(&v, "none")["state"], "left_out", "{v}");
    assert!(
        view["warnings"].to_string().contains("2099-01-01"),
        "{view}"
    );
    // A modern-only stdio server: no initialize, _meta on every request, one listen held.
    assert_eq!(server(&v, "modern")["era"], "modern", "{v}");
    let (st, r) = d.call(&id, "mcp__modern__echo", json!({"message": "m"}));
    assert_eq!(st, 200, "{r}");
    let ml = logged(Path::new(&log("modern")));
    assert!(
        !ml.iter().any(|m| m["method"] == "initialize"),
        "initialize sent to a modern server"
    );
    for m in ml.iter().filter(|m| m.get("id").is_some()) {
        assert_eq!(
            m["params"]["_meta"]["io.modelcontextprotocol/protocolVersion"], "2026-07-28",
            "{m}"
        );
        assert_eq!(
            m["params"]["_meta"]["io.modelcontextprotocol/clientCapabilities"],
            json!({}),
            "{m}"
        );
    }
    assert_eq!(
        ml.iter()
            .filter(|m| m["method"] == "subscriptions/listen")
            .count(),
        1
    );
    // input_required is an error that says why.
    let (st, r) = d.call(&id, "mcp__modern__needs_input", json!({}));
    assert_eq!(st, 502, "{r}");
    assert!(
        r["error"]["message"]
            .as_str()
            .unwrap()
            .contains("input_required"),
        "{r}"
    );
    // Closing the session cancels the listen on stdio.
    assert_eq!(d.delete(&format!("/sessions/{id}")), 204);
    assert!(wait_until(Duration::from_secs(3), || logged(Path::new(
        &log("modern")
    ))
    .iter()
    .any(|m| m["method"] == "notifications/cancelled")));
}

/// A call that outlives its `callTimeoutMs` is cancelled the way its era and transport say,
/// and a real SDK server (TypeScript SDK v2) sees it: over 2026-07-28 HTTP by the request's
/// stream being closed (no `notifications/cancelled`), over stdio by `notifications/cancelled`
/// carrying our reason. Either way the API reports the outcome as unknown, and the next call
/// is served (a timed-out call drops the connection; the next one dials again).
#[test]
fn a_timed_out_modern_call_is_cancelled_and_the_server_sees_it() {
    let dir = tempfile::tempdir().unwrap();
    let log = |name: &str| dir.path().join(name).display().to_string();
    let ts = ts_v2_http(&["--cancel-log".into(), log("http.log")]);
    let stdio_args = json!([
        server_script("ts_v2_server.mjs"),
        node_modules(),
        "--cancel-log",
        log("stdio.log")
    ]);
    let d = Daemon::start(json!({"enabled": {"mcp": true}, "mcp": {"servers": {
        "tsh": {"type": "http", "url": ts.url, "callTimeoutMs": 400},
        "tss": {"type": "stdio", "command": "node", "callTimeoutMs": 400, "args": stdio_args}}}}));
    let (id, view) = d.session(json!({}));
    assert!(view["warnings"].as_array().unwrap().is_empty(), "{view}");
    let reasons = |name: &str| std::fs::read_to_string(log(name)).unwrap_or_default();
    for (server, file) in [("tsh", "http.log"), ("tss", "stdio.log")] {
        assert_eq!(server_era(&d, &id, server), "modern");
        let (st, r) = d.call(&id, &format!("mcp__{server}__wait"), json!({"ms": 20_000}));
        assert_eq!(st, 502, "{server}: {r}");
        assert_eq!(r["outcome"], "unknown", "{server}: {r}");
        assert!(
            wait_until(Duration::from_secs(10), || !reasons(file).is_empty()),
            "{server}: the server never saw the cancellation"
        );
        let seen = reasons(file);
        assert_eq!(seen.lines().count(), 1, "{server}: {seen}");
        if server == "tss" {
            // notifications/cancelled, with the reason albedo gives.
            assert_eq!(seen.trim(), "timed out", "{server}: {seen}");
        } else {
            // The stream closed; no notifications/cancelled is sent in this era over HTTP.
            assert_ne!(seen.trim(), "timed out", "{server}: {seen}");
        }
        let (st, r) = d.call(&id, &format!("mcp__{server}__wait"), json!({"ms": 1}));
        assert_eq!(st, 200, "{server}: {r}");
        assert_eq!(r["content"][0]["text"], "waited 1 ms", "{server}: {r}");
    }
}

fn server_era(d: &Daemon, id: &str, name: &str) -> String {
    server(&session_view(d, id), name)["era"]
        .as_str()
        .unwrap_or("")
        .to_owned()
}
