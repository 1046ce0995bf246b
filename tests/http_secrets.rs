//! Credentials from the environment for HTTP servers: `bearerTokenEnvVar` and `headers` read
//! the daemon's variables and go to the server, a missing one fails preparation naming it, and
//! no secret value reaches a log line, an error, or an API response.

mod common;
use common::*;
use serde_json::json;

const TOKEN: &str = "tok-3f9a1c-never-print-me";
const KEY: &str = "key-77b2e0-never-print-me";

#[test]
fn http_credentials_are_sent_and_never_shown() {
    let (fx, log) = http_faults(&[]);
    let closed = free_port();
    let d = Daemon::start_env(
        json!({"enabled": {"mcp": true}, "mcp": {"servers": {
            "f": {"type": "http", "url": fx.url,
                  "bearerTokenEnvVar": "ALBEDO_T_TOKEN", "headers": {"X-Api-Key": {"env": "ALBEDO_T_KEY"}}},
            "gone": {"type": "http", "url": format!("http://127.0.0.1:{closed}/mcp"),
                     "bearerTokenEnvVar": "ALBEDO_T_TOKEN"}
        }}}),
        &[("ALBEDO_T_TOKEN", TOKEN), ("ALBEDO_T_KEY", KEY)],
    );
    let (id, view) = d.session(json!({}));
    let (st, r) = d.call(&id, "mcp__f__echo", json!({"message": "hi"}));
    assert_eq!(st, 200, "{r}");
    // The server received both credentials on every request.
    let reqs = logged(&log);
    assert!(!reqs.is_empty());
    for r in reqs.iter().filter(|r| r["method"] == "POST") {
        assert_eq!(r["authorization"], format!("Bearer {TOKEN}"), "{r}");
        assert_eq!(r["x_api_key"], KEY, "{r}");
    }
    // The unreachable one is left out with a warning, and nothing anywhere shows a secret.
    assert!(view["warnings"].to_string().contains("gone"), "{view}");
    let mut seen = vec![view.to_string(), r.to_string()];
    seen.push(d.get(&format!("/sessions/{id}")).1.to_string());
    seen.push(d.get(&format!("/sessions/{id}/tools")).1.to_string());
    seen.push(d.call(&id, "mcp__f__nope", json!({})).1.to_string());
    seen.push(d.get("/extensions").1.to_string());
    drop(fx);
    // A call to a server that went away: the error says so, without the secret.
    let (st, r) = d.call(&id, "mcp__f__echo", json!({"message": "after"}));
    assert!(st >= 500, "{r}");
    seen.push(r.to_string());
    seen.push(d.log());
    seen.push(std::fs::read_to_string(d.home.path().join("extensions.json")).unwrap());
    for s in &seen {
        assert!(
            !s.contains(TOKEN) && !s.contains(KEY),
            "a secret leaked: {s}"
        );
    }
}

#[test]
fn a_missing_credential_variable_fails_preparation_naming_it() {
    let d = Daemon::start(json!({"enabled": {"mcp": true}, "mcp": {"servers": {
        "s": {"type": "http", "url": "http://127.0.0.1:9/mcp", "headers": {"X-Api-Key": {"env": "ALBEDO_T_ABSENT"}}}}}}));
    let (_, view) = d.session(json!({}));
    let err = view["error"].as_str().unwrap_or("");
    assert!(
        err.contains("ALBEDO_T_ABSENT") && err.contains("\"s\""),
        "{view}"
    );
}
