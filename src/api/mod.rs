//! The daemon's HTTP API (actix-web): JSON in and out; errors are
//! `{"error": {"code": "<snake_case>", "message": "..."}}` with a fitting status.
//!
//! Owns: request parsing (`body`: strict JSON bodies, their limits, path parameters), JSON
//! shapes, the table of sessions, the trust boundary (`trust`: the middleware every request
//! passes first) and the web pane with its sign-in (`pane`). Must not touch: transports; it
//! talks to actors (Composition, Runtime, Registry) and reads their published snapshots.

pub mod auth;
pub mod body;
pub mod pane;
pub mod settings;
pub mod trial;
pub mod trust;

use crate::actors::composition::{
    Activity, CloseSession, Composition, GetView, Load, Reload, SessionEvent, SetDefer,
    SharedSnapshot,
};
use crate::actors::connection::{CallError, CallTarget};
use crate::actors::runtime::Runtime;
use crate::advertise::ToolKind;
use crate::protocol::ResultText;
use crate::store::settings::DeferTools;
use actix::prelude::*;
use actix_web::http::StatusCode;
use actix_web::{web, HttpRequest, HttpResponse, ResponseError};
use body::{BodyLimit, Optional, Strict};
use serde::Deserialize;
use serde_json::{json, Map, Value};
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use tokio::sync::broadcast;

/// One session as the API sees it.
#[derive(Clone)]
pub struct SessionHandle {
    pub addr: Addr<Composition>,
    pub shared: SharedSnapshot,
    pub events: broadcast::Sender<SessionEvent>,
    pub follows_default: bool,
    /// When the session last showed activity (any request naming it), in milliseconds
    /// since the daemon started (tokio time).
    pub last_active: Arc<AtomicU64>,
}

/// Bounds on sessions (`config.toml`: `max_sessions`, `session_idle_secs`).
#[derive(Clone, Debug)]
pub struct SessionLimits {
    /// Sessions open at once; one more is refused with 429.
    pub max_sessions: usize,
    /// A session with no activity for this long is closed.
    pub idle: std::time::Duration,
}

impl Default for SessionLimits {
    fn default() -> Self {
        SessionLimits {
            max_sessions: 1000,
            idle: std::time::Duration::from_secs(24 * 3600),
        }
    }
}

pub struct AppState {
    pub home: PathBuf,
    pub runtime: Addr<Runtime>,
    pub sessions: RwLock<HashMap<String, SessionHandle>>,
    /// The digest of `extensions.json` as the daemon last read or wrote it: a PATCH over a
    /// hand edit made since is refused (`changed_on_disk`).
    pub known_extensions: Mutex<settings::FileDigest>,
    /// What changed in the settings, for `GET /settings/mcp/events`: a save, a reload, the
    /// extension's default, a sign-in's progress, a session opened or closed.
    pub settings_events: broadcast::Sender<SettingsEvent>,
    /// Sign-ins (`None` in tests of the API alone).
    pub signins: Option<Addr<crate::actors::signin::SignIns>>,
    /// The daemon's OAuth tokens, told when a settings change touches them.
    pub tokens: Option<crate::actors::tokens::TokenBook>,
    /// The last strict save's trial of each server, under the fingerprint it tried.
    pub tried: Mutex<HashMap<String, (String, crate::actors::strict::TryOutcome)>>,
    pub next_session: AtomicU64,
    pub limits: SessionLimits,
    /// The origin of `last_active`.
    pub started: tokio::time::Instant,
}

impl AppState {
    pub fn new(home: PathBuf, runtime: Addr<Runtime>, limits: SessionLimits) -> AppState {
        AppState {
            known_extensions: Mutex::new(settings::digest_on_disk(&home)),
            tried: Mutex::new(HashMap::new()),
            signins: None,
            tokens: None,
            settings_events: broadcast::channel(256).0,
            home,
            runtime,
            sessions: RwLock::new(HashMap::new()),
            next_session: AtomicU64::new(1),
            limits,
            started: tokio::time::Instant::now(),
        }
    }

    fn now_ms(&self) -> u64 {
        self.started.elapsed().as_millis() as u64
    }

    /// Close the sessions idle for longer than the limit; answers their ids.
    pub async fn close_idle(&self) -> Vec<String> {
        let now = self.now_ms();
        let idle = self.limits.idle.as_millis() as u64;
        let gone: Vec<(String, SessionHandle)> = match self.sessions.write() {
            Ok(mut m) => {
                let ids: Vec<String> = m
                    .iter()
                    .filter(|(_, h)| {
                        now.saturating_sub(h.last_active.load(Ordering::Relaxed)) >= idle
                    })
                    .map(|(k, _)| k.clone())
                    .collect();
                ids.into_iter()
                    .filter_map(|id| m.remove(&id).map(|h| (id, h)))
                    .collect()
            }
            Err(_) => Vec::new(),
        };
        for (id, h) in &gone {
            tracing::info!(session = %id, idle_secs = self.limits.idle.as_secs(), "closing an idle session");
            let _ = h.addr.send(CloseSession).await;
        }
        gone.into_iter().map(|(id, _)| id).collect()
    }
}

/// Close idle sessions for the daemon's life: a sweep every quarter of the idle limit (at
/// most a minute apart), on tokio time.
pub async fn sweep_idle_sessions(state: web::Data<AppState>) {
    let every = (state.limits.idle / 4).clamp(
        std::time::Duration::from_millis(100),
        std::time::Duration::from_secs(60),
    );
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        state.close_idle().await;
    }
}

