//! The Connection actor: the MCP client for one server in one session composition. It owns
//! the transport (through [`crate::client::McpClient`]), dials on demand with one dial in
//! flight at a time, discovers the catalogue, follows list_changed in the background (one
//! discovery at a time, once more if a change came meanwhile), and never retries a tool call.
//! It runs under the Registry's `Supervisor`: a panic in a handler stops it and the
//! supervisor restarts it with a fresh link, so the next call dials again.

use crate::client::discovery::{self, check_complete};
use crate::client::handshake::{self, HandshakeError, ServerHello};
use crate::client::{ClientEvent, McpClient, RpcError};
use crate::protocol::era::ProtocolVersion;
use crate::protocol::headers::ParamHeader;
use crate::protocol::model::Catalogue;
use crate::protocol::ErrorObject;
use crate::store::settings::{ResolvedServer, ResolvedTransport};
use crate::transport::stdio::{StdioSpec, StdioTransport};
use crate::transport::{SharedTransport, TransportError, TransportKind};
use actix::prelude::*;
use futures_util::FutureExt;
use serde_json::{json, Value};
use std::cell::RefCell;
use std::collections::HashMap;
use std::panic::AssertUnwindSafe;
use std::path::PathBuf;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;

/// What every connection needs from the daemon.
#[derive(Clone)]
pub struct ConnContext {
    pub launcher: PathBuf,
    pub http: Option<Arc<dyn HttpOpener>>,
}

/// Opens HTTP transports (kept behind a trait so the actor does not depend on TLS setup).
pub trait HttpOpener: Send + Sync {
    fn open(
        &self,
        url: &url::Url,
        headers: &[(String, crate::store::settings::Secret)],
        sink: Arc<dyn crate::transport::InboundSink>,
    ) -> Result<SharedTransport, TransportError>;
}

/// The HTTP transport with the daemon's TLS configuration.
pub struct AwcOpener {
    pub tls: Arc<rustls::ClientConfig>,
}

impl HttpOpener for AwcOpener {
    fn open(
        &self,
        url: &url::Url,
        headers: &[(String, crate::store::settings::Secret)],
        sink: Arc<dyn crate::transport::InboundSink>,
    ) -> Result<SharedTransport, TransportError> {
        let spec = crate::transport::http::HttpSpec {
            url: url.clone(),
            headers: headers.to_vec(),
            tls: self.tls.clone(),
        };
        let t: SharedTransport = crate::transport::http::HttpTransport::start(spec, sink)?;
        Ok(t)
    }
}

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
}

impl CallError {
    /// `not_run`, `unknown`, or `error` (the server answered with an error).
    pub fn outcome(&self) -> &'static str {
        match self {
            CallError::Unavailable { .. } | CallError::NotRun { .. } | CallError::NoSuchTool(_) => {
                "not_run"
            }
            CallError::Unknown { .. } => "unknown",
            CallError::Server { .. } | CallError::Invalid { .. } => "error",
        }
    }
}

