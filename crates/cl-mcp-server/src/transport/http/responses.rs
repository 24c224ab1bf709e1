//! The HTTP transport's answers: JSON-RPC errors with their HTTP status,
//! JSON bodies, the session header, and which message ends a POST.

use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::Value;

use crate::protocol::jsonrpc;

pub(super) fn rpc_error_response(
    status: StatusCode,
    code: i64,
    message: &str,
    data: &str,
) -> Response {
    rpc_error_for(None, status, code, message, data)
}

/// A transport-level rejection of a request whose body was read: the error
/// carries the request's id, so the client's call does not wait forever.
pub(super) fn rpc_error_for(
    id: Option<&jsonrpc::RequestId>,
    status: StatusCode,
    code: i64,
    message: &str,
    data: &str,
) -> Response {
    let body = jsonrpc::error(id, code, message, &Value::String(data.into()));
    (status, [(header::CONTENT_TYPE, "application/json")], body).into_response()
}

/// The id of a single request in a POST body, as the client wrote it.
pub(super) fn request_id_of(text: &str, value: &Value) -> Option<jsonrpc::RequestId> {
    if value.is_object() && value.get("method").is_some() {
        jsonrpc::sniff_id(text.as_bytes())
    } else {
        None
    }
}

pub(super) fn header_str<'a>(h: &'a HeaderMap, name: &str) -> Option<&'a str> {
    h.get(name).and_then(|v| v.to_str().ok())
}

pub(super) fn session_not_found(request: Option<&jsonrpc::RequestId>, id: &str) -> Response {
    rpc_error_for(
        request,
        StatusCode::NOT_FOUND,
        jsonrpc::INVALID_REQUEST,
        "Invalid Request",
        &format!("Unknown or expired session '{id}': start a new one with initialize"),
    )
}

/// HTTP status for a JSON-RPC answer in the stateless era.
pub(super) fn status_for(message: &str) -> StatusCode {
    let code = serde_json::from_str::<Value>(message)
        .ok()
        .and_then(|v| v.pointer("/error/code").and_then(Value::as_i64));
    match code {
        Some(jsonrpc::METHOD_NOT_FOUND) => StatusCode::NOT_FOUND,
        Some(
            jsonrpc::PARSE_ERROR
            | jsonrpc::INVALID_REQUEST
            | jsonrpc::INVALID_PARAMS
            | jsonrpc::UNSUPPORTED_PROTOCOL_VERSION
            | jsonrpc::MISSING_CLIENT_CAPABILITY
            | HEADER_MISMATCH,
        ) => StatusCode::BAD_REQUEST,
        _ => StatusCode::OK,
    }
}

/// JSON-RPC error code for routing headers that disagree with the body.
pub(super) const HEADER_MISMATCH: i64 = -32020;

/// A response (or batch of responses) rather than a notification.
pub(super) fn is_final(message: &str) -> bool {
    match serde_json::from_str::<Value>(message) {
        Ok(Value::Object(m)) => !m.contains_key("method"),
        _ => true,
    }
}

pub(super) fn json_response(body: String) -> Response {
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "application/json")],
        body,
    )
        .into_response()
}

pub(super) fn add_session_header(r: &mut Response, id: Option<&str>) {
    if let Some(id) = id.and_then(|i| HeaderValue::from_str(i).ok()) {
        r.headers_mut().insert("mcp-session-id", id);
    }
}
