//! The checks on a repaired text: a form no one writes
//! (`implausible_form`) or a line indented where nothing is open
//! (`indented_at_top_level`) means the indentation, not the closers, is off.

use super::lines::{Layout, TokKind};
use super::{form_label, Change, Refusal};
use crate::cst::{self, LineIndex, NodeKind};

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
pub(super) fn implausible_form(
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
pub(super) fn indented_at_top_level(
    text: &str,
    parse: &cst::Parse,
    ranges: &[(std::ops::RangeInclusive<usize>, usize)],
) -> Option<(usize, usize)> {
    let layout = Layout::of(text, parse);
    let (lines, toks, groups) = (&layout.lines, &layout.toks, &layout.groups);
    let base = groups.iter().find_map(|g| g.indent).unwrap_or(0);
    let mut depth = 0i64;
    for g in groups {
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
