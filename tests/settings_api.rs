//! The settings API (issue 13) through the built daemon, against real servers:
//! server-everything and server-filesystem (npm), the Python `mcp` SDK's server (stdio, and
//! over HTTP behind the SDK's own bearer-token check, which answers 401), and a mistyped
//! command. Strict saving restores both files byte for byte; secrets go to `creds.json`
//! (0600) and never reach `extensions.json`, an answer or the log; bad input is a 400 naming
//! the field with nothing written; concurrent changes are all kept; a hand edit is not
//! overwritten; a `kill -9` during saves leaves each pair as it was or as it became.

mod common;
use common::*;
use serde_json::{json, Value};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::Duration;

const SECRET: &str = "s3cret-9f1d2a-never-shown";
const BEARER: &str = "bearer-77c0aa-never-shown";

fn patch(d: &Daemon, body: Value) -> (u16, Value) {
    match d
        .request("PATCH", "/settings/mcp")
        .timeout(Duration::from_secs(120))
        .send_json(body)
    {
        Ok(r) => {
            let st = r.status();
            (st, r.into_json().unwrap_or(Value::Null))
        }
        Err(ureq::Error::Status(st, r)) => (st, r.into_json().unwrap_or(Value::Null)),
        Err(e) => panic!("PATCH /settings/mcp: {e}"),
    }
}

fn files(home: &Path) -> (Option<Vec<u8>>, Option<Vec<u8>>) {
    (
        std::fs::read(home.join("extensions.json")).ok(),
        std::fs::read(home.join("creds.json")).ok(),
    )
}

fn no_secret_in(what: &str, text: &str) {
    for s in [SECRET, BEARER] {
        assert!(!text.contains(s), "a secret value reached {what}: {text}");
    }
}

/// No secret value in extensions.json, the settings view or the log.
fn nothing_leaked(d: &Daemon) {
    let home = d.home.path();
    no_secret_in(
        "extensions.json",
        &std::fs::read_to_string(home.join("extensions.json")).unwrap_or_default(),
    );
    let (_, v) = d.get("/settings/mcp");
    no_secret_in("GET /settings/mcp", &v.to_string());
    no_secret_in("the daemon's log", &d.log());
}

fn empty_daemon() -> Daemon {
    Daemon::start(json!({"enabled": {"mcp": true}}))
}

#[test]
fn adding_a_real_server_from_a_command_line_saves_it_with_its_secret_apart() {
    let d = empty_daemon();
    let docs = tempfile::tempdir().unwrap();
    let spaced = docs.path().join("my docs");
    std::fs::create_dir(&spaced).unwrap();
    std::fs::write(spaced.join("hello.txt"), "hi").unwrap();
    let line = format!("node {} \"{}\"", filesystem_js(), spaced.display());
    let (st, v) = patch(
        &d,
        json!({
            "servers": {"files": {"type": "stdio", "command_line": line}},
            "secrets": {"files": {"env": {"FILES_TOKEN": SECRET}}},
        }),
    );
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["tested"]["files"]["state"], "connected", "{v}");
    assert!(v["tested"]["files"]["tools"].as_u64().unwrap() > 0, "{v}");
    let f = &v["servers"]["files"];
    assert_eq!(f["command"], "node", "{v}");
    assert_eq!(
        f["args"][1],
        spaced.display().to_string(),
        "quotes honoured: {v}"
    );
    assert_eq!(
        f["env"]["FILES_TOKEN"],
        json!({"secret": "env.FILES_TOKEN"}),
        "{v}"
    );
    assert_eq!(f["secrets"]["env"], json!(["FILES_TOKEN"]), "{v}");
    assert_eq!(f["auth"]["state"], "none", "{v}");
    assert!(f["status"]["tools"].as_u64().unwrap() > 0, "{v}");
    // creds.json holds the value, private whatever the umask.
    let creds = d.home.path().join("creds.json");
    let mode = std::fs::metadata(&creds).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    let c: Value = serde_json::from_slice(&std::fs::read(&creds).unwrap()).unwrap();
    assert_eq!(c["mcp"]["files"]["env.FILES_TOKEN"], SECRET);
    // A new session has its tools at once (saved under the new fingerprint).
    let (id, _) = d.session(json!({}));
    let tools = d.tool_names(&id);
    assert!(
        tools.iter().any(|t| t.starts_with("mcp__files__")),
        "{tools:?}"
    );
    nothing_leaked(&d);
}

