//! Connections and dispatch: requests run concurrently as tasks, each answered
//! exactly once (or not at all when cancelled); notifications never answered.

use std::collections::HashMap;
use std::panic::AssertUnwindSafe;

use futures::FutureExt;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::value::RawValue;
use serde_json::{json, Value};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use tokio::sync::{oneshot, Notify};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::jsonrpc::{self, Message, RequestId};
use super::mcp::{self, Era};
use crate::config::ServerConfig;
use crate::session::{ImageSlot, Session};
use crate::tools::{LogLevel, Status, ToolRegistry};

pub use super::outbound::Outbound;

/// Requests running on one connection past which its transport reads no
/// further input until one finishes ([`Connection::wait_for_capacity`]).
pub const MAX_IN_FLIGHT: usize = 256;
/// Elements of one batch that are run; the rest are answered with an error.
pub const MAX_BATCH_ELEMENTS: usize = 1000;
/// Bytes of one batch's response; answers past it are replaced by an error.
pub const MAX_BATCH_RESPONSE_BYTES: usize = 32 * 1024 * 1024;

/// The server: configuration and tools, shared by every connection.
pub struct Engine {
    pub config: Arc<ServerConfig>,
    pub tools: Arc<ToolRegistry>,
    /// `tools/list`'s array, described once.
    pub(crate) tools_list: Value,
    /// The image all sessions use with `--shared-image`.
    shared_image: Arc<std::sync::OnceLock<crate::image::Image>>,
    /// `requestState`s handed to stateless clients (SEP-2322).
    pub(crate) input_states: super::input::StateStore,
}

impl Engine {
    pub fn new(config: ServerConfig) -> Arc<Engine> {
        let tools = Arc::new(ToolRegistry::standard(&config.tool_groups));
        // `approvalToken` is an argument only where tokens are handed out.
        let token_tools: &[String] = if config.approval_token_fallback {
            &config.require_approval
        } else {
            &[]
        };
        let mut tools_list = mcp::describe_tools(&tools, token_tools);
        note_missing_features(&mut tools_list, &config.image);
        Arc::new(Engine {
            tools_list,
            config: Arc::new(config),
            tools,
            shared_image: Arc::new(std::sync::OnceLock::new()),
            input_states: Default::default(),
        })
    }

    /// Opens one MCP session (a stdio stream, a TCP connection, an HTTP
    /// session). `notify` receives messages not tied to a request.
    pub fn connect(self: &Arc<Self>, notify: Outbound) -> Connection {
        self.connect_to(self.new_session(), notify)
    }

    /// A new session: with its own image, or the shared one.
    pub fn new_session(&self) -> Arc<Session> {
        let slot = if self.config.shared_image {
            ImageSlot::Shared {
                image: self.shared_image.clone(),
            }
        } else {
            ImageSlot::Own(std::sync::OnceLock::new())
        };
        let session = Session::with_image(self.config.clone(), slot);
        crate::tools::attach_session(&session);
        session
    }

    /// Opens a connection on an existing session (stateless HTTP requests
    /// share one session but each gets its own connection, so their ids and
    /// cancellations never mix).
    pub fn connect_to(self: &Arc<Self>, session: Arc<Session>, notify: Outbound) -> Connection {
        Connection {
            inner: Arc::new(ConnState {
                engine: self.clone(),
                session,
                lifecycle: Mutex::new(Lifecycle::default()),
                inflight: Mutex::new(HashMap::new()),
                tasks: TaskTracker::new(),
                approvals: Default::default(),
                client_requests: Mutex::new(HashMap::new()),
                roots_settled: tokio::sync::watch::channel(true).0,
                next_client_request: AtomicU64::new(1),
                running: AtomicUsize::new(0),
                finished: Notify::new(),
                notify,
            }),
        }
    }
}

