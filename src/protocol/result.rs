//! A response's `result` as the server wrote it: [`ResultText`] keeps the JSON text (checked
//! to be JSON when the message was parsed) so that a tool result can go from the server's
//! bytes to the API's answer without being parsed into a tree and written again; callers that
//! need a tree (the handshake, discovery) ask for one. [`ResultHead`] is what albedo reads off
//! a result without building that tree: whether it is an object, its `resultType`, and whether
//! it has a top-level key of a given name.
//!
//! Owns: the result's text and its head. Must not touch: anything but `serde_json`.

use serde::de::{IgnoredAny, MapAccess, Visitor};
use serde::Serialize;
use serde_json::value::RawValue;
use serde_json::Value;
use std::fmt;
use std::sync::{Arc, OnceLock};

/// What albedo reads off a result without parsing it into a tree.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ResultHead {
    /// The result is a JSON object.
    pub object: bool,
    /// Its `resultType`, when that is a string (2026-07-28; absent means `complete`).
    pub result_type: Option<String>,
    /// It has a top-level `outcome` key (the API adds its own `outcome` beside the result's
    /// keys, so such a result is written the slow way, with albedo's `outcome` replacing it).
    pub outcome_key: bool,
}

impl ResultHead {
    /// `resultType`, `complete` when absent (as `model::result_type` reads a tree).
    pub fn result_type(&self) -> &str {
        self.result_type.as_deref().unwrap_or("complete")
    }
}

/// A `result`, kept as the text the server sent. Cloning it shares the text.
#[derive(Clone)]
pub struct ResultText {
    /// Boxed twice so that sharing it never copies the text (`Arc<RawValue>` would).
    raw: Arc<Box<RawValue>>,
    head: Arc<OnceLock<ResultHead>>,
}

impl ResultText {
    /// Keep `raw` (already checked to be JSON).
    pub fn new(raw: Box<RawValue>) -> ResultText {
        ResultText {
            raw: Arc::new(raw),
            head: Arc::new(OnceLock::new()),
        }
    }

    /// A result albedo makes itself (answers to a server's `ping`, tests).
    pub fn from_value(v: &Value) -> ResultText {
        let raw = serde_json::value::to_raw_value(v).unwrap_or_else(|_| {
            RawValue::from_string("null".to_owned()).unwrap_or_else(|_| unreachable!())
        });
        ResultText::new(raw)
    }

    /// The JSON text, exactly as the server wrote it (no white space around it).
    pub fn get(&self) -> &str {
        self.raw.get()
    }

    /// The text as bytes for an answer: handed over without a copy when this is its only
    /// holder.
    pub fn into_bytes(self) -> bytes::Bytes {
        match Arc::try_unwrap(self.raw) {
            Ok(raw) => {
                let text: Box<str> = raw.into();
                bytes::Bytes::from(String::from(text))
            }
            Err(shared) => bytes::Bytes::copy_from_slice(shared.get().as_bytes()),
        }
    }

    /// The result as a tree, for the callers that read it.
    pub fn to_value(&self) -> Result<Value, serde_json::Error> {
        serde_json::from_str(self.get())
    }

    /// What albedo reads off it, computed once (one pass over the text, nothing kept but the
    /// head).
    pub fn head(&self) -> &ResultHead {
        self.head.get_or_init(|| read_head(self.get()))
    }
}

impl From<Value> for ResultText {
    fn from(v: Value) -> ResultText {
        ResultText::from_value(&v)
    }
}

impl PartialEq for ResultText {
    fn eq(&self, other: &ResultText) -> bool {
        self.get() == other.get()
    }
}

impl fmt::Debug for ResultText {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = self.get();
        match s.char_indices().nth(200) {
            Some((i, _)) => write!(f, "ResultText({}… {} bytes)", &s[..i], s.len()),
            None => write!(f, "ResultText({s})"),
        }
    }
}

impl Serialize for ResultText {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.raw.serialize(s)
    }
}

fn read_head(text: &str) -> ResultHead {
    if !text.starts_with('{') {
        return ResultHead::default();
    }
    let mut de = serde_json::Deserializer::from_str(text);
    serde::Deserializer::deserialize_map(&mut de, HeadVisitor).unwrap_or_default()
}

struct HeadVisitor;

impl<'de> Visitor<'de> for HeadVisitor {
    type Value = ResultHead;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<ResultHead, A::Error> {
        let mut head = ResultHead {
            object: true,
            ..ResultHead::default()
        };
        while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
            match key.as_ref() {
                "resultType" => {
                    head.result_type = match map.next_value::<Value>()? {
                        Value::String(s) => Some(s),
                        _ => None,
                    }
                }
                "outcome" => {
                    head.outcome_key = true;
                    map.next_value::<IgnoredAny>()?;
                }
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(head)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn text(s: &str) -> ResultText {
        ResultText::new(RawValue::from_string(s.to_owned()).unwrap())
    }

    #[test]
    fn the_head_reads_result_type_and_outcome_without_a_tree() {
        let t = text(
            r#"{"content":[{"type":"text","text":"x\"}"}],"resultType":"input_required","outcome":1}"#,
        );
        assert_eq!(
            t.head(),
            &ResultHead {
                object: true,
                result_type: Some("input_required".into()),
                outcome_key: true
            }
        );
        let t = text(r#"{"content":[],"nested":{"resultType":"x","outcome":2}}"#);
        assert_eq!(t.head().result_type(), "complete");
        assert!(!t.head().outcome_key);
        for s in ["[1,2]", "\"s\"", "3", "null", "true"] {
            assert!(!text(s).head().object, "{s}");
        }
        assert_eq!(text(r#"{"resultType":7}"#).head().result_type(), "complete");
    }

    #[test]
    fn it_keeps_the_text_and_gives_a_tree_on_demand() {
        let t = ResultText::from_value(&json!({"a": [1, 2], "b": "é"}));
        assert_eq!(t.get(), r#"{"a":[1,2],"b":"é"}"#);
        assert_eq!(t.to_value().unwrap(), json!({"a": [1, 2], "b": "é"}));
        assert_eq!(t, ResultText::from(json!({"a": [1, 2], "b": "é"})));
        assert_eq!(serde_json::to_string(&t).unwrap(), t.get());
        let long = ResultText::from_value(&json!({"t": "x".repeat(1000)}));
        assert!(format!("{long:?}").len() < 300);
    }
}
