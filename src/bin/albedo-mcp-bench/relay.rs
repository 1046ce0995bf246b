//! The relay (`albedo-mcp-bench __relay '<job JSON>'`): the least a daemon could be, to read
//! the API's figures against. One thread (a single-threaded runtime, as albedo's client alone
//! runs), a minimal HTTP/1.1 keep-alive server written by hand (with the bench HTTP server's
//! head parser, `server::Head`; `Content-Length` bodies only), and albedo's client on the job's stdio servers: a POST to
//! `/<k>` with the API's call body (`{"arguments": {...}}`) sends `tools/call` of the job's tool
//! to server `k` with the arguments as their text, and answers `{"result": ...}` with the
//! result as its text. No token, no Host check, no session, no router, no second thread: what
//! an HTTP API in front of albedo's client costs at the least on this machine, with the API's
//! load generator and schedules in front of it. Its figures are measurements beside the
//! API's, never targets.
//!
//! Owns: that process. Must not touch: the records (the bench drives it with its load
//! generator, like the HTTP floor).

use crate::client::{connect, parse_job, Connected};
use crate::measure;
use crate::server::{announce_port, find, Head};
use albedo_mcp::client::McpClient;
use albedo_mcp::protocol::params::Params;
use serde_json::value::RawValue;
use serde_json::Value;
use std::rc::Rc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const CALL_TIMEOUT: Duration = Duration::from_secs(60);

pub fn run(job_text: &str) -> i32 {
    let Some(job) = parse_job(job_text, "relay") else {
        return 2;
    };
    let sys = actix_rt::System::new();
    match sys.block_on(serve(job)) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("bench relay: {e}");
            1
        }
    }
}

async fn serve(job: Value) -> Result<(), String> {
    let plan = measure::Many::from_job(&job);
    let (servers, _, _) = plan
        .connect_all(&job, async |server| Ok((connect(&server).await?, 0)))
        .await?;
    let (clients, _events): (Vec<McpClient>, Vec<_>) = servers
        .into_iter()
        .map(|Connected { client, events }| (client, events))
        .unzip();
    let clients = Rc::new(clients);
    let tool: Rc<str> = job["tool"].as_str().unwrap_or("echo").into();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .map_err(|e| e.to_string())?;
    let port = listener.local_addr().map_err(|e| e.to_string())?.port();
    let pf = job["port_file"].as_str().ok_or("no port_file")?;
    announce_port(pf, port).map_err(|e| e.to_string())?;
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        let (clients, tool) = (clients.clone(), tool.clone());
        tokio::task::spawn_local(async move {
            let _ = http_conn(stream, &clients, &tool).await;
        });
    }
}

#[derive(serde::Deserialize)]
struct CallBody<'a> {
    #[serde(borrow)]
    arguments: &'a RawValue,
}

/// One keep-alive connection: a request's head and body read into `buf`, its call made, its
/// answer written in one write.
async fn http_conn(
    mut stream: tokio::net::TcpStream,
    clients: &[McpClient],
    tool: &str,
) -> std::io::Result<()> {
    let _ = stream.set_nodelay(true);
    let mut buf: Vec<u8> = Vec::with_capacity(16 * 1024);
    let mut out: Vec<u8> = Vec::with_capacity(4096);
    loop {
        let head_end = loop {
            if let Some(p) = find(&buf, b"\r\n\r\n") {
                break p + 4;
            }
            if stream.read_buf(&mut buf).await? == 0 {
                return Ok(());
            }
        };
        let head = Head::parse(std::str::from_utf8(&buf[..head_end]).unwrap_or(""));
        let server = head.path.trim_start_matches('/').parse::<usize>().ok();
        let len = head.len;
        while buf.len() < head_end + len {
            if stream.read_buf(&mut buf).await? == 0 {
                return Ok(());
            }
        }
        let body = &buf[head_end..head_end + len];
        out.clear();
        let answer = match (
            server.and_then(|k| clients.get(k)),
            serde_json::from_slice::<CallBody>(body),
        ) {
            (Some(client), Ok(call)) => client
                .request_text_params(
                    "tools/call",
                    Some(Params::Named {
                        name: tool,
                        arguments: call.arguments,
                    }),
                    CALL_TIMEOUT,
                    &[],
                )
                .await
                .map_err(|e| e.to_string()),
            (None, _) => Err("no such server".into()),
            (_, Err(e)) => Err(e.to_string()),
        };
        match answer {
            Ok(result) => {
                let text = result.as_bytes();
                let len = text.len() + r#"{"result":}"#.len();
                out.extend_from_slice(
                    format!("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {len}\r\n\r\n{{\"result\":").as_bytes(),
                );
                out.extend_from_slice(text);
                out.push(b'}');
            }
            Err(e) => {
                let body = serde_json::json!({ "error": e }).to_string();
                out.extend_from_slice(
                    format!(
                        "HTTP/1.1 502 Bad Gateway\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
                        body.len()
                    )
                    .as_bytes(),
                );
            }
        }
        stream.write_all(&out).await?;
        buf.drain(..head_end + len);
    }
}

impl crate::Bench {
    /// The relay on `servers` of the bench's stdio servers (dialled as many at a time as the
    /// daemon dials by default): its process and address, once it listens.
    pub(crate) fn start_relay(&mut self, servers: usize) -> Option<(crate::Proc, String)> {
        let pf = self.scratch.0.join(format!("relay-port-{servers}"));
        let _ = std::fs::remove_file(&pf);
        let mut job = self.stdio_target(&[]);
        job["tool"] = serde_json::json!("echo");
        job["many"] = self.many_plan(servers).to_json();
        job["port_file"] = serde_json::json!(pf);
        let started = crate::Proc::quiet(
            std::process::Command::new(&self.exe)
                .arg("__relay")
                .arg(job.to_string()),
        );
        let port = started.as_ref().and_then(|_| {
            crate::procs::wait_file(&pf, Duration::from_secs(60 + servers as u64 / 10))
                .and_then(|s| s.trim().parse::<u16>().ok())
        });
        match (started, port) {
            (Some(p), Some(port)) => Some((p, format!("127.0.0.1:{port}"))),
            _ => {
                self.fail(format!(
                    "the relay on {servers} stdio servers did not start"
                ));
                None
            }
        }
    }
}
