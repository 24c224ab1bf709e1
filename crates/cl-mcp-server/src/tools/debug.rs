//! The debugger that waits: pending debuggers of a session
//! and the `debug` tools on them (`debugger-backtrace`, `debugger-frame`,
//! `debugger-restart`).
//!
//! `evaluate-lisp` with `debug: true` runs its request on a fresh Swank
//! thread through [`crate::image::Image::eval_debuggable`]. When the code
//! reaches the debugger, that thread sits in Swank's SLDB loop
//! (`lisp/debug.lisp`); a [`Pending`] follows it: a task that owns the
//! suspended request, watches the image's `:debug`/`:debug-return` events
//! for its thread, aborts it when idle or when the session ends, and
//! publishes its state (level, final outcome) on a watch channel. The tools
//! send helper calls to that thread and wait for the state to change.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use lisp_syntax::data::Value;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use swank_client::SwankEvent;
use tokio::sync::watch;
use tokio_util::sync::{CancellationToken, DropGuard};

use super::eval::{render_text, EvalOutput, InterruptCause};
use super::fs_paths::display_path;
use super::lisp_call::{
    call_fresh, call_lookup, call_on_thread, check_read_depth, finish, helper_form, plist_bool,
    plist_i64, plist_items, plist_str, plist_strings, reply_value, BUFFER_PACKAGE,
};
use super::{tool, Annotations, ToolContext, ToolDef, ToolGroup, ToolOutput};
use crate::image::Image;
use crate::session::Session;

/// How long an interrupted (timed-out, cancelled, idle) suspended
/// evaluation may take to unwind.
const UNWIND_GRACE: Duration = Duration::from_secs(5);
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
    pub outcome: Option<Result<Value, String>>,
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
    state: watch::Sender<PendState>,
    touched: Mutex<Instant>,
    /// Wakes the monitor when `touched` moved (the idle deadline changed).
    touch: tokio::sync::Notify,
}

impl Pending {
    pub fn state(&self) -> PendState {
        self.state.borrow().clone()
    }

    fn touch(&self) {
        *self.touched.lock().unwrap() = Instant::now();
        self.touch.notify_one();
    }

    /// Its evaluation entered the debugger at `level` on `thread`.
    fn entered(&self, thread: i64, level: i64) {
        self.touch();
        self.state.send_modify(|s| {
            s.thread = Some(thread);
            s.level = level;
            s.debug_seq += 1;
        });
    }

    /// Seconds since a tool last touched it.
    pub fn idle_secs(&self) -> u64 {
        self.touched.lock().unwrap().elapsed().as_secs()
    }
}

/// The pending debuggers of a session. Dropping it (the session ends)
/// aborts every one.
pub struct Debuggers {
    list: Mutex<Vec<Arc<Pending>>>,
    end: CancellationToken,
    _guard: DropGuard,
}

impl Default for Debuggers {
    fn default() -> Self {
        let end = CancellationToken::new();
        Debuggers {
            list: Mutex::new(Vec::new()),
            _guard: end.clone().drop_guard(),
            end,
        }
    }
}

/// Pending debugger `id` (default: the newest) and its Swank thread, which
/// serves requests inside the debugger's dynamic extent; marks it touched.
pub(crate) fn debugger_thread(
    ctx: &ToolContext,
    id: Option<u64>,
) -> Result<(Arc<Pending>, i64), String> {
    let p = ctx.session.debuggers.find(id)?;
    p.touch();
    let thread = p
        .state()
        .thread
        .ok_or_else(|| "The evaluation is not in the debugger.".to_string())?;
    Ok((p, thread))
}

impl Debuggers {
    /// Evaluations of this session waiting in the debugger, oldest first.
    pub fn suspended(&self) -> Vec<Arc<Pending>> {
        self.list
            .lock()
            .unwrap()
            .iter()
            .filter(|p| p.state().level > 0 && p.state().outcome.is_none())
            .cloned()
            .collect()
    }

    fn find(&self, id: Option<u64>) -> Result<Arc<Pending>, String> {
        let all = self.suspended();
        let found = match id {
            Some(id) => all.into_iter().find(|p| p.id == id),
            None => all.into_iter().last(),
        };
        found.ok_or_else(|| match id {
            Some(id) => format!(
                "There is no pending debugger {id} in this session (it was resolved or \
                 aborted). image-info lists the pending ones."
            ),
            None => "There is no pending debugger in this session. evaluate-lisp with \
                     `debug: true` leaves one when the code hits an error, break or \
                     invoke-debugger."
                .into(),
        })
    }

    fn remove(&self, id: u64) {
        self.list.lock().unwrap().retain(|p| p.id != id);
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
        state,
        touched: Mutex::new(Instant::now()),
        touch: tokio::sync::Notify::new(),
    });
    ctx.session
        .debuggers
        .list
        .lock()
        .unwrap()
        .push(pending.clone());
    let idle = Duration::from_secs(ctx.session.config.debugger_idle_secs.max(1));
    tokio::spawn(monitor(
        ctx.session.image(),
        Arc::downgrade(&ctx.session),
        pending.clone(),
        form,
        idle,
        ctx.session.debuggers.end.clone(),
    ));
    pending
}

