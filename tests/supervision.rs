//! Supervision: a Connection actor that panics is restarted by its supervisor (the Registry
//! started it under `actix::Supervisor`) and serves the next call, dialling again.

mod common;
use actix::prelude::*;
use albedo_mcp::actors::connection::{
    Call, CallTarget, ConnContext, Discover, GetStatus, InjectPanic,
};
use albedo_mcp::actors::registry::{Registry, StartConnection};
use albedo_mcp::store::settings::{parse_mcp, resolve, Credentials};
use common::*;
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;

#[actix_rt::test]
async fn a_panicking_connection_actor_is_restarted_and_serves_the_next_call() {
    let pidfile = tempfile::NamedTempFile::new().unwrap();
    let section = json!({"servers": {"fx": fixture_server(
        "exits_mid_call.py",
        &["--pidfile", pidfile.path().to_str().unwrap()],
    )}});
    let settings = parse_mcp(Some(&section)).unwrap();
    let env = |k: &str| std::env::var(k).ok();
    let server = Arc::new(resolve(&settings.servers[0], &env, &Credentials::default()).unwrap());
    let registry = Registry::new(1).start();
    let ctx = ConnContext {
        launcher: launcher().into(),
        http: None,
    };
    let conn = registry
        .send(StartConnection { server, ctx })
        .await
        .unwrap();
    let cat = conn.send(Discover).await.unwrap().expect("discovered");
    assert!(cat.tools.iter().any(|t| t["name"] == "echo"));
    let echo = || {
        Call(CallTarget::Tool {
            name: "echo".into(),
            arguments: json!({"message": "hi"}),
        })
    };
    conn.send(echo()).await.unwrap().expect("first call");
    let first_pid = read_pid(pidfile.path()).expect("pid");

    // Crash the actor in a handler.
    conn.send(InjectPanic).await.unwrap();
    tokio::time::sleep(Duration::from_millis(50)).await;

    // The same address serves the next call: the supervisor restarted the actor.
    let r = conn
        .send(echo())
        .await
        .unwrap()
        .expect("call after restart");
    assert_eq!(r["content"][0]["text"], "hi", "{r}");
    let st = conn.send(GetStatus).await.unwrap();
    assert_eq!(st.restarts, 1);
    // The restart dropped the old client and dialled a new server process.
    let second_pid = read_pid(pidfile.path()).expect("pid");
    assert_ne!(first_pid, second_pid);
    assert!(wait_until(Duration::from_secs(6), || !alive(first_pid)));
}
