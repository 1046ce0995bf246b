//! A stdio server's stderr, captured when the daemon tries one server to show what went
//! wrong (normally the launcher discards it): the last [`STDERR_TAIL_BYTES`] bytes are kept,
//! with a count of the bytes dropped before them.
//!
//! Owns: the read end of the stderr pipe and the bounded tail. Must not touch: redaction
//! (the caller knows the server's secrets; [`Captured`] says where the text was cut, so that
//! a secret cut in half can be redacted too), actors, the API.

use std::collections::VecDeque;
use std::os::fd::OwnedFd;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::AsyncReadExt;
use tokio::sync::watch;

/// How much of a server's stderr is kept: the last 64 KiB.
pub const STDERR_TAIL_BYTES: usize = 64 * 1024;

/// The last `cap` bytes written, and how many came before them.
#[derive(Debug)]
pub struct StderrTail {
    buf: VecDeque<u8>,
    cap: usize,
    dropped: u64,
}

impl StderrTail {
    pub fn new(cap: usize) -> StderrTail {
        StderrTail {
            buf: VecDeque::with_capacity(cap.min(8192)),
            cap,
            dropped: 0,
        }
    }

    /// Append `bytes`, dropping the oldest past the bound.
    pub fn push(&mut self, bytes: &[u8]) {
        let bytes = if bytes.len() > self.cap {
            let skip = bytes.len() - self.cap;
            self.dropped += skip as u64;
            &bytes[skip..]
        } else {
            bytes
        };
        let over = (self.buf.len() + bytes.len()).saturating_sub(self.cap);
        if over > 0 {
            self.buf.drain(..over);
            self.dropped += over as u64;
        }
        self.buf.extend(bytes);
    }

    /// The bytes kept, oldest first.
    pub fn bytes(&self) -> Vec<u8> {
        let (a, b) = self.buf.as_slices();
        [a, b].concat()
    }

    /// How many bytes were dropped before the ones kept.
    pub fn dropped(&self) -> u64 {
        self.dropped
    }
}

/// What was captured at one moment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Captured {
    /// The tail, as text (invalid UTF-8 replaced).
    pub text: String,
    /// Bytes dropped before `text` (its start may be in the middle of a line, or a secret).
    pub dropped: u64,
    /// The server's stderr reached its end (else `text` may stop in the middle of a line).
    pub complete: bool,
}

/// The stderr of one server, read in the background into a [`StderrTail`].
#[derive(Clone)]
pub struct StderrCapture {
    tail: Arc<Mutex<StderrTail>>,
    done: watch::Receiver<bool>,
}

impl StderrCapture {
    /// Read `pipe` (the read end of the server's stderr) until its end. Must run inside a
    /// tokio runtime.
    pub fn start(pipe: OwnedFd) -> std::io::Result<StderrCapture> {
        let mut rx = tokio::net::unix::pipe::Receiver::from_owned_fd(pipe)?;
        let tail = Arc::new(Mutex::new(StderrTail::new(STDERR_TAIL_BYTES)));
        let (tx, done) = watch::channel(false);
        let t = tail.clone();
        tokio::spawn(async move {
            let mut chunk = vec![0u8; 8192];
            loop {
                match rx.read(&mut chunk).await {
                    Ok(0) => break,
                    Ok(n) => {
                        if let Ok(mut g) = t.lock() {
                            g.push(&chunk[..n]);
                        }
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                    Err(_) => break,
                }
            }
            let _ = tx.send(true);
        });
        Ok(StderrCapture { tail, done })
    }

    /// Wait at most `limit` for the server's stderr to end; whether it did.
    pub async fn finished(&self, limit: Duration) -> bool {
        let mut done = self.done.clone();
        let ended = tokio::time::timeout(limit, done.wait_for(|d| *d))
            .await
            .is_ok_and(|r| r.is_ok());
        ended
    }

    /// What has been captured so far.
    pub fn snapshot(&self) -> Captured {
        let complete = *self.done.borrow();
        let (bytes, dropped) = match self.tail.lock() {
            Ok(g) => (g.bytes(), g.dropped()),
            Err(_) => (Vec::new(), 0),
        };
        Captured {
            text: String::from_utf8_lossy(&bytes).into_owned(),
            dropped,
            complete,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_last_64_kib_and_counts_the_rest() {
        let mut t = StderrTail::new(STDERR_TAIL_BYTES);
        t.push(b"first line\n");
        assert_eq!(t.bytes(), b"first line\n");
        assert_eq!(t.dropped(), 0);
        // 100 KiB more in 1000-byte lines, each line saying its number.
        let mut all = b"first line\n".to_vec();
        for i in 0..100 {
            let mut line = format!("{i:04} ").into_bytes();
            line.resize(1023, b'x');
            line.push(b'\n');
            t.push(&line);
            all.extend_from_slice(&line);
        }
        let kept = t.bytes();
        assert_eq!(kept.len(), STDERR_TAIL_BYTES);
        assert_eq!(kept, all[all.len() - STDERR_TAIL_BYTES..]);
        assert_eq!(t.dropped() as usize, all.len() - STDERR_TAIL_BYTES);
        // 11 + 36 lines of 1024 bytes were dropped: the tail starts with line 36.
        assert!(kept.starts_with(b"0036 ") && kept.ends_with(b"x\n"));
    }

    #[test]
    fn one_write_larger_than_the_bound_keeps_its_end() {
        let mut t = StderrTail::new(8);
        t.push(b"abc");
        t.push(b"0123456789");
        assert_eq!(t.bytes(), b"23456789");
        assert_eq!(t.dropped(), 5);
        t.push(b"!");
        assert_eq!(t.bytes(), b"3456789!");
        assert_eq!(t.dropped(), 6);
    }

    #[tokio::test]
    async fn reads_a_pipe_to_its_end() {
        let (r, w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).unwrap();
        let cap = StderrCapture::start(r).unwrap();
        let mut f = std::fs::File::from(w);
        std::io::Write::write_all(&mut f, b"boom: missing config\n").unwrap();
        drop(f);
        assert!(cap.finished(Duration::from_secs(5)).await);
        let c = cap.snapshot();
        assert_eq!(c.text, "boom: missing config\n");
        assert_eq!((c.dropped, c.complete), (0, true));
    }
}
