//! The project's own ASDF systems are findable by name (issue 9): every
//! `.asd` under the session's project root, from the first call, after a
//! restart and after `fs-set-project-root`; and the user's ASDF
//! configuration is read at every image start, cached core or not.

mod common;
mod eval_support;

use std::path::Path;

use eval_support::{call, eval, lisp_server};
use serde_json::json;

fn write_system(dir: &Path, name: &str, value: &str) {
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(
        dir.join(format!("{name}.asd")),
        format!("(defsystem \"{name}\" :components ((:file \"{name}\")))\n"),
    )
    .unwrap();
    std::fs::write(
        dir.join(format!("{name}.lisp")),
        format!("(defpackage #:{name} (:use #:cl) (:export #:answer))\n(in-package #:{name})\n(defun answer () {value})\n"),
    )
    .unwrap();
}

#[test]
fn project_systems_load_by_name_across_restarts_and_root_moves() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().canonicalize().unwrap();
    let project = root.join("project");
    write_system(&project, "inventory", ":inventory");
    // A nested system (ASDF :tree semantics) and ones that must stay hidden.
    write_system(&project.join("contrib/reports"), "invreports", ":reports");
    write_system(&project.join("node_modules/junk"), "nodejunk", ":junk");
    write_system(&project.join(".hidden"), "hiddenjunk", ":junk");
    let other = root.join("other");
    write_system(&other, "otherproj", ":other");

    let project_s = project.to_string_lossy().into_owned();
    let mut s = lisp_server(&["--project-root", &project_s, "--allow-any-root"]);

    // The first call already finds the project's system.
    let r = call(
        &mut s,
        1,
        "asdf-load-system",
        json!({"system": "inventory"}),
    );
    assert!(!r.is_error, "{}", r.text);
    let r = eval(&mut s, 2, "(inventory:answer)");
    assert_eq!(r.text, "=> :INVENTORY");

    // Listed, marked as the project's; skipped directories stay out.
    let r = call(&mut s, 3, "asdf-list-systems", json!({}));
    let systems = r.structured["systems"].as_array().unwrap();
    let project_names: Vec<&str> = systems
        .iter()
        .filter(|e| e["project"] == json!(true))
        .map(|e| e["name"].as_str().unwrap())
        .collect();
    assert_eq!(project_names, ["inventory", "invreports"], "{}", r.text);
    assert!(
        r.text.contains("inventory (project) (loaded)"),
        "{}",
        r.text
    );
    assert!(
        !r.text.contains("nodejunk") && !r.text.contains("hiddenjunk"),
        "{}",
        r.text
    );

    // From evaluate-lisp too, with no workaround.
    let r = eval(
        &mut s,
        4,
        "(asdf:load-system \"invreports\") (invreports:answer)",
    );
    assert_eq!(r.text, "=> :REPORTS", "{}", r.text);

    // After a restart (all state gone) the project is still findable.
    let r = call(&mut s, 5, "image-restart", json!({}));
    assert!(!r.is_error, "{}", r.text);
    let r = call(
        &mut s,
        6,
        "asdf-load-system",
        json!({"system": "inventory"}),
    );
    assert!(!r.is_error, "{}", r.text);

    // A new .asd appears: found without any call to register it.
    write_system(&project.join("late"), "latecomer", ":late");
    let r = eval(
        &mut s,
        7,
        "(asdf:load-system \"latecomer\") (latecomer:answer)",
    );
    assert_eq!(r.text, "=> :LATE", "{}", r.text);

    // Moving the root makes the new project's systems findable.
    let r = call(
        &mut s,
        8,
        "fs-set-project-root",
        json!({"path": other.to_string_lossy()}),
    );
    assert!(!r.is_error, "{}", r.text);
    let r = call(
        &mut s,
        9,
        "asdf-load-system",
        json!({"system": "otherproj"}),
    );
    assert!(!r.is_error, "{}", r.text);
    let r = eval(&mut s, 10, "(otherproj:answer)");
    assert_eq!(r.text, "=> :OTHER");
}

#[test]
fn the_users_asdf_configuration_is_read_at_every_start() {
    // The shared test core was built without this registry: a cached core
    // must not freeze the configuration of the moment it was saved.
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().canonicalize().unwrap();
    let elsewhere = root.join("registry");
    write_system(&elsewhere, "fromregistry", ":registry");
    let empty = root.join("project");
    std::fs::create_dir_all(&empty).unwrap();
    let cache = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("cl-mcp-server-test-cache");
    let registry = format!(
        "(:source-registry (:tree \"{}/\") :inherit-configuration)",
        elsewhere.display()
    );
    let mut s = common::Server::initialized_with_env(
        &["--project-root", empty.to_str().unwrap()],
        &[
            ("CL_MCP_CACHE_DIR", cache.to_str().unwrap()),
            ("CL_SOURCE_REGISTRY", registry.as_str()),
        ],
    );
    let r = call(
        &mut s,
        1,
        "asdf-load-system",
        json!({"system": "fromregistry"}),
    );
    assert!(!r.is_error, "{}", r.text);
    let r = eval(&mut s, 2, "(fromregistry:answer)");
    assert_eq!(r.text, "=> :REGISTRY");
}

