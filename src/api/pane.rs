//! The web pane and how it signs in, and the token's rotation.
//!
//! - `POST /login/once` (over the socket or with the token): a one-time link,
//!   `http://127.0.0.1:7420/login?once=...`, good once and for a minute (`albedo-mcp web`
//!   prints or opens it).
//! - `GET /login?once=...`: sets the pane's session cookie (`HttpOnly`, `SameSite=Strict`,
//!   `Secure` over TLS) and redirects to `/`.
//! - `GET /`, `/pane.js`, `/pane.css`: the pane (`src/web/`), a client of this API.
//! - `POST /token/rotate` (over the socket or with the token): a new token in the file; the
//!   old one, every pane session and every link stop working.

use super::trust::{cookie_name, principal, Principal, Trust, Via, LINK_LIFETIME};
use super::ApiError;
use actix_web::http::{header, StatusCode};
use actix_web::{web, HttpRequest, HttpResponse};
use serde::Deserialize;
use serde_json::json;

const INDEX_HTML: &str = include_str!("../web/index.html");
const PANE_JS: &str = include_str!("../web/pane.js");
const PANE_CSS: &str = include_str!("../web/pane.css");

/// What the pane's files may do: load themselves, talk to this origin, nothing else, and
/// never be framed.
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; \
                   img-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

fn static_file(content_type: &'static str, body: &'static str) -> HttpResponse {
    HttpResponse::Ok()
        .content_type(content_type)
        .insert_header((header::CONTENT_SECURITY_POLICY, CSP))
        .insert_header((header::X_FRAME_OPTIONS, "DENY"))
        .insert_header((header::REFERRER_POLICY, "no-referrer"))
        .insert_header((header::CACHE_CONTROL, "no-store"))
        .body(body)
}

pub async fn index() -> HttpResponse {
    static_file("text/html; charset=utf-8", INDEX_HTML)
}

pub async fn pane_js() -> HttpResponse {
    static_file("text/javascript; charset=utf-8", PANE_JS)
}

pub async fn pane_css() -> HttpResponse {
    static_file("text/css; charset=utf-8", PANE_CSS)
}

/// Only the user's own clients (the socket, the token) may mint links or rotate the token;
/// the pane's cookie may not.
fn owner_only(req: &HttpRequest) -> Result<(), ApiError> {
    match principal(req) {
        Principal::Socket | Principal::Token => Ok(()),
        _ => Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "forbidden",
            "only the socket or the API token may do this",
        )),
    }
}

pub async fn issue_link(
    req: HttpRequest,
    trust: web::Data<Trust>,
) -> Result<HttpResponse, ApiError> {
    owner_only(&req)?;
    let origin = trust.origin().ok_or_else(|| {
        ApiError::new(
            StatusCode::CONFLICT,
            "no_tcp_listener",
            "the daemon listens on no TCP address, so the pane cannot be opened",
        )
    })?;
    let once = trust.issue_link(tokio::time::Instant::now())?;
    Ok(HttpResponse::Ok()
        .insert_header((header::CACHE_CONTROL, "no-store"))
        .json(json!({
            "url": format!("{origin}/login?once={once}"),
            "expires_in_secs": LINK_LIFETIME.as_secs(),
        })))
}

#[derive(Deserialize)]
pub struct LoginQuery {
    once: String,
}

pub async fn login(
    req: HttpRequest,
    trust: web::Data<Trust>,
    query: web::Query<LoginQuery>,
) -> Result<HttpResponse, ApiError> {
    let Some(Via::Tcp { local, tls }) = req.conn_data::<Via>().copied() else {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "bad_request",
            "the pane signs in over TCP only",
        ));
    };
    let now = tokio::time::Instant::now();
    if query.once.len() > 128 || !trust.redeem_link(&query.once, now) {
        return Err(ApiError::new(
            StatusCode::UNAUTHORIZED,
            "login_link_invalid",
            "this sign-in link was used already or is more than a minute old; run `albedo-mcp \
             web` for a new one",
        ));
    }
    let value = trust.new_cookie(now)?;
    let secure = if tls { "; Secure" } else { "" };
    let cookie = format!(
        "{}={value}; Path=/; HttpOnly; SameSite=Strict{secure}",
        cookie_name(local.port())
    );
    tracing::info!("the web pane signed in with a one-time link");
    Ok(HttpResponse::SeeOther()
        .insert_header((header::LOCATION, "/"))
        .insert_header((header::SET_COOKIE, cookie))
        .insert_header((header::REFERRER_POLICY, "no-referrer"))
        .insert_header((header::CACHE_CONTROL, "no-store"))
        .finish())
}

pub async fn rotate_token(
    req: HttpRequest,
    trust: web::Data<Trust>,
) -> Result<HttpResponse, ApiError> {
    owner_only(&req)?;
    let home = trust.home().to_path_buf();
    let token = web::block(move || crate::store::token::rotate(&home))
        .await
        .map_err(|e| ApiError::internal(e.to_string()))?
        .map_err(|e| ApiError::internal(e.to_string()))?;
    crate::protocol::text::register_secrets([token.as_str()]);
    trust.replace_token(&token);
    let path = crate::store::token::token_path(trust.home());
    tracing::info!(path = %path.display(), "the API token was rotated");
    Ok(HttpResponse::Ok().json(json!({"path": path.display().to_string()})))
}
