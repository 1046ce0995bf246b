//! A settings change (`PATCH /settings/mcp`) applied to the contents of `extensions.json` and
//! `creds.json`, in memory: what the two files become, which servers it added or edited (the
//! ones a strict save tries), and which it deleted. Bad input is refused with the field it
//! names (`servers.docs.url`, `secrets.docs.env.TOKEN`), before anything is written.
//!
//! - `servers`: name → the server's fields, merged over the stored ones (JSON merge patch,
//!   RFC 7396: a field set to `null` is removed, `env` and `headers` merge by key), or `null`
//!   to delete the server and its credentials. A `type` other than the stored one starts the
//!   server over. `command_line` (a string) is split as a shell would split it
//!   ([`crate::store::cmdline`]) into `command` and `args`.
//! - `secrets`: name → `bearer_token`, `header` `{name, value}`, `env` `{KEY: value}`,
//!   `oauth_client` `{client_id, client_secret}`, `oauth: null`. A blank value keeps the
//!   stored one, `-` (or `null`) removes it. Values go to `creds.json` under
//!   `mcp.<server>` (`bearer_token`, `header`, `env.<KEY>`, `oauth_client`, `oauth`);
//!   `extensions.json` gets only references (`{"secret": "<key>"}`).
//! - `retryMs`: a positive integer, or `null` for the default.
//! - `toolSearch`: `{"budgetTokens": N}` (a positive integer, or `null` for the default), or
//!   `null` for the defaults.
//!
//! `oauth_client.rs` checks the `oauth_client` secret (its client, grant and what the grant
//! needs).
//!
//! Owns: that merge and its validation. Must not touch: files, connections.

use super::cmdline;
use super::settings::{
    header_name_problem, parse_mcp, valid_env_name, valid_server_name, validate_url, COMMON_FIELDS,
    MAX_SERVER_NAME, STDIO_FIELDS,
};
use serde_json::{Map, Value};
use std::collections::BTreeSet;

mod oauth_client;

use oauth_client::oauth_client;
pub use oauth_client::{MAX_PRIVATE_KEY_BYTES, OAUTH_GRANTS};

/// The longest `retryMs` accepted: a day.
pub const MAX_RETRY_MS: u64 = 86_400_000;

/// Bad input: the field it names, why, and for a command line the column.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct PatchError {
    pub field: String,
    pub message: String,
    pub column: Option<usize>,
    /// It names a server that is not configured (404 rather than 400).
    pub unknown_server: bool,
}

fn bad(field: impl Into<String>, message: impl Into<String>) -> PatchError {
    PatchError {
        field: field.into(),
        message: message.into(),
        column: None,
        unknown_server: false,
    }
}

/// What a change makes of the two files.
#[derive(Debug, Clone)]
pub struct Edited {
    pub extensions: Map<String, Value>,
    pub creds: Map<String, Value>,
    /// Servers added or edited (fields or secrets) that are enabled afterwards: a strict
    /// save tries each.
    pub tried: BTreeSet<String>,
    /// Servers edited into `"enabled": false`: not tried.
    pub switched_off: BTreeSet<String>,
    pub deleted: BTreeSet<String>,
}

/// The fields a patch may give a server beyond the settings' common and stdio ones
/// ([`COMMON_FIELDS`], [`STDIO_FIELDS`]): an HTTP server's, and `command_line`.
const PATCH_ONLY_FIELDS: [&str; 4] = ["url", "headers", "bearerTokenEnvVar", "command_line"];

/// Whether a patch may give a server the field `k`.
fn server_field(k: &str) -> bool {
    COMMON_FIELDS.contains(&k) || STDIO_FIELDS.contains(&k) || PATCH_ONLY_FIELDS.contains(&k)
}

/// Secrets a server may be given.
const SECRET_FIELDS: [&str; 5] = ["bearer_token", "header", "env", "oauth_client", "oauth"];

/// The stored keys a server's configuration refers to (others are dropped when it changes).
const BEARER: &str = "bearer_token";
const HEADER: &str = "header";
const ENV_PREFIX: &str = "env.";

fn object_mut<'a>(m: &'a mut Map<String, Value>, key: &str) -> &'a mut Map<String, Value> {
    let v = m
        .entry(key.to_owned())
        .or_insert_with(|| Value::Object(Map::new()));
    if !v.is_object() {
        *v = Value::Object(Map::new());
    }
    match v {
        Value::Object(o) => o,
        _ => unreachable!("made an object just above"),
    }
}

/// RFC 7396: objects merge by key, `null` removes, anything else replaces.
fn merge(target: &mut Value, patch: &Value) {
    match (target.as_object_mut(), patch) {
        (Some(t), Value::Object(p)) => {
            for (k, v) in p {
                if v.is_null() {
                    t.remove(k);
                } else if v.is_object() {
                    merge(
                        t.entry(k.clone())
                            .or_insert_with(|| Value::Object(Map::new())),
                        v,
                    );
                } else {
                    t.insert(k.clone(), v.clone());
                }
            }
        }
        (_, Value::Object(p)) => {
            let mut fresh = Value::Object(Map::new());
            merge(&mut fresh, &Value::Object(p.clone()));
            *target = fresh;
        }
        (_, v) => *target = v.clone(),
    }
}

/// A server's type as stored (`type`, else what its fields imply).
fn type_of(server: &Map<String, Value>) -> Option<&str> {
    match server.get("type").and_then(Value::as_str) {
        Some(t) => Some(t),
        None if server.contains_key("url") => Some("http"),
        None if server.contains_key("command") => Some("stdio"),
        None => None,
    }
}

/// Whether a secret value means "keep", "remove", or is a new value.
enum Given<'a> {
    Keep,
    Remove,
    Set(&'a str),
}

