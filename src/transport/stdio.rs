//! The stdio transport: newline-delimited JSON with a server process started through our
//! launcher (see [`super::launcher`]), with no shell, in its own process group, with a
//! reduced environment and its stderr discarded.
//!
//! Owns: the launcher process, the server's stdin and stdout, the control pipe. Closing
//! drops stdin and the control pipe together; the launcher runs the EOF, SIGTERM, SIGKILL
//! sequence. A line over 16 MiB, a line that is not JSON-RPC, a response whose string id is
//! over 256 bytes (it cannot answer any request of ours, whose ids are numbers), or a
//! response nobody waits for is logged and counted, never fatal.

use super::{Inbound, InboundSink, OutKind, Outbound, Transport, TransportError, TransportKind};
use crate::protocol::jsonrpc::{Message, MAX_MESSAGE_BYTES, MAX_RESPONSE_ID_BYTES};
use bytes::{Bytes, BytesMut};
use std::collections::BTreeMap;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{ChildStdout, Command};
use tokio::sync::mpsc;

/// Everything needed to start one stdio server.
#[derive(Debug, Clone)]
pub struct StdioSpec {
    /// The launcher executable (normally this very binary).
    pub launcher: PathBuf,
    pub command: String,
    pub args: Vec<String>,
    pub cwd: Option<PathBuf>,
    /// The complete environment of the server.
    pub env: BTreeMap<String, String>,
}

/// Counters of what the server sent that was not usable.
#[derive(Debug, Default)]
pub struct StdioStats {
    pub malformed_lines: AtomicU64,
    pub oversized_lines: AtomicU64,
    /// Responses whose string id is over 256 bytes, ignored.
    pub oversized_ids: AtomicU64,
}

pub struct StdioTransport {
    writer: Mutex<Option<mpsc::UnboundedSender<Bytes>>>,
    control: Mutex<Option<OwnedFd>>,
    pid: Option<u32>,
    pub stats: Arc<StdioStats>,
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
        static SPAWN_LOCK: Mutex<()> = Mutex::new(());
        let (ctl_read, ctl_write) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)
            .map_err(|e| TransportError::Spawn(format!("control pipe: {e}")))?;
        // A daemon started with a standard descriptor closed gets it back from pipe2; the
        // launcher's stdin, stdout and stderr would replace it in the child.
        let ctl_read = if ctl_read.as_raw_fd() <= 2 {
            let fd = nix::fcntl::fcntl(&ctl_read, nix::fcntl::FcntlArg::F_DUPFD_CLOEXEC(3))
                .map_err(|e| TransportError::Spawn(format!("control pipe: {e}")))?;
            // SAFETY: a descriptor fcntl just created, owned by nothing else.
            unsafe { <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) }
        } else {
            ctl_read
        };
        let mut cmd = Command::new(&spec.launcher);
        cmd.arg("launch")
            .arg("--")
            .arg(&spec.command)
            .args(&spec.args);
        cmd.env_clear().envs(&spec.env);
        cmd.env(
            super::launcher::CONTROL_FD_ENV,
            ctl_read.as_raw_fd().to_string(),
        );
        if let Some(cwd) = &spec.cwd {
            cmd.current_dir(cwd);
        }
        cmd.stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(false);
        let child = {
            let _g = SPAWN_LOCK.lock().unwrap_or_else(|p| p.into_inner());
            nix::fcntl::fcntl(
                &ctl_read,
                nix::fcntl::FcntlArg::F_SETFD(nix::fcntl::FdFlag::empty()),
            )
            .map_err(|e| TransportError::Spawn(format!("control pipe: {e}")))?;
            let child = cmd.spawn();
            drop(ctl_read);
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

        // Writer: batch whatever is queued, then flush.
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
                if stdin.write_all(&buf).await.is_err() || stdin.flush().await.is_err() {
                    break;
                }
            }
            // Dropping stdin here closes the server's input.
        });

        // Launcher errors (a command that cannot start) arrive on its stderr; the server's own
        // stderr is discarded by the launcher.
        let launch_error = Arc::new(Mutex::new(String::new()));
        if let Some(mut stderr) = stderr {
            let le = launch_error.clone();
            tokio::spawn(async move {
                let mut s = String::new();
                let _ = tokio::io::AsyncReadExt::read_to_string(&mut stderr, &mut s).await;
                if let Ok(mut g) = le.lock() {
                    *g = s.chars().take(500).collect();
                }
            });
        }

        let rstats = stats.clone();
        tokio::spawn(async move {
            read_loop(stdout, sink.as_ref(), &rstats).await;
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
            sink.deliver(Inbound::Closed(error));
            // Reap the launcher whenever it ends.
            let _ = child.wait().await;
        });

        Ok(Arc::new(StdioTransport {
            writer: Mutex::new(Some(tx)),
            control: Mutex::new(Some(ctl_write)),
            pid,
            stats,
        }))
    }

    /// The launcher's process id.
    pub fn pid(&self) -> Option<u32> {
        self.pid
    }
}

