//! Editor-supplied servers (the `editor-mcp` extension, issue 19), through the running daemon,
//! with real servers given as ACP v1 gives them (`mcpServers`: stdio with no `type`, `http`,
//! `sse`): their tools appear under `editor__<server>__<tool>` and calls work; a configured
//! server of the same name stays distinct; nothing about them reaches `creds.json`,
//! `extensions.json` or `albedo.db`; the daemon-wide default, the session's override and
//! hidden-but-discovered servers; a malformed entry refused naming it; a new list replaces the
//! old one, and an unknown session id (after a restart) is opened again with its list;
//! closing the session ends their processes; an env secret never reaches the log or an answer.

mod common;
use common::*;
use serde_json::{json, Value};
use std::time::Duration;

const ENV_SECRET: &str = "env-s3cr3t-7f3a9c";
const HEADER_SECRET: &str = "hdr-s3cr3t-41b2e8";

/// The Python `mcp` server over stdio, as ACP sends it (no `type`), with one env secret.
fn py_stdio(name: &str) -> Value {
    json!({"name": name, "command": venv_python(),
           "args": [server_script("py_mcp_server.py"), format!("marker-{name}")],
           "env": [{"name": "EDITOR_TOKEN", "value": ENV_SECRET}]})
}

fn tools(d: &Daemon, id: &str) -> Vec<Value> {
    let (st, v) = d.get(&format!("/sessions/{id}/tools"));
    assert_eq!(st, 200, "{v}");
    v["tools"].as_array().unwrap().clone()
}

fn tool<'a>(tools: &'a [Value], name: &str) -> &'a Value {
    tools
        .iter()
        .find(|t| t["name"] == name)
        .unwrap_or_else(|| panic!("no tool {name}: {tools:?}"))
}

fn server<'a>(view: &'a Value, name: &str) -> &'a Value {
    view["servers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == name)
        .unwrap_or_else(|| panic!("no server {name}: {view}"))
}

