//! Test-only tools, compiled in with the `test-tools` cargo feature, so the
//! black-box tests can exercise cancellation, progress, logging and the
//! internal-error path without a Lisp image.

use std::time::Duration;

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{json, Map, Value};

use super::{tool, Annotations, LogLevel, ToolContext, ToolDef, ToolGroup, ToolOutput};
use crate::sync::MutexExt;

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

/// A request or notification with this method panics in the engine's
/// inline steps (where `initialize` and validation run, before a request
/// becomes a task), to test that such a panic is answered and the server
/// lives on.
pub const INLINE_PANIC_METHOD: &str = "test/panic-inline";

/// Panics when `method` is [`INLINE_PANIC_METHOD`].
pub fn panic_inline_on(method: &str) {
    if method == INLINE_PANIC_METHOD {
        panic!("deliberate inline test panic");
    }
}

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
        )
        .with_task_support(),
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
/// The text of `test://watched-resource` (served by `fixtures.rs`):
/// `test_update_watched_resource` changes it.
static WATCHED_TEXT: std::sync::Mutex<String> = std::sync::Mutex::new(String::new());

/// The watched resource's text now.
pub fn watched_text() -> String {
    let text = WATCHED_TEXT.guard();
    if text.is_empty() {
        "This is the watched resource; it has not changed yet.".to_string()
    } else {
        text.clone()
    }
}

fn update_watched(text: &str) {
    *WATCHED_TEXT.guard() = text.to_string();
}

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
struct WatchedArgs {
    /// The resource's new text.
    text: String,
}

#[derive(Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct RegionArgs {
    /// Where to route the call (mirrored in the Mcp-Param-Region header).
    region: String,
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

/// One request for client input: `(key, {"method": ..., "params": ...})`.
fn ask(key: &str, method: &str, params: Value) -> (String, Value) {
    (key.to_string(), json!({"method": method, "params": params}))
}

/// Asks the client for these inputs (and to send `state` back).
fn need(requests: Vec<(String, Value)>, state: Option<Value>) -> ToolOutput {
    ToolOutput::input_required(requests.into_iter().collect::<Map<_, _>>(), state)
}

fn elicitation(message: &str, properties: Value, required: &[&str]) -> Value {
    json!({"message": message, "requestedSchema": {
        "type": "object", "properties": properties, "required": required}})
}

fn sampling(prompt: &str, max_tokens: u32) -> Value {
    json!({"messages": [{"role": "user", "content": {"type": "text", "text": prompt}}],
           "maxTokens": max_tokens})
}

/// An accepted elicitation's field `field`, as a string.
fn accepted_field(response: Option<&Value>, field: &str) -> Option<String> {
    let r = response?;
    if r.get("action").and_then(Value::as_str) != Some("accept") {
        return None;
    }
    match r.pointer(&format!("/content/{field}"))? {
        Value::String(s) => Some(s.clone()),
        Value::Null => None,
        v => Some(v.to_string()),
    }
}

/// The text a sampling response carries.
fn sampled_text(response: Option<&Value>) -> Option<String> {
    response?
        .pointer("/content/text")
        .and_then(Value::as_str)
        .map(str::to_string)
}

/// The root URIs of a `roots/list` response.
fn root_uris(response: Option<&Value>) -> Option<Vec<String>> {
    let roots = response?.get("roots")?.as_array()?;
    Some(
        roots
            .iter()
            .filter_map(|r| r.get("uri").and_then(Value::as_str).map(str::to_string))
            .collect(),
    )
}

/// Asks the user through `elicitation/create` (key `answer`) and reports
/// what they did.
fn elicit(ctx: &ToolContext, params: Value) -> ToolOutput {
    match ctx.input.response("answer") {
        Some(r) => ToolOutput::text(format!(
            "User response: action={}, content={}",
            r.get("action").and_then(Value::as_str).unwrap_or("?"),
            r.get("content").cloned().unwrap_or(json!({}))
        )),
        None => need(vec![ask("answer", "elicitation/create", params)], None),
    }
}

