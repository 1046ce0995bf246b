//! Shared test harness: start the real daemon binary on a temporary `$ALBEDO_HOME`, talk to
//! its HTTP API (with the API token from `$ALBEDO_HOME/api-token`, as every local client
//! does over TCP), and find the real peers installed by `tests/peers/install.sh`.
#![allow(dead_code)]

pub mod browser;
pub mod oauth;
pub mod rss;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

pub fn peers() -> PathBuf {
    std::env::var_os("ALBEDO_PEERS")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo().join(".peers"))
}

pub fn venv_python() -> String {
    peers().join("venv/bin/python").display().to_string()
}

pub fn everything_js() -> String {
    peers()
        .join("npm/node_modules/@modelcontextprotocol/server-everything/dist/index.js")
        .display()
        .to_string()
}

pub fn filesystem_js() -> String {
    peers()
        .join("npm/node_modules/@modelcontextprotocol/server-filesystem/dist/index.js")
        .display()
        .to_string()
}

pub fn fixture(name: &str) -> String {
    repo()
        .join("tests/fixtures")
        .join(name)
        .display()
        .to_string()
}

pub fn server_script(name: &str) -> String {
    repo()
        .join("tests/servers")
        .join(name)
        .display()
        .to_string()
}

pub fn launcher() -> String {
    env!("CARGO_BIN_EXE_albedo-mcp").to_owned()
}

/// A stdio server definition running a fixture with the venv's python.
pub fn fixture_server(name: &str, extra: &[&str]) -> Value {
    let mut args = vec![fixture(name)];
    args.extend(extra.iter().map(|s| s.to_string()));
    json!({"type": "stdio", "command": venv_python(), "args": args})
}

/// The API token a daemon made in its home (`api-token`), once it is there.
pub fn home_token(home: &Path) -> String {
    std::fs::read_to_string(home.join("api-token"))
        .map(|s| s.trim().to_owned())
        .unwrap_or_default()
}

/// A running daemon on its own home folder; killed when dropped.
pub struct Daemon {
    pub child: Option<Child>,
    pub base: String,
    pub home: tempfile::TempDir,
}

impl Daemon {
    /// Start with `extensions.json` = `ext`.
    pub fn start(ext: Value) -> Daemon {
        Self::start_env(ext, &[])
    }

    pub fn start_env(ext: Value, env: &[(&str, &str)]) -> Daemon {
        let home = tempfile::tempdir().expect("tempdir");
        std::fs::write(
            home.path().join("extensions.json"),
            serde_json::to_vec_pretty(&ext).unwrap(),
        )
        .unwrap();
        Self::start_in(home, env)
    }

    pub fn start_in(home: tempfile::TempDir, env: &[(&str, &str)]) -> Daemon {
        let ready = home.path().join("ready");
        let _ = std::fs::remove_file(&ready);
        let mut cmd = Command::new(launcher());
        cmd.args(["serve", "--listen", "127.0.0.1:0", "--ready-file"])
            .arg(&ready)
            .env("ALBEDO_HOME", home.path())
            .env("ALBEDO_LOG", "albedo_mcp=debug,info")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(
                std::fs::File::create(home.path().join("daemon.log"))
                    .map(Stdio::from)
                    .unwrap_or(Stdio::null()),
            );
        for (k, v) in env {
            cmd.env(k, v);
        }
        let child = cmd.spawn().expect("start the daemon");
        let deadline = Instant::now() + Duration::from_secs(20);
        let addr = loop {
            if let Ok(s) = std::fs::read_to_string(&ready) {
                if !s.is_empty() {
                    break s.lines().next().unwrap_or("").to_owned();
                }
            }
            assert!(Instant::now() < deadline, "the daemon did not start");
            std::thread::sleep(Duration::from_millis(20));
        };
        Daemon {
            child: Some(child),
            base: format!("http://{addr}"),
            home,
        }
    }

