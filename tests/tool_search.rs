//! Deferred tool loading and `mcp__search` against real servers (server-everything,
//! server-filesystem, the Python `mcp` server) and a fixture with 500 tools
//! (`tests/fixtures/many_tools.py`): the budget's threshold, `never` and `always`, search
//! results with their schemas, calls to deferred tools, the appended order, lazy servers (no
//! process until the first call, then one), the session's override, `status.deferred`, and
//! the query set's ranking (`benches/tool-search-queries.json`).

mod common;

use albedo_mcp::advertise::{advertise, AdvertisedTool};
use albedo_mcp::protocol::model::Catalogue;
use albedo_mcp::store::settings::parse_mcp;
use albedo_mcp::toolsearch::SearchIndex;
use common::*;
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::Duration;

fn ev() -> Value {
    json!({"type": "stdio", "command": "node", "args": [everything_js()]})
}

fn fs(dir: &std::path::Path) -> Value {
    json!({"type": "stdio", "command": "node", "args": [filesystem_js(), dir.to_str().unwrap()]})
}

fn py() -> Value {
    json!({"type": "stdio", "command": venv_python(), "args": [server_script("py_mcp_server.py")]})
}

fn many() -> Value {
    fixture_server("many_tools.py", &["--tools", "500"])
}

fn with(mut def: Value, extra: Value) -> Value {
    if let (Some(d), Some(e)) = (def.as_object_mut(), extra.as_object()) {
        d.extend(e.clone());
    }
    def
}

fn ext(servers: Value, budget: Option<u64>) -> Value {
    let mut mcp = json!({ "servers": servers });
    if let Some(b) = budget {
        mcp["toolSearch"] = json!({ "budgetTokens": b });
    }
    json!({"enabled": {"mcp": true}, "mcp": mcp})
}

fn patch(d: &Daemon, body: Value) -> (u16, Value) {
    match d
        .request("PATCH", "/settings/mcp")
        .timeout(Duration::from_secs(120))
        .send_json(body)
    {
        Ok(r) => (r.status(), r.into_json().unwrap_or(Value::Null)),
        Err(ureq::Error::Status(st, r)) => (st, r.into_json().unwrap_or(Value::Null)),
        Err(e) => panic!("PATCH /settings/mcp: {e}"),
    }
}

/// Every tool of the session (`?all=true`): name → deferred.
fn all_tools(d: &Daemon, id: &str) -> Vec<(String, bool)> {
    let (st, v) = d.get(&format!("/sessions/{id}/tools?all=true"));
    assert_eq!(st, 200, "{v}");
    v["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            (
                t["name"].as_str().unwrap().to_owned(),
                t["deferred"] == true,
            )
        })
        .collect()
}

fn search(d: &Daemon, id: &str, args: Value) -> Value {
    let (st, v) = d.call(id, "mcp__search", args);
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["outcome"], "ok", "{v}");
    v
}

fn found(v: &Value) -> Vec<String> {
    v["structuredContent"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_owned())
        .collect()
}

/// The server processes (not their launchers) under the daemon whose command line mentions
/// `needle`.
fn servers_running(d: &Daemon, needle: &str) -> usize {
    descendants(d.pid() as i32)
        .into_iter()
        .map(cmdline)
        .filter(|c| c.iter().any(|a| a.contains(needle)))
        .filter(|c| c.get(1).map(String::as_str) != Some("launch"))
        .count()
}

