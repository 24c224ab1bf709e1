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

use crate::cst::{self, Construct, LineIndex, NodeKind, SyntaxErrorKind};

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
#[derive(Debug, Clone, PartialEq, Eq)]
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

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "the parentheses of `{}` (line {}) cannot be repaired from the indentation: {}. \
             Likely fix: {}.",
            self.form, self.form_line, self.reason, self.fix
        )
    }
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

/// The indentation rule (the module documentation's first part).
fn by_indentation(text: &str) -> Repair {
    let parse = cst::parse(text);
    let paren_trouble = parse.errors.iter().any(|e| {
        matches!(
            e.kind,
            SyntaxErrorKind::ExtraClose
                | SyntaxErrorKind::Unclosed(Construct::List | Construct::Vector)
        )
    });
    if !paren_trouble {
        return Repair::Unchanged;
    }
    let lines = LineIndex::new(text);
    let toks = tokens(text, &parse);
    let groups = line_groups(text, &toks, false);
    let kept_groups = line_groups(text, &toks, true);
    let ctx = Ctx {
        text,
        lines: &lines,
        toks: &toks,
        groups: &groups,
        strict: false,
    };
    // Constructs no closer can end: refuse before looking at parentheses.
    if let Some(e) = parse.errors.iter().find(|e| {
        matches!(
            e.kind,
            SyntaxErrorKind::Unclosed(
                Construct::String
                    | Construct::BlockComment
                    | Construct::MultipleEscape
                    | Construct::SingleEscape
                    | Construct::Character
            ) | SyntaxErrorKind::TooDeep
        )
    }) {
        let at = e.open_offset.unwrap_or(e.offset);
        let (line, column) = lines.line_col(at);
        let (reason, fix) = match e.kind {
            SyntaxErrorKind::Unclosed(Construct::String) => (
                format!("the string opened at line {line}, column {column} never closes"),
                "add the closing `\"` where the string ends (a `\"` inside it is written `\\\"`)"
                    .to_string(),
            ),
            SyntaxErrorKind::Unclosed(Construct::BlockComment) => (
                format!("the `#|` comment opened at line {line}, column {column} never closes"),
                "add `|#` where the comment ends".to_string(),
            ),
            SyntaxErrorKind::Unclosed(Construct::MultipleEscape) => (
                format!(
                    "the `|` at line {line}, column {column} opens a |symbol| that never closes"
                ),
                "add the closing `|`, or write a literal bar as `\\|`".to_string(),
            ),
            SyntaxErrorKind::TooDeep => (
                format!("the nesting at line {line} is deeper than the reader follows"),
                "split the form".to_string(),
            ),
            _ => (
                format!("the text ends inside an escape at line {line}, column {column}"),
                "complete the character or escape at the end".to_string(),
            ),
        };
        return Repair::Refused(ctx.refusal(ctx.form_start_before(at), line, reason, fix));
    }

    let segments = segments(&groups);
    let mut edits: Vec<(usize, Edit)> = Vec::new();
    // Lines of the runs that do not balance, for the check below.
    let mut broken_lines = Vec::new();
    for unit in units(&ctx, &segments) {
        if unit.balanced {
            continue;
        }
        let first = ctx.groups[segments[unit.segments.start].groups.start]
            .toks
            .start;
        let last = ctx.groups[segments[unit.segments.end - 1].groups.end - 1]
            .toks
            .end
            - 1;
        broken_lines.push((
            lines.line_col(ctx.toks[first].start).0..=lines.line_col(ctx.toks[last].end).0,
            ctx.toks[first].start,
        ));
        let mut unit_edits = Vec::new();
        for seg in &segments[unit.segments.clone()] {
            if seg_balance(&ctx, seg) == (0, 0) {
                continue;
            }
            // Where a line after a removed closer lines up with nothing,
            // a second reading keeps the lists a line opens and closes
            // itself as written (`(cond ((zerop n)` / `        body)`: a
            // body indented under its clause, not its test). Both readings
            // place closers only at line ends, so their edits apply alike.
            match infer_segment(&ctx, seg).or_else(|(r, removal)| {
                if !removal {
                    return Err(r);
                }
                infer_segment(
                    &Ctx {
                        groups: &kept_groups,
                        strict: true,
                        ..ctx
                    },
                    seg,
                )
                .ok()
                .filter(|e| {
                    // Closers it removes come off the segment's last line.
                    let last = (seg.groups.clone()).rfind(|&g| ctx.groups[g].code);
                    e.iter().all(|(g, e)| e.new > e.old || Some(*g) == last)
                })
                .ok_or(r)
            }) {
                Ok(e) => unit_edits.extend(e),
                Err(r) => return Repair::Refused(r),
            }
        }
        let adds = unit_edits.iter().any(|(_, e)| e.new > e.old);
        let removes = unit_edits.iter().any(|(_, e)| e.new < e.old);
        if adds && removes {
            let first = &segments[unit.segments.start];
            let changes: Vec<String> = unit_edits
                .iter()
                .map(|(g, e)| ctx.change_of(*g, e).to_string())
                .collect();
            let line = unit_edits
                .iter()
                .find(|(_, e)| e.new < e.old)
                .map_or(0, |(g, _)| ctx.group_line(*g));
            return Repair::Refused(
                ctx.refusal(
                    ctx.toks[ctx.groups[first.groups.start].toks.start].start,
                    line,
                    "the indentation disagrees with the parentheses in more than one place \
                 (it would both add and remove closers)"
                        .into(),
                    format!(
                        "indent the lines as their structure is, or place the closers yourself; \
                     the indentation alone suggests: {}",
                        changes.join("; ")
                    ),
                ),
            );
        }
        edits.extend(unit_edits);
    }
    if edits.is_empty() {
        let e = &parse.errors[0];
        let at = e.open_offset.unwrap_or(e.offset);
        return Repair::Refused(ctx.refusal(
            ctx.form_start_before(at),
            lines.line_col(e.offset).0,
            e.message(&lines),
            "fix the parentheses by hand (lisp-check-parens shows where)".into(),
        ));
    }
    edits.sort_by_key(|(g, _)| *g);
    let (repaired, changes) = apply(&ctx, &edits);
    let after = cst::parse(&repaired);
    if let Some(e) = after.errors.first() {
        let lines_after = LineIndex::new(&repaired);
        let at = e.open_offset.unwrap_or(e.offset);
        return Repair::Refused(ctx.refusal(
            ctx.form_start_before(at.min(text.len())),
            lines_after.line_col(e.offset).0,
            format!(
                "with the closers placed by indentation ({}), the text still does not read: {}",
                changes
                    .iter()
                    .map(|c| c.to_string())
                    .collect::<Vec<_>>()
                    .join("; "),
                e.message(&lines_after)
            ),
            "fix that error; the parentheses may then balance".into(),
        ));
    }
    if let Some(r) = implausible_form(&repaired, &after, &changes, &broken_lines, true) {
        return Repair::Refused(r);
    }
    if let Some((line, form_at)) = indented_at_top_level(&repaired, &after, &broken_lines) {
        return Repair::Refused(ctx.refusal(
            form_at,
            line,
            format!(
                "line {line} is indented as if inside a form, but with the closers its \
                 indentation calls for ({}) nothing is open there",
                changes
                    .iter()
                    .map(|c| c.to_string())
                    .collect::<Vec<_>>()
                    .join("; ")
            ),
            format!(
                "indent line {line} as its structure is (a new top-level form starts at column \
                 0), or place the missing \")\" yourself"
            ),
        ));
    }
    Repair::Repaired {
        text: repaired,
        changes,
    }
}

