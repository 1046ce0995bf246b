//! Scale (`--only scale`): 1,000 idle HTTP connections, 200 sessions x 5 stdio servers, and the
//! agent fleet (those sessions, one call each every 10 ms), through the API and, for what it is
//! read against, through each client alone (albedo's, rmcp, the TypeScript client: `alone.rs`)
//! and, for the fleet, through the relay (relay.rs) and at the HTTP floor.
//!
//! Owns: those scenarios' records. Must not touch: the summary.

use super::*;
use crate::schedule::{PERIOD_MS, WINDOW_MS};

impl Bench {
    pub(crate) fn scale(&mut self) {
        println!("\n== scale ==");
        // The machine's stops in this hour, read beside the fleet's tail (stalls.rs).
        self.machine_stalls("scale", self.stalls_length());
        // N idle HTTP connections, one session.
        let n = self.sizes.scale_http;
        let mut servers = Map::new();
        for i in 0..n {
            servers.insert(
                format!("h{i}"),
                json!({"type": "http", "url": format!("http://127.0.0.1:{}/mcp/{i}", self.http_port())}),
            );
        }
        let ext = json!({"enabled": {"mcp": true}, "mcp": {"servers": servers}});
        if let Some(d) = self.start_daemon("scale-http", &ext) {
            std::thread::sleep(Duration::from_millis(300));
            let base = procs::rss_kib(d.pid());
            let t = Instant::now();
            let opened = self.open_session_view(&d);
            let open_ms = t.elapsed().as_secs_f64() * 1000.0;
            if let Some((id, view)) = opened {
                let connected = count_connected(&view);
                // Idle: past the transports' keep-alive, pooled sockets are closed.
                std::thread::sleep(Duration::from_millis(if self.opts.quick {
                    300
                } else {
                    5000
                }));
                let idle = procs::rss_kib(d.pid());
                let paths: Vec<String> = (0..n)
                    .map(|i| format!("/sessions/{id}/tools/mcp__h{i}__echo/call"))
                    .collect();
                let (mut rec, busy) = self.scale_load(&d, &paths, "scale_http_connections");
                rec["connections"] = json!(connected);
                rec["open_ms"] = json!(open_ms);
                rec["daemon_base_rss_kib"] = json!(base);
                rec["daemon_idle_rss_kib"] = json!(idle);
                rec["daemon_busy_rss_kib"] = json!(busy);
                rec["daemon_kib_per_idle_connection"] =
                    json!(idle.saturating_sub(base) as f64 / connected.max(1) as f64);
                if connected < n {
                    rec["failed"] = json!(format!("{connected} of {n} connected"));
                }
                self.push(rec);
                self.delete_session(&d, &id);
            }
        }
        // The same N servers and calls, through each client alone.
        for who in alone::ALONE_HTTP {
            let plan = measure::Many {
                indexed_urls: true,
                idle_ms: if self.opts.quick { 300 } else { 5000 },
                load: Some(self.scale_load_spec()),
                ..self.many_plan(n)
            };
            if let Some(out) = self.run_many(who, &self.http_target("/mcp"), &plan) {
                let memory = alone::memory_fields(&out);
                self.many_record("scale_http_connections", who, &out, "load", &memory);
            }
        }
        // M sessions x K stdio servers.
        let (m, k) = (self.sizes.scale_sessions, self.sizes.scale_per_session);
        let mut servers = Map::new();
        for i in 0..k {
            servers.insert(
                format!("s{i}"),
                json!({"type": "stdio", "command": self.exe, "args": ["__stdio-server"]}),
            );
        }
        let ext = json!({"enabled": {"mcp": true}, "mcp": {"servers": servers}});
        if let Some(d) = self.start_daemon("scale-stdio", &ext) {
            std::thread::sleep(Duration::from_millis(300));
            let base = procs::rss_kib(d.pid());
            let t = Instant::now();
            let mut ids = Vec::new();
            let mut connected = 0;
            for _ in 0..m {
                if let Some((id, _)) = self.open_session_view(&d) {
                    ids.push(id);
                }
            }
            let open_ms = t.elapsed().as_secs_f64() * 1000.0;
            // Sessions after the first open from saved catalogues and dial in the background
            // from their first activity: submit, then wait until every connection is up.
            for id in &ids {
                self.submit(&d, id);
            }
            let deadline = Instant::now() + Duration::from_secs(120);
            for id in &ids {
                loop {
                    let v = self.get_json(&d, &format!("/sessions/{id}"));
                    let n = v.as_ref().map(count_connected).unwrap_or(0);
                    if n >= k || Instant::now() >= deadline {
                        connected += n;
                        break;
                    }
                    std::thread::sleep(Duration::from_millis(50));
                }
            }
            std::thread::sleep(Duration::from_millis(500));
            let live = procs::rss_kib(d.pid());
            let paths: Vec<String> = ids
                .iter()
                .flat_map(|id| {
                    (0..k).map(move |i| format!("/sessions/{id}/tools/mcp__s{i}__echo/call"))
                })
                .collect();
            let (mut rec, busy) = self.scale_load(&d, &paths, "scale_stdio_sessions");
            rec["sessions"] = json!(ids.len());
            rec["servers_per_session"] = json!(k);
            rec["connections"] = json!(connected);
            rec["open_all_ms"] = json!(open_ms);
            rec["daemon_base_rss_kib"] = json!(base);
            rec["daemon_live_rss_kib"] = json!(live);
            rec["daemon_busy_rss_kib"] = json!(busy);
            rec["daemon_kib_per_session"] =
                json!(live.saturating_sub(base) as f64 / ids.len().max(1) as f64);
            rec["daemon_kib_per_stdio_connection"] =
                json!(live.saturating_sub(base) as f64 / connected.max(1) as f64);
            if connected < m * k {
                rec["failed"] = json!(format!("{connected} of {} connected", m * k));
            }
            self.push(rec);
            let paths: Vec<Vec<String>> = ids
                .iter()
                .map(|id| {
                    (0..k)
                        .map(|i| format!("/sessions/{id}/tools/mcp__s{i}__echo/call"))
                        .collect()
                })
                .collect();
            // Over TCP with the token, then over the socket, the way local clients prefer.
            for (who, socket) in self.api_ways(&d) {
                let conn = || d.conn_via(socket.as_ref());
                let fleet = self.fleet(d.pid(), conn, &paths, ECHO_BODY, who);
                self.push(fleet);
            }
            for id in ids {
                self.delete_session(&d, &id);
            }
        }
        self.fleet_without_daemon(m, k);
    }

