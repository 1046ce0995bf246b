//! The `mcp` section of `$ALBEDO_HOME/extensions.json`, the secrets of `creds.json`, and their
//! resolution into what a connection needs. Secrets are named, never inlined: every `env`
//! value and header names a variable of the daemon's environment (`{"env": "VAR"}`), or a
//! value stored in `creds.json` under the server (`{"secret": "KEY"}`), and a missing one
//! fails preparation, naming the variable or key and the server (never a value).
//!
//! `creds.json` must be private (no access for group or others): otherwise preparation fails,
//! naming the file, its mode and the fix, and nothing is read from it. An empty or blank
//! `extensions.json` is an error (`{}` means no settings); a missing one is no settings.
//!
//! A server's fingerprint is an HMAC-SHA256 of its configuration and secret values under the
//! key of `$ALBEDO_HOME/fingerprint.key` ([`crate::store::fingerprint`]), which
//! [`Credentials::load`] reads (or creates) with `creds.json`.
//!
//! Owns: parsing, validation and resolution of server settings. Must not touch: connections,
//! the database.

use crate::store::files::{open_private, write_atomic, PrivateFileError};
use crate::store::fingerprint::{FingerprintKey, KeyError};
use serde_json::{Map, Value};
use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};

pub const DEFAULT_RETRY_MS: u64 = 30_000;
pub const DEFAULT_STARTUP_TIMEOUT_MS: u64 = 30_000;
pub const DEFAULT_CALL_TIMEOUT_MS: u64 = 60_000;
/// The default of `mcp.toolSearch.budgetTokens`: about 10 % of a 200k-token context.
pub const DEFAULT_BUDGET_TOKENS: u64 = 20_000;
/// The largest `mcp.toolSearch.budgetTokens` accepted.
pub const MAX_BUDGET_TOKENS: u64 = 10_000_000;

/// A server's `deferTools`: whether its tools may wait behind `mcp__search` (see
/// [`crate::toolsearch`]). `auto` defers them once a session's tool schemas together pass
/// the budget; `never` keeps them loaded; `always` defers them whatever the budget.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DeferTools {
    #[default]
    Auto,
    Never,
    Always,
}

impl DeferTools {
    /// `auto`, `never` or `always`.
    pub fn parse(s: &str) -> Option<DeferTools> {
        match s {
            "auto" => Some(DeferTools::Auto),
            "never" => Some(DeferTools::Never),
            "always" => Some(DeferTools::Always),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            DeferTools::Auto => "auto",
            DeferTools::Never => "never",
            DeferTools::Always => "always",
        }
    }
}
/// The longest server name: `mcp__<server>__<tool>` must stay within 128 characters.
pub const MAX_SERVER_NAME: usize = 48;

#[derive(Debug, thiserror::Error)]
pub enum SettingsError {
    #[error("cannot read {path}: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{path} is not valid JSON: {source}")]
    Json {
        path: String,
        #[source]
        source: serde_json::Error,
    },
    #[error("server {server:?}: {message}")]
    Invalid { server: String, message: String },
    #[error("{0}")]
    Section(String),
    #[error("server {server:?} needs the environment variable {var}, which is not set")]
    MissingVariable { server: String, var: String },
    #[error("cannot write {path}: {source}")]
    Write {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{path} is empty; write {{}} for no settings")]
    Empty { path: String },
    /// `creds.json` cannot be read, or group or others can read it.
    #[error(transparent)]
    Private(#[from] PrivateFileError),
    #[error(transparent)]
    Key(#[from] KeyError),
}

/// Where a secret value comes from.
#[derive(Debug, Clone, PartialEq, Eq, Hash, serde::Serialize)]
pub enum SecretRef {
    /// A variable of the daemon's environment.
    Env(String),
    /// A value stored in `creds.json` for this server under this key.
    Stored(String),
}

#[derive(Debug, Clone, PartialEq, serde::Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum TransportConfig {
    Stdio {
        command: String,
        args: Vec<String>,
        cwd: Option<PathBuf>,
        env: BTreeMap<String, SecretRef>,
    },
    Http {
        url: String,
        bearer_token: Option<SecretRef>,
        headers: BTreeMap<String, SecretRef>,
    },
}

/// One configured server, validated.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct ServerConfig {
    pub name: String,
    pub transport: TransportConfig,
    pub enabled: bool,
    pub enabled_tools: Option<Vec<String>>,
    pub disabled_tools: Vec<String>,
    pub startup_timeout_ms: u64,
    pub call_timeout_ms: u64,
    /// `deferTools`. Not part of the fingerprint (nothing about the connection changes):
    /// changing it keeps the server's connection and saved catalogue.
    #[serde(skip)]
    pub defer_tools: DeferTools,
}

/// The `mcp` section.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct McpSettings {
    pub servers: Vec<ServerConfig>,
    pub retry_ms: u64,
    /// `toolSearch.budgetTokens`: the estimated tokens of tool schemas a session loads
    /// before its `auto` servers' tools are deferred.
    pub budget_tokens: u64,
    /// Fields we did not recognise: reported, never silently dropped.
    pub warnings: Vec<String>,
}