fn given<'a>(field: &str, v: &'a Value) -> Result<Given<'a>, PatchError> {
    match v {
        Value::Null => Ok(Given::Remove),
        Value::String(s) if s.is_empty() => Ok(Given::Keep),
        Value::String(s) if s == "-" => Ok(Given::Remove),
        Value::String(s) => {
            if s.contains(['\r', '\n', '\0']) {
                return Err(bad(field, "a secret may not contain a line break or NUL"));
            }
            Ok(Given::Set(s))
        }
        _ => Err(bad(
            field,
            "must be a string (\"\" keeps the stored value, \"-\" removes it)",
        )),
    }
}

/// Apply `patch` (the body of `PATCH /settings/mcp`) to the two files' contents.
pub fn apply(
    extensions: &Map<String, Value>,
    creds: &Map<String, Value>,
    patch: &Value,
) -> Result<Edited, PatchError> {
    let p = patch
        .as_object()
        .ok_or_else(|| bad("(body)", "must be a JSON object"))?;
    for k in p.keys() {
        if !["servers", "secrets", "retryMs", "toolSearch"].contains(&k.as_str()) {
            return Err(bad(
                k.as_str(),
                "unknown field (expected `servers`, `secrets`, `retryMs` or `toolSearch`)",
            ));
        }
    }
    let mut ext = extensions.clone();
    let mut cr = creds.clone();
    let mut out = Edited {
        extensions: Map::new(),
        creds: Map::new(),
        tried: BTreeSet::new(),
        switched_off: BTreeSet::new(),
        deleted: BTreeSet::new(),
    };
    {
        let mcp = object_mut(&mut ext, "mcp");
        match p.get("retryMs") {
            None => {}
            Some(Value::Null) => {
                mcp.remove("retryMs");
            }
            Some(v) => {
                let n = v
                    .as_u64()
                    .filter(|n| (1..=MAX_RETRY_MS).contains(n))
                    .ok_or_else(|| {
                        bad(
                            "retryMs",
                            format!("must be a positive integer of milliseconds, at most {MAX_RETRY_MS}"),
                        )
                    })?;
                mcp.insert("retryMs".into(), Value::from(n));
            }
        }
        edit_tool_search(mcp, p.get("toolSearch"))?;
    }
    let mut edited = BTreeSet::new();
    if let Some(servers) = p.get("servers") {
        let servers = servers.as_object().ok_or_else(|| {
            bad(
                "servers",
                "must be an object of server name → fields or null",
            )
        })?;
        for (name, def) in servers {
            edit_server(&mut ext, &mut cr, name, def, &mut out.deleted)?;
            if !def.is_null() {
                edited.insert(name.clone());
            }
        }
    }
    if let Some(secrets) = p.get("secrets") {
        let secrets = secrets
            .as_object()
            .ok_or_else(|| bad("secrets", "must be an object of server name → secrets"))?;
        for (name, s) in secrets {
            // Signing out alone (`oauth: null`) changes no setting to try: the server is
            // left needing a sign-in, which a trial could only confirm.
            let sign_out_only = s
                .as_object()
                .is_some_and(|m| m.keys().all(|k| k == "oauth"));
            if edit_secrets(&mut ext, &mut cr, name, s)? && !sign_out_only {
                edited.insert(name.clone());
            }
        }
    }
    // Stored secrets that no field refers to any more go (a type change, a removed header).
    for name in &edited {
        drop_unreferenced(&ext, &mut cr, name);
    }
    // The whole section must still parse: the result of a change is never a file the daemon
    // would refuse.
    let parsed = parse_mcp(ext.get("mcp")).map_err(|e| {
        let field = match &e {
            super::settings::SettingsError::Invalid { server, .. } => format!("servers.{server}"),
            _ => "servers".into(),
        };
        bad(field, e.to_string())
    })?;
    for name in edited {
        match parsed.servers.iter().find(|s| s.name == name) {
            Some(s) if s.enabled => {
                out.tried.insert(name);
            }
            Some(_) => {
                out.switched_off.insert(name);
            }
            None => {}
        }
    }
    tidy_empty(&mut cr);
    out.extensions = ext;
    out.creds = cr;
    Ok(out)
}

/// `toolSearch`: `{"budgetTokens": N | null}` merged over the stored one, or `null`.
fn edit_tool_search(mcp: &mut Map<String, Value>, v: Option<&Value>) -> Result<(), PatchError> {
    use super::settings::MAX_BUDGET_TOKENS;
    let fields = match v {
        None => return Ok(()),
        Some(Value::Null) => {
            mcp.remove("toolSearch");
            return Ok(());
        }
        Some(Value::Object(m)) => m,
        Some(_) => {
            return Err(bad(
                "toolSearch",
                "must be an object ({\"budgetTokens\": N}) or null",
            ))
        }
    };
    for (k, v) in fields {
        if k != "budgetTokens" {
            return Err(bad(
                format!("toolSearch.{k}"),
                "unknown field (known: budgetTokens)",
            ));
        }
        if !v.is_null()
            && !v
                .as_u64()
                .is_some_and(|n| (1..=MAX_BUDGET_TOKENS).contains(&n))
        {
            return Err(bad(
                "toolSearch.budgetTokens",
                format!(
                    "must be a positive integer of estimated tokens, at most {MAX_BUDGET_TOKENS}"
                ),
            ));
        }
    }
    let ts = object_mut(mcp, "toolSearch");
    for (k, v) in fields {
        if v.is_null() {
            ts.remove(k);
        } else {
            ts.insert(k.clone(), v.clone());
        }
    }
    if ts.is_empty() {
        mcp.remove("toolSearch");
    }
    Ok(())
}

