//! The shapes of forms the indentation rule knows: operators that take a
//! body, wrappers of top-level forms, and where a line lines up as an
//! element of a list, as an editor indents it.

use super::lines::{Ctx, TokKind};

/// The operator of the list opened by token `open`, lower case and without
/// its package prefix (`cl:defun` is `defun`), when its head is a symbol.
fn head_name(ctx: &Ctx, open: usize) -> Option<String> {
    let head = ctx.toks.get(open + 1).filter(|h| h.kind == TokKind::Code)?;
    let name = ctx.text[head.start..head.end].to_ascii_lowercase();
    Some(name.rsplit(':').next().unwrap_or(&name).to_string())
}

/// Whether the list opened by token `open` is an operator form whose body
/// follows its first line (`(eval-when (...)`, `(defun f (x)`,
/// `(with-open-file (s p)`): closing it on that line leaves it empty.
pub(super) fn takes_a_body(ctx: &Ctx, open: usize) -> bool {
    let Some(name) = head_name(ctx, open) else {
        return false;
    };
    let name = name.as_str();
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
pub(super) fn wraps_top_level_forms(ctx: &Ctx, open: usize) -> bool {
    let Some(name) = head_name(ctx, open) else {
        return false;
    };
    let name = name.as_str();
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
pub(super) fn lines_up(ctx: &Ctx, open: usize, elements: &[usize], x: usize, strict: bool) -> bool {
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
    let Some(name) = head_name(ctx, open) else {
        return false;
    };
    let name = name.as_str();
    takes_a_body(ctx, open)
        || matches!(name, "do" | "do*")
        || ["def", "with-", "without-", "do-"]
            .iter()
            .any(|p| name.starts_with(p))
}
