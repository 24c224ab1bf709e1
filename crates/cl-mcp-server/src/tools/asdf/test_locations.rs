//! Where a failed test check is written, found with the CST reader (the one
//! reader of Lisp source text on this side; comments and strings are never
//! taken for code).
//!
//! The image (`lisp/test-run.lisp`, `test-failures`) says which test failed
//! (its symbol's name and package, the user macros accessible there), the
//! failed expression as plain data (`form-shape`: atoms by name, strings as
//! `(:string TEXT)`, lists, anything else `:other`) and which of the
//! failures of that expression in that test it is; the reply's
//! `:source-files` are the system's and its test systems' files. In those
//! files, in order: the test's top-level form (`test`, `def-test`,
//! `deftest`, `define-test`; `(test (NAME &key …) …)` too) by name in the
//! test's package, else by name alone; else the top-level call of one of
//! those macros that names the test (`(def-add-test NAME 2 2 5)`). In the
//! form found, the lists holding an element like the failed expression are
//! the checks (`(is EXPR)`); the nth such is the location (`at: check`),
//! else the form itself (`at: test` or `at: macro-call`).

use lisp_syntax::cst::{self, LineIndex, Node, NodeKind, SymbolName};
use lisp_syntax::data::Value;

/// Operators whose first argument names a test (FiveAM, Fiasco/RT/Rove/
/// lisp-unit2, Parachute).
const TEST_DEFINERS: [&str; 4] = ["TEST", "DEF-TEST", "DEFTEST", "DEFINE-TEST"];

/// What the image says about one failed check.
#[derive(Debug, Default)]
pub struct FailedCheck<'a> {
    /// The test's symbol name.
    pub name: Option<&'a str>,
    /// Its package's name and nicknames (none when only the name is known).
    pub packages: Vec<&'a str>,
    /// User macros accessible in that package (one may have made the test).
    pub macros: Vec<&'a str>,
    /// The failed expression's shape.
    pub expr: Option<&'a Value>,
    /// 0-based: which failure of this expression in this test.
    pub nth: usize,
}

impl<'a> FailedCheck<'a> {
    /// From one of the reply's `:failures` plists.
    pub fn from_plist(f: &'a Value) -> FailedCheck<'a> {
        let strings = |key: &str| -> Vec<&'a str> {
            f.plist_get(key)
                .and_then(Value::as_list)
                .map(|l| l.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default()
        };
        let mut packages: Vec<&str> = f
            .plist_get("package")
            .and_then(Value::as_str)
            .into_iter()
            .collect();
        packages.extend(strings("nicknames"));
        FailedCheck {
            name: f.plist_get("name").and_then(Value::as_str),
            packages,
            macros: strings("macros"),
            expr: f.plist_get("expr").filter(|e| !e.is_nil()),
            nth: f
                .plist_get("nth")
                .and_then(Value::as_i64)
                .unwrap_or(0)
                .max(0) as usize,
        }
    }
}

/// Where a failed check is written.
#[derive(Debug, PartialEq, Eq)]
pub struct CheckLocation {
    /// The file, as the image named it.
    pub path: String,
    /// 1-based.
    pub line: usize,
    /// 1-based, in characters.
    pub column: usize,
    /// `check`, `test` or `macro-call`.
    pub at: &'static str,
}

/// One source file's top-level forms (reader conditionals looked through),
/// each with the package `in-package` made current before it.
struct SourceFile {
    path: String,
    text: String,
    forms: Vec<(Node, String)>,
}

/// The source files a test run's failures are looked for in, read once.
pub struct TestSources {
    files: Vec<SourceFile>,
}

impl TestSources {
    /// Reads and parses `paths` (absolute); a file that cannot be read is
    /// left out. Bytes that are not UTF-8 (a Latin-1 test file) read as
    /// U+FFFD, one per byte, so the lines stay where they are.
    pub fn read(paths: &[String]) -> TestSources {
        let files = paths
            .iter()
            .filter_map(|p| {
                let text = String::from_utf8_lossy(&std::fs::read(p).ok()?).into_owned();
                Some(SourceFile::new(p.clone(), text))
            })
            .collect();
        TestSources { files }
    }

    /// Sources from texts (for tests).
    #[cfg(test)]
    fn from_texts(texts: &[(&str, &str)]) -> TestSources {
        TestSources {
            files: texts
                .iter()
                .map(|(p, t)| SourceFile::new(p.to_string(), t.to_string()))
                .collect(),
        }
    }

