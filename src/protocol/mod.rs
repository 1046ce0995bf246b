//! The protocol model: JSON-RPC framing, the MCP messages of both eras, the era rules and
//! the header encodings of the 2026-07-28 HTTP transport.
//!
//! Owns: pure data and pure functions. Must not touch: I/O, processes, actors, storage; it
//! imports nothing else from this crate.

mod answer;
pub mod backoff;
pub mod check;
pub mod era;
pub mod headers;
pub mod json_write;
pub mod jsonrpc;
pub mod model;
pub mod params;
pub mod result;
mod scan;
pub mod text;

pub use era::{Era, ProtocolVersion};
pub use jsonrpc::{ErrorObject, Message, RequestId, MAX_MESSAGE_BYTES};
pub use params::Params;
pub use result::{ResultHead, ResultText};
