//! The `asdf` tools: load and test systems, list them, describe one. The
//! Lisp halves are `lisp/build.lisp`, `lisp/test-run.lisp` and
//! `lisp/systems.lisp`; diagnostics are rendered like `lisp-compile-file`'s
//! (shared in `code/build.rs`).

use std::path::Path;
use std::time::Duration;

use lisp_syntax::data::Value;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::code::{
    build_timeout, render_build_error, render_interruption, BuildOutput, Diagnostic, FailedAction,
};
use super::fs_paths;
use super::lisp_call::{
    self, helper_form, plist_bool, plist_i64, plist_items, plist_str, plist_strings,
};
use super::output::DEFAULT_MAX_OUTPUT;
use super::{tool, Annotations, ToolContext, ToolDef, ToolGroup, ToolOutput};

mod answer;
pub mod coverage;
mod loose;
mod matrix;
mod test_locations;

use answer::{clip, listed_diagnostics, render_listed, suite_excerpt, DiagnosticsLevel};
use matrix::{LispsArg, Matrix};

use test_locations::{FailedCheck, TestSources};

#[derive(Deserialize, JsonSchema, Clone)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct LoadArgs {
    /// E.g. `my-app/tests`.
    system: String,
    force: Option<bool>,
    /// Default 600.
    timeout_seconds: Option<f64>,
    /// In an image of each Lisp at once (`all`: each installed).
    lisps: Option<LispsArg>,
    // Listed in the text (default warnings). No doc comment: the enum
    // says it (the schema budget).
    diagnostics: Option<DiagnosticsLevel>,
}

/// `structuredContent` of `asdf-load-system`.
#[derive(Serialize, JsonSchema)]
struct LoadOutput {
    #[serde(flatten)]
    build: BuildOutput,
    /// The `.asd` the system was read from (absolute): the first line of
    /// the text names it when it lies outside the project root.
    #[serde(rename = "sourceFile", skip_serializing_if = "Option::is_none")]
    source_file: Option<String>,
    /// With `lisps`: each Lisp's load (the fields above then sum them up:
    /// `success` when every Lisp loaded it; diagnostics are per Lisp).
    #[serde(skip_serializing_if = "Option::is_none")]
    matrix: Option<Matrix>,
}

async fn asdf_load_system(a: LoadArgs, ctx: ToolContext) -> ToolOutput {
    match a.lisps.clone() {
        Some(lisps) => load_matrix(a, &lisps, ctx).await,
        None => load_one(a, ctx).await,
    }
}

/// `asdf-load-system` with `lisps`.
async fn load_matrix(a: LoadArgs, lisps: &LispsArg, ctx: ToolContext) -> ToolOutput {
    let one = |c| {
        let a = LoadArgs {
            lisps: None,
            ..a.clone()
        };
        load_one(a, c)
    };
    let (rows, started) = match matrix::rows(&ctx, lisps, false, one).await {
        Ok(r) => r,
        Err(e) => return e,
    };
    let success = rows.iter().all(|r| r.outcome == "loaded");
    let m = Matrix {
        rows,
        differing: Vec::new(),
    };
    let text = matrix::render(&format!("Loading {}", a.system), &m, started, false);
    let out = LoadOutput {
        build: BuildOutput {
            success,
            warnings_p: false,
            failure_p: !success,
            diagnostics: Vec::new(),
            elapsed_ms: started.elapsed().as_millis() as i64,
            error: None,
            failed: None,
            systems: None,
        },
        source_file: None,
        matrix: Some(m),
    };
    ToolOutput::structured(text, serde_json::to_value(out).unwrap_or_default()).with_error(!success)
}