    /// The same servers, calls and fleet without the daemon, on the same machine right after
    /// it: each client alone at `m` x `k` servers like the daemon's (`alone.rs`; albedo's on
    /// one thread, no HTTP), and the fleet's schedule with the API's load generator straight
    /// at the bench's HTTP server (the HTTP floor, no stdio server behind it) and at the relay
    /// on as many stdio servers (each session's calls round its own `k`). What the API's
    /// figures are read against.
    fn fleet_without_daemon(&mut self, m: usize, k: usize) {
        for who in alone::ALONE_STDIO {
            let fleet = Duration::from_millis(self.sizes.fleet_duration_ms);
            let plan = measure::Many {
                load: Some(self.scale_load_spec()),
                fleet: Some((m, fleet)),
                ..self.many_plan(m * k)
            };
            let Some(out) = self.run_many(who, &self.stdio_target(&[]), &plan) else {
                continue;
            };
            let mut extra = alone::memory_fields(&out);
            merge(
                &mut extra,
                &json!({
                    "sessions": m,
                    "servers_per_session": k,
                    "client_kib_per_session": alone::kib_per_connection(&out) * k as f64,
                }),
            );
            self.many_record("scale_stdio_sessions", who, &out, "load", &extra);
            let slow = out["slow_windows"].as_u64().unwrap_or(0) as usize;
            let extra = self.fleet_fields(m, slow);
            self.many_record(fleet_scenario(who), who, &out, "fleet", &extra);
        }
        if let Some((p, addr)) = self.start_relay(m * k) {
            let paths: Vec<Vec<String>> = (0..m)
                .map(|s| (0..k).map(|i| format!("/{}", s * k + i)).collect())
                .collect();
            let conn = || httpc::Conn::new(&addr, "");
            let rec = self.fleet(p.pid(), conn, &paths, ECHO_BODY, RELAY);
            self.push(rec);
        }
        if let Some((pid, addr)) = self.http_floor_server() {
            let paths = vec![vec!["/mcp".to_owned()]; m];
            let conn = || httpc::Conn::new(&addr, "");
            let rec = self.fleet(pid, conn, &paths, FLOOR_CALL, LOADGEN);
            self.push(rec);
        }
    }

    /// What every fleet record says of its schedule, and how many of its windows had a slow call.
    fn fleet_fields(&self, sessions: usize, slow_windows: usize) -> Value {
        json!({
            "sessions": sessions,
            "period_ms": PERIOD_MS,
            "duration_ms": self.sizes.fleet_duration_ms,
            "windows": self.sizes.fleet_duration_ms.div_ceil(WINDOW_MS),
            "window_ms": WINDOW_MS,
            "windows_with_a_call_over_5ms": slow_windows,
        })
    }

    /// An agent fleet on `pid`'s HTTP server (`schedule.rs`): every session calls its paths in
    /// turn, each session on a connection of its own (`conn`), for `fleet_duration_ms`. The
    /// latency over all of them, and `pid`'s CPU.
    pub(crate) fn fleet(
        &self,
        pid: i32,
        conn: impl Fn() -> httpc::Conn,
        paths: &[Vec<String>],
        body: &[u8],
        who: &str,
    ) -> Value {
        let fleet = schedule::Fleet::new(Duration::from_millis(self.sizes.fleet_duration_ms));
        let sessions: Vec<_> = paths.iter().map(|p| (conn(), p)).collect();
        let mut slow_windows = 0;
        let steal0 = procs::steal_ms();
        let r = self.rt.block_on(measured(pid, async {
            let run = fleet
                .run(sessions, who, async |(conn, paths), i| {
                    match conn
                        .request_counted("POST", &paths[i % paths.len()], Some(body))
                        .await
                    {
                        Ok((200, _, _)) => Ok(()),
                        other => Err(format!("{:?}", other.map(|r| r.0))),
                    }
                })
                .await;
            slow_windows = run.slow_windows;
            (run.lat, 0, run.errors)
        }));
        let scenario = fleet_scenario(who);
        let mut rec = r.record(scenario, who, paths.len());
        merge(&mut rec, &self.fleet_fields(paths.len(), slow_windows));
        // The machine's steal time during the fleet, all cores together.
        rec["machine_steal_ms"] = json!(procs::steal_ms_since(steal0));
        if who == LOADGEN {
            rec["cpu_note"] = json!(FLOOR_SERVER_CPU_NOTE);
        }
        println!(
            "{scenario} ({who}): {} sessions x 1 call / {PERIOD_MS} ms: {:.0} calls/s, p50 {} \
             us, p99 {} us, {} errors; {slow_windows} of {} windows of {WINDOW_MS} ms had a \
             call over 5 ms",
            paths.len(),
            rec["calls_per_s"].as_f64().unwrap_or(0.0),
            rec["p50_us"],
            rec["p99_us"],
            r.errors,
            rec["windows"]
        );
        rec
    }
}
