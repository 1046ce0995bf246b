//! The MCP client core for one server, shared by every transport, by the daemon's Connection
//! actor and by the conformance client: it numbers requests, matches responses, answers the
//! server's own requests, times requests out and cancels them, and decorates requests for the
//! negotiated era. It tells a request that never left (`NotSent`) from one the server may have
//! seen and whose answer will not come (`Lost`: the connection closed or broke, or the server
//! cancelled it). A 2026-07-28 `input_required` result that asks only for its `requestState`
//! back is followed in [`McpClient::request_with`] (at most 8 rounds, within the call's
//! deadline); one that asks for input (`inputRequests`) is left to the caller to refuse, since
//! the daemon's client declares no client capabilities. A client made with an [`Elicitation`]
//! policy ([`McpClient::with_elicitation`]; only the conformance client) declares
//! `elicitation`, answers a server's `elicitation/create` with it, and follows an
//! `input_required` whose `inputRequests` are all `elicitation/create` with their
//! `inputResponses` (the same 8 rounds). `handshake` finds the era and opens the connection;
//! `discovery` lists the catalogue; `elicitation` holds the policy; `modern` says what a
//! 2026-07-28 request carries and what the next `input_required` round sends.
//!
//! Owns: the pending-request table and the era of one connection. Must not touch: actors, the
//! HTTP API, storage; it drives a transport only through [`crate::transport::Transport`].

mod deadlines;
pub mod discovery;
pub mod elicitation;
pub mod handshake;
pub mod listen;
mod modern;

pub use elicitation::Elicitation;
use modern::{continuation, modern_retry_version, Continuation, MRTR_METHODS};
pub use modern::{ModernParams, MAX_INPUT_ROUNDS};

use crate::protocol::era::{Era, ProtocolVersion};
use crate::protocol::headers::{self, ParamHeader};
use crate::protocol::jsonrpc::{self, ErrorObject, Message, RequestId};
use crate::protocol::params::Params;
use crate::protocol::result::ResultText;
use crate::transport::{
    Inbound, InboundSink, OutKind, Outbound, SharedTransport, TransportError, TransportKind,
};
use awc::http::header::{HeaderName, HeaderValue};
use serde_json::{json, Value};
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::Duration;
use tokio::sync::{mpsc, oneshot, Notify};

pub const CLIENT_NAME: &str = "albedo-mcp";
pub const CLIENT_VERSION: &str = env!("CARGO_PKG_VERSION");

/// Why a request has no result.
#[derive(Debug, Clone, thiserror::Error)]
pub enum RpcError {
    /// The request never left: the server did not see it.
    #[error("the request was not sent: {0}")]
    NotSent(TransportError),
    /// The request was sent and the transport lost it: its outcome is unknown.
    #[error("{0}")]
    Lost(TransportError),
    /// No answer in time; the request was cancelled. Its outcome is unknown.
    #[error("no answer within {} ms; the request was cancelled", .0.as_millis())]
    Timeout(Duration),
    /// The server answered with a JSON-RPC error.
    #[error("the server answered with an error: {0}")]
    Server(ErrorObject),
    /// The server's answer breaks the protocol.
    #[error("the server's answer is not valid: {0}")]
    Invalid(String),
}

impl RpcError {
    /// Whether the server may have acted on the request.
    pub fn outcome_unknown(&self) -> bool {
        matches!(self, RpcError::Lost(_) | RpcError::Timeout(_))
    }
}

/// Something the connection must hear about outside any request.
#[derive(Debug, Clone, PartialEq)]
pub enum ClientEvent {
    /// `tools`, `resources` or `prompts` changed.
    ListChanged(&'static str),
    /// The transport is gone.
    Closed(String),
}

/// Counters of what the server sent that could not be used.
#[derive(Debug, Default)]
pub struct ClientStats {
    pub unknown_responses: AtomicU64,
    pub server_requests: AtomicU64,
}

use deadlines::{Pending, Watch};

struct Inner {
    transport: OnceLock<SharedTransport>,
    next_id: AtomicI64,
    /// The requests in flight with their deadlines (`deadlines`).
    pending: Mutex<Pending>,
    /// Wakes the watch task that times requests out: an earlier deadline, a close, a drop.
    watch: Arc<Notify>,
    closed: Mutex<Option<String>>,
    is_closed: AtomicBool,
    era: OnceLock<ProtocolVersion>,
    events: mpsc::UnboundedSender<ClientEvent>,
    stats: ClientStats,
    /// The open `subscriptions/listen` request, closed with the client.
    listen_id: Mutex<Option<RequestId>>,
    /// Notifications heard on subscriptions (to tell a silent attempt from a useful one).
    listen_heard: AtomicU64,
    /// While the era is being decided: the ids of responses, in the order they arrived.
    answers: Mutex<Option<Vec<RequestId>>>,
    /// How a server asking for user input is answered (the daemon: not at all).
    elicitation: Elicitation,
}

/// A cheap handle on one connection to one server; clones share it.
#[derive(Clone)]
pub struct McpClient {
    inner: Arc<Inner>,
}

struct Sink(Weak<Inner>);

impl InboundSink for Sink {
    fn deliver(&self, ev: Inbound) {
        if let Some(inner) = self.0.upgrade() {
            inner.on_inbound(ev);
        }
    }
}

impl McpClient {
    /// A client without a transport yet, and the sink to give the transport. It declares no
    /// client capabilities ([`Elicitation::Undeclared`]).
    pub fn new() -> (
        McpClient,
        Arc<dyn InboundSink>,
        mpsc::UnboundedReceiver<ClientEvent>,
    ) {
        Self::with_elicitation(Elicitation::Undeclared)
    }

    /// [`Self::new`], answering a server that asks the user for input as `elicitation` says
    /// (and declaring the capability when it answers at all).
    pub fn with_elicitation(
        elicitation: Elicitation,
    ) -> (
        McpClient,
        Arc<dyn InboundSink>,
        mpsc::UnboundedReceiver<ClientEvent>,
    ) {
        let (tx, rx) = mpsc::unbounded_channel();
        let inner = Arc::new(Inner {
            transport: OnceLock::new(),
            next_id: AtomicI64::new(1),
            pending: Mutex::new(Pending::default()),
            watch: Arc::new(Notify::new()),
            closed: Mutex::new(None),
            is_closed: AtomicBool::new(false),
            era: OnceLock::new(),
            events: tx,
            stats: ClientStats::default(),
            listen_id: Mutex::new(None),
            listen_heard: AtomicU64::new(0),
            answers: Mutex::new(None),
            elicitation,
        });
        let sink: Arc<dyn InboundSink> = Arc::new(Sink(Arc::downgrade(&inner)));
        (McpClient { inner }, sink, rx)
    }

    pub fn attach(&self, transport: SharedTransport) {
        let _ = self.inner.transport.set(transport);
    }

    fn transport(&self) -> Result<&SharedTransport, TransportError> {
        self.inner
            .transport
            .get()
            .ok_or_else(|| TransportError::Closed("no transport".into()))
    }

    /// The transport, for the few things the connection asks of it directly.
    pub fn transport_handle(&self) -> Option<SharedTransport> {
        self.inner.transport.get().cloned()
    }

    pub fn transport_kind(&self) -> Option<TransportKind> {
        self.inner.transport.get().map(|t| t.kind())
    }

    pub fn protocol(&self) -> Option<&ProtocolVersion> {
        self.inner.era.get()
    }

    /// How this client answers a server that asks the user for input.
    pub fn elicitation(&self) -> Elicitation {
        self.inner.elicitation
    }

