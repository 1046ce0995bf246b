//! Faults of stdio servers, driven through the daemon's HTTP API with the fixture servers of
//! `tests/fixtures/`: a server that ignores EOF and SIGTERM (and has a child), one that prints
//! garbage and oversized lines, one that never answers, one that exits mid-call, servers that
//! cannot start or lack a variable, bad definitions, and the daemon itself ending by SIGKILL
//! or SIGTERM. No server process may be left behind.

mod common;
use common::*;
use serde_json::{json, Value};
use std::path::Path;
use std::time::{Duration, Instant};

// ---- process helpers (Linux /proc) ---------------------------------------------------------

fn stat(pid: i32) -> Option<(char, i32, i32)> {
    proc_stat(pid)
}

fn ppid(pid: i32) -> Option<i32> {
    stat(pid).map(|(_, p, _)| p)
}

fn wait_pid(path: &Path) -> i32 {
    let mut pid = None;
    assert!(
        wait_until(Duration::from_secs(10), || {
            pid = read_pid(path);
            pid.is_some()
        }),
        "no pid in {}",
        path.display()
    );
    pid.unwrap()
}

fn p(path: &Path) -> String {
    path.display().to_string()
}

/// A fixture server definition with extra fields merged in.
fn with(mut def: Value, extra: Value) -> Value {
    if let (Some(d), Some(e)) = (def.as_object_mut(), extra.as_object()) {
        for (k, v) in e {
            d.insert(k.clone(), v.clone());
        }
    }
    def
}

fn servers(servers: Value) -> Value {
    json!({"enabled": {"mcp": true}, "mcp": {"servers": servers}})
}

fn healthy(d: &Daemon) {
    let (st, v) = d.get("/healthz");
    assert_eq!(st, 200, "{v}");
}

fn echo_ok(d: &Daemon, id: &str, tool: &str) {
    let (st, r) = d.call(id, tool, json!({"message": "still here"}));
    assert_eq!(st, 200, "{tool}: {r}");
    assert_eq!(r["content"][0]["text"], "still here", "{r}");
}

// ---- 1. a server that ignores EOF and SIGTERM ----------------------------------------------

#[test]
fn ignore_eof_server_and_its_child_end_by_sigkill_when_the_session_closes() {
    let tmp = tempfile::tempdir().unwrap();
    let pidf = tmp.path().join("server.pid");
    let childf = tmp.path().join("child.pid");
    let d = Daemon::start(servers(json!({
        "stubborn": fixture_server("ignore_eof.py",
            &["--pidfile", &p(&pidf), "--childpidfile", &p(&childf)]),
    })));
    let (id, view) = d.session(json!({}));
    assert!(view["warnings"].as_array().unwrap().is_empty(), "{view}");
    assert!(d
        .tool_names(&id)
        .contains(&"mcp__stubborn__echo".to_owned()));
    echo_ok(&d, &id, "mcp__stubborn__echo");

    let server = wait_pid(&pidf);
    let child = wait_pid(&childf);
    assert!(alive(server) && alive(child));
    let launcher = ppid(server).unwrap();
    assert_eq!(
        ppid(launcher),
        Some(d.pid() as i32),
        "the launcher is the daemon's child"
    );
    // The server leads its own group, and its child is in it.
    assert_eq!(stat(server).unwrap().2, server);
    assert_eq!(stat(child).unwrap().2, server);

    let t0 = Instant::now();
    assert_eq!(d.delete(&format!("/sessions/{id}")), 204);
    // Grace period after EOF (2 s): both still there at ~1 s.
    std::thread::sleep(Duration::from_secs(1).saturating_sub(t0.elapsed()));
    assert!(
        alive(server) && alive(child),
        "ended before the grace period"
    );
    // SIGTERM went to the group at ~2 s and is ignored: both still there at ~3 s. (SIGKILL
    // comes at 4 s after the launcher heard of the close, which was after t0; a check that a
    // loaded machine delays past 3.8 s proves nothing either way, so it is skipped.)
    std::thread::sleep(Duration::from_secs(3).saturating_sub(t0.elapsed()));
    let both = alive(server) && alive(child);
    if t0.elapsed() < Duration::from_millis(3800) {
        assert!(both, "SIGTERM should not have ended them");
    }
    // SIGKILL at ~4 s ends both.
    let gone = wait_until(Duration::from_secs(6).saturating_sub(t0.elapsed()), || {
        !alive(server) && !alive(child) && !alive(launcher)
    });
    assert!(
        gone,
        "after {:?}: server alive {}, child alive {}, launcher alive {}",
        t0.elapsed(),
        alive(server),
        alive(child),
        alive(launcher)
    );
    assert!(t0.elapsed() < Duration::from_secs(6));
    // Nothing left in the server's group, nothing left under the daemon.
    assert!(
        group_members(server).is_empty(),
        "{:?}",
        group_members(server)
    );
    assert!(descendants(d.pid() as i32).is_empty());
    healthy(&d);
}

