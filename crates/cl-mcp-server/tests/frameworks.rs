//! asdf-test-system on every test framework Debian packages (FiveAM, Fiasco,
//! RT, ptester, xlunit), run for real: a suite with a passing and a failing
//! test (`demo-NAME`) and one where all pass (`demo-NAME/green`), from
//! `tests/frameworks/NAME/`. The counts and the outcome come from the
//! framework's own results or its printed summary (README: test
//! frameworks); output no reader recognises is `unknown`, never a success.
//! Rove, Parachute and lisp-unit2 are not packaged: their readers are
//! checked on real transcripts (`lisp/tests/transcripts/`, run by
//! `tests/eval_lisp_side.rs`).

mod common;
mod eval_support;

use std::path::Path;

use eval_support::{call, eval, lisp_server, Reply};
use serde_json::{json, Value};

/// (framework, Debian package, passed and failed in `demo-NAME`, passed in
/// `demo-NAME/green`). FiveAM and Fiasco count checks; RT, ptester and
/// xlunit count what their summaries count (tests, or checks for ptester).
const FRAMEWORKS: &[(&str, &str, i64, i64, i64)] = &[
    ("fiveam", "cl-fiveam", 3, 1, 2),
    ("fiasco", "cl-fiasco", 3, 1, 2),
    ("rt", "cl-rt", 1, 1, 2),
    ("ptester", "cl-ptester", 1, 1, 2),
    ("xlunit", "cl-xlunit", 1, 1, 2),
];

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
    }
}

fn summary_counts(r: &Value) -> (Value, Value, Value) {
    let s = &r["summary"];
    (
        s["framework"].clone(),
        s["passed"].clone(),
        s["failed"].clone(),
    )
}

#[test]
fn every_packaged_framework_reports_its_real_outcome() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().canonicalize().unwrap();
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/frameworks");
    for (name, ..) in FRAMEWORKS {
        copy_dir(&fixtures.join(name), &root.join(name));
    }
    // A test-op that prints nothing any reader knows.
    std::fs::create_dir_all(root.join("silent")).unwrap();
    std::fs::write(
        root.join("silent/demo-silent.asd"),
        "(defsystem \"demo-silent\"\n  :perform (test-op (o c) (format t \"all good, probably~%\")))\n",
    )
    .unwrap();
    // One test action running a FiveAM suite and a Fiasco suite.
    std::fs::create_dir_all(root.join("both")).unwrap();
    std::fs::write(
        root.join("both/demo-both.asd"),
        "(defsystem \"demo-both\" :depends-on (\"demo-fiveam\" \"demo-fiasco\")\n\
         \x20 :perform (test-op (o c)\n\
         \x20   (uiop:symbol-call :fiveam :run! :demo-fiveam)\n\
         \x20   (uiop:symbol-call :fiasco :run-package-tests :package :demo-fiasco)))\n",
    )
    .unwrap();
    let root_s = root.to_string_lossy().into_owned();
    let mut s = lisp_server(&["--project-root", &root_s]);

    let mut id = 1;
    for &(name, package, passed, failed, green) in FRAMEWORKS {
        id += 1;
        let found = eval(
            &mut s,
            id,
            &format!("(and (asdf:find-system \"{name}\" nil) t)"),
        );
        if found.structured["values"] != json!(["T"]) {
            common::skip_missing(
                "every_packaged_framework_reports_its_real_outcome",
                &format!("the {name} test framework (apt-get install {package})"),
            );
            continue;
        }

        id += 1;
        let system = format!("demo-{name}");
        let r = call(&mut s, id, "asdf-test-system", json!({"system": system}));
        let st = &r.structured;
        assert!(r.is_error, "{name}: {}", r.text);
        assert_eq!(st["success"], false, "{name}: {}", r.text);
        assert_eq!(st["outcome"], "failed", "{name}: {}", r.text);
        assert_eq!(
            summary_counts(st),
            (json!(name), json!(passed), json!(failed)),
            "{name}: {}",
            r.text
        );
        assert!(
            r.text.starts_with(&format!(
                "Tests of {system} FAILED ({name}): {passed} passed, {failed} failed"
            )),
            "{name}: {}",
            r.text
        );

        id += 1;
        let system = format!("demo-{name}/green");
        let r = call(&mut s, id, "asdf-test-system", json!({"system": system}));
        let st = &r.structured;
        assert!(!r.is_error, "{name}: {}", r.text);
        assert_eq!(st["success"], true, "{name}: {}", r.text);
        assert_eq!(st["outcome"], "passed", "{name}: {}", r.text);
        assert_eq!(
            summary_counts(st),
            (json!(name), json!(green), json!(0)),
            "{name}: {}",
            r.text
        );
    }

    // Fiasco's failures come from its result objects, with the test, the
    // failed form and what it evaluated to.
    id += 1;
    let fiasco = call(
        &mut s,
        id,
        "asdf-test-system",
        json!({"system": "demo-fiasco"}),
    );
    if fiasco.structured["summary"]["framework"] == "fiasco" {
        let f = &fiasco.structured["failures"];
        assert_eq!(f.as_array().map(Vec::len), Some(1), "{}", fiasco.text);
        assert_eq!(f[0]["test"], "DEMO-FIASCO::SUBTRACTS", "{}", fiasco.text);
        assert_eq!(f[0]["form"], "(= 5 (- 3 2))", "{}", fiasco.text);
        let message = f[0]["message"].as_str().unwrap_or_default();
        assert!(message.contains("(- 3 2) => 1"), "{}", fiasco.text);
        assert_eq!(f[0]["path"], "fiasco/tests.lisp", "{}", fiasco.text);
        assert_eq!(f[0]["line"], 8, "{}", fiasco.text);
    }

    // Both frameworks' results, together.
    if fiasco.structured["summary"]["framework"] == "fiasco" {
        id += 1;
        let r = call(
            &mut s,
            id,
            "asdf-test-system",
            json!({"system": "demo-both"}),
        );
        assert_eq!(r.structured["outcome"], "failed", "{}", r.text);
        assert_eq!(
            summary_counts(&r.structured),
            (json!("fiveam, fiasco"), json!(6), json!(2)),
            "{}",
            r.text
        );
        let tests: Vec<&str> = r.structured["failures"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| f["test"].as_str().unwrap_or_default())
            .collect();
        assert_eq!(
            tests,
            ["DEMO-FIVEAM::SUBTRACTS", "DEMO-FIASCO::SUBTRACTS"],
            "{}",
            r.text
        );
    }

    // Output no framework's reader recognises: unknown, never a success.
    id += 1;
    let r = call(
        &mut s,
        id,
        "asdf-test-system",
        json!({"system": "demo-silent"}),
    );
    assert!(r.is_error, "{}", r.text);
    assert_eq!(r.structured["success"], false, "{}", r.text);
    assert_eq!(r.structured["outcome"], "unknown", "{}", r.text);
    assert!(r.structured.get("summary").is_none(), "{}", r.text);
    assert!(
        r.text
            .starts_with("Tests of demo-silent: outcome UNKNOWN (")
            && r.text.contains("all good, probably"),
        "{}",
        r.text
    );

    // A system that does not exist is an error, not unknown.
    id += 1;
    let r = call(
        &mut s,
        id,
        "asdf-test-system",
        json!({"system": "no-such-system-zz"}),
    );
    assert_eq!(r.structured["outcome"], "error", "{}", r.text);
    assert_eq!(r.structured["success"], false, "{}", r.text);
}

