//! Resources and prompts the official MCP conformance suite reads
//! (`test://…`, `test_*`), compiled in only with the `test-tools` cargo
//! feature: a release binary lists none of them (every function here is
//! then empty). The fixture tools live in `tools/testing.rs`.

use serde_json::{Map, Value};

use crate::prompts::PromptError;
use crate::tools::{ClientInput, InputRequired};

#[cfg(feature = "test-tools")]
mod imp {
    use serde_json::{json, Map, Value};

    use crate::prompts::PromptError;
    use crate::resources::ResourceError;
    use crate::tools::testing::TEST_PNG_BASE64;
    use crate::tools::{ClientInput, InputRequired};

    const STATIC_TEXT: &str = "This is the content of the static text resource.";
    use crate::tools::testing::watched_text;
    const TEMPLATE: &str = "test://template/{id}/data";

    pub fn resources() -> Vec<Value> {
        vec![
            json!({"uri": "test://static-text", "name": "static-text", "title": "Static Text Resource",
                   "description": "A static text resource (conformance fixture)", "mimeType": "text/plain"}),
            json!({"uri": "test://static-binary", "name": "static-binary", "title": "Static Binary Resource",
                   "description": "A static binary resource, a 1x1 PNG (conformance fixture)", "mimeType": "image/png"}),
            json!({"uri": "test://watched-resource", "name": "watched-resource", "title": "Watched Resource",
                   "description": "A resource clients may subscribe to; the tool test_update_watched_resource changes it (conformance fixture)", "mimeType": "text/plain"}),
        ]
    }

    pub fn templates() -> Vec<Value> {
        vec![
            json!({"uriTemplate": TEMPLATE, "name": "template", "title": "Resource Template",
                   "description": "JSON data for an id (conformance fixture)", "mimeType": "application/json"}),
        ]
    }

    pub fn read(uri: &str) -> Option<Result<Value, crate::resources::ResourceError>> {
        let rest = uri.strip_prefix("test://")?;
        let content = match rest {
            "static-text" => json!({"uri": uri, "mimeType": "text/plain", "text": STATIC_TEXT}),
            "static-binary" => {
                json!({"uri": uri, "mimeType": "image/png", "blob": TEST_PNG_BASE64})
            }
            "watched-resource" => {
                json!({"uri": uri, "mimeType": "text/plain", "text": watched_text()})
            }
            _ => match rest
                .strip_prefix("template/")
                .and_then(|r| r.strip_suffix("/data"))
                .filter(|id| !id.is_empty() && !id.contains('/'))
            {
                Some(id) => {
                    let id = match crate::uri::percent_decode(id) {
                        Ok(id) => id,
                        Err(e) => {
                            return Some(Err(ResourceError::Invalid(format!(
                                "Cannot read {uri}: {e}."
                            ))))
                        }
                    };
                    let text = json!({"id": id, "templateTest": true, "data": format!("Data for ID: {id}")});
                    json!({"uri": uri, "mimeType": "application/json", "text": text.to_string()})
                }
                None => {
                    return Some(Err(ResourceError::NotFound(format!(
                        "Unknown test resource {uri}"
                    ))))
                }
            },
        };
        Some(Ok(json!({ "contents": [content] })))
    }

    pub fn prompts() -> Vec<Value> {
        vec![
            json!({"name": "test_simple_prompt", "title": "Simple Test Prompt",
                   "description": "A prompt without arguments (conformance fixture)"}),
            json!({"name": "test_prompt_with_arguments", "title": "Prompt With Arguments",
                   "description": "A prompt with two required arguments (conformance fixture)",
                   "arguments": [
                       {"name": "arg1", "description": "First test argument", "required": true},
                       {"name": "arg2", "description": "Second test argument", "required": true}]}),
            json!({"name": "test_prompt_with_embedded_resource", "title": "Prompt With Embedded Resource",
                   "description": "A prompt embedding a resource (conformance fixture)",
                   "arguments": [{"name": "resourceUri", "description": "URI of the resource to embed", "required": true}]}),
            json!({"name": "test_prompt_with_image", "title": "Prompt With Image",
                   "description": "A prompt with an image (conformance fixture)"}),
            json!({"name": "test_input_required_result_prompt", "title": "Prompt Asking For Context",
                   "description": "A prompt that first asks the user for context (conformance fixture)"}),
        ]
    }

    fn user(content: Value) -> Value {
        json!({"role": "user", "content": content})
    }

    fn text(t: impl Into<String>) -> Value {
        json!({"type": "text", "text": t.into()})
    }

    pub fn is_prompt(name: &str) -> bool {
        prompts().iter().any(|p| p["name"] == name)
    }

