//! A large message checked as it arrives, a chunk at a time, so that the check is done when
//! its last byte is read. A 10 MiB result was read whole and only then parsed: serde_json
//! crossed every byte again (2.5 ms on a 2-core VM, the result's head scan another 0.5 ms)
//! while the caller of the API waited. [`JsonCheck`] is fed each part of a message as the
//! transport reads it (from [`CHECK_FROM`] bytes on; a smaller message is left to serde
//! alone), checks it as JSON as strictly as serde_json reads one, and notes where the
//! top-level `result` lies and what its head holds ([`Checked`]). The parse then reads only
//! the rest of the message with serde (`jsonrpc::parse_batch_checked`).
//!
//! Strict, never looser than serde_json: UTF-8 throughout (from_utf8's rules), no control
//! character in a string, escapes as JSON has them, numbers and literals as JSON writes them,
//! white space only between tokens and at the ends, at most [`MAX_DEPTH`] nested values. A
//! message it refuses gets no [`Checked`] and goes to serde whole, as before, which says what
//! is wrong with it. So does one it stops following as soon as it can tell: a batch, a
//! request, a notification or an error (a top-level `method`, `params` or `error`: their
//! bytes are parsed by serde anyway, so checking them too would cross them twice), and a
//! top-level key written with escapes (serde unescapes keys).
//!
//! Owns: the check's state. Must not touch: anything but the bytes it is given.

use super::scan::plain_len;
use std::ops::Range;

/// The size from which a message is checked as it arrives.
pub const CHECK_FROM: usize = 64 * 1024;

/// The deepest nesting the check follows (deeper: no [`Checked`], serde decides).
pub const MAX_DEPTH: usize = 4096;

/// What the check found in a whole message: a JSON object with exactly one `result` key at
/// its top level.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checked {
    /// Where the `result`'s value lies in the message.
    pub result: Range<usize>,
    /// What albedo reads off the result, when every one of its top-level keys could be read
    /// without unescaping.
    pub head: Option<CheckedHead>,
}

/// The result's head, as positions in the message.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CheckedHead {
    pub object: bool,
    /// The last `resultType` value's position.
    pub result_type: Option<Range<usize>>,
    pub outcome_key: bool,
}

/// A message's check as it arrives. See the module's documentation.
#[derive(Default, Debug)]
pub struct JsonCheck {
    run: Option<Box<Run>>,
    /// Refused, or given up: serde decides.
    off: bool,
}

impl JsonCheck {
    /// Check the bytes of `all` (the message so far, from its first byte) not checked yet,
    /// once it holds [`CHECK_FROM`] bytes or more.
    pub fn catch_up(&mut self, all: &[u8]) {
        self.scan(all, Breaks::None);
    }

    /// As [`JsonCheck::catch_up`] for a message that is one line of a stream (a stdio line,
    /// an SSE data line), finding where the line ends in the same pass: the check stops at the
    /// first of `breaks` in the bytes not checked yet, wherever it stands (a line break that
    /// is not JSON's white space ends the line all the same, and the check of the bytes
    /// before it decides). Saves the search for the line's end a pass over a large line.
    pub fn catch_up_line(&mut self, all: &[u8], breaks: Breaks) -> LineScan {
        self.scan(all, breaks)
    }

    fn scan(&mut self, all: &[u8], breaks: Breaks) -> LineScan {
        if self.off || all.len() < CHECK_FROM {
            return LineScan::NotFollowed;
        }
        let run = self.run.get_or_insert_with(Box::default);
        match run.feed(all, breaks) {
            Fed::All => LineScan::NoBreak,
            Fed::Break(i) => LineScan::Break(i),
            Fed::Refused => {
                self.off = true;
                self.run = None;
                LineScan::NotFollowed
            }
        }
    }

    /// The check of the whole message `all`; `None` for a message under [`CHECK_FROM`]
    /// bytes, and for one the check refused or did not follow.
    pub fn finish(mut self, all: &[u8]) -> Option<Checked> {
        self.catch_up(all);
        let run = self.run?;
        run.finish(all.len())
    }

