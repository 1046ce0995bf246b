//! The core holds (issue: "A core that holds"), through the running daemon: reloads keep
//! unchanged connections, the daemon-wide dial limit, probes shared between sessions, the
//! session cap and idle close, strict request bodies, the per-session server switch, saved
//! catalogues dialled at once, and honest outcomes for calls in flight.

mod common;
use common::*;
use serde_json::{json, Value};
use std::path::Path;
use std::time::Duration;

/// A `dial_meter` server that notes its start and readiness in `meter`.
fn metered(meter: &Path, delay_ms: u64, extra: &[&str]) -> Value {
    let delay = delay_ms.to_string();
    let mut args = vec!["--meter", meter.to_str().unwrap(), "--delay-ms", &delay];
    args.extend_from_slice(extra);
    fixture_server("dial_meter.py", &args)
}

/// `(kind, pid, time)` lines of a meter.
fn meter_lines(meter: &Path) -> Vec<(String, i32, f64)> {
    std::fs::read_to_string(meter)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            let mut it = l.split_whitespace();
            Some((
                it.next()?.to_owned(),
                it.next()?.parse().ok()?,
                it.next()?.parse().ok()?,
            ))
        })
        .collect()
}

fn starts(meter: &Path) -> usize {
    meter_lines(meter).iter().filter(|l| l.0 == "start").count()
}

/// The most servers that were starting (started, not yet ready) at one moment.
fn most_starting_at_once(meter: &Path) -> usize {
    let mut ev: Vec<(f64, i32)> = meter_lines(meter)
        .into_iter()
        .map(|(k, _, t)| (t, if k == "start" { 1 } else { -1 }))
        .collect();
    ev.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let (mut now, mut most) = (0i32, 0i32);
    for (_, d) in ev {
        now += d;
        most = most.max(now);
    }
    most as usize
}

/// POST a raw body with a content type; status and JSON answer.
fn post_raw(d: &Daemon, path: &str, content_type: Option<&str>, body: &[u8]) -> (u16, Value) {
    let mut req = d.request("POST", path).timeout(Duration::from_secs(60));
    if let Some(ct) = content_type {
        req = req.set("Content-Type", ct);
    }
    match req.send_bytes(body) {
        Ok(r) => (r.status(), r.into_json().unwrap_or(Value::Null)),
        Err(ureq::Error::Status(s, r)) => (s, r.into_json().unwrap_or(Value::Null)),
        Err(e) => panic!("POST {path}: {e}"),
    }
}

fn tools_calls(log: &Path) -> usize {
    logged(log)
        .iter()
        .filter(|m| m["method"] == "tools/call")
        .count()
}

fn write_ext(d: &Daemon, ext: &Value) {
    std::fs::write(d.home.path().join("extensions.json"), ext.to_string()).unwrap();
}

#[test]
fn a_reload_keeps_unchanged_connections_and_their_calls_in_flight() {
    let dir = tempfile::tempdir().unwrap();
    let (pa, pb) = (dir.path().join("a.pid"), dir.path().join("b.pid"));
    let server = |pid: &Path, name: &str| {
        fixture_server(
            "never_answers.py",
            &["--pidfile", pid.to_str().unwrap(), "--name", name],
        )
    };
    let ext = |b_name: &str| {
        json!({"enabled": {"mcp": true}, "mcp": {"servers": {
            "a": server(&pa, "a"), "b": server(&pb, b_name)}}})
    };
    let d = Daemon::start(ext("b"));
    let (id, _) = d.session(json!({}));
    let (a1, b1) = (read_pid(&pa).unwrap(), read_pid(&pb).unwrap());
    // A call in flight on `a` (it never answers) while the settings change `b` only.
    let (base, auth) = (d.base.clone(), d.bearer());
    let id2 = id.clone();
    let hanging = std::thread::spawn(move || {
        let r = ureq::post(&format!("{base}/sessions/{id2}/tools/mcp__a__echo/call"))
            .set("Authorization", &auth)
            .send_json(json!({"arguments": {"message": "kept"}}));
        match r {
            Ok(r) => (r.status(), r.into_json::<Value>().unwrap_or(Value::Null)),
            Err(ureq::Error::Status(s, r)) => (s, r.into_json().unwrap_or(Value::Null)),
            Err(e) => panic!("{e}"),
        }
    });
    std::thread::sleep(Duration::from_millis(200));
    write_ext(&d, &ext("b-renamed"));
    let (st, v) = d.post("/extensions/mcp/reload", json!({}));
    assert_eq!(st, 200, "{v}");
    assert!(wait_until(Duration::from_secs(10), || read_pid(&pb) != Some(b1)));
    assert!(
        wait_until(Duration::from_secs(8), || !alive(b1)),
        "the changed server's old process is still running"
    );
    assert_eq!(
        read_pid(&pa),
        Some(a1),
        "the unchanged server was restarted"
    );
    assert!(alive(a1));
    let (st, v) = hanging.join().unwrap();
    assert_eq!(
        st, 200,
        "the reload killed a call on an unchanged server: {v}"
    );
    assert_eq!(v["content"][0]["text"], "kept");
    let (_, view) = d.get(&format!("/sessions/{id}"));
    assert_eq!(view["generation"], 2, "{view}");
}

