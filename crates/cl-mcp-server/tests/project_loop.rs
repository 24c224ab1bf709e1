//! The rest of issue 9 through the built binary with a real SBCL image:
//! `lisp-compile-file` on an `.asd` loads it as ASDF does, `code-find`
//! takes `limit`/`projectOnly` and lists the project's definitions first,
//! `code-describe` labels a class's documentation by what the class is,
//! and the local image exits with the server.

mod common;
mod eval_support;

use std::time::{Duration, Instant};

use eval_support::{call, eval, lisp_server};
use serde_json::json;

#[test]
fn asd_files_load_as_asdf_loads_them() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().canonicalize().unwrap();
    // Under `target/`, which the project scan skips: only loading the
    // .asd makes its systems known.
    let dir = root.join("target/extra");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("extra.asd"),
        "(defsystem \"extra\"\n  :components ((:file \"extra\"))\n  \
         :in-order-to ((test-op (test-op \"extra/tests\"))))\n\n\
         (defsystem \"extra/tests\" :depends-on (\"extra\"))\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("extra.lisp"),
        "(defpackage #:extra (:use #:cl) (:export #:answer))\n(in-package #:extra)\n\
         (defun answer () 42)\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("broken.asd"),
        "(defsystem \"broken\" :components ((:file \"b\"))\n",
    )
    .unwrap();
    let root_s = root.to_string_lossy().into_owned();
    let mut s = lisp_server(&["--project-root", &root_s]);

    let r = call(&mut s, 1, "asdf-load-system", json!({"system": "extra"}));
    assert!(r.is_error, "{}", r.text);

    let r = call(
        &mut s,
        2,
        "lisp-compile-file",
        json!({"path": "target/extra/extra.asd"}),
    );
    assert!(!r.is_error, "{}", r.text);
    assert_eq!(r.structured["success"], true);
    assert_eq!(r.structured["systems"], json!(["extra", "extra/tests"]));
    assert!(
        r.text
            .starts_with("Loaded target/extra/extra.asd with asdf:load-asd in "),
        "{}",
        r.text
    );
    assert!(
        r.text.contains("defines systems extra, extra/tests"),
        "{}",
        r.text
    );
    let r = call(&mut s, 3, "asdf-load-system", json!({"system": "extra"}));
    assert!(!r.is_error, "{}", r.text);
    assert_eq!(eval(&mut s, 4, "(extra:answer)").text, "=> 42");

    // An .asd that does not read fails with the reason.
    let r = call(
        &mut s,
        5,
        "lisp-compile-file",
        json!({"path": "target/extra/broken.asd"}),
    );
    assert!(r.is_error, "{}", r.text);
    assert_eq!(r.structured["success"], false);
    assert_eq!(r.structured["systems"], json!([]));
    assert!(
        r.text
            .starts_with("Loading target/extra/broken.asd with asdf:load-asd failed"),
        "{}",
        r.text
    );
    assert!(
        r.text.contains("\nFailed: ASDF/FIND-SYSTEM:LOAD-SYSTEM-DEFINITION-ERROR: Error while trying to load definition for system broken"),
        "{}",
        r.text
    );
    assert!(
        r.structured["failed"]["reason"]
            .as_str()
            .unwrap()
            .contains(match common::lisp() {
                "ecl" => "Unexpected end of file",
                "clisp" => "ends within an object",
                _ => "end of file",
            }),
        "{}",
        r.text
    );
}

