//! Request bodies and path parameters, strictly.
//!
//! Every route that reads a body takes [`Strict<T>`] (the body is required) or
//! [`Optional<T>`] (an empty body means `T::default()`). Either way a
//! body must be `application/json` (parameters such as `charset` allowed), complete, at most
//! 128 levels deep (serde_json's recursion limit) and name no unknown field, or the request
//! is refused with 400 and does not run; a body with another `Content-Type` is refused even
//! when it is empty (a form post is never taken as `{}`). A body over the route's
//! [`BodyLimit`] is refused with 413 as soon as its `Content-Length` (or its bytes so far)
//! says so.

use super::ApiError;
use actix_web::dev::Payload;
use actix_web::http::{header, StatusCode};
use actix_web::{FromRequest, HttpRequest};
use futures_util::StreamExt;
use serde::de::DeserializeOwned;
use std::future::Future;
use std::pin::Pin;

/// The largest body a route reads, in bytes (route data overrides the app's).
#[derive(Clone, Copy, Debug)]
pub struct BodyLimit(pub usize);

/// The default limit of every body but a tool call's.
pub const DEFAULT_BODY_LIMIT: usize = 1024 * 1024;
/// The default limit of a tool call's body.
pub const DEFAULT_CALL_BODY_LIMIT: usize = 16 * 1024 * 1024;

/// A required JSON body.
pub struct Strict<T>(pub T);

/// A JSON body that may be left out (empty, with no `Content-Type` or `application/json`):
/// then `T::default()`.
pub struct Optional<T>(pub T);

fn bad(message: impl Into<String>) -> ApiError {
    ApiError::not_run(StatusCode::BAD_REQUEST, "bad_request", message)
}

fn too_large(limit: usize) -> ApiError {
    ApiError::not_run(
        StatusCode::PAYLOAD_TOO_LARGE,
        "body_too_large",
        format!("the body is larger than this route's limit of {limit} bytes"),
    )
}

/// `Some(true)` for `application/json`, `Some(false)` for another type, `None` for none.
fn is_json(req: &HttpRequest) -> Result<Option<bool>, ApiError> {
    let Some(ct) = req.headers().get(header::CONTENT_TYPE) else {
        return Ok(None);
    };
    // The usual value, compared as bytes before it is read as text and split.
    if ct.as_bytes() == b"application/json" {
        return Ok(Some(true));
    }
    let ct = ct
        .to_str()
        .map_err(|_| bad("the Content-Type header is not text"))?;
    let essence = ct.split(';').next().unwrap_or("").trim();
    if essence.eq_ignore_ascii_case("application/json") {
        Ok(Some(true))
    } else {
        Err(bad(format!(
            "the body must be application/json, not {:?}",
            crate::advertise::bound_text(ct, 100)
        )))
    }
}

/// Read the whole body, refusing it (413) past `limit`.
async fn read_limited(
    req: &HttpRequest,
    payload: &mut Payload,
    limit: usize,
) -> Result<Vec<u8>, ApiError> {
    let declared = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit as u64) {
        return Err(too_large(limit));
    }
    let mut body = Vec::with_capacity(declared.map(|n| n as usize).unwrap_or(0).min(limit));
    while let Some(chunk) = payload.next().await {
        let chunk = chunk.map_err(|e| bad(format!("the body could not be read: {e}")))?;
        if body.len() + chunk.len() > limit {
            return Err(too_large(limit));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

fn limit_of(req: &HttpRequest) -> usize {
    req.app_data::<BodyLimit>()
        .map(|l| l.0)
        .unwrap_or(DEFAULT_BODY_LIMIT)
}

fn parse<T: DeserializeOwned>(body: &[u8]) -> Result<T, ApiError> {
    serde_json::from_slice(body).map_err(|e| bad(format!("invalid JSON body: {e}")))
}

impl<T: DeserializeOwned + 'static> FromRequest for Strict<T> {
    type Error = ApiError;
    type Future = Pin<Box<dyn Future<Output = Result<Self, ApiError>>>>;

    fn from_request(req: &HttpRequest, payload: &mut Payload) -> Self::Future {
        let req = req.clone();
        let mut payload = payload.take();
        Box::pin(async move {
            let json = is_json(&req)?;
            let body = read_limited(&req, &mut payload, limit_of(&req)).await?;
            if json.is_none() {
                return Err(bad(if body.is_empty() {
                    "this route needs a JSON body (Content-Type: application/json)"
                } else {
                    "the body must be application/json (no Content-Type was sent)"
                }));
            }
            parse(&body).map(Strict)
        })
    }
}

impl<T: DeserializeOwned + Default + 'static> FromRequest for Optional<T> {
    type Error = ApiError;
    type Future = Pin<Box<dyn Future<Output = Result<Self, ApiError>>>>;

    fn from_request(req: &HttpRequest, payload: &mut Payload) -> Self::Future {
        let req = req.clone();
        let mut payload = payload.take();
        Box::pin(async move {
            optional(&req, &mut payload, limit_of(&req))
                .await
                .map(Optional)
        })
    }
}

/// What [`Optional`] reads, with the limit given rather than the route's: an empty body is
/// `T::default()`.
pub(super) async fn optional<T: DeserializeOwned + Default>(
    req: &HttpRequest,
    payload: &mut Payload,
    limit: usize,
) -> Result<T, ApiError> {
    let json = is_json(req)?;
    let body = read_limited(req, payload, limit).await?;
    let blank = body.iter().all(u8::is_ascii_whitespace);
    match json {
        None if blank => Ok(T::default()),
        None => Err(bad(
            "the body must be application/json (no Content-Type was sent)",
        )),
        Some(_) if blank => Ok(T::default()),
        Some(_) => parse(&body),
    }
}

/// A session id as the daemon makes them (`s<n>-<hex>`): letters, digits, `-` and `_`, at
/// most 64 characters.
pub fn session_id(id: &str) -> Result<&str, ApiError> {
    let ok = (1..=64).contains(&id.len())
        && id
            .bytes()
            .all(|c| c.is_ascii_alphanumeric() || c == b'-' || c == b'_');
    if ok {
        Ok(id)
    } else {
        Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "bad_request",
            "a session id is 1 to 64 letters, digits, `-` or `_`",
        ))
    }
}

/// A tool name (`mcp__server__tool`, or `server/tool` percent-encoded as `server%2Ftool`)
/// after decoding: 1 to 256 bytes of printable text (no control characters, no spaces).
pub fn tool_name(name: &str) -> Result<&str, ApiError> {
    let ok = (1..=256).contains(&name.len())
        && name.chars().all(|c| !c.is_control() && !c.is_whitespace());
    if ok {
        Ok(name)
    } else {
        Err(ApiError::not_run(
            StatusCode::BAD_REQUEST,
            "bad_request",
            "a tool name is 1 to 256 bytes with no spaces or control characters",
        ))
    }
}

/// A server name: the configuration's rule (1 to 48 letters, digits, `-` or single `_`).
pub fn server_name(name: &str) -> Result<&str, ApiError> {
    if crate::store::settings::valid_server_name(name) {
        Ok(name)
    } else {
        Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "bad_request",
            "a server name is 1 to 48 letters, digits, `-` or single `_`",
        ))
    }
}
