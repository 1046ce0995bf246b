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
//! 5,000 tools, ranking quality on `benches/tool-search-queries.json`; tool_search.rs),
//! `instructions` (the daemon under callgrind: instructions and allocations per API call;
//! instructions.rs; not in `--quick`). Every run first reads how often the VM stops a vCPU
//! (`machine_stalls`, stalls.rs), and again before the agent fleet. Each
//! scenario has its file (roundtrip.rs, real.rs, python.rs, session.rs, large.rs, scale.rs);
//! daemon.rs starts the daemon and drives its API; summary.rs reads the records into ratios and
//! targets. This file holds the options, the run and the clients' steps.
//!
//! Every process it needs is this binary in a hidden mode, so what is measured is always the
//! code it was built from: `__stdio-server`, `__http-server` (the minimal servers),
//! `__client` (albedo's client library under load), `__floor-client` (the same calls, one at
//! a time, by a blocking loop with no MCP library: the machine's own round trip, see
//! floor.rs), `__relay` (albedo's client behind a minimal HTTP server on one thread: the
//! least a daemon could be, see relay.rs), `__daemon` (`albedo-mcp serve`),
//! `launch` (the stdio launcher). The rmcp client is the workspace member
//! `benches/rmcp-client` (built on first use with `cargo build -p albedo-bench-rmcp-client`,
//! so the daemon never links rmcp); the TypeScript client is `benches/ts-client.mjs`.

mod alone;
mod client;
mod daemon;
mod floor;
mod httpc;
mod instructions;
mod large;
mod measure;
mod procs;
mod python;
mod real;
mod relay;
mod roundtrip;
mod scale;
mod schedule;
mod server;
mod session;
mod stalls;
mod summary;
mod tool_search;

use daemon::{measured, Daemon};

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
        Some("__relay") => {
            end_with_parent(nix::libc::SIGKILL);
            relay::run(args.get(2).map(String::as_str).unwrap_or("{}"))
        }
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
                eprintln!("{e}\n\nusage: albedo-mcp-bench [--quick] [--json FILE] [--repeat N] [--only roundtrip,real,python,session,large,scale,toolsearch,instructions] [--no-rmcp] [--no-ts]");
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
/// What a floor record's CPU is (the load generator's own is `loadgen_cpu_us_per_call`).
const FLOOR_SERVER_CPU_NOTE: &str = "the bench HTTP server's CPU per call";
/// The machine's own stops (`stalls.rs`): its scenario.
const STALLS_SCENARIO: &str = "machine_stalls";
/// The HTTP floor for one large answer (`large.rs`): its scenario.
const LARGE_FLOOR_SCENARIO: &str = "large_http_floor";
/// The agent fleet (`scale.rs`, its schedule in `schedule.rs`): the scenario through the API
/// and the clients, and the same schedule at the HTTP floor.
const FLEET_SCENARIO: &str = "fleet_sessions";
const FLEET_FLOOR_SCENARIO: &str = "fleet_http_floor";

/// The relay (relay.rs): the least a daemon could be, albedo's client behind a minimal HTTP
/// server on one thread, driven by the API's load generator and schedules.
const RELAY: &str = "relay";
/// A blocking loop with no MCP library: the machine's own round trip (see floor.rs).
const FLOOR: &str = "floor";
/// The Python binding (src/python), and the same calls made with httpx directly.
const PY_BINDING: &str = "albedo-python";
const PY_RAW: &str = "httpx-raw";

/// The scenario of the fleet as `who` makes it: the floor's own, or the fleet's.
fn fleet_scenario(who: &str) -> &'static str {
    if who == LOADGEN {
        FLEET_FLOOR_SCENARIO
    } else {
        FLEET_SCENARIO
    }
}

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
        // The machine as it is before any server starts (stalls.rs).
        self.machine_stalls("start", self.stalls_length());
        if let Err(e) = self.start_http_server() {
            eprintln!("albedo-mcp-bench: {e}");
            return 1;
        }
        let steps: [(&str, Step); 8] = [
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
            ("instructions", |b| {
                // Not in the quick run: a daemon under valgrind takes a minute.
                if !b.opts.quick {
                    b.instructions();
                }
            }),
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

    /// The bench's HTTP server as the floors reach it: its process id and its address.
    fn http_floor_server(&self) -> Option<(i32, String)> {
        let (p, port) = self.http.as_ref()?;
        Some((p.pid(), format!("127.0.0.1:{port}")))
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
        let (cmd, j) = self.client_command(who, job)?;
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

    /// The command that runs client `who` on `job`, and the job as that client is given it;
    /// `None` for a client this run left out.
    fn client_command(&self, who: &str, job: &Value) -> Option<(Command, Value)> {
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
        Some((cmd, j))
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
            // The TypeScript client's levels have no mean; albedo's and rmcp's do.
            if l["mean_us"].is_number() {
                r["mean_us"] = l["mean_us"].clone();
            }
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
}

/// One scenario of the run.
type Step = fn(&mut Bench);

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
                || k.starts_with("client_kib")
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
    if r["instructions_per_call"].is_number() {
        println!(
            "{head} {:5} {:>9} instructions per call ({:>9} without memset and sha2), {:.1} mallocs",
            r["transport"].as_str().unwrap_or("?"),
            r["instructions_per_call"],
            r["instructions_per_call_without_emulated"],
            f("mallocs_per_call")
        );
    } else if r["calls_per_s"].is_number() {
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

/// The cores this run may use (0 when the system does not say).
fn cores() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(0)
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
    let cores = cores();
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
