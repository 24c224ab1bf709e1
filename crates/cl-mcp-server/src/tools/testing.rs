//! Test-only tools, compiled in with the `test-tools` cargo feature, so the
//! black-box tests can exercise cancellation, progress, logging and the
//! internal-error path without a Lisp image.

use std::time::Duration;

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{json, Value};

use super::{tool, Annotations, LogLevel, ToolContext, ToolDef, ToolGroup, ToolOutput};

#[derive(Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct SleepArgs {
    /// How long to sleep, in seconds.
    seconds: f64,
    /// Send this log message (level info) before sleeping.
    log_message: Option<String>,
}

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct NoArgs {}

pub fn tools() -> Vec<ToolDef> {
    let mut tools = own_tools();
    tools.extend(conformance_tools());
    tools
}

fn own_tools() -> Vec<ToolDef> {
    vec![
        tool(
            "test-sleep",
            ToolGroup::Testing,
            "Sleep (test tool)",
            "Sleeps for `seconds`, updating its status line every 100 ms; stops early when cancelled.",
            Annotations::READ_ONLY,
            |a: SleepArgs, ctx: ToolContext| async move {
                if let Some(m) = &a.log_message {
                    ctx.log(LogLevel::Info, m);
                }
                let ticks = (a.seconds * 10.0).ceil() as u64;
                for n in 0..ticks {
                    ctx.set_status(format!("tick {n}"));
                    tokio::select! {
                        _ = tokio::time::sleep(Duration::from_millis(100)) => {}
                        _ = ctx.cancel.cancelled() => return ToolOutput::error("cancelled"),
                    }
                }
                ToolOutput::text(format!("slept {}s", a.seconds))
            },
        ),
        tool(
            "test-panic",
            ToolGroup::Testing,
            "Panic (test tool)",
            "Panics, to test that a server bug becomes -32603 and the server lives on.",
            Annotations::READ_ONLY,
            |_a: NoArgs, _ctx: ToolContext| async move {
                if std::hint::black_box(true) {
                    panic!("deliberate test panic");
                }
                ToolOutput::text("unreachable")
            },
        ),
    ]
}

// ---------------------------------------------------------------------------
// Fixtures of the official MCP conformance suite (`tests/conformance.rs`).
// Their names and shapes are the ones the suite's scenarios call; each only
// uses what a real tool could (content blocks, logs, progress, requests to
// the client), through the same protocol paths.
// ---------------------------------------------------------------------------

/// A 1×1 PNG (one red pixel).
pub const TEST_PNG_BASE64: &str =
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAIAAACQd1PeAAAADElEQVR4nGP4z8AAAAMBAQDJ/pLvAAAAAElFTkSuQmCC";
/// A WAV file: 8 samples of 16-bit mono silence at 8 kHz.
const TEST_WAV_BASE64: &str =
    "UklGRjQAAABXQVZFZm10IBAAAAABAAEAQB8AAIA+AAACABAAZGF0YRAAAAAAAAAAAAAAAAAAAAAAAAAA";

#[derive(Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct SamplingArgs {
    /// The prompt to send to the client's model.
    prompt: String,
}

#[derive(Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct ElicitationArgs {
    /// The message to show the user.
    message: String,
}

#[derive(Deserialize, JsonSchema, serde::Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Address {
    street: Option<String>,
    city: Option<String>,
}

#[derive(Deserialize, JsonSchema, serde::Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct ContactArgs {
    name: Option<String>,
    address: Option<Address>,
    contact_method: Option<String>,
    phone: Option<String>,
    email: Option<String>,
}

fn image_block() -> Value {
    json!({"type": "image", "data": TEST_PNG_BASE64, "mimeType": "image/png"})
}

/// Asks the client through `elicitation/create` and reports its answer.
async fn elicit(ctx: &ToolContext, params: Value) -> ToolOutput {
    match ctx.request_client("elicitation/create", params).await {
        Ok(r) => ToolOutput::text(format!(
            "User response: action={}, content={}",
            r.get("action").and_then(Value::as_str).unwrap_or("?"),
            r.get("content").cloned().unwrap_or(json!({}))
        )),
        Err(e) => ToolOutput::error(format!("Elicitation failed: {e}")),
    }
}

/// Asks the client's model through `sampling/createMessage`.
async fn sample(ctx: &ToolContext, prompt: &str) -> ToolOutput {
    let params = json!({
        "messages": [{"role": "user", "content": {"type": "text", "text": prompt}}],
        "maxTokens": 100,
    });
    match ctx.request_client("sampling/createMessage", params).await {
        Ok(r) => {
            let text = r
                .pointer("/content/text")
                .and_then(Value::as_str)
                .unwrap_or("(no text in the model's answer)");
            ToolOutput::text(format!("LLM response: {text}"))
        }
        Err(e) => ToolOutput::error(format!("Sampling failed: {e}")),
    }
}

