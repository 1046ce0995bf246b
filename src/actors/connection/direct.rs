//! Direct calls: a tool call on a live connection made on the caller's own thread (the API
//! worker that read the request), with the client the link dialled, instead of a message to
//! the Connection actor on its arbiter (through the actor a call crossed twice, worker to
//! arbiter to worker, and woke the arbiter to send it).
//! - stdio: the request is written to the server's pipe by the caller's thread
//!   (`transport::stdio`), and only the answer crosses threads: the reader task on the arbiter
//!   completes the pending request and wakes the caller. Under load the transport queues the
//!   request for its writer task instead (the arbiter is awake;
//!   `transport::stdio::WRITE_HERE_MAX_IN_FLIGHT`); once the server's reader has moved to the
//!   caller's thread (`transport::stdio::MOVE_AFTER`), nothing crosses threads at any load.
//! - HTTP: the call's task runs inside `transport::http::posts_here`, so its request is POSTed
//!   by the caller's thread with that thread's own awc client, and the answer is read there
//!   too: nothing crosses threads. Only for a server whose requests carry no OAuth token (a
//!   call with one may need it refreshed first, and a refused one refreshed and sent again,
//!   which the actor does); the tools' `Mcp-Param-*` headers come from the link
//!   ([`ParamHeaders`]).
//!
//! The link publishes a client here when its dial succeeds ([`ConnShared::publish`]) and takes
//! it back when it drops the client (a timeout, a loss, a close, a restart: the old link is
//! dropped with its actor). A call finds no published client, and goes through the actor as
//! before, when none was dialled yet, when the one published has closed (the actor dials
//! again), for an HTTP server with a token, and for resources and prompts.
//!
//! A direct call keeps the actor's rules: never retried, one deadline (`callTimeoutMs`), a
//! timed-out or lost call closes the client so that the next call dials again (the actor
//! learns of it from the client's own `Closed` event, as it learns of a server that exited),
//! errors cleaned of the server's secrets. It runs as a task of its own on the caller's
//! thread, so a caller that goes away does not cut it short (a timeout still closes the
//! client), and a panic in it is caught there: the client is closed and taken back, the call
//! answers `unknown` (it may have been sent), and the next call dials through the actor. The
//! API spawns that task on its worker's `LocalSet` ([`Spawn::LocalSet`]), where the answer's
//! wake from the arbiter is coalesced with the others the worker gets before it next runs;
//! any other caller spawns it on the runtime ([`Spawn::Runtime`]).
//!
//! Owns: what a direct call needs and how it runs. Must not touch: the actor, the link's
//! state (the actor keeps both), the transport's internals.

use super::link::{call_outcome, clean_call_error};
use super::*;
use crate::protocol::Params;

/// Where a direct call's task is spawned: the task runs on the caller's thread either way.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Spawn {
    /// `tokio::spawn`, from any task of a current-thread runtime (or any runtime). The
    /// answer's wake from the connection's arbiter writes the caller's runtime's eventfd
    /// every time (tokio coalesces no remote wake of a runtime task).
    Runtime,
    /// `tokio::task::spawn_local`, for a caller that is itself a task of a `LocalSet` (an
    /// actix-web handler; called from anywhere else it panics, as `spawn_local` does). The
    /// answer's wake is one of the set's, and tokio wakes the thread once for all the remote
    /// wakes of a set between two of its polls: at 256 calls in flight on one stdio server,
    /// the daemon's `write`s fell from one per call to one per eleven, and its calls per
    /// second rose by 10-20 % (`benches/NOTES.md`).
    LocalSet,
}

/// A live client published for direct calls, with what a call needs besides it.
pub struct Direct {
    pub(super) client: McpClient,
    kind: TransportKind,
    call_timeout: Duration,
    server: Arc<str>,
    redact: Redactor,
    /// The tools' `Mcp-Param-*` headers (HTTP), as the link learned them.
    headers: ParamHeaders,
}

impl Direct {
    pub(super) fn new(
        client: McpClient,
        kind: TransportKind,
        call_timeout: Duration,
        server: &str,
        redact: Redactor,
        headers: ParamHeaders,
    ) -> Direct {
        Direct {
            client,
            kind,
            call_timeout,
            server: server.into(),
            redact,
            headers,
        }
    }

    /// Take the client back from `shared` and close it: the next call dials through the actor.
    fn retire(&self, shared: &ConnShared) {
        shared.unpublish(&self.client);
        self.client.close();
    }

    /// Call tool `name` with `arguments` (the caller's JSON text) on this client, as a task of
    /// its own on the caller's thread, spawned as `spawn` says. `shared` takes the client
    /// back if it must be dropped.
    pub async fn call(
        self: Arc<Self>,
        shared: Arc<ConnShared>,
        name: Arc<str>,
        arguments: Box<serde_json::value::RawValue>,
        spawn: Spawn,
    ) -> Result<ResultText, CallError> {
        let (d, owner) = (self.clone(), shared.clone());
        let work = async move {
            // Counted while it waits: the stdio transport writes a request on this thread only
            // while few such calls are in flight.
            let _waiting =
                (d.kind == TransportKind::Stdio).then(crate::transport::stdio::OffThread::begin);
            shared.trip(PanicPoint::DirectCall);
            let params = Params::Named {
                name: &name,
                arguments: &arguments,
            };
            let headers = match d.kind {
                TransportKind::Http => d.headers.of(&name),
                TransportKind::Stdio => Vec::new(),
            };
            let r = d
                .client
                .request_text_params("tools/call", Some(params), d.call_timeout, &headers)
                .await;
            let (answer, drop_client) = call_outcome(r, &d.client, || d.server.to_string());
            if drop_client {
                d.retire(&shared);
            }
            answer.map_err(|e| clean_call_error(e, &d.redact))
        };
        let task = match spawn {
            Spawn::Runtime => tokio::spawn(work),
            Spawn::LocalSet => {
                self.client.read_here();
                // An HTTP server's request is POSTed from this thread too.
                tokio::task::spawn_local(crate::transport::http::posts_here(work))
            }
        };
        match task.await {
            Ok(answer) => answer,
            Err(e) => {
                // A panic (or the runtime shutting down) in the middle of a call: the request
                // may have left. The client is closed and taken back; the next call dials.
                let what = if e.is_panic() {
                    "panicked"
                } else {
                    "was stopped"
                };
                tracing::error!(server = %self.server, "a direct call {what}; its client is closed");
                self.retire(&owner);
                Err(CallError::Unknown {
                    server: self.server.to_string(),
                    reason: format!("the call {what} in albedo"),
                })
            }
        }
    }
}