    /// Stop checking (the bytes fed are not one message after all).
    pub fn give_up(&mut self) {
        self.off = true;
        self.run = None;
    }
}

/// The bytes that end a line, for [`JsonCheck::catch_up_line`].
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Breaks {
    /// None: the message is not a line ([`JsonCheck::catch_up`]).
    None,
    /// LF (a stdio line).
    Lf,
    /// LF or CR (an SSE line).
    LfCr,
}

impl Breaks {
    #[inline]
    fn has(self, b: u8) -> bool {
        match self {
            Breaks::None => false,
            Breaks::Lf => b == b'\n',
            Breaks::LfCr => b == b'\n' || b == b'\r',
        }
    }
}

/// What [`JsonCheck::catch_up_line`] found in the bytes it had not checked yet.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum LineScan {
    /// Checked, and no line break among them.
    NoBreak,
    /// The first line break is at this index of `all`; the bytes before it are checked.
    Break(usize),
    /// The check does not follow this message (under [`CHECK_FROM`] bytes, refused, or given
    /// up): where the line ends is the caller's to find, from where it last looked.
    NotFollowed,
}

/// What [`Run::feed`] made of the bytes.
#[derive(Debug, PartialEq, Eq)]
enum Fed {
    All,
    Break(usize),
    Refused,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
enum St {
    /// A value must start.
    #[default]
    Value,
    /// A value has ended: `,`, a closing bracket, or the end.
    After,
    /// Just after `{`: a key or `}`.
    FirstKey,
    /// Just after `[`: a value or `]`.
    FirstValue,
    /// After `,` in an object: a key.
    Key,
    /// After a key: `:`.
    Colon,
    /// Inside a string.
    Str,
    /// After a backslash.
    Esc,
    /// In `\u`: that many hex digits still to come.
    Hex(u8),
    /// In a UTF-8 sequence: the next byte in `lo..=hi`, then `more` bytes in `80..=BF`.
    Cont {
        lo: u8,
        hi: u8,
        more: u8,
    },
    Minus,
    Zero,
    Int,
    Dot,
    Frac,
    Exp,
    ExpSign,
    ExpDigits,
    /// In `true`, `false` or `null`: the word and how much of it is read.
    Lit {
        word: u8,
        at: u8,
    },
    /// The top-level value is over: white space only.
    Done,
}

const WORDS: [&[u8]; 3] = [b"true", b"false", b"null"];

/// The check under way, and what it noted of the top-level object and of its `result`.
#[derive(Default, Debug)]
struct Run {
    /// Bytes of the message checked.
    pos: usize,
    st: St,
    /// Containers open; `kinds` has a bit per level, set for an object.
    depth: usize,
    kinds: Vec<u64>,
    /// The string being read is a key.
    in_key: bool,
    key_start: usize,
    key_escaped: bool,
    /// Where the value being read at depth 1 (the message's values) started.
    top_value_start: usize,
    /// Where the value being read at depth 2 inside the result (its values) started.
    head_value_start: usize,
    /// The depth-1 value being read is the `result`.
    naming_result: bool,
    /// The depth-2 value being read is the result's `resultType`.
    naming_type: bool,
    top_object: bool,
    results: u32,
    result: Option<Range<usize>>,
    /// Inside the result's container.
    in_result: bool,
    head: CheckedHead,
    head_unknown: bool,
    /// Stopped following a message that may well be JSON (see `key_done`).
    gave_up: bool,
}

impl Run {
    fn is_object(&self, level: usize) -> bool {
        self.kinds
            .get(level / 64)
            .is_some_and(|w| w & (1 << (level % 64)) != 0)
    }

    /// A value starts at `at` (at the current depth, before a container opens).
    fn starts(&mut self, at: usize) {
        match self.depth {
            1 => self.top_value_start = at,
            2 if self.in_result => self.head_value_start = at,
            _ => {}
        }
    }

