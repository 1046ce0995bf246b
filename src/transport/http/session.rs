//! The session and refusals: the `Mcp-Session-Id` the server gives on `initialize`, a
//! refusal (non-2xx) read into its JSON-RPC error and a short detail, the server ending the
//! session (404, or a 400 that says the session is invalid), and how awc's failures become
//! [`TransportError`]s (not sent, or outcome unknown). Text from the server is scrubbed of
//! secrets before it reaches an error.
//!
//! Owns: `capture_session`, `Refusal`, `read_refusal`, `send_error`, `scrub_detail`,
//! `Ctx::end_session`. Must not touch: streams and workers beyond stopping them when the
//! session ends.

use super::driver::Ctx;
use super::{ListenState, SESSION_HEADER};
use crate::protocol::jsonrpc::{self, ErrorObject, Message};
use crate::transport::text::{error_text, DETAIL_CHARS};
use crate::transport::{Inbound, TransportError};
use awc::error::{ConnectError, SendRequestError};
use awc::http::header::{LOCATION, WWW_AUTHENTICATE};
use awc::http::StatusCode;

/// How much of a refusal's body is read (for its JSON-RPC error and a detail line).
const REFUSAL_BODY_LIMIT: usize = 64 * 1024;

/// Whether a refusal's text says the session id is not (or no longer) valid.
/// server-everything: 400 `-32000` "Bad Request: No valid session ID provided"; Python
/// `mcp`: 404 "Session not found"; others say "invalid session", "session expired" or
/// "unknown session".
pub fn mentions_invalid_session(text: &str) -> bool {
    let t = text.to_ascii_lowercase();
    t.contains("session")
        && [
            "no valid",
            "invalid",
            "not found",
            "unknown",
            "expired",
            "terminated",
        ]
        .iter()
        .any(|w| t.contains(w))
}

pub(super) fn capture_session(ctx: &Ctx, resp: &awc::ClientResponse) {
    let Some(v) = resp.headers().get(SESSION_HEADER) else {
        return;
    };
    let bytes = v.as_bytes();
    if bytes.is_empty() || !bytes.iter().all(|b| (0x21..=0x7e).contains(b)) {
        tracing::warn!(
            "the server sent a session id with characters outside visible ASCII; ignored"
        );
        return;
    }
    if let Ok(mut g) = ctx.shared.session.lock() {
        *g = Some(String::from_utf8_lossy(bytes).into_owned());
    }
}

impl Ctx {
    /// Text from the server made fit for an error (see [`scrub_detail`]).
    pub(super) fn detail(&self, text: &str) -> String {
        match self.shared.bearer() {
            Some(token) if token.expose().len() >= 4 => {
                let mut secrets = self.secrets.clone();
                secrets.push(token.expose().to_owned());
                scrub_detail(text, &secrets)
            }
            _ => scrub_detail(text, &self.secrets),
        }
    }

    /// The server ended the session: tell the client core once, stop everything.
    pub(super) fn end_session(&self, status: u16) {
        if self.ended.swap(true, std::sync::atomic::Ordering::AcqRel) {
            return;
        }
        tracing::info!(status, "the server ended the MCP session");
        self.shared
            .close_with(&format!("the server ended the session (HTTP {status})"));
        if let Some(h) = super::driver::lock(&self.listener).take() {
            h.abort();
        }
        self.shared.set_listen(ListenState::Closed);
        self.deliver(Inbound::Closed(TransportError::SessionExpired(status)));
        let workers: Vec<_> = super::driver::lock(&self.workers).drain().collect();
        for (_, (_, h)) in workers {
            h.abort();
        }
    }
}

/// Secrets, control and formatting characters removed from text meant for an error, which
/// is cut to 200 characters (see [`crate::transport::text`]).
fn scrub_detail(text: &str, secrets: &[String]) -> String {
    error_text(text, secrets, DETAIL_CHARS)
}

