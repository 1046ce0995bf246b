//! The stdio transport: newline-delimited JSON with a server process started through our
//! launcher (see [`super::launcher`]), with no shell, in its own process group, with a
//! reduced environment and its stderr discarded ([`StdioTransport::spawn_capturing`] keeps
//! it instead, on a pipe of its own, for trying one server: see [`super::stderr`]).
//!
//! Owns: the launcher process, the server's stdin and stdout, the control pipe. Closing
//! drops stdin and the control pipe together; the launcher runs the EOF, SIGTERM, SIGKILL
//! sequence. A line over 16 MiB, a line that is not JSON-RPC, a response whose string id is
//! over 256 bytes (it cannot answer any request of ours, whose ids are numbers), a JSON-RPC
//! batch from a server that did not negotiate 2025-03-26, or a response nobody waits for is
//! logged and counted, never fatal.
//!
//! Reading (`reader`): the server's stdout goes straight into one line buffer per
//! connection, which grows from 8 KiB as reads fill it; a line under 64 KiB is copied out
//! and the buffer reused, a longer one comes on through a staging buffer and is split off
//! without a copy (into the thread's spare, [`super::spare`], once it nears 1 MiB). The
//! reading task starts on the transport's thread and moves to an API worker that makes
//! [`MOVE_AFTER`] direct calls in a row ([`Transport::read_here`]), so that the answers of an
//! agent's session are read on the thread that waits for them; the transport's thread still
//! reaps the launcher and reports the end, wherever reading stopped.
//!
//! Writing: a message sent from the thread the transport was opened on (the connection's
//! arbiter, where the writer task runs) is queued for the writer task, which batches what is
//! queued into one write. One sent from another thread (the API worker of a direct call,
//! `actors::connection::direct`) is written to the pipe at once by that thread when nothing
//! is queued and either the daemon is lightly loaded ([`WRITE_HERE_MAX_IN_FLIGHT`]) or the
//! reader has moved to that thread (then the whole call stays there, at any load),
//! with a non-blocking `writev` on a duplicate of the pipe's descriptor, so that the call
//! does not wake the arbiter to write it; what the pipe does not take (it is full) is queued
//! after it, and anything sent while something is queued is queued behind it, so the order
//! of messages is the order of `send`s. All of that happens under one lock, which `close`
//! takes too: no write follows a close.
//!
//! Bounds against the server: at most 32 MiB of messages wait for its stdin (a server that
//! stops reading while it sends requests would otherwise grow our queue of answers without
//! end); past it the connection is closed at once (the pending write abandoned, the launcher
//! told to end the server) and the requests in flight end with an unknown outcome. Its
//! requests go through [`super::gate`] (100/s, burst 200; a flood closes the connection).

mod reader;

pub use reader::MOVE_AFTER;

use super::stderr::StderrCapture;
use super::text::error_text;
use super::{Inbound, InboundSink, OutKind, Outbound, Transport, TransportError, TransportKind};
use crate::protocol::era::ProtocolVersion;
use crate::protocol::jsonrpc::{self, MAX_MESSAGE_BYTES};
use crate::store::settings::Secret;
use bytes::Bytes;
use std::collections::BTreeMap;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use tokio::io::AsyncWriteExt;
use tokio::process::Command;
use tokio::sync::{mpsc, Notify};

/// The longest launch error kept (the launcher's own words, with the command's).
const LAUNCH_ERROR_CHARS: usize = 500;

/// Requests sent from threads other than their transport's (direct calls on the API's
/// workers) still waiting for an answer, daemon-wide: see [`OffThread`].
static OFF_THREAD: AtomicUsize = AtomicUsize::new(0);