fn server_state(d: &Daemon, id: &str, server: &str) -> String {
    let (_, v) = d.get(&format!("/sessions/{id}"));
    v["servers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == server)
        .map(|s| s["state"].as_str().unwrap_or("").to_owned())
        .unwrap_or_default()
}

#[test]
fn the_budget_decides_at_its_threshold_and_never_and_always_are_kept() {
    let dir = tempfile::tempdir().unwrap();
    let servers = json!({"ev": ev(), "fs": fs(dir.path()), "py": py()});
    let d = Daemon::start(ext(servers.clone(), Some(10_000_000)));
    let (id, view) = d.session(json!({}));
    assert_eq!(view["deferred"], 0, "{view}");
    let names = d.tool_names(&id);
    assert!(!names.contains(&"mcp__search".to_owned()), "{names:?}");
    assert!(names.contains(&"mcp__ev__get-sum".to_owned()), "{names:?}");
    // The estimate: each tool's JSON as listed, / 4, rounded up.
    let (_, v) = d.get(&format!("/sessions/{id}/tools"));
    let total: u64 = v["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| (serde_json::to_vec(t).unwrap().len() as u64).div_ceil(4))
        .sum();
    assert!(total > 1000, "{total}");
    // At the budget: nothing deferred; one token under it: every `auto` tool deferred.
    let (st, v) = patch(&d, json!({"toolSearch": {"budgetTokens": total}}));
    assert_eq!(st, 200, "{v}");
    let (id, view) = d.session(json!({}));
    assert_eq!(view["deferred"], 0, "{view}");
    assert_eq!(d.tool_names(&id).len(), names.len());
    let (st, v) = patch(&d, json!({"toolSearch": {"budgetTokens": total - 1}}));
    assert_eq!(st, 200, "{v}");
    let (id, view) = d.session(json!({}));
    assert_eq!(d.tool_names(&id), ["mcp__search"], "{view}");
    assert_eq!(view["deferred"], names.len(), "{view}");
    let all = all_tools(&d, &id);
    assert_eq!(all.len(), names.len(), "?all=true leaves mcp__search out");
    assert!(all.iter().all(|(_, deferred)| *deferred));
    // The context says where the tools went.
    assert!(
        view["context"].to_string().contains("mcp__search"),
        "{view}"
    );
    // `never` stays loaded whatever the budget (and counts toward it); `always` is deferred
    // whatever the budget.
    let (st, v) = patch(
        &d,
        json!({"servers": {"fs": {"deferTools": "never"}, "py": {"deferTools": "always"}},
               "toolSearch": {"budgetTokens": 10_000_000}}),
    );
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["servers"]["fs"]["deferTools"], "never", "{v}");
    assert_eq!(v["servers"]["ev"]["deferTools"], "auto", "{v}");
    assert_eq!(v["servers"]["py"]["status"]["deferred"], 5, "{v}");
    assert_eq!(v["servers"]["ev"]["status"]["deferred"], 0, "{v}");
    assert_eq!(v["toolSearch"]["budgetTokens"], 10_000_000, "{v}");
    let (id, _) = d.session(json!({}));
    let names = d.tool_names(&id);
    assert!(
        names.iter().any(|n| n.starts_with("mcp__fs__")),
        "{names:?}"
    );
    assert!(
        names.iter().any(|n| n.starts_with("mcp__ev__")),
        "{names:?}"
    );
    assert!(
        !names.iter().any(|n| n.starts_with("mcp__py__")),
        "{names:?}"
    );
    assert_eq!(names.last().map(String::as_str), Some("mcp__search"));
    let (st, v) = patch(&d, json!({"toolSearch": {"budgetTokens": 10}}));
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["servers"]["fs"]["status"]["deferred"], 0, "{v}");
    assert!(
        v["servers"]["ev"]["status"]["deferred"].as_u64().unwrap() > 0,
        "{v}"
    );
    let (id, _) = d.session(json!({}));
    let names = d.tool_names(&id);
    assert!(
        names.iter().any(|n| n.starts_with("mcp__fs__")),
        "{names:?}"
    );
    assert!(
        !names.iter().any(|n| n.starts_with("mcp__ev__")),
        "{names:?}"
    );
    // Bad values are refused naming the field.
    let (st, v) = patch(&d, json!({"servers": {"fs": {"deferTools": "sometimes"}}}));
    assert_eq!(st, 400, "{v}");
    assert!(v.to_string().contains("servers.fs.deferTools"), "{v}");
    let (st, v) = patch(&d, json!({"toolSearch": {"budgetTokens": 0}}));
    assert_eq!(st, 400, "{v}");
    assert!(v.to_string().contains("toolSearch.budgetTokens"), "{v}");
}

