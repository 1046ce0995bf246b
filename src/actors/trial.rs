//! Trying one configured server, outside any session and the registry, to show how far it
//! gets: `POST /settings/mcp/servers/{name}/test`. The trial dials the server once (stdio:
//! with its stderr captured, see [`crate::transport::stderr`]), runs the handshake and a
//! discovery, and records each stage, the first error and the server's stderr, all cleaned
//! of the server's secret values by the same [`Redactor`] that cleans a connection's errors.
//! Nothing supervises it and nothing is kept: the client is closed at the end (stdio: the
//! launcher ends the server's process group; HTTP: the session is deleted).
//!
//! It runs on the caller's arbiter (the HTTP transport's driver is a local task there; awc
//! is not `Send`). The whole trial is bounded by the server's `startupTimeoutMs`, under one
//! permit of the daemon-wide dial limit.
//!
//! Owns: one trial's client and its report. Must not touch: the API, the store, sessions,
//! the registry.

use super::connection::{secret_values, ConnContext};
use super::runtime::Runtime;
use crate::client::discovery::{self, DiscoveryError};
use crate::client::handshake::{self, HandshakeError};
use crate::client::{McpClient, RpcError};
use crate::protocol::text::{unsafe_char, Redactor};
use crate::protocol::Era;
use crate::store::settings::{ResolvedServer, ResolvedTransport};
use crate::transport::stderr::{Captured, StderrCapture};
use crate::transport::stdio::StdioTransport;
use crate::transport::{Inbound, InboundSink, SharedTransport, TransportError};
use actix::prelude::*;
use serde::Serialize;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::Instant;

/// How long the trial waits, once the client is closed, for a server's stderr to end (at
/// least [`STDERR_GRACE_MIN`], even when the startup time is spent).
const STDERR_GRACE: Duration = Duration::from_millis(300);
const STDERR_GRACE_MIN: Duration = Duration::from_millis(50);

/// How far a trial got (the answer of `POST /settings/mcp/servers/{name}/test`).
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct TrialReport {
    pub server: String,
    /// `stdio` or `http`.
    pub transport: &'static str,
    /// stdio: the server process started; HTTP: the server answered the first request.
    pub spawned: bool,
    /// The handshake finished: `era` and `protocol_version` are known.
    pub initialized: bool,
    /// The discovery finished: the counts are the catalogue's (0 until then).
    pub discovered: bool,
    pub tools: usize,
    pub resources: usize,
    pub prompts: usize,
    pub era: Option<Era>,
    pub protocol_version: Option<String>,
    /// The first error, cleaned of the server's secrets.
    pub error: Option<String>,
    /// The server asked for a sign-in (HTTP 401 or 403).
    pub needs_sign_in: bool,
    /// stdio: the last 64 KiB of the server's stderr, secrets redacted (a first line says
    /// how many bytes came before); HTTP: "".
    pub stderr: String,
    pub elapsed_ms: u64,
}

/// The connection context the Runtime dials with (its launcher, its HTTP opener, the
/// daemon-wide dial limit), for a trial run elsewhere.
#[derive(Message)]
#[rtype(result = "ConnContext")]
pub struct TrialContext;

impl Handler<TrialContext> for Runtime {
    type Result = MessageResult<TrialContext>;

    fn handle(&mut self, _: TrialContext, _ctx: &mut Self::Context) -> Self::Result {
        MessageResult(self.ctx.clone())
    }
}

/// What the transport said on its way to the client: whether the server answered at all,
/// and whether the launcher could not start the command.
#[derive(Default)]
struct Seen {
    answered: AtomicBool,
    spawn_error: Mutex<Option<String>>,
}

/// Passes everything to the client, noting what [`Seen`] records.
struct Observer {
    inner: Arc<dyn InboundSink>,
    seen: Arc<Seen>,
}

impl InboundSink for Observer {
    fn deliver(&self, ev: Inbound) {
        match &ev {
            Inbound::Message(_) => self.seen.answered.store(true, Ordering::Release),
            Inbound::Lost { error, .. } | Inbound::Closed(error) => self.note(error),
        }
        self.inner.deliver(ev);
    }
}

