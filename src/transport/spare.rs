//! One spare buffer per thread for large messages. A message that outgrows [`LARGE`] bytes (a
//! tool's 10 MiB result) is read into memory that is already mapped, and once every `Bytes` of it is
//! dropped (the API has written its answer), that memory is the next large message's buffer.
//! Without it each large message grew a fresh buffer: glibc gives a thread arena's large
//! block back to the kernel when it is freed, so a 10 MiB result took 2,560 page faults and
//! as many zeroed pages, every time (`perf stat` on the daemon under `--only large`: 54,000
//! faults for 21 calls).
//!
//! The cost is memory kept: at most one large message's allocation per thread that read one
//! (the connections' arbiters, and the API workers: a stdio reader that moved to its caller,
//! an HTTP answer POSTed by its caller), never more than
//! [`crate::protocol::jsonrpc::MAX_MESSAGE_BYTES`] and its growth slack.
//!
//! Owns: the thread's spare. Must not touch: anything but `bytes`.

use bytes::{Bytes, BytesMut};
use std::cell::RefCell;

/// A buffer about to be reallocated to this size or more moves into the spare, when the
/// spare is free (what it held, less than this, is copied once).
pub const LARGE: usize = 1 << 20;

/// A message at least this long becomes the thread's spare when it is read: every buffer that
/// moved into the spare holds more than this by then, so a message that took the spare gives
/// it back.
const KEEP: usize = LARGE / 2;

/// A line shorter than this is copied out of the read buffer ([`split_line`]); one that reaches
/// it comes on into a buffer of its own (the stdio transport's staging).
pub const COPY_UNDER: usize = 64 * 1024;

/// What a body of a declared length gets when the spare is not free: its buffer grows as the
/// bytes arrive (a server that declares 16 MiB and sends nothing costs no more than this).
const FRESH: usize = 64 * 1024;

thread_local! {
    /// The last large message read on this thread (a clone: the message itself went on).
    static SPARE: RefCell<Option<Bytes>> = const { RefCell::new(None) };
}

/// The spare as an empty buffer of at least `need` bytes, when nothing else holds it any
/// more. A spare still held (its answer not yet written) stays where it is.
fn take(need: usize) -> Option<BytesMut> {
    SPARE.with(|s| {
        let mut slot = s.borrow_mut();
        if !slot.as_ref()?.is_unique() {
            return None;
        }
        let mut b = slot.take()?.try_into_mut().ok()?;
        b.clear();
        b.reserve(need);
        Some(b)
    })
}

/// Append `part` to `buf`. A buffer whose next reallocation would reach [`LARGE`] first moves
/// into the thread's spare when that is free.
pub fn extend(buf: &mut BytesMut, part: &[u8]) {
    reserve(buf, part.len());
    buf.extend_from_slice(part);
}

/// Room for `additional` more bytes in `buf` (a read into its spare capacity follows). A
/// buffer whose next reallocation would reach [`LARGE`] first moves into the thread's spare
/// when that is free.
pub fn reserve(buf: &mut BytesMut, additional: usize) {
    let (want, cap) = (buf.len() + additional, buf.capacity());
    if want > cap && cap < LARGE && want.max(2 * cap) >= LARGE {
        if let Some(mut spare) = take(want) {
            spare.extend_from_slice(buf);
            *buf = spare;
        }
    }
    buf.reserve(additional);
}

/// A buffer for a message of `len` bytes (an HTTP body's declared length): the spare when
/// the message is large and the spare free, else a small one that grows as bytes arrive.
pub fn with_capacity(len: usize) -> BytesMut {
    if len >= LARGE {
        if let Some(spare) = take(len) {
            return spare;
        }
    }
    BytesMut::with_capacity(len.min(FRESH))
}

/// The message read into `buf`, split off. A large one leaves no view of its allocation in
/// `buf` (nor does a large remainder), so that the spare it becomes can be reused.
pub fn split(buf: &mut BytesMut) -> BytesMut {
    let msg = buf.split();
    let_go(&msg, buf);
    msg
}

/// After `msg` was split off `buf`: when either is large, what is left in `buf` moves to a
/// buffer of its own, so that `buf` holds no view of the large allocation.
fn let_go(msg: &BytesMut, buf: &mut BytesMut) {
    if msg.len() >= KEEP || buf.capacity() > LARGE {
        *buf = BytesMut::from(&buf[..]);
    }
}

