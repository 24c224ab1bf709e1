//! What a build (compile, load, test) returns, shared with the asdf
//! tools: compiler diagnostics (a reader error moved to the form that does
//! not close), the build error, an interruption, the captured output, and
//! the result's text and `structuredContent` ([`BuildOutput`]).

use super::location::Location;
use crate::tools::fs_paths;
use crate::tools::lisp_call::{
    self, plist_bool, plist_i64, plist_items, plist_list, plist_str, plist_strings,
};
use crate::tools::ToolError;
use crate::tools::{ToolContext, ToolOutput};
use lisp_syntax::data::Value;
use schemars::JsonSchema;
use serde::Serialize;
use std::path::Path;

// ---------------------------------------------------------------------------
// Diagnostics (shared with the asdf tools).

/// One compiler diagnostic.
#[derive(Serialize, JsonSchema, Debug, Clone, PartialEq)]
pub struct Diagnostic {
    /// `error`, `warning`, `style-warning` or `note`.
    pub severity: String,
    pub message: String,
    #[serde(flatten)]
    pub location: Location,
}

/// Reads the `:diagnostics` of a build helper's result.
pub fn diagnostics_from(v: &Value, root: &Path) -> Vec<Diagnostic> {
    let mut diagnostics = compiler_diagnostics(v, root);
    // A reader error some Lisps (CLISP) signal out of the build instead of
    // reporting it as the compiler's: a diagnostic of the failed file, so
    // it too names the form that does not close.
    if !diagnostics.iter().any(|d| d.severity == "error") {
        let failed = v.plist_get("failed").filter(|f| !f.is_nil());
        if let Some((file, reason)) =
            failed.and_then(|f| Some((plist_str(f, "path")?, plist_str(f, "reason")?)))
        {
            let mut diagnostic = Diagnostic {
                severity: "error".into(),
                message: reason,
                location: Location {
                    path: Some(fs_paths::display_path(root, Path::new(&file))),
                    line: None,
                    column: None,
                },
            };
            name_the_broken_form(&mut diagnostic, Path::new(&file));
            if diagnostic.location.line.is_some() {
                diagnostics.insert(0, diagnostic);
            }
        }
    }
    diagnostics
}

fn compiler_diagnostics(v: &Value, root: &Path) -> Vec<Diagnostic> {
    plist_items(v, "diagnostics", |d| {
        let mut diagnostic = Diagnostic {
            severity: plist_str(d, "severity").unwrap_or_else(|| "note".into()),
            message: plist_str(d, "message").unwrap_or_default(),
            location: Location::from_plist(d, root),
        };
        if let Some(file) = plist_str(d, "path") {
            name_the_broken_form(&mut diagnostic, Path::new(&file));
        }
        diagnostic
    })
}

/// A reader error is placed by the compiler where it stopped reading: for a
/// missing `)`, the end of the file, which says nothing about which form is
/// broken. When the file's parentheses do not balance, the diagnostic moves
/// to the form that does not close (or the `)` too many), and says which
/// form it is and where its indentation puts the closers, as
/// `lisp-check-parens` does.
fn name_the_broken_form(d: &mut Diagnostic, file: &Path) {
    const READ_ERRORS: [&str; 6] = [
        "read error",
        "reader-error",
        "end of file",
        "end-of-file",
        "unmatched close parenthesis",
        "ends within an object",
    ];
    let message = d.message.to_lowercase();
    if d.severity != "error" || !READ_ERRORS.iter().any(|e| message.contains(e)) {
        return;
    }
    let small = std::fs::metadata(file).is_ok_and(|m| m.len() <= 8 << 20);
    let Some(text) = small.then(|| std::fs::read_to_string(file).ok()).flatten() else {
        return;
    };
    let (out, said) = crate::tools::source::check::check_text(&text, 0, 0);
    if let (false, Some(at)) = (out.ok, out.position) {
        d.location.line = Some(at.line as i64);
        d.location.column = Some(at.column as i64);
        d.message = format!("{}\n{said}", d.message.trim_end());
    }
}

