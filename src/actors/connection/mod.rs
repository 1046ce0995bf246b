//! The Connection actor: the MCP client for one server in one session composition. It owns
//! the transport (through [`crate::client::McpClient`]), dials on demand with one dial in
//! flight at a time, discovers the catalogue, follows list_changed in the background (one
//! discovery at a time, once more if a change came meanwhile), and never retries a tool call.
//!
//! It runs under the Registry's supervision loop (`registry.rs`): a panic anywhere in it (a
//! handler, the event stream, a future it spawned) ends this instance, and the registry
//! starts a fresh one with a fresh link behind the same [`super::handle::ConnHandle`].
//! What must survive a restart (the owner to tell, the catalogue it advertises, the restart
//! count, whether it was closed) lives in [`ConnShared`], never in the actor.
//!
//! `link.rs` holds the client and what a dial, a discovery and a call do with it;
//! `context.rs` what every connection dials with; `shared.rs` what outlives a restart.
//!
//! Owns: one server's client and its link state. Must not touch: the API, the store, other
//! connections.

use crate::client::discovery::{self, check_complete_head, DiscoveryError};
use crate::client::handshake::{self, HandshakeError, ServerHello};
use crate::client::{ClientEvent, McpClient, RpcError};
use crate::protocol::era::ProtocolVersion;
use crate::protocol::headers::ParamHeader;
use crate::protocol::model::Catalogue;
use crate::protocol::text::Redactor;
use crate::protocol::ErrorObject;
use crate::protocol::ResultText;
use crate::store::settings::{ResolvedServer, ResolvedTransport, TransportConfig};
use crate::transport::stdio::{StdioSpec, StdioTransport};
use crate::transport::{SharedTransport, TransportError, TransportKind};
use actix::prelude::*;
use serde_json::{json, Value};
use std::cell::RefCell;
use std::collections::HashMap;
use std::path::PathBuf;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU8, Ordering};
use std::sync::Arc;
use std::sync::Mutex;
use std::time::Duration;
use tokio::sync::mpsc;

mod context;
mod direct;
mod link;
mod shared;

pub use context::{checks_for_cores, AwcOpener, ConnContext, DialLimit, HttpOpener, RestartPolicy};
pub use direct::{Direct, Spawn};
use link::*;
pub use shared::ConnShared;

/// Why a call has no result, and whether the server may have acted on it.
#[derive(Debug, Clone, thiserror::Error)]
pub enum CallError {
    /// The server could not be reached; the request did not run.
    #[error("server {server:?} is unavailable: {reason}")]
    Unavailable { server: String, reason: String },
    /// The request did not leave albedo.
    #[error("the request to {server:?} did not run: {reason}")]
    NotRun { server: String, reason: String },
    /// Sent, then lost: the server may or may not have acted on it.
    #[error("the outcome of the request to {server:?} is unknown: {reason}. It may or may not have run; inspect before acting again")]
    Unknown { server: String, reason: String },
    /// The server answered with a JSON-RPC error.
    #[error("server {server:?} answered with an error: {error}")]
    Server { server: String, error: ErrorObject },
    /// The server answered, but not usably.
    #[error("server {server:?} gave an invalid answer: {reason}")]
    Invalid { server: String, reason: String },
    #[error("no such tool: {0}")]
    NoSuchTool(String),
    /// The server refused albedo's credentials (HTTP 401/403 when dialling or calling, or a
    /// stored sign-in that cannot be used): the user must sign in again
    /// (`PUT /auth/logins/mcp:<server>`). The request did not run.
    #[error(
        "the request to {server:?} did not run: the server needs the user to sign in ({reason})"
    )]
    NeedsSignIn { server: String, reason: String },
}

impl CallError {
    /// `not_run`, `unknown`, or `error` (the server answered with an error).
    pub fn outcome(&self) -> &'static str {
        match self {
            CallError::Unavailable { .. }
            | CallError::NotRun { .. }
            | CallError::NoSuchTool(_)
            | CallError::NeedsSignIn { .. } => "not_run",
            CallError::Unknown { .. } => "unknown",
            CallError::Server { .. } | CallError::Invalid { .. } => "error",
        }
    }
}

