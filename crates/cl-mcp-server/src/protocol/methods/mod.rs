//! The method table: one request goes down from here to its family's
//! handler (and, for a tool call that runs as a task, to the task runner).

mod lifecycle;
mod logging;
mod prompts;
mod resources;
mod task_runner;
mod tasks;
mod tools;

use serde_json::{json, Value};

use super::era::{self, is_modern};
use super::error::McpError;
use super::jsonrpc::Message;
use super::request::RequestCtx;

pub(crate) use lifecycle::{check_ready, initialize};

/// These lists fit one page: any `cursor` is one this server never gave.
fn single_page(params: &Value) -> Result<(), McpError> {
    match params.get("cursor") {
        None | Some(Value::Null) => Ok(()),
        Some(Value::String(c)) => Err(McpError::invalid_params(format!(
            "Invalid cursor '{c}': this list has a single page (pass back only a nextCursor value)"
        ))),
        Some(_) => Err(McpError::invalid_params("cursor must be a string")),
    }
}

/// Runs one request to its result.
pub(crate) async fn dispatch(req: RequestCtx, msg: Message) -> Result<Value, McpError> {
    let params = msg.params.unwrap_or(Value::Null);
    let method = msg.method.as_str();
    era::refuse_removed(req.era, method)?;
    if matches!(
        method,
        "tools/list" | "prompts/list" | "resources/templates/list"
    ) {
        single_page(&params)?;
    }
    let modern = is_modern(req.era);
    let mut result = match method {
        "ping" => json!({}),
        "server/discover" => lifecycle::discover(&req),
        "tools/list" => tools::list(&req),
        "tools/call" => tools::call_tool(&req, params).await?,
        // The 2026-07-28 tasks extension (SEP-2663).
        "tasks/get" | "tasks/update" | "tasks/cancel" | "tasks/result" | "tasks/list" if modern => {
            tasks::modern(&req, method, &params)?
        }
        "tasks/get" | "tasks/result" | "tasks/list" | "tasks/cancel" => {
            tasks::legacy(&req, method, &params).await?
        }
        "prompts/list" => prompts::list(&req),
        "prompts/get" => prompts::get(&req, &params).await?,
        "completion/complete" => prompts::complete(&req, &params).await?,
        "resources/list" => resources::list(&req, &params).await?,
        "resources/templates/list" => resources::templates(&req),
        "resources/read" => resources::read(&req, &params).await?,
        "resources/subscribe" | "resources/unsubscribe"
            if crate::fixtures::SUBSCRIPTIONS && !modern =>
        {
            resources::subscribe(&req, method, &params)?
        }
        "logging/setLevel" => logging::set_level(&req, &params)?,
        other => {
            return Err(McpError::method_not_found(Value::String(format!(
                "Method '{other}' is not supported"
            ))))
        }
    };
    era::finish_result(req.era, &mut result);
    Ok(result)
}
