//! Resources and prompts the official MCP conformance suite reads
//! (`test://…`, `test_*`), compiled in only with the `test-tools` cargo
//! feature: a release binary lists none of them (every function here is
//! then empty). The fixture tools live in `tools/testing.rs`.

use serde_json::{Map, Value};

#[cfg(feature = "test-tools")]
mod imp {
    use serde_json::{json, Map, Value};

    use crate::resources::RESOURCE_NOT_FOUND;
    use crate::tools::testing::TEST_PNG_BASE64;

    const STATIC_TEXT: &str = "This is the content of the static text resource.";
    const WATCHED_TEXT: &str = "This is the watched resource; it has not changed.";
    const TEMPLATE: &str = "test://template/{id}/data";

    pub fn resources() -> Vec<Value> {
        vec![
            json!({"uri": "test://static-text", "name": "static-text", "title": "Static Text Resource",
                   "description": "A static text resource (conformance fixture)", "mimeType": "text/plain"}),
            json!({"uri": "test://static-binary", "name": "static-binary", "title": "Static Binary Resource",
                   "description": "A static binary resource, a 1x1 PNG (conformance fixture)", "mimeType": "image/png"}),
            json!({"uri": "test://watched-resource", "name": "watched-resource", "title": "Watched Resource",
                   "description": "A resource clients may subscribe to (conformance fixture)", "mimeType": "text/plain"}),
        ]
    }

    pub fn templates() -> Vec<Value> {
        vec![
            json!({"uriTemplate": TEMPLATE, "name": "template", "title": "Resource Template",
                   "description": "JSON data for an id (conformance fixture)", "mimeType": "application/json"}),
        ]
    }

    pub fn read(uri: &str) -> Option<Result<Value, (i64, String)>> {
        let rest = uri.strip_prefix("test://")?;
        let content = match rest {
            "static-text" => json!({"uri": uri, "mimeType": "text/plain", "text": STATIC_TEXT}),
            "static-binary" => {
                json!({"uri": uri, "mimeType": "image/png", "blob": TEST_PNG_BASE64})
            }
            "watched-resource" => {
                json!({"uri": uri, "mimeType": "text/plain", "text": WATCHED_TEXT})
            }
            _ => match rest
                .strip_prefix("template/")
                .and_then(|r| r.strip_suffix("/data"))
                .filter(|id| !id.is_empty() && !id.contains('/'))
            {
                Some(id) => {
                    let id = crate::protocol::mcp::percent_decode(id);
                    let text = json!({"id": id, "templateTest": true, "data": format!("Data for ID: {id}")});
                    json!({"uri": uri, "mimeType": "application/json", "text": text.to_string()})
                }
                None => {
                    return Some(Err((
                        RESOURCE_NOT_FOUND,
                        format!("Unknown test resource {uri}"),
                    )))
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
        ]
    }

    fn user(content: Value) -> Value {
        json!({"role": "user", "content": content})
    }

    fn text(t: impl Into<String>) -> Value {
        json!({"type": "text", "text": t.into()})
    }

    pub fn get_prompt(name: &str, args: &Map<String, Value>) -> Option<Result<Value, String>> {
        let arg = |n: &str| -> Result<String, String> {
            args.get(n)
                .and_then(Value::as_str)
                .map(str::to_string)
                .ok_or_else(|| format!("Prompt '{name}' needs the argument '{n}'"))
        };
        let messages = match name {
            "test_simple_prompt" => Ok(vec![user(text("This is a simple prompt for testing."))]),
            "test_prompt_with_arguments" => (|| {
                let (a1, a2) = (arg("arg1")?, arg("arg2")?);
                Ok(vec![user(text(format!(
                    "Prompt with arguments: arg1='{a1}', arg2='{a2}'"
                )))])
            })(),
            "test_prompt_with_embedded_resource" => arg("resourceUri").map(|uri| {
                vec![
                    user(json!({"type": "resource", "resource": {
                        "uri": uri, "mimeType": "text/plain",
                        "text": "Embedded resource content for testing."}})),
                    user(text("Please process the embedded resource above.")),
                ]
            }),
            "test_prompt_with_image" => Ok(vec![
                user(json!({"type": "image", "data": TEST_PNG_BASE64, "mimeType": "image/png"})),
                user(text("Please analyze the image above.")),
            ]),
            _ => return None,
        };
        Some(messages.map(|m| json!({ "messages": m })))
    }

    pub fn complete_prompt(name: &str, argument: &str) -> Option<Vec<String>> {
        let values: &[&str] = match (name, argument) {
            ("test_prompt_with_arguments", "arg1" | "arg2") => {
                &["test", "testing", "paris", "park"]
            }
            (
                "test_prompt_with_arguments"
                | "test_simple_prompt"
                | "test_prompt_with_image"
                | "test_prompt_with_embedded_resource",
                _,
            ) => &[],
            _ => return None,
        };
        Some(values.iter().map(|s| s.to_string()).collect())
    }

    pub fn subscribable(uri: &str) -> bool {
        matches!(read(uri), Some(Ok(_)))
    }
}

#[cfg(not(feature = "test-tools"))]
mod imp {
    use serde_json::{Map, Value};

    pub fn resources() -> Vec<Value> {
        Vec::new()
    }
    pub fn templates() -> Vec<Value> {
        Vec::new()
    }
    pub fn read(_uri: &str) -> Option<Result<Value, (i64, String)>> {
        None
    }
    pub fn prompts() -> Vec<Value> {
        Vec::new()
    }
    pub fn get_prompt(_name: &str, _args: &Map<String, Value>) -> Option<Result<Value, String>> {
        None
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
pub fn read(uri: &str) -> Option<Result<Value, (i64, String)>> {
    imp::read(uri)
}

/// Fixture prompts for `prompts/list`.
pub fn prompts() -> Vec<Value> {
    imp::prompts()
}

/// `prompts/get` of a fixture prompt; `None` when `name` is not one.
pub fn get_prompt(name: &str, args: &Map<String, Value>) -> Option<Result<Value, String>> {
    imp::get_prompt(name, args)
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
