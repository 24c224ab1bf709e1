//! The logging family: `logging/setLevel` (legacy era), the image's
//! lifecycle notes forwarded as `notifications/message`, and the log sink a
//! tool call writes to (by `logging/setLevel` or the request's `_meta`).

use std::sync::Arc;

use serde_json::{json, Value};
use tokio::sync::broadcast;

use crate::image::NoteLevel;
use crate::protocol::era::Era;
use crate::protocol::error::McpError;
use crate::protocol::jsonrpc;
use crate::protocol::request::{ConnState, RequestCtx};
use crate::sync::MutexExt;
use crate::tools::LogLevel;

/// `logging/setLevel`: from the first one on, image notes are forwarded.
pub(super) fn set_level(req: &RequestCtx, params: &Value) -> Result<Value, McpError> {
    let level = params
        .get("level")
        .and_then(Value::as_str)
        .and_then(LogLevel::parse)
        .ok_or_else(|| {
            McpError::invalid_params(
                "level must be one of debug, info, notice, warning, error, critical, alert, emergency",
            )
        })?;
    let first = req
        .conn
        .lifecycle
        .guard()
        .log_level
        .replace(level)
        .is_none();
    if first {
        forward_image_notes(&req.conn);
    }
    Ok(json!({}))
}

pub(super) fn note_level(level: NoteLevel) -> LogLevel {
    match level {
        NoteLevel::Info => LogLevel::Info,
        NoteLevel::Warning => LogLevel::Warning,
        NoteLevel::Error => LogLevel::Error,
    }
}

/// From the first `logging/setLevel` on, the image's lifecycle notes
/// (started, core built, lost and why, crash loop) go to the client as
/// `notifications/message` at or above its level, between requests too.
pub(super) fn forward_image_notes(conn: &Arc<ConnState>) {
    let Some(mut rx) = conn.session.image_notes() else {
        return;
    };
    let weak = Arc::downgrade(conn);
    tokio::spawn(async move {
        loop {
            let note = match rx.recv().await {
                Ok(n) => n,
                Err(broadcast::error::RecvError::Lagged(_)) => continue,
                Err(broadcast::error::RecvError::Closed) => break,
            };
            let Some(conn) = weak.upgrade() else { break };
            let level = note_level(note.level);
            let threshold = conn.lifecycle.guard().log_level;
            if threshold.is_some_and(|t| level >= t) {
                let params =
                    json!({ "level": level.name(), "logger": "lisp-image", "data": note.text });
                let _ = conn
                    .notify
                    .send(jsonrpc::notification("notifications/message", &params));
            }
        }
    });
}

/// Log messages of a request reach the client when it asked for them: by
/// `logging/setLevel` (legacy) or the request's `_meta` log level (modern).
pub(super) fn log_sink(req: &RequestCtx) -> crate::tools::LogSink {
    let out = req.out.clone();
    let era = req.era;
    let conn: Arc<ConnState> = req.conn.clone();
    Arc::new(move |level: LogLevel, message: &str| {
        let threshold = match era {
            Era::Modern { log_level } => log_level,
            Era::Legacy => conn.lifecycle.guard().log_level,
        };
        if threshold.is_some_and(|t| level >= t) {
            let params =
                json!({ "level": level.name(), "logger": "cl-mcp-server", "data": message });
            let _ = out.send(jsonrpc::notification("notifications/message", &params));
        }
    })
}

/// Stateless requests have no connection to carry notes between calls:
/// what happens to the image during a call goes with the call's log, through
/// the task this returns (aborted when the call ends).
pub(super) fn notes_during_call(req: &RequestCtx) -> Option<tokio::task::JoinHandle<()>> {
    // Stateless requests have no connection to carry notes between calls:
    // what happens to the image during the call goes with the call's log.
    match req.era {
        Era::Modern { log_level: Some(_) } => req.conn.session.image_notes().map(|mut rx| {
            let sink = log_sink(req);
            tokio::spawn(async move {
                loop {
                    match rx.recv().await {
                        Ok(n) => sink(note_level(n.level), &n.text),
                        Err(broadcast::error::RecvError::Lagged(_)) => continue,
                        Err(broadcast::error::RecvError::Closed) => break,
                    }
                }
            })
        }),
        _ => None,
    }
}
