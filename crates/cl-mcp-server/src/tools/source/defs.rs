//! Definitions in Lisp source: what a top-level form defines (`defun foo`,
//! `defmethod print-object :around (point t)`, `(setf foo)`, ...), shared by
//! the collapsed view, grep, signatures and structural edits, so all four
//! agree on what a definition is and what it is called.
//!
//! Navigation uses the fast [`scan`] spans; small pieces (names, lambda
//! lists, signatures) are read with the CST reader.

use std::ops::Range;

use lisp_syntax::cst::{self, Node, NodeKind, SymbolName};

use super::scan;

/// One definition form.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Definition {
    /// The head as written, lower-cased: `defun`, `defmethod`, `sb-xc:defmacro`.
    pub kind: String,
    /// The head's symbol name without package, lower-cased: `defun`.
    pub kind_key: String,
    /// The name as written, whitespace collapsed: `foo`, `(setf foo)`.
    pub name: String,
    /// The name normalized for matching: symbol names upper-cased, package
    /// prefixes dropped: `FOO`, `(SETF FOO)`.
    pub name_key: String,
    /// `defmethod` qualifiers as written (`:around`).
    pub qualifiers: Vec<String>,
    /// `defmethod` specializers of the required parameters (`t` when
    /// unspecialized), as written.
    pub specializers: Option<Vec<String>>,
    /// The definition form itself.
    pub span: Range<usize>,
    /// The top-level item holding it (a reader conditional or container
    /// such as `eval-when` around it included).
    pub item_span: Range<usize>,
    /// The smallest unit to insert around or delete: the form with its
    /// reader-conditional prefix, if any.
    pub unit_span: Range<usize>,
    /// End of the signature part (head, name, qualifiers, lambda list or
    /// superclasses): what the collapsed view shows.
    pub sig_end: usize,
    /// Nesting inside `eval-when`/`progn`/... (0 at top level).
    pub depth: usize,
}

impl Definition {
    /// The name with qualifiers and specializers, the way `formName` is
    /// written for `lisp-edit-form`: `print-object :around (point t)`.
    pub fn full_name(&self) -> String {
        let mut s = self.name.clone();
        for q in &self.qualifiers {
            s.push(' ');
            s.push_str(q);
        }
        if let Some(sp) = &self.specializers {
            s.push_str(" (");
            s.push_str(&sp.join(" "));
            s.push(')');
        }
        s
    }

    /// The reader-conditional guards in front of the form, comments
    /// dropped: `#+sbcl`, `#-(or ccl ecl) #+unix`; `None` when unguarded.
    pub fn guard(&self, src: &str) -> Option<String> {
        let mut parts = Vec::new();
        let within = &src[..self.span.end];
        let mut scanner = scan::Scanner::new(within);
        let mut at = self.unit_span.start;
        while at < self.span.start && scan::guarded_start(within, at).is_some() {
            let f0 = scanner.skip_trivia(at + 2);
            let f1 = scanner.skip_form(f0).ok()?;
            parts.push(format!("{}{}", &src[at..at + 2], one_line(&src[f0..f1])));
            at = scanner.skip_trivia(f1);
        }
        (!parts.is_empty()).then(|| parts.join(" "))
    }

    /// One line: the signature with whitespace and comments collapsed,
    /// `(defun foo (x) ...)`.
    pub fn signature(&self, src: &str) -> String {
        let mut s = one_line(&src[self.span.start..self.sig_end]);
        let rest = src
            .get(self.sig_end..self.span.end.saturating_sub(1))
            .unwrap_or("");
        if !rest.trim().is_empty() {
            s.push_str(" ...)");
        } else if self.sig_end < self.span.end && src.as_bytes()[self.span.end - 1] == b')' {
            // Nothing but the form's own `)` after the signature part
            // (which may itself end in `)`, as `(defgeneric f (x))` does).
            s.push(')');
        }
        s
    }
}

/// Forms whose elements are themselves top-level forms (CLHS 3.2.3.1), and
/// how many leading elements (head included) are not.
fn container_skip(head_key: &str) -> Option<usize> {
    match head_key {
        "progn" | "locally" => Some(1),
        "eval-when" | "macrolet" | "symbol-macrolet" => Some(2),
        _ => None,
    }
}

/// The lower-cased symbol name of a token (package dropped).
fn symbol_key(token: &str) -> String {
    SymbolName::read(token).name.to_lowercase()
}