async fn load_one(a: LoadArgs, ctx: ToolContext) -> ToolOutput {
    let timeout = match build_timeout(a.timeout_seconds) {
        Ok(t) => t,
        Err(e) => return ToolOutput::error(e),
    };
    let mut keys = vec![("max-output", Value::Integer(DEFAULT_MAX_OUTPUT as i64))];
    if a.force == Some(true) {
        keys.push(("force", Value::t()));
    }
    let form = helper_form("load-system", vec![Value::string(a.system.clone())], keys);
    let what = format!("asdf-load-system {}", a.system);
    let v = match lisp_call::call_build(&ctx, &what, &form, timeout).await {
        Ok(v) => v,
        Err(e) => return ToolOutput::error(e),
    };
    lisp_call::refresh_read_roots(&ctx).await;
    let root = ctx.session.project_root();
    let origin = Origin::of(&ctx, &a.system, &root).await;
    let out = BuildOutput::from_plist(&v, &root);
    let via = plist_str(&v, "via").unwrap_or_else(|| "asdf".into());
    let headline = if out.success {
        format!(
            "Loaded system {} ({via}) in {} ms: {}",
            a.system,
            out.elapsed_ms,
            out.summary()
        )
    } else {
        format!(
            "Loading system {} failed after {} ms: {}",
            a.system,
            out.elapsed_ms,
            out.summary()
        )
    };
    let headline = Origin::on_first_line(origin.as_ref(), headline);
    crate::tools::code::note_build(&ctx, &out, &headline);
    let level = a.diagnostics.unwrap_or_default();
    let mut text = headline;
    if let Some(f) = &out.failed {
        text.push_str(&format!("\nFailed: {}", f.line()));
    }
    push_diagnostics(&mut text, &out.diagnostics, &v, &root, level);
    if let Some(e) = render_build_error(&v) {
        text.push_str(&format!("\n\n{e}"));
    }
    if let Some(t) = render_interruption(&v, "Loading", timeout) {
        text.push_str(&format!("\n\n{t}"));
    }
    if !out.success {
        let output = format!(
            "{}\n{}",
            plist_str(&v, "stdout").unwrap_or_default(),
            plist_str(&v, "stderr").unwrap_or_default()
        );
        let excerpt = suite_excerpt(&output);
        if !excerpt.is_empty() {
            text.push_str(&format!(
                "\n\n[output, its key and last lines; all in `stdout`/`stderr`]\n{excerpt}"
            ));
        }
    }
    let is_error = !out.success;
    let mut structured = serde_json::to_value(out).unwrap_or_default();
    if let (Some(o), serde_json::Value::Object(m)) = (&origin, &mut structured) {
        m.insert("sourceFile".into(), o.source_file.clone().into());
    }
    ToolOutput::structured(text, structured).with_error(is_error)
}

/// The listed diagnostics and the line counting the others.
fn push_diagnostics(
    text: &mut String,
    diags: &[Diagnostic],
    v: &Value,
    root: &Path,
    level: DiagnosticsLevel,
) {
    let (listed, counted) = listed_diagnostics(diags, v, root, level);
    if !listed.is_empty() {
        text.push('\n');
        text.push_str(&render_listed(&listed));
    }
    if !counted.is_empty() {
        text.push('\n');
        text.push_str(&counted);
    }
}

/// Where a system's `.asd` lies, so that no answer lets one copy of a
/// library pass for another: an installed copy beside the project's
/// checkout, or a deeper checkout beside the one chosen.
struct Origin {
    /// Absolute.
    source_file: String,
    /// As answers show it: relative to the root when under it.
    shown: String,
    under_root: bool,
    /// Other `.asd` files under the root defining the system (deeper, or
    /// later in path order), relative to the root.
    also_defined_in: Vec<String>,
}

impl Origin {
    /// The origin of `system` as ASDF finds it now (`None`: not found).
    async fn of(ctx: &ToolContext, system: &str, root: &Path) -> Option<Origin> {
        let form = helper_form("system-origin", vec![Value::string(system)], vec![]);
        let v = lisp_call::call_lookup(ctx, &form).await.ok()?;
        Origin::from_plist(&v, root)
    }

    fn from_plist(v: &Value, root: &Path) -> Option<Origin> {
        let source_file = plist_str(v, "source-file")?;
        let canonical = std::fs::canonicalize(root).unwrap_or_else(|_| root.to_path_buf());
        let under_root = Path::new(&source_file).starts_with(&canonical)
            || Path::new(&source_file).starts_with(root);
        let also_defined_in = plist_strings(v, "also-defined-in")
            .iter()
            .map(|p| fs_paths::display_path(root, Path::new(p)))
            .collect();
        Some(Origin {
            shown: fs_paths::display_path(root, Path::new(&source_file)),
            source_file,
            under_root,
            also_defined_in,
        })
    }

