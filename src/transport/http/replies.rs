//! Our answers to the server's requests (each its own POST, as the spec has it): a server that
//! asks a lot would make us POST a lot, so at most 16 such POSTs run at once per connection;
//! the others wait in a queue of at most 1,024 answers and 32 MiB, and an answer past that is
//! dropped, counted (`replies_dropped`) and logged (at the 1st, 2nd, 4th, 8th ... drop).
//! How many requests reach the client core at all is `inbound`'s (the rate limit).
//!
//! Owns: the queue of answers and its workers. Must not touch: how one POST is made and read
//! (`post`), which requests are answered (`inbound`).

use super::driver::Ctx;
use super::post::post;
use crate::transport::{Outbound, TransportError};
use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// Answer POSTs running at once on one connection.
pub const MAX_REPLY_POSTS: usize = 16;
/// Answers waiting for one of those.
pub const MAX_QUEUED_REPLIES: usize = 1024;
/// ... and their bytes.
pub const MAX_QUEUED_REPLY_BYTES: usize = 32 * 1024 * 1024;

/// The answers waiting, and how many workers post them.
#[derive(Default)]
pub(super) struct Replies {
    queue: VecDeque<Outbound>,
    bytes: usize,
    posting: usize,
}

impl Replies {
    /// Forget what waits (the connection is closing).
    pub(super) fn clear(&mut self) {
        self.queue.clear();
        self.bytes = 0;
    }

    fn pop(&mut self) -> Option<Outbound> {
        let out = self.queue.pop_front()?;
        self.bytes -= out.body.len();
        Some(out)
    }
}

/// Queue one answer, starting a worker when fewer than [`MAX_REPLY_POSTS`] run.
pub(super) fn queue_reply(ctx: &Arc<Ctx>, out: Outbound) {
    let start = {
        let mut r = super::driver::lock(&ctx.replies);
        if r.queue.len() >= MAX_QUEUED_REPLIES || r.bytes + out.body.len() > MAX_QUEUED_REPLY_BYTES
        {
            drop(r);
            let n = ctx
                .shared
                .stats
                .replies_dropped
                .fetch_add(1, Ordering::Relaxed)
                + 1;
            if n.is_power_of_two() {
                tracing::warn!(
                    dropped = n,
                    queued = MAX_QUEUED_REPLIES,
                    "answers to the server's requests are queued past the bound; dropped"
                );
            }
            if let Some(ack) = out.ack {
                let _ = ack.send(Err(TransportError::Overrun(
                    "too many answers to the server's requests are queued".into(),
                )));
            }
            return;
        }
        r.bytes += out.body.len();
        r.queue.push_back(out);
        let start = r.posting < MAX_REPLY_POSTS;
        if start {
            r.posting += 1;
        }
        start
    };
    if start {
        tokio::task::spawn_local(reply_worker(ctx.clone()));
    }
}

/// Post queued answers one after another until none is left.
async fn reply_worker(ctx: Arc<Ctx>) {
    loop {
        let next = {
            let mut r = super::driver::lock(&ctx.replies);
            let next = r.pop();
            if next.is_none() {
                r.posting -= 1;
            }
            next
        };
        let Some(out) = next else { return };
        if ctx.shared.closed.load(Ordering::Acquire) {
            continue; // closing: what is left is dropped
        }
        post(&ctx, out).await;
    }
}
