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
//! Owns: reading those formats into a settings patch ([`plan`]) and the command ([`run`]).
//! Must not touch: the settings files (only the daemon writes them).

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

// ---------------------------------------------------------------------------------------
// Variables in values.

/// Which `${...}` forms a file's tool expands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Dialect {
    /// Claude Code `${VAR}` / `${VAR:-default}`, and Cursor `${env:VAR}`, `${workspaceFolder}`.
    Claude,
    /// VS Code: `${env:VAR}`, `${input:ID}`, `${workspaceFolder}` and its other predefined
    /// variables.
    VsCode,
    /// Codex: values are literal.
    Literal,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Piece {
    Text(String),
    Env {
        name: String,
        default: bool,
    },
    Input(String),
    Workspace,
    /// A variable albedo cannot resolve (`${userHome}`, `${command:...}`): its inside.
    Other(String),
}

fn is_var_name(s: &str) -> bool {
    let mut b = s.bytes();
    matches!(b.next(), Some(c) if c.is_ascii_alphabetic() || c == b'_')
        && b.all(|c| c.is_ascii_alphanumeric() || c == b'_')
}

fn pieces(s: &str, dialect: Dialect) -> Vec<Piece> {
    if dialect == Dialect::Literal {
        return vec![Piece::Text(s.to_owned())];
    }
    let mut out = Vec::new();
    let mut text = String::new();
    let mut rest = s;
    while let Some(i) = rest.find("${") {
        let Some(j) = rest[i + 2..].find('}') else {
            break;
        };
        text.push_str(&rest[..i]);
        let inner = &rest[i + 2..i + 2 + j];
        rest = &rest[i + 3 + j..];
        if !text.is_empty() {
            out.push(Piece::Text(std::mem::take(&mut text)));
        }
        let piece = if let Some(v) = inner.strip_prefix("env:") {
            Piece::Env {
                name: v.to_owned(),
                default: false,
            }
        } else if inner == "workspaceFolder" {
            Piece::Workspace
        } else if let (Dialect::VsCode, Some(id)) = (dialect, inner.strip_prefix("input:")) {
            Piece::Input(id.to_owned())
        } else if dialect == Dialect::Claude {
            let (name, default) = match inner.split_once(":-") {
                Some((n, _)) => (n, true),
                None => (inner, false),
            };
            let predefined = ["userHome", "workspaceFolderBasename", "pathSeparator"];
            if is_var_name(name) && !predefined.contains(&name) {
                Piece::Env {
                    name: name.to_owned(),
                    default,
                }
            } else {
                Piece::Other(inner.to_owned())
            }
        } else {
            Piece::Other(inner.to_owned())
        };
        out.push(piece);
    }
    text.push_str(rest);
    if !text.is_empty() || out.is_empty() {
        out.push(Piece::Text(text));
    }
    out
}

/// What an imported file knows beyond each server: its variables' context.
struct Ctx<'a> {
    dialect: Dialect,
    /// The workspace folder (`${workspaceFolder}`), when the file sits in one's `.vscode` or
    /// `.cursor` folder.
    workspace: Option<&'a Path>,
    /// VS Code inputs: id → description.
    inputs: &'a BTreeMap<String, String>,
}

