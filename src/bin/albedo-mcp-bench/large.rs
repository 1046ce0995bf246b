//! Large messages (`--only large`): 10 MiB results over stdio, HTTP JSON and SSE, from each
//! client and through the daemon's API, with the daemon's peak memory.
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
        for (scenario, target) in &variants {
            let mut j = job(target, "big", args.clone(), &[1], &self.sizes);
            j["calls"] = json!(self.sizes.big_calls);
            for who in [ALBEDO, RMCP, TS] {
                if let Some(out) = self.run_client(who, &j) {
                    self.record_levels(scenario, who, &out, &json!({}));
                }
            }
        }
        // Through the daemon: a fresh daemon per variant, so its peak is this variant's;
        // over TCP and then over the socket, each after one call of the same size, as each
        // client above had (its peak counts from before that first large call).
        for (scenario, target) in &variants {
            let server = if target["transport"] == "stdio" {
                json!({"type": "stdio", "command": self.exe, "args": ["__stdio-server"]})
            } else {
                json!({"type": "http", "url": target["url"]})
            };
            let ext = json!({"enabled": {"mcp": true}, "mcp": {"servers": {"big": server}}});
            let Some(d) = self.start_daemon("large", &ext) else {
                continue;
            };
            let Some(id) = self.open_session(&d) else {
                continue;
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
}