#[test]
fn a_server_that_cannot_start_is_refused_and_both_files_stay_byte_for_byte() {
    let d = Daemon::start(json!({"enabled": {"mcp": true}, "mcp": {"servers": {
        "everything": {"type": "stdio", "command": "node", "args": [everything_js(), "stdio"]},
    }}}));
    // Give it a stored secret first, so both files exist.
    let (st, v) = patch(
        &d,
        json!({"secrets": {"everything": {"env": {"E_KEY": SECRET}}}}),
    );
    assert_eq!(st, 200, "{v}");
    let before = files(d.home.path());
    assert!(before.0.is_some() && before.1.is_some());
    // A mistyped command, as a new server and as an edit of the working one.
    for body in [
        json!({"servers": {"typo": {"command_line": "nmp -y @modelcontextprotocol/server-everything"}}}),
        json!({"servers": {"everything": {"command": "/nonexistent/node"}}, "secrets": {"everything": {"env": {"E_KEY": "changed-value"}}}}),
        json!({"servers": {"everything": {"enabled": true, "args": ["/nonexistent/server.js"]}}}),
    ] {
        let (st, v) = patch(&d, body.clone());
        assert_eq!(st, 409, "{body}: {v}");
        assert_eq!(v["error"]["code"], "server_failed", "{v}");
        assert!(v["error"]["server"].is_string(), "{v}");
        assert!(!v["error"]["message"].as_str().unwrap().is_empty(), "{v}");
        assert_eq!(files(d.home.path()), before, "{body}: the files changed");
    }
    // The working server still works in a session.
    let (id, _) = d.session(json!({}));
    assert!(d
        .tool_names(&id)
        .iter()
        .any(|t| t == "mcp__everything__echo"));
    // A server switched off is not tried: a mistyped one is saved.
    let (st, v) = patch(
        &d,
        json!({"servers": {"later": {"command": "/nonexistent/cmd", "enabled": false}}}),
    );
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["servers"]["later"]["status"]["state"], "disabled", "{v}");
    assert!(v["tested"].as_object().unwrap().is_empty(), "{v}");
    // Switching it on tries it: refused, and it stays off.
    let before = files(d.home.path());
    let (st, v) = patch(&d, json!({"servers": {"later": {"enabled": true}}}));
    assert_eq!(st, 409, "{v}");
    assert_eq!(files(d.home.path()), before);
    nothing_leaked(&d);
}

#[test]
fn a_real_server_answering_401_is_kept_as_needing_a_sign_in_and_a_bearer_token_opens_it() {
    let peer = HttpPeer::py_with_token(BEARER);
    let d = empty_daemon();
    let (st, v) = patch(
        &d,
        json!({"servers": {"locked": {"type": "http", "url": peer.url}}}),
    );
    assert_eq!(st, 200, "a 401 is kept: {v}");
    assert_eq!(v["tested"]["locked"]["state"], "needs_sign_in", "{v}");
    assert_eq!(
        v["servers"]["locked"]["status"]["state"], "needs_sign_in",
        "{v}"
    );
    assert_eq!(
        v["servers"]["locked"]["auth"]["state"], "needs_sign_in",
        "{v}"
    );
    // The bearer token, stored: it connects.
    let (st, v) = patch(
        &d,
        json!({"secrets": {"locked": {"bearer_token": BEARER, "header": {"name": "X-Trace", "value": SECRET}}}}),
    );
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["tested"]["locked"]["state"], "connected", "{v}");
    let s = &v["servers"]["locked"];
    assert_eq!(s["bearerToken"], json!({"secret": "bearer_token"}), "{v}");
    assert_eq!(s["secrets"]["bearer_token"], true, "{v}");
    assert_eq!(s["secrets"]["header"], "X-Trace", "{v}");
    let (id, _) = d.session(json!({}));
    let (st, r) = d.call(&id, "mcp__locked__echo", json!({"message": "hi"}));
    assert_eq!(st, 200, "{r}");
    // A blank token keeps it; `-` removes it, and the server asks for a sign-in again.
    let (st, v) = patch(&d, json!({"secrets": {"locked": {"bearer_token": ""}}}));
    assert_eq!(st, 200, "{v}");
    assert_eq!(
        v["servers"]["locked"]["secrets"]["bearer_token"], true,
        "{v}"
    );
    let (st, v) = patch(&d, json!({"secrets": {"locked": {"bearer_token": "-"}}}));
    assert_eq!(st, 200, "{v}");
    assert_eq!(
        v["servers"]["locked"]["secrets"]["bearer_token"], false,
        "{v}"
    );
    assert_eq!(v["tested"]["locked"]["state"], "needs_sign_in", "{v}");
    nothing_leaked(&d);
}

