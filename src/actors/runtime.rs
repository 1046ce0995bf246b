//! The Runtime actor (daemon-wide): reads `extensions.json` and `creds.json`, resolves each
//! server's secrets, starts its connection through the Registry, and prepares a whole
//! composition: servers never heard from are connected and discovered in parallel; a server
//! that cannot start is left out with a warning; bad configuration fails the preparation.

use super::connection::{Close, ConnContext, Connection, Discover};
use super::registry::{Registry, StartConnection};
use crate::protocol::model::Catalogue;
use crate::store::catalogue::CatalogueStore;
use crate::store::settings::{self, Credentials, ExtensionsFile, ServerConfig, SettingsError};
use actix::prelude::*;
use serde::Serialize;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ServerState {
    Connected,
    Connecting,
    Unavailable,
    LeftOut,
    NeedsSignIn,
    Disabled,
}

/// One server of a prepared composition.
#[derive(Clone)]
pub struct PreparedServer {
    pub config: ServerConfig,
    pub fingerprint: String,
    pub addr: Option<Addr<Connection>>,
    pub catalogue: Option<Arc<Catalogue>>,
    pub state: ServerState,
    pub warning: Option<String>,
    /// The catalogue came from the store; the connection dials in the background.
    pub saved: bool,
}

impl PreparedServer {
    /// A server in `state`, with nothing else known yet.
    pub fn new(config: &ServerConfig, fingerprint: &str, state: ServerState) -> Self {
        PreparedServer {
            config: config.clone(),
            fingerprint: fingerprint.to_owned(),
            addr: None,
            catalogue: None,
            state,
            warning: None,
            saved: false,
        }
    }

    /// Whether it is reached over HTTP (the `x-mcp-header` rules apply).
    pub fn is_http(&self) -> bool {
        matches!(
            self.config.transport,
            settings::TransportConfig::Http { .. }
        )
    }

    /// Close its connection, if it has one.
    pub fn close(&self) {
        if let Some(a) = &self.addr {
            a.do_send(Close);
        }
    }
}

#[derive(Clone)]
pub struct Prepared {
    pub enabled: bool,
    pub servers: Vec<PreparedServer>,
    pub warnings: Vec<String>,
    pub retry_ms: u64,
}

impl Prepared {
    /// Close every connection of this set (after a swap, or when it is thrown away).
    pub fn close(&self) {
        self.servers.iter().for_each(PreparedServer::close);
    }
}

#[derive(Debug, Clone, thiserror::Error)]
pub enum PrepareError {
    #[error("{0}")]
    Settings(String),
}

impl From<SettingsError> for PrepareError {
    fn from(e: SettingsError) -> Self {
        PrepareError::Settings(e.to_string())
    }
}

pub struct Runtime {
    pub home: PathBuf,
    pub registry: Addr<Registry>,
    pub ctx: ConnContext,
    /// Saved catalogues; `None` runs without persistence (tests of the actors alone).
    pub store: Option<CatalogueStore>,
}

impl Actor for Runtime {
    type Context = Context<Self>;
}

impl Runtime {
    /// Prepare a composition (or, with `only`, just those servers) without blocking the actor.
    fn prepare(
        &self,
        enabled: bool,
        only: Option<Vec<String>>,
    ) -> ResponseFuture<Result<Prepared, PrepareError>> {
        let (home, registry, cctx, store) = (
            self.home.clone(),
            self.registry.clone(),
            self.ctx.clone(),
            self.store.clone(),
        );
        Box::pin(async move { prepare(home, registry, cctx, store, enabled, only).await })
    }
}

/// Prepare a composition. `enabled` is the session's effective choice.
#[derive(Message)]
#[rtype(result = "Result<Prepared, PrepareError>")]
pub struct Prepare {
    pub enabled: bool,
}

impl Handler<Prepare> for Runtime {
    type Result = ResponseFuture<Result<Prepared, PrepareError>>;

    fn handle(&mut self, msg: Prepare, _ctx: &mut Self::Context) -> Self::Result {
        self.prepare(msg.enabled, None)
    }
}

/// Read the settings: the extension's default and the `mcp` section.
pub async fn read_settings(home: PathBuf) -> Result<(ExtensionsFile, Credentials), PrepareError> {
    tokio::task::spawn_blocking(move || {
        Ok::<_, SettingsError>((ExtensionsFile::load(&home)?, Credentials::load(&home)?))
    })
    .await
    .map_err(|e| PrepareError::Settings(format!("reading settings failed: {e}")))?
    .map_err(PrepareError::from)
}

/// Saved catalogues by server: the fingerprint they were found under, and the catalogue.
async fn load_saved(store: &Option<CatalogueStore>) -> HashMap<String, (String, Arc<Catalogue>)> {
    let Some(store) = store.clone() else {
        return HashMap::new();
    };
    match tokio::task::spawn_blocking(move || store.get_all_shared()).await {
        Ok(Ok(m)) => m,
        Ok(Err(e)) => {
            tracing::warn!(error = %e, "cannot read saved catalogues; discovering every server");
            HashMap::new()
        }
        Err(e) => {
            tracing::warn!(error = %e, "reading saved catalogues failed");
            HashMap::new()
        }
    }
}

/// Save a catalogue; one over the size limit is an error that fails preparation.
pub async fn save_catalogue(
    store: &Option<CatalogueStore>,
    server: &str,
    fingerprint: &str,
    catalogue: Arc<Catalogue>,
) -> Result<(), PrepareError> {
    let Some(store) = store.clone() else {
        return Ok(());
    };
    let (server, fp) = (server.to_owned(), fingerprint.to_owned());
    let r = tokio::task::spawn_blocking(move || store.put(&server, &fp, &catalogue)).await;
    match r {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e @ crate::store::catalogue::StoreError::TooLarge { .. })) => {
            Err(PrepareError::Settings(e.to_string()))
        }
        Ok(Err(e)) => {
            tracing::warn!(error = %e, "cannot save a catalogue");
            Ok(())
        }
        Err(e) => {
            tracing::warn!(error = %e, "saving a catalogue failed");
            Ok(())
        }
    }
}

