//! What the transport hands the client core: every message read on any stream, except
//! replays already handled in this session (SSE event ids, server request ids and response
//! ids, in a bounded seen-set).
//!
//! Owns: the seen-set and `Ctx::dispatch`, `deliver_data`. Must not touch: HTTP requests
//! and streams (it is given parsed messages or an event's data).

use super::driver::Ctx;
use crate::protocol::jsonrpc::{self, Message, RequestId};
use crate::transport::Inbound;
use bytes::Bytes;
use std::collections::{HashSet, VecDeque};
use std::sync::atomic::Ordering;

/// How many seen ids (events, server requests, responses) are kept per session.
const SEEN_CAPACITY: usize = 4096;

/// Ids already handled in this session, bounded (oldest forgotten first).
#[derive(Default)]
pub(super) struct Seen {
    pub(super) set: HashSet<String>,
    pub(super) order: VecDeque<String>,
}

impl Seen {
    /// True when `key` is new.
    pub(super) fn insert(&mut self, key: String) -> bool {
        if self.set.contains(&key) {
            return false;
        }
        if self.order.len() >= SEEN_CAPACITY {
            if let Some(old) = self.order.pop_front() {
                self.set.remove(&old);
            }
        }
        self.set.insert(key.clone());
        self.order.push_back(key);
        true
    }
}

impl Ctx {
    /// Hand one message to the client core, dropping replays. Returns true when it is (or
    /// repeats) the response to `awaited`.
    pub(super) fn dispatch(&self, msg: Message, awaited: Option<&RequestId>) -> bool {
        let key = match &msg {
            Message::Request { id, .. } => Some(format!("q:{}", id_key(id))),
            Message::Response { id, .. } => Some(format!("r:{}", id_key(id))),
            _ => None,
        };
        let is_awaited =
            matches!((&msg, awaited), (Message::Response { id, .. }, Some(a)) if id == a);
        if let Some(k) = key {
            if !self.seen.borrow_mut().insert(k) {
                self.shared
                    .stats
                    .duplicates_dropped
                    .fetch_add(1, Ordering::Relaxed);
                return is_awaited;
            }
        }
        let other_response = match &msg {
            Message::Response { id, .. } if !is_awaited => Some(id.clone()),
            _ => None,
        };
        self.deliver(Inbound::Message(msg));
        if let Some(id) = other_response {
            // Its answer came on another stream (a replay): its own worker can stop.
            let w = self.workers.borrow_mut().remove(&id);
            if let Some((_, h)) = w {
                h.abort();
            }
        }
        is_awaited
    }
}

fn id_key(id: &RequestId) -> String {
    match id {
        RequestId::Number(n) => format!("n{n}"),
        RequestId::String(s) => format!("s{s}"),
    }
}

/// Parse an event's data and dispatch it; true when it answered `awaited`.
pub(super) fn deliver_data(ctx: &Ctx, data: &Bytes, awaited: Option<&RequestId>) -> bool {
    match jsonrpc::parse_batch(data) {
        Ok(msgs) => {
            let mut answered = false;
            for m in msgs {
                answered |= ctx.dispatch(m, awaited);
            }
            answered
        }
        Err(e) => {
            ctx.shared.stats.malformed.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(error = %e, "ignored an SSE event that is not JSON-RPC");
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seen_is_bounded() {
        let mut s = Seen::default();
        for i in 0..(SEEN_CAPACITY + 10) {
            assert!(s.insert(format!("e:{i}")));
        }
        assert!(!s.insert(format!("e:{}", SEEN_CAPACITY + 5)));
        assert!(s.insert("e:0".into()), "the oldest were forgotten");
        assert!(s.set.len() <= SEEN_CAPACITY);
    }
}
