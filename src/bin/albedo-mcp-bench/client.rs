//! albedo's client library under load (`albedo-mcp-bench __client '<job JSON>'`), run as the
//! daemon runs one connection: `McpClient` on an actix arbiter thread (a single-threaded
//! runtime), over `StdioTransport` (behind the launcher) or `HttpTransport` (awc). The job
//! and the output are the same for the three clients (albedo, rmcp, the TypeScript SDK):
//! see `Job` in main.rs.

use crate::measure::{self, LevelRun};
use albedo_mcp::client::{discovery, handshake, McpClient};
use albedo_mcp::store::settings::Secret;
use albedo_mcp::transport::http::{HttpSpec, HttpTransport};
use albedo_mcp::transport::stdio::{StdioSpec, StdioTransport};
use albedo_mcp::transport::{tls, SharedTransport};
use serde_json::{json, Value};
use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::rc::Rc;
use std::time::{Duration, Instant};

const CALL_TIMEOUT: Duration = Duration::from_secs(60);

async fn run_level(
    client: &McpClient,
    params: &Rc<Value>,
    concurrency: usize,
    until: Option<Instant>,
    calls: Option<u64>,
) -> LevelRun {
    let lat = Rc::new(RefCell::new(Vec::<u32>::new()));
    let bytes = Rc::new(Cell::new(0u64));
    let errors = Rc::new(Cell::new(0u64));
    let started = Rc::new(Cell::new(0u64));
    let mut handles = Vec::new();
    for _ in 0..concurrency {
        let (client, params, lat, bytes, errors, started) = (
            client.clone(),
            params.clone(),
            lat.clone(),
            bytes.clone(),
            errors.clone(),
            started.clone(),
        );
        handles.push(tokio::task::spawn_local(async move {
            loop {
                if until.is_some_and(|u| Instant::now() >= u) {
                    break;
                }
                if let Some(n) = calls {
                    let s = started.get();
                    started.set(s + 1);
                    if s >= n {
                        break;
                    }
                }
                let t = Instant::now();
                match client
                    .request("tools/call", Some((*params).clone()), CALL_TIMEOUT)
                    .await
                {
                    Ok(r) if r.get("isError") != Some(&Value::Bool(true)) => {
                        lat.borrow_mut().push(measure::micros(t));
                        bytes.set(bytes.get() + measure::text_bytes(&r["content"]));
                    }
                    other => {
                        if errors.get() == 0 {
                            eprintln!("albedo client: call failed: {other:?}");
                        }
                        errors.set(errors.get() + 1);
                    }
                }
            }
        }));
    }
    for h in handles {
        let _ = h.await;
    }
    let v = std::mem::take(&mut *lat.borrow_mut());
    (v, bytes.get(), errors.get())
}

/// The job a client mode was given, or why it is unusable (said on stderr).
pub fn parse_job(job_text: &str, who: &str) -> Option<Value> {
    serde_json::from_str(job_text)
        .map_err(|e| eprintln!("{who} client: bad job: {e}"))
        .ok()
}

pub fn run(job_text: &str) -> i32 {
    let Some(job) = parse_job(job_text, "albedo") else {
        return 2;
    };
    let sys = actix_rt::System::new();
    let out = sys.block_on(async move { drive(job).await });
    println!("{out}");
    if out.get("error").is_some() {
        1
    } else {
        0
    }
}

async fn drive(job: Value) -> Value {
    let t0 = Instant::now();
    let (client, sink, _events) = McpClient::new();
    let transport: Result<SharedTransport, String> = match job["transport"].as_str() {
        Some("stdio") => {
            let mut env = BTreeMap::new();
            for k in ["HOME", "PATH", "TMPDIR"] {
                if let Ok(v) = std::env::var(k) {
                    env.insert(k.to_owned(), Secret::new(v));
                }
            }
            let spec = StdioSpec {
                launcher: std::env::current_exe().unwrap_or_default(),
                command: job["command"].as_str().unwrap_or("").to_owned(),
                args: job["args"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|a| a.as_str().map(str::to_owned))
                    .collect(),
                cwd: None,
                env,
            };
            StdioTransport::spawn(&spec, sink)
                .map(|t| t as SharedTransport)
                .map_err(|e| e.to_string())
        }
        _ => {
            let url = url::Url::parse(job["url"].as_str().unwrap_or("")).map_err(|e| e.to_string());
            match (url, tls::client_config(&[])) {
                (Ok(url), Ok(tls)) => HttpTransport::start(
                    HttpSpec {
                        url,
                        headers: Vec::new(),
                        tls,
                    },
                    sink,
                )
                .map(|t| t as SharedTransport)
                .map_err(|e| e.to_string()),
                (Err(e), _) => Err(e),
                (_, Err(e)) => Err(e.to_string()),
            }
        }
    };
    let transport = match transport {
        Ok(t) => t,
        Err(e) => return json!({"error": format!("connect: {e}")}),
    };
    client.attach(transport);
    if let Err(e) = handshake::handshake(&client, Duration::from_secs(30)).await {
        return json!({"error": format!("connect: {e}")});
    }
    if let Err(e) = discovery::list_all(
        &client,
        "tools/list",
        "tools",
        &discovery::Budget::new(CALL_TIMEOUT),
    )
    .await
    {
        return json!({"error": format!("tools/list: {e}")});
    }
    let connect_ms = t0.elapsed().as_secs_f64() * 1000.0;
    let params = Rc::new(json!({
        "name": job["tool"].as_str().unwrap_or("echo"),
        "arguments": job["arguments"].clone(),
    }));
    let levels = measure::levels(&job, |c, until, calls| {
        run_level(&client, &params, c, until, calls)
    })
    .await;
    client.close();
    json!({"connect_ms": connect_ms, "levels": levels})
}
