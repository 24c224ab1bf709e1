//! `evaluate-lisp`: evaluate code in the session's image.
//!
//! The Lisp side (`lisp/eval.lisp`, `cl-mcp:eval-request`) reads the forms
//! one at a time, captures output, collects warnings and turns errors into
//! data; this module builds the request, enforces the timeout and
//! cancellation (by interrupting the image, which unwinds the evaluation and
//! keeps global state), reports progress, and renders the result as the
//! seed-000 text plus `structuredContent`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use lisp_syntax::data::Value;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::debug;
use super::lisp_call::{
    self, helper_form, plist_bool, plist_i64, plist_list, plist_str, plist_strings,
};
use super::output::DEFAULT_MAX_OUTPUT;
use super::{tool, Annotations, ToolContext, ToolDef, ToolGroup, ToolOutput};
use crate::sync::MutexExt;

/// Largest `maxOutputLength` honoured. Each stream, the values together and
/// the warnings are capped at it; independently the image fits the whole
/// reply into 8 MiB of UTF-8 (`*reply-byte-budget*`), far below Swank's
/// 16 MiB message limit, so even 4-byte characters at this cap are safe.
const MAX_OUTPUT_CEILING: usize = 1_000_000;
/// How often the status line (latest output line) is refreshed.
const STATUS_POLL: Duration = Duration::from_millis(500);
/// How long an interrupted evaluation may take to unwind before the call
/// gives up on it.
const UNWIND_GRACE: Duration = Duration::from_secs(5);

#[derive(Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct EvalArgs {
    /// Forms, evaluated in order.
    code: String,
    /// For this call (default: the current one).
    package: Option<String>,
    print_level: Option<u32>,
    print_length: Option<u32>,
    print_readably: Option<bool>,
    /// Default 30.
    timeout_seconds: Option<f64>,
    /// Per output part (default 50000).
    max_output_length: Option<usize>,
    /// Bind `*read-eval*` to false.
    safe_read: Option<bool>,
    /// For `*standard-input*`.
    stdin: Option<String>,
    debug: Option<bool>,
}

/// One frame of a backtrace.
#[derive(Serialize, JsonSchema, Debug, Clone, PartialEq)]
pub struct Frame {
    pub index: i64,
    pub frame: String,
}

/// A condition signalled by the evaluated code.
#[derive(Serialize, JsonSchema, Debug, Clone, PartialEq)]
pub struct LispError {
    /// The condition's type, e.g. `DIVISION-BY-ZERO`.
    #[serde(rename = "type")]
    pub kind: String,
    /// The condition's report.
    pub message: String,
    /// Restarts the code established, `NAME: description`.
    pub restarts: Vec<String>,
    /// User frames, innermost first.
    pub backtrace: Vec<Frame>,
}

/// `structuredContent` of `evaluate-lisp`.
#[derive(Serialize, JsonSchema, Debug, Clone, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
#[schemars(transform = eval_outcomes)]
pub struct EvalOutput {
    /// Printed values of the last form.
    pub values: Vec<String>,
    pub stdout: String,
    pub stderr: String,
    /// Compiler and runtime warnings, `TYPE: message`.
    pub warnings: Vec<String>,
    /// `*package*` after the call.
    pub package: String,
    pub elapsed_ms: i64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<LispError>,
    /// True when the evaluation was interrupted (timeout, cancellation,
    /// `image-interrupt`). Present only then.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub interrupted: bool,
    /// Where an interrupted evaluation was (top frames). Present only then.
    #[serde(default, skip_serializing_if = "Vec::is_empty", rename = "where")]
    pub where_: Vec<String>,
    /// The debugger the evaluation waits in (`debug: true`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub debugger: Option<super::debug::DebuggerInfo>,
    /// How long the call waited for the image's evaluation turn before it
    /// ran (evaluations of an image run one at a time). Present only when
    /// it waited more than a moment.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub queued_ms: Option<i64>,
}

