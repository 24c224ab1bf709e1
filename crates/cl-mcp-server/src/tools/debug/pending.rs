//! One `debug: true` evaluation from its start to its reply ([`Pending`]):
//! the task that owns the suspended request and follows the image's
//! `:debug`/`:debug-return` events, and the waits on its state.

use crate::image::Image;
use crate::sync::MutexExt;
use crate::tools::eval::InterruptCause;
use crate::tools::lisp_call::{call_fresh, helper_form, plist_str, reply_value, BUFFER_PACKAGE};
use crate::tools::session_state::SessionTools;
use crate::tools::ToolContext;
use crate::tools::ToolError;
use lisp_syntax::data::Value;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};
use swank_client::SwankEvent;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

/// How long an interrupted (timed-out, cancelled, idle) suspended
/// evaluation may take to unwind.
pub(super) const UNWIND_GRACE: Duration = Duration::from_secs(5);
/// Status polls (progress) start after this long, then come this often.
const STATUS_DELAY: Duration = Duration::from_millis(1000);
const STATUS_POLL: Duration = Duration::from_millis(500);

// ---------------------------------------------------------------------------
// Pending debuggers.

/// What a [`Pending`] evaluation is doing now.
#[derive(Clone, Debug, Default)]
pub struct PendState {
    /// The Swank thread it runs on (known once it entered the debugger).
    pub thread: Option<i64>,
    /// Debugger level it waits in; 0 while it runs.
    pub level: i64,
    /// Incremented by every debugger entry (a new level, or a level shown
    /// again after a nested one was left).
    pub debug_seq: u64,
    /// The evaluation's reply (`cl-mcp:eval-request`'s plist), once over.
    pub outcome: Option<Result<Value, ToolError>>,
    /// Why the server aborted it, if it did (idle, session end).
    pub aborted: Option<String>,
}

/// One `debug: true` evaluation of a session, from its start until its
/// reply: running, or suspended in the debugger.
pub struct Pending {
    /// The evaluation's id (also the debugger's number in the tools).
    pub id: u64,
    /// The first line of its code, for listings.
    pub code: String,
    /// The thread it took over (`debugger-backtrace` `takeOver`), instead
    /// of an evaluation of ours.
    pub taken_over: Option<i64>,
    /// The session's image it runs in (`None`: the first); the debugger
    /// tools address that image whatever their `image` says.
    pub image: Option<String>,
    pub(super) state: watch::Sender<PendState>,
    pub(super) touched: Mutex<Instant>,
    /// Wakes the monitor when `touched` moved (the idle deadline changed).
    pub(super) touch: tokio::sync::Notify,
    /// Tool calls running on its thread now (code in a frame): while one
    /// runs the debugger is in use, and is never aborted as idle under it.
    pub(super) running: AtomicUsize,
}

/// A tool call running on a pending debugger's thread ([`Pending::in_use`]);
/// its end counts as the debugger's last use.
pub(super) struct InUse<'a>(&'a Pending);

impl Drop for InUse<'_> {
    fn drop(&mut self) {
        self.0.running.fetch_sub(1, Ordering::SeqCst);
        self.0.touch();
    }
}

impl Pending {
    pub fn state(&self) -> PendState {
        self.state.borrow().clone()
    }

    pub(super) fn touch(&self) {
        *self.touched.guard() = Instant::now();
        self.touch.notify_one();
    }

    /// Its evaluation entered the debugger at `level` on `thread`.
    pub(super) fn entered(&self, thread: i64, level: i64) {
        self.touch();
        self.state.send_modify(|s| {
            s.thread = Some(thread);
            s.level = level;
            s.debug_seq += 1;
        });
    }

