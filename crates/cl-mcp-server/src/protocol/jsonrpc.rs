//! JSON-RPC 2.0 messages: validation of what arrives, and the exact shape of
//! what leaves. Ids are kept as raw JSON text so they are echoed verbatim
//! (a 30-digit integer id comes back with all its digits).

use std::collections::HashMap;

use serde_json::value::RawValue;
use serde_json::Value;

pub const PARSE_ERROR: i64 = -32700;
pub const INVALID_REQUEST: i64 = -32600;
pub const METHOD_NOT_FOUND: i64 = -32601;
pub const INVALID_PARAMS: i64 = -32602;
pub const INTERNAL_ERROR: i64 = -32603;
/// A server limit refused the request (a batch too long, a response too
/// large); `data` says which and what to do.
pub const LIMIT_EXCEEDED: i64 = -32000;
/// MCP 2026-07-28: the request's protocol version is not supported.
pub const UNSUPPORTED_PROTOCOL_VERSION: i64 = -32022;
/// MCP 2026-07-28: the request needs a client capability it did not declare.
pub const MISSING_CLIENT_CAPABILITY: i64 = -32021;
/// An unknown resource (MCP).
pub const RESOURCE_NOT_FOUND: i64 = -32002;

/// A request id, as the raw JSON text the client sent.
#[derive(Clone, Debug)]
pub struct RequestId(Box<RawValue>);

impl RequestId {
    /// The id's JSON text, to be written back verbatim.
    pub fn json(&self) -> &str {
        self.0.get()
    }

    /// An id written as JSON text, if it is a string or a number.
    pub fn from_json(text: &str) -> Option<RequestId> {
        let raw: Box<RawValue> = serde_json::from_str(text.trim()).ok()?;
        let t = raw.get();
        let ok =
            t.starts_with('"') || t.starts_with('-') || t.starts_with(|c: char| c.is_ascii_digit());
        ok.then_some(RequestId(raw))
    }

    /// A key under which `notifications/cancelled` can find this request.
    pub fn key(&self) -> String {
        id_key(&self.0)
    }
}

/// The same key for a `requestId` given as a JSON value.
pub fn id_key_of_value(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(format!("s:{s}")),
        Value::Number(n) => Some(format!("n:{n}")),
        _ => None,
    }
}

fn id_key(raw: &RawValue) -> String {
    match serde_json::from_str::<Value>(raw.get()) {
        Ok(v) => id_key_of_value(&v).unwrap_or_default(),
        Err(_) => String::new(),
    }
}

/// A well-formed request or notification.
#[derive(Debug)]
pub struct Message {
    /// `None` for a notification.
    pub id: Option<RequestId>,
    pub method: String,
    /// `params`, when present (an object or an array).
    pub params: Option<Value>,
}

/// A message that is not a valid JSON-RPC request: the error to answer with.
#[derive(Debug)]
pub struct Invalid {
    pub id: Option<RequestId>,
    pub code: i64,
    pub message: &'static str,
    pub data: Value,
    /// True when the client sent no id: a malformed *notification* with an
    /// unknown-method or params problem gets no answer.
    pub is_notification: bool,
}

fn invalid(id: Option<RequestId>, code: i64, message: &'static str, data: &str) -> Invalid {
    Invalid {
        id,
        code,
        message,
        data: Value::String(data.to_string()),
        is_notification: false,
    }
}