    fn open(&mut self, object: bool, at: usize) -> bool {
        if self.depth >= MAX_DEPTH {
            return false;
        }
        self.starts(at);
        match self.depth {
            // A batch: serde reads it.
            0 if !object => {
                self.gave_up = true;
                return false;
            }
            0 => self.top_object = object,
            1 if self.naming_result => {
                self.in_result = true;
                self.head.object = object;
            }
            _ => {}
        }
        let level = self.depth;
        let word = level / 64;
        while self.kinds.len() <= word {
            self.kinds.push(0);
        }
        if object {
            self.kinds[word] |= 1 << (level % 64);
        } else {
            self.kinds[word] &= !(1 << (level % 64));
        }
        self.depth += 1;
        self.st = if object { St::FirstKey } else { St::FirstValue };
        true
    }

    /// A value at the current depth ended just before `end`.
    fn ended(&mut self, end: usize) {
        match self.depth {
            0 => {
                self.st = St::Done;
                return;
            }
            1 => {
                if self.naming_result {
                    self.result = Some(self.top_value_start..end);
                    self.in_result = false;
                }
                self.naming_result = false;
            }
            2 if self.in_result => {
                if self.naming_type {
                    self.head.result_type = Some(self.head_value_start..end);
                }
                self.naming_type = false;
            }
            _ => {}
        }
        self.st = St::After;
    }

    fn close(&mut self, object: bool, at: usize) -> bool {
        if self.depth == 0 || self.is_object(self.depth - 1) != object {
            return false;
        }
        self.depth -= 1;
        self.ended(at + 1);
        true
    }

    /// A key ended just before `end`; false when the check stops following the message
    /// (serde reads it whole): a top-level key written with escapes, or one that says the
    /// message is no response with a result (`method`, `params`, `error`), so that a large
    /// request or notification is not crossed twice.
    fn key_done(&mut self, all: &[u8], end: usize) -> bool {
        let key = &all[self.key_start + 1..end - 1];
        match self.depth {
            1 if self.top_object => {
                if self.key_escaped || matches!(key, b"method" | b"params" | b"error") {
                    self.gave_up = true;
                    return false;
                }
                if key == b"result" {
                    self.results = self.results.saturating_add(1);
                    self.naming_result = true;
                }
            }
            2 if self.in_result && self.head.object => {
                if self.key_escaped {
                    self.head_unknown = true;
                } else if key == b"resultType" {
                    self.naming_type = true;
                } else if key == b"outcome" {
                    self.head.outcome_key = true;
                }
            }
            _ => {}
        }
        true
    }

