//! Sign-ins (daemon-wide actor): one per server at a time. `Start` asks the server for its
//! challenge, runs discovery and picks the client (`oauth`), binds the loopback callback
//! listener on `127.0.0.1:33418` (an ephemeral port when that one is busy, which registers
//! the client again for its redirect URI) and answers the authorization URL. The callback
//! arrives on the loopback or pasted through the API (`Callback`); the first valid one wins
//! (its `state` and `iss` are checked either way), the code is exchanged, the tokens are
//! stored in `creds.json` under `mcp.<server>.oauth` with the server URL they belong to, and
//! a [`SignInEvent`] tells the API to reload the sessions. `Cancel` ends a sign-in: a later
//! callback for it is refused. A sign-in nobody completes ends after ten minutes.
//!
//! Owns: sign-ins in progress and the loopback listeners. Must not touch: the HTTP API (it
//! hears of results through the events), connections (they read the tokens from the book).

use super::tokens::{server_creds, TokenBook};
use crate::oauth::{flow, ClientRecord, ClientSource, ConfiguredClient, Fetcher, PendingSignIn};
use crate::store::settings::{Credentials, ExtensionsFile, TransportConfig};
use actix::prelude::*;
use serde::Serialize;
use serde_json::Value;
use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::broadcast;

/// The loopback callback's port (the seed's); an ephemeral one when it is busy.
pub const CALLBACK_PORT: u16 = 33418;
/// A sign-in nobody completes ends after this.
pub const SIGN_IN_LIFETIME: Duration = Duration::from_secs(600);
/// The largest request head the loopback listener reads.
const MAX_CALLBACK_HEAD: usize = 16 * 1024;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum LoginState {
    Pending,
    /// The code is being exchanged.
    Completing,
    SignedIn,
    Failed,
    Cancelled,
    Expired,
}

/// A sign-in as the API shows it.
#[derive(Debug, Clone, Serialize)]
pub struct LoginView {
    pub login: String,
    pub state: LoginState,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub authorization_url: Option<String>,
    pub redirect_uri: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    pub expires_in_secs: u64,
}

/// Told to whoever listens (the API: it reloads the sessions and tells them).
#[derive(Debug, Clone, Serialize)]
pub struct SignInEvent {
    pub server: String,
    pub state: LoginState,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

#[derive(Debug, Clone, thiserror::Error)]
pub enum SignInError {
    #[error("no server named {0:?} is configured")]
    UnknownServer(String),
    #[error("server {0:?} is a stdio server: only HTTP servers sign in")]
    NotHttp(String),
    #[error("{0}")]
    Settings(String),
    #[error("the sign-in could not start: {0}")]
    Failed(String),
    #[error("no sign-in of {0:?} is in progress")]
    NotPending(String),
    #[error("the callback was refused: {0}")]
    BadCallback(String),
    #[error(
        "server {server:?} gets its token with the {grant} grant (oauth_client.grant), without \
         a browser: there is no sign-in"
    )]
    ServiceGrant { server: String, grant: String },
}

struct Login {
    id: u64,
    state: LoginState,
    pending: PendingSignIn,
    error: Option<String>,
    started: tokio::time::Instant,
    listener: Option<tokio::task::JoinHandle<()>>,
}

impl Login {
    fn view(&self, server: &str) -> LoginView {
        let left = SIGN_IN_LIFETIME.saturating_sub(self.started.elapsed());
        LoginView {
            login: format!("mcp:{server}"),
            state: self.state,
            authorization_url: (self.state == LoginState::Pending)
                .then(|| self.pending.authorization_url.clone()),
            redirect_uri: self.pending.redirect_uri.clone(),
            error: self.error.clone(),
            expires_in_secs: left.as_secs(),
        }
    }

    fn stop_listening(&mut self) {
        if let Some(l) = self.listener.take() {
            l.abort();
        }
    }
}

pub struct SignIns {
    home: PathBuf,
    tokens: TokenBook,
    logins: HashMap<String, Login>,
    next: u64,
    events: broadcast::Sender<SignInEvent>,
}

impl SignIns {
    pub fn new(home: PathBuf, tokens: TokenBook) -> SignIns {
        SignIns {
            home,
            tokens,
            logins: HashMap::new(),
            next: 1,
            events: broadcast::channel(64).0,
        }
    }

