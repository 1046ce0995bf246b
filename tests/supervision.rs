//! Supervision: a Connection actor that panics anywhere (a handler, its event stream, a
//! future it spawned), with the panic NOT caught by the handler, is restarted by the
//! Registry with a fresh link behind the same handle, serves the next call by dialling a new
//! server process, counts the restart, and is marked failed when it panics again and again.
//! A connection closed for good is never brought back. Also the dial queue's bounds: a check
//! that waits its turn holds nothing, and a call that finds a dial under way answers with it.

mod common;
use actix::prelude::*;
use albedo_mcp::actors::connection::{
    ArmPanic, Barrier, CallError, CallTarget, ConnContext, DialLimit, LinkState, PanicPoint,
    RestartPolicy,
};
use albedo_mcp::actors::handle::ConnHandle;
use albedo_mcp::actors::registry::{Count, Registry, StartConnection};
use albedo_mcp::store::settings::{parse_mcp, resolve, Credentials};
use common::*;
use serde_json::{json, Value};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

fn echo(msg: &str) -> CallTarget {
    CallTarget::tool("echo", &json!({"message": msg})).unwrap()
}

fn ctx() -> ConnContext {
    ConnContext::new(launcher().into(), None)
}

/// A supervised connection to the `exits_mid_call` fixture, which writes its pid.
async fn start(registry: &Addr<Registry>, pidfile: &Path, ctx: ConnContext) -> ConnHandle {
    let fx = fixture_server(
        "exits_mid_call.py",
        &["--pidfile", pidfile.to_str().unwrap()],
    );
    start_server(registry, fx, ctx).await
}

/// A supervised connection to `server` (its settings, as `extensions.json` holds them).
async fn start_server(registry: &Addr<Registry>, server: Value, ctx: ConnContext) -> ConnHandle {
    let settings = parse_mcp(Some(&json!({"servers": {"fx": server}}))).unwrap();
    let env = |k: &str| std::env::var(k).ok();
    let server = Arc::new(resolve(&settings.servers[0], &env, &Credentials::default()).unwrap());
    registry
        .send(StartConnection { server, ctx })
        .await
        .unwrap()
}

async fn live(registry: &Addr<Registry>) -> usize {
    registry.send(Count).await.unwrap().0
}

async fn text(conn: &ConnHandle, msg: &str) -> Result<Value, CallError> {
    text_via(conn, msg, false).await
}

/// [`text`], through `call_local` (as the API calls, from a task of a `LocalSet`) when
/// `local`.
async fn text_via(conn: &ConnHandle, msg: &str, local: bool) -> Result<Value, CallError> {
    let r = if local {
        conn.call_local(echo(msg)).await
    } else {
        conn.call(echo(msg)).await
    };
    r.map(|t| t.to_value().expect("a result is JSON"))
}

/// Arm `point`, trigger it with `trigger`, and check the connection came back: same handle,
/// a new server process, one more restart.
async fn panics_and_recovers(point: PanicPoint) {
    let pidfile = tempfile::NamedTempFile::new().unwrap();
    let registry = Registry::new(1).start();
    let conn = start(&registry, pidfile.path(), ctx()).await;
    let r = text(&conn, "one").await.expect("first call");
    assert_eq!(r["content"][0]["text"], "one");
    let first_pid = read_pid(pidfile.path()).expect("pid");
    let before = conn.restarts();

    let _ = conn.send(ArmPanic(point)).await;
    match point {
        PanicPoint::Call => {
            // The call that panicked was received: its outcome is unknown, never not_run.
            let e = text(&conn, "boom").await.expect_err("the call panicked");
            assert_eq!(e.outcome(), "unknown", "{e}");
        }
        PanicPoint::Watch => {
            conn.watch(Sink::start_default().recipient(), None, false);
        }
        PanicPoint::Discovery => {
            // A background check (a future the actor spawned) completes and panics.
            conn.watch(Sink::start_default().recipient(), None, true);
        }
        _ => {}
    }
    assert!(
        eventually(Duration::from_secs(10), || conn.restarts() == before + 1).await,
        "{point:?}: the connection was not restarted"
    );
    // The same handle serves the next call with a fresh link: a new server process.
    let r = text(&conn, "two").await.expect("call after restart");
    assert_eq!(r["content"][0]["text"], "two", "{point:?}");
    let second_pid = read_pid(pidfile.path()).expect("pid");
    assert_ne!(first_pid, second_pid, "{point:?}: the link was not fresh");
    assert!(
        eventually(Duration::from_secs(8), || !alive(first_pid)).await,
        "{point:?}: the old server process outlived the panicked actor"
    );
    let st = conn.status();
    assert_eq!(st.restarts, before + 1, "{point:?}");
    drop(conn);
    assert!(
        eventually(Duration::from_secs(8), || !alive(second_pid)).await,
        "{point:?}: dropping the last handle left the server running"
    );
}