/// The whole of `extensions.json` as far as this daemon reads it.
#[derive(Debug, Clone, Default)]
pub struct ExtensionsFile {
    pub raw: Map<String, Value>,
}

pub fn extensions_path(home: &Path) -> PathBuf {
    home.join("extensions.json")
}

pub fn creds_path(home: &Path) -> PathBuf {
    home.join("creds.json")
}

/// A settings file's text: pretty JSON and a final newline.
pub fn to_file_bytes(raw: &Map<String, Value>) -> Vec<u8> {
    let mut bytes = serde_json::to_vec_pretty(raw).unwrap_or_else(|_| b"{}".to_vec());
    bytes.push(b'\n');
    bytes
}

/// A JSON object read from `path`. Blank text is `blank` (an error, or no settings).
fn parse_object(
    path: &Path,
    bytes: &[u8],
    blank: impl FnOnce() -> Result<Map<String, Value>, SettingsError>,
) -> Result<Map<String, Value>, SettingsError> {
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return blank();
    }
    match serde_json::from_slice::<Value>(bytes) {
        Ok(Value::Object(m)) => Ok(m),
        Ok(_) => Err(SettingsError::Section(format!(
            "{} must hold a JSON object",
            path.display()
        ))),
        Err(source) => Err(SettingsError::Json {
            path: path.display().to_string(),
            source,
        }),
    }
}

impl ExtensionsFile {
    /// Read `extensions.json`: missing is no settings; empty or blank is an error.
    pub fn load(home: &Path) -> Result<ExtensionsFile, SettingsError> {
        let path = extensions_path(home);
        match std::fs::read(&path) {
            Ok(bytes) => Self::parse(home, Some(&bytes)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Self::parse(home, None),
            Err(source) => Err(SettingsError::Io {
                path: path.display().to_string(),
                source,
            }),
        }
    }

    /// `extensions.json` from its bytes (`None`: the file does not exist).
    pub fn parse(home: &Path, bytes: Option<&[u8]>) -> Result<ExtensionsFile, SettingsError> {
        let path = extensions_path(home);
        let raw = match bytes {
            Some(bytes) => parse_object(&path, bytes, || {
                Err(SettingsError::Empty {
                    path: path.display().to_string(),
                })
            })?,
            None => Map::new(),
        };
        Ok(ExtensionsFile { raw })
    }

    /// The file's text as the daemon writes it.
    pub fn to_bytes(&self) -> Vec<u8> {
        to_file_bytes(&self.raw)
    }

    /// The extension's default for every session (off on a fresh install).
    pub fn mcp_enabled(&self) -> bool {
        self.raw
            .get("enabled")
            .and_then(|e| e.get("mcp"))
            .and_then(Value::as_bool)
            .unwrap_or(false)
    }

    /// The `editor-mcp` extension's default for every session (on unless
    /// `"enabled": {"editor-mcp": false}`).
    pub fn editor_mcp_enabled(&self) -> bool {
        self.raw
            .get("enabled")
            .and_then(|e| e.get(crate::editor::EXTENSION))
            .and_then(Value::as_bool)
            .unwrap_or(true)
    }

    pub fn set_mcp_enabled(&mut self, on: bool) {
        self.set_enabled("mcp", on);
    }

    /// An extension's default for every session (`mcp`, `editor-mcp`):
    /// `"enabled": {<extension>: on}`, the rest of the file kept as it was.
    pub fn set_enabled(&mut self, extension: &str, on: bool) {
        let enabled = self
            .raw
            .entry("enabled")
            .or_insert_with(|| Value::Object(Map::new()));
        if !enabled.is_object() {
            *enabled = Value::Object(Map::new());
        }
        if let Value::Object(m) = enabled {
            m.insert(extension.into(), Value::Bool(on));
        }
    }

    pub fn save(&self, home: &Path) -> Result<(), SettingsError> {
        let path = extensions_path(home);
        let bytes = self.to_bytes();
        write_atomic(&path, &bytes, 0o644).map_err(|source| SettingsError::Write {
            path: path.display().to_string(),
            source,
        })
    }

    /// Parse and validate the `mcp` section.
    pub fn mcp(&self) -> Result<McpSettings, SettingsError> {
        parse_mcp(self.raw.get("mcp"))
    }
}

/// Whether a server name can form tool names `mcp__<server>__<tool>`.
pub fn valid_server_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_SERVER_NAME
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
        && !name.contains("__")
        && !name.starts_with('_')
        && !name.ends_with('_')
}

pub fn parse_mcp(section: Option<&Value>) -> Result<McpSettings, SettingsError> {
    let (out, bad) = parse_mcp_each(section)?;
    match bad.into_iter().next() {
        Some((_, e)) => Err(e),
        None => Ok(out),
    }
}