/// A message sent from another thread is written by that thread only while at most this many
/// such requests are in flight across the daemon. Lightly loaded, the connection's arbiter is
/// asleep, and writing here saves waking it (one thread crossing of the two a call had). Under
/// load the arbiter is awake anyway to read answers, while a worker that writes to many idle
/// servers wakes each of them on its own core and is preempted by them: with 200 sessions x 5
/// servers at 256 calls in flight, writing here always cost 20-30 % of the calls per second
/// (`albedo-mcp-bench --only scale`; `benches/NOTES.md`). A thread the server's reader moved
/// to writes at any load: it is woken by that server's answers anyway, and the arbiter need not
/// be woken at all (the agent fleet: some 10 % less of the daemon's CPU per call; one server
/// at 256 calls in flight, its reader moved earlier: that worker's half of the calls).
pub const WRITE_HERE_MAX_IN_FLIGHT: usize = 2;

/// Counts one request sent from another thread while its caller waits for the answer (held by
/// a direct call for its whole length): the load [`WRITE_HERE_MAX_IN_FLIGHT`] is read against.
pub struct OffThread(());

impl OffThread {
    pub fn begin() -> OffThread {
        OFF_THREAD.fetch_add(1, Ordering::Relaxed);
        OffThread(())
    }
}

impl Drop for OffThread {
    fn drop(&mut self) {
        OFF_THREAD.fetch_sub(1, Ordering::Relaxed);
    }
}

/// The most bytes of messages that may wait for the server's stdin (32 MiB).
pub const MAX_QUEUED_BYTES: usize = 32 * 1024 * 1024;

/// Everything needed to start one stdio server.
#[derive(Debug, Clone)]
pub struct StdioSpec {
    /// The launcher executable (normally this very binary).
    pub launcher: PathBuf,
    pub command: String,
    pub args: Vec<String>,
    pub cwd: Option<PathBuf>,
    /// The complete environment of the server. The values are secrets: their `Debug` never
    /// shows them, and they are exposed only to the process being spawned.
    pub env: BTreeMap<String, Secret>,
}

/// Counters of what the server sent that was not usable.
#[derive(Debug, Default)]
pub struct StdioStats {
    pub malformed_lines: AtomicU64,
    pub oversized_lines: AtomicU64,
    /// Responses whose string id is over 256 bytes, ignored.
    pub oversized_ids: AtomicU64,
    /// JSON-RPC batches from a server that did not negotiate 2025-03-26, ignored.
    pub batches_refused: AtomicU64,
    /// Server requests over the rate limit, dropped without an answer.
    pub requests_dropped: AtomicU64,
    /// Messages written by the thread that sent them (not the writer task's), in whole or in
    /// part.
    pub written_here: AtomicU64,
    /// Warnings about what the server sent (it is untrusted: 10 a minute).
    pub log_limit: crate::protocol::text::LogLimiter,
}

pub struct StdioTransport {
    link: Arc<Link>,
    pid: Option<u32>,
    pub stats: Arc<StdioStats>,
}

/// What the handle and the reader share.
struct Link {
    /// The way to the server's stdin; `None` once closed.
    out: Mutex<Option<Out>>,
    /// The thread the writer task runs on: a message sent from it is queued for the task.
    home: u64,
    control: Mutex<Option<OwnedFd>>,
    queue: Arc<WriteQueue>,
    /// The server negotiated 2025-03-26, the one version that may send batches.
    batches: AtomicBool,
    /// Closed for going past a bound: the reader stops and its own `Closed` is not sent.
    overran: AtomicBool,
    sink: Arc<dyn InboundSink>,
    stats: Arc<StdioStats>,
    /// Where the reader runs, and a move asked of it.
    place: reader::Place,
}

/// The two ways to the server's stdin, used under [`Link::out`]'s lock.
struct Out {
    /// To the writer task, which batches what is queued into one write.
    queue: mpsc::UnboundedSender<Bytes>,
    /// A duplicate of the pipe's descriptor (non-blocking, like the writer task's), written
    /// to directly by a sender on another thread when nothing is queued.
    direct: std::fs::File,
}