/// Validates one JSON value (a message, or one element of a batch).
pub fn parse_message(raw: &RawValue) -> Result<Message, Invalid> {
    let text = raw.get().trim_start();
    if !text.starts_with('{') {
        return Err(invalid(
            None,
            INVALID_REQUEST,
            "Invalid Request",
            "Request must be a JSON object",
        ));
    }
    let fields: HashMap<String, Box<RawValue>> = serde_json::from_str(raw.get()).map_err(|e| {
        invalid(
            None,
            INVALID_REQUEST,
            "Invalid Request",
            &format!("Request must be a JSON object: {e}"),
        )
    })?;

    // The id, if it is of a type we can echo.
    let (id, id_problem) = match fields.get("id") {
        None => (None, false),
        Some(raw_id) => {
            let t = raw_id.get().trim_start();
            let ok = t.starts_with('"')
                || t.starts_with('-')
                || t.starts_with(|c: char| c.is_ascii_digit());
            if ok {
                (Some(RequestId(raw_id.clone())), false)
            } else {
                (None, true)
            }
        }
    };

    match fields.get("jsonrpc") {
        None => {
            return Err(invalid(
                id,
                INVALID_REQUEST,
                "Invalid Request",
                "Missing required field: jsonrpc",
            ))
        }
        Some(v) if v.get().trim() != "\"2.0\"" => {
            return Err(invalid(
                id,
                INVALID_REQUEST,
                "Invalid Request",
                "jsonrpc must be \"2.0\"",
            ))
        }
        Some(_) => {}
    }
    if id_problem {
        return Err(invalid(
            None,
            INVALID_REQUEST,
            "Invalid Request",
            "id must be a string or a number",
        ));
    }
    let method = match fields.get("method") {
        None => {
            return Err(invalid(
                id,
                INVALID_REQUEST,
                "Invalid Request",
                "Missing required field: method",
            ))
        }
        Some(m) => match serde_json::from_str::<Value>(m.get()) {
            Ok(Value::String(s)) => s,
            _ => {
                return Err(invalid(
                    id,
                    INVALID_REQUEST,
                    "Invalid Request",
                    "method must be a string",
                ))
            }
        },
    };
    let is_notification = id.is_none();
    let params = match fields.get("params") {
        None => None,
        Some(p) => match serde_json::from_str::<Value>(p.get()) {
            Ok(v @ (Value::Object(_) | Value::Array(_))) => Some(v),
            other => {
                let why = match other {
                    Err(e) if is_too_deep(&e) => {
                        "params is nested too deeply: at most 127 \
                         levels of nested arrays and objects are accepted"
                    }
                    _ => "params must be an object",
                };
                let mut e = invalid(id, INVALID_PARAMS, "Invalid params", why);
                e.is_notification = is_notification;
                return Err(e);
            }
        },
    };
    Ok(Message { id, method, params })
}

/// serde_json refused a value nested deeper than its recursion limit (127
/// levels: its depth budget of 128 runs out on the 128th).
fn is_too_deep(e: &serde_json::Error) -> bool {
    e.to_string().starts_with("recursion limit exceeded")
}

/// A success response line.
pub fn success(id: &RequestId, result: &Value) -> String {
    let result = serde_json::to_string(result).unwrap_or_else(|_| "{}".into());
    format!(
        r#"{{"jsonrpc":"2.0","id":{},"result":{}}}"#,
        id.json(),
        result
    )
}

/// An error response line (`id` null when it could not be read).
pub fn error(id: Option<&RequestId>, code: i64, message: &str, data: &Value) -> String {
    let id = id.map(|i| i.json()).unwrap_or("null");
    // Field order as the JSON-RPC spec writes it: code, message, data.
    let message = serde_json::to_string(message).unwrap_or_else(|_| "\"\"".into());
    let data = serde_json::to_string(data).unwrap_or_else(|_| "null".into());
    format!(
        r#"{{"jsonrpc":"2.0","id":{id},"error":{{"code":{code},"message":{message},"data":{data}}}}}"#
    )
}

/// A notification line.
pub fn notification(method: &str, params: &Value) -> String {
    serde_json::json!({ "jsonrpc": "2.0", "method": method, "params": params }).to_string()
}

/// The id of a message from the first bytes of its text (for a message too
/// long to parse): the first `"id"` key before any `"params"`, when its value
/// is a number or a simple string.
pub fn sniff_id(prefix: &[u8]) -> Option<RequestId> {
    let text = String::from_utf8_lossy(prefix);
    let params_at = text.find("\"params\"").unwrap_or(text.len());
    let at = text.find("\"id\"")?;
    if at > params_at {
        return None;
    }
    let rest = text[at + 4..].trim_start().strip_prefix(':')?.trim_start();
    let end = if let Some(inner) = rest.strip_prefix('"') {
        inner.find('"').map(|i| i + 2)?
    } else {
        rest.find(|c: char| !(c.is_ascii_digit() || "-+.eE".contains(c)))
            .unwrap_or(rest.len())
    };
    RequestId::from_json(&rest[..end])
}

/// The id of `raw` when it is a request (it has a `method` and a string or
/// number `id`): the id an answer must carry when its handling failed
/// before the message was understood. `None` for notifications, responses
/// and anything else, which are never answered.
pub fn request_id_of(raw: &RawValue) -> Option<RequestId> {
    #[derive(serde::Deserialize)]
    struct Head<'a> {
        #[serde(borrow, default)]
        id: Option<&'a RawValue>,
        #[serde(default)]
        method: Option<serde::de::IgnoredAny>,
    }
    let head: Head = serde_json::from_str(raw.get()).ok()?;
    head.method?;
    RequestId::from_json(head.id?.get())
}