    /// Marks a call running on its thread until the guard drops: the idle
    /// abort waits for it (`--debugger-idle-secs` counts from its end).
    pub(super) fn in_use(&self) -> InUse<'_> {
        self.running.fetch_add(1, Ordering::SeqCst);
        self.touch();
        InUse(self)
    }

    /// Whether a call runs on its thread now ([`Self::in_use`]): the idle
    /// deadline waits (its start and end wake the monitor).
    pub(super) fn in_use_now(&self) -> bool {
        self.running.load(Ordering::SeqCst) > 0
    }

    /// Seconds since a tool last touched it.
    pub fn idle_secs(&self) -> u64 {
        self.touched.guard().elapsed().as_secs()
    }
}

/// Starts evaluation `id` (an `eval-request` form with `:debug t`) so that
/// its debugger entries wait, and registers it with the session.
pub fn start(ctx: &ToolContext, id: u64, form: String, code: &str) -> Arc<Pending> {
    let (state, _) = watch::channel(PendState::default());
    let pending = Arc::new(Pending {
        id,
        code: code.lines().next().unwrap_or("").chars().take(80).collect(),
        taken_over: None,
        image: ctx.addressed_image(),
        state,
        touched: Mutex::new(Instant::now()),
        touch: tokio::sync::Notify::new(),
        running: AtomicUsize::new(0),
    });
    ctx.state.debuggers.list.guard().push(pending.clone());
    let idle = Duration::from_secs(ctx.session.config.debugger_idle_secs.max(1));
    tokio::spawn(monitor(
        ctx.image(),
        Arc::downgrade(&ctx.state),
        pending.clone(),
        form,
        idle,
        ctx.state.debuggers.end.clone(),
    ));
    pending
}

async fn monitor(
    image: Image,
    tools: Weak<SessionTools>,
    p: Arc<Pending>,
    form: String,
    idle: Duration,
    end: CancellationToken,
) {
    let mut events = image.subscribe();
    let request_id = AtomicU64::new(u64::MAX);
    // Its thread ends with the request: its stack guard must be armed
    // again first (see `call_fresh`), or a stack exhaustion it unwound
    // leaves the next thread on that memory without one.
    let form = format!("(cl-mcp-server::with-stack-guard {form})");
    let call = image.eval_debuggable(&form, BUFFER_PACKAGE, &request_id);
    tokio::pin!(call);
    let mut stop_sent = false;
    let mut events_open = true;
    loop {
        let level = p.state.borrow().level;
        let idle_at = tokio::time::Instant::from_std(*p.touched.guard() + idle);
        tokio::select! {
            reply = &mut call => {
                let (notice, value) = reply_value(reply);
                if let (Some(n), Some(s)) = (notice, tools.upgrade()) {
                    *s.eval.notice.guard() = Some(n);
                }
                p.state.send_modify(|s| {
                    s.level = 0;
                    s.outcome = Some(value);
                });
                break;
            }
            ev = events.recv(), if events_open => match ev {
                Ok(ev) => match ev.event {
                    SwankEvent::Debug { thread, level, continuations, .. }
                        if continues(&continuations, request_id.load(Ordering::SeqCst)) =>
                    {
                        p.entered(thread, level);
                    }
                    SwankEvent::DebugReturn { thread, level }
                        if p.state.borrow().thread == Some(thread) =>
                    {
                        p.state.send_modify(|s| s.level = s.level.min(level - 1));
                    }
                    _ => {}
                },
                Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {}
                Err(_) => events_open = false,
            },
            // A call running on its thread (code in a frame) is use: no
            // idle deadline while it runs; its end touches it again.
            _ = tokio::time::sleep_until(idle_at), if level > 0 && !stop_sent && !p.in_use_now() => {
                stop_sent = true;
                p.state.send_modify(|s| {
                    s.aborted = Some(format!(
                        "the pending debugger was aborted after {} s without use \
                         (--debugger-idle-secs)",
                        idle.as_secs()
                    ))
                });
                abort_in_image(&image, p.id).await;
            }
            _ = p.touch.notified() => {}
            _ = end.cancelled(), if !stop_sent => {
                stop_sent = true;
                p.state.send_modify(|s| s.aborted = Some("the session ended".into()));
                abort_in_image(&image, p.id).await;
            }
        }
    }
    if let Some(s) = tools.upgrade() {
        s.debuggers.remove(p.id);
    }
}

