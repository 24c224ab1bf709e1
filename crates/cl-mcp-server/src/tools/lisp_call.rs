//! Calling the image: the one place where the Lisp-backed tool families
//! (`eval`, `code`, `asdf`, `image`, `debug`) talk to the image — building
//! calls to the helpers in `lisp/` (package `CL-MCP`), running them, and
//! reading the plists they return.
//!
//! Two kinds of calls exist. Evaluations (`evaluate-lisp`, `inspect-object`,
//! `profile-code`) take the image's evaluation turn (`tools::turn`: one at a
//! time, in arrival order, a waiting call told what it waits behind) and can
//! be interrupted; everything else (introspection, builds, status polls,
//! interrupts) runs on a fresh Swank thread so it never waits behind a
//! running evaluation.

use std::time::{Duration, Instant};

use lisp_syntax::data::Value;

use super::turn::{self, Queued};
use super::{ToolContext, ToolError, ToolOutput};
use crate::image::{ImageReply, RexOutcome, Thread};
use crate::sync::MutexExt;

// ---------------------------------------------------------------------------
// Building helper calls and reading their results.

/// The deepest nesting (lists and reader prefixes such as `'`) of text the
/// server hands the image's reader. Much deeper text exhausts the reader's
/// control stack, and a second exhaustion before the stack guard is reset
/// kills the image with all its state.
pub const MAX_READ_DEPTH: usize = 1000;

/// Refuses text nested deeper than [`MAX_READ_DEPTH`] before the image
/// reads it; `what` names the argument (e.g. "`code`").
pub fn check_read_depth(text: &str, what: &str) -> Result<(), ToolError> {
    let depth = lisp_syntax::nesting_depth(text);
    if depth > MAX_READ_DEPTH {
        return Err(ToolError::Argument(format!(
            "{what} nests {depth} levels deep (lists and prefixes such as ' or #'); the server \
             hands the Lisp reader at most {MAX_READ_DEPTH} levels, because deeper text would \
             exhaust the image's control stack. Nothing was sent to the image. Build deeply \
             nested data with code (e.g. a loop) instead of writing it out."
        )));
    }
    Ok(())
}

/// The validated `timeoutSeconds` of a call (`default` when absent): a
/// positive, finite number of seconds, capped at 10^7.
pub fn timeout_arg(seconds: Option<f64>, default: f64) -> Result<Duration, ToolError> {
    let s = seconds.unwrap_or(default);
    if s > 0.0 && s.is_finite() {
        Ok(Duration::from_secs_f64(s.min(1.0e7)))
    } else {
        Err(ToolError::Argument(
            "timeoutSeconds must be a positive number of seconds.".into(),
        ))
    }
}

/// The form `(CL-MCP:NAME ARG... :KEY VALUE...)`, printed so that the Lisp
/// reader reads every argument back exactly (strings are escaped by the data
/// printer; no caller splices raw text into a form).
pub fn helper_form(name: &str, args: Vec<Value>, keys: Vec<(&str, Value)>) -> String {
    let mut items = Vec::with_capacity(1 + args.len() + 2 * keys.len());
    items.push(Value::symbol_named(Some("CL-MCP"), &name.to_uppercase()));
    items.extend(args);
    for (k, v) in keys {
        items.push(Value::keyword(k));
        items.push(v);
    }
    Value::list(items).to_string()
}

/// A string value of a plist, `None` when absent or not a string.
pub fn plist_str(v: &Value, key: &str) -> Option<String> {
    v.plist_get(key)
        .and_then(|x| x.as_str())
        .map(str::to_string)
}

/// An integer value of a plist.
pub fn plist_i64(v: &Value, key: &str) -> Option<i64> {
    v.plist_get(key).and_then(Value::as_i64)
}

/// True when the key is present and not `nil`.
pub fn plist_bool(v: &Value, key: &str) -> bool {
    v.plist_get(key).is_some_and(|x| !x.is_nil())
}