/// A tool call on a live stdio client runs on its caller's thread, not in the actor
/// (`connection/direct.rs`). A panic there is caught: the call answers `unknown` (it may have
/// been sent), its client is closed and its server process ends, the actor is not restarted
/// (it did not panic), and the next call dials a new server through the actor. The same
/// whether the call's task is spawned on the runtime (`call`) or on the caller's `LocalSet`
/// (`call_local`, as the API calls).
#[actix_rt::test]
async fn a_panic_in_a_direct_call_closes_its_client_and_the_next_call_dials_again() {
    a_panic_in_a_direct_call(false).await;
}

#[actix_rt::test]
async fn a_panic_in_a_direct_call_from_a_local_set_closes_its_client_too() {
    a_panic_in_a_direct_call(true).await;
}

async fn a_panic_in_a_direct_call(local: bool) {
    let text = |conn, msg| text_via(conn, msg, local);
    let pidfile = tempfile::NamedTempFile::new().unwrap();
    let registry = Registry::new(1).start();
    let conn = start(&registry, pidfile.path(), ctx()).await;
    assert!(!conn.direct_ready(), "nothing was dialled yet");
    text(&conn, "one")
        .await
        .expect("the first call dials, through the actor");
    assert!(conn.direct_ready(), "the dialled stdio client is published");
    let r = text(&conn, "two").await.expect("a direct call");
    assert_eq!(r["content"][0]["text"], "two");
    let first_pid = read_pid(pidfile.path()).expect("pid");
    let before = conn.restarts();

    let _ = conn.send(ArmPanic(PanicPoint::DirectCall)).await;
    let e = text(&conn, "boom")
        .await
        .expect_err("the direct call panicked");
    assert_eq!(e.outcome(), "unknown", "{e}");
    assert!(!conn.direct_ready(), "the client was taken back");
    assert!(
        eventually(Duration::from_secs(8), || !alive(first_pid)).await,
        "the closed client's server process lives on"
    );
    let r = text(&conn, "three")
        .await
        .expect("the next call dials again");
    assert_eq!(r["content"][0]["text"], "three");
    assert_ne!(read_pid(pidfile.path()).expect("pid"), first_pid);
    assert_eq!(conn.restarts(), before, "the actor itself did not panic");
    assert!(conn.direct_ready());
    drop(conn);
}