#[derive(Default)]
pub(crate) struct Lifecycle {
    /// The legacy protocol version agreed in `initialize`, once it happened.
    pub(crate) legacy_version: Option<String>,
    /// `logging/setLevel` (legacy era).
    pub(crate) log_level: Option<LogLevel>,
    /// The client declared `elicitation` support in `initialize`.
    pub(crate) client_capabilities: Value,
    /// URIs of `resources/subscribe` (legacy era).
    pub(crate) subscriptions: std::collections::BTreeSet<String>,
}

struct InFlight {
    cancel: CancellationToken,
}

pub(crate) struct ConnState {
    pub(crate) engine: Arc<Engine>,
    pub(crate) session: Arc<Session>,
    pub(crate) lifecycle: Mutex<Lifecycle>,
    inflight: Mutex<HashMap<String, InFlight>>,
    tasks: TaskTracker,
    /// Outstanding approval tokens (`--require-approval`).
    pub(crate) approvals: super::approval::ApprovalTokens,
    /// Requests this server sent to the client, waiting for its response.
    client_requests: Mutex<HashMap<String, oneshot::Sender<Result<Value, Value>>>>,
    /// False while the client's roots are being fetched: tool calls wait
    /// (briefly) so they run under the right project root.
    pub(crate) roots_settled: tokio::sync::watch::Sender<bool>,
    next_client_request: AtomicU64,
    /// Requests started and not yet finished (including batch elements).
    running: AtomicUsize,
    /// Signalled whenever a request finishes.
    finished: Notify,
    /// Messages not tied to a request (our requests to the client).
    pub(crate) notify: Outbound,
}

impl ConnState {
    /// Sends a request to the client and waits (bounded) for its answer.
    pub(crate) async fn request_client(
        &self,
        out: &Outbound,
        method: &str,
        params: Value,
    ) -> Result<Value, String> {
        let n = self.next_client_request.fetch_add(1, Ordering::Relaxed);
        let id = format!("cl-mcp-{n}");
        let (tx, rx) = oneshot::channel();
        self.client_requests
            .lock()
            .unwrap()
            .insert(format!("s:{id}"), tx);
        let msg = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        if out.send(msg.to_string()).is_err() {
            self.client_requests
                .lock()
                .unwrap()
                .remove(&format!("s:{id}"));
            return Err("this transport cannot carry requests to the client".into());
        }
        match tokio::time::timeout(Duration::from_secs(30), rx).await {
            Ok(Ok(Ok(v))) => Ok(v),
            Ok(Ok(Err(e))) => Err(format!("the client answered {method} with an error: {e}")),
            _ => {
                self.client_requests
                    .lock()
                    .unwrap()
                    .remove(&format!("s:{id}"));
                Err(format!("the client did not answer {method}"))
            }
        }
    }

    /// If `raw` is a response to one of our requests, delivers it. Responses
    /// are never answered, whatever they hold.
    fn take_client_response(&self, raw: &RawValue) -> bool {
        let Ok(v) = serde_json::from_str::<Value>(raw.get()) else {
            return false;
        };
        let Some(obj) = v.as_object() else {
            return false;
        };
        if obj.contains_key("method") || !(obj.contains_key("result") || obj.contains_key("error"))
        {
            return false;
        }
        let key = obj.get("id").and_then(jsonrpc::id_key_of_value);
        if let Some(tx) = key.and_then(|k| self.client_requests.lock().unwrap().remove(&k)) {
            let outcome = match obj.get("result") {
                Some(r) => Ok(r.clone()),
                None => Err(obj.get("error").cloned().unwrap_or(Value::Null)),
            };
            let _ = tx.send(outcome);
        } else {
            tracing::debug!(message = %raw.get(), "ignored a response to no request of ours");
        }
        true
    }

