//! The stdio transport's threads (`transport::stdio`). Its two ways to the server's stdin: a
//! message sent from the thread the transport was opened on is queued for its writer task; one
//! sent from another thread (a direct call on an API worker) is written by that thread when
//! nothing is queued (under load only by the thread the reader moved to), and what a full pipe
//! does not take is queued after it. Its reader
//! (`transport::stdio::reader`), which moves to a thread that calls from a `LocalSet` run
//! after run, loses nothing as it moves, and still reports the server's end from there. The
//! server here is `cat` behind the real launcher, so every line written comes back: the
//! order and the bytes the server saw are read off what it echoes.

mod common;
use albedo_mcp::protocol::jsonrpc::Message;
use albedo_mcp::transport::stdio::{
    OffThread, StdioSpec, StdioTransport, MOVE_AFTER, WRITE_HERE_MAX_IN_FLIGHT,
};
use albedo_mcp::transport::{Inbound, InboundSink, OutKind, Outbound, Transport};
use bytes::Bytes;
use common::*;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Collects what `cat` echoes: each notification's params, and the thread that read it.
#[derive(Default)]
struct Echoes {
    seen: Mutex<Vec<Value>>,
    read_on: Mutex<Vec<std::thread::ThreadId>>,
    closed: Mutex<Option<String>>,
}

impl InboundSink for Echoes {
    fn deliver(&self, ev: Inbound) {
        match ev {
            Inbound::Message(Message::Notification { params, .. }) => {
                self.seen
                    .lock()
                    .unwrap()
                    .push(params.unwrap_or(Value::Null));
                self.read_on
                    .lock()
                    .unwrap()
                    .push(std::thread::current().id());
            }
            Inbound::Closed(e) => *self.closed.lock().unwrap() = Some(e.to_string()),
            _ => {}
        }
    }
}

fn cat() -> StdioSpec {
    StdioSpec {
        launcher: launcher().into(),
        command: "/bin/cat".into(),
        args: vec![],
        cwd: None,
        env: BTreeMap::new(),
    }
}

fn note(params: Value) -> Outbound {
    let body = json!({"jsonrpc": "2.0", "method": "n", "params": params}).to_string();
    Outbound {
        kind: OutKind::Notification { method: "n".into() },
        body: Bytes::from(body),
        headers: vec![],
        ack: None,
    }
}