/// Writes a file dated 2 s in the future, so ASDF sees an edit made in the
/// same second as the last compilation as newer than its fasl.
fn write(dir: &Path, name: &str, text: &str) {
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(dir.join(name), text).unwrap();
    let f = std::fs::File::options()
        .write(true)
        .open(dir.join(name))
        .unwrap();
    f.set_modified(std::time::SystemTime::now() + std::time::Duration::from_secs(2))
        .unwrap();
}

/// A failing build keeps every located diagnostic (those from files
/// compiled before the failure and the deferred undefined-function ones),
/// says which component failed and why in one line, drops ASDF's frames,
/// and `success` follows compile-file's failure-p.
#[test]
fn failed_builds_keep_their_diagnostics() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().canonicalize().unwrap();
    write(
        &root,
        "broken.asd",
        "(defsystem \"broken\" :components ((:file \"a\") (:file \"b\")))\n",
    );
    write(
        &root,
        "boom.asd",
        "(defsystem \"boom\" :components ((:file \"boom\")))\n",
    );
    write(
        &root,
        "a.lisp",
        "(defpackage #:broken (:use #:cl))\n(in-package #:broken)\n\
         (defun g (y) (let ((unused 1)) y))\n(defun h (z) (undefined-thing z))\n",
    );
    write(
        &root,
        "b.lisp",
        "(in-package #:broken)\n(defun f (x) (car x x))\n",
    );
    write(
        &root,
        "boom.lisp",
        "(defpackage #:boom (:use #:cl))\n(in-package #:boom)\n\
         (defun explode (n) (error \"kaboom ~D\" n))\n(defun outer () (explode 3))\n(outer)\n",
    );
    let root_s = root.to_string_lossy().into_owned();
    let mut s = lisp_server(&["--project-root", &root_s]);

    let r = call(&mut s, 1, "asdf-load-system", json!({"system": "broken"}));
    match common::lisp() {
        // ASDF ignores COMPILE-FILE's failure on CLISP (UIOP's
        // *COMPILE-FILE-FAILURE-BEHAVIOUR* is :IGNORE there): the full
        // warning is reported, located at its top-level form, and the
        // system loads.
        "clisp" => {
            assert!(!r.is_error, "{}", r.text);
            assert_eq!(r.structured["warningsP"], true, "{}", r.text);
            for expected in [
                "a.lisp:3:1: style-warning: variable UNUSED is not used.",
                "b.lisp:2:1: warning: CAR was called with 2 arguments, but it requires 1 argument.",
            ] {
                assert!(
                    r.text.contains(expected),
                    "missing {expected:?}:\n{}",
                    r.text
                );
            }
        }
        // ECL's compiler makes the wrong argument count an error (and
        // reports neither the unused variable nor the undefined function).
        "ecl" => {
            assert!(r.is_error, "{}", r.text);
            assert_eq!(r.structured["failureP"], true, "{}", r.text);
            let lines: Vec<&str> = r.text.lines().collect();
            assert_eq!(
                lines[1],
                "Failed: compiling broken/b (b.lisp): compile-file reported failure (1 error, 0 warnings in this file)",
                "{}",
                r.text
            );
            assert!(r.text.contains("\nb.lisp:2:1: error: "), "{}", r.text);
            assert!(
                r.text
                    .contains("Wrong number of arguments for function CAR"),
                "{}",
                r.text
            );
            assert_eq!(r.structured["failed"]["component"], "broken/b");
            assert!(!r.text.contains("[Backtrace]"), "{}", r.text);
        }
        _ => {
            assert!(r.is_error, "{}", r.text);
            assert_eq!(r.structured["success"], false, "{}", r.text);
            assert_eq!(r.structured["failureP"], true, "{}", r.text);
            assert_eq!(r.structured["warningsP"], true, "{}", r.text);
            let lines: Vec<&str> = r.text.lines().collect();
            assert!(
                lines[0].starts_with("Loading system broken failed after"),
                "{}",
                r.text
            );
            // Which component failed and why, in one line before the diagnostics.
            assert_eq!(
                lines[1],
                "Failed: compiling broken/b (b.lisp): compile-file reported failure (0 errors, 1 warning in this file)",
                "{}",
                r.text
            );
            assert_eq!(r.structured["failed"]["component"], "broken/b");
            assert_eq!(r.structured["failed"]["operation"], "compile-op");
            assert_eq!(r.structured["failed"]["path"], "b.lisp");
            // The warning of the failing file, the style-warning of the file
            // compiled before it, and the deferred undefined-function warning.
            for expected in [
                "b.lisp:2:14: warning: The function CAR is called with two arguments, but wants exactly one.",
                "a.lisp:3:20: style-warning: The variable UNUSED is defined but never used.",
                "a.lisp:4:14: style-warning: undefined function: BROKEN::UNDEFINED-THING",
            ] {
                assert!(r.text.contains(expected), "missing {expected:?}:\n{}", r.text);
            }
            let diags = r.structured["diagnostics"].as_array().unwrap();
            assert_eq!(diags.len(), 3, "{}", r.text);
            assert!(
                diags
                    .iter()
                    .any(|d| d["severity"] == "warning" && d["path"] == "b.lisp" && d["line"] == 2),
                "{}",
                r.structured
            );
            // ASDF's frames are no backtrace of the user's code.
            assert!(!r.text.contains("ASDF/"), "{}", r.text);
            assert!(!r.text.contains("[Backtrace]"), "{}", r.text);
        }
    }

    // A reader error (missing package) in a component: located.
    write(
        &root,
        "b.lisp",
        "(in-package #:broken)\n(defun f (x) (car x))\n(defun k (x) (nopkg:frob x))\n",
    );
    let r = call(&mut s, 2, "asdf-load-system", json!({"system": "broken"}));
    assert!(r.is_error, "{}", r.text);
    assert!(r.text.contains("\nb.lisp:3:"), "{}", r.text);
    assert!(r.text.contains("NOPKG"), "{}", r.text);
    assert!(
        r.text.contains("Failed: compiling broken/b (b.lisp)"),
        "{}",
        r.text
    );

    // Fixed: style-warnings alone are a success (warningsP, not failureP).
    write(
        &root,
        "b.lisp",
        "(in-package #:broken)\n(defun f (x) (car x))\n",
    );
    let r = call(&mut s, 3, "asdf-load-system", json!({"system": "broken"}));
    assert!(!r.is_error, "{}", r.text);
    assert_eq!(r.structured["success"], true);
    assert_eq!(r.structured["failureP"], false);
    assert!(r.structured.get("failed").is_none(), "{}", r.structured);

    // A forced reload recompiles everything: style-warnings alone are a
    // success (warningsP, not failureP), and the answer is not drowned in
    // redefinition notes.
    let r = call(
        &mut s,
        4,
        "asdf-load-system",
        json!({"system": "broken", "force": true}),
    );
    assert!(!r.is_error, "{}", r.text);
    assert_eq!(r.structured["success"], true);
    assert_eq!(r.structured["failureP"], false, "{}", r.text);
    // ECL reports no style-warnings for this code; CLISP locates them at
    // the top-level form.
    let style = match common::lisp() {
        "ecl" => None,
        "clisp" => Some("\na.lisp:3:1: style-warning"),
        _ => Some("\na.lisp:3:20: style-warning"),
    };
    assert_eq!(r.structured["warningsP"], style.is_some(), "{}", r.text);
    if let Some(style) = style {
        assert!(r.text.contains(style), "{}", r.text);
    }
    assert!(!r.text.to_lowercase().contains("redefin"), "{}", r.text);

    // An error while loading a component: the component, the error in one
    // line, and only the user's frames.
    let r = call(&mut s, 5, "asdf-load-system", json!({"system": "boom"}));
    assert!(r.is_error, "{}", r.text);
    assert!(
        r.text
            .contains("\nFailed: loading boom/boom (boom.lisp): SIMPLE-ERROR: kaboom 3"),
        "{}",
        r.text
    );
    // ECL keeps no frames for natively compiled code at its default debug
    // level; CLISP's compiled frames carry no arguments.
    match common::lisp() {
        "ecl" => {}
        "clisp" => assert!(
            r.text
                .contains("\n0: (BOOM::EXPLODE ...)\n1: (BOOM::OUTER ...)"),
            "{}",
            r.text
        ),
        _ => assert!(r.text.contains("0: (EXPLODE 3)\n1: (OUTER)"), "{}", r.text),
    }
    assert!(
        !r.text.contains("ASDF/") && !r.text.contains("UIOP/"),
        "{}",
        r.text
    );

    // A build stopped by its timeout keeps the diagnostics so far.
    write(
        &root,
        "slow.asd",
        "(defsystem \"slow\" :components ((:file \"slowa\") (:file \"slowb\")))\n",
    );
    write(
        &root,
        "slowa.lisp",
        "(defun slow-a (y) (let ((unused 1)) y))\n",
    );
    write(
        &root,
        "slowb.lisp",
        "(eval-when (:compile-toplevel) (loop (sleep 0.05)))\n",
    );
    let r = call(
        &mut s,
        9,
        "asdf-load-system",
        json!({"system": "slow", "timeoutSeconds": 3}),
    );
    assert!(r.is_error, "{}", r.text);
    assert!(r.text.contains("[TIMEOUT]"), "{}", r.text);
    // ECL reports no style-warning for it; CLISP locates it at the form.
    match common::lisp() {
        "ecl" => {}
        "clisp" => assert!(
            r.text
                .contains("slowa.lisp:1:1: style-warning: variable UNUSED is not used."),
            "{}",
            r.text
        ),
        _ => assert!(
            r.text.contains(
                "slowa.lisp:1:25: style-warning: The variable UNUSED is defined but never used."
            ),
            "{}",
            r.text
        ),
    }

    // lisp-compile-file: a full WARNING is compile-file's failure-p.
    write(&root, "warns.lisp", "(defun warns-here (x) (car x x))\n");
    let r = call(
        &mut s,
        6,
        "lisp-compile-file",
        json!({"path": "warns.lisp"}),
    );
    assert!(r.is_error, "{}", r.text);
    assert_eq!(r.structured["success"], false);
    assert_eq!(r.structured["failureP"], true);
    assert_eq!(r.structured["warningsP"], true);
    // ECL makes the wrong argument count an error; ECL and CLISP locate
    // their notes at the top-level form.
    let located = match common::lisp() {
        "ecl" => "warns.lisp:1:1: error:",
        "clisp" => "warns.lisp:1:1: warning:",
        _ => "warns.lisp:1:23: warning:",
    };
    assert!(r.text.contains(located), "{}", r.text);
    write(
        &root,
        "styles.lisp",
        "(defun only-style (x) (let ((unused 1)) x))\n",
    );
    let r = call(
        &mut s,
        7,
        "lisp-compile-file",
        json!({"path": "styles.lisp"}),
    );
    assert!(!r.is_error, "{}", r.text);
    assert_eq!(r.structured["success"], true);
    assert_eq!(r.structured["failureP"], false);
    // ECL reports no style-warning for an unused variable.
    assert_eq!(
        r.structured["warningsP"],
        common::lisp() != "ecl",
        "{}",
        r.text
    );
    write(&root, "clean.lisp", "(defun clean-one (x) x)\n");
    let r = call(
        &mut s,
        8,
        "lisp-compile-file",
        json!({"path": "clean.lisp"}),
    );
    assert_eq!(r.structured["success"], true);
    assert_eq!(r.structured["failureP"], false);
    assert_eq!(r.structured["warningsP"], false);

    // A syntax error the compiler finds is an error at its form, in the
    // compiler's words (Swank's CLISP backend once turned it into a FORMAT
    // error about the form).
    write(
        &root,
        "syntax.lisp",
        "(defun fine-one (x) (+ x 1))\n\n(defun broken-one (x)\n  (let ((1 x)) x))\n",
    );
    let r = call(
        &mut s,
        9,
        "lisp-compile-file",
        json!({"path": "syntax.lisp"}),
    );
    assert!(r.is_error, "{}", r.text);
    let errors: Vec<&serde_json::Value> = r.structured["diagnostics"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|d| d["severity"] == "error")
        .collect();
    assert_eq!(errors.len(), 1, "{}", r.text);
    assert!(
        [3, 4].contains(&errors[0]["line"].as_i64().unwrap_or(0)),
        "{}",
        r.text
    );
    assert!(
        !errors[0]["message"].as_str().unwrap().contains("FORMAT"),
        "{}",
        r.text
    );
}