/// What the writer task shares (not the link itself: the link holds the queue's sender).
#[derive(Default)]
struct WriteQueue {
    /// Bytes queued (or being written) for the server's stdin.
    bytes: AtomicUsize,
    /// Abandon the write under way and stop.
    abort: Notify,
}

impl Link {
    fn close(&self) {
        if let Ok(mut w) = self.out.lock() {
            w.take();
        }
        if let Ok(mut c) = self.control.lock() {
            c.take();
        }
    }

    /// Close the connection for going past a bound: the requests in flight end with an
    /// unknown outcome (`Overrun`), the pending write is abandoned, the launcher ends the
    /// server.
    fn overrun(&self, reason: &str) {
        if self.overran.swap(true, Ordering::AcqRel) {
            return;
        }
        tracing::warn!(reason, "closing the connection to the stdio server");
        self.close();
        self.queue.abort.notify_one();
        self.sink
            .deliver(Inbound::Closed(TransportError::Overrun(reason.to_owned())));
    }
}

/// Find the launcher: `ALBEDO_MCP_LAUNCHER`, else this executable when it is albedo-mcp.
pub fn default_launcher() -> Result<PathBuf, TransportError> {
    if let Some(p) = std::env::var_os("ALBEDO_MCP_LAUNCHER") {
        return Ok(PathBuf::from(p));
    }
    let exe = std::env::current_exe().map_err(|e| TransportError::Spawn(e.to_string()))?;
    let name = exe.file_name().and_then(|n| n.to_str()).unwrap_or("");
    if name.starts_with("albedo-mcp") && !name.contains("bench") {
        return Ok(exe);
    }
    // A test or bench binary: look for the main binary in the target folder above it.
    for dir in exe.ancestors().skip(1).take(3) {
        let cand = dir.join("albedo-mcp");
        if cand.is_file() {
            return Ok(cand);
        }
    }
    Err(TransportError::Spawn(
        "cannot find the albedo-mcp launcher; set ALBEDO_MCP_LAUNCHER".into(),
    ))
}

/// `fd`, moved above the standard descriptors if it is one of them: a daemon started with a
/// standard descriptor closed gets it back from pipe2, and the launcher's stdin, stdout and
/// stderr would replace it in the child.
fn above_stdio(fd: OwnedFd, what: &str) -> Result<OwnedFd, TransportError> {
    if fd.as_raw_fd() > 2 {
        return Ok(fd);
    }
    dup_above_stdio(&fd, what)
}

/// A new descriptor for what `fd` refers to, above the standard ones and closed on exec.
fn dup_above_stdio(fd: impl std::os::fd::AsFd, what: &str) -> Result<OwnedFd, TransportError> {
    let dup = nix::fcntl::fcntl(fd, nix::fcntl::FcntlArg::F_DUPFD_CLOEXEC(3))
        .map_err(|e| TransportError::Spawn(format!("{what}: {e}")))?;
    // SAFETY: a descriptor fcntl just created, owned by nothing else.
    Ok(unsafe { <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(dup) })
}

impl StdioTransport {
    /// Start the server. Must run inside a tokio runtime.
    ///
    /// The launcher finds the read end of its control pipe at the descriptor named by
    /// `ALBEDO_MCP_CONTROL_FD`. The descriptor is made inheritable only while the launcher is
    /// spawned, under a lock, so that no other launcher inherits it; with no `pre_exec` hook
    /// the standard library spawns with `posix_spawn` (a vfork), not `fork`. A `fork` copied
    /// the page tables of the whole daemon and its child tore them down again at `exec`:
    /// about 6 ms of CPU per server for a daemon of 50 MB, so that a session opening from 100
    /// saved catalogues (which dials its 100 servers at once) spent a second of both cores
    /// in the kernel and answered its tool list after more than a second.
    pub fn spawn(
        spec: &StdioSpec,
        sink: Arc<dyn InboundSink>,
    ) -> Result<Arc<StdioTransport>, TransportError> {
        Self::spawn_with(spec, sink, None)
    }