impl Observer {
    fn note(&self, error: &TransportError) {
        match error {
            TransportError::Status { .. } | TransportError::SessionExpired(_) => {
                self.seen.answered.store(true, Ordering::Release)
            }
            TransportError::Spawn(m) => {
                if let Ok(mut g) = self.seen.spawn_error.lock() {
                    g.get_or_insert_with(|| m.clone());
                }
            }
            _ => {}
        }
    }
}

/// The transport error under a handshake or discovery error, if that is what it was.
fn transport_error(e: &RpcError) -> Option<&TransportError> {
    match e {
        RpcError::NotSent(t) | RpcError::Lost(t) => Some(t),
        _ => None,
    }
}

/// Whether an HTTP error means the server answered (a status, a JSON-RPC error, an answer
/// we could not use).
fn answered(e: &HandshakeError) -> bool {
    match e {
        HandshakeError::Rpc(r) => match transport_error(r) {
            Some(t) => matches!(
                t,
                TransportError::Status { .. }
                    | TransportError::SessionExpired(_)
                    | TransportError::Protocol(_)
            ),
            None => matches!(r, RpcError::Server(_) | RpcError::Invalid(_)),
        },
        HandshakeError::Timeout(_) => false,
        _ => true,
    }
}

fn sign_in_status(t: &TransportError) -> bool {
    matches!(t, TransportError::Status { status, .. } if *status == 401 || *status == 403)
}

/// Dial `server` once, handshake and discover within its `startupTimeoutMs`, and close it;
/// the report of how far it got. Runs on the caller's arbiter.
pub async fn trial(server: &ResolvedServer, ctx: &ConnContext) -> TrialReport {
    let started = Instant::now();
    let secrets = secret_values(server);
    crate::protocol::text::register_secrets(secrets.iter().map(String::as_str));
    let redact = Redactor::new(secrets);
    let timeout = Duration::from_millis(server.config.startup_timeout_ms);
    let deadline = started + timeout;
    let mut report = TrialReport {
        server: server.config.name.clone(),
        transport: super::connection::transport_name(server),
        spawned: false,
        initialized: false,
        discovered: false,
        tools: 0,
        resources: 0,
        prompts: 0,
        era: None,
        protocol_version: None,
        error: None,
        needs_sign_in: false,
        stderr: String::new(),
        elapsed_ms: 0,
    };
    let (client, sink, events) = McpClient::new();
    let seen = Arc::new(Seen::default());
    let sink: Arc<dyn InboundSink> = Arc::new(Observer {
        inner: sink,
        seen: seen.clone(),
    });
    let mut capture = None;
    let run = Run {
        server,
        ctx,
        client: &client,
        seen: &seen,
        redact: &redact,
        deadline,
    };
    let staged = run.stages(sink, &mut capture, &mut report);
    if tokio::time::timeout_at(deadline, staged).await.is_err() && report.error.is_none() {
        report.error = Some(timed_out(server));
    }
    // The launcher could not start the command: the server never ran, and the launcher's
    // words say why better than the handshake that failed after.
    if let Ok(Some(m)) = seen.spawn_error.lock().map(|g| g.clone()) {
        report.spawned = false;
        report.error = Some(redact.clean(&TransportError::Spawn(m).to_string()));
    }
    client.close();
    drop(events);
    if let Some(c) = capture {
        let left = deadline.saturating_duration_since(Instant::now());
        c.finished(left.min(STDERR_GRACE).max(STDERR_GRACE_MIN))
            .await;
        report.stderr = stderr_text(&c.snapshot(), &redact);
    }
    report.elapsed_ms = started.elapsed().as_millis() as u64;
    report
}

/// The error of a trial that ran out of time.
fn timed_out(server: &ResolvedServer) -> String {
    format!(
        "the server did not finish starting within {} ms (startupTimeoutMs)",
        server.config.startup_timeout_ms
    )
}

/// One trial's fixed parts.
struct Run<'a> {
    server: &'a ResolvedServer,
    ctx: &'a ConnContext,
    client: &'a McpClient,
    seen: &'a Seen,
    redact: &'a Redactor,
    deadline: Instant,
}

