//! Connections and their requests: each request runs concurrently as a task,
//! is answered exactly once (or not at all when cancelled); notifications
//! are never answered. Batches, the protocol's bounds, and the handshake
//! steps that must happen in arrival order live here; the method table
//! (`methods`) does the rest.

use std::collections::HashMap;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use futures::FutureExt;
use serde_json::value::RawValue;
use serde_json::{json, Value};
use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::engine::Engine;
use super::era;
use super::jsonrpc::{self, Message, RequestId};
use super::methods;
use super::outbound::Outbound;
use super::request::{panic_text, ConnState, InFlight, Lifecycle, RequestCtx};
use crate::session::Session;
use crate::sync::MutexExt;

/// Requests running on one connection past which its transport reads no
/// further input until one finishes ([`Connection::wait_for_capacity`]).
pub const MAX_IN_FLIGHT: usize = 256;
/// Elements of one batch that are run; the rest are answered with an error.
pub const MAX_BATCH_ELEMENTS: usize = 1000;
/// Bytes of one batch's response; answers past it are replaced by an error.
pub const MAX_BATCH_RESPONSE_BYTES: usize = 32 * 1024 * 1024;

impl Engine {
    /// Opens one MCP session (a stdio stream, a TCP connection, an HTTP
    /// session). `notify` receives messages not tied to a request.
    pub fn connect(self: &Arc<Self>, notify: Outbound) -> Connection {
        self.connect_to(self.new_session(), notify)
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
                nodes_down: Default::default(),
            }),
        }
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
    /// Says which nodes the proxy in front reported down (see
    /// `ToolContext::nodes_down`); set once, before the connection's
    /// first request.
    pub fn note_nodes_down(&self, nodes: Vec<String>) {
        let _ = self.inner.nodes_down.set(nodes);
    }

    /// The session behind this connection.
    pub fn session(&self) -> &Arc<Session> {
        &self.inner.session
    }

    /// The legacy protocol version agreed in `initialize`, once it happened.
    pub fn protocol_version(&self) -> Option<String> {
        self.inner.lifecycle.guard().legacy_version.clone()
    }

    /// True once a legacy `initialize` has been answered.
    pub fn is_initialized(&self) -> bool {
        self.inner.lifecycle.guard().legacy_version.is_some()
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
        let era = match era::request_era(&msg) {
            Ok(era) => era,
            Err(e) => return Started::Done(Some(e.into_line(&id))),
        };
        // The handshake changes connection state: do it inline, in order.
        if msg.method == "initialize" {
            return Started::Done(Some(match methods::initialize(&self.inner, &msg, era) {
                Ok(v) => jsonrpc::success(&id, &v),
                Err(e) => e.into_line(&id),
            }));
        }
        if let Err(e) = methods::check_ready(&self.inner, &msg, era) {
            return Started::Done(Some(e.into_line(&id)));
        }
        let cancel = CancellationToken::new();
        let cancel_handle = cancel.clone();
        let key = id.key();
        self.inner.inflight.guard().insert(
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
            modern_capabilities: era::modern_client_capabilities(&msg),
        };
        let conn = self.inner.clone();
        let reply_to = budget.is_none().then(|| out.clone());
        let budget = budget.cloned();
        let running = Running::start(self.inner.clone());
        let handle = self.inner.tasks.spawn(async move {
            let _running = running;
            // A panicking handler becomes -32603; the connection lives on.
            let outcome = AssertUnwindSafe(methods::dispatch(request, msg))
                .catch_unwind()
                .await;
            conn.inflight.guard().remove(&key);
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
                    if let Some(f) = self.inner.inflight.guard().remove(&key) {
                        tracing::info!(request = %key, "request cancelled by client");
                        f.cancel.cancel();
                    }
                }
            }
            "notifications/initialized" | "notifications/roots/list_changed" => {
                let wants_roots = {
                    let lc = self.inner.lifecycle.guard();
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
        self.inner.client_requests.guard().clear();
        self.inner.tasks.close();
        self.inner.tasks.wait().await;
    }

    /// Cancels every running request (the connection is going away).
    pub fn cancel_all(&self) {
        for (_, f) in self.inner.inflight.guard().drain() {
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
