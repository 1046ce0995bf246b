//! The settings API: `GET /settings/mcp` (the `mcp` section as configured, each server's live
//! status, its `auth` group, which secrets are set but never a value, and what is wrong with
//! the configuration), `PATCH /settings/mcp` (servers, secrets and `retryMs`, saved strictly),
//! `GET /settings/mcp/suggest-name`, and the extension's default (`GET /extensions`,
//! `PUT /extensions/mcp`, `POST /extensions/mcp/reload`).
//!
//! A strict save: under one lock (concurrent changes are serialized, none is lost) the files
//! are read; a hand edit of `extensions.json` since the daemon last read it is a 409
//! `changed_on_disk`; the change is merged and checked (`store::edit`: 400 naming the field,
//! nothing written); every server it added, edited or switched on is started, initialized
//! and discovered (`actors::strict`): one that cannot is a 409 `server_failed` and nothing is
//! written, so both files stay as they were byte for byte; one answering 401 is kept, needing
//! a sign-in. Then both files are written as one change (`store::pair`) and every session
//! reloads once (a deleted server's connections close and its processes end).
//!
//! Owns: those handlers and their JSON shapes. Must not touch: transports, the files' format
//! (that is `store`).

use super::body::{Optional, Strict};
use super::{ApiError, AppState, SessionHandle};
use crate::actors::composition::Reload;
use crate::actors::connection::LinkState;
use crate::actors::runtime::ServerState;
use crate::actors::strict::{SavedTools, TryOutcome, TryServers};
use crate::advertise::ToolKind;
use crate::store::edit::{self, PatchError};
use crate::store::pair;
use crate::store::problems;
use crate::store::settings::{
    self, extensions_path, Credentials, ExtensionsFile, ServerConfig, SettingsError,
};
use actix_web::http::StatusCode;
use actix_web::{web, HttpResponse};
use serde::Deserialize;
use serde_json::{json, Map, Value};
use sha2::{Digest, Sha256};
use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::Arc;

/// The digest of `extensions.json` as the daemon last read or wrote it (`None`: no file).
pub type FileDigest = Option<[u8; 32]>;

pub fn digest(bytes: Option<&[u8]>) -> FileDigest {
    bytes.map(|b| Sha256::digest(b).into())
}

/// The digest of `extensions.json` on disk now.
pub fn digest_on_disk(home: &std::path::Path) -> FileDigest {
    pair::read_bytes(&extensions_path(home))
        .ok()
        .flatten()
        .as_deref()
        .map(|b| Sha256::digest(b).into())
}

fn revision(d: &FileDigest) -> String {
    d.map(|d| hex::encode(&d[..16])).unwrap_or_default()
}

fn blocking_failed(e: impl std::fmt::Display) -> ApiError {
    ApiError::internal(format!("a settings task failed: {e}"))
}

fn settings_error(e: SettingsError) -> ApiError {
    ApiError::new(
        StatusCode::UNPROCESSABLE_ENTITY,
        "invalid_settings",
        e.to_string(),
    )
}

fn patch_error(e: PatchError) -> ApiError {
    let (status, code) = if e.unknown_server {
        (StatusCode::NOT_FOUND, "unknown_server")
    } else {
        (StatusCode::BAD_REQUEST, "invalid_settings")
    };
    let mut err = ApiError::not_run(status, code, e.to_string());
    let mut extra = json!({"outcome": "not_run", "field": e.field});
    if let Some(c) = e.column {
        extra["column"] = Value::from(c);
    }
    err.extra = Some(extra);
    err
}

/// The files as read for one request.
struct Read {
    digest: FileDigest,
    ext: Result<ExtensionsFile, SettingsError>,
    creds: Result<Credentials, SettingsError>,
    problems: Vec<String>,
}

fn read_files(home: &std::path::Path) -> Read {
    let bytes = pair::read_bytes(&extensions_path(home));
    let (digest, ext) = match bytes {
        Ok(b) => (
            self::digest(b.as_deref()),
            ExtensionsFile::parse(home, b.as_deref()),
        ),
        Err(e) => (
            None,
            Err(SettingsError::Section(format!("extensions.json: {e}"))),
        ),
    };
    let creds = Credentials::load(home);
    let env = |k: &str| std::env::var(k).ok();
    let mut problems = problems::settings_problems(&ext, &creds, &env);
    problems.extend(problems::config_problems(home));
    problems::report(&problems);
    Read {
        digest,
        ext,
        creds,
        problems,
    }
}

