//! albedo-mcp: connects agent sessions to the Model Context Protocol servers a user
//! configured, and gives each session their tools, resources and prompts as ordinary tools.
//! See ARCHITECTURE.md for the map of modules, actors and messages.

pub mod actors;
pub mod advertise;
pub mod api;
pub mod cli;
pub mod client;
pub mod protocol;
pub mod store;
pub mod transport;