#[derive(Debug)]
pub struct ApiError {
    pub status: StatusCode,
    pub code: &'static str,
    pub message: String,
    pub extra: Option<Value>,
    /// A 401 that asks for the bearer token (`WWW-Authenticate: Bearer`).
    pub www_authenticate: bool,
}

impl ApiError {
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        ApiError {
            status,
            code,
            message: message.into(),
            extra: None,
            www_authenticate: false,
        }
    }

    pub fn internal(message: impl Into<String>) -> Self {
        ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", message)
    }
    /// An error for a request that did not run (the body says `"outcome": "not_run"`).
    pub fn not_run(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        let mut e = ApiError::new(status, code, message);
        e.extra = Some(json!({"outcome": "not_run"}));
        e
    }

    fn not_found(what: &str) -> Self {
        ApiError::new(
            StatusCode::NOT_FOUND,
            "not_found",
            format!("no such {what}"),
        )
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.code, self.message)
    }
}

impl ResponseError for ApiError {
    fn status_code(&self) -> StatusCode {
        self.status
    }
    fn error_response(&self) -> HttpResponse {
        let mut err = Map::new();
        err.insert("code".into(), Value::from(self.code));
        err.insert("message".into(), Value::from(self.message.as_str()));
        let mut body = Map::new();
        if let Some(Value::Object(extra)) = &self.extra {
            for (k, v) in extra {
                if k == "outcome" {
                    body.insert(k.clone(), v.clone());
                } else {
                    err.insert(k.clone(), v.clone());
                }
            }
        }
        body.insert("error".into(), Value::Object(err));
        let mut r = HttpResponse::build(self.status);
        if self.www_authenticate {
            r.insert_header((
                actix_web::http::header::WWW_AUTHENTICATE,
                "Bearer realm=\"albedo-mcp\"",
            ));
        }
        r.json(Value::Object(body))
    }
}

fn mailbox(e: MailboxError) -> ApiError {
    ApiError::new(
        StatusCode::SERVICE_UNAVAILABLE,
        "unavailable",
        format!("the session is not answering: {e}"),
    )
}

/// The limits of request bodies (`config.toml`: `max_body_bytes`, `max_call_body_bytes`).
#[derive(Clone, Copy, Debug)]
pub struct BodyLimits {
    pub call: usize,
    pub other: usize,
}

impl Default for BodyLimits {
    fn default() -> Self {
        BodyLimits {
            call: body::DEFAULT_CALL_BODY_LIMIT,
            other: body::DEFAULT_BODY_LIMIT,
        }
    }
}

/// A resource whose other methods answer 405 with the documented JSON error.
fn resource(path: &str, allow: &'static str) -> actix_web::Resource {
    web::resource(path).default_service(web::to(move |req: HttpRequest| async move {
        let e = ApiError::new(
            StatusCode::METHOD_NOT_ALLOWED,
            "method_not_allowed",
            format!("{} is not allowed here (allowed: {allow})", req.method()),
        );
        let mut r = e.error_response();
        if let Ok(v) = actix_web::http::header::HeaderValue::from_str(allow) {
            r.headers_mut().insert(actix_web::http::header::ALLOW, v);
        }
        r
    }))
}

/// Everything but the trust middleware (`App::wrap(from_fn(trust::guard))`, in `serve`):
/// the routes, the hot one first (actix-web matches a request against each pattern in
/// turn), the body limits, and JSON errors for unknown routes and bad parameters.
pub fn configure(cfg: &mut web::ServiceConfig, limits: BodyLimits) {
    cfg.app_data(BodyLimit(limits.other))
        .app_data(web::PathConfig::default().error_handler(|e, _| {
            ApiError::new(
                StatusCode::BAD_REQUEST,
                "bad_request",
                format!("a path parameter is not valid: {e}"),
            )
            .into()
        }))
        .app_data(web::QueryConfig::default().error_handler(|e, _| {
            ApiError::new(
                StatusCode::BAD_REQUEST,
                "bad_request",
                format!("the query is not valid: {e}"),
            )
            .into()
        }))
        .service(
            resource("/sessions/{id}/tools/{name}/call", "POST")
                .app_data(BodyLimit(limits.call))
                .route(web::post().to(call_tool)),
        )
        .service(resource("/healthz", "GET").route(web::get().to(healthz)))
        .service(resource("/extensions", "GET").route(web::get().to(settings::get_extensions)))
        .service(resource("/extensions/mcp", "PUT").route(web::put().to(settings::put_extension)))
        .service(
            resource("/extensions/editor-mcp", "PUT")
                .route(web::put().to(settings::put_editor_extension)),
        )
        .service(
            resource("/extensions/mcp/reload", "POST").route(web::post().to(settings::reload_all)),
        )
        .service(
            resource("/sessions", "GET, POST")
                .route(web::get().to(list_sessions))
                .route(web::post().to(create_session)),
        )
        .service(
            resource("/sessions/{id}", "GET, DELETE")
                .route(web::get().to(get_session))
                .route(web::delete().to(delete_session)),
        )
        .service(
            resource("/sessions/{id}/extensions/mcp", "PUT")
                .route(web::put().to(put_session_extension)),
        )
        .service(
            resource("/sessions/{id}/extensions/editor-mcp", "PUT")
                .route(web::put().to(put_session_editor_extension)),
        )
        .service(
            resource("/sessions/{id}/editor-mcp-servers", "PUT")
                .route(web::put().to(put_editor_servers)),
        )
        .service(
            resource("/sessions/{id}/defer-tools", "PUT")
                .route(web::put().to(put_session_defer_tools)),
        )
        .service(resource("/sessions/{id}/tools", "GET").route(web::get().to(list_tools)))
        .service(resource("/sessions/{id}/tools/{name}", "GET").route(web::get().to(get_tool)))
        .service(resource("/sessions/{id}/activity", "POST").route(web::post().to(activity)))
        .service(resource("/sessions/{id}/events", "GET").route(web::get().to(events)))
        .service(
            resource("/sessions/{id}/servers/{name}", "PUT")
                .route(web::put().to(put_session_server)),
        )
        .service(
            resource("/settings/mcp", "GET, PATCH")
                .route(web::get().to(settings::get_settings))
                .route(web::patch().to(settings::patch_settings)),
        )
        .service(resource("/settings/mcp/events", "GET").route(web::get().to(settings_events)))
        .service(
            resource("/settings/mcp/suggest-name", "GET")
                .route(web::get().to(settings::suggest_name)),
        )
        .service(
            resource("/settings/mcp/servers/{name}/test", "POST")
                .route(web::post().to(trial::test_server)),
        )
        .service(
            resource("/auth/logins/{login}", "PUT, GET, DELETE")
                .route(web::put().to(auth::start))
                .route(web::get().to(auth::get))
                .route(web::delete().to(auth::cancel)),
        )
        .service(
            resource("/auth/logins/{login}/callback", "POST").route(web::post().to(auth::callback)),
        )
        .service(resource("/login/once", "POST").route(web::post().to(pane::issue_link)))
        .service(resource("/login", "GET").route(web::get().to(pane::login)))
        .service(resource("/token/rotate", "POST").route(web::post().to(pane::rotate_token)))
        .service(resource("/", "GET").route(web::get().to(pane::index)))
        .service(resource("/pane.js", "GET").route(web::get().to(pane::pane_js)))
        .service(resource("/pane.css", "GET").route(web::get().to(pane::pane_css)))
        .default_service(web::to(|req: HttpRequest| async move {
            ApiError::new(
                StatusCode::NOT_FOUND,
                "not_found",
                format!(
                    "no route {} {}",
                    req.method(),
                    crate::protocol::text::clean(req.path(), 200)
                ),
            )
            .error_response()
        }));
}

