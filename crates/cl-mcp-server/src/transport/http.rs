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

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::any;
use axum::Router;
use futures::stream;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use serde_json::Value;
use tokio_util::sync::CancellationToken;
use tower_service::Service;

use super::listen::{accept, refuse, ConnectionLimit};
use crate::protocol::era::{LEGACY_VERSIONS, MODERN_VERSION};
use crate::protocol::jsonrpc;
use crate::protocol::outbound::{self, OutboundRx};
use crate::protocol::{Connection, Engine};
use crate::session::Session;
use crate::sync::MutexExt;

/// Settings of the HTTP transport.
#[derive(Clone, Debug)]
pub struct HttpOptions {
    pub bind: SocketAddr,
    /// Required bearer token, if any.
    pub token: Option<String>,
    /// Extra allowed `Origin` values (loopback origins are always allowed).
    pub allowed_origins: Vec<String>,
    /// Extra allowed `Host` names (loopback names and the bind address are
    /// always allowed).
    pub allowed_hosts: Vec<String>,
    /// A legacy session idle this long is forgotten (404 afterwards).
    pub session_idle: Duration,
    /// A connection's request headers must all arrive within this (counted
    /// from when the server starts waiting for them); else it is closed.
    pub header_timeout: Duration,
    /// A request's body must all arrive within this after its headers.
    pub body_timeout: Duration,
}

struct Sessions {
    by_id: HashMap<String, (Connection, Instant)>,
}

struct HttpState {
    engine: Arc<Engine>,
    options: HttpOptions,
    sessions: Mutex<Sessions>,
    /// The one session stateless requests share (project root, image).
    stateless: Arc<Session>,
    /// Bytes of request bodies being received, across all connections.
    bodies: Arc<BodyBudget>,
}

/// A server-wide bound on request bodies held in memory while they arrive:
/// the larger of 64 MiB and one `--max-message-bytes` body. A body that
/// would pass it is answered 503, so slow or stalled uploads cannot add up.
struct BodyBudget {
    held: std::sync::atomic::AtomicUsize,
    max: usize,
}

impl BodyBudget {
    fn new(max_message_bytes: usize) -> BodyBudget {
        BodyBudget {
            held: Default::default(),
            max: max_message_bytes.max(64 * 1024 * 1024),
        }
    }
}

/// What one body holds of the [`BodyBudget`]; given back when dropped.
struct BodyShare<'a> {
    budget: &'a BodyBudget,
    held: usize,
}

impl BodyShare<'_> {
    fn grow(&mut self, n: usize) -> bool {
        use std::sync::atomic::Ordering;
        let before = self.budget.held.fetch_add(n, Ordering::AcqRel);
        if before + n > self.budget.max {
            self.budget.held.fetch_sub(n, Ordering::AcqRel);
            return false;
        }
        self.held += n;
        true
    }
}

impl Drop for BodyShare<'_> {
    fn drop(&mut self) {
        self.budget
            .held
            .fetch_sub(self.held, std::sync::atomic::Ordering::AcqRel);
    }
}

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

fn rpc_error_response(status: StatusCode, code: i64, message: &str, data: &str) -> Response {
    rpc_error_for(None, status, code, message, data)
}

/// A transport-level rejection of a request whose body was read: the error
/// carries the request's id, so the client's call does not wait forever.
fn rpc_error_for(
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
fn request_id_of(text: &str, value: &Value) -> Option<jsonrpc::RequestId> {
    if value.is_object() && value.get("method").is_some() {
        jsonrpc::sniff_id(text.as_bytes())
    } else {
        None
    }
}

fn header_str<'a>(h: &'a HeaderMap, name: &str) -> Option<&'a str> {
    h.get(name).and_then(|v| v.to_str().ok())
}

fn is_loopback_host(host: &str) -> bool {
    matches!(host, "localhost" | "127.0.0.1" | "[::1]")
}