impl Run<'_> {
    fn left(&self) -> Duration {
        self.deadline.saturating_duration_since(Instant::now())
    }

    /// The stages, each recorded in `report` as it finishes (so that a trial cut short by
    /// its deadline still says how far it got).
    async fn stages(
        &self,
        sink: Arc<dyn InboundSink>,
        capture: &mut Option<StderrCapture>,
        report: &mut TrialReport,
    ) {
        let (ctx, client, redact) = (self.ctx, self.client, self.redact);
        let _permit = ctx.dials.acquire().await;
        let opened = ctx.open(&self.server.transport, sink, |spec, sink| {
            StdioTransport::spawn_capturing(spec, sink).map(|(t, c)| {
                *capture = Some(c);
                t as SharedTransport
            })
        });
        let transport = match opened {
            Ok(t) => t,
            Err(e) => {
                report.error = Some(redact.clean(&e.to_string()));
                return;
            }
        };
        let stdio = capture.is_some();
        // A signed-in server is tried with its token, as a session would use it.
        if let (ResolvedTransport::Http { url, .. }, Some(book)) =
            (&self.server.transport, &ctx.tokens)
        {
            let grant = super::grants::ServiceGrant::of(self.server);
            if let super::tokens::Bearer::Token(t) = book
                .bearer_as(&self.server.config.name, url.as_str(), grant.as_ref())
                .await
            {
                let _ = t.set_on(transport.as_ref());
            }
        }
        // stdio: the launcher started (whether the command did shows below).
        report.spawned = stdio;
        client.attach(transport);
        let hello = match handshake::handshake(client, self.left()).await {
            Ok(h) => h,
            Err(e) => {
                if !stdio {
                    report.spawned = answered(&e) || self.seen.answered.load(Ordering::Acquire);
                }
                report.needs_sign_in = matches!(e, HandshakeError::NeedsAuth { .. });
                report.error = Some(match e {
                    // What was left of the startup time ran out.
                    HandshakeError::Timeout(_) => timed_out(self.server),
                    e => redact.clean(&e.to_string()),
                });
                return;
            }
        };
        report.spawned = true;
        report.initialized = true;
        report.era = Some(hello.protocol.era);
        report.protocol_version = Some(hello.protocol.version.clone());
        let budget = discovery::Budget::new(self.left());
        match discovery::discover_within(client, &hello, &budget).await {
            Ok(cat) => {
                report.discovered = true;
                report.tools = cat.tools.len();
                report.resources = cat.resources.len();
                report.prompts = cat.prompts.len();
            }
            Err(e) => {
                if let DiscoveryError::Rpc(r) = &e {
                    report.needs_sign_in = transport_error(r).is_some_and(sign_in_status);
                }
                report.error = Some(match e {
                    DiscoveryError::Timeout(_) => timed_out(self.server),
                    e => redact.clean(&e.to_string()),
                });
            }
        }
    }
}

/// The captured stderr as the report shows it: secrets redacted (also halves of one at a
/// cut edge), control characters but newlines and tabs replaced, and a first line saying
/// how many bytes were dropped before the tail.
fn stderr_text(c: &Captured, redact: &Redactor) -> String {
    let text = redact.redact_piece(&c.text, c.dropped > 0, !c.complete);
    let mut out = String::with_capacity(text.len() + 48);
    if c.dropped > 0 {
        out.push_str(&format!("[{} earlier bytes dropped]\n", c.dropped));
    }
    out.extend(text.chars().map(|ch| {
        if ch != '\n' && ch != '\t' && unsafe_char(ch) {
            ' '
        } else {
            ch
        }
    }));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stderr_is_redacted_cleaned_and_says_what_was_dropped() {
        let r = Redactor::new(["hunter2-secret".into()]);
        let c = Captured {
            text: "2-secret tail\n\u{1b}[31mtoken hunter2-secret\tok\nhunt".into(),
            dropped: 70_000,
            complete: false,
        };
        assert_eq!(
            stderr_text(&c, &r),
            "[70000 earlier bytes dropped]\n[redacted] tail\n [31mtoken [redacted]\tok\n[redacted]"
        );
        let whole = Captured {
            text: "boom: missing config\n".into(),
            dropped: 0,
            complete: true,
        };
        assert_eq!(stderr_text(&whole, &r), "boom: missing config\n");
    }
}