/// The outcomes of an evaluation as the variants of [`EvalOutput`]'s
/// schema (exactly one holds): a value, an error, an interruption (timeout,
/// cancellation, `image-interrupt`; it may come with the error the code
/// was signalling), or a debugger waiting (`debug: true`). Each names only
/// the fields that tell the outcomes apart; every other field is allowed
/// in all of them. Only keywords draft-07 validators read the same way
/// (the TypeScript SDK's Ajv) are used; an absent field is `{"not": {}}`,
/// not a bare `false`, which the Inspector's schema lint refuses.
fn eval_outcomes(schema: &mut schemars::Schema) {
    let absent = |fields: &[&str]| {
        fields
            .iter()
            .map(|f| (f.to_string(), serde_json::json!({ "not": {} })))
            .collect::<serde_json::Map<_, _>>()
    };
    let value =
        serde_json::json!({ "properties": absent(&["error", "interrupted", "where", "debugger"]) });
    let error = serde_json::json!({
        "required": ["error"],
        "properties": absent(&["interrupted", "where", "debugger"]),
    });
    let mut interrupted_only = absent(&["debugger"]);
    interrupted_only.insert("interrupted".into(), serde_json::json!({ "const": true }));
    let interrupted = serde_json::json!({
        "required": ["interrupted"],
        "properties": interrupted_only,
    });
    let debugger = serde_json::json!({
        "required": ["debugger"],
        "properties": absent(&["error", "interrupted", "where"]),
    });
    schema.insert(
        "oneOf".into(),
        serde_json::json!([value, error, interrupted, debugger]),
    );
}

impl EvalOutput {
    /// Reads the plist `cl-mcp:eval-request` returns.
    pub fn from_plist(v: &Value) -> EvalOutput {
        let error = plist_list(v, "error").and_then(|_| {
            let e = v.plist_get("error")?;
            Some(LispError {
                kind: plist_str(e, "type").unwrap_or_default(),
                message: plist_str(e, "message").unwrap_or_default(),
                restarts: plist_strings(e, "restarts"),
                backtrace: plist_list(e, "backtrace")
                    .unwrap_or(&[])
                    .iter()
                    .filter_map(|f| {
                        let f = f.as_list()?;
                        Some(Frame {
                            index: f.first()?.as_i64()?,
                            frame: f.get(1)?.as_str()?.to_string(),
                        })
                    })
                    .collect(),
            })
        });
        EvalOutput {
            values: plist_strings(v, "values"),
            stdout: plist_str(v, "stdout").unwrap_or_default(),
            stderr: plist_str(v, "stderr").unwrap_or_default(),
            warnings: plist_strings(v, "warnings"),
            package: plist_str(v, "package").unwrap_or_default(),
            elapsed_ms: plist_i64(v, "elapsed-ms").unwrap_or(0),
            error,
            interrupted: plist_bool(v, "interrupted"),
            where_: plist_strings(v, "where"),
            debugger: None,
            queued_ms: None,
        }
    }
}

/// Why an evaluation was interrupted, for the text.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum InterruptCause {
    Timeout(f64),
    Cancelled,
    /// `image-interrupt` (or another caller) interrupted it.
    External,
}

