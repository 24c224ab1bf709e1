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
//!
//! The work is linear in the text's length (columns are counted in one pass,
//! however long a line), and two kinds of text are refused after the first
//! reading, before any of it: more than [`MAX_PAREN_ERRORS`] parentheses
//! without a partner, and lines that end in a carriage return alone (old
//! Mac files, which read by `\n` are one line: a repair would close a form
//! at the end of the text and swallow the forms after it).

use std::fmt;

use crate::cst::{self, Construct, NodeKind, SyntaxErrorKind};

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

/// The most closers, stray or missing, a repair takes on: a model drops or
/// doubles a few, and beyond this the text is something else (a file of
/// closers alone, a broken generator's output), which no indentation says
/// much about; each one also costs a change, a line of the diff and a
/// line of the answer. Text with more is refused at once, after one
/// reading.
pub const MAX_PAREN_ERRORS: usize = 1000;

/// Repairs the closing parentheses of `text` from its indentation; see the
/// module documentation. Linear in the text's length: one reading, the
/// rule over its tokens, one reading of the result (the second way reads
/// one form at most a few times, within a budget of its size).
pub fn repair_parens(text: &str) -> Repair {
    let parse = cst::parse(text);
    let paren_errors = parse
        .errors
        .iter()
        .filter(|e| {
            matches!(
                e.kind,
                SyntaxErrorKind::ExtraClose
                    | SyntaxErrorKind::Unclosed(Construct::List | Construct::Vector)
            )
        })
        .count();
    // Nesting past what the reader follows hides the parentheses after it
    // (a file of forms each a closer short nests one level per form): the
    // text is refused, never passed as unchanged.
    let too_deep = parse
        .errors
        .iter()
        .find(|e| e.kind == SyntaxErrorKind::TooDeep);
    if paren_errors == 0 && too_deep.is_none() {
        return Repair::Unchanged;
    }
    if let Some(r) = refused_at_once(text, &parse, paren_errors, too_deep) {
        return Repair::Refused(r);
    }
    match by_indentation(text, &parse) {
        Repair::Refused(r) => match by_least_disagreement(text, &parse) {
            Some((text, changes)) => Repair::Repaired { text, changes },
            None => Repair::Refused(r),
        },
        done => done,
    }
}

/// Text the repair does not read line by line: more than
/// [`MAX_PAREN_ERRORS`] stray or unclosed lists, or lines that end in a
/// carriage return alone (old Mac files), where the rule, reading lines by
/// `\n`, would see one line and close lists against nothing.
fn refused_at_once(
    text: &str,
    parse: &cst::Parse,
    paren_errors: usize,
    too_deep: Option<&cst::SyntaxError>,
) -> Option<Refusal> {
    let lines = cst::LineIndex::new(text);
    let first = &parse.errors[0];
    let at = first.open_offset.unwrap_or(first.offset);
    // The form the first error is in, or for a stray `)` the one before it.
    let i = parse.forms.partition_point(|n| n.span.end <= at);
    let form_at = match first.kind {
        SyntaxErrorKind::ExtraClose => parse.forms[..i].iter().rfind(|n| !n.is_trivia()),
        _ => None,
    }
    .or_else(|| parse.forms.get(i))
    .map_or(0, |n| n.span.start);
    let refusal = |line: usize, reason: String, fix: &str| Refusal {
        form_line: lines.line_col(form_at).0,
        form: form_label(&text[form_at..]),
        line,
        reason,
        fix: fix.to_string(),
    };
    if let Some(deep) = too_deep {
        let (line, column) = lines.line_col(deep.offset);
        return Some(refusal(
            line,
            format!(
                "the lists nest deeper than {} levels at line {line}, column {column}, \
                 deeper than the reader follows (forms that each lack a closer nest one level \
                 per form), so the parentheses after it are not read",
                cst::MAX_DEPTH
            ),
            "close the forms before it (lisp-check-parens names the first one that does not \
             close), or write the text as it is",
        ));
    }
    if paren_errors > MAX_PAREN_ERRORS {
        return Some(refusal(
            lines.line_col(first.offset).0,
            format!(
                "the text has {paren_errors} parentheses with no partner (stray \")\" or \
                 unclosed lists), more than the {MAX_PAREN_ERRORS} a repair places"
            ),
            "fix the parentheses by hand (lisp-check-parens lists where), or write the text \
             in pieces",
        ));
    }
    let bytes = text.as_bytes();
    let bare_cr = (0..bytes.len()).find(|&i| bytes[i] == b'\r' && bytes.get(i + 1) != Some(&b'\n'));
    if let Some(i) = bare_cr {
        return Some(refusal(
            lines.line_col(i).0,
            "its lines end in a carriage return alone (`\\r`, old Mac line endings), and the \
             repair reads lines by `\\n`, so it cannot tell where a line's lists end"
                .to_string(),
            "convert the line endings to `\\n` (or `\\r\\n`) and write it again, or place the \
             closers yourself",
        ));
    }
    None
}

/// The first words of a form: `(defun foo`, `#+sbcl (defun foo`,
/// `(defun (setf foo)`: its first line up to the second element of the
/// first list on it.
pub fn form_label(text: &str) -> String {
    let line = text.lines().next().unwrap_or("");
    // The label is 60 characters at most: a line of megabytes is read no
    // further than that needs.
    let line = match line.char_indices().nth(240) {
        Some((i, _)) => &line[..i],
        None => line,
    }
    .trim_end();
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