    /// Where `check` failed, or `None` when its test is not found.
    pub fn locate(&self, check: &FailedCheck) -> Option<CheckLocation> {
        let name = check.name?;
        let in_package = |symbol: &SymbolName, package: &str| {
            let home = match symbol.package.as_deref() {
                Some(p) if !p.is_empty() => p,
                _ => package,
            };
            check.packages.iter().any(|p| p.eq_ignore_ascii_case(home))
        };
        // The test's form in its package, else by name alone (read in
        // another package than it was compiled in).
        let by_package = (!check.packages.is_empty())
            .then(|| {
                self.find(|form, src, package| {
                    defined_name(form, src).is_some_and(|s| {
                        s.name.eq_ignore_ascii_case(name) && in_package(&s, package)
                    })
                })
            })
            .flatten();
        let hit = by_package.or_else(|| {
            self.find(|form, src, _| {
                defined_name(form, src).is_some_and(|s| s.name.eq_ignore_ascii_case(name))
            })
        });
        if let Some((file, form)) = hit {
            return Some(file.locate(form, check, "test"));
        }
        if let Some((file, form)) =
            self.find(|form, src, _| macro_call_naming(form, src, name, &check.macros))
        {
            return Some(file.locate(form, check, "macro-call"));
        }
        // A macro making several tests from one name (split-sequence's
        // `(define-test split-sequence.0 …)` makes `SPLIT-SEQUENCE.0.VECTOR`
        // and `.LIST`): the call naming the test's name up to a `.`, `-`
        // or `/`.
        let stems: Vec<&str> = name
            .char_indices()
            .filter(|(_, c)| matches!(c, '.' | '-' | '/'))
            .map(|(i, _)| &name[..i])
            .rev()
            .collect();
        for stem in stems {
            if let Some((file, form)) =
                self.find(|form, src, _| macro_call_naming(form, src, stem, &check.macros))
            {
                return Some(file.locate(form, check, "macro-call"));
            }
        }
        // A suite named by a string (ptester's `(with-tests (:name "NAME")
        // …)`, flexi-streams' `(with-test-suite ("NAME" …) …)`), inside
        // whatever defines it (a DEFUN).
        let suite = self.files.iter().find_map(|file| {
            file.forms.iter().find_map(|(form, _)| {
                let suite = first_list(form, &file.text, |l| suite_named(l, &file.text, name))?;
                Some(file.locate(suite, check, "test"))
            })
        });
        if suite.is_some() {
            return suite;
        }
        // A file of test forms (CL-PPCRE's `test/simple`): the nth top-level
        // form like the failed one.
        let expr = check.expr?;
        let mut seen = 0;
        for file in &self.files {
            for (form, _) in &file.forms {
                if same_form(form, &file.text, expr) {
                    if seen == check.nth {
                        let (line, column) = LineIndex::new(&file.text).line_col(form.span.start);
                        return Some(CheckLocation {
                            path: file.path.clone(),
                            line,
                            column,
                            at: "check",
                        });
                    }
                    seen += 1;
                }
            }
        }
        None
    }

    /// The first top-level form (in file order) `accepts`.
    fn find(&self, accepts: impl Fn(&Node, &str, &str) -> bool) -> Option<(&SourceFile, &Node)> {
        self.files.iter().find_map(|file| {
            file.forms
                .iter()
                .find(|(form, package)| accepts(form, &file.text, package))
                .map(|(form, _)| (file, form))
        })
    }
}

impl SourceFile {
    fn new(path: String, text: String) -> SourceFile {
        let parse = cst::parse(&text);
        let mut package = "COMMON-LISP-USER".to_string();
        let mut forms = Vec::new();
        for top in parse.top_level_forms() {
            let Some(form) = top.skip_reader_conditionals() else {
                continue;
            };
            if form.head_name_upper(&text).as_deref() == Some("IN-PACKAGE") {
                if let Some(p) = form
                    .elements()
                    .nth(1)
                    .and_then(|n| designator_name(n, &text))
                {
                    package = p;
                }
            }
            forms.push((form.clone(), package.clone()));
        }
        SourceFile { path, text, forms }
    }