    pub(crate) fn set_protocol(&self, pv: ProtocolVersion) {
        if let Some(t) = self.inner.transport.get() {
            t.negotiated(&pv);
        }
        let _ = self.inner.era.set(pv);
    }

    pub fn is_closed(&self) -> bool {
        self.inner.is_closed()
    }

    /// Whether both handles are the same client.
    pub fn same(&self, other: &McpClient) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    pub fn closed_reason(&self) -> Option<String> {
        self.inner.closed.lock().ok().and_then(|g| g.clone())
    }

    pub fn stats(&self) -> &ClientStats {
        &self.inner.stats
    }

    /// Messages from the server that were logged and ignored: malformed or oversized ones,
    /// and responses to no request in flight.
    pub fn ignored_messages(&self) -> u64 {
        self.inner.stats.unknown_responses.load(Ordering::Relaxed)
            + self
                .inner
                .transport
                .get()
                .map(|t| t.ignored_messages())
                .unwrap_or(0)
    }

    /// A request is about to be made from this thread, a task of a `LocalSet`: the transport
    /// may move its reading here ([`crate::transport::Transport::read_here`]).
    pub fn read_here(&self) {
        if let Some(t) = self.inner.transport.get() {
            t.read_here();
        }
    }

    /// Close the transport (stdio: EOF, SIGTERM, SIGKILL; HTTP: DELETE the session).
    pub fn close(&self) {
        let listen = self.inner.listen_id.lock().ok().and_then(|mut g| g.take());
        if let Some(id) = listen {
            self.cancel(&id, "the client is closing");
        }
        if let Some(t) = self.inner.transport.get() {
            t.close();
        }
        // Every request still waiting was handed to the transport: the server may have seen
        // it, so its outcome is unknown (`Lost`), never "not sent".
        self.inner.fail_all(TransportError::Closed(
            "the connection was closed before the answer came".to_owned(),
        ));
    }

    pub(crate) fn set_listen_id(&self, id: Option<RequestId>) {
        if let Ok(mut g) = self.inner.listen_id.lock() {
            *g = id;
        }
    }

    /// Start (or stop) recording the order in which responses arrive.
    pub(crate) fn track_answers(&self, on: bool) {
        if let Ok(mut g) = self.inner.answers.lock() {
            *g = if on { Some(Vec::new()) } else { None };
        }
    }

    pub(crate) fn answer_order(&self) -> Vec<RequestId> {
        self.inner
            .answers
            .lock()
            .ok()
            .and_then(|g| g.clone())
            .unwrap_or_default()
    }

    pub(crate) fn listen_heard(&self) -> u64 {
        self.inner.listen_heard.load(Ordering::Relaxed)
    }

    /// Send a request and wait for its result, as a tree.
    pub async fn request(
        &self,
        method: &str,
        params: Option<Value>,
        timeout: Duration,
    ) -> Result<Value, RpcError> {
        self.request_with(method, params, timeout, &[]).await
    }

    /// Send a request, mirroring arguments into `Mcp-Param-*` headers as `param_headers` say.
    /// A modern server's `-32022` (unsupported version) is answered by sending the request
    /// again, once, as a version the server named and albedo speaks in that era. A modern
    /// `input_required` result that carries only `requestState` is followed at once (see
    /// [`MAX_INPUT_ROUNDS`]); one that carries `inputRequests` is returned as it is, for the
    /// caller to refuse, unless the client has an [`Elicitation`] policy: then requests that
    /// are all `elicitation/create` are answered and the request goes again with their
    /// `inputResponses`, and a request for anything else fails it. `timeout` bounds the whole
    /// exchange, every round included.
    pub async fn request_with(
        &self,
        method: &str,
        params: Option<Value>,
        timeout: Duration,
        param_headers: &[ParamHeader],
    ) -> Result<Value, RpcError> {
        let text = self
            .request_text_with(method, params.as_ref(), timeout, param_headers)
            .await?;
        tree(&text)
    }

    /// [`Self::request_with`], the result kept as the text the server sent ([`ResultText`]):
    /// what a tool call's answer is passed on as, never parsed into a tree. The params are
    /// borrowed (a caller that may send the request again keeps them).
    pub async fn request_text_with(
        &self,
        method: &str,
        params: Option<&Value>,
        timeout: Duration,
        param_headers: &[ParamHeader],
    ) -> Result<ResultText, RpcError> {
        self.request_text_params(method, params.map(Params::Tree), timeout, param_headers)
            .await
    }

    /// [`Self::request_text_with`] with params that may be a call's name and the arguments'
    /// own text ([`Params::Named`]), written out as they came.
    pub async fn request_text_params(
        &self,
        method: &str,
        params: Option<Params<'_>>,
        timeout: Duration,
        param_headers: &[ParamHeader],
    ) -> Result<ResultText, RpcError> {
        let deadline = tokio::time::Instant::now() + timeout;
        let mut as_version: Option<ProtocolVersion> = None;
        let mut next: Option<Continuation> = None;
        let mut rounds = 0;
        let mut first = true;
        loop {
            let modern =
                as_version.as_ref().or(self.inner.era.get()).map(|p| p.era) == Some(Era::Modern);
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            if !first && left.is_zero() {
                // The time ran out between rounds: nothing more is sent.
                return Err(RpcError::Timeout(timeout));
            }
            first = false;
            let started = self.start_request_with_state(
                method,
                params,
                param_headers,
                as_version.as_ref(),
                next.as_ref(),
            );
            let (id, rx) = match started {
                Ok(x) => x,
                // The server already holds an earlier round of this request, which it may
                // have acted on: a later round that cannot leave leaves the outcome unknown.
                Err(RpcError::NotSent(e)) if rounds > 0 => return Err(RpcError::Lost(e)),
                Err(e) => return Err(e),
            };
            let result = match self.finish_request_text(id, rx, left).await {
                Ok(v) => v,
                Err(RpcError::Server(e))
                    if modern
                        && as_version.is_none()
                        && e.code == jsonrpc::UNSUPPORTED_PROTOCOL_VERSION =>
                {
                    let Some(pv) = modern_retry_version(&e) else {
                        return Err(RpcError::Server(e));
                    };
                    tracing::debug!(%method, version = %pv.version, "unsupported version; sending the request again");
                    as_version = Some(pv);
                    continue;
                }
                Err(RpcError::Timeout(_)) => return Err(RpcError::Timeout(timeout)),
                Err(e) => return Err(e),
            };
            if !(modern && MRTR_METHODS.contains(&method))
                || result.head().result_type() != "input_required"
            {
                return Ok(result);
            }
            // Rare: an input_required result is read as a tree.
            let tree = tree(&result)?;
            match continuation(&tree, self.inner.elicitation).map_err(RpcError::Invalid)? {
                None => return Ok(result),
                Some(c) => {
                    // Not a retry of a failed call: the spec's continuation of the same
                    // request (MRTR). The server asked for its own state back, or for input
                    // the elicitation policy gave; the request goes again at once, with a new
                    // id, the answers as `inputResponses` and `requestState` echoed exactly
                    // (left out when the server gave none).
                    if rounds == MAX_INPUT_ROUNDS {
                        return Err(RpcError::Invalid(format!(
                            "{method}: the server answered input_required {} times in a row \
                             (asking for its requestState back or for input); albedo sends the \
                             request again at most {MAX_INPUT_ROUNDS} times",
                            MAX_INPUT_ROUNDS + 1
                        )));
                    }
                    rounds += 1;
                    tracing::debug!(%method, round = rounds, answers = c.responses.is_some(), state = c.state.is_some(), "input_required; sending the request again");
                    next = Some(c);
                }
            }
        }
    }