    /// What the first line of an answer says of it: nothing for the one
    /// `.asd` under the root defining the system.
    fn clause(&self) -> Option<String> {
        if !self.under_root {
            Some(format!(
                "from {} (outside the project root)",
                self.source_file
            ))
        } else if !self.also_defined_in.is_empty() {
            Some(format!(
                "from {} (the shallowest of the .asd files under the root defining it; also in {})",
                self.shown,
                self.also_defined_in.join(", ")
            ))
        } else {
            None
        }
    }

    /// `text` with the clause at the end of its first line.
    fn on_first_line(origin: Option<&Origin>, text: String) -> String {
        let Some(clause) = origin.and_then(Origin::clause) else {
            return text;
        };
        match text.split_once('\n') {
            Some((first, rest)) => format!("{first} — {clause}\n{rest}"),
            None => format!("{text} — {clause}"),
        }
    }
}

#[derive(Deserialize, JsonSchema, Clone)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct TestArgs {
    system: Option<String>,
    /// Instead of `system`: a file whose tests to run.
    file: Option<String>,
    /// A FiveAM test or suite (`pkg::name`), also alone.
    test: Option<String>,
    force: Option<bool>,
    /// Default 600.
    timeout_seconds: Option<f64>,
    /// In an image of each Lisp at once (`all`: each installed).
    lisps: Option<LispsArg>,
    // SBCL: rebuild the project's files instrumented (sb-cover), report
    // what the tests left unrun, then build normally again. No doc
    // comment: the tool's description says it (the schema budget).
    coverage: Option<bool>,
    // Listed in the text (default warnings). No doc comment: the enum
    // says it (the schema budget).
    diagnostics: Option<DiagnosticsLevel>,
}

/// Pass/fail counts: of checks, from the framework's own results (FiveAM,
/// Fiasco), else read from its printed summary (README: test frameworks).
#[derive(Serialize, JsonSchema)]
struct TestSummary {
    /// fiveam, fiasco, parachute, rove, lisp-unit2, rt, ptester or xlunit
    /// (FiveAM and Fiasco results together: `fiveam, fiasco`).
    framework: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    passed: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    failed: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    skipped: Option<i64>,
}

/// One failed check, with the test it belongs to.
#[derive(Serialize, JsonSchema)]
struct TestFailure {
    /// The test, as `package::name`.
    test: String,
    /// Its suite, when it has one.
    #[serde(skip_serializing_if = "Option::is_none")]
    suite: Option<String>,
    /// What failed: expected and actual, as the framework says it.
    message: String,
    /// The failing form, when the framework keeps it.
    #[serde(skip_serializing_if = "Option::is_none")]
    form: Option<String>,
    /// Where it failed, found in the system's source files: see `at`.
    #[serde(flatten)]
    location: super::code::Location,
    /// What the location is: `check` (the failed assertion), `test` (the
    /// test's form: the check is not in it) or `macro-call` (the form of
    /// the user's macro that made the test).
    #[serde(skip_serializing_if = "Option::is_none")]
    at: Option<String>,
}

/// How a test run ended (README: test frameworks).
#[derive(Serialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
enum TestOutcome {
    /// A recognised result or summary with no failure: the only success.
    Passed,
    /// A recognised result or summary with failures.
    Failed,
    /// The build or run signalled, timed out, or the system is missing.
    Error,
    /// No framework's results or summary recognised in the output.
    Unknown,
}

impl TestOutcome {
    fn from_lisp(s: Option<String>) -> Self {
        match s.as_deref() {
            Some("passed") => Self::Passed,
            Some("failed") => Self::Failed,
            Some("error") => Self::Error,
            _ => Self::Unknown,
        }
    }
}

