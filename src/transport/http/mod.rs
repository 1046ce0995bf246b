//! The Streamable HTTP transport, for both eras: one POST per message, a JSON body or an SSE
//! stream read until the request's response, sessions (`Mcp-Session-Id`), resumption with
//! `Last-Event-ID` and the listening GET stream (2025-11-25 era only), and cancellation by
//! closing a request's stream (how a 2026-07-28 server is told to stop).
//!
//! Shape: awc's `Client` is not `Send`, so every thread that POSTs uses a client of its own
//! (`clients`), and a request's *worker* is a local task of the thread that spawned it. A
//! *driver*, a local task on the arbiter's thread that called [`HttpTransport::start`], owns
//! the state (`Ctx`, `Send + Sync`) and spawns one worker per message and at most one
//! *listener* (the GET stream). [`HttpTransport`] itself is `Send + Sync`: it forwards
//! messages to the driver over a channel, so the client core may call it from anywhere;
//! but a request sent by a task wrapped in [`posts_here`] (a direct call on an API worker)
//! gets its worker on that task's thread, so that its POST and its answer cross no thread.
//! Order is kept: the version is set by `negotiated` before anything later is sent, then
//! `notifications/initialized` and the other notifications and answers go in order through
//! the driver.
//!
//! What reaches the client core ([`Inbound`]):
//! - every message read on any stream, except replays already handled (a bounded set of seen
//!   SSE event ids, server request ids and response ids per session);
//! - a non-2xx refusal whose body is a JSON-RPC error: that request's error response; any
//!   other refusal: `Lost { Status }` (a 401/403 always so, for the authorization code);
//! - a connection that could not be made: `Lost { Connect }` (the server did not see it);
//!   a stream that broke after sending: `Lost { Lost }` (outcome unknown);
//! - the session ended by the server: `Lost { SessionExpired }` for the request that found out
//!   and then `Closed(SessionExpired)`, so the connection is dropped and the next call dials
//!   again. A 404 for a request that carried a session id ends it, as the spec says. Real
//!   servers do not all say 404: server-everything answers an unknown or deleted session with
//!   400 and the JSON-RPC error -32000 "Bad Request: No valid session ID provided", so a 400
//!   (or 404) whose body says the session is invalid ends it too, when the request carried
//!   a session id (see [`mentions_invalid_session`]).
//!
//! Limits: a message over 16 MiB is refused both ways (a JSON body read with a limit, an SSE
//! event that grows past the cap stops being buffered at once). Secrets (configured header
//! values) are sent as sensitive headers, never logged, and scrubbed from error details;
//! the URL is never logged either (its query may hold a key). Redirects are not followed (a
//! redirect could carry configured headers to another origin): a 3xx is a refusal naming
//! where it pointed.
//!
//! Layout (one concern per file; each says what it owns and must not touch):
//! - `mod.rs`: [`HttpTransport`] (the `Send + Sync` handle and the [`Transport`] impl), the
//!   options, statistics and the state shared with the driver; it must not touch awc (the
//!   handle only sends commands to the driver);
//! - `driver`: the driver's state (`Ctx`), its command loop and shutdown;
//! - `clients`: each thread's awc client of a transport;
//! - `inbound`: what is handed to the client core (replays dropped: the seen-set);
//! - `post`: one POST and its JSON or SSE reply;
//! - `stream`: reading one SSE stream and opening a GET stream;
//! - `resume`: resuming a request's broken stream with `Last-Event-ID`;
//! - `listen`: the listening GET stream and its reopening schedule;
//! - `session`: the session id, refusals, and how failures become errors;
//! - `tests`: the transport against a scripted HTTP/1.1 server.

mod clients;
mod driver;
mod inbound;
mod listen;
mod post;
mod replies;
mod resume;
mod session;
mod stream;
#[cfg(test)]
mod tests;

pub use listen::{run_listen_schedule, ListenAttempt, ListenEnd};
pub use replies::{MAX_QUEUED_REPLIES, MAX_QUEUED_REPLY_BYTES, MAX_REPLY_POSTS};
pub use resume::resume_wait;
pub use session::mentions_invalid_session;

