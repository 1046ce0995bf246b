//! Tests of the transport against a scripted HTTP/1.1 server (headers sent, JSON and SSE
//! replies, refusals, sessions, resumption, the listening stream, replays).

use super::*;
use crate::protocol::jsonrpc::{notification_bytes, request_bytes, Message};
use crate::transport::{Inbound, OutKind};
use bytes::Bytes;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;

// ---- a scripted HTTP/1.1 server --------------------------------------------------

#[derive(Debug, Clone)]
struct Req {
    method: String,
    headers: BTreeMap<String, String>,
    body: Vec<u8>,
}

impl Req {
    fn header(&self, n: &str) -> Option<&str> {
        self.headers.get(n).map(String::as_str)
    }
    fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or(Value::Null)
    }
    fn rpc_method(&self) -> String {
        self.json()["method"].as_str().unwrap_or("").to_owned()
    }
}

#[derive(Clone)]
enum Part {
    Chunk(Vec<u8>),
    /// Stop writing and keep the connection until the client closes it.
    Hold,
    /// Close without ending the chunked body (a broken stream).
    Break,
}

#[derive(Clone)]
struct Reply {
    status: u16,
    headers: Vec<(String, String)>,
    /// `None`: a plain body (Content-Length); `Some`: a chunked stream.
    body: Vec<u8>,
    stream: Option<Vec<Part>>,
}

fn json_reply(status: u16, v: Value) -> Reply {
    Reply {
        status,
        headers: vec![("content-type".into(), "application/json".into())],
        body: serde_json::to_vec(&v).unwrap(),
        stream: None,
    }
}

fn status_reply(status: u16, text: &str) -> Reply {
    Reply {
        status,
        headers: vec![("content-type".into(), "text/plain".into())],
        body: text.as_bytes().to_vec(),
        stream: None,
    }
}

fn sse_reply(parts: Vec<Part>) -> Reply {
    Reply {
        status: 200,
        headers: vec![("content-type".into(), "text/event-stream".into())],
        body: Vec::new(),
        stream: Some(parts),
    }
}

fn ev(id: Option<&str>, data: &Value) -> Part {
    let mut s = String::new();
    if let Some(i) = id {
        s.push_str(&format!("id: {i}\n"));
    }
    s.push_str(&format!(
        "data: {}\n\n",
        serde_json::to_string(data).unwrap()
    ));
    Part::Chunk(s.into_bytes())
}

fn raw(s: &str) -> Part {
    Part::Chunk(s.as_bytes().to_vec())
}

fn result(id: i64, v: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "result": v})
}

type Handler = Arc<dyn Fn(&Req, usize) -> Reply + Send + Sync>;

#[derive(Clone, Default)]
struct Log {
    reqs: Arc<Mutex<Vec<Req>>>,
    /// Streams held open whose client went away.
    hangups: Arc<AtomicU64>,
}

impl Log {
    fn reqs(&self) -> Vec<Req> {
        self.reqs.lock().unwrap().clone()
    }
    fn count(&self, method: &str) -> usize {
        self.reqs().iter().filter(|r| r.method == method).count()
    }
}

async fn serve(handler: Handler) -> (String, Log) {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/mcp", l.local_addr().unwrap());
    let log = Log::default();
    let lg = log.clone();
    tokio::spawn(async move {
        loop {
            let Ok((sock, _)) = l.accept().await else {
                return;
            };
            let (h, lg) = (handler.clone(), lg.clone());
            tokio::spawn(async move {
                let _ = conn(sock, h, lg).await;
            });
        }
    });
    (url, log)
}