impl Ctx<'_> {
    fn input(&self, id: &str) -> String {
        match self.inputs.get(id) {
            Some(d) => format!("VS Code's input {d:?} (${{input:{id}}})"),
            None => format!("the VS Code input ${{input:{id}}}"),
        }
    }

    /// A plain field (command, argument, cwd, URL): text, with `${workspaceFolder}` resolved;
    /// any other variable is a reason to skip the server.
    fn plain(&self, field: &str, s: &str) -> Result<String, String> {
        let mut out = String::new();
        for p in pieces(s, self.dialect) {
            match p {
                Piece::Text(t) => out.push_str(&t),
                Piece::Workspace => match self.workspace {
                    Some(w) => out.push_str(&w.to_string_lossy()),
                    None => {
                        return Err(format!(
                            "`{field}` uses ${{workspaceFolder}}, and the workspace is not known \
                             (import the file from its project's .vscode or .cursor folder)"
                        ))
                    }
                },
                Piece::Env { name, .. } => {
                    return Err(format!(
                        "`{field}` uses the variable {name}: albedo-mcp does not expand \
                         variables in command, args, cwd or url"
                    ))
                }
                Piece::Input(id) => {
                    return Err(format!(
                        "`{field}` asks {}, which cannot be answered here",
                        self.input(&id)
                    ))
                }
                Piece::Other(v) => {
                    return Err(format!(
                        "`{field}` uses ${{{v}}}, which albedo-mcp cannot resolve"
                    ))
                }
            }
        }
        Ok(out)
    }

    /// A value that may be a secret (an `env` value, a header).
    fn secret(&self, s: &str) -> Class {
        let ps = pieces(s, self.dialect);
        if let Some(id) = ps.iter().find_map(|p| match p {
            Piece::Input(id) => Some(id),
            _ => None,
        }) {
            return Class::Unresolved(format!(
                "it asks {}, which cannot be answered here; set it in the web pane after the \
                 import",
                self.input(id)
            ));
        }
        if let [Piece::Env { name, default }] = ps.as_slice() {
            return reference(name, *default);
        }
        let mut out = String::new();
        for p in &ps {
            match p {
                Piece::Text(t) => out.push_str(t),
                Piece::Workspace if self.workspace.is_some() => {
                    out.push_str(&self.workspace.unwrap_or(Path::new("")).to_string_lossy())
                }
                Piece::Workspace => {
                    return Class::Unresolved(
                        "it uses ${workspaceFolder}, and the workspace is not known".into(),
                    )
                }
                Piece::Env { .. } => {
                    return Class::Unresolved(
                        "it mixes text with a variable, which albedo-mcp cannot store: put the \
                         whole value in one variable"
                            .into(),
                    )
                }
                Piece::Input(_) => {}
                Piece::Other(v) => {
                    return Class::Unresolved(format!(
                        "it uses ${{{v}}}, which albedo-mcp cannot resolve"
                    ))
                }
            }
        }
        Class::Literal(out)
    }
}

/// A reference to the daemon's variable `var`, when it is a name the settings accept.
fn reference(var: &str, default: bool) -> Class {
    if valid_env_name(var) {
        Class::Ref {
            var: var.to_owned(),
            default,
        }
    } else {
        Class::Unresolved(format!(
            "it names the variable {var:?}, which is not a variable name (letters, digits and \
             `_`, not starting with a digit)"
        ))
    }
}

/// A secret-bearing value, read.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Class {
    /// A literal: a secret to store.
    Literal(String),
    /// Exactly one variable (`default`: it had a `:-default`, which albedo does not use).
    Ref { var: String, default: bool },
    /// Cannot be carried over: why.
    Unresolved(String),
}

// ---------------------------------------------------------------------------------------
// One server, read from any format.

/// A value as a format gives it: text (variables per the dialect) or a variable's name.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Given {
    Text(String),
    Var(String),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Stdio,
    Http { sse: bool },
}

#[derive(Debug, Clone)]
struct Entry {
    kind: Kind,
    command: Option<String>,
    args: Vec<String>,
    cwd: Option<String>,
    env: Vec<(String, Given)>,
    url: Option<String>,
    headers: Vec<(String, Given)>,
    bearer: Option<Given>,
    enabled: Option<bool>,
    enabled_tools: Option<Vec<String>>,
    disabled_tools: Option<Vec<String>>,
    startup_ms: Option<u64>,
    call_ms: Option<u64>,
}

impl Entry {
    fn new(kind: Kind) -> Entry {
        Entry {
            kind,
            command: None,
            args: Vec::new(),
            cwd: None,
            env: Vec::new(),
            url: None,
            headers: Vec::new(),
            bearer: None,
            enabled: None,
            enabled_tools: None,
            disabled_tools: None,
            startup_ms: None,
            call_ms: None,
        }
    }
}