#[derive(Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
struct TestOutput {
    /// Outcome `passed`: no error, a recognised result, no failed check.
    success: bool,
    outcome: TestOutcome,
    /// Absent when no framework's results or summary were recognised.
    #[serde(skip_serializing_if = "Option::is_none")]
    summary: Option<TestSummary>,
    /// Every failed check, in the order they ran (FiveAM).
    failures: Vec<TestFailure>,
    /// Compiler diagnostics of the (re)build the test run triggered.
    diagnostics: Vec<Diagnostic>,
    /// When the build or the run failed: which component, and why.
    #[serde(skip_serializing_if = "Option::is_none")]
    failed: Option<FailedAction>,
    stdout: String,
    stderr: String,
    /// The end of the suite's own output (without the compiler's lines),
    /// which a long build's notes cannot push out of `stdout`/`stderr`.
    #[serde(skip_serializing_if = "String::is_empty")]
    suite_output: String,
    elapsed_ms: i64,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
    /// The `.asd` the system was read from (absolute): the first line of
    /// the text names it when it lies outside the project root.
    #[serde(skip_serializing_if = "Option::is_none")]
    source_file: Option<String>,
    /// With `lisps`: each Lisp's run and the tests whose outcome differs
    /// (the fields above then sum them up: `success` when every Lisp
    /// passed; failures and diagnostics are per Lisp, here).
    #[serde(skip_serializing_if = "Option::is_none")]
    matrix: Option<Matrix>,
    /// With `coverage: true`: each file's covered share, the lines never
    /// run, and the HTML report.
    #[serde(skip_serializing_if = "Option::is_none")]
    coverage: Option<coverage::CoverageOutput>,
}

async fn asdf_test_system(a: TestArgs, ctx: ToolContext) -> ToolOutput {
    if let Some(refusal) = loose::refuse_subject(&a) {
        return ToolOutput::error(refusal);
    }
    if a.coverage == Some(true) && a.lisps.is_some() {
        return ToolOutput::error(
            "coverage: true measures in one SBCL image (sb-cover); it cannot go with `lisps`. \
             Run the matrix without coverage, and coverage without `lisps` in an SBCL session.",
        );
    }
    match a.lisps.clone() {
        Some(lisps) => test_matrix(a, &lisps, ctx).await,
        None => test_one(a, ctx).await,
    }
}

/// `asdf-test-system` with `lisps`.
async fn test_matrix(a: TestArgs, lisps: &LispsArg, ctx: ToolContext) -> ToolOutput {
    let one = |c| {
        let a = TestArgs {
            lisps: None,
            ..a.clone()
        };
        test_one(a, c)
    };
    let (rows, started) = match matrix::rows(&ctx, lisps, true, one).await {
        Ok(r) => r,
        Err(e) => return e,
    };
    // The worst outcome: error, then unknown, then failed, then passed.
    let outcome = ["error", "unknown", "failed"]
        .into_iter()
        .find(|o| rows.iter().any(|r| r.outcome == *o))
        .unwrap_or("passed");
    let differing = matrix::differing(&rows);
    let m = Matrix { rows, differing };
    let what = loose::run_title(&a);
    let text = matrix::render(&what, &m, started, true);
    let success = outcome == "passed";
    let out = TestOutput {
        success,
        outcome: TestOutcome::from_lisp(Some(outcome.to_string())),
        summary: None,
        failures: Vec::new(),
        diagnostics: Vec::new(),
        failed: None,
        stdout: String::new(),
        stderr: String::new(),
        suite_output: String::new(),
        elapsed_ms: started.elapsed().as_millis() as i64,
        error: None,
        source_file: None,
        matrix: Some(m),
        coverage: None,
    };
    ToolOutput::structured(text, serde_json::to_value(out).unwrap_or_default()).with_error(!success)
}

