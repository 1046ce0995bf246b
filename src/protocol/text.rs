//! Text from an untrusted server on its way to a log, a warning, `last_error` or an API
//! answer: cut to a bound, control characters (ANSI escapes, CR, LF, NUL, ...) replaced, and
//! every secret value of that server's configuration redacted. [`Redactor::clean`] is the one
//! place this happens for a connection; nothing a server says reaches the outside before it.
//!
//! Owns: cleaning text. Must not touch: anything with I/O.

/// The longest server-supplied text kept in an error, a warning or a log line.
pub const MAX_SERVER_TEXT: usize = 1024;

/// What replaces a secret value.
pub const REDACTED: &str = "[redacted]";

/// Whether `c` must not reach an error, a log or a terminal as it is: control characters
/// (C0 and C1) and the Unicode formatting characters that can reorder or hide text (bidi
/// embeddings, overrides and isolates, zero-width characters, line and paragraph
/// separators, the BOM).
pub fn unsafe_char(c: char) -> bool {
    c.is_control()
        || matches!(c,
            '\u{200b}'..='\u{200f}'   // zero-width space, joiners, LRM, RLM
            | '\u{2028}'..='\u{202e}' // line/paragraph separators, bidi embeddings, overrides
            | '\u{2060}'..='\u{2069}' // word joiner, invisible operators, bidi isolates
            | '\u{feff}'              // byte order mark, zero-width no-break space
        )
}

/// Cut `s` to at most `max` bytes (at a char boundary, with `…` when cut) and replace every
/// [`unsafe_char`] with a space.
pub fn clean(s: &str, max: usize) -> String {
    let mut out = String::with_capacity(s.len().min(max) + 3);
    for c in s.chars() {
        if out.len() + c.len_utf8() > max {
            out.push('…');
            break;
        }
        out.push(if unsafe_char(c) { ' ' } else { c });
    }
    out
}

/// Redacts one server's secret values (env values, header values, bearer tokens), however
/// short, then cleans the text.
#[derive(Clone, Default)]
pub struct Redactor {
    /// Longest first, so that a secret containing another is redacted whole.
    secrets: Vec<String>,
}

impl std::fmt::Debug for Redactor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Redactor({} secrets)", self.secrets.len())
    }
}

impl Redactor {
    pub fn new(secrets: impl IntoIterator<Item = String>) -> Redactor {
        let mut secrets: Vec<String> = secrets.into_iter().filter(|s| !s.is_empty()).collect();
        secrets.sort_by(|a, b| b.len().cmp(&a.len()).then_with(|| a.cmp(b)));
        secrets.dedup();
        Redactor { secrets }
    }

    /// `s` without secrets, cut and with control characters replaced.
    pub fn clean(&self, s: &str) -> String {
        clean(&self.redact(s), MAX_SERVER_TEXT)
    }

    /// `s` without secrets (not cut).
    pub fn redact(&self, s: &str) -> String {
        let mut out = s.to_owned();
        for secret in &self.secrets {
            if out.contains(secret.as_str()) {
                out = out.replace(secret.as_str(), REDACTED);
            }
        }
        out
    }

    /// `s`, a piece cut out of a longer text (`cut_start`: text came before it; `cut_end`:
    /// text may follow), without secrets: besides whole secrets, a start that is the end of
    /// a secret, and an end that is the beginning of one, are redacted too (a secret cut in
    /// half by the cut). Not cut, control characters kept.
    pub fn redact_piece(&self, s: &str, cut_start: bool, cut_end: bool) -> String {
        let mut start = 0;
        if cut_start {
            // The longest proper end of a secret that `s` starts with.
            for secret in &self.secrets {
                for (i, _) in secret.char_indices().skip(1) {
                    let tail = &secret[i..];
                    if tail.len() > start && s.starts_with(tail) {
                        start = tail.len();
                        break;
                    }
                }
            }
        }
        let mut end = s.len();
        if cut_end {
            // The longest proper beginning of a secret that `s` ends with (after `start`).
            let rest = &s[start..];
            let mut longest = 0;
            for secret in &self.secrets {
                for (i, _) in secret
                    .char_indices()
                    .skip(1)
                    .collect::<Vec<_>>()
                    .into_iter()
                    .rev()
                {
                    let head = &secret[..i];
                    if head.len() > longest && rest.ends_with(head) {
                        longest = head.len();
                        break;
                    }
                }
            }
            end = s.len() - longest;
        }
        let mut out = String::with_capacity(s.len());
        if start > 0 {
            out.push_str(REDACTED);
        }
        out.push_str(&self.redact(&s[start..end]));
        if end < s.len() {
            out.push_str(REDACTED);
        }
        out
    }

