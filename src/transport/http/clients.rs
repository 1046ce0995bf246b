//! The awc client each thread uses for one transport. awc's `Client` (and the pool of kept-alive
//! connections inside it) is not `Send`: a thread that POSTs for a transport (its driver's
//! arbiter, or an API worker making a direct call, see [`super::posts_here`]) builds its own
//! from the transport's [`ClientRecipe`], the first time it needs one, and keeps it in a
//! thread-local table by transport number. So an HTTP server may see one pool of connections
//! from each such thread, each at most `max_connections`.
//!
//! A transport that closed (or was dropped) leaves its clients behind on the threads that used
//! it; a thread drops them, and their idle connections, the next time it builds a client for
//! another transport. The driver's own is dropped when its shutdown ends.
//!
//! Owns: the recipe and the table. Must not touch: requests (the driver's `Ctx::request`
//! makes them with the client found here).

use super::Shared;
use crate::fastmap::FastMap;
use std::cell::RefCell;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

/// What every thread's client of one transport is made of.
pub(super) struct ClientRecipe {
    pub(super) tls: Arc<rustls::ClientConfig>,
    pub(super) connect_timeout: Duration,
    pub(super) max_connections: usize,
    pub(super) keep_alive: Duration,
    /// The transport's `prompt_acks` statistic, set by every client's connector (see `tcp`).
    pub(super) prompt_acks: Arc<AtomicBool>,
}

impl ClientRecipe {
    fn build(&self) -> awc::Client {
        let connector = awc::Connector::new()
            .connector(crate::transport::tcp::PromptAckConnector::new(
                self.prompt_acks.clone(),
            ))
            .rustls_0_23(self.tls.clone())
            .timeout(self.connect_timeout)
            .handshake_timeout(self.connect_timeout)
            .limit(self.max_connections)
            .conn_keep_alive(self.keep_alive);
        awc::Client::builder()
            .connector(connector)
            .disable_timeout()
            .disable_redirects()
            .finish()
    }
}

/// A number per transport, the key of the tables.
pub(super) fn next_transport_number() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

thread_local! {
    /// This thread's clients, by transport number, with the transport's state (to tell
    /// whether it closed).
    static CLIENTS: RefCell<FastMap<u64, (Weak<Shared>, awc::Client)>> =
        RefCell::new(FastMap::default());
}

/// This thread's client for transport `number`, built from `recipe` the first time.
pub(super) fn client_here(number: u64, shared: &Arc<Shared>, recipe: &ClientRecipe) -> awc::Client {
    CLIENTS.with(|c| {
        let mut table = c.borrow_mut();
        if let Some((_, client)) = table.get(&number) {
            return client.clone();
        }
        // Those of transports that closed go first.
        table.retain(|_, (s, _)| {
            s.upgrade()
                .is_some_and(|s| !s.closed.load(Ordering::Acquire))
        });
        let client = recipe.build();
        table.insert(number, (Arc::downgrade(shared), client.clone()));
        client
    })
}

/// Drop this thread's client for transport `number` (its driver's shutdown ended).
pub(super) fn forget_here(number: u64) {
    // Taken out first: the client is dropped with the table not borrowed.
    let gone = CLIENTS.with(|c| c.borrow_mut().remove(&number));
    drop(gone);
}

/// How many clients this thread holds (tests).
#[cfg(test)]
pub(super) fn held_here() -> usize {
    CLIENTS.with(|c| c.borrow().len())
}