fn edit_server(
    ext: &mut Map<String, Value>,
    cr: &mut Map<String, Value>,
    name: &str,
    def: &Value,
    deleted: &mut BTreeSet<String>,
) -> Result<(), PatchError> {
    let field = format!("servers.{name}");
    if !valid_server_name(name) {
        return Err(bad(
            field,
            format!("invalid server name: use 1 to {MAX_SERVER_NAME} letters, digits, `-` or single `_`, not starting or ending with `_`"),
        ));
    }
    let servers = object_mut(object_mut(ext, "mcp"), "servers");
    let Some(fields) = def.as_object() else {
        if !def.is_null() {
            return Err(bad(field, "must be an object of fields, or null to delete"));
        }
        if servers.remove(name).is_none() {
            return Err(PatchError {
                unknown_server: true,
                ..bad(field, format!("no server named {name:?} is configured"))
            });
        }
        if let Some(m) = cr.get_mut("mcp").and_then(Value::as_object_mut) {
            m.remove(name);
        }
        deleted.insert(name.to_owned());
        return Ok(());
    };
    for (k, v) in fields {
        if !server_field(k) {
            let known = [&COMMON_FIELDS[..], &STDIO_FIELDS, &PATCH_ONLY_FIELDS].concat();
            return Err(bad(
                format!("{field}.{k}"),
                format!("unknown field (known: {})", known.join(", ")),
            ));
        }
        check_field(&field, k, v)?;
    }
    if fields.contains_key("command_line")
        && (fields.contains_key("command") || fields.contains_key("args"))
    {
        return Err(bad(
            format!("{field}.command_line"),
            "give `command_line`, or `command` and `args`, not both",
        ));
    }
    let mut current = servers
        .get(name)
        .cloned()
        .filter(Value::is_object)
        .unwrap_or_else(|| Value::Object(Map::new()));
    let stored_type = current.as_object().and_then(type_of).map(str::to_owned);
    let new_type = fields.get("type").and_then(Value::as_str);
    if let (Some(old), Some(new)) = (stored_type.as_deref(), new_type) {
        if old != new {
            current = Value::Object(Map::new());
        }
    }
    let mut patch = fields.clone();
    if let Some(line) = patch.remove("command_line") {
        match line {
            Value::Null => {}
            Value::String(s) => {
                let words = cmdline::split(&s).map_err(|e| PatchError {
                    column: Some(e.column()),
                    ..bad(format!("{field}.command_line"), e.to_string())
                })?;
                let mut words = words.into_iter();
                let command = words
                    .next()
                    .filter(|c| !c.is_empty())
                    .ok_or_else(|| bad(format!("{field}.command_line"), "names no command"))?;
                patch.insert("command".into(), Value::String(command));
                patch.insert(
                    "args".into(),
                    Value::Array(words.map(Value::String).collect()),
                );
            }
            _ => return Err(bad(format!("{field}.command_line"), "must be a string")),
        }
    }
    merge(&mut current, &Value::Object(patch));
    let obj = current
        .as_object_mut()
        .ok_or_else(|| bad(field.clone(), "must be an object"))?;
    // A new server gets its type written out, so the file says what it is.
    if !obj.contains_key("type") {
        if let Some(t) = type_of(obj).map(str::to_owned) {
            obj.insert("type".into(), Value::String(t));
        }
    }
    // `bearerTokenEnvVar` given replaces a stored bearer token.
    if fields
        .get("bearerTokenEnvVar")
        .is_some_and(|v| !v.is_null())
    {
        obj.remove("bearerToken");
    }
    servers.insert(name.to_owned(), current);
    Ok(())
}

/// Checks of one given server field, with its exact name.
fn check_field(server: &str, k: &str, v: &Value) -> Result<(), PatchError> {
    let f = format!("{server}.{k}");
    let name = server.trim_start_matches("servers.");
    if v.is_null() {
        return Ok(());
    }
    match k {
        "type" => match v.as_str() {
            Some("stdio" | "http") => Ok(()),
            _ => Err(bad(f, "must be \"stdio\" or \"http\"")),
        },
        "url" => {
            let s = v.as_str().ok_or_else(|| bad(&f, "must be a string"))?;
            validate_url(name, s)
                .map(|_| ())
                .map_err(|e| bad(&f, strip_server(&e.to_string())))
        }
        "command" | "cwd" | "bearerTokenEnvVar" => match v.as_str() {
            Some("") => Err(bad(f, "must not be empty")),
            Some(s) if k == "bearerTokenEnvVar" && !valid_env_name(s) => {
                Err(bad(f, "must name an environment variable"))
            }
            Some(_) => Ok(()),
            None => Err(bad(f, "must be a string")),
        },
        "args" | "enabledTools" | "disabledTools" => match v.as_array() {
            Some(a) if a.iter().all(Value::is_string) => Ok(()),
            _ => Err(bad(f, "must be a list of strings")),
        },
        "command_line" => match v.as_str() {
            Some(_) => Ok(()),
            None => Err(bad(f, "must be a string")),
        },
        "enabled" => match v {
            Value::Bool(_) => Ok(()),
            _ => Err(bad(f, "must be true or false")),
        },
        "deferTools" => match v.as_str().and_then(super::settings::DeferTools::parse) {
            Some(_) => Ok(()),
            None => Err(bad(f, "must be \"auto\", \"never\" or \"always\"")),
        },
        "startupTimeoutMs" | "callTimeoutMs" => match v.as_u64() {
            Some(n) if (1..=MAX_RETRY_MS).contains(&n) => Ok(()),
            _ => Err(bad(
                f,
                format!("must be a positive integer of milliseconds, at most {MAX_RETRY_MS}"),
            )),
        },
        "env" | "headers" => {
            let m = v.as_object().ok_or_else(|| bad(&f, "must be an object"))?;
            for (key, r) in m {
                let kf = format!("{f}.{key}");
                if k == "env" && !valid_env_name(key) {
                    return Err(bad(
                        kf,
                        "not a variable name (letters, digits and `_`, not starting with a digit)",
                    ));
                }
                if k == "headers" {
                    if let Some(why) = header_name_problem(key, false) {
                        return Err(bad(kf, why));
                    }
                }
                match r {
                    Value::Null => {}
                    Value::String(_) => {
                        return Err(bad(
                            kf,
                            format!("secrets are never inlined: send the value in `secrets.{name}` (it goes to creds.json), or name a variable with {{\"env\": \"VARIABLE\"}}"),
                        ))
                    }
                    Value::Object(o)
                        if o.len() == 1
                            && (o.get("env").is_some_and(|x| {
                                x.as_str().is_some_and(valid_env_name)
                            }) || o.get("secret").is_some_and(Value::is_string)) => {}
                    _ => {
                        return Err(bad(
                            kf,
                            "must be {\"env\": \"VARIABLE\"} or {\"secret\": \"KEY\"}",
                        ))
                    }
                }
            }
            Ok(())
        }
        _ => Ok(()),
    }
}

