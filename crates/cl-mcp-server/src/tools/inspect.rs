//! The `debug` tools that look into the live image: `inspect-object`,
//! `trace-functions`, `profile-code` and `list-threads`. The Lisp halves are
//! in `lisp/inspector.lisp`, `trace.lisp`, `profiler.lisp`, `threads.lisp` (SBCL specifics in `lisp/impl-sbcl.lisp`).
//!
//! Tools that run user code (`inspect-object`, `profile-code`) run it as an
//! evaluation of the session (its turn, timeout, cancellation, interrupt);
//! `trace-functions` and `list-threads` run on fresh Swank threads, so they
//! work while an evaluation runs (trace records of a running evaluation,
//! the backtrace of a busy thread).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use lisp_syntax::data::Value;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::code::{render_build_error, render_interruption, Location};
use super::flame_graph::{self, FlameGraphError};
use super::lisp_call::{
    self as image, helper_form, plist_bool, plist_i64, plist_items, plist_list, plist_str,
    plist_strings,
};
use super::output::DEFAULT_MAX_OUTPUT;
use super::turn::Queued;
use super::{tool, Annotations, ToolContext, ToolDef, ToolError, ToolGroup, ToolOutput};

/// Evaluation ids of these tools (a range of their own, apart from
/// `evaluate-lisp`'s and the builds').
static NEXT_ID: AtomicU64 = AtomicU64::new(1 << 41);
const STATUS_POLL: Duration = Duration::from_millis(500);
const UNWIND_GRACE: Duration = Duration::from_secs(5);

/// Runs a helper that evaluates user code as one of the session's
/// evaluations; the helper form gets `:id` and `:session`. `what` is what
/// calls queued behind it are told it runs (its code). Also returns how
/// long it waited for the evaluation turn, when it waited.
async fn run_user_code(
    ctx: &ToolContext,
    name: &str,
    what: &str,
    args: Vec<Value>,
    mut keys: Vec<(&str, Value)>,
    timeout: Duration,
) -> Result<(Value, Option<Queued>), ToolError> {
    let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
    keys.push(("id", Value::Integer(id as i64)));
    keys.push(("session", Value::string(image::session_key(ctx))));
    keys.push(("max-output", Value::Integer(DEFAULT_MAX_OUTPUT as i64)));
    let form = helper_form(name, args, keys);
    let run =
        image::run_evaluation(ctx, id, form, what, timeout, STATUS_POLL, UNWIND_GRACE).await?;
    let mut v = run.value;
    if run.cause == Some(image::StopCause::Timeout) {
        if let Value::List(items, None) = &mut v {
            items.push(Value::keyword("timed-out"));
            items.push(Value::t());
        }
    }
    Ok((v, run.queued))
}

/// `output` with the line saying how long the call waited for the
/// evaluation turn, when it waited. (Only `evaluate-lisp` also has it as
/// `queuedMs`: `tools/list` has no room for the field in these schemas.)
fn with_queue_note(mut output: ToolOutput, queued: &Option<Queued>) -> ToolOutput {
    if let Some(q) = queued {
        output.text.push('\n');
        output.text.push_str(&q.note());
    }
    output
}

/// The failure of a helper that ran user code, as the tool's error: a
/// usage error (`(:error "message")`), the code's own error, or its
/// interruption. `None` when it succeeded.
fn user_code_failure(v: &Value, what: &str, timeout: Duration) -> Option<ToolOutput> {
    if let Some(message) = plist_str(v, "error") {
        return Some(ToolOutput::error(message));
    }
    let mut text = render_build_error(v).or_else(|| render_interruption(v, what, timeout))?;
    for (key, label) in [("stdout", "[stdout]"), ("stderr", "[stderr]")] {
        if let Some(s) = plist_str(v, key).filter(|s| !s.trim().is_empty()) {
            text.push_str(&format!("\n\n{label}\n{}", s.trim_end()));
        }
    }
    Some(ToolOutput::error(text))
}

/// The form `(CL:LIST "a" ...)`: helper arguments are evaluated, so a
/// list of strings is passed as a call that builds it.
fn string_list(items: &Option<Vec<String>>) -> Value {
    let items = items.iter().flatten().map(|s| Value::string(s.clone()));
    Value::list(std::iter::once(Value::symbol_named(Some("CL"), "LIST")).chain(items))
}

fn package_keys(package: &Option<String>) -> Vec<(&'static str, Value)> {
    package
        .iter()
        .map(|p| ("package", Value::string(p.clone())))
        .collect()
}

// ---------------------------------------------------------------------------
// inspect-object

#[derive(Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct InspectArgs {
    /// The last value is inspected.
    code: Option<String>,
    /// Of a pending debugger.
    frame: Option<u32>,
    /// Default: newest.
    debugger: Option<u64>,
    part: Option<u32>,
    back: Option<bool>,
    start: Option<u32>,
    /// Default 50.
    count: Option<u32>,
    package: Option<String>,
    /// Default 30.
    timeout_seconds: Option<f64>,
}

#[derive(Serialize, JsonSchema)]
struct Attribute {
    name: String,
    value: String,
}

