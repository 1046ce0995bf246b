//! Text a server supplies that a transport puts in an error (an HTTP refusal's body or its
//! JSON-RPC error message, a content type, a parse error quoting what was sent): configured
//! secrets replaced by `***`, every control character (C0 and C1: ESC, CR, LF, NUL, BEL,
//! DEL, CSI ...) and every Unicode formatting character that can reorder or hide text (bidi
//! embeddings, overrides and isolates, zero-width characters, line and paragraph
//! separators, the BOM) replaced by a space, runs of white space folded into one, and the
//! result cut to [`DETAIL_CHARS`] characters (with `…`). Such text can then reach an API
//! answer, a log line or a terminal without rewriting what is shown around it.
//!
//! Owns: that one function. Must not touch: I/O.

/// The longest text kept from a server for an error (200 characters).
pub const DETAIL_CHARS: usize = 200;

use crate::protocol::text::unsafe_char;

/// `text` made fit for an error: see the module. `max_chars` is normally [`DETAIL_CHARS`].
pub fn error_text(text: &str, secrets: &[String], max_chars: usize) -> String {
    let mut s = std::borrow::Cow::Borrowed(text);
    for secret in secrets {
        if !secret.is_empty() && s.contains(secret.as_str()) {
            s = std::borrow::Cow::Owned(s.replace(secret.as_str(), "***"));
        }
    }
    let mut out = String::with_capacity(s.len().min(max_chars * 4 + 4));
    let mut chars = 0;
    let mut space = false;
    for c in s.chars() {
        if c.is_whitespace() || unsafe_char(c) {
            space = chars > 0;
            continue;
        }
        if space {
            if chars + 1 >= max_chars {
                out.push('…');
                return out;
            }
            out.push(' ');
            chars += 1;
            space = false;
        }
        if chars >= max_chars {
            out.push('…');
            return out;
        }
        out.push(c);
        chars += 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_and_formatting_characters_become_single_spaces() {
        let t = "\x1b[2J\x1b[31mERROR\x1b[0m\r\nline two\u{7}\u{0}\u{7f}\u{9b}31m \u{202e}txt.exe\u{2066}x\u{200b}y\t\tz";
        assert_eq!(
            error_text(t, &[], DETAIL_CHARS),
            "[2J [31mERROR [0m line two 31m txt.exe x y z"
        );
        assert_eq!(error_text("  \n a  b \n", &[], DETAIL_CHARS), "a b");
        assert_eq!(error_text("", &[], DETAIL_CHARS), "");
    }

    #[test]
    fn secrets_go_first_and_the_text_is_cut() {
        let secrets = vec!["Bearer sekrit-token".to_owned(), "sekrit-token".to_owned()];
        assert_eq!(
            error_text(
                "bad Bearer sekrit-token\nand sekrit-token",
                &secrets,
                DETAIL_CHARS
            ),
            "bad *** and ***"
        );
        let long = "\x1b[31mé\n".repeat(10_000);
        let cut = error_text(&long, &[], DETAIL_CHARS);
        assert_eq!(cut.chars().count(), DETAIL_CHARS + 1);
        assert!(cut.ends_with('…'));
        assert!(!cut.chars().any(unsafe_char));
        assert_eq!(error_text("abcdef", &[], 3), "abc…");
        assert_eq!(error_text("abc", &[], 3), "abc");
    }
}