/// The host of an authority `host[:port]`, lowercased, when the whole text
/// is exactly that: a registered name or IPv4 address (letters, digits, `-`,
/// `.`), or an IPv6 address in brackets; an optional port of digits only.
/// Anything else (userinfo `@`, a path, a second colon, a non-numeric port)
/// is refused, so `localhost:80@evil.example` or `localhost:3000.evil.example`
/// never pass for `localhost`.
fn authority_host(authority: &str) -> Option<String> {
    let (host, port) = if let Some(rest) = authority.strip_prefix('[') {
        let (inside, after) = rest.split_once(']')?;
        let ip = inside.parse::<std::net::Ipv6Addr>().ok()?;
        let port = match after {
            "" => None,
            p => Some(p.strip_prefix(':')?),
        };
        (format!("[{ip}]"), port)
    } else {
        let (host, port) = match authority.split_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (authority, None),
        };
        let name_ok = !host.is_empty()
            && host
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.');
        if !name_ok {
            return None;
        }
        (host.to_ascii_lowercase(), port)
    };
    if let Some(p) = port {
        if p.is_empty() || p.len() > 5 || !p.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        p.parse::<u16>().ok()?;
    }
    Some(host)
}

/// The host of an `Origin` header (`scheme://host[:port]`, nothing more).
fn origin_host(origin: &str) -> Option<String> {
    let (scheme, authority) = origin.split_once("://")?;
    let scheme_ok = scheme
        .bytes()
        .next()
        .is_some_and(|b| b.is_ascii_alphabetic())
        && scheme
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"+-.".contains(&b));
    if !scheme_ok {
        return None;
    }
    authority_host(authority)
}

impl HttpState {
    fn check_guards(&self, headers: &HeaderMap) -> Result<(), Box<Response>> {
        if let Some(origin) = headers.get("origin") {
            let origin = origin.to_str().unwrap_or("");
            let allowed = origin_host(origin).is_some_and(|h| is_loopback_host(&h))
                || self.options.allowed_origins.iter().any(|o| o == origin);
            if !allowed {
                return Err(Box::new(rpc_error_response(
                    StatusCode::FORBIDDEN,
                    jsonrpc::INVALID_REQUEST,
                    "Invalid Request",
                    &format!("Origin '{origin}' is not allowed (allow it with --allow-origin)"),
                )));
            }
        }
        if let Some(host) = headers.get("host") {
            let host = host.to_str().unwrap_or("");
            let bind_ip = match self.options.bind.ip() {
                std::net::IpAddr::V4(ip) => ip.to_string(),
                std::net::IpAddr::V6(ip) => format!("[{ip}]"),
            };
            let allowed = authority_host(host).is_some_and(|name| {
                is_loopback_host(&name)
                    || name == bind_ip
                    || self
                        .options
                        .allowed_hosts
                        .iter()
                        .any(|h| h.eq_ignore_ascii_case(&name))
            });
            if !allowed {
                return Err(Box::new(rpc_error_response(
                    StatusCode::FORBIDDEN,
                    jsonrpc::INVALID_REQUEST,
                    "Invalid Request",
                    &format!("Host '{host}' is not allowed (allow it with --allow-host)"),
                )));
            }
        }
        if let Some(token) = &self.options.token {
            let given =
                header_str(headers, "authorization").and_then(|v| v.strip_prefix("Bearer "));
            if given != Some(token.as_str()) {
                let mut r = rpc_error_response(
                    StatusCode::UNAUTHORIZED,
                    jsonrpc::INVALID_REQUEST,
                    "Invalid Request",
                    "Missing or wrong bearer token (Authorization: Bearer <token>)",
                );
                r.headers_mut()
                    .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
                return Err(Box::new(r));
            }
        }
        Ok(())
    }

    fn session(&self, id: &str) -> Option<Connection> {
        let mut s = self.sessions.guard();
        let entry = s.by_id.get_mut(id)?;
        entry.1 = Instant::now();
        Some(entry.0.clone())
    }
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

fn session_not_found(request: Option<&jsonrpc::RequestId>, id: &str) -> Response {
    rpc_error_for(
        request,
        StatusCode::NOT_FOUND,
        jsonrpc::INVALID_REQUEST,
        "Invalid Request",
        &format!("Unknown or expired session '{id}': start a new one with initialize"),
    )
}

/// What kind of messages a POST body holds.
struct BodyShape {
    /// Something in it will be answered: a request, or an invalid message.
    has_requests: bool,
    is_initialize: bool,
    /// Some message carries the stateless era's `_meta`.
    any_modern: bool,
}

fn is_modern(m: &Value) -> bool {
    m.pointer("/params/_meta/io.modelcontextprotocol~1protocolVersion")
        .is_some()
}

fn shape_of(value: &Value) -> BodyShape {
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

async fn read_body(
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

/// The stateless era: validate the routing headers against the body, run
/// the request on a connection of its own (over the shared stateless
/// session), and cancel it if the client goes away before the answer.
async fn post_modern(
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
            "code": HEADER_MISMATCH, "message": "Header mismatch", "data": problem}});
        return (
            StatusCode::BAD_REQUEST,
            [(header::CONTENT_TYPE, "application/json")],
            body.to_string(),
        )
            .into_response();
    }
    let (notify, _) = outbound::channel();
    let conn = state.engine.connect_to(state.stateless.clone(), notify);
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