/// One server made into its patch entry and secrets.
struct Built {
    server: Map<String, Value>,
    secrets: Map<String, Value>,
    transport: &'static str,
    target: String,
    secret_names: Vec<String>,
}

/// A word as a shell would read it back (`store::cmdline::split`): quoted when it must be.
fn quoted(w: &str) -> String {
    if !w.is_empty()
        && w.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_./:=@%+,".contains(&b))
    {
        w.to_owned()
    } else {
        format!("'{}'", w.replace('\'', "'\\''"))
    }
}

/// Whether a literal can be sent as a secret (the API reads `""` as keep and `-` as remove).
fn storable(v: &str) -> Result<(), &'static str> {
    match v {
        "" => Err("its value is empty, which albedo-mcp cannot store as a secret"),
        "-" => Err("its value is `-`, which the settings API reads as \"remove\""),
        _ => Ok(()),
    }
}

/// The bearer token from `class`; whether it is set.
fn set_bearer(
    who: &str,
    class: Class,
    server: &mut Map<String, Value>,
    secrets: &mut Map<String, Value>,
    secret_names: &mut Vec<String>,
    notes: &mut Vec<String>,
) -> bool {
    match class {
        Class::Ref { var, default } => {
            if default {
                notes.push(format!(
                    "{who}: the bearer token reads {var}; its `:-default` is not used"
                ));
            }
            server.insert("bearerTokenEnvVar".into(), json!(var));
            true
        }
        Class::Literal(v) => match storable(&v) {
            Ok(()) => {
                secrets.insert("bearer_token".into(), json!(v));
                secret_names.push("bearer token".into());
                true
            }
            Err(why) => {
                notes.push(format!("{who}: the bearer token is not imported: {why}"));
                false
            }
        },
        Class::Unresolved(why) => {
            notes.push(format!("{who}: the bearer token is not imported: {why}"));
            false
        }
    }
}