async fn healthz() -> HttpResponse {
    HttpResponse::Ok().json(json!({"ok": true}))
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct CreateSession {
    #[serde(default)]
    extensions: HashMap<String, bool>,
    /// ACP v1's `mcpServers`, as the editor sent it (the `editor-mcp` extension).
    /// A `Value` so that a wrong shape is refused without quoting what was sent.
    #[serde(default)]
    editor_mcp_servers: Option<Value>,
    /// The session's own `deferTools` for every server: `auto`, `never` or `always`.
    #[serde(default)]
    defer_tools: Option<Value>,
}

/// A session's `defer_tools`: `"auto"`, `"never"`, `"always"`, or `null` (each server's
/// setting); anything else is a 400 naming the field.
fn defer_choice(v: Option<&Value>) -> Result<Option<DeferTools>, ApiError> {
    match v {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v
            .as_str()
            .and_then(DeferTools::parse)
            .map(Some)
            .ok_or_else(|| {
                let mut e = ApiError::new(
                    StatusCode::BAD_REQUEST,
                    "bad_request",
                    "defer_tools must be \"auto\", \"never\", \"always\" or null",
                );
                e.extra = Some(json!({"field": "defer_tools", "outcome": "not_run"}));
                e
            }),
    }
}

/// Parse an editor's server list (ACP v1 `mcpServers`); a malformed entry is a 400 naming it.
/// No value the editor sent is quoted (they may be secrets).
fn editor_list(list: Option<&Value>) -> Result<Vec<crate::editor::EditorServer>, ApiError> {
    let bad = |m: String| {
        let mut e = ApiError::new(StatusCode::BAD_REQUEST, "bad_editor_server", m);
        e.extra = Some(json!({"outcome": "not_run"}));
        e
    };
    let list = match list {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::Array(a)) => a,
        Some(_) => {
            return Err(bad(
                "editor_mcp_servers must be an array of ACP MCP servers".into(),
            ))
        }
    };
    let env = |k: &str| std::env::var(k).ok();
    crate::editor::parse_list(list, &env).map_err(bad)
}

async fn create_session(
    state: web::Data<AppState>,
    Optional(body): Optional<CreateSession>,
) -> Result<HttpResponse, ApiError> {
    let choice = body.extensions.get("mcp").copied();
    let editor_choice = body.extensions.get(crate::editor::EXTENSION).copied();
    let editor = editor_list(body.editor_mcp_servers.as_ref())?;
    let defer = defer_choice(body.defer_tools.as_ref())?;
    open_session(&state, None, choice, editor, editor_choice, defer).await
}