/// The JSON Schema 2020-12 keywords a tool schema may carry (SEP-1613/2106).
fn contact_schema() -> Value {
    json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "type": "object",
        "$defs": {
            "address": {
                "$anchor": "addressDef",
                "type": "object",
                "properties": {"street": {"type": "string"}, "city": {"type": "string"}}
            }
        },
        "properties": {
            "name": {"type": "string"},
            "address": {"$ref": "#/$defs/address"},
            "contactMethod": {"type": "string", "enum": ["phone", "email"]},
            "phone": {"type": "string"},
            "email": {"type": "string"}
        },
        "allOf": [{"anyOf": [{"required": ["phone"]}, {"required": ["email"]}]}],
        "if": {"properties": {"contactMethod": {"const": "phone"}}, "required": ["contactMethod"]},
        "then": {"required": ["phone"]},
        "else": {"required": ["email"]},
        "additionalProperties": false
    })
}

pub fn conformance_tools() -> Vec<ToolDef> {
    let ro = Annotations::READ_ONLY;
    let g = ToolGroup::Testing;
    vec![
        tool("test_simple_text", g, "Simple text (conformance fixture)",
            "Returns one text block.", ro,
            |_a: NoArgs, _ctx: ToolContext| async move {
                ToolOutput::text("This is a simple text response for testing.")
            }),
        tool("test_image_content", g, "Image content (conformance fixture)",
            "Returns one image block (a 1x1 PNG).", ro,
            |_a: NoArgs, _ctx: ToolContext| async move { ToolOutput::blocks(vec![image_block()]) }),
        tool("test_audio_content", g, "Audio content (conformance fixture)",
            "Returns one audio block (a short silent WAV).", ro,
            |_a: NoArgs, _ctx: ToolContext| async move {
                ToolOutput::blocks(vec![json!({"type": "audio", "data": TEST_WAV_BASE64, "mimeType": "audio/wav"})])
            }),
        tool("test_embedded_resource", g, "Embedded resource (conformance fixture)",
            "Returns one embedded text resource.", ro,
            |_a: NoArgs, _ctx: ToolContext| async move {
                ToolOutput::blocks(vec![json!({"type": "resource", "resource": {
                    "uri": "test://embedded-resource", "mimeType": "text/plain",
                    "text": "This is an embedded resource content."}})])
            }),
        tool("test_multiple_content_types", g, "Mixed content (conformance fixture)",
            "Returns a text, an image and an embedded resource block.", ro,
            |_a: NoArgs, _ctx: ToolContext| async move {
                ToolOutput::blocks(vec![
                    json!({"type": "text", "text": "Multiple content types test:"}),
                    image_block(),
                    json!({"type": "resource", "resource": {
                        "uri": "test://mixed-content-resource", "mimeType": "application/json",
                        "text": json!({"test": "data", "value": 123}).to_string()}}),
                ])
            }),
        tool("test_tool_with_logging", g, "Logging (conformance fixture)",
            "Sends three info log messages 50 ms apart.", ro,
            |_a: NoArgs, ctx: ToolContext| async move {
                for (i, m) in ["Tool execution started", "Tool processing data", "Tool execution completed"].iter().enumerate() {
                    if i > 0 {
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                    ctx.log(LogLevel::Info, m);
                }
                ToolOutput::text("Tool with logging executed successfully")
            }),
        tool("test_logging_tool", g, "Log once (conformance fixture)",
            "Sends one info log message (only delivered when the client asked for logs).", ro,
            |_a: NoArgs, ctx: ToolContext| async move {
                ctx.log(LogLevel::Info, "test_logging_tool ran");
                ToolOutput::text("logged one info message")
            }),
        tool("test_tool_with_progress", g, "Progress (conformance fixture)",
            "Reports progress 0, 50 and 100 of 100, 50 ms apart.", ro,
            |_a: NoArgs, ctx: ToolContext| async move {
                for (i, p) in [0.0, 50.0, 100.0].into_iter().enumerate() {
                    if i > 0 {
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                    ctx.report_progress(p, Some(100.0), Some(&format!("Completed step {p} of 100")));
                }
                ToolOutput::text("Tool with progress executed successfully")
            }),
        tool("test_error_handling", g, "Error (conformance fixture)",
            "Always fails with an isError result.", ro,
            |_a: NoArgs, _ctx: ToolContext| async move {
                ToolOutput::error("This tool intentionally returns an error for testing")
            }),
        tool("test_sampling", g, "Sampling (conformance fixture)",
            "Asks the client's model to answer `prompt` (sampling/createMessage).", ro,
            |a: SamplingArgs, ctx: ToolContext| async move { sample(&ctx, &a.prompt).await })
            .requires_client_capability("sampling"),
        tool("test_missing_capability", g, "Needs sampling (conformance fixture)",
            "Asks the client's model a fixed question; refused for clients without the sampling capability.", ro,
            |_a: NoArgs, ctx: ToolContext| async move { sample(&ctx, "Say hello.").await })
            .requires_client_capability("sampling"),
        tool("test_elicitation", g, "Elicitation (conformance fixture)",
            "Asks the user for a username and an email (elicitation/create).", ro,
            |a: ElicitationArgs, ctx: ToolContext| async move {
                elicit(&ctx, json!({"message": a.message, "requestedSchema": {
                    "type": "object",
                    "properties": {
                        "username": {"type": "string", "description": "User's response"},
                        "email": {"type": "string", "description": "User's email address"}
                    },
                    "required": ["username", "email"]}})).await
            })
            .requires_client_capability("elicitation"),
        tool("test_streaming_elicitation", g, "Elicitation on the call (conformance fixture)",
            "Asks the user to confirm (elicitation/create).", ro,
            |_a: NoArgs, ctx: ToolContext| async move {
                elicit(&ctx, json!({"message": "Please confirm", "requestedSchema": {
                    "type": "object",
                    "properties": {"confirmed": {"type": "boolean"}},
                    "required": ["confirmed"]}})).await
            })
            .requires_client_capability("elicitation"),
        tool("test_elicitation_sep1034_defaults", g, "Elicitation defaults (conformance fixture)",
            "Asks the user for fields of every primitive type, each with a default (SEP-1034).", ro,
            |_a: NoArgs, ctx: ToolContext| async move {
                elicit(&ctx, json!({"message": "Please review and update the form fields with defaults",
                    "requestedSchema": {"type": "object", "properties": {
                        "name": {"type": "string", "description": "User name", "default": "John Doe"},
                        "age": {"type": "integer", "description": "User age", "default": 30},
                        "score": {"type": "number", "description": "User score", "default": 95.5},
                        "status": {"type": "string", "description": "User status",
                                   "enum": ["active", "inactive", "pending"], "default": "active"},
                        "verified": {"type": "boolean", "description": "Verification status", "default": true}
                    }, "required": []}})).await
            })
            .requires_client_capability("elicitation"),
        tool("test_elicitation_sep1330_enums", g, "Elicitation enums (conformance fixture)",
            "Asks the user to pick from each kind of enum field (SEP-1330).", ro,
            |_a: NoArgs, ctx: ToolContext| async move {
                let titled = |kind: &str| -> Value {
                    Value::Array((1..=3).map(|n| json!({"const": format!("value{n}"),
                        "title": format!("{} {kind}", ["First", "Second", "Third"][n - 1])})).collect())
                };
                elicit(&ctx, json!({"message": "Please select options from the enum fields",
                    "requestedSchema": {"type": "object", "properties": {
                        "untitledSingle": {"type": "string", "description": "Select one option",
                                           "enum": ["option1", "option2", "option3"]},
                        "titledSingle": {"type": "string", "description": "Select one option with titles",
                                         "oneOf": titled("Option")},
                        "legacyEnum": {"type": "string", "description": "Select one option (legacy)",
                                       "enum": ["opt1", "opt2", "opt3"],
                                       "enumNames": ["Option One", "Option Two", "Option Three"]},
                        "untitledMulti": {"type": "array", "description": "Select multiple options",
                                          "minItems": 1, "maxItems": 3,
                                          "items": {"type": "string", "enum": ["option1", "option2", "option3"]}},
                        "titledMulti": {"type": "array", "description": "Select multiple options with titles",
                                        "minItems": 1, "maxItems": 3,
                                        "items": {"anyOf": titled("Choice")}}
                    }, "required": []}})).await
            })
            .requires_client_capability("elicitation"),
        tool("json_schema_2020_12_tool", g, "JSON Schema 2020-12 (conformance fixture)",
            "Takes arguments described with JSON Schema 2020-12 keywords ($defs, $ref, allOf, if/then/else) and echoes them.", ro,
            |a: ContactArgs, _ctx: ToolContext| async move {
                ToolOutput::text(format!("JSON Schema 2020-12 tool called with: {}",
                    serde_json::to_string(&a).unwrap_or_default()))
            })
            .with_input_schema(contact_schema()),
    ]
}
