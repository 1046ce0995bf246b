//! Saved catalogues, restarts, list_changed, servers that come back, and reloads that fail,
//! through the daemon's HTTP API.

mod common;
use common::*;
use serde_json::{json, Value};
use std::time::{Duration, Instant};

fn slow(log: &std::path::Path, delay_ms: u64) -> Value {
    fixture_server(
        "slow_start.py",
        &[
            "--log",
            log.to_str().unwrap(),
            "--delay-ms",
            &delay_ms.to_string(),
        ],
    )
}

#[test]
fn a_server_heard_from_before_is_never_waited_on_again() {
    let log = tempfile::NamedTempFile::new().unwrap();
    let ext =
        json!({"enabled": {"mcp": true}, "mcp": {"servers": {"slow": slow(log.path(), 1500)}}});
    let mut d = Daemon::start(ext.clone());
    // First session: the server is new, so preparation waits for it.
    let t = Instant::now();
    let (id, _) = d.session(json!({}));
    assert!(t.elapsed() >= Duration::from_millis(1500));
    assert!(d.tool_names(&id).contains(&"mcp__slow__echo".to_owned()));
    assert_eq!(d.stop(15), Some(0));

    // Restart the daemon on the same home, with the server made slower still.
    std::fs::write(log.path(), "").unwrap();
    let home = std::mem::replace(&mut d.home, tempfile::tempdir().unwrap());
    let d2 = Daemon::start_in(home, &[]);
    let t = Instant::now();
    let (id, view) = d2.session(json!({}));
    let names = d2.tool_names(&id);
    let opened = t.elapsed();
    assert!(names.contains(&"mcp__slow__echo".to_owned()), "{view}");
    // Advertised from the saved catalogue before the server was sent anything.
    assert!(
        logged(log.path()).is_empty(),
        "the server was already talked to"
    );
    assert!(opened < Duration::from_millis(1500), "waited {opened:?}");
    // The check against the server runs in the background from the session's first
    // activity; a call arriving before it finishes waits for that same dial, then runs.
    let (_, a) = d2.post(
        &format!("/sessions/{id}/activity"),
        json!({"kind": "submit"}),
    );
    assert_eq!(a["refresh"], false, "{a}");
    assert!(wait_until(Duration::from_secs(10), || !logged(log.path()).is_empty()));
    let (st, r) = d2.call(&id, "mcp__slow__echo", json!({"message": "first"}));
    assert_eq!(st, 200, "{r}");
    let inits = logged(log.path())
        .iter()
        .filter(|m| m["method"] == "initialize")
        .count();
    assert_eq!(inits, 1, "the call and the background check share one dial");
    // The background discovery matched: no refresh, same generation.
    std::thread::sleep(Duration::from_millis(300));
    let (_, a) = d2.post(
        &format!("/sessions/{id}/activity"),
        json!({"kind": "turn_end"}),
    );
    assert_eq!(a["refresh"], false, "{a}");
    assert_eq!(a["generation"], 1);
}

#[test]
fn a_changed_configuration_is_discovered_during_preparation() {
    let log = tempfile::NamedTempFile::new().unwrap();
    let mut ext =
        json!({"enabled": {"mcp": true}, "mcp": {"servers": {"slow": slow(log.path(), 10)}}});
    let d = Daemon::start(ext.clone());
    let (_, _) = d.session(json!({}));
    // Change the server's configuration: a new fingerprint.
    ext["mcp"]["servers"]["slow"] = slow(log.path(), 600);
    std::fs::write(d.home.path().join("extensions.json"), ext.to_string()).unwrap();
    std::fs::write(log.path(), "").unwrap();
    let t = Instant::now();
    let (id, _) = d.session(json!({}));
    assert!(t.elapsed() >= Duration::from_millis(600));
    // Discovered during preparation: the server was talked to before the session opened.
    assert!(logged(log.path())
        .iter()
        .any(|m| m["method"] == "tools/list"));
    assert!(d.tool_names(&id).contains(&"mcp__slow__echo".to_owned()));
}