/// Like [`parse_mcp`], but a server that does not parse is set aside with its error instead
/// of failing the whole section (what `GET /settings/mcp` and the problem report show).
pub fn parse_mcp_each(
    section: Option<&Value>,
) -> Result<(McpSettings, Vec<(String, SettingsError)>), SettingsError> {
    let mut out = McpSettings {
        retry_ms: DEFAULT_RETRY_MS,
        budget_tokens: DEFAULT_BUDGET_TOKENS,
        ..Default::default()
    };
    let mut bad = Vec::new();
    let Some(section) = section else {
        return Ok((out, bad));
    };
    let obj = section
        .as_object()
        .ok_or_else(|| SettingsError::Section("`mcp` must be an object".into()))?;
    for (k, v) in obj {
        match k.as_str() {
            "servers" => {
                let servers = v.as_object().ok_or_else(|| {
                    SettingsError::Section("`mcp.servers` must be an object".into())
                })?;
                for (name, def) in servers {
                    match parse_server(name, def, &mut out.warnings) {
                        Ok(s) => out.servers.push(s),
                        Err(e) => bad.push((name.clone(), e)),
                    }
                }
            }
            "retryMs" => {
                out.retry_ms = v.as_u64().filter(|n| *n > 0).ok_or_else(|| {
                    SettingsError::Section("`mcp.retryMs` must be a positive integer".into())
                })?
            }
            "toolSearch" => out.budget_tokens = parse_tool_search(v)?,
            other => out.warnings.push(format!(
                "unknown field `mcp.{other}` in extensions.json is ignored"
            )),
        }
    }
    Ok((out, bad))
}

/// `mcp.toolSearch`: `{"budgetTokens": N}` (1 to [`MAX_BUDGET_TOKENS`]).
fn parse_tool_search(v: &Value) -> Result<u64, SettingsError> {
    let bad = || {
        SettingsError::Section(format!(
            "`mcp.toolSearch` must be {{\"budgetTokens\": N}} with N a positive integer of at most {MAX_BUDGET_TOKENS}"
        ))
    };
    let obj = v.as_object().ok_or_else(bad)?;
    if obj.keys().any(|k| k != "budgetTokens") {
        return Err(bad());
    }
    match obj.get("budgetTokens") {
        None | Some(Value::Null) => Ok(DEFAULT_BUDGET_TOKENS),
        Some(n) => n
            .as_u64()
            .filter(|n| (1..=MAX_BUDGET_TOKENS).contains(n))
            .ok_or_else(bad),
    }
}

fn invalid(server: &str, message: impl Into<String>) -> SettingsError {
    SettingsError::Invalid {
        server: server.to_owned(),
        message: message.into(),
    }
}

/// The ways to name a secret, for messages.
const SECRET_FORMS: &str =
    "{\"env\": \"VARIABLE\"} (the daemon's environment) or {\"secret\": \"KEY\"} (creds.json)";

fn secret_ref(server: &str, field: &str, v: &Value) -> Result<SecretRef, SettingsError> {
    match v {
        Value::Object(m) if m.len() == 1 => {
            if let Some(Value::String(var)) = m.get("env") {
                if var.is_empty() {
                    return Err(invalid(server, format!("`{field}` names an empty variable")));
                }
                return Ok(SecretRef::Env(var.clone()));
            }
            if let Some(Value::String(key)) = m.get("secret") {
                if key.is_empty() {
                    return Err(invalid(server, format!("`{field}` names an empty secret")));
                }
                return Ok(SecretRef::Stored(key.clone()));
            }
            Err(invalid(server, format!("`{field}` must be {SECRET_FORMS}")))
        }
        Value::String(_) => Err(invalid(
            server,
            format!("`{field}` is an inline value; secrets are named, never inlined: write {SECRET_FORMS}"),
        )),
        _ => Err(invalid(server, format!("`{field}` must be {SECRET_FORMS}"))),
    }
}

fn string_list(server: &str, field: &str, v: &Value) -> Result<Vec<String>, SettingsError> {
    v.as_array()
        .and_then(|a| a.iter().map(|x| x.as_str().map(str::to_owned)).collect())
        .ok_or_else(|| invalid(server, format!("`{field}` must be a list of strings")))
}