#[test]
fn code_find_limits_and_project_first_and_describe_labels() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().canonicalize().unwrap();
    std::fs::write(
        root.join("widget.lisp"),
        "(defclass widget () () (:documentation \"A widget.\"))\n\n\
         (defmethod print-object ((w widget) stream)\n  (format stream \"#<widget>\"))\n\n\
         (defstruct (gadget) \"A gadget.\" x)\n",
    )
    .unwrap();
    let root_s = root.to_string_lossy().into_owned();
    let mut s = lisp_server(&["--project-root", &root_s]);
    let r = call(
        &mut s,
        1,
        "lisp-compile-file",
        json!({"path": "widget.lisp"}),
    );
    assert!(!r.is_error, "{}", r.text);

    // print-object has many methods: the project's comes first, at its
    // defmethod (CLISP records no usable line for it: found by its text).
    let r = call(&mut s, 2, "code-find", json!({"symbol": "print-object"}));
    assert!(!r.is_error, "{}", r.text);
    let defs = r.structured["definitions"].as_array().unwrap();
    assert_eq!(defs[0]["path"], "widget.lisp", "{}", r.text);
    assert_eq!(defs[0]["line"], 3, "{}", r.text);
    assert_eq!(defs[0]["column"], 1, "{}", r.text);
    let count = r.structured["count"].as_u64().unwrap();
    assert!(count > 1, "{}", r.text);
    // ECL and CLISP keep no readable source of their own methods; SBCL's
    // (and Swank's) are read where they lie, and `limit` cuts the list.
    if common::on_sbcl() {
        sbcl_sources_are_readable(&mut s, count);
    }
    let r = call(
        &mut s,
        3,
        "code-find",
        json!({"symbol": "print-object", "projectOnly": true}),
    );
    let defs = r.structured["definitions"].as_array().unwrap();
    assert_eq!(defs.len(), 1, "{}", r.text);
    assert_eq!(r.structured["outside"].as_u64().unwrap(), count - 1);
    assert_eq!(r.structured["truncated"], false);
    // CLISP's print-object is CLOS's (COMMON-LISP imports it).
    let home = if common::lisp() == "clisp" {
        "CLOS"
    } else {
        "COMMON-LISP"
    };
    assert!(
        r.text
            .starts_with(&format!("1 definition of {home}:PRINT-OBJECT:")),
        "{}",
        r.text
    );

    // A class's documentation is the class's, not "(structure)".
    let r = call(&mut s, 4, "code-describe", json!({"symbol": "widget"}));
    assert_eq!(
        r.structured["documentation"],
        json!([{"kind": "class", "text": "A widget."}]),
        "{}",
        r.text
    );
    let r = call(&mut s, 5, "code-describe", json!({"symbol": "gadget"}));
    assert_eq!(
        r.structured["documentation"],
        json!([{"kind": "structure", "text": "A gadget."}]),
        "{}",
        r.text
    );
}

/// On SBCL, print-object's methods are many: `limit` cuts them, saying how
/// many there are, and SBCL's own source of another method and Swank's
/// are readable.
fn sbcl_sources_are_readable(s: &mut common::Server, count: u64) {
    let r = call(
        s,
        2,
        "code-find",
        json!({"symbol": "print-object", "limit": 3}),
    );
    assert!(!r.is_error, "{}", r.text);
    let defs = r.structured["definitions"].as_array().unwrap();
    assert_eq!(defs.len(), 3, "{}", r.text);
    assert_eq!(defs[0]["path"], "widget.lisp", "{}", r.text);
    assert_eq!(defs[0]["line"], 3);
    assert!(count > 3, "{}", r.text);
    assert_eq!(r.structured["count"].as_u64().unwrap(), count);
    assert_eq!(r.structured["truncated"], true);
    assert!(
        r.text
            .contains(&format!("(the first 3 of {count}; raise `limit`")),
        "{}",
        r.text
    );
    let sbcl_source = defs[1]["path"].as_str().unwrap().to_string();
    assert!(sbcl_source.starts_with('/'), "{}", r.text);
    let read = call(
        s,
        20,
        "fs-read-file",
        json!({"path": sbcl_source, "limit": 2}),
    );
    assert!(!read.is_error, "{}", read.text);
    let r = call(s, 21, "code-find", json!({"symbol": "swank:create-server"}));
    let swank_source = r.structured["definitions"][0]["path"]
        .as_str()
        .unwrap()
        .to_string();
    let read = call(
        s,
        22,
        "lisp-read-file",
        json!({"path": swank_source, "namePattern": "^create-server$", "limit": 5}),
    );
    assert!(!read.is_error, "{}", read.text);
}

fn image_pid(s: &mut common::Server, id: i64) -> u32 {
    let r = eval(s, id, "(swank/backend:getpid)");
    r.text.trim_start_matches("=> ").parse().expect(&r.text)
}

/// Whether process `pid` is running (not gone, not a zombie).
fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|st| {
        !st.rsplit(')')
            .next()
            .unwrap_or("")
            .trim_start()
            .starts_with('Z')
    })
}

/// How long `pid` lives on from `since` (at most 10 s).
fn lives_on(pid: u32, since: Instant) -> Duration {
    while alive(pid) && since.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(!alive(pid), "the image outlived the server by 10 s");
    since.elapsed()
}

