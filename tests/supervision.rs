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

/// Mid-session: the session's composition keeps the same connection address across the
/// restart, so the session keeps working and its view counts the restart.
#[actix_rt::test]
async fn a_session_keeps_working_after_its_connection_actor_panics() {
    use albedo_mcp::actors::composition::{Composition, GetView, Reload};
    use albedo_mcp::actors::runtime::Runtime;
    let home = tempfile::tempdir().unwrap();
    let ext = json!({"enabled": {"mcp": true}, "mcp": {"servers": {
        "fx": fixture_server("exits_mid_call.py", &[])}}});
    std::fs::write(home.path().join("extensions.json"), ext.to_string()).unwrap();
    let registry = Registry::new(1).start();
    let runtime = Runtime {
        home: home.path().to_path_buf(),
        registry,
        ctx: ConnContext {
            launcher: launcher().into(),
            http: None,
        },
        store: None,
    }
    .start();
    let (comp, shared, _events) = Composition::new("t".into(), runtime, None, true);
    let comp = comp.start();
    assert_eq!(comp.send(Reload::default()).await.unwrap(), Ok(1));
    let conn = shared.load().conns.get("fx").cloned().unwrap();
    let call = || {
        Call(CallTarget::Tool {
            name: "echo".into(),
            arguments: json!({"message": "mid"}),
        })
    };
    conn.send(call()).await.unwrap().expect("before");
    conn.send(InjectPanic).await.unwrap();
    tokio::time::sleep(Duration::from_millis(50)).await;
    // The same snapshot, the same address: the call goes through after the restart.
    let conn = shared.load().conns.get("fx").cloned().unwrap();
    let r = conn.send(call()).await.unwrap().expect("after");
    assert_eq!(r["content"][0]["text"], "mid");
    let view = comp.send(GetView).await.unwrap();
    assert_eq!(view.servers[0].restarts, 1);
    assert_eq!(view.generation, 1);
}