/// `GET /settings/mcp`.
pub async fn get_settings(state: web::Data<AppState>) -> Result<HttpResponse, ApiError> {
    let home = state.home.clone();
    let read = web::block(move || read_files(&home))
        .await
        .map_err(blocking_failed)?;
    Ok(HttpResponse::Ok().json(view(&state, &read).await))
}

/// A configured server's fields as shown: references only. A value a hand edit inlined (which
/// the daemon refuses to use) is hidden, and so is a password in a URL.
fn shown_fields(def: &Value) -> Value {
    let mut def = def.clone();
    let Some(obj) = def.as_object_mut() else {
        return Value::Null;
    };
    for group in ["env", "headers"] {
        if let Some(m) = obj.get_mut(group).and_then(Value::as_object_mut) {
            for v in m.values_mut() {
                if !v.is_object() {
                    *v = json!({"inline": "hidden: secrets are never inlined; set it again through `secrets`"});
                }
            }
        }
    }
    if let Some(b) = obj.get_mut("bearerToken") {
        if !b.is_object() {
            *b = json!({"inline": "hidden"});
        }
    }
    if let Some(Value::String(u)) = obj.get_mut("url") {
        if let Ok(mut parsed) = url::Url::parse(u) {
            if parsed.password().is_some() || !parsed.username().is_empty() {
                let _ = parsed.set_password(None);
                let _ = parsed.set_username("");
                *u = format!("{parsed} (userinfo hidden)");
            }
        }
    }
    def
}

/// Which secrets are stored for a server: names, never values.
fn secrets_set(creds: Option<&Credentials>, name: &str, def: &Value) -> Value {
    let stored = creds
        .and_then(|c| c.raw.get("mcp"))
        .and_then(|m| m.get(name))
        .and_then(Value::as_object);
    let has = |k: &str| stored.is_some_and(|s| s.contains_key(k));
    let header = has("header")
        .then(|| {
            def.get("headers").and_then(Value::as_object).and_then(|h| {
                h.iter()
                    .find(|(_, r)| r.get("secret").and_then(Value::as_str) == Some("header"))
                    .map(|(k, _)| k.clone())
            })
        })
        .flatten();
    let env: Vec<String> = stored
        .map(|s| {
            s.keys()
                .filter_map(|k| k.strip_prefix("env.").map(str::to_owned))
                .collect()
        })
        .unwrap_or_default();
    json!({
        "bearer_token": has("bearer_token"),
        "header": header,
        "env": env,
        "oauth_client": has("oauth_client"),
    })
}

