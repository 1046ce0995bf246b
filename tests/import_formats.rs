//! `albedo-mcp mcp import`: each format read from a real-shaped file in
//! tests/fixtures/import/ into the exact `PATCH /settings/mcp` body (secrets in `secrets`,
//! never in `servers`), names made valid and free, and notes for what is not carried over;
//! no output shows a secret; and `run` without a daemon exits 2.

use albedo_mcp::cli::import::{plan, run, Format, ImportError, ImportPlan, SECRET_SHOWN};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/import")
}

fn import(rel: &str, taken: &[&str]) -> ImportPlan {
    let path = fixtures().join(rel);
    let text = std::fs::read_to_string(&path).expect("fixture");
    let taken: Vec<String> = taken.iter().map(|s| s.to_string()).collect();
    plan(&text, &path, &taken).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

fn names(p: &ImportPlan) -> Vec<(String, String)> {
    p.added
        .iter()
        .map(|a| (a.original.clone(), a.name.clone()))
        .collect()
}

fn pairs(v: &[(&str, &str)]) -> Vec<(String, String)> {
    v.iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect()
}

fn has_note(p: &ImportPlan, parts: &[&str]) -> bool {
    p.notes
        .iter()
        .any(|n| parts.iter().all(|part| n.contains(part)))
}

/// Every string of `secrets` in the patch, and what the plan shows (dry-run JSON and text)
/// contains none of them.
fn assert_no_secret_shown(p: &ImportPlan) {
    let mut values = Vec::new();
    fn walk(v: &Value, key: &str, out: &mut Vec<String>) {
        match v {
            Value::String(s) if key != "name" => out.push(s.clone()),
            Value::Object(m) => m.iter().for_each(|(k, v)| walk(v, k, out)),
            _ => {}
        }
    }
    walk(&p.patch["secrets"], "", &mut values);
    let shown = format!(
        "{}\n{}\n{}",
        p.to_json(),
        p.describe(Path::new("file"), true),
        p.notes.join("\n")
    );
    for v in &values {
        assert!(!shown.contains(v.as_str()), "{v:?} is shown:\n{shown}");
    }
    // And no secret is in the servers' fields.
    let servers = p.patch["servers"].to_string();
    for v in &values {
        assert!(!servers.contains(v.as_str()), "{v:?} is in servers");
    }
    if !values.is_empty() {
        assert!(p.to_json().to_string().contains(SECRET_SHOWN));
    }
}

#[test]
fn claude_desktop_literal_env_values_are_secrets_and_a_taken_name_gets_a_suffix() {
    let p = import("claude_desktop_config.json", &["github"]);
    assert_eq!(p.format, Format::ClaudeDesktop);
    assert_eq!(
        p.patch,
        json!({
            "servers": {
                "brave-search": {
                    "type": "stdio", "command": "npx",
                    "args": ["-y", "@modelcontextprotocol/server-brave-search"],
                    "env": {"BRAVE_API_KEY": {"secret": "env.BRAVE_API_KEY"}}
                },
                "filesystem": {
                    "type": "stdio", "command": "npx",
                    "args": ["-y", "@modelcontextprotocol/server-filesystem",
                             "/Users/alice/Desktop", "/Users/alice/Downloads"]
                },
                "github-2": {
                    "type": "stdio", "command": "npx",
                    "args": ["-y", "@modelcontextprotocol/server-github"],
                    "env": {"GITHUB_PERSONAL_ACCESS_TOKEN":
                            {"secret": "env.GITHUB_PERSONAL_ACCESS_TOKEN"}}
                }
            },
            "secrets": {
                "brave-search": {"env": {"BRAVE_API_KEY": "BSA-fixture-key-0002"}},
                "github-2": {"env": {"GITHUB_PERSONAL_ACCESS_TOKEN": "ghp_desktopFixtureToken0001"}}
            }
        })
    );
    assert_eq!(
        names(&p),
        pairs(&[
            ("Brave Search", "brave-search"),
            ("filesystem", "filesystem"),
            ("github", "github-2")
        ])
    );
    assert!(has_note(&p, &["\"github\" is taken", "github-2"]));
    assert!(p.skipped.is_empty());
    assert_eq!(
        p.added[0].secrets,
        vec!["env BRAVE_API_KEY".to_owned()],
        "secrets are listed by name"
    );
    assert_no_secret_shown(&p);
}

#[test]
fn claude_code_variables_become_references_and_inline_values_secrets() {
    let p = import(".mcp.json", &[]);
    assert_eq!(p.format, Format::ClaudeCode);
    assert_eq!(
        p.patch,
        json!({
            "servers": {
                "linear": {"type": "http", "url": "https://mcp.linear.app/sse"},
                "notion": {"type": "http", "url": "https://mcp.notion.com/mcp"},
                "postgres": {
                    "type": "stdio", "command": "npx",
                    "args": ["-y", "@modelcontextprotocol/server-postgres",
                             "postgresql://localhost/app"],
                    "env": {
                        "PGPASSWORD": {"env": "PGPASSWORD"},
                        "PGUSER": {"env": "PGUSER"},
                        "SENTRY_TOKEN": {"secret": "env.SENTRY_TOKEN"}
                    }
                }
            },
            "secrets": {
                "notion": {"bearer_token": "ntn_inlineFixture0004"},
                "postgres": {"env": {"SENTRY_TOKEN": "sntrys_inlineFixture0003"}}
            }
        })
    );
    // A variable in the URL cannot be carried over: the server is skipped, said why.
    assert_eq!(p.skipped.len(), 1);
    assert_eq!(p.skipped[0].name, "api-server");
    assert!(
        p.skipped[0].reason.contains("API_BASE_URL"),
        "{:?}",
        p.skipped
    );
    assert!(has_note(&p, &["\"linear\"", "SSE", "streamable HTTP"]));
    assert!(has_note(&p, &["PGUSER", "default"]));
    assert_no_secret_shown(&p);
}

#[test]
fn cursor_headers_one_secret_header_the_rest_noted_and_the_workspace_resolved() {
    let p = import("cursor/.cursor/mcp.json", &[]);
    assert_eq!(p.format, Format::Cursor);
    let ws = fixtures().join("cursor");
    assert_eq!(
        p.patch,
        json!({
            "servers": {
                "context7": {
                    "type": "http", "url": "https://mcp.context7.com/mcp",
                    "headers": {
                        "CONTEXT7_API_KEY": {"secret": "header"},
                        "X-Trace": {"env": "TRACE_ID"}
                    }
                },
                "docs": {
                    "type": "stdio", "command": "node",
                    "args": [format!("{}/tools/docs-server.js", ws.display())],
                    "env": {"DOCS_TOKEN": {"env": "DOCS_TOKEN"}}
                },
                "sentry": {"type": "http", "url": "https://mcp.sentry.dev/mcp"}
            },
            "secrets": {
                "context7": {"header": {"name": "CONTEXT7_API_KEY", "value": "ctx7sk-fixture-0005"}}
            }
        })
    );
    // The second literal header is left out, named, its value never shown.
    assert!(has_note(&p, &["X-Team", "one header secret"]));
    assert!(!p.notes.join("\n").contains("platform-fixture-0006"));
    assert!(!p.to_json().to_string().contains("platform-fixture-0006"));
    assert_no_secret_shown(&p);
}

#[test]
fn vscode_inputs_are_noted_by_description_env_files_noted_and_the_workspace_resolved() {
    let p = import("project/.vscode/mcp.json", &[]);
    assert_eq!(p.format, Format::VsCode);
    let ws = fixtures().join("project").display().to_string();
    assert_eq!(
        p.patch,
        json!({
            "servers": {
                "Perplexity": {
                    "type": "stdio", "command": "npx", "args": ["-y", "server-perplexity-ask"]
                },
                "fetch": {"type": "stdio", "command": "uvx", "args": ["mcp-server-fetch"]},
                "github": {
                    "type": "http", "url": "https://api.githubcopilot.com/mcp/",
                    "bearerTokenEnvVar": "GITHUB_TOKEN"
                },
                "workspace-files": {
                    "type": "stdio", "command": "npx",
                    "args": ["-y", "@modelcontextprotocol/server-filesystem", ws],
                    "cwd": ws
                }
            },
            "secrets": {}
        })
    );
    assert!(has_note(
        &p,
        &["PERPLEXITY_API_KEY", "\"Perplexity API Key\"", "input"]
    ));
    assert!(has_note(&p, &["\"fetch\"", "envFile"]));
    assert!(p.skipped.is_empty());
    assert_no_secret_shown(&p);
}

#[test]
fn vscode_workspace_folder_unknown_outside_a_workspace_skips_the_server() {
    let text = std::fs::read_to_string(fixtures().join("project/.vscode/mcp.json")).unwrap();
    let p = plan(&text, Path::new("/tmp/elsewhere/mcp.json"), &[]).unwrap();
    let s = p
        .skipped
        .iter()
        .find(|s| s.name == "workspace-files")
        .expect("skipped");
    assert!(s.reason.contains("workspaceFolder"), "{}", s.reason);
}

#[test]
fn vscode_user_settings_with_comments_and_trailing_commas() {
    let p = import("settings.json", &[]);
    assert_eq!(p.format, Format::VsCodeSettings);
    assert_eq!(
        p.patch,
        json!({
            "servers": {
                "memory": {
                    "type": "stdio", "command": "npx",
                    "args": ["-y", "@modelcontextprotocol/server-memory"],
                    "env": {"MEMORY_FILE_PATH": {"secret": "env.MEMORY_FILE_PATH"}}
                },
                "time": {
                    "type": "stdio", "command": "uvx",
                    "args": ["mcp-server-time", "--local-timezone=Europe/Paris"]
                }
            },
            "secrets": {"memory": {"env": {"MEMORY_FILE_PATH": "/home/alice/.memory.json"}}}
        })
    );
    assert!(p.notes.is_empty(), "{:?}", p.notes);
    assert_no_secret_shown(&p);
}

#[test]
fn codex_tables_with_timeouts_tools_headers_and_env_vars() {
    let p = import("config.toml", &["context7"]);
    assert_eq!(p.format, Format::Codex);
    assert_eq!(
        p.patch,
        json!({
            "servers": {
                "context7-2": {
                    "type": "stdio", "command": "npx", "args": ["-y", "@upstash/context7-mcp"],
                    "startupTimeoutMs": 20000, "callTimeoutMs": 120000
                },
                "docs": {
                    "type": "http", "url": "https://docs.example.com/mcp",
                    "enabled": false, "disabledTools": ["delete_page"]
                },
                "figma": {
                    "type": "http", "url": "https://mcp.figma.com/mcp",
                    "bearerTokenEnvVar": "FIGMA_OAUTH_TOKEN",
                    "headers": {
                        "X-Figma-Region": {"secret": "header"},
                        "X-Org": {"env": "FIGMA_ORG"}
                    },
                    "startupTimeoutMs": 15000
                },
                "github": {
                    "type": "stdio", "command": "docker",
                    "args": ["run", "-i", "--rm", "-e", "GITHUB_PERSONAL_ACCESS_TOKEN",
                             "ghcr.io/github/github-mcp-server"],
                    "env": {
                        "GITHUB_PERSONAL_ACCESS_TOKEN": {"secret": "env.GITHUB_PERSONAL_ACCESS_TOKEN"},
                        "HTTPS_PROXY": {"env": "HTTPS_PROXY"}
                    },
                    "enabledTools": ["search_code", "get_issue"]
                },
                "local-notes": {
                    "type": "stdio", "command": "/usr/local/bin/notes-mcp",
                    "cwd": "/home/alice/notes"
                }
            },
            "secrets": {
                "figma": {"header": {"name": "X-Figma-Region", "value": "us-east-1"}},
                "github": {"env": {"GITHUB_PERSONAL_ACCESS_TOKEN": "ghp_codexFixtureToken0007"}}
            }
        })
    );
    assert_eq!(
        names(&p),
        pairs(&[
            ("Local Notes", "local-notes"),
            ("context7", "context7-2"),
            ("docs", "docs"),
            ("figma", "figma"),
            ("github", "github")
        ])
    );
    assert!(has_note(&p, &["\"docs\"", "`scopes`"]));
    assert_no_secret_shown(&p);
}

#[test]
fn the_dry_run_json_has_the_redacted_patch_and_the_lists() {
    let p = import(".mcp.json", &[]);
    let j = p.to_json();
    assert_eq!(
        j["patch"]["secrets"],
        json!({
            "notion": {"bearer_token": SECRET_SHOWN},
            "postgres": {"env": {"SENTRY_TOKEN": SECRET_SHOWN}}
        })
    );
    assert_eq!(j["patch"]["servers"], p.patch["servers"]);
    assert_eq!(j["added"].as_array().map(Vec::len), Some(3));
    assert_eq!(j["skipped"][0]["name"], "api-server");
    assert!(j["notes"].as_array().is_some_and(|n| !n.is_empty()));
}

#[test]
fn broken_and_unknown_files_are_errors_naming_the_file_and_place() {
    let e = plan(
        "{\n  \"mcpServers\": {\n    \"a\": {\"command\" \"x\"}\n",
        Path::new("/x/.mcp.json"),
        &[],
    )
    .unwrap_err();
    let ImportError::Parse { line, .. } = &e else {
        panic!("{e:?}")
    };
    assert_eq!(*line, 3);
    assert!(e.to_string().starts_with("/x/.mcp.json:3:"), "{e}");
    let e = plan("{\"editor.fontSize\": 14}", Path::new("settings.json"), &[]).unwrap_err();
    assert!(matches!(e, ImportError::UnknownFormat { .. }), "{e:?}");
    let e = plan("{\"mcpServers\": []}", Path::new("x.json"), &[]).unwrap_err();
    assert!(matches!(e, ImportError::Shape { .. }), "{e:?}");
}

#[test]
fn run_without_a_daemon_exits_2_and_a_bad_file_exits_1() {
    let home = tempfile::tempdir().unwrap();
    std::env::set_var("ALBEDO_HOME", home.path());
    std::env::remove_var("ALBEDO_DAEMON");
    std::env::remove_var("ALBEDO_TOKEN");
    // Port 1 on loopback: nothing listens.
    let daemon = Some("http://127.0.0.1:1");
    let file = fixtures().join(".mcp.json");
    assert_eq!(run(daemon, &file, true, false), 2);
    assert_eq!(run(daemon, &file, true, true), 2);
    assert_eq!(run(daemon, &file, false, false), 2);
    let bad = home.path().join("bad.json");
    std::fs::write(&bad, "{\"mcpServers\": ").unwrap();
    assert_eq!(run(daemon, &bad, true, false), 1);
    assert_eq!(
        run(daemon, &home.path().join("missing.json"), true, false),
        1
    );
}
