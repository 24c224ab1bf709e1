//! The text of a build's or test run's answer, sized for a model: which
//! diagnostics are listed (the project's own files', at the level asked)
//! and one line counting the rest; which lines of the suite's own output
//! are quoted (its summary, failure and abort lines and its last lines,
//! never the compiler's). The structured result keeps everything.

use std::path::Path;

use lisp_syntax::data::Value;
use schemars::JsonSchema;
use serde::Deserialize;

use super::super::code::Diagnostic;
use super::super::lisp_call::{plist_bool, plist_items, plist_str};

// Which diagnostics the answer's text lists (`diagnostics` argument). No
// doc comment: it would be the schema's description (the byte budget).
#[derive(Deserialize, JsonSchema, Clone, Copy, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum DiagnosticsLevel {
    // Plain comments, not doc comments: each would be a schema
    // description a model reads (the tool list's byte budget).
    // Errors only.
    Errors,
    // Errors and warnings (style-warnings too); the default.
    #[default]
    Warnings,
    // Compiler notes too.
    All,
}

impl DiagnosticsLevel {
    fn admits(self, severity: &str) -> bool {
        match self {
            Self::Errors => severity == "error",
            Self::Warnings => severity != "note",
            Self::All => true,
        }
    }
}

/// The diagnostics the text lists, and the line counting the others
/// (empty when none is left out).
pub fn listed_diagnostics(
    diags: &[Diagnostic],
    v: &Value,
    root: &Path,
    level: DiagnosticsLevel,
) -> (Vec<Diagnostic>, String) {
    // In the same order as `diags`: the image's `:origin` (the system whose
    // step made a file-less note) and `:during-test` (made by the suite's
    // own compiling while it ran).
    let extra = plist_items(v, "diagnostics", |d| {
        (plist_str(d, "origin"), plist_bool(d, "during-test"))
    });
    let mut listed = Vec::new();
    let mut project = Counts::default();
    let mut outside = Counts::default();
    let mut redefinitions = 0usize;
    let mut during_test = 0usize;
    let mut not_kept = 0usize;
    for (i, d) in diags.iter().enumerate() {
        let (origin, in_test) = extra.get(i).cloned().unwrap_or_default();
        if let Some(n) = dropped_count(d) {
            not_kept += n;
            continue;
        }
        if d.message.starts_with("Redefining ") || d.message.starts_with("redefining ") {
            redefinitions += 1;
            continue;
        }
        let is_outside = match (&d.location.path, origin) {
            (Some(p), _) => Path::new(p).is_absolute(),
            (None, Some(origin)) => !Path::new(&origin).starts_with(root),
            (None, None) => false,
        };
        if is_outside {
            outside.add(&d.severity);
        } else if d.location.path.is_none() && in_test && level != DiagnosticsLevel::All {
            during_test += 1;
        } else if level.admits(&d.severity) {
            listed.push(d.clone());
        } else {
            project.add(&d.severity);
        }
    }
    let mut parts = Vec::new();
    if !project.is_empty() {
        parts.push(project.text());
    }
    if redefinitions > 0 {
        parts.push(format!(
            "{} redefinition warning{}",
            thousands(redefinitions),
            plural(redefinitions)
        ));
    }
    if during_test > 0 {
        parts.push(format!(
            "{} from the suite's own compiling while it ran",
            thousands(during_test)
        ));
    }
    if !outside.is_empty() {
        parts.push(format!("in dependencies {}", outside.text()));
    }
    if not_kept > 0 {
        parts.push(format!("{} more not kept", thousands(not_kept)));
    }
    let line = if parts.is_empty() {
        String::new()
    } else {
        format!("Not listed: {}; see `diagnostics`", parts.join("; "))
    };
    (listed, line)
}

/// A listed diagnostic's message is cut to this many characters.
const DIAGNOSTIC_CHARS: usize = 300;