    pub fn events(&self) -> broadcast::Sender<SignInEvent> {
        self.events.clone()
    }

    fn tell(&self, server: &str, state: LoginState, error: Option<String>) {
        let _ = self.events.send(SignInEvent {
            server: server.to_owned(),
            state,
            error,
        });
    }
}

impl Actor for SignIns {
    type Context = Context<Self>;
}

/// What a sign-in of `server` starts from: its URL and what `creds.json` holds for it.
struct Setup {
    url: url::Url,
    configured: Option<ConfiguredClient>,
    known: Vec<ClientRecord>,
    step_up: Vec<String>,
}

fn setup(home: &std::path::Path, server: &str) -> Result<Setup, SignInError> {
    let ext = ExtensionsFile::load(home).map_err(|e| SignInError::Settings(e.to_string()))?;
    let mcp = ext
        .mcp()
        .map_err(|e| SignInError::Settings(e.to_string()))?;
    let cfg = mcp
        .servers
        .iter()
        .find(|s| s.name == server)
        .ok_or_else(|| SignInError::UnknownServer(server.to_owned()))?;
    let TransportConfig::Http { url, .. } = &cfg.transport else {
        return Err(SignInError::NotHttp(server.to_owned()));
    };
    let url = crate::store::settings::validate_url(server, url)
        .map_err(|e| SignInError::Settings(e.to_string()))?;
    let creds = Credentials::load(home).map_err(|e| SignInError::Settings(e.to_string()))?;
    let s = creds.raw.get("mcp").and_then(|m| m.get(server));
    let grant = super::grants::grant_of(s.and_then(|s| s.get("oauth_client")));
    if grant != "authorization_code" {
        return Err(SignInError::ServiceGrant {
            server: server.to_owned(),
            grant: grant.to_owned(),
        });
    }
    let configured = s
        .and_then(|s| s.get("oauth_client"))
        .and_then(|c| serde_json::from_value::<ConfiguredClient>(c.clone()).ok());
    let known = s
        .and_then(|s| s.get("oauth_clients"))
        .and_then(|c| serde_json::from_value::<Vec<ClientRecord>>(c.clone()).ok())
        .unwrap_or_default();
    let step_up = s
        .and_then(|s| s.get("oauth"))
        .and_then(|r| serde_json::from_value::<crate::oauth::TokenRecord>(r.clone()).ok())
        .filter(|r| r.belongs_to(url.as_str()))
        .map(|r| r.step_up)
        .unwrap_or_default();
    Ok(Setup {
        url,
        configured,
        known,
        step_up,
    })
}

/// Bind the loopback listener: the seed's port, else an ephemeral one.
fn bind_loopback() -> std::io::Result<tokio::net::TcpListener> {
    let l = std::net::TcpListener::bind(("127.0.0.1", CALLBACK_PORT))
        .or_else(|_| std::net::TcpListener::bind(("127.0.0.1", 0)))?;
    l.set_nonblocking(true)?;
    tokio::net::TcpListener::from_std(l)
}

/// Start (or answer the one in progress).
#[derive(Message)]
#[rtype(result = "Result<LoginView, SignInError>")]
pub struct Start {
    pub server: String,
}

impl Handler<Start> for SignIns {
    type Result = ResponseActFuture<Self, Result<LoginView, SignInError>>;