    /// Send a request as a given protocol version, before the era is settled (discovery).
    pub(crate) fn start_request_as(
        &self,
        method: &str,
        params: Option<Value>,
        as_version: Option<&ProtocolVersion>,
    ) -> Result<(RequestId, oneshot::Receiver<Result<ResultText, RpcError>>), RpcError> {
        self.start_request(method, params.as_ref(), &[], as_version)
    }

    /// Number, register and send one request. The params are borrowed: a request that may
    /// be sent again (`-32022`) is never copied, and modern `_meta` is merged while the
    /// body is serialized.
    fn start_request(
        &self,
        method: &str,
        params: Option<&Value>,
        param_headers: &[ParamHeader],
        as_version: Option<&ProtocolVersion>,
    ) -> Result<(RequestId, oneshot::Receiver<Result<ResultText, RpcError>>), RpcError> {
        self.start_request_with_state(
            method,
            params.map(Params::Tree),
            param_headers,
            as_version,
            None,
        )
    }

    /// [`Self::start_request`], continuing a 2026-07-28 `input_required` result: its
    /// `requestState` echoed and the `inputResponses` given, in the params (which then carry
    /// no `requestState` or `inputResponses` of the caller's).
    fn start_request_with_state(
        &self,
        method: &str,
        params: Option<Params<'_>>,
        param_headers: &[ParamHeader],
        as_version: Option<&ProtocolVersion>,
        next: Option<&Continuation>,
    ) -> Result<(RequestId, oneshot::Receiver<Result<ResultText, RpcError>>), RpcError> {
        let transport = self.transport().map_err(RpcError::NotSent)?;
        if let Some(reason) = self.closed_reason() {
            return Err(RpcError::NotSent(TransportError::Closed(reason)));
        }
        let id = RequestId::Number(self.inner.next_id.fetch_add(1, Ordering::Relaxed));
        let pv = as_version.or(self.inner.era.get());
        let modern = pv.map(|p| p.era == Era::Modern).unwrap_or(false);
        let mut hdrs = Vec::new();
        if modern && transport.kind() == TransportKind::Http {
            // A value that is not a header value (none of these can be: a version we know, a
            // method of ours, an encoded name) is left out.
            if let Some(v) = pv.and_then(|p| HeaderValue::from_str(&p.version).ok()) {
                hdrs.push((headers::PROTOCOL_VERSION, v));
            }
            if let Ok(v) = HeaderValue::from_str(method) {
                hdrs.push((headers::METHOD, v));
            }
            let name = match method {
                "tools/call" | "prompts/get" => params.and_then(|p| p.str_at("name")),
                "resources/read" => params.and_then(|p| p.str_at("uri")),
                _ => None,
            };
            if let Some(v) = name.and_then(|n| HeaderValue::try_from(headers::encode_value(n)).ok())
            {
                hdrs.push((headers::NAME, v));
            }
            // The arguments are read only for the headers a server asked for.
            let args = match param_headers {
                [] => None,
                _ => params.and_then(|p| p.arguments()),
            };
            if let Some(args) = args {
                for h in param_headers {
                    let value = headers::extract(&args, &h.path).and_then(headers::param_value);
                    let name = HeaderName::try_from(format!("mcp-param-{}", h.name));
                    if let (Some(v), Ok(n)) = (value, name) {
                        if let Ok(v) = HeaderValue::try_from(v) {
                            hdrs.push((n, v));
                        }
                    }
                }
            }
        }
        let body = match pv.filter(|_| modern) {
            Some(p) => jsonrpc::request_bytes_of(
                &id,
                method,
                &ModernParams {
                    params,
                    version: &p.version,
                    request_state: next.and_then(|c| c.state.as_deref()),
                    input_responses: next.and_then(|c| c.responses.as_ref()),
                    elicitation: self.inner.elicitation,
                },
            ),
            None => match &params {
                Some(p) => jsonrpc::request_bytes_of(&id, method, p),
                None => jsonrpc::request_bytes(&id, method, None),
            },
        };
        let (tx, rx) = oneshot::channel();
        if let Ok(mut p) = self.inner.pending.lock() {
            p.insert(id.clone(), tx);
        }
        let out = Outbound {
            kind: OutKind::Request {
                id: id.clone(),
                method: method.to_owned(),
            },
            body,
            headers: hdrs,
            ack: None,
        };
        if let Err(e) = transport.send(out) {
            self.inner.take_pending(&id);
            return Err(RpcError::NotSent(e));
        }
        Ok((id, rx))
    }

    pub(crate) async fn finish_request(
        &self,
        id: RequestId,
        rx: oneshot::Receiver<Result<ResultText, RpcError>>,
        timeout: Duration,
    ) -> Result<Value, RpcError> {
        tree(&self.finish_request_text(id, rx, timeout).await?)
    }

    /// [`Self::finish_request`], the result kept as text.
    pub(crate) async fn finish_request_text(
        &self,
        id: RequestId,
        rx: oneshot::Receiver<Result<ResultText, RpcError>>,
        timeout: Duration,
    ) -> Result<ResultText, RpcError> {
        // The deadline is a field of the request's entry, timed out by the client's watch
        // task (`deadlines`): no timer of its own.
        let deadline = tokio::time::Instant::now() + timeout;
        let watch = match self.inner.pending.lock() {
            Ok(mut p) => p.wait_until(&id, deadline),
            Err(_) => Watch::Nothing,
        };
        match watch {
            Watch::Nothing => {}
            Watch::Notify => self.inner.watch.notify_one(),
            Watch::Start => deadlines::start(Arc::downgrade(&self.inner), self.inner.watch.clone()),
        }
        match rx.await {
            Ok(Err(RpcError::Timeout(_))) => {
                self.cancel(&id, "timed out");
                Err(RpcError::Timeout(timeout))
            }
            Ok(r) => r,
            Err(_) => Err(RpcError::Lost(TransportError::Closed(
                self.closed_reason()
                    .unwrap_or_else(|| "the connection was closed".into()),
            ))),
        }
    }

    /// Stop waiting for a request without telling the server (`initialize`, which must not
    /// be cancelled, when the probe decided the era first).
    pub(crate) fn forget(&self, id: &RequestId) {
        self.inner.take_pending(id);
    }

    /// Stop waiting for a request and tell the server: a modern server over HTTP by closing
    /// the request's stream, everyone else with `notifications/cancelled`.
    pub fn cancel(&self, id: &RequestId, reason: &str) {
        self.inner.take_pending(id);
        let Ok(t) = self.transport() else { return };
        t.abort(id);
        let modern = self
            .inner
            .era
            .get()
            .map(|p| p.era == Era::Modern)
            .unwrap_or(false);
        if !(modern && t.kind() == TransportKind::Http) {
            let params = json!({"requestId": id, "reason": reason});
            let _ = self.notify_nowait("notifications/cancelled", Some(params));
        }
    }

    /// Send a notification without waiting for the transport to confirm it.
    pub fn notify_nowait(&self, method: &str, params: Option<Value>) -> Result<(), TransportError> {
        let t = self.transport()?;
        let body = jsonrpc::notification_bytes(method, params.as_ref());
        t.send(Outbound {
            kind: OutKind::Notification {
                method: method.to_owned(),
            },
            body,
            headers: Vec::new(),
            ack: None,
        })
    }