    /// The daemon's `$ALBEDO_HOME`: `home`, unless the process was given another one (a test
    /// that keeps its log elsewhere), read from its environment.
    pub fn albedo_home(&self) -> PathBuf {
        let from_env = std::fs::read(format!("/proc/{}/environ", self.pid()))
            .ok()
            .and_then(|env| {
                env.split(|&b| b == 0)
                    .find_map(|kv| kv.strip_prefix(b"ALBEDO_HOME="))
                    .map(|v| PathBuf::from(String::from_utf8_lossy(v).into_owned()))
            });
        from_env.unwrap_or_else(|| self.home.path().to_path_buf())
    }

    /// Its API token as its home holds it now (every helper below sends it as
    /// `Authorization: Bearer`).
    pub fn token(&self) -> String {
        home_token(&self.albedo_home())
    }

    /// The `Authorization` header's value for this daemon.
    pub fn bearer(&self) -> String {
        format!("Bearer {}", self.token())
    }

    /// A request to this daemon with its token.
    pub fn request(&self, method: &str, path: &str) -> ureq::Request {
        ureq::request(method, &format!("{}{}", self.base, path))
            .set("Authorization", &self.bearer())
    }

    /// Any request (a JSON body or none), within 120 s: its status and the answer's text as
    /// sent (for tests that look for secrets in every answer).
    pub fn text(&self, method: &str, path: &str, body: Option<Value>) -> (u16, String) {
        let r = self.request(method, path).timeout(Duration::from_secs(120));
        let r = match body {
            Some(b) => r.send_json(b),
            None => r.call(),
        };
        match r {
            Ok(r) => (r.status(), r.into_string().unwrap_or_default()),
            Err(ureq::Error::Status(st, r)) => (st, r.into_string().unwrap_or_default()),
            Err(e) => panic!("{method} {path}: {e}"),
        }
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.home.path().join("daemon.log")).unwrap_or_default()
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().map(|c| c.id()).unwrap_or(0)
    }

    /// Stop the daemon with a signal and wait for it; returns the exit status code.
    /// Stop with SIGTERM (it must exit 0) and start again on the same home.
    pub fn restart(mut self) -> Daemon {
        let home = std::mem::replace(&mut self.home, tempfile::tempdir().unwrap());
        assert_eq!(self.stop(15), Some(0), "the daemon did not stop cleanly");
        drop(self);
        Daemon::start_in(home, &[])
    }

    pub fn stop(&mut self, signal: i32) -> Option<i32> {
        let mut child = self.child.take()?;
        unsafe {
            libc_kill(child.id() as i32, signal);
        }
        child.wait().ok().and_then(|s| s.code())
    }

    pub fn get(&self, path: &str) -> (u16, Value) {
        response(self.request("GET", path).call())
    }

    pub fn post(&self, path: &str, body: Value) -> (u16, Value) {
        response(
            self.request("POST", path)
                .timeout(Duration::from_secs(120))
                .send_json(body),
        )
    }

    pub fn put(&self, path: &str, body: Value) -> (u16, Value) {
        response(self.request("PUT", path).send_json(body))
    }

    pub fn delete(&self, path: &str) -> u16 {
        match self.request("DELETE", path).call() {
            Ok(r) => r.status(),
            Err(ureq::Error::Status(s, _)) => s,
            Err(e) => panic!("DELETE {path}: {e}"),
        }
    }

    /// Create a session and return its id and view.
    pub fn session(&self, body: Value) -> (String, Value) {
        let (st, v) = self.post("/sessions", body);
        assert_eq!(st, 201, "{v}");
        (v["id"].as_str().unwrap().to_owned(), v)
    }

    pub fn tool_names(&self, id: &str) -> Vec<String> {
        let (_, v) = self.get(&format!("/sessions/{id}/tools"));
        v["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["name"].as_str().unwrap().to_owned())
            .collect()
    }

    pub fn call(&self, id: &str, tool: &str, args: Value) -> (u16, Value) {
        self.post(
            &format!("/sessions/{id}/tools/{tool}/call"),
            json!({ "arguments": args }),
        )
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        self.stop(15);
    }
}

fn response(r: Result<ureq::Response, ureq::Error>) -> (u16, Value) {
    match r {
        Ok(r) => {
            let st = r.status();
            (st, r.into_json().unwrap_or(Value::Null))
        }
        Err(ureq::Error::Status(st, r)) => (st, r.into_json().unwrap_or(Value::Null)),
        Err(e) => panic!("request failed: {e}"),
    }
}