/// asdf-test-system: FiveAM's failures per test (name, suite, message with
/// expected and actual, form, location), counts, one named test, and the
/// diagnostics of a rebuild that fails.
#[test]
fn test_runs_report_each_failure_and_run_single_tests() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().canonicalize().unwrap();
    write(
        &root,
        "shop.asd",
        "(defsystem \"shop\" :components ((:file \"shop\"))\n\
         \x20 :in-order-to ((test-op (test-op \"shop/tests\"))))\n\
         (defsystem \"shop/tests\" :depends-on (\"shop\" \"fiveam\")\n\
         \x20 :components ((:module \"t\" :components ((:file \"tests\"))))\n\
         \x20 :perform (test-op (o c) (uiop:symbol-call :fiveam :run! (uiop:find-symbol* :shop-suite :shop-tests))))\n",
    );
    write(
        &root,
        "shop.lisp",
        "(defpackage #:shop (:use #:cl) (:export #:total #:price))\n(in-package #:shop)\n\
         (defun price (item) (getf '(:apple 3 :pear 5) item))\n\
         (defun total (items) (reduce #'+ (mapcar #'price (rest items))))\n",
    );
    write(
        &root.join("t"),
        "tests.lisp",
        "(defpackage #:shop-tests (:use #:cl #:fiveam))\n(in-package #:shop-tests)\n\
         (def-suite shop-suite)\n(in-suite shop-suite)\n\n\
         (test prices\n  (is (= 3 (shop:price :apple)))\n  (is (= 5 (shop:price :pear))))\n\n\
         (test total\n  (is (= 8 (shop:total '(:apple :pear)))))\n\n\
         (test unknown-item\n  (is (= 3 (shop:total '(:apple :plum)))))\n",
    );
    let root_s = root.to_string_lossy().into_owned();
    let mut s = lisp_server(&["--project-root", &root_s]);

    // Before anything is loaded, the test system its .asd defines is
    // listed beside the primary one.
    let r = call(&mut s, 0, "asdf-list-systems", json!({"filter": "shop"}));
    let names: Vec<&str> = r.structured["systems"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["shop", "shop/tests"], "{}", r.text);

    // One named test in a fresh image, before any whole run: the skipped
    // TEST-OP still counts as performed for ASDF (it asserted "failed to
    // mark it done" here). (A server of its own: on CLISP a whole run after
    // it may find FiveAM's suite empty, the trait noted below.)
    {
        let mut fresh = lisp_server(&["--project-root", &root_s]);
        let r = call(
            &mut fresh,
            5,
            "asdf-test-system",
            json!({"system": "shop", "test": "prices"}),
        );
        assert!(!r.is_error, "{}", r.text);
        assert_eq!(r.structured["summary"]["passed"], 2, "{}", r.text);
    }

    let r = call(&mut s, 1, "asdf-test-system", json!({"system": "shop"}));
    assert!(r.is_error, "{}", r.text);
    assert_eq!(r.structured["success"], false);
    assert_eq!(r.structured["summary"]["framework"], "fiveam", "{}", r.text);
    assert_eq!(r.structured["summary"]["passed"], 2, "{}", r.text);
    assert_eq!(r.structured["summary"]["failed"], 2, "{}", r.text);
    let failures = r.structured["failures"].as_array().unwrap();
    assert_eq!(failures.len(), 2, "{}", r.text);
    // FiveAM runs a suite's tests in its hash table's order, which is the
    // implementation's: look them up by name there.
    let failures: Vec<&serde_json::Value> = if common::on_sbcl() {
        failures.iter().collect()
    } else {
        let by_name = |n: &str| {
            failures
                .iter()
                .find(|f| f["test"] == n)
                .unwrap_or_else(|| panic!("no failure of {n}: {}", r.text))
        };
        vec![
            by_name("SHOP-TESTS::TOTAL"),
            by_name("SHOP-TESTS::UNKNOWN-ITEM"),
        ]
    };
    assert_eq!(failures[0]["test"], "SHOP-TESTS::TOTAL");
    assert_eq!(failures[0]["suite"], "SHOP-TESTS::SHOP-SUITE");
    assert_eq!(
        failures[0]["message"],
        "(SHOP:TOTAL '(:APPLE :PEAR)) evaluated to 5 which is not = to 8"
    );
    assert_eq!(failures[0]["form"], "(= 8 (SHOP:TOTAL '(:APPLE :PEAR)))");
    // At the failed check, the `is` on the line after the test's.
    assert_eq!(failures[0]["path"], "t/tests.lisp");
    assert_eq!(failures[0]["line"], 11);
    assert_eq!(failures[0]["column"], 3);
    assert_eq!(failures[0]["at"], "check");
    // A test whose body signals an error is a failure naming the error,
    // at the test.
    assert_eq!(failures[1]["test"], "SHOP-TESTS::UNKNOWN-ITEM");
    assert_eq!(failures[1]["line"], 13);
    assert_eq!(failures[1]["at"], "test");
    let message = failures[1]["message"].as_str().unwrap();
    // CLISP words it "=: NIL is not a number".
    assert!(
        message.contains("NIL") && message.to_uppercase().contains("NUMBER"),
        "{message}"
    );
    // At its check, so no `form:` line follows (ECL lists it last).
    let total = "\nt/tests.lisp:11:3: FAIL SHOP-TESTS::TOTAL (in SHOP-TESTS::SHOP-SUITE): \
                 (SHOP:TOTAL '(:APPLE :PEAR)) evaluated to 5 which is not = to 8";
    assert!(
        r.text.contains(total) && !r.text.contains(&format!("{total}\n    form:")),
        "{}",
        r.text
    );

    // One named test (any case, no package), then a qualified one.
    let r = call(
        &mut s,
        2,
        "asdf-test-system",
        json!({"system": "shop", "test": "prices"}),
    );
    assert!(!r.is_error, "{}", r.text);
    assert_eq!(r.structured["summary"]["passed"], 2, "{}", r.text);
    assert_eq!(r.structured["summary"]["failed"], 0, "{}", r.text);
    assert!(
        r.text.starts_with("Test prices of shop passed"),
        "{}",
        r.text
    );
    assert!(!r.text.contains("TOTAL"), "only that test ran: {}", r.text);
    let r = call(
        &mut s,
        3,
        "asdf-test-system",
        json!({"system": "shop", "test": "shop-tests::total"}),
    );
    assert!(r.is_error, "{}", r.text);
    assert_eq!(r.structured["summary"]["failed"], 1, "{}", r.text);
    assert_eq!(r.structured["failures"].as_array().unwrap().len(), 1);
    let r = call(
        &mut s,
        4,
        "asdf-test-system",
        json!({"system": "shop", "test": "no-such-test"}),
    );
    assert!(r.is_error, "{}", r.text);
    assert!(
        r.text
            .contains("No FiveAM test or suite named \"no-such-test\"")
            && r.text.contains("SHOP-TESTS::PRICES"),
        "{}",
        r.text
    );
    // A system that does not exist: the error says so, first.
    let r = call(
        &mut s,
        41,
        "asdf-test-system",
        json!({"system": "no-such-system-zz"}),
    );
    assert!(r.is_error, "{}", r.text);
    assert!(
        r.text.starts_with("Tests of no-such-system-zz ERROR (")
            && r.text.contains("an error ended the run")
            && !r.text.contains("no known test summary"),
        "{}",
        r.text
    );

    // Fixed code: every test passes.
    write(
        &root,
        "shop.lisp",
        "(defpackage #:shop (:use #:cl) (:export #:total #:price))\n(in-package #:shop)\n\
         (defun price (item) (getf '(:apple 3 :pear 5) item 0))\n\
         (defun total (items) (reduce #'+ (mapcar #'price items)))\n",
    );
    let r = call(&mut s, 5, "asdf-test-system", json!({"system": "shop"}));
    assert!(!r.is_error, "{}", r.text);
    assert_eq!(r.structured["summary"]["failed"], 0, "{}", r.text);
    assert_eq!(r.structured["summary"]["passed"], 4, "{}", r.text);
    assert_eq!(r.structured["failures"], json!([]));

    // A rebuild the test run triggers that fails keeps its diagnostics.
    write(
        &root,
        "shop.lisp",
        "(defpackage #:shop (:use #:cl) (:export #:total #:price))\n(in-package #:shop)\n\
         (defun price (item) (car item item))\n\
         (defun total (items) (reduce #'+ (mapcar #'price items)))\n",
    );
    let r = call(&mut s, 6, "asdf-test-system", json!({"system": "shop"}));
    assert!(r.is_error, "{}", r.text);
    if common::lisp() == "clisp" {
        // ASDF on CLISP goes on after a compile-file failure (its
        // *compile-file-failure-behaviour* is :ignore there): the tests run
        // on the broken code and fail, the warning reported with them. (At
        // times FiveAM then finds its suite empty, "Didn't run
        // anything...huh?": reported as an unknown outcome, never success.)
        assert_eq!(r.structured["success"], false, "{}", r.text);
        let outcome = r.structured["outcome"].as_str().unwrap();
        assert!(outcome == "failed" || outcome == "unknown", "{}", r.text);
        if outcome == "failed" {
            assert_eq!(r.structured["summary"]["failed"], 3, "{}", r.text);
        }
    } else {
        assert!(
            r.text
                .contains("Failed: compiling shop/shop (shop.lisp): compile-file reported failure"),
            "{}",
            r.text
        );
    }
    // ECL's compiler makes the wrong argument count an error, located at
    // the top-level form (CLISP's warning too).
    let located = match common::lisp() {
        "ecl" => "\nshop.lisp:3:1: error:",
        "clisp" => "\nshop.lisp:3:1: warning:",
        _ => "\nshop.lisp:3:21: warning:",
    };
    assert!(r.text.contains(located), "{}", r.text);
    assert_eq!(r.structured["diagnostics"][0]["path"], "shop.lisp");
}

