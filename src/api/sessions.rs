//! The sessions' routes: open one (with its extensions, the editor's servers and its
//! `deferTools`), list, view and close them, the session's choices (the extension, a server, the
//! editor's servers) and its activity (the retry schedule's input).
//!
//! Owns: those handlers and their bodies. Must not touch: transports; a session is its
//! Composition actor and the snapshot it publishes.

use super::*;

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct CreateSession {
    #[serde(default)]
    extensions: HashMap<String, bool>,
    /// ACP v1's `mcpServers`, as the editor sent it (the `editor-mcp` extension).
    /// A `Value` so that a wrong shape is refused without quoting what was sent.
    #[serde(default)]
    editor_mcp_servers: Option<Value>,
    /// The session's own `deferTools` for every server: `auto`, `never` or `always`.
    #[serde(default)]
    defer_tools: Option<Value>,
}

/// A session's `defer_tools`: `"auto"`, `"never"`, `"always"`, or `null` (each server's
/// setting); anything else is a 400 naming the field.
pub(super) fn defer_choice(v: Option<&Value>) -> Result<Option<DeferTools>, ApiError> {
    match v {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v
            .as_str()
            .and_then(DeferTools::parse)
            .map(Some)
            .ok_or_else(|| {
                let mut e = ApiError::new(
                    StatusCode::BAD_REQUEST,
                    "bad_request",
                    "defer_tools must be \"auto\", \"never\", \"always\" or null",
                );
                e.extra = Some(json!({"field": "defer_tools", "outcome": "not_run"}));
                e
            }),
    }
}

/// Parse an editor's server list (ACP v1 `mcpServers`); a malformed entry is a 400 naming it.
/// No value the editor sent is quoted (they may be secrets).
pub(super) fn editor_list(
    list: Option<&Value>,
) -> Result<Vec<crate::editor::EditorServer>, ApiError> {
    let bad = |m: String| {
        let mut e = ApiError::new(StatusCode::BAD_REQUEST, "bad_editor_server", m);
        e.extra = Some(json!({"outcome": "not_run"}));
        e
    };
    let list = match list {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::Array(a)) => a,
        Some(_) => {
            return Err(bad(
                "editor_mcp_servers must be an array of ACP MCP servers".into(),
            ))
        }
    };
    let env = |k: &str| std::env::var(k).ok();
    crate::editor::parse_list(list, &env).map_err(bad)
}

pub(super) async fn create_session(
    state: web::Data<AppState>,
    Optional(body): Optional<CreateSession>,
) -> Result<HttpResponse, ApiError> {
    let choice = body.extensions.get("mcp").copied();
    let editor_choice = body.extensions.get(crate::editor::EXTENSION).copied();
    let editor = editor_list(body.editor_mcp_servers.as_ref())?;
    let defer = defer_choice(body.defer_tools.as_ref())?;
    open_session(&state, None, choice, editor, editor_choice, defer).await
}

/// Open a session (under `id`, when an editor resumes one the daemon does not know, after a
/// restart) and prepare it; answers 201 with its view.
pub(super) async fn open_session(
    state: &web::Data<AppState>,
    id: Option<String>,
    choice: Option<bool>,
    editor: Vec<crate::editor::EditorServer>,
    editor_choice: Option<bool>,
    defer: Option<DeferTools>,
) -> Result<HttpResponse, ApiError> {
    let open = state.sessions.read().map(|s| s.len()).unwrap_or(0);
    if open >= state.limits.max_sessions {
        return Err(ApiError::not_run(
            StatusCode::TOO_MANY_REQUESTS,
            "too_many_sessions",
            format!(
                "{open} sessions are open, the most this daemon allows (max_sessions); close one first"
            ),
        ));
    }
    let ext = settings::load_extensions(state.home.clone()).await?;
    let id = id.unwrap_or_else(|| {
        let n = state.next_session.fetch_add(1, Ordering::Relaxed);
        format!("s{n}-{:08x}", rand::random::<u32>())
    });
    let (comp, shared, events) =
        Composition::new(id.clone(), state.runtime.clone(), choice, ext.mcp_enabled());
    let comp = comp
        .with_editor(editor, editor_choice, ext.editor_mcp_enabled())
        .with_defer(defer);
    let addr = comp.start();
    let handle = SessionHandle {
        addr: addr.clone(),
        shared,
        events,
        follows_default: choice.is_none(),
        last_active: Arc::new(AtomicU64::new(state.now_ms())),
    };
    if let Ok(mut s) = state.sessions.write() {
        if s.contains_key(&id) {
            addr.do_send(CloseSession);
            return Err(ApiError::new(
                StatusCode::CONFLICT,
                "conflict",
                "a session with this id is open",
            ));
        }
        s.insert(id.clone(), Arc::new(handle));
    }
    let r = addr.send(Reload::default()).await.map_err(mailbox)?;
    let view = addr.send(GetView).await.map_err(mailbox)?;
    let mut body = serde_json::to_value(&view).unwrap_or(json!({}));
    if let (Err(e), Some(m)) = (r, body.as_object_mut()) {
        m.insert("error".into(), Value::from(e));
    }
    state.settings_changed("sessions", None, None);
    Ok(HttpResponse::Created().json(body))
}