    /// Asks the client for its roots and adopts the first `file://` one as the
    /// project root.
    async fn adopt_client_roots(self: Arc<Self>) {
        let result = self
            .request_client(&self.notify, "roots/list", json!({}))
            .await;
        match result {
            Ok(result) => {
                let paths = super::uri::root_paths(&result);
                // Every declared root bounds where the project root may go;
                // the first becomes the project root.
                for p in paths.iter().skip(1) {
                    if let Ok(canon) = p.canonicalize() {
                        self.session.allow_root(&canon);
                    }
                }
                if let Some(path) = paths.first() {
                    tracing::info!(root = %path.display(), "project root from the client's roots");
                    self.session.adopt_client_root(path);
                }
            }
            Err(e) => tracing::info!(error = %e, "no roots from the client"),
        }
        self.roots_settled.send_replace(true);
    }
}

/// One MCP session's protocol state.
#[derive(Clone)]
pub struct Connection {
    inner: Arc<ConnState>,
}

enum Started {
    Done(Option<String>),
    /// A running request's task, and its cancellation.
    Running(JoinHandle<Option<String>>, CancellationToken),
}

impl Connection {
    /// The session behind this connection.
    pub fn session(&self) -> &Arc<Session> {
        &self.inner.session
    }

    /// The legacy protocol version agreed in `initialize`, once it happened.
    pub fn protocol_version(&self) -> Option<String> {
        self.inner.lifecycle.lock().unwrap().legacy_version.clone()
    }

    /// True once a legacy `initialize` has been answered.
    pub fn is_initialized(&self) -> bool {
        self.inner
            .lifecycle
            .lock()
            .unwrap()
            .legacy_version
            .is_some()
    }

    /// Handles one message text (a request, a notification or a batch). Its
    /// responses, and notifications about the requests in it, go to `out`,
    /// now or when the requests finish.
    pub fn handle_text(&self, text: &str, out: &Outbound) {
        self.handle_text_cancellable(text, out);
    }

    /// [`Connection::handle_text`], returning the cancellation of each
    /// request it started: a transport that sees its client go away cancels
    /// them (as `notifications/cancelled` would).
    pub fn handle_text_cancellable(&self, text: &str, out: &Outbound) -> Vec<CancellationToken> {
        let raw: &RawValue = match serde_json::from_str(text) {
            Ok(r) => r,
            Err(e) => {
                let _ = out.send(jsonrpc::parse_error(&e.to_string()));
                return Vec::new();
            }
        };
        if raw.get().trim_start().starts_with('[') {
            return self.handle_batch(raw, out);
        }
        // A lone message's task sends its own response (no extra task).
        match self.start(raw, out, None) {
            Started::Done(Some(line)) => {
                let _ = out.send(line);
                Vec::new()
            }
            Started::Done(None) => Vec::new(),
            Started::Running(_, cancel) => vec![cancel],
        }
    }

    /// Answers a message the transport could not even read as text (too long,
    /// not UTF-8). `prefix` is its first bytes: when they show the request's
    /// id, the error carries it, so the client's call does not wait forever.
    pub fn reject_unreadable(&self, detail: &str, prefix: &[u8], out: &Outbound) {
        let id = jsonrpc::sniff_id(prefix);
        let _ = out.send(jsonrpc::error(
            id.as_ref(),
            jsonrpc::PARSE_ERROR,
            "Parse error",
            &Value::String(detail.to_string()),
        ));
    }

