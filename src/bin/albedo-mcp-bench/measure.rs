//! How every client mode of the bench measures a job's levels and reports them, the same for
//! albedo's client (`client.rs`), the floor (`floor.rs`) and the rmcp client
//! (`benches/rmcp-client`, which includes this file with `#[path]`, so that the three report
//! exactly alike). Only std, `serde_json`, `crate::libc` (the process's CPU clock),
//! `futures_util` and tokio's timer.

use serde_json::{json, Value};
use std::future::Future;
use std::time::{Duration, Instant};

/// The CPU time of this process, in µs.
pub fn cpu_us() -> u64 {
    clock_us(crate::libc::CLOCK_PROCESS_CPUTIME_ID)
}

/// The CPU time of the calling thread, in µs: the load generator's own cost, as it runs on
/// the thread that blocks on the bench's one-thread runtime. (The rmcp client, which includes
/// this file, has no load generator.)
#[allow(dead_code)]
pub fn thread_cpu_us() -> u64 {
    clock_us(crate::libc::CLOCK_THREAD_CPUTIME_ID)
}

fn clock_us(clock: crate::libc::clockid_t) -> u64 {
    let mut ts = crate::libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes the timespec it is given and nothing else.
    unsafe { crate::libc::clock_gettime(clock, &mut ts) };
    ts.tv_sec as u64 * 1_000_000 + ts.tv_nsec as u64 / 1_000
}

/// This process's resident memory (`VmRSS`), in KiB; 0 when /proc does not say.
pub fn rss_kib() -> u64 {
    status_kib("self", "VmRSS:")
}

/// A figure in KiB from `/proc/<pid>/status` (`pid` may be `self`), by its key; 0 when /proc
/// does not say.
pub fn status_kib(pid: &str, key: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with(key))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}

/// The `p` quantile of sorted latencies.
pub fn pct(sorted: &[u32], p: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)] as u64
}

/// The mean of latencies in µs (0 for none). At a fixed number in flight it is what Little's
/// law ties to the calls per second (mean = in flight / calls per second), which the summary
/// reads against each p99.
pub fn mean(lat: &[u32]) -> f64 {
    if lat.is_empty() {
        return 0.0;
    }
    lat.iter().map(|&v| v as f64).sum::<f64>() / lat.len() as f64
}

/// A latency in µs, as recorded.
pub fn micros(since: Instant) -> u32 {
    since.elapsed().as_micros().min(u32::MAX as u128) as u32
}

/// The bytes of text in a tool result's `content` array.
pub fn text_bytes(content: &Value) -> u64 {
    content
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|c| c.get("text").and_then(Value::as_str))
                .map(|s| s.len() as u64)
                .sum()
        })
        .unwrap_or(0)
}

/// What one run of a level gives: latencies (µs, any order), result bytes, errors.
pub type LevelRun = (Vec<u32>, u64, u64);

/// Measure `run(concurrency, until, calls)` once per level of the job (`levels`,
/// `duration_ms`, `warmup_ms`, or a fixed number of `calls`), after a warm-up of the same
/// level (or one call), and give one record per level.
pub async fn levels<F, Fut>(job: &Value, mut run: F) -> Vec<Value>
where
    F: FnMut(usize, Option<Instant>, Option<u64>) -> Fut,
    Fut: Future<Output = LevelRun>,
{
    let duration = Duration::from_millis(job["duration_ms"].as_u64().unwrap_or(1000));
    let warmup = Duration::from_millis(job["warmup_ms"].as_u64().unwrap_or(200));
    let calls = job["calls"].as_u64();
    let mut out = Vec::new();
    for c in job["levels"].as_array().into_iter().flatten() {
        let c = c.as_u64().unwrap_or(1) as usize;
        if calls.is_none() {
            run(c, Some(Instant::now() + warmup), None).await;
        } else {
            run(1, None, Some(1)).await;
        }
        let cpu0 = cpu_us();
        let t = Instant::now();
        let until = calls.is_none().then(|| Instant::now() + duration);
        let (lat, bytes, errors) = run(c, until, calls).await;
        out.push(record(
            c,
            lat,
            bytes,
            errors,
            t.elapsed().as_secs_f64(),
            cpu_us() - cpu0,
        ));
    }
    out
}

/// A `many` job: a client alone at many servers, as the bench's scale and session-open steps
/// reach them through the daemon. The job's `many` object: `connections` (how many servers),
/// `dials_at_once` (how many are started and listed at a time: the daemon's default),
/// `indexed_urls` (over HTTP, server `i` is the job's URL with `/<i>` added), `idle_ms` (how long
/// to wait, connected, before the idle memory is read), `load` (calls round the servers at
/// one level: `{"levels": [c], "duration_ms", "warmup_ms"}`, as [`levels`] reads it) and
/// `fleet` (`{"sessions", "duration_ms"}`: the agent fleet over the servers in that many
/// groups). The bench writes it with [`Many::to_json`]; every client answers it with
/// [`many_output`]'s shape.
pub struct Many {
    pub connections: usize,
    pub dials_at_once: usize,
    pub indexed_urls: bool,
    pub idle_ms: u64,
    pub load: Option<Value>,
    pub fleet: Option<(usize, Duration)>,
}