#[test]
fn the_python_sdk_server_and_server_everything_over_http_are_added_and_read_back() {
    let peer = HttpPeer::everything();
    let d = empty_daemon();
    let (st, v) = patch(
        &d,
        json!({
            "servers": {
                "py": {"type": "stdio", "command": venv_python(), "args": [server_script("py_mcp_server.py")]},
                "remote": {"type": "http", "url": peer.url, "callTimeoutMs": 20000},
            },
            "retryMs": 5000,
        }),
    );
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["tested"]["py"]["state"], "connected", "{v}");
    assert_eq!(v["tested"]["remote"]["state"], "connected", "{v}");
    let (st, g) = d.get("/settings/mcp");
    assert_eq!(st, 200);
    assert_eq!(g["retryMs"], 5000, "{g}");
    assert_eq!(g["servers"]["remote"]["callTimeoutMs"], 20000, "{g}");
    assert_eq!(g["servers"]["remote"]["enabled"], true, "{g}");
    assert!(
        g["servers"]["py"]["status"]["tools"].as_u64().unwrap() >= 2,
        "{g}"
    );
    assert_eq!(g["changed_on_disk"], false, "{g}");
    assert!(g["problems"].as_array().unwrap().is_empty(), "{g}");
    // Live status once a session holds them.
    let (id, _) = d.session(json!({}));
    assert!(d.tool_names(&id).iter().any(|t| t == "mcp__py__echo"));
    // Advertised from the catalogue the save discovered, dialled in the background.
    let mut g = Value::Null;
    let connected = wait_until(Duration::from_secs(20), || {
        g = d.get("/settings/mcp").1;
        g["servers"]["py"]["status"]["state"] == "connected"
    });
    assert!(connected, "{g}");
    assert!(
        g["servers"]["py"]["status"]["protocol_version"].is_string(),
        "{g}"
    );
}

#[test]
fn deleting_a_server_closes_it_in_every_session_and_drops_its_credentials() {
    let d = Daemon::start(json!({"enabled": {"mcp": true}, "mcp": {"servers": {
        "everything": {"type": "stdio", "command": "node", "args": [everything_js(), "stdio"]},
    }}}));
    let (st, _) = patch(
        &d,
        json!({"secrets": {"everything": {"env": {"E_KEY": SECRET}}}}),
    );
    assert_eq!(st, 200);
    let (a, _) = d.session(json!({}));
    let (b, _) = d.session(json!({}));
    for id in [&a, &b] {
        let (st, _) = d.call(id, "mcp__everything__echo", json!({"message": "x"}));
        assert_eq!(st, 200);
    }
    let pid = d.pid() as i32;
    assert!(!descendants(pid).is_empty());
    let (st, v) = patch(&d, json!({"servers": {"everything": null}}));
    assert_eq!(st, 200, "{v}");
    assert!(v["servers"].as_object().unwrap().is_empty(), "{v}");
    assert!(v["sessions"][&a]["generation"].is_u64(), "{v}");
    for id in [&a, &b] {
        assert!(d.tool_names(id).is_empty(), "session {id} still has tools");
    }
    assert!(
        wait_until(Duration::from_secs(15), || descendants(pid).is_empty()),
        "processes left: {:?}",
        descendants(pid)
            .iter()
            .map(|p| cmdline(*p))
            .collect::<Vec<_>>()
    );
    let c = std::fs::read_to_string(d.home.path().join("creds.json")).unwrap();
    assert!(!c.contains(SECRET) && !c.contains("everything"), "{c}");
    // Deleting a server that is not there: 404, nothing written.
    let before = files(d.home.path());
    let (st, v) = patch(&d, json!({"servers": {"everything": null}}));
    assert_eq!(st, 404, "{v}");
    assert_eq!(files(d.home.path()), before);
}

