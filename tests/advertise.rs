//! The bounds `src/advertise.rs` puts on what a session advertises, each at and just past its
//! limit: the advertised tool name (64 bytes of `[A-Za-z0-9_-]`, else a short form), the description (4 KiB,
//! cut at a character boundary), the input schema (64 KiB serialized, or the tool is left
//! out), the resources, templates and prompts listed in `read_resource` / `get_prompt` (50
//! each, their names and URIs cut, the whole description at 16 KiB), and the `x-mcp-header`
//! rules (HTTP only).

use albedo_mcp::advertise::{
    advertise, bound_text, AdvertisedTool, ToolKind, MAX_DESCRIPTION_BYTES, MAX_LISTED,
    MAX_SCHEMA_BYTES,
};
use albedo_mcp::protocol::model::Catalogue;
use albedo_mcp::store::settings::{parse_mcp, ServerConfig};
use serde_json::{json, Value};

fn config(name: &str, extra: Value) -> ServerConfig {
    let mut def = json!({"type": "stdio", "command": "x"});
    if let (Some(d), Some(e)) = (def.as_object_mut(), extra.as_object()) {
        d.extend(e.clone());
    }
    parse_mcp(Some(&json!({"servers": { name: def }})))
        .unwrap()
        .servers
        .remove(0)
}

fn tools_catalogue(tools: Vec<Value>) -> Catalogue {
    Catalogue {
        tools,
        capabilities: json!({"tools": {}}),
        ..Default::default()
    }
}

fn run(cat: &Catalogue, http: bool) -> (Vec<AdvertisedTool>, Vec<String>) {
    let mut warnings = Vec::new();
    let out = advertise(&config("s", json!({})), cat, http, &mut warnings);
    (out, warnings)
}

fn names(tools: &[AdvertisedTool]) -> Vec<&str> {
    tools.iter().map(|t| t.name.as_str()).collect()
}

fn tool(name: &str) -> Value {
    json!({"name": name, "description": "d", "inputSchema": {"type": "object"}})
}

#[test]
fn limits_are_the_documented_ones() {
    assert_eq!(MAX_DESCRIPTION_BYTES, 4096);
    assert_eq!(MAX_SCHEMA_BYTES, 64 * 1024);
    assert_eq!(MAX_LISTED, 50);
}

#[test]
fn advertised_names_are_what_the_model_apis_accept_with_stable_short_forms() {
    // "mcp__s__" is 8 bytes: a 56-byte tool name makes 64, the model APIs' limit.
    let at = "a".repeat(56);
    let past = "b".repeat(57);
    let odd = ["dots.and-dashes_ok", "has space", "ünïcode", "slash/no"];
    let mut tools = vec![tool(&at), tool(&past)];
    tools.extend(odd.iter().map(|n| tool(n)));
    tools.push(json!({"description": "no name"}));
    let (out, warnings) = run(&tools_catalogue(tools.clone()), false);
    let n = names(&out);
    assert_eq!(n.len(), 6, "{n:?}");
    // At the limit: kept as it is.
    assert_eq!(n[0], format!("mcp__s__{at}"));
    // Past it, or with characters the APIs refuse: a readable prefix and a hash.
    for name in &n {
        assert!(name.len() <= 64, "{name}");
        assert!(
            name.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-'),
            "{name}"
        );
    }
    assert!(n[1].starts_with("mcp__s__bbbb"), "{}", n[1]);
    assert!(n[2].starts_with("mcp__s__dots_and-dashes_ok_"), "{}", n[2]);
    let mut unique = n.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(unique.len(), n.len(), "{n:?}");
    // Stable: the same catalogue gives the same names.
    let (again, _) = run(&tools_catalogue(tools), false);
    assert_eq!(names(&again), n);
    // The original names stay reachable as `server/tool`, and are listed with the tool.
    let table = albedo_mcp::advertise::ToolTable::new(1, out);
    for original in [
        past.as_str(),
        "dots.and-dashes_ok",
        "has space",
        "ünïcode",
        "slash/no",
    ] {
        let t = table
            .lookup(&format!("s/{original}"))
            .unwrap_or_else(|| panic!("s/{original}"));
        assert_eq!(
            t.kind,
            ToolKind::Tool {
                tool: original.into()
            }
        );
        let listed: Value = serde_json::from_str(t.json().get()).unwrap();
        assert_eq!(listed["server"], "s");
        assert_eq!(listed["tool"], original);
    }
    assert_eq!(warnings.len(), 1, "{warnings:#?}");
    assert!(
        warnings.iter().any(|w| w.contains("without a name")),
        "{warnings:#?}"
    );
}