/// `msg` frozen and kept ([`keep`]).
fn kept(msg: BytesMut) -> Bytes {
    let msg = msg.freeze();
    keep(&msg);
    msg
}

/// The line `buf[..end]` taken out (its newline at `end` dropped); what follows the newline
/// stays in `buf`. A line under [`COPY_UNDER`] bytes is copied out, so that `buf` stays the
/// only owner of its memory and the next reads reuse it: one shared by the lines in flight
/// would be freed by the last of them, on the thread that answered it, and each line's split
/// would count its owners with atomics both threads write. A longer one is split off without
/// a copy and kept ([`keep`]); after a large one the rest moves to a small buffer of its own
/// (it is at most one read), so that no view of the large allocation stays behind.
pub fn split_line(buf: &mut BytesMut, end: usize) -> Bytes {
    if end < COPY_UNDER {
        let msg = Bytes::copy_from_slice(&buf[..end]);
        bytes::Buf::advance(buf, end + 1);
        return msg;
    }
    let msg = buf.split_to(end);
    bytes::Buf::advance(buf, 1);
    let_go(&msg, buf);
    kept(msg)
}

/// The message read into `buf`, split off ([`split`]) and kept ([`keep`]).
pub fn finish(buf: &mut BytesMut) -> Bytes {
    kept(split(buf))
}

/// `msg` is a message just read: one of [`KEEP`] bytes or more becomes the thread's spare.
pub fn keep(msg: &Bytes) {
    if msg.len() >= KEEP {
        SPARE.with(|s| *s.borrow_mut() = Some(msg.clone()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grow(n: usize) -> BytesMut {
        let mut b = BytesMut::new();
        let chunk = vec![b'x'; 64 * 1024];
        while b.len() < n {
            let k = (n - b.len()).min(chunk.len());
            extend(&mut b, &chunk[..k]);
        }
        b
    }

    fn spare_at() -> Option<*const u8> {
        SPARE.with(|s| s.borrow().as_ref().map(|b| b.as_ptr()))
    }

    #[test]
    fn a_large_message_s_memory_is_the_next_one_s_once_it_is_dropped() {
        let first = grow(3 << 20).freeze();
        let at = first.as_ptr();
        keep(&first);
        assert_eq!(spare_at(), Some(at));
        // Still held (its answer is being written): the next message gets memory of its own
        // and the spare stays where it is.
        let second = grow(3 << 20);
        assert_ne!(second.as_ptr(), at);
        assert_eq!(spare_at(), Some(at));
        drop(second);
        drop(first);
        // Free now: the next large message grows into it, its bytes intact.
        let third = grow(3 << 20);
        assert_eq!(third.as_ptr(), at);
        assert_eq!(spare_at(), None);
        assert_eq!(&third[..], &vec![b'x'; 3 << 20][..]);
        let third = third.freeze();
        keep(&third);
        drop(third);
        // A body of a declared length gets it too.
        let body = with_capacity(2 << 20);
        assert_eq!(body.as_ptr(), at);
        assert!(body.is_empty() && body.capacity() >= 2 << 20);
    }

    #[test]
    fn a_message_that_took_the_spare_gives_it_back() {
        let first = grow(3 << 20).freeze();
        let at = first.as_ptr();
        keep(&first);
        drop(first);
        // 700 KiB: it took the spare when it outgrew 512 KiB, and is long enough to be kept.
        let medium = grow(700 << 10);
        assert_eq!(medium.as_ptr(), at);
        let medium = medium.freeze();
        keep(&medium);
        drop(medium);
        assert_eq!(grow(3 << 20).as_ptr(), at);
    }

    #[test]
    fn small_messages_and_busy_spares_leave_it_alone() {
        let small = grow(1000).freeze();
        keep(&small);
        assert_eq!(spare_at(), None);
        let b = with_capacity(4096);
        assert!(b.capacity() >= 4096 && b.is_empty());
        // A declared 16 MiB with no spare free: a small buffer, grown as bytes arrive.
        assert!(with_capacity(16 << 20).capacity() <= FRESH);
    }
}