use super::gate::RequestLimiter;
use super::{DpopProver, InboundSink, OutKind, Outbound, Transport, TransportError, TransportKind};
use crate::protocol::era::ProtocolVersion;
use crate::protocol::jsonrpc::{RequestId, MAX_MESSAGE_BYTES};
use crate::store::settings::Secret;
use awc::http::header::{HeaderName, HeaderValue, CONTENT_TYPE};
use awc::http::Uri;
use driver::{drive, Ctx};
use inbound::Seen;
use replies::Replies;
use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;
use tokio::sync::{mpsc, watch};

pub const SESSION_HEADER: &str = "mcp-session-id";
pub const PROTOCOL_HEADER: &str = "mcp-protocol-version";
pub const LAST_EVENT_ID_HEADER: &str = "last-event-id";
const EVENT_STREAM: &str = "text/event-stream";

/// Where and how to reach one HTTP server.
#[derive(Debug, Clone)]
pub struct HttpSpec {
    pub url: url::Url,
    /// Configured headers (`Authorization: Bearer ...` included); their values are secrets.
    pub headers: Vec<(String, Secret)>,
    pub tls: Arc<rustls::ClientConfig>,
}

/// Timings and limits; the defaults are the product's, tests shorten them.
#[derive(Debug, Clone)]
pub struct HttpOptions {
    /// TCP connect (including name resolution) and, separately, the TLS handshake.
    pub connect_timeout: Duration,
    /// Simultaneous connections to the server from one thread (each open SSE stream holds
    /// one): the driver's arbiter and each API worker that POSTs directly has its own pool
    /// (`clients`).
    pub max_connections: usize,
    /// An idle pooled connection is dropped after this (below the usual 5 s of Node and
    /// uvicorn, so a reused connection is rarely one the server is closing).
    pub keep_alive: Duration,
    /// The response head of a GET, a DELETE, or a notification's POST.
    pub head_timeout: Duration,
    /// Resumption: the wait when the stream set no `retry`, the cap on `retry`, and how many
    /// resumptions in a row may bring no new event before the request is lost.
    pub resume_default_wait: Duration,
    pub resume_max_wait: Duration,
    pub resume_max_empty: u32,
    /// The listening stream: first wait, cap, and attempts in a row that hear nothing before
    /// giving up.
    pub listen_base_wait: Duration,
    pub listen_max_wait: Duration,
    pub listen_max_empty: u32,
}

impl Default for HttpOptions {
    fn default() -> Self {
        HttpOptions {
            connect_timeout: Duration::from_secs(10),
            max_connections: 64,
            keep_alive: Duration::from_secs(4),
            head_timeout: Duration::from_secs(30),
            resume_default_wait: Duration::from_millis(250),
            resume_max_wait: Duration::from_secs(30),
            resume_max_empty: 5,
            listen_base_wait: Duration::from_secs(1),
            listen_max_wait: Duration::from_secs(60),
            listen_max_empty: 8,
        }
    }
}

/// Counters, for tests and the session view.
#[derive(Debug, Default)]
pub struct HttpStats {
    pub posts: AtomicU64,
    /// Requests POSTed from the thread that sent them, not the driver's (`posts_here`).
    pub posts_here: AtomicU64,
    pub gets: AtomicU64,
    pub resumptions: AtomicU64,
    pub duplicates_dropped: AtomicU64,
    pub oversized: AtomicU64,
    pub malformed: AtomicU64,
    /// SSE event ids over 256 bytes (each ended its stream) and responses whose string id is
    /// over 256 bytes (ignored): never stored.
    pub oversized_ids: AtomicU64,
    /// JSON-RPC batches from a server that did not negotiate 2025-03-26, refused.
    pub batches_refused: AtomicU64,
    /// Server requests over the rate limit, dropped without an answer.
    pub requests_dropped: AtomicU64,
    /// Our answers to server requests dropped because too many were queued.
    pub replies_dropped: AtomicU64,
    pub listen_opens: AtomicU64,
    /// The server was seen to stall a response for our ACK; its reads now acknowledge
    /// promptly (see `tcp`).
    pub prompt_acks: Arc<AtomicBool>,
    /// Warnings about what the server sent (it is untrusted: 10 a minute).
    pub log_limit: crate::protocol::text::LogLimiter,
}

