//! `albedo-mcp conformance-client <url>`: the client the official MCP conformance runner
//! (`@modelcontextprotocol/conformance ... client --command "<cmd>" --scenario <name>`)
//! drives. The runner starts a mock server for one scenario, runs `<cmd> <url>` with the
//! scenario's name in `MCP_CONFORMANCE_SCENARIO` (and, for some scenarios, a JSON
//! `MCP_CONFORMANCE_CONTEXT`; the prerelease runner also sets
//! `MCP_CONFORMANCE_PROTOCOL_VERSION`), and judges what it sees on the wire.
//!
//! It is built on the daemon's own connection code and nothing else: [`McpClient`] over an
//! [`HttpTransport`] with the daemon's TLS configuration, [`handshake::handshake`] to find the
//! era (`server/discover` first, else `initialize`), [`discovery::discover`] to list the
//! catalogue, and [`McpClient::request_with`] with the `x-mcp-header` annotations of
//! [`headers::param_headers`] for tool calls. A tool whose annotations break the spec's rules
//! is left out, as the daemon leaves it out of a session's tools.
//!
//! What it does, by scenario ([`plan`]): connect; list; then call the tools the context
//! names (`toolCalls`), or echo a tool's input schema back (`json-schema-2020-12-preservation`),
//! or call every usable tool with arguments made up from its schema, read every resource and
//! get every prompt. A request that fails does not stop the others (the runner judges every
//! request the scenario expects). It exits 0 when all of that worked, 1 with a message on
//! stderr otherwise, 2 for a bad command line or environment. Unlike the daemon it does not
//! hold `subscriptions/listen` open: it makes its calls and leaves.
//!
//! Unlike the daemon's client, this one declares the `elicitation` capability (form mode:
//! `elicitation: {form: {}}` in `initialize` and in every 2026-07-28 request's `_meta`) and
//! answers for the user with [`Elicitation::AcceptDefaults`]: a form is accepted with each
//! property's `default` (SEP-1034), a URL-mode request or a form it cannot fill in is declined.
//! That answers a 2025-era server's `elicitation/create` request, and a 2026-07-28
//! `input_required` whose `inputRequests` are all `elicitation/create`: the client core sends
//! the call again with a new id, the answers as `inputResponses` and the `requestState`
//! echoed (MRTR). An `input_required` asking for anything else (sampling, roots) fails the
//! request; one that asks only for its `requestState` back is followed as in the daemon.
//! A 2025-era server may send its `elicitation/create` on the listening GET stream (the
//! TypeScript SDK does when the request is not tied to the call), so with a 2025-era server
//! that stream is opened after the handshake, as the daemon opens it, and the catalogue is
//! listed once it is open or refused (at most 2 s).
//!
//! A server that answers 401 (or 403 `insufficient_scope`) is signed in to headless through
//! [`crate::oauth`] (`auth`: the runner's mock authorization server approves at once), and
//! the refused request is sent again with `Authorization: Bearer`.
//!
//! The runner prints `http://localhost:PORT`; the host `localhost` is dialled as 127.0.0.1
//! (the mock servers are made to bind 127.0.0.1, and tests talk to loopback IPv4 only), for
//! the sign-in's requests too, while OAuth compares the URLs (the `resource`, issuers) as the
//! runner gave them.

mod auth;

use crate::client::handshake::{self, ServerHello};
use crate::client::{discovery, Elicitation, McpClient};
use crate::oauth::Fetcher;
use crate::protocol::headers;
use crate::protocol::model::Catalogue;
use crate::transport::http::ListenState;
use crate::transport::http::{HttpSpec, HttpTransport};
use crate::transport::{tls, SharedTransport, Transport};
use serde_json::{json, Map, Value};
use std::time::Duration;

pub const ENV_SCENARIO: &str = "MCP_CONFORMANCE_SCENARIO";
pub const ENV_CONTEXT: &str = "MCP_CONFORMANCE_CONTEXT";
pub const ENV_PROTOCOL_VERSION: &str = "MCP_CONFORMANCE_PROTOCOL_VERSION";

