//! Deferred tool loading: which of a session's tools wait behind `mcp__search` (the policy),
//! the search index over them, and the search tool's description, schema and answer.
//!
//! - Policy ([`decide`]): a tool of a `never` server is loaded, one of an `always` server is
//!   deferred; the tools of `auto` servers are deferred once the estimated tokens of every
//!   tool that is not `always` pass the budget. Tokens are estimated as the bytes of the
//!   tool's name, description and input schema (compact JSON) divided by 4.
//! - Index ([`SearchIndex`]): built once per set of deferred tools (shared by the sessions
//!   that defer the same tools), tokenised names (split on `_ - . /` and camelCase, with a
//!   light plural stemming), descriptions and parameter names, ranked by a BM25F-like scorer
//!   with field weights; an exact tool name (advertised or the server's own) always wins.
//!
//! Owns: the policy, the index, ranking, and the text the model reads. Must not touch: I/O,
//! actors, the API.

use crate::advertise::{AdvertisedTool, ToolKind};
use crate::store::settings::DeferTools;
use serde_json::{json, Value};
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, OnceLock, Weak};

/// The advertised name of the search tool.
pub const SEARCH_TOOL: &str = "mcp__search";
/// Matches answered with their schemas when the call gives no `limit`.
pub const DEFAULT_LIMIT: usize = 5;
/// The largest `limit` accepted.
pub const MAX_LIMIT: usize = 20;
/// Further matches listed by name only.
pub const MORE_NAMES: usize = 10;
/// The longest `query` accepted, in bytes.
pub const MAX_QUERY_BYTES: usize = 1024;
/// Query terms looked up (more are ignored).
pub const MAX_QUERY_TERMS: usize = 32;

/// The estimated tokens of one tool as the model sees it: the bytes of its JSON as the API
/// lists it (name, description, input schema, server) / 4, rounded up. The JSON is kept
/// with the tool, so estimating is not serializing again.
pub fn estimate_tokens(t: &AdvertisedTool) -> u64 {
    (t.json().get().len() as u64).div_ceil(4)
}

/// Which tools are deferred: `tools` with each one's policy and estimated tokens, in
/// order; answers a flag per tool.
pub fn decide(tools: &[(DeferTools, u64)], budget: u64) -> Vec<bool> {
    let total: u64 = tools
        .iter()
        .filter(|(p, _)| *p != DeferTools::Always)
        .map(|(_, n)| n)
        .sum();
    let over = total > budget;
    tools
        .iter()
        .map(|(p, _)| match p {
            DeferTools::Never => false,
            DeferTools::Always => true,
            DeferTools::Auto => over,
        })
        .collect()
}

/// How many tools of each server a new session would defer, following each server's
/// `deferTools` and the budget: `servers` are the enabled servers with a known catalogue.
pub fn default_deferred(
    servers: &[(
        &crate::store::settings::ServerConfig,
        Arc<crate::protocol::model::Catalogue>,
    )],
    budget: u64,
) -> HashMap<String, usize> {
    let mut all = Vec::new();
    let mut warnings = Vec::new();
    for (cfg, cat) in servers {
        let http = matches!(
            cfg.transport,
            crate::store::settings::TransportConfig::Http { .. }
        );
        for t in crate::advertise::advertise_shared(cfg, cat, http, &mut warnings) {
            let tool = matches!(t.kind, ToolKind::Tool { .. });
            all.push((
                cfg.name.as_str(),
                cfg.defer_tools,
                estimate_tokens(&t),
                tool,
            ));
        }
    }
    let est: Vec<(DeferTools, u64)> = all.iter().map(|(_, p, n, _)| (*p, *n)).collect();
    let mut out: HashMap<String, usize> =
        servers.iter().map(|(c, _)| (c.name.clone(), 0)).collect();
    // Counted like the settings view's `tools`: the server's tools, not the built-in
    // read_resource and get_prompt (which are deferred with them).
    for ((server, _, _, tool), d) in all.iter().zip(decide(&est, budget)) {
        if d && *tool {
            *out.entry((*server).to_owned()).or_default() += 1;
        }
    }
    out
}

