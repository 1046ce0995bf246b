//! The Streamable HTTP transport, for both eras: one POST per message, a JSON body or an SSE
//! stream read until the request's response, sessions (`Mcp-Session-Id`), resumption with
//! `Last-Event-ID` and the listening GET stream (2025-11-25 era only), and cancellation by
//! closing a request's stream (how a 2026-07-28 server is told to stop).
//!
//! Shape: awc's `Client` is not `Send`, so everything that touches it runs as local tasks on
//! the arbiter's thread that called [`HttpTransport::start`]: a *driver* owns the state and
//! the client, and spawns one *worker* per message and at most one *listener* (the GET
//! stream). [`HttpTransport`] itself is `Send + Sync`: it forwards commands to the driver over
//! a channel, so the client core may call it from anywhere. Order is kept: `negotiated`,
//! then `notifications/initialized`, then requests.
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

use super::sse::{SseItem, SseParser};
use super::{Inbound, InboundSink, OutKind, Outbound, Transport, TransportError, TransportKind};
use crate::protocol::backoff::Backoff as ListenBackoff;
use crate::protocol::era::{Era, ProtocolVersion};
use crate::protocol::jsonrpc::{self, ErrorObject, Message, RequestId, MAX_MESSAGE_BYTES};
use crate::store::settings::Secret;
use awc::error::{ConnectError, PayloadError, SendRequestError};
use awc::http::header::{
    HeaderName, HeaderValue, ACCEPT, CONTENT_TYPE, LOCATION, WWW_AUTHENTICATE,
};
use awc::http::{Method, StatusCode, Uri};
use bytes::Bytes;
use futures_util::StreamExt;
use std::cell::{Cell, RefCell};
use std::collections::{HashMap, HashSet, VecDeque};
use std::future::Future;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;

pub const SESSION_HEADER: &str = "mcp-session-id";
pub const PROTOCOL_HEADER: &str = "mcp-protocol-version";
pub const LAST_EVENT_ID_HEADER: &str = "last-event-id";
const ACCEPT_POST: &str = "application/json, text/event-stream";
const EVENT_STREAM: &str = "text/event-stream";
/// How much of a refusal's body is read (for its JSON-RPC error and a detail line).
const REFUSAL_BODY_LIMIT: usize = 64 * 1024;
/// The longest detail kept from a refusal's body.
const DETAIL_CHARS: usize = 200;
/// How long, and how much, a stream is read after its answer, to reuse its connection.
const DRAIN_TIME: Duration = Duration::from_millis(500);
const DRAIN_BYTES: usize = 64 * 1024;
/// How many seen ids (events, server requests, responses) are kept per session.
const SEEN_CAPACITY: usize = 4096;

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
    /// Simultaneous connections to the server (each open SSE stream holds one).
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
    pub gets: AtomicU64,
    pub resumptions: AtomicU64,
    pub duplicates_dropped: AtomicU64,
    pub oversized: AtomicU64,
    pub malformed: AtomicU64,
    pub listen_opens: AtomicU64,
    /// The server was seen to stall a response for our ACK; its reads now acknowledge
    /// promptly (see `tcp`).
    pub prompt_acks: Arc<AtomicBool>,
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

/// The wait before a resumption GET: the stream's `retry`, else the default, at most the cap.
pub fn resume_wait(retry: Option<Duration>, default: Duration, cap: Duration) -> Duration {
    retry.unwrap_or(default).min(cap)
}

/// The listening stream's schedule with this transport's options.
fn listen_backoff(o: &HttpOptions) -> ListenBackoff {
    ListenBackoff::new(o.listen_base_wait, o.listen_max_wait, o.listen_max_empty)
}

/// How one attempt of the listening stream ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ListenAttempt {
    /// The stream was open (or could not be opened) and is gone; `heard` says whether it
    /// brought any event; `retry` is the last `retry` the server set.
    Dropped {
        heard: bool,
        retry: Option<Duration>,
    },
    /// A refusal: closed for the connection's life.
    Refused(u16),
    /// The session is gone.
    SessionEnded(u16),
}

/// How the listening stream ended for good.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ListenEnd {
    Refused(u16),
    SessionEnded(u16),
    GaveUp,
}

/// Run the listening stream's attempts with the reopening schedule until it ends for good
/// (or the task is aborted). `attempt` opens one stream and reads it to its end. Separate
/// from the HTTP code so the schedule can be tested with paused time.
pub async fn run_listen_schedule<F, Fut>(
    mut backoff: ListenBackoff,
    mut attempt: F,
    mut on_wait: impl FnMut(Duration),
) -> ListenEnd
where
    F: FnMut() -> Fut,
    Fut: Future<Output = ListenAttempt>,
{
    loop {
        match attempt().await {
            ListenAttempt::Refused(s) => return ListenEnd::Refused(s),
            ListenAttempt::SessionEnded(s) => return ListenEnd::SessionEnded(s),
            ListenAttempt::Dropped { heard, retry } => match backoff.next_wait(heard, retry) {
                Some(wait) => {
                    on_wait(wait);
                    tokio::time::sleep(wait).await;
                }
                None => return ListenEnd::GaveUp,
            },
        }
    }
}

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

enum Cmd {
    Send(Outbound),
    Abort(RequestId),
    Negotiated(ProtocolVersion),
    Listen,
    Close,
}

/// Shared between the `Send + Sync` handle and the local tasks.
struct Shared {
    closed: AtomicBool,
    closed_reason: Mutex<Option<String>>,
    session: Mutex<Option<String>>,
    listen: Mutex<ListenState>,
    stats: HttpStats,
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
    fn close_with(&self, reason: &str) {
        if let Ok(mut g) = self.closed_reason.lock() {
            if g.is_none() {
                *g = Some(reason.to_owned());
            }
        }
        self.closed.store(true, Ordering::Release);
    }
}

/// The handle the client core holds.
pub struct HttpTransport {
    tx: mpsc::UnboundedSender<Cmd>,
    shared: Arc<Shared>,
    done: watch::Receiver<bool>,
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
        let connector = awc::Connector::new()
            .connector(super::tcp::PromptAckConnector::new(
                stats.prompt_acks.clone(),
            ))
            .rustls_0_23(spec.tls.clone())
            .timeout(opts.connect_timeout)
            .handshake_timeout(opts.connect_timeout)
            .limit(opts.max_connections)
            .conn_keep_alive(opts.keep_alive);
        let client = awc::Client::builder()
            .connector(connector)
            .disable_timeout()
            .disable_redirects()
            .finish();
        let shared = Arc::new(Shared {
            closed: AtomicBool::new(false),
            closed_reason: Mutex::new(None),
            session: Mutex::new(None),
            listen: Mutex::new(ListenState::NotOpened),
            stats,
        });
        let (tx, rx) = mpsc::unbounded_channel();
        let (done_tx, done) = watch::channel(false);
        let ctx = Rc::new(Ctx {
            client,
            uri,
            headers,
            secrets,
            sink,
            opts,
            shared: shared.clone(),
            protocol: RefCell::new(None),
            workers: RefCell::new(HashMap::new()),
            next_token: Cell::new(0),
            listener: RefCell::new(None),
            seen: RefCell::new(Seen::default()),
            ended: Cell::new(false),
        });
        tokio::task::spawn_local(async move {
            drive(ctx, rx).await;
            let _ = done_tx.send(true);
        });
        Ok(Arc::new(HttpTransport { tx, shared, done }))
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
        self.tx
            .send(Cmd::Send(msg))
            .map_err(|_| self.closed_error())
    }

    fn abort(&self, id: &RequestId) {
        let _ = self.tx.send(Cmd::Abort(id.clone()));
    }

    fn negotiated(&self, version: &ProtocolVersion) {
        let _ = self.tx.send(Cmd::Negotiated(version.clone()));
    }

    fn open_listen_stream(&self) {
        let _ = self.tx.send(Cmd::Listen);
    }

    fn close(&self) {
        self.shared.close_with("the connection was closed");
        let _ = self.tx.send(Cmd::Close);
    }
}

impl Drop for HttpTransport {
    fn drop(&mut self) {
        self.close();
    }
}

/// Ids already handled in this session, bounded (oldest forgotten first).
#[derive(Default)]
struct Seen {
    set: HashSet<String>,
    order: VecDeque<String>,
}

impl Seen {
    /// True when `key` is new.
    fn insert(&mut self, key: String) -> bool {
        if self.set.contains(&key) {
            return false;
        }
        if self.order.len() >= SEEN_CAPACITY {
            if let Some(old) = self.order.pop_front() {
                self.set.remove(&old);
            }
        }
        self.set.insert(key.clone());
        self.order.push_back(key);
        true
    }
}