#[derive(Serialize, JsonSchema)]
struct Part {
    index: i64,
    label: String,
    value: String,
    /// Has parts of its own (`part` drills in).
    drillable: bool,
}

#[derive(Serialize, JsonSchema)]
struct InspectOutput {
    /// The object, printed.
    object: String,
    #[serde(rename = "type")]
    type_name: String,
    /// instance, structure, condition, hash-table, list, cons, vector,
    /// string, array, function, generic-function, symbol, package, or the
    /// type of anything else.
    kind: String,
    /// How it was reached: the code, then each part's label.
    path: Vec<String>,
    attributes: Vec<Attribute>,
    /// A function's source location.
    #[serde(skip_serializing_if = "Option::is_none")]
    location: Option<Location>,
    start: i64,
    /// Number of parts.
    total: i64,
    parts: Vec<Part>,
}

fn inspect_output(v: &Value, root: &std::path::Path) -> InspectOutput {
    InspectOutput {
        object: plist_str(v, "object").unwrap_or_default(),
        type_name: plist_str(v, "type").unwrap_or_default(),
        kind: plist_str(v, "kind").unwrap_or_default(),
        path: plist_strings(v, "path"),
        attributes: plist_items(v, "attributes", |a| Attribute {
            name: plist_str(a, "name").unwrap_or_default(),
            value: plist_str(a, "value").unwrap_or_default(),
        }),
        location: v
            .plist_get("location")
            .filter(|l| !l.is_nil())
            .map(|l| Location::from_plist(l, root)),
        start: plist_i64(v, "start").unwrap_or(0),
        total: plist_i64(v, "total").unwrap_or(0),
        parts: plist_items(v, "parts", |p| Part {
            index: plist_i64(p, "index").unwrap_or(0),
            label: plist_str(p, "label").unwrap_or_default(),
            value: plist_str(p, "value").unwrap_or_default(),
            drillable: plist_bool(p, "drillable"),
        }),
    }
}

fn render_inspection(o: &InspectOutput) -> String {
    let mut text = format!("{} ({}, {})", o.object, o.kind, o.type_name);
    if o.path.len() > 1 {
        text.push_str(&format!("\nPath: {}", o.path.join(" > ")));
    }
    for a in &o.attributes {
        text.push_str(&format!("\n{}: {}", a.name, a.value));
    }
    if let Some(l) = &o.location {
        text.push_str(&format!("\nsource: {}", l.prefix()));
    }
    if o.total == 0 {
        text.push_str("\nNo parts.");
    } else {
        let end = o.start + o.parts.len() as i64;
        text.push_str(&format!(
            "\nParts {}-{} of {}:",
            o.start,
            end.max(o.start + 1) - 1,
            o.total
        ));
        for p in &o.parts {
            let mark = if p.drillable { "  >" } else { "" };
            text.push_str(&format!(
                "\n  [{}] {} = {}{mark}",
                p.index, p.label, p.value
            ));
        }
        if end < o.total {
            text.push_str(&format!("\n({} more: start {end})", o.total - end));
        }
    }
    if o.path.len() > 1 {
        text.push_str("\n(`part` N drills in, `back` returns)");
    } else if o.parts.iter().any(|p| p.drillable) {
        text.push_str("\n(`part` N drills in)");
    }
    text
}

