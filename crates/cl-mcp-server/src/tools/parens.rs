//! Agent-written parentheses, repaired before they are written: the shared
//! step of `fs-write-file` (Lisp files), `lisp-edit-form` (its `content`)
//! and `evaluate-lisp` (which only shows the repair). The rule and its
//! refusals are `lisp_syntax::repair`; this module words the outcome for a
//! model: each change as a sentence and as diff-like lines, so the model
//! sees its mistake. Also which files the server knows as Lisp.

use std::path::Path;

use lisp_syntax::repair::{repair_parens, Change, Refusal, Repair};

/// File extensions treated as Lisp source.
pub const LISP_EXTENSIONS: [&str; 5] = ["lisp", "lsp", "cl", "asd", "ros"];

/// Whether `path` names a Lisp source file (by extension).
pub fn is_lisp_path(path: &Path) -> bool {
    path.extension()
        .and_then(|e| e.to_str())
        .is_some_and(|e| LISP_EXTENSIONS.iter().any(|l| l.eq_ignore_ascii_case(e)))
}

/// A repaired text and what changed.
pub struct Repaired {
    /// The text with its closers placed by indentation.
    pub text: String,
    /// `added ")" at line 12, column 30`, one per change.
    pub changes: Vec<String>,
    /// Each changed line as `-12: old` / `+12: new`.
    pub diff: String,
}

/// `Ok(None)` when `text` needs nothing (it reads, or its problems are not
/// about parentheses); `Ok(Some(_))` with the repair; `Err` with why the
/// closers cannot be placed (the form, the line, the likely fix).
pub fn repair(text: &str) -> Result<Option<Repaired>, Refusal> {
    match repair_parens(text) {
        Repair::Unchanged => Ok(None),
        Repair::Refused(r) => Err(r),
        Repair::Repaired {
            text: repaired,
            changes,
        } => {
            let diff = diff_lines(text, &repaired, &changes);
            Ok(Some(Repaired {
                text: repaired,
                changes: changes.iter().map(|c| c.to_string()).collect(),
                diff,
            }))
        }
    }
}

/// The changed lines, before and after (lines are the same in both texts:
/// only `)` characters move).
fn diff_lines(old: &str, new: &str, changes: &[Change]) -> String {
    let old_lines: Vec<&str> = old.split('\n').collect();
    let new_lines: Vec<&str> = new.split('\n').collect();
    let mut seen = Vec::new();
    let mut out = String::new();
    for c in changes {
        if seen.contains(&c.line) {
            continue;
        }
        seen.push(c.line);
        let i = c.line - 1;
        let strip = |s: &str| s.trim_end_matches('\r').to_string();
        out.push_str(&format!(
            "-{}: {}\n+{}: {}\n",
            c.line,
            strip(old_lines.get(i).unwrap_or(&"")),
            c.line,
            strip(new_lines.get(i).unwrap_or(&""))
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_repair_is_worded_with_its_lines() {
        let r = repair("(defun f (x)\n  (g x)\n\n(defun h ())\n")
            .unwrap()
            .unwrap();
        assert_eq!(r.text, "(defun f (x)\n  (g x))\n\n(defun h ())\n");
        assert_eq!(r.changes, vec!["added \")\" at line 2, column 8"]);
        assert_eq!(r.diff, "-2:   (g x)\n+2:   (g x))\n");
        assert!(repair("(a)\n").unwrap().is_none());
        let e = repair("(defun f ()\n  \"doc\n").err().unwrap();
        assert!(e.to_string().contains("`(defun f` (line 1)"), "{e}");
    }
}
