//! The tools' routes: a session's tools as the model sees them (and one tool), its deferred
//! tools, and calls, answered with the server's result as it came (`"outcome": "ok"` first, the
//! result's own bytes after) or an error whose `outcome` says whether the call ran.
//!
//! Owns: those handlers and the call's answer. Must not touch: transports (a call goes to
//! the session's Composition, which routes it to its connection).

use super::*;
use crate::protocol::params;
use serde_json::value::RawValue;
use std::borrow::Cow;

/// The query of `GET /sessions/{id}/tools` (other parameters are ignored, as before it had
/// one; `all` that is not `true` or `false` is a 400).
#[derive(Deserialize, Default)]
pub(super) struct ToolsQuery {
    /// Also the deferred tools, each with `"deferred": true` (`mcp__search` is left out:
    /// the list holds everything it could find).
    #[serde(default)]
    all: bool,
}

/// `{"deferred":true,` + the rest of a tool's JSON object.
pub(super) fn flagged(json: &str) -> String {
    match json.strip_prefix('{') {
        Some(rest) if rest.starts_with('}') => "{\"deferred\":true}".to_owned(),
        Some(rest) => format!("{{\"deferred\":true,{rest}"),
        None => json.to_owned(),
    }
}

pub(super) async fn list_tools(
    state: web::Data<AppState>,
    path: web::Path<String>,
    query: web::Query<ToolsQuery>,
) -> Result<HttpResponse, ApiError> {
    let s = session(&state, &path)?;
    let snap = s.shared.load();
    // Each tool's JSON is kept with the tool (and tools are shared between sessions): the
    // list is copied together, not built from 5,000 deep copies of descriptions and schemas.
    let tools = &snap.table.tools;
    let deferred: &[Arc<crate::advertise::AdvertisedTool>] =
        if query.all { &snap.deferred.tools } else { &[] };
    let mut body = Slices::default();
    body.push(format!("{{\"generation\":{},\"tools\":[", snap.table.generation).as_bytes());
    let mut first = true;
    for t in tools {
        if query.all && t.kind == ToolKind::Search {
            continue;
        }
        if !first {
            body.push(b",");
        }
        first = false;
        body.push(t.json().get().as_bytes());
    }
    for t in deferred {
        if !first {
            body.push(b",");
        }
        first = false;
        body.push(flagged(t.json().get()).as_bytes());
    }
    body.push(b"]}");
    Ok(body.answer())
}

/// A JSON answer written a slice of about [`SLICE`] bytes at a time, each slice a buffer of
/// its own: a tool list of 5,000 tools (2 MB) is neither one fresh buffer of its size nor
/// copied whole into actix-web's write buffer (which grew to 2 MB, a fresh one per
/// connection), but slices the allocator reuses, each copied while it is in the cache.
#[derive(Default)]
struct Slices {
    done: Vec<web::Bytes>,
    len: usize,
    current: Vec<u8>,
}

impl Slices {
    fn push(&mut self, part: &[u8]) {
        if !self.current.is_empty() && self.current.len() + part.len() > SLICE {
            self.done
                .push(web::Bytes::from(std::mem::take(&mut self.current)));
        }
        if self.current.capacity() == 0 {
            self.current.reserve(SLICE.max(part.len()));
        }
        self.current.extend_from_slice(part);
        self.len += part.len();
    }

    fn answer(mut self) -> HttpResponse {
        let mut r = json_ok();
        if self.done.is_empty() {
            return r.body(self.current);
        }
        self.done.push(web::Bytes::from(self.current));
        let slices =
            futures_util::stream::iter(self.done.into_iter().map(Ok::<_, actix_web::Error>));
        r.body(actix_web::body::SizedStream::new(self.len as u64, slices))
    }
}

