//! The stdio launcher: `albedo-mcp launch -- <command> <args...>`.
//!
//! The daemon never spawns a server directly. It spawns this launcher, which stays the
//! server's parent and puts it in a process group of its own. The server inherits the
//! launcher's stdin and stdout (no copying); the launcher keeps only a control pipe (on the
//! descriptor named by `ALBEDO_MCP_CONTROL_FD`, else fd 3), whose write end the daemon
//! holds. When that pipe reaches EOF (the daemon closed the connection, or the daemon died,
//! even by SIGKILL, since the kernel closes its descriptors)
//! the launcher gives the server two seconds to exit after its stdin closed, then sends the
//! group SIGTERM, and after two more seconds SIGKILL. So no server outlives the daemon.
//!
//! A SIGTERM sent to the daemon's process group (a service manager stopping it) reaches the
//! launcher too: it survives it and runs the same close sequence. The server starts with
//! SIGINT, SIGHUP, SIGPIPE and SIGTERM at their defaults and nothing blocked, gets
//! `PR_SET_PDEATHSIG` (SIGKILL when the launcher dies, even by SIGKILL), and the launcher is
//! a child subreaper: a descendant that leaves the group with `setsid` is reparented to the
//! launcher, which ends it with the rest. When the launcher ends and `waitpid` says it has no
//! child left (the usual end), it looks no further; while some remain it finds them in its
//! threads' `/proc/self/task/*/children`, and only on a kernel without those files in every
//! process's `/proc/*/stat` (a read per process on the machine: with 1,000 processes, some
//! 20 ms of CPU for each server that ended).
//!
//! The server's stderr is discarded, unless the daemon passed a pipe for it (its descriptor
//! in `ALBEDO_MCP_STDERR_FD`, to try one server and show what it said): then the server
//! writes there, and the launcher's own stderr still carries only the launcher's errors.
//!
//! Owns: one server process group. Must not touch: anything but std and nix; it runs in its
//! own tiny process, before any runtime exists.

use nix::sys::signal::{kill, killpg, signal, SigHandler, SigSet, SigmaskHow, Signal};
use nix::unistd::Pid;
use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// The file descriptor on which the launcher finds its control pipe, unless
/// [`CONTROL_FD_ENV`] names another.
pub const CONTROL_FD: i32 = 3;
/// The environment variable naming the control pipe's descriptor (set by the stdio
/// transport, which passes the pipe without a `pre_exec` hook; never passed to the server).
pub const CONTROL_FD_ENV: &str = "ALBEDO_MCP_CONTROL_FD";
/// The environment variable naming a pipe for the server's stderr (set by the stdio
/// transport only when it captures it; never passed to the server). Without it the server's
/// stderr is `/dev/null`.
pub const STDERR_FD_ENV: &str = "ALBEDO_MCP_STDERR_FD";
/// How long the server gets after its stdin closed, and again after SIGTERM.
pub const GRACE: Duration = Duration::from_secs(2);

enum Event {
    ControlClosed,
    Terminated,
    ChildExited(i32),
}

