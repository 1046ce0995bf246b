//! `albedo-mcp acp`: the ACP v1 front door over stdio. An editor (Zed, JetBrains, ...) spawns
//! it as an agent; each ACP session is a daemon session whose editor-supplied servers are the
//! `mcpServers` of `session/new`, `session/load` and `session/resume` (the daemon's
//! `editor-mcp` extension). `session/close` closes the daemon session; sessions still open
//! when the editor goes are closed too. This agent has no model: `session/prompt` answers an
//! error saying that it only serves tools.
//!
//! stdout carries nothing but ACP messages; errors go to stderr. The daemon is reached as the
//! other client commands reach it (`--daemon`, else the socket, else TCP with the token),
//! through an actix system on a thread of its own (awc's client is not `Send`).

use super::client::{locate, DaemonClient};
use agent_client_protocol::v1::schema::{
    AgentCapabilities, CloseSessionRequest, CloseSessionResponse, Implementation,
    InitializeRequest, InitializeResponse, LoadSessionRequest, LoadSessionResponse,
    McpCapabilities, McpServer, NewSessionRequest, NewSessionResponse, PromptRequest,
    ResumeSessionRequest, ResumeSessionResponse, SessionCapabilities, SessionCloseCapabilities,
    SessionResumeCapabilities,
};
use agent_client_protocol::{Agent, Error, Stdio};
use awc::http;
use serde_json::{json, Value};
use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use tokio::sync::{mpsc, oneshot};

type Answer = Result<Value, String>;
type Ask = (http::Method, String, Option<Value>, oneshot::Sender<Answer>);

/// The daemon, from any thread: requests go to the actix thread that owns the client.
#[derive(Clone)]
struct Daemon(mpsc::UnboundedSender<Ask>);

impl Daemon {
    async fn call(&self, method: http::Method, path: String, body: Option<Value>) -> Answer {
        let (tx, rx) = oneshot::channel();
        self.0
            .send((method, path, body, tx))
            .map_err(|_| "the daemon client stopped".to_owned())?;
        rx.await
            .map_err(|_| "the daemon client stopped".to_owned())?
    }
}

fn start_client(endpoint: super::client::Endpoint) -> Daemon {
    let (tx, mut rx) = mpsc::unbounded_channel::<Ask>();
    std::thread::spawn(move || {
        actix::System::new().block_on(async move {
            let client = std::rc::Rc::new(DaemonClient::new(endpoint));
            while let Some((method, path, body, reply)) = rx.recv().await {
                let c = client.clone();
                actix::spawn(async move {
                    let r = c
                        .call(method, &path, body.as_ref())
                        .await
                        .map_err(|e| e.to_string());
                    let _ = reply.send(r);
                });
            }
        })
    });
    Daemon(tx)
}

fn servers_json(list: &[McpServer]) -> Result<Value, Error> {
    serde_json::to_value(list).map_err(|_| Error::invalid_params())
}

fn failed(message: String) -> Error {
    Error::new(-32603, message)
}

/// Run the front door until the editor closes stdin. Exit status 0, or 2 when no daemon.
pub fn run(daemon: Option<&str>) -> i32 {
    let endpoint = match locate(daemon) {
        Ok(e) => e,
        Err(e) => {
            eprintln!("albedo-mcp: {e}");
            return e.exit_code();
        }
    };
    let d = start_client(endpoint);
    let open: Arc<Mutex<BTreeSet<String>>> = Arc::default();
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("albedo-mcp: {e}");
            return 1;
        }
    };
    let result = rt.block_on(serve(d.clone(), open.clone()));
    // The editor went: close what it left open.
    let ids: Vec<String> = open
        .lock()
        .map(|s| s.iter().cloned().collect())
        .unwrap_or_default();
    rt.block_on(async {
        for id in ids {
            let _ = d
                .call(http::Method::DELETE, format!("/sessions/{id}"), None)
                .await;
        }
    });
    match result {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("albedo-mcp: acp: {e}");
            1
        }
    }
}