/// The seed-000 text: stdout, `[stderr]` lines, `[WARNING]` lines, then
/// `=> value` lines, or the `[ERROR]`/`[TIMEOUT]` report.
pub fn render_text(out: &EvalOutput, cause: Option<InterruptCause>) -> String {
    let mut text = String::new();
    let section = |text: &mut String, s: &str| {
        if !text.is_empty() && !text.ends_with('\n') {
            text.push('\n');
        }
        text.push_str(s);
    };
    if !out.stdout.is_empty() {
        section(&mut text, &out.stdout);
    }
    for line in out.stderr.lines() {
        section(&mut text, &format!("[stderr] {line}"));
    }
    for w in &out.warnings {
        section(&mut text, &format!("[WARNING] {w}"));
    }
    if out.interrupted {
        let head = match cause {
            Some(InterruptCause::Timeout(s)) => format!(
                "[TIMEOUT] Evaluation did not finish within {} and was interrupted.",
                seconds_text(s)
            ),
            Some(InterruptCause::Cancelled) => {
                "[CANCELLED] The request was cancelled; the evaluation was interrupted.".to_string()
            }
            _ => "[INTERRUPTED] The evaluation was interrupted.".to_string(),
        };
        section(&mut text, &head);
        if !out.where_.is_empty() {
            text.push_str("\nIt was in:");
            for f in &out.where_ {
                text.push_str("\n  ");
                text.push_str(f);
            }
        }
        text.push_str(
            "\nThe image is still running and its state (definitions, global variables, \
             loaded systems) is intact.",
        );
        return text;
    }
    if let Some(e) = &out.error {
        section(&mut text, &format!("[ERROR] {}\n{}", e.kind, e.message));
        if !e.backtrace.is_empty() {
            text.push_str("\n\n[Backtrace]");
            for f in &e.backtrace {
                text.push_str(&format!("\n{}: {}", f.index, f.frame));
            }
        }
        if !e.restarts.is_empty() {
            text.push_str("\n\n[Restarts]");
            for (i, r) in e.restarts.iter().enumerate() {
                text.push_str(&format!("\n{i}: {r}"));
            }
        }
        return text;
    }
    if out.values.is_empty() {
        section(&mut text, "=> ; No values");
    }
    for v in &out.values {
        section(&mut text, &format!("=> {v}"));
    }
    text
}

fn trim_float(s: f64) -> String {
    if s.fract() == 0.0 {
        format!("{}", s as i64)
    } else {
        format!("{s}")
    }
}

/// "1 second", "2.5 seconds".
pub(crate) fn seconds_text(s: f64) -> String {
    let n = trim_float(s);
    if n == "1" {
        "1 second".into()
    } else {
        format!("{n} seconds")
    }
}

pub(crate) static NEXT_EVAL_ID: AtomicU64 = AtomicU64::new(1);

/// The `cl-mcp:eval-request` form for these arguments.
fn request_form(a: &EvalArgs, id: u64, session: &str, max_output: usize) -> String {
    let mut keys: Vec<(&str, Value)> = vec![
        ("session", Value::string(session)),
        ("id", Value::Integer(id as i64)),
        ("max-output", Value::Integer(max_output as i64)),
    ];
    if let Some(p) = &a.package {
        keys.push(("package", Value::string(p.clone())));
    }
    if let Some(n) = a.print_level {
        keys.push(("print-level", Value::Integer(n.into())));
    }
    if let Some(n) = a.print_length {
        keys.push(("print-length", Value::Integer(n.into())));
    }
    if a.print_readably == Some(true) {
        keys.push(("print-readably", Value::t()));
    }
    if a.safe_read == Some(true) {
        keys.push(("safe-read", Value::t()));
    }
    if let Some(s) = &a.stdin {
        keys.push(("stdin", Value::string(s.clone())));
    }
    if a.debug == Some(true) {
        keys.push(("debug", Value::t()));
    }
    helper_form("eval-request", vec![Value::string(a.code.clone())], keys)
}