/// A form the repaired text would hold that no one writes: an operator
/// that takes a body left without one (`(let ((x 1)))`, a
/// `multiple-value-bind` with only its value form, `(locally (declare
/// ...))`), or a form with more arguments than it takes (`if` with four,
/// `defvar` with a fourth). Such a form
/// means the indentation put a line where the text's author did not: the
/// indentation, not the closers, is off. Only the top-level forms holding a
/// change are looked at; quoted data is not code. So is a string or symbol
/// that the repair leaves alone at top level (a docstring at column 0).
///
/// `emptied`: also refuse a list an added closer leaves empty before a
/// comment (evidence against an inferred closer; not against the one place
/// `by_least_disagreement` weighs, where `()` and a comment is as the text
/// may have been written).
fn implausible_form(
    text: &str,
    parse: &cst::Parse,
    changes: &[Change],
    broken: &[(std::ops::RangeInclusive<usize>, usize)],
    emptied: bool,
) -> Option<Refusal> {
    let mut shift = 0isize;
    let mut points = Vec::with_capacity(changes.len());
    for c in changes {
        let at = (c.offset as isize + shift) as usize;
        points.push(at);
        if c.added {
            shift += c.count as isize;
        } else {
            shift -= c.count as isize;
        }
    }
    let lines = LineIndex::new(text);
    // A list that an added closer leaves empty before a comment (`'(` and
    // a comment, its elements on the lines after; `()` alone is common).
    let added: Vec<std::ops::Range<usize>> = points
        .iter()
        .zip(changes)
        .filter(|(_, c)| c.added)
        .map(|(&p, c)| p..p + c.count)
        .collect();
    if let Some(empty) = (emptied)
        .then(|| parse.top_level_forms())
        .into_iter()
        .flatten()
        .flat_map(|f| empty_lists(f))
        .find(|l| {
            added.iter().any(|r| r.contains(&(l.span.end - 1)))
                && text[l.span.end..]
                    .lines()
                    .next()
                    .is_some_and(|rest| rest.trim_start().starts_with(';'))
        })
    {
        let (line, _) = lines.line_col(empty.span.start);
        let top = parse.top_level_form_at(empty.span.start)?;
        return Some(Refusal {
            form_line: lines.line_col(top.span.start).0,
            form: form_label(&text[top.span.start..]),
            line,
            reason: format!(
                "by the indentation the list opened at line {line} would close before its \
                 first element"
            ),
            fix: "indent the elements of that list right of its \"(\", or place the \")\" \
                  yourself"
                .into(),
        });
    }
    for form in parse.top_level_forms() {
        let (line, _) = lines.line_col(form.span.start);
        if let Some(form_line) = broken
            .iter()
            .find(|(r, _)| r.contains(&line))
            .map(|(r, _)| *r.start())
            .filter(|_| matches!(form.kind, NodeKind::String | NodeKind::Token))
        {
            return Some(Refusal {
                form_line,
                form: form_label(&text[lines.line_start(form_line).unwrap_or(0)..]),
                line,
                reason: format!(
                    "with the closers its indentation calls for ({}), `{}` at line {line} \
                     would stand alone at top level",
                    changes
                        .iter()
                        .map(|c| c.to_string())
                        .collect::<Vec<_>>()
                        .join("; "),
                    form_label(form.text(text))
                ),
                fix: format!(
                    "indent line {line} under the form it belongs to, or place the \")\" \
                     yourself"
                ),
            });
        }
        if !points
            .iter()
            .any(|&p| form.span.start <= p && p <= form.span.end)
        {
            continue;
        }
        if let Some((list, reason)) = first_implausible(text, form) {
            let (line, _) = lines.line_col(list.span.start);
            return Some(Refusal {
                form_line: lines.line_col(form.span.start).0,
                form: form_label(&text[form.span.start..]),
                line,
                reason: format!(
                    "with the closers its indentation calls for ({}), `{}` at line {line} \
                     would {reason}",
                    changes
                        .iter()
                        .map(|c| c.to_string())
                        .collect::<Vec<_>>()
                        .join("; "),
                    form_label(&text[list.span.start..])
                ),
                fix: format!(
                    "indent the lines of `{}` as its structure is, or place the \")\" yourself",
                    form_label(&text[list.span.start..])
                ),
            });
        }
    }
    None
}

/// The first list under `node` (itself included) that breaks a rule of
/// [`implausible_form`], with what is wrong. Data is skipped: quoted forms,
/// declarations, `#'(setf f)`, binding lists, and the names of
/// definitions.
fn first_implausible<'n>(text: &str, node: &'n cst::Node) -> Option<(&'n cst::Node, String)> {
    if matches!(node.kind, NodeKind::Quote | NodeKind::FunctionQuote) {
        return None;
    }
    let head = node.head_symbol(text).filter(|h| !h.starts_with(':'));
    let name = head.map(|h| cst::SymbolName::read(h).name);
    if node.kind == NodeKind::List {
        if let Some(reason) = name
            .as_deref()
            .and_then(|n| implausible_list(n, text, node))
        {
            return Some((node, reason));
        }
    }
    // Elements (by index) that hold data, not forms.
    let data = |i: usize| match name.as_deref() {
        Some("DECLARE" | "DECLAIM" | "PROCLAIM") => true,
        Some(
            "LET"
            | "LET*"
            | "FLET"
            | "LABELS"
            | "MACROLET"
            | "SYMBOL-MACROLET"
            | "LAMBDA"
            | "DOLIST"
            | "DOTIMES"
            | "MULTIPLE-VALUE-BIND"
            | "DESTRUCTURING-BIND",
        ) => i == 1,
        Some("DEFVAR" | "DEFPARAMETER" | "DEFCONSTANT") => false,
        Some(n) if n.starts_with("DEF") => i == 1,
        _ => false,
    };
    let mut i = 0;
    for c in &node.children {
        let element = !c.is_trivia() && c.kind != NodeKind::Punct;
        if element {
            if !(node.kind == NodeKind::List && data(i)) {
                if let Some(found) = first_implausible(text, c) {
                    return Some(found);
                }
            }
            i += 1;
        }
    }
    None
}

/// The lists and vectors under `node` (itself included) with no elements.
fn empty_lists(node: &cst::Node) -> Vec<&cst::Node> {
    let mut out = Vec::new();
    let mut stack = vec![node];
    while let Some(n) = stack.pop() {
        if matches!(n.kind, NodeKind::List | NodeKind::Vector) && n.elements().next().is_none() {
            out.push(n);
        }
        stack.extend(n.children.iter().filter(|c| !c.is_leaf()));
    }
    out
}

/// What is wrong with `list`, whose head is the symbol `head` (its name).
fn implausible_list(head: &str, text: &str, list: &cst::Node) -> Option<String> {
    let args: Vec<&cst::Node> = list.elements().skip(1).collect();
    // A spliced `,@x` stands for any number of forms, `#+x` for one or none.
    if args.iter().any(|a| {
        matches!(
            a.kind,
            NodeKind::UnquoteSplicing | NodeKind::ReaderConditional { .. }
        )
    }) {
        return None;
    }
    let declaration = |n: &&cst::Node| n.head_name_upper(text).as_deref() == Some("DECLARE");
    let before_body = match head {
        "LOCALLY" | "PROGN" => Some(0),
        "LET" | "LET*" | "FLET" | "LABELS" | "MACROLET" | "SYMBOL-MACROLET" | "LAMBDA" | "WHEN"
        | "UNLESS" | "DOLIST" | "DOTIMES" | "EVAL-WHEN" | "UNWIND-PROTECT" | "HANDLER-BIND" => {
            Some(1)
        }
        "MULTIPLE-VALUE-BIND" | "DESTRUCTURING-BIND" | "WITH-SLOTS" | "WITH-ACCESSORS" => Some(2),
        h if h.starts_with("WITH-") || h.starts_with("WITHOUT-") => Some(0),
        _ => None,
    };
    if let Some(n) = before_body {
        if args.len() <= n || args[n..].iter().all(declaration) {
            return Some("have no body".into());
        }
    }
    // A form in a body whose first element is a list other than a lambda
    // expression (`((and a b) c)`) is not code: a clause moved out of its
    // `cond` or `case`.
    let body_from = match head {
        "DEFUN" | "DEFMACRO" => Some(2),
        h if h.starts_with("WITH") => None,
        _ => before_body,
    };
    if let Some(n) = body_from {
        let not_code = |a: &&cst::Node| {
            a.kind == NodeKind::List
                && a.elements().next().is_some_and(|h| {
                    h.kind == NodeKind::List && h.head_name_upper(text).as_deref() != Some("LAMBDA")
                })
        };
        if args.iter().skip(n).any(not_code) {
            return Some("hold a form whose first element is a list, which is not code".into());
        }
    }
    let (min, max) = match head {
        "IF" => (2, 3),
        "DEFVAR" => (1, 3),
        "DEFPARAMETER" | "DEFCONSTANT" => (2, 3),
        _ => (0, usize::MAX),
    };
    // A binding of `let` is a variable and at most one form.
    if matches!(head, "LET" | "LET*") {
        if let Some(bindings) = args.first().filter(|b| b.kind == NodeKind::List) {
            if bindings.elements().any(|b| {
                b.kind == NodeKind::List
                    && b.elements().count() > 2
                    && !b
                        .elements()
                        .any(|e| matches!(e.kind, NodeKind::ReaderConditional { .. }))
            }) {
                return Some("have a binding with more than one form".into());
            }
        }
    }
    if args.len() < min || args.len() > max {
        return Some(format!("have {} arguments", args.len()));
    }
    None
}

