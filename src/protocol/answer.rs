//! The usual answer read without serde's derive: `{"jsonrpc":"2.0","id":<integer>,
//! "result":<value>}`, or the same three keys with `result` first (the order of the
//! TypeScript SDK's `Protocol`), compact around the keys, nothing else in the message. serde's
//! derive of the general shape (six optional keys, the id read as a tree and then as a
//! `RequestId`) cost about 2,000 instructions of an answer's 4,000 (callgrind,
//! `albedo-mcp-bench --only instructions`); matching the frame as bytes costs a few dozen.
//!
//! Never looser than the general path (`Message::parse_general`): the result is still read
//! by serde (as a `RawValue`, which checks it is one JSON value and nothing more), the id
//! must be an integer as JSON writes it that fits an `i64` (and not `-0`, which serde reads
//! as a float), and a `null` result (which the general path takes as no result at all) is
//! left to it. Whatever does not match is read as before, with the error it had.
//!
//! Owns: that match. Must not touch: anything but the bytes it is given.

use super::jsonrpc::{Message, RequestId};
use super::result::ResultText;
use bytes::Bytes;
use serde_json::value::RawValue;

const JSONRPC_ID: &[u8] = br#"{"jsonrpc":"2.0","id":"#;
const THEN_RESULT: &[u8] = br#","result":"#;
const RESULT_FIRST: &[u8] = br#"{"result":"#;
const THEN_JSONRPC_ID: &[u8] = br#","jsonrpc":"2.0","id":"#;

/// `bytes` as a response with a result, when it has one of the two usual frames; `None`
/// sends it to the general path. `shared`: the bytes `bytes` is, when the result may be kept
/// as a slice of them.
pub(super) fn usual_response(bytes: &[u8], shared: Option<&Bytes>) -> Option<Message> {
    let (id, value) = if let Some(rest) = bytes.strip_prefix(JSONRPC_ID) {
        let (id, rest) = integer(rest)?;
        let rest = rest.strip_prefix(THEN_RESULT)?;
        (id, strip_close(rest)?)
    } else {
        let rest = strip_close(bytes.strip_prefix(RESULT_FIRST)?)?;
        // The id is the digits (and sign) before the closing brace, after the frame's key.
        let digits = rest
            .iter()
            .rposition(|b| !(b.is_ascii_digit() || *b == b'-'))
            .map_or(0, |i| i + 1);
        let (id, after) = integer(&rest[digits..])?;
        if !after.is_empty() {
            return None;
        }
        (id, rest[..digits].strip_suffix(THEN_JSONRPC_ID)?)
    };
    let raw: &RawValue = serde_json::from_slice(value).ok()?;
    if raw.get() == "null" {
        return None;
    }
    let result = shared
        .and_then(|body| ResultText::within(body, raw))
        .unwrap_or_else(|| ResultText::new(raw.to_owned()));
    Some(Message::Response {
        id: RequestId::Number(id),
        result: Ok(result),
    })
}

/// `rest` without its closing `}` and the JSON white space after it.
fn strip_close(rest: &[u8]) -> Option<&[u8]> {
    let end = rest
        .iter()
        .rposition(|b| !matches!(b, b' ' | b'\t' | b'\n' | b'\r'))?;
    (rest[end] == b'}').then(|| &rest[..end])
}

