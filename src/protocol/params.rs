//! A request's params as they go out: a tree, or a tool call's name with its arguments kept
//! as the JSON text the caller sent. A call through the daemon's API is the hot path: its
//! arguments are checked (valid JSON, an object) and passed on, never parsed into a tree,
//! written again and freed on another thread; only a server that asks for arguments in
//! headers (`x-mcp-header`, 2026-07-28 over HTTP) has them read, and then only the values it
//! names.
//!
//! Owns: that choice and how each writes itself. Must not touch: I/O, the client's state.

use super::json_write::{self, WriteJson};
use serde_json::value::RawValue;
use serde_json::Value;
use std::borrow::Cow;

/// How deep a call's arguments may nest: what serde_json reads as a tree inside the API's
/// call body (it reads 127 levels at most, the body's own object one of them).
pub const MAX_ARGUMENTS_NESTING: usize = 126;

/// The params of one request.
#[derive(Debug, Clone, Copy)]
pub enum Params<'a> {
    /// A tree, written as it is.
    Tree(&'a Value),
    /// `{"name": name, "arguments": arguments}`, the arguments written as the text they
    /// came in (an object).
    Named {
        name: &'a str,
        arguments: &'a RawValue,
    },
}

impl<'a> Params<'a> {
    /// The string at `key` (`name`, `uri`), when it is one.
    pub fn str_at(&self, key: &str) -> Option<&'a str> {
        match *self {
            Params::Tree(v) => v.get(key).and_then(Value::as_str),
            Params::Named { name, .. } => (key == "name").then_some(name),
        }
    }

    /// The arguments as a tree: borrowed from a tree, read from the text of a call's
    /// arguments (rare: only for headers a server asked for).
    pub fn arguments(&self) -> Option<Cow<'a, Value>> {
        match *self {
            Params::Tree(v) => v.get("arguments").map(Cow::Borrowed),
            Params::Named { arguments, .. } => {
                serde_json::from_str(arguments.get()).ok().map(Cow::Owned)
            }
        }
    }

    /// Write the params' own keys, each followed by a comma, into an object being written,
    /// leaving out those `skip` names. A tree that is not an object has none.
    pub fn write_entries(&self, out: &mut Vec<u8>, skip: impl Fn(&str) -> bool) {
        match *self {
            Params::Tree(v) => {
                for (k, v) in v.as_object().into_iter().flatten() {
                    if !skip(k) {
                        json_write::write_entry(out, k, v);
                    }
                }
            }
            Params::Named { name, arguments } => {
                if !skip("name") {
                    out.extend_from_slice(br#""name":"#);
                    json_write::write_str(out, name);
                    out.push(b',');
                }
                if !skip("arguments") {
                    out.extend_from_slice(br#""arguments":"#);
                    write_raw(out, arguments);
                    out.push(b',');
                }
            }
        }
    }

    /// The caller's own `_meta` object, if any (a call's arguments carry none at this level).
    pub fn meta(&self) -> Option<&'a serde_json::Map<String, Value>> {
        match *self {
            Params::Tree(v) => v.get("_meta").and_then(Value::as_object),
            Params::Named { .. } => None,
        }
    }
}

