//! MCP methods: the lifecycle of both protocol eras and the method handlers.
//!
//! - Legacy era (2024-11-05 … 2025-11-25): an `initialize` handshake per
//!   connection, then requests.
//! - Modern era (2026-07-28, stateless): every request carries its protocol
//!   version and client capabilities in `_meta`; `server/discover` replaces the
//!   handshake; results carry `resultType`.

use std::path::PathBuf;
use std::sync::Arc;

use serde_json::{json, Map, Value};
use tokio::sync::broadcast;

use super::approval;
use super::engine::{ConnState, RequestCtx};
use super::jsonrpc::{self, Message, RequestId};
use super::tasks;
use crate::image::NoteLevel;
use crate::tools::{ClientInput, LogLevel, TaskSupport, ToolContext, ToolDef, ToolOutput};

/// Legacy protocol versions, oldest first.
pub const LEGACY_VERSIONS: [&str; 4] = ["2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"];
/// The stateless protocol version.
pub const MODERN_VERSION: &str = "2026-07-28";

const META_VERSION: &str = "io.modelcontextprotocol/protocolVersion";
const META_CAPABILITIES: &str = "io.modelcontextprotocol/clientCapabilities";
const META_LOG_LEVEL: &str = "io.modelcontextprotocol/logLevel";

/// Guidance for the model, sent in `initialize` and `server/discover`.
pub const INSTRUCTIONS: &str = "This server gives you a live Common Lisp image (through Swank: SBCL by default, or ECL, CLISP, ABCL, CCL) and \
Lisp-aware source tools. Work REPL-first: explore with code-describe/code-find/code-apropos, try code \
with evaluate-lisp (state persists between calls; *package* too), then persist changes in files with \
lisp-edit-form (structural, keeps the file readable) and verify with lisp-compile-file or \
asdf-load-system/asdf-test-system. Read Lisp files with lisp-read-file (collapsed view first) and \
search them with clgrep-search. File paths are relative to the project root (fs-get-project-info). Long evaluations can be cancelled; timeouts never lose the image's state.";

/// Every version this server speaks, newest first (the stateless one, then
/// the handshake-era ones a dual-era client can fall back to).
pub fn supported_versions() -> Vec<&'static str> {
    let mut v = vec![MODERN_VERSION];
    v.extend(LEGACY_VERSIONS.iter().rev());
    v
}

/// Which protocol era a request belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Era {
    Legacy,
    /// Stateless: with the log level the request asked for, if any.
    Modern {
        log_level: Option<LogLevel>,
    },
}

/// A JSON-RPC error produced by a method handler.
#[derive(Debug)]
pub struct McpError {
    pub code: i64,
    pub message: &'static str,
    pub data: Value,
}

impl McpError {
    pub fn invalid_params(data: impl Into<String>) -> Self {
        McpError {
            code: jsonrpc::INVALID_PARAMS,
            message: "Invalid params",
            data: Value::String(data.into()),
        }
    }

    /// A -32603 whose data says what went wrong.
    pub fn internal(data: impl Into<String>) -> Self {
        McpError {
            code: jsonrpc::INTERNAL_ERROR,
            message: "Internal error",
            data: Value::String(data.into()),
        }
    }

    pub fn into_line(self, id: &RequestId) -> String {
        jsonrpc::error(Some(id), self.code, self.message, &self.data)
    }
}

/// Decides the era from `_meta`, refusing versions we do not speak.
pub fn request_era(msg: &Message) -> Result<Era, McpError> {
    let meta = msg.params.as_ref().and_then(|p| p.get("_meta"));
    let Some(version) = meta.and_then(|m| m.get(META_VERSION)) else {
        return Ok(Era::Legacy);
    };
    let Some(version) = version.as_str() else {
        return Err(McpError::invalid_params(format!(
            "_meta `{META_VERSION}` must be a string such as \"{MODERN_VERSION}\""
        )));
    };
    if version != MODERN_VERSION {
        return Err(McpError {
            code: jsonrpc::UNSUPPORTED_PROTOCOL_VERSION,
            message: "Unsupported protocol version",
            data: json!({ "supported": supported_versions(), "requested": version }),
        });
    }
    let meta = meta.unwrap();
    if !meta.get(META_CAPABILITIES).is_some_and(Value::is_object) {
        return Err(McpError::invalid_params(format!(
            "Missing _meta field `{META_CAPABILITIES}` (an object): protocol {MODERN_VERSION} requires it on every request"
        )));
    }
    let log_level = match meta.get(META_LOG_LEVEL) {
        None => None,
        Some(l) => Some(l.as_str().and_then(LogLevel::parse).ok_or_else(|| {
            McpError::invalid_params(format!(
                "_meta `{META_LOG_LEVEL}` must be one of debug, info, notice, warning, error, critical, alert, emergency"
            ))
        })?),
    };
    Ok(Era::Modern { log_level })
}

