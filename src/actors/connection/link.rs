//! A connection's link to its server ([`Link`]): the client it dialled (one dial in flight at
//! a time, within the startup timeout and the dial limit), the bearer it sets and renews after a
//! refusal, discovery, and calls (never retried; an error cleaned of the server's secrets).
//! The actor holds one link per life; a restart makes a fresh one.
//!
//! Owns: the client and its link state. Must not touch: the actor's mailbox, the session.

use super::shared::Seen;
use super::*;
use crate::actors::grants::ServiceGrant;
use crate::actors::tokens::Bearer;
use crate::protocol::Params;

pub(super) struct Link {
    pub(super) server: Arc<ResolvedServer>,
    pub(super) ctx: ConnContext,
    /// Where a live client is published for direct calls (`direct.rs`).
    pub(super) shared: Arc<ConnShared>,
    /// Cleans everything the server says before it leaves the connection.
    pub(super) redact: Redactor,
    pub(super) client: RefCell<Option<(McpClient, Rc<ServerHello>)>>,
    pub(super) dial_lock: tokio::sync::Mutex<()>,
    pub(super) events: mpsc::UnboundedSender<ClientEvent>,
    /// The life this link writes what it shows under (`ConnShared`'s `Seen`: its state, last
    /// error and live client, which views read there).
    life: u64,
    /// The server's grant without a browser, read once from its resolved `oauth_client`.
    pub(super) service: Option<Arc<ServiceGrant>>,
    /// Which arguments each tool mirrors into headers; shared with the direct calls.
    pub(super) headers: ParamHeaders,
    /// Dials finished, and the error of the last one if it failed.
    pub(super) dials: std::cell::Cell<u64>,
    pub(super) last_dial_error: RefCell<Option<HandshakeError>>,
    /// The OAuth access token the current transport carries, if any.
    pub(super) bearer: RefCell<Option<String>>,
}

/// Which arguments each tool of an HTTP server mirrors into `Mcp-Param-*` headers, learned at
/// discovery; read by the actor's calls and the direct ones.
#[derive(Clone, Default)]
pub(super) struct ParamHeaders(Arc<std::sync::RwLock<HashMap<String, Vec<ParamHeader>>>>);

impl ParamHeaders {
    /// Tool `name`'s headers (none for most tools).
    pub(super) fn of(&self, name: &str) -> Vec<ParamHeader> {
        self.0
            .read()
            .ok()
            .and_then(|m| m.get(name).cloned())
            .unwrap_or_default()
    }

    fn set(&self, map: HashMap<String, Vec<ParamHeader>>) {
        if let Ok(mut g) = self.0.write() {
            *g = map;
        }
    }
}

/// Marks a link unavailable when a dial is dropped before it finished.
pub(super) struct DialGuard<'a>(&'a Link, bool);

impl Drop for DialGuard<'_> {
    fn drop(&mut self) {
        if self.1 {
            self.0.dials.set(self.0.dials.get().wrapping_add(1));
            let e = HandshakeError::Timeout(self.0.startup_timeout());
            self.0.fail(LinkState::Unavailable, e.to_string());
            *self.0.last_dial_error.borrow_mut() = Some(e);
        }
    }
}

impl Link {
    pub(super) fn new(
        server: Arc<ResolvedServer>,
        ctx: ConnContext,
        shared: Arc<ConnShared>,
        events: mpsc::UnboundedSender<ClientEvent>,
    ) -> Rc<Link> {
        let secrets = secret_values(&server);
        crate::protocol::text::register_secrets(secrets.iter().map(String::as_str));
        let service = ServiceGrant::of(&server);
        let life = shared.new_life();
        Rc::new(Link {
            redact: Redactor::new(secrets),
            server,
            ctx,
            shared,
            client: RefCell::new(None),
            dial_lock: tokio::sync::Mutex::new(()),
            events,
            life,
            service,
            headers: ParamHeaders::default(),
            dials: std::cell::Cell::new(0),
            last_dial_error: RefCell::new(None),
            bearer: RefCell::new(None),
        })
    }

    pub(super) fn name(&self) -> &str {
        &self.server.config.name
    }

    /// The state this link shows.
    pub(super) fn state(&self) -> LinkState {
        self.shared.seen_state(self.life)
    }