async fn test_one(a: TestArgs, ctx: ToolContext) -> ToolOutput {
    let timeout = match build_timeout(a.timeout_seconds) {
        Ok(t) => t,
        Err(e) => return ToolOutput::error(e),
    };
    let mut keys = vec![("max-output", Value::Integer(DEFAULT_MAX_OUTPUT as i64))];
    if let Some(t) = &a.test {
        keys.push(("test", Value::string(t.clone())));
    }
    if a.force == Some(true) {
        keys.push(("force", Value::t()));
    }
    let system = a.system.clone().unwrap_or_default();
    let report_dir = match a.coverage {
        Some(true) => match coverage::fresh_report_dir(&ctx.session, &system) {
            Ok(d) => Some(d),
            Err(e) => return ToolOutput::error(e),
        },
        _ => None,
    };
    if let Some(d) = &report_dir {
        keys.push(("coverage", Value::string(format!("{}/", d.display()))));
    }
    let (form, what) = if a.system.is_some() {
        (
            helper_form("test-system", vec![Value::string(system.clone())], keys),
            format!("asdf-test-system {system}"),
        )
    } else {
        match loose::test_file_form(&a, &ctx, keys).await {
            Ok(f) => f,
            Err(e) => return ToolOutput::error(e),
        }
    };
    let v = match lisp_call::call_build(&ctx, &what, &form, timeout).await {
        Ok(v) => v,
        Err(e) => return ToolOutput::error(e),
    };
    let root = ctx.session.project_root();
    let origin = match &a.system {
        Some(system) => Origin::of(&ctx, system, &root).await,
        None => None, // a loose file's run has no system to come from
    };
    let build = BuildOutput::from_plist(&v, &root);
    let summary = v
        .plist_get("summary")
        .filter(|s| !s.is_nil())
        .map(|s| TestSummary {
            framework: plist_str(s, "framework").unwrap_or_default(),
            passed: plist_i64(s, "passed"),
            failed: plist_i64(s, "failed"),
            skipped: plist_i64(s, "skipped"),
        });
    // The failures are located in the source files the image names.
    let sources = TestSources::read(&plist_strings(&v, "source-files"));
    let failures = plist_items(&v, "failures", |f| {
        let found = sources.locate(&FailedCheck::from_plist(f));
        TestFailure {
            test: plist_str(f, "test").unwrap_or_default(),
            suite: plist_str(f, "suite"),
            message: plist_str(f, "message").unwrap_or_default(),
            form: plist_str(f, "form"),
            location: super::code::Location {
                path: found
                    .as_ref()
                    .map(|l| fs_paths::display_path(&root, Path::new(&l.path))),
                line: found.as_ref().map(|l| l.line as i64),
                column: found.as_ref().map(|l| l.column as i64),
            },
            at: found.map(|l| l.at.to_string()),
        }
    });
    let out = TestOutput {
        success: build.success,
        outcome: TestOutcome::from_lisp(plist_str(&v, "outcome")),
        summary,
        failures,
        diagnostics: build.diagnostics.clone(),
        failed: build.failed.clone(),
        stdout: plist_str(&v, "stdout").unwrap_or_default(),
        stderr: plist_str(&v, "stderr").unwrap_or_default(),
        suite_output: plist_str(&v, "suite-output").unwrap_or_default(),
        elapsed_ms: build.elapsed_ms,
        error: build.error.clone(),
        source_file: origin.as_ref().map(|o| o.source_file.clone()),
        matrix: None,
        coverage: report_dir.as_ref().and_then(|d| {
            let c = v.plist_get("coverage").filter(|c| !c.is_nil())?;
            coverage::CoverageOutput::from_plist(c, &root, &system, d)
        }),
    };
    let mut text = Origin::on_first_line(
        origin.as_ref(),
        render_test_run(&a, &out, &v, &root, timeout),
    );
    if let Some(c) = &out.coverage {
        text.push_str("\n\n");
        if matches!(out.outcome, TestOutcome::Error) {
            text.push_str(
                "The run did not complete (see above): the coverage below counts only what ran \
                 before it ended.\n",
            );
        }
        text.push_str(&c.render());
    }
    let is_error = !out.success;
    ToolOutput::structured(text, serde_json::to_value(out).unwrap_or_default()).with_error(is_error)
}

/// At most this many failures are shown in the text (the rest counted).
const FAILURES_SHOWN: usize = 10;

/// A shown failure's message and form are cut to these many characters.
const FAILURE_MESSAGE_CHARS: usize = 300;
const FAILURE_FORM_CHARS: usize = 120;

