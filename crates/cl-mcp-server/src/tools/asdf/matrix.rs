//! One call, several Lisps: `asdf-load-system` and `asdf-test-system` with
//! `lisps` run the same build or test run in an image of each Lisp, side
//! by side, and answer with one table (and the same matrix in
//! `structuredContent`): per Lisp built or not, with its first diagnostic,
//! passed/failed counts, and the tests whose outcome differs between Lisps
//! with each Lisp's failure message.
//!
//! Each run is the ordinary one-image call, addressed to the session's
//! image of that Lisp (one named after it, or any of its implementation,
//! else one started for the call: it stays for later calls).

use std::collections::BTreeMap;
use std::future::Future;
use std::time::Instant;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value as Json;

use crate::image::implementation::LispKind;
use crate::image::ImageConfig;
use crate::session::images;
use crate::tools::{ToolContext, ToolError, ToolOutput};

// `lisps`: `"all"` (every implementation installed here), one
// implementation's name, or a list of them (`["sbcl", "ecl", "clisp"]`).
// (No doc comment: it would replace the field's in the schema.)
#[derive(Deserialize, JsonSchema, Clone, Debug)]
#[serde(untagged)]
pub(super) enum LispsArg {
    Word(String),
    List(Vec<String>),
}

impl LispsArg {
    /// The implementations asked for, each once, in the order given.
    pub(super) fn names(&self, config: &ImageConfig) -> Result<Vec<String>, ToolError> {
        let asked: Vec<String> = match self {
            LispsArg::Word(w) if w.eq_ignore_ascii_case("all") => images::installed()
                .iter()
                .map(|k| k.name().to_string())
                .collect(),
            LispsArg::Word(w) => vec![w.clone()],
            LispsArg::List(l) => l.clone(),
        };
        let mut names: Vec<String> = Vec::new();
        for n in asked {
            images::resolve_lisp(&n, config)
                .map_err(|e| ToolError::Argument(format!("lisps: {e}")))?;
            if !names.contains(&n) {
                names.push(n);
            }
        }
        if names.is_empty() {
            return Err(ToolError::Argument(format!(
                "lisps: name at least one implementation (installed here: {}), or \"all\".",
                images::installed_names()
            )));
        }
        Ok(names)
    }
}

/// The matrix of a call with `lisps`.
#[derive(Serialize, JsonSchema, Debug)]
#[serde(rename_all = "camelCase")]
pub(super) struct Matrix {
    /// One row per Lisp, in the order asked.
    pub rows: Vec<MatrixRow>,
    /// Tests whose outcome is not the same on every Lisp (test runs).
    pub differing: Vec<DifferingTest>,
}

