//! Reading a POST's body: size (413, from `Content-Length` first), time
//! (408), the server-wide budget (503), and what kind of messages it holds.

use axum::body::{Body, Bytes};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::Response;
use serde_json::Value;

use super::budget::BodyShare;
use super::responses::{header_str, rpc_error_response};
use super::state::HttpState;
use crate::protocol::jsonrpc;

/// What kind of messages a POST body holds.
pub(super) struct BodyShape {
    /// Something in it will be answered: a request, or an invalid message.
    pub(super) has_requests: bool,
    pub(super) is_initialize: bool,
    /// Some message carries the stateless era's `_meta`.
    pub(super) any_modern: bool,
}

pub(super) fn is_modern(m: &Value) -> bool {
    m.pointer("/params/_meta/io.modelcontextprotocol~1protocolVersion")
        .is_some()
}

pub(super) fn shape_of(value: &Value) -> BodyShape {
    let items: Vec<&Value> = match value {
        Value::Array(a) => a.iter().collect(),
        v => vec![v],
    };
    let mut shape = BodyShape {
        has_requests: matches!(value, Value::Array(a) if a.is_empty()),
        is_initialize: false,
        any_modern: false,
    };
    for m in items {
        let method = m.get("method");
        let is_response =
            method.is_none() && (m.get("result").is_some() || m.get("error").is_some());
        // Requests, and invalid messages (they get an error response).
        if !is_response && (m.get("id").is_some() || !method.is_some_and(Value::is_string)) {
            shape.has_requests = true;
        }
        if method.and_then(Value::as_str) == Some("initialize") {
            shape.is_initialize = true;
        }
        shape.any_modern |= is_modern(m);
    }
    shape
}

pub(super) async fn read_body(
    state: &HttpState,
    headers: &HeaderMap,
    body: Body,
) -> Result<(String, Value), Response> {
    let limit = state.engine.config.max_message_bytes;
    let too_large = || {
        rpc_error_response(
            StatusCode::PAYLOAD_TOO_LARGE,
            jsonrpc::PARSE_ERROR,
            "Parse error",
            &format!("Message exceeds the {limit}-byte limit (--max-message-bytes)"),
        )
    };
    // A declared length over the limit is refused before any of it is read.
    let declared = header_str(headers, header::CONTENT_LENGTH.as_str())
        .and_then(|v| v.trim().parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit as u64) {
        return Err(too_large());
    }
    let timeout = state.options.body_timeout;
    let mut share = BodyShare {
        budget: &state.bodies,
        held: 0,
    };
    let read = async {
        use futures::StreamExt;
        // Sized once from the declared length (untouched capacity costs no
        // memory), so the buffer is not re-grown and copied as data arrives.
        let mut data = Vec::with_capacity(declared.unwrap_or(0) as usize);
        let mut chunks = body.into_data_stream();
        while let Some(chunk) = chunks.next().await {
            let Ok(chunk) = chunk else {
                return Err(StatusCode::BAD_REQUEST);
            };
            if data.len() + chunk.len() > limit {
                return Err(StatusCode::PAYLOAD_TOO_LARGE);
            }
            if !share.grow(chunk.len()) {
                return Err(StatusCode::SERVICE_UNAVAILABLE);
            }
            data.extend_from_slice(&chunk);
        }
        Ok(Bytes::from(data))
    };
    let bytes: Bytes = match tokio::time::timeout(timeout, read).await {
        Ok(Ok(b)) => b,
        Ok(Err(StatusCode::PAYLOAD_TOO_LARGE)) => return Err(too_large()),
        Ok(Err(StatusCode::SERVICE_UNAVAILABLE)) => {
            tracing::warn!(
                limit = state.bodies.max,
                "http request bodies in progress exceed their budget; one refused"
            );
            let mut r = rpc_error_response(
                StatusCode::SERVICE_UNAVAILABLE,
                jsonrpc::LIMIT_EXCEEDED,
                "Limit exceeded",
                &format!(
                    "The server is receiving {} bytes of request bodies already; try again shortly",
                    state.bodies.max
                ),
            );
            r.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
            r.headers_mut()
                .insert(header::CONNECTION, HeaderValue::from_static("close"));
            return Err(r);
        }
        Ok(Err(_)) => {
            return Err(rpc_error_response(
                StatusCode::BAD_REQUEST,
                jsonrpc::PARSE_ERROR,
                "Parse error",
                "The request body could not be read",
            ))
        }
        Err(_) => {
            tracing::warn!(?timeout, "http request body too slow; refused");
            let mut r = rpc_error_response(
                StatusCode::REQUEST_TIMEOUT,
                jsonrpc::PARSE_ERROR,
                "Parse error",
                &format!(
                    "The request body did not arrive within {}s (--body-timeout-secs)",
                    timeout.as_secs()
                ),
            );
            r.headers_mut()
                .insert(header::CONNECTION, HeaderValue::from_static("close"));
            return Err(r);
        }
    };
    // The body is parsed into the message below; its share of the budget
    // is given back when this function returns.
    let text = String::from_utf8(bytes.to_vec()).map_err(|e| {
        rpc_error_response(
            StatusCode::BAD_REQUEST,
            jsonrpc::PARSE_ERROR,
            "Parse error",
            &format!("Message is not valid UTF-8: {e}"),
        )
    })?;
    let value: Value = serde_json::from_str(&text).map_err(|e| {
        let detail = if e.to_string().starts_with("recursion limit exceeded") {
            format!("Message is nested too deeply: at most 127 levels of nested arrays and objects are accepted ({e})")
        } else {
            e.to_string()
        };
        rpc_error_response(
            StatusCode::BAD_REQUEST,
            jsonrpc::PARSE_ERROR,
            "Parse error",
            &detail,
        )
    })?;
    Ok((text, value))
}