async fn prepare(
    home: PathBuf,
    registry: Addr<Registry>,
    cctx: ConnContext,
    store: Option<CatalogueStore>,
    enabled: bool,
    only: Option<Vec<String>>,
) -> Result<Prepared, PrepareError> {
    let (ext, creds) = read_settings(home).await?;
    let mcp = ext.mcp()?;
    let mut warnings = mcp.warnings.clone();
    for w in &warnings {
        tracing::warn!("{w}");
    }
    if !enabled {
        return Ok(Prepared {
            enabled,
            servers: Vec::new(),
            warnings,
            retry_ms: mcp.retry_ms,
        });
    }
    // Resolve every enabled server first: a bad one fails the whole preparation.
    let env = |k: &str| std::env::var(k).ok();
    let mut resolved = Vec::new();
    let mut servers = Vec::new();
    for cfg in &mcp.servers {
        if let Some(only) = &only {
            if !only.contains(&cfg.name) {
                continue;
            }
        }
        if !cfg.enabled {
            servers.push(PreparedServer::new(cfg, "", ServerState::Disabled));
            continue;
        }
        resolved.push(Arc::new(settings::resolve(cfg, &env, &creds)?));
    }
    // A server heard from before (same fingerprint) is advertised from its saved catalogue
    // and dialled in the background; the others are started and discovered in parallel.
    let mut saved = if only.is_some() {
        HashMap::new()
    } else {
        load_saved(&store).await
    };
    let mut pending = Vec::new();
    for r in resolved {
        let addr = registry
            .send(StartConnection {
                server: r.clone(),
                ctx: cctx.clone(),
            })
            .await
            .map_err(|e| PrepareError::Settings(format!("the registry is gone: {e}")))?;
        // Shared, not copied: a deep copy of 100 saved catalogues of 50 tools was a good
        // part of a warm session open.
        if let Some((_, cat)) = saved
            .remove(&r.config.name)
            .filter(|(fp, _)| *fp == r.fingerprint)
        {
            servers.push(PreparedServer {
                addr: Some(addr),
                catalogue: Some(cat),
                saved: true,
                ..PreparedServer::new(&r.config, &r.fingerprint, ServerState::Connected)
            });
            continue;
        }
        pending.push(async move {
            let res = addr.send(Discover).await;
            (r, addr, res)
        });
    }
    for (r, addr, res) in futures_util::future::join_all(pending).await {
        let outcome = match res {
            Ok(Ok(cat)) => Ok(cat),
            Ok(Err(e)) => Err(e),
            Err(e) => Err(format!("the connection actor is gone: {e}")),
        };
        if let Ok(cat) = &outcome {
            if let Err(e) =
                save_catalogue(&store, &r.config.name, &r.fingerprint, cat.clone()).await
            {
                // A catalogue over the size limit is bad configuration: nothing is swapped in.
                servers.iter().for_each(PreparedServer::close);
                addr.do_send(Close);
                return Err(e);
            }
        }
        match outcome {
            Ok(cat) => servers.push(PreparedServer {
                addr: Some(addr),
                catalogue: Some(cat),
                ..PreparedServer::new(&r.config, &r.fingerprint, ServerState::Connected)
            }),
            Err(reason) => {
                addr.do_send(Close);
                let needs_auth = reason.contains("sign in");
                let w = format!("MCP server {:?} was left out: {reason}", r.config.name);
                tracing::warn!("{w}");
                warnings.push(w.clone());
                let state = if needs_auth {
                    ServerState::NeedsSignIn
                } else {
                    ServerState::LeftOut
                };
                servers.push(PreparedServer {
                    warning: Some(w),
                    ..PreparedServer::new(&r.config, &r.fingerprint, state)
                });
            }
        }
    }
    servers.sort_by(|a, b| a.config.name.cmp(&b.config.name));
    Ok(Prepared {
        enabled,
        servers,
        warnings,
        retry_ms: mcp.retry_ms,
    })
}

/// Try the named servers again (those left out of a session): each is started and
/// discovered like a server never heard from.
#[derive(Message)]
#[rtype(result = "Result<Prepared, PrepareError>")]
pub struct Probe {
    pub servers: Vec<String>,
}

impl Handler<Probe> for Runtime {
    type Result = ResponseFuture<Result<Prepared, PrepareError>>;

    fn handle(&mut self, msg: Probe, _ctx: &mut Self::Context) -> Self::Result {
        self.prepare(true, Some(msg.servers))
    }
}

/// Save a catalogue a connection discovered after preparation (list_changed, a redial).
#[derive(Message)]
#[rtype(result = "()")]
pub struct SaveCatalogue {
    pub server: String,
    pub fingerprint: String,
    pub catalogue: Arc<Catalogue>,
}

impl Handler<SaveCatalogue> for Runtime {
    type Result = ResponseFuture<()>;

    fn handle(&mut self, msg: SaveCatalogue, _ctx: &mut Self::Context) -> Self::Result {
        let store = self.store.clone();
        Box::pin(async move {
            if let Err(e) =
                save_catalogue(&store, &msg.server, &msg.fingerprint, msg.catalogue).await
            {
                tracing::warn!(server = %msg.server, error = %e, "the new catalogue was not saved");
            }
        })
    }
}
