//! The add/edit form: its fields (stdio or HTTP), the focused one, the text typed in each,
//! how a secret field is shown (masked), and the settings patch the form saves as.
//!
//! Owns: a form's state and its patch. Must not touch: the screen (app.rs), the daemon.

use super::app::Req;
use serde_json::{json, Map, Value};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Field {
    Transport,
    Target,
    Name,
    Bearer,
    HeaderName,
    HeaderValue,
    Env,
}

impl Field {
    pub fn label(self, http: bool) -> &'static str {
        match self {
            Field::Transport => "transport",
            Field::Target if http => "url",
            Field::Target => "command",
            Field::Name => "name",
            Field::Bearer => "bearer token",
            Field::HeaderName => "header name",
            Field::HeaderValue => "header value",
            Field::Env => "env KEY=value",
        }
    }
    /// Typed text shown as dots.
    pub fn secret(self) -> bool {
        matches!(self, Field::Bearer | Field::HeaderValue | Field::Env)
    }
}

#[derive(Debug, Clone, Default)]
pub struct Form {
    /// Editing this server (the name is fixed), else a new one.
    pub editing: Option<String>,
    pub http: bool,
    pub target: String,
    pub name: String,
    pub name_edited: bool,
    pub bearer: String,
    pub header_name: String,
    pub header_value: String,
    pub env: String,
    pub focus: usize,
    pub saving: bool,
    pub error: Option<String>,
    /// Saved, and the server asks for a sign-in (ctrl+l).
    pub needs_sign_in: bool,
    pub suggest_gen: u64,
    /// A suggestion is asked for (one at a time: a newer text is asked for when it answers).
    pub suggesting: bool,
    /// Saved while the name was still being suggested: saved once it is.
    pub save_pending: bool,
    /// Why no name could be suggested for the URL or command as it is (the daemon's error:
    /// an unbalanced quote, a URL it cannot read).
    pub suggest_error: Option<String>,
}

impl Form {
    pub fn fields(&self) -> Vec<Field> {
        let mut f = vec![Field::Transport, Field::Target, Field::Name];
        if self.http {
            f.extend([Field::Bearer, Field::HeaderName, Field::HeaderValue]);
        } else {
            f.push(Field::Env);
        }
        f
    }
    pub fn focused(&self) -> Field {
        let f = self.fields();
        f[self.focus.min(f.len() - 1)]
    }
    pub fn value(&self, f: Field) -> String {
        match f {
            Field::Transport => if self.http { "http" } else { "stdio" }.to_owned(),
            Field::Target => self.target.clone(),
            Field::Name => self.name.clone(),
            Field::Bearer => self.bearer.clone(),
            Field::HeaderName => self.header_name.clone(),
            Field::HeaderValue => self.header_value.clone(),
            Field::Env => self.env.clone(),
        }
    }
    pub(super) fn text_mut(&mut self, f: Field) -> Option<&mut String> {
        match f {
            Field::Transport => None,
            Field::Target => Some(&mut self.target),
            Field::Name => {
                if self.editing.is_some() {
                    None
                } else {
                    Some(&mut self.name)
                }
            }
            Field::Bearer => Some(&mut self.bearer),
            Field::HeaderName => Some(&mut self.header_name),
            Field::HeaderValue => Some(&mut self.header_value),
            Field::Env => Some(&mut self.env),
        }
    }

    /// Ask for a name for the URL or command as it is now.
    pub(super) fn suggest(&mut self) -> Vec<Req> {
        let value = self.target.trim().to_owned();
        if value.is_empty() || self.name_edited || self.editing.is_some() {
            return vec![];
        }
        self.suggesting = true;
        vec![Req::Suggest {
            gen: self.suggest_gen,
            key: if self.http { "url" } else { "command_line" },
            value,
        }]
    }

    /// The PATCH body, or what is wrong with the form.
    pub fn patch(&self) -> Result<(String, Value), String> {
        let name = self.name.trim().to_owned();
        if name.is_empty() {
            return Err("give the server a name".into());
        }
        let target = self.target.trim();
        if target.is_empty() {
            return Err(if self.http {
                "give the server's URL".into()
            } else {
                "give the command to run".into()
            });
        }
        let server = if self.http {
            json!({"type": "http", "url": target})
        } else {
            json!({"type": "stdio", "command_line": target})
        };
        let mut secrets = Map::new();
        if self.http {
            let b = self.bearer.trim();
            if !b.is_empty() {
                secrets.insert("bearer_token".into(), json!(b));
            }
            let (hn, hv) = (self.header_name.trim(), self.header_value.trim());
            if hv == "-" {
                secrets.insert("header".into(), json!("-"));
            } else if !hn.is_empty() || !hv.is_empty() {
                if hn.is_empty() || hv.is_empty() {
                    return Err("a header needs both a name and a value".into());
                }
                secrets.insert("header".into(), json!({"name": hn, "value": hv}));
            }
        } else {
            let mut env = Map::new();
            for entry in self.env.split_whitespace() {
                match entry.split_once('=') {
                    Some((k, v)) if !k.is_empty() => {
                        env.insert(k.to_owned(), json!(v));
                    }
                    _ => {
                        return Err(format!(
                            "env entries are KEY=value, separated by spaces (entry {})",
                            env.len() + 1
                        ))
                    }
                }
            }
            if !env.is_empty() {
                secrets.insert("env".into(), Value::Object(env));
            }
        }
        let mut body = json!({"servers": {name.clone(): server}});
        if !secrets.is_empty() {
            body["secrets"] = json!({name.clone(): secrets});
        }
        Ok((name, body))
    }
}

/// A secret field's text as shown: every character a dot; for env entries the values only.
pub fn masked(field: Field, text: &str) -> String {
    match field {
        Field::Env => {
            let mut out = String::new();
            let mut in_value = false;
            for c in text.chars() {
                if c.is_whitespace() {
                    in_value = false;
                    out.push(c);
                } else if in_value {
                    out.push('•');
                } else {
                    if c == '=' {
                        in_value = true;
                    }
                    out.push(c);
                }
            }
            out
        }
        f if f.secret() => "•".repeat(text.chars().count()),
        _ => text.to_owned(),
    }
}