fn build(original: &str, e: Entry, ctx: &Ctx, notes: &mut Vec<String>) -> Result<Built, String> {
    let who = format!("server {original:?}");
    let mut server = Map::new();
    let mut secrets = Map::new();
    let mut secret_names = Vec::new();
    let (transport, target) = match e.kind {
        Kind::Stdio => {
            let command = e
                .command
                .as_deref()
                .filter(|c| !c.trim().is_empty())
                .ok_or("a stdio server needs `command`")?;
            let command = ctx.plain("command", command)?;
            let args = e
                .args
                .iter()
                .enumerate()
                .map(|(i, a)| ctx.plain(&format!("args[{i}]"), a))
                .collect::<Result<Vec<_>, _>>()?;
            let target = std::iter::once(&command)
                .chain(&args)
                .map(|w| quoted(w))
                .collect::<Vec<_>>()
                .join(" ");
            server.insert("type".into(), json!("stdio"));
            server.insert("command".into(), json!(command));
            if !args.is_empty() {
                server.insert("args".into(), json!(args));
            }
            if let Some(cwd) = &e.cwd {
                server.insert("cwd".into(), json!(ctx.plain("cwd", cwd)?));
            }
            let mut env = Map::new();
            let mut env_secrets = Map::new();
            for (k, v) in &e.env {
                if !valid_env_name(k) {
                    notes.push(format!(
                        "{who}: env {k:?} is not imported: not a variable name (letters, digits \
                         and `_`, not starting with a digit)"
                    ));
                    continue;
                }
                let class = match v {
                    Given::Var(var) => reference(var, false),
                    Given::Text(t) => ctx.secret(t),
                };
                match class {
                    Class::Ref { var, default } => {
                        if default {
                            notes.push(format!(
                                "{who}: env {k} reads the daemon's variable {var}; its \
                                 `:-default` is not used (set {var} where the daemon runs)"
                            ));
                        }
                        env.insert(k.clone(), json!({ "env": var }));
                    }
                    Class::Literal(value) => {
                        if let Err(why) = storable(&value) {
                            notes.push(format!("{who}: env {k} is not imported: {why}"));
                            continue;
                        }
                        env.insert(k.clone(), json!({ "secret": format!("env.{k}") }));
                        env_secrets.insert(k.clone(), json!(value));
                        secret_names.push(format!("env {k}"));
                    }
                    Class::Unresolved(why) => {
                        notes.push(format!("{who}: env {k} is not imported: {why}"));
                    }
                }
            }
            if !env.is_empty() {
                server.insert("env".into(), Value::Object(env));
            }
            if !env_secrets.is_empty() {
                secrets.insert("env".into(), Value::Object(env_secrets));
            }
            if e.url.is_some() {
                notes.push(format!("{who}: `url` is ignored for a stdio server"));
            }
            if !e.headers.is_empty() || e.bearer.is_some() {
                notes.push(format!(
                    "{who}: headers and bearer tokens are ignored for a stdio server"
                ));
            }
            ("stdio", target)
        }
        Kind::Http { sse } => {
            let url = e
                .url
                .as_deref()
                .filter(|u| !u.trim().is_empty())
                .ok_or("a remote server needs `url`")?;
            let url = ctx.plain("url", url)?;
            validate_url(original, &url).map_err(|e| match e {
                SettingsError::Invalid { message, .. } => message,
                other => other.to_string(),
            })?;
            if url.contains('?') {
                notes.push(format!(
                    "{who}: its URL carries a query string, which is stored as is in \
                     extensions.json (not in creds.json): if it holds a key, prefer a header"
                ));
            }
            let looks_sse = url
                .split('?')
                .next()
                .is_some_and(|p| p.trim_end_matches('/').ends_with("/sse"));
            if sse || looks_sse {
                notes.push(format!(
                    "{who}: {} the legacy SSE transport; albedo-mcp speaks streamable HTTP, \
                     which such a server may not answer",
                    if sse {
                        "it was configured for"
                    } else {
                        "its URL suggests"
                    }
                ));
            }
            server.insert("type".into(), json!("http"));
            server.insert("url".into(), json!(url));
            let mut bearer_set = false;
            if let Some(b) = &e.bearer {
                let class = match b {
                    Given::Var(v) => reference(v, false),
                    Given::Text(t) => ctx.secret(t),
                };
                bearer_set = set_bearer(
                    &who,
                    class,
                    &mut server,
                    &mut secrets,
                    &mut secret_names,
                    notes,
                );
            }
            // `Authorization: Bearer X` first: it is the bearer token, whatever the order.
            let bearer_header = |h: &str, v: &Given| -> Option<String> {
                match v {
                    Given::Text(t) if h.eq_ignore_ascii_case("authorization") => t
                        .get(..7)
                        .filter(|p| p.eq_ignore_ascii_case("bearer "))
                        .map(|_| t[7..].trim().to_owned()),
                    _ => None,
                }
            };
            for (h, v) in &e.headers {
                let Some(token) = bearer_header(h, v) else {
                    continue;
                };
                if bearer_set {
                    notes.push(format!(
                        "{who}: header {h} is not imported: the server already has a bearer \
                         token"
                    ));
                } else {
                    let class = ctx.secret(&token);
                    bearer_set = set_bearer(
                        &who,
                        class,
                        &mut server,
                        &mut secrets,
                        &mut secret_names,
                        notes,
                    );
                }
            }
            let mut headers = Map::new();
            let mut header_secret: Option<String> = None;
            for (h, v) in &e.headers {
                if bearer_header(h, v).is_some() {
                    continue;
                }
                if let Some(why) = header_name_problem(h, bearer_set) {
                    notes.push(format!("{who}: header {h:?} is not imported: {why}"));
                    continue;
                }
                let class = match v {
                    Given::Var(var) => reference(var, false),
                    Given::Text(t) => ctx.secret(t),
                };
                match class {
                    Class::Ref { var, default } => {
                        if default {
                            notes.push(format!(
                                "{who}: header {h} reads {var}; its `:-default` is not used"
                            ));
                        }
                        headers.insert(h.clone(), json!({ "env": var }));
                    }
                    Class::Literal(value) => {
                        if let Err(why) = storable(&value) {
                            notes.push(format!("{who}: header {h} is not imported: {why}"));
                        } else if let Some(held) = &header_secret {
                            notes.push(format!(
                                "{who}: header {h} is not imported: albedo-mcp stores one header \
                                 secret per server, and {held} has it (put {h}'s value in a \
                                 variable of the daemon's environment and name it)"
                            ));
                        } else {
                            headers.insert(h.clone(), json!({ "secret": "header" }));
                            secrets.insert("header".into(), json!({ "name": h, "value": value }));
                            secret_names.push(format!("header {h}"));
                            header_secret = Some(h.clone());
                        }
                    }
                    Class::Unresolved(why) => {
                        notes.push(format!("{who}: header {h} is not imported: {why}"));
                    }
                }
            }
            if !headers.is_empty() {
                server.insert("headers".into(), Value::Object(headers));
            }
            if e.command.is_some() || !e.args.is_empty() || !e.env.is_empty() {
                notes.push(format!(
                    "{who}: command, args and env are ignored for a remote server"
                ));
            }
            ("http", shown_url(&url))
        }
    };
    if e.enabled == Some(false) {
        server.insert("enabled".into(), json!(false));
    }
    if let Some(t) = e.enabled_tools {
        server.insert("enabledTools".into(), json!(t));
    }
    if let Some(t) = e.disabled_tools {
        server.insert("disabledTools".into(), json!(t));
    }
    for (field, ms) in [
        ("startupTimeoutMs", e.startup_ms),
        ("callTimeoutMs", e.call_ms),
    ] {
        match ms {
            Some(ms) if ms > MAX_RETRY_MS => notes.push(format!(
                "{who}: its timeout ({field}) is not imported: longer than a day"
            )),
            Some(ms) => {
                server.insert(field.into(), json!(ms));
            }
            None => {}
        }
    }
    Ok(Built {
        server,
        secrets,
        transport,
        target,
        secret_names,
    })
}