async fn conn(mut sock: TcpStream, handler: Handler, log: Log) -> std::io::Result<()> {
    let mut buf = Vec::new();
    let head_end = loop {
        let mut b = [0u8; 4096];
        let n = sock.read(&mut b).await?;
        if n == 0 {
            return Ok(());
        }
        buf.extend_from_slice(&b[..n]);
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    let mut lines = head.split("\r\n");
    let method = lines
        .next()
        .unwrap_or("")
        .split(' ')
        .next()
        .unwrap_or("")
        .to_owned();
    let mut headers = BTreeMap::new();
    for l in lines {
        if let Some((k, v)) = l.split_once(':') {
            headers.insert(k.trim().to_ascii_lowercase(), v.trim().to_owned());
        }
    }
    let len: usize = headers
        .get("content-length")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let mut body = buf[head_end..].to_vec();
    while body.len() < len {
        let mut b = vec![0u8; 65536];
        let n = sock.read(&mut b).await?;
        if n == 0 {
            break;
        }
        body.extend_from_slice(&b[..n]);
    }
    let req = Req {
        method,
        headers,
        body,
    };
    let index = {
        let mut g = log.reqs.lock().unwrap();
        g.push(req.clone());
        g.len() - 1
    };
    let reply = handler(&req, index);
    if reply.status == 0 {
        // Never answer: hold the request until the client goes.
        let mut b = [0u8; 64];
        while sock.read(&mut b).await.map(|n| n > 0).unwrap_or(false) {}
        log.hangups.fetch_add(1, Ordering::SeqCst);
        return Ok(());
    }
    let mut out = format!("HTTP/1.1 {} X\r\nconnection: close\r\n", reply.status);
    for (k, v) in &reply.headers {
        out.push_str(&format!("{k}: {v}\r\n"));
    }
    match reply.stream {
        None => {
            out.push_str(&format!("content-length: {}\r\n\r\n", reply.body.len()));
            sock.write_all(out.as_bytes()).await?;
            sock.write_all(&reply.body).await?;
        }
        Some(parts) => {
            out.push_str("transfer-encoding: chunked\r\n\r\n");
            sock.write_all(out.as_bytes()).await?;
            for p in parts {
                match p {
                    Part::Chunk(c) => {
                        let mut framed = format!("{:x}\r\n", c.len()).into_bytes();
                        framed.extend_from_slice(&c);
                        framed.extend_from_slice(b"\r\n");
                        if sock.write_all(&framed).await.is_err() {
                            // The client went away mid-stream.
                            log.hangups.fetch_add(1, Ordering::SeqCst);
                            return Ok(());
                        }
                    }
                    Part::Hold => {
                        let mut b = [0u8; 64];
                        while sock.read(&mut b).await.map(|n| n > 0).unwrap_or(false) {}
                        log.hangups.fetch_add(1, Ordering::SeqCst);
                        return Ok(());
                    }
                    Part::Break => return Ok(()),
                }
            }
            sock.write_all(b"0\r\n\r\n").await?;
        }
    }
    sock.flush().await?;
    // Let the client read everything before the socket goes.
    let _ = sock.shutdown().await;
    Ok(())
}

// ---- the transport against it ------------------------------------------------------

struct TestSink(mpsc::UnboundedSender<Inbound>);

impl InboundSink for TestSink {
    fn deliver(&self, ev: Inbound) {
        let _ = self.0.send(ev);
    }
}

fn fast() -> HttpOptions {
    HttpOptions {
        resume_default_wait: Duration::from_millis(10),
        listen_base_wait: Duration::from_millis(5),
        listen_max_wait: Duration::from_millis(40),
        ..HttpOptions::default()
    }
}

/// Configured headers, resolved the way the daemon does (values from the environment).
fn resolved_headers(url: &str, headers: &[(&str, &str)]) -> Vec<(String, Secret)> {
    use crate::store::settings::{parse_mcp, resolve, Credentials, ResolvedTransport};
    let named: serde_json::Map<String, Value> = headers
        .iter()
        .enumerate()
        .map(|(i, (k, _))| (k.to_string(), json!({"env": format!("V{i}")})))
        .collect();
    let cfg = parse_mcp(Some(
        &json!({"servers": {"t": {"type": "http", "url": url, "headers": named}}}),
    ))
    .unwrap();
    let values: Vec<String> = headers.iter().map(|(_, v)| v.to_string()).collect();
    let env = move |var: &str| {
        var.strip_prefix('V')
            .and_then(|i| i.parse::<usize>().ok())
            .and_then(|i| values.get(i).cloned())
    };
    match resolve(&cfg.servers[0], &env, &Credentials::default())
        .unwrap()
        .transport
    {
        ResolvedTransport::Http { headers, .. } => headers,
        _ => unreachable!(),
    }
}

fn start(
    url: &str,
    opts: HttpOptions,
    headers: Vec<(&str, &str)>,
) -> (Arc<HttpTransport>, mpsc::UnboundedReceiver<Inbound>) {
    let (tx, rx) = mpsc::unbounded_channel();
    let spec = HttpSpec {
        url: url::Url::parse(url).unwrap(),
        headers: resolved_headers(url, &headers),
        tls: super::super::tls::client_config_without_system_roots(&[]).unwrap(),
    };
    let t = HttpTransport::start_with(spec, Arc::new(TestSink(tx)), opts).unwrap();
    (t, rx)
}

fn request(t: &HttpTransport, id: i64, method: &str) {
    request_with(t, id, method, Vec::new());
}

fn request_with(t: &HttpTransport, id: i64, method: &str, headers: Vec<(String, String)>) {
    let rid = RequestId::Number(id);
    t.send(Outbound {
        kind: OutKind::Request {
            id: rid.clone(),
            method: method.into(),
        },
        body: request_bytes(&rid, method, Some(&json!({}))),
        headers: headers
            .into_iter()
            .map(|(n, v)| {
                let n = awc::http::header::HeaderName::try_from(n).expect("a header name");
                (
                    n,
                    awc::http::header::HeaderValue::try_from(v).expect("a value"),
                )
            })
            .collect(),
        ack: None,
    })
    .unwrap();
}

async fn notify(t: &HttpTransport, method: &str) -> Result<(), TransportError> {
    let (tx, rx) = oneshot::channel();
    t.send(Outbound {
        kind: OutKind::Notification {
            method: method.into(),
        },
        body: notification_bytes(method, None),
        headers: Vec::new(),
        ack: Some(tx),
    })?;
    tokio::time::timeout(Duration::from_secs(10), rx)
        .await
        .expect("ack in time")
        .expect("ack sent")
}

async fn next(rx: &mut mpsc::UnboundedReceiver<Inbound>) -> Inbound {
    tokio::time::timeout(Duration::from_secs(10), rx.recv())
        .await
        .expect("an inbound event in time")
        .expect("sink open")
}

async fn quiet(rx: &mut mpsc::UnboundedReceiver<Inbound>, ms: u64) {
    if let Ok(Some(ev)) = tokio::time::timeout(Duration::from_millis(ms), rx.recv()).await {
        panic!("unexpected inbound event: {ev:?}");
    }
}

fn expect_result(ev: Inbound, id: i64) -> Value {
    match ev {
        Inbound::Message(Message::Response {
            id: RequestId::Number(n),
            result: Ok(v),
        }) if n == id => v.to_value().unwrap(),
        other => panic!("expected the result of {id}, got {other:?}"),
    }
}

fn expect_lost(ev: Inbound, id: i64) -> TransportError {
    match ev {
        Inbound::Lost {
            id: RequestId::Number(n),
            error,
        } if n == id => error,
        other => panic!("expected request {id} lost, got {other:?}"),
    }
}

fn legacy() -> ProtocolVersion {
    ProtocolVersion::legacy("2025-11-25")
}

/// A server that opens a session on `initialize` and answers `tools/list` with JSON.
fn session_server(extra: impl Fn(&Req, usize) -> Option<Reply> + Send + Sync + 'static) -> Handler {
    Arc::new(move |r, i| {
        if let Some(reply) = extra(r, i) {
            return reply;
        }
        match (r.method.as_str(), r.rpc_method().as_str()) {
            ("POST", "initialize") => {
                let mut rep = json_reply(
                    200,
                    result(
                        r.json()["id"].as_i64().unwrap(),
                        json!({"protocolVersion": "2025-11-25"}),
                    ),
                );
                rep.headers.push(("mcp-session-id".into(), "sess-1".into()));
                rep
            }
            ("POST", "notifications/initialized") => status_reply(202, ""),
            ("POST", "") => status_reply(202, ""),
            ("POST", _) => json_reply(
                200,
                result(r.json()["id"].as_i64().unwrap(), json!({"ok": true})),
            ),
            ("DELETE", _) => status_reply(200, ""),
            _ => status_reply(405, ""),
        }
    })
}

async fn open_session(t: &HttpTransport, rx: &mut mpsc::UnboundedReceiver<Inbound>) {
    request(t, 1, "initialize");
    expect_result(next(rx).await, 1);
    assert_eq!(t.session_id().as_deref(), Some("sess-1"));
    t.negotiated(&legacy());
    notify(t, "notifications/initialized").await.unwrap();
}

#[actix_rt::test]
async fn json_reply_and_the_headers_sent() {
    let (url, log) = serve(session_server(|_, _| None)).await;
    let (t, mut rx) = start(&url, fast(), vec![("Authorization", "Bearer tok-123456")]);
    request_with(&t, 1, "initialize", vec![("X-Extra".into(), "yes".into())]);
    expect_result(next(&mut rx).await, 1);
    t.negotiated(&legacy());
    notify(&t, "notifications/initialized").await.unwrap();
    request(&t, 2, "tools/list");
    assert_eq!(expect_result(next(&mut rx).await, 2), json!({"ok": true}));

    let reqs = log.reqs();
    let init = &reqs[0];
    assert_eq!(init.header("content-type"), Some("application/json"));
    assert_eq!(
        init.header("accept"),
        Some("application/json, text/event-stream")
    );
    assert_eq!(init.header("authorization"), Some("Bearer tok-123456"));
    assert_eq!(init.header("x-extra"), Some("yes"));
    assert_eq!(init.header("mcp-session-id"), None);
    assert_eq!(init.header("mcp-protocol-version"), None);
    for later in &reqs[1..] {
        assert_eq!(later.header("mcp-session-id"), Some("sess-1"));
        assert_eq!(later.header("mcp-protocol-version"), Some("2025-11-25"));
        assert_eq!(later.header("authorization"), Some("Bearer tok-123456"));
    }
    assert_eq!(reqs[1].rpc_method(), "notifications/initialized");
}

#[actix_rt::test]
async fn an_oauth_token_set_while_running_replaces_the_authorization_header() {
    let (url, log) = serve(session_server(|_, _| None)).await;
    let (t, mut rx) = start(&url, fast(), vec![("Authorization", "Bearer configured-1")]);
    request(&t, 1, "initialize");
    expect_result(next(&mut rx).await, 1);
    t.set_bearer(Some(Secret::new("oauth-token-2"))).unwrap();
    request(&t, 2, "tools/list");
    expect_result(next(&mut rx).await, 2);
    t.set_bearer(None).unwrap();
    request(&t, 3, "tools/list");
    expect_result(next(&mut rx).await, 3);
    assert!(t.set_bearer(Some(Secret::new("bad\ntoken"))).is_err());
    let reqs = log.reqs();
    assert_eq!(reqs[0].header("authorization"), Some("Bearer configured-1"));
    assert_eq!(
        reqs[1].header("authorization"),
        Some("Bearer oauth-token-2")
    );
    assert_eq!(reqs[2].header("authorization"), Some("Bearer configured-1"));
}

#[actix_rt::test]
async fn modern_requests_get_no_legacy_headers() {
    let (url, log) = serve(session_server(|_, _| None)).await;
    let (t, mut rx) = start(&url, fast(), vec![]);
    t.negotiated(&ProtocolVersion::modern());
    request_with(
        &t,
        5,
        "tools/list",
        vec![
            ("MCP-Protocol-Version".into(), "2026-07-28".into()),
            ("Mcp-Method".into(), "tools/list".into()),
        ],
    );
    expect_result(next(&mut rx).await, 5);
    let r = &log.reqs()[0];
    assert_eq!(r.header("mcp-protocol-version"), Some("2026-07-28"));
    assert_eq!(r.header("mcp-method"), Some("tools/list"));
    assert_eq!(r.header("mcp-session-id"), None);
}

#[actix_rt::test]
async fn sse_reply_delivers_everything_before_the_response() {
    let handler: Handler = Arc::new(|r, _| {
        let id = r.json()["id"].as_i64().unwrap_or(0);
        sse_reply(vec![
            raw("id: p1\nretry: 100\ndata:\n\n"),
            raw(": a comment\n\n"),
            ev(
                Some("e1"),
                &json!({"jsonrpc": "2.0", "method": "notifications/progress", "params": {}}),
            ),
            ev(
                Some("e2"),
                &json!({"jsonrpc": "2.0", "id": 77, "method": "sampling/createMessage"}),
            ),
            ev(Some("e3"), &result(id, json!({"done": 1}))),
            Part::Hold,
        ])
    });
    let (url, log) = serve(handler).await;
    let (t, mut rx) = start(&url, fast(), vec![]);
    request(&t, 3, "tools/call");
    assert!(matches!(
        next(&mut rx).await,
        Inbound::Message(Message::Notification { .. })
    ));
    assert!(matches!(
        next(&mut rx).await,
        Inbound::Message(Message::Request {
            id: RequestId::Number(77),
            ..
        })
    ));
    assert_eq!(expect_result(next(&mut rx).await, 3), json!({"done": 1}));
    // The stream is dropped once its response arrived, though the server holds it.
    tokio::time::timeout(Duration::from_secs(5), async {
        while log.hangups.load(Ordering::SeqCst) == 0 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("the client closed the stream after its response");
}

#[actix_rt::test]
async fn refusals_with_and_without_a_jsonrpc_body() {
    let handler: Handler = Arc::new(|r, _| match r.rpc_method().as_str() {
        "server/discover" => json_reply(
            400,
            json!({"jsonrpc": "2.0", "id": null, "error": {"code": -32000, "message": "Bad Request: Server not initialized"}}),
        ),
        "tools/list" => status_reply(503, "overloaded\nplease retry; token tok-123456"),
        "tools/call" => {
            let mut rep = json_reply(401, json!({"error": "invalid_token"}));
            rep.headers.push((
                "www-authenticate".into(),
                "Bearer resource_metadata=\"x\"".into(),
            ));
            rep
        }
        _ => status_reply(500, ""),
    });
    let (url, _) = serve(handler).await;
    let (t, mut rx) = start(&url, fast(), vec![("Authorization", "Bearer tok-123456")]);
    request(&t, 1, "server/discover");
    match next(&mut rx).await {
        Inbound::Message(Message::Response {
            id: RequestId::Number(1),
            result: Err(e),
        }) => assert_eq!(e.code, -32000),
        other => panic!("{other:?}"),
    }
    request(&t, 2, "tools/list");
    match expect_lost(next(&mut rx).await, 2) {
        TransportError::Status {
            status: 503,
            detail,
            rpc_error: None,
            ..
        } => {
            assert!(detail.contains("overloaded please retry"), "{detail}");
            assert!(!detail.contains("tok-123456"), "a secret leaked: {detail}");
        }
        other => panic!("{other:?}"),
    }
    request(&t, 3, "tools/call");
    match expect_lost(next(&mut rx).await, 3) {
        TransportError::Status {
            status: 401,
            www_authenticate: Some(w),
            ..
        } => assert!(w.starts_with("Bearer")),
        other => panic!("{other:?}"),
    }
    // A refused notification tells its sender.
    match notify(&t, "notifications/x").await {
        Err(TransportError::Status { status: 500, .. }) => {}
        other => panic!("{other:?}"),
    }
}

#[actix_rt::test]
async fn an_unreachable_server_is_a_connect_error() {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/mcp", l.local_addr().unwrap());
    drop(l);
    let (t, mut rx) = start(&url, fast(), vec![]);
    request(&t, 1, "initialize");
    let e = expect_lost(next(&mut rx).await, 1);
    assert!(matches!(e, TransportError::Connect(_)), "{e:?}");
    assert!(!e.maybe_delivered());
    assert!(matches!(
        notify(&t, "notifications/initialized").await,
        Err(TransportError::Connect(_))
    ));
}

#[actix_rt::test]
async fn a_server_that_hangs_up_after_reading_is_an_unknown_outcome() {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/mcp", l.local_addr().unwrap());
    tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            let mut b = [0u8; 65536];
            let _ = s.read(&mut b).await;
            drop(s);
        }
    });
    let (t, mut rx) = start(&url, fast(), vec![]);
    request(&t, 1, "tools/call");
    let e = expect_lost(next(&mut rx).await, 1);
    assert!(e.maybe_delivered(), "{e:?}");
}