#[test]
fn many_sessions_opening_together_start_servers_within_the_dial_limit() {
    let dir = tempfile::tempdir().unwrap();
    let meter = dir.path().join("meter");
    let mut servers = serde_json::Map::new();
    for i in 0..4 {
        servers.insert(format!("s{i}"), metered(&meter, 250, &[]));
    }
    let ext = json!({"enabled": {"mcp": true}, "mcp": {"servers": servers}});
    let home = tempfile::tempdir().unwrap();
    std::fs::write(home.path().join("extensions.json"), ext.to_string()).unwrap();
    let d = Daemon::start_in(home, &[("ALBEDO_MAX_CONCURRENT_DIALS", "3")]);
    // 6 sessions x 4 servers opening at once: 24 processes, never more than 3 starting.
    let threads: Vec<_> = (0..6)
        .map(|_| {
            let (base, auth) = (d.base.clone(), d.bearer());
            std::thread::spawn(move || {
                let r = ureq::post(&format!("{base}/sessions"))
                    .set("Authorization", &auth)
                    .send_json(json!({}))
                    .expect("session");
                r.into_json::<Value>().unwrap()
            })
        })
        .collect();
    for t in threads {
        let v = t.join().unwrap();
        let up = v["servers"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|s| s["state"] == "connected")
            .count();
        assert_eq!(up, 4, "{v}");
    }
    assert_eq!(starts(&meter), 24);
    let most = most_starting_at_once(&meter);
    assert!(most <= 3, "{most} servers were starting at once");
    assert!(most >= 2, "the sessions did not open in parallel ({most})");
}

#[test]
fn a_left_out_server_is_probed_once_per_retry_window_for_the_whole_daemon() {
    let dir = tempfile::tempdir().unwrap();
    let meter = dir.path().join("meter");
    let flag = dir.path().join("down");
    std::fs::write(&flag, "").unwrap();
    let ext = json!({"enabled": {"mcp": true}, "mcp": {"retryMs": 1500, "servers": {
        "x": metered(&meter, 0, &["--fail-if", flag.to_str().unwrap()])}}});
    let d = Daemon::start(ext);
    let (s1, v1) = d.session(json!({}));
    let (s2, _) = d.session(json!({}));
    assert_eq!(v1["servers"][0]["state"], "left_out", "{v1}");
    assert_eq!(
        starts(&meter),
        2,
        "each session's preparation tried it once"
    );
    std::thread::sleep(Duration::from_millis(1600));
    for s in [&s1, &s2] {
        let (st, _) = d.post(
            &format!("/sessions/{s}/activity"),
            json!({"kind": "submit"}),
        );
        assert_eq!(st, 200);
    }
    assert!(wait_until(Duration::from_secs(5), || starts(&meter) >= 3));
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(
        starts(&meter),
        3,
        "two sessions' probes within one retry window dialled the server twice"
    );
    // The server comes back; the next window's probe (one for both) brings it to both.
    std::fs::remove_file(&flag).unwrap();
    std::thread::sleep(Duration::from_millis(3100));
    for s in [&s1, &s2] {
        d.post(
            &format!("/sessions/{s}/activity"),
            json!({"kind": "submit"}),
        );
    }
    for s in [&s1, &s2] {
        assert!(
            wait_until(Duration::from_secs(10), || {
                let (_, a) = d.post(
                    &format!("/sessions/{s}/activity"),
                    json!({"kind": "turn_end"}),
                );
                let (_, v) = d.get(&format!("/sessions/{s}"));
                let _ = a;
                v["servers"][0]["state"] == "connected"
            }),
            "session {s} never got the server back"
        );
    }
}