#[test]
fn servers_are_prepared_in_parallel() {
    let dir = tempfile::tempdir().unwrap();
    let mut servers = serde_json::Map::new();
    for i in 0..6 {
        servers.insert(
            format!("s{i}"),
            slow(&dir.path().join(format!("{i}.log")), 1000),
        );
    }
    let d = Daemon::start(json!({"enabled": {"mcp": true}, "mcp": {"servers": servers}}));
    let t = Instant::now();
    let (id, _) = d.session(json!({}));
    let took = t.elapsed();
    assert_eq!(d.tool_names(&id).len(), 6);
    // Six servers that each take a second: the slowest, not the sum.
    assert!(took < Duration::from_millis(4000), "took {took:?}");
}

#[test]
fn a_list_change_refreshes_the_session_after_the_next_turn() {
    let d = Daemon::start(json!({"enabled": {"mcp": true}, "mcp": {"servers": {
        "everything": {"type": "stdio", "command": "node", "args": [everything_js()]}}}}));
    let (id, _) = d.session(json!({}));
    let (_, before) = d.get(&format!("/sessions/{id}/tools"));
    let gen = before["generation"].as_u64().unwrap();
    d.post(
        &format!("/sessions/{id}/activity"),
        json!({"kind": "submit"}),
    );
    // gzip-file-as-resource adds a resource and sends resources/list_changed.
    let (st, r) = d.call(
        &id,
        "mcp__everything__gzip-file-as-resource",
        json!({"name": "added.txt", "data": "data:text/plain;base64,aGVsbG8="}),
    );
    assert_eq!(st, 200, "{r}");
    std::thread::sleep(Duration::from_millis(800));
    // Mid-turn: nothing changes yet.
    let (_, mid) = d.get(&format!("/sessions/{id}/tools"));
    assert_eq!(mid["generation"].as_u64().unwrap(), gen);
    let (_, a) = d.post(
        &format!("/sessions/{id}/activity"),
        json!({"kind": "turn_end"}),
    );
    assert_eq!(a["refresh"], true, "{a}");
    assert!(a["append_turn"]
        .as_str()
        .unwrap()
        .contains("capabilities changed"));
    let (_, after) = d.get(&format!("/sessions/{id}/tools"));
    assert_eq!(after["generation"].as_u64().unwrap(), gen + 1);
    let rr = after["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "mcp__everything__read_resource")
        .unwrap()
        .clone();
    assert!(
        rr["description"].as_str().unwrap().contains("added.txt"),
        "{rr}"
    );
}

#[test]
fn a_killed_server_is_dialled_again_by_the_next_call() {
    let log = tempfile::NamedTempFile::new().unwrap();
    let pidf = tempfile::NamedTempFile::new().unwrap();
    let d = Daemon::start(json!({"enabled": {"mcp": true}, "mcp": {"servers": {
        "n": fixture_server("never_answers.py", &["--log", log.path().to_str().unwrap(),
                                                  "--pidfile", pidf.path().to_str().unwrap()])}}}));
    let (id, _) = d.session(json!({}));
    let pid = read_pid(pidf.path()).unwrap();
    // A call in flight when the server dies: its outcome is unknown.
    let (base, auth) = (d.base.clone(), d.bearer());
    let id2 = id.clone();
    let inflight = std::thread::spawn(move || {
        let r = ureq::post(&format!("{base}/sessions/{id2}/tools/mcp__n__hang/call"))
            .set("Authorization", &auth)
            .send_json(json!({"arguments": {}}));
        match r {
            Err(ureq::Error::Status(st, r)) => (st, r.into_json::<Value>().unwrap()),
            Ok(r) => (r.status(), r.into_json::<Value>().unwrap()),
            Err(e) => panic!("{e}"),
        }
    });
    assert!(wait_until(Duration::from_secs(5), || logged(log.path())
        .iter()
        .any(|m| m["method"] == "tools/call")));
    unsafe { kill(pid, 9) };
    let (st, r) = inflight.join().unwrap();
    assert_eq!(st, 502, "{r}");
    assert_eq!(r["outcome"], "unknown", "{r}");
    // The next call dials a new process and succeeds.
    let (st, r) = d.call(&id, "mcp__n__echo", json!({"message": "again"}));
    assert_eq!(st, 200, "{r}");
    assert_ne!(read_pid(pidf.path()).unwrap(), pid);
}

extern "C" {
    fn kill(pid: i32, sig: i32) -> i32;
}

#[test]
fn a_server_that_comes_back_joins_after_activity_and_the_next_turn() {
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("late.py");
    let log = dir.path().join("late.log");
    let d = Daemon::start(
        json!({"enabled": {"mcp": true}, "mcp": {"retryMs": 300, "servers": {
        "late": {"type": "stdio", "command": venv_python(),
                 "args": [script.display().to_string(), "--log", log.display().to_string()]},
        "ok": fixture_server("exits_mid_call.py", &[])}}}),
    );
    let (id, view) = d.session(json!({}));
    let late = view["servers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == "late")
        .unwrap()
        .clone();
    assert_eq!(late["state"], "left_out", "{view}");
    assert!(view["warnings"].to_string().contains("late"));
    // The server becomes startable. Without activity nothing probes it.
    let src = std::fs::read_to_string(fixture("slow_start.py"))
        .unwrap()
        .replace(
            "sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))",
            &format!(
                "sys.path.insert(0, {:?})",
                repo().join("tests/fixtures").display().to_string()
            ),
        );
    std::fs::write(&script, src).unwrap();
    std::thread::sleep(Duration::from_millis(700));
    assert!(!log.exists(), "probed without activity");
    // Activity after retryMs probes it; it joins only after the end of the next turn.
    let (_, a) = d.post(
        &format!("/sessions/{id}/activity"),
        json!({"kind": "submit"}),
    );
    assert_eq!(a["refresh"], false);
    assert!(wait_until(Duration::from_secs(10), || log.exists()));
    std::thread::sleep(Duration::from_millis(2500));
    assert!(
        !d.tool_names(&id).contains(&"mcp__late__echo".to_owned()),
        "joined mid-turn"
    );
    let (_, a) = d.post(
        &format!("/sessions/{id}/activity"),
        json!({"kind": "turn_end"}),
    );
    assert_eq!(a["refresh"], true, "{a}");
    assert!(a["append_turn"].as_str().unwrap().contains("late"), "{a}");
    assert!(d.tool_names(&id).contains(&"mcp__late__echo".to_owned()));
    let (st, r) = d.call(&id, "mcp__late__echo", json!({"message": "back"}));
    assert_eq!(st, 200, "{r}");
}

#[test]
fn a_bad_reload_keeps_the_previous_composition_serving() {
    let ext = json!({"enabled": {"mcp": true}, "mcp": {"servers": {"ok": fixture_server("exits_mid_call.py", &[])}}});
    let d = Daemon::start(ext);
    let (id, _) = d.session(json!({}));
    let bad = json!({"enabled": {"mcp": true}, "mcp": {"servers": {
        "ok": fixture_server("exits_mid_call.py", &[]),
        "needs": {"type": "stdio", "command": "x", "env": {"TOKEN": {"env": "ALBEDO_TEST_UNSET_VARIABLE"}}}}}});
    std::fs::write(d.home.path().join("extensions.json"), bad.to_string()).unwrap();
    let (st, r) = d.post("/extensions/mcp/reload", json!({}));
    assert_eq!(st, 422, "{r}");
    assert!(r.to_string().contains("ALBEDO_TEST_UNSET_VARIABLE"), "{r}");
    let (st, r) = d.call(&id, "mcp__ok__echo", json!({"message": "still here"}));
    assert_eq!(st, 200, "{r}");
    let (_, v) = d.get(&format!("/sessions/{id}"));
    assert_eq!(v["generation"], 1);
    assert!(v["error"]
        .as_str()
        .unwrap()
        .contains("ALBEDO_TEST_UNSET_VARIABLE"));
    // Disabling needs no server, so it succeeds, and closes every connection.
    let (st, v) = d.put(
        &format!("/sessions/{id}/extensions/mcp"),
        json!({"enabled": false}),
    );
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["servers"].as_array().unwrap().len(), 0, "{v}");
    assert!(d.tool_names(&id).is_empty());
    // Turning it on again meets the bad configuration: refused, and it stays off.
    let (st, r) = d.put(
        &format!("/sessions/{id}/extensions/mcp"),
        json!({"enabled": true}),
    );
    assert_eq!(st, 409, "{r}");
    let (_, v) = d.get(&format!("/sessions/{id}"));
    assert_eq!(v["enabled"], false, "{v}");
}

/// The next event of a session's event stream: its kind and its data.
fn next_event(lines: &mut impl Iterator<Item = std::io::Result<String>>) -> (String, Value) {
    let mut kind = None;
    loop {
        let l = lines
            .next()
            .expect("the event stream ended")
            .expect("the event stream broke (or stayed silent past its timeout)");
        if let Some(k) = l.strip_prefix("event: ") {
            kind = Some(k.to_owned());
        } else if let Some(d) = l.strip_prefix("data: ") {
            let data: Value = serde_json::from_str(d).expect("event data is JSON");
            return (kind.expect("data before its event line"), data);
        }
    }
}

#[test]
fn session_events_stream_reports_refreshes_and_warnings() {
    use std::io::BufRead;
    let ok = json!({"enabled": {"mcp": true}, "mcp": {"servers": {
        "ok": fixture_server("exits_mid_call.py", &[])}}});
    let d = Daemon::start(ok.clone());
    let (id, _) = d.session(json!({}));
    let resp = d
        .request("GET", &format!("/sessions/{id}/events"))
        .timeout(Duration::from_secs(30))
        .call()
        .unwrap();
    assert_eq!(resp.header("content-type"), Some("text/event-stream"));
    let mut lines = std::io::BufReader::new(resp.into_reader()).lines();
    // A reload that succeeds is a refresh.
    let (st, _) = d.put(
        &format!("/sessions/{id}/extensions/mcp"),
        json!({"enabled": true}),
    );
    assert_eq!(st, 200);
    let (kind, data) = next_event(&mut lines);
    assert_eq!(kind, "refresh", "{data}");
    assert_eq!(data["generation"], 2, "{data}");
    // One that fails is a warning: a server now names a variable the daemon does not have.
    let bad = json!({"enabled": {"mcp": true}, "mcp": {"servers": {
        "ok": fixture_server("exits_mid_call.py", &[]),
        "needs": {"type": "stdio", "command": "x",
                  "env": {"TOKEN": {"env": "ALBEDO_TEST_EVENTS_UNSET_VARIABLE"}}}}}});
    std::fs::write(d.home.path().join("extensions.json"), bad.to_string()).unwrap();
    let (st, r) = d.put(
        &format!("/sessions/{id}/extensions/mcp"),
        json!({"enabled": true}),
    );
    assert_eq!(st, 409, "{r}");
    let (kind, data) = next_event(&mut lines);
    assert_eq!(kind, "warning", "{data}");
    assert_eq!(data["kind"], "warning", "{data}");
    // The session kept its composition, and the warning says why the reload failed.
    assert_eq!(data["generation"], 2, "{data}");
    let message = data["message"].as_str().unwrap_or("");
    assert!(
        message.contains("ALBEDO_TEST_EVENTS_UNSET_VARIABLE") && message.contains("needs"),
        "{data}"
    );
    // A good configuration again: a refresh, the next generation.
    std::fs::write(d.home.path().join("extensions.json"), ok.to_string()).unwrap();
    let (st, _) = d.put(
        &format!("/sessions/{id}/extensions/mcp"),
        json!({"enabled": true}),
    );
    assert_eq!(st, 200);
    let (kind, data) = next_event(&mut lines);
    assert_eq!(kind, "refresh", "{data}");
    assert_eq!(data["generation"], 3, "{data}");
}

#[test]
fn the_default_moves_only_sessions_that_follow_it() {
    let d = Daemon::start(
        json!({"mcp": {"servers": {"ok": fixture_server("exits_mid_call.py", &[])}}}),
    );
    // Off on a fresh install.
    let (_, e) = d.get("/extensions");
    assert_eq!(e["mcp"]["enabled"], false, "{e}");
    let (follower, v) = d.session(json!({}));
    assert_eq!(v["enabled"], false);
    assert!(d.tool_names(&follower).is_empty());
    let (own, v) = d.session(json!({"extensions": {"mcp": true}}));
    assert_eq!(v["enabled"], true);
    assert_eq!(d.tool_names(&own).len(), 2);
    // Turning the default on moves the follower; the session with its own choice is untouched.
    let (st, _) = d.put("/extensions/mcp", json!({"enabled": true}));
    assert_eq!(st, 200);
    assert!(
        std::fs::read_to_string(d.home.path().join("extensions.json"))
            .unwrap()
            .contains("\"mcp\": true")
    );
    assert_eq!(d.tool_names(&follower).len(), 2);
    assert_eq!(d.get(&format!("/sessions/{own}")).1["generation"], 1);
    let (st, _) = d.put("/extensions/mcp", json!({"enabled": false}));
    assert_eq!(st, 200);
    assert!(d.tool_names(&follower).is_empty());
    assert_eq!(d.tool_names(&own).len(), 2);
    assert_eq!(d.get(&format!("/sessions/{own}")).1["generation"], 1);
}

#[test]
fn a_catalogue_over_the_size_limit_fails_preparation_and_keeps_the_previous_composition() {
    let dir = tempfile::tempdir().unwrap();
    let big = oversized_tools_json(dir.path());
    let ok = json!({"enabled": {"mcp": true}, "mcp": {"servers": {
        "ok": fixture_server("exits_mid_call.py", &[])}}});
    let d = Daemon::start(ok);
    let (id, _) = d.session(json!({}));
    let huge = json!({"enabled": {"mcp": true}, "mcp": {"servers": {
        "ok": fixture_server("exits_mid_call.py", &[]),
        "huge": fixture_server("slow_start.py", &["--delay-ms", "0", "--tools-json", big.to_str().unwrap()])}}});
    std::fs::write(d.home.path().join("extensions.json"), huge.to_string()).unwrap();
    let (st, r) = d.post("/extensions/mcp/reload", json!({}));
    assert_eq!(st, 422, "{r}");
    assert!(r.to_string().contains("huge"), "{r}");
    assert!(r.to_string().contains("limit"), "{r}");
    // The previous composition still serves.
    let (st, r) = d.call(&id, "mcp__ok__echo", json!({"message": "still"}));
    assert_eq!(st, 200, "{r}");
    // A new session with that configuration fails to prepare, naming the server.
    let (_, v) = d.session(json!({}));
    assert!(v["error"].as_str().unwrap_or("").contains("huge"), "{v}");
}

#[test]
fn a_changed_secret_is_discovered_during_preparation() {
    let log = tempfile::NamedTempFile::new().unwrap();
    let mut def = slow(log.path(), 600);
    def["env"] = json!({"TOKEN": {"env": "ALBEDO_T_ROTATED"}});
    let ext = json!({"enabled": {"mcp": true}, "mcp": {"servers": {"slow": def}}});
    let mut d = Daemon::start_env(ext, &[("ALBEDO_T_ROTATED", "first-value")]);
    d.session(json!({}));
    assert_eq!(d.stop(15), Some(0));
    // The same configuration, the same secret: opened from the saved catalogue.
    std::fs::write(log.path(), "").unwrap();
    let home = std::mem::replace(&mut d.home, tempfile::tempdir().unwrap());
    let mut d2 = Daemon::start_in(home, &[("ALBEDO_T_ROTATED", "first-value")]);
    d2.session(json!({}));
    assert!(
        logged(log.path()).is_empty(),
        "an unchanged secret was discovered again"
    );
    assert_eq!(d2.stop(15), Some(0));
    // A rotated secret: a new fingerprint, discovered during preparation.
    let home = std::mem::replace(&mut d2.home, tempfile::tempdir().unwrap());
    let d3 = Daemon::start_in(home, &[("ALBEDO_T_ROTATED", "second-value")]);
    let (id, _) = d3.session(json!({}));
    assert!(logged(log.path())
        .iter()
        .any(|m| m["method"] == "tools/list"));
    assert!(d3.tool_names(&id).contains(&"mcp__slow__echo".to_owned()));
    // No secret value is stored with the catalogue.
    for f in ["albedo.db", "albedo.db-wal"] {
        let db = std::fs::read(d3.home.path().join(f)).unwrap_or_default();
        let text = String::from_utf8_lossy(&db);
        assert!(
            !text.contains("first-value") && !text.contains("second-value"),
            "{f}"
        );
    }
}