impl HttpStats {
    /// What the server sent that was not used: oversized or malformed messages and events,
    /// ids over their cap.
    pub fn ignored(&self) -> u64 {
        [
            &self.oversized,
            &self.malformed,
            &self.oversized_ids,
            &self.batches_refused,
            &self.requests_dropped,
        ]
        .iter()
        .map(|c| c.load(Ordering::Relaxed))
        .sum()
    }
}

/// Where the listening GET stream stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ListenState {
    /// Not asked for (or not in a 2025-11-25-era session).
    NotOpened,
    Opening,
    Open,
    /// Dropped; waiting to reopen.
    Waiting,
    /// The server refused it (405 or another status): closed for the connection's life.
    Refused(u16),
    /// Eight attempts in a row heard nothing.
    GaveUp,
    Closed,
}

/// HTTP transports closed whose driver has not finished its shutdown (the session's
/// `DELETE`) yet, daemon-wide.
static CLOSING: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
static CLOSED: tokio::sync::Notify = tokio::sync::Notify::const_new();

/// A driver finished the shutdown of a transport counted in [`CLOSING`].
fn closed_one() {
    if CLOSING.fetch_sub(1, Ordering::AcqRel) == 1 {
        CLOSED.notify_waiters();
    }
}

/// Wait until every HTTP transport closed so far finished its shutdown (the session's
/// `DELETE` answered or failed), at most `limit`. Answers how many had not.
pub async fn closing_settled(limit: std::time::Duration) -> usize {
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        let notified = CLOSED.notified();
        let left = CLOSING.load(Ordering::Acquire);
        if left == 0 {
            return 0;
        }
        if tokio::time::timeout_at(deadline, notified).await.is_err() {
            return CLOSING.load(Ordering::Acquire);
        }
    }
}

enum Cmd {
    Send(Outbound),
    Abort(RequestId),
    Listen,
    Close,
}

/// Shared between the `Send + Sync` handle and the local tasks.
struct Shared {
    closed: AtomicBool,
    /// This transport's close was counted in [`CLOSING`] (once).
    closing: AtomicBool,
    closed_reason: Mutex<Option<String>>,
    session: Mutex<Option<String>>,
    listen: Mutex<ListenState>,
    stats: HttpStats,
    /// The OAuth access token every request carries (`Authorization: Bearer`), replacing a
    /// configured `Authorization` header; set and changed by the caller (a sign-in, a
    /// refresh) while the transport runs.
    bearer: Mutex<Option<Secret>>,
    /// Set with a DPoP-bound token: the bearer goes as `Authorization: DPoP`, and every
    /// request carries a proof made by this.
    dpop: Mutex<Option<DpopProver>>,
    /// The server's latest `DPoP-Nonce` (RFC 9449 §9), put in every later proof.
    dpop_nonce: Mutex<Option<String>>,
}

impl Shared {
    fn set_listen(&self, s: ListenState) {
        if let Ok(mut g) = self.listen.lock() {
            *g = s;
        }
    }
    fn session(&self) -> Option<String> {
        self.session.lock().ok().and_then(|g| g.clone())
    }
    fn bearer(&self) -> Option<Secret> {
        self.bearer.lock().ok().and_then(|g| g.clone())
    }
    fn dpop(&self) -> Option<DpopProver> {
        self.dpop.lock().ok().and_then(|g| g.clone())
    }
    fn dpop_nonce(&self) -> Option<String> {
        self.dpop_nonce.lock().ok().and_then(|g| g.clone())
    }
    /// Keep a response's `DPoP-Nonce` (only while a DPoP token is in use). Answers whether
    /// it is a nonce the proofs did not carry yet.
    fn keep_dpop_nonce(&self, headers: &awc::http::header::HeaderMap) -> bool {
        if self.dpop.lock().map_or(true, |g| g.is_none()) {
            return false;
        }
        let Some(n) = headers
            .get("dpop-nonce")
            .and_then(|v| v.to_str().ok())
            .filter(|n| usable_nonce(n))
        else {
            return false;
        };
        match self.dpop_nonce.lock() {
            Ok(mut g) if g.as_deref() != Some(n) => {
                *g = Some(n.to_owned());
                true
            }
            _ => false,
        }
    }
    fn close_with(&self, reason: &str) {
        if let Ok(mut g) = self.closed_reason.lock() {
            if g.is_none() {
                *g = Some(reason.to_owned());
            }
        }
        self.closed.store(true, Ordering::Release);
    }
}