/// What the daemon knows of a server's connection, best first: a session's live connection,
/// the last strict save's trial, why a session left it out, the saved catalogue.
fn status_of(
    state: &AppState,
    sessions: &[Arc<SessionHandle>],
    cfg: &ServerConfig,
    fingerprint: Option<&str>,
    saved: &HashMap<String, crate::actors::strict::SavedSummary>,
) -> Value {
    let name = &cfg.name;
    if !cfg.enabled {
        return json!({"state": "disabled", "era": null, "protocol_version": null, "tools": null, "last_error": null});
    }
    // Up to four sessions that hold it; a connected one wins.
    let mut best: Option<Value> = None;
    for s in sessions {
        let snap = s.shared.load();
        let Some(conn) = snap.conns.get(name) else {
            continue;
        };
        let st = conn.status();
        let tools = snap
            .table
            .tools
            .iter()
            .chain(&snap.deferred.tools)
            .filter(|t| t.server == *name && matches!(t.kind, ToolKind::Tool { .. }))
            .count();
        let state = match st.state {
            // A lazy server: not dialled until one of its tools is called.
            LinkState::Idle if snap.lazy.contains(name) => "not_connected",
            LinkState::Connected => "connected",
            LinkState::Connecting | LinkState::Idle => "connecting",
            LinkState::Unavailable | LinkState::Closed => "unavailable",
            LinkState::NeedsSignIn => "needs_sign_in",
            LinkState::Failed => "failed",
        };
        let v = json!({
            "state": state,
            "era": st.era,
            "protocol_version": st.protocol_version,
            "tools": tools,
            "last_error": st.last_error,
        });
        let connected = state == "connected";
        if best.is_none() || connected {
            best = Some(v);
        }
        if connected {
            break;
        }
    }
    if let Some(v) = best {
        return v;
    }
    let tried = state
        .tried
        .lock()
        .ok()
        .and_then(|t| t.get(name).cloned())
        .filter(|(fp, _)| Some(fp.as_str()) == fingerprint);
    if let Some((_, outcome)) = tried {
        return match outcome {
            TryOutcome::Connected {
                era,
                protocol_version,
                tools,
                ..
            } => {
                json!({"state": "not_connected", "era": era, "protocol_version": protocol_version, "tools": tools, "last_error": null})
            }
            TryOutcome::NeedsSignIn { last_error } => {
                json!({"state": "needs_sign_in", "era": null, "protocol_version": null, "tools": null, "last_error": last_error})
            }
            TryOutcome::Failed { last_error } => {
                json!({"state": "unavailable", "era": null, "protocol_version": null, "tools": null, "last_error": last_error})
            }
        };
    }
    // A session left it out (and no strict save tried this configuration): why.
    let left_out = sessions
        .iter()
        .find_map(|s| s.shared.load().left_out.get(name).cloned());
    if let Some((st, warning)) = left_out {
        let state = match st {
            ServerState::NeedsSignIn => Some("needs_sign_in"),
            ServerState::LeftOut | ServerState::Unavailable => Some("unavailable"),
            _ => None,
        };
        if let Some(state) = state {
            return json!({"state": state, "era": null, "protocol_version": null, "tools": null, "last_error": warning});
        }
    }
    let tools = saved
        .get(name)
        .filter(|s| Some(s.fingerprint.as_str()) == fingerprint)
        .map(|s| s.tools.iter().filter(|t| cfg.tool_allowed(t)).count());
    json!({"state": "not_connected", "era": null, "protocol_version": null, "tools": tools, "last_error": null})
}