/// Map awc's error: before the request was written it was not sent; after, its outcome is
/// unknown.
pub(super) fn send_error(e: &SendRequestError) -> TransportError {
    match e {
        SendRequestError::Connect(ConnectError::Disconnected) => {
            TransportError::Lost("the server closed the connection without answering".into())
        }
        SendRequestError::Connect(c) => {
            let m = c.to_string();
            if m.contains("certificate") {
                TransportError::Connect(format!(
                    "TLS: {m} (a server with a private CA needs that CA named in config.toml's ca_files)"
                ))
            } else {
                TransportError::Connect(m)
            }
        }
        SendRequestError::Url(u) => TransportError::Connect(format!("invalid URL: {u}")),
        SendRequestError::Send(io) => {
            TransportError::Connect(format!("the request could not be written: {io}"))
        }
        SendRequestError::Http(h) => TransportError::Connect(format!("invalid request: {h}")),
        SendRequestError::Body(b) => {
            TransportError::Connect(format!("the request body could not be sent: {b}"))
        }
        SendRequestError::TunnelNotSupported => {
            TransportError::Connect("tunnels are not supported".into())
        }
        SendRequestError::Response(p) => {
            TransportError::Lost(format!("the server's answer could not be read: {p}"))
        }
        SendRequestError::Timeout => TransportError::Lost("no answer in time".into()),
        other => TransportError::Lost(other.to_string()),
    }
}

/// A non-2xx answer, read.
pub(super) struct Refusal {
    pub(super) status: u16,
    pub(super) rpc_error: Option<ErrorObject>,
    pub(super) detail: String,
    pub(super) www_authenticate: Option<String>,
    pub(super) session_ended: bool,
}

impl Refusal {
    pub(super) fn status_error(&self, with_rpc: bool) -> TransportError {
        TransportError::Status {
            status: self.status,
            detail: self.detail.clone(),
            rpc_error: if with_rpc {
                self.rpc_error.clone()
            } else {
                None
            },
            www_authenticate: self.www_authenticate.clone(),
        }
    }
}

pub(super) async fn read_refusal(
    ctx: &Ctx,
    mut resp: awc::ClientResponse,
    carried_session: bool,
) -> Refusal {
    let status = resp.status();
    let www_authenticate = resp
        .headers()
        .get(WWW_AUTHENTICATE)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let location = resp
        .headers()
        .get(LOCATION)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let body = resp
        .body()
        .limit(REFUSAL_BODY_LIMIT)
        .await
        .unwrap_or_default();
    let mut rpc_error = jsonrpc::parse_batch(&body).ok().and_then(|msgs| {
        msgs.into_iter().find_map(|m| match m {
            Message::Response { result: Err(e), .. } | Message::OrphanError(e) => Some(e),
            _ => None,
        })
    });
    let text = String::from_utf8_lossy(&body);
    let says_invalid = match &rpc_error {
        Some(e) => mentions_invalid_session(&e.message),
        None => mentions_invalid_session(&text),
    };
    // The refusal's JSON-RPC error becomes its request's error answer: its message is the
    // server's text in one of our errors, so it is scrubbed like any detail.
    if let Some(e) = rpc_error.as_mut() {
        e.message = ctx.detail(&e.message);
    }
    let mut detail = match &rpc_error {
        Some(e) => e.message.clone(),
        None => ctx.detail(&text),
    };
    if status.is_redirection() {
        detail = match location {
            Some(l) => format!(
                "redirected to {}; redirects are not followed, set the server's url to it",
                ctx.detail(&l)
            ),
            None => "redirected; redirects are not followed".into(),
        };
    }
    if detail.is_empty() {
        detail = status.canonical_reason().unwrap_or("").to_owned();
    }
    let session_ended = carried_session
        && (status == StatusCode::NOT_FOUND || (status == StatusCode::BAD_REQUEST && says_invalid));
    Refusal {
        status: status.as_u16(),
        rpc_error,
        detail,
        www_authenticate,
        session_ended,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn invalid_session_wording() {
        assert!(mentions_invalid_session(
            "Bad Request: No valid session ID provided"
        ));
        assert!(mentions_invalid_session("Session not found"));
        assert!(mentions_invalid_session("invalid or expired session"));
        assert!(!mentions_invalid_session("Server not initialized"));
        assert!(!mentions_invalid_session("Bad Request: invalid JSON"));
    }

    #[test]
    fn details_are_scrubbed_and_short() {
        let secrets = vec!["Bearer sekrit-token".to_owned(), "sekrit-token".to_owned()];
        let d = scrub_detail("bad token sekrit-token\nat line 2", &secrets);
        assert_eq!(d, "bad token *** at line 2");
        let long = "x".repeat(1000);
        assert!(scrub_detail(&long, &[]).chars().count() <= DETAIL_CHARS + 1);
    }
}
