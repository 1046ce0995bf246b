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
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;
use std::sync::Mutex;
use std::time::Duration;
use tokio::sync::mpsc;

/// What every connection needs from the daemon.
#[derive(Clone)]
pub struct ConnContext {
    pub launcher: PathBuf,
    pub http: Option<Arc<dyn HttpOpener>>,
    /// The daemon-wide bound on dials and discoveries running at once.
    pub dials: DialLimit,
    /// The daemon-wide bound on checks of saved catalogues (dials nobody waits on) running at
    /// once, taken before `dials`: one per core, so that opening a session with many saved
    /// servers is not slowed by their processes starting. A call or a session that waits on
    /// a server never queues behind it: the check holds no dial while it waits its turn.
    pub checks: DialLimit,
    /// How the registry restarts a connection that panicked.
    pub restart: RestartPolicy,
    /// The daemon's OAuth tokens (`None`: no sign-ins, as in tests of the actors alone).
    pub tokens: Option<super::tokens::TokenBook>,
    /// Told the server's name whenever a connection's [`LinkState`] changes (the API turns it
    /// into a `servers` event of `GET /settings/mcp/events`); `None`: nobody listens.
    pub state_changes: Option<tokio::sync::broadcast::Sender<String>>,
}

impl ConnContext {
    /// A context with the default limits (tests and tools).
    pub fn new(launcher: PathBuf, http: Option<Arc<dyn HttpOpener>>) -> ConnContext {
        ConnContext {
            launcher,
            http,
            dials: DialLimit::new(DEFAULT_CONCURRENT_DIALS),
            checks: DialLimit::new(DEFAULT_CONCURRENT_CHECKS),
            restart: RestartPolicy::default(),
            tokens: None,
            state_changes: None,
        }
    }
}

/// Default of `max_concurrent_dials` (a daemon setting, so it lives with the others).
pub use crate::store::daemon_config::DEFAULT_CONCURRENT_DIALS;

/// Checks of saved catalogues at once when the daemon has not said (it says one per core).
pub const DEFAULT_CONCURRENT_CHECKS: usize = 2;

/// A daemon-wide limit on concurrent dials and discoveries, so that 200 sessions opening
/// together (or a reload of all of them) do not start hundreds of processes in one instant.
#[derive(Clone)]
pub struct DialLimit(Arc<tokio::sync::Semaphore>);

impl DialLimit {
    pub fn new(n: usize) -> DialLimit {
        DialLimit(Arc::new(tokio::sync::Semaphore::new(n.max(1))))
    }

    pub(crate) async fn acquire(&self) -> Option<tokio::sync::SemaphorePermit<'_>> {
        self.0.acquire().await.ok()
    }

    pub(crate) async fn acquire_owned(self) -> Option<tokio::sync::OwnedSemaphorePermit> {
        self.0.acquire_owned().await.ok()
    }
}

/// Restarts after panics: the first at once, then after a delay that doubles from `base`
/// up to `max`; after `give_up` panics in a row the connection is marked failed. A run of
/// `healthy` without a panic ends the row.
#[derive(Clone, Debug)]
pub struct RestartPolicy {
    pub base: Duration,
    pub max: Duration,
    pub give_up: u32,
    pub healthy: Duration,
}

impl Default for RestartPolicy {
    fn default() -> Self {
        RestartPolicy {
            base: Duration::from_millis(100),
            max: Duration::from_secs(5),
            give_up: 5,
            healthy: Duration::from_secs(60),
        }
    }
}

