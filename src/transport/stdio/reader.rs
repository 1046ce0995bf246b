//! Reading a stdio server's output: the framing of its lines ([`Framing`]), what each line
//! becomes ([`handle_line`]), and the task that reads ([`Reader`]), which moves to the thread
//! that calls the server.
//!
//! The reader starts on the thread the transport was opened on (the connection's arbiter).
//! A direct call (`actors::connection::direct`) runs on the API worker that read the HTTP
//! request, and its answer then crosses threads: the reader completes the pending request on
//! its thread and wakes the worker's. When [`MOVE_AFTER`] direct calls in a row come from one
//! other worker (an agent's session calls on one HTTP connection, which one worker holds), the
//! reader moves there ([`StdioTransport::read_here`]): it stops at its next read, hands its
//! descriptor and its state (the line buffer, the check of a large line, the request limiter)
//! to a task the caller spawned on its own thread, and that task reads on from where it was.
//! Nothing is read twice or lost: the descriptor's unread bytes stay in the pipe, and what
//! was read stays in the buffer that moves. Calls from both workers in turn (many HTTP
//! connections on one server) never make a run that long, so the reader does not bounce.
//!
//! Wherever it reads, the reader holds the sending half of a oneshot whose receiver waits on
//! the transport's own thread: when reading ends (the output closed, a read failed, the
//! connection overran, the task panicked or its runtime went away) that half is dropped, and
//! the transport's thread reaps the launcher and tells the client core (`Inbound::Closed`).
//!
//! Owns: the framing, the reading task and its moves. Must not touch: writing to the server,
//! the launcher.

use super::{Link, StdioStats};
use crate::protocol::check::{Breaks, Checked, JsonCheck, LineScan, CHECK_FROM};
use crate::protocol::jsonrpc::{self, Message, MAX_MESSAGE_BYTES, MAX_RESPONSE_ID_BYTES};
use crate::transport::gate::{Admit, RequestLimiter};
use crate::transport::{spare, Inbound};
use bytes::{Bytes, BytesMut};
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use tokio::net::unix::pipe;
use tokio::sync::{oneshot, Notify};

/// The reader moves to a worker after this many direct calls in a row from it (and none from
/// elsewhere between them). With calls from two workers in turn at random, a run this long
/// starts about once in 2^31 calls.
pub const MOVE_AFTER: u32 = 32;

/// The first read buffer of a connection: a server's small answers come in pieces this
/// size or smaller, and an idle connection holds no more (the buffer is not zeroed: pages
/// never read into are never touched).
const READ_FIRST: usize = 8 * 1024;

/// The most room asked for before a read once reads fill what they are given (a pipe holds
/// 64 KiB): at 256 calls in flight one read takes every answer the pipe holds.
const READ_MOST: usize = 64 * 1024;

/// A small number for each thread, for [`Place`] to compare (0 is no thread).
pub(super) fn thread_number() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    thread_local! {
        static HERE: u64 = NEXT.fetch_add(1, Ordering::Relaxed);
    }
    HERE.with(|n| *n)
}

/// Where the reader runs, the run of direct calls from another thread, and a move asked of it.
#[derive(Default)]
pub(super) struct Place {
    /// The thread the reader runs on ([`thread_number`]; 0 once it stopped).
    at: AtomicU64,
    /// The thread of the last direct call not made on `at`...
    caller: AtomicU64,
    /// ...and how many direct calls in a row came from it.
    run: AtomicU32,
    /// Wakes the reader for a move.
    wanted: Notify,
    /// Where the reader goes.
    to: Mutex<Slot>,
    /// How many times the reader moved.
    pub moves: AtomicU64,
}

impl Place {
    /// A direct call on this thread, a task of a `LocalSet` (it panics elsewhere): once
    /// [`MOVE_AFTER`] came in a row from here and the reader is elsewhere, ask it over.
    pub(super) fn called_here(&self) {
        if self.reads_here() {
            return;
        }
        let me = thread_number();
        if self.caller.swap(me, Ordering::Relaxed) != me {
            self.run.store(1, Ordering::Relaxed);
            return;
        }
        if self.run.fetch_add(1, Ordering::Relaxed) + 1 < MOVE_AFTER {
            return;
        }
        self.run.store(0, Ordering::Relaxed);
        let Ok(mut to) = self.to.lock() else { return };
        if !matches!(*to, Slot::Idle) {
            return;
        }
        let (tx, rx) = oneshot::channel::<Reader>();
        *to = Slot::Asked(tx);
        drop(to);
        tokio::task::spawn_local(async move {
            if let Ok(reader) = rx.await {
                reader.link.place.moves.fetch_add(1, Ordering::Relaxed);
                reader.run().await;
            }
        });
        self.wanted.notify_one();
    }

