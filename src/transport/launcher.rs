//! The stdio launcher: `albedo-mcp launch -- <command> <args...>`.
//!
//! The daemon never spawns a server directly. It spawns this launcher, which stays the
//! server's parent and puts it in a process group of its own. The server inherits the
//! launcher's stdin and stdout (no copying); the launcher keeps only a control pipe (on the
//! descriptor named by `ALBEDO_MCP_CONTROL_FD`, else fd 3), whose write end the daemon holds. When that pipe reaches EOF (the daemon closed the
//! connection, or the daemon died, even by SIGKILL, since the kernel closes its descriptors)
//! the launcher gives the server two seconds to exit after its stdin closed, then sends the
//! group SIGTERM, and after two more seconds SIGKILL. So no server outlives the daemon.
//!
//! Owns: one server process group. Must not touch: anything but std and nix; it runs in its
//! own tiny process, before any runtime exists.

use nix::sys::signal::{killpg, signal, SigHandler, Signal};
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
/// How long the server gets after its stdin closed, and again after SIGTERM.
pub const GRACE: Duration = Duration::from_secs(2);

enum Event {
    ControlClosed,
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
    let child = Command::new(command)
        .args(args)
        .env_remove(CONTROL_FD_ENV)
        .stdin(Stdio::inherit())
        .stdout(Stdio::inherit())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn();
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
    match rx.recv() {
        Ok(Event::ChildExited(code)) => {
            end_group(pgid, Duration::ZERO);
            code
        }
        Ok(Event::ControlClosed) | Err(_) => {
            // The daemon closed the server's stdin along with the control pipe.
            if wrx.recv_timeout(GRACE).is_ok() {
                end_group(pgid, Duration::ZERO);
                return 0;
            }
            let _ = killpg(pgid, Signal::SIGTERM);
            if wrx.recv_timeout(GRACE).is_ok() {
                end_group(pgid, Duration::ZERO);
                return 0;
            }
            let _ = killpg(pgid, Signal::SIGKILL);
            let _ = wrx.recv_timeout(GRACE);
            0
        }
    }
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