/// A project's nested copies of other systems (vendored sources, a
/// checkout) are the ones ASDF finds, before the installed library; but the
/// implementation's own modules (SBCL's sb-posix, ECL's sb-bsd-sockets) and
/// ASDF's UIOP are never served from the project, wherever a copy lies
/// ("Can't build contribs with ASDF" once).
#[test]
fn nested_copies_shadow_libraries_but_never_the_implementations_modules() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().canonicalize().unwrap();
    let module = match common::lisp() {
        "sbcl" => Some("sb-posix"),
        "ecl" => Some("sb-bsd-sockets"),
        _ => None,
    };
    let mut depends = vec!["\"alexandria\"".to_string()];
    let mut copies = vec!["uiop".to_string()];
    if let Some(m) = module {
        depends.push(format!("\"{m}\""));
        copies.push(m.to_string());
    }
    for m in &copies {
        let copy = root.join("lisp-src/contrib").join(m);
        std::fs::create_dir_all(&copy).unwrap();
        std::fs::write(
            copy.join(format!("{m}.asd")),
            format!("(error \"the project's copy of {m} was loaded\")\n"),
        )
        .unwrap();
    }
    let vendored = root.join("vendor/alexandria");
    std::fs::create_dir_all(&vendored).unwrap();
    std::fs::write(
        vendored.join("alexandria.asd"),
        "(defsystem \"alexandria\" :components ((:file \"alexandria\")))\n",
    )
    .unwrap();
    std::fs::write(
        vendored.join("alexandria.lisp"),
        "(defpackage #:alexandria (:use #:cl) (:export #:ensure-list))\n\
         (in-package #:alexandria)\n(defun ensure-list (x) (list :vendored x))\n",
    )
    .unwrap();
    std::fs::write(
        root.join("app.asd"),
        format!(
            "(defsystem \"app\" :depends-on ({}) :components ((:file \"app\")))\n",
            depends.join(" ")
        ),
    )
    .unwrap();
    std::fs::write(
        root.join("app.lisp"),
        "(defpackage #:app (:use #:cl))\n(in-package #:app)\n\
         (defun answer () (alexandria:ensure-list :app))\n",
    )
    .unwrap();
    let root_s = root.to_string_lossy().into_owned();
    let mut s = lisp_server(&["--project-root", &root_s]);
    let r = call(&mut s, 1, "asdf-load-system", json!({"system": "app"}));
    assert!(!r.is_error, "{}", r.text);
    let r = eval(&mut s, 2, "(app::answer)");
    assert_eq!(r.text, "=> (:VENDORED :APP)", "the checkout's alexandria");
    for m in &copies {
        let r = call(&mut s, 3, "asdf-system-info", json!({"system": m}));
        assert!(!r.is_error, "{}", r.text);
        assert_eq!(r.structured["underProjectRoot"], false, "{}", r.text);
        // UIOP, preloaded, has no source file.
        assert!(!r.text.contains("lisp-src"), "{}", r.text);
    }
    let r = call(&mut s, 4, "asdf-list-systems", json!({}));
    let project: Vec<&str> = r.structured["systems"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["project"] == json!(true))
        .map(|e| e["name"].as_str().unwrap())
        .collect();
    assert_eq!(project, ["alexandria", "app"], "{}", r.text);
    // A nested system nothing else provides is still found by name.
    write_system(&root.join("modules/extra"), "appextra", ":extra");
    let r = call(&mut s, 5, "asdf-load-system", json!({"system": "appextra"}));
    assert!(!r.is_error, "{}", r.text);
}