    /// The link's state; a change is told to whoever follows them (`state_changes`).
    pub(super) fn set_state(&self, state: LinkState) {
        self.update(|s| s.state = state);
    }

    /// The link's last error (cleaned of the server's secrets), its state unchanged.
    pub(super) fn set_error(&self, error: String) {
        self.update(|s| s.last_error = Some(error));
    }

    /// Show `state` with `error` as the last error (cleaned of the server's secrets).
    pub(super) fn fail(&self, state: LinkState, error: String) {
        self.update(|s| {
            s.state = state;
            s.last_error = Some(error);
        });
    }

    /// Change what this link shows (nothing if a newer link took its place); a change of
    /// state is told to whoever follows them (`state_changes`).
    fn update(&self, change: impl FnOnce(&mut Seen)) {
        if let Some((before, after)) = self.shared.update_seen(self.life, change) {
            if before != after {
                if let Some(tx) = &self.ctx.state_changes {
                    let _ = tx.send(self.name().to_owned());
                }
            }
        }
    }

    pub(super) fn current(&self) -> Option<(McpClient, Rc<ServerHello>)> {
        let g = self.client.borrow();
        match g.as_ref() {
            Some((c, h)) if !c.is_closed() => Some((c.clone(), h.clone())),
            _ => None,
        }
    }

    pub(super) fn startup_timeout(&self) -> Duration {
        Duration::from_millis(self.server.config.startup_timeout_ms)
    }

    pub(super) fn call_timeout(&self) -> Duration {
        Duration::from_millis(self.server.config.call_timeout_ms)
    }

    pub(super) fn drop_client(&self) {
        let taken = self.client.borrow_mut().take();
        if let Some((c, _)) = taken {
            self.shared.unpublish(&c);
            self.update(|s| {
                if let Some((shown, _)) = s.client.take() {
                    s.ignored += shown.ignored_messages();
                }
            });
            c.close();
        }
    }

    /// A new live client is published for direct calls (`direct.rs`): a stdio one, and an
    /// HTTP one that carries no OAuth token (a call with one may need it refreshed first, and
    /// a refusal refreshed and sent again: the actor does both).
    fn publish(&self, client: &McpClient) {
        let kind = match client.transport_kind() {
            Some(TransportKind::Http) if self.bearer.borrow().is_some() => None,
            kind => kind,
        };
        if let (Some(kind), false) = (kind, self.shared.is_closed()) {
            self.shared.publish(Direct::new(
                client.clone(),
                kind,
                self.call_timeout(),
                self.name(),
                self.redact.clone(),
                self.headers.clone(),
            ));
        }
    }