    fn handle(&mut self, msg: Start, ctx: &mut Self::Context) -> Self::Result {
        let server = msg.server;
        if let Some(l) = self.logins.get(&server) {
            if matches!(l.state, LoginState::Pending | LoginState::Completing) {
                let v = l.view(&server);
                return Box::pin(async move { Ok(v) }.into_actor(self));
            }
        }
        let home = self.home.clone();
        let tls = self.tokens.tls();
        let me = ctx.address();
        let id = self.next;
        self.next += 1;
        let s2 = server.clone();
        let fut = async move {
            let setup = setup(&home, &s2)?;
            let listener = bind_loopback()
                .map_err(|e| SignInError::Failed(format!("the callback listener: {e}")))?;
            let port = listener
                .local_addr()
                .map_err(|e| SignInError::Failed(e.to_string()))?
                .port();
            let redirect = format!("http://127.0.0.1:{port}/callback");
            let fetcher = Fetcher::new(tls);
            let challenge = fetcher.challenge(&setup.url).await.ok().flatten();
            let (_, pending) = flow::start(
                &fetcher,
                flow::SignInOptions {
                    server_url: setup.url.as_str(),
                    challenge: challenge.as_ref(),
                    configured: setup.configured.as_ref(),
                    known_clients: &setup.known,
                    step_up: &setup.step_up,
                    redirect_uri: &redirect,
                },
            )
            .await
            .map_err(|e| SignInError::Failed(e.to_string()))?;
            let task = tokio::task::spawn_local(serve_loopback(listener, port, me, s2, id));
            Ok((pending, task))
        };
        Box::pin(fut.into_actor(self).map(move |r, act, ctx| {
            let (pending, task) = r?;
            if let Some(mut old) = act.logins.remove(&server) {
                old.stop_listening();
            }
            let login = Login {
                id,
                state: LoginState::Pending,
                pending,
                error: None,
                started: tokio::time::Instant::now(),
                listener: Some(task),
            };
            let v = login.view(&server);
            act.logins.insert(server.clone(), login);
            tracing::info!(server = %server, redirect = %v.redirect_uri, "sign-in started");
            act.tell(&server, LoginState::Pending, None);
            let s3 = server.clone();
            ctx.run_later(SIGN_IN_LIFETIME, move |act, _| {
                if let Some(l) = act.logins.get_mut(&s3) {
                    if l.id == id && l.state == LoginState::Pending {
                        l.state = LoginState::Expired;
                        l.stop_listening();
                        act.tell(&s3, LoginState::Expired, None);
                    }
                }
            });
            Ok(v)
        }))
    }
}

/// A callback URL, from the loopback (`login` = the sign-in it belongs to) or pasted.
#[derive(Message)]
#[rtype(result = "Result<LoginView, SignInError>")]
pub struct Callback {
    pub server: String,
    pub url: String,
    /// The loopback's sign-in; `None` for a pasted URL (the current sign-in).
    pub login: Option<u64>,
}

impl Handler<Callback> for SignIns {
    type Result = ResponseActFuture<Self, Result<LoginView, SignInError>>;