async fn evaluate(a: EvalArgs, ctx: ToolContext) -> ToolOutput {
    let started = std::time::Instant::now();
    let timeout = a.timeout_seconds.unwrap_or(30.0);
    if !(timeout > 0.0 && timeout.is_finite()) {
        return ToolOutput::error(
            "timeoutSeconds must be a positive number of seconds (default 30).",
        );
    }
    if let Err(e) = lisp_call::check_read_depth(&a.code, "`code`") {
        return ToolOutput::error(e);
    }
    let max_output = a
        .max_output_length
        .unwrap_or(DEFAULT_MAX_OUTPUT)
        .clamp(1, MAX_OUTPUT_CEILING);
    let id = NEXT_EVAL_ID.fetch_add(1, Ordering::Relaxed);
    let form = request_form(&a, id, &lisp_call::session_key(&ctx), max_output);
    let timeout_d = Duration::from_secs_f64(timeout.min(1.0e7));
    if a.debug == Some(true) {
        return evaluate_debuggable(&ctx, id, form, &a.code, timeout_d).await;
    }
    let run = lisp_call::run_evaluation(
        &ctx,
        id,
        form,
        &a.code,
        timeout_d,
        STATUS_POLL,
        UNWIND_GRACE,
    )
    .await;
    let (value, cause, queued) = match run {
        Ok(r) => (r.value, r.cause, r.queued),
        Err(e) => return ToolOutput::error(e),
    };
    let mut out = EvalOutput::from_plist(&value);
    out.queued_ms = queued.as_ref().map(|q| q.millis());
    // Only in the text: advice for the model, not data about the outcome.
    let repair_note = if out.error.is_some() {
        // What the timeout left, but at least a second: the call's clock
        // also ran through a cold start (minutes on ABCL), which left a
        // short code's note no time at all.
        let left = timeout_d
            .saturating_sub(started.elapsed())
            .max(REPAIR_NOTE_FLOOR);
        bounded_repair_note(&a.code, left).await
    } else {
        None
    };
    let cause = cause.map(|c| match c {
        lisp_call::StopCause::Timeout => InterruptCause::Timeout(timeout),
        lisp_call::StopCause::Cancelled => InterruptCause::Cancelled,
    });
    let cause = if out.interrupted && cause.is_none() {
        Some(InterruptCause::External)
    } else {
        cause
    };
    let mut text = render_text(&out, cause);
    if let Some(note) = repair_note {
        text.push_str("\n\n");
        text.push_str(&note);
    }
    if let Some(hint) = sandbox_hint(&ctx, &out) {
        text.push_str("\n\n");
        text.push_str(&hint);
    }
    if let Some(q) = &queued {
        text.push('\n');
        text.push_str(&q.note());
    }
    let is_error = out.error.is_some() || out.interrupted;
    let structured = serde_json::to_value(&out).unwrap_or_default();
    ToolOutput::structured(text, structured).with_error(is_error)
}

/// [`repair_note`] off the async workers, within `left` (what the
/// evaluation's timeout leaves): past it, a note saying it was skipped
/// (the repair goes on to its end on the blocking pool, holding nothing:
/// it is linear in the code's length, so seconds for megabytes).
async fn bounded_repair_note(code: &str, left: Duration) -> Option<String> {
    let owned = code.to_string();
    let work = tokio::task::spawn_blocking(move || repair_note(&owned));
    match tokio::time::timeout(left, work).await {
        Ok(note) => note.ok().flatten(),
        Err(_) => Some(format!(
            "[REPAIR] Not shown: placing the closers of this code ({} bytes) would take longer \
             than the {:.1} s the evaluation's timeout left. Check it with lisp-check-parens, or \
             write it to a file with fs-write-file, which repairs it.",
            code.len(),
            left.as_secs_f64()
        )),
    }
}

/// The least time a `[REPAIR]` note is given, whatever the timeout left
/// (the repair is linear: this is megabytes).
const REPAIR_NOTE_FLOOR: Duration = Duration::from_secs(1);

/// Longest repaired code a `[REPAIR]` note repeats; longer code is
/// described by its changes only.
const MAX_NOTE_ECHO: usize = 16 << 10;

