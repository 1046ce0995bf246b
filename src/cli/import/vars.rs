//! Variables in imported values: the `${...}` forms each tool expands ([`Dialect`]), a value
//! read into its pieces, and what a secret-bearing value becomes (a literal secret, a
//! reference to the daemon's environment, or a reason it cannot be carried over).
//!
//! Owns: those readings. Must not touch: the formats' layouts, the patch.

use super::*;

/// Which `${...}` forms a file's tool expands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Dialect {
    /// Claude Code `${VAR}` / `${VAR:-default}`, and Cursor `${env:VAR}`, `${workspaceFolder}`.
    Claude,
    /// VS Code: `${env:VAR}`, `${input:ID}`, `${workspaceFolder}` and its other predefined
    /// variables.
    VsCode,
    /// Codex: values are literal.
    Literal,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Piece {
    Text(String),
    Env {
        name: String,
        default: bool,
    },
    Input(String),
    Workspace,
    /// A variable albedo cannot resolve (`${userHome}`, `${command:...}`): its inside.
    Other(String),
}

pub(super) fn is_var_name(s: &str) -> bool {
    let mut b = s.bytes();
    matches!(b.next(), Some(c) if c.is_ascii_alphabetic() || c == b'_')
        && b.all(|c| c.is_ascii_alphanumeric() || c == b'_')
}

pub(super) fn pieces(s: &str, dialect: Dialect) -> Vec<Piece> {
    if dialect == Dialect::Literal {
        return vec![Piece::Text(s.to_owned())];
    }
    let mut out = Vec::new();
    let mut text = String::new();
    let mut rest = s;
    while let Some(i) = rest.find("${") {
        let Some(j) = rest[i + 2..].find('}') else {
            break;
        };
        text.push_str(&rest[..i]);
        let inner = &rest[i + 2..i + 2 + j];
        rest = &rest[i + 3 + j..];
        if !text.is_empty() {
            out.push(Piece::Text(std::mem::take(&mut text)));
        }
        let piece = if let Some(v) = inner.strip_prefix("env:") {
            Piece::Env {
                name: v.to_owned(),
                default: false,
            }
        } else if inner == "workspaceFolder" {
            Piece::Workspace
        } else if let (Dialect::VsCode, Some(id)) = (dialect, inner.strip_prefix("input:")) {
            Piece::Input(id.to_owned())
        } else if dialect == Dialect::Claude {
            let (name, default) = match inner.split_once(":-") {
                Some((n, _)) => (n, true),
                None => (inner, false),
            };
            let predefined = ["userHome", "workspaceFolderBasename", "pathSeparator"];
            if is_var_name(name) && !predefined.contains(&name) {
                Piece::Env {
                    name: name.to_owned(),
                    default,
                }
            } else {
                Piece::Other(inner.to_owned())
            }
        } else {
            Piece::Other(inner.to_owned())
        };
        out.push(piece);
    }
    text.push_str(rest);
    if !text.is_empty() || out.is_empty() {
        out.push(Piece::Text(text));
    }
    out
}

/// What an imported file knows beyond each server: its variables' context.
pub(super) struct Ctx<'a> {
    pub(super) dialect: Dialect,
    /// The workspace folder (`${workspaceFolder}`), when the file sits in one's `.vscode` or
    /// `.cursor` folder.
    pub(super) workspace: Option<&'a Path>,
    /// VS Code inputs: id → description.
    pub(super) inputs: &'a BTreeMap<String, String>,
}

impl Ctx<'_> {
    pub(super) fn input(&self, id: &str) -> String {
        match self.inputs.get(id) {
            Some(d) => format!("VS Code's input {d:?} (${{input:{id}}})"),
            None => format!("the VS Code input ${{input:{id}}}"),
        }
    }

    /// A plain field (command, argument, cwd, URL): text, with `${workspaceFolder}` resolved;
    /// any other variable is a reason to skip the server.
    pub(super) fn plain(&self, field: &str, s: &str) -> Result<String, String> {
        let mut out = String::new();
        for p in pieces(s, self.dialect) {
            match p {
                Piece::Text(t) => out.push_str(&t),
                Piece::Workspace => match self.workspace {
                    Some(w) => out.push_str(&w.to_string_lossy()),
                    None => {
                        return Err(format!(
                            "`{field}` uses ${{workspaceFolder}}, and the workspace is not known \
                             (import the file from its project's .vscode or .cursor folder)"
                        ))
                    }
                },
                Piece::Env { name, .. } => {
                    return Err(format!(
                        "`{field}` uses the variable {name}: albedo-mcp does not expand \
                         variables in command, args, cwd or url"
                    ))
                }
                Piece::Input(id) => {
                    return Err(format!(
                        "`{field}` asks {}, which cannot be answered here",
                        self.input(&id)
                    ))
                }
                Piece::Other(v) => {
                    return Err(format!(
                        "`{field}` uses ${{{v}}}, which albedo-mcp cannot resolve"
                    ))
                }
            }
        }
        Ok(out)
    }

    /// A value that may be a secret (an `env` value, a header).
    pub(super) fn secret(&self, s: &str) -> Class {
        let ps = pieces(s, self.dialect);
        if let Some(id) = ps.iter().find_map(|p| match p {
            Piece::Input(id) => Some(id),
            _ => None,
        }) {
            return Class::Unresolved(format!(
                "it asks {}, which cannot be answered here; set it in the web pane after the \
                 import",
                self.input(id)
            ));
        }
        if let [Piece::Env { name, default }] = ps.as_slice() {
            return reference(name, *default);
        }
        let mut out = String::new();
        for p in &ps {
            match p {
                Piece::Text(t) => out.push_str(t),
                Piece::Workspace if self.workspace.is_some() => {
                    out.push_str(&self.workspace.unwrap_or(Path::new("")).to_string_lossy())
                }
                Piece::Workspace => {
                    return Class::Unresolved(
                        "it uses ${workspaceFolder}, and the workspace is not known".into(),
                    )
                }
                Piece::Env { .. } => {
                    return Class::Unresolved(
                        "it mixes text with a variable, which albedo-mcp cannot store: put the \
                         whole value in one variable"
                            .into(),
                    )
                }
                Piece::Input(_) => {}
                Piece::Other(v) => {
                    return Class::Unresolved(format!(
                        "it uses ${{{v}}}, which albedo-mcp cannot resolve"
                    ))
                }
            }
        }
        Class::Literal(out)
    }
}

/// A reference to the daemon's variable `var`, when it is a name the settings accept.
pub(super) fn reference(var: &str, default: bool) -> Class {
    if valid_env_name(var) {
        Class::Ref {
            var: var.to_owned(),
            default,
        }
    } else {
        Class::Unresolved(format!(
            "it names the variable {var:?}, which is not a variable name (letters, digits and \
             `_`, not starting with a digit)"
        ))
    }
}

/// A secret-bearing value, read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Class {
    /// A literal: a secret to store.
    Literal(String),
    /// Exactly one variable (`default`: it had a `:-default`, which albedo does not use).
    Ref { var: String, default: bool },
    /// Cannot be carried over: why.
    Unresolved(String),
}