// ---- 2. garbage and oversized lines --------------------------------------------------------

#[test]
fn garbage_and_oversized_lines_are_ignored_and_an_oversized_response_is_outcome_unknown() {
    let tmp = tempfile::tempdir().unwrap();
    let log = tmp.path().join("garbage.log");
    let d = Daemon::start(servers(json!({
        "junk": with(fixture_server("garbage.py", &["--oversized", "--log", &p(&log)]),
                     json!({"callTimeoutMs": 2000})),
    })));
    let (id, view) = d.session(json!({}));
    assert!(view["error"].is_null(), "{view}");
    let names = d.tool_names(&id);
    for n in ["mcp__junk__echo", "mcp__junk__big"] {
        assert!(names.contains(&n.to_owned()), "{n} missing from {names:?}");
    }
    echo_ok(&d, &id, "mcp__junk__echo");

    // The junk was seen, logged and ignored.
    let dl = d.log();
    assert!(
        dl.contains("not JSON-RPC"),
        "no malformed line logged:\n{dl}"
    );
    assert!(
        dl.contains("over the 16 MiB limit"),
        "no oversized line logged"
    );
    assert!(
        dl.contains("a response to no request in flight was ignored"),
        "no unknown-id response logged"
    );
    // ... and counted, in the session view.
    let (_, v) = d.get(&format!("/sessions/{id}"));
    let ignored = v["servers"][0]["ignored_messages"].as_u64().unwrap_or(0);
    assert!(ignored >= 3, "{v}");

    // A result under the cap comes through whole.
    let (st, r) = d.call(&id, "mcp__junk__big", json!({"bytes": 1 << 20}));
    assert_eq!(st, 200);
    assert_eq!(
        r["content"][0]["text"].as_str().map(str::len),
        Some(1 << 20)
    );

    // A response over the 16 MiB cap is dropped: the call's outcome is unknown.
    let (st, r) = d.call(&id, "mcp__junk__big", json!({"bytes": 17 * 1024 * 1024}));
    assert_eq!(st, 502, "{r}");
    assert_eq!(r["outcome"], "unknown", "{r}");
    assert!(r["error"]["message"].as_str().is_some(), "{r}");

    // The daemon is unharmed and the next call redials.
    healthy(&d);
    echo_ok(&d, &id, "mcp__junk__echo");
}

// ---- 3. a server that never answers --------------------------------------------------------