/// `path:line:column: severity: message`, one a line, each message on one
/// line (the compiler lays its type names out over many), a warning's cut
/// to `DIAGNOSTIC_CHARS`: `structuredContent.diagnostics` has them whole.
pub fn render_listed(diags: &[Diagnostic]) -> String {
    diags
        .iter()
        .map(|d| {
            let message = d.message.split_whitespace().collect::<Vec<_>>().join(" ");
            // An error is whole: it may end with the fix (where a closer goes).
            let message = if d.severity == "error" {
                message
            } else {
                clip(&message, DIAGNOSTIC_CHARS)
            };
            format!("{}: {}: {message}", d.location.prefix(), d.severity)
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// `text` cut to `n` characters, `…` marking the cut.
pub fn clip(text: &str, n: usize) -> String {
    if text.chars().count() > n {
        format!("{}…", text.chars().take(n).collect::<String>())
    } else {
        text.to_string()
    }
}

/// The count of the image's `[N more diagnostics]` marker, if `d` is it.
fn dropped_count(d: &Diagnostic) -> Option<usize> {
    let rest = d.message.strip_prefix('[')?;
    let n = rest.strip_suffix(" more diagnostics]")?;
    n.parse().ok()
}

#[derive(Default)]
struct Counts {
    by_severity: [usize; 4],
}

const SEVERITIES: [&str; 4] = ["error", "warning", "style-warning", "note"];

impl Counts {
    fn add(&mut self, severity: &str) {
        let i = SEVERITIES.iter().position(|s| *s == severity).unwrap_or(3);
        self.by_severity[i] += 1;
    }

    fn is_empty(&self) -> bool {
        self.by_severity.iter().all(|n| *n == 0)
    }

    /// `1,077 notes, 12 style-warnings`.
    fn text(&self) -> String {
        SEVERITIES
            .iter()
            .zip(self.by_severity)
            .filter(|(_, n)| *n > 0)
            .map(|(s, n)| format!("{} {s}{}", thousands(n), plural(n)))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

fn plural(n: usize) -> &'static str {
    if n == 1 {
        ""
    } else {
        "s"
    }
}

/// `1077` as `1,077`.
fn thousands(n: usize) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// A line the compiler printed (SBCL's `; caught WARNING:`, ECL's
/// `;;; Compiling`), not the suite: one semicolon or three start it (a
/// Parachute report line starts with two). The image keeps them out of
/// `suite_output` by the same rule (`compiler-line-p`).
fn compiler_line(line: &str) -> bool {
    line.starts_with(';') && (!line[1..].starts_with(';') || line.starts_with(";;;"))
}

/// Words that mark a line of a suite's output as one to quote whatever
/// came before it: summaries, failures, aborts, errors.
const KEY_WORDS: [&str; 9] = [
    "fail", "error", "abort", "passed", "summary", "wanted", "expected", "actual", "got:",
];

/// At most this many bytes of the suite's output are quoted.
const EXCERPT_BYTES: usize = 1200;

/// The lines of the suite's own output to quote, by priority, not arrival:
/// its last lines, then the lines holding a key word (summary, failure,
/// abort), latest first, within `EXCERPT_BYTES`; in their order, a `…`
/// line where lines were left out. Empty when there is no output.
pub fn suite_excerpt(output: &str) -> String {
    const LAST_LINES: usize = 8;
    const LINE_CHARS: usize = 240;
    let lines: Vec<&str> = output
        .lines()
        .map(str::trim_end)
        .filter(|l| !l.trim().is_empty() && l.trim() != "." && !compiler_line(l))
        .collect();
    if lines.is_empty() {
        return String::new();
    }
    let cut = |l: &str| -> String {
        if l.chars().count() > LINE_CHARS {
            format!("{}…", l.chars().take(LINE_CHARS).collect::<String>())
        } else {
            l.to_string()
        }
    };
    let mut chosen = vec![false; lines.len()];
    let mut bytes = 0usize;
    let last = lines.len().saturating_sub(LAST_LINES);
    let key = |l: &str| {
        let lower = l.to_lowercase();
        KEY_WORDS.iter().any(|w| lower.contains(w))
    };
    // The last lines first (newest first), then key lines, newest first.
    let order = (last..lines.len())
        .rev()
        .chain((0..last).rev().filter(|&i| key(lines[i])));
    for i in order {
        let size = cut(lines[i]).len() + 1;
        if bytes + size > EXCERPT_BYTES {
            continue;
        }
        bytes += size;
        chosen[i] = true;
    }
    let mut out = Vec::new();
    let mut gap = false;
    for (i, l) in lines.iter().enumerate() {
        if chosen[i] {
            if gap && !out.is_empty() {
                out.push("…".to_string());
            }
            gap = false;
            out.push(cut(l));
        } else {
            gap = true;
        }
    }
    if !chosen[0] {
        out.insert(0, "…".to_string());
    }
    out.join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_read_with_thousands() {
        assert_eq!(thousands(7), "7");
        assert_eq!(thousands(1077), "1,077");
        assert_eq!(thousands(1234567), "1,234,567");
    }

    #[test]
    fn the_excerpt_keeps_key_lines_and_the_end_by_priority() {
        let mut out =
            String::from("Begin t test\nTest t aborted by signalling an uncaught error:\n");
        for i in 0..2000 {
            out.push_str(&format!("progress line {i}\n"));
        }
        out.push_str("the end\n");
        let e = suite_excerpt(&out);
        assert!(e.contains("aborted by signalling"), "{e}");
        assert!(e.ends_with("the end"), "{e}");
        assert!(!e.contains("progress line 5\n"), "{e}");
        assert!(e.len() <= EXCERPT_BYTES + 40, "{}", e.len());
    }
}
