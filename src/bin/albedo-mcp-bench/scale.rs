//! Scale (`--only scale`): 1,000 idle HTTP connections, 200 sessions x 5 stdio servers, and the
//! agent fleet (those sessions, one call each every 10 ms).
//!
//! Owns: those scenarios' records. Must not touch: the summary.

use super::*;

impl Bench {
    pub(crate) fn scale(&mut self) {
        println!("\n== scale ==");
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
            let fleet = self.fleet(&d, &ids, k);
            self.push(fleet);
            for id in ids {
                self.delete_session(&d, &id);
            }
        }
    }

    /// An agent fleet: every session makes one call every 10 ms (to its servers in turn),
    /// each on a connection of its own, for `fleet_duration_ms`; the sessions start spread
    /// over the first 10 ms. A call that takes longer than 10 ms delays that session's next
    /// one (ticks are skipped, not bunched). The API's latency over all of them.
    pub(crate) fn fleet(&self, d: &Daemon, ids: &[String], per_session: usize) -> Value {
        let period = Duration::from_millis(10);
        let duration = Duration::from_millis(self.sizes.fleet_duration_ms);
        // Which windows of FLEET_WINDOW_MS (by when a call started) had a call slower than
        // FLEET_SLOW_US: a tail spread evenly over the run, or bursts.
        let mut slow_windows = std::collections::BTreeSet::new();
        let windows = self.sizes.fleet_duration_ms.div_ceil(FLEET_WINDOW_MS);
        let began = Instant::now();
        let r = self.rt.block_on(measured(d.pid(), async {
            let until = Instant::now() + duration;
            let n = ids.len().max(1) as u32;
            let sessions = ids.iter().enumerate().map(|(k, id)| {
                let mut conn = d.conn();
                async move {
                    let start = tokio::time::Instant::now() + period * k as u32 / n;
                    let mut tick = tokio::time::interval_at(start, period);
                    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
                    let (mut lat, mut errors, mut i) = (Vec::new(), 0u64, 0usize);
                    let mut slow: Vec<u64> = Vec::new();
                    loop {
                        tick.tick().await;
                        if Instant::now() >= until {
                            break;
                        }
                        let path =
                            format!("/sessions/{id}/tools/mcp__s{}__echo/call", i % per_session);
                        i += 1;
                        let t = Instant::now();
                        match conn.request_counted("POST", &path, Some(ECHO_BODY)).await {
                            Ok((200, _, _)) => {
                                let l = measure::micros(t);
                                lat.push(l);
                                if l > FLEET_SLOW_US {
                                    let at = t.saturating_duration_since(began).as_millis();
                                    slow.push(at as u64 / FLEET_WINDOW_MS);
                                }
                            }
                            other => {
                                if errors == 0 {
                                    eprintln!("fleet: a call failed: {:?}", other.map(|r| r.0));
                                }
                                errors += 1;
                            }
                        }
                    }
                    (lat, errors, slow)
                }
            });
            let mut lat = Vec::new();
            let mut errors = 0;
            for (l, e, s) in futures_util::future::join_all(sessions).await {
                lat.extend(l);
                errors += e;
                slow_windows.extend(s);
            }
            (lat, 0, errors)
        }));
        let slow_windows = slow_windows.len();
        let mut rec = r.record("fleet_sessions", API, ids.len());
        rec["sessions"] = json!(ids.len());
        rec["period_ms"] = json!(10);
        rec["duration_ms"] = json!(self.sizes.fleet_duration_ms);
        rec["windows"] = json!(windows);
        rec["window_ms"] = json!(FLEET_WINDOW_MS);
        rec["windows_with_a_call_over_5ms"] = json!(slow_windows);
        println!(
            "fleet: {} sessions x 1 call / 10 ms: {:.0} calls/s, p50 {} us, p99 {} us, {} errors; \
             {slow_windows} of {} windows of {FLEET_WINDOW_MS} ms had a call over 5 ms",
            ids.len(),
            rec["calls_per_s"].as_f64().unwrap_or(0.0),
            rec["p50_us"],
            rec["p99_us"],
            r.errors,
            windows
        );
        rec
    }
}