fn parse_server(
    name: &str,
    def: &Value,
    warnings: &mut Vec<String>,
) -> Result<ServerConfig, SettingsError> {
    if !valid_server_name(name) {
        return Err(invalid(
            name,
            format!("invalid server name: use 1 to {MAX_SERVER_NAME} letters, digits, `-` or single `_` (it becomes part of tool names mcp__<server>__<tool>)"),
        ));
    }
    let obj = def
        .as_object()
        .ok_or_else(|| invalid(name, "a server must be a JSON object"))?;
    let ty = match obj.get("type").and_then(Value::as_str) {
        Some(t) => t,
        None if obj.contains_key("url") => "http",
        None if obj.contains_key("command") => "stdio",
        None => return Err(invalid(name, "needs `type` (`stdio` or `http`)")),
    };
    let str_field = |f: &str| -> Result<Option<String>, SettingsError> {
        match obj.get(f) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(_) => Err(invalid(name, format!("`{f}` must be a string"))),
        }
    };
    let u64_field = |f: &str, default: u64| -> Result<u64, SettingsError> {
        match obj.get(f) {
            None | Some(Value::Null) => Ok(default),
            Some(v) => v.as_u64().filter(|n| *n > 0).ok_or_else(|| {
                invalid(
                    name,
                    format!("`{f}` must be a positive integer (milliseconds)"),
                )
            }),
        }
    };
    let common = COMMON_FIELDS;
    let transport = match ty {
        "stdio" => {
            let command = str_field("command")?
                .filter(|c| !c.is_empty())
                .ok_or_else(|| invalid(name, "a stdio server needs `command`"))?;
            let args = match obj.get("args") {
                None | Some(Value::Null) => Vec::new(),
                Some(v) => string_list(name, "args", v)?,
            };
            let cwd = str_field("cwd")?.map(PathBuf::from);
            let mut env = BTreeMap::new();
            if let Some(e) = obj.get("env") {
                let m = e
                    .as_object()
                    .ok_or_else(|| invalid(name, "`env` must be an object"))?;
                for (k, v) in m {
                    if !valid_env_name(k) {
                        return Err(invalid(
                            name,
                            format!("invalid environment variable name {k:?} (use letters, digits and `_`, not starting with a digit)"),
                        ));
                    }
                    env.insert(k.clone(), secret_ref(name, &format!("env.{k}"), v)?);
                }
            }
            for k in obj.keys() {
                if !common.contains(&k.as_str()) && !STDIO_FIELDS.contains(&k.as_str()) {
                    warnings.push(format!("server {name:?}: unknown field `{k}` is ignored"));
                }
            }
            TransportConfig::Stdio {
                command,
                args,
                cwd,
                env,
            }
        }
        "http" => {
            let url =
                str_field("url")?.ok_or_else(|| invalid(name, "an http server needs `url`"))?;
            validate_url(name, &url)?;
            let bearer_token = match (str_field("bearerTokenEnvVar")?, obj.get("bearerToken")) {
                (Some(_), Some(_)) => {
                    return Err(invalid(
                        name,
                        "give `bearerTokenEnvVar` or `bearerToken`, not both",
                    ))
                }
                (Some(var), None) => Some(SecretRef::Env(var)),
                (None, Some(v)) => Some(secret_ref(name, "bearerToken", v)?),
                (None, None) => None,
            };
            let mut headers = BTreeMap::new();
            if let Some(h) = obj.get("headers") {
                let m = h
                    .as_object()
                    .ok_or_else(|| invalid(name, "`headers` must be an object"))?;
                for (k, v) in m {
                    if let Some(why) = header_name_problem(k, bearer_token.is_some()) {
                        return Err(invalid(name, format!("header {k:?}: {why}")));
                    }
                    headers.insert(k.clone(), secret_ref(name, &format!("headers.{k}"), v)?);
                }
            }
            for k in obj.keys() {
                if !common.contains(&k.as_str())
                    && !["url", "bearerTokenEnvVar", "bearerToken", "headers"].contains(&k.as_str())
                {
                    warnings.push(format!("server {name:?}: unknown field `{k}` is ignored"));
                }
            }
            TransportConfig::Http {
                url,
                bearer_token,
                headers,
            }
        }
        other => {
            return Err(invalid(
                name,
                format!("unknown type {other:?} (use `stdio` or `http`)"),
            ))
        }
    };
    let enabled = match obj.get("enabled") {
        None | Some(Value::Null) => true,
        Some(Value::Bool(b)) => *b,
        Some(_) => return Err(invalid(name, "`enabled` must be true or false")),
    };
    let enabled_tools = match obj.get("enabledTools") {
        None | Some(Value::Null) => None,
        Some(v) => Some(string_list(name, "enabledTools", v)?),
    };
    let disabled_tools = match obj.get("disabledTools") {
        None | Some(Value::Null) => Vec::new(),
        Some(v) => string_list(name, "disabledTools", v)?,
    };
    let defer_tools = match obj.get("deferTools") {
        None | Some(Value::Null) => DeferTools::Auto,
        Some(v) => v.as_str().and_then(DeferTools::parse).ok_or_else(|| {
            invalid(
                name,
                "`deferTools` must be \"auto\", \"never\" or \"always\"",
            )
        })?,
    };
    Ok(ServerConfig {
        name: name.to_owned(),
        transport,
        enabled,
        enabled_tools,
        disabled_tools,
        startup_timeout_ms: u64_field("startupTimeoutMs", DEFAULT_STARTUP_TIMEOUT_MS)?,
        call_timeout_ms: u64_field("callTimeoutMs", DEFAULT_CALL_TIMEOUT_MS)?,
        defer_tools,
    })
}

/// Headers the protocol sets itself: a configured header may not replace them.
pub const PROTOCOL_HEADERS: [&str; 9] = [
    "Mcp-Session-Id",
    "MCP-Protocol-Version",
    "Mcp-Method",
    "Mcp-Name",
    "Last-Event-ID",
    "Accept",
    "Content-Type",
    "Content-Length",
    "Host",
];

/// Whether `name` is a variable name a shell and `env` accept: `[A-Za-z_][A-Za-z0-9_]*`.
pub fn valid_env_name(name: &str) -> bool {
    let mut b = name.bytes();
    matches!(b.next(), Some(c) if c.is_ascii_alphabetic() || c == b'_')
        && b.all(|c| c.is_ascii_alphanumeric() || c == b'_')
}