    /// The location of `check` in `form`: the nth list holding an element
    /// like its expression, else the form itself, labelled `fallback`.
    fn locate(&self, form: &Node, check: &FailedCheck, fallback: &'static str) -> CheckLocation {
        let mut starts = Vec::new();
        if let Some(expr) = check.expr {
            checks_holding(form, &self.text, expr, &mut starts);
        }
        let (start, at) = match starts.len() {
            0 => (form.span.start, fallback),
            n => (starts[check.nth.min(n - 1)], "check"),
        };
        let (line, column) = LineIndex::new(&self.text).line_col(start);
        CheckLocation {
            path: self.path.clone(),
            line,
            column,
            at,
        }
    }
}

/// A package designator's name: `:foo`, `#:foo`, `foo` (as the reader
/// interns them) or `"FOO"`.
fn designator_name(node: &Node, src: &str) -> Option<String> {
    match node.kind {
        NodeKind::Token | NodeKind::Uninterned => Some(SymbolName::read(node.text(src)).name),
        NodeKind::String => Some(string_content(node.text(src))),
        _ => None,
    }
}

/// The text a string literal reads as: quotes dropped, escapes resolved.
fn string_content(literal: &str) -> String {
    let inner = literal.strip_prefix('"').unwrap_or(literal);
    let inner = inner.strip_suffix('"').unwrap_or(inner);
    let mut out = String::with_capacity(inner.len());
    let mut chars = inner.chars();
    while let Some(c) = chars.next() {
        out.push(if c == '\\' {
            chars.next().unwrap_or(c)
        } else {
            c
        });
    }
    out
}

/// A symbol token's name (never a number's).
fn symbol_of(node: &Node, src: &str) -> Option<SymbolName> {
    match node.kind {
        NodeKind::Token | NodeKind::Uninterned => Some(SymbolName::read(node.text(src))),
        _ => None,
    }
}

/// The name a test-defining form defines: `(test NAME …)` or `(test (NAME
/// &key …) …)`.
fn defined_name(form: &Node, src: &str) -> Option<SymbolName> {
    let head = form.head_name_upper(src)?;
    if !TEST_DEFINERS.contains(&head.as_str()) {
        return None;
    }
    let named = form.elements().nth(1)?;
    match named.kind {
        NodeKind::List => symbol_of(named.elements().next()?, src),
        _ => symbol_of(named, src),
    }
}

/// The first list (in source order) within `node` that `accepts`.
fn first_list<'n>(node: &'n Node, src: &str, accepts: impl Fn(&Node) -> bool) -> Option<&'n Node> {
    let mut stack = vec![node];
    let mut best: Option<&Node> = None;
    while let Some(n) = stack.pop() {
        if n.kind == NodeKind::List
            && accepts(n)
            && best.is_none_or(|b| n.span.start < b.span.start)
        {
            best = Some(n);
            continue;
        }
        stack.extend(read_elements(n, src));
    }
    best
}

/// Whether `list` opens a suite named `name` by a string: its operator's
/// name holds `TEST`, its first argument is a list holding the string
/// (`(with-tests (:name "NAME") …)`, `(with-test-suite ("NAME") …)`).
fn suite_named(list: &Node, src: &str, name: &str) -> bool {
    let Some(head) = list.head_name_upper(src) else {
        return false;
    };
    if !head.contains("TEST") {
        return false;
    }
    let Some(options) = list.elements().nth(1) else {
        return false;
    };
    options.kind == NodeKind::List
        && options
            .elements()
            .any(|e| e.kind == NodeKind::String && string_content(e.text(src)) == name)
}

/// Whether `form` calls one of `macros` with the test's name (or a list
/// starting with it) as an argument: the call that made the test.
fn macro_call_naming(form: &Node, src: &str, name: &str, macros: &[&str]) -> bool {
    let Some(head) = form.head_name_upper(src) else {
        return false;
    };
    if !macros.contains(&head.as_str()) {
        return false;
    }
    let names = |n: &Node| symbol_of(n, src).is_some_and(|s| s.name.eq_ignore_ascii_case(name));
    form.elements().skip(1).any(|arg| match arg.kind {
        NodeKind::List => arg.elements().next().is_some_and(names),
        _ => names(arg),
    })
}

/// The elements of a list as the reader returns them: a `#+` form's
/// guarded form in its place, a `#-` form left out, nothing from the
/// consing dot on (the shape drops a dotted tail).
fn read_elements<'n>(list: &'n Node, src: &str) -> Vec<&'n Node> {
    let mut out = Vec::new();
    for e in list.elements() {
        match e.kind {
            NodeKind::ReaderConditional { positive: true } => {
                out.extend(e.skip_reader_conditionals());
            }
            NodeKind::ReaderConditional { positive: false } => {}
            NodeKind::Token if e.text(src) == "." => break,
            _ => out.push(e),
        }
    }
    out
}

