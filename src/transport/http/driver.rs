//! The driver: the state of one HTTP transport (`Ctx`: the endpoint, configured headers, the
//! negotiated version, the request workers and the listener; `Send + Sync`, so that a request
//! worker may run on another thread, see [`super::posts_here`]), the command loop on the
//! arbiter's thread that spawns a worker per message (our answers to the server's requests go
//! to `replies` instead), the shutdown (`DELETE` of the session), and closing the connection
//! when the server goes past a bound (`Ctx::overrun`).
//!
//! Owns: `Ctx`, the command loop, shutdown, overrun. Must not touch: what a POST or a stream reads
//! (`post`, `stream`, `resume`, `listen`), nor how messages reach the client core (`inbound`),
//! nor which awc client a thread uses (`clients`).

use super::clients::Clients;
use super::inbound::Seen;
use super::listen::start_listener;
use super::post::post;
use super::replies::{queue_reply, Replies};
use super::session::send_error;
use super::{Cmd, HttpOptions, ListenState, Shared, PROTOCOL_HEADER, SESSION_HEADER};
use crate::protocol::era::{Era, ProtocolVersion};
use crate::protocol::jsonrpc::{self, RequestId};
use crate::transport::gate::RequestLimiter;
use crate::transport::Outbound;
use crate::transport::{Inbound, InboundSink, OutKind, TransportError};
use awc::http::header::{HeaderName, HeaderValue, AUTHORIZATION};
use awc::http::{Method, StatusCode, Uri};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

/// A lock on a table of the driver's state. A panic while one was held leaves it as the last
/// statement left it (each lock is held for one statement's change), so it is used as it is.
pub(super) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The driver's state, shared by the driver and the request workers on any thread. No lock is
/// held across an `await` or while a message is handed to the client core.
pub(super) struct Ctx {
    /// Each thread's awc client for this transport (`clients`).
    pub(super) clients: Clients,
    pub(super) uri: Uri,
    pub(super) headers: Vec<(HeaderName, HeaderValue)>,
    pub(super) secrets: Vec<String>,
    pub(super) sink: Arc<dyn InboundSink>,
    pub(super) opts: HttpOptions,
    pub(super) shared: Arc<Shared>,
    pub(super) protocol: Mutex<Option<ProtocolVersion>>,
    /// Request workers by request id, with a token so a worker removes only itself.
    pub(super) workers: Mutex<crate::fastmap::FastMap<RequestId, (u64, JoinHandle<()>)>>,
    pub(super) next_token: AtomicU64,
    pub(super) listener: Mutex<Option<JoinHandle<()>>>,
    pub(super) seen: Mutex<Seen>,
    /// How many of the server's requests are answered (`inbound`).
    pub(super) limiter: Mutex<RequestLimiter>,
    /// Our answers waiting to be POSTed (`replies`).
    pub(super) replies: Mutex<Replies>,
    /// The session ended (its `Closed` was delivered).
    pub(super) ended: AtomicBool,
}

impl Ctx {
    pub(super) fn legacy(&self) -> bool {
        matches!(&*lock(&self.protocol), Some(p) if p.era == Era::Legacy)
    }

    pub(super) fn legacy_version(&self) -> Option<String> {
        match &*lock(&self.protocol) {
            Some(p) if p.era == Era::Legacy => Some(p.version.clone()),
            _ => None,
        }
    }

    /// Whether the server may send JSON-RPC batches: it negotiated 2025-03-26.
    pub(super) fn batches_allowed(&self) -> bool {
        jsonrpc::batches_allowed(lock(&self.protocol).as_ref().map(|p| p.version.as_str()))
    }

    /// The server went past a bound kept against it: close the connection (the requests in
    /// flight end with an unknown outcome; the session is deleted when the handle goes).
    pub(super) fn overrun(&self, reason: &str) {
        if self.shared.closed.load(Ordering::Acquire) {
            return;
        }
        tracing::warn!(reason, "closing the connection to the HTTP server");
        self.shared.close_with(reason);
        let listener = lock(&self.listener).take();
        if let Some(h) = listener {
            h.abort();
        }
        self.shared.set_listen(ListenState::Closed);
        lock(&self.replies).clear();
        self.deliver(Inbound::Closed(TransportError::Overrun(reason.to_owned())));
        let workers: Vec<_> = lock(&self.workers).drain().collect();
        for (_, (_, h)) in workers {
            h.abort();
        }
    }

    /// A request with the configured headers, the session id and (legacy era) the version.
    pub(super) fn request(&self, method: Method, session: Option<&str>) -> awc::ClientRequest {
        let client = self.clients.here(&self.shared);
        let mut req = client.request(method.clone(), self.uri.clone());
        for (n, v) in &self.headers {
            req = req.insert_header((n.clone(), v.clone()));
        }
        if let Some(token) = self.shared.bearer() {
            let dpop = self.shared.dpop();
            let scheme = if dpop.is_some() { "DPoP" } else { "Bearer" };
            if let Ok(mut v) = HeaderValue::from_str(&format!("{scheme} {}", token.expose())) {
                v.set_sensitive(true);
                req = req.insert_header((AUTHORIZATION, v));
            }
            // A fresh proof per request (RFC 9449 §7.1), for its method, with the nonce.
            let proof = dpop.and_then(|p| p(method.as_str(), self.shared.dpop_nonce().as_deref()));
            if let Some(proof) = proof {
                if let Ok(mut v) = HeaderValue::from_str(&proof) {
                    v.set_sensitive(true);
                    req = req.insert_header((HeaderName::from_static("dpop"), v));
                }
            }
        }
        if let Some(s) = session {
            req = req.insert_header((SESSION_HEADER, s));
        }
        if let Some(v) = self.legacy_version() {
            req = req.insert_header((PROTOCOL_HEADER, v));
        }
        req
    }

