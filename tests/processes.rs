//! Process hygiene: servers start with SIGINT and SIGHUP (and SIGTERM) at their defaults and
//! nothing blocked; a descendant that leaves the server's group with `setsid` still ends
//! with it (the launcher is a subreaper); the server dies with its launcher even when the
//! launcher is SIGKILLed (`PR_SET_PDEATHSIG`); and a SIGTERM sent to the daemon's whole
//! process group (a service manager stopping it) is survived by the launcher, which runs the
//! close sequence, so even a server that ignores EOF and SIGTERM ends.

mod common;
use common::*;
use serde_json::{json, Value};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

extern "C" {
    fn kill(pid: i32, sig: i32) -> i32;
}

fn report_server(report: &Path, orphan: Option<&Path>) -> Value {
    let mut args = vec![
        fixture("proc_report.py"),
        "--report".into(),
        report.display().to_string(),
    ];
    if let Some(o) = orphan {
        args.push("--orphan".into());
        args.push(o.display().to_string());
    }
    json!({"type": "stdio", "command": venv_python(), "args": args})
}

fn read_report(path: &Path) -> Value {
    assert!(wait_until(Duration::from_secs(10), || path.exists()));
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn mask(v: &Value, key: &str) -> u64 {
    u64::from_str_radix(v[key].as_str().unwrap(), 16).unwrap()
}

#[test]
fn servers_start_with_default_signals_and_nothing_blocked() {
    let dir = tempfile::tempdir().unwrap();
    let report = dir.path().join("report");
    let d = Daemon::start(json!({"enabled": {"mcp": true}, "mcp": {"servers": {
        "r": report_server(&report, None)}}}));
    let (_id, v) = d.session(json!({}));
    assert_eq!(v["servers"][0]["state"], "connected", "{v}");
    let r = read_report(&report);
    let ignored = mask(&r, "SigIgn");
    let blocked = mask(&r, "SigBlk");
    let bit = |sig: u32| 1u64 << (sig - 1);
    for (name, sig) in [("SIGHUP", 1), ("SIGINT", 2), ("SIGTERM", 15)] {
        assert_eq!(
            ignored & bit(sig),
            0,
            "{name} is ignored by the server: {r}"
        );
        assert_eq!(
            blocked & bit(sig),
            0,
            "{name} is blocked in the server: {r}"
        );
    }
}

#[test]
fn a_descendant_that_calls_setsid_ends_with_its_server() {
    let dir = tempfile::tempdir().unwrap();
    let (report, orphan) = (dir.path().join("report"), dir.path().join("orphan"));
    let d = Daemon::start(json!({"enabled": {"mcp": true}, "mcp": {"servers": {
        "r": report_server(&report, Some(&orphan))}}}));
    let (id, _) = d.session(json!({}));
    let server = read_report(&report)["pid"].as_i64().unwrap() as i32;
    assert!(wait_until(Duration::from_secs(10), || read_pid(&orphan).is_some()));
    let escaped = read_pid(&orphan).unwrap();
    assert!(alive(escaped));
    assert_eq!(d.delete(&format!("/sessions/{id}")), 204);
    assert!(wait_until(Duration::from_secs(10), || !alive(server)));
    assert!(
        wait_until(Duration::from_secs(10), || !alive(escaped)),
        "the descendant that left the group with setsid outlived its server"
    );
}

#[test]
fn a_server_dies_with_its_launcher_even_when_the_launcher_is_killed() {
    let dir = tempfile::tempdir().unwrap();
    let report = dir.path().join("report");
    let d = Daemon::start(json!({"enabled": {"mcp": true}, "mcp": {"servers": {
        "r": report_server(&report, None)}}}));
    let _ = d.session(json!({}));
    let r = read_report(&report);
    let (server, launcher) = (
        r["pid"].as_i64().unwrap() as i32,
        r["ppid"].as_i64().unwrap() as i32,
    );
    assert_ne!(
        launcher as u32,
        d.pid(),
        "the server's parent is the launcher"
    );
    unsafe { kill(launcher, 9) };
    assert!(
        wait_until(Duration::from_secs(5), || !alive(server)),
        "the server outlived its SIGKILLed launcher"
    );
}

#[test]
fn a_sigterm_to_the_daemons_group_runs_the_close_sequence_for_every_server() {
    let dir = tempfile::tempdir().unwrap();
    let (pid, child) = (dir.path().join("pid"), dir.path().join("child"));
    let home = tempfile::tempdir().unwrap();
    let ext = json!({"enabled": {"mcp": true}, "mcp": {"servers": {"stubborn": fixture_server(
        "ignore_eof.py",
        &["--pidfile", pid.to_str().unwrap(), "--childpidfile", child.to_str().unwrap()],
    )}}});
    std::fs::write(home.path().join("extensions.json"), ext.to_string()).unwrap();
    let ready = home.path().join("ready");
    // The daemon in a process group of its own, as a service manager runs it.
    let mut daemon = Command::new(launcher())
        .args(["serve", "--listen", "127.0.0.1:0", "--ready-file"])
        .arg(&ready)
        .env("ALBEDO_HOME", home.path())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn()
        .unwrap();
    assert!(wait_until(Duration::from_secs(20), || {
        std::fs::read_to_string(&ready).is_ok_and(|s| !s.is_empty())
    }));
    let base = format!(
        "http://{}",
        std::fs::read_to_string(&ready)
            .unwrap()
            .lines()
            .next()
            .unwrap()
    );
    let r = ureq::post(&format!("{base}/sessions"))
        .set(
            "Authorization",
            &format!("Bearer {}", home_token(home.path())),
        )
        .send_json(json!({}))
        .unwrap();
    assert_eq!(r.status(), 201);
    assert!(wait_until(Duration::from_secs(10), || read_pid(&pid).is_some()));
    let server = read_pid(&pid).unwrap();
    let grandchild = read_pid(&child).unwrap();
    let launcher = std::fs::read_to_string(format!("/proc/{server}/stat"))
        .unwrap()
        .rsplit_once(')')
        .unwrap()
        .1
        .split_whitespace()
        .nth(1)
        .unwrap()
        .parse::<i32>()
        .unwrap();
    // SIGTERM to the whole group: the daemon and every launcher get it at once.
    let started = Instant::now();
    unsafe { kill(-(daemon.id() as i32), 15) };
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        alive(launcher) || !alive(server),
        "the launcher died of the group SIGTERM and left its server behind"
    );
    // The server ignores EOF and SIGTERM: only the launcher's SIGKILL (after 2 + 2 s) ends
    // it and its child.
    assert!(
        wait_until(Duration::from_secs(15), || !alive(server)
            && !alive(grandchild)),
        "the stubborn server or its child outlived the daemon's group SIGTERM"
    );
    assert!(
        started.elapsed() >= Duration::from_secs(1),
        "ended before the grace"
    );
    let status = daemon.wait().unwrap();
    assert!(status.success() || status.code().is_some(), "{status:?}");
}