#[test]
fn search_answers_schemas_loads_by_appending_and_deferred_tools_answer_calls() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("note.txt"), "hello from the file").unwrap();
    let servers = json!({
        "ev": ev(),
        "fs": with(fs(dir.path()), json!({"deferTools": "never"})),
        "py": py(),
        "many": many(),
    });
    let d = Daemon::start(ext(servers, None));
    let (id, view) = d.session(json!({}));
    let open = d.tool_names(&id);
    assert_eq!(
        open.last().map(String::as_str),
        Some("mcp__search"),
        "{open:?}"
    );
    assert!(open[..open.len() - 1]
        .iter()
        .all(|n| n.starts_with("mcp__fs__")));
    assert!(view["deferred"].as_u64().unwrap() > 500, "{view}");
    // The search tool names the servers it covers with their counts.
    let (_, t) = d.get(&format!("/sessions/{id}/tools/mcp__search"));
    let desc = t["description"].as_str().unwrap();
    assert!(desc.contains("many (500)"), "{desc}");
    assert!(
        desc.contains("py (7)"),
        "its 5 tools, read_resource and get_prompt: {desc}"
    );
    assert!(!desc.contains("fs ("), "{desc}");
    assert_eq!(t["inputSchema"]["required"], json!(["query"]), "{t}");

    // Words: the best match first, with its schema; a few more by name.
    let r = search(&d, &id, json!({"query": "add two integers"}));
    let hits = found(&r);
    assert_eq!(hits[0], "mcp__py__add", "{r}");
    let add = &r["structuredContent"]["tools"][0];
    assert_eq!(add["server"], "py");
    assert!(add["inputSchema"]["properties"]["a"].is_object(), "{add}");
    assert!(
        add["description"].as_str().unwrap().contains("Add"),
        "{add}"
    );
    let text = r["content"][0]["text"].as_str().unwrap();
    assert!(
        text.contains("mcp__py__add") && text.contains("inputSchema"),
        "{text}"
    );
    assert!(r["structuredContent"]["more"].is_array(), "{r}");
    // Matched tools are loaded, appended after what the session opened with.
    let after = d.tool_names(&id);
    assert_eq!(
        after[..open.len()],
        open[..],
        "the loaded prefix never changes"
    );
    for h in &hits {
        assert!(
            after[open.len()..].contains(h),
            "{h} was not loaded: {after:?}"
        );
    }
    // An exact name wins: the advertised name, and the server's own among 500 look-alikes.
    let mut expected = after.clone();
    let mut expect_loaded = |hits: &[String]| {
        for h in hits {
            if !expected.contains(h) {
                expected.push(h.clone());
            }
        }
    };
    let r = search(&d, &id, json!({"query": "mcp__ev__get-env", "limit": 1}));
    assert_eq!(found(&r), ["mcp__ev__get-env"], "{r}");
    expect_loaded(&found(&r));
    let r = search(
        &d,
        &id,
        json!({"query": "tool_0321_list_recipe", "limit": 2}),
    );
    assert_eq!(found(&r)[0], "mcp__many__tool_0321_list_recipe", "{r}");
    expect_loaded(&found(&r));
    let r = search(
        &d,
        &id,
        json!({"query": "archive a shipment", "server": "many", "limit": 20}),
    );
    let hits = found(&r);
    assert_eq!(hits.len(), 20, "{r}");
    assert!(
        hits.iter().all(|h| h.starts_with("mcp__many__")),
        "{hits:?}"
    );
    assert!(hits[0].ends_with("_archive_shipment"), "{hits:?}");
    expect_loaded(&hits);
    let later = d.tool_names(&id);
    assert_eq!(later, expected, "appended in load order, never reordered");
    // Nothing found is an answer, not an error.
    let r = search(&d, &id, json!({"query": "zzzqqq"}));
    assert!(found(&r).is_empty(), "{r}");
    // Bad arguments name the argument.
    for (args, field) in [
        (json!({"query": "x", "limit": 0}), "limit"),
        (json!({}), "query"),
        (json!({"query": "x", "colour": 1}), "colour"),
    ] {
        let (st, v) = d.call(&id, "mcp__search", args);
        assert_eq!(st, 400, "{v}");
        assert!(
            v["error"]["message"].as_str().unwrap().contains(field),
            "{v}"
        );
    }

    // A deferred tool answers by its full name without a search, and is loaded by the call.
    let (_, t) = d.get(&format!("/sessions/{id}/tools/mcp__ev__echo"));
    assert_eq!(t["deferred"], true, "{t}");
    let (st, v) = d.call(
        &id,
        "mcp__ev__echo",
        json!({"message": "deferred but here"}),
    );
    assert_eq!(st, 200, "{v}");
    assert!(v.to_string().contains("deferred but here"), "{v}");
    let names = d.tool_names(&id);
    assert_eq!(names.last().map(String::as_str), Some("mcp__ev__echo"));
    assert_eq!(names[..later.len()], later[..]);
    let (_, t) = d.get(&format!("/sessions/{id}/tools/mcp__ev__echo"));
    assert!(t.get("deferred").is_none(), "{t}");
    // `server/tool` reaches a deferred tool too.
    let (st, v) = d.call(&id, "many%2Ftool_0007_export_invoice", json!({"note": "n"}));
    assert_eq!(st, 200, "{v}");
    assert_eq!(
        d.tool_names(&id).last().map(String::as_str),
        Some("mcp__many__tool_0007_export_invoice")
    );
    // The loaded tools and the loaded list in the session's view.
    let (_, view) = d.get(&format!("/sessions/{id}"));
    assert_eq!(
        view["loaded"].as_array().unwrap().last().unwrap(),
        "mcp__many__tool_0007_export_invoice",
        "{view}"
    );
    // A loaded tool stays loaded after the session's turn ends, in its place.
    let before = d.tool_names(&id);
    let (_, a) = d.post(
        &format!("/sessions/{id}/activity"),
        json!({"kind": "turn_end"}),
    );
    assert!(a.is_object());
    assert_eq!(d.tool_names(&id), before);
    // ?all=true: every tool once, the deferred ones flagged, no mcp__search.
    let all = all_tools(&d, &id);
    assert!(all.iter().all(|(n, _)| n != "mcp__search"));
    assert!(all.contains(&("mcp__ev__echo".to_owned(), false)));
    assert!(all.contains(&("mcp__ev__get-tiny-image".to_owned(), true)));
    let n_all = all.len();
    let mut uniq: Vec<_> = all.iter().map(|(n, _)| n.clone()).collect();
    uniq.sort();
    uniq.dedup();
    assert_eq!(uniq.len(), n_all);
    // A file read through a loaded (never) server, for good measure.
    let (st, v) = d.call(
        &id,
        "mcp__fs__read_text_file",
        json!({"path": dir.path().join("note.txt")}),
    );
    assert_eq!(st, 200, "{v}");
    assert!(v.to_string().contains("hello from the file"), "{v}");
}

