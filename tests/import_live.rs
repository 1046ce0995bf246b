//! `mcp import` against the built daemon: a Claude-format file with server-everything over
//! stdio is added through `PATCH /settings/mcp` (its inline secret in creds.json only, a
//! `${VAR}` a reference), a second import of the same file gets a suffixed name, a server that
//! cannot start is refused with nothing written and its name said, and no output of the
//! command (dry run, --json, the import, the refusal) shows the secret.
//!
//! `run` prints to the process's stdout, so each import runs in a child of this test binary
//! (the `child_import` test, which does nothing unless IMPORT_CHILD is set) and its output is
//! read back.

mod common;
use common::*;
use serde_json::{json, Value};
use std::path::Path;
use std::process::Command;

const SECRET: &str = "imp0rt-s3cret-4b1e-never-shown";

/// Run `albedo_mcp::cli::import::run` in a child process: (exit status, stdout, stderr).
fn import(d: &Daemon, file: &Path, flags: &[&str]) -> (i32, String, String) {
    let out = Command::new(std::env::current_exe().unwrap())
        .args(["child_import", "--exact", "--nocapture", "--test-threads=1"])
        .env("IMPORT_CHILD", "1")
        .env("IMPORT_FILE", file)
        .env("IMPORT_FLAGS", flags.join(" "))
        .env("IMPORT_DAEMON", &d.base)
        .env("ALBEDO_HOME", d.home.path())
        .env_remove("ALBEDO_DAEMON")
        .env_remove("ALBEDO_TOKEN")
        .output()
        .expect("run the child");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let code = stdout
        .lines()
        .find_map(|l| l.strip_prefix("IMPORT_EXIT="))
        .and_then(|c| c.trim().parse().ok())
        .unwrap_or(-1);
    (
        code,
        stdout,
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn child_import() {
    if std::env::var_os("IMPORT_CHILD").is_none() {
        return;
    }
    let file = std::env::var("IMPORT_FILE").unwrap();
    let flags = std::env::var("IMPORT_FLAGS").unwrap_or_default();
    let daemon = std::env::var("IMPORT_DAEMON").unwrap();
    let code = albedo_mcp::cli::import::run(
        Some(&daemon),
        Path::new(&file),
        flags.contains("--dry-run"),
        flags.contains("--json"),
    );
    println!("\nIMPORT_EXIT={code}");
}

fn servers(d: &Daemon) -> Value {
    d.get("/settings/mcp").1["servers"].clone()
}

#[test]
fn a_claude_file_is_imported_into_a_real_daemon_with_its_secret_apart() {
    let d = Daemon::start(json!({"enabled": {"mcp": true}}));
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("claude_desktop_config.json");
    std::fs::write(
        &file,
        serde_json::to_vec_pretty(&json!({"mcpServers": {
            "Everything": {
                "command": "node",
                "args": [everything_js(), "stdio"],
                "env": {"EVERYTHING_TOKEN": SECRET, "FROM_HOME": "${HOME}"}
            }
        }}))
        .unwrap(),
    )
    .unwrap();
    let no_secret = |what: &str, text: &str| {
        assert!(!text.contains(SECRET), "the secret reached {what}: {text}");
    };

    // A dry run writes nothing and shows no secret.
    let (code, out, err) = import(&d, &file, &["--dry-run"]);
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(out.contains("+ Everything (stdio: node "), "{out}");
    no_secret("the dry run", &(out.clone() + &err));
    let (code, out, err) = import(&d, &file, &["--dry-run", "--json"]);
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(out.contains("\"<secret>\""), "{out}");
    no_secret("the dry run's JSON", &(out + &err));
    assert!(servers(&d).as_object().is_none_or(|m| m.is_empty()));

    // The import: the server connects; the secret is in creds.json only.
    let (code, out, err) = import(&d, &file, &[]);
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(out.contains("Everything: connected"), "{out}");
    no_secret("the import's output", &(out + &err));
    let s = servers(&d);
    assert_eq!(
        s["Everything"]["env"],
        json!({"EVERYTHING_TOKEN": {"secret": "env.EVERYTHING_TOKEN"},
               "FROM_HOME": {"env": "HOME"}}),
        "{s}"
    );
    let home = d.home.path();
    no_secret(
        "extensions.json",
        &std::fs::read_to_string(home.join("extensions.json")).unwrap(),
    );
    assert!(std::fs::read_to_string(home.join("creds.json"))
        .unwrap()
        .contains(SECRET));
    no_secret("GET /settings/mcp", &s.to_string());

    // Again: the name is taken, so it gets a suffix.
    let (code, out, err) = import(&d, &file, &["--json"]);
    assert_eq!(code, 0, "{out}\n{err}");
    no_secret("the second import", &(out + &err));
    assert!(servers(&d).get("Everything-2").is_some());

    // A server that cannot start: the daemon refuses, nothing is written, the server is named.
    let before = (
        std::fs::read(home.join("extensions.json")).unwrap(),
        std::fs::read(home.join("creds.json")).unwrap(),
    );
    let broken = dir.path().join(".mcp.json");
    std::fs::write(
        &broken,
        serde_json::to_vec(&json!({"mcpServers": {
            "missing": {"command": "/nonexistent/albedo-import-test", "env": {"K": SECRET}}
        }}))
        .unwrap(),
    )
    .unwrap();
    let (code, out, err) = import(&d, &broken, &[]);
    assert_eq!(code, 1, "{out}\n{err}");
    assert!(err.contains("missing"), "{err}");
    no_secret("the refusal", &(out + &err));
    let after = (
        std::fs::read(home.join("extensions.json")).unwrap(),
        std::fs::read(home.join("creds.json")).unwrap(),
    );
    assert!(before == after, "a refused import changed the files");
    no_secret("the daemon's log", &d.log());
}
