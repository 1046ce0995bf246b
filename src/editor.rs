//! Editor-supplied MCP servers (the `editor-mcp` extension): the `mcpServers` list an ACP v1
//! client sends with `session/new`, `session/load` and `session/resume`, parsed with the
//! official ACP schema types (`agent_client_protocol::v1::schema::McpServer`) and resolved
//! in memory only. Nothing here is ever written to `extensions.json`, `creds.json` or the
//! catalogue store: env values and header values live in [`Secret`]s of the resolved
//! server, the [`ServerConfig`] kept beside it carries no value, and the fingerprint is a
//! SHA-256 kept in memory only.
//!
//! Naming: an editor server named `fs` is the session's server `editor:fs` (a configured
//! server name can never contain `:`, so the two never clash) and its tools are advertised
//! as `editor__fs__<tool>` (see `advertise::server_prefix`).
//!
//! Transports: stdio (no `type`, or `"type": "stdio"`) and `http` (Streamable HTTP). `sse`
//! (the deprecated HTTP+SSE transport) is accepted in the list but refused per server: it is
//! left out of the session with a warning saying so.
//!
//! Owns: parsing and resolving the list. Must not touch: I/O of any kind.

use crate::store::settings::{
    self, ResolvedServer, ResolvedTransport, Secret, ServerConfig, TransportConfig,
};
use agent_client_protocol::v1::schema::McpServer;
use serde_json::Value;
use sha2::Digest;
use std::collections::BTreeMap;
use std::sync::Arc;

/// The extension's name (tools carry it as `"extension"`).
pub const EXTENSION: &str = "editor-mcp";
/// What the session's server key of an editor server starts with.
pub const KEY_PREFIX: &str = "editor:";

/// One editor server of a session's list, resolved in memory.
#[derive(Debug, Clone)]
pub struct EditorServer {
    /// The name the editor gave (sanitized: see [`sanitize_name`]).
    pub name: String,
    /// `Ok`: ready to connect; `Err`: refused (an `sse` server), with the reason.
    pub resolved: Result<Arc<ResolvedServer>, (ServerConfig, String)>,
}

/// Whether a session's server key names an editor server.
pub fn is_editor_key(key: &str) -> bool {
    key.starts_with(KEY_PREFIX)
}

/// An editor's free-text name made fit for tool names: characters other than letters,
/// digits and `-` become `_`, runs of `_` become one, no `_` at either end, at most 48 bytes.
pub fn sanitize_name(name: &str) -> String {
    let mut out = String::new();
    for c in name.chars() {
        let c = if c.is_ascii_alphanumeric() || c == '-' {
            c
        } else {
            '_'
        };
        if c == '_' && (out.is_empty() || out.ends_with('_')) {
            continue;
        }
        out.push(c);
        if out.len() >= settings::MAX_SERVER_NAME {
            break;
        }
    }
    while out.ends_with('_') {
        out.pop();
    }
    out
}

/// Quoted text in a parse error may be a value the editor sent (a secret): left out.
fn scrub(msg: &str) -> String {
    let mut out = String::new();
    let mut quoted = false;
    for c in msg.chars() {
        if c == '"' {
            if !quoted {
                out.push_str("\"…\"");
            }
            quoted = !quoted;
            continue;
        }
        if !quoted {
            out.push(c);
        }
    }
    out
}

fn config(key: String, transport: TransportConfig) -> ServerConfig {
    ServerConfig {
        name: key,
        transport,
        enabled: true,
        enabled_tools: None,
        disabled_tools: Vec::new(),
        startup_timeout_ms: settings::DEFAULT_STARTUP_TIMEOUT_MS,
        call_timeout_ms: settings::DEFAULT_CALL_TIMEOUT_MS,
        defer_tools: settings::DeferTools::Auto,
    }
}

