//! `albedo-mcp mcp …`: the MCP servers of a running daemon from the command line: list,
//! show, add, edit, remove, enable, disable, test, list and call tools, import, sign in and
//! out (`login.rs`).
//!
//! Owns: turning arguments into requests to the daemon's settings and session API
//! (`GET`/`PATCH /settings/mcp`, `POST /settings/mcp/servers/{name}/test`, a throwaway
//! session for `tools` and `call`), and printing the answers (a table for people, the JSON
//! with `--json`). Exit status: 0 ok, 1 the daemon refused (or a test or call failed), 2 no
//! daemon answers.
//!
//! Must not touch: the settings files (`extensions.json`, `creds.json`): every change goes
//! through the API, so the daemon checks it (and starts a new server once) before saving.
//! Secret values given on the command line go into the PATCH's `secrets` and are never
//! printed; the daemon's answers carry only whether a secret is set.

mod login;
mod patch;
pub(crate) mod render;

use super::client::{locate, ClientError, DaemonClient};
use awc::http::Method;
use clap::{Args, Subcommand};
pub use patch::build_patch;
use patch::stdin_line;
pub use render::{render_list, render_result, render_show, render_test, render_tools};
use serde_json::{json, Value};
use std::path::PathBuf;

/// `albedo-mcp mcp`: the options every subcommand takes, and the subcommand.
#[derive(Args, Debug)]
pub struct McpArgs {
    /// The daemon: host:port, http(s)://host:port, or a socket path (default:
    /// $ALBEDO_DAEMON, else the socket in $ALBEDO_HOME, else config.toml's `listen` or
    /// $ALBEDO_LISTEN).
    #[arg(long, global = true, value_name = "ADDRESS")]
    pub daemon: Option<String>,
    /// Print JSON (the daemon's answer, or an object built from it) instead of text.
    #[arg(long, global = true)]
    pub json: bool,
    #[command(subcommand)]
    pub command: McpCommand,
}

#[derive(Subcommand, Debug)]
pub enum McpCommand {
    /// List the configured servers: type, switched on or off, state, tools, URL or command.
    List,
    /// Show one server: its settings, which secrets are set (never their values), its
    /// status and sign-in.
    Show { name: String },
    /// Add a server: `--url URL` (HTTP) or `-- COMMAND ARGS...` (stdio). The daemon starts
    /// it once before saving it: one that cannot start is not saved.
    Add {
        name: String,
        #[command(flatten)]
        server: ServerFlags,
    },
    /// Change a server: only what is given changes.
    Edit {
        name: String,
        #[command(flatten)]
        server: ServerFlags,
        #[command(flatten)]
        remove: RemoveFlags,
    },
    /// Remove a server and its stored credentials.
    Remove { name: String },
    /// Switch a server on (the daemon starts it once first).
    Enable { name: String },
    /// Switch a server off.
    Disable { name: String },
    /// List the tools a session gets (those of one server with NAME).
    Tools { name: Option<String> },
    /// Call a tool: TOOL is its advertised name (mcp__server__tool) or server/tool; JSON its
    /// arguments (default {}).
    Call {
        tool: String,
        #[arg(value_name = "JSON")]
        arguments: Option<String>,
    },
    /// Start a server apart from any session and report how far it got (its stderr too).
    Test { name: String },
    /// Make the daemon read extensions.json again (after editing it by hand).
    Reload,
    /// Sign in to an HTTP server with OAuth: print the authorization URL, open a browser on
    /// it, and wait until the sign-in is over (Ctrl-C cancels it).
    Login {
        name: String,
        /// Print the URL only; open no browser (so does ALBEDO_NO_BROWSER).
        #[arg(long)]
        no_browser: bool,
        /// Also read the address the browser ends on (the redirect with `code` and `state`)
        /// from standard input, for a browser that cannot reach this machine's loopback.
        #[arg(long)]
        paste: bool,
    },
    /// Sign out of a server: forget its OAuth tokens.
    Logout { name: String },
    /// Add the servers of another client's file (Claude, Cursor, VS Code, Codex).
    Import {
        file: PathBuf,
        /// Show what would be added, change nothing.
        #[arg(long)]
        dry_run: bool,
    },
}

