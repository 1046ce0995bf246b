//! The MCP data albedo keeps about a server: its capabilities and its catalogue of tools,
//! resources, resource templates and prompts, kept as the server sent them (schemas are not
//! rewritten: `$schema`, `$defs`, `additionalProperties` survive, and no `$ref` is followed).

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Everything discovery found on one server.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Catalogue {
    #[serde(default)]
    pub tools: Vec<Value>,
    #[serde(default)]
    pub resources: Vec<Value>,
    #[serde(default)]
    pub resource_templates: Vec<Value>,
    #[serde(default)]
    pub prompts: Vec<Value>,
    #[serde(default)]
    pub capabilities: Value,
    #[serde(default)]
    pub server_info: Option<Value>,
    #[serde(default)]
    pub instructions: Option<String>,
}

impl Catalogue {
    pub fn has_tools(&self) -> bool {
        self.capabilities.get("tools").is_some()
    }
    pub fn has_resources(&self) -> bool {
        self.capabilities.get("resources").is_some()
    }
    pub fn has_prompts(&self) -> bool {
        self.capabilities.get("prompts").is_some()
    }
    /// Whether the server says one of its lists can change.
    pub fn list_changed(&self, kind: &str) -> bool {
        self.capabilities
            .get(kind)
            .and_then(|c| c.get("listChanged"))
            .and_then(Value::as_bool)
            .unwrap_or(false)
    }
}

/// The name of a tool as the server sent it.
pub fn tool_name(tool: &Value) -> Option<&str> {
    tool.get("name").and_then(Value::as_str)
}

/// `resultType` of a modern result: absent means `complete`.
pub fn result_type(result: &Value) -> &str {
    result
        .get("resultType")
        .and_then(Value::as_str)
        .unwrap_or("complete")
}

/// The largest catalogue (its JSON text) a server may have: past it, discovery stops and the
/// catalogue is neither saved nor advertised.
pub const MAX_CATALOGUE_BYTES: usize = 8 * 1024 * 1024;