/// Asks the client's model through `sampling/createMessage`.
fn sample(ctx: &ToolContext, prompt: &str) -> ToolOutput {
    match ctx.input.response("answer") {
        Some(r) => match sampled_text(Some(r)) {
            Some(text) => ToolOutput::text(format!("LLM response: {text}")),
            None => ToolOutput::error(format!("The client's model answered no text: {r}")),
        },
        None => need(
            vec![ask(
                "answer",
                "sampling/createMessage",
                sampling(prompt, 100),
            )],
            None,
        ),
    }
}

/// State check of the request-state fixtures: the state this server sent.
fn state_is(ctx: &ToolContext, step: &str) -> bool {
    ctx.input
        .state
        .as_ref()
        .and_then(|s| s.get("step"))
        .and_then(Value::as_str)
        == Some(step)
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

// Long: a list, one short definition per fixture tool.
pub fn conformance_tools() -> Vec<ToolDef> {
    let ro = Annotations::READ_ONLY;
    let g = ToolGroup::Testing;
    let mut tools = vec![
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
            |a: SamplingArgs, ctx: ToolContext| async move { sample(&ctx, &a.prompt) })
            .requires_client_capability("sampling"),
        tool("test_missing_capability", g, "Needs sampling (conformance fixture)",
            "Asks the client's model a fixed question; refused for clients without the sampling capability.", ro,
            |_a: NoArgs, ctx: ToolContext| async move { sample(&ctx, "Say hello.") })
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
                    "required": ["username", "email"]}}))
            })
            .requires_client_capability("elicitation"),
        tool("test_streaming_elicitation", g, "Elicitation on the call (conformance fixture)",
            "Asks the user to confirm (elicitation/create).", ro,
            |_a: NoArgs, ctx: ToolContext| async move {
                elicit(&ctx, json!({"message": "Please confirm", "requestedSchema": {
                    "type": "object",
                    "properties": {"confirmed": {"type": "boolean"}},
                    "required": ["confirmed"]}}))
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
                    }, "required": []}}))
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
                    }, "required": []}}))
            })
            .requires_client_capability("elicitation"),
        tool("json_schema_2020_12_tool", g, "JSON Schema 2020-12 (conformance fixture)",
            "Takes arguments described with JSON Schema 2020-12 keywords ($defs, $ref, allOf, if/then/else) and echoes them.", ro,
            |a: ContactArgs, _ctx: ToolContext| async move {
                ToolOutput::text(format!("JSON Schema 2020-12 tool called with: {}",
                    serde_json::to_string(&a).unwrap_or_default()))
            })
            .with_input_schema(contact_schema()),
    ];
    tools.push(
        tool("test_custom_header", g, "Mirrored parameter (conformance fixture)",
            "Echoes `region`, which HTTP clients also send in an Mcp-Param-Region header (SEP-2243).", ro,
            |a: RegionArgs, _ctx: ToolContext| async move {
                ToolOutput::text(format!("region: {}", a.region))
            })
        .with_param_header("region", "Region"),
    );
    tools.push(tool(
        "test_update_watched_resource", g, "Change the watched resource (conformance fixture)",
        "Sets the text of test://watched-resource; subscribers get notifications/resources/updated.",
        Annotations::DESTRUCTIVE,
        |a: WatchedArgs, ctx: ToolContext| async move {
            update_watched(&a.text);
            ctx.resource_changed("test://watched-resource");
            ToolOutput::text("test://watched-resource updated")
        },
    ));
    tools.extend(input_required_tools());
    tools.extend(task_tools());
    tools
}

#[derive(Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct GreetArgs {
    /// Who to greet.
    name: String,
}

#[derive(Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct ComputeArgs {
    /// How long the computation takes, in seconds.
    seconds: f64,
    /// A label echoed in the result.
    label: Option<String>,
}

#[derive(Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct FileArgs {
    /// The file the user is asked about.
    filename: String,
}

/// Sleeps `seconds` unless cancelled first (then `false`).
async fn sleep_unless_cancelled(ctx: &ToolContext, seconds: f64) -> bool {
    let wait = Duration::from_secs_f64(seconds.clamp(0.0, 3600.0));
    tokio::select! {
        _ = tokio::time::sleep(wait) => true,
        _ = ctx.cancel.cancelled() => false,
    }
}