/// What a call asks the server for.
#[derive(Debug, Clone)]
pub enum CallTarget {
    Tool { name: String, arguments: Value },
    ReadResource { uri: String },
    GetPrompt { name: String, arguments: Value },
}

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum LinkState {
    Idle,
    Connecting,
    Connected,
    Unavailable,
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

/// Told to the composition when the catalogue differs from what it advertises.
#[derive(Message, Debug, Clone)]
#[rtype(result = "()")]
pub struct CatalogueChanged {
    pub server: String,
    pub catalogue: Arc<Catalogue>,
}

struct Link {
    server: Arc<ResolvedServer>,
    ctx: ConnContext,
    client: RefCell<Option<(McpClient, ServerHello)>>,
    dial_lock: tokio::sync::Mutex<()>,
    events: mpsc::UnboundedSender<ClientEvent>,
    state: RefCell<LinkState>,
    last_error: RefCell<Option<String>>,
    headers: RefCell<HashMap<String, Vec<ParamHeader>>>,
    /// Ignored messages of clients already dropped.
    ignored: std::cell::Cell<u64>,
}

impl Link {
    fn new(
        server: Arc<ResolvedServer>,
        ctx: ConnContext,
        events: mpsc::UnboundedSender<ClientEvent>,
    ) -> Rc<Link> {
        Rc::new(Link {
            server,
            ctx,
            client: RefCell::new(None),
            dial_lock: tokio::sync::Mutex::new(()),
            events,
            state: RefCell::new(LinkState::Idle),
            last_error: RefCell::new(None),
            headers: RefCell::new(HashMap::new()),
            ignored: std::cell::Cell::new(0),
        })
    }

    fn ignored_messages(&self) -> u64 {
        self.ignored.get()
            + self
                .client
                .borrow()
                .as_ref()
                .map(|(c, _)| c.ignored_messages())
                .unwrap_or(0)
    }

    fn name(&self) -> &str {
        &self.server.config.name
    }

    fn current(&self) -> Option<(McpClient, ServerHello)> {
        let g = self.client.borrow();
        match g.as_ref() {
            Some((c, h)) if !c.is_closed() => Some((c.clone(), h.clone())),
            _ => None,
        }
    }

    fn startup_timeout(&self) -> Duration {
        Duration::from_millis(self.server.config.startup_timeout_ms)
    }

    fn call_timeout(&self) -> Duration {
        Duration::from_millis(self.server.config.call_timeout_ms)
    }

    fn drop_client(&self) {
        if let Some((c, _)) = self.client.borrow_mut().take() {
            self.ignored.set(self.ignored.get() + c.ignored_messages());
            c.close();
        }
    }

    /// The live client, dialling if there is none (one dial at a time).
    async fn client(self: &Rc<Self>) -> Result<(McpClient, ServerHello), HandshakeError> {
        if let Some(c) = self.current() {
            return Ok(c);
        }
        let _g = self.dial_lock.lock().await;
        if let Some(c) = self.current() {
            return Ok(c);
        }
        self.drop_client();
        *self.state.borrow_mut() = LinkState::Connecting;
        match self.dial().await {
            Ok((c, h)) => {
                *self.client.borrow_mut() = Some((c.clone(), h.clone()));
                *self.state.borrow_mut() = LinkState::Connected;
                *self.last_error.borrow_mut() = None;
                Ok((c, h))
            }
            Err(e) => {
                *self.state.borrow_mut() = LinkState::Unavailable;
                *self.last_error.borrow_mut() = Some(e.to_string());
                Err(e)
            }
        }
    }

    async fn dial(self: &Rc<Self>) -> Result<(McpClient, ServerHello), HandshakeError> {
        let (client, sink, mut events) = McpClient::new();
        let transport: SharedTransport = match &self.server.transport {
            ResolvedTransport::Stdio {
                command,
                args,
                cwd,
                env,
            } => {
                let spec = StdioSpec {
                    launcher: self.ctx.launcher.clone(),
                    command: command.clone(),
                    args: args.clone(),
                    cwd: cwd.clone(),
                    env: env
                        .iter()
                        .map(|(k, v)| (k.clone(), v.expose().to_owned()))
                        .collect(),
                };
                StdioTransport::spawn(&spec, sink)
                    .map_err(|e| HandshakeError::Rpc(RpcError::NotSent(e)))?
            }
            ResolvedTransport::Http { url, headers } => match &self.ctx.http {
                Some(opener) => opener
                    .open(url, headers, sink)
                    .map_err(|e| HandshakeError::Rpc(RpcError::NotSent(e)))?,
                None => {
                    return Err(HandshakeError::Rpc(RpcError::NotSent(
                        TransportError::Connect(
                            "HTTP servers are not available in this build".into(),
                        ),
                    )))
                }
            },
        };
        client.attach(transport);
        let tx = self.events.clone();
        actix::spawn(async move {
            while let Some(e) = events.recv().await {
                if tx.send(e).is_err() {
                    break;
                }
            }
        });
        match handshake::handshake(&client, self.startup_timeout()).await {
            Ok(h) => {
                if h.protocol.era == crate::protocol::Era::Modern {
                    if let Some(f) = crate::client::listen::filter(&h.capabilities) {
                        actix::spawn(crate::client::listen::hold(client.clone(), f));
                    }
                }
                if client.transport_kind() == Some(TransportKind::Http)
                    && h.protocol.era == crate::protocol::Era::Legacy
                {
                    // The optional GET stream, for list_changed and server requests.
                    if let Some(t) = client_transport(&client) {
                        t.open_listen_stream();
                    }
                }
                Ok((client, h))
            }
            Err(e) => {
                client.close();
                Err(e)
            }
        }
    }

    async fn discover(self: &Rc<Self>) -> Result<Catalogue, HandshakeError> {
        let (client, hello) = self.client().await?;
        let cat = discovery::discover(&client, &hello, self.startup_timeout()).await?;
        self.learn_headers(&cat);
        Ok(cat)
    }

    /// Which arguments each tool mirrors into `Mcp-Param-*` headers (HTTP only).
    fn learn_headers(&self, cat: &Catalogue) {
        let mut map = HashMap::new();
        if matches!(self.server.transport, ResolvedTransport::Http { .. }) {
            for t in &cat.tools {
                if let (Some(name), Some(schema)) =
                    (t.get("name").and_then(Value::as_str), t.get("inputSchema"))
                {
                    if let Ok(hs) = crate::protocol::headers::param_headers(schema) {
                        if !hs.is_empty() {
                            map.insert(name.to_owned(), hs);
                        }
                    }
                }
            }
        }
        *self.headers.borrow_mut() = map;
    }

    async fn call(self: Rc<Self>, target: CallTarget) -> Result<Value, CallError> {
        let server = self.name().to_owned();
        let dial = tokio::time::timeout(self.startup_timeout(), self.client()).await;
        let (client, _) = match dial {
            Ok(Ok(c)) => c,
            Ok(Err(e)) => {
                return Err(CallError::Unavailable {
                    server,
                    reason: e.to_string(),
                })
            }
            Err(_) => {
                return Err(CallError::Unavailable {
                    server,
                    reason: format!(
                        "it did not connect within {} ms",
                        self.server.config.startup_timeout_ms
                    ),
                })
            }
        };
        // The arguments are moved into the params, never copied.
        let named = |name: String, arguments: Value| {
            let mut m = serde_json::Map::new();
            m.insert("name".into(), Value::String(name));
            m.insert("arguments".into(), arguments);
            Value::Object(m)
        };
        let (method, params, hdrs) = match target {
            CallTarget::Tool { name, arguments } => {
                let hdrs = self
                    .headers
                    .borrow()
                    .get(&name)
                    .cloned()
                    .unwrap_or_default();
                ("tools/call", named(name, arguments), hdrs)
            }
            CallTarget::ReadResource { uri } => ("resources/read", json!({ "uri": uri }), vec![]),
            CallTarget::GetPrompt { name, arguments } => {
                ("prompts/get", named(name, arguments), vec![])
            }
        };
        let r = client
            .request_with(method, Some(params), self.call_timeout(), &hdrs)
            .await;
        match r {
            Ok(v) => {
                check_complete(&v).map_err(|e| CallError::Invalid {
                    server: server.clone(),
                    reason: e.to_string(),
                })?;
                Ok(v)
            }
            Err(RpcError::Server(error)) => Err(CallError::Server { server, error }),
            Err(RpcError::NotSent(e)) => {
                if client.is_closed() {
                    self.drop_client();
                }
                Err(CallError::NotRun {
                    server,
                    reason: e.to_string(),
                })
            }
            Err(e @ RpcError::Timeout(_)) => {
                // A timed-out call closes the client; the next call dials again.
                self.drop_client();
                Err(CallError::Unknown {
                    server,
                    reason: e.to_string(),
                })
            }
            Err(RpcError::Lost(e)) => {
                self.drop_client();
                Err(CallError::Unknown {
                    server,
                    reason: e.to_string(),
                })
            }
            Err(RpcError::Invalid(reason)) => Err(CallError::Invalid { server, reason }),
        }
    }
}

fn client_transport(client: &McpClient) -> Option<SharedTransport> {
    client.transport_handle()
}

pub struct Connection {
    server: Arc<ResolvedServer>,
    ctx: ConnContext,
    link: Rc<Link>,
    owner: Option<Recipient<CatalogueChanged>>,
    /// The catalogue the session advertises for this server.
    known: Option<Arc<Catalogue>>,
    discovering: bool,
    rediscover: bool,
    restarts: u32,
    /// Advertised from a saved catalogue and not yet checked against the server: the check
    /// (a background dial and discovery) runs on the session's first activity or first call.
    unchecked: bool,
}

impl Connection {
    pub fn new(server: Arc<ResolvedServer>, ctx: ConnContext) -> Connection {
        // The real link is made in `started` (and again after each restart).
        let (tx, _rx) = mpsc::unbounded_channel();
        Connection {
            link: Link::new(server.clone(), ctx.clone(), tx),
            server,
            ctx,
            owner: None,
            known: None,
            discovering: false,
            rediscover: false,
            restarts: 0,
            unchecked: false,
        }
    }

    /// Run the pending check of a saved catalogue, once.
    fn check_saved(&mut self, ctx: &mut Context<Self>) {
        if self.unchecked {
            self.unchecked = false;
            self.background_discovery(ctx);
        }
    }

    fn fresh_link(&mut self, ctx: &mut Context<Self>) {
        self.link.drop_client();
        let (tx, rx) = mpsc::unbounded_channel();
        self.link = Link::new(self.server.clone(), self.ctx.clone(), tx);
        ctx.add_stream(tokio_stream_from(rx));
    }

    /// Run a background discovery, at most one at a time; a change reported meanwhile runs it
    /// once more.
    fn background_discovery(&mut self, ctx: &mut Context<Self>) {
        if self.discovering {
            self.rediscover = true;
            return;
        }
        self.discovering = true;
        self.rediscover = false;
        let link = self.link.clone();
        let fut = AssertUnwindSafe(async move { link.discover().await }).catch_unwind();
        ctx.spawn(fut.into_actor(self).map(|r, act, ctx| {
            act.discovering = false;
            match r {
                Ok(Ok(cat)) => {
                    let differs = act.known.as_deref() != Some(&cat);
                    if differs {
                        let cat = Arc::new(cat);
                        act.known = Some(cat.clone());
                        if let Some(owner) = &act.owner {
                            owner.do_send(CatalogueChanged {
                                server: act.server.config.name.clone(),
                                catalogue: cat,
                            });
                        }
                    }
                }
                Ok(Err(e)) => {
                    tracing::info!(server = %act.server.config.name, error = %e, "background discovery failed");
                }
                Err(_) => {
                    tracing::error!(server = %act.server.config.name, "background discovery panicked; restarting the connection");
                    ctx.stop();
                    return;
                }
            }
            if act.rediscover {
                act.background_discovery(ctx);
            }
        }));
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
        self.fresh_link(ctx);
    }

    fn stopped(&mut self, _ctx: &mut Self::Context) {
        self.link.drop_client();
    }
}

impl Supervised for Connection {
    fn restarting(&mut self, _ctx: &mut Self::Context) {
        self.restarts += 1;
        self.discovering = false;
        self.rediscover = false;
        tracing::warn!(server = %self.server.config.name, restarts = self.restarts, "connection actor restarted");
        // `started` runs again and gives it a fresh link.
    }
}

impl StreamHandler<ClientEvent> for Connection {
    fn handle(&mut self, ev: ClientEvent, ctx: &mut Self::Context) {
        match ev {
            ClientEvent::ListChanged(kind) => {
                tracing::debug!(server = %self.server.config.name, %kind, "list changed");
                self.background_discovery(ctx);
            }
            ClientEvent::Closed(reason) => {
                tracing::info!(server = %self.server.config.name, %reason, "connection closed");
                *self.link.last_error.borrow_mut() = Some(reason);
                *self.link.state.borrow_mut() = LinkState::Idle;
            }
        }
    }

    fn finished(&mut self, _ctx: &mut Self::Context) {}
}

/// Dial (if needed) and discover; the first connection of a server during preparation.
#[derive(Message)]
#[rtype(result = "Result<Arc<Catalogue>, String>")]
pub struct Discover;

impl Handler<Discover> for Connection {
    type Result = ResponseActFuture<Self, Result<Arc<Catalogue>, String>>;

    fn handle(&mut self, _: Discover, _ctx: &mut Self::Context) -> Self::Result {
        let link = self.link.clone();
        let fut = AssertUnwindSafe(async move { link.discover().await }).catch_unwind();
        Box::pin(fut.into_actor(self).map(|r, act, ctx| match r {
            Ok(Ok(cat)) => {
                let cat = Arc::new(cat);
                act.known = Some(cat.clone());
                Ok(cat)
            }
            Ok(Err(e)) => Err(e.to_string()),
            Err(_) => {
                ctx.stop();
                Err("the connection actor panicked and was restarted".into())
            }
        }))
    }
}

/// Dial in the background and compare the catalogue with the saved one the session
/// advertises; a difference is reported to `owner`.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Watch {
    pub owner: Recipient<CatalogueChanged>,
    pub known: Option<Arc<Catalogue>>,
    /// The catalogue came from the store: check it against the server in the background
    /// when the session first shows activity (or first calls this server).
    pub check_saved: bool,
}

