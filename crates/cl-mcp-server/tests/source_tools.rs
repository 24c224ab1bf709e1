//! Black-box tests of the source tools on real Lisp files with nasty
//! syntax: strings with parens, `#\(`, nested `#| |#`, `|a)b|`, reader
//! conditionals, cl-interpol's `#?"..."`.

mod common;
mod source_support;

use serde_json::json;
use source_support::{project, Server, BIN};

const NASTY: &str = r##";;;; nasty.lisp --- a file full of traps
;;;; second header line

(in-package :cl-user)

#| block comment with ( and #| nested ) |# still |#

(defun paren-string (x)
  "A docstring with ) and ( inside"
  (list x #\( #\) "(" '|a)b|))

#+sbcl
(defmethod print-object ((p point) stream)
  (format stream "#<point>"))

(defmethod print-object :around ((p point) (s t))
  (call-next-method))

(defun (setf thing) (value obj)
  (setf (car obj) value))

(eval-when (:compile-toplevel :load-toplevel :execute)
  (defmacro with-thing ((var) &body body)
    `(let ((,var 1)) ,@body)))

(defvar *interp* #?"value: ${(paren-string 1)} ) (")

(defclass point ()
  ((x :initarg :x))) ; trailing comment
"##;

fn setup() -> (tempfile::TempDir, std::path::PathBuf, Server) {
    let (d, root) = project();
    std::fs::create_dir_all(root.join("src")).unwrap();
    std::fs::write(root.join("src/nasty.lisp"), NASTY).unwrap();
    let s = Server::start(&root);
    (d, root, s)
}

#[test]
fn check_parens_has_no_false_alarms_and_finds_real_problems() {
    let (_d, _root, mut s) = setup();
    let r = s.ok("lisp-check-parens", json!({"path": "src/nasty.lisp"}));
    assert_eq!(
        r.text,
        "src/nasty.lisp: ok: all delimiters balanced (8 top-level forms)."
    );
    assert_eq!(r.structured["ok"], true);

    let r = s.ok(
        "lisp-check-parens",
        json!({"code": "(a \"(\" #\\( |a)b| #| ( |# ; )\n)"}),
    );
    assert_eq!(r.structured["ok"], true, "{}", r.text);

    let r = s.ok("lisp-check-parens", json!({"code": "(a b))\n"}));
    assert_eq!(r.structured["kind"], "extra-close");
    assert_eq!(r.structured["found"], ")");
    assert_eq!(
        r.structured["position"],
        json!({"offset": 5, "line": 1, "column": 6})
    );

    let code = "(defun a ()\n  (let ((x 1))\n    x)\n\n(defun b () \"(\" 2)\n";
    let r = s.ok("lisp-check-parens", json!({"code": code}));
    assert_eq!(r.structured["kind"], "unclosed");
    assert_eq!(r.structured["expected"], ")");
    assert_eq!(r.structured["found"], "end of input");
    assert_eq!(
        r.structured["position"],
        json!({"offset": 0, "line": 1, "column": 1})
    );
    assert_eq!(
        r.structured["hint"],
        "The form opened at line 1 is not closed: `(defun b` starts at column 1 of line 5 \
         inside it, so a `)` is probably missing before line 5. By the indentation: add \")\" \
         at line 3, column 7."
    );
    // The text names the broken form, not the end of the file.
    assert!(
        r.text
            .contains("unclosed: the form `(defun a`: list `(` opened at line 1, column 1"),
        "{}",
        r.text
    );

    let r = s.ok("lisp-check-parens", json!({"code": "(a \"unterminated)\n"}));
    assert_eq!(r.structured["kind"], "unclosed");
    assert_eq!(r.structured["expected"], "\"");
    assert_eq!(r.structured["position"]["column"], 4);

    // A window of lines reports positions in file lines.
    let r = s.ok(
        "lisp-check-parens",
        json!({"path": "src/nasty.lisp", "offset": 7, "limit": 2}),
    );
    assert_eq!(r.structured["kind"], "unclosed");
    assert_eq!(r.structured["position"]["line"], 8);
    let e = s.err("lisp-check-parens", json!({}));
    assert_eq!(e.text, "Give exactly one of `path` or `code`.");
}

#[test]
fn check_parens_from_the_command_line() {
    let out = std::process::Command::new(BIN)
        .args(["call", "lisp-check-parens", "--arg", "code=(a"])
        .output()
        .unwrap();
    // A problem found is a successful check (not a tool error).
    assert!(out.status.success());
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "code: unclosed: the form `(a`: list `(` opened at line 1, column 1 is never closed \
         (expected `)` before the end of input). Add the missing `)`. By the indentation: add \
         \")\" at line 1, column 3.\n"
    );
    let out = std::process::Command::new(BIN)
        .args(["call", "lisp-check-parens", "--arg", "code=(a #\\) \"(\")"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
}

#[test]
fn collapsed_read_shows_signatures_with_lines() {
    let (_d, _root, mut s) = setup();
    let r = s.ok("lisp-read-file", json!({"path": "src/nasty.lisp"}));
    assert_eq!(
        r.text,
        "src/nasty.lisp [lisp-collapsed]\n\
         \x201: ;;;; nasty.lisp --- a file full of traps  [+1 comment line]\n\
         \x204: (in-package :cl-user)\n\
         \x206: #| block comment with ( and #| nested ) |# still |#\n\
         \x208: (defun paren-string (x) ...)\n\
         12: #+sbcl\n\
         13: (defmethod print-object ((p point) stream) ...)\n\
         16: (defmethod print-object :around ((p point) (s t)) ...)\n\
         19: (defun (setf thing) (value obj) ...)\n\
         22: (eval-when (:compile-toplevel :load-toplevel :execute)\n\
         23:   (defmacro with-thing ((var) &body body) ...)\n\
         26: (defvar *interp* #?\"value: ${(paren-string 1)} ) (\")\n\
         28: (defclass point () ...)\n"
    );
    assert_eq!(r.structured["mode"], "lisp-collapsed");
    assert_eq!(r.structured["meta"]["totalForms"], 8);
    assert_eq!(r.structured["meta"]["totalLines"], 29);

    // Paging the collapsed view: `limit` output lines, then where to go on.
    let r = s.ok(
        "lisp-read-file",
        json!({"path": "src/nasty.lisp", "limit": 3}),
    );
    assert_eq!(
        r.text,
        "src/nasty.lisp [lisp-collapsed]\n\
         \x201: ;;;; nasty.lisp --- a file full of traps  [+1 comment line]\n\
         \x204: (in-package :cl-user)\n\
         \x206: #| block comment with ( and #| nested ) |# still |#\n\
         [window ends at line 7 of 29; next: offset=7]\n"
    );
    let r = s.ok(
        "lisp-read-file",
        json!({"path": "src/nasty.lisp", "offset": 7, "limit": 1}),
    );
    assert_eq!(
        r.text,
        "src/nasty.lisp [lisp-collapsed]\n 8: (defun paren-string (x) ...)\n[window ends at line 11 of 29; next: offset=11]\n"
    );
    let r = s.ok(
        "lisp-read-file",
        json!({"path": "src/nasty.lisp", "namePattern": "^PAREN-"}),
    );
    assert!(
        r.text.contains(
            " 8: (defun paren-string (x)\n 9:   \"A docstring with ) and ( inside\"\n10:   (list x #\\( #\\) \"(\" '|a)b|))\n"
        ),
        "{}",
        r.text
    );
    assert_eq!(r.structured["meta"]["expandedForms"], 1);

    let r = s.ok(
        "lisp-read-file",
        json!({"path": "src/nasty.lisp", "contentPattern": "call-next-method"}),
    );
    assert!(r.text.contains("17:   (call-next-method))\n"), "{}", r.text);
    assert!(
        r.text.contains(" 8: (defun paren-string (x) ...)\n"),
        "{}",
        r.text
    );

    let r = s.ok(
        "lisp-read-file",
        json!({"path": "src/nasty.lisp", "collapsed": false, "offset": 3, "limit": 2}),
    );
    assert_eq!(
        r.text,
        "src/nasty.lisp [raw]\n 4: (in-package :cl-user)\n 5: \n[window ends at line 5 of 29; next: offset=5]\n"
    );
}

#[test]
fn read_non_lisp_files_as_lines() {
    let (_d, root, mut s) = setup();
    let body: String = (1..=20).map(|i| format!("row {i}\n")).collect();
    std::fs::write(root.join("notes.txt"), body).unwrap();
    let r = s.ok("lisp-read-file", json!({"path": "notes.txt", "limit": 2}));
    assert_eq!(r.structured["mode"], "raw");
    assert!(
        r.text
            .starts_with("notes.txt [raw]\n 1: row 1\n 2: row 2\n"),
        "{}",
        r.text
    );
    let r = s.ok(
        "lisp-read-file",
        json!({"path": "notes.txt", "contentPattern": "^row 10$"}),
    );
    assert_eq!(r.structured["mode"], "text-filtered");
    let shown: Vec<&str> = r.text.lines().skip(1).collect();
    assert_eq!(shown.first(), Some(&" 5: row 5"));
    assert_eq!(shown.last(), Some(&"15: row 15"));
    // The raw view never cuts a line.
    let long = "x".repeat(5000);
    std::fs::write(root.join("long.lisp"), format!("(defvar *l* \"{long}\")\n")).unwrap();
    let r = s.ok(
        "lisp-read-file",
        json!({"path": "long.lisp", "collapsed": false}),
    );
    assert!(
        r.text.contains(&format!("1: (defvar *l* \"{long}\")\n")),
        "{}",
        r.text
    );
    let r = s.ok("lisp-read-file", json!({"path": "long.lisp"}));
    assert!(r.text.contains("[... 4815 more characters]"), "{}", r.text);
}

#[test]
fn edit_form_replaces_one_method_and_keeps_every_other_byte() {
    let (_d, root, mut s) = setup();
    let path = root.join("src/nasty.lisp");
    let new_method =
        "(defmethod print-object ((p point) stream)\n  (format stream \"#<point ~a>\" 1))";
    // Dry run: a diff, nothing written.
    let r = s.ok(
        "lisp-edit-form",
        json!({"path": "src/nasty.lisp", "formType": "defmethod",
               "formName": "print-object (point t)", "operation": "replace",
               "content": new_method, "dryRun": true}),
    );
    assert!(
        r.text
            .starts_with("Dry run: would replace `defmethod print-object (point t)` (line 13)"),
        "{}",
        r.text
    );
    assert!(
        r.text
            .contains("-  (format stream \"#<point>\"))\n+  (format stream \"#<point ~a>\" 1))\n"),
        "{}",
        r.text
    );
    assert_eq!(std::fs::read_to_string(&path).unwrap(), NASTY);

    let r = s.ok(
        "lisp-edit-form",
        json!({"path": "src/nasty.lisp", "form_type": "defmethod",
               "form_name": "print-object (point t)", "operation": "replace",
               "content": new_method}),
    );
    assert_eq!(r.structured["written"], true);
    let after = std::fs::read_to_string(&path).unwrap();
    let old_form = "(defmethod print-object ((p point) stream)\n  (format stream \"#<point>\"))";
    let at = NASTY.find(old_form).unwrap();
    assert_eq!(
        after[..at],
        NASTY[..at],
        "bytes before the form are identical"
    );
    assert_eq!(
        after[at + new_method.len()..],
        NASTY[at + old_form.len()..],
        "bytes after the form are identical"
    );
    assert!(after[..at].ends_with("#+sbcl\n"));
}

#[test]
fn edit_form_refuses_bad_content_and_ambiguity() {
    let (_d, root, mut s) = setup();
    let path = root.join("src/nasty.lisp");
    // Without the repair (which would place the missing closers), the
    // reader's own error.
    let e = s.err(
        "lisp-edit-form",
        json!({"path": "src/nasty.lisp", "formType": "defun", "formName": "paren-string",
               "operation": "replace", "content": "(defun paren-string (x)\n  (list x",
               "repairParens": false}),
    );
    assert!(
        e.text.starts_with(
            "`content` does not read as complete forms: unclosed list: opened at line 2, column 3"
        ),
        "{}",
        e.text
    );
    let e = s.err(
        "lisp-edit-form",
        json!({"path": "src/nasty.lisp", "formType": "defmethod", "formName": "print-object",
               "operation": "delete"}),
    );
    assert_eq!(
        e.text,
        "src/nasty.lisp: 'print-object' is ambiguous: 2 forms match: defmethod print-object \
         (point t) (line 13); defmethod print-object :around (point t) (line 16). Add \
         qualifiers/specializers to `formName` (e.g. `name :around (class t)`) or pass `line`."
    );
    let e = s.err(
        "lisp-edit-form",
        json!({"path": "src/nasty.lisp", "formType": "defun", "formName": "nope",
               "operation": "delete"}),
    );
    assert!(
        e.text.contains("no defun named 'nope'. The defun forms in this file: defun paren-string (line 8); defun (setf thing) (line 19)."),
        "{}",
        e.text
    );
    assert_eq!(
        std::fs::read_to_string(&path).unwrap(),
        NASTY,
        "nothing written"
    );
}

#[test]
fn edit_form_inserts_deletes_and_finds_setf_and_nested_forms() {
    let (_d, root, mut s) = setup();
    let path = root.join("src/nasty.lisp");
    s.ok(
        "lisp-edit-form",
        json!({"path": "src/nasty.lisp", "formType": "defun", "formName": "(setf thing)",
               "operation": "insert_after", "content": "(defun other () 2)"}),
    );
    let after = std::fs::read_to_string(&path).unwrap();
    assert!(
        after.contains("  (setf (car obj) value))\n\n(defun other () 2)\n\n(eval-when"),
        "{after}"
    );
    s.ok(
        "lisp-edit-form",
        json!({"path": "src/nasty.lisp", "formType": "defun", "formName": "other",
               "operation": "delete"}),
    );
    assert_eq!(std::fs::read_to_string(&path).unwrap(), NASTY);
    s.ok(
        "lisp-edit-form",
        json!({"path": "src/nasty.lisp", "formType": "defmacro", "formName": "with-thing",
               "operation": "replace", "content": "(defmacro with-thing ((var) &body body)\n    `(let ((,var 2)) ,@body))"}),
    );
    let after = std::fs::read_to_string(&path).unwrap();
    assert!(after.contains("(eval-when (:compile-toplevel :load-toplevel :execute)\n  (defmacro with-thing ((var) &body body)\n    `(let ((,var 2)) ,@body)))\n"), "{after}");
    s.ok(
        "lisp-edit-form",
        json!({"path": "src/nasty.lisp", "formType": "defmethod",
               "formName": "print-object :around (point t)", "operation": "insert_before",
               "content": "(defun before () 0)"}),
    );
    let after = std::fs::read_to_string(&path).unwrap();
    assert!(
        after.contains("\n(defun before () 0)\n\n(defmethod print-object :around"),
        "{after}"
    );
    // `line` picks one of several same-named forms.
    let r = s.ok(
        "lisp-edit-form",
        json!({"path": "src/nasty.lisp", "formType": "defmethod", "formName": "print-object",
               "line": 18, "operation": "delete"}),
    );
    assert!(
        r.text
            .starts_with("Applied delete to `defmethod print-object :around (point t)` (line 18)"),
        "{}",
        r.text
    );
    let after = std::fs::read_to_string(&path).unwrap();
    assert!(
        !after.contains(":around") && after.contains("(defmethod print-object ((p point) stream)"),
        "{after}"
    );
}

#[test]
fn search_places_hits_in_their_forms() {
    let (_d, root, mut s) = setup();
    std::fs::write(
        root.join("src/other.lisp"),
        "(defmacro m (x)\n  `(paren-string ,x))\n",
    )
    .unwrap();
    std::fs::write(root.join("README.md"), "paren-string in markdown\n").unwrap();
    std::fs::create_dir_all(root.join("build")).unwrap();
    std::fs::write(root.join("build/gen.lisp"), "(paren-string 1)\n").unwrap();
    std::fs::write(root.join(".gitignore"), "build/\n").unwrap();
    let r = s.ok("clgrep-search", json!({"pattern": "paren-string"}));
    assert_eq!(
        r.text,
        "src/nasty.lisp:8: [defun paren-string] (defun paren-string (x)\n\
         src/nasty.lisp:26: [defvar *interp*] (defvar *interp* #?\"value: ${(paren-string 1)} ) (\")\n\
         src/other.lisp:2: [defmacro m]   `(paren-string ,x))\n\
         [3 hits in 2 Lisp files]\n"
    );
    assert_eq!(r.structured["hits"][2]["formLine"], 1);
    let r = s.ok(
        "clgrep-search",
        json!({"pattern": "(?i)CALL-NEXT", "path": "src", "formTypes": ["defmethod"]}),
    );
    assert_eq!(
        r.text,
        "src/nasty.lisp:17: [defmethod print-object :around (point t)]   (call-next-method))\n[1 hit in 2 Lisp files]\n"
    );
    let r = s.ok(
        "clgrep-search",
        json!({"pattern": "paren", "formTypes": ["defmacro"]}),
    );
    assert_eq!(r.structured["totalHits"], 1);
    let r = s.ok("clgrep-search", json!({"pattern": "block comment"}));
    assert_eq!(r.structured["hits"][0]["formType"], serde_json::Value::Null);
    let e = s.err("clgrep-search", json!({"pattern": "(unclosed"}));
    assert!(e.text.starts_with("Bad `pattern`"), "{}", e.text);
}

#[test]
fn signatures_list_every_definition() {
    let (_d, _root, mut s) = setup();
    let r = s.ok("clgrep-signatures", json!({"path": "src"}));
    assert_eq!(
        r.text,
        "src/nasty.lisp:\n\
         \x20    8: (defun paren-string (x) ...)\n\
         \x20   13: #+sbcl (defmethod print-object ((p point) stream) ...)\n\
         \x20   16: (defmethod print-object :around ((p point) (s t)) ...)\n\
         \x20   19: (defun (setf thing) (value obj) ...)\n\
         \x20   23: (defmacro with-thing ((var) &body body) ...)\n\
         \x20   26: (defvar *interp* ...)\n\
         \x20   28: (defclass point () ...)\n\
         [7 definitions in 1 Lisp file]\n"
    );
    assert_eq!(
        r.structured["definitions"][2]["name"],
        "print-object :around (point t)"
    );
    assert_eq!(r.structured["definitions"][3]["name"], "(setf thing)");
    assert_eq!(r.structured["definitions"][0]["type"], "defun");
}

/// Many hits inside one huge form cost one pass over the form, not one
/// per hit (this took minutes when each hit re-read the form).
#[test]
fn many_hits_in_one_huge_form_stay_linear() {
    let (_d, root) = project();
    let rows: String = (0..20_000).map(|i| format!("   ({i} #x{i:x})\n")).collect();
    std::fs::write(
        root.join("table.lisp"),
        format!("(define-table +t+\n  (\n{rows}  ))\n"),
    )
    .unwrap();
    let mut s = Server::start(&root);
    let t = std::time::Instant::now();
    let r = s.ok(
        "clgrep-search",
        json!({"pattern": "#x", "formTypes": ["define-table"], "limit": 1}),
    );
    assert!(t.elapsed().as_secs() < 10, "took {:?}", t.elapsed());
    assert_eq!(r.structured["totalHits"], 20_000);
    assert_eq!(r.structured["hits"][0]["formName"], "+t+");
    assert_eq!(r.structured["hits"][0]["formLine"], 1);
}

/// Writes `text` as `name` under a fresh project and starts a server.
fn project_with(name: &str, text: &str) -> (tempfile::TempDir, std::path::PathBuf, Server) {
    let (d, root) = project();
    std::fs::write(root.join(name), text).unwrap();
    let s = Server::start(&root);
    (d, root, s)
}

/// A form that never closes would run to the end of the file; read as an
/// editor reads it, it ends where the next form at column 0 starts. It can
/// be replaced or deleted by name, and the forms after it stay editable;
/// inserting next to it is refused (it would stay broken).
#[test]
fn a_broken_form_locks_nothing_else_and_can_be_replaced() {
    let src = "(defun a () 1)\n\n(defun b ()\n  (foo)\n\n(defun c () 3)\n";
    let (_d, root, mut s) = project_with("open.lisp", src);
    for op in ["insert_after", "insert_before"] {
        let e = s.err(
            "lisp-edit-form",
            json!({"path": "open.lisp", "formType": "defun", "formName": "b",
                   "operation": op, "content": "(defun d () 4)"}),
        );
        assert_eq!(
            e.text,
            "open.lisp: not edited: the form `defun b` (line 3) is not closed: it never ends, so \
             it runs to the end of the file; `(defun c` starts at column 1 of line 6 inside it, \
             so a `)` is probably missing before line 6. Nothing was changed: fix the \
             parentheses first (lisp-check-parens shows where), then edit.",
            "{op}"
        );
    }
    assert_eq!(
        std::fs::read_to_string(root.join("open.lisp")).unwrap(),
        src
    );
    // The forms around it are listed and editable.
    let sig = s.ok("clgrep-signatures", json!({"path": "open.lisp"}));
    for name in ["defun a", "defun b", "defun c"] {
        assert!(sig.text.contains(name), "{name}: {}", sig.text);
    }
    let read = s.ok("lisp-read-file", json!({"path": "open.lisp"}));
    assert!(read.text.contains("(defun c () 3)"), "{}", read.text);
    s.ok(
        "lisp-edit-form",
        json!({"path": "open.lisp", "formType": "defun", "formName": "c",
               "operation": "replace", "content": "(defun c () 33)"}),
    );
    s.ok(
        "lisp-edit-form",
        json!({"path": "open.lisp", "formType": "defun", "formName": "a",
               "operation": "replace", "content": "(defun a () 11)"}),
    );
    // The broken form itself, replaced by name.
    let r = s.ok(
        "lisp-edit-form",
        json!({"path": "open.lisp", "formType": "defun", "formName": "b",
               "operation": "replace", "content": "(defun b ()\n  (foo))"}),
    );
    assert!(r.text.contains("which was not closed"), "{}", r.text);
    assert_eq!(
        std::fs::read_to_string(root.join("open.lisp")).unwrap(),
        "(defun a () 11)\n\n(defun b ()\n  (foo))\n\n(defun c () 33)\n"
    );
    let c = s.ok("lisp-check-parens", json!({"path": "open.lisp"}));
    assert_eq!(c.structured["ok"], true, "{}", c.text);
}

/// A `;` comment at the end of `content` must not comment out code that
/// follows on the same line.
#[test]
fn edit_form_content_ending_in_a_comment_keeps_the_code_after_it() {
    let src = "(defun zeta () 2) (defun eta () 3)\n";
    let (_d, root, mut s) = project_with("z.lisp", src);
    let path = root.join("z.lisp");
    s.ok(
        "lisp-edit-form",
        json!({"path": "z.lisp", "formType": "defun", "formName": "zeta",
               "operation": "replace", "content": "(defun zeta () 22) ; now 22"}),
    );
    assert_eq!(
        std::fs::read_to_string(&path).unwrap(),
        "(defun zeta () 22) ; now 22\n (defun eta () 3)\n"
    );
    std::fs::write(&path, src).unwrap();
    s.ok(
        "lisp-edit-form",
        json!({"path": "z.lisp", "formType": "defun", "formName": "zeta",
               "operation": "insert_after", "content": "(defun z2 () 0) ; z2"}),
    );
    assert_eq!(
        std::fs::read_to_string(&path).unwrap(),
        "(defun zeta () 2)\n\n(defun z2 () 0) ; z2\n (defun eta () 3)\n"
    );
    let r = s.ok("clgrep-signatures", json!({"path": "z.lisp"}));
    assert_eq!(r.structured["total"], 3, "{}", r.text);
    // Before a form that does not start its line: nothing is repeated.
    std::fs::write(&path, src).unwrap();
    s.ok(
        "lisp-edit-form",
        json!({"path": "z.lisp", "formType": "defun", "formName": "eta",
               "operation": "insert_before", "content": "(defun e0 () 0)"}),
    );
    assert_eq!(
        std::fs::read_to_string(&path).unwrap(),
        "(defun zeta () 2) (defun e0 () 0)\n\n(defun eta () 3)\n"
    );
    // Inside a container the closing `)` of the container follows.
    let (_d2, root2, mut s2) = setup();
    s2.ok(
        "lisp-edit-form",
        json!({"path": "src/nasty.lisp", "formType": "defmacro", "formName": "with-thing",
               "operation": "replace", "content": "(defmacro with-thing () nil) ; note"}),
    );
    let after = std::fs::read_to_string(root2.join("src/nasty.lisp")).unwrap();
    assert!(
        after.contains(
            "(eval-when (:compile-toplevel :load-toplevel :execute)\n  \
             (defmacro with-thing () nil) ; note\n  )\n\n(defvar"
        ),
        "{after}"
    );
}

/// The comment lines directly above a definition and its trailing comment
/// belong to it: delete takes them, insert_before goes above them.
#[test]
fn edit_form_keeps_comments_with_their_form() {
    let src = ";;;; file header\n(defun alpha () 0)\n\n;;; About beta.\n;; More.\n\
               (defun beta () 1)\n\n(defun epsilon () 1) ; trailing comment\n(defun omega () 9)\n";
    let (_d, root, mut s) = project_with("c.lisp", src);
    let path = root.join("c.lisp");
    let edit = |s: &mut Server, name: &str, op: &str, content: Option<&str>| {
        let mut args = json!({"path": "c.lisp", "formType": "defun", "formName": name,
                              "operation": op});
        if let Some(c) = content {
            args["content"] = json!(c);
        }
        s.ok("lisp-edit-form", args);
    };
    edit(&mut s, "beta", "insert_before", Some("(defun new () 2)"));
    assert_eq!(
        std::fs::read_to_string(&path).unwrap(),
        ";;;; file header\n(defun alpha () 0)\n\n(defun new () 2)\n\n;;; About beta.\n;; More.\n\
         (defun beta () 1)\n\n(defun epsilon () 1) ; trailing comment\n(defun omega () 9)\n"
    );
    edit(&mut s, "beta", "delete", None);
    assert_eq!(
        std::fs::read_to_string(&path).unwrap(),
        ";;;; file header\n(defun alpha () 0)\n\n(defun new () 2)\n\n\
         (defun epsilon () 1) ; trailing comment\n(defun omega () 9)\n"
    );
    edit(&mut s, "epsilon", "insert_after", Some("(defun e2 () 2)"));
    assert_eq!(
        std::fs::read_to_string(&path).unwrap(),
        ";;;; file header\n(defun alpha () 0)\n\n(defun new () 2)\n\n\
         (defun epsilon () 1) ; trailing comment\n\n(defun e2 () 2)\n(defun omega () 9)\n"
    );
    edit(&mut s, "epsilon", "delete", None);
    assert_eq!(
        std::fs::read_to_string(&path).unwrap(),
        ";;;; file header\n(defun alpha () 0)\n\n(defun new () 2)\n\n\
         (defun e2 () 2)\n(defun omega () 9)\n"
    );
    // A `;;;;` heading stays: it is about the file, not the form below it.
    edit(&mut s, "alpha", "delete", None);
    assert_eq!(
        std::fs::read_to_string(&path).unwrap(),
        ";;;; file header\n\n(defun new () 2)\n\n(defun e2 () 2)\n(defun omega () 9)\n"
    );
}

/// Replacing a guarded form with guarded content replaces the guard; plain
/// content keeps it.
#[test]
fn edit_form_replace_and_reader_conditionals() {
    let src = "(defun a () 1)\n\n#+sbcl\n(defun b () 2)\n";
    let (_d, root, mut s) = project_with("g.lisp", src);
    let path = root.join("g.lisp");
    let replace = |s: &mut Server, content: &str| {
        s.ok(
            "lisp-edit-form",
            json!({"path": "g.lisp", "formType": "defun", "formName": "b",
                   "operation": "replace", "content": content}),
        );
    };
    replace(&mut s, "#+sbcl\n(defun b () 22)");
    assert_eq!(
        std::fs::read_to_string(&path).unwrap(),
        "(defun a () 1)\n\n#+sbcl\n(defun b () 22)\n"
    );
    replace(&mut s, "(defun b () 3)");
    assert_eq!(
        std::fs::read_to_string(&path).unwrap(),
        "(defun a () 1)\n\n#+sbcl\n(defun b () 3)\n"
    );
    replace(&mut s, "#-ccl (defun b () 4)");
    assert_eq!(
        std::fs::read_to_string(&path).unwrap(),
        "(defun a () 1)\n\n#-ccl (defun b () 4)\n"
    );
}

/// Search is line by line, like grep: `\s` cannot run over a newline, a
/// comment's line is reported (not the blank line above it), and the
/// empty text after the final newline is no line.
#[test]
fn search_matches_each_line_on_its_own() {
    let src = "(in-package :x)\n\n(defun a ()\n  1)\n\n;; comment\n(defun b () 2)\n\n  \
               (defun c () 3) ; a then z\n(list 'a\n 'z)\n";
    let (_d, root, mut s) = project_with("l.lisp", src);
    let r = s.ok("clgrep-search", json!({"pattern": r"^\s*\(defun"}));
    assert_eq!(
        r.text,
        "l.lisp:3: [defun a] (defun a ()\n\
         l.lisp:7: [defun b] (defun b () 2)\n\
         l.lisp:9: [defun c]   (defun c () 3) ; a then z\n\
         [3 hits in 1 Lisp file]\n"
    );
    let r = s.ok(
        "clgrep-search",
        json!({"pattern": r"^\s*\(defun", "formTypes": ["defun"]}),
    );
    assert_eq!(r.structured["totalHits"], 3, "{}", r.text);
    let r = s.ok("clgrep-search", json!({"pattern": r"^\s*;"}));
    assert_eq!(r.text, "l.lisp:6: ;; comment\n[1 hit in 1 Lisp file]\n");
    // Totals equal grep's line counts, also for patterns whose whole-text
    // matches would run over lines.
    for pattern in [
        r"^$",
        r"^\s*\(defun",
        r"^\s*;",
        r"a[^z]*z",
        r"\)\s*$",
        r"\s",
    ] {
        let r = s.ok("clgrep-search", json!({"pattern": pattern}));
        let out = std::process::Command::new("grep")
            .args(["-cE", pattern])
            .arg(root.join("l.lisp"))
            .output()
            .unwrap();
        let grep: u64 = String::from_utf8_lossy(&out.stdout).trim().parse().unwrap();
        assert_eq!(r.structured["totalHits"], grep, "/{pattern}/: {}", r.text);
    }
    let r = s.ok("clgrep-search", json!({"pattern": "^$"}));
    let lines: Vec<_> = r.structured["hits"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["line"].as_u64().unwrap())
        .collect();
    assert_eq!(lines, vec![2, 5, 8]);
    let r = s.ok("clgrep-search", json!({"pattern": "a[^z]*z"}));
    assert_eq!(r.structured["hits"][0]["line"], 9, "{}", r.text);
    assert_eq!(r.structured["totalHits"], 1, "{}", r.text);
}

/// Signatures are balanced, also when the signature part ends in `)` and
/// only the form's own `)` follows it.
#[test]
fn signatures_are_balanced() {
    let src = "(defgeneric stream-fd (stream))\n\
               (defstruct (mutex-recursive (:include mutex)))\n\
               (defvar *v*)\n(defun f (x) x)\n(defclass c () ())\n";
    let (_d, _root, mut s) = project_with("s.lisp", src);
    let r = s.ok("clgrep-signatures", json!({"path": "s.lisp"}));
    assert_eq!(
        r.text,
        "s.lisp:\n\
         \x20    1: (defgeneric stream-fd (stream))\n\
         \x20    2: (defstruct (mutex-recursive (:include mutex)))\n\
         \x20    3: (defvar *v*)\n\
         \x20    4: (defun f (x) ...)\n\
         \x20    5: (defclass c () ...)\n\
         [5 definitions in 1 Lisp file]\n"
    );
    // Every signature of SBCL's own sources reads as one balanced form
    // (except those cut at 300 characters).
    let sbcl = std::path::Path::new("/usr/share/sbcl-source/src/code");
    if !sbcl.is_dir() {
        common::skip_missing(
            "clgrep-signatures over SBCL's own sources",
            "sbcl-source (apt-get install sbcl-source)",
        );
        return;
    }
    let mut s = Server::start(sbcl);
    let r = s.ok("clgrep-signatures", json!({"limit": 100000}));
    let defs = r.structured["definitions"].as_array().unwrap();
    assert!(defs.len() > 5000, "{}", defs.len());
    let mut bad = Vec::new();
    for d in defs {
        let sig = d["signature"].as_str().unwrap();
        if sig.len() >= 300 {
            continue;
        }
        // `...` (all dots) is no valid token; read it as a symbol.
        let parse = lisp_syntax::cst::parse(&sig.replace(" ...)", " etc)"));
        if !parse.errors.is_empty() || parse.top_level_forms().count() != 1 {
            bad.push(format!("{}:{}: {sig}", d["path"], d["line"]));
        }
    }
    assert!(
        bad.is_empty(),
        "{} unbalanced: {:?}",
        bad.len(),
        &bad[..bad.len().min(10)]
    );
}

/// Paging never stands still: forms sharing the window's first line do
/// not make the next window start on that same line.
#[test]
fn collapsed_paging_always_moves_on() {
    let src = "(defun a () 1) (defun b () 2)\n(defun c () 3)\n(defun d () 4)\n";
    let (_d, _root, mut s) = project_with("p.lisp", src);
    let mut offset = 0u64;
    let mut seen = String::new();
    for _ in 0..10 {
        let r = s.ok(
            "lisp-read-file",
            json!({"path": "p.lisp", "offset": offset, "limit": 1}),
        );
        seen.push_str(&r.text);
        match r.structured["meta"]["nextOffset"].as_u64() {
            Some(next) => {
                assert!(
                    next > offset,
                    "next offset {next} after {offset}: {}",
                    r.text
                );
                offset = next;
            }
            None => break,
        }
    }
    for name in ["(defun a", "(defun b", "(defun c", "(defun d"] {
        assert!(seen.contains(name), "{name} never shown: {seen}");
    }
}

/// A line window must lie inside the file and hold at least one line.
#[test]
fn check_parens_windows_are_validated() {
    let (_d, _root, mut s) = setup();
    let e = s.err(
        "lisp-check-parens",
        json!({"path": "src/nasty.lisp", "offset": 100, "limit": 5}),
    );
    assert_eq!(
        e.text,
        "`offset` 100 is past the end of 'src/nasty.lisp', which has 29 lines (`offset` is \
         0-based)."
    );
    let e = s.err(
        "lisp-check-parens",
        json!({"path": "src/nasty.lisp", "limit": 0}),
    );
    assert_eq!(e.text, "`limit` must be at least 1 (lines).");
    let r = s.ok(
        "lisp-check-parens",
        json!({"path": "src/nasty.lisp", "offset": 27, "limit": 5}),
    );
    assert_eq!(
        r.text,
        "src/nasty.lisp lines 28-29: ok: all delimiters balanced (1 top-level form)."
    );
}

const FIVEAM: &str = ";;;; tests.lisp\n\
(in-package :inventory-tests)\n\
\n\
(def-suite :inventory)\n\
(in-suite :inventory)\n\
\n\
(test total\n  \"The total of an empty store is 0.\"\n  (is (= 0 (total (make-store)))))\n\
\n\
(test (add-item :suite :inventory)\n  (is (= 1 (count-items (add (make-store) :x)))))\n\
\n\
(def-suite :reports)\n\
(in-suite :reports)\n\
\n\
(test report-empty\n  (is (string= \"\" (report (make-store)))))\n";

/// Test forms of FiveAM, Rove and Parachute are definitions: listed,
/// expanded by name, and edited by `formType`; a test inserted after the
/// last test of a suite stays in that suite.
#[test]
fn test_forms_are_definitions() {
    let (_d, root, mut s) = project_with("tests.lisp", FIVEAM);
    std::fs::write(
        root.join("other.lisp"),
        "(deftest rove-adds\n  (ok (= 2 (+ 1 1))))\n\n(define-test \"para adds\"\n  (is = 2 (+ 1 1)))\n",
    )
    .unwrap();
    let r = s.ok("clgrep-signatures", json!({"path": "."}));
    assert_eq!(
        r.text,
        "other.lisp:\n\
         \x20    1: (deftest rove-adds ...)\n\
         \x20    4: (define-test \"para adds\" ...)\n\
         tests.lisp:\n\
         \x20    4: (def-suite :inventory)\n\
         \x20    7: (test total ...)\n\
         \x20   11: (test (add-item :suite :inventory) ...)\n\
         \x20   14: (def-suite :reports)\n\
         \x20   17: (test report-empty ...)\n\
         [7 definitions in 2 Lisp files]\n"
    );
    assert_eq!(r.structured["definitions"][3]["type"], "test");
    assert_eq!(r.structured["definitions"][3]["name"], "total");

    // Search hits are placed in their test.
    let r = s.ok(
        "clgrep-search",
        json!({"pattern": "report \\(make-store", "path": "tests.lisp"}),
    );
    assert!(
        r.text.starts_with("tests.lisp:18: [test report-empty]"),
        "{}",
        r.text
    );

    // The collapsed view expands a test by name.
    let r = s.ok(
        "lisp-read-file",
        json!({"path": "tests.lisp", "namePattern": "^total$"}),
    );
    assert!(
        r.text.contains(" 9:   (is (= 0 (total (make-store)))))"),
        "{}",
        r.text
    );
    assert!(r.text.contains("17: (test report-empty ...)"), "{}", r.text);

    // A test is a target; inserted after the suite's last test, the new
    // one comes before the next `(in-suite ...)`.
    let r = s.ok(
        "lisp-edit-form",
        json!({"path": "tests.lisp", "formType": "test", "formName": "add-item",
               "operation": "insert_after",
               "content": "(test remove-item\n  (is (= 0 (count-items (make-store)))))"}),
    );
    assert_eq!(r.structured["line"], 11);
    let text = std::fs::read_to_string(root.join("tests.lisp")).unwrap();
    let new_at = text.find("(test remove-item").unwrap();
    assert!(
        text.find("(in-suite :inventory)").unwrap() < new_at
            && new_at < text.find("(def-suite :reports)").unwrap(),
        "{text}"
    );
    assert!(
        text.contains("(count-items (add (make-store) :x)))))\n\n(test remove-item\n"),
        "{text}"
    );
    s.ok(
        "lisp-edit-form",
        json!({"path": "tests.lisp", "formType": "test", "formName": "total",
               "operation": "replace",
               "content": "(test total\n  (is (zerop (total (make-store)))))"}),
    );
    let text = std::fs::read_to_string(root.join("tests.lisp")).unwrap();
    assert!(text.contains("(test total\n  (is (zerop"), "{text}");
    s.ok(
        "lisp-edit-form",
        json!({"path": "other.lisp", "formType": "define-test", "formName": "\"para adds\"",
               "operation": "delete"}),
    );
    assert_eq!(
        std::fs::read_to_string(root.join("other.lisp")).unwrap(),
        "(deftest rove-adds\n  (ok (= 2 (+ 1 1))))\n"
    );
    let r = s.err(
        "lisp-edit-form",
        json!({"path": "tests.lisp", "formType": "test", "formName": "nope",
               "operation": "delete"}),
    );
    assert!(
        r.text
            .contains("The test forms in this file: test total (line 7)"),
        "{}",
        r.text
    );
}

/// New lines follow the lines around the edit: a file with one CRLF line
/// among LF lines gets LF; a CRLF file stays CRLF; deleting the last form
/// leaves no blank line and keeps the final line ending as it was.
#[test]
fn edits_follow_the_file_line_endings() {
    let mixed = ";;;; mixed.lisp\r\n(in-package :cl-user)\n\n(defun a () 1)\n\n(defun b () 2)\n";
    let (_d, root, mut s) = project_with("mixed.lisp", mixed);
    let path = root.join("mixed.lisp");
    s.ok(
        "lisp-edit-form",
        json!({"path": "mixed.lisp", "formType": "defun", "formName": "a",
               "operation": "insert_after", "content": "(defun a2 ()\r\n  11)"}),
    );
    assert_eq!(
        std::fs::read_to_string(&path).unwrap(),
        ";;;; mixed.lisp\r\n(in-package :cl-user)\n\n(defun a () 1)\n\n(defun a2 ()\n  11)\n\n(defun b () 2)\n"
    );
    s.ok(
        "lisp-edit-form",
        json!({"path": "mixed.lisp", "formType": "defun", "formName": "b",
               "operation": "delete"}),
    );
    assert_eq!(
        std::fs::read_to_string(&path).unwrap(),
        ";;;; mixed.lisp\r\n(in-package :cl-user)\n\n(defun a () 1)\n\n(defun a2 ()\n  11)\n"
    );

    let crlf = root.join("crlf.lisp");
    std::fs::write(&crlf, "(defun c () 3)\r\n\r\n(defun d () 4)").unwrap();
    s.ok(
        "lisp-edit-form",
        json!({"path": "crlf.lisp", "formType": "defun", "formName": "c",
               "operation": "insert_before", "content": "(defun b ()\n  2)"}),
    );
    assert_eq!(
        std::fs::read_to_string(&crlf).unwrap(),
        "(defun b ()\r\n  2)\r\n\r\n(defun c () 3)\r\n\r\n(defun d () 4)"
    );
    // No final line ending before: none after.
    s.ok(
        "lisp-edit-form",
        json!({"path": "crlf.lisp", "formType": "defun", "formName": "d",
               "operation": "delete"}),
    );
    assert_eq!(
        std::fs::read_to_string(&crlf).unwrap(),
        "(defun b ()\r\n  2)\r\n\r\n(defun c () 3)"
    );
}

/// A guarded form replaced by several forms: the guard would cover only
/// the first, so the edit is refused unless `content` guards them itself.
#[test]
fn several_forms_do_not_replace_a_guarded_form() {
    let src = "(defun a () 1)\n\n#+sbcl\n(defun b () 2)\n";
    let (_d, root, mut s) = project_with("g.lisp", src);
    let r = s.err(
        "lisp-edit-form",
        json!({"path": "g.lisp", "formType": "defun", "formName": "b",
               "operation": "replace", "content": "(defun b () 3)\n(defun b2 () 4)"}),
    );
    assert!(r.text.contains("guarded by `#+sbcl`"), "{}", r.text);
    assert_eq!(std::fs::read_to_string(root.join("g.lisp")).unwrap(), src);
    s.ok(
        "lisp-edit-form",
        json!({"path": "g.lisp", "formType": "defun", "formName": "b",
               "operation": "replace", "content": "#+sbcl (defun b () 3)\n#+sbcl (defun b2 () 4)"}),
    );
    assert_eq!(
        std::fs::read_to_string(root.join("g.lisp")).unwrap(),
        "(defun a () 1)\n\n#+sbcl (defun b () 3)\n#+sbcl (defun b2 () 4)\n"
    );
}

/// A Lisp file written with a `)` missing is repaired by its indentation
/// before it is written, and the result says what changed, line by line.
#[test]
fn write_file_repairs_a_missing_closer_by_indentation() {
    let (_d, root) = project();
    let mut s = Server::start(&root);
    let broken = "(defun area (r)\n  (let ((pi2 (* pi 2)))\n    (* pi2 r r)\n\n(defun perimeter (r)\n  (* 2 pi r))\n";
    let r = s.ok(
        "fs-write-file",
        json!({"path": "geo.lisp", "content": broken}),
    );
    assert_eq!(
        r.structured["repairs"],
        json!(["added \"))\" at line 3, column 16"])
    );
    assert!(
        r.text
            .contains("-3:     (* pi2 r r)\n+3:     (* pi2 r r)))"),
        "{}",
        r.text
    );
    let fixed = broken.replace("(* pi2 r r)\n", "(* pi2 r r)))\n");
    assert_eq!(
        std::fs::read_to_string(root.join("geo.lisp")).unwrap(),
        fixed
    );
    let c = s.ok("lisp-check-parens", json!({"path": "geo.lisp"}));
    assert_eq!(c.structured["ok"], true, "{}", c.text);
    // One too many: removed, and said.
    let r = s.ok(
        "fs-write-file",
        json!({"path": "extra.lisp", "content": "(defun f ()\n  (g)))\n\n(defun h () 1)\n"}),
    );
    assert_eq!(
        r.structured["repairs"],
        json!(["removed \")\" at line 2, column 7"])
    );
    // Balanced text is written as given, whatever its indentation.
    let odd = "(defun f ()\n(g)\n        (h))\n";
    let r = s.ok("fs-write-file", json!({"path": "odd.lisp", "content": odd}));
    assert!(r.structured.get("repairs").is_none(), "{}", r.text);
    assert_eq!(std::fs::read_to_string(root.join("odd.lisp")).unwrap(), odd);
    // On purpose: written as given.
    s.ok(
        "fs-write-file",
        json!({"path": "raw.lisp", "content": broken, "repairParens": false}),
    );
    assert_eq!(
        std::fs::read_to_string(root.join("raw.lisp")).unwrap(),
        broken
    );
    // Not Lisp: never touched.
    s.ok(
        "fs-write-file",
        json!({"path": "notes.txt", "content": "(a"}),
    );
    assert_eq!(
        std::fs::read_to_string(root.join("notes.txt")).unwrap(),
        "(a"
    );
}

/// What indentation cannot settle is refused, naming the form, the line and
/// the likely fix, and nothing is written.
#[test]
fn unrepairable_lisp_is_refused_and_nothing_is_written() {
    let (_d, root) = project();
    let mut s = Server::start(&root);
    let e = s.err(
        "fs-write-file",
        json!({"path": "doc.lisp", "content": "(defun f ()\n  \"doc\n  (g))\n"}),
    );
    assert!(
        e.text
            .starts_with("Not written: in doc.lisp, the parentheses of `(defun f` (line 1)")
            && e.text
                .contains("the string opened at line 2, column 3 never closes")
            && e.text.contains("Likely fix: add the closing `\"`"),
        "{}",
        e.text
    );
    assert!(!root.join("doc.lisp").exists());
    let src = "(defun a () 1)\n";
    std::fs::write(root.join("e.lisp"), src).unwrap();
    let e = s.err(
        "lisp-edit-form",
        json!({"path": "e.lisp", "formType": "defun", "formName": "a", "operation": "replace",
               "content": "(defun a ()\n#+sbcl (b)\n  (c)\n"}),
    );
    assert!(
        e.text.contains("`(defun a` (line 1)")
            && e.text
                .contains("would close on its own line 1, without a body"),
        "{}",
        e.text
    );
    assert_eq!(std::fs::read_to_string(root.join("e.lisp")).unwrap(), src);
}

/// `lisp-edit-form` repairs its `content` the same way.
#[test]
fn edit_form_repairs_content_missing_a_closer() {
    let (_d, root, mut s) = project_with("e.lisp", "(defun a () 1)\n\n(defun b () 2)\n");
    let r = s.ok(
        "lisp-edit-form",
        json!({"path": "e.lisp", "formType": "defun", "formName": "b", "operation": "replace",
               "content": "(defun b (x)\n  (when x\n    (print x)\n  x)"}),
    );
    assert_eq!(
        r.structured["repairs"],
        json!(["added \")\" at line 3, column 14"])
    );
    assert!(
        r.text.contains("Repaired the parentheses of `content`"),
        "{}",
        r.text
    );
    assert_eq!(
        std::fs::read_to_string(root.join("e.lisp")).unwrap(),
        "(defun a () 1)\n\n(defun b (x)\n  (when x\n    (print x))\n  x)\n"
    );
}