async fn wait_for(echoes: &Echoes, n: usize) -> Vec<Value> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let seen = echoes.seen.lock().unwrap().clone();
        if seen.len() >= n || tokio::time::Instant::now() > deadline {
            return seen;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Messages from other threads (written directly) and from the transport's own thread
/// (queued) reach the server whole and in the order of their sends; a message larger than
/// the pipe holds is written in part by its sender's thread and finished by the writer task,
/// and what is sent after it waits behind it.
#[tokio::test(flavor = "current_thread")]
async fn direct_and_queued_writes_reach_the_server_whole_and_in_order() {
    let echoes = Arc::new(Echoes::default());
    let t = StdioTransport::spawn(&cat(), echoes.clone()).expect("cat starts");
    // 1 MiB: far over a pipe's 64 KiB, so the direct write cannot take it all at once.
    let big = "x".repeat(1 << 20);
    let sender = {
        let (t, big) = (t.clone(), big.clone());
        std::thread::spawn(move || {
            t.send(note(json!({"from": "other", "seq": 0, "big": big})))
                .expect("the big one is sent");
            for seq in 1..200 {
                t.send(note(json!({"from": "other", "seq": seq})))
                    .expect("sent");
            }
        })
    };
    // Meanwhile this thread (the transport's own) queues its messages.
    for seq in 0..200 {
        t.send(note(json!({"from": "home", "seq": seq})))
            .expect("queued");
        if seq % 20 == 0 {
            tokio::task::yield_now().await;
        }
    }
    sender.join().expect("the sending thread ends");
    let seen = wait_for(&echoes, 400).await;
    assert_eq!(seen.len(), 400, "every line came back");
    for from in ["other", "home"] {
        let seqs: Vec<u64> = seen
            .iter()
            .filter(|v| v["from"] == from)
            .map(|v| v["seq"].as_u64().unwrap())
            .collect();
        assert_eq!(
            seqs,
            (0..200).collect::<Vec<_>>(),
            "{from}: in the order sent"
        );
    }
    let first = seen.iter().find(|v| v["from"] == "other").unwrap();
    assert_eq!(first["big"].as_str().map(str::len), Some(1 << 20), "whole");
    assert!(echoes.closed.lock().unwrap().is_none());
    t.close();
}

/// Many threads at once, each sending directly: every message arrives whole, each thread's
/// in its order.
#[tokio::test(flavor = "current_thread")]
async fn concurrent_direct_senders_keep_each_ones_order() {
    let echoes = Arc::new(Echoes::default());
    let t = StdioTransport::spawn(&cat(), echoes.clone()).expect("cat starts");
    let pad = "p".repeat(3000);
    let threads: Vec<_> = (0..4)
        .map(|k| {
            let (t, pad) = (t.clone(), pad.clone());
            std::thread::spawn(move || {
                for seq in 0..300 {
                    t.send(note(json!({"from": k, "seq": seq, "pad": pad})))
                        .expect("sent");
                }
            })
        })
        .collect();
    for th in threads {
        th.join().expect("a sender ends");
    }
    let seen = wait_for(&echoes, 1200).await;
    assert_eq!(seen.len(), 1200);
    for k in 0..4 {
        let seqs: Vec<u64> = seen
            .iter()
            .filter(|v| v["from"] == k)
            .map(|v| v["seq"].as_u64().unwrap())
            .collect();
        assert_eq!(seqs, (0..300).collect::<Vec<_>>(), "sender {k}");
    }
    t.close();
}

/// Held by the tests that count requests in flight daemon-wide (`OffThread`, a process-wide
/// count), so that one's load does not change what another sees.
static LOAD: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// More requests in flight daemon-wide than a thread other than the writer's writes under,
/// while the value lives.
fn many_in_flight() -> Vec<OffThread> {
    (0..=WRITE_HERE_MAX_IN_FLIGHT)
        .map(|_| OffThread::begin())
        .collect()
}

/// The notification with `seq`, sent from a thread of its own (neither the transport's nor a
/// worker's): what the send answered.
fn send_from_another_thread(t: &Arc<StdioTransport>, seq: u64) -> Result<(), String> {
    let t = t.clone();
    std::thread::spawn(move || t.send(note(json!({"seq": seq}))).map_err(|e| e.to_string()))
        .join()
        .expect("the sender ends")
}

/// A message from another thread is written by that thread only while few requests sent from
/// other threads wait for their answers daemon-wide; past that it is queued for the writer task
/// (which reaches the server all the same).
#[tokio::test(flavor = "current_thread")]
async fn under_load_a_message_from_another_thread_is_queued_for_the_writer() {
    let _load = LOAD.lock().await;
    let echoes = Arc::new(Echoes::default());
    let t = StdioTransport::spawn(&cat(), echoes.clone()).expect("cat starts");
    send_from_another_thread(&t, 0).expect("sent");
    assert_eq!(
        t.stats.written_here.load(Ordering::Relaxed),
        1,
        "written at once"
    );
    let busy = many_in_flight();
    send_from_another_thread(&t, 1).expect("queued");
    assert_eq!(
        t.stats.written_here.load(Ordering::Relaxed),
        1,
        "queued, not written"
    );
    // The writer task (on this thread) writes it; until then a later message queues behind it.
    assert_eq!(wait_for(&echoes, 2).await.len(), 2);
    drop(busy);
    send_from_another_thread(&t, 2).expect("sent");
    assert_eq!(
        t.stats.written_here.load(Ordering::Relaxed),
        2,
        "written at once again"
    );
    let seqs: Vec<u64> = wait_for(&echoes, 3)
        .await
        .iter()
        .map(|v| v["seq"].as_u64().unwrap())
        .collect();
    assert_eq!(seqs, vec![0, 1, 2], "all three arrive, in order");
    t.close();
}

/// After a close nothing is written, from any thread: the send says the connection is
/// closed (the request never left).
#[tokio::test(flavor = "current_thread")]
async fn nothing_is_written_after_a_close() {
    let echoes = Arc::new(Echoes::default());
    let t = StdioTransport::spawn(&cat(), echoes.clone()).expect("cat starts");
    t.send(note(json!({"seq": 0}))).expect("sent");
    assert_eq!(wait_for(&echoes, 1).await.len(), 1);
    t.close();
    let e = send_from_another_thread(&t, 1).expect_err("closed");
    assert!(e.to_string().contains("closed"), "{e}");
    assert!(t.send(note(json!({"seq": 2}))).is_err());
}

/// A thread like an API worker: a current-thread runtime driving a `LocalSet`, running the
/// jobs it is given as tasks of that set; its runtime ends when the `Worker` is dropped.
struct Worker {
    jobs: Option<tokio::sync::mpsc::UnboundedSender<Box<dyn FnOnce() + Send>>>,
    thread: Option<std::thread::JoinHandle<()>>,
    id: std::thread::ThreadId,
}

impl Worker {
    fn start() -> Worker {
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<Box<dyn FnOnce() + Send>>();
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime");
            let local = tokio::task::LocalSet::new();
            local.block_on(&rt, async move {
                while let Some(job) = rx.recv().await {
                    job();
                }
            });
        });
        let id = thread.thread().id();
        Worker {
            jobs: Some(tx),
            thread: Some(thread),
            id,
        }
    }

    /// Run `job` on the worker, and wait until it ran.
    fn run(&self, job: impl FnOnce() + Send + 'static) {
        let (done, wait) = std::sync::mpsc::channel();
        let job = Box::new(move || {
            job();
            let _ = done.send(());
        });
        self.jobs.as_ref().expect("running").send(job).ok();
        wait.recv().expect("the job ran");
    }

    /// `calls` direct calls from the worker, as the API makes them: each tells the transport
    /// it calls from here, then sends (seq numbers from `first`).
    fn calls(&self, t: &Arc<StdioTransport>, first: u64, calls: u64) {
        let t = t.clone();
        self.run(move || {
            for seq in first..first + calls {
                t.read_here();
                t.send(note(json!({"seq": seq}))).expect("sent");
            }
        });
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        self.jobs.take();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The seqs echoed so far, in the order read.
fn seqs(seen: &[Value]) -> Vec<u64> {
    seen.iter().map(|v| v["seq"].as_u64().unwrap()).collect()
}

/// `MOVE_AFTER` direct calls in a row from one worker move the reader there, with answers in
/// the pipe as it moves: every line comes back once and in order, the later ones read on the
/// worker; and when the server ends, its end is still reported.
#[tokio::test(flavor = "current_thread")]
async fn the_reader_moves_to_the_thread_that_calls_and_loses_nothing() {
    let echoes = Arc::new(Echoes::default());
    let t = StdioTransport::spawn(&cat(), echoes.clone()).expect("cat starts");
    let worker = Worker::start();
    let first = u64::from(MOVE_AFTER) + 40;
    worker.calls(&t, 0, first);
    assert_eq!(
        seqs(&wait_for(&echoes, first as usize).await),
        (0..first).collect::<Vec<_>>()
    );
    assert!(
        eventually(Duration::from_secs(20), || t.reader_moves() == 1).await,
        "moved once"
    );
    worker.calls(&t, first, 20);
    let seen = wait_for(&echoes, first as usize + 20).await;
    assert_eq!(
        seqs(&seen),
        (0..first + 20).collect::<Vec<_>>(),
        "once each, in order"
    );
    let read_on = echoes.read_on.lock().unwrap().clone();
    assert!(
        read_on[first as usize..].iter().all(|id| *id == worker.id),
        "read on the worker after the move"
    );
    assert_eq!(t.reader_moves(), 1, "one move");
    // The server's end, read on the worker, is reported.
    t.close();
    assert!(
        eventually(Duration::from_secs(20), || echoes
            .closed
            .lock()
            .unwrap()
            .is_some())
        .await
    );
}

/// Calls from two workers in turn, each run shorter than `MOVE_AFTER`, leave the reader where
/// it is; a run that long then moves it.
#[tokio::test(flavor = "current_thread")]
async fn calls_from_two_threads_in_turn_do_not_move_the_reader() {
    let echoes = Arc::new(Echoes::default());
    let t = StdioTransport::spawn(&cat(), echoes.clone()).expect("cat starts");
    let (a, b) = (Worker::start(), Worker::start());
    let run = u64::from(MOVE_AFTER) - 1;
    let mut seq = 0;
    for _ in 0..4 {
        for w in [&a, &b] {
            w.calls(&t, seq, run);
            seq += run;
        }
    }
    assert_eq!(wait_for(&echoes, seq as usize).await.len(), seq as usize);
    assert_eq!(t.reader_moves(), 0, "no run was long enough");
    let home = std::thread::current().id();
    assert!(echoes.read_on.lock().unwrap().iter().all(|id| *id == home));
    b.calls(&t, seq, run + 1);
    assert!(
        eventually(Duration::from_secs(20), || t.reader_moves() == 1).await,
        "moved to b"
    );
    t.close();
}

/// A worker that asked for the reader and ended before it came: the reader reads on where it
/// was, and nothing is lost.
#[tokio::test(flavor = "current_thread")]
async fn a_reader_asked_to_a_worker_that_ended_reads_on_where_it_was() {
    let echoes = Arc::new(Echoes::default());
    let t = StdioTransport::spawn(&cat(), echoes.clone()).expect("cat starts");
    // This thread does not run its tasks until the worker has ended: the reader, asked to
    // move, finds the worker's task gone.
    let w = Worker::start();
    w.calls(&t, 0, u64::from(MOVE_AFTER));
    drop(w);
    t.send(note(json!({"seq": MOVE_AFTER}))).expect("sent");
    let n = MOVE_AFTER as usize + 1;
    assert_eq!(
        seqs(&wait_for(&echoes, n).await),
        (0..n as u64).collect::<Vec<_>>()
    );
    assert_eq!(t.reader_moves(), 0);
    let home = std::thread::current().id();
    assert!(echoes.read_on.lock().unwrap().iter().all(|id| *id == home));
    assert!(echoes.closed.lock().unwrap().is_none(), "still open");
    t.close();
}

/// Once the reader has moved to a worker, that worker writes its own messages even when many
/// requests wait daemon-wide (the whole call stays on its thread; the arbiter is not woken to
/// write); another thread's message under the same load is still queued for the writer task.
#[tokio::test(flavor = "current_thread")]
async fn the_thread_the_reader_moved_to_writes_its_messages_under_load() {
    let _load = LOAD.lock().await;
    let echoes = Arc::new(Echoes::default());
    let t = StdioTransport::spawn(&cat(), echoes.clone()).expect("cat starts");
    let worker = Worker::start();
    let first = u64::from(MOVE_AFTER);
    worker.calls(&t, 0, first);
    assert!(
        eventually(Duration::from_secs(20), || t.reader_moves() == 1).await,
        "moved"
    );
    assert_eq!(
        wait_for(&echoes, first as usize).await.len(),
        first as usize
    );
    let busy = many_in_flight();
    let before = t.stats.written_here.load(Ordering::Relaxed);
    worker.calls(&t, first, 10);
    assert_eq!(
        t.stats.written_here.load(Ordering::Relaxed),
        before + 10,
        "written by the worker the reader moved to"
    );
    send_from_another_thread(&t, first + 10).expect("queued");
    assert_eq!(
        t.stats.written_here.load(Ordering::Relaxed),
        before + 10,
        "another thread's message is queued"
    );
    drop(busy);
    let n = first as usize + 11;
    assert_eq!(
        seqs(&wait_for(&echoes, n).await),
        (0..n as u64).collect::<Vec<_>>(),
        "all arrive, in order"
    );
    t.close();
}