/// The search tool as advertised: its description names the servers it covers and how many
/// deferred tools each has.
pub fn search_tool(deferred: &[Arc<AdvertisedTool>]) -> AdvertisedTool {
    let mut per: BTreeMap<&str, usize> = BTreeMap::new();
    for t in deferred {
        *per.entry(t.server.as_str()).or_default() += 1;
    }
    let shown = 12;
    let mut lines: Vec<String> = per
        .iter()
        .take(shown)
        .map(|(s, n)| format!("{s} ({n})"))
        .collect();
    if per.len() > shown {
        let rest: usize = per.values().skip(shown).sum();
        lines.push(format!("and {} more servers ({rest})", per.len() - shown));
    }
    let description = format!(
        "Search the MCP tools that are not loaded yet ({} tools): {}.\n\
         Answers the best matches with their full names, descriptions and input schemas; \
         they are loaded and can be called in the next step. Search with words of what you \
         want to do, or an exact tool name.",
        deferred.len(),
        lines.join(", ")
    );
    AdvertisedTool {
        name: SEARCH_TOOL.to_owned(),
        description,
        input_schema: json!({
            "type": "object",
            "properties": {
                "query": {"type": "string", "description": "What the tool should do, or its name"},
                "limit": {"type": "integer", "minimum": 1, "maximum": MAX_LIMIT, "description": format!("How many matches to answer with schemas (default {DEFAULT_LIMIT})")},
                "server": {"type": "string", "description": "Only the tools of this MCP server"}
            },
            "required": ["query"],
            "additionalProperties": false
        }),
        server: String::new(),
        extension: "mcp",
        kind: ToolKind::Search,
        json: OnceLock::new(),
    }
}

/// The arguments of a search, checked.
#[derive(Debug, Clone, PartialEq)]
pub struct SearchArgs {
    pub query: String,
    pub limit: usize,
    pub server: Option<String>,
}

/// Check a search's arguments; the error names the argument.
pub fn parse_args(args: &Value) -> Result<SearchArgs, String> {
    let obj = args
        .as_object()
        .ok_or_else(|| "`arguments` must be an object".to_owned())?;
    for k in obj.keys() {
        if !["query", "limit", "server"].contains(&k.as_str()) {
            return Err(format!(
                "unknown argument `{}` (mcp__search takes query, limit, server)",
                crate::advertise::bound_text(k, 64)
            ));
        }
    }
    let query = obj
        .get("query")
        .and_then(Value::as_str)
        .map(str::trim)
        .filter(|q| !q.is_empty())
        .ok_or_else(|| "`query` must be a non-empty string".to_owned())?;
    if query.len() > MAX_QUERY_BYTES {
        return Err(format!(
            "`query` is {} bytes, over the {MAX_QUERY_BYTES}-byte bound",
            query.len()
        ));
    }
    let limit = match obj.get("limit") {
        None | Some(Value::Null) => DEFAULT_LIMIT,
        Some(v) => v
            .as_u64()
            .filter(|n| (1..=MAX_LIMIT as u64).contains(n))
            .map(|n| n as usize)
            .ok_or_else(|| format!("`limit` must be an integer from 1 to {MAX_LIMIT}"))?,
    };
    let server = match obj.get("server") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) if !s.is_empty() => Some(s.clone()),
        Some(_) => return Err("`server` must be a server's name".to_owned()),
    };
    Ok(SearchArgs {
        query: query.to_owned(),
        limit,
        server,
    })
}

/// Fields of a tool, each with its weight in the score: its own name, its server's name,
/// its parameter names, its description.
const FIELDS: usize = 4;
const NAME: usize = 0;
const WEIGHTS: [f32; FIELDS] = [3.0, 1.0, 1.5, 1.0];
/// BM25's saturation and length normalisation.
const K1: f32 = 1.2;
const B: [f32; FIELDS] = [0.5, 0.0, 0.5, 0.75];

/// One tool's terms: per term, its count in each field.
struct Posting {
    doc: u32,
    tf: [u16; FIELDS],
}

/// The index over one set of deferred tools.
pub struct SearchIndex {
    tools: Vec<Arc<AdvertisedTool>>,
    postings: HashMap<String, Vec<Posting>>,
    /// Each tool's field lengths (in terms).
    lens: Vec<[u16; FIELDS]>,
    avg: [f32; FIELDS],
    /// Lower-case exact names (advertised, the server's own, `server/tool`) → tools.
    exact: HashMap<String, Vec<u32>>,
}