#[test]
fn descriptions_are_cut_at_4_kib_on_a_character_boundary() {
    let exact = "e".repeat(MAX_DESCRIPTION_BYTES);
    let over = "o".repeat(MAX_DESCRIPTION_BYTES + 1);
    // Two-byte characters: byte 4093, where the cut would fall, is inside one.
    let wide = "é".repeat(MAX_DESCRIPTION_BYTES / 2 + 1);
    let mut titled = tool("titled");
    titled.as_object_mut().unwrap().remove("description");
    titled["title"] = json!("From the title");
    let mut bare = tool("bare");
    bare.as_object_mut().unwrap().remove("description");
    let mut tools = Vec::new();
    for (name, d) in [("exact", &exact), ("over", &over), ("wide", &wide)] {
        let mut t = tool(name);
        t["description"] = json!(d);
        tools.push(t);
    }
    tools.extend([titled, bare]);
    let (out, warnings) = run(&tools_catalogue(tools), false);
    assert!(warnings.is_empty(), "{warnings:#?}");
    let desc = |n: &str| {
        out.iter()
            .find(|t| t.name == format!("mcp__s__{n}"))
            .unwrap()
            .description
            .clone()
    };
    assert_eq!(desc("exact"), exact, "at the limit: unchanged");
    let cut = desc("over");
    assert_eq!(cut.len(), MAX_DESCRIPTION_BYTES);
    assert_eq!(cut, format!("{}...", "o".repeat(MAX_DESCRIPTION_BYTES - 3)));
    let cut = desc("wide");
    assert!(cut.len() <= MAX_DESCRIPTION_BYTES, "{}", cut.len());
    assert_eq!(
        cut,
        format!("{}...", "é".repeat((MAX_DESCRIPTION_BYTES - 4) / 2))
    );
    assert_eq!(desc("titled"), "From the title");
    assert_eq!(desc("bare"), "");
    // bound_text itself, at and past the limit.
    assert_eq!(bound_text("abcd", 4), "abcd");
    assert_eq!(bound_text("abcde", 4), "a...");
    assert_eq!(bound_text("ééé", 5), "é...");
}

/// An input schema whose JSON text is exactly `size` bytes.
fn schema_of_size(size: usize) -> Value {
    let base = serde_json::to_string(&json!({"type": "object", "description": ""}))
        .unwrap()
        .len();
    let s = json!({"type": "object", "description": "x".repeat(size - base)});
    assert_eq!(serde_json::to_string(&s).unwrap().len(), size);
    s
}

#[test]
fn a_schema_over_64_kib_leaves_its_tool_out_with_a_warning() {
    let mut at = tool("at");
    at["inputSchema"] = schema_of_size(MAX_SCHEMA_BYTES);
    let mut past = tool("past");
    past["inputSchema"] = schema_of_size(MAX_SCHEMA_BYTES + 1);
    let mut none = tool("none");
    none.as_object_mut().unwrap().remove("inputSchema");
    let (out, warnings) = run(&tools_catalogue(vec![at, past, none]), false);
    assert_eq!(names(&out), ["mcp__s__at", "mcp__s__none"]);
    assert_eq!(out[0].input_schema, schema_of_size(MAX_SCHEMA_BYTES));
    // A tool without a schema gets an empty object schema.
    assert_eq!(out[1].input_schema, json!({"type": "object"}));
    assert_eq!(warnings.len(), 1, "{warnings:#?}");
    assert!(
        warnings[0].contains("\"past\"") && warnings[0].contains("65537 bytes"),
        "{warnings:#?}"
    );
}

fn resources(n: usize) -> Vec<Value> {
    (0..n)
        .map(|i| json!({"uri": format!("file:///r{i:03}"), "name": format!("res{i:03}")}))
        .collect()
}

fn templates(n: usize) -> Vec<Value> {
    (0..n)
        .map(|i| json!({"uriTemplate": format!("file:///t{i:03}/{{x}}"), "name": "t"}))
        .collect()
}

fn prompts(n: usize) -> Vec<Value> {
    (0..n)
        .map(|i| json!({"name": format!("pr{i:03}"), "arguments": [{"name": "a", "required": true}, {"name": "b"}]}))
        .collect()
}

fn described<'a>(out: &'a [AdvertisedTool], name: &str) -> &'a str {
    &out.iter()
        .find(|t| t.name == name)
        .unwrap_or_else(|| panic!("no {name}"))
        .description
}

#[test]
fn read_resource_and_get_prompt_list_at_most_50_of_each() {
    for (n, listed) in [(MAX_LISTED, MAX_LISTED), (MAX_LISTED + 1, MAX_LISTED)] {
        let cat = Catalogue {
            resources: resources(n),
            resource_templates: templates(n),
            prompts: prompts(n),
            capabilities: json!({"resources": {}, "prompts": {}}),
            ..Default::default()
        };
        let (out, warnings) = run(&cat, false);
        assert!(warnings.is_empty(), "{warnings:#?}");
        assert_eq!(names(&out), ["mcp__s__read_resource", "mcp__s__get_prompt"]);
        let rr = described(&out, "mcp__s__read_resource");
        assert_eq!(rr.matches("\n- file:///r").count(), listed, "{n}: {rr}");
        assert_eq!(rr.matches("\n- template ").count(), listed, "{n}: {rr}");
        assert!(rr.contains("- file:///r049 (res049)"), "{rr}");
        assert!(!rr.contains("r050"), "{n}: the 51st resource is listed");
        assert!(!rr.contains("t050"), "{n}: the 51st template is listed");
        let gp = described(&out, "mcp__s__get_prompt");
        assert_eq!(gp.matches("\n- pr").count(), listed, "{n}: {gp}");
        assert!(gp.contains("- pr049(a (required), b)"), "{gp}");
        assert!(!gp.contains("pr050"), "{n}: the 51st prompt is listed");
    }
}

