//! The benchmark's own MCP servers, as cheap as can be so the client's cost dominates: a
//! stdio server (plain std, one thread, a write per batch of input) and an HTTP server (tokio
//! on one thread, HTTP/1.1 keep-alive, written by hand). Both speak 2026-07-28
//! (`server/discover`) and, for older clients, `initialize`.
//!
//! Tools: `echo {message}` returns the message; `big {bytes}` returns a text of that many
//! bytes (built once per size); `--tools N` adds filler tools up to N in all, each with a
//! description and a small schema, for catalogues of a realistic size. Over HTTP, any path
//! containing `sse` answers requests with an SSE stream (chunked), any other with JSON.

use serde::Deserialize;
use serde_json::value::RawValue;
use std::borrow::Cow;
use std::collections::HashMap;
use std::io::{BufRead, Write};
use std::time::Duration;

#[derive(Debug, Clone, Default)]
pub struct ServerOpts {
    pub tools: usize,
    pub start_delay_ms: u64,
    pub port_file: Option<String>,
}

impl ServerOpts {
    pub fn parse(args: &[String]) -> ServerOpts {
        let mut o = ServerOpts {
            tools: 2,
            ..Default::default()
        };
        let mut it = args.iter();
        while let Some(a) = it.next() {
            match a.as_str() {
                "--tools" => o.tools = it.next().and_then(|v| v.parse().ok()).unwrap_or(2),
                "--start-delay-ms" => {
                    o.start_delay_ms = it.next().and_then(|v| v.parse().ok()).unwrap_or(0)
                }
                "--port-file" => o.port_file = it.next().cloned(),
                // `--nonce X` only makes a configuration (and its fingerprint) distinct.
                "--nonce" => {
                    it.next();
                }
                _ => {}
            }
        }
        o
    }
}

/// What the server keeps between messages.
pub struct State {
    tools_result: Vec<u8>,
    big: HashMap<usize, bytes::Bytes>,
}

const DISCOVER: &[u8] = br#"{"resultType":"complete","supportedVersions":["2026-07-28"],"capabilities":{"tools":{}},"ttlMs":0,"cacheScope":"private","_meta":{"io.modelcontextprotocol/serverInfo":{"name":"albedo-bench","version":"1.0.0"}}}"#;
const INITIALIZE: &[u8] = br#"{"protocolVersion":"2025-11-25","capabilities":{"tools":{}},"serverInfo":{"name":"albedo-bench","version":"1.0.0"}}"#;

impl State {
    pub fn new(tools: usize) -> State {
        let mut list = vec![
            serde_json::json!({
                "name": "echo",
                "description": "Returns the message.",
                "inputSchema": {"type": "object", "properties": {"message": {"type": "string"}}, "required": ["message"]},
            }),
            serde_json::json!({
                "name": "big",
                "description": "Returns a text of the given size in bytes.",
                "inputSchema": {"type": "object", "properties": {"bytes": {"type": "integer"}}, "required": ["bytes"]},
            }),
        ];
        for i in list.len()..tools.max(2) {
            list.push(serde_json::json!({
                "name": format!("tool_{i:03}"),
                "description": format!("Filler tool number {i}: it answers like echo. It exists so that a catalogue has the size of a real server's."),
                "inputSchema": {"type": "object", "properties": {
                    "message": {"type": "string", "description": "What to send back."},
                    "count": {"type": "integer", "minimum": 0, "description": "Unused."}
                }, "required": ["message"]},
            }));
        }
        let tools_result =
            serde_json::to_vec(&serde_json::json!({"tools": list, "resultType": "complete", "ttlMs": 0, "cacheScope": "private"}))
                .unwrap_or_default();
        State {
            tools_result,
            big: HashMap::new(),
        }
    }
}

