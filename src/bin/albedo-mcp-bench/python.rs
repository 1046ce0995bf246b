//! The Python binding (`--only python`): calls through `src/python` beside the same calls made
//! directly with httpx, over TCP and over the daemon's socket.
//!
//! Owns: those scenarios' records. Must not touch: the summary.

use super::*;

impl Bench {
    /// Calls through the Python binding (src/python) beside the same calls made directly with
    /// httpx, over TCP and the socket, against the bench's own stdio server: the script
    /// `src/python/bench.py` measures both in turn and prints JSON, merged here.
    pub(crate) fn python_binding(&mut self, rep: usize) {
        println!("\n== the Python binding (rep {}) ==", rep + 1);
        let py = std::env::var_os("PEERS_VENV_PY")
            .map(PathBuf::from)
            .unwrap_or_else(|| self.peers.join("venv/bin/python"));
        let script = self.repo.join("src/python/bench.py");
        if !py.is_file() || !script.is_file() {
            self.fail(format!(
                "the Python binding is not measured: {} or {} is missing (tests/peers/install.sh)",
                py.display(),
                script.display()
            ));
            return;
        }
        let ext = json!({"enabled": {"mcp": true}, "mcp": {"servers": {
            "bench": {"type": "stdio", "command": self.exe, "args": ["__stdio-server"]},
        }}});
        let Some(d) = self.start_daemon("python", &ext) else {
            return;
        };
        let Some(id) = self.open_session(&d) else {
            return;
        };
        let levels = if self.opts.quick { "1,8" } else { "1,64" };
        let duration = if self.opts.quick {
            300
        } else {
            2 * self.sizes.duration_ms
        };
        for (_, socket) in self.api_ways(&d) {
            let (via, daemon) = match &socket {
                None => ("tcp", format!("http://{}", d.addr)),
                Some(s) => ("socket", format!("unix:{}", s.display())),
            };
            let out = Command::new(&py)
                .arg(&script)
                .args(["--daemon", &daemon, "--session", &id])
                .arg("--home")
                .arg(&d.home)
                .args(["--tool", "mcp__bench__echo", "--levels", levels])
                .args(["--duration-ms", &duration.to_string()])
                .args(["--warmup-ms", &self.sizes.warmup_ms.to_string()])
                .args(["--rounds", if self.opts.quick { "1" } else { "5" }])
                .args(["--cpu-calls", if self.opts.quick { "200" } else { "3000" }])
                .env_remove("ALBEDO_DAEMON")
                .env_remove("ALBEDO_TOKEN")
                .stdin(Stdio::null())
                .stderr(Stdio::inherit())
                .output();
            let doc = match out {
                Ok(o) if o.status.success() => String::from_utf8_lossy(&o.stdout)
                    .lines()
                    .rfind(|l| l.starts_with('{'))
                    .and_then(|l| serde_json::from_str::<Value>(l).ok()),
                Ok(o) => {
                    self.fail(format!(
                        "src/python/bench.py ({via}) failed ({}): {}",
                        o.status,
                        String::from_utf8_lossy(&o.stdout)
                    ));
                    continue;
                }
                Err(e) => {
                    self.fail(format!("cannot run {}: {e}", py.display()));
                    continue;
                }
            };
            let Some(doc) = doc else {
                self.fail(format!("src/python/bench.py ({via}) printed no JSON"));
                continue;
            };
            let scenario = format!("python_{via}");
            for who in [PY_RAW, PY_BINDING] {
                let extra = if who == PY_BINDING {
                    json!({"rep": rep, "transport": via,
                           "binding_adds_us_per_call_c1": doc["overhead_us_per_call_c1"],
                           "binding_cpu_us_per_call_added": doc["binding_cpu_us_per_call"]["added_us"],
                           "cpu_note": "the Python process's CPU per call"})
                } else {
                    json!({"rep": rep, "transport": via,
                           "cpu_note": "the Python process's CPU per call"})
                };
                self.record_levels(&scenario, who, &doc["clients"][who], &extra);
            }
        }
        self.delete_session(&d, &id);
    }
}