/// A server's settings on `add` and `edit`.
#[derive(Args, Debug, Default, Clone)]
pub struct ServerFlags {
    /// An HTTP server's URL.
    #[arg(long, value_name = "URL")]
    pub url: Option<String>,
    /// A stdio server's command line as one string (split like a shell, nothing expanded);
    /// the same as giving it after `--`.
    #[arg(long, value_name = "STRING")]
    pub command_line: Option<String>,
    /// A stdio server's working folder.
    #[arg(long, value_name = "DIR")]
    pub cwd: Option<String>,
    /// HTTP: send `Authorization: Bearer` with the token the daemon finds in this
    /// environment variable.
    #[arg(long, value_name = "VAR")]
    pub bearer_token_env: Option<String>,
    /// HTTP: the bearer token itself, kept in creds.json; `-` reads it from standard input
    /// (one line), which keeps it out of the shell's history.
    #[arg(long, value_name = "VALUE|-")]
    pub bearer_token: Option<String>,
    /// HTTP: a header sent with every request (one per server), its value kept in
    /// creds.json; NAME=- reads the value from standard input.
    #[arg(long, value_name = "NAME=VALUE")]
    pub header: Option<String>,
    /// stdio: an environment variable for the server, its value kept in creds.json
    /// (repeatable); KEY=- reads the value from standard input.
    #[arg(long, value_name = "KEY=VALUE")]
    pub env: Vec<String>,
    /// Offer only these tools of the server (repeatable; replaces the stored list).
    #[arg(long = "enabled-tool", value_name = "TOOL")]
    pub enabled_tools: Vec<String>,
    /// Never offer this tool of the server (repeatable; replaces the stored list).
    #[arg(long = "disabled-tool", value_name = "TOOL")]
    pub disabled_tools: Vec<String>,
    /// Switch the server off.
    #[arg(long)]
    pub disabled: bool,
    /// A stdio server's command and its arguments, after `--`.
    #[arg(last = true, value_name = "COMMAND")]
    pub command: Vec<String>,
}

