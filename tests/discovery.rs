//! Discovery's bounds through the daemon's HTTP API, with fixtures for what no real server does
//! on demand: a tool list that pages forever (followed for 100 pages, then the session opens
//! with what it has and the daemon warns), and a burst of `tools/list_changed` while a
//! discovery is in flight (one discovery at a time, and exactly one more for the burst).

mod common;
use common::*;
use serde_json::json;
use std::path::Path;
use std::time::Duration;

fn tools_lists(log: &Path) -> usize {
    logged(log)
        .iter()
        .filter(|m| m["method"] == "tools/list")
        .count()
}

#[test]
fn a_tool_list_that_never_ends_is_followed_for_100_pages() {
    let tmp = tempfile::tempdir().unwrap();
    let log = tmp.path().join("pages.log");
    let d = Daemon::start(json!({"enabled": {"mcp": true}, "mcp": {"servers": {
        "endless": fixture_server("endless_pages.py", &["--log", log.to_str().unwrap()])}}}));
    // Opening the session does not hang (the API waits at most 120 s, the server's
    // startupTimeoutMs 30 s).
    let (id, view) = d.session(json!({}));
    assert!(view["error"].is_null(), "{view}");
    assert_eq!(tools_lists(&log), 100);
    // The 100th page asked for carried the 99th cursor.
    let last = logged(&log)
        .into_iter()
        .rfind(|m| m["method"] == "tools/list")
        .unwrap();
    assert_eq!(last["params"]["cursor"], "c99", "{last}");
    // What the 100 pages held is advertised, and nothing more was asked for.
    let names = d.tool_names(&id);
    let paged = names
        .iter()
        .filter(|n| n.starts_with("mcp__endless__p"))
        .count();
    assert_eq!(paged, 100, "{names:?}");
    assert!(names.contains(&"mcp__endless__p099".to_owned()));
    assert!(!names.contains(&"mcp__endless__p100".to_owned()));
    let (st, r) = d.call(&id, "mcp__endless__echo", json!({"message": "still here"}));
    assert_eq!(st, 200, "{r}");
    assert_eq!(tools_lists(&log), 100);
    // The session says the list was cut, and so does the daemon's log.
    assert!(
        view["warnings"].to_string().contains("cut after 100 pages"),
        "{view}"
    );
    assert!(
        d.log()
            .contains("stopped following nextCursor after 100 pages"),
        "{}",
        d.log()
    );
}

#[test]
fn a_burst_of_list_changed_during_a_discovery_runs_exactly_one_more() {
    let tmp = tempfile::tempdir().unwrap();
    let log = tmp.path().join("burst.log");
    let d = Daemon::start(json!({"enabled": {"mcp": true}, "mcp": {"servers": {
        "b": fixture_server("list_changed_burst.py", &["--log", log.to_str().unwrap()])}}}));
    let (id, _) = d.session(json!({}));
    let before = tools_lists(&log);
    assert_eq!(before, 1, "the discovery of the preparation");

    // One list_changed starts a discovery; five more arrive while its tools/list is held.
    let (st, r) = d.call(&id, "mcp__b__burst", json!({"n": 5}));
    assert_eq!(st, 200, "{r}");
    assert_eq!(r["content"][0]["text"], "armed 5", "{r}");
    assert!(
        wait_until(Duration::from_secs(10), || tools_lists(&log) >= before + 2),
        "no discovery after the burst: {} tools/list",
        tools_lists(&log)
    );
    // Nothing more follows: one discovery for the first change, one for the whole burst.
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(tools_lists(&log), before + 2, "{:?}", logged(&log));
    // (A discovery per notification would have asked 6 times; none for the burst, once.)
    let (st, r) = d.call(&id, "mcp__b__echo", json!({"message": "after"}));
    assert_eq!(st, 200, "{r}");
}
