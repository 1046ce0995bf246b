//! An incremental Server-Sent Events parser over byte chunks, as the HTML standard's
//! "event stream interpretation" describes it: `data`, `id`, `event` and `retry` fields,
//! comment lines (`:`) ignored, lines ended by CRLF, LF or CR (also split across chunks), a
//! leading byte order mark skipped, and events with empty data delivered (a Streamable HTTP
//! server primes each stream with an event that has an id and no data).
//!
//! Owns: the partial line and the partial event of one stream, and a size cap on an event.
//! An event that grows past the cap is refused once ([`SseItem::Oversized`]) and the rest of
//! it is skipped up to its end, so memory stays bounded whatever the server sends; the
//! parser then carries on with the next event. An `id` longer than 256 bytes is never kept:
//! it is reported ([`SseItem::OversizedId`]) and the rest of its line is skipped as it comes,
//! so a stream's last event id (what a resumption sends back) stays short.

use crate::protocol::check::{Breaks, Checked, JsonCheck, LineScan, CHECK_FROM};
use bytes::{Bytes, BytesMut};
use std::collections::VecDeque;
use std::time::Duration;

/// One dispatched event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SseEvent {
    /// The `id` field of this event, when it had one (an empty `id` resets the stream's last
    /// event id and is reported as `Some("")`).
    pub id: Option<String>,
    /// The `event` field (type); `None` means the default, `message`.
    pub event: Option<String>,
    /// The data lines joined with `\n`; empty for a priming event.
    pub data: Bytes,
    /// What [`JsonCheck`] found in a large data line as it arrived (an event of one data
    /// line: a large result is one long line).
    pub checked: Option<Checked>,
}

/// What the parser hands out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SseItem {
    Event(SseEvent),
    /// An event grew past the size cap; it was dropped. Its size so far is given.
    Oversized(usize),
    /// An `id` field longer than [`MAX_EVENT_ID_BYTES`]; it was not kept (nor taken as the
    /// last event id). Its length (so far, when cut while read) is given.
    OversizedId(usize),
}

/// The longest event id kept (256 bytes).
pub const MAX_EVENT_ID_BYTES: usize = 256;
/// An `id` line longer than this (`id: ` and the id) is cut while it is read.
const MAX_ID_LINE: usize = MAX_EVENT_ID_BYTES + 4;

/// The incremental parser. Feed it chunks with [`SseParser::feed`], take items with
/// [`SseParser::next_item`].
#[derive(Debug)]
pub struct SseParser {
    max_event: usize,
    /// The line being read (without its end).
    line: BytesMut,
    /// The previous chunk ended with CR: a LF starting the next chunk belongs to it.
    after_cr: bool,
    /// Still at the very start of the stream (a BOM may come).
    at_start: bool,
    bom_seen: usize,
    /// Skipping the rest of an oversized event: whether the current line has content.
    skipping: Option<bool>,
    /// The current line is an `id` over the cap: its length so far (the rest is skipped).
    long_id: Option<usize>,
    /// The check of the line being read, while it may be the event's first data line.
    line_check: JsonCheck,
    // The event being built.
    data: BytesMut,
    /// The check of `data`, when it is one data line that was checked.
    data_checked: Option<Checked>,
    has_data: bool,
    event_id: Option<String>,
    event_type: Option<String>,
    // Stream state.
    last_event_id: Option<String>,
    retry: Option<Duration>,
    ready: VecDeque<SseItem>,
}

const BOM: [u8; 3] = [0xEF, 0xBB, 0xBF];

/// Where the value of a `data` line starts (after `data:` and one space); `None` for a line
/// of another field.
fn data_value_at(line: &[u8]) -> Option<usize> {
    let v = line.strip_prefix(b"data:")?;
    Some(line.len() - v.strip_prefix(b" ").unwrap_or(v).len())
}
/// Room for a field name on top of the cap while a line is read.
const LINE_SLACK: usize = 64;

