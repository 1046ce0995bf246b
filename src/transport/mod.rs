//! Transports: how JSON-RPC messages reach a server and come back. `stdio` runs the server as
//! a child process behind our launcher; `http` posts each message and reads JSON or SSE.
//!
//! Owns: processes, sockets, framing, SSE, resumption, listening streams, and the bounds kept
//! against a server before anything reaches the client core (`gate`: the rate of its
//! requests; `text`: its text in our errors; caps on ids, queues and batches in each
//! transport). Must not touch: actors, the HTTP API, storage. The client core
//! (`crate::client`) drives a transport through the [`Transport`] trait and receives
//! everything through an [`InboundSink`].

pub mod gate;
pub mod http;
pub mod launcher;
pub mod spare;
pub mod sse;
pub mod stderr;
pub mod stdio;
pub mod tcp;
pub mod text;
pub mod tls;

use crate::protocol::{ErrorObject, Message, ProtocolVersion, RequestId};
use awc::http::header::{HeaderName, HeaderValue};
use bytes::Bytes;
use std::sync::Arc;
use tokio::sync::oneshot;

/// What kind of message is going out, for transports that need to know (HTTP headers,
/// which POST answers which request).
#[derive(Debug, Clone)]
pub enum OutKind {
    Request { id: RequestId, method: String },
    Notification { method: String },
    Response,
}

/// One serialized message on its way to the server.
#[derive(Debug)]
pub struct Outbound {
    pub kind: OutKind,
    /// The JSON text, without a trailing newline.
    pub body: Bytes,
    /// Extra HTTP headers for this message (modern era: `Mcp-Method`, `Mcp-Name`, ...), made
    /// once here: the POST (and its DPoP retry) shares them instead of parsing text again.
    pub headers: Vec<(HeaderName, HeaderValue)>,
    /// For notifications over HTTP: told when the server accepted it (202).
    pub ack: Option<oneshot::Sender<Result<(), TransportError>>>,
}

/// What a transport hands the client core.
#[derive(Debug)]
pub enum Inbound {
    Message(Message),
    /// A request's response will not come: its stream broke or was refused.
    Lost {
        id: RequestId,
        error: TransportError,
    },
    /// The transport is gone: every request in flight is lost.
    Closed(TransportError),
}

pub trait InboundSink: Send + Sync + 'static {
    fn deliver(&self, ev: Inbound);
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum TransportKind {
    Stdio,
    Http,
}

/// A transport behind one trait; all methods are non-blocking.
pub trait Transport: Send + Sync {
    fn kind(&self) -> TransportKind;
    /// Queue one message. An error means it was not sent.
    fn send(&self, msg: Outbound) -> Result<(), TransportError>;
    /// Stop waiting for a request's response (HTTP: close its stream, which is how a modern
    /// server is told to cancel).
    fn abort(&self, _id: &RequestId) {}
    /// The handshake settled a version (HTTP sends it as `MCP-Protocol-Version`).
    fn negotiated(&self, _version: &ProtocolVersion) {}
    /// Open the legacy GET listening stream (HTTP only).
    fn open_listen_stream(&self) {}
    /// The OAuth access token later requests carry (HTTP only; see
    /// [`http::HttpTransport::set_bearer`]).
    fn set_bearer(
        &self,
        _token: Option<crate::store::settings::Secret>,
    ) -> Result<(), TransportError> {
        Ok(())
    }
    /// A DPoP-bound access token (RFC 9449) later requests carry as `Authorization: DPoP`,
    /// each with a fresh proof from `prover` (HTTP only; see
    /// [`http::HttpTransport::set_dpop`]).
    fn set_dpop(
        &self,
        _token: crate::store::settings::Secret,
        _prover: DpopProver,
    ) -> Result<(), TransportError> {
        Ok(())
    }
    /// Shut down: stdio runs the close sequence, HTTP sends `DELETE` for its session.
    fn close(&self);
    /// How many unusable messages (malformed, oversized) the server sent so far.
    fn ignored_messages(&self) -> u64 {
        0
    }
    /// A direct call from this thread, a task of a `LocalSet` (stdio: the reader of the
    /// server's output may move here; see `stdio::reader`).
    fn read_here(&self) {}
}

pub type SharedTransport = Arc<dyn Transport>;

/// Makes the DPoP proof (RFC 9449 §4, §7) of one HTTP request to the transport's server:
/// `(method, nonce)` to the `DPoP` header's value; the URL (`htu`) and the token's hash
/// (`ath`) are the prover's. `None`: no proof could be made (the request goes without).
pub type DpopProver = Arc<dyn Fn(&str, Option<&str>) -> Option<String> + Send + Sync>;

/// Why a message did not make it, with enough detail to tell whether the server saw it.
#[derive(Debug, Clone, thiserror::Error)]
pub enum TransportError {
    #[error("the server process could not be started: {0}")]
    Spawn(String),
    #[error("the connection is closed: {0}")]
    Closed(String),
    #[error("could not reach the server: {0}")]
    Connect(String),
    #[error("the server answered HTTP {status}{}", detail_suffix(.detail))]
    Status {
        status: u16,
        detail: String,
        /// A JSON-RPC error the refusal carried in its body.
        rpc_error: Option<ErrorObject>,
        /// `WWW-Authenticate` of a 401/403, for the authorization code.
        www_authenticate: Option<String>,
    },
    #[error("the server ended the session (HTTP {0})")]
    SessionExpired(u16),
    #[error("the connection to the server was lost before its answer: {0}")]
    Lost(String),
    #[error("message too large: {0}")]
    TooLarge(String),
    #[error("protocol error from the server: {0}")]
    Protocol(String),
    /// The server went past a bound kept against it (a flood of requests, more of our answers
    /// queued than it reads); the connection is closed. Requests in flight may have run.
    #[error("the connection was closed: {0}")]
    Overrun(String),
}

fn detail_suffix(d: &str) -> String {
    if d.is_empty() {
        String::new()
    } else {
        format!(": {d}")
    }
}

impl TransportError {
    /// Whether the message may have reached the server (the outcome of a call is unknown).
    pub fn maybe_delivered(&self) -> bool {
        matches!(
            self,
            TransportError::Lost(_) | TransportError::Protocol(_) | TransportError::Overrun(_)
        )
    }
}