/// A tool call on a live HTTP client whose requests carry no OAuth token is a direct call too
/// (its request POSTed by the caller's thread: `transport::http::posts_here`), here against
/// server-everything over streamable HTTP. A panic in it is caught the same way: `unknown`,
/// its client closed and taken back, the actor not restarted, and the next call dials a new
/// session through the actor, which is published in turn.
#[actix_rt::test]
async fn a_panic_in_a_direct_call_to_an_http_server_closes_its_client_and_the_next_call_dials_again(
) {
    let peer = HttpPeer::everything();
    let registry = Registry::new(1).start();
    let tls = albedo_mcp::transport::tls::client_config(&[]).unwrap();
    let ctx = ConnContext::new(
        launcher().into(),
        Some(Arc::new(albedo_mcp::actors::connection::AwcOpener { tls })),
    );
    let conn = start_server(&registry, json!({"type": "http", "url": peer.url}), ctx).await;
    assert!(!conn.direct_ready(), "nothing was dialled yet");
    let r = text_via(&conn, "one", true)
        .await
        .expect("the first call dials, through the actor");
    assert_eq!(r["content"][0]["text"], "Echo: one");
    assert!(conn.direct_ready(), "the dialled HTTP client is published");
    for i in 0..3 {
        let r = text_via(&conn, &format!("m{i}"), true)
            .await
            .expect("a direct call");
        assert_eq!(r["content"][0]["text"], format!("Echo: m{i}"));
    }
    assert_eq!(peer.everything_sessions().len(), 1, "one session so far");
    let before = conn.restarts();

    let _ = conn.send(ArmPanic(PanicPoint::DirectCall)).await;
    let e = text_via(&conn, "boom", true)
        .await
        .expect_err("the direct call panicked");
    assert_eq!(e.outcome(), "unknown", "{e}");
    assert!(!conn.direct_ready(), "the client was taken back");
    let r = text_via(&conn, "two", true)
        .await
        .expect("the next call dials again");
    assert_eq!(r["content"][0]["text"], "Echo: two");
    assert_eq!(conn.restarts(), before, "the actor itself did not panic");
    assert!(conn.direct_ready());
    assert_eq!(
        peer.everything_sessions().len(),
        2,
        "the next call opened a new session"
    );
    drop(conn);
}

/// Direct calls from one `LocalSet` thread, run after run, move the server's reader to that
/// thread (`transport::stdio::reader`); a server that then dies is still reported (its client
/// is taken back) and the next call dials a new one.
#[actix_rt::test]
async fn a_server_that_dies_after_its_reader_moved_to_the_caller_is_dialled_again() {
    let pidfile = tempfile::NamedTempFile::new().unwrap();
    let registry = Registry::new(1).start();
    let conn = start(&registry, pidfile.path(), ctx()).await;
    text_via(&conn, "dial", true)
        .await
        .expect("the first call dials");
    let calls = albedo_mcp::transport::stdio::MOVE_AFTER + 8;
    for i in 0..calls {
        let r = text_via(&conn, &format!("m{i}"), true)
            .await
            .expect("a direct call");
        assert_eq!(r["content"][0]["text"], format!("m{i}"));
    }
    assert!(conn.direct_ready());
    let first_pid = read_pid(pidfile.path()).expect("pid");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(first_pid),
        nix::sys::signal::Signal::SIGKILL,
    )
    .expect("kill");
    assert!(
        eventually(Duration::from_secs(8), || !conn.direct_ready()).await,
        "the dead server's client is still published"
    );
    let r = text_via(&conn, "again", true)
        .await
        .expect("the next call dials again");
    assert_eq!(r["content"][0]["text"], "again");
    assert_ne!(read_pid(pidfile.path()).expect("pid"), first_pid);
}

/// A direct call that outlives its deadline ends `unknown` and closes the client; the next
/// call dials a new server through the actor (the same rule as a call through the actor).
#[actix_rt::test]
async fn a_direct_call_that_times_out_closes_the_client_and_the_next_call_dials_again() {
    let pidfile = tempfile::NamedTempFile::new().unwrap();
    let registry = Registry::new(1).start();
    let log = tempfile::NamedTempFile::new().unwrap();
    let mut fx = fixture_server(
        "never_answers.py",
        &[
            "--pidfile",
            pidfile.path().to_str().unwrap(),
            "--log",
            log.path().to_str().unwrap(),
        ],
    );
    fx["callTimeoutMs"] = json!(500);
    let conn = start_server(&registry, fx, ctx()).await;
    text(&conn, "one").await.expect("the first call dials");
    assert!(conn.direct_ready());
    let first_pid = read_pid(pidfile.path()).expect("pid");
    let slow = CallTarget::tool("hang", &json!({})).unwrap();
    let t0 = std::time::Instant::now();
    let e = conn.call(slow).await.expect_err("it times out");
    assert_eq!(e.outcome(), "unknown", "{e}");
    assert!(t0.elapsed() < Duration::from_secs(4), "{:?}", t0.elapsed());
    assert!(!conn.direct_ready(), "the timed-out client was taken back");
    // The server was told, before its client closed.
    let logged = || std::fs::read_to_string(log.path()).unwrap_or_default();
    assert!(
        eventually(Duration::from_secs(5), || logged()
            .contains("notifications/cancelled"))
        .await,
        "{}",
        logged()
    );
    let r = text(&conn, "two").await.expect("the next call dials again");
    assert_eq!(r["content"][0]["text"], "two");
    assert_ne!(read_pid(pidfile.path()).expect("pid"), first_pid);
}

