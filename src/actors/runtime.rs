//! The Runtime actor (daemon-wide): reads `extensions.json` and `creds.json`, resolves each
//! server's secrets, starts its connection through the Registry, and prepares a whole
//! composition: servers never heard from are connected and discovered in parallel; a server
//! that cannot start is left out with a warning; bad configuration fails the preparation.
//! A reload keeps the connections whose configuration and credentials did not change. A
//! left-out server is probed at most once per retry window for the whole daemon
//! (`ProbeBook`), and every session that left it out shares that probe's result.
//!
//! Owns: preparation and the probe book. Must not touch: the API; connections only through
//! their handles.

use super::connection::ConnContext;
use super::handle::ConnHandle;
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
    /// Its tools are all deferred and its catalogue was saved: not dialled until one of
    /// its tools is called (session views only).
    Lazy,
}

/// One server of a prepared composition.
#[derive(Clone)]
pub struct PreparedServer {
    pub config: ServerConfig,
    pub fingerprint: String,
    pub conn: Option<ConnHandle>,
    pub catalogue: Option<Arc<Catalogue>>,
    pub state: ServerState,
    pub warning: Option<String>,
    /// The catalogue came from the store; the connection dials in the background.
    pub saved: bool,
    /// Supplied by the editor (`editor-mcp`): in memory only, its catalogue never saved.
    pub editor: bool,
}

impl PreparedServer {
    /// A server in `state`, with nothing else known yet.
    pub fn new(config: &ServerConfig, fingerprint: &str, state: ServerState) -> Self {
        PreparedServer {
            config: config.clone(),
            fingerprint: fingerprint.to_owned(),
            conn: None,
            catalogue: None,
            state,
            warning: None,
            saved: false,
            editor: crate::editor::is_editor_key(&config.name),
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
        if let Some(c) = &self.conn {
            c.close();
        }
    }

    /// Whether `self` can be kept as it is by a new preparation that resolved `fingerprint`.
    fn reusable_for(&self, fingerprint: &str) -> bool {
        self.fingerprint == fingerprint
            && self.state == ServerState::Connected
            && self.conn.as_ref().is_some_and(|c| !c.is_closed())
    }
}

#[derive(Clone)]
pub struct Prepared {
    pub enabled: bool,
    pub servers: Vec<PreparedServer>,
    pub warnings: Vec<String>,
    pub retry_ms: u64,
    /// `mcp.toolSearch.budgetTokens` as read for this preparation.
    pub budget_tokens: u64,
}

impl Prepared {
    /// Close every connection of this set (after a swap, or when it is thrown away).
    pub fn close(&self) {
        self.servers.iter().for_each(PreparedServer::close);
    }

    /// Close the connections of this set that `next` does not keep (after a swap).
    pub fn close_except(&self, next: &Prepared) {
        for s in &self.servers {
            let Some(c) = &s.conn else { continue };
            let kept = next
                .servers
                .iter()
                .any(|n| n.conn.as_ref().is_some_and(|k| k.same(c)));
            if !kept {
                c.close();
            }
        }
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
    /// Probes of left-out servers, shared by every session.
    pub probes: ProbeBook,
}

impl Runtime {
    pub fn new(
        home: PathBuf,
        registry: Addr<Registry>,
        ctx: ConnContext,
        store: Option<CatalogueStore>,
    ) -> Runtime {
        Runtime {
            home,
            registry,
            ctx,
            store,
            probes: ProbeBook::default(),
        }
    }
}

/// What the daemon learnt from probing one server (by fingerprint): a probe in flight that
/// later askers wait for, or the result of the last one and when it came.
#[derive(Clone, Default)]
pub struct ProbeBook(Arc<std::sync::Mutex<HashMap<String, ProbeEntry>>>);

#[derive(Clone)]
enum ProbeEntry {
    InFlight(tokio::sync::watch::Receiver<Option<ProbeResult>>),
    Done(tokio::time::Instant, ProbeResult),
}

/// `Ok` when the server answered (its catalogue is saved), else why not.
/// A probe's result: up, or why not and whether it asked for a sign-in.
type ProbeResult = Result<(), (String, bool)>;

/// What a session's probe of one server should do.
enum ProbeTurn {
    /// Dial it: this session's probe is the daemon's probe (report with the sender).
    Dial(tokio::sync::watch::Sender<Option<ProbeResult>>),
    /// Another session's probe answered already (or will): use its result.
    Known(ProbeResult),
}

impl ProbeBook {
    /// Whether to dial `fingerprint` now or use a result from within `window`.
    async fn turn(&self, fingerprint: &str, window: std::time::Duration) -> ProbeTurn {
        let entry = self.0.lock().ok().and_then(|g| g.get(fingerprint).cloned());
        match entry {
            Some(ProbeEntry::Done(at, r)) if at.elapsed() < window => return ProbeTurn::Known(r),
            Some(ProbeEntry::InFlight(mut rx)) => {
                let r = rx
                    .wait_for(Option::is_some)
                    .await
                    .ok()
                    .and_then(|v| v.clone());
                if let Some(r) = r {
                    return ProbeTurn::Known(r);
                }
            }
            _ => {}
        }
        let (tx, rx) = tokio::sync::watch::channel(None);
        if let Ok(mut g) = self.0.lock() {
            g.insert(fingerprint.to_owned(), ProbeEntry::InFlight(rx));
        }
        ProbeTurn::Dial(tx)
    }

