//! HTTP servers through the daemon's API: a session the server ended is dialled again by the
//! session's next call (server-everything's 400 and the fault fixture's 404), the headers a
//! real 2026-07-28 server (TypeScript SDK v2) received from the daemon, and tools whose
//! `x-mcp-header` annotations break the rules left out of an HTTP server's tools, and an
//! HTTPS server trusted through `ca_files` in `config.toml` (a CA made with openssl).

mod common;
use common::*;
use serde_json::{json, Value};
use std::path::PathBuf;
use std::time::Duration;

fn node_modules() -> String {
    peers().join("npm/node_modules").display().to_string()
}

/// The TypeScript SDK v2 test server over HTTP, with `extra` arguments.
fn ts_v2_http(extra: &[String]) -> HttpPeer {
    let mut args = vec![
        server_script("ts_v2_server.mjs"),
        node_modules(),
        "--transport".into(),
        "http".into(),
    ];
    args.extend_from_slice(extra);
    args.extend(["--port".into(), "0".into()]);
    HttpPeer::start("node", &args)
}

/// End a legacy session from outside the daemon, as another client (or the server's own
/// housekeeping) would.
fn delete_session(url: &str, session: &str) -> u16 {
    match ureq::delete(url)
        .set("mcp-session-id", session)
        .set("mcp-protocol-version", "2025-11-25")
        .call()
    {
        Ok(r) => r.status(),
        Err(ureq::Error::Status(s, _)) => s,
        Err(e) => panic!("DELETE {url}: {e}"),
    }
}

/// A server's entry in the session view.
fn server_view(d: &Daemon, id: &str, name: &str) -> Value {
    let (_, v) = d.get(&format!("/sessions/{id}"));
    v["servers"]
        .as_array()
        .and_then(|a| a.iter().find(|s| s["name"] == name))
        .cloned()
        .unwrap_or(Value::Null)
}

fn servers(servers: Value) -> Value {
    json!({"enabled": {"mcp": true}, "mcp": {"servers": servers}})
}

/// `tests/fixtures/http_faults.py` as server `f` of a daemon, and a session that reached it
/// with no warning: the fixture (kept alive), its request log, the daemon, the session's id.
fn a_session_on_the_faults_fixture() -> (HttpPeer, PathBuf, Daemon, String) {
    let (fx, log) = http_faults(&[]);
    let d = Daemon::start(servers(json!({"f": {"type": "http", "url": fx.url}})));
    let (id, view) = d.session(json!({}));
    assert!(view["warnings"].as_array().unwrap().is_empty(), "{view}");
    (fx, log, d, id)
}

#[test]
fn everything_ending_the_session_is_dialled_again_by_the_next_call() {
    let peer = HttpPeer::everything();
    let d = Daemon::start(servers(json!({"ev": {"type": "http", "url": peer.url}})));
    let (id, view) = d.session(json!({}));
    assert!(view["warnings"].as_array().unwrap().is_empty(), "{view}");
    let (st, r) = d.call(&id, "mcp__ev__echo", json!({"message": "before"}));
    assert_eq!(st, 200, "{r}");
    assert_eq!(r["content"][0]["text"], "Echo: before", "{r}");
    let first = peer.everything_sessions();
    assert_eq!(first.len(), 1, "{first:?}");

    // server-everything forgets the session, which ends its GET stream; the daemon opens it
    // again (after a second) and hears 400 "No valid session ID": the connection is over.
    // (A call racing that reopening could be lost with it; the call that itself finds the
    // session over is the fault fixture's test below.)
    assert_eq!(delete_session(&peer.url, &first[0]), 200);
    let ev = || server_view(&d, &id, "ev");
    assert!(
        wait_until(Duration::from_secs(20), || ev()["last_error"]
            .as_str()
            .is_some_and(|e| e.contains("ended the session"))),
        "the daemon did not notice: {}",
        ev()
    );
    assert!(ev()["era"].is_null(), "no live client: {}", ev());
    // The next call dials again, and is served by a new session.
    let (st, r) = d.call(&id, "mcp__ev__echo", json!({"message": "after"}));
    assert_eq!(st, 200, "{r}");
    assert_eq!(r["content"][0]["text"], "Echo: after", "{r}");
    assert_eq!(ev()["era"], "legacy", "{}", ev());
    assert!(ev()["last_error"].is_null(), "{}", ev());
    let sessions = peer.everything_sessions();
    assert_eq!(sessions.len(), 2, "a new session: {sessions:?}");
    assert_ne!(sessions[1], first[0]);
    // And it keeps serving on the new one.
    let (st, r) = d.call(&id, "mcp__ev__echo", json!({"message": "again"}));
    assert_eq!(st, 200, "{r}");
    assert_eq!(peer.everything_sessions().len(), 2);
}