async fn inspect_object(a: InspectArgs, ctx: ToolContext) -> ToolOutput {
    let timeout = match image::timeout_arg(a.timeout_seconds, 30.0) {
        Ok(t) => t,
        Err(e) => return ToolOutput::error(e),
    };
    let given = [a.code.is_some(), a.part.is_some(), a.back == Some(true)];
    if given.iter().filter(|g| **g).count() > 1 {
        return ToolOutput::error("Give at most one of `code`, `part` and `back`.");
    }
    let mut keys = package_keys(&a.package);
    if let Some(code) = &a.code {
        if let Err(e) = image::check_read_depth(code, "`code`") {
            return ToolOutput::error(e);
        }
        keys.push(("code", Value::string(code.clone())));
    }
    if let Some(p) = a.part {
        keys.push(("part", Value::Integer(p.into())));
    }
    if a.back == Some(true) {
        keys.push(("back", Value::t()));
    }
    keys.push(("start", Value::Integer(a.start.unwrap_or(0).into())));
    keys.push(("count", Value::Integer(a.count.unwrap_or(50).into())));
    if let Some(frame) = a.frame {
        // A frame's locals: evaluated on the debugger's own thread, inside
        // its dynamic extent; the inspection then goes on as usual.
        let Some(code) = &a.code else {
            return ToolOutput::error(
                "`frame` needs `code`: the forms (e.g. a local's name) to evaluate in that frame.",
            );
        };
        let (p, ctx, thread) = match super::debug::debugger_thread(&ctx, a.debugger) {
            Ok(t) => t,
            Err(e) => return ToolOutput::error(e),
        };
        keys.retain(|(k, _)| *k != "code");
        keys.push(("session", Value::string(image::session_key(&ctx))));
        let form = helper_form(
            "debugger-inspect-in-frame",
            vec![Value::Integer(frame.into()), Value::string(code.clone())],
            keys,
        );
        // Stopped at the timeout or on cancel (a print-object that never
        // returns, say), leaving the debugger where it was.
        use super::debug::{run_in_frame, FrameRun};
        let v = match run_in_frame(&ctx, &p, thread, &form, timeout).await {
            Ok(FrameRun::Value(v)) => v,
            Ok(FrameRun::Nested) => {
                return ToolOutput::error(
                    "The code entered a nested debugger level (a BREAK, say); \
                     debugger-backtrace shows it.",
                )
            }
            Ok(FrameRun::Stopped(text)) => return ToolOutput::error(text),
            Err(e) => return ToolOutput::error(e),
        };
        if let Some(e) = plist_str(&v, "error") {
            return ToolOutput::error(e);
        }
        let out = inspect_output(&v, &ctx.session.project_root());
        return ToolOutput::structured(
            render_inspection(&out),
            serde_json::to_value(out).unwrap_or_default(),
        );
    }
    let what = match (&a.code, a.part) {
        (Some(code), _) => code.clone(),
        (None, Some(p)) => format!("inspect-object part {p}"),
        (None, None) => "inspect-object".to_string(),
    };
    let run = run_user_code(&ctx, "inspect-request", &what, vec![], keys, timeout).await;
    let (v, queued) = match run {
        Ok(r) => r,
        Err(e) => return ToolOutput::error(e),
    };
    // Interrupted while showing the object: in its PRINT-OBJECT methods.
    let what = if plist_bool(&v, "showing") {
        "Showing the inspected object (its print-object methods)"
    } else {
        "The inspected code"
    };
    if let Some(failure) = user_code_failure(&v, what, timeout) {
        return with_queue_note(failure, &queued);
    }
    let out = inspect_output(&v, &ctx.session.project_root());
    let text = render_inspection(&out);
    with_queue_note(
        ToolOutput::structured(text, serde_json::to_value(out).unwrap_or_default()),
        &queued,
    )
}

// ---------------------------------------------------------------------------
// trace-functions

#[derive(Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct TraceArgs {
    trace: Option<Vec<String>>,
    untrace: Option<Vec<String>>,
    /// Everything traced here.
    untrace_all: Option<bool>,
    package: Option<String>,
    /// Default 200, at most 500.
    limit: Option<u32>,
    /// Keep the returned records.
    keep: Option<bool>,
}

#[derive(Serialize, JsonSchema)]
struct TraceChange {
    name: String,
    /// `trace` or `untrace`.
    action: String,
    ok: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    message: Option<String>,
}

#[derive(Serialize, JsonSchema)]
struct TraceRecord {
    /// Nesting among traced calls in its thread (0 = outermost).
    depth: i64,
    function: String,
    thread: String,
    arguments: Vec<String>,
    /// `returned`, `non-local-exit` or `running`.
    outcome: String,
    values: Vec<String>,
    /// Microseconds from the call to its return or exit (in the image's
    /// clock: SBCL's counts microseconds, some Lisps' milliseconds).
    #[serde(rename = "elapsedUs", skip_serializing_if = "Option::is_none")]
    elapsed_us: Option<i64>,
}

#[derive(Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
struct TraceOutput {
    /// What is traced now.
    traced: Vec<String>,
    changes: Vec<TraceChange>,
    /// Calls since the records were last taken, oldest first.
    records: Vec<TraceRecord>,
    /// Records not returned (over `limit`).
    more: i64,
    /// Calls not recorded (the store was full).
    dropped: i64,
}

fn trace_output(v: &Value) -> TraceOutput {
    TraceOutput {
        traced: plist_strings(v, "traced"),
        changes: plist_items(v, "changes", |c| TraceChange {
            name: plist_str(c, "name").unwrap_or_default(),
            action: plist_str(c, "action").unwrap_or_default(),
            ok: plist_bool(c, "ok"),
            message: plist_str(c, "message"),
        }),
        records: plist_items(v, "records", |r| TraceRecord {
            depth: plist_i64(r, "depth").unwrap_or(0),
            function: plist_str(r, "name").unwrap_or_default(),
            thread: plist_str(r, "thread").unwrap_or_default(),
            arguments: plist_strings(r, "arguments"),
            outcome: plist_str(r, "outcome").unwrap_or_default(),
            values: plist_strings(r, "values"),
            elapsed_us: plist_i64(r, "elapsed-us"),
        }),
        more: plist_i64(v, "more").unwrap_or(0),
        dropped: plist_i64(v, "dropped").unwrap_or(0),
    }
}