#[derive(Default)]
struct Sink;
impl Actor for Sink {
    type Context = Context<Self>;
}
impl Handler<albedo_mcp::actors::connection::CatalogueChanged> for Sink {
    type Result = ();
    fn handle(
        &mut self,
        _: albedo_mcp::actors::connection::CatalogueChanged,
        _: &mut Self::Context,
    ) {
    }
}

#[actix_rt::test]
async fn a_panic_in_a_handler_restarts_the_connection() {
    panics_and_recovers(PanicPoint::Handler).await;
}

#[actix_rt::test]
async fn a_panic_in_a_call_restarts_the_connection_and_the_call_is_unknown() {
    panics_and_recovers(PanicPoint::Call).await;
}

#[actix_rt::test]
async fn a_panic_in_watch_restarts_the_connection() {
    panics_and_recovers(PanicPoint::Watch).await;
}

#[actix_rt::test]
async fn a_panic_in_the_event_stream_restarts_the_connection() {
    panics_and_recovers(PanicPoint::Event).await;
}

#[actix_rt::test]
async fn a_panic_in_a_spawned_future_restarts_the_connection() {
    panics_and_recovers(PanicPoint::Spawned).await;
}

#[actix_rt::test]
async fn a_panic_when_a_background_discovery_completes_restarts_the_connection() {
    panics_and_recovers(PanicPoint::Discovery).await;
}

