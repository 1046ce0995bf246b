//! The `WWW-Authenticate` header of a 401 or 403 (RFC 6750 §3, RFC 9728 §5.1): the `Bearer`
//! (else the `DPoP`, RFC 9449 §7.1) challenge's `resource_metadata`, `scope`, `error` and `error_description`.
//!
//! Owns: parsing the header (several challenges, quoted strings with escapes, any order of
//! parameters, scheme and parameter names in any case). Must not touch: I/O.

/// The longest header parsed; the rest is ignored.
const MAX_HEADER: usize = 16 * 1024;

/// A `Bearer` challenge.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Challenge {
    /// Where the Protected Resource Metadata is (RFC 9728).
    pub resource_metadata: Option<String>,
    /// The scopes the request needs, split on spaces (`None` when the parameter is absent).
    pub scope: Option<Vec<String>>,
    /// `invalid_token`, `insufficient_scope`, ...
    pub error: Option<String>,
    pub error_description: Option<String>,
}

impl Challenge {
    /// The `Bearer` challenge of a `WWW-Authenticate` value, else its `DPoP` one (RFC 9449
    /// §7.1, same parameters), if it has one.
    pub fn parse(header: &str) -> Option<Challenge> {
        let header = cut(header, MAX_HEADER);
        let all = challenges(header);
        let (_, params) = ["bearer", "dpop"].iter().find_map(|want| {
            all.iter()
                .find(|(scheme, _)| scheme.eq_ignore_ascii_case(want))
                .cloned()
        })?;
        let mut c = Challenge::default();
        for (name, value) in params {
            match name.to_ascii_lowercase().as_str() {
                "resource_metadata" if c.resource_metadata.is_none() => {
                    c.resource_metadata = Some(value)
                }
                "scope" if c.scope.is_none() => {
                    c.scope = Some(value.split_whitespace().map(str::to_owned).collect())
                }
                "error" if c.error.is_none() => c.error = Some(value),
                "error_description" if c.error_description.is_none() => {
                    c.error_description = Some(value)
                }
                _ => {}
            }
        }
        Some(c)
    }

    /// A 403 that asks for more scopes (step-up).
    pub fn insufficient_scope(&self) -> bool {
        self.error.as_deref() == Some("insufficient_scope")
    }
}

fn cut(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

fn tchar(c: char) -> bool {
    c.is_ascii_alphanumeric() || "!#$%&'*+-.^_`|~".contains(c)
}

/// Every challenge of the header: its scheme and its `name=value` parameters.
fn challenges(h: &str) -> Vec<(String, Vec<(String, String)>)> {
    let chars: Vec<char> = h.chars().collect();
    let mut out: Vec<(String, Vec<(String, String)>)> = Vec::new();
    let mut i = 0;
    let skip_ws = |i: &mut usize| {
        while *i < chars.len() && (chars[*i] == ' ' || chars[*i] == '\t') {
            *i += 1;
        }
    };
    while i < chars.len() {
        while i < chars.len() && (chars[i] == ',' || chars[i] == ' ' || chars[i] == '\t') {
            i += 1;
        }
        let start = i;
        while i < chars.len() && tchar(chars[i]) {
            i += 1;
        }
        if i == start {
            i += 1; // not a token: skip the character
            continue;
        }
        let token: String = chars[start..i].iter().collect();
        let mut j = i;
        skip_ws(&mut j);
        if j < chars.len() && chars[j] == '=' {
            // A parameter of the current challenge (or token68 padding, harmless).
            j += 1;
            skip_ws(&mut j);
            let mut value = String::new();
            if j < chars.len() && chars[j] == '"' {
                j += 1;
                while j < chars.len() && chars[j] != '"' {
                    if chars[j] == '\\' && j + 1 < chars.len() {
                        j += 1;
                    }
                    value.push(chars[j]);
                    j += 1;
                }
                j += 1; // the closing quote
            } else {
                while j < chars.len() && chars[j] != ',' && chars[j] != ' ' && chars[j] != '\t' {
                    value.push(chars[j]);
                    j += 1;
                }
            }
            if let Some((_, params)) = out.last_mut() {
                params.push((token, value));
            }
            i = j;
        } else {
            out.push((token, Vec::new()));
            i = j;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bearer_challenge_with_every_parameter() {
        let c = Challenge::parse(
            r#"Bearer resource_metadata="https://mcp.example.com/.well-known/oauth-protected-resource", scope="files:read files:write", error="insufficient_scope", error_description="needs \"write\"""#,
        )
        .unwrap();
        assert_eq!(
            c.resource_metadata.as_deref(),
            Some("https://mcp.example.com/.well-known/oauth-protected-resource")
        );
        assert_eq!(
            c.scope,
            Some(vec!["files:read".to_owned(), "files:write".to_owned()])
        );
        assert!(c.insufficient_scope());
        assert_eq!(c.error_description.as_deref(), Some("needs \"write\""));
    }

    #[test]
    fn a_dpop_challenge_is_read_when_there_is_no_bearer_one() {
        let c = Challenge::parse(r#"DPoP resource_metadata="http://a/prm", algs="ES256""#).unwrap();
        assert_eq!(c.resource_metadata.as_deref(), Some("http://a/prm"));
        let c = Challenge::parse(r#"DPoP resource_metadata="http://d", Bearer scope="s""#).unwrap();
        assert_eq!(c.scope, Some(vec!["s".to_owned()]), "Bearer first");
        assert!(Challenge::parse(r#"Basic realm="x""#).is_none());
    }

    #[test]
    fn the_bearer_challenge_among_others_and_in_any_case() {
        let c = Challenge::parse(
            r#"Basic realm="x", bearer scope=mcp:basic,resource_metadata="http://a/b", DPoP algs="ES256""#,
        )
        .unwrap();
        assert_eq!(c.scope, Some(vec!["mcp:basic".to_owned()]));
        assert_eq!(c.resource_metadata.as_deref(), Some("http://a/b"));
        assert!(!c.insufficient_scope());
        assert_eq!(Challenge::parse("Bearer"), Some(Challenge::default()));
        assert_eq!(Challenge::parse(r#"Basic realm="x""#), None);
        assert_eq!(Challenge::parse(""), None);
    }

    #[test]
    fn garbage_does_not_panic() {
        for h in [
            "Bearer =",
            "Bearer a=\"unterminated",
            "\"\"\",,,=",
            "Bearer a=b=c",
        ] {
            let _ = Challenge::parse(h);
        }
        let long = format!("Bearer scope=\"{}\"", "é".repeat(20_000));
        assert!(Challenge::parse(&long).is_some());
    }
}
