//! The lifecycle family: the legacy handshake (`initialize`, and refusing
//! requests before it), `ping`, and the stateless era's `server/discover`.

use std::path::PathBuf;

use serde_json::{json, Map, Value};

use crate::protocol::era::{
    server_info, supported_versions, Era, LEGACY_VERSIONS, META_CAPABILITIES, META_VERSION,
    MODERN_VERSION,
};
use crate::protocol::error::McpError;
use crate::protocol::jsonrpc::{self, Message};
use crate::protocol::request::{ConnState, RequestCtx};
use crate::protocol::tasks;
use crate::sync::MutexExt;

/// Guidance for the model, sent in `initialize` and `server/discover`.
pub const INSTRUCTIONS: &str = "This server gives you a live Common Lisp image (through Swank: SBCL by default, or ECL, CLISP, ABCL, CCL) and \
Lisp-aware source tools. Work REPL-first: explore with code-describe/code-find/code-apropos, try code \
with evaluate-lisp (state persists between calls; *package* too), then persist changes in files with \
lisp-edit-form (structural, keeps the file readable) and verify with lisp-compile-file or \
asdf-load-system/asdf-test-system. Read Lisp files with lisp-read-file (collapsed view first) and \
search them with clgrep-search. File paths are relative to the project root (fs-get-project-info). Long evaluations can be cancelled; timeouts never lose the image's state. \
A session may run several images (image-start: any installed Lisp, named): every tool that uses the image takes `image` \
(a name from image-list; default the first), and asdf-test-system/asdf-load-system take `lisps` to run on several at once.";

/// Refuses requests that arrive before the legacy handshake.
pub(crate) fn check_ready(conn: &ConnState, msg: &Message, era: Era) -> Result<(), McpError> {
    if era != Era::Legacy {
        return Ok(());
    }
    match msg.method.as_str() {
        "ping" => Ok(()),
        "server/discover" => Err(McpError::invalid_params(format!(
            "server/discover is a stateless (MCP {MODERN_VERSION}) request: put `{META_VERSION}` and `{META_CAPABILITIES}` in params._meta"
        ))),
        _ if conn.lifecycle.guard().legacy_version.is_some() => Ok(()),
        _ => Err(McpError::invalid_params(format!(
            "The server is not initialized. Either send `initialize` first (MCP {} and earlier), or make the request \
stateless by putting `{META_VERSION}: \"{MODERN_VERSION}\"` and `{META_CAPABILITIES}` in params._meta (MCP {MODERN_VERSION}).",
            LEGACY_VERSIONS[3]
        ))),
    }
}

/// The legacy handshake.
pub(crate) fn initialize(conn: &ConnState, msg: &Message, era: Era) -> Result<Value, McpError> {
    if era != Era::Legacy {
        return Err(McpError {
            code: jsonrpc::METHOD_NOT_FOUND,
            message: "Method not found",
            data: json!(format!(
                "initialize is not part of protocol {MODERN_VERSION}: send requests with their _meta directly (server/discover tells what this server supports)"
            )),
        });
    }
    let params = msg.params.as_ref().and_then(Value::as_object);
    let requested = match params.and_then(|p| p.get("protocolVersion")) {
        Some(Value::String(v)) => v.clone(),
        Some(_) => {
            return Err(McpError::invalid_params(
                "protocolVersion must be a string such as \"2025-11-25\"",
            ))
        }
        None => {
            return Err(McpError::invalid_params(
                "Missing required field: protocolVersion",
            ))
        }
    };
    let mut lc = conn.lifecycle.guard();
    if lc.legacy_version.is_some() {
        return Err(McpError {
            code: jsonrpc::INVALID_REQUEST,
            message: "Invalid Request",
            data: json!("already initialized"),
        });
    }
    let version = if LEGACY_VERSIONS.contains(&requested.as_str()) {
        requested
    } else {
        LEGACY_VERSIONS[LEGACY_VERSIONS.len() - 1].to_string()
    };
    lc.legacy_version = Some(version.clone());
    lc.client_capabilities = params
        .and_then(|p| p.get("capabilities"))
        .cloned()
        .unwrap_or(Value::Null);
    drop(lc);
    if let Some(root) = params.and_then(client_root) {
        conn.session.adopt_client_root(&root);
    }
    // The image starts in the background; the handshake never waits for it.
    conn.session.warm_up();
    tracing::info!(protocol = %version, "initialized");
    Ok(json!({
        "protocolVersion": version,
        "capabilities": capabilities(Era::Legacy),
        "serverInfo": server_info(),
        "instructions": INSTRUCTIONS,
    }))
}

/// `rootUri` (a file:// URI) or `rootPath` from `initialize`. A `rootUri`
/// that names no usable path (broken escapes, not UTF-8, not local) is
/// logged and passed over: the handshake is answered all the same.
fn client_root(params: &Map<String, Value>) -> Option<PathBuf> {
    if let Some(uri) = params.get("rootUri").and_then(Value::as_str) {
        match crate::uri::file_uri_path(uri) {
            Ok(path) => return Some(path),
            Err(e) => {
                tracing::warn!(uri, error = %e, "rootUri is not a usable project root; ignored")
            }
        }
    }
    params
        .get("rootPath")
        .and_then(Value::as_str)
        .map(PathBuf::from)
}

/// What this server offers. Resource subscriptions exist only in the legacy
/// era (2026-07-28 removed `resources/subscribe`) and only for resources that
/// can change (the test fixtures; see `fixtures::SUBSCRIPTIONS`). Tasks
/// are the `tasks` capability in the legacy era and the
/// `io.modelcontextprotocol/tasks` extension in 2026-07-28 (SEP-2663).
fn capabilities(era: Era) -> Value {
    let subscribe = crate::fixtures::SUBSCRIPTIONS && era == Era::Legacy;
    let mut caps = json!({
        "tools": { "listChanged": false },
        "prompts": { "listChanged": false },
        "resources": { "listChanged": false, "subscribe": subscribe },
        "completions": {},
        "logging": {},
    });
    if era == Era::Legacy {
        caps["tasks"] =
            json!({ "list": {}, "cancel": {}, "requests": { "tools": { "call": {} } } });
    } else {
        caps["extensions"] = json!({ tasks::EXTENSION: {} });
    }
    caps
}

/// `server/discover`: what a stateless client needs instead of a handshake.
pub(super) fn discover(req: &RequestCtx) -> Value {
    req.conn.session.warm_up();
    json!({
        "supportedVersions": supported_versions(),
        "capabilities": capabilities(req.era),
        "serverInfo": server_info(),
        "instructions": INSTRUCTIONS,
        "ttlMs": 3_600_000,
        "cacheScope": "public",
    })
}