#[test]
fn a_lazy_server_starts_no_process_until_its_first_call_then_one() {
    let servers = json!({
        "py": with(py(), json!({"deferTools": "always"})),
        "eager": with(fixture_server("many_tools.py", &["--tools", "3"]), json!({"deferTools": "never"})),
    });
    let d = Daemon::start(ext(servers, None));
    // The first session discovers both and saves their catalogues.
    let (first, _) = d.session(json!({}));
    assert_eq!(servers_running(&d, "py_mcp_server.py"), 1);
    assert_eq!(d.delete(&format!("/sessions/{first}")), 204);
    assert!(wait_until(Duration::from_secs(20), || {
        servers_running(&d, "py_mcp_server.py") == 0 && servers_running(&d, "many_tools.py") == 0
    }));
    // The next session: the eager server is dialled at open (in the background), the lazy
    // one is not.
    let (id, view) = d.session(json!({}));
    let py_view = view["servers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == "py")
        .unwrap()
        .clone();
    assert_eq!(py_view["state"], "lazy", "{view}");
    // Its tools and its built-in read_resource and get_prompt.
    assert_eq!(py_view["deferred"], 7, "{view}");
    assert_eq!(py_view["tools"], 7, "{view}");
    assert!(wait_until(Duration::from_secs(20), || servers_running(
        &d,
        "many_tools.py"
    ) == 1));
    assert!(wait_until(Duration::from_secs(20), || server_state(
        &d, &id, "eager"
    ) == "connected"));
    assert_eq!(
        servers_running(&d, "py_mcp_server.py"),
        0,
        "dialled at open"
    );
    let (_, s) = d.get("/settings/mcp");
    assert_eq!(s["servers"]["py"]["status"]["deferred"], 5, "{s}");
    assert_eq!(
        s["servers"]["py"]["status"]["state"], "not_connected",
        "{s}"
    );
    // Its first call dials it, and waits for the dial.
    let (st, v) = d.call(&id, "mcp__py__echo", json!({"message": "woken"}));
    assert_eq!(st, 200, "{v}");
    assert!(v.to_string().contains("woken"), "{v}");
    assert_eq!(servers_running(&d, "py_mcp_server.py"), 1);
    // The saved catalogue is checked on that same connection: still one process.
    assert!(wait_until(Duration::from_secs(20), || server_state(
        &d, &id, "py"
    ) == "connected"));
    let (st, v) = d.call(&id, "mcp__py__add", json!({"a": 2, "b": 3}));
    assert_eq!(st, 200, "{v}");
    assert_eq!(servers_running(&d, "py_mcp_server.py"), 1);
    // Called tools stay loaded, after the search tool.
    let names = d.tool_names(&id);
    assert_eq!(
        names[names.len() - 3..],
        ["mcp__search", "mcp__py__echo", "mcp__py__add"],
        "{names:?}"
    );
    // Turning deferral off for a session with a lazy server dials it at once, in the
    // background, as at open.
    let (id2, _) = d.session(json!({}));
    assert_eq!(server_state(&d, &id2, "py"), "lazy");
    let (st, v) = d.put(
        &format!("/sessions/{id2}/defer-tools"),
        json!({"defer_tools": "never"}),
    );
    assert_eq!(st, 200, "{v}");
    assert!(wait_until(Duration::from_secs(20), || servers_running(
        &d,
        "py_mcp_server.py"
    ) == 2));
}

#[test]
fn a_session_overrides_the_policy_at_open_and_later() {
    let servers = json!({"ev": ev(), "py": py()});
    let d = Daemon::start(ext(servers, None));
    let (id, view) = d.session(json!({}));
    let every = d.tool_names(&id);
    assert_eq!(view["defer_tools"], Value::Null);
    assert!(!every.contains(&"mcp__search".to_owned()), "{every:?}");
    // A tool the session called stays loaded, in its place, when the session defers
    // everything later.
    let (st, v) = d.call(&id, "mcp__py__add", json!({"a": 1, "b": 2}));
    assert_eq!(st, 200, "{v}");
    let (st, v) = d.put(
        &format!("/sessions/{id}/defer-tools"),
        json!({"defer_tools": "always"}),
    );
    assert_eq!(st, 200, "{v}");
    assert_eq!(d.tool_names(&id), ["mcp__py__add", "mcp__search"]);
    let r = search(&d, &id, json!({"query": "mcp__py__echo", "limit": 1}));
    assert_eq!(found(&r), ["mcp__py__echo"]);
    assert_eq!(
        d.tool_names(&id),
        ["mcp__py__add", "mcp__search", "mcp__py__echo"]
    );
    // `always` for the session: everything behind the search tool.
    let (id, view) = d.session(json!({"defer_tools": "always"}));
    assert_eq!(view["defer_tools"], "always", "{view}");
    assert_eq!(d.tool_names(&id), ["mcp__search"]);
    let r = search(&d, &id, json!({"query": "echo"}));
    let hits = found(&r);
    assert!(hits.contains(&"mcp__py__echo".to_owned()), "{hits:?}");
    assert!(hits.contains(&"mcp__ev__echo".to_owned()), "{hits:?}");
    // `never`: everything loaded; the tools loaded before keep their place at the end.
    let (st, v) = d.put(
        &format!("/sessions/{id}/defer-tools"),
        json!({"defer_tools": "never"}),
    );
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["defer_tools"], "never");
    let names = d.tool_names(&id);
    assert!(!names.contains(&"mcp__search".to_owned()), "{names:?}");
    let mut a = names.clone();
    a.sort();
    let mut b = every.clone();
    b.sort();
    assert_eq!(a, b);
    // Back to each server's setting (auto, under the budget): nothing deferred.
    let (st, v) = d.put(
        &format!("/sessions/{id}/defer-tools"),
        json!({"defer_tools": null}),
    );
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["defer_tools"], Value::Null);
    assert_eq!(v["deferred"], 0);
    // Bad values name the field.
    let (st, v) = d.post("/sessions", json!({"defer_tools": "sometimes"}));
    assert_eq!(st, 400, "{v}");
    assert!(v.to_string().contains("defer_tools"), "{v}");
    let (st, v) = d.put(
        &format!("/sessions/{id}/defer-tools"),
        json!({"defer_tools": 3}),
    );
    assert_eq!(st, 400, "{v}");
    assert!(v.to_string().contains("defer_tools"), "{v}");
    // Without anything deferred, there is no search tool to call.
    let (st, v) = d.call(&id, "mcp__search", json!({"query": "echo"}));
    assert_eq!(st, 404, "{v}");
}