    /// Whether the reader runs on this thread (it moved here).
    pub(super) fn reads_here(&self) -> bool {
        self.at.load(Ordering::Relaxed) == thread_number()
    }

    /// The task a move was asked to, if one was (the reader is about to go).
    fn take_asked(&self) -> Option<oneshot::Sender<Reader>> {
        let mut to = self.to.lock().ok()?;
        match std::mem::take(&mut *to) {
            Slot::Asked(tx) => Some(tx),
            other => {
                *to = other;
                None
            }
        }
    }

    /// Reading ended: no more moves, and a task waiting for the reader gives up.
    fn ended(&self) {
        self.at.store(0, Ordering::Relaxed);
        if let Ok(mut to) = self.to.lock() {
            *to = Slot::Ended;
        }
    }
}

/// A move asked of the reader, or none.
#[derive(Default)]
enum Slot {
    #[default]
    Idle,
    /// To the task that waits for the reader on the caller's thread.
    Asked(oneshot::Sender<Reader>),
    /// Reading ended: no more moves.
    Ended,
}

/// The reading task's state, which moves with it from thread to thread.
pub(super) struct Reader {
    /// The server's stdout (non-blocking), registered with no runtime while it moves.
    input: OwnedFd,
    framing: Framing,
    limiter: RequestLimiter,
    link: Arc<Link>,
    /// Dropped when reading ends, however it ends: the transport's thread then reaps the
    /// launcher and reports the connection closed.
    _reading: oneshot::Sender<()>,
}

impl Reader {
    pub(super) fn new(input: OwnedFd, link: Arc<Link>, reading: oneshot::Sender<()>) -> Reader {
        Reader {
            input,
            framing: Framing::default(),
            limiter: RequestLimiter::default(),
            link,
            _reading: reading,
        }
    }

    /// Read, on this thread and then on each thread it is handed to, until the output ends.
    pub(super) async fn run(self) {
        let mut next = Some(self);
        while let Some(reader) = next {
            next = reader.read_until_moved().await;
        }
    }

    /// Read on this thread until the output ends or a move asked for is handed over (`None`
    /// either way); `Some` with the state back when the thread that asked is gone.
    async fn read_until_moved(self) -> Option<Reader> {
        let Reader {
            input,
            mut framing,
            mut limiter,
            link,
            _reading: reading,
        } = self;
        let place = &link.place;
        let Ok(mut input) = pipe::Receiver::from_owned_fd_unchecked(input) else {
            place.ended();
            return None;
        };
        place.at.store(thread_number(), Ordering::Relaxed);
        let to = loop {
            let stop = framing
                .read(&mut input, &link.stats, &place.wanted, |line, checked| {
                    handle_line(line, checked, &link, &mut limiter);
                    // Closed (our answers overflowed): stop reading (the server's writes now fail).
                    !link.overran.load(Ordering::Acquire)
                })
                .await;
            if stop == Stop::Ended {
                place.ended();
                return None;
            }
            if let Some(to) = place.take_asked() {
                break to;
            }
        };
        let Ok(input) = input.into_nonblocking_fd() else {
            place.ended();
            return None;
        };
        let reader = Reader {
            input,
            framing,
            limiter,
            link,
            _reading: reading,
        };
        to.send(reader).err()
    }
}

/// Why [`Framing::read`] returned.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Stop {
    /// The input ended or failed, or `on_line` said stop.
    Ended,
    /// A move was asked for; the state is whole, ready to read on from anywhere.
    Moving,
}

/// The line framing of a server's output and where it stands.
///
/// It reads straight into one line buffer per connection, with no read buffer of 64 KiB of
/// its own (tokio's `BufReader` zeroed one: 75 KiB of memory per idle connection of albedo's
/// client, 20 with this). A line under [`spare::COPY_UNDER`] (64 KiB) is copied out and the
/// buffer reused; what follows its newline stays as the start of the next. A line that reaches
/// it goes on through a staging buffer of a pipe's size, dropped when the line ends, and is
/// copied on from it ([`spare::extend`]: into the thread's spare once it nears 1 MiB), then
/// split off without a copy: a 10 MiB line read straight into its large buffer came 15-20 %
/// slower (the kernel writing pages not in cache; the same number of reads and wakes).
pub(super) struct Framing {
    buf: BytesMut,
    check: JsonCheck,
    /// A line over the limit is being dropped up to its newline.
    skipping: bool,
    /// `buf[..scanned]` holds no newline.
    scanned: usize,
    /// The room asked for before a read: doubled while reads fill it, up to `READ_MOST`.
    room: usize,
    stage: Option<BytesMut>,
}