/// The driver's state, on the arbiter's thread.
struct Ctx {
    client: awc::Client,
    uri: Uri,
    headers: Vec<(HeaderName, HeaderValue)>,
    secrets: Vec<String>,
    sink: Arc<dyn InboundSink>,
    opts: HttpOptions,
    shared: Arc<Shared>,
    protocol: RefCell<Option<ProtocolVersion>>,
    /// Request workers by request id, with a token so a worker removes only itself.
    workers: RefCell<HashMap<RequestId, (u64, JoinHandle<()>)>>,
    next_token: Cell<u64>,
    listener: RefCell<Option<JoinHandle<()>>>,
    seen: RefCell<Seen>,
    /// The session ended (its `Closed` was delivered).
    ended: Cell<bool>,
}

impl Ctx {
    fn legacy(&self) -> bool {
        matches!(&*self.protocol.borrow(), Some(p) if p.era == Era::Legacy)
    }

    fn legacy_version(&self) -> Option<String> {
        match &*self.protocol.borrow() {
            Some(p) if p.era == Era::Legacy => Some(p.version.clone()),
            _ => None,
        }
    }

    /// A request with the configured headers, the session id and (legacy era) the version.
    fn request(&self, method: Method, session: Option<&str>) -> awc::ClientRequest {
        let mut req = self.client.request(method, self.uri.clone());
        for (n, v) in &self.headers {
            req = req.insert_header((n.clone(), v.clone()));
        }
        if let Some(s) = session {
            req = req.insert_header((SESSION_HEADER, s));
        }
        if let Some(v) = self.legacy_version() {
            req = req.insert_header((PROTOCOL_HEADER, v));
        }
        req
    }

    fn detail(&self, text: &str) -> String {
        scrub_detail(text, &self.secrets)
    }

    fn deliver(&self, ev: Inbound) {
        self.sink.deliver(ev);
    }

    /// Hand one message to the client core, dropping replays. Returns true when it is (or
    /// repeats) the response to `awaited`.
    fn dispatch(&self, msg: Message, awaited: Option<&RequestId>) -> bool {
        let key = match &msg {
            Message::Request { id, .. } => Some(format!("q:{}", id_key(id))),
            Message::Response { id, .. } => Some(format!("r:{}", id_key(id))),
            _ => None,
        };
        let is_awaited =
            matches!((&msg, awaited), (Message::Response { id, .. }, Some(a)) if id == a);
        if let Some(k) = key {
            if !self.seen.borrow_mut().insert(k) {
                self.shared
                    .stats
                    .duplicates_dropped
                    .fetch_add(1, Ordering::Relaxed);
                return is_awaited;
            }
        }
        let other_response = match &msg {
            Message::Response { id, .. } if !is_awaited => Some(id.clone()),
            _ => None,
        };
        self.deliver(Inbound::Message(msg));
        if let Some(id) = other_response {
            // Its answer came on another stream (a replay): its own worker can stop.
            let w = self.workers.borrow_mut().remove(&id);
            if let Some((_, h)) = w {
                h.abort();
            }
        }
        is_awaited
    }

    /// The server ended the session: tell the client core once, stop everything.
    fn end_session(&self, status: u16) {
        if self.ended.replace(true) {
            return;
        }
        tracing::info!(status, "the server ended the MCP session");
        self.shared
            .close_with(&format!("the server ended the session (HTTP {status})"));
        if let Some(h) = self.listener.borrow_mut().take() {
            h.abort();
        }
        self.shared.set_listen(ListenState::Closed);
        self.deliver(Inbound::Closed(TransportError::SessionExpired(status)));
        let workers: Vec<_> = self.workers.borrow_mut().drain().collect();
        for (_, (_, h)) in workers {
            h.abort();
        }
    }

    fn remove_worker(&self, id: &RequestId, token: u64) {
        let mut w = self.workers.borrow_mut();
        if matches!(w.get(id), Some((t, _)) if *t == token) {
            w.remove(id);
        }
    }
}

/// Remove secrets and line breaks from text meant for an error, and shorten it.
fn scrub_detail(text: &str, secrets: &[String]) -> String {
    let mut s = text.to_owned();
    for secret in secrets {
        if s.contains(secret.as_str()) {
            s = s.replace(secret.as_str(), "***");
        }
    }
    let s = s
        .split(|c: char| c.is_whitespace() || c.is_control())
        .filter(|w| !w.is_empty())
        .collect::<Vec<_>>()
        .join(" ");
    if s.chars().count() > DETAIL_CHARS {
        let mut t: String = s.chars().take(DETAIL_CHARS).collect();
        t.push('…');
        t
    } else {
        s
    }
}

fn id_key(id: &RequestId) -> String {
    match id {
        RequestId::Number(n) => format!("n{n}"),
        RequestId::String(s) => format!("s{s}"),
    }
}

async fn drive(ctx: Rc<Ctx>, mut rx: mpsc::UnboundedReceiver<Cmd>) {
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
                let request_id = match &out.kind {
                    OutKind::Request { id, .. } => Some(id.clone()),
                    _ => None,
                };
                let token = ctx.next_token.get();
                ctx.next_token.set(token + 1);
                let c = ctx.clone();
                let h = tokio::task::spawn_local(async move {
                    let id = match &out.kind {
                        OutKind::Request { id, .. } => Some(id.clone()),
                        _ => None,
                    };
                    post(&c, out).await;
                    if let Some(id) = id {
                        c.remove_worker(&id, token);
                    }
                });
                if let Some(id) = request_id {
                    ctx.workers.borrow_mut().insert(id, (token, h));
                }
            }
            Cmd::Abort(id) => {
                let w = ctx.workers.borrow_mut().remove(&id);
                if let Some((_, h)) = w {
                    tracing::debug!(%id, "request aborted: its stream is closed");
                    h.abort();
                }
            }
            Cmd::Negotiated(pv) => {
                *ctx.protocol.borrow_mut() = Some(pv);
            }
            Cmd::Listen => start_listener(&ctx),
            Cmd::Close => break,
        }
    }
    shutdown(&ctx).await;
}

