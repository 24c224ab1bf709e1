//! MCP tasks (2025-11-25, `tasks` utility): a `tools/call` carrying
//! `params.task` is answered at once with a task; the call runs on in the
//! background and its result is fetched later with `tasks/result`.
//! `tasks/get`, `tasks/list` and `tasks/cancel` (which interrupts the
//! image's work like `notifications/cancelled`) complete the set.
//!
//! The 2026-07-28 era has the tasks extension instead (SEP-2663,
//! `io.modelcontextprotocol/tasks`; see `methods::task_runner`): the
//! server decides to answer a `tools/call` with a task when the request's
//! client capabilities declare the extension; `tasks/get` inlines the
//! result, the error or the pending input requests, `tasks/update` answers
//! them, and `tasks/result` and `tasks/list` are gone. One [`Task`] serves
//! both eras; `v2` says which rules it was created under.
//!
//! Tasks belong to the session, so a client polling over several
//! connections (stateless HTTP requests share one session) sees them: the
//! engine keeps each session's [`TaskStore`] in [`TaskStores`], keyed by
//! session id, and drops it when the session ends (`Session::on_end`).
//!
//! A task's `ttl` counts from its creation, but a task is never dropped
//! while its work runs: the work may hold the image's evaluation turn, and
//! a task nobody can see could not be cancelled. One that ends past its
//! `ttl` is kept for another `ttl` after it ended (the spec allows deleting
//! a task once its `ttl` has passed; it does not require it), so its
//! result can still be fetched.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use serde_json::{json, Map, Value};
use tokio::sync::{watch, Notify};
use tokio_util::sync::CancellationToken;

use super::error::McpError;
use crate::sync::MutexExt;

/// The `ttl` a task gets when the client asks for none, and the longest it
/// may ask for.
pub const DEFAULT_TTL: Duration = Duration::from_secs(60 * 60);
pub const MAX_TTL: Duration = Duration::from_secs(24 * 60 * 60);
/// How often a client should poll `tasks/get`.
pub const POLL_INTERVAL_MS: u64 = 1000;
/// Most tasks a session holds: working ones and finished ones whose `ttl`
/// has not passed. Past it the oldest finished task whose result was
/// already collected goes; when none was, a new task is refused (a `ttl`
/// of 0 does not bypass the cap: a working task never expires).
pub const MAX_TASKS: usize = 256;
/// Tasks per `tasks/list` page.
const PAGE: usize = 100;

/// Where a task is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    Working,
    /// Waiting for the client's answers to its input requests (2026-07-28).
    InputRequired,
    Completed,
    Failed,
    Cancelled,
}

impl Status {
    fn name(self) -> &'static str {
        match self {
            Status::Working => "working",
            Status::InputRequired => "input_required",
            Status::Completed => "completed",
            Status::Failed => "failed",
            Status::Cancelled => "cancelled",
        }
    }

    pub fn is_terminal(self) -> bool {
        !matches!(self, Status::Working | Status::InputRequired)
    }
}

/// What the underlying request answered: its result, or a JSON-RPC error.
pub type Outcome = Result<Value, McpError>;

struct State {
    status: Status,
    message: Option<String>,
    updated: SystemTime,
    /// While `input_required`: the requests not answered yet, by key.
    pending: Map<String, Value>,
    /// The answers gathered so far in this round, and the state the tool
    /// asked to get back with them.
    answered: Map<String, Value>,
    round_state: Option<Value>,
    /// When the task reached a terminal status.
    ended: Option<SystemTime>,
    /// The client has had its outcome (`tasks/result`, a terminal
    /// `tasks/get` of 2026-07-28, or its own `tasks/cancel`): the task may
    /// make room for a new one before its `ttl` has passed.
    collected: bool,
}

/// One task.
pub struct Task {
    pub id: String,
    created: SystemTime,
    ttl: Duration,
    state: Mutex<State>,
    /// The outcome, once the work has finished (also after a cancel).
    outcome: watch::Sender<Option<Outcome>>,
    /// Cancels the work.
    pub cancel: CancellationToken,
    /// Created under the 2026-07-28 tasks extension (SEP-2663): a tool's
    /// `isError` result completes the task (only a protocol error fails it).
    pub v2: bool,
    /// Wakes the work when the last pending input request is answered.
    input_ready: Notify,
}