/// The answer's text, sized for a model: the headline (outcome, counts,
/// time), each failure (the first `FAILURES_SHOWN`: location, test,
/// message), the project's errors and warnings (notes only when asked) and
/// one line counting the rest; the suite's own output only when it is all
/// there is (no summary recognised, failures the framework did not
/// itemise, an error or a timeout), and then by priority (`suite_excerpt`).
/// The structured result keeps everything.
fn render_test_run(
    a: &TestArgs,
    out: &TestOutput,
    v: &Value,
    root: &Path,
    timeout: Duration,
) -> String {
    let what = loose::run_title(a);
    if let Some(message) = refusal_message(v, "UNKNOWN-TEST") {
        return format!("{what}: no such test. {message}");
    }
    if let Some(message) = refusal_message(v, "COVERAGE-UNSUPPORTED") {
        return format!("{what} not run: {message}.");
    }
    if let Some(message) = refusal_message(v, "NO-TESTS") {
        return format!("{what}: no tests. {message}");
    }
    let outcome = match out.outcome {
        TestOutcome::Passed => "passed",
        TestOutcome::Failed => "FAILED",
        TestOutcome::Error => "ERROR",
        TestOutcome::Unknown => "UNKNOWN",
    };
    let mut text = match &out.summary {
        Some(s) => {
            let passed = s
                .passed
                .map(|n| format!("{n} passed, "))
                .unwrap_or_default();
            format!(
                "{what} {outcome} ({}): {passed}{} failed, {} skipped ({} ms)",
                s.framework,
                s.failed.map_or("?".into(), |n| n.to_string()),
                s.skipped.unwrap_or(0),
                out.elapsed_ms
            )
        }
        // The error (a missing system, a failed build) says what happened.
        None if out.error.is_some() => {
            format!(
                "{what} ERROR ({} ms): an error ended the run",
                out.elapsed_ms
            )
        }
        None => format!(
            "{what}: outcome UNKNOWN ({} ms): no test framework's results or summary recognised \
             in the output; its last lines are below",
            out.elapsed_ms
        ),
    };
    if let Some(f) = &out.failed {
        text.push_str(&format!("\nFailed: {}", f.line()));
    }
    for f in out.failures.iter().take(FAILURES_SHOWN) {
        let at = if f.location.path.is_some() {
            format!("{}: ", f.location.prefix())
        } else {
            String::new()
        };
        let made = if f.at.as_deref() == Some("macro-call") {
            ", made by this macro call"
        } else {
            ""
        };
        text.push_str(&format!(
            "\n{at}FAIL {}{}{made}: {}",
            f.test,
            f.suite
                .as_ref()
                .map_or(String::new(), |s| format!(" (in {s})")),
            clip(&f.message, FAILURE_MESSAGE_CHARS)
        ));
        // At the check, the source shows the form.
        if f.at.as_deref() != Some("check") {
            if let Some(form) = &f.form {
                text.push_str(&format!("\n    form: {}", clip(form, FAILURE_FORM_CHARS)));
            }
        }
    }
    if out.failures.len() > FAILURES_SHOWN {
        text.push_str(&format!(
            "\n… and {} more failures; see `failures`",
            out.failures.len() - FAILURES_SHOWN
        ));
    }
    let level = a.diagnostics.unwrap_or_default();
    push_diagnostics(&mut text, &out.diagnostics, v, root, level);
    if let Some(e) = render_build_error(v) {
        text.push_str(&format!("\n\n{}", clip_lines(&e, 12)));
    }
    if let Some(t) = render_interruption(v, "The test run", timeout) {
        text.push_str(&format!("\n\n{t}"));
    }
    let unitemised = out
        .summary
        .as_ref()
        .is_some_and(|s| s.failed.unwrap_or(0) > out.failures.len() as i64);
    let output_needed =
        out.summary.is_none() || unitemised || out.error.is_some() || plist_bool(v, "interrupted");
    if output_needed {
        // The suite's own output, else (an older image) what was captured.
        let source = if out.suite_output.trim().is_empty() {
            format!("{}\n{}", out.stdout, out.stderr)
        } else {
            out.suite_output.clone()
        };
        let excerpt = suite_excerpt(&source);
        if !excerpt.is_empty() {
            text.push_str(&format!(
                "\n\n[suite output, its key and last lines; all in `stdout`/`stderr`]\n{excerpt}"
            ));
        }
    }
    text
}