    fn handle_batch(&self, raw: &RawValue, out: &Outbound) -> Vec<CancellationToken> {
        let elements: Vec<&RawValue> = match serde_json::from_str(raw.get()) {
            Ok(e) => e,
            Err(e) => {
                let _ = out.send(jsonrpc::parse_error(&e.to_string()));
                return Vec::new();
            }
        };
        if elements.is_empty() {
            let _ = out.send(jsonrpc::error(
                None,
                jsonrpc::INVALID_REQUEST,
                "Invalid Request",
                &json!("Batch must not be empty"),
            ));
            return Vec::new();
        }
        let total = elements.len();
        let budget = Arc::new(AtomicUsize::new(0));
        let started: Vec<Started> = elements
            .into_iter()
            .enumerate()
            .map(|(i, e)| {
                if i < MAX_BATCH_ELEMENTS {
                    self.start(e, out, Some(&budget))
                } else {
                    Started::Done(self.refuse_excess_element(e, i, total))
                }
            })
            .collect();
        if total > MAX_BATCH_ELEMENTS {
            tracing::warn!(
                elements = total,
                limit = MAX_BATCH_ELEMENTS,
                "batch too long; excess elements refused"
            );
        }
        let cancels = started
            .iter()
            .filter_map(|s| match s {
                Started::Running(_, c) => Some(c.clone()),
                Started::Done(_) => None,
            })
            .collect();
        let out = out.clone();
        self.inner.tasks.spawn(async move {
            let mut lines = Vec::new();
            for s in started {
                match s {
                    Started::Done(Some(l)) => lines.push(l),
                    Started::Done(None) => {}
                    Started::Running(h, _) => {
                        if let Ok(Some(l)) = h.await {
                            lines.push(l)
                        }
                    }
                }
            }
            if !lines.is_empty() {
                // Sent as pieces: the answers are never copied into one
                // string, so a batch costs its answers' size once.
                let mut pieces = Vec::with_capacity(lines.len() * 2 + 1);
                for (i, line) in lines.into_iter().enumerate() {
                    pieces.push(if i == 0 { "[" } else { "," }.to_string());
                    pieces.push(line);
                }
                pieces.push("]".to_string());
                let _ = out.send_pieces(pieces);
            }
        });
        cancels
    }

    /// The answer to a batch element past [`MAX_BATCH_ELEMENTS`]: not run,
    /// and (for a request) an error saying why.
    fn refuse_excess_element(&self, raw: &RawValue, index: usize, total: usize) -> Option<String> {
        if self.inner.take_client_response(raw) {
            return None;
        }
        let id = match jsonrpc::parse_message(raw) {
            Ok(msg) => Some(msg.id?),
            Err(inv) if inv.is_notification => return None,
            Err(inv) => inv.id,
        };
        Some(jsonrpc::error(
            id.as_ref(),
            jsonrpc::LIMIT_EXCEEDED,
            "Limit exceeded",
            &Value::String(format!(
                "The batch has {total} elements; only the first {MAX_BATCH_ELEMENTS} are run. \
                 Element {} was not run: send it again in another batch or alone.",
                index + 1
            )),
        ))
    }

    /// Waits while the connection cannot take more input: its outgoing queue
    /// is full (the client is not reading) or [`MAX_IN_FLIGHT`] requests are
    /// running. Transports call this before handing over each message, so a
    /// client flooding requests is slowed to the pace it reads answers.
    pub async fn wait_for_capacity(&self, out: &Outbound) {
        loop {
            out.wait_for_room().await;
            let finished = self.inner.finished.notified();
            tokio::pin!(finished);
            finished.as_mut().enable();
            if self.inner.running.load(Ordering::Acquire) < MAX_IN_FLIGHT {
                return;
            }
            finished.await;
        }
    }

    /// Validates and starts one message. Quick lifecycle decisions happen here,
    /// in arrival order; real work runs as a task, which sends its response
    /// to `out` itself, unless it is part of a batch: then the task returns
    /// it, within the batch's response `budget` (bytes).
    ///
    /// The inline steps run on the transport's reader under the same guard
    /// as a request's task: a panic in them would end the reader (over
    /// stdio, the process) with the request unanswered. It becomes `-32603`
    /// for a request and a log line for anything else.
    fn start(&self, raw: &RawValue, out: &Outbound, budget: Option<&Arc<AtomicUsize>>) -> Started {
        let inline = AssertUnwindSafe(|| self.start_unguarded(raw, out, budget));
        match std::panic::catch_unwind(inline) {
            Ok(started) => started,
            Err(panic) => {
                let what = panic_text(panic);
                tracing::error!(error = %what, "handling a message failed before it ran");
                Started::Done(jsonrpc::request_id_of(raw).map(|id| internal_error(&id, &what)))
            }
        }
    }