extern "C" {
    #[link_name = "kill"]
    fn libc_kill(pid: i32, sig: i32) -> i32;
}

/// Whether a process exists (a zombie counts as gone).
pub fn alive(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(s) => {
            let state = s.rsplit(')').next().unwrap_or("").trim_start();
            !state.starts_with('Z') && !state.starts_with('X')
        }
        Err(_) => false,
    }
}

/// Wait until `f` holds or the time is up.
pub fn wait_until(limit: Duration, mut f: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(25));
    }
    f()
}

/// Poll `f` on tokio's timer (for async tests) until it holds or `limit` passes.
pub async fn eventually(limit: Duration, mut f: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if f() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    f()
}

pub fn read_pid(path: &Path) -> Option<i32> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

/// Lines a fixture logged (one JSON message each).
pub fn logged(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

/// An HTTP MCP server started by a test on 127.0.0.1, killed when dropped. It runs in its
/// own folder (`dir`), where its stderr goes (`stderr`) and where it may log.
pub struct HttpPeer {
    pub child: Child,
    pub url: String,
    pub dir: tempfile::TempDir,
}

impl HttpPeer {
    /// Start `program args... --port-file DIR/port` in a fresh folder and wait for the port.
    pub fn start(program: &str, args: &[String]) -> HttpPeer {
        Self::start_in(tempfile::tempdir().unwrap(), program, args, "http")
    }

    /// The same in a given folder (for arguments that name files in it), with the scheme
    /// of the URL to give out.
    pub fn start_in(
        dir: tempfile::TempDir,
        program: &str,
        args: &[String],
        scheme: &str,
    ) -> HttpPeer {
        let pf = dir.path().join("port");
        let mut child = Command::new(program)
            .args(args)
            .arg("--port-file")
            .arg(&pf)
            .env("FASTMCP_CHECK_FOR_UPDATES", "off")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Self::stderr_file(&dir))
            .spawn()
            .unwrap_or_else(|e| panic!("{program} (tests/peers/install.sh): {e}"));
        let port = Self::wait(&mut child, || {
            std::fs::read_to_string(&pf)
                .ok()
                .and_then(|s| s.trim().parse().ok())
        });
        HttpPeer {
            child,
            url: format!("{scheme}://127.0.0.1:{port}/mcp"),
            dir,
        }
    }

    /// The Python `mcp` server over HTTP behind the SDK's own bearer-token check
    /// (`--require-token-file`): a request without `Authorization: Bearer <token>` gets 401.
    pub fn py_with_token(token: &str) -> HttpPeer {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("token");
        std::fs::write(&file, token).unwrap();
        let file = file.display().to_string();
        Self::start_in(
            dir,
            &venv_python(),
            &[
                server_script("py_mcp_server.py"),
                "--transport".into(),
                "http".into(),
                "--require-token-file".into(),
                file,
            ],
            "http",
        )
    }

    /// server-everything in `streamableHttp` mode (it takes its port from `PORT`).
    pub fn everything() -> HttpPeer {
        let dir = tempfile::tempdir().unwrap();
        let port = free_port();
        let mut child = Command::new("node")
            .arg("--require")
            .arg(repo().join("tests/peers/localhost.cjs"))
            .arg(everything_js())
            .arg("streamableHttp")
            .env("PORT", port.to_string())
            .stdin(Stdio::null())
            // It logs its sessions there ("Session initialized with ID: ...").
            .stdout(
                std::fs::File::create(dir.path().join("stdout"))
                    .map(Stdio::from)
                    .unwrap_or(Stdio::null()),
            )
            .stderr(Self::stderr_file(&dir))
            .spawn()
            .expect("node and server-everything (tests/peers/install.sh)");
        Self::wait(&mut child, || {
            std::net::TcpStream::connect(("127.0.0.1", port))
                .ok()
                .map(|_| port)
        });
        HttpPeer {
            child,
            url: format!("http://127.0.0.1:{port}/mcp"),
            dir,
        }
    }

    fn stderr_file(dir: &tempfile::TempDir) -> Stdio {
        std::fs::File::create(dir.path().join("stderr"))
            .map(Stdio::from)
            .unwrap_or(Stdio::null())
    }

    /// Wait up to 30 s for `listening` to give the port; a server that exits first fails.
    fn wait(child: &mut Child, mut listening: impl FnMut() -> Option<u16>) -> u16 {
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if let Some(p) = listening() {
                return p;
            }
            if let Ok(Some(st)) = child.try_wait() {
                panic!("the server exited before listening: {st}");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("the server did not start listening within 30 s");
    }

    /// A file in the server's folder.
    pub fn file(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// What the server wrote on stderr.
    pub fn stderr(&self) -> String {
        std::fs::read_to_string(self.file("stderr")).unwrap_or_default()
    }

    /// server-everything: the ids of the sessions it opened so far, oldest first (from its
    /// stdout).
    pub fn everything_sessions(&self) -> Vec<String> {
        std::fs::read_to_string(self.file("stdout"))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.strip_prefix("Session initialized with ID: "))
            .map(|s| s.trim().to_owned())
            .collect()
    }
}

impl Drop for HttpPeer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A port nothing listens on right now.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// `(state, ppid, pgrp)` of a process, from `/proc/<pid>/stat`.
pub fn proc_stat(pid: i32) -> Option<(char, i32, i32)> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name is in parentheses and may hold spaces; the rest follows the last ')'.
    let mut rest = s.rsplit_once(')')?.1.split_whitespace();
    let state = rest.next()?.chars().next()?;
    let ppid = rest.next()?.parse().ok()?;
    let pgrp = rest.next()?.parse().ok()?;
    Some((state, ppid, pgrp))
}

