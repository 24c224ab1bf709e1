//! MCP tasks (2025-11-25, `tasks` utility): a `tools/call` carrying
//! `params.task` is answered at once with a task; the call runs on in the
//! background and its result is fetched later with `tasks/result`.
//! `tasks/get`, `tasks/list` and `tasks/cancel` (which interrupts the
//! image's work like `notifications/cancelled`) complete the set.
//!
//! Tasks belong to the session, so a client polling over several
//! connections (stateless HTTP requests share one session) sees them. A
//! task and its result are dropped once its `ttl` has passed.

use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use serde_json::{json, Value};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

/// The `ttl` a task gets when the client asks for none, and the longest it
/// may ask for.
pub const DEFAULT_TTL: Duration = Duration::from_secs(60 * 60);
pub const MAX_TTL: Duration = Duration::from_secs(24 * 60 * 60);
/// How often a client should poll `tasks/get`.
pub const POLL_INTERVAL_MS: u64 = 1000;
/// Most tasks a session keeps; past it the oldest finished ones go, and a
/// new task is refused while this many are still running.
pub const MAX_TASKS: usize = 256;
/// Tasks per `tasks/list` page.
const PAGE: usize = 100;

/// Where a task is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    Working,
    Completed,
    Failed,
    Cancelled,
}

impl Status {
    fn name(self) -> &'static str {
        match self {
            Status::Working => "working",
            Status::Completed => "completed",
            Status::Failed => "failed",
            Status::Cancelled => "cancelled",
        }
    }

    pub fn is_terminal(self) -> bool {
        self != Status::Working
    }
}

/// What the underlying request answered: its result, or a JSON-RPC error
/// (code, message, data).
pub type Outcome = Result<Value, (i64, &'static str, Value)>;

struct State {
    status: Status,
    message: Option<String>,
    updated: SystemTime,
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
}

impl Task {
    fn expired(&self, now: SystemTime) -> bool {
        now.duration_since(self.created)
            .is_ok_and(|age| age > self.ttl)
    }

    pub fn status(&self) -> Status {
        self.state.lock().unwrap().status
    }

    /// The `Task` object of the protocol.
    pub fn to_json(&self) -> Value {
        let st = self.state.lock().unwrap();
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

    /// Records the work's outcome; the status follows it unless the task
    /// was cancelled first (a cancelled task stays cancelled). Returns true
    /// when the status changed.
    pub fn finish(&self, outcome: Outcome) -> bool {
        let changed = {
            let mut st = self.state.lock().unwrap();
            if st.status == Status::Working {
                let failed = match &outcome {
                    Ok(r) => r.get("isError") == Some(&Value::Bool(true)),
                    Err(_) => true,
                };
                st.status = if failed {
                    Status::Failed
                } else {
                    Status::Completed
                };
                st.message = Some(if failed {
                    "The tool call failed; tasks/result has its answer.".into()
                } else {
                    "The tool call completed; tasks/result has its answer.".into()
                });
                st.updated = SystemTime::now();
                true
            } else {
                false
            }
        };
        self.outcome.send_replace(Some(outcome));
        changed
    }

    /// Moves a working task to `cancelled` and stops its work. Refuses a
    /// task that already ended.
    pub fn cancel(&self) -> Result<(), Status> {
        let mut st = self.state.lock().unwrap();
        if st.status.is_terminal() {
            return Err(st.status);
        }
        st.status = Status::Cancelled;
        st.message = Some("The task was cancelled by request.".into());
        st.updated = SystemTime::now();
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
            _ => Err((
                super::jsonrpc::INTERNAL_ERROR,
                "Internal error",
                Value::String("the task's work ended without an answer".into()),
            )),
        }
    }
}

/// A session's tasks, oldest first.
#[derive(Default)]
pub struct TaskStore {
    tasks: Mutex<Vec<Arc<Task>>>,
}

impl TaskStore {
    /// A new working task, with the client's `ttl` (milliseconds) bounded.
    pub fn create(&self, ttl_ms: Option<u64>) -> Result<Arc<Task>, String> {
        let ttl = ttl_ms
            .map(Duration::from_millis)
            .unwrap_or(DEFAULT_TTL)
            .min(MAX_TTL);
        let now = SystemTime::now();
        let mut tasks = self.tasks.lock().unwrap();
        tasks.retain(|t| !t.expired(now));
        while tasks.len() >= MAX_TASKS {
            match tasks.iter().position(|t| t.status().is_terminal()) {
                Some(i) => {
                    tasks.remove(i);
                }
                None => {
                    return Err(format!(
                        "this session already has {MAX_TASKS} tasks running; wait for some to \
                         finish or cancel them (tasks/cancel)"
                    ))
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
            }),
            outcome: watch::channel(None).0,
            cancel: CancellationToken::new(),
        });
        tasks.push(task.clone());
        Ok(task)
    }

    /// The task with this id, unless unknown or expired.
    pub fn get(&self, id: &str) -> Option<Arc<Task>> {
        let now = SystemTime::now();
        let mut tasks = self.tasks.lock().unwrap();
        tasks.retain(|t| !t.expired(now));
        tasks.iter().find(|t| t.id == id).cloned()
    }

    /// One page of tasks (oldest first) and the cursor of the next.
    pub fn list(&self, cursor: Option<&str>) -> Result<(Vec<Value>, Option<String>), String> {
        let now = SystemTime::now();
        let mut tasks = self.tasks.lock().unwrap();
        tasks.retain(|t| !t.expired(now));
        // The cursor is the id of the last task of the previous page.
        let start = match cursor {
            None => 0,
            Some(c) => {
                tasks.iter().position(|t| t.id == c).ok_or_else(|| {
                    format!("invalid cursor '{c}' (not one this server gave, or its task expired)")
                })? + 1
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
        for t in self.tasks.lock().unwrap().iter() {
            let _ = t.cancel();
        }
    }
}
