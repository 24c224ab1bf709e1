//! One connection's protocol state (`ConnState`: lifecycle, requests in
//! flight, requests to the client) and one running request as the method
//! handlers see it (`RequestCtx`: era, cancellation, progress).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::value::RawValue;
use serde_json::{json, Value};
use tokio::sync::{oneshot, Notify};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::approval_tokens::ApprovalTokens;
use super::engine::Engine;
use super::era::Era;
use super::jsonrpc::{self, RequestId};
use super::outbound::Outbound;
use super::tasks::TaskStore;
use crate::session::Session;
use crate::sync::MutexExt;
use crate::tools::{LogLevel, Status};

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

pub(crate) struct InFlight {
    pub(crate) cancel: CancellationToken,
}

pub(crate) struct ConnState {
    pub(crate) engine: Arc<Engine>,
    pub(crate) session: Arc<Session>,
    pub(crate) lifecycle: Mutex<Lifecycle>,
    pub(crate) inflight: Mutex<HashMap<String, InFlight>>,
    pub(crate) tasks: TaskTracker,
    /// Outstanding approval tokens (`--require-approval`).
    pub(crate) approvals: ApprovalTokens,
    /// Requests this server sent to the client, waiting for its response.
    pub(crate) client_requests: Mutex<HashMap<String, oneshot::Sender<Result<Value, Value>>>>,
    /// False while the client's roots are being fetched: tool calls wait
    /// (briefly) so they run under the right project root.
    pub(crate) roots_settled: tokio::sync::watch::Sender<bool>,
    pub(crate) next_client_request: AtomicU64,
    /// Requests started and not yet finished (including batch elements).
    pub(crate) running: AtomicUsize,
    /// Signalled whenever a request finishes.
    pub(crate) finished: Notify,
    /// Messages not tied to a request (our requests to the client).
    pub(crate) notify: Outbound,
    /// Nodes the proxy in front said are down (`X-Node-Down` on a
    /// stateless POST): tools tell a handle of theirs from a misrouted one.
    pub(crate) nodes_down: std::sync::OnceLock<Vec<String>>,
}

/// Why a request this server sent to the client got no result.
#[derive(Debug, thiserror::Error)]
pub enum ClientRequestError {
    #[error("this transport cannot carry requests to the client")]
    NoChannel,
    #[error("the client answered {method} with an error: {error}")]
    Answered { method: String, error: Value },
    #[error("the client did not answer {method}")]
    NoAnswer { method: String },
}

impl ConnState {
    /// The tasks of this connection's session.
    pub(crate) fn tasks(&self) -> Arc<TaskStore> {
        self.engine.tasks.of(self.session.id)
    }

    /// Sends a request to the client and waits (bounded) for its answer.
    pub(crate) async fn request_client(
        &self,
        out: &Outbound,
        method: &str,
        params: Value,
    ) -> Result<Value, ClientRequestError> {
        let n = self.next_client_request.fetch_add(1, Ordering::Relaxed);
        let id = format!("cl-mcp-{n}");
        let (tx, rx) = oneshot::channel();
        self.client_requests.guard().insert(format!("s:{id}"), tx);
        let msg = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        if out.send(msg.to_string()).is_err() {
            self.client_requests.guard().remove(&format!("s:{id}"));
            return Err(ClientRequestError::NoChannel);
        }
        match tokio::time::timeout(Duration::from_secs(30), rx).await {
            Ok(Ok(Ok(v))) => Ok(v),
            Ok(Ok(Err(error))) => Err(ClientRequestError::Answered {
                method: method.to_string(),
                error,
            }),
            _ => {
                self.client_requests.guard().remove(&format!("s:{id}"));
                Err(ClientRequestError::NoAnswer {
                    method: method.to_string(),
                })
            }
        }
    }

    /// If `raw` is a response to one of our requests, delivers it. Responses
    /// are never answered, whatever they hold.
    pub(crate) fn take_client_response(&self, raw: &RawValue) -> bool {
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
        if let Some(tx) = key.and_then(|k| self.client_requests.guard().remove(&k)) {
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
    pub(crate) async fn adopt_client_roots(self: Arc<Self>) {
        let result = self
            .request_client(&self.notify, "roots/list", json!({}))
            .await;
        match result {
            Ok(result) => {
                let paths = crate::uri::root_paths(&result);
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
    /// A tool call's context for this request: its session, cancellation,
    /// era and the nodes the proxy said are down.
    pub(crate) fn tool_context(&self, cancel: CancellationToken) -> crate::tools::ToolContext {
        crate::tools::ToolContext::new(self.conn.session.clone(), cancel).in_era(
            super::era::is_modern(self.era),
            self.conn.nodes_down.get().cloned().unwrap_or_default(),
        )
    }

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
            Era::Legacy => self.conn.lifecycle.guard().client_capabilities.clone(),
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