fn render_trace(o: &TraceOutput) -> String {
    let mut lines = Vec::new();
    for c in &o.changes {
        lines.push(match (&c.ok, &c.message) {
            (true, None) => format!("{}d {}", c.action, c.name),
            (true, Some(m)) => format!("{}d {} ({m})", c.action, c.name),
            (false, m) => format!(
                "could not {} {}: {}",
                c.action,
                c.name,
                m.as_deref().unwrap_or("")
            ),
        });
    }
    lines.push(if o.traced.is_empty() {
        "Traced: nothing".to_string()
    } else {
        format!("Traced: {}", o.traced.join(", "))
    });
    if o.records.is_empty() && o.more > 0 {
        lines.push("No calls shown (`limit` 0).".into());
    } else if o.records.is_empty() {
        lines.push("No calls recorded.".into());
    } else {
        // Calls that nest show as a call tree (a call above the calls made
        // inside it, indented by depth), each thread's calls apart.
        let nests = o.records.iter().any(|r| r.depth > 0);
        let mut threads: Vec<(&str, Vec<&TraceRecord>)> = Vec::new();
        for r in &o.records {
            match threads.iter_mut().find(|(t, _)| *t == r.thread) {
                Some((_, calls)) => calls.push(r),
                None => threads.push((&r.thread, vec![r])),
            }
        }
        lines.push(if nests {
            format!("{} call(s), as a call tree:", o.records.len())
        } else {
            format!("{} call(s):", o.records.len())
        });
        for (thread, calls) in &threads {
            if threads.len() > 1 {
                lines.push(format!("  [thread {thread}]"));
            }
            for r in calls {
                lines.push(trace_line(r, nests));
            }
        }
    }
    if o.more > 0 {
        lines.push(format!(
            "[{} more records, the oldest first: call again to read them (each call takes \
             those it shows, unless `keep`)]",
            o.more
        ));
    }
    if o.dropped > 0 {
        lines.push(format!(
            "[{} calls not recorded: the record store was full]",
            o.dropped
        ));
    }
    lines.join("\n")
}

/// One call: in a tree, indented and numbered by its depth.
fn trace_line(r: &TraceRecord, tree: bool) -> String {
    let outcome = match r.outcome.as_str() {
        "returned" if r.values.is_empty() => " => ; No values".to_string(),
        "returned" => format!(" => {}", r.values.join(", ")),
        "non-local-exit" => " exited non-locally".to_string(),
        _ => " (still running)".to_string(),
    };
    let took = r
        .elapsed_us
        .map_or(String::new(), |us| format!("  ({})", microseconds_text(us)));
    let call = if r.arguments.is_empty() {
        format!("({}){outcome}{took}", r.function)
    } else {
        format!("({} {}){outcome}{took}", r.function, r.arguments.join(" "))
    };
    if tree {
        let indent = "  ".repeat(r.depth.clamp(0, 40) as usize + 1);
        format!("{indent}{}: {call}", r.depth)
    } else {
        format!("  {call}")
    }
}

/// A call's duration in words: `85 µs`, `12.3 ms`, `2.04 s`.
fn microseconds_text(us: i64) -> String {
    match us {
        ..1_000 => format!("{us} µs"),
        1_000..1_000_000 => format!("{:.1} ms", us as f64 / 1e3),
        _ => format!("{:.2} s", us as f64 / 1e6),
    }
}

async fn trace_functions(a: TraceArgs, ctx: ToolContext) -> ToolOutput {
    let names = a.trace.iter().chain(a.untrace.iter()).flatten();
    for n in names {
        if let Err(e) = image::check_read_depth(n, "a function name") {
            return ToolOutput::error(e);
        }
    }
    let mut keys = package_keys(&a.package);
    keys.push(("trace", string_list(&a.trace)));
    keys.push(("untrace", string_list(&a.untrace)));
    if a.untrace_all == Some(true) {
        keys.push(("untrace-all", Value::t()));
    }
    keys.push(("session", Value::string(image::session_key(&ctx))));
    keys.push(("limit", Value::Integer(a.limit.unwrap_or(200).into())));
    if a.keep == Some(true) {
        keys.push(("clear", Value::nil()));
    }
    let form = helper_form("trace-request", vec![], keys);
    let v = match image::call_lookup(&ctx, &form).await {
        Ok(v) => v,
        Err(e) => return ToolOutput::error(e),
    };
    let out = trace_output(&v);
    let failed = out.changes.iter().any(|c| !c.ok);
    ToolOutput::structured(
        render_trace(&out),
        serde_json::to_value(out).unwrap_or_default(),
    )
    .with_error(failed)
}

// ---------------------------------------------------------------------------
// profile-code

#[derive(Deserialize, JsonSchema, Clone, Copy, Default)]
#[serde(rename_all = "lowercase")]
enum ProfileMode {
    #[default]
    Cpu,
    Alloc,
}

#[derive(Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct ProfileArgs {
    code: String,
    /// Default `cpu`.
    mode: Option<ProfileMode>,
    /// Default 20.
    top: Option<u32>,
    count_calls: Option<Vec<String>>,
    package: Option<String>,
    /// Default 120.
    timeout_seconds: Option<f64>,
    flame_graph: Option<bool>,
}

#[derive(Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
struct ProfiledFunction {
    name: String,
    /// Samples in the function itself.
    #[serde(rename = "self")]
    self_samples: i64,
    /// Samples with the function on the stack.
    cumulative: i64,
    self_percent: f64,
    cumulative_percent: f64,
}