/// Fixtures of the suite's `tasks-*` scenarios (the 2026-07-28 tasks
/// extension, SEP-2663): a tool that never runs as a task, tasks that
/// complete, fail as a tool or as a protocol error, and tasks that wait for
/// the client's input inside the task or gather it before the task starts.
fn task_tools() -> Vec<ToolDef> {
    let ro = Annotations::READ_ONLY;
    let g = ToolGroup::Testing;
    vec![
        tool("greet", g, "Greet (conformance fixture)",
            "Answers `Hello, {name}!` at once; never runs as a task.", ro,
            |a: GreetArgs, _ctx: ToolContext| async move {
                ToolOutput::text(format!("Hello, {}!", a.name))
            }),
        tool("slow_compute", g, "Slow computation (conformance fixture)",
            "Takes `seconds` to answer (as a task when the client has the tasks extension and it takes long); stops when cancelled.", ro,
            |a: ComputeArgs, ctx: ToolContext| async move {
                let label = a.label.unwrap_or_default();
                if !sleep_unless_cancelled(&ctx, a.seconds).await {
                    return ToolOutput::error(format!("computation '{label}' cancelled"));
                }
                ToolOutput::text(format!("computation '{label}' done after {}s", a.seconds))
            })
            .with_task_support(),
        tool("failing_job", g, "Failing job (conformance fixture)",
            "Runs only as a task; after about a second fails with a tool error (isError).", ro,
            |_a: NoArgs, ctx: ToolContext| async move {
                if !sleep_unless_cancelled(&ctx, 1.0).await {
                    return ToolOutput::error("job cancelled");
                }
                ToolOutput::error("The job failed (as this fixture always does).")
            })
            .task_required(),
        tool("protocol_error_job", g, "Protocol error job (conformance fixture)",
            "Runs only as a task; panics inside the server, so the task fails with a JSON-RPC error.", ro,
            |_a: NoArgs, _ctx: ToolContext| async move {
                if std::hint::black_box(true) {
                    panic!("deliberate protocol_error_job panic");
                }
                ToolOutput::text("unreachable")
            })
            .task_required(),
        tool("confirm_delete", g, "Confirm a deletion (conformance fixture)",
            "Asks the user to confirm deleting `filename` (elicitation/create) and reports the answer; deletes nothing.", ro,
            |a: FileArgs, ctx: ToolContext| async move {
                match ctx.input.response("confirm") {
                    Some(r) => {
                        let yes = r.get("action").and_then(Value::as_str) == Some("accept")
                            && r.pointer("/content/confirm") == Some(&Value::Bool(true));
                        ToolOutput::text(if yes {
                            format!("Deletion of {} confirmed (the fixture deletes nothing).", a.filename)
                        } else {
                            format!("Deletion of {} not confirmed.", a.filename)
                        })
                    }
                    None => need(vec![ask("confirm", "elicitation/create", elicitation(
                        &format!("Delete {}?", a.filename),
                        json!({"confirm": {"type": "boolean"}}), &["confirm"]))], None),
                }
            })
            .with_task_support()
            .requires_client_capability("elicitation"),
        tool("multi_input", g, "Two questions at once (conformance fixture)",
            "Asks the user two things in one round (two elicitation/create requests) and reports both answers.", ro,
            |_a: NoArgs, ctx: ToolContext| async move {
                let first = ctx.input.response("first").cloned();
                let second = ctx.input.response("second").cloned();
                match (first, second) {
                    (Some(a), Some(b)) => ToolOutput::text(format!(
                        "first: {}, second: {}",
                        a.get("content").cloned().unwrap_or(json!({})),
                        b.get("content").cloned().unwrap_or(json!({})))),
                    _ => need(vec![
                        ask("first", "elicitation/create", elicitation("First question: your name?",
                            json!({"name": {"type": "string"}}), &["name"])),
                        ask("second", "elicitation/create", elicitation("Second question: confirm?",
                            json!({"confirm": {"type": "boolean"}}), &["confirm"])),
                    ], None),
                }
            })
            .with_task_support()
            .requires_client_capability("elicitation"),
        tool("test_tool_with_task", g, "Ask, then run as a task (conformance fixture)",
            "Runs only as a task; asks the user's name first (before the task exists), then greets them from the task.", ro,
            |_a: NoArgs, ctx: ToolContext| async move {
                match accepted_field(ctx.input.response("user_name"), "name") {
                    Some(name) => ToolOutput::text(format!("Hello, {name}!")),
                    None => ask_name(),
                }
            })
            .task_required()
            .with_input_phase(|input| {
                match accepted_field(input.response("user_name"), "name") {
                    Some(_) => None,
                    None => ask_name().input_required,
                }
            })
            .requires_client_capability("elicitation"),
    ]
}

