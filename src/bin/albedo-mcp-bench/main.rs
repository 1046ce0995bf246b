//! `albedo-mcp-bench`: albedo's MCP client side by side with the official SDK clients (rmcp
//! 3.x, the TypeScript SDK v2 client), through the daemon's HTTP API, against real servers,
//! and at scale. See README.md, "Benchmarks".
//!
//! `cargo run --release --bin albedo-mcp-bench -- [--quick] [--json FILE] [--repeat N]
//! [--only SCENARIO,...] [--no-rmcp] [--no-ts]`
//!
//! Scenarios: `roundtrip` (one connection to the bench's own minimal stdio and HTTP servers,
//! 1/16/256 calls in flight, each client, and the daemon's API), `real` (Python `mcp`,
//! server-everything), `python` (the Python binding beside httpx directly, through
//! `src/python/bench.py`), `session` (warm and cold session open), `large` (10 MiB results),
//! `scale` (1,000 idle HTTP connections; 200 sessions x 5 stdio servers), `toolsearch`
//! (deferred tools: the bytes advertised at open with 20 x 50 tools, search latency over
//! 5,000 tools, ranking quality on `benches/tool-search-queries.json`; tool_search.rs).
//!
//! Every process it needs is this binary in a hidden mode, so what is measured is always the
//! code it was built from: `__stdio-server`, `__http-server` (the minimal servers),
//! `__client` (albedo's client library under load), `__floor-client` (the same calls, one at
//! a time, by a blocking loop with no MCP library: the machine's own round trip, see
//! floor.rs), `__daemon` (`albedo-mcp serve`),
//! `launch` (the stdio launcher). The rmcp client is the workspace member
//! `benches/rmcp-client` (built on first use with `cargo build -p albedo-bench-rmcp-client`,
//! so the daemon never links rmcp); the TypeScript client is `benches/ts-client.mjs`.

mod client;
mod floor;
mod httpc;
mod measure;
mod procs;
mod server;
mod tool_search;

use nix::libc;
use procs::{Proc, Scratch};
use serde_json::{json, Map, Value};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let code = match args.get(1).map(String::as_str) {
        Some("launch") => {
            // `launch -- command args...`, as the stdio transport runs its launcher.
            let rest: Vec<String> = args[2..]
                .iter()
                .skip_while(|a| a.as_str() == "--")
                .cloned()
                .collect();
            match rest.split_first() {
                Some((cmd, a)) => albedo_mcp::transport::launcher::run(cmd, a),
                None => 2,
            }
        }
        Some("__stdio-server") => server::run_stdio(&server::ServerOpts::parse(&args[2..])),
        Some("__http-server") => {
            end_with_parent(nix::libc::SIGKILL);
            server::run_http(&server::ServerOpts::parse(&args[2..]))
        }
        Some("__client") => client::run(args.get(2).map(String::as_str).unwrap_or("{}")),
        Some("__floor-client") => floor::run(args.get(2).map(String::as_str).unwrap_or("{}")),
        Some("__daemon") => {
            // SIGTERM: the daemon closes its connections, and the launchers end the servers.
            end_with_parent(nix::libc::SIGTERM);
            let ready = args.get(2).map(PathBuf::from);
            match albedo_mcp::cli::serve::run(Some("127.0.0.1:0".into()), ready) {
                Ok(()) => 0,
                Err(e) => {
                    eprintln!("albedo-mcp-bench daemon: {e}");
                    1
                }
            }
        }
        _ => match Opts::parse(&args[1..]) {
            Ok(o) => Bench::new(o).run(),
            Err(e) => {
                eprintln!("{e}\n\nusage: albedo-mcp-bench [--quick] [--json FILE] [--repeat N] [--only roundtrip,real,python,session,large,scale,toolsearch] [--no-rmcp] [--no-ts]");
                2
            }
        },
    };
    std::process::exit(code);
}

/// A helper process of the bench ends with the bench, even one killed without cleaning up.
fn end_with_parent(signal: i32) {
    unsafe {
        nix::libc::prctl(nix::libc::PR_SET_PDEATHSIG, signal as nix::libc::c_ulong);
    }
}

struct Opts {
    quick: bool,
    json: Option<PathBuf>,
    repeat: usize,
    only: Option<Vec<String>>,
    rmcp: bool,
    ts: bool,
}

impl Opts {
    fn parse(args: &[String]) -> Result<Opts, String> {
        let mut o = Opts {
            quick: false,
            json: None,
            repeat: 1,
            only: None,
            rmcp: true,
            ts: true,
        };
        let mut it = args.iter();
        while let Some(a) = it.next() {
            match a.as_str() {
                "--quick" => o.quick = true,
                "--json" => o.json = Some(it.next().ok_or("--json needs a file")?.into()),
                "--repeat" => {
                    o.repeat = it
                        .next()
                        .and_then(|v| v.parse().ok())
                        .ok_or("--repeat needs a number")?
                }
                "--only" => {
                    o.only = Some(
                        it.next()
                            .ok_or("--only needs scenarios")?
                            .split(',')
                            .map(str::to_owned)
                            .collect(),
                    )
                }
                "--no-rmcp" => o.rmcp = false,
                "--no-ts" => o.ts = false,
                "-h" | "--help" => return Err("albedo-mcp-bench: albedo's MCP client side by side with rmcp and the TypeScript SDK".into()),
                other => return Err(format!("unknown argument {other:?}")),
            }
        }
        Ok(o)
    }
}

/// How much of everything: the full run, or `--quick` (tiny, for CI).
struct Sizes {
    duration_ms: u64,
    warmup_ms: u64,
    levels: Vec<u64>,
    real_levels: Vec<u64>,
    real_duration_ms: u64,
    real_http: bool,
    warm_servers: usize,
    warm_tools: usize,
    warm_reps: usize,
    cold_servers: usize,
    cold_delay_ms: u64,
    cold_reps: usize,
    big_bytes: u64,
    big_calls: u64,
    scale_http: usize,
    scale_sessions: usize,
    scale_per_session: usize,
    scale_concurrency: usize,
    scale_duration_ms: u64,
    /// The agent fleet: every session of the scale step calls once per 10 ms this long.
    fleet_duration_ms: u64,
}

impl Sizes {
    fn full() -> Sizes {
        Sizes {
            duration_ms: 2000,
            warmup_ms: 300,
            levels: vec![1, 16, 256],
            real_levels: vec![1, 16],
            real_duration_ms: 1500,
            real_http: true,
            warm_servers: 100,
            warm_tools: 50,
            warm_reps: 10,
            cold_servers: 20,
            cold_delay_ms: 300,
            cold_reps: 3,
            big_bytes: 10 << 20,
            big_calls: 20,
            scale_http: 1000,
            scale_sessions: 200,
            scale_per_session: 5,
            scale_concurrency: 256,
            scale_duration_ms: 3000,
            fleet_duration_ms: 30_000,
        }
    }
    fn quick() -> Sizes {
        Sizes {
            duration_ms: 150,
            warmup_ms: 30,
            levels: vec![1, 16, 256],
            real_levels: vec![1],
            real_duration_ms: 150,
            real_http: false,
            warm_servers: 5,
            warm_tools: 10,
            warm_reps: 2,
            cold_servers: 3,
            cold_delay_ms: 300,
            cold_reps: 1,
            big_bytes: 1 << 20,
            big_calls: 2,
            scale_http: 10,
            scale_sessions: 3,
            scale_per_session: 2,
            scale_concurrency: 16,
            scale_duration_ms: 200,
            fleet_duration_ms: 300,
        }
    }
}