impl std::fmt::Debug for SearchIndex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SearchIndex")
            .field("tools", &self.tools.len())
            .field("terms", &self.postings.len())
            .finish()
    }
}

/// One match.
#[derive(Debug, Clone)]
pub struct Hit {
    pub tool: Arc<AdvertisedTool>,
    pub score: f32,
}

/// Split text into lower-case terms: on anything not a letter or digit, and at camelCase
/// boundaries (`listIssues` → `list`, `issues`; `HTTPServer` → `http`, `server`); each
/// term lightly stemmed ([`stem`]).
pub fn tokenize(text: &str, out: &mut Vec<String>) {
    let chars: Vec<char> = text.chars().collect();
    let mut cur = String::new();
    let flush = |cur: &mut String, out: &mut Vec<String>| {
        if !cur.is_empty() {
            let t = stem(&cur.to_lowercase());
            if !t.is_empty() {
                out.push(t);
            }
            cur.clear();
        }
    };
    for i in 0..chars.len() {
        let c = chars[i];
        if !c.is_alphanumeric() {
            flush(&mut cur, out);
            continue;
        }
        if let Some(&p) = i.checked_sub(1).and_then(|j| chars.get(j)) {
            let next_lower = chars.get(i + 1).is_some_and(|n| n.is_lowercase());
            let boundary = (p.is_lowercase() && c.is_uppercase())
                || (p.is_uppercase() && c.is_uppercase() && next_lower)
                || (p.is_alphabetic() && c.is_ascii_digit())
                || (p.is_ascii_digit() && c.is_alphabetic());
            if boundary {
                flush(&mut cur, out);
            }
        }
        cur.push(c);
    }
    flush(&mut cur, out);
}

/// A light English stemmer: plurals and a few verb endings (`issues` → `issue`,
/// `directories` → `directory`, `searching` → `search`), so that a query in other words
/// still meets the tool's.
pub fn stem(w: &str) -> String {
    let n = w.len();
    if n <= 3 || !w.is_ascii() {
        return w.to_owned();
    }
    if let Some(b) = w.strip_suffix("ies") {
        return format!("{b}y");
    }
    for suf in ["sses", "shes", "ches", "xes"] {
        if w.ends_with(suf) {
            return w[..n - 2].to_owned();
        }
    }
    if n > 5 {
        if let Some(b) = w.strip_suffix("ing") {
            return undouble(b);
        }
    }
    if n > 4 {
        if let Some(b) = w.strip_suffix("ed") {
            if !b.ends_with('e') {
                return undouble(b);
            }
            return b.to_owned();
        }
    }
    if w.ends_with('s') && !w.ends_with("ss") && !w.ends_with("us") && !w.ends_with("is") {
        return w[..n - 1].to_owned();
    }
    w.to_owned()
}

/// `runn` → `run`, `stopp` → `stop` (after an `-ing` or `-ed` came off).
fn undouble(b: &str) -> String {
    let bytes = b.as_bytes();
    let n = bytes.len();
    if n >= 2 && bytes[n - 1] == bytes[n - 2] && !matches!(bytes[n - 1], b'l' | b's' | b'z') {
        return b[..n - 1].to_owned();
    }
    b.to_owned()
}

/// The parameter names of a schema (top-level properties, and one level down).
fn param_text(schema: &Value, out: &mut String) {
    let Some(props) = schema.get("properties").and_then(Value::as_object) else {
        return;
    };
    for (k, v) in props.iter().take(256) {
        out.push_str(k);
        out.push(' ');
        if let Some(inner) = v.get("properties").and_then(Value::as_object) {
            for k2 in inner.keys().take(64) {
                out.push_str(k2);
                out.push(' ');
            }
        }
    }
}