impl Task {
    /// Whether the task may be dropped: never while it works; once ended,
    /// when its `ttl` from creation has passed, or, for a task that ended
    /// past it, its `ttl` from the end.
    fn expired(&self, now: SystemTime) -> bool {
        let st = self.state.guard();
        let Some(ended) = st.ended.filter(|_| st.status.is_terminal()) else {
            return false;
        };
        let deadline = self.created + self.ttl;
        let until = if ended > deadline {
            ended + self.ttl
        } else {
            deadline
        };
        now > until
    }

    /// Ended, and its outcome already reached the client.
    fn collected(&self) -> bool {
        let st = self.state.guard();
        st.status.is_terminal() && st.collected
    }

    /// Notes that the client has had the task's outcome.
    pub fn mark_collected(&self) {
        self.state.guard().collected = true;
    }

    pub fn status(&self) -> Status {
        self.state.guard().status
    }

    /// The `Task` object of the protocol.
    pub fn to_json(&self) -> Value {
        let st = self.state.guard();
        let mut t = json!({
            "taskId": self.id,
            "status": st.status.name(),
            "createdAt": humantime::format_rfc3339_millis(self.created).to_string(),
            "lastUpdatedAt": humantime::format_rfc3339_millis(st.updated).to_string(),
            "ttl": self.ttl.as_millis() as u64,
            "pollInterval": POLL_INTERVAL_MS,
        });
        if let Some(m) = &st.message {
            t["statusMessage"] = Value::String(m.clone());
        }
        t
    }

    /// The task of the 2026-07-28 extension: `CreateTaskResult`'s fields
    /// (`ttlMs`, `pollIntervalMs`; no `result`, `error` or input requests).
    pub fn to_json_v2(&self) -> Value {
        self.fields_v2(&self.state.guard())
    }

    fn fields_v2(&self, st: &State) -> Value {
        let mut t = json!({
            "taskId": self.id,
            "status": st.status.name(),
            "createdAt": humantime::format_rfc3339_millis(self.created).to_string(),
            "lastUpdatedAt": humantime::format_rfc3339_millis(st.updated).to_string(),
            "ttlMs": self.ttl.as_millis() as u64,
            "pollIntervalMs": POLL_INTERVAL_MS,
        });
        if let Some(m) = &st.message {
            t["statusMessage"] = Value::String(m.clone());
        }
        t
    }

    /// `tasks/get`'s `DetailedTask`: the task with, by status, the pending
    /// `inputRequests`, the tool's `result` or the protocol `error`.
    pub fn detailed_v2(&self) -> Value {
        // The status and what goes with it, read together (see `finish`).
        let mut st = self.state.guard();
        if st.status.is_terminal() {
            st.collected = true;
        }
        let mut t = self.fields_v2(&st);
        match st.status {
            Status::InputRequired => t["inputRequests"] = Value::Object(st.pending.clone()),
            Status::Completed | Status::Failed => match &*self.outcome.borrow() {
                Some(Ok(r)) => {
                    // A complete `CallToolResult` of this era, as the
                    // client would have had it directly.
                    let mut r = r.clone();
                    if let Value::Object(m) = &mut r {
                        m.entry("resultType").or_insert(json!("complete"));
                    }
                    t["result"] = r;
                }
                Some(Err(e)) => {
                    t["error"] = json!({ "code": e.code, "message": e.message, "data": e.data })
                }
                None => {}
            },
            Status::Working | Status::Cancelled => {}
        }
        t
    }

    /// The work needs the client's answers to `requests` (2026-07-28):
    /// the task waits in `input_required` until `tasks/update` has answered
    /// every one of them. Returns the answers, or `None` once the task is
    /// cancelled.
    pub async fn wait_for_input(
        &self,
        requests: Map<String, Value>,
        state: Option<Value>,
    ) -> Option<crate::tools::ClientInput> {
        if requests.is_empty() {
            // Nothing to ask: the tool gets its state back at once.
            return Some(crate::tools::ClientInput {
                responses: Some(Map::new()),
                state,
            });
        }
        {
            let mut st = self.state.guard();
            if st.status != Status::Working {
                return None;
            }
            st.status = Status::InputRequired;
            st.message = Some(
                "The tool needs input from the client: answer inputRequests with tasks/update."
                    .into(),
            );
            st.updated = SystemTime::now();
            st.pending = requests;
            st.answered = Map::new();
            st.round_state = state;
        }
        loop {
            tokio::select! {
                _ = self.input_ready.notified() => {}
                _ = self.cancel.cancelled() => return None,
            }
            let mut st = self.state.guard();
            if st.status == Status::Cancelled {
                return None;
            }
            if st.pending.is_empty() && st.status == Status::InputRequired {
                st.status = Status::Working;
                st.message = Some("The tool call is running.".into());
                st.updated = SystemTime::now();
                return Some(crate::tools::ClientInput {
                    responses: Some(std::mem::take(&mut st.answered)),
                    state: st.round_state.take(),
                });
            }
        }
    }

