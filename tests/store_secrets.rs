//! Secrets of stdio servers, through the real daemon: `{"env": "VAR"}` and `{"secret": "KEY"}`
//! (a value stored in `creds.json` under the server) reach the server's environment and
//! nothing else (no log line, error or API answer); a `creds.json` others can read is refused.

mod common;
use albedo_mcp::store::settings::Secret;
use albedo_mcp::transport::stdio::StdioSpec;
use common::*;
use serde_json::{json, Value};
use std::os::unix::fs::PermissionsExt;

const STORED: &str = "stored-9d41e7-never-print-me";
const FROM_ENV: &str = "env-52ab03-never-print-me";

fn ext() -> Value {
    let mut server = fixture_server("store_env_dump.py", &[]);
    server["env"] = json!({
        "FROM_CREDS": {"secret": "token"},
        "FROM_ENV": {"env": "ALBEDO_T_SECRET_VAR"},
    });
    json!({"enabled": {"mcp": true}, "mcp": {"servers": {"envd": server}}})
}

/// A home with `extensions.json` and `creds.json` (`creds`, of mode `mode`).
fn home_with(creds: Value, mode: u32) -> tempfile::TempDir {
    let home = tempfile::tempdir().unwrap();
    std::fs::write(home.path().join("extensions.json"), ext().to_string()).unwrap();
    let p = home.path().join("creds.json");
    std::fs::write(&p, creds.to_string()).unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
    home
}

#[test]
fn stdio_spec_debug_does_not_show_env_values() {
    let spec = StdioSpec {
        launcher: "/usr/bin/albedo-mcp".into(),
        command: "docs-mcp".into(),
        args: vec!["--root".into()],
        cwd: None,
        env: [("DOCS_TOKEN".to_owned(), Secret::new(STORED))].into(),
    };
    let shown = format!("{spec:?} {spec:#?}");
    assert!(!shown.contains(STORED), "{shown}");
    assert!(shown.contains("DOCS_TOKEN"), "{shown}");
}

#[test]
fn stored_and_environment_secrets_reach_the_server_and_nothing_else() {
    let home = home_with(json!({"mcp": {"envd": {"token": STORED}}}), 0o600);
    let d = Daemon::start_in(
        home,
        &[
            ("ALBEDO_T_SECRET_VAR", FROM_ENV),
            ("ALBEDO_T_UNRELATED", "not-for-servers"),
        ],
    );
    let (id, view) = d.session(json!({}));
    let (st, r) = d.call(&id, "mcp__envd__env", json!({}));
    assert_eq!(st, 200, "{r} {view}");
    let text = r["content"][0]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("{r}"));
    let env: Value = serde_json::from_str(text).unwrap();
    assert_eq!(env["FROM_CREDS"], STORED, "{env}");
    assert_eq!(env["FROM_ENV"], FROM_ENV, "{env}");
    assert!(env["PATH"].is_string(), "{env}");
    // The reduced environment: nothing of the daemon's own beyond HOME, PATH, TMPDIR.
    for absent in [
        "ALBEDO_T_UNRELATED",
        "ALBEDO_T_SECRET_VAR",
        "ALBEDO_HOME",
        "ALBEDO_LOG",
        "ALBEDO_MCP_CONTROL_FD",
        "ALBEDO_MCP_STDERR_FD",
    ] {
        assert!(env.get(absent).is_none(), "{absent} in {env}");
    }
    // Nothing else shows either value.
    let mut seen = vec![view.to_string()];
    seen.push(d.get(&format!("/sessions/{id}")).1.to_string());
    seen.push(d.get(&format!("/sessions/{id}/tools")).1.to_string());
    seen.push(d.get("/extensions").1.to_string());
    seen.push(d.call(&id, "mcp__envd__nope", json!({})).1.to_string());
    seen.push(d.log());
    for f in ["albedo.db", "albedo.db-wal", "extensions.json"] {
        let bytes = std::fs::read(d.home.path().join(f)).unwrap_or_default();
        seen.push(String::from_utf8_lossy(&bytes).into_owned());
    }
    for s in &seen {
        assert!(
            !s.contains(STORED) && !s.contains(FROM_ENV),
            "a secret leaked: {s}"
        );
    }
}

#[test]
fn a_missing_stored_secret_fails_preparation_naming_the_key_not_a_value() {
    let home = home_with(json!({"mcp": {"envd": {"other": STORED}}}), 0o600);
    let d = Daemon::start_in(home, &[("ALBEDO_T_SECRET_VAR", FROM_ENV)]);
    let (_, view) = d.session(json!({}));
    let err = view["error"].as_str().unwrap_or("");
    assert!(
        err.contains("\"token\"") && err.contains("envd") && err.contains("creds.json"),
        "{view}"
    );
    assert!(!view.to_string().contains(STORED) && !d.log().contains(STORED));
}

#[test]
fn creds_json_others_can_read_fails_preparation_with_the_fix_and_is_not_read() {
    let home = home_with(json!({"mcp": {"envd": {"token": STORED}}}), 0o644);
    let creds = home.path().join("creds.json");
    let d = Daemon::start_in(home, &[("ALBEDO_T_SECRET_VAR", FROM_ENV)]);
    let (_, view) = d.session(json!({}));
    let err = view["error"].as_str().unwrap_or("");
    assert!(
        err.contains(&creds.display().to_string())
            && err.contains("0644")
            && err.contains(&format!("chmod 600 {}", creds.display())),
        "{view}"
    );
    assert!(!view.to_string().contains(STORED) && !d.log().contains(STORED));
    // Fixed: the next session works.
    std::fs::set_permissions(&creds, std::fs::Permissions::from_mode(0o600)).unwrap();
    let (id, view) = d.session(json!({}));
    assert!(view["error"].is_null(), "{view}");
    let (st, r) = d.call(&id, "mcp__envd__echo", json!({"message": "ok"}));
    assert_eq!(st, 200, "{r}");
}