impl SearchIndex {
    /// Index `tools` (each once; read_resource and get_prompt of a server too).
    pub fn build(tools: Vec<Arc<AdvertisedTool>>) -> SearchIndex {
        let mut postings: HashMap<String, Vec<Posting>> = HashMap::new();
        let mut lens = Vec::with_capacity(tools.len());
        let mut exact: HashMap<String, Vec<u32>> = HashMap::new();
        let mut sum = [0f64; FIELDS];
        let mut terms = Vec::new();
        for (i, t) in tools.iter().enumerate() {
            let doc = i as u32;
            let own = match &t.kind {
                ToolKind::Tool { tool } => tool.clone(),
                ToolKind::ReadResource => "read_resource".into(),
                ToolKind::GetPrompt => "get_prompt".into(),
                ToolKind::Search => SEARCH_TOOL.into(),
            };
            for e in [
                t.name.to_lowercase(),
                own.to_lowercase(),
                format!("{}/{}", t.server, own).to_lowercase(),
            ] {
                let v = exact.entry(e).or_default();
                if !v.contains(&doc) {
                    v.push(doc);
                }
            }
            let mut params = String::new();
            param_text(&t.input_schema, &mut params);
            let texts: [&str; FIELDS] = [&own, &t.server, &params, &t.description];
            let mut tf: HashMap<String, [u16; FIELDS]> = HashMap::new();
            let mut len = [0u16; FIELDS];
            for (f, text) in texts.iter().enumerate() {
                terms.clear();
                tokenize(text, &mut terms);
                len[f] = terms.len().min(u16::MAX as usize) as u16;
                sum[f] += terms.len() as f64;
                for term in terms.drain(..) {
                    let e = tf.entry(term).or_default();
                    e[f] = e[f].saturating_add(1);
                }
            }
            for (term, counts) in tf {
                postings
                    .entry(term)
                    .or_default()
                    .push(Posting { doc, tf: counts });
            }
            lens.push(len);
        }
        let n = tools.len().max(1) as f64;
        let avg = sum.map(|s| ((s / n) as f32).max(1.0));
        SearchIndex {
            tools,
            postings,
            lens,
            avg,
            exact,
        }
    }

    /// Every tool indexed, in order.
    pub fn tools(&self) -> &[Arc<AdvertisedTool>] {
        &self.tools
    }

    pub fn len(&self) -> usize {
        self.tools.len()
    }

    pub fn is_empty(&self) -> bool {
        self.tools.is_empty()
    }

    /// The best `n` tools for `query` (of `server`, if given), best first; ties keep the
    /// index's order. An exact name scores above anything else.
    pub fn search(&self, query: &str, server: Option<&str>, n: usize) -> Vec<Hit> {
        let mut scores = vec![0f32; self.tools.len()];
        let allowed = |d: usize| server.is_none_or(|s| self.tools[d].server == s);
        let q = query.trim().to_lowercase();
        if let Some(docs) = self.exact.get(&q) {
            for &d in docs {
                scores[d as usize] += 1.0e6;
            }
        }
        let mut terms = Vec::new();
        tokenize(query, &mut terms);
        terms.sort();
        terms.dedup();
        terms.truncate(MAX_QUERY_TERMS);
        let n_docs = self.tools.len() as f32;
        // Per tool, which query terms its own name holds (a bit per term).
        let mut in_name = vec![0u32; self.tools.len()];
        for (ti, term) in terms.iter().enumerate() {
            let Some(list) = self.postings.get(term) else {
                continue;
            };
            let df = list.len() as f32;
            let idf = (1.0 + (n_docs - df + 0.5) / (df + 0.5)).ln();
            for p in list {
                let d = p.doc as usize;
                if p.tf[NAME] > 0 {
                    in_name[d] |= 1 << ti;
                }
                let len = &self.lens[d];
                let mut tf = 0f32;
                for f in 0..FIELDS {
                    if p.tf[f] > 0 {
                        let norm = 1.0 - B[f] + B[f] * (len[f] as f32 / self.avg[f]);
                        tf += WEIGHTS[f] * p.tf[f] as f32 / norm;
                    }
                }
                scores[d] += idf * tf * (K1 + 1.0) / (tf + K1);
            }
        }
        // A tool whose own name holds every query term is what was asked for.
        if terms.len() > 1 {
            let all = (1u64 << terms.len()) - 1;
            for (s, mask) in scores.iter_mut().zip(&in_name) {
                if u64::from(*mask) == all {
                    *s *= 1.5;
                }
            }
        }
        let mut hits: Vec<(usize, f32)> = scores
            .iter()
            .enumerate()
            .filter(|(d, s)| **s > 0.0 && allowed(*d))
            .map(|(d, s)| (d, *s))
            .collect();
        let cmp = |a: &(usize, f32), b: &(usize, f32)| {
            b.1.partial_cmp(&a.1)
                .unwrap_or(std::cmp::Ordering::Equal)
                .then(a.0.cmp(&b.0))
        };
        if hits.len() > n && n > 0 {
            hits.select_nth_unstable_by(n - 1, cmp);
            hits.truncate(n);
        }
        hits.sort_by(cmp);
        hits.truncate(n);
        hits.into_iter()
            .map(|(d, score)| Hit {
                tool: self.tools[d].clone(),
                score,
            })
            .collect()
    }
}

