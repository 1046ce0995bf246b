//! Discovery against a hostile server: one deadline for the whole discovery (not one per
//! page), one byte budget across every page (the 8 MiB catalogue limit, checked as pages
//! arrive), and a background rediscovery over the limit keeps the catalogue the session has.

mod common;
use common::*;
use serde_json::{json, Value};
use std::path::Path;
use std::time::Duration;

fn pager(log: &Path, extra: &[&str]) -> Value {
    let mut args = vec!["--log", log.to_str().unwrap()];
    args.extend_from_slice(extra);
    fixture_server("hostile_pager.py", &args)
}

fn lists(log: &Path) -> usize {
    logged(log)
        .iter()
        .filter(|m| m["method"] == "tools/list")
        .count()
}

#[test]
fn a_server_that_pages_slowly_for_ever_gets_one_deadline_for_the_whole_discovery() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("log");
    let mut server = pager(&log, &["--delay-ms", "100"]);
    server["startupTimeoutMs"] = json!(1500);
    let d = Daemon::start(json!({"enabled": {"mcp": true}, "mcp": {"servers": {"p": server}}}));
    let (_, v) = d.session(json!({}));
    assert_eq!(v["servers"][0]["state"], "left_out", "{v}");
    assert!(
        v["warnings"]
            .to_string()
            .contains("did not finish within 1500 ms"),
        "{v}"
    );
    // 1.5 s at 100 ms a page: about 15 pages, never the 100 a per-page timeout allowed.
    let n = lists(&log);
    assert!((2..=20).contains(&n), "{n} pages were asked for");
}

#[test]
fn a_catalogue_that_grows_past_the_limit_is_stopped_while_reading() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("log");
    // 1 MiB a page, for ever: the 8 MiB limit stops it after 9 pages, not 100.
    let server = pager(&log, &["--page-bytes", "1048576"]);
    let d = Daemon::start(json!({"enabled": {"mcp": true}, "mcp": {"servers": {"p": server}}}));
    let (_, v) = d.session(json!({}));
    let err = v["error"].as_str().unwrap_or("");
    assert!(err.contains("limit") && err.contains("\"p\""), "{v}");
    let n = lists(&log);
    assert!((8..=10).contains(&n), "{n} pages were read");
    let rss = std::fs::read_to_string(format!("/proc/{}/status", d.pid()))
        .unwrap()
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .and_then(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
        .unwrap();
    // The daemon never held 100 MiB of pages: well under that (in KiB).
    assert!(rss < 80 * 1024, "daemon RSS {rss} KiB");
}

#[test]
fn a_background_rediscovery_over_the_limit_keeps_the_old_catalogue_with_a_warning() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("log");
    let server = pager(&log, &["--page-bytes", "1048576", "--grow-after-call"]);
    let d = Daemon::start(json!({"enabled": {"mcp": true}, "mcp": {"servers": {"p": server}}}));
    let (id, _) = d.session(json!({}));
    let before = d.tool_names(&id);
    assert!(before.contains(&"mcp__p__grow".to_owned()), "{before:?}");
    let (st, v) = d.call(&id, "mcp__p__grow", json!({}));
    assert_eq!(st, 200, "{v}");
    // list_changed: a background discovery that passes the limit.
    assert!(wait_until(Duration::from_secs(20), || {
        let (_, v) = d.get(&format!("/sessions/{id}"));
        v["warnings"].to_string().contains("over the")
    }));
    let (_, a) = d.post(
        &format!("/sessions/{id}/activity"),
        json!({"kind": "turn_end"}),
    );
    assert_eq!(a["refresh"], false, "{a}");
    assert_eq!(
        d.tool_names(&id),
        before,
        "the session advertises what it had"
    );
    let (st, v) = d.call(&id, "mcp__p__echo", json!({"message": "still"}));
    assert_eq!(st, 200, "{v}");
    // A new session uses the saved (old) catalogue: the big one was never saved.
    let (id2, _) = d.session(json!({}));
    assert_eq!(d.tool_names(&id2), before);
}