#[test]
fn bad_input_is_a_400_naming_the_field_and_nothing_is_written() {
    let d = Daemon::start(json!({"enabled": {"mcp": true}, "mcp": {"servers": {
        "web": {"type": "http", "url": "http://127.0.0.1:9/mcp", "enabled": false},
    }}}));
    let before = files(d.home.path());
    let cases = [
        (
            json!({"servers": {"Bad Name!": {"command": "x"}}}),
            "servers.Bad Name!",
        ),
        (
            json!({"servers": {"x": {"command": "x", "shell": true}}}),
            "servers.x.shell",
        ),
        (
            json!({"servers": {"x": {"url": "https://user:pw@example.com/mcp"}}}),
            "servers.x.url",
        ),
        (
            json!({"servers": {"x": {"url": "https://example.com/mcp#top"}}}),
            "servers.x.url",
        ),
        (
            json!({"servers": {"x": {"command": "x", "env": {"NOT-A-VAR": {"env": "A"}}}}}),
            "servers.x.env.NOT-A-VAR",
        ),
        (
            json!({"servers": {"x": {"command": "x"}}, "secrets": {"x": {"env": {"2X": SECRET}}}}),
            "secrets.x.env.2X",
        ),
        (
            json!({"secrets": {"web": {"header": {"name": "Mcp-Session-Id", "value": SECRET}}}}),
            "secrets.web.header.name",
        ),
        (
            json!({"secrets": {"web": {"header": {"name": "MCP-Protocol-Version", "value": SECRET}}}}),
            "secrets.web.header.name",
        ),
        (
            json!({"secrets": {"web": {"header": {"name": "Mcp-Method", "value": SECRET}}}}),
            "secrets.web.header.name",
        ),
        (
            json!({"secrets": {"web": {"header": {"name": "Mcp-Name", "value": SECRET}}}}),
            "secrets.web.header.name",
        ),
        (
            json!({"secrets": {"web": {"header": {"name": "Bad Header", "value": SECRET}}}}),
            "secrets.web.header.name",
        ),
        (
            json!({"secrets": {"web": {"bearer_token": SECRET, "header": {"name": "Authorization", "value": SECRET}}}}),
            "secrets.web.header.name",
        ),
        (
            json!({"servers": {"x": {"command_line": "npx -y \"unclosed"}}}),
            "servers.x.command_line",
        ),
        (json!({"retryMs": -1}), "retryMs"),
        (json!({"servers": {}, "extra": 1}), "extra"),
    ];
    for (body, field) in cases {
        let (st, v) = patch(&d, body.clone());
        assert_eq!(st, 400, "{body}: {v}");
        assert_eq!(v["error"]["field"], field, "{body}: {v}");
        no_secret_in("an error", &v.to_string());
        assert_eq!(files(d.home.path()), before, "{body}");
    }
    let (_, v) = patch(
        &d,
        json!({"servers": {"x": {"command_line": "npx -y \"unclosed"}}}),
    );
    assert_eq!(v["error"]["column"], 8, "{v}");
    // Not JSON, and over 1 MiB.
    let r = d
        .request("PATCH", "/settings/mcp")
        .set("Content-Type", "application/json")
        .send_string("{\"servers\": ");
    assert!(matches!(r, Err(ureq::Error::Status(400, _))));
    let big = json!({"servers": {"x": {"command": "x", "args": ["a".repeat(1_100_000)]}}});
    let (st, v) = patch(&d, big);
    assert_eq!(st, 413, "{v}");
    assert_eq!(files(d.home.path()), before);
    nothing_leaked(&d);
}