/// `path:line:column: severity: message`, one per line (message lines after
/// the first indented).
pub fn render_diagnostics(diags: &[Diagnostic]) -> String {
    diags
        .iter()
        .map(|d| {
            let msg = d.message.trim_end().replace('\n', "\n    ");
            format!("{}: {}: {}", d.location.prefix(), d.severity, msg)
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The Lisp condition a build ended with (`:error` plist), as text.
pub fn render_build_error(v: &Value) -> Option<String> {
    let e = v.plist_get("error").filter(|e| !e.is_nil())?;
    let mut text = format!(
        "[ERROR] {}\n{}",
        plist_str(e, "type").unwrap_or_default(),
        plist_str(e, "message").unwrap_or_default()
    );
    let frames = plist_list(e, "backtrace").unwrap_or(&[]);
    if !frames.is_empty() {
        text.push_str("\n\n[Backtrace]");
        for f in frames {
            if let Some([i, s]) = f.as_list() {
                text.push_str(&format!(
                    "\n{}: {}",
                    i.as_i64().unwrap_or(0),
                    s.as_str().unwrap_or("")
                ));
            }
        }
    }
    Some(text)
}

/// Default `timeoutSeconds` of the build tools (compile, load, test).
pub const BUILD_TIMEOUT_SECONDS: f64 = 600.0;

/// The validated timeout of a build tool call.
pub fn build_timeout(seconds: Option<f64>) -> Result<std::time::Duration, ToolError> {
    lisp_call::timeout_arg(seconds, BUILD_TIMEOUT_SECONDS)
}

/// The `[TIMEOUT]`/`[INTERRUPTED]` line of a build that was stopped, if it was.
pub fn render_interruption(v: &Value, what: &str, timeout: std::time::Duration) -> Option<String> {
    if !plist_bool(v, "interrupted") {
        return None;
    }
    let mut text = if plist_bool(v, "timed-out") {
        format!(
            "[TIMEOUT] {what} did not finish within {} (timeoutSeconds) and was interrupted.",
            crate::tools::eval::seconds_text(timeout.as_secs_f64())
        )
    } else {
        format!("[INTERRUPTED] {what} was interrupted.")
    };
    let frames = plist_strings(v, "where");
    if !frames.is_empty() {
        text.push_str("\nIt was in:");
        for f in frames {
            text.push_str(&format!("\n  {f}"));
        }
    }
    text.push_str("\nThe image is still running; its state is intact.");
    Some(text)
}

/// `[stdout]`/`[stderr]` sections of a build's captured output, if any.
pub fn render_build_output(v: &Value) -> String {
    let mut text = String::new();
    for (key, label) in [("stdout", "[stdout]"), ("stderr", "[stderr]")] {
        if let Some(s) = plist_str(v, key).filter(|s| !s.trim().is_empty()) {
            text.push_str(&format!("\n\n{label}\n{}", s.trim_end()));
        }
    }
    text
}

/// Which part of a build failed and why.
#[derive(Serialize, JsonSchema, Debug, Clone, PartialEq)]
pub struct FailedAction {
    /// The ASDF operation (`compile-op`, `load-op`, ...), when an ASDF
    /// action failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub operation: Option<String>,
    /// The component as `system/file`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub component: Option<String>,
    /// The component's file (relative to the project root when inside it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// Why, in one line.
    pub reason: String,
}

impl FailedAction {
    fn from_plist(v: &Value, root: &Path) -> Option<FailedAction> {
        let f = v.plist_get("failed").filter(|f| !f.is_nil())?;
        Some(FailedAction {
            operation: plist_str(f, "operation"),
            component: plist_str(f, "component"),
            path: plist_str(f, "path").map(|p| fs_paths::display_path(root, Path::new(&p))),
            reason: plist_str(f, "reason").unwrap_or_default(),
        })
    }

    /// `compiling bad/b (src/b.lisp): reason`.
    pub fn line(&self) -> String {
        let what = match self.operation.as_deref() {
            Some("compile-op") => "compiling",
            Some("load-op") => "loading",
            Some("test-op") => "testing",
            Some(op) => op,
            None => "",
        };
        let mut text = String::new();
        if let Some(c) = &self.component {
            text.push_str(format!("{what} {c}").trim());
            if let Some(p) = &self.path {
                text.push_str(&format!(" ({p})"));
            }
            text.push_str(": ");
        }
        text.push_str(&self.reason);
        text
    }
}

/// `structuredContent` of `lisp-compile-file` and `asdf-load-system`.
#[derive(Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BuildOutput {
    /// No error, and `failureP` false: a full WARNING fails the build, as
    /// ASDF treats it; style-warnings and notes do not.
    pub success: bool,
    /// `compile-file`'s warnings-p: some warning (style-warnings included)
    /// or error was reported. For a system, over all its files.
    pub warnings_p: bool,
    /// `compile-file`'s failure-p: an error or a full WARNING was reported
    /// (or the build ended with an error). For a system, over all its files.
    pub failure_p: bool,
    /// Every compiler diagnostic, whether the build succeeded or not.
    pub diagnostics: Vec<Diagnostic>,
    pub elapsed_ms: i64,
    /// The error the build ended with, if any (`TYPE: message`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// When an ASDF build failed: which component, and why in one line.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failed: Option<FailedAction>,
    /// For an `.asd` file: the systems it defines.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub systems: Option<Vec<String>>,
}

impl BuildOutput {
    /// Reads a build helper's plist.
    pub fn from_plist(v: &Value, root: &Path) -> BuildOutput {
        BuildOutput {
            success: plist_bool(v, "success"),
            warnings_p: plist_bool(v, "warnings-p"),
            failure_p: plist_bool(v, "failure-p"),
            diagnostics: diagnostics_from(v, root),
            elapsed_ms: plist_i64(v, "elapsed-ms").unwrap_or(0),
            error: v.plist_get("error").filter(|e| !e.is_nil()).map(|e| {
                format!(
                    "{}: {}",
                    plist_str(e, "type").unwrap_or_default(),
                    plist_str(e, "message").unwrap_or_default()
                )
            }),
            failed: FailedAction::from_plist(v, root),
            systems: None,
        }
    }

    /// Counts per severity, e.g. `1 error, 2 warnings`.
    pub fn summary(&self) -> String {
        let count = |s: &str| self.diagnostics.iter().filter(|d| d.severity == s).count();
        let parts: Vec<String> = [
            ("error", count("error")),
            ("warning", count("warning")),
            ("style-warning", count("style-warning")),
            ("note", count("note")),
        ]
        .iter()
        .filter(|(_, n)| *n > 0)
        .map(|(s, n)| format!("{n} {s}{}", if *n == 1 { "" } else { "s" }))
        .collect();
        if parts.is_empty() {
            "no diagnostics".to_string()
        } else {
            parts.join(", ")
        }
    }
}

/// The result of a compile or load: the headline, then the diagnostics as
/// `path:line:column: severity: message`, any build error or interruption,
/// and the captured output when it failed.
/// A build note for a client that asked for logs: the headline at `info`
/// (`warning` when the build failed), each warning or error diagnostic at
/// `warning`/`error`.
pub fn note_build(ctx: &ToolContext, out: &BuildOutput, headline: &str) {
    use crate::tools::LogLevel;
    ctx.log(
        if out.success {
            LogLevel::Info
        } else {
            LogLevel::Warning
        },
        headline,
    );
    for d in &out.diagnostics {
        let level = match d.severity.as_str() {
            "error" => LogLevel::Error,
            "warning" => LogLevel::Warning,
            _ => continue,
        };
        ctx.log(level, &render_diagnostics(std::slice::from_ref(d)));
    }
}

pub fn build_result(
    headline: String,
    out: BuildOutput,
    v: &Value,
    what: &str,
    timeout: std::time::Duration,
) -> ToolOutput {
    let mut text = headline;
    if let Some(f) = &out.failed {
        text.push_str(&format!("\nFailed: {}", f.line()));
    }
    if !out.diagnostics.is_empty() {
        text.push('\n');
        text.push_str(&render_diagnostics(&out.diagnostics));
    }
    if let Some(e) = render_build_error(v) {
        text.push_str(&format!("\n\n{e}"));
    }
    if let Some(t) = render_interruption(v, what, timeout) {
        text.push_str(&format!("\n\n{t}"));
    }
    if !out.success {
        text.push_str(&render_build_output(v));
    }
    let is_error = !out.success;
    ToolOutput::structured(text, serde_json::to_value(out).unwrap_or_default()).with_error(is_error)
}

#[cfg(test)]
mod tests {
    use super::*;
    use lisp_syntax::data;

    #[test]
    fn diagnostics_are_relative_and_rendered() {
        let v = data::read(
            r#"(:success nil :diagnostics ((:severity "warning" :message "bad
thing" :path "/proj/src/a.lisp" :line 5 :column 3) (:severity "error" :message "no file" :path nil))
               :elapsed-ms 12 :error nil)"#,
        )
        .unwrap();
        let out = BuildOutput::from_plist(&v, Path::new("/proj"));
        assert_eq!(
            out.diagnostics[0].location.path.as_deref(),
            Some("src/a.lisp")
        );
        assert_eq!(
            render_diagnostics(&out.diagnostics),
            "src/a.lisp:5:3: warning: bad\n    thing\n<no file>: error: no file"
        );
        assert_eq!(out.summary(), "1 error, 1 warning");
        let json = serde_json::to_value(&out).unwrap();
        assert_eq!(json["diagnostics"][0]["line"], 5);
        assert_eq!(json["diagnostics"][0]["path"], "src/a.lisp");
        assert_eq!(json["elapsedMs"], 12);
    }
}
