//! The rmcp 3.x client under the same load as albedo's (see `albedo-mcp-bench`).
//!
//! Usage: `albedo-bench-rmcp-client '<job JSON>'`; prints one JSON line with the results.
//! The job: `{"transport": "stdio", "command": ..., "args": [...]}` or
//! `{"transport": "http", "url": ..., "pooled": bool}`, and `tool`, `arguments`, `levels`
//! (calls in flight), `duration_ms` and `warmup_ms` (time-boxed) or `calls` (a fixed count).
//! The client runs as rmcp's examples run it: `#[tokio::main]` (multi-threaded), `()` as
//! handler, `ClientLifecycleMode::Auto` preferring 2026-07-28. Over HTTP the default is
//! rmcp's own `from_uri` client (no idle connection pooling); `pooled` uses a pooled
//! reqwest client and lets 256 POSTs run at once. A job with `many` (see `measure::Many`)
//! connects that many servers, `dials_at_once` at a time, calls round them at one level, and
//! runs the agent fleet over them on the bench's own schedule (`schedule.rs`).

// The bench's own measurement and records, so that rmcp is measured exactly as albedo is.
#[path = "../../../src/bin/albedo-mcp-bench/measure.rs"]
mod measure;
// The agent fleet's schedule, the one albedo's client and the API's load generator follow.
#[path = "../../../src/bin/albedo-mcp-bench/schedule.rs"]
mod schedule;
/// What `measure` finds as `crate::libc` (the bench itself has it from nix).
mod libc {
    pub use ::libc::*;
}

use rmcp::model::{CallToolRequestParams, ProtocolVersion};
use rmcp::service::{ClientLifecycleMode, ClientServiceExt, Peer, RoleClient, RunningService};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use serde_json::{json, Value};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

struct Load {
    tool: String,
    arguments: serde_json::Map<String, Value>,
}

async fn one(peer: &Peer<RoleClient>, load: &Load) -> Result<u64, String> {
    let params =
        CallToolRequestParams::new(load.tool.clone()).with_arguments(load.arguments.clone());
    let r = peer.call_tool(params).await.map_err(|e| e.to_string())?;
    if r.is_error == Some(true) {
        return Err("the tool answered isError".into());
    }
    Ok(measure::text_bytes(
        &serde_json::to_value(&r.content).unwrap_or(Value::Null),
    ))
}

/// Run `concurrency` loops until `until` (or until `calls` calls are done), over `peers`: loop
/// `w` calls `peers[w]`, then `peers[w + concurrency]`, and so on round the list, as the API's
/// load generator walks its paths.
async fn run_level(
    peers: &Arc<Vec<Peer<RoleClient>>>,
    load: &Arc<Load>,
    concurrency: usize,
    until: Option<Instant>,
    calls: Option<u64>,
) -> measure::LevelRun {
    let lat = Arc::new(Mutex::new(Vec::<u32>::new()));
    let bytes = Arc::new(AtomicU64::new(0));
    let errors = Arc::new(AtomicU64::new(0));
    let started = Arc::new(AtomicU64::new(0));
    let mut handles = Vec::new();
    for w in 0..concurrency {
        let (peers, load, lat, bytes, errors, started) = (
            peers.clone(),
            load.clone(),
            lat.clone(),
            bytes.clone(),
            errors.clone(),
            started.clone(),
        );
        handles.push(tokio::spawn(async move {
            let mut mine = Vec::new();
            let mut i = w;
            loop {
                if let Some(u) = until {
                    if Instant::now() >= u {
                        break;
                    }
                }
                if let Some(n) = calls {
                    if started.fetch_add(1, Ordering::Relaxed) >= n {
                        break;
                    }
                }
                let peer = &peers[i % peers.len().max(1)];
                i += concurrency;
                let t = Instant::now();
                match one(peer, &load).await {
                    Ok(b) => {
                        mine.push(measure::micros(t));
                        bytes.fetch_add(b, Ordering::Relaxed);
                    }
                    Err(e) => {
                        if errors.fetch_add(1, Ordering::Relaxed) == 0 {
                            eprintln!("rmcp client: call failed: {e}");
                        }
                    }
                }
            }
            lat.lock().unwrap().extend(mine);
        }));
    }
    for h in handles {
        let _ = h.await;
    }
    let v = std::mem::take(&mut *lat.lock().unwrap());
    (
        v,
        bytes.load(Ordering::Relaxed),
        errors.load(Ordering::Relaxed),
    )
}

