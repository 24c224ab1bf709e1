//! User code run on a debugger's thread, in a frame ([`run_in_frame`]):
//! stopped at its limit or on cancel, the debugger left where it was.

use super::pending::Pending;
use crate::tools::lisp_call::{
    call_lookup, helper_form, plist_bool, plist_str, reply_value, BUFFER_PACKAGE,
};
use crate::tools::ToolContext;
use crate::tools::ToolError;
use lisp_syntax::data::Value;
use std::time::Duration;

/// How long code run in a frame (`debugger-frame`'s `code`) may run
/// before it is stopped (the debugger stays where it was).
pub(super) const FRAME_CODE_TIMEOUT: Duration = Duration::from_secs(30);

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

/// The answer of code whose debugger went away under it (`aborted`: why
/// the server aborted it, when it did).
fn ended_under_code(id: u64, aborted: Option<String>) -> ToolError {
    let why = aborted.unwrap_or_else(|| "its evaluation ended".to_string());
    ToolError::Debugger(format!(
        "Debugger {id} is gone while `code` ran in it ({why}); the code was unwound with it. \
         Evaluate again with debug: true to get a new debugger."
    ))
}

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
) -> Result<FrameRun, ToolError> {
    // Running code is use: the idle abort waits until it has ended.
    let _in_use = p.in_use();
    let since = p.state().debug_seq;
    let mut rx = p.state.subscribe();
    let image = ctx.image();
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
        ended = async {
            rx.wait_for(|s| s.debug_seq > since || s.outcome.is_some())
                .await
                .map(|s| (s.outcome.is_some(), s.aborted.clone()))
        } => {
            return match ended {
                // A new level: the code's error nested.
                Ok((false, _)) => Ok(FrameRun::Nested),
                // The evaluation ended under the code (the session ended,
                // another call restarted or aborted it): nothing answers
                // on its thread any more, so say so now.
                Ok((true, aborted)) => Err(ended_under_code(p.id, aborted)),
                Err(_) => Err(ended_under_code(p.id, None)),
            };
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
        Err(_) => Err(ToolError::Image(format!(
            "`code` {why} and was asked to stop, but its thread did not answer within 5 s \
             (it blocks interrupts); debugger-restart with action abort ends the evaluation."
        ))),
    }
}