impl SseParser {
    /// A parser refusing events larger than `max_event` bytes (data plus the line being read).
    pub fn new(max_event: usize) -> Self {
        SseParser {
            max_event,
            line: BytesMut::new(),
            after_cr: false,
            at_start: true,
            bom_seen: 0,
            skipping: None,
            long_id: None,
            line_check: JsonCheck::default(),
            data: BytesMut::new(),
            data_checked: None,
            has_data: false,
            event_id: None,
            event_type: None,
            last_event_id: None,
            retry: None,
            ready: VecDeque::new(),
        }
    }

    /// The stream's last event id (the `id` of the latest event that set one), for
    /// `Last-Event-ID`.
    pub fn last_event_id(&self) -> Option<&str> {
        self.last_event_id.as_deref()
    }

    /// The reconnection time the server set with `retry`, if any.
    pub fn retry(&self) -> Option<Duration> {
        self.retry
    }

    /// Take the next complete item.
    pub fn next_item(&mut self) -> Option<SseItem> {
        self.ready.pop_front()
    }

    /// Feed one chunk; complete events become available through [`SseParser::next_item`].
    pub fn feed(&mut self, mut chunk: &[u8]) {
        while self.at_start && !chunk.is_empty() {
            if chunk[0] == BOM[self.bom_seen] {
                self.bom_seen += 1;
                chunk = &chunk[1..];
                if self.bom_seen == BOM.len() {
                    self.at_start = false;
                }
            } else {
                // Not a BOM after all: give back what was taken for one.
                self.at_start = false;
                let taken = BOM[..self.bom_seen].to_vec();
                self.bom_seen = 0;
                self.feed_lines(&taken);
            }
        }
        self.feed_lines(chunk);
    }

    fn feed_lines(&mut self, mut chunk: &[u8]) {
        if self.after_cr {
            self.after_cr = false;
            if let Some(rest) = chunk.strip_prefix(b"\n") {
                chunk = rest;
            }
        }
        while !chunk.is_empty() {
            if let Some(k) = self.take_checked_part(chunk) {
                // The rest, if any, starts with the line's end.
                chunk = &chunk[k..];
                if chunk.is_empty() {
                    break;
                }
            }
            match memchr::memchr2(b'\n', b'\r', chunk) {
                Some(i) => {
                    let end = chunk[i];
                    self.take_line_part(&chunk[..i]);
                    self.end_line();
                    chunk = &chunk[i + 1..];
                    if end == b'\r' {
                        if chunk.is_empty() {
                            self.after_cr = true;
                        } else if chunk[0] == b'\n' {
                            chunk = &chunk[1..];
                        }
                    }
                }
                None => {
                    self.take_line_part(chunk);
                    chunk = &[];
                }
            }
        }
    }

    /// While the line is an event's first data line of [`CHECK_FROM`] bytes or more (a large
    /// result), the part of `chunk` up to the line's end, added to it with the line's end
    /// found by its check in the same pass ([`JsonCheck::catch_up_line`]) instead of a search
    /// before it: how many bytes of `chunk` were taken. `None` for any other line, and when
    /// the chunk would pass the size cap (the usual way deals with that).
    fn take_checked_part(&mut self, chunk: &[u8]) -> Option<usize> {
        let start = self.line.len();
        if self.has_data
            || self.skipping.is_some()
            || self.long_id.is_some()
            || start < CHECK_FROM
            || start + chunk.len() > self.max_event
        {
            return None;
        }
        let value = data_value_at(&self.line)?;
        super::spare::extend(&mut self.line, chunk);
        let end = match self
            .line_check
            .catch_up_line(&self.line[value..], Breaks::LfCr)
        {
            LineScan::NoBreak => None,
            LineScan::Break(i) => Some(value + i),
            LineScan::NotFollowed => {
                memchr::memchr2(b'\n', b'\r', &self.line[start..]).map(|i| start + i)
            }
        };
        Some(match end {
            Some(end) => {
                self.line.truncate(end);
                end - start
            }
            None => chunk.len(),
        })
    }

