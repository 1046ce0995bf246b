//! Trying one configured server (issue 13): `POST /settings/mcp/servers/{name}/test` through
//! the real daemon. A real peer passes every stage; a server that fails at start shows its
//! stderr (which the daemon otherwise discards); a command that does not exist is not
//! spawned; a secret the server echoes is redacted; an HTTP server that answers 401 needs a
//! sign-in; a server that never answers is cut at its startupTimeoutMs; unknown servers and
//! settings that cannot be resolved answer 404 and 422. Nothing the trial started is left.

mod common;
use common::*;
use serde_json::{json, Value};
use std::time::Duration;

const SECRET: &str = "trial-7c1e55-never-print-me";

fn servers(servers: Value) -> Value {
    json!({"enabled": {"mcp": true}, "mcp": {"servers": servers}})
}

fn sh(script: &str) -> Value {
    json!({"type": "stdio", "command": "/bin/sh", "args": ["-c", script]})
}

fn test_server(d: &Daemon, name: &str) -> (u16, Value) {
    d.post(&format!("/settings/mcp/servers/{name}/test"), json!({}))
}

/// A successful report, with the daemon's own descendants gone afterwards.
fn report(d: &Daemon, name: &str) -> Value {
    let (st, r) = test_server(d, name);
    assert_eq!(st, 200, "{r}");
    assert_eq!(r["server"], name, "{r}");
    assert!(r["elapsed_ms"].is_u64(), "{r}");
    r
}

fn nothing_left(d: &Daemon) {
    let pid = d.pid() as i32;
    assert!(
        wait_until(Duration::from_secs(10), || descendants(pid).is_empty()),
        "the trial left processes behind: {:?}",
        descendants(pid)
            .iter()
            .map(|p| cmdline(*p))
            .collect::<Vec<_>>()
    );
}

#[test]
fn a_real_server_passes_every_stage_and_its_process_ends() {
    let d = Daemon::start(servers(json!({
        "everything": {"type": "stdio", "command": "node", "args": [everything_js(), "stdio"]},
    })));
    let r = report(&d, "everything");
    assert_eq!(r["transport"], "stdio", "{r}");
    for stage in ["spawned", "initialized", "discovered"] {
        assert_eq!(r[stage], true, "{stage}: {r}");
    }
    assert!(r["tools"].as_u64().unwrap_or(0) > 0, "{r}");
    assert!(r["resources"].is_u64() && r["prompts"].is_u64(), "{r}");
    assert!(r["era"].is_string(), "{r}");
    assert!(r["protocol_version"].is_string(), "{r}");
    assert!(r["error"].is_null(), "{r}");
    assert_eq!(r["needs_sign_in"], false, "{r}");
    assert!(r["stderr"].is_string(), "{r}");
    nothing_left(&d);
}

#[test]
fn a_server_that_fails_at_start_shows_its_stderr() {
    let d = Daemon::start(servers(json!({
        "boom": sh("echo boom: missing config >&2; exit 1"),
    })));
    let r = report(&d, "boom");
    assert_eq!(r["spawned"], true, "{r}");
    assert_eq!(r["initialized"], false, "{r}");
    assert_eq!(r["discovered"], false, "{r}");
    assert!(r["era"].is_null() && r["protocol_version"].is_null(), "{r}");
    let error = r["error"]
        .as_str()
        .unwrap_or_else(|| panic!("no error: {r}"));
    assert!(error.contains("status 1"), "{r}");
    let stderr = r["stderr"].as_str().unwrap();
    assert!(stderr.contains("boom: missing config"), "{r}");
    nothing_left(&d);
    // A server exiting 127 by itself (its shell found no command) is not taken for the
    // launcher's own error: its words are in its stderr, the launcher's channel stays clean.
    let d = Daemon::start(servers(json!({"sh127": sh("no-such-cmd-5e1d")})));
    let r = report(&d, "sh127");
    assert_eq!(r["spawned"], true, "{r}");
    assert!(r["error"].as_str().unwrap_or("").contains("127"), "{r}");
    assert!(
        r["stderr"].as_str().unwrap().contains("no-such-cmd-5e1d"),
        "{r}"
    );
}

#[test]
fn only_the_last_64_kib_of_stderr_are_kept() {
    // 2000 lines of 64 bytes: 128000 bytes.
    let line = "x".repeat(53);
    let d = Daemon::start(servers(json!({
        "chatty": sh(&format!(
            "i=1000; while [ $i -lt 3000 ]; do echo \"line-$i-{line}\" >&2; i=$((i+1)); done; exit 1"
        )),
    })));
    let r = report(&d, "chatty");
    let stderr = r["stderr"].as_str().unwrap();
    let (first, rest) = stderr.split_once('\n').unwrap();
    assert_eq!(
        first,
        format!("[{} earlier bytes dropped]", 128_000 - 65_536),
        "{first}"
    );
    assert_eq!(rest.len(), 65_536);
    assert!(
        rest.ends_with(&format!("line-2999-{line}\n")),
        "{:?}",
        &rest[rest.len() - 100..]
    );
}

