//! One spare buffer per thread for large messages. A message over [`LARGE`] bytes (a tool's
//! 10 MiB result) is read into memory that is already mapped, and once every `Bytes` of it is
//! dropped (the API has written its answer), that memory is the next large message's buffer.
//! Without it each large message grew a fresh buffer: glibc gives a thread arena's large
//! block back to the kernel when it is freed, so a 10 MiB result took 2,560 page faults and
//! as many zeroed pages, every time (`perf stat` on the daemon under `--only large`: 54,000
//! faults for 21 calls).
//!
//! The cost is memory kept: at most one large message's allocation per thread that read one
//! (the transports run on the connection arbiters), never more than
//! [`crate::protocol::jsonrpc::MAX_MESSAGE_BYTES`] and its growth slack.
//!
//! Owns: the thread's spare. Must not touch: anything but `bytes`.

use bytes::{Bytes, BytesMut};
use std::cell::RefCell;

/// A message at least this long is kept as the thread's spare when it is done.
pub const LARGE: usize = 1 << 20;

/// A buffer growing past this moves into the spare (when the spare is free and big enough).
const GROW_INTO_SPARE: usize = 256 * 1024;

thread_local! {
    /// The last large message read on this thread (a clone: the message itself went on).
    static SPARE: RefCell<Option<Bytes>> = const { RefCell::new(None) };
}

/// The spare as an empty buffer, when nothing else holds it any more.
fn take() -> Option<BytesMut> {
    let spare = SPARE.with(|s| s.borrow_mut().take())?;
    let mut b = spare.try_into_mut().ok()?;
    b.clear();
    Some(b)
}

/// Append `part` to `buf`. A buffer about to outgrow its capacity past [`GROW_INTO_SPARE`]
/// first moves into the thread's spare when that is free and large enough (what `buf` held is
/// copied once: the spare is large, so it is not outgrown again).
pub fn extend(buf: &mut BytesMut, part: &[u8]) {
    let want = buf.len() + part.len();
    if want > buf.capacity() && want >= GROW_INTO_SPARE {
        if let Some(mut spare) = take() {
            if spare.capacity() >= want {
                spare.extend_from_slice(buf);
                *buf = spare;
            }
        }
    }
    buf.extend_from_slice(part);
}

/// A buffer for a message of `len` bytes (an HTTP body's length): the spare when it is free
/// and large enough, else a new one of that capacity.
pub fn with_capacity(len: usize) -> BytesMut {
    if len >= GROW_INTO_SPARE {
        if let Some(spare) = take().filter(|s| s.capacity() >= len) {
            return spare;
        }
    }
    BytesMut::with_capacity(len)
}

/// `msg` is a message just read: a large one becomes the thread's spare. Its reader must not
/// keep another view of the same allocation (a `BytesMut` it was split from), or the spare
/// never frees.
pub fn keep(msg: &Bytes) {
    if msg.len() >= LARGE {
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

    #[test]
    fn a_large_message_s_memory_is_the_next_one_s_once_it_is_dropped() {
        let first = grow(3 << 20).freeze();
        let at = first.as_ptr();
        keep(&first);
        // Still held (the answer is being written): the next message gets memory of its own.
        let second = grow(3 << 20).freeze();
        assert_ne!(second.as_ptr(), at);
        drop(second);
        drop(first);
        // The first is dropped and was the spare: the next large message grows into it.
        let third = grow(3 << 20);
        assert_eq!(third.as_ptr(), at);
        assert_eq!(&third[..], &vec![b'x'; 3 << 20][..]);
        let third = third.freeze();
        keep(&third);
        drop(third);
        let body = with_capacity(2 << 20);
        assert_eq!(body.as_ptr(), at);
        assert!(body.is_empty());
    }

    #[test]
    fn small_messages_leave_the_spare_alone() {
        let small = grow(1000).freeze();
        keep(&small);
        assert!(SPARE.with(|s| s.borrow().is_none()));
        let b = with_capacity(4096);
        assert!(b.capacity() >= 4096 && b.is_empty());
    }
}
