//! `ConnHandle`: the stable way to reach one supervised connection. The registry's
//! supervision loop replaces the actor behind it after a panic (a new mailbox, a fresh
//! link); everyone else (compositions, the API's snapshot, preparation) holds the handle and
//! asks it for the current address on every message, so nobody keeps a dead address.
//!
//! Dropping the last handle drops the last address: the actor ends, its client closes and
//! its server process ends. That is how a prepared set that is thrown away (a failed
//! preparation, a superseded reload, a join for a session that is gone) closes what it
//! started without a path that could forget to.
//!
//! A tool call on a live stdio client does not reach the actor at all: `call` hands it to the
//! client the link published (`connection/direct.rs`), on the caller's own thread;
//! `call_local` does the same for a caller on a tokio `LocalSet` (the API's handlers), whose
//! wakes from another thread tokio coalesces.
//!
//! Owns: the current address, closing for good, which way a call goes. Must not touch: the
//! API, transports.

use super::connection::{
    Call, CallError, CallTarget, Close, ConnShared, ConnStatus, Connection, Discover,
    DiscoverError, Spawn, Watch,
};
use crate::protocol::model::Catalogue;
use actix::prelude::*;
use std::sync::{Arc, RwLock};
use std::time::Duration;

pub(crate) struct Slot {
    pub(crate) shared: Arc<ConnShared>,
    addr: RwLock<Option<Addr<Connection>>>,
    /// Told when the supervision loop installs a new address or gives up.
    pub(crate) changed: tokio::sync::Notify,
    transport: &'static str,
    /// The longest a message waits for a restart in progress.
    restart_wait: Duration,
}

impl Slot {
    pub(crate) fn new(
        shared: Arc<ConnShared>,
        addr: Addr<Connection>,
        transport: &'static str,
        restart_wait: Duration,
    ) -> Slot {
        Slot {
            shared,
            addr: RwLock::new(Some(addr)),
            changed: tokio::sync::Notify::new(),
            transport,
            restart_wait,
        }
    }

    pub(crate) fn set_addr(&self, addr: Option<Addr<Connection>>) {
        if let Ok(mut g) = self.addr.write() {
            *g = addr;
        }
        self.changed.notify_waiters();
    }

    fn current(&self) -> Option<Addr<Connection>> {
        self.addr.read().ok().and_then(|g| g.clone())
    }

    /// `msg` sent to the live address under the lock, when there is one: cloning an `Addr`
    /// allocates twice (actix gives each clone its own sender task), and a call needs the
    /// address only to send. `Err(msg)` when there is no live address.
    fn send_if_live<M>(&self, msg: M) -> Result<actix::dev::Request<Connection, M>, M>
    where
        M: Message + Send + 'static,
        M::Result: Send,
        Connection: Handler<M>,
    {
        match self.addr.read() {
            Ok(g) => match g.as_ref().filter(|a| a.connected()) {
                Some(a) => Ok(a.send(msg)),
                None => Err(msg),
            },
            Err(_) => Err(msg),
        }
    }
}

impl Drop for Slot {
    /// The last handle went away: close the connection, so that its actor ends (it has no
    /// address left) and its server process with it.
    fn drop(&mut self) {
        self.shared.mark_closed();
        let addr = self.addr.get_mut().ok().and_then(|a| a.take());
        if let Some(a) = addr {
            a.do_send(Close);
        }
    }
}

/// A connection as the rest of the daemon holds it. Clones share it.
#[derive(Clone)]
pub struct ConnHandle(pub(crate) Arc<Slot>);

/// Why a message could not be delivered to a connection.
#[derive(Debug, Clone, thiserror::Error)]
pub enum Unreachable {
    #[error("the connection was closed")]
    Closed,
    #[error("the connection failed: {0}")]
    Failed(String),
    #[error("the connection actor is restarting")]
    Restarting,
}

impl ConnHandle {
    pub fn name(&self) -> &str {
        &self.0.shared.name
    }