#[test]
fn a_session_the_server_ends_with_404_is_dialled_again_by_the_next_call() {
    let (fx, log, d, id) = a_session_on_the_faults_fixture();
    let (st, r) = d.call(&id, "mcp__f__echo", json!({"message": "before"}));
    assert_eq!(st, 200, "{r}");
    assert_eq!(r["content"][0]["text"], "Echo: before", "{r}");

    // The fixture forgets s-1: every later request carrying it gets 404. (It refuses the GET
    // stream with 405, so the daemon can only learn it from the next call.)
    assert_eq!(delete_session(&fx.url, "s-1"), 200);
    let (st, r) = d.call(&id, "mcp__f__echo", json!({"message": "lost"}));
    assert_eq!(st, 503, "{r}");
    assert_eq!(r["outcome"], "not_run", "{r}");
    let (st, r) = d.call(&id, "mcp__f__echo", json!({"message": "again"}));
    assert_eq!(st, 200, "{r}");
    assert_eq!(r["content"][0]["text"], "Echo: again", "{r}");

    let reqs = logged(&log);
    let inits: Vec<&Value> = reqs.iter().filter(|r| r["rpc"] == "initialize").collect();
    assert_eq!(inits.len(), 2, "one dial, then one more: {reqs:?}");
    assert!(inits.iter().all(|r| r["session"].is_null()), "{inits:?}");
    let calls: Vec<&Value> = reqs.iter().filter(|r| r["rpc"] == "tools/call").collect();
    let sessions: Vec<&Value> = calls.iter().map(|r| &r["session"]).collect();
    assert_eq!(
        sessions,
        [&json!("s-1"), &json!("s-1"), &json!("s-2")],
        "{calls:?}"
    );
    // The only DELETE is the test's: no DELETE for a session the server ended.
    assert_eq!(reqs.iter().filter(|r| r["method"] == "DELETE").count(), 1);
}

#[test]
fn a_modern_http_server_receives_the_headers_of_its_era() {
    const KEY: &str = "key-hdr-5d1c";
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("headers.jsonl");
    let ts = ts_v2_http(&["--header-log".into(), log.display().to_string()]);
    let d = Daemon::start_env(
        servers(json!({"ts": {"type": "http", "url": ts.url,
                              "headers": {"X-Api-Key": {"env": "ALBEDO_T_HDR_KEY"}}}})),
        &[("ALBEDO_T_HDR_KEY", KEY)],
    );
    let (id, view) = d.session(json!({}));
    assert!(view["warnings"].as_array().unwrap().is_empty(), "{view}");
    let (st, r) = d.call(&id, "mcp__ts__echo", json!({"message": "hi"}));
    assert_eq!(st, 200, "{r}");
    let (st, r) = d.call(
        &id,
        "mcp__ts__region_tool",
        json!({"region": "Hello, 世界"}),
    );
    assert_eq!(st, 200, "{r}");

    let reqs = logged(&log);
    let posts: Vec<&Value> = reqs.iter().filter(|r| r["method"] == "POST").collect();
    let rpcs: Vec<&str> = posts.iter().filter_map(|r| r["rpc"].as_str()).collect();
    for m in ["server/discover", "tools/list", "tools/call"] {
        assert!(rpcs.contains(&m), "no {m} among {rpcs:?}");
    }
    assert!(!rpcs.contains(&"initialize"), "{rpcs:?}");
    for r in &posts {
        let h = &r["headers"];
        assert_eq!(h["mcp-protocol-version"], "2026-07-28", "{r}");
        // Mcp-Method mirrors the body's method, on every request and notification.
        assert_eq!(h["mcp-method"], r["rpc"], "{r}");
        assert_eq!(h["content-type"], "application/json", "{r}");
        assert_eq!(h["accept"], "application/json, text/event-stream", "{r}");
        assert_eq!(h["x-api-key"], KEY, "{r}");
        assert!(h.get("mcp-session-id").is_none(), "{r}");
    }
    let call_headers = |tool: &str| -> Value {
        posts
            .iter()
            .find(|r| r["rpc"] == "tools/call" && r["headers"]["mcp-name"] == tool)
            .map(|r| r["headers"].clone())
            .unwrap_or_else(|| panic!("no tools/call with Mcp-Name {tool}: {posts:?}"))
    };
    let echo = call_headers("echo");
    assert!(
        echo.as_object()
            .unwrap()
            .keys()
            .all(|k| !k.starts_with("mcp-param-")),
        "{echo}"
    );
    let region = call_headers("region_tool");
    assert_eq!(
        region["mcp-param-region"], "=?base64?SGVsbG8sIOS4lueVjA==?=",
        "{region}"
    );
    // Requests that name nothing carry no Mcp-Name.
    for r in posts.iter().filter(|r| r["rpc"] != "tools/call") {
        assert!(r["headers"].get("mcp-name").is_none(), "{r}");
    }
}

