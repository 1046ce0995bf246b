//! The stdio transport's two ways to the server's stdin (`transport::stdio`): a message sent
//! from the thread the transport was opened on is queued for its writer task; one sent from
//! another thread (a direct call on an API worker) is written by that thread when nothing is
//! queued, and what a full pipe does not take is queued after it. The server here is `cat`
//! behind the real launcher, so every line written comes back: the order and the bytes the
//! server saw are read off what it echoes.

mod common;
use albedo_mcp::protocol::jsonrpc::Message;
use albedo_mcp::transport::stdio::{
    OffThread, StdioSpec, StdioTransport, WRITE_HERE_MAX_IN_FLIGHT,
};
use albedo_mcp::transport::{Inbound, InboundSink, OutKind, Outbound, Transport};
use bytes::Bytes;
use common::*;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Collects what `cat` echoes: each notification's params.
#[derive(Default)]
struct Echoes {
    seen: Mutex<Vec<Value>>,
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

/// A message from another thread is written by that thread only while few requests sent from
/// other threads wait for their answers daemon-wide; past that it is queued for the writer task
/// (which reaches the server all the same).
#[tokio::test(flavor = "current_thread")]
async fn under_load_a_message_from_another_thread_is_queued_for_the_writer() {
    let echoes = Arc::new(Echoes::default());
    let t = StdioTransport::spawn(&cat(), echoes.clone()).expect("cat starts");
    let from_other = |seq: u64| {
        let t = t.clone();
        std::thread::spawn(move || t.send(note(json!({"seq": seq}))).map_err(|e| e.to_string()))
            .join()
            .expect("the sender ends")
    };
    from_other(0).expect("sent");
    assert_eq!(
        t.stats.written_here.load(Ordering::Relaxed),
        1,
        "written at once"
    );
    let busy: Vec<OffThread> = (0..=WRITE_HERE_MAX_IN_FLIGHT)
        .map(|_| OffThread::begin())
        .collect();
    from_other(1).expect("queued");
    assert_eq!(
        t.stats.written_here.load(Ordering::Relaxed),
        1,
        "queued, not written"
    );
    // The writer task (on this thread) writes it; until then a later message queues behind it.
    assert_eq!(wait_for(&echoes, 2).await.len(), 2);
    drop(busy);
    from_other(2).expect("sent");
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
    let other = {
        let t = t.clone();
        std::thread::spawn(move || t.send(note(json!({"seq": 1}))).map_err(|e| e.to_string()))
    };
    let e = other.join().unwrap().expect_err("closed");
    assert!(e.to_string().contains("closed"), "{e}");
    assert!(t.send(note(json!({"seq": 2}))).is_err());
}