/// Debian's cl-base64, the installed library.
const INSTALLED_BASE64: &str = "/usr/share/common-lisp/source/cl-base64";

fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let target = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_tree(&e.path(), &target);
        } else {
            std::fs::copy(e.path(), &target).unwrap();
        }
    }
}

/// The bug planted in the checkout, caught by cl-base64's own suite: the
/// decoder shifts each 6-bit group by 5.
const GOOD_SHIFT: &str = "(ash bitstore 6)";
const BAD_SHIFT: &str = "(ash bitstore 5)";

/// A checkout of an installed library under the project root is the copy
/// described, loaded and tested, even after the installed copy was loaded:
/// a planted bug fails the library's own suite, its fix through
/// `fs-write-file` passes it; answers name the `.asd` when it lies outside
/// the root; `lisp-compile-file` of the checkout's `.asd` names its systems.
#[test]
fn a_checkout_under_the_root_is_the_copy_tested() {
    let installed = Path::new(INSTALLED_BASE64);
    assert!(
        installed.join("cl-base64.asd").is_file(),
        "this test needs Debian's cl-base64 (apt-get install cl-base64)"
    );
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().canonicalize().unwrap().join("project");
    std::fs::create_dir_all(&root).unwrap();
    let root_s = root.to_string_lossy().into_owned();
    let mut s = lisp_server(&["--project-root", &root_s, "--allow-any-root"]);

    // Before the checkout exists: the installed copy, and the answer says so.
    let r = call(
        &mut s,
        1,
        "asdf-load-system",
        json!({"system": "cl-base64"}),
    );
    assert!(!r.is_error, "{}", r.text);
    let installed_asd = installed.join("cl-base64.asd");
    let first = r.text.lines().next().unwrap();
    assert!(
        first.contains(&format!(
            "from {} (outside the project root)",
            installed_asd.display()
        )),
        "{}",
        r.text
    );
    assert_eq!(r.structured["sourceFile"], json!(installed_asd));

    // The checkout appears, nested, with a bug its suite catches.
    let checkout = root.join("vendor/cl-base64");
    copy_tree(installed, &checkout);
    let decode = checkout.join("decode.lisp");
    let good = std::fs::read_to_string(&decode).unwrap();
    assert_eq!(good.matches(GOOD_SHIFT).count(), 1);
    std::fs::write(&decode, good.replace(GOOD_SHIFT, BAD_SHIFT)).unwrap();
    let checkout_asd = checkout.join("cl-base64.asd");

    let r = call(
        &mut s,
        2,
        "asdf-system-info",
        json!({"system": "cl-base64"}),
    );
    assert!(!r.is_error, "{}", r.text);
    assert_eq!(
        r.structured["sourceFile"],
        json!(checkout_asd),
        "{}",
        r.text
    );
    assert_eq!(r.structured["underProjectRoot"], true);
    assert!(
        r.text
            .contains("vendor/cl-base64/cl-base64.asd (the project's)"),
        "{}",
        r.text
    );

    let r = call(
        &mut s,
        3,
        "lisp-compile-file",
        json!({"path": "vendor/cl-base64/cl-base64.asd"}),
    );
    assert!(!r.is_error, "{}", r.text);
    assert!(
        r.text
            .lines()
            .next()
            .unwrap()
            .contains("defines systems cl-base64, cl-base64/test"),
        "{}",
        r.text
    );

    let r = call(
        &mut s,
        4,
        "asdf-test-system",
        json!({"system": "cl-base64"}),
    );
    assert!(
        r.is_error,
        "the checkout's bug must fail its suite: {}",
        r.text
    );
    assert_eq!(
        r.structured["sourceFile"],
        json!(checkout_asd),
        "{}",
        r.text
    );
    assert!(
        !r.text.lines().next().unwrap().contains("outside"),
        "{}",
        r.text
    );

    // Fixed through the server: the checkout passes.
    let r = call(
        &mut s,
        5,
        "fs-write-file",
        json!({"path": "vendor/cl-base64/decode.lisp", "content": good}),
    );
    assert!(!r.is_error, "{}", r.text);
    let r = call(
        &mut s,
        6,
        "asdf-test-system",
        json!({"system": "cl-base64"}),
    );
    assert_eq!(r.structured["sourceFile"], json!(checkout_asd));
    // On ECL, cl-base64's own suite aborts with an internal error in the
    // installed copy too: only the copy tested is checked there.
    if common::lisp() != "ecl" {
        assert!(!r.is_error, "{}", r.text);
        assert_eq!(r.structured["outcome"], "passed", "{}", r.text);
    }

    // A root without the checkout: the installed copy again, said so.
    let elsewhere = tmp.path().canonicalize().unwrap().join("elsewhere");
    std::fs::create_dir_all(&elsewhere).unwrap();
    let r = call(
        &mut s,
        7,
        "fs-set-project-root",
        json!({"path": elsewhere.to_string_lossy()}),
    );
    assert!(!r.is_error, "{}", r.text);
    let r = call(
        &mut s,
        8,
        "asdf-system-info",
        json!({"system": "cl-base64"}),
    );
    assert_eq!(
        r.structured["sourceFile"],
        json!(installed_asd),
        "{}",
        r.text
    );
    assert_eq!(r.structured["underProjectRoot"], false);
}

