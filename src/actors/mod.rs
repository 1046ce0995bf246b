//! The actors: `registry` supervises every `connection`; a `composition` per session holds its
//! prepared set of connections and catalogue; a `retry` schedule per session probes servers
//! that were left out; the daemon-wide `runtime` prepares compositions; `trial` tries one
//! server outside any session (no actor of its own: it runs on the caller's arbiter).
//!
//! Owns: lifecycles and the messages between them. Must not touch: the HTTP API (`api`
//! talks to actors, never the other way round).

pub mod composition;
pub mod connection;
pub mod grants;
pub mod handle;
pub mod registry;
pub mod retry;
pub mod runtime;
pub mod signin;
pub mod strict;
pub mod tokens;
pub mod trial;

pub use connection::{CallError, CallTarget};
pub use handle::ConnHandle;
