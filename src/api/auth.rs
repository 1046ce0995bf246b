//! The sign-in API: `PUT /auth/logins/mcp:<server>` starts a sign-in and answers its
//! authorization URL, `GET` shows its progress, `DELETE` cancels it, and
//! `POST /auth/logins/mcp:<server>/callback {"url"}` completes it with a callback URL the
//! user pasted (it races the loopback listener; the first valid one wins). Signing out is
//! `PATCH /settings/mcp` with `secrets: {<server>: {oauth: null}}`. When a sign-in ends, every
//! session reloads (the server joins like a returning one) and hears of it on its events.
//!
//! Owns: those handlers and the task that follows sign-ins for the sessions. Must not touch:
//! the OAuth protocol (`oauth`), tokens (`actors::tokens`), transports.

use super::body::{Optional, Strict};
use super::{ApiError, AppState};
use crate::actors::composition::SessionEvent;
use crate::actors::signin::{Callback, Cancel, Get, LoginState, SignInError, SignInEvent, Start};
use actix_web::http::StatusCode;
use actix_web::{web, HttpResponse};
use serde::Deserialize;
use serde_json::json;

/// `mcp:<server>` → the server's name (checked like any server name).
fn server_of(login: &str) -> Result<String, ApiError> {
    let name = login.strip_prefix("mcp:").ok_or_else(|| {
        ApiError::new(
            StatusCode::NOT_FOUND,
            "unknown_login",
            "sign-ins are named mcp:<server>",
        )
    })?;
    super::body::server_name(name)?;
    Ok(name.to_owned())
}

fn signins(state: &AppState) -> Result<actix::Addr<crate::actors::signin::SignIns>, ApiError> {
    state.signins.clone().ok_or_else(|| {
        ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "unavailable",
            "sign-ins are not available in this daemon",
        )
    })
}

fn gone(e: actix::MailboxError) -> ApiError {
    ApiError::internal(format!("the sign-ins actor is gone: {e}"))
}

fn sign_in_error(e: SignInError) -> ApiError {
    let (status, code) = match &e {
        SignInError::UnknownServer(_) => (StatusCode::NOT_FOUND, "unknown_server"),
        SignInError::NotHttp(_) => (StatusCode::BAD_REQUEST, "not_http"),
        SignInError::Settings(_) => (StatusCode::UNPROCESSABLE_ENTITY, "invalid_settings"),
        SignInError::Failed(_) => (StatusCode::BAD_GATEWAY, "sign_in_failed"),
        SignInError::NotPending(_) => (StatusCode::CONFLICT, "no_sign_in"),
        SignInError::BadCallback(_) => (StatusCode::BAD_REQUEST, "bad_callback"),
        SignInError::ServiceGrant { .. } => (StatusCode::CONFLICT, "no_sign_in"),
    };
    ApiError::new(status, code, e.to_string())
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct NoFields {}

/// `PUT /auth/logins/{login}`.
pub async fn start(
    state: web::Data<AppState>,
    path: web::Path<String>,
    _body: Optional<NoFields>,
) -> Result<HttpResponse, ApiError> {
    let server = server_of(&path)?;
    let v = signins(&state)?
        .send(Start { server })
        .await
        .map_err(gone)?
        .map_err(sign_in_error)?;
    Ok(HttpResponse::Ok().json(v))
}

/// `GET /auth/logins/{login}`.
pub async fn get(
    state: web::Data<AppState>,
    path: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let server = server_of(&path)?;
    match signins(&state)?.send(Get { server }).await.map_err(gone)? {
        Some(v) => Ok(HttpResponse::Ok().json(v)),
        None => Err(ApiError::new(
            StatusCode::NOT_FOUND,
            "no_sign_in",
            "no sign-in was started for this server",
        )),
    }
}

/// `DELETE /auth/logins/{login}`.
pub async fn cancel(
    state: web::Data<AppState>,
    path: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let server = server_of(&path)?;
    match signins(&state)?
        .send(Cancel { server })
        .await
        .map_err(gone)?
    {
        Some(v) => Ok(HttpResponse::Ok().json(v)),
        None => Err(ApiError::new(
            StatusCode::NOT_FOUND,
            "no_sign_in",
            "no sign-in was started for this server",
        )),
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PastedUrl {
    url: String,
}

/// `POST /auth/logins/{login}/callback {"url"}`.
pub async fn callback(
    state: web::Data<AppState>,
    path: web::Path<String>,
    Strict(body): Strict<PastedUrl>,
) -> Result<HttpResponse, ApiError> {
    let server = server_of(&path)?;
    if body.url.len() > 16 * 1024 {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "bad_callback",
            "the callback URL is longer than 16 KiB",
        ));
    }
    let v = signins(&state)?
        .send(Callback {
            server,
            url: body.url,
            login: None,
        })
        .await
        .map_err(gone)?
        .map_err(sign_in_error)?;
    Ok(HttpResponse::Ok().json(v))
}

/// Follow sign-ins for the daemon's life: each one's progress goes to every session's events,
/// and a server signed in makes every session reload (it joins like a returning server).
pub async fn follow_sign_ins(
    state: web::Data<AppState>,
    mut events: tokio::sync::broadcast::Receiver<SignInEvent>,
) {
    loop {
        let ev = match events.recv().await {
            Ok(ev) => ev,
            Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => continue,
            Err(_) => return,
        };
        let sessions: Vec<std::sync::Arc<super::SessionHandle>> = state
            .sessions
            .read()
            .map(|s| s.values().cloned().collect())
            .unwrap_or_default();
        for s in &sessions {
            let state_name = json!(ev.state);
            let message = match &ev.error {
                Some(e) => format!(
                    "MCP server {:?}: sign-in {}: {e}",
                    ev.server,
                    state_name.as_str().unwrap_or("")
                ),
                None => format!(
                    "MCP server {:?}: sign-in {}",
                    ev.server,
                    state_name.as_str().unwrap_or("")
                ),
            };
            let _ = s.events.send(SessionEvent {
                kind: "sign_in",
                generation: s.shared.load().table.generation,
                message,
            });
        }
        if ev.state == LoginState::SignedIn {
            super::settings::reload_sessions(&state, None, None).await;
        }
        state.settings_changed("sign_in", Some(ev.server.clone()), Some(json!(ev.state)));
    }
}
