//! The two protocol eras and the rules that tell them apart:
//!
//! - Legacy era (2024-11-05 … 2025-11-25): an `initialize` handshake per
//!   connection, then requests.
//! - Modern era (2026-07-28, stateless): every request carries its protocol
//!   version and client capabilities in `_meta`; `server/discover` replaces the
//!   handshake; results carry `resultType`, cacheable ones `ttlMs` and
//!   `cacheScope`.

use serde_json::{json, Value};

use super::error::McpError;
use super::jsonrpc::{self, Message};
use crate::tools::LogLevel;

/// Legacy protocol versions, oldest first.
pub const LEGACY_VERSIONS: [&str; 4] = ["2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"];
/// The stateless protocol version.
pub const MODERN_VERSION: &str = "2026-07-28";

pub(crate) const META_VERSION: &str = "io.modelcontextprotocol/protocolVersion";
pub(crate) const META_CAPABILITIES: &str = "io.modelcontextprotocol/clientCapabilities";
pub(crate) const META_LOG_LEVEL: &str = "io.modelcontextprotocol/logLevel";

/// Every version this server speaks, newest first (the stateless one, then
/// the handshake-era ones a dual-era client can fall back to).
pub fn supported_versions() -> Vec<&'static str> {
    let mut v = vec![MODERN_VERSION];
    v.extend(LEGACY_VERSIONS.iter().rev());
    v
}

/// Which protocol era a request belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Era {
    Legacy,
    /// Stateless: with the log level the request asked for, if any.
    Modern {
        log_level: Option<LogLevel>,
    },
}

/// True for a stateless (2026-07-28) request.
pub(crate) fn is_modern(era: Era) -> bool {
    matches!(era, Era::Modern { .. })
}

/// Decides the era from `_meta`, refusing versions we do not speak.
pub fn request_era(msg: &Message) -> Result<Era, McpError> {
    let meta = msg.params.as_ref().and_then(|p| p.get("_meta"));
    let Some(version) = meta.and_then(|m| m.get(META_VERSION)) else {
        return Ok(Era::Legacy);
    };
    let Some(version) = version.as_str() else {
        return Err(McpError::invalid_params(format!(
            "_meta `{META_VERSION}` must be a string such as \"{MODERN_VERSION}\""
        )));
    };
    if version != MODERN_VERSION {
        return Err(McpError {
            code: jsonrpc::UNSUPPORTED_PROTOCOL_VERSION,
            message: "Unsupported protocol version",
            data: json!({ "supported": supported_versions(), "requested": version }),
        });
    }
    let meta = meta.unwrap();
    if !meta.get(META_CAPABILITIES).is_some_and(Value::is_object) {
        return Err(McpError::invalid_params(format!(
            "Missing _meta field `{META_CAPABILITIES}` (an object): protocol {MODERN_VERSION} requires it on every request"
        )));
    }
    let log_level = match meta.get(META_LOG_LEVEL) {
        None => None,
        Some(l) => Some(l.as_str().and_then(LogLevel::parse).ok_or_else(|| {
            McpError::invalid_params(format!(
                "_meta `{META_LOG_LEVEL}` must be one of debug, info, notice, warning, error, critical, alert, emergency"
            ))
        })?),
    };
    Ok(Era::Modern { log_level })
}

/// The client capabilities in a stateless request's `_meta` (null otherwise).
pub(crate) fn modern_client_capabilities(msg: &Message) -> Value {
    msg.params
        .as_ref()
        .and_then(|p| p.pointer("/_meta/io.modelcontextprotocol~1clientCapabilities"))
        .cloned()
        .unwrap_or(Value::Null)
}

/// `ping` and `logging/setLevel` were removed in 2026-07-28: a stateless
/// request for them is `-32601`.
pub(crate) fn refuse_removed(era: Era, method: &str) -> Result<(), McpError> {
    if is_modern(era) && matches!(method, "ping" | "logging/setLevel") {
        return Err(McpError::method_not_found(Value::String(format!(
            "Method '{method}' is not part of protocol {MODERN_VERSION} (it was removed); \
                 the log level of a {MODERN_VERSION} request is its _meta `{META_LOG_LEVEL}`"
        ))));
    }
    Ok(())
}

/// Who this server is, as both eras name it.
pub(crate) fn server_info() -> Value {
    json!({ "name": "cl-mcp-server", "version": env!("CARGO_PKG_VERSION") })
}

/// How long a stateless client may reuse a result, and with whom.
#[derive(Clone, Copy)]
pub(crate) enum Cache {
    /// The same for everyone for an hour (lists of tools, prompts, templates).
    Public,
    /// Private and not to be reused (project files, the live image).
    Private,
}

/// Adds the caching fields the 2026-07-28 era requires on cacheable results.
pub(crate) fn cache_hint(result: &mut Value, era: Era, cache: Cache) {
    if matches!(era, Era::Modern { .. }) {
        let (ttl, scope) = match cache {
            Cache::Public => (3_600_000, "public"),
            Cache::Private => (0, "private"),
        };
        result["ttlMs"] = json!(ttl);
        result["cacheScope"] = json!(scope);
    }
}

/// A stateless result says it is complete (unless it says otherwise) and
/// names the server.
pub(crate) fn finish_result(era: Era, result: &mut Value) {
    if is_modern(era) {
        if let Value::Object(m) = result {
            m.entry("resultType").or_insert(json!("complete"));
            // Stateless results identify the server on every response.
            m.insert(
                "_meta".into(),
                json!({ "io.modelcontextprotocol/serverInfo": server_info() }),
            );
        }
    }
}