impl RestartPolicy {
    /// The wait before restart number `streak` of a row (1 = the first panic).
    pub fn delay(&self, streak: u32) -> Duration {
        if streak <= 1 {
            return Duration::ZERO;
        }
        let f = 1u32
            .checked_shl(streak.saturating_sub(2))
            .unwrap_or(u32::MAX);
        self.base.saturating_mul(f).min(self.max)
    }
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
    Tool { name: String, arguments: Value },
    ReadResource { uri: String },
    GetPrompt { name: String, arguments: Value },
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

struct Link {
    server: Arc<ResolvedServer>,
    ctx: ConnContext,
    /// Cleans everything the server says before it leaves the connection.
    redact: Redactor,
    client: RefCell<Option<(McpClient, Rc<ServerHello>)>>,
    dial_lock: tokio::sync::Mutex<()>,
    events: mpsc::UnboundedSender<ClientEvent>,
    state: RefCell<LinkState>,
    last_error: RefCell<Option<String>>,
    /// The server's grant without a browser, read once from its resolved `oauth_client`.
    service: Option<Arc<super::grants::ServiceGrant>>,
    headers: RefCell<HashMap<String, Vec<ParamHeader>>>,
    /// Ignored messages of clients already dropped.
    ignored: std::cell::Cell<u64>,
    /// Dials finished, and the error of the last one if it failed.
    dials: std::cell::Cell<u64>,
    last_dial_error: RefCell<Option<HandshakeError>>,
    /// The OAuth access token the current transport carries, if any.
    bearer: RefCell<Option<String>>,
}

/// Marks a link unavailable when a dial is dropped before it finished.
struct DialGuard<'a>(&'a Link, bool);

impl Drop for DialGuard<'_> {
    fn drop(&mut self) {
        if self.1 {
            self.0.set_state(LinkState::Unavailable);
            self.0.dials.set(self.0.dials.get().wrapping_add(1));
            let e = HandshakeError::Timeout(self.0.startup_timeout());
            *self.0.last_error.borrow_mut() = Some(e.to_string());
            *self.0.last_dial_error.borrow_mut() = Some(e);
        }
    }
}

