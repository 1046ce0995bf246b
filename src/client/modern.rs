//! The 2026-07-28 era's side of a request: its params as they go out ([`ModernParams`]: the
//! caller's params with the protocol version, client info and capabilities in `_meta`), the
//! version to send it again as after a `-32022` refusal, and the next round of a request the
//! server answered `input_required` (MRTR: [`continuation`], at most [`MAX_INPUT_ROUNDS`]).
//!
//! Owns: those rules, as pure functions of a result or an error. Must not touch: the pending
//! requests, transports (the client in `mod.rs` sends what these say).

use super::Elicitation;
use crate::protocol::era::{self, ProtocolVersion};
use crate::protocol::json_write::{self, WriteJson};
use crate::protocol::jsonrpc::ErrorObject;
use crate::protocol::model::result_type;
use crate::protocol::params::Params;
use serde_json::Value;

/// The requests a 2026-07-28 server may answer with `input_required` (MRTR).
pub(super) const MRTR_METHODS: [&str; 3] = ["tools/call", "resources/read", "prompts/get"];

/// How many times in a row a request is sent again for an `input_required` result (one that
/// carries only `requestState`, or one whose `inputRequests` the elicitation policy answered);
/// the answer to the last of them must be something else.
pub const MAX_INPUT_ROUNDS: usize = 8;

/// What the next round of a request answered `input_required` carries (MRTR): the
/// `requestState` to echo, if the server gave one, and the `inputResponses`, if it asked for
/// input.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Continuation {
    pub(super) state: Option<String>,
    pub(super) responses: Option<Value>,
}

/// The next round for an `input_required` result: one that asks for nothing but its
/// `requestState` back (no `inputRequests`, or an empty map), or, with an elicitation policy,
/// one whose `inputRequests` are all `elicitation/create` (answered by the policy). `None` for
/// any other result (complete, or asking for input while no policy is set: the caller refuses
/// it); an error for an `input_required` result that breaks the spec's shape, or that asks a
/// client with a policy for something else (sampling, roots), which it cannot give.
pub(super) fn continuation(
    result: &Value,
    elicitation: Elicitation,
) -> Result<Option<Continuation>, String> {
    if result_type(result) != "input_required" {
        return Ok(None);
    }
    let asks = match result.get("inputRequests") {
        None | Some(Value::Null) => None,
        Some(Value::Object(m)) if m.is_empty() => None,
        Some(other) => Some(other),
    };
    let state = || match result.get("requestState") {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(_) => Err("the requestState of an input_required result is not a string".to_owned()),
    };
    let Some(asks) = asks else {
        return match state()? {
            Some(s) => Ok(Some(Continuation {
                state: Some(s),
                responses: None,
            })),
            None => {
                Err("an input_required result with neither inputRequests nor requestState".into())
            }
        };
    };
    if !elicitation.declared() {
        return Ok(None);
    }
    let Some(asks) = asks.as_object() else {
        return Err("the inputRequests of an input_required result is not an object".into());
    };
    let state = state()?;
    let mut responses = serde_json::Map::new();
    let mut refused: Vec<String> = Vec::new();
    for (key, request) in asks {
        let method = request.get("method").and_then(Value::as_str);
        let answer = match method {
            Some("elicitation/create") => elicitation.answer(request.get("params")),
            _ => None,
        };
        match answer {
            Some(a) => {
                responses.insert(key.clone(), a);
            }
            None => refused.push(format!(
                "{} ({})",
                shown(key),
                method.map(shown).unwrap_or_else(|| "no method".into())
            )),
        }
    }
    if let Some(first) = refused.first() {
        return Err(format!(
            "the server asks for input albedo cannot give ({} of {} input requests; the first: \
             {first}); albedo answers only elicitation/create",
            refused.len(),
            asks.len()
        ));
    }
    Ok(Some(Continuation {
        state,
        responses: Some(Value::Object(responses)),
    }))
}