    /// Check `all[self.pos..]`, up to the first of `breaks` ([`Fed::Break`], not read);
    /// [`Fed::Refused`] when it is not JSON (or not followed).
    fn feed(&mut self, all: &[u8], breaks: Breaks) -> Fed {
        let mut i = self.pos;
        let n = all.len();
        while i < n {
            let b = all[i];
            // A line break ends the line in any state (in a string it is a control
            // character, which the check of the bytes before it then refuses).
            if b <= b'\r' && breaks.has(b) {
                self.pos = i;
                return Fed::Break(i);
            }
            match self.st {
                St::Str => {
                    i += plain_len(&all[i..]);
                    let Some(&b) = all.get(i) else { break };
                    match b {
                        b'"' => {
                            if self.in_key {
                                self.in_key = false;
                                if !self.key_done(all, i + 1) {
                                    return Fed::Refused;
                                }
                                self.st = St::Colon;
                            } else {
                                self.ended(i + 1);
                            }
                        }
                        b'\\' => {
                            self.key_escaped |= self.in_key;
                            self.st = St::Esc;
                        }
                        _ if breaks.has(b) => {
                            self.pos = i;
                            return Fed::Break(i);
                        }
                        // A sequence of more than one byte starts, or a control character
                        // or a byte no UTF-8 sequence starts with.
                        _ => match utf8_lead(b) {
                            Some(st) => self.st = st,
                            None => return Fed::Refused,
                        },
                    }
                    i += 1;
                }
                St::Cont { lo, hi, more } => {
                    if !(lo..=hi).contains(&b) {
                        return Fed::Refused;
                    }
                    self.st = if more == 0 {
                        St::Str
                    } else {
                        St::Cont {
                            lo: 0x80,
                            hi: 0xBF,
                            more: more - 1,
                        }
                    };
                    i += 1;
                }
                St::Esc => {
                    self.st = match b {
                        b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => St::Str,
                        b'u' => St::Hex(4),
                        _ => return Fed::Refused,
                    };
                    i += 1;
                }
                St::Hex(left) => {
                    if !b.is_ascii_hexdigit() {
                        return Fed::Refused;
                    }
                    self.st = if left == 1 {
                        St::Str
                    } else {
                        St::Hex(left - 1)
                    };
                    i += 1;
                }
                St::FirstValue => match b {
                    b' ' | b'\t' | b'\n' | b'\r' => i += 1,
                    b']' => {
                        if !self.close(false, i) {
                            return Fed::Refused;
                        }
                        i += 1;
                    }
                    // A value: read again as one.
                    _ => self.st = St::Value,
                },
                St::Value => {
                    match b {
                        b' ' | b'\t' | b'\n' | b'\r' => {}
                        b'{' | b'[' => {
                            if !self.open(b == b'{', i) {
                                return Fed::Refused;
                            }
                        }
                        b'"' => {
                            self.starts(i);
                            self.in_key = false;
                            self.st = St::Str;
                        }
                        b'-' => {
                            self.starts(i);
                            self.st = St::Minus;
                        }
                        b'0' => {
                            self.starts(i);
                            self.st = St::Zero;
                        }
                        b'1'..=b'9' => {
                            self.starts(i);
                            self.st = St::Int;
                        }
                        b't' | b'f' | b'n' => {
                            self.starts(i);
                            let word = match b {
                                b't' => 0,
                                b'f' => 1,
                                _ => 2,
                            };
                            self.st = St::Lit { word, at: 1 };
                        }
                        _ => return Fed::Refused,
                    }
                    i += 1;
                }
                St::Lit { word, at } => {
                    let w = WORDS[usize::from(word)];
                    if w.get(usize::from(at)) != Some(&b) {
                        return Fed::Refused;
                    }
                    if usize::from(at) + 1 == w.len() {
                        self.ended(i + 1);
                    } else {
                        self.st = St::Lit { word, at: at + 1 };
                    }
                    i += 1;
                }
                St::Minus => {
                    self.st = match b {
                        b'0' => St::Zero,
                        b'1'..=b'9' => St::Int,
                        _ => return Fed::Refused,
                    };
                    i += 1;
                }
                St::Zero | St::Int | St::Frac | St::ExpDigits => {
                    let st = self.st;
                    match b {
                        b'0'..=b'9' if st != St::Zero => i += 1,
                        b'.' if matches!(st, St::Zero | St::Int) => {
                            self.st = St::Dot;
                            i += 1;
                        }
                        b'e' | b'E' if st != St::ExpDigits => {
                            self.st = St::Exp;
                            i += 1;
                        }
                        b'0'..=b'9' => return Fed::Refused, // a leading zero
                        // The number ended: this byte is read again after it.
                        _ => self.ended(i),
                    }
                }
                // A digit must follow `.` and an exponent's sign.
                St::Dot | St::ExpSign => {
                    if !b.is_ascii_digit() {
                        return Fed::Refused;
                    }
                    self.st = if self.st == St::Dot {
                        St::Frac
                    } else {
                        St::ExpDigits
                    };
                    i += 1;
                }
                St::Exp => {
                    self.st = match b {
                        b'+' | b'-' => St::ExpSign,
                        b'0'..=b'9' => St::ExpDigits,
                        _ => return Fed::Refused,
                    };
                    i += 1;
                }
                St::After => {
                    match b {
                        b' ' | b'\t' | b'\n' | b'\r' => {}
                        b',' => {
                            self.st = if self.is_object(self.depth - 1) {
                                St::Key
                            } else {
                                St::Value
                            };
                        }
                        b'}' | b']' => {
                            if !self.close(b == b'}', i) {
                                return Fed::Refused;
                            }
                        }
                        _ => return Fed::Refused,
                    }
                    i += 1;
                }
                St::FirstKey | St::Key => {
                    match b {
                        b' ' | b'\t' | b'\n' | b'\r' => {}
                        b'"' => {
                            self.in_key = true;
                            self.key_start = i;
                            self.key_escaped = false;
                            self.st = St::Str;
                        }
                        b'}' if self.st == St::FirstKey => {
                            if !self.close(true, i) {
                                return Fed::Refused;
                            }
                        }
                        _ => return Fed::Refused,
                    }
                    i += 1;
                }
                St::Colon => {
                    match b {
                        b' ' | b'\t' | b'\n' | b'\r' => {}
                        b':' => self.st = St::Value,
                        _ => return Fed::Refused,
                    }
                    i += 1;
                }
                St::Done => {
                    if !matches!(b, b' ' | b'\t' | b'\n' | b'\r') {
                        return Fed::Refused;
                    }
                    i += 1;
                }
            }
        }
        self.pos = n;
        Fed::All
    }

