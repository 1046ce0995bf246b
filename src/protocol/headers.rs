//! Header encodings of the 2026-07-28 Streamable HTTP transport: `Mcp-Name` and
//! `Mcp-Param-<Name>` values, and the `x-mcp-header` tool-parameter annotation rules.

use awc::http::header::HeaderName;
use base64::Engine;
use serde_json::Value;

/// The 2026-07-28 request headers, as header names made once (HTTP/1 sends names in lower
/// case either way).
pub const PROTOCOL_VERSION: HeaderName = HeaderName::from_static("mcp-protocol-version");
pub const METHOD: HeaderName = HeaderName::from_static("mcp-method");
pub const NAME: HeaderName = HeaderName::from_static("mcp-name");

const B64_PREFIX: &str = "=?base64?";
const B64_SUFFIX: &str = "?=";

/// Encode a header value: as-is when it is plain visible ASCII (spaces allowed inside),
/// otherwise (or when it looks like the base64 marker) `=?base64?...?=`.
pub fn encode_value(v: &str) -> String {
    let visible = v.bytes().all(|b| (0x20..0x7f).contains(&b));
    let padded = v.starts_with(' ') || v.ends_with(' ');
    let marker = v.starts_with(B64_PREFIX) && v.ends_with(B64_SUFFIX);
    let plain = visible && !padded && !marker;
    if plain {
        v.to_owned()
    } else {
        format!(
            "{B64_PREFIX}{}{B64_SUFFIX}",
            base64::engine::general_purpose::STANDARD.encode(v.as_bytes())
        )
    }
}

/// A JSON argument rendered for a `Mcp-Param-*` header: strings as-is, integers in decimal,
/// booleans lower-case. `None` for null or absent values (the header is omitted).
pub fn param_value(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(encode_value(s)),
        Value::Bool(b) => Some(b.to_string()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

/// One `x-mcp-header` annotation: the header suffix and the property path it mirrors.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ParamHeader {
    pub name: String,
    pub path: Vec<String>,
}

fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// Collect a tool's `x-mcp-header` annotations, checking the spec's rules. An error names the
/// broken rule; the caller leaves such a tool out of an HTTP server's catalogue.
pub fn param_headers(input_schema: &Value) -> Result<Vec<ParamHeader>, String> {
    let mut out: Vec<ParamHeader> = Vec::new();
    walk(input_schema, &mut Vec::new(), true, &mut out)?;
    let mut seen = std::collections::HashSet::new();
    for h in &out {
        if !seen.insert(h.name.to_ascii_lowercase()) {
            return Err(format!(
                "x-mcp-header {:?} is used more than once (names must be unique, case-insensitively)",
                h.name
            ));
        }
    }
    Ok(out)
}

fn walk(
    schema: &Value,
    path: &mut Vec<String>,
    reachable: bool,
    out: &mut Vec<ParamHeader>,
) -> Result<(), String> {
    let Some(obj) = schema.as_object() else {
        return Ok(());
    };
    if let Some(h) = obj.get("x-mcp-header") {
        if !reachable || path.is_empty() {
            return Err(format!(
                "x-mcp-header at {} is not on a property reached through `properties` alone",
                display_path(path)
            ));
        }
        let name = h
            .as_str()
            .ok_or_else(|| format!("x-mcp-header at {} is not a string", display_path(path)))?;
        if name.is_empty() || !name.bytes().all(is_tchar) {
            return Err(format!(
                "x-mcp-header {name:?} at {} is not an HTTP token",
                display_path(path)
            ));
        }
        let ty = obj.get("type").and_then(Value::as_str);
        if !matches!(ty, Some("string") | Some("integer") | Some("boolean")) {
            return Err(format!(
                "x-mcp-header {name:?} at {} is not on a string, integer or boolean property",
                display_path(path)
            ));
        }
        out.push(ParamHeader {
            name: name.to_owned(),
            path: path.clone(),
        });
    }
    for (key, sub) in obj {
        match key.as_str() {
            "properties" => {
                if let Some(props) = sub.as_object() {
                    for (pname, pschema) in props {
                        path.push(pname.clone());
                        let r = walk(pschema, path, reachable, out);
                        path.pop();
                        r?;
                    }
                }
            }
            "x-mcp-header" | "const" | "default" | "enum" | "examples" => {}
            _ => match sub {
                Value::Object(_) => walk(sub, path, false, out)?,
                Value::Array(items) => {
                    for it in items {
                        walk(it, path, false, out)?;
                    }
                }
                _ => {}
            },
        }
    }
    Ok(())
}

fn display_path(path: &[String]) -> String {
    if path.is_empty() {
        "the schema root".to_owned()
    } else {
        format!("`{}`", path.join("."))
    }
}

/// The argument at a property path, if present.
pub fn extract<'a>(arguments: &'a Value, path: &[String]) -> Option<&'a Value> {
    let mut cur = arguments;
    for p in path {
        cur = cur.get(p)?;
    }
    Some(cur)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn encodes_values_as_the_spec_says() {
        assert_eq!(encode_value("us-west1"), "us-west1");
        assert_eq!(
            encode_value("Hello, 世界"),
            "=?base64?SGVsbG8sIOS4lueVjA==?="
        );
        assert_eq!(encode_value(" padded "), "=?base64?IHBhZGRlZCA=?=");
        assert_eq!(encode_value("a\nb"), "=?base64?YQpi?=");
        assert_eq!(encode_value("=?base64?x?="), "=?base64?PT9iYXNlNjQ/eD89?=");
        assert_eq!(param_value(&json!(42)), Some("42".into()));
        assert_eq!(param_value(&json!(true)), Some("true".into()));
        assert_eq!(param_value(&json!(null)), None);
    }

    #[test]
    fn validates_annotations() {
        let ok = json!({"type":"object","properties":{
            "region":{"type":"string","x-mcp-header":"Region"},
            "opts":{"type":"object","properties":{"n":{"type":"integer","x-mcp-header":"N"}}}}});
        let hs = param_headers(&ok).unwrap();
        assert_eq!(hs.len(), 2);
        assert!(hs.contains(&ParamHeader {
            name: "N".into(),
            path: vec!["opts".into(), "n".into()]
        }));
        let number =
            json!({"type":"object","properties":{"x":{"type":"number","x-mcp-header":"X"}}});
        assert!(param_headers(&number).is_err());
        let dup = json!({"type":"object","properties":{
            "a":{"type":"string","x-mcp-header":"A"},"b":{"type":"string","x-mcp-header":"a"}}});
        assert!(param_headers(&dup).is_err());
        let items = json!({"type":"object","properties":{"a":{"type":"array","items":{"type":"string","x-mcp-header":"A"}}}});
        assert!(param_headers(&items).is_err());
        let bad_token =
            json!({"type":"object","properties":{"a":{"type":"string","x-mcp-header":"A B"}}});
        assert!(param_headers(&bad_token).is_err());
        let empty = json!({"type":"object","properties":{"a":{"type":"string","x-mcp-header":""}}});
        assert!(param_headers(&empty).is_err());
    }
}