/// The most bytes of a `DPoP-Nonce` kept.
const MAX_NONCE_BYTES: usize = 256;

/// A nonce fit to be sent back in a proof: at most [`MAX_NONCE_BYTES`] of visible ASCII
/// without `"` or backslash (RFC 9449 §8.1's `NQCHAR`).
fn usable_nonce(n: &str) -> bool {
    !n.is_empty()
        && n.len() <= MAX_NONCE_BYTES
        && n.bytes()
            .all(|b| (0x21..=0x7e).contains(&b) && b != b'"' && b != b'\\')
}

/// Whether a 401's `WWW-Authenticate` asks for a DPoP nonce (RFC 9449 §9).
fn asks_for_dpop_nonce(headers: &awc::http::header::HeaderMap) -> bool {
    headers
        .get_all(awc::http::header::WWW_AUTHENTICATE)
        .filter_map(|v| v.to_str().ok())
        .any(|v| v.contains("use_dpop_nonce"))
}

/// The handle the client core holds.
pub struct HttpTransport {
    tx: mpsc::UnboundedSender<Cmd>,
    shared: Arc<Shared>,
    /// The driver's state, while the driver runs (it holds it; the handle must not, or the
    /// client core's sink inside it would keep the client that holds this handle alive).
    ctx: Weak<Ctx>,
    done: watch::Receiver<bool>,
}

thread_local! {
    /// Set while this thread polls a task that may POST from here (see [`posts_here`]).
    static POSTS_HERE: Cell<bool> = const { Cell::new(false) };
}

/// `f`, a task of this thread's `LocalSet`, whose requests to HTTP servers are POSTed from
/// this thread: while it is polled, [`Transport::send`] of an [`HttpTransport`] spawns the
/// request's worker here, with this thread's awc client for that server (`clients`), instead
/// of handing it to the driver on the connection's arbiter. So the request and its answer
/// cross no thread: the API worker that read a call writes the POST, reads the server's
/// answer and writes the API's. Only requests, and only once the version is negotiated;
/// notifications, our answers to the server's requests and the listening stream stay with the
/// driver (they keep their order there). Must only wrap a task spawned with
/// `tokio::task::spawn_local` (a worker is spawned the same way).
pub async fn posts_here<F: std::future::Future>(f: F) -> F::Output {
    struct Here(bool);
    impl Drop for Here {
        fn drop(&mut self) {
            POSTS_HERE.with(|p| p.set(self.0));
        }
    }
    let mut f = std::pin::pin!(f);
    std::future::poll_fn(|cx| {
        let _back = Here(POSTS_HERE.with(|p| p.replace(true)));
        f.as_mut().poll(cx)
    })
    .await
}

impl HttpTransport {
    /// Start the transport with the default options. Must run inside a `LocalSet` (an actix
    /// arbiter, `actix_rt::System`, `#[actix_rt::test]`); the tasks stay on that thread.
    pub fn start(
        spec: HttpSpec,
        sink: Arc<dyn InboundSink>,
    ) -> Result<Arc<HttpTransport>, TransportError> {
        Self::start_with(spec, sink, HttpOptions::default())
    }