    fn record(
        &self,
        fingerprint: &str,
        tx: tokio::sync::watch::Sender<Option<ProbeResult>>,
        r: ProbeResult,
    ) {
        if let Ok(mut g) = self.0.lock() {
            if g.len() > 4096 {
                g.retain(|_, e| matches!(e, ProbeEntry::InFlight(_)));
            }
            g.insert(
                fingerprint.to_owned(),
                ProbeEntry::Done(tokio::time::Instant::now(), r.clone()),
            );
        }
        let _ = tx.send(Some(r));
    }
}

impl Actor for Runtime {
    type Context = Context<Self>;
}

impl Runtime {
    /// Prepare a composition (or, with `only`, just those servers) without blocking the actor.
    fn prepare(&self, ask: Ask) -> ResponseFuture<Result<Prepared, PrepareError>> {
        let env = Env {
            home: self.home.clone(),
            registry: self.registry.clone(),
            cctx: self.ctx.clone(),
            store: self.store.clone(),
            probes: self.probes.clone(),
        };
        Box::pin(async move { prepare(env, ask).await })
    }
}

/// Prepare a composition. `enabled` is the session's effective choice.
#[derive(Message, Default)]
#[rtype(result = "Result<Prepared, PrepareError>")]
pub struct Prepare {
    pub enabled: bool,
    /// The session's current servers: a server whose configuration and credentials did not
    /// change keeps its connection (and catalogue).
    pub reuse: Vec<PreparedServer>,
    /// Servers the session switched off: not tried.
    pub off: Vec<String>,
    /// The session's editor-supplied servers (prepared whatever `enabled` says).
    pub editor: Vec<crate::editor::EditorServer>,
}

impl Handler<Prepare> for Runtime {
    type Result = ResponseFuture<Result<Prepared, PrepareError>>;