/// What a call asks the server for.
#[derive(Debug, Clone)]
pub enum CallTarget {
    /// A tool call. Its arguments are the caller's JSON text (an object), passed on as they
    /// came, never parsed into a tree and written again ([`crate::protocol::Params::Named`]).
    Tool {
        name: Arc<str>,
        arguments: Box<serde_json::value::RawValue>,
    },
    ReadResource {
        uri: String,
    },
    GetPrompt {
        name: String,
        arguments: Value,
    },
}

impl CallTarget {
    /// A tool call with arguments given as a tree (written once, here, compactly).
    pub fn tool(
        name: impl Into<Arc<str>>,
        arguments: &Value,
    ) -> Result<CallTarget, serde_json::Error> {
        Ok(CallTarget::Tool {
            name: name.into(),
            arguments: serde_json::value::to_raw_value(arguments)?,
        })
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum LinkState {
    Idle,
    Connecting,
    Connected,
    Unavailable,
    /// The last dial was refused for want of a sign-in (OAuth): its calls answer
    /// `needs_sign_in` until the user signs in.
    NeedsSignIn,
    /// Closed for good: later calls answer `not_run`.
    Closed,
    /// Panicked again and again; the registry stopped restarting it.
    Failed,
}

/// Status of one connection, for `GET /sessions/{id}`.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ConnStatus {
    pub state: LinkState,
    pub era: Option<crate::protocol::Era>,
    pub protocol_version: Option<String>,
    pub transport: &'static str,
    pub last_error: Option<String>,
    pub restarts: u32,
    /// Unusable messages from the server, logged and ignored.
    pub ignored_messages: u64,
}

/// Told to the composition when the catalogue differs from what it advertises, or when a
/// background discovery found one it must not advertise (over the limit): the old one stays
/// and the session gets the warning.
#[derive(Message, Debug, Clone)]
#[rtype(result = "()")]
pub struct CatalogueChanged {
    pub server: String,
    pub catalogue: Result<Arc<Catalogue>, String>,
}

/// A discovered catalogue and what the discovery had to leave out (for the session's
/// warnings).
#[derive(Debug, Clone)]
pub struct Discovered<C = Arc<Catalogue>> {
    pub catalogue: C,
    pub notes: Vec<String>,
}

/// Why dialling and discovering a server gave no catalogue: a message already cleaned of
/// the server's secrets and control characters, and what kind of failure it was.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{message}")]
pub struct DiscoverError {
    pub message: String,
    too_large: bool,
    needs_sign_in: bool,
}

impl DiscoverError {
    /// The connection could not be reached (closed, failed, or it stopped meanwhile).
    pub fn unreachable(message: impl Into<String>) -> DiscoverError {
        DiscoverError {
            message: message.into(),
            too_large: false,
            needs_sign_in: false,
        }
    }

    fn connect(e: &HandshakeError, redact: &Redactor) -> DiscoverError {
        DiscoverError {
            message: redact.clean(&e.message()),
            too_large: false,
            needs_sign_in: matches!(e, HandshakeError::NeedsAuth { .. }),
        }
    }

    fn discovery(e: &DiscoveryError, redact: &Redactor) -> DiscoverError {
        DiscoverError {
            message: redact.clean(&e.to_string()),
            too_large: matches!(e, DiscoveryError::TooLarge { .. }),
            needs_sign_in: false,
        }
    }

    /// A catalogue over the limit: bad configuration that fails a preparation, not a
    /// server to leave out.
    pub fn too_large(&self) -> bool {
        self.too_large
    }