/// Run the launcher; returns the process exit code.
pub fn run(command: &str, args: &[String]) -> i32 {
    // A terminal's Ctrl-C reaches the daemon's group; the daemon then closes us in order.
    unsafe {
        let _ = signal(Signal::SIGINT, SigHandler::SigIgn);
        let _ = signal(Signal::SIGHUP, SigHandler::SigIgn);
        let _ = signal(Signal::SIGPIPE, SigHandler::SigIgn);
    }
    // SIGTERM is taken by a thread (below) instead of ending the launcher: block it before
    // any thread starts, so every thread inherits the mask.
    let mut term = SigSet::empty();
    term.add(Signal::SIGTERM);
    let _ = nix::sys::signal::pthread_sigmask(SigmaskHow::SIG_BLOCK, Some(&term), None);
    // Orphaned descendants (one that called setsid, then lost its parent) come to us.
    unsafe {
        nix::libc::prctl(nix::libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
    }
    // Take the control pipe; make sure the server does not inherit it.
    let control_fd = std::env::var(CONTROL_FD_ENV)
        .ok()
        .and_then(|v| v.parse::<i32>().ok())
        .filter(|fd| *fd > 2)
        .unwrap_or(CONTROL_FD);
    let control = unsafe { OwnedFd::from_raw_fd(control_fd) };
    let _ = nix::fcntl::fcntl(
        &control,
        nix::fcntl::FcntlArg::F_SETFD(nix::fcntl::FdFlag::FD_CLOEXEC),
    );
    let mut cmd = Command::new(command);
    cmd.args(args)
        .env_remove(CONTROL_FD_ENV)
        .env_remove(STDERR_FD_ENV)
        .stdin(Stdio::inherit())
        .stdout(Stdio::inherit())
        .stderr(server_stderr(control_fd))
        .process_group(0);
    // In the child, between fork and exec: only async-signal-safe calls (sigaction,
    // sigprocmask, prctl).
    unsafe {
        cmd.pre_exec(|| {
            for sig in [
                nix::libc::SIGINT,
                nix::libc::SIGHUP,
                nix::libc::SIGPIPE,
                nix::libc::SIGTERM,
            ] {
                nix::libc::signal(sig, nix::libc::SIG_DFL);
            }
            let mut none: nix::libc::sigset_t = std::mem::zeroed();
            nix::libc::sigemptyset(&mut none);
            nix::libc::sigprocmask(nix::libc::SIG_SETMASK, &none, std::ptr::null_mut());
            // The server dies with the launcher, even when the launcher is SIGKILLed.
            nix::libc::prctl(nix::libc::PR_SET_PDEATHSIG, nix::libc::SIGKILL, 0, 0, 0);
            Ok(())
        });
    }
    let child = cmd.spawn();
    // Our copy of a captured stderr's pipe goes with the command: its reader sees EOF when
    // the server (and whatever inherited it) is gone, not when we are.
    drop(cmd);
    let mut child = match child {
        Ok(c) => c,
        Err(e) => {
            // The daemon sees the exit code and this line on our stderr (which it reads).
            eprintln!("albedo-mcp launch: cannot start {command:?}: {e}");
            return 127;
        }
    };
    let pgid = Pid::from_raw(child.id() as i32);
    // Drop our copies of the server's stdin and stdout, so that EOF travels end to end.
    unsafe {
        let devnull = nix::libc::open(c"/dev/null".as_ptr(), nix::libc::O_RDWR);
        if devnull >= 0 {
            nix::libc::dup2(devnull, 0);
            nix::libc::dup2(devnull, 1);
            nix::libc::close(devnull);
        }
    }
    let (tx, rx) = mpsc::channel();
    let tx2 = tx.clone();
    let tx3 = tx.clone();
    std::thread::spawn(move || {
        if term.wait().is_ok() {
            let _ = tx3.send(Event::Terminated);
        }
    });
    std::thread::spawn(move || {
        let mut f = std::fs::File::from(control);
        let mut buf = [0u8; 64];
        loop {
            match std::io::Read::read(&mut f, &mut buf) {
                Ok(0) => break,
                Ok(_) => continue,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(_) => break,
            }
        }
        let _ = tx2.send(Event::ControlClosed);
    });
    let (wtx, wrx) = mpsc::channel::<std::process::ExitStatus>();
    std::thread::spawn(move || {
        if let Ok(st) = child.wait() {
            let code = st.code().unwrap_or(128 + st.signal().unwrap_or(0));
            let _ = tx.send(Event::ChildExited(code));
            let _ = wtx.send(st);
        }
    });
    let code = match rx.recv() {
        Ok(Event::ChildExited(code)) => {
            end_group(pgid, Duration::ZERO);
            code
        }
        Ok(Event::ControlClosed | Event::Terminated) | Err(_) => {
            // The daemon closed the server's stdin along with the control pipe (or is
            // being stopped by a SIGTERM to its group, and will).
            if wrx.recv_timeout(GRACE).is_ok() {
                end_group(pgid, Duration::ZERO);
            } else {
                let _ = killpg(pgid, Signal::SIGTERM);
                if wrx.recv_timeout(GRACE).is_ok() {
                    end_group(pgid, Duration::ZERO);
                } else {
                    let _ = killpg(pgid, Signal::SIGKILL);
                    let _ = wrx.recv_timeout(GRACE);
                }
            }
            0
        }
    };
    end_descendants();
    code
}

/// Where the server's stderr goes: the pipe named by [`STDERR_FD_ENV`] when it names an
/// open descriptor above 2 (and not the control pipe), else `/dev/null`. The pipe is made
/// close-on-exec, so the server gets it only as its stderr.
fn server_stderr(control_fd: i32) -> Stdio {
    let fd = std::env::var(STDERR_FD_ENV)
        .ok()
        .and_then(|v| v.parse::<i32>().ok())
        .filter(|fd| *fd > 2 && *fd != control_fd)
        // An open descriptor: F_SETFD fails with EBADF on any other.
        .filter(
            |fd| unsafe { nix::libc::fcntl(*fd, nix::libc::F_SETFD, nix::libc::FD_CLOEXEC) } == 0,
        );
    match fd {
        // SAFETY: an open descriptor the daemon passed for this, owned by nothing else here.
        Some(fd) => Stdio::from(unsafe { OwnedFd::from_raw_fd(fd) }),
        None => Stdio::null(),
    }
}

/// End every process reparented to us (descendants that left the group with `setsid`):
/// SIGTERM, then SIGKILL after the grace, reaping each. With no child left at all (`waitpid`
/// says so: the usual end) this is one system call; the children are looked for only while
/// some remain.
fn end_descendants() {
    let deadline = std::time::Instant::now() + GRACE;
    let mut signal = Signal::SIGTERM;
    loop {
        if !reap_ended() {
            return;
        }
        let left = children();
        if left.is_empty() {
            return;
        }
        if std::time::Instant::now() >= deadline {
            signal = Signal::SIGKILL;
        }
        for pid in &left {
            let _ = kill(Pid::from_raw(*pid), signal);
        }
        // The next round reaps what the signal ended, and returns when nothing is left.
        std::thread::sleep(Duration::from_millis(20));
        if std::time::Instant::now() >= deadline + GRACE {
            return;
        }
    }
}

/// Reap every child that already ended; whether any is left (`false` only on `ECHILD`: none
/// at all, ended or not).
fn reap_ended() -> bool {
    loop {
        match nix::sys::wait::waitpid(
            Pid::from_raw(-1),
            Some(nix::sys::wait::WaitPidFlag::WNOHANG),
        ) {
            Ok(nix::sys::wait::WaitStatus::StillAlive) => return true,
            Ok(_) => continue,
            Err(nix::errno::Errno::ECHILD) => return false,
            Err(nix::errno::Errno::EINTR) => continue,
            Err(_) => return true,
        }
    }
}

/// Our children's pids: from each of our threads' `children` file when the kernel has them
/// (`CONFIG_PROC_CHILDREN`; an orphan is reparented to any thread of ours), else from the scan
/// the module doc prices. A child that ended but is not reaped yet may be listed: signalling it
/// does nothing, and the next round reaps it.
fn children() -> Vec<i32> {
    listed_children().unwrap_or_else(|| scanned_children(std::process::id() as i32))
}

/// The pids in `/proc/self/task/*/children`, or `None` when no such file can be read.
fn listed_children() -> Option<Vec<i32>> {
    let tasks = std::fs::read_dir("/proc/self/task").ok()?;
    let mut found = false;
    let mut pids = Vec::new();
    for task in tasks.flatten() {
        let Ok(text) = std::fs::read_to_string(task.path().join("children")) else {
            continue;
        };
        found = true;
        pids.extend(
            text.split_whitespace()
                .filter_map(|p| p.parse::<i32>().ok()),
        );
    }
    found.then_some(pids)
}

/// The pids whose parent is `parent` (from every process's `stat` in /proc), zombies left out.
fn scanned_children(parent: i32) -> Vec<i32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .ok()
                .and_then(|s| {
                    // "pid (comm) state ppid ...": comm may hold spaces and parentheses.
                    let rest = s.rsplit_once(')')?.1;
                    let mut it = rest.split_whitespace();
                    let state = it.next()?;
                    let ppid: i32 = it.next()?.parse().ok()?;
                    Some(ppid == parent && state != "Z" && state != "X")
                })
                .unwrap_or(false)
        })
        .collect()
}

