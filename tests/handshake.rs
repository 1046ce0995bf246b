//! The stdio era probe's one-second rule, on tokio's paused clock: `server/discover` goes
//! first, and a stdio server that stays silent gets `initialize` one second later, not
//! sooner; one that answers within the second never gets `initialize`.
//!
//! No process can run on a paused clock, so the server here is a scripted stdio transport
//! (the client core only sees the `Transport` trait): it stamps every message with the
//! paused clock as it is sent, and answers as the test says. The same rule against a real
//! process is `tests/era.rs` (`the_probe_corner_cases`), which can only check the order.

use albedo_mcp::client::handshake::{self, STDIO_PROBE_GRACE};
use albedo_mcp::client::McpClient;
use albedo_mcp::protocol::{Era, Message, RequestId};
use albedo_mcp::transport::{
    Inbound, InboundSink, OutKind, Outbound, Transport, TransportError, TransportKind,
};
use serde_json::{json, Value};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::Instant;

/// How the scripted server treats `server/discover`.
#[derive(Clone, Copy)]
enum Discover {
    /// Never answered (a server that ignores unknown requests).
    Silent,
    /// Answered as a 2026-07-28 server after this long.
    ModernAfter(Duration),
}

struct Scripted {
    discover: Discover,
    sink: Arc<dyn InboundSink>,
    /// Every message sent, with the paused clock's time: (method, body, when).
    sent: Mutex<Vec<(String, Value, Instant)>>,
}

impl Scripted {
    fn answer_after(&self, id: RequestId, result: Value, after: Duration) {
        let sink = self.sink.clone();
        tokio::spawn(async move {
            tokio::time::sleep(after).await;
            sink.deliver(Inbound::Message(Message::Response {
                id,
                result: Ok(result.into()),
            }));
        });
    }

    fn sent(&self) -> Vec<(String, Value, Instant)> {
        self.sent.lock().unwrap().clone()
    }

    /// When `method` was sent (the first time).
    fn at(&self, method: &str) -> Option<Instant> {
        self.sent()
            .into_iter()
            .find(|(m, _, _)| m == method)
            .map(|(_, _, t)| t)
    }
}

impl Transport for Scripted {
    fn kind(&self) -> TransportKind {
        TransportKind::Stdio
    }

    fn send(&self, msg: Outbound) -> Result<(), TransportError> {
        let body: Value = serde_json::from_slice(&msg.body).expect("the client sends JSON");
        let method = match &msg.kind {
            OutKind::Request { method, .. } | OutKind::Notification { method } => method.clone(),
            OutKind::Response => String::new(),
        };
        self.sent
            .lock()
            .unwrap()
            .push((method.clone(), body, Instant::now()));
        if let OutKind::Request { id, .. } = msg.kind {
            match (method.as_str(), self.discover) {
                ("server/discover", Discover::Silent) => {}
                ("server/discover", Discover::ModernAfter(after)) => self.answer_after(
                    id,
                    json!({"resultType": "complete", "supportedVersions": ["2026-07-28"],
                           "capabilities": {"tools": {}}}),
                    after,
                ),
                ("initialize", _) => self.answer_after(
                    id,
                    json!({"protocolVersion": "2025-11-25", "capabilities": {"tools": {}},
                           "serverInfo": {"name": "scripted", "version": "1"}}),
                    Duration::ZERO,
                ),
                (other, _) => panic!("unexpected request {other}"),
            }
        }
        // A notification's ack is dropped: over stdio a written notification is accepted.
        Ok(())
    }

    fn close(&self) {}
}

fn connect(discover: Discover) -> (McpClient, Arc<Scripted>) {
    let (client, sink, _events) = McpClient::new();
    let t = Arc::new(Scripted {
        discover,
        sink,
        sent: Mutex::new(Vec::new()),
    });
    client.attach(t.clone());
    (client, t)
}

const T: Duration = Duration::from_secs(30);

#[tokio::test(start_paused = true)]
async fn a_silent_stdio_server_gets_initialize_one_second_after_the_probe() {
    let (client, server) = connect(Discover::Silent);
    let hello = handshake::handshake(&client, T).await.expect("handshake");
    assert_eq!(hello.protocol.era, Era::Legacy);
    assert_eq!(hello.protocol.version, "2025-11-25");

    let methods: Vec<String> = server.sent().into_iter().map(|(m, _, _)| m).collect();
    assert_eq!(
        methods,
        [
            "server/discover",
            "initialize",
            "notifications/cancelled",
            "notifications/initialized"
        ],
        "{methods:?}"
    );
    let gap = server.at("initialize").unwrap() - server.at("server/discover").unwrap();
    assert!(
        gap >= Duration::from_secs(1) && gap < Duration::from_millis(1500),
        "initialize followed the probe after {gap:?}"
    );
    // The probe left open is cancelled once initialize settled the era.
    let sent = server.sent();
    let discover_id = &sent[0].1["id"];
    let cancel = &sent[2].1;
    assert_eq!(&cancel["params"]["requestId"], discover_id, "{cancel}");
}

#[tokio::test(start_paused = true)]
async fn a_probe_answered_within_the_second_gets_no_initialize() {
    let (client, server) = connect(Discover::ModernAfter(Duration::from_millis(990)));
    let start = Instant::now();
    let hello = handshake::handshake(&client, T).await.expect("handshake");
    assert_eq!(hello.protocol.era, Era::Modern);
    assert!(start.elapsed() < STDIO_PROBE_GRACE, "{:?}", start.elapsed());
    let methods: Vec<String> = server.sent().into_iter().map(|(m, _, _)| m).collect();
    assert_eq!(methods, ["server/discover"], "{methods:?}");
    // Nothing follows later either.
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(server.sent().len(), 1, "{:?}", server.sent());
}