async fn monitor(
    image: Image,
    session: Weak<Session>,
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
        let idle_at = tokio::time::Instant::from_std(*p.touched.lock().unwrap() + idle);
        tokio::select! {
            reply = &mut call => {
                let (notice, value) = reply_value(reply);
                if let (Some(n), Some(s)) = (notice, session.upgrade()) {
                    *s.eval.notice.lock().unwrap() = Some(n);
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
            _ = tokio::time::sleep_until(idle_at), if level > 0 && !stop_sent => {
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
    if let Some(s) = session.upgrade() {
        s.debuggers.remove(p.id);
    }
}

/// Takes over `thread`, which sits in a debugger that is not ours (in
/// attach mode: the user's, in their SLIME): a nested level of its debugger
/// is entered for this session (`cl-mcp:take-over-thread`) and followed as a
/// [`Pending`]; `abort` there hands the thread back to the level it was in.
async fn take_over(ctx: &ToolContext, thread: i64) -> Result<Arc<Pending>, String> {
    let image = ctx.session.image();
    if image.debugger_claimed(thread) {
        // Sessions sharing an image (--shared-image) see each other's
        // threads; a suspended evaluation is its own session's to act on.
        return Err(format!(
            "Thread {thread} waits in the debugger of another session's evaluation (this \
             server's sessions share one image, --shared-image): only that session may act \
             on it. It is read-only here: debugger-backtrace with thread {thread} and no \
             takeOver shows it."
        ));
    }
    let claim = image.claim_debugger().await.map_err(|e| e.to_string())?;
    let id = super::eval::NEXT_EVAL_ID.fetch_add(1, Ordering::Relaxed);
    let (state, _) = watch::channel(PendState::default());
    let p = Arc::new(Pending {
        id,
        code: format!("thread {thread}, taken over"),
        taken_over: Some(thread),
        state,
        touched: Mutex::new(Instant::now()),
        touch: tokio::sync::Notify::new(),
    });
    let mut rx = p.state.subscribe();
    let events = image.subscribe();
    let form = helper_form(
        "take-over-thread",
        vec![Value::Integer(thread), Value::Integer(claim.id as i64)],
        vec![],
    );
    ctx.session.debuggers.list.lock().unwrap().push(p.clone());
    let idle = Duration::from_secs(ctx.session.config.debugger_idle_secs.max(1));
    tokio::spawn(follow_taken_over(
        image,
        Arc::downgrade(&ctx.session),
        p.clone(),
        claim,
        events,
        idle,
        ctx.session.debuggers.end.clone(),
    ));
    let failed = match call_fresh(ctx, &form).await {
        Ok(v) => plist_str(&v, "error"),
        Err(e) => Some(e),
    };
    let entered = async {
        rx.wait_for(|s| s.level > 0 || s.outcome.is_some())
            .await
            .is_ok()
    };
    let failed = match failed {
        Some(e) => Some(e),
        None => match tokio::time::timeout(UNWIND_GRACE, entered).await {
            Ok(true) => None,
            _ => Some(format!(
                "Thread {thread} did not enter the debugger within {} s of being asked.",
                UNWIND_GRACE.as_secs()
            )),
        },
    };
    match failed {
        None => Ok(p),
        Some(e) => {
            p.state.send_modify(|s| s.outcome = Some(Err(e.clone())));
            ctx.session.debuggers.remove(p.id);
            Err(e)
        }
    }
}

/// Follows a thread taken over: its debugger levels (entries whose
/// continuations hold the claim), until it leaves the level we entered;
/// hands it back when idle or at session end.
async fn follow_taken_over(
    image: Image,
    session: Weak<Session>,
    p: Arc<Pending>,
    claim: crate::image::DebuggerClaim,
    mut events: tokio::sync::broadcast::Receiver<crate::image::ImageEvent>,
    idle: Duration,
    end: CancellationToken,
) {
    let mut base: Option<i64> = None;
    let mut stop_sent = false;
    loop {
        let level = p.state.borrow().level;
        let idle_at = tokio::time::Instant::from_std(*p.touched.lock().unwrap() + idle);
        let give_back = tokio::select! {
            ev = events.recv() => match ev {
                Ok(ev) => {
                    match ev.event {
                        SwankEvent::Debug { thread, level, continuations, .. }
                            if Some(thread) == p.taken_over
                                && continues(&continuations, claim.id) =>
                        {
                            base.get_or_insert(level);
                            p.entered(thread, level);
                        }
                        SwankEvent::DebugReturn { thread, level }
                            if Some(thread) == p.taken_over && base.is_some() =>
                        {
                            if base.is_some_and(|b| level <= b) {
                                p.state.send_modify(|s| {
                                    s.level = 0;
                                    s.outcome = Some(Ok(Value::nil()));
                                });
                                break;
                            }
                            p.state.send_modify(|s| s.level = s.level.min(level - 1));
                        }
                        _ => {}
                    }
                    None
                }
                Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => None,
                Err(_) => {
                    p.state.send_modify(|s| {
                        s.outcome = Some(Err("The connection to the image was lost.".into()))
                    });
                    break;
                }
            },
            _ = tokio::time::sleep_until(idle_at), if level > 0 && !stop_sent => Some(format!(
                "the taken-over thread was handed back after {} s without use \
                 (--debugger-idle-secs)",
                idle.as_secs()
            )),
            _ = p.touch.notified() => None,
            _ = end.cancelled(), if !stop_sent => Some("the session ended".to_string()),
        };
        if let Some(why) = give_back {
            stop_sent = true;
            p.state.send_modify(|s| s.aborted = Some(why));
            if let Some(thread) = p.state().thread {
                let form = helper_form("debugger-abort", vec![], vec![]);
                let image = image.clone();
                // Never answers when it works: the level is unwound.
                tokio::spawn(async move {
                    let _ = tokio::time::timeout(
                        UNWIND_GRACE,
                        image.rex(&form, BUFFER_PACKAGE, crate::image::Thread::Id(thread)),
                    )
                    .await;
                });
            }
        }
    }
    if let Some(s) = session.upgrade() {
        s.debuggers.remove(p.id);
    }
}

/// The session ends (its stream closed, HTTP `DELETE`, expiry): aborts its
/// pending debuggers and waits for them to unwind, then, in an image that
/// outlives the session (shared or attached), undoes what the session left
/// there (`cl-mcp:end-session`: the traces only it asked for, its records,
/// inspections and current package). Bounded in time; never starts an
/// image.
pub async fn end_session(session: &Session) {
    session.debuggers.end.cancel();
    let Some(image) = session.image_if_started() else {
        return;
    };
    let deadline = Instant::now() + UNWIND_GRACE;
    while !session.debuggers.list.lock().unwrap().is_empty() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    if !session.config.shared_image && image.mode() != crate::image::ImageMode::Attached {
        // Its own local image goes with it.
        return;
    }
    let form = helper_form(
        "end-session",
        vec![Value::string(super::lisp_call::session_key_of(session))],
        vec![],
    );
    let r = tokio::time::timeout(
        UNWIND_GRACE,
        image.rex(&form, BUFFER_PACKAGE, crate::image::Thread::T),
    )
    .await;
    tracing::debug!(
        session = session.id,
        ok = matches!(r, Ok(Ok(_))),
        "session ended in the image"
    );
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
    Done(Result<Value, String>),
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
                        Err(_) => (Waited::Done(Err("The evaluation's monitor ended.".into())), None),
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
    abort_in_image(&ctx.session.image(), p.id).await;
    let done = async {
        rx.wait_for(|s| s.outcome.is_some())
            .await
            .map(|s| waited_of(&s))
    };
    match tokio::time::timeout(UNWIND_GRACE, done).await {
        Ok(Ok(w)) => (w, Some(cause)),
        _ => (
            Waited::Done(Err(format!(
                "The evaluation did not stop within {} s of being interrupted; the image is \
                 still busy. Use image-restart to start a fresh one.",
                UNWIND_GRACE.as_secs()
            ))),
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

// ---------------------------------------------------------------------------
// Reading a debugger.

/// A restart of a debugger level.
#[derive(Serialize, JsonSchema, Debug, Clone, PartialEq)]
pub struct RestartInfo {
    /// Its number (for `debugger-restart`).
    pub index: i64,
    /// Its name (`USE-VALUE`), empty when anonymous.
    pub name: String,
    pub description: String,
}

/// A frame of a debugger's backtrace.
#[derive(Serialize, JsonSchema, Debug, Clone, PartialEq)]
pub struct FrameInfo {
    /// The frame's number (for `debugger-frame`).
    pub index: i64,
    pub frame: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub line: Option<i64>,
}

/// A pending debugger: its condition, restarts and (a page of) frames.
#[derive(Serialize, JsonSchema, Debug, Clone, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct DebuggerInfo {
    /// The debugger's number (the `debugger` argument of the tools).
    pub debugger: u64,
    pub level: i64,
    #[serde(rename = "type")]
    pub kind: String,
    pub message: String,
    pub restarts: Vec<RestartInfo>,
    /// User frames, innermost first.
    pub frames: Vec<FrameInfo>,
    pub total_frames: i64,
    /// The thread, for a thread's debugger (`debugger` 0: not taken over).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub thread: Option<i64>,
}

fn rel_path(ctx: &ToolContext, path: &str) -> String {
    display_path(&ctx.session.project_root(), std::path::Path::new(path))
}

fn debugger_info(ctx: &ToolContext, id: u64, v: &Value) -> DebuggerInfo {
    DebuggerInfo {
        debugger: id,
        level: plist_i64(v, "level").unwrap_or(0),
        kind: plist_str(v, "type").unwrap_or_default(),
        message: plist_str(v, "message").unwrap_or_default(),
        restarts: plist_items(v, "restarts", |r| RestartInfo {
            index: plist_i64(r, "index").unwrap_or(0),
            name: plist_str(r, "name").unwrap_or_default(),
            description: plist_str(r, "description").unwrap_or_default(),
        }),
        frames: plist_items(v, "frames", |f| FrameInfo {
            index: plist_i64(f, "index").unwrap_or(0),
            frame: plist_str(f, "frame").unwrap_or_default(),
            path: plist_str(f, "path").map(|p| rel_path(ctx, &p)),
            line: plist_i64(f, "line"),
        }),
        total_frames: plist_i64(v, "total-frames").unwrap_or(0),
        thread: None,
    }
}

/// Reads the current level of `p` (which must be in the debugger).
pub async fn read_debugger(
    ctx: &ToolContext,
    p: &Pending,
    start: u32,
    count: u32,
) -> Result<DebuggerInfo, String> {
    let thread = p
        .state()
        .thread
        .ok_or("The evaluation is not in the debugger.")?;
    let form = helper_form(
        "debugger-state",
        vec![],
        vec![
            ("start", Value::Integer(start.into())),
            ("count", Value::Integer(count.into())),
        ],
    );
    let v = call_on_thread(ctx, &form, thread).await?;
    if let Some(e) = plist_str(&v, "error") {
        return Err(e);
    }
    let mut d = debugger_info(ctx, p.id, &v);
    d.thread = p.taken_over;
    Ok(d)
}

/// The `[DEBUGGER level N]` text.
pub fn render_debugger(d: &DebuggerInfo) -> String {
    let what = match d.thread {
        Some(t) => format!("thread {t}, taken over"),
        None => "the evaluation is suspended".into(),
    };
    let mut t = format!(
        "[DEBUGGER level {}] debugger {}: {what}\n{}\n{}",
        d.level, d.debugger, d.kind, d.message
    );
    t.push_str("\n\n[Restarts]");
    for r in &d.restarts {
        if r.name.is_empty() {
            t.push_str(&format!("\n{}: {}", r.index, r.description));
        } else {
            t.push_str(&format!("\n{}: [{}] {}", r.index, r.name, r.description));
        }
    }
    push_frames(&mut t, &d.frames, d.total_frames);
    let shown = d.frames.len() as i64;
    if d.total_frames > shown {
        match d.frames.last() {
            Some(last) => t.push_str(&format!(
                "\n[{} of {} frames; debugger-backtrace with start {} lists those after frame {}]",
                shown,
                d.total_frames,
                last.index + 1,
                last.index
            )),
            None => t.push_str(&format!(
                "\n[none of the {} frames is numbered that high: start is a frame number]",
                d.total_frames
            )),
        }
    }
    t.push_str(
        "\n\nInspect with debugger-frame, resolve with debugger-restart (a restart number \
         or name, `values` for use-value/store-value; action abort, continue, return, restart, step, next, out).",
    );
    t
}

/// Whether a `:debug` event's continuations include request `id` (the
/// debugger was entered inside that request).
fn continues(continuations: &Value, id: u64) -> bool {
    continuations
        .as_list()
        .is_some_and(|l| l.iter().filter_map(Value::as_i64).any(|i| i as u64 == id))
}

/// The `[Frames]` part of a debugger's text: each user frame with its
/// source location, or why there is none.
fn push_frames(t: &mut String, frames: &[FrameInfo], total: i64) {
    t.push_str("\n\n[Frames]");
    if total == 0 {
        t.push_str(
            "\n(none of the user's code: the condition was signalled directly by the \
             evaluated form, e.g. a top-level (break))",
        );
    }
    for f in frames {
        t.push_str(&format!("\n{}: {}", f.index, f.frame));
        if let (Some(p), Some(l)) = (&f.path, f.line) {
            t.push_str(&format!("  at {p}:{l}"));
        }
    }
}

/// The result of a wait on `p`: its final outcome rendered as
/// `evaluate-lisp` renders it, or the debugger it entered.
pub async fn outcome_output(
    ctx: &ToolContext,
    p: &Pending,
    waited: Waited,
    cause: Option<InterruptCause>,
) -> ToolOutput {
    match waited {
        Waited::Done(Err(e)) => ToolOutput::error(e),
        Waited::Done(Ok(_)) if p.taken_over.is_some() => {
            let mut text = format!(
                "[THREAD] Thread {} left the debugger level taken over (debugger {}): it runs \
                 on, or is back in the debugger it was in (list-threads shows which).",
                p.taken_over.unwrap_or(0),
                p.id
            );
            if let Some(why) = p.state().aborted {
                text = format!("[ABORTED] {why}.\n{text}");
            }
            let out = EvalOutput::default();
            ToolOutput::structured(text, serde_json::to_value(&out).unwrap_or_default())
        }
        Waited::Done(Ok(v)) => {
            let out = EvalOutput::from_plist(&v);
            let cause = match (cause, out.interrupted) {
                (Some(c), _) => Some(c),
                (None, true) => Some(InterruptCause::External),
                _ => None,
            };
            let mut text = render_text(&out, cause);
            if let Some(why) = p.state().aborted {
                text = format!("[ABORTED] {why}.\n{text}");
            }
            let is_error = out.error.is_some() || out.interrupted;
            ToolOutput::structured(text, serde_json::to_value(&out).unwrap_or_default())
                .with_error(is_error)
        }
        Waited::Debugger => match read_debugger(ctx, p, 0, 10).await {
            Ok(d) => {
                let mut out = EvalOutput::default();
                // What it printed before the debugger, its package and time.
                let so_far = match p.state().thread {
                    Some(thread) => {
                        let form = helper_form("debugger-evaluation-output", vec![], vec![]);
                        call_on_thread(ctx, &form, thread).await.ok()
                    }
                    None => None,
                };
                if let Some(v) = so_far {
                    out.stdout = plist_str(&v, "stdout").unwrap_or_default();
                    out.stderr = plist_str(&v, "stderr").unwrap_or_default();
                    out.package = plist_str(&v, "package").unwrap_or_default();
                    out.elapsed_ms = plist_i64(&v, "elapsed-ms").unwrap_or(0);
                }
                let mut text = render_debugger(&d);
                for (what, s) in [("stdout", &out.stdout), ("stderr", &out.stderr)] {
                    if !s.is_empty() {
                        text.push_str(&format!("\n\n[{what} so far]\n{}", s.trim_end()));
                    }
                }
                out.debugger = Some(d);
                ToolOutput::structured(text, serde_json::to_value(&out).unwrap_or_default())
                    .with_error(true)
            }
            Err(e) => ToolOutput::error(format!(
                "[DEBUGGER] debugger {}: the evaluation is suspended in the debugger, but it \
                 could not be read: {e}",
                p.id
            )),
        },
    }
}

// ---------------------------------------------------------------------------
// The tools.

#[derive(Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct BacktraceArgs {
    /// Default: newest.
    debugger: Option<u64>,
    /// Another thread's debugger (list-threads id), read-only.
    thread: Option<i64>,
    /// With `thread`: take it over.
    take_over: Option<bool>,
    // A frame number (README); no description, for the tools/list budget.
    start: Option<u32>,
    /// Default 20.
    count: Option<u32>,
}

async fn debugger_backtrace(a: BacktraceArgs, ctx: ToolContext) -> ToolOutput {
    let count = a.count.unwrap_or(20).min(500);
    let held = a.thread.and_then(|t| {
        ctx.session
            .debuggers
            .suspended()
            .into_iter()
            .find(|p| p.state().thread == Some(t))
    });
    if let (Some(thread), None) = (a.thread, &held) {
        if a.take_over != Some(true) {
            return thread_debugger(&ctx, thread, count).await;
        }
        if let Err(e) = take_over(&ctx, thread).await {
            return ToolOutput::error(e);
        }
    }
    let wanted = match (&held, a.thread) {
        (Some(p), _) => Some(p.id),
        (None, Some(_)) => None, // the one just taken over: the newest
        (None, None) => a.debugger,
    };
    let p = match ctx.session.debuggers.find(wanted) {
        Ok(p) => p,
        Err(e) => return ToolOutput::error(e),
    };
    p.touch();
    match read_debugger(&ctx, &p, a.start.unwrap_or(0), count).await {
        Ok(d) => ToolOutput::structured(
            render_debugger(&d),
            serde_json::to_value(&d).unwrap_or_default(),
        ),
        Err(e) => ToolOutput::error(e),
    }
}

/// A thread sitting in a debugger that is not this session's (the user's,
/// in attach mode), seen without touching it.
async fn thread_debugger(ctx: &ToolContext, thread: i64, count: u32) -> ToolOutput {
    let form = helper_form(
        "thread-debugger-view",
        vec![Value::Integer(thread)],
        vec![("count", Value::Integer(count.into()))],
    );
    let v = match call_lookup(ctx, &form).await {
        Ok(v) => v,
        Err(e) => return ToolOutput::error(e),
    };
    let mut d = debugger_info(ctx, 0, &v);
    d.thread = Some(thread);
    let mut text = format!(
        "[THREAD {thread} in the debugger, level {}] not taken over: its debugger is left to \
         whoever holds it (the user's SLIME)\n{}\n{}\n\n[Restarts]",
        d.level, d.kind, d.message
    );
    for r in &d.restarts {
        text.push_str(&format!("\n{}: [{}] {}", r.index, r.name, r.description));
    }
    push_frames(&mut text, &d.frames, d.total_frames);
    text.push_str(&format!(
        "\n\nTo act on it: debugger-backtrace with thread {thread} and takeOver: true (a \
         nested level for the debugger tools; action abort hands it back)."
    ));
    ToolOutput::structured(text, serde_json::to_value(&d).unwrap_or_default())
}

#[derive(Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct FrameArgs {
    /// Default: newest.
    debugger: Option<u64>,
    /// Default: top user frame.
    frame: Option<u32>,
    code: Option<String>,
}

/// A local variable of a frame.
#[derive(Serialize, JsonSchema, Debug, Clone, PartialEq)]
struct Local {
    name: String,
    value: String,
}

/// `structuredContent` of `debugger-frame`.
#[derive(Serialize, JsonSchema, Debug, Clone, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
struct FrameOutput {
    debugger: u64,
    index: i64,
    frame: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    path: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    line: Option<i64>,
    /// The text of the form the frame is in.
    #[serde(skip_serializing_if = "Option::is_none")]
    form: Option<String>,
    locals: Vec<Local>,
    /// Locals not shown (over the cap).
    #[serde(skip_serializing_if = "is_zero")]
    more_locals: i64,
    catch_tags: Vec<String>,
    /// Printed values of `code`'s last form.
    #[serde(skip_serializing_if = "Option::is_none")]
    values: Option<Vec<String>>,
    /// Output of `code`.
    #[serde(skip_serializing_if = "Option::is_none")]
    stdout: Option<String>,
    /// Warnings `code` signalled (compiling it, say).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    warnings: Vec<String>,
    /// The nested debugger `code` entered.
    #[serde(skip_serializing_if = "Option::is_none")]
    nested: Option<DebuggerInfo>,
}

fn is_zero(n: &i64) -> bool {
    *n == 0
}

fn render_frame(o: &FrameOutput) -> String {
    let mut t = format!("[Frame {}] {}", o.index, o.frame);
    if let (Some(p), Some(l)) = (&o.path, o.line) {
        t.push_str(&format!("\nAt {p}:{l}"));
    }
    if let Some(f) = &o.form {
        t.push_str(&format!("\nForm: {f}"));
    }
    t.push_str("\n[Locals]");
    if o.locals.is_empty() {
        t.push_str("\n(none known: compile with (debug 2) or more to see them)");
    }
    for l in &o.locals {
        t.push_str(&format!("\n{} = {}", l.name, l.value));
    }
    if o.more_locals > 0 {
        t.push_str(&format!("\n[{} more locals]", o.more_locals));
    }
    if !o.catch_tags.is_empty() {
        t.push_str(&format!("\n[Catch tags] {}", o.catch_tags.join(" ")));
    }
    if let Some(vals) = &o.values {
        t.push_str("\n\n[Evaluated in the frame]");
        if let Some(s) = o.stdout.as_deref().filter(|s| !s.is_empty()) {
            t.push('\n');
            t.push_str(s);
        }
        for w in &o.warnings {
            t.push_str(&format!("\n[WARNING] {w}"));
        }
        if vals.is_empty() {
            t.push_str("\n=> ; No values");
        }
        for v in vals {
            t.push_str(&format!("\n=> {v}"));
        }
    }
    if let Some(d) = &o.nested {
        t.push_str("\n\n`code` signalled an error and entered a nested debugger:\n");
        t.push_str(&render_debugger(d));
    }
    t
}

/// How long code run in a frame (`debugger-frame`'s `code`) may run
/// before it is stopped (the debugger stays where it was).
const FRAME_CODE_TIMEOUT: Duration = Duration::from_secs(30);

/// Why code run on a debugger's thread was stopped, in the answer's words
/// ("`code` … and was stopped"): its time ran out, or its call was
/// cancelled.
fn timed_out_text(limit: Duration) -> String {
    let secs = limit.as_secs_f64();
    if secs.fract() == 0.0 {
        format!("did not finish within {secs} s")
    } else {
        format!("did not finish within {secs:.1} s")
    }
}
const CANCELLED: &str = "was cancelled";

/// How code sent to a debugger's thread ([`run_in_frame`]) ended.
pub(crate) enum FrameRun {
    /// The helper's reply.
    Value(Value),
    /// It entered a nested debugger level.
    Nested,
    /// Stopped (timeout or cancel): the answer's text, the debugger stays.
    Stopped(String),
}

/// Sends `form` (a helper that runs user code on the debugger's thread
/// inside `call-as-frame-evaluation`) to pending debugger `p`'s `thread`:
/// it is stopped (`stop-frame-evaluation`) when `limit` passes or the call
/// is cancelled, so the thread is free again and the debugger stays at its
/// level; an error in the code that enters a nested level is
/// [`FrameRun::Nested`].
pub(crate) async fn run_in_frame(
    ctx: &ToolContext,
    p: &Pending,
    thread: i64,
    form: &str,
    limit: Duration,
) -> Result<FrameRun, String> {
    let since = p.state().debug_seq;
    let mut rx = p.state.subscribe();
    let image = ctx.session.image();
    let call = image.rex(form, BUFFER_PACKAGE, crate::image::Thread::Id(thread));
    tokio::pin!(call);
    let stop = |why: String| async move {
        let form = helper_form(
            "stop-frame-evaluation",
            vec![Value::Integer(thread)],
            vec![],
        );
        let _ = call_lookup(ctx, &form).await;
        why
    };
    let began = std::time::Instant::now();
    let stopped_text = |why: &str, stdout: String| {
        let printed = if stdout.is_empty() {
            String::new()
        } else {
            format!(" It printed:\n{stdout}")
        };
        format!(
            "`code` {why} and was stopped; the debugger stays at level {}.{printed}",
            p.state().level
        )
    };
    let why = tokio::select! {
        r = &mut call => {
            let v = reply_value(r).1?;
            // Stopped, its answer first (the stop's own reply can come
            // after it).
            if plist_bool(&v, "stopped") {
                let why = if began.elapsed() >= limit {
                    timed_out_text(limit)
                } else {
                    CANCELLED.to_string()
                };
                let stdout = plist_str(&v, "stdout").unwrap_or_default();
                return Ok(FrameRun::Stopped(stopped_text(&why, stdout)));
            }
            return Ok(FrameRun::Value(v));
        }
        _ = async { rx.wait_for(|s| s.debug_seq > since || s.outcome.is_some()).await.is_ok() } => {
            return Ok(FrameRun::Nested);
        }
        why = async {
            tokio::time::sleep(limit).await;
            stop(timed_out_text(limit)).await
        } => why,
        why = async {
            ctx.cancel.cancelled().await;
            stop(CANCELLED.to_string()).await
        } => why,
    };
    // The stop unwinds the code; its answer follows at once.
    match tokio::time::timeout(Duration::from_secs(5), &mut call).await {
        Ok(r) => {
            let stdout = reply_value(r)
                .1
                .ok()
                .and_then(|v| plist_str(&v, "stdout"))
                .unwrap_or_default();
            Ok(FrameRun::Stopped(stopped_text(&why, stdout)))
        }
        Err(_) => Err(format!(
            "`code` {why} and was asked to stop, but its thread did not answer within 5 s \
             (it blocks interrupts); debugger-restart with action abort ends the evaluation."
        )),
    }
}

/// The deepest debugger level at which `debugger-frame` runs code: an error
/// in it nests once more, and SBCL stops answering past about ten nested
/// errors ("Maximum error nesting depth exceeded").
const MAX_FRAME_CODE_LEVEL: i64 = 8;

async fn debugger_frame(a: FrameArgs, ctx: ToolContext) -> ToolOutput {
    let p = match ctx.session.debuggers.find(a.debugger) {
        Ok(p) => p,
        Err(e) => return ToolOutput::error(e),
    };
    p.touch();
    let Some(thread) = p.state().thread else {
        return ToolOutput::error("The evaluation is not in the debugger.");
    };
    let index = match a.frame {
        Some(i) => i,
        None => match read_debugger(&ctx, &p, 0, 1).await {
            Ok(d) => d.frames.first().map_or(0, |f| f.index as u32),
            Err(e) => return ToolOutput::error(e),
        },
    };
    let form = helper_form("debugger-frame", vec![Value::Integer(index.into())], vec![]);
    let v = match call_on_thread(&ctx, &form, thread).await {
        Ok(v) => v,
        Err(e) => return ToolOutput::error(e),
    };
    if let Some(e) = plist_str(&v, "error") {
        return ToolOutput::error(e);
    }
    let mut out = FrameOutput {
        debugger: p.id,
        index: plist_i64(&v, "index").unwrap_or(index.into()),
        frame: plist_str(&v, "frame").unwrap_or_default(),
        path: plist_str(&v, "path").map(|s| rel_path(&ctx, &s)),
        line: plist_i64(&v, "line"),
        form: plist_str(&v, "form"),
        locals: plist_items(&v, "locals", |l| Local {
            name: plist_str(l, "name").unwrap_or_default(),
            value: plist_str(l, "value").unwrap_or_default(),
        }),
        more_locals: plist_i64(&v, "more-locals").unwrap_or(0),
        catch_tags: plist_strings(&v, "catch-tags"),
        ..FrameOutput::default()
    };
    let mut is_error = false;
    if let Some(code) = &a.code {
        if let Err(e) = check_read_depth(code, "`code`") {
            return ToolOutput::error(e);
        }
        let level = p.state().level;
        if level >= MAX_FRAME_CODE_LEVEL {
            return ToolOutput::error(format!(
                "The debugger is at level {level}, the deepest that code in a frame may \
                 open (an error in it would nest once more, and past about ten nested errors \
                 the Lisp stops answering). Leave a level first: debugger-restart with \
                 action abort returns to level {}.",
                level - 1
            ));
        }
        let form = helper_form(
            "debugger-eval-in-frame",
            vec![Value::Integer(index.into()), Value::string(code.clone())],
            vec![],
        );
        match run_in_frame(&ctx, &p, thread, &form, FRAME_CODE_TIMEOUT).await {
            Ok(FrameRun::Value(v)) => {
                if let Some(e) = plist_str(&v, "error") {
                    return ToolOutput::error(e);
                }
                out.values = Some(plist_strings(&v, "values"));
                out.stdout = Some(plist_str(&v, "stdout").unwrap_or_default());
                out.warnings = plist_strings(&v, "warnings");
            }
            Ok(FrameRun::Nested) => {
                is_error = true;
                match read_debugger(&ctx, &p, 0, 10).await {
                    Ok(d) => out.nested = Some(d),
                    Err(e) => return ToolOutput::error(e),
                }
            }
            Ok(FrameRun::Stopped(text)) => return ToolOutput::error(text),
            Err(e) => return ToolOutput::error(e),
        }
    }
    ToolOutput::structured(
        render_frame(&out),
        serde_json::to_value(&out).unwrap_or_default(),
    )
    .with_error(is_error)
}

// A restart's number or name.
#[derive(Deserialize, JsonSchema, Clone, Debug)]
#[serde(
    untagged,
    expecting = "a restart's number (0 or more, as debugger-backtrace lists them) or its name"
)]
enum RestartRef {
    Index(u32),
    Name(String),
}

/// Instead of `restart`.
#[derive(Deserialize, JsonSchema, Clone, Copy, Debug, PartialEq)]
#[serde(rename_all = "lowercase")]
enum Action {
    /// Abandon the whole evaluation.
    Abort,
    /// The CONTINUE restart.
    Continue,
    /// Return `values[0]` from `frame`.
    Return,
    /// Call `frame`'s function again (its current definition).
    Restart,
    /// Single-step into the next form (calls entered).
    Step,
    /// Single-step over calls.
    Next,
    /// Step out of the current function.
    Out,
}

#[derive(Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct RestartArgs {
    /// Default: newest.
    debugger: Option<u64>,
    restart: Option<RestartRef>,
    /// Forms (`return`: the value).
    values: Option<Vec<String>>,
    /// Instead of `restart`.
    action: Option<Action>,
    /// For `return`/`restart`.
    frame: Option<u32>,
    /// Default 30.
    timeout_seconds: Option<f64>,
}

fn restart_form(a: &RestartArgs) -> Result<String, String> {
    let values = a.values.clone().unwrap_or_default();
    for v in &values {
        check_read_depth(v, "`values`")?;
    }
    let frame = || {
        a.frame
            .map(|f| Value::Integer(f.into()))
            .ok_or_else(|| "This action needs `frame` (a frame number).".to_string())
    };
    Ok(match (a.action, &a.restart) {
        (Some(_), Some(_)) => return Err("Give `restart` or `action`, not both.".into()),
        (None, None) => {
            return Err(
                "Give `restart` (a number or name) or `action` (abort, continue, return, \
                 restart, step, next, out)."
                    .into(),
            )
        }
        (Some(Action::Abort), None) => helper_form("debugger-abort", vec![], vec![]),
        (Some(kind @ (Action::Step | Action::Next | Action::Out)), None) => {
            let kind = match kind {
                Action::Step => "into",
                Action::Next => "next",
                _ => "out",
            };
            helper_form(
                "debugger-step",
                vec![
                    Value::keyword(kind),
                    Value::Integer(a.frame.unwrap_or(0).into()),
                ],
                vec![],
            )
        }
        (Some(Action::Restart), None) => {
            helper_form("debugger-restart-frame", vec![frame()?], vec![])
        }
        (Some(Action::Return), None) => {
            let Some(v) = values.first() else {
                return Err("`return` needs the value as a form in `values`.".into());
            };
            helper_form(
                "debugger-return-from-frame",
                vec![frame()?, Value::string(v.clone())],
                vec![],
            )
        }
        (action, r) => {
            let target = match (action, r) {
                (Some(Action::Continue), _) => Value::string("CONTINUE"),
                (_, Some(RestartRef::Index(i))) => Value::Integer((*i).into()),
                (_, Some(RestartRef::Name(n))) => Value::string(n.clone()),
                _ => unreachable!("handled above"),
            };
            let keys = vec![(
                "values",
                Value::list(
                    std::iter::once(Value::symbol_named(Some("CL"), "LIST"))
                        .chain(values.into_iter().map(Value::string))
                        .collect::<Vec<_>>(),
                ),
            )];
            helper_form("debugger-invoke-restart", vec![target], keys)
        }
    })
}

async fn debugger_restart(a: RestartArgs, ctx: ToolContext) -> ToolOutput {
    let timeout = match super::lisp_call::timeout_arg(a.timeout_seconds, 30.0) {
        Ok(t) => t,
        Err(e) => return ToolOutput::error(e),
    };
    let p = match ctx.session.debuggers.find(a.debugger) {
        Ok(p) => p,
        Err(e) => return ToolOutput::error(e),
    };
    p.touch();
    let form = match restart_form(&a) {
        Ok(f) => f,
        Err(e) => return ToolOutput::error(e),
    };
    let Some(thread) = p.state().thread else {
        return ToolOutput::error("The evaluation is not in the debugger.");
    };
    let since = p.state().debug_seq;
    let mut rx = p.state.subscribe();
    let image = ctx.session.image();
    // A restart that transfers control never answers (its request is
    // unwound: an abort); one that could not run answers `(:error ...)`
    // and the debugger stays.
    {
        let call = image.rex(&form, BUFFER_PACKAGE, crate::image::Thread::Id(thread));
        tokio::pin!(call);
        tokio::select! {
            r = &mut call => {
                if let Ok(v) = reply_value(r).1 {
                    if let Some(e) = plist_str(&v, "error") {
                        return ToolOutput::error(format!(
                            "{e}\nThe debugger {} is still pending at the same level.",
                            p.id
                        ));
                    }
                }
            }
            _ = async { rx.wait_for(|s| s.debug_seq > since || s.outcome.is_some()).await.is_ok() } => {}
        }
    }
    let (waited, cause) = wait(&ctx, &p, since, timeout).await;
    outcome_output(&ctx, &p, waited, cause).await
}

/// Pending debuggers of the session, one line each, for `image-info`.
pub fn pending_lines(ctx: &ToolContext) -> Vec<String> {
    ctx.session
        .debuggers
        .suspended()
        .iter()
        .map(|p| {
            format!(
                "debugger {} (level {}, idle {} s): {}",
                p.id,
                p.state().level,
                p.idle_secs(),
                p.code
            )
        })
        .collect()
}

/// The tools of the `debug` group.
pub fn tools() -> Vec<ToolDef> {
    vec![
        tool(
            "debugger-backtrace",
            ToolGroup::Debug,
            "Debugger backtrace",
            "A pending debugger (evaluate-lisp `debug: true`) or a `thread`'s: condition, \
             restarts, user frames with source, paged.",
            // `takeOver` changes the thread's state.
            Annotations::MUTATING,
            |a: BacktraceArgs, ctx: ToolContext| async move {
                let c = ctx.clone();
                finish(&c, debugger_backtrace(a, ctx).await)
            },
        )
        .with_output_schema::<DebuggerInfo>(),
        tool(
            "debugger-frame",
            ToolGroup::Debug,
            "Debugger frame",
            "A frame's locals, source and catch tags; `code` is evaluated in the frame.",
            Annotations::MUTATING,
            |a: FrameArgs, ctx: ToolContext| async move {
                let c = ctx.clone();
                finish(&c, debugger_frame(a, ctx).await)
            },
        )
        .with_output_schema::<FrameOutput>(),
        tool(
            "debugger-restart",
            ToolGroup::Debug,
            "Resolve a debugger",
            "Resolve a pending debugger by a restart (number or name; `values` its arguments) or \
             an `action`; returns the evaluation's outcome or its next debugger.",
            Annotations::MUTATING,
            |a: RestartArgs, ctx: ToolContext| async move {
                let c = ctx.clone();
                finish(&c, debugger_restart(a, ctx).await)
            },
        )
        .with_output_schema::<EvalOutput>(),
    ]
}