/// The handshake, and each request, get this long (the runner allows 30 s in all).
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// How long closing (the session's DELETE) may take.
const CLOSE_TIMEOUT: Duration = Duration::from_secs(3);
/// How long the listening GET stream of a 2025-era server may take to open (or be refused)
/// before the run goes on without waiting, and how often its state is looked at meanwhile.
const LISTEN_OPEN_WAIT: Duration = Duration::from_secs(2);
const LISTEN_POLL: Duration = Duration::from_millis(10);

const PREFIX: &str = "albedo-mcp conformance-client";

/// The focal tool and the echo tool of `json-schema-2020-12-preservation`.
const SCHEMA_TOOL: &str = "json_schema_2020_12_tool";
const ECHO_TOOL: &str = "json_schema_echo";

/// What a scenario asks of the client after connecting and listing the catalogue.
#[derive(Debug, Clone, PartialEq)]
pub enum Plan {
    /// Connect and list, nothing more.
    ListOnly,
    /// Call every usable tool, with arguments made up from its input schema.
    CallTools,
    /// Call every usable tool, read every resource, get every prompt.
    Exercise,
    /// Call exactly these tools with these arguments (the context's `toolCalls`).
    Calls(Vec<(String, Value)>),
    /// Call `tool` with `{"schema": <inputSchema of source>}`.
    EchoSchema { source: String, tool: String },
}

/// The plan for a scenario and its context.
pub fn plan(scenario: &str, context: Option<&Value>) -> Plan {
    if let Some(calls) = context.and_then(context_calls) {
        return Plan::Calls(calls);
    }
    match scenario {
        // The handshake is the test; the mock has no catalogue.
        "initialize" => Plan::ListOnly,
        // The schema holds a network `$ref`: list it, never fetch it, and call nothing (the
        // mock does not implement tools/call).
        "json-schema-ref-no-deref" => Plan::ListOnly,
        "json-schema-2020-12-preservation" => Plan::EchoSchema {
            source: SCHEMA_TOOL.to_owned(),
            tool: ECHO_TOOL.to_owned(),
        },
        "tools_call" | "sse-retry" | "request-metadata" | "http-invalid-tool-headers" => {
            Plan::CallTools
        }
        // http-standard-headers, and anything else: use every kind of request once.
        _ => Plan::Exercise,
    }
}

/// `{"toolCalls": [{"name": ..., "arguments": {...}}, ...]}` from the runner's context.
fn context_calls(context: &Value) -> Option<Vec<(String, Value)>> {
    let calls = context.get("toolCalls")?.as_array()?;
    Some(
        calls
            .iter()
            .filter_map(|c| {
                let name = c.get("name")?.as_str()?.to_owned();
                let args = c.get("arguments").cloned().unwrap_or_else(|| json!({}));
                Some((name, args))
            })
            .collect(),
    )
}

/// Arguments for a tool call made up from its input schema: every required property gets a
/// value of its type (its `const`, `default` or first `enum` value when it has one).
pub fn example_arguments(schema: &Value) -> Value {
    let mut out = Map::new();
    let props = schema.get("properties").and_then(Value::as_object);
    let required = schema
        .get("required")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str);
    for name in required {
        let prop = props.and_then(|p| p.get(name)).unwrap_or(&Value::Null);
        out.insert(name.to_owned(), example_value(prop));
    }
    Value::Object(out)
}

fn example_value(prop: &Value) -> Value {
    if let Some(v) = prop.get("const").or_else(|| prop.get("default")) {
        return v.clone();
    }
    if let Some(v) = prop
        .get("enum")
        .and_then(Value::as_array)
        .and_then(|a| a.first())
    {
        return v.clone();
    }
    let ty = match prop.get("type") {
        Some(Value::String(s)) => s.as_str(),
        // A list of types: the first one that is not null.
        Some(Value::Array(a)) => a
            .iter()
            .filter_map(Value::as_str)
            .find(|t| *t != "null")
            .unwrap_or("string"),
        _ => "string",
    };
    match ty {
        "integer" => json!(2),
        "number" => json!(3),
        "boolean" => json!(true),
        "object" => example_arguments(prop),
        "array" => json!([]),
        "null" => Value::Null,
        _ => json!("conformance"),
    }
}