    /// Add part of the current line, watching the size cap.
    fn take_line_part(&mut self, part: &[u8]) {
        if part.is_empty() {
            return;
        }
        if let Some(has_content) = self.skipping.as_mut() {
            *has_content = true;
            return;
        }
        if let Some(n) = self.long_id.as_mut() {
            *n = n.saturating_add(part.len());
            return;
        }
        let size = self.data.len() + self.line.len() + part.len();
        // The line still holds its field name: allow for it; the data check is exact.
        if size > self.max_event.saturating_add(LINE_SLACK) {
            self.start_skipping(size);
            if let Some(h) = self.skipping.as_mut() {
                *h = true;
            }
            return;
        }
        super::spare::extend(&mut self.line, part);
        if !self.has_data && self.line.len() >= CHECK_FROM {
            match data_value_at(&self.line) {
                Some(at) => self.line_check.catch_up(&self.line[at..]),
                None => self.line_check.give_up(),
            }
        }
        if self.line.len() > MAX_ID_LINE && self.line.starts_with(b"id:") {
            let space = usize::from(self.line.get(3) == Some(&b' '));
            self.long_id = Some(self.line.len() - 3 - space);
            self.line = BytesMut::new();
        }
    }

    fn start_skipping(&mut self, size: usize) {
        self.ready.push_back(SseItem::Oversized(size));
        self.line_check = JsonCheck::default();
        self.data_checked = None;
        self.skipping = Some(false);
        self.line = BytesMut::new();
        self.data = BytesMut::new();
        self.has_data = false;
        self.event_id = None;
        self.event_type = None;
    }

    fn end_line(&mut self) {
        if let Some(has_content) = self.skipping {
            if has_content {
                self.skipping = Some(false);
            } else {
                // An empty line: the oversized event is over.
                self.skipping = None;
            }
            return;
        }
        if let Some(n) = self.long_id.take() {
            self.ready.push_back(SseItem::OversizedId(n));
            return;
        }
        let line_check = std::mem::take(&mut self.line_check);
        let mut line = super::spare::split(&mut self.line);
        if line.is_empty() {
            self.dispatch();
            return;
        }
        if line[0] == b':' {
            return; // a comment
        }
        let (field, value) = match line.iter().position(|&b| b == b':') {
            Some(i) => {
                let v = &line[i + 1..];
                (&line[..i], v.strip_prefix(b" ").unwrap_or(v))
            }
            None => (&line[..], &[][..]),
        };
        match field {
            b"data" => {
                if self.data.len() + value.len() + 1 > self.max_event {
                    let size = self.data.len() + value.len() + 1;
                    self.start_skipping(size);
                    // The line that overflowed is complete: skip up to the event's end.
                    self.skipping = Some(false);
                    return;
                }
                if self.has_data {
                    self.data.extend_from_slice(b"\n");
                    self.data.extend_from_slice(value);
                    self.data_checked = None;
                } else {
                    // The first data line becomes the data without a copy (a large result
                    // is one long line).
                    let skip = line.len() - value.len();
                    let _ = line.split_to(skip);
                    self.data = line;
                    self.data_checked = line_check.finish(&self.data);
                }
                self.has_data = true;
            }
            b"id" if value.len() > MAX_EVENT_ID_BYTES => {
                self.ready.push_back(SseItem::OversizedId(value.len()));
            }
            b"id" if !value.contains(&0) => {
                let id = String::from_utf8_lossy(value).into_owned();
                self.last_event_id = if id.is_empty() {
                    None
                } else {
                    Some(id.clone())
                };
                self.event_id = Some(id);
            }
            b"event" => {
                self.event_type = Some(String::from_utf8_lossy(value).into_owned());
            }
            b"retry" if !value.is_empty() && value.iter().all(u8::is_ascii_digit) => {
                let ms = std::str::from_utf8(value)
                    .ok()
                    .and_then(|s| s.parse::<u64>().ok())
                    .unwrap_or(u64::MAX);
                self.retry = Some(Duration::from_millis(ms));
            }
            _ => {}
        }
        if self.line.capacity() > 64 * 1024 {
            self.line = BytesMut::new();
        }
    }