    fn start_unguarded(
        &self,
        raw: &RawValue,
        out: &Outbound,
        budget: Option<&Arc<AtomicUsize>>,
    ) -> Started {
        if self.inner.take_client_response(raw) {
            return Started::Done(None);
        }
        let msg = match jsonrpc::parse_message(raw) {
            Ok(m) => m,
            Err(inv) => {
                if inv.is_notification {
                    return Started::Done(None);
                }
                return Started::Done(Some(inv.to_line()));
            }
        };
        #[cfg(feature = "test-tools")]
        crate::tools::testing::panic_inline_on(&msg.method);
        let Some(id) = msg.id.clone() else {
            self.handle_notification(&msg);
            return Started::Done(None);
        };
        let era = match mcp::request_era(&msg) {
            Ok(era) => era,
            Err(e) => return Started::Done(Some(e.into_line(&id))),
        };
        // The handshake changes connection state: do it inline, in order.
        if msg.method == "initialize" {
            return Started::Done(Some(match mcp::initialize(&self.inner, &msg, era) {
                Ok(v) => jsonrpc::success(&id, &v),
                Err(e) => e.into_line(&id),
            }));
        }
        if let Err(e) = mcp::check_ready(&self.inner, &msg, era) {
            return Started::Done(Some(e.into_line(&id)));
        }
        let cancel = CancellationToken::new();
        let cancel_handle = cancel.clone();
        let key = id.key();
        self.inner.inflight.lock().unwrap().insert(
            key.clone(),
            InFlight {
                cancel: cancel.clone(),
            },
        );
        let request = RequestCtx {
            conn: self.inner.clone(),
            id: id.clone(),
            era,
            cancel: cancel.clone(),
            out: out.clone(),
            progress_token: progress_token(&msg),
            started: Instant::now(),
            modern_capabilities: mcp::modern_client_capabilities(&msg),
        };
        let conn = self.inner.clone();
        let reply_to = budget.is_none().then(|| out.clone());
        let budget = budget.cloned();
        let running = Running::start(self.inner.clone());
        let handle = self.inner.tasks.spawn(async move {
            let _running = running;
            // A panicking handler becomes -32603; the connection lives on.
            let outcome = AssertUnwindSafe(mcp::dispatch(request, msg))
                .catch_unwind()
                .await;
            conn.inflight.lock().unwrap().remove(&key);
            if cancel.is_cancelled() {
                return None;
            }
            let line = match outcome {
                Ok(Ok(v)) => jsonrpc::success(&id, &v),
                Ok(Err(e)) => e.into_line(&id),
                Err(panic) => {
                    let what = panic_text(panic);
                    tracing::error!(error = %what, "request handler failed");
                    internal_error(&id, &what)
                }
            };
            match (reply_to, budget) {
                (Some(out), _) => {
                    let _ = out.send(line);
                    None
                }
                (None, Some(budget)) => Some(within_batch_budget(&budget, &id, line)),
                (None, None) => Some(line),
            }
        });
        Started::Running(handle, cancel_handle)
    }

    fn handle_notification(&self, msg: &Message) {
        match msg.method.as_str() {
            "notifications/cancelled" => {
                let key = msg
                    .params
                    .as_ref()
                    .and_then(|p| p.get("requestId"))
                    .and_then(jsonrpc::id_key_of_value);
                if let Some(key) = key {
                    if let Some(f) = self.inner.inflight.lock().unwrap().remove(&key) {
                        tracing::info!(request = %key, "request cancelled by client");
                        f.cancel.cancel();
                    }
                }
            }
            "notifications/initialized" | "notifications/roots/list_changed" => {
                let wants_roots = {
                    let lc = self.inner.lifecycle.lock().unwrap();
                    lc.legacy_version.is_some() && lc.client_capabilities.get("roots").is_some()
                };
                if wants_roots && !self.inner.session.root_is_fixed() {
                    self.inner.roots_settled.send_replace(false);
                    let conn = self.inner.clone();
                    self.inner
                        .tasks
                        .spawn(async move { conn.adopt_client_roots().await });
                }
            }
            other => tracing::debug!(method = other, "ignored notification"),
        }
    }

