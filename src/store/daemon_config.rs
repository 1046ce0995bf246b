//! The daemon's own settings: `$ALBEDO_HOME/config.toml` and `ALBEDO_*` environment variables
//! over built-in defaults, read with the `config` crate.

use serde::Deserialize;
use std::path::{Path, PathBuf};

pub const DEFAULT_LISTEN: &str = "127.0.0.1:7420";

#[derive(Debug, Clone, Deserialize)]
pub struct DaemonConfig {
    /// Where the HTTP API listens.
    pub listen: String,
    /// The catalogue database (default: SQLite at `$ALBEDO_HOME/albedo.db`).
    pub database_url: Option<String>,
    /// `text` or `json`.
    pub log_format: String,
    /// Extra CA certificates (PEM files) trusted for HTTPS servers, beside the system roots.
    #[serde(default)]
    pub ca_files: Vec<PathBuf>,
    /// Sessions open at once; one more is refused with 429.
    #[serde(default = "default_max_sessions")]
    pub max_sessions: usize,
    /// A session with no activity for this many seconds is closed.
    #[serde(default = "default_session_idle_secs")]
    pub session_idle_secs: u64,
    /// Dials and discoveries running at once across the daemon.
    #[serde(default = "default_max_concurrent_dials")]
    pub max_concurrent_dials: usize,
    /// Host names (or `name:port`) the API accepts in `Host` beside `127.0.0.1`, `localhost`
    /// and `[::1]` with the daemon's port (a reverse proxy's name, a remote name).
    #[serde(default)]
    pub allowed_hosts: Vec<String>,
    /// The API over TLS: a PEM certificate chain and its PEM private key.
    #[serde(default)]
    pub tls_cert: Option<PathBuf>,
    #[serde(default)]
    pub tls_key: Option<PathBuf>,
    /// Listen beyond loopback without TLS (the token then crosses the network in clear).
    #[serde(default)]
    pub allow_plain_http_remote: bool,
    /// The largest request body but a tool call's, in bytes (413 past it).
    #[serde(default = "default_max_body_bytes")]
    pub max_body_bytes: usize,
    /// The largest tool call body, in bytes (413 past it).
    #[serde(default = "default_max_call_body_bytes")]
    pub max_call_body_bytes: usize,
}

fn default_max_body_bytes() -> usize {
    1024 * 1024
}

fn default_max_call_body_bytes() -> usize {
    16 * 1024 * 1024
}

/// Default of `max_concurrent_dials`: dials (spawn + handshake) and discoveries running at
/// once across the whole daemon.
pub const DEFAULT_CONCURRENT_DIALS: usize = 64;

fn default_max_sessions() -> usize {
    1000
}

fn default_session_idle_secs() -> u64 {
    24 * 3600
}

fn default_max_concurrent_dials() -> usize {
    DEFAULT_CONCURRENT_DIALS
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: String,
        #[source]
        source: config::ConfigError,
    },
    #[error("log_format must be `text` or `json`, not {0:?}")]
    LogFormat(String),
}

/// `$ALBEDO_HOME`, default `~/.albedo`.
pub fn albedo_home() -> PathBuf {
    if let Some(h) = std::env::var_os("ALBEDO_HOME") {
        return PathBuf::from(h);
    }
    let home = std::env::var_os("HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("."));
    home.join(".albedo")
}

impl DaemonConfig {
    pub fn load(home: &Path) -> Result<DaemonConfig, ConfigError> {
        let path = home.join("config.toml");
        let built = config::Config::builder()
            .set_default("listen", DEFAULT_LISTEN)
            .and_then(|b| b.set_default("log_format", "text"))
            .and_then(|b| b.set_default("ca_files", Vec::<String>::new()))
            .map_err(|source| ConfigError::Read {
                path: path.display().to_string(),
                source,
            })?
            .add_source(config::File::from(path.clone()).required(false))
            .add_source(
                config::Environment::with_prefix("ALBEDO")
                    .try_parsing(true)
                    .list_separator(",")
                    .with_list_parse_key("ca_files")
                    .with_list_parse_key("allowed_hosts"),
            )
            .build()
            .and_then(|c| c.try_deserialize::<DaemonConfig>())
            .map_err(|source| ConfigError::Read {
                path: path.display().to_string(),
                source,
            })?;
        if built.log_format != "text" && built.log_format != "json" {
            return Err(ConfigError::LogFormat(built.log_format));
        }
        Ok(built)
    }

    pub fn database_url(&self, home: &Path) -> String {
        self.database_url
            .clone()
            .unwrap_or_else(|| home.join("albedo.db").display().to_string())
    }
}