// ---------------------------------------------------------------------------------------
// The formats.

fn string_list(v: &Value, field: &str) -> Result<Vec<String>, String> {
    v.as_array()
        .and_then(|a| a.iter().map(|x| x.as_str().map(str::to_owned)).collect())
        .ok_or_else(|| format!("`{field}` must be a list of strings"))
}

/// A map of strings (`env`, `headers`); numbers and booleans are taken as their text.
fn given_map(
    v: &Value,
    field: &str,
    who: &str,
    var: bool,
    notes: &mut Vec<String>,
) -> Result<Vec<(String, Given)>, String> {
    let m = v
        .as_object()
        .ok_or_else(|| format!("`{field}` must be an object"))?;
    let mut out = Vec::new();
    let mut m: Vec<_> = m.iter().collect();
    m.sort_by(|a, b| a.0.cmp(b.0));
    for (k, v) in m {
        let text = match v {
            Value::String(s) => s.clone(),
            Value::Number(n) => n.to_string(),
            Value::Bool(b) => b.to_string(),
            _ => {
                notes.push(format!(
                    "{who}: {field}.{k} is not imported: its value is not a string"
                ));
                continue;
            }
        };
        out.push((
            k.clone(),
            if var {
                Given::Var(text)
            } else {
                Given::Text(text)
            },
        ));
    }
    Ok(out)
}

fn opt_str(obj: &Map<String, Value>, field: &str) -> Result<Option<String>, String> {
    match obj.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(_) => Err(format!("`{field}` must be a string")),
    }
}

