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

/// One client connected to the job's server (handshake done), with what it needs kept alive.
struct Connected {
    client: McpClient,
    _events: tokio::sync::mpsc::UnboundedReceiver<albedo_mcp::client::ClientEvent>,
}

async fn connect(job: &Value) -> Result<Connected, String> {
    let (client, sink, events) = McpClient::new();
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
    client.attach(transport.map_err(|e| format!("connect: {e}"))?);
    handshake::handshake(&client, Duration::from_secs(30))
        .await
        .map_err(|e| format!("connect: {e}"))?;
    Ok(Connected {
        client,
        _events: events,
    })
}

async fn drive(job: Value) -> Value {
    if job["fleet"].is_object() {
        return fleet(&job).await;
    }
    let t0 = Instant::now();
    let Connected { client, _events } = match connect(&job).await {
        Ok(c) => c,
        Err(e) => return json!({"error": e}),
    };
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

/// The agent fleet straight through the client, as the daemon's connections make it: `sessions`
/// groups of `per_session` servers (each behind the launcher, as the daemon starts them), on
/// the fleet's schedule (`schedule.rs`) for the job's `duration_ms`. All on this
/// one thread (the daemon's connections run on its arbiters): no HTTP, no second thread.
async fn fleet(job: &Value) -> Value {
    let f = &job["fleet"];
    let n = |k: &str, d: u64| f[k].as_u64().unwrap_or(d);
    let (sessions, per) = (
        n("sessions", 200) as usize,
        n("per_session", 5).max(1) as usize,
    );
    let duration = job["duration_ms"].as_u64().unwrap_or(30_000);
    let schedule = crate::schedule::Fleet::new(Duration::from_millis(duration));
    let t0 = Instant::now();
    // Started and shaken hands with as many at a time as the daemon dials by default.
    let batch = albedo_mcp::store::daemon_config::DEFAULT_CONCURRENT_DIALS;
    let mut servers = Vec::with_capacity(sessions * per);
    while servers.len() < sessions * per {
        let more = (sessions * per - servers.len()).min(batch);
        for c in futures_util::future::join_all((0..more).map(|_| connect(job))).await {
            match c {
                Ok(c) => servers.push(c),
                Err(e) => return json!({"error": e}),
            }
        }
    }
    let connect_ms = t0.elapsed().as_secs_f64() * 1000.0;
    let params = json!({
        "name": job["tool"].as_str().unwrap_or("echo"),
        "arguments": job["arguments"].clone(),
    });
    let cpu0 = measure::cpu_us();
    let began = Instant::now();
    let groups: Vec<&[Connected]> = servers.chunks(per).collect();
    let run = schedule
        .run(groups, "albedo client", async |group, i| {
            let client = &group[i % group.len()].client;
            match client
                .request("tools/call", Some(params.clone()), CALL_TIMEOUT)
                .await
            {
                Ok(r) if r.get("isError") != Some(&Value::Bool(true)) => Ok(()),
                other => Err(format!("{other:?}")),
            }
        })
        .await;
    let elapsed = began.elapsed().as_secs_f64();
    let cpu = measure::cpu_us().saturating_sub(cpu0);
    for s in &servers {
        s.client.close();
    }
    let level = measure::record(sessions, run.lat, 0, run.errors, elapsed, cpu);
    json!({"connect_ms": connect_ms, "levels": [level], "slow_windows": run.slow_windows})
}
