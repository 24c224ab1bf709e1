//! Taking over a thread that sits in a debugger that is not ours (attach
//! mode: the user's), followed as a [`Pending`] until it leaves the level
//! we entered.

use super::pending::{continues, PendState, Pending, UNWIND_GRACE};
use crate::image::Image;
use crate::sync::MutexExt;
use crate::tools::lisp_call::{call_fresh, helper_form, plist_str, BUFFER_PACKAGE};
use crate::tools::session_state::SessionTools;
use crate::tools::ToolContext;
use crate::tools::ToolError;
use lisp_syntax::data::Value;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};
use swank_client::SwankEvent;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

/// Takes over `thread`, which sits in a debugger that is not ours (in
/// attach mode: the user's, in their SLIME): a nested level of its debugger
/// is entered for this session (`cl-mcp:take-over-thread`) and followed as a
/// [`Pending`]; `abort` there hands the thread back to the level it was in.
pub(super) async fn take_over(ctx: &ToolContext, thread: i64) -> Result<Arc<Pending>, ToolError> {
    let image = ctx.image();
    if image.debugger_claimed(thread) {
        // Sessions sharing an image (--shared-image) see each other's
        // threads; a suspended evaluation is its own session's to act on.
        return Err(ToolError::Debugger(format!(
            "Thread {thread} waits in the debugger of another session's evaluation (this \
             server's sessions share one image, --shared-image): only that session may act \
             on it. It is read-only here: debugger-backtrace with thread {thread} and no \
             takeOver shows it."
        )));
    }
    let claim = image
        .claim_debugger()
        .await
        .map_err(|e| ToolError::Image(e.to_string()))?;
    let id = crate::tools::eval::NEXT_EVAL_ID.fetch_add(1, Ordering::Relaxed);
    let (state, _) = watch::channel(PendState::default());
    let p = Arc::new(Pending {
        id,
        code: format!("thread {thread}, taken over"),
        taken_over: Some(thread),
        image: ctx.addressed_image(),
        state,
        touched: Mutex::new(Instant::now()),
        touch: tokio::sync::Notify::new(),
        running: std::sync::atomic::AtomicUsize::new(0),
    });
    let mut rx = p.state.subscribe();
    let events = image.subscribe();
    let form = helper_form(
        "take-over-thread",
        vec![Value::Integer(thread), Value::Integer(claim.id as i64)],
        vec![],
    );
    ctx.state.debuggers.list.guard().push(p.clone());
    let idle = Duration::from_secs(ctx.session.config.debugger_idle_secs.max(1));
    tokio::spawn(follow_taken_over(
        image,
        Arc::downgrade(&ctx.state),
        p.clone(),
        claim,
        events,
        idle,
        ctx.state.debuggers.end.clone(),
    ));
    let failed = match call_fresh(ctx, &form).await {
        Ok(v) => plist_str(&v, "error").map(ToolError::Lisp),
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
            _ => Some(ToolError::Debugger(format!(
                "Thread {thread} did not enter the debugger within {} s of being asked.",
                UNWIND_GRACE.as_secs()
            ))),
        },
    };
    match failed {
        None => Ok(p),
        Some(e) => {
            p.state.send_modify(|s| s.outcome = Some(Err(e.clone())));
            ctx.state.debuggers.remove(p.id);
            Err(e)
        }
    }
}

/// Follows a thread taken over: its debugger levels (entries whose
/// continuations hold the claim), until it leaves the level we entered;
/// hands it back when idle or at session end.
async fn follow_taken_over(
    image: Image,
    tools: Weak<SessionTools>,
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
        let idle_at = tokio::time::Instant::from_std(*p.touched.guard() + idle);
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
                        s.outcome = Some(Err(ToolError::Image(
                            "The connection to the image was lost.".into(),
                        )))
                    });
                    break;
                }
            },
            // A call running on its thread is use (see `Pending::in_use`).
            _ = tokio::time::sleep_until(idle_at), if level > 0 && !stop_sent && !p.in_use_now() => Some(format!(
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
    if let Some(s) = tools.upgrade() {
        s.debuggers.remove(p.id);
    }
}