/// `text`'s first `n` lines, each cut to 200 characters, the others
/// counted.
fn clip_lines(text: &str, n: usize) -> String {
    let lines: Vec<String> = text.lines().map(|l| clip(l, 200)).collect();
    if lines.len() <= n {
        return lines.join("\n");
    }
    format!(
        "{}\n[{} more lines; see `error`]",
        lines[..n].join("\n"),
        lines.len() - n
    )
}

/// The message of a run refused before it ran, if that is what ended it:
/// `UNKNOWN-TEST` (an unknown test name, with the nearest names) or
/// `COVERAGE-UNSUPPORTED` (coverage asked of a Lisp without sb-cover).
fn refusal_message(v: &Value, kind: &str) -> Option<String> {
    let e = v.plist_get("error").filter(|e| !e.is_nil())?;
    (plist_str(e, "type").as_deref() == Some(kind))
        .then(|| plist_str(e, "message").unwrap_or_default())
}

#[derive(Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct ListArgs {
    /// Substring of the name (any case).
    filter: Option<String>,
    loaded_only: Option<bool>,
    /// Default 500.
    limit: Option<u32>,
}

#[derive(Serialize, JsonSchema)]
struct SystemEntry {
    name: String,
    loaded: bool,
    /// Defined by an `.asd` under the project root.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    project: bool,
}

#[derive(Serialize, JsonSchema)]
struct ListOutput {
    /// How many systems matched (may exceed the number listed).
    count: i64,
    systems: Vec<SystemEntry>,
}

async fn asdf_list_systems(a: ListArgs, ctx: ToolContext) -> ToolOutput {
    let mut keys = vec![("limit", Value::Integer(a.limit.unwrap_or(500).into()))];
    if let Some(f) = &a.filter {
        keys.push(("filter", Value::string(f.clone())));
    }
    if a.loaded_only == Some(true) {
        keys.push(("loaded-only", Value::t()));
    }
    let form = helper_form("list-systems", vec![], keys);
    let v = match lisp_call::call_lookup(&ctx, &form).await {
        Ok(v) => v,
        Err(e) => return ToolOutput::error(e),
    };
    let out = ListOutput {
        count: plist_i64(&v, "count").unwrap_or(0),
        systems: plist_items(&v, "systems", |s| SystemEntry {
            name: plist_str(s, "name").unwrap_or_default(),
            loaded: plist_bool(s, "loaded"),
            project: plist_bool(s, "project"),
        }),
    };
    let mut text = format!("{} system(s) known to ASDF", out.count);
    if (out.systems.len() as i64) < out.count {
        text.push_str(&format!(" (first {} shown)", out.systems.len()));
    }
    for s in &out.systems {
        text.push_str(&format!(
            "\n{}{}{}",
            s.name,
            if s.project { " (project)" } else { "" },
            if s.loaded { " (loaded)" } else { "" }
        ));
    }
    ToolOutput::structured(text, serde_json::to_value(out).unwrap_or_default())
}

#[derive(Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct InfoArgs {
    system: String,
}

#[derive(Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
struct InfoOutput {
    name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    version: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    description: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    author: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    maintainer: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    license: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    homepage: Option<String>,
    depends_on: Vec<String>,
    defsystem_depends_on: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    source_file: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    source_directory: Option<String>,
    /// The source file lies under the project root (the project's copy).
    under_project_root: bool,
    /// Other `.asd` files under the root defining it, not used: the
    /// shallowest is (then the first in path order).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    also_defined_in: Vec<String>,
    loaded: bool,
}