/// A non-empty list value of a plist (`None` for absent or `nil`).
pub fn plist_list<'a>(v: &'a Value, key: &str) -> Option<&'a [Value]> {
    v.plist_get(key)
        .and_then(Value::as_list)
        .filter(|l| !l.is_empty())
}

/// Each element of a list value of a plist, mapped by `f` (none when the
/// key is missing or not a list).
pub fn plist_items<T>(v: &Value, key: &str, f: impl FnMut(&Value) -> T) -> Vec<T> {
    plist_list(v, key).unwrap_or(&[]).iter().map(f).collect()
}

/// The strings of a list value of a plist (non-strings skipped).
pub fn plist_strings(v: &Value, key: &str) -> Vec<String> {
    plist_list(v, key)
        .unwrap_or(&[])
        .iter()
        .filter_map(|x| x.as_str().map(str::to_string))
        .collect()
}

/// The `(:error MESSAGE)` a helper returns for a bad name or argument.
fn helper_error(v: &Value) -> Option<String> {
    plist_str(v, "error")
}

// ---------------------------------------------------------------------------
// Per-session evaluation state: the FIFO turn and the running evaluation.

/// The session's evaluation bookkeeping (its turn, running evaluation and
/// pending notice).
pub fn eval_slot(ctx: &ToolContext) -> &super::session_state::EvalState {
    ctx.eval_state()
}

/// A name for the session inside the image (`:session` of
/// `cl-mcp:eval-request`), so sessions sharing an attached image keep their
/// own current package.
pub fn session_key(ctx: &ToolContext) -> String {
    session_key_of(&ctx.session)
}

/// [`session_key`] of a session. The process id keeps the sessions of two
/// servers attached to one image apart.
pub fn session_key_of(session: &crate::session::Session) -> String {
    format!("session-{}-{}", std::process::id(), session.id)
}

/// Why the server stopped an evaluation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StopCause {
    Timeout,
    Cancelled,
}

/// How an evaluation ended, as far as the server is concerned.
pub struct EvalRun {
    /// The plist `cl-mcp:eval-request` returned.
    pub value: Value,
    /// Set when the server interrupted it (timeout or cancellation).
    pub cause: Option<StopCause>,
    /// Set when it waited for the evaluation turn before it ran.
    pub queued: Option<Queued>,
}

/// Status polls start only after this long: short evaluations never pay
/// for them.
const STATUS_DELAY: Duration = Duration::from_millis(1000);
/// Longest wait for one status poll.
const STATUS_POLL_LIMIT: Duration = Duration::from_millis(1000);
/// Longest wait for the image to take an interrupt request.
const INTERRUPT_CALL_LIMIT: Duration = Duration::from_secs(5);

/// Runs an `eval-request` form: waits for the image's evaluation turn, then
/// runs it on the image's evaluation worker, interrupting it (through
/// `cl-mcp:interrupt-evaluation` on another Swank thread) on timeout or
/// cancellation, and refreshing the status line from `cl-mcp:eval-status`
/// every `poll` while it runs. `code` is the user's code, quoted to calls
/// that queue behind this one.
pub async fn run_evaluation(
    ctx: &ToolContext,
    id: u64,
    form: String,
    code: &str,
    timeout: Duration,
    poll: Duration,
    grace: Duration,
) -> Result<EvalRun, ToolError> {
    let slot = eval_slot(ctx);
    let (turn, left) = take_turn(ctx, id, code, timeout).await?;
    *slot.running.guard() = Some(id);
    let result = drive_evaluation(ctx, id, &form, left, poll, grace).await;
    *slot.running.guard() = None;
    result.map(|(value, cause)| EvalRun {
        value,
        cause,
        queued: turn.queued,
    })
}

