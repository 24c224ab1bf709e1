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

use eval_support::{call, eval, lisp_server};
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
