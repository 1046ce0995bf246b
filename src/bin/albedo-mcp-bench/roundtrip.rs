//! Round trips (`--only roundtrip`): one connection to the bench's own stdio and HTTP servers
//! at 1, 16 and 256 calls in flight, from each client (the floor, albedo, rmcp, the TypeScript
//! SDK), then the same calls through the daemon's API over TCP and over its socket, and the HTTP
//! floor and the relay (relay.rs) under load.
//!
//! Owns: those scenarios' records. Must not touch: the summary (summary.rs reads the records).

use super::*;

impl Bench {
    pub(crate) fn roundtrip(&mut self, rep: usize) {
        println!(
            "\n== round trips through one connection (rep {}) ==",
            rep + 1
        );
        let levels = self.sizes.levels.clone();
        let args = json!({"message": "hello"});
        let variants = [
            ("roundtrip_stdio", self.stdio_target(&[])),
            ("roundtrip_http", self.http_target("/mcp")),
        ];
        for (scenario, target) in variants {
            let j = job(&target, "echo", args.clone(), &levels, &self.sizes);
            let mut clients = vec![FLOOR, ALBEDO, RMCP];
            if scenario == "roundtrip_http" {
                clients.push(RMCP_POOLED);
            }
            clients.push(TS);
            for who in clients {
                if let Some(out) = self.run_client(who, &j) {
                    self.record_levels(scenario, who, &out, &json!({"rep": rep}));
                }
            }
        }
        self.http_floor_load(rep);
        self.relay_load(rep);
        self.api_roundtrip(rep);
    }

    /// The relay (relay.rs) on one stdio server, under the API's load generator at each
    /// level: the API's calls over stdio with the least a daemon could add. CPU is the
    /// relay's (its server's is not counted, as the daemon's is not).
    pub(crate) fn relay_load(&mut self, rep: usize) {
        let Some((p, addr)) = self.start_relay(1) else {
            return;
        };
        let paths = ["/0".to_owned()];
        for c in self.sizes.levels.clone() {
            let c = c as usize;
            let conns = (0..c).map(|_| httpc::Conn::new(&addr, "")).collect();
            let r = self.timed_load(conns, &paths, ECHO_BODY, p.pid(), self.sizes.duration_ms);
            let mut rec = r.record("roundtrip_stdio", RELAY, c);
            rec["rep"] = json!(rep);
            rec["cpu_note"] = json!("the relay's CPU per call");
            self.push(rec);
        }
    }

    /// The HTTP floor under load: the API's own load generator (the same keep-alive
    /// connections, the same loop) posting the JSON-RPC call straight to the bench's HTTP
    /// server (one thread, no MCP library), with no daemon between them, at each level. It
    /// answers what this machine gives an HTTP API at 256 calls in flight with this load
    /// generator beside it; the API's figures at each level are read against it. CPU is the
    /// server process's.
    pub(crate) fn http_floor_load(&mut self, rep: usize) {
        let Some((pid, addr)) = self.http_floor_server() else {
            return;
        };
        let paths = ["/mcp".to_owned()];
        for c in self.sizes.levels.clone() {
            let c = c as usize;
            let conns = (0..c).map(|_| httpc::Conn::new(&addr, "")).collect();
            let r = self.timed_load(conns, &paths, FLOOR_CALL, pid, self.sizes.duration_ms);
            let mut rec = r.record(HTTP_FLOOR_SCENARIO, LOADGEN, c);
            rec["rep"] = json!(rep);
            rec["cpu_note"] = json!(FLOOR_SERVER_CPU_NOTE);
            self.push(rec);
        }
    }

