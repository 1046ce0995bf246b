//! Large messages (`--only large`): 10 MiB results over stdio, HTTP JSON and SSE, from each
//! client and through the daemon's API, with the daemon's peak memory.
//!
//! albedo's client and the API are measured back to back for each variant, which goes first
//! changing with each, because the target compares them: measured with every other client
//! and variant in between, the ratio moved with the machine's drift.
//!
//! Beside them, the HTTP floor for one large answer (`large_http_floor`): the API's load
//! generator reading the same 10 MiB answer straight from the bench's HTTP server, with no
//! daemon between them. The daemon's answer is one more such crossing after the server's: the
//! summary reads the API's share of the client against the share a daemon that sent its
//! answer as fast as that server could reach without overlapping the two.
//!
//! Owns: those scenarios' records. Must not touch: the summary.

use super::*;

impl Bench {
    pub(crate) fn large(&mut self) {
        println!("\n== large results ==");
        let bytes = self.sizes.big_bytes;
        let args = json!({ "bytes": bytes });
        let variants = [
            ("large_stdio", self.stdio_target(&[])),
            ("large_http_json", self.http_target("/mcp")),
            ("large_http_sse", self.http_target("/sse")),
        ];
        let client_job = |target: &Value, sizes: &Sizes| {
            let mut j = job(target, "big", args.clone(), &[1], sizes);
            j["calls"] = json!(sizes.big_calls);
            j
        };
        // The other clients, each on its own.
        for (scenario, target) in &variants {
            let j = client_job(target, &self.sizes);
            for who in [RMCP, TS] {
                if let Some(out) = self.run_client(who, &j) {
                    self.record_levels(scenario, who, &out, &json!({}));
                }
            }
        }
        // albedo's client and the daemon, back to back: a fresh daemon per variant, so its
        // peak is this variant's; over TCP and over the socket, each after one call of the
        // same size, as each client had (its peak counts from before that first large call).
        for (k, (scenario, target)) in variants.iter().enumerate() {
            let job = client_job(target, &self.sizes);
            self.large_floor(bytes);
            if k % 2 == 0 {
                self.large_client(scenario, &job);
                self.large_api(scenario, target, bytes);
            } else {
                self.large_api(scenario, target, bytes);
                self.large_client(scenario, &job);
            }
        }
    }

    /// albedo's client on one variant.
    fn large_client(&mut self, scenario: &str, job: &Value) {
        if let Some(out) = self.run_client(ALBEDO, job) {
            self.record_levels(scenario, ALBEDO, &out, &json!({}));
        }
    }

    /// The HTTP floor for one large answer: the load generator that reads the API's answers
    /// posts the `big` call as JSON-RPC straight to the bench's HTTP server (one thread, the
    /// text cached and written as it is, no MCP library) over TCP, one call at a time, after
    /// one call of the same size. Measured before each variant's pair, so the median sees the
    /// same moments as the pairs. CPU is the server's.
    fn large_floor(&mut self, bytes: u64) {
        let Some((pid, addr)) = self.http_floor_server() else {
            return;
        };
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": "big", "arguments": {"bytes": bytes}}})
        .to_string()
        .into_bytes();
        let conn = httpc::Conn::new(&addr, "");
        let r = self.count_on(conn, pid, "/mcp", &body, 1, self.sizes.big_calls);
        let mut rec = r.record(LARGE_FLOOR_SCENARIO, LOADGEN, 1);
        rec["mb_per_s"] = json!(r.bytes as f64 / r.elapsed_s.max(1e-9) / 1e6);
        rec["result_bytes"] = json!(bytes);
        rec["cpu_note"] = json!(FLOOR_SERVER_CPU_NOTE);
        self.push(rec);
    }

    /// One variant through the daemon's API, over TCP and over the socket.
    fn large_api(&mut self, scenario: &str, target: &Value, bytes: u64) {
        let server = if target["transport"] == "stdio" {
            json!({"type": "stdio", "command": self.exe, "args": ["__stdio-server"]})
        } else {
            json!({"type": "http", "url": target["url"]})
        };
        let ext = json!({"enabled": {"mcp": true}, "mcp": {"servers": {"big": server}}});
        let Some(d) = self.start_daemon("large", &ext) else {
            return;
        };
        let Some(id) = self.open_session(&d) else {
            return;
        };
        let path = format!("/sessions/{id}/tools/mcp__big__big/call");
        // A small call first: the connection is up.
        let small = json!({"arguments": {"bytes": 1024}})
            .to_string()
            .into_bytes();
        self.api_count(&d, None, &path, &small, 1);
        std::thread::sleep(Duration::from_millis(200));
        let base = procs::rss_kib(d.pid());
        let body = json!({"arguments": {"bytes": bytes}})
            .to_string()
            .into_bytes();
        for (who, via) in self.api_ways(&d) {
            // Each way's peak: from the base before any large call.
            let reset = procs::reset_hwm(d.pid());
            self.api_count(&d, via.clone(), &path, &body, 1);
            let r = self.api_count(&d, via, &path, &body, self.sizes.big_calls);
            let hwm = procs::hwm_kib(d.pid());
            let mut rec = r.record(scenario, who, 1);
            let msg_kib = bytes as f64 / 1024.0;
            rec["mb_per_s"] = json!(r.bytes as f64 / r.elapsed_s.max(1e-9) / 1e6);
            rec["result_bytes"] = json!(bytes);
            rec["daemon_base_rss_kib"] = json!(base);
            rec["daemon_peak_rss_kib"] = json!(hwm);
            rec["daemon_peak_over_base_kib"] = json!(hwm.saturating_sub(base));
            rec["daemon_peak_over_base_x_message"] =
                json!(hwm.saturating_sub(base) as f64 / msg_kib);
            if !reset {
                rec["hwm_note"] = json!("VmHWM could not be reset; peak is since the start");
            }
            self.push(rec);
        }
    }
}