    fn handle(&mut self, msg: Callback, ctx: &mut Self::Context) -> Self::Result {
        let server = msg.server.clone();
        let not_pending = SignInError::NotPending(msg.server.clone());
        let Some(l) = self.logins.get_mut(&server) else {
            return Box::pin(async move { Err(not_pending) }.into_actor(self));
        };
        if l.state != LoginState::Pending || msg.login.is_some_and(|id| id != l.id) {
            return Box::pin(async move { Err(not_pending) }.into_actor(self));
        }
        // Checked before anything changes: a URL with another state (or not for this
        // redirect) does not end the sign-in; the user may paste the right one. An error
        // with the right state (`access_denied`...) is the authorization server's answer to
        // this sign-in: no code will come, so the sign-in has failed.
        match flow::read_callback(&l.pending, &msg.url) {
            Ok(_) => {}
            Err(e @ crate::oauth::OAuthError::Denied { .. }) => {
                let e = e.to_string();
                l.state = LoginState::Failed;
                l.error = Some(e.clone());
                if msg.login.is_some() {
                    // The listener answers this very request (see below); stopped after.
                    if let Some(task) = l.listener.take() {
                        ctx.run_later(Duration::from_secs(5), move |_, _| task.abort());
                    }
                } else {
                    l.stop_listening();
                }
                tracing::warn!(server = %server, error = %e, "the sign-in was refused");
                self.tell(&server, LoginState::Failed, Some(e.clone()));
                return Box::pin(async move { Err(SignInError::BadCallback(e)) }.into_actor(self));
            }
            Err(e) => {
                return Box::pin(
                    async move { Err(SignInError::BadCallback(e.to_string())) }.into_actor(self),
                );
            }
        }
        l.state = LoginState::Completing;
        let pending = l.pending.clone();
        let id = l.id;
        let tls = self.tokens.tls();
        let home = self.home.clone();
        let url = msg.url;
        let from_loopback = msg.login.is_some();
        let s2 = server.clone();
        let fut = async move {
            let fetcher = Fetcher::new(tls);
            let record = flow::complete(&fetcher, &pending, &url)
                .await
                .map_err(|e| e.to_string())?;
            let registered =
                (pending.client.source == ClientSource::Registered).then(|| pending.client.clone());
            let _serial = crate::store::pair::settings_lock().lock().await;
            tokio::task::spawn_blocking(move || {
                crate::store::pair::update_creds(&home, |raw| {
                    let s = server_creds(raw, &s2);
                    if let Ok(v) = serde_json::to_value(&record) {
                        s.insert("oauth".into(), v);
                    }
                    s.remove("oauth_refused");
                    s.remove("oauth_refused_grant");
                    s.remove("oauth_signed_out");
                    if let Some(c) = registered {
                        let mut known: Vec<ClientRecord> = s
                            .get("oauth_clients")
                            .and_then(|k| serde_json::from_value(k.clone()).ok())
                            .unwrap_or_default();
                        known.retain(|k| !k.reusable_for(&c.issuer, &c.redirect_uri));
                        known.push(c);
                        if let Ok(v) = serde_json::to_value(&known) {
                            s.insert("oauth_clients".into(), v);
                        }
                    }
                    true
                })
            })
            .await
            .map_err(|e| e.to_string())?
            .map_err(|e| e.to_string())?;
            Ok::<(), String>(())
        };
        Box::pin(fut.into_actor(self).map(move |r, act, ctx| {
            act.tokens.forget(&server);
            let Some(l) = act.logins.get_mut(&server).filter(|l| l.id == id) else {
                return Err(SignInError::NotPending(server));
            };
            if from_loopback {
                // The listener's task is the one waiting for this answer, to write the
                // browser's page: aborting it now would close the browser's connection with
                // no answer. It ends by itself after a success; after a failure it is stopped
                // a moment later.
                if let Some(task) = l.listener.take() {
                    ctx.run_later(Duration::from_secs(5), move |_, _| task.abort());
                }
            } else {
                l.stop_listening();
            }
            match r {
                Ok(()) => {
                    // The file no longer holds a refusal; neither does the book.
                    act.tokens.clear_refusal(&server);
                    l.state = LoginState::SignedIn;
                    tracing::info!(server = %server, "signed in");
                    let v = l.view(&server);
                    act.tell(&server, LoginState::SignedIn, None);
                    Ok(v)
                }
                Err(e) => {
                    l.state = LoginState::Failed;
                    l.error = Some(e.clone());
                    tracing::warn!(server = %server, error = %e, "the sign-in failed");
                    act.tell(&server, LoginState::Failed, Some(e.clone()));
                    Err(SignInError::BadCallback(e))
                }
            }
        }))
    }
}

#[derive(Message)]
#[rtype(result = "Option<LoginView>")]
pub struct Get {
    pub server: String,
}

impl Handler<Get> for SignIns {
    type Result = Option<LoginView>;

    fn handle(&mut self, msg: Get, _: &mut Self::Context) -> Self::Result {
        self.logins.get(&msg.server).map(|l| l.view(&msg.server))
    }
}

#[derive(Message)]
#[rtype(result = "Option<LoginView>")]
pub struct Cancel {
    pub server: String,
}

impl Handler<Cancel> for SignIns {
    type Result = Option<LoginView>;

    fn handle(&mut self, msg: Cancel, _: &mut Self::Context) -> Self::Result {
        let l = self.logins.get_mut(&msg.server)?;
        if matches!(l.state, LoginState::Pending | LoginState::Completing) {
            l.state = LoginState::Cancelled;
            l.stop_listening();
            let v = l.view(&msg.server);
            self.tell(&msg.server, LoginState::Cancelled, None);
            return Some(v);
        }
        Some(l.view(&msg.server))
    }
}

