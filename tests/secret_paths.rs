//! Every resolved secret value is scrubbed in one place (`protocol::text`) from every error,
//! warning, `last_error`, API answer and log line, on both transports: a server that echoes
//! the secret it was sent in a JSON-RPC error, in a failed handshake, or in an HTTP refusal,
//! and secrets shorter than 4 bytes. One test per path; each greps every output for the value.

mod common;
use common::*;
use serde_json::{json, Value};

/// What the daemon showed: the log, plus every answer the test collected.
fn assert_nowhere(d: &Daemon, answers: &[&Value], secrets: &[&str]) {
    let log = d.log();
    for s in secrets {
        assert!(!log.contains(s), "{s:?} is in the daemon's log");
        for a in answers {
            assert!(!a.to_string().contains(s), "{s:?} is in an answer: {a}");
        }
    }
    let ext = std::fs::read_to_string(d.home.path().join("extensions.json")).unwrap_or_default();
    for s in secrets {
        assert!(!ext.contains(s), "{s:?} is in extensions.json");
    }
}

fn leaky_stdio(extra: &[&str]) -> Value {
    let mut args = vec![fixture("leaky.py")];
    args.extend(extra.iter().map(|s| s.to_string()));
    json!({"type": "stdio", "command": venv_python(), "args": args,
           "env": {"LEAK": {"env": "ALBEDO_T_LEAK"}}})
}

const LONG: &str = "lk-9d1e77-never-print-me";
/// Shorter than 4 bytes: scrubbed all the same.
const SHORT: &str = "Zq7";

#[test]
fn stdio_a_secret_echoed_in_a_json_rpc_error_never_leaves_the_daemon() {
    for secret in [LONG, SHORT] {
        let d = Daemon::start_env(
            json!({"enabled": {"mcp": true}, "mcp": {"servers": {"s": leaky_stdio(&[])}}}),
            &[("ALBEDO_T_LEAK", secret)],
        );
        let (id, view) = d.session(json!({}));
        let (st, r) = d.call(&id, "mcp__s__leak", json!({}));
        assert_eq!(st, 502, "{r}");
        assert_eq!(r["outcome"], "error");
        assert!(
            r["error"]["message"]
                .as_str()
                .unwrap()
                .contains("[redacted]"),
            "{r}"
        );
        let (_, after) = d.get(&format!("/sessions/{id}"));
        assert_nowhere(&d, &[&view, &r, &after], &[secret]);
    }
}

#[test]
fn stdio_a_secret_in_a_failed_handshake_reaches_no_warning_last_error_or_log() {
    for secret in [LONG, SHORT] {
        let d = Daemon::start_env(
            json!({"enabled": {"mcp": true}, "mcp": {"servers": {"s": leaky_stdio(&["--fail-init"])}}}),
            &[("ALBEDO_T_LEAK", secret)],
        );
        let (id, view) = d.session(json!({}));
        assert_eq!(view["servers"][0]["state"], "left_out", "{view}");
        let w = view["warnings"].to_string();
        assert!(w.contains("[redacted]"), "{view}");
        // Control characters the server sent are gone from the warning too.
        assert!(!w.contains("\\u001b") && !w.contains("\\n"), "{w}");
        let (_, ev) = d.get(&format!("/sessions/{id}"));
        assert_nowhere(&d, &[&view, &ev], &[secret]);
    }
}

fn leaky_http(extra: &[&str]) -> HttpPeer {
    let mut args = vec![fixture("leaky_http.py"), "--port".into(), "0".into()];
    args.extend(extra.iter().map(|s| s.to_string()));
    HttpPeer::start(&venv_python(), &args)
}

#[test]
fn http_a_token_echoed_in_a_json_rpc_error_never_leaves_the_daemon() {
    for (token, key) in [(LONG, "k-ab12cd-never"), (SHORT, "Kq")] {
        let fx = leaky_http(&[]);
        let d = Daemon::start_env(
            json!({"enabled": {"mcp": true}, "mcp": {"servers": {"h": {
                "type": "http", "url": fx.url, "bearerTokenEnvVar": "ALBEDO_T_TOKEN",
                "headers": {"X-Api-Key": {"env": "ALBEDO_T_KEY"}}}}}}),
            &[("ALBEDO_T_TOKEN", token), ("ALBEDO_T_KEY", key)],
        );
        let (id, view) = d.session(json!({}));
        assert_eq!(view["servers"][0]["state"], "connected", "{view}");
        let (st, r) = d.call(&id, "mcp__h__leak", json!({}));
        assert_eq!(st, 502, "{r}");
        assert_eq!(r["outcome"], "error");
        assert_nowhere(&d, &[&view, &r], &[token, key]);
    }
}

#[test]
fn http_a_token_in_a_refusal_body_reaches_no_warning_or_log() {
    for (token, key) in [(LONG, "k-ab12cd-never"), (SHORT, "Kq")] {
        let fx = leaky_http(&["--fail-init"]);
        let d = Daemon::start_env(
            json!({"enabled": {"mcp": true}, "mcp": {"servers": {"h": {
                "type": "http", "url": fx.url, "bearerTokenEnvVar": "ALBEDO_T_TOKEN",
                "headers": {"X-Api-Key": {"env": "ALBEDO_T_KEY"}}}}}}),
            &[("ALBEDO_T_TOKEN", token), ("ALBEDO_T_KEY", key)],
        );
        let (id, view) = d.session(json!({}));
        assert_eq!(view["servers"][0]["state"], "left_out", "{view}");
        assert!(view["warnings"].to_string().contains("500"), "{view}");
        let (_, again) = d.get(&format!("/sessions/{id}"));
        assert_nowhere(&d, &[&view, &again], &[token, key]);
    }
}