    /// Waits until every started request has been answered (used when the
    /// input ends: in-flight responses are still written).
    pub async fn drain(&self) {
        // The client is gone: requests to it will never be answered.
        self.inner.client_requests.lock().unwrap().clear();
        self.inner.tasks.close();
        self.inner.tasks.wait().await;
    }

    /// Cancels every running request (the connection is going away).
    pub fn cancel_all(&self) {
        for (_, f) in self.inner.inflight.lock().unwrap().drain() {
            f.cancel.cancel();
        }
    }
}

/// Counts a running request for [`Connection::wait_for_capacity`], until
/// dropped (when the request's task ends, however it ends).
struct Running(Arc<ConnState>);

impl Running {
    fn start(conn: Arc<ConnState>) -> Running {
        conn.running.fetch_add(1, Ordering::AcqRel);
        Running(conn)
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.0.running.fetch_sub(1, Ordering::AcqRel);
        self.0.finished.notify_waiters();
    }
}

/// A batch element's response, or, when it would take the batch's response
/// past [`MAX_BATCH_RESPONSE_BYTES`], an error saying so.
fn within_batch_budget(budget: &AtomicUsize, id: &RequestId, line: String) -> String {
    let n = line.len();
    let before = budget.fetch_add(n, Ordering::AcqRel);
    if before + n <= MAX_BATCH_RESPONSE_BYTES {
        return line;
    }
    budget.fetch_sub(n, Ordering::AcqRel);
    tracing::warn!(
        bytes = n,
        limit = MAX_BATCH_RESPONSE_BYTES,
        "batch response too large; an answer replaced by an error"
    );
    jsonrpc::error(
        Some(id),
        jsonrpc::LIMIT_EXCEEDED,
        "Limit exceeded",
        &Value::String(format!(
            "This answer ({n} bytes) would take the batch's response past its \
             {MAX_BATCH_RESPONSE_BYTES}-byte limit, so it was dropped: send the request \
             again alone or in a smaller batch."
        )),
    )
}

fn progress_token(msg: &Message) -> Option<Value> {
    msg.params
        .as_ref()?
        .get("_meta")?
        .get("progressToken")
        .filter(|t| t.is_string() || t.is_number())
        .cloned()
}

/// The `-32603` answer to a request whose handling panicked with `what`.
fn internal_error(id: &RequestId, what: &str) -> String {
    jsonrpc::error(
        Some(id),
        jsonrpc::INTERNAL_ERROR,
        "Internal error",
        &Value::String(format!("The server failed on this request: {what}")),
    )
}

pub(crate) fn panic_text(p: Box<dyn std::any::Any + Send>) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        s.to_string()
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.clone()
    } else {
        "internal panic".to_string()
    }
}

/// One running request, as the method handlers see it.
pub(crate) struct RequestCtx {
    pub(crate) conn: Arc<ConnState>,
    #[allow(dead_code)]
    pub(crate) id: RequestId,
    pub(crate) era: Era,
    pub(crate) cancel: CancellationToken,
    pub(crate) out: Outbound,
    pub(crate) progress_token: Option<Value>,
    pub(crate) started: Instant,
    /// The client capabilities a stateless request declared in `_meta`.
    pub(crate) modern_capabilities: Value,
}

