//! Closing parentheses repaired from indentation.
//!
//! A model that writes Lisp drops or doubles a closing parenthesis now and
//! then; the text then no longer reads, and every later structural edit of
//! the file fails. The indentation it wrote is almost always right, so the
//! closers can be placed from it. The rule is the one of parinfer's indent
//! mode, applied to Common Lisp on this crate's reader (strings, comments,
//! `|sym|`, `#\(` and every other lexical rule come from [`crate::cst`]):
//!
//! - the closers at the end of a line (its *trail*) are taken out;
//! - a list stays open until the next code line indented at or left of its
//!   opener's column (the column of `(`, of `#` for `#(`), and is then
//!   closed at the end of the previous code line (before a trailing
//!   comment); the end of the text closes everything.
//!
//! Closers inside a line are kept as written. Comment lines, blank lines and
//! lines that start inside a string or block comment do not count.
//!
//! [`repair_parens`] is conservative, because a wrong repair is worse than
//! none:
//!
//! - text that reads is returned unchanged, whatever its indentation;
//! - a line starting at the column of the text's first code line (column 0
//!   in a file) starts a *segment*; runs of segments whose parentheses
//!   balance together (a `#+sbcl` at column 0 inside a `defun`) are left
//!   alone, and so are segments that balance on their own;
//! - in the rest, the repair may only add closers where some are missing, or
//!   only remove them where there are too many, and must make the text read.
//!   When the indentation disagrees with the structure in a way that would
//!   need more (a closer in the middle of a line to move, a line indented as
//!   if inside a form that the indentation already closed, additions and
//!   removals both), or is weak evidence (a line the repair moves into a
//!   list it does not line up with, an operator such as `(defun f (x)`
//!   closed on its own first line, closers on a line of their own next to
//!   the change), it refuses, naming the form, the line, and the likely fix;
//! - except where one form is one closer short or over and the end of the
//!   form is the one place that leaves the fewest lines lined up with
//!   nothing (`by_least_disagreement`): a form whose indentation is off in
//!   a line but whose last line was miscounted.

use std::fmt;

use crate::cst::{self, NodeKind};

mod apply;
mod indentation;
mod least_disagreement;
mod lines;
mod plausible;
mod shape;
#[cfg(test)]
mod tests;

use indentation::by_indentation;
use least_disagreement::by_least_disagreement;

/// The outcome of [`repair_parens`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Repair {
    /// The text's parentheses balance (or its only problems are not about
    /// parentheses): nothing to do.
    Unchanged,
    /// Closers were added or removed; `text` reads.
    Repaired {
        /// The repaired text.
        text: String,
        /// What changed, in text order.
        changes: Vec<Change>,
    },
    /// The closers cannot be placed with confidence; nothing should be
    /// written.
    Refused(Refusal),
}

/// One change: closers added (at their place in the repaired text) or
/// removed (at their place in the original). Lines are the same in both
/// texts, since only `)` characters move.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    /// True for added closers, false for removed ones.
    pub added: bool,
    /// How many `)`.
    pub count: usize,
    /// Byte offset in the original text: where the closers were inserted,
    /// or where the first removed one stood.
    pub offset: usize,
    /// 1-based line.
    pub line: usize,
    /// 1-based column, in characters.
    pub column: usize,
}

impl fmt::Display for Change {
    /// `added ")" at line 12, column 30`, `removed "))" at line 3, column 5`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} \"{}\" at line {}, column {}",
            if self.added { "added" } else { "removed" },
            ")".repeat(self.count),
            self.line,
            self.column
        )
    }
}

/// Why a repair was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "the parentheses of `{form}` (line {form_line}) cannot be repaired from the indentation: \
     {reason}. Likely fix: {fix}."
)]
pub struct Refusal {
    /// 1-based line where the form in question starts.
    pub form_line: usize,
    /// The form's first words, e.g. `(defun foo`.
    pub form: String,
    /// 1-based line where structure and indentation disagree (or where the
    /// unclosed construct opens).
    pub line: usize,
    /// What is wrong there.
    pub reason: String,
    /// The likely fix.
    pub fix: String,
}

/// Repairs the closing parentheses of `text` from its indentation; see the
/// module documentation.
pub fn repair_parens(text: &str) -> Repair {
    match by_indentation(text) {
        Repair::Refused(r) => match by_least_disagreement(text) {
            Some((text, changes)) => Repair::Repaired { text, changes },
            None => Repair::Refused(r),
        },
        done => done,
    }
}

/// The first words of a form: `(defun foo`, `#+sbcl (defun foo`,
/// `(defun (setf foo)`: its first line up to the second element of the
/// first list on it.
pub fn form_label(text: &str) -> String {
    let line = text.lines().next().unwrap_or("").trim_end();
    let parse = cst::parse(line);
    let list = parse.top_level_forms().find_map(|f| {
        let mut node = f;
        loop {
            match node.kind {
                NodeKind::List => return Some(node),
                NodeKind::ReaderConditional { .. } => node = node.elements().nth(1)?,
                _ => return None,
            }
        }
    });
    let end = match list {
        Some(l) => l
            .elements()
            .take(2)
            .last()
            .map_or(l.span.start + 1, |e| e.span.end),
        None => line.len(),
    };
    let label = &line[..end];
    match label.char_indices().nth(60) {
        Some((i, _)) => format!("{}…", &label[..i]),
        None => label.to_string(),
    }
}