/// Waits for the image's evaluation turn for evaluation `id` of `code`,
/// telling the client what it waits behind while it waits. The wait counts
/// against `timeout`; what is left of it comes back with the turn. A call
/// whose time runs out in the queue never runs: its error says so.
pub async fn take_turn<'a>(
    ctx: &'a ToolContext,
    id: u64,
    code: &str,
    timeout: Duration,
) -> Result<(turn::Taken<'a>, Duration), ToolError> {
    // The timeout does not cover starting the image (a cold start may build
    // the core first): the wait counts from when the image is ready.
    let taken = eval_slot(ctx)
        .turn
        .take(
            (id, code),
            timeout,
            &ctx.cancel,
            ensure_ready(ctx),
            |line| ctx.set_waiting(line),
        )
        .await
        .map_err(|e| e.into_error(timeout))?;
    ctx.clear_status();
    // Started (or, after a restart or a crash while it waited, started again).
    ensure_ready(ctx).await?;
    let left = timeout
        .saturating_sub(taken.counted)
        .max(Duration::from_millis(1));
    Ok((taken, left))
}

async fn drive_evaluation(
    ctx: &ToolContext,
    id: u64,
    form: &str,
    timeout: Duration,
    poll: Duration,
    grace: Duration,
) -> Result<(Value, Option<StopCause>), ToolError> {
    let started = Instant::now();
    let image = ctx.image();
    let eval = image.eval(form, BUFFER_PACKAGE);
    tokio::pin!(eval);
    let deadline = tokio::time::sleep(timeout);
    tokio::pin!(deadline);
    let mut ticker = tokio::time::interval_at(tokio::time::Instant::now() + STATUS_DELAY, poll);
    let mut cause: Option<StopCause> = None;
    let mut gave_up_at: Option<tokio::time::Instant> = None;
    let mut interrupt_failed: Option<ToolError> = None;
    // Without threads (CLISP) a status poll would only queue behind the
    // evaluation: the status line then just counts the seconds.
    let threads = image.has_threads();
    loop {
        tokio::select! {
            r = &mut eval => {
                // Without threads the server's signal can land just after
                // the evaluation ended, while the image sends its reply:
                // Swank then aborts the request. It was interrupted all
                // the same (what it printed is lost).
                if let (Ok(ImageReply { outcome: RexOutcome::Abort(_), .. }), Some(_), false) =
                    (&r, cause, threads)
                {
                    // Keeps a state-lost notice the reply carried.
                    let _ = unpack(ctx, r);
                    let plist = Value::List(
                        vec![Value::keyword("interrupted"), Value::t()],
                        None,
                    );
                    return Ok((plist, cause));
                }
                return unpack(ctx, r).map(|v| (v, cause));
            }
            _ = &mut deadline, if cause.is_none() => {
                cause = Some(StopCause::Timeout);
                interrupt_failed = interrupt_evaluation_or_why(ctx, Some(id)).await.err();
                gave_up_at = Some(tokio::time::Instant::now() + grace);
            }
            _ = ctx.cancel.cancelled(), if cause.is_none() => {
                cause = Some(StopCause::Cancelled);
                interrupt_failed = interrupt_evaluation_or_why(ctx, Some(id)).await.err();
                gave_up_at = Some(tokio::time::Instant::now() + grace);
            }
            _ = ticker.tick(), if cause.is_none() => {
                if !threads {
                    ctx.set_status(format!("evaluating ({} s)", started.elapsed().as_secs()));
                    continue;
                }
                let status = helper_form("eval-status", vec![Value::Integer(id as i64)], vec![]);
                // A poll must never hold up the loop (and the timeout) when
                // the image is slow to answer.
                let polled = tokio::time::timeout(STATUS_POLL_LIMIT, call_running(ctx, &status)).await;
                if let Ok(Ok(v)) = polled {
                    match plist_str(&v, "line") {
                        Some(line) => ctx.set_status(line),
                        None => ctx.set_status(format!("evaluating ({} s)", started.elapsed().as_secs())),
                    }
                }
            }
            _ = sleep_until_opt(gave_up_at) => {
                let image = ctx.image();
                if image.process_stopped() {
                    return Err(ToolError::Image(format!(
                        "The evaluation did not stop within {} s of being interrupted: the \
                         image's process (pid {}) is stopped (SIGSTOP or a debugger), so it \
                         runs nothing. Resume it (kill -CONT) or use image-restart.",
                        grace.as_secs(),
                        image.pid().map(|p| p.to_string()).unwrap_or_default()
                    )));
                }
                let old = image.abandon_eval_thread();
                if let Some(why) = interrupt_failed {
                    return Err(ToolError::Image(format!(
                        "The evaluation ran past its {} and could not be interrupted: the \
                         interrupt itself failed ({why}). It is left running on its thread{}. \
                         Use image-restart to stop it (this loses the image's state).",
                        match cause {
                            Some(StopCause::Cancelled) => "cancellation".to_string(),
                            _ => format!("timeout ({} s)", timeout.as_secs()),
                        },
                        old.map(|t| format!(" (Swank thread {t})")).unwrap_or_default()
                    )));
                }
                let cpu = match image.busiest_thread(Duration::from_millis(300)).await {
                    Some((tid, pct)) if pct >= 5.0 => format!(
                        "; the image's busiest thread (OS thread {tid}) is using {pct:.0}% of a core"
                    ),
                    Some(_) => "; the image is using almost no CPU now".to_string(),
                    None => String::new(),
                };
                return Err(ToolError::Image(format!(
                    "The evaluation did not stop within {} s of being interrupted: it runs \
                     code that cannot be interrupted (e.g. inside WITHOUT-INTERRUPTS, an \
                     UNWIND-PROTECT cleanup, or foreign code). It is left running on its \
                     thread{}{cpu}. Later evaluations run on a fresh thread, with the image's \
                     state intact. Use image-restart to stop it (this loses the image's state).",
                    grace.as_secs(),
                    old.map(|t| format!(" (Swank thread {t})")).unwrap_or_default()
                )));
            }
        }
    }
}

