//! Strict saving, on the Runtime: a server that a settings change adds, edits or switches on
//! is started, initialized and discovered (`TryServers`) before the change is written. Each
//! runs as a supervised connection of its own under the daemon-wide dial limit; what it
//! discovered is saved under the new fingerprint, so the sessions that reload next advertise
//! it at once instead of waiting on the server a second time. The connection is closed
//! afterwards (its process group ended). Also `SavedTools`: the tools of the saved catalogues,
//! for the settings view of servers no session has open.
//!
//! Owns: those two messages. Must not touch: files (the API writes them after a success), the
//! HTTP API.

use super::registry::StartConnection;
use super::runtime::{save_catalogue, Runtime};
use crate::store::settings::ResolvedServer;
use actix::prelude::*;
use serde::Serialize;
use std::collections::HashMap;
use std::sync::Arc;

/// How trying one server went.
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum TryOutcome {
    Connected {
        era: Option<crate::protocol::Era>,
        protocol_version: Option<String>,
        tools: usize,
        resources: usize,
        prompts: usize,
    },
    /// It answered 401: kept, needing a sign-in.
    NeedsSignIn { last_error: String },
    /// It could not start, initialize or be discovered (the message is cleaned of secrets).
    Failed { last_error: String },
}

/// Start, initialize and discover each server (in parallel); save what was discovered.
#[derive(Message)]
#[rtype(result = "Vec<(String, TryOutcome)>")]
pub struct TryServers {
    pub servers: Vec<Arc<ResolvedServer>>,
}

impl Handler<TryServers> for Runtime {
    type Result = ResponseFuture<Vec<(String, TryOutcome)>>;

    fn handle(&mut self, msg: TryServers, _ctx: &mut Self::Context) -> Self::Result {
        let registry = self.registry.clone();
        let cctx = self.ctx.clone();
        let store = self.store.clone();
        Box::pin(async move {
            let tries = msg.servers.into_iter().map(|server| {
                let (registry, cctx, store) = (registry.clone(), cctx.clone(), store.clone());
                async move {
                    let name = server.config.name.clone();
                    let conn = match registry
                        .send(StartConnection {
                            server: server.clone(),
                            ctx: cctx,
                        })
                        .await
                    {
                        Ok(c) => c,
                        Err(e) => {
                            return (
                                name,
                                TryOutcome::Failed {
                                    last_error: format!("the registry is gone: {e}"),
                                },
                            )
                        }
                    };
                    let outcome = match conn.discover().await {
                        Ok(d) => {
                            let st = conn.status();
                            let cat = d.catalogue;
                            let out = TryOutcome::Connected {
                                era: st.era,
                                protocol_version: st.protocol_version,
                                tools: cat
                                    .tools
                                    .iter()
                                    .filter_map(crate::protocol::model::tool_name)
                                    .filter(|t| server.config.tool_allowed(t))
                                    .count(),
                                resources: cat.resources.len() + cat.resource_templates.len(),
                                prompts: cat.prompts.len(),
                            };
                            match save_catalogue(&store, &name, &server.fingerprint, cat).await {
                                Ok(()) => out,
                                // Over the size limit: the session would refuse it.
                                Err(e) => TryOutcome::Failed {
                                    last_error: e.to_string(),
                                },
                            }
                        }
                        Err(e) if e.needs_sign_in() => TryOutcome::NeedsSignIn {
                            last_error: e.message,
                        },
                        Err(e) => TryOutcome::Failed {
                            last_error: e.message,
                        },
                    };
                    conn.close_and_wait().await;
                    (name, outcome)
                }
            });
            futures_util::future::join_all(tries).await
        })
    }
}

/// The saved catalogue of each server: the fingerprint it was found under and its counts.
#[derive(Message)]
#[rtype(result = "HashMap<String, SavedSummary>")]
pub struct SavedTools;

#[derive(Debug, Clone)]
pub struct SavedSummary {
    pub fingerprint: String,
    /// The names of its tools (the settings view counts those the server's filters allow).
    pub tools: Vec<String>,
    /// The catalogue itself (shared), for what a new session would defer.
    pub catalogue: Arc<crate::protocol::model::Catalogue>,
}

impl Handler<SavedTools> for Runtime {
    type Result = ResponseFuture<HashMap<String, SavedSummary>>;

    fn handle(&mut self, _: SavedTools, _ctx: &mut Self::Context) -> Self::Result {
        let store = self.store.clone();
        Box::pin(async move {
            let Some(store) = store else {
                return HashMap::new();
            };
            match tokio::task::spawn_blocking(move || store.get_all_shared()).await {
                Ok(Ok(m)) => m
                    .into_iter()
                    .map(|(name, (fingerprint, cat))| {
                        (
                            name,
                            SavedSummary {
                                fingerprint,
                                tools: cat
                                    .tools
                                    .iter()
                                    .filter_map(crate::protocol::model::tool_name)
                                    .map(str::to_owned)
                                    .collect(),
                                catalogue: cat,
                            },
                        )
                    })
                    .collect(),
                _ => HashMap::new(),
            }
        })
    }
}
