//! The task runner: a `tools/call` that runs as a task. Legacy era: the
//! client asks with `task` (`start_task`). 2026-07-28: the server decides
//! for clients declaring the tasks extension (`call_tool_as_task`), and
//! `run_task` drives the tool through its input rounds.

use std::sync::Arc;

use serde_json::{json, Map, Value};

use crate::protocol::era::Era;
use crate::protocol::error::McpError;
use crate::protocol::input;
use crate::protocol::jsonrpc;
use crate::protocol::request::{panic_text, RequestCtx};
use crate::protocol::tasks;
use crate::sync::MutexExt;
use crate::tools::{ClientInput, TaskSupport, ToolContext, ToolDef, ToolOutput};

/// `_meta` key tying a message to its task.
pub(super) const RELATED_TASK: &str = "io.modelcontextprotocol/related-task";

/// A task-augmented `tools/call`: answers at once with the task, and runs
/// the call in the background under the task's own cancellation.
pub(super) fn start_task(
    req: &RequestCtx,
    name: &str,
    supported: bool,
    spec: &Value,
    arguments: Value,
) -> Result<Value, McpError> {
    if !supported {
        return Err(McpError {
            code: jsonrpc::METHOD_NOT_FOUND,
            message: "Method not found",
            data: Value::String(format!(
                "the tool '{name}' cannot run as a task (its execution.taskSupport is \
                 forbidden); call it without `task`"
            )),
        });
    }
    let ttl = match spec.get("ttl") {
        None | Some(Value::Null) => None,
        Some(v) => Some(v.as_f64().filter(|t| *t >= 0.0).ok_or_else(|| {
            McpError::invalid_params("task.ttl must be a non-negative number of milliseconds")
        })? as u64),
    };
    if !spec.is_object() {
        return Err(McpError::invalid_params(
            "task must be an object, e.g. {\"ttl\": 60000}",
        ));
    }
    let task = req
        .conn
        .tasks()
        .create(ttl, false)
        .map_err(|e| McpError::internal(e.to_string()))?;
    let conn = req.conn.clone();
    let out = conn.notify.clone();
    let legacy = req.era == Era::Legacy;
    let (tool_name, running) = (name.to_string(), task.clone());
    let ctx = req.tool_context(running.cancel.clone());
    tokio::spawn(async move {
        let output = match conn.engine.tools.get(&tool_name) {
            Some(tool) => tool.call(arguments, ctx).await,
            None => crate::tools::ToolOutput::error(format!("Unknown tool: {tool_name}")),
        };
        if running.finish(Ok(output.into_result())) && legacy {
            let _ = out.send(jsonrpc::notification(
                "notifications/tasks/status",
                &running.to_json(),
            ));
        }
    });
    Ok(json!({
        "task": task.to_json(),
        "_meta": {
            "io.modelcontextprotocol/model-immediate-response": format!(
                "'{name}' is running as task {}; its result comes from tasks/result.",
                task.id
            )
        }
    }))
}

/// Whether these client capabilities declare the tasks extension.
pub(super) fn declares_tasks_extension(capabilities: &Value) -> bool {
    capabilities
        .get("extensions")
        .and_then(|e| e.get(tasks::EXTENSION))
        .is_some_and(|v| !v.is_null())
}

/// -32021 naming the tasks extension the request's capabilities lack.
pub(super) fn missing_tasks_extension(why: &str) -> McpError {
    McpError {
        code: jsonrpc::MISSING_CLIENT_CAPABILITY,
        message: "Missing required client capability",
        data: json!({
            "requiredCapabilities": { "extensions": { tasks::EXTENSION: {} } },
            "detail": format!(
                "{why}: declare the extension in _meta io.modelcontextprotocol/clientCapabilities \
                 (\"extensions\": {{\"{}\": {{}}}})",
                tasks::EXTENSION
            ),
        }),
    }
}