impl Many {
    pub fn from_job(job: &Value) -> Many {
        let m = &job["many"];
        Many {
            connections: m["connections"].as_u64().unwrap_or(1).max(1) as usize,
            dials_at_once: m["dials_at_once"].as_u64().unwrap_or(1).max(1) as usize,
            indexed_urls: m["indexed_urls"].as_bool().unwrap_or(false),
            idle_ms: m["idle_ms"].as_u64().unwrap_or(0),
            load: m.get("load").filter(|l| l.is_object()).cloned(),
            fleet: m["fleet"].as_object().map(|f| {
                (
                    f.get("sessions")
                        .and_then(Value::as_u64)
                        .unwrap_or(1)
                        .max(1) as usize,
                    Duration::from_millis(
                        f.get("duration_ms").and_then(Value::as_u64).unwrap_or(1000),
                    ),
                )
            }),
        }
    }

    /// The job's `many` object, as [`Many::from_job`] reads it back. The fleet also carries
    /// its schedule's constants (`schedule.rs`), which the TypeScript client reads from there.
    #[allow(dead_code)] // The rmcp client, which includes this file, only reads jobs.
    pub fn to_json(&self) -> Value {
        let mut m = json!({
            "connections": self.connections,
            "dials_at_once": self.dials_at_once,
            "indexed_urls": self.indexed_urls,
            "idle_ms": self.idle_ms,
        });
        if let Some(load) = &self.load {
            m["load"] = load.clone();
        }
        if let Some((sessions, duration)) = self.fleet {
            m["fleet"] = json!({
                "sessions": sessions,
                "duration_ms": duration.as_millis() as u64,
                "period_ms": crate::schedule::PERIOD_MS,
                "window_ms": crate::schedule::WINDOW_MS,
                "slow_us": crate::schedule::SLOW_US,
            });
        }
        m
    }

    /// Connect every server of `job`, `dials_at_once` at a time, with `dial` (a server's job:
    /// the connection and how many tools it listed): the connections, their tools in all, and
    /// how long it took (ms). The first failure ends it.
    pub async fn connect_all<C>(
        &self,
        job: &Value,
        dial: impl AsyncFn(Value) -> Result<(C, usize), String>,
    ) -> Result<(Vec<C>, usize, f64), String> {
        let t0 = Instant::now();
        let mut conns = Vec::with_capacity(self.connections);
        let mut tools = 0;
        while conns.len() < self.connections {
            let from = conns.len();
            let more = (self.connections - from).min(self.dials_at_once);
            let dials = (from..from + more).map(|i| dial(self.target(job, i)));
            for c in futures_util::future::join_all(dials).await {
                let (c, n) = c?;
                conns.push(c);
                tools += n;
            }
        }
        Ok((conns, tools, t0.elapsed().as_secs_f64() * 1000.0))
    }

    /// This process's memory once connected, and after waiting `idle_ms` (KiB).
    pub async fn settle(&self) -> (u64, u64) {
        let connected = rss_kib();
        if self.idle_ms > 0 {
            tokio::time::sleep(Duration::from_millis(self.idle_ms)).await;
        }
        (connected, rss_kib())
    }

    /// The job for server `i`: the job itself, with `/<i>` added to its URL when asked.
    pub fn target(&self, job: &Value, i: usize) -> Value {
        let mut j = job.clone();
        if self.indexed_urls {
            if let Some(url) = job["url"].as_str() {
                j["url"] = json!(format!("{}/{i}", url.trim_end_matches('/')));
            }
        }
        j
    }
}

/// What every client answers a `many` job with: how long connecting and listing every server
/// took, how many and their tools, its own resident memory (KiB) at the start, connected,
/// after `idle_ms` and after the load, the load's record and the fleet's, and how many of
/// the fleet's windows had a slow call.
pub fn many_output(
    connect_ms: f64,
    connections: usize,
    tools: usize,
    [start, connected, idle, busy]: [u64; 4],
    load: Option<Value>,
    fleet: Option<(Value, usize)>,
) -> Value {
    let (fleet, slow_windows) = match fleet {
        Some((f, slow)) => (Some(f), slow),
        None => (None, 0),
    };
    json!({
        "connect_ms": connect_ms,
        "connections": connections,
        "tools": tools,
        "rss_kib": {"start": start, "connected": connected, "idle": idle, "busy": busy},
        "load": load,
        "fleet": fleet,
        "slow_windows": slow_windows,
    })
}

/// The record of one level.
pub fn record(
    concurrency: usize,
    mut lat: Vec<u32>,
    result_bytes: u64,
    errors: u64,
    elapsed_s: f64,
    cpu_us: u64,
) -> Value {
    lat.sort_unstable();
    json!({
        "concurrency": concurrency,
        "calls": lat.len(),
        "errors": errors,
        "elapsed_s": elapsed_s,
        "p50_us": pct(&lat, 0.50),
        "p99_us": pct(&lat, 0.99),
        "mean_us": mean(&lat),
        "cpu_us": cpu_us,
        "result_bytes": result_bytes,
    })
}
