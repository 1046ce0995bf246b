//! Reading an import file: JSON with comments and trailing commas (VS Code's), TOML, where an
//! error is in the text (line and column), the workspace a file sits in, and what a file
//! holds when no format matches.
//!
//! Owns: the files' text. Must not touch: the servers in it.

use super::*;

/// JSON with comments and trailing commas (VS Code's JSONC) made plain JSON: comments and
/// trailing commas become spaces, so lines and columns stay where they were.
pub(super) fn strip_jsonc(text: &str) -> String {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    // Comments out.
    let mut out: Vec<char> = Vec::with_capacity(text.len());
    let cs: Vec<char> = text.chars().collect();
    let mut i = 0;
    let mut in_str = false;
    while i < cs.len() {
        let c = cs[i];
        if in_str {
            out.push(c);
            if c == '\\' && i + 1 < cs.len() {
                out.push(cs[i + 1]);
                i += 2;
                continue;
            }
            if c == '"' {
                in_str = false;
            }
            i += 1;
        } else if c == '"' {
            in_str = true;
            out.push(c);
            i += 1;
        } else if c == '/' && cs.get(i + 1) == Some(&'/') {
            while i < cs.len() && cs[i] != '\n' {
                out.push(' ');
                i += 1;
            }
        } else if c == '/' && cs.get(i + 1) == Some(&'*') {
            out.push(' ');
            out.push(' ');
            i += 2;
            while i < cs.len() && !(cs[i] == '*' && cs.get(i + 1) == Some(&'/')) {
                out.push(if cs[i] == '\n' { '\n' } else { ' ' });
                i += 1;
            }
            if i < cs.len() {
                out.push(' ');
                out.push(' ');
                i += 2;
            }
        } else {
            out.push(c);
            i += 1;
        }
    }
    // Trailing commas out.
    let mut in_str = false;
    let mut escaped = false;
    for i in 0..out.len() {
        let c = out[i];
        if in_str {
            if escaped {
                escaped = false;
            } else if c == '\\' {
                escaped = true;
            } else if c == '"' {
                in_str = false;
            }
            continue;
        }
        if c == '"' {
            in_str = true;
        } else if c == ',' {
            let next = out[i + 1..].iter().find(|c| !c.is_whitespace());
            if matches!(next, Some('}') | Some(']')) {
                out[i] = ' ';
            }
        }
    }
    out.into_iter().collect()
}

/// Line and column (from 1) of a byte offset.
pub(super) fn line_column(text: &str, offset: usize) -> (usize, usize) {
    let mut end = offset.min(text.len());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    let before = &text[..end];
    let line = before.matches('\n').count() + 1;
    let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    (line, column)
}

pub(super) fn parse_toml(text: &str, file: &str) -> Result<Value, ImportError> {
    let table: toml::Table = toml::from_str(text).map_err(|e| {
        let (line, column) = e
            .span()
            .map(|s| line_column(text, s.start))
            .unwrap_or((1, 1));
        ImportError::Parse {
            file: file.to_owned(),
            syntax: "TOML",
            line,
            column,
            // The message alone: the error's display quotes the line, which may hold a secret.
            message: e.message().trim().to_owned(),
        }
    })?;
    serde_json::to_value(table).map_err(|e| ImportError::Shape {
        file: file.to_owned(),
        message: format!("cannot read its values: {e}"),
    })
}

pub(super) fn parse_json(text: &str, file: &str) -> Result<Value, ImportError> {
    serde_json::from_str(&strip_jsonc(text)).map_err(|e| {
        let full = e.to_string();
        let suffix = format!(" at line {} column {}", e.line(), e.column());
        ImportError::Parse {
            file: file.to_owned(),
            syntax: "JSON",
            line: e.line(),
            column: e.column(),
            message: full.strip_suffix(&suffix).unwrap_or(&full).to_owned(),
        }
    })
}

pub(super) fn file_name_of(p: &Path) -> &str {
    p.file_name().and_then(|n| n.to_str()).unwrap_or("")
}

/// The workspace folder of a file in `<workspace>/.vscode/` or `<workspace>/.cursor/`, when
/// its path is absolute.
pub(super) fn workspace_of(file: &Path) -> Option<&Path> {
    let dir = file.parent()?;
    let name = file_name_of(dir);
    if name != ".vscode" && name != ".cursor" {
        return None;
    }
    dir.parent().filter(|w| w.is_absolute())
}

pub(super) fn keys_found(root: &Value) -> String {
    match root.as_object() {
        Some(m) if m.is_empty() => "an empty object".into(),
        Some(m) => {
            let mut keys: Vec<String> = m.keys().take(8).map(|k| format!("`{k}`")).collect();
            if m.len() > 8 {
                keys.push("...".into());
            }
            format!("keys {}", keys.join(", "))
        }
        None => "no object at the top".into(),
    }
}
