//! The clients alone at many servers: the steps the daemon is measured at with many servers
//! (session open, scale, the agent fleet) made by albedo's client, rmcp and the TypeScript
//! client themselves, with no daemon, so that every scenario runs every client. Each client
//! takes one `many` job (`measure::Many`): connect and list that many servers, a few at a time,
//! then calls round them at one level and the agent fleet over them, reporting its own memory.
//!
//! Owns: those jobs, and the records made of what the clients answer. Must not touch: the
//! daemon's records, the summary.

use super::*;

/// The clients that run a `many` job over stdio, and over HTTP (rmcp with its pooled client:
/// its default one opens a connection per request and keeps none idle).
pub(crate) const ALONE_STDIO: [&str; 3] = [ALBEDO, RMCP, TS];
pub(crate) const ALONE_HTTP: [&str; 3] = [ALBEDO, RMCP_POOLED, TS];

/// What a `many` job asks beyond its target (see `measure::Many`).
pub(crate) struct ManyPlan {
    pub connections: usize,
    pub indexed_urls: bool,
    pub idle_ms: u64,
    /// Calls round the servers at this many in flight, for the scale step's duration.
    pub load: Option<usize>,
    /// The agent fleet over the servers in this many sessions.
    pub fleet_sessions: Option<usize>,
}

impl Bench {
    /// The `many` job for `plan` on `target` (the echo tool).
    fn many_job(&self, target: &Value, plan: &ManyPlan) -> Value {
        let mut job = target.clone();
        job["tool"] = json!("echo");
        job["arguments"] = json!({"message": "hello"});
        let mut many = json!({
            "connections": plan.connections,
            "dials_at_once": albedo_mcp::store::daemon_config::DEFAULT_CONCURRENT_DIALS,
            "indexed_urls": plan.indexed_urls,
            "idle_ms": plan.idle_ms,
        });
        if let Some(c) = plan.load {
            many["load"] = json!({
                "levels": [c],
                "duration_ms": self.sizes.scale_duration_ms,
                "warmup_ms": self.sizes.warmup_ms,
            });
        }
        if let Some(sessions) = plan.fleet_sessions {
            // The Rust clients follow schedule.rs; the TypeScript client reads the schedule here.
            many["fleet"] = json!({
                "sessions": sessions,
                "duration_ms": self.sizes.fleet_duration_ms,
                "period_ms": FLEET_PERIOD_MS,
                "window_ms": FLEET_WINDOW_MS,
                "slow_us": FLEET_SLOW_US,
            });
        }
        job["many"] = many;
        job
    }

    /// Run client `who` on the `many` job for `plan`; `None` (with a failure noted) when it
    /// cannot run or did not connect every server.
    pub(crate) fn run_many(&mut self, who: &str, target: &Value, plan: &ManyPlan) -> Option<Value> {
        let job = self.many_job(target, plan);
        let (cmd, _) = self.client_command(who, &job)?;
        // Starting a server takes a few ms (a TypeScript client's, tens), and every phase may
        // run long on a loaded machine.
        let phases = plan.idle_ms
            + plan
                .load
                .map_or(0, |_| self.sizes.scale_duration_ms + self.sizes.warmup_ms)
            + plan
                .fleet_sessions
                .map_or(0, |_| self.sizes.fleet_duration_ms);
        let limit = Duration::from_millis(60_000 + 3 * phases + 50 * plan.connections as u64);
        match procs::run_json(cmd, limit) {
            Ok(out) if out["connections"].as_u64() == Some(plan.connections as u64) => Some(out),
            Ok(out) => {
                self.fail(format!(
                    "{who} alone at {} servers ({}): {}",
                    plan.connections,
                    describe(&job),
                    out.get("error").unwrap_or(&out)
                ));
                None
            }
            Err(e) => {
                self.fail(format!(
                    "{who} alone at {} servers ({}): {e}",
                    plan.connections,
                    describe(&job)
                ));
                None
            }
        }
    }

    /// The record of a `many` job's `level` (`load` or `fleet`) for `scenario`: how many
    /// servers and how long connecting them took, and with the load, the client's memory: at
    /// the start, connected, after the idle wait and after the load, and per connection (after
    /// the idle wait, over the start).
    pub(crate) fn many_record(
        &mut self,
        scenario: &str,
        who: &str,
        out: &Value,
        level: &str,
        extra: &Value,
    ) {
        let mut fields = json!({"connections": out["connections"], "open_ms": out["connect_ms"]});
        if level == "load" {
            let kib = |k: &str| out["rss_kib"][k].as_u64().unwrap_or(0);
            merge(
                &mut fields,
                &json!({
                    "client_base_rss_kib": kib("start"),
                    "client_connected_rss_kib": kib("connected"),
                    "client_idle_rss_kib": kib("idle"),
                    "client_busy_rss_kib": kib("busy"),
                    "client_kib_per_connection": kib_per_connection(out),
                }),
            );
        }
        merge(&mut fields, extra);
        let levels = json!({"connect_ms": out["connect_ms"], "levels": [out[level].clone()]});
        self.record_levels(scenario, who, &levels, &fields);
    }
}

/// A `many` job's client memory per connection: after the idle wait, over the start (KiB).
pub(crate) fn kib_per_connection(out: &Value) -> f64 {
    let kib = |k: &str| out["rss_kib"][k].as_u64().unwrap_or(0);
    kib("idle").saturating_sub(kib("start")) as f64
        / out["connections"].as_u64().unwrap_or(0).max(1) as f64
}

/// How long each of `opens` `many` jobs took to connect and list every server (ms, sorted).
pub(crate) fn open_times(opens: &[Value]) -> Vec<f64> {
    let mut times: Vec<f64> = opens
        .iter()
        .filter_map(|o| o["connect_ms"].as_f64())
        .collect();
    times.sort_by(f64::total_cmp);
    times
}
