//! The floor (`albedo-mcp-bench __floor-client '<job JSON>'`): the same tool calls, one at a
//! time, by a blocking loop with no MCP library and no runtime: one `write` of a request (the
//! same bytes every time but its id, in a reused buffer), then blocking reads until its
//! answer. For stdio, the server is spawned directly (albedo's launcher does not copy the
//! pipes, so the path is the same); for HTTP, one keep-alive TCP connection with `TCP_NODELAY`
//! and its own blocking HTTP/1.1 reader (the bench's `httpc` is async: it needs a runtime).
//!
//! What it measures is what this machine needs for one round trip with no client at all (two
//! process wake-ups for stdio), so that a ratio at one call in flight can be read against the
//! best any client could do here. Only concurrency 1 is measured; other levels are skipped.

use crate::measure::{self, cpu_us};
use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Read, Write};
use std::time::{Duration, Instant};

pub fn run(job_text: &str) -> i32 {
    let Some(job) = crate::client::parse_job(job_text, "floor") else {
        return 2;
    };
    let out = match drive(&job) {
        Ok(v) => v,
        Err(e) => json!({"error": e}),
    };
    println!("{out}");
    i32::from(out.get("error").is_some())
}

trait RoundTrip {
    /// Send one request and wait for the line or body that answers it.
    fn call(&mut self, request: &[u8]) -> Result<(), String>;
    /// Send a notification (no answer is read).
    fn notify(&mut self, message: &[u8]) -> Result<(), String>;
}

struct Stdio {
    child: std::process::Child,
    input: std::process::ChildStdin,
    output: BufReader<std::process::ChildStdout>,
    line: Vec<u8>,
}

impl RoundTrip for Stdio {
    fn call(&mut self, request: &[u8]) -> Result<(), String> {
        self.input.write_all(request).map_err(|e| e.to_string())?;
        self.line.clear();
        match self.output.read_until(b'\n', &mut self.line) {
            Ok(0) => Err("the server closed its output".into()),
            Ok(_) => Ok(()),
            Err(e) => Err(e.to_string()),
        }
    }

    fn notify(&mut self, message: &[u8]) -> Result<(), String> {
        self.input.write_all(message).map_err(|e| e.to_string())
    }
}

impl Drop for Stdio {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

struct Http {
    stream: std::net::TcpStream,
    head: Vec<u8>,
    buf: Vec<u8>,
}

impl Http {
    fn post(&mut self, body: &[u8]) -> Result<(), String> {
        let mut req = self.head.clone();
        req.extend_from_slice(format!("Content-Length: {}\r\n\r\n", body.len()).as_bytes());
        req.extend_from_slice(body);
        self.stream.write_all(&req).map_err(|e| e.to_string())?;
        // Read the head, then the body by its length.
        self.buf.clear();
        let mut chunk = [0u8; 16 * 1024];
        let (head_end, len) = loop {
            let n = self.stream.read(&mut chunk).map_err(|e| e.to_string())?;
            if n == 0 {
                return Err("the server closed the connection".into());
            }
            self.buf.extend_from_slice(&chunk[..n]);
            if let Some(p) = self.buf.windows(4).position(|w| w == b"\r\n\r\n") {
                let head = String::from_utf8_lossy(&self.buf[..p]).to_ascii_lowercase();
                let len = head
                    .lines()
                    .find_map(|l| l.strip_prefix("content-length:"))
                    .and_then(|v| v.trim().parse::<usize>().ok())
                    .ok_or("the floor client reads Content-Length answers only")?;
                break (p + 4, len);
            }
        };
        while self.buf.len() < head_end + len {
            let n = self.stream.read(&mut chunk).map_err(|e| e.to_string())?;
            if n == 0 {
                return Err("the server closed the connection".into());
            }
            self.buf.extend_from_slice(&chunk[..n]);
        }
        Ok(())
    }
}

impl RoundTrip for Http {
    fn call(&mut self, request: &[u8]) -> Result<(), String> {
        self.post(request)
    }