/// An integer as JSON writes it (`-?(0|[1-9][0-9]*)`) at the start of `s` that fits an
/// `i64`, and what follows it.
fn integer(s: &[u8]) -> Option<(i64, &[u8])> {
    let (negative, digits) = match s.strip_prefix(b"-") {
        Some(d) => (true, d),
        None => (false, s),
    };
    let n = digits.iter().take_while(|b| b.is_ascii_digit()).count();
    if n == 0 || (n > 1 && digits[0] == b'0') {
        return None;
    }
    // serde_json reads `-0` as a float (an integer has no negative zero), which is no id.
    if negative && digits[0] == b'0' {
        return None;
    }
    // After the digits, JSON allows no `.`, `e` or `E` in an integer; those go to serde.
    if matches!(digits.get(n), Some(b'.' | b'e' | b'E')) {
        return None;
    }
    let mut v: i64 = 0;
    for d in &digits[..n] {
        let d = i64::from(d - b'0');
        v = v.checked_mul(10)?;
        v = if negative {
            v.checked_sub(d)?
        } else {
            v.checked_add(d)?
        };
    }
    Some((v, &digits[n..]))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The general path, serde's derive, with the fast path out of the way.
    fn general(text: &str) -> Result<Message, super::super::jsonrpc::ParseError> {
        Message::parse_general(text.as_bytes(), None)
    }

    #[test]
    fn the_usual_frames_read_as_the_general_path_reads_them() {
        let cases = [
            r#"{"jsonrpc":"2.0","id":7,"result":{"content":[{"type":"text","text":"hi"}]}}"#,
            r#"{"jsonrpc":"2.0","id":0,"result":{}}"#,
            r#"{"jsonrpc":"2.0","id":-12,"result":[1,2]}"#,
            r#"{"jsonrpc":"2.0","id":9223372036854775807,"result":"x"}"#,
            r#"{"jsonrpc":"2.0","id":-9223372036854775808,"result":false}"#,
            "{\"jsonrpc\":\"2.0\",\"id\":3,\"result\": { \"a\" : 1 } }\r\n",
            r#"{"result":{"isError":false},"jsonrpc":"2.0","id":42}"#,
            r#"{"result":"a,\"jsonrpc\":\"2.0\",\"id\":1}","jsonrpc":"2.0","id":2}"#,
            "{\"result\":1 ,\"jsonrpc\":\"2.0\",\"id\":5}  ",
        ];
        for text in cases {
            let fast = usual_response(text.as_bytes(), None)
                .unwrap_or_else(|| panic!("not matched: {text}"));
            assert_eq!(Ok(fast), general(text), "{text}");
        }
    }

    #[test]
    fn anything_else_goes_to_the_general_path() {
        let cases = [
            // What the general path reads differently or refuses.
            r#"{"jsonrpc":"2.0","id":1,"result":null}"#,
            r#"{"jsonrpc":"2.0","id":1,"result":{"a":1}}}"#,
            r#"{"jsonrpc":"2.0","id":1,"result":{"a":1},"error":{"code":1,"message":"m"}}"#,
            r#"{"jsonrpc":"2.0","id":1,"result":1,"id":2}"#,
            r#"{"jsonrpc":"2.0","id":01,"result":1}"#,
            r#"{"jsonrpc":"2.0","id":-0,"result":1}"#,
            r#"{"jsonrpc":"2.0","id":1.0,"result":1}"#,
            r#"{"jsonrpc":"2.0","id":1e2,"result":1}"#,
            r#"{"jsonrpc":"2.0","id":-,"result":1}"#,
            r#"{"jsonrpc":"2.0","id":9223372036854775808,"result":1}"#,
            r#"{"jsonrpc":"2.0","id":"a","result":1}"#,
            r#"{"jsonrpc":"2.0","id":1,"result":{"a":}}"#,
            r#"{"jsonrpc":"2.0","id":1,"result":"\u00"}"#,
            "{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":\"\x01\"}",
            "{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":1}\x0c",
            r#"{"jsonrpc":"2.0","id":1,"result":}"#,
            r#"{"jsonrpc":"2.0","id":1,"result":1"#,
            r#"{"result":1,"jsonrpc":"2.0","id":}"#,
            r#"{"result":1,"jsonrpc":"2.0","id":1-2}"#,
            r#"{"result":1,"jsonrpc":"2.0","id":--2}"#,
            r#"{"result":1,"jsonrpc":"2.0","id":00}"#,
            r#"{"result":1,"jsonrpc":"2.0","id":2,"id":3}"#,
            r#"{"result":1,"error":null,"jsonrpc":"2.0","id":3}"#,
            // What it reads the same way, but in another frame.
            r#" {"jsonrpc":"2.0","id":1,"result":1}"#,
            r#"{"jsonrpc": "2.0","id":1,"result":1}"#,
            r#"{"id":1,"jsonrpc":"2.0","result":1}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#,
        ];
        for text in cases {
            assert_eq!(usual_response(text.as_bytes(), None), None, "{text}");
        }
    }

    /// Each byte of the usual frames replaced, dropped or doubled in turn: whatever the fast
    /// path still takes, the general path reads the same way.
    #[test]
    fn every_one_byte_change_reads_as_the_general_path_reads_it() {
        let bases = [
            r#"{"jsonrpc":"2.0","id":17,"result":{"a":[1,"b\n"],"c":null}}"#,
            r#"{"result":{"a":[1,"b"]},"jsonrpc":"2.0","id":-3}"#,
        ];
        let swaps = b"\"{}[],:\\ 0-1e.n\x00\x0c\xc3\xff";
        let mut taken = 0;
        for base in bases {
            let b = base.as_bytes();
            for i in 0..b.len() {
                let mut variants: Vec<Vec<u8>> = swaps
                    .iter()
                    .map(|&x| {
                        let mut v = b.to_vec();
                        v[i] = x;
                        v
                    })
                    .collect();
                let mut dropped = b.to_vec();
                dropped.remove(i);
                let mut doubled = b.to_vec();
                doubled.insert(i, b[i]);
                variants.extend([dropped, doubled]);
                for v in variants {
                    if let Some(fast) = usual_response(&v, None) {
                        taken += 1;
                        let text = String::from_utf8_lossy(&v);
                        assert_eq!(Ok(fast), Message::parse_general(&v, None), "{text}");
                    }
                }
            }
        }
        assert!(taken > 100, "only {taken} variants matched the frames");
    }

    #[test]
    fn a_shared_result_is_a_slice_of_the_message() {
        let body = Bytes::from_static(br#"{"jsonrpc":"2.0","id":1,"result":{"a":1}}"#);
        let Some(Message::Response { result: Ok(r), .. }) = usual_response(&body, Some(&body))
        else {
            panic!("not matched");
        };
        assert_eq!(r.as_bytes(), br#"{"a":1}"#);
        assert_eq!(r.as_bytes().as_ptr(), body[33..].as_ptr());
    }
}