#[test]
fn a_call_that_times_out_is_cancelled_and_outcome_unknown() {
    let tmp = tempfile::tempdir().unwrap();
    let log = tmp.path().join("never.log");
    let d = Daemon::start(servers(json!({
        "stuck": with(fixture_server("never_answers.py", &["--log", &p(&log)]),
                      json!({"callTimeoutMs": 1000})),
    })));
    let (id, _) = d.session(json!({}));
    assert!(d.tool_names(&id).contains(&"mcp__stuck__hang".to_owned()));

    let t0 = Instant::now();
    let (st, r) = d.call(&id, "mcp__stuck__hang", json!({}));
    let took = t0.elapsed();
    assert_eq!(st, 502, "{r}");
    assert_eq!(r["outcome"], "unknown", "{r}");
    assert!(
        took >= Duration::from_millis(900) && took < Duration::from_secs(5),
        "the timeout took {took:?}"
    );

    // The server was told: notifications/cancelled naming the id of the tools/call.
    let mut found = None;
    let ok = wait_until(Duration::from_secs(5), || {
        let msgs = logged(&log);
        let call_id = msgs
            .iter()
            .find(|m| m["method"] == "tools/call" && m["params"]["name"] == "hang")
            .map(|m| m["id"].clone());
        found = msgs
            .iter()
            .find(|m| m["method"] == "notifications/cancelled")
            .map(|m| (call_id.clone(), m["params"]["requestId"].clone()));
        matches!(&found, Some((Some(c), r)) if c == r)
    });
    assert!(
        ok,
        "no matching notifications/cancelled: {found:?} in {:?}",
        logged(&log)
    );
    let cancel = logged(&log)
        .into_iter()
        .find(|m| m["method"] == "notifications/cancelled")
        .unwrap();
    assert!(cancel.get("id").is_none(), "a notification has no id");

    healthy(&d);
    echo_ok(&d, &id, "mcp__stuck__echo");
}

// ---- 4. a server that exits mid-call -------------------------------------------------------

#[test]
fn a_server_exiting_mid_call_is_outcome_unknown_and_the_next_call_redials() {
    let tmp = tempfile::tempdir().unwrap();
    let pidf = tmp.path().join("crash.pid");
    let d = Daemon::start(servers(json!({
        "crashy": fixture_server("exits_mid_call.py", &["--pidfile", &p(&pidf)]),
    })));
    let (id, _) = d.session(json!({}));
    echo_ok(&d, &id, "mcp__crashy__echo");
    let first = wait_pid(&pidf);

    let (st, r) = d.call(&id, "mcp__crashy__crash", json!({}));
    assert_eq!(st, 502, "{r}");
    assert_eq!(r["outcome"], "unknown", "{r}");
    assert!(
        wait_until(Duration::from_secs(5), || !alive(first)),
        "the crashed server is still there"
    );

    healthy(&d);
    echo_ok(&d, &id, "mcp__crashy__echo");
    let second = wait_pid(&pidf);
    assert_ne!(first, second, "the next call started a new server");
    assert!(alive(second));
}

// ---- 5. servers that cannot start, and missing variables -----------------------------------