/// The body of `GET /settings/mcp`.
async fn view(state: &AppState, read: &Read) -> Value {
    let known = state.known_extensions.lock().map(|k| *k).unwrap_or(None);
    let mut servers = Map::new();
    let mut retry_ms = settings::DEFAULT_RETRY_MS;
    let mut budget_tokens = settings::DEFAULT_BUDGET_TOKENS;
    if let Ok(ext) = &read.ext {
        let raw_servers = ext
            .raw
            .get("mcp")
            .and_then(|m| m.get("servers"))
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default();
        let parsed = settings::parse_mcp_each(ext.raw.get("mcp"));
        let (configs, bad): (Vec<ServerConfig>, Vec<(String, SettingsError)>) = match parsed {
            Ok((m, bad)) => {
                retry_ms = m.retry_ms;
                budget_tokens = m.budget_tokens;
                (m.servers, bad)
            }
            Err(_) => (Vec::new(), Vec::new()),
        };
        let sessions: Vec<Arc<SessionHandle>> = state
            .sessions
            .read()
            .map(|s| s.values().cloned().collect())
            .unwrap_or_default();
        let saved = state.runtime.send(SavedTools).await.unwrap_or_default();
        let env = |k: &str| std::env::var(k).ok();
        for (name, def) in &raw_servers {
            let mut shown = shown_fields(def);
            let Some(obj) = shown.as_object_mut() else {
                continue;
            };
            let creds = read.creds.as_ref().ok();
            obj.insert("secrets".into(), secrets_set(creds, name, def));
            if let Some((_, e)) = bad.iter().find(|(n, _)| n == name) {
                obj.insert("problem".into(), Value::String(e.to_string()));
                obj.insert(
                    "status".into(),
                    json!({"state": "invalid", "era": null, "protocol_version": null, "tools": null, "last_error": e.to_string()}),
                );
            } else if let Some(cfg) = configs.iter().find(|c| &c.name == name) {
                let resolved = creds.map(|c| settings::resolve(cfg, &env, c));
                let status = match &resolved {
                    Some(Err(e)) if cfg.enabled => {
                        obj.insert("problem".into(), Value::String(e.to_string()));
                        json!({"state": "invalid", "era": null, "protocol_version": null, "tools": null, "last_error": e.to_string()})
                    }
                    _ => {
                        let fp = resolved
                            .as_ref()
                            .and_then(|r| r.as_ref().ok())
                            .map(|r| r.fingerprint.clone());
                        status_of(state, &sessions, cfg, fp.as_deref(), &saved)
                    }
                };
                let url = match &cfg.transport {
                    settings::TransportConfig::Http { url, .. } => {
                        settings::validate_url(name, url)
                            .ok()
                            .map(|u| u.to_string())
                    }
                    _ => None,
                };
                let held = state
                    .tokens
                    .as_ref()
                    .map(|book| {
                        let client = creds
                            .and_then(|c| c.raw.get("mcp"))
                            .and_then(|m| m.get(name))
                            .and_then(|s| s.get("oauth_client"));
                        book.held(name, client)
                    })
                    .unwrap_or_default();
                let auth = crate::actors::signin::auth_view(
                    creds,
                    name,
                    url.as_deref(),
                    status["state"] == "needs_sign_in",
                    held,
                );
                if auth["state"] == "needs_sign_in" && status["state"] == "not_connected" {
                    obj.insert("status".into(), json!({"state": "needs_sign_in", "era": null, "protocol_version": null, "tools": status["tools"], "last_error": auth["reason"]}));
                } else {
                    obj.insert("status".into(), status);
                }
                obj.insert("auth".into(), auth);
                for k in ["enabled", "startupTimeoutMs", "callTimeoutMs", "deferTools"] {
                    if !obj.contains_key(k) {
                        let v = match k {
                            "enabled" => Value::Bool(cfg.enabled),
                            "startupTimeoutMs" => Value::from(cfg.startup_timeout_ms),
                            "deferTools" => Value::from(cfg.defer_tools.as_str()),
                            _ => Value::from(cfg.call_timeout_ms),
                        };
                        obj.insert(k.into(), v);
                    }
                }
            }
            if !obj.contains_key("auth") {
                obj.insert("auth".into(), json!({"state": "none"}));
            }
            servers.insert(name.clone(), shown);
        }
        // `status.deferred`: how many of each server's tools a new session would defer
        // (from the saved catalogues; null when its tools are not known).
        let creds = read.creds.as_ref().ok();
        let known: Vec<_> = configs
            .iter()
            .filter(|c| c.enabled)
            .filter_map(|c| {
                let fp = settings::resolve(c, &env, creds?).ok()?.fingerprint;
                let s = saved.get(&c.name).filter(|s| s.fingerprint == fp)?;
                Some((c, s.catalogue.clone()))
            })
            .collect();
        let deferred = crate::toolsearch::default_deferred(&known, budget_tokens);
        for (name, shown) in servers.iter_mut() {
            if let Some(st) = shown.get_mut("status").and_then(Value::as_object_mut) {
                st.insert("deferred".into(), json!(deferred.get(name)));
            }
        }
    }
    json!({
        "retryMs": retry_ms,
        "toolSearch": {"budgetTokens": budget_tokens},
        "revision": revision(&read.digest),
        "changed_on_disk": known != read.digest,
        "problems": read.problems,
        "servers": servers,
    })
}