/// The local image dies with the server: when stdin closes (the server
/// exits at once when idle), and when the server is killed outright while
/// an evaluation runs (the image's stdin lifeline), as well as when a
/// client signals the whole process group, as the Python SDK does.
#[test]
fn the_local_image_exits_with_the_server() {
    let tmp = tempfile::tempdir().unwrap();
    let root_s = tmp.path().to_string_lossy().into_owned();

    let mut s = lisp_server(&["--project-root", &root_s]);
    let pid = image_pid(&mut s, 1);
    let started = Instant::now();
    let _ = s.close();
    let took = lives_on(pid, started);
    assert!(took < Duration::from_millis(1000), "idle: {took:?}");

    // CLISP has no threads: its one thread reads the stdin lifeline only
    // between evaluations, so a busy CLISP image exits when its evaluation
    // ends (a short one here).
    // An ECL thread that takes no interrupts must not hold the exit up
    // (ECL's QUIT joins every thread unless told not to).
    let (busy_code, busy_bound) = match common::lisp() {
        "clisp" => ("(sleep 2)", Duration::from_millis(3000)),
        "ecl" => (
            "(mp:without-interrupts (sleep 30))",
            Duration::from_millis(1000),
        ),
        _ => ("(sleep 30)", Duration::from_millis(1000)),
    };
    let busy = |s: &mut common::Server| {
        s.send(&json!({"jsonrpc":"2.0","id":2,"method":"tools/call",
            "params":{"name":"evaluate-lisp","arguments":{"code":busy_code}}}));
        std::thread::sleep(Duration::from_millis(300));
    };
    let mut s = lisp_server(&["--project-root", &root_s]);
    let pid = image_pid(&mut s, 1);
    busy(&mut s);
    let started = Instant::now();
    s.child.kill().unwrap();
    let took = lives_on(pid, started);
    assert!(took < busy_bound, "server killed: {took:?}");

    let mut s = lisp_server(&["--project-root", &root_s]);
    let pid = image_pid(&mut s, 1);
    busy(&mut s);
    let started = Instant::now();
    for p in [s.child.id(), pid] {
        // SAFETY: kill(2) on processes this test started.
        unsafe { libc::kill(p as i32, libc::SIGTERM) };
    }
    let took = lives_on(pid, started);
    assert!(took < busy_bound, "SIGTERM: {took:?}");
}