/// The answer to text that is not JSON at all.
pub fn parse_error(detail: &str) -> String {
    error(
        None,
        PARSE_ERROR,
        "Parse error",
        &Value::String(detail.to_string()),
    )
}

impl Invalid {
    pub fn to_line(&self) -> String {
        error(self.id.as_ref(), self.code, self.message, &self.data)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> Result<Message, Invalid> {
        let raw: Box<RawValue> = serde_json::from_str(s).unwrap();
        parse_message(&raw)
    }

    #[test]
    fn big_integer_ids_are_echoed_verbatim() {
        let m = parse(r#"{"jsonrpc":"2.0","id":123456789012345678901234567890,"method":"ping"}"#)
            .unwrap();
        let line = success(m.id.as_ref().unwrap(), &serde_json::json!({}));
        assert_eq!(
            line,
            r#"{"jsonrpc":"2.0","id":123456789012345678901234567890,"result":{}}"#
        );
    }

    #[test]
    fn ids_are_sniffed_from_the_start_of_long_messages() {
        let id =
            sniff_id(br#"{"jsonrpc":"2.0","id":42,"method":"tools/call","params":{"x":"#).unwrap();
        assert_eq!(id.json(), "42");
        let id = sniff_id(br#"{"id": "a-1" ,"jsonrpc":"2.0""#).unwrap();
        assert_eq!(id.json(), "\"a-1\"");
        assert!(sniff_id(br#"{"jsonrpc":"2.0","params":{"id":3}"#).is_none());
        assert!(sniff_id(br#"{"jsonrpc":"2.0","id":{"#).is_none());
    }

    #[test]
    fn request_ids_only_of_requests() {
        let id_of = |text: &str| {
            let raw: Box<RawValue> = serde_json::from_str(text).unwrap();
            request_id_of(&raw).map(|id| id.json().to_string())
        };
        assert_eq!(
            id_of(r#"{"jsonrpc":"2.0","id":123456789012345678901234567890,"method":"x"}"#)
                .as_deref(),
            Some("123456789012345678901234567890")
        );
        assert_eq!(
            id_of(r#"{"method":"x","id":"a"}"#).as_deref(),
            Some("\"a\"")
        );
        assert_eq!(id_of(r#"{"jsonrpc":"2.0","method":"x"}"#), None);
        assert_eq!(id_of(r#"{"jsonrpc":"2.0","id":1,"result":{}}"#), None);
        assert_eq!(id_of(r#"{"id":{},"method":"x"}"#), None);
        assert_eq!(id_of("[1]"), None);
    }

    #[test]
    fn error_rows() {
        let e = parse(r#"{"not-jsonrpc":"2.0","method":"initialize"}"#).unwrap_err();
        assert_eq!(
            e.to_line(),
            r#"{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"Invalid Request","data":"Missing required field: jsonrpc"}}"#
        );
        let e = parse(r#"{"jsonrpc":"2.0","id":{},"method":"x"}"#).unwrap_err();
        assert_eq!(e.data, "id must be a string or a number");
        assert!(e.id.is_none());
        let e = parse(r#"{"jsonrpc":"2.0","id":"a","method":"x","params":3}"#).unwrap_err();
        assert_eq!(e.code, INVALID_PARAMS);
        assert_eq!(e.id.unwrap().json(), "\"a\"");
    }

    #[test]
    fn params_nested_too_deeply_say_so() {
        let deep = format!("{}{}", "[".repeat(200), "]".repeat(200));
        let text = format!(r#"{{"jsonrpc":"2.0","id":7,"method":"ping","params":{deep}}}"#);
        let e = parse(&text).unwrap_err();
        assert_eq!(e.code, INVALID_PARAMS);
        assert_eq!(e.id.unwrap().json(), "7");
        assert!(
            e.data.as_str().unwrap().contains("nested too deeply"),
            "{}",
            e.data
        );
        // 100 levels are fine.
        let ok = format!("{}{}", "[".repeat(100), "]".repeat(100));
        parse(&format!(
            r#"{{"jsonrpc":"2.0","id":7,"method":"ping","params":{ok}}}"#
        ))
        .unwrap();
    }
}