/// A name defined twice under the root: the shallower `.asd` wins, then the
/// first in path order, and answers say which file was chosen. The walk is
/// `clgrep-search`'s: `.gitignore`d folders and hidden ones stay out, but
/// for Qlot's `.qlot/`.
#[test]
fn the_shallower_definition_wins_and_answers_say_so() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().canonicalize().unwrap();
    write_system(&root.join("a/b/dup"), "dup", ":deep");
    write_system(&root.join("z/dup"), "dup", ":shallow");
    write_system(&root.join("n/twin"), "twin", ":n");
    write_system(&root.join("m/twin"), "twin", ":m");
    write_system(&root.join("ignored/ign"), "ign", ":ignored");
    write_system(&root.join(".hidden/hid"), "hid", ":hidden");
    write_system(
        &root.join(".qlot/local-projects/pinned"),
        "pinned",
        ":pinned",
    );
    std::fs::write(root.join(".gitignore"), "ignored/\n").unwrap();
    let root_s = root.to_string_lossy().into_owned();
    let mut s = lisp_server(&["--project-root", &root_s]);

    let r = call(&mut s, 1, "asdf-load-system", json!({"system": "dup"}));
    assert!(!r.is_error, "{}", r.text);
    assert!(
        r.text
            .lines()
            .next()
            .unwrap()
            .ends_with("from z/dup/dup.asd (the shallowest of the .asd files under the root defining it; also in a/b/dup/dup.asd)"),
        "{}",
        r.text
    );
    let r = eval(&mut s, 2, "(dup:answer)");
    assert_eq!(r.text, "=> :SHALLOW");
    let r = call(&mut s, 3, "asdf-load-system", json!({"system": "twin"}));
    assert!(!r.is_error, "{}", r.text);
    let r = eval(&mut s, 4, "(twin:answer)");
    assert_eq!(r.text, "=> :M");
    let r = call(&mut s, 5, "asdf-system-info", json!({"system": "twin"}));
    assert_eq!(r.structured["alsoDefinedIn"], json!(["n/twin/twin.asd"]));
    assert!(
        r.text
            .contains("m/twin/twin.asd (the project's: the shallowest"),
        "{}",
        r.text
    );

    let r = call(&mut s, 6, "asdf-list-systems", json!({}));
    let project: Vec<&str> = r.structured["systems"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["project"] == json!(true))
        .map(|e| e["name"].as_str().unwrap())
        .collect();
    assert_eq!(project, ["dup", "pinned", "twin"], "{}", r.text);
}