/// The client capabilities in a stateless request's `_meta` (null otherwise).
pub(crate) fn modern_client_capabilities(msg: &Message) -> Value {
    msg.params
        .as_ref()
        .and_then(|p| p.pointer("/_meta/io.modelcontextprotocol~1clientCapabilities"))
        .cloned()
        .unwrap_or(Value::Null)
}

/// Refuses requests that arrive before the legacy handshake.
pub(crate) fn check_ready(conn: &ConnState, msg: &Message, era: Era) -> Result<(), McpError> {
    if era != Era::Legacy {
        return Ok(());
    }
    match msg.method.as_str() {
        "ping" => Ok(()),
        "server/discover" => Err(McpError::invalid_params(format!(
            "server/discover is a stateless (MCP {MODERN_VERSION}) request: put `{META_VERSION}` and `{META_CAPABILITIES}` in params._meta"
        ))),
        _ if conn.lifecycle.lock().unwrap().legacy_version.is_some() => Ok(()),
        _ => Err(McpError::invalid_params(format!(
            "The server is not initialized. Either send `initialize` first (MCP {} and earlier), or make the request \
stateless by putting `{META_VERSION}: \"{MODERN_VERSION}\"` and `{META_CAPABILITIES}` in params._meta (MCP {MODERN_VERSION}).",
            LEGACY_VERSIONS[3]
        ))),
    }
}

/// The legacy handshake.
pub(crate) fn initialize(conn: &ConnState, msg: &Message, era: Era) -> Result<Value, McpError> {
    if era != Era::Legacy {
        return Err(McpError {
            code: jsonrpc::METHOD_NOT_FOUND,
            message: "Method not found",
            data: json!(format!(
                "initialize is not part of protocol {MODERN_VERSION}: send requests with their _meta directly (server/discover tells what this server supports)"
            )),
        });
    }
    let params = msg.params.as_ref().and_then(Value::as_object);
    let requested = match params.and_then(|p| p.get("protocolVersion")) {
        Some(Value::String(v)) => v.clone(),
        Some(_) => {
            return Err(McpError::invalid_params(
                "protocolVersion must be a string such as \"2025-11-25\"",
            ))
        }
        None => {
            return Err(McpError::invalid_params(
                "Missing required field: protocolVersion",
            ))
        }
    };
    let mut lc = conn.lifecycle.lock().unwrap();
    if lc.legacy_version.is_some() {
        return Err(McpError {
            code: jsonrpc::INVALID_REQUEST,
            message: "Invalid Request",
            data: json!("already initialized"),
        });
    }
    let version = if LEGACY_VERSIONS.contains(&requested.as_str()) {
        requested
    } else {
        LEGACY_VERSIONS[LEGACY_VERSIONS.len() - 1].to_string()
    };
    lc.legacy_version = Some(version.clone());
    lc.client_capabilities = params
        .and_then(|p| p.get("capabilities"))
        .cloned()
        .unwrap_or(Value::Null);
    drop(lc);
    if let Some(root) = params.and_then(client_root) {
        conn.session.adopt_client_root(&root);
    }
    // The image starts in the background; the handshake never waits for it.
    conn.session.warm_up();
    tracing::info!(protocol = %version, "initialized");
    Ok(json!({
        "protocolVersion": version,
        "capabilities": capabilities(Era::Legacy),
        "serverInfo": server_info(),
        "instructions": INSTRUCTIONS,
    }))
}

/// `rootUri` (a file:// URI) or `rootPath` from `initialize`. A `rootUri`
/// that names no usable path (broken escapes, not UTF-8, not local) is
/// logged and passed over: the handshake is answered all the same.
fn client_root(params: &Map<String, Value>) -> Option<PathBuf> {
    if let Some(uri) = params.get("rootUri").and_then(Value::as_str) {
        match super::uri::file_uri_path(uri) {
            Ok(path) => return Some(path),
            Err(e) => {
                tracing::warn!(uri, error = %e, "rootUri is not a usable project root; ignored")
            }
        }
    }
    params
        .get("rootPath")
        .and_then(Value::as_str)
        .map(PathBuf::from)
}

