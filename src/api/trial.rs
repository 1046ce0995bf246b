//! `POST /settings/mcp/servers/{name}/test`: try one configured server and answer how far it
//! got ([`crate::actors::trial::TrialReport`]: stages, the first error, its stderr, all
//! cleaned of its secrets). The trial itself always answers 200; only a server that is not
//! configured (404 `unknown_server`) or settings that cannot be read or resolved (422
//! `invalid_settings`, naming what is missing) answer otherwise.
//!
//! Owns: the route's JSON errors. Must not touch: transports (the trial dials, on this
//! handler's arbiter, since the HTTP transport's awc client is not `Send`), the settings
//! files (read only).

use super::{ApiError, AppState};
use crate::actors::runtime::read_settings;
use crate::actors::trial::{trial, TrialContext};
use crate::store::settings;
use actix_web::http::StatusCode;
use actix_web::{web, HttpResponse};
use serde_json::json;

fn invalid(message: impl Into<String>) -> ApiError {
    ApiError::new(
        StatusCode::UNPROCESSABLE_ENTITY,
        "invalid_settings",
        message,
    )
}

/// `POST /settings/mcp/servers/{name}/test` → 200 with the trial's report.
pub async fn test_server(
    state: web::Data<AppState>,
    name: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let name = name.into_inner();
    let (ext, creds) = read_settings(state.home.clone())
        .await
        .map_err(|e| invalid(e.to_string()))?;
    let mcp = ext.mcp().map_err(|e| invalid(e.to_string()))?;
    let Some(cfg) = mcp.servers.iter().find(|c| c.name == name) else {
        let mut e = ApiError::new(
            StatusCode::NOT_FOUND,
            "unknown_server",
            format!(
                "no server {:?} is configured",
                crate::protocol::text::clean(&name, 200)
            ),
        );
        e.extra = Some(json!({ "server": crate::protocol::text::clean(&name, 200) }));
        return Err(e);
    };
    let env = |k: &str| std::env::var(k).ok();
    let resolved = settings::resolve(cfg, &env, &creds).map_err(|e| invalid(e.to_string()))?;
    let ctx = state.runtime.send(TrialContext).await.map_err(|e| {
        ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "unavailable",
            format!("the runtime is not answering: {e}"),
        )
    })?;
    let report = trial(&resolved, &ctx).await;
    Ok(HttpResponse::Ok().json(report))
}