/// `server "x": message` → `message` (the field already names the server).
fn strip_server(s: &str) -> String {
    match s.split_once(": ") {
        Some((head, rest)) if head.starts_with("server ") => rest.to_owned(),
        _ => s.to_owned(),
    }
}

/// Apply one server's secrets. Answers whether anything changed.
fn edit_secrets(
    ext: &mut Map<String, Value>,
    cr: &mut Map<String, Value>,
    name: &str,
    s: &Value,
) -> Result<bool, PatchError> {
    let field = format!("secrets.{name}");
    let s = s
        .as_object()
        .ok_or_else(|| bad(&field, "must be an object of secrets"))?;
    let servers = object_mut(object_mut(ext, "mcp"), "servers");
    let Some(server) = servers.get_mut(name).and_then(Value::as_object_mut) else {
        return Err(PatchError {
            unknown_server: true,
            ..bad(
                &field,
                format!("no server named {name:?} is configured (add it under `servers`)"),
            )
        });
    };
    let ty = type_of(server).unwrap_or("").to_owned();
    let store = object_mut(object_mut(cr, "mcp"), name);
    let mut changed = false;
    for (k, v) in s {
        let f = format!("{field}.{k}");
        if !SECRET_FIELDS.contains(&k.as_str()) {
            return Err(bad(
                f,
                format!("unknown secret (known: {})", SECRET_FIELDS.join(", ")),
            ));
        }
        let needs = |t: &str| -> Result<(), PatchError> {
            if ty == t {
                Ok(())
            } else {
                Err(bad(&f, format!("only a {t} server takes this secret")))
            }
        };
        match k.as_str() {
            "bearer_token" => {
                needs("http")?;
                match given(&f, v)? {
                    Given::Keep => {}
                    Given::Remove => {
                        changed |= store.remove(BEARER).is_some();
                        if server.get("bearerToken") == Some(&secret_ref(BEARER)) {
                            server.remove("bearerToken");
                            changed = true;
                        }
                    }
                    Given::Set(val) => {
                        if header_names(server)
                            .iter()
                            .any(|h| h.eq_ignore_ascii_case("Authorization"))
                        {
                            return Err(bad(
                                f,
                                "the server already sends an Authorization header; remove it first",
                            ));
                        }
                        store.insert(BEARER.into(), Value::String(val.to_owned()));
                        server.remove("bearerTokenEnvVar");
                        server.insert("bearerToken".into(), secret_ref(BEARER));
                        changed = true;
                    }
                }
            }
            "header" => {
                needs("http")?;
                changed |= edit_header(server, store, &f, v)?;
            }
            "env" => {
                needs("stdio")?;
                let m = v
                    .as_object()
                    .ok_or_else(|| bad(&f, "must be an object of KEY → value"))?;
                for (key, val) in m {
                    let kf = format!("{f}.{key}");
                    if !valid_env_name(key) {
                        return Err(bad(
                            kf,
                            "not a variable name (letters, digits and `_`, not starting with a digit)",
                        ));
                    }
                    let stored = format!("{ENV_PREFIX}{key}");
                    let env = object_mut(server, "env");
                    match given(&kf, val)? {
                        Given::Keep => {
                            if !store.contains_key(&stored) {
                                return Err(bad(kf, "no value is stored to keep; give one"));
                            }
                        }
                        Given::Remove => {
                            changed |= store.remove(&stored).is_some();
                            if env.get(key) == Some(&secret_ref(&stored)) {
                                env.remove(key);
                                changed = true;
                            }
                        }
                        Given::Set(x) => {
                            store.insert(stored.clone(), Value::String(x.to_owned()));
                            env.insert(key.clone(), secret_ref(&stored));
                            changed = true;
                        }
                    }
                    if env.is_empty() {
                        server.remove("env");
                    }
                }
            }
            "oauth_client" => {
                needs("http")?;
                match v {
                    Value::Null => changed |= store.remove("oauth_client").is_some(),
                    Value::String(x) if x == "-" => {
                        changed |= store.remove("oauth_client").is_some()
                    }
                    Value::String(x) if x.is_empty() => {}
                    Value::Object(o) => {
                        let c = Value::Object(oauth_client(&f, o, store.get("oauth_client"))?);
                        // A new client configuration gets a new try of its grant; a refusal
                        // of this very configuration (a strict save's trial) stands.
                        let key = super::settings::grant_key(&c.to_string());
                        if store.get("oauth_refused_grant").and_then(Value::as_str)
                            != Some(key.as_str())
                        {
                            store.remove("oauth_refused");
                            store.remove("oauth_refused_grant");
                        }
                        store.insert("oauth_client".into(), c);
                        changed = true;
                    }
                    _ => return Err(bad(
                        f,
                        "must be {\"client_id\": ..., \"client_secret\": ...}, or \"-\" to remove",
                    )),
                }
            }
            "oauth" => {
                if !v.is_null() {
                    return Err(bad(f, "only null is accepted (signs the server out)"));
                }
                // Signed out: the tokens go, and the settings say so until a sign-in.
                changed |= store.remove("oauth").is_some();
                store.remove("oauth_refused");
                store.remove("oauth_refused_grant");
                if changed {
                    store.insert("oauth_signed_out".into(), Value::Bool(true));
                }
            }
            _ => {}
        }
    }
    Ok(changed)
}