#[derive(Serialize, JsonSchema)]
struct CallCount {
    name: String,
    count: i64,
}

#[derive(Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
struct ProfileOutput {
    mode: String,
    samples: i64,
    /// Samples in no function the code called: in its own forms, which
    /// the profile does not attribute.
    unattributed: i64,
    /// How many rows each table of the text shows (`top`).
    #[serde(skip)]
    top: usize,
    /// The top `top` by self samples, then the rest of the top by cumulative.
    functions: Vec<ProfiledFunction>,
    calls: Vec<CallCount>,
    values: Vec<String>,
    stdout: String,
    elapsed_ms: i64,
    /// The flame graph's SVG resource (`resources/read`), when drawn.
    #[serde(skip_serializing_if = "Option::is_none")]
    flame_graph: Option<String>,
    /// The same flame graph as a PNG resource.
    #[serde(skip_serializing_if = "Option::is_none")]
    flame_graph_png: Option<String>,
    /// The sampled stacks, folded (`ROOT;...;LEAF COUNT`), for the drawing.
    #[serde(skip)]
    stacks: Vec<String>,
    /// The PNG's width and height, when drawn.
    #[serde(skip)]
    png_size: Option<(u32, u32)>,
}

/// The profiled functions, with their shares of `samples` in percent to
/// one decimal (a function's samples never count past all of them).
fn profiled_functions(v: &Value, key: &str, samples: i64) -> Vec<ProfiledFunction> {
    let percent = |n: i64| {
        if samples > 0 {
            (1000.0 * n.min(samples) as f64 / samples as f64).round() / 10.0
        } else {
            0.0
        }
    };
    plist_list(v, key)
        .unwrap_or(&[])
        .iter()
        .map(|f| {
            let self_samples = plist_i64(f, "self").unwrap_or(0);
            let cumulative = plist_i64(f, "cumulative").unwrap_or(0);
            ProfiledFunction {
                name: plist_str(f, "name").unwrap_or_default(),
                self_samples,
                cumulative,
                self_percent: percent(self_samples),
                cumulative_percent: percent(cumulative),
            }
        })
        .collect()
}

fn render_profile(o: &ProfileOutput) -> String {
    let mut text = format!(
        "{} profile: {} samples in {} ms",
        o.mode.to_uppercase(),
        o.samples,
        o.elapsed_ms
    );
    if o.samples == 0 {
        text.push_str(" (the code ran too briefly to be sampled: repeat it in a loop)");
    }
    if o.unattributed > 0 && (o.functions.is_empty() || o.unattributed * 5 >= o.samples) {
        text.push_str(&format!(
            "\n\n{} of the {} samples were in the code's own forms, which the profile does not \
             attribute to anything: wrap that work in a function (defun) and profile a call of it",
            o.unattributed, o.samples
        ));
    }
    let table = |title: &str, fs: Vec<&ProfiledFunction>| {
        let mut t = format!("\n\n{title}\n   self%   cumul%  function");
        for f in fs {
            t.push_str(&format!(
                "\n  {:6.1}  {:6.1}  {}",
                f.self_percent, f.cumulative_percent, f.name
            ));
        }
        t
    };
    if !o.functions.is_empty() {
        // Each table its own top `top`.
        let mut by_self: Vec<&ProfiledFunction> =
            o.functions.iter().filter(|f| f.self_samples > 0).collect();
        by_self.sort_by_key(|f| std::cmp::Reverse(f.self_samples));
        by_self.truncate(o.top);
        text.push_str(&table("By self samples:", by_self));
        let mut by_cumulative: Vec<&ProfiledFunction> = o.functions.iter().collect();
        by_cumulative.sort_by_key(|f| std::cmp::Reverse(f.cumulative));
        by_cumulative.truncate(o.top);
        text.push_str(&table("By cumulative samples:", by_cumulative));
    }
    if !o.calls.is_empty() {
        text.push_str(
            "\n\nCalls (the counting wrapper's frames are left out of the profile; its cost is \
             in the self samples of the counted functions' callers):",
        );
        for c in &o.calls {
            text.push_str(&format!("\n  {} {}", c.count, c.name));
        }
    }
    if !o.stdout.trim().is_empty() {
        text.push_str(&format!("\n\n[stdout]\n{}", o.stdout.trim_end()));
    }
    for v in &o.values {
        text.push_str(&format!("\n=> {v}"));
    }
    if let (Some(uri), Some((w, h))) = (&o.flame_graph, o.png_size) {
        text.push_str(&format!(
            "\n\nFlame graph: {uri} (SVG: search, zoom in a browser; a {w}x{h} PNG follows)"
        ));
    }
    text
}