/// Arguments for `prompts/get`: every required argument gets a string.
fn example_prompt_arguments(prompt: &Value) -> Option<Value> {
    let args = prompt.get("arguments")?.as_array()?;
    let mut out = Map::new();
    for a in args {
        let required = a.get("required").and_then(Value::as_bool).unwrap_or(false);
        if let (true, Some(name)) = (required, a.get("name").and_then(Value::as_str)) {
            out.insert(name.to_owned(), json!("conformance"));
        }
    }
    (!out.is_empty()).then_some(Value::Object(out))
}

/// The server URL as dialled: `localhost` becomes 127.0.0.1.
pub fn dial_url(raw: &str) -> Result<url::Url, String> {
    let mut url = url::Url::parse(raw).map_err(|e| format!("{raw:?} is not a URL: {e}"))?;
    if url.host_str() == Some("localhost") {
        url.set_host(Some("127.0.0.1"))
            .map_err(|e| format!("cannot dial {raw:?} as 127.0.0.1: {e}"))?;
    }
    Ok(url)
}

/// A URL of the sign-in (metadata, authorization and token endpoints) as dialled: like
/// [`dial_url`]; the URL itself (its issuer, its `resource`) is compared as the runner gave it.
fn dial_loopback(u: &url::Url) -> url::Url {
    let mut d = u.clone();
    if d.host_str() == Some("localhost") {
        let _ = d.set_host(Some("127.0.0.1"));
    }
    d
}

/// The tools the daemon would advertise from an HTTP server: those whose `x-mcp-header`
/// annotations follow the spec's rules, with the headers they mirror.
fn usable_tools(cat: &Catalogue) -> Vec<(String, Value, Vec<headers::ParamHeader>)> {
    let mut out = Vec::new();
    for t in &cat.tools {
        let Some(name) = t.get("name").and_then(Value::as_str) else {
            continue;
        };
        let schema = t
            .get("inputSchema")
            .cloned()
            .unwrap_or_else(|| json!({"type": "object"}));
        match headers::param_headers(&schema) {
            Ok(hs) => out.push((name.to_owned(), schema, hs)),
            Err(rule) => note(&format!("tool {name:?} left out: {rule}")),
        }
    }
    out
}

fn note(msg: &str) {
    eprintln!("{PREFIX}: {msg}");
}

/// Everything after the command line: connect, do the plan, close.
struct Run {
    client: McpClient,
    transport: std::sync::Arc<HttpTransport>,
    /// Signing in when the server asks for it (`auth`).
    auth: tokio::sync::Mutex<auth::Auth>,
}

impl Run {
    /// `server_url` as the runner gave it (what OAuth compares), `url` as dialled.
    fn open(server_url: &str, url: url::Url, context: Option<&Value>) -> Result<Run, String> {
        let service = auth::service(context)?;
        let tls = tls::client_config(&[]).map_err(|e| e.to_string())?;
        let (client, sink, _events) = McpClient::with_elicitation(Elicitation::AcceptDefaults);
        let transport = HttpTransport::start(
            HttpSpec {
                url,
                headers: Vec::new(),
                tls: tls.clone(),
            },
            sink,
        )
        .map_err(|e| e.to_string())?;
        let shared: SharedTransport = transport.clone();
        client.attach(shared);
        let fetcher = Fetcher::new(tls).with_dial(dial_loopback);
        let auth = auth::Auth::new(
            fetcher,
            server_url,
            auth::configured_client(context),
            service,
            transport.clone(),
        );
        Ok(Run {
            client,
            transport,
            auth: tokio::sync::Mutex::new(auth),
        })
    }

    /// The handshake, signing in when it is refused for want of a token.
    async fn handshake(&self) -> Result<ServerHello, String> {
        let mut attempt = auth::Attempt::default();
        loop {
            match handshake::handshake(&self.client, HANDSHAKE_TIMEOUT).await {
                Ok(h) => return Ok(h),
                Err(e) => match auth::of_handshake(&e) {
                    Some(r) => {
                        note(&format!("connecting: {e}"));
                        self.auth.lock().await.recover(&r, &mut attempt).await?;
                    }
                    None => return Err(format!("connecting failed: {e}")),
                },
            }
        }
    }

