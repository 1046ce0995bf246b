//! Answering a server's `elicitation/create` without a person: the policy the client core is
//! given ([`Elicitation`]), the `elicitation` client capability it declares, and the
//! `ElicitResult` it answers with, for a 2025-era server request and for a 2026-07-28
//! `input_required` result's `inputRequests` alike.
//!
//! Only `albedo-mcp conformance-client` turns it on ([`Elicitation::AcceptDefaults`]); the
//! daemon keeps [`Elicitation::Undeclared`]: no capability, `Method not found`, and an
//! `input_required` that asks for input is refused by its caller.
//!
//! Owns: the policy and the answer's shape. Must not touch: the transport, the pending
//! requests, anything beyond the request's params it is given.

use serde_json::{json, Map, Value};

/// How the client answers a server that asks the user for input.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Elicitation {
    /// No `elicitation` capability (the daemon's client): `initialize` and the 2026-07-28
    /// `_meta` declare `{}`, a server's `elicitation/create` gets `Method not found`, and an
    /// `input_required` result that carries `inputRequests` is returned for the caller to
    /// refuse.
    #[default]
    Undeclared,
    /// `elicitation: {form: {}}` declared; a form-mode request is accepted with each
    /// property's `default` from its `requestedSchema` (a property without one is left out);
    /// a URL-mode request, a schema it cannot read, a required property without a default or
    /// a default that is no form value (string, number, boolean, list of strings) is declined.
    AcceptDefaults,
}

impl Elicitation {
    /// Whether the `elicitation` capability is declared.
    pub fn declared(self) -> bool {
        self != Elicitation::Undeclared
    }

    /// The client capabilities to declare, in `initialize` and in the 2026-07-28
    /// `io.modelcontextprotocol/clientCapabilities`.
    pub fn capabilities(self) -> Value {
        match self {
            Elicitation::Undeclared => json!({}),
            Elicitation::AcceptDefaults => json!({"elicitation": {"form": {}}}),
        }
    }

    /// [`Self::capabilities`] as the compact JSON text written into every 2026-07-28
    /// request's `_meta` (no tree built per request).
    pub fn capabilities_json(self) -> &'static [u8] {
        match self {
            Elicitation::Undeclared => b"{}",
            Elicitation::AcceptDefaults => br#"{"elicitation":{"form":{}}}"#,
        }
    }

    /// The `ElicitResult` for an `elicitation/create` request with these params; `None` when
    /// the capability is not declared (the request is not answered with a result).
    pub fn answer(self, params: Option<&Value>) -> Option<Value> {
        match self {
            Elicitation::Undeclared => None,
            Elicitation::AcceptDefaults => Some(match form_defaults(params) {
                Some(content) => json!({"action": "accept", "content": content}),
                None => json!({"action": "decline"}),
            }),
        }
    }
}

/// The content a form filled in with its defaults; `None` when the request is not a form
/// mode one this policy can fill in (then it is declined).
fn form_defaults(params: Option<&Value>) -> Option<Map<String, Value>> {
    let params = params?.as_object()?;
    match params.get("mode") {
        None | Some(Value::Null) => {}
        Some(Value::String(m)) if m == "form" => {}
        // `url`, or a mode this client does not know.
        Some(_) => return None,
    }
    let schema = params.get("requestedSchema")?.as_object()?;
    match schema.get("type") {
        Some(Value::String(t)) if t == "object" => {}
        None => {}
        Some(_) => return None,
    }
    let properties = schema.get("properties")?.as_object()?;
    let required: Vec<&str> = match schema.get("required") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(a)) => a.iter().map(Value::as_str).collect::<Option<_>>()?,
        Some(_) => return None,
    };
    let mut content = Map::new();
    for (name, prop) in properties {
        match prop.as_object()?.get("default") {
            Some(d) if form_value(d) => {
                content.insert(name.clone(), d.clone());
            }
            Some(_) => return None,
            None if required.contains(&name.as_str()) => return None,
            None => {}
        }
    }
    // A required name the schema does not describe cannot be filled in either.
    if required.iter().any(|r| !properties.contains_key(*r)) {
        return None;
    }
    Some(content)
}