/// A `mcpServers` (Claude, Cursor) or VS Code `servers` entry.
fn json_entry(
    original: &str,
    v: &Value,
    vscode: bool,
    notes: &mut Vec<String>,
) -> Result<Entry, String> {
    let who = format!("server {original:?}");
    let obj = v.as_object().ok_or("its entry is not a JSON object")?;
    let url = match opt_str(obj, "url")? {
        Some(u) => Some(u),
        None => opt_str(obj, "serverUrl")?,
    };
    let command = opt_str(obj, "command")?;
    let kind = match opt_str(obj, "type")?.as_deref() {
        Some("stdio") => Kind::Stdio,
        Some("http" | "streamable-http" | "streamableHttp" | "streamable_http") => {
            Kind::Http { sse: false }
        }
        Some("sse") => Kind::Http { sse: true },
        Some(other) => {
            return Err(format!(
                "its transport {other:?} is not supported (albedo-mcp speaks stdio and \
                 streamable HTTP)"
            ))
        }
        None if command.is_some() => Kind::Stdio,
        None if url.is_some() => Kind::Http { sse: false },
        None => return Err("it has neither `command` nor `url`".into()),
    };
    let mut e = Entry::new(kind);
    e.command = command;
    e.url = url;
    e.cwd = opt_str(obj, "cwd")?;
    if let Some(a) = obj.get("args").filter(|a| !a.is_null()) {
        e.args = string_list(a, "args")?;
    }
    if let Some(m) = obj.get("env").filter(|a| !a.is_null()) {
        e.env = given_map(m, "env", &who, false, notes)?;
    }
    if let Some(m) = obj.get("headers").filter(|a| !a.is_null()) {
        e.headers = given_map(m, "headers", &who, false, notes)?;
    }
    match obj.get("disabled") {
        Some(Value::Bool(true)) => e.enabled = Some(false),
        None | Some(Value::Null | Value::Bool(false)) => {}
        Some(_) => return Err("`disabled` must be true or false".into()),
    }
    match obj.get("enabled") {
        Some(Value::Bool(false)) => e.enabled = Some(false),
        None | Some(Value::Null | Value::Bool(true)) => {}
        Some(_) => return Err("`enabled` must be true or false".into()),
    }
    let known = [
        "type",
        "command",
        "args",
        "env",
        "cwd",
        "url",
        "serverUrl",
        "headers",
        "disabled",
        "enabled",
    ];
    for k in obj.keys().filter(|k| !known.contains(&k.as_str())) {
        if k == "envFile" {
            notes.push(format!(
                "{who}: `envFile` is not imported: albedo-mcp reads no env files; add its \
                 variables to the server's env (the web pane, or the settings API)"
            ));
        } else if vscode && k == "dev" {
            notes.push(format!(
                "{who}: `dev` (VS Code's watch and debug settings) is not imported"
            ));
        } else {
            notes.push(format!("{who}: field `{k}` is not imported"));
        }
    }
    Ok(e)
}

/// Seconds (an integer or a fraction) as milliseconds, when positive.
fn seconds_ms(v: &Value, field: &str) -> Result<u64, String> {
    let ms = v
        .as_f64()
        .map(|s| (s * 1000.0).round())
        .filter(|ms| *ms >= 1.0 && *ms < 1e15)
        .ok_or_else(|| format!("`{field}` must be a positive number of seconds"))?;
    Ok(ms as u64)
}