#[test]
fn sessions_are_capped_and_idle_ones_are_closed() {
    let dir = tempfile::tempdir().unwrap();
    let pid = dir.path().join("pid");
    let ext = json!({"enabled": {"mcp": true}, "mcp": {"servers": {
        "fx": fixture_server("exits_mid_call.py", &["--pidfile", pid.to_str().unwrap()])}}});
    let home = tempfile::tempdir().unwrap();
    std::fs::write(home.path().join("extensions.json"), ext.to_string()).unwrap();
    let d = Daemon::start_in(
        home,
        &[
            ("ALBEDO_MAX_SESSIONS", "2"),
            ("ALBEDO_SESSION_IDLE_SECS", "2"),
        ],
    );
    let (a, _) = d.session(json!({}));
    let server = read_pid(&pid).unwrap();
    let (b, _) = d.session(json!({}));
    let (st, v) = d.post("/sessions", json!({}));
    assert_eq!(st, 429, "{v}");
    assert_eq!(v["error"]["code"], "too_many_sessions");
    // `b` stays active (its tools are read); `a` goes idle and is closed with its server
    // process. Reading a session's view is not activity.
    let closed = wait_until(Duration::from_secs(12), || {
        d.get(&format!("/sessions/{b}/tools"));
        d.get(&format!("/sessions/{a}")).0 == 404
    });
    assert!(closed, "the idle session was not closed");
    assert_eq!(d.get(&format!("/sessions/{b}")).0, 200);
    assert!(
        wait_until(Duration::from_secs(8), || !alive(server)),
        "the idle session's server is still running"
    );
    // A place is free again.
    assert_eq!(d.post("/sessions", json!({})).0, 201);
}

#[test]
fn call_and_session_bodies_are_strict_and_a_refused_call_never_runs() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("log");
    let ext = json!({"enabled": {"mcp": true}, "mcp": {"servers": {
        "fx": fixture_server("exits_mid_call.py", &["--log", log.to_str().unwrap()])}}});
    let d = Daemon::start(ext);
    let (id, _) = d.session(json!({}));
    let path = format!("/sessions/{id}/tools/mcp__fx__echo/call");
    let deep = format!("{}{}", "[".repeat(200), "]".repeat(200));
    let deep_body = format!(r#"{{"arguments": {{"x": {deep}}}}}"#);
    let bad: Vec<(Option<&str>, &[u8], &str)> = vec![
        (Some("application/json"), b"not json", "not JSON"),
        (
            Some("application/json"),
            br#"{"arguments": {"message": "#,
            "truncated",
        ),
        (Some("application/json"), deep_body.as_bytes(), "too deep"),
        (
            Some("text/plain"),
            br#"{"arguments": {"message": "x"}}"#,
            "text/plain",
        ),
        (
            None,
            br#"{"arguments": {"message": "x"}}"#,
            "no content type",
        ),
        (
            Some("application/json"),
            br#"{"arguments": {"message": "x"}, "argumnets": {}}"#,
            "unknown field",
        ),
        (
            Some("application/json"),
            br#"{"arguments": [1]}"#,
            "arguments not an object",
        ),
        // Passed on as text, the arguments are still held to what a tree takes.
        (
            Some("application/json"),
            br#"{"arguments": {"x": "\ud800"}}"#,
            "a lone surrogate",
        ),
    ];
    for (ct, body, what) in &bad {
        let (st, v) = post_raw(&d, &path, *ct, body);
        assert_eq!(st, 400, "{what}: {v}");
        assert_eq!(v["outcome"], "not_run", "{what}: {v}");
        assert_eq!(v["error"]["code"], "bad_request", "{what}: {v}");
    }
    assert_eq!(tools_calls(&log), 0, "a refused body reached the server");
    // An empty body means `{}`: the tool runs with no arguments.
    let (st, v) = post_raw(&d, &path, None, b"");
    assert_eq!(st, 200, "{v}");
    assert_eq!(tools_calls(&log), 1);
    let (st, v) = post_raw(
        &d,
        &path,
        Some("application/json; charset=utf-8"),
        br#"{"arguments": {"message": "ok"}}"#,
    );
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["content"][0]["text"], "ok");
    // The same rules for POST /sessions.
    for (ct, body) in [
        (Some("application/json"), &b"{"[..]),
        (Some("text/plain"), &br#"{"extensions": {"mcp": true}}"#[..]),
        (
            Some("application/json"),
            &br#"{"extension": {"mcp": true}}"#[..],
        ),
        (
            Some("application/json"),
            &br#"{"extensions": {"mcp": "yes"}}"#[..],
        ),
    ] {
        let (st, v) = post_raw(&d, "/sessions", ct, body);
        assert_eq!(st, 400, "{}: {v}", String::from_utf8_lossy(body));
        assert_eq!(v["outcome"], "not_run");
    }
    let (st, v) = post_raw(&d, "/sessions", None, b"");
    assert_eq!(st, 201, "{v}");
}

