//! Tool names from an untrusted server: duplicates in one server's list are dropped with a
//! warning, and a server tool named `read_resource` or `get_prompt` never collides with the
//! built-in operations of the same name.

use albedo_mcp::advertise::{advertise, ToolKind, ToolTable};
use albedo_mcp::protocol::model::Catalogue;
use albedo_mcp::store::settings::parse_mcp;
use serde_json::{json, Value};

fn config() -> albedo_mcp::store::settings::ServerConfig {
    let section = json!({"servers": {"s": {"type": "stdio", "command": "x"}}});
    parse_mcp(Some(&section)).unwrap().servers.remove(0)
}

fn catalogue(tools: Vec<Value>, caps: Value) -> Catalogue {
    Catalogue {
        tools,
        resources: vec![json!({"uri": "file:///a", "name": "a"})],
        resource_templates: vec![],
        prompts: vec![json!({"name": "p"})],
        capabilities: caps,
        server_info: None,
        instructions: None,
    }
}

fn tool(name: &str, desc: &str) -> Value {
    json!({"name": name, "description": desc, "inputSchema": {"type": "object"}})
}

#[test]
fn a_second_tool_of_the_same_name_is_dropped_with_a_warning() {
    let cat = catalogue(
        vec![tool("a", "first"), tool("a", "second"), tool("b", "")],
        json!({"tools": {}}),
    );
    let mut w = Vec::new();
    let out = advertise(&config(), &cat, false, &mut w);
    let a: Vec<_> = out.iter().filter(|t| t.name == "mcp__s__a").collect();
    assert_eq!(a.len(), 1);
    assert_eq!(a[0].description, "first");
    assert!(
        w.iter().any(|w| w.contains("second tool named \"a\"")),
        "{w:?}"
    );
}

#[test]
fn server_tools_named_like_the_built_ins_stay_distinct() {
    let cat = catalogue(
        vec![
            tool("read_resource", "mine"),
            tool("get_prompt", "mine too"),
        ],
        json!({"tools": {}, "resources": {}, "prompts": {}}),
    );
    let mut w = Vec::new();
    let out = advertise(&config(), &cat, false, &mut w);
    let names: Vec<&str> = out.iter().map(|t| t.name.as_str()).collect();
    let mut unique = names.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(unique.len(), names.len(), "{names:?}");
    let table = ToolTable::new(1, out);
    assert_eq!(
        table.lookup("mcp__s__read_resource").unwrap().kind,
        ToolKind::ReadResource
    );
    assert_eq!(
        table.lookup("mcp__s__get_prompt").unwrap().kind,
        ToolKind::GetPrompt
    );
    assert_eq!(
        table.lookup("mcp__s__read_resource_tool").unwrap().kind,
        ToolKind::Tool {
            tool: "read_resource".into()
        }
    );
    assert_eq!(
        table.lookup("mcp__s__get_prompt_tool").unwrap().kind,
        ToolKind::Tool {
            tool: "get_prompt".into()
        }
    );
    assert_eq!(w.len(), 2, "{w:?}");
    // Without resources or prompts there is no built-in: the tool keeps its own name.
    let cat = Catalogue {
        resources: vec![],
        prompts: vec![],
        ..catalogue(vec![tool("read_resource", "mine")], json!({"tools": {}}))
    };
    let out = advertise(&config(), &cat, false, &mut Vec::new());
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].name, "mcp__s__read_resource");
    assert!(matches!(out[0].kind, ToolKind::Tool { .. }));
}