    fn notify(&mut self, message: &[u8]) -> Result<(), String> {
        self.post(message)
    }
}

fn connect(job: &Value) -> Result<Box<dyn RoundTrip>, String> {
    let newline = |s: &str| format!("{s}\n");
    match job["transport"].as_str() {
        Some("stdio") => {
            let mut child = std::process::Command::new(job["command"].as_str().unwrap_or(""))
                .args(
                    job["args"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .filter_map(Value::as_str),
                )
                .stdin(std::process::Stdio::piped())
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::null())
                .spawn()
                .map_err(|e| format!("cannot start the server: {e}"))?;
            let (Some(input), Some(output)) = (child.stdin.take(), child.stdout.take()) else {
                return Err("no pipes".into());
            };
            let mut s = Stdio {
                child,
                input,
                output: BufReader::with_capacity(64 * 1024, output),
                line: Vec::with_capacity(4096),
            };
            s.call(newline(INITIALIZE).as_bytes())?;
            s.notify(newline(INITIALIZED).as_bytes())?;
            Ok(Box::new(s))
        }
        _ => {
            let url =
                url::Url::parse(job["url"].as_str().unwrap_or("")).map_err(|e| e.to_string())?;
            let addr = url
                .socket_addrs(|| Some(80))
                .map_err(|e| e.to_string())?
                .into_iter()
                .next()
                .ok_or("no address")?;
            let stream = std::net::TcpStream::connect(addr).map_err(|e| e.to_string())?;
            stream.set_nodelay(true).map_err(|e| e.to_string())?;
            let head = format!(
                "POST {} HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nMCP-Protocol-Version: 2025-11-25\r\n",
                url.path(),
                url.host_str().unwrap_or("127.0.0.1")
            )
            .into_bytes();
            let mut h = Http {
                stream,
                head,
                buf: Vec::with_capacity(16 * 1024),
            };
            h.call(INITIALIZE.as_bytes())?;
            h.notify(INITIALIZED.as_bytes())?;
            Ok(Box::new(h))
        }
    }
}

const INITIALIZE: &str = r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"albedo-bench-floor","version":"1.0.0"}}}"#;
const INITIALIZED: &str = r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#;

fn drive(job: &Value) -> Result<Value, String> {
    let t0 = Instant::now();
    let mut conn = connect(job)?;
    let connect_ms = t0.elapsed().as_secs_f64() * 1000.0;
    let stdio = job["transport"].as_str() == Some("stdio");
    let params = json!({
        "name": job["tool"].as_str().unwrap_or("echo"),
        "arguments": job["arguments"].clone(),
    });
    // A request is the same bytes every time but for its id, written into a reused buffer:
    // the floor does no other work per call.
    let rest = format!(r#","method":"tools/call","params":{params}}}"#);
    let mut id = 1u64;
    let mut req = Vec::with_capacity(rest.len() + 64);
    let mut next = move |req: &mut Vec<u8>| {
        id += 1;
        req.clear();
        let _ = write!(req, r#"{{"jsonrpc":"2.0","id":{id}{rest}"#);
        if stdio {
            req.push(b'\n');
        }
    };
    let duration = Duration::from_millis(job["duration_ms"].as_u64().unwrap_or(1000));
    let warmup = Duration::from_millis(job["warmup_ms"].as_u64().unwrap_or(200));
    let fixed = job["calls"].as_u64();
    let mut levels = Vec::new();
    for c in job["levels"].as_array().into_iter().flatten() {
        if c.as_u64() != Some(1) {
            continue;
        }
        let until = Instant::now() + warmup;
        while fixed.is_none() && Instant::now() < until {
            next(&mut req);
            conn.call(&req)?;
        }
        let mut lat = Vec::with_capacity(1 << 20);
        let cpu0 = cpu_us();
        let t = Instant::now();
        let until = t + duration;
        loop {
            match fixed {
                Some(n) if lat.len() as u64 >= n => break,
                None if Instant::now() >= until => break,
                _ => {}
            }
            next(&mut req);
            let s = Instant::now();
            conn.call(&req)?;
            lat.push(measure::micros(s));
        }
        let elapsed = t.elapsed().as_secs_f64();
        levels.push(measure::record(1, lat, 0, 0, elapsed, cpu_us() - cpu0));
    }
    Ok(json!({"connect_ms": connect_ms, "levels": levels}))
}