async fn sleep_until_opt(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// Interrupts the evaluation `id` (every evaluation of the image when
/// `None`); returns the ids the image interrupted.
pub async fn interrupt_evaluation(ctx: &ToolContext, id: Option<u64>) -> Vec<i64> {
    interrupt_evaluation_or_why(ctx, id)
        .await
        .unwrap_or_default()
}

/// [`interrupt_evaluation`], or why the interrupt could not be sent (the
/// image at its thread limit cannot start the thread that sends it).
async fn interrupt_evaluation_or_why(
    ctx: &ToolContext,
    id: Option<u64>,
) -> Result<Vec<i64>, ToolError> {
    let image = ctx.image();
    if !image.has_threads() {
        // One thread runs everything (CLISP): no other thread can call
        // the helper while the evaluation runs; a signal breaks into it.
        return Ok(if image.interrupt_process() {
            id.map(|n| vec![n as i64]).unwrap_or_default()
        } else {
            Vec::new()
        });
    }
    let args = id
        .map(|n| vec![Value::Integer(n as i64)])
        .unwrap_or_default();
    let form = helper_form("interrupt-evaluation", args, vec![]);
    match tokio::time::timeout(INTERRUPT_CALL_LIMIT, call_running(ctx, &form)).await {
        Ok(Ok(v)) => Ok(plist_list(&v, "interrupted")
            .unwrap_or(&[])
            .iter()
            .filter_map(Value::as_i64)
            .collect()),
        Ok(Err(e)) => Err(e),
        Err(_) => Err(ToolError::Image(format!(
            "the image did not take the interrupt request within {} s",
            INTERRUPT_CALL_LIMIT.as_secs()
        ))),
    }
}

/// Calls a lookup helper on a fresh Swank thread; a name that did not
/// resolve (the helper's `(:error "...")`) is an error too.
pub async fn call_lookup(ctx: &ToolContext, form: &str) -> Result<Value, ToolError> {
    let v = call_fresh(ctx, form).await?;
    match helper_error(&v) {
        Some(e) => Err(ToolError::Lisp(e)),
        None => Ok(v),
    }
}

/// Refreshes the session's extra read roots from the image's registered ASDF
/// systems (after loading systems, and when code-find points at files).
pub async fn refresh_read_roots(ctx: &ToolContext) {
    let form = helper_form("source-directories", vec![], vec![]);
    if let Ok(v) = call_fresh(ctx, &form).await {
        let dirs = plist_list(&v, "directories")
            .unwrap_or(&[])
            .iter()
            .filter_map(|d| d.as_str().map(std::path::PathBuf::from))
            .collect();
        ctx.session.set_read_roots(dirs);
    }
}

/// Calls a long-running helper (compiling, loading, testing) on a fresh
/// Swank thread, interrupting it when the request is cancelled or after
/// `timeout`. A timed-out result gets `:timed-out t` added to its plist.
/// `what` (e.g. "lisp-compile-file src/a.lisp") tells builds queued behind
/// this one what they wait for.
pub async fn call_build(
    ctx: &ToolContext,
    what: &str,
    form: &str,
    timeout: Duration,
) -> Result<Value, ToolError> {
    // Builds run on their own thread: they do not take the evaluation turn,
    // but they are interrupted like evaluations, through their id.
    static NEXT_BUILD_ID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1 << 40);
    let id = NEXT_BUILD_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let form = add_id(form, id);
    // ASDF and the compiler are not thread-safe: one build at a time per
    // image, in arrival order. The wait counts against the timeout (from
    // when the image is ready), as an evaluation's does.
    let taken = eval_slot(ctx)
        .build_turn
        .take(
            (id, what),
            timeout,
            &ctx.cancel,
            ensure_ready(ctx),
            |line| ctx.set_waiting(line),
        )
        .await
        .map_err(|e| match e {
            turn::NotTaken::Cancelled => ToolError::NotRun(
                "Cancelled while waiting for another build in this image to finish.".to_string(),
            ),
            e => e.into_error(timeout),
        })?;
    ctx.clear_status();
    ensure_ready(ctx).await?;
    let timeout = timeout
        .saturating_sub(taken.counted)
        .max(Duration::from_millis(1));
    let call = call_fresh(ctx, &form);
    tokio::pin!(call);
    let timed_out = tokio::select! {
        r = &mut call => return r,
        _ = ctx.cancel.cancelled() => false,
        _ = tokio::time::sleep(timeout) => true,
    };
    interrupt_evaluation(ctx, Some(id)).await;
    let grace = Duration::from_secs(10);
    let mut v = tokio::time::timeout(grace, call).await.map_err(|_| {
        ToolError::Image(format!(
            "The operation did not stop within {} s of being interrupted; the image is still \
             busy. Use image-restart to start a fresh one.",
            grace.as_secs()
        ))
    })??;
    if timed_out {
        if let Value::List(items, None) = &mut v {
            items.push(Value::keyword("timed-out"));
            items.push(Value::t());
        }
    }
    Ok(v)
}

