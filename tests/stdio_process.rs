//! What a stdio server process gets from the daemon, and when it ends, through the daemon's
//! HTTP API against real servers (the Python `mcp` SDK test server reports its own argv,
//! working directory and environment; server-everything): the exact argument vector (no
//! shell), `cwd`, an environment reduced to HOME, PATH, TMPDIR and the named values, stderr
//! discarded (a server writing lots of it neither blocks nor reaches an answer or the log),
//! and no process left once the session's extension is disabled or a reload swapped its
//! connection for one with a new configuration.

mod common;
use common::*;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

fn servers(servers: Value) -> Value {
    json!({"enabled": {"mcp": true}, "mcp": {"servers": servers}})
}

/// The Python SDK test server over stdio, with `extra` arguments after its own.
fn py(extra: &[&str]) -> Value {
    let mut args = vec![
        server_script("py_mcp_server.py"),
        "--transport".into(),
        "stdio".into(),
    ];
    args.extend(extra.iter().map(|s| s.to_string()));
    json!({"type": "stdio", "command": venv_python(), "args": args})
}

fn with(mut def: Value, extra: Value) -> Value {
    if let (Some(d), Some(e)) = (def.as_object_mut(), extra.as_object()) {
        for (k, v) in e {
            d.insert(k.clone(), v.clone());
        }
    }
    def
}

