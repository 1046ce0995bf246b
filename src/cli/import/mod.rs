//! `albedo-mcp mcp import FILE`: reads the server lists users already have and adds them
//! through `PATCH /settings/mcp`, so an import is strict like any save (a server that cannot
//! start makes the daemon refuse the whole import, and nothing is written).
//!
//! Formats, found from the file's content (and its name, for the label and the workspace):
//! - Claude Desktop `claude_desktop_config.json`, Claude Code `.mcp.json` (and `~/.claude.json`),
//!   Cursor `mcp.json`: `{"mcpServers": {NAME: {command, args, env, cwd} | {type, url, headers}}}`,
//!   with `${VAR}`, `${VAR:-default}` (Claude Code) and `${env:VAR}` (Cursor) variables;
//! - VS Code `.vscode/mcp.json` `{"servers": ..., "inputs": [...]}` and its user
//!   `settings.json` `{"mcp": {"servers": ...}}` (comments and trailing commas allowed), with
//!   `${env:VAR}`, `${input:ID}` and `${workspaceFolder}`;
//! - Codex `config.toml`: `[mcp_servers.NAME]` tables.
//!
//! The rules: an `env` or header value that is exactly one variable becomes a reference to the
//! daemon's environment (`{"env": "VAR"}`); a literal value is a secret, sent in the patch's
//! `secrets` (stored in `creds.json`), never in the server's fields; `Authorization: Bearer X`
//! is the server's bearer token. Only one custom header can be a stored secret per server.
//! Whatever cannot be carried over (an `${input:...}`, a variable in a command's arguments,
//! an `envFile`, an unknown field) is said in a note or makes the server skipped, never
//! silently dropped. Names become valid albedo names, and a name already taken (or imported
//! twice) gets a suffix (`-2`, `-3`, ...). No output ever shows a secret's value.
//!
//! `files` reads the file's text, `formats` each format's server entries, `vars` the variables
//! in their values, `server` makes each into its patch entry and secrets; this file puts the
//! patch together ([`plan`]) and runs the command ([`run`]).
//!
//! Owns: reading those formats into a settings patch and the command. Must not touch: the
//! settings files (only the daemon writes them).

use crate::cli::client::{locate, ClientError, DaemonClient};
use crate::store::edit::MAX_RETRY_MS;
use crate::store::names::{free, sanitize};
use crate::store::settings::{
    header_name_problem, valid_env_name, valid_server_name, validate_url, SettingsError,
};
use awc::http;
use serde_json::{json, Map, Value};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

mod files;
mod formats;
mod server;
mod vars;

use files::*;
use formats::*;
use server::*;
use vars::*;

/// What stands in for a secret's value in a dry run's patch.
pub const SECRET_SHOWN: &str = "<secret>";
/// What stands in for a URL's query in output.
const QUERY_SHOWN: &str = "<redacted>";

#[derive(Debug, thiserror::Error)]
pub enum ImportError {
    #[error("cannot read {file}: {source}")]
    Read {
        file: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{file}:{line}:{column}: not valid {syntax}: {message}")]
    Parse {
        file: String,
        syntax: &'static str,
        line: usize,
        column: usize,
        message: String,
    },
    #[error("{file}: {message}")]
    Shape { file: String, message: String },
    #[error(
        "{file} holds no server list albedo-mcp can import (found {found}); expected \
         `mcpServers` (Claude, Cursor), `servers` or `mcp.servers` (VS Code), or \
         `[mcp_servers.NAME]` tables (Codex config.toml)"
    )]
    UnknownFormat { file: String, found: String },
}

/// The format a file was read as.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Format {
    ClaudeDesktop,
    ClaudeCode,
    Cursor,
    /// `mcpServers` in a file of another name (the Claude / Cursor shape).
    McpServers,
    VsCode,
    VsCodeSettings,
    Codex,
}

impl Format {
    pub fn label(self) -> &'static str {
        match self {
            Format::ClaudeDesktop => "Claude Desktop config",
            Format::ClaudeCode => "Claude Code config",
            Format::Cursor => "Cursor mcp.json",
            Format::McpServers => "mcpServers list (Claude / Cursor shape)",
            Format::VsCode => "VS Code mcp.json",
            Format::VsCodeSettings => "VS Code settings.json",
            Format::Codex => "Codex config.toml",
        }
    }
}