    /// Whether both handles reach the same connection.
    pub fn same(&self, other: &ConnHandle) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }

    pub fn restarts(&self) -> u32 {
        self.0.shared.restarts()
    }

    pub fn is_closed(&self) -> bool {
        self.0.shared.is_closed()
    }

    /// Why no message can reach the connection for good (closed, or failed), if so.
    fn gone(&self) -> Option<Unreachable> {
        if self.0.shared.is_closed() {
            return Some(Unreachable::Closed);
        }
        self.0.shared.failed().map(Unreachable::Failed)
    }

    /// The live address, waiting (briefly) for a restart in progress.
    pub async fn addr(&self) -> Result<Addr<Connection>, Unreachable> {
        let deadline = tokio::time::Instant::now() + self.0.restart_wait;
        loop {
            if let Some(e) = self.gone() {
                return Err(e);
            }
            let notified = self.0.changed.notified();
            if let Some(a) = self.0.current().filter(|a| a.connected()) {
                return Ok(a);
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                return Err(Unreachable::Restarting);
            }
        }
    }

    /// A call on behalf of the model. A call the actor never received is `not_run`; one it
    /// received and then lost (the actor panicked) is `unknown`.
    pub async fn call(&self, target: CallTarget) -> Result<crate::protocol::ResultText, CallError> {
        self.call_spawning(target, Spawn::Runtime).await
    }

    /// [`ConnHandle::call`] for a caller that is a task of a tokio `LocalSet` (an actix-web
    /// handler), which a direct call's task then joins ([`Spawn::LocalSet`]); from anywhere
    /// else it panics.
    pub async fn call_local(
        &self,
        target: CallTarget,
    ) -> Result<crate::protocol::ResultText, CallError> {
        self.call_spawning(target, Spawn::LocalSet).await
    }

    async fn call_spawning(
        &self,
        target: CallTarget,
        spawn: Spawn,
    ) -> Result<crate::protocol::ResultText, CallError> {
        // A tool call on a published live client runs on this thread (`connection/direct.rs`).
        let target = match target {
            CallTarget::Tool { name, arguments } => match self.0.shared.direct() {
                Some(direct) => {
                    return direct
                        .call(self.0.shared.clone(), name, arguments, spawn)
                        .await
                }
                None => CallTarget::Tool { name, arguments },
            },
            other => other,
        };
        let server = || self.name().to_owned();
        // Sent at once to a live address; otherwise `addr()` says why not, or waits for a
        // restart in progress.
        let live = match self.gone() {
            Some(_) => Err(Call(target)),
            None => self.0.send_if_live(Call(target)),
        };
        let request = match live {
            Ok(request) => request,
            Err(call) => {
                let addr = self.addr().await.map_err(|e| match e {
                    Unreachable::Failed(reason) => CallError::Unavailable {
                        server: server(),
                        reason,
                    },
                    e => CallError::NotRun {
                        server: server(),
                        reason: e.to_string(),
                    },
                })?;
                addr.send(call)
            }
        };
        match request.await {
            Ok(r) => r,
            Err(e) => Err(CallError::Unknown {
                server: server(),
                reason: format!("the connection actor stopped during the call ({e})"),
            }),
        }
    }

    /// Dial and discover (preparation).
    pub async fn discover(&self) -> Result<super::connection::Discovered, DiscoverError> {
        let addr = self
            .addr()
            .await
            .map_err(|e| DiscoverError::unreachable(e.to_string()))?;
        addr.send(Discover).await.map_err(|e| {
            DiscoverError::unreachable(format!(
                "the connection actor stopped during discovery ({e})"
            ))
        })?
    }

    /// Tell the connection who owns it and what it advertises; with `check_saved` it dials
    /// and checks the saved catalogue in the background at once.
    pub fn watch(
        &self,
        owner: Recipient<super::connection::CatalogueChanged>,
        known: Option<Arc<Catalogue>>,
        check_saved: bool,
    ) {
        self.0.shared.set_owner(owner);
        self.0.shared.set_known(known);
        if let Some(a) = self.0.current() {
            a.do_send(Watch { check_saved });
        }
    }

    /// Dial and check the saved catalogue in the background now (a lazy server, at its
    /// first call); the owner and catalogue are those of the last [`ConnHandle::watch`].
    pub fn wake(&self) {
        if let Some(a) = self.0.current() {
            a.do_send(Watch { check_saved: true });
        }
    }

    /// The connection's status, as its link last showed it (`ConnShared::status`): read
    /// without a message to the actor, so a view never waits for a busy arbiter.
    pub fn status(&self) -> ConnStatus {
        let live_actor = self.0.current().is_some_and(|a| a.connected());
        self.0.shared.status(self.0.transport, live_actor)
    }

    /// Close for good: later calls answer `not_run`; the supervisor never restarts it.
    pub fn close(&self) {
        if let Some(a) = self.mark_closed() {
            a.do_send(Close);
        }
    }

    /// [`ConnHandle::close`], answering once the actor has closed its client (its
    /// transport's shutdown has begun).
    pub async fn close_and_wait(&self) {
        if let Some(a) = self.mark_closed() {
            let _ = a.send(Close).await;
        }
    }

    /// Mark the connection closed, wake whoever waits for an address, and take the
    /// address (the actor ends once `Close` reached it and nobody holds another).
    fn mark_closed(&self) -> Option<Addr<Connection>> {
        self.0.shared.mark_closed();
        let addr = self.0.addr.write().ok().and_then(|mut g| g.take());
        self.0.changed.notify_waiters();
        addr
    }

    /// Whether a tool call would run on its caller's thread now (a live client is
    /// published: `connection/direct.rs`).
    #[doc(hidden)]
    pub fn direct_ready(&self) -> bool {
        self.0.shared.direct().is_some()
    }

    /// Send any message to the current actor (tests: panic injection).
    #[doc(hidden)]
    pub async fn send<M>(&self, msg: M) -> Result<M::Result, String>
    where
        M: Message + Send + 'static,
        M::Result: Send,
        Connection: Handler<M>,
    {
        let a = self.addr().await.map_err(|e| e.to_string())?;
        a.send(msg).await.map_err(|e| e.to_string())
    }
}
