//! What the transport hands the client core: every message read on any stream, except
//! replays already handled in this session (SSE event ids, server request ids and response
//! ids, in a bounded seen-set) and responses whose string id is too long to answer anything
//! of ours (over 256 bytes: ignored and counted, never stored). The seen-set holds a number
//! id as it is and a 112-bit digest of a textual one, never the text, so its memory is
//! bounded (4,096 entries of 16 bytes) whatever the ids' length. Requests from the server go
//! through the rate limit of [`crate::transport::gate`] (over it: dropped without an answer;
//! a flood: the connection is closed), and a JSON-RPC batch is taken only from a server that
//! negotiated 2025-03-26.
//!
//! Owns: the seen-set and `Ctx::dispatch`, `deliver_data`. Must not touch: HTTP requests
//! and streams (it is given parsed messages or an event's data).

use super::driver::Ctx;
use crate::protocol::check::Checked;
use crate::protocol::jsonrpc::{self, Message, RequestId};
use crate::transport::gate::{Admit, RequestLimiter};
use crate::transport::Inbound;
use bytes::Bytes;
use sha2::{Digest, Sha256};
use std::collections::VecDeque;
use std::sync::atomic::Ordering;

/// How many seen ids (events, server requests, responses) are kept per session.
const SEEN_CAPACITY: usize = 4096;

/// A seen id, 16 bytes whatever the id: its kind and form, then a number id as it is (the
/// ids of our own requests are numbers, so an answer needs no digest), or the first 112 bits
/// of the SHA-256 of a textual id. The form byte keeps the two apart. A collision of two texts
/// (two ids taken for one, so a message dropped as a replay) is as unlikely as finding one for
/// SHA-256 truncated to 112 bits; the ids come from the server, so a keyless fast hash would
/// let it forge one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(super) struct SeenKey([u8; 16]);

impl SeenKey {
    /// An SSE event id.
    pub(super) fn event(id: &str) -> SeenKey {
        Self::digest(b'e', id.as_bytes())
    }

    /// The id of a request from the server.
    pub(super) fn request(id: &RequestId) -> SeenKey {
        Self::of_id(b'q', id)
    }

    /// The id of a response.
    pub(super) fn response(id: &RequestId) -> SeenKey {
        Self::of_id(b'r', id)
    }

    fn of_id(kind: u8, id: &RequestId) -> SeenKey {
        match id {
            RequestId::Number(n) => {
                let mut k = [0u8; 16];
                k[0] = kind;
                k[1] = b'n';
                k[8..].copy_from_slice(&n.to_le_bytes());
                SeenKey(k)
            }
            RequestId::String(s) => Self::digest(kind, s.as_bytes()),
        }
    }

    fn digest(kind: u8, text: &[u8]) -> SeenKey {
        let d = Sha256::new()
            .chain_update([kind, b's'])
            .chain_update(text)
            .finalize();
        let mut k = [0u8; 16];
        k[0] = kind;
        k[1] = b's';
        k[2..].copy_from_slice(&d[..14]);
        SeenKey(k)
    }
}

/// Ids already handled in this session, bounded (oldest forgotten first).
#[derive(Default)]
pub(super) struct Seen {
    pub(super) set: crate::fastmap::FastSet<SeenKey>,
    pub(super) order: VecDeque<SeenKey>,
}

impl Seen {
    /// True when `key` is new.
    pub(super) fn insert(&mut self, key: SeenKey) -> bool {
        if self.set.contains(&key) {
            return false;
        }
        if self.order.len() >= SEEN_CAPACITY {
            if let Some(old) = self.order.pop_front() {
                self.set.remove(&old);
            }
        }
        self.set.insert(key);
        self.order.push_back(key);
        true
    }
}