#[test]
fn listed_names_and_uris_are_cut_and_the_whole_description_is_bounded() {
    let long_uri = format!("file:///{}", "u".repeat(1000));
    let long_name = "n".repeat(1000);
    let cat = Catalogue {
        resources: (0..MAX_LISTED)
            .map(|_| json!({"uri": long_uri, "name": long_name}))
            .collect(),
        prompts: vec![json!({"name": "p".repeat(1000)})],
        capabilities: json!({"resources": {}, "prompts": {}}),
        ..Default::default()
    };
    let (out, _) = run(&cat, false);
    let rr = described(&out, "mcp__s__read_resource");
    // Each line: the URI cut at 256 bytes, the name at 128.
    let first = rr.lines().find(|l| l.starts_with("- file:///")).unwrap();
    assert_eq!(
        first,
        format!(
            "- {} ({})",
            bound_text(&long_uri, 256),
            bound_text(&long_name, 128)
        )
    );
    assert_eq!(bound_text(&long_uri, 256).len(), 256);
    // 50 lines of about 390 bytes: the description is cut at 16 KiB.
    assert_eq!(rr.len(), MAX_DESCRIPTION_BYTES * 4, "{}", rr.len());
    assert!(rr.ends_with("..."));
    let gp = described(&out, "mcp__s__get_prompt");
    assert!(
        gp.ends_with(&format!("- {}()", bound_text(&"p".repeat(1000), 128))),
        "{gp}"
    );
}

#[test]
fn resources_and_prompts_tools_follow_the_capabilities() {
    // Declared but empty: the tools are there, with no list.
    let cat = Catalogue {
        capabilities: json!({"resources": {}, "prompts": {}}),
        ..Default::default()
    };
    let (out, _) = run(&cat, false);
    assert_eq!(names(&out), ["mcp__s__read_resource", "mcp__s__get_prompt"]);
    assert!(!described(&out, "mcp__s__read_resource").contains("Known"));
    // Neither declared nor listed: no such tools.
    let (out, _) = run(&tools_catalogue(vec![tool("t")]), false);
    assert_eq!(names(&out), ["mcp__s__t"]);
}

#[test]
fn enabled_and_disabled_tools_filter_without_warnings() {
    let cat = tools_catalogue(vec![tool("a"), tool("b"), tool("c")]);
    let mut warnings = Vec::new();
    let only = config(
        "s",
        json!({"enabledTools": ["a", "b"], "disabledTools": ["b"]}),
    );
    let out = advertise(&only, &cat, false, &mut warnings);
    assert_eq!(names(&out), ["mcp__s__a"]);
    assert!(warnings.is_empty(), "{warnings:#?}");
}

#[test]
fn x_mcp_header_rules_apply_over_http_only() {
    let annotated = |name: &str, schema: Value| json!({"name": name, "inputSchema": schema});
    let cat = tools_catalogue(vec![
        annotated(
            "good",
            json!({"type": "object", "properties": {"r": {"type": "string", "x-mcp-header": "Region"}}}),
        ),
        annotated(
            "dup",
            json!({"type": "object", "properties": {
                "a": {"type": "string", "x-mcp-header": "Region"},
                "b": {"type": "string", "x-mcp-header": "region"}}}),
        ),
        annotated(
            "nested",
            json!({"type": "object", "properties": {
                "l": {"type": "array", "items": {"type": "string", "x-mcp-header": "Item"}}}}),
        ),
        annotated(
            "objecttyped",
            json!({"type": "object", "properties": {
                "o": {"type": "object", "x-mcp-header": "Obj"}}}),
        ),
        annotated(
            "badtoken",
            json!({"type": "object", "properties": {
                "s": {"type": "string", "x-mcp-header": "Has Space"}}}),
        ),
    ]);
    let (out, warnings) = run(&cat, true);
    assert_eq!(names(&out), ["mcp__s__good"]);
    assert_eq!(warnings.len(), 4, "{warnings:#?}");
    for t in ["dup", "nested", "objecttyped", "badtoken"] {
        assert!(
            warnings
                .iter()
                .any(|w| w.contains(&format!("\"{t}\"")) && w.contains("x-mcp-header")),
            "{t}: {warnings:#?}"
        );
    }
    let (out, warnings) = run(&cat, false);
    assert_eq!(out.len(), 5, "stdio has no headers");
    assert!(warnings.is_empty(), "{warnings:#?}");
}