/// The first line within `ranges` (with the offset of the form each
/// starts with) of the repaired text that starts with
/// code indented past the base column while no list is open: a sign that
/// the indentation closed a form too early (`#+sbcl` at column 0 inside a
/// `defun`).
fn indented_at_top_level(
    text: &str,
    parse: &cst::Parse,
    ranges: &[(std::ops::RangeInclusive<usize>, usize)],
) -> Option<(usize, usize)> {
    let toks = tokens(text, parse);
    let groups = line_groups(text, &toks, false);
    let base = groups.iter().find_map(|g| g.indent).unwrap_or(0);
    let lines = LineIndex::new(text);
    let mut depth = 0i64;
    for g in &groups {
        if let Some(x) = g.indent {
            let line = lines.line_col(toks[g.toks.start].start).0;
            if depth == 0 && x > base {
                if let Some((_, form_at)) = ranges.iter().find(|(r, _)| r.contains(&line)) {
                    return Some((line, *form_at));
                }
            }
        }
        for t in &toks[g.toks.clone()] {
            match t.kind {
                TokKind::Open => depth += 1,
                TokKind::Close => depth -= 1,
                _ => {}
            }
        }
    }
    None
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TokKind {
    /// `(`, `#(`, `#3(`.
    Open,
    /// `)`, matched or not.
    Close,
    /// Any other leaf that is not whitespace or a comment.
    Code,
    Comment,
}

#[derive(Debug, Clone, Copy)]
struct Tok {
    kind: TokKind,
    start: usize,
    end: usize,
    /// Visual column of `start` (tabs to multiples of 8), 0-based.
    col: usize,
    /// The first leaf on its line, the line not starting inside a string or
    /// block comment.
    first_on_line: bool,
}

fn tokens(text: &str, parse: &cst::Parse) -> Vec<Tok> {
    let mut toks = Vec::new();
    let mut at_line_start = true;
    for leaf in parse.leaves() {
        let s = leaf.text(text);
        let kind = match leaf.kind {
            NodeKind::Whitespace => {
                if s.contains('\n') {
                    at_line_start = true;
                }
                continue;
            }
            NodeKind::LineComment | NodeKind::BlockComment => TokKind::Comment,
            NodeKind::Punct if s.ends_with('(') => TokKind::Open,
            NodeKind::Punct | NodeKind::Error if s == ")" => TokKind::Close,
            _ => TokKind::Code,
        };
        toks.push(Tok {
            kind,
            start: leaf.span.start,
            end: leaf.span.end,
            col: visual_column(text, leaf.span.start),
            first_on_line: at_line_start,
        });
        at_line_start = false;
    }
    toks
}

fn visual_column(text: &str, at: usize) -> usize {
    let line_start = text[..at].rfind('\n').map_or(0, |i| i + 1);
    text[line_start..at]
        .chars()
        .fold(0, |c, ch| if ch == '\t' { (c / 8 + 1) * 8 } else { c + 1 })
}

/// The tokens from one line start (outside any string or comment) to the
/// next: one line, or several when a string spans lines.
#[derive(Debug, Clone)]
struct Group {
    toks: std::ops::Range<usize>,
    /// The indentation that closes lists: the column of the first token,
    /// when it is code or an opener (not for lines starting with a closer or
    /// a comment).
    indent: Option<usize>,
    /// For a line starting with a closer: that closer's column. Such a line
    /// closes the lists opened right of it (strictly: a `)` under its `(`
    /// closes that list itself).
    closer_indent: Option<usize>,
    /// Holds code (not only comments).
    code: bool,
    /// The closers at the end, before any trailing comment.
    trail: std::ops::Range<usize>,
    /// Where closers go: after the trail's last closer, else after the last
    /// code token.
    insert_at: usize,
}

/// `keep_closed_lists`: closers at a line's end that close a list opened
/// on the same line stay as written (they are not part of the trail).
fn line_groups(text: &str, toks: &[Tok], keep_closed_lists: bool) -> Vec<Group> {
    // Per closer: whether it closes a list opened on its own line.
    let mut same_line = vec![false; toks.len()];
    if keep_closed_lists {
        let mut stack = Vec::new();
        let mut line = 0usize;
        for (i, t) in toks.iter().enumerate() {
            if t.first_on_line {
                line += 1;
            }
            match t.kind {
                TokKind::Open => stack.push(line),
                TokKind::Close => {
                    if let Some(l) = stack.pop() {
                        same_line[i] = l == line;
                    }
                }
                _ => {}
            }
        }
    }
    let mut groups = Vec::new();
    let mut i = 0;
    while i < toks.len() {
        let mut j = i + 1;
        while j < toks.len() && !toks[j].first_on_line {
            j += 1;
        }
        let range = i..j;
        let code = toks[range.clone()]
            .iter()
            .any(|t| t.kind != TokKind::Comment);
        let mut end = j;
        while end > i && toks[end - 1].kind == TokKind::Comment {
            end -= 1;
        }
        let mut trail_start = end;
        while trail_start > i && toks[trail_start - 1].kind == TokKind::Close {
            trail_start -= 1;
        }
        while trail_start < end && same_line[trail_start] {
            trail_start += 1;
        }
        let insert_at = if end > i {
            toks[end - 1].end
        } else {
            toks[i].start
        };
        let indent = matches!(toks[i].kind, TokKind::Open | TokKind::Code).then_some(toks[i].col);
        let _ = text;
        let closer_indent = (toks[i].kind == TokKind::Close).then_some(toks[i].col);
        groups.push(Group {
            toks: range,
            indent,
            closer_indent,
            code,
            trail: trail_start..end,
            insert_at,
        });
        i = j;
    }
    groups
}

/// Groups from one line at the base indentation to the next.
#[derive(Debug, Clone)]
struct Segment {
    groups: std::ops::Range<usize>,
}

fn segments(groups: &[Group]) -> Vec<Segment> {
    let base = groups.iter().find_map(|g| g.indent).unwrap_or(0);
    let mut starts: Vec<usize> = groups
        .iter()
        .enumerate()
        .filter(|(_, g)| g.indent.is_some_and(|x| x <= base))
        .map(|(i, _)| i)
        .collect();
    if starts.first() != Some(&0) {
        starts.insert(0, 0);
    }
    let mut segs = Vec::new();
    for (k, &s) in starts.iter().enumerate() {
        let e = starts.get(k + 1).copied().unwrap_or(groups.len());
        if s < e {
            segs.push(Segment { groups: s..e });
        }
    }
    segs
}

/// (net opens minus closes, lowest running depth as a non-positive number).
fn seg_balance(ctx: &Ctx, seg: &Segment) -> (i64, i64) {
    let (mut n, mut min) = (0i64, 0i64);
    for g in &ctx.groups[seg.groups.clone()] {
        for t in &ctx.toks[g.toks.clone()] {
            match t.kind {
                TokKind::Open => n += 1,
                TokKind::Close => {
                    n -= 1;
                    min = min.min(n);
                }
                _ => {}
            }
        }
    }
    (n, min)
}

/// Consecutive segments whose parentheses balance together, or a run that
/// does not balance (ending at the segment where a closer has nothing to
/// close, or at the end of the text).
struct Unit {
    segments: std::ops::Range<usize>,
    balanced: bool,
}

fn units(ctx: &Ctx, segs: &[Segment]) -> Vec<Unit> {
    let mut units = Vec::new();
    let mut i = 0;
    while i < segs.len() {
        let (mut n, mut min) = (0i64, 0i64);
        let mut j = i;
        let balanced = loop {
            let (sn, smin) = seg_balance(ctx, &segs[j]);
            min = min.min(n + smin);
            n += sn;
            if min < 0 {
                break false;
            }
            if n == 0 {
                break true;
            }
            if j + 1 == segs.len() {
                break false;
            }
            j += 1;
        };
        units.push(Unit {
            segments: i..j + 1,
            balanced,
        });
        i = j + 1;
    }
    units
}

/// A group's trail: `old` closers written, `new` inferred.
#[derive(Debug, Clone, Copy)]
struct Edit {
    old: usize,
    new: usize,
}

struct Ctx<'a> {
    text: &'a str,
    lines: &'a LineIndex,
    toks: &'a [Tok],
    groups: &'a [Group],
    /// Every line must line up as an editor indents a call (see
    /// `lines_up`), also where closers are added: for the second reading.
    strict: bool,
}