/// The same job for every client (albedo, rmcp, ts): where the server is, what to call, how.
fn job(target: &Value, tool: &str, arguments: Value, levels: &[u64], sizes: &Sizes) -> Value {
    let mut j = target.as_object().cloned().unwrap_or_default();
    j.insert("tool".into(), tool.into());
    j.insert("arguments".into(), arguments);
    j.insert("levels".into(), json!(levels));
    j.insert("duration_ms".into(), sizes.duration_ms.into());
    j.insert("warmup_ms".into(), sizes.warmup_ms.into());
    Value::Object(j)
}

struct Bench {
    opts: Opts,
    sizes: Sizes,
    exe: PathBuf,
    repo: PathBuf,
    peers: PathBuf,
    scratch: Scratch,
    records: Vec<Value>,
    notes: Vec<String>,
    /// Notes that are failures (see `fail`).
    failed: usize,
    rmcp: Option<PathBuf>,
    node_modules: Option<PathBuf>,
    http: Option<(Proc, u16)>,
    rt: tokio::runtime::Runtime,
}

const ALBEDO: &str = "albedo";
const RMCP: &str = "rmcp";
const RMCP_POOLED: &str = "rmcp-pooled";
const TS: &str = "ts-sdk-v2";
const API: &str = "albedo-daemon-api";
/// The same API calls through the daemon's Unix socket (no token, no TCP).
const API_SOCKET: &str = "albedo-daemon-api-socket";
/// One call over TCP and one over the socket, in turn, on one connection each (one call in
/// flight): the two ways compared call by call, under the same moment's noise.
const API_PAIRED: &str = "albedo-daemon-api-paired";
/// The body of every echo call through the API.
const ECHO_BODY: &[u8] = br#"{"arguments":{"message":"hello"}}"#;
/// The same call as JSON-RPC, posted straight to the bench's HTTP server (the HTTP floor
/// under load).
const FLOOR_CALL: &[u8] = br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"message":"hello"}}}"#;
/// The HTTP floor under load: its scenario, and its client (the API's load generator).
const HTTP_FLOOR_SCENARIO: &str = "http_floor_load";
const LOADGEN: &str = "loadgen";
/// The fleet's windows (by when a call started), and what makes a call slow in one.
const FLEET_WINDOW_MS: u64 = 100;
const FLEET_SLOW_US: u32 = 5_000;
/// A blocking loop with no MCP library: the machine's own round trip (see floor.rs).
const FLOOR: &str = "floor";
/// The Python binding (src/python), and the same calls made with httpx directly.
const PY_BINDING: &str = "albedo-python";
const PY_RAW: &str = "httpx-raw";

impl Bench {
    fn new(opts: Opts) -> Bench {
        let sizes = if opts.quick {
            Sizes::quick()
        } else {
            Sizes::full()
        };
        let repo = std::env::var_os("ALBEDO_REPO")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")));
        let peers = std::env::var_os("ALBEDO_PEERS")
            .map(PathBuf::from)
            .unwrap_or_else(|| repo.join(".peers"));
        Bench {
            opts,
            sizes,
            exe: std::env::current_exe().expect("current_exe"),
            repo,
            peers,
            scratch: Scratch::new(),
            records: Vec::new(),
            notes: Vec::new(),
            failed: 0,
            rmcp: None,
            node_modules: None,
            http: None,
            rt: tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime"),
        }
    }

    fn wants(&self, scenario: &str) -> bool {
        self.opts
            .only
            .as_ref()
            .map(|o| o.iter().any(|s| s == scenario))
            .unwrap_or(true)
    }

    fn note(&mut self, s: String) {
        eprintln!("note: {s}");
        self.notes.push(s);
    }

    /// Something that should have been measured was not: noted, and the run exits 1.
    fn fail(&mut self, s: String) {
        self.failed += 1;
        self.note(format!("FAILED: {s}"));
    }

    fn run(mut self) -> i32 {
        procs::raise_nofile();
        let started = Instant::now();
        println!(
            "albedo-mcp-bench ({} run) on {}",
            if self.opts.quick { "quick" } else { "full" },
            machine()
        );
        self.prepare_clients();
        if let Err(e) = self.start_http_server() {
            eprintln!("albedo-mcp-bench: {e}");
            return 1;
        }
        let steps: [(&str, Step); 7] = [
            ("roundtrip", |b| {
                for rep in 0..b.opts.repeat {
                    b.roundtrip(rep);
                }
            }),
            ("real", Bench::real_servers),
            ("python", |b| {
                for rep in 0..b.opts.repeat {
                    b.python_binding(rep);
                }
            }),
            ("session", Bench::session_open),
            ("large", Bench::large),
            ("scale", Bench::scale),
            ("toolsearch", Bench::tool_search),
        ];
        for (name, step) in steps {
            if self.wants(name) {
                let t = Instant::now();
                step(&mut self);
                println!("({name}: {:.1} s)", t.elapsed().as_secs_f64());
            }
        }
        let (ratios, targets) = self.summary();
        let failures: Vec<&Value> = self
            .records
            .iter()
            .filter(|r| r.get("failed").is_some())
            .collect();
        let code = if failures.is_empty() && self.failed == 0 {
            0
        } else {
            1
        };
        if let Some(f) = &self.opts.json {
            let doc = json!({
                "date": today(),
                "machine": machine(),
                "mode": if self.opts.quick { "quick" } else { "full" },
                "seconds": started.elapsed().as_secs_f64(),
                "records": self.records,
                "ratios": ratios,
                "targets": targets,
                "notes": self.notes,
            });
            if let Err(e) = std::fs::write(f, serde_json::to_vec_pretty(&doc).unwrap_or_default()) {
                eprintln!("cannot write {}: {e}", f.display());
                return 1;
            }
            println!("wrote {}", f.display());
        }
        println!(
            "done in {:.1} s{}",
            started.elapsed().as_secs_f64(),
            if code == 0 {
                String::new()
            } else {
                format!(
                    "; {} measurement(s) and {} step(s) FAILED",
                    failures.len(),
                    self.failed
                )
            }
        );
        code
    }