/// [`SearchIndex::build`], shared: sessions that defer the same tools (the same `Arc`s, as
/// [`crate::advertise::advertise_shared`] hands them out) share one index. The index built
/// last is kept even when no session holds it, so that closing the last session and
/// opening another does not build it again.
pub fn index_shared(tools: &[Arc<AdvertisedTool>]) -> Arc<SearchIndex> {
    /// The tools' addresses, and the index built over them.
    type Memo = Vec<(Vec<usize>, Weak<SearchIndex>)>;
    static MEMO: OnceLock<Mutex<Memo>> = OnceLock::new();
    static LAST: Mutex<Option<(Vec<usize>, Arc<SearchIndex>)>> = Mutex::new(None);
    let key: Vec<usize> = tools.iter().map(|t| Arc::as_ptr(t) as usize).collect();
    {
        // It holds its tools, so their addresses cannot be reused while it is kept.
        let last = LAST.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((k, i)) = last.as_ref() {
            if *k == key {
                return i.clone();
            }
        }
    }
    let memo = MEMO.get_or_init(Default::default);
    {
        let mut m = memo.lock().unwrap_or_else(|p| p.into_inner());
        m.retain(|(_, w)| w.strong_count() > 0);
        if let Some(i) = m
            .iter()
            .find(|(k, _)| *k == key)
            .and_then(|(_, w)| w.upgrade())
        {
            return i;
        }
    }
    let index = Arc::new(SearchIndex::build(tools.to_vec()));
    let mut m = memo.lock().unwrap_or_else(|p| p.into_inner());
    m.push((key.clone(), Arc::downgrade(&index)));
    drop(m);
    *LAST.lock().unwrap_or_else(|p| p.into_inner()) = Some((key, index.clone()));
    index
}

