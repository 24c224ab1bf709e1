//! The prompts family: `prompts/list`, `prompts/get` (the fixtures' prompts
//! may ask the client for input), and `completion/complete` for prompt
//! arguments and resource template variables.

use serde_json::{json, Map, Value};

use crate::protocol::era::{cache_hint, Cache};
use crate::protocol::error::McpError;
use crate::protocol::input;
use crate::protocol::request::RequestCtx;

/// `prompts/list`.
pub(super) fn list(req: &RequestCtx) -> Value {
    let mut prompts: Vec<Value> = crate::prompts::PROMPTS
        .iter()
        .map(|p| p.describe())
        .collect();
    prompts.extend(crate::fixtures::prompts());
    let mut r = json!({ "prompts": prompts });
    cache_hint(&mut r, req.era, Cache::Public);
    r
}

/// `prompts/get`.
pub(super) async fn get(req: &RequestCtx, params: &Value) -> Result<Value, McpError> {
    Ok({
        let name = match params.get("name") {
            Some(Value::String(s)) => s.as_str(),
            Some(_) => return Err(McpError::invalid_params("name must be a string")),
            None => return Err(McpError::invalid_params("Missing required field: name")),
        };
        let args = match params.get("arguments") {
            None | Some(Value::Null) => Map::new(),
            Some(Value::Object(m)) => m.clone(),
            Some(_) => return Err(McpError::invalid_params("arguments must be an object")),
        };
        if crate::fixtures::is_prompt(name) {
            let caps = req.client_capabilities();
            let empty = Map::new();
            let params_map = params.as_object().unwrap_or(&empty);
            let binding = format!("prompts/get {name}");
            input::answer(req, params_map, &binding, |input| {
                let r = crate::fixtures::get_prompt(name, &args, &input, &caps);
                async move { r.map_err(|e| McpError::invalid_params(e.to_string())) }
            })
            .await?
            .map_err(|e| {
                McpError::invalid_params(format!(
                    "Prompt '{name}' needed input from the client: {e}"
                ))
            })?
        } else {
            crate::prompts::find(name)
                .ok_or_else(|| McpError::invalid_params(format!("Unknown prompt: {name}")))?
                .get(&args)
                .map_err(|e| McpError::invalid_params(e.to_string()))?
        }
    })
}

/// `completion/complete`: values for a prompt argument (or a resource
/// template variable) starting with what the user typed.
pub(super) async fn complete(req: &RequestCtx, params: &Value) -> Result<Value, McpError> {
    let reference = params
        .get("ref")
        .ok_or_else(|| McpError::invalid_params("Missing required field: ref"))?;
    let argument = params
        .get("argument")
        .ok_or_else(|| McpError::invalid_params("Missing required field: argument"))?;
    let arg_name = argument.get("name").and_then(Value::as_str).unwrap_or("");
    let typed = argument.get("value").and_then(Value::as_str).unwrap_or("");
    let candidates: Vec<String> = match reference.get("type").and_then(Value::as_str) {
        Some("ref/prompt") => {
            let name = reference.get("name").and_then(Value::as_str).unwrap_or("");
            if let Some(values) = crate::fixtures::complete_prompt(name, arg_name) {
                return Ok(completion(values, typed));
            }
            if crate::prompts::find(name).is_none() {
                return Err(McpError::invalid_params(format!("Unknown prompt: {name}")));
            }
            match (name, arg_name) {
                ("add-tests", "framework") => crate::prompts::FRAMEWORKS
                    .iter()
                    .map(|s| s.to_string())
                    .collect(),
                _ => Vec::new(),
            }
        }
        Some("ref/resource") => {
            let template = reference.get("uri").and_then(Value::as_str).unwrap_or("");
            let context = params.get("context").cloned().unwrap_or(Value::Null);
            crate::resources::complete_template(
                req.conn.session.clone(),
                template,
                arg_name,
                typed,
                &context,
            )
            .await
            .map_err(|e| McpError::invalid_params(e.to_string()))?
        }
        _ => {
            return Err(McpError::invalid_params(
                "ref.type must be \"ref/prompt\" or \"ref/resource\"",
            ))
        }
    };
    Ok(completion(candidates, typed))
}

/// A `completion/complete` result: the candidates starting with `typed`
/// (case-insensitively), at most 100.
fn completion(candidates: Vec<String>, typed: &str) -> Value {
    let lower = typed.to_lowercase();
    let values: Vec<String> = candidates
        .into_iter()
        .filter(|c| c.to_lowercase().starts_with(&lower))
        .take(100)
        .collect();
    json!({ "completion": { "values": values, "total": values.len(), "hasMore": false } })
}