    /// The server asked for a sign-in.
    pub fn needs_sign_in(&self) -> bool {
        self.needs_sign_in
    }
}

/// Every secret value of a server's configuration: the env values it names (not `HOME`,
/// `PATH`, `TMPDIR`), its header values, and a bearer token alone.
pub(crate) fn secret_values(server: &ResolvedServer) -> Vec<String> {
    let mut out = Vec::new();
    match (&server.transport, &server.config.transport) {
        (ResolvedTransport::Stdio { env, .. }, TransportConfig::Stdio { env: named, .. }) => {
            for k in named.keys() {
                if let Some(v) = env.get(k) {
                    out.push(v.expose().to_owned());
                }
            }
        }
        (ResolvedTransport::Http { headers, .. }, _) => {
            for (_, v) in headers {
                let v = v.expose();
                out.push(v.to_owned());
                if let Some(token) = v.strip_prefix("Bearer ") {
                    out.push(token.to_owned());
                }
            }
        }
        _ => {}
    }
    out
}

pub struct Connection {
    server: Arc<ResolvedServer>,
    ctx: ConnContext,
    shared: Arc<ConnShared>,
    link: Rc<Link>,
    /// The client event stream of the current link (cancelled on close).
    stream: Option<SpawnHandle>,
    /// The background discovery running or waiting its turn, at most one (cancelled on
    /// close: a closed connection never dials).
    discovery: Option<SpawnHandle>,
    rediscover: bool,
}

impl Connection {
    pub fn new(server: Arc<ResolvedServer>, ctx: ConnContext, shared: Arc<ConnShared>) -> Self {
        // The real link, with its event stream, is made in `started`.
        let (tx, _rx) = mpsc::unbounded_channel();
        Connection {
            link: Link::new(server.clone(), ctx.clone(), shared.clone(), tx),
            server,
            ctx,
            shared,
            stream: None,
            discovery: None,
            rediscover: false,
        }
    }

    fn fresh_link(&mut self, ctx: &mut Context<Self>) {
        let rx = self.replace_link();
        self.stream = Some(ctx.add_stream(tokio_stream_from(rx)));
    }

    /// Drop the link's client and put a new link in its place; its events come on the
    /// receiver returned.
    fn replace_link(&mut self) -> mpsc::UnboundedReceiver<ClientEvent> {
        self.link.drop_client();
        let (tx, rx) = mpsc::unbounded_channel();
        self.link = Link::new(
            self.server.clone(),
            self.ctx.clone(),
            self.shared.clone(),
            tx,
        );
        rx
    }

    /// Close for good: drop the client and the event stream's sender; the actor ends when
    /// its last address goes, and every call that still reaches it answers `not_run`.
    fn close(&mut self, ctx: &mut Context<Self>) {
        self.shared.mark_closed();
        if let Some(h) = self.stream.take() {
            ctx.cancel_future(h);
        }
        // A saved catalogue's check may still be waiting its turn behind other servers'
        // (a session with many servers closed right after it opened): it would dial the
        // server when its turn came, for nobody, and keep the actor alive until then.
        if let Some(h) = self.discovery.take() {
            ctx.cancel_future(h);
        }
        // Nothing listens to a closed connection's events.
        drop(self.replace_link());
        self.link.set_state(LinkState::Closed);
    }

    /// Run a background discovery, at most one at a time; a change reported meanwhile runs it
    /// once more. A panic in it ends the actor (the registry restarts it).
    fn background_discovery(&mut self, ctx: &mut Context<Self>) {
        self.discover_in_background(ctx, false);
    }