    /// [`Self::spawn`], with the server's stderr kept (its last 64 KiB) instead of
    /// discarded: the launcher hands the server the write end of a pipe of its own as its
    /// stderr, so the launcher's own stderr still carries only its errors.
    pub fn spawn_capturing(
        spec: &StdioSpec,
        sink: Arc<dyn InboundSink>,
    ) -> Result<(Arc<StdioTransport>, StderrCapture), TransportError> {
        let (err_read, err_write) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)
            .map_err(|e| TransportError::Spawn(format!("stderr pipe: {e}")))?;
        let err_write = above_stdio(err_write, "stderr pipe")?;
        let capture = StderrCapture::start(err_read)
            .map_err(|e| TransportError::Spawn(format!("stderr pipe: {e}")))?;
        let t = Self::spawn_with(spec, sink, Some(err_write))?;
        Ok((t, capture))
    }

    fn spawn_with(
        spec: &StdioSpec,
        sink: Arc<dyn InboundSink>,
        server_stderr: Option<OwnedFd>,
    ) -> Result<Arc<StdioTransport>, TransportError> {
        static SPAWN_LOCK: Mutex<()> = Mutex::new(());
        let (ctl_read, ctl_write) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)
            .map_err(|e| TransportError::Spawn(format!("control pipe: {e}")))?;
        let ctl_read = above_stdio(ctl_read, "control pipe")?;
        let mut cmd = Command::new(&spec.launcher);
        cmd.arg("launch")
            .arg("--")
            .arg(&spec.command)
            .args(&spec.args);
        cmd.env_clear()
            .envs(spec.env.iter().map(|(k, v)| (k, v.expose())));
        cmd.env(
            super::launcher::CONTROL_FD_ENV,
            ctl_read.as_raw_fd().to_string(),
        );
        // Only ever the pipe made here: a configured variable of that name is not passed.
        match &server_stderr {
            Some(fd) => cmd.env(super::launcher::STDERR_FD_ENV, fd.as_raw_fd().to_string()),
            None => cmd.env_remove(super::launcher::STDERR_FD_ENV),
        };
        if let Some(cwd) = &spec.cwd {
            cmd.current_dir(cwd);
        }
        cmd.stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(false);
        let child = {
            let _g = SPAWN_LOCK.lock().unwrap_or_else(|p| p.into_inner());
            for fd in std::iter::once(&ctl_read).chain(server_stderr.as_ref()) {
                nix::fcntl::fcntl(
                    fd,
                    nix::fcntl::FcntlArg::F_SETFD(nix::fcntl::FdFlag::empty()),
                )
                .map_err(|e| TransportError::Spawn(format!("control pipe: {e}")))?;
            }
            let child = cmd.spawn();
            // Our copies close here: the launcher (and the server) hold theirs.
            drop(ctl_read);
            drop(server_stderr);
            child
        };
        Self::launched(spec, child, ctl_write, sink)
    }

    fn launched(
        spec: &StdioSpec,
        child: std::io::Result<tokio::process::Child>,
        ctl_write: OwnedFd,
        sink: Arc<dyn InboundSink>,
    ) -> Result<Arc<StdioTransport>, TransportError> {
        let mut child = child.map_err(|e| {
            TransportError::Spawn(format!(
                "cannot start the launcher {}: {e}",
                spec.launcher.display()
            ))
        })?;
        let pid = child.id();
        let stdin = child.stdin.take();
        let stdout = child.stdout.take();
        let stderr = child.stderr.take();
        let (Some(mut stdin), Some(stdout)) = (stdin, stdout) else {
            return Err(TransportError::Spawn("no pipes to the server".into()));
        };
        let stats = Arc::new(StdioStats::default());
        let direct = direct_writer(&stdin)?;
        let input = stdout
            .into_owned_fd()
            .map_err(|e| TransportError::Spawn(format!("the server's stdout: {e}")))
            .and_then(|fd| nonblocking(fd, "the server's stdout"))?;
        let (tx, mut rx) = mpsc::unbounded_channel::<Bytes>();
        let queue = Arc::new(WriteQueue::default());

        // Writer: batch whatever is queued, then flush; give the bytes back to the queue's
        // count once written.
        let wq = queue.clone();
        tokio::spawn(async move {
            let mut buf = Vec::with_capacity(8192);
            while let Some(first) = rx.recv().await {
                buf.clear();
                buf.extend_from_slice(&first);
                buf.push(b'\n');
                while buf.len() < 1 << 20 {
                    match rx.try_recv() {
                        Ok(more) => {
                            buf.extend_from_slice(&more);
                            buf.push(b'\n');
                        }
                        Err(_) => break,
                    }
                }
                let written = tokio::select! {
                    biased;
                    _ = wq.abort.notified() => false,
                    r = async {
                        stdin.write_all(&buf).await?;
                        stdin.flush().await
                    } => r.is_ok(),
                };
                wq.bytes.fetch_sub(buf.len(), Ordering::AcqRel);
                if !written {
                    break;
                }
                if buf.capacity() > 4 << 20 {
                    buf = Vec::with_capacity(8192);
                }
            }
            // Dropping stdin here closes the server's input; dropping `rx` what was queued.
        });

        // Launcher errors (a command that cannot start) arrive on its stderr; the server's own
        // stderr is discarded by the launcher, or goes to a pipe of its own when captured.
        let launch_error = Arc::new(Mutex::new(String::new()));
        if let Some(mut stderr) = stderr {
            let le = launch_error.clone();
            tokio::spawn(async move {
                let mut s = String::new();
                let _ = tokio::io::AsyncReadExt::read_to_string(&mut stderr, &mut s).await;
                if let Ok(mut g) = le.lock() {
                    *g = error_text(&s, &[], LAUNCH_ERROR_CHARS);
                }
            });
        }

        let link = Arc::new(Link {
            out: Mutex::new(Some(Out { queue: tx, direct })),
            home: reader::thread_number(),
            control: Mutex::new(Some(ctl_write)),
            queue,
            batches: AtomicBool::new(false),
            overran: AtomicBool::new(false),
            sink: sink.clone(),
            stats: stats.clone(),
            place: reader::Place::default(),
        });
        // The reader reads here first, and may move to the thread that calls the server
        // (`reader`); when it ends, wherever it is, this thread reaps the launcher and says
        // the connection closed.
        let (reading, ended) = tokio::sync::oneshot::channel::<()>();
        tokio::spawn(reader::Reader::new(input, link.clone(), reading).run());
        let rlink = link.clone();
        tokio::spawn(async move {
            let _ = ended.await;
            let status = tokio::time::timeout(std::time::Duration::from_millis(200), child.wait())
                .await
                .ok()
                .and_then(Result::ok);
            // Give the stderr reader a moment to finish.
            tokio::task::yield_now().await;
            let detail = launch_error
                .lock()
                .map(|g| g.trim().to_owned())
                .unwrap_or_default();
            let error = match (status.and_then(|s| s.code()), detail.is_empty()) {
                (Some(127), false) => TransportError::Spawn(
                    detail.trim_start_matches("albedo-mcp launch: ").to_owned(),
                ),
                (Some(code), _) => {
                    TransportError::Lost(format!("the server process exited with status {code}"))
                }
                (None, _) => TransportError::Lost("the server closed its output".to_owned()),
            };
            if !rlink.overran.load(Ordering::Acquire) {
                sink.deliver(Inbound::Closed(error));
            }
            drop(rlink);
            // Reap the launcher whenever it ends.
            let _ = child.wait().await;
        });

        Ok(Arc::new(StdioTransport { link, pid, stats }))
    }

    /// The launcher's process id.
    pub fn pid(&self) -> Option<u32> {
        self.pid
    }

    /// How many times the reader moved to a calling thread.
    pub fn reader_moves(&self) -> u64 {
        self.link.place.moves.load(Ordering::Relaxed)
    }
}