/// What this server offers. Resource subscriptions exist only in the legacy
/// era (2026-07-28 removed `resources/subscribe`) and only for resources that
/// can change (the test fixtures; see `fixtures::SUBSCRIPTIONS`). Tasks
/// are the `tasks` capability in the legacy era and the
/// `io.modelcontextprotocol/tasks` extension in 2026-07-28 (SEP-2663).
fn capabilities(era: Era) -> Value {
    let subscribe = crate::fixtures::SUBSCRIPTIONS && era == Era::Legacy;
    let mut caps = json!({
        "tools": { "listChanged": false },
        "prompts": { "listChanged": false },
        "resources": { "listChanged": false, "subscribe": subscribe },
        "completions": {},
        "logging": {},
    });
    if era == Era::Legacy {
        caps["tasks"] =
            json!({ "list": {}, "cancel": {}, "requests": { "tools": { "call": {} } } });
    } else {
        caps["extensions"] = json!({ tasks::EXTENSION: {} });
    }
    caps
}

fn server_info() -> Value {
    json!({ "name": "cl-mcp-server", "version": env!("CARGO_PKG_VERSION") })
}

/// How long a stateless client may reuse a result, and with whom.
#[derive(Clone, Copy)]
enum Cache {
    /// The same for everyone for an hour (lists of tools, prompts, templates).
    Public,
    /// Private and not to be reused (project files, the live image).
    Private,
}

/// Adds the caching fields the 2026-07-28 era requires on cacheable results.
fn cache_hint(result: &mut Value, era: Era, cache: Cache) {
    if matches!(era, Era::Modern { .. }) {
        let (ttl, scope) = match cache {
            Cache::Public => (3_600_000, "public"),
            Cache::Private => (0, "private"),
        };
        result["ttlMs"] = json!(ttl);
        result["cacheScope"] = json!(scope);
    }
}