/// Why serde_json would refuse a JSON text as a tree, when it would: the text (checked JSON,
/// as `RawValue` checks it) nests its arrays and objects deeper than `limit` levels, or a
/// string holds a `\u` escape of half a UTF-16 surrogate pair. A text passed on unparsed is
/// held to what the daemon would take as a tree, so that a server never gets what a tree
/// would have refused (a server that cannot read a request leaves its call to time out).
pub fn tree_refusal(text: &str, limit: usize) -> Option<String> {
    let b = text.as_bytes();
    // Each level takes a byte, and a surrogate needs an escape: a short text with no
    // backslash has neither to refuse (the usual arguments, read without a walk).
    if b.len() <= limit && memchr::memchr(b'\\', b).is_none() {
        return None;
    }
    let hex = |at: usize| -> Option<u16> {
        let digits = std::str::from_utf8(b.get(at..at + 4)?).ok()?;
        u16::from_str_radix(digits, 16).ok()
    };
    let (mut depth, mut in_string, mut i) = (0usize, false, 0usize);
    while i < b.len() {
        match (in_string, b[i]) {
            (true, b'\\') => {
                if b.get(i + 1) == Some(&b'u') {
                    let unit = hex(i + 2)?;
                    if (0xDC00..=0xDFFF).contains(&unit) {
                        return Some(format!("a lone low surrogate (\\u{unit:04x}) in a string"));
                    }
                    if (0xD800..=0xDBFF).contains(&unit) {
                        let low = match b.get(i + 6..i + 8) {
                            Some(br"\u") => hex(i + 8),
                            _ => None,
                        };
                        if !low.is_some_and(|l| (0xDC00..=0xDFFF).contains(&l)) {
                            return Some(format!(
                                "a lone high surrogate (\\u{unit:04x}) in a string"
                            ));
                        }
                        i += 12;
                        continue;
                    }
                    i += 6;
                } else {
                    i += 2;
                }
                continue;
            }
            (true, b'"') => in_string = false,
            (true, _) => {}
            (false, b'"') => in_string = true,
            (false, b'[' | b'{') => {
                depth += 1;
                if depth > limit {
                    return Some(format!(
                        "arrays or objects nested more than {limit} levels deep"
                    ));
                }
            }
            (false, b']' | b'}') => depth = depth.saturating_sub(1),
            (false, _) => {}
        }
        i += 1;
    }
    None
}

/// Append a JSON text as it is, on one line: a line break in valid JSON can only be
/// whitespace between tokens (one inside a string is escaped, and UTF-8 never has these bytes
/// inside a character), so each becomes a space. A stdio message is one line.
fn write_raw(out: &mut Vec<u8>, text: &RawValue) {
    let bytes = text.get().as_bytes();
    let start = out.len();
    out.extend_from_slice(bytes);
    if memchr::memchr2(b'\n', b'\r', bytes).is_some() {
        for b in &mut out[start..] {
            if *b == b'\n' || *b == b'\r' {
                *b = b' ';
            }
        }
    }
}

