//! The handshake era's POSTs: sessions keyed by `Mcp-Session-Id`, created
//! by `initialize`.

use std::sync::Arc;
use std::time::Instant;

use axum::http::{HeaderMap, StatusCode};
use axum::response::sse::{Event, Sse};
use axum::response::{IntoResponse, Response};
use futures::stream;

use super::body::BodyShape;
use super::responses::{
    add_session_header, header_str, is_final, json_response, rpc_error_for, session_not_found,
};
use super::sse::{sse_until_final, CancelOnDrop};
use super::state::HttpState;
use crate::protocol::era::LEGACY_VERSIONS;
use crate::protocol::jsonrpc;
use crate::protocol::outbound::{self};
use crate::sync::MutexExt;

/// The handshake era: sessions keyed by `Mcp-Session-Id`.
pub(super) async fn post_legacy(
    state: Arc<HttpState>,
    headers: HeaderMap,
    text: String,
    shape: BodyShape,
    request_id: Option<jsonrpc::RequestId>,
) -> Response {
    let rid = request_id.as_ref();
    let session_header = header_str(&headers, "mcp-session-id").map(str::to_string);
    let header_version = header_str(&headers, "mcp-protocol-version").map(str::to_string);
    if let Some(v) = &header_version {
        if !LEGACY_VERSIONS.contains(&v.as_str()) {
            return rpc_error_for(
                rid,
                StatusCode::BAD_REQUEST,
                jsonrpc::INVALID_REQUEST,
                "Invalid Request",
                &format!("Unsupported MCP-Protocol-Version header '{v}'"),
            );
        }
    }

    let mut new_session: Option<String> = None;
    let conn = if shape.is_initialize && session_header.is_none() {
        let (notify, _rx) = outbound::channel();
        new_session = Some(crate::protocol::random_token());
        state.engine.connect(notify)
    } else {
        match &session_header {
            None => {
                return rpc_error_for(
                rid,
                    StatusCode::BAD_REQUEST,
                    jsonrpc::INVALID_REQUEST,
                    "Invalid Request",
                    "Missing Mcp-Session-Id header: send initialize first, or make the request stateless (_meta with io.modelcontextprotocol/protocolVersion)",
                )
            }
            Some(id) => match state.session(id) {
                Some(c) => c,
                None => return session_not_found(rid, id),
            },
        }
    };
    if let (Some(v), Some(agreed)) = (&header_version, conn.protocol_version()) {
        if *v != agreed {
            return rpc_error_for(
                rid,
                StatusCode::BAD_REQUEST,
                jsonrpc::INVALID_REQUEST,
                "Invalid Request",
                &format!("MCP-Protocol-Version header '{v}' differs from the version this session agreed on ({agreed})"),
            );
        }
    }

    let (tx, mut rx) = outbound::channel();
    // Dropped with this handler (the client closed the POST or its stream
    // before the answer): the POST's requests are cancelled.
    let mut guard = CancelOnDrop(conn.handle_text_cancellable(&text, &tx));
    drop(tx);

    if let Some(id) = &new_session {
        if conn.is_initialized() {
            state
                .sessions
                .guard()
                .by_id
                .insert(id.clone(), (conn.clone(), Instant::now()));
        } else {
            // initialize failed: no session was created.
            new_session = None;
        }
    }

    if !shape.has_requests {
        let mut r = StatusCode::ACCEPTED.into_response();
        add_session_header(&mut r, new_session.as_deref());
        return r;
    }

    let accepts_sse =
        header_str(&headers, "accept").is_some_and(|a| a.contains("text/event-stream"));
    let mut response = match rx.recv().await {
        // Every request was cancelled: an empty stream ends the POST.
        None => {
            guard.disarm();
            Sse::new(stream::empty::<Result<Event, std::convert::Infallible>>()).into_response()
        }
        Some(first) if is_final(&first) => {
            guard.disarm();
            json_response(first)
        }
        Some(first) if accepts_sse => sse_until_final(first, rx, guard),
        Some(_) => {
            // The client cannot read a stream: answer with the response only.
            let mut last = None;
            while let Some(m) = rx.recv().await {
                if is_final(&m) {
                    last = Some(m);
                    break;
                }
            }
            guard.disarm();
            match last {
                Some(m) => json_response(m),
                None => StatusCode::ACCEPTED.into_response(),
            }
        }
    };
    add_session_header(&mut response, new_session.as_deref());
    response
}