async fn read_loop(stdout: ChildStdout, sink: &dyn InboundSink, stats: &StdioStats) {
    let mut reader = BufReader::with_capacity(64 * 1024, stdout);
    let mut line = BytesMut::new();
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
                        line.extend_from_slice(&available[..i]);
                    }
                    (true, i + 1)
                }
                None => {
                    if !skipping {
                        line.extend_from_slice(available);
                    }
                    (false, available.len())
                }
            }
        };
        reader.consume(used);
        if !skipping && line.len() > MAX_MESSAGE_BYTES {
            stats.oversized_lines.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(
                limit = MAX_MESSAGE_BYTES,
                "a line from the server is over the 16 MiB limit; it is dropped"
            );
            skipping = true;
            line = BytesMut::new();
        }
        if done {
            if skipping {
                skipping = false;
                continue;
            }
            let bytes = line.split().freeze();
            handle_line(&bytes, sink, stats);
            if line.capacity() > 1 << 20 {
                line = BytesMut::new();
            }
        }
    }
}

fn handle_line(bytes: &[u8], sink: &dyn InboundSink, stats: &StdioStats) {
    let trimmed = bytes.strip_suffix(b"\r").unwrap_or(bytes);
    if trimmed.iter().all(u8::is_ascii_whitespace) {
        return;
    }
    match crate::protocol::jsonrpc::parse_batch(trimmed) {
        Ok(msgs) => {
            for m in msgs {
                if matches!(&m, Message::Response { id, .. } if id.oversized_for_response()) {
                    stats.oversized_ids.fetch_add(1, Ordering::Relaxed);
                    tracing::debug!(
                        limit = MAX_RESPONSE_ID_BYTES,
                        "ignored a response whose id is too long to answer any request"
                    );
                    continue;
                }
                sink.deliver(Inbound::Message(m));
            }
        }
        Err(e) => {
            stats.malformed_lines.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(error = %e, "ignored a line from the server that is not JSON-RPC");
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
        let guard = self
            .writer
            .lock()
            .map_err(|_| TransportError::Closed("writer lock poisoned".into()))?;
        let tx = guard
            .as_ref()
            .ok_or_else(|| TransportError::Closed("the connection was closed".into()))?;
        tx.send(msg.body)
            .map_err(|_| TransportError::Closed("the server's input is closed".into()))?;
        if let (OutKind::Notification { .. }, Some(ack)) = (&msg.kind, msg.ack) {
            let _ = ack.send(Ok(()));
        }
        Ok(())
    }

    fn ignored_messages(&self) -> u64 {
        self.stats.malformed_lines.load(Ordering::Relaxed)
            + self.stats.oversized_lines.load(Ordering::Relaxed)
            + self.stats.oversized_ids.load(Ordering::Relaxed)
    }

    fn close(&self) {
        if let Ok(mut w) = self.writer.lock() {
            w.take();
        }
        if let Ok(mut c) = self.control.lock() {
            c.take();
        }
    }
}

impl Drop for StdioTransport {
    fn drop(&mut self) {
        self.close();
    }
}