/// Draws the profile's flame graph and keeps it for the session: the
/// content blocks that show it (PNG image, link to the SVG), or why it
/// could not be drawn.
async fn draw_flame_graph(
    o: &mut ProfileOutput,
    code: &str,
    ctx: &ToolContext,
) -> Result<Vec<serde_json::Value>, FlameGraphError> {
    let stacks = std::mem::take(&mut o.stacks);
    let code: String = code.split_whitespace().collect::<Vec<_>>().join(" ");
    let title = if code.chars().count() > 70 {
        format!("{}...", code.chars().take(67).collect::<String>())
    } else {
        code
    };
    let subtitle = format!(
        "{} profile, {} samples in {} ms: a frame's width is its share of the samples, \
         callers below callees",
        o.mode, o.samples, o.elapsed_ms
    );
    let graph = tokio::task::spawn_blocking(move || flame_graph::draw(&stacks, &title, &subtitle))
        .await
        .map_err(|e| FlameGraphError::Draw(std::io::Error::other(e)))??;
    let (id, graph) = ctx
        .state
        .flame_graphs
        .keep(graph)
        .map_err(FlameGraphError::Id)?;
    let blocks = vec![
        flame_graph::image_block(&graph),
        flame_graph::link_block(&id, &graph),
    ];
    o.flame_graph = Some(flame_graph::svg_uri(&id));
    o.flame_graph_png = Some(flame_graph::png_uri(&id));
    o.png_size = Some((graph.png_width, graph.png_height));
    Ok(blocks)
}

/// The profile's result, and the content blocks showing its flame graph.
async fn profile_code(a: ProfileArgs, ctx: ToolContext) -> (ToolOutput, Vec<serde_json::Value>) {
    let timeout = match image::timeout_arg(a.timeout_seconds, 120.0) {
        Ok(t) => t,
        Err(e) => return (ToolOutput::error(e), Vec::new()),
    };
    if let Err(e) = image::check_read_depth(&a.code, "`code`") {
        return (ToolOutput::error(e), Vec::new());
    }
    let mut keys = package_keys(&a.package);
    let mode = match a.mode.unwrap_or_default() {
        ProfileMode::Cpu => "cpu",
        ProfileMode::Alloc => "alloc",
    };
    keys.push(("mode", Value::keyword(mode)));
    keys.push(("top", Value::Integer(a.top.unwrap_or(20).into())));
    keys.push(("count-calls", string_list(&a.count_calls)));
    let (v, queued) = match run_user_code(
        &ctx,
        "profile-request",
        &a.code,
        vec![Value::string(a.code.clone())],
        keys,
        timeout,
    )
    .await
    {
        Ok(r) => r,
        Err(e) => return (ToolOutput::error(e), Vec::new()),
    };
    if let Some(failure) = user_code_failure(&v, "The profiled code", timeout) {
        return (with_queue_note(failure, &queued), Vec::new());
    }
    let samples = plist_i64(&v, "samples").unwrap_or(0);
    let mut out = ProfileOutput {
        mode: plist_str(&v, "mode").unwrap_or_default(),
        samples,
        unattributed: plist_i64(&v, "unattributed").unwrap_or(0),
        top: a.top.unwrap_or(20).clamp(1, 200) as usize,
        functions: profiled_functions(&v, "functions", samples),
        calls: plist_items(&v, "calls", |c| CallCount {
            name: plist_str(c, "name").unwrap_or_default(),
            count: plist_i64(c, "count").unwrap_or(0),
        }),
        values: plist_strings(&v, "values"),
        stdout: plist_str(&v, "stdout").unwrap_or_default(),
        elapsed_ms: plist_i64(&v, "elapsed-ms").unwrap_or(0),
        flame_graph: None,
        flame_graph_png: None,
        stacks: plist_strings(&v, "stacks"),
        png_size: None,
    };
    let mut pictures = Vec::new();
    let mut not_drawn = None;
    if a.flame_graph != Some(false) && !out.stacks.is_empty() {
        match draw_flame_graph(&mut out, &a.code, &ctx).await {
            Ok(blocks) => pictures = blocks,
            Err(e) => not_drawn = Some(e),
        }
    }
    let mut text = render_profile(&out);
    if let Some(e) = not_drawn {
        text.push_str(&format!("\n\n[No flame graph: {e}]"));
    }
    let output = with_queue_note(
        ToolOutput::structured(text, serde_json::to_value(out).unwrap_or_default()),
        &queued,
    );
    (output, pictures)
}

/// `output` with `pictures` (content blocks) after its text.
fn with_pictures(mut output: ToolOutput, pictures: Vec<serde_json::Value>) -> ToolOutput {
    if !pictures.is_empty() {
        let mut blocks = vec![serde_json::json!({"type": "text", "text": output.text})];
        blocks.extend(pictures);
        output.blocks = Some(blocks);
    }
    output
}

// ---------------------------------------------------------------------------
// list-threads

#[derive(Deserialize, JsonSchema, Clone, Copy, Default)]
#[serde(rename_all = "lowercase")]
enum ThreadAction {
    #[default]
    List,
    Backtrace,
    Interrupt,
    Kill,
}

#[derive(Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct ThreadsArgs {
    /// Default `list`.
    action: Option<ThreadAction>,
    thread: Option<i64>,
    /// Backtrace frames (default 30).
    limit: Option<u32>,
}

#[derive(Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
struct ThreadInfo {
    id: i64,
    name: String,
    /// `running`, `waiting on ...` or `dead`.
    status: String,
    in_debugger: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    condition: Option<String>,
    /// The thread serving this call.
    current: bool,
}