/// At shutdown each HTTP session's DELETE is awaited (2 s at most for all of them): a
/// server that takes 800 ms to answer it still gets its answer out before the daemon exits.
#[test]
fn shutdown_awaits_each_http_sessions_delete() {
    let (fx, log) = http_faults(&["--delete-delay-ms", "800"]);
    let mut d = Daemon::start(json!({"enabled": {"mcp": true}, "mcp": {"servers": {
        "f": {"type": "http", "url": fx.url}}}}));
    let (id, _) = d.session(json!({}));
    let (st, r) = d.call(&id, "mcp__f__echo", json!({"message": "hi"}));
    assert_eq!(st, 200, "{r}");
    let stopping = Instant::now();
    d.stop(15);
    let took = stopping.elapsed();
    let methods = || -> Vec<String> {
        logged(&log)
            .iter()
            .filter_map(|m| m["method"].as_str().map(str::to_owned))
            .collect()
    };
    assert!(methods().iter().any(|m| m == "DELETE"), "{:?}", methods());
    // The daemon waited for the answer (800 ms) before it exited, and says nothing was
    // left unsettled.
    let daemon_log = d.log();
    assert!(
        daemon_log.contains("unsettled=0"),
        "the daemon exited before its DELETE was answered ({took:?}): {daemon_log}"
    );
    assert!(took >= Duration::from_millis(800), "{took:?}");
    // A log that does not go to a terminal carries no colour codes.
    assert!(!daemon_log.contains('\u{1b}'), "{daemon_log}");
}