/// The leader is gone; whatever else is left in its group gets SIGTERM, then SIGKILL.
fn end_group(pgid: Pid, _already: Duration) {
    if killpg(pgid, None).is_err() {
        return;
    }
    let _ = killpg(pgid, Signal::SIGTERM);
    let deadline = std::time::Instant::now() + GRACE;
    while std::time::Instant::now() < deadline {
        if killpg(pgid, None).is_err() {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = killpg(pgid, Signal::SIGKILL);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Both ways of finding our children list a child whose spawning thread has ended (the
    /// kernel moves it to another of our threads, as it moves an orphan to any thread of the
    /// launcher), and neither lists it once it is reaped. Only this test's own child is waited
    /// for: other tests run in this process at the same time, with children of their own. A
    /// kernel without the `children` files leaves only the scan to test.
    #[test]
    fn a_child_of_any_thread_is_found_both_ways_until_it_is_reaped() {
        let mut child = std::thread::spawn(|| Command::new("sleep").arg("30").spawn())
            .join()
            .expect("the spawning thread")
            .expect("sleep starts");
        let pid = child.id() as i32;
        let listed = listed_children();
        if let Some(listed) = &listed {
            assert!(listed.contains(&pid), "{pid} not in {listed:?}");
        }
        let scanned = scanned_children(std::process::id() as i32);
        assert!(scanned.contains(&pid), "{pid} not in {scanned:?}");
        child.kill().expect("kill");
        child.wait().expect("reaped");
        if listed.is_some() {
            assert!(!listed_children().unwrap_or_default().contains(&pid));
        }
        assert!(!scanned_children(std::process::id() as i32).contains(&pid));
    }
}