#[derive(Serialize, JsonSchema)]
struct ThreadFrame {
    index: i64,
    frame: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    path: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    line: Option<i64>,
}

#[derive(Serialize, JsonSchema)]
struct ThreadsOutput {
    threads: Vec<ThreadInfo>,
    #[serde(skip_serializing_if = "Option::is_none")]
    thread: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    frames: Option<Vec<ThreadFrame>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    message: Option<String>,
}

fn threads_output(v: &Value, root: &std::path::Path) -> ThreadsOutput {
    ThreadsOutput {
        threads: plist_items(v, "threads", |t| ThreadInfo {
            id: plist_i64(t, "id").unwrap_or(0),
            name: plist_str(t, "name").unwrap_or_default(),
            status: plist_str(t, "status").unwrap_or_default(),
            in_debugger: plist_bool(t, "in-debugger"),
            condition: plist_str(t, "condition"),
            current: plist_bool(t, "current"),
        }),
        thread: plist_i64(v, "thread"),
        frames: v.plist_get("frames").map(|_| {
            plist_items(v, "frames", |f| {
                let l = Location::from_plist(f, root);
                ThreadFrame {
                    index: plist_i64(f, "index").unwrap_or(0),
                    frame: plist_str(f, "frame").unwrap_or_default(),
                    path: l.path,
                    line: l.line,
                }
            })
        }),
        message: plist_str(v, "message"),
    }
}

fn render_threads(o: &ThreadsOutput) -> String {
    let mut text = String::new();
    if let Some(m) = &o.message {
        text.push_str(&format!("{m}\n\n"));
    }
    if let Some(frames) = &o.frames {
        text.push_str(&format!(
            "Backtrace of thread {}:",
            o.thread.unwrap_or_default()
        ));
        for f in frames {
            text.push_str(&format!("\n{}: {}", f.index, f.frame));
            if let Some(p) = &f.path {
                match f.line {
                    Some(l) => text.push_str(&format!("  ({p}:{l})")),
                    None => text.push_str(&format!("  ({p})")),
                }
            }
        }
        text.push_str("\n\n");
    }
    text.push_str(&format!("{} thread(s):", o.threads.len()));
    for t in &o.threads {
        text.push_str(&format!("\n  {} \"{}\" {}", t.id, t.name, t.status));
        if t.in_debugger {
            text.push_str(" [in debugger");
            if let Some(c) = &t.condition {
                text.push_str(&format!(": {c}"));
            }
            text.push(']');
        }
        if t.current {
            text.push_str(" (serving this call)");
        }
    }
    if o.threads.iter().any(|t| t.in_debugger) {
        text.push_str(
            "\nA thread in the debugger: debugger-backtrace with its `thread` shows it \
             untouched; `takeOver: true` lets the debugger tools act on it.",
        );
    }
    text
}

async fn list_threads(a: ThreadsArgs, ctx: ToolContext) -> ToolOutput {
    let action = match a.action.unwrap_or_default() {
        ThreadAction::List => "list",
        ThreadAction::Backtrace => "backtrace",
        ThreadAction::Interrupt => "interrupt",
        ThreadAction::Kill => "kill",
    };
    let mut keys = vec![("action", Value::keyword(action))];
    if let Some(t) = a.thread {
        keys.push(("thread", Value::Integer(t)));
    }
    keys.push(("limit", Value::Integer(a.limit.unwrap_or(30).into())));
    let form = helper_form("thread-request", vec![], keys);
    let v = match image::call_lookup(&ctx, &form).await {
        Ok(v) => v,
        Err(e) => return ToolOutput::error(e),
    };
    let out = threads_output(&v, &ctx.session.project_root());
    ToolOutput::structured(
        render_threads(&out),
        serde_json::to_value(out).unwrap_or_default(),
    )
}

