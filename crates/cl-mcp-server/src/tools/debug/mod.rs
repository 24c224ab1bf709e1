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

mod frame;
mod handlers;
mod pending;
mod store;
mod take_over;
mod view;

pub(crate) use frame::{run_in_frame, FrameRun};
pub use pending::{start, wait, PendState, Pending, Waited};
pub(crate) use store::debugger_thread;
pub use store::{end_session, pending_lines, Debuggers};
pub use view::{outcome_output, read_debugger, render_debugger, DebuggerInfo};

use super::eval::EvalOutput;
use super::lisp_call::finish;
use super::{tool, Annotations, ToolContext, ToolDef, ToolGroup};
use handlers::{
    debugger_backtrace, debugger_frame, debugger_restart, BacktraceArgs, FrameArgs, FrameOutput,
    RestartArgs,
};

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