    /// The same calls through the daemon's HTTP API.
    pub(crate) fn api_roundtrip(&mut self, rep: usize) {
        let ext = json!({"enabled": {"mcp": true}, "mcp": {"servers": {
            "bench": {"type": "stdio", "command": self.exe, "args": ["__stdio-server"]},
            "benchhttp": {"type": "http", "url": format!("http://127.0.0.1:{}/mcp", self.http_port())},
        }}});
        let Some(d) = self.start_daemon("api", &ext) else {
            return;
        };
        let Some(id) = self.open_session(&d) else {
            return;
        };
        let ways = self.api_ways(&d);
        for (scenario, tool) in [
            ("roundtrip_stdio", "mcp__bench__echo"),
            ("roundtrip_http", "mcp__benchhttp__echo"),
        ] {
            let path = format!("/sessions/{id}/tools/{tool}/call");
            // TCP and the socket side by side at each level, and which goes first changes
            // with each repeat: measured one after the other, whichever went first was the
            // faster at one call in flight in 3 of 4 pairs, whatever it was.
            let levels = self.sizes.levels.clone();
            for (k, c) in levels.into_iter().enumerate() {
                let mut order = ways.clone();
                if (rep + k) % 2 == 1 {
                    order.reverse();
                }
                for (who, via) in order {
                    let r = self.api_load_via(
                        &d,
                        via,
                        std::slice::from_ref(&path),
                        c as usize,
                        self.sizes.duration_ms,
                    );
                    let mut rec = r.record(scenario, who, c as usize);
                    rec["rep"] = json!(rep);
                    rec["cpu_note"] = json!("daemon process CPU per call");
                    self.push(rec);
                }
            }
            if let [(_, None), (_, Some(socket))] = &ways[..] {
                let mut rec = self.api_paired(&d, socket, &path, rep);
                rec["scenario"] = json!(scenario);
                self.push(rec);
            }
        }
    }

    /// TCP and the socket at one call in flight, call by call: one call over each in turn
    /// (which goes first changes with each pair), for the scenario's time. Measured one level
    /// after the other, whichever went first was the faster in 3 of 4 pairs, whatever it
    /// was: the machine drifts more between two measurements than the two ways differ. Here
    /// both see the same moment.
    pub(crate) fn api_paired(&self, d: &Daemon, socket: &PathBuf, path: &str, rep: usize) -> Value {
        self.rt.block_on(async {
            let mut ways = [d.conn_via(None), d.conn_via(Some(socket))];
            let mut lat: [Vec<u32>; 2] = [Vec::new(), Vec::new()];
            let mut diffs: Vec<i64> = Vec::new();
            let mut errors = 0u64;
            let warmup = Instant::now() + Duration::from_millis(self.sizes.warmup_ms);
            let until = warmup + Duration::from_millis(self.sizes.duration_ms);
            let mut k = 0usize;
            while Instant::now() < until {
                let measuring = Instant::now() >= warmup;
                let mut pair = [0u32; 2];
                let mut ok = true;
                for j in [k % 2, (k + 1) % 2] {
                    let t = Instant::now();
                    match ways[j].request_counted("POST", path, Some(ECHO_BODY)).await {
                        Ok((200, _, _)) => pair[j] = measure::micros(t),
                        _ => ok = false,
                    }
                }
                k += 1;
                if !measuring {
                    continue;
                }
                if !ok {
                    errors += 1;
                    continue;
                }
                lat[0].push(pair[0]);
                lat[1].push(pair[1]);
                diffs.push(i64::from(pair[1]) - i64::from(pair[0]));
            }
            for l in &mut lat {
                l.sort_unstable();
            }
            diffs.sort_unstable();
            let lower = diffs.iter().filter(|d| **d < 0).count();
            let mut r = json!({
                "client": API_PAIRED,
                "concurrency": 1,
                "rep": rep,
                "pairs": diffs.len(),
                "tcp_p50_us": measure::pct(&lat[0], 0.5),
                "socket_p50_us": measure::pct(&lat[1], 0.5),
                "socket_minus_tcp_p50_us": diffs.get(diffs.len() / 2).copied().unwrap_or(0),
                "socket_lower_share": if diffs.is_empty() { 0.0 } else { lower as f64 / diffs.len() as f64 },
                "errors": errors,
            });
            if errors > 0 || diffs.is_empty() {
                r["failed"] = json!("errors or no calls");
            }
            r
        })
    }
}
