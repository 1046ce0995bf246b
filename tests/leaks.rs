//! No leaked connections or processes: every path that drops a prepared set closes what it
//! started. Each test watches the registry's live count return to zero and the server
//! processes end: a preparation that fails half-way (the catalogue size limit after other
//! servers were dialled), a session deleted while its reload is in flight, and servers that
//! came back reaching a composition that is gone.

mod common;
use actix::prelude::*;
use albedo_mcp::actors::composition::{CloseSession, Composition, Reload};
use albedo_mcp::actors::connection::ConnContext;
use albedo_mcp::actors::registry::{Count, Registry};
use albedo_mcp::actors::retry::ServersJoined;
use albedo_mcp::actors::runtime::{Prepare, Probe, Runtime};
use albedo_mcp::store::catalogue::CatalogueStore;
use common::*;
use serde_json::{json, Value};
use std::path::Path;
use std::time::Duration;

struct World {
    home: tempfile::TempDir,
    registry: Addr<Registry>,
    runtime: Addr<Runtime>,
}

fn world(servers: Value, store: bool) -> World {
    let home = tempfile::tempdir().unwrap();
    let ext = json!({"enabled": {"mcp": true}, "mcp": {"servers": servers}});
    std::fs::write(home.path().join("extensions.json"), ext.to_string()).unwrap();
    let registry = Registry::new(1).start();
    let store = store.then(|| CatalogueStore::open_in_memory().unwrap());
    let runtime = Runtime::new(
        home.path().to_path_buf(),
        registry.clone(),
        ConnContext::new(launcher().into(), None),
        store,
    )
    .start();
    World {
        home,
        registry,
        runtime,
    }
}

async fn live(registry: &Addr<Registry>) -> usize {
    registry.send(Count).await.unwrap().0
}