fn secret_ref(key: &str) -> Value {
    let mut m = Map::new();
    m.insert("secret".into(), Value::String(key.to_owned()));
    Value::Object(m)
}

fn header_names(server: &Map<String, Value>) -> Vec<String> {
    server
        .get("headers")
        .and_then(Value::as_object)
        .map(|h| h.keys().cloned().collect())
        .unwrap_or_default()
}

/// The one stored custom header: `{name, value}` (blank value keeps the stored one), or
/// `-`/`null` to remove it.
fn edit_header(
    server: &mut Map<String, Value>,
    store: &mut Map<String, Value>,
    f: &str,
    v: &Value,
) -> Result<bool, PatchError> {
    let current = server
        .get("headers")
        .and_then(Value::as_object)
        .and_then(|h| {
            h.iter()
                .find(|(_, r)| **r == secret_ref(HEADER))
                .map(|(k, _)| k.clone())
        });
    let remove = |server: &mut Map<String, Value>, store: &mut Map<String, Value>| {
        let mut changed = store.remove(HEADER).is_some();
        if let Some(name) = &current {
            let headers = object_mut(server, "headers");
            headers.remove(name);
            if headers.is_empty() {
                server.remove("headers");
            }
            changed = true;
        }
        changed
    };
    match v {
        Value::Null => Ok(remove(server, store)),
        Value::String(s) if s == "-" => Ok(remove(server, store)),
        Value::String(s) if s.is_empty() => Ok(false),
        Value::Object(o) => {
            for key in o.keys() {
                if key != "name" && key != "value" {
                    return Err(bad(
                        format!("{f}.{key}"),
                        "unknown field (known: name, value)",
                    ));
                }
            }
            let name = match o.get("name") {
                Some(Value::String(n)) if !n.is_empty() => n.clone(),
                None | Some(Value::String(_)) => current
                    .clone()
                    .ok_or_else(|| bad(format!("{f}.name"), "is required"))?,
                Some(_) => return Err(bad(format!("{f}.name"), "must be a string")),
            };
            let has_bearer =
                server.contains_key("bearerToken") || server.contains_key("bearerTokenEnvVar");
            if let Some(why) = header_name_problem(&name, has_bearer) {
                return Err(bad(format!("{f}.name"), why));
            }
            let vf = format!("{f}.value");
            let value = match o.get("value") {
                None => Given::Keep,
                Some(x) => given(&vf, x)?,
            };
            match value {
                Given::Remove => return Ok(remove(server, store)),
                Given::Keep if !store.contains_key(HEADER) => {
                    return Err(bad(vf, "no value is stored to keep; give one"))
                }
                Given::Keep => {}
                Given::Set(x) => {
                    store.insert(HEADER.into(), Value::String(x.to_owned()));
                }
            }
            let headers = object_mut(server, "headers");
            if let Some(old) = &current {
                headers.remove(old);
            }
            headers.insert(name, secret_ref(HEADER));
            Ok(true)
        }
        _ => Err(bad(
            f,
            "must be {\"name\": ..., \"value\": ...}, or \"-\" to remove",
        )),
    }
}

/// Drop a server's stored `bearer_token`, `header` and `env.*` values that its configuration
/// no longer refers to.
fn drop_unreferenced(ext: &Map<String, Value>, cr: &mut Map<String, Value>, name: &str) {
    let server = ext
        .get("mcp")
        .and_then(|m| m.get("servers"))
        .and_then(|s| s.get(name));
    let Some(store) = cr
        .get_mut("mcp")
        .and_then(Value::as_object_mut)
        .and_then(|m| m.get_mut(name))
        .and_then(Value::as_object_mut)
    else {
        return;
    };
    let mut referenced = BTreeSet::new();
    if let Some(server) = server {
        let mut refs = Vec::new();
        refs.extend(server.get("bearerToken"));
        for group in ["env", "headers"] {
            if let Some(m) = server.get(group).and_then(Value::as_object) {
                refs.extend(m.values());
            }
        }
        for r in refs {
            if let Some(k) = r.get("secret").and_then(Value::as_str) {
                referenced.insert(k.to_owned());
            }
        }
    }
    store.retain(|k, _| {
        let ours = k == BEARER || k == HEADER || k.starts_with(ENV_PREFIX);
        !ours || referenced.contains(k)
    });
}