/// Open a session (under `id`, when an editor resumes one the daemon does not know, after a
/// restart) and prepare it; answers 201 with its view.
async fn open_session(
    state: &web::Data<AppState>,
    id: Option<String>,
    choice: Option<bool>,
    editor: Vec<crate::editor::EditorServer>,
    editor_choice: Option<bool>,
    defer: Option<DeferTools>,
) -> Result<HttpResponse, ApiError> {
    let open = state.sessions.read().map(|s| s.len()).unwrap_or(0);
    if open >= state.limits.max_sessions {
        return Err(ApiError::not_run(
            StatusCode::TOO_MANY_REQUESTS,
            "too_many_sessions",
            format!(
                "{open} sessions are open, the most this daemon allows (max_sessions); close one first"
            ),
        ));
    }
    let ext = settings::load_extensions(state.home.clone()).await?;
    let id = id.unwrap_or_else(|| {
        let n = state.next_session.fetch_add(1, Ordering::Relaxed);
        format!("s{n}-{:08x}", rand::random::<u32>())
    });
    let (comp, shared, events) =
        Composition::new(id.clone(), state.runtime.clone(), choice, ext.mcp_enabled());
    let comp = comp
        .with_editor(editor, editor_choice, ext.editor_mcp_enabled())
        .with_defer(defer);
    let addr = comp.start();
    let handle = SessionHandle {
        addr: addr.clone(),
        shared,
        events,
        follows_default: choice.is_none(),
        last_active: Arc::new(AtomicU64::new(state.now_ms())),
    };
    if let Ok(mut s) = state.sessions.write() {
        if s.contains_key(&id) {
            addr.do_send(CloseSession);
            return Err(ApiError::new(
                StatusCode::CONFLICT,
                "conflict",
                "a session with this id is open",
            ));
        }
        s.insert(id.clone(), handle);
    }
    let r = addr.send(Reload::default()).await.map_err(mailbox)?;
    let view = addr.send(GetView).await.map_err(mailbox)?;
    let mut body = serde_json::to_value(&view).unwrap_or(json!({}));
    if let (Err(e), Some(m)) = (r, body.as_object_mut()) {
        m.insert("error".into(), Value::from(e));
    }
    state.settings_changed("sessions", None, None);
    Ok(HttpResponse::Created().json(body))
}

/// `GET /sessions`: the live sessions, for clients that pick one (the terminal form's
/// extensions view): each one's `id`, `generation`, its advertised `tools` and how long ago it
/// showed activity. Read from the published snapshots: no session is asked, and reading is
/// not activity.
async fn list_sessions(state: web::Data<AppState>) -> HttpResponse {
    let now = state.now_ms();
    let mut list: Vec<Value> = state
        .sessions
        .read()
        .map(|m| {
            m.iter()
                .map(|(id, h)| {
                    let snap = h.shared.load();
                    json!({
                        "id": id,
                        "generation": snap.table.generation,
                        "tools": snap.table.tools.len(),
                        "follows_default": h.follows_default,
                        "idle_secs": now.saturating_sub(h.last_active.load(Ordering::Relaxed)) / 1000,
                    })
                })
                .collect()
        })
        .unwrap_or_default();
    list.sort_by(|a, b| a["id"].as_str().cmp(&b["id"].as_str()));
    HttpResponse::Ok().json(json!({ "sessions": list }))
}

/// The session named by a request; the request counts as its activity (idle limit).
fn session(state: &AppState, id: &str) -> Result<SessionHandle, ApiError> {
    let s = peek_session(state, id)?;
    s.last_active.store(state.now_ms(), Ordering::Relaxed);
    Ok(s)
}

/// The session, without counting the request as activity: reading a session's view (a
/// monitor polling it) does not keep an idle session open.
fn peek_session(state: &AppState, id: &str) -> Result<SessionHandle, ApiError> {
    body::session_id(id)?;
    state
        .sessions
        .read()
        .ok()
        .and_then(|s| s.get(id).cloned())
        .ok_or_else(|| ApiError::not_found("session"))
}

async fn get_session(
    state: web::Data<AppState>,
    path: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let s = peek_session(&state, &path)?;
    let view = s.addr.send(GetView).await.map_err(mailbox)?;
    Ok(HttpResponse::Ok().json(view))
}

async fn delete_session(
    state: web::Data<AppState>,
    path: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    body::session_id(&path)?;
    let s = state
        .sessions
        .write()
        .ok()
        .and_then(|mut m| m.remove(path.as_str()))
        .ok_or_else(|| ApiError::not_found("session"))?;
    let _ = s.addr.send(CloseSession).await;
    state.settings_changed("sessions", None, None);
    Ok(HttpResponse::NoContent().finish())
}

/// `PUT /sessions/{id}/editor-mcp-servers` with ACP v1's `mcpServers` array: the session's
/// whole list of editor-supplied servers (ACP `session/load` and `session/resume`). Servers
/// that did not change keep their connections; the others are discovered again. An id the
/// daemon does not know (it restarted) opens a session under that id with the list (201).
async fn put_editor_servers(
    state: web::Data<AppState>,
    path: web::Path<String>,
    Strict(list): Strict<Value>,
) -> Result<HttpResponse, ApiError> {
    body::session_id(&path)?;
    if list.is_null() {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "bad_editor_server",
            "the body must be an array of ACP MCP servers ([] for none)",
        ));
    }
    let editor = editor_list(Some(&list))?;
    let known = state
        .sessions
        .read()
        .ok()
        .is_some_and(|s| s.contains_key(path.as_str()));
    if !known {
        return open_session(&state, Some(path.into_inner()), None, editor, None, None).await;
    }
    let s = session(&state, &path)?;
    let reload = Reload {
        editor: Some(editor),
        ..Reload::default()
    };
    reload_then_view(&s, reload, "preparation_failed").await
}

/// `PUT /sessions/{id}/extensions/editor-mcp` `{"enabled": bool}`: the session's own choice
/// for `editor-mcp` (its servers stay connected; their tools are shown or hidden).
async fn put_session_editor_extension(
    state: web::Data<AppState>,
    path: web::Path<String>,
    Strict(body): Strict<settings::EnabledBody>,
) -> Result<HttpResponse, ApiError> {
    let s = session(&state, &path)?;
    let reload = Reload {
        editor_choice: Some(Some(body.enabled)),
        ..Reload::default()
    };
    reload_then_view(&s, reload, "preparation_failed").await
}