impl WriteJson for Params<'_> {
    fn write_json(&self, out: &mut Vec<u8>) {
        match *self {
            Params::Tree(v) => json_write::write_value(out, v),
            Params::Named { name, arguments } => {
                out.extend_from_slice(br#"{"name":"#);
                json_write::write_str(out, name);
                out.extend_from_slice(br#","arguments":"#);
                write_raw(out, arguments);
                out.push(b'}');
            }
        }
    }

    fn size_hint(&self) -> usize {
        match *self {
            Params::Tree(v) => v.size_hint(),
            Params::Named { name, arguments } => name.len() + arguments.get().len() + 24,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn raw(text: &str) -> Box<RawValue> {
        RawValue::from_string(text.to_owned()).unwrap()
    }

    #[test]
    fn a_calls_arguments_go_out_as_the_text_they_came_in() {
        // Spacing, key order, a number a tree would have rounded: all as the caller wrote them.
        let args = raw(r#"{ "b": 1, "a": 12345678901234567890123, "s": "\u00e9" }"#);
        let p = Params::Named {
            name: "say \"hi\"",
            arguments: &args,
        };
        let mut out = Vec::new();
        p.write_json(&mut out);
        assert_eq!(
            String::from_utf8(out.clone()).unwrap(),
            r#"{"name":"say \"hi\"","arguments":{ "b": 1, "a": 12345678901234567890123, "s": "\u00e9" }}"#
        );
        let v: Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(v["name"], "say \"hi\"");
        assert_eq!(p.str_at("name"), Some("say \"hi\""));
        assert_eq!(p.str_at("uri"), None);
        assert_eq!(p.arguments().unwrap()["b"], 1);
        assert!(p.meta().is_none());
    }

    #[test]
    fn a_text_is_refused_where_a_tree_would_be() {
        let refused = |t: &str| tree_refusal(t, 10);
        for ok in [
            "1",
            "{}",
            r#"{"a":[1,{"b":[]}],"c":{}}"#,
            r#"{"a":"[[[{{{\"[[[\\"}"#,
            r#"{"a":"\u00e9 \ud83d\ude00 \\ud800"}"#,
        ] {
            assert_eq!(refused(ok), None, "{ok}");
        }
        for (bad, why) in [
            (r#"{"a":"\ud800"}"#, "lone high"),
            (r#"{"a":"\ud800x"}"#, "lone high"),
            (r#"{"a":"\ud800\u0041"}"#, "lone high"),
            (r#"{"a":"\udc00"}"#, "lone low"),
            (r#"[[[[[[[[[[[]]]]]]]]]]]"#, "nested more than 10"),
        ] {
            let r = refused(bad).unwrap_or_default();
            assert!(r.contains(why), "{bad}: {r}");
        }
        // The same as serde_json's tree, at its depth limit and for each escape above: what
        // one refuses the other does.
        for n in [125, 126, 127, 128] {
            let args = format!("{}{}", "[".repeat(n), "]".repeat(n));
            let body = format!(r#"{{"arguments":{args}}}"#);
            let tree_ok = serde_json::from_str::<Value>(&body).is_ok();
            assert_eq!(
                tree_refusal(&args, MAX_ARGUMENTS_NESTING).is_none(),
                tree_ok,
                "{n}"
            );
        }
        for t in [
            r#"{"a":"\ud800"}"#,
            r#"{"a":"\udc00"}"#,
            r#"{"a":"\ud800\u0041"}"#,
            r#"{"a":"\ud83d\ude00"}"#,
            r#"{"a":"\\ud800"}"#,
        ] {
            let tree_ok = serde_json::from_str::<Value>(t).is_ok();
            assert_eq!(tree_refusal(t, 10).is_none(), tree_ok, "{t}");
        }
    }

    #[test]
    fn arguments_written_over_several_lines_go_out_on_one() {
        // As a caller may send them: pretty-printed, CRLF included. A string's own line
        // breaks are escapes and stay.
        let text = "{\r\n  \"a\": \"x\\ny\",\n  \"b\": [1,\n 2]\n}";
        let args = raw(text);
        let p = Params::Named {
            name: "t",
            arguments: &args,
        };
        for out in [
            {
                let mut o = Vec::new();
                p.write_json(&mut o);
                o
            },
            {
                let mut o = b"{".to_vec();
                p.write_entries(&mut o, |_| false);
                o.extend_from_slice(br#""z":0}"#);
                o
            },
        ] {
            assert!(!out.contains(&b'\n') && !out.contains(&b'\r'), "{out:?}");
            let v: Value = serde_json::from_slice(&out).unwrap();
            assert_eq!(v["arguments"], json!({"a": "x\ny", "b": [1, 2]}));
        }
    }

    #[test]
    fn entries_are_written_as_a_tree_s_or_a_call_s_keys() {
        let tree = json!({"name": "t", "arguments": {"a": 1}, "_meta": {"k": "v"}});
        let args = raw(r#"{"a":1}"#);
        for p in [
            Params::Tree(&tree),
            Params::Named {
                name: "t",
                arguments: &args,
            },
        ] {
            let mut out = b"{".to_vec();
            p.write_entries(&mut out, |k| k == "_meta");
            out.extend_from_slice(br#""x":0}"#);
            let v: Value = serde_json::from_slice(&out).unwrap();
            assert_eq!(v, json!({"name": "t", "arguments": {"a": 1}, "x": 0}));
            assert_eq!(p.arguments().unwrap().as_ref(), &json!({"a": 1}));
        }
        assert_eq!(Params::Tree(&tree).meta().unwrap()["k"], "v");
        // A tree that is not an object has no entries.
        let mut out = Vec::new();
        Params::Tree(&json!([1])).write_entries(&mut out, |_| false);
        assert!(out.is_empty());
    }
}
