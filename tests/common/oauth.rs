//! What the OAuth tests share: an API client that keeps every answer's text (to look for
//! secrets in it), what the Python authorization servers record (`counts.json`,
//! `issued.txt`), and the check that no secret reached a place anyone can read.

use super::{Daemon, HttpPeer};
use serde_json::Value;
use std::cell::RefCell;

/// The daemon's API, keeping the text of every answer.
pub struct Recorded<'a> {
    pub d: &'a Daemon,
    pub seen: RefCell<String>,
}

impl<'a> Recorded<'a> {
    pub fn new(d: &'a Daemon) -> Recorded<'a> {
        Recorded {
            d,
            seen: RefCell::new(String::new()),
        }
    }

    pub fn req(&self, method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
        let (st, text) = self.d.text(method, path, body);
        {
            let mut seen = self.seen.borrow_mut();
            seen.push_str(&text);
            seen.push('\n');
        }
        (st, serde_json::from_str(&text).unwrap_or(Value::Null))
    }

    pub fn get(&self, path: &str) -> (u16, Value) {
        self.req("GET", path, None)
    }

    /// None of `secrets` is in the daemon's log, an answer seen, extensions.json or
    /// `GET /settings/mcp`.
    pub fn assert_none_reached(&self, secrets: &[String]) {
        let d = self.d;
        let (_, settings) = self.get("/settings/mcp");
        let places = [
            ("the daemon's log", d.log()),
            ("an API answer", self.seen.borrow().clone()),
            (
                "extensions.json",
                std::fs::read_to_string(d.home.path().join("extensions.json")).unwrap_or_default(),
            ),
            ("GET /settings/mcp", settings.to_string()),
        ];
        for s in secrets {
            for (what, text) in &places {
                assert!(!text.contains(s.as_str()), "a secret reached {what}");
            }
        }
    }
}

/// The daemon's creds.json (`Null` when there is none).
pub fn creds(d: &Daemon) -> Value {
    serde_json::from_slice(&std::fs::read(d.home.path().join("creds.json")).unwrap_or_default())
        .unwrap_or(Value::Null)
}

/// What a test authorization server counted (`counts.json`).
pub fn counts(peer: &HttpPeer) -> Value {
    serde_json::from_slice(&std::fs::read(peer.file("counts.json")).unwrap_or_default())
        .unwrap_or(Value::Null)
}

pub fn count(peer: &HttpPeer, what: &str) -> u64 {
    counts(peer)[what].as_u64().unwrap_or(0)
}

/// Every token a test authorization server granted (`issued.txt`).
pub fn issued(peer: &HttpPeer) -> Vec<String> {
    std::fs::read_to_string(peer.file("issued.txt"))
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}
