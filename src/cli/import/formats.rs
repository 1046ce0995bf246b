//! The formats' server entries read into an [`Entry`](super::server::Entry): the JSON of
//! Claude, Cursor and VS Code (`json_entry`), and Codex's `[mcp_servers.NAME]` tables
//! (`codex_entry`).
//!
//! Owns: each format's fields and their checks. Must not touch: the patch (server.rs builds
//! it).

use super::*;

pub(super) fn string_list(v: &Value, field: &str) -> Result<Vec<String>, String> {
    v.as_array()
        .and_then(|a| a.iter().map(|x| x.as_str().map(str::to_owned)).collect())
        .ok_or_else(|| format!("`{field}` must be a list of strings"))
}

/// A map of strings (`env`, `headers`); numbers and booleans are taken as their text.
pub(super) fn given_map(
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

pub(super) fn opt_str(obj: &Map<String, Value>, field: &str) -> Result<Option<String>, String> {
    match obj.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(_) => Err(format!("`{field}` must be a string")),
    }
}

/// A `mcpServers` (Claude, Cursor) or VS Code `servers` entry.
pub(super) fn json_entry(
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
pub(super) fn seconds_ms(v: &Value, field: &str) -> Result<u64, String> {
    let ms = v
        .as_f64()
        .map(|s| (s * 1000.0).round())
        .filter(|ms| *ms >= 1.0 && *ms < 1e15)
        .ok_or_else(|| format!("`{field}` must be a positive number of seconds"))?;
    Ok(ms as u64)
}

/// A Codex `[mcp_servers.NAME]` table (as JSON).
pub(super) fn codex_entry(
    original: &str,
    v: &Value,
    notes: &mut Vec<String>,
) -> Result<Entry, String> {
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
