//! Session open (`--only session`): a warm open over saved catalogues (and the first one after
//! they changed), and a cold open of servers that take their time to start; each also by every
//! client alone (`alone.rs`), which has no saved catalogue: its open is starting every server
//! and listing its tools.
//!
//! Owns: those scenarios' records. Must not touch: the summary.

use super::*;

impl Bench {
    pub(crate) fn session_open(&mut self) {
        println!("\n== session open ==");
        // Warm: saved catalogues of N servers x M tools.
        let mut servers = Map::new();
        let tools = self.sizes.warm_tools.to_string();
        for i in 0..self.sizes.warm_servers {
            servers.insert(
                format!("w{i}"),
                // Every tool listed at open, as before tool search (its own scenario
                // measures deferral).
                json!({"type": "stdio", "command": self.exe, "args": ["__stdio-server", "--tools", tools], "deferTools": "never"}),
            );
        }
        let ext = json!({"enabled": {"mcp": true}, "mcp": {"servers": servers}});
        if let Some(d) = self.start_daemon("warm", &ext) {
            // The first session discovers every server and saves the catalogues.
            let t = Instant::now();
            let seeded = self.open_session(&d);
            let seed_ms = t.elapsed().as_secs_f64() * 1000.0;
            if let Some(id) = seeded {
                self.delete_session(&d, &id);
                let want = self.sizes.warm_servers * self.sizes.warm_tools;
                let mut times = Vec::new();
                for _ in 0..self.sizes.warm_reps {
                    std::thread::sleep(Duration::from_millis(300));
                    let t = Instant::now();
                    let (id, tools) = self
                        .rt
                        .block_on(async {
                            let mut c = d.conn();
                            let (st, body) =
                                c.request("POST", "/sessions", Some(b"{}")).await.ok()?;
                            if st != 201 {
                                return None;
                            }
                            let v: Value = serde_json::from_slice(&body).ok()?;
                            let id = v["id"].as_str()?.to_owned();
                            if std::env::var_os("BENCH_DEBUG").is_some() {
                                eprintln!("warm: POST /sessions answered after {:?}", t.elapsed());
                            }
                            let (_, body) = c
                                .request("GET", &format!("/sessions/{id}/tools"), None)
                                .await
                                .ok()?;
                            // Counted without building the list (5,000 tools).
                            #[derive(serde::Deserialize)]
                            struct Listing {
                                tools: Vec<serde::de::IgnoredAny>,
                            }
                            let v: Listing = serde_json::from_slice(&body).ok()?;
                            Some((id, v.tools.len()))
                        })
                        .unwrap_or_default();
                    let ms = t.elapsed().as_secs_f64() * 1000.0;
                    if tools >= want {
                        times.push(ms);
                    } else {
                        self.fail(format!("warm open listed {tools} tools, not {want}"));
                    }
                    if !id.is_empty() {
                        self.delete_session(&d, &id);
                    }
                }
                let first = times.first().copied().unwrap_or(0.0);
                times.sort_by(f64::total_cmp);
                let mut r = opens_record(
                    "session_open_warm",
                    API,
                    &times,
                    json!({
                        "open_ms_first": first,
                        "servers": self.sizes.warm_servers,
                        "tools_per_server": self.sizes.warm_tools,
                        "first_discovery_ms": seed_ms,
                    }),
                );
                if times.is_empty() {
                    r["failed"] = json!("no warm open listed every tool");
                }
                self.push(r);
            }
        }
        // The same servers, every client alone: started and listed, all of them, each time.
        let target = self.stdio_target(&["--tools", &tools]);
        let (servers, per_server) = (self.sizes.warm_servers, self.sizes.warm_tools);
        self.opens_alone(
            "session_open_warm",
            &target,
            servers,
            per_server,
            |_| json!({"tools_per_server": per_server}),
        );
        // Cold: N servers that each take D ms to start, never heard from.
        let delay = self.sizes.cold_delay_ms;
        let mut times = Vec::new();
        let mut ext = json!({});
        let Some(d) = self.start_daemon(
            "cold",
            &json!({"enabled": {"mcp": true}, "mcp": {"servers": {}}}),
        ) else {
            return;
        };
        for rep in 0..self.sizes.cold_reps {
            let mut servers = Map::new();
            for i in 0..self.sizes.cold_servers {
                servers.insert(
                    format!("c{i}"),
                    json!({"type": "stdio", "command": self.exe,
                           "args": ["__stdio-server", "--start-delay-ms", delay.to_string(), "--nonce", format!("{rep}")]}),
                );
            }
            ext = json!({"enabled": {"mcp": true}, "mcp": {"servers": servers}});
            let _ = std::fs::write(
                d.home.join("extensions.json"),
                serde_json::to_vec_pretty(&ext).unwrap_or_default(),
            );
            let t = Instant::now();
            let v = self.rt.block_on(async {
                let mut c = d.conn();
                let (_, body) = c.request("POST", "/sessions", Some(b"{}")).await.ok()?;
                serde_json::from_slice::<Value>(&body).ok()
            });
            let ms = t.elapsed().as_secs_f64() * 1000.0;
            let connected = v
                .as_ref()
                .and_then(|v| v["servers"].as_array())
                .map(|a| a.iter().filter(|s| s["state"] == "connected").count())
                .unwrap_or(0);
            if connected == self.sizes.cold_servers {
                times.push(ms);
            } else {
                self.fail(format!(
                    "cold open: {connected} of {} servers connected",
                    self.sizes.cold_servers
                ));
            }
            if let Some(id) = v.as_ref().and_then(|v| v["id"].as_str()) {
                self.delete_session(&d, id);
            }
        }
        let _ = ext;
        times.sort_by(f64::total_cmp);
        let mut r = opens_record(
            "session_open_cold",
            API,
            &times,
            json!({
                "servers": self.sizes.cold_servers,
                "server_start_ms": delay,
                "over_slowest_ms_max": times.last().map(|t| t - delay as f64).unwrap_or(0.0),
            }),
        );
        if times.is_empty() {
            r["failed"] = json!("no cold open connected every server");
        }
        self.push(r);
        drop(d);
        let target = self.stdio_target(&["--start-delay-ms", &delay.to_string()]);
        // The bench's server lists two tools unless told more.
        self.opens_alone(
            "session_open_cold",
            &target,
            self.sizes.cold_servers,
            2,
            |times| {
                let slowest = times.last().copied().unwrap_or(0.0);
                json!({"server_start_ms": delay, "over_slowest_ms_max": slowest - delay as f64})
            },
        );
    }