/// Servers with nothing stored leave no empty object behind.
fn tidy_empty(cr: &mut Map<String, Value>) {
    if let Some(m) = cr.get_mut("mcp").and_then(Value::as_object_mut) {
        m.retain(|_, v| v.as_object().is_none_or(|o| !o.is_empty()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj(v: Value) -> Map<String, Value> {
        v.as_object().cloned().unwrap()
    }

    fn run(ext: Value, creds: Value, patch: Value) -> Result<Edited, PatchError> {
        apply(&obj(ext), &obj(creds), &patch)
    }

    #[test]
    fn adds_a_stdio_server_from_a_command_line_with_secrets_kept_apart() {
        let e = run(
            json!({"enabled": {"mcp": true}}),
            json!({}),
            json!({
                "servers": {"fs": {"type": "stdio", "command_line": "npx -y @modelcontextprotocol/server-filesystem \"/srv/my docs\""}},
                "secrets": {"fs": {"env": {"API_KEY": "s3cret-value"}}}
            }),
        )
        .unwrap();
        let fs = &e.extensions["mcp"]["servers"]["fs"];
        assert_eq!(fs["command"], "npx");
        assert_eq!(
            fs["args"],
            json!([
                "-y",
                "@modelcontextprotocol/server-filesystem",
                "/srv/my docs"
            ])
        );
        assert_eq!(fs["env"]["API_KEY"], json!({"secret": "env.API_KEY"}));
        assert_eq!(e.creds["mcp"]["fs"]["env.API_KEY"], "s3cret-value");
        assert!(!serde_json::to_string(&e.extensions)
            .unwrap()
            .contains("s3cret"));
        assert_eq!(e.extensions["enabled"]["mcp"], true, "other sections kept");
        assert!(e.tried.contains("fs"));
    }

    #[test]
    fn an_http_server_gets_a_stored_bearer_token_and_one_header() {
        let e = run(
            json!({}),
            json!({}),
            json!({
                "servers": {"search": {"url": "https://mcp.example.com/mcp"}},
                "secrets": {"search": {"bearer_token": "tok", "header": {"name": "X-Api-Key", "value": "k"}}}
            }),
        )
        .unwrap();
        let s = &e.extensions["mcp"]["servers"]["search"];
        assert_eq!(s["type"], "http");
        assert_eq!(s["bearerToken"], json!({"secret": "bearer_token"}));
        assert_eq!(s["headers"], json!({"X-Api-Key": {"secret": "header"}}));
        assert_eq!(
            e.creds["mcp"]["search"],
            json!({"bearer_token": "tok", "header": "k"})
        );
        // Blank keeps, `-` removes, and a renamed header keeps its value.
        let e2 = apply(
            &e.extensions,
            &e.creds,
            &json!({"secrets": {"search": {"bearer_token": "", "header": {"name": "X-Key", "value": ""}}}}),
        )
        .unwrap();
        assert_eq!(
            e2.creds["mcp"]["search"],
            json!({"bearer_token": "tok", "header": "k"})
        );
        assert_eq!(
            e2.extensions["mcp"]["servers"]["search"]["headers"],
            json!({"X-Key": {"secret": "header"}})
        );
        let e3 = apply(
            &e2.extensions,
            &e2.creds,
            &json!({"secrets": {"search": {"bearer_token": "-", "header": "-"}}}),
        )
        .unwrap();
        assert!(e3.creds.get("mcp").and_then(|m| m.get("search")).is_none());
        let s = &e3.extensions["mcp"]["servers"]["search"];
        assert!(
            s.get("bearerToken").is_none() && s.get("headers").is_none(),
            "{s}"
        );
    }

    #[test]
    fn edits_merge_and_a_new_type_starts_over() {
        let ext = json!({"mcp": {"servers": {"x": {"type": "stdio", "command": "a", "args": ["1"], "env": {"K": {"secret": "env.K"}}}}}});
        let creds = json!({"mcp": {"x": {"env.K": "v", "oauth_client": {"client_id": "c"}}}});
        let e = run(
            ext.clone(),
            creds.clone(),
            json!({"servers": {"x": {"enabled": false}}}),
        )
        .unwrap();
        assert_eq!(e.extensions["mcp"]["servers"]["x"]["command"], "a");
        assert_eq!(e.extensions["mcp"]["servers"]["x"]["enabled"], false);
        assert!(e.tried.is_empty() && e.switched_off.contains("x"));
        let e = run(
            ext.clone(),
            creds.clone(),
            json!({"servers": {"x": {"args": null}}}),
        )
        .unwrap();
        assert!(e.extensions["mcp"]["servers"]["x"].get("args").is_none());
        let e = run(
            ext,
            creds,
            json!({"servers": {"x": {"type": "http", "url": "http://127.0.0.1:9/mcp"}}}),
        )
        .unwrap();
        assert_eq!(
            e.extensions["mcp"]["servers"]["x"],
            json!({"type": "http", "url": "http://127.0.0.1:9/mcp"})
        );
        assert_eq!(
            e.creds["mcp"]["x"],
            json!({"oauth_client": {"client_id": "c"}}),
            "env secret dropped, oauth kept"
        );
    }

    #[test]
    fn deleting_removes_the_server_and_its_credentials() {
        let e = run(
            json!({"mcp": {"servers": {"x": {"command": "a"}, "y": {"command": "b"}}}}),
            json!({"mcp": {"x": {"env.K": "v"}, "y": {"env.K": "w"}}}),
            json!({"servers": {"x": null}}),
        )
        .unwrap();
        assert!(e.extensions["mcp"]["servers"].get("x").is_none());
        assert!(e.creds["mcp"].get("x").is_none());
        assert_eq!(e.creds["mcp"]["y"]["env.K"], "w");
        assert!(e.deleted.contains("x"));
        let err = run(json!({}), json!({}), json!({"servers": {"nope": null}})).unwrap_err();
        assert!(err.unknown_server);
    }

    #[test]
    fn bad_input_names_the_field() {
        let cases = [
            (
                json!({"servers": {"bad name": {"command": "a"}}}),
                "servers.bad name",
            ),
            (
                json!({"servers": {"x": {"command": "a", "colour": 1}}}),
                "servers.x.colour",
            ),
            (
                json!({"servers": {"x": {"url": "https://u:p@h/mcp"}}}),
                "servers.x.url",
            ),
            (
                json!({"servers": {"x": {"url": "https://h/mcp#frag"}}}),
                "servers.x.url",
            ),
            (
                json!({"servers": {"x": {"command": "a", "env": {"1BAD": {"env": "V"}}}}}),
                "servers.x.env.1BAD",
            ),
            (
                json!({"servers": {"x": {"command": "a", "env": {"K": "inline"}}}}),
                "servers.x.env.K",
            ),
            (
                json!({"servers": {"x": {"url": "https://h/", "headers": {"Mcp-Session-Id": {"env": "V"}}}}}),
                "servers.x.headers.Mcp-Session-Id",
            ),
            (
                json!({"servers": {"x": {"url": "https://h/", "headers": {"bad header": {"env": "V"}}}}}),
                "servers.x.headers.bad header",
            ),
            (
                json!({"servers": {"x": {"url": "https://h/"}}, "secrets": {"x": {"header": {"name": "mcp-protocol-version", "value": "v"}}}}),
                "secrets.x.header.name",
            ),
            (
                json!({"servers": {"x": {"url": "https://h/"}}, "secrets": {"x": {"bearer_token": "t", "header": {"name": "Authorization", "value": "v"}}}}),
                "secrets.x.header.name",
            ),
            (
                json!({"servers": {"x": {"command": "a"}}, "secrets": {"x": {"env": {"A-B": "v"}}}}),
                "secrets.x.env.A-B",
            ),
            (
                json!({"servers": {"x": {"command": "a"}}, "secrets": {"x": {"bearer_token": "t"}}}),
                "secrets.x.bearer_token",
            ),
            (
                json!({"secrets": {"ghost": {"bearer_token": "t"}}}),
                "secrets.ghost",
            ),
            (
                json!({"servers": {"x": {"command": "a", "deferTools": "sometimes"}}}),
                "servers.x.deferTools",
            ),
            (json!({"retryMs": 0}), "retryMs"),
            (
                json!({"toolSearch": {"budgetTokens": 0}}),
                "toolSearch.budgetTokens",
            ),
            (
                json!({"toolSearch": {"budgetTokens": "5"}}),
                "toolSearch.budgetTokens",
            ),
            (
                json!({"toolSearch": {"budgetTokens": 10_000_001}}),
                "toolSearch.budgetTokens",
            ),
            (json!({"toolSearch": {"size": 5}}), "toolSearch.size"),
            (json!({"toolSearch": 5}), "toolSearch"),
            (json!({"retryMs": "5"}), "retryMs"),
            (json!({"sneaky": 1}), "sneaky"),
            (
                json!({"servers": {"x": {"type": "carrier-pigeon"}}}),
                "servers.x.type",
            ),
        ];
        for (patch, field) in cases {
            let e = run(json!({}), json!({}), patch.clone()).unwrap_err();
            assert_eq!(e.field, field, "{patch}: {e}");
            assert!(
                !e.to_string().contains("inline") || field.ends_with(".K"),
                "{e}"
            );
        }
        for secret in ["t0ps3cret", "v4lue"] {
            let e = run(
                json!({}),
                json!({}),
                json!({"servers": {"x": {"command": "a"}}, "secrets": {"x": {"env": {"9": secret}}}}),
            )
            .unwrap_err();
            assert!(!e.to_string().contains(secret), "{e}");
        }
    }

    #[test]
    fn an_unbalanced_quote_is_refused_with_its_column() {
        let e = run(
            json!({}),
            json!({}),
            json!({"servers": {"x": {"command_line": "npx -y 'oops"}}}),
        )
        .unwrap_err();
        assert_eq!(e.field, "servers.x.command_line");
        assert_eq!(e.column, Some(8));
    }

    #[test]
    fn a_service_grant_is_checked_and_kept_in_creds_only() {
        let ext = json!({"mcp": {"servers": {"w": {"type": "http", "url": "https://h/mcp"}}}});
        let rng = ring::rand::SystemRandom::new();
        let doc = ring::signature::EcdsaKeyPair::generate_pkcs8(
            &ring::signature::ECDSA_P256_SHA256_FIXED_SIGNING,
            &rng,
        )
        .unwrap();
        let pem = format!(
            "-----BEGIN PRIVATE KEY-----\n{}\n-----END PRIVATE KEY-----\n",
            base64::Engine::encode(&base64::engine::general_purpose::STANDARD, doc.as_ref())
        );
        let e = run(
            ext.clone(),
            json!({"mcp": {"w": {"oauth_refused": "refused before"}}}),
            json!({"secrets": {"w": {"oauth_client": {"client_id": "svc",
                "grant": "client_credentials", "private_key": pem, "dpop": false}}}}),
        )
        .unwrap();
        let c = &e.creds["mcp"]["w"];
        assert_eq!(c["oauth_client"]["private_key"], pem.as_str());
        assert_eq!(c["oauth_client"]["dpop"], false);
        assert!(
            c.get("oauth_refused").is_none(),
            "a new configuration gets a new try"
        );
        assert!(!serde_json::to_string(&e.extensions)
            .unwrap()
            .contains("PRIVATE"));
        // Switching to a secret needs the key removed (exactly one way to authenticate).
        let err = apply(
            &e.extensions,
            &e.creds,
            &json!({"secrets": {"w": {"oauth_client": {"client_secret": "s"}}}}),
        )
        .unwrap_err();
        assert_eq!(err.field, "secrets.w.oauth_client.grant");
        let ok = apply(
            &e.extensions,
            &e.creds,
            &json!({"secrets": {"w": {"oauth_client": {"client_secret": "s", "private_key": "-"}}}}),
        )
        .unwrap();
        assert!(ok.creds["mcp"]["w"]["oauth_client"]
            .get("private_key")
            .is_none());
        for (client, field) in [
            (json!({"client_id": "a", "grant": "x"}), "grant"),
            (
                json!({"client_id": "a", "grant": "client_credentials", "private_key": "nope"}),
                "private_key",
            ),
            (
                json!({"grant": "jwt_bearer", "workload_token_file": "rel"}),
                "workload_token_file",
            ),
            (
                json!({"grant": "jwt_bearer", "workload_token_file": "/t",
                    "token_exchange": {"idp_token_endpoint": "https://i/t", "id_token_file": "/i"}}),
                "grant",
            ),
            (
                json!({"grant": "jwt_bearer", "token_exchange": {"idp_token_endpoint": "https://i/t", "id_token_file": "/i"}}),
                "client_id",
            ),
            (
                json!({"client_id": "a", "grant": "jwt_bearer", "token_exchange": {"idp_token_endpoint": "https://i/t"}}),
                "token_exchange.id_token_file",
            ),
            (
                json!({"client_id": "a", "grant": "jwt_bearer", "token_exchange": {"idp_token_endpoint": "https://i/t", "id_token_file": "/i", "x": "y"}}),
                "token_exchange.x",
            ),
            (json!({"client_id": "a", "dpop": "yes"}), "dpop"),
            (json!({"client_id": "a", "nope": 1}), "nope"),
            (
                json!({"grant": "jwt_bearer", "workload_token_file": "/t", "private_key_file": "/k"}),
                "client_id",
            ),
        ] {
            let err = run(
                ext.clone(),
                json!({}),
                json!({"secrets": {"w": {"oauth_client": client}}}),
            )
            .unwrap_err();
            assert_eq!(
                err.field,
                format!("secrets.w.oauth_client.{field}"),
                "{err}"
            );
            assert!(!err.to_string().contains("PRIVATE"));
        }
        let big = format!("{pem}{}", " ".repeat(MAX_PRIVATE_KEY_BYTES));
        let err = run(
            ext.clone(),
            json!({}),
            json!({"secrets": {"w": {"oauth_client": {"client_id": "a",
                "grant": "client_credentials", "private_key": big}}}}),
        )
        .unwrap_err();
        assert_eq!(err.field, "secrets.w.oauth_client.private_key");
        assert!(err.message.contains("16384"), "{err}");
        let e = run(
            ext,
            json!({}),
            json!({"secrets": {"w": {"oauth_client": {"client_id": "a", "grant": "jwt_bearer",
                "token_exchange": {"idp_token_endpoint": "https://idp.example/token",
                    "id_token_file": "/run/id_token", "idp_client_id": "albedo"}}}}}),
        )
        .unwrap();
        assert_eq!(
            e.creds["mcp"]["w"]["oauth_client"]["token_exchange"]["idp_client_id"],
            "albedo"
        );
    }

    #[test]
    fn an_oauth_client_keeps_what_is_not_given_and_takes_a_metadata_url() {
        let ext = json!({"mcp": {"servers": {"w": {"type": "http", "url": "https://h/mcp"}}}});
        let e = run(
            ext.clone(),
            json!({}),
            json!({"secrets": {"w": {"oauth_client": {"client_id": "id", "client_secret": "sec"}}}}),
        )
        .unwrap();
        let e = apply(
            &e.extensions,
            &e.creds,
            &json!({"secrets": {"w": {"oauth_client": {"metadata_url": "https://me.example/client.json"}}}}),
        )
        .unwrap();
        assert_eq!(
            e.creds["mcp"]["w"]["oauth_client"],
            json!({"client_id": "id", "client_secret": "sec", "metadata_url": "https://me.example/client.json"})
        );
        let err = run(
            ext.clone(),
            json!({}),
            json!({"secrets": {"w": {"oauth_client": {"metadata_url": "http://me.example/c.json"}}}}),
        )
        .unwrap_err();
        assert_eq!(err.field, "secrets.w.oauth_client.metadata_url");
        let err = run(
            ext,
            json!({}),
            json!({"secrets": {"w": {"oauth_client": {}}}}),
        )
        .unwrap_err();
        assert_eq!(err.field, "secrets.w.oauth_client.client_id");
    }

    #[test]
    fn signing_out_drops_the_tokens_and_says_so() {
        let ext = json!({"mcp": {"servers": {"w": {"type": "http", "url": "https://h/mcp"}}}});
        let e = run(
            ext,
            json!({"mcp": {"w": {"oauth": {"access_token": "t"}, "oauth_refused": "x", "oauth_clients": []}}}),
            json!({"secrets": {"w": {"oauth": null}}}),
        )
        .unwrap();
        assert_eq!(
            e.creds["mcp"]["w"],
            json!({"oauth_signed_out": true, "oauth_clients": []})
        );
        assert!(e.tried.is_empty(), "a sign-out alone is not tried");
    }

    #[test]
    fn defer_tools_and_the_budget_are_set_and_reset() {
        let e = run(
            json!({"mcp": {"servers": {"x": {"command": "a"}}}}),
            json!({}),
            json!({"servers": {"x": {"deferTools": "always"}}, "toolSearch": {"budgetTokens": 500}}),
        )
        .unwrap();
        assert_eq!(e.extensions["mcp"]["servers"]["x"]["deferTools"], "always");
        assert_eq!(e.extensions["mcp"]["toolSearch"]["budgetTokens"], 500);
        let m = parse_mcp(e.extensions.get("mcp")).unwrap();
        assert_eq!(m.budget_tokens, 500);
        assert_eq!(
            m.servers[0].defer_tools,
            super::super::settings::DeferTools::Always
        );
        let e = apply(
            &e.extensions,
            &e.creds,
            &json!({"servers": {"x": {"deferTools": null}}, "toolSearch": null}),
        )
        .unwrap();
        assert!(e.extensions["mcp"].get("toolSearch").is_none());
        let m = parse_mcp(e.extensions.get("mcp")).unwrap();
        assert_eq!(
            m.budget_tokens,
            super::super::settings::DEFAULT_BUDGET_TOKENS
        );
        assert_eq!(m.servers[0].defer_tools, Default::default());
    }

    #[test]
    fn retry_ms_is_set_and_reset() {
        let e = run(json!({}), json!({}), json!({"retryMs": 5000})).unwrap();
        assert_eq!(e.extensions["mcp"]["retryMs"], 5000);
        let e = apply(&e.extensions, &e.creds, &json!({"retryMs": null})).unwrap();
        assert!(e.extensions["mcp"].get("retryMs").is_none());
    }
}