impl Default for Framing {
    fn default() -> Framing {
        Framing {
            buf: BytesMut::new(),
            check: JsonCheck::default(),
            skipping: false,
            scanned: 0,
            room: READ_FIRST,
            stage: None,
        }
    }
}

impl Framing {
    /// Each line of `input` (its newline dropped) with what the check found in it, to
    /// `on_line` until that returns false or the input ends; or, once `moving` is notified,
    /// [`Stop::Moving`] at the next read, with every whole line read given and the rest kept.
    /// A line over [`MAX_MESSAGE_BYTES`] is dropped up to its newline and counted in `stats`.
    ///
    /// Everything before the read may run again when it is called again after a move: it
    /// starts where it stopped (the check catches up only with bytes it has not seen).
    pub(super) async fn read<R: tokio::io::AsyncRead + Unpin>(
        &mut self,
        input: &mut R,
        stats: &StdioStats,
        moving: &Notify,
        mut on_line: impl FnMut(Bytes, Option<&Checked>) -> bool,
    ) -> Stop {
        use tokio::io::AsyncReadExt;
        loop {
            while let Some(i) = self.line_end() {
                self.scanned = 0;
                if self.skipping || i > MAX_MESSAGE_BYTES {
                    if !self.skipping {
                        oversized(stats);
                    }
                    self.skipping = false;
                    self.check = JsonCheck::default();
                    bytes::Buf::advance(&mut self.buf, i + 1);
                    continue;
                }
                let checked = std::mem::take(&mut self.check).finish(&self.buf[..i]);
                let line = spare::split_line(&mut self.buf, i);
                if !on_line(line, checked.as_ref()) {
                    return Stop::Ended;
                }
            }
            if self.skipping {
                self.buf.clear();
            } else if self.buf.len() > MAX_MESSAGE_BYTES {
                oversized(stats);
                self.skipping = true;
                self.buf = BytesMut::new();
                self.check.give_up();
            } else {
                self.check.catch_up(&self.buf);
            }
            self.scanned = self.buf.len();
            // A large line's next bytes come through the staging buffer; a small one's
            // straight into the line buffer, with room made first.
            let large = self.buf.len() >= spare::COPY_UNDER;
            let into = if large {
                let st = self
                    .stage
                    .get_or_insert_with(|| BytesMut::with_capacity(READ_MOST));
                st.clear();
                st
            } else {
                self.stage = None;
                if self.buf.capacity() - self.buf.len() < self.room / 2 {
                    spare::reserve(&mut self.buf, self.room);
                }
                &mut self.buf
            };
            // At most a pipe's worth a read, however much room there is: tokio takes a read
            // that leaves room as the pipe drained, and waits for epoll before the next one.
            let ask = (into.capacity() - into.len()).min(READ_MOST);
            let mut into = bytes::BufMut::limit(into, ask);
            // A read that has not completed took nothing from the pipe.
            let r = tokio::select! {
                biased;
                () = moving.notified() => return Stop::Moving,
                r = input.read_buf(&mut into) => r,
            };
            let n = match r {
                Ok(0) | Err(_) => return Stop::Ended,
                Ok(n) => n,
            };
            if large {
                if let Some(st) = &self.stage {
                    spare::extend(&mut self.buf, st);
                }
            } else if n == ask {
                self.room = (self.room * 2).min(READ_MOST);
            }
        }
    }

    /// Where the line being read ends, if its newline has come. Once the line is known to be
    /// large (no newline in its first [`CHECK_FROM`] bytes), its check finds the newline in
    /// the same pass ([`JsonCheck::catch_up_line`]); before, or when the check does not follow
    /// the line, `memchr` looks on from where it last looked.
    fn line_end(&mut self) -> Option<usize> {
        if self.scanned >= CHECK_FROM && !self.skipping {
            match self.check.catch_up_line(&self.buf, Breaks::Lf) {
                LineScan::Break(i) => return Some(i),
                LineScan::NoBreak => {
                    self.scanned = self.buf.len();
                    return None;
                }
                LineScan::NotFollowed => {}
            }
        }
        memchr::memchr(b'\n', &self.buf[self.scanned..]).map(|i| self.scanned + i)
    }
}

/// A line over [`MAX_MESSAGE_BYTES`]: counted, and logged within the log limit.
fn oversized(stats: &StdioStats) {
    stats.oversized_lines.fetch_add(1, Ordering::Relaxed);
    if let Some(left_out) = stats.log_limit.allow() {
        tracing::warn!(
            limit = MAX_MESSAGE_BYTES,
            left_out,
            "a line from the server is over the 16 MiB limit; it is dropped"
        );
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
