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

/// Cut `s` to at most `max` bytes (at a char boundary, with `…` when cut) and replace every
/// control character with a space.
pub fn clean(s: &str, max: usize) -> String {
    let mut out = String::with_capacity(s.len().min(max) + 3);
    for c in s.chars() {
        if out.len() + c.len_utf8() > max {
            out.push('…');
            break;
        }
        out.push(if c.is_control() { ' ' } else { c });
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

    /// Redact every string (keys included) of a JSON value a server sent.
    pub fn redact_json(&self, v: &mut serde_json::Value) {
        use serde_json::Value;
        if self.secrets.is_empty() {
            return;
        }
        match v {
            Value::String(s) => {
                if self.secrets.iter().any(|x| s.contains(x.as_str())) {
                    *s = self.redact(s);
                }
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn control_characters_are_replaced_and_long_text_is_cut() {
        assert_eq!(clean("a\u{1b}[31mred\r\nnext\0", 100), "a [31mred  next ");
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
        assert_eq!(Redactor::new(["".into()]).redact("keep"), "keep");
    }
}
