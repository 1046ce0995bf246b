//! One worker per message: POST it, and see it through. A request's reply is a JSON body or
//! an SSE stream read until its response (resumed by `resume` in the 2025-11-25 era); a
//! notification's or a response's POST only needs a 2xx.
//!
//! Owns: the POST and its reply. Must not touch: the driver's tables (beyond what
//! `dispatch`/`end_session` do), the listening stream.

use super::driver::Ctx;
use super::resume::read_request_stream;
use super::session::{capture_session, read_refusal, send_error};
use super::{content_type, is_event_stream};
use crate::protocol::check::{Checked, JsonCheck};
use crate::protocol::jsonrpc::{self, Message, RequestId, MAX_MESSAGE_BYTES};
use crate::transport::{spare, Inbound, OutKind, Outbound, TransportError};
use awc::error::{PayloadError, SendRequestError};
use awc::http::header::{HeaderValue, ACCEPT, CONTENT_TYPE};
use awc::http::{Method, StatusCode};
use futures_util::StreamExt;
use std::sync::atomic::Ordering;
use std::sync::Arc;

const ACCEPT_POST: &str = "application/json, text/event-stream";

/// One worker: POST one message and see it through.
pub(super) async fn post(ctx: &Arc<Ctx>, out: Outbound) {
    let Outbound {
        kind,
        body,
        headers,
        ack,
    } = out;
    let session = ctx.shared.session();
    let send = || {
        let mut req = ctx
            .request(Method::POST, session.as_deref())
            .insert_header((CONTENT_TYPE, HeaderValue::from_static("application/json")))
            .insert_header((ACCEPT, HeaderValue::from_static(ACCEPT_POST)));
        for (n, v) in &headers {
            req = req.insert_header((n.clone(), v.clone()));
        }
        if !matches!(kind, OutKind::Request { .. }) {
            req = req.timeout(ctx.opts.head_timeout);
        }
        ctx.shared.stats.posts.fetch_add(1, Ordering::Relaxed);
        req.send_body(body.clone())
    };
    let res = ctx.send_dpop(send).await;
    match kind {
        OutKind::Request { id, method } => {
            if let Err(e) = request_outcome(ctx, &id, &method, res, session.is_some()).await {
                ctx.deliver(Inbound::Lost { id, error: e });
            }
        }
        OutKind::Notification { method } => {
            let r = accepted(ctx, res, session.is_some()).await;
            if let Err(e) = &r {
                tracing::debug!(%method, error = %e, "notification not accepted");
            }
            if let Some(ack) = ack {
                let _ = ack.send(r);
            }
        }
        OutKind::Response => {
            let r = accepted(ctx, res, session.is_some()).await;
            if let Err(e) = &r {
                tracing::debug!(error = %e, "our answer to a server request was not accepted");
            }
            if let Some(ack) = ack {
                let _ = ack.send(r);
            }
        }
    }
}

/// A notification's or response's POST: any 2xx is acceptance.
async fn accepted(
    ctx: &Ctx,
    res: Result<awc::ClientResponse, SendRequestError>,
    carried_session: bool,
) -> Result<(), TransportError> {
    let resp = res.map_err(|e| send_error(&e))?;
    if resp.status().is_success() {
        return Ok(());
    }
    let r = read_refusal(ctx, resp, carried_session).await;
    if r.session_ended {
        ctx.end_session(r.status);
        return Err(TransportError::SessionExpired(r.status));
    }
    Err(r.status_error(true))
}