impl Handler<Watch> for Connection {
    type Result = ();

    fn handle(&mut self, msg: Watch, _ctx: &mut Self::Context) {
        self.owner = Some(msg.owner);
        if let Some(k) = msg.known {
            self.link.learn_headers(&k);
            self.known = Some(k);
        }
        if msg.check_saved {
            self.unchecked = true;
        }
    }
}

/// The session showed activity: run the pending check of a saved catalogue.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Wake;

impl Handler<Wake> for Connection {
    type Result = ();

    fn handle(&mut self, _: Wake, ctx: &mut Self::Context) {
        self.check_saved(ctx);
    }
}

/// One request on behalf of the model: a tool call, a resource read or a prompt.
#[derive(Message)]
#[rtype(result = "Result<Value, CallError>")]
pub struct Call(pub CallTarget);

impl Handler<Call> for Connection {
    type Result = ResponseActFuture<Self, Result<Value, CallError>>;

    fn handle(&mut self, msg: Call, ctx: &mut Self::Context) -> Self::Result {
        // A first call dials (the check below shares that one dial).
        self.check_saved(ctx);
        let link = self.link.clone();
        let server = self.server.config.name.clone();
        let fut = AssertUnwindSafe(link.call(msg.0)).catch_unwind();
        Box::pin(fut.into_actor(self).map(move |r, act, ctx| match r {
            Ok(r) => r,
            Err(_) => {
                let _ = act;
                ctx.stop();
                Err(CallError::Unknown {
                    server,
                    reason: "the connection actor panicked; it was restarted".into(),
                })
            }
        }))
    }
}

