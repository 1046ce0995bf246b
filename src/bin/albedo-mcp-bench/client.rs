//! albedo's client library under load (`albedo-mcp-bench __client '<job JSON>'`), run as the
//! daemon runs one connection: `McpClient` on an actix arbiter thread (a single-threaded
//! runtime), over `StdioTransport` (behind the launcher) or `HttpTransport` (awc). The job
//! and the output are the same for the three clients (albedo, rmcp, the TypeScript SDK):
//! see `Job` in main.rs.

use albedo_mcp::client::{discovery, handshake, McpClient};
use albedo_mcp::transport::http::{HttpSpec, HttpTransport};
use albedo_mcp::transport::stdio::{StdioSpec, StdioTransport};
use albedo_mcp::transport::{tls, SharedTransport};
use serde_json::{json, Value};
use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::rc::Rc;
use std::time::{Duration, Instant};

pub fn cpu_us() -> u64 {
    let mut ts = nix::libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    unsafe { nix::libc::clock_gettime(nix::libc::CLOCK_PROCESS_CPUTIME_ID, &mut ts) };
    ts.tv_sec as u64 * 1_000_000 + ts.tv_nsec as u64 / 1_000
}

pub fn pct(sorted: &[u32], p: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)] as u64
}

fn text_bytes(r: &Value) -> u64 {
    r.get("content")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|c| c.get("text").and_then(Value::as_str))
                .map(|s| s.len() as u64)
                .sum()
        })
        .unwrap_or(0)
}

const CALL_TIMEOUT: Duration = Duration::from_secs(60);

async fn run_level(
    client: &McpClient,
    params: &Rc<Value>,
    concurrency: usize,
    until: Option<Instant>,
    calls: Option<u64>,
) -> (Vec<u32>, u64, u64) {
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
                        lat.borrow_mut()
                            .push(t.elapsed().as_micros().min(u32::MAX as u128) as u32);
                        bytes.set(bytes.get() + text_bytes(&r));
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
                    env.insert(k.to_owned(), v);
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
    if let Err(e) = discovery::list_all(&client, "tools/list", "tools", CALL_TIMEOUT).await {
        return json!({"error": format!("tools/list: {e}")});
    }
    let connect_ms = t0.elapsed().as_secs_f64() * 1000.0;
    let params = Rc::new(json!({
        "name": job["tool"].as_str().unwrap_or("echo"),
        "arguments": job["arguments"].clone(),
    }));
    let duration = Duration::from_millis(job["duration_ms"].as_u64().unwrap_or(1000));
    let warmup = Duration::from_millis(job["warmup_ms"].as_u64().unwrap_or(200));
    let calls = job["calls"].as_u64();
    let mut levels = Vec::new();
    for c in job["levels"].as_array().into_iter().flatten() {
        let c = c.as_u64().unwrap_or(1) as usize;
        if calls.is_none() {
            run_level(&client, &params, c, Some(Instant::now() + warmup), None).await;
        } else {
            run_level(&client, &params, 1, None, Some(1)).await;
        }
        let cpu0 = cpu_us();
        let t = Instant::now();
        let until = calls.is_none().then(|| Instant::now() + duration);
        let (mut lat, bytes, errors) = run_level(&client, &params, c, until, calls).await;
        let elapsed = t.elapsed().as_secs_f64();
        let cpu = cpu_us() - cpu0;
        lat.sort_unstable();
        levels.push(json!({
            "concurrency": c,
            "calls": lat.len(),
            "errors": errors,
            "elapsed_s": elapsed,
            "p50_us": pct(&lat, 0.50),
            "p99_us": pct(&lat, 0.99),
            "cpu_us": cpu,
            "result_bytes": bytes,
        }));
    }
    client.close();
    json!({"connect_ms": connect_ms, "levels": levels})
}