    fn handle(&mut self, msg: Prepare, _ctx: &mut Self::Context) -> Self::Result {
        self.prepare(Ask {
            enabled: msg.enabled,
            only: None,
            reuse: msg.reuse,
            off: msg.off,
            editor: msg.editor,
        })
    }
}

/// What one preparation is asked for.
struct Ask {
    enabled: bool,
    /// A probe: just these servers.
    only: Option<Vec<String>>,
    reuse: Vec<PreparedServer>,
    off: Vec<String>,
    editor: Vec<crate::editor::EditorServer>,
}

/// What preparation works with.
struct Env {
    home: PathBuf,
    registry: Addr<Registry>,
    cctx: ConnContext,
    store: Option<CatalogueStore>,
    probes: ProbeBook,
}

/// Read the settings: the extension's default and the `mcp` section.
pub async fn read_settings(home: PathBuf) -> Result<(ExtensionsFile, Credentials), PrepareError> {
    tokio::task::spawn_blocking(move || {
        crate::store::problems::report_on_change(&home);
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
    let r = tokio::task::spawn_blocking(move || store.put_shared(&server, &fp, &catalogue)).await;
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

async fn prepare(env: Env, ask: Ask) -> Result<Prepared, PrepareError> {
    let Env {
        home,
        registry,
        cctx,
        store,
        probes,
    } = env;
    let Ask {
        enabled,
        only,
        reuse,
        off,
        editor,
    } = ask;
    let (ext, creds) = read_settings(home).await?;
    let mcp = ext.mcp()?;
    let mut warnings = mcp.warnings.clone();
    for w in &warnings {
        tracing::warn!("{w}");
    }
    if !enabled {
        let mut servers = Vec::new();
        prepare_editor(
            &registry,
            &cctx,
            editor,
            &reuse,
            &mut servers,
            &mut warnings,
        )
        .await?;
        return Ok(Prepared {
            enabled,
            servers,
            warnings,
            retry_ms: mcp.retry_ms,
            budget_tokens: mcp.budget_tokens,
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
        if !cfg.enabled || off.contains(&cfg.name) {
            servers.push(PreparedServer::new(cfg, "", ServerState::Disabled));
            continue;
        }
        let r = settings::resolve(cfg, &env, &creds)?;
        if let Some(w) = plain_http_warning(&r) {
            tracing::warn!("{w}");
            warnings.push(w);
        }
        resolved.push(Arc::new(r));
    }
    let window = std::time::Duration::from_millis(mcp.retry_ms);
    let mut saved = load_saved(&store).await;
    // Servers to dial and discover now, with the probe (if any) they report to.
    let mut pending = Vec::new();
    for r in resolved {
        // Unchanged configuration and credentials: the same connection and catalogue.
        if let Some(kept) = reuse
            .iter()
            .find(|p| p.config.name == r.config.name && p.reusable_for(&r.fingerprint))
        {
            // The configuration may differ in what the fingerprint leaves out (`deferTools`).
            servers.push(PreparedServer {
                saved: false,
                config: r.config.clone(),
                ..kept.clone()
            });
            continue;
        }
        let mut probe = None;
        if only.is_some() {
            match probes.turn(&r.fingerprint, window).await {
                ProbeTurn::Dial(tx) => probe = Some(tx),
                ProbeTurn::Known(Err((reason, needs_sign_in))) => {
                    servers.push(left_out(&r, &reason, needs_sign_in, &mut warnings));
                    continue;
                }
                // Another session's probe found it up and saved its catalogue: start this
                // session's own connection from that catalogue, dialled in the background.
                ProbeTurn::Known(Ok(())) => saved = load_saved(&store).await,
            }
        }
        // A server heard from before (same fingerprint) is advertised from its saved
        // catalogue and dialled in the background; the others are discovered in parallel.
        let cached = saved
            .remove(&r.config.name)
            .filter(|(fp, _)| *fp == r.fingerprint);
        let conn = registry
            .send(StartConnection {
                server: r.clone(),
                ctx: cctx.clone(),
            })
            .await
            .map_err(|e| PrepareError::Settings(format!("the registry is gone: {e}")))?;
        if let Some((_, cat)) = cached.filter(|_| probe.is_none()) {
            // Shared, not copied: a deep copy of 100 saved catalogues of 50 tools was a
            // good part of a warm session open.
            servers.push(PreparedServer {
                conn: Some(conn),
                catalogue: Some(cat),
                saved: true,
                ..PreparedServer::new(&r.config, &r.fingerprint, ServerState::Connected)
            });
            continue;
        }
        pending.push(async move {
            let res = conn.discover().await;
            (r, conn, res, probe)
        });
    }
    // Every connection started above is owned by `servers` or by this list: an early
    // return drops them, and dropping a handle closes its connection and process.
    for (r, conn, outcome, probe) in futures_util::future::join_all(pending).await {
        // A catalogue over the size limit is bad configuration: nothing is swapped in.
        match &outcome {
            Ok(d) => {
                let cat = d.catalogue.clone();
                save_catalogue(&store, &r.config.name, &r.fingerprint, cat).await?
            }
            Err(e) if e.too_large() => {
                return Err(PrepareError::Settings(format!(
                    "MCP server {:?}: {e}",
                    r.config.name
                )))
            }
            Err(_) => {}
        }
        if let Some(tx) = probe {
            let r2 = outcome
                .as_ref()
                .map(|_| ())
                .map_err(|e| (e.to_string(), e.needs_sign_in()));
            probes.record(&r.fingerprint, tx, r2);
        }
        match outcome {
            Ok(d) => {
                // What discovery had to leave out (a list cut at 100 pages) is said in the
                // session, not only in the daemon's log.
                let notes: Vec<String> = d
                    .notes
                    .iter()
                    .map(|n| format!("MCP server {:?}: {n}", r.config.name))
                    .collect();
                warnings.extend(notes.iter().cloned());
                servers.push(PreparedServer {
                    conn: Some(conn),
                    catalogue: Some(d.catalogue),
                    warning: (!notes.is_empty()).then(|| notes.join("; ")),
                    ..PreparedServer::new(&r.config, &r.fingerprint, ServerState::Connected)
                })
            }
            Err(e) => {
                conn.close();
                servers.push(left_out(
                    &r,
                    &e.to_string(),
                    e.needs_sign_in(),
                    &mut warnings,
                ));
            }
        }
    }
    if only.is_none() {
        prepare_editor(
            &registry,
            &cctx,
            editor,
            &reuse,
            &mut servers,
            &mut warnings,
        )
        .await?;
    }
    servers.sort_by(|a, b| a.config.name.cmp(&b.config.name));
    Ok(Prepared {
        enabled,
        servers,
        warnings,
        retry_ms: mcp.retry_ms,
        budget_tokens: mcp.budget_tokens,
    })
}

/// Prepare a session's editor-supplied servers: each kept when it did not change, else
/// started and discovered in parallel; one that fails (or an `sse` one) is left out with a
/// warning. Nothing is read from or written to the catalogue store, and a left-out editor
/// server is not probed again (the editor's next list tries it again).
async fn prepare_editor(
    registry: &Addr<Registry>,
    cctx: &ConnContext,
    editor: Vec<crate::editor::EditorServer>,
    reuse: &[PreparedServer],
    servers: &mut Vec<PreparedServer>,
    warnings: &mut Vec<String>,
) -> Result<(), PrepareError> {
    let mut pending = Vec::new();
    for e in editor {
        let r = match e.resolved {
            Ok(r) => r,
            Err((cfg, why)) => {
                tracing::warn!("{why}");
                warnings.push(why.clone());
                servers.push(PreparedServer {
                    warning: Some(why),
                    ..PreparedServer::new(&cfg, "", ServerState::LeftOut)
                });
                continue;
            }
        };
        if let Some(kept) = reuse
            .iter()
            .find(|p| p.config.name == r.config.name && p.reusable_for(&r.fingerprint))
        {
            servers.push(kept.clone());
            continue;
        }
        let conn = registry
            .send(StartConnection {
                server: r.clone(),
                ctx: cctx.clone(),
            })
            .await
            .map_err(|e| PrepareError::Settings(format!("the registry is gone: {e}")))?;
        pending.push(async move {
            let res = conn.discover().await;
            (r, conn, res)
        });
    }
    for (r, conn, outcome) in futures_util::future::join_all(pending).await {
        match outcome {
            Ok(d) => servers.push(PreparedServer {
                conn: Some(conn),
                catalogue: Some(d.catalogue),
                ..PreparedServer::new(&r.config, &r.fingerprint, ServerState::Connected)
            }),
            Err(e) => {
                conn.close();
                servers.push(left_out(&r, &e.to_string(), e.needs_sign_in(), warnings));
            }
        }
    }
    Ok(())
}

/// The seed allows plain `http://` on trusted networks, but credentials sent that way to a
/// host that is not loopback deserve one warning in the session.
pub fn plain_http_warning(r: &settings::ResolvedServer) -> Option<String> {
    let settings::ResolvedTransport::Http { url, headers } = &r.transport else {
        return None;
    };
    if url.scheme() != "http" || headers.is_empty() {
        return None;
    }
    let loopback = match url.host() {
        Some(url::Host::Ipv4(a)) => a.is_loopback(),
        Some(url::Host::Ipv6(a)) => a.is_loopback(),
        Some(url::Host::Domain(d)) => d.eq_ignore_ascii_case("localhost"),
        None => false,
    };
    if loopback {
        return None;
    }
    Some(format!(
        "MCP server {:?} sends its credentials over plain http:// to {}: anyone on the network path can read them; use https unless the network is trusted (a tailnet encrypts its own traffic)",
        r.config.name,
        url.host_str().unwrap_or("?")
    ))
}

/// A server that could not start, initialize or be discovered: left out with a warning;
/// `needs_sign_in` when it refused albedo's credentials (or albedo has none it may send: a
/// refused refresh or grant).
fn left_out(
    r: &settings::ResolvedServer,
    reason: &str,
    needs_sign_in: bool,
    warnings: &mut Vec<String>,
) -> PreparedServer {
    let w = format!("MCP server {:?} was left out: {reason}", r.config.name);
    tracing::warn!("{w}");
    warnings.push(w.clone());
    let state = if needs_sign_in {
        ServerState::NeedsSignIn
    } else {
        ServerState::LeftOut
    };
    PreparedServer {
        warning: Some(w),
        ..PreparedServer::new(&r.config, &r.fingerprint, state)
    }
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
        self.prepare(Ask {
            enabled: true,
            only: Some(msg.servers),
            reuse: Vec::new(),
            off: Vec::new(),
            editor: Vec::new(),
        })
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