/// The `tools` array of `tools/list`: every offered tool, with
/// `approvalToken` in the schemas of tools that need approval. Computed once.
pub(crate) fn describe_tools(
    tools: &crate::tools::ToolRegistry,
    require_approval: &[String],
) -> Value {
    Value::Array(
        tools
            .list()
            .map(|t| {
                let mut d = t.describe();
                if require_approval.iter().any(|a| a == t.name) {
                    d["inputSchema"] = approval::schema_with_token(d["inputSchema"].take());
                }
                d
            })
            .collect(),
    )
}

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
    let modern = matches!(req.era, Era::Modern { .. });
    if modern && matches!(msg.method.as_str(), "ping" | "logging/setLevel") {
        return Err(McpError {
            code: jsonrpc::METHOD_NOT_FOUND,
            message: "Method not found",
            data: Value::String(format!(
                "Method '{}' is not part of protocol {MODERN_VERSION} (it was removed); \
                 the log level of a {MODERN_VERSION} request is its _meta `{META_LOG_LEVEL}`",
                msg.method
            )),
        });
    }
    if matches!(
        msg.method.as_str(),
        "tools/list" | "prompts/list" | "resources/templates/list"
    ) {
        single_page(&params)?;
    }
    let mut result = match msg.method.as_str() {
        "ping" => json!({}),
        "server/discover" => {
            req.conn.session.warm_up();
            json!({
                "supportedVersions": supported_versions(),
                "capabilities": capabilities(req.era),
                "serverInfo": server_info(),
                "instructions": INSTRUCTIONS,
                "ttlMs": 3_600_000,
                "cacheScope": "public",
            })
        }
        "tools/list" => {
            let tools = req.conn.engine.tools_list.clone();
            let mut r = json!({ "tools": tools });
            cache_hint(&mut r, req.era, Cache::Public);
            r
        }
        "tools/call" => call_tool(&req, params).await?,
        // The 2026-07-28 tasks extension (SEP-2663).
        "tasks/result" | "tasks/list" if modern => {
            return Err(McpError {
                code: jsonrpc::METHOD_NOT_FOUND,
                message: "Method not found",
                data: Value::String(format!(
                    "{} is not part of the {MODERN_VERSION} tasks extension: tasks/get returns \
                     a task's result once it has one",
                    msg.method
                )),
            })
        }
        "tasks/get" if modern => {
            require_tasks_extension(&req)?;
            task_of(&req, &params)?.detailed_v2()
        }
        "tasks/update" if modern => {
            require_tasks_extension(&req)?;
            let task = task_of(&req, &params)?;
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
        "tasks/cancel" if modern => {
            require_tasks_extension(&req)?;
            // Cancelling a task that already ended is acknowledged alike.
            let _ = task_of(&req, &params)?.cancel();
            json!({})
        }
        "tasks/get" => task_of(&req, &params)?.to_json(),
        "tasks/result" => {
            let task = task_of(&req, &params)?;
            let outcome = task.outcome().await;
            task.mark_collected();
            match outcome {
                Ok(mut r) => {
                    r["_meta"][RELATED_TASK] = json!({ "taskId": task.id });
                    r
                }
                Err((code, message, data)) => {
                    return Err(McpError {
                        code,
                        message,
                        data,
                    })
                }
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
                .session
                .tasks
                .list(cursor)
                .map_err(McpError::invalid_params)?;
            let mut r = json!({ "tasks": tasks });
            if let Some(n) = next {
                r["nextCursor"] = Value::String(n);
            }
            r
        }
        "tasks/cancel" => {
            let task = task_of(&req, &params)?;
            task.cancel().map_err(|status| {
                McpError::invalid_params(format!(
                    "task {} already ended ({status:?}); only a working task can be cancelled",
                    task.id
                ))
            })?;
            notify_task_status(&req, &task);
            task.to_json()
        }
        "prompts/list" => {
            let mut prompts: Vec<Value> = crate::prompts::PROMPTS
                .iter()
                .map(|p| p.describe())
                .collect();
            prompts.extend(crate::fixtures::prompts());
            let mut r = json!({ "prompts": prompts });
            cache_hint(&mut r, req.era, Cache::Public);
            r
        }
        "prompts/get" => {
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
                super::input::answer(&req, params_map, &binding, |input| {
                    let r = crate::fixtures::get_prompt(name, &args, &input, &caps);
                    async move { r.map_err(McpError::invalid_params) }
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
                    .map_err(McpError::invalid_params)?
            }
        }
        "completion/complete" => complete(&req, &params).await?,
        "resources/list" => {
            // The walk reads directories (and ignore files): off the async
            // workers, like every file operation.
            let cursor = params
                .get("cursor")
                .and_then(Value::as_str)
                .map(str::to_string);
            let first_page = cursor.is_none();
            let session = req.conn.session.clone();
            let mut r = tokio::task::spawn_blocking(move || {
                crate::resources::list(&session, cursor.as_deref())
            })
            .await
            .unwrap_or_else(|e| Err(format!("Listing the project failed: {e}")))
            .map_err(McpError::invalid_params)?;
            if first_page {
                if let Some(Value::Array(list)) = r.get_mut("resources") {
                    list.extend(crate::fixtures::resources());
                }
            }
            cache_hint(&mut r, req.era, Cache::Private);
            r
        }
        "resources/templates/list" => {
            let mut templates = crate::resources::templates();
            if let Value::Array(list) = &mut templates {
                list.extend(crate::fixtures::templates());
            }
            let mut r = json!({ "resourceTemplates": templates });
            cache_hint(&mut r, req.era, Cache::Public);
            r
        }
        "resources/read" => {
            let uri = match params.get("uri") {
                Some(Value::String(s)) => s.clone(),
                Some(_) => return Err(McpError::invalid_params("uri must be a string")),
                None => return Err(McpError::invalid_params("Missing required field: uri")),
            };
            let read = if let Some(r) = crate::fixtures::read(&uri) {
                r
            } else if uri.starts_with("lisp://") {
                crate::resources::read_lisp_uri(req.conn.session.clone(), &uri).await
            } else {
                // File reads run off the async workers (see tools::off_workers).
                let session = req.conn.session.clone();
                let u = uri.clone();
                tokio::task::spawn_blocking(move || crate::resources::read_file_uri(&session, &u))
                    .await
                    .unwrap_or_else(|e| {
                        Err((
                            crate::protocol::jsonrpc::INVALID_PARAMS,
                            format!("The file read failed: {e}"),
                        ))
                    })
            };
            let mut r = read.map_err(|(code, msg)| {
                // 2026-07-28 answers a missing resource with -32602 (both
                // eras name the URI in data, SEP-2164).
                match (code == crate::resources::RESOURCE_NOT_FOUND, modern) {
                    (true, false) => McpError {
                        code,
                        message: "Resource not found",
                        data: json!({"uri": uri, "detail": msg}),
                    },
                    (true, true) => McpError {
                        code: jsonrpc::INVALID_PARAMS,
                        message: "Invalid params",
                        data: json!({"uri": uri, "detail": msg}),
                    },
                    _ => McpError::invalid_params(msg),
                }
            })?;
            cache_hint(&mut r, req.era, Cache::Private);
            r
        }
        "resources/subscribe" | "resources/unsubscribe"
            if crate::fixtures::SUBSCRIPTIONS && !modern =>
        {
            let uri = match params.get("uri") {
                Some(Value::String(s)) => s.clone(),
                Some(_) => return Err(McpError::invalid_params("uri must be a string")),
                None => return Err(McpError::invalid_params("Missing required field: uri")),
            };
            let mut lc = req.conn.lifecycle.lock().unwrap();
            if msg.method == "resources/unsubscribe" {
                lc.subscriptions.remove(&uri);
            } else if crate::fixtures::subscribable(&uri) {
                lc.subscriptions.insert(uri);
            } else {
                return Err(McpError {
                    code: crate::resources::RESOURCE_NOT_FOUND,
                    message: "Resource not found",
                    data: json!({"uri": uri, "detail": "only the test:// fixture resources can be subscribed to"}),
                });
            }
            json!({})
        }
        "logging/setLevel" => {
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
                .lock()
                .unwrap()
                .log_level
                .replace(level)
                .is_none();
            if first {
                forward_image_notes(&req.conn);
            }
            json!({})
        }
        other => {
            return Err(McpError {
                code: jsonrpc::METHOD_NOT_FOUND,
                message: "Method not found",
                data: Value::String(format!("Method '{other}' is not supported")),
            })
        }
    };
    if matches!(req.era, Era::Modern { .. }) {
        if let Value::Object(m) = &mut result {
            m.entry("resultType").or_insert(json!("complete"));
            // Stateless results identify the server on every response.
            m.insert(
                "_meta".into(),
                json!({ "io.modelcontextprotocol/serverInfo": server_info() }),
            );
        }
    }
    Ok(result)
}

/// `completion/complete`: values for a prompt argument (or a resource
/// template variable) starting with what the user typed.
async fn complete(req: &RequestCtx, params: &Value) -> Result<Value, McpError> {
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
            .map_err(McpError::invalid_params)?
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

async fn call_tool(req: &RequestCtx, params: Value) -> Result<Value, McpError> {
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
        if modern_era(req.era) {
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
    if modern_era(req.era) {
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
    let mut ctx = ToolContext::new(req.conn.session.clone(), req.cancel.clone())
        .with_log_sink(log_sink(req))
        .with_change_sink(change_sink(req));
    ctx.client_capabilities = declared;
    let status_ctx = ctx.clone();
    let _progress = req.start_progress(move || status_ctx.status());
    if let Some(sink) = req.progress_sink(_progress.as_ref()) {
        ctx = ctx.with_progress_sink(sink);
    }
    // Stateless requests have no connection to carry notes between calls:
    // what happens to the image during the call goes with the call's log.
    let notes = match req.era {
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
    };
    tracing::debug!(tool = %name, "tool call");
    let answered = super::input::answer(req, &params, &format!("tools/call {name}"), |input| {
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
        if conn.lifecycle.lock().unwrap().subscriptions.contains(uri) {
            let params = json!({ "uri": uri });
            let _ = out.send(jsonrpc::notification(
                "notifications/resources/updated",
                &params,
            ));
        }
    })
}

fn modern_era(era: Era) -> bool {
    matches!(era, Era::Modern { .. })
}

/// `_meta` key tying a message to its task.
const RELATED_TASK: &str = "io.modelcontextprotocol/related-task";

/// A task-augmented `tools/call`: answers at once with the task, and runs
/// the call in the background under the task's own cancellation.
fn start_task(
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
        .session
        .tasks
        .create(ttl, false)
        .map_err(McpError::internal)?;
    let conn = req.conn.clone();
    let out = conn.notify.clone();
    let legacy = req.era == Era::Legacy;
    let (tool_name, running) = (name.to_string(), task.clone());
    tokio::spawn(async move {
        let ctx = ToolContext::new(conn.session.clone(), running.cancel.clone());
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
fn declares_tasks_extension(capabilities: &Value) -> bool {
    capabilities
        .get("extensions")
        .and_then(|e| e.get(tasks::EXTENSION))
        .is_some_and(|v| !v.is_null())
}

/// -32021 naming the tasks extension the request's capabilities lack.
fn missing_tasks_extension(why: &str) -> McpError {
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

/// A 2026-07-28 `tools/call` from a client with the tasks extension, to a
/// tool that can run as a task (SEP-2663). Input the tool needs before it
/// starts is gathered first, in the request's own input rounds (no task
/// yet). Then the call runs under a new task: a tool whose task support is
/// optional that finishes within [`tasks::DIRECT_ANSWER_WITHIN`] is answered
/// directly (the task is forgotten); otherwise the answer is the task
/// (`resultType: "task"`), which `tasks/get` follows.
async fn call_tool_as_task(
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
        let answered =
            super::input::answer(req, params, &format!("tools/call {name}"), move |input| {
                let verdict = phase(&input);
                let keep = keep.clone();
                async move {
                    Ok(match verdict {
                        Some(needed) => Err(needed),
                        None => {
                            *keep.lock().unwrap() = Some(input);
                            Ok(Value::Null)
                        }
                    })
                }
            })
            .await?;
        let taken = gathered.lock().unwrap().take();
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
        .session
        .tasks
        .create(None, true)
        .map_err(McpError::internal)?;
    let mut ctx = ToolContext::new(req.conn.session.clone(), task.cancel.clone());
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
                req.conn.session.tasks.remove(&task.id);
                return Err(McpError::internal("the request was cancelled"));
            }
        }
        if let Some(outcome) = task.outcome_now() {
            req.conn.session.tasks.remove(&task.id);
            return outcome.map_err(|(code, message, data)| McpError {
                code,
                message,
                data,
            });
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
                let what = super::engine::panic_text(panic);
                tracing::error!(tool = %name, task = %task.id, "task panicked: {what}");
                break Err((
                    jsonrpc::INTERNAL_ERROR,
                    "Internal error",
                    Value::String(format!(
                        "the tool '{name}' failed inside the server: {what}"
                    )),
                ));
            }
        };
        let Some(needed) = output.input_required.take() else {
            break Ok(output.into_result());
        };
        if rounds == tasks::MAX_INPUT_ROUNDS {
            break Err((
                jsonrpc::INTERNAL_ERROR,
                "Internal error",
                Value::String(format!(
                    "the tool '{name}' asked for input more than {} times",
                    tasks::MAX_INPUT_ROUNDS
                )),
            ));
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

/// The task named by `params.taskId` in this session.
fn task_of(
    req: &RequestCtx,
    params: &Value,
) -> Result<std::sync::Arc<crate::protocol::tasks::Task>, McpError> {
    let id = match params.get("taskId") {
        Some(Value::String(s)) => s,
        Some(_) => return Err(McpError::invalid_params("taskId must be a string")),
        None => return Err(McpError::invalid_params("Missing required field: taskId")),
    };
    req.conn.session.tasks.get(id).ok_or_else(|| {
        McpError::invalid_params(format!(
            "Failed to retrieve task: no task '{id}' in this session (unknown, or its ttl expired)"
        ))
    })
}

/// Tells a legacy client its task changed status (optional in the spec;
/// clients poll anyway).
fn notify_task_status(req: &RequestCtx, task: &crate::protocol::tasks::Task) {
    if req.era == Era::Legacy {
        let _ = req.conn.notify.send(jsonrpc::notification(
            "notifications/tasks/status",
            &task.to_json(),
        ));
    }
}

fn note_level(level: NoteLevel) -> LogLevel {
    match level {
        NoteLevel::Info => LogLevel::Info,
        NoteLevel::Warning => LogLevel::Warning,
        NoteLevel::Error => LogLevel::Error,
    }
}

/// From the first `logging/setLevel` on, the image's lifecycle notes
/// (started, core built, lost and why, crash loop) go to the client as
/// `notifications/message` at or above its level, between requests too.
fn forward_image_notes(conn: &Arc<ConnState>) {
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
            let threshold = conn.lifecycle.lock().unwrap().log_level;
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
fn log_sink(req: &RequestCtx) -> crate::tools::LogSink {
    let out = req.out.clone();
    let era = req.era;
    let conn: Arc<ConnState> = req.conn.clone();
    Arc::new(move |level: LogLevel, message: &str| {
        let threshold = match era {
            Era::Modern { log_level } => log_level,
            Era::Legacy => conn.lifecycle.lock().unwrap().log_level,
        };
        if threshold.is_some_and(|t| level >= t) {
            let params =
                json!({ "level": level.name(), "logger": "cl-mcp-server", "data": message });
            let _ = out.send(jsonrpc::notification("notifications/message", &params));
        }
    })
}