    /// Redact every string (keys included) of a JSON value a server sent.
    pub fn redact_json(&self, v: &mut serde_json::Value) {
        use serde_json::Value;
        if self.secrets.is_empty() {
            return;
        }
        match v {
            Value::String(s) if self.secrets.iter().any(|x| s.contains(x.as_str())) => {
                *s = self.redact(s);
            }
            Value::Array(a) => a.iter_mut().for_each(|x| self.redact_json(x)),
            Value::Object(m) => {
                let keys: Vec<String> = m
                    .keys()
                    .filter(|k| self.secrets.iter().any(|x| k.contains(x.as_str())))
                    .cloned()
                    .collect();
                for k in keys {
                    if let Some(x) = m.remove(&k) {
                        m.insert(self.redact(&k), x);
                    }
                }
                m.values_mut().for_each(|x| self.redact_json(x));
            }
            _ => {}
        }
    }

    pub fn is_empty(&self) -> bool {
        self.secrets.is_empty()
    }
}

/// At most [`LogLimiter::PER_MINUTE`] log lines a minute for one source (a connection): a
/// server that fails, floods garbage or changes its lists in a loop cannot flood the log.
/// The first line after a quiet spell says how many were left out.
#[derive(Debug)]
pub struct LogLimiter(std::sync::Mutex<LimiterState>);

#[derive(Debug)]
struct LimiterState {
    window: tokio::time::Instant,
    lines: u32,
    suppressed: u64,
}

impl Default for LogLimiter {
    fn default() -> Self {
        LogLimiter(std::sync::Mutex::new(LimiterState {
            window: tokio::time::Instant::now(),
            lines: 0,
            suppressed: 0,
        }))
    }
}

impl LogLimiter {
    pub const PER_MINUTE: u32 = 10;

    /// Whether a line may be logged now; `Some(n)` with the number of lines left out
    /// since the last one that was logged.
    pub fn allow(&self) -> Option<u64> {
        let Ok(mut g) = self.0.lock() else {
            return Some(0);
        };
        let now = tokio::time::Instant::now();
        if now.duration_since(g.window) >= std::time::Duration::from_secs(60) {
            g.window = now;
            g.lines = 0;
        }
        if g.lines >= Self::PER_MINUTE {
            g.suppressed += 1;
            return None;
        }
        g.lines += 1;
        Some(std::mem::take(&mut g.suppressed))
    }
}

/// Every secret value the daemon resolved, for the log writer: whatever a log line says (a
/// transport's debug line, a server's text), it passes through [`redact_logged`] last.
static LOGGED_SECRETS: std::sync::RwLock<Option<Redactor>> = std::sync::RwLock::new(None);

/// The most secret values the log writer keeps (a daemon resolves a few per server).
const MAX_LOGGED_SECRETS: usize = 10_000;

/// Add secret values the log writer must redact (also in their JSON-escaped form, for JSON
/// logs).
pub fn register_secrets<'a>(values: impl IntoIterator<Item = &'a str>) {
    let mut add = Vec::new();
    for v in values.into_iter().filter(|v| !v.is_empty()) {
        add.push(v.to_owned());
        if let Ok(j) = serde_json::to_string(v) {
            let inner = &j[1..j.len() - 1];
            if inner != v {
                add.push(inner.to_owned());
            }
        }
    }
    if add.is_empty() {
        return;
    }
    if let Ok(mut g) = LOGGED_SECRETS.write() {
        let cur = g.take().unwrap_or_default();
        if add.iter().all(|a| cur.secrets.contains(a)) {
            *g = Some(cur);
            return;
        }
        let mut all = cur.secrets;
        all.extend(add);
        if all.len() > MAX_LOGGED_SECRETS {
            let drop = all.len() - MAX_LOGGED_SECRETS;
            all.drain(..drop);
        }
        *g = Some(Redactor::new(all));
    }
}