/// The loopback listener of one sign-in: each connection's request line is read (at most
/// 16 KiB of head, 10 s), `/callback?...` goes to the actor, the browser gets a short page.
async fn serve_loopback(
    listener: tokio::net::TcpListener,
    port: u16,
    me: Addr<SignIns>,
    server: String,
    id: u64,
) {
    loop {
        let Ok((mut sock, _)) = listener.accept().await else {
            return;
        };
        let head = tokio::time::timeout(Duration::from_secs(10), async {
            let mut buf = Vec::new();
            let mut chunk = [0u8; 2048];
            while !buf.windows(4).any(|w| w == b"\r\n\r\n") && buf.len() < MAX_CALLBACK_HEAD {
                match sock.read(&mut chunk).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => buf.extend_from_slice(&chunk[..n]),
                }
            }
            buf
        })
        .await
        .unwrap_or_default();
        let line = String::from_utf8_lossy(&head);
        let target = line
            .lines()
            .next()
            .and_then(|l| l.strip_prefix("GET "))
            .and_then(|l| l.split(' ').next())
            .unwrap_or("")
            .to_owned();
        let (status, body, done) = if target.starts_with("/callback") {
            let url = format!("http://127.0.0.1:{port}{target}");
            match me
                .send(Callback {
                    server: server.clone(),
                    url,
                    login: Some(id),
                })
                .await
            {
                Ok(Ok(_)) => (
                    "200 OK",
                    "Signed in to the MCP server. You can close this tab.".to_owned(),
                    true,
                ),
                Ok(Err(e)) => (
                    "400 Bad Request",
                    format!("The sign-in did not complete: {e}"),
                    false,
                ),
                Err(_) => (
                    "503 Service Unavailable",
                    "The daemon is stopping.".to_owned(),
                    true,
                ),
            }
        } else {
            ("404 Not Found", "Not found.".to_owned(), false)
        };
        let page = format!(
            "<!doctype html><meta charset=utf-8><title>albedo-mcp</title><p>{}</p>",
            html_escape(&body)
        );
        let resp = format!(
            "HTTP/1.1 {status}\r\nContent-Type: text/html; charset=utf-8\r\nContent-Length: {}\r\nCache-Control: no-store\r\nConnection: close\r\n\r\n{page}",
            page.len()
        );
        let _ = sock.write_all(resp.as_bytes()).await;
        let _ = sock.shutdown().await;
        if done {
            return;
        }
    }
}

fn html_escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// The `auth` group of a server for the settings view: never a token. `now` is what the token
/// book holds ([`super::tokens::TokenBook::held`]): its tokens and refusals are the ones in
/// use, and may not have reached `creds.json` yet.
pub fn auth_view(
    creds: Option<&Credentials>,
    server: &str,
    url: Option<&str>,
    needs: bool,
    now: super::tokens::Held,
) -> Value {
    let s = creds
        .and_then(|c| c.raw.get("mcp"))
        .and_then(|m| m.get(server));
    let record = now
        .record
        .or_else(|| {
            s.and_then(|s| s.get("oauth"))
                .and_then(|r| serde_json::from_value::<crate::oauth::TokenRecord>(r.clone()).ok())
        })
        .filter(|r| url.is_none_or(|u| r.belongs_to(u)));
    let refused = s
        .and_then(|s| s.get("oauth_refused"))
        .and_then(Value::as_str)
        .map(str::to_owned)
        .or(now.refused);
    let refused = refused.as_deref();
    let signed_out = s
        .and_then(|s| s.get("oauth_signed_out"))
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let (state, reason) = match (&record, refused) {
        (Some(_), Some(why)) => ("needs_sign_in", Some(why.to_owned())),
        // A 403 insufficient_scope left a step-up: the server refuses these tokens until the
        // user signs in again, granting more.
        (Some(r), None) if !r.step_up.is_empty() => (
            "needs_sign_in",
            Some(format!(
                "the server needs more scope (insufficient_scope): sign in again to grant {}",
                r.step_up.join(" ")
            )),
        ),
        (Some(_), None) => ("signed_in", None),
        // A grant without a browser the authorization server refused: not tried again.
        (None, Some(why)) => ("needs_sign_in", Some(why.to_owned())),
        (None, _) if signed_out => ("signed_out", None),
        (None, _) if needs => ("needs_sign_in", None),
        (None, _) => ("none", None),
    };
    let client = record.as_ref().map(|r| {
        serde_json::json!({
            "client_id": r.client.client_id,
            "source": r.client.source,
        })
    });
    let grant = super::grants::grant_of(s.and_then(|s| s.get("oauth_client")));
    serde_json::json!({
        "state": state,
        "grant": grant,
        "account": record.as_ref().and_then(|r| r.account.clone()),
        "expires_at": record.as_ref().and_then(|r| r.expires_at),
        "scope": record.as_ref().and_then(|r| r.scope.clone()),
        "step_up": record.as_ref().map(|r| r.step_up.clone()).unwrap_or_default(),
        "reason": reason,
        "client": client,
    })
}