/// Why a configured header name cannot be used, if it cannot: not an HTTP token, one of the
/// protocol's own headers (or an `Mcp-Param-` one), or `Authorization` beside a bearer token.
pub fn header_name_problem(name: &str, has_bearer: bool) -> Option<String> {
    if name.is_empty()
        || !name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
    {
        return Some("not a valid header name (an HTTP token)".into());
    }
    if let Some(p) = PROTOCOL_HEADERS
        .iter()
        .find(|p| p.eq_ignore_ascii_case(name))
    {
        return Some(format!("{p} is set by the protocol itself"));
    }
    if name.len() >= 10 && name[..10].eq_ignore_ascii_case("Mcp-Param-") {
        return Some("Mcp-Param-* headers are set from tool arguments by the protocol".into());
    }
    if has_bearer && name.eq_ignore_ascii_case("Authorization") {
        return Some("Authorization is already sent for the bearer token".into());
    }
    None
}

/// `http` or `https`, with a host, and neither userinfo nor a fragment.
pub fn validate_url(server: &str, raw: &str) -> Result<url::Url, SettingsError> {
    let u = url::Url::parse(raw)
        .map_err(|e| invalid(server, format!("`url` is not a valid URL: {e}")))?;
    if u.scheme() != "http" && u.scheme() != "https" {
        return Err(invalid(server, "`url` must use http or https"));
    }
    if !u.username().is_empty() || u.password().is_some() {
        return Err(invalid(
            server,
            "`url` must not carry userinfo (put credentials in bearerTokenEnvVar or headers)",
        ));
    }
    if u.fragment().is_some() || raw.contains('#') {
        return Err(invalid(server, "`url` must not carry a fragment"));
    }
    if u.host_str().is_none() {
        return Err(invalid(server, "`url` has no host"));
    }
    Ok(u)
}

impl ServerConfig {
    /// Whether a tool passes `enabledTools` / `disabledTools`.
    pub fn tool_allowed(&self, tool: &str) -> bool {
        if let Some(en) = &self.enabled_tools {
            if !en.iter().any(|t| t == tool) {
                return false;
            }
        }
        !self.disabled_tools.iter().any(|t| t == tool)
    }
}

/// The secrets `creds.json` holds for servers: `{"mcp": {"<server>": {"<key>": "<value>"}}}`,
/// and the key fingerprints are made with. Its `Debug` shows the servers and key names only.
#[derive(Clone, Default)]
pub struct Credentials {
    pub raw: Map<String, Value>,
    /// `Default` gives a random key made once per process (fingerprints stable within the
    /// process only); [`Credentials::load`] reads the daemon's.
    key: FingerprintKey,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: BTreeMap<&str, Vec<&str>> = self
            .raw
            .get("mcp")
            .and_then(Value::as_object)
            .map(|m| {
                m.iter()
                    .map(|(server, keys)| {
                        let keys = keys
                            .as_object()
                            .map(|k| k.keys().map(String::as_str).collect())
                            .unwrap_or_default();
                        (server.as_str(), keys)
                    })
                    .collect()
            })
            .unwrap_or_default();
        f.debug_struct("Credentials")
            .field("stored", &names)
            .field("key", &self.key)
            .finish()
    }
}

impl Credentials {
    /// Read `creds.json` (missing: no secrets) and the fingerprint key (created when
    /// missing). A `creds.json` that group or others can access is refused unread.
    pub fn load(home: &Path) -> Result<Credentials, SettingsError> {
        let path = creds_path(home);
        let raw = match open_private(&path)? {
            None => Map::new(),
            Some(mut f) => {
                let mut bytes = Vec::new();
                f.read_to_end(&mut bytes)
                    .map_err(|source| SettingsError::Io {
                        path: path.display().to_string(),
                        source,
                    })?;
                parse_object(&path, &bytes, || Ok(Map::new()))?
            }
        };
        Ok(Credentials {
            raw,
            key: FingerprintKey::load_or_create(home)?,
        })
    }

    /// Other secrets under the same fingerprint key (a settings change, before it is saved).
    pub fn with_raw(&self, raw: Map<String, Value>) -> Credentials {
        Credentials {
            raw,
            key: self.key.clone(),
        }
    }

    /// The same secrets under another fingerprint key (tests, tools).
    pub fn with_fingerprint_key(self, key: FingerprintKey) -> Credentials {
        Credentials { key, ..self }
    }

    pub fn fingerprint_key(&self) -> &FingerprintKey {
        &self.key
    }

    pub fn stored(&self, server: &str, key: &str) -> Option<&str> {
        self.raw
            .get("mcp")
            .and_then(|m| m.get(server))
            .and_then(|s| s.get(key))
            .and_then(Value::as_str)
    }
}

/// A secret value: its Debug never shows it, and it has no Display.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: impl Into<String>) -> Secret {
        Secret(value.into())
    }

    /// The value, for the one place that hands it over (a spawned process, a header).
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(***)")
    }
}

/// Whether `oauth_client`'s `grant` is one albedo runs without a browser.
pub fn is_service_grant(grant: &str) -> bool {
    matches!(grant, "client_credentials" | "jwt_bearer")
}

/// A server's fields whatever its transport.
pub const COMMON_FIELDS: [&str; 7] = [
    "type",
    "enabled",
    "enabledTools",
    "disabledTools",
    "startupTimeoutMs",
    "callTimeoutMs",
    "deferTools",
];
/// A stdio server's own fields.
pub const STDIO_FIELDS: [&str; 4] = ["command", "args", "cwd", "env"];