/// `GET /sessions`: the live sessions, for clients that pick one (the terminal form's
/// extensions view): each one's `id`, `generation`, its advertised `tools` and how long ago it
/// showed activity. Read from the published snapshots: no session is asked, and reading is
/// not activity.
pub(super) async fn list_sessions(state: web::Data<AppState>) -> HttpResponse {
    let now = state.now_ms();
    let mut list: Vec<Value> = state
        .sessions
        .read()
        .map(|m| {
            m.iter()
                .map(|(id, h)| {
                    let snap = h.shared.load();
                    json!({
                        "id": id,
                        "generation": snap.table.generation,
                        "tools": snap.table.tools.len(),
                        "follows_default": h.follows_default,
                        "idle_secs": now.saturating_sub(h.last_active.load(Ordering::Relaxed)) / 1000,
                    })
                })
                .collect()
        })
        .unwrap_or_default();
    list.sort_by(|a, b| a["id"].as_str().cmp(&b["id"].as_str()));
    HttpResponse::Ok().json(json!({ "sessions": list }))
}

/// The session named by a request; the request counts as its activity (idle limit).
pub(super) fn session(state: &AppState, id: &str) -> Result<Arc<SessionHandle>, ApiError> {
    let s = peek_session(state, id)?;
    s.last_active.store(state.now_ms(), Ordering::Relaxed);
    Ok(s)
}

/// The session, without counting the request as activity: reading a session's view (a
/// monitor polling it) does not keep an idle session open.
pub(super) fn peek_session(state: &AppState, id: &str) -> Result<Arc<SessionHandle>, ApiError> {
    body::session_id(id)?;
    state
        .sessions
        .read()
        .ok()
        .and_then(|s| s.get(id).cloned())
        .ok_or_else(|| ApiError::not_found("session"))
}

pub(super) async fn get_session(
    state: web::Data<AppState>,
    path: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let s = peek_session(&state, &path)?;
    let view = s.addr.send(GetView).await.map_err(mailbox)?;
    Ok(HttpResponse::Ok().json(view))
}

pub(super) async fn delete_session(
    state: web::Data<AppState>,
    path: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    body::session_id(&path)?;
    let s = state
        .sessions
        .write()
        .ok()
        .and_then(|mut m| m.remove(path.as_str()))
        .ok_or_else(|| ApiError::not_found("session"))?;
    let _ = s.addr.send(CloseSession).await;
    state.settings_changed("sessions", None, None);
    Ok(HttpResponse::NoContent().finish())
}