#[test]
fn a_session_switches_single_servers_off_and_on_strictly() {
    let dir = tempfile::tempdir().unwrap();
    let (pid, meter, flag) = (
        dir.path().join("pid"),
        dir.path().join("meter"),
        dir.path().join("down"),
    );
    std::fs::write(&flag, "").unwrap();
    let ext = json!({"enabled": {"mcp": true}, "mcp": {"servers": {
        "ok": fixture_server("exits_mid_call.py", &["--pidfile", pid.to_str().unwrap()]),
        "down": metered(&meter, 0, &["--fail-if", flag.to_str().unwrap()])}}});
    let d = Daemon::start(ext);
    let (id, _) = d.session(json!({}));
    let first = read_pid(&pid).unwrap();
    assert!(d.tool_names(&id).contains(&"mcp__ok__echo".to_owned()));
    // Off for this session: its process ends, its tools go, and it is not tried again.
    let (st, v) = d.put(
        &format!("/sessions/{id}/servers/ok"),
        json!({"enabled": false}),
    );
    assert_eq!(st, 200, "{v}");
    let ok = v["servers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == "ok")
        .unwrap()
        .clone();
    assert_eq!(ok["state"], "disabled", "{v}");
    assert_eq!(ok["switched_off"], true);
    assert!(wait_until(Duration::from_secs(8), || !alive(first)));
    assert!(!d.tool_names(&id).iter().any(|n| n.starts_with("mcp__ok__")));
    let (st, v) = d.call(&id, "mcp__ok__echo", json!({"message": "x"}));
    assert_eq!(st, 404, "{v}");
    assert_eq!(v["outcome"], "not_run");
    // Another session is not affected.
    let (other, _) = d.session(json!({}));
    assert!(d.tool_names(&other).contains(&"mcp__ok__echo".to_owned()));
    // On again: it starts and its tools come back.
    let (st, v) = d.put(
        &format!("/sessions/{id}/servers/ok"),
        json!({"enabled": true}),
    );
    assert_eq!(st, 200, "{v}");
    assert!(d.tool_names(&id).contains(&"mcp__ok__echo".to_owned()));
    // A server that cannot start: off, then on is a 409 that changes nothing.
    let (st, _) = d.put(
        &format!("/sessions/{id}/servers/down"),
        json!({"enabled": false}),
    );
    assert_eq!(st, 200);
    let tried = starts(&meter);
    let (_, before) = d.get(&format!("/sessions/{id}"));
    let (st, v) = d.put(
        &format!("/sessions/{id}/servers/down"),
        json!({"enabled": true}),
    );
    assert_eq!(st, 409, "{v}");
    assert_eq!(starts(&meter), tried + 1, "turning it on tried it once");
    let (_, after) = d.get(&format!("/sessions/{id}"));
    assert_eq!(before["generation"], after["generation"]);
    let down = after["servers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == "down")
        .unwrap()
        .clone();
    assert_eq!(down["state"], "disabled", "{after}");
    // An unknown server is a 404.
    let (st, _) = d.put(
        &format!("/sessions/{id}/servers/nope"),
        json!({"enabled": true}),
    );
    assert_eq!(st, 404);
}

#[test]
fn a_saved_catalogue_is_dialled_at_once_and_a_first_call_waits_for_it() {
    let dir = tempfile::tempdir().unwrap();
    let pid = dir.path().join("pid");
    let ext = json!({"enabled": {"mcp": true}, "mcp": {"servers": {"slow": {
        "type": "stdio", "command": venv_python(),
        "args": [fixture("slow_start.py"), "--pidfile", pid.to_str().unwrap(), "--delay-ms", "1200"],
        "startupTimeoutMs": 8000, "callTimeoutMs": 5000}}}});
    let d = Daemon::start(ext);
    let (first, _) = d.session(json!({}));
    assert_eq!(d.delete(&format!("/sessions/{first}")), 204);
    let p1 = read_pid(&pid).unwrap();
    assert!(wait_until(Duration::from_secs(8), || !alive(p1)));
    // The saved catalogue: advertised at once, and the server dialled at once in the
    // background, with no activity and no call.
    let (id, v) = d.session(json!({}));
    assert!(
        d.tool_names(&id).contains(&"mcp__slow__echo".to_owned()),
        "{v}"
    );
    assert!(
        wait_until(Duration::from_secs(5), || read_pid(&pid)
            .is_some_and(|p| p != p1)),
        "the saved server was not dialled at session open"
    );
    // A call that arrives during that dial waits for it (no second process).
    let (st, v) = d.call(&id, "mcp__slow__echo", json!({"message": "waited"}));
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["content"][0]["text"], "waited");
}

#[test]
fn a_first_call_waits_at_most_startup_plus_call_timeout_then_reports_unavailable() {
    let dir = tempfile::tempdir().unwrap();
    let (meter, hang) = (dir.path().join("meter"), dir.path().join("hang"));
    let mut server = metered(&meter, 0, &["--hang-if", hang.to_str().unwrap()]);
    server["startupTimeoutMs"] = json!(700);
    server["callTimeoutMs"] = json!(500);
    let d = Daemon::start(json!({"enabled": {"mcp": true}, "mcp": {"servers": {"h": server}}}));
    let (first, _) = d.session(json!({}));
    assert_eq!(d.delete(&format!("/sessions/{first}")), 204);
    // The same configuration (so its saved catalogue is used), but now it hangs at start.
    std::fs::write(&hang, "").unwrap();
    let (id, _) = d.session(json!({}));
    assert!(d.tool_names(&id).contains(&"mcp__h__echo".to_owned()));
    let started = std::time::Instant::now();
    let (st, v) = d.call(&id, "mcp__h__echo", json!({"message": "x"}));
    let took = started.elapsed();
    assert_eq!(st, 503, "{v}");
    assert_eq!(v["outcome"], "not_run", "{v}");
    assert_eq!(v["error"]["code"], "unavailable", "{v}");
    // Bounded by startupTimeoutMs + callTimeoutMs (1.2 s); the bound here is only there to
    // catch a hang, with room for a loaded CI machine.
    assert!(took < Duration::from_secs(10), "the call waited {took:?}");
    // Its tools stay advertised, and the context says calls report it and dial again. The
    // call waited for the session's own dial (whose window started once its process was
    // spawned) to give up, so the session already says so when the call answers.
    let view = d.get(&format!("/sessions/{id}")).1;
    assert_eq!(view["servers"][0]["state"], "unavailable", "{view}");
    assert!(d.tool_names(&id).contains(&"mcp__h__echo".to_owned()));
    let ctx = view["context"].to_string();
    assert!(ctx.contains("dials it again"), "{view}");
    // It comes back: the next call dials again and works.
    std::fs::remove_file(&hang).unwrap();
    let (st, v) = d.call(&id, "mcp__h__echo", json!({"message": "back"}));
    assert_eq!(st, 200, "{v}");
}

#[test]
fn two_calls_in_flight_one_times_out_the_other_is_unknown_and_nothing_is_sent_twice() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("log");
    let ext = json!({"enabled": {"mcp": true}, "mcp": {"servers": {"fx": {
        "type": "stdio", "command": venv_python(),
        "args": [fixture("never_answers.py"), "--log", log.to_str().unwrap()],
        "callTimeoutMs": 1500}}}});
    let d = Daemon::start(ext);
    let (id, _) = d.session(json!({}));
    let call = |delay_ms: u64| {
        let (base, auth) = (d.base.clone(), d.bearer());
        let id = id.clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(delay_ms));
            let r = ureq::post(&format!("{base}/sessions/{id}/tools/mcp__fx__hang/call"))
                .set("Authorization", &auth)
                .send_json(json!({"arguments": {}}));
            match r {
                Ok(r) => (r.status(), r.into_json::<Value>().unwrap_or(Value::Null)),
                Err(ureq::Error::Status(s, r)) => (s, r.into_json().unwrap_or(Value::Null)),
                Err(e) => panic!("{e}"),
            }
        })
    };
    // The first times out; that closes the client while the second is still in flight.
    let a = call(0);
    let b = call(600);
    let (sa, va) = a.join().unwrap();
    let (sb, vb) = b.join().unwrap();
    assert_eq!(sa, 502, "{va}");
    assert_eq!(va["outcome"], "unknown", "{va}");
    assert_eq!(sb, 502, "{vb}");
    assert_eq!(
        vb["outcome"], "unknown",
        "a call written to the server was reported as not run: {vb}"
    );
    let hangs = logged(&log)
        .iter()
        .filter(|m| m["method"] == "tools/call")
        .count();
    assert_eq!(hangs, 2, "each call reached the server exactly once");
    // The next call dials again and works.
    let (st, v) = d.call(&id, "mcp__fx__echo", json!({"message": "again"}));
    assert_eq!(st, 200, "{v}");
    assert_eq!(tools_calls(&log), 3);
}

