//! The pending-request table and its timeouts: each request's waiter, the deadline its caller
//! waits until, and one task per client that times them out.
//!
//! A timer per request (`tokio::time::timeout`) puts an entry in tokio's timer wheel and takes
//! it out again on every call, and the first timer set while a thread has none wakes that
//! thread's driver through its eventfd: at one call in flight, a `write` and an extra
//! `epoll_wait` per call on the connection's thread, and some 1,000 instructions per call at
//! any load (`albedo-mcp-bench --only instructions`). Here a request's deadline is a field of
//! its entry, and the client's watch task sleeps until the earliest deadline it was told of
//! (`armed`, never later than any waiting request's). A request whose deadline is at or after
//! `armed` sets no timer at all; when `armed` passes, the task times out the requests that are
//! due and sleeps until the earliest one left. It is told of an earlier deadline through a
//! `Notify`, and ends when the client is closed or dropped, or with the runtime it ran on (the
//! next request that waits starts another).
//!
//! Owns: the table, the deadlines and the watch task. Must not touch: the transport (a timed
//! out request is cancelled by its caller, who knows the request), the era, the events.

use super::{Inner, RpcError};
use crate::fastmap::FastMap;
use crate::protocol::jsonrpc::RequestId;
use crate::protocol::result::ResultText;
use std::sync::{Arc, Weak};
use std::time::Duration;
use tokio::sync::{oneshot, Notify};
use tokio::time::Instant;

/// What a request's caller receives: its answer, or why none will come.
pub(super) type Answer = Result<ResultText, RpcError>;

/// One request in flight: who waits for its answer, and until when, once its caller waits.
struct Waiter {
    tx: oneshot::Sender<Answer>,
    deadline: Option<Instant>,
}

/// The requests in flight of one client (under the client's `pending` lock).
#[derive(Default)]
pub(super) struct Pending {
    waiters: FastMap<RequestId, Waiter>,
    /// The deadline the watch task sleeps until: at or before every waiter's deadline.
    armed: Option<Instant>,
    /// Whether a watch task runs.
    watching: bool,
}

/// What [`Pending::wait_until`] asks of its caller.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Watch {
    /// The watch task already wakes in time.
    Nothing,
    /// Tell the watch task of an earlier deadline.
    Notify,
    /// Start the watch task.
    Start,
}

impl Pending {
    pub(super) fn insert(&mut self, id: RequestId, tx: oneshot::Sender<Answer>) {
        self.waiters.insert(id, Waiter { tx, deadline: None });
    }

    pub(super) fn remove(&mut self, id: &RequestId) -> Option<oneshot::Sender<Answer>> {
        self.waiters.remove(id).map(|w| w.tx)
    }

    pub(super) fn drain(&mut self) -> Vec<oneshot::Sender<Answer>> {
        self.waiters.drain().map(|(_, w)| w.tx).collect()
    }

    #[cfg(test)]
    pub(super) fn is_empty(&self) -> bool {
        self.waiters.is_empty()
    }

    /// Request `id`'s caller waits until `deadline`. A request already answered (its waiter
    /// gone) needs no deadline.
    pub(super) fn wait_until(&mut self, id: &RequestId, deadline: Instant) -> Watch {
        let Some(w) = self.waiters.get_mut(id) else {
            return Watch::Nothing;
        };
        w.deadline = Some(deadline);
        let earlier = match self.armed {
            Some(at) if at <= deadline => false,
            _ => {
                self.armed = Some(deadline);
                true
            }
        };
        if !self.watching {
            self.watching = true;
            Watch::Start
        } else if earlier {
            Watch::Notify
        } else {
            Watch::Nothing
        }
    }

    /// At `now`: the waiters whose deadline passed, taken out, and `armed` moved to the
    /// earliest deadline left.
    fn expire(&mut self, now: Instant) -> Vec<oneshot::Sender<Answer>> {
        let txs = self
            .waiters
            .extract_if(|_, w| w.deadline.is_some_and(|d| d <= now))
            .map(|(_, w)| w.tx)
            .collect();
        self.armed = self.waiters.values().filter_map(|w| w.deadline).min();
        txs
    }
}