    /// Build the rmcp client (a workspace member) and find the TypeScript SDK.
    fn prepare_clients(&mut self) {
        if self.opts.rmcp {
            let release = !cfg!(debug_assertions);
            let dir = self.exe.parent().map(Path::to_path_buf).unwrap_or_default();
            let bin = dir.join("albedo-bench-rmcp-client");
            let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
            let mut cmd = Command::new(cargo);
            cmd.arg("build")
                .arg("-q")
                .arg("-p")
                .arg("albedo-bench-rmcp-client")
                .arg("--manifest-path")
                .arg(self.repo.join("Cargo.toml"));
            if release {
                cmd.arg("--release");
            }
            eprintln!("building the rmcp client (cargo build -p albedo-bench-rmcp-client)...");
            let t = Instant::now();
            match cmd.stdout(Stdio::null()).status() {
                Ok(s) if s.success() && bin.is_file() => {
                    eprintln!("rmcp client ready in {:.1} s", t.elapsed().as_secs_f64());
                    self.rmcp = Some(bin);
                }
                Ok(s) if bin.is_file() => {
                    self.note(format!(
                        "building the rmcp client failed ({s}); using the existing {}",
                        bin.display()
                    ));
                    self.rmcp = Some(bin);
                }
                other => self.fail(format!(
                    "the rmcp client is not available ({other:?}); its measurements are skipped"
                )),
            }
        }
        if self.opts.ts {
            let nm = std::env::var_os("PEERS_NPM_MODULES")
                .map(PathBuf::from)
                .unwrap_or_else(|| self.peers.join("npm/node_modules"));
            let ok = nm
                .join("@modelcontextprotocol/client/dist/index.mjs")
                .is_file()
                && Command::new("node")
                    .arg("--version")
                    .stdout(Stdio::null())
                    .status()
                    .map(|s| s.success())
                    .unwrap_or(false);
            if ok {
                self.node_modules = Some(nm);
            } else {
                self.fail(format!(
                    "the TypeScript SDK client is not available (node, or {} missing: run tests/peers/install.sh); its measurements are skipped",
                    nm.display()
                ));
            }
        }
    }

