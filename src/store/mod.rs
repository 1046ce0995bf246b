//! Storage: the daemon's configuration (`config.toml`), the `mcp` section of
//! `extensions.json`, the credentials in `creds.json`, fingerprints, atomic file writes, and
//! the API token (`token`: the file and the socket's name every local client reads).
//!
//! Owns: files under `$ALBEDO_HOME` and the catalogue database (`catalogue`, `schema`,
//! `migrations/`). Must not touch: actors, the HTTP API, transports.

pub mod catalogue;
pub mod daemon_config;
pub mod files;
pub mod schema;
pub mod settings;
pub mod token;
