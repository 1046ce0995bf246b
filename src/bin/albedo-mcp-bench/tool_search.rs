//! The `toolsearch` scenario: deferred tool loading (`src/toolsearch.rs`).
//!
//! - `tool_search_open`: the bytes of the tool list a session advertises at open with 20
//!   servers x 50 tools (saved catalogues), `deferTools` `never` against the default
//!   (`auto`, over the budget: everything behind `mcp__search`), and the server processes
//!   running after each open (lazy servers are not dialled). Target: at least 90 % fewer bytes.
//! - `tool_search_latency`: `SearchIndex::search` over 5,000 tools (the query set's
//!   catalogues repeated under other server names), p50 and p99. Target: p99 under 1 ms.
//! - `tool_search_ranking`: the query set `benches/tool-search-queries.json` (written for the
//!   catalogues in `benches/catalogues/`), every catalogue's tools deferred at once: the
//!   share of queries whose intended tool is in the top 5. Target: at least 90 %.

use super::{pctf, Bench, API};
use albedo_mcp::advertise::{advertise, AdvertisedTool};
use albedo_mcp::protocol::model::Catalogue;
use albedo_mcp::store::settings::parse_mcp;
use albedo_mcp::toolsearch::SearchIndex;
use serde_json::{json, Map, Value};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// One catalogue fixture advertised as server `server`.
pub fn fixture_tools(
    path: &Path,
    server: Option<&str>,
) -> Result<Vec<Arc<AdvertisedTool>>, String> {
    let text = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let v: Value = serde_json::from_slice(&text).map_err(|e| format!("{}: {e}", path.display()))?;
    let name = server
        .map(str::to_owned)
        .or_else(|| v["server"].as_str().map(str::to_owned))
        .ok_or_else(|| format!("{}: no `server`", path.display()))?;
    let tools = v["tools"]
        .as_array()
        .cloned()
        .ok_or_else(|| format!("{}: no `tools`", path.display()))?;
    let cfg = parse_mcp(Some(
        &json!({"servers": {name.clone(): {"type": "stdio", "command": "x"}}}),
    ))
    .map_err(|e| e.to_string())?
    .servers
    .remove(0);
    let cat = Catalogue {
        tools,
        capabilities: json!({"tools": {}}),
        ..Default::default()
    };
    let mut warnings = Vec::new();
    Ok(advertise(&cfg, &cat, false, &mut warnings)
        .into_iter()
        .map(Arc::new)
        .collect())
}

/// The query set: its catalogues' tools and its (query, intended tool) pairs.
pub type QuerySet = (Vec<Arc<AdvertisedTool>>, Vec<(String, String)>, Vec<String>);

pub fn query_set(repo: &Path) -> Result<QuerySet, String> {
    let path = repo.join("benches/tool-search-queries.json");
    let v: Value = serde_json::from_slice(
        &std::fs::read(&path).map_err(|e| format!("{}: {e}", path.display()))?,
    )
    .map_err(|e| format!("{}: {e}", path.display()))?;
    let mut tools = Vec::new();
    let mut files = Vec::new();
    for c in v["catalogues"].as_array().into_iter().flatten() {
        let f = c.as_str().ok_or("a catalogue is not a file name")?;
        files.push(f.to_owned());
        tools.extend(fixture_tools(
            &repo.join("benches/catalogues").join(f),
            None,
        )?);
    }
    let queries = v["queries"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|q| {
            Some((
                q["query"].as_str()?.to_owned(),
                q["expect"].as_str()?.to_owned(),
            ))
        })
        .collect();
    Ok((tools, queries, files))
}

/// Processes descending from `root` whose command line holds `needle`.
fn descendants_running(root: i32, needle: &str) -> usize {
    let mut parent = std::collections::HashMap::new();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return 0;
    };
    for e in dir.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        let rest = stat.rsplit(')').next().unwrap_or("");
        let mut f = rest.split_whitespace();
        let state = f.next().unwrap_or("");
        if state == "Z" || state == "X" {
            continue;
        }
        if let Some(pp) = f.next().and_then(|p| p.parse::<i32>().ok()) {
            parent.insert(pid, pp);
        }
    }
    parent
        .keys()
        .filter(|&&pid| {
            let mut p = pid;
            for _ in 0..64 {
                match parent.get(&p) {
                    Some(&pp) if pp == root => return true,
                    Some(&pp) if pp > 1 => p = pp,
                    _ => return false,
                }
            }
            false
        })
        .filter(|pid| {
            // The server, not its launcher (`<exe> launch -- <exe> __stdio-server ...`).
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .map(|c| {
                    let args: Vec<&[u8]> = c.split(|&b| b == 0).collect();
                    args.get(1) != Some(&&b"launch"[..])
                        && String::from_utf8_lossy(&c).contains(needle)
                })
                .unwrap_or(false)
        })
        .count()
}

