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
    // Also before the file's final newline.
    let (text, _) = repaired("(deftest t1\n    (f)\n  9 ; not 7\n  \n");
    assert_eq!(text, "(deftest t1\n    (f)\n  9 ; not 7\n  )\n");
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
    // (The text ends in an indented line of its own before the final
    // newline: the closer goes back there.)
    let broken = good.replacen("\n  )\n", "\n  \n", 1);
    assert_eq!(repaired(&broken).0, good);
    let broken = good.replacen("\n    )\n  )\n", "\n    )\n", 1);
    assert_eq!(
        repaired(&broken).0,
        good.replacen("\n    )\n  )\n", "\n    ))\n", 1)
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
    let good =
        "(defun f (n)\n  (cond ((zerop n)\n          varying)\n        (t\n          fixed)))\n";
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
    let r =
        refused("(locally\n  (declare (optimize speed))\n(defun g ()\n  1)\n(defun h ()\n  (i)\n");
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
    let r =
        refused("(defparameter *x*\n  (append\n     '(;; letters\n      #\\a #\\b)\n  \"Doc.\")\n");
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
    let (text, _) = repaired("(defmethod m ((x t) &rest r)\n   (declare (ignore r))\n   (g x)\n");
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