/// A server the import adds.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Added {
    /// Its albedo name.
    pub name: String,
    /// Its name in the imported file.
    pub original: String,
    /// `stdio` or `http`.
    pub transport: &'static str,
    /// The command line or the URL (a URL's query shown as `<redacted>`).
    pub target: String,
    /// The secrets it stores in creds.json, by name (`env TOKEN`, `bearer token`,
    /// `header X-Api-Key`), never by value.
    pub secrets: Vec<String>,
}

/// A server the import leaves out.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Skipped {
    /// Its name in the imported file.
    pub name: String,
    pub reason: String,
}

/// What an import would do.
#[derive(Debug, Clone, PartialEq)]
pub struct ImportPlan {
    pub format: Format,
    /// The body of `PATCH /settings/mcp`: `{"servers": {...}, "secrets": {...}}`.
    pub patch: Value,
    pub added: Vec<Added>,
    pub skipped: Vec<Skipped>,
    pub notes: Vec<String>,
}

impl ImportPlan {
    /// The patch with every secret's value replaced by `<secret>` and every URL's query by
    /// `<redacted>`: safe to print.
    pub fn redacted_patch(&self) -> Value {
        let mut p = self.patch.clone();
        if let Some(secrets) = p.get_mut("secrets").and_then(Value::as_object_mut) {
            for s in secrets.values_mut() {
                let Some(s) = s.as_object_mut() else { continue };
                if let Some(b) = s.get_mut("bearer_token") {
                    *b = json!(SECRET_SHOWN);
                }
                if let Some(v) = s.get_mut("header").and_then(|h| h.get_mut("value")) {
                    *v = json!(SECRET_SHOWN);
                }
                if let Some(env) = s.get_mut("env").and_then(Value::as_object_mut) {
                    for v in env.values_mut() {
                        *v = json!(SECRET_SHOWN);
                    }
                }
            }
        }
        if let Some(servers) = p.get_mut("servers").and_then(Value::as_object_mut) {
            for s in servers.values_mut() {
                if let Some(u) = s.get_mut("url") {
                    if let Some(shown) = u.as_str().map(shown_url) {
                        *u = json!(shown);
                    }
                }
            }
        }
        p
    }

    /// The dry run's `--json` answer.
    pub fn to_json(&self) -> Value {
        json!({
            "format": self.format,
            "patch": self.redacted_patch(),
            "added": self.added,
            "skipped": self.skipped,
            "notes": self.notes,
        })
    }

    /// The human list: added, skipped, notes.
    pub fn describe(&self, file: &Path, dry_run: bool) -> String {
        let mut out = format!(
            "{} ({}): {} server{} to {}, {} skipped\n",
            file.display(),
            self.format.label(),
            self.added.len(),
            if self.added.len() == 1 { "" } else { "s" },
            if dry_run { "add (dry run)" } else { "add" },
            self.skipped.len()
        );
        for a in &self.added {
            out.push_str(&format!("  + {}", a.name));
            if a.name != a.original {
                out.push_str(&format!(" \u{2190} {:?}", a.original));
            }
            out.push_str(&format!(" ({}: {})", a.transport, a.target));
            if !a.secrets.is_empty() {
                out.push_str(&format!(
                    "; secrets to creds.json: {}",
                    a.secrets.join(", ")
                ));
            }
            out.push('\n');
        }
        for s in &self.skipped {
            out.push_str(&format!("  - {:?} skipped: {}\n", s.name, s.reason));
        }
        if !self.notes.is_empty() {
            out.push_str("notes:\n");
            for n in &self.notes {
                out.push_str(&format!("  * {n}\n"));
            }
        }
        out
    }
}

/// A URL for output: its query (which may carry a key) shown as `<redacted>`.
fn shown_url(u: &str) -> String {
    match u.split_once('?') {
        Some((base, _)) => format!("{base}?{QUERY_SHOWN}"),
        None => u.to_owned(),
    }
}