/// Appends `:id ID` to a helper form (all build helpers take it).
fn add_id(form: &str, id: u64) -> String {
    let body = form.strip_suffix(')').unwrap_or(form);
    format!("{body} :ID {id})")
}

// ---------------------------------------------------------------------------
// Talking to the image.

/// The buffer package Swank reads our forms in; every symbol in them is
/// package-qualified, so any existing package would do.
pub const BUFFER_PACKAGE: &str = "COMMON-LISP-USER";

/// Turns an image reply into the helper's value, keeping the one-time
/// notice for [`finish`].
fn unpack(
    ctx: &ToolContext,
    reply: Result<ImageReply, crate::image::ImageError>,
) -> Result<Value, ToolError> {
    let (notice, value) = reply_value(reply);
    if let Some(n) = notice {
        *eval_slot(ctx).notice.guard() = Some(n);
    }
    // What the helpers tell once (`:notices` of a run's reply: the
    // Quicklisp stand-in's first use) joins the notice of this result.
    if let Ok(v) = &value {
        let told = plist_strings(v, "notices");
        if !told.is_empty() {
            let mut notice = eval_slot(ctx).notice.guard();
            let said = told.join("\n[NOTICE] ");
            *notice = Some(match notice.take() {
                Some(n) => format!("{n}\n[NOTICE] {said}"),
                None => said,
            });
        }
    }
    value
}

