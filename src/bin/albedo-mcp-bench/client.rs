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

/// `concurrency` loops of calls until `until` (or `calls` calls in all), over `clients`:
/// loop `w` calls `clients[w]`, then `clients[w + concurrency]`, and so on round the list, as
/// the API's load generator walks its paths.
async fn run_level(
    clients: &Rc<Vec<McpClient>>,
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
    for w in 0..concurrency {
        let (clients, params, lat, bytes, errors, started) = (
            clients.clone(),
            params.clone(),
            lat.clone(),
            bytes.clone(),
            errors.clone(),
            started.clone(),
        );
        handles.push(tokio::task::spawn_local(async move {
            let mut i = w;
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
                let client = &clients[i % clients.len().max(1)];
                i += concurrency;
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

/// The TLS configuration every HTTP transport of this process shares, built once, as the
/// daemon builds its own at start (a configuration per connection would count the system's
/// roots once per server in the client's memory).
fn shared_tls() -> Result<std::sync::Arc<rustls::ClientConfig>, String> {
    static TLS: std::sync::OnceLock<Result<std::sync::Arc<rustls::ClientConfig>, String>> =
        std::sync::OnceLock::new();
    TLS.get_or_init(|| tls::client_config(&[]).map_err(|e| e.to_string()))
        .clone()
}

/// One client connected to the job's server (handshake done), with what it needs kept alive.
pub(crate) struct Connected {
    pub(crate) client: McpClient,
    /// The client's events, unread: kept so that its sink stays open.
    pub(crate) events: tokio::sync::mpsc::UnboundedReceiver<albedo_mcp::client::ClientEvent>,
}

pub(crate) async fn connect(job: &Value) -> Result<Connected, String> {
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
            match (url, shared_tls()) {
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
                (_, Err(e)) => Err(e),
            }
        }
    };
    client.attach(transport.map_err(|e| format!("connect: {e}"))?);
    handshake::handshake(&client, Duration::from_secs(30))
        .await
        .map_err(|e| format!("connect: {e}"))?;
    Ok(Connected { client, events })
}

async fn drive(job: Value) -> Value {
    if job["many"].is_object() {
        return many(&job).await;
    }
    let t0 = Instant::now();
    let Connected {
        client,
        events: _events,
    } = match connect(&job).await {
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
    let clients = Rc::new(vec![client]);
    let levels = measure::levels(&job, |c, until, calls| {
        run_level(&clients, &params, c, until, calls)
    })
    .await;
    clients[0].close();
    json!({"connect_ms": connect_ms, "levels": levels})
}

/// Many servers at once (`many` in the job, see `measure::Many`), as the daemon's connections
/// reach them: each behind the launcher over stdio, or at the job's URL with `/<i>` added over
/// HTTP; started, shaken hands with and listed `dials_at_once` at a time (the daemon's
/// default); then calls round the list at one level, and the agent fleet on their groups
/// (`schedule.rs`). All on this one thread (the daemon's connections run on its arbiters): no
/// HTTP API, no second thread.
async fn many(job: &Value) -> Value {
    let plan = &measure::Many::from_job(job);
    let rss_start = measure::rss_kib();
    let dialled = plan
        .connect_all(job, async |server| {
            let c = connect(&server).await?;
            let budget = discovery::Budget::new(CALL_TIMEOUT);
            let listed = discovery::list_all(&c.client, "tools/list", "tools", &budget)
                .await
                .map_err(|e| format!("tools/list: {e}"))?;
            Ok((c, listed.len()))
        })
        .await;
    let (servers, tools, connect_ms) = match dialled {
        Ok(d) => d,
        Err(e) => return json!({"error": e}),
    };
    let (rss_connected, rss_idle) = plan.settle().await;
    let params = Rc::new(json!({
        "name": job["tool"].as_str().unwrap_or("echo"),
        "arguments": job["arguments"].clone(),
    }));
    let (clients, events): (Vec<McpClient>, Vec<_>) =
        servers.into_iter().map(|c| (c.client, c.events)).unzip();
    let clients = Rc::new(clients);
    let call = async |client: &McpClient| match client
        .request("tools/call", Some((*params).clone()), CALL_TIMEOUT)
        .await
    {
        Ok(r) if r.get("isError") != Some(&Value::Bool(true)) => Ok(()),
        other => Err(format!("{other:?}")),
    };
    let run = |c, until, calls| run_level(&clients, &params, c, until, calls);
    let (load, rss_busy, fleet) =
        crate::schedule::Fleet::load_then_fleet(plan, &clients, "albedo client", run, call).await;
    for c in clients.iter() {
        c.close();
    }
    drop(events);
    measure::many_output(
        connect_ms,
        clients.len(),
        tools,
        [rss_start, rss_connected, rss_idle, rss_busy],
        load,
        fleet,
    )
}
