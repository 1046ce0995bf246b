//! Child processes of the benchmark (killed when dropped), JSON from a client's output, and
//! what /proc says about the daemon: resident memory, its high-water mark (reset through
//! `clear_refs`) and CPU time.

use serde_json::Value;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A child process that is ended (SIGTERM, then SIGKILL) and reaped when dropped.
pub struct Proc {
    pub child: Child,
}

impl Proc {
    /// Start `cmd` with no stdin and its output dropped (a server the bench reaches over
    /// HTTP).
    pub fn quiet(cmd: &mut Command) -> Option<Proc> {
        cmd.stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .ok()
            .map(|child| Proc { child })
    }

    pub fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    pub fn stop(&mut self) {
        if let Ok(Some(_)) = self.child.try_wait() {
            return;
        }
        let t = Instant::now();
        let pid = nix::unistd::Pid::from_raw(self.pid());
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                if std::env::var_os("BENCH_DEBUG").is_some() {
                    eprintln!("stopped {} in {:?}", self.pid(), t.elapsed());
                }
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Run a client and parse the JSON line it prints last; `Err` with its stderr's tail.
pub fn run_json(mut cmd: Command, limit: Duration) -> Result<Value, String> {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().map_err(|e| format!("cannot start: {e}"))?;
    let mut out = child.stdout.take().expect("piped");
    let mut err = child.stderr.take().expect("piped");
    let t_out = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = out.read_to_string(&mut s);
        s
    });
    let t_err = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = err.read_to_string(&mut s);
        s
    });
    let deadline = Instant::now() + limit;
    let mut timed_out = false;
    loop {
        match child.try_wait() {
            Ok(Some(_)) => break,
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(10)),
            _ => {
                timed_out = true;
                let _ = child.kill();
                let _ = child.wait();
                break;
            }
        }
    }
    let stdout = t_out.join().unwrap_or_default();
    let stderr = t_err.join().unwrap_or_default();
    let tail: String = {
        let lines: Vec<&str> = stderr.lines().collect();
        lines[lines.len().saturating_sub(5)..].join(" | ")
    };
    let last = stdout
        .lines()
        .rev()
        .find(|l| l.trim_start().starts_with('{'));
    match last.map(serde_json::from_str::<Value>) {
        Some(Ok(v)) if v.get("error").is_none() => Ok(v),
        Some(Ok(v)) => Err(format!("{} {tail}", v["error"])),
        _ if timed_out => Err(format!("no answer within {} s {tail}", limit.as_secs())),
        _ => Err(format!("no result; stderr: {tail}")),
    }
}

fn status_field(pid: i32, key: &str) -> u64 {
    crate::measure::status_kib(&pid.to_string(), key)
}

/// Resident memory in KiB.
pub fn rss_kib(pid: i32) -> u64 {
    status_field(pid, "VmRSS:")
}

/// Peak resident memory in KiB since the start or the last [`reset_hwm`].
pub fn hwm_kib(pid: i32) -> u64 {
    status_field(pid, "VmHWM:")
}

/// Reset the high-water mark to the current resident size (Linux 4.0+, needs the right to
/// write the process's clear_refs: the same user).
pub fn reset_hwm(pid: i32) -> bool {
    std::fs::write(format!("/proc/{pid}/clear_refs"), "5").is_ok()
}

/// User plus system CPU time of a process (all its threads, living or gone), in µs.
pub fn cpu_us_of(pid: i32) -> u64 {
    let Ok(s) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return 0;
    };
    let rest = s.rsplit(')').next().unwrap_or("");
    let f: Vec<&str> = rest.split_whitespace().collect();
    // Fields after the command: state is 3, utime 14, stime 15 (1-based in proc(5)).
    let ticks: u64 = f.get(11).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0)
        + f.get(12).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
    ticks * 1_000_000 / clock_ticks_per_s()
}

/// The kernel's clock ticks per second, the unit of /proc's CPU times.
fn clock_ticks_per_s() -> u64 {
    unsafe { nix::libc::sysconf(nix::libc::_SC_CLK_TCK) }.max(1) as u64
}

/// The machine's steal time so far, all cores together, in ms: time the hypervisor ran
/// something else while a vCPU had work (the `cpu` line of /proc/stat, its eighth value);
/// `None` where the file does not say.
pub fn steal_ms() -> Option<f64> {
    let s = std::fs::read_to_string("/proc/stat").ok()?;
    let line = s.lines().find(|l| l.starts_with("cpu "))?;
    let ticks: u64 = line.split_whitespace().nth(8)?.parse().ok()?;
    Some(ticks as f64 * 1000.0 / clock_ticks_per_s() as f64)
}

/// The steal time since `start` (a [`steal_ms`] read earlier), in ms.
pub fn steal_ms_since(start: Option<f64>) -> Option<f64> {
    start.zip(steal_ms()).map(|(a, b)| b - a)
}

/// A free TCP port on 127.0.0.1 (bound and released).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap_or(0)
}

/// Wait until something accepts connections on 127.0.0.1:port.
pub fn wait_port(port: u16, limit: Duration) -> bool {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(25));
    }
    false
}

/// Wait for a file with content (a port or an address) and return its first line.
pub fn wait_file(path: &Path, limit: Duration) -> Option<String> {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if let Ok(s) = std::fs::read_to_string(path) {
            if let Some(l) = s.lines().next().filter(|l| !l.trim().is_empty()) {
                return Some(l.trim().to_owned());
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    None
}

/// Raise the soft limit of open files to the hard limit (1,000 connections need more than
/// 1,024 descriptors); children inherit it.
pub fn raise_nofile() {
    unsafe {
        let mut r = nix::libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        if nix::libc::getrlimit(nix::libc::RLIMIT_NOFILE, &mut r) == 0 && r.rlim_cur < r.rlim_max {
            r.rlim_cur = r.rlim_max.min(1 << 20);
            nix::libc::setrlimit(nix::libc::RLIMIT_NOFILE, &r);
        }
    }
}

/// A scratch folder removed when dropped.
pub struct Scratch(pub PathBuf);

impl Scratch {
    pub fn new() -> Scratch {
        let p = std::env::temp_dir().join(format!("albedo-bench-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        let _ = std::fs::create_dir_all(&p);
        Scratch(p)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