/// An image reply as the helper's value, and the one-time notice it
/// carried (for callers without a [`ToolContext`]).
pub fn reply_value(
    reply: Result<ImageReply, crate::image::ImageError>,
) -> (Option<String>, Result<Value, ToolError>) {
    let reply = match reply {
        Ok(r) => r,
        Err(e) => return (None, Err(ToolError::Image(e.to_string()))),
    };
    let value = match reply.outcome {
        RexOutcome::Ok(v) => Ok(v),
        RexOutcome::Abort(reason) => Err(ToolError::Image(format!(
            "The image aborted the request{}. This is a problem in the server's Lisp helpers \
             or the image's state, not in your code; image-info shows the image, image-restart \
             starts a fresh one.",
            reason.map(|r| format!(" ({r})")).unwrap_or_default()
        ))),
    };
    (reply.state_lost, value)
}

/// Waits until the session's image is up (starting it if needed), unless
/// the request is cancelled first.
pub async fn ensure_ready(ctx: &ToolContext) -> Result<(), ToolError> {
    let image = ctx.image();
    let ready = image.ready();
    tokio::pin!(ready);
    // A start that takes a moment (a first start building its cache) says
    // so in progress notifications, rather than "running": nothing of the
    // call has run yet.
    let quick = tokio::time::timeout(Duration::from_millis(300), &mut ready).await;
    let result = match quick {
        Ok(r) => r,
        Err(_) => {
            ctx.set_waiting(
                "starting the Lisp image (a first start builds its cache once: seconds; \
                 ECL compiles Swank through gcc: minutes)",
            );
            let r = tokio::select! {
                r = &mut ready => r,
                _ = ctx.cancel.cancelled() => {
                    ctx.clear_status();
                    return Err(ToolError::NotRun(
                        "Cancelled while the Lisp image was starting.".into(),
                    ));
                }
            };
            ctx.clear_status();
            r
        }
    };
    result.map_err(|e| ToolError::Image(e.to_string()))?;
    ensure_project_registered(ctx).await;
    Ok(())
}

