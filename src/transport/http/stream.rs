//! Reading one SSE stream (a request's, a resumed one, or the listening stream) and handing
//! what it brings to `inbound`, with the event cap; opening a GET stream; draining a stream
//! after its answer so its connection is reused.
//!
//! Owns: `read_stream`, `open_get`, `drain`. Must not touch: when to resume or reopen (that is
//! `resume` and `listen`), the driver's tables.

use super::driver::Ctx;
use super::inbound::{deliver_data, SeenKey};
use super::session::{read_refusal, send_error, Refusal};
use super::{content_type, is_event_stream, EVENT_STREAM, LAST_EVENT_ID_HEADER};
use crate::protocol::jsonrpc::{RequestId, MAX_MESSAGE_BYTES};
use crate::transport::sse::{SseItem, SseParser, MAX_EVENT_ID_BYTES};
use crate::transport::TransportError;
use awc::http::header::ACCEPT;
use awc::http::Method;
use futures_util::StreamExt;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

/// How long, and how much, a stream is read after its answer, to reuse its connection.
const DRAIN_TIME: Duration = Duration::from_millis(500);
const DRAIN_BYTES: usize = 64 * 1024;

/// How reading one SSE stream ended.
pub(super) enum StreamEnd {
    /// The awaited response arrived.
    Answered,
    /// The stream ended or broke; `progress` says whether it brought a new event, `heard`
    /// whether it brought any event at all.
    Over {
        broke: Option<String>,
        progress: bool,
        heard: bool,
    },
}

/// After its answer a stream should end: read what is left (briefly, a little) so that its
/// connection goes back to the pool rather than being closed (a new TLS handshake per call
/// otherwise).
pub(super) async fn drain(resp: &mut awc::ClientResponse) {
    let _ = tokio::time::timeout(DRAIN_TIME, async {
        let mut left = DRAIN_BYTES;
        while let Some(Ok(c)) = resp.next().await {
            if c.len() >= left {
                return;
            }
            left -= c.len();
        }
    })
    .await;
}

/// Read one SSE stream to its end, delivering what it brings.
pub(super) async fn read_stream(
    ctx: &Arc<Ctx>,
    resp: &mut awc::ClientResponse,
    awaited: Option<&RequestId>,
    last_id: &mut Option<String>,
    retry: &mut Option<Duration>,
) -> Result<StreamEnd, TransportError> {
    let mut parser = SseParser::new(MAX_MESSAGE_BYTES);
    let mut progress = false;
    let mut heard = false;
    loop {
        let chunk = match resp.next().await {
            Some(Ok(c)) => c,
            Some(Err(e)) => {
                return Ok(StreamEnd::Over {
                    broke: Some(e.to_string()),
                    progress,
                    heard,
                })
            }
            None => {
                return Ok(StreamEnd::Over {
                    broke: None,
                    progress,
                    heard,
                })
            }
        };
        parser.feed(&chunk);
        if let Some(r) = parser.retry() {
            *retry = Some(r);
        }
        while let Some(item) = parser.next_item() {
            match item {
                SseItem::OversizedId(n) => {
                    // Never kept: the stream ends here (it cannot be resumed without its id).
                    ctx.shared
                        .stats
                        .oversized_ids
                        .fetch_add(1, Ordering::Relaxed);
                    let why = format!(
                        "an event id of {n} bytes, over the {MAX_EVENT_ID_BYTES}-byte limit, ended the stream"
                    );
                    if awaited.is_some() {
                        return Err(TransportError::Protocol(why));
                    }
                    tracing::warn!("{why}");
                    return Ok(StreamEnd::Over {
                        broke: Some(why),
                        progress,
                        heard,
                    });
                }
                SseItem::Oversized(n) => {
                    heard = true;
                    ctx.shared.stats.oversized.fetch_add(1, Ordering::Relaxed);
                    if awaited.is_some() {
                        return Err(TransportError::Protocol(format!(
                            "an event of the server's answer is over the 16 MiB limit ({n} bytes so far)"
                        )));
                    }
                    tracing::warn!(
                        limit = MAX_MESSAGE_BYTES,
                        "an event on the listening stream is over the 16 MiB limit; dropped"
                    );
                }
                SseItem::Event(ev) => {
                    heard = true;
                    if let Some(eid) = ev.id.as_deref().filter(|s| !s.is_empty()) {
                        *last_id = Some(eid.to_owned());
                        if !super::driver::lock(&ctx.seen).insert(SeenKey::event(eid)) {
                            ctx.shared
                                .stats
                                .duplicates_dropped
                                .fetch_add(1, Ordering::Relaxed);
                            continue;
                        }
                        progress = true;
                    }
                    if ev.data.is_empty() {
                        continue; // a priming event
                    }
                    if !matches!(ev.event.as_deref(), None | Some("message")) {
                        continue;
                    }
                    progress = true;
                    if deliver_data(ctx, &ev.data, ev.checked.as_ref(), awaited) {
                        return Ok(StreamEnd::Answered);
                    }
                }
            }
        }
    }
}

pub(super) enum GetOpen {
    Stream(awc::ClientResponse),
    /// Could not connect, or no head in time.
    Failed(TransportError),
    Refused(Refusal),
}

/// Open a GET stream (a resumption with `Last-Event-ID`, or the listening stream).
pub(super) async fn open_get(ctx: &Ctx, last_event_id: Option<&str>) -> GetOpen {
    let session = ctx.shared.session();
    let send = || {
        let mut req = ctx
            .request(Method::GET, session.as_deref())
            .insert_header((ACCEPT, EVENT_STREAM))
            .timeout(ctx.opts.head_timeout);
        if let Some(l) = last_event_id {
            req = req.insert_header((LAST_EVENT_ID_HEADER, l));
        }
        ctx.shared.stats.gets.fetch_add(1, Ordering::Relaxed);
        req.send()
    };
    match ctx.send_dpop(send).await {
        Err(e) => GetOpen::Failed(send_error(&e)),
        Ok(resp) if resp.status().is_success() => {
            if is_event_stream(&resp) {
                GetOpen::Stream(resp)
            } else {
                GetOpen::Refused(Refusal {
                    status: resp.status().as_u16(),
                    rpc_error: None,
                    detail: format!(
                        "a GET answered with {:?}, not an event stream",
                        ctx.detail(&content_type(&resp))
                    ),
                    www_authenticate: None,
                    session_ended: false,
                })
            }
        }
        Ok(resp) => GetOpen::Refused(read_refusal(ctx, resp, session.is_some()).await),
    }
}
