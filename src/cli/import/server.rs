//! One server as any format gives it ([`Entry`]), made into its settings-patch entry and its
//! secrets ([`build`]): a literal secret goes to `secrets`, a variable becomes a reference, and
//! what cannot be carried over is a note or skips the server.
//!
//! Owns: the rules of that conversion. Must not touch: the file formats, the daemon.

use super::*;

/// A value as a format gives it: text (variables per the dialect) or a variable's name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Given {
    Text(String),
    Var(String),
}

impl Given {
    /// What this secret-bearing value becomes: a reference to the daemon's variable, a literal
    /// secret, or why it cannot be carried over.
    fn class(&self, ctx: &Ctx) -> Class {
        match self {
            Given::Var(var) => reference(var, false),
            Given::Text(t) => ctx.secret(t),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    Stdio,
    Http { sse: bool },
}

#[derive(Debug, Clone)]
pub(super) struct Entry {
    pub(super) kind: Kind,
    pub(super) command: Option<String>,
    pub(super) args: Vec<String>,
    pub(super) cwd: Option<String>,
    pub(super) env: Vec<(String, Given)>,
    pub(super) url: Option<String>,
    pub(super) headers: Vec<(String, Given)>,
    pub(super) bearer: Option<Given>,
    pub(super) enabled: Option<bool>,
    pub(super) enabled_tools: Option<Vec<String>>,
    pub(super) disabled_tools: Option<Vec<String>>,
    pub(super) startup_ms: Option<u64>,
    pub(super) call_ms: Option<u64>,
}

impl Entry {
    pub(super) fn new(kind: Kind) -> Entry {
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
pub(super) struct Built {
    pub(super) server: Map<String, Value>,
    pub(super) secrets: Map<String, Value>,
    pub(super) transport: &'static str,
    pub(super) target: String,
    pub(super) secret_names: Vec<String>,
}

/// A word as a shell would read it back (`store::cmdline::split`): quoted when it must be.
pub(super) fn quoted(w: &str) -> String {
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
pub(super) fn storable(v: &str) -> Result<(), &'static str> {
    match v {
        "" => Err("its value is empty, which albedo-mcp cannot store as a secret"),
        "-" => Err("its value is `-`, which the settings API reads as \"remove\""),
        _ => Ok(()),
    }
}

/// The bearer token from `class`; whether it is set.
pub(super) fn set_bearer(
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

pub(super) fn build(
    original: &str,
    e: Entry,
    ctx: &Ctx,
    notes: &mut Vec<String>,
) -> Result<Built, String> {
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
                match v.class(ctx) {
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
            // The configured bearer, then `Authorization: Bearer X` headers (whatever the
            // order): the first is the server's bearer token.
            let bearer_header = |h: &str, v: &Given| -> Option<String> {
                match v {
                    Given::Text(t) if h.eq_ignore_ascii_case("authorization") => t
                        .get(..7)
                        .filter(|p| p.eq_ignore_ascii_case("bearer "))
                        .map(|_| t[7..].trim().to_owned()),
                    _ => None,
                }
            };
            let configured = e.bearer.iter().map(|b| (None, b.class(ctx)));
            let headers_given = e
                .headers
                .iter()
                .filter_map(|(h, v)| bearer_header(h, v).map(|t| (Some(h), ctx.secret(&t))));
            for (header, class) in configured.chain(headers_given) {
                if bearer_set {
                    if let Some(h) = header {
                        notes.push(format!(
                            "{who}: header {h} is not imported: the server already has a \
                             bearer token"
                        ));
                    }
                    continue;
                }
                bearer_set = set_bearer(
                    &who,
                    class,
                    &mut server,
                    &mut secrets,
                    &mut secret_names,
                    notes,
                );
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
                match v.class(ctx) {
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
