//! Compact JSON text of a `serde_json::Value`, byte for byte what `serde_json::to_vec` writes,
//! but with strings scanned eight bytes at a time.
//!
//! Why: serde_json checks every byte of a string against its escape table. A tool result of
//! 10 MiB of text spent a fifth of the daemon's CPU there on its way out of the API. Every
//! JSON-RPC request and notification albedo sends is written here too (`jsonrpc`), so large
//! arguments take the same path. Here a
//! string is copied in runs between the bytes that need escaping (`"`, `\` and the controls
//! below 0x20, as serde_json escapes them), found a word at a time.
//!
//! Owns: nothing but the text. Must not touch: I/O, transport, actors.

use serde_json::Value;

/// Something that writes its own compact JSON text (a `Value`, or a view that decorates
/// borrowed values, such as the params of a modern request).
pub trait WriteJson {
    fn write_json(&self, out: &mut Vec<u8>);
    /// A cheap lower bound of the text's size, to allocate once.
    fn size_hint(&self) -> usize {
        0
    }
}

impl WriteJson for Value {
    fn write_json(&self, out: &mut Vec<u8>) {
        write_value(out, self);
    }
    fn size_hint(&self) -> usize {
        estimate(self, 0)
    }
}

/// The compact JSON text of `v`.
pub fn to_vec(v: &Value) -> Vec<u8> {
    let mut out = Vec::with_capacity(v.size_hint());
    write_value(&mut out, v);
    out
}

/// A cheap lower bound of the text's size (strings dominate large values), so that a large
/// result is written into one allocation instead of a series of doublings.
fn estimate(v: &Value, depth: usize) -> usize {
    match v {
        Value::String(s) => s.len() + 2,
        Value::Array(a) if depth < 4 => a.iter().map(|x| estimate(x, depth + 1) + 1).sum(),
        Value::Object(m) if depth < 4 => m
            .iter()
            .map(|(k, x)| k.len() + 4 + estimate(x, depth + 1))
            .sum(),
        _ => 8,
    }
}

/// Append `"k":v,`: one entry of an object being written, its comma after it.
pub fn write_entry(out: &mut Vec<u8>, k: &str, v: &Value) {
    write_str(out, k);
    out.push(b':');
    write_value(out, v);
    out.push(b',');
}

/// Append the compact JSON text of `v`.
pub fn write_value(out: &mut Vec<u8>, v: &Value) {
    match v {
        Value::Null => out.extend_from_slice(b"null"),
        Value::Bool(true) => out.extend_from_slice(b"true"),
        Value::Bool(false) => out.extend_from_slice(b"false"),
        Value::Number(n) => {
            // serde_json's own number formatting (itoa / ryu); writing to a Vec cannot fail.
            let _ = serde_json::to_writer(&mut *out, n);
        }
        Value::String(s) => write_str(out, s),
        Value::Array(a) => {
            out.push(b'[');
            for (i, x) in a.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_value(out, x);
            }
            out.push(b']');
        }
        Value::Object(m) => {
            out.push(b'{');
            for (i, (k, x)) in m.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_str(out, k);
                out.push(b':');
                write_value(out, x);
            }
            out.push(b'}');
        }
    }
}

const ONES: u64 = 0x0101_0101_0101_0101;
const HIGH: u64 = 0x8080_8080_8080_8080;

/// Whether any of the eight bytes of `w` is below 0x20, a `"` or a `\` (exact: a word that
/// says yes is then read byte by byte).
#[inline]
fn needs_escape(w: u64) -> bool {
    let control = w.wrapping_sub(ONES * 0x20) & !w;
    let q = w ^ (ONES * u64::from(b'"'));
    let quote = q.wrapping_sub(ONES) & !q;
    let b = w ^ (ONES * u64::from(b'\\'));
    let backslash = b.wrapping_sub(ONES) & !b;
    (control | quote | backslash) & HIGH != 0
}

#[inline]
fn is_escaped(c: u8) -> bool {
    c < 0x20 || c == b'"' || c == b'\\'
}

/// Append `s` as a JSON string.
pub fn write_str(out: &mut Vec<u8>, s: &str) {
    let b = s.as_bytes();
    out.reserve(b.len() + 2);
    out.push(b'"');
    let mut start = 0;
    let mut i = 0;
    while i < b.len() {
        // Skip clean words.
        while let Some(chunk) = b.get(i..i + 8) {
            let mut w = [0u8; 8];
            w.copy_from_slice(chunk);
            if needs_escape(u64::from_le_bytes(w)) {
                break;
            }
            i += 8;
        }
        // Then byte by byte to the end of this word.
        let end = (i + 8).min(b.len());
        while i < end {
            let c = b[i];
            if is_escaped(c) {
                out.extend_from_slice(&b[start..i]);
                write_escape(out, c);
                start = i + 1;
            }
            i += 1;
        }
    }
    out.extend_from_slice(&b[start..]);
    out.push(b'"');
}

fn write_escape(out: &mut Vec<u8>, c: u8) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    match c {
        b'"' => out.extend_from_slice(b"\\\""),
        b'\\' => out.extend_from_slice(b"\\\\"),
        0x08 => out.extend_from_slice(b"\\b"),
        0x0c => out.extend_from_slice(b"\\f"),
        b'\n' => out.extend_from_slice(b"\\n"),
        b'\r' => out.extend_from_slice(b"\\r"),
        b'\t' => out.extend_from_slice(b"\\t"),
        _ => out.extend_from_slice(&[
            b'\\',
            b'u',
            b'0',
            b'0',
            HEX[usize::from(c >> 4)],
            HEX[usize::from(c & 0xf)],
        ]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn same(v: &Value) {
        assert_eq!(
            String::from_utf8(to_vec(v)).unwrap(),
            serde_json::to_string(v).unwrap(),
            "{v:?}"
        );
    }

    #[test]
    fn every_byte_that_needs_escaping_at_every_position_of_a_word() {
        for c in (0u8..0x20).chain([b'"', b'\\', b'/', 0x7f, b'a']) {
            for len in 0..20 {
                for at in 0..len {
                    let mut bytes = vec![b'x'; len];
                    bytes[at] = c;
                    same(&Value::String(String::from_utf8(bytes).unwrap()));
                }
            }
        }
    }

    #[test]
    fn unicode_numbers_and_nesting_match_serde_json() {
        same(&json!(null));
        same(
            &json!({"a": [1, -2, 3.5, 1e300, u64::MAX, i64::MIN, true, false, null],
            "é\"k\\": {"nested": ["ü😀\u{1}\u{1f}\n", "", "plain text of some length"]},
            "": {}, "empty": []}),
        );
        let mixed: String = (0..5000)
            .map(|i| char::from_u32([0x41, 0x22, 0x0a, 0xe9, 0x1f600, 0x5c, 0x7f][i % 7]).unwrap())
            .collect();
        same(&json!({"content": [{"type": "text", "text": mixed}]}));
    }

    #[test]
    fn the_word_test_is_exact() {
        // Every byte value alone in a word of clean bytes.
        for c in 0u8..=255 {
            let mut w = [b'a'; 8];
            w[3] = c;
            assert_eq!(needs_escape(u64::from_le_bytes(w)), is_escaped(c), "{c:#x}");
        }
        assert!(!needs_escape(u64::from_le_bytes(*b"abcdefgh")));
        assert!(!needs_escape(u64::from_le_bytes([0xff; 8])));
    }
}
