//! The Registry actor: the supervisor of every Connection. It starts each connection on one
//! of a few arbiters (threads) inside a supervision loop that runs the actor's context with
//! the panic caught: a connection that dies by a panic anywhere (a handler, its event
//! stream, a future it spawned) is logged with its server's name, counted, and started again
//! with a fresh mailbox and a fresh link behind the same [`ConnHandle`], so sessions keep
//! reaching it. Restarts after the first are backed off, and a connection that panics again
//! and again is marked failed instead of spinning. A connection closed for good, or whose
//! last handle went away, is never restarted.
//!
//! actix's own `Supervisor` cannot do this: an uncaught panic unwinds through its future
//! and takes the actor down for good (`../shared/stack-notes.md`, traps).
//!
//! Owns: starting, restarting and counting connections. Must not touch: what a connection
//! does, the API.

use super::connection::{ConnContext, ConnShared, Connection};
use super::handle::{ConnHandle, Slot};
use crate::store::settings::ResolvedServer;
use actix::dev::channel;
use actix::prelude::*;
use futures_util::FutureExt;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

/// Mailbox capacity of a connection (actix's default).
const MAILBOX: usize = 16;

pub struct Registry {
    arbiters: Vec<actix::ArbiterHandle>,
    next: usize,
    live: Vec<Weak<Slot>>,
    /// Supervision loops still running (an actor alive or about to restart).
    running: Arc<AtomicUsize>,
    started: u64,
}

impl Registry {
    /// `threads` arbiters host the connections (at least one).
    pub fn new(threads: usize) -> Registry {
        let arbiters = (0..threads.max(1))
            .map(|_| actix::Arbiter::new().handle())
            .collect();
        Registry {
            arbiters,
            next: 0,
            live: Vec::new(),
            running: Arc::new(AtomicUsize::new(0)),
            started: 0,
        }
    }
}

impl Actor for Registry {
    type Context = Context<Self>;
}

/// Start a supervised connection for one server.
#[derive(Message)]
#[rtype(result = "ConnHandle")]
pub struct StartConnection {
    pub server: Arc<ResolvedServer>,
    pub ctx: ConnContext,
}

impl Handler<StartConnection> for Registry {
    type Result = MessageResult<StartConnection>;

    fn handle(&mut self, msg: StartConnection, _ctx: &mut Self::Context) -> Self::Result {
        let arb = &self.arbiters[self.next % self.arbiters.len()];
        self.next = self.next.wrapping_add(1);
        let StartConnection { server, ctx } = msg;
        let shared = Arc::new(ConnShared::new(&server.config.name));
        let (tx, rx) = channel::channel(MAILBOX);
        let restart_wait = ctx.restart.max + Duration::from_secs(1);
        let slot = Arc::new(Slot::new(
            shared.clone(),
            Addr::new(tx),
            super::connection::transport_name(&server),
            restart_wait,
        ));
        let weak = Arc::downgrade(&slot);
        let running = self.running.clone();
        running.fetch_add(1, Ordering::AcqRel);
        arb.spawn_fn(move || {
            actix_rt::spawn(async move {
                supervise(server, ctx, shared, weak, rx).await;
                running.fetch_sub(1, Ordering::AcqRel);
            });
        });
        self.started += 1;
        if self.live.len() > 64 && self.live.len().is_power_of_two() {
            self.live.retain(|w| w.strong_count() > 0);
        }
        self.live.push(Arc::downgrade(&slot));
        MessageResult(ConnHandle(slot))
    }
}

/// Run one connection until it stops for good, restarting it after each panic.
async fn supervise(
    server: Arc<ResolvedServer>,
    ctx: ConnContext,
    shared: Arc<ConnShared>,
    weak: Weak<Slot>,
    rx: channel::AddressReceiver<Connection>,
) {
    let policy = ctx.restart.clone();
    let name = server.config.name.clone();
    let mut rx = rx;
    let mut streak: u32 = 0;
    loop {
        let context = Context::with_receiver(rx);
        let actor = Connection::new(server.clone(), ctx.clone(), shared.clone());
        let ran_from = tokio::time::Instant::now();
        let outcome = AssertUnwindSafe(context.into_future(actor))
            .catch_unwind()
            .await;
        let Err(panic) = outcome else {
            // Stopped: closed for good, or its last address went away.
            return;
        };
        let what = panic_text(&panic);
        drop(panic);
        if ran_from.elapsed() >= policy.healthy {
            streak = 0;
        }
        streak += 1;
        let restarts = shared.count_restart();
        let Some(slot) = weak.upgrade() else {
            tracing::error!(server = %name, panic = %what, "connection actor panicked; nobody holds it, so it is not restarted");
            return;
        };
        if shared.is_closed() {
            tracing::error!(server = %name, panic = %what, "connection actor panicked while closing; it stays closed");
            slot.set_addr(None);
            return;
        }
        if streak > policy.give_up {
            let reason = format!(
                "the connection actor panicked {streak} times in a row (last: {what}); it is not restarted again"
            );
            tracing::error!(server = %name, restarts, "{reason}");
            shared.mark_failed(reason);
            slot.set_addr(None);
            return;
        }
        let delay = policy.delay(streak);
        tracing::error!(server = %name, panic = %what, restarts, delay_ms = delay.as_millis() as u64, "connection actor panicked; restarting it with a fresh link");
        // Messages sent meanwhile wait for the new address (`ConnHandle::addr`).
        slot.set_addr(None);
        drop(slot);
        if !delay.is_zero() {
            tokio::time::sleep(delay).await;
        }
        let Some(slot) = weak.upgrade() else { return };
        if shared.is_closed() {
            return;
        }
        let (tx, new_rx) = channel::channel(MAILBOX);
        slot.set_addr(Some(Addr::new(tx)));
        drop(slot);
        rx = new_rx;
    }
}

/// The text of a panic's payload, for the log and the failure reason.
fn panic_text(p: &Box<dyn std::any::Any + Send>) -> String {
    let s = if let Some(s) = p.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.clone()
    } else {
        "a panic without a message".to_owned()
    };
    crate::advertise::bound_text(&s, 300)
}

/// Close every connection (daemon shutdown). Answers how many were still open, once each
/// has closed its client (an HTTP transport's DELETE is then under way; see
/// `transport::http::closing_settled`).
#[derive(Message)]
#[rtype(result = "usize")]
pub struct CloseAll;

impl Handler<CloseAll> for Registry {
    type Result = ResponseFuture<usize>;

    fn handle(&mut self, _: CloseAll, _ctx: &mut Self::Context) -> Self::Result {
        let open: Vec<ConnHandle> = self
            .live
            .drain(..)
            .filter_map(|w| w.upgrade())
            .map(ConnHandle)
            .filter(|h| !h.is_closed())
            .collect();
        Box::pin(async move {
            let n = open.len();
            futures_util::future::join_all(open.iter().map(ConnHandle::close_and_wait)).await;
            n
        })
    }
}

/// How many connections are alive (their supervision loop is running), and how many were
/// ever started.
#[derive(Message)]
#[rtype(result = "(usize, u64)")]
pub struct Count;

impl Handler<Count> for Registry {
    type Result = MessageResult<Count>;

    fn handle(&mut self, _: Count, _ctx: &mut Self::Context) -> Self::Result {
        self.live.retain(|w| w.strong_count() > 0);
        MessageResult((self.running.load(Ordering::Acquire), self.started))
    }
}