/// A short digest of a server's `oauth_client` JSON text, naming that grant configuration
/// (a refusal is kept for the configuration it was made to; never shown, so a secret in the
/// text cannot be read back from it).
pub fn grant_key(oauth_client_text: &str) -> String {
    use sha2::Digest;
    let d = sha2::Sha256::digest(oauth_client_text.as_bytes());
    hex::encode(&d[..16])
}

/// A server ready to connect: its secrets read, its fingerprint computed.
#[derive(Debug, Clone)]
pub struct ResolvedServer {
    pub config: ServerConfig,
    pub transport: ResolvedTransport,
    /// An HTTP server's `oauth_client` (JSON text, from `creds.json` or the settings change
    /// being saved) when it names a grant without a browser (`client_credentials`,
    /// `jwt_bearer`): the token book asks for tokens with it.
    pub service_grant: Option<Secret>,
    /// Changes whenever the configuration or a secret value changes.
    pub fingerprint: String,
}

#[derive(Debug, Clone)]
pub enum ResolvedTransport {
    Stdio {
        command: String,
        args: Vec<String>,
        cwd: Option<PathBuf>,
        /// The complete, reduced environment of the server.
        env: BTreeMap<String, Secret>,
    },
    Http {
        url: url::Url,
        headers: Vec<(String, Secret)>,
    },
}

fn lookup(
    server: &str,
    r: &SecretRef,
    env: &dyn Fn(&str) -> Option<String>,
    creds: &Credentials,
) -> Result<Secret, SettingsError> {
    match r {
        SecretRef::Env(var) => env(var)
            .map(Secret)
            .ok_or_else(|| SettingsError::MissingVariable {
                server: server.to_owned(),
                var: var.clone(),
            }),
        SecretRef::Stored(key) => creds
            .stored(server, key)
            .map(|s| Secret(s.to_owned()))
            .ok_or_else(|| {
                invalid(
                    server,
                    format!(
                        "the stored secret {key:?} is missing from creds.json (a string at \
                         mcp.{server}.{key})"
                    ),
                )
            }),
    }
}

/// What the fingerprint MAC starts with (a new construction gets a new label).
const FINGERPRINT_LABEL: &[u8] = b"albedo-mcp server fingerprint v2";

