//! What a connection dials with: the daemon's [`ConnContext`] (the launcher, the HTTP opener,
//! the token book, the dial limit), the daemon-wide [`DialLimit`], the supervisor's
//! [`RestartPolicy`], and the [`HttpOpener`] that opens HTTP transports with the daemon's TLS.
//!
//! Owns: those shared settings. Must not touch: a connection's state.

use super::*;
use crate::actors::tokens::TokenBook;

/// What every connection needs from the daemon.
#[derive(Clone)]
pub struct ConnContext {
    pub launcher: PathBuf,
    pub http: Option<Arc<dyn HttpOpener>>,
    /// The daemon-wide bound on dials and discoveries running at once.
    pub dials: DialLimit,
    /// The daemon-wide bound on checks of saved catalogues (dials nobody waits on) running at
    /// once, taken before `dials`: one fewer than the cores ([`checks_for_cores`]), so that
    /// opening a session with many saved servers is not slowed by their processes starting.
    /// A call or a session that waits on a server never queues behind it: the check holds no
    /// dial while it waits its turn.
    pub checks: DialLimit,
    /// How the registry restarts a connection that panicked.
    pub restart: RestartPolicy,
    /// The daemon's OAuth tokens (`None`: no sign-ins, as in tests of the actors alone).
    pub tokens: Option<TokenBook>,
    /// Told the server's name whenever a connection's [`LinkState`] changes (the API turns it
    /// into a `servers` event of `GET /settings/mcp/events`); `None`: nobody listens.
    pub state_changes: Option<tokio::sync::broadcast::Sender<String>>,
}

impl ConnContext {
    /// A context with the default limits (tests and tools).
    pub fn new(launcher: PathBuf, http: Option<Arc<dyn HttpOpener>>) -> ConnContext {
        ConnContext {
            launcher,
            http,
            dials: DialLimit::new(DEFAULT_CONCURRENT_DIALS),
            checks: DialLimit::new(DEFAULT_CONCURRENT_CHECKS),
            restart: RestartPolicy::default(),
            tokens: None,
            state_changes: None,
        }
    }
}

/// Default of `max_concurrent_dials` (a daemon setting, so it lives with the others).
pub use crate::store::daemon_config::DEFAULT_CONCURRENT_DIALS;

/// Checks of saved catalogues at once when the daemon has not said (it says
/// [`checks_for_cores`]).
pub const DEFAULT_CONCURRENT_CHECKS: usize = 2;

/// Checks of saved catalogues at once on a machine of `cores` (as the daemon counts them, at
/// most 8): one fewer, at least one, so that a core is left for the session that started
/// them, its listing and its first calls (README, "Saved catalogues", has what it gains and
/// costs).
pub fn checks_for_cores(cores: usize) -> usize {
    cores.saturating_sub(1).max(1)
}

/// A daemon-wide limit on concurrent dials and discoveries, so that 200 sessions opening
/// together (or a reload of all of them) do not start hundreds of processes in one instant.
#[derive(Clone)]
pub struct DialLimit(Arc<tokio::sync::Semaphore>);

impl DialLimit {
    pub fn new(n: usize) -> DialLimit {
        DialLimit(Arc::new(tokio::sync::Semaphore::new(n.max(1))))
    }

    pub(crate) async fn acquire(&self) -> Option<tokio::sync::SemaphorePermit<'_>> {
        self.0.acquire().await.ok()
    }

    pub(crate) async fn acquire_owned(self) -> Option<tokio::sync::OwnedSemaphorePermit> {
        self.0.acquire_owned().await.ok()
    }

    /// A place taken now if one is free, held until dropped (tests: holding every place
    /// makes the next dial or check wait).
    #[doc(hidden)]
    pub fn try_hold(&self) -> Option<tokio::sync::OwnedSemaphorePermit> {
        self.0.clone().try_acquire_owned().ok()
    }
}

/// Restarts after panics: the first at once, then after a delay that doubles from `base`
/// up to `max`; after `give_up` panics in a row the connection is marked failed. A run of
/// `healthy` without a panic ends the row.
#[derive(Clone, Debug)]
pub struct RestartPolicy {
    pub base: Duration,
    pub max: Duration,
    pub give_up: u32,
    pub healthy: Duration,
}

impl Default for RestartPolicy {
    fn default() -> Self {
        RestartPolicy {
            base: Duration::from_millis(100),
            max: Duration::from_secs(5),
            give_up: 5,
            healthy: Duration::from_secs(60),
        }
    }
}

impl RestartPolicy {
    /// The wait before restart number `streak` of a row (1 = the first panic).
    pub fn delay(&self, streak: u32) -> Duration {
        if streak <= 1 {
            return Duration::ZERO;
        }
        let f = 1u32
            .checked_shl(streak.saturating_sub(2))
            .unwrap_or(u32::MAX);
        self.base.saturating_mul(f).min(self.max)
    }
}

impl ConnContext {
    /// Open the transport to `transport`'s server: a stdio server through `spawn` (given the
    /// launcher's spec), an HTTP one through the daemon's opener.
    pub fn open(
        &self,
        transport: &ResolvedTransport,
        sink: Arc<dyn crate::transport::InboundSink>,
        spawn: impl FnOnce(
            &StdioSpec,
            Arc<dyn crate::transport::InboundSink>,
        ) -> Result<SharedTransport, TransportError>,
    ) -> Result<SharedTransport, TransportError> {
        match transport {
            ResolvedTransport::Stdio {
                command,
                args,
                cwd,
                env,
            } => {
                let spec = StdioSpec {
                    launcher: self.launcher.clone(),
                    command: command.clone(),
                    args: args.clone(),
                    cwd: cwd.clone(),
                    env: env.clone(),
                };
                spawn(&spec, sink)
            }
            ResolvedTransport::Http { url, headers } => match &self.http {
                Some(opener) => opener.open(url, headers, sink),
                None => Err(TransportError::Connect(
                    "HTTP servers are not available in this build".into(),
                )),
            },
        }
    }
}

/// Opens HTTP transports (kept behind a trait so the actor does not depend on TLS setup).
pub trait HttpOpener: Send + Sync {
    fn open(
        &self,
        url: &url::Url,
        headers: &[(String, crate::store::settings::Secret)],
        sink: Arc<dyn crate::transport::InboundSink>,
    ) -> Result<SharedTransport, TransportError>;
}

/// The HTTP transport with the daemon's TLS configuration.
pub struct AwcOpener {
    pub tls: Arc<rustls::ClientConfig>,
}

impl HttpOpener for AwcOpener {
    fn open(
        &self,
        url: &url::Url,
        headers: &[(String, crate::store::settings::Secret)],
        sink: Arc<dyn crate::transport::InboundSink>,
    ) -> Result<SharedTransport, TransportError> {
        let spec = crate::transport::http::HttpSpec {
            url: url.clone(),
            headers: headers.to_vec(),
            tls: self.tls.clone(),
        };
        let t: SharedTransport = crate::transport::http::HttpTransport::start(spec, sink)?;
        Ok(t)
    }
}

#[cfg(test)]
mod tests {
    use super::checks_for_cores;

    #[test]
    fn checks_leave_a_core_for_the_session_and_never_stop() {
        assert_eq!(checks_for_cores(0), 1);
        assert_eq!(checks_for_cores(1), 1);
        assert_eq!(checks_for_cores(2), 1);
        assert_eq!(checks_for_cores(8), 7);
    }
}