async fn serve(d: Daemon, open: Arc<Mutex<BTreeSet<String>>>) -> Result<(), Error> {
    let (d1, d2, d3, d4) = (d.clone(), d.clone(), d.clone(), d.clone());
    let (o1, o2, o3, o4) = (open.clone(), open.clone(), open.clone(), open.clone());
    Agent
        .v1()
        .name("albedo-mcp")
        .on_receive_request(
            async move |req: InitializeRequest, responder, _cx| {
                responder.respond(
                    InitializeResponse::new(req.protocol_version)
                        .agent_capabilities(
                            AgentCapabilities::new()
                                .load_session(true)
                                .mcp_capabilities(McpCapabilities::new().http(true).sse(false))
                                .session_capabilities(
                                    SessionCapabilities::new()
                                        .resume(SessionResumeCapabilities::new())
                                        .close(SessionCloseCapabilities::new()),
                                ),
                        )
                        .agent_info(Implementation::new("albedo-mcp", env!("CARGO_PKG_VERSION"))),
                )
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            async move |req: NewSessionRequest, responder, _cx| {
                let body = json!({"editor_mcp_servers": servers_json(&req.mcp_servers)?});
                match d1
                    .call(http::Method::POST, "/sessions".into(), Some(body))
                    .await
                {
                    Ok(v) => {
                        let id = v["id"].as_str().unwrap_or_default().to_owned();
                        if let Ok(mut s) = o1.lock() {
                            s.insert(id.clone());
                        }
                        responder.respond(NewSessionResponse::new(id))
                    }
                    Err(e) => responder.respond_with_error(failed(e)),
                }
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            async move |req: LoadSessionRequest, responder, _cx| {
                let id = req.session_id.to_string();
                match put_list(&d2, &id, &req.mcp_servers).await {
                    Ok(()) => {
                        if let Ok(mut s) = o2.lock() {
                            s.insert(id);
                        }
                        responder.respond(LoadSessionResponse::new())
                    }
                    Err(e) => responder.respond_with_error(e),
                }
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            async move |req: ResumeSessionRequest, responder, _cx| {
                let id = req.session_id.to_string();
                match put_list(&d3, &id, &req.mcp_servers).await {
                    Ok(()) => {
                        if let Ok(mut s) = o3.lock() {
                            s.insert(id);
                        }
                        responder.respond(ResumeSessionResponse::new())
                    }
                    Err(e) => responder.respond_with_error(e),
                }
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            async move |req: CloseSessionRequest, responder, _cx| {
                let id = req.session_id.to_string();
                if let Ok(mut s) = o4.lock() {
                    s.remove(&id);
                }
                match d4
                    .call(http::Method::DELETE, format!("/sessions/{id}"), None)
                    .await
                {
                    Ok(_) => responder.respond(CloseSessionResponse::new()),
                    Err(e) => responder.respond_with_error(Error::new(-32002, e)),
                }
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            async move |_req: PromptRequest, responder, _cx| {
                responder.respond_with_error(Error::new(
                    -32603,
                    "albedo-mcp has no model: it only serves tools (the editor's MCP servers \
                     and the configured ones) to an agent host",
                ))
            },
            agent_client_protocol::on_receive_request!(),
        )
        .connect_to(Stdio::new())
        .await
}

/// A session's whole list again (load, resume); a session the daemon does not know (it
/// restarted) is opened again under its id.
async fn put_list(d: &Daemon, id: &str, list: &[McpServer]) -> Result<(), Error> {
    if crate::api::body::session_id(id).is_err() {
        return Err(Error::new(-32002, format!("no session {id:?}")));
    }
    d.call(
        http::Method::PUT,
        format!("/sessions/{id}/editor-mcp-servers"),
        Some(servers_json(list)?),
    )
    .await
    .map(|_| ())
    .map_err(failed)
}
