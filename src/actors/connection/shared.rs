//! What outlives a restart of the Connection actor ([`ConnShared`]): the session's owner and
//! the catalogue it advertises, the restart count, whether it was closed or failed, the log
//! limiter, the tests' panic hooks, the live client published for direct calls
//! (`direct.rs`), and what the current link shows of itself (`Seen`), which a view reads
//! without a message to the actor.
//!
//! Owns: that state, shared by every instance behind one handle. Must not touch: the client
//! (it holds the published one, and only hands it out).

use super::*;

/// The part of a connection that outlives a restart: the registry's handle, the session's
/// owner and catalogue, counters, and the test hooks. Shared by every instance of the actor
/// behind one [`crate::actors::handle::ConnHandle`].
pub struct ConnShared {
    pub name: String,
    owner: Mutex<Option<Recipient<CatalogueChanged>>>,
    known: Mutex<Option<Arc<Catalogue>>>,
    restarts: AtomicU32,
    closed: AtomicBool,
    failed: Mutex<Option<String>>,
    /// Test hook: the next handler of this kind panics (see [`ArmPanic`]), held as
    /// `point as u8 + 1` (0: none) so that every call reads it without a lock.
    armed: AtomicU8,
    /// Lines this connection logs about its server (it is untrusted: rate-limited).
    pub(crate) log_limit: crate::protocol::text::LogLimiter,
    /// The live client a tool call may use from its caller's thread, published by the
    /// link that dialled it and taken back when that link drops it.
    direct: std::sync::RwLock<Option<Arc<Direct>>>,
    /// What the current link shows of itself, written by the link as it changes.
    seen: Mutex<Seen>,
}

/// What a view shows of the current link ([`ConnShared::status`]), written by the link
/// (`link.rs`) as it changes, so that a view (a session's, the settings') never sends the
/// actor a message: a session's 100 connections live on a few arbiters, busy at an open with
/// dials and process spawns, and a view that asked each of them waited for the busiest.
pub(super) struct Seen {
    /// Which link writes: each new link (a restart, a close) starts a life, and what a link
    /// of an earlier life still writes (a future left over from it) is ignored.
    life: u64,
    pub(super) state: LinkState,
    pub(super) last_error: Option<String>,
    /// The live client and the version it agreed: its closing and its ignored messages are
    /// read off it when a view asks.
    pub(super) client: Option<(McpClient, ProtocolVersion)>,
    /// Ignored messages of this life's clients already dropped.
    pub(super) ignored: u64,
}

impl Seen {
    /// What a fresh link of `life` shows: idle, no error, no client, nothing ignored.
    fn fresh(life: u64) -> Seen {
        Seen {
            life,
            state: LinkState::Idle,
            last_error: None,
            client: None,
            ignored: 0,
        }
    }
}

impl ConnShared {
    pub fn new(name: &str) -> ConnShared {
        ConnShared {
            name: name.to_owned(),
            owner: Mutex::new(None),
            known: Mutex::new(None),
            restarts: AtomicU32::new(0),
            closed: AtomicBool::new(false),
            failed: Mutex::new(None),
            armed: AtomicU8::new(0),
            log_limit: Default::default(),
            direct: std::sync::RwLock::new(None),
            seen: Mutex::new(Seen::fresh(0)),
        }
    }

    /// A new link's life: what it shows starts idle, with no error, no client and nothing
    /// ignored, as a fresh link is. Returns the life the link writes under.
    pub(super) fn new_life(&self) -> u64 {
        match self.seen.lock() {
            Ok(mut g) => {
                *g = Seen::fresh(g.life.wrapping_add(1));
                g.life
            }
            Err(_) => 0,
        }
    }

    /// Change what link `life` shows, if it is still the current life; answers the state
    /// before and after, or `None` for a link of an earlier life.
    pub(super) fn update_seen(
        &self,
        life: u64,
        change: impl FnOnce(&mut Seen),
    ) -> Option<(LinkState, LinkState)> {
        let mut g = self.seen.lock().ok()?;
        if g.life != life {
            return None;
        }
        let before = g.state;
        change(&mut g);
        Some((before, g.state))
    }

    /// The state link `life` shows (`Closed` for a link of an earlier life: it is gone).
    pub(super) fn seen_state(&self, life: u64) -> LinkState {
        match self.seen.lock() {
            Ok(g) if g.life == life => g.state,
            _ => LinkState::Closed,
        }
    }

    /// The connection's status: closed or failed as marked here; "restarting" when no actor
    /// is live (`live_actor` false) or the status cannot be read; else the current link's,
    /// as it wrote it, with the client's closing and ignored messages read now (a connected
    /// link whose client has closed shows idle). Never a message to the actor: a view never
    /// waits for a restart in progress or a busy arbiter.
    pub(crate) fn status(&self, transport: &'static str, live_actor: bool) -> ConnStatus {
        let restarting = || (LinkState::Idle, None, Some("restarting".into()), 0);
        let (state, live, last_error, ignored) = if self.is_closed() {
            (LinkState::Closed, None, None, 0)
        } else if let Some(f) = self.failed() {
            (LinkState::Failed, None, Some(f), 0)
        } else if !live_actor {
            restarting()
        } else {
            match self.seen.lock() {
                Ok(g) => {
                    let live = g.client.as_ref().filter(|(c, _)| !c.is_closed());
                    let ignored =
                        g.ignored + g.client.as_ref().map_or(0, |(c, _)| c.ignored_messages());
                    let state = match g.state {
                        LinkState::Connected if live.is_none() => LinkState::Idle,
                        s => s,
                    };
                    (
                        state,
                        live.map(|(_, p)| p.clone()),
                        g.last_error.clone(),
                        ignored,
                    )
                }
                Err(_) => restarting(),
            }
        };
        ConnStatus {
            state,
            era: live.as_ref().map(|p| p.era),
            protocol_version: live.map(|p| p.version),
            transport,
            last_error,
            restarts: self.restarts(),
            ignored_messages: ignored,
        }
    }