impl Link {
    fn new(
        server: Arc<ResolvedServer>,
        ctx: ConnContext,
        events: mpsc::UnboundedSender<ClientEvent>,
    ) -> Rc<Link> {
        let secrets = secret_values(&server);
        crate::protocol::text::register_secrets(secrets.iter().map(String::as_str));
        let service = super::grants::ServiceGrant::of(&server);
        Rc::new(Link {
            redact: Redactor::new(secrets),
            server,
            ctx,
            client: RefCell::new(None),
            dial_lock: tokio::sync::Mutex::new(()),
            events,
            state: RefCell::new(LinkState::Idle),
            last_error: RefCell::new(None),
            service,
            headers: RefCell::new(HashMap::new()),
            ignored: std::cell::Cell::new(0),
            dials: std::cell::Cell::new(0),
            last_dial_error: RefCell::new(None),
            bearer: RefCell::new(None),
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

    /// The link's state; a change is told to whoever follows them (`state_changes`).
    fn set_state(&self, state: LinkState) {
        let before = self.state.replace(state);
        if before != state {
            if let Some(tx) = &self.ctx.state_changes {
                let _ = tx.send(self.name().to_owned());
            }
        }
    }

    fn current(&self) -> Option<(McpClient, Rc<ServerHello>)> {
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
    async fn client(self: &Rc<Self>) -> Result<(McpClient, Rc<ServerHello>), HandshakeError> {
        if let Some(c) = self.current() {
            return Ok(c);
        }
        let seen = self.dials.get();
        let _g = self.dial_lock.lock().await;
        if let Some(c) = self.current() {
            return Ok(c);
        }
        // A caller that waited for a dial that failed meanwhile gets that dial's answer: the
        // server is not dialled twice for one call (the next call dials again).
        if self.dials.get() != seen {
            if let Some(e) = self.last_dial_error.borrow().clone() {
                return Err(e);
            }
        }
        self.drop_client();
        self.set_state(LinkState::Connecting);
        // A dial given up half-way (its caller timed out) leaves the link unavailable,
        // not "connecting" for ever.
        let mut unfinished = DialGuard(self, true);
        let dialled = {
            let _permit = self.ctx.dials.acquire().await;
            self.dial().await
        };
        unfinished.1 = false;
        self.dials.set(self.dials.get().wrapping_add(1));
        match dialled {
            Ok((c, h)) => {
                let h = Rc::new(h);
                *self.client.borrow_mut() = Some((c.clone(), h.clone()));
                self.set_state(LinkState::Connected);
                *self.last_error.borrow_mut() = None;
                *self.last_dial_error.borrow_mut() = None;
                Ok((c, h))
            }
            Err(e) => {
                self.set_state(if matches!(e, HandshakeError::NeedsAuth { .. }) {
                    LinkState::NeedsSignIn
                } else {
                    LinkState::Unavailable
                });
                *self.last_error.borrow_mut() = Some(self.redact.clean(&e.message()));
                *self.last_dial_error.borrow_mut() = Some(e.clone());
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
                    env: env.clone(),
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
        let bearer = self.apply_bearer(&transport).await?;
        client.attach(transport.clone());
        let tx = self.events.clone();
        actix::spawn(async move {
            while let Some(e) = events.recv().await {
                if tx.send(e).is_err() {
                    break;
                }
            }
        });
        let mut shaken = handshake::handshake(&client, self.startup_timeout()).await;
        // A 401 for the token we sent: refreshed once (single-flight), and asked again.
        if let (Err(HandshakeError::NeedsAuth { status: 401, .. }), Some(sent)) = (&shaken, &bearer)
        {
            if self
                .after_refusal(&transport, sent, 401, None)
                .await
                .is_ok()
            {
                shaken = handshake::handshake(&client, self.startup_timeout()).await;
            }
        }
        if let Err(HandshakeError::NeedsAuth {
            status: 403,
            www_authenticate: Some(h),
            ..
        }) = &shaken
        {
            if let Some(sent) = &bearer {
                let _ = self.after_refusal(&transport, sent, 403, Some(h)).await;
            }
        }
        match shaken {
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

    /// The OAuth token an HTTP server's requests carry, set on its transport: answers the
    /// token sent (to tell a refresh whether it is stale). A stored sign-in the user must
    /// renew refuses the dial as needing a sign-in.
    async fn apply_bearer(
        &self,
        transport: &SharedTransport,
    ) -> Result<Option<String>, HandshakeError> {
        let (ResolvedTransport::Http { url, .. }, Some(book)) =
            (&self.server.transport, &self.ctx.tokens)
        else {
            return Ok(None);
        };
        match book
            .bearer_as(self.name(), url.as_str(), self.service.as_ref())
            .await
        {
            super::tokens::Bearer::None => Ok(None),
            super::tokens::Bearer::Token(t) => {
                let sent = t.expose().to_owned();
                t.set_on(transport.as_ref())
                    .map_err(|e| HandshakeError::Rpc(RpcError::NotSent(e)))?;
                *self.bearer.borrow_mut() = Some(sent.clone());
                Ok(Some(sent))
            }
            // The caller records why (the dial's outcome, or the call's).
            super::tokens::Bearer::NeedsSignIn(why) => Err(HandshakeError::NeedsAuth {
                status: 401,
                www_authenticate: None,
                reason: Some(why),
            }),
        }
    }

    /// A request that carried `sent` was refused (401, or 403 with its challenge): after a
    /// 401 the token is refreshed once and set on the transport (`Ok`: send it again); a 403
    /// `insufficient_scope` records a step-up for the next sign-in. `Err`: why the user must
    /// sign in.
    async fn after_refusal(
        &self,
        transport: &SharedTransport,
        sent: &str,
        status: u16,
        www_authenticate: Option<&str>,
    ) -> Result<(), String> {
        let (ResolvedTransport::Http { url, .. }, Some(book)) =
            (&self.server.transport, &self.ctx.tokens)
        else {
            return Err("the server needs the user to sign in".into());
        };
        if status == 403 {
            let challenge = www_authenticate.and_then(crate::oauth::Challenge::parse);
            return Err(match challenge {
                Some(c) if c.insufficient_scope() => {
                    book.insufficient_scope(self.name(), url.as_str(), &c)
                }
                _ => "the server refused the request (HTTP 403)".into(),
            });
        }
        match book
            .refused_as(self.name(), url.as_str(), sent, self.service.as_ref())
            .await
        {
            super::tokens::Bearer::Token(t) => {
                let now = t.expose().to_owned();
                t.set_on(transport.as_ref()).map_err(|e| e.to_string())?;
                *self.bearer.borrow_mut() = Some(now);
                Ok(())
            }
            super::tokens::Bearer::NeedsSignIn(why) => Err(why),
            super::tokens::Bearer::None => Err("the server needs the user to sign in".into()),
        }
    }

    async fn discover(self: &Rc<Self>) -> Result<Discovered<Catalogue>, DiscoverError> {
        let (client, hello) = self
            .client()
            .await
            .map_err(|e| DiscoverError::connect(&e, &self.redact))?;
        let budget = discovery::Budget::new(self.startup_timeout());
        let cat = {
            let _permit = self.ctx.dials.acquire().await;
            discovery::discover_within(&client, &hello, &budget)
                .await
                .map_err(|e| DiscoverError::discovery(&e, &self.redact))?
        };
        self.learn_headers(&cat);
        Ok(Discovered {
            catalogue: cat,
            notes: budget.notes(),
        })
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

    /// A call; every error that leaves is cleaned of the server's secrets and control
    /// characters (a server may echo a secret it was sent in its error).
    async fn call(self: Rc<Self>, target: CallTarget) -> Result<ResultText, CallError> {
        let redact = self.redact.clone();
        self.call_raw(target)
            .await
            .map_err(|e| clean_call_error(e, &redact))
    }

    async fn call_raw(self: Rc<Self>, target: CallTarget) -> Result<ResultText, CallError> {
        let server = self.name().to_owned();
        let dial = tokio::time::timeout(self.startup_timeout(), self.client()).await;
        let (client, _) = match dial {
            Ok(Ok(c)) => c,
            Ok(Err(e @ HandshakeError::NeedsAuth { .. })) => {
                return Err(CallError::NeedsSignIn {
                    server,
                    reason: e.message(),
                });
            }
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
        // A connection made a while ago: its token, refreshed first when it is within a
        // minute of expiry (the book answers from its cache otherwise), as every request's
        // must be, not only the dial's.
        if self.bearer.borrow().is_some() {
            if let Some(t) = client_transport(&client) {
                if let Err(e) = self.apply_bearer(&t).await {
                    let reason = e.message();
                    *self.last_error.borrow_mut() = Some(self.redact.clean(&reason));
                    return Err(CallError::NeedsSignIn { server, reason });
                }
            }
        }
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
        // The answer stays the server's text (`ResultText`): it is passed on, not parsed.
        let mut r = client
            .request_text_with(method, Some(&params), self.call_timeout(), &hdrs)
            .await;
        // Refused before it ran (401/403): with a stored sign-in, a 401 refreshes the token
        // once and the request is sent again (it did not run); a 403 `insufficient_scope`
        // records a step-up. Either way a refusal that stays says the user must sign in.
        if let Err(RpcError::NotSent(TransportError::Status {
            status: status @ (401 | 403),
            www_authenticate,
            ..
        })) = &r
        {
            let (status, challenge) = (*status, www_authenticate.clone());
            let sent = self.bearer.borrow().clone();
            let transport = client_transport(&client);
            let outcome = match (&sent, &transport) {
                (Some(sent), Some(t)) => {
                    self.after_refusal(t, sent, status, challenge.as_deref())
                        .await
                }
                _ => Err("the server needs the user to sign in".into()),
            };
            match outcome {
                Ok(()) => {
                    r = client
                        .request_text_with(method, Some(&params), self.call_timeout(), &hdrs)
                        .await;
                }
                Err(why) => {
                    return Err(CallError::NeedsSignIn {
                        server,
                        reason: why,
                    })
                }
            }
            if let Err(RpcError::NotSent(TransportError::Status {
                status: 401 | 403, ..
            })) = &r
            {
                return Err(CallError::NeedsSignIn {
                    server,
                    reason: "the server still refuses the request after a refresh".into(),
                });
            }
        }
        match r {
            Ok(v) => {
                check_complete_head(v.head()).map_err(|e| CallError::Invalid {
                    server: server.clone(),
                    reason: e.to_string(),
                })?;
                Ok(v)
            }
            Err(RpcError::Server(error)) => Err(CallError::Server { server, error }),
            Err(RpcError::NotSent(
                e @ TransportError::Status {
                    status: 401 | 403, ..
                },
            )) => Err(CallError::NeedsSignIn {
                server,
                reason: e.to_string(),
            }),
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
                // A lost process or pipe closes the client, and the next call dials again;
                // over HTTP one request's stream can be lost while the session lives on
                // (its listening stream and the other calls in flight with it).
                if client.is_closed() {
                    self.drop_client();
                }
                Err(CallError::Unknown {
                    server,
                    reason: e.to_string(),
                })
            }
            Err(RpcError::Invalid(reason)) => Err(CallError::Invalid { server, reason }),
        }
    }
}

/// `e` with its reasons and the server's error message and data cleaned by `redact`.
fn clean_call_error(e: CallError, redact: &Redactor) -> CallError {
    match e {
        CallError::Unavailable { server, reason } => CallError::Unavailable {
            server,
            reason: redact.clean(&reason),
        },
        CallError::NotRun { server, reason } => CallError::NotRun {
            server,
            reason: redact.clean(&reason),
        },
        CallError::NeedsSignIn { server, reason } => CallError::NeedsSignIn {
            server,
            reason: redact.clean(&reason),
        },
        CallError::Unknown { server, reason } => CallError::Unknown {
            server,
            reason: redact.clean(&reason),
        },
        CallError::Invalid { server, reason } => CallError::Invalid {
            server,
            reason: redact.clean(&reason),
        },
        CallError::Server { server, mut error } => {
            error.message = redact.clean(&error.message);
            if let Some(d) = error.data.as_mut() {
                redact.redact_json(d);
            }
            CallError::Server { server, error }
        }
        e @ CallError::NoSuchTool(_) => e,
    }
}

impl Drop for Link {
    /// A link dropped with its actor (a panic, a stop) closes its client: no transport or
    /// process outlives the connection that owned it.
    fn drop(&mut self) {
        self.drop_client();
    }
}

fn client_transport(client: &McpClient) -> Option<SharedTransport> {
    client.transport_handle()
}

/// The part of a connection that outlives a restart: the registry's handle, the session's
/// owner and catalogue, counters, and the test hooks. Shared by every instance of the actor
/// behind one [`super::handle::ConnHandle`].
pub struct ConnShared {
    pub name: String,
    owner: Mutex<Option<Recipient<CatalogueChanged>>>,
    known: Mutex<Option<Arc<Catalogue>>>,
    restarts: AtomicU32,
    closed: AtomicBool,
    failed: Mutex<Option<String>>,
    /// Test hook: the next handler of this kind panics (see [`ArmPanic`]).
    armed: Mutex<Option<PanicPoint>>,
    /// Lines this connection logs about its server (it is untrusted: rate-limited).
    pub(crate) log_limit: crate::protocol::text::LogLimiter,
}

impl ConnShared {
    pub fn new(name: &str) -> ConnShared {
        ConnShared {
            name: name.to_owned(),
            owner: Mutex::new(None),
            known: Mutex::new(None),
            restarts: AtomicU32::new(0),
            closed: AtomicBool::new(false),
            failed: Mutex::new(None),
            armed: Mutex::new(None),
            log_limit: Default::default(),
        }
    }

    pub fn restarts(&self) -> u32 {
        self.restarts.load(Ordering::Relaxed)
    }

    pub(crate) fn count_restart(&self) -> u32 {
        self.restarts.fetch_add(1, Ordering::Relaxed) + 1
    }

    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    pub(crate) fn mark_closed(&self) {
        self.closed.store(true, Ordering::Release);
    }

    pub fn failed(&self) -> Option<String> {
        self.failed.lock().ok().and_then(|g| g.clone())
    }

    pub(crate) fn mark_failed(&self, reason: String) {
        if let Ok(mut g) = self.failed.lock() {
            *g = Some(reason);
        }
    }

    fn owner(&self) -> Option<Recipient<CatalogueChanged>> {
        self.owner.lock().ok().and_then(|g| g.clone())
    }

    fn known(&self) -> Option<Arc<Catalogue>> {
        self.known.lock().ok().and_then(|g| g.clone())
    }

    pub(crate) fn set_known(&self, cat: Option<Arc<Catalogue>>) {
        if let Ok(mut g) = self.known.lock() {
            *g = cat;
        }
    }

    pub(crate) fn set_owner(&self, owner: Recipient<CatalogueChanged>) {
        if let Ok(mut g) = self.owner.lock() {
            *g = Some(owner);
        }
    }

    /// Panic here if a test armed this point.
    fn trip(&self, point: PanicPoint) {
        let hit = self
            .armed
            .lock()
            .map(|mut g| {
                if *g == Some(point) {
                    *g = None;
                    true
                } else {
                    false
                }
            })
            .unwrap_or(false);
        if hit {
            panic!("injected panic in {point:?}");
        }
    }
}

pub struct Connection {
    server: Arc<ResolvedServer>,
    ctx: ConnContext,
    shared: Arc<ConnShared>,
    link: Rc<Link>,
    /// The client event stream of the current link (cancelled on close).
    stream: Option<SpawnHandle>,
    discovering: bool,
    rediscover: bool,
}

impl Connection {
    pub fn new(server: Arc<ResolvedServer>, ctx: ConnContext, shared: Arc<ConnShared>) -> Self {
        // The real link, with its event stream, is made in `started`.
        let (tx, _rx) = mpsc::unbounded_channel();
        Connection {
            link: Link::new(server.clone(), ctx.clone(), tx),
            server,
            ctx,
            shared,
            stream: None,
            discovering: false,
            rediscover: false,
        }
    }

    fn fresh_link(&mut self, ctx: &mut Context<Self>) {
        self.link.drop_client();
        let (tx, rx) = mpsc::unbounded_channel();
        self.link = Link::new(self.server.clone(), self.ctx.clone(), tx);
        self.stream = Some(ctx.add_stream(tokio_stream_from(rx)));
    }

    /// Close for good: drop the client and the event stream's sender; the actor ends when
    /// its last address goes, and every call that still reaches it answers `not_run`.
    fn close(&mut self, ctx: &mut Context<Self>) {
        self.shared.mark_closed();
        if let Some(h) = self.stream.take() {
            ctx.cancel_future(h);
        }
        self.link.drop_client();
        let (tx, _rx) = mpsc::unbounded_channel();
        self.link = Link::new(self.server.clone(), self.ctx.clone(), tx);
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
        if self.discovering {
            self.rediscover = true;
            return;
        }
        self.discovering = true;
        self.rediscover = false;
        let link = self.link.clone();
        ctx.spawn(
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
                    act.discovering = false;
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
                let connected = *self.link.state.borrow() == LinkState::Connected;
                if connected && self.link.current().is_none() {
                    *self.link.last_error.borrow_mut() = Some(reason);
                    self.link.set_state(LinkState::Idle);
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

#[derive(Message)]
#[rtype(result = "ConnStatus")]
pub struct GetStatus;

impl Handler<GetStatus> for Connection {
    type Result = MessageResult<GetStatus>;

    fn handle(&mut self, _: GetStatus, _ctx: &mut Self::Context) -> Self::Result {
        self.shared.trip(PanicPoint::Status);
        let current = self.link.current();
        let pv: Option<ProtocolVersion> = current.as_ref().map(|(_, h)| h.protocol.clone());
        let mut state = *self.link.state.borrow();
        if current.is_none() && state == LinkState::Connected {
            state = LinkState::Idle;
        }
        MessageResult(ConnStatus {
            state,
            era: pv.as_ref().map(|p| p.era),
            protocol_version: pv.map(|p| p.version),
            transport: transport_name(&self.server),
            last_error: self.link.last_error.borrow().clone(),
            restarts: self.shared.restarts(),
            ignored_messages: self.link.ignored_messages(),
        })
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
    Status,
    Close,
    /// The client event stream (`StreamHandler`).
    Event,
    /// The completion of a background discovery (a future the actor spawned).
    Discovery,
    /// A handler panicking at once (`InjectPanic`).
    Handler,
    /// A future spawned on the actor's context that panics when polled.
    Spawned,
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
                if let Ok(mut g) = self.shared.armed.lock() {
                    *g = Some(PanicPoint::Event);
                }
                // Any event reaches the stream handler; a synthetic one is enough.
                let _ = self
                    .link
                    .events
                    .send(ClientEvent::Closed("injected".into()));
            }
            p => {
                if let Ok(mut g) = self.shared.armed.lock() {
                    *g = Some(p);
                }
            }
        }
    }
}
