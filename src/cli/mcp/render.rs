//! Printing the daemon's answers for people: the server table, one server, tools, a tool's
//! result, a trial's report. `--json` prints the answers themselves instead.
//!
//! Owns: that text. Must not touch: the daemon, the settings files.

use super::test_passed;
use serde_json::Value;

/// A word as a shell would need it: unchanged when plain, else in single quotes.
pub(crate) fn shell_word(w: &str) -> String {
    let plain = !w.is_empty()
        && w.bytes().all(|b| {
            b.is_ascii_alphanumeric()
                || matches!(
                    b,
                    b'-' | b'_' | b'.' | b'/' | b'@' | b':' | b'=' | b',' | b'+' | b'%'
                )
        });
    if plain {
        w.to_owned()
    } else {
        format!("'{}'", w.replace('\'', "'\\''"))
    }
}

/// What a server runs or reaches: its URL, or its command line.
pub(crate) fn target(s: &Value) -> String {
    if let Some(u) = s["url"].as_str() {
        return u.to_owned();
    }
    let mut words: Vec<String> = s["command"].as_str().map(shell_word).into_iter().collect();
    for a in s["args"].as_array().into_iter().flatten() {
        words.push(shell_word(a.as_str().unwrap_or("")));
    }
    words.join(" ")
}

