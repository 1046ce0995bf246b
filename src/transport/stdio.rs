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
//! Bounds against the server: at most 32 MiB of messages wait for its stdin (a server that
//! stops reading while it sends requests would otherwise grow our queue of answers without
//! end); past it the connection is closed at once (the pending write abandoned, the launcher
//! told to end the server) and the requests in flight end with an unknown outcome. Its
//! requests go through [`super::gate`] (100/s, burst 200; a flood closes the connection).

use super::gate::{Admit, RequestLimiter};
use super::spare;
use super::stderr::StderrCapture;
use super::text::error_text;
use super::{Inbound, InboundSink, OutKind, Outbound, Transport, TransportError, TransportKind};
use crate::protocol::check::{Checked, JsonCheck};
use crate::protocol::era::ProtocolVersion;
use crate::protocol::jsonrpc::{self, Message, MAX_MESSAGE_BYTES, MAX_RESPONSE_ID_BYTES};
use crate::store::settings::Secret;
use bytes::{Bytes, BytesMut};
use std::collections::BTreeMap;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{ChildStdout, Command};
use tokio::sync::{mpsc, Notify};

/// The longest launch error kept (the launcher's own words, with the command's).
const LAUNCH_ERROR_CHARS: usize = 500;

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
    writer: Mutex<Option<mpsc::UnboundedSender<Bytes>>>,
    control: Mutex<Option<OwnedFd>>,
    queue: Arc<WriteQueue>,
    /// The server negotiated 2025-03-26, the one version that may send batches.
    batches: AtomicBool,
    /// Closed for going past a bound: the reader stops and its own `Closed` is not sent.
    overran: AtomicBool,
    sink: Arc<dyn InboundSink>,
    stats: Arc<StdioStats>,
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
        if let Ok(mut w) = self.writer.lock() {
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
    let dup = nix::fcntl::fcntl(&fd, nix::fcntl::FcntlArg::F_DUPFD_CLOEXEC(3))
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
            writer: Mutex::new(Some(tx)),
            control: Mutex::new(Some(ctl_write)),
            queue,
            batches: AtomicBool::new(false),
            overran: AtomicBool::new(false),
            sink: sink.clone(),
            stats: stats.clone(),
        });
        let rlink = link.clone();
        tokio::spawn(async move {
            read_loop(stdout, &rlink).await;
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
}

async fn read_loop(stdout: ChildStdout, link: &Link) {
    let stats = link.stats.as_ref();
    let mut limiter = RequestLimiter::default();
    let mut reader = BufReader::with_capacity(64 * 1024, stdout);
    let mut line = BytesMut::new();
    let mut check = JsonCheck::default();
    let mut skipping = false;
    loop {
        let (done, used) = {
            let available = match reader.fill_buf().await {
                Ok(b) => b,
                Err(_) => return,
            };
            if available.is_empty() {
                return;
            }
            match memchr::memchr(b'\n', available) {
                Some(i) => {
                    if !skipping {
                        spare::extend(&mut line, &available[..i]);
                    }
                    (true, i + 1)
                }
                None => {
                    if !skipping {
                        spare::extend(&mut line, available);
                        check.catch_up(&line);
                    }
                    (false, available.len())
                }
            }
        };
        reader.consume(used);
        if !skipping && line.len() > MAX_MESSAGE_BYTES {
            stats.oversized_lines.fetch_add(1, Ordering::Relaxed);
            if let Some(left_out) = stats.log_limit.allow() {
                tracing::warn!(
                    limit = MAX_MESSAGE_BYTES,
                    left_out,
                    "a line from the server is over the 16 MiB limit; it is dropped"
                );
            }
            skipping = true;
            line = BytesMut::new();
            check.give_up();
        }
        if done {
            let done_check = std::mem::take(&mut check);
            if skipping {
                skipping = false;
                continue;
            }
            let checked = done_check.finish(&line);
            let bytes = spare::finish(&mut line);
            handle_line(bytes, checked.as_ref(), link, &mut limiter);
            if link.overran.load(Ordering::Acquire) {
                return; // closed: stop reading (the server's writes now fail)
            }
        }
    }
}

/// One line from the server; `checked`: what [`JsonCheck`] found in it as it arrived.
fn handle_line(bytes: Bytes, checked: Option<&Checked>, link: &Link, limiter: &mut RequestLimiter) {
    let stats = link.stats.as_ref();
    let trimmed = match bytes.strip_suffix(b"\r") {
        Some(t) => bytes.slice(..t.len()),
        None => bytes,
    };
    if trimmed.iter().all(u8::is_ascii_whitespace) {
        return;
    }
    if jsonrpc::is_batch(&trimmed) && !link.batches.load(Ordering::Acquire) {
        stats.batches_refused.fetch_add(1, Ordering::Relaxed);
        if let Some(left_out) = stats.log_limit.allow() {
            tracing::warn!(
                left_out,
                "ignored a JSON-RPC batch: only a server that negotiated {} may send batches",
                jsonrpc::BATCH_VERSION
            );
        }
        return;
    }
    match jsonrpc::parse_batch_checked(&trimmed, checked) {
        Ok(msgs) => {
            for m in msgs {
                if link.overran.load(Ordering::Acquire) {
                    return; // closed meanwhile (our answers overflowed): the rest goes nowhere
                }
                match &m {
                    Message::Response { id, .. } if id.oversized_for_response() => {
                        stats.oversized_ids.fetch_add(1, Ordering::Relaxed);
                        tracing::debug!(
                            limit = MAX_RESPONSE_ID_BYTES,
                            "ignored a response whose id is too long to answer any request"
                        );
                        continue;
                    }
                    Message::Request { .. } => match limiter.admit() {
                        Admit::Deliver => {}
                        Admit::Drop => {
                            let n = stats.requests_dropped.fetch_add(1, Ordering::Relaxed) + 1;
                            if n.is_power_of_two() {
                                tracing::warn!(
                                    dropped = n,
                                    "the server's requests are over the rate limit; dropped without an answer"
                                );
                            }
                            continue;
                        }
                        Admit::Flood => {
                            stats.requests_dropped.fetch_add(1, Ordering::Relaxed);
                            link.overrun(&RequestLimiter::flood_reason());
                            return;
                        }
                    },
                    _ => {}
                }
                link.sink.deliver(Inbound::Message(m));
            }
        }
        Err(e) => {
            stats.malformed_lines.fetch_add(1, Ordering::Relaxed);
            if let Some(left_out) = stats.log_limit.allow() {
                tracing::warn!(error = %e, left_out, "ignored a line from the server that is not JSON-RPC");
            }
        }
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
        let tx = self
            .link
            .writer
            .lock()
            .map_err(|_| TransportError::Closed("writer lock poisoned".into()))?
            .as_ref()
            .cloned()
            .ok_or_else(|| TransportError::Closed("the connection was closed".into()))?;
        let n = msg.body.len() + 1;
        let bytes = &self.link.queue.bytes;
        if bytes.fetch_add(n, Ordering::AcqRel) + n > MAX_QUEUED_BYTES {
            bytes.fetch_sub(n, Ordering::AcqRel);
            let reason = format!(
                "the server does not read its input: over {} MiB of messages are queued for it",
                MAX_QUEUED_BYTES >> 20
            );
            self.link.overrun(&reason);
            return Err(TransportError::Overrun(reason));
        }
        if tx.send(msg.body).is_err() {
            bytes.fetch_sub(n, Ordering::AcqRel);
            return Err(TransportError::Closed(
                "the server's input is closed".into(),
            ));
        }
        if let (OutKind::Notification { .. }, Some(ack)) = (&msg.kind, msg.ack) {
            let _ = ack.send(Ok(()));
        }
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
}

impl Drop for StdioTransport {
    fn drop(&mut self) {
        self.close();
    }
}