#[test]
fn a_server_that_cannot_start_is_left_out_with_a_warning_and_the_others_load() {
    let d = Daemon::start(servers(json!({
        "ghost": {"type": "stdio", "command": "/nonexistent/mcp-server", "args": ["x"]},
        "fine": fixture_server("exits_mid_call.py", &[]),
    })));
    let (id, view) = d.session(json!({}));
    assert!(view["error"].is_null(), "{view}");
    let warnings = view["warnings"].as_array().unwrap();
    assert!(
        warnings
            .iter()
            .any(|w| w.as_str().unwrap().contains("ghost")),
        "no warning names the server: {view}"
    );
    let ghost = view["servers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == "ghost")
        .unwrap();
    assert_eq!(ghost["state"], "left_out", "{view}");
    assert!(
        ghost["warning"]
            .as_str()
            .unwrap_or("")
            .contains("/nonexistent/mcp-server"),
        "the warning says what could not start: {ghost}"
    );
    let names = d.tool_names(&id);
    assert!(names.contains(&"mcp__fine__echo".to_owned()), "{names:?}");
    assert!(!names.iter().any(|n| n.starts_with("mcp__ghost__")));
    echo_ok(&d, &id, "mcp__fine__echo");
    assert!(d.log().contains("ghost"), "the daemon log names it");
    // The context tells the model.
    assert!(
        view["context"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c.as_str().unwrap().contains("ghost")),
        "{view}"
    );
}

#[test]
fn a_missing_variable_fails_preparation_naming_it_and_secrets_never_show() {
    const SECRET: &str = "s3cret-value-5f1e0a9c";
    const PRESENT: &str = "ALBEDO_FAULTS_PRESENT_SECRET";
    const MISSING: &str = "ALBEDO_FAULTS_MISSING_VAR_7731";
    assert!(std::env::var_os(MISSING).is_none());
    let tmp = tempfile::tempdir().unwrap();
    let log = tmp.path().join("secret.log");
    let good = with(
        fixture_server("never_answers.py", &["--log", &p(&log)]),
        json!({"env": {"FIXTURE_TOKEN": {"env": PRESENT}}}),
    );
    let d = Daemon::start_env(servers(json!({"good": good.clone()})), &[(PRESENT, SECRET)]);
    let (first, view) = d.session(json!({}));
    assert!(view["error"].is_null(), "{view}");
    echo_ok(&d, &first, "mcp__good__echo");

    // Now a second server names a variable the daemon does not have.
    std::fs::write(
        d.home.path().join("extensions.json"),
        serde_json::to_vec_pretty(&servers(json!({
            "good": good,
            "needsvar": with(fixture_server("exits_mid_call.py", &[]),
                             json!({"env": {"TOKEN": {"env": MISSING}}})),
        })))
        .unwrap(),
    )
    .unwrap();
    let (st, created) = d.post("/sessions", json!({}));
    assert_eq!(st, 201, "{created}");
    let err = created["error"].as_str().unwrap_or_default();
    assert!(
        err.contains(MISSING) && err.contains("needsvar"),
        "the error names the variable and the server: {created}"
    );
    let id = created["id"].as_str().unwrap().to_owned();
    assert!(d.tool_names(&id).is_empty(), "nothing is offered");
    let (_, again) = d.get(&format!("/sessions/{id}"));
    assert!(
        again["error"].as_str().unwrap_or("").contains(MISSING),
        "{again}"
    );

    // Reloading the first session fails the same way and keeps its working set.
    let (st, r) = d.put(
        &format!("/sessions/{first}/extensions/mcp"),
        json!({"enabled": true}),
    );
    assert_eq!(st, 409, "{r}");
    assert!(
        r["error"]["message"]
            .as_str()
            .unwrap_or("")
            .contains(MISSING),
        "{r}"
    );
    echo_ok(&d, &first, "mcp__good__echo");
    let (_, first_view) = d.get(&format!("/sessions/{first}"));

    // The present variable's value never shows: not in any JSON, not in the daemon log.
    for v in [&view, &created, &again, &r, &first_view] {
        assert!(!v.to_string().contains(SECRET), "secret leaked: {v}");
    }
    let (_, tools) = d.get(&format!("/sessions/{first}/tools"));
    assert!(!tools.to_string().contains(SECRET));
    assert!(!d.log().contains(SECRET), "secret in the daemon log");
}

// ---- 6. the daemon killed with SIGKILL -----------------------------------------------------

#[test]
fn sigkill_of_the_daemon_leaves_no_server_process_behind() {
    let tmp = tempfile::tempdir().unwrap();
    let pidf = tmp.path().join("server.pid");
    let childf = tmp.path().join("child.pid");
    let mut d = Daemon::start(servers(json!({
        "everything": {"type": "stdio", "command": "node", "args": [everything_js()]},
        "stubborn": fixture_server("ignore_eof.py",
            &["--pidfile", &p(&pidf), "--childpidfile", &p(&childf)]),
    })));
    let (id, view) = d.session(json!({}));
    assert!(view["warnings"].as_array().unwrap().is_empty(), "{view}");
    echo_ok(&d, &id, "mcp__stubborn__echo");
    let (st, r) = d.call(&id, "mcp__everything__echo", json!({"message": "hi"}));
    assert_eq!(st, 200, "{r}");

    let server = wait_pid(&pidf);
    let child = wait_pid(&childf);
    let daemon = d.pid() as i32;
    let tree = descendants(daemon);
    assert!(tree.contains(&server) && tree.contains(&child), "{tree:?}");
    // Two launchers (the daemon's children), each with its server below it.
    let launchers: Vec<i32> = tree
        .iter()
        .copied()
        .filter(|&p| ppid(p) == Some(daemon))
        .collect();
    assert_eq!(launchers.len(), 2, "{tree:?}");
    // The node server: below a launcher (whose own command line names it too).
    let node = tree
        .iter()
        .copied()
        .find(|&p| {
            !launchers.contains(&p)
                && std::fs::read_to_string(format!("/proc/{p}/cmdline"))
                    .unwrap_or_default()
                    .contains("server-everything")
        })
        .expect("the node server runs");
    assert!(launchers.contains(&ppid(node).unwrap()), "{tree:?}");
    assert!(launchers.contains(&ppid(server).unwrap()), "{tree:?}");

    let t0 = Instant::now();
    d.stop(9);
    let gone = wait_until(Duration::from_secs(6), || tree.iter().all(|&p| !alive(p)));
    let left: Vec<i32> = tree.iter().copied().filter(|&p| alive(p)).collect();
    assert!(
        gone,
        "left behind after {:?}: {left:?} (server {server}, child {child}, node {node})",
        t0.elapsed()
    );
    assert!(group_members(server).is_empty());
    assert!(group_members(node).is_empty());
}

// ---- 7. clean shutdown on SIGTERM ----------------------------------------------------------

#[test]
fn sigterm_shuts_the_daemon_down_cleanly_and_ends_the_servers() {
    let tmp = tempfile::tempdir().unwrap();
    let pidf = tmp.path().join("server.pid");
    let childf = tmp.path().join("child.pid");
    let plainf = tmp.path().join("plain.pid");
    let mut d = Daemon::start(servers(json!({
        "stubborn": fixture_server("ignore_eof.py",
            &["--pidfile", &p(&pidf), "--childpidfile", &p(&childf)]),
        "plain": fixture_server("exits_mid_call.py", &["--pidfile", &p(&plainf)]),
    })));
    let (id, _) = d.session(json!({}));
    echo_ok(&d, &id, "mcp__stubborn__echo");
    echo_ok(&d, &id, "mcp__plain__echo");
    let pids = [wait_pid(&pidf), wait_pid(&childf), wait_pid(&plainf)];
    let tree = descendants(d.pid() as i32);
    for p in pids {
        assert!(tree.contains(&p), "{p} not under the daemon: {tree:?}");
    }

    let t0 = Instant::now();
    let code = d.stop(15);
    assert_eq!(code, Some(0), "exit status after SIGTERM");
    let gone = wait_until(Duration::from_secs(6), || tree.iter().all(|&p| !alive(p)));
    let left: Vec<i32> = tree.iter().copied().filter(|&p| alive(p)).collect();
    assert!(gone, "left behind after {:?}: {left:?}", t0.elapsed());
    assert!(group_members(pids[0]).is_empty());
    assert!(d.log().contains("albedo-mcp stopped"), "{}", d.log());
}

// ---- 8. definitions: unknown fields and invalid names --------------------------------------

#[test]
fn unknown_fields_are_reported_in_the_session_warnings() {
    let d = Daemon::start(json!({
        "enabled": {"mcp": true},
        "mcp": {
            "servers": {
                "plain": with(fixture_server("exits_mid_call.py", &[]),
                              json!({"colour": "red", "startupTimeoutMS": 5})),
            },
            "extraTopLevel": 1
        }
    }));
    let (id, view) = d.session(json!({}));
    assert!(view["error"].is_null(), "{view}");
    let warnings: Vec<&str> = view["warnings"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    for field in ["colour", "startupTimeoutMS", "extraTopLevel"] {
        assert!(
            warnings.iter().any(|w| w.contains(field)),
            "no warning about `{field}`: {warnings:?}"
        );
    }
    assert!(warnings
        .iter()
        .any(|w| w.contains("colour") && w.contains("plain")));
    // The server itself still works.
    echo_ok(&d, &id, "mcp__plain__echo");
}

#[test]
fn invalid_definitions_fail_preparation_with_a_clear_error() {
    let d = Daemon::start(servers(json!({
        "bad name": fixture_server("exits_mid_call.py", &[]),
        "fine": fixture_server("exits_mid_call.py", &[]),
    })));
    let (st, v) = d.post("/sessions", json!({}));
    assert_eq!(st, 201, "{v}");
    let err = v["error"].as_str().unwrap_or_default();
    assert!(
        err.contains("bad name") && err.contains("invalid server name"),
        "{v}"
    );
    let id = v["id"].as_str().unwrap();
    assert!(
        d.tool_names(id).is_empty(),
        "a failed preparation offers nothing"
    );

    // Other definitions the issue rejects, each a clear error naming the server.
    for (def, says) in [
        (
            json!({"type": "http", "url": "https://user:pw@example.com/mcp"}),
            "userinfo",
        ),
        (
            json!({"type": "http", "url": "https://example.com/mcp#frag"}),
            "fragment",
        ),
        (
            json!({"type": "stdio", "command": "x", "env": {"A": "inline-value"}}),
            "never inlined",
        ),
        (
            json!({"type": "stdio", "command": "x", "callTimeoutMs": -1}),
            "callTimeoutMs",
        ),
    ] {
        std::fs::write(
            d.home.path().join("extensions.json"),
            serde_json::to_vec_pretty(&servers(json!({ "odd": def }))).unwrap(),
        )
        .unwrap();
        let (st, v) = d.post("/sessions", json!({}));
        assert_eq!(st, 201, "{v}");
        let err = v["error"].as_str().unwrap_or_default();
        assert!(err.contains("odd") && err.contains(says), "{says}: {v}");
        assert!(!v.to_string().contains("inline-value"), "{v}");
    }
    healthy(&d);
}

// ---- more: a server too slow to initialize, and an oversized request ------------------------

#[test]
fn a_server_too_slow_to_initialize_is_left_out_and_its_process_ends() {
    let tmp = tempfile::tempdir().unwrap();
    let pidf = tmp.path().join("slow.pid");
    let d = Daemon::start(servers(json!({
        "sluggish": with(fixture_server("slow_start.py",
                                        &["--delay-ms", "8000", "--pidfile", &p(&pidf)]),
                         json!({"startupTimeoutMs": 1000})),
        "fine": fixture_server("exits_mid_call.py", &[]),
    })));
    let (id, view) = d.session(json!({}));
    assert!(view["error"].is_null(), "{view}");
    let sluggish = view["servers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == "sluggish")
        .unwrap();
    assert_eq!(sluggish["state"], "left_out", "{view}");
    assert!(
        view["warnings"]
            .as_array()
            .unwrap()
            .iter()
            .any(|w| w.as_str().unwrap().contains("sluggish")),
        "{view}"
    );
    let names = d.tool_names(&id);
    assert!(!names.iter().any(|n| n.starts_with("mcp__sluggish__")));
    echo_ok(&d, &id, "mcp__fine__echo");
    // The process that was given up on does not linger (EOF, then SIGTERM after 2 s).
    let slow = wait_pid(&pidf);
    assert!(
        wait_until(Duration::from_secs(6), || !alive(slow)),
        "the left-out server is still running"
    );
}

#[test]
fn a_request_over_16_mib_is_refused_before_it_leaves_and_nothing_breaks() {
    const MIB: usize = 1024 * 1024;
    let tmp = tempfile::tempdir().unwrap();
    let log = tmp.path().join("never.log");
    let pidf = tmp.path().join("never.pid");
    let d = Daemon::start(servers(json!({
        "srv": fixture_server("never_answers.py", &["--log", &p(&log), "--pidfile", &p(&pidf)]),
    })));
    let (id, _) = d.session(json!({}));
    echo_ok(&d, &id, "mcp__srv__echo");
    let pid = wait_pid(&pidf);

    // The API body fits its 16 MiB limit; the JSON-RPC request it becomes does not.
    let message = "m".repeat(16 * MIB - 32);
    let (st, r) = d.call(&id, "mcp__srv__echo", json!({ "message": message }));
    drop(message);
    assert_eq!(
        st,
        503,
        "{}",
        r.to_string().chars().take(500).collect::<String>()
    );
    assert_eq!(r["outcome"], "not_run", "{r}");
    let msg = r["error"]["message"].as_str().unwrap_or("");
    assert!(msg.contains("16 MiB"), "{msg}");
    // It never reached the server, and the connection is untouched.
    assert!(logged(&log)
        .iter()
        .filter(|m| m["method"] == "tools/call")
        .all(|m| m["params"]["arguments"]["message"] == "still here"));
    healthy(&d);
    echo_ok(&d, &id, "mcp__srv__echo");
    assert_eq!(read_pid(&pidf), Some(pid), "no redial was needed");
    assert!(alive(pid));
}
