//! Code outside any ASDF system, through the built binary with a real
//! image (`CL_MCP_LISP`, SBCL unless set): exercise-style folders (a solved
//! stub, a FiveAM test file that begins `(load "stub")` and
//! `(ql:quickload :fiveam)`, no `.asd`; `tests/exercises/`) run from a
//! server started in an unrelated working directory; the image working in
//! the project root and following `fs-set-project-root`; the Quicklisp
//! stand-in; `asdf-test-system` by `file` and by `test` alone; unknown
//! names answered with a few near ones and a count.

mod common;
mod eval_support;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use common::{Server, BIN};
use eval_support::{call, eval, eval_with, Reply};
use serde_json::json;

/// The exercises of `tests/exercises/` named, copied into a fresh project
/// root; those in `broken` with their wrong solution.
fn exercises(names: &[&str], broken: &[&str]) -> (tempfile::TempDir, PathBuf) {
    let tmp = tempfile::Builder::new()
        .prefix("loose-")
        .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
        .unwrap();
    let root = tmp.path().canonicalize().unwrap();
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/exercises");
    for name in names {
        let dir = root.join(name);
        std::fs::create_dir_all(&dir).unwrap();
        for file in [format!("{name}.lisp"), format!("{name}-test.lisp")] {
            std::fs::copy(source.join(name).join(&file), dir.join(&file)).unwrap();
        }
        if broken.contains(name) {
            let file = format!("{name}.lisp");
            std::fs::copy(
                source.join(name).join("broken").join(&file),
                dir.join(&file),
            )
            .unwrap();
        }
    }
    (tmp, root)
}