/// Asks the user's name (key `user_name`).
fn ask_name() -> ToolOutput {
    need(
        vec![ask(
            "user_name",
            "elicitation/create",
            elicitation(
                "What is your name?",
                json!({"name": {"type": "string"}}),
                &["name"],
            ),
        )],
        None,
    )
}

/// Fixtures asking for client input (SEP-2322), in the shapes the suite's
/// `input-required-result-*` scenarios expect.
// Long: a list, one short definition per fixture tool.
fn input_required_tools() -> Vec<ToolDef> {
    let ro = Annotations::READ_ONLY;
    let g = ToolGroup::Testing;
    let name_question = || {
        elicitation(
            "What is your name?",
            json!({"name": {"type": "string"}}),
            &["name"],
        )
    };
    vec![
        tool("test_input_required_result_elicitation", g, "Ask the user's name (conformance fixture)",
            "Asks the user for their name, then greets them.", ro,
            move |_a: NoArgs, ctx: ToolContext| async move {
                match accepted_field(ctx.input.response("user_name"), "name") {
                    Some(name) => ToolOutput::text(format!("Hello, {name}!")),
                    None => need(vec![ask("user_name", "elicitation/create", name_question())], None),
                }
            })
            .requires_client_capability("elicitation"),
        tool("test_input_required_result_sampling", g, "Ask the model (conformance fixture)",
            "Asks the client's model for the capital of France.", ro,
            |_a: NoArgs, ctx: ToolContext| async move {
                match sampled_text(ctx.input.response("capital_question")) {
                    Some(text) => ToolOutput::text(format!("The model answered: {text}")),
                    None => need(vec![ask("capital_question", "sampling/createMessage",
                        sampling("What is the capital of France?", 100))], None),
                }
            })
            .requires_client_capability("sampling"),
        tool("test_input_required_result_list_roots", g, "Ask for roots (conformance fixture)",
            "Asks the client for its roots and lists them.", ro,
            |_a: NoArgs, ctx: ToolContext| async move {
                match root_uris(ctx.input.response("client_roots")) {
                    Some(uris) => ToolOutput::text(format!("Client roots: {}", uris.join(", "))),
                    None => need(vec![ask("client_roots", "roots/list", json!({}))], None),
                }
            })
            .requires_client_capability("roots"),
        tool("test_input_required_result_request_state", g, "Confirm with state (conformance fixture)",
            "Asks the user to confirm and checks that its request state came back.", ro,
            |_a: NoArgs, ctx: ToolContext| async move {
                confirm_with_state(&ctx)
            })
            .requires_client_capability("elicitation"),
        tool("test_input_required_result_tampered_state", g, "Confirm with protected state (conformance fixture)",
            "Asks the user to confirm; a request state the server did not issue is refused.", ro,
            |_a: NoArgs, ctx: ToolContext| async move {
                confirm_with_state(&ctx)
            })
            .requires_client_capability("elicitation"),
        tool("test_input_required_result_multiple_inputs", g, "Ask three things at once (conformance fixture)",
            "Asks the user's name, the model for a greeting and the client for its roots, in one round.", ro,
            move |_a: NoArgs, ctx: ToolContext| async move {
                let name = accepted_field(ctx.input.response("user_name"), "name");
                let greeting = sampled_text(ctx.input.response("greeting"));
                let roots = root_uris(ctx.input.response("client_roots"));
                match (name, greeting, roots) {
                    (Some(n), Some(g), Some(r)) if state_is(&ctx, "all") => ToolOutput::text(format!(
                        "{g}, {n}! Roots: {}", r.join(", "))),
                    _ => need(vec![
                        ask("user_name", "elicitation/create", name_question()),
                        ask("greeting", "sampling/createMessage", sampling("Generate a greeting", 50)),
                        ask("client_roots", "roots/list", json!({})),
                    ], Some(json!({"step": "all"}))),
                }
            })
            .requires_client_capability("elicitation")
            .requires_client_capability("sampling")
            .requires_client_capability("roots"),
        tool("test_input_required_result_multi_round", g, "Ask in two rounds (conformance fixture)",
            "Asks the user's name, then their favourite colour.", ro,
            |_a: NoArgs, ctx: ToolContext| async move {
                let color_question = || elicitation("Step 2: What is your favorite color?",
                    json!({"color": {"type": "string"}}), &["color"]);
                if state_is(&ctx, "step2") {
                    let name = ctx.input.state.as_ref().and_then(|s| s.get("name")).and_then(Value::as_str)
                        .unwrap_or_default().to_string();
                    return match accepted_field(ctx.input.response("step2"), "color") {
                        Some(color) => ToolOutput::text(format!("{name} likes {color}.")),
                        None => need(vec![ask("step2", "elicitation/create", color_question())],
                                     Some(json!({"step": "step2", "name": name}))),
                    };
                }
                match accepted_field(ctx.input.response("step1"), "name").filter(|_| state_is(&ctx, "step1")) {
                    Some(name) => need(vec![ask("step2", "elicitation/create", color_question())],
                                       Some(json!({"step": "step2", "name": name}))),
                    None => need(vec![ask("step1", "elicitation/create", elicitation("Step 1: What is your name?",
                                 json!({"name": {"type": "string"}}), &["name"]))],
                                 Some(json!({"step": "step1"}))),
                }
            })
            .requires_client_capability("elicitation"),
        tool("test_input_required_result_capabilities", g, "Ask what the client can give (conformance fixture)",
            "Asks the user (elicitation), the model (sampling) or the client's roots, only for what the client declared.", ro,
            move |_a: NoArgs, ctx: ToolContext| async move {
                let mut asks = Vec::new();
                let mut answers = Vec::new();
                if ctx.client_can("elicitation") {
                    match accepted_field(ctx.input.response("user_name"), "name") {
                        Some(n) => answers.push(format!("name: {n}")),
                        None => asks.push(ask("user_name", "elicitation/create", name_question())),
                    }
                }
                if ctx.client_can("sampling") {
                    match sampled_text(ctx.input.response("greeting")) {
                        Some(t) => answers.push(format!("model: {t}")),
                        None => asks.push(ask("greeting", "sampling/createMessage", sampling("Generate a greeting", 50))),
                    }
                }
                if ctx.client_can("roots") {
                    match root_uris(ctx.input.response("client_roots")) {
                        Some(r) => answers.push(format!("roots: {}", r.join(", "))),
                        None => asks.push(ask("client_roots", "roots/list", json!({}))),
                    }
                }
                if !asks.is_empty() {
                    return need(asks, None);
                }
                if answers.is_empty() {
                    return ToolOutput::error("The client declared none of elicitation, sampling and roots: nothing to ask.");
                }
                ToolOutput::text(answers.join("; "))
            }),
    ]
}

/// Asks the user to confirm, with a request state; completes only when both
/// the answer and that state come back.
fn confirm_with_state(ctx: &ToolContext) -> ToolOutput {
    let ok = accepted_field(ctx.input.response("confirm"), "ok");
    match ok {
        Some(ok) if state_is(ctx, "confirm") => {
            ToolOutput::text(format!("state-ok: confirmed={ok}"))
        }
        _ => need(
            vec![ask(
                "confirm",
                "elicitation/create",
                elicitation(
                    "Please confirm",
                    json!({"ok": {"type": "boolean"}}),
                    &["ok"],
                ),
            )],
            Some(json!({"step": "confirm"})),
        ),
    }
}