impl Ctx<'_> {
    fn group_line(&self, g: usize) -> usize {
        let grp = &self.groups[g];
        let at = if grp.trail.is_empty() {
            grp.insert_at
        } else {
            self.toks[grp.trail.start].start
        };
        self.lines.line_col(at).0
    }

    fn change_of(&self, g: usize, e: &Edit) -> Change {
        let grp = &self.groups[g];
        let offset = if e.new > e.old {
            // After the last code line, a text that ends in an indented
            // line of its own is where its writer was about to close: the
            // closers go there (after any comment between), not before.
            let rest = &self.text[grp.insert_at..];
            let last_line = rest.rsplit('\n').next().unwrap_or("");
            let ends_indented = rest.contains('\n')
                && !last_line.is_empty()
                && last_line.chars().all(|c| c == ' ' || c == '\t');
            if ends_indented && self.groups[g + 1..].iter().all(|x| !x.code) {
                self.text.len()
            } else {
                grp.insert_at
            }
        } else {
            // The last `old - new` closers of the trail go.
            self.toks[grp.trail.end - (e.old - e.new)].start
        };
        let (line, column) = self.lines.line_col(offset);
        Change {
            added: e.new > e.old,
            count: e.new.abs_diff(e.old),
            offset,
            line,
            column,
        }
    }

    /// Start of the top-level form around `at`: the last line at column 0
    /// (outside strings and comments) holding code, at or before `at`.
    fn form_start_before(&self, at: usize) -> usize {
        self.groups
            .iter()
            .map(|g| &self.toks[g.toks.start])
            .rfind(|t| t.start <= at && t.col == 0 && t.kind != TokKind::Comment)
            .or_else(|| self.toks.iter().find(|t| t.kind != TokKind::Comment))
            .map_or(0, |t| t.start)
    }

    fn refusal(&self, form_at: usize, line: usize, reason: String, fix: String) -> Refusal {
        Refusal {
            form_line: self.lines.line_col(form_at).0,
            form: form_label(&self.text[form_at..]),
            line,
            reason,
            fix,
        }
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

/// Runs the indentation rule over one segment: the inferred trail of every
/// group whose trail changes. A refusal says too whether it came from a
/// line after a removed closer that lines up with nothing.
fn infer_segment(ctx: &Ctx, seg: &Segment) -> Result<Vec<(usize, Edit)>, (Refusal, bool)> {
    let toks = ctx.toks;
    // The partner of every closer as the text reads (ignoring indentation).
    let mut partner = vec![usize::MAX; toks.len()];
    // And the closer of every opener.
    let mut closer_of = vec![usize::MAX; toks.len()];
    {
        let mut stack = Vec::new();
        let range =
            ctx.groups[seg.groups.start].toks.start..ctx.groups[seg.groups.end - 1].toks.end;
        for i in range {
            match toks[i].kind {
                TokKind::Open => stack.push(i),
                TokKind::Close => {
                    if let Some(o) = stack.pop() {
                        partner[i] = o;
                        closer_of[o] = i;
                    }
                }
                _ => {}
            }
        }
    }
    let seg_start = toks[ctx.groups[seg.groups.start].toks.start].start;
    // Open lists, each with the columns where its direct elements start.
    let mut stack: Vec<(usize, Vec<usize>)> = Vec::new();
    let mut new_trail = vec![0usize; seg.groups.len()];
    // Per group: the list the line's first token lands in does not line up
    // with it (see `lines_up`), with that list's opener.
    let mut misaligned: Vec<Option<usize>> = vec![None; seg.groups.len()];
    // The same, for a line after a removed closer: the strict reading.
    let mut misaligned_strict: Vec<Option<usize>> = vec![None; seg.groups.len()];
    // Per group: the lists its trail closes, by the indentation.
    let mut closed_at: Vec<Vec<usize>> = vec![Vec::new(); seg.groups.len()];
    let mut last_code: Option<usize> = None;
    for (k, gi) in seg.groups.clone().enumerate() {
        let g = &ctx.groups[gi];
        if !g.code {
            continue;
        }
        let closes = |o: usize| match (g.indent, g.closer_indent) {
            (Some(x), _) => toks[o].col >= x,
            (None, Some(x)) => toks[o].col > x,
            _ => false,
        };
        let before = stack.len();
        while let Some((o, _)) = stack.pop_if(|(o, _)| closes(*o)) {
            if let Some(prev) = last_code {
                closed_at[prev].push(o);
            }
        }
        if let Some(prev) = last_code {
            new_trail[prev] += before - stack.len();
        }
        if let Some(x) = g.indent {
            if k > 0 && stack.is_empty() && before > 0 && x > 0 {
                let line = ctx.lines.line_col(toks[g.toks.start].start).0;
                let prev_line = last_code.map_or(line, |p| ctx.group_line(seg.groups.start + p));
                return Err((
                    ctx.refusal(
                        seg_start,
                        line,
                        format!(
                        "line {line} is indented as if inside the form, but by the indentation \
                         every list open before it already closes at line {prev_line}"
                    ),
                        format!(
                        "indent line {line} as its structure is (a new top-level form starts at \
                         column 0), or place the missing \")\" yourself"
                    ),
                    ),
                    false,
                ));
            }
            if let Some((o, cols)) = stack.last() {
                if !lines_up(ctx, *o, cols, x, ctx.strict) {
                    misaligned[k] = Some(*o);
                }
                if !lines_up(ctx, *o, cols, x, true) {
                    misaligned_strict[k] = Some(*o);
                }
            }
        }
        for t in g.toks.clone() {
            if g.trail.contains(&t) {
                continue;
            }
            match toks[t].kind {
                TokKind::Open => {
                    if let Some((_, cols)) = stack.last_mut() {
                        cols.push(t);
                    }
                    stack.push((t, Vec::new()));
                }
                TokKind::Code => {
                    if let Some((_, cols)) = stack.last_mut() {
                        cols.push(t);
                    }
                }
                TokKind::Close => {
                    let (line, column) = ctx.lines.line_col(toks[t].start);
                    match stack.pop().map(|(o, _)| o) {
                        Some(o) if o == partner[t] => {}
                        Some(o) => {
                            let (ol, oc) = ctx.lines.line_col(toks[o].start);
                            let (pl, pc) = if partner[t] == usize::MAX {
                                (ol, oc)
                            } else {
                                ctx.lines.line_col(toks[partner[t]].start)
                            };
                            return Err((
                                ctx.refusal(
                                    seg_start,
                                    line,
                                    format!(
                                        "the \")\" at line {line}, column {column} is inside the \
                                     line; it closes the \"(\" at line {pl}, column {pc}, but \
                                     by the indentation it would close the one at line {ol}, \
                                     column {oc}"
                                    ),
                                    format!(
                                        "move that \")\" to where the list it closes ends, or \
                                     indent line {line} to match the structure"
                                    ),
                                ),
                                false,
                            ));
                        }
                        None => {
                            return Err((
                                ctx.refusal(
                                    seg_start,
                                    line,
                                    format!(
                                        "the \")\" at line {line}, column {column} is inside the \
                                     line and closes nothing"
                                    ),
                                    "delete that \")\" or add the \"(\" it was meant to close"
                                        .to_string(),
                                ),
                                false,
                            ));
                        }
                    }
                }
                TokKind::Comment => {}
            }
        }
        last_code = Some(k);
    }
    if let Some(prev) = last_code {
        new_trail[prev] += stack.len();
        closed_at[prev].extend(stack.iter().rev().map(|(o, _)| *o));
    }
    // A code line's trail and the lines of closers alone after it (with
    // only comments between) are one run of closers: moving closers within
    // a run changes the layout, not the forms, so only a run's count is
    // compared, and a change goes at the run's end (where a model that
    // writes closers on lines of their own dropped or doubled one).
    let mut runs: Vec<Vec<usize>> = Vec::new();
    for (k, gi) in seg.groups.clone().enumerate() {
        let g = &ctx.groups[gi];
        if !g.code {
            continue;
        }
        let closers_only = g.closer_indent.is_some() && g.trail.start == g.toks.start;
        match runs.last_mut() {
            Some(run) if closers_only => run.push(k),
            _ => runs.push(vec![k]),
        }
    }
    let trail_len = |k: usize| ctx.groups[seg.groups.start + k].trail.len();
    let mut edits = Vec::new();
    // Where a run's count changes, the next code line lands in another list
    // than the text says, and where closers are added, the lists they
    // close hold lines the text put elsewhere: those lines must line up
    // with the list the indentation puts them in, or the indentation is
    // not evidence enough (code indented by hand, off by a column).
    for run in &runs {
        let (first, last) = (run[0], run[run.len() - 1]);
        let old: usize = run.iter().map(|&k| trail_len(k)).sum();
        let inferred: usize = run.iter().map(|&k| new_trail[k]).sum();
        if old == inferred {
            continue;
        }
        // The lists the text itself closes elsewhere (or not at all): the
        // ones whose extent the repair sets.
        let in_run = |c: usize| {
            run.iter()
                .any(|&k| ctx.groups[seg.groups.start + k].trail.contains(&c))
        };
        let closed: Vec<usize> = run
            .iter()
            .flat_map(|&k| closed_at[k].iter().copied())
            .collect();
        let moved: Vec<usize> = closed
            .iter()
            .copied()
            .filter(|&o| !in_run(closer_of[o]))
            .collect();
        // A list opened after a string that spans lines: its column is one
        // of the string's last line, which says little about where the
        // lines after it belong.
        if let Some(&o) = moved.iter().find(|&&o| {
            let g = ctx.groups.partition_point(|g| g.toks.end <= o);
            ctx.lines.line_col(toks[o].start).0
                != ctx.lines.line_col(toks[ctx.groups[g].toks.start].start).0
        }) {
            let (ol, oc) = ctx.lines.line_col(toks[o].start);
            return Err((
                ctx.refusal(
                    seg_start,
                    ol,
                    format!(
                        "the list opened at line {ol}, column {oc} follows a string that spans \
                     lines, so its indentation does not say where it ends"
                    ),
                    "place the missing or extra \")\" yourself".into(),
                ),
                false,
            ));
        }
        let change = if inferred > old {
            Edit {
                old: trail_len(last),
                new: trail_len(last) + inferred - old,
            }
        } else {
            Edit {
                old: trail_len(last),
                new: trail_len(last).saturating_sub(old - inferred),
            }
        };
        let changed = ctx.change_of(seg.groups.start + last, &change);
        if inferred > old {
            if let Some(&o) = moved.iter().find(|&&o| {
                ctx.lines.line_col(toks[o].start).0 == ctx.group_line(seg.groups.start + first)
                    && takes_a_body(ctx, o)
            }) {
                let (ol, _) = ctx.lines.line_col(toks[o].start);
                return Err((
                    ctx.refusal(
                        seg_start,
                        ol,
                        format!(
                            "by the indentation `{}` would close on its own line {ol}, without a \
                         body, and the lines after it would stand at top level",
                            form_label(&ctx.text[toks[o].start..])
                        ),
                        "indent its body under it, or place the missing \")\" yourself".into(),
                    ),
                    false,
                ));
            }
        }
        let next = (last + 1..seg.groups.len()).find(|&j| {
            let g = &ctx.groups[seg.groups.start + j];
            g.code && g.indent.is_some()
        });
        // Where closers are added, every line inside the lists they close
        // (the text may have paired those lists with other closers, so all
        // of them count).
        let inside = (inferred > old)
            .then(|| {
                misaligned
                    .iter()
                    .enumerate()
                    .find_map(|(j, m)| m.filter(|o| closed.contains(o)).map(|o| (j, o)))
            })
            .flatten();
        let after = if inferred < old {
            &misaligned_strict
        } else {
            &misaligned
        };
        if let Some((j, o)) = next.and_then(|j| after[j].map(|o| (j, o))).or(inside) {
            let g = &ctx.groups[seg.groups.start + j];
            let (line, column) = ctx.lines.line_col(toks[g.toks.start].start);
            let (ol, oc) = ctx.lines.line_col(toks[o].start);
            return Err((
                ctx.refusal(
                    seg_start,
                    line,
                    format!(
                        "by the indentation line {line} belongs to the list opened at line {ol}, \
                     column {oc} (which needs {changed}), but its column {column} lines up \
                     with nothing in that list"
                    ),
                    format!(
                        "indent line {line} under the list it belongs to, or place the closers \
                     yourself (the indentation alone suggests: {changed})"
                    ),
                ),
                inferred < old,
            ));
        }
        // Closers to remove come off the run's end, line by line.
        let mut surplus = old.saturating_sub(inferred);
        if inferred > old {
            edits.push((seg.groups.start + last, change));
        }
        for &k in run.iter().rev() {
            if surplus == 0 {
                break;
            }
            let have = trail_len(k);
            let take = have.min(surplus);
            if take > 0 {
                edits.push((
                    seg.groups.start + k,
                    Edit {
                        old: have,
                        new: have - take,
                    },
                ));
            }
            surplus -= take;
        }
    }
    edits.sort_by_key(|(g, _)| *g);
    Ok(edits)
}

/// Whether the list opened by token `open` is an operator form whose body
/// follows its first line (`(eval-when (...)`, `(defun f (x)`,
/// `(with-open-file (s p)`): closing it on that line leaves it empty.
fn takes_a_body(ctx: &Ctx, open: usize) -> bool {
    let Some(head) = ctx.toks.get(open + 1).filter(|h| h.kind == TokKind::Code) else {
        return false;
    };
    let name = ctx.text[head.start..head.end].to_ascii_lowercase();
    let name = name.rsplit(':').next().unwrap_or(&name);
    matches!(
        name,
        "eval-when"
            | "progn"
            | "let"
            | "let*"
            | "flet"
            | "labels"
            | "macrolet"
            | "symbol-macrolet"
            | "locally"
            | "lambda"
            | "when"
            | "unless"
            | "block"
            | "tagbody"
            | "unwind-protect"
            | "handler-case"
            | "handler-bind"
            | "restart-case"
            | "defun"
            | "defmacro"
            | "defmethod"
            | "define-compiler-macro"
            | "destructuring-bind"
            | "multiple-value-bind"
            | "dolist"
            | "dotimes"
    ) || name.starts_with("with-")
}

/// Whether the list opened by token `open` is a form whose body is made of
/// top-level forms, which some code writes flush left (`progn`,
/// `eval-when`, `macrolet`, ...).
fn wraps_top_level_forms(ctx: &Ctx, open: usize) -> bool {
    let Some(head) = ctx.toks.get(open + 1).filter(|h| h.kind == TokKind::Code) else {
        return false;
    };
    let name = ctx.text[head.start..head.end].to_ascii_lowercase();
    let name = name.rsplit(':').next().unwrap_or(&name);
    matches!(
        name,
        "progn" | "eval-when" | "macrolet" | "symbol-macrolet" | "locally" | "let" | "let*"
    )
}

/// Whether a line indented at visual column `x` lines up as an element of
/// the list opened by token `open` whose elements so far are the tokens
/// `elements`: one or two columns right of its `(`, or under one of its
/// elements (for an operator that takes a body, under one that starts a
/// line: its body does not line up under its arguments). A
/// call whose first line holds its operator and an argument
/// (`(or a b` / `  (c)`) does not take a line under the operator: that is
/// where the next element of the enclosing list stands.
///
/// `strict`: two columns in only for an operator that takes a body (or one
/// whose arguments start on the next line), as an editor indents a call.
fn lines_up(ctx: &Ctx, open: usize, elements: &[usize], x: usize, strict: bool) -> bool {
    let t = ctx.toks[open];
    // The column of the `(` itself (`#(` is two characters).
    let paren = t.col + ctx.text[t.start..t.end].chars().count() - 1;
    let head = ctx.toks.get(open + 1).filter(|h| h.kind == TokKind::Code);
    let operator = head.is_some_and(|h| {
        let s = &ctx.text[h.start..h.end];
        h.col == paren + 1
            && !s.starts_with([':', '"', '#', '\''])
            && !s.starts_with(|c: char| c.is_ascii_digit())
    });
    let args_on_first_line = elements.len() >= 2
        && ctx.lines.line_col(ctx.toks[open + 1].start).0
            == ctx.lines.line_col(ctx.toks[open + 2].start).0;
    if x == paren + 1 {
        // One column in: data, a macro's body, or code in a backquote
        // template indented from the backquote (`` `(let ((a b)) `` /
        // `` (f a)``); not the next argument of a call.
        return !(operator && args_on_first_line)
            || body_like(ctx, open)
            || ctx.text[..t.start].ends_with('`');
    }
    // The first line of arguments under an operator alone on its line sets
    // their column (`(multiple-value-bind` / `    (a b) (f)`).
    if x > paren && operator && elements.len() == 1 {
        return true;
    }
    // Two columns in is a body; four, the arguments before a body in some
    // styles (`(defmacro m (x)` / `    "doc"`).
    let body = !(strict && operator && args_on_first_line) || takes_a_body(ctx, open);
    // Four columns in, for the arguments before a body, is how an editor
    // indents a macro with a body (`def...`, `with-...`, `do-...`), not a
    // call; and a macro's body does not line up under its arguments.
    // A macro's body may be indented by one to four columns (a body
    // indentation of 3 is a house style in some code).
    let macro_body = operator && x > paren && x <= paren + 4 && body_like(ctx, open);
    macro_body
        || (x == paren + 2 && body)
        || (x == paren + 4 && (!operator || body_like(ctx, open)))
        || {
            let any_element = !(operator && takes_a_body(ctx, open));
            elements.iter().skip(1).any(|&e| {
                let e = &ctx.toks[e];
                e.col == x && (any_element || e.first_on_line)
            })
        }
}

/// Whether the head of the list opened by token `open` is indented as a
/// macro with a body by an editor: one of [`takes_a_body`], or named
/// `def...`, `with-...`, `without-...`, `do-...`, `do`, `do*`.
fn body_like(ctx: &Ctx, open: usize) -> bool {
    let Some(head) = ctx.toks.get(open + 1).filter(|h| h.kind == TokKind::Code) else {
        return false;
    };
    let name = ctx.text[head.start..head.end].to_ascii_lowercase();
    let name = name.rsplit(':').next().unwrap_or(&name);
    takes_a_body(ctx, open)
        || matches!(name, "do" | "do*")
        || ["def", "with-", "without-", "do-"]
            .iter()
            .any(|p| name.starts_with(p))
}

/// The repaired text and its changes.
fn apply(ctx: &Ctx, edits: &[(usize, Edit)]) -> (String, Vec<Change>) {
    let text = ctx.text;
    let mut out = String::with_capacity(text.len() + 16);
    let mut changes = Vec::with_capacity(edits.len());
    let mut pos = 0;
    for &(g, e) in edits {
        let change = ctx.change_of(g, &e);
        if e.new > e.old {
            out.push_str(&text[pos..change.offset]);
            out.push_str(&")".repeat(e.new - e.old));
            pos = change.offset;
        } else {
            let grp = &ctx.groups[g];
            for t in grp.trail.end - (e.old - e.new)..grp.trail.end {
                let tok = ctx.toks[t];
                out.push_str(&text[pos..tok.start]);
                pos = tok.end;
            }
        }
        changes.push(change);
    }
    out.push_str(&text[pos..]);
    (out, changes)
}

/// The second way, where the indentation rule refuses: one form whose
/// parentheses are one short or one too many, in a text whose other forms
/// read. Every place where one `)` could go (the end of each line of the
/// form) or come off (the last `)` of each line) is tried, but for places
/// that would hold lines against the indentation rule
/// (`moves_against_indentation`). The end of the form (its last line) is
/// taken when the text then reads and has fewer lines that line up with
/// nothing in their list (`misaligned_lines`) than with the `)` at any
/// other place; otherwise the refusal stands. This restores the closer a
/// writer dropped or doubled at the end of a form whose own indentation is
/// off in a line (code indented by hand): the rule above refuses it, since
/// that line says nothing, while every other line still points at the end.
/// Inside the form, one line is as likely as another where the indentation
/// cannot tell, so no other place is ever chosen.
fn by_least_disagreement(text: &str) -> Option<(String, Vec<Change>)> {
    let parse = cst::parse(text);
    let lines = LineIndex::new(text);
    let toks = tokens(text, &parse);
    let groups = line_groups(text, &toks, false);
    let ctx = Ctx {
        text,
        lines: &lines,
        toks: &toks,
        groups: &groups,
        strict: false,
    };
    let segs = segments(&groups);
    let mut broken = units(&ctx, &segs).into_iter().filter(|u| !u.balanced);
    let unit = broken.next()?;
    if broken.next().is_some() {
        return None;
    }
    let unit_groups =
        segs[unit.segments.start].groups.start..segs[unit.segments.end - 1].groups.end;
    let (net, low) = seg_balance(
        &ctx,
        &Segment {
            groups: unit_groups.clone(),
        },
    );
    if !((net == 1 && low == 0) || (net == -1 && low == -1)) {
        return None;
    }
    // A list opened after a string that spans lines stands at a column of
    // the string's text: its elements' columns say nothing.
    if unit_groups.clone().any(|g| {
        let first_line = lines.line_col(toks[groups[g].toks.start].start).0;
        groups[g]
            .toks
            .clone()
            .any(|t| toks[t].kind == TokKind::Open && lines.line_col(toks[t].start).0 != first_line)
    }) {
        return None;
    }
    let line_start = |at: usize| text[..at].rfind('\n').map_or(0, |i| i + 1);
    let start = line_start(toks[groups[unit_groups.start].toks.start].start);
    let end = groups
        .get(unit_groups.end)
        .map_or(text.len(), |g| line_start(toks[g.toks.start].start));
    // Each place costs a reading of the form: a long run (an unclosed form
    // near the top of a long file) is left to the rule above.
    if (end - start) * unit_groups.len() > 4 << 20 {
        return None;
    }
    let form = &text[start..end];
    let form_parse = cst::parse(form);
    let form_toks = tokens(form, &form_parse);
    let form_groups = line_groups(form, &form_toks, false);
    // Where a closer could go in (after each line's code and closers) or
    // come off (each line's last closer), as offsets in `form`.
    let places: Vec<usize> = form_groups
        .iter()
        .filter(|g| g.code)
        .filter_map(|g| {
            if net == 1 {
                Some(g.insert_at)
            } else {
                (!g.trail.is_empty()).then(|| form_toks[g.trail.end - 1].start)
            }
        })
        .collect();
    let last_place = *places.last()?;
    let mut scored: Vec<(usize, usize, String)> = Vec::new();
    for at in places {
        let candidate = if net == 1 {
            format!("{}){}", &form[..at], &form[at..])
        } else {
            format!("{}{}", &form[..at], &form[at + 1..])
        };
        let p = cst::parse(&candidate);
        if !p.is_ok() {
            continue;
        }
        if scored.iter().any(|(_, _, t)| *t == candidate)
            || moves_against_indentation(&candidate, &p, at, net == 1)
            || holds_what_no_one_writes(&candidate, &p, at, net == 1)
        {
            continue;
        }
        scored.push((misaligned_lines(&candidate, &p), at, candidate));
    }
    scored.sort_by_key(|(n, _, _)| *n);
    let (best, at, repaired_form) = scored.first()?;
    if *best == usize::MAX || scored.get(1).is_some_and(|(n, _, _)| n == best) {
        return None;
    }
    // Only the end: where the indentation cannot say, a closer dropped or
    // doubled inside the form is as likely at one line as at another, but
    // the last line is where a writer most often miscounts.
    if *at < last_place {
        return None;
    }
    let offset = start + at;
    let (line, column) = lines.line_col(offset);
    let change = Change {
        added: net == 1,
        count: 1,
        offset,
        line,
        column,
    };
    let repaired = format!("{}{}{}", &text[..start], repaired_form, &text[end..]);
    let after = cst::parse(&repaired);
    if !after.is_ok() {
        return None;
    }
    let span = lines.line_col(start).0..=lines.line_col(end.saturating_sub(1).max(start)).0;
    let broken = [(span, start)];
    let changes = vec![change];
    if implausible_form(&repaired, &after, &changes, &broken, false).is_some()
        || indented_at_top_level(&repaired, &after, &broken).is_some()
    {
        return None;
    }
    Some((repaired, changes))
}

/// Whether the list a closer placed at `at` closes (`added`), or the list
/// whose closer came off at `at`, then holds its lines against the
/// indentation rule: a list closed at a line's end while the next code line
/// is indented right of its opener (`(loop for x in l)` /
/// `      collect x`), or a list kept open over a line at or left of its
/// opener.
fn moves_against_indentation(text: &str, parse: &cst::Parse, at: usize, added: bool) -> bool {
    let toks = tokens(text, parse);
    let mut stack = Vec::new();
    // The list in question, by its opener, and where it closes.
    let mut list: Option<(usize, usize)> = None;
    for (i, t) in toks.iter().enumerate() {
        if !added && list.is_none() && t.start >= at {
            if let Some(&o) = stack.last() {
                list = Some((o, usize::MAX));
            }
        }
        match t.kind {
            TokKind::Open => stack.push(i),
            TokKind::Close => {
                let o = stack.pop();
                match (&mut list, o) {
                    (Some((lo, end)), Some(o)) if *lo == o => *end = i,
                    (None, Some(o)) if added && t.start == at => list = Some((o, i)),
                    _ => {}
                }
            }
            _ => {}
        }
    }
    let Some((open, close)) = list else {
        return false;
    };
    let col = toks[open].col;
    let line_starts = |range: std::ops::Range<usize>| {
        toks[range]
            .iter()
            .filter(|t| t.first_on_line && matches!(t.kind, TokKind::Open | TokKind::Code))
            .map(|t| t.col)
            .collect::<Vec<_>>()
    };
    if added {
        // The next line's start, if it is code.
        let next = toks[close + 1..]
            .iter()
            .find(|t| t.first_on_line && t.kind != TokKind::Comment);
        next.is_some_and(|t| {
            t.kind != TokKind::Close
                && t.col > col
                && lines_up_inside(text, &toks, open, close, t.col)
        })
    } else {
        let from = toks.partition_point(|t| t.start < at);
        line_starts(from..close.min(toks.len()))
            .iter()
            .any(|&x| x <= col)
    }
}

/// Whether `text`, a form with one `)` added or removed at `at`, holds a
/// form no one writes (`implausible_form`: an operator without its body, a
/// form with too many arguments) or a line indented where nothing is open.
fn holds_what_no_one_writes(text: &str, parse: &cst::Parse, at: usize, added: bool) -> bool {
    let lines = LineIndex::new(text);
    let (line, column) = lines.line_col(at);
    let change = Change {
        added,
        count: 1,
        offset: at,
        line,
        column,
    };
    let all = [(1..=lines.line_count(), 0)];
    implausible_form(text, parse, &[change], &all, false).is_some()
        || indented_at_top_level(text, parse, &all).is_some()
}

/// Whether a line at visual column `x` lines up as an element of the list
/// opened by token `open` and closed by token `close` (strictly, as an
/// editor indents: see `lines_up`).
fn lines_up_inside(text: &str, toks: &[Tok], open: usize, close: usize, x: usize) -> bool {
    let lines = LineIndex::new(text);
    let groups = line_groups(text, toks, false);
    let ctx = Ctx {
        text,
        lines: &lines,
        toks,
        groups: &groups,
        strict: true,
    };
    let mut elements = Vec::new();
    let mut depth = 0usize;
    for (i, t) in toks.iter().enumerate().take(close).skip(open + 1) {
        match t.kind {
            TokKind::Open => {
                if depth == 0 {
                    elements.push(i);
                }
                depth += 1;
            }
            TokKind::Close => depth = depth.saturating_sub(1),
            TokKind::Code if depth == 0 => elements.push(i),
            _ => {}
        }
    }
    lines_up(&ctx, open, &elements, x, true)
}

/// How many code lines of `text` (which reads) start at a column that
/// lines up with nothing in the list they stand in (`lines_up`), or, at top
/// level, right of the base column. A line at the base column in a
/// wrapper of top-level forms opened there (`(eval-when (...)` /
/// `(defun f ...)`, a body written flush left) counts as lined up; in any
/// other list it disqualifies the text (`usize::MAX`).
fn misaligned_lines(text: &str, parse: &cst::Parse) -> usize {
    let lines = LineIndex::new(text);
    let toks = tokens(text, parse);
    let groups = line_groups(text, &toks, false);
    let ctx = Ctx {
        text,
        lines: &lines,
        toks: &toks,
        groups: &groups,
        strict: false,
    };
    let base = groups.iter().find_map(|g| g.indent).unwrap_or(0);
    let mut stack: Vec<(usize, Vec<usize>)> = Vec::new();
    let mut count = 0;
    for g in groups.iter().filter(|g| g.code) {
        if let Some(x) = g.indent {
            let off = match stack.last() {
                Some((o, elements)) => {
                    if x == base && !(toks[*o].col == base && wraps_top_level_forms(&ctx, *o)) {
                        // A line at the base column inside a form starts the
                        // next form: no count makes up for that.
                        return usize::MAX;
                    }
                    !lines_up(&ctx, *o, elements, x, false) && x != base
                }
                None => x != base,
            };
            count += usize::from(off);
        }
        for t in g.toks.clone() {
            match toks[t].kind {
                TokKind::Open => {
                    if let Some((_, elements)) = stack.last_mut() {
                        elements.push(t);
                    }
                    stack.push((t, Vec::new()));
                }
                TokKind::Code => {
                    if let Some((_, elements)) = stack.last_mut() {
                        elements.push(t);
                    }
                }
                TokKind::Close => {
                    stack.pop();
                }
                TokKind::Comment => {}
            }
        }
    }
    count
}

#[cfg(test)]
mod tests {
    use super::*;

    fn repaired(text: &str) -> (String, Vec<String>) {
        match repair_parens(text) {
            Repair::Repaired { text, changes } => {
                (text, changes.iter().map(|c| c.to_string()).collect())
            }
            other => panic!("not repaired: {other:?}\n{text}"),
        }
    }

    fn refused(text: &str) -> Refusal {
        match repair_parens(text) {
            Repair::Refused(r) => r,
            other => panic!("not refused: {other:?}\n{text}"),
        }
    }

    const DEFUN: &str = "(defun foo (x)\n  (let ((y (* x 2)))\n    (when (> y 3)\n      (print y))\n    y))\n\n(defun bar () 1)\n";

    #[test]
    fn a_closer_dropped_at_the_end_of_a_defun() {
        let broken = DEFUN.replacen("    y))\n", "    y)\n", 1);
        let (text, changes) = repaired(&broken);
        assert_eq!(text, DEFUN);
        assert_eq!(changes, vec!["added \")\" at line 5, column 7"]);
        // At the end of the text too, and several at once.
        let (text, changes) = repaired("(defun foo (x)\n  (bar (baz x");
        assert_eq!(text, "(defun foo (x)\n  (bar (baz x)))");
        assert_eq!(changes, vec!["added \")))\" at line 2, column 14"]);
    }

    #[test]
    fn a_closer_dropped_inside_a_form() {
        let broken = DEFUN.replacen("(print y))\n", "(print y)\n", 1);
        let (text, changes) = repaired(&broken);
        assert_eq!(text, DEFUN);
        assert_eq!(changes, vec!["added \")\" at line 4, column 16"]);
        let broken = DEFUN.replacen("(let ((y (* x 2)))", "(let ((y (* x 2))", 1);
        assert_eq!(repaired(&broken).0, DEFUN);
    }

    #[test]
    fn one_closer_too_many() {
        let broken = DEFUN.replacen("    y))\n", "    y)))\n", 1);
        let (text, changes) = repaired(&broken);
        assert_eq!(text, DEFUN);
        assert_eq!(changes, vec!["removed \")\" at line 5, column 8"]);
        let broken = DEFUN.replacen("(print y))\n", "(print y)))\n", 1);
        let (text, changes) = repaired(&broken);
        assert_eq!(text, DEFUN);
        assert_eq!(changes, vec!["removed \")\" at line 4, column 17"]);
    }

    #[test]
    fn parens_in_strings_comments_and_characters_are_not_parens() {
        let good = "(defun f (s) ; (unbalanced (comment\n  \"a ( string )) with \\\" (\"\n  #| (block #| nested ( |# ) |#\n  (list #\\( #\\) #\\; #\\\" '|odd (sym| #'car #(1 2) #+sbcl (x) #.(y))\n  (g s))\n";
        assert_eq!(repair_parens(good), Repair::Unchanged);
        let broken = good.replacen("  (g s))\n", "  (g s)\n", 1);
        let (text, changes) = repaired(&broken);
        assert_eq!(text, good);
        assert_eq!(changes, vec!["added \")\" at line 5, column 8"]);
        let broken = good.replacen("#.(y))\n", "#.(y)\n", 1);
        assert_eq!(repaired(&broken).0, good);
    }

    #[test]
    fn closers_go_before_a_trailing_comment() {
        let (text, changes) = repaired("(defun f ()\n  (g) ; call g\n\n(defun h ())\n");
        assert_eq!(text, "(defun f ()\n  (g)) ; call g\n\n(defun h ())\n");
        assert_eq!(changes, vec!["added \")\" at line 2, column 6"]);
        // Unless the text ends in an indented line of its own: there.
        let (text, changes) = repaired("(deftest t1\n    (f)\n  9 ; not 7\n  ");
        assert_eq!(text, "(deftest t1\n    (f)\n  9 ; not 7\n  )");
        assert_eq!(changes, vec!["added \")\" at line 4, column 3"]);
    }

    #[test]
    fn balanced_text_is_left_alone_whatever_its_indentation() {
        for text in [
            "(defun f ()\n(g)\n        (h))\n",
            "(defun f ()\n#+sbcl (g)\n  (h))\n",
            "(defparameter *x*\n'((a b)\n(c d)))\n",
            "(a\n )\n",
        ] {
            assert_eq!(repair_parens(text), Repair::Unchanged, "{text}");
        }
        // Odd but balanced forms beside a broken one stay as they are.
        let text = "(defun f ()\n#+sbcl (g)\n  (h))\n\n(defun k ()\n  (m)\n";
        let (out, _) = repaired(text);
        assert_eq!(
            out,
            "(defun f ()\n#+sbcl (g)\n  (h))\n\n(defun k ()\n  (m))\n"
        );
    }

    #[test]
    fn unclosed_strings_and_comments_are_refused() {
        let r = refused("(defun foo ()\n  \"doc\n  (bar))\n");
        assert_eq!((r.form.as_str(), r.form_line, r.line), ("(defun foo", 1, 2));
        assert!(
            r.to_string().contains("string opened at line 2, column 3"),
            "{r}"
        );
        let r = refused("(defun foo ()\n  #| note\n  (bar))\n");
        assert!(r.to_string().contains("add `|#`"), "{r}");
    }

    #[test]
    fn indentation_that_contradicts_the_structure_is_refused() {
        // A closer inside a line that the indentation would move.
        // (With a second form left open after it: alone, the one closer it
        // lacks would go at its end, see `by_least_disagreement`.)
        let r = refused("(defun foo (a\n  b) c\n  (d)\n(defun bar ()\n  (baz)\n");
        assert!(r.reason.contains("inside the line"), "{r}");
        // Dedented to where no list is open, yet indented.
        let r = refused("(setq foo\n#+sbcl (bar)\n  (baz)\n");
        assert_eq!(r.line, 3, "{r}");
        assert_eq!(r.form, "(setq foo");
        // An operator closed on its own line, leaving it without a body.
        let r = refused("(defun foo ()\n#+sbcl (bar)\n  (baz)\n");
        assert!(r.reason.contains("without a body"), "{r}");
        let r = refused("(eval-when (:execute)\n(defvar *a* 1)\n(defvar *b*\n  2)");
        assert_eq!(
            (r.form.as_str(), r.line),
            ("(eval-when (:execute)", 1),
            "{r}"
        );
        // A line that would join a list it does not line up with.
        let r = refused("(defun f (s)\n  (g s\n          x\n  (k))\n");
        assert!(r.reason.contains("lines up with nothing"), "{r}");
        // Removing a closer of `(declare` would put `(g x)` two columns into
        // a call that takes no body; the second reading keeps the lists
        // line 2 closes itself, and the extra closer comes off the end.
        let (text, _) = repaired("(defun f (x)\n  (declare (fixnum x))\n    (g x)))\n");
        assert_eq!(text, "(defun f (x)\n  (declare (fixnum x))\n    (g x))\n");
        // Would need both an addition and a removal by the indentation
        // rule; one closer short is placed at the end instead, where it
        // leaves only the line indented by hand lined up with nothing.
        let (text, changes) = repaired("(defun foo ()\n  (bar)\n    (baz)\n  (qux)\n");
        assert_eq!(text, "(defun foo ()\n  (bar)\n    (baz)\n  (qux))\n");
        assert_eq!(changes, ["added \")\" at line 4, column 8"]);
        // One too many at the end of the same form comes off the end.
        let (text, changes) = repaired("(defun foo ()\n  (bar)\n    (baz)\n  (qux)))\n");
        assert_eq!(text, "(defun foo ()\n  (bar)\n    (baz)\n  (qux))\n");
        assert_eq!(changes, ["removed \")\" at line 4, column 9"]);
        // Where the end is not the one place that leaves the fewest lines
        // lined up with nothing, the refusal stands.
        let r = refused("(defun foo (x)\n  (let ((a (f x))\n    (g a))\n   (h a)\n");
        assert!(r.reason.contains("both add and remove"), "{r}");
        // Where the indentation is the only evidence, it wins: `(baz)` is
        // indented under `(bar`, so the extra closer goes at line 2.
        let (text, _) = repaired("(defun foo ()\n  (bar)\n    (baz)))\n");
        assert_eq!(text, "(defun foo ()\n  (bar\n    (baz)))\n");
    }

    #[test]
    fn closers_on_lines_of_their_own_change_at_the_end_of_their_run() {
        // The closers after a code line, with only comments and closers on
        // lines of their own after it, are one run: a change goes at its end.
        let good = "(defun f (x)\n  (case x\n    (:a 1)\n    ;; (:b no)\n    )\n  )\n";
        let broken = good.replacen("\n  )\n", "\n  \n", 1);
        assert_eq!(
            repaired(&broken).0,
            good.replacen("\n    )\n  )\n", "\n    ))\n  \n", 1)
        );
        let (text, changes) = repaired("(defun f ()\n  (g)\n  ;; todo\n  ))\n");
        assert_eq!(text, "(defun f ()\n  (g)\n  ;; todo\n  )\n");
        assert_eq!(changes, vec!["removed \")\" at line 4, column 4"]);
        // Moving closers within a run is layout, not structure: left alone.
        let text = "(defpackage :p\n  (:use :cl)\n  (:export #:a\n           #:b\n           ))\n\n(defun g ()\n  (h)\n";
        assert_eq!(repaired(text).0, text.replacen("  (h)\n", "  (h))\n", 1));
    }

    #[test]
    fn a_body_under_its_clause_rather_than_its_test() {
        // `varying` is indented right of `(zerop n)`, which the line closes
        // itself: the first reading would reopen it and refuses; the
        // second keeps it as written and places the missing closer.
        let good = "(defun f (n)\n  (cond ((zerop n)\n          varying)\n        (t\n          fixed)))\n";
        assert_eq!(repair_parens(good), Repair::Unchanged);
        let (text, changes) = repaired(&good.replacen("fixed)))", "fixed))", 1));
        assert_eq!(text, good);
        assert_eq!(changes, vec!["added \")\" at line 5, column 18"]);
        assert_eq!(repaired(&good.replacen("fixed)))", "fixed))))", 1)).0, good);
    }

    #[test]
    fn forms_no_one_writes_are_refused() {
        // `(let` at the column of `(multiple-value-bind`, though inside it:
        // by the indentation the binding would have no body.
        // (A second form left open after it keeps the end from being the
        // one place a closer could go.)
        let r = refused(
            "(defun f (x)\n  (multiple-value-bind (a b)\n      (floor x)\n  (let ((c a))\n    (+ b c)))\n(defun g ()\n  (h)\n",
        );
        assert!(r.reason.contains("would have no body"), "{r}");
        assert_eq!(r.line, 2, "{r}");
        let r = refused(
            "(locally\n  (declare (optimize speed))\n(defun g ()\n  1)\n(defun h ()\n  (i)\n",
        );
        assert!(
            r.reason.contains("`(locally` at line 1 would have no body"),
            "{r}"
        );
        // Alone, a wrapper whose body is written flush left gets its
        // closer at the end.
        let (text, _) = repaired("(locally\n  (declare (optimize speed))\n(defun g ()\n  1)\n");
        assert_eq!(
            text,
            "(locally\n  (declare (optimize speed))\n(defun g ()\n  1))\n"
        );
        // A clause moved out of its `cond` is not code.
        let r = refused(
            "(defun f (x)\n  (cond\n   ((null x)\n    nil)\n  ((consp x)\n   (car x))\n  (t x))\n",
        );
        assert!(r.reason.contains("first element is a list"), "{r}");
        // Too many arguments.
        let r = refused(
            "(defmacro m ()\n  `(progn\n     (defvar *a* (make-lock)\n\n       (defun g () 1)\n       (defun h () 2)))\n",
        );
        assert!(
            r.reason
                .contains("`(defvar *a*` at line 3 would have 4 arguments"),
            "{r}"
        );
        // A binding with two forms: arguments moved out of their call.
        let r = refused(
            "(defun f ()\n  (let ((doc (make-doc\n             'impl\n             nil))\n    doc))\n",
        );
        assert!(
            r.reason.contains("a binding with more than one form"),
            "{r}"
        );
        // A quoted list closed before the comment after its `(`.
        let r = refused(
            "(defparameter *x*\n  (append\n     '(;; letters\n      #\\a #\\b)\n  \"Doc.\")\n",
        );
        assert!(r.reason.contains("close before its first element"), "{r}");
        // A docstring at column 0 would stand alone.
        let r = refused("(defvar *p*\n  (list (a)\n        (b))\n\"The doc.\"\n");
        assert!(r.reason.contains("stand alone at top level"), "{r}");
        // A list opened after a string spanning lines.
        let r = refused("(defun f ()\n  (format t \"a\nb~%\" (mapcar #'g\n    (h)))\n");
        assert!(r.reason.contains("follows a string that spans"), "{r}");
    }

    #[test]
    fn a_macro_is_indented_apart_from_a_call() {
        // A body three columns in, as some code indents every body.
        let (text, _) =
            repaired("(defmethod m ((x t) &rest r)\n   (declare (ignore r))\n   (g x)\n");
        assert_eq!(
            text,
            "(defmethod m ((x t) &rest r)\n   (declare (ignore r))\n   (g x))\n"
        );
        // A backquote template indented from the backquote.
        let good = "(defmacro m (x)\n  `(if ,x\n    (g)\n    (h)))\n";
        assert_eq!(repaired(&good.replacen("(h)))", "(h))", 1)).0, good);
        // `documentation` is a function, not a `do-` macro: `d` does not
        // join it, and the extra closer comes off the end.
        let (text, _) =
            repaired("(defun f (v d)\n  (setf (documentation v 'variable)\n          d)))\n");
        assert_eq!(
            text,
            "(defun f (v d)\n  (setf (documentation v 'variable)\n          d))\n"
        );
        // Four columns in lines up under a macro with a body, not a call.
        let (text, _) = repaired("(defun f (x)\n  (with-foo (x)\n      (g x)\n    (h x)\n");
        assert_eq!(
            text,
            "(defun f (x)\n  (with-foo (x)\n      (g x)\n    (h x)))\n"
        );
        let r = refused("(defun f (x)\n  (if (g x 3\n          'a\n          'b\n      (h)))\n");
        assert!(r.reason.contains("lines up with nothing"), "{r}");
        // A body does not line up under the macro's first-line arguments.
        let r = refused("(defun f (l)\n  (mapcar (lambda (x) (g x)\n                  l))\n");
        assert!(r.reason.contains("lines up with nothing"), "{r}");
    }

    #[test]
    fn refusals_name_the_form() {
        let r = refused("(in-package :x)\n\n(defmethod area :around ((s shape))\n  (foo \"x\n");
        assert_eq!(r.form, "(defmethod area");
        assert_eq!(r.form_line, 3);
    }

    #[test]
    fn form_labels() {
        assert_eq!(form_label("(defun foo (x)\n"), "(defun foo");
        assert_eq!(form_label("(defun (setf foo) (v x)"), "(defun (setf foo)");
        assert_eq!(form_label("#+sbcl (defvar *x* 1)"), "#+sbcl (defvar *x*");
        assert_eq!(form_label("(progn)"), "(progn");
    }

    #[test]
    fn tabs_count_to_the_next_multiple_of_eight() {
        let (text, _) = repaired("(defun f ()\n\t(let ((x 1))\n\t  (g x)\n\t(h))\n");
        assert_eq!(text, "(defun f ()\n\t(let ((x 1))\n\t  (g x))\n\t(h))\n");
    }

    #[test]
    fn vectors_and_extra_closers_at_top_level() {
        let (text, changes) = repaired("(defvar *v* #(1 2\n              3)\n(defun g ())\n");
        assert_eq!(text, "(defvar *v* #(1 2\n              3))\n(defun g ())\n");
        assert_eq!(changes.len(), 1);
        let (text, changes) = repaired("(defun g () 1))\n(defun h () 2)\n");
        assert_eq!(text, "(defun g () 1)\n(defun h () 2)\n");
        assert_eq!(changes, vec!["removed \")\" at line 1, column 15"]);
    }
}