impl Transport for StdioTransport {
    fn kind(&self) -> TransportKind {
        TransportKind::Stdio
    }

    fn send(&self, msg: Outbound) -> Result<(), TransportError> {
        if msg.body.len() > MAX_MESSAGE_BYTES {
            return Err(TransportError::TooLarge(format!(
                "the message is {} bytes, over the 16 MiB limit",
                msg.body.len()
            )));
        }
        let guard = self
            .link
            .out
            .lock()
            .map_err(|_| TransportError::Closed("writer lock poisoned".into()))?;
        let out = guard
            .as_ref()
            .ok_or_else(|| TransportError::Closed("the connection was closed".into()))?;
        let bytes = &self.link.queue.bytes;
        let mut body = msg.body;
        // Off the writer's thread with nothing queued: written here, at once. `bytes` is 0
        // only when the writer task has written all it was given (it counts down after its
        // write), and everything that queues does so under this lock.
        if bytes.load(Ordering::Acquire) == 0
            && reader::thread_number() != self.link.home
            && (OFF_THREAD.load(Ordering::Relaxed) <= WRITE_HERE_MAX_IN_FLIGHT
                || self.link.place.reads_here())
        {
            let written = write_now(&out.direct, &body);
            if matches!(written, Written::All | Written::Part(_)) {
                self.link.stats.written_here.fetch_add(1, Ordering::Relaxed);
            }
            match written {
                Written::All => {
                    drop(guard);
                    ack_notification(msg.kind, msg.ack);
                    return Ok(());
                }
                Written::Part(n) => {
                    // The pipe is full: the rest is queued (the writer task adds its newline;
                    // all of the body was taken when only the newline is left).
                    body = body.slice(n.min(body.len())..);
                }
                Written::Nothing => {}
                Written::Failed(e) => {
                    // Nothing left: the server's input is closed (it ended).
                    return Err(TransportError::Closed(format!(
                        "the server's input is closed ({e})"
                    )));
                }
            }
        }
        let n = body.len() + 1;
        if bytes.fetch_add(n, Ordering::AcqRel) + n > MAX_QUEUED_BYTES {
            bytes.fetch_sub(n, Ordering::AcqRel);
            drop(guard);
            let reason = format!(
                "the server does not read its input: over {} MiB of messages are queued for it",
                MAX_QUEUED_BYTES >> 20
            );
            self.link.overrun(&reason);
            return Err(TransportError::Overrun(reason));
        }
        if out.queue.send(body).is_err() {
            bytes.fetch_sub(n, Ordering::AcqRel);
            return Err(TransportError::Closed(
                "the server's input is closed".into(),
            ));
        }
        drop(guard);
        ack_notification(msg.kind, msg.ack);
        Ok(())
    }