/// The head token of the list at `span`, if it is one.
pub fn head_of(src: &str, span: Range<usize>) -> Option<Range<usize>> {
    if src.as_bytes().get(span.start) != Some(&b'(') {
        return None;
    }
    let h = scan::elements(src, span).next()?;
    let c = src.as_bytes()[h.start];
    (!matches!(c, b'(' | b'"' | b'#' | b'\'' | b'`' | b',')).then_some(h)
}

/// Every definition in the top-level items `forms` of `src`, descending
/// into containers and reader conditionals.
pub fn definitions<'a>(
    src: &str,
    forms: impl Iterator<Item = &'a Range<usize>>,
) -> Vec<Definition> {
    let mut out = Vec::new();
    for f in forms {
        collect(src, f.clone(), f.clone(), f.clone(), 0, &mut out);
    }
    out
}

fn collect(
    src: &str,
    item: Range<usize>,
    unit: Range<usize>,
    span: Range<usize>,
    depth: usize,
    out: &mut Vec<Definition>,
) {
    if depth > 8 {
        return;
    }
    // Reader conditionals (`#+a #-b (defun ...)`) are unwrapped in a loop:
    // a hostile chain of them must not recurse.
    let mut span = span;
    let mut start = span.start;
    // Nothing after the form is read.
    let within = &src[..span.end];
    while let Some(g) = scan::guarded_start(within, start) {
        start = g;
    }
    if start != span.start {
        match scan::form_end(within, start) {
            Some(end) if end <= span.end => span = start..end,
            _ => return,
        }
    }
    let Some(head) = head_of(src, span.clone()) else {
        return;
    };
    let key = symbol_key(&src[head.clone()]);
    if let Some(skip) = container_skip(&key) {
        for e in scan::elements(src, span.clone()).skip(skip) {
            collect(src, item.clone(), e.clone(), e, depth + 1, out);
        }
        return;
    }
    if let Some(d) = definition_at(src, span.clone(), item.clone(), unit, depth) {
        out.push(d);
        return;
    }
    // Other top-level macros often wrap definitions (ASDF's
    // `with-upgradability`, `let` over `defun`): their direct sub-forms
    // with a def... head count, one level down.
    if depth == 0 {
        for e in scan::elements(src, span).skip(1) {
            let c = src.as_bytes()[e.start];
            if c == b'(' || (c == b'#' && scan::conditional_parts(src, e.clone()).is_some()) {
                collect(src, item.clone(), e.clone(), e, depth + 1, out);
            }
        }
    }
}

/// Reads the definition whose form is `span`, if its head is a `def...`
/// symbol (or `define-...`, which starts the same way).
fn definition_at(
    src: &str,
    span: Range<usize>,
    item: Range<usize>,
    unit: Range<usize>,
    depth: usize,
) -> Option<Definition> {
    let mut els = scan::elements(src, span.clone());
    let head = els.next()?;
    let head_text = &src[head.clone()];
    let kind_key = symbol_key(head_text);
    // FiveAM's `(test name ...)` is the one common defining form without a
    // `def` prefix; it counts only with a name (a symbol or `(name ...)`).
    let fiveam_test = kind_key == "test";
    if !(kind_key.starts_with("def") || fiveam_test) || src.as_bytes()[head.start] == b'"' {
        return None;
    }
    let name_span = els.next();
    if fiveam_test
        && !name_span.as_ref().is_some_and(|n| {
            let c = src.as_bytes()[n.start];
            !matches!(c, b'"' | b'#' | b'\'' | b'`' | b',' | b')')
                && !src[n.clone()].starts_with(|c: char| c.is_ascii_digit())
        })
    {
        return None;
    }
    let (name, name_key) = match &name_span {
        Some(n) => name_of(&src[n.clone()]),
        None => (String::new(), String::new()),
    };
    let mut sig_end = name_span.as_ref().map_or(head.end, |n| n.end);
    let mut qualifiers = Vec::new();
    let mut specializers = None;
    match kind_key.as_str() {
        "defvar"
        | "defparameter"
        | "defconstant"
        | "defstruct"
        | "defpackage"
        | "defglobal"
        | "define-symbol-macro"
        // Test definitions: what follows the name is the body (or suite
        // options), not a signature.
        | "test"
        | "deftest"
        | "define-test"
        | "def-suite"
        | "def-suite*" => {}
        "defmethod" => {
            for e in els.by_ref() {
                let t = &src[e.clone()];
                if t.starts_with('(') {
                    specializers = Some(specializers_of(t));
                    sig_end = e.end;
                    break;
                }
                qualifiers.push(t.to_string());
                sig_end = e.end;
            }
        }
        _ => {
            // Lambda list, superclasses, or whatever list follows the name:
            // for forms not known to take one, only a short list (a data
            // table after the name is not a signature).
            if let Some(e) = els.next() {
                let t = &src[e.clone()];
                let known = matches!(
                    kind_key.as_str(),
                    "defun"
                        | "defmacro"
                        | "defgeneric"
                        | "deftype"
                        | "defclass"
                        | "define-condition"
                        | "define-compiler-macro"
                        | "define-modify-macro"
                        | "define-setf-expander"
                        | "defsetf"
                        | "define-method-combination"
                );
                if (t.starts_with('(') && (known || t.len() <= 200))
                    || t.eq_ignore_ascii_case("nil")
                {
                    sig_end = e.end;
                }
            }
        }
    }
    Some(Definition {
        kind: head_text.to_lowercase(),
        kind_key,
        name,
        name_key,
        qualifiers,
        specializers,
        span,
        item_span: item,
        unit_span: unit,
        sig_end,
        depth,
    })
}