    /// Send a notification and wait until the server accepted it (HTTP: 202).
    pub async fn notify(
        &self,
        method: &str,
        params: Option<Value>,
        timeout: Duration,
    ) -> Result<(), TransportError> {
        let t = self.transport()?;
        let body = jsonrpc::notification_bytes(method, params.as_ref());
        let (tx, rx) = oneshot::channel();
        t.send(Outbound {
            kind: OutKind::Notification {
                method: method.to_owned(),
            },
            body,
            headers: Vec::new(),
            ack: Some(tx),
        })?;
        match tokio::time::timeout(timeout, rx).await {
            Ok(Ok(r)) => r,
            Ok(Err(_)) => Ok(()),
            Err(_) => Err(TransportError::Lost(format!(
                "{method} was not accepted within {} ms",
                timeout.as_millis()
            ))),
        }
    }
}

/// A result read as a tree (it was checked to be JSON when its message was parsed).
pub fn tree(result: &ResultText) -> Result<Value, RpcError> {
    result
        .to_value()
        .map_err(|e| RpcError::Invalid(format!("the result could not be read: {e}")))
}

/// The answer for a request that was handed to the transport when the whole connection ended
/// (the client closed it, or the transport reported `Closed`): unknown (`Lost`), unless the
/// transport says nothing ever reached a server (the server process could not be started, or
/// no connection could be made).
fn in_flight_outcome(error: TransportError) -> RpcError {
    match error {
        TransportError::Spawn(_) | TransportError::Connect(_) => RpcError::NotSent(error),
        _ => RpcError::Lost(error),
    }
}

/// The longest part of a server's cancellation reason that is kept.
const CANCEL_REASON_CHARS: usize = 200;

/// The answer for one of our requests that the server cancelled (`notifications/cancelled`):
/// its outcome is unknown. The server's reason is kept, without control characters and cut
/// to 200 characters.
fn server_cancelled(reason: Option<&str>) -> RpcError {
    let reason: String = reason
        .unwrap_or_default()
        .chars()
        .filter(|c| !c.is_control())
        .take(CANCEL_REASON_CHARS)
        .collect();
    let reason = reason.trim();
    let text = if reason.is_empty() {
        "the server cancelled the request".to_owned()
    } else {
        format!("the server cancelled the request: {reason}")
    };
    RpcError::Lost(TransportError::Lost(text))
}

impl Drop for Inner {
    /// The last handle is gone: the watch task, which holds the client weakly, ends.
    fn drop(&mut self) {
        self.watch.notify_one();
    }
}

impl Inner {
    /// A response arrived: note its place in the order (while that is tracked) and take its
    /// waiter.
    fn answered(&self, id: &RequestId) -> Option<oneshot::Sender<Result<ResultText, RpcError>>> {
        if let Ok(mut g) = self.answers.lock() {
            if let Some(v) = g.as_mut() {
                v.push(id.clone());
            }
        }
        self.take_pending(id)
    }

    fn take_pending(
        &self,
        id: &RequestId,
    ) -> Option<oneshot::Sender<Result<ResultText, RpcError>>> {
        self.pending.lock().ok().and_then(|mut p| p.remove(id))
    }

    fn is_closed(&self) -> bool {
        self.is_closed.load(Ordering::Acquire)
    }

    fn fail_all(&self, error: TransportError) {
        self.is_closed.store(true, Ordering::Release);
        if let Ok(mut c) = self.closed.lock() {
            if c.is_none() {
                *c = Some(error.to_string());
            }
        }
        let drained = match self.pending.lock() {
            Ok(mut p) => p.drain(),
            Err(_) => Vec::new(),
        };
        // The watch task ends.
        self.watch.notify_one();
        for tx in drained {
            let _ = tx.send(Err(in_flight_outcome(error.clone())));
        }
    }