/// A session is open; the server answers its next request with `reply`: that request is
/// lost as `SessionExpired(status)` and the transport closes with the same error.
async fn the_server_ends_the_session(
    reply: impl Fn() -> Reply + Send + Sync + 'static,
    status: u16,
) -> Arc<HttpTransport> {
    let handler = session_server(move |r, _| (r.rpc_method() == "tools/list").then(&reply));
    let (url, _) = serve(handler).await;
    let (t, mut rx) = start(&url, fast(), vec![]);
    open_session(&t, &mut rx).await;
    request(&t, 2, "tools/list");
    assert!(matches!(
        expect_lost(next(&mut rx).await, 2),
        TransportError::SessionExpired(s) if s == status
    ));
    assert!(matches!(
        next(&mut rx).await,
        Inbound::Closed(TransportError::SessionExpired(s)) if s == status
    ));
    t
}

#[actix_rt::test]
async fn session_404_ends_the_transport() {
    let t = the_server_ends_the_session(|| status_reply(404, "Session not found"), 404).await;
    let e = t
        .send(Outbound {
            kind: OutKind::Notification { method: "x".into() },
            body: notification_bytes("x", None),
            headers: Vec::new(),
            ack: None,
        })
        .unwrap_err();
    assert!(matches!(e, TransportError::Closed(_)), "{e:?}");
}

#[actix_rt::test]
async fn session_400_no_valid_session_ends_the_transport() {
    // server-everything's answer to an unknown session.
    the_server_ends_the_session(
        || {
            json_reply(
                400,
                json!({"jsonrpc": "2.0", "id": null, "error": {"code": -32000, "message": "Bad Request: No valid session ID provided"}}),
            )
        },
        400,
    )
    .await;
}

#[actix_rt::test]
async fn a_404_without_a_session_is_an_ordinary_refusal() {
    let (url, _) = serve(Arc::new(|_, _| status_reply(404, "Not Found"))).await;
    let (t, mut rx) = start(&url, fast(), vec![]);
    request(&t, 1, "initialize");
    assert!(matches!(
        expect_lost(next(&mut rx).await, 1),
        TransportError::Status { status: 404, .. }
    ));
    quiet(&mut rx, 100).await;
}