/// The display name and matching key of a definition's name element.
/// `(name options...)` (defstruct) is named by its first element, except
/// `(setf foo)`-style function names, which are kept whole.
fn name_of(text: &str) -> (String, String) {
    // Fast path (most names): a plain symbol token.
    if !text.is_empty()
        && !text.bytes().any(|b| {
            matches!(b, b'(' | b'|' | b'\\' | b'#' | b'"' | b';') || b.is_ascii_whitespace()
        })
    {
        return (text.to_string(), SymbolName::read(text).name);
    }
    let parse = cst::parse(text);
    let Some(node) = parse.top_level_forms().next() else {
        return (text.to_string(), text.to_string());
    };
    if node.kind == NodeKind::List {
        let head = node.head_name_upper(text).unwrap_or_default();
        if head != "SETF" && head != "CAS" {
            if let Some(first) = node.elements().next() {
                return (one_line(first.text(text)), key_of(first, text));
            }
        }
    }
    (one_line(node.text(text)), key_of(node, text))
}

/// The matching key of a node: symbol names (package dropped, as the
/// reader would intern them), strings by content, lists recursively.
pub fn key_of(node: &Node, src: &str) -> String {
    match node.kind {
        NodeKind::Token => SymbolName::read(node.text(src)).name,
        NodeKind::Uninterned => SymbolName::read(&node.text(src)[2..]).name,
        NodeKind::String => {
            let t = node.text(src);
            t.get(1..t.len().saturating_sub(1)).unwrap_or(t).to_string()
        }
        NodeKind::List => {
            let parts: Vec<String> = node.elements().map(|e| key_of(e, src)).collect();
            format!("({})", parts.join(" "))
        }
        _ => one_line(node.text(src)),
    }
}

/// The matching key of a text holding one form (a user's `formName` part).
pub fn key_of_text(text: &str) -> String {
    let parse = cst::parse(text);
    let key = parse
        .top_level_forms()
        .next()
        .map(|n| key_of(n, text))
        .unwrap_or_default();
    key
}

/// The specializers of a `defmethod` lambda list: the class (or `(eql x)`)
/// of each required parameter, `t` when unspecialized.
fn specializers_of(lambda_list: &str) -> Vec<String> {
    let parse = cst::parse(lambda_list);
    let Some(list) = parse.top_level_forms().next() else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for p in list.elements() {
        let t = p.text(lambda_list);
        if p.kind == NodeKind::Token && t.starts_with('&') {
            break;
        }
        if p.kind == NodeKind::List {
            match p.elements().nth(1) {
                Some(s) => out.push(one_line(s.text(lambda_list))),
                None => out.push("t".into()),
            }
        } else {
            out.push("t".into());
        }
    }
    out
}

