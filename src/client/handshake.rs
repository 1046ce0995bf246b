//! Finding a server's era and opening the connection, by the 2026-07-28 backward
//! compatibility rules: `server/discover` first, as 2026-07-28; a `DiscoverResult` naming
//! 2026-07-28 or a `-32022` whose `supported` names it makes the server modern; anything else
//! means an older server, which gets `initialize`. Over stdio a server may ignore the probe,
//! so `initialize` follows after one second of silence and whichever answer comes first, as
//! its era expects, decides.

use super::{McpClient, RpcError, CLIENT_NAME, CLIENT_VERSION};
use crate::protocol::era::{self, classify_named, Named, ProtocolVersion};
use crate::protocol::jsonrpc::{self, ErrorObject};
use crate::transport::{TransportError, TransportKind};
use serde_json::{json, Value};
use std::time::Duration;
use tokio::time::Instant;

/// What the server told us about itself when the connection opened.
#[derive(Debug, Clone)]
pub struct ServerHello {
    pub protocol: ProtocolVersion,
    pub capabilities: Value,
    pub server_info: Option<Value>,
    pub instructions: Option<String>,
}

#[derive(Debug, Clone, thiserror::Error)]
pub enum HandshakeError {
    #[error("{0}")]
    Rpc(#[from] RpcError),
    #[error("the server needs the user to sign in (HTTP {status})")]
    NeedsAuth {
        status: u16,
        www_authenticate: Option<String>,
        /// Why, when albedo knows better than the status (a stored sign-in that must be
        /// renewed, a refused grant): what the user is told.
        reason: Option<String>,
    },
    #[error("the server answered initialize with protocol version {0:?}, which albedo does not speak (it accepts {accepted})", accepted = era::LEGACY_ACCEPTED.join(", "))]
    UnsupportedVersion(String),
    #[error("the server speaks none of albedo's protocol versions; it offered: {}", if .0.is_empty() { "nothing".to_owned() } else { .0.join(", ") })]
    NoCommonVersion(Vec<String>),
    #[error("the server refused the modern request: {0}")]
    ModernRefusal(ErrorObject),
    #[error("no answer to the handshake within {} ms", .0.as_millis())]
    Timeout(Duration),
    #[error("invalid handshake answer: {0}")]
    Invalid(String),
}

impl HandshakeError {
    /// What the user is told: the reason albedo knows (`NeedsAuth`'s), else the error itself.
    pub fn message(&self) -> String {
        match self {
            HandshakeError::NeedsAuth {
                reason: Some(r), ..
            } => r.clone(),
            e => e.to_string(),
        }
    }
}

/// How long a stdio server gets to answer `server/discover` before `initialize` follows.
pub const STDIO_PROBE_GRACE: Duration = Duration::from_secs(1);

enum Verdict {
    Modern(ServerHello),
    /// Modern by its error; ask again to learn its capabilities.
    ModernRetry,
    Legacy,
}

fn classify_discover(r: Result<Value, RpcError>) -> Result<Verdict, HandshakeError> {
    match r {
        Ok(result) => {
            let versions: Option<Vec<String>> = result
                .get("supportedVersions")
                .and_then(Value::as_array)
                .map(|a| {
                    a.iter()
                        .filter_map(|v| v.as_str().map(str::to_owned))
                        .collect()
                });
            match versions {
                // An empty `{}` (a mock that answers every method) is no discovery.
                None => Ok(Verdict::Legacy),
                Some(vs) => match classify_named(&vs) {
                    Named::Modern => Ok(Verdict::Modern(hello_from_discover(&result))),
                    Named::LegacyOnly => Ok(Verdict::Legacy),
                    Named::Nothing(vs) => Err(HandshakeError::NoCommonVersion(vs)),
                },
            }
        }
        Err(RpcError::Server(e)) if e.code == jsonrpc::UNSUPPORTED_PROTOCOL_VERSION => {
            match classify_named(&e.supported_versions()) {
                Named::Modern => Ok(Verdict::ModernRetry),
                Named::LegacyOnly => Ok(Verdict::Legacy),
                Named::Nothing(vs) => Err(HandshakeError::NoCommonVersion(vs)),
            }
        }
        Err(RpcError::Server(e)) if e.is_modern() => Err(HandshakeError::ModernRefusal(e)),
        Err(RpcError::Server(_)) => Ok(Verdict::Legacy),
        Err(RpcError::NotSent(TransportError::Status {
            status,
            www_authenticate,
            ..
        })) if status == 401 || status == 403 => Err(HandshakeError::NeedsAuth {
            status,
            www_authenticate,
            reason: None,
        }),
        // Any other non-2xx status without a modern error in its body.
        Err(RpcError::NotSent(TransportError::Status { .. })) => Ok(Verdict::Legacy),
        Err(e) => Err(HandshakeError::Rpc(e)),
    }
}

fn hello_from_discover(result: &Value) -> ServerHello {
    ServerHello {
        protocol: ProtocolVersion::modern(),
        capabilities: result.get("capabilities").cloned().unwrap_or(json!({})),
        server_info: result
            .get("_meta")
            .and_then(|m| m.get("io.modelcontextprotocol/serverInfo"))
            .or_else(|| result.get("serverInfo"))
            .cloned(),
        instructions: result
            .get("instructions")
            .and_then(Value::as_str)
            .map(str::to_owned),
    }
}

/// The `initialize` params: the client capabilities are those of its elicitation policy
/// (`{}` for the daemon).
fn initialize_params(client: &McpClient) -> Value {
    json!({
        "protocolVersion": era::LEGACY_LATEST,
        "capabilities": client.elicitation().capabilities(),
        "clientInfo": {"name": CLIENT_NAME, "version": CLIENT_VERSION},
    })
}

fn hello_from_initialize(result: &Value) -> Result<ServerHello, HandshakeError> {
    let v = result
        .get("protocolVersion")
        .and_then(Value::as_str)
        .ok_or_else(|| {
            HandshakeError::Invalid("initialize result has no protocolVersion".into())
        })?;
    if !era::legacy_accepted(v) {
        return Err(HandshakeError::UnsupportedVersion(v.to_owned()));
    }
    Ok(ServerHello {
        protocol: ProtocolVersion::legacy(v),
        capabilities: result.get("capabilities").cloned().unwrap_or(json!({})),
        server_info: result.get("serverInfo").cloned(),
        instructions: result
            .get("instructions")
            .and_then(Value::as_str)
            .map(str::to_owned),
    })
}

fn remaining(deadline: Instant) -> Duration {
    deadline.saturating_duration_since(Instant::now())
}

/// Find the era and open the connection. On success the client's era is set and, for an
/// older server, `notifications/initialized` has been accepted.
pub async fn handshake(
    client: &McpClient,
    timeout: Duration,
) -> Result<ServerHello, HandshakeError> {
    let deadline = Instant::now() + timeout;
    let modern = ProtocolVersion::modern();
    let stdio = client.transport_kind() == Some(TransportKind::Stdio);
    let (did, mut drx) = client.start_request_as("server/discover", None, Some(&modern))?;

    let verdict = if stdio {
        tokio::select! {
            r = &mut drx => Some(classify_discover(flatten(r))),
            _ = tokio::time::sleep(STDIO_PROBE_GRACE.min(remaining(deadline))) => None,
        }
    } else {
        match tokio::time::timeout(remaining(deadline), &mut drx).await {
            Ok(r) => Some(classify_discover(flatten(r))),
            Err(_) => {
                client.cancel(&did, "timed out");
                return Err(HandshakeError::Timeout(timeout));
            }
        }
    };

    let hello = match verdict {
        Some(v) => match v? {
            Verdict::Modern(h) => h,
            Verdict::ModernRetry => modern_retry(client, deadline, timeout).await?,
            Verdict::Legacy => legacy(client, deadline, timeout).await?,
        },
        None => {
            // The probe stays open; initialize joins it. The first answer, in the order the
            // server sent them, that fits its era decides.
            client.track_answers(true);
            let r = race(client, did, drx, deadline, timeout).await;
            client.track_answers(false);
            r?
        }
    };
    client.set_protocol(hello.protocol.clone());
    Ok(hello)
}

type Answer = tokio::sync::oneshot::Receiver<Result<crate::protocol::ResultText, RpcError>>;

/// The stdio race between the open probe and `initialize`.
async fn race(
    client: &McpClient,
    did: crate::protocol::RequestId,
    mut drx: Answer,
    deadline: Instant,
    timeout: Duration,
) -> Result<ServerHello, HandshakeError> {
    let (iid, mut irx) =
        client.start_request_as("initialize", Some(initialize_params(client)), None)?;
    let (mut dres, mut ires) = (None, None);
    let (mut d_done, mut i_done) = (false, false);
    let mut init_error: Option<HandshakeError> = None;
    let sleep = tokio::time::sleep(remaining(deadline));
    tokio::pin!(sleep);
    loop {
        // Collect whatever has arrived, then handle it in arrival order.
        if dres.is_none() && !d_done {
            if let Ok(r) = drx.try_recv() {
                dres = Some(r.and_then(|t| super::tree(&t)));
            }
        }
        if ires.is_none() && !i_done {
            if let Ok(r) = irx.try_recv() {
                ires = Some(r.and_then(|t| super::tree(&t)));
            }
        }
        let order = client.answer_order();
        let pos = |id: &crate::protocol::RequestId| {
            order.iter().position(|x| x == id).unwrap_or(usize::MAX)
        };
        let discover_first = pos(&did) <= pos(&iid);
        let mut steps: Vec<bool> = Vec::new(); // true: the probe, false: initialize
        if discover_first {
            steps.extend([true, false]);
        } else {
            steps.extend([false, true]);
        }
        for probe in steps {
            if probe {
                let Some(r) = dres.take() else { continue };
                d_done = true;
                match classify_discover(r) {
                    Ok(Verdict::Modern(h)) => {
                        client.forget(&iid);
                        return Ok(h);
                    }
                    Ok(Verdict::ModernRetry) => {
                        client.forget(&iid);
                        return modern_retry(client, deadline, timeout).await;
                    }
                    Ok(Verdict::Legacy) | Err(_) => {
                        if let Some(e) = init_error.take() {
                            return Err(e);
                        }
                    }
                }
            } else {
                let Some(r) = ires.take() else { continue };
                i_done = true;
                match r
                    .map_err(HandshakeError::from)
                    .and_then(|v| hello_from_initialize(&v))
                {
                    Ok(h) => {
                        if !d_done {
                            client.cancel(&did, "the server speaks an older revision");
                        }
                        return finish_legacy(client, h, deadline).await;
                    }
                    Err(e) if !d_done => init_error = Some(e),
                    Err(e) => return Err(e),
                }
            }
        }
        if d_done && i_done {
            return Err(init_error.unwrap_or(HandshakeError::Invalid(
                "neither server/discover nor initialize succeeded".into(),
            )));
        }
        tokio::select! {
            r = &mut drx, if !d_done && dres.is_none() => dres = Some(flatten(r)),
            r = &mut irx, if !i_done && ires.is_none() => ires = Some(flatten(r)),
            _ = &mut sleep => {
                client.cancel(&did, "timed out");
                client.forget(&iid);
                return Err(HandshakeError::Timeout(timeout));
            }
        }
    }
}

fn flatten(
    r: Result<
        Result<crate::protocol::ResultText, RpcError>,
        tokio::sync::oneshot::error::RecvError,
    >,
) -> Result<Value, RpcError> {
    match r {
        Ok(x) => x.and_then(|t| super::tree(&t)),
        Err(_) => Err(RpcError::Lost(TransportError::Closed(
            "the connection closed during the handshake".into(),
        ))),
    }
}

async fn modern_retry(
    client: &McpClient,
    deadline: Instant,
    timeout: Duration,
) -> Result<ServerHello, HandshakeError> {
    let modern = ProtocolVersion::modern();
    let (id, rx) = client.start_request_as("server/discover", None, Some(&modern))?;
    let r = client.finish_request(id, rx, remaining(deadline)).await;
    match r {
        Ok(v) => match classify_discover(Ok(v))? {
            Verdict::Modern(h) => {
                client.set_protocol(h.protocol.clone());
                Ok(h)
            }
            _ => Err(HandshakeError::Invalid(
                "the server named 2026-07-28 but its discovery does not".into(),
            )),
        },
        Err(RpcError::Timeout(_)) => Err(HandshakeError::Timeout(timeout)),
        Err(e) => Err(e.into()),
    }
    .inspect(|h| client.set_protocol(h.protocol.clone()))
}

async fn legacy(
    client: &McpClient,
    deadline: Instant,
    timeout: Duration,
) -> Result<ServerHello, HandshakeError> {
    let (id, rx) = client.start_request_as("initialize", Some(initialize_params(client)), None)?;
    let v = match client.finish_request(id, rx, remaining(deadline)).await {
        Ok(v) => v,
        Err(RpcError::Timeout(_)) => return Err(HandshakeError::Timeout(timeout)),
        Err(RpcError::NotSent(TransportError::Status {
            status,
            www_authenticate,
            ..
        })) if status == 401 || status == 403 => {
            return Err(HandshakeError::NeedsAuth {
                status,
                www_authenticate,
                reason: None,
            })
        }
        Err(e) => return Err(e.into()),
    };
    let h = hello_from_initialize(&v)?;
    finish_legacy(client, h, deadline).await
}

async fn finish_legacy(
    client: &McpClient,
    hello: ServerHello,
    deadline: Instant,
) -> Result<ServerHello, HandshakeError> {
    client.set_protocol(hello.protocol.clone());
    client
        .notify(
            "notifications/initialized",
            None,
            remaining(deadline).max(Duration::from_millis(100)),
        )
        .await
        .map_err(|e| HandshakeError::Rpc(RpcError::NotSent(e)))?;
    Ok(hello)
}

/// A handshake for a modern server already known (for tests and the conformance client).
pub fn assume_modern(client: &McpClient) {
    client.set_protocol(ProtocolVersion::modern());
}
