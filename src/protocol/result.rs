//! A response's `result` as the server wrote it: [`ResultText`] keeps the JSON text (checked
//! to be JSON when the message was parsed), as a slice of the bytes the message came in
//! (never copied), so that a tool result can go from the server's bytes to the API's answer
//! without being parsed into a tree or copied and written again; callers that need a tree
//! (the handshake, discovery) ask for one. [`ResultHead`] is what albedo reads off
//! a result without building that tree: whether it is an object, its `resultType`, and whether
//! it has a top-level key of a given name.
//!
//! Owns: the result's text and its head. Must not touch: anything but `serde_json`.

use bytes::Bytes;
use serde::de::{IgnoredAny, MapAccess, Visitor};
use serde::Serialize;
use serde_json::value::RawValue;
use serde_json::Value;
use std::fmt;
use std::sync::OnceLock;

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

/// A `result`, kept as the text the server sent. Cloning it shares the text (and copies the
/// head, once read).
#[derive(Clone)]
pub struct ResultText {
    /// JSON text, UTF-8 (checked when it was parsed or made).
    text: Bytes,
    head: OnceLock<ResultHead>,
}

impl ResultText {
    /// Keep `raw` (already checked to be JSON).
    pub fn new(raw: Box<RawValue>) -> ResultText {
        let text: Box<str> = raw.into();
        ResultText::of(Bytes::from(String::from(text)))
    }

    fn of(text: Bytes) -> ResultText {
        ResultText {
            text,
            head: OnceLock::new(),
        }
    }

    /// `raw`, a JSON value borrowed from `body` (a message as it came in), kept as a slice of
    /// `body`: no copy. `None` when `raw` does not lie within `body`.
    pub fn within(body: &Bytes, raw: &RawValue) -> Option<ResultText> {
        let (b, r) = (body.as_ptr() as usize, raw.get().as_ptr() as usize);
        let inside = r >= b && r + raw.get().len() <= b + body.len();
        inside.then(|| ResultText::of(body.slice_ref(raw.get().as_bytes())))
    }

    /// A result albedo makes itself (answers to a server's `ping`, tests).
    pub fn from_value(v: &Value) -> ResultText {
        let raw = serde_json::value::to_raw_value(v).unwrap_or_else(|_| {
            RawValue::from_string("null".to_owned()).unwrap_or_else(|_| unreachable!())
        });
        ResultText::new(raw)
    }

    /// The JSON text, exactly as the server wrote it (no white space around it). Checks the
    /// text's UTF-8 again: the hot paths use [`Self::as_bytes`].
    pub fn get(&self) -> &str {
        std::str::from_utf8(&self.text).unwrap_or("null")
    }

    /// The JSON text's bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.text
    }

    /// The text for an answer, shared (no copy).
    pub fn into_bytes(self) -> Bytes {
        self.text
    }

    /// The result as a tree, for the callers that read it.
    pub fn to_value(&self) -> Result<Value, serde_json::Error> {
        serde_json::from_slice(&self.text)
    }

    /// What albedo reads off it, computed once (one pass over the text, nothing kept but the
    /// head).
    pub fn head(&self) -> &ResultHead {
        self.head.get_or_init(|| read_head(&self.text))
    }
}

impl From<Value> for ResultText {
    fn from(v: Value) -> ResultText {
        ResultText::from_value(&v)
    }
}

impl PartialEq for ResultText {
    fn eq(&self, other: &ResultText) -> bool {
        self.text == other.text
    }
}

impl fmt::Debug for ResultText {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = String::from_utf8_lossy(&self.text[..self.text.len().min(800)]);
        match s.char_indices().nth(200) {
            Some((i, _)) => write!(f, "ResultText({}… {} bytes)", &s[..i], self.text.len()),
            None => write!(f, "ResultText({s})"),
        }
    }
}

impl Serialize for ResultText {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let raw: &RawValue =
            serde_json::from_slice(&self.text).map_err(serde::ser::Error::custom)?;
        raw.serialize(s)
    }
}

fn read_head(text: &[u8]) -> ResultHead {
    if !text.starts_with(b"{") {
        return ResultHead::default();
    }
    let mut de = serde_json::Deserializer::from_slice(text);
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