/// A tree copied (a library's sources, for a checkout of it).
fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        if e.file_type().unwrap().is_dir() {
            copy_tree(&e.path(), &to.join(e.file_name()));
        } else {
            std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
        }
    }
}

/// Debian's copy of a library with its own suite, copied to a fresh temp
/// dir that is the project root (the checkout the tests run), or `None`
/// (the test skipped, saying what to install) when it is not installed.
fn library_checkout(test: &str, folder: &str, package: &str) -> Option<tempfile::TempDir> {
    let from = Path::new("/usr/share/common-lisp/source").join(folder);
    if !from.is_dir() {
        common::skip_missing(test, &format!("{folder} (apt-get install {package})"));
        return None;
    }
    let tmp = tempfile::tempdir().unwrap();
    copy_tree(&from, tmp.path());
    Some(tmp)
}

/// One token of `file` changed (a planted bug), a second after the build
/// that compiled it (ASDF compares file dates to the second).
/// The library `folder` copied to a fresh project root (see
/// `library_checkout`), a server there, and the first, clean run of
/// `system`'s tests: passing, its text within 2 KB. `None` when the
/// library is not installed (recorded as skipped).
fn passing_checkout(
    test: &str,
    folder: &str,
    package: &str,
    system: &str,
) -> Option<(tempfile::TempDir, std::path::PathBuf, common::Server, Reply)> {
    let tmp = library_checkout(test, folder, package)?;
    let root = tmp.path().canonicalize().unwrap();
    let mut s = lisp_server(&["--project-root", &root.to_string_lossy()]);
    let r = call(&mut s, 1, "asdf-test-system", json!({ "system": system }));
    assert_eq!(r.structured["outcome"], "passed", "{}", r.text);
    assert!(r.text.len() <= 2048, "{} bytes:\n{}", r.text.len(), r.text);
    Some((tmp, root, s, r))
}

