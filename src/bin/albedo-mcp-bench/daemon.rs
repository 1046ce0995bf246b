//! The daemon under test: starting it (`__daemon`, its home, its token, `perf record` when
//! asked), sessions through its API, and the load generator's loops over TCP or its socket,
//! with the daemon's CPU time measured around them.
//!
//! Owns: the daemon's process and the API load. Must not touch: the records' meaning (each
//! scenario names its own).

use super::*;

impl Bench {
    pub(crate) fn start_daemon(&mut self, name: &str, ext: &Value) -> Option<Daemon> {
        self.start_daemon_under(name, ext, &[], Duration::from_secs(20))
    }

    /// The daemon run by `wrapper` (a program and its arguments, before the daemon's own
    /// command line), given `wait` to be ready.
    pub(crate) fn start_daemon_under(
        &mut self,
        name: &str,
        ext: &Value,
        wrapper: &[String],
        wait: Duration,
    ) -> Option<Daemon> {
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
        let mut cmd = match wrapper {
            [program, args @ ..] => {
                let mut c = Command::new(program);
                c.args(args).arg(&self.exe);
                c
            }
            [] => Command::new(&self.exe),
        };
        let child = cmd
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
        match procs::wait_file(&ready, wait) {
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

    pub(crate) fn open_session_view(&mut self, d: &Daemon) -> Option<(String, Value)> {
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

    pub(crate) fn open_session(&mut self, d: &Daemon) -> Option<String> {
        let (id, view) = self.open_session_view(d)?;
        let want = view["servers"].as_array().map(Vec::len).unwrap_or(0);
        let got = count_connected(&view);
        if got < want {
            self.fail(format!("only {got} of {want} servers connected: {view}"));
        }
        Some(id)
    }

    pub(crate) fn get_json(&self, d: &Daemon, path: &str) -> Option<Value> {
        self.rt.block_on(async {
            let mut c = d.conn();
            let (st, body) = c.request("GET", path, None).await.ok()?;
            (st == 200).then(|| serde_json::from_slice(&body).ok())?
        })
    }

    /// The host's first submit: it starts the background checks of saved catalogues.
    pub(crate) fn submit(&mut self, d: &Daemon, id: &str) {
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

    pub(crate) fn delete_session(&mut self, d: &Daemon, id: &str) {
        let _ = self.rt.block_on(async {
            let mut c = d.conn();
            c.request("DELETE", &format!("/sessions/{id}"), None).await
        });
    }

    /// The scale load over `paths`: its record, and the daemon's memory right after.
    pub(crate) fn scale_load(&self, d: &Daemon, paths: &[String], scenario: &str) -> (Value, u64) {
        let c = self.sizes.scale_concurrency;
        let r = self.api_load(d, paths, c, self.sizes.scale_duration_ms);
        let busy = procs::rss_kib(d.pid());
        (r.record(scenario, API, c), busy)
    }

    /// Calls through the API: `concurrency` connections, round robin over `paths`, time-boxed
    /// after a warm-up.
    pub(crate) fn api_load(
        &self,
        d: &Daemon,
        paths: &[String],
        concurrency: usize,
        duration_ms: u64,
    ) -> LoadResult {
        self.api_load_via(d, None, paths, concurrency, duration_ms)
    }

    /// [`Self::api_load`] over TCP, or over the daemon's Unix socket at `socket`.
    pub(crate) fn api_load_via(
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
    pub(crate) fn timed_load(
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
    pub(crate) fn api_ways(&mut self, d: &Daemon) -> Vec<(&'static str, Option<PathBuf>)> {
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
    pub(crate) fn api_count(
        &self,
        d: &Daemon,
        socket: Option<PathBuf>,
        path: &str,
        body: &[u8],
        calls: u64,
    ) -> LoadResult {
        self.count_on(d.conn_via(socket.as_ref()), d.pid(), path, body, 0, calls)
    }

    /// `calls` sequential posts of `body` to `path` on `conn`, after `warm` unmeasured ones
    /// on the same connection, with the CPU of process `pid`.
    pub(crate) fn count_on(
        &self,
        conn: httpc::Conn,
        pid: i32,
        path: &str,
        body: &[u8],
        warm: u64,
        calls: u64,
    ) -> LoadResult {
        self.rt.block_on(async {
            let mut conns = vec![conn];
            let far = Instant::now() + Duration::from_secs(3600);
            let path = [path.to_owned()];
            if warm > 0 {
                load(&mut conns, &path, body, far, Some(warm)).await;
            }
            measured(pid, load(&mut conns, &path, body, far, Some(calls))).await
        })
    }
}

pub(crate) struct Daemon {
    perf: Option<Proc>,
    proc_: Proc,
    pub(crate) addr: String,
    pub(crate) home: PathBuf,
    /// Its API token (`$ALBEDO_HOME/api-token`), sent on every request.
    token: String,
}

impl Daemon {
    /// A keep-alive connection to the daemon's API, with its token.
    pub(crate) fn conn(&self) -> httpc::Conn {
        httpc::Conn::new(&self.addr, &self.token)
    }

    /// A connection over TCP (with the token), or over the daemon's socket at `socket`.
    pub(crate) fn conn_via(&self, socket: Option<&PathBuf>) -> httpc::Conn {
        match socket {
            Some(p) => httpc::Conn::unix(p.clone()),
            None => self.conn(),
        }
    }

    pub(crate) fn pid(&self) -> i32 {
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
pub(crate) struct LoadResult {
    lat: Vec<u32>,
    pub(crate) bytes: u64,
    pub(crate) errors: u64,
    pub(crate) elapsed_s: f64,
    cpu_us: u64,
    /// The load generator's own CPU meanwhile (its thread's).
    loadgen_cpu_us: u64,
}

impl LoadResult {
    pub(crate) fn record(&self, scenario: &str, who: &str, c: usize) -> Value {
        let calls = self.lat.len() as u64;
        let mut r = json!({
            "scenario": scenario,
            "client": who,
            "concurrency": c,
            "calls": calls,
            "calls_per_s": if self.elapsed_s > 0.0 { calls as f64 / self.elapsed_s } else { 0.0 },
            "p50_us": measure::pct(&self.lat, 0.5),
            "p99_us": measure::pct(&self.lat, 0.99),
            "mean_us": measure::mean(&self.lat),
            "cpu_us_per_call": if calls > 0 { self.cpu_us as f64 / calls as f64 } else { 0.0 },
            "loadgen_cpu_us_per_call":
                if calls > 0 { self.loadgen_cpu_us as f64 / calls as f64 } else { 0.0 },
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
pub(crate) async fn measured(
    pid: i32,
    work: impl std::future::Future<Output = (Vec<u32>, u64, u64)>,
) -> LoadResult {
    let cpu0 = procs::cpu_us_of(pid);
    let own0 = measure::thread_cpu_us();
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
        loadgen_cpu_us: measure::thread_cpu_us().saturating_sub(own0),
    }
}

/// Calls on every connection in `conns` until `until` (or `calls` in all).
pub(crate) async fn load(
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
