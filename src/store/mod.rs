//! Storage: the daemon's configuration (`config.toml`), the `mcp` section of
//! `extensions.json`, the credentials in `creds.json`, the fingerprint key
//! (`fingerprint.key`) and keyed fingerprints, atomic file writes and the modes of what is
//! created under `$ALBEDO_HOME` (the folder 0700, secrets and the database 0600), and the
//! API token (`token`: the file and the socket's name every local client reads).
//!
//! Owns: files under `$ALBEDO_HOME` and the catalogue database (`catalogue`, `schema`,
//! `migrations/`). Must not touch: actors, the HTTP API, transports.

pub mod catalogue;
pub mod cmdline;
pub mod daemon_config;
pub mod edit;
pub mod files;
pub mod fingerprint;
pub mod names;
pub mod pair;
pub mod problems;
pub mod schema;
pub mod settings;
pub mod token;
