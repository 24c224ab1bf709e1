//! Streamable HTTP: the `/mcp` endpoint.
//!
//! - Legacy sessions: `initialize` (POST without a session id) creates a
//!   session and returns `Mcp-Session-Id`; later POSTs must carry it (400
//!   without, 404 when unknown or expired); `DELETE` ends it.
//! - Stateless (2026-07-28) POSTs need no session: they share one
//!   connection whose requests carry everything in `_meta`.
//! - A POST is answered with `application/json` when its only message is the
//!   response, else as an SSE stream (progress, log messages, then the
//!   response). Notifications-only POSTs get 202.
//! - Guards: `Origin` must be allowed (403), `Host` must name this server
//!   (403; DNS-rebinding protection), an optional bearer token (401). Both
//!   headers are parsed strictly (scheme, host, numeric port, nothing else)
//!   and the host compared exactly.
//! - Bounds: at most `--max-connections` connections (the next gets 503 and
//!   is closed), request headers within `--header-timeout-secs` (else the
//!   connection is closed), a body within `--max-message-bytes` (413) and
//!   `--body-timeout-secs` (408). A client that drops a POST's stream
//!   cancels the requests of that POST.
//!
//! Inside: `state` (options, sessions), `budget` and `body` (reading a
//! body), `guards`, `routing_headers`, `responses`, `sse` (SSE streams and
//! cancellation), and one module per era (`legacy`, `stateless`); this file
//! serves the endpoint and routes a request to them.

mod body;
mod budget;
mod guards;
mod legacy;
mod responses;
mod routing_headers;
mod sse;
mod state;
mod stateless;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::any;
use axum::Router;

use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use tower_service::Service;

use super::listen::{accept, refuse, ConnectionLimit};
use crate::protocol::era::MODERN_VERSION;
use crate::protocol::jsonrpc;
use crate::protocol::Engine;
use crate::sync::MutexExt;
use body::{read_body, shape_of};
use budget::BodyBudget;
use legacy::post_legacy;
use responses::{header_str, request_id_of, rpc_error_for, rpc_error_response, session_not_found};
use state::{HttpState, Sessions};
use stateless::post_modern;

pub use state::HttpOptions;

/// Serves `/mcp` until the process ends.
pub async fn serve(
    engine: Arc<Engine>,
    options: HttpOptions,
    listener: tokio::net::TcpListener,
) -> std::io::Result<()> {
    let stateless = engine.new_session();
    let bodies = Arc::new(BodyBudget::new(engine.config.max_message_bytes));
    let state = Arc::new(HttpState {
        bodies,
        engine,
        options,
        sessions: Mutex::new(Sessions {
            by_id: HashMap::new(),
        }),
        stateless,
    });
    let sweeper = state.clone();
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(Duration::from_secs(30)).await;
            let idle = sweeper.options.session_idle;
            let mut s = sweeper.sessions.guard();
            s.by_id.retain(|id, (conn, last)| {
                let keep = last.elapsed() < idle;
                if !keep {
                    tracing::info!(session = %id, "http session expired");
                    conn.cancel_all();
                    let session = conn.session().clone();
                    tokio::spawn(async move { session.end().await });
                }
                keep
            });
        }
    });
    let app = Router::new()
        .route("/mcp", any(handle))
        .fallback(|| async {
            (
                StatusCode::NOT_FOUND,
                "cl-mcp-server: the MCP endpoint is /mcp\n",
            )
        })
        .with_state(state.clone());
    let limit = ConnectionLimit::new(state.engine.config.max_connections);
    loop {
        let (stream, peer) = accept(&listener, "http").await;
        let Some(slot) = limit.try_acquire() else {
            tracing::warn!(%peer, limit = limit.max, "http connection refused: connection limit reached");
            refuse(stream, busy_response(limit.max));
            continue;
        };
        let _ = stream.set_nodelay(true);
        let app = app.clone();
        let header_timeout = state.options.header_timeout;
        tokio::spawn(async move {
            let _slot = slot;
            let service = hyper::service::service_fn(move |request: Request<Incoming>| {
                let mut app = app.clone();
                async move { app.call(request.map(Body::new)).await }
            });
            let served = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(header_timeout)
                .serve_connection(TokioIo::new(stream), service)
                .await;
            if let Err(e) = served {
                tracing::debug!(%peer, error = %e, "http connection ended with an error");
            }
        });
    }
}

/// What a connection over `--max-connections` receives before it is closed.
fn busy_response(max: usize) -> Vec<u8> {
    let body = format!(
        "cl-mcp-server: the server already serves {max} connections (--max-connections); \
         try again later\n"
    );
    format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: text/plain; charset=utf-8\r\n\
         retry-after: 1\r\nconnection: close\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

async fn handle(State(state): State<Arc<HttpState>>, request: Request) -> Response {
    let headers = request.headers().clone();
    if let Err(r) = state.check_guards(&headers) {
        return *r;
    }
    match *request.method() {
        Method::POST => post(state, headers, request.into_body()).await,
        Method::DELETE => {
            let Some(id) = header_str(&headers, "mcp-session-id") else {
                return rpc_error_response(
                    StatusCode::BAD_REQUEST,
                    jsonrpc::INVALID_REQUEST,
                    "Invalid Request",
                    "DELETE needs the Mcp-Session-Id header",
                );
            };
            let removed = state.sessions.guard().by_id.remove(id);
            match removed {
                Some((conn, _)) => {
                    conn.cancel_all();
                    conn.session().end().await;
                    StatusCode::NO_CONTENT.into_response()
                }
                None => session_not_found(None, id),
            }
        }
        // No standalone server-to-client stream is offered.
        _ => {
            let mut r = StatusCode::METHOD_NOT_ALLOWED.into_response();
            r.headers_mut()
                .insert(header::ALLOW, HeaderValue::from_static("POST, DELETE"));
            r
        }
    }
}

async fn post(state: Arc<HttpState>, headers: HeaderMap, body: Body) -> Response {
    let (text, value) = match read_body(&state, &headers, body).await {
        Ok(b) => b,
        Err(r) => return r,
    };
    let shape = shape_of(&value);
    let request_id = request_id_of(&text, &value);
    if !shape.any_modern
        && header_str(&headers, "mcp-protocol-version") == Some(MODERN_VERSION)
        && header_str(&headers, "mcp-session-id").is_none()
        && value.get("method").is_some()
    {
        // A stateless request whose body lost its _meta: say so, with its id.
        return rpc_error_for(
            request_id.as_ref(),
            StatusCode::BAD_REQUEST,
            jsonrpc::INVALID_PARAMS,
            "Invalid params",
            &format!(
                "Missing params._meta `io.modelcontextprotocol/protocolVersion`: a {MODERN_VERSION} \
                 request carries its protocol version (and clientCapabilities) in params._meta"
            ),
        );
    }
    if shape.any_modern {
        if value.is_array() {
            return rpc_error_response(
                StatusCode::BAD_REQUEST,
                jsonrpc::INVALID_REQUEST,
                "Invalid Request",
                &format!("A {MODERN_VERSION} request must be posted alone, not in a batch"),
            );
        }
        return post_modern(state, headers, text, value).await;
    }
    post_legacy(state, headers, text, shape, request_id).await
}