/// The client's watch task, started by the first request whose caller waits with no task
/// running: it holds the client only weakly.
pub(super) fn start(inner: Weak<Inner>, wake: Arc<Notify>) {
    tokio::spawn(watch(inner, wake));
}

/// Marks the table unwatched when the task ends, however it ends (a runtime that shuts down
/// drops it without running it to the end).
struct Watching(Weak<Inner>);

impl Drop for Watching {
    fn drop(&mut self) {
        if let Some(inner) = self.0.upgrade() {
            if let Ok(mut p) = inner.pending.lock() {
                p.watching = false;
            }
        }
    }
}

async fn watch(inner: Weak<Inner>, wake: Arc<Notify>) {
    let _watching = Watching(inner.clone());
    loop {
        let armed = {
            let Some(i) = inner.upgrade() else { return };
            if i.is_closed() {
                return;
            }
            let Ok(p) = i.pending.lock() else { return };
            p.armed
        };
        match armed {
            None => {
                wake.notified().await;
                continue;
            }
            Some(at) => {
                tokio::select! {
                    _ = tokio::time::sleep_until(at) => {}
                    _ = wake.notified() => continue,
                }
            }
        }
        let due = {
            let Some(i) = inner.upgrade() else { return };
            let Ok(mut p) = i.pending.lock() else { return };
            p.expire(Instant::now())
        };
        for tx in due {
            // The caller reports its own timeout and cancels the request.
            let _ = tx.send(Err(RpcError::Timeout(Duration::ZERO)));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn waiter(p: &mut Pending, id: i64) -> oneshot::Receiver<Answer> {
        let (tx, rx) = oneshot::channel();
        p.insert(RequestId::Number(id), tx);
        rx
    }

    #[test]
    fn a_later_deadline_sets_nothing_and_an_earlier_one_wakes_the_task() {
        let t0 = Instant::now();
        let mut p = Pending::default();
        let _a = waiter(&mut p, 1);
        let _b = waiter(&mut p, 2);
        let _c = waiter(&mut p, 3);
        let s = Duration::from_secs(1);
        assert_eq!(
            p.wait_until(&RequestId::Number(1), t0 + 10 * s),
            Watch::Start
        );
        assert_eq!(
            p.wait_until(&RequestId::Number(2), t0 + 20 * s),
            Watch::Nothing
        );
        assert_eq!(
            p.wait_until(&RequestId::Number(3), t0 + 5 * s),
            Watch::Notify
        );
        assert_eq!(p.armed, Some(t0 + 5 * s));
        // An answered request needs no deadline.
        assert_eq!(p.wait_until(&RequestId::Number(9), t0), Watch::Nothing);
        assert_eq!(p.armed, Some(t0 + 5 * s));
    }

    #[test]
    fn expiry_takes_the_due_waiters_and_arms_the_earliest_left() {
        let t0 = Instant::now();
        let s = Duration::from_secs(1);
        let mut p = Pending::default();
        let _a = waiter(&mut p, 1);
        let _b = waiter(&mut p, 2);
        let _c = waiter(&mut p, 3);
        p.wait_until(&RequestId::Number(1), t0 + 5 * s);
        p.wait_until(&RequestId::Number(2), t0 + 20 * s);
        // 3 has no deadline yet: its caller has not begun to wait.
        assert_eq!(p.expire(t0 + 5 * s).len(), 1);
        assert_eq!(p.armed, Some(t0 + 20 * s));
        assert!(p.remove(&RequestId::Number(1)).is_none());
        assert_eq!(p.expire(t0 + 19 * s).len(), 0);
        assert_eq!(p.expire(t0 + 20 * s).len(), 1);
        assert_eq!(p.armed, None, "3 waits with no deadline");
        assert!(p.remove(&RequestId::Number(3)).is_some());
    }
}