#[test]
fn a_command_that_does_not_exist_is_not_spawned() {
    let d = Daemon::start(servers(json!({
        "ghost": {"type": "stdio", "command": "/nonexistent/mcp-server", "args": ["x"]},
    })));
    let r = report(&d, "ghost");
    assert_eq!(r["spawned"], false, "{r}");
    assert_eq!(r["initialized"], false, "{r}");
    let error = r["error"]
        .as_str()
        .unwrap_or_else(|| panic!("no error: {r}"));
    assert!(error.contains("could not be started"), "{r}");
    assert!(error.contains("/nonexistent/mcp-server"), "{r}");
    assert_eq!(r["stderr"], "", "{r}");
    nothing_left(&d);
}

#[test]
fn a_secret_the_server_echoes_is_redacted() {
    let mut server =
        sh("echo \"token is $TRIAL_TOKEN\" >&2; printf '%s\\n' \"$TRIAL_TOKEN\"; exit 3");
    server["env"] = json!({"TRIAL_TOKEN": {"env": "ALBEDO_T_TRIAL_SECRET"}});
    let d = Daemon::start_env(
        servers(json!({"leaky": server})),
        &[("ALBEDO_T_TRIAL_SECRET", SECRET)],
    );
    let r = report(&d, "leaky");
    assert_eq!(r["spawned"], true, "{r}");
    assert!(!r.to_string().contains(SECRET), "{r}");
    let stderr = r["stderr"].as_str().unwrap();
    assert!(stderr.contains("token is [redacted]"), "{r}");
    assert!(r["error"].is_string(), "{r}");
    assert!(!d.log().contains(SECRET), "the daemon log shows the secret");
}

#[test]
fn an_http_server_that_answers_401_needs_a_sign_in() {
    let peer = HttpPeer::start("python3", &[fixture("http_unauthorized.py")]);
    let d = Daemon::start(servers(json!({
        "locked": {"type": "http", "url": peer.url},
    })));
    let r = report(&d, "locked");
    assert_eq!(r["transport"], "http", "{r}");
    assert_eq!(r["needs_sign_in"], true, "{r}");
    assert_eq!(r["spawned"], true, "the server answered: {r}");
    assert_eq!(r["initialized"], false, "{r}");
    assert!(r["error"].as_str().unwrap_or("").contains("401"), "{r}");
    assert_eq!(r["stderr"], "", "{r}");
    // Nothing listens: not reached at all.
    let port = free_port();
    let d = Daemon::start(servers(json!({
        "gone": {"type": "http", "url": format!("http://127.0.0.1:{port}/mcp")},
    })));
    let r = report(&d, "gone");
    assert_eq!(
        (r["spawned"].clone(), r["needs_sign_in"].clone()),
        (json!(false), json!(false)),
        "{r}"
    );
    assert!(r["error"].is_string(), "{r}");
}

#[test]
fn a_server_that_never_answers_is_cut_at_its_startup_timeout() {
    let d = Daemon::start(servers(json!({
        "mute": {"type": "stdio", "command": "/bin/sh", "args": ["-c", "echo starting >&2; exec sleep 30"],
                 "startupTimeoutMs": 1500},
    })));
    let r = report(&d, "mute");
    assert_eq!(
        (r["spawned"].clone(), r["initialized"].clone()),
        (json!(true), json!(false)),
        "{r}"
    );
    assert!(r["error"].as_str().unwrap_or("").contains("1500"), "{r}");
    let elapsed = r["elapsed_ms"].as_u64().unwrap();
    assert!((1400..2500).contains(&elapsed), "{r}");
    assert!(r["stderr"].as_str().unwrap().contains("starting"), "{r}");
    nothing_left(&d);
}

#[test]
fn unknown_servers_and_unresolvable_settings_are_refused() {
    let mut needs_var = sh("exit 0");
    needs_var["env"] = json!({"KEY": {"env": "ALBEDO_T_TRIAL_UNSET_VAR"}});
    let d = Daemon::start(servers(json!({"needy": needs_var})));
    let (st, r) = test_server(&d, "nope");
    assert_eq!(
        (st, r["error"]["code"].as_str()),
        (404, Some("unknown_server")),
        "{r}"
    );
    let (st, r) = test_server(&d, "needy");
    assert_eq!(
        (st, r["error"]["code"].as_str()),
        (422, Some("invalid_settings")),
        "{r}"
    );
    assert!(
        r["error"]["message"]
            .as_str()
            .unwrap_or("")
            .contains("ALBEDO_T_TRIAL_UNSET_VAR"),
        "{r}"
    );
    // Other methods: the JSON 405.
    let (st, _) = d.get("/settings/mcp/servers/needy/test");
    assert_eq!(st, 405);
}
