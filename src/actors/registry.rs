//! The Registry actor: starts every Connection actor under an actix `Supervisor`, spread over
//! a few arbiters (threads), and keeps a weak handle on each so the daemon can close them
//! all at shutdown. A connection that panics is restarted by its supervisor; one that is
//! closed for good (all addresses dropped) is not.

use super::connection::{Close, ConnContext, Connection};
use crate::store::settings::ResolvedServer;
use actix::prelude::*;
use actix::WeakAddr;
use std::sync::Arc;

pub struct Registry {
    arbiters: Vec<actix::ArbiterHandle>,
    next: usize,
    live: Vec<WeakAddr<Connection>>,
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
            started: 0,
        }
    }
}

impl Actor for Registry {
    type Context = Context<Self>;
}

/// Start a supervised connection for one server.
#[derive(Message)]
#[rtype(result = "Addr<Connection>")]
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
        let addr = Supervisor::start_in_arbiter(arb, move |_| Connection::new(server, ctx));
        self.started += 1;
        if self.live.len() > 64 && self.live.len().is_power_of_two() {
            self.live.retain(|w| w.upgrade().is_some());
        }
        self.live.push(addr.downgrade());
        MessageResult(addr)
    }
}

/// Close every connection (daemon shutdown). Answers how many were still open.
#[derive(Message)]
#[rtype(result = "usize")]
pub struct CloseAll;

impl Handler<CloseAll> for Registry {
    type Result = usize;

    fn handle(&mut self, _: CloseAll, _ctx: &mut Self::Context) -> usize {
        let mut n = 0;
        for w in self.live.drain(..) {
            if let Some(a) = w.upgrade() {
                a.do_send(Close);
                n += 1;
            }
        }
        n
    }
}

/// How many connections are alive, and how many were ever started.
#[derive(Message)]
#[rtype(result = "(usize, u64)")]
pub struct Count;

impl Handler<Count> for Registry {
    type Result = MessageResult<Count>;

    fn handle(&mut self, _: Count, _ctx: &mut Self::Context) -> Self::Result {
        self.live.retain(|w| w.upgrade().is_some());
        MessageResult((self.live.len(), self.started))
    }
}