    fn on_inbound(&self, ev: Inbound) {
        match ev {
            Inbound::Message(Message::Response { id, result }) => match self.answered(&id) {
                Some(tx) => {
                    let _ = tx.send(result.map_err(RpcError::Server));
                }
                None => {
                    self.stats.unknown_responses.fetch_add(1, Ordering::Relaxed);
                    tracing::debug!(%id, "a response to no request in flight was ignored");
                }
            },
            Inbound::Message(Message::Request { id, method, params }) => {
                self.stats.server_requests.fetch_add(1, Ordering::Relaxed);
                let elicited = match method.as_str() {
                    "elicitation/create" => self.elicitation.answer(params.as_ref()),
                    _ => None,
                };
                let result = if method == "ping" {
                    Ok(ResultText::from_value(&json!({})))
                } else if let Some(answer) = elicited {
                    tracing::debug!(action = %answer["action"], "answered the server's elicitation/create");
                    Ok(ResultText::from_value(&answer))
                } else if self.elicitation.declared() {
                    Err(ErrorObject::new(
                        jsonrpc::METHOD_NOT_FOUND,
                        format!(
                            "Method not found: {method} (this client declares only elicitation)"
                        ),
                    ))
                } else {
                    Err(ErrorObject::new(
                        jsonrpc::METHOD_NOT_FOUND,
                        format!(
                            "Method not found: {method} (this client declares no capabilities)"
                        ),
                    ))
                };
                let body = Message::Response { id, result }.to_bytes();
                if let Some(t) = self.transport.get() {
                    let _ = t.send(Outbound {
                        kind: OutKind::Response,
                        body,
                        headers: Vec::new(),
                        ack: None,
                    });
                }
            }
            Inbound::Message(Message::Notification { method, params }) => {
                if params
                    .as_ref()
                    .and_then(|p| p.get("_meta"))
                    .and_then(|m| m.get("io.modelcontextprotocol/subscriptionId"))
                    .is_some()
                {
                    self.listen_heard.fetch_add(1, Ordering::Relaxed);
                }
                let kind = match method.as_str() {
                    "notifications/tools/list_changed" => Some("tools"),
                    "notifications/resources/list_changed" => Some("resources"),
                    "notifications/prompts/list_changed" => Some("prompts"),
                    _ => None,
                };
                if let Some(k) = kind {
                    let _ = self.events.send(ClientEvent::ListChanged(k));
                } else if method == "notifications/cancelled" {
                    // A server ending a subscription, or giving up on one of our requests. It
                    // may have acted on the request before it stopped: the outcome is unknown.
                    let p = params.as_ref();
                    if let Some(id) = p
                        .and_then(|p| p.get("requestId"))
                        .and_then(|v| serde_json::from_value::<RequestId>(v.clone()).ok())
                    {
                        if let Some(tx) = self.take_pending(&id) {
                            let reason = p.and_then(|p| p.get("reason")).and_then(Value::as_str);
                            let _ = tx.send(Err(server_cancelled(reason)));
                        }
                    }
                } else {
                    tracing::trace!(%method, "notification from the server");
                }
            }
            Inbound::Message(Message::OrphanError(e)) => {
                tracing::debug!(error = %e, "an error response without an id was ignored");
            }
            Inbound::Lost { id, error } => {
                if let Some(tx) = self.take_pending(&id) {
                    let err = if error.maybe_delivered() {
                        RpcError::Lost(error)
                    } else {
                        RpcError::NotSent(error)
                    };
                    let _ = tx.send(Err(err));
                }
            }
            Inbound::Closed(error) => {
                let reason = error.to_string();
                self.fail_all(error);
                let _ = self.events.send(ClientEvent::Closed(reason));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Requests sent: id, extra headers, body.
    type Sent = Vec<(RequestId, Vec<(String, String)>, Value)>;

    /// Headers as text (names lower-case, as they go out).
    fn texts(h: &[(HeaderName, HeaderValue)]) -> Vec<(String, String)> {
        h.iter()
            .map(|(n, v)| (n.as_str().to_owned(), v.to_str().unwrap_or("").to_owned()))
            .collect()
    }

    /// A transport that keeps what is sent; the test answers through the client's sink.
    #[derive(Default)]
    struct Recorder {
        sent: Mutex<Sent>,
        /// Our answers to the server's own requests.
        answers: Mutex<Vec<Value>>,
    }

    impl crate::transport::Transport for Recorder {
        fn kind(&self) -> TransportKind {
            TransportKind::Http
        }
        fn send(&self, msg: Outbound) -> Result<(), TransportError> {
            match msg.kind {
                OutKind::Request { id, .. } => {
                    let body: Value = serde_json::from_slice(&msg.body).unwrap();
                    self.sent
                        .lock()
                        .unwrap()
                        .push((id, texts(&msg.headers), body));
                }
                OutKind::Response => {
                    let body: Value = serde_json::from_slice(&msg.body).unwrap();
                    self.answers.lock().unwrap().push(body);
                }
                _ => {}
            }
            Ok(())
        }
        fn close(&self) {}
    }

    fn unsupported(id: RequestId, supported: &[&str]) -> Inbound {
        let mut e = ErrorObject::new(jsonrpc::UNSUPPORTED_PROTOCOL_VERSION, "Unsupported");
        e.data = Some(json!({"supported": supported, "requested": "2026-07-28"}));
        Inbound::Message(Message::Response { id, result: Err(e) })
    }

    /// Run `tools/call` as `pv`, answering the first send with `-32022` naming `supported`
    /// and any second one with a result; what was sent and what the call returned.
    async fn refused_once(
        pv: ProtocolVersion,
        supported: &'static [&'static str],
    ) -> (Sent, Result<Value, RpcError>) {
        let (client, sink, _events) = McpClient::new();
        let rec = Arc::new(Recorder::default());
        client.attach(rec.clone());
        client.set_protocol(pv);
        let answer = async {
            let mut answered = 0;
            for _ in 0..200 {
                let sent: Vec<RequestId> = rec
                    .sent
                    .lock()
                    .unwrap()
                    .iter()
                    .map(|s| s.0.clone())
                    .collect();
                if sent.len() > answered {
                    let id = sent[answered].clone();
                    sink.deliver(if answered == 0 {
                        unsupported(id, supported)
                    } else {
                        Inbound::Message(Message::Response {
                            id,
                            result: Ok(json!({"content": []}).into()),
                        })
                    });
                    answered += 1;
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        };
        let call = client.request(
            "tools/call",
            Some(json!({"name": "t", "arguments": {}})),
            Duration::from_secs(5),
        );
        let (r, _) = tokio::select! {
            r = call => (r, ()),
            _ = answer => panic!("the call never finished"),
        };
        let sent = rec.sent.lock().unwrap().drain(..).collect();
        (sent, r)
    }

    #[tokio::test]
    async fn a_modern_request_refused_with_32022_is_sent_again_once() {
        let (sent, r) = refused_once(ProtocolVersion::modern(), &["2026-07-28"]).await;
        assert!(r.is_ok(), "{r:?}");
        assert_eq!(sent.len(), 2);
        assert_ne!(sent[0].0, sent[1].0, "the retry has a new id");
        for (_, hdrs, body) in &sent {
            assert!(hdrs.contains(&("mcp-protocol-version".into(), "2026-07-28".into())));
            assert_eq!(
                body["params"]["_meta"]["io.modelcontextprotocol/protocolVersion"],
                "2026-07-28"
            );
            assert_eq!(body["params"]["name"], "t");
        }
    }

    #[tokio::test]
    async fn no_retry_without_a_version_we_speak_or_outside_the_modern_era() {
        // Only a version `initialize` opens: the refusal is the answer.
        let (sent, r) = refused_once(ProtocolVersion::modern(), &["2025-06-18"]).await;
        assert_eq!(sent.len(), 1);
        assert!(
            matches!(&r, Err(RpcError::Server(e)) if e.code == jsonrpc::UNSUPPORTED_PROTOCOL_VERSION),
            "{r:?}"
        );
        // A legacy session is never re-sent.
        let (sent, r) = refused_once(ProtocolVersion::legacy("2025-11-25"), &["2026-07-28"]).await;
        assert_eq!(sent.len(), 1);
        assert!(matches!(r, Err(RpcError::Server(_))), "{r:?}");
    }

    /// A server's answer to the n-th request (from 0) it was sent, given the request's body;
    /// `None`: no answer.
    type Script = Box<dyn Fn(usize, &Value) -> Option<Result<Value, ErrorObject>> + Send + Sync>;

    /// A transport that keeps what is sent and answers each request at once, as `script` says.
    struct Scripted {
        sent: Mutex<Sent>,
        sink: OnceLock<Arc<dyn InboundSink>>,
        script: Script,
        /// From this request on (counting from 0), `send` fails: the message never leaves.
        refuse_from: std::sync::atomic::AtomicUsize,
    }

    impl crate::transport::Transport for Scripted {
        fn kind(&self) -> TransportKind {
            TransportKind::Http
        }
        fn send(&self, msg: Outbound) -> Result<(), TransportError> {
            let OutKind::Request { id, .. } = msg.kind else {
                return Ok(());
            };
            let body: Value = serde_json::from_slice(&msg.body).unwrap();
            let n = {
                let mut sent = self.sent.lock().unwrap();
                if sent.len() >= self.refuse_from.load(Ordering::Relaxed) {
                    return Err(TransportError::Closed("refused".into()));
                }
                sent.push((id.clone(), texts(&msg.headers), body.clone()));
                sent.len() - 1
            };
            if let (Some(result), Some(sink)) = ((self.script)(n, &body), self.sink.get()) {
                sink.deliver(Inbound::Message(Message::Response {
                    id,
                    result: result.map(ResultText::from),
                }));
            }
            Ok(())
        }
        fn close(&self) {}
    }

    fn scripted(
        pv: ProtocolVersion,
        script: impl Fn(usize, &Value) -> Option<Result<Value, ErrorObject>> + Send + Sync + 'static,
    ) -> (McpClient, Arc<Scripted>) {
        scripted_with(Some(pv), Elicitation::Undeclared, script)
    }

    /// [`scripted`] with an elicitation policy, and with the era left to a handshake when
    /// `pv` is `None`.
    fn scripted_with(
        pv: Option<ProtocolVersion>,
        elicitation: Elicitation,
        script: impl Fn(usize, &Value) -> Option<Result<Value, ErrorObject>> + Send + Sync + 'static,
    ) -> (McpClient, Arc<Scripted>) {
        let (client, sink, _events) = McpClient::with_elicitation(elicitation);
        let t = Arc::new(Scripted {
            sent: Mutex::new(Vec::new()),
            sink: OnceLock::new(),
            script: Box::new(script),
            refuse_from: std::sync::atomic::AtomicUsize::new(usize::MAX),
        });
        let _ = t.sink.set(sink);
        client.attach(t.clone());
        if let Some(pv) = pv {
            client.set_protocol(pv);
        }
        (client, t)
    }

    fn state_only(state: &str) -> Option<Result<Value, ErrorObject>> {
        Some(Ok(
            json!({"resultType": "input_required", "requestState": state}),
        ))
    }

    fn done() -> Option<Result<Value, ErrorObject>> {
        Some(Ok(
            json!({"resultType": "complete", "content": [{"type": "text", "text": "ok"}]}),
        ))
    }

    async fn call_tool(client: &McpClient) -> Result<Value, RpcError> {
        client
            .request(
                "tools/call",
                Some(json!({"name": "t", "arguments": {"a": 1}})),
                Duration::from_secs(5),
            )
            .await
    }

    /// States no server would pick but any server may: quotes, escapes, line breaks, the
    /// JavaScript line separators, non-ASCII, an emoji, and the empty string.
    const STATES: [&str; 3] = ["eyJ\"a\":1}\\n\n\t \u{2028}\u{2029} é 🦀 /+=", "", "second"];

    #[tokio::test]
    async fn a_state_only_input_required_is_sent_again_with_the_state_echoed_and_a_new_id() {
        let (client, t) = scripted(ProtocolVersion::modern(), |n, _| match n {
            0..=2 => state_only(STATES[n]),
            _ => done(),
        });
        let r = call_tool(&client).await.expect("the call completes");
        assert_eq!(r["content"][0]["text"], "ok");
        let sent = t.sent.lock().unwrap().clone();
        assert_eq!(sent.len(), 4);
        assert!(
            sent[0].2["params"].get("requestState").is_none(),
            "the first request carries no state"
        );
        for (i, (id, hdrs, body)) in sent.iter().enumerate() {
            let p = &body["params"];
            assert_eq!(p["name"], "t");
            assert_eq!(p["arguments"], json!({"a": 1}));
            assert!(p.get("inputResponses").is_none());
            assert_eq!(
                p["_meta"]["io.modelcontextprotocol/protocolVersion"],
                "2026-07-28"
            );
            assert!(hdrs.contains(&("mcp-name".into(), "t".into())));
            if i > 0 {
                assert_eq!(p["requestState"], STATES[i - 1], "round {i}");
            }
            for (other, _, _) in &sent[..i] {
                assert_ne!(other, id, "every round has a new id");
            }
        }
    }

    #[tokio::test]
    async fn state_only_rounds_stop_after_eight_resends_with_an_error_that_says_so() {
        let (client, t) = scripted(ProtocolVersion::modern(), |n, _| {
            state_only(&format!("s{n}"))
        });
        let r = call_tool(&client).await;
        let sent = t.sent.lock().unwrap().clone();
        assert_eq!(sent.len(), 1 + MAX_INPUT_ROUNDS);
        assert_eq!(sent[MAX_INPUT_ROUNDS].2["params"]["requestState"], "s7");
        match r {
            Err(RpcError::Invalid(m)) => {
                assert!(m.contains("requestState"), "{m}");
                assert!(m.contains("at most 8 times"), "{m}");
            }
            other => panic!("{other:?}"),
        }
    }

    #[tokio::test]
    async fn input_required_with_input_requests_is_returned_for_the_caller_to_refuse() {
        let asks = json!({"resultType": "input_required",
            "inputRequests": {"x": {"method": "elicitation/create", "params": {}}},
            "requestState": "st"});
        let a = asks.clone();
        let (client, t) = scripted(ProtocolVersion::modern(), move |_, _| Some(Ok(a.clone())));
        let r = call_tool(&client).await.expect("an answer");
        assert_eq!(r, asks);
        assert_eq!(t.sent.lock().unwrap().len(), 1, "nothing is sent again");
        assert!(matches!(
            discovery::check_complete(&r),
            Err(RpcError::Invalid(_))
        ));

        // An empty `inputRequests` asks for nothing: the state alone is sent back.
        let (client, t) = scripted(ProtocolVersion::modern(), |n, _| match n {
            0 => Some(Ok(json!({"resultType": "input_required",
                "inputRequests": {}, "requestState": "st"}))),
            _ => done(),
        });
        call_tool(&client).await.expect("the call completes");
        let sent = t.sent.lock().unwrap().clone();
        assert_eq!(sent.len(), 2);
        assert_eq!(sent[1].2["params"]["requestState"], "st");
    }

    #[tokio::test]
    async fn no_state_rounds_outside_mrtr_requests_or_the_modern_era_or_for_a_malformed_result() {
        // Legacy era: the result is the caller's to judge.
        let (client, t) = scripted(ProtocolVersion::legacy("2025-11-25"), |_, _| {
            state_only("st")
        });
        let r = call_tool(&client).await.expect("an answer");
        assert_eq!(r["resultType"], "input_required");
        assert_eq!(t.sent.lock().unwrap().len(), 1);
        // A request that may not be answered with input_required.
        let (client, t) = scripted(ProtocolVersion::modern(), |_, _| state_only("st"));
        let r = client
            .request("tools/list", None, Duration::from_secs(5))
            .await
            .expect("an answer");
        assert_eq!(r["resultType"], "input_required");
        assert_eq!(t.sent.lock().unwrap().len(), 1);
        // Neither inputRequests nor requestState, or a state that is not a string.
        for bad in [
            json!({"resultType": "input_required"}),
            json!({"resultType": "input_required", "requestState": 7}),
        ] {
            let b = bad.clone();
            let (client, t) = scripted(ProtocolVersion::modern(), move |_, _| Some(Ok(b.clone())));
            let r = call_tool(&client).await;
            assert!(matches!(r, Err(RpcError::Invalid(_))), "{bad}: {r:?}");
            assert_eq!(t.sent.lock().unwrap().len(), 1);
        }
    }

    #[tokio::test]
    async fn a_state_round_that_cannot_leave_leaves_the_outcome_unknown() {
        let (client, t) = scripted(ProtocolVersion::modern(), |_, _| state_only("st"));
        t.refuse_from.store(1, Ordering::Relaxed);
        let r = call_tool(&client).await;
        assert!(
            matches!(&r, Err(e @ RpcError::Lost(_)) if e.outcome_unknown()),
            "the server holds the first round: {r:?}"
        );
        // The very first round not leaving is simply not sent.
        let (client, t) = scripted(ProtocolVersion::modern(), |_, _| done());
        t.refuse_from.store(0, Ordering::Relaxed);
        assert!(matches!(
            call_tool(&client).await,
            Err(RpcError::NotSent(_))
        ));
    }

    #[tokio::test(start_paused = true)]
    async fn state_only_rounds_share_the_call_deadline() {
        // The first round is answered; the second never is.
        let (client, t) = scripted(ProtocolVersion::modern(), |n, _| match n {
            0 => state_only("st"),
            _ => None,
        });
        let timeout = Duration::from_secs(30);
        let r = client
            .request(
                "tools/call",
                Some(json!({"name": "t", "arguments": {}})),
                timeout,
            )
            .await;
        assert!(
            matches!(r, Err(RpcError::Timeout(d)) if d == timeout),
            "the whole call's timeout is reported: {r:?}"
        );
        assert_eq!(t.sent.lock().unwrap().len(), 2);
        assert!(
            client.inner.pending.lock().unwrap().is_empty(),
            "the unanswered round was cancelled"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn each_request_times_out_at_its_own_deadline_and_the_watch_task_ends_with_the_client() {
        let tasks = || {
            tokio::runtime::Handle::current()
                .metrics()
                .num_alive_tasks()
        };
        let before = tasks();
        let (client, sink, _events) = McpClient::new();
        let rec = Arc::new(Recorder::default());
        client.attach(rec.clone());
        let s = Duration::from_secs(1);
        let t0 = tokio::time::Instant::now();
        // Waiting 30 s starts the watch task; 60 s sets nothing; 10 s wakes it earlier; the
        // answered one is not timed out.
        let call = |timeout: Duration| {
            let client = client.clone();
            async move {
                let (id, rx) = client
                    .start_request_as("tools/call", Some(json!({"name": "t"})), None)
                    .unwrap();
                let r = client.finish_request(id, rx, timeout).await;
                (r, tokio::time::Instant::now() - t0)
            }
        };
        let a = tokio::spawn(call(30 * s));
        tokio::task::yield_now().await;
        let b = tokio::spawn(call(60 * s));
        tokio::task::yield_now().await;
        let c = tokio::spawn(call(10 * s));
        let d = tokio::spawn(call(20 * s));
        tokio::task::yield_now().await;
        let answered = rec.sent.lock().unwrap()[3].0.clone();
        sink.deliver(Inbound::Message(Message::Response {
            id: answered,
            result: Ok(ResultText::from_value(&json!({"ok": true}))),
        }));
        let (d, _) = d.await.unwrap();
        assert_eq!(d.unwrap()["ok"], true);
        for (task, timeout) in [(c, 10 * s), (a, 30 * s), (b, 60 * s)] {
            let (r, at) = task.await.unwrap();
            assert!(
                matches!(r, Err(RpcError::Timeout(d)) if d == timeout),
                "{timeout:?}: {r:?}"
            );
            assert_eq!(at, timeout, "timed out at its own deadline");
        }
        assert!(client.inner.pending.lock().unwrap().is_empty());
        assert_eq!(tasks(), before + 1, "one watch task for the client");
        drop(client);
        for _ in 0..4 {
            tokio::task::yield_now().await;
        }
        assert_eq!(tasks(), before, "the watch task ended with its client");
    }

    #[tokio::test(start_paused = true)]
    async fn closing_the_client_leaves_requests_in_flight_lost_not_unsent() {
        let (client, _sink, _events) = McpClient::new();
        let rec = Arc::new(Recorder::default());
        client.attach(rec.clone());
        let (a, arx) = client
            .start_request_as("tools/call", Some(json!({"name": "a"})), None)
            .unwrap();
        let (_b, brx) = client
            .start_request_as("tools/call", Some(json!({"name": "b"})), None)
            .unwrap();
        // One times out (and is cancelled), then the client closes.
        let r = client
            .finish_request(a, arx, Duration::from_millis(50))
            .await;
        assert!(matches!(r, Err(RpcError::Timeout(_))), "{r:?}");
        client.close();
        let r = brx.await.expect("the other request is answered");
        assert!(
            matches!(&r, Err(e @ RpcError::Lost(_)) if e.outcome_unknown()),
            "written to the server, so its outcome is unknown: {r:?}"
        );
        // A request started after the close never leaves: that one is not sent.
        let r = client.start_request_as("tools/call", None, None);
        assert!(matches!(r, Err(RpcError::NotSent(_))), "{:?}", r.err());
    }

    #[tokio::test]
    async fn a_closed_transport_leaves_requests_lost_unless_nothing_could_go_out() {
        let cases = [
            (TransportError::SessionExpired(404), true),
            (
                TransportError::Lost("the server closed its output".into()),
                true,
            ),
            (TransportError::Closed("gone".into()), true),
            (TransportError::Spawn("no such command".into()), false),
            (TransportError::Connect("refused".into()), false),
        ];
        for (error, lost) in cases {
            let (client, sink, mut events) = McpClient::new();
            client.attach(Arc::new(Recorder::default()));
            let (_, rx) = client.start_request_as("tools/call", None, None).unwrap();
            sink.deliver(Inbound::Closed(error.clone()));
            let r = rx.await.expect("answered");
            if lost {
                assert!(matches!(r, Err(RpcError::Lost(_))), "{error:?}: {r:?}");
            } else {
                assert!(matches!(r, Err(RpcError::NotSent(_))), "{error:?}: {r:?}");
            }
            assert!(matches!(events.try_recv(), Ok(ClientEvent::Closed(_))));
        }
    }

    #[tokio::test]
    async fn a_request_the_server_cancels_has_an_unknown_outcome_and_a_clean_reason() {
        let long = format!("bad\u{7}\r\nthing{}", "x".repeat(300));
        let cases = [
            (
                Some(json!(long)),
                format!(
                    "the server cancelled the request: badthing{}",
                    "x".repeat(192)
                ),
            ),
            (
                Some(json!("  shutting down ")),
                "the server cancelled the request: shutting down".to_owned(),
            ),
            (None, "the server cancelled the request".to_owned()),
            (
                Some(json!(42)),
                "the server cancelled the request".to_owned(),
            ),
        ];
        for (reason, want) in cases {
            let (client, sink, _events) = McpClient::new();
            client.attach(Arc::new(Recorder::default()));
            let (id, rx) = client.start_request_as("tools/call", None, None).unwrap();
            let mut params = json!({ "requestId": id });
            if let Some(r) = reason {
                params["reason"] = r;
            }
            sink.deliver(Inbound::Message(Message::Notification {
                method: "notifications/cancelled".into(),
                params: Some(params),
            }));
            match rx.await.expect("answered") {
                Err(e @ RpcError::Lost(TransportError::Lost(_))) => {
                    assert!(e.outcome_unknown());
                    let RpcError::Lost(TransportError::Lost(text)) = e else {
                        unreachable!()
                    };
                    assert_eq!(text, want);
                }
                other => panic!("{other:?}"),
            }
        }
    }

    /// The SEP-1034 form: every property has a default but `note`.
    fn defaults_form() -> Value {
        json!({"mode": "form", "message": "accept with defaults", "requestedSchema": {
            "type": "object", "properties": {
                "name": {"type": "string", "default": "John Doe"},
                "age": {"type": "integer", "default": 30},
                "verified": {"type": "boolean", "default": true},
                "note": {"type": "string"}}}})
    }

    fn defaults_accepted() -> Value {
        json!({"action": "accept", "content": {"name": "John Doe", "age": 30, "verified": true}})
    }

    fn ask(params: Value, state: Option<&str>) -> Option<Result<Value, ErrorObject>> {
        let mut r = json!({"resultType": "input_required", "inputRequests": {
            "confirm": {"method": "elicitation/create", "params": params}}});
        if let Some(s) = state {
            r["requestState"] = json!(s);
        }
        Some(Ok(r))
    }

    /// A server request delivered to a client with `elicitation`; the answer it sent back.
    fn answer_server_request(elicitation: Elicitation, method: &str, params: Value) -> Value {
        let (client, sink, _events) = McpClient::with_elicitation(elicitation);
        let rec = Arc::new(Recorder::default());
        client.attach(rec.clone());
        client.set_protocol(ProtocolVersion::legacy("2025-11-25"));
        sink.deliver(Inbound::Message(Message::Request {
            id: RequestId::Number(41),
            method: method.into(),
            params: Some(params),
        }));
        let answers = rec.answers.lock().unwrap().clone();
        assert_eq!(answers.len(), 1, "{answers:?}");
        assert_eq!(answers[0]["id"], 41);
        answers[0].clone()
    }

    #[test]
    fn a_server_elicitation_is_accepted_with_its_defaults_when_the_policy_says_so() {
        let a = answer_server_request(
            Elicitation::AcceptDefaults,
            "elicitation/create",
            defaults_form(),
        );
        assert_eq!(a["result"], defaults_accepted());
        // URL mode is declined; anything else is still not found; ping is still answered.
        let a = answer_server_request(
            Elicitation::AcceptDefaults,
            "elicitation/create",
            json!({"mode": "url", "message": "m", "url": "https://example.com/k",
                "elicitationId": "e1"}),
        );
        assert_eq!(a["result"], json!({"action": "decline"}));
        let a = answer_server_request(
            Elicitation::AcceptDefaults,
            "sampling/createMessage",
            json!({}),
        );
        assert_eq!(a["error"]["code"], jsonrpc::METHOD_NOT_FOUND);
        assert_eq!(
            a["error"]["message"],
            "Method not found: sampling/createMessage (this client declares only elicitation)"
        );
        let a = answer_server_request(Elicitation::AcceptDefaults, "ping", json!({}));
        assert_eq!(a["result"], json!({}));
    }

    #[test]
    fn the_daemons_client_still_answers_elicitation_with_method_not_found() {
        let a = answer_server_request(
            Elicitation::Undeclared,
            "elicitation/create",
            defaults_form(),
        );
        assert!(a.get("result").is_none(), "{a}");
        assert_eq!(a["error"]["code"], jsonrpc::METHOD_NOT_FOUND);
        assert_eq!(
            a["error"]["message"],
            "Method not found: elicitation/create (this client declares no capabilities)"
        );
        let a = answer_server_request(Elicitation::Undeclared, "ping", json!({}));
        assert_eq!(a["result"], json!({}));
    }

    /// A handshake with a 2025-11-25 server (the probe refused, then `initialize`); what went
    /// out.
    async fn legacy_handshake(elicitation: Elicitation) -> Sent {
        let (client, t) = scripted_with(None, elicitation, |n, _| match n {
            0 => Some(Err(ErrorObject::new(
                jsonrpc::METHOD_NOT_FOUND,
                "Method not found",
            ))),
            _ => Some(Ok(
                json!({"protocolVersion": "2025-11-25", "capabilities": {},
                "serverInfo": {"name": "s", "version": "1"}}),
            )),
        });
        let hello = handshake::handshake(&client, Duration::from_secs(5))
            .await
            .expect("the handshake succeeds");
        assert_eq!(hello.protocol.version, "2025-11-25");
        let sent = t.sent.lock().unwrap().clone();
        assert_eq!(sent.len(), 2);
        assert_eq!(sent[0].2["method"], "server/discover");
        assert_eq!(sent[1].2["method"], "initialize");
        sent
    }

    #[tokio::test]
    async fn the_capabilities_declared_follow_the_elicitation_policy() {
        let caps = |sent: &Sent| {
            (
                sent[0].2["params"]["_meta"]["io.modelcontextprotocol/clientCapabilities"].clone(),
                sent[1].2["params"]["capabilities"].clone(),
            )
        };
        // The daemon: nothing declared, in the probe's `_meta` and in `initialize`.
        let sent = legacy_handshake(Elicitation::Undeclared).await;
        assert_eq!(caps(&sent), (json!({}), json!({})));
        let form = json!({"elicitation": {"form": {}}});
        let sent = legacy_handshake(Elicitation::AcceptDefaults).await;
        assert_eq!(caps(&sent), (form.clone(), form));
    }

    #[tokio::test]
    async fn input_requests_are_answered_with_input_responses_a_new_id_and_the_state_echoed() {
        // Round 1 asks with a state, round 2 without one, round 3 completes.
        let (client, t) = scripted_with(
            Some(ProtocolVersion::modern()),
            Elicitation::AcceptDefaults,
            |n, _| match n {
                0 => ask(defaults_form(), Some(STATES[0])),
                1 => ask(
                    json!({"message": "confirm?", "requestedSchema": {"type": "object",
                        "properties": {"confirmed": {"type": "boolean"}}}}),
                    None,
                ),
                _ => done(),
            },
        );
        let r = call_tool(&client).await.expect("the call completes");
        assert_eq!(r["content"][0]["text"], "ok");
        // An unrelated call afterwards.
        client
            .request(
                "tools/call",
                Some(json!({"name": "unrelated", "arguments": {}})),
                Duration::from_secs(5),
            )
            .await
            .expect("the unrelated call completes");
        let sent = t.sent.lock().unwrap().clone();
        assert_eq!(sent.len(), 4);
        let params: Vec<&Value> = sent.iter().map(|s| &s.2["params"]).collect();
        assert!(params[0].get("inputResponses").is_none());
        assert!(params[0].get("requestState").is_none());
        assert_eq!(
            params[1]["inputResponses"],
            json!({"confirm": defaults_accepted()})
        );
        assert_eq!(params[1]["requestState"], STATES[0], "echoed exactly");
        assert_eq!(
            params[2]["inputResponses"],
            json!({"confirm": {"action": "accept", "content": {}}})
        );
        assert!(
            params[2].get("requestState").is_none(),
            "no state given, none sent: {}",
            params[2]
        );
        for p in &params[..3] {
            assert_eq!(p["name"], "t");
            assert_eq!(p["arguments"], json!({"a": 1}));
        }
        assert_eq!(params[3]["name"], "unrelated");
        assert!(params[3].get("inputResponses").is_none());
        assert!(params[3].get("requestState").is_none());
        for (i, (id, _, body)) in sent.iter().enumerate() {
            assert_eq!(
                body["params"]["_meta"]["io.modelcontextprotocol/clientCapabilities"],
                json!({"elicitation": {"form": {}}})
            );
            for (other, _, _) in &sent[..i] {
                assert_ne!(other, id, "every round has a new id");
            }
        }
    }

    #[tokio::test]
    async fn input_requests_for_anything_but_elicitation_fail_the_request_unsent() {
        let mixed = json!({"resultType": "input_required", "requestState": "st",
            "inputRequests": {
                "confirm": {"method": "elicitation/create", "params": defaults_form()},
                "llm": {"method": "sampling/createMessage", "params": {"messages": []}}}});
        for (bad, says) in [
            (mixed, "\"llm\" (\"sampling/createMessage\")"),
            (
                json!({"resultType": "input_required",
                    "inputRequests": {"r": {"method": "roots/list"}}}),
                "\"r\" (\"roots/list\")",
            ),
            (
                json!({"resultType": "input_required", "inputRequests": {"x": {}}}),
                "\"x\" (no method)",
            ),
            (
                json!({"resultType": "input_required", "inputRequests": [1]}),
                "inputRequests of an input_required result is not an object",
            ),
            (
                json!({"resultType": "input_required", "requestState": 7,
                    "inputRequests": {"c": {"method": "elicitation/create",
                        "params": defaults_form()}}}),
                "requestState of an input_required result is not a string",
            ),
        ] {
            let b = bad.clone();
            let (client, t) = scripted_with(
                Some(ProtocolVersion::modern()),
                Elicitation::AcceptDefaults,
                move |_, _| Some(Ok(b.clone())),
            );
            match call_tool(&client).await {
                Err(RpcError::Invalid(m)) => {
                    assert!(m.contains(says), "{bad}: {m}");
                }
                other => panic!("{bad}: {other:?}"),
            }
            assert_eq!(t.sent.lock().unwrap().len(), 1, "nothing is sent again");
        }
    }

    #[tokio::test]
    async fn input_rounds_stop_after_eight_resends() {
        let (client, t) = scripted_with(
            Some(ProtocolVersion::modern()),
            Elicitation::AcceptDefaults,
            |n, _| ask(defaults_form(), Some(&format!("s{n}"))),
        );
        let r = call_tool(&client).await;
        let sent = t.sent.lock().unwrap().clone();
        assert_eq!(sent.len(), 1 + MAX_INPUT_ROUNDS);
        assert_eq!(sent[MAX_INPUT_ROUNDS].2["params"]["requestState"], "s7");
        match r {
            Err(RpcError::Invalid(m)) => assert!(m.contains("at most 8 times"), "{m}"),
            other => panic!("{other:?}"),
        }
    }
}