/// Reload every session once (the settings files changed); each one's generation or error.
pub async fn reload_sessions(
    state: &AppState,
    default_enabled: Option<bool>,
    editor_default: Option<bool>,
) -> (Map<String, Value>, bool) {
    let sessions: Vec<(String, Arc<SessionHandle>)> = state
        .sessions
        .read()
        .map(|s| s.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
        .unwrap_or_default();
    let results = futures_util::future::join_all(sessions.iter().map(|(_, s)| {
        s.addr.send(Reload {
            choice: None,
            default_enabled,
            editor_default,
            reread: true,
            server: None,
            ..Reload::default()
        })
    }))
    .await;
    let mut out = Map::new();
    let mut failed = false;
    for ((id, _), r) in sessions.iter().zip(results) {
        let v = match r {
            Ok(Ok(g)) => json!({"generation": g}),
            Ok(Err(e)) => {
                failed = true;
                json!({"error": e})
            }
            Err(e) => json!({"error": e.to_string()}),
        };
        out.insert(id.clone(), v);
    }
    (out, failed)
}

/// Register every string under `v` with the log writer's redaction.
fn register_values(v: Option<&Value>) {
    fn walk(v: &Value, out: &mut Vec<String>) {
        match v {
            Value::String(s) if s.len() >= 4 && s != "-" => out.push(s.clone()),
            // A header's name and an OAuth client id are not secrets.
            Value::Object(m) => m
                .iter()
                .filter(|(k, _)| k.as_str() != "name" && k.as_str() != "client_id")
                .for_each(|(_, x)| walk(x, out)),
            Value::Array(a) => a.iter().for_each(|x| walk(x, out)),
            _ => {}
        }
    }
    let mut out = Vec::new();
    if let Some(v) = v {
        walk(v, &mut out);
    }
    crate::protocol::text::register_secrets(out.iter().map(String::as_str));
}

/// `PATCH /settings/mcp`: see the module's description.
pub async fn patch_settings(
    state: web::Data<AppState>,
    Strict(patch): Strict<Value>,
) -> Result<HttpResponse, ApiError> {
    let _serial = pair::settings_lock().lock().await;
    let home = state.home.clone();
    let (on_disk, ext, creds) = web::block(move || {
        let bytes = pair::read_bytes(&extensions_path(&home))?;
        Ok::<_, pair::PairError>((
            digest(bytes.as_deref()),
            ExtensionsFile::parse(&home, bytes.as_deref()),
            Credentials::load(&home),
        ))
    })
    .await
    .map_err(blocking_failed)?
    .map_err(|e| ApiError::internal(e.to_string()))?;
    let known = state.known_extensions.lock().map(|k| *k).unwrap_or(None);
    if known != on_disk {
        return Err(ApiError::not_run(
            StatusCode::CONFLICT,
            "changed_on_disk",
            "extensions.json was changed on disk since the daemon read it; reload it first \
             (POST /extensions/mcp/reload), then make the change again",
        ));
    }
    let ext = ext.map_err(settings_error)?;
    let creds = creds.map_err(settings_error)?;
    let edited = edit::apply(&ext.raw, &creds.raw, &patch).map_err(patch_error)?;
    // No log line may carry a value this change brings.
    register_values(patch.get("secrets"));
    let new_ext = ExtensionsFile {
        raw: edited.extensions,
    };
    let new_creds = creds.with_raw(edited.creds);
    let mcp = new_ext.mcp().map_err(settings_error)?;
    // Resolve what will be tried: a missing variable or secret is bad input, named.
    let env = |k: &str| std::env::var(k).ok();
    let mut to_try = Vec::new();
    for cfg in mcp
        .servers
        .iter()
        .filter(|c| edited.tried.contains(&c.name))
    {
        let r = settings::resolve(cfg, &env, &new_creds).map_err(|e| {
            patch_error(PatchError {
                field: format!("servers.{}", cfg.name),
                message: e.to_string(),
                column: None,
                unknown_server: false,
            })
        })?;
        to_try.push(Arc::new(r));
    }
    let fingerprints: HashMap<String, String> = to_try
        .iter()
        .map(|r| (r.config.name.clone(), r.fingerprint.clone()))
        .collect();
    let outcomes = if to_try.is_empty() {
        Vec::new()
    } else {
        state
            .runtime
            .send(TryServers { servers: to_try })
            .await
            .map_err(|e| ApiError::internal(format!("the runtime is gone: {e}")))?
    };
    let failures: BTreeMap<&str, &str> = outcomes
        .iter()
        .filter_map(|(n, o)| match o {
            TryOutcome::Failed { last_error } => Some((n.as_str(), last_error.as_str())),
            _ => None,
        })
        .collect();
    if let Some((server, why)) = failures.iter().next() {
        let mut e = ApiError::not_run(
            StatusCode::CONFLICT,
            "server_failed",
            format!("MCP server {server:?} could not start: {why}; nothing was saved"),
        );
        e.extra = Some(json!({"outcome": "not_run", "server": server, "failures": failures}));
        return Err(e);
    }
    let ext_bytes = new_ext.to_bytes();
    let creds_bytes = settings::to_file_bytes(&new_creds.raw);
    let new_digest = digest(Some(&ext_bytes));
    let home = state.home.clone();
    web::block(move || pair::write_pair(&home, &ext_bytes, &creds_bytes))
        .await
        .map_err(blocking_failed)?
        .map_err(|e| ApiError::internal(e.to_string()))?;
    if let Ok(mut k) = state.known_extensions.lock() {
        *k = new_digest;
    }
    if let Some(book) = &state.tokens {
        // Whatever the change did to a server's tokens (a sign-out, a deletion), the book
        // reads them again.
        // A deleted or signed-out server's refused grant is asked again when it comes back.
        for n in &edited.deleted {
            book.forget(n);
            book.clear_refusal(n);
        }
        for n in &edited.tried {
            book.forget(n);
        }
        let secrets = patch.get("secrets").and_then(Value::as_object);
        for (n, s) in secrets.into_iter().flatten() {
            book.forget(n);
            if s.get("oauth").is_some_and(Value::is_null) {
                book.clear_refusal(n);
            }
        }
    }
    let mut tested = Map::new();
    if let Ok(mut t) = state.tried.lock() {
        for n in &edited.deleted {
            t.remove(n);
        }
        for (n, o) in &outcomes {
            if let Some(fp) = fingerprints.get(n) {
                t.insert(n.clone(), (fp.clone(), o.clone()));
            }
            tested.insert(n.clone(), serde_json::to_value(o).unwrap_or(Value::Null));
        }
    }
    for (n, o) in &outcomes {
        if let TryOutcome::NeedsSignIn { .. } = o {
            tracing::info!(server = %n, "saved; the server asks for a sign-in");
        }
    }
    tracing::info!(
        changed = edited.tried.len() + edited.switched_off.len(),
        deleted = edited.deleted.len(),
        "settings saved"
    );
    let (sessions, _) = reload_sessions(
        &state,
        Some(new_ext.mcp_enabled()),
        Some(new_ext.editor_mcp_enabled()),
    )
    .await;
    state.settings_changed("settings", None, None);
    let home = state.home.clone();
    let read = web::block(move || read_files(&home))
        .await
        .map_err(blocking_failed)?;
    let mut body = view(&state, &read).await;
    body["sessions"] = Value::Object(sessions);
    body["tested"] = Value::Object(tested);
    Ok(HttpResponse::Ok().json(body))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SuggestQuery {
    url: Option<String>,
    command_line: Option<String>,
}

/// `GET /settings/mcp/suggest-name?url=...` or `?command_line=...`: a valid server name that
/// is not taken, from the URL's host or the command's package.
pub async fn suggest_name(
    state: web::Data<AppState>,
    query: Result<web::Query<SuggestQuery>, actix_web::Error>,
) -> Result<HttpResponse, ApiError> {
    let bad = |m: String| ApiError::new(StatusCode::BAD_REQUEST, "bad_request", m);
    let q = query.map_err(|e| bad(format!("invalid query: {e}")))?;
    let ext = load_extensions(state.home.clone()).await?;
    let taken: Vec<String> = ext
        .raw
        .get("mcp")
        .and_then(|m| m.get("servers"))
        .and_then(Value::as_object)
        .map(|m| m.keys().cloned().collect())
        .unwrap_or_default();
    let name = match (&q.url, &q.command_line) {
        (Some(u), None) => crate::store::names::suggest_for_url(u, &taken),
        (None, Some(c)) => crate::store::names::suggest_for_command(c, &taken),
        _ => return Err(bad("give exactly one of `url` and `command_line`".into())),
    }
    .map_err(|e| bad(e.to_string()))?;
    Ok(HttpResponse::Ok().json(json!({ "name": name })))
}

pub async fn load_extensions(home: PathBuf) -> Result<ExtensionsFile, ApiError> {
    web::block(move || ExtensionsFile::load(&home))
        .await
        .map_err(blocking_failed)?
        .map_err(settings_error)
}

/// `GET /extensions`.
pub async fn get_extensions(state: web::Data<AppState>) -> Result<HttpResponse, ApiError> {
    let ext = load_extensions(state.home.clone()).await?;
    let (mcp, editor) = (ext.mcp_enabled(), ext.editor_mcp_enabled());
    Ok(HttpResponse::Ok().json(json!({
        "extensions": [
            {"name": "mcp", "installed": true, "enabled": mcp},
            {"name": crate::editor::EXTENSION, "installed": true, "enabled": editor},
        ],
        "mcp": {"enabled": mcp},
        crate::editor::EXTENSION: {"enabled": editor},
    })))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EnabledBody {
    pub enabled: bool,
}

/// `PUT /extensions/mcp` `{"enabled": bool}`: the `mcp` extension's default for every session.
pub async fn put_extension(
    state: web::Data<AppState>,
    Strict(body): Strict<EnabledBody>,
) -> Result<HttpResponse, ApiError> {
    put_default(state, "mcp", body.enabled).await
}

/// `PUT /extensions/editor-mcp` `{"enabled": bool}`: the `editor-mcp` extension's default for
/// every session (a session's own choice, `PUT /sessions/{id}/extensions/editor-mcp`, wins).
pub async fn put_editor_extension(
    state: web::Data<AppState>,
    Strict(body): Strict<EnabledBody>,
) -> Result<HttpResponse, ApiError> {
    put_default(state, crate::editor::EXTENSION, body.enabled).await
}

/// One extension's default written to `extensions.json` and given to every session. The file
/// is read and written under the settings lock; a hand edit it carries along stays "changed
/// on disk" for `PATCH /settings/mcp` until a reload.
async fn put_default(
    state: web::Data<AppState>,
    extension: &'static str,
    on: bool,
) -> Result<HttpResponse, ApiError> {
    let editor = extension == crate::editor::EXTENSION;
    let _serial = pair::settings_lock().lock().await;
    let home = state.home.clone();
    let (before, after) = web::block(move || {
        let before = digest_on_disk(&home);
        let mut ext = ExtensionsFile::load(&home)?;
        ext.set_enabled(extension, on);
        ext.save(&home)?;
        Ok::<_, SettingsError>((before, digest(Some(&ext.to_bytes()))))
    })
    .await
    .map_err(blocking_failed)?
    .map_err(settings_error)?;
    if let Ok(mut k) = state.known_extensions.lock() {
        if *k == before {
            *k = after;
        }
    }
    let sessions: Vec<Arc<SessionHandle>> = state
        .sessions
        .read()
        .map(|s| s.values().cloned().collect())
        .unwrap_or_default();
    let reload = || Reload {
        default_enabled: (!editor).then_some(on),
        editor_default: editor.then_some(on),
        ..Reload::default()
    };
    let results =
        futures_util::future::join_all(sessions.iter().map(|s| s.addr.send(reload()))).await;
    let errors: Vec<String> = results
        .into_iter()
        .filter_map(|r| match r {
            Ok(Err(e)) => Some(e),
            _ => None,
        })
        .collect();
    state.settings_changed("settings", None, None);
    Ok(HttpResponse::Ok().json(json!({extension: {"enabled": on}, "errors": errors})))
}

/// A body that names nothing (`{}`, or none at all).
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct NoFields {}

/// `POST /extensions/mcp/reload`: read the files again (a hand edit is taken in, and
/// `changed_on_disk` clears) and reload every session.
pub async fn reload_all(
    state: web::Data<AppState>,
    _body: Optional<NoFields>,
) -> Result<HttpResponse, ApiError> {
    let home = state.home.clone();
    let read = web::block(move || read_files(&home))
        .await
        .map_err(blocking_failed)?;
    let ext = read.ext.map_err(settings_error)?;
    if let Ok(mut k) = state.known_extensions.lock() {
        *k = read.digest;
    }
    let (out, failed) = reload_sessions(
        &state,
        Some(ext.mcp_enabled()),
        Some(ext.editor_mcp_enabled()),
    )
    .await;
    state.settings_changed("settings", None, None);
    let status = if failed {
        StatusCode::UNPROCESSABLE_ENTITY
    } else {
        StatusCode::OK
    };
    Ok(HttpResponse::build(status).json(json!({"sessions": out})))
}
