//! `albedo-mcp mcp …`: the MCP servers of a running daemon from the command line: list,
//! show, add, edit, remove, enable, disable, test, list and call tools, import.
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

use super::client::{locate, ClientError, DaemonClient};
use awc::http::Method;
use clap::{Args, Subcommand};
use serde_json::{json, Map, Value};
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
        s.push_str(" (sign in from the web pane: albedo-mcp web)");
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
        .call(Method::GET, &format!("/sessions/{}/tools", seg(&id)), None)
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
fn test_passed(r: &Value) -> bool {
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

/// Standard input's terminal with echo off until dropped (the old settings put back).
struct NoEcho(Option<nix::libc::termios>);

impl NoEcho {
    fn new() -> NoEcho {
        // SAFETY: tcgetattr and tcsetattr on fd 0 with a termios the call fills; a failure
        // (not a terminal) leaves everything as it was.
        unsafe {
            let mut t: nix::libc::termios = std::mem::zeroed();
            if nix::libc::tcgetattr(0, &mut t) != 0 {
                return NoEcho(None);
            }
            let old = t;
            t.c_lflag &= !nix::libc::ECHO;
            if nix::libc::tcsetattr(0, nix::libc::TCSANOW, &t) != 0 {
                return NoEcho(None);
            }
            NoEcho(Some(old))
        }
    }
}

impl Drop for NoEcho {
    fn drop(&mut self) {
        if let Some(old) = &self.0 {
            // SAFETY: puts back the settings read in `new`.
            unsafe {
                nix::libc::tcsetattr(0, nix::libc::TCSANOW, old);
            }
        }
    }
}

/// One line of standard input, its line end removed. On a terminal: a prompt, and what is
/// typed not shown.
fn stdin_line(what: &str) -> Result<String, McpError> {
    use std::io::IsTerminal;
    let _no_echo = if std::io::stdin().is_terminal() {
        eprint!("{what} (not shown), then Enter: ");
        Some(NoEcho::new())
    } else {
        None
    };
    let read = read_stdin_line();
    if _no_echo.is_some() {
        eprintln!();
    }
    read
}

fn read_stdin_line() -> Result<String, McpError> {
    let mut s = String::new();
    let n = std::io::stdin()
        .read_line(&mut s)
        .map_err(|e| McpError::Stdin(e.to_string()))?;
    if n == 0 {
        return Err(McpError::Stdin("it is empty".into()));
    }
    let t = s.strip_suffix('\n').unwrap_or(&s);
    Ok(t.strip_suffix('\r').unwrap_or(t).to_owned())
}

/// A secret's value: `-` reads the next line of standard input. The PATCH reads `""` as
/// "keep" and `-` as "remove", so neither may be a value.
fn secret_value(
    what: &str,
    given: &str,
    read: &mut dyn FnMut(&str) -> Result<String, McpError>,
) -> Result<String, McpError> {
    let v = if given == "-" {
        read(what)?
    } else {
        given.to_owned()
    };
    if v.is_empty() || v == "-" {
        let remove = match what.split_once(' ') {
            Some(("--env", key)) => format!("--remove-env {key}"),
            Some((flag, _)) => format!("--remove-{}", flag.trim_start_matches("--")),
            None => format!("--remove-{}", what.trim_start_matches("--")),
        };
        return Err(McpError::Usage(format!(
            "{what}: an empty value (or `-` read from standard input) is not a secret; \
             to remove it use {remove}"
        )));
    }
    Ok(v)
}

/// `NAME=VALUE`, both sides non-empty before the value is read.
fn split_pair<'a>(flag: &str, s: &'a str) -> Result<(&'a str, &'a str), McpError> {
    match s.split_once('=') {
        Some((k, v)) if !k.trim().is_empty() && !v.is_empty() => Ok((k.trim(), v)),
        _ => Err(McpError::Usage(format!(
            "{flag} takes NAME=VALUE (or NAME=- to read the value from standard input), not {s:?}"
        ))),
    }
}