#[test]
fn a_hand_edit_is_not_overwritten_until_reloaded() {
    let d = empty_daemon();
    let path = d.home.path().join("extensions.json");
    let edited = json!({"enabled": {"mcp": true}, "mcp": {"servers": {
        "hand": {"type": "stdio", "command": "/bin/true", "enabled": false},
    }}});
    std::fs::write(&path, serde_json::to_vec_pretty(&edited).unwrap()).unwrap();
    let (_, g) = d.get("/settings/mcp");
    assert_eq!(g["changed_on_disk"], true, "{g}");
    let (st, v) = patch(&d, json!({"retryMs": 1000}));
    assert_eq!(st, 409, "{v}");
    assert_eq!(v["error"]["code"], "changed_on_disk", "{v}");
    assert_eq!(
        serde_json::from_slice::<Value>(&std::fs::read(&path).unwrap()).unwrap(),
        edited
    );
    let (st, _) = d.post("/extensions/mcp/reload", json!({}));
    assert_eq!(st, 200);
    let (st, v) = patch(&d, json!({"retryMs": 1000}));
    assert_eq!(st, 200, "{v}");
    assert!(
        v["servers"]["hand"].is_object(),
        "the hand edit is kept: {v}"
    );
    assert_eq!(v["retryMs"], 1000);
}

#[test]
fn concurrent_changes_are_serialized_and_none_is_lost() {
    let d = empty_daemon();
    std::thread::scope(|s| {
        for i in 0..12 {
            let d = &d;
            s.spawn(move || {
                let (st, v) = patch(
                    d,
                    json!({
                        "servers": {format!("s{i}"): {"command": "/bin/true", "enabled": false}},
                        "secrets": {format!("s{i}"): {"env": {"K": format!("value-{i}")}}},
                    }),
                );
                assert_eq!(st, 200, "{v}");
            });
        }
    });
    let (_, g) = d.get("/settings/mcp");
    assert_eq!(g["servers"].as_object().unwrap().len(), 12, "{g}");
    let c: Value =
        serde_json::from_slice(&std::fs::read(d.home.path().join("creds.json")).unwrap()).unwrap();
    for i in 0..12 {
        assert_eq!(c["mcp"][format!("s{i}")]["env.K"], format!("value-{i}"));
    }
}

/// Every server in extensions.json has its stored secret in creds.json and the other way
/// round: `s<i>` with `env.K` = `value-<i>`.
fn pair_consistent(home: &Path) -> Result<usize, String> {
    let ext: Value = serde_json::from_slice(
        &std::fs::read(home.join("extensions.json")).map_err(|e| e.to_string())?,
    )
    .map_err(|e| format!("extensions.json: {e}"))?;
    let creds: Value = match std::fs::read(home.join("creds.json")) {
        Ok(b) => serde_json::from_slice(&b).map_err(|e| format!("creds.json: {e}"))?,
        Err(_) => json!({}),
    };
    let servers: Vec<String> = ext["mcp"]["servers"]
        .as_object()
        .map(|m| m.keys().cloned().collect())
        .unwrap_or_default();
    let stored: Vec<String> = creds["mcp"]
        .as_object()
        .map(|m| m.keys().cloned().collect())
        .unwrap_or_default();
    if servers != stored {
        return Err(format!("servers {servers:?} but secrets for {stored:?}"));
    }
    for s in &servers {
        let want = format!("value-{}", &s[1..]);
        if creds["mcp"][s]["env.K"] != want.as_str() {
            return Err(format!("{s}: secret {}", creds["mcp"][s]["env.K"]));
        }
    }
    Ok(servers.len())
}