impl Ctx {
    /// Hand one message to the client core, dropping replays. Returns true when it is (or
    /// repeats) the response to `awaited`.
    pub(super) fn dispatch(&self, msg: Message, awaited: Option<&RequestId>) -> bool {
        if self.shared.closed.load(Ordering::Acquire) {
            return false; // closed (a flood, say): the rest of a batch goes nowhere
        }
        let key = match &msg {
            Message::Response { id, .. } if id.oversized_for_response() => {
                self.shared
                    .stats
                    .oversized_ids
                    .fetch_add(1, Ordering::Relaxed);
                tracing::debug!(
                    limit = jsonrpc::MAX_RESPONSE_ID_BYTES,
                    "ignored a response whose id is too long to answer any request"
                );
                return false;
            }
            Message::Request { id, .. } => Some(SeenKey::request(id)),
            Message::Response { id, .. } => Some(SeenKey::response(id)),
            _ => None,
        };
        let is_awaited =
            matches!((&msg, awaited), (Message::Response { id, .. }, Some(a)) if id == a);
        if let Some(k) = key {
            if !super::driver::lock(&self.seen).insert(k) {
                self.shared
                    .stats
                    .duplicates_dropped
                    .fetch_add(1, Ordering::Relaxed);
                return is_awaited;
            }
        }
        if matches!(msg, Message::Request { .. }) && !self.admit_request() {
            return false;
        }
        let other_response = match &msg {
            Message::Response { id, .. } if !is_awaited => Some(id.clone()),
            _ => None,
        };
        self.deliver(Inbound::Message(msg));
        if let Some(id) = other_response {
            // Its answer came on another stream (a replay): its own worker can stop.
            let w = super::driver::lock(&self.workers).remove(&id);
            if let Some((_, h)) = w {
                h.abort();
            }
        }
        is_awaited
    }

    /// The rate limit on the server's requests: true to answer this one.
    fn admit_request(&self) -> bool {
        let admit = super::driver::lock(&self.limiter).admit();
        match admit {
            Admit::Deliver => true,
            Admit::Drop => {
                let n = self
                    .shared
                    .stats
                    .requests_dropped
                    .fetch_add(1, Ordering::Relaxed)
                    + 1;
                if n.is_power_of_two() {
                    tracing::warn!(
                        dropped = n,
                        "the server's requests are over the rate limit; dropped without an answer"
                    );
                }
                false
            }
            Admit::Flood => {
                self.shared
                    .stats
                    .requests_dropped
                    .fetch_add(1, Ordering::Relaxed);
                self.overrun(&RequestLimiter::flood_reason());
                false
            }
        }
    }

    /// A batch from a server that may not send one: counted and logged; true to refuse it.
    pub(super) fn refuses_batch(&self, body: &[u8]) -> bool {
        if !jsonrpc::is_batch(body) || self.batches_allowed() {
            return false;
        }
        self.shared
            .stats
            .batches_refused
            .fetch_add(1, Ordering::Relaxed);
        tracing::warn!(
            "refused a JSON-RPC batch: only a server that negotiated {} may send batches",
            jsonrpc::BATCH_VERSION
        );
        true
    }
}

/// Parse an event's data (with what was checked of it as it arrived) and dispatch it; true
/// when it answered `awaited`.
pub(super) fn deliver_data(
    ctx: &Ctx,
    data: &Bytes,
    checked: Option<&Checked>,
    awaited: Option<&RequestId>,
) -> bool {
    if ctx.refuses_batch(data) {
        return false;
    }
    match jsonrpc::parse_batch_checked(data, checked) {
        Ok(msgs) => {
            let mut answered = false;
            for m in msgs {
                answered |= ctx.dispatch(m, awaited);
            }
            answered
        }
        Err(e) => {
            ctx.shared.stats.malformed.fetch_add(1, Ordering::Relaxed);
            if let Some(left_out) = ctx.shared.stats.log_limit.allow() {
                tracing::warn!(error = %e, left_out, "ignored an SSE event that is not JSON-RPC");
            }
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
            assert!(s.insert(SeenKey::event(&format!("{i}"))));
        }
        assert!(!s.insert(SeenKey::event(&format!("{}", SEEN_CAPACITY + 5))));
        assert!(s.insert(SeenKey::event("0")), "the oldest were forgotten");
        assert!(s.set.len() <= SEEN_CAPACITY);
    }

    #[test]
    fn seen_keys_tell_kinds_and_forms_apart_and_are_16_bytes_whatever_the_id() {
        let n = RequestId::Number(7);
        let s = RequestId::String("7".into());
        let keys = [
            SeenKey::event("7"),
            SeenKey::request(&n),
            SeenKey::request(&s),
            SeenKey::response(&n),
            SeenKey::response(&s),
        ];
        for (i, a) in keys.iter().enumerate() {
            for b in &keys[i + 1..] {
                assert_ne!(a, b);
            }
        }
        assert_eq!(
            SeenKey::request(&n),
            SeenKey::request(&RequestId::Number(7))
        );
        // Number ids are kept as they are: two numbers never meet.
        assert_ne!(
            SeenKey::response(&RequestId::Number(1)),
            SeenKey::response(&RequestId::Number(1 << 8))
        );
        let huge = RequestId::String("x".repeat(1 << 20));
        assert_eq!(std::mem::size_of_val(&SeenKey::request(&huge)), 16);
    }
}