/// Tells the image about the session's project systems (every `.asd` under
/// the root, found first by name: see `tools::project_systems`) once per
/// image generation and root, and again when the walk is no longer current
/// (an `.asd` or a directory under the root changed): after a start, a
/// restart, a crash, `fs-set-project-root` or a new checkout. The freshness
/// check dates what the walk read, on every call when that is about a hundred
/// entries, at most every [`BIG_WALK_CHECK`] otherwise. A failure is logged,
/// never the caller's error.
async fn ensure_project_registered(ctx: &ToolContext) {
    let image = ctx.image();
    if image.ready().await.is_err() {
        return; // the caller's own call reports why
    }
    let generation = image.info().generation;
    let root = ctx.session.project_root();
    let mut said_stopped = false;
    // The root this session's image was told of before, when the session
    // moved: its systems are no longer the project's (unless sessions
    // share the image, each with its own root).
    let mut forget = None;
    let mut told = None;
    if let Some(r) = eval_slot(ctx).project_registered.guard().as_mut() {
        if r.generation == generation && r.root == root {
            told = Some(r.walk.clone());
            let small = r.walk.stamp_count() <= SMALL_WALK;
            if !small && r.checked.is_some_and(|c| c.elapsed() < BIG_WALK_CHECK) {
                return;
            }
            if r.walk.is_current() {
                r.checked = Some(Instant::now());
                return;
            }
        }
        said_stopped = r.root == root && r.said_stopped;
        if r.generation == generation && r.root != root && !ctx.session.config.shared_image {
            forget = Some(r.root.clone());
        }
    }
    let cache = ctx
        .session
        .config
        .image
        .cache_dir
        .clone()
        .unwrap_or_else(crate::image::core_cache::default_cache_dir);
    let skip: Vec<std::path::PathBuf> = std::fs::canonicalize(&cache)
        .into_iter()
        .chain(std::iter::once(cache))
        .collect();
    let walked_root = root.clone();
    let Ok(walk) = tokio::task::spawn_blocking(move || {
        super::project_systems::AsdWalk::walk(&walked_root, &skip)
    })
    .await
    else {
        return;
    };
    let new_root = told.is_none();
    // The same files and names as the image was told: nothing to tell
    // (a directory changed for other files, or within a second of a walk).
    if told.is_some_and(|t| t.files == walk.files) {
        if let Some(r) = eval_slot(ctx).project_registered.guard().as_mut() {
            if r.generation == generation && r.root == root {
                r.walk = std::sync::Arc::new(walk);
                r.checked = Some(Instant::now());
            }
        }
        return;
    }
    let files = walk
        .files
        .iter()
        .map(|f| {
            let mut items = vec![Value::string(f.path.to_string_lossy().into_owned())];
            items.extend(f.names.iter().map(|n| Value::string(n.clone())));
            Value::list(items)
        })
        .collect::<Vec<_>>();
    let mut keys = vec![(
        "asd-files",
        Value::list([Value::symbol("QUOTE"), Value::list(files)]),
    )];
    if let Some(old) = forget {
        keys.push(("forget", Value::string(old.to_string_lossy().into_owned())));
    }
    // An image of ours works in the project: its working directory and
    // `*default-pathname-defaults*` follow the root (when the root or the
    // image is new, not at every walk); an attached image is the user's,
    // told the root but not moved.
    let root_text = Value::string(root.to_string_lossy().into_owned());
    let register = helper_form("register-project-root", vec![root_text.clone()], keys);
    let form = if new_root {
        let moved = image.mode() != crate::image::ImageMode::Attached;
        format!(
            // Qualified: Swank may read the form in its own I/O package.
            "(cl:progn {} {})",
            helper_form(
                "enter-project-root",
                vec![root_text],
                vec![("move", Value::bool(moved))],
            ),
            register
        )
    } else {
        register
    };
    // Through `unpack`, so a "state was lost" notice this call happens to
    // receive still reaches the user.
    match unpack(ctx, image.rex(&form, BUFFER_PACKAGE, Thread::T).await) {
        Ok(v) => {
            let systems = plist_strings(&v, "systems");
            tracing::debug!(root = %root.display(), ?systems, "project systems registered");
            let mut said = Vec::new();
            if walk.stopped && !said_stopped {
                said.push(format!(
                    "The project root {} holds more than {} files and folders: the search for its .asd \
                     files stopped there, so systems defined further on are not found as the \
                     project's (an installed copy may be used instead). Set a narrower root with \
                     fs-set-project-root, or list big folders in .gitignore.",
                    root.display(),
                    super::project_systems::MAX_WALK_ENTRIES
                ));
            }
            let first_time = eval_slot(ctx)
                .project_registered
                .guard()
                .as_ref()
                .is_none_or(|r| r.generation != generation || r.root != root);
            *eval_slot(ctx).project_registered.guard() =
                Some(super::session_state::ProjectRegistration {
                    generation,
                    root: root.clone(),
                    said_stopped: said_stopped || walk.stopped,
                    walk: std::sync::Arc::new(walk),
                    checked: Some(Instant::now()),
                });
            // The user's own image gains a search function: say so once.
            if first_time && image.mode() == crate::image::ImageMode::Attached {
                said.push(format!(
                    "The project's ASDF systems under {} ({}) are now findable by name in your \
                     attached image (cl-mcp-server added a system search function to \
                     asdf:*system-definition-search-functions*).",
                    root.display(),
                    if systems.is_empty() {
                        "none yet".to_string()
                    } else {
                        systems.join(", ")
                    }
                ));
            }
            if !said.is_empty() {
                let said = said.join("\n");
                let mut notice = eval_slot(ctx).notice.guard();
                *notice = Some(match notice.take() {
                    Some(n) => format!("{n}\n{said}"),
                    None => said,
                });
            }
        }
        Err(e) => {
            tracing::warn!(root = %root.display(), error = %e, "could not register the project's systems")
        }
    }
}