impl Bench {
    pub(super) fn tool_search(&mut self) {
        println!("\n== tool search ==");
        self.tool_search_open();
        let set = match query_set(&self.repo) {
            Ok(s) => s,
            Err(e) => {
                self.fail(format!("the tool search query set: {e}"));
                return;
            }
        };
        self.tool_search_ranking(&set);
        self.tool_search_latency(&set);
    }

    fn tool_search_open(&mut self) {
        let (n_servers, n_tools) = (20usize, 50usize);
        let mut servers = Map::new();
        for i in 0..n_servers {
            servers.insert(
                format!("t{i:02}"),
                json!({"type": "stdio", "command": self.exe, "args": ["__stdio-server", "--tools", n_tools.to_string()]}),
            );
        }
        let ext = json!({"enabled": {"mcp": true}, "mcp": {"servers": servers}});
        let Some(d) = self.start_daemon("toolsearch", &ext) else {
            return;
        };
        // The first session discovers every server and saves the catalogues.
        let Some(seed) = self.open_session(&d) else {
            return;
        };
        self.delete_session(&d, &seed);
        let mut out = Map::new();
        for policy in ["never", "auto"] {
            std::thread::sleep(Duration::from_millis(300));
            let body = format!("{{\"defer_tools\":\"{policy}\"}}");
            let r = self.rt.block_on(async {
                let mut c = d.conn();
                let (st, b) = c
                    .request("POST", "/sessions", Some(body.as_bytes()))
                    .await
                    .ok()?;
                if st != 201 {
                    return None;
                }
                let v: Value = serde_json::from_slice(&b).ok()?;
                let id = v["id"].as_str()?.to_owned();
                let (_, list) = c
                    .request("GET", &format!("/sessions/{id}/tools"), None)
                    .await
                    .ok()?;
                let (_, all) = c
                    .request("GET", &format!("/sessions/{id}/tools?all=true"), None)
                    .await
                    .ok()?;
                let count = |b: &[u8]| {
                    serde_json::from_slice::<Value>(b)
                        .ok()
                        .and_then(|v| v["tools"].as_array().map(Vec::len))
                        .unwrap_or(0)
                };
                Some((id, list.len(), count(&list), count(&all)))
            });
            let Some((id, bytes, listed, all)) = r else {
                self.fail(format!(
                    "tool search: a session with defer_tools {policy} did not open"
                ));
                return;
            };
            // The servers dialled at open (a never session dials every saved one in the
            // background; lazy ones wait for a call).
            let mut running = 0;
            let deadline =
                Instant::now() + Duration::from_secs(if policy == "never" { 20 } else { 1 });
            while Instant::now() < deadline {
                running = descendants_running(d.pid(), "__stdio-server");
                if policy == "never" && running >= n_servers {
                    break;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            println!(
                "defer_tools {policy}: {bytes} bytes, {listed} tools listed of {all}, {running} server processes"
            );
            out.insert(
                policy.to_owned(),
                json!({"bytes": bytes, "tools_listed": listed, "tools_all": all, "server_processes": running}),
            );
            self.delete_session(&d, &id);
        }
        let never = out["never"]["bytes"].as_u64().unwrap_or(0) as f64;
        let auto = out["auto"]["bytes"].as_u64().unwrap_or(0) as f64;
        let fewer = if never > 0.0 { 1.0 - auto / never } else { 0.0 };
        println!(
            "advertised at open: {:.1} % fewer bytes deferred",
            fewer * 100.0
        );
        let mut r = json!({
            "scenario": "tool_search_open",
            "client": API,
            "concurrency": 1,
            "servers": n_servers,
            "tools_per_server": n_tools,
            "bytes_never": out["never"]["bytes"],
            "bytes_deferred": out["auto"]["bytes"],
            "bytes_fewer_share": fewer,
            "tools_listed_never": out["never"]["tools_listed"],
            "tools_listed_deferred": out["auto"]["tools_listed"],
            "server_processes_never": out["never"]["server_processes"],
            "server_processes_deferred": out["auto"]["server_processes"],
            "calls_per_s": null,
            "p50_us": null,
            "p99_us": null,
            "cpu_us_per_call": null,
        });
        if never == 0.0 || out["never"]["tools_all"] != out["auto"]["tools_all"] {
            r["failed"] = json!("the two sessions did not hold the same tools");
        }
        self.push(r);
    }

    fn tool_search_ranking(&mut self, set: &QuerySet) {
        let (tools, queries, files) = set;
        let index = SearchIndex::build(tools.clone());
        let (mut top1, mut top5) = (0usize, 0usize);
        let mut misses = Vec::new();
        for (q, want) in queries {
            let hits = index.search(q, None, 5);
            let pos = hits.iter().position(|h| h.tool.name == *want);
            match pos {
                Some(0) => {
                    top1 += 1;
                    top5 += 1;
                }
                Some(_) => top5 += 1,
                None => misses.push(json!({
                    "query": q,
                    "expect": want,
                    "got": hits.iter().map(|h| h.tool.name.clone()).collect::<Vec<_>>(),
                })),
            }
        }
        let n = queries.len().max(1) as f64;
        println!(
            "ranking: {top5} of {} queries find their tool in the top 5 ({:.1} %), {top1} first",
            queries.len(),
            top5 as f64 / n * 100.0
        );
        let mut r = json!({
            "scenario": "tool_search_ranking",
            "client": "index",
            "concurrency": 1,
            "catalogues": files,
            "tools": tools.len(),
            "queries": queries.len(),
            "top5": top5,
            "top1": top1,
            "top5_share": top5 as f64 / n,
            "top1_share": top1 as f64 / n,
            "misses": misses,
            "calls_per_s": null,
            "p50_us": null,
            "p99_us": null,
            "cpu_us_per_call": null,
        });
        if queries.len() < 50 {
            r["failed"] = json!("the query set has fewer than 50 queries");
        }
        self.push(r);
    }

    fn tool_search_latency(&mut self, set: &QuerySet) {
        let (base, queries, _) = set;
        let want = 5000;
        let mut tools = Vec::with_capacity(want);
        let dir = self.repo.join("benches/catalogues");
        let files: Vec<_> = std::fs::read_dir(&dir)
            .map(|d| d.flatten().map(|e| e.path()).collect())
            .unwrap_or_default();
        let mut copy = 0;
        'fill: while tools.len() < want && !files.is_empty() {
            for f in &files {
                let server = format!(
                    "{}{copy}",
                    f.file_stem().and_then(|s| s.to_str()).unwrap_or("s")
                );
                match fixture_tools(f, Some(&server)) {
                    Ok(t) => tools.extend(t),
                    Err(e) => {
                        self.fail(format!("tool search latency: {e}"));
                        return;
                    }
                }
                if tools.len() >= want {
                    break 'fill;
                }
            }
            copy += 1;
        }
        tools.truncate(want);
        if tools.len() < want || base.is_empty() {
            self.fail("tool search latency: not enough tools".into());
            return;
        }
        let t = Instant::now();
        let index = SearchIndex::build(tools);
        let build_ms = t.elapsed().as_secs_f64() * 1000.0;
        let passes = if self.opts.quick { 3 } else { 30 };
        let mut times = Vec::with_capacity(passes * queries.len());
        for _ in 0..passes {
            for (q, _) in queries {
                let t = Instant::now();
                let hits = index.search(q, None, 15);
                times.push(t.elapsed().as_secs_f64() * 1e6);
                std::hint::black_box(hits);
            }
        }
        times.sort_by(f64::total_cmp);
        let (p50, p99) = (pctf(&times, 0.5), pctf(&times, 0.99));
        println!(
            "search over {} tools: p50 {p50:.0} us, p99 {p99:.0} us ({} searches); index built in {build_ms:.1} ms",
            index.len(),
            times.len()
        );
        self.push(json!({
            "scenario": "tool_search_latency",
            "client": "index",
            "concurrency": 1,
            "tools": index.len(),
            "searches": times.len(),
            "search_p50_us": p50,
            "search_p99_us": p99,
            "search_max_us": times.last().copied().unwrap_or(0.0),
            "index_build_ms": build_ms,
            "calls_per_s": null,
            "p50_us": p50,
            "p99_us": p99,
            "cpu_us_per_call": null,
        }));
    }
}