    fn dispatch(&mut self) {
        if !self.has_data && self.event_id.is_none() && self.event_type.is_none() {
            return;
        }
        // Data lines are joined with `\n`, with none after the last.
        let data = std::mem::take(&mut self.data).freeze();
        super::spare::keep(&data);
        self.has_data = false;
        self.ready.push_back(SseItem::Event(SseEvent {
            id: self.event_id.take(),
            event: self.event_type.take(),
            data,
            checked: self.data_checked.take(),
        }));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all(p: &mut SseParser) -> Vec<SseItem> {
        std::iter::from_fn(|| p.next_item()).collect()
    }

    fn ev(id: Option<&str>, data: &str) -> SseItem {
        SseItem::Event(SseEvent {
            id: id.map(str::to_owned),
            event: None,
            data: Bytes::copy_from_slice(data.as_bytes()),
            checked: None,
        })
    }

    fn parse_in_pieces(input: &[u8], piece: usize) -> (Vec<SseItem>, SseParser) {
        let mut p = SseParser::new(1024);
        let mut out = Vec::new();
        for c in input.chunks(piece.max(1)) {
            p.feed(c);
            out.extend(all(&mut p));
        }
        (out, p)
    }

    #[test]
    fn fields_and_comments() {
        let input = b": hello\nid: 7\nevent: message\ndata: {\"a\":1}\nretry: 1500\n\n";
        let (items, p) = parse_in_pieces(input, 1000);
        assert_eq!(
            items,
            vec![SseItem::Event(SseEvent {
                id: Some("7".into()),
                event: Some("message".into()),
                data: Bytes::from_static(b"{\"a\":1}"),
                checked: None,
            })]
        );
        assert_eq!(p.retry(), Some(Duration::from_millis(1500)));
        assert_eq!(p.last_event_id(), Some("7"));
    }

    #[test]
    fn every_line_ending_and_every_split() {
        let lf = b"id: 1\ndata: a\ndata: b\n\ndata: c\n\n".to_vec();
        let crlf = b"id: 1\r\ndata: a\r\ndata: b\r\n\r\ndata: c\r\n\r\n".to_vec();
        let cr = b"id: 1\rdata: a\rdata: b\r\rdata: c\r\r".to_vec();
        let want = vec![ev(Some("1"), "a\nb"), ev(None, "c")];
        for input in [lf, crlf, cr] {
            for piece in 1..input.len() {
                let (items, p) = parse_in_pieces(&input, piece);
                assert_eq!(
                    items,
                    want,
                    "piece {piece}: {:?}",
                    String::from_utf8_lossy(&input)
                );
                assert_eq!(p.last_event_id(), Some("1"));
            }
        }
    }

    #[test]
    fn priming_event_with_empty_data_is_delivered() {
        let (items, _) = parse_in_pieces(b"id: abc\ndata:\n\n", 3);
        assert_eq!(items, vec![ev(Some("abc"), "")]);
        let (items, _) = parse_in_pieces(b"id: abc\ndata\n\n", 100);
        assert_eq!(items, vec![ev(Some("abc"), "")]);
        // An event with nothing in it is no event.
        let (items, _) = parse_in_pieces(b"\n\n: keepalive\n\n", 100);
        assert!(items.is_empty());
    }

    #[test]
    fn value_spaces_and_colons() {
        let (items, _) = parse_in_pieces(b"data:no-space\ndata:  two\ndata: a:b\n\n", 5);
        assert_eq!(items, vec![ev(None, "no-space\n two\na:b")]);
    }

    #[test]
    fn bad_retry_and_nul_id_are_ignored() {
        let (_, p) = parse_in_pieces(b"retry: 12x\nid: a\0b\ndata: x\n\n", 100);
        assert_eq!(p.retry(), None);
        assert_eq!(p.last_event_id(), None);
        let (_, p) = parse_in_pieces(b"retry: 99999999999999999999999\ndata: x\n\n", 100);
        assert_eq!(p.retry(), Some(Duration::from_millis(u64::MAX)));
    }

    #[test]
    fn empty_id_resets_last_event_id() {
        let (items, p) = parse_in_pieces(b"id: 5\ndata: a\n\nid\ndata: b\n\n", 100);
        assert_eq!(items.len(), 2);
        assert_eq!(p.last_event_id(), None);
    }

    #[test]
    fn incomplete_event_at_the_end_is_not_dispatched() {
        let (items, _) = parse_in_pieces(b"data: a\n\ndata: b\n", 100);
        assert_eq!(items, vec![ev(None, "a")]);
    }

    #[test]
    fn bom_is_skipped_even_when_split() {
        let mut input = BOM.to_vec();
        input.extend_from_slice(b"data: x\n\n");
        for piece in 1..5 {
            let (items, _) = parse_in_pieces(&input, piece);
            assert_eq!(items, vec![ev(None, "x")]);
        }
        // Bytes that start like a BOM but are not one are kept.
        let (items, _) = parse_in_pieces(b"\xEFdata: x\n\n", 1);
        assert!(items.is_empty(), "the field name is not data");
    }

    #[test]
    fn an_event_over_the_cap_is_refused_and_skipped() {
        // Cap 1024: one event of 2000 bytes in a single data line, then a normal one.
        let mut input = b"id: 1\ndata: ".to_vec();
        input.extend(std::iter::repeat_n(b'x', 2000));
        input.extend_from_slice(b"\ndata: more\n\nid: 2\ndata: ok\n\n");
        for piece in [1, 7, 100, 5000] {
            let (items, p) = parse_in_pieces(&input, piece);
            assert_eq!(items.len(), 2, "piece {piece}: {items:?}");
            assert!(matches!(items[0], SseItem::Oversized(n) if n > 1024));
            assert_eq!(items[1], ev(Some("2"), "ok"));
            assert_eq!(p.last_event_id(), Some("2"));
        }
    }

    #[test]
    fn many_small_lines_over_the_cap_are_refused() {
        let mut input = Vec::new();
        for _ in 0..200 {
            input.extend_from_slice(b"data: 0123456789\n");
        }
        input.extend_from_slice(b"\ndata: after\n\n");
        let (items, _) = parse_in_pieces(&input, 64);
        assert_eq!(items.len(), 2, "{items:?}");
        assert!(matches!(items[0], SseItem::Oversized(_)));
        assert_eq!(items[1], ev(None, "after"));
    }

    #[test]
    fn a_line_without_end_never_grows_past_the_cap() {
        let mut p = SseParser::new(1024);
        for _ in 0..1000 {
            p.feed(&[b'y'; 1000]);
        }
        assert!(
            p.line.capacity() <= 4096,
            "buffer grew to {}",
            p.line.capacity()
        );
        assert_eq!(all(&mut p).len(), 1);
    }

    #[test]
    fn an_event_exactly_at_the_cap_passes() {
        let mut p = SseParser::new(16);
        // data buffer: 15 bytes + '\n' = 16.
        p.feed(b"data: 012345678901234\n\n");
        assert_eq!(all(&mut p), vec![ev(None, "012345678901234")]);
        p.feed(b"data: 0123456789012345\n\n");
        assert!(matches!(all(&mut p)[..], [SseItem::Oversized(_)]));
    }

    #[test]
    fn an_id_over_256_bytes_is_reported_and_never_kept() {
        let long = "i".repeat(MAX_EVENT_ID_BYTES + 1);
        let exact = "e".repeat(MAX_EVENT_ID_BYTES);
        let input =
            format!("id: {exact}\ndata: a\n\nid: {long}\ndata: b\n\nid:{long}\ndata: c\n\n");
        for piece in [1, 7, 300, 5000] {
            let (items, p) = parse_in_pieces(input.as_bytes(), piece);
            assert_eq!(items.len(), 5, "piece {piece}: {items:?}");
            assert_eq!(items[0], ev(Some(&exact), "a"));
            assert_eq!(items[1], SseItem::OversizedId(MAX_EVENT_ID_BYTES + 1));
            assert_eq!(items[2], ev(None, "b"));
            assert!(
                matches!(items[3], SseItem::OversizedId(_)),
                "{:?}",
                items[3]
            );
            assert_eq!(items[4], ev(None, "c"));
            assert_eq!(
                p.last_event_id(),
                Some(exact.as_str()),
                "the long ids were not kept"
            );
        }
    }

    #[test]
    fn a_1_mib_id_line_is_never_buffered() {
        let mut p = SseParser::new(16 << 20);
        p.feed(b"id: ");
        for _ in 0..1024 {
            p.feed(&[b'x'; 1024]);
            assert!(
                p.line.capacity() <= 4096,
                "the line grew to {}",
                p.line.capacity()
            );
        }
        p.feed(b"\ndata: after\n\n");
        let items = all(&mut p);
        assert!(
            matches!(items[0], SseItem::OversizedId(n) if n == 1 << 20),
            "{items:?}"
        );
        assert_eq!(items[1], ev(None, "after"));
        assert_eq!(p.last_event_id(), None);
    }

    /// Large data lines (past [`CHECK_FROM`], where the check finds the line's end), valid
    /// JSON and not (a control character in a string: the check refuses it and `memchr`
    /// finds the end), ended by LF, CR or CRLF, each followed by a small event, fed in pieces
    /// of many sizes: every event comes out whole, with what a check of its data alone finds.
    #[test]
    fn large_data_lines_end_where_they_end_however_they_are_cut() {
        let text = |n: usize, bad: bool| {
            let mut t = format!(
                r#"{{"jsonrpc":"2.0","id":1,"result":{{"content":[{{"type":"text","text":"{}"#,
                "x".repeat(n)
            );
            if bad {
                t.push('\u{1}');
            }
            t.push_str(r#""}],"isError":false}, "b": [1, 2.5e3, true, null] }"#);
            t
        };
        let mut input = Vec::new();
        let mut want = Vec::new();
        for (k, (end, bad)) in [
            ("\n", false),
            ("\r", false),
            ("\r\n", false),
            ("\n", true),
            ("\r", true),
            ("\r\n", true),
        ]
        .into_iter()
        .enumerate()
        {
            let data = text(CHECK_FROM + 1000 * k, bad);
            input.extend_from_slice(
                format!("id: {k}{end}data: {data}{end}{end}data: small {k}{end}{end}").as_bytes(),
            );
            let checked = JsonCheck::default().finish(data.as_bytes());
            assert_eq!(checked.is_some(), !bad);
            want.push(SseItem::Event(SseEvent {
                id: Some(k.to_string()),
                event: None,
                data: Bytes::from(data),
                checked,
            }));
            want.push(ev(None, &format!("small {k}")));
        }
        for piece in [
            1,
            7,
            4096,
            CHECK_FROM - 3,
            CHECK_FROM + 1,
            100_000,
            input.len(),
        ] {
            let mut p = SseParser::new(16 << 20);
            let mut out = Vec::new();
            for c in input.chunks(piece) {
                p.feed(c);
                out.extend(all(&mut p));
            }
            assert_eq!(out.len(), want.len(), "piece {piece}");
            for (got, want) in out.iter().zip(&want) {
                assert!(
                    got == want,
                    "piece {piece}: {:.200?} against {:.200?}",
                    got,
                    want
                );
            }
            assert_eq!(p.last_event_id(), Some("5"));
        }
    }
}