    fn start_http_server(&mut self) -> Result<(), String> {
        let pf = self.scratch.0.join("http-port");
        let child = Command::new(&self.exe)
            .arg("__http-server")
            .arg("--port-file")
            .arg(&pf)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("cannot start the bench HTTP server: {e}"))?;
        let p = Proc { child };
        let port = procs::wait_file(&pf, Duration::from_secs(10))
            .and_then(|s| s.parse::<u16>().ok())
            .ok_or("the bench HTTP server did not start")?;
        self.http = Some((p, port));
        Ok(())
    }

    fn http_port(&self) -> u16 {
        self.http.as_ref().map(|(_, p)| *p).unwrap_or(0)
    }

    fn stdio_target(&self, extra: &[&str]) -> Value {
        let mut args = vec!["__stdio-server".to_owned()];
        args.extend(extra.iter().map(|s| s.to_string()));
        json!({"transport": "stdio", "command": self.exe, "args": args})
    }

    fn http_target(&self, path: &str) -> Value {
        json!({"transport": "http", "url": format!("http://127.0.0.1:{}{path}", self.http_port())})
    }

    /// Run one client on a job; `None` (with a note) when it cannot run.
    fn run_client(&mut self, who: &str, job: &Value) -> Option<Value> {
        let mut j = job.clone();
        let cmd = match who {
            ALBEDO | FLOOR => {
                let mut c = Command::new(&self.exe);
                c.arg(if who == FLOOR {
                    "__floor-client"
                } else {
                    "__client"
                })
                .arg(j.to_string());
                c
            }
            RMCP | RMCP_POOLED => {
                let bin = self.rmcp.clone()?;
                j["pooled"] = Value::Bool(who == RMCP_POOLED);
                let mut c = Command::new(bin);
                c.arg(j.to_string());
                c
            }
            TS => {
                let nm = self.node_modules.clone()?;
                j["node_modules"] = json!(nm);
                let mut c = Command::new("node");
                c.arg(self.repo.join("benches/ts-client.mjs"))
                    .arg(j.to_string());
                c
            }
            _ => return None,
        };
        let levels = j["levels"].as_array().map(Vec::len).unwrap_or(1) as u64;
        let per = j["duration_ms"].as_u64().unwrap_or(1000) + j["warmup_ms"].as_u64().unwrap_or(0);
        let limit = Duration::from_millis(60_000 + levels * per * 3);
        match procs::run_json(cmd, limit) {
            Ok(v) => Some(v),
            Err(e) => {
                self.fail(format!("{who} failed on {}: {e}", describe(job)));
                None
            }
        }
    }

    /// Turn a client's output into records.
    fn record_levels(&mut self, scenario: &str, who: &str, out: &Value, extra: &Value) {
        for l in out["levels"].as_array().into_iter().flatten() {
            let calls = l["calls"].as_u64().unwrap_or(0);
            let elapsed = l["elapsed_s"].as_f64().unwrap_or(0.0);
            let mut r = json!({
                "scenario": scenario,
                "client": who,
                "concurrency": l["concurrency"],
                "calls": calls,
                "calls_per_s": if elapsed > 0.0 { calls as f64 / elapsed } else { 0.0 },
                "p50_us": l["p50_us"],
                "p99_us": l["p99_us"],
                "cpu_us_per_call": if calls > 0 { l["cpu_us"].as_f64().unwrap_or(0.0) / calls as f64 } else { 0.0 },
                "errors": l["errors"],
                "connect_ms": out["connect_ms"],
            });
            let bytes = l["result_bytes"].as_u64().unwrap_or(0);
            if bytes > 0 && elapsed > 0.0 && scenario.starts_with("large") {
                r["mb_per_s"] = json!(bytes as f64 / elapsed / 1e6);
                r["result_bytes"] = json!(bytes);
            }
            merge(&mut r, extra);
            if l["errors"].as_u64().unwrap_or(0) > 0 || calls == 0 {
                r["failed"] = json!("errors or no calls");
            }
            self.push(r);
        }
    }

    fn push(&mut self, r: Value) {
        print_record(&r);
        self.records.push(r);
    }

    // ---- 1. round trips -------------------------------------------------------------------

    fn roundtrip(&mut self, rep: usize) {
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
        self.api_roundtrip(rep);
    }

    /// The HTTP floor under load: the API's own load generator (the same keep-alive
    /// connections, the same loop) posting the JSON-RPC call straight to the bench's HTTP
    /// server (one thread, no MCP library), with no daemon between them, at each level. It
    /// answers what this machine gives an HTTP API at 256 calls in flight with this load
    /// generator beside it; the API's figures at each level are read against it. CPU is the
    /// server process's.
    fn http_floor_load(&mut self, rep: usize) {
        let Some(pid) = self.http.as_ref().map(|(p, _)| p.pid()) else {
            return;
        };
        let addr = format!("127.0.0.1:{}", self.http_port());
        let paths = ["/mcp".to_owned()];
        for c in self.sizes.levels.clone() {
            let c = c as usize;
            let conns = (0..c).map(|_| httpc::Conn::new(&addr, "")).collect();
            let r = self.timed_load(conns, &paths, FLOOR_CALL, pid, self.sizes.duration_ms);
            let mut rec = r.record(HTTP_FLOOR_SCENARIO, LOADGEN, c);
            rec["rep"] = json!(rep);
            rec["cpu_note"] = json!("the bench HTTP server's CPU per call");
            self.push(rec);
        }
    }

    /// The same calls through the daemon's HTTP API.
    fn api_roundtrip(&mut self, rep: usize) {
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
    fn api_paired(&self, d: &Daemon, socket: &PathBuf, path: &str, rep: usize) -> Value {
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

    // ---- the Python binding ----------------------------------------------------------------

    /// Calls through the Python binding (src/python) beside the same calls made directly with
    /// httpx, over TCP and the socket, against the bench's own stdio server: the script
    /// `src/python/bench.py` measures both in turn and prints JSON, merged here.
    fn python_binding(&mut self, rep: usize) {
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

    // ---- 2. real servers ------------------------------------------------------------------

    fn real_servers(&mut self) {
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
                let child = Command::new(&py)
                    .arg(&py_server)
                    .args(["--transport", "http", "--port", "0", "--port-file"])
                    .arg(&pf)
                    .stdin(Stdio::null())
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .spawn();
                if let Ok(child) = child {
                    let p = Proc { child };
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
                let child = Command::new("node")
                    .arg("--require")
                    .arg(self.repo.join("tests/peers/localhost.cjs"))
                    .arg(&everything)
                    .arg("streamableHttp")
                    .env("PORT", port.to_string())
                    .stdin(Stdio::null())
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .spawn();
                if let Ok(child) = child {
                    let p = Proc { child };
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

    // ---- 3. session open ------------------------------------------------------------------

    fn session_open(&mut self) {
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
                let mut r = json!({
                    "scenario": "session_open_warm",
                    "open_ms_first": first,
                    "client": API,
                    "concurrency": 1,
                    "servers": self.sizes.warm_servers,
                    "tools_per_server": self.sizes.warm_tools,
                    "open_ms_p50": pctf(&times, 0.5),
                    "open_ms_max": times.last().copied().unwrap_or(0.0),
                    "calls_per_s": null,
                    "p50_us": (pctf(&times, 0.5) * 1000.0).round(),
                    "p99_us": (pctf(&times, 0.99) * 1000.0).round(),
                    "cpu_us_per_call": null,
                    "first_discovery_ms": seed_ms,
                    "reps": times.len(),
                });
                if times.is_empty() {
                    r["failed"] = json!("no warm open listed every tool");
                }
                self.push(r);
            }
        }
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
        let mut r = json!({
            "scenario": "session_open_cold",
            "client": API,
            "concurrency": 1,
            "servers": self.sizes.cold_servers,
            "server_start_ms": delay,
            "open_ms_p50": pctf(&times, 0.5),
            "open_ms_max": times.last().copied().unwrap_or(0.0),
            "calls_per_s": null,
            "p50_us": (pctf(&times, 0.5) * 1000.0).round(),
            "p99_us": (pctf(&times, 0.99) * 1000.0).round(),
            "cpu_us_per_call": null,
            "over_slowest_ms_max": times.last().map(|t| t - delay as f64).unwrap_or(0.0),
            "reps": times.len(),
        });
        if times.is_empty() {
            r["failed"] = json!("no cold open connected every server");
        }
        self.push(r);
    }

    // ---- 4. large messages ----------------------------------------------------------------

    fn large(&mut self) {
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

    // ---- 5. scale -------------------------------------------------------------------------

    fn scale(&mut self) {
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
    fn fleet(&self, d: &Daemon, ids: &[String], per_session: usize) -> Value {
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

    // ---- the daemon -----------------------------------------------------------------------

    fn start_daemon(&mut self, name: &str, ext: &Value) -> Option<Daemon> {
        let home = self
            .scratch
            .0
            .join(format!("home-{name}-{}", self.records.len()));
        let _ = std::fs::remove_dir_all(&home);
        let _ = std::fs::create_dir_all(&home);
        // As the daemon makes its home: only then does it open its socket.
        let _ =
            std::fs::set_permissions(&home, std::os::unix::fs::PermissionsExt::from_mode(0o700));
        let _ = std::fs::write(
            home.join("extensions.json"),
            serde_json::to_vec_pretty(ext).unwrap_or_default(),
        );
        let ready = home.join("ready");
        let log = std::fs::File::create(home.join("daemon.log")).ok();
        let child = Command::new(&self.exe)
            .arg("__daemon")
            .arg(&ready)
            .env("ALBEDO_HOME", &home)
            .env("ALBEDO_MCP_LAUNCHER", &self.exe)
            .env("ALBEDO_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log.map(Stdio::from).unwrap_or(Stdio::null()))
            .spawn();
        let child = match child {
            Ok(c) => c,
            Err(e) => {
                self.fail(format!("cannot start the daemon: {e}"));
                return None;
            }
        };
        let proc_ = Proc { child };
        match procs::wait_file(&ready, Duration::from_secs(20)) {
            Some(addr) => Some(Daemon {
                perf: perf_daemon(
                    &home.file_name().unwrap_or_default().to_string_lossy(),
                    &proc_,
                ),
                proc_,
                addr,
                token: std::fs::read_to_string(home.join("api-token"))
                    .map(|t| t.trim().to_owned())
                    .unwrap_or_default(),
                home,
            }),
            None => {
                self.fail(format!(
                    "the daemon did not start: {}",
                    std::fs::read_to_string(home.join("daemon.log")).unwrap_or_default()
                ));
                None
            }
        }
    }

    fn open_session_view(&mut self, d: &Daemon) -> Option<(String, Value)> {
        let r = self.rt.block_on(async {
            let mut c = d.conn();
            c.request("POST", "/sessions", Some(b"{}")).await
        });
        match r {
            Ok((201, body)) => {
                let v: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
                let id = v["id"].as_str()?.to_owned();
                Some((id, v))
            }
            other => {
                let s = match other {
                    Ok((st, b)) => format!("HTTP {st}: {}", String::from_utf8_lossy(&b)),
                    Err(e) => e.to_string(),
                };
                self.fail(format!("POST /sessions failed: {s}"));
                None
            }
        }
    }

    fn open_session(&mut self, d: &Daemon) -> Option<String> {
        let (id, view) = self.open_session_view(d)?;
        let want = view["servers"].as_array().map(Vec::len).unwrap_or(0);
        let got = count_connected(&view);
        if got < want {
            self.fail(format!("only {got} of {want} servers connected: {view}"));
        }
        Some(id)
    }

    fn get_json(&self, d: &Daemon, path: &str) -> Option<Value> {
        self.rt.block_on(async {
            let mut c = d.conn();
            let (st, body) = c.request("GET", path, None).await.ok()?;
            (st == 200).then(|| serde_json::from_slice(&body).ok())?
        })
    }

    /// The host's first submit: it starts the background checks of saved catalogues.
    fn submit(&mut self, d: &Daemon, id: &str) {
        let _ = self.rt.block_on(async {
            let mut c = d.conn();
            c.request(
                "POST",
                &format!("/sessions/{id}/activity"),
                Some(br#"{"kind":"submit"}"#),
            )
            .await
        });
    }

    fn delete_session(&mut self, d: &Daemon, id: &str) {
        let _ = self.rt.block_on(async {
            let mut c = d.conn();
            c.request("DELETE", &format!("/sessions/{id}"), None).await
        });
    }

    /// The scale load over `paths`: its record, and the daemon's memory right after.
    fn scale_load(&self, d: &Daemon, paths: &[String], scenario: &str) -> (Value, u64) {
        let c = self.sizes.scale_concurrency;
        let r = self.api_load(d, paths, c, self.sizes.scale_duration_ms);
        let busy = procs::rss_kib(d.pid());
        (r.record(scenario, API, c), busy)
    }

    /// Calls through the API: `concurrency` connections, round robin over `paths`, time-boxed
    /// after a warm-up.
    fn api_load(
        &self,
        d: &Daemon,
        paths: &[String],
        concurrency: usize,
        duration_ms: u64,
    ) -> LoadResult {
        self.api_load_via(d, None, paths, concurrency, duration_ms)
    }

    /// [`Self::api_load`] over TCP, or over the daemon's Unix socket at `socket`.
    fn api_load_via(
        &self,
        d: &Daemon,
        socket: Option<PathBuf>,
        paths: &[String],
        concurrency: usize,
        duration_ms: u64,
    ) -> LoadResult {
        let conns = (0..concurrency)
            .map(|_| d.conn_via(socket.as_ref()))
            .collect();
        self.timed_load(conns, paths, ECHO_BODY, d.pid(), duration_ms)
    }

    /// `body` posted on every connection of `conns`, round robin over `paths`: a warm-up,
    /// then `duration_ms` measured, with the CPU of process `pid`.
    fn timed_load(
        &self,
        mut conns: Vec<httpc::Conn>,
        paths: &[String],
        body: &[u8],
        pid: i32,
        duration_ms: u64,
    ) -> LoadResult {
        self.rt.block_on(async {
            let warmup = Instant::now() + Duration::from_millis(self.sizes.warmup_ms);
            load(&mut conns, paths, body, warmup, None).await;
            let until = Instant::now() + Duration::from_millis(duration_ms);
            measured(pid, load(&mut conns, paths, body, until, None)).await
        })
    }

    /// The ways to the daemon's API: TCP, and its Unix socket when it opened one (a daemon
    /// that did not fails the run).
    fn api_ways(&mut self, d: &Daemon) -> Vec<(&'static str, Option<PathBuf>)> {
        let socket = d.home.join("albedo.sock");
        let mut ways = vec![(API, None)];
        if socket.exists() {
            ways.push((API_SOCKET, Some(socket)));
        } else {
            self.fail(format!(
                "the daemon opened no socket at {}",
                socket.display()
            ));
        }
        ways
    }

    /// `calls` sequential calls through the API, over TCP or the daemon's socket at `socket`.
    fn api_count(
        &self,
        d: &Daemon,
        socket: Option<PathBuf>,
        path: &str,
        body: &[u8],
        calls: u64,
    ) -> LoadResult {
        self.rt.block_on(async {
            let mut conns = vec![d.conn_via(socket.as_ref())];
            let far = Instant::now() + Duration::from_secs(3600);
            let path = [path.to_owned()];
            measured(d.pid(), load(&mut conns, &path, body, far, Some(calls))).await
        })
    }

    // ---- the summary ----------------------------------------------------------------------

    fn median(&self, scenario: &str, who: &str, c: u64, key: &str) -> Option<(f64, f64)> {
        let mut v: Vec<f64> = self
            .records
            .iter()
            .filter(|r| r["scenario"] == scenario && r["client"] == who && r["concurrency"] == c)
            .filter(|r| r.get("failed").is_none())
            .filter_map(|r| r[key].as_f64())
            .collect();
        if v.is_empty() {
            return None;
        }
        v.sort_by(f64::total_cmp);
        let med = pctf(&v, 0.5);
        let spread = if med > 0.0 {
            (v[v.len() - 1] - v[0]) / med * 100.0
        } else {
            0.0
        };
        Some((med, spread))
    }

    fn summary(&mut self) -> (Vec<Value>, Vec<Value>) {
        let mut ratios = Vec::new();
        let mut targets = Vec::new();
        let mut target = |name: String, met: bool, detail: String| {
            targets.push(json!({"target": name, "met": met, "detail": detail}));
        };
        println!(
            "\n== ratios (medians over {} rep(s); spread = (max-min)/median) ==",
            self.opts.repeat
        );
        for scenario in ["roundtrip_stdio", "roundtrip_http"] {
            for &c in &self.sizes.levels {
                let a = self.median(scenario, ALBEDO, c, "calls_per_s");
                let a99 = self.median(scenario, ALBEDO, c, "p99_us");
                let r = [RMCP, RMCP_POOLED]
                    .iter()
                    .filter_map(|w| self.median(scenario, w, c, "calls_per_s").map(|m| (*w, m)))
                    .max_by(|x, y| x.1 .0.total_cmp(&y.1 .0));
                let t = self.median(scenario, TS, c, "calls_per_s");
                let mut line = format!("{scenario} c={c}:");
                let mut rec = json!({"scenario": scenario, "concurrency": c});
                if let (Some(a), Some((rw, r))) = (a, r) {
                    let x = a.0 / r.0;
                    line += &format!(" albedo/{rw} {x:.2}x (spread {:.0}%/{:.0}%)", a.1, r.1);
                    rec["albedo_vs_rmcp_calls_per_s"] = json!(x);
                    rec["rmcp_variant"] = json!(rw);
                    target(
                        format!("{scenario} c={c}: calls/s >= rmcp"),
                        x >= 1.0,
                        format!("{x:.2}x of {rw}"),
                    );
                    let r99 = self.median(scenario, rw, c, "p99_us");
                    if let (Some(a99), Some(r99)) = (a99, r99) {
                        rec["rmcp_vs_albedo_p99"] = json!(r99.0 / a99.0.max(1.0));
                        line += &format!(", p99 {:.0} vs {:.0} us", a99.0, r99.0);
                        target(
                            format!("{scenario} c={c}: p99 <= rmcp"),
                            a99.0 <= r99.0,
                            format!("{:.0} us vs {rw} {:.0} us", a99.0, r99.0),
                        );
                    }
                }
                // The floor (one call at a time only): the best any client could do here.
                let f = self.median(scenario, FLOOR, c, "calls_per_s");
                if let (Some(a), Some(f)) = (a, f) {
                    let x = a.0 / f.0;
                    line += &format!("; albedo at {:.0}% of the floor", x * 100.0);
                    rec["albedo_vs_floor_calls_per_s"] = json!(x);
                }
                if let (Some(a), Some(t)) = (a, t) {
                    let x = a.0 / t.0;
                    line += &format!("; albedo/ts {x:.2}x");
                    rec["albedo_vs_ts_calls_per_s"] = json!(x);
                    let mut detail = format!("{x:.2}x");
                    if let Some(f) = f {
                        let most = f.0 / t.0;
                        line += &format!(" (the floor allows {most:.2}x)");
                        rec["floor_vs_ts_calls_per_s"] = json!(most);
                        detail += &format!("; a client that cost nothing would reach {most:.2}x");
                    }
                    target(
                        format!("{scenario} c={c}: calls/s >= 3x TS SDK"),
                        x >= 3.0,
                        detail,
                    );
                }
                println!("{line}");
                ratios.push(rec);
            }
            // What the API adds at p50, one call at a time.
            if let (Some(api), Some(direct)) = (
                self.median(scenario, API, 1, "p50_us"),
                self.median(scenario, ALBEDO, 1, "p50_us"),
            ) {
                let add = api.0 - direct.0;
                println!("{scenario}: the daemon API adds {add:.0} us at p50 (c=1)");
                ratios
                    .push(json!({"scenario": scenario, "concurrency": 1, "api_adds_p50_us": add}));
                target(
                    format!("{scenario}: API adds <= 150 us at p50"),
                    add <= 150.0,
                    format!("{add:.0} us"),
                );
            }
            // The daemon's own path (issue 15): at one call in flight, the API's p50 within
            // 1.3x the client's p50 plus the HTTP floor's, over TCP, and lower over the socket.
            let client1 = self.median(scenario, ALBEDO, 1, "p50_us");
            let floor1 = self.median("roundtrip_http", FLOOR, 1, "p50_us");
            if let (Some(client), Some(floor)) = (client1, floor1) {
                let bound = 1.3 * (client.0 + floor.0);
                for who in [API, API_SOCKET] {
                    if let Some(api) = self.median(scenario, who, 1, "p50_us") {
                        target(
                            format!(
                                "{scenario} c=1: {who} p50 <= 1.3x (client p50 + HTTP floor p50)"
                            ),
                            api.0 <= bound,
                            format!(
                                "{:.0} us vs {bound:.0} us (1.3 x ({:.0} + {:.0}))",
                                api.0, client.0, floor.0
                            ),
                        );
                    }
                }
            }
            // Read from the calls made in turn (both ways under the same noise); the levels
            // measured one after the other are in the detail.
            if let (Some(tcp), Some(sock), Some(diff), Some(share)) = (
                self.median(scenario, API_PAIRED, 1, "tcp_p50_us"),
                self.median(scenario, API_PAIRED, 1, "socket_p50_us"),
                self.median(scenario, API_PAIRED, 1, "socket_minus_tcp_p50_us"),
                self.median(scenario, API_PAIRED, 1, "socket_lower_share"),
            ) {
                let apart = match (
                    self.median(scenario, API, 1, "p50_us"),
                    self.median(scenario, API_SOCKET, 1, "p50_us"),
                ) {
                    (Some(t), Some(s)) => format!("; measured apart {:.0} vs {:.0} us", s.0, t.0),
                    _ => String::new(),
                };
                target(
                    format!("{scenario} c=1: the API's p50 lower over the socket than over TCP"),
                    sock.0 < tcp.0,
                    format!(
                        "calls in turn: {:.0} us vs {:.0} us, the median pair {diff:+.0} us, \
                         the socket faster in {:.0} % of pairs{apart}",
                        sock.0,
                        tcp.0,
                        share.0 * 100.0,
                        diff = diff.0,
                    ),
                );
            }
            // At the highest level over stdio: the API does at least 25 % of the client's
            // calls per second, with a p99 at most 3x the client's.
            let top = self.sizes.levels.iter().copied().max().unwrap_or(1);
            if scenario == "roundtrip_stdio" {
                let client = (
                    self.median(scenario, ALBEDO, top, "calls_per_s"),
                    self.median(scenario, ALBEDO, top, "p99_us"),
                );
                for who in [API, API_SOCKET] {
                    let api = (
                        self.median(scenario, who, top, "calls_per_s"),
                        self.median(scenario, who, top, "p99_us"),
                    );
                    if let ((Some(c), Some(c99)), (Some(a), Some(a99))) = (client, api) {
                        let share = a.0 / c.0.max(1.0);
                        let mut ratio = json!({"scenario": scenario, "concurrency": top,
                            "client": who, "api_share_of_client_calls_per_s": share,
                            "api_p99_over_client_p99": a99.0 / c99.0.max(1.0)});
                        let mut detail =
                            format!("{:.0}% ({:.0} vs {:.0} calls/s)", share * 100.0, a.0, c.0);
                        // What the same load generator gets from an HTTP server with no
                        // daemon behind it, at the same level.
                        if let Some(f) =
                            self.median(HTTP_FLOOR_SCENARIO, LOADGEN, top, "calls_per_s")
                        {
                            let (api_share, target_share) =
                                (a.0 / f.0.max(1.0), 0.25 * c.0 / f.0.max(1.0));
                            ratio["api_share_of_http_floor_calls_per_s"] = json!(api_share);
                            ratio["target_share_of_http_floor_calls_per_s"] = json!(target_share);
                            detail += &format!(
                                "; the HTTP floor under the same load: {:.0} calls/s, the API at \
                                 {:.0}% of it, the target at {:.0}%",
                                f.0,
                                100.0 * api_share,
                                100.0 * target_share
                            );
                        }
                        ratios.push(ratio);
                        target(
                            format!("{scenario} c={top}: {who} >= 25% of the client's calls/s"),
                            share >= 0.25,
                            detail,
                        );
                        target(
                            format!("{scenario} c={top}: {who} p99 <= 3x the client's"),
                            a99.0 <= 3.0 * c99.0,
                            format!("{:.0} us vs {:.0} us", a99.0, c99.0),
                        );
                    }
                }
            }
        }
        let get = |s: &str| {
            self.records
                .iter()
                .find(|r| r["scenario"] == s && r.get("failed").is_none())
        };
        if let Some(r) = get("session_open_warm") {
            let ms = r["open_ms_p50"].as_f64().unwrap_or(f64::MAX);
            target(
                format!(
                    "warm session open ({} x {}) < 20 ms",
                    r["servers"], r["tools_per_server"]
                ),
                ms < 20.0,
                format!(
                    "{ms:.1} ms at p50, {:.1} ms for the first (catalogues decoded, tools built)",
                    r["open_ms_first"].as_f64().unwrap_or(0.0)
                ),
            );
        }
        if let Some(r) = get("session_open_warm") {
            let first = r["open_ms_first"].as_f64().unwrap_or(f64::MAX);
            let p50 = r["open_ms_p50"].as_f64().unwrap_or(0.0);
            target(
                "the first warm open after the catalogues changed within 2x a later one".into(),
                first <= 2.0 * p50,
                format!("{first:.1} ms vs {p50:.1} ms at p50"),
            );
        }
        if let Some(r) = self
            .records
            .iter()
            .find(|r| r["scenario"] == "fleet_sessions")
        {
            let p99 = r["p99_us"].as_f64().unwrap_or(f64::MAX);
            let errors = r["errors"].as_u64().unwrap_or(u64::MAX);
            target(
                format!(
                    "fleet: {} sessions x 1 call / 10 ms: API p99 < 5 ms, no error",
                    r["sessions"]
                ),
                p99 < 5000.0 && errors == 0,
                format!("p99 {p99:.0} us, {errors} errors"),
            );
        }
        if let Some(r) = get("session_open_cold") {
            let over = r["over_slowest_ms_max"].as_f64().unwrap_or(f64::MAX);
            target(
                format!(
                    "cold session open ({} servers) within 150 ms of the slowest",
                    r["servers"]
                ),
                over <= 150.0,
                format!(
                    "{over:.0} ms over the slowest ({} ms)",
                    r["server_start_ms"]
                ),
            );
        }
        for s in ["large_stdio", "large_http_json", "large_http_sse"] {
            for (who, over) in [(API, ""), (API_SOCKET, " (over the socket)")] {
                let Some((mbs, _)) = self.median(s, who, 1, "mb_per_s") else {
                    continue;
                };
                // The worst peak of the repeats.
                let x = self
                    .records
                    .iter()
                    .filter(|r| r["scenario"] == s && r["client"] == who)
                    .filter(|r| r.get("failed").is_none())
                    .filter_map(|r| r["daemon_peak_over_base_x_message"].as_f64())
                    .fold(0.0, f64::max);
                target(
                    format!("{s}: >= 200 MB/s through the daemon{over}"),
                    mbs >= 200.0,
                    format!("{mbs:.0} MB/s"),
                );
                target(
                    format!("{s}: daemon peak < 3x the message{over}"),
                    x < 3.0,
                    format!("{x:.2}x"),
                );
                if let Some(c) = self.median(s, ALBEDO, 1, "mb_per_s") {
                    let share = mbs / c.0.max(1e-9);
                    target(
                        format!("{s}: through the API >= 80% of the client's MB/s{over}"),
                        share >= 0.8,
                        format!("{:.0}% ({mbs:.0} vs {:.0} MB/s)", share * 100.0, c.0),
                    );
                }
            }
        }
        if let Some(r) = get("scale_http_connections") {
            let k = r["daemon_kib_per_idle_connection"]
                .as_f64()
                .unwrap_or(f64::MAX);
            target(
                format!("{} idle HTTP connections: < 100 KiB each", r["connections"]),
                k < 100.0,
                format!("{k:.1} KiB"),
            );
        }
        if let Some(r) = get("tool_search_open") {
            let x = r["bytes_fewer_share"].as_f64().unwrap_or(0.0);
            target(
                format!(
                    "tool search: >= 90 % fewer schema bytes at open ({} x {} tools)",
                    r["servers"], r["tools_per_server"]
                ),
                x >= 0.9,
                format!(
                    "{:.1} % fewer ({} bytes deferred, {} not); {} server processes at open, {} with every tool loaded",
                    x * 100.0,
                    r["bytes_deferred"],
                    r["bytes_never"],
                    r["server_processes_deferred"],
                    r["server_processes_never"]
                ),
            );
        }
        if let Some(r) = get("tool_search_latency") {
            let p99 = r["search_p99_us"].as_f64().unwrap_or(f64::MAX);
            target(
                format!("tool search over {} tools: p99 < 1 ms", r["tools"]),
                p99 < 1000.0,
                format!(
                    "p99 {p99:.0} us, p50 {:.0} us",
                    r["search_p50_us"].as_f64().unwrap_or(0.0)
                ),
            );
        }
        if let Some(r) = get("tool_search_ranking") {
            let x = r["top5_share"].as_f64().unwrap_or(0.0);
            target(
                format!(
                    "tool search ranking: >= 90 % of {} queries in the top 5",
                    r["queries"]
                ),
                x >= 0.9,
                format!(
                    "{:.1} % in the top 5, {:.1} % first",
                    x * 100.0,
                    r["top1_share"].as_f64().unwrap_or(0.0) * 100.0
                ),
            );
        }
        for via in ["tcp", "socket"] {
            let scenario = format!("python_{via}");
            let b = self.median(&scenario, PY_BINDING, 1, "binding_adds_us_per_call_c1");
            let cpu = self.median(&scenario, PY_BINDING, 1, "binding_cpu_us_per_call_added");
            if let (Some(b), Some(cpu)) = (b, cpu) {
                let r = self.median(&scenario, PY_RAW, 1, "calls_per_s");
                let p = self.median(&scenario, PY_BINDING, 1, "calls_per_s");
                println!(
                    "{scenario} c=1: the binding adds {:.1} us per call ({:.1} us of its own CPU); {:.0} vs {:.0} calls/s with httpx directly",
                    b.0,
                    cpu.0,
                    p.map(|x| x.0).unwrap_or(0.0),
                    r.map(|x| x.0).unwrap_or(0.0)
                );
                ratios.push(json!({"scenario": scenario, "concurrency": 1,
                    "binding_adds_us_per_call": b.0, "binding_cpu_us_per_call_added": cpu.0}));
                target(
                    format!("{scenario} c=1: the Python binding adds < 100 us per call"),
                    b.0 < 100.0,
                    format!("+{:.1} us per call (its own CPU: +{:.1} us)", b.0, cpu.0),
                );
            }
        }
        println!("\n== targets ==");
        for t in &targets {
            println!(
                "{} {}: {}",
                if t["met"] == true { "MET   " } else { "MISSED" },
                t["target"].as_str().unwrap_or(""),
                t["detail"].as_str().unwrap_or("")
            );
        }
        (ratios, targets)
    }
}

/// One scenario of the run.
type Step = fn(&mut Bench);

struct Daemon {
    perf: Option<Proc>,
    proc_: Proc,
    addr: String,
    home: PathBuf,
    /// Its API token (`$ALBEDO_HOME/api-token`), sent on every request.
    token: String,
}

impl Daemon {
    /// A keep-alive connection to the daemon's API, with its token.
    fn conn(&self) -> httpc::Conn {
        httpc::Conn::new(&self.addr, &self.token)
    }

    /// A connection over TCP (with the token), or over the daemon's socket at `socket`.
    fn conn_via(&self, socket: Option<&PathBuf>) -> httpc::Conn {
        match socket {
            Some(p) => httpc::Conn::unix(p.clone()),
            None => self.conn(),
        }
    }

    fn pid(&self) -> i32 {
        self.proc_.pid()
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if let Some(mut p) = self.perf.take() {
            let pid = nix::unistd::Pid::from_raw(p.pid());
            let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT);
            let _ = p.child.wait();
        }
    }
}

#[derive(Default)]
struct LoadResult {
    lat: Vec<u32>,
    bytes: u64,
    errors: u64,
    elapsed_s: f64,
    cpu_us: u64,
}

impl LoadResult {
    fn record(&self, scenario: &str, who: &str, c: usize) -> Value {
        let calls = self.lat.len() as u64;
        let mut r = json!({
            "scenario": scenario,
            "client": who,
            "concurrency": c,
            "calls": calls,
            "calls_per_s": if self.elapsed_s > 0.0 { calls as f64 / self.elapsed_s } else { 0.0 },
            "p50_us": measure::pct(&self.lat, 0.5),
            "p99_us": measure::pct(&self.lat, 0.99),
            "cpu_us_per_call": if calls > 0 { self.cpu_us as f64 / calls as f64 } else { 0.0 },
            "errors": self.errors,
        });
        if self.errors > 0 || calls == 0 {
            r["failed"] = json!("errors or no calls");
        }
        r
    }
}

/// Run `work` (latencies, bytes, errors) and measure it: its time, and the CPU of process
/// `pid` meanwhile.
async fn measured(
    pid: i32,
    work: impl std::future::Future<Output = (Vec<u32>, u64, u64)>,
) -> LoadResult {
    let cpu0 = procs::cpu_us_of(pid);
    let t = Instant::now();
    let (mut lat, bytes, errors) = work.await;
    let elapsed_s = t.elapsed().as_secs_f64();
    lat.sort_unstable();
    LoadResult {
        lat,
        bytes,
        errors,
        elapsed_s,
        cpu_us: procs::cpu_us_of(pid) - cpu0,
    }
}

/// Calls on every connection in `conns` until `until` (or `calls` in all).
async fn load(
    conns: &mut [httpc::Conn],
    paths: &[String],
    body: &[u8],
    until: Instant,
    calls: Option<u64>,
) -> (Vec<u32>, u64, u64) {
    let started = std::cell::Cell::new(0u64);
    let n = conns.len();
    let workers = conns.iter_mut().enumerate().map(|(w, conn)| {
        let started = &started;
        async move {
            let mut lat = Vec::new();
            let (mut bytes, mut errors) = (0u64, 0u64);
            let mut i = w;
            loop {
                if Instant::now() >= until {
                    break;
                }
                if let Some(max) = calls {
                    let s = started.get();
                    started.set(s + 1);
                    if s >= max {
                        break;
                    }
                }
                let path = &paths[i % paths.len()];
                i += n;
                let t = Instant::now();
                match conn.request_counted("POST", path, Some(body)).await {
                    Ok((200, _, n)) => {
                        lat.push(measure::micros(t));
                        bytes += n as u64;
                    }
                    Ok((st, b, _)) => {
                        if errors == 0 {
                            eprintln!(
                                "api call failed: HTTP {st}: {}",
                                String::from_utf8_lossy(&b[..b.len().min(300)])
                            );
                        }
                        errors += 1;
                    }
                    Err(e) => {
                        if errors == 0 {
                            eprintln!("api call failed: {e}");
                        }
                        errors += 1;
                    }
                }
            }
            (lat, bytes, errors)
        }
    });
    let mut all = Vec::new();
    let (mut bytes, mut errors) = (0, 0);
    for (l, b, e) in futures_util::future::join_all(workers).await {
        all.extend(l);
        bytes += b;
        errors += e;
    }
    (all, bytes, errors)
}

fn count_connected(view: &Value) -> usize {
    view["servers"]
        .as_array()
        .map(|a| a.iter().filter(|s| s["state"] == "connected").count())
        .unwrap_or(0)
}

fn merge(r: &mut Value, extra: &Value) {
    if let (Some(r), Some(e)) = (r.as_object_mut(), extra.as_object()) {
        for (k, v) in e {
            r.insert(k.clone(), v.clone());
        }
    }
}

fn pctf(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn describe(job: &Value) -> String {
    match job["transport"].as_str() {
        Some("stdio") => format!(
            "stdio {} {}",
            Path::new(job["command"].as_str().unwrap_or(""))
                .file_name()
                .map(|f| f.to_string_lossy().into_owned())
                .unwrap_or_default(),
            job["args"]
                .as_array()
                .and_then(|a| a.first())
                .and_then(Value::as_str)
                .unwrap_or("")
        ),
        _ => format!("http {}", job["url"].as_str().unwrap_or("")),
    }
}

fn print_record(r: &Value) {
    let f = |k: &str| r[k].as_f64().unwrap_or(0.0);
    let head = format!(
        "{:<24} {:<18} c={:<4}",
        r["scenario"].as_str().unwrap_or(""),
        r["client"].as_str().unwrap_or(""),
        r["concurrency"]
    );
    let mut extra = String::new();
    if let Some(o) = r.as_object() {
        for (k, v) in o {
            if k.ends_with("_ms")
                || k.ends_with("_kib")
                || k.ends_with("_ms_p50")
                || k.ends_with("_ms_max")
                || k.ends_with("_first")
                || k.ends_with("_message")
                || k.starts_with("daemon_kib")
                || k == "mb_per_s"
                || k == "connections"
                || k == "pairs"
                || k.starts_with("tcp_")
                || k.starts_with("socket_")
                || k == "failed"
            {
                if k == "connect_ms" {
                    continue;
                }
                match v.as_f64() {
                    Some(x) => extra += &format!(" {k}={x:.1}"),
                    None => extra += &format!(" {k}={v}"),
                }
            }
        }
    }
    if r["calls_per_s"].is_number() {
        println!(
            "{head} {:>9.0} calls/s  p50 {:>7.0} us  p99 {:>7.0} us  cpu {:>6.1} us/call{extra}",
            f("calls_per_s"),
            f("p50_us"),
            f("p99_us"),
            f("cpu_us_per_call")
        );
    } else {
        println!("{head}{extra}");
    }
}

fn machine() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_owned())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(0);
    let mem = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("MemTotal:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse::<u64>().ok())
        })
        .unwrap_or(0);
    format!("{cores} cores, {} GiB, {cpu}", (mem + (1 << 19)) >> 20)
}

/// Today's date (UTC), as YYYY-MM-DD.
fn today() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0) as i64;
    // Civil from days (Howard Hinnant's algorithm).
    let z = secs.div_euclid(86_400) + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}-{m:02}-{d:02}")
}

/// With `BENCH_PERF_DIR=dir`, each daemon is profiled by `perf record -g` into that folder
/// (`daemon-<scenario>.data`), until it stops.
fn perf_daemon(name: &str, daemon: &Proc) -> Option<Proc> {
    let dir = std::env::var_os("BENCH_PERF_DIR")?;
    let out = PathBuf::from(dir).join(format!("daemon-{name}.data"));
    Command::new("perf")
        .args([
            "record",
            "-F",
            "2000",
            "--call-graph",
            "dwarf,16384",
            "-q",
            "-o",
        ])
        .arg(out)
        .arg("-p")
        .arg(daemon.pid().to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .ok()
        .map(|child| Proc { child })
}