#[actix_rt::test]
async fn oversized_answers_are_refused() {
    let handler: Handler = Arc::new(|r, _| {
        let id = r.json()["id"].as_i64().unwrap_or(0);
        let big = "x".repeat(MAX_MESSAGE_BYTES + 10);
        match r.rpc_method().as_str() {
            "json" => json_reply(200, result(id, json!({"big": big}))),
            _ => {
                // One event that never ends, growing past the cap.
                let mut parts = vec![raw("id: 1\ndata:\n\ndata: ")];
                for _ in 0..20 {
                    parts.push(Part::Chunk(vec![b'y'; 1 << 20]));
                }
                parts.push(Part::Hold);
                sse_reply(parts)
            }
        }
    });
    let (url, log) = serve(handler).await;
    let (t, mut rx) = start(&url, fast(), vec![]);
    request(&t, 1, "json");
    let e = expect_lost(next(&mut rx).await, 1);
    assert!(
        matches!(&e, TransportError::Protocol(m) if m.contains("16 MiB")),
        "{e:?}"
    );
    request(&t, 2, "sse");
    let e = expect_lost(next(&mut rx).await, 2);
    assert!(
        matches!(&e, TransportError::Protocol(m) if m.contains("16 MiB")),
        "{e:?}"
    );
    assert_eq!(t.stats().oversized.load(Ordering::Relaxed), 2);
    tokio::time::timeout(Duration::from_secs(5), async {
        while log.hangups.load(Ordering::SeqCst) == 0 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("the oversized stream was closed");
    // And outgoing.
    let big = Bytes::from(vec![b' '; MAX_MESSAGE_BYTES + 1]);
    let e = t
        .send(Outbound {
            kind: OutKind::Response,
            body: big,
            headers: Vec::new(),
            ack: None,
        })
        .unwrap_err();
    assert!(matches!(e, TransportError::TooLarge(_)));
}

/// A session server whose `tools/call` stream is cut after its priming event; GETs
/// answer from `get`.
fn cut_server(get: impl Fn(&Req, usize) -> Reply + Send + Sync + 'static) -> Handler {
    session_server(
        move |r, i| match (r.method.as_str(), r.rpc_method().as_str()) {
            ("POST", "tools/call") => Some(sse_reply(vec![
                raw("id: s1-1\nretry: 20\ndata:\n\n"),
                ev(
                    Some("s1-2"),
                    &json!({"jsonrpc": "2.0", "method": "notifications/progress"}),
                ),
                Part::Break,
            ])),
            ("GET", _) => Some(get(r, i)),
            _ => None,
        },
    )
}

#[actix_rt::test]
async fn a_cut_stream_is_resumed_with_last_event_id() {
    let handler = cut_server(|r, _| {
        assert_eq!(r.header("last-event-id"), Some("s1-2"));
        sse_reply(vec![
            // A replay of what was already handled, then the answer.
            ev(
                Some("s1-2"),
                &json!({"jsonrpc": "2.0", "method": "notifications/progress"}),
            ),
            ev(Some("s1-3"), &result(2, json!({"resumed": true}))),
        ])
    });
    let (url, log) = serve(handler).await;
    let (t, mut rx) = start(&url, fast(), vec![]);
    open_session(&t, &mut rx).await;
    request(&t, 2, "tools/call");
    assert!(matches!(
        next(&mut rx).await,
        Inbound::Message(Message::Notification { .. })
    ));
    assert_eq!(
        expect_result(next(&mut rx).await, 2),
        json!({"resumed": true})
    );
    let get = log.reqs().into_iter().find(|r| r.method == "GET").unwrap();
    assert_eq!(get.header("mcp-session-id"), Some("sess-1"));
    assert_eq!(get.header("mcp-protocol-version"), Some("2025-11-25"));
    assert_eq!(get.header("accept"), Some("text/event-stream"));
    assert_eq!(t.stats().duplicates_dropped.load(Ordering::Relaxed), 1);
    assert_eq!(t.stats().resumptions.load(Ordering::Relaxed), 1);
}

#[actix_rt::test]
async fn five_empty_resumptions_give_up() {
    let handler = cut_server(|_, _| sse_reply(vec![raw(": nothing new\n\n")]));
    let (url, log) = serve(handler).await;
    let (t, mut rx) = start(&url, fast(), vec![]);
    open_session(&t, &mut rx).await;
    request(&t, 2, "tools/call");
    assert!(matches!(
        next(&mut rx).await,
        Inbound::Message(Message::Notification { .. })
    ));
    let e = expect_lost(next(&mut rx).await, 2);
    assert!(e.maybe_delivered());
    assert!(e.to_string().contains("5 resumptions"), "{e}");
    assert_eq!(log.count("GET"), 5);
}

#[actix_rt::test]
async fn resumptions_that_bring_events_keep_going() {
    // Every GET brings one new event and ends; the seventh brings the answer.
    let handler = cut_server(|_, i| {
        // Requests 0..=2 are initialize, initialized, tools/call.
        let n = i - 2;
        if n < 7 {
            sse_reply(vec![raw(&format!("id: g{n}\ndata:\n\n"))])
        } else {
            sse_reply(vec![ev(Some("final"), &result(2, json!({"n": n})))])
        }
    });
    let (url, log) = serve(handler).await;
    let (t, mut rx) = start(&url, fast(), vec![]);
    open_session(&t, &mut rx).await;
    request(&t, 2, "tools/call");
    assert!(matches!(
        next(&mut rx).await,
        Inbound::Message(Message::Notification { .. })
    ));
    assert_eq!(expect_result(next(&mut rx).await, 2), json!({"n": 7}));
    assert_eq!(log.count("GET"), 7);
}

#[actix_rt::test]
async fn a_huge_retry_is_capped() {
    let handler = session_server(|r, _| match (r.method.as_str(), r.rpc_method().as_str()) {
        ("POST", "tools/call") => Some(sse_reply(vec![raw("id: a\nretry: 3600000\ndata:\n\n")])),
        ("GET", _) => Some(sse_reply(vec![ev(Some("b"), &result(2, json!({})))])),
        _ => None,
    });
    let (url, _) = serve(handler).await;
    let opts = HttpOptions {
        resume_max_wait: Duration::from_millis(200),
        ..fast()
    };
    let (t, mut rx) = start(&url, opts, vec![]);
    open_session(&t, &mut rx).await;
    let t0 = std::time::Instant::now();
    request(&t, 2, "tools/call");
    expect_result(next(&mut rx).await, 2);
    let took = t0.elapsed();
    assert!(took >= Duration::from_millis(200), "{took:?}");
    assert!(took < Duration::from_secs(5), "{took:?}");
}

#[actix_rt::test]
async fn a_stream_without_event_ids_cannot_resume() {
    let handler = session_server(|r, _| {
        (r.rpc_method() == "tools/call").then(|| {
            sse_reply(vec![
                ev(
                    None,
                    &json!({"jsonrpc": "2.0", "method": "notifications/progress"}),
                ),
                Part::Break,
            ])
        })
    });
    let (url, log) = serve(handler).await;
    let (t, mut rx) = start(&url, fast(), vec![]);
    open_session(&t, &mut rx).await;
    request(&t, 2, "tools/call");
    next(&mut rx).await;
    let e = expect_lost(next(&mut rx).await, 2);
    assert!(e.to_string().contains("no event id"), "{e}");
    assert_eq!(log.count("GET"), 0);
}

#[actix_rt::test]
async fn a_modern_stream_is_never_resumed() {
    let handler = cut_server(|_, _| sse_reply(vec![]));
    let (url, log) = serve(handler).await;
    let (t, mut rx) = start(&url, fast(), vec![]);
    t.negotiated(&ProtocolVersion::modern());
    request(&t, 2, "tools/call");
    next(&mut rx).await;
    assert!(expect_lost(next(&mut rx).await, 2).maybe_delivered());
    assert_eq!(log.count("GET"), 0);
}

/// Abort request 9, whose stream the server holds open: the server sees the stream close, and
/// nothing is delivered.
async fn abort_9_and_see_its_stream_close(
    t: &HttpTransport,
    log: &Log,
    rx: &mut mpsc::UnboundedReceiver<Inbound>,
) {
    assert_eq!(log.hangups.load(Ordering::SeqCst), 0);
    t.abort(&RequestId::Number(9));
    tokio::time::timeout(Duration::from_secs(5), async {
        while log.hangups.load(Ordering::SeqCst) == 0 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("the server saw the stream close");
    quiet(rx, 100).await;
}

/// A modern-era transport to a server that answers every POST with an SSE stream it holds open
/// after one event.
async fn a_server_that_holds_its_streams(
) -> (Arc<HttpTransport>, mpsc::UnboundedReceiver<Inbound>, Log) {
    let handler: Handler = Arc::new(|_, _| sse_reply(vec![raw("id: 1\ndata:\n\n"), Part::Hold]));
    let (url, log) = serve(handler).await;
    let (t, rx) = start(&url, fast(), vec![]);
    t.negotiated(&ProtocolVersion::modern());
    (t, rx, log)
}

#[actix_rt::test]
async fn abort_closes_the_request_stream() {
    let (t, mut rx, log) = a_server_that_holds_its_streams().await;
    request(&t, 9, "tools/call");
    tokio::time::sleep(Duration::from_millis(100)).await;
    abort_9_and_see_its_stream_close(&t, &log, &mut rx).await;
}

#[actix_rt::test]
async fn the_listening_stream_delivers_and_close_deletes_the_session() {
    let handler = session_server(|r, _| {
        (r.method == "GET").then(|| {
            sse_reply(vec![
                raw("id: g1\ndata:\n\n"),
                ev(
                    Some("g2"),
                    &json!({"jsonrpc": "2.0", "id": 0, "method": "roots/list"}),
                ),
                ev(
                    Some("g3"),
                    &json!({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}),
                ),
                Part::Hold,
            ])
        })
    });
    let (url, log) = serve(handler).await;
    let (t, mut rx) = start(&url, fast(), vec![]);
    // Not before the handshake: nothing happens.
    t.open_listen_stream();
    open_session(&t, &mut rx).await;
    t.open_listen_stream();
    t.open_listen_stream(); // one per connection
    assert!(matches!(
        next(&mut rx).await,
        Inbound::Message(Message::Request { method, .. }) if method == "roots/list"
    ));
    assert!(matches!(
        next(&mut rx).await,
        Inbound::Message(Message::Notification { .. })
    ));
    assert_eq!(t.listen_state(), ListenState::Open);
    assert_eq!(log.count("GET"), 1);
    let get = log.reqs().into_iter().find(|r| r.method == "GET").unwrap();
    assert_eq!(get.header("accept"), Some("text/event-stream"));
    assert_eq!(get.header("mcp-session-id"), Some("sess-1"));
    assert_eq!(get.header("mcp-protocol-version"), Some("2025-11-25"));

    t.close();
    tokio::time::timeout(Duration::from_secs(5), t.wait_closed())
        .await
        .unwrap();
    let del = log
        .reqs()
        .into_iter()
        .find(|r| r.method == "DELETE")
        .expect("a DELETE");
    assert_eq!(del.header("mcp-session-id"), Some("sess-1"));
    tokio::time::timeout(Duration::from_secs(5), async {
        while log.hangups.load(Ordering::SeqCst) == 0 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("the GET stream was closed");
    assert_eq!(t.listen_state(), ListenState::Closed);
    assert!(t
        .send(Outbound {
            kind: OutKind::Response,
            body: Bytes::from_static(b"{}"),
            headers: Vec::new(),
            ack: None,
        })
        .is_err());
}

#[actix_rt::test]
async fn a_refused_listening_stream_stays_closed() {
    let (url, log) = serve(session_server(|_, _| None)).await; // GET -> 405
    let (t, mut rx) = start(&url, fast(), vec![]);
    open_session(&t, &mut rx).await;
    t.open_listen_stream();
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(t.listen_state(), ListenState::Refused(405));
    t.open_listen_stream();
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(log.count("GET"), 1);
    // A 405 on DELETE is fine too.
    t.close();
    tokio::time::timeout(Duration::from_secs(5), t.wait_closed())
        .await
        .unwrap();
}

#[actix_rt::test]
async fn a_silent_listening_stream_is_given_up_after_eight_attempts() {
    let handler = session_server(|r, _| (r.method == "GET").then(|| sse_reply(vec![])));
    let (url, log) = serve(handler).await;
    let (t, mut rx) = start(&url, fast(), vec![]);
    open_session(&t, &mut rx).await;
    t.open_listen_stream();
    tokio::time::timeout(Duration::from_secs(10), async {
        while t.listen_state() != ListenState::GaveUp {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("given up");
    assert_eq!(log.count("GET"), 8);
}

#[actix_rt::test]
async fn a_talking_listening_stream_is_reopened_with_last_event_id() {
    let handler = session_server(|r, i| {
        (r.method == "GET").then(|| {
            let n = i;
            if n > 12 {
                // Enough: refuse, which ends the loop.
                return status_reply(409, "Conflict");
            }
            sse_reply(vec![raw(&format!("id: l{n}\ndata:\n\n"))])
        })
    });
    let (url, log) = serve(handler).await;
    let (t, mut rx) = start(&url, fast(), vec![]);
    open_session(&t, &mut rx).await;
    t.open_listen_stream();
    tokio::time::timeout(Duration::from_secs(10), async {
        while t.listen_state() != ListenState::Refused(409) {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("ended by the refusal");
    let gets: Vec<_> = log
        .reqs()
        .into_iter()
        .filter(|r| r.method == "GET")
        .collect();
    // Eleven streams that each heard something (more than eight: never given up), then
    // the refusal.
    assert_eq!(gets.len(), 12);
    assert_eq!(gets[0].header("last-event-id"), None);
    assert!(gets[1].header("last-event-id").unwrap().starts_with('l'));
}

#[actix_rt::test]
async fn a_session_ended_on_the_listening_stream_closes_the_transport() {
    let handler =
        session_server(|r, _| (r.method == "GET").then(|| status_reply(404, "Session not found")));
    let (url, _) = serve(handler).await;
    let (t, mut rx) = start(&url, fast(), vec![]);
    open_session(&t, &mut rx).await;
    t.open_listen_stream();
    assert!(matches!(
        next(&mut rx).await,
        Inbound::Closed(TransportError::SessionExpired(404))
    ));
    assert_eq!(t.listen_state(), ListenState::Closed);
}

#[actix_rt::test]
async fn replayed_requests_and_responses_are_dropped() {
    // The listening stream replays a request already seen on a POST stream.
    let handler = session_server(|r, _| match (r.method.as_str(), r.rpc_method().as_str()) {
        ("POST", "tools/call") => Some(sse_reply(vec![
            ev(
                Some("x1"),
                &json!({"jsonrpc": "2.0", "id": 50, "method": "roots/list"}),
            ),
            ev(Some("x2"), &result(2, json!({}))),
        ])),
        ("GET", _) => Some(sse_reply(vec![
            ev(
                Some("x1"),
                &json!({"jsonrpc": "2.0", "id": 50, "method": "roots/list"}),
            ),
            ev(
                Some("y1"),
                &json!({"jsonrpc": "2.0", "id": 50, "method": "roots/list"}),
            ),
            ev(Some("y2"), &result(2, json!({}))),
            Part::Hold,
        ])),
        _ => None,
    });
    let (url, _) = serve(handler).await;
    let (t, mut rx) = start(&url, fast(), vec![]);
    open_session(&t, &mut rx).await;
    request(&t, 2, "tools/call");
    assert!(matches!(
        next(&mut rx).await,
        Inbound::Message(Message::Request { .. })
    ));
    expect_result(next(&mut rx).await, 2);
    t.open_listen_stream();
    quiet(&mut rx, 300).await;
    assert_eq!(t.stats().duplicates_dropped.load(Ordering::Relaxed), 3);
}

#[actix_rt::test]
async fn an_event_id_over_256_bytes_ends_its_stream_and_is_never_sent_back() {
    let long = "i".repeat(300);
    let handler = session_server(
        move |r, _| match (r.method.as_str(), r.rpc_method().as_str()) {
            ("POST", "tools/call") => Some(sse_reply(vec![
                raw(&format!("id: {long}\ndata:\n\n")),
                ev(Some("after"), &result(2, json!({}))),
                Part::Hold,
            ])),
            ("GET", _) => Some(sse_reply(vec![raw(&format!("id: {long}\ndata:\n\n"))])),
            _ => None,
        },
    );
    let (url, log) = serve(handler).await;
    let (t, mut rx) = start(&url, fast(), vec![]);
    open_session(&t, &mut rx).await;
    request(&t, 2, "tools/call");
    let e = expect_lost(next(&mut rx).await, 2);
    assert!(e.maybe_delivered(), "{e:?}");
    assert!(e.to_string().contains("event id"), "{e}");
    // The listening stream meets one at once and is reopened on its schedule, never with it.
    t.open_listen_stream();
    tokio::time::timeout(Duration::from_secs(10), async {
        while log.count("GET") < 3 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("reopened");
    assert!(log
        .reqs()
        .iter()
        .all(|r| r.header("last-event-id").is_none()));
    assert!(t.stats().oversized_ids.load(Ordering::Relaxed) >= 3);
    assert!(t.ignored_messages() >= 3);
}

#[actix_rt::test]
async fn responses_with_string_ids_over_256_bytes_are_ignored_and_counted() {
    let handler = session_server(|r, _| {
        (r.rpc_method() == "tools/call").then(|| {
            let long = json!({"jsonrpc": "2.0", "id": "r".repeat(257), "result": {}});
            let edge = json!({"jsonrpc": "2.0", "id": "e".repeat(256), "result": {}});
            sse_reply(vec![
                ev(Some("a"), &long),
                ev(Some("b"), &edge),
                ev(Some("c"), &result(2, json!({"ok": 1}))),
            ])
        })
    });
    let (url, _) = serve(handler).await;
    let (t, mut rx) = start(&url, fast(), vec![]);
    open_session(&t, &mut rx).await;
    request(&t, 2, "tools/call");
    // The 256-byte one is handed on (the client core finds no request for it).
    assert!(matches!(
        next(&mut rx).await,
        Inbound::Message(Message::Response { id: RequestId::String(s), .. }) if s.len() == 256
    ));
    expect_result(next(&mut rx).await, 2);
    assert_eq!(t.stats().oversized_ids.load(Ordering::Relaxed), 1);
    assert_eq!(t.ignored_messages(), 1);
}

/// A request that is never answered (the scripted server holds it).
fn stall() -> Reply {
    status_reply(0, "")
}

fn ping(id: i64) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "ping"})
}

fn pong(t: &HttpTransport, id: RequestId) {
    t.send(Outbound {
        kind: OutKind::Response,
        body: Message::Response {
            id,
            result: Ok(json!({}).into()),
        }
        .to_bytes(),
        headers: Vec::new(),
        ack: None,
    })
    .unwrap();
}

/// Whether a logged request is a POST of one of our answers.
fn is_answer(r: &Req) -> bool {
    r.method == "POST" && r.json().get("method").is_none() && r.json().get("id").is_some()
}

/// A session server whose tools/call answer is `body` (JSON), as `version`.
fn batch_server(version: &'static str, body: Value) -> Handler {
    Arc::new(move |r, _| match r.rpc_method().as_str() {
        "initialize" => {
            let mut rep = json_reply(200, result(1, json!({"protocolVersion": version})));
            rep.headers.push(("mcp-session-id".into(), "sess-1".into()));
            rep
        }
        "tools/call" => json_reply(200, body.clone()),
        _ => status_reply(202, ""),
    })
}

async fn open_as(t: &HttpTransport, rx: &mut mpsc::UnboundedReceiver<Inbound>, version: &str) {
    request(t, 1, "initialize");
    expect_result(next(rx).await, 1);
    t.negotiated(&ProtocolVersion::legacy(version));
}

#[actix_rt::test]
async fn a_batch_is_refused_unless_the_server_negotiated_2025_03_26() {
    let batch = json!([ping(70), result(2, json!({"batched": true}))]);
    // 2025-11-25: a protocol error, the request lost, nothing handed on.
    let (url, _) = serve(batch_server("2025-11-25", batch.clone())).await;
    let (t, mut rx) = start(&url, fast(), vec![]);
    open_as(&t, &mut rx, "2025-11-25").await;
    request(&t, 2, "tools/call");
    let e = expect_lost(next(&mut rx).await, 2);
    assert!(e.to_string().contains("batch"), "{e}");
    assert!(e.maybe_delivered());
    assert_eq!(t.stats().batches_refused.load(Ordering::Relaxed), 1);
    assert_eq!(t.ignored_messages(), 1);
    // The same in an SSE event: ignored, the stream goes on.
    let handler = session_server(|r, _| {
        (r.rpc_method() == "tools/call").then(|| {
            sse_reply(vec![
                ev(Some("a"), &json!([ping(71), ping(72)])),
                ev(Some("b"), &result(2, json!({}))),
            ])
        })
    });
    let (url, _) = serve(handler).await;
    let (t, mut rx) = start(&url, fast(), vec![]);
    open_session(&t, &mut rx).await;
    request(&t, 2, "tools/call");
    expect_result(next(&mut rx).await, 2);
    assert_eq!(t.stats().batches_refused.load(Ordering::Relaxed), 1);
    // 2025-03-26: taken.
    let (url, _) = serve(batch_server("2025-03-26", batch)).await;
    let (t, mut rx) = start(&url, fast(), vec![]);
    open_as(&t, &mut rx, "2025-03-26").await;
    request(&t, 2, "tools/call");
    assert!(matches!(
        next(&mut rx).await,
        Inbound::Message(Message::Request {
            id: RequestId::Number(70),
            ..
        })
    ));
    expect_result(next(&mut rx).await, 2);
    assert_eq!(t.ignored_messages(), 0);
}

#[actix_rt::test]
async fn server_requests_over_the_rate_limit_are_dropped_and_a_flood_closes_the_connection() {
    let pings: Vec<Value> = (0..1300).map(|i| ping(1000 + i)).collect();
    let mut batch = vec![result(2, json!({"first": true}))];
    batch.extend(pings);
    let (url, log) = serve(batch_server("2025-03-26", Value::Array(batch))).await;
    let (t, mut rx) = start(&url, fast(), vec![]);
    open_as(&t, &mut rx, "2025-03-26").await;
    request(&t, 2, "tools/call");
    expect_result(next(&mut rx).await, 2);
    // The burst of 200 is handed on (and what refilled at 100/s meanwhile), 1,000 are dropped
    // (and what refilled at 1,000/s), the next one closes the connection.
    let mut handed = 0;
    let closed = loop {
        match next(&mut rx).await {
            Inbound::Message(Message::Request { .. }) => handed += 1,
            Inbound::Closed(e) => break e,
            other => panic!("{other:?}"),
        }
    };
    assert!(matches!(closed, TransportError::Overrun(_)), "{closed:?}");
    assert!(closed.maybe_delivered());
    assert!(
        closed.to_string().contains("far over the limit"),
        "{closed}"
    );
    quiet(&mut rx, 100).await;
    let dropped = t.stats().requests_dropped.load(Ordering::Relaxed);
    assert!((200..300).contains(&handed), "{handed} handed on");
    assert!(dropped > 1000, "{dropped} dropped");
    assert!(
        handed + dropped < 1300,
        "the rest of the batch went on after the close"
    );
    assert!(t
        .send(Outbound {
            kind: OutKind::Response,
            body: Bytes::from_static(b"{}"),
            headers: Vec::new(),
            ack: None,
        })
        .is_err());
    // The session is deleted when the handle closes.
    t.close();
    tokio::time::timeout(Duration::from_secs(5), t.wait_closed())
        .await
        .unwrap();
    assert_eq!(log.count("DELETE"), 1);
}

#[actix_rt::test]
async fn answers_are_posted_16_at_a_time_and_queued_up_to_1024() {
    // The server never answers the POST of an answer.
    let handler = session_server(|r, _| is_answer(r).then(stall));
    let (url, log) = serve(handler).await;
    let (t, mut rx) = start(&url, fast(), vec![]);
    open_session(&t, &mut rx).await;
    let n = MAX_REPLY_POSTS + MAX_QUEUED_REPLIES + 10;
    for i in 0..n {
        pong(&t, RequestId::Number(i as i64));
    }
    let posted = || log.reqs().iter().filter(|r| is_answer(r)).count();
    tokio::time::timeout(Duration::from_secs(10), async {
        while posted() < MAX_REPLY_POSTS {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("the first answers were posted");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(posted(), MAX_REPLY_POSTS, "no more than 16 at once");
    assert_eq!(t.stats().replies_dropped.load(Ordering::Relaxed), 10);
    quiet(&mut rx, 10).await;
}

#[actix_rt::test]
async fn server_text_in_errors_has_no_control_characters_and_is_short() {
    let ansi = "\x1b[2J\x1b[31mERROR\x1b[0m\r\nforged line\u{7}\u{202e}txt tok-123456\n".repeat(50);
    let a = ansi.clone();
    let handler: Handler = Arc::new(move |r, _| {
        let id = r.json()["id"].as_i64().unwrap_or(0);
        match r.rpc_method().as_str() {
            "rpc" => json_reply(
                400,
                json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32000, "message": a}}),
            ),
            "plain" => status_reply(503, &a),
            _ => json_reply(200, json!([a])),
        }
    });
    let (url, _) = serve(handler).await;
    let (t, mut rx) = start(&url, fast(), vec![("Authorization", "Bearer tok-123456")]);
    let clean = |s: &str| {
        assert!(
            !s.chars().any(|c| c.is_control() || c == '\u{202e}'),
            "{s:?}"
        );
        assert!(s.chars().count() <= 400, "{} chars", s.chars().count());
        assert!(!s.contains("tok-123456"), "a secret leaked: {s}");
    };
    request(&t, 1, "rpc");
    match next(&mut rx).await {
        Inbound::Message(Message::Response { result: Err(e), .. }) => {
            clean(&e.message);
            assert!(e.message.contains("forged line txt ***"), "{}", e.message);
        }
        other => panic!("{other:?}"),
    }
    request(&t, 2, "plain");
    clean(&expect_lost(next(&mut rx).await, 2).to_string());
    t.negotiated(&ProtocolVersion::legacy("2025-03-26"));
    request(&t, 3, "batch of junk");
    clean(&expect_lost(next(&mut rx).await, 3).to_string());
}

#[actix_rt::test]
async fn a_dpop_token_goes_with_a_proof_per_request_and_a_nonce_challenge_is_answered_once() {
    // tools/list (id 2) is refused until its proof carries the nonce; id 3 always.
    let (url, log) = serve(session_server(|r, _| {
        let id = r.json()["id"].as_i64();
        let nonce_in_proof = r.header("dpop").is_some_and(|p| p.ends_with(":n-1"));
        let refuse = (id == Some(2) && !nonce_in_proof) || id == Some(3);
        refuse.then(|| {
            let mut rep = json_reply(401, json!({"error": "use_dpop_nonce"}));
            rep.headers.push((
                "www-authenticate".into(),
                r#"DPoP error="use_dpop_nonce""#.into(),
            ));
            let n = if id == Some(2) { "n-1" } else { "n-2" };
            rep.headers.push(("dpop-nonce".into(), n.into()));
            rep
        })
    }))
    .await;
    let (t, mut rx) = start(&url, fast(), Vec::new());
    let prover: DpopProver = Arc::new(|method: &str, nonce: Option<&str>| {
        Some(format!("proof:{method}:{}", nonce.unwrap_or("-")))
    });
    t.set_dpop(Secret::new("dpop-token-1"), prover).unwrap();
    request(&t, 1, "initialize");
    expect_result(next(&mut rx).await, 1);
    request(&t, 2, "tools/list");
    expect_result(next(&mut rx).await, 2);
    // A second challenge with a new nonce is answered once more, then the 401 stands.
    request(&t, 3, "tools/list");
    match next(&mut rx).await {
        Inbound::Lost { error, .. } => {
            assert!(
                matches!(error, TransportError::Status { status: 401, .. }),
                "{error:?}"
            )
        }
        other => panic!("{other:?}"),
    }
    let reqs = log.reqs();
    let posts: Vec<&Req> = reqs.iter().filter(|r| r.method == "POST").collect();
    assert_eq!(posts[0].header("authorization"), Some("DPoP dpop-token-1"));
    assert_eq!(posts[0].header("dpop"), Some("proof:POST:-"));
    // id 2: refused without the nonce, sent once more with it.
    assert_eq!(posts[1].header("dpop"), Some("proof:POST:-"));
    assert_eq!(posts[2].header("dpop"), Some("proof:POST:n-1"));
    // id 3: the kept nonce, then once with the new one, and no third try.
    assert_eq!(posts[3].header("dpop"), Some("proof:POST:n-1"));
    assert_eq!(posts[4].header("dpop"), Some("proof:POST:n-2"));
    assert_eq!(posts.len(), 5);
    // Back to a bearer token: no proof.
    t.set_bearer(Some(Secret::new("plain-2"))).unwrap();
    request(&t, 4, "tools/list");
    expect_result(next(&mut rx).await, 4);
    let last = log
        .reqs()
        .into_iter()
        .rfind(|r| r.method == "POST")
        .unwrap();
    assert_eq!(last.header("authorization"), Some("Bearer plain-2"));
    assert_eq!(last.header("dpop"), None);
}

#[actix_rt::test]
async fn a_dpop_nonce_challenge_on_the_listening_get_and_the_delete_is_answered_once() {
    // The GET stream and the DELETE are refused until their proofs carry the server's nonce;
    // each new nonce the server gives is answered by sending the same request once more.
    let handler = session_server(|r, _| {
        if r.method == "POST" {
            return None;
        }
        let want = if r.method == "GET" { "g-1" } else { "d-1" };
        if r.header("dpop")
            .is_some_and(|p| p.ends_with(&format!(":{want}")))
        {
            return (r.method == "GET")
                .then(|| sse_reply(vec![raw("id: g1\ndata:\n\n"), Part::Hold]));
        }
        let mut rep = json_reply(401, json!({"error": "use_dpop_nonce"}));
        rep.headers.push((
            "www-authenticate".into(),
            r#"DPoP error="use_dpop_nonce""#.into(),
        ));
        rep.headers.push(("dpop-nonce".into(), want.into()));
        Some(rep)
    });
    let (url, log) = serve(handler).await;
    let (t, mut rx) = start(&url, fast(), vec![]);
    let prover: DpopProver = Arc::new(|method: &str, nonce: Option<&str>| {
        Some(format!("proof:{method}:{}", nonce.unwrap_or("-")))
    });
    t.set_dpop(Secret::new("dpop-token-1"), prover).unwrap();
    open_session(&t, &mut rx).await;
    t.open_listen_stream();
    tokio::time::timeout(Duration::from_secs(5), async {
        while t.listen_state() != ListenState::Open {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("the GET stream opened with the nonce");
    t.close();
    tokio::time::timeout(Duration::from_secs(5), t.wait_closed())
        .await
        .unwrap();
    let reqs = log.reqs();
    let proofs = |m: &str| -> Vec<String> {
        reqs.iter()
            .filter(|r| r.method == m)
            .map(|r| r.header("dpop").unwrap_or_default().to_owned())
            .collect()
    };
    assert_eq!(proofs("GET"), ["proof:GET:-", "proof:GET:g-1"]);
    // The DELETE starts with the nonce the GET brought, and is sent once more with its own.
    assert_eq!(proofs("DELETE"), ["proof:DELETE:g-1", "proof:DELETE:d-1"]);
    for r in reqs.iter().filter(|r| r.method != "POST") {
        assert_eq!(r.header("authorization"), Some("DPoP dpop-token-1"));
    }
}

#[test]
fn a_dpop_nonce_is_kept_only_within_its_bound() {
    assert!(usable_nonce("n-1_ok~"));
    assert!(usable_nonce(&"a".repeat(MAX_NONCE_BYTES)));
    assert!(!usable_nonce(&"a".repeat(MAX_NONCE_BYTES + 1)));
    for bad in ["", "a b", "a\"b", "a\\b", "a\u{7f}", "é"] {
        assert!(!usable_nonce(bad), "{bad:?}");
    }
}

// ---- requests POSTed from another thread (`posts_here`) ----------------------------------

/// Runs `f` on a thread of its own, with an actix `System` when `arbiter` (as an API worker
/// has), else on a bare tokio `LocalSet`: as a local task, wrapped in [`posts_here`] when
/// `here`. That thread goes on running what `f` spawned until `stop` fires, then answers `f`'s
/// value and how many awc clients it held.
fn thread_of_its_own<T, F, Fut>(
    arbiter: bool,
    here: bool,
    f: F,
    stop: oneshot::Receiver<()>,
) -> oneshot::Receiver<(T, usize)>
where
    T: Send + 'static,
    F: FnOnce() -> Fut + Send + 'static,
    Fut: std::future::Future<Output = T> + 'static,
{
    let (tx, rx) = oneshot::channel();
    std::thread::spawn(move || {
        let run = async move {
            let v = if here {
                tokio::task::spawn_local(posts_here(f())).await
            } else {
                tokio::task::spawn_local(f()).await
            }
            .expect("the task on the other thread");
            let _ = stop.await;
            let _ = tx.send((v, clients::held_here()));
        };
        if arbiter {
            actix_rt::System::new().block_on(run);
        } else {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a runtime");
            tokio::task::LocalSet::new().block_on(&rt, run);
        }
    });
    rx
}

fn posted_here(t: &HttpTransport) -> u64 {
    t.stats().posts_here.load(Ordering::Relaxed)
}

fn notification(method: &str) -> Outbound {
    Outbound {
        kind: OutKind::Notification {
            method: method.into(),
        },
        body: notification_bytes(method, None),
        headers: Vec::new(),
        ack: None,
    }
}

/// A thread of its own on an arbiter (inside `posts_here` when `here`) that sends request
/// `id` and runs on until the answered sender fires; answers that sender and the thread's end.
fn request_on_its_own_thread(
    t: &Arc<HttpTransport>,
    here: bool,
    id: i64,
    method: &'static str,
) -> (oneshot::Sender<()>, oneshot::Receiver<((), usize)>) {
    let (stop, stopped) = oneshot::channel();
    let t2 = t.clone();
    let there = thread_of_its_own(
        true,
        here,
        move || async move { request(&t2, id, method) },
        stopped,
    );
    (stop, there)
}

/// Request `id` sent from another thread ([`thread_of_its_own`] on an arbiter, inside `posts_here` when `here`),
/// its answer awaited, then that thread stopped: answers how many awc clients it held.
async fn one_request_from_another_thread(
    t: &Arc<HttpTransport>,
    here: bool,
    id: i64,
    method: &'static str,
    rx: &mut mpsc::UnboundedReceiver<Inbound>,
) -> usize {
    let (stop, there) = request_on_its_own_thread(t, here, id, method);
    expect_result(next(rx).await, id);
    let _ = stop.send(());
    there.await.unwrap().1
}

#[actix_rt::test]
async fn a_request_from_a_task_that_posts_here_is_posted_by_its_own_thread() {
    let (url, log) = serve(session_server(|_, _| None)).await;
    let (t, mut rx) = start(&url, fast(), vec![("X-Key", "key-123456")]);
    // Before the version is negotiated, even such a task hands its request to the driver.
    let held = one_request_from_another_thread(&t, true, 1, "initialize", &mut rx).await;
    assert_eq!(held, 0, "no client was built there");
    assert_eq!(posted_here(&t), 0);
    t.negotiated(&legacy());
    notify(&t, "notifications/initialized").await.unwrap();

    // Then its request is POSTed from its thread, with a client of that thread's own; a
    // notification sent from there still goes through the driver.
    let (stop, stopped) = oneshot::channel();
    let t2 = t.clone();
    let there = thread_of_its_own(
        true,
        true,
        move || async move {
            request(&t2, 2, "tools/call");
            t2.send(notification("notifications/progress")).unwrap();
        },
        stopped,
    );
    assert_eq!(expect_result(next(&mut rx).await, 2), json!({"ok": true}));
    tokio::time::timeout(Duration::from_secs(5), async {
        while !log
            .reqs()
            .iter()
            .any(|r| r.rpc_method() == "notifications/progress")
        {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .expect("the notification was POSTed");
    let _ = stop.send(());
    assert_eq!(
        there.await.unwrap().1,
        1,
        "that thread built its own client"
    );
    assert_eq!(posted_here(&t), 1, "the request only");
    let call = log
        .reqs()
        .into_iter()
        .find(|r| r.rpc_method() == "tools/call")
        .expect("the call reached the server");
    assert_eq!(call.header("mcp-session-id"), Some("sess-1"));
    assert_eq!(call.header("mcp-protocol-version"), Some("2025-11-25"));
    assert_eq!(call.header("x-key"), Some("key-123456"));

    // A task of that kind that does not post here hands its requests to the driver.
    let held = one_request_from_another_thread(&t, false, 3, "tools/call", &mut rx).await;
    assert_eq!(held, 0);
    assert_eq!(posted_here(&t), 1);
    t.close();
    tokio::time::timeout(Duration::from_secs(5), t.wait_closed())
        .await
        .unwrap();
    assert_eq!(log.count("DELETE"), 1, "the driver deleted the session");
}

#[actix_rt::test]
async fn a_request_posted_from_another_thread_is_aborted_from_the_driver() {
    let (t, mut rx, log) = a_server_that_holds_its_streams().await;
    let (stop, there) = request_on_its_own_thread(&t, true, 9, "tools/call");
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(posted_here(&t), 1);
    abort_9_and_see_its_stream_close(&t, &log, &mut rx).await;
    let _ = stop.send(());
    there.await.unwrap();
}

#[actix_rt::test]
async fn a_session_ended_to_a_request_from_another_thread_ends_the_transport() {
    let handler =
        session_server(|r, _| (r.rpc_method() == "tools/call").then(|| status_reply(404, "")));
    let (url, log) = serve(handler).await;
    let (t, mut rx) = start(&url, fast(), vec![]);
    open_session(&t, &mut rx).await;
    let (stop, there) = request_on_its_own_thread(&t, true, 2, "tools/call");
    assert!(matches!(
        expect_lost(next(&mut rx).await, 2),
        TransportError::SessionExpired(404)
    ));
    assert!(matches!(
        next(&mut rx).await,
        Inbound::Closed(TransportError::SessionExpired(404))
    ));
    let _ = stop.send(());
    there.await.unwrap();
    assert_eq!(posted_here(&t), 1);
    // Closed for every thread: a request sent from a task that posts here is refused.
    let (stop, stopped) = oneshot::channel();
    let t3 = t.clone();
    let there = thread_of_its_own(
        true,
        true,
        move || async move {
            let rid = RequestId::Number(3);
            t3.send(Outbound {
                kind: OutKind::Request {
                    id: rid.clone(),
                    method: "tools/call".into(),
                },
                body: request_bytes(&rid, "tools/call", Some(&json!({}))),
                headers: Vec::new(),
                ack: None,
            })
        },
        stopped,
    );
    let _ = stop.send(());
    let (refused, _) = there.await.unwrap();
    assert!(
        matches!(refused, Err(TransportError::Closed(_))),
        "{refused:?}"
    );
    assert_eq!(posted_here(&t), 1);
    // No DELETE for a session the server ended.
    t.close();
    tokio::time::timeout(Duration::from_secs(5), t.wait_closed())
        .await
        .unwrap();
    assert_eq!(log.count("DELETE"), 0);
}

/// What a thread of its own holds when a transport closes between two of its POSTs.
struct Held {
    /// Its clients once `a` closed (waiting up to a second for the count to reach 0).
    after_close: usize,
    /// Its clients at the end, after it POSTed for `b`.
    at_end: usize,
    /// The test's thread's (the drivers' home) once `a` closed.
    home_after_close: usize,
}

/// Two transports to one server, their sessions open; a thread of its own (an actix arbiter
/// when `arbiter`, else a bare `LocalSet`) POSTs for `a`, waits until `a` has closed, counts its
/// clients, then POSTs for `b`.
async fn a_transport_closes_between_two_posts(arbiter: bool) -> Held {
    let (url, _) = serve(session_server(|_, _| None)).await;
    let (a, mut rx_a) = start(&url, fast(), vec![]);
    let (b, mut rx_b) = start(&url, fast(), vec![]);
    for (t, rx) in [(&a, &mut rx_a), (&b, &mut rx_b)] {
        open_session(t, rx).await;
    }
    let (closed_tx, closed_rx) = oneshot::channel::<()>();
    let (posted_tx, posted_rx) = oneshot::channel();
    let (stop, stopped) = oneshot::channel();
    let (a2, b2) = (a.clone(), b.clone());
    let there = thread_of_its_own(
        arbiter,
        true,
        move || async move {
            request(&a2, 2, "tools/call");
            let _ = posted_tx.send(());
            let _ = closed_rx.await;
            // An arbiter runs the driver's word between two of this task's polls.
            let mut held = clients::held_here();
            for _ in 0..100 {
                if held == 0 {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
                held = clients::held_here();
            }
            request(&b2, 2, "tools/call");
            held
        },
        stopped,
    );
    expect_result(next(&mut rx_a).await, 2);
    posted_rx.await.unwrap();
    a.close();
    tokio::time::timeout(Duration::from_secs(5), a.wait_closed())
        .await
        .unwrap();
    let home_after_close = clients::held_here();
    let _ = closed_tx.send(());
    expect_result(next(&mut rx_b).await, 2);
    let _ = stop.send(());
    let (after_close, at_end) = there.await.unwrap();
    assert_eq!((posted_here(&a), posted_here(&b)), (1, 1));
    Held {
        after_close,
        at_end,
        home_after_close,
    }
}

#[actix_rt::test]
async fn a_thread_drops_its_client_of_a_transport_whose_driver_ended() {
    let held = a_transport_closes_between_two_posts(true).await;
    assert_eq!(
        held.home_after_close, 1,
        "the drivers' thread dropped `a`'s, keeps `b`'s"
    );
    assert_eq!(
        held.after_close, 0,
        "the other thread dropped `a`'s client when told"
    );
    assert_eq!(held.at_end, 1, "and built one for `b`");
}

#[actix_rt::test]
async fn a_thread_on_no_arbiter_drops_the_clients_of_closed_transports_when_it_builds_one() {
    let held = a_transport_closes_between_two_posts(false).await;
    assert_eq!(
        held.after_close, 1,
        "no arbiter to tell: `a`'s client is still there"
    );
    assert_eq!(held.at_end, 1, "dropped when `b`'s was built");
}
