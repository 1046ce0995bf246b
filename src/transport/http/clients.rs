//! The awc client each thread uses for one transport. awc's `Client` (and the pool of kept-alive
//! connections inside it) is not `Send`: a thread that POSTs for a transport (its driver's
//! arbiter, or an API worker making a direct call, see [`super::posts_here`]) builds its own
//! from the transport's [`ClientRecipe`], the first time it needs one, and keeps it in a
//! thread-local table by transport number. So an HTTP server may see one pool of connections
//! from each such thread, each at most `max_connections`.
//!
//! When a transport's driver ends, every thread that built a client for it drops it, and with
//! it the idle connections of its pool: the driver's own thread at once, the others (API
//! workers, actix arbiters) through their arbiter's handle, noted when they built it. A thread
//! on no arbiter (none in the daemon) drops a closed transport's client when it next builds one.
//!
//! Owns: the recipe, who holds a client, and the table. Must not touch: requests (the driver's
//! `Ctx::request` makes them with the client found here).

use super::driver::lock;
use super::Shared;
use crate::fastmap::FastMap;
use std::cell::RefCell;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

/// The clients of one transport: its number (the key of each thread's table), what they are
/// made of, and the arbiters of the threads that built one.
pub(super) struct Clients {
    number: u64,
    recipe: ClientRecipe,
    holders: Mutex<Vec<actix_rt::ArbiterHandle>>,
}

impl Clients {
    pub(super) fn new(recipe: ClientRecipe) -> Clients {
        Clients {
            number: next_transport_number(),
            recipe,
            holders: Mutex::new(Vec::new()),
        }
    }

    /// This thread's client, built the first time (its arbiter noted, to drop it later).
    pub(super) fn here(&self, shared: &Arc<Shared>) -> awc::Client {
        let (client, built) = client_here(self.number, shared, &self.recipe);
        if built {
            if let Some(h) = actix_rt::Arbiter::try_current() {
                lock(&self.holders).push(h);
            }
        }
        client
    }

    /// The driver ended: this thread drops its client at once, every other thread that built
    /// one when its arbiter next runs.
    pub(super) fn forget_everywhere(&self) {
        forget_here(self.number);
        let holders = std::mem::take(&mut *lock(&self.holders));
        let number = self.number;
        for h in holders {
            h.spawn_fn(move || forget_here(number));
        }
    }
}

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
fn next_transport_number() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

thread_local! {
    /// This thread's clients, by transport number, with the transport's state (to tell
    /// whether it closed).
    static CLIENTS: RefCell<FastMap<u64, (Weak<Shared>, awc::Client)>> =
        RefCell::new(FastMap::default());
}

/// This thread's client for transport `number`, built from `recipe` the first time (then
/// `true`).
fn client_here(number: u64, shared: &Arc<Shared>, recipe: &ClientRecipe) -> (awc::Client, bool) {
    CLIENTS.with(|c| {
        let mut table = c.borrow_mut();
        if let Some((_, client)) = table.get(&number) {
            return (client.clone(), false);
        }
        // Those of transports that closed go first.
        table.retain(|_, (s, _)| {
            s.upgrade()
                .is_some_and(|s| !s.closed.load(Ordering::Acquire))
        });
        let client = recipe.build();
        table.insert(number, (Arc::downgrade(shared), client.clone()));
        (client, true)
    })
}

/// Drop this thread's client for transport `number` (its driver's shutdown ended).
fn forget_here(number: u64) {
    // Taken out first: the client is dropped with the table not borrowed.
    let gone = CLIENTS.with(|c| c.borrow_mut().remove(&number));
    drop(gone);
}

/// How many clients this thread holds (tests).
#[cfg(test)]
pub(super) fn held_here() -> usize {
    CLIENTS.with(|c| c.borrow().len())
}
