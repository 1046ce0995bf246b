//! A response's `result` as the server wrote it: [`ResultText`] keeps the JSON text (checked
//! to be JSON when the message was parsed), as a slice of the bytes the message came in
//! (never copied), so that a tool result can go from the server's bytes to the API's answer
//! without being parsed into a tree or copied and written again; callers that need a tree
//! (the handshake, discovery) ask for one. [`ResultHead`] is what albedo reads off
//! a result without building that tree: whether it is an object, its `resultType`, and whether
//! it has a top-level key of a given name.
//!
//! Owns: the result's text and its head. Must not touch: anything but `serde_json`, `bytes`,
//! `memchr` and the check's [`Checked`].

use super::check::Checked;
use bytes::Bytes;
use serde::Serialize;
use serde_json::value::RawValue;
use serde_json::Value;
use std::borrow::Cow;
use std::fmt;
use std::sync::OnceLock;

/// What albedo reads off a result without parsing it into a tree.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ResultHead {
    /// The result is a JSON object.
    pub object: bool,
    /// Its `resultType`, when that is a string (2026-07-28; absent means `complete`). The
    /// two values the spec names are not copied.
    pub result_type: Option<Cow<'static, str>>,
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

    /// The result of `message` that [`crate::protocol::check`] checked as it arrived, a
    /// slice of it, with the head the check noted (read here, not scanned for again).
    pub fn checked(message: &Bytes, c: &Checked) -> ResultText {
        let r = ResultText::of(message.slice(c.result.clone()));
        if let Some(h) = &c.head {
            let _ = r.head.set(ResultHead {
                object: h.object,
                result_type: h
                    .result_type
                    .as_ref()
                    .and_then(|t| message.get(t.clone()))
                    .and_then(result_type_of),
                outcome_key: h.outcome_key,
            });
        }
        r
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

/// The head in one pass over the result's top level, without deserializing anything but a
/// `resultType`'s value. The text is JSON already (checked when it was parsed or made), so
/// this only finds where each top-level value ends: a string's end with `memchr` (a 10 MiB
/// text is crossed at memory speed, where serde's `IgnoredAny` checked every byte again),
/// a nested value's by counting brackets outside strings. Text that is not JSON after all
/// gives the default head, as a failed parse did.
fn read_head(text: &[u8]) -> ResultHead {
    scan_head(text).unwrap_or_default()
}

fn scan_head(t: &[u8]) -> Option<ResultHead> {
    let mut i = skip_ws(t, 0);
    if t.get(i) != Some(&b'{') {
        return Some(ResultHead::default());
    }
    let mut head = ResultHead {
        object: true,
        ..ResultHead::default()
    };
    i = skip_ws(t, i + 1);
    if t.get(i) == Some(&b'}') {
        return Some(head);
    }
    loop {
        if t.get(i) != Some(&b'"') {
            return None;
        }
        let key_end = string_end(t, i)?;
        let key = &t[i..key_end];
        i = skip_ws(t, key_end);
        if t.get(i) != Some(&b':') {
            return None;
        }
        i = skip_ws(t, i + 1);
        let value_end = value_end(t, i)?;
        if key_is(key, "resultType") {
            let raw = &t[i..value_end];
            head.result_type = result_type_of(raw);
        } else if key_is(key, "outcome") {
            head.outcome_key = true;
        }
        i = skip_ws(t, value_end);
        match t.get(i)? {
            b',' => i = skip_ws(t, i + 1),
            b'}' => return Some(head),
            _ => return None,
        }
    }
}

/// A `resultType`'s value read: a string, or `None`.
fn result_type_of(raw: &[u8]) -> Option<Cow<'static, str>> {
    // The usual case, a string with no escape (`"complete"`), without a parse. The text is
    // JSON already, so a string here holds no control character and is UTF-8.
    if let [b'"', inner @ .., b'"'] = raw {
        match inner {
            b"complete" => return Some(Cow::Borrowed("complete")),
            b"input_required" => return Some(Cow::Borrowed("input_required")),
            _ => {}
        }
        if !inner.contains(&b'\\') {
            if let Ok(s) = std::str::from_utf8(inner) {
                return Some(Cow::Owned(s.to_owned()));
            }
        }
    }
    match serde_json::from_slice::<Value>(raw) {
        Ok(Value::String(s)) => Some(Cow::Owned(s)),
        Ok(_) => None,
        // A string serde cannot decode (a lone surrogate escape): not `complete`.
        Err(_) => Some(Cow::Owned(String::from_utf8_lossy(raw).into_owned())),
    }
}

fn skip_ws(t: &[u8], mut i: usize) -> usize {
    while matches!(t.get(i), Some(b' ' | b'\t' | b'\n' | b'\r')) {
        i += 1;
    }
    i
}

