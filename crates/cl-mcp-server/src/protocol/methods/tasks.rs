//! The `tasks/*` methods, per era: the legacy era's `tasks/get`,
//! `tasks/result`, `tasks/list`, `tasks/cancel`; the 2026-07-28 tasks
//! extension's `tasks/get`, `tasks/update`, `tasks/cancel`.

use std::sync::Arc;

use serde_json::{json, Value};

use super::task_runner::{declares_tasks_extension, missing_tasks_extension, RELATED_TASK};
use crate::protocol::era::{Era, MODERN_VERSION};
use crate::protocol::error::McpError;
use crate::protocol::jsonrpc;
use crate::protocol::request::RequestCtx;
use crate::protocol::tasks::Task;

/// A `tasks/*` request of the 2026-07-28 tasks extension.
pub(super) fn modern(req: &RequestCtx, method: &str, params: &Value) -> Result<Value, McpError> {
    Ok(match method {
        "tasks/get" => {
            require_tasks_extension(req)?;
            task_of(req, params)?.detailed_v2()
        }
        "tasks/update" => {
            require_tasks_extension(req)?;
            let task = task_of(req, params)?;
            match params.get("inputResponses") {
                Some(Value::Object(responses)) => task.answer_input(responses),
                _ => {
                    return Err(McpError::invalid_params(
                        "inputResponses must be an object mapping the keys of the task's \
                     inputRequests to the client's results",
                    ))
                }
            }
            json!({})
        }
        "tasks/cancel" => {
            require_tasks_extension(req)?;
            // Cancelling a task that already ended is acknowledged alike.
            let _ = task_of(req, params)?.cancel();
            json!({})
        }
        // `tasks/result` and `tasks/list`.
        other => {
            return Err(McpError::method_not_found(Value::String(format!(
                "{other} is not part of the {MODERN_VERSION} tasks extension: tasks/get returns \
                     a task's result once it has one"
            ))))
        }
    })
}

/// A legacy-era `tasks/*` request.
pub(super) async fn legacy(
    req: &RequestCtx,
    method: &str,
    params: &Value,
) -> Result<Value, McpError> {
    Ok(match method {
        "tasks/get" => task_of(req, params)?.to_json(),
        "tasks/result" => {
            let task = task_of(req, params)?;
            let outcome = task.outcome().await;
            task.mark_collected();
            match outcome {
                Ok(mut r) => {
                    r["_meta"][RELATED_TASK] = json!({ "taskId": task.id });
                    r
                }
                Err(e) => return Err(e),
            }
        }
        "tasks/list" => {
            let cursor = match params.get("cursor") {
                None | Some(Value::Null) => None,
                Some(Value::String(c)) => Some(c.as_str()),
                Some(_) => return Err(McpError::invalid_params("cursor must be a string")),
            };
            let (tasks, next) = req
                .conn
                .tasks()
                .list(cursor)
                .map_err(|e| McpError::invalid_params(e.to_string()))?;
            let mut r = json!({ "tasks": tasks });
            if let Some(n) = next {
                r["nextCursor"] = Value::String(n);
            }
            r
        }
        "tasks/cancel" => {
            let task = task_of(req, params)?;
            task.cancel().map_err(|status| {
                McpError::invalid_params(format!(
                    "task {} already ended ({status:?}); only a working task can be cancelled",
                    task.id
                ))
            })?;
            notify_task_status(req, &task);
            task.to_json()
        }
        other => unreachable!("dispatch routes only tasks methods here, not {other}"),
    })
}

/// `tasks/get`, `tasks/update` and `tasks/cancel` of 2026-07-28 are for
/// requests whose capabilities declare the tasks extension.
fn require_tasks_extension(req: &RequestCtx) -> Result<(), McpError> {
    if declares_tasks_extension(&req.client_capabilities()) {
        Ok(())
    } else {
        Err(missing_tasks_extension(
            "tasks/* methods belong to the tasks extension",
        ))
    }
}

/// The task named by `params.taskId` in this session.
fn task_of(req: &RequestCtx, params: &Value) -> Result<Arc<Task>, McpError> {
    let id = match params.get("taskId") {
        Some(Value::String(s)) => s,
        Some(_) => return Err(McpError::invalid_params("taskId must be a string")),
        None => return Err(McpError::invalid_params("Missing required field: taskId")),
    };
    req.conn.tasks().get(id).ok_or_else(|| {
        McpError::invalid_params(format!(
            "Failed to retrieve task: no task '{id}' in this session (unknown, or its ttl expired)"
        ))
    })
}

/// Tells a legacy client its task changed status (optional in the spec;
/// clients poll anyway).
fn notify_task_status(req: &RequestCtx, task: &Task) {
    if req.era == Era::Legacy {
        let _ = req.conn.notify.send(jsonrpc::notification(
            "notifications/tasks/status",
            &task.to_json(),
        ));
    }
}