    fn ignored_messages(&self) -> u64 {
        let s = &self.stats;
        [
            &s.malformed_lines,
            &s.oversized_lines,
            &s.oversized_ids,
            &s.batches_refused,
            &s.requests_dropped,
        ]
        .iter()
        .map(|c| c.load(Ordering::Relaxed))
        .sum()
    }

    fn negotiated(&self, version: &ProtocolVersion) {
        self.link.batches.store(
            jsonrpc::batches_allowed(Some(&version.version)),
            Ordering::Release,
        );
    }

    fn close(&self) {
        self.link.close();
    }

    fn read_here(&self) {
        self.link.place.called_here();
    }
}

/// A notification over stdio is accepted once it is written or queued.
fn ack_notification(
    kind: OutKind,
    ack: Option<tokio::sync::oneshot::Sender<Result<(), TransportError>>>,
) {
    if let (OutKind::Notification { .. }, Some(ack)) = (kind, ack) {
        let _ = ack.send(Ok(()));
    }
}

/// A duplicate of the server's stdin for writing from other threads, non-blocking (as tokio
/// keeps the original: both share one open file description) and closed on exec.
fn direct_writer(stdin: &tokio::process::ChildStdin) -> Result<std::fs::File, TransportError> {
    const WHAT: &str = "the server's stdin";
    let dup = nonblocking(dup_above_stdio(stdin, WHAT)?, WHAT)?;
    Ok(std::fs::File::from(dup))
}