#[actix_rt::test]
async fn a_connection_that_panics_again_and_again_is_backed_off_then_failed() {
    let pidfile = tempfile::NamedTempFile::new().unwrap();
    let registry = Registry::new(1).start();
    let mut c = ctx();
    c.restart = RestartPolicy {
        base: Duration::from_millis(5),
        max: Duration::from_millis(20),
        give_up: 3,
        healthy: Duration::from_secs(3600),
    };
    let conn = start(&registry, pidfile.path(), c).await;
    for n in 1..=3u32 {
        let _ = conn.send(ArmPanic(PanicPoint::Handler)).await;
        assert!(
            eventually(Duration::from_secs(5), || conn.restarts() == n).await,
            "restart {n}"
        );
    }
    // The last life dials its server; the fourth panic in a row is one too many: failed, not
    // restarted, and nothing keeps that life's client (and so its server) alive.
    text(&conn, "last")
        .await
        .expect("a call before the last panic");
    let pid = read_pid(pidfile.path()).expect("pid");
    let _ = conn.send(ArmPanic(PanicPoint::Handler)).await;
    assert!(eventually(Duration::from_secs(5), || conn.restarts() == 4).await);
    assert!(
        eventually(Duration::from_secs(8), || !alive(pid)).await,
        "the failed connection's server outlived it"
    );
    let e = text(&conn, "x").await.expect_err("failed");
    assert_eq!(e.outcome(), "not_run", "{e}");
    assert!(e.to_string().contains("panicked 4 times"), "{e}");
    let st = conn.status();
    assert_eq!(
        serde_json::to_value(st.state).unwrap(),
        "failed",
        "{:?}",
        st.last_error
    );
    // Its loop ended: nothing is left running for it.
    let mut n = usize::MAX;
    for _ in 0..100 {
        n = live(&registry).await;
        if n == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(n, 0);
    // The backoff delays themselves: none for the first panic, then doubling to the cap.
    let p = RestartPolicy {
        base: Duration::from_millis(100),
        max: Duration::from_secs(5),
        give_up: 5,
        healthy: Duration::from_secs(60),
    };
    let ms: Vec<u128> = (1..=9).map(|s| p.delay(s).as_millis()).collect();
    assert_eq!(ms, [0, 100, 200, 400, 800, 1600, 3200, 5000, 5000]);
}

#[actix_rt::test]
async fn close_is_final_even_with_a_call_in_flight() {
    let pidfile = tempfile::NamedTempFile::new().unwrap();
    let registry = Registry::new(1).start();
    let conn = start(&registry, pidfile.path(), ctx()).await;
    text(&conn, "one").await.expect("first call");
    let pid = read_pid(pidfile.path()).expect("pid");
    // A holder of the handle (an in-flight call's snapshot) keeps it after the close.
    let holder = conn.clone();
    conn.close();
    assert!(
        eventually(Duration::from_secs(8), || !alive(pid)).await,
        "the server outlived the close"
    );
    std::fs::write(pidfile.path(), "").unwrap();
    let e = text(&holder, "late").await.expect_err("closed");
    assert_eq!(e.outcome(), "not_run", "{e}");
    // No new server process was dialled under the old configuration.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        read_pid(pidfile.path()),
        None,
        "a closed connection dialled again"
    );
    assert_eq!(holder.restarts(), 0);
    // The actor ends when its last handle goes.
    drop(conn);
    drop(holder);
    let mut n = usize::MAX;
    for _ in 0..250 {
        n = live(&registry).await;
        if n == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(n, 0, "the closed connection's actor is still running");
}

/// A saved catalogue's check still waiting its turn when its connection closes (a session
/// with many saved servers closed right after it opened) is cancelled by the close: the place
/// it waited for is not taken when it frees up, and the server is never started.
#[actix_rt::test]
async fn a_check_waiting_its_turn_is_cancelled_by_the_close_and_never_dials() {
    let pidfile = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(pidfile.path(), "").unwrap();
    let registry = Registry::new(1).start();
    let mut c = ctx();
    c.checks = DialLimit::new(1);
    let checks = c.checks.clone();
    let held = checks.try_hold().expect("the one place");
    let conn = start(&registry, pidfile.path(), c).await;
    // The check starts and waits for the place held here (the barrier is handled after the
    // `Watch`, and the check it spawned runs before the next message: the close); then the
    // close.
    conn.watch(Sink::start_default().recipient(), None, true);
    conn.send(Barrier).await.expect("the actor answers");
    conn.close();
    tokio::time::sleep(Duration::from_millis(300)).await;
    // A waiter still queued would be handed the place as it is freed.
    drop(held);
    assert!(
        checks.try_hold().is_some(),
        "the closed connection's check was still waiting and took the place"
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        read_pid(pidfile.path()),
        None,
        "a closed connection dialled"
    );
}

/// A call that finds a dial under way (here the background check's, which waits for a place
/// among the daemon's dials before it spawns its server) waits for that dial's outcome, up to
/// `startupTimeoutMs` plus `callTimeoutMs`: it does not give up after `startupTimeoutMs` of its
/// own and answer `unavailable` while the connection still says `connecting`.
#[actix_rt::test]
async fn a_call_waits_for_the_dial_under_way_and_answers_with_its_outcome() {
    let dir = tempfile::tempdir().unwrap();
    let (meter, hang) = (dir.path().join("meter"), dir.path().join("hang"));
    std::fs::write(&hang, "").unwrap();
    let mut fx = fixture_server(
        "dial_meter.py",
        &[
            "--meter",
            meter.to_str().unwrap(),
            "--delay-ms",
            "0",
            "--hang-if",
            hang.to_str().unwrap(),
        ],
    );
    fx["startupTimeoutMs"] = json!(600);
    fx["callTimeoutMs"] = json!(1500);
    let registry = Registry::new(1).start();
    let mut c = ctx();
    c.dials = DialLimit::new(1);
    let held = c.dials.try_hold().expect("the one place");
    let conn = start_server(&registry, fx, c).await;
    // The check takes the dial and waits for the place held here; the place is freed 400 ms
    // into the call, so that dial gives up at about 1 s, after the call's own 600 ms.
    conn.watch(Sink::start_default().recipient(), None, true);
    let mut state = LinkState::Idle;
    for _ in 0..250 {
        state = conn.status().state;
        if state == LinkState::Connecting {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(state, LinkState::Connecting);
    actix::spawn(async move {
        tokio::time::sleep(Duration::from_millis(400)).await;
        drop(held);
    });
    let started = std::time::Instant::now();
    let e = text(&conn, "x")
        .await
        .expect_err("the server hangs at start");
    let took = started.elapsed();
    assert_eq!(e.outcome(), "not_run", "{e}");
    assert!(matches!(e, CallError::Unavailable { .. }), "{e}");
    assert!(
        took >= Duration::from_millis(900),
        "it gave up after {took:?}"
    );
    let st = conn.status();
    assert_eq!(st.state, LinkState::Unavailable, "{st:?}");
    // One server was started: the call waited for the check's dial, it did not dial again.
    let starts = std::fs::read_to_string(&meter).unwrap_or_default();
    assert_eq!(
        starts.lines().filter(|l| l.starts_with("start")).count(),
        1,
        "{starts}"
    );
}

#[actix_rt::test]
async fn a_panic_while_closing_does_not_bring_the_connection_back() {
    let pidfile = tempfile::NamedTempFile::new().unwrap();
    let registry = Registry::new(1).start();
    let conn = start(&registry, pidfile.path(), ctx()).await;
    text(&conn, "one").await.expect("first call");
    let pid = read_pid(pidfile.path()).expect("pid");
    let _ = conn.send(ArmPanic(PanicPoint::Close)).await;
    let holder = conn.clone();
    conn.close();
    assert!(eventually(Duration::from_secs(8), || !alive(pid)).await);
    let e = text(&holder, "late").await.expect_err("closed");
    assert_eq!(e.outcome(), "not_run", "{e}");
    assert!(eventually(Duration::from_secs(5), || holder.restarts() == 1).await);
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(text(&holder, "later").await.is_err());
}

/// Mid-session: the session's snapshot keeps the same handle across the restart, so the
/// session keeps working and its view counts the restart.
#[actix_rt::test]
async fn a_session_keeps_working_after_its_connection_actor_panics() {
    use albedo_mcp::actors::composition::{Composition, GetView, Reload};
    use albedo_mcp::actors::runtime::Runtime;
    let home = tempfile::tempdir().unwrap();
    let ext = json!({"enabled": {"mcp": true}, "mcp": {"servers": {
        "fx": fixture_server("exits_mid_call.py", &[])}}});
    std::fs::write(home.path().join("extensions.json"), ext.to_string()).unwrap();
    let registry = Registry::new(1).start();
    let runtime = Runtime::new(home.path().to_path_buf(), registry, ctx(), None).start();
    let (comp, shared, _events) = Composition::new("t".into(), runtime, None, true);
    let comp = comp.start();
    assert_eq!(comp.send(Reload::default()).await.unwrap(), Ok(1));
    let conn = shared.load().conns.get("fx").cloned().unwrap();
    conn.call(echo("before")).await.expect("before");
    let _ = conn.send(ArmPanic(PanicPoint::Handler)).await;
    // A view while it restarts answers (it asks no actor).
    let _ = comp.send(GetView).await.unwrap();
    assert!(eventually(Duration::from_secs(5), || conn.restarts() == 1).await);
    let conn = shared.load().conns.get("fx").cloned().unwrap();
    let r = conn.call(echo("mid")).await.expect("after");
    assert_eq!(r.to_value().unwrap()["content"][0]["text"], "mid");
    let view = comp.send(GetView).await.unwrap();
    assert_eq!(view.servers[0].restarts, 1);
    assert_eq!(view.generation, 1);
}
