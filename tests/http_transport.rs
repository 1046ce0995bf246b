//! The HTTP transport against real servers, through the client core (`McpClient`,
//! `handshake`, `discover`): server-everything in `streamableHttp` mode (sessions, SSE replies
//! with priming events, the GET stream and its `roots/list`, DELETE, its 400 for a deleted
//! session), the Python `mcp` SDK server (the 2026-07-28 era over HTTP; the legacy era with
//! server requests on a tool call's stream and 404 for an unknown session), and the stdlib
//! fixture `tests/fixtures/http_faults.py` for what real servers will not do on demand: TLS
//! with a CA named in configuration (accepted) or unknown (refused), a stream cut before its
//! answer (resumed), a session the server ends (the client closes; that the next call dials
//! again is `tests/http_daemon.rs`).
//!
//! Peers come from `tests/peers/install.sh` (`.peers/`); everything binds 127.0.0.1.

mod common;

use albedo_mcp::client::{discovery, handshake, ClientEvent, McpClient, RpcError};
use albedo_mcp::protocol::era::{Era, ProtocolVersion};
use albedo_mcp::transport::http::{HttpOptions, HttpSpec, HttpTransport, ListenState};
use albedo_mcp::transport::{tls, Transport, TransportError};
use serde_json::{json, Value};
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::mpsc;

const T: Duration = Duration::from_secs(30);

use common::HttpPeer as Peer;

fn everything() -> Peer {
    Peer::everything()
}

fn py_mcp() -> Peer {
    let args = [common::server_script("py_mcp_server.py")];
    Peer::start(
        &common::venv_python(),
        &port_zero(&args, &["--transport", "http"]),
    )
}

/// The TypeScript SDK v2 server (`tests/servers/ts_v2_server.mjs`) over HTTP.
fn ts_v2() -> Peer {
    let args = [
        common::server_script("ts_v2_server.mjs"),
        common::peers()
            .join("npm/node_modules")
            .display()
            .to_string(),
    ];
    Peer::start("node", &port_zero(&args, &["--transport", "http"]))
}

/// `args`, then `extra`, then `--port 0`.
fn port_zero(args: &[String], extra: &[&str]) -> Vec<String> {
    let mut v = args.to_vec();
    v.extend(extra.iter().chain(&["--port", "0"]).map(|s| s.to_string()));
    v
}

/// The stdlib fault fixture, logging each request to `log.jsonl` in its folder; `tls` is
/// (cert, key).
fn faults(args: &[&str], tls: Option<(&Path, &Path)>) -> Peer {
    let dir = tempfile::tempdir().unwrap();
    let mut a = vec![
        common::fixture("http_faults.py"),
        "--log".into(),
        dir.path().join("log.jsonl").display().to_string(),
    ];
    a.extend(args.iter().map(|s| s.to_string()));
    if let Some((c, k)) = tls {
        a.extend([
            "--tls-cert".into(),
            c.display().to_string(),
            "--tls-key".into(),
            k.display().to_string(),
        ]);
    }
    let scheme = if tls.is_some() { "https" } else { "http" };
    Peer::start_in(dir, "python3", &a, scheme)
}

/// What the fault fixture logged, one object per request.
fn requests(peer: &Peer) -> Vec<Value> {
    common::logged(&peer.file("log.jsonl"))
}

/// The next call finds the session ended by the server with `status`: not sent, and the
/// client is closed.
async fn the_session_is_over(c: &Conn, status: u16) {
    let e = call(&c.client, "echo", json!({"message": "x"}))
        .await
        .unwrap_err();
    assert!(
        matches!(e, RpcError::NotSent(TransportError::SessionExpired(s)) if s == status),
        "{e:?}"
    );
    assert!(c.client.is_closed());
}

struct Conn {
    client: McpClient,
    transport: Arc<HttpTransport>,
    events: mpsc::UnboundedReceiver<ClientEvent>,
}