/// Read a server's secrets and compute its fingerprint: HMAC-SHA256, keyed with the
/// credentials' fingerprint key, over the configuration and the secret values (each field
/// length-prefixed). `env` reads the daemon's environment.
pub fn resolve(
    config: &ServerConfig,
    env: &dyn Fn(&str) -> Option<String>,
    creds: &Credentials,
) -> Result<ResolvedServer, SettingsError> {
    let name = &config.name;
    let mut mac = creds.key.mac();
    mac.update_field(FINGERPRINT_LABEL);
    mac.update_field(&serde_json::to_vec(config).unwrap_or_default());
    let transport = match &config.transport {
        TransportConfig::Stdio {
            command,
            args,
            cwd,
            env: named,
        } => {
            let mut full = BTreeMap::new();
            for base in ["HOME", "PATH", "TMPDIR"] {
                if let Some(v) = env(base) {
                    full.insert(base.to_owned(), Secret(v));
                }
            }
            for (k, r) in named {
                let v = lookup(name, r, env, creds)?;
                mac.update_field(k.as_bytes());
                mac.update_field(v.expose().as_bytes());
                full.insert(k.clone(), v);
            }
            ResolvedTransport::Stdio {
                command: command.clone(),
                args: args.clone(),
                cwd: cwd.clone(),
                env: full,
            }
        }
        TransportConfig::Http {
            url,
            bearer_token,
            headers,
        } => {
            let url = validate_url(name, url)?;
            let mut hs = Vec::new();
            if let Some(r) = bearer_token {
                let v = lookup(name, r, env, creds)?;
                // Not a header name: a header cannot be mistaken for the bearer token.
                mac.update_field(b"\0bearer");
                mac.update_field(v.expose().as_bytes());
                hs.push((
                    "Authorization".to_owned(),
                    Secret(format!("Bearer {}", v.expose())),
                ));
            }
            for (k, r) in headers {
                let v = lookup(name, r, env, creds)?;
                mac.update_field(k.as_bytes());
                mac.update_field(v.expose().as_bytes());
                hs.push((k.clone(), v));
            }
            // A sign-in (or its end) is a new credential: the connections that used the old
            // one are not kept. A refresh is not: the record's server, issuer and client
            // stay the same.
            if let Some(rec) = creds
                .raw
                .get("mcp")
                .and_then(|m| m.get(name))
                .and_then(|s| s.get("oauth"))
            {
                mac.update_field(b"\0oauth");
                for k in ["server_url", "issuer"] {
                    mac.update_field(rec.get(k).and_then(Value::as_str).unwrap_or("").as_bytes());
                }
                let client = rec.get("client").and_then(|c| c.get("client_id"));
                mac.update_field(client.and_then(Value::as_str).unwrap_or("").as_bytes());
            }
            ResolvedTransport::Http { url, headers: hs }
        }
    };
    // A grant without a browser, and any change to it, is a new credential too.
    let service_grant = creds
        .raw
        .get("mcp")
        .and_then(|m| m.get(name))
        .and_then(|s| s.get("oauth_client"))
        .filter(|c| {
            c.get("grant")
                .and_then(Value::as_str)
                .is_some_and(is_service_grant)
        })
        .filter(|_| matches!(transport, ResolvedTransport::Http { .. }))
        .map(|c| Secret(c.to_string()));
    if let Some(g) = &service_grant {
        mac.update_field(b"\0grant");
        mac.update_field(g.expose().as_bytes());
    }
    Ok(ResolvedServer {
        config: config.clone(),
        transport,
        service_grant,
        fingerprint: hex::encode(mac.finalize()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use sha2::{Digest, Sha256};

    #[test]
    fn parses_the_seed_example() {
        let v = json!({ "servers": {
            "docs": { "type": "stdio", "command": "/usr/local/bin/docs-mcp", "args": ["--root", "/srv/docs"], "cwd": "/srv/docs", "env": { "DOCS_TOKEN": { "env": "MY_DOCS_TOKEN" } } },
            "search": { "type": "http", "url": "https://mcp.example.com/mcp", "bearerTokenEnvVar": "MY_SEARCH_TOKEN", "enabledTools": ["search"], "callTimeoutMs": 30000 } } });
        let s = parse_mcp(Some(&v)).unwrap();
        assert_eq!(s.servers.len(), 2);
        assert_eq!(s.retry_ms, DEFAULT_RETRY_MS);
        assert!(s.warnings.is_empty());
        let search = s.servers.iter().find(|x| x.name == "search").unwrap();
        assert!(search.tool_allowed("search"));
        assert!(!search.tool_allowed("other"));
        assert_eq!(search.call_timeout_ms, 30000);
    }

    #[test]
    fn rejects_what_it_must() {
        for (name, def) in [
            ("bad name", json!({"type":"stdio","command":"x"})),
            ("a__b", json!({"type":"stdio","command":"x"})),
            (
                "ok",
                json!({"type":"http","url":"https://user:pw@example.com/mcp"}),
            ),
            (
                "ok",
                json!({"type":"http","url":"https://example.com/mcp#frag"}),
            ),
            ("ok", json!({"type":"http","url":"ftp://example.com/"})),
            (
                "ok",
                json!({"type":"stdio","command":"x","env":{"A":"inline"}}),
            ),
            ("ok", json!({"type":"stdio"})),
        ] {
            let v = json!({"servers": {name: def}});
            assert!(parse_mcp(Some(&v)).is_err(), "{name} {def}");
        }
        let v =
            json!({"servers": {"ok": {"type":"stdio","command":"x","colour":"red"}}, "extra": 1});
        let s = parse_mcp(Some(&v)).unwrap();
        assert_eq!(s.warnings.len(), 2, "{:?}", s.warnings);
    }

    #[test]
    fn missing_variable_names_it_and_secrets_stay_hidden() {
        let v = json!({"servers": {"docs": {"type":"stdio","command":"x","env":{"T":{"env":"NOPE_VAR"}}}}});
        let s = parse_mcp(Some(&v)).unwrap();
        let err = resolve(&s.servers[0], &|_| None, &Credentials::default()).unwrap_err();
        let msg = err.to_string();
        assert!(msg.contains("NOPE_VAR") && msg.contains("docs"), "{msg}");
        let r = resolve(
            &s.servers[0],
            &|k| (k == "NOPE_VAR").then(|| "s3cret".to_owned()),
            &Credentials::default(),
        )
        .unwrap();
        assert!(!format!("{r:?}").contains("s3cret"));
        let r2 = resolve(
            &s.servers[0],
            &|k| (k == "NOPE_VAR").then(|| "other".to_owned()),
            &Credentials::default(),
        )
        .unwrap();
        assert_ne!(r.fingerprint, r2.fingerprint);
    }
    /// Someone holding the database (fingerprints) and the configuration but not the key
    /// must not be able to test guesses of a secret offline: the fingerprint is not a plain
    /// hash of the configuration and the secret.
    #[test]
    fn a_fingerprint_cannot_be_recomputed_from_the_configuration_and_a_guess() {
        let v =
            json!({"servers": {"docs": {"type":"stdio","command":"x","env":{"T":{"env":"V"}}}}});
        let s = parse_mcp(Some(&v)).unwrap();
        let r = resolve(
            &s.servers[0],
            &|k| (k == "V").then(|| "1234".to_owned()),
            &Credentials::default(),
        )
        .unwrap();
        // The unsalted construction: SHA-256(config JSON || SHA-256(name 0 value 0)).
        for guess in ["0000", "1234", "9999"] {
            let mut inner = Sha256::new();
            inner.update(b"T\0");
            inner.update(guess.as_bytes());
            inner.update([0]);
            let mut h = Sha256::new();
            h.update(serde_json::to_vec(&s.servers[0]).unwrap());
            h.update(inner.finalize());
            assert_ne!(hex::encode(h.finalize()), r.fingerprint, "guessed {guess}");
        }
    }

    #[test]
    fn an_empty_extensions_json_is_an_error_and_a_missing_one_is_no_settings() {
        let d = tempfile::tempdir().unwrap();
        let ext = ExtensionsFile::load(d.path()).unwrap();
        assert!(ext.raw.is_empty());
        for empty in ["", "  \n\t \r\n"] {
            std::fs::write(extensions_path(d.path()), empty).unwrap();
            let err = ExtensionsFile::load(d.path()).unwrap_err();
            let msg = err.to_string();
            assert!(
                msg.contains("extensions.json is empty; write {} for no settings"),
                "{msg}"
            );
        }
        std::fs::write(extensions_path(d.path()), "{}").unwrap();
        assert!(ExtensionsFile::load(d.path()).unwrap().raw.is_empty());
    }

    #[test]
    fn creds_json_that_others_can_read_is_refused_without_reading_it() {
        use std::os::unix::fs::PermissionsExt;
        let d = tempfile::tempdir().unwrap();
        let p = creds_path(d.path());
        std::fs::write(&p, r#"{"mcp": {"docs": {"token": "s3cret-value"}}}"#).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o644)).unwrap();
        let err = Credentials::load(d.path()).unwrap_err();
        let msg = err.to_string();
        assert!(
            msg.contains(&p.display().to_string())
                && msg.contains("0644")
                && msg.contains(&format!("chmod 600 {}", p.display())),
            "{msg}"
        );
        assert!(!msg.contains("s3cret-value") && !format!("{err:?}").contains("s3cret-value"));
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
        let creds = Credentials::load(d.path()).unwrap();
        assert_eq!(creds.stored("docs", "token"), Some("s3cret-value"));
        assert!(!format!("{creds:?}").contains("s3cret-value"), "{creds:?}");
    }
    #[test]
    fn fingerprints_are_keyed() {
        use crate::store::fingerprint::FingerprintKey;
        let v = json!({"servers": {
            "docs": {"type":"stdio","command":"x","env":{"T":{"env":"V"}}},
            "web": {"type":"http","url":"https://example.com/mcp","bearerTokenEnvVar":"V"}}});
        let s = parse_mcp(Some(&v)).unwrap();
        let env = |k: &str| (k == "V").then(|| "1234".to_owned());
        let key = |b: u8| {
            Credentials::default().with_fingerprint_key(FingerprintKey::from_bytes([b; 32]))
        };
        for server in &s.servers {
            let a1 = resolve(server, &env, &key(1)).unwrap().fingerprint;
            let a2 = resolve(server, &env, &key(1)).unwrap().fingerprint;
            let b = resolve(server, &env, &key(2)).unwrap().fingerprint;
            assert_eq!(a1, a2, "the same key, the same fingerprint");
            assert_ne!(a1, b, "another key, another fingerprint");
            assert_eq!(a1.len(), 64);
        }
        // A bearer token and a header of the same value are different configurations.
        let h = json!({"servers": {"web": {"type":"http","url":"https://example.com/mcp",
                                           "headers": {"authorization": {"env": "V"}}}}});
        let h = parse_mcp(Some(&h)).unwrap();
        assert_ne!(
            resolve(&h.servers[0], &env, &key(1)).unwrap().fingerprint,
            resolve(&s.servers[1], &env, &key(1)).unwrap().fingerprint
        );
    }

    #[test]
    fn stored_secrets_come_from_creds_json() {
        let v = json!({"servers": {"docs": {"type":"stdio","command":"x",
            "env":{"TOKEN":{"secret":"token"},"OTHER":{"env":"V"}}}}});
        let s = parse_mcp(Some(&v)).unwrap();
        let creds = Credentials {
            raw: json!({"mcp": {"docs": {"token": "st0red-value"}}})
                .as_object()
                .unwrap()
                .clone(),
            ..Default::default()
        };
        let env = |k: &str| (k == "V").then(|| "from-env".to_owned());
        let r = resolve(&s.servers[0], &env, &creds).unwrap();
        let ResolvedTransport::Stdio { env: full, .. } = &r.transport else {
            panic!("stdio")
        };
        assert_eq!(full["TOKEN"].expose(), "st0red-value");
        assert_eq!(full["OTHER"].expose(), "from-env");
        assert!(!format!("{r:?} {creds:?}").contains("st0red-value"));
        // Another stored value is another fingerprint.
        let rotated = Credentials {
            raw: json!({"mcp": {"docs": {"token": "rotated"}}})
                .as_object()
                .unwrap()
                .clone(),
            ..Default::default()
        };
        assert_ne!(
            resolve(&s.servers[0], &env, &rotated).unwrap().fingerprint,
            r.fingerprint
        );
        // Missing: the error names the key and the server, never a value.
        let other = Credentials {
            raw: json!({"mcp": {"docs": {"nottoken": "st0red-value"}}})
                .as_object()
                .unwrap()
                .clone(),
            ..Default::default()
        };
        let err = resolve(&s.servers[0], &env, &other)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("\"token\"") && err.contains("docs") && err.contains("creds.json"),
            "{err}"
        );
        assert!(!err.contains("st0red-value"), "{err}");
        // An empty name is refused when the settings are read.
        let empty = json!({"servers": {"docs": {"type":"stdio","command":"x",
            "env":{"TOKEN":{"secret":""}}}}});
        assert!(parse_mcp(Some(&empty)).is_err());
    }
}