/// A log line with every registered secret redacted.
pub fn redact_logged(line: &[u8]) -> std::borrow::Cow<'_, [u8]> {
    let Ok(g) = LOGGED_SECRETS.read() else {
        return line.into();
    };
    let Some(r) = g.as_ref().filter(|r| !r.is_empty()) else {
        return line.into();
    };
    let text = String::from_utf8_lossy(line);
    if !r.secrets.iter().any(|s| text.contains(s.as_str())) {
        return line.into();
    }
    r.redact(&text).into_bytes().into()
}

/// A writer for the log that redacts registered secrets from each write (the log formatter
/// writes each event whole).
pub struct RedactingWriter<W: std::io::Write>(pub W);

impl<W: std::io::Write> std::io::Write for RedactingWriter<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.write_all(&redact_logged(buf))?;
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.0.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_log_writer_redacts_registered_secrets_also_json_escaped() {
        register_secrets(["s3cr\"et-log", "Zq"]);
        let line = br#"{"msg":"bad s3cr\"et-log","raw":"s3cr"et-log Zq"}"#;
        let out = redact_logged(line);
        let out = String::from_utf8_lossy(&out);
        assert!(!out.contains("s3cr"), "{out}");
        assert!(!out.contains("Zq"), "{out}");
        assert_eq!(&*redact_logged(b"nothing here"), b"nothing here");
    }

    #[tokio::test(start_paused = true)]
    async fn a_log_limiter_lets_ten_lines_a_minute_through_and_counts_the_rest() {
        let l = LogLimiter::default();
        for _ in 0..10 {
            assert_eq!(l.allow(), Some(0));
        }
        for _ in 0..5 {
            assert_eq!(l.allow(), None);
        }
        tokio::time::advance(std::time::Duration::from_secs(61)).await;
        assert_eq!(l.allow(), Some(5));
        assert_eq!(l.allow(), Some(0));
    }

    #[test]
    fn control_characters_are_replaced_and_long_text_is_cut() {
        assert_eq!(clean("a\u{1b}[31mred\r\nnext\0", 100), "a [31mred  next ");
        assert_eq!(clean("x\u{202e}y\u{200b}z", 100), "x y z");
        let long = "é".repeat(1000);
        let c = clean(&long, 11);
        assert!(c.len() <= 11 + '…'.len_utf8(), "{c}");
        assert!(c.ends_with('…'));
        assert_eq!(clean("short", 100), "short");
    }

    #[test]
    fn every_secret_is_redacted_however_short_and_the_longest_first() {
        let r = Redactor::new(["abc".into(), "ab".into(), "x".into(), "".into()]);
        assert_eq!(r.redact("abc ab x y"), "[redacted] [redacted] [redacted] y");
        let mut v = json!({"message": "bad token abc", "data": ["x", {"abc": 1}]});
        r.redact_json(&mut v);
        assert!(!v.to_string().contains("abc"), "{v}");
        assert!(!v.to_string().contains("\"x\""), "{v}");
        // An empty secret never matches everything.
        assert_eq!(
            Redactor::new(["".into()]).redact_piece("keep", true, true),
            "keep"
        );
        assert_eq!(Redactor::new(["".into()]).redact("keep"), "keep");
    }

    #[test]
    fn a_piece_cut_out_of_a_text_loses_the_halves_of_secrets_at_its_edges() {
        let r = Redactor::new(["s3cret-value".into(), "other".into()]);
        // Whole secrets anywhere; the end of one at a cut start; the beginning of one at a
        // cut end.
        assert_eq!(
            r.redact_piece("ret-value; other; s3cr", true, true),
            "[redacted]; [redacted]; [redacted]"
        );
        // Uncut edges are left alone.
        assert_eq!(r.redact_piece("value s3c", false, false), "value s3c");
        assert_eq!(r.redact_piece("e\n", true, false), "[redacted]\n");
        assert_eq!(r.redact_piece("x\n", true, true), "x\n");
        // A secret whole at the start of a cut piece is redacted once.
        assert_eq!(r.redact_piece("other x", true, false), "[redacted] x");
    }
}
