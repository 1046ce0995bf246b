//! `subscriptions/listen` (2026-07-28): for a modern server whose capabilities say a list can
//! change, one listen request is held open per connection (over stdio and HTTP alike); its
//! `list_changed` notifications reach the connection like the legacy ones. A listen that
//! ends or drops is reopened after a wait that doubles from one second up to a minute with
//! each attempt that heard nothing, and given up after eight such attempts in a row; a server
//! that refuses it (an error answer) is not asked again. Closing the client closes it.

use super::{McpClient, RpcError};
use crate::protocol::backoff::Backoff;
use serde_json::{json, Value};

/// The filter to ask for, from the server's capabilities; `None` when nothing can change.
pub fn filter(capabilities: &Value) -> Option<Value> {
    let changes = |k: &str| {
        capabilities
            .get(k)
            .and_then(|c| c.get("listChanged"))
            .and_then(Value::as_bool)
            .unwrap_or(false)
    };
    let (t, r, p) = (changes("tools"), changes("resources"), changes("prompts"));
    if !(t || r || p) {
        return None;
    }
    let mut f = serde_json::Map::new();
    if t {
        f.insert("toolsListChanged".into(), Value::Bool(true));
    }
    if r {
        f.insert("resourcesListChanged".into(), Value::Bool(true));
    }
    if p {
        f.insert("promptsListChanged".into(), Value::Bool(true));
    }
    Some(Value::Object(f))
}

/// Hold the listen request open until the client closes or the server refuses it. Runs as a
/// local task on the connection's arbiter.
pub async fn hold(client: McpClient, filter: Value) {
    let mut backoff = Backoff::default();
    loop {
        if client.is_closed() {
            return;
        }
        let heard_before = client.listen_heard();
        let started = client.start_request_as(
            "subscriptions/listen",
            Some(json!({ "notifications": filter })),
            None,
        );
        let (id, rx) = match started {
            Ok(x) => x,
            Err(_) => return,
        };
        client.set_listen_id(Some(id.clone()));
        let r = rx.await;
        client.set_listen_id(None);
        if client.is_closed() {
            return;
        }
        match r {
            Ok(Ok(_)) => {
                tracing::debug!("the server ended the subscription; listening again");
            }
            Ok(Err(RpcError::Server(e))) => {
                tracing::info!(error = %e, "the server refused subscriptions/listen; list changes will not be followed on this connection");
                return;
            }
            Ok(Err(e)) => {
                tracing::debug!(error = %e, "the subscription dropped");
            }
            Err(_) => return,
        }
        let heard = client.listen_heard() != heard_before;
        match backoff.next_wait(heard, None) {
            Some(wait) => tokio::time::sleep(wait).await,
            None => {
                tracing::warn!(
                    "subscriptions/listen gave up after {} attempts that heard nothing",
                    Backoff::MAX_EMPTY
                );
                return;
            }
        }
    }
}