async fn shutdown(ctx: &Rc<Ctx>) {
    ctx.shared.close_with("the connection was closed");
    if let Some(h) = ctx.listener.borrow_mut().take() {
        h.abort();
    }
    ctx.shared.set_listen(ListenState::Closed);
    let workers: Vec<_> = ctx.workers.borrow_mut().drain().collect();
    for (_, (_, h)) in workers {
        h.abort();
    }
    if ctx.ended.get() {
        return;
    }
    let Some(session) = ctx.shared.session() else {
        return;
    };
    let req = ctx
        .request(Method::DELETE, Some(&session))
        .timeout(ctx.opts.head_timeout);
    match req.send().await {
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

/// Map awc's error: before the request was written it was not sent; after, its outcome is
/// unknown.
fn send_error(e: &SendRequestError) -> TransportError {
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

fn content_type(resp: &awc::ClientResponse) -> String {
    resp.headers()
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(|s| {
            s.split(';')
                .next()
                .unwrap_or("")
                .trim()
                .to_ascii_lowercase()
        })
        .unwrap_or_default()
}

/// A non-2xx answer, read.
struct Refusal {
    status: u16,
    rpc_error: Option<ErrorObject>,
    detail: String,
    www_authenticate: Option<String>,
    session_ended: bool,
}

impl Refusal {
    fn status_error(&self, with_rpc: bool) -> TransportError {
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

async fn read_refusal(ctx: &Ctx, mut resp: awc::ClientResponse, carried_session: bool) -> Refusal {
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
    let rpc_error = jsonrpc::parse_batch(&body).ok().and_then(|msgs| {
        msgs.into_iter().find_map(|m| match m {
            Message::Response { result: Err(e), .. } | Message::OrphanError(e) => Some(e),
            _ => None,
        })
    });
    let text = String::from_utf8_lossy(&body);
    let mut detail = match &rpc_error {
        Some(e) => ctx.detail(&e.message),
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
    let says_invalid = match &rpc_error {
        Some(e) => mentions_invalid_session(&e.message),
        None => mentions_invalid_session(&text),
    };
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

/// One worker: POST one message and see it through.
async fn post(ctx: &Rc<Ctx>, out: Outbound) {
    let Outbound {
        kind,
        body,
        headers,
        ack,
    } = out;
    let session = ctx.shared.session();
    let mut req = ctx
        .request(Method::POST, session.as_deref())
        .insert_header((CONTENT_TYPE, "application/json"))
        .insert_header((ACCEPT, ACCEPT_POST));
    for (n, v) in headers {
        req = req.insert_header((n, v));
    }
    if !matches!(kind, OutKind::Request { .. }) {
        req = req.timeout(ctx.opts.head_timeout);
    }
    ctx.shared.stats.posts.fetch_add(1, Ordering::Relaxed);
    let res = req.send_body(body).await;
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
    ctx: &Rc<Ctx>,
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
    if content_type(&resp) == EVENT_STREAM {
        read_request_stream(ctx, id, resp).await
    } else {
        read_json_reply(ctx, id, resp).await
    }
}

fn capture_session(ctx: &Ctx, resp: &awc::ClientResponse) {
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

async fn read_json_reply(
    ctx: &Rc<Ctx>,
    id: &RequestId,
    mut resp: awc::ClientResponse,
) -> Result<(), TransportError> {
    let ct = content_type(&resp);
    let body = match resp.body().limit(MAX_MESSAGE_BYTES).await {
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
    let msgs = jsonrpc::parse_batch(&body).map_err(|e| {
        ctx.shared.stats.malformed.fetch_add(1, Ordering::Relaxed);
        let what = if ct.is_empty() {
            "no content type".to_owned()
        } else {
            ct.clone()
        };
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

/// How reading one SSE stream ended.
enum StreamEnd {
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

/// Read a request's SSE stream, and resume it (2025-11-25 era) until its response arrives.
async fn read_request_stream(
    ctx: &Rc<Ctx>,
    id: &RequestId,
    mut resp: awc::ClientResponse,
) -> Result<(), TransportError> {
    let mut last_id: Option<String> = None;
    let mut retry: Option<Duration> = None;
    let mut empty_in_row = 0u32;
    let mut resumed = false;
    loop {
        let end = read_stream(ctx, &mut resp, Some(id), &mut last_id, &mut retry).await?;
        let (broke, progress) = match end {
            StreamEnd::Answered => {
                drain(&mut resp).await;
                return Ok(());
            }
            StreamEnd::Over {
                broke, progress, ..
            } => (broke, progress),
        };
        let how = match &broke {
            Some(e) => format!("the stream broke before the answer ({e})"),
            None => "the stream ended before the answer".to_owned(),
        };
        if !ctx.legacy() {
            return Err(TransportError::Lost(how));
        }
        let Some(last) = last_id.clone() else {
            return Err(TransportError::Lost(format!(
                "{how}, and it carried no event id to resume from"
            )));
        };
        if resumed {
            if progress {
                empty_in_row = 0;
            } else {
                empty_in_row += 1;
            }
        }
        // Open the resumed stream, counting attempts that fail to open as empty ones.
        resp = loop {
            if empty_in_row >= ctx.opts.resume_max_empty {
                return Err(TransportError::Lost(format!(
                    "{how}; {empty_in_row} resumptions in a row brought nothing new"
                )));
            }
            let wait = resume_wait(
                retry,
                ctx.opts.resume_default_wait,
                ctx.opts.resume_max_wait,
            );
            tokio::time::sleep(wait).await;
            ctx.shared.stats.resumptions.fetch_add(1, Ordering::Relaxed);
            resumed = true;
            match open_get(ctx, Some(&last)).await {
                GetOpen::Stream(r) => break r,
                GetOpen::Failed(e) => {
                    tracing::debug!(error = %e, "a resumption could not open");
                    empty_in_row += 1;
                }
                GetOpen::Refused(r) if r.session_ended => {
                    ctx.end_session(r.status);
                    return Err(TransportError::Lost(format!(
                        "{how}, and the session ended while resuming (HTTP {})",
                        r.status
                    )));
                }
                GetOpen::Refused(r) => {
                    return Err(TransportError::Lost(format!(
                        "{how}, and the server refused to resume it (HTTP {}: {})",
                        r.status, r.detail
                    )));
                }
            }
        };
    }
}

/// After its answer a stream should end: read what is left (briefly, a little) so that its
/// connection goes back to the pool rather than being closed (a new TLS handshake per call
/// otherwise).
async fn drain(resp: &mut awc::ClientResponse) {
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
async fn read_stream(
    ctx: &Rc<Ctx>,
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
            heard = true;
            match item {
                SseItem::Oversized(n) => {
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
                    if let Some(eid) = ev.id.as_deref().filter(|s| !s.is_empty()) {
                        *last_id = Some(eid.to_owned());
                        if !ctx.seen.borrow_mut().insert(format!("e:{eid}")) {
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
                    if deliver_data(ctx, &ev.data, awaited) {
                        return Ok(StreamEnd::Answered);
                    }
                }
            }
        }
    }
}

/// Parse an event's data and dispatch it; true when it answered `awaited`.
fn deliver_data(ctx: &Ctx, data: &Bytes, awaited: Option<&RequestId>) -> bool {
    match jsonrpc::parse_batch(data) {
        Ok(msgs) => {
            let mut answered = false;
            for m in msgs {
                answered |= ctx.dispatch(m, awaited);
            }
            answered
        }
        Err(e) => {
            ctx.shared.stats.malformed.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(error = %e, "ignored an SSE event that is not JSON-RPC");
            false
        }
    }
}

enum GetOpen {
    Stream(awc::ClientResponse),
    /// Could not connect, or no head in time.
    Failed(TransportError),
    Refused(Refusal),
}

/// Open a GET stream (a resumption with `Last-Event-ID`, or the listening stream).
async fn open_get(ctx: &Ctx, last_event_id: Option<&str>) -> GetOpen {
    let session = ctx.shared.session();
    let mut req = ctx
        .request(Method::GET, session.as_deref())
        .insert_header((ACCEPT, EVENT_STREAM))
        .timeout(ctx.opts.head_timeout);
    if let Some(l) = last_event_id {
        req = req.insert_header((LAST_EVENT_ID_HEADER, l));
    }
    ctx.shared.stats.gets.fetch_add(1, Ordering::Relaxed);
    match req.send().await {
        Err(e) => GetOpen::Failed(send_error(&e)),
        Ok(resp) if resp.status().is_success() => {
            if content_type(&resp) == EVENT_STREAM {
                GetOpen::Stream(resp)
            } else {
                GetOpen::Refused(Refusal {
                    status: resp.status().as_u16(),
                    rpc_error: None,
                    detail: format!(
                        "a GET answered with {:?}, not an event stream",
                        content_type(&resp)
                    ),
                    www_authenticate: None,
                    session_ended: false,
                })
            }
        }
        Ok(resp) => GetOpen::Refused(read_refusal(ctx, resp, session.is_some()).await),
    }
}

fn start_listener(ctx: &Rc<Ctx>) {
    if ctx.shared.closed.load(Ordering::Acquire) {
        return;
    }
    if !ctx.legacy() {
        tracing::debug!("no listening stream outside a 2025-11-25-era session");
        return;
    }
    if ctx.listener.borrow().is_some() {
        return; // one per connection, for its life
    }
    ctx.shared.set_listen(ListenState::Opening);
    let c = ctx.clone();
    let h = tokio::task::spawn_local(async move {
        let state = Rc::new(RefCell::new((None::<String>, None::<Duration>)));
        let backoff = listen_backoff(&c.opts);
        let c2 = c.clone();
        let end = run_listen_schedule(
            backoff,
            || listen_attempt(c2.clone(), state.clone()),
            |wait| {
                c.shared.set_listen(ListenState::Waiting);
                tracing::debug!(
                    wait_ms = wait.as_millis() as u64,
                    "listening stream dropped; reopening"
                );
            },
        )
        .await;
        match end {
            ListenEnd::Refused(s) => {
                tracing::debug!(status = s, "the server offers no listening stream");
                c.shared.set_listen(ListenState::Refused(s));
            }
            ListenEnd::SessionEnded(s) => c.end_session(s),
            ListenEnd::GaveUp => {
                tracing::warn!(
                    attempts = c.opts.listen_max_empty,
                    "the listening stream heard nothing in a row of attempts; given up"
                );
                c.shared.set_listen(ListenState::GaveUp);
            }
        }
    });
    *ctx.listener.borrow_mut() = Some(h);
}

async fn listen_attempt(
    ctx: Rc<Ctx>,
    state: Rc<RefCell<(Option<String>, Option<Duration>)>>,
) -> ListenAttempt {
    let last = state.borrow().0.clone();
    match open_get(&ctx, last.as_deref()).await {
        GetOpen::Failed(e) => {
            tracing::debug!(error = %e, "the listening stream could not open");
            ListenAttempt::Dropped {
                heard: false,
                retry: state.borrow().1,
            }
        }
        GetOpen::Refused(r) if r.session_ended => ListenAttempt::SessionEnded(r.status),
        GetOpen::Refused(r) => ListenAttempt::Refused(r.status),
        GetOpen::Stream(mut resp) => {
            ctx.shared.set_listen(ListenState::Open);
            ctx.shared
                .stats
                .listen_opens
                .fetch_add(1, Ordering::Relaxed);
            let (mut last_id, mut retry) = state.borrow().clone();
            let r = read_stream(&ctx, &mut resp, None, &mut last_id, &mut retry).await;
            *state.borrow_mut() = (last_id, retry);
            let heard = match r {
                Ok(StreamEnd::Over { broke, heard, .. }) => {
                    if let Some(e) = broke {
                        tracing::debug!(error = %e, "the listening stream broke");
                    }
                    heard
                }
                // Nothing is awaited on this stream, so it never answers or fails.
                Ok(StreamEnd::Answered) | Err(_) => true,
            };
            ListenAttempt::Dropped { heard, retry }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::jsonrpc::{notification_bytes, request_bytes};
    use serde_json::{json, Value};
    use std::collections::BTreeMap;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::{TcpListener, TcpStream};
    use tokio::sync::oneshot;

    // ---- the reopening schedule, with paused time --------------------------------------

    fn secs(s: &[u64]) -> Vec<Duration> {
        s.iter().map(|&x| Duration::from_secs(x)).collect()
    }

    #[test]
    fn backoff_doubles_from_one_second_to_a_minute_and_gives_up_after_eight() {
        let mut b = listen_backoff(&HttpOptions::default());
        let waits: Vec<_> = (0..7).map(|_| b.next_wait(false, None).unwrap()).collect();
        assert_eq!(waits, secs(&[1, 2, 4, 8, 16, 32, 60]));
        assert_eq!(
            b.next_wait(false, None),
            None,
            "the eighth empty attempt gives up"
        );
    }

    #[test]
    fn backoff_resets_when_an_attempt_hears_something() {
        let mut b = listen_backoff(&HttpOptions::default());
        for _ in 0..7 {
            assert!(b.next_wait(false, None).is_some());
        }
        assert_eq!(b.next_wait(true, None), Some(Duration::from_secs(1)));
        assert_eq!(b.empty_in_row(), 0);
        for _ in 0..7 {
            assert!(b.next_wait(false, None).is_some());
        }
        assert_eq!(b.next_wait(false, None), None);
    }

    #[test]
    fn backoff_follows_the_server_retry_capped() {
        let mut b = listen_backoff(&HttpOptions::default());
        let r = Some(Duration::from_millis(2500));
        assert_eq!(b.next_wait(true, r), r);
        assert_eq!(b.next_wait(false, r), r);
        assert_eq!(
            b.next_wait(false, Some(Duration::from_secs(3600))),
            Some(Duration::from_secs(60))
        );
    }

    #[test]
    fn resume_wait_defaults_and_caps() {
        let d = HttpOptions::default();
        let w = |r| resume_wait(r, d.resume_default_wait, d.resume_max_wait);
        assert_eq!(w(None), Duration::from_millis(250));
        assert_eq!(
            w(Some(Duration::from_millis(700))),
            Duration::from_millis(700)
        );
        assert_eq!(w(Some(Duration::from_secs(45))), Duration::from_secs(30));
        assert_eq!(
            w(Some(Duration::from_millis(u64::MAX))),
            Duration::from_secs(30)
        );
    }

    /// Runs the schedule with a fake attempt; returns when each attempt started (virtual
    /// seconds since the start) and how it ended.
    async fn run_fake(script: Vec<ListenAttempt>) -> (Vec<f64>, ListenEnd) {
        let start = tokio::time::Instant::now();
        let times = Rc::new(RefCell::new(Vec::new()));
        let script = Rc::new(RefCell::new(VecDeque::from(script)));
        let t = times.clone();
        let end = run_listen_schedule(
            listen_backoff(&HttpOptions::default()),
            move || {
                t.borrow_mut().push(start.elapsed().as_secs_f64());
                let next = script.borrow_mut().pop_front();
                async move { next.unwrap_or(ListenAttempt::Refused(405)) }
            },
            |_| {},
        )
        .await;
        let t = times.borrow().clone();
        (t, end)
    }

    fn dropped(heard: bool) -> ListenAttempt {
        ListenAttempt::Dropped { heard, retry: None }
    }

    #[tokio::test(start_paused = true)]
    async fn schedule_with_paused_time_gives_up_after_eight_silent_attempts() {
        let (times, end) = run_fake(vec![dropped(false); 20]).await;
        assert_eq!(end, ListenEnd::GaveUp);
        assert_eq!(times, vec![0.0, 1.0, 3.0, 7.0, 15.0, 31.0, 63.0, 123.0]);
    }

    #[tokio::test(start_paused = true)]
    async fn schedule_with_paused_time_keeps_a_talking_stream() {
        // Heard, seven silent, heard, seven silent, then a refusal: never gives up.
        let mut script = vec![dropped(true)];
        script.extend(vec![dropped(false); 7]);
        script.push(dropped(true));
        script.extend(vec![dropped(false); 7]);
        let (times, end) = run_fake(script).await;
        assert_eq!(end, ListenEnd::Refused(405));
        assert_eq!(times.len(), 17);
        // After a heard stream: 1 s; then 1, 2, 4 ... 60.
        assert_eq!(&times[..4], &[0.0, 1.0, 2.0, 4.0]);
    }

    #[tokio::test(start_paused = true)]
    async fn schedule_with_paused_time_uses_the_server_retry() {
        let r = Some(Duration::from_millis(1500));
        let script = vec![
            ListenAttempt::Dropped {
                heard: true,
                retry: r,
            },
            ListenAttempt::Dropped {
                heard: false,
                retry: r,
            },
            ListenAttempt::SessionEnded(404),
        ];
        let (times, end) = run_fake(script).await;
        assert_eq!(end, ListenEnd::SessionEnded(404));
        assert_eq!(times, vec![0.0, 1.5, 3.0]);
    }

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

    #[test]
    fn seen_is_bounded() {
        let mut s = Seen::default();
        for i in 0..(SEEN_CAPACITY + 10) {
            assert!(s.insert(format!("e:{i}")));
        }
        assert!(!s.insert(format!("e:{}", SEEN_CAPACITY + 5)));
        assert!(s.insert("e:0".into()), "the oldest were forgotten");
        assert!(s.set.len() <= SEEN_CAPACITY);
    }

    // ---- a scripted HTTP/1.1 server --------------------------------------------------

    #[derive(Debug, Clone)]
    struct Req {
        method: String,
        headers: BTreeMap<String, String>,
        body: Vec<u8>,
    }

    impl Req {
        fn header(&self, n: &str) -> Option<&str> {
            self.headers.get(n).map(String::as_str)
        }
        fn json(&self) -> Value {
            serde_json::from_slice(&self.body).unwrap_or(Value::Null)
        }
        fn rpc_method(&self) -> String {
            self.json()["method"].as_str().unwrap_or("").to_owned()
        }
    }

    #[derive(Clone)]
    enum Part {
        Chunk(Vec<u8>),
        /// Stop writing and keep the connection until the client closes it.
        Hold,
        /// Close without ending the chunked body (a broken stream).
        Break,
    }

    #[derive(Clone)]
    struct Reply {
        status: u16,
        headers: Vec<(String, String)>,
        /// `None`: a plain body (Content-Length); `Some`: a chunked stream.
        body: Vec<u8>,
        stream: Option<Vec<Part>>,
    }

    fn json_reply(status: u16, v: Value) -> Reply {
        Reply {
            status,
            headers: vec![("content-type".into(), "application/json".into())],
            body: serde_json::to_vec(&v).unwrap(),
            stream: None,
        }
    }

    fn status_reply(status: u16, text: &str) -> Reply {
        Reply {
            status,
            headers: vec![("content-type".into(), "text/plain".into())],
            body: text.as_bytes().to_vec(),
            stream: None,
        }
    }

    fn sse_reply(parts: Vec<Part>) -> Reply {
        Reply {
            status: 200,
            headers: vec![("content-type".into(), "text/event-stream".into())],
            body: Vec::new(),
            stream: Some(parts),
        }
    }

    fn ev(id: Option<&str>, data: &Value) -> Part {
        let mut s = String::new();
        if let Some(i) = id {
            s.push_str(&format!("id: {i}\n"));
        }
        s.push_str(&format!(
            "data: {}\n\n",
            serde_json::to_string(data).unwrap()
        ));
        Part::Chunk(s.into_bytes())
    }

    fn raw(s: &str) -> Part {
        Part::Chunk(s.as_bytes().to_vec())
    }

    fn result(id: i64, v: Value) -> Value {
        json!({"jsonrpc": "2.0", "id": id, "result": v})
    }

    type Handler = Arc<dyn Fn(&Req, usize) -> Reply + Send + Sync>;

    #[derive(Clone, Default)]
    struct Log {
        reqs: Arc<Mutex<Vec<Req>>>,
        /// Streams held open whose client went away.
        hangups: Arc<AtomicU64>,
    }

    impl Log {
        fn reqs(&self) -> Vec<Req> {
            self.reqs.lock().unwrap().clone()
        }
        fn count(&self, method: &str) -> usize {
            self.reqs().iter().filter(|r| r.method == method).count()
        }
    }

    async fn serve(handler: Handler) -> (String, Log) {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/mcp", l.local_addr().unwrap());
        let log = Log::default();
        let lg = log.clone();
        tokio::spawn(async move {
            loop {
                let Ok((sock, _)) = l.accept().await else {
                    return;
                };
                let (h, lg) = (handler.clone(), lg.clone());
                tokio::spawn(async move {
                    let _ = conn(sock, h, lg).await;
                });
            }
        });
        (url, log)
    }

    async fn conn(mut sock: TcpStream, handler: Handler, log: Log) -> std::io::Result<()> {
        let mut buf = Vec::new();
        let head_end = loop {
            let mut b = [0u8; 4096];
            let n = sock.read(&mut b).await?;
            if n == 0 {
                return Ok(());
            }
            buf.extend_from_slice(&b[..n]);
            if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                break i + 4;
            }
        };
        let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
        let mut lines = head.split("\r\n");
        let method = lines
            .next()
            .unwrap_or("")
            .split(' ')
            .next()
            .unwrap_or("")
            .to_owned();
        let mut headers = BTreeMap::new();
        for l in lines {
            if let Some((k, v)) = l.split_once(':') {
                headers.insert(k.trim().to_ascii_lowercase(), v.trim().to_owned());
            }
        }
        let len: usize = headers
            .get("content-length")
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        let mut body = buf[head_end..].to_vec();
        while body.len() < len {
            let mut b = vec![0u8; 65536];
            let n = sock.read(&mut b).await?;
            if n == 0 {
                break;
            }
            body.extend_from_slice(&b[..n]);
        }
        let req = Req {
            method,
            headers,
            body,
        };
        let index = {
            let mut g = log.reqs.lock().unwrap();
            g.push(req.clone());
            g.len() - 1
        };
        let reply = handler(&req, index);
        let mut out = format!("HTTP/1.1 {} X\r\nconnection: close\r\n", reply.status);
        for (k, v) in &reply.headers {
            out.push_str(&format!("{k}: {v}\r\n"));
        }
        match reply.stream {
            None => {
                out.push_str(&format!("content-length: {}\r\n\r\n", reply.body.len()));
                sock.write_all(out.as_bytes()).await?;
                sock.write_all(&reply.body).await?;
            }
            Some(parts) => {
                out.push_str("transfer-encoding: chunked\r\n\r\n");
                sock.write_all(out.as_bytes()).await?;
                for p in parts {
                    match p {
                        Part::Chunk(c) => {
                            let mut framed = format!("{:x}\r\n", c.len()).into_bytes();
                            framed.extend_from_slice(&c);
                            framed.extend_from_slice(b"\r\n");
                            if sock.write_all(&framed).await.is_err() {
                                // The client went away mid-stream.
                                log.hangups.fetch_add(1, Ordering::SeqCst);
                                return Ok(());
                            }
                        }
                        Part::Hold => {
                            let mut b = [0u8; 64];
                            while sock.read(&mut b).await.map(|n| n > 0).unwrap_or(false) {}
                            log.hangups.fetch_add(1, Ordering::SeqCst);
                            return Ok(());
                        }
                        Part::Break => return Ok(()),
                    }
                }
                sock.write_all(b"0\r\n\r\n").await?;
            }
        }
        sock.flush().await?;
        // Let the client read everything before the socket goes.
        let _ = sock.shutdown().await;
        Ok(())
    }

    // ---- the transport against it ------------------------------------------------------

    struct TestSink(mpsc::UnboundedSender<Inbound>);

    impl InboundSink for TestSink {
        fn deliver(&self, ev: Inbound) {
            let _ = self.0.send(ev);
        }
    }

    fn fast() -> HttpOptions {
        HttpOptions {
            resume_default_wait: Duration::from_millis(10),
            listen_base_wait: Duration::from_millis(5),
            listen_max_wait: Duration::from_millis(40),
            ..HttpOptions::default()
        }
    }

    /// Configured headers, resolved the way the daemon does (values from the environment).
    fn resolved_headers(url: &str, headers: &[(&str, &str)]) -> Vec<(String, Secret)> {
        use crate::store::settings::{parse_mcp, resolve, Credentials, ResolvedTransport};
        let named: serde_json::Map<String, Value> = headers
            .iter()
            .enumerate()
            .map(|(i, (k, _))| (k.to_string(), json!({"env": format!("V{i}")})))
            .collect();
        let cfg = parse_mcp(Some(
            &json!({"servers": {"t": {"type": "http", "url": url, "headers": named}}}),
        ))
        .unwrap();
        let values: Vec<String> = headers.iter().map(|(_, v)| v.to_string()).collect();
        let env = move |var: &str| {
            var.strip_prefix('V')
                .and_then(|i| i.parse::<usize>().ok())
                .and_then(|i| values.get(i).cloned())
        };
        match resolve(&cfg.servers[0], &env, &Credentials::default())
            .unwrap()
            .transport
        {
            ResolvedTransport::Http { headers, .. } => headers,
            _ => unreachable!(),
        }
    }

    fn start(
        url: &str,
        opts: HttpOptions,
        headers: Vec<(&str, &str)>,
    ) -> (Arc<HttpTransport>, mpsc::UnboundedReceiver<Inbound>) {
        let (tx, rx) = mpsc::unbounded_channel();
        let spec = HttpSpec {
            url: url::Url::parse(url).unwrap(),
            headers: resolved_headers(url, &headers),
            tls: super::super::tls::client_config_without_system_roots(&[]).unwrap(),
        };
        let t = HttpTransport::start_with(spec, Arc::new(TestSink(tx)), opts).unwrap();
        (t, rx)
    }

    fn request(t: &HttpTransport, id: i64, method: &str) {
        request_with(t, id, method, Vec::new());
    }

    fn request_with(t: &HttpTransport, id: i64, method: &str, headers: Vec<(String, String)>) {
        let rid = RequestId::Number(id);
        t.send(Outbound {
            kind: OutKind::Request {
                id: rid.clone(),
                method: method.into(),
            },
            body: request_bytes(&rid, method, Some(&json!({}))),
            headers,
            ack: None,
        })
        .unwrap();
    }

    async fn notify(t: &HttpTransport, method: &str) -> Result<(), TransportError> {
        let (tx, rx) = oneshot::channel();
        t.send(Outbound {
            kind: OutKind::Notification {
                method: method.into(),
            },
            body: notification_bytes(method, None),
            headers: Vec::new(),
            ack: Some(tx),
        })?;
        tokio::time::timeout(Duration::from_secs(10), rx)
            .await
            .expect("ack in time")
            .expect("ack sent")
    }

    async fn next(rx: &mut mpsc::UnboundedReceiver<Inbound>) -> Inbound {
        tokio::time::timeout(Duration::from_secs(10), rx.recv())
            .await
            .expect("an inbound event in time")
            .expect("sink open")
    }

    async fn quiet(rx: &mut mpsc::UnboundedReceiver<Inbound>, ms: u64) {
        if let Ok(Some(ev)) = tokio::time::timeout(Duration::from_millis(ms), rx.recv()).await {
            panic!("unexpected inbound event: {ev:?}");
        }
    }

    fn expect_result(ev: Inbound, id: i64) -> Value {
        match ev {
            Inbound::Message(Message::Response {
                id: RequestId::Number(n),
                result: Ok(v),
            }) if n == id => v,
            other => panic!("expected the result of {id}, got {other:?}"),
        }
    }

    fn expect_lost(ev: Inbound, id: i64) -> TransportError {
        match ev {
            Inbound::Lost {
                id: RequestId::Number(n),
                error,
            } if n == id => error,
            other => panic!("expected request {id} lost, got {other:?}"),
        }
    }

    fn legacy() -> ProtocolVersion {
        ProtocolVersion::legacy("2025-11-25")
    }

    /// A server that opens a session on `initialize` and answers `tools/list` with JSON.
    fn session_server(
        extra: impl Fn(&Req, usize) -> Option<Reply> + Send + Sync + 'static,
    ) -> Handler {
        Arc::new(move |r, i| {
            if let Some(reply) = extra(r, i) {
                return reply;
            }
            match (r.method.as_str(), r.rpc_method().as_str()) {
                ("POST", "initialize") => {
                    let mut rep = json_reply(
                        200,
                        result(
                            r.json()["id"].as_i64().unwrap(),
                            json!({"protocolVersion": "2025-11-25"}),
                        ),
                    );
                    rep.headers.push(("mcp-session-id".into(), "sess-1".into()));
                    rep
                }
                ("POST", "notifications/initialized") => status_reply(202, ""),
                ("POST", "") => status_reply(202, ""),
                ("POST", _) => json_reply(
                    200,
                    result(r.json()["id"].as_i64().unwrap(), json!({"ok": true})),
                ),
                ("DELETE", _) => status_reply(200, ""),
                _ => status_reply(405, ""),
            }
        })
    }

    async fn open_session(t: &HttpTransport, rx: &mut mpsc::UnboundedReceiver<Inbound>) {
        request(t, 1, "initialize");
        expect_result(next(rx).await, 1);
        assert_eq!(t.session_id().as_deref(), Some("sess-1"));
        t.negotiated(&legacy());
        notify(t, "notifications/initialized").await.unwrap();
    }

    #[actix_rt::test]
    async fn json_reply_and_the_headers_sent() {
        let (url, log) = serve(session_server(|_, _| None)).await;
        let (t, mut rx) = start(&url, fast(), vec![("Authorization", "Bearer tok-123456")]);
        request_with(&t, 1, "initialize", vec![("X-Extra".into(), "yes".into())]);
        expect_result(next(&mut rx).await, 1);
        t.negotiated(&legacy());
        notify(&t, "notifications/initialized").await.unwrap();
        request(&t, 2, "tools/list");
        assert_eq!(expect_result(next(&mut rx).await, 2), json!({"ok": true}));

        let reqs = log.reqs();
        let init = &reqs[0];
        assert_eq!(init.header("content-type"), Some("application/json"));
        assert_eq!(
            init.header("accept"),
            Some("application/json, text/event-stream")
        );
        assert_eq!(init.header("authorization"), Some("Bearer tok-123456"));
        assert_eq!(init.header("x-extra"), Some("yes"));
        assert_eq!(init.header("mcp-session-id"), None);
        assert_eq!(init.header("mcp-protocol-version"), None);
        for later in &reqs[1..] {
            assert_eq!(later.header("mcp-session-id"), Some("sess-1"));
            assert_eq!(later.header("mcp-protocol-version"), Some("2025-11-25"));
            assert_eq!(later.header("authorization"), Some("Bearer tok-123456"));
        }
        assert_eq!(reqs[1].rpc_method(), "notifications/initialized");
    }

    #[actix_rt::test]
    async fn modern_requests_get_no_legacy_headers() {
        let (url, log) = serve(session_server(|_, _| None)).await;
        let (t, mut rx) = start(&url, fast(), vec![]);
        t.negotiated(&ProtocolVersion::modern());
        request_with(
            &t,
            5,
            "tools/list",
            vec![
                ("MCP-Protocol-Version".into(), "2026-07-28".into()),
                ("Mcp-Method".into(), "tools/list".into()),
            ],
        );
        expect_result(next(&mut rx).await, 5);
        let r = &log.reqs()[0];
        assert_eq!(r.header("mcp-protocol-version"), Some("2026-07-28"));
        assert_eq!(r.header("mcp-method"), Some("tools/list"));
        assert_eq!(r.header("mcp-session-id"), None);
    }

    #[actix_rt::test]
    async fn sse_reply_delivers_everything_before_the_response() {
        let handler: Handler = Arc::new(|r, _| {
            let id = r.json()["id"].as_i64().unwrap_or(0);
            sse_reply(vec![
                raw("id: p1\nretry: 100\ndata:\n\n"),
                raw(": a comment\n\n"),
                ev(
                    Some("e1"),
                    &json!({"jsonrpc": "2.0", "method": "notifications/progress", "params": {}}),
                ),
                ev(
                    Some("e2"),
                    &json!({"jsonrpc": "2.0", "id": 77, "method": "sampling/createMessage"}),
                ),
                ev(Some("e3"), &result(id, json!({"done": 1}))),
                Part::Hold,
            ])
        });
        let (url, log) = serve(handler).await;
        let (t, mut rx) = start(&url, fast(), vec![]);
        request(&t, 3, "tools/call");
        assert!(matches!(
            next(&mut rx).await,
            Inbound::Message(Message::Notification { .. })
        ));
        assert!(matches!(
            next(&mut rx).await,
            Inbound::Message(Message::Request {
                id: RequestId::Number(77),
                ..
            })
        ));
        assert_eq!(expect_result(next(&mut rx).await, 3), json!({"done": 1}));
        // The stream is dropped once its response arrived, though the server holds it.
        tokio::time::timeout(Duration::from_secs(5), async {
            while log.hangups.load(Ordering::SeqCst) == 0 {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
        .await
        .expect("the client closed the stream after its response");
    }

    #[actix_rt::test]
    async fn refusals_with_and_without_a_jsonrpc_body() {
        let handler: Handler = Arc::new(|r, _| match r.rpc_method().as_str() {
            "server/discover" => json_reply(
                400,
                json!({"jsonrpc": "2.0", "id": null, "error": {"code": -32000, "message": "Bad Request: Server not initialized"}}),
            ),
            "tools/list" => status_reply(503, "overloaded\nplease retry; token tok-123456"),
            "tools/call" => {
                let mut rep = json_reply(401, json!({"error": "invalid_token"}));
                rep.headers.push((
                    "www-authenticate".into(),
                    "Bearer resource_metadata=\"x\"".into(),
                ));
                rep
            }
            _ => status_reply(500, ""),
        });
        let (url, _) = serve(handler).await;
        let (t, mut rx) = start(&url, fast(), vec![("Authorization", "Bearer tok-123456")]);
        request(&t, 1, "server/discover");
        match next(&mut rx).await {
            Inbound::Message(Message::Response {
                id: RequestId::Number(1),
                result: Err(e),
            }) => assert_eq!(e.code, -32000),
            other => panic!("{other:?}"),
        }
        request(&t, 2, "tools/list");
        match expect_lost(next(&mut rx).await, 2) {
            TransportError::Status {
                status: 503,
                detail,
                rpc_error: None,
                ..
            } => {
                assert!(detail.contains("overloaded please retry"), "{detail}");
                assert!(!detail.contains("tok-123456"), "a secret leaked: {detail}");
            }
            other => panic!("{other:?}"),
        }
        request(&t, 3, "tools/call");
        match expect_lost(next(&mut rx).await, 3) {
            TransportError::Status {
                status: 401,
                www_authenticate: Some(w),
                ..
            } => assert!(w.starts_with("Bearer")),
            other => panic!("{other:?}"),
        }
        // A refused notification tells its sender.
        match notify(&t, "notifications/x").await {
            Err(TransportError::Status { status: 500, .. }) => {}
            other => panic!("{other:?}"),
        }
    }

    #[actix_rt::test]
    async fn an_unreachable_server_is_a_connect_error() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}/mcp", l.local_addr().unwrap());
        drop(l);
        let (t, mut rx) = start(&url, fast(), vec![]);
        request(&t, 1, "initialize");
        let e = expect_lost(next(&mut rx).await, 1);
        assert!(matches!(e, TransportError::Connect(_)), "{e:?}");
        assert!(!e.maybe_delivered());
        assert!(matches!(
            notify(&t, "notifications/initialized").await,
            Err(TransportError::Connect(_))
        ));
    }

    #[actix_rt::test]
    async fn a_server_that_hangs_up_after_reading_is_an_unknown_outcome() {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/mcp", l.local_addr().unwrap());
        tokio::spawn(async move {
            while let Ok((mut s, _)) = l.accept().await {
                let mut b = [0u8; 65536];
                let _ = s.read(&mut b).await;
                drop(s);
            }
        });
        let (t, mut rx) = start(&url, fast(), vec![]);
        request(&t, 1, "tools/call");
        let e = expect_lost(next(&mut rx).await, 1);
        assert!(e.maybe_delivered(), "{e:?}");
    }

    /// A session is open; the server answers its next request with `reply`: that request is
    /// lost as `SessionExpired(status)` and the transport closes with the same error.
    async fn the_server_ends_the_session(
        reply: impl Fn() -> Reply + Send + Sync + 'static,
        status: u16,
    ) -> Arc<HttpTransport> {
        let handler = session_server(move |r, _| (r.rpc_method() == "tools/list").then(&reply));
        let (url, _) = serve(handler).await;
        let (t, mut rx) = start(&url, fast(), vec![]);
        open_session(&t, &mut rx).await;
        request(&t, 2, "tools/list");
        assert!(matches!(
            expect_lost(next(&mut rx).await, 2),
            TransportError::SessionExpired(s) if s == status
        ));
        assert!(matches!(
            next(&mut rx).await,
            Inbound::Closed(TransportError::SessionExpired(s)) if s == status
        ));
        t
    }

    #[actix_rt::test]
    async fn session_404_ends_the_transport() {
        let t = the_server_ends_the_session(|| status_reply(404, "Session not found"), 404).await;
        let e = t
            .send(Outbound {
                kind: OutKind::Notification { method: "x".into() },
                body: notification_bytes("x", None),
                headers: Vec::new(),
                ack: None,
            })
            .unwrap_err();
        assert!(matches!(e, TransportError::Closed(_)), "{e:?}");
    }

    #[actix_rt::test]
    async fn session_400_no_valid_session_ends_the_transport() {
        // server-everything's answer to an unknown session.
        the_server_ends_the_session(
            || {
                json_reply(
                    400,
                    json!({"jsonrpc": "2.0", "id": null, "error": {"code": -32000, "message": "Bad Request: No valid session ID provided"}}),
                )
            },
            400,
        )
        .await;
    }

    #[actix_rt::test]
    async fn a_404_without_a_session_is_an_ordinary_refusal() {
        let (url, _) = serve(Arc::new(|_, _| status_reply(404, "Not Found"))).await;
        let (t, mut rx) = start(&url, fast(), vec![]);
        request(&t, 1, "initialize");
        assert!(matches!(
            expect_lost(next(&mut rx).await, 1),
            TransportError::Status { status: 404, .. }
        ));
        quiet(&mut rx, 100).await;
    }

    #[actix_rt::test]
    async fn oversized_answers_are_refused() {
        let handler: Handler = Arc::new(|r, _| {
            let id = r.json()["id"].as_i64().unwrap_or(0);
            let big = "x".repeat(MAX_MESSAGE_BYTES + 10);
            match r.rpc_method().as_str() {
                "json" => json_reply(200, result(id, json!({"big": big}))),
                _ => {
                    // One event that never ends, growing past the cap.
                    let mut parts = vec![raw("id: 1\ndata:\n\ndata: ")];
                    for _ in 0..20 {
                        parts.push(Part::Chunk(vec![b'y'; 1 << 20]));
                    }
                    parts.push(Part::Hold);
                    sse_reply(parts)
                }
            }
        });
        let (url, log) = serve(handler).await;
        let (t, mut rx) = start(&url, fast(), vec![]);
        request(&t, 1, "json");
        let e = expect_lost(next(&mut rx).await, 1);
        assert!(
            matches!(&e, TransportError::Protocol(m) if m.contains("16 MiB")),
            "{e:?}"
        );
        request(&t, 2, "sse");
        let e = expect_lost(next(&mut rx).await, 2);
        assert!(
            matches!(&e, TransportError::Protocol(m) if m.contains("16 MiB")),
            "{e:?}"
        );
        assert_eq!(t.stats().oversized.load(Ordering::Relaxed), 2);
        tokio::time::timeout(Duration::from_secs(5), async {
            while log.hangups.load(Ordering::SeqCst) == 0 {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
        .await
        .expect("the oversized stream was closed");
        // And outgoing.
        let big = Bytes::from(vec![b' '; MAX_MESSAGE_BYTES + 1]);
        let e = t
            .send(Outbound {
                kind: OutKind::Response,
                body: big,
                headers: Vec::new(),
                ack: None,
            })
            .unwrap_err();
        assert!(matches!(e, TransportError::TooLarge(_)));
    }

    /// A session server whose `tools/call` stream is cut after its priming event; GETs
    /// answer from `get`.
    fn cut_server(get: impl Fn(&Req, usize) -> Reply + Send + Sync + 'static) -> Handler {
        session_server(
            move |r, i| match (r.method.as_str(), r.rpc_method().as_str()) {
                ("POST", "tools/call") => Some(sse_reply(vec![
                    raw("id: s1-1\nretry: 20\ndata:\n\n"),
                    ev(
                        Some("s1-2"),
                        &json!({"jsonrpc": "2.0", "method": "notifications/progress"}),
                    ),
                    Part::Break,
                ])),
                ("GET", _) => Some(get(r, i)),
                _ => None,
            },
        )
    }

    #[actix_rt::test]
    async fn a_cut_stream_is_resumed_with_last_event_id() {
        let handler = cut_server(|r, _| {
            assert_eq!(r.header("last-event-id"), Some("s1-2"));
            sse_reply(vec![
                // A replay of what was already handled, then the answer.
                ev(
                    Some("s1-2"),
                    &json!({"jsonrpc": "2.0", "method": "notifications/progress"}),
                ),
                ev(Some("s1-3"), &result(2, json!({"resumed": true}))),
            ])
        });
        let (url, log) = serve(handler).await;
        let (t, mut rx) = start(&url, fast(), vec![]);
        open_session(&t, &mut rx).await;
        request(&t, 2, "tools/call");
        assert!(matches!(
            next(&mut rx).await,
            Inbound::Message(Message::Notification { .. })
        ));
        assert_eq!(
            expect_result(next(&mut rx).await, 2),
            json!({"resumed": true})
        );
        let get = log.reqs().into_iter().find(|r| r.method == "GET").unwrap();
        assert_eq!(get.header("mcp-session-id"), Some("sess-1"));
        assert_eq!(get.header("mcp-protocol-version"), Some("2025-11-25"));
        assert_eq!(get.header("accept"), Some("text/event-stream"));
        assert_eq!(t.stats().duplicates_dropped.load(Ordering::Relaxed), 1);
        assert_eq!(t.stats().resumptions.load(Ordering::Relaxed), 1);
    }

    #[actix_rt::test]
    async fn five_empty_resumptions_give_up() {
        let handler = cut_server(|_, _| sse_reply(vec![raw(": nothing new\n\n")]));
        let (url, log) = serve(handler).await;
        let (t, mut rx) = start(&url, fast(), vec![]);
        open_session(&t, &mut rx).await;
        request(&t, 2, "tools/call");
        assert!(matches!(
            next(&mut rx).await,
            Inbound::Message(Message::Notification { .. })
        ));
        let e = expect_lost(next(&mut rx).await, 2);
        assert!(e.maybe_delivered());
        assert!(e.to_string().contains("5 resumptions"), "{e}");
        assert_eq!(log.count("GET"), 5);
    }

    #[actix_rt::test]
    async fn resumptions_that_bring_events_keep_going() {
        // Every GET brings one new event and ends; the seventh brings the answer.
        let handler = cut_server(|_, i| {
            // Requests 0..=2 are initialize, initialized, tools/call.
            let n = i - 2;
            if n < 7 {
                sse_reply(vec![raw(&format!("id: g{n}\ndata:\n\n"))])
            } else {
                sse_reply(vec![ev(Some("final"), &result(2, json!({"n": n})))])
            }
        });
        let (url, log) = serve(handler).await;
        let (t, mut rx) = start(&url, fast(), vec![]);
        open_session(&t, &mut rx).await;
        request(&t, 2, "tools/call");
        assert!(matches!(
            next(&mut rx).await,
            Inbound::Message(Message::Notification { .. })
        ));
        assert_eq!(expect_result(next(&mut rx).await, 2), json!({"n": 7}));
        assert_eq!(log.count("GET"), 7);
    }

    #[actix_rt::test]
    async fn a_huge_retry_is_capped() {
        let handler = session_server(|r, _| match (r.method.as_str(), r.rpc_method().as_str()) {
            ("POST", "tools/call") => {
                Some(sse_reply(vec![raw("id: a\nretry: 3600000\ndata:\n\n")]))
            }
            ("GET", _) => Some(sse_reply(vec![ev(Some("b"), &result(2, json!({})))])),
            _ => None,
        });
        let (url, _) = serve(handler).await;
        let opts = HttpOptions {
            resume_max_wait: Duration::from_millis(200),
            ..fast()
        };
        let (t, mut rx) = start(&url, opts, vec![]);
        open_session(&t, &mut rx).await;
        let t0 = std::time::Instant::now();
        request(&t, 2, "tools/call");
        expect_result(next(&mut rx).await, 2);
        let took = t0.elapsed();
        assert!(took >= Duration::from_millis(200), "{took:?}");
        assert!(took < Duration::from_secs(5), "{took:?}");
    }

    #[actix_rt::test]
    async fn a_stream_without_event_ids_cannot_resume() {
        let handler = session_server(|r, _| {
            (r.rpc_method() == "tools/call").then(|| {
                sse_reply(vec![
                    ev(
                        None,
                        &json!({"jsonrpc": "2.0", "method": "notifications/progress"}),
                    ),
                    Part::Break,
                ])
            })
        });
        let (url, log) = serve(handler).await;
        let (t, mut rx) = start(&url, fast(), vec![]);
        open_session(&t, &mut rx).await;
        request(&t, 2, "tools/call");
        next(&mut rx).await;
        let e = expect_lost(next(&mut rx).await, 2);
        assert!(e.to_string().contains("no event id"), "{e}");
        assert_eq!(log.count("GET"), 0);
    }

    #[actix_rt::test]
    async fn a_modern_stream_is_never_resumed() {
        let handler = cut_server(|_, _| sse_reply(vec![]));
        let (url, log) = serve(handler).await;
        let (t, mut rx) = start(&url, fast(), vec![]);
        t.negotiated(&ProtocolVersion::modern());
        request(&t, 2, "tools/call");
        next(&mut rx).await;
        assert!(expect_lost(next(&mut rx).await, 2).maybe_delivered());
        assert_eq!(log.count("GET"), 0);
    }

    #[actix_rt::test]
    async fn abort_closes_the_request_stream() {
        let handler: Handler =
            Arc::new(|_, _| sse_reply(vec![raw("id: 1\ndata:\n\n"), Part::Hold]));
        let (url, log) = serve(handler).await;
        let (t, mut rx) = start(&url, fast(), vec![]);
        t.negotiated(&ProtocolVersion::modern());
        request(&t, 9, "tools/call");
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(log.hangups.load(Ordering::SeqCst), 0);
        t.abort(&RequestId::Number(9));
        tokio::time::timeout(Duration::from_secs(5), async {
            while log.hangups.load(Ordering::SeqCst) == 0 {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
        .await
        .expect("the server saw the stream close");
        quiet(&mut rx, 100).await;
    }

    #[actix_rt::test]
    async fn the_listening_stream_delivers_and_close_deletes_the_session() {
        let handler = session_server(|r, _| {
            (r.method == "GET").then(|| {
                sse_reply(vec![
                    raw("id: g1\ndata:\n\n"),
                    ev(
                        Some("g2"),
                        &json!({"jsonrpc": "2.0", "id": 0, "method": "roots/list"}),
                    ),
                    ev(
                        Some("g3"),
                        &json!({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}),
                    ),
                    Part::Hold,
                ])
            })
        });
        let (url, log) = serve(handler).await;
        let (t, mut rx) = start(&url, fast(), vec![]);
        // Not before the handshake: nothing happens.
        t.open_listen_stream();
        open_session(&t, &mut rx).await;
        t.open_listen_stream();
        t.open_listen_stream(); // one per connection
        assert!(matches!(
            next(&mut rx).await,
            Inbound::Message(Message::Request { method, .. }) if method == "roots/list"
        ));
        assert!(matches!(
            next(&mut rx).await,
            Inbound::Message(Message::Notification { .. })
        ));
        assert_eq!(t.listen_state(), ListenState::Open);
        assert_eq!(log.count("GET"), 1);
        let get = log.reqs().into_iter().find(|r| r.method == "GET").unwrap();
        assert_eq!(get.header("accept"), Some("text/event-stream"));
        assert_eq!(get.header("mcp-session-id"), Some("sess-1"));
        assert_eq!(get.header("mcp-protocol-version"), Some("2025-11-25"));

        t.close();
        tokio::time::timeout(Duration::from_secs(5), t.wait_closed())
            .await
            .unwrap();
        let del = log
            .reqs()
            .into_iter()
            .find(|r| r.method == "DELETE")
            .expect("a DELETE");
        assert_eq!(del.header("mcp-session-id"), Some("sess-1"));
        tokio::time::timeout(Duration::from_secs(5), async {
            while log.hangups.load(Ordering::SeqCst) == 0 {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
        .await
        .expect("the GET stream was closed");
        assert_eq!(t.listen_state(), ListenState::Closed);
        assert!(t
            .send(Outbound {
                kind: OutKind::Response,
                body: Bytes::from_static(b"{}"),
                headers: Vec::new(),
                ack: None,
            })
            .is_err());
    }

    #[actix_rt::test]
    async fn a_refused_listening_stream_stays_closed() {
        let (url, log) = serve(session_server(|_, _| None)).await; // GET -> 405
        let (t, mut rx) = start(&url, fast(), vec![]);
        open_session(&t, &mut rx).await;
        t.open_listen_stream();
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert_eq!(t.listen_state(), ListenState::Refused(405));
        t.open_listen_stream();
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(log.count("GET"), 1);
        // A 405 on DELETE is fine too.
        t.close();
        tokio::time::timeout(Duration::from_secs(5), t.wait_closed())
            .await
            .unwrap();
    }

    #[actix_rt::test]
    async fn a_silent_listening_stream_is_given_up_after_eight_attempts() {
        let handler = session_server(|r, _| (r.method == "GET").then(|| sse_reply(vec![])));
        let (url, log) = serve(handler).await;
        let (t, mut rx) = start(&url, fast(), vec![]);
        open_session(&t, &mut rx).await;
        t.open_listen_stream();
        tokio::time::timeout(Duration::from_secs(10), async {
            while t.listen_state() != ListenState::GaveUp {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
        .await
        .expect("given up");
        assert_eq!(log.count("GET"), 8);
    }

    #[actix_rt::test]
    async fn a_talking_listening_stream_is_reopened_with_last_event_id() {
        let handler = session_server(|r, i| {
            (r.method == "GET").then(|| {
                let n = i;
                if n > 12 {
                    // Enough: refuse, which ends the loop.
                    return status_reply(409, "Conflict");
                }
                sse_reply(vec![raw(&format!("id: l{n}\ndata:\n\n"))])
            })
        });
        let (url, log) = serve(handler).await;
        let (t, mut rx) = start(&url, fast(), vec![]);
        open_session(&t, &mut rx).await;
        t.open_listen_stream();
        tokio::time::timeout(Duration::from_secs(10), async {
            while t.listen_state() != ListenState::Refused(409) {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
        .await
        .expect("ended by the refusal");
        let gets: Vec<_> = log
            .reqs()
            .into_iter()
            .filter(|r| r.method == "GET")
            .collect();
        // Eleven streams that each heard something (more than eight: never given up), then
        // the refusal.
        assert_eq!(gets.len(), 12);
        assert_eq!(gets[0].header("last-event-id"), None);
        assert!(gets[1].header("last-event-id").unwrap().starts_with('l'));
    }

    #[actix_rt::test]
    async fn a_session_ended_on_the_listening_stream_closes_the_transport() {
        let handler = session_server(|r, _| {
            (r.method == "GET").then(|| status_reply(404, "Session not found"))
        });
        let (url, _) = serve(handler).await;
        let (t, mut rx) = start(&url, fast(), vec![]);
        open_session(&t, &mut rx).await;
        t.open_listen_stream();
        assert!(matches!(
            next(&mut rx).await,
            Inbound::Closed(TransportError::SessionExpired(404))
        ));
        assert_eq!(t.listen_state(), ListenState::Closed);
    }

    #[actix_rt::test]
    async fn replayed_requests_and_responses_are_dropped() {
        // The listening stream replays a request already seen on a POST stream.
        let handler = session_server(|r, _| match (r.method.as_str(), r.rpc_method().as_str()) {
            ("POST", "tools/call") => Some(sse_reply(vec![
                ev(
                    Some("x1"),
                    &json!({"jsonrpc": "2.0", "id": 50, "method": "roots/list"}),
                ),
                ev(Some("x2"), &result(2, json!({}))),
            ])),
            ("GET", _) => Some(sse_reply(vec![
                ev(
                    Some("x1"),
                    &json!({"jsonrpc": "2.0", "id": 50, "method": "roots/list"}),
                ),
                ev(
                    Some("y1"),
                    &json!({"jsonrpc": "2.0", "id": 50, "method": "roots/list"}),
                ),
                ev(Some("y2"), &result(2, json!({}))),
                Part::Hold,
            ])),
            _ => None,
        });
        let (url, _) = serve(handler).await;
        let (t, mut rx) = start(&url, fast(), vec![]);
        open_session(&t, &mut rx).await;
        request(&t, 2, "tools/call");
        assert!(matches!(
            next(&mut rx).await,
            Inbound::Message(Message::Request { .. })
        ));
        expect_result(next(&mut rx).await, 2);
        t.open_listen_stream();
        quiet(&mut rx, 300).await;
        assert_eq!(t.stats().duplicates_dropped.load(Ordering::Relaxed), 3);
    }
}