    /// The live client, dialling if there is none (one dial at a time).
    pub(super) async fn client(
        self: &Rc<Self>,
    ) -> Result<(McpClient, Rc<ServerHello>), HandshakeError> {
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
                self.publish(&c);
                self.update(|s| {
                    s.client = Some((c.clone(), h.protocol.clone()));
                    s.state = LinkState::Connected;
                    s.last_error = None;
                });
                *self.last_dial_error.borrow_mut() = None;
                Ok((c, h))
            }
            Err(e) => {
                let state = if matches!(e, HandshakeError::NeedsAuth { .. }) {
                    LinkState::NeedsSignIn
                } else {
                    LinkState::Unavailable
                };
                self.fail(state, self.redact.clean(&e.message()));
                *self.last_dial_error.borrow_mut() = Some(e.clone());
                Err(e)
            }
        }
    }

    pub(super) async fn dial(self: &Rc<Self>) -> Result<(McpClient, ServerHello), HandshakeError> {
        let (client, sink, mut events) = McpClient::new();
        let transport = self
            .ctx
            .open(&self.server.transport, sink, |spec, sink| {
                StdioTransport::spawn(spec, sink).map(|t| t as SharedTransport)
            })
            .map_err(|e| HandshakeError::Rpc(RpcError::NotSent(e)))?;
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
    pub(super) async fn apply_bearer(
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
            Bearer::None => Ok(None),
            Bearer::Token(t) => {
                let sent = t.expose().to_owned();
                t.set_on(transport.as_ref())
                    .map_err(|e| HandshakeError::Rpc(RpcError::NotSent(e)))?;
                *self.bearer.borrow_mut() = Some(sent.clone());
                Ok(Some(sent))
            }
            // The caller records why (the dial's outcome, or the call's).
            Bearer::NeedsSignIn(why) => Err(HandshakeError::NeedsAuth {
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
    pub(super) async fn after_refusal(
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
            Bearer::Token(t) => {
                let now = t.expose().to_owned();
                t.set_on(transport.as_ref()).map_err(|e| e.to_string())?;
                *self.bearer.borrow_mut() = Some(now);
                Ok(())
            }
            Bearer::NeedsSignIn(why) => Err(why),
            Bearer::None => Err("the server needs the user to sign in".into()),
        }
    }

    pub(super) async fn discover(self: &Rc<Self>) -> Result<Discovered<Catalogue>, DiscoverError> {
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
    pub(super) fn learn_headers(&self, cat: &Catalogue) {
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
        self.headers.set(map);
    }

    /// A call; every error that leaves is cleaned of the server's secrets and control
    /// characters (a server may echo a secret it was sent in its error).
    pub(super) async fn call(self: Rc<Self>, target: CallTarget) -> Result<ResultText, CallError> {
        let redact = self.redact.clone();
        self.call_raw(target)
            .await
            .map_err(|e| clean_call_error(e, &redact))
    }

    /// The client for a call that found none, and the time the call has left. The call waits
    /// for the dial (its own, or the one already under way, such as a session's background
    /// check) up to `startupTimeoutMs` plus `callTimeoutMs` in all, and runs within what is
    /// left of that, at most `callTimeoutMs`. A dial under way started its handshake's window
    /// after its process was spawned, so waiting only `startupTimeoutMs` could give up a
    /// moment before that dial does, and answer `unavailable` while the session still says
    /// `connecting`.
    async fn dial_for_call(self: &Rc<Self>) -> Result<(McpClient, Duration), CallError> {
        let server = || self.name().to_owned();
        let call_timeout = self.call_timeout();
        let within = self.startup_timeout() + call_timeout;
        let deadline = tokio::time::Instant::now() + within;
        let (client, _) = match tokio::time::timeout_at(deadline, self.client()).await {
            Ok(Ok(c)) => c,
            Ok(Err(e @ HandshakeError::NeedsAuth { .. })) => {
                return Err(CallError::NeedsSignIn {
                    server: server(),
                    reason: e.message(),
                });
            }
            Ok(Err(e)) => {
                return Err(CallError::Unavailable {
                    server: server(),
                    reason: e.to_string(),
                })
            }
            Err(_) => {
                return Err(CallError::Unavailable {
                    server: server(),
                    reason: format!(
                        "it did not connect within {} ms (startupTimeoutMs plus callTimeoutMs)",
                        within.as_millis()
                    ),
                })
            }
        };
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        if left.is_zero() {
            // Connected just as the wait ran out: the request is not sent with no time to
            // answer (it would end as an unknown outcome).
            return Err(CallError::Unavailable {
                server: server(),
                reason: format!(
                    "it connected only after {} ms (startupTimeoutMs plus callTimeoutMs)",
                    within.as_millis()
                ),
            });
        }
        Ok((client, call_timeout.min(left)))
    }

    pub(super) async fn call_raw(
        self: Rc<Self>,
        target: CallTarget,
    ) -> Result<ResultText, CallError> {
        // The server's name goes into an error only: made when one is.
        let server = || self.name().to_owned();
        let (client, call_timeout) = match self.current() {
            Some((client, _)) => (client, self.call_timeout()),
            None => self.dial_for_call().await?,
        };
        // A connection made a while ago: its token, refreshed first when it is within a
        // minute of expiry (the book answers from its cache otherwise), as every request's
        // must be, not only the dial's.
        if self.bearer.borrow().is_some() {
            if let Some(t) = client_transport(&client) {
                if let Err(e) = self.apply_bearer(&t).await {
                    let reason = e.message();
                    self.set_error(self.redact.clean(&reason));
                    return Err(CallError::NeedsSignIn {
                        server: server(),
                        reason,
                    });
                }
            }
        }
        // A tool's arguments go out as the caller's text; a prompt's arguments are moved into
        // the params, never copied.
        let named = |name: String, arguments: Value| {
            let mut m = serde_json::Map::new();
            m.insert("name".into(), Value::String(name));
            m.insert("arguments".into(), arguments);
            Value::Object(m)
        };
        // What the params borrow: a tool's name and arguments, or the tree of another target.
        let (tool, tree);
        let (method, params, hdrs) = match target {
            CallTarget::Tool { name, arguments } => {
                let hdrs = self.headers.of(&name);
                tool = (name, arguments);
                let params = Params::Named {
                    name: &tool.0,
                    arguments: &tool.1,
                };
                ("tools/call", params, hdrs)
            }
            CallTarget::ReadResource { uri } => {
                tree = json!({ "uri": uri });
                ("resources/read", Params::Tree(&tree), vec![])
            }
            CallTarget::GetPrompt { name, arguments } => {
                tree = named(name, arguments);
                ("prompts/get", Params::Tree(&tree), vec![])
            }
        };
        // The answer stays the server's text (`ResultText`): it is passed on, not parsed.
        let mut r = client
            .request_text_params(method, Some(params), call_timeout, &hdrs)
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
                        .request_text_params(method, Some(params), call_timeout, &hdrs)
                        .await;
                }
                Err(why) => {
                    return Err(CallError::NeedsSignIn {
                        server: server(),
                        reason: why,
                    })
                }
            }
            if let Err(RpcError::NotSent(TransportError::Status {
                status: 401 | 403, ..
            })) = &r
            {
                return Err(CallError::NeedsSignIn {
                    server: server(),
                    reason: "the server still refuses the request after a refresh".into(),
                });
            }
        }
        let (answer, drop_client) = call_outcome(r, &client, server);
        if drop_client {
            self.drop_client();
        }
        answer
    }
}