/// The longest part of a server-chosen name (an input request's key or method) shown in an
/// error.
const SHOWN_NAME_CHARS: usize = 64;

/// A server-chosen name as an error shows it: quoted, without the characters albedo never
/// shows from a server ([`crate::protocol::text::unsafe_char`]), cut to 64 characters.
fn shown(name: &str) -> String {
    let cut: String = name
        .chars()
        .filter(|&c| !crate::protocol::text::unsafe_char(c))
        .take(SHOWN_NAME_CHARS)
        .collect();
    format!("{cut:?}")
}

/// The version to send a request again as, after a modern server refused it with `-32022`:
/// one the server named that albedo speaks without a handshake (2026-07-28); `None` when
/// the server named none (versions only `initialize` opens cannot be switched to mid-way).
pub(super) fn modern_retry_version(e: &ErrorObject) -> Option<ProtocolVersion> {
    match era::classify_named(&e.supported_versions()) {
        era::Named::Modern => Some(ProtocolVersion::modern()),
        _ => None,
    }
}

const META_PROTOCOL_VERSION: &str = "io.modelcontextprotocol/protocolVersion";
const META_CLIENT_INFO: &str = "io.modelcontextprotocol/clientInfo";
const META_CLIENT_CAPABILITIES: &str = "io.modelcontextprotocol/clientCapabilities";

/// The `_meta` text every request carries around the negotiated version, written as it is
/// rather than escaped again on each request (nothing in it needs escaping; a test compares
/// it with the escaped keys and values).
const META_VERSION_KEY: &str = r#""io.modelcontextprotocol/protocolVersion":"#;
const META_CLIENT_ENTRIES: &str = concat!(
    r#","io.modelcontextprotocol/clientInfo":{"name":"albedo-mcp","version":"#,
    "\"",
    env!("CARGO_PKG_VERSION"),
    r#""},"io.modelcontextprotocol/clientCapabilities":"#
);

/// The params of a 2026-07-28 request as they go out: the caller's params (an object; anything
/// else is replaced by one) with the protocol version, client info and client capabilities
/// merged into `_meta`, written straight from the borrowed value. With `request_state` or
/// `input_responses`, the request continues an `input_required` result: the responses go as
/// `inputResponses`, the state is echoed as `requestState`, and the caller's own
/// `requestState` and `inputResponses`, if any, are left out. The client capabilities are
/// those of `elicitation` (`{}` for the daemon).
pub struct ModernParams<'a> {
    pub params: Option<Params<'a>>,
    pub version: &'a str,
    pub request_state: Option<&'a str>,
    pub input_responses: Option<&'a Value>,
    pub elicitation: Elicitation,
}