async fn asdf_system_info(a: InfoArgs, ctx: ToolContext) -> ToolOutput {
    let form = helper_form("system-info", vec![Value::string(a.system.clone())], vec![]);
    let v = match lisp_call::call_lookup(&ctx, &form).await {
        Ok(v) => v,
        Err(e) => return ToolOutput::error(e),
    };
    let out = InfoOutput {
        name: plist_str(&v, "name").unwrap_or_default(),
        version: plist_str(&v, "version"),
        description: plist_str(&v, "description"),
        author: plist_str(&v, "author"),
        maintainer: plist_str(&v, "maintainer"),
        license: plist_str(&v, "license"),
        homepage: plist_str(&v, "homepage"),
        depends_on: plist_strings(&v, "depends-on"),
        defsystem_depends_on: plist_strings(&v, "defsystem-depends-on"),
        source_file: plist_str(&v, "source-file"),
        source_directory: plist_str(&v, "source-directory"),
        under_project_root: false,
        also_defined_in: Vec::new(),
        loaded: plist_bool(&v, "loaded"),
    };
    let root = ctx.session.project_root();
    let origin = Origin::from_plist(&v, &root);
    let mut out = out;
    if let Some(o) = &origin {
        out.under_project_root = o.under_root;
        out.also_defined_in = o.also_defined_in.clone();
    }
    let where_from = |file: &String| match &origin {
        Some(o) if !o.under_root => format!("{file} (outside the project root)"),
        Some(o) if !o.also_defined_in.is_empty() => format!(
            "{file} (the project's: the shallowest .asd under the root defining it; also in {})",
            o.also_defined_in.join(", ")
        ),
        Some(_) => format!("{file} (the project's)"),
        None => file.clone(),
    };
    let source_line = out.source_file.as_ref().map(where_from);
    let mut text = format!("System {}", out.name);
    let fields = [
        ("Version", &out.version),
        ("Description", &out.description),
        ("Author", &out.author),
        ("Maintainer", &out.maintainer),
        ("License", &out.license),
        ("Homepage", &out.homepage),
        ("Source file", &source_line),
    ];
    for (label, value) in fields {
        if let Some(x) = value {
            text.push_str(&format!("\n{label}: {x}"));
        }
    }
    text.push_str(&format!(
        "\nDepends on: {}",
        if out.depends_on.is_empty() {
            "(nothing)".to_string()
        } else {
            out.depends_on.join(", ")
        }
    ));
    if !out.defsystem_depends_on.is_empty() {
        text.push_str(&format!(
            "\nDefsystem depends on: {}",
            out.defsystem_depends_on.join(", ")
        ));
    }
    text.push_str(&format!(
        "\nLoaded: {}",
        if out.loaded { "yes" } else { "no" }
    ));
    ToolOutput::structured(text, serde_json::to_value(out).unwrap_or_default())
}

/// The tools of the `asdf` group.
pub fn tools() -> Vec<ToolDef> {
    vec![
        tool(
            "asdf-load-system",
            ToolGroup::Asdf,
            "Load an ASDF system",
            "Load an ASDF system (Quicklisp fetches missing dependencies when installed; `force` \
             recompiles). Diagnostics as `path:line:col: severity: message`; a failed build names \
             the component and why.",
            Annotations::MUTATING,
            |a: LoadArgs, ctx: ToolContext| async move {
                let c = ctx.clone();
                lisp_call::finish(&c, asdf_load_system(a, ctx).await)
            },
        )
        .with_output_schema::<LoadOutput>()
        .with_task_support(),
        tool(
            "asdf-test-system",
            ToolGroup::Asdf,
            "Run a system's tests",
            "Run a system's or a `file`'s tests (never waits for input): counts, each failure at \
             its test or check; `force` rebuilds; `coverage` (SBCL): lines never run.",
            Annotations::MUTATING,
            |a: TestArgs, ctx: ToolContext| async move {
                let c = ctx.clone();
                lisp_call::finish(&c, asdf_test_system(a, ctx).await)
            },
        )
        .with_output_schema::<TestOutput>()
        .with_task_support(),
        tool(
            "asdf-list-systems",
            ToolGroup::Asdf,
            "List ASDF systems",
            "Systems ASDF can find, with whether each is loaded.",
            Annotations::READ_ONLY,
            |a: ListArgs, ctx: ToolContext| async move {
                let c = ctx.clone();
                lisp_call::finish(&c, asdf_list_systems(a, ctx).await)
            },
        )
        .with_output_schema::<ListOutput>(),
        tool(
            "asdf-system-info",
            ToolGroup::Asdf,
            "Describe an ASDF system",
            "An ASDF system's version, description, author, license, dependencies, source file \
             and whether it is loaded.",
            Annotations::READ_ONLY,
            |a: InfoArgs, ctx: ToolContext| async move {
                let c = ctx.clone();
                lisp_call::finish(&c, asdf_system_info(a, ctx).await)
            },
        )
        .with_output_schema::<InfoOutput>(),
    ]
}