/// HTTP status for a JSON-RPC answer in the stateless era.
fn status_for(message: &str) -> StatusCode {
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
const HEADER_MISMATCH: i64 = -32020;

/// `MCP-Protocol-Version`, `Mcp-Method` and (for named methods) `Mcp-Name`
/// must repeat what the body says.
fn check_modern_headers(headers: &HeaderMap, body: &Value) -> Result<(), String> {
    for name in ["mcp-protocol-version", "mcp-method", "mcp-name"] {
        if headers.get_all(name).iter().count() > 1 {
            return Err(format!("The {name} header appears more than once"));
        }
    }
    let meta_version = body
        .pointer("/params/_meta/io.modelcontextprotocol~1protocolVersion")
        .and_then(Value::as_str);
    let header_version = header_str(headers, "mcp-protocol-version");
    if header_version.is_none() || header_version != meta_version {
        return Err(format!(
            "The MCP-Protocol-Version header ({}) must equal _meta's io.modelcontextprotocol/protocolVersion ({})",
            header_version.unwrap_or("missing"),
            meta_version.unwrap_or("missing")
        ));
    }
    let method = body.get("method").and_then(Value::as_str);
    if header_str(headers, "mcp-method") != method {
        return Err(format!(
            "The Mcp-Method header ({}) must equal the body's method ({})",
            header_str(headers, "mcp-method").unwrap_or("missing"),
            method.unwrap_or("missing")
        ));
    }
    let name_key = match method {
        Some("tools/call" | "prompts/get") => Some("name"),
        Some("resources/read") => Some("uri"),
        // The tasks extension routes by task (SEP-2663).
        Some("tasks/get" | "tasks/update" | "tasks/cancel") => Some("taskId"),
        _ => None,
    };
    if let Some(key) = name_key {
        if let Some(expected) = body
            .pointer(&format!("/params/{key}"))
            .and_then(Value::as_str)
        {
            let given = header_str(headers, "mcp-name").and_then(decode_header_value);
            if given.as_deref() != Some(expected) {
                return Err(format!(
                    "The Mcp-Name header must equal the body's params.{key} ({expected})"
                ));
            }
        }
    }
    Ok(())
}

/// SEP-2243: each argument of a `tools/call` whose schema property carries
/// `x-mcp-header: NAME` must be mirrored in an `Mcp-Param-NAME` header
/// (absent exactly when the argument is absent or null), equal to it once
/// decoded. Tools without such parameters need no headers.
fn check_param_headers(
    headers: &HeaderMap,
    body: &Value,
    tools: &crate::tools::ToolRegistry,
) -> Result<(), String> {
    if body.get("method").and_then(Value::as_str) != Some("tools/call") {
        return Ok(());
    }
    let Some(tool) = body
        .pointer("/params/name")
        .and_then(Value::as_str)
        .and_then(|n| tools.get(n))
    else {
        return Ok(());
    };
    for (param, name) in tool.param_headers() {
        let header = format!("mcp-param-{}", name.to_ascii_lowercase());
        if headers.get_all(header.as_str()).iter().count() > 1 {
            return Err(format!(
                "The Mcp-Param-{name} header appears more than once"
            ));
        }
        let given = header_str(headers, &header);
        let argument = body
            .pointer(&format!("/params/arguments/{param}"))
            .filter(|v| !v.is_null());
        match (argument, given) {
            (None, None) => {}
            (None, Some(_)) => {
                return Err(format!(
                    "The Mcp-Param-{name} header is set but the argument `{param}` is absent"
                ))
            }
            (Some(_), None) => {
                return Err(format!(
                    "The argument `{param}` must be mirrored in an Mcp-Param-{name} header"
                ))
            }
            (Some(arg), Some(h)) => {
                let decoded = decode_header_value(h).ok_or_else(|| {
                    format!("The Mcp-Param-{name} header is not valid =?base64?...?= UTF-8")
                })?;
                let same = match arg {
                    Value::String(s) => *s == decoded,
                    Value::Bool(b) => decoded == b.to_string(),
                    Value::Number(n) => match (n.as_f64(), decoded.trim().parse::<f64>()) {
                        (Some(a), Ok(b)) => (a - b).abs() <= 1e-9 * a.abs().max(b.abs()),
                        _ => false,
                    },
                    _ => false,
                };
                if !same {
                    return Err(format!(
                        "The Mcp-Param-{name} header must equal the argument `{param}`"
                    ));
                }
            }
        }
    }
    Ok(())
}

/// A header value, decoding the `=?base64?...?=` form used for values that
/// are not plain visible ASCII (strict: padded, base64 alphabet only).
fn decode_header_value(v: &str) -> Option<String> {
    match v
        .strip_prefix("=?base64?")
        .and_then(|r| r.strip_suffix("?="))
    {
        None => Some(v.to_string()),
        Some(payload) => String::from_utf8(base64_decode(payload)?).ok(),
    }
}

fn base64_decode(s: &str) -> Option<Vec<u8>> {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    // Whole quads, with `=` only as the padding of the last one.
    let body = s.trim_end_matches('=');
    if !s.len().is_multiple_of(4) || s.len() - body.len() > 2 {
        return None;
    }
    let s = body;
    let mut out = Vec::with_capacity(s.len() * 3 / 4);
    let (mut acc, mut bits) = (0u32, 0u32);
    for c in s.bytes() {
        let v = ALPHABET.iter().position(|&a| a == c)? as u32;
        acc = (acc << 6) | v;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
            acc &= (1 << bits) - 1;
        }
    }
    Some(out)
}