    /// Send a request made by `send` (POST, GET or DELETE). Under a DPoP token (RFC 9449 §9)
    /// a `DPoP-Nonce` the server gives is used from then on, and a 401 that asks for one
    /// (`use_dpop_nonce`) with a nonce the proof did not carry refused the request unrun: it is
    /// made and sent once more, with that nonce.
    pub(super) async fn send_dpop<F, Fut, S, E>(&self, send: F) -> Result<awc::ClientResponse<S>, E>
    where
        F: Fn() -> Fut,
        Fut: std::future::Future<Output = Result<awc::ClientResponse<S>, E>>,
    {
        let res = send().await;
        if let Ok(resp) = &res {
            let fresh = self.shared.keep_dpop_nonce(resp.headers());
            if fresh
                && resp.status() == StatusCode::UNAUTHORIZED
                && super::asks_for_dpop_nonce(resp.headers())
            {
                let again = send().await;
                if let Ok(resp) = &again {
                    self.shared.keep_dpop_nonce(resp.headers());
                }
                return again;
            }
        }
        res
    }

    pub(super) fn deliver(&self, ev: Inbound) {
        self.sink.deliver(ev);
    }

    pub(super) fn remove_worker(&self, id: &RequestId, token: u64) {
        let mut w = lock(&self.workers);
        if matches!(w.get(id), Some((t, _)) if *t == token) {
            w.remove(id);
        }
    }

    /// Spawn the worker that POSTs `out` on this thread (a task of its `LocalSet`), and keep a
    /// request's worker by its id (for `Abort`, a replay's answer, a close). Refused when the
    /// transport closed: checked under the workers' lock, so a close that comes later finds
    /// the worker and aborts it.
    pub(super) fn start_worker(self: &Arc<Self>, out: Outbound) -> Result<(), Outbound> {
        let request_id = match &out.kind {
            OutKind::Request { id, .. } => Some(id.clone()),
            _ => None,
        };
        let mut workers = lock(&self.workers);
        if self.shared.closed.load(Ordering::Acquire) {
            return Err(out);
        }
        let token = self.next_token.fetch_add(1, Ordering::Relaxed);
        let c = self.clone();
        let id = request_id.clone();
        let h = tokio::task::spawn_local(async move {
            post(&c, out).await;
            if let Some(id) = id {
                c.remove_worker(&id, token);
            }
        });
        if let Some(id) = request_id {
            workers.insert(id, (token, h));
        }
        Ok(())
    }
}

pub(super) async fn drive(ctx: Arc<Ctx>, mut rx: mpsc::UnboundedReceiver<Cmd>) {
    while let Some(cmd) = rx.recv().await {
        match cmd {
            Cmd::Send(out) => {
                if ctx.shared.closed.load(Ordering::Acquire) {
                    if let Some(ack) = out.ack {
                        let _ = ack.send(Err(TransportError::Closed(
                            "the connection was closed".into(),
                        )));
                    }
                    continue;
                }
                if matches!(out.kind, OutKind::Response) {
                    queue_reply(&ctx, out);
                    continue;
                }
                if let Err(out) = ctx.start_worker(out) {
                    if let Some(ack) = out.ack {
                        let _ = ack.send(Err(TransportError::Closed(
                            "the connection was closed".into(),
                        )));
                    }
                }
            }
            Cmd::Abort(id) => {
                let w = lock(&ctx.workers).remove(&id);
                if let Some((_, h)) = w {
                    tracing::debug!(%id, "request aborted: its stream is closed");
                    h.abort();
                }
            }
            Cmd::Listen => start_listener(&ctx),
            Cmd::Close => break,
        }
    }
    shutdown(&ctx).await;
    ctx.clients.forget_everywhere();
}

async fn shutdown(ctx: &Arc<Ctx>) {
    // However it ends, a close counted by `HttpTransport::close` is settled here.
    struct Settle<'a>(&'a Ctx);
    impl Drop for Settle<'_> {
        fn drop(&mut self) {
            if self.0.shared.closing.swap(false, Ordering::AcqRel) {
                super::closed_one();
            }
        }
    }
    let _settle = Settle(ctx);
    ctx.shared.close_with("the connection was closed");
    let listener = lock(&ctx.listener).take();
    if let Some(h) = listener {
        h.abort();
    }
    ctx.shared.set_listen(ListenState::Closed);
    lock(&ctx.replies).clear();
    let workers: Vec<_> = lock(&ctx.workers).drain().collect();
    for (_, (_, h)) in workers {
        h.abort();
    }
    if ctx.ended.load(Ordering::Acquire) {
        return;
    }
    let Some(session) = ctx.shared.session() else {
        return;
    };
    let send = || {
        ctx.request(Method::DELETE, Some(&session))
            .timeout(ctx.opts.head_timeout)
            .send()
    };
    match ctx.send_dpop(send).await {
        Ok(r) if r.status().is_success() => tracing::debug!("session deleted"),
        Ok(r) if r.status() == StatusCode::METHOD_NOT_ALLOWED => {
            tracing::debug!("the server does not let clients delete sessions (405)")
        }
        Ok(r) => tracing::debug!(
            status = r.status().as_u16(),
            "DELETE of the session refused"
        ),
        Err(e) => tracing::debug!(error = %send_error(&e), "DELETE of the session failed"),
    }
}