pub(super) async fn get_tool(
    state: web::Data<AppState>,
    path: web::Path<(String, String)>,
) -> Result<HttpResponse, ApiError> {
    let (id, name) = path.into_inner();
    body::tool_name(&name)?;
    let s = session(&state, &id)?;
    let snap = s.shared.load();
    let (t, deferred) = snap
        .lookup(&name)
        .ok_or_else(|| ApiError::not_found("tool"))?;
    let json = t.json().get();
    Ok(HttpResponse::Ok()
        .content_type(actix_web::http::header::ContentType::json())
        .body(if deferred {
            flagged(json)
        } else {
            json.to_owned()
        }))
}

/// `PUT /sessions/{id}/defer-tools` `{"defer_tools": "auto" | "never" | "always" | null}`:
/// the session's own `deferTools` for every server (`null`: each server's setting). Tools
/// loaded during the session stay loaded. Answers the session's view.
pub(super) async fn put_session_defer_tools(
    state: web::Data<AppState>,
    path: web::Path<String>,
    Strict(body): Strict<DeferBody>,
) -> Result<HttpResponse, ApiError> {
    let s = session(&state, &path)?;
    let choice = defer_choice(Some(&body.defer_tools))?;
    s.addr.send(SetDefer(choice)).await.map_err(mailbox)?;
    let view = s.addr.send(GetView).await.map_err(mailbox)?;
    Ok(HttpResponse::Ok().json(view))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct DeferBody {
    defer_tools: Value,
}

/// A call of `mcp__search`: the answer is a tool result (text and `structuredContent`), and
/// the tools it answers in full are loaded for the rest of the session.
pub(super) async fn call_search(s: &SessionHandle, args: &Value) -> Result<HttpResponse, ApiError> {
    let args = crate::toolsearch::parse_args(args).map_err(|m| {
        let mut e = ApiError::new(StatusCode::BAD_REQUEST, "bad_request", m);
        e.extra = Some(json!({"outcome": "not_run"}));
        e
    })?;
    let snap = s.shared.load();
    let Some(index) = snap.index.clone() else {
        return Err(ApiError::not_run(
            StatusCode::NOT_FOUND,
            "no_such_tool",
            "no tool is deferred in this session: mcp__search is not offered",
        ));
    };
    drop(snap);
    let (mut result, matched) = crate::toolsearch::answer(&args, &index);
    let names: Vec<String> = matched.iter().map(|t| t.name.clone()).collect();
    let generation = s
        .addr
        .send(Load { names, wake: None })
        .await
        .map_err(mailbox)?;
    if let Some(m) = result.as_object_mut() {
        m.insert("outcome".into(), Value::from("ok"));
        m.insert("generation".into(), Value::from(generation));
    }
    Ok(HttpResponse::Ok().json(result))
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct CallBody {
    /// Kept as the caller's text: checked (valid JSON, an object) and passed on.
    #[serde(default)]
    arguments: Option<Box<RawValue>>,
}

/// Why a session has no tool by that name: its server is left out until the user signs in
/// (503 `needs_sign_in`, as its calls answer), or there is no such tool (404). The session's
/// view is asked only on this path.
pub(super) async fn missing_tool(s: &SessionHandle, name: &str) -> ApiError {
    let server = match name.split_once('/') {
        Some((server, _)) => Some(server),
        None => name
            .strip_prefix("mcp__")
            .and_then(|rest| rest.split_once("__"))
            .map(|(server, _)| server),
    };
    if let (Some(server), Ok(view)) = (server, s.addr.send(GetView).await) {
        let needs = view.servers.iter().any(|v| {
            v.name == server && v.state == crate::actors::runtime::ServerState::NeedsSignIn
        });
        if needs {
            return ApiError::not_run(
                StatusCode::SERVICE_UNAVAILABLE,
                "needs_sign_in",
                format!(
                    "the request to {server:?} did not run: the server needs the user to sign in \
                     (albedo-mcp mcp login {server}, or PUT /auth/logins/mcp:{server})"
                ),
            );
        }
    }
    ApiError::not_run(
        StatusCode::NOT_FOUND,
        "no_such_tool",
        format!("no tool {name:?} in this session"),
    )
}

/// The call route as actix-web's router reaches it: a path whose session id or tool name
/// holds a `%` (the hot lane, [`super::hot`], leaves those to the router), or an app without
/// the hot lane.
pub(super) async fn call_tool(
    state: web::Data<AppState>,
    req: HttpRequest,
    Optional(body): Optional<CallBody>,
) -> Result<HttpResponse, ApiError> {
    let (id, name) = call_path(&req)?;
    call_at(&state, &id, &name, body).await
}

/// A call to tool `name` of session `id`, its body read: what both ways to the call route
/// run.
pub(super) async fn call_at(
    state: &AppState,
    id: &str,
    name: &str,
    body: CallBody,
) -> Result<HttpResponse, ApiError> {
    body::tool_name(name)?;
    let s = session(state, id)?;
    let snap = s.shared.load();
    let Some((tool, deferred)) = snap.lookup(name).map(|(t, d)| (t.clone(), d)) else {
        return Err(missing_tool(&s, name).await);
    };
    // `null` or left out is `{}`.
    let args = match body.arguments {
        Some(raw) => raw,
        None => {
            RawValue::from_string("{}".to_owned()).map_err(|e| ApiError::internal(e.to_string()))?
        }
    };
    if args.get().trim_start().as_bytes().first() != Some(&b'{') {
        return Err(ApiError::not_run(
            StatusCode::BAD_REQUEST,
            "bad_request",
            "`arguments` must be an object",
        ));
    }
    // Passed on unparsed, the arguments are held to what a tree would take.
    if let Some(why) = params::tree_refusal(args.get(), params::MAX_ARGUMENTS_NESTING) {
        return Err(ApiError::not_run(
            StatusCode::BAD_REQUEST,
            "bad_request",
            format!("invalid JSON body: `arguments` holds {why}"),
        ));
    }
    // A tool called stays loaded whatever the policy decides later; a deferred tool called
    // by name is loaded for the rest of the session; the first call to a lazy server's tool
    // dials it (the call waits for the dial).
    if tool.kind != ToolKind::Search {
        snap.used.note(&tool.name);
    }
    let wake = tool.kind != ToolKind::Search && snap.lazy.contains(&tool.server);
    if deferred || wake {
        let load = Load {
            names: if deferred {
                vec![tool.name.clone()]
            } else {
                Vec::new()
            },
            wake: wake.then(|| tool.server.clone()),
        };
        s.addr.send(load).await.map_err(mailbox)?;
    }
    let target = match &tool.kind {
        ToolKind::Tool { tool } => CallTarget::Tool {
            name: tool.clone(),
            arguments: args,
        },
        // Rare: these read their arguments as a tree.
        ToolKind::ReadResource => match args_tree(&args)?.get("uri").and_then(Value::as_str) {
            Some(uri) => CallTarget::ReadResource {
                uri: uri.to_owned(),
            },
            None => {
                return Err(ApiError::not_run(
                    StatusCode::BAD_REQUEST,
                    "bad_request",
                    "read_resource needs a string `uri`",
                ));
            }
        },
        ToolKind::GetPrompt => {
            let mut m = match args_tree(&args)? {
                Value::Object(m) => m,
                _ => serde_json::Map::new(),
            };
            match m.remove("name") {
                Some(Value::String(name)) => CallTarget::GetPrompt {
                    name,
                    arguments: m.remove("arguments").unwrap_or_else(|| json!({})),
                },
                _ => {
                    return Err(ApiError::not_run(
                        StatusCode::BAD_REQUEST,
                        "bad_request",
                        "get_prompt needs a string `name`",
                    ));
                }
            }
        }
        ToolKind::Search => {
            drop(snap);
            return call_search(&s, &args_tree(&args)?).await;
        }
    };
    let conn = snap.conns.get(&tool.server).cloned().ok_or_else(|| {
        ApiError::not_run(
            StatusCode::SERVICE_UNAVAILABLE,
            "unavailable",
            format!("server {:?} has no connection in this session", tool.server),
        )
    })?;
    drop(snap);
    // An actix-web handler is a task of its worker's `LocalSet`.
    match conn.call_local(target).await {
        Ok(result) => Ok(ok_answer(result)),
        Err(e) => Err(call_error(e)),
    }
}

/// The session id and tool name of a call's path, borrowed from it when they hold no `%`
/// (decoding would change nothing), else decoded as `web::Path` decodes them.
fn call_path(req: &HttpRequest) -> Result<(Cow<'_, str>, Cow<'_, str>), ApiError> {
    let m = req.match_info();
    if let (Some(id), Some(name)) = (m.get("id"), m.get("name")) {
        if !id.contains('%') && !name.contains('%') {
            return Ok((Cow::Borrowed(id), Cow::Borrowed(name)));
        }
    }
    let (id, name): (String, String) = m.load().map_err(|e| {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            "bad_request",
            format!("a path parameter is not valid: {e}"),
        )
    })?;
    Ok((Cow::Owned(id), Cow::Owned(name)))
}

/// A call's arguments read as a tree (the built-in tools' and the resource and prompt tools').
fn args_tree(args: &RawValue) -> Result<Value, ApiError> {
    serde_json::from_str(args.get()).map_err(|e| {
        ApiError::not_run(
            StatusCode::BAD_REQUEST,
            "bad_request",
            format!("`arguments` could not be read: {e}"),
        )
    })
}

/// A call's answer: the result's keys and `"outcome": "ok"`. The result goes out as the text
/// the server sent, `outcome` put in front of its keys, never parsed into a tree and written
/// again (`ResultText`). A result that is not an object, or that has an `outcome` key of its
/// own, is read as a tree: albedo's `outcome` replaces the server's, or the result is put
/// under `result`.
pub(super) fn ok_answer(result: ResultText) -> HttpResponse {
    let (object, outcome_key) = (result.head().object, result.head().outcome_key);
    if object && !outcome_key {
        let empty = result.as_bytes()[1..]
            .iter()
            .find(|b| !b.is_ascii_whitespace())
            == Some(&b'}');
        if empty {
            return bytes_answer([web::Bytes::from_static(br#"{"outcome":"ok"}"#)]);
        }
        // `{` + the result's text after its own `{`.
        let text = result.into_bytes();
        return bytes_answer([
            web::Bytes::from_static(br#"{"outcome":"ok","#),
            text.slice(1..),
        ]);
    }
    match result.to_value() {
        Ok(Value::Object(mut m)) => {
            m.insert("outcome".into(), Value::from("ok"));
            large_json(Value::Object(m))
        }
        Ok(other) => large_json(json!({"outcome": "ok", "result": other})),
        Err(e) => HttpResponse::InternalServerError().json(json!({"error": {
            "code": "internal", "message": format!("the result could not be read: {e}")}})),
    }
}

/// A JSON answer made of `parts` (shared, not copied; the list of parts on the stack); one
/// over [`SLICE`] goes out a slice at a time.
pub(super) fn bytes_answer<const N: usize>(parts: [web::Bytes; N]) -> HttpResponse {
    let mut r = json_ok();
    let len: usize = parts.iter().map(|p| p.len()).sum();
    if len <= SLICE {
        // One part goes as it is (a clone of a `Bytes` made from a `Vec` allocates); more
        // are written into one buffer.
        let mut parts = parts.into_iter();
        if N == 1 {
            if let Some(one) = parts.next() {
                return r.body(one);
            }
        }
        let mut body = Vec::with_capacity(len);
        for p in parts {
            body.extend_from_slice(&p);
        }
        return r.body(body);
    }
    let slices = futures_util::stream::iter(parts.into_iter().flat_map(|p| {
        (0..p.len())
            .step_by(SLICE)
            .map(move |i| Ok::<_, actix_web::Error>(p.slice(i..(i + SLICE).min(p.len()))))
    }));
    r.body(actix_web::body::SizedStream::new(len as u64, slices))
}

/// `200 OK` with `Content-Type: application/json`, a static value: `ContentType::json()`
/// copies the type's text into a new value on every answer.
fn json_ok() -> actix_web::HttpResponseBuilder {
    let mut r = HttpResponse::Ok();
    r.insert_header((
        actix_web::http::header::CONTENT_TYPE,
        actix_web::http::header::HeaderValue::from_static("application/json"),
    ));
    r
}

/// Above this size a JSON answer is written in slices of this size.
const SLICE: usize = 64 * 1024;

/// A JSON answer that may be large (a tool result up to 16 MiB): serialized once, the value
/// dropped at once, and a large body handed to actix-web in slices of the same buffer, so
/// that the server copies a slice at a time into its write buffer, not the whole body
/// (with `.json()` a 10 MiB result was held three times: the value, its text and the
/// write buffer).
pub(super) fn large_json(v: Value) -> HttpResponse {
    let body = web::Bytes::from(crate::protocol::json_write::to_vec(&v));
    drop(v);
    bytes_answer([body])
}

pub(super) fn call_error(e: CallError) -> ApiError {
    let (status, code) = match &e {
        CallError::Unavailable { .. } => (StatusCode::SERVICE_UNAVAILABLE, "unavailable"),
        CallError::NotRun { .. } => (StatusCode::SERVICE_UNAVAILABLE, "not_run"),
        CallError::NeedsSignIn { .. } => (StatusCode::SERVICE_UNAVAILABLE, "needs_sign_in"),
        CallError::Unknown { .. } => (StatusCode::BAD_GATEWAY, "outcome_unknown"),
        CallError::Server { .. } => (StatusCode::BAD_GATEWAY, "server_error"),
        CallError::Invalid { .. } => (StatusCode::BAD_GATEWAY, "invalid_result"),
        CallError::NoSuchTool(_) => (StatusCode::NOT_FOUND, "no_such_tool"),
    };
    let mut err = ApiError::new(status, code, e.to_string());
    let mut extra = json!({"outcome": e.outcome()});
    if let CallError::Server { error, .. } = &e {
        extra["rpc"] = serde_json::to_value(error).unwrap_or(Value::Null);
    }
    err.extra = Some(extra);
    err
}

#[cfg(test)]
mod tests {
    use super::*;
    use actix_web::body::MessageBody;

    async fn written(s: Slices) -> (Option<u64>, Vec<u8>) {
        let body = s.answer().into_body();
        let size = match body.size() {
            actix_web::body::BodySize::Sized(n) => Some(n),
            _ => None,
        };
        let bytes = actix_web::body::to_bytes(body).await.unwrap_or_default();
        (size, bytes.to_vec())
    }

    #[actix_rt::test]
    async fn a_body_in_slices_is_the_parts_in_order_with_its_length_declared() {
        // Parts of every size round a slice's: small ones, one just under, one over it.
        let parts: Vec<Vec<u8>> = (0..300)
            .map(|i: usize| {
                let n = match i % 7 {
                    0 => SLICE - 1,
                    3 => SLICE + 5,
                    _ => i * 37 % 1000,
                };
                vec![b'a' + (i % 26) as u8; n]
            })
            .collect();
        for count in [0, 1, 2, 20, 300] {
            let mut s = Slices::default();
            let mut want = Vec::new();
            for p in &parts[..count] {
                s.push(p);
                want.extend_from_slice(p);
            }
            let sliced = s.done.len() + 1;
            let (size, got) = written(s).await;
            assert_eq!(got, want, "{count} parts");
            assert_eq!(size, Some(want.len() as u64), "{count} parts");
            if want.len() > 2 * SLICE {
                assert!(sliced > 2, "{count} parts in {sliced} slices");
            }
        }
    }
}
