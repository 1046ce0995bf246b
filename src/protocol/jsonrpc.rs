//! JSON-RPC 2.0 messages as MCP uses them: requests, notifications and responses, one per
//! line on stdio and one per POST or SSE event on HTTP. Parsing never panics; anything that
//! is not a well-formed message is a [`ParseError`].

use super::check::Checked;
use super::json_write::{self, WriteJson};
use super::result::ResultText;
use bytes::Bytes;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::Value;
use std::fmt;

/// Messages larger than this are refused in both directions (16 MiB).
pub const MAX_MESSAGE_BYTES: usize = 16 * 1024 * 1024;

/// The longest string id a response may carry and still be looked at (256 bytes). albedo's
/// own request ids are numbers, so a longer one answers nothing of ours: it is ignored
/// without being stored.
pub const MAX_RESPONSE_ID_BYTES: usize = 256;

/// The one protocol version whose messages may be JSON-RPC batches (arrays): 2025-03-26
/// added them and 2025-06-18 removed them again.
pub const BATCH_VERSION: &str = "2025-03-26";

/// The longest text of a [`ParseError`] (it may quote what the server sent).
const PARSE_ERROR_CHARS: usize = 200;

pub const PARSE_ERROR: i64 = -32700;
pub const INVALID_REQUEST: i64 = -32600;
pub const METHOD_NOT_FOUND: i64 = -32601;
pub const INVALID_PARAMS: i64 = -32602;
pub const INTERNAL_ERROR: i64 = -32603;
/// 2026-07-28: HTTP headers disagree with the body.
pub const HEADER_MISMATCH: i64 = -32020;
/// 2026-07-28: the request needs a client capability we did not declare.
pub const MISSING_CLIENT_CAPABILITY: i64 = -32021;
/// 2026-07-28: the requested protocol version is not supported (`data.supported`).
pub const UNSUPPORTED_PROTOCOL_VERSION: i64 = -32022;

/// A request id: the spec allows strings and integers, never null.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(untagged)]
pub enum RequestId {
    Number(i64),
    String(String),
}

impl RequestId {
    /// Whether this id, on a response, is too long to answer anything of ours.
    pub fn oversized_for_response(&self) -> bool {
        matches!(self, RequestId::String(s) if s.len() > MAX_RESPONSE_ID_BYTES)
    }
}

impl fmt::Display for RequestId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RequestId::Number(n) => write!(f, "{n}"),
            RequestId::String(s) => write!(f, "{s:?}"),
        }
    }
}

/// A JSON-RPC error object.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ErrorObject {
    pub code: i64,
    pub message: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<Value>,
}

impl ErrorObject {
    pub fn new(code: i64, message: impl Into<String>) -> Self {
        ErrorObject {
            code,
            message: message.into(),
            data: None,
        }
    }

    /// Whether this is one of the errors only a 2026-07-28 server sends.
    pub fn is_modern(&self) -> bool {
        matches!(
            self.code,
            HEADER_MISMATCH | MISSING_CLIENT_CAPABILITY | UNSUPPORTED_PROTOCOL_VERSION
        )
    }

    /// The `data.supported` list of an `UnsupportedProtocolVersionError`.
    pub fn supported_versions(&self) -> Vec<String> {
        self.data
            .as_ref()
            .and_then(|d| d.get("supported"))
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(|v| v.as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default()
    }
}

impl fmt::Display for ErrorObject {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} (code {})", self.message, self.code)
    }
}

/// One JSON-RPC message.
#[derive(Debug, Clone, PartialEq)]
pub enum Message {
    Request {
        id: RequestId,
        method: String,
        params: Option<Value>,
    },
    Notification {
        method: String,
        params: Option<Value>,
    },
    Response {
        id: RequestId,
        /// The `result` as the server wrote it ([`ResultText`]), or its error.
        result: Result<ResultText, ErrorObject>,
    },
    /// An error response without an id (a refusal of something we could not parse).
    OrphanError(ErrorObject),
}

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum ParseError {
    #[error("message of {0} bytes is over the 16 MiB limit")]
    TooLarge(usize),
    #[error("not JSON: {0}")]
    NotJson(String),
    #[error("not a JSON-RPC 2.0 message: {0}")]
    NotJsonRpc(&'static str),
}

#[derive(Deserialize)]
struct Raw<'a> {
    #[serde(borrow, default)]
    jsonrpc: Option<&'a RawValue>,
    #[serde(default)]
    id: Option<Value>,
    #[serde(default)]
    method: Option<String>,
    #[serde(default)]
    params: Option<Value>,
    /// Kept as text: a tool result is not parsed into a tree here.
    #[serde(borrow, default)]
    result: Option<&'a RawValue>,
    #[serde(default)]
    error: Option<Value>,
}

