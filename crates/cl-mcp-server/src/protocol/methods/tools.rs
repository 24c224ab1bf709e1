//! The tools family: `tools/list` and `tools/call` (approval, required
//! client capabilities, progress, logs, input rounds); a call that runs as
//! a task goes on to the task runner.

use std::sync::Arc;

use serde_json::{json, Map, Value};

use super::logging::{log_sink, notes_during_call};
use super::task_runner::{
    call_tool_as_task, declares_tasks_extension, missing_tasks_extension, start_task,
};
use crate::protocol::approval;
use crate::protocol::era::{cache_hint, is_modern, Cache};
use crate::protocol::error::McpError;
use crate::protocol::input;
use crate::protocol::jsonrpc;
use crate::protocol::request::{ConnState, RequestCtx};
use crate::sync::MutexExt;
use crate::tools::{TaskSupport, ToolDef, ToolOutput};

/// `tools/list`: the array described once by the engine.
pub(super) fn list(req: &RequestCtx) -> Value {
    let tools = req.conn.engine.tools_list.clone();
    let mut r = json!({ "tools": tools });
    cache_hint(&mut r, req.era, Cache::Public);
    r
}

/// `tools/call`.
pub(super) async fn call_tool(req: &RequestCtx, params: Value) -> Result<Value, McpError> {
    // `params` keeps `inputResponses` and `requestState` of a retry.
    let Value::Object(mut params) = params else {
        return Err(McpError::invalid_params(
            "tools/call needs params {\"name\": ..., \"arguments\": {...}}",
        ));
    };
    let name = match params.get("name") {
        Some(Value::String(s)) => s.clone(),
        Some(_) => return Err(McpError::invalid_params("name must be a string")),
        None => return Err(McpError::invalid_params("Missing required field: name")),
    };
    let arguments = match params.remove("arguments") {
        None | Some(Value::Null) => Value::Object(Map::new()),
        Some(v @ Value::Object(_)) => v,
        Some(_) => return Err(McpError::invalid_params("arguments must be an object")),
    };
    let Some(tool) = req.conn.engine.tools.get(&name) else {
        return Err(McpError::invalid_params(format!("Unknown tool: {name}")));
    };
    // Right after the handshake the client's roots may still be on their way.
    let mut settled = req.conn.roots_settled.subscribe();
    let _ = tokio::time::timeout(
        std::time::Duration::from_secs(3),
        settled.wait_for(|done| *done),
    )
    .await;
    let arguments = if req
        .conn
        .engine
        .config
        .require_approval
        .iter()
        .any(|t| t == &name)
    {
        match approval::check(&req.conn, &req.out, req.era, &name, arguments).await {
            approval::Verdict::Run(args) => args,
            approval::Verdict::Answer(out) => return Ok(out.into_result()),
        }
    } else {
        arguments
    };
    let declared = req.client_capabilities();
    let missing: Vec<&str> = tool
        .requires_client
        .iter()
        .copied()
        .filter(|c| declared.get(*c).is_none())
        .collect();
    if !missing.is_empty() {
        if is_modern(req.era) {
            let required: Map<String, Value> =
                missing.iter().map(|c| (c.to_string(), json!({}))).collect();
            return Err(McpError {
                code: jsonrpc::MISSING_CLIENT_CAPABILITY,
                message: "Missing required client capability",
                data: json!({ "requiredCapabilities": required }),
            });
        }
        return Ok(ToolOutput::error(format!(
            "The tool '{name}' needs the client capabilities {}, which this client did not declare in initialize.",
            missing.join(", ")
        ))
        .into_result());
    }
    if is_modern(req.era) {
        // 2026-07-28: the server decides, for clients with the tasks
        // extension in this request's capabilities (a legacy `task` param
        // is ignored).
        let extension = declares_tasks_extension(&declared);
        if extension && tool.task_support != TaskSupport::Forbidden {
            return call_tool_as_task(req, tool, &name, &params, arguments, declared).await;
        }
        if tool.task_support == TaskSupport::Required {
            return Err(missing_tasks_extension(&format!(
                "the tool '{name}' runs only as a task"
            )));
        }
    } else if let Some(spec) = params.get("task").filter(|t| !t.is_null()) {
        return start_task(
            req,
            &name,
            tool.task_support != TaskSupport::Forbidden,
            spec,
            arguments,
        );
    } else if tool.task_support == TaskSupport::Required {
        return Err(McpError {
            code: jsonrpc::METHOD_NOT_FOUND,
            message: "Method not found",
            data: Value::String(format!(
                "the tool '{name}' runs only as a task (its execution.taskSupport is required): \
                 call it with `task`, e.g. \"task\": {{}}"
            )),
        });
    }
    run_now(req, tool, &name, &params, arguments, declared).await
}

/// Runs a tool call in the request itself: logs, progress, the image's
/// notes of a stateless call, and the call's input rounds.
async fn run_now(
    req: &RequestCtx,
    tool: &ToolDef,
    name: &str,
    params: &Map<String, Value>,
    arguments: Value,
    declared: Value,
) -> Result<Value, McpError> {
    let mut ctx = req
        .tool_context(req.cancel.clone())
        .with_log_sink(log_sink(req))
        .with_change_sink(change_sink(req));
    ctx.client_capabilities = declared;
    let status_ctx = ctx.clone();
    let _progress = req.start_progress(move || status_ctx.status());
    if let Some(sink) = req.progress_sink(_progress.as_ref()) {
        ctx = ctx.with_progress_sink(sink);
    }
    let notes = notes_during_call(req);
    tracing::debug!(tool = %name, "tool call");
    let answered = input::answer(req, params, &format!("tools/call {name}"), |input| {
        let mut ctx = ctx.clone();
        ctx.input = input;
        let arguments = arguments.clone();
        async move {
            let mut output = tool.call(arguments, ctx).await;
            Ok(match output.input_required.take() {
                Some(needed) => Err(needed),
                None => Ok(output.into_result()),
            })
        }
    })
    .await;
    if let Some(forwarder) = notes {
        forwarder.abort();
    }
    let answered = answered?;
    Ok(answered.unwrap_or_else(|e| {
        ToolOutput::error(format!(
            "The tool '{name}' needed input from the client: {e}"
        ))
        .into_result()
    }))
}

/// A resource a tool changed: `notifications/resources/updated` on the
/// call's stream when this connection subscribed to it.
fn change_sink(req: &RequestCtx) -> crate::tools::ChangeSink {
    let out = req.out.clone();
    let conn: Arc<ConnState> = req.conn.clone();
    Arc::new(move |uri: &str| {
        if conn.lifecycle.guard().subscriptions.contains(uri) {
            let params = json!({ "uri": uri });
            let _ = out.send(jsonrpc::notification(
                "notifications/resources/updated",
                &params,
            ));
        }
    })
}