/// A 2026-07-28 `tools/call` from a client with the tasks extension, to a
/// tool that can run as a task (SEP-2663). Input the tool needs before it
/// starts is gathered first, in the request's own input rounds (no task
/// yet). Then the call runs under a new task: a tool whose task support is
/// optional that finishes within [`tasks::DIRECT_ANSWER_WITHIN`] is answered
/// directly (the task is forgotten); otherwise the answer is the task
/// (`resultType: "task"`), which `tasks/get` follows.
pub(super) async fn call_tool_as_task(
    req: &RequestCtx,
    tool: &ToolDef,
    name: &str,
    params: &Map<String, Value>,
    arguments: Value,
    declared: Value,
) -> Result<Value, McpError> {
    let mut input = ClientInput::default();
    if let Some(phase) = tool.input_phase.clone() {
        let gathered = Arc::new(std::sync::Mutex::new(None));
        let keep = gathered.clone();
        let answered = input::answer(req, params, &format!("tools/call {name}"), move |input| {
            let verdict = phase(&input);
            let keep = keep.clone();
            async move {
                Ok(match verdict {
                    Some(needed) => Err(needed),
                    None => {
                        *keep.guard() = Some(input);
                        Ok(Value::Null)
                    }
                })
            }
        })
        .await?;
        let taken = gathered.guard().take();
        match taken {
            Some(all) => input = all,
            // An input_required answer (or the legacy era's failure to ask).
            None => {
                return Ok(answered.unwrap_or_else(|e| {
                    ToolOutput::error(format!(
                        "The tool '{name}' needed input from the client: {e}"
                    ))
                    .into_result()
                }))
            }
        }
    }
    let task = req
        .conn
        .tasks()
        .create(None, true)
        .map_err(|e| McpError::internal(e.to_string()))?;
    let mut ctx = req.tool_context(task.cancel.clone());
    ctx.client_capabilities = declared;
    ctx.input = input;
    let (settled_tx, settled) = tokio::sync::oneshot::channel();
    tokio::spawn(run_task(
        req.conn.engine.tools.clone(),
        name.to_string(),
        arguments,
        ctx,
        task.clone(),
        settled_tx,
    ));
    if tool.task_support == TaskSupport::Optional {
        tokio::select! {
            _ = settled => {}
            _ = tokio::time::sleep(tasks::DIRECT_ANSWER_WITHIN) => {}
            _ = req.cancel.cancelled() => {
                // Nobody will learn this task's id: stop its work.
                let _ = task.cancel();
                req.conn.tasks().remove(&task.id);
                return Err(McpError::internal("the request was cancelled"));
            }
        }
        if let Some(outcome) = task.outcome_now() {
            req.conn.tasks().remove(&task.id);
            return outcome;
        }
    }
    tracing::debug!(tool = %name, task = %task.id, "tool call runs as a task");
    let mut created = task.to_json_v2();
    created["resultType"] = json!("task");
    Ok(created)
}

/// The work of a 2026-07-28 task: runs the tool, parks the task in
/// `input_required` while the tool waits for the client's answers (given
/// by `tasks/update`), and records the outcome (a panic is a protocol
/// error: the task fails). `settled` fires once the task first waits for
/// input or has finished.
async fn run_task(
    tools: Arc<crate::tools::ToolRegistry>,
    name: String,
    arguments: Value,
    mut ctx: ToolContext,
    task: Arc<tasks::Task>,
    settled: tokio::sync::oneshot::Sender<()>,
) {
    use futures::FutureExt;
    let mut settled = Some(settled);
    let mut rounds = 0;
    let outcome = loop {
        let Some(tool) = tools.get(&name) else {
            break Ok(ToolOutput::error(format!("Unknown tool: {name}")).into_result());
        };
        let run = std::panic::AssertUnwindSafe(tool.call(arguments.clone(), ctx.clone()))
            .catch_unwind()
            .await;
        let mut output = match run {
            Ok(o) => o,
            Err(panic) => {
                let what = panic_text(panic);
                tracing::error!(tool = %name, task = %task.id, "task panicked: {what}");
                break Err(McpError::internal(format!(
                    "the tool '{name}' failed inside the server: {what}"
                )));
            }
        };
        let Some(needed) = output.input_required.take() else {
            break Ok(output.into_result());
        };
        if rounds == tasks::MAX_INPUT_ROUNDS {
            break Err(McpError::internal(format!(
                "the tool '{name}' asked for input more than {} times",
                tasks::MAX_INPUT_ROUNDS
            )));
        }
        rounds += 1;
        if let Some(s) = settled.take() {
            let _ = s.send(());
        }
        match task.wait_for_input(needed.requests, needed.state).await {
            Some(input) => ctx.input = input,
            None => {
                break Ok(
                    ToolOutput::error("The task was cancelled while it waited for input.")
                        .into_result(),
                )
            }
        }
    };
    task.finish(outcome);
    if let Some(s) = settled.take() {
        let _ = s.send(());
    }
}