/// Read `text` (the content of `file_name`) and make the patch that adds its servers under
/// names not in `taken`.
pub fn plan(text: &str, file_name: &Path, taken: &[String]) -> Result<ImportPlan, ImportError> {
    let file = file_name.display().to_string();
    let is_toml = file_name
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("toml"));
    let root = if is_toml {
        parse_toml(text, &file)?
    } else {
        match parse_json(text, &file) {
            Ok(v) => v,
            Err(json_err) => match parse_toml(text, &file) {
                Ok(v) if v.get("mcp_servers").is_some() => v,
                _ => return Err(json_err),
            },
        }
    };
    let mut notes = Vec::new();
    let no_inputs = BTreeMap::new();
    let mut inputs = BTreeMap::new();
    let (format, servers) = if let Some(s) = root.get("mcp_servers") {
        (Format::Codex, s)
    } else if let Some(s) = root.get("mcpServers") {
        let name = file_name_of(file_name);
        let format = if name == "claude_desktop_config.json" {
            Format::ClaudeDesktop
        } else if name == ".mcp.json" || name == ".claude.json" {
            Format::ClaudeCode
        } else if file_name.parent().map(file_name_of) == Some(".cursor") {
            Format::Cursor
        } else {
            Format::McpServers
        };
        if let Some(projects) = root.get("projects").and_then(Value::as_object) {
            let n = projects
                .values()
                .filter(|p| {
                    p.get("mcpServers")
                        .and_then(Value::as_object)
                        .is_some_and(|m| !m.is_empty())
                })
                .count();
            if n > 0 {
                notes.push(format!(
                    "{n} project{} under `projects` {} servers of its own, which are not \
                     imported (import each project's .mcp.json)",
                    if n == 1 { "" } else { "s" },
                    if n == 1 { "has" } else { "have" }
                ));
            }
        }
        (format, s)
    } else if let Some(s) = root.get("servers") {
        (Format::VsCode, s)
    } else if let Some(s) = root.get("mcp").and_then(|m| m.get("servers")) {
        (Format::VsCodeSettings, s)
    } else {
        return Err(ImportError::UnknownFormat {
            file,
            found: keys_found(&root),
        });
    };
    let servers = servers.as_object().ok_or_else(|| ImportError::Shape {
        file: file.clone(),
        message: "its server list is not an object of servers by name".into(),
    })?;
    if matches!(format, Format::VsCode | Format::VsCodeSettings) {
        let list = match format {
            Format::VsCode => root.get("inputs"),
            _ => root.get("mcp").and_then(|m| m.get("inputs")),
        };
        for i in list.and_then(Value::as_array).into_iter().flatten() {
            if let Some(id) = i.get("id").and_then(Value::as_str) {
                let d = i
                    .get("description")
                    .and_then(Value::as_str)
                    .unwrap_or(id)
                    .to_owned();
                inputs.insert(id.to_owned(), d);
            }
        }
    }
    let ctx = Ctx {
        dialect: match format {
            Format::Codex => Dialect::Literal,
            Format::VsCode | Format::VsCodeSettings => Dialect::VsCode,
            _ => Dialect::Claude,
        },
        workspace: workspace_of(file_name),
        inputs: if inputs.is_empty() {
            &no_inputs
        } else {
            &inputs
        },
    };
    let mut used: Vec<String> = taken.to_vec();
    let mut patch_servers = Map::new();
    let mut patch_secrets = Map::new();
    let mut added = Vec::new();
    let mut skipped = Vec::new();
    // By name, whatever order the file had (as before `serde_json`'s `preserve_order`).
    let mut servers: Vec<_> = servers.iter().collect();
    servers.sort_by(|a, b| a.0.cmp(b.0));
    for (original, def) in servers {
        let mut server_notes = Vec::new();
        let entry = match format {
            Format::Codex => codex_entry(original, def, &mut server_notes),
            Format::VsCode | Format::VsCodeSettings => {
                json_entry(original, def, true, &mut server_notes)
            }
            _ => json_entry(original, def, false, &mut server_notes),
        };
        let built = entry.and_then(|e| build(original, e, &ctx, &mut server_notes));
        notes.append(&mut server_notes);
        let built = match built {
            Ok(b) => b,
            Err(reason) => {
                skipped.push(Skipped {
                    name: original.clone(),
                    reason,
                });
                continue;
            }
        };
        let base = if valid_server_name(original) {
            original.clone()
        } else {
            sanitize(original)
        };
        let mut name = free(&base, &used);
        if !valid_server_name(&name) {
            name = free(&sanitize(original), &used);
        }
        if name != base {
            notes.push(format!(
                "{base:?} is taken: {original:?} is imported as {name}"
            ));
        }
        used.push(name.clone());
        patch_servers.insert(name.clone(), Value::Object(built.server));
        if !built.secrets.is_empty() {
            patch_secrets.insert(name.clone(), Value::Object(built.secrets));
        }
        added.push(Added {
            name,
            original: original.clone(),
            transport: built.transport,
            target: built.target,
            secrets: built.secret_names,
        });
    }
    Ok(ImportPlan {
        format,
        patch: json!({ "servers": patch_servers, "secrets": patch_secrets }),
        added,
        skipped,
        notes,
    })
}