/// `text` on one line: comments dropped, whitespace runs made one space,
/// none just inside parentheses. Strings are kept as written.
pub fn one_line(text: &str) -> String {
    // Fast path (most signatures): nothing to collapse or drop.
    let b = text.as_bytes();
    let plain = !b
        .iter()
        .any(|&c| matches!(c, b'\n' | b'\r' | b'\t' | 0x0C | b';' | b'"' | b'|' | b'\\'))
        && !b
            .windows(2)
            .any(|w| matches!(w, b"  " | b"( " | b" )" | b"#|"));
    if plain {
        return text.to_string();
    }
    let parse = cst::parse(text);
    let mut out = String::with_capacity(text.len().min(256));
    let mut pending_space = false;
    for leaf in parse.leaves() {
        match leaf.kind {
            NodeKind::Whitespace | NodeKind::LineComment | NodeKind::BlockComment => {
                pending_space = true;
            }
            _ => {
                let t = leaf.text(text);
                if pending_space && !out.is_empty() && !out.ends_with('(') && t != ")" {
                    out.push(' ');
                }
                pending_space = false;
                out.push_str(t);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn defs(src: &str) -> Vec<Definition> {
        let s = scan::scan(src);
        definitions(src, s.forms())
    }

    #[test]
    fn long_conditional_chains_do_not_recurse() {
        let src = format!("{}(defun deep () 1)", "#+a ".repeat(200_000));
        let d = defs(&src);
        assert_eq!(d.len(), 1);
        assert_eq!(d[0].name, "deep");
    }

    #[test]
    fn test_forms_are_definitions() {
        let src = "(def-suite :inv :description \"x\")\n(in-suite :inv)\n\
                   (test total \"doc\" (is (= 1 (f))))\n\
                   (test (named :suite :inv) (is t))\n\
                   (fiveam:def-test dt (:suite :inv) (is t))\n\
                   (deftest rove-one (testing \"x\" (ok t)))\n\
                   (define-test \"para one\" (true t))\n\
                   (test 3 4)\n(test \"str\")\n(test)\n";
        let d = defs(src);
        let got: Vec<(String, String, String)> = d
            .iter()
            .map(|d| (d.kind_key.clone(), d.name_key.clone(), d.signature(src)))
            .collect();
        let want = [
            ("def-suite", "INV", "(def-suite :inv ...)"),
            ("test", "TOTAL", "(test total ...)"),
            ("test", "NAMED", "(test (named :suite :inv) ...)"),
            ("def-test", "DT", "(fiveam:def-test dt (:suite :inv) ...)"),
            ("deftest", "ROVE-ONE", "(deftest rove-one ...)"),
            ("define-test", "para one", "(define-test \"para one\" ...)"),
        ];
        let want: Vec<(String, String, String)> = want
            .iter()
            .map(|(a, b, c)| (a.to_string(), b.to_string(), c.to_string()))
            .collect();
        assert_eq!(got, want);
    }

    #[test]
    fn names_kinds_and_signatures() {
        let src = "(in-package :x)\n\
                   (defun foo (a &key b) \"doc\" (list a b))\n\
                   (defmethod print-object :around ((p point) s) ; c\n  (call-next-method))\n\
                   (defun (setf foo) (v x) v)\n\
                   (eval-when (:compile-toplevel)\n  #+sbcl (defmacro m (x) x))\n\
                   (defstruct (point (:conc-name p-)) x y)\n\
                   (sb-xc:defmacro n () nil)\n\
                   (defpackage #:pk (:use :cl))\n";
        let d = defs(src);
        let got: Vec<(String, String, String)> = d
            .iter()
            .map(|d| (d.kind.clone(), d.full_name(), d.signature(src)))
            .collect();
        let want = [
            ("defun", "foo", "(defun foo (a &key b) ...)"),
            (
                "defmethod",
                "print-object :around (point t)",
                "(defmethod print-object :around ((p point) s) ...)",
            ),
            ("defun", "(setf foo)", "(defun (setf foo) (v x) ...)"),
            ("defmacro", "m", "(defmacro m (x) ...)"),
            (
                "defstruct",
                "point",
                "(defstruct (point (:conc-name p-)) ...)",
            ),
            ("sb-xc:defmacro", "n", "(sb-xc:defmacro n () ...)"),
            ("defpackage", "#:pk", "(defpackage #:pk ...)"),
        ];
        let want: Vec<(String, String, String)> = want
            .iter()
            .map(|(a, b, c)| (a.to_string(), b.to_string(), c.to_string()))
            .collect();
        assert_eq!(got, want);
        assert_eq!(d[2].name_key, "(SETF FOO)");
        assert_eq!(d[3].depth, 1);
        assert_eq!(&src[d[3].unit_span.clone()], "#+sbcl (defmacro m (x) x)");
        assert_eq!(d[3].guard(src).as_deref(), Some("#+sbcl"));
        assert_eq!(d[0].guard(src), None);
        let g = "#-(or ccl\n  ecl) ; no\n#+unix\n(defun g () 1)";
        assert_eq!(
            defs(g)[0].guard(g).as_deref(),
            Some("#-(or ccl ecl) #+unix")
        );
        assert_eq!(d[6].name_key, "PK");
    }
}