/// `fd`, made non-blocking.
fn nonblocking(fd: OwnedFd, what: &str) -> Result<OwnedFd, TransportError> {
    use nix::fcntl::{fcntl, FcntlArg, OFlag};
    let failed = |e: nix::Error| TransportError::Spawn(format!("{what}: {e}"));
    let flags = OFlag::from_bits_truncate(fcntl(&fd, FcntlArg::F_GETFL).map_err(failed)?);
    if !flags.contains(OFlag::O_NONBLOCK) {
        fcntl(&fd, FcntlArg::F_SETFL(flags | OFlag::O_NONBLOCK)).map_err(failed)?;
    }
    Ok(fd)
}

/// How much of one message (its body, then its newline) a direct write put in the pipe.
#[derive(Debug)]
enum Written {
    All,
    /// Some bytes: the rest waits for the writer task.
    Part(usize),
    /// None: the pipe is full.
    Nothing,
    /// None, and none ever will be (the server's end is closed).
    Failed(std::io::Error),
}

/// One non-blocking `writev` of `body` and its newline, again while it is interrupted or
/// makes progress without the pipe filling.
fn write_now(file: &std::fs::File, body: &[u8]) -> Written {
    use std::io::{ErrorKind, IoSlice, Write};
    let total = body.len() + 1;
    let mut done = 0;
    while done < total {
        let r = if done < body.len() {
            (&*file).write_vectored(&[IoSlice::new(&body[done..]), IoSlice::new(b"\n")])
        } else {
            (&*file).write(b"\n")
        };
        match r {
            Ok(0) => break,
            Ok(n) => done += n,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) if e.kind() == ErrorKind::WouldBlock => break,
            Err(e) if done == 0 => return Written::Failed(e),
            Err(_) => break,
        }
    }
    match done {
        0 => Written::Nothing,
        d if d == total => Written::All,
        d => Written::Part(d),
    }
}

impl Drop for StdioTransport {
    fn drop(&mut self) {
        self.close();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A non-blocking pipe: (read end, write end as a file).
    fn pipe() -> (OwnedFd, std::fs::File) {
        let (r, w) =
            nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC | nix::fcntl::OFlag::O_NONBLOCK)
                .expect("pipe");
        (r, std::fs::File::from(w))
    }

    fn drain(r: &OwnedFd) -> Vec<u8> {
        let mut out = Vec::new();
        let mut buf = [0u8; 65536];
        while let Ok(n) = nix::unistd::read(r, &mut buf) {
            if n == 0 {
                break;
            }
            out.extend_from_slice(&buf[..n]);
        }
        out
    }

    /// Reads that return the given pieces one by one (each cut to the room the reader gave).
    struct Pieces(std::collections::VecDeque<Vec<u8>>);

    impl tokio::io::AsyncRead for Pieces {
        fn poll_read(
            mut self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
            out: &mut tokio::io::ReadBuf<'_>,
        ) -> std::task::Poll<std::io::Result<()>> {
            if let Some(mut p) = self.0.pop_front() {
                let n = p.len().min(out.remaining());
                out.put_slice(&p[..n]);
                if n < p.len() {
                    self.0.push_front(p.split_off(n));
                }
            }
            std::task::Poll::Ready(Ok(()))
        }
    }