/// A request's POST: Ok when its response (or error response) was delivered.
async fn request_outcome(
    ctx: &Arc<Ctx>,
    id: &RequestId,
    method: &str,
    res: Result<awc::ClientResponse, SendRequestError>,
    carried_session: bool,
) -> Result<(), TransportError> {
    let resp = res.map_err(|e| send_error(&e))?;
    let status = resp.status();
    if !status.is_success() {
        let r = read_refusal(ctx, resp, carried_session).await;
        if r.session_ended {
            // Not processed: the server did not know the session.
            ctx.deliver(Inbound::Lost {
                id: id.clone(),
                error: TransportError::SessionExpired(r.status),
            });
            ctx.end_session(r.status);
            return Ok(());
        }
        let auth = r.status == 401 || r.status == 403;
        return match (&r.rpc_error, auth) {
            (Some(e), false) => {
                ctx.dispatch(
                    Message::Response {
                        id: id.clone(),
                        result: Err(e.clone()),
                    },
                    Some(id),
                );
                Ok(())
            }
            _ => Err(r.status_error(auth)),
        };
    }
    if method == "initialize" {
        capture_session(ctx, &resp);
    }
    if status == StatusCode::ACCEPTED || status == StatusCode::NO_CONTENT {
        return Err(TransportError::Protocol(format!(
            "the server answered the request with HTTP {} and no response",
            status.as_u16()
        )));
    }
    if is_event_stream(&resp) {
        read_request_stream(ctx, id, resp).await
    } else {
        read_json_reply(ctx, id, resp).await
    }
}

/// A JSON answer's body, at most [`MAX_MESSAGE_BYTES`]: a large one is read into the
/// thread's spare when that is free ([`spare`]), so that it is neither grown by doubling nor
/// faulted into fresh pages, and checked as JSON as it arrives ([`JsonCheck`]).
async fn read_body(
    resp: &mut awc::ClientResponse,
) -> Result<(bytes::Bytes, Option<Checked>), PayloadError> {
    let declared = resp
        .headers()
        .get(awc::http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > MAX_MESSAGE_BYTES as u64) {
        return Err(PayloadError::Overflow);
    }
    let mut buf = spare::with_capacity(declared.unwrap_or(0) as usize);
    let mut check = JsonCheck::default();
    while let Some(chunk) = resp.next().await {
        let chunk = chunk?;
        if buf.len() + chunk.len() > MAX_MESSAGE_BYTES {
            return Err(PayloadError::Overflow);
        }
        spare::extend(&mut buf, &chunk);
        check.catch_up(&buf);
    }
    let checked = check.finish(&buf);
    Ok((spare::finish(&mut buf), checked))
}

async fn read_json_reply(
    ctx: &Arc<Ctx>,
    id: &RequestId,
    mut resp: awc::ClientResponse,
) -> Result<(), TransportError> {
    let (body, checked) = match read_body(&mut resp).await {
        Ok(b) => b,
        Err(PayloadError::Overflow) => {
            ctx.shared.stats.oversized.fetch_add(1, Ordering::Relaxed);
            return Err(TransportError::Protocol(
                "the server's answer is over the 16 MiB limit".into(),
            ));
        }
        Err(e) => {
            return Err(TransportError::Lost(format!(
                "the connection broke while reading the answer: {e}"
            )))
        }
    };
    if ctx.refuses_batch(&body) {
        return Err(TransportError::Protocol(format!(
            "the server answered with a JSON-RPC batch, which only {} allows",
            jsonrpc::BATCH_VERSION
        )));
    }
    let msgs = jsonrpc::parse_batch_checked(&body, checked.as_ref()).map_err(|e| {
        ctx.shared.stats.malformed.fetch_add(1, Ordering::Relaxed);
        let ct = content_type(&resp);
        let what = if ct.is_empty() {
            "no content type".to_owned()
        } else {
            ctx.detail(&ct)
        };
        let e = ctx.detail(&e.to_string());
        TransportError::Protocol(format!("the answer ({what}) is not JSON-RPC: {e}"))
    })?;
    let mut answered = false;
    for m in msgs {
        answered |= ctx.dispatch(m, Some(id));
    }
    if answered {
        Ok(())
    } else {
        Err(TransportError::Protocol(
            "the server's answer holds no response to the request".into(),
        ))
    }
}