    /// Discover in the background; a `saved_check` (a saved catalogue checked at a session's
    /// open) first waits its turn among the daemon's checks, holding nothing a call needs.
    fn discover_in_background(&mut self, ctx: &mut Context<Self>, saved_check: bool) {
        if self.shared.is_closed() {
            return;
        }
        if self.discovery.is_some() {
            self.rediscover = true;
            return;
        }
        self.rediscover = false;
        let link = self.link.clone();
        let running = ctx.spawn(
            async move {
                let checks = link.ctx.checks.clone();
                let _turn = if saved_check && link.current().is_none() {
                    checks.acquire_owned().await
                } else {
                    None
                };
                link.discover().await.map(|d| d.catalogue)
            }
                .into_actor(self)
                .map(|r, act, ctx| {
                    act.discovery = None;
                    act.shared.trip(PanicPoint::Discovery);
                    match r {
                        Ok(cat) => {
                            let differs = act.shared.known().as_deref() != Some(&cat);
                            if differs {
                                let cat = Arc::new(cat);
                                act.shared.set_known(Some(cat.clone()));
                                if let Some(owner) = act.shared.owner() {
                                    owner.do_send(CatalogueChanged {
                                        server: act.server.config.name.clone(),
                                        catalogue: Ok(cat),
                                    });
                                }
                            }
                        }
                        Err(e) if e.too_large() => {
                            if let Some(left_out) = act.shared.log_limit.allow() {
                                tracing::warn!(server = %act.server.config.name, error = %e, left_out, "background discovery: the catalogue is over the limit; the session keeps the one it has");
                            }
                            if let Some(owner) = act.shared.owner() {
                                owner.do_send(CatalogueChanged {
                                    server: act.server.config.name.clone(),
                                    catalogue: Err(e.to_string()),
                                });
                            }
                        }
                        Err(e) => {
                            if let Some(left_out) = act.shared.log_limit.allow() {
                                tracing::info!(server = %act.server.config.name, error = %e, left_out, "background discovery failed");
                            }
                        }
                    }
                    if act.rediscover {
                        act.background_discovery(ctx);
                    }
                }),
        );
        // Polled only after this returns, so it cannot have finished yet.
        self.discovery = Some(running);
    }
}

fn tokio_stream_from<T: 'static>(
    mut rx: mpsc::UnboundedReceiver<T>,
) -> impl futures_util::Stream<Item = T> {
    futures_util::stream::poll_fn(move |cx| rx.poll_recv(cx))
}

impl Actor for Connection {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        if self.shared.is_closed() {
            self.close(ctx);
            return;
        }
        self.fresh_link(ctx);
        if let Some(k) = self.shared.known() {
            self.link.learn_headers(&k);
        }
    }

    fn stopped(&mut self, _ctx: &mut Self::Context) {
        self.link.drop_client();
    }
}

impl StreamHandler<ClientEvent> for Connection {
    fn handle(&mut self, ev: ClientEvent, ctx: &mut Self::Context) {
        self.shared.trip(PanicPoint::Event);
        match ev {
            ClientEvent::ListChanged(kind) => {
                if let Some(left_out) = self.shared.log_limit.allow() {
                    tracing::debug!(server = %self.server.config.name, %kind, left_out, "list changed");
                }
                self.background_discovery(ctx);
            }
            ClientEvent::Closed(reason) => {
                let reason = self.link.redact.clean(&reason);
                if let Some(left_out) = self.shared.log_limit.allow() {
                    tracing::info!(server = %self.server.config.name, %reason, left_out, "connection closed");
                }
                // Only a live client's end makes the link idle: the end of a client whose
                // dial failed must not hide that the server is unavailable.
                let connected = self.link.state() == LinkState::Connected;
                if connected && self.link.current().is_none() {
                    self.link.fail(LinkState::Idle, reason);
                }
            }
        }
    }

    fn finished(&mut self, _ctx: &mut Self::Context) {}
}

fn closed_error(server: &str) -> CallError {
    CallError::NotRun {
        server: server.to_owned(),
        reason: "the connection was closed".into(),
    }
}

/// Dial (if needed) and discover; the first connection of a server during preparation.
#[derive(Message)]
#[rtype(result = "Result<Discovered, DiscoverError>")]
pub struct Discover;

impl Handler<Discover> for Connection {
    type Result = ResponseActFuture<Self, Result<Discovered, DiscoverError>>;

    fn handle(&mut self, _: Discover, _ctx: &mut Self::Context) -> Self::Result {
        if self.shared.is_closed() {
            return Box::pin(actix::fut::ready(Err(DiscoverError::unreachable(
                "the connection was closed",
            ))));
        }
        let link = self.link.clone();
        Box::pin(async move { link.discover().await }.into_actor(self).map(
            |r, act, _ctx| match r {
                Ok(d) => {
                    let cat = Arc::new(d.catalogue);
                    act.shared.set_known(Some(cat.clone()));
                    Ok(Discovered {
                        catalogue: cat,
                        notes: d.notes,
                    })
                }
                Err(e) => Err(e),
            },
        ))
    }
}