#[test]
fn kill_9_during_saves_leaves_each_pair_as_it_was_or_as_it_became() {
    let mut home = tempfile::tempdir().unwrap();
    std::fs::write(home.path().join("extensions.json"), "{}\n").unwrap();
    let mut next = 0usize;
    let mut saved_before = 0;
    for round in 0..8 {
        let d = Daemon::start_in(home, &[]);
        let stop = std::sync::atomic::AtomicBool::new(false);
        let done = std::sync::atomic::AtomicUsize::new(0);
        std::thread::scope(|s| {
            s.spawn(|| {
                let mut i = next;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let r = d
                        .request("PATCH", "/settings/mcp")
                        .timeout(Duration::from_secs(5))
                        .send_json(json!({
                            "servers": {format!("s{i}"): {"command": "/bin/true", "enabled": false}},
                            "secrets": {format!("s{i}"): {"env": {"K": format!("value-{i}")}}},
                        }));
                    if r.is_err() {
                        break;
                    }
                    i += 1;
                    done.store(i, std::sync::atomic::Ordering::Relaxed);
                }
            });
            // Let some saves land, then kill -9 in the middle of one.
            std::thread::sleep(Duration::from_millis(150 + 37 * round as u64));
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(d.pid() as i32),
                nix::sys::signal::Signal::SIGKILL,
            );
            stop.store(true, std::sync::atomic::Ordering::Relaxed);
        });
        let mut d = d;
        d.stop(9);
        let start = next;
        let answered = done
            .load(std::sync::atomic::Ordering::Relaxed)
            .saturating_sub(start);
        next = done.load(std::sync::atomic::Ordering::Relaxed).max(next) + 1;
        home = std::mem::replace(&mut d.home, tempfile::tempdir().unwrap());
        drop(d);
        // The next start finishes an interrupted change: the pair is consistent, and no save
        // that was answered is lost.
        let d = Daemon::start_in(home, &[]);
        let n = pair_consistent(d.home.path()).unwrap_or_else(|e| panic!("round {round}: {e}"));
        // Every answered save is there; the one in flight at the kill is there or not.
        assert!(
            n >= saved_before + answered && n <= saved_before + answered + 1,
            "round {round}: {n} servers, {saved_before} before, {answered} saves answered"
        );
        eprintln!(
            "round {round}: {answered} saves answered before the kill; {n} servers after the restart"
        );
        let (st, g) = d.get("/settings/mcp");
        assert_eq!(st, 200);
        assert_eq!(g["servers"].as_object().unwrap().len(), n);
        saved_before = n;
        let mut d = d;
        d.stop(15);
        home = std::mem::replace(&mut d.home, tempfile::tempdir().unwrap());
    }
    assert!(saved_before > 0, "no save landed in any round");
}

#[test]
fn configuration_problems_are_reported_by_the_api_and_logged_once() {
    let home = tempfile::tempdir().unwrap();
    std::fs::write(home.path().join("config.toml"), "max_sesions = 3\n").unwrap();
    std::fs::write(
        home.path().join("extensions.json"),
        serde_json::to_vec(&json!({"enabled": {"mcp": true}, "mcp": {"servers": {
            "ok": {"type": "stdio", "command": "node", "args": [everything_js(), "stdio"]},
            "novar": {"type": "stdio", "command": "x", "env": {"K": {"env": "ALBEDO_TEST_UNSET_VARIABLE_X"}}},
            "broken": {"type": "stdio"},
        }}}))
        .unwrap(),
    )
    .unwrap();
    let d = Daemon::start_in(home, &[]);
    let (st, g) = d.get("/settings/mcp");
    assert_eq!(st, 200, "{g}");
    let problems = g["problems"].to_string();
    assert!(problems.contains("max_sesions"), "{problems}");
    assert!(
        problems.contains("ALBEDO_TEST_UNSET_VARIABLE_X"),
        "{problems}"
    );
    assert!(problems.contains("broken"), "{problems}");
    assert_eq!(g["servers"]["broken"]["status"]["state"], "invalid", "{g}");
    assert!(g["servers"]["broken"]["problem"].is_string(), "{g}");
    assert_eq!(g["servers"]["novar"]["status"]["state"], "invalid", "{g}");
    // Asking again, and a session's preparation reading the files, do not log them again.
    let _ = d.get("/settings/mcp");
    let _ = d.post("/sessions", json!({}));
    let log = d.log();
    let logged = |what: &str| {
        log.lines()
            .filter(|l| l.contains("configuration problem") && l.contains(what))
            .count()
    };
    assert_eq!(logged("max_sesions"), 1, "{log}");
    assert_eq!(logged("ALBEDO_TEST_UNSET_VARIABLE_X"), 1, "{log}");
    assert_eq!(logged("broken"), 1, "{log}");
}

