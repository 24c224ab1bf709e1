//! The stateless era's POSTs (2026-07-28): routing headers checked, one
//! connection per POST over the shared stateless session.

use std::sync::Arc;

use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::Value;

use super::responses::{is_final, status_for, HEADER_MISMATCH};
use super::routing_headers::{check_modern_headers, check_param_headers};
use super::sse::{sse_until_final, CancelOnDrop};
use super::state::HttpState;
use crate::protocol::outbound::{self};

/// The stateless era: validate the routing headers against the body, run
/// the request on a connection of its own (over the shared stateless
/// session), and cancel it if the client goes away before the answer.
pub(super) async fn post_modern(
    state: Arc<HttpState>,
    headers: HeaderMap,
    text: String,
    value: Value,
) -> Response {
    let checked = check_modern_headers(&headers, &value)
        .and_then(|()| check_param_headers(&headers, &value, &state.engine.tools));
    if let Err(problem) = checked {
        let id = value.get("id").cloned().unwrap_or(Value::Null);
        let body = serde_json::json!({"jsonrpc": "2.0", "id": id, "error": {
            "code": HEADER_MISMATCH, "message": "Header mismatch", "data": problem.to_string()}});
        return (
            StatusCode::BAD_REQUEST,
            [(header::CONTENT_TYPE, "application/json")],
            body.to_string(),
        )
            .into_response();
    }
    let (notify, _) = outbound::channel();
    let conn = state.engine.connect_to(state.stateless.clone(), notify);
    conn.note_nodes_down(nodes_down(&headers));
    let (tx, mut rx) = outbound::channel();
    let mut guard = CancelOnDrop(conn.handle_text_cancellable(&text, &tx));
    drop(tx);
    let Some(first) = rx.recv().await else {
        guard.disarm();
        return StatusCode::ACCEPTED.into_response();
    };
    if is_final(&first) {
        guard.disarm();
        let status = status_for(&first);
        return (status, [(header::CONTENT_TYPE, "application/json")], first).into_response();
    }
    sse_until_final(first, rx, guard)
}

/// The nodes a proxy in front says are down: `X-Node-Down` headers, each a
/// comma-separated list (the HAProxy recipe sets it for a call routed by
/// the handle of a node its health checks found down). Only ever turns an
/// error about another node's handle into "image lost".
fn nodes_down(headers: &HeaderMap) -> Vec<String> {
    headers
        .get_all(NODE_DOWN_HEADER)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(str::trim)
        .filter(|n| !n.is_empty())
        .map(String::from)
        .collect()
}

/// The header a proxy names down nodes in.
pub const NODE_DOWN_HEADER: &str = "x-node-down";