    /// The lines `reader::Framing` gives for `pieces`, with whether each was checked as it came.
    fn lines_of(pieces: Vec<Vec<u8>>) -> (Vec<(Vec<u8>, bool)>, u64) {
        let stats = StdioStats::default();
        let mut got = Vec::new();
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("runtime");
        let mut input = Pieces(pieces.into());
        rt.block_on(
            reader::Framing::default().read(&mut input, &stats, &Notify::new(), |l, c| {
                got.push((l.to_vec(), c.is_some()));
                true
            }),
        );
        (got, stats.oversized_lines.load(Ordering::Relaxed))
    }

    #[test]
    fn lines_are_split_off_however_the_reads_cut_them() {
        // Several lines in one read, one line over many reads, a line ending just at a read's
        // end, and a last line without its newline (never given).
        let (got, over) = lines_of(vec![
            b"{\"a\":1}\n{\"b\":2}\r\n\n{\"c\"".to_vec(),
            b":3".to_vec(),
            b"}\n".to_vec(),
            b"{\"d\":4}\n{\"e\":".to_vec(),
        ]);
        let want: Vec<&[u8]> = vec![
            b"{\"a\":1}",
            b"{\"b\":2}\r",
            b"",
            b"{\"c\":3}",
            b"{\"d\":4}",
        ];
        assert_eq!(got.iter().map(|(l, _)| &l[..]).collect::<Vec<_>>(), want);
        assert_eq!(over, 0);
    }

    #[test]
    fn a_large_line_is_checked_as_it_comes_and_the_next_line_survives() {
        let text = "x".repeat(3 << 20);
        let big = format!("{{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{{\"t\":\"{text}\"}}}}");
        let mut all = big.clone().into_bytes();
        all.extend_from_slice(b"\n{\"next\":1}\n");
        let pieces = all.chunks(65536).map(<[u8]>::to_vec).collect();
        let (got, over) = lines_of(pieces);
        assert_eq!(got.len(), 2);
        assert_eq!(got[0].0, big.as_bytes());
        assert!(got[0].1, "the large line was not checked as it came");
        assert_eq!(got[1], (b"{\"next\":1}".to_vec(), false));
        assert_eq!(over, 0);
    }

    #[test]
    fn a_line_over_the_limit_is_dropped_and_counted_and_the_next_one_read() {
        // Over the limit both ways: noticed before its newline came, and within the read
        // that holds its newline.
        for piece in [64 * 1024, MAX_MESSAGE_BYTES + 100] {
            let mut all = vec![b'x'; MAX_MESSAGE_BYTES + 1];
            all.extend_from_slice(b"\n{\"ok\":1}\n");
            let pieces = all.chunks(piece).map(<[u8]>::to_vec).collect();
            let (got, over) = lines_of(pieces);
            assert_eq!(
                got,
                vec![(b"{\"ok\":1}".to_vec(), false)],
                "pieces of {piece}"
            );
            assert_eq!(over, 1, "pieces of {piece}");
        }
    }

    #[test]
    fn a_direct_write_puts_the_body_and_its_newline_in_the_pipe() {
        let (r, w) = pipe();
        assert!(matches!(write_now(&w, b"{\"a\":1}"), Written::All));
        assert_eq!(drain(&r), b"{\"a\":1}\n");
    }

    #[test]
    fn a_full_pipe_takes_part_of_a_message_then_nothing() {
        let (r, w) = pipe();
        let big = vec![b'x'; 1 << 20];
        let taken = match write_now(&w, &big) {
            Written::Part(n) => n,
            other => panic!("expected part of it, got {other:?}"),
        };
        assert!(taken > 0 && taken < big.len(), "{taken}");
        assert!(matches!(write_now(&w, b"more"), Written::Nothing));
        assert_eq!(drain(&r).len(), taken);
    }

    #[test]
    fn a_pipe_whose_reader_is_gone_fails_with_nothing_written() {
        let (r, w) = pipe();
        drop(r);
        match write_now(&w, b"{}") {
            Written::Failed(e) => assert_eq!(e.kind(), std::io::ErrorKind::BrokenPipe),
            other => panic!("expected a failure, got {other:?}"),
        }
    }
}