    pub fn start_with(
        spec: HttpSpec,
        sink: Arc<dyn InboundSink>,
        opts: HttpOptions,
    ) -> Result<Arc<HttpTransport>, TransportError> {
        let uri = endpoint_uri(&spec.url)?;
        let mut headers = Vec::with_capacity(spec.headers.len());
        let mut secrets = Vec::new();
        for (name, value) in &spec.headers {
            let n = HeaderName::from_bytes(name.as_bytes()).map_err(|_| {
                TransportError::Connect(format!("the configured header name {name:?} is not valid"))
            })?;
            let mut v = HeaderValue::from_str(value.expose()).map_err(|_| {
                TransportError::Connect(format!(
                    "the configured value of header {name} is not a valid HTTP header value"
                ))
            })?;
            v.set_sensitive(true);
            headers.push((n, v));
            // The whole value, and a bearer token on its own, are scrubbed from details.
            let raw = value.expose();
            for s in [raw, raw.split_once(' ').map(|(_, t)| t).unwrap_or("")] {
                if s.len() >= 4 {
                    secrets.push(s.to_owned());
                }
            }
        }
        let stats = HttpStats::default();
        let recipe = clients::ClientRecipe {
            tls: spec.tls.clone(),
            connect_timeout: opts.connect_timeout,
            max_connections: opts.max_connections,
            keep_alive: opts.keep_alive,
            prompt_acks: stats.prompt_acks.clone(),
        };
        let shared = Arc::new(Shared {
            closed: AtomicBool::new(false),
            closing: AtomicBool::new(false),
            closed_reason: Mutex::new(None),
            session: Mutex::new(None),
            listen: Mutex::new(ListenState::NotOpened),
            stats,
            bearer: Mutex::new(None),
            dpop: Mutex::new(None),
            dpop_nonce: Mutex::new(None),
        });
        let (tx, rx) = mpsc::unbounded_channel();
        let (done_tx, done) = watch::channel(false);
        let ctx = Arc::new(Ctx {
            clients: clients::Clients::new(recipe),
            uri,
            headers,
            secrets,
            sink,
            opts,
            shared: shared.clone(),
            protocol: Mutex::new(None),
            workers: Mutex::new(Default::default()),
            next_token: AtomicU64::new(0),
            listener: Mutex::new(None),
            seen: Mutex::new(Seen::default()),
            limiter: Mutex::new(RequestLimiter::default()),
            replies: Mutex::new(Replies::default()),
            ended: AtomicBool::new(false),
        });
        let weak = Arc::downgrade(&ctx);
        tokio::task::spawn_local(async move {
            drive(ctx, rx).await;
            let _ = done_tx.send(true);
        });
        Ok(Arc::new(HttpTransport {
            tx,
            shared,
            ctx: weak,
            done,
        }))
    }

    /// The OAuth access token (the bare token, without `Bearer `) every later request
    /// carries as `Authorization: Bearer <token>`, in place of a configured `Authorization`
    /// header; `None` stops sending it. Requests already sent are not changed. It is a
    /// secret: sent as a sensitive header and scrubbed from error details.
    pub fn set_bearer(&self, token: Option<Secret>) -> Result<(), TransportError> {
        if let Some(t) = &token {
            HeaderValue::from_str(&format!("Bearer {}", t.expose())).map_err(|_| {
                TransportError::Connect("the access token is not a valid HTTP header value".into())
            })?;
        }
        if let Ok(mut g) = self.shared.dpop.lock() {
            *g = None;
        }
        if let Ok(mut g) = self.shared.bearer.lock() {
            *g = token;
        }
        Ok(())
    }

    /// A DPoP-bound access token (RFC 9449 §7): every later request carries
    /// `Authorization: DPoP <token>` and a fresh `DPoP` proof made by `prover` for its method
    /// (with the server's latest `DPoP-Nonce`). A POST refused with 401 and
    /// `WWW-Authenticate: DPoP error="use_dpop_nonce"` and a new `DPoP-Nonce` is sent once
    /// more with that nonce: the server refused it unrun. [`set_bearer`](Self::set_bearer)
    /// goes back to a bearer token.
    pub fn set_dpop(&self, token: Secret, prover: DpopProver) -> Result<(), TransportError> {
        self.set_bearer(Some(token))?;
        if let Ok(mut g) = self.shared.dpop.lock() {
            *g = Some(prover);
        }
        Ok(())
    }

    /// The session id the server gave (2025-11-25 era), if any.
    pub fn session_id(&self) -> Option<String> {
        self.shared.session()
    }

    pub fn listen_state(&self) -> ListenState {
        self.shared
            .listen
            .lock()
            .map(|g| *g)
            .unwrap_or(ListenState::Closed)
    }

    pub fn stats(&self) -> &HttpStats {
        &self.shared.stats
    }

    /// Wait until the transport has shut down after `close` (its `DELETE` sent or failed).
    pub async fn wait_closed(&self) {
        let mut done = self.done.clone();
        let _ = done.wait_for(|d| *d).await;
    }