/// Pushes onto `starts`, in source order, where each list within `node`
/// that holds an element like `expr` starts.
fn checks_holding(node: &Node, src: &str, expr: &Value, starts: &mut Vec<usize>) {
    // An explicit stack: source may nest deeper than recursion allows.
    let mut stack = vec![node];
    while let Some(n) = stack.pop() {
        if n.kind == NodeKind::List
            && read_elements(n, src)
                .iter()
                .any(|e| same_form(e, src, expr))
        {
            starts.push(n.span.start);
        }
        stack.extend(n.children.iter().rev());
    }
}

/// Whether `node` reads as a form of `shape` (see the module
/// documentation). Syntax this side does not interpret is taken as alike
/// where it could be: backquote, `#.` and labels as anything, `#x` and
/// `#c` numbers as any atom; characters, vectors and other data as what
/// the image sends for them, `:other`.
fn same_form(node: &Node, src: &str, shape: &Value) -> bool {
    if shape.is_keyword("other") {
        return true;
    }
    match node.kind {
        NodeKind::Token | NodeKind::Uninterned => {
            shape.as_str() == Some(SymbolName::read(node.text(src)).name.as_str())
        }
        NodeKind::String => match shape.as_list() {
            Some([kind, Value::String(text)]) if kind.is_keyword("string") => {
                string_content(node.text(src)) == *text
            }
            _ => false,
        },
        NodeKind::List => {
            let elements = read_elements(node, src);
            if elements.is_empty() {
                return shape.as_str() == Some("NIL");
            }
            match shape.as_list() {
                Some(items) if items.len() == elements.len() => elements
                    .iter()
                    .zip(items)
                    .all(|(e, s)| same_form(e, src, s)),
                _ => false,
            }
        }
        NodeKind::Quote | NodeKind::FunctionQuote => {
            let operator = if node.kind == NodeKind::Quote {
                "QUOTE"
            } else {
                "FUNCTION"
            };
            match (shape.as_list(), node.elements().next()) {
                (Some([op, operand]), Some(form)) => {
                    op.as_str() == Some(operator) && same_form(form, src, operand)
                }
                _ => false,
            }
        }
        // A number this side does not evaluate: any atom.
        NodeKind::RadixNumber | NodeKind::Complex => shape.as_str().is_some(),
        // What reads as the implementation's own structures, or as
        // something else: anything.
        NodeKind::Backquote
        | NodeKind::Unquote
        | NodeKind::UnquoteSplicing
        | NodeKind::ReadEval
        | NodeKind::Label
        | NodeKind::LabelRef => true,
        // Characters, vectors, pathnames, structures: only `:other`.
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use lisp_syntax::data;

    const TESTS: &str = "(defpackage #:demo-tests (:use #:cl #:fiveam))
#| (test fails-on-purpose (is (= 5 (add 2 2)))) |#
(in-package #:demo-tests)
(defvar *s* \"
(test fails-on-purpose)\")
;; (test fails-on-purpose (is (= 5 (add 2 2))))
(test fails-on-purpose
  (is (= 4 (demo:add 2 2)))
  (is (= 5 (demo:add 2 2)))
  (is (= 5 (demo:add 2 2))))

(defmacro def-add-test (name a b sum)
  `(test ,name (is (= ,sum (add ,a ,b)))))

(def-add-test add-wrong 2 2 5)
";

    fn at(
        name: &str,
        macros: Vec<&str>,
        expr: Option<&str>,
        nth: usize,
    ) -> Option<(usize, usize, &'static str)> {
        let sources = TestSources::from_texts(&[("/p/tests.lisp", TESTS)]);
        let shape = expr.map(|e| data::read(e).unwrap());
        let check = FailedCheck {
            name: Some(name),
            packages: vec!["DEMO-TESTS"],
            macros,
            expr: shape.as_ref(),
            nth,
        };
        sources.locate(&check).map(|l| (l.line, l.column, l.at))
    }

    #[test]
    fn a_failed_check_is_found_in_its_test_never_in_comments_or_strings() {
        let expr = Some(r#"("=" "5" ("ADD" "2" "2"))"#);
        assert_eq!(
            at("FAILS-ON-PURPOSE", vec![], expr, 0),
            Some((9, 3, "check"))
        );
        // The same expression failing again is its next check.
        assert_eq!(
            at("FAILS-ON-PURPOSE", vec![], expr, 1),
            Some((10, 3, "check"))
        );
        assert_eq!(
            at("FAILS-ON-PURPOSE", vec![], expr, 5),
            Some((10, 3, "check"))
        );
    }

    #[test]
    fn a_suite_named_by_a_string_is_found_inside_its_defun() {
        let src = "(in-package :b64-test)\n(defun do-tests ()\n  (with-tests (:name \"b64 tests\")\n    (test 1 (f 2))\n    (test \"a\" (g \"x\"))))\n";
        let sources = TestSources::from_texts(&[("/p/tests.lisp", src)]);
        let check = FailedCheck {
            name: Some("b64 tests"),
            ..Default::default()
        };
        let l = sources.locate(&check).unwrap();
        assert_eq!((l.line, l.column, l.at), (3, 3, "test"));
        let shape = lisp_syntax::data::read("(\"G\" (:string \"x\"))").unwrap();
        let check = FailedCheck {
            name: Some("b64 tests"),
            expr: Some(&shape),
            ..Default::default()
        };
        let l = sources.locate(&check).unwrap();
        assert_eq!((l.line, l.column, l.at), (5, 5, "check"));
    }

    #[test]
    fn a_test_a_macro_made_under_a_longer_name_is_at_its_call() {
        let src = "(defmacro define-test (name &body body) nil)\n(define-test split.0 (:input (input \"\"))\n  (is (f input)))\n";
        let sources = TestSources::from_texts(&[("/p/tests.lisp", src)]);
        let check = FailedCheck {
            name: Some("SPLIT.0.VECTOR"),
            macros: vec!["DEFINE-TEST"],
            ..Default::default()
        };
        let l = sources.locate(&check).unwrap();
        assert_eq!((l.line, l.at), (2, "macro-call"));
    }

    #[test]
    fn a_top_level_test_form_like_the_failed_one() {
        let src = "(equal (f \"a\") 1)\n(equal (f \"b\") 2)\n";
        let sources = TestSources::from_texts(&[("/p/test/simple", src)]);
        let shape = lisp_syntax::data::read("(\"EQUAL\" (\"F\" (:string \"b\")) \"2\")").unwrap();
        let check = FailedCheck {
            name: Some("Simple tests #2"),
            expr: Some(&shape),
            ..Default::default()
        };
        let l = sources.locate(&check).unwrap();
        assert_eq!((l.line, l.at), (2, "check"));
    }

    #[test]
    fn without_a_matching_check_the_test_form() {
        let expr = Some(r#"("=" "6" ("ADD" "2" "2"))"#);
        assert_eq!(
            at("fails-on-purpose", vec![], expr, 0),
            Some((7, 1, "test"))
        );
        assert_eq!(
            at("FAILS-ON-PURPOSE", vec![], None, 0),
            Some((7, 1, "test"))
        );
    }

    #[test]
    fn a_macro_made_test_is_at_the_macro_call() {
        let expr = Some(r#"("=" "5" ("ADD" "2" "2"))"#);
        assert_eq!(
            at("ADD-WRONG", vec!["DEF-ADD-TEST"], expr, 0),
            Some((15, 1, "macro-call"))
        );
        assert_eq!(at("ADD-WRONG", vec![], expr, 0), None);
        assert_eq!(at("NO-SUCH-TEST", vec!["DEF-ADD-TEST"], expr, 0), None);
    }

    #[test]
    fn shapes_of_strings_quotes_and_other_data() {
        let src = "(test q (is (equal '(a \"b\") (f #\\c))) (is (null ())))";
        let sources = TestSources::from_texts(&[("/p/q.lisp", src)]);
        let locate = |expr: &str| {
            let shape = data::read(expr).unwrap();
            let check = FailedCheck {
                name: Some("Q"),
                expr: Some(&shape),
                ..FailedCheck::default()
            };
            sources.locate(&check).map(|l| (l.column, l.at))
        };
        assert_eq!(
            locate(r#"("EQUAL" ("QUOTE" ("A" (:string "b"))) ("F" :other))"#),
            Some((9, "check"))
        );
        assert_eq!(locate(r#"("NULL" "NIL")"#), Some((39, "check")));
        assert_eq!(
            locate(r#"("EQUAL" ("QUOTE" ("A" "B")) ("F" :other))"#),
            Some((1, "test"))
        );
    }
}