#[test]
fn an_inline_secret_a_hand_edit_wrote_is_never_shown() {
    let d = Daemon::start(json!({"enabled": {"mcp": true}, "mcp": {"servers": {
        "inline": {"type": "stdio", "command": "/bin/true", "env": {"TOKEN": SECRET}},
        "userinfo": {"type": "http", "url": format!("https://me:{BEARER}@example.com/mcp")},
    }}}));
    let (st, g) = d.get("/settings/mcp");
    assert_eq!(st, 200, "{g}");
    no_secret_in("GET /settings/mcp", &g.to_string());
    assert_eq!(g["servers"]["inline"]["status"]["state"], "invalid", "{g}");
    assert!(
        g["servers"]["inline"]["env"]["TOKEN"]["inline"].is_string(),
        "{g}"
    );
    assert!(!g["problems"].as_array().unwrap().is_empty(), "{g}");
    no_secret_in("the daemon's log", &d.log());
}

#[test]
fn creds_json_is_0600_when_the_daemon_creates_it_under_a_permissive_umask() {
    use std::os::unix::process::CommandExt;
    let home = tempfile::tempdir().unwrap();
    std::fs::write(home.path().join("extensions.json"), "{}\n").unwrap();
    let ready = home.path().join("ready");
    let mut cmd = std::process::Command::new(launcher());
    cmd.args(["serve", "--listen", "127.0.0.1:0", "--ready-file"])
        .arg(&ready)
        .env("ALBEDO_HOME", home.path())
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    // SAFETY: umask is async-signal-safe and touches only the child.
    unsafe {
        cmd.pre_exec(|| {
            nix::sys::stat::umask(nix::sys::stat::Mode::empty());
            Ok(())
        });
    }
    let child = cmd.spawn().unwrap();
    assert!(wait_until(Duration::from_secs(20), || {
        std::fs::read_to_string(&ready).is_ok_and(|s| !s.is_empty())
    }));
    let addr = std::fs::read_to_string(&ready).unwrap();
    let d = Daemon {
        child: Some(child),
        base: format!("http://{}", addr.lines().next().unwrap()),
        home,
    };
    let (st, v) = patch(
        &d,
        json!({"servers": {"x": {"command": "/bin/true", "enabled": false}},
               "secrets": {"x": {"env": {"K": SECRET}}}}),
    );
    assert_eq!(st, 200, "{v}");
    let creds = d.home.path().join("creds.json");
    let m = std::fs::metadata(&creds).unwrap().permissions().mode() & 0o777;
    assert_eq!(m, 0o600, "creds.json: {m:o}");
    let ext = d.home.path().join("extensions.json");
    let m = std::fs::metadata(&ext).unwrap().permissions().mode() & 0o777;
    assert_eq!(m & 0o022, 0, "extensions.json is writable by others: {m:o}");
}