/// A Codex `[mcp_servers.NAME]` table (as JSON).
fn codex_entry(original: &str, v: &Value, notes: &mut Vec<String>) -> Result<Entry, String> {
    let who = format!("server {original:?}");
    let obj = v.as_object().ok_or("its entry is not a table")?;
    let command = opt_str(obj, "command")?;
    let url = opt_str(obj, "url")?;
    let kind = match (&command, &url) {
        (Some(_), Some(_)) => return Err("it has both `command` and `url`".into()),
        (Some(_), None) => Kind::Stdio,
        (None, Some(_)) => Kind::Http { sse: false },
        (None, None) => return Err("it has neither `command` nor `url`".into()),
    };
    let mut e = Entry::new(kind);
    e.command = command;
    e.url = url;
    e.cwd = opt_str(obj, "cwd")?;
    if let Some(a) = obj.get("args") {
        e.args = string_list(a, "args")?;
    }
    if let Some(m) = obj.get("env") {
        e.env = given_map(m, "env", &who, false, notes)?;
    }
    if let Some(list) = obj.get("env_vars") {
        let names = list.as_array().ok_or("`env_vars` must be a list")?;
        for n in names {
            let name = match n {
                Value::String(s) => Some(s.clone()),
                Value::Object(o) => o.get("name").and_then(Value::as_str).map(str::to_owned),
                _ => None,
            };
            match name {
                Some(name) if e.env.iter().any(|(k, _)| *k == name) => notes.push(format!(
                    "{who}: env_vars {name} is not imported: `env` sets {name} already"
                )),
                Some(name) => e.env.push((name.clone(), Given::Var(name))),
                None => notes.push(format!(
                    "{who}: an entry of `env_vars` is not imported: not a variable name"
                )),
            }
        }
    }
    if let Some(var) = opt_str(obj, "bearer_token_env_var")? {
        e.bearer = Some(Given::Var(var));
    }
    if let Some(t) = opt_str(obj, "bearer_token")? {
        if e.bearer.is_some() {
            notes.push(format!(
                "{who}: `bearer_token` is not imported: bearer_token_env_var is used"
            ));
        } else {
            e.bearer = Some(Given::Text(t));
        }
    }
    if let Some(m) = obj.get("http_headers") {
        e.headers = given_map(m, "http_headers", &who, false, notes)?;
    }
    if let Some(m) = obj.get("env_http_headers") {
        for (h, var) in given_map(m, "env_http_headers", &who, true, notes)? {
            if e.headers.iter().any(|(k, _)| k.eq_ignore_ascii_case(&h)) {
                notes.push(format!(
                    "{who}: env_http_headers {h} is not imported: http_headers sets it already"
                ));
            } else {
                e.headers.push((h, var));
            }
        }
    }
    match obj.get("enabled") {
        None => {}
        Some(Value::Bool(b)) => e.enabled = Some(*b),
        Some(_) => return Err("`enabled` must be true or false".into()),
    }
    if let Some(v) = obj.get("startup_timeout_ms") {
        e.startup_ms = Some(
            v.as_u64()
                .filter(|n| *n > 0)
                .ok_or("`startup_timeout_ms` must be a positive integer")?,
        );
        if obj.contains_key("startup_timeout_sec") {
            notes.push(format!(
                "{who}: `startup_timeout_sec` is not imported: startup_timeout_ms is used"
            ));
        }
    } else if let Some(v) = obj.get("startup_timeout_sec") {
        e.startup_ms = Some(seconds_ms(v, "startup_timeout_sec")?);
    }
    if let Some(v) = obj.get("tool_timeout_sec") {
        e.call_ms = Some(seconds_ms(v, "tool_timeout_sec")?);
    }
    if let Some(v) = obj.get("enabled_tools") {
        e.enabled_tools = Some(string_list(v, "enabled_tools")?);
    }
    if let Some(v) = obj.get("disabled_tools") {
        e.disabled_tools = Some(string_list(v, "disabled_tools")?);
    }
    let known = [
        "command",
        "args",
        "env",
        "env_vars",
        "cwd",
        "url",
        "bearer_token_env_var",
        "bearer_token",
        "http_headers",
        "env_http_headers",
        "enabled",
        "startup_timeout_sec",
        "startup_timeout_ms",
        "tool_timeout_sec",
        "enabled_tools",
        "disabled_tools",
    ];
    for k in obj.keys().filter(|k| !known.contains(&k.as_str())) {
        notes.push(format!("{who}: field `{k}` is not imported"));
    }
    Ok(e)
}

// ---------------------------------------------------------------------------------------
// Reading files.