/// Columns padded to their widest cell (the last column not padded).
pub(super) fn table(rows: &[Vec<String>]) -> String {
    let cols = rows.iter().map(Vec::len).max().unwrap_or(0);
    let mut widths = vec![0; cols];
    for r in rows {
        for (i, c) in r.iter().enumerate() {
            widths[i] = widths[i].max(c.chars().count());
        }
    }
    let mut out = String::new();
    for r in rows {
        let mut line = String::new();
        for (i, c) in r.iter().enumerate() {
            line.push_str(c);
            if i + 1 < r.len() {
                let pad = widths[i] - c.chars().count() + 2;
                line.extend(std::iter::repeat_n(' ', pad));
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// `mcp list`: the problems, then a table of the servers.
pub fn render_list(v: &Value) -> String {
    let mut out = String::new();
    for p in v["problems"].as_array().into_iter().flatten() {
        out.push_str(&format!("problem: {}\n", p.as_str().unwrap_or("")));
    }
    if v["changed_on_disk"] == true {
        out.push_str(
            "note: extensions.json changed on disk since the daemon read it \
             (albedo-mcp mcp reload reads it again)\n",
        );
    }
    let servers = v["servers"].as_object();
    if servers.is_none_or(|s| s.is_empty()) {
        out.push_str("no MCP servers configured (add one: albedo-mcp mcp add NAME --url URL | -- COMMAND ARGS...)\n");
        return out;
    }
    let mut rows = vec![["NAME", "TYPE", "ENABLED", "STATE", "TOOLS", "TARGET"]
        .map(String::from)
        .to_vec()];
    // By name, whatever order the answer's object keeps.
    let mut servers: Vec<_> = servers.into_iter().flatten().collect();
    servers.sort_by(|a, b| a.0.cmp(b.0));
    for (name, s) in servers {
        let state = if s.get("problem").is_some() {
            "invalid".to_owned()
        } else {
            s["status"]["state"].as_str().unwrap_or("-").to_owned()
        };
        rows.push(vec![
            name.clone(),
            s["type"].as_str().unwrap_or("?").to_owned(),
            if s["enabled"] == false { "no" } else { "yes" }.to_owned(),
            state,
            s["status"]["tools"]
                .as_u64()
                .map(|n| n.to_string())
                .unwrap_or_else(|| "-".into()),
            target(s),
        ]);
    }
    out.push_str(&table(&rows));
    out
}

/// The names of a map of values held elsewhere (`env`, `headers`), each with where its
/// value comes from; never a value.
pub(super) fn sourced_names(m: &Value) -> String {
    let Some(m) = m.as_object() else {
        return String::new();
    };
    let mut m: Vec<_> = m.iter().collect();
    m.sort_by(|a, b| a.0.cmp(b.0));
    m.into_iter()
        .map(|(k, v)| {
            let from = if v.get("secret").is_some() {
                "secret".to_owned()
            } else if let Some(e) = v["env"].as_str() {
                format!("from ${e}")
            } else if v.get("inline").is_some() {
                "inlined by hand: hidden and not used; set it again".to_owned()
            } else {
                "in extensions.json".to_owned()
            };
            format!("{k} ({from})")
        })
        .collect::<Vec<_>>()
        .join(", ")
}

pub(super) fn list_or(v: &Value, none: &str) -> String {
    match v.as_array() {
        Some(a) if !a.is_empty() => a
            .iter()
            .map(|x| {
                x.as_str()
                    .map(str::to_owned)
                    .unwrap_or_else(|| x.to_string())
            })
            .collect::<Vec<_>>()
            .join(", "),
        Some(_) => "none".to_owned(),
        None => none.to_owned(),
    }
}

/// `mcp show NAME`: settings, status, sign-in and which secrets are set.
pub fn render_show(name: &str, s: &Value) -> String {
    let mut rows: Vec<Vec<String>> = Vec::new();
    let mut row = |k: &str, v: String| rows.push(vec![k.to_owned(), v]);
    row("name", name.to_owned());
    if let Some(p) = s["problem"].as_str() {
        row("problem", p.to_owned());
    }
    row("type", s["type"].as_str().unwrap_or("?").to_owned());
    if s["url"].is_string() {
        row("url", target(s));
    } else if s["command"].is_string() {
        row("command", target(s));
    }
    if let Some(d) = s["cwd"].as_str() {
        row("cwd", d.to_owned());
    }
    row(
        "enabled",
        if s["enabled"] == false { "no" } else { "yes" }.to_owned(),
    );
    if s["env"].is_object() {
        row("env", sourced_names(&s["env"]));
    }
    if s["headers"].is_object() {
        row("headers", sourced_names(&s["headers"]));
    }
    let mut bearer = Vec::new();
    if s["bearerToken"].is_object() {
        bearer.push("secret".to_owned());
    }
    if let Some(v) = s["bearerTokenEnvVar"].as_str() {
        bearer.push(format!("from ${v}"));
    }
    if !bearer.is_empty() {
        row("bearer token", bearer.join(", else "));
    }
    row("enabled tools", list_or(&s["enabledTools"], "all"));
    row("disabled tools", list_or(&s["disabledTools"], "none"));
    for (k, label) in [
        ("startupTimeoutMs", "startup timeout"),
        ("callTimeoutMs", "call timeout"),
    ] {
        if let Some(n) = s[k].as_u64() {
            row(label, format!("{n} ms"));
        }
    }
    let st = &s["status"];
    if st.is_object() {
        let mut line = st["state"].as_str().unwrap_or("?").replace('_', " ");
        if let Some(e) = st["era"].as_str() {
            line.push_str(&format!(", {e} era"));
        }
        if let Some(p) = st["protocol_version"].as_str() {
            line.push_str(&format!(", protocol {p}"));
        }
        if let Some(n) = st["tools"].as_u64() {
            line.push_str(&format!(", {n} tool{}", if n == 1 { "" } else { "s" }));
        }
        row("state", line);
        if let Some(e) = st["last_error"].as_str() {
            row("last error", e.to_owned());
        }
    }
    if let Some(a) = s["auth"].as_object() {
        let mut line = a
            .get("state")
            .and_then(Value::as_str)
            .unwrap_or("?")
            .replace('_', " ");
        for (k, v) in a {
            // The default grant goes without saying; a grant without a browser is shown.
            let default_grant = k == "grant" && v == "authorization_code";
            if k != "state" && !default_grant && !v.is_null() && !v.is_object() && !v.is_array() {
                let v = v
                    .as_str()
                    .map(str::to_owned)
                    .unwrap_or_else(|| v.to_string());
                line.push_str(&format!(", {k}: {v}"));
            }
        }
        row("sign-in", line);
    }
    let sec = &s["secrets"];
    if sec.is_object() {
        let mut set = Vec::new();
        if sec["bearer_token"] == true {
            set.push("bearer token".to_owned());
        }
        if let Some(h) = sec["header"].as_str() {
            set.push(format!("header {h}"));
        }
        let env = list_or(&sec["env"], "");
        if !env.is_empty() && env != "none" {
            set.push(format!("env {env}"));
        }
        if sec["oauth_client"] == true {
            set.push("OAuth client".to_owned());
        }
        row(
            "secrets set",
            if set.is_empty() {
                "none".to_owned()
            } else {
                set.join("; ")
            },
        );
    }
    table(&rows)
}

/// `mcp tools`: the advertised name, the server, the first line of the description.
pub fn render_tools(tools: &[Value]) -> String {
    if tools.is_empty() {
        return "no tools\n".to_owned();
    }
    let mut rows = vec![vec![
        "NAME".to_owned(),
        "SERVER".into(),
        "DESCRIPTION".into(),
    ]];
    for t in tools {
        let mut d: String = t["description"]
            .as_str()
            .unwrap_or("")
            .lines()
            .next()
            .unwrap_or("")
            .to_owned();
        if d.chars().count() > 80 {
            d = d.chars().take(79).collect::<String>() + "…";
        }
        rows.push(vec![
            t["name"].as_str().unwrap_or("?").to_owned(),
            t["server"].as_str().unwrap_or("").to_owned(),
            d,
        ]);
    }
    table(&rows)
}

/// A tool's result for people: its text, a line for each other kind of content; the
/// structured content when there is nothing else.
pub fn render_result(r: &Value) -> String {
    let mut out = String::new();
    let mut line = |s: &str| {
        out.push_str(s);
        if !s.ends_with('\n') {
            out.push('\n');
        }
    };
    let content = r["content"].as_array().filter(|c| !c.is_empty());
    for c in content.into_iter().flatten() {
        match c["type"].as_str() {
            Some("text") => line(c["text"].as_str().unwrap_or("")),
            Some(k @ ("image" | "audio")) => line(&format!(
                "[{k} {}, {} bytes of base64]",
                c["mimeType"].as_str().unwrap_or("?"),
                c["data"].as_str().map_or(0, str::len)
            )),
            Some("resource") => match c["resource"]["text"].as_str() {
                Some(t) => line(t),
                None => line(&format!(
                    "[resource {}]",
                    c["resource"]["uri"].as_str().unwrap_or("?")
                )),
            },
            Some("resource_link") => line(&format!("[link {}]", c["uri"].as_str().unwrap_or("?"))),
            _ => line(&c.to_string()),
        }
    }
    if content.is_none() {
        if let Some(sc) = r.get("structuredContent").filter(|v| !v.is_null()) {
            line(&serde_json::to_string_pretty(sc).unwrap_or_else(|_| sc.to_string()));
        } else if let Some(other) = r.get("result") {
            line(&serde_json::to_string_pretty(other).unwrap_or_else(|_| other.to_string()));
        }
    }
    out
}

/// `mcp test`: the stages reached, what was found, and the error.
pub fn render_test(r: &Value) -> String {
    let mut rows: Vec<Vec<String>> = Vec::new();
    let mark = |v: &Value| match v.as_bool() {
        Some(true) => Some("✓".to_owned()),
        Some(false) => Some("✗".to_owned()),
        None => None,
    };
    for stage in ["spawned", "initialized", "discovered"] {
        if stage == "spawned" && r["transport"] != "stdio" && !r[stage].is_boolean() {
            continue;
        }
        if let Some(m) = mark(&r[stage]) {
            rows.push(vec![stage.to_owned(), m]);
        }
    }
    if r["discovered"] == true {
        let n = |k: &str| r[k].as_u64().unwrap_or(0);
        rows.push(vec![
            "found".into(),
            format!(
                "{} tools, {} resources, {} prompts",
                n("tools"),
                n("resources"),
                n("prompts")
            ),
        ]);
    }
    let mut proto = Vec::new();
    if let Some(e) = r["era"].as_str() {
        proto.push(format!("{e} era"));
    }
    if let Some(p) = r["protocol_version"].as_str() {
        proto.push(format!("protocol {p}"));
    }
    if !proto.is_empty() {
        rows.push(vec!["protocol".into(), proto.join(", ")]);
    }
    if let Some(ms) = r["elapsed_ms"].as_u64() {
        rows.push(vec!["took".into(), format!("{ms} ms")]);
    }
    if r["needs_sign_in"] == true {
        rows.push(vec![
            "sign-in".into(),
            format!(
                "needed (sign in with: albedo-mcp mcp login {})",
                r["server"].as_str().unwrap_or("NAME")
            ),
        ]);
    }
    if let Some(e) = r["error"].as_str() {
        rows.push(vec!["error".into(), e.to_owned()]);
    }
    let mut out = table(&rows);
    out.push_str(if test_passed(r) {
        "the server works\n"
    } else {
        "the server did not get through\n"
    });
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn settings_sample() -> Value {
        json!({
            "retryMs": 30000, "revision": "ab", "changed_on_disk": false,
            "problems": ["extensions.json: server \"bad\": no command"],
            "servers": {
                "bad": {"problem": "no command", "enabled": true},
                "docs": {"type": "stdio", "command": "npx",
                         "args": ["-y", "@m/server-filesystem", "/srv/my docs"],
                         "cwd": "/srv",
                         "env": {"TOKEN": {"secret": "env.TOKEN"}, "HOME2": {"env": "MY_VAR"}},
                         "enabled": true, "enabledTools": null, "disabledTools": ["write_file"],
                         "status": {"state": "connected", "era": "legacy",
                                    "protocol_version": "2025-06-18", "tools": 12,
                                    "last_error": null},
                         "auth": {"state": "none"},
                         "secrets": {"bearer_token": false, "header": null, "env": ["TOKEN"],
                                     "oauth_client": false}},
                "search": {"type": "http", "url": "https://mcp.example.com/mcp",
                           "headers": {"X-Api-Key": {"secret": "header"}},
                           "enabled": false,
                           "status": {"state": "disabled", "tools": null},
                           "auth": {"state": "none"},
                           "secrets": {"bearer_token": true, "header": "X-Api-Key", "env": [],
                                       "oauth_client": false}}
            }
        })
    }

    #[test]
    fn list_table() {
        let t = render_list(&settings_sample());
        let expected = "\
problem: extensions.json: server \"bad\": no command
NAME    TYPE   ENABLED  STATE      TOOLS  TARGET
bad     ?      yes      invalid    -
docs    stdio  yes      connected  12     npx -y @m/server-filesystem '/srv/my docs'
search  http   no       disabled   -      https://mcp.example.com/mcp
";
        assert_eq!(t, expected);
        assert!(render_list(&json!({"servers": {}})).contains("no MCP servers"));
    }

    #[test]
    fn show_names_secrets_never_values() {
        let v = settings_sample();
        let docs = render_show("docs", &v["servers"]["docs"]);
        assert!(docs.contains("command         npx -y @m/server-filesystem '/srv/my docs'"));
        assert!(docs.contains("env             HOME2 (from $MY_VAR), TOKEN (secret)"));
        assert!(docs.contains("disabled tools  write_file"));
        assert!(docs.contains("enabled tools   all"));
        assert!(
            docs.contains("state           connected, legacy era, protocol 2025-06-18, 12 tools")
        );
        assert!(docs.contains("secrets set     env TOKEN"));
        let search = render_show("search", &v["servers"]["search"]);
        assert!(search.contains("enabled         no"));
        assert!(search.contains("headers         X-Api-Key (secret)"));
        assert!(search.contains("secrets set     bearer token; header X-Api-Key"));
        assert!(search.contains("sign-in         none"));
    }

    #[test]
    fn results_and_tests() {
        let r = json!({"content": [{"type": "text", "text": "Echo: hi"},
                                   {"type": "image", "mimeType": "image/png", "data": "AAAA"}],
                       "isError": false, "outcome": "ok"});
        assert_eq!(
            render_result(&r),
            "Echo: hi\n[image image/png, 4 bytes of base64]\n"
        );
        let r = json!({"content": [], "structuredContent": {"a": 1}});
        assert_eq!(render_result(&r), "{\n  \"a\": 1\n}\n");

        let ok = json!({"server": "docs", "transport": "stdio", "spawned": true,
                        "initialized": true, "discovered": true, "tools": 12, "resources": 0,
                        "prompts": 1, "era": "legacy", "protocol_version": "2025-06-18",
                        "error": null, "needs_sign_in": false, "stderr": "", "elapsed_ms": 812});
        assert!(test_passed(&ok));
        let t = render_test(&ok);
        assert!(t.contains("spawned      ✓"), "{t}");
        assert!(
            t.contains("found        12 tools, 0 resources, 1 prompts"),
            "{t}"
        );
        assert!(t.ends_with("the server works\n"));
        let bad = json!({"server": "x", "transport": "stdio", "spawned": true,
                         "initialized": false, "discovered": false, "error": "it exited (1)",
                         "stderr": "boom"});
        assert!(!test_passed(&bad));
        let t = render_test(&bad);
        assert!(t.contains("initialized  ✗"), "{t}");
        assert!(t.contains("error        it exited (1)"), "{t}");
        assert!(t.ends_with("did not get through\n"));
    }

    #[test]
    fn tools_table() {
        let t = render_tools(&[
            json!({"name": "mcp__e__echo", "server": "e", "description": "Echoes\nmore"}),
            json!({"name": "mcp__e__add", "server": "e", "description": "x".repeat(100)}),
        ]);
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines[0], "NAME          SERVER  DESCRIPTION");
        assert_eq!(lines[1], "mcp__e__echo  e       Echoes");
        assert!(lines[2].ends_with('…'));
        assert_eq!(render_tools(&[]), "no tools\n");
    }
}
