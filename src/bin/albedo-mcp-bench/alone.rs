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

impl Bench {
    /// A `many` job's plan of `connections` servers and nothing more, dialled as many at a
    /// time as the daemon dials by default.
    pub(crate) fn many_plan(&self, connections: usize) -> measure::Many {
        measure::Many {
            connections,
            dials_at_once: albedo_mcp::store::daemon_config::DEFAULT_CONCURRENT_DIALS,
            indexed_urls: false,
            idle_ms: 0,
            load: None,
            fleet: None,
        }
    }

    /// The scale step's load for a `many` job: calls round the servers at
    /// `scale_concurrency` in flight, for its duration after a warm-up.
    pub(crate) fn scale_load_spec(&self) -> Value {
        json!({
            "levels": [self.sizes.scale_concurrency],
            "duration_ms": self.sizes.scale_duration_ms,
            "warmup_ms": self.sizes.warmup_ms,
        })
    }

    /// Run client `who` on `plan` with `target`'s servers (the echo tool); `None` (with a
    /// failure noted) when it cannot run or did not connect every server.
    pub(crate) fn run_many(
        &mut self,
        who: &str,
        target: &Value,
        plan: &measure::Many,
    ) -> Option<Value> {
        let mut job = target.clone();
        job["tool"] = json!("echo");
        job["arguments"] = json!({"message": "hello"});
        job["many"] = plan.to_json();
        let (cmd, _) = self.client_command(who, &job)?;
        // Starting a server takes a few ms (a TypeScript client's, tens), and every phase may
        // run long on a loaded machine.
        let load_ms = plan.load.as_ref().map_or(0, |l| {
            l["duration_ms"].as_u64().unwrap_or(0) + l["warmup_ms"].as_u64().unwrap_or(0)
        });
        let fleet_ms = plan.fleet.map_or(0, |(_, d)| d.as_millis() as u64);
        let phases = plan.idle_ms + load_ms + fleet_ms;
        let limit = Duration::from_millis(60_000 + 3 * phases + 50 * plan.connections as u64);
        let failed = match procs::run_json(cmd, limit) {
            Ok(out) if out["connections"].as_u64() == Some(plan.connections as u64) => {
                return Some(out)
            }
            Ok(out) => out.get("error").unwrap_or(&out).to_string(),
            Err(e) => e,
        };
        self.fail(format!(
            "{who} alone at {} servers ({}): {failed}",
            plan.connections,
            describe(&job)
        ));
        None
    }

    /// The record of a `many` job's `level` (`load` or `fleet`) for `scenario`: how many
    /// servers and how long connecting them took, with `extra`.
    pub(crate) fn many_record(
        &mut self,
        scenario: &str,
        who: &str,
        out: &Value,
        level: &str,
        extra: &Value,
    ) {
        let mut fields = json!({"connections": out["connections"], "open_ms": out["connect_ms"]});
        merge(&mut fields, extra);
        let levels = json!({"connect_ms": out["connect_ms"], "levels": [out[level].clone()]});
        self.record_levels(scenario, who, &levels, &fields);
    }
}

/// A `many` job's client memory: at the start, connected, after the idle wait and after the
/// load, and per connection (after the idle wait, over the start).
pub(crate) fn memory_fields(out: &Value) -> Value {
    json!({
        "client_base_rss_kib": rss(out, "start"),
        "client_connected_rss_kib": rss(out, "connected"),
        "client_idle_rss_kib": rss(out, "idle"),
        "client_busy_rss_kib": rss(out, "busy"),
        "client_kib_per_connection": kib_per_connection(out),
    })
}

/// A `many` job's client memory per connection: after the idle wait, over the start (KiB).
pub(crate) fn kib_per_connection(out: &Value) -> f64 {
    rss(out, "idle").saturating_sub(rss(out, "start")) as f64
        / out["connections"].as_u64().unwrap_or(0).max(1) as f64
}

/// The client's resident memory at `when` (KiB), as a `many` job answers it.
fn rss(out: &Value, when: &str) -> u64 {
    out["rss_kib"][when].as_u64().unwrap_or(0)
}