fn text(r: &Value) -> String {
    r["content"][0]["text"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

/// The daemon's descendants whose command line mentions `needle`.
fn running(d: &Daemon, needle: &str) -> Vec<i32> {
    descendants(d.pid() as i32)
        .into_iter()
        .filter(|p| cmdline(*p).iter().any(|a| a.contains(needle)))
        .collect()
}

fn contains(hay: &[u8], needle: &str) -> bool {
    hay.windows(needle.len()).any(|w| w == needle.as_bytes())
}

#[test]
fn editor_servers_work_stay_distinct_and_stay_in_memory() {
    let ev = HttpPeer::everything();
    let d = Daemon::start(json!({"enabled": {"mcp": true}, "mcp": {"servers": {
        "everything": {"type": "stdio", "command": "node", "args": [everything_js()]}
    }}}));
    let list = json!([
        {"name": "everything", "command": "node", "args": [everything_js()], "env": []},
        {"type": "http", "name": "ev_http", "url": ev.url,
         "headers": [{"name": "X-Editor-Key", "value": HEADER_SECRET}]},
        py_stdio("py_editor"),
        {"type": "sse", "name": "old_sse", "url": "http://127.0.0.1:9/sse", "headers": []}
    ]);
    let (id, view) = d.session(json!({"editor_mcp_servers": list}));
    assert_eq!(server(&view, "everything")["extension"], "mcp", "{view}");
    assert_eq!(server(&view, "everything")["state"], "connected", "{view}");
    for name in ["editor:everything", "editor:ev_http", "editor:py_editor"] {
        let s = server(&view, name);
        assert_eq!(s["extension"], "editor-mcp", "{view}");
        assert_eq!(s["state"], "connected", "{name}: {view}");
        assert_eq!(s["hidden"], false, "{view}");
    }
    // sse is refused per server, with a warning that says why.
    let sse = server(&view, "editor:old_sse");
    assert_eq!(sse["state"], "left_out", "{view}");
    assert!(sse["warning"].as_str().unwrap().contains("sse"), "{view}");
    assert_eq!(view["editor_mcp"]["enabled"], true, "{view}");
    assert_eq!(view["editor_mcp"]["transports"]["sse"], false, "{view}");
    assert_eq!(view["editor_mcp"]["transports"]["http"], true, "{view}");

    // The same name, two servers: each in its own namespace, marked with its extension.
    let ts = tools(&d, &id);
    assert_eq!(tool(&ts, "mcp__everything__echo")["extension"], "mcp");
    for name in [
        "editor__everything__echo",
        "editor__ev_http__echo",
        "editor__py_editor__echo",
    ] {
        assert_eq!(tool(&ts, name)["extension"], "editor-mcp", "{name}");
    }
    assert_eq!(
        tool(&ts, "editor__everything__echo")["server"],
        "editor:everything"
    );
    for name in [
        "mcp__everything__echo",
        "editor__everything__echo",
        "editor__ev_http__echo",
        "editor__py_editor__echo",
    ] {
        let (st, r) = d.call(&id, name, json!({"message": "hi"}));
        assert_eq!(st, 200, "{name}: {r}");
        assert!(text(&r).contains("hi"), "{name}: {r}");
    }
    // `server/tool` reaches an editor server too.
    let (st, r) = d.call(&id, "editor:py_editor%2Fadd", json!({"a": 2, "b": 3}));
    assert_eq!(st, 200, "{r}");
    // The env entry reached the stdio server.
    let (st, r) = d.call(&id, "editor__py_editor__process_info", json!({}));
    assert_eq!(st, 200, "{r}");
    assert!(text(&r).contains(ENV_SECRET), "{r}");

    // No secret in the session's view, its tool list or the daemon's log.
    let (_, view) = d.get(&format!("/sessions/{id}"));
    let (_, listed) = d.get(&format!("/sessions/{id}/tools"));
    let (_, settings) = d.get("/settings/mcp");
    for answer in [&view, &listed, &settings] {
        let s = answer.to_string();
        assert!(!s.contains(ENV_SECRET) && !s.contains(HEADER_SECRET), "{s}");
    }
    assert!(!settings.to_string().contains("py_editor"), "{settings}");

    // Nothing about them on disk: the settings files and the catalogue database (its WAL
    // too) hold no editor server's name or secret, while the configured server's catalogue
    // was saved.
    let home = d.home.path();
    let mut db = Vec::new();
    for f in ["albedo.db", "albedo.db-wal"] {
        db.extend(std::fs::read(home.join(f)).unwrap_or_default());
    }
    assert!(
        contains(&db, "everything"),
        "the configured server was saved"
    );
    for f in ["extensions.json", "creds.json"] {
        let bytes = std::fs::read(home.join(f)).unwrap_or_default();
        for needle in ["editor", "py_editor", "ev_http", ENV_SECRET, HEADER_SECRET] {
            assert!(!contains(&bytes, needle), "{f} holds {needle:?}");
        }
    }
    for needle in [
        "editor:",
        "editor__",
        "py_editor",
        "ev_http",
        ENV_SECRET,
        HEADER_SECRET,
    ] {
        assert!(!contains(&db, needle), "albedo.db holds {needle:?}");
    }

    // Closing the session ends their processes.
    assert!(!running(&d, "py_mcp_server.py").is_empty());
    assert_eq!(d.delete(&format!("/sessions/{id}")), 204);
    assert!(
        wait_until(Duration::from_secs(15), || running(&d, "py_mcp_server.py")
            .is_empty()
            && running(&d, "server-everything").is_empty()),
        "editor servers outlived their session"
    );
    let log = d.log();
    assert!(!log.contains(ENV_SECRET) && !log.contains(HEADER_SECRET));
}

#[test]
fn the_default_the_session_override_and_hidden_but_discovered() {
    let d = Daemon::start(json!({"enabled": {"editor-mcp": false}}));
    let list = json!([py_stdio("py")]);
    // Off by default: discovered, connected, hidden.
    let (id, view) = d.session(json!({"editor_mcp_servers": list}));
    assert_eq!(view["editor_mcp"]["enabled"], false, "{view}");
    let s = server(&view, "editor:py");
    assert_eq!(s["state"], "connected", "{view}");
    assert_eq!(s["hidden"], true, "{view}");
    assert!(tools(&d, &id).is_empty());
    let (st, _) = d.call(&id, "editor__py__echo", json!({"message": "x"}));
    assert_eq!(st, 404);
    // The session's own choice overrides the default, both ways.
    let (id2, view) =
        d.session(json!({"extensions": {"editor-mcp": true}, "editor_mcp_servers": list}));
    assert_eq!(view["editor_mcp"]["enabled"], true, "{view}");
    assert_eq!(
        tool(&tools(&d, &id2), "editor__py__echo")["extension"],
        "editor-mcp"
    );
    let (st, v) = d.put(
        &format!("/sessions/{id}/extensions/editor-mcp"),
        json!({"enabled": true}),
    );
    assert_eq!(st, 200, "{v}");
    let (st, r) = d.call(&id, "editor__py__echo", json!({"message": "back"}));
    assert_eq!(st, 200, "{r}");
    let (st, v) = d.put(
        &format!("/sessions/{id2}/extensions/editor-mcp"),
        json!({"enabled": false}),
    );
    assert_eq!(st, 200, "{v}");
    assert_eq!(server(&v, "editor:py")["hidden"], true, "{v}");
    assert!(tools(&d, &id2).is_empty());
}

#[test]
fn a_malformed_entry_is_refused_naming_it() {
    let d = Daemon::start(json!({}));
    let list = json!([
        py_stdio("fine"),
        {"name": "broken", "command": "/bin/true", "args": [], "env": {"K": "leaky-value-93"}}
    ]);
    let (st, v) = d.post("/sessions", json!({"editor_mcp_servers": list}));
    assert_eq!(st, 400, "{v}");
    let msg = v["error"]["message"].as_str().unwrap();
    assert!(
        msg.contains("editor_mcp_servers[1]") && msg.contains("broken"),
        "{v}"
    );
    assert!(!v.to_string().contains("leaky-value-93"), "{v}");
    // A list of the wrong shape is refused without quoting it.
    let (st, v) = d.post("/sessions", json!({"editor_mcp_servers": "leaky-value-93"}));
    assert_eq!(st, 400, "{v}");
    assert!(!v.to_string().contains("leaky-value-93"), "{v}");
    // An unknown transport is refused too.
    let (st, v) = d.post(
        "/sessions",
        json!({"editor_mcp_servers": [{"type": "websocket", "name": "ws", "url": "ws://x"}]}),
    );
    assert_eq!(st, 400, "{v}");
    assert!(
        v["error"]["message"].as_str().unwrap().contains("ws"),
        "{v}"
    );
    let (id, _) = d.session(json!({}));
    let (st, v) = d.put(
        &format!("/sessions/{id}/editor-mcp-servers"),
        json!([{"name": "nocmd", "args": [], "env": []}]),
    );
    assert_eq!(st, 400, "{v}");
    assert!(
        v["error"]["message"].as_str().unwrap().contains("nocmd"),
        "{v}"
    );
}

#[test]
fn a_new_list_replaces_the_old_and_an_unknown_id_is_opened_again() {
    let d = Daemon::start(json!({}));
    let (id, _) = d.session(json!({"editor_mcp_servers": [py_stdio("first")]}));
    assert!(!running(&d, "marker-first").is_empty());
    assert!(d
        .tool_names(&id)
        .contains(&"editor__first__echo".to_owned()));
    // The list in each call is the whole set (ACP load/resume).
    let (st, v) = d.put(
        &format!("/sessions/{id}/editor-mcp-servers"),
        json!([py_stdio("second")]),
    );
    assert_eq!(st, 200, "{v}");
    let names = d.tool_names(&id);
    assert!(
        names.contains(&"editor__second__echo".to_owned()),
        "{names:?}"
    );
    assert!(
        !names.iter().any(|n| n.starts_with("editor__first__")),
        "{names:?}"
    );
    assert!(
        wait_until(Duration::from_secs(15), || running(&d, "marker-first")
            .is_empty()),
        "the replaced server's process did not end"
    );
    // A daemon that restarted does not know the session: the editor's load/resume opens it
    // again under its id, with its list.
    let (st, v) = d.put(
        "/sessions/s7-0badcafe/editor-mcp-servers",
        json!([py_stdio("again")]),
    );
    assert_eq!(st, 201, "{v}");
    assert_eq!(v["id"], "s7-0badcafe");
    let (st, r) = d.call(
        "s7-0badcafe",
        "editor__again__echo",
        json!({"message": "m"}),
    );
    assert_eq!(st, 200, "{r}");
}

#[test]
fn the_daemon_wide_default_is_switched_through_the_api_and_live_sessions_follow_it() {
    let d = Daemon::start(json!({}));
    let (st, v) = d.get("/extensions");
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["editor-mcp"]["enabled"], true, "{v}");
    assert!(
        v["extensions"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["name"] == "editor-mcp" && e["enabled"] == true),
        "{v}"
    );
    let list = json!([py_stdio("py")]);
    // One session follows the default, one has its own choice (on).
    let (follows, _) = d.session(json!({"editor_mcp_servers": list}));
    let (own, _) =
        d.session(json!({"extensions": {"editor-mcp": true}, "editor_mcp_servers": list}));
    assert_eq!(tools(&d, &follows).len(), tools(&d, &own).len());

    let (st, v) = d.put("/extensions/editor-mcp", json!({"enabled": false}));
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["editor-mcp"]["enabled"], false, "{v}");
    assert_eq!(v["errors"], json!([]), "{v}");
    // Written to extensions.json, the mcp default untouched; GET /extensions says so.
    let ext: Value =
        serde_json::from_slice(&std::fs::read(d.home.path().join("extensions.json")).unwrap())
            .unwrap();
    assert_eq!(ext["enabled"]["editor-mcp"], false, "{ext}");
    assert_eq!(d.get("/extensions").1["editor-mcp"]["enabled"], false);
    // The following session hides its editor servers (still connected); the other keeps them.
    assert!(tools(&d, &follows).is_empty());
    let (_, view) = d.get(&format!("/sessions/{follows}"));
    assert_eq!(server(&view, "editor:py")["hidden"], true, "{view}");
    assert_eq!(server(&view, "editor:py")["state"], "connected", "{view}");
    let (st, r) = d.call(&own, "editor__py__echo", json!({"message": "still"}));
    assert_eq!(st, 200, "{r}");
    // A new session starts with the new default.
    let (fresh, view) = d.session(json!({"editor_mcp_servers": list}));
    assert_eq!(view["editor_mcp"]["enabled"], false, "{view}");
    assert!(tools(&d, &fresh).is_empty());
    // Back on: the following sessions show them again.
    let (st, v) = d.put("/extensions/editor-mcp", json!({"enabled": true}));
    assert_eq!(st, 200, "{v}");
    let (st, r) = d.call(&follows, "editor__py__echo", json!({"message": "back"}));
    assert_eq!(st, 200, "{r}");
    // A body that is not {"enabled": bool} changes nothing.
    let (st, _) = d.put("/extensions/editor-mcp", json!({"enabled": "no"}));
    assert_eq!(st, 400);
    assert_eq!(d.get("/extensions").1["editor-mcp"]["enabled"], true);
}
