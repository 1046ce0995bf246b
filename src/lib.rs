//! albedo-mcp: connects agent sessions to the Model Context Protocol servers a user
//! configured, and gives each session their tools, resources and prompts as ordinary tools.
//! See ARCHITECTURE.md for the map of modules, actors and messages.

// Our error types carry the server's JSON-RPC error and the HTTP detail by value; they only
// travel on failure paths, where their size does not matter.
#![allow(clippy::result_large_err)]

pub mod actors;
pub mod advertise;
pub mod api;
pub mod cli;
pub mod client;
pub mod editor;
pub mod fastmap;
pub mod oauth;
pub mod protocol;
pub mod store;
pub mod toolsearch;
pub mod transport;
pub mod tui;
