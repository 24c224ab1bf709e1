//! Agent-written parentheses, repaired before they are written: the shared
//! step of `fs-write-file` (Lisp files), `lisp-edit-form` (its `content`)
//! and `evaluate-lisp` (which only shows the repair). The rule and its
//! refusals are `lisp_syntax::repair`; this module words the outcome for a
//! model: each change as a sentence and as diff-like lines, so the model
//! sees its mistake. Also which files the server knows as Lisp.

use std::path::Path;

use lisp_syntax::cst::LineIndex;
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
    /// `added ")" at line 12, column 30`, one per change (at most
    /// `lisp_syntax::repair::MAX_PAREN_ERRORS`).
    pub changes: Vec<String>,
    /// Each changed line as `-12: old` / `+12: new`, the first
    /// [`SHOWN_LINES`] of them, then a line counting the others.
    pub diff: String,
}

/// How many changes and changed lines an answer spells out; the others
/// are counted.
pub const SHOWN_LINES: usize = 20;

impl Repaired {
    /// The changes as one phrase: the first [`SHOWN_LINES`] joined by `; `,
    /// then how many more.
    pub fn changes_phrase(&self) -> String {
        changes_phrase(&self.changes)
    }
}

/// `changes` as one phrase: the first [`SHOWN_LINES`] joined by `; `, then
/// how many more.
pub fn changes_phrase(changes: &[String]) -> String {
    let mut s = changes
        .iter()
        .take(SHOWN_LINES)
        .cloned()
        .collect::<Vec<_>>()
        .join("; ");
    if changes.len() > SHOWN_LINES {
        s.push_str(&format!("; and {} more", changes.len() - SHOWN_LINES));
    }
    s
}

/// `Ok(None)` when `text` needs nothing (it reads, or its problems are not
/// about parentheses); `Ok(Some(_))` with the repair; `Err` with why the
/// closers cannot be placed (the form, the line, the likely fix).
pub fn repair(text: &str) -> Result<Option<Repaired>, Refusal> {
    let out = repair_worded(text);
    if text.len() >= GIVE_BACK_AFTER {
        give_memory_back();
    }
    out
}

/// Text this long (a megabyte) has the repair's memory handed back to the
/// system afterwards: its syntax trees take some 50 bytes a node, hundreds
/// of megabytes for a text of a few, which the allocator would otherwise
/// keep in the blocking thread's arena.
const GIVE_BACK_AFTER: usize = 1 << 20;

/// Returns the free memory of glibc's arenas to the system.
fn give_memory_back() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim(3) only releases free memory the allocator holds;
    // it takes no pointers and is safe to call from any thread.
    unsafe {
        libc::malloc_trim(0);
    }
}

fn repair_worded(text: &str) -> Result<Option<Repaired>, Refusal> {
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
/// only `)` characters move): the first [`SHOWN_LINES`], a line longer than
/// [`SHOWN_LINE_BYTES`] cut to that much around its first change, then how
/// many more. Changes come in text order, so a line's changes are next to
/// each other.
fn diff_lines(old: &str, new: &str, changes: &[Change]) -> String {
    let old_lines = LineIndex::new(old);
    let new_lines = LineIndex::new(new);
    let mut lines: Vec<(usize, usize)> = changes.iter().map(|c| (c.line, c.offset)).collect();
    lines.dedup_by_key(|(line, _)| *line);
    let mut out = String::new();
    for &(n, at) in lines.iter().take(SHOWN_LINES) {
        out.push_str(&format!(
            "-{n}: {}\n+{n}: {}\n",
            line_text(old, &old_lines, n, at),
            line_text(new, &new_lines, n, at),
        ));
    }
    if lines.len() > SHOWN_LINES {
        out.push_str(&format!(
            "({} more changed lines not shown)\n",
            lines.len() - SHOWN_LINES
        ));
    }
    out
}

/// Longest stretch of a changed line shown, in bytes.
pub const SHOWN_LINE_BYTES: usize = 240;

/// Line `n` (1-based) of `text` without its line ending; a longer one than
/// [`SHOWN_LINE_BYTES`] cut to that much around `at` (`…` marks a cut).
fn line_text(text: &str, index: &LineIndex, n: usize, at: usize) -> String {
    let (Some(start), Some(end)) = (index.line_start(n), index.line_end(n)) else {
        return String::new();
    };
    let end = if text[..end].ends_with('\r') {
        end - 1
    } else {
        end
    };
    if end - start <= SHOWN_LINE_BYTES {
        return text[start..end].to_string();
    }
    let floor = |mut i: usize| {
        while !text.is_char_boundary(i) {
            i -= 1;
        }
        i
    };
    let from = floor(
        at.clamp(start, end)
            .saturating_sub(SHOWN_LINE_BYTES / 2)
            .max(start),
    );
    let to = floor((from + SHOWN_LINE_BYTES).min(end));
    format!(
        "{}{}{}",
        if from > start { "…" } else { "" },
        &text[from..to],
        if to < end { "…" } else { "" }
    )
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