/// A file tool wrote under the project root: the next call checks the
/// walk, however big, so an `.asd` written is found at once.
pub fn note_project_written(ctx: &ToolContext) {
    if let Some(r) = eval_slot(ctx).project_registered.guard().as_mut() {
        r.checked = None;
    }
}

/// A walk of at most this many directories and `.asd` files is checked for
/// changes before every call (a stat each: microseconds).
const SMALL_WALK: usize = 128;

/// How often a bigger walk is checked for changes.
const BIG_WALK_CHECK: Duration = Duration::from_secs(2);

/// Runs `form` on a fresh Swank thread (never waits behind an evaluation).
pub async fn call_fresh(ctx: &ToolContext, form: &str) -> Result<Value, ToolError> {
    ensure_project_registered(ctx).await;
    let image = ctx.image();
    // A request's thread re-arms its stack guard before it ends (see
    // `with-stack-guard` in lisp/impl-sbcl.lisp): a deep recursion in a
    // macro or a build must not leave the next thread unprotected.
    let guarded = format!("(cl-mcp-server::with-stack-guard {form})");
    unpack(ctx, image.rex(&guarded, BUFFER_PACKAGE, Thread::T).await)
}

/// [`call_fresh`] on the image that runs now, never starting one (for the
/// status polls and interrupts of a running evaluation).
async fn call_running(ctx: &ToolContext, form: &str) -> Result<Value, ToolError> {
    let image = ctx.image();
    let guarded = format!("(cl-mcp-server::with-stack-guard {form})");
    unpack(
        ctx,
        image.rex_running(&guarded, BUFFER_PACKAGE, Thread::T).await,
    )
}

/// Runs `form` on the Swank thread `thread` (a thread waiting in the
/// debugger serves such requests inside its debugger's dynamic extent).
pub async fn call_on_thread(
    ctx: &ToolContext,
    form: &str,
    thread: i64,
) -> Result<Value, ToolError> {
    let image = ctx.image();
    unpack(
        ctx,
        image.rex(form, BUFFER_PACKAGE, Thread::Id(thread)).await,
    )
}

/// Puts the image's one-time "state was lost" notice (if one is due) in
/// front of a tool's result. Every Lisp-backed tool's result passes here.
pub fn finish(ctx: &ToolContext, mut out: ToolOutput) -> ToolOutput {
    if let Some(n) = eval_slot(ctx).notice.guard().take() {
        out.text = format!("[NOTICE] {n}\n\n{}", out.text);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use lisp_syntax::data;

    #[test]
    fn helper_form_reads_back() {
        let f = helper_form(
            "describe-symbol",
            vec![Value::string("foo:\"bar\"")],
            vec![
                ("package", Value::string("CL-USER")),
                ("max-output", Value::Integer(5)),
            ],
        );
        assert_eq!(
            f,
            "(CL-MCP::DESCRIBE-SYMBOL \"foo:\\\"bar\\\"\" :PACKAGE \"CL-USER\" :MAX-OUTPUT 5)"
        );
        assert!(data::read(&f).is_ok());
    }

    #[test]
    fn plist_accessors() {
        let v = data::read(r#"(:a "x" :n 3 :flag t :none nil :l ("p" 1 "q"))"#).unwrap();
        assert_eq!(plist_str(&v, "a").as_deref(), Some("x"));
        assert_eq!(plist_i64(&v, "n"), Some(3));
        assert!(plist_bool(&v, "flag"));
        assert!(!plist_bool(&v, "none"));
        assert!(!plist_bool(&v, "missing"));
        assert!(plist_list(&v, "none").is_none());
        assert_eq!(plist_strings(&v, "l"), vec!["p", "q"]);
    }
}