/// The `PATCH /settings/mcp` body for `add` (`adding`) or `edit`. Secret values read from
/// standard input with `read`, in this order: the bearer token, the header, each `--env`.
pub fn build_patch(
    name: &str,
    f: &ServerFlags,
    remove: Option<&RemoveFlags>,
    adding: bool,
    read: &mut dyn FnMut(&str) -> Result<String, McpError>,
) -> Result<Value, McpError> {
    let none = RemoveFlags::default();
    let r = remove.unwrap_or(&none);
    let mut server = Map::new();
    let transports = [
        f.url.is_some(),
        !f.command.is_empty(),
        f.command_line.is_some(),
    ]
    .iter()
    .filter(|x| **x)
    .count();
    if transports > 1 {
        return Err(McpError::Usage(
            "give one of --url URL, --command-line STRING, or -- COMMAND ARGS...".into(),
        ));
    }
    if adding && transports == 0 {
        return Err(McpError::Usage(
            "a new server needs --url URL (HTTP) or -- COMMAND ARGS... (stdio)".into(),
        ));
    }
    let kind = if let Some(u) = &f.url {
        server.insert("type".into(), json!("http"));
        server.insert("url".into(), json!(u));
        Some("http")
    } else if let Some((cmd, args)) = f.command.split_first() {
        server.insert("type".into(), json!("stdio"));
        server.insert("command".into(), json!(cmd));
        server.insert("args".into(), json!(args));
        Some("stdio")
    } else if let Some(cl) = &f.command_line {
        server.insert("type".into(), json!("stdio"));
        server.insert("command_line".into(), json!(cl));
        Some("stdio")
    } else {
        None
    };
    let http_only = f.bearer_token.is_some()
        || f.bearer_token_env.is_some()
        || f.header.is_some()
        || r.remove_bearer_token
        || r.remove_header
        || r.remove_bearer_token_env;
    let stdio_only = !f.env.is_empty() || !r.remove_env.is_empty() || f.cwd.is_some();
    if kind == Some("stdio") && http_only {
        return Err(McpError::Usage(
            "--bearer-token, --bearer-token-env and --header are for HTTP servers".into(),
        ));
    }
    if kind == Some("http") && stdio_only {
        return Err(McpError::Usage(
            "--env and --cwd are for stdio servers".into(),
        ));
    }
    if let Some(d) = &f.cwd {
        server.insert("cwd".into(), json!(d));
    }
    if let Some(v) = &f.bearer_token_env {
        if v.trim().is_empty() {
            return Err(McpError::Usage(
                "--bearer-token-env takes a variable's name".into(),
            ));
        }
        server.insert("bearerTokenEnvVar".into(), json!(v.trim()));
    }
    if r.remove_bearer_token_env {
        server.insert("bearerTokenEnvVar".into(), Value::Null);
    }
    if !f.enabled_tools.is_empty() {
        server.insert("enabledTools".into(), json!(f.enabled_tools));
    }
    if !f.disabled_tools.is_empty() {
        server.insert("disabledTools".into(), json!(f.disabled_tools));
    }
    if r.all_tools {
        server.insert("enabledTools".into(), Value::Null);
        server.insert("disabledTools".into(), Value::Null);
    }
    if f.disabled {
        server.insert("enabled".into(), json!(false));
    }
    if r.enabled {
        server.insert("enabled".into(), json!(true));
    }

    let mut secrets = Map::new();
    if let Some(t) = &f.bearer_token {
        secrets.insert(
            "bearer_token".into(),
            json!(secret_value("--bearer-token", t, read)?),
        );
    }
    if r.remove_bearer_token {
        secrets.insert("bearer_token".into(), json!("-"));
    }
    if let Some(h) = &f.header {
        let (hn, hv) = split_pair("--header", h)?;
        let value = secret_value(&format!("--header {hn}"), hv, read)?;
        secrets.insert("header".into(), json!({"name": hn, "value": value}));
    }
    if r.remove_header {
        secrets.insert("header".into(), json!("-"));
    }
    let mut env = Map::new();
    for e in &f.env {
        let (k, v) = split_pair("--env", e)?;
        let value = secret_value(&format!("--env {k}"), v, read)?;
        env.insert(k.to_owned(), json!(value));
    }
    for k in &r.remove_env {
        if k.trim().is_empty() || k.contains('=') {
            return Err(McpError::Usage(format!(
                "--remove-env takes a variable's name, not {k:?}"
            )));
        }
        if env.contains_key(k.trim()) {
            return Err(McpError::Usage(format!("{k} is both set and removed")));
        }
        env.insert(k.trim().to_owned(), json!("-"));
    }
    if !env.is_empty() {
        secrets.insert("env".into(), Value::Object(env));
    }

    if !adding && server.is_empty() && secrets.is_empty() {
        return Err(McpError::Usage(
            "nothing to change: give the settings to change (see: albedo-mcp mcp edit --help)"
                .into(),
        ));
    }
    let mut patch = json!({"servers": {name: server}});
    if !secrets.is_empty() {
        patch["secrets"] = json!({name: secrets});
    }
    Ok(patch)
}