async fn put_session_extension(
    state: web::Data<AppState>,
    path: web::Path<String>,
    Strict(body): Strict<settings::EnabledBody>,
) -> Result<HttpResponse, ApiError> {
    let s = session(&state, &path)?;
    let reload = Reload {
        choice: Some(Some(body.enabled)),
        reread: true,
        ..Reload::default()
    };
    reload_then_view(&s, reload, "preparation_failed").await
}

/// Reload a session as asked and answer its view; a refused preparation is a 409 with
/// `code` (the session keeps its previous composition).
async fn reload_then_view(
    s: &SessionHandle,
    reload: Reload,
    code: &'static str,
) -> Result<HttpResponse, ApiError> {
    let r = s.addr.send(reload).await.map_err(mailbox)?;
    match r {
        Ok(_) => {
            let view = s.addr.send(GetView).await.map_err(mailbox)?;
            Ok(HttpResponse::Ok().json(view))
        }
        Err(e) => Err(ApiError::new(StatusCode::CONFLICT, code, e)),
    }
}

/// `PUT /sessions/{id}/servers/{name}` `{"enabled": bool}`: the session's capability choice
/// for one server. A server switched off is not tried; turning on one that cannot start is
/// a 409 and changes nothing.
async fn put_session_server(
    state: web::Data<AppState>,
    path: web::Path<(String, String)>,
    Strict(body): Strict<settings::EnabledBody>,
) -> Result<HttpResponse, ApiError> {
    let (id, name) = path.into_inner();
    body::server_name(&name)?;
    let s = session(&state, &id)?;
    let ext = settings::load_extensions(state.home.clone()).await?;
    let configured = ext
        .mcp()
        .map(|m| m.servers.iter().any(|c| c.name == name))
        .unwrap_or(false);
    if !configured {
        return Err(ApiError::not_found("server"));
    }
    let reload = Reload {
        server: Some((name, body.enabled)),
        ..Reload::default()
    };
    reload_then_view(&s, reload, "server_refused").await
}

/// The query of `GET /sessions/{id}/tools` (other parameters are ignored, as before it had
/// one; `all` that is not `true` or `false` is a 400).
#[derive(Deserialize, Default)]
struct ToolsQuery {
    /// Also the deferred tools, each with `"deferred": true` (`mcp__search` is left out:
    /// the list holds everything it could find).
    #[serde(default)]
    all: bool,
}

/// `{"deferred":true,` + the rest of a tool's JSON object.
fn flagged(json: &str) -> String {
    match json.strip_prefix('{') {
        Some(rest) if rest.starts_with('}') => "{\"deferred\":true}".to_owned(),
        Some(rest) => format!("{{\"deferred\":true,{rest}"),
        None => json.to_owned(),
    }
}

async fn list_tools(
    state: web::Data<AppState>,
    path: web::Path<String>,
    query: web::Query<ToolsQuery>,
) -> Result<HttpResponse, ApiError> {
    let s = session(&state, &path)?;
    let snap = s.shared.load();
    // Each tool's JSON is kept with the tool (and tools are shared between sessions): the
    // list is copied together, not built from 5,000 deep copies of descriptions and schemas.
    let tools = &snap.table.tools;
    let deferred: &[Arc<crate::advertise::AdvertisedTool>] =
        if query.all { &snap.deferred.tools } else { &[] };
    let mut body = Vec::with_capacity(
        64 + tools
            .iter()
            .chain(deferred)
            .map(|t| t.json().get().len() + 16)
            .sum::<usize>(),
    );
    body.extend_from_slice(
        format!("{{\"generation\":{},\"tools\":[", snap.table.generation).as_bytes(),
    );
    let mut first = true;
    for t in tools {
        if query.all && t.kind == ToolKind::Search {
            continue;
        }
        if !first {
            body.push(b',');
        }
        first = false;
        body.extend_from_slice(t.json().get().as_bytes());
    }
    for t in deferred {
        if !first {
            body.push(b',');
        }
        first = false;
        body.extend_from_slice(flagged(t.json().get()).as_bytes());
    }
    body.extend_from_slice(b"]}");
    Ok(HttpResponse::Ok()
        .content_type(actix_web::http::header::ContentType::json())
        .body(body))
}

async fn get_tool(
    state: web::Data<AppState>,
    path: web::Path<(String, String)>,
) -> Result<HttpResponse, ApiError> {
    let (id, name) = path.into_inner();
    body::tool_name(&name)?;
    let s = session(&state, &id)?;
    let snap = s.shared.load();
    let (t, deferred) = snap
        .lookup(&name)
        .ok_or_else(|| ApiError::not_found("tool"))?;
    let json = t.json().get();
    Ok(HttpResponse::Ok()
        .content_type(actix_web::http::header::ContentType::json())
        .body(if deferred {
            flagged(json)
        } else {
            json.to_owned()
        }))
}

