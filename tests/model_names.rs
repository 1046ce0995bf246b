//! Tool names the model APIs accept (at most 64 of `[a-zA-Z0-9_-]`), through the daemon: a
//! long or oddly named tool is advertised under a stable short form, listed with its server
//! and original name, and callable both ways (advertised name and `server/tool`).

mod common;
use common::*;
use serde_json::json;

#[test]
fn long_and_dotted_tool_names_get_short_forms_that_call_the_original() {
    let dir = tempfile::tempdir().unwrap();
    let tools = dir.path().join("tools.json");
    let long = format!("search_{}", "x".repeat(80));
    std::fs::write(
        &tools,
        json!([
            {"name": long, "inputSchema": {"type": "object"}},
            {"name": "files.read", "inputSchema": {"type": "object"}},
        ])
        .to_string(),
    )
    .unwrap();
    let d = Daemon::start(json!({"enabled": {"mcp": true}, "mcp": {"servers": {
        "s": fixture_server("exits_mid_call.py", &["--tools-json", tools.to_str().unwrap()])}}}));
    let (id, _) = d.session(json!({}));
    let (_, listed) = d.get(&format!("/sessions/{id}/tools"));
    let all = listed["tools"].as_array().unwrap().clone();
    assert_eq!(all.len(), 2, "{listed}");
    for t in &all {
        let name = t["name"].as_str().unwrap();
        assert!(name.len() <= 64, "{name}");
        assert!(
            name.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-'),
            "{name}"
        );
        assert_eq!(t["server"], "s");
        let original = t["tool"].as_str().unwrap();
        // Called by its advertised name: the server gets its own name for the tool.
        let (st, r) = d.call(&id, name, json!({"k": 1}));
        assert_eq!(st, 200, "{name}: {r}");
        assert_eq!(r["content"][0]["text"], r#"{"k": 1}"#, "{r}");
        // And by `server/tool`, percent-encoded in the path.
        let path: String =
            url::form_urlencoded::byte_serialize(format!("s/{original}").as_bytes()).collect();
        let (st, r) = d.call(&id, &path, json!({"k": 2}));
        assert_eq!(st, 200, "{original}: {r}");
    }
    let originals: Vec<&str> = all.iter().map(|t| t["tool"].as_str().unwrap()).collect();
    assert!(originals.contains(&long.as_str()) && originals.contains(&"files.read"));
}
