//! Real servers (`--only real`): Python `mcp` and server-everything over stdio and HTTP, from
//! each client.
//!
//! Owns: those scenarios' records. Must not touch: the summary.

use super::*;

impl Bench {
    pub(crate) fn real_servers(&mut self) {
        println!("\n== real servers ==");
        let py = self.peers.join("venv/bin/python");
        let py_server = self.repo.join("tests/servers/py_mcp_server.py");
        let everything = self
            .peers
            .join("npm/node_modules/@modelcontextprotocol/server-everything/dist/index.js");
        let mut targets: Vec<(String, Value, Option<Proc>)> = Vec::new();
        if py.is_file() {
            targets.push((
                "real_python_stdio".into(),
                json!({"transport": "stdio", "command": py, "args": [py_server]}),
                None,
            ));
        } else {
            self.fail("Python mcp is not installed (.peers/venv): skipped".into());
        }
        if everything.is_file() {
            targets.push((
                "real_everything_stdio".into(),
                json!({"transport": "stdio", "command": "node", "args": [everything, "stdio"]}),
                None,
            ));
        } else {
            self.fail("server-everything is not installed: skipped".into());
        }
        if self.sizes.real_http {
            if py.is_file() {
                let pf = self.scratch.0.join("py-port");
                let server = Proc::quiet(
                    Command::new(&py)
                        .arg(&py_server)
                        .args(["--transport", "http", "--port", "0", "--port-file"])
                        .arg(&pf),
                );
                if let Some(p) = server {
                    if let Some(port) = procs::wait_file(&pf, Duration::from_secs(30)) {
                        targets.push((
                            "real_python_http".into(),
                            json!({"transport": "http", "url": format!("http://127.0.0.1:{port}/mcp")}),
                            Some(p),
                        ));
                    }
                }
            }
            if everything.is_file() {
                let port = procs::free_port();
                let server = Proc::quiet(
                    Command::new("node")
                        .arg("--require")
                        .arg(self.repo.join("tests/peers/localhost.cjs"))
                        .arg(&everything)
                        .arg("streamableHttp")
                        .env("PORT", port.to_string()),
                );
                if let Some(p) = server {
                    if procs::wait_port(port, Duration::from_secs(30)) {
                        targets.push((
                            "real_everything_http".into(),
                            json!({"transport": "http", "url": format!("http://127.0.0.1:{port}/mcp")}),
                            Some(p),
                        ));
                    }
                }
            }
        }
        let levels = self.sizes.real_levels.clone();
        for (scenario, target, _server) in targets {
            let mut j = job(
                &target,
                "echo",
                json!({"message": "hello"}),
                &levels,
                &self.sizes,
            );
            j["duration_ms"] = json!(self.sizes.real_duration_ms);
            for who in [ALBEDO, RMCP, TS] {
                if let Some(out) = self.run_client(who, &j) {
                    self.record_levels(&scenario, who, &out, &json!({}));
                }
            }
        }
    }
}