/// The agent's loop on a FiveAM project: load by name, run the tests, add a
/// test with lisp-edit-form right away, run again: the new test is built
/// and run, though it was written in the same second the test file was
/// compiled (ASDF compares file dates by the second).
#[test]
fn an_edit_right_after_a_build_is_built_next() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().canonicalize().unwrap();
    let files = [
        (
            "loopinv.asd",
            "(defsystem \"loopinv\" :components ((:file \"store\"))\n  \
             :in-order-to ((test-op (test-op \"loopinv/tests\"))))\n\n\
             (defsystem \"loopinv/tests\" :depends-on (\"loopinv\" \"fiveam\")\n  \
             :components ((:file \"tests\"))\n  \
             :perform (test-op (o c) (uiop:symbol-call :fiveam :run! :loopinv)))\n",
        ),
        (
            "store.lisp",
            "(defpackage #:loopinv (:use #:cl) (:export #:total))\n(in-package #:loopinv)\n\n\
             (defun total (items) (reduce #'+ items))\n",
        ),
        (
            "tests.lisp",
            "(defpackage #:loopinv-tests (:use #:cl #:fiveam #:loopinv))\n\
             (in-package #:loopinv-tests)\n\n(def-suite :loopinv)\n(in-suite :loopinv)\n\n\
             (test total-empty\n  (is (= 0 (total '()))))\n",
        ),
    ];
    for (name, text) in files {
        std::fs::write(root.join(name), text).unwrap();
    }
    let root_s = root.to_string_lossy().into_owned();
    let mut s = lisp_server(&["--project-root", &root_s]);
    let r = call(&mut s, 1, "asdf-test-system", json!({"system": "loopinv"}));
    assert!(!r.is_error, "{}", r.text);
    assert_eq!(r.structured["summary"]["passed"], 1, "{}", r.text);
    let r = call(
        &mut s,
        2,
        "lisp-edit-form",
        json!({"path": "tests.lisp", "formType": "test", "formName": "total-empty",
               "operation": "insert_after",
               "content": "(test total-two\n  (is (= 5 (total '(2 2)))))"}),
    );
    assert!(!r.is_error, "{}", r.text);
    // The edited source is dated after the fasl compiled from it.
    let r = eval(
        &mut s,
        3,
        "(let ((c (asdf:find-component \"loopinv/tests\" \"tests\")))
           (< (file-write-date (first (asdf:output-files 'asdf:compile-op c)))
              (file-write-date (asdf:component-pathname c))))",
    );
    assert_eq!(r.text, "=> T");
    let r = call(&mut s, 4, "asdf-test-system", json!({"system": "loopinv"}));
    assert!(r.is_error, "{}", r.text);
    assert_eq!(r.structured["summary"]["passed"], 1, "{}", r.text);
    assert_eq!(r.structured["summary"]["failed"], 1, "{}", r.text);
    assert_eq!(
        r.structured["failures"][0]["test"], "LOOPINV-TESTS::TOTAL-TWO",
        "{}",
        r.text
    );
}

/// A FiveAM test run answers briefly: the counts, then each failure at its
/// failed check (`path:line:column` of the `is`), a test a user's macro made
/// at the macro call, and one line counting the dependencies' diagnostics
/// (kept in `diagnostics`); no per-test lines. An unknown test name gets
/// the nearest names; `force` rebuilds the system and its test system.
#[test]
fn a_test_run_answers_briefly_with_each_failure_at_its_check() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().canonicalize().unwrap();
    // A dependency outside the project, with compiler notes and warnings.
    let outside = tempfile::tempdir().unwrap();
    let dep = outside.path().canonicalize().unwrap();
    std::fs::write(
        dep.join("adderdep.asd"),
        "(defsystem \"adderdep\" :components ((:file \"dep\")))\n",
    )
    .unwrap();
    std::fs::write(
        dep.join("dep.lisp"),
        "(defpackage #:adderdep (:use #:cl))\n(in-package #:adderdep)\n\
         (defun twice (x) (declare (optimize speed)) (* 2 x))\n\
         (defun unused-arg (y) 1)\n(defun unused-let () (let ((z 1)) 2))\n",
    )
    .unwrap();
    // Each compilation of the project's files counts itself.
    let counted = "(eval-when (:compile-toplevel)\n  (defvar cl-user::*adder-compiles* 0)\n  \
                   (incf cl-user::*adder-compiles*))\n";
    let files = [
        (
            "adder.asd",
            "(defsystem \"adder\" :depends-on (\"adderdep\") :components ((:file \"adder\"))\n  \
             :in-order-to ((test-op (test-op \"adder/tests\"))))\n\n\
             (defsystem \"adder/tests\" :depends-on (\"adder\" \"fiveam\")\n  \
             :components ((:file \"tests\"))\n  \
             :perform (test-op (o c) (uiop:symbol-call :fiveam :run! :adder)))\n"
                .to_string(),
        ),
        (
            "adder.lisp",
            format!(
                "(defpackage #:adder (:use #:cl) (:export #:add))\n(in-package #:adder)\n\
                 (defun add (a b) (+ a b))\n{counted}"
            ),
        ),
        (
            "tests.lisp",
            // The failing `is` of ADDS is on line 8; GEN-BAD is made on
            // line 14; the commented-out check never counts.
            format!(
                "(defpackage #:adder-tests (:use #:cl #:fiveam #:adder))\n\
                 (in-package #:adder-tests)\n(def-suite :adder)\n(in-suite :adder)\n\n\
                 (test adds\n  (is (= 4 (add 2 2)))\n  (is (= 5 (add 2 2))))\n\n\
                 (defmacro def-add-test (name a b sum)\n  `(test ,name (is (= ,sum (add ,a ,b)))))\n\n\
                 (def-add-test gen-good 1 2 3)\n(def-add-test gen-bad 2 2 5)\n\n\
                 (test commented\n  #| (is (= 5 (add 2 2))) |#\n  (is (= 1 (add 1 0))))\n{counted}"
            ),
        ),
    ];
    for (name, text) in &files {
        std::fs::write(root.join(name), text).unwrap();
    }
    let root_s = root.to_string_lossy().into_owned();
    let mut s = lisp_server(&["--project-root", &root_s]);
    let r = eval(
        &mut s,
        1,
        &format!(
            "(progn (push #p\"{}/\" asdf:*central-registry*) t)",
            dep.display()
        ),
    );
    assert_eq!(r.text, "=> T");

    let r = call(&mut s, 2, "asdf-test-system", json!({"system": "adder"}));
    assert!(r.is_error, "{}", r.text);
    assert_eq!(r.structured["summary"]["passed"], 3, "{}", r.text);
    assert_eq!(r.structured["summary"]["failed"], 2, "{}", r.text);
    let failures = r.structured["failures"].as_array().unwrap();
    let failure = |name: &str| {
        failures
            .iter()
            .find(|f| f["test"] == name)
            .unwrap_or_else(|| panic!("no failure of {name}: {}", r.text))
    };
    let adds = failure("ADDER-TESTS::ADDS");
    assert_eq!(
        (&adds["path"], &adds["line"], &adds["column"], &adds["at"]),
        (&json!("tests.lisp"), &json!(8), &json!(3), &json!("check")),
        "{}",
        r.text
    );
    let made = failure("ADDER-TESTS::GEN-BAD");
    assert_eq!(
        (&made["path"], &made["line"], &made["column"], &made["at"]),
        (
            &json!("tests.lisp"),
            &json!(14),
            &json!(1),
            &json!("macro-call")
        ),
        "{}",
        r.text
    );
    assert!(
        r.text.contains(
            "\ntests.lisp:8:3: FAIL ADDER-TESTS::ADDS (in :ADDER): (ADD 2 2) evaluated to 4 \
             which is not = to 5\n"
        ),
        "{}",
        r.text
    );
    assert!(
        r.text.contains(
            "\ntests.lisp:14:1: FAIL ADDER-TESTS::GEN-BAD (in :ADDER), made by this macro call: \
             (ADD 2 2) evaluated to 4 which is not = to 5\n    form: (= 5 (ADDER:ADD 2 2))"
        ),
        "{}",
        r.text
    );
    // The dependency's diagnostics: counted in one line, listed in full in
    // the structured result.
    let deps = r.structured["diagnostics"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|d| d["path"].as_str().is_some_and(|p| p.ends_with("/dep.lisp")))
        .count();
    assert!(deps >= 1, "{}", r.structured["diagnostics"]);
    let last = r.text.lines().last().unwrap();
    assert!(
        last.starts_with("Not listed: in dependencies ") && last.ends_with("; see `diagnostics`"),
        "{}",
        r.text
    );
    assert!(!r.text.contains("dep.lisp"), "{}", r.text);
    assert!(!r.text.contains("Running test"), "{}", r.text);
    // 10 KB before (every note, every `Running test` line, FiveAM's report).
    assert!(r.text.len() < 600, "{} bytes:\n{}", r.text.len(), r.text);

    // A misspelt test name: the nearest names.
    let r = call(
        &mut s,
        3,
        "asdf-test-system",
        json!({"system": "adder", "test": "gen-bda"}),
    );
    assert!(r.is_error, "{}", r.text);
    assert!(
        r.text.starts_with(
            "Test gen-bda of adder: no such test. No FiveAM test or suite named \"gen-bda\". \
             Did you mean ADDER-TESTS::GEN-BAD"
        ),
        "{}",
        r.text
    );
    // Spelt right, the one test runs.
    let r = call(
        &mut s,
        4,
        "asdf-test-system",
        json!({"system": "adder", "test": "gen-bad"}),
    );
    assert_eq!(r.structured["summary"]["failed"], 1, "{}", r.text);

    // `force` recompiles the system and its test system; without it,
    // nothing changed is compiled again.
    let compiles = |s: &mut common::Server, id| eval(s, id, "cl-user::*adder-compiles*").text;
    assert_eq!(compiles(&mut s, 5), "=> 2");
    let r = call(&mut s, 6, "asdf-test-system", json!({"system": "adder"}));
    assert_eq!(r.structured["summary"]["failed"], 2, "{}", r.text);
    assert_eq!(compiles(&mut s, 7), "=> 2");
    let r = call(
        &mut s,
        8,
        "asdf-test-system",
        json!({"system": "adder", "force": true}),
    );
    assert_eq!(r.structured["summary"]["failed"], 2, "{}", r.text);
    assert_eq!(compiles(&mut s, 9), "=> 4");
}
