//! Splitting a command line the way a POSIX shell splits words, with nothing else a shell
//! does: quotes (`'...'`, `"..."`) and backslashes are honoured; no variable, glob, tilde or
//! command substitution is expanded and nothing runs. `npx -y pkg "/srv/my docs"` is the
//! command `npx` and the arguments `-y`, `pkg`, `/srv/my docs`. An unbalanced quote or a
//! trailing backslash is an error naming the (1-based, in characters) column where it starts.
//!
//! Owns: that split. Must not touch: files, processes.

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SplitError {
    #[error("unbalanced {quote} quote opened at column {column}")]
    Unbalanced { quote: &'static str, column: usize },
    #[error("a backslash at column {column} ends the line")]
    TrailingBackslash { column: usize },
}

impl SplitError {
    /// The 1-based column (in characters) the error points at.
    pub fn column(&self) -> usize {
        match self {
            SplitError::Unbalanced { column, .. } | SplitError::TrailingBackslash { column } => {
                *column
            }
        }
    }
}

/// The words of `line`.
pub fn split(line: &str) -> Result<Vec<String>, SplitError> {
    let mut words = Vec::new();
    let mut word = String::new();
    // Whether a word is open: `""` is an (empty) word, plain blanks are not.
    let mut open = false;
    let mut chars = line.chars().enumerate().peekable();
    while let Some((i, c)) = chars.next() {
        let column = i + 1;
        match c {
            ' ' | '\t' | '\n' | '\r' => {
                if open {
                    words.push(std::mem::take(&mut word));
                    open = false;
                }
            }
            '\\' => match chars.next() {
                // A backslash before a newline joins the lines.
                Some((_, '\n')) => {}
                Some((_, next)) => {
                    word.push(next);
                    open = true;
                }
                None => return Err(SplitError::TrailingBackslash { column }),
            },
            '\'' => {
                open = true;
                loop {
                    match chars.next() {
                        Some((_, '\'')) => break,
                        Some((_, ch)) => word.push(ch),
                        None => {
                            return Err(SplitError::Unbalanced {
                                quote: "single",
                                column,
                            })
                        }
                    }
                }
            }
            '"' => {
                open = true;
                loop {
                    match chars.next() {
                        Some((_, '"')) => break,
                        // Inside double quotes a backslash escapes only these.
                        Some((_, '\\')) => match chars.peek() {
                            Some((_, n @ ('"' | '\\' | '$' | '`'))) => {
                                word.push(*n);
                                chars.next();
                            }
                            Some((_, '\n')) => {
                                chars.next();
                            }
                            _ => word.push('\\'),
                        },
                        Some((_, ch)) => word.push(ch),
                        None => {
                            return Err(SplitError::Unbalanced {
                                quote: "double",
                                column,
                            })
                        }
                    }
                }
            }
            other => {
                word.push(other);
                open = true;
            }
        }
    }
    if open {
        words.push(word);
    }
    Ok(words)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(s: &str) -> Vec<String> {
        split(s).unwrap()
    }

    #[test]
    fn splits_as_a_shell_would_without_expanding() {
        assert_eq!(
            ok(r#"npx -y @modelcontextprotocol/server-filesystem "/srv/my docs""#),
            [
                "npx",
                "-y",
                "@modelcontextprotocol/server-filesystem",
                "/srv/my docs"
            ]
        );
        assert_eq!(ok("  a\t b  "), ["a", "b"]);
        assert_eq!(ok(r"a\ b 'c d' e"), ["a b", "c d", "e"]);
        assert_eq!(ok(r#"say "it's" 'a "b"'"#), ["say", "it's", r#"a "b""#]);
        assert_eq!(ok(r#""a\"b\\c\d""#), [r#"a"b\c\d"#]);
        assert_eq!(ok(r"'a\b'"), [r"a\b"]);
        assert_eq!(ok(r#"x "" ''"#), ["x", "", ""]);
        assert_eq!(ok(r#"ab"cd"'ef'"#), ["abcdef"]);
        // Nothing is expanded.
        assert_eq!(
            ok("echo $HOME ~ *.txt $(id) `id`"),
            ["echo", "$HOME", "~", "*.txt", "$(id)", "`id`"]
        );
        assert!(ok("   ").is_empty());
        assert_eq!(ok("é 'ü ö'"), ["é", "ü ö"]);
    }

    #[test]
    fn an_unbalanced_quote_names_its_column() {
        let e = split(r#"npx -y "unclosed thing"#).unwrap_err();
        assert_eq!(e.column(), 8);
        assert!(e.to_string().contains("double quote"), "{e}");
        let e = split("a 'b").unwrap_err();
        assert_eq!(e.column(), 3);
        let e = split("ü 'b").unwrap_err();
        assert_eq!(e.column(), 3, "columns count characters");
        let e = split(r"a b\").unwrap_err();
        assert_eq!(e, SplitError::TrailingBackslash { column: 4 });
    }
}
