//! Turning `add` and `edit` flags into a `PATCH /settings/mcp` body: server fields apart from
//! secrets, and secret values read from the flags or from standard input (a terminal is
//! asked without echo).
//!
//! Owns: that body. Must not touch: the daemon (the caller sends it), the settings files.

use super::{McpError, RemoveFlags, ServerFlags};
use serde_json::{json, Map, Value};

/// Standard input's terminal with echo off until dropped (the old settings put back).
pub(super) struct NoEcho(Option<nix::libc::termios>);

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
pub(super) fn stdin_line(what: &str) -> Result<String, McpError> {
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

pub(super) fn read_stdin_line() -> Result<String, McpError> {
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
pub(super) fn secret_value(
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
pub(super) fn split_pair<'a>(flag: &str, s: &'a str) -> Result<(&'a str, &'a str), McpError> {
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
