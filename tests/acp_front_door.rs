//! `albedo-mcp acp` driven end to end by the ACP Rust SDK's own client (issue 19): initialize
//! announces `mcpCapabilities` (http yes, sse no), `loadSession`, resume and close;
//! `session/new` opens a daemon session with the editor's servers (a real Python MCP server
//! over stdio, its tools then called through the daemon); `session/prompt` says this agent has
//! no model; `session/resume` replaces the list; `session/load` of an id the daemon does not
//! know opens it again; `session/close` closes the daemon session.

mod common;
use agent_client_protocol::schema::ProtocolVersion;
use agent_client_protocol::v1::schema::{
    CloseSessionRequest, ContentBlock, EnvVariable, InitializeRequest, LoadSessionRequest,
    McpServer, McpServerStdio, NewSessionRequest, PromptRequest, ResumeSessionRequest, TextContent,
};
use agent_client_protocol::v1::ConnectionTo;
use agent_client_protocol::{AcpAgent, Agent};
use common::*;
use serde_json::json;

const SECRET: &str = "acp-env-s3cr3t-5d1";

fn py(name: &str) -> McpServer {
    McpServer::Stdio(
        McpServerStdio::new(name, venv_python())
            .args(vec![server_script("py_mcp_server.py")])
            .env(vec![EnvVariable::new("EDITOR_TOKEN", SECRET)]),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_editor_drives_sessions_with_its_servers_through_acp() {
    let d = Daemon::start(json!({}));
    // As an editor would start it (`KEY=VALUE` first, as the SDK's command lines allow).
    let agent = AcpAgent::from_args([
        format!("ALBEDO_HOME={}", d.albedo_home().display()),
        launcher(),
        "acp".into(),
        "--daemon".into(),
        d.base.clone(),
    ])
    .unwrap();
    let d = std::sync::Arc::new(d);
    let d2 = d.clone();
    agent_client_protocol::Client
        .v1()
        .connect_with(agent, |cx: ConnectionTo<Agent>| async move {
            let d = d2;
            let init = cx
                .send_request(InitializeRequest::new(ProtocolVersion::V1))
                .block_task()
                .await?;
            let caps = &init.agent_capabilities;
            assert!(caps.load_session);
            assert!(caps.mcp_capabilities.http);
            assert!(!caps.mcp_capabilities.sse);
            assert!(caps.session_capabilities.resume.is_some());
            assert!(caps.session_capabilities.close.is_some());

            let new = cx
                .send_request(NewSessionRequest::new("/tmp").mcp_servers(vec![py("first")]))
                .block_task()
                .await?;
            let id = new.session_id.to_string();
            let dd = d.clone();
            let id2 = id.clone();
            let (st, r) = tokio::task::spawn_blocking(move || {
                dd.call(&id2, "editor__first__echo", json!({"message": "via acp"}))
            })
            .await
            .unwrap();
            assert_eq!(st, 200, "{r}");

            let prompt = cx
                .send_request(PromptRequest::new(
                    new.session_id.clone(),
                    vec![ContentBlock::Text(TextContent::new("hello"))],
                ))
                .block_task()
                .await;
            let err = prompt.expect_err("no model, no prompt");
            assert!(format!("{err:?}").contains("no model"), "{err:?}");

            // Resume: the list is the whole set.
            cx.send_request(
                ResumeSessionRequest::new(new.session_id.clone(), "/tmp")
                    .mcp_servers(vec![py("second")]),
            )
            .block_task()
            .await?;
            let dd = d.clone();
            let id2 = id.clone();
            let names = tokio::task::spawn_blocking(move || dd.tool_names(&id2))
                .await
                .unwrap();
            assert!(
                names.contains(&"editor__second__echo".to_owned()),
                "{names:?}"
            );
            assert!(
                !names.iter().any(|n| n.starts_with("editor__first__")),
                "{names:?}"
            );

            // Load of a session the daemon does not know (it restarted): opened again.
            cx.send_request(
                LoadSessionRequest::new("s3-00c0ffee", "/tmp").mcp_servers(vec![py("again")]),
            )
            .block_task()
            .await?;
            let dd = d.clone();
            let names = tokio::task::spawn_blocking(move || dd.tool_names("s3-00c0ffee"))
                .await
                .unwrap();
            assert!(
                names.contains(&"editor__again__echo".to_owned()),
                "{names:?}"
            );

            cx.send_request(CloseSessionRequest::new(new.session_id.clone()))
                .block_task()
                .await?;
            let dd = d.clone();
            let id2 = id.clone();
            let (st, _) = tokio::task::spawn_blocking(move || dd.get(&format!("/sessions/{id2}")))
                .await
                .unwrap();
            assert_eq!(st, 404);
            Ok(())
        })
        .await
        .unwrap();
    // The editor went: the session it left open is closed, and no secret reached the log.
    assert!(wait_until(std::time::Duration::from_secs(10), || d
        .get("/sessions/s3-00c0ffee")
        .0
        == 404));
    assert!(!d.log().contains(SECRET));
}