/// `PUT /sessions/{id}/defer-tools` `{"defer_tools": "auto" | "never" | "always" | null}`:
/// the session's own `deferTools` for every server (`null`: each server's setting). Tools
/// loaded during the session stay loaded. Answers the session's view.
async fn put_session_defer_tools(
    state: web::Data<AppState>,
    path: web::Path<String>,
    Strict(body): Strict<DeferBody>,
) -> Result<HttpResponse, ApiError> {
    let s = session(&state, &path)?;
    let choice = defer_choice(Some(&body.defer_tools))?;
    s.addr.send(SetDefer(choice)).await.map_err(mailbox)?;
    let view = s.addr.send(GetView).await.map_err(mailbox)?;
    Ok(HttpResponse::Ok().json(view))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct DeferBody {
    defer_tools: Value,
}

/// A call of `mcp__search`: the answer is a tool result (text and `structuredContent`), and
/// the tools it answers in full are loaded for the rest of the session.
async fn call_search(s: &SessionHandle, args: &Value) -> Result<HttpResponse, ApiError> {
    let args = crate::toolsearch::parse_args(args).map_err(|m| {
        let mut e = ApiError::new(StatusCode::BAD_REQUEST, "bad_request", m);
        e.extra = Some(json!({"outcome": "not_run"}));
        e
    })?;
    let snap = s.shared.load();
    let Some(index) = snap.index.clone() else {
        return Err(ApiError::not_run(
            StatusCode::NOT_FOUND,
            "no_such_tool",
            "no tool is deferred in this session: mcp__search is not offered",
        ));
    };
    drop(snap);
    let (mut result, matched) = crate::toolsearch::answer(&args, &index);
    let names: Vec<String> = matched.iter().map(|t| t.name.clone()).collect();
    let generation = s
        .addr
        .send(Load { names, wake: None })
        .await
        .map_err(mailbox)?;
    if let Some(m) = result.as_object_mut() {
        m.insert("outcome".into(), Value::from("ok"));
        m.insert("generation".into(), Value::from(generation));
    }
    Ok(HttpResponse::Ok().json(result))
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct CallBody {
    #[serde(default)]
    arguments: Option<Value>,
}

/// Why a session has no tool by that name: its server is left out until the user signs in
/// (503 `needs_sign_in`, as its calls answer), or there is no such tool (404). The session's
/// view is asked only on this path.
async fn missing_tool(s: &SessionHandle, name: &str) -> ApiError {
    let server = match name.split_once('/') {
        Some((server, _)) => Some(server),
        None => name
            .strip_prefix("mcp__")
            .and_then(|rest| rest.split_once("__"))
            .map(|(server, _)| server),
    };
    if let (Some(server), Ok(view)) = (server, s.addr.send(GetView).await) {
        let needs = view.servers.iter().any(|v| {
            v.name == server && v.state == crate::actors::runtime::ServerState::NeedsSignIn
        });
        if needs {
            return ApiError::not_run(
                StatusCode::SERVICE_UNAVAILABLE,
                "needs_sign_in",
                format!(
                    "the request to {server:?} did not run: the server needs the user to sign in \
                     (albedo-mcp mcp login {server}, or PUT /auth/logins/mcp:{server})"
                ),
            );
        }
    }
    ApiError::not_run(
        StatusCode::NOT_FOUND,
        "no_such_tool",
        format!("no tool {name:?} in this session"),
    )
}

async fn call_tool(
    state: web::Data<AppState>,
    path: web::Path<(String, String)>,
    Optional(body): Optional<CallBody>,
) -> Result<HttpResponse, ApiError> {
    let (id, name) = path.into_inner();
    body::tool_name(&name)?;
    let s = session(&state, &id)?;
    let snap = s.shared.load();
    let Some((tool, deferred)) = snap.lookup(&name).map(|(t, d)| (t.clone(), d)) else {
        return Err(missing_tool(&s, &name).await);
    };
    let args = body.arguments.unwrap_or_else(|| json!({}));
    if !args.is_object() {
        return Err(ApiError::not_run(
            StatusCode::BAD_REQUEST,
            "bad_request",
            "`arguments` must be an object",
        ));
    }
    // A tool called stays loaded whatever the policy decides later; a deferred tool called
    // by name is loaded for the rest of the session; the first call to a lazy server's tool
    // dials it (the call waits for the dial).
    if tool.kind != ToolKind::Search {
        snap.used.note(&tool.name);
    }
    let wake = tool.kind != ToolKind::Search && snap.lazy.contains(&tool.server);
    if deferred || wake {
        let load = Load {
            names: if deferred {
                vec![tool.name.clone()]
            } else {
                Vec::new()
            },
            wake: wake.then(|| tool.server.clone()),
        };
        s.addr.send(load).await.map_err(mailbox)?;
    }
    let target = match &tool.kind {
        ToolKind::Tool { tool } => CallTarget::Tool {
            name: tool.clone(),
            arguments: args,
        },
        ToolKind::ReadResource => match args.get("uri").and_then(Value::as_str) {
            Some(uri) => CallTarget::ReadResource {
                uri: uri.to_owned(),
            },
            None => {
                return Err(ApiError::not_run(
                    StatusCode::BAD_REQUEST,
                    "bad_request",
                    "read_resource needs a string `uri`",
                ));
            }
        },
        ToolKind::GetPrompt => match args.get("name").and_then(Value::as_str) {
            Some(n) => CallTarget::GetPrompt {
                name: n.to_owned(),
                arguments: args.get("arguments").cloned().unwrap_or_else(|| json!({})),
            },
            None => {
                return Err(ApiError::not_run(
                    StatusCode::BAD_REQUEST,
                    "bad_request",
                    "get_prompt needs a string `name`",
                ));
            }
        },
        ToolKind::Search => {
            drop(snap);
            return call_search(&s, &args).await;
        }
    };
    let conn = snap.conns.get(&tool.server).cloned().ok_or_else(|| {
        ApiError::not_run(
            StatusCode::SERVICE_UNAVAILABLE,
            "unavailable",
            format!("server {:?} has no connection in this session", tool.server),
        )
    })?;
    drop(snap);
    match conn.call(target).await {
        Ok(result) => Ok(ok_answer(result)),
        Err(e) => Err(call_error(e)),
    }
}

/// A call's answer: the result's keys and `"outcome": "ok"`. The result goes out as the text
/// the server sent, `outcome` put in front of its keys, never parsed into a tree and written
/// again (`ResultText`). A result that is not an object, or that has an `outcome` key of its
/// own, is read as a tree: albedo's `outcome` replaces the server's, or the result is put
/// under `result`.
fn ok_answer(result: ResultText) -> HttpResponse {
    let (object, outcome_key) = (result.head().object, result.head().outcome_key);
    if object && !outcome_key {
        let empty = result.as_bytes()[1..]
            .iter()
            .find(|b| !b.is_ascii_whitespace())
            == Some(&b'}');
        if empty {
            return bytes_answer(vec![web::Bytes::from_static(br#"{"outcome":"ok"}"#)]);
        }
        // `{` + the result's text after its own `{`.
        let text = result.into_bytes();
        return bytes_answer(vec![
            web::Bytes::from_static(br#"{"outcome":"ok","#),
            text.slice(1..),
        ]);
    }
    match result.to_value() {
        Ok(Value::Object(mut m)) => {
            m.insert("outcome".into(), Value::from("ok"));
            large_json(Value::Object(m))
        }
        Ok(other) => large_json(json!({"outcome": "ok", "result": other})),
        Err(e) => HttpResponse::InternalServerError().json(json!({"error": {
            "code": "internal", "message": format!("the result could not be read: {e}")}})),
    }
}

/// A JSON answer made of `parts` (shared, not copied); one over [`SLICE`] goes out a slice
/// at a time.
fn bytes_answer(parts: Vec<web::Bytes>) -> HttpResponse {
    let mut r = HttpResponse::Ok();
    r.content_type(actix_web::http::header::ContentType::json());
    let len: usize = parts.iter().map(|p| p.len()).sum();
    if len <= SLICE {
        if let [one] = parts.as_slice() {
            return r.body(one.clone());
        }
        let mut body = Vec::with_capacity(len);
        for p in &parts {
            body.extend_from_slice(p);
        }
        return r.body(body);
    }
    let slices = futures_util::stream::iter(parts.into_iter().flat_map(|p| {
        (0..p.len())
            .step_by(SLICE)
            .map(move |i| Ok::<_, actix_web::Error>(p.slice(i..(i + SLICE).min(p.len()))))
    }));
    r.body(actix_web::body::SizedStream::new(len as u64, slices))
}

/// Above this size a JSON answer is written in slices of this size.
const SLICE: usize = 64 * 1024;

/// A JSON answer that may be large (a tool result up to 16 MiB): serialized once, the value
/// dropped at once, and a large body handed to actix-web in slices of the same buffer, so
/// that the server copies a slice at a time into its write buffer, not the whole body
/// (with `.json()` a 10 MiB result was held three times: the value, its text and the
/// write buffer).
fn large_json(v: Value) -> HttpResponse {
    let body = web::Bytes::from(crate::protocol::json_write::to_vec(&v));
    drop(v);
    bytes_answer(vec![body])
}

fn call_error(e: CallError) -> ApiError {
    let (status, code) = match &e {
        CallError::Unavailable { .. } => (StatusCode::SERVICE_UNAVAILABLE, "unavailable"),
        CallError::NotRun { .. } => (StatusCode::SERVICE_UNAVAILABLE, "not_run"),
        CallError::NeedsSignIn { .. } => (StatusCode::SERVICE_UNAVAILABLE, "needs_sign_in"),
        CallError::Unknown { .. } => (StatusCode::BAD_GATEWAY, "outcome_unknown"),
        CallError::Server { .. } => (StatusCode::BAD_GATEWAY, "server_error"),
        CallError::Invalid { .. } => (StatusCode::BAD_GATEWAY, "invalid_result"),
        CallError::NoSuchTool(_) => (StatusCode::NOT_FOUND, "no_such_tool"),
    };
    let mut err = ApiError::new(status, code, e.to_string());
    let mut extra = json!({"outcome": e.outcome()});
    if let CallError::Server { error, .. } = &e {
        extra["rpc"] = serde_json::to_value(error).unwrap_or(Value::Null);
    }
    err.extra = Some(extra);
    err
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ActivityBody {
    kind: String,
}

async fn activity(
    state: web::Data<AppState>,
    path: web::Path<String>,
    Strict(body): Strict<ActivityBody>,
) -> Result<HttpResponse, ApiError> {
    let s = session(&state, &path)?;
    let turn_end = match body.kind.as_str() {
        "submit" => false,
        "turn_end" => true,
        other => {
            return Err(ApiError::new(
                StatusCode::BAD_REQUEST,
                "bad_request",
                format!("unknown activity kind {other:?} (use submit or turn_end)"),
            ))
        }
    };
    let a = s.addr.send(Activity { turn_end }).await.map_err(mailbox)?;
    Ok(HttpResponse::Ok().json(a))
}

async fn events(
    state: web::Data<AppState>,
    path: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let s = session(&state, &path)?;
    let rx = s.events.subscribe();
    let stream = futures_util::stream::unfold(rx, |mut rx| async move {
        loop {
            match rx.recv().await {
                Ok(ev) => {
                    let data = serde_json::to_string(&ev).unwrap_or_default();
                    let chunk = web::Bytes::from(format!("event: {}\ndata: {}\n\n", ev.kind, data));
                    return Some((Ok::<_, actix_web::Error>(chunk), rx));
                }
                Err(broadcast::error::RecvError::Lagged(_)) => continue,
                Err(broadcast::error::RecvError::Closed) => return None,
            }
        }
    });
    Ok(HttpResponse::Ok()
        .content_type("text/event-stream")
        .insert_header(("Cache-Control", "no-cache"))
        .streaming(stream))
}

pub type SharedState = Arc<AppState>;

/// One line of `GET /settings/mcp/events`: `kind` is `settings` (saved, reloaded, the
/// extension's default), `sign_in` (a sign-in's progress: `server`, `state`), `sessions`
/// (one opened or closed), or `servers` (a connection to `server` changed state). Clients read `GET /settings/mcp` again when they hear one.
#[derive(Debug, Clone, serde::Serialize)]
pub struct SettingsEvent {
    pub kind: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub server: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub state: Option<Value>,
}

impl AppState {
    /// Tell `GET /settings/mcp/events` listeners (none listening is fine).
    pub fn settings_changed(
        &self,
        kind: &'static str,
        server: Option<String>,
        state: Option<Value>,
    ) {
        let _ = self.settings_events.send(SettingsEvent {
            kind,
            server,
            state,
        });
    }
}

/// Follow the connections' state changes for the daemon's life: each becomes a `servers`
/// event (`server`: its name) of `GET /settings/mcp/events`, so that a client shows a server
/// connecting, failing or closing without polling. Changes that queued up while one was told
/// are told once per server (a session opening with 20 servers is not 40 events per
/// listener); missed ones (the channel lagged) are one `servers` event naming none: read all.
pub async fn follow_link_states(
    state: web::Data<AppState>,
    mut changes: broadcast::Receiver<String>,
) {
    loop {
        let first = match changes.recv().await {
            Ok(name) => Some(name),
            Err(broadcast::error::RecvError::Lagged(_)) => None,
            Err(broadcast::error::RecvError::Closed) => return,
        };
        let mut names: Vec<Option<String>> = vec![first];
        loop {
            match changes.try_recv() {
                Ok(n) => {
                    let n = Some(n);
                    if !names.contains(&n) {
                        names.push(n);
                    }
                }
                Err(broadcast::error::TryRecvError::Lagged(_)) => names.push(None),
                Err(_) => break,
            }
        }
        if names.contains(&None) {
            state.settings_changed("servers", None, None);
        } else {
            for n in names {
                state.settings_changed("servers", n, None);
            }
        }
    }
}

/// `GET /settings/mcp/events`: server-sent events that say when to read the settings again
/// (a client such as the terminal form or the web pane follows them instead of polling).
/// A comment line every 15 s keeps proxies from closing an idle stream.
async fn settings_events(state: web::Data<AppState>) -> HttpResponse {
    let rx = state.settings_events.subscribe();
    let ping = tokio::time::interval(std::time::Duration::from_secs(15));
    let stream = futures_util::stream::unfold((rx, ping), |(mut rx, mut ping)| async move {
        let chunk = tokio::select! {
            r = rx.recv() => match r {
                Ok(ev) => {
                    let data = serde_json::to_string(&ev).unwrap_or_default();
                    web::Bytes::from(format!("event: {}\ndata: {}\n\n", ev.kind, data))
                }
                // Missed some: one `settings` tells the client to read everything again.
                Err(broadcast::error::RecvError::Lagged(_)) => {
                    web::Bytes::from_static(b"event: settings\ndata: {\"kind\":\"settings\"}\n\n")
                }
                Err(broadcast::error::RecvError::Closed) => return None,
            },
            _ = ping.tick() => web::Bytes::from_static(b": ping\n\n"),
        };
        Some((Ok::<_, actix_web::Error>(chunk), (rx, ping)))
    });
    HttpResponse::Ok()
        .content_type("text/event-stream")
        .insert_header(("Cache-Control", "no-cache"))
        .streaming(stream)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::actors::connection::ConnContext;
    use crate::actors::registry::Registry;
    use std::time::Duration;

    fn insert(state: &AppState, id: &str) -> SessionHandle {
        let (comp, shared, events) =
            Composition::new(id.into(), state.runtime.clone(), Some(false), false);
        let h = SessionHandle {
            addr: comp.start(),
            shared,
            events,
            follows_default: false,
            last_active: Arc::new(AtomicU64::new(state.now_ms())),
        };
        state.sessions.write().unwrap().insert(id.into(), h.clone());
        h
    }

    /// The idle limit runs on tokio time: tested with paused time, no sleeping.
    #[actix_rt::test]
    async fn idle_sessions_are_closed_on_tokio_time_and_activity_keeps_them() {
        tokio::time::pause();
        let home = tempfile::tempdir().unwrap();
        let registry = Registry::new(1).start();
        let runtime = Runtime::new(
            home.path().to_path_buf(),
            registry,
            ConnContext::new("albedo-mcp".into(), None),
            None,
        )
        .start();
        let limits = SessionLimits {
            max_sessions: 10,
            idle: Duration::from_secs(60),
        };
        let state = AppState::new(home.path().to_path_buf(), runtime, limits);
        let a = insert(&state, "a");
        insert(&state, "b");
        tokio::time::advance(Duration::from_secs(30)).await;
        assert!(state.close_idle().await.is_empty());
        // `b` shows activity; `a` does not.
        session(&state, "b").unwrap();
        peek_session(&state, "a").unwrap();
        tokio::time::advance(Duration::from_secs(31)).await;
        assert_eq!(state.close_idle().await, ["a"]);
        assert!(peek_session(&state, "a").is_err());
        assert!(!a.addr.connected() || a.addr.send(GetView).await.is_err());
        tokio::time::advance(Duration::from_secs(30)).await;
        assert_eq!(state.close_idle().await, ["b"]);
        assert!(state.sessions.read().unwrap().is_empty());
    }
}