    /// `tasks/update`: records the answers to pending input requests
    /// (answers to keys that are not pending are ignored) and resumes the
    /// work once none is left.
    pub fn answer_input(&self, responses: &Map<String, Value>) {
        let mut st = self.state.guard();
        if st.status != Status::InputRequired {
            return;
        }
        for (key, value) in responses {
            if st.pending.remove(key).is_some() {
                st.answered.insert(key.clone(), value.clone());
            }
        }
        if !responses.is_empty() {
            st.updated = SystemTime::now();
        }
        if st.pending.is_empty() {
            drop(st);
            self.input_ready.notify_one();
        }
    }

    /// Records the work's outcome; the status follows it unless the task
    /// was cancelled first (a cancelled task stays cancelled). Returns true
    /// when the status changed.
    pub fn finish(&self, outcome: Outcome) -> bool {
        // Under the state's lock, so `detailed_v2` never sees a finished
        // status without its outcome.
        let mut st = self.state.guard();
        let changed = !st.status.is_terminal();
        if changed {
            let failed = match &outcome {
                // A tool's own error completes a 2026-07-28 task.
                Ok(r) => !self.v2 && r.get("isError") == Some(&Value::Bool(true)),
                Err(_) => true,
            };
            st.status = if failed {
                Status::Failed
            } else {
                Status::Completed
            };
            let place = if self.v2 { "tasks/get" } else { "tasks/result" };
            st.message = Some(if failed {
                format!("The tool call failed; {place} has its answer.")
            } else {
                format!("The tool call completed; {place} has its answer.")
            });
            st.pending.clear();
            st.updated = SystemTime::now();
        }
        // A cancelled task ends when its work does.
        st.ended.get_or_insert_with(SystemTime::now);
        self.outcome.send_replace(Some(outcome));
        changed
    }

    /// The outcome, if the work has finished.
    pub fn outcome_now(&self) -> Option<Outcome> {
        self.outcome.borrow().clone()
    }

    /// Moves a working (or input-waiting) task to `cancelled` and stops its
    /// work. Refuses a task that already ended.
    pub fn cancel(&self) -> Result<(), Status> {
        let mut st = self.state.guard();
        if st.status.is_terminal() {
            return Err(st.status);
        }
        st.status = Status::Cancelled;
        st.pending.clear();
        st.message = Some("The task was cancelled by request.".into());
        st.updated = SystemTime::now();
        st.collected = true;
        drop(st);
        self.cancel.cancel();
        Ok(())
    }

    /// Waits for the work's outcome.
    pub async fn outcome(&self) -> Outcome {
        let mut rx = self.outcome.subscribe();
        let seen = rx.wait_for(Option::is_some).await.map(|o| o.clone());
        match seen {
            Ok(Some(o)) => o,
            _ => Err(McpError::internal(
                "the task's work ended without an answer",
            )),
        }
    }
}

/// The extension id of 2026-07-28 tasks (SEP-2663), in `capabilities.extensions`.
pub const EXTENSION: &str = "io.modelcontextprotocol/tasks";
/// How long a 2026-07-28 call to a tool whose task support is optional may
/// take and still be answered directly; past it the client gets a task.
pub const DIRECT_ANSWER_WITHIN: Duration = Duration::from_millis(500);
/// Input rounds a 2026-07-28 task may ask for.
pub const MAX_INPUT_ROUNDS: usize = 8;