    /// `scenario`'s opens by every client alone: `cold_reps` runs of each, every one starting
    /// `servers` servers of `target` and listing their tools (`tools_per_server` each, or the
    /// record fails); `fields` of a client's open times (ms, sorted) go into its record.
    fn opens_alone(
        &mut self,
        scenario: &str,
        target: &Value,
        servers: usize,
        tools_per_server: usize,
        fields: impl Fn(&[f64]) -> Value,
    ) {
        let plan = self.many_plan(servers);
        let tools = (servers * tools_per_server) as u64;
        for who in alone::ALONE_STDIO {
            let opens: Vec<Value> = (0..self.sizes.cold_reps)
                .map_while(|_| self.run_many(who, target, &plan))
                .collect();
            if opens.is_empty() {
                continue;
            }
            let mut times: Vec<f64> = opens
                .iter()
                .filter_map(|o| o["connect_ms"].as_f64())
                .collect();
            times.sort_by(f64::total_cmp);
            let mut extra = json!({"servers": servers});
            merge(&mut extra, &fields(&times));
            let mut r = opens_record(scenario, who, &times, extra);
            if let Some(o) = opens.iter().find(|o| o["tools"].as_u64() != Some(tools)) {
                r["failed"] = json!(format!("an open listed {} tools, not {tools}", o["tools"]));
            }
            self.push(r);
        }
    }
}

/// The record of a scenario's session opens, `times` (ms, sorted): their p50 and maximum, as
/// `p50_us` and `p99_us` too, with the scenario's own figures in `extra`.
fn opens_record(scenario: &str, client: &str, times: &[f64], extra: Value) -> Value {
    let mut r = json!({
        "scenario": scenario,
        "client": client,
        "concurrency": 1,
        "open_ms_p50": pctf(times, 0.5),
        "open_ms_max": times.last().copied().unwrap_or(0.0),
        "calls_per_s": null,
        "p50_us": (pctf(times, 0.5) * 1000.0).round(),
        "p99_us": (pctf(times, 0.99) * 1000.0).round(),
        "cpu_us_per_call": null,
        "reps": times.len(),
    });
    merge(&mut r, &extra);
    r
}