// ---------------------------------------------------------------------------------------
// The command.

/// The server a refusal names: the one of `added` the daemon's message quotes.
fn refused_server<'a>(message: &str, added: &'a [Added]) -> Option<&'a Added> {
    added.iter().find(|a| {
        message.contains(&format!("{:?}", a.name)) || message.contains(&format!("`{}`", a.name))
    })
}

/// Import `file` into the daemon at `daemon`; `dry_run` shows what would be added. The exit
/// status: 0 ok, 1 the file cannot be read or the daemon refused, 2 the daemon is not running.
pub fn run(daemon: Option<&str>, file: &Path, dry_run: bool, json: bool) -> i32 {
    let text = match std::fs::read_to_string(file) {
        Ok(t) => t,
        Err(source) => {
            let e = ImportError::Read {
                file: file.display().to_string(),
                source,
            };
            eprintln!("albedo-mcp: {e}");
            return 1;
        }
    };
    let path = std::path::absolute(file).unwrap_or_else(|_| PathBuf::from(file));
    // The file is read before the daemon is asked: its errors come first.
    if let Err(e) = plan(&text, &path, &[]) {
        eprintln!("albedo-mcp: {e}");
        return 1;
    }
    let client = match locate(daemon) {
        Ok(e) => DaemonClient::new(e),
        Err(e) => {
            eprintln!("albedo-mcp: {e}");
            return 1;
        }
    };
    actix::System::new().block_on(async move {
        let current = match client.call(http::Method::GET, "/settings/mcp", None).await {
            Ok(v) => v,
            Err(ClientError::Unreachable { at, .. }) => {
                eprintln!("albedo-mcp: no daemon answers at {at}; start it with: albedo-mcp serve");
                return 2;
            }
            Err(e) => {
                eprintln!("albedo-mcp: {e}");
                return 1;
            }
        };
        let taken: Vec<String> = current
            .get("servers")
            .and_then(Value::as_object)
            .map(|m| m.keys().cloned().collect())
            .unwrap_or_default();
        let plan = match plan(&text, &path, &taken) {
            Ok(p) => p,
            Err(e) => {
                eprintln!("albedo-mcp: {e}");
                return 1;
            }
        };
        if dry_run {
            if json {
                println!("{:#}", plan.to_json());
            } else {
                print!("{}", plan.describe(&path, true));
            }
            return 0;
        }
        if plan.added.is_empty() {
            if json {
                println!("{:#}", plan.to_json());
            } else {
                print!("{}", plan.describe(&path, false));
                println!("nothing to import");
            }
            return 0;
        }
        match client
            .call(http::Method::PATCH, "/settings/mcp", Some(&plan.patch))
            .await
        {
            Ok(answer) => {
                let tested = answer.get("tested").cloned().unwrap_or(Value::Null);
                if json {
                    let mut out = plan.to_json();
                    if let Some(o) = out.as_object_mut() {
                        o.remove("patch");
                        o.insert("tested".into(), tested);
                    }
                    println!("{out:#}");
                } else {
                    print!("{}", plan.describe(&path, false));
                    for a in &plan.added {
                        let t = &tested[&a.name];
                        match t.get("state").and_then(Value::as_str) {
                            Some(state) => match t.get("tools").and_then(Value::as_u64) {
                                Some(n) => println!("{}: {state}, {n} tools", a.name),
                                None => println!("{}: {state}", a.name),
                            },
                            None => println!("{}: saved", a.name),
                        }
                    }
                }
                0
            }
            Err(ClientError::Unreachable { at, .. }) => {
                eprintln!("albedo-mcp: no daemon answers at {at}; start it with: albedo-mcp serve");
                2
            }
            Err(ClientError::Refused {
                status, message, ..
            }) => {
                eprintln!("albedo-mcp: the daemon refused the import (HTTP {status}): {message}");
                if let Some(a) = refused_server(&message, &plan.added) {
                    if a.name == a.original {
                        eprintln!("albedo-mcp: the server at fault: {}", a.name);
                    } else {
                        eprintln!(
                            "albedo-mcp: the server at fault: {} ({:?} in the file)",
                            a.name, a.original
                        );
                    }
                }
                eprintln!(
                    "albedo-mcp: nothing was imported (fix or leave out that server, or see \
                     what would be sent with --dry-run)"
                );
                1
            }
            Err(e) => {
                eprintln!("albedo-mcp: {e}");
                1
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(text: &str, file: &str) -> ImportPlan {
        plan(text, Path::new(file), &[]).expect("plans")
    }

    #[test]
    fn variables_are_read_per_dialect() {
        assert_eq!(
            pieces("${TOKEN}", Dialect::Claude),
            vec![Piece::Env {
                name: "TOKEN".into(),
                default: false
            }]
        );
        assert_eq!(
            pieces("${TOKEN:-x}", Dialect::Claude),
            vec![Piece::Env {
                name: "TOKEN".into(),
                default: true
            }]
        );
        assert_eq!(
            pieces("a${env:B}c", Dialect::VsCode),
            vec![
                Piece::Text("a".into()),
                Piece::Env {
                    name: "B".into(),
                    default: false
                },
                Piece::Text("c".into())
            ]
        );
        assert_eq!(
            pieces("${TOKEN}", Dialect::VsCode),
            vec![Piece::Other("TOKEN".into())]
        );
        assert_eq!(
            pieces("${input:k}", Dialect::VsCode),
            vec![Piece::Input("k".into())]
        );
        assert_eq!(
            pieces("${TOKEN}", Dialect::Literal),
            vec![Piece::Text("${TOKEN}".into())]
        );
        assert_eq!(
            pieces("${unclosed", Dialect::Claude),
            vec![Piece::Text("${unclosed".into())]
        );
        assert_eq!(pieces("", Dialect::Claude), vec![Piece::Text("".into())]);
    }

    #[test]
    fn jsonc_comments_and_trailing_commas_keep_positions() {
        let t = "{ // c\n \"a\": \"//x\", /* y\n */ \"b\": [1,],\n}";
        let s = strip_jsonc(t);
        assert_eq!(s.lines().count(), t.lines().count());
        let v: Value = serde_json::from_str(&s).unwrap();
        assert_eq!(v, json!({"a": "//x", "b": [1]}));
        let e = plan(
            "{\n  \"mcpServers\": {\"a\" 1}\n}",
            Path::new("x.json"),
            &[],
        )
        .unwrap_err();
        assert!(
            matches!(e, ImportError::Parse { line: 2, .. }),
            "{e:?}: {e}"
        );
    }

    #[test]
    fn env_values_become_references_or_secrets() {
        let plan = p(
            r#"{"mcpServers": {"gh": {"command": "npx", "args": ["-y", "server-github"],
                "env": {"TOKEN": "${GH_TOKEN}", "KEY": "s3cret", "D": "${X:-y}",
                        "MIX": "a${B}", "EMPTY": ""}}}}"#,
            ".mcp.json",
        );
        assert_eq!(plan.format, Format::ClaudeCode);
        assert_eq!(
            plan.patch,
            json!({
                "servers": {"gh": {"type": "stdio", "command": "npx",
                    "args": ["-y", "server-github"],
                    "env": {"TOKEN": {"env": "GH_TOKEN"}, "KEY": {"secret": "env.KEY"},
                            "D": {"env": "X"}}}},
                "secrets": {"gh": {"env": {"KEY": "s3cret"}}}
            })
        );
        assert_eq!(plan.added[0].secrets, vec!["env KEY"]);
        assert!(plan.notes.iter().any(|n| n.contains("env MIX")));
        assert!(plan.notes.iter().any(|n| n.contains("env EMPTY")));
        assert!(plan.notes.iter().any(|n| n.contains("default")));
        let shown = plan.to_json().to_string() + &plan.describe(Path::new("f"), true);
        assert!(!shown.contains("s3cret"), "{shown}");
        assert!(shown.contains(SECRET_SHOWN));
    }

    #[test]
    fn headers_make_a_bearer_token_and_one_header_secret() {
        let plan = p(
            r#"{"mcpServers": {"api": {"type": "http", "url": "https://api.example.com/mcp",
                "headers": {"Authorization": "Bearer tok-1", "X-A": "va", "X-B": "vb",
                            "X-Env": "${env:HV}"}}}}"#,
            "mcp.json",
        );
        assert_eq!(
            plan.patch,
            json!({
                "servers": {"api": {"type": "http", "url": "https://api.example.com/mcp",
                    "headers": {"X-A": {"secret": "header"}, "X-Env": {"env": "HV"}}}},
                "secrets": {"api": {"bearer_token": "tok-1",
                                    "header": {"name": "X-A", "value": "va"}}}
            })
        );
        let note = plan.notes.iter().find(|n| n.contains("X-B")).unwrap();
        assert!(!note.contains("vb"), "{note}");
        let shown = plan.to_json().to_string();
        for secret in ["tok-1", "va", "vb"] {
            assert!(!shown.contains(&format!("\"{secret}\"")), "{shown}");
        }
        let plan = p(
            r#"{"mcpServers": {"api": {"type": "sse", "url": "https://x.example.com/sse",
                "headers": {"authorization": "bearer ${TOK}"}}}}"#,
            "mcp.json",
        );
        assert_eq!(
            plan.patch["servers"]["api"],
            json!({"type": "http", "url": "https://x.example.com/sse",
                   "bearerTokenEnvVar": "TOK"})
        );
        assert!(plan.notes.iter().any(|n| n.contains("SSE")));
    }

    #[test]
    fn the_configured_bearer_comes_before_an_authorization_header() {
        // Codex: `bearer_token_env_var` and an `Authorization: Bearer` header. The configured
        // one is the bearer; the header is said in a note, its value nowhere.
        let plan = p(
            "[mcp_servers.api]\nurl = \"https://api.example.com/mcp\"\n\
             bearer_token_env_var = \"API_TOKEN\"\n\
             http_headers = { Authorization = \"Bearer tok-in-header\" }\n",
            "config.toml",
        );
        assert_eq!(
            plan.patch["servers"]["api"]["bearerTokenEnvVar"], "API_TOKEN",
            "{}",
            plan.patch
        );
        assert!(plan.patch["secrets"]["api"].get("bearer_token").is_none());
        let note = plan
            .notes
            .iter()
            .find(|n| n.contains("already has a bearer token"))
            .unwrap_or_else(|| panic!("{:?}", plan.notes));
        assert!(note.contains("Authorization"), "{note}");
        let shown = plan.to_json().to_string() + &plan.describe(Path::new("f"), true);
        assert!(!shown.contains("tok-in-header"), "{shown}");
    }

    #[test]
    fn names_are_made_valid_and_clashes_get_suffixes() {
        let plan = plan(
            r#"{"mcpServers": {"My Server!": {"command": "a"}, "docs": {"command": "b"},
                "my-server": {"command": "c"}}}"#,
            Path::new("x.json"),
            &["docs".to_owned()],
        )
        .unwrap();
        let names: Vec<(&str, &str)> = plan
            .added
            .iter()
            .map(|a| (a.original.as_str(), a.name.as_str()))
            .collect();
        assert_eq!(
            names,
            vec![
                ("My Server!", "my-server"),
                ("docs", "docs-2"),
                ("my-server", "my-server-2")
            ]
        );
        for a in &plan.added {
            assert!(valid_server_name(&a.name));
        }
    }

    #[test]
    fn unsupported_things_are_said_not_dropped() {
        let plan = p(
            r#"{"mcpServers": {"ws": {"type": "websocket", "url": "ws://x"},
                "none": {"foo": 1}, "off": {"command": "x", "disabled": true,
                "autoApprove": ["t"]}, "argvar": {"command": "x", "args": ["${HOME}/y"]}}}"#,
            "x.json",
        );
        let reasons: BTreeMap<&str, &str> = plan
            .skipped
            .iter()
            .map(|s| (s.name.as_str(), s.reason.as_str()))
            .collect();
        assert!(reasons["ws"].contains("websocket"));
        assert!(reasons["none"].contains("neither"));
        assert!(reasons["argvar"].contains("HOME"));
        assert_eq!(plan.patch["servers"]["off"]["enabled"], json!(false));
        assert!(plan.notes.iter().any(|n| n.contains("autoApprove")));
    }

    #[test]
    fn unknown_files_and_bad_toml_are_errors_naming_the_place() {
        let e = plan("{\"a\": 1}", Path::new("f.json"), &[]).unwrap_err();
        assert!(matches!(e, ImportError::UnknownFormat { .. }));
        assert!(e.to_string().contains("`a`"));
        let e = plan(
            "[mcp_servers.x]\ncommand = \"a\"\nenv = { K = \"sec\" \n",
            Path::new("config.toml"),
            &[],
        )
        .unwrap_err();
        match &e {
            ImportError::Parse { line, .. } => assert_eq!(*line, 3, "{e}"),
            other => panic!("{other:?}"),
        }
        assert!(!e.to_string().contains("sec"), "{e}");
    }

    #[test]
    fn the_daemons_rules_on_names_headers_and_timeouts_are_kept() {
        let plan = p(
            r#"{"mcpServers": {"h": {"url": "https://h.example.com/mcp", "headers": {
                "Api-Key": "x", "authorization": "Bearer t0k", "Mcp-Session-Id": "s",
                "X-V": "${env:bad-name}"}},
                "s": {"command": "a", "env": {"1BAD": "v", "OK": "${env:also bad}"}}}}"#,
            "x.json",
        );
        // The bearer token is found whatever the order, and the header secret is `Api-Key`.
        assert_eq!(
            plan.patch["secrets"]["h"],
            json!({"bearer_token": "t0k", "header": {"name": "Api-Key", "value": "x"}})
        );
        assert_eq!(
            plan.patch["servers"]["h"]["headers"],
            json!({"Api-Key": {"secret": "header"}})
        );
        assert!(plan.notes.iter().any(|n| n.contains("Mcp-Session-Id")));
        assert!(plan.notes.iter().any(|n| n.contains("bad-name")));
        assert!(plan.notes.iter().any(|n| n.contains("1BAD")));
        assert!(plan.notes.iter().any(|n| n.contains("also bad")));
        assert!(plan.patch["servers"]["s"].get("env").is_none());
        let plan = p(
            "[mcp_servers.slow]\ncommand = \"a\"\nstartup_timeout_sec = 200000\n\
             tool_timeout_sec = 0.5\n",
            "config.toml",
        );
        assert_eq!(
            plan.patch["servers"]["slow"],
            json!({"type": "stdio", "command": "a", "callTimeoutMs": 500})
        );
        assert!(plan.notes.iter().any(|n| n.contains("startupTimeoutMs")));
    }

    #[test]
    fn command_lines_are_shown_quoted() {
        assert_eq!(quoted("-y"), "-y");
        assert_eq!(quoted("/srv/my docs"), "'/srv/my docs'");
        assert_eq!(quoted("it's"), "'it'\\''s'");
        assert_eq!(quoted(""), "''");
    }

    #[test]
    fn query_strings_are_kept_but_never_shown() {
        let plan = p(
            r#"{"mcpServers": {"q": {"url": "https://x.example.com/mcp?api_key=k123"}}}"#,
            "x.json",
        );
        assert_eq!(
            plan.patch["servers"]["q"]["url"],
            "https://x.example.com/mcp?api_key=k123"
        );
        let shown = plan.to_json().to_string() + &plan.describe(Path::new("f"), true);
        assert!(!shown.contains("k123"), "{shown}");
    }
}