impl RequestCtx {
    /// Sends `notifications/progress` every 500 ms once the request has run
    /// for a second, with the status line `status` returns (a call still
    /// waiting to start says so in its own words), until dropped.
    pub(crate) fn start_progress(
        &self,
        status: impl Fn() -> Option<Status> + Send + 'static,
    ) -> Option<ProgressGuard> {
        let token = self.progress_token.clone()?;
        let out = self.out.clone();
        let started = self.started;
        // A child of the request's token: stops with the guard, or as soon as
        // the request is cancelled.
        let stop = self.cancel.child_token();
        let stopped = stop.clone();
        tokio::spawn(async move {
            let first = started + Duration::from_secs(1);
            tokio::select! {
                _ = tokio::time::sleep_until(first.into()) => {}
                _ = stopped.cancelled() => return,
            }
            let mut n: u64 = 0;
            let mut tick = tokio::time::interval(Duration::from_millis(500));
            loop {
                tokio::select! {
                    _ = tick.tick() => {}
                    _ = stopped.cancelled() => return,
                }
                n += 1;
                let elapsed = started.elapsed().as_secs_f64();
                let message = match status() {
                    Some(Status::Waiting(line)) => line,
                    Some(Status::Running(line)) if !line.is_empty() => {
                        format!("running for {elapsed:.1}s: {line}")
                    }
                    _ => format!("running for {elapsed:.1}s"),
                };
                let params = json!({ "progressToken": token, "progress": n, "message": message });
                if out
                    .send(jsonrpc::notification("notifications/progress", &params))
                    .is_err()
                {
                    return;
                }
            }
        });
        Some(ProgressGuard(stop))
    }

    /// The capabilities the client declared: in `initialize` (legacy) or in
    /// this request's `_meta` (stateless).
    pub(crate) fn client_capabilities(&self) -> Value {
        match self.era {
            Era::Modern { .. } => self.modern_capabilities.clone(),
            Era::Legacy => self
                .conn
                .lifecycle
                .lock()
                .unwrap()
                .client_capabilities
                .clone(),
        }
    }

    /// A sink for progress the handler reports itself: it stops the status
    /// ticker (`ticker`) at the first report, so values never go back.
    pub(crate) fn progress_sink(
        &self,
        ticker: Option<&ProgressGuard>,
    ) -> Option<crate::tools::ProgressSink> {
        let token = self.progress_token.clone()?;
        let out = self.out.clone();
        let stop_ticker = ticker.map(|g| g.0.clone());
        Some(Arc::new(
            move |progress: f64, total: Option<f64>, message: Option<&str>| {
                if let Some(t) = &stop_ticker {
                    t.cancel();
                }
                let mut params = json!({ "progressToken": token, "progress": progress });
                if let Some(total) = total {
                    params["total"] = json!(total);
                }
                if let Some(m) = message {
                    params["message"] = json!(m);
                }
                let _ = out.send(jsonrpc::notification("notifications/progress", &params));
            },
        ))
    }
}

/// Stops progress notifications when dropped.
pub(crate) struct ProgressGuard(CancellationToken);

impl Drop for ProgressGuard {
    fn drop(&mut self) {
        self.0.cancel();
    }
}

/// Appends to each tool's description what the chosen implementation
/// cannot do ([`LispKind::missing_features`](crate::image::implementation::LispKind::missing_features)).
/// Only a local image named by `--lisp` is asked (its `--version`, once):
/// the default is SBCL, and an attached image's implementation is known
/// only once connected.
fn note_missing_features(tools_list: &mut Value, image: &crate::image::ImageConfig) {
    if image.attach.is_some() || image.lisp.is_none() {
        return;
    }
    let Ok((_, kind)) = crate::image::locate::find_lisp_kind(image) else {
        return;
    };
    for &feature in kind.missing_features() {
        let (tool, clause) = crate::tools::missing_feature_clause(kind, feature);
        if let Some(d) = tools_list
            .as_array_mut()
            .into_iter()
            .flatten()
            .find(|t| t["name"] == tool)
        {
            if let Some(text) = d["description"].as_str() {
                d["description"] = Value::String(format!("{text}{clause}"));
            }
        }
    }
}
