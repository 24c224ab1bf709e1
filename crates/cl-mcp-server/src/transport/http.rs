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
//!   (403; DNS-rebinding protection), an optional bearer token (401).

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
use futures::stream::{self, StreamExt};
use serde_json::Value;
use tokio::sync::mpsc;

use crate::protocol::jsonrpc;
use crate::protocol::mcp::{LEGACY_VERSIONS, MODERN_VERSION};
use crate::protocol::{Connection, Engine};

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
}

struct Sessions {
    by_id: HashMap<String, (Connection, Instant)>,
}

struct HttpState {
    engine: Arc<Engine>,
    options: HttpOptions,
    sessions: Mutex<Sessions>,
    stateless: Connection,
}

/// Serves `/mcp` until the process ends.
pub async fn serve(
    engine: Arc<Engine>,
    options: HttpOptions,
    listener: tokio::net::TcpListener,
) -> std::io::Result<()> {
    let (notify, _rx) = mpsc::unbounded_channel();
    let stateless = engine.connect(notify);
    let state = Arc::new(HttpState {
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
            let mut s = sweeper.sessions.lock().unwrap();
            s.by_id.retain(|id, (conn, last)| {
                let keep = last.elapsed() < idle;
                if !keep {
                    tracing::info!(session = %id, "http session expired");
                    conn.cancel_all();
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
        .with_state(state);
    axum::serve(listener, app).await
}

fn rpc_error_response(status: StatusCode, code: i64, message: &str, data: &str) -> Response {
    let body = jsonrpc::error(None, code, message, &Value::String(data.into()));
    (status, [(header::CONTENT_TYPE, "application/json")], body).into_response()
}

fn header_str<'a>(h: &'a HeaderMap, name: &str) -> Option<&'a str> {
    h.get(name).and_then(|v| v.to_str().ok())
}

fn is_loopback_host(host: &str) -> bool {
    matches!(host, "localhost" | "127.0.0.1" | "[::1]" | "::1")
}

/// Strips the port from a `Host`-style authority.
fn host_name(authority: &str) -> &str {
    if authority.starts_with('[') {
        return authority
            .split(']')
            .next()
            .map(|h| &authority[..h.len() + 1])
            .unwrap_or(authority);
    }
    authority
        .rsplit_once(':')
        .map(|(h, _)| h)
        .unwrap_or(authority)
}

impl HttpState {
    fn check_guards(&self, headers: &HeaderMap) -> Result<(), Box<Response>> {
        if let Some(origin) = header_str(headers, "origin") {
            let host = origin
                .split("://")
                .nth(1)
                .map(|rest| host_name(rest.split('/').next().unwrap_or(rest)))
                .unwrap_or("");
            let allowed =
                is_loopback_host(host) || self.options.allowed_origins.iter().any(|o| o == origin);
            if !allowed {
                return Err(Box::new(rpc_error_response(
                    StatusCode::FORBIDDEN,
                    jsonrpc::INVALID_REQUEST,
                    "Invalid Request",
                    &format!("Origin '{origin}' is not allowed (allow it with --allow-origin)"),
                )));
            }
        }
        if let Some(host) = header_str(headers, "host") {
            let name = host_name(host);
            let bind_ip = self.options.bind.ip().to_string();
            let allowed = is_loopback_host(name)
                || name == bind_ip
                || name.trim_matches(|c| c == '[' || c == ']') == bind_ip
                || self.options.allowed_hosts.iter().any(|h| h == name);
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
        let mut s = self.sessions.lock().unwrap();
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
            match state.sessions.lock().unwrap().by_id.remove(id) {
                Some((conn, _)) => {
                    conn.cancel_all();
                    StatusCode::NO_CONTENT.into_response()
                }
                None => session_not_found(id),
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

fn session_not_found(id: &str) -> Response {
    rpc_error_response(
        StatusCode::NOT_FOUND,
        jsonrpc::INVALID_REQUEST,
        "Invalid Request",
        &format!("Unknown or expired session '{id}': start a new one with initialize"),
    )
}

/// What kind of messages a POST body holds.
struct BodyShape {
    has_requests: bool,
    is_initialize: bool,
    is_modern: bool,
}

fn shape_of(value: &Value) -> BodyShape {
    let items: Vec<&Value> = match value {
        Value::Array(a) => a.iter().collect(),
        v => vec![v],
    };
    let mut shape = BodyShape {
        has_requests: false,
        is_initialize: false,
        is_modern: false,
    };
    for m in items {
        let has_method = m.get("method").is_some();
        if m.get("id").is_some() || !has_method {
            // Requests, and anything invalid (it gets an error response).
            shape.has_requests = true;
        }
        if m.get("method").and_then(Value::as_str) == Some("initialize") {
            shape.is_initialize = true;
        }
        if m.pointer("/params/_meta/io.modelcontextprotocol~1protocolVersion")
            .is_some()
        {
            shape.is_modern = true;
        }
    }
    if matches!(value, Value::Array(a) if a.is_empty()) {
        shape.has_requests = true;
    }
    shape
}

async fn post(state: Arc<HttpState>, headers: HeaderMap, body: Body) -> Response {
    let limit = state.engine.config.max_message_bytes;
    let bytes: Bytes = match axum::body::to_bytes(body, limit).await {
        Ok(b) => b,
        Err(_) => {
            return rpc_error_response(
                StatusCode::PAYLOAD_TOO_LARGE,
                jsonrpc::PARSE_ERROR,
                "Parse error",
                &format!("Message exceeds the {limit}-byte limit"),
            )
        }
    };
    let text = match std::str::from_utf8(&bytes) {
        Ok(t) => t,
        Err(e) => {
            return rpc_error_response(
                StatusCode::BAD_REQUEST,
                jsonrpc::PARSE_ERROR,
                "Parse error",
                &format!("Message is not valid UTF-8: {e}"),
            )
        }
    };
    let value: Value = match serde_json::from_str(text) {
        Ok(v) => v,
        Err(e) => {
            return rpc_error_response(
                StatusCode::BAD_REQUEST,
                jsonrpc::PARSE_ERROR,
                "Parse error",
                &e.to_string(),
            )
        }
    };
    let shape = shape_of(&value);
    let session_header = header_str(&headers, "mcp-session-id").map(str::to_string);

    if let Some(v) = header_str(&headers, "mcp-protocol-version") {
        if v != MODERN_VERSION && !LEGACY_VERSIONS.contains(&v) {
            return rpc_error_response(
                StatusCode::BAD_REQUEST,
                jsonrpc::INVALID_REQUEST,
                "Invalid Request",
                &format!("Unsupported MCP-Protocol-Version header '{v}'"),
            );
        }
    }

    let mut new_session: Option<String> = None;
    let conn = if shape.is_modern && session_header.is_none() {
        state.stateless.clone()
    } else if shape.is_initialize && session_header.is_none() {
        let (notify, _rx) = mpsc::unbounded_channel();
        let conn = state.engine.connect(notify);
        new_session = Some(new_session_id());
        conn
    } else {
        match &session_header {
            None => {
                return rpc_error_response(
                    StatusCode::BAD_REQUEST,
                    jsonrpc::INVALID_REQUEST,
                    "Invalid Request",
                    "Missing Mcp-Session-Id header: send initialize first, or make the request stateless (_meta with io.modelcontextprotocol/protocolVersion)",
                )
            }
            Some(id) => match state.session(id) {
                Some(c) => c,
                None => return session_not_found(id),
            },
        }
    };

    let (tx, mut rx) = mpsc::unbounded_channel::<String>();
    conn.handle_text(text, &tx);
    drop(tx);

    if let Some(id) = &new_session {
        if conn.is_initialized() {
            state
                .sessions
                .lock()
                .unwrap()
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
    let Some(first) = rx.recv().await else {
        let mut r = StatusCode::ACCEPTED.into_response();
        add_session_header(&mut r, new_session.as_deref());
        return r;
    };
    // Only one message (the response): plain JSON.
    let second = if is_final(&first) {
        None
    } else {
        rx.recv().await
    };
    let mut response = match second {
        None => json_response(first),
        Some(second) if !accepts_sse => {
            // The client cannot read a stream: answer with the response only.
            let mut last = second;
            if !is_final(&last) {
                while let Some(m) = rx.recv().await {
                    last = m;
                    if is_final(&last) {
                        break;
                    }
                }
            }
            json_response(last)
        }
        Some(second) => {
            let head = stream::iter(vec![first, second]);
            let tail = stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|m| (m, rx)) });
            let events = head.chain(tail).map(|m| {
                Ok::<_, std::convert::Infallible>(Event::default().event("message").data(m))
            });
            Sse::new(events)
                .keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
                .into_response()
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

/// A session id no one can guess: 128 random bits from the OS.
fn new_session_id() -> String {
    use std::io::Read;
    let mut bytes = [0u8; 16];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .expect("/dev/urandom is readable");
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
