//! The resources family: `resources/list`, `resources/templates/list`,
//! `resources/read` (the fixtures first, then `lisp://` from the image,
//! else project files), and the legacy era's subscriptions.

use serde_json::{json, Value};

use crate::protocol::era::{cache_hint, is_modern, Cache};
use crate::protocol::error::McpError;
use crate::protocol::jsonrpc;
use crate::protocol::request::RequestCtx;
use crate::resources::ResourceError;
use crate::sync::MutexExt;

/// `resources/list`.
pub(super) async fn list(req: &RequestCtx, params: &Value) -> Result<Value, McpError> {
    // The walk reads directories (and ignore files): off the async
    // workers, like every file operation.
    let cursor = params
        .get("cursor")
        .and_then(Value::as_str)
        .map(str::to_string);
    let first_page = cursor.is_none();
    let session = req.conn.session.clone();
    let mut r =
        tokio::task::spawn_blocking(move || crate::resources::list(&session, cursor.as_deref()))
            .await
            .unwrap_or_else(|e| {
                Err(ResourceError::Invalid(format!(
                    "Listing the project failed: {e}"
                )))
            })
            .map_err(|e| McpError::invalid_params(e.to_string()))?;
    if first_page {
        if let Some(Value::Array(list)) = r.get_mut("resources") {
            list.extend(crate::fixtures::resources());
        }
    }
    cache_hint(&mut r, req.era, Cache::Private);
    Ok(r)
}

/// `resources/templates/list`.
pub(super) fn templates(req: &RequestCtx) -> Value {
    let mut templates = crate::resources::templates();
    if let Value::Array(list) = &mut templates {
        list.extend(crate::fixtures::templates());
    }
    let mut r = json!({ "resourceTemplates": templates });
    cache_hint(&mut r, req.era, Cache::Public);
    r
}

/// `resources/read`.
pub(super) async fn read(req: &RequestCtx, params: &Value) -> Result<Value, McpError> {
    let modern = is_modern(req.era);
    let uri = match params.get("uri") {
        Some(Value::String(s)) => s.clone(),
        Some(_) => return Err(McpError::invalid_params("uri must be a string")),
        None => return Err(McpError::invalid_params("Missing required field: uri")),
    };
    let read = if let Some(r) = crate::fixtures::read(&uri) {
        r
    } else if uri.starts_with("lisp://") {
        crate::resources::read_lisp_uri(req.conn.session.clone(), &uri).await
    } else {
        // File reads run off the async workers (see tools::off_workers).
        let session = req.conn.session.clone();
        let u = uri.clone();
        tokio::task::spawn_blocking(move || crate::resources::read_file_uri(&session, &u))
            .await
            .unwrap_or_else(|e| Err(ResourceError::Invalid(format!("The file read failed: {e}"))))
    };
    let mut r = read.map_err(|e| {
        // 2026-07-28 answers a missing resource with -32602 (both
        // eras name the URI in data, SEP-2164).
        match (e, modern) {
            (ResourceError::NotFound(msg), false) => McpError {
                code: jsonrpc::RESOURCE_NOT_FOUND,
                message: "Resource not found",
                data: json!({"uri": uri, "detail": msg}),
            },
            (ResourceError::NotFound(msg), true) => McpError {
                code: jsonrpc::INVALID_PARAMS,
                message: "Invalid params",
                data: json!({"uri": uri, "detail": msg}),
            },
            (other, _) => McpError::invalid_params(other.to_string()),
        }
    })?;
    cache_hint(&mut r, req.era, Cache::Private);
    Ok(r)
}

/// `resources/subscribe` and `resources/unsubscribe` (legacy era).
pub(super) fn subscribe(req: &RequestCtx, method: &str, params: &Value) -> Result<Value, McpError> {
    let uri = match params.get("uri") {
        Some(Value::String(s)) => s.clone(),
        Some(_) => return Err(McpError::invalid_params("uri must be a string")),
        None => return Err(McpError::invalid_params("Missing required field: uri")),
    };
    let mut lc = req.conn.lifecycle.guard();
    if method == "resources/unsubscribe" {
        lc.subscriptions.remove(&uri);
    } else if crate::fixtures::subscribable(&uri) {
        lc.subscriptions.insert(uri);
    } else {
        return Err(McpError {
            code: jsonrpc::RESOURCE_NOT_FOUND,
            message: "Resource not found",
            data: json!({"uri": uri, "detail": "only the test:// fixture resources can be subscribed to"}),
        });
    }
    Ok(json!({}))
}
