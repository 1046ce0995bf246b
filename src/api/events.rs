//! The event streams: a session's (`GET /sessions/{id}/events`: tools changed, a server's
//! state) and the settings' (`GET /settings/mcp/events`: saved, reloaded, a sign-in's
//! progress, sessions opened and closed, connections changing state).
//!
//! Owns: those streams and the follower that turns connection changes into events. Must not
//! touch: the events' causes (actors and handlers send them).

use super::*;

pub(super) async fn session_events(
    state: web::Data<AppState>,
    path: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let s = session(&state, &path)?;
    let rx = s.events.subscribe();
    let stream = futures_util::stream::unfold(rx, |mut rx| async move {
        loop {
            match rx.recv().await {
                Ok(ev) => {
                    let data = serde_json::to_string(&ev).unwrap_or_default();
                    let chunk = web::Bytes::from(format!("event: {}\ndata: {}\n\n", ev.kind, data));
                    return Some((Ok::<_, actix_web::Error>(chunk), rx));
                }
                Err(broadcast::error::RecvError::Lagged(_)) => continue,
                Err(broadcast::error::RecvError::Closed) => return None,
            }
        }
    });
    Ok(HttpResponse::Ok()
        .content_type("text/event-stream")
        .insert_header(("Cache-Control", "no-cache"))
        .streaming(stream))
}

/// One line of `GET /settings/mcp/events`: `kind` is `settings` (saved, reloaded, the
/// extension's default), `sign_in` (a sign-in's progress: `server`, `state`), `sessions`
/// (one opened or closed), or `servers` (a connection to `server` changed state). Clients read `GET /settings/mcp` again when they hear one.
#[derive(Debug, Clone, serde::Serialize)]
pub struct SettingsEvent {
    pub kind: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub server: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub state: Option<Value>,
}

impl AppState {
    /// Tell `GET /settings/mcp/events` listeners (none listening is fine).
    pub fn settings_changed(
        &self,
        kind: &'static str,
        server: Option<String>,
        state: Option<Value>,
    ) {
        let _ = self.settings_events.send(SettingsEvent {
            kind,
            server,
            state,
        });
    }
}

/// Follow the connections' state changes for the daemon's life: each becomes a `servers`
/// event (`server`: its name) of `GET /settings/mcp/events`, so that a client shows a server
/// connecting, failing or closing without polling. Changes that queued up while one was told
/// are told once per server (a session opening with 20 servers is not 40 events per
/// listener); missed ones (the channel lagged) are one `servers` event naming none: read all.
pub async fn follow_link_states(
    state: web::Data<AppState>,
    mut changes: broadcast::Receiver<String>,
) {
    loop {
        let first = match changes.recv().await {
            Ok(name) => Some(name),
            Err(broadcast::error::RecvError::Lagged(_)) => None,
            Err(broadcast::error::RecvError::Closed) => return,
        };
        let mut names: Vec<Option<String>> = vec![first];
        loop {
            match changes.try_recv() {
                Ok(n) => {
                    let n = Some(n);
                    if !names.contains(&n) {
                        names.push(n);
                    }
                }
                Err(broadcast::error::TryRecvError::Lagged(_)) => names.push(None),
                Err(_) => break,
            }
        }
        if names.contains(&None) {
            state.settings_changed("servers", None, None);
        } else {
            for n in names {
                state.settings_changed("servers", n, None);
            }
        }
    }
}

/// `GET /settings/mcp/events`: server-sent events that say when to read the settings again
/// (a client such as the terminal form or the web pane follows them instead of polling).
/// A comment line every 15 s keeps proxies from closing an idle stream.
pub(super) async fn settings_events(state: web::Data<AppState>) -> HttpResponse {
    let rx = state.settings_events.subscribe();
    let ping = tokio::time::interval(std::time::Duration::from_secs(15));
    let stream = futures_util::stream::unfold((rx, ping), |(mut rx, mut ping)| async move {
        let chunk = tokio::select! {
            r = rx.recv() => match r {
                Ok(ev) => {
                    let data = serde_json::to_string(&ev).unwrap_or_default();
                    web::Bytes::from(format!("event: {}\ndata: {}\n\n", ev.kind, data))
                }
                // Missed some: one `settings` tells the client to read everything again.
                Err(broadcast::error::RecvError::Lagged(_)) => {
                    web::Bytes::from_static(b"event: settings\ndata: {\"kind\":\"settings\"}\n\n")
                }
                Err(broadcast::error::RecvError::Closed) => return None,
            },
            _ = ping.tick() => web::Bytes::from_static(b": ping\n\n"),
        };
        Some((Ok::<_, actix_web::Error>(chunk), (rx, ping)))
    });
    HttpResponse::Ok()
        .content_type("text/event-stream")
        .insert_header(("Cache-Control", "no-cache"))
        .streaming(stream)
}