/// Wait (async) until the registry has no live connection and every pid is gone.
async fn all_gone(registry: &Addr<Registry>, pids: &[i32]) -> (usize, Vec<i32>) {
    let mut n = usize::MAX;
    for _ in 0..400 {
        n = live(registry).await;
        if n == 0 && pids.iter().all(|p| !alive(*p)) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    (n, pids.iter().copied().filter(|p| alive(*p)).collect())
}

fn pid_server(pid: &Path, delay_ms: u64) -> Value {
    let d = delay_ms.to_string();
    fixture_server(
        "slow_start.py",
        &["--pidfile", pid.to_str().unwrap(), "--delay-ms", &d],
    )
}

async fn wait_pid(pid: &Path) -> i32 {
    for _ in 0..400 {
        if let Some(p) = read_pid(pid) {
            return p;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("no pid in {}", pid.display());
}

#[actix_rt::test]
async fn a_preparation_that_fails_half_way_closes_every_server_it_dialled() {
    let dir = tempfile::tempdir().unwrap();
    let big = oversized_tools_json(dir.path());
    let (p1, p2) = (dir.path().join("p1"), dir.path().join("p2"));
    // `a_huge` is saved first (servers are prepared in name order) and fails the
    // preparation while `b` and `c` are already connected.
    let w = world(
        json!({
            "a_huge": fixture_server("slow_start.py", &["--delay-ms", "0", "--tools-json", big.to_str().unwrap()]),
            "b": pid_server(&p1, 0),
            "c": pid_server(&p2, 0),
        }),
        true,
    );
    let r = w
        .runtime
        .send(Prepare {
            enabled: true,
            ..Prepare::default()
        })
        .await
        .unwrap();
    let e = r.err().expect("the preparation fails");
    assert!(e.to_string().contains("limit"), "{e}");
    let pids = [read_pid(&p1).unwrap(), read_pid(&p2).unwrap()];
    let (n, left) = all_gone(&w.registry, &pids).await;
    assert_eq!(n, 0, "connections left open after a failed preparation");
    assert!(left.is_empty(), "server processes left running: {left:?}");
    drop(w.home);
}

#[actix_rt::test]
async fn a_session_deleted_while_its_reload_is_in_flight_leaves_nothing_running() {
    let dir = tempfile::tempdir().unwrap();
    let pid = dir.path().join("pid");
    let w = world(json!({"slow": pid_server(&pid, 1500)}), false);
    let (comp, _shared, _events) = Composition::new("t".into(), w.runtime.clone(), None, true);
    let comp = comp.start();
    // The reload dials a slow server; the session is closed before it finishes.
    let reload = comp.send(Reload::default());
    let reload = actix_rt::spawn(reload);
    let p = wait_pid(&pid).await;
    comp.send(CloseSession).await.unwrap();
    let _ = reload.await;
    let (n, left) = all_gone(&w.registry, &[p]).await;
    assert_eq!(n, 0, "the in-flight preparation's connection was left open");
    assert!(left.is_empty(), "its server process is still running");
}

#[actix_rt::test]
async fn servers_that_come_back_to_a_composition_that_is_gone_are_closed() {
    let dir = tempfile::tempdir().unwrap();
    let pid = dir.path().join("pid");
    let w = world(json!({"back": pid_server(&pid, 0)}), false);
    let (comp, _shared, _events) = Composition::new("t".into(), w.runtime.clone(), None, true);
    let comp = comp.start();
    comp.send(CloseSession).await.unwrap();
    // A probe that found the server up, reaching the composition after it stopped.
    let prepared = w
        .runtime
        .send(Probe {
            servers: vec!["back".into()],
        })
        .await
        .unwrap()
        .expect("probed");
    assert!(prepared.servers[0].conn.is_some());
    let p = wait_pid(&pid).await;
    comp.do_send(ServersJoined(prepared));
    let (n, left) = all_gone(&w.registry, &[p]).await;
    assert_eq!(n, 0, "the joining connection was left open");
    assert!(left.is_empty(), "its server process is still running");
}

#[actix_rt::test]
async fn a_composition_that_stops_closes_its_connections() {
    let dir = tempfile::tempdir().unwrap();
    let pid = dir.path().join("pid");
    let w = world(json!({"s": pid_server(&pid, 0)}), false);
    let (comp, _shared, _events) = Composition::new("t".into(), w.runtime.clone(), None, true);
    let comp = comp.start();
    assert_eq!(comp.send(Reload::default()).await.unwrap(), Ok(1));
    let p = wait_pid(&pid).await;
    assert_eq!(live(&w.registry).await, 1);
    comp.send(CloseSession).await.unwrap();
    let (n, left) = all_gone(&w.registry, &[p]).await;
    assert_eq!(n, 0);
    assert!(left.is_empty());
}

/// Credentials over plain http:// to a host that is not loopback: one warning in the session
/// (HTTP is off in this runtime, so nothing is dialled; loopback and https get none).
#[actix_rt::test]
async fn credentials_over_plain_http_to_a_remote_host_get_one_warning() {
    std::env::set_var("ALBEDO_T_PLAIN_TOKEN", "t0k");
    let server = |url: &str| json!({"type": "http", "url": url, "bearerTokenEnvVar": "ALBEDO_T_PLAIN_TOKEN"});
    let w = world(
        json!({
            "lan": server("http://mcp.lan.example:8080/mcp"),
            "local": server("http://127.0.0.1:9/mcp"),
            "named": server("http://localhost:9/mcp"),
            "tls": server("https://mcp.example.com/mcp"),
            "open": {"type": "http", "url": "http://10.1.2.3:8080/mcp"},
        }),
        false,
    );
    let p = w
        .runtime
        .send(Prepare {
            enabled: true,
            ..Prepare::default()
        })
        .await
        .unwrap()
        .unwrap();
    let plain: Vec<&String> = p
        .warnings
        .iter()
        .filter(|w| w.contains("plain http://"))
        .collect();
    assert_eq!(plain.len(), 1, "{:?}", p.warnings);
    assert!(plain[0].contains("\"lan\"") && plain[0].contains("mcp.lan.example"));
    assert!(!plain[0].contains("t0k"));
}
