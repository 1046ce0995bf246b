//! Real stdio peers through the daemon's HTTP API: server-everything, server-filesystem, a
//! Python `mcp` SDK server and a paginating FastMCP server.

mod common;
use common::*;
use serde_json::{json, Value};

fn everything() -> Value {
    json!({"type": "stdio", "command": "node", "args": [everything_js()]})
}

#[test]
fn real_stdio_servers_end_to_end() {
    let docs = tempfile::tempdir().unwrap();
    std::fs::write(docs.path().join("hello.txt"), "hello from the filesystem").unwrap();
    let d = Daemon::start(json!({
        "enabled": {"mcp": true},
        "mcp": {"servers": {
            "everything": everything(),
            "fs": {"type": "stdio", "command": "node",
                   "args": [filesystem_js(), docs.path().display().to_string()],
                   "disabledTools": ["write_file"]},
            "py": {"type": "stdio", "command": venv_python(),
                   "args": [server_script("py_mcp_server.py"), "--transport", "stdio"]},
            "tsv1": {"type": "stdio", "command": "node",
                   "args": [server_script("ts_v1_server.cjs"), peers().join("npm/node_modules").display().to_string()]},
            "paged": {"type": "stdio", "command": venv_python(),
                      "args": [server_script("fastmcp_paged.py"), "--transport", "stdio", "--page-size", "5"]}
        }}
    }));
    let (id, view) = d.session(json!({}));
    assert!(view["warnings"].as_array().unwrap().is_empty(), "{view}");
    let names = d.tool_names(&id);
    for n in [
        "mcp__everything__echo",
        "mcp__everything__get-sum",
        "mcp__everything__read_resource",
        "mcp__everything__get_prompt",
        "mcp__fs__read_text_file",
        "mcp__py__echo",
        "mcp__py__probe_client",
        "mcp__paged__t00",
        "mcp__paged__t24",
    ] {
        assert!(names.contains(&n.to_owned()), "{n} missing from {names:?}");
    }
    // Filtered by disabledTools.
    assert!(!names.contains(&"mcp__fs__write_file".to_owned()));
    // Pagination followed: all 25 tools over 5 pages.
    assert_eq!(
        names
            .iter()
            .filter(|n| n.starts_with("mcp__paged__t"))
            .count(),
        25
    );

    let (st, r) = d.call(&id, "mcp__everything__echo", json!({"message": "hi"}));
    assert_eq!(st, 200, "{r}");
    assert_eq!(r["content"][0]["text"], "Echo: hi");
    let (st, r) = d.call(&id, "mcp__everything__get-sum", json!({"a": 2, "b": 3}));
    assert_eq!(st, 200, "{r}");
    assert_eq!(r["content"][0]["text"], "The sum of 2 and 3 is 5.", "{r}");
    // Arguments go to the server as the caller wrote them, unparsed: pretty-printed over
    // several lines (CRLF too), they still reach a stdio server as one message, and a
    // string's escaped line break stays one.
    let raw = |tool: &str, body: &str| {
        let r = d
            .request("POST", &format!("/sessions/{id}/tools/{tool}/call"))
            .set("Content-Type", "application/json")
            .send_bytes(body.as_bytes())
            .unwrap();
        r.into_json::<Value>().unwrap()
    };
    let r = raw(
        "mcp__everything__echo",
        "{\"arguments\": {\r\n  \"message\": \"one\\ntwo \\u00e9\"\r\n}\n}",
    );
    assert_eq!(r["content"][0]["text"], "Echo: one\ntwo \u{e9}", "{r}");
    let r = raw(
        "mcp__everything__get-sum",
        "{\"arguments\":\n{\n \"a\": 2,\n \"b\":\t3\n}\n}",
    );
    assert_eq!(r["content"][0]["text"], "The sum of 2 and 3 is 5.", "{r}");
    let r = raw(
        "mcp__py__echo",
        "{\"arguments\": {\n\"message\": \"a\\\"b\"\n}}",
    );
    assert_eq!(r["content"][0]["text"], "a\"b", "{r}");
    // `server/tool` also names a tool.
    let (st, _) = d.call(&id, "everything%2Fecho", json!({"message": "x"}));
    assert_eq!(st, 200);

    // A resource read and a prompt fetched.
    let (st, r) = d.call(
        &id,
        "mcp__everything__read_resource",
        json!({"uri": "demo://resource/static/document/architecture.md"}),
    );
    assert_eq!(st, 200, "{r}");
    assert!(r["contents"][0]["text"].as_str().is_some(), "{r}");
    let (st, r) = d.call(
        &id,
        "mcp__everything__get_prompt",
        json!({"name": "simple-prompt"}),
    );
    assert_eq!(st, 200, "{r}");
    assert!(
        r["messages"].as_array().is_some_and(|m| !m.is_empty()),
        "{r}"
    );

    let (st, r) = d.call(
        &id,
        "mcp__fs__read_text_file",
        json!({"path": docs.path().join("hello.txt").display().to_string()}),
    );
    assert_eq!(st, 200, "{r}");
    assert!(r["content"][0]["text"]
        .as_str()
        .unwrap()
        .contains("hello from the filesystem"));

    // The server's own requests (a TypeScript SDK v1 server): ping answered, roots/list
    // refused with Method not found.
    let (st, r) = d.call(&id, "mcp__tsv1__probe_client", json!({}));
    assert_eq!(st, 200, "{r}");
    let text = r["content"][0]["text"].as_str().unwrap_or("");
    assert!(text.contains("ping: result {}"), "{text}");
    assert!(text.contains("roots/list: error -32601"), "{text}");

    // A tool-reported error comes back as the server sent it.
    let (st, r) = d.call(&id, "mcp__paged__t03", json!({}));
    assert_eq!(st, 200, "{r}");
    assert_eq!(r["isError"], true, "{r}");

    // The session view shows each server's era and protocol version.
    let (_, v) = d.get(&format!("/sessions/{id}"));
    let servers = v["servers"].as_array().unwrap();
    let ev = servers.iter().find(|s| s["name"] == "everything").unwrap();
    assert_eq!(ev["state"], "connected", "{v}");
    assert_eq!(ev["era"], "legacy", "{v}");
    assert_eq!(ev["protocol_version"], "2025-11-25", "{v}");
    let py = servers.iter().find(|s| s["name"] == "py").unwrap();
    assert_eq!(py["era"], "modern", "{v}");
    assert_eq!(py["protocol_version"], "2026-07-28", "{v}");
    let pyl = servers.iter().find(|s| s["name"] == "tsv1").unwrap();
    assert_eq!(pyl["era"], "legacy", "{v}");

    // Unknown tools and a bad body are clear errors that say nothing ran.
    let (st, r) = d.call(&id, "mcp__nope__x", json!({}));
    assert_eq!(st, 404);
    assert_eq!(r["outcome"], "not_run");
    assert_eq!(d.delete(&format!("/sessions/{id}")), 204);
}