/// Why a session's tasks could not be created or listed.
#[derive(Debug, thiserror::Error)]
pub enum TaskError {
    /// [`MAX_TASKS`] tasks are kept already; `working` of them still run.
    #[error(
        "this session already holds {MAX_TASKS} tasks, the most it keeps \
         ({working} still working, {} finished whose results were not fetched \
         yet); no new task was created. Fetch finished results (tasks/result, or \
         tasks/get under the tasks extension), cancel tasks (tasks/cancel), or \
         wait for them to finish and their ttl to pass. A small ttl does not \
         make room: a working task is kept until it ends.",
        MAX_TASKS - working
    )]
    Full { working: usize },
    #[error("invalid cursor '{0}' (not one this server gave, or its task expired)")]
    InvalidCursor(String),
}

/// A session's tasks, oldest first.
#[derive(Default)]
pub struct TaskStore {
    tasks: Mutex<Vec<Arc<Task>>>,
}

impl TaskStore {
    /// A new working task, with the client's `ttl` (milliseconds) bounded;
    /// `v2` for the 2026-07-28 extension's rules.
    pub fn create(&self, ttl_ms: Option<u64>, v2: bool) -> Result<Arc<Task>, TaskError> {
        let ttl = ttl_ms
            .map(Duration::from_millis)
            .unwrap_or(DEFAULT_TTL)
            .min(MAX_TTL);
        let now = SystemTime::now();
        let mut tasks = self.tasks.guard();
        tasks.retain(|t| !t.expired(now));
        while tasks.len() >= MAX_TASKS {
            match tasks.iter().position(|t| t.collected()) {
                Some(i) => {
                    tasks.remove(i);
                }
                None => {
                    let working = tasks.iter().filter(|t| !t.status().is_terminal()).count();
                    return Err(TaskError::Full { working });
                }
            }
        }
        let task = Arc::new(Task {
            id: super::random_token(),
            created: now,
            ttl,
            state: Mutex::new(State {
                status: Status::Working,
                message: Some("The tool call is running.".into()),
                updated: now,
                pending: Map::new(),
                answered: Map::new(),
                round_state: None,
                ended: None,
                collected: false,
            }),
            outcome: watch::channel(None).0,
            cancel: CancellationToken::new(),
            v2,
            input_ready: Notify::new(),
        });
        tasks.push(task.clone());
        Ok(task)
    }

    /// The task with this id, unless unknown or expired.
    pub fn get(&self, id: &str) -> Option<Arc<Task>> {
        let now = SystemTime::now();
        let mut tasks = self.tasks.guard();
        tasks.retain(|t| !t.expired(now));
        tasks.iter().find(|t| t.id == id).cloned()
    }

    /// Forgets a task (one answered at once, without its id ever reaching
    /// the client).
    pub fn remove(&self, id: &str) {
        self.tasks.guard().retain(|t| t.id != id);
    }

    /// One page of tasks (oldest first) and the cursor of the next.
    pub fn list(&self, cursor: Option<&str>) -> Result<(Vec<Value>, Option<String>), TaskError> {
        let now = SystemTime::now();
        let mut tasks = self.tasks.guard();
        tasks.retain(|t| !t.expired(now));
        // The cursor is the id of the last task of the previous page.
        let start = match cursor {
            None => 0,
            Some(c) => {
                tasks
                    .iter()
                    .position(|t| t.id == c)
                    .ok_or_else(|| TaskError::InvalidCursor(c.to_string()))?
                    + 1
            }
        };
        let page: Vec<&Arc<Task>> = tasks.iter().skip(start).take(PAGE).collect();
        let next = (start + page.len() < tasks.len())
            .then(|| page.last().map(|t| t.id.clone()))
            .flatten();
        Ok((page.iter().map(|t| t.to_json()).collect(), next))
    }

    /// Cancels every task still working (the session ends).
    pub fn cancel_all(&self) {
        for t in self.tasks.guard().iter() {
            let _ = t.cancel();
        }
    }
}

/// Every session's [`TaskStore`], keyed by session id: the protocol's own
/// per-session state, kept out of `Session`.
#[derive(Default)]
pub struct TaskStores {
    stores: Mutex<HashMap<u64, Arc<TaskStore>>>,
}

impl TaskStores {
    /// The tasks of session `session` (an empty store at first).
    pub fn of(&self, session: u64) -> Arc<TaskStore> {
        self.stores.guard().entry(session).or_default().clone()
    }

    /// Forgets the tasks of a session that ended (work still running keeps
    /// its own task until it finishes).
    pub fn end_session(&self, session: u64) {
        self.stores.guard().remove(&session);
    }
}