#[test]
fn tools_with_invalid_x_mcp_header_annotations_are_left_out_over_http_only() {
    let ts = ts_v2_http(&["--bad-header-tools".into()]);
    let d = Daemon::start(servers(json!({
        "tsh": {"type": "http", "url": ts.url},
        "tss": {"type": "stdio", "command": "node",
                "args": [server_script("ts_v2_server.mjs"), node_modules(), "--bad-header-tools"]}
    })));
    let (id, view) = d.session(json!({}));
    let v = d.get(&format!("/sessions/{id}")).1;
    for s in v["servers"].as_array().unwrap() {
        assert_eq!(s["era"], "modern", "{v}");
    }
    let names = d.tool_names(&id);
    // HTTP: left out, each with a warning naming the server, the tool and the rule.
    for tool in ["dup_header_tool", "nested_header_tool"] {
        assert!(
            !names.contains(&format!("mcp__tsh__{tool}")),
            "{tool} advertised: {names:?}"
        );
        assert!(
            view["warnings"].as_array().unwrap().iter().any(|w| {
                let w = w.as_str().unwrap_or("");
                w.contains("\"tsh\"")
                    && w.contains(&format!("\"{tool}\""))
                    && w.contains("x-mcp-header")
            }),
            "no warning names {tool}: {view}"
        );
        // stdio has no headers: the same tools are advertised and work.
        assert!(
            names.contains(&format!("mcp__tss__{tool}")),
            "{tool} missing over stdio: {names:?}"
        );
    }
    assert!(!view["warnings"].to_string().contains("\"tss\""), "{view}");
    let (st, r) = d.call(
        &id,
        "mcp__tss__dup_header_tool",
        json!({"a": "x", "b": "y"}),
    );
    assert_eq!(st, 200, "{r}");
    assert_eq!(r["content"][0]["text"], "dup_header_tool ran", "{r}");
    // The server's valid tools are still there, and the valid header still works.
    assert!(names.contains(&"mcp__tsh__echo".to_owned()), "{names:?}");
    let (st, r) = d.call(&id, "mcp__tsh__region_tool", json!({"region": "eu"}));
    assert_eq!(st, 200, "{r}");
    assert_eq!(r["structuredContent"]["header"], "eu", "{r}");
}