impl Message {
    /// Parse one message. JSON-RPC batches (arrays) are split by [`parse_batch`].
    pub fn parse(bytes: &[u8]) -> Result<Message, ParseError> {
        Self::parse_in(bytes, None)
    }

    /// Parse one message of `body`, its `result` kept as a slice of `body` (no copy).
    pub fn parse_shared(body: &Bytes) -> Result<Message, ParseError> {
        Self::parse_in(body, Some(body))
    }

    fn parse_in(bytes: &[u8], shared: Option<&Bytes>) -> Result<Message, ParseError> {
        if bytes.len() > MAX_MESSAGE_BYTES {
            return Err(ParseError::TooLarge(bytes.len()));
        }
        // The usual answer's frame, matched as bytes (see `answer.rs`).
        if let Some(m) = super::answer::usual_response(bytes, shared) {
            return Ok(m);
        }
        Self::parse_general(bytes, shared)
    }

    /// Any message, by serde: the path every error comes from.
    pub(super) fn parse_general(
        bytes: &[u8],
        shared: Option<&Bytes>,
    ) -> Result<Message, ParseError> {
        let raw: Raw = serde_json::from_slice(bytes).map_err(|e| {
            if e.is_data() {
                ParseError::NotJsonRpc("not an object of the JSON-RPC shape")
            } else {
                not_json(e)
            }
        })?;
        Self::from_raw(raw, shared)
    }

    /// `shared`: the bytes `raw` borrows from, when the result may be kept as a slice of them.
    fn from_raw(raw: Raw, shared: Option<&Bytes>) -> Result<Message, ParseError> {
        match raw.jsonrpc.map(RawValue::get) {
            Some("\"2.0\"") => {}
            _ => return Err(ParseError::NotJsonRpc("missing \"jsonrpc\": \"2.0\"")),
        }
        let id = match raw.id {
            None | Some(Value::Null) => None,
            Some(v) => Some(
                serde_json::from_value::<RequestId>(v)
                    .map_err(|_| ParseError::NotJsonRpc("id is neither a string nor an integer"))?,
            ),
        };
        if let Some(method) = raw.method {
            return Ok(match id {
                Some(id) => Message::Request {
                    id,
                    method,
                    params: raw.params,
                },
                None => Message::Notification {
                    method,
                    params: raw.params,
                },
            });
        }
        let error = match raw.error {
            Some(e) => Some(
                serde_json::from_value::<ErrorObject>(e)
                    .map_err(|_| ParseError::NotJsonRpc("malformed error object"))?,
            ),
            None => None,
        };
        match (id, raw.result, error) {
            (Some(id), Some(result), None) => Ok(Message::Response {
                id,
                result: Ok(shared
                    .and_then(|body| ResultText::within(body, result))
                    .unwrap_or_else(|| ResultText::new(result.to_owned()))),
            }),
            (Some(id), None, Some(err)) => Ok(Message::Response {
                id,
                result: Err(err),
            }),
            (None, None, Some(err)) => Ok(Message::OrphanError(err)),
            _ => Err(ParseError::NotJsonRpc(
                "neither a request, a notification nor a response",
            )),
        }
    }

    /// Serialize to compact JSON bytes (no trailing newline).
    pub fn to_bytes(&self) -> Bytes {
        match self {
            Message::Request { id, method, params } => request_bytes(id, method, params.as_ref()),
            Message::Notification { method, params } => notification_bytes(method, params.as_ref()),
            Message::Response { id, result } => reply_bytes(Some(id), result.as_ref()),
            Message::OrphanError(e) => reply_bytes(None, Err(e)),
        }
    }
}

