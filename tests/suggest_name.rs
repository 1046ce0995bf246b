//! `GET /settings/mcp/suggest-name`: a valid, free name from a URL's host or a command's
//! package, through the daemon (names already configured are taken).

mod common;
use common::*;
use serde_json::json;

fn q(key: &str, value: &str) -> String {
    let v: String = url::form_urlencoded::byte_serialize(value.as_bytes()).collect();
    format!("/settings/mcp/suggest-name?{key}={v}")
}

#[test]
fn names_are_suggested_from_urls_and_commands_and_never_taken() {
    let d = Daemon::start(json!({"mcp": {"servers": {
        "filesystem": fixture_server("exits_mid_call.py", &[])}}}));
    let cases = [
        ("url", "https://mcp.linear.app/sse", "linear"),
        ("command_line", "uvx mcp-server-git", "git"),
        // `filesystem` is configured already.
        (
            "command_line",
            "npx -y @modelcontextprotocol/server-filesystem \"/srv/my docs\"",
            "filesystem-2",
        ),
        (
            "command_line",
            "/usr/local/bin/docs-mcp --root /srv",
            "docs-mcp",
        ),
    ];
    for (key, value, want) in cases {
        let (st, v) = d.get(&q(key, value));
        assert_eq!(st, 200, "{value}: {v}");
        assert_eq!(v["name"], want, "{value}");
    }
    for path in [
        "/settings/mcp/suggest-name".to_owned(),
        q("url", "not a url"),
        q("command_line", "npx 'unclosed"),
        format!(
            "{}&url=https%3A%2F%2Fx.example%2F",
            q("command_line", "uvx a")
        ),
    ] {
        let (st, v) = d.get(&path);
        assert_eq!(st, 400, "{path}: {v}");
        assert_eq!(v["error"]["code"], "bad_request", "{v}");
    }
}