/// Parse and resolve a whole list as ACP sends it. A malformed entry refuses the whole list
/// with a message naming it (its index, and its name when it has one); values are never
/// quoted. `env` reads the daemon's environment (the base `HOME`, `PATH`, `TMPDIR` of a
/// stdio server; the editor's `env` entries extend it).
pub fn parse_list(
    list: &[Value],
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Vec<EditorServer>, String> {
    let mut out: Vec<EditorServer> = Vec::new();
    for (i, entry) in list.iter().enumerate() {
        let raw_name = entry
            .get("name")
            .and_then(Value::as_str)
            .map(|s| crate::protocol::text::clean(s, 64));
        let what = match &raw_name {
            Some(n) => format!("editor_mcp_servers[{i}] ({n:?})"),
            None => format!("editor_mcp_servers[{i}]"),
        };
        let server: McpServer = serde_json::from_value(entry.clone())
            .map_err(|e| format!("{what} is not an ACP MCP server: {}", scrub(&e.to_string())))?;
        let e = resolve(server, env).map_err(|why| format!("{what}: {why}"))?;
        if let Some(other) = out.iter().find(|o| o.name == e.name) {
            return Err(format!(
                "{what}: a second server named {:?} (names must be distinct after keeping only letters, digits, `-` and `_`)",
                other.name
            ));
        }
        out.push(e);
    }
    Ok(out)
}

fn resolve(
    server: McpServer,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<EditorServer, String> {
    let mut mac = sha2::Sha256::new();
    let mut field = |b: &[u8]| {
        mac.update((b.len() as u64).to_be_bytes());
        mac.update(b);
    };
    let (name, transport, cfg) = match server {
        McpServer::Stdio(s) => {
            let name = sanitize_name(&s.name);
            let command = s.command.to_string_lossy().into_owned();
            if command.is_empty() {
                return Err("`command` is empty".into());
            }
            let mut full = BTreeMap::new();
            for base in ["HOME", "PATH", "TMPDIR"] {
                if let Some(v) = env(base) {
                    full.insert(base.to_owned(), Secret::new(v));
                }
            }
            field(b"stdio");
            field(command.as_bytes());
            for a in &s.args {
                field(a.as_bytes());
            }
            for v in &s.env {
                if !settings::valid_env_name(&v.name) {
                    return Err(format!(
                        "the environment variable name {:?} is not valid",
                        crate::protocol::text::clean(&v.name, 64)
                    ));
                }
                field(v.name.as_bytes());
                field(v.value.as_bytes());
                full.insert(v.name.clone(), Secret::new(v.value.clone()));
            }
            let cfg = config(
                format!("{KEY_PREFIX}{name}"),
                TransportConfig::Stdio {
                    command: command.clone(),
                    args: s.args.clone(),
                    cwd: None,
                    env: BTreeMap::new(),
                },
            );
            let t = ResolvedTransport::Stdio {
                command,
                args: s.args,
                cwd: None,
                env: full,
            };
            (name, Some(t), cfg)
        }
        McpServer::Http(h) => {
            let name = sanitize_name(&h.name);
            let key = format!("{KEY_PREFIX}{name}");
            let url = settings::validate_url(&key, &h.url).map_err(|e| e.to_string())?;
            field(b"http");
            field(url.as_str().as_bytes());
            let mut hs = Vec::new();
            for v in &h.headers {
                if let Some(p) = settings::header_name_problem(&v.name, false) {
                    return Err(p);
                }
                field(v.name.as_bytes());
                field(v.value.as_bytes());
                hs.push((v.name.clone(), Secret::new(v.value.clone())));
            }
            let cfg = config(
                key,
                TransportConfig::Http {
                    url: url.to_string(),
                    bearer_token: None,
                    headers: BTreeMap::new(),
                },
            );
            (
                name,
                Some(ResolvedTransport::Http { url, headers: hs }),
                cfg,
            )
        }
        McpServer::Sse(s) => {
            let name = sanitize_name(&s.name);
            let cfg = config(
                format!("{KEY_PREFIX}{name}"),
                TransportConfig::Http {
                    url: String::new(),
                    bearer_token: None,
                    headers: BTreeMap::new(),
                },
            );
            (name, None, cfg)
        }
        _ => return Err("this kind of MCP server is not supported".into()),
    };
    if name.is_empty() {
        return Err("`name` has no letter or digit".into());
    }
    let resolved = match transport {
        Some(t) => {
            field(cfg.name.as_bytes());
            Ok(Arc::new(ResolvedServer {
                config: cfg,
                transport: t,
                service_grant: None,
                fingerprint: format!("editor-{}", hex::encode(mac.finalize())),
            }))
        }
        None => Err((
            cfg,
            format!(
                "editor MCP server {name:?} was left out: its transport `sse` (the deprecated \
                 HTTP+SSE transport) is not supported; editor servers may use stdio or `http` \
                 (Streamable HTTP)"
            ),
        )),
    };
    Ok(EditorServer { name, resolved })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn env(_: &str) -> Option<String> {
        None
    }

    #[test]
    fn parses_what_zed_sends() {
        let list = vec![
            json!({"name": "fs", "command": "/bin/mcp-fs", "args": ["--stdio"], "env": [{"name": "API_KEY", "value": "s3cr3t"}]}),
            json!({"type": "http", "name": "linear app", "url": "https://mcp.example.com/mcp", "headers": [{"name": "Authorization", "value": "Bearer t"}]}),
            json!({"type": "sse", "name": "old", "url": "https://x.example/sse", "headers": []}),
        ];
        let got = parse_list(&list, &env).unwrap();
        assert_eq!(got[0].name, "fs");
        assert_eq!(got[1].name, "linear_app");
        assert!(got[2].resolved.as_ref().unwrap_err().1.contains("sse"));
        let r = got[0].resolved.as_ref().unwrap();
        assert_eq!(r.config.name, "editor:fs");
        assert!(!format!("{r:?}").contains("s3cr3t"));
        assert!(!serde_json::to_string(&r.config).unwrap().contains("s3cr3t"));
    }

    #[test]
    fn a_malformed_entry_is_named_and_values_are_not_quoted() {
        let list = vec![
            json!({"name": "ok", "command": "/bin/x", "args": [], "env": []}),
            json!({"name": "bad", "command": "/bin/x", "args": [], "env": "s3cr3t"}),
        ];
        let e = parse_list(&list, &env).unwrap_err();
        assert!(
            e.contains("editor_mcp_servers[1]") && e.contains("bad"),
            "{e}"
        );
        assert!(!e.contains("s3cr3t"), "{e}");
        let dup = vec![
            json!({"name": "a b", "command": "/bin/x", "args": [], "env": []}),
            json!({"name": "a_b", "command": "/bin/x", "args": [], "env": []}),
        ];
        assert!(parse_list(&dup, &env)
            .unwrap_err()
            .contains("second server"));
    }
}