/// One catalogue fixture of `benches/catalogues/`, advertised.
fn fixture_catalogue(name: &str) -> (String, Vec<Value>) {
    let v: Value = serde_json::from_slice(
        &std::fs::read(repo().join("benches/catalogues").join(name)).unwrap(),
    )
    .unwrap();
    (
        v["server"].as_str().unwrap().to_owned(),
        v["tools"].as_array().unwrap().clone(),
    )
}

fn advertised(server: &str, tools: Vec<Value>) -> Vec<Arc<AdvertisedTool>> {
    let cfg = parse_mcp(Some(
        &json!({"servers": {server: {"type": "stdio", "command": "x"}}}),
    ))
    .unwrap()
    .servers
    .remove(0);
    let cat = Catalogue {
        tools,
        capabilities: json!({"tools": {}}),
        ..Default::default()
    };
    advertise(&cfg, &cat, false, &mut Vec::new())
        .into_iter()
        .map(Arc::new)
        .collect()
}

/// The query set's catalogues of real servers are what those servers list today, and the
/// ranking finds at least 90 % of the intended tools in the top 5 (the bench reports it).
#[test]
fn the_query_set_matches_the_real_servers_and_ranks_its_tools() {
    let dir = tempfile::tempdir().unwrap();
    let d = Daemon::start(ext(
        json!({"everything": ev(), "filesystem": fs(dir.path()), "python": py()}),
        None,
    ));
    let (id, _) = d.session(json!({}));
    let live = d.tool_names(&id);
    for f in ["everything.json", "filesystem.json", "python.json"] {
        let (server, tools) = fixture_catalogue(f);
        for t in advertised(&server, tools) {
            assert!(
                live.contains(&t.name),
                "{} is not listed live: {live:?}",
                t.name
            );
        }
    }
    let q: Value = serde_json::from_slice(
        &std::fs::read(repo().join("benches/tool-search-queries.json")).unwrap(),
    )
    .unwrap();
    let mut tools = Vec::new();
    for c in q["catalogues"].as_array().unwrap() {
        let (server, list) = fixture_catalogue(c.as_str().unwrap());
        tools.extend(advertised(&server, list));
    }
    let index = SearchIndex::build(tools.clone());
    let queries = q["queries"].as_array().unwrap();
    assert!(queries.len() >= 50);
    let mut misses = Vec::new();
    for x in queries {
        let want = x["expect"].as_str().unwrap();
        assert!(
            tools.iter().any(|t| t.name == want),
            "{want} is in no catalogue"
        );
        let hits = index.search(x["query"].as_str().unwrap(), None, 5);
        if !hits.iter().any(|h| h.tool.name == want) {
            misses.push((x["query"].clone(), want));
        }
    }
    let share = 1.0 - misses.len() as f64 / queries.len() as f64;
    assert!(share >= 0.9, "{share}: {misses:?}");
}