/// `ca_files` in `config.toml` is what makes the daemon trust a private CA: without it an
/// HTTPS server with a certificate from that CA is left out, saying why; with it the server
/// is connected and its tools are called over TLS.
#[test]
fn an_https_server_is_trusted_through_the_ca_files_of_config_toml() {
    let certs = tempfile::tempdir().unwrap();
    let (ca, cert, key) = make_certs(certs.path());
    let args = [
        fixture("http_faults.py"),
        "--port".into(),
        "0".into(),
        "--tls-cert".into(),
        cert.display().to_string(),
        "--tls-key".into(),
        key.display().to_string(),
    ];
    let fx = HttpPeer::start_in(tempfile::tempdir().unwrap(), "python3", &args, "https");
    assert!(fx.url.starts_with("https://127.0.0.1:"), "{}", fx.url);
    let ext = servers(json!({"tls": {"type": "http", "url": fx.url}}));

    // Only the system roots: left out, and the warning says why.
    let d = Daemon::start(ext.clone());
    let (_, view) = d.session(json!({}));
    assert!(
        view["warnings"].as_array().unwrap().iter().any(|w| {
            let w = w.as_str().unwrap_or("");
            w.contains("\"tls\"") && w.contains("certificate") && w.contains("ca_files")
        }),
        "{view}"
    );
    drop(d);

    // The CA named in config.toml.
    let home = tempfile::tempdir().unwrap();
    std::fs::write(home.path().join("extensions.json"), ext.to_string()).unwrap();
    std::fs::write(
        home.path().join("config.toml"),
        format!("ca_files = [{:?}]\n", ca.display().to_string()),
    )
    .unwrap();
    let d = Daemon::start_in(home, &[]);
    let (id, view) = d.session(json!({}));
    assert!(view["warnings"].as_array().unwrap().is_empty(), "{view}");
    let (st, r) = d.call(&id, "mcp__tls__echo", json!({"message": "over tls"}));
    assert_eq!(st, 200, "{r}");
    assert_eq!(r["content"][0]["text"], "Echo: over tls", "{r}");
}

/// A call to an HTTP server without a token is POSTed by the API worker that read it, with an
/// awc client that worker keeps for the server (`transport::http::clients`, thread-local): the
/// daemon still stops cleanly after many such calls from both workers (status 0, no panic
/// in its log), its clients dropped with their threads.
#[test]
fn the_daemon_stops_cleanly_after_calls_its_workers_posted() {
    let peer = HttpPeer::everything();
    let mut d = Daemon::start(servers(json!({"ev": {"type": "http", "url": peer.url}})));
    let (id, view) = d.session(json!({}));
    assert!(view["warnings"].as_array().unwrap().is_empty(), "{view}");
    std::thread::scope(|s| {
        for t in 0..4 {
            let (d, id) = (&d, &id);
            s.spawn(move || {
                for i in 0..10 {
                    let msg = format!("t{t}-{i}");
                    let (st, r) = d.call(id, "mcp__ev__echo", json!({"message": msg}));
                    assert_eq!(st, 200, "{r}");
                    assert_eq!(r["content"][0]["text"], format!("Echo: {msg}"), "{r}");
                }
            });
        }
    });
    assert_eq!(d.stop(15), Some(0));
    let log = std::fs::read_to_string(d.home.path().join("daemon.log")).unwrap_or_default();
    assert!(!log.contains("panicked"), "{log}");
}

/// A server with no token configured that refuses a call (401 or 403, with a Bearer challenge)
/// refused it unrun: the call answers `needs_sign_in` (not run), the same words whichever way the
/// call went (POSTed by the API worker or through the connection's actor), and the connection
/// lives on for the next call, on the same session.
#[test]
fn a_call_refused_with_401_or_403_by_a_server_without_a_token_asks_for_a_sign_in() {
    let (_fixture, log, d, id) = a_session_on_the_faults_fixture();
    for message in ["before", "sign-in-401", "between", "sign-in-403", "after"] {
        let (st, r) = d.call(&id, "mcp__f__echo", json!({ "message": message }));
        if message.starts_with("sign-in") {
            assert_eq!(st, 503, "{message}: {r}");
            assert_eq!(r["error"]["code"], "needs_sign_in", "{message}: {r}");
            assert_eq!(r["outcome"], "not_run", "{message}: {r}");
            let text = r["error"]["message"].as_str().unwrap_or_default();
            assert!(
                text.ends_with("(the server needs the user to sign in)"),
                "{message}: {r}"
            );
        } else {
            assert_eq!(st, 200, "{message}: {r}");
            assert_eq!(r["content"][0]["text"], format!("Echo: {message}"), "{r}");
        }
    }
    let reqs = logged(&log);
    let inits = reqs.iter().filter(|r| r["rpc"] == "initialize").count();
    assert_eq!(inits, 1, "one session throughout: {reqs:?}");
}