/// The session advertises `known` for this server; with `check_saved` (the catalogue came
/// from the store) the connection dials and discovers in the background at once, and a
/// difference is reported to the owner.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Watch {
    pub check_saved: bool,
}

impl Handler<Watch> for Connection {
    type Result = ();

    fn handle(&mut self, msg: Watch, ctx: &mut Self::Context) {
        self.shared.trip(PanicPoint::Watch);
        if let Some(k) = self.shared.known() {
            self.link.learn_headers(&k);
        }
        if msg.check_saved {
            self.discover_in_background(ctx, true);
        }
    }
}

/// One request on behalf of the model: a tool call, a resource read or a prompt.
#[derive(Message)]
#[rtype(result = "Result<ResultText, CallError>")]
pub struct Call(pub CallTarget);

impl Handler<Call> for Connection {
    type Result = ResponseActFuture<Self, Result<ResultText, CallError>>;

    fn handle(&mut self, msg: Call, _ctx: &mut Self::Context) -> Self::Result {
        if self.shared.is_closed() {
            let e = closed_error(&self.server.config.name);
            return Box::pin(actix::fut::ready(Err(e)));
        }
        let link = self.link.clone();
        let shared = self.shared.clone();
        Box::pin(
            async move {
                shared.trip(PanicPoint::Call);
                link.call(msg.0).await
            }
            .into_actor(self),
        )
    }
}

/// `stdio` or `http`.
pub fn transport_name(server: &ResolvedServer) -> &'static str {
    match server.transport {
        ResolvedTransport::Stdio { .. } => "stdio",
        ResolvedTransport::Http { .. } => "http",
    }
}

/// Close the connection for good. It does not stop the actor at once: calls already queued
/// answer `not_run`, and the actor ends when its last address goes.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Close;

impl Handler<Close> for Connection {
    type Result = ();

    fn handle(&mut self, _: Close, ctx: &mut Self::Context) {
        self.shared.mark_closed();
        self.shared.trip(PanicPoint::Close);
        self.close(ctx);
    }
}

/// Where a test makes the actor panic. Nothing in the daemon arms these.
#[doc(hidden)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PanicPoint {
    Call,
    Watch,
    Close,
    /// The client event stream (`StreamHandler`).
    Event,
    /// The completion of a background discovery (a future the actor spawned).
    Discovery,
    /// A handler panicking at once (`InjectPanic`).
    Handler,
    /// A future spawned on the actor's context that panics when polled.
    Spawned,
    /// A tool call made on the caller's thread with the published client (`direct.rs`), not
    /// in the actor: caught, the client closed, the outcome unknown.
    DirectCall,
}

/// A round trip through the actor's mailbox, answered once everything sent before it was
/// handled (tests: a `Watch`'s check has started when it answers).
#[doc(hidden)]
#[derive(Message)]
#[rtype(result = "()")]
pub struct Barrier;

impl Handler<Barrier> for Connection {
    type Result = ();

    fn handle(&mut self, _: Barrier, _ctx: &mut Self::Context) {}
}

/// Arm a panic point: the next handler of that kind panics, uncaught.
#[doc(hidden)]
#[derive(Message)]
#[rtype(result = "()")]
pub struct ArmPanic(pub PanicPoint);

impl Handler<ArmPanic> for Connection {
    type Result = ();

    fn handle(&mut self, msg: ArmPanic, ctx: &mut Self::Context) {
        match msg.0 {
            PanicPoint::Handler => panic!("injected panic in a handler"),
            PanicPoint::Spawned => {
                ctx.spawn(actix::fut::wrap_future(async {
                    tokio::task::yield_now().await;
                    panic!("injected panic in a spawned future");
                }));
            }
            PanicPoint::Event => {
                self.shared.arm(PanicPoint::Event);
                // Any event reaches the stream handler; a synthetic one is enough.
                let _ = self
                    .link
                    .events
                    .send(ClientEvent::Closed("injected".into()));
            }
            p => {
                self.shared.arm(p);
                // The next call must reach this handler, not run directly on its caller's
                // thread with the published client.
                if p == PanicPoint::Call {
                    self.shared.withdraw();
                }
            }
        }
    }
}