/// What `edit` can take away or turn back on.
#[derive(Args, Debug, Default, Clone)]
pub struct RemoveFlags {
    /// Switch the server on.
    #[arg(long, conflicts_with = "disabled")]
    pub enabled: bool,
    /// Forget the stored bearer token.
    #[arg(long, conflicts_with = "bearer_token")]
    pub remove_bearer_token: bool,
    /// Stop reading the bearer token from an environment variable.
    #[arg(long, conflicts_with = "bearer_token_env")]
    pub remove_bearer_token_env: bool,
    /// Forget the stored header.
    #[arg(long, conflicts_with = "header")]
    pub remove_header: bool,
    /// Forget a stored environment variable (repeatable).
    #[arg(long, value_name = "KEY")]
    pub remove_env: Vec<String>,
    /// Offer every tool again (clears the enabled and disabled tool lists).
    #[arg(long, conflicts_with_all = ["enabled_tools", "disabled_tools"])]
    pub all_tools: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum McpError {
    #[error(transparent)]
    Client(#[from] ClientError),
    /// Arguments that make no request.
    #[error("{0}")]
    Usage(String),
    #[error("there is already a server named {0:?} (change it with: albedo-mcp mcp edit {0} ...)")]
    Exists(String),
    #[error("no server named {0:?} (see: albedo-mcp mcp list)")]
    NoSuchServer(String),
    #[error("cannot read a secret from standard input: {0}")]
    Stdin(String),
    #[error("the daemon's answer lacks {0}")]
    Answer(&'static str),
}

impl McpError {
    pub fn exit_code(&self) -> i32 {
        match self {
            McpError::Client(c) => c.exit_code(),
            _ => 1,
        }
    }

    fn to_json(&self) -> Value {
        let code = match self {
            McpError::Client(c) => return c.to_json(),
            McpError::Usage(_) => "usage",
            McpError::Exists(_) => "exists",
            McpError::NoSuchServer(_) => "no_such_server",
            McpError::Stdin(_) => "stdin",
            McpError::Answer(_) => "bad_answer",
        };
        json!({"error": {"code": code, "message": self.to_string()}})
    }
}

/// Run `albedo-mcp mcp …`; the exit status.
pub fn run(args: McpArgs) -> i32 {
    let McpArgs {
        daemon,
        json,
        command,
    } = args;
    if let McpCommand::Import { file, dry_run } = &command {
        return super::import::run(daemon.as_deref(), file, *dry_run, json);
    }
    // Arguments first (a secret read from standard input included): a mistake in them is
    // said without a daemon.
    let patch = match &command {
        McpCommand::Add { name, server } => {
            build_patch(name, server, None, true, &mut stdin_line).map(Some)
        }
        McpCommand::Edit {
            name,
            server,
            remove,
        } => build_patch(name, server, Some(remove), false, &mut stdin_line).map(Some),
        McpCommand::Call {
            arguments: Some(a), ..
        } => parse_arguments(a).map(|_| None),
        _ => Ok(None),
    };
    let patch = match patch {
        Ok(p) => p,
        Err(e) => return report(&e, json),
    };
    let client = match locate(daemon.as_deref()) {
        Ok(e) => DaemonClient::new(e),
        Err(e) => return report(&e.into(), json),
    };
    let out = Out { json };
    let r = actix::System::new().block_on(dispatch(&client, out, command, patch));
    match r {
        Ok(code) => code,
        Err(e) => report(&e, json),
    }
}

/// Print an error (and its JSON on standard output with `--json`); its exit status.
fn report(e: &McpError, json: bool) -> i32 {
    let mut text = format!("albedo-mcp: {e}");
    if let McpError::Client(ClientError::Refused { body, .. }) = e {
        if let Some(o) = body.get("outcome").and_then(Value::as_str) {
            text.push_str(&format!(" (outcome: {o})"));
        }
    }
    eprintln!("{text}");
    if json {
        println!("{}", e.to_json());
    }
    e.exit_code()
}

#[derive(Clone, Copy)]
struct Out {
    json: bool,
}

impl Out {
    fn json(&self, v: &Value) {
        println!(
            "{}",
            serde_json::to_string_pretty(v).unwrap_or_else(|_| v.to_string())
        );
    }
}

async fn dispatch(
    c: &DaemonClient,
    out: Out,
    command: McpCommand,
    patch: Option<Value>,
) -> Result<i32, McpError> {
    match command {
        McpCommand::List => {
            let v = settings(c).await?;
            if out.json {
                out.json(&v);
            } else {
                print!("{}", render_list(&v));
            }
            Ok(0)
        }
        McpCommand::Show { name } => {
            let v = settings(c).await?;
            let s = v["servers"]
                .get(&name)
                .ok_or_else(|| McpError::NoSuchServer(name.clone()))?;
            if out.json {
                out.json(s);
            } else {
                print!("{}", render_show(&name, s));
            }
            Ok(0)
        }
        McpCommand::Add { name, .. } => {
            let v = settings(c).await?;
            if v["servers"].get(&name).is_some() {
                return Err(McpError::Exists(name));
            }
            let patch = patch.ok_or(McpError::Answer("a patch"))?;
            let a = apply(c, &patch).await?;
            summarize(out, &a, &name, "added");
            Ok(0)
        }
        McpCommand::Edit { name, .. } => {
            need_server(c, &name).await?;
            let patch = patch.ok_or(McpError::Answer("a patch"))?;
            let a = apply(c, &patch).await?;
            summarize(out, &a, &name, "changed");
            Ok(0)
        }
        McpCommand::Remove { name } => {
            need_server(c, &name).await?;
            let a = apply(c, &json!({"servers": {&name: null}})).await?;
            if out.json {
                out.json(&a);
            } else {
                println!("removed {name}");
                warn_sessions(&a);
            }
            Ok(0)
        }
        McpCommand::Enable { name } => switch(c, out, &name, true).await,
        McpCommand::Disable { name } => switch(c, out, &name, false).await,
        McpCommand::Tools { name } => tools(c, out, name.as_deref()).await,
        McpCommand::Call { tool, arguments } => call(c, out, &tool, arguments.as_deref()).await,
        McpCommand::Test { name } => test(c, out, &name).await,
        McpCommand::Reload => {
            let a = c
                .call(Method::POST, "/extensions/mcp/reload", Some(&json!({})))
                .await?;
            if out.json {
                out.json(&a);
            } else {
                println!("the daemon read extensions.json again");
            }
            Ok(0)
        }
        McpCommand::Login {
            name,
            no_browser,
            paste,
        } => login::login(c, out, &name, no_browser, paste).await,
        McpCommand::Logout { name } => login::logout(c, out, &name).await,
        McpCommand::Import { .. } => Ok(1),
    }
}

/// `GET /settings/mcp`.
async fn settings(c: &DaemonClient) -> Result<Value, McpError> {
    Ok(c.call(Method::GET, "/settings/mcp", None).await?)
}

/// The server must be configured already.
async fn need_server(c: &DaemonClient, name: &str) -> Result<(), McpError> {
    let v = settings(c).await?;
    if v["servers"].get(name).is_none() {
        return Err(McpError::NoSuchServer(name.to_owned()));
    }
    Ok(())
}

/// `PATCH /settings/mcp`.
async fn apply(c: &DaemonClient, patch: &Value) -> Result<Value, McpError> {
    Ok(c.call(Method::PATCH, "/settings/mcp", Some(patch)).await?)
}

async fn switch(c: &DaemonClient, out: Out, name: &str, on: bool) -> Result<i32, McpError> {
    need_server(c, name).await?;
    let a = apply(c, &json!({"servers": {name: {"enabled": on}}})).await?;
    summarize(out, &a, name, if on { "enabled" } else { "disabled" });
    Ok(0)
}

/// After a PATCH: the answer (`--json`), or a line on the server's state.
fn summarize(out: Out, answer: &Value, name: &str, verb: &str) {
    if out.json {
        out.json(answer);
        return;
    }
    println!("{verb} {name}: {}", state_line(answer, name));
    warn_sessions(answer);
}

/// `connected, 12 tools` from the PATCH answer's `tested` (the daemon started the server),
/// else from the server's status.
fn state_line(answer: &Value, name: &str) -> String {
    let tested = &answer["tested"][name];
    let status = &answer["servers"][name]["status"];
    let (state, tools) = if tested.is_object() {
        (&tested["state"], &tested["tools"])
    } else {
        (&status["state"], &status["tools"])
    };
    let mut s = state.as_str().unwrap_or("saved").replace('_', " ");
    if let Some(n) = tools.as_u64() {
        s.push_str(&format!(", {n} tool{}", if n == 1 { "" } else { "s" }));
    }
    if state == "needs_sign_in" {
        s.push_str(&format!(" (sign in with: albedo-mcp mcp login {name})"));
    }
    s
}

/// Sessions the change could not be carried to.
fn warn_sessions(answer: &Value) {
    if let Some(m) = answer["sessions"].as_object() {
        for (id, r) in m {
            if let Some(e) = r["error"].as_str() {
                eprintln!("albedo-mcp: warning: session {id}: {e}");
            }
        }
    }
}

/// A throwaway session with MCP on: its id and view. Closed by `close_session`.
async fn open_session(c: &DaemonClient) -> Result<(String, Value), McpError> {
    let v = c
        .call(
            Method::POST,
            "/sessions",
            Some(&json!({"extensions": {"mcp": true}})),
        )
        .await?;
    let id = v["id"]
        .as_str()
        .ok_or(McpError::Answer("the session's id"))?
        .to_owned();
    Ok((id, v))
}

async fn close_session(c: &DaemonClient, id: &str) {
    let _ = c
        .call(Method::DELETE, &format!("/sessions/{}", seg(id)), None)
        .await;
}

async fn tools(c: &DaemonClient, out: Out, name: Option<&str>) -> Result<i32, McpError> {
    let (id, view) = open_session(c).await?;
    let listed = c
        // Every tool, the deferred ones too (a person's listing, not a model's context).
        .call(
            Method::GET,
            &format!("/sessions/{}/tools?all=true", seg(&id)),
            None,
        )
        .await;
    close_session(c, &id).await;
    let listed = listed?;
    let servers: Vec<Value> = view["servers"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|s| name.is_none_or(|n| s["name"] == n))
        .cloned()
        .collect();
    if let Some(n) = name {
        if servers.is_empty() {
            return Err(McpError::NoSuchServer(n.to_owned()));
        }
    }
    let tools: Vec<Value> = listed["tools"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|t| name.is_none_or(|n| t["server"] == n))
        .cloned()
        .collect();
    // The server asked for cannot serve its tools: a failure to say. (`connecting`: its
    // saved catalogue is listed while it dials.)
    let failed = name.is_some() && servers.iter().any(unusable);
    if out.json {
        out.json(&json!({"tools": tools, "servers": servers}));
    } else {
        print!("{}", render_tools(&tools));
        for s in &servers {
            if unusable(s) {
                let mut line = format!(
                    "albedo-mcp: {}: {}",
                    s["name"].as_str().unwrap_or("?"),
                    s["state"].as_str().unwrap_or("?").replace('_', " ")
                );
                if let Some(e) = s["last_error"].as_str().or(s["warning"].as_str()) {
                    line.push_str(&format!(": {e}"));
                }
                eprintln!("{line}");
            }
        }
    }
    Ok(if failed { 1 } else { 0 })
}

/// A session's server that gives no tools: not connected, connecting or switched off.
fn unusable(s: &Value) -> bool {
    !matches!(
        s["state"].as_str(),
        Some("connected" | "connecting" | "disabled")
    )
}

async fn call(
    c: &DaemonClient,
    out: Out,
    tool: &str,
    arguments: Option<&str>,
) -> Result<i32, McpError> {
    let arguments = match arguments {
        Some(a) => parse_arguments(a)?,
        None => json!({}),
    };
    let (id, _) = open_session(c).await?;
    let r = c
        .call(
            Method::POST,
            &format!("/sessions/{}/tools/{}/call", seg(&id), seg(tool)),
            Some(&json!({ "arguments": arguments })),
        )
        .await;
    close_session(c, &id).await;
    let r = r?;
    let is_error = r["isError"] == true;
    if out.json {
        out.json(&r);
    } else if is_error {
        eprintln!("albedo-mcp: the tool {tool} answered with an error:");
        eprint!("{}", render_result(&r));
    } else {
        print!("{}", render_result(&r));
    }
    Ok(if is_error { 1 } else { 0 })
}

async fn test(c: &DaemonClient, out: Out, name: &str) -> Result<i32, McpError> {
    let r = c
        .call(
            Method::POST,
            &format!("/settings/mcp/servers/{}/test", seg(name)),
            Some(&json!({})),
        )
        .await
        .map_err(|e| match e {
            ClientError::Refused { status: 404, .. } => McpError::NoSuchServer(name.to_owned()),
            other => other.into(),
        })?;
    let ok = test_passed(&r);
    if out.json {
        out.json(&r);
    } else {
        if let Some(s) = r["stderr"].as_str().filter(|s| !s.trim().is_empty()) {
            eprintln!("--- {name}: standard error ---");
            eprint!("{s}");
            if !s.ends_with('\n') {
                eprintln!();
            }
            eprintln!("---");
        }
        print!("{}", render_test(&r));
    }
    Ok(if ok { 0 } else { 1 })
}

/// A test got through: discovered, with no error and no sign-in wanting.
pub(super) fn test_passed(r: &Value) -> bool {
    r["discovered"] == true && r["error"].is_null() && r["needs_sign_in"] != true
}

/// The tool's arguments: a JSON object.
fn parse_arguments(a: &str) -> Result<Value, McpError> {
    match serde_json::from_str::<Value>(a) {
        Ok(v @ Value::Object(_)) => Ok(v),
        Ok(_) => Err(McpError::Usage(
            "the arguments must be a JSON object, like '{\"message\": \"hi\"}'".into(),
        )),
        Err(e) => Err(McpError::Usage(format!("the arguments are not JSON: {e}"))),
    }
}

/// A path segment: everything but unreserved characters percent-encoded (`server/tool`
/// reaches the daemon as `server%2Ftool`).
pub(crate) fn seg(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            o.push(b as char);
        } else {
            o.push_str(&format!("%{b:02X}"));
        }
    }
    o
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    fn no_stdin(_: &str) -> Result<String, McpError> {
        panic!("standard input read when nothing asked for it")
    }

    /// Parse `albedo-mcp mcp …`.
    fn parse(args: &[&str]) -> McpArgs {
        let mut all = vec!["albedo-mcp", "mcp"];
        all.extend_from_slice(args);
        match crate::cli::Cli::try_parse_from(all) {
            Ok(crate::cli::Cli {
                command: crate::cli::Command::Mcp(m),
            }) => *m,
            Ok(_) => panic!("not the mcp command"),
            Err(e) => panic!("{e}"),
        }
    }

    fn patch_of(args: &[&str], lines: &[&str]) -> Result<Value, McpError> {
        let mut lines: std::collections::VecDeque<String> =
            lines.iter().map(|s| s.to_string()).collect();
        let mut read = |_: &str| {
            lines
                .pop_front()
                .ok_or_else(|| McpError::Stdin("it is empty".into()))
        };
        match parse(args).command {
            McpCommand::Add { name, server } => build_patch(&name, &server, None, true, &mut read),
            McpCommand::Edit {
                name,
                server,
                remove,
            } => build_patch(&name, &server, Some(&remove), false, &mut read),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn add_http_with_secrets() {
        let p = patch_of(
            &[
                "add",
                "search",
                "--url",
                "https://mcp.example.com/mcp",
                "--bearer-token",
                "-",
                "--header",
                "X-Api-Key=k1",
                "--bearer-token-env",
                "MY_TOKEN",
            ],
            &["s3cret"],
        )
        .unwrap();
        assert_eq!(
            p,
            json!({
                "servers": {"search": {"type": "http", "url": "https://mcp.example.com/mcp",
                                        "bearerTokenEnvVar": "MY_TOKEN"}},
                "secrets": {"search": {"bearer_token": "s3cret",
                                        "header": {"name": "X-Api-Key", "value": "k1"}}}
            })
        );
    }

    #[test]
    fn add_stdio_after_double_dash() {
        let p = patch_of(
            &[
                "add",
                "fs",
                "--env",
                "TOKEN=abc",
                "--env",
                "OTHER=-",
                "--disabled",
                "--cwd",
                "/srv",
                "--",
                "npx",
                "-y",
                "@x/server",
                "--flag",
                "/srv/my docs",
            ],
            &["from-stdin"],
        )
        .unwrap();
        assert_eq!(
            p,
            json!({
                "servers": {"fs": {"type": "stdio", "command": "npx",
                                    "args": ["-y", "@x/server", "--flag", "/srv/my docs"],
                                    "cwd": "/srv", "enabled": false}},
                "secrets": {"fs": {"env": {"TOKEN": "abc", "OTHER": "from-stdin"}}}
            })
        );
        // The options before `--` are albedo's; those after are the server's.
        let p = patch_of(&["add", "x", "--", "srv", "--json", "--url", "u"], &[]).unwrap();
        assert_eq!(p["servers"]["x"]["args"], json!(["--json", "--url", "u"]));
        assert!(p.get("secrets").is_none());
    }

    #[test]
    fn add_with_a_command_line() {
        let p = patch_of(&["add", "g", "--command-line", "uvx mcp-server-git"], &[]).unwrap();
        assert_eq!(
            p,
            json!({"servers": {"g": {"type": "stdio", "command_line": "uvx mcp-server-git"}}})
        );
    }

    #[test]
    fn add_refusals() {
        let usage = |args: &[&str]| match patch_of(args, &[]) {
            Err(McpError::Usage(m)) => m,
            other => panic!("{args:?}: {other:?}"),
        };
        assert!(usage(&["add", "x"]).contains("--url"));
        assert!(usage(&["add", "x", "--url", "u", "--", "cmd"]).contains("one of"));
        assert!(usage(&["add", "x", "--url", "u", "--env", "A=b"]).contains("stdio"));
        assert!(usage(&["add", "x", "--bearer-token", "t", "--", "cmd"]).contains("HTTP"));
        assert!(usage(&["add", "x", "--url", "u", "--header", "novalue"]).contains("NAME=VALUE"));
        assert!(usage(&["add", "x", "--url", "u", "--bearer-token", ""]).contains("empty"));
        // A value of `-` read from standard input would mean "remove" to the daemon.
        assert!(matches!(
            patch_of(&["add", "x", "--url", "u", "--bearer-token", "-"], &["-"]),
            Err(McpError::Usage(_))
        ));
        assert!(matches!(
            patch_of(&["add", "x", "--url", "u", "--bearer-token", "-"], &[]),
            Err(McpError::Stdin(_))
        ));
    }

    #[test]
    fn edit_changes_only_what_is_given() {
        let p = patch_of(&["edit", "s", "--bearer-token-env", "V"], &[]).unwrap();
        assert_eq!(p, json!({"servers": {"s": {"bearerTokenEnvVar": "V"}}}));
        let p = patch_of(
            &[
                "edit",
                "s",
                "--remove-bearer-token",
                "--remove-header",
                "--remove-env",
                "A",
                "--remove-bearer-token-env",
                "--enabled",
            ],
            &[],
        )
        .unwrap();
        assert_eq!(
            p,
            json!({
                "servers": {"s": {"bearerTokenEnvVar": null, "enabled": true}},
                "secrets": {"s": {"bearer_token": "-", "header": "-", "env": {"A": "-"}}}
            })
        );
        let p = patch_of(&["edit", "s", "--command-line", "node b.js"], &[]).unwrap();
        assert_eq!(
            p,
            json!({"servers": {"s": {"type": "stdio", "command_line": "node b.js"}}})
        );
        assert!(matches!(
            patch_of(&["edit", "s"], &[]),
            Err(McpError::Usage(m)) if m.contains("nothing to change")
        ));
        let mut r = no_stdin;
        let e = build_patch("s", &ServerFlags::default(), None, false, &mut r);
        assert!(e.is_err());
    }

    #[test]
    fn clap_takes_a_dash_and_global_flags() {
        let m = parse(&[
            "edit",
            "s",
            "--bearer-token",
            "-",
            "--json",
            "--daemon",
            "h:1",
        ]);
        assert!(m.json);
        assert_eq!(m.daemon.as_deref(), Some("h:1"));
        let m = parse(&["--json", "call", "everything/echo", r#"{"message":"hi"}"#]);
        assert!(m.json);
        assert!(matches!(
            m.command,
            McpCommand::Call {
                arguments: Some(_),
                ..
            }
        ));
        assert!(crate::cli::Cli::try_parse_from([
            "albedo-mcp",
            "mcp",
            "edit",
            "s",
            "--bearer-token",
            "x",
            "--remove-bearer-token"
        ])
        .is_err());
    }

    #[test]
    fn path_segments() {
        assert_eq!(seg("mcp__a__b"), "mcp__a__b");
        assert_eq!(seg("srv/tool"), "srv%2Ftool");
        assert_eq!(seg("a b?#"), "a%20b%3F%23");
        assert_eq!(seg("é"), "%C3%A9");
    }

    #[test]
    fn error_json() {
        let e = McpError::Exists("a".into());
        assert_eq!(e.exit_code(), 1);
        assert_eq!(e.to_json()["error"]["code"], "exists");
        let u: McpError = ClientError::Unreachable {
            at: "x".into(),
            reason: "r".into(),
        }
        .into();
        assert_eq!(u.exit_code(), 2);
    }
}