/// `PUT /sessions/{id}/editor-mcp-servers` with ACP v1's `mcpServers` array: the session's
/// whole list of editor-supplied servers (ACP `session/load` and `session/resume`). Servers
/// that did not change keep their connections; the others are discovered again. An id the
/// daemon does not know (it restarted) opens a session under that id with the list (201).
pub(super) async fn put_editor_servers(
    state: web::Data<AppState>,
    path: web::Path<String>,
    Strict(list): Strict<Value>,
) -> Result<HttpResponse, ApiError> {
    body::session_id(&path)?;
    if list.is_null() {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "bad_editor_server",
            "the body must be an array of ACP MCP servers ([] for none)",
        ));
    }
    let editor = editor_list(Some(&list))?;
    let known = state
        .sessions
        .read()
        .ok()
        .is_some_and(|s| s.contains_key(path.as_str()));
    if !known {
        return open_session(&state, Some(path.into_inner()), None, editor, None, None).await;
    }
    let s = session(&state, &path)?;
    let reload = Reload {
        editor: Some(editor),
        ..Reload::default()
    };
    reload_then_view(&s, reload, "preparation_failed").await
}

/// `PUT /sessions/{id}/extensions/editor-mcp` `{"enabled": bool}`: the session's own choice
/// for `editor-mcp` (its servers stay connected; their tools are shown or hidden).
pub(super) async fn put_session_editor_extension(
    state: web::Data<AppState>,
    path: web::Path<String>,
    Strict(body): Strict<settings::EnabledBody>,
) -> Result<HttpResponse, ApiError> {
    let s = session(&state, &path)?;
    let reload = Reload {
        editor_choice: Some(Some(body.enabled)),
        ..Reload::default()
    };
    reload_then_view(&s, reload, "preparation_failed").await
}

pub(super) async fn put_session_extension(
    state: web::Data<AppState>,
    path: web::Path<String>,
    Strict(body): Strict<settings::EnabledBody>,
) -> Result<HttpResponse, ApiError> {
    let s = session(&state, &path)?;
    let reload = Reload {
        choice: Some(Some(body.enabled)),
        reread: true,
        ..Reload::default()
    };
    reload_then_view(&s, reload, "preparation_failed").await
}

/// Reload a session as asked and answer its view; a refused preparation is a 409 with
/// `code` (the session keeps its previous composition).
pub(super) async fn reload_then_view(
    s: &SessionHandle,
    reload: Reload,
    code: &'static str,
) -> Result<HttpResponse, ApiError> {
    let r = s.addr.send(reload).await.map_err(mailbox)?;
    match r {
        Ok(_) => {
            let view = s.addr.send(GetView).await.map_err(mailbox)?;
            Ok(HttpResponse::Ok().json(view))
        }
        Err(e) => Err(ApiError::new(StatusCode::CONFLICT, code, e)),
    }
}

/// `PUT /sessions/{id}/servers/{name}` `{"enabled": bool}`: the session's capability choice
/// for one server. A server switched off is not tried; turning on one that cannot start is
/// a 409 and changes nothing.
pub(super) async fn put_session_server(
    state: web::Data<AppState>,
    path: web::Path<(String, String)>,
    Strict(body): Strict<settings::EnabledBody>,
) -> Result<HttpResponse, ApiError> {
    let (id, name) = path.into_inner();
    body::server_name(&name)?;
    let s = session(&state, &id)?;
    let ext = settings::load_extensions(state.home.clone()).await?;
    let configured = ext
        .mcp()
        .map(|m| m.servers.iter().any(|c| c.name == name))
        .unwrap_or(false);
    if !configured {
        return Err(ApiError::not_found("server"));
    }
    let reload = Reload {
        server: Some((name, body.enabled)),
        ..Reload::default()
    };
    reload_then_view(&s, reload, "server_refused").await
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ActivityBody {
    kind: String,
}

pub(super) async fn activity(
    state: web::Data<AppState>,
    path: web::Path<String>,
    Strict(body): Strict<ActivityBody>,
) -> Result<HttpResponse, ApiError> {
    let s = session(&state, &path)?;
    let turn_end = match body.kind.as_str() {
        "submit" => false,
        "turn_end" => true,
        other => {
            return Err(ApiError::new(
                StatusCode::BAD_REQUEST,
                "bad_request",
                format!("unknown activity kind {other:?} (use submit or turn_end)"),
            ))
        }
    };
    let a = s.addr.send(Activity { turn_end }).await.map_err(mailbox)?;
    Ok(HttpResponse::Ok().json(a))
}