fn all_pids() -> Vec<i32> {
    std::fs::read_dir("/proc")
        .map(|d| {
            d.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

/// Every live (not zombie) descendant of `root`.
pub fn descendants(root: i32) -> Vec<i32> {
    let table: Vec<(i32, i32)> = all_pids()
        .into_iter()
        .filter_map(|p| {
            proc_stat(p)
                .filter(|(st, _, _)| *st != 'Z' && *st != 'X')
                .map(|(_, pp, _)| (p, pp))
        })
        .collect();
    let mut out = Vec::new();
    let mut frontier = vec![root];
    while let Some(p) = frontier.pop() {
        for &(c, pp) in &table {
            if pp == p && !out.contains(&c) {
                out.push(c);
                frontier.push(c);
            }
        }
    }
    out
}

/// Live (not zombie) members of a process group.
pub fn group_members(pgid: i32) -> Vec<i32> {
    all_pids()
        .into_iter()
        .filter(
            |&p| matches!(proc_stat(p), Some((st, _, g)) if g == pgid && st != 'Z' && st != 'X'),
        )
        .collect()
}

/// The command line of a process, one entry per argument.
pub fn cmdline(pid: i32) -> Vec<String> {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|b| {
            b.split(|&c| c == 0)
                .filter(|a| !a.is_empty())
                .map(|a| String::from_utf8_lossy(a).into_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// Whether `ALBEDO_TEST_REQUIRE_<WHAT>` is set to 1: CI (`.ci/run`) set the dependency up, so a
/// test must not pass without it.
pub fn required(what: &str) -> bool {
    std::env::var(format!("ALBEDO_TEST_REQUIRE_{what}")).as_deref() == Ok("1")
}

/// A CA and a server certificate for 127.0.0.1, made with the openssl command.
///
/// Panics without openssl: the TLS tests never pass without running.
pub fn make_certs(dir: &Path) -> (PathBuf, PathBuf, PathBuf) {
    make_certs_with_openssl(dir).expect("openssl is needed to make test certificates")
}

fn make_certs_with_openssl(dir: &Path) -> Option<(PathBuf, PathBuf, PathBuf)> {
    let run = |args: &[&str]| {
        Command::new("openssl")
            .args(args)
            .current_dir(dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .map(|s| s.success())
            .unwrap_or(false)
    };
    std::fs::write(
        dir.join("ext.cnf"),
        "subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=CA:FALSE\n",
    )
    .ok()?;
    let ok = run(&[
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-days",
        "2",
        "-subj",
        "/CN=albedo test CA",
        "-keyout",
        "ca.key",
        "-out",
        "ca.pem",
    ]) && run(&[
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-subj",
        "/CN=127.0.0.1",
        "-keyout",
        "server.key",
        "-out",
        "server.csr",
    ]) && run(&[
        "x509",
        "-req",
        "-in",
        "server.csr",
        "-CA",
        "ca.pem",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-days",
        "2",
        "-extfile",
        "ext.cnf",
        "-out",
        "server.pem",
    ]);
    ok.then(|| {
        (
            dir.join("ca.pem"),
            dir.join("server.pem"),
            dir.join("server.key"),
        )
    })
}

/// A `--tools-json` file in `dir` whose catalogue is about 9.6 MiB, over the 8 MiB limit:
/// 200 tools with 48 KiB descriptions (each line stays under the 16 MiB message cap).
pub fn oversized_tools_json(dir: &Path) -> PathBuf {
    let big = dir.join("tools.json");
    let tools: Vec<Value> = (0..200)
        .map(|i| {
            json!({"name": format!("t{i}"), "description": "d".repeat(48 * 1024),
                   "inputSchema": {"type": "object"}})
        })
        .collect();
    std::fs::write(&big, serde_json::to_vec(&tools).unwrap()).unwrap();
    big
}

/// The `http_faults.py` fixture server on a free port, logging every request to
/// `requests.log` in its folder (returned), with `extra` flags.
pub fn http_faults(extra: &[&str]) -> (HttpPeer, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("requests.log");
    let mut args = vec![
        fixture("http_faults.py"),
        "--port".into(),
        "0".into(),
        "--log".into(),
        log.display().to_string(),
    ];
    args.extend(extra.iter().map(|s| s.to_string()));
    (HttpPeer::start_in(dir, &venv_python(), &args, "http"), log)
}

/// `tests/servers/fastmcp_oauth.py` (FastMCP with its in-memory OAuth provider, see its
/// docstring) in a fresh folder that is also its record folder (`counts.json`, `issued.txt`),
/// with `extra` flags; `{dir}` in a flag stands for that folder.
pub fn fastmcp_oauth(extra: &[&str]) -> HttpPeer {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().display().to_string();
    let mut args = vec![
        server_script("fastmcp_oauth.py"),
        "--record-dir".into(),
        d.clone(),
    ];
    args.extend(extra.iter().map(|s| s.replace("{dir}", &d)));
    HttpPeer::start_in(dir, &venv_python(), &args, "http")
}

/// The TypeScript SDK v1 example `simpleStreamableHttp.js --oauth` (`extra`: e.g.
/// `--oauth-strict`): the MCP server on `MCP_PORT` and its demo authorization server
/// (dynamic registration, auto-approving `/authorize`) on `MCP_AUTH_PORT`, both bound to
/// 127.0.0.1 by `localhost.cjs`. Its URL is `http://localhost:PORT/mcp`, the resource its
/// metadata names.
pub fn ts_oauth_example(extra: &[&str]) -> HttpPeer {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let auth_port = loop {
        let p = free_port();
        if p != port {
            break p;
        }
    };
    let example = peers()
        .join("npm/node_modules/@modelcontextprotocol/sdk/dist/esm/examples/server/simpleStreamableHttp.js");
    let mut child = Command::new("node")
        .arg("--require")
        .arg(repo().join("tests/peers/localhost.cjs"))
        .arg(example)
        .arg("--oauth")
        .args(extra)
        .env("MCP_PORT", port.to_string())
        .env("MCP_AUTH_PORT", auth_port.to_string())
        .stdin(Stdio::null())
        .stdout(
            std::fs::File::create(dir.path().join("stdout"))
                .map(Stdio::from)
                .unwrap_or(Stdio::null()),
        )
        .stderr(HttpPeer::stderr_file(&dir))
        .spawn()
        .expect("node and the TypeScript SDK (tests/peers/install.sh)");
    HttpPeer::wait(&mut child, || {
        [port, auth_port]
            .iter()
            .all(|p| std::net::TcpStream::connect(("127.0.0.1", *p)).is_ok())
            .then_some(port)
    });
    HttpPeer {
        child,
        url: format!("http://localhost:{port}/mcp"),
        dir,
    }
}