fn plant(file: &Path, old: &str, new: &str) {
    let text = std::fs::read_to_string(file).unwrap();
    assert_eq!(text.matches(old).count(), 1, "{old} in {}", file.display());
    std::thread::sleep(std::time::Duration::from_millis(1100));
    std::fs::write(file, text.replace(old, new)).unwrap();
}

/// cl-base64's own suite (ptester): a test body that signals is a failure
/// with its condition quoted, located at its `with-tests` form, though the
/// compiler printed its notes first; the answers fit a model's budget (a
/// passing run's text within 2 KB, a failing one's within 2 KB and 500 B
/// per failure) and list no compiler note unless asked.
#[test]
fn cl_base64_abort_is_a_quoted_located_failure_in_a_short_answer() {
    let test = "cl_base64_abort_is_a_quoted_located_failure_in_a_short_answer";
    let Some((_tmp, root, mut s, r)) =
        passing_checkout(test, "cl-base64", "cl-base64", "cl-base64")
    else {
        return;
    };
    assert!(!r.text.contains(": note:"), "{}", r.text);
    assert!(r.text.contains(" notes"), "the notes counted: {}", r.text);

    plant(
        &root.join("encode.lisp"),
        "(if (zerop remainder)",
        "(if (plusp remainder)",
    );
    let r = call(
        &mut s,
        2,
        "asdf-test-system",
        json!({"system": "cl-base64"}),
    );
    let st = &r.structured;
    assert!(r.is_error, "{}", r.text);
    assert_eq!(st["outcome"], "failed", "{}", r.text);
    assert_eq!(st["summary"]["failed"], 1, "{}", r.text);
    let f = &st["failures"];
    assert_eq!(f.as_array().map(Vec::len), Some(1), "{}", r.text);
    assert_eq!(f[0]["test"], "cl-base64 tests", "{}", r.text);
    let message = f[0]["message"].as_str().unwrap_or_default();
    assert!(
        message.starts_with("aborted by signalling an uncaught error: The value 8/3"),
        "{}",
        r.text
    );
    assert_eq!(
        (&f[0]["path"], &f[0]["line"]),
        (&json!("tests.lisp"), &json!(91))
    );
    assert!(
        r.text.len() <= 2048 + 500,
        "{} bytes:\n{}",
        r.text.len(),
        r.text
    );
    assert!(
        r.text
            .contains("\ntests.lisp:91:3: FAIL cl-base64 tests: aborted by signalling"),
        "{}",
        r.text
    );
    assert!(!r.text.contains("[stderr]"), "{}", r.text);
    // Notes when asked.
    let r = call(
        &mut s,
        3,
        "asdf-test-system",
        json!({"system": "cl-base64", "force": true, "diagnostics": "all"}),
    );
    assert!(r.text.contains(": note:"), "{}", r.text);
    let r = call(
        &mut s,
        4,
        "asdf-test-system",
        json!({"system": "cl-base64", "diagnostics": "none"}),
    );
    assert!(r.is_error && r.text.contains("diagnostics"), "{}", r.text);
}

/// Alexandria's own suite (RT, run twice): the failed test named once,
/// with RT's expected and actual values, located at its `deftest`; the
/// re-run's 249 redefinition warnings counted, not listed.
#[test]
fn alexandria_rt_failure_is_named_and_located_redefinitions_counted() {
    let test = "alexandria_rt_failure_is_named_and_located_redefinitions_counted";
    let Some((_tmp, root, mut s, r)) =
        passing_checkout(test, "alexandria", "cl-alexandria", "alexandria")
    else {
        return;
    };
    assert!(!r.text.contains("error:"), "{}", r.text);

    plant(
        &root.join("alexandria-1/lists.lisp"),
        "(traverse (car subtree))",
        "(traverse (cdr subtree))",
    );
    let r = call(
        &mut s,
        2,
        "asdf-test-system",
        json!({"system": "alexandria"}),
    );
    let st = &r.structured;
    assert_eq!(st["outcome"], "failed", "{}", r.text);
    let f = &st["failures"];
    assert_eq!(f.as_array().map(Vec::len), Some(1), "{}", r.text);
    assert_eq!(f[0]["test"], "ALEXANDRIA-TESTS::FLATTEN.1", "{}", r.text);
    assert_eq!(
        f[0]["message"], "expected (1 2 3 4 5 6 7), got NIL",
        "{}",
        r.text
    );
    assert_eq!(f[0]["path"], "alexandria-1/tests.lisp", "{}", r.text);
    assert_eq!(f[0]["line"], 887, "{}", r.text);
    assert!(!r.text.contains("Redefining"), "{}", r.text);
    assert!(r.text.contains("249 redefinition warnings"), "{}", r.text);
    assert!(
        r.text.len() <= 2048 + 500,
        "{} bytes:\n{}",
        r.text.len(),
        r.text
    );
}