impl WriteJson for ModernParams<'_> {
    fn write_json(&self, out: &mut Vec<u8>) {
        out.push(b'{');
        let continued = self.request_state.is_some() || self.input_responses.is_some();
        let skip =
            |k: &str| k == "_meta" || (continued && (k == "requestState" || k == "inputResponses"));
        if let Some(p) = &self.params {
            p.write_entries(out, skip);
        }
        if let Some(responses) = self.input_responses {
            json_write::write_entry(out, "inputResponses", responses);
        }
        if let Some(state) = self.request_state {
            json_write::write_str(out, "requestState");
            out.push(b':');
            json_write::write_str(out, state);
            out.push(b',');
        }
        // `_meta`: the caller's own keys, then albedo's (which win).
        out.extend_from_slice(br#""_meta":{"#);
        let caller = self.params.as_ref().and_then(Params::meta);
        let ours = [
            META_PROTOCOL_VERSION,
            META_CLIENT_INFO,
            META_CLIENT_CAPABILITIES,
        ];
        for (k, v) in caller.into_iter().flatten() {
            if !ours.contains(&k.as_str()) {
                json_write::write_entry(out, k, v);
            }
        }
        out.extend_from_slice(META_VERSION_KEY.as_bytes());
        json_write::write_str(out, self.version);
        out.extend_from_slice(META_CLIENT_ENTRIES.as_bytes());
        out.extend_from_slice(self.elicitation.capabilities_json());
        out.extend_from_slice(b"}}");
    }

    fn size_hint(&self) -> usize {
        self.params.map(|p| p.size_hint()).unwrap_or(0)
            + self.request_state.map(str::len).unwrap_or(0)
            + self.input_responses.map(|r| r.size_hint()).unwrap_or(0)
            + 200
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_meta_text_is_the_keys_and_values_escaped() {
        let (mut key, mut entries) = (Vec::new(), vec![b',']);
        json_write::write_str(&mut key, META_PROTOCOL_VERSION);
        key.push(b':');
        json_write::write_str(&mut entries, META_CLIENT_INFO);
        entries.extend_from_slice(br#":{"name":"#);
        json_write::write_str(&mut entries, CLIENT_NAME);
        entries.extend_from_slice(br#","version":"#);
        json_write::write_str(&mut entries, CLIENT_VERSION);
        entries.extend_from_slice(b"},");
        json_write::write_str(&mut entries, META_CLIENT_CAPABILITIES);
        entries.push(b':');
        assert_eq!(META_VERSION_KEY.as_bytes(), &key[..]);
        assert_eq!(META_CLIENT_ENTRIES.as_bytes(), &entries[..]);
    }
    use crate::client::{CLIENT_NAME, CLIENT_VERSION};
    use crate::protocol::jsonrpc::{self, RequestId};
    use serde_json::json;

    #[test]
    fn modern_params_echo_a_request_state_in_place_of_the_callers() {
        let p = json!({"name": "t", "arguments": {"a": 1}, "requestState": "old",
            "inputResponses": {"x": {}}});
        let b = jsonrpc::request_bytes_of(
            &RequestId::Number(3),
            "tools/call",
            &ModernParams {
                params: Some(Params::Tree(&p)),
                version: "2026-07-28",
                request_state: Some("new \"state\""),
                input_responses: None,
                elicitation: Elicitation::Undeclared,
            },
        );
        let text = String::from_utf8(b.to_vec()).unwrap();
        assert_eq!(text.matches("requestState").count(), 1, "{text}");
        let v: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["params"]["requestState"], "new \"state\"");
        assert!(v["params"].get("inputResponses").is_none());
        assert_eq!(v["params"]["arguments"], json!({"a": 1}));

        // Input responses without a state: the caller's state is left out too, never echoed.
        let answers = json!({"confirm": {"action": "accept", "content": {"ok": true}}});
        let b = jsonrpc::request_bytes_of(
            &RequestId::Number(4),
            "tools/call",
            &ModernParams {
                params: Some(Params::Tree(&p)),
                version: "2026-07-28",
                request_state: None,
                input_responses: Some(&answers),
                elicitation: Elicitation::AcceptDefaults,
            },
        );
        let text = String::from_utf8(b.to_vec()).unwrap();
        assert_eq!(text.matches("inputResponses").count(), 1, "{text}");
        assert!(!text.contains("requestState"), "{text}");
        let v: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["params"]["inputResponses"], answers);
        assert_eq!(
            v["params"]["_meta"]["io.modelcontextprotocol/clientCapabilities"],
            json!({"elicitation": {"form": {}}})
        );
    }

    #[test]
    fn modern_params_merge_meta_without_copying_and_without_duplicate_keys() {
        let text = |params: Option<&Value>| {
            let id = RequestId::Number(7);
            let b = jsonrpc::request_bytes_of(
                &id,
                "tools/call",
                &ModernParams {
                    params: params.map(Params::Tree),
                    version: "2026-07-28",
                    request_state: None,
                    input_responses: None,
                    elicitation: Elicitation::Undeclared,
                },
            );
            String::from_utf8(b.to_vec()).unwrap()
        };
        let p = json!({"name": "t", "arguments": {"a": 1}, "_meta": {
            "progressToken": 3,
            "io.modelcontextprotocol/protocolVersion": "1999-01-01",
        }});
        let out = text(Some(&p));
        assert_eq!(out.matches("protocolVersion").count(), 1, "{out}");
        let v: Value = serde_json::from_str(&out).unwrap();
        let meta = &v["params"]["_meta"];
        assert_eq!(v["params"]["name"], "t");
        assert_eq!(v["params"]["arguments"], json!({"a": 1}));
        assert_eq!(meta["progressToken"], 3, "the caller's own keys stay");
        assert_eq!(
            meta["io.modelcontextprotocol/protocolVersion"],
            "2026-07-28"
        );
        assert_eq!(
            meta["io.modelcontextprotocol/clientInfo"]["name"],
            CLIENT_NAME
        );
        assert_eq!(
            meta["io.modelcontextprotocol/clientCapabilities"],
            json!({})
        );
        // No params, or params that are not an object: an object with `_meta` alone.
        for p in [None, Some(&json!([1, 2])), Some(&json!({"_meta": "x"}))] {
            let v: Value = serde_json::from_str(&text(p)).unwrap();
            let keys: Vec<&String> = v["params"].as_object().unwrap().keys().collect();
            assert_eq!(keys, ["_meta"], "{p:?}");
            assert_eq!(
                v["params"]["_meta"]["io.modelcontextprotocol/protocolVersion"],
                "2026-07-28"
            );
        }
    }

    #[test]
    fn a_calls_own_arguments_text_goes_out_with_the_meta_and_a_continuation() {
        let args =
            serde_json::value::RawValue::from_string(r#"{"requestState": "mine", "n": 1}"#.into())
                .unwrap();
        let answers = json!({"x": {"action": "accept"}});
        let b = jsonrpc::request_bytes_of(
            &RequestId::Number(1),
            "tools/call",
            &ModernParams {
                params: Some(Params::Named {
                    name: "t",
                    arguments: &args,
                }),
                version: "2026-07-28",
                request_state: Some("s1"),
                input_responses: Some(&answers),
                elicitation: Elicitation::Undeclared,
            },
        );
        let v: Value = serde_json::from_slice(&b).unwrap();
        let p = &v["params"];
        assert_eq!(p["name"], "t");
        // The arguments are the caller's, their own keys untouched (the continuation's keys
        // are the params', not the arguments').
        assert_eq!(p["arguments"], json!({"requestState": "mine", "n": 1}));
        assert_eq!(p["requestState"], "s1");
        assert_eq!(p["inputResponses"], answers);
        assert_eq!(
            p["_meta"]["io.modelcontextprotocol/protocolVersion"],
            "2026-07-28"
        );
    }

    #[test]
    fn a_refused_input_requests_names_are_cut_and_cleaned_in_the_error() {
        let key = format!("\u{7}{}", "k".repeat(300));
        let method = format!("x/{}\n", "m".repeat(300));
        let r = json!({"resultType": "input_required", "inputRequests": {
            key: {"method": method}}});
        let e = continuation(&r, Elicitation::AcceptDefaults).unwrap_err();
        assert!(
            e.contains(&format!("\"{}\"", "k".repeat(SHOWN_NAME_CHARS))),
            "{e}"
        );
        assert!(!e.contains(&"k".repeat(SHOWN_NAME_CHARS + 1)), "{e}");
        assert!(
            e.contains(&format!("\"x/{}\"", "m".repeat(SHOWN_NAME_CHARS - 2))),
            "{e}"
        );
        assert!(!e.chars().any(char::is_control), "{e:?}");
        // The daemon's client does not look at them: the result is the caller's to refuse.
        assert_eq!(continuation(&r, Elicitation::Undeclared), Ok(None));
    }
}