type Service = RunningService<RoleClient, ()>;

/// Connect to the job's server and list its tools: the service and how many tools it has.
async fn connect(job: &Value) -> Result<(Service, usize), String> {
    let lifecycle = ClientLifecycleMode::Auto {
        preferred_versions: vec![ProtocolVersion::V_2026_07_28],
        legacy_version: None,
    };
    let service = match job["transport"].as_str() {
        Some("stdio") => {
            let mut cmd = tokio::process::Command::new(job["command"].as_str().unwrap_or(""));
            for a in job["args"].as_array().into_iter().flatten() {
                cmd.arg(a.as_str().unwrap_or(""));
            }
            cmd.stderr(std::process::Stdio::null());
            let t = TokioChildProcess::new(cmd).map_err(|e| format!("spawn the server: {e}"))?;
            ().serve_with_lifecycle(t, lifecycle).await
        }
        _ => {
            let url = job["url"].as_str().unwrap_or("").to_owned();
            let t = if job["pooled"].as_bool() == Some(true) {
                let mut cfg = StreamableHttpClientTransportConfig::with_uri(url);
                cfg.max_concurrent_requests = 256;
                StreamableHttpClientTransport::with_client(reqwest::Client::new(), cfg)
            } else {
                StreamableHttpClientTransport::from_uri(url)
            };
            ().serve_with_lifecycle(t, lifecycle).await
        }
    };
    let service = service.map_err(|e| format!("connect: {e}"))?;
    let tools = service
        .peer()
        .list_all_tools()
        .await
        .map_err(|e| format!("tools/list: {e}"))?;
    Ok((service, tools.len()))
}

/// A `many` job (see `measure::Many`): the same steps as albedo's client takes for it.
async fn many(job: &Value) -> Value {
    let plan = &measure::Many::from_job(job);
    let rss_start = measure::rss_kib();
    let (services, tools, connect_ms) =
        match plan.connect_all(job, async |j| connect(&j).await).await {
            Ok(d) => d,
            Err(e) => return json!({"error": e}),
        };
    let (rss_connected, rss_idle) = plan.settle().await;
    let peers: Arc<Vec<Peer<RoleClient>>> =
        Arc::new(services.iter().map(|s| s.peer().clone()).collect());
    let load = Arc::new(Load {
        tool: job["tool"].as_str().unwrap_or("echo").to_owned(),
        arguments: job["arguments"].as_object().cloned().unwrap_or_default(),
    });
    let call = async |peer: &Peer<RoleClient>| one(peer, &load).await.map(|_| ());
    let run = |c, until, calls| run_level(&peers, &load, c, until, calls);
    let (level, rss_busy, fleet) =
        schedule::Fleet::load_then_fleet(plan, &peers, "rmcp client", run, call).await;
    let n = services.len();
    drop(peers);
    futures_util::future::join_all(services.into_iter().map(|s| s.cancel())).await;
    measure::many_output(
        connect_ms,
        n,
        tools,
        [rss_start, rss_connected, rss_idle, rss_busy],
        level,
        fleet,
    )
}

#[tokio::main]
async fn main() {
    let job: Value = match std::env::args().nth(1).map(|s| serde_json::from_str(&s)) {
        Some(Ok(v)) => v,
        _ => {
            eprintln!("usage: albedo-bench-rmcp-client '<job JSON>'");
            std::process::exit(2);
        }
    };
    if job["many"].is_object() {
        let out = many(&job).await;
        println!("{out}");
        std::process::exit(if out.get("error").is_some() { 1 } else { 0 });
    }
    let t0 = Instant::now();
    let (service, _) = match connect(&job).await {
        Ok(s) => s,
        Err(e) => {
            println!("{}", json!({"error": e}));
            std::process::exit(1);
        }
    };
    let connect_ms = t0.elapsed().as_secs_f64() * 1000.0;
    let load = Arc::new(Load {
        tool: job["tool"].as_str().unwrap_or("echo").to_owned(),
        arguments: job["arguments"].as_object().cloned().unwrap_or_default(),
    });
    let peers = Arc::new(vec![service.peer().clone()]);
    let levels = measure::levels(&job, |c, until, calls| {
        run_level(&peers, &load, c, until, calls)
    })
    .await;
    println!("{}", json!({"connect_ms": connect_ms, "levels": levels}));
    let _ = service.cancel().await;
}