fn connect_with(url: &str, tls: Arc<rustls::ClientConfig>, opts: HttpOptions) -> Conn {
    let (client, sink, events) = McpClient::new();
    let spec = HttpSpec {
        url: url::Url::parse(url).unwrap(),
        headers: Vec::new(),
        tls,
    };
    let transport = HttpTransport::start_with(spec, sink, opts).expect("transport");
    client.attach(transport.clone());
    Conn {
        client,
        transport,
        events,
    }
}

fn connect(url: &str) -> Conn {
    connect_with(
        url,
        tls::client_config(&[]).unwrap(),
        HttpOptions::default(),
    )
}

fn text_of(result: &Value) -> String {
    result["content"][0]["text"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

async fn call(c: &McpClient, tool: &str, args: Value) -> Result<Value, RpcError> {
    c.request(
        "tools/call",
        Some(json!({"name": tool, "arguments": args})),
        T,
    )
    .await
}

/// A raw request to a server, outside our transport.
async fn raw(
    method: awc::http::Method,
    url: &str,
    session: &str,
    body: Option<Value>,
) -> (u16, String) {
    let client = awc::Client::default();
    let req = client
        .request(method, url)
        .insert_header(("mcp-session-id", session))
        .insert_header(("mcp-protocol-version", "2025-11-25"))
        .insert_header(("accept", "application/json, text/event-stream"));
    let mut resp = match body {
        Some(b) => req.send_json(&b).await,
        None => req.send().await,
    }
    .expect("raw request");
    let body = resp.body().await.unwrap_or_default();
    (
        resp.status().as_u16(),
        String::from_utf8_lossy(&body).into_owned(),
    )
}

#[actix_rt::test]
async fn everything_over_streamable_http() {
    let peer = everything();
    let c = connect(&peer.url);
    let hello = handshake::handshake(&c.client, T).await.expect("handshake");
    assert_eq!(hello.protocol.era, Era::Legacy);
    assert_eq!(hello.protocol.version, "2025-11-25");
    let session = c.transport.session_id().expect("a session id");
    // As the connection does: the GET stream right after the handshake.
    c.transport.open_listen_stream();

    let cat = discovery::discover(&c.client, &hello, T)
        .await
        .expect("discover");
    // Over HTTP it offers 13 tools to a client without capabilities (17 over stdio, where
    // its list_changed burst adds the rest); these are always there.
    let names: Vec<&str> = cat
        .tools
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    for n in [
        "echo",
        "get-sum",
        "get-env",
        "trigger-long-running-operation",
    ] {
        assert!(names.contains(&n), "{n} missing from {names:?}");
    }
    assert_eq!(cat.resources.len(), 7);
    assert_eq!(cat.resource_templates.len(), 2);
    assert_eq!(cat.prompts.len(), 4);

    let r = call(&c.client, "echo", json!({"message": "hi"}))
        .await
        .unwrap();
    assert_eq!(text_of(&r), "Echo: hi");

    // The GET stream stays open (server-everything allows one per session).
    assert_eq!(c.transport.listen_state(), ListenState::Open);
    // No crash: the session still serves, on many requests at once.
    let calls = (0..20).map(|i| {
        let cl = c.client.clone();
        async move { call(&cl, "echo", json!({"message": format!("m{i}")})).await }
    });
    for (i, r) in futures_util::future::join_all(calls)
        .await
        .into_iter()
        .enumerate()
    {
        assert_eq!(text_of(&r.unwrap()), format!("Echo: m{i}"));
    }
    let r = call(&c.client, "get-sum", json!({"a": 2, "b": 3}))
        .await
        .unwrap();
    assert_eq!(text_of(&r), "The sum of 2 and 3 is 5.", "{r}");

    // Close: DELETE the session and end the GET stream.
    c.client.close();
    tokio::time::timeout(Duration::from_secs(10), c.transport.wait_closed())
        .await
        .expect("closed");
    assert_eq!(c.transport.listen_state(), ListenState::Closed);
    let (status, body) = raw(
        awc::http::Method::POST,
        &peer.url,
        &session,
        Some(json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"})),
    )
    .await;
    assert!(status == 400 || status == 404, "{status} {body}");
    assert!(body.contains("session"), "{body}");
}

/// The client's side only; that the session's next call dials again is
/// `tests/http_daemon.rs`, through the daemon.
#[actix_rt::test]
async fn everything_session_deleted_elsewhere_ends_the_client() {
    let peer = everything();
    let c = connect(&peer.url);
    handshake::handshake(&c.client, T).await.expect("handshake");
    let session = c.transport.session_id().unwrap();
    let (status, _) = raw(awc::http::Method::DELETE, &peer.url, &session, None).await;
    assert_eq!(status, 200);

    // server-everything answers 400 -32000 "No valid session ID": the session is over.
    the_session_is_over(&c, 400).await;
    assert!(matches!(
        call(&c.client, "echo", json!({"message": "x"})).await,
        Err(RpcError::NotSent(_))
    ));
}

#[actix_rt::test]
async fn python_mcp_speaks_the_modern_era_over_http() {
    let peer = py_mcp();
    let c = connect(&peer.url);
    let hello = handshake::handshake(&c.client, T).await.expect("handshake");
    assert_eq!(hello.protocol.era, Era::Modern);
    assert_eq!(c.transport.session_id(), None);
    let cat = discovery::discover(&c.client, &hello, T)
        .await
        .expect("discover");
    assert!(cat.tools.iter().any(|t| t["name"] == "echo"));
    let r = call(&c.client, "echo", json!({"message": "modern"}))
        .await
        .unwrap();
    assert_eq!(text_of(&r), "modern");
    let r = call(&c.client, "add", json!({"a": 40, "b": 2}))
        .await
        .unwrap();
    assert_eq!(text_of(&r), "42");
    // The GET stream is a legacy-era thing: not opened.
    c.transport.open_listen_stream();
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(c.transport.listen_state(), ListenState::NotOpened);
}

/// uvicorn (under Python `mcp`) sends a response's head and body in two writes with Nagle's
/// algorithm on, so over a reused connection the body waits for our delayed ACK. The transport
/// notices the stall and acknowledges that server promptly from then on (`transport::tcp`);
/// without it every call waited about 40 ms.
#[actix_rt::test]
async fn a_python_mcp_server_that_stalls_for_our_ack_gets_prompt_acks() {
    let peer = py_mcp();
    let c = connect(&peer.url);
    handshake::handshake(&c.client, T).await.expect("handshake");
    for i in 0..40 {
        let r = call(&c.client, "echo", json!({"message": format!("m{i}")}))
            .await
            .unwrap();
        assert_eq!(text_of(&r), format!("m{i}"));
        if c.transport.stats().prompt_acks.load(Ordering::Relaxed) {
            return;
        }
    }
    panic!("40 calls over one connection and no stall was seen");
}

#[actix_rt::test]
async fn everything_asks_roots_list_on_the_get_stream_and_gets_method_not_found() {
    // server-everything asks `roots/list` ~350 ms after `notifications/initialized`, on the
    // GET stream, when the client declared `roots` (albedo declares nothing; the test does,
    // to make the server ask). The client core answers Method not found by a POST (202).
    let peer = everything();
    let c = connect(&peer.url);
    legacy_by_hand(&c, json!({"roots": {}})).await;
    c.transport.open_listen_stream();
    let deadline = Instant::now() + Duration::from_secs(10);
    while c.client.stats().server_requests.load(Ordering::Relaxed) == 0 {
        assert!(
            Instant::now() < deadline,
            "no roots/list on the GET stream ({:?}, {} GETs)",
            c.transport.listen_state(),
            c.transport.stats().gets.load(Ordering::Relaxed)
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    while !peer.stderr().contains("Failed to request roots") {
        assert!(Instant::now() < deadline, "stderr: {}", peer.stderr());
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert!(
        peer.stderr().contains("Method not found"),
        "{}",
        peer.stderr()
    );
    // No crash: the session still serves, and the GET stream is still open.
    let r = call(&c.client, "echo", json!({"message": "still here"}))
        .await
        .unwrap();
    assert_eq!(text_of(&r), "Echo: still here");
    assert_eq!(c.transport.listen_state(), ListenState::Open);
    c.client.close();
    c.transport.wait_closed().await;
}

/// The legacy era by hand: for a server the handshake would open in the modern era, or to
/// declare a capability albedo does not (so the server asks for it).
async fn legacy_by_hand(c: &Conn, capabilities: Value) {
    let r = c
        .client
        .request(
            "initialize",
            Some(
                json!({"protocolVersion": "2025-11-25", "capabilities": capabilities,
                        "clientInfo": {"name": "albedo-mcp-test", "version": "0"}}),
            ),
            T,
        )
        .await
        .expect("initialize");
    assert_eq!(r["protocolVersion"], "2025-11-25");
    c.transport
        .negotiated(&ProtocolVersion::legacy("2025-11-25"));
    c.client
        .notify("notifications/initialized", None, T)
        .await
        .expect("initialized accepted");
}

#[actix_rt::test]
async fn python_mcp_legacy_server_requests_on_the_call_stream_and_404() {
    let peer = py_mcp();
    let c = connect(&peer.url);
    legacy_by_hand(&c, json!({})).await;
    let session = c.transport.session_id().expect("sessionful");

    // The server asks us ping and roots/list on the tool call's own stream (its SSE
    // carries no event ids); the client core answers through separate POSTs.
    let r = call(&c.client, "probe_client", json!({})).await.unwrap();
    let text: Vec<String> = r["content"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x["text"].as_str().unwrap_or("").to_owned())
        .collect();
    let all = text.join("\n");
    assert!(all.contains("ping: result {}"), "{all}");
    assert!(all.contains("roots/list: error -32601"), "{all}");
    assert!(c.client.stats().server_requests.load(Ordering::Relaxed) >= 2);

    // The server forgets the session: 404 ends the client.
    let (status, _) = raw(awc::http::Method::DELETE, &peer.url, &session, None).await;
    assert!((200..300).contains(&status), "{status}");
    the_session_is_over(&c, 404).await;
}

#[actix_rt::test]
async fn ts_sdk_v2_stateless_legacy_has_no_session_get_or_delete() {
    let peer = ts_v2();
    // Its handshake picks the modern era; the legacy era by hand, as an older client would.
    let c = connect(&peer.url);
    legacy_by_hand(&c, json!({})).await;
    assert_eq!(c.transport.session_id(), None, "stateless: no session id");
    let r = call(&c.client, "echo", json!({"message": "stateless"}))
        .await
        .unwrap();
    assert_eq!(text_of(&r), "stateless");
    // GET gets 405: the listening stream stays closed for the connection's life.
    c.transport.open_listen_stream();
    let deadline = Instant::now() + Duration::from_secs(10);
    while c.transport.listen_state() != ListenState::Refused(405) {
        assert!(
            Instant::now() < deadline,
            "{:?}",
            c.transport.listen_state()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let r = call(&c.client, "echo", json!({"message": "after"}))
        .await
        .unwrap();
    assert_eq!(text_of(&r), "after");
    // No session, so no DELETE; closing is quick and clean.
    c.client.close();
    tokio::time::timeout(Duration::from_secs(5), c.transport.wait_closed())
        .await
        .unwrap();

    // And the modern era with the real handshake.
    let m = connect(&peer.url);
    let hello = handshake::handshake(&m.client, T).await.expect("handshake");
    assert_eq!(hello.protocol.era, Era::Modern);
    let r = call(&m.client, "echo", json!({"message": "modern"}))
        .await
        .unwrap();
    assert_eq!(text_of(&r), "modern");
}

#[actix_rt::test]
async fn a_cut_stream_is_resumed_through_the_client() {
    let peer = faults(&["--cut"], None);
    let c = connect(&peer.url);
    let hello = handshake::handshake(&c.client, T).await.expect("handshake");
    assert_eq!(hello.protocol.era, Era::Legacy);
    let r = call(&c.client, "echo", json!({"message": "resumed"}))
        .await
        .unwrap();
    assert_eq!(text_of(&r), "Echo: resumed");
    let gets: Vec<Value> = requests(&peer)
        .into_iter()
        .filter(|r| r["method"] == "GET")
        .collect();
    assert_eq!(gets.len(), 1, "{gets:?}");
    // The stream of request 3 (server/discover was 1, initialize 2), its second event.
    assert_eq!(gets[0]["last_event_id"], "st3-2");
    assert_eq!(gets[0]["session"], "s-1");
    assert_eq!(gets[0]["version"], "2025-11-25");
    assert_eq!(c.transport.stats().resumptions.load(Ordering::Relaxed), 1);
    // Every request after initialize carried the session and the version.
    for r in requests(&peer)
        .iter()
        .filter(|r| r["rpc"] != "initialize" && r["rpc"] != "server/discover")
    {
        assert_eq!(r["session"], "s-1", "{r}");
        assert_eq!(r["version"], "2025-11-25", "{r}");
    }
}

/// The client's side only; that the session's next call dials again is
/// `tests/http_daemon.rs`, through the daemon.
#[actix_rt::test]
async fn a_session_the_server_ends_closes_the_client() {
    // Requests carrying the session: initialized (1), tools/list (2), then 404 from the third.
    let peer = faults(&["--expire-after", "3"], None);
    let mut c = connect(&peer.url);
    let hello = handshake::handshake(&c.client, T).await.expect("handshake");
    discovery::discover(&c.client, &hello, T)
        .await
        .expect("discover");
    let e = call(&c.client, "echo", json!({"message": "x"}))
        .await
        .unwrap_err();
    assert!(
        matches!(e, RpcError::NotSent(TransportError::SessionExpired(404))),
        "{e:?}"
    );
    assert!(c.client.is_closed());
    let mut closed = false;
    while let Ok(ev) = c.events.try_recv() {
        closed |= matches!(ev, ClientEvent::Closed(_));
    }
    assert!(closed, "the connection heard that the client closed");
    // No DELETE for a session the server ended.
    c.client.close();
    c.transport.wait_closed().await;
    assert!(!requests(&peer).iter().any(|r| r["method"] == "DELETE"));
}

#[actix_rt::test]
async fn tls_with_a_configured_ca_is_accepted_and_an_unknown_ca_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (ca, cert, key) = common::make_certs(dir.path());
    let peer = faults(&[], Some((&cert, &key)));

    // The CA named in config.toml (ca_files): accepted.
    let cfg = tls::client_config(std::slice::from_ref(&ca)).unwrap();
    let c = connect_with(&peer.url, cfg, HttpOptions::default());
    let hello = handshake::handshake(&c.client, T)
        .await
        .expect("handshake over TLS");
    assert_eq!(hello.protocol.era, Era::Legacy);
    let r = call(&c.client, "echo", json!({"message": "tls"}))
        .await
        .unwrap();
    assert_eq!(text_of(&r), "Echo: tls");
    c.client.close();
    c.transport.wait_closed().await;

    // Only the system roots: refused, with a clear error, and nothing was sent.
    let c = connect(&peer.url);
    let e = handshake::handshake(&c.client, T).await.unwrap_err();
    let msg = e.to_string();
    assert!(
        matches!(
            &e,
            handshake::HandshakeError::Rpc(RpcError::NotSent(TransportError::Connect(_)))
        ),
        "{e:?}"
    );
    assert!(msg.to_lowercase().contains("certificate"), "{msg}");
    eprintln!("unknown CA: {msg}");
}