/// The answer of a search: an MCP tool result (text for the model, the same as
/// `structuredContent`), with the matches answered in full (`loaded`) and a few more names.
pub fn answer(args: &SearchArgs, index: &SearchIndex) -> (Value, Vec<Arc<AdvertisedTool>>) {
    let hits = index.search(&args.query, args.server.as_deref(), args.limit + MORE_NAMES);
    let (best, more) = hits.split_at(hits.len().min(args.limit));
    let full: Vec<Value> = best
        .iter()
        .map(|h| {
            json!({
                "name": h.tool.name,
                "server": h.tool.server,
                "description": h.tool.description,
                "inputSchema": h.tool.input_schema,
            })
        })
        .collect();
    let names: Vec<&str> = more.iter().map(|h| h.tool.name.as_str()).collect();
    let mut text = String::new();
    if best.is_empty() {
        text.push_str(&format!(
            "No deferred tool matched {:?}{}. Try other words, or an exact tool name.",
            args.query,
            args.server
                .as_deref()
                .map(|s| format!(" on server {s:?}"))
                .unwrap_or_default()
        ));
    } else {
        text.push_str(&format!(
            "{} tool{} loaded for this session; call {} by name:\n",
            best.len(),
            if best.len() == 1 { "" } else { "s" },
            if best.len() == 1 { "it" } else { "them" }
        ));
        for h in best {
            let schema = serde_json::to_string(&h.tool.input_schema).unwrap_or_default();
            text.push_str(&format!(
                "\n- {} (server {}): {}\n  inputSchema: {schema}\n",
                h.tool.name,
                h.tool.server,
                h.tool.description.replace('\n', "\n  ")
            ));
        }
        if !names.is_empty() {
            text.push_str(&format!(
                "\nMore matches (search for one by its name to load it): {}",
                names.join(", ")
            ));
        }
    }
    let result = json!({
        "content": [{"type": "text", "text": text}],
        "structuredContent": {
            "query": args.query,
            "tools": full,
            "more": names,
        },
        "isError": false,
    });
    (result, best.iter().map(|h| h.tool.clone()).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tool(server: &str, name: &str, desc: &str, params: &[&str]) -> Arc<AdvertisedTool> {
        let props: serde_json::Map<String, Value> = params
            .iter()
            .map(|p| (p.to_string(), json!({"type": "string"})))
            .collect();
        Arc::new(AdvertisedTool {
            name: format!("mcp__{server}__{name}"),
            description: desc.into(),
            input_schema: json!({"type": "object", "properties": props}),
            server: server.into(),
            extension: "mcp",
            kind: ToolKind::Tool { tool: name.into() },
            json: OnceLock::new(),
        })
    }

    #[test]
    fn tokenizes_snake_kebab_dots_and_camel_case() {
        let mut v = Vec::new();
        tokenize("listIssues get-file.contents HTTPServer read_2fa", &mut v);
        assert_eq!(
            v,
            ["list", "issue", "get", "file", "content", "http", "server", "read", "2", "fa"]
        );
        assert_eq!(stem("directories"), "directory");
        assert_eq!(stem("searching"), "search");
        assert_eq!(stem("status"), "status");
    }

    #[test]
    fn policy_follows_the_budget_never_and_always() {
        use DeferTools::*;
        assert_eq!(decide(&[(Auto, 10), (Auto, 10)], 20), [false, false]);
        assert_eq!(decide(&[(Auto, 10), (Auto, 11)], 20), [true, true]);
        assert_eq!(decide(&[(Never, 30), (Auto, 1)], 20), [false, true]);
        // `always` tools do not count toward the budget.
        assert_eq!(decide(&[(Always, 30), (Auto, 1)], 20), [true, false]);
    }

    #[test]
    fn exact_names_win_and_words_rank() {
        let tools = vec![
            tool(
                "gh",
                "search_issues",
                "Search issues and pull requests",
                &["q"],
            ),
            tool(
                "gh",
                "create_issue",
                "Open a new issue in a repository",
                &["owner", "repo", "title"],
            ),
            tool(
                "gh",
                "list_issues",
                "List the issues of a repository",
                &["owner", "repo"],
            ),
            tool("fs", "read_file", "Read a file's contents", &["path"]),
            tool("fs", "issue", "Something else entirely", &[]),
        ];
        let i = SearchIndex::build(tools);
        let h = i.search("open a new issue", None, 3);
        assert_eq!(h[0].tool.name, "mcp__gh__create_issue");
        let h = i.search("issue", None, 3);
        assert_eq!(h[0].tool.name, "mcp__fs__issue", "the bare name is exact");
        let h = i.search("mcp__gh__list_issues", None, 3);
        assert_eq!(h[0].tool.name, "mcp__gh__list_issues");
        let h = i.search("contents of a file", Some("gh"), 3);
        assert!(h.iter().all(|h| h.tool.server == "gh"));
        assert!(i.search("zzz", None, 3).is_empty());
    }

    #[test]
    fn a_query_is_read_up_to_its_term_bound() {
        let i = SearchIndex::build(vec![tool("s", "zebra", "Finds zebras", &[])]);
        // Terms are sorted and deduplicated before the bound: 32 distinct terms that all
        // sort before `zebra` leave it out.
        let many: Vec<String> = (0..MAX_QUERY_TERMS as u8)
            .map(|n| format!("a{}{}", (b'a' + n / 26) as char, (b'a' + n % 26) as char))
            .collect();
        let q = format!("{} zebra", many.join(" "));
        assert!(i.search(&q, None, 5).is_empty());
        let q = format!("{} zebra", many[..MAX_QUERY_TERMS - 1].join(" "));
        assert_eq!(i.search(&q, None, 5).len(), 1);
    }

    #[test]
    fn arguments_are_checked_by_name() {
        assert!(parse_args(&json!({})).unwrap_err().contains("query"));
        assert!(parse_args(&json!({"query": "x", "limit": 0}))
            .unwrap_err()
            .contains("limit"));
        assert!(parse_args(&json!({"query": "x", "other": 1}))
            .unwrap_err()
            .contains("other"));
        let long = "x".repeat(MAX_QUERY_BYTES + 1);
        assert!(parse_args(&json!({ "query": long }))
            .unwrap_err()
            .contains("query"));
        let a = parse_args(&json!({"query": " a ", "limit": 3, "server": "gh"})).unwrap();
        assert_eq!(
            (a.query.as_str(), a.limit, a.server.as_deref()),
            ("a", 3, Some("gh"))
        );
    }
}
