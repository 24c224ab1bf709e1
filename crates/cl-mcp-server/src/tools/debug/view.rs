//! Reading a debugger level (condition, restarts, frames) and rendering
//! it, and a wait's outcome as `evaluate-lisp` renders it.

use super::pending::{Pending, Waited};
use crate::tools::eval::{render_text, EvalOutput, InterruptCause};
use crate::tools::fs_paths::display_path;
use crate::tools::lisp_call::{
    call_on_thread, helper_form, plist_i64, plist_items, plist_str, plist_strings,
};
use crate::tools::ToolError;
use crate::tools::{ToolContext, ToolOutput};
use lisp_syntax::data::Value;
use schemars::JsonSchema;
use serde::Serialize;

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
    /// The `action`s of debugger-restart this Lisp can do (for the text's
    /// closing hint; the tool's description and its refusals say the rest).
    #[serde(skip)]
    pub actions: Vec<String>,
    /// The thread, for a thread's debugger (`debugger` 0: not taken over).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub thread: Option<i64>,
}

pub(super) fn rel_path(ctx: &ToolContext, path: &str) -> String {
    display_path(&ctx.session.project_root(), std::path::Path::new(path))
}

pub(super) fn debugger_info(ctx: &ToolContext, id: u64, v: &Value) -> DebuggerInfo {
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
        actions: plist_strings(v, "actions"),
        thread: None,
    }
}

/// Reads the current level of `p` (which must be in the debugger).
pub async fn read_debugger(
    ctx: &ToolContext,
    p: &Pending,
    start: u32,
    count: u32,
) -> Result<DebuggerInfo, ToolError> {
    let thread = p
        .state()
        .thread
        .ok_or_else(|| ToolError::Debugger("The evaluation is not in the debugger.".into()))?;
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
        return Err(ToolError::Lisp(e));
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
    let actions = if d.actions.is_empty() {
        "abort, continue, return, restart, step, next, out".to_string()
    } else {
        d.actions.join(", ")
    };
    t.push_str(&format!(
        "\n\nInspect with debugger-frame, resolve with debugger-restart (a restart number \
         or name, `values` for use-value/store-value; action {actions})."
    ));
    t
}

/// The `[Frames]` part of a debugger's text: each user frame with its
/// source location, or why there is none.
pub(super) fn push_frames(t: &mut String, frames: &[FrameInfo], total: i64) {
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