#[test]
fn a_call_never_queues_behind_checks_of_saved_catalogues() {
    // Sixteen saved servers that now hang at start fill the daemon's checks of saved
    // catalogues (one fewer than the cores, at most 7); a call to a seventeenth saved
    // server, checked last, dials it at once instead of waiting its turn behind them.
    let dir = tempfile::tempdir().unwrap();
    let (meter, hang) = (dir.path().join("meter"), dir.path().join("hang"));
    let mut servers = serde_json::Map::new();
    for i in 0..16 {
        let mut s = metered(&meter, 0, &["--hang-if", hang.to_str().unwrap()]);
        s["startupTimeoutMs"] = json!(30000);
        servers.insert(format!("h{i:02}"), s);
    }
    let zmeter = dir.path().join("zmeter");
    servers.insert("zz".into(), metered(&zmeter, 0, &[]));
    let d = Daemon::start(json!({"enabled": {"mcp": true}, "mcp": {"servers": servers}}));
    let (first, _) = d.session(json!({}));
    assert_eq!(d.delete(&format!("/sessions/{first}")), 204);
    std::fs::write(&hang, "").unwrap();
    let before = starts(&meter);

    let (id, _) = d.session(json!({}));
    assert!(d.tool_names(&id).contains(&"mcp__zz__echo".to_owned()));
    assert!(
        wait_until(Duration::from_secs(10), || starts(&meter) > before),
        "the saved catalogues were not checked at open"
    );
    let (st, v) = d.call(&id, "mcp__zz__echo", json!({"message": "not queued"}));
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["content"][0]["text"], "not queued", "{v}");
    let checking = starts(&meter) - before;
    assert!(
        (1..=8).contains(&checking),
        "{checking} hanging servers were being checked at once"
    );
}
