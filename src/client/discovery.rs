//! Listing a server's catalogue: tools, resources, resource templates and prompts for the
//! capabilities it declared, following `nextCursor` for at most 100 pages per list, the lists
//! fetched concurrently.

use super::handshake::ServerHello;
use super::{McpClient, RpcError};
use crate::protocol::jsonrpc;
use crate::protocol::model::{result_type, Catalogue};
use serde_json::{json, Value};
use std::time::Duration;

/// The most pages one list is followed for.
pub const MAX_PAGES: usize = 100;

/// List everything the server's capabilities offer.
pub async fn discover(
    client: &McpClient,
    hello: &ServerHello,
    timeout: Duration,
) -> Result<Catalogue, RpcError> {
    let caps = &hello.capabilities;
    let want = |k: &str| caps.get(k).map(|v| !v.is_null()).unwrap_or(false);
    let tools = async {
        if want("tools") {
            list_all(client, "tools/list", "tools", timeout).await
        } else {
            Ok(Vec::new())
        }
    };
    let resources = async {
        if want("resources") {
            list_all(client, "resources/list", "resources", timeout).await
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
                timeout,
            )
            .await
            {
                Err(RpcError::Server(e)) if e.code == jsonrpc::METHOD_NOT_FOUND => Ok(Vec::new()),
                r => r,
            }
        } else {
            Ok(Vec::new())
        }
    };
    let prompts = async {
        if want("prompts") {
            list_all(client, "prompts/list", "prompts", timeout).await
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

/// Follow `nextCursor` (any non-null value, even `""`, is a cursor) for at most 100 pages.
pub async fn list_all(
    client: &McpClient,
    method: &str,
    key: &str,
    timeout: Duration,
) -> Result<Vec<Value>, RpcError> {
    let mut out = Vec::new();
    let mut cursor: Option<Value> = None;
    for page in 0..MAX_PAGES {
        let params = cursor.as_ref().map(|c| json!({ "cursor": c }));
        let mut result = client.request(method, params, timeout).await?;
        check_complete(&result)?;
        match result.get_mut(key).map(Value::take) {
            Some(Value::Array(items)) => out.extend(items),
            Some(Value::Null) | None => {}
            Some(_) => {
                return Err(RpcError::Invalid(format!(
                    "{method}: `{key}` is not a list"
                )))
            }
        }
        cursor = match result.get_mut("nextCursor").map(Value::take) {
            None | Some(Value::Null) => return Ok(out),
            Some(c) => Some(c),
        };
        if page + 1 == MAX_PAGES {
            tracing::warn!(%method, "stopped following nextCursor after {MAX_PAGES} pages");
        }
    }
    Ok(out)
}

/// A modern result must be `complete`; `input_required` asks for a capability albedo does
/// not declare.
pub fn check_complete(result: &Value) -> Result<(), RpcError> {
    match result_type(result) {
        "complete" => Ok(()),
        "input_required" => Err(RpcError::Invalid(
            "the server needs input from a client capability albedo does not declare \
             (resultType input_required)"
                .into(),
        )),
        other => Err(RpcError::Invalid(format!("unknown resultType {other:?}"))),
    }
}