    /// Listing the catalogue, signing in when it is refused for want of a token or scope.
    async fn discover(&self, hello: &ServerHello) -> Result<Catalogue, String> {
        let mut attempt = auth::Attempt::default();
        loop {
            match discovery::discover(&self.client, hello, REQUEST_TIMEOUT).await {
                Ok(c) => return Ok(c),
                Err(discovery::DiscoveryError::Rpc(e)) if auth::of_rpc(&e).is_some() => {
                    note(&format!("listing the catalogue: {e}"));
                    let r = auth::of_rpc(&e).expect("checked");
                    self.auth.lock().await.recover(&r, &mut attempt).await?;
                }
                Err(e) => return Err(format!("listing the catalogue failed: {e}")),
            }
        }
    }

    /// Open the listening GET stream of a 2025-era session, where a server sends the
    /// requests it does not tie to one of ours (the SDK's `elicitation/create` among them),
    /// and wait until it is open or refused, at most [`LISTEN_OPEN_WAIT`].
    async fn listen(&self) {
        self.transport.open_listen_stream();
        let waited = tokio::time::timeout(LISTEN_OPEN_WAIT, async {
            while matches!(
                self.transport.listen_state(),
                ListenState::NotOpened | ListenState::Opening
            ) {
                tokio::time::sleep(LISTEN_POLL).await;
            }
        })
        .await;
        match (waited, self.transport.listen_state()) {
            (Err(_), _) => note(&format!(
                "the listening stream did not open within {} ms; going on",
                LISTEN_OPEN_WAIT.as_millis()
            )),
            (Ok(()), ListenState::Open) => {}
            (Ok(()), state) => note(&format!("no listening stream: {state:?}")),
        }
    }

    async fn close(&self) {
        self.client.close();
        let _ = tokio::time::timeout(CLOSE_TIMEOUT, self.transport.wait_closed()).await;
    }

    async fn request(
        &self,
        method: &str,
        params: Value,
        param_headers: &[headers::ParamHeader],
    ) -> Result<Value, String> {
        let what = match params.get("name").or_else(|| params.get("uri")) {
            Some(Value::String(n)) => format!("{method} {n:?}"),
            _ => method.to_owned(),
        };
        let mut attempt = auth::Attempt::default();
        let result = loop {
            match self
                .client
                .request_with(method, Some(params.clone()), REQUEST_TIMEOUT, param_headers)
                .await
            {
                Ok(v) => break v,
                Err(e) => match auth::of_rpc(&e) {
                    Some(r) => {
                        note(&format!("{what}: {e}"));
                        self.auth
                            .lock()
                            .await
                            .recover(&r, &mut attempt)
                            .await
                            .map_err(|a| format!("{what} failed: {e}; {a}"))?;
                    }
                    None => return Err(format!("{what} failed: {e}")),
                },
            }
        };
        discovery::check_complete(&result).map_err(|e| format!("{what}: {e}"))?;
        if result.get("isError").and_then(Value::as_bool) == Some(true) {
            note(&format!("{what}: the tool reported an error (isError)"));
        } else {
            note(&format!("{what}: ok"));
        }
        Ok(result)
    }

