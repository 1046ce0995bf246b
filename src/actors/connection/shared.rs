//! What outlives a restart of the Connection actor ([`ConnShared`]): the session's owner and
//! the catalogue it advertises, the restart count, whether it was closed or failed, the log
//! limiter, the tests' panic hooks, and the live client published for direct calls
//! (`direct.rs`).
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