/// What a call's answer means for its caller, and whether its client must be dropped (a
/// timed-out call; a request that could not leave or was lost because the client closed):
/// the next call dials again. Shared by the actor's calls and the direct ones.
pub(super) fn call_outcome(
    r: Result<ResultText, RpcError>,
    client: &McpClient,
    server: impl Fn() -> String,
) -> (Result<ResultText, CallError>, bool) {
    match r {
        Ok(v) => {
            let checked = check_complete_head(v.head()).map_err(|e| CallError::Invalid {
                server: server(),
                reason: e.to_string(),
            });
            (checked.map(|()| v), false)
        }
        Err(RpcError::Server(error)) => (
            Err(CallError::Server {
                server: server(),
                error,
            }),
            false,
        ),
        // Refused unrun, with no token to refresh: the actor's calls settle a refusal before
        // this (a refresh, or the same words), so only a direct call (no token) comes here.
        Err(RpcError::NotSent(TransportError::Status {
            status: 401 | 403, ..
        })) => (
            Err(CallError::NeedsSignIn {
                server: server(),
                reason: "the server needs the user to sign in".into(),
            }),
            false,
        ),
        Err(RpcError::NotSent(e)) => (
            Err(CallError::NotRun {
                server: server(),
                reason: e.to_string(),
            }),
            client.is_closed(),
        ),
        // A timed-out call closes the client; the next call dials again.
        Err(e @ RpcError::Timeout(_)) => (
            Err(CallError::Unknown {
                server: server(),
                reason: e.to_string(),
            }),
            true,
        ),
        // A lost process or pipe closes the client, and the next call dials again; over
        // HTTP one request's stream can be lost while the session lives on (its listening
        // stream and the other calls in flight with it).
        Err(RpcError::Lost(e)) => (
            Err(CallError::Unknown {
                server: server(),
                reason: e.to_string(),
            }),
            client.is_closed(),
        ),
        Err(RpcError::Invalid(reason)) => (
            Err(CallError::Invalid {
                server: server(),
                reason,
            }),
            false,
        ),
    }
}

/// `e` with its reasons and the server's error message and data cleaned by `redact`.
pub(super) fn clean_call_error(e: CallError, redact: &Redactor) -> CallError {
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

pub(super) fn client_transport(client: &McpClient) -> Option<SharedTransport> {
    client.transport_handle()
}