/// The lines of `GET /settings/mcp/events` (a text/event-stream), read on a thread of their
/// own for at most `timeout`.
fn event_lines(d: &Daemon, timeout: Duration) -> std::sync::mpsc::Receiver<String> {
    use std::io::BufRead;
    let resp = d
        .request("GET", "/settings/mcp/events")
        .timeout(timeout)
        .call()
        .unwrap();
    assert_eq!(resp.content_type(), "text/event-stream");
    let (tx, rx) = std::sync::mpsc::channel::<String>();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(resp.into_reader()).lines() {
            let Ok(line) = line else { return };
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    rx
}

#[test]
fn settings_events_say_when_to_read_the_settings_again() {
    let d = empty_daemon();
    let rx = event_lines(&d, Duration::from_secs(30));
    let next_event = || loop {
        let line = rx
            .recv_timeout(Duration::from_secs(10))
            .expect("an event within 10 s");
        if let Some(e) = line.strip_prefix("event: ") {
            return e.to_owned();
        }
    };
    let (st, _) = patch(&d, json!({"retryMs": 2000}));
    assert_eq!(st, 200);
    assert_eq!(next_event(), "settings");
    let (id, _) = d.session(json!({}));
    assert_eq!(next_event(), "sessions");
    assert_eq!(d.delete(&format!("/sessions/{id}")), 204);
    assert_eq!(next_event(), "sessions");
    let (st, _) = d.post("/extensions/mcp/reload", json!({}));
    assert_eq!(st, 200);
    assert_eq!(next_event(), "settings");
}

#[test]
fn the_live_sessions_are_listed_without_counting_as_activity() {
    let d = empty_daemon();
    let (_, v) = d.get("/sessions");
    assert_eq!(v["sessions"], json!([]), "{v}");
    let (a, _) = d.session(json!({}));
    let (b, _) = d.session(json!({"extensions": {"mcp": false}}));
    let (st, v) = d.get("/sessions");
    assert_eq!(st, 200, "{v}");
    let ids: Vec<&str> = v["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["id"].as_str().unwrap())
        .collect();
    assert!(
        ids.contains(&a.as_str()) && ids.contains(&b.as_str()),
        "{v}"
    );
    let sb = v["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["id"] == b.as_str())
        .unwrap();
    assert_eq!(sb["follows_default"], false, "{v}");
    assert!(sb["idle_secs"].is_u64(), "{v}");
    assert_eq!(d.delete(&format!("/sessions/{a}")), 204);
    let (_, v) = d.get("/sessions");
    assert_eq!(v["sessions"].as_array().unwrap().len(), 1, "{v}");
}

/// Connection states have events too: a client such as the terminal form or the web pane
/// shows a server connecting, connected or closed without polling.
#[test]
fn connection_states_are_told_as_servers_events() {
    let d = Daemon::start(json!({"enabled": {"mcp": true}, "mcp": {"servers": {
        "everything": {"type": "stdio", "command": "node", "args": [everything_js()]},
        "broken": {"type": "stdio", "command": "/nonexistent/albedo-test-server"}
    }}}));
    let rx = event_lines(&d, Duration::from_secs(60));
    // The `servers` events' data, read until one named `everything` came and `until` holds
    // for the settings view.
    let servers_events_until = |what: &str, until: &dyn Fn(&Value) -> bool| {
        let mut seen: Vec<Value> = vec![];
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        loop {
            let line = rx
                .recv_timeout(deadline.saturating_duration_since(std::time::Instant::now()))
                .unwrap_or_else(|_| panic!("{what}: no such event within 30 s: {seen:?}"));
            // Any event says "read the settings again", as a client does.
            if let Some(data) = line.strip_prefix("data: ") {
                let ev: Value = serde_json::from_str(data).unwrap();
                let servers = ev["kind"] == "servers";
                if servers {
                    seen.push(ev);
                }
                let (_, view) = d.get("/settings/mcp");
                if seen.iter().any(|e| e["server"] == "everything") && until(&view) {
                    return seen;
                }
            }
        }
    };
    let state = |v: &Value, name: &str| v["servers"][name]["status"]["state"].clone();
    let (id, _) = d.session(json!({}));
    let seen = servers_events_until("connected", &|v| {
        state(v, "everything") == "connected" && state(v, "broken") != "connecting"
    });
    assert!(seen.iter().any(|e| e["server"] == "everything"), "{seen:?}");
    let (_, v) = d.get("/settings/mcp");
    assert_eq!(state(&v, "broken"), "unavailable", "{v}");
    // Closing the session closes its connections: told too.
    assert_eq!(d.delete(&format!("/sessions/{id}")), 204);
    let seen = servers_events_until("closed", &|v| state(v, "everything") == "not_connected");
    assert!(seen.iter().any(|e| e["server"] == "everything"), "{seen:?}");
}