    fn finish(mut self, len: usize) -> Option<Checked> {
        // A top-level number ends with the message.
        if self.depth == 0 && matches!(self.st, St::Zero | St::Int | St::Frac | St::ExpDigits) {
            self.ended(len);
        }
        if self.st != St::Done || !self.top_object || self.results != 1 {
            return None;
        }
        let result = self.result?;
        let head = (!self.head_unknown).then_some(self.head);
        Some(Checked { result, head })
    }
}

/// The state after `b` starts a UTF-8 sequence of more than one byte, by `from_utf8`'s rules
/// (no overlong form, no surrogate, nothing past U+10FFFF); `None` for any other byte.
fn utf8_lead(b: u8) -> Option<St> {
    let (lo, hi, more) = match b {
        0xC2..=0xDF => (0x80, 0xBF, 0),
        0xE0 => (0xA0, 0xBF, 1),
        0xE1..=0xEC | 0xEE..=0xEF => (0x80, 0xBF, 1),
        0xED => (0x80, 0x9F, 1),
        0xF0 => (0x90, 0xBF, 2),
        0xF1..=0xF3 => (0x80, 0xBF, 2),
        0xF4 => (0x80, 0x8F, 2),
        _ => return None,
    };
    Some(St::Cont { lo, hi, more })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::de::IgnoredAny;
    use serde_json::value::RawValue;

    /// The check of `text` fed in pieces cut at `cuts`, without the size floor: `None` when
    /// refused, else whether it read one whole value and what it found.
    fn run(text: &[u8], cuts: &[usize]) -> Option<(bool, Option<Checked>)> {
        let mut r = Run::default();
        for &c in cuts.iter().chain([&text.len()]) {
            if let Fed::Refused = r.feed(&text[..c.min(text.len()).max(r.pos)], Breaks::None) {
                return r.gave_up.then(|| (serde_ok(text), None));
            }
        }
        let whole = r.st == St::Done
            || (r.depth == 0 && matches!(r.st, St::Zero | St::Int | St::Frac | St::ExpDigits));
        Some((whole, r.finish(text.len())))
    }

    fn serde_ok(text: &[u8]) -> bool {
        std::str::from_utf8(text).is_ok() && serde_json::from_slice::<IgnoredAny>(text).is_ok()
    }

    #[derive(serde::Deserialize)]
    struct HasResult<'a> {
        #[serde(borrow)]
        result: &'a RawValue,
    }

    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }
        fn below(&mut self, n: usize) -> usize {
            (self.next() % n as u64) as usize
        }
    }

    fn ws(r: &mut Rng, out: &mut Vec<u8>) {
        for _ in 0..r.below(3) {
            out.push(b" \t\n\r"[r.below(4)]);
        }
    }

    fn string(r: &mut Rng, out: &mut Vec<u8>) {
        out.push(b'"');
        // Some long enough for whole 32-byte blocks, with what stops them anywhere in one.
        let pieces = if r.below(4) == 0 {
            40 + r.below(60)
        } else {
            r.below(12)
        };
        for _ in 0..pieces {
            match r.below(10) {
                0 => out.extend_from_slice(br#"\n"#),
                1 => out.extend_from_slice(br#"\u00e9"#),
                2 => out.extend_from_slice(br#"\ud83d\ude00"#),
                3 => out.extend_from_slice("é".as_bytes()),
                4 => out.extend_from_slice("€😀".as_bytes()),
                5 => out.extend_from_slice(br#"\"\\\/"#),
                6 if pieces > 12 => {
                    out.extend_from_slice(&b"abcdefghijklmnopqrstuvwxyz"[..r.below(27)])
                }
                _ => out.push(b"abcxyz 019result"[r.below(16)]),
            }
        }
        out.push(b'"');
    }

    fn value(r: &mut Rng, depth: usize, out: &mut Vec<u8>) {
        ws(r, out);
        let pick = if depth > 4 { r.below(6) } else { r.below(9) };
        match pick {
            0 => string(r, out),
            1 => out.extend_from_slice(
                [
                    &b"0"[..],
                    b"-0",
                    b"12",
                    b"-3.25",
                    b"1e9",
                    b"2E-3",
                    b"0.5e+7",
                    b"7",
                ][r.below(8)],
            ),
            2 => out.extend_from_slice([&b"true"[..], b"false", b"null"][r.below(3)]),
            3..=5 => string(r, out),
            6 | 7 => {
                out.push(b'{');
                let n = r.below(4);
                for k in 0..n {
                    ws(r, out);
                    match r.below(5) {
                        0 => out.extend_from_slice(br#""result""#),
                        1 => out.extend_from_slice(br#""resultType""#),
                        2 => out.extend_from_slice(br#""outcome""#),
                        _ => string(r, out),
                    }
                    ws(r, out);
                    out.push(b':');
                    value(r, depth + 1, out);
                    if k + 1 < n {
                        out.push(b',');
                    }
                }
                ws(r, out);
                out.push(b'}');
            }
            _ => {
                out.push(b'[');
                let n = r.below(4);
                for k in 0..n {
                    value(r, depth + 1, out);
                    if k + 1 < n {
                        out.push(b',');
                    }
                }
                ws(r, out);
                out.push(b']');
            }
        }
        ws(r, out);
    }

    fn message(r: &mut Rng) -> Vec<u8> {
        let mut out = br#"{"jsonrpc":"2.0","id":1,"#.to_vec();
        if r.below(4) == 0 {
            out.extend_from_slice(br#""x": "#);
            value(r, 2, &mut out);
            out.push(b',');
        }
        out.extend_from_slice(br#""result":"#);
        value(r, 1, &mut out);
        out.push(b'}');
        out
    }

    const NOISE: &[u8] = b"\"\\{}[],:0-.eEu+t \x1f\x7f\xc3\xa9\xed\xa0\x80\xff\xf4\x90\xe0";

    /// Random messages, then each with random bytes changed, fed in random pieces: what the
    /// check takes, serde_json takes (and the other way round), and the `result` and head it
    /// notes are the ones serde and `read_head` find.
    #[test]
    fn never_looser_than_serde_and_finds_the_same_result() {
        let mut r = Rng(0x9E37_79B9_7F4A_7C15);
        let (mut taken, mut refused, mut heads) = (0, 0, 0);
        for round in 0..60_000 {
            let mut text = message(&mut r);
            if round % 2 == 1 {
                for _ in 0..=r.below(3) {
                    let at = r.below(text.len() + 1);
                    let b = NOISE[r.below(NOISE.len())];
                    match r.below(3) {
                        0 if at < text.len() => text[at] = b,
                        1 if at < text.len() => {
                            text.remove(at);
                        }
                        _ => text.insert(at, b),
                    }
                }
            }
            let mut cuts: Vec<usize> = (0..r.below(4)).map(|_| r.below(text.len() + 1)).collect();
            cuts.sort_unstable();
            let shown = String::from_utf8_lossy(&text).into_owned();
            let got = run(&text, &cuts);
            let ok = serde_ok(&text);
            match got {
                None => {
                    assert!(!ok, "refused, serde takes: {shown}");
                    refused += 1;
                }
                Some((whole, checked)) => {
                    // Never looser, and (nesting this shallow) never stricter either.
                    assert_eq!(whole, ok, "one whole value: {whole}, serde: {ok}: {shown}");
                    if let Some(c) = checked {
                        let h: HasResult = serde_json::from_slice(&text)
                            .unwrap_or_else(|e| panic!("no result for serde ({e}): {shown}"));
                        assert_eq!(
                            &text[c.result.clone()],
                            h.result.get().as_bytes(),
                            "{shown}"
                        );
                        let want = crate::protocol::result::ResultText::new(h.result.to_owned());
                        let got = crate::protocol::result::ResultText::checked(
                            &bytes::Bytes::from(text.clone()),
                            &c,
                        );
                        assert_eq!(got.head(), want.head(), "{shown}");
                        heads += usize::from(c.head.is_some());
                        taken += 1;
                    }
                }
            }
        }
        assert!(
            taken > 10_000 && refused > 5_000 && heads > 5_000,
            "{taken} taken, {refused} refused, {heads} with a head"
        );
    }

    #[test]
    fn a_line_s_check_stops_at_its_first_break_and_checks_what_comes_before_it() {
        let mut r = Rng(0x2545_F491_4F6C_DD1D);
        let (mut broke, mut refused) = (0, 0);
        for round in 0..40_000 {
            let breaks = if round % 2 == 0 {
                Breaks::Lf
            } else {
                Breaks::LfCr
            };
            let mut line = message(&mut r);
            // Line breaks and CRs anywhere: between tokens, in strings, in numbers; and the
            // next line after the break.
            for _ in 0..r.below(3) {
                let at = r.below(line.len() + 1);
                line.insert(at, [b'\n', b'\r', b' '][r.below(3)]);
            }
            line.extend_from_slice(b"\n{\"jsonrpc\":\"2.0\",\"id\":2}\r\n");
            let first = line.iter().position(|&b| breaks.has(b));
            let mut cuts: Vec<usize> = (0..r.below(4)).map(|_| r.below(line.len() + 1)).collect();
            cuts.sort_unstable();
            let shown = String::from_utf8_lossy(&line).into_owned();
            let mut run_ = Run::default();
            let mut stop = None;
            for &c in cuts.iter().chain([&line.len()]) {
                match run_.feed(&line[..c.max(run_.pos)], breaks) {
                    Fed::All => {}
                    Fed::Break(i) => {
                        stop = Some(i);
                        break;
                    }
                    Fed::Refused => break,
                }
            }
            let Some(i) = stop else {
                // Refused before any break: the caller looks for it.
                refused += 1;
                continue;
            };
            broke += 1;
            assert_eq!(Some(i), first, "{breaks:?}: {shown}");
            // Fed again, it stops at the same break.
            assert_eq!(run_.feed(&line, breaks), Fed::Break(i), "{shown}");
            // What it found in the line is what a check of the line alone finds.
            let whole = run_.st == St::Done
                || (run_.depth == 0
                    && matches!(run_.st, St::Zero | St::Int | St::Frac | St::ExpDigits));
            let alone = run(&line[..i], &[]);
            match alone {
                Some((w, c)) => assert_eq!((whole, run_.finish(i)), (w, c), "{shown}"),
                None => assert!(run_.finish(i).is_none(), "{shown}"),
            }
        }
        assert!(
            broke > 10_000 && refused > 1_000,
            "{broke} broke, {refused} refused"
        );
    }

    #[test]
    fn what_it_refuses() {
        for bad in [
            &br#"{"result":01}"#[..],
            br#"{"result":-}"#,
            br#"{"result":1.}"#,
            br#"{"result":1e}"#,
            br#"{"result":.5}"#,
            br#"{"result":tru}"#,
            b"{\"result\":\"a\x01b\"}",
            br#"{"result":"\x"}"#,
            br#"{"result":"\u12g4"}"#,
            b"{\"result\":\"\xc0\xaf\"}",
            b"{\"result\":\"\xed\xa0\x80\"}",
            b"{\"result\":\"\xf4\x90\x80\x80\"}",
            br#"{"result":[1,]}"#,
            br#"{"result":{"a":1,}}"#,
            br#"{"result":[1}"#,
            br#"{"result":1} x"#,
            br#"{"result" 1}"#,
        ] {
            assert_eq!(run(bad, &[]), None, "{}", String::from_utf8_lossy(bad));
            assert!(!serde_ok(bad));
        }
    }

    #[test]
    fn what_it_leaves_to_serde() {
        // Two results, an escaped key, a batch, no result, a notification, an error: no
        // `Checked` (serde reads them whole).
        for text in [
            &br#"{"result":1,"result":2}"#[..],
            br#"{"res\u0075lt":1}"#,
            br#"[{"result":1}]"#,
            br#"{"id":1}"#,
            br#"{"jsonrpc":"2.0","method":"notifications/message","params":{"result":1}}"#,
            br#"{"jsonrpc":"2.0","id":1,"error":{"code":1,"message":"no"}}"#,
        ] {
            assert_eq!(
                run(text, &[]),
                Some((true, None)),
                "{}",
                String::from_utf8_lossy(text)
            );
        }
        // Nesting past MAX_DEPTH is not followed.
        let deep = format!(
            r#"{{"result":{}{}}}"#,
            "[".repeat(MAX_DEPTH),
            "]".repeat(MAX_DEPTH)
        );
        assert_eq!(run(deep.as_bytes(), &[]), None);
    }

    #[test]
    fn a_large_notification_is_not_followed_past_its_method() {
        let big = format!(
            r#"{{"jsonrpc":"2.0","method":"notifications/message","params":{{"data":"{}"}}}}"#,
            "x".repeat(4 * CHECK_FROM)
        );
        let mut c = JsonCheck::default();
        c.catch_up(&big.as_bytes()[..CHECK_FROM]);
        assert!(c.off && c.run.is_none());
        assert_eq!(c.finish(big.as_bytes()), None);
    }

    #[test]
    fn small_messages_are_left_to_serde_and_large_ones_are_checked_in_parts() {
        let small = br#"{"jsonrpc":"2.0","id":1,"result":{}}"#;
        let mut c = JsonCheck::default();
        c.catch_up(small);
        assert_eq!(c.finish(small), None);
        let big = format!(
            r#"{{"jsonrpc":"2.0","id":1,"result":{{"content":[{{"type":"text","text":"{}"}}],"resultType":"complete"}}}}"#,
            "é x".repeat(CHECK_FROM)
        );
        let b = big.as_bytes();
        let mut c = JsonCheck::default();
        for end in (0..b.len()).step_by(7_001) {
            c.catch_up(&b[..end]);
        }
        let got = c.finish(b).expect("checked");
        assert_eq!(&b[got.result.clone()][..12], br#"{"content":["#);
        assert_eq!(got.result.end, b.len() - 1);
        let head = got.head.expect("head");
        assert_eq!(&b[head.result_type.expect("type")], br#""complete""#);
    }
}
