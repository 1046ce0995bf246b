//! The daemon's HTTP API (actix-web): JSON in and out; errors are
//! `{"error": {"code": "<snake_case>", "message": "..."}}` with a fitting status.
//!
//! The routes are in `configure`; their handlers by concern: `sessions`, `tools` (and calls),
//! `events` (the streams), `settings`, `trial`, `auth` (sign-ins), `pane` (the web pane).
//!
//! Owns: request parsing (`body`: strict JSON bodies, their limits, path parameters), JSON
//! shapes, the table of sessions, the trust boundary (`trust`: the middleware every request
//! passes first), the hot lane that runs a tool call without the router (`hot`) and the web
//! pane with its sign-in (`pane`). Must not touch: transports; it talks to actors
//! (Composition, Runtime, Registry) and reads their published snapshots.

pub mod auth;
pub mod body;
mod events;
mod hot;
pub mod pane;
mod sessions;
pub mod settings;
mod tools;
pub mod trial;
pub mod trust;

pub use events::{follow_link_states, SettingsEvent};
use sessions::*;
use tools::*;

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
use actix_web::http::{Method, StatusCode};
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
    pub sessions: RwLock<crate::fastmap::FastMap<String, Arc<SessionHandle>>>,
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
            sessions: RwLock::new(Default::default()),
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
        let gone: Vec<(String, Arc<SessionHandle>)> = match self.sessions.write() {
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

/// A route for one method. actix-web's own method guards (`web::post()` and the like) record
/// every method they try in the request's extensions, for a 405 answer of actix's: two
/// allocations per request for a record that [`resource`]'s default service, which answers
/// 405 itself, never reads.
fn on(method: Method) -> actix_web::Route {
    web::route().guard(actix_web::guard::fn_guard(move |c| {
        c.head().method == method
    }))
}

/// Everything but the trust middleware (`App::wrap(from_fn(trust::guard))`, in `serve`):
/// the routes, the hot one first (actix-web matches a request against each pattern in
/// turn), the body limits, and JSON errors for unknown routes and bad parameters.
pub fn configure(cfg: &mut web::ServiceConfig, limits: BodyLimits) {
    cfg.app_data(BodyLimit(limits.other))
        // The call's limit, for the hot lane (`hot`), which runs before the router.
        .app_data(limits)
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
                .route(on(Method::POST).to(call_tool)),
        )
        .service(resource("/healthz", "GET").route(on(Method::GET).to(healthz)))
        .service(resource("/extensions", "GET").route(on(Method::GET).to(settings::get_extensions)))
        .service(
            resource("/extensions/mcp", "PUT").route(on(Method::PUT).to(settings::put_extension)),
        )
        .service(
            resource("/extensions/editor-mcp", "PUT")
                .route(on(Method::PUT).to(settings::put_editor_extension)),
        )
        .service(
            resource("/extensions/mcp/reload", "POST")
                .route(on(Method::POST).to(settings::reload_all)),
        )
        .service(
            resource("/sessions", "GET, POST")
                .route(on(Method::GET).to(list_sessions))
                .route(on(Method::POST).to(create_session)),
        )
        .service(
            resource("/sessions/{id}", "GET, DELETE")
                .route(on(Method::GET).to(get_session))
                .route(on(Method::DELETE).to(delete_session)),
        )
        .service(
            resource("/sessions/{id}/extensions/mcp", "PUT")
                .route(on(Method::PUT).to(put_session_extension)),
        )
        .service(
            resource("/sessions/{id}/extensions/editor-mcp", "PUT")
                .route(on(Method::PUT).to(put_session_editor_extension)),
        )
        .service(
            resource("/sessions/{id}/editor-mcp-servers", "PUT")
                .route(on(Method::PUT).to(put_editor_servers)),
        )
        .service(
            resource("/sessions/{id}/defer-tools", "PUT")
                .route(on(Method::PUT).to(put_session_defer_tools)),
        )
        .service(resource("/sessions/{id}/tools", "GET").route(on(Method::GET).to(list_tools)))
        .service(resource("/sessions/{id}/tools/{name}", "GET").route(on(Method::GET).to(get_tool)))
        .service(resource("/sessions/{id}/activity", "POST").route(on(Method::POST).to(activity)))
        .service(
            resource("/sessions/{id}/events", "GET")
                .route(on(Method::GET).to(events::session_events)),
        )
        .service(
            resource("/sessions/{id}/servers/{name}", "PUT")
                .route(on(Method::PUT).to(put_session_server)),
        )
        .service(
            resource("/settings/mcp", "GET, PATCH")
                .route(on(Method::GET).to(settings::get_settings))
                .route(on(Method::PATCH).to(settings::patch_settings)),
        )
        .service(
            resource("/settings/mcp/events", "GET")
                .route(on(Method::GET).to(events::settings_events)),
        )
        .service(
            resource("/settings/mcp/suggest-name", "GET")
                .route(on(Method::GET).to(settings::suggest_name)),
        )
        .service(
            resource("/settings/mcp/servers/{name}/test", "POST")
                .route(on(Method::POST).to(trial::test_server)),
        )
        .service(
            resource("/auth/logins/{login}", "PUT, GET, DELETE")
                .route(on(Method::PUT).to(auth::start))
                .route(on(Method::GET).to(auth::get))
                .route(on(Method::DELETE).to(auth::cancel)),
        )
        .service(
            resource("/auth/logins/{login}/callback", "POST")
                .route(on(Method::POST).to(auth::callback)),
        )
        .service(resource("/login/once", "POST").route(on(Method::POST).to(pane::issue_link)))
        .service(resource("/login", "GET").route(on(Method::GET).to(pane::login)))
        .service(resource("/token/rotate", "POST").route(on(Method::POST).to(pane::rotate_token)))
        .service(resource("/", "GET").route(on(Method::GET).to(pane::index)))
        .service(resource("/pane.js", "GET").route(on(Method::GET).to(pane::pane_js)))
        .service(resource("/pane.css", "GET").route(on(Method::GET).to(pane::pane_css)))
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::actors::connection::ConnContext;
    use crate::actors::registry::Registry;
    use std::time::Duration;

    fn insert(state: &AppState, id: &str) -> Arc<SessionHandle> {
        let (comp, shared, events) =
            Composition::new(id.into(), state.runtime.clone(), Some(false), false);
        let h = Arc::new(SessionHandle {
            addr: comp.start(),
            shared,
            events,
            follows_default: false,
            last_active: Arc::new(AtomicU64::new(state.now_ms())),
        });
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