/// `quoted` (a JSON string with its quotes) is `name`; escapes are read only when present.
fn key_is(quoted: &[u8], name: &str) -> bool {
    let inner = &quoted[1..quoted.len() - 1];
    if inner.contains(&b'\\') {
        serde_json::from_slice::<String>(quoted).is_ok_and(|k| k == name)
    } else {
        inner == name.as_bytes()
    }
}

/// The index just past the string that starts at `t[i]` (a quote).
fn string_end(t: &[u8], i: usize) -> Option<usize> {
    let mut j = i + 1;
    loop {
        let k = j + memchr::memchr2(b'"', b'\\', t.get(j..)?)?;
        if t[k] == b'"' {
            return Some(k + 1);
        }
        j = k + 2;
    }
}

/// The index just past the value that starts at `t[i]`.
fn value_end(t: &[u8], i: usize) -> Option<usize> {
    match t.get(i)? {
        b'"' => string_end(t, i),
        b'{' | b'[' => {
            let (mut depth, mut j) = (0usize, i);
            loop {
                match t.get(j)? {
                    b'"' => {
                        j = string_end(t, j)?;
                        continue;
                    }
                    b'{' | b'[' => depth += 1,
                    b'}' | b']' => {
                        depth = depth.checked_sub(1)?;
                        if depth == 0 {
                            return Some(j + 1);
                        }
                    }
                    _ => {}
                }
                j += 1;
            }
        }
        _ => {
            // A number, `true`, `false` or `null`.
            let len = t[i..]
                .iter()
                .position(|c| matches!(c, b',' | b'}' | b']' | b' ' | b'\t' | b'\n' | b'\r'))
                .unwrap_or(t.len() - i);
            (len > 0).then_some(i + len)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::de::{IgnoredAny, MapAccess, Visitor};
    use serde_json::json;

    /// The head as serde reads it (what `read_head` did before it scanned): the reference.
    fn serde_head(text: &[u8]) -> ResultHead {
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
                            Value::String(s) => Some(Cow::Owned(s)),
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

    #[test]
    fn the_scanned_head_is_the_one_serde_reads() {
        let cases = [
            r#"{}"#,
            r#"{ }"#,
            r#"{"a":1}"#,
            r#"{"content":[{"type":"text","text":"a \"}] { [ \\"}],"resultType":"complete"}"#,
            r#"{"resultType":"input_required","resultType":5}"#,
            r#"{"resultType":5,"resultType":"incomplete"}"#,
            r#"{"result\u0054ype":"escaped","outc\u006fme":true}"#,
            r#"{ "outcome" : null , "x" : [ 1 , 2.5e3 , -0 , true , false , { "y" : [ ] } ] }"#,
            r#"{"s":"\\","t":"\\\"","resultType":"a\"b"}"#,
            r#"{"n":{"resultType":"inner","outcome":1},"m":[{"outcome":2}]}"#,
            r#"{"é":"ü","resultType":"ok"}"#,
            r#"{"a":1e5}"#,
            r#"[{"outcome":1}]"#,
            r#""{\"outcome\":1}""#,
            r#"12"#,
            r#"null"#,
        ];
        for c in cases {
            assert!(serde_json::from_str::<Value>(c).is_ok(), "not JSON: {c}");
            assert_eq!(read_head(c.as_bytes()), serde_head(c.as_bytes()), "{c}");
        }
        // Not JSON after all: no panic, the default head, as a failed parse gave.
        for c in [
            r#"{"a":"#,
            r#"{"a":1"#,
            r#"{"a" 1}"#,
            r#"{"a":[}"#,
            r#"{"a":"\"#,
            r#"{]"#,
        ] {
            assert_eq!(read_head(c.as_bytes()), ResultHead::default(), "{c}");
        }
        // Lone surrogate escapes are JSON text serde will not decode (its reading gave up on
        // the whole head): a key with one is just another key, and a `resultType` with one is
        // not `complete`, so such a result is refused rather than passed on as finished.
        assert_eq!(
            read_head(br#"{"\ud800":1,"resultType":"input_required"}"#),
            ResultHead {
                object: true,
                result_type: Some("input_required".into()),
                outcome_key: false
            }
        );
        assert_ne!(
            read_head(br#"{"resultType":"\ud800"}"#).result_type(),
            "complete"
        );
        let big = format!(
            r#"{{"content":[{{"type":"text","text":"{}"}}],"outcome":0}}"#,
            "x".repeat(1 << 20)
        );
        assert_eq!(read_head(big.as_bytes()), serde_head(big.as_bytes()));
    }

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