    async fn work(&self, plan: &Plan, expected_version: Option<&str>) -> Result<(), String> {
        let hello: ServerHello = self.handshake().await?;
        note(&format!(
            "connected: protocol {} ({:?} era)",
            hello.protocol.version, hello.protocol.era
        ));
        if let Some(v) = expected_version {
            if v != hello.protocol.version {
                note(&format!(
                    "the runner targets {v}; the server and albedo settled on {}",
                    hello.protocol.version
                ));
            }
        }
        if hello.protocol.era == crate::protocol::Era::Legacy {
            self.listen().await;
        }
        let cat = self.discover(&hello).await?;
        note(&format!(
            "catalogue: {} tools, {} resources, {} resource templates, {} prompts",
            cat.tools.len(),
            cat.resources.len(),
            cat.resource_templates.len(),
            cat.prompts.len()
        ));
        let tools = usable_tools(&cat);
        let mut failed = Failures::default();
        match plan {
            Plan::ListOnly => {}
            Plan::CallTools | Plan::Exercise => {
                for (name, schema, hs) in &tools {
                    let params = json!({"name": name, "arguments": example_arguments(schema)});
                    failed.note(self.request("tools/call", params, hs).await);
                }
                if *plan == Plan::Exercise {
                    self.read_and_get(&cat, &mut failed).await;
                }
            }
            Plan::Calls(calls) => {
                for (name, args) in calls {
                    let Some((_, _, hs)) = tools.iter().find(|(n, _, _)| n == name) else {
                        failed.add(format!(
                            "the runner asks for tool {name:?}, which the server does not offer usably"
                        ));
                        continue;
                    };
                    let params = json!({"name": name, "arguments": args});
                    failed.note(self.request("tools/call", params, hs).await);
                }
            }
            Plan::EchoSchema { source, tool } => {
                let schema = cat
                    .tools
                    .iter()
                    .find(|t| t.get("name").and_then(Value::as_str) == Some(source))
                    .and_then(|t| t.get("inputSchema"))
                    .cloned()
                    .ok_or_else(|| format!("the server offers no tool {source:?}"))?;
                let Some((_, _, hs)) = tools.iter().find(|(n, _, _)| n == tool) else {
                    return Err(format!("the server offers no usable tool {tool:?}"));
                };
                let params = json!({"name": tool, "arguments": {"schema": schema}});
                failed.note(self.request("tools/call", params, hs).await);
            }
        }
        failed.outcome()
    }

    async fn read_and_get(&self, cat: &Catalogue, failed: &mut Failures) {
        for r in &cat.resources {
            if let Some(uri) = r.get("uri").and_then(Value::as_str) {
                failed.note(
                    self.request("resources/read", json!({ "uri": uri }), &[])
                        .await,
                );
            }
        }
        for p in &cat.prompts {
            if let Some(name) = p.get("name").and_then(Value::as_str) {
                let mut params = json!({ "name": name });
                if let Some(args) = example_prompt_arguments(p) {
                    params["arguments"] = args;
                }
                failed.note(self.request("prompts/get", params, &[]).await);
            }
        }
    }
}

/// The requests of a run that failed. A failed request does not stop the run, as a failed
/// call does not stop a session's other calls: the runner sees every request the scenario
/// expects, and the run still fails.
#[derive(Debug, Default)]
struct Failures(Vec<String>);

impl Failures {
    fn note<T>(&mut self, r: Result<T, String>) {
        if let Err(e) = r {
            self.add(e);
        }
    }

    fn add(&mut self, e: String) {
        note(&e);
        self.0.push(e);
    }

    fn outcome(self) -> Result<(), String> {
        match self.0.as_slice() {
            [] => Ok(()),
            [only] => Err(only.clone()),
            [first, ..] => Err(format!(
                "{} requests failed, the first: {first}",
                self.0.len()
            )),
        }
    }
}

fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_env("ALBEDO_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .try_init();
}