    fn closed_error(&self) -> TransportError {
        let reason = self
            .shared
            .closed_reason
            .lock()
            .ok()
            .and_then(|g| g.clone())
            .unwrap_or_else(|| "the connection was closed".to_owned());
        TransportError::Closed(reason)
    }
}

fn endpoint_uri(url: &url::Url) -> Result<Uri, TransportError> {
    match url.scheme() {
        "http" | "https" => {}
        other => {
            return Err(TransportError::Connect(format!(
                "the server URL must be http or https, not {other}"
            )))
        }
    }
    if url.host_str().is_none() {
        return Err(TransportError::Connect("the server URL has no host".into()));
    }
    let mut u = url.clone();
    // A fragment is never sent.
    u.set_fragment(None);
    u.as_str()
        .parse::<Uri>()
        .map_err(|_| TransportError::Connect("the server URL is not a valid HTTP URI".into()))
}

impl Transport for HttpTransport {
    fn kind(&self) -> TransportKind {
        TransportKind::Http
    }

    fn set_bearer(&self, token: Option<Secret>) -> Result<(), TransportError> {
        HttpTransport::set_bearer(self, token)
    }

    fn set_dpop(&self, token: Secret, prover: DpopProver) -> Result<(), TransportError> {
        HttpTransport::set_dpop(self, token, prover)
    }

    fn send(&self, msg: Outbound) -> Result<(), TransportError> {
        if self.shared.closed.load(Ordering::Acquire) {
            return Err(self.closed_error());
        }
        if msg.body.len() > MAX_MESSAGE_BYTES {
            return Err(TransportError::TooLarge(format!(
                "the message is {} bytes, over the 16 MiB limit",
                msg.body.len()
            )));
        }
        // A request of a task that POSTs from its own thread (`posts_here`), once the version
        // is negotiated.
        let here = POSTS_HERE.with(Cell::get) && matches!(msg.kind, OutKind::Request { .. });
        let negotiated = |ctx: &Arc<Ctx>| driver::lock(&ctx.protocol).is_some();
        if let Some(ctx) = here
            .then(|| self.ctx.upgrade())
            .flatten()
            .filter(negotiated)
        {
            return match ctx.start_worker(msg) {
                Ok(()) => {
                    ctx.shared.stats.posts_here.fetch_add(1, Ordering::Relaxed);
                    Ok(())
                }
                Err(_) => Err(self.closed_error()),
            };
        }
        self.tx
            .send(Cmd::Send(msg))
            .map_err(|_| self.closed_error())
    }

    fn abort(&self, id: &RequestId) {
        let _ = self.tx.send(Cmd::Abort(id.clone()));
    }

    fn negotiated(&self, version: &ProtocolVersion) {
        // Set here, not through the driver: every message handed over from now on carries
        // it, on whichever thread it is POSTed.
        if let Some(ctx) = self.ctx.upgrade() {
            *driver::lock(&ctx.protocol) = Some(version.clone());
        }
    }

    fn open_listen_stream(&self) {
        let _ = self.tx.send(Cmd::Listen);
    }

    fn close(&self) {
        self.shared.close_with("the connection was closed");
        // Counted here, synchronously, so that a daemon shutting down that closed every
        // connection can wait for the DELETEs their drivers then send.
        if !self.shared.closing.swap(true, Ordering::AcqRel) {
            CLOSING.fetch_add(1, Ordering::AcqRel);
            if self.tx.send(Cmd::Close).is_err() {
                closed_one();
            }
        }
    }

    fn ignored_messages(&self) -> u64 {
        self.shared.stats.ignored()
    }
}

impl Drop for HttpTransport {
    fn drop(&mut self) {
        self.close();
    }
}

/// The media type of a response, before any parameter, as sent ("" when absent).
fn media_type(resp: &awc::ClientResponse) -> &str {
    resp.headers()
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|s| s.split(';').next())
        .map(str::trim)
        .unwrap_or_default()
}

/// The media type in lower case, for messages.
fn content_type(resp: &awc::ClientResponse) -> String {
    media_type(resp).to_ascii_lowercase()
}

/// Whether a response is an event stream (media types are case-insensitive), without
/// copying the header on every POST.
fn is_event_stream(resp: &awc::ClientResponse) -> bool {
    media_type(resp).eq_ignore_ascii_case(EVENT_STREAM)
}
