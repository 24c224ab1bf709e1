//! The `debug` group's handlers: `debugger-backtrace`, `debugger-frame`,
//! `debugger-restart`.

use super::frame::{run_in_frame, FrameRun, FRAME_CODE_TIMEOUT};
use super::pending::{wait, Pending};
use super::store::find_in_its_image;
use super::take_over::take_over;
use super::view::{
    debugger_info, outcome_output, push_frames, read_debugger, rel_path, render_debugger,
    DebuggerInfo,
};
use crate::tools::lisp_call::{
    call_lookup, call_on_thread, check_read_depth, helper_form, plist_i64, plist_items, plist_str,
    plist_strings, reply_value, BUFFER_PACKAGE,
};
use crate::tools::ToolError;
use crate::tools::{ToolContext, ToolOutput};
use lisp_syntax::data::Value;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

// ---------------------------------------------------------------------------
// The tools.

#[derive(Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(super) struct BacktraceArgs {
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

pub(super) async fn debugger_backtrace(a: BacktraceArgs, ctx: ToolContext) -> ToolOutput {
    let count = a.count.unwrap_or(20).min(500);
    let held = a.thread.and_then(|t| {
        ctx.state
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
    let (p, ctx) = match find_in_its_image(&ctx, wanted) {
        Ok(found) => found,
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
pub(super) struct FrameArgs {
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
pub(super) struct FrameOutput {
    debugger: u64,
    /// None: the debugger lists no frame of the user's, and `code` ran in
    /// the debugger's own context.
    #[serde(skip_serializing_if = "Option::is_none")]
    index: Option<i64>,
    frame: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    path: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    line: Option<i64>,
    /// The text of the form the frame is in.
    #[serde(skip_serializing_if = "Option::is_none")]
    form: Option<String>,
    locals: Vec<Local>,
    /// What this Lisp keeps of a frame's locals, when that explains the
    /// list (none, or the arguments only), in its own terms.
    #[serde(skip_serializing_if = "Option::is_none")]
    locals_note: Option<String>,
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
    let Some(index) = o.index else {
        // No frame: only what `code` did.
        let mut t = "[No frame] The debugger lists no frame of the user's code: `code` ran in \
                     the debugger's context, outside any frame."
            .to_string();
        push_evaluated(&mut t, o);
        return t;
    };
    let mut t = format!("[Frame {index}] {}", o.frame);
    if let (Some(p), Some(l)) = (&o.path, o.line) {
        t.push_str(&format!("\nAt {p}:{l}"));
    }
    if let Some(f) = &o.form {
        t.push_str(&format!("\nForm: {f}"));
    }
    t.push_str("\n[Locals]");
    for l in &o.locals {
        t.push_str(&format!("\n{} = {}", l.name, l.value));
    }
    match &o.locals_note {
        Some(note) => t.push_str(&format!("\n({note})")),
        None if o.locals.is_empty() => t.push_str("\n(none)"),
        None => {}
    }
    if o.more_locals > 0 {
        t.push_str(&format!("\n[{} more locals]", o.more_locals));
    }
    if !o.catch_tags.is_empty() {
        t.push_str(&format!("\n[Catch tags] {}", o.catch_tags.join(" ")));
    }
    push_evaluated(&mut t, o);
    t
}

/// What `code` printed and returned, or the nested level it entered.
fn push_evaluated(t: &mut String, o: &FrameOutput) {
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
}

/// Frame `index` of pending debugger `p` (on `thread`): `debugger-frame`'s
/// answer without `code`.
async fn read_frame(
    ctx: &ToolContext,
    p: &Pending,
    thread: i64,
    index: u32,
) -> Result<FrameOutput, ToolError> {
    let form = helper_form("debugger-frame", vec![Value::Integer(index.into())], vec![]);
    let v = call_on_thread(ctx, &form, thread).await?;
    if let Some(e) = plist_str(&v, "error") {
        return Err(ToolError::Lisp(e));
    }
    Ok(FrameOutput {
        debugger: p.id,
        index: Some(plist_i64(&v, "index").unwrap_or(index.into())),
        frame: plist_str(&v, "frame").unwrap_or_default(),
        path: plist_str(&v, "path").map(|s| rel_path(ctx, &s)),
        line: plist_i64(&v, "line"),
        form: plist_str(&v, "form"),
        locals: plist_items(&v, "locals", |l| Local {
            name: plist_str(l, "name").unwrap_or_default(),
            value: plist_str(l, "value").unwrap_or_default(),
        }),
        locals_note: plist_str(&v, "locals-note"),
        more_locals: plist_i64(&v, "more-locals").unwrap_or(0),
        catch_tags: plist_strings(&v, "catch-tags"),
        ..FrameOutput::default()
    })
}

/// The deepest debugger level at which `debugger-frame` runs code: an error
/// in it nests once more, and SBCL stops answering past about ten nested
/// errors ("Maximum error nesting depth exceeded").
const MAX_FRAME_CODE_LEVEL: i64 = 8;

pub(super) async fn debugger_frame(a: FrameArgs, ctx: ToolContext) -> ToolOutput {
    let (p, ctx) = match find_in_its_image(&ctx, a.debugger) {
        Ok(found) => found,
        Err(e) => return ToolOutput::error(e),
    };
    p.touch();
    let Some(thread) = p.state().thread else {
        return ToolOutput::error("The evaluation is not in the debugger.");
    };
    // Default: the top listed frame; none when the debugger lists none.
    let index = match a.frame {
        Some(i) => Some(i),
        None => match read_debugger(&ctx, &p, 0, 1).await {
            Ok(d) => d.frames.first().map(|f| f.index as u32),
            Err(e) => return ToolOutput::error(e),
        },
    };
    let mut out = match index {
        Some(index) => match read_frame(&ctx, &p, thread, index).await {
            Ok(out) => out,
            Err(e) => return ToolOutput::error(e),
        },
        None => FrameOutput {
            debugger: p.id,
            ..FrameOutput::default()
        },
    };
    let index_value = index.map_or_else(Value::nil, |i| Value::Integer(i.into()));
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
            vec![index_value, Value::string(code.clone())],
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
pub(super) struct RestartArgs {
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

fn restart_form(a: &RestartArgs) -> Result<String, ToolError> {
    let values = a.values.clone().unwrap_or_default();
    for v in &values {
        check_read_depth(v, "`values`")?;
    }
    let frame = || {
        a.frame.map(|f| Value::Integer(f.into())).ok_or_else(|| {
            ToolError::Argument("This action needs `frame` (a frame number).".into())
        })
    };
    Ok(match (a.action, &a.restart) {
        (Some(_), Some(_)) => {
            return Err(ToolError::Argument(
                "Give `restart` or `action`, not both.".into(),
            ))
        }
        (None, None) => {
            return Err(ToolError::Argument(
                "Give `restart` (a number or name) or `action` (abort, continue, return, \
                 restart, step, next, out)."
                    .into(),
            ))
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
                return Err(ToolError::Argument(
                    "`return` needs the value as a form in `values`.".into(),
                ));
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

pub(super) async fn debugger_restart(a: RestartArgs, ctx: ToolContext) -> ToolOutput {
    let timeout = match crate::tools::lisp_call::timeout_arg(a.timeout_seconds, 30.0) {
        Ok(t) => t,
        Err(e) => return ToolOutput::error(e),
    };
    let (p, ctx) = match find_in_its_image(&ctx, a.debugger) {
        Ok(found) => found,
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
    let image = ctx.image();
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