/// A root too big to walk (a home directory): the walk stops at its limit
/// and the next answer says so, once.
#[test]
fn a_walk_past_its_limit_stops_and_says_so_once() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().canonicalize().unwrap();
    let many = root.join("aaa-many");
    std::fs::create_dir_all(&many).unwrap();
    for i in 0..20_001 {
        std::fs::File::create(many.join(format!("f{i:05}"))).unwrap();
    }
    write_system(&root.join("zzz/late"), "late", ":late");
    let root_s = root.to_string_lossy().into_owned();
    let mut s = lisp_server(&["--project-root", &root_s]);
    let r = call(&mut s, 1, "asdf-list-systems", json!({"filter": "late"}));
    assert!(
        r.text.starts_with("[NOTICE] The project root ")
            && r.text.contains("holds more than 20000 files and folders")
            && r.text.contains("stopped there"),
        "{}",
        r.text
    );
    assert!(
        !r.text.contains("late (project)"),
        "past the limit: {}",
        r.text
    );
    let r = call(&mut s, 2, "asdf-list-systems", json!({"filter": "late"}));
    assert!(!r.text.contains("[NOTICE]"), "said once: {}", r.text);
}

/// In a root of many folders (checked for changes at most every 2 s), an
/// `.asd` written through `fs-write-file` is found by the very next call.
#[test]
fn an_asd_written_by_the_server_is_found_at_once_in_a_big_root() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().canonicalize().unwrap();
    for i in 0..200 {
        std::fs::create_dir_all(root.join(format!("d{i:03}"))).unwrap();
    }
    write_system(&root, "first", ":first");
    let root_s = root.to_string_lossy().into_owned();
    let mut s = lisp_server(&["--project-root", &root_s]);
    let r = call(&mut s, 1, "asdf-load-system", json!({"system": "first"}));
    assert!(!r.is_error, "{}", r.text);
    for (id, (path, content)) in [
        (
            "new/fresh.asd",
            "(defsystem \"fresh\" :components ((:file \"fresh\")))\n",
        ),
        (
            "new/fresh.lisp",
            "(defpackage #:fresh (:use #:cl))\n(in-package #:fresh)\n(defun answer () :fresh)\n",
        ),
    ]
    .into_iter()
    .enumerate()
    {
        let r = call(
            &mut s,
            2 + id as i64,
            "fs-write-file",
            json!({"path": path, "content": content}),
        );
        assert!(!r.is_error, "{}", r.text);
    }
    let r = call(&mut s, 4, "asdf-load-system", json!({"system": "fresh"}));
    assert!(!r.is_error, "{}", r.text);
    assert!(
        !r.text.lines().next().unwrap().contains("outside"),
        "{}",
        r.text
    );
}