/// JSON with comments and trailing commas (VS Code's JSONC) made plain JSON: comments and
/// trailing commas become spaces, so lines and columns stay where they were.
fn strip_jsonc(text: &str) -> String {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    // Comments out.
    let mut out: Vec<char> = Vec::with_capacity(text.len());
    let cs: Vec<char> = text.chars().collect();
    let mut i = 0;
    let mut in_str = false;
    while i < cs.len() {
        let c = cs[i];
        if in_str {
            out.push(c);
            if c == '\\' && i + 1 < cs.len() {
                out.push(cs[i + 1]);
                i += 2;
                continue;
            }
            if c == '"' {
                in_str = false;
            }
            i += 1;
        } else if c == '"' {
            in_str = true;
            out.push(c);
            i += 1;
        } else if c == '/' && cs.get(i + 1) == Some(&'/') {
            while i < cs.len() && cs[i] != '\n' {
                out.push(' ');
                i += 1;
            }
        } else if c == '/' && cs.get(i + 1) == Some(&'*') {
            out.push(' ');
            out.push(' ');
            i += 2;
            while i < cs.len() && !(cs[i] == '*' && cs.get(i + 1) == Some(&'/')) {
                out.push(if cs[i] == '\n' { '\n' } else { ' ' });
                i += 1;
            }
            if i < cs.len() {
                out.push(' ');
                out.push(' ');
                i += 2;
            }
        } else {
            out.push(c);
            i += 1;
        }
    }
    // Trailing commas out.
    let mut in_str = false;
    let mut escaped = false;
    for i in 0..out.len() {
        let c = out[i];
        if in_str {
            if escaped {
                escaped = false;
            } else if c == '\\' {
                escaped = true;
            } else if c == '"' {
                in_str = false;
            }
            continue;
        }
        if c == '"' {
            in_str = true;
        } else if c == ',' {
            let next = out[i + 1..].iter().find(|c| !c.is_whitespace());
            if matches!(next, Some('}') | Some(']')) {
                out[i] = ' ';
            }
        }
    }
    out.into_iter().collect()
}

/// Line and column (from 1) of a byte offset.
fn line_column(text: &str, offset: usize) -> (usize, usize) {
    let mut end = offset.min(text.len());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    let before = &text[..end];
    let line = before.matches('\n').count() + 1;
    let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    (line, column)
}

fn parse_toml(text: &str, file: &str) -> Result<Value, ImportError> {
    let table: toml::Table = toml::from_str(text).map_err(|e| {
        let (line, column) = e
            .span()
            .map(|s| line_column(text, s.start))
            .unwrap_or((1, 1));
        ImportError::Parse {
            file: file.to_owned(),
            syntax: "TOML",
            line,
            column,
            // The message alone: the error's display quotes the line, which may hold a secret.
            message: e.message().trim().to_owned(),
        }
    })?;
    serde_json::to_value(table).map_err(|e| ImportError::Shape {
        file: file.to_owned(),
        message: format!("cannot read its values: {e}"),
    })
}

fn parse_json(text: &str, file: &str) -> Result<Value, ImportError> {
    serde_json::from_str(&strip_jsonc(text)).map_err(|e| {
        let full = e.to_string();
        let suffix = format!(" at line {} column {}", e.line(), e.column());
        ImportError::Parse {
            file: file.to_owned(),
            syntax: "JSON",
            line: e.line(),
            column: e.column(),
            message: full.strip_suffix(&suffix).unwrap_or(&full).to_owned(),
        }
    })
}

fn file_name_of(p: &Path) -> &str {
    p.file_name().and_then(|n| n.to_str()).unwrap_or("")
}

/// The workspace folder of a file in `<workspace>/.vscode/` or `<workspace>/.cursor/`, when
/// its path is absolute.
fn workspace_of(file: &Path) -> Option<&Path> {
    let dir = file.parent()?;
    let name = file_name_of(dir);
    if name != ".vscode" && name != ".cursor" {
        return None;
    }
    dir.parent().filter(|w| w.is_absolute())
}

fn keys_found(root: &Value) -> String {
    match root.as_object() {
        Some(m) if m.is_empty() => "an empty object".into(),
        Some(m) => {
            let mut keys: Vec<String> = m.keys().take(8).map(|k| format!("`{k}`")).collect();
            if m.len() > 8 {
                keys.push("...".into());
            }
            format!("keys {}", keys.join(", "))
        }
        None => "no object at the top".into(),
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