fn text(r: &Value) -> &str {
    r["content"][0]["text"].as_str().unwrap_or("")
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

#[test]
fn a_stdio_server_gets_its_exact_argv_its_cwd_and_only_the_reduced_environment() {
    let cwd = tempfile::tempdir().unwrap();
    let tmpdir = tempfile::tempdir().unwrap();
    let tmpdir = tmpdir.path().display().to_string();
    let odd = ["a b", "it's", "\"q\"", "", "$HOME", "*", "back\\slash"];
    let def = with(
        py(&odd),
        json!({"cwd": cwd.path(), "env": {"NAMED_TOKEN": {"env": "ALBEDO_T_NAMED"}}}),
    );
    let d = Daemon::start_env(
        servers(json!({ "p": def })),
        &[
            ("ALBEDO_T_NAMED", "named value, with spaces"),
            ("ALBEDO_T_NOT_NAMED", "must not reach the server"),
            ("TMPDIR", &tmpdir),
            ("LANG", "C.UTF-8"),
        ],
    );
    let (id, view) = d.session(json!({}));
    assert!(view["warnings"].as_array().unwrap().is_empty(), "{view}");
    let (st, r) = d.call(&id, "mcp__p__process_info", json!({}));
    assert_eq!(st, 200, "{r}");
    let info: Value = serde_json::from_str(text(&r)).expect("process_info is JSON");

    // The exact vector: the command, then the arguments, each as configured.
    let mut argv = vec![
        venv_python(),
        server_script("py_mcp_server.py"),
        "--transport".into(),
        "stdio".into(),
    ];
    argv.extend(odd.iter().map(|s| s.to_string()));
    assert_eq!(info["argv"], json!(argv), "{info}");

    assert_eq!(
        Path::new(info["cwd"].as_str().unwrap()),
        cwd.path().canonicalize().unwrap(),
        "{info}"
    );

    // HOME, PATH and TMPDIR as the daemon has them, the named value, and nothing else (not
    // the daemon's other variables, nor the launcher's control descriptor).
    let environ: BTreeMap<String, String> =
        serde_json::from_value(info["environ"].clone()).unwrap();
    let mut expected = BTreeMap::new();
    for k in ["HOME", "PATH"] {
        if let Ok(v) = std::env::var(k) {
            expected.insert(k.to_owned(), v);
        }
    }
    expected.insert("TMPDIR".to_owned(), tmpdir.clone());
    expected.insert(
        "NAMED_TOKEN".to_owned(),
        "named value, with spaces".to_owned(),
    );
    assert_eq!(environ, expected);
}

#[test]
fn a_server_writing_lots_of_stderr_neither_blocks_nor_reaches_an_answer() {
    const MARKER: &str = "STDERR-MARKER-3b9e";
    let d = Daemon::start(servers(json!({
        // A call that blocks on a stderr nobody reads fails here, not after a minute.
        "noisy": with(py(&[]), json!({"callTimeoutMs": 20000})),
    })));
    let (id, _) = d.session(json!({}));
    // 8 MiB: far beyond any pipe's buffer.
    let (st, r) = d.call(
        &id,
        "mcp__noisy__stderr_flood",
        json!({"kib": 8192, "marker": MARKER}),
    );
    assert_eq!(st, 200, "{r}");
    assert_eq!(text(&r), "wrote 8388608 bytes to stderr", "{r}");
    let (st, r2) = d.call(&id, "mcp__noisy__echo", json!({"message": "after"}));
    assert_eq!(st, 200, "{r2}");
    assert_eq!(text(&r2), "after");
    let (_, view) = d.get(&format!("/sessions/{id}"));
    let (_, tools) = d.get(&format!("/sessions/{id}/tools"));
    for seen in [
        r.to_string(),
        r2.to_string(),
        view.to_string(),
        tools.to_string(),
        d.log(),
    ] {
        assert!(
            !seen.contains(MARKER),
            "stderr reached the daemon: {seen:.300}"
        );
    }
}

#[test]
fn disabling_the_extension_ends_every_stdio_server_of_the_session() {
    let tmp = tempfile::tempdir().unwrap();
    let pidf = tmp.path().join("fixture.pid");
    let d = Daemon::start(servers(json!({
        "fx": fixture_server("exits_mid_call.py", &["--pidfile", pidf.to_str().unwrap()]),
        "everything": {"type": "stdio", "command": "node", "args": [everything_js()]},
        "py": py(&[]),
    })));
    let (id, view) = d.session(json!({}));
    assert!(view["warnings"].as_array().unwrap().is_empty(), "{view}");
    for tool in ["mcp__fx__echo", "mcp__everything__echo", "mcp__py__echo"] {
        let (st, r) = d.call(&id, tool, json!({"message": "hi"}));
        assert_eq!(st, 200, "{tool}: {r}");
    }
    let daemon = d.pid() as i32;
    let tree = descendants(daemon);
    let fx = wait_pid(&pidf);
    assert!(tree.contains(&fx), "{tree:?}");
    // Three launchers and their servers (node and python may have children of their own).
    let launchers = tree
        .iter()
        .filter(|&&p| proc_stat(p).map(|(_, pp, _)| pp) == Some(daemon))
        .count();
    assert_eq!(launchers, 3, "{tree:?}");

    let (st, v) = d.put(
        &format!("/sessions/{id}/extensions/mcp"),
        json!({"enabled": false}),
    );
    assert_eq!(st, 200, "{v}");
    // EOF, then SIGTERM after 2 s, SIGKILL after 2 more: every one of them is gone.
    let gone = wait_until(Duration::from_secs(15), || tree.iter().all(|&p| !alive(p)));
    let left: Vec<(i32, Vec<String>)> = tree
        .iter()
        .filter(|&&p| alive(p))
        .map(|&p| (p, cmdline(p)))
        .collect();
    assert!(
        gone,
        "still running after the extension was disabled: {left:?}"
    );
    assert!(descendants(daemon).is_empty(), "{:?}", descendants(daemon));
}

#[test]
fn a_reload_that_changes_a_server_closes_its_old_process() {
    let tmp = tempfile::tempdir().unwrap();
    let first = tmp.path().join("first.pid");
    let second = tmp.path().join("second.pid");
    let def = |pidfile: &Path| {
        fixture_server(
            "exits_mid_call.py",
            &["--pidfile", pidfile.to_str().unwrap()],
        )
    };
    let d = Daemon::start(servers(json!({ "s": def(&first) })));
    let (id, _) = d.session(json!({}));
    let (st, r) = d.call(&id, "mcp__s__echo", json!({"message": "one"}));
    assert_eq!(st, 200, "{r}");
    let old = wait_pid(&first);
    assert!(alive(old));

    // A new configuration (its arguments changed): a new connection, a new process.
    std::fs::write(
        d.home.path().join("extensions.json"),
        servers(json!({ "s": def(&second) })).to_string(),
    )
    .unwrap();
    let (st, r) = d.post("/extensions/mcp/reload", json!({}));
    assert_eq!(st, 200, "{r}");
    assert_eq!(r["sessions"][&id]["generation"], 2, "{r}");
    let (st, r) = d.call(&id, "mcp__s__echo", json!({"message": "two"}));
    assert_eq!(st, 200, "{r}");
    let new = wait_pid(&second);
    assert_ne!(new, old);
    assert!(alive(new));
    // The old one was closed after the swap: its process ends (EOF; it exits on it).
    assert!(
        wait_until(Duration::from_secs(10), || !alive(old)),
        "the old server process is still running: {:?}",
        cmdline(old)
    );
    let tree = descendants(d.pid() as i32);
    assert!(tree.contains(&new) && !tree.contains(&old), "{tree:?}");
}