/// A path segment: everything but unreserved characters percent-encoded (`server/tool`
/// reaches the daemon as `server%2Ftool`).
fn seg(s: &str) -> String {
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

/// A word as a shell would need it: unchanged when plain, else in single quotes.
fn shell_word(w: &str) -> String {
    let plain = !w.is_empty()
        && w.bytes().all(|b| {
            b.is_ascii_alphanumeric()
                || matches!(
                    b,
                    b'-' | b'_' | b'.' | b'/' | b'@' | b':' | b'=' | b',' | b'+' | b'%'
                )
        });
    if plain {
        w.to_owned()
    } else {
        format!("'{}'", w.replace('\'', "'\\''"))
    }
}

/// What a server runs or reaches: its URL, or its command line.
fn target(s: &Value) -> String {
    if let Some(u) = s["url"].as_str() {
        return u.to_owned();
    }
    let mut words: Vec<String> = s["command"].as_str().map(shell_word).into_iter().collect();
    for a in s["args"].as_array().into_iter().flatten() {
        words.push(shell_word(a.as_str().unwrap_or("")));
    }
    words.join(" ")
}

/// Columns padded to their widest cell (the last column not padded).
fn table(rows: &[Vec<String>]) -> String {
    let cols = rows.iter().map(Vec::len).max().unwrap_or(0);
    let mut widths = vec![0; cols];
    for r in rows {
        for (i, c) in r.iter().enumerate() {
            widths[i] = widths[i].max(c.chars().count());
        }
    }
    let mut out = String::new();
    for r in rows {
        let mut line = String::new();
        for (i, c) in r.iter().enumerate() {
            line.push_str(c);
            if i + 1 < r.len() {
                let pad = widths[i] - c.chars().count() + 2;
                line.extend(std::iter::repeat_n(' ', pad));
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// `mcp list`: the problems, then a table of the servers.
pub fn render_list(v: &Value) -> String {
    let mut out = String::new();
    for p in v["problems"].as_array().into_iter().flatten() {
        out.push_str(&format!("problem: {}\n", p.as_str().unwrap_or("")));
    }
    if v["changed_on_disk"] == true {
        out.push_str(
            "note: extensions.json changed on disk since the daemon read it \
             (albedo-mcp mcp reload reads it again)\n",
        );
    }
    let servers = v["servers"].as_object();
    if servers.is_none_or(|s| s.is_empty()) {
        out.push_str("no MCP servers configured (add one: albedo-mcp mcp add NAME --url URL | -- COMMAND ARGS...)\n");
        return out;
    }
    let mut rows = vec![["NAME", "TYPE", "ENABLED", "STATE", "TOOLS", "TARGET"]
        .map(String::from)
        .to_vec()];
    for (name, s) in servers.into_iter().flatten() {
        let state = if s.get("problem").is_some() {
            "invalid".to_owned()
        } else {
            s["status"]["state"].as_str().unwrap_or("-").to_owned()
        };
        rows.push(vec![
            name.clone(),
            s["type"].as_str().unwrap_or("?").to_owned(),
            if s["enabled"] == false { "no" } else { "yes" }.to_owned(),
            state,
            s["status"]["tools"]
                .as_u64()
                .map(|n| n.to_string())
                .unwrap_or_else(|| "-".into()),
            target(s),
        ]);
    }
    out.push_str(&table(&rows));
    out
}

/// The names of a map of values held elsewhere (`env`, `headers`), each with where its
/// value comes from; never a value.
fn sourced_names(m: &Value) -> String {
    let Some(m) = m.as_object() else {
        return String::new();
    };
    m.iter()
        .map(|(k, v)| {
            let from = if v.get("secret").is_some() {
                "secret".to_owned()
            } else if let Some(e) = v["env"].as_str() {
                format!("from ${e}")
            } else if v.get("inline").is_some() {
                "inlined by hand: hidden and not used; set it again".to_owned()
            } else {
                "in extensions.json".to_owned()
            };
            format!("{k} ({from})")
        })
        .collect::<Vec<_>>()
        .join(", ")
}

fn list_or(v: &Value, none: &str) -> String {
    match v.as_array() {
        Some(a) if !a.is_empty() => a
            .iter()
            .map(|x| {
                x.as_str()
                    .map(str::to_owned)
                    .unwrap_or_else(|| x.to_string())
            })
            .collect::<Vec<_>>()
            .join(", "),
        Some(_) => "none".to_owned(),
        None => none.to_owned(),
    }
}

/// `mcp show NAME`: settings, status, sign-in and which secrets are set.
pub fn render_show(name: &str, s: &Value) -> String {
    let mut rows: Vec<Vec<String>> = Vec::new();
    let mut row = |k: &str, v: String| rows.push(vec![k.to_owned(), v]);
    row("name", name.to_owned());
    if let Some(p) = s["problem"].as_str() {
        row("problem", p.to_owned());
    }
    row("type", s["type"].as_str().unwrap_or("?").to_owned());
    if s["url"].is_string() {
        row("url", target(s));
    } else if s["command"].is_string() {
        row("command", target(s));
    }
    if let Some(d) = s["cwd"].as_str() {
        row("cwd", d.to_owned());
    }
    row(
        "enabled",
        if s["enabled"] == false { "no" } else { "yes" }.to_owned(),
    );
    if s["env"].is_object() {
        row("env", sourced_names(&s["env"]));
    }
    if s["headers"].is_object() {
        row("headers", sourced_names(&s["headers"]));
    }
    let mut bearer = Vec::new();
    if s["bearerToken"].is_object() {
        bearer.push("secret".to_owned());
    }
    if let Some(v) = s["bearerTokenEnvVar"].as_str() {
        bearer.push(format!("from ${v}"));
    }
    if !bearer.is_empty() {
        row("bearer token", bearer.join(", else "));
    }
    row("enabled tools", list_or(&s["enabledTools"], "all"));
    row("disabled tools", list_or(&s["disabledTools"], "none"));
    for (k, label) in [
        ("startupTimeoutMs", "startup timeout"),
        ("callTimeoutMs", "call timeout"),
    ] {
        if let Some(n) = s[k].as_u64() {
            row(label, format!("{n} ms"));
        }
    }
    let st = &s["status"];
    if st.is_object() {
        let mut line = st["state"].as_str().unwrap_or("?").replace('_', " ");
        if let Some(e) = st["era"].as_str() {
            line.push_str(&format!(", {e} era"));
        }
        if let Some(p) = st["protocol_version"].as_str() {
            line.push_str(&format!(", protocol {p}"));
        }
        if let Some(n) = st["tools"].as_u64() {
            line.push_str(&format!(", {n} tool{}", if n == 1 { "" } else { "s" }));
        }
        row("state", line);
        if let Some(e) = st["last_error"].as_str() {
            row("last error", e.to_owned());
        }
    }
    if let Some(a) = s["auth"].as_object() {
        let mut line = a
            .get("state")
            .and_then(Value::as_str)
            .unwrap_or("?")
            .replace('_', " ");
        for (k, v) in a {
            if k != "state" && !v.is_null() && !v.is_object() && !v.is_array() {
                let v = v
                    .as_str()
                    .map(str::to_owned)
                    .unwrap_or_else(|| v.to_string());
                line.push_str(&format!(", {k}: {v}"));
            }
        }
        row("sign-in", line);
    }
    let sec = &s["secrets"];
    if sec.is_object() {
        let mut set = Vec::new();
        if sec["bearer_token"] == true {
            set.push("bearer token".to_owned());
        }
        if let Some(h) = sec["header"].as_str() {
            set.push(format!("header {h}"));
        }
        let env = list_or(&sec["env"], "");
        if !env.is_empty() && env != "none" {
            set.push(format!("env {env}"));
        }
        if sec["oauth_client"] == true {
            set.push("OAuth client".to_owned());
        }
        row(
            "secrets set",
            if set.is_empty() {
                "none".to_owned()
            } else {
                set.join("; ")
            },
        );
    }
    table(&rows)
}

/// `mcp tools`: the advertised name, the server, the first line of the description.
pub fn render_tools(tools: &[Value]) -> String {
    if tools.is_empty() {
        return "no tools\n".to_owned();
    }
    let mut rows = vec![vec![
        "NAME".to_owned(),
        "SERVER".into(),
        "DESCRIPTION".into(),
    ]];
    for t in tools {
        let mut d: String = t["description"]
            .as_str()
            .unwrap_or("")
            .lines()
            .next()
            .unwrap_or("")
            .to_owned();
        if d.chars().count() > 80 {
            d = d.chars().take(79).collect::<String>() + "…";
        }
        rows.push(vec![
            t["name"].as_str().unwrap_or("?").to_owned(),
            t["server"].as_str().unwrap_or("").to_owned(),
            d,
        ]);
    }
    table(&rows)
}

/// A tool's result for people: its text, a line for each other kind of content; the
/// structured content when there is nothing else.
pub fn render_result(r: &Value) -> String {
    let mut out = String::new();
    let mut line = |s: &str| {
        out.push_str(s);
        if !s.ends_with('\n') {
            out.push('\n');
        }
    };
    let content = r["content"].as_array().filter(|c| !c.is_empty());
    for c in content.into_iter().flatten() {
        match c["type"].as_str() {
            Some("text") => line(c["text"].as_str().unwrap_or("")),
            Some(k @ ("image" | "audio")) => line(&format!(
                "[{k} {}, {} bytes of base64]",
                c["mimeType"].as_str().unwrap_or("?"),
                c["data"].as_str().map_or(0, str::len)
            )),
            Some("resource") => match c["resource"]["text"].as_str() {
                Some(t) => line(t),
                None => line(&format!(
                    "[resource {}]",
                    c["resource"]["uri"].as_str().unwrap_or("?")
                )),
            },
            Some("resource_link") => line(&format!("[link {}]", c["uri"].as_str().unwrap_or("?"))),
            _ => line(&c.to_string()),
        }
    }
    if content.is_none() {
        if let Some(sc) = r.get("structuredContent").filter(|v| !v.is_null()) {
            line(&serde_json::to_string_pretty(sc).unwrap_or_else(|_| sc.to_string()));
        } else if let Some(other) = r.get("result") {
            line(&serde_json::to_string_pretty(other).unwrap_or_else(|_| other.to_string()));
        }
    }
    out
}

/// `mcp test`: the stages reached, what was found, and the error.
pub fn render_test(r: &Value) -> String {
    let mut rows: Vec<Vec<String>> = Vec::new();
    let mark = |v: &Value| match v.as_bool() {
        Some(true) => Some("✓".to_owned()),
        Some(false) => Some("✗".to_owned()),
        None => None,
    };
    for stage in ["spawned", "initialized", "discovered"] {
        if stage == "spawned" && r["transport"] != "stdio" && !r[stage].is_boolean() {
            continue;
        }
        if let Some(m) = mark(&r[stage]) {
            rows.push(vec![stage.to_owned(), m]);
        }
    }
    if r["discovered"] == true {
        let n = |k: &str| r[k].as_u64().unwrap_or(0);
        rows.push(vec![
            "found".into(),
            format!(
                "{} tools, {} resources, {} prompts",
                n("tools"),
                n("resources"),
                n("prompts")
            ),
        ]);
    }
    let mut proto = Vec::new();
    if let Some(e) = r["era"].as_str() {
        proto.push(format!("{e} era"));
    }
    if let Some(p) = r["protocol_version"].as_str() {
        proto.push(format!("protocol {p}"));
    }
    if !proto.is_empty() {
        rows.push(vec!["protocol".into(), proto.join(", ")]);
    }
    if let Some(ms) = r["elapsed_ms"].as_u64() {
        rows.push(vec!["took".into(), format!("{ms} ms")]);
    }
    if r["needs_sign_in"] == true {
        rows.push(vec![
            "sign-in".into(),
            "needed (sign in from the web pane: albedo-mcp web)".into(),
        ]);
    }
    if let Some(e) = r["error"].as_str() {
        rows.push(vec!["error".into(), e.to_owned()]);
    }
    let mut out = table(&rows);
    out.push_str(if test_passed(r) {
        "the server works\n"
    } else {
        "the server did not get through\n"
    });
    out
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

    fn settings_sample() -> Value {
        json!({
            "retryMs": 30000, "revision": "ab", "changed_on_disk": false,
            "problems": ["extensions.json: server \"bad\": no command"],
            "servers": {
                "bad": {"problem": "no command", "enabled": true},
                "docs": {"type": "stdio", "command": "npx",
                         "args": ["-y", "@m/server-filesystem", "/srv/my docs"],
                         "cwd": "/srv",
                         "env": {"TOKEN": {"secret": "env.TOKEN"}, "HOME2": {"env": "MY_VAR"}},
                         "enabled": true, "enabledTools": null, "disabledTools": ["write_file"],
                         "status": {"state": "connected", "era": "legacy",
                                    "protocol_version": "2025-06-18", "tools": 12,
                                    "last_error": null},
                         "auth": {"state": "none"},
                         "secrets": {"bearer_token": false, "header": null, "env": ["TOKEN"],
                                     "oauth_client": false}},
                "search": {"type": "http", "url": "https://mcp.example.com/mcp",
                           "headers": {"X-Api-Key": {"secret": "header"}},
                           "enabled": false,
                           "status": {"state": "disabled", "tools": null},
                           "auth": {"state": "none"},
                           "secrets": {"bearer_token": true, "header": "X-Api-Key", "env": [],
                                       "oauth_client": false}}
            }
        })
    }

    #[test]
    fn list_table() {
        let t = render_list(&settings_sample());
        let expected = "\
problem: extensions.json: server \"bad\": no command
NAME    TYPE   ENABLED  STATE      TOOLS  TARGET
bad     ?      yes      invalid    -
docs    stdio  yes      connected  12     npx -y @m/server-filesystem '/srv/my docs'
search  http   no       disabled   -      https://mcp.example.com/mcp
";
        assert_eq!(t, expected);
        assert!(render_list(&json!({"servers": {}})).contains("no MCP servers"));
    }

    #[test]
    fn show_names_secrets_never_values() {
        let v = settings_sample();
        let docs = render_show("docs", &v["servers"]["docs"]);
        assert!(docs.contains("command         npx -y @m/server-filesystem '/srv/my docs'"));
        assert!(docs.contains("env             HOME2 (from $MY_VAR), TOKEN (secret)"));
        assert!(docs.contains("disabled tools  write_file"));
        assert!(docs.contains("enabled tools   all"));
        assert!(
            docs.contains("state           connected, legacy era, protocol 2025-06-18, 12 tools")
        );
        assert!(docs.contains("secrets set     env TOKEN"));
        let search = render_show("search", &v["servers"]["search"]);
        assert!(search.contains("enabled         no"));
        assert!(search.contains("headers         X-Api-Key (secret)"));
        assert!(search.contains("secrets set     bearer token; header X-Api-Key"));
        assert!(search.contains("sign-in         none"));
    }

    #[test]
    fn results_and_tests() {
        let r = json!({"content": [{"type": "text", "text": "Echo: hi"},
                                   {"type": "image", "mimeType": "image/png", "data": "AAAA"}],
                       "isError": false, "outcome": "ok"});
        assert_eq!(
            render_result(&r),
            "Echo: hi\n[image image/png, 4 bytes of base64]\n"
        );
        let r = json!({"content": [], "structuredContent": {"a": 1}});
        assert_eq!(render_result(&r), "{\n  \"a\": 1\n}\n");

        let ok = json!({"server": "docs", "transport": "stdio", "spawned": true,
                        "initialized": true, "discovered": true, "tools": 12, "resources": 0,
                        "prompts": 1, "era": "legacy", "protocol_version": "2025-06-18",
                        "error": null, "needs_sign_in": false, "stderr": "", "elapsed_ms": 812});
        assert!(test_passed(&ok));
        let t = render_test(&ok);
        assert!(t.contains("spawned      ✓"), "{t}");
        assert!(
            t.contains("found        12 tools, 0 resources, 1 prompts"),
            "{t}"
        );
        assert!(t.ends_with("the server works\n"));
        let bad = json!({"server": "x", "transport": "stdio", "spawned": true,
                         "initialized": false, "discovered": false, "error": "it exited (1)",
                         "stderr": "boom"});
        assert!(!test_passed(&bad));
        let t = render_test(&bad);
        assert!(t.contains("initialized  ✗"), "{t}");
        assert!(t.contains("error        it exited (1)"), "{t}");
        assert!(t.ends_with("did not get through\n"));
    }

    #[test]
    fn tools_table() {
        let t = render_tools(&[
            json!({"name": "mcp__e__echo", "server": "e", "description": "Echoes\nmore"}),
            json!({"name": "mcp__e__add", "server": "e", "description": "x".repeat(100)}),
        ]);
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines[0], "NAME          SERVER  DESCRIPTION");
        assert_eq!(lines[1], "mcp__e__echo  e       Echoes");
        assert!(lines[2].ends_with('…'));
        assert_eq!(render_tools(&[]), "no tools\n");
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