/// Run one scenario against `url`; the process's exit code.
pub fn run(url: &str) -> i32 {
    init_logging();
    let scenario = std::env::var(ENV_SCENARIO).unwrap_or_default();
    let context = match std::env::var(ENV_CONTEXT) {
        Ok(raw) if !raw.trim().is_empty() => match serde_json::from_str::<Value>(&raw) {
            Ok(v) => Some(v),
            Err(e) => {
                note(&format!("{ENV_CONTEXT} is not JSON: {e}"));
                return 2;
            }
        },
        _ => None,
    };
    let expected_version = std::env::var(ENV_PROTOCOL_VERSION)
        .ok()
        .filter(|v| !v.is_empty());
    let dial = match dial_url(url) {
        Ok(u) => u,
        Err(e) => {
            note(&e);
            return 2;
        }
    };
    let plan = plan(&scenario, context.as_ref());
    let shown = if scenario.is_empty() {
        "(none)"
    } else {
        scenario.as_str()
    };
    note(&format!("scenario {shown}: {plan:?}"));
    actix::System::new().block_on(async move {
        let run = match Run::open(url, dial, context.as_ref()) {
            Ok(r) => r,
            Err(e) => {
                note(&format!("cannot start the HTTP transport: {e}"));
                return 1;
            }
        };
        let outcome = run.work(&plan, expected_version.as_deref()).await;
        run.close().await;
        match outcome {
            Ok(()) => {
                note(&format!("scenario {shown}: done"));
                0
            }
            Err(e) => {
                note(&format!("scenario {shown} failed: {e}"));
                1
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plans_follow_the_scenario_and_the_context() {
        assert_eq!(plan("initialize", None), Plan::ListOnly);
        assert_eq!(plan("tools_call", None), Plan::CallTools);
        assert_eq!(plan("http-standard-headers", None), Plan::Exercise);
        assert_eq!(plan("json-schema-ref-no-deref", None), Plan::ListOnly);
        assert!(matches!(
            plan("json-schema-2020-12-preservation", None),
            Plan::EchoSchema { .. }
        ));
        let ctx = json!({"name": "http-custom-headers", "toolCalls": [
            {"name": "a", "arguments": {"region": "x"}}, {"name": "b"}]});
        assert_eq!(
            plan("http-custom-headers", Some(&ctx)),
            Plan::Calls(vec![
                ("a".into(), json!({"region": "x"})),
                ("b".into(), json!({}))
            ])
        );
    }

    #[test]
    fn example_arguments_fill_required_properties_by_type() {
        let schema = json!({"type": "object", "properties": {
            "a": {"type": "number"}, "n": {"type": "integer"}, "s": {"type": "string"},
            "e": {"type": "string", "enum": ["x", "y"]}, "b": {"type": ["null", "boolean"]},
            "o": {"type": "object", "properties": {"k": {"type": "string"}}, "required": ["k"]},
            "optional": {"type": "string"}},
            "required": ["a", "n", "s", "e", "b", "o"]});
        assert_eq!(
            example_arguments(&schema),
            json!({"a": 3, "n": 2, "s": "conformance", "e": "x", "b": true,
                   "o": {"k": "conformance"}})
        );
        assert_eq!(example_arguments(&json!({"type": "object"})), json!({}));
    }

    #[test]
    fn failed_requests_are_all_kept_and_the_first_is_named() {
        assert_eq!(Failures::default().outcome(), Ok(()));
        let mut f = Failures::default();
        f.note(Ok::<_, String>(()));
        f.note::<()>(Err("a failed".into()));
        assert_eq!(f.outcome(), Err("a failed".to_owned()));
        let mut f = Failures::default();
        f.add("a failed".into());
        f.note::<()>(Err("b failed".into()));
        assert_eq!(
            f.outcome(),
            Err("2 requests failed, the first: a failed".to_owned())
        );
    }

    #[test]
    fn localhost_is_dialled_as_ipv4_loopback() {
        assert_eq!(
            dial_url("http://localhost:4321/mcp").unwrap().as_str(),
            "http://127.0.0.1:4321/mcp"
        );
        assert_eq!(
            dial_url("https://example.com/mcp").unwrap().as_str(),
            "https://example.com/mcp"
        );
        assert!(dial_url("not a url").is_err());
    }

    #[test]
    fn tools_breaking_header_rules_are_left_out() {
        let cat = Catalogue {
            tools: vec![
                json!({"name": "ok", "inputSchema": {"type": "object", "properties": {
                    "region": {"type": "string", "x-mcp-header": "Region"}}}}),
                json!({"name": "bad", "inputSchema": {"type": "object", "properties": {
                    "score": {"type": "number", "x-mcp-header": "Score"}}}}),
            ],
            ..Catalogue::default()
        };
        let names: Vec<_> = usable_tools(&cat).into_iter().map(|t| t.0).collect();
        assert_eq!(names, vec!["ok"]);
    }
}