/// Whether a value may stand in an `ElicitResult`'s content: a string, a number, a boolean or
/// a list of strings.
fn form_value(v: &Value) -> bool {
    match v {
        Value::String(_) | Value::Number(_) | Value::Bool(_) => true,
        Value::Array(a) => a.iter().all(Value::is_string),
        Value::Null | Value::Object(_) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn accept(params: Value) -> Option<Value> {
        Elicitation::AcceptDefaults.answer(Some(&params))
    }

    #[test]
    fn a_form_is_accepted_with_every_default_and_nothing_else() {
        // The SEP-1034 form of the stable runner's scenario, plus one property without a default.
        let params = json!({"message": "accept with defaults", "requestedSchema": {
            "type": "object", "properties": {
                "name": {"type": "string", "default": "John Doe"},
                "age": {"type": "integer", "default": 30},
                "score": {"type": "number", "default": 95.5},
                "status": {"type": "string", "enum": ["active", "inactive"], "default": "active"},
                "verified": {"type": "boolean", "default": true},
                "colours": {"type": "array", "items": {"type": "string", "enum": ["r", "g"]},
                    "default": ["r", "g"]},
                "nickname": {"type": "string"}},
            "required": []}});
        assert_eq!(
            accept(params.clone()),
            Some(
                json!({"action": "accept", "content": {"name": "John Doe", "age": 30,
                "score": 95.5, "status": "active", "verified": true, "colours": ["r", "g"]}})
            )
        );
        // `mode: form` said out loud is the same; a form with no defaults is accepted empty.
        let mut form = params;
        form["mode"] = json!("form");
        assert_eq!(accept(form).unwrap()["action"], "accept");
        assert_eq!(
            accept(
                json!({"message": "confirm?", "requestedSchema": {"type": "object",
                "properties": {"confirmed": {"type": "boolean"}}}})
            ),
            Some(json!({"action": "accept", "content": {}}))
        );
    }

    #[test]
    fn url_mode_and_forms_it_cannot_fill_in_are_declined() {
        let decline = Some(json!({"action": "decline"}));
        let schema = |s: Value| json!({"message": "m", "requestedSchema": s});
        for params in [
            json!({"mode": "url", "message": "m", "url": "https://example.com/x",
                "elicitationId": "e"}),
            json!({"mode": "telepathy", "message": "m", "requestedSchema": {"type": "object",
                "properties": {}}}),
            json!({"message": "no schema"}),
            json!("not an object"),
            schema(json!({"type": "string"})),
            schema(json!({"type": "object"})),
            schema(json!({"type": "object", "properties": {"a": "not a schema"}})),
            // A required property without a default: accepting would leave it out.
            schema(
                json!({"type": "object", "properties": {"a": {"type": "string"}},
                "required": ["a"]}),
            ),
            schema(json!({"type": "object", "properties": {}, "required": ["ghost"]})),
            schema(json!({"type": "object", "properties": {}, "required": "a"})),
            // Defaults that are no form value.
            schema(json!({"type": "object", "properties": {"a": {"default": {"x": 1}}}})),
            schema(json!({"type": "object", "properties": {"a": {"default": null}}})),
            schema(json!({"type": "object", "properties": {"a": {"default": [1]}}})),
        ] {
            assert_eq!(accept(params.clone()), decline, "{params}");
        }
        assert_eq!(Elicitation::AcceptDefaults.answer(None), decline);
    }

    #[test]
    fn undeclared_answers_nothing_and_declares_nothing() {
        let e = Elicitation::default();
        assert_eq!(e, Elicitation::Undeclared);
        assert!(!e.declared());
        assert_eq!(e.capabilities(), json!({}));
        assert_eq!(e.answer(Some(&json!({"requestedSchema": {}}))), None);
        assert_eq!(
            Elicitation::AcceptDefaults.capabilities(),
            json!({"elicitation": {"form": {}}})
        );
        for e in [Elicitation::Undeclared, Elicitation::AcceptDefaults] {
            let text: Value = serde_json::from_slice(e.capabilities_json()).unwrap();
            assert_eq!(text, e.capabilities(), "{e:?}");
        }
    }
}