/// A server for `root`, started in another directory (as a client that
/// starts servers wherever it happens to run), on the tests' shared cache.
fn server_elsewhere(root: &Path, extra: &[&str]) -> (Server, tempfile::TempDir) {
    let elsewhere = tempfile::Builder::new()
        .prefix("elsewhere-")
        .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
        .unwrap();
    let cache = Path::new(env!("CARGO_TARGET_TMPDIR")).join("cl-mcp-server-test-cache");
    let mut cmd = Command::new(BIN);
    cmd.arg("--project-root")
        .arg(root)
        .args(extra)
        .current_dir(elsewhere.path())
        .env("CL_MCP_CACHE_DIR", cache)
        .stderr(Stdio::null());
    let mut s = Server::spawn(cmd);
    let r = s.request(json!({"jsonrpc":"2.0","id":0,"method":"initialize","params":{
        "protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"test","version":"1"}}}));
    assert!(r.get("result").is_some(), "initialize failed: {r}");
    s.send(&json!({"jsonrpc":"2.0","method":"notifications/initialized"}));
    (s, elsewhere)
}

fn test_file(s: &mut Server, id: i64, file: &str) -> Reply {
    call(s, id, "asdf-test-system", json!({ "file": file }))
}

#[test]
fn an_exercise_test_file_runs_unchanged_in_one_call() {
    let (_tmp, root) = exercises(&["anagram", "yacht"], &["yacht"]);
    let (mut s, _elsewhere) = server_elsewhere(&root, &[]);

    // From a fresh image: the file's (load "anagram") and
    // (quicklisp-client:quickload :fiveam) work as written.
    let r = test_file(&mut s, 1, "anagram/anagram-test.lisp");
    assert!(!r.is_error, "{}", r.text);
    assert_eq!(r.structured["outcome"], "passed", "{}", r.text);
    assert_eq!(r.structured["summary"]["passed"], 5, "{}", r.text);
    assert!(
        r.text
            .contains("Tests of anagram/anagram-test.lisp passed (fiveam): 5 passed"),
        "{}",
        r.text
    );
    assert!(
        r.text.len() < 1000,
        "a passing run answers briefly: {}",
        r.text
    );

    // A wrong solution: each failure at its check, path:line.
    let r = test_file(&mut s, 2, "yacht/yacht-test.lisp");
    assert!(r.is_error);
    assert_eq!(r.structured["outcome"], "failed", "{}", r.text);
    assert_eq!(r.structured["summary"]["failed"], 2, "{}", r.text);
    let failures = r.structured["failures"].as_array().unwrap();
    assert_eq!(failures.len(), 2, "{}", r.text);
    for f in failures {
        assert_eq!(f["path"], "yacht/yacht-test.lisp", "{f}");
        assert_eq!(f["at"], "check", "{f}");
        assert!(f["line"].as_i64().unwrap() > 10, "{f}");
    }
    assert!(
        r.text
            .contains("yacht/yacht-test.lisp:15:3: FAIL YACHT-TEST::YACHT"),
        "{}",
        r.text
    );
    assert!(
        r.text.len() < 1500,
        "one failing check is not kilobytes: {}",
        r.text
    );

    // Run again (the suite redefined by the same file): the same answer.
    let r = test_file(&mut s, 3, "yacht/yacht-test.lisp");
    assert_eq!(r.structured["summary"]["failed"], 2, "{}", r.text);

    // `test` alone: a suite already in the image, its failures located in
    // the file that defined it.
    let r = call(
        &mut s,
        4,
        "asdf-test-system",
        json!({"test": "yacht-test::yacht-suite"}),
    );
    assert_eq!(r.structured["summary"]["failed"], 2, "{}", r.text);
    assert!(
        r.text.contains("yacht/yacht-test.lisp:15:3: FAIL"),
        "{}",
        r.text
    );
    // What agents borrowed before `file`: the suite run as a test of the
    // system that defines FiveAM. Its failures are located all the same.
    // (Not on ECL: its `asdf:test-system "fiveam"` first compiles FiveAM's
    // own test system through gcc, minutes on a busy machine.)
    if common::lisp() != "ecl" {
        let r = call(
            &mut s,
            6,
            "asdf-test-system",
            json!({"system": "fiveam", "test": "yacht-test::yacht-suite"}),
        );
        assert_eq!(r.structured["summary"]["failed"], 2, "{}", r.text);
        assert!(
            r.text.contains("yacht/yacht-test.lisp:15:3: FAIL"),
            "{}",
            r.text
        );
    }
    // A file and one of its tests.
    let r = call(
        &mut s,
        5,
        "asdf-test-system",
        json!({"file": "yacht/yacht-test.lisp", "test": "yacht-test::choice"}),
    );
    assert!(!r.is_error, "{}", r.text);
    assert_eq!(r.structured["summary"]["passed"], 1, "{}", r.text);
}

#[test]
fn a_test_file_that_does_not_build_or_defines_no_tests_says_so() {
    let (_tmp, root) = exercises(&["leap"], &[]);
    std::fs::remove_file(root.join("leap/leap.lisp")).unwrap();
    std::fs::write(root.join("plain.lisp"), "(defun plain () 1)\n").unwrap();
    let (mut s, _elsewhere) = server_elsewhere(&root, &[]);

    // The stub is missing: the error names the absolute path tried.
    let r = test_file(&mut s, 1, "leap/leap-test.lisp");
    assert!(r.is_error);
    assert_eq!(r.structured["outcome"], "error", "{}", r.text);
    // (SBCL names the relative path in its message and the server adds
    // the absolute one; CLISP and ECL name the absolute one themselves.)
    let tried = root.join("leap/leap").display().to_string();
    assert!(r.text.contains(&tried), "{}", r.text);
    assert!(
        r.text.contains("leap/leap-test.lisp:"),
        "located: {}",
        r.text
    );

    let r = test_file(&mut s, 2, "plain.lisp");
    assert!(r.is_error);
    assert!(r.text.contains("defines no test"), "{}", r.text);

    let r = call(&mut s, 3, "asdf-test-system", json!({}));
    assert!(r.is_error);
    assert!(r.text.contains("Nothing to run"), "{}", r.text);
    let r = call(
        &mut s,
        4,
        "asdf-test-system",
        json!({"system": "leap", "file": "leap/leap-test.lisp"}),
    );
    assert!(r.is_error);
    assert!(r.text.contains("not both"), "{}", r.text);
}

#[test]
fn the_image_works_in_the_project_root_and_follows_it() {
    let (_tmp, root) = exercises(&["leap"], &[]);
    let (mut s, _elsewhere) = server_elsewhere(&root, &[]);
    let here = |s: &mut Server, id| {
        let r = eval(
            s,
            id,
            "(format nil \"~A ~A\" *default-pathname-defaults* (uiop:getcwd))",
        );
        assert!(!r.is_error, "{}", r.text);
        r.text
    };
    let dir = format!("{}/", root.display());
    assert_eq!(here(&mut s, 1), format!("=> \"{dir} {dir}\""));

    // lisp-compile-file: the file's directory is the default while it
    // compiles and loads, so its (load "leap") finds its neighbour.
    let r = call(
        &mut s,
        2,
        "lisp-compile-file",
        json!({"path": "leap/leap-test.lisp"}),
    );
    assert!(!r.is_error, "{}", r.text);
    assert_eq!(here(&mut s, 3), format!("=> \"{dir} {dir}\""));

    let r = call(&mut s, 4, "fs-set-project-root", json!({"path": "leap"}));
    assert!(!r.is_error, "{}", r.text);
    assert!(r.text.contains("working directory"), "{}", r.text);
    let sub = format!("{}/leap/", root.display());
    assert_eq!(here(&mut s, 5), format!("=> \"{sub} {sub}\""));
    let r = eval(&mut s, 6, "(load \"leap\") (leap:leap-year-p 2000)");
    assert_eq!(r.text, "=> T", "{}", r.text);
    let r = eval(&mut s, 7, "(load \"nothere\")");
    assert!(r.is_error);
    assert!(r.text.contains(&format!("{sub}nothere")), "{}", r.text);
}

/// A system whose file quickloads at compile time, as many do.
const QUICKLOADING_SYSTEM: &[(&str, &str)] = &[
    (
        "ql-user.asd",
        "(defsystem \"ql-user\" :components ((:file \"ql-user\")))\n",
    ),
    (
        "ql-user.lisp",
        "(eval-when (:compile-toplevel :load-toplevel :execute)\n  \
         (ql:quickload :fiveam :silent t))\n\
         (defpackage :ql-user (:use :cl))\n(in-package :ql-user)\n\
         (defun suite-class () (find-class 'fiveam::test-suite))\n",
    ),
];

/// What Quicklisp's setup does to these packages (an imitation written
/// here: its DEFPACKAGE with uses, shadowing imports and the nickname QL,
/// its QUICKLOAD a generic function).
const QUICKLISP_LIKE: &str = "\
(defpackage #:ql-dist (:use #:cl) (:export #:system-apropos))
(defun ql-dist:system-apropos (term) (list :real-apropos term))
(defpackage #:quicklisp-client
  (:use #:cl)
  (:shadowing-import-from #:ql-dist #:system-apropos)
  (:nicknames #:ql)
  (:export #:quickload #:system-apropos #:where-is-system #:register-local-projects))
(in-package #:quicklisp-client)
(defgeneric quickload (systems &key verbose silent prompt explain &allow-other-keys))
(defmethod quickload (systems &key verbose silent prompt explain &allow-other-keys)
  (declare (ignore verbose silent prompt explain))
  (list :real systems))
(defun where-is-system (name) (list :real-where name))
";

#[test]
fn quickload_works_without_quicklisp() {
    let tmp = tempfile::Builder::new()
        .prefix("ql-")
        .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
        .unwrap();
    let root = tmp.path().canonicalize().unwrap();
    for (name, text) in QUICKLOADING_SYSTEM {
        std::fs::write(root.join(name), text).unwrap();
    }
    std::fs::write(root.join("quicklisp-like.lisp"), QUICKLISP_LIKE).unwrap();
    let (mut s, _elsewhere) = server_elsewhere(&root, &[]);

    // ECL compiles a library through C: its first build takes a while.
    let r = eval_with(
        &mut s,
        1,
        "(list (ql:quickload :alexandria) (ql:quickload '(\"alexandria\" :fiveam) :silent t))",
        json!({"timeoutSeconds": 600}),
    );
    assert!(!r.is_error, "{}", r.text);
    assert!(
        r.text
            .starts_with("[NOTICE] Quicklisp is not installed; `ql:quickload` loads through ASDF"),
        "{}",
        r.text
    );
    assert!(
        r.text
            .ends_with("=> (:ALEXANDRIA (\"alexandria\" :FIVEAM))"),
        "{}",
        r.text
    );
    // Told once.
    let r = eval(&mut s, 2, "(ql:quickload :alexandria)");
    assert_eq!(r.text, "=> :ALEXANDRIA");

    let r = eval(&mut s, 3, "(ql:quickload :fiveem)");
    assert!(r.is_error);
    assert!(
        r.text.contains("System \"fiveem\" is nowhere"),
        "{}",
        r.text
    );
    assert!(r.text.contains("Did you mean fiveam"), "{}", r.text);

    let r = eval(
        &mut s,
        4,
        "(list (not (null (ql:where-is-system \"fiveam\"))) (ql:where-is-system \"no-such\") \
         (not (null (member \"fiveam\" (ql:system-apropos \"fivea\") :test #'string=))) \
         (ql:register-local-projects))",
    );
    assert!(r.text.ends_with("=> (T NIL T NIL)"), "{}", r.text);

    // A quickload at top level of a file ASDF compiles: loaded in a session
    // of its own, no "Deprecated recursive use of OPERATE".
    let r = call(&mut s, 5, "asdf-load-system", json!({"system": "ql-user"}));
    assert!(!r.is_error, "{}", r.text);
    assert!(
        r.text.contains("(asdf)"),
        "the stand-in is not Quicklisp: {}",
        r.text
    );
    let all = format!("{}{}", r.text, r.structured);
    assert!(!all.contains("recursive use"), "{all}");
    let r = call(
        &mut s,
        6,
        "asdf-load-system",
        json!({"system": "ql-user", "force": true}),
    );
    assert!(!r.is_error, "{}", r.text);
    let all = format!("{}{}", r.text, r.structured);
    assert!(!all.contains("recursive use"), "{all}");

    // The real Quicklisp's setup, loaded later, takes the package over.
    let r = eval(
        &mut s,
        7,
        "(load \"quicklisp-like.lisp\") \
         (list (ql:quickload :x) (ql:where-is-system :y) (ql:system-apropos \"z\"))",
    );
    assert!(!r.is_error, "{}", r.text);
    assert!(
        r.text
            .ends_with("=> ((:REAL :X) (:REAL-WHERE :Y) (:REAL-APROPOS \"z\"))"),
        "{}",
        r.text
    );
}

#[test]
fn unknown_names_get_the_nearest_five_and_a_count() {
    let (_tmp, root) = exercises(&["yacht"], &[]);
    let (mut s, _elsewhere) = server_elsewhere(&root, &[]);
    // Many tests in the image, as with a big system loaded.
    let r = eval_with(
        &mut s,
        1,
        "(ql:quickload :fiveam) (defpackage :many (:use :cl)) (in-package :many) \
         (fiveam:def-suite many-suite) \
         (dotimes (i 200) (eval `(fiveam:test ,(intern (format nil \"CHECK-~D\" i)) (fiveam:is (eq t t)))))",
        json!({"timeoutSeconds": 600}),
    );
    assert!(!r.is_error, "{}", r.text);
    let r = test_file(&mut s, 2, "yacht/yacht-test.lisp");
    assert!(!r.is_error, "{}", r.text);

    let r = call(
        &mut s,
        3,
        "asdf-test-system",
        json!({"test": "yacht-test::yacht-suit"}),
    );
    assert!(r.is_error);
    assert!(
        r.text.contains("Did you mean YACHT-TEST::YACHT-SUITE"),
        "{}",
        r.text
    );
    assert!(r.text.contains("known"), "{}", r.text);
    assert!(r.text.len() < 400, "{} bytes: {}", r.text.len(), r.text);

    let r = call(&mut s, 4, "asdf-test-system", json!({"test": "check-1000"}));
    assert!(r.is_error);
    let shown = r.text.matches("MANY::CHECK-").count();
    assert!((1..=5).contains(&shown), "{}", r.text);
    assert!(r.text.contains("more not listed"), "{}", r.text);
    assert!(!r.text.contains("Known ("), "not every name: {}", r.text);
    assert!(r.text.len() < 500, "{} bytes: {}", r.text.len(), r.text);

    let r = call(
        &mut s,
        5,
        "asdf-system-info",
        json!({"system": "alexandri"}),
    );
    assert!(r.is_error);
    assert!(r.text.contains("Did you mean alexandria"), "{}", r.text);
    let r = call(&mut s, 6, "asdf-test-system", json!({"system": "fiveem"}));
    assert!(r.text.contains("Did you mean fiveam"), "{}", r.text);
    let r = call(
        &mut s,
        7,
        "code-describe",
        json!({"symbol": "fiveam:run-al"}),
    );
    assert!(r.is_error);
    assert!(r.text.contains("Did you mean "), "{}", r.text);
    assert!(
        r.text.contains("IT.BESE.FIVEAM:RUN-ALL-TESTS"),
        "{}",
        r.text
    );
    let r = call(&mut s, 8, "code-describe", json!({"symbol": "fiveem:run!"}));
    assert!(r.is_error);
    assert!(r.text.contains("Did you mean FIVEAM"), "{}", r.text);
    assert!(!r.text.contains("Known ("), "{}", r.text);
}

#[test]
fn sbcl_only_an_attached_image_is_told_the_root_but_not_moved() {
    let user = eval_support::UserLisp::start();
    let addr = format!("127.0.0.1:{}", user.port);
    let (_tmp, root) = exercises(&["leap"], &[]);
    let (mut s, _elsewhere) = server_elsewhere(&root, &["--swank", &addr]);
    let defaults = "(namestring *default-pathname-defaults*)";
    let before = eval(&mut s, 1, defaults).text;
    let before = before.lines().last().unwrap().to_string();
    assert!(!before.contains(&root.display().to_string()), "{before}");
    let r = call(&mut s, 2, "fs-set-project-root", json!({"path": "leap"}));
    assert!(!r.is_error, "{}", r.text);
    assert!(r.text.contains("attached image is told"), "{}", r.text);
    assert!(r.text.contains("not moved"), "{}", r.text);
    let after = eval(&mut s, 3, defaults).text;
    assert!(after.contains("findable by name"), "told: {after}");
    assert_eq!(after.lines().last().unwrap(), before, "not moved");
    drop(user);
}

#[test]
fn fiasco_and_rt_files_run_by_file() {
    let tmp = tempfile::Builder::new()
        .prefix("frameworks-")
        .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
        .unwrap();
    let root = tmp.path().canonicalize().unwrap();
    std::fs::write(
        root.join("fiasco-tests.lisp"),
        "(eval-when (:compile-toplevel :load-toplevel :execute)\n  (ql:quickload :fiasco))\n\
         (fiasco:define-test-package :loose-fiasco-tests)\n(in-package :loose-fiasco-tests)\n\
         (deftest adds () (is (= 4 (+ 2 2))))\n\
         (deftest fails-on-purpose () (is (= 5 (+ 2 2))))\n",
    )
    .unwrap();
    std::fs::write(
        root.join("rt-tests.lisp"),
        "(eval-when (:compile-toplevel :load-toplevel :execute)\n  (ql:quickload :rt))\n\
         (rt:deftest loose-rt-adds (+ 1 1) 2)\n(rt:deftest loose-rt-fails (+ 1 1) 3)\n",
    )
    .unwrap();
    let (mut s, _elsewhere) = server_elsewhere(&root, &[]);
    let r = call(
        &mut s,
        1,
        "asdf-test-system",
        json!({"file": "fiasco-tests.lisp", "timeoutSeconds": 600}),
    );
    assert_eq!(r.structured["summary"]["framework"], "fiasco", "{}", r.text);
    assert_eq!(r.structured["summary"]["passed"], 1, "{}", r.text);
    assert_eq!(r.structured["summary"]["failed"], 1, "{}", r.text);
    assert!(
        r.structured["error"].is_null(),
        "only the file's suite ran: {}",
        r.text
    );
    assert!(
        r.text
            .contains("fiasco-tests.lisp:6:1: FAIL LOOSE-FIASCO-TESTS::FAILS-ON-PURPOSE"),
        "{}",
        r.text
    );
    let r = test_file(&mut s, 2, "rt-tests.lisp");
    assert_eq!(r.structured["summary"]["framework"], "rt", "{}", r.text);
    assert_eq!(r.structured["summary"]["failed"], 1, "{}", r.text);
}