    pub fn restarts(&self) -> u32 {
        self.restarts.load(Ordering::Relaxed)
    }

    pub(crate) fn count_restart(&self) -> u32 {
        self.restarts.fetch_add(1, Ordering::Relaxed) + 1
    }

    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    pub(crate) fn mark_closed(&self) {
        self.closed.store(true, Ordering::Release);
        self.withdraw();
    }

    /// The published client for a direct call: none once closed, or when its client closed
    /// (the actor dials again).
    pub(crate) fn direct(&self) -> Option<Arc<Direct>> {
        let d = self.direct.read().ok()?.clone()?;
        if d.client.is_closed() || self.is_closed() {
            return None;
        }
        Some(d)
    }

    /// Take back whatever client is published: calls go through the actor until the next
    /// dial publishes one (a close; a test arming a panic in the actor's call handler).
    pub(super) fn withdraw(&self) {
        if let Ok(mut g) = self.direct.write() {
            g.take();
        }
    }

    pub(super) fn publish(&self, d: Direct) {
        if let Ok(mut g) = self.direct.write() {
            *g = Some(Arc::new(d));
        }
    }

    /// Take back the published client if it is `client`.
    pub(crate) fn unpublish(&self, client: &McpClient) {
        if let Ok(mut g) = self.direct.write() {
            if g.as_ref().is_some_and(|d| d.client.same(client)) {
                g.take();
            }
        }
    }

    pub fn failed(&self) -> Option<String> {
        self.failed.lock().ok().and_then(|g| g.clone())
    }

    pub(crate) fn mark_failed(&self, reason: String) {
        if let Ok(mut g) = self.failed.lock() {
            *g = Some(reason);
        }
    }

    pub(super) fn owner(&self) -> Option<Recipient<CatalogueChanged>> {
        self.owner.lock().ok().and_then(|g| g.clone())
    }

    pub(super) fn known(&self) -> Option<Arc<Catalogue>> {
        self.known.lock().ok().and_then(|g| g.clone())
    }

    pub(crate) fn set_known(&self, cat: Option<Arc<Catalogue>>) {
        if let Ok(mut g) = self.known.lock() {
            *g = cat;
        }
    }

    pub(crate) fn set_owner(&self, owner: Recipient<CatalogueChanged>) {
        if let Ok(mut g) = self.owner.lock() {
            *g = Some(owner);
        }
    }

    /// Arm `point`: the next time it is reached, it panics (tests only).
    pub(super) fn arm(&self, point: PanicPoint) {
        self.armed.store(point as u8 + 1, Ordering::Release);
    }

    /// Panic here if a test armed this point (one atomic load when none is armed).
    pub(crate) fn trip(&self, point: PanicPoint) {
        let code = point as u8 + 1;
        if self.armed.load(Ordering::Relaxed) == code
            && self
                .armed
                .compare_exchange(code, 0, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
        {
            panic!("injected panic in {point:?}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn connected(client: &McpClient) -> impl FnOnce(&mut Seen) + '_ {
        move |s| {
            s.client = Some((client.clone(), ProtocolVersion::modern()));
            s.state = LinkState::Connected;
            s.last_error = None;
        }
    }

    #[test]
    fn a_view_reads_what_the_current_link_showed_and_never_an_earlier_one() {
        let shared = ConnShared::new("fx");
        let first = shared.new_life();
        let st = shared.status("stdio", true);
        assert_eq!(
            (st.state, st.era, st.last_error),
            (LinkState::Idle, None, None)
        );

        let (client, _sink, _events) = McpClient::new();
        assert_eq!(
            shared.update_seen(first, connected(&client)),
            Some((LinkState::Idle, LinkState::Connected))
        );
        let st = shared.status("stdio", true);
        assert_eq!(st.state, LinkState::Connected);
        assert_eq!(st.era, Some(ProtocolVersion::modern().era));
        assert_eq!(st.protocol_version, Some(ProtocolVersion::modern().version));
        assert_eq!(st.transport, "stdio");

        // A client that closed on its own (its server died) shows idle, with no version.
        client.close();
        let st = shared.status("stdio", true);
        assert_eq!((st.state, st.era), (LinkState::Idle, None));

        // A fresh link: what the earlier one still writes is ignored.
        let second = shared.new_life();
        assert_eq!(
            shared.update_seen(first, |s| {
                s.state = LinkState::Unavailable;
                s.last_error = Some("late".into());
            }),
            None
        );
        assert_eq!(shared.seen_state(first), LinkState::Closed);
        let st = shared.status("stdio", true);
        assert_eq!((st.state, st.last_error), (LinkState::Idle, None));
        let (client, _sink, _events) = McpClient::new();
        shared.update_seen(second, connected(&client));
        assert_eq!(shared.seen_state(second), LinkState::Connected);
    }
}
