//! Listing a server's catalogue: tools, resources, resource templates and prompts for the
//! capabilities it declared, following `nextCursor` for at most 100 pages per list, the lists
//! fetched concurrently.
//!
//! A server is untrusted: the whole discovery has one deadline (not one per page) and one
//! byte budget across every page of every list (the catalogue limit, checked as pages
//! arrive, so a server that pages forever or grows its catalogue past the limit costs at
//! most the limit, never 100 pages of it).
//!
//! Owns: the list requests of one discovery. Must not touch: actors, storage.

use super::handshake::ServerHello;
use super::{McpClient, RpcError};
use crate::protocol::jsonrpc;
use crate::protocol::model::{result_type, Catalogue, MAX_CATALOGUE_BYTES};
use serde_json::{json, Value};
use std::cell::Cell;
use std::time::Duration;
use tokio::time::Instant;

/// The most pages one list is followed for.
pub const MAX_PAGES: usize = 100;

/// Why a discovery has no catalogue.
#[derive(Debug, Clone, thiserror::Error)]
pub enum DiscoveryError {
    #[error(transparent)]
    Rpc(#[from] RpcError),
    /// The lists together passed the catalogue limit: bad configuration, not a server that
    /// is down.
    #[error("the server's catalogue is over the {limit}-byte limit ({read} bytes read when discovery stopped)")]
    TooLarge { read: usize, limit: usize },
    #[error("discovery did not finish within {} ms", .0.as_millis())]
    Timeout(Duration),
}

/// What one discovery may spend: a deadline and a number of bytes, shared by its lists.
pub struct Budget {
    deadline: Instant,
    timeout: Duration,
    read: Cell<usize>,
    limit: usize,
    /// What the discovery had to leave out (a list cut at 100 pages), for the session.
    notes: std::cell::RefCell<Vec<String>>,
}

impl Budget {
    /// `timeout` for the whole discovery and the catalogue limit.
    pub fn new(timeout: Duration) -> Budget {
        Budget::with_limit(timeout, MAX_CATALOGUE_BYTES)
    }

    pub fn with_limit(timeout: Duration, limit: usize) -> Budget {
        Budget {
            deadline: Instant::now() + timeout,
            timeout,
            read: Cell::new(0),
            limit,
            notes: Default::default(),
        }
    }

    fn left(&self) -> Result<Duration, DiscoveryError> {
        let left = self.deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(DiscoveryError::Timeout(self.timeout));
        }
        Ok(left)
    }

    /// What the discovery had to leave out (a list cut at 100 pages).
    pub fn notes(&self) -> Vec<String> {
        self.notes.borrow().clone()
    }

    /// Count a page's items against the limit.
    fn spend(&self, items: &[Value]) -> Result<(), DiscoveryError> {
        let n: usize = items
            .iter()
            .map(|v| crate::protocol::json_write::to_vec(v).len() + 1)
            .sum();
        let read = self.read.get().saturating_add(n);
        self.read.set(read);
        if read > self.limit {
            return Err(DiscoveryError::TooLarge {
                read,
                limit: self.limit,
            });
        }
        Ok(())
    }
}

/// List everything the server's capabilities offer, within `timeout` and the catalogue
/// limit.
pub async fn discover(
    client: &McpClient,
    hello: &ServerHello,
    timeout: Duration,
) -> Result<Catalogue, DiscoveryError> {
    discover_within(client, hello, &Budget::new(timeout)).await
}

/// [`discover`] with a given budget.
pub async fn discover_within(
    client: &McpClient,
    hello: &ServerHello,
    budget: &Budget,
) -> Result<Catalogue, DiscoveryError> {
    let caps = &hello.capabilities;
    let want = |k: &str| caps.get(k).map(|v| !v.is_null()).unwrap_or(false);
    let tools = async {
        if want("tools") {
            list_all(client, "tools/list", "tools", budget).await
        } else {
            Ok(Vec::new())
        }
    };
    let resources = async {
        if want("resources") {
            list_all(client, "resources/list", "resources", budget).await
        } else {
            Ok(Vec::new())
        }
    };
    let templates = async {
        if want("resources") {
            match list_all(
                client,
                "resources/templates/list",
                "resourceTemplates",
                budget,
            )
            .await
            {
                Err(DiscoveryError::Rpc(RpcError::Server(e)))
                    if e.code == jsonrpc::METHOD_NOT_FOUND =>
                {
                    Ok(Vec::new())
                }
                r => r,
            }
        } else {
            Ok(Vec::new())
        }
    };
    let prompts = async {
        if want("prompts") {
            list_all(client, "prompts/list", "prompts", budget).await
        } else {
            Ok(Vec::new())
        }
    };
    let (tools, resources, templates, prompts) =
        futures_util::future::join4(tools, resources, templates, prompts).await;
    Ok(Catalogue {
        tools: tools?,
        resources: resources?,
        resource_templates: templates?,
        prompts: prompts?,
        capabilities: caps.clone(),
        server_info: hello.server_info.clone(),
        instructions: hello.instructions.clone(),
    })
}

/// Follow `nextCursor` (any non-null value, even `""`, is a cursor) for at most 100 pages,
/// within the budget's deadline and bytes.
pub async fn list_all(
    client: &McpClient,
    method: &str,
    key: &str,
    budget: &Budget,
) -> Result<Vec<Value>, DiscoveryError> {
    let mut out = Vec::new();
    let mut cursor: Option<Value> = None;
    for page in 0..MAX_PAGES {
        let params = cursor.as_ref().map(|c| json!({ "cursor": c }));
        let left = budget.left()?;
        let mut result = match client.request(method, params, left).await {
            Err(RpcError::Timeout(_)) => return Err(DiscoveryError::Timeout(budget.timeout)),
            r => r?,
        };
        check_complete(&result)?;
        match result.get_mut(key).map(Value::take) {
            Some(Value::Array(items)) => {
                budget.spend(&items)?;
                out.extend(items)
            }
            Some(Value::Null) | None => {}
            Some(_) => {
                return Err(RpcError::Invalid(format!("{method}: `{key}` is not a list")).into())
            }
        }
        cursor = match result.get_mut("nextCursor").map(Value::take) {
            None | Some(Value::Null) => return Ok(out),
            Some(c) => Some(c),
        };
        if page + 1 == MAX_PAGES {
            tracing::warn!(%method, "stopped following nextCursor after {MAX_PAGES} pages");
            budget.notes.borrow_mut().push(format!(
                "{method} was cut after {MAX_PAGES} pages (the server kept sending nextCursor); what they held is offered"
            ));
        }
    }
    Ok(out)
}

/// A modern result must be `complete`; `input_required` asks for a capability albedo does
/// not declare.
pub fn check_complete(result: &Value) -> Result<(), RpcError> {
    complete_or(result_type(result))
}

/// [`check_complete`] of a result kept as text, from its head.
pub fn check_complete_head(head: &crate::protocol::ResultHead) -> Result<(), RpcError> {
    complete_or(head.result_type())
}

fn complete_or(result_type: &str) -> Result<(), RpcError> {
    match result_type {
        "complete" => Ok(()),
        "input_required" => Err(RpcError::Invalid(
            "the server needs input from a client capability albedo does not declare \
             (resultType input_required)"
                .into(),
        )),
        other => Err(RpcError::Invalid(format!("unknown resultType {other:?}"))),
    }
}