/// When `code` failed and does not read for its closing parentheses: the
/// `[REPAIR]` note showing the code with its closers placed by indentation
/// (or why they cannot be). The repaired code is never run: the model sends
/// it again if it is what it meant.
fn repair_note(code: &str) -> Option<String> {
    match super::parens::repair(code) {
        Ok(None) => None,
        Ok(Some(r)) => {
            // Only extra closers after the last form: everything ran.
            let only_trailing_extra = code
                .trim_end()
                .strip_prefix(r.text.trim_end())
                .is_some_and(|rest| rest.chars().all(|c| c == ')' || c.is_whitespace()));
            let note = if only_trailing_extra {
                format!(
                    "[REPAIR] Only the extra \")\" at the end did not read ({}); the forms \
                     before it ran.",
                    r.changes_phrase()
                )
            } else if r.text.len() > MAX_NOTE_ECHO {
                format!(
                    "[REPAIR] The code does not read: by its indentation it is missing or has \
                     extra closing parentheses ({}):\n{}Nothing of the repaired code ran; the \
                     repaired code ({} bytes) is too long to repeat here: make these changes \
                     and send it again.",
                    r.changes_phrase(),
                    r.diff,
                    r.text.len()
                )
            } else {
                format!(
                    "[REPAIR] The code does not read: by its indentation it is missing or has \
                     extra closing parentheses ({}):\n{}Nothing of the repaired code ran; if \
                     this is what you meant, send it again:\n{}",
                    r.changes_phrase(),
                    r.diff,
                    r.text
                )
            };
            Some(note)
        }
        Err(e) => Some(format!("[REPAIR] The code does not read, and {e}")),
    }
}

/// The `[SANDBOX]` line when the error (or the stderr of a child process)
/// looks like the image's sandbox refusing an operation.
pub fn sandbox_hint(ctx: &ToolContext, out: &EvalOutput) -> Option<String> {
    let report = ctx.image().info().sandbox?;
    let mut seen = out.stderr.clone();
    if let Some(e) = &out.error {
        seen.push('\n');
        seen.push_str(&e.kind);
        seen.push('\n');
        seen.push_str(&e.message);
    }
    crate::image::sandbox::refusal_hint(&report, &seen)
}

/// `debug: true`: runs the evaluation so that a debugger entry waits, and
/// returns at once when it does (releasing the session's turn), else the
/// evaluation's outcome.
async fn evaluate_debuggable(
    ctx: &ToolContext,
    id: u64,
    form: String,
    code: &str,
    timeout: Duration,
) -> ToolOutput {
    let slot = ctx.eval_state();
    let (turn, left) = match lisp_call::take_turn(ctx, id, code, timeout).await {
        Ok(t) => t,
        Err(e) => return ToolOutput::error(e),
    };
    *slot.running.guard() = Some(id);
    let p = debug::start(ctx, id, form, code);
    let (waited, cause) = debug::wait(ctx, &p, 0, left).await;
    *slot.running.guard() = None;
    let queued = turn.queued.clone();
    drop(turn);
    let mut out = debug::outcome_output(ctx, &p, waited, cause).await;
    if let Some(q) = queued {
        out.text.push('\n');
        out.text.push_str(&q.note());
        if let Some(s) = out.structured.as_mut().and_then(|s| s.as_object_mut()) {
            s.insert("queuedMs".into(), serde_json::json!(q.millis()));
        }
    }
    out
}

/// The tools of the `eval` group.
pub fn tools() -> Vec<ToolDef> {
    vec![tool(
        "evaluate-lisp",
        ToolGroup::Eval,
        "Evaluate Common Lisp",
        "Evaluate forms in the persistent image: output, warnings, `=> value` lines; on error \
         the type, message, backtrace, restarts (`debug: true`: wait in the debugger). A timeout \
         keeps all state.",
        Annotations::MUTATING,
        |a: EvalArgs, ctx: ToolContext| async move {
            let c = ctx.clone();
            lisp_call::finish(&c, evaluate(a, ctx).await)
        },
    )
    .with_output_schema::<EvalOutput>()
    .with_task_support()]
}

#[cfg(test)]
mod tests {