/// Unwinds evaluation `id` wherever it is (debugger included), through
/// `cl-mcp:interrupt-evaluation` on a fresh thread.
async fn abort_in_image(image: &Image, id: u64) {
    let form = helper_form(
        "interrupt-evaluation",
        vec![Value::Integer(id as i64)],
        vec![],
    );
    let _ = tokio::time::timeout(
        UNWIND_GRACE,
        image.rex(&form, BUFFER_PACKAGE, crate::image::Thread::T),
    )
    .await;
}

/// How a wait on a pending evaluation ended.
pub enum Waited {
    /// The evaluation is over: its reply.
    Done(Result<Value, ToolError>),
    /// It (re-)entered the debugger.
    Debugger,
}

/// Waits until `p` is over or enters the debugger after entry number
/// `since` (see [`PendState::debug_seq`]). On `timeout` or cancellation the
/// evaluation is interrupted (the debugger too) and its reply returned,
/// with the cause.
pub async fn wait(
    ctx: &ToolContext,
    p: &Pending,
    since: u64,
    timeout: Duration,
) -> (Waited, Option<InterruptCause>) {
    let mut rx = p.state.subscribe();
    let settled = |s: &PendState| s.outcome.is_some() || (s.level > 0 && s.debug_seq > since);
    let deadline = tokio::time::sleep(timeout);
    tokio::pin!(deadline);
    let started = Instant::now();
    let mut ticker =
        tokio::time::interval_at(tokio::time::Instant::now() + STATUS_DELAY, STATUS_POLL);
    let cause = {
        let done = async { rx.wait_for(settled).await.map(|s| waited_of(&s)) };
        tokio::pin!(done);
        loop {
            tokio::select! {
                r = &mut done => {
                    return match r {
                        Ok(w) => (w, None),
                        Err(_) => (
                            Waited::Done(Err(ToolError::Image("The evaluation's monitor ended.".into()))),
                            None,
                        ),
                    };
                }
                _ = &mut deadline => break InterruptCause::Timeout(timeout.as_secs_f64()),
                _ = ctx.cancel.cancelled() => break InterruptCause::Cancelled,
                _ = ticker.tick() => {
                    // Progress, as evaluate-lisp reports it: the latest output line.
                    let form = helper_form("eval-status", vec![Value::Integer(p.id as i64)], vec![]);
                    if let Ok(Ok(v)) = tokio::time::timeout(STATUS_POLL, call_fresh(ctx, &form)).await {
                        ctx.set_status(plist_str(&v, "line").unwrap_or_else(|| {
                            format!("evaluating ({} s)", started.elapsed().as_secs())
                        }));
                    }
                }
            }
        }
    };
    abort_in_image(&ctx.image(), p.id).await;
    let done = async {
        rx.wait_for(|s| s.outcome.is_some())
            .await
            .map(|s| waited_of(&s))
    };
    match tokio::time::timeout(UNWIND_GRACE, done).await {
        Ok(Ok(w)) => (w, Some(cause)),
        _ => (
            Waited::Done(Err(ToolError::Image(format!(
                "The evaluation did not stop within {} s of being interrupted; the image is \
                 still busy. Use image-restart to start a fresh one.",
                UNWIND_GRACE.as_secs()
            )))),
            Some(cause),
        ),
    }
}

fn waited_of(s: &PendState) -> Waited {
    match &s.outcome {
        Some(o) => Waited::Done(o.clone()),
        None => Waited::Debugger,
    }
}

/// Whether a `:debug` event's continuations include request `id` (the
/// debugger was entered inside that request).
pub(super) fn continues(continuations: &Value, id: u64) -> bool {
    continuations
        .as_list()
        .is_some_and(|l| l.iter().filter_map(Value::as_i64).any(|i| i as u64 == id))
}