/// A request or notification as it goes out, written from its borrowed parts (no copy of the
/// params): `{"jsonrpc":"2.0","id":…,"method":…,"params":…}`, compact, as serde_json writes it.
fn outgoing_bytes<P: WriteJson + ?Sized>(
    id: Option<&RequestId>,
    method: &str,
    params: Option<&P>,
) -> Bytes {
    let hint = params.map(|p| p.size_hint()).unwrap_or(0);
    let mut out = Vec::with_capacity(64 + method.len() + hint);
    out.extend_from_slice(br#"{"jsonrpc":"2.0""#);
    if let Some(id) = id {
        out.extend_from_slice(br#","id":"#);
        let _ = serde_json::to_writer(&mut out, id);
    }
    out.extend_from_slice(br#","method":"#);
    json_write::write_str(&mut out, method);
    if let Some(p) = params {
        out.extend_from_slice(br#","params":"#);
        p.write_json(&mut out);
    }
    out.push(b'}');
    Bytes::from(out)
}

/// A response as it goes out (`"id": null` for an error about nothing we could parse).
#[derive(Serialize)]
struct Reply<'a> {
    jsonrpc: &'static str,
    id: Option<&'a RequestId>,
    #[serde(skip_serializing_if = "Option::is_none")]
    result: Option<&'a ResultText>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<&'a ErrorObject>,
}

fn reply_bytes(id: Option<&RequestId>, result: Result<&ResultText, &ErrorObject>) -> Bytes {
    let msg = Reply {
        jsonrpc: "2.0",
        id,
        result: result.ok(),
        error: result.err(),
    };
    Bytes::from(serde_json::to_vec(&msg).unwrap_or_default())
}

/// Serialize a request without cloning its params.
pub fn request_bytes(id: &RequestId, method: &str, params: Option<&Value>) -> Bytes {
    outgoing_bytes(Some(id), method, params)
}

/// Serialize a request whose params write themselves (a view that decorates borrowed params,
/// for example), without building a `Value` first.
pub fn request_bytes_of<P: WriteJson + ?Sized>(id: &RequestId, method: &str, params: &P) -> Bytes {
    outgoing_bytes(Some(id), method, Some(params))
}

/// Serialize a notification without cloning its params.
pub fn notification_bytes(method: &str, params: Option<&Value>) -> Bytes {
    outgoing_bytes(None, method, params)
}

/// Parse a body that may hold one message or a JSON-RPC batch (2025-03-26 allowed batches;
/// whether a batch may be taken from a server is [`batches_allowed`]'s call, asked first with
/// [`is_batch`]).
pub fn parse_batch(bytes: &[u8]) -> Result<Vec<Message>, ParseError> {
    parse_batch_in(bytes, None)
}

/// [`parse_batch`] of a body held as [`Bytes`]: each result is kept as a slice of it (no copy
/// of a large tool result).
pub fn parse_batch_shared(body: &Bytes) -> Result<Vec<Message>, ParseError> {
    parse_batch_in(body, Some(body))
}

/// [`parse_batch_shared`] of a body [`JsonCheck`](super::check::JsonCheck) checked as it
/// arrived: its `result` is not read again (the check found it to be JSON and noted its head);
/// serde reads the rest of the message, a copy with `0` in the result's place. Without a
/// check, or when that copy is refused, the body is parsed whole, so that the error is the one
/// the whole body gets. So is a body whose result is less than half of it (a large message
/// is then mostly something else, which the copy would only duplicate).
pub fn parse_batch_checked(
    body: &Bytes,
    checked: Option<&Checked>,
) -> Result<Vec<Message>, ParseError> {
    let Some(c) = checked.filter(|c| {
        c.result.start < c.result.end
            && c.result.end <= body.len()
            && c.result.len() >= body.len() / 2
    }) else {
        return parse_batch_shared(body);
    };
    if body.len() > MAX_MESSAGE_BYTES {
        return Err(ParseError::TooLarge(body.len()));
    }
    let mut rest = Vec::with_capacity(body.len() - c.result.len() + 1);
    rest.extend_from_slice(&body[..c.result.start]);
    rest.push(b'0');
    rest.extend_from_slice(&body[c.result.end..]);
    match Message::parse_in(&rest, None) {
        Ok(Message::Response { id, result: Ok(_) }) => Ok(vec![Message::Response {
            id,
            result: Ok(ResultText::checked(body, c)),
        }]),
        Ok(other) => Ok(vec![other]),
        Err(_) => parse_batch_shared(body),
    }
}

fn parse_batch_in(bytes: &[u8], shared: Option<&Bytes>) -> Result<Vec<Message>, ParseError> {
    if bytes.len() > MAX_MESSAGE_BYTES {
        return Err(ParseError::TooLarge(bytes.len()));
    }
    if is_batch(bytes) {
        let items: Vec<Raw> = serde_json::from_slice(bytes).map_err(not_json)?;
        items
            .into_iter()
            .map(|r| Message::from_raw(r, shared))
            .collect()
    } else {
        Message::parse_in(bytes, shared).map(|m| vec![m])
    }
}

/// Whether a body is a JSON-RPC batch (a JSON array), judged by its first byte that is not
/// white space, without parsing it.
pub fn is_batch(bytes: &[u8]) -> bool {
    bytes.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'[')
}

/// Whether a server that negotiated `version` may send batches (only 2025-03-26; before the
/// version is known, no).
pub fn batches_allowed(version: Option<&str>) -> bool {
    version == Some(BATCH_VERSION)
}

/// serde_json's error, which may quote the server's text (`invalid type: string "..."`),
/// shortened and without control characters.
fn not_json(e: serde_json::Error) -> ParseError {
    let text: String = e
        .to_string()
        .chars()
        .take(PARSE_ERROR_CHARS)
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    ParseError::NotJson(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_each_kind() {
        let m = Message::parse(br#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#).unwrap();
        assert!(matches!(
            m,
            Message::Request {
                id: RequestId::Number(1),
                ..
            }
        ));
        let m = Message::parse(br#"{"jsonrpc":"2.0","method":"notifications/tools/list_changed"}"#)
            .unwrap();
        assert!(matches!(m, Message::Notification { .. }));
        let m = Message::parse(br#"{"jsonrpc":"2.0","id":"a","result":{}}"#).unwrap();
        assert!(matches!(m, Message::Response { result: Ok(_), .. }));
        let m = Message::parse(
            br#"{"jsonrpc":"2.0","id":2,"error":{"code":-32022,"message":"x","data":{"supported":["2026-07-28"]}}}"#,
        )
        .unwrap();
        match m {
            Message::Response { result: Err(e), .. } => {
                assert!(e.is_modern());
                assert_eq!(e.supported_versions(), vec!["2026-07-28"]);
            }
            _ => panic!("wrong kind"),
        }
    }

    #[test]
    fn rejects_garbage_without_panicking() {
        for bad in [
            &b"hello"[..],
            b"{}",
            b"[]",
            b"{\"jsonrpc\":\"1.0\",\"id\":1,\"result\":{}}",
            b"{\"jsonrpc\":\"2.0\",\"id\":1.5,\"result\":{}}",
            b"{\"jsonrpc\":\"2.0\",\"id\":1}",
            b"\xff\xfe",
            b"",
        ] {
            assert!(
                Message::parse(bad).is_err(),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
    }

    #[test]
    fn replies_serialize_as_json_rpc() {
        let ok = Message::Response {
            id: RequestId::String("a".into()),
            result: Ok(serde_json::json!({}).into()),
        };
        let v: Value = serde_json::from_slice(&ok.to_bytes()).unwrap();
        assert_eq!(
            v,
            serde_json::json!({"jsonrpc": "2.0", "id": "a", "result": {}})
        );
        let orphan = Message::OrphanError(ErrorObject::new(METHOD_NOT_FOUND, "x"));
        let v: Value = serde_json::from_slice(&orphan.to_bytes()).unwrap();
        assert_eq!(
            v,
            serde_json::json!({"jsonrpc": "2.0", "id": null, "error": {"code": -32601, "message": "x"}})
        );
        assert_eq!(Message::parse(&ok.to_bytes()).unwrap(), ok);
    }

    #[test]
    fn round_trips() {
        let b = request_bytes(&RequestId::Number(7), "tools/list", None);
        let m = Message::parse(&b).unwrap();
        assert_eq!(Message::parse(&m.to_bytes()).unwrap(), m);
        let batch =
            parse_batch(br#"[{"jsonrpc":"2.0","method":"a"},{"jsonrpc":"2.0","id":1,"result":1}]"#)
                .unwrap();
        assert_eq!(batch.len(), 2);
    }

    #[test]
    fn batches_are_told_apart_and_allowed_only_for_2025_03_26() {
        assert!(is_batch(b"  \n [ {}]"));
        assert!(!is_batch(br#"{"jsonrpc":"2.0"}"#));
        assert!(!is_batch(b""));
        assert!(batches_allowed(Some("2025-03-26")));
        for v in [
            None,
            Some("2025-11-25"),
            Some("2025-06-18"),
            Some("2024-11-05"),
        ] {
            assert!(!batches_allowed(v), "{v:?}");
        }
    }

    #[test]
    fn long_string_ids_cannot_answer_our_requests() {
        assert!(!RequestId::Number(i64::MAX).oversized_for_response());
        assert!(!RequestId::String("a".repeat(MAX_RESPONSE_ID_BYTES)).oversized_for_response());
        assert!(RequestId::String("a".repeat(MAX_RESPONSE_ID_BYTES + 1)).oversized_for_response());
    }

    #[test]
    fn parse_errors_quoting_the_server_are_short_and_clean() {
        let junk = format!("[\"{}\"]", "\\u001b[31m\\n".repeat(10_000));
        let e = parse_batch(junk.as_bytes()).unwrap_err().to_string();
        assert!(
            e.chars().count() <= PARSE_ERROR_CHARS + 40,
            "{} chars",
            e.len()
        );
        assert!(!e.chars().any(char::is_control), "{e:?}");
    }

    #[test]
    fn outgoing_text_is_what_serde_json_writes() {
        #[derive(Serialize)]
        struct Expected<'a> {
            jsonrpc: &'static str,
            #[serde(skip_serializing_if = "Option::is_none")]
            id: Option<&'a RequestId>,
            method: &'a str,
            #[serde(skip_serializing_if = "Option::is_none")]
            params: Option<&'a Value>,
        }
        let params =
            serde_json::json!({"name": "t\"\n", "arguments": {"x": [1, 2.5, null], "é": "\u{1}"}});
        let ids = [RequestId::Number(7), RequestId::String("a\"b".into())];
        for (id, method, params) in [
            (Some(&ids[0]), "tools/call", Some(&params)),
            (Some(&ids[1]), "tools/list", None),
            (None, "notifications/cancelled", Some(&params)),
            (None, "notifications/initialized", None),
        ] {
            let expected = serde_json::to_vec(&Expected {
                jsonrpc: "2.0",
                id,
                method,
                params,
            })
            .unwrap();
            let got = match id {
                Some(id) => request_bytes(id, method, params),
                None => notification_bytes(method, params),
            };
            assert_eq!(
                String::from_utf8_lossy(&got),
                String::from_utf8_lossy(&expected)
            );
        }
    }

    #[test]
    fn a_shared_body_keeps_its_result_as_a_slice_not_a_copy() {
        let body = Bytes::from_static(
            br#"{"jsonrpc":"2.0","id":7,"result":{"content":[{"type":"text","text":"big"}]}}"#,
        );
        let Ok(Message::Response { result: Ok(r), .. }) = Message::parse_shared(&body) else {
            panic!("not a response");
        };
        assert_eq!(r.get(), r#"{"content":[{"type":"text","text":"big"}]}"#);
        let (b, t) = (body.as_ptr() as usize, r.as_bytes().as_ptr() as usize);
        assert!(t > b && t < b + body.len(), "the result was copied");
        // A batch too, and a body given as a plain slice still parses (copied).
        let batch = Bytes::from_static(br#"[{"jsonrpc":"2.0","id":1,"result":[1]}]"#);
        let msgs = parse_batch_shared(&batch).unwrap();
        let Message::Response { result: Ok(r), .. } = &msgs[0] else {
            panic!("not a response");
        };
        let t = r.as_bytes().as_ptr() as usize;
        assert!(t > batch.as_ptr() as usize && t < batch.as_ptr() as usize + batch.len());
        assert_eq!(
            Message::parse(&body).unwrap(),
            Message::parse_shared(&body).unwrap()
        );
    }
}