    pub fn get_prompt(
        name: &str,
        args: &Map<String, Value>,
        input: &ClientInput,
        caps: &Value,
    ) -> Result<Result<Value, InputRequired>, PromptError> {
        let arg = |n: &str| -> Result<String, PromptError> {
            args.get(n)
                .and_then(Value::as_str)
                .map(str::to_string)
                .ok_or_else(|| PromptError::MissingArgument {
                    prompt: name.to_string(),
                    argument: n.to_string(),
                    about: String::new(),
                })
        };
        let messages = match name {
            "test_simple_prompt" => vec![user(text("This is a simple prompt for testing."))],
            "test_prompt_with_arguments" => {
                let (a1, a2) = (arg("arg1")?, arg("arg2")?);
                vec![user(text(format!(
                    "Prompt with arguments: arg1='{a1}', arg2='{a2}'"
                )))]
            }
            "test_prompt_with_embedded_resource" => {
                let uri = arg("resourceUri")?;
                vec![
                    user(json!({"type": "resource", "resource": {
                        "uri": uri, "mimeType": "text/plain",
                        "text": "Embedded resource content for testing."}})),
                    user(text("Please process the embedded resource above.")),
                ]
            }
            "test_prompt_with_image" => vec![
                user(json!({"type": "image", "data": TEST_PNG_BASE64, "mimeType": "image/png"})),
                user(text("Please analyze the image above.")),
            ],
            "test_input_required_result_prompt" => {
                let answered = input
                    .response("user_context")
                    .filter(|r| r["action"] == "accept")
                    .and_then(|r| r.pointer("/content/context"))
                    .and_then(Value::as_str);
                let Some(context) = answered else {
                    if caps.get("elicitation").is_none() {
                        return Err(PromptError::NeedsElicitation(name.to_string()));
                    }
                    let mut requests = Map::new();
                    requests.insert(
                        "user_context".into(),
                        json!({"method": "elicitation/create", "params": {
                            "message": "What context should the prompt use?",
                            "requestedSchema": {"type": "object",
                                "properties": {"context": {"type": "string"}},
                                "required": ["context"]}}}),
                    );
                    return Ok(Err(InputRequired {
                        requests,
                        state: None,
                    }));
                };
                vec![user(text(format!("Work in this context: {context}")))]
            }
            _ => return Err(PromptError::Unknown(name.to_string())),
        };
        Ok(Ok(json!({ "messages": messages })))
    }

    pub fn complete_prompt(name: &str, argument: &str) -> Option<Vec<String>> {
        if !is_prompt(name) {
            return None;
        }
        let values: &[&str] = match (name, argument) {
            ("test_prompt_with_arguments", "arg1" | "arg2") => {
                &["test", "testing", "paris", "park"]
            }
            _ => &[],
        };
        Some(values.iter().map(|s| s.to_string()).collect())
    }

    pub fn subscribable(uri: &str) -> bool {
        matches!(read(uri), Some(Ok(_)))
    }
}

#[cfg(not(feature = "test-tools"))]
mod imp {
    use crate::prompts::PromptError;
    use crate::tools::{ClientInput, InputRequired};
    use serde_json::{Map, Value};

    pub fn resources() -> Vec<Value> {
        Vec::new()
    }
    pub fn templates() -> Vec<Value> {
        Vec::new()
    }
    pub fn read(_uri: &str) -> Option<Result<Value, crate::resources::ResourceError>> {
        None
    }
    pub fn prompts() -> Vec<Value> {
        Vec::new()
    }
    pub fn is_prompt(_name: &str) -> bool {
        false
    }
    pub fn get_prompt(
        name: &str,
        _args: &Map<String, Value>,
        _input: &ClientInput,
        _caps: &Value,
    ) -> Result<Result<Value, InputRequired>, PromptError> {
        Err(PromptError::Unknown(name.to_string()))
    }
    pub fn complete_prompt(_name: &str, _argument: &str) -> Option<Vec<String>> {
        None
    }
    pub fn subscribable(_uri: &str) -> bool {
        false
    }
}

/// Fixture resources for `resources/list` (first page).
pub fn resources() -> Vec<Value> {
    imp::resources()
}

/// Fixture templates for `resources/templates/list`.
pub fn templates() -> Vec<Value> {
    imp::templates()
}

/// `resources/read` of a fixture URI; `None` when `uri` is not one.
pub fn read(uri: &str) -> Option<Result<Value, crate::resources::ResourceError>> {
    imp::read(uri)
}

/// Fixture prompts for `prompts/list`.
pub fn prompts() -> Vec<Value> {
    imp::prompts()
}

/// Whether `name` is a fixture prompt.
pub fn is_prompt(name: &str) -> bool {
    imp::is_prompt(name)
}

/// `prompts/get` of a fixture prompt: its result, or the input it needs
/// from the client first (with `caps`, the client's capabilities).
pub fn get_prompt(
    name: &str,
    args: &Map<String, Value>,
    input: &ClientInput,
    caps: &Value,
) -> Result<Result<Value, InputRequired>, PromptError> {
    imp::get_prompt(name, args, input, caps)
}

/// Completion candidates for a fixture prompt's argument; `None` when
/// `name` is not a fixture prompt.
pub fn complete_prompt(name: &str, argument: &str) -> Option<Vec<String>> {
    imp::complete_prompt(name, argument)
}

/// Whether `resources/subscribe` accepts `uri`: fixture resources only (no
/// other resource of this server sends change notifications).
pub fn subscribable(uri: &str) -> bool {
    imp::subscribable(uri)
}

/// Whether this build offers resource subscriptions at all.
pub const SUBSCRIPTIONS: bool = cfg!(feature = "test-tools");