/// One Lisp's run.
#[derive(Serialize, JsonSchema, Debug)]
#[serde(rename_all = "camelCase")]
pub(super) struct MatrixRow {
    /// The implementation asked for.
    pub lisp: String,
    /// The image that ran it, as later calls' `image` takes it (its name;
    /// in a stateless call, its handle).
    pub image: String,
    /// Whether the system (and for tests, the test system) built.
    pub built: bool,
    /// The first error (else warning, else style-warning) of the
    /// project's files, or why the build failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub first_diagnostic: Option<String>,
    /// Loads: `loaded` or `failed`; tests: `passed`, `failed`, `error`,
    /// `unknown` (as `outcome` of a one-Lisp call).
    pub outcome: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub passed: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failed: Option<i64>,
    /// Each failed check: the test and the framework's message.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub failures: Vec<RowFailure>,
    /// Wall time of this Lisp's run, its image's start included.
    pub elapsed_ms: i64,
    /// What ended the run, when something did (a missing system, an error,
    /// a timeout, an image that would not start).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

#[derive(Serialize, JsonSchema, Debug, Clone)]
pub(super) struct RowFailure {
    pub test: String,
    pub message: String,
}

/// A test whose outcome differs between the Lisps.
#[derive(Serialize, JsonSchema, Debug)]
pub(super) struct DifferingTest {
    /// As `package::name`.
    pub test: String,
    /// Its outcome on each Lisp, in the rows' order.
    pub outcomes: Vec<TestOnLisp>,
}

#[derive(Serialize, JsonSchema, Debug)]
pub(super) struct TestOnLisp {
    pub lisp: String,
    /// `passed`, `failed`, or `not run` (the run did not get to report).
    pub outcome: String,
    /// The failure message(s), when it failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// The context addressing the session's image for `lisp`: the image named
/// so, else one of its implementation, else a new one named after it.
/// A stateless call has no session of its own: its rows run on the node's
/// default image where it is of that Lisp, else on an image started for the
/// call as `image-start` would (reached by its handle, stopped when idle),
/// never on an image another client started.
fn image_for(ctx: &ToolContext, lisp: &str) -> Result<ToolContext, String> {
    let session = &ctx.session;
    let kind = LispKind::from_name(lisp);
    // A stateless call names no image of the session: others' may be there.
    let by_name = (!ctx.stateless).then(|| ctx.for_image(lisp).ok()).flatten();
    if let Some(c) = by_name {
        return Ok(c);
    }
    if kind.is_some() && kind == session.first_image_kind() {
        return ctx
            .for_image(&session.first_image_name())
            .map_err(|e| e.to_string());
    }
    let of_its_kind = session
        .other_images()
        .into_iter()
        .find(|o| !ctx.stateless && kind.is_some() && o.kind == kind);
    if let Some(o) = of_its_kind {
        return ctx.for_image(&o.name).map_err(|e| e.to_string());
    }
    let started = session
        .start_image(None, lisp, ctx.stateless)
        .map_err(|e| e.to_string())?;
    if ctx.stateless {
        tokio::spawn(crate::tools::images::stop_when_idle(
            ctx.clone(),
            started.clone(),
        ));
    }
    ctx.for_image(&started.name).map_err(|e| e.to_string())
}

/// Runs `run` (the one-image call) on the session's image of each Lisp,
/// all at once; returns each Lisp's run, in order.
async fn across<F, Fut>(ctx: &ToolContext, lisps: &[String], run: F) -> Vec<LispRun>
where
    F: Fn(ToolContext) -> Fut,
    Fut: Future<Output = ToolOutput>,
{
    let total = lisps.len() as f64;
    let done = std::sync::atomic::AtomicUsize::new(0);
    let runs = lisps.iter().map(|lisp| {
        let target = image_for(ctx, lisp);
        let run = &run;
        let done = &done;
        async move {
            let t0 = Instant::now();
            let (image, out) = match target {
                Ok(c) => {
                    let _busy = c.image_usage().map(|u| u.enter());
                    (c.image_address(), run(c.clone()).await)
                }
                Err(e) => (lisp.clone(), ToolOutput::error(e)),
            };
            let n = done.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1;
            ctx.report_progress(n as f64, Some(total), Some(&format!("{lisp} done")));
            LispRun {
                lisp: lisp.clone(),
                image,
                out,
                elapsed_ms: t0.elapsed().as_millis() as i64,
            }
        }
    });
    futures::future::join_all(runs).await
}

/// The rows of a matrix call: `run` (the one-image call) on the session's
/// image of each Lisp of `lisps`, all at once; and when it started. A bad
/// `lisps` is the call's error.
pub(super) async fn rows<F, Fut>(
    ctx: &ToolContext,
    lisps: &LispsArg,
    test_run: bool,
    run: F,
) -> Result<(Vec<MatrixRow>, Instant), ToolOutput>
where
    F: Fn(ToolContext) -> Fut,
    Fut: Future<Output = ToolOutput>,
{
    let names = lisps
        .names(&ctx.session.config.image)
        .map_err(ToolOutput::error)?;
    let started = Instant::now();
    let runs = across(ctx, &names, |c| {
        let answer = run(c.clone());
        async move { crate::tools::lisp_call::finish(&c, answer.await) }
    })
    .await;
    let rows = runs.into_iter().map(|r| row(r, test_run)).collect();
    Ok((rows, started))
}

/// One Lisp's run of a matrix call.
pub(super) struct LispRun {
    pub lisp: String,
    /// The session's image that ran it.
    pub image: String,
    /// The one-image call's answer.
    pub out: ToolOutput,
    /// Its wall time, the image's start included.
    pub elapsed_ms: i64,
}

/// A row from a one-Lisp answer (its `structuredContent`, or its text when
/// it ended before the run).
fn row(run: LispRun, test_run: bool) -> MatrixRow {
    let LispRun {
        lisp,
        image,
        out,
        elapsed_ms,
    } = run;
    let Some(s) = &out.structured else {
        return MatrixRow {
            lisp,
            image,
            built: false,
            first_diagnostic: None,
            outcome: "error".into(),
            passed: None,
            failed: None,
            failures: Vec::new(),
            elapsed_ms,
            error: Some(first_line(&out.text)),
        };
    };
    let failed = s.get("failed").filter(|f| !f.is_null());
    let build_failed = failed.is_some_and(|f| f["operation"].as_str() != Some("test-op"));
    let error = s["error"].as_str().map(str::to_string);
    let missing = error.as_deref().is_some_and(|e| e.contains("MISSING"));
    let built = !build_failed && !missing && (test_run || s["success"] == Json::Bool(true));
    let first_diagnostic = first_diagnostic(s).or_else(|| {
        failed
            .and_then(|f| f["reason"].as_str())
            .map(str::to_string)
    });
    let outcome = if test_run {
        s["outcome"].as_str().unwrap_or("unknown").to_string()
    } else if s["success"] == Json::Bool(true) {
        "loaded".into()
    } else {
        "failed".into()
    };
    let failures = s["failures"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|f| RowFailure {
            test: f["test"].as_str().unwrap_or_default().to_string(),
            message: f["message"].as_str().unwrap_or_default().to_string(),
        })
        .collect();
    let error = error.or_else(|| {
        (out.text.contains("[TIMEOUT]")).then(|| "timed out (timeoutSeconds)".to_string())
    });
    MatrixRow {
        lisp,
        image,
        built,
        first_diagnostic,
        outcome,
        passed: s["summary"]["passed"].as_i64(),
        failed: s["summary"]["failed"].as_i64(),
        failures,
        elapsed_ms,
        error,
    }
}

fn first_line(text: &str) -> String {
    text.lines().next().unwrap_or("").to_string()
}

/// The project's first error, else warning, else style-warning, as
/// `path:line:column: severity: message`.
fn first_diagnostic(s: &Json) -> Option<String> {
    let diags: Vec<&Json> = s["diagnostics"]
        .as_array()?
        .iter()
        // Inside the project: the path is relative to its root.
        .filter(|d| d["path"].as_str().is_some_and(|p| !p.starts_with('/')))
        .collect();
    ["error", "warning", "style-warning"]
        .iter()
        .find_map(|sev| diags.iter().find(|d| d["severity"] == *sev))
        .map(|d| {
            let mut at = d["path"].as_str().unwrap_or_default().to_string();
            for k in ["line", "column"] {
                if let Some(n) = d[k].as_i64() {
                    at.push_str(&format!(":{n}"));
                }
            }
            format!(
                "{at}: {}: {}",
                d["severity"].as_str().unwrap_or_default(),
                d["message"]
                    .as_str()
                    .unwrap_or_default()
                    .lines()
                    .next()
                    .unwrap_or("")
            )
        })
}

/// The tests whose outcome is not the same on every Lisp. A Lisp whose
/// run recognised its framework's results passed every test it does not
/// list as failed; another did not run them.
pub(super) fn differing(rows: &[MatrixRow]) -> Vec<DifferingTest> {
    let mut tests: BTreeMap<&str, ()> = BTreeMap::new();
    for r in rows {
        for f in &r.failures {
            tests.insert(&f.test, ());
        }
    }
    let reported = |r: &MatrixRow| matches!(r.outcome.as_str(), "passed" | "failed");
    tests
        .keys()
        .filter_map(|test| {
            let outcomes: Vec<TestOnLisp> = rows
                .iter()
                .map(|r| {
                    let messages: Vec<&str> = r
                        .failures
                        .iter()
                        .filter(|f| f.test == *test)
                        .map(|f| f.message.as_str())
                        .collect();
                    let outcome = if !messages.is_empty() {
                        "failed"
                    } else if reported(r) {
                        "passed"
                    } else {
                        "not run"
                    };
                    TestOnLisp {
                        lisp: r.lisp.clone(),
                        outcome: outcome.into(),
                        message: (!messages.is_empty()).then(|| messages.join("; ")),
                    }
                })
                .collect();
            let first = &outcomes[0].outcome;
            outcomes
                .iter()
                .any(|o| &o.outcome != first)
                .then(|| DifferingTest {
                    test: test.to_string(),
                    outcomes,
                })
        })
        .collect()
}

/// The answer's text: a headline, the table, the differing tests, and
/// each run's error.
pub(super) fn render(what: &str, m: &Matrix, started: Instant, test_run: bool) -> String {
    let lisps: Vec<&str> = m.rows.iter().map(|r| r.lisp.as_str()).collect();
    let mut text = format!(
        "{what} on {} Lisps ({}), {:.1} s:\n",
        lisps.len(),
        lisps.join(", "),
        started.elapsed().as_secs_f64()
    );
    let count = |n: Option<i64>| n.map_or("-".to_string(), |n| n.to_string());
    let mut table = vec![if test_run {
        vec![
            "Lisp",
            "image",
            "built",
            "passed",
            "failed",
            "outcome",
            "time",
            "first diagnostic",
        ]
        .into_iter()
        .map(String::from)
        .collect::<Vec<_>>()
    } else {
        vec![
            "Lisp",
            "image",
            "built",
            "outcome",
            "time",
            "first diagnostic",
        ]
        .into_iter()
        .map(String::from)
        .collect()
    }];
    for r in &m.rows {
        let built = if r.built { "yes" } else { "no" }.to_string();
        let diag = r.first_diagnostic.clone().unwrap_or_default();
        let time = format!("{:.1} s", r.elapsed_ms as f64 / 1000.0);
        table.push(if test_run {
            vec![
                r.lisp.clone(),
                r.image.clone(),
                built,
                count(r.passed),
                count(r.failed),
                r.outcome.clone(),
                time,
                diag,
            ]
        } else {
            vec![
                r.lisp.clone(),
                r.image.clone(),
                built,
                r.outcome.clone(),
                time,
                diag,
            ]
        });
    }
    text.push_str(&markdown_table(&table));
    if !m.differing.is_empty() {
        text.push_str("\nTests whose outcome differs between Lisps:");
        for d in &m.differing {
            text.push_str(&format!("\n  {}:", d.test));
            for o in &d.outcomes {
                match &o.message {
                    Some(msg) => text.push_str(&format!("\n    {}: {}: {msg}", o.lisp, o.outcome)),
                    None => text.push_str(&format!("\n    {}: {}", o.lisp, o.outcome)),
                }
            }
        }
    } else if test_run {
        text.push_str("\nNo test's outcome differs between the Lisps.");
    }
    for r in m.rows.iter().filter(|r| r.error.is_some()) {
        text.push_str(&format!(
            "\n{}: {}",
            r.lisp,
            r.error.as_deref().unwrap_or_default()
        ));
    }
    text.push_str(
        "\nEach Lisp's full answer: the same call with `image` set to its image (the images \
         stay).",
    );
    text
}

/// Rows of cells as a Markdown table, columns padded (the first row is
/// the header; a missing cell is empty).
fn markdown_table(rows: &[Vec<String>]) -> String {
    let cell = |r: &Vec<String>, c: usize| r.get(c).map_or("", String::as_str).to_string();
    let widths: Vec<usize> = (0..rows[0].len())
        .map(|c| {
            rows.iter()
                .map(|r| cell(r, c).chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let line = |r: &Vec<String>| {
        let cells: Vec<String> = widths
            .iter()
            .enumerate()
            .map(|(c, w)| format!("{:<w$}", cell(r, c)))
            .collect();
        format!("| {} |", cells.join(" | "))
    };
    let mut out = vec![line(&rows[0])];
    out.push(format!(
        "|{}|",
        widths
            .iter()
            .map(|w| "-".repeat(w + 2))
            .collect::<Vec<_>>()
            .join("|")
    ));
    out.extend(rows[1..].iter().map(line));
    out.join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(lisp: &str, outcome: &str, failures: &[(&str, &str)]) -> MatrixRow {
        MatrixRow {
            lisp: lisp.into(),
            image: lisp.into(),
            built: true,
            first_diagnostic: None,
            outcome: outcome.into(),
            passed: None,
            failed: None,
            failures: failures
                .iter()
                .map(|(t, m)| RowFailure {
                    test: t.to_string(),
                    message: m.to_string(),
                })
                .collect(),
            elapsed_ms: 0,
            error: None,
        }
    }

    #[test]
    fn a_test_failing_everywhere_does_not_differ() {
        let rows = [
            r("sbcl", "failed", &[("P::A", "x")]),
            r("ecl", "failed", &[("P::A", "y"), ("P::B", "z")]),
            r("clisp", "error", &[]),
        ];
        let d = differing(&rows);
        // A fails on two and did not run on the third: it differs; B too.
        assert_eq!(d.len(), 2);
        let b = d.iter().find(|t| t.test == "P::B").unwrap();
        let outcomes: Vec<&str> = b.outcomes.iter().map(|o| o.outcome.as_str()).collect();
        assert_eq!(outcomes, ["passed", "failed", "not run"]);
        assert_eq!(b.outcomes[1].message.as_deref(), Some("z"));
        let same = [
            r("sbcl", "failed", &[("P::A", "x")]),
            r("ecl", "failed", &[("P::A", "x")]),
        ];
        assert!(differing(&same).is_empty());
    }

    /// Every row has the header's cells: a test run's row once had one
    /// more (its time) than its header, and the first diagnostic fell out
    /// of the text.
    #[test]
    fn every_column_has_its_header() {
        for test_run in [true, false] {
            let mut row = r("abcl", "failed", &[]);
            row.first_diagnostic = Some("main.lisp:3:1: style-warning: X".into());
            row.elapsed_ms = 5400;
            let m = Matrix {
                rows: vec![row],
                differing: Vec::new(),
            };
            let text = render("Tested trial", &m, Instant::now(), test_run);
            let lines: Vec<&str> = text.lines().filter(|l| l.starts_with('|')).collect();
            let cells = |l: &str| l.matches('|').count();
            assert_eq!(cells(lines[0]), cells(lines[2]), "{text}");
            assert!(lines[0].contains("time"), "{text}");
            assert!(lines[2].contains("| 5.4 s"), "{text}");
            assert!(lines[2].contains("style-warning: X"), "{text}");
        }
    }

    #[test]
    fn the_table_lines_up() {
        let t = markdown_table(&[
            vec!["Lisp".into(), "outcome".into()],
            vec!["clisp".into(), "passed".into()],
        ]);
        assert_eq!(
            t,
            "| Lisp  | outcome |\n|-------|---------|\n| clisp | passed  |"
        );
    }
}