/// The tools of the `debug` group.
pub fn tools() -> Vec<ToolDef> {
    vec![
        tool(
            "inspect-object",
            ToolGroup::Debug,
            "Inspect an object",
            "Show the value of `code` as numbered parts (slots, entries, elements; a function's \
             lambda list and source); `part` N drills in, `back` returns. With `frame`, `code` \
             sees that frame's locals.",
            Annotations::MUTATING,
            |a: InspectArgs, ctx: ToolContext| async move {
                let c = ctx.clone();
                image::finish(&c, inspect_object(a, ctx).await)
            },
        )
        .with_output_schema::<InspectOutput>(),
        tool(
            "trace-functions",
            ToolGroup::Debug,
            "Trace functions",
            "Trace/untrace functions, `(setf f)`, `(method f :around (integer))`. Returns what is \
             traced and the calls since the last call: arguments, values, depth, thread.",
            Annotations::MUTATING,
            |a: TraceArgs, ctx: ToolContext| async move {
                let c = ctx.clone();
                image::finish(&c, trace_functions(a, ctx).await)
            },
        )
        .with_output_schema::<TraceOutput>(),
        tool(
            "profile-code",
            ToolGroup::Debug,
            "Profile code",
            "Run `code` under the statistical profiler (`mode` cpu/alloc): top functions by self \
             and cumulative samples, a flame graph (PNG, SVG link); \
             `countCalls` counts calls exactly.",
            Annotations::MUTATING,
            |a: ProfileArgs, ctx: ToolContext| async move {
                let c = ctx.clone();
                let (output, pictures) = profile_code(a, ctx).await;
                with_pictures(image::finish(&c, output), pictures)
            },
        )
        .with_output_schema::<ProfileOutput>(),
        tool(
            "list-threads",
            ToolGroup::Debug,
            "List threads",
            "The image's threads: id, name, status, whether in the debugger; `action` backtrace, \
             interrupt (into the debugger) or kill a `thread`.",
            Annotations::DESTRUCTIVE,
            |a: ThreadsArgs, ctx: ToolContext| async move {
                let c = ctx.clone();
                image::finish(&c, list_threads(a, ctx).await)
            },
        )
        .with_output_schema::<ThreadsOutput>(),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use lisp_syntax::data;

    #[test]
    fn each_profile_table_shows_its_own_top() {
        let v = data::read(
            r#"(:functions ((:name "A" :self 5 :cumulative 7) (:name "B" :self 1 :cumulative 1)
                            (:name "C" :self 0 :cumulative 7) (:name "D" :self 1 :cumulative 8)))"#,
        )
        .unwrap();
        // Three samples in seven, and a count past all samples (the image
        // counts a function once per sample; the share is capped anyway).
        let functions = profiled_functions(&v, "functions", 7);
        assert_eq!(functions[0].cumulative_percent, 100.0);
        assert_eq!(functions[0].self_percent, 71.4);
        assert_eq!(functions[3].cumulative_percent, 100.0);
        let out = ProfileOutput {
            mode: "cpu".into(),
            samples: 7,
            unattributed: 0,
            top: 2,
            functions,
            calls: Vec::new(),
            values: Vec::new(),
            stdout: String::new(),
            elapsed_ms: 1,
            flame_graph: None,
            flame_graph_png: None,
            stacks: Vec::new(),
            png_size: None,
        };
        let text = render_profile(&out);
        let rows = |title: &str| {
            text.split(title)
                .nth(1)
                .unwrap()
                .split("\n\n")
                .next()
                .unwrap()
                .lines()
                .count()
                - 2
        };
        assert_eq!(rows("By self samples:"), 2, "{text}");
        assert_eq!(rows("By cumulative samples:"), 2, "{text}");
        assert!(text.contains("71.4   100.0  A"), "{text}");
    }

    #[test]
    fn trace_records_render_as_a_tree() {
        let v = data::read(
            r#"(:traced ("FACT") :changes ((:name "FACT" :action "trace" :ok t :message nil))
                :records ((:id 1 :depth 0 :name "FACT" :thread "w" :arguments ("2") :outcome "returned" :values ("2") :elapsed-us 1500)
                          (:id 2 :depth 1 :name "FACT" :thread "w" :arguments ("1") :outcome "returned" :values ("1") :elapsed-us 85))
                :more 0 :dropped 0)"#,
        )
        .unwrap();
        let out = trace_output(&v);
        assert_eq!(out.records[1].depth, 1);
        let text = render_trace(&out);
        assert!(text.contains("traced FACT"), "{text}");
        assert!(
            text.contains("\n  0: (FACT 2) => 2  (1.5 ms)\n    1: (FACT 1) => 1  (85 µs)"),
            "{text}"
        );
    }

    #[test]
    fn trace_records_that_do_not_nest_are_a_list_and_threads_apart() {
        let v = data::read(
            r#"(:traced ("F" "G") :changes ()
                :records ((:id 1 :depth 0 :name "F" :thread "a" :arguments ("1") :outcome "returned" :values ("2") :elapsed-us 5)
                          (:id 2 :depth 0 :name "F" :thread "b" :arguments ("3") :outcome "running" :values ())
                          (:id 3 :depth 0 :name "G" :thread "a" :arguments () :outcome "non-local-exit" :values ()))
                :more 0 :dropped 0)"#,
        )
        .unwrap();
        let text = render_trace(&trace_output(&v));
        assert!(
            text.ends_with(
                "3 call(s):\n  [thread a]\n  (F 1) => 2  (5 µs)\n  (G) exited non-locally\n  \
                 [thread b]\n  (F 3) (still running)"
            ),
            "{text}"
        );
        // One nested call makes it a tree.
        let v = data::read(
            r#"(:traced ("F") :changes ()
                :records ((:id 1 :depth 0 :name "F" :thread "a" :arguments ("1") :outcome "returned" :values ("1" "2"))
                          (:id 2 :depth 1 :name "G" :thread "a" :arguments () :outcome "returned" :values ()))
                :more 0 :dropped 0)"#,
        )
        .unwrap();
        let text = render_trace(&trace_output(&v));
        assert!(
            text.ends_with("as a call tree:\n  0: (F 1) => 1, 2\n    1: (G) => ; No values"),
            "{text}"
        );
    }
}