#[derive(Message)]
#[rtype(result = "ConnStatus")]
pub struct GetStatus;

impl Handler<GetStatus> for Connection {
    type Result = MessageResult<GetStatus>;

    fn handle(&mut self, _: GetStatus, _ctx: &mut Self::Context) -> Self::Result {
        let current = self.link.current();
        let pv: Option<ProtocolVersion> = current.as_ref().map(|(_, h)| h.protocol.clone());
        let mut state = self.link.state.borrow().clone();
        if current.is_none() && state == LinkState::Connected {
            state = LinkState::Idle;
        }
        MessageResult(ConnStatus {
            state,
            era: pv.as_ref().map(|p| p.era),
            protocol_version: pv.map(|p| p.version),
            transport: match self.server.transport {
                ResolvedTransport::Stdio { .. } => "stdio",
                ResolvedTransport::Http { .. } => "http",
            },
            last_error: self.link.last_error.borrow().clone(),
            restarts: self.restarts,
            ignored_messages: self.link.ignored_messages(),
        })
    }
}

/// Close the connection for good (the caller drops its address too).
#[derive(Message)]
#[rtype(result = "()")]
pub struct Close;

impl Handler<Close> for Connection {
    type Result = ();

    fn handle(&mut self, _: Close, ctx: &mut Self::Context) {
        self.link.drop_client();
        ctx.stop();
    }
}

/// A handler that panics: the supervision test's way to crash the actor on purpose.
#[doc(hidden)]
#[derive(Message)]
#[rtype(result = "()")]
pub struct InjectPanic;

impl Handler<InjectPanic> for Connection {
    type Result = ();

    fn handle(&mut self, _: InjectPanic, ctx: &mut Self::Context) {
        let r = std::panic::catch_unwind(AssertUnwindSafe(|| {
            panic!("injected panic");
        }));
        if r.is_err() {
            tracing::error!(server = %self.server.config.name, "connection actor panicked; stopping it for its supervisor");
            ctx.stop();
        }
    }
}