#[derive(Deserialize)]
struct Req<'a> {
    #[serde(borrow, default)]
    id: Option<&'a RawValue>,
    #[serde(borrow, default)]
    method: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    params: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct CallParams<'a> {
    #[serde(borrow)]
    name: Cow<'a, str>,
    #[serde(borrow, default)]
    arguments: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct Args<'a> {
    #[serde(borrow, default)]
    message: Option<&'a RawValue>,
    #[serde(default)]
    bytes: Option<usize>,
}

/// What [`handle`] answered.
pub enum Answer {
    /// Nothing (a notification).
    None,
    /// The response is in `out`.
    Inline,
    /// The response is `out[..at]`, then `size` bytes of the big text ([`State::big_text`]),
    /// then `out[at..]`: the text is written from where it is kept, never copied.
    Big { at: usize, size: usize },
}

impl State {
    pub fn big_text(&mut self, n: usize) -> bytes::Bytes {
        self.big
            .entry(n)
            .or_insert_with(|| bytes::Bytes::from(vec![b'x'; n]))
            .clone()
    }
}

/// Handle one message; appends the response (no newline) to `out`.
pub fn handle(state: &mut State, msg: &[u8], out: &mut Vec<u8>) -> Answer {
    let Ok(req) = serde_json::from_slice::<Req>(msg) else {
        out.extend_from_slice(
            br#"{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"Parse error"}}"#,
        );
        return Answer::Inline;
    };
    let (Some(id), Some(method)) = (req.id, req.method) else {
        return Answer::None; // a notification, or a response to nothing we asked
    };
    out.extend_from_slice(br#"{"jsonrpc":"2.0","id":"#);
    out.extend_from_slice(id.get().as_bytes());
    match method.as_ref() {
        "server/discover" => result(out, DISCOVER),
        "initialize" => result(out, INITIALIZE),
        "ping" => result(out, b"{}"),
        "tools/list" => {
            out.extend_from_slice(br#","result":"#);
            out.extend_from_slice(&state.tools_result);
            out.push(b'}');
        }
        "tools/call" => {
            let p = req
                .params
                .and_then(|p| serde_json::from_str::<CallParams>(p.get()).ok());
            let Some(p) = p else {
                error(out, -32602, "tools/call needs a name");
                return Answer::Inline;
            };
            let args = p
                .arguments
                .and_then(|a| serde_json::from_str::<Args>(a.get()).ok());
            out.extend_from_slice(br#","result":{"content":[{"type":"text","text":"#);
            if p.name == "big" {
                let size = args.and_then(|a| a.bytes).unwrap_or(1024).min(64 << 20);
                state.big_text(size);
                out.push(b'"');
                let at = out.len();
                out.push(b'"');
                out.extend_from_slice(br#"}],"isError":false,"resultType":"complete"}}"#);
                return Answer::Big { at, size };
            } else {
                match args.and_then(|a| a.message) {
                    Some(m) if m.get().starts_with('"') => {
                        out.extend_from_slice(m.get().as_bytes())
                    }
                    _ => out.extend_from_slice(br#""ok""#),
                }
            }
            out.extend_from_slice(br#"}],"isError":false,"resultType":"complete"}}"#);
        }
        _ => error(out, -32601, "Method not found"),
    }
    Answer::Inline
}

fn result(out: &mut Vec<u8>, r: &[u8]) {
    out.extend_from_slice(br#","result":"#);
    out.extend_from_slice(r);
    out.push(b'}');
}

fn error(out: &mut Vec<u8>, code: i32, message: &str) {
    out.extend_from_slice(
        format!(r#","error":{{"code":{code},"message":"{message}"}}}}"#).as_bytes(),
    );
}

/// The stdio server: one line in, one line out, one write (and flush) per batch of input.
pub fn run_stdio(opts: &ServerOpts) -> i32 {
    if opts.start_delay_ms > 0 {
        std::thread::sleep(Duration::from_millis(opts.start_delay_ms));
    }
    let mut state = State::new(opts.tools);
    let stdin = std::io::stdin();
    let mut reader = std::io::BufReader::with_capacity(256 * 1024, stdin.lock());
    let stdout = std::io::stdout();
    let mut stdout = stdout.lock();
    let mut line = Vec::with_capacity(4096);
    let mut out = Vec::with_capacity(64 * 1024);
    loop {
        line.clear();
        match reader.read_until(b'\n', &mut line) {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
        let msg = line.strip_suffix(b"\n").unwrap_or(&line);
        if msg.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        match handle(&mut state, msg, &mut out) {
            Answer::None => {}
            Answer::Inline => out.push(b'\n'),
            Answer::Big { at, size } => {
                out.push(b'\n');
                let text = state.big_text(size);
                if stdout.write_all(&out[..at]).is_err()
                    || stdout.write_all(&text).is_err()
                    || stdout.write_all(&out[at..]).is_err()
                    || stdout.flush().is_err()
                {
                    break;
                }
                out.clear();
                continue;
            }
        }
        if !out.is_empty() && (reader.buffer().is_empty() || out.len() > 1 << 20) {
            if stdout.write_all(&out).is_err() || stdout.flush().is_err() {
                break;
            }
            out.clear();
            if out.capacity() > 1 << 20 {
                out = Vec::with_capacity(64 * 1024);
            }
        }
    }
    0
}

/// The HTTP server at `http://127.0.0.1:PORT/<any path>`, on one thread.
pub fn run_http(opts: &ServerOpts) -> i32 {
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("bench http server: {e}");
            return 1;
        }
    };
    let local = tokio::task::LocalSet::new();
    local.block_on(&rt, async move {
        let listener = match tokio::net::TcpListener::bind("127.0.0.1:0").await {
            Ok(l) => l,
            Err(e) => {
                eprintln!("bench http server: {e}");
                return 1;
            }
        };
        let port = listener.local_addr().map(|a| a.port()).unwrap_or(0);
        match &opts.port_file {
            Some(f) => {
                let _ = announce_port(f, port);
            }
            None => println!("{port}"),
        }
        let state = std::rc::Rc::new(std::cell::RefCell::new(State::new(opts.tools)));
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            let st = state.clone();
            tokio::task::spawn_local(async move {
                let _ = http_conn(stream, st).await;
            });
        }
    })
}

/// Write `port` to `file` for the bench to read, whole or not at all (a temporary file
/// renamed into place).
pub(crate) fn announce_port(file: &str, port: u16) -> std::io::Result<()> {
    let tmp = format!("{file}.tmp");
    std::fs::write(&tmp, format!("{port}\n"))?;
    std::fs::rename(&tmp, file)
}

/// Where `needle` first occurs in `hay`.
pub(crate) fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// What the bench's HTTP servers (this one and the relay) read of a request's head: its
/// method and path, its `Content-Length` (0 when absent or unreadable) and whether it asks
/// to close the connection.
pub(crate) struct Head<'a> {
    pub method: &'a str,
    pub path: &'a str,
    pub len: usize,
    pub close: bool,
}

impl<'a> Head<'a> {
    /// `head`: the request line and header lines, up to the blank line.
    pub(crate) fn parse(head: &'a str) -> Head<'a> {
        let mut lines = head.split("\r\n");
        let mut rl = lines.next().unwrap_or("").split(' ');
        let method = rl.next().unwrap_or("");
        let path = rl.next().unwrap_or("");
        let (mut len, mut close) = (0usize, false);
        for l in lines {
            if let Some((k, v)) = l.split_once(':') {
                let v = v.trim();
                if k.eq_ignore_ascii_case("content-length") {
                    len = v.parse().unwrap_or(0);
                } else if k.eq_ignore_ascii_case("connection") && v.eq_ignore_ascii_case("close") {
                    close = true;
                }
            }
        }
        Head {
            method,
            path,
            len,
            close,
        }
    }
}

async fn http_conn(
    mut stream: tokio::net::TcpStream,
    state: std::rc::Rc<std::cell::RefCell<State>>,
) -> std::io::Result<()> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let _ = stream.set_nodelay(true);
    let mut buf: Vec<u8> = Vec::with_capacity(16 * 1024);
    let mut start = 0usize;
    let mut out: Vec<u8> = Vec::with_capacity(16 * 1024);
    let mut body_out: Vec<u8> = Vec::with_capacity(4096);
    loop {
        // The head.
        let head_end = loop {
            if let Some(p) = find(&buf[start..], b"\r\n\r\n") {
                break start + p + 4;
            }
            if start > 0 {
                buf.drain(..start);
                start = 0;
            }
            let mut chunk = [0u8; 16 * 1024];
            let n = stream.read(&mut chunk).await?;
            if n == 0 {
                return Ok(());
            }
            buf.extend_from_slice(&chunk[..n]);
        };
        let head = Head::parse(std::str::from_utf8(&buf[start..head_end]).unwrap_or(""));
        let (method, path) = (head.method.to_owned(), head.path.to_owned());
        let (len, close) = (head.len, head.close);
        // The body.
        while buf.len() < head_end + len {
            let mut chunk = vec![0u8; (head_end + len - buf.len()).min(1 << 20)];
            let n = stream.read(&mut chunk).await?;
            if n == 0 {
                return Ok(());
            }
            buf.extend_from_slice(&chunk[..n]);
        }
        let body = &buf[head_end..head_end + len];
        out.clear();
        if method != "POST" {
            out.extend_from_slice(
                b"HTTP/1.1 405 Method Not Allowed\r\nAllow: POST\r\nContent-Length: 0\r\n\r\n",
            );
        } else {
            body_out.clear();
            let answer = handle(&mut state.borrow_mut(), body, &mut body_out);
            let (at, big) = match answer {
                Answer::Big { at, size } => (at, size),
                _ => (body_out.len(), 0),
            };
            if matches!(answer, Answer::None) {
                out.extend_from_slice(b"HTTP/1.1 202 Accepted\r\nContent-Length: 0\r\n\r\n");
            } else if path.contains("sse") {
                // One event in one chunk, then the end of the stream.
                let ev_len = b"event: message\ndata: ".len() + body_out.len() + big + 2;
                out.extend_from_slice(
                    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\nTransfer-Encoding: chunked\r\n\r\n",
                );
                out.extend_from_slice(format!("{ev_len:x}\r\n").as_bytes());
                out.extend_from_slice(b"event: message\ndata: ");
                let split = out.len() + at;
                out.extend_from_slice(&body_out);
                out.extend_from_slice(b"\n\n\r\n0\r\n\r\n");
                write_split(&mut stream, &out, split, &state, big).await?;
            } else {
                out.extend_from_slice(
                    format!(
                        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
                        body_out.len() + big
                    )
                    .as_bytes(),
                );
                let split = out.len() + at;
                out.extend_from_slice(&body_out);
                write_split(&mut stream, &out, split, &state, big).await?;
            }
            if body_out.capacity() > 1 << 20 {
                body_out = Vec::with_capacity(4096);
            }
        }
        if method != "POST" || out.starts_with(b"HTTP/1.1 202") {
            stream.write_all(&out).await?;
        }
        if out.capacity() > 1 << 20 {
            out = Vec::with_capacity(16 * 1024);
        }
        start = head_end + len;
        if start == buf.len() {
            buf.clear();
            start = 0;
            if buf.capacity() > 1 << 20 {
                buf = Vec::with_capacity(16 * 1024);
            }
        }
        if close {
            return Ok(());
        }
    }
}

/// Write `out`, with `big` bytes of the big text inserted at `split` (none when 0).
async fn write_split(
    stream: &mut tokio::net::TcpStream,
    out: &[u8],
    split: usize,
    state: &std::rc::Rc<std::cell::RefCell<State>>,
    big: usize,
) -> std::io::Result<()> {
    use tokio::io::AsyncWriteExt;
    if big == 0 {
        return stream.write_all(out).await;
    }
    stream.write_all(&out[..split]).await?;
    let text = state.borrow_mut().big_text(big);
    stream.write_all(&text).await?;
    stream.write_all(&out[split..]).await
}