    #[test]
    fn code_that_does_not_read_gets_its_repair_shown_not_run() {
        let note = super::repair_note("(defun f (x)\n  (g x)\n(f 1)").unwrap();
        assert!(
            note.contains("added \")\" at line 2, column 8")
                && note.ends_with("send it again:\n(defun f (x)\n  (g x))\n(f 1)"),
            "{note}"
        );
        let note = super::repair_note("(defvar *a* 1) (+ 1 2))").unwrap();
        assert!(note.contains("the forms before it ran"), "{note}");
        assert!(super::repair_note("(car 5)").is_none());
    }
    use super::*;
    use lisp_syntax::data;

    fn parse(text: &str) -> EvalOutput {
        EvalOutput::from_plist(&data::read(text).unwrap())
    }

    #[test]
    fn values_render_one_per_line() {
        let out = parse(
            r#"(:values ("1" "2") :stdout "hi" :stderr "oops
two" :warnings ("STYLE-WARNING: x") :package "CL-USER" :elapsed-ms 3 :error nil)"#,
        );
        assert_eq!(
            render_text(&out, None),
            "hi\n[stderr] oops\n[stderr] two\n[WARNING] STYLE-WARNING: x\n=> 1\n=> 2"
        );
        assert_eq!(out.package, "CL-USER");
        assert_eq!(out.elapsed_ms, 3);
    }

    #[test]
    fn no_values() {
        let out = parse(
            r#"(:values nil :stdout "" :stderr "" :warnings nil :package "P" :elapsed-ms 0 :error nil)"#,
        );
        assert_eq!(render_text(&out, None), "=> ; No values");
    }

    #[test]
    fn error_has_backtrace_and_restarts() {
        let out = parse(
            r#"(:values nil :stdout "" :stderr "" :warnings nil :package "CL-USER" :elapsed-ms 0
               :error (:type "DIVISION-BY-ZERO" :message "arithmetic error" :restarts ("CONTINUE: go")
                       :backtrace ((0 "(/ 1 0)") (1 "(F)"))))"#,
        );
        assert_eq!(
            render_text(&out, None),
            "[ERROR] DIVISION-BY-ZERO\narithmetic error\n\n[Backtrace]\n0: (/ 1 0)\n1: (F)\n\n[Restarts]\n0: CONTINUE: go"
        );
        let json = serde_json::to_value(&out).unwrap();
        assert_eq!(json["error"]["type"], "DIVISION-BY-ZERO");
        assert_eq!(json["error"]["backtrace"][1]["frame"], "(F)");
        assert!(json.get("interrupted").is_none());
    }

    #[test]
    fn timeout_says_where_and_that_state_is_intact() {
        let out = parse(
            r#"(:values nil :stdout "step" :stderr "" :warnings nil :package "CL-USER" :elapsed-ms 0
               :error nil :interrupted t :where ("(SLEEP 10)"))"#,
        );
        let text = render_text(&out, Some(InterruptCause::Timeout(2.0)));
        assert!(
            text.starts_with("step\n[TIMEOUT] Evaluation did not finish within 2 seconds"),
            "{text}"
        );
        assert!(text.contains("It was in:\n  (SLEEP 10)"), "{text}");
        assert!(text.contains("state"), "{text}");
    }

    #[test]
    fn request_form_escapes_code() {
        let a = EvalArgs {
            code: "(print \"a\\b\")".into(),
            package: Some("foo".into()),
            print_level: Some(2),
            print_length: None,
            print_readably: None,
            timeout_seconds: None,
            max_output_length: None,
            safe_read: Some(true),
            stdin: None,
            debug: None,
        };
        let f = request_form(&a, 7, "s1", 100);
        assert!(
            f.starts_with("(CL-MCP::EVAL-REQUEST \"(print \\\"a\\\\b\\\")\""),
            "{f}"
        );
        assert!(f.contains(":SAFE-READ T"), "{f}");
        assert!(f.contains(":PACKAGE \"foo\""), "{f}");
        assert!(f.contains(":ID 7"), "{f}");
    }
}