/// Cancels the requests of one POST unless disarmed: dropped with the
/// response (the client went away) before the final answer was sent.
struct CancelOnDrop(Vec<CancellationToken>);

impl CancelOnDrop {
    fn disarm(&mut self) {
        self.0.clear();
    }
}

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        let running: Vec<_> = self.0.drain(..).filter(|c| !c.is_cancelled()).collect();
        if !running.is_empty() {
            tracing::info!(
                requests = running.len(),
                "client closed the request's stream; cancelling it"
            );
            for c in running {
                c.cancel();
            }
        }
    }
}

/// An SSE response: `first`, then messages from `rx`, ending after the
/// final answer; `guard` cancels the request if the stream is dropped early.
fn sse_until_final(first: String, rx: OutboundRx, guard: CancelOnDrop) -> Response {
    struct StreamState {
        pending: Option<String>,
        rx: OutboundRx,
        guard: CancelOnDrop,
        done: bool,
    }
    let state = StreamState {
        pending: Some(first),
        rx,
        guard,
        done: false,
    };
    let events = stream::unfold(state, |mut st| async move {
        if st.done {
            return None;
        }
        let message = match st.pending.take() {
            Some(m) => m,
            None => match st.rx.recv().await {
                Some(m) => m,
                None => {
                    st.guard.disarm();
                    return None;
                }
            },
        };
        if is_final(&message) {
            st.done = true;
            st.guard.disarm();
        }
        let event = Event::default().event("message").data(message);
        Some((Ok::<_, std::convert::Infallible>(event), st))
    });
    let mut response = Sse::new(events)
        .keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
        .into_response();
    response
        .headers_mut()
        .insert("x-accel-buffering", HeaderValue::from_static("no"));
    response
}

/// The handshake era: sessions keyed by `Mcp-Session-Id`.
async fn post_legacy(
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

/// A response (or batch of responses) rather than a notification.
fn is_final(message: &str) -> bool {
    match serde_json::from_str::<Value>(message) {
        Ok(Value::Object(m)) => !m.contains_key("method"),
        _ => true,
    }
}

fn json_response(body: String) -> Response {
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "application/json")],
        body,
    )
        .into_response()
}

fn add_session_header(r: &mut Response, id: Option<&str>) {
    if let Some(id) = id.and_then(|i| HeaderValue::from_str(i).ok()) {
        r.headers_mut().insert("mcp-session-id", id);
    }
}
