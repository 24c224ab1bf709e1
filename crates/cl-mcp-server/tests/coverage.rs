//! `asdf-test-system {coverage: true}` (SBCL's sb-cover) on a real FiveAM
//! project whose tests leave a function uncalled and a branch untaken:
//! exactly those lines named, each file's share, the HTML report read back
//! as resources (index and a file's page), the instrumentation gone after
//! the next plain run, and coverage refused with `lisps`.

mod common;
mod eval_support;

use std::path::Path;

use eval_support::{call, eval, lisp_server};
use serde_json::{json, Value};

const FILES: &[(&str, &str)] = &[
    (
        "calc.asd",
        "(defsystem \"calc\"\n  :components ((:module \"src\" :components ((:file \"calc\"))))\n  \
         :in-order-to ((test-op (test-op \"calc/tests\"))))\n\n\
         (defsystem \"calc/tests\"\n  :depends-on (\"calc\" \"fiveam\")\n  \
         :components ((:module \"tests\" :components ((:file \"calc-tests\"))))\n  \
         :perform (test-op (o c) (uiop:symbol-call :fiveam :run! :calc)))\n",
    ),
    // Line 8's IF only ever goes one way, line 9 never runs, nor do the
    // body lines 13-14 of NEVER-CALLED.
    (
        "src/calc.lisp",
        "(defpackage #:calc (:use #:cl) (:export #:double #:classify #:never-called))\n\
         (in-package #:calc)\n\
         \n\
         (defun double (x)\n\
         \x20 (* 2 x))\n\
         \n\
         (defun classify (x)\n\
         \x20 (if (minusp x)\n\
         \x20     (list :negative (- x))\n\
         \x20     (list :non-negative x)))\n\
         \n\
         (defun never-called (x)\n\
         \x20 (let ((y (+ x 1)))\n\
         \x20   (* y y)))\n",
    ),
    (
        "tests/calc-tests.lisp",
        "(defpackage #:calc-tests (:use #:cl #:fiveam))\n(in-package #:calc-tests)\n\n\
         (def-suite :calc)\n(in-suite :calc)\n\n\
         (test doubles\n  (is (= 4 (calc:double 2))))\n\n\
         (test classifies\n  (is (equal '(:non-negative 3) (calc:classify 3))))\n",
    ),
];

fn read_resource(s: &mut common::Server, id: i64, uri: &str) -> Value {
    s.request(json!({"jsonrpc":"2.0","id":id,"method":"resources/read","params":{"uri":uri}}))
}

/// Whether `calc:double` is compiled with coverage marks (sb-cover's own
/// lookup), and the global coverage policy, as `=> T 1`-style text.
const INSTRUMENTED: &str = "(values (and (find-package \"SB-COVER\") \
     (funcall (find-symbol \"%FIND-COVERAGE-MAP\" \"SB-COVER\") 'calc:double) t) \
     (sb-c::policy-quality sb-c::*policy* 'sb-c:store-coverage-data))";

#[test]
fn coverage_names_the_lines_the_tests_never_ran() {
    if !common::on_sbcl() {
        common::skip_known_gap("coverage", "coverage is SBCL's sb-cover");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().canonicalize().unwrap();
    for (file, text) in FILES {
        let p = root.join(file);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }
    let root_s = root.to_string_lossy().into_owned();
    let mut s = lisp_server(&["--project-root", &root_s]);
    let policy_before = eval(
        &mut s,
        1,
        "(sb-c::policy-quality sb-c::*policy* 'sb-c:store-coverage-data)",
    )
    .text;

    let r = call(
        &mut s,
        2,
        "asdf-test-system",
        json!({"system": "calc", "coverage": true}),
    );
    assert!(!r.is_error, "{}", r.text);
    let c = &r.structured["coverage"];
    let files = c["files"].as_array().unwrap();
    let paths: Vec<&str> = files.iter().map(|f| f["path"].as_str().unwrap()).collect();
    assert_eq!(
        paths,
        ["src/calc.lisp", "tests/calc-tests.lisp"],
        "{}",
        r.text
    );
    let (src, tests) = (&files[0], &files[1]);
    assert_eq!(
        src["uncovered"],
        json!([
            {"line": 8, "endLine": 8, "kind": "one-branch"},
            {"line": 9, "endLine": 9, "kind": "not-executed"},
            {"line": 13, "endLine": 14, "kind": "not-executed"},
        ]),
        "{}",
        r.text
    );
    assert_eq!(src["moreUncovered"], 0);
    let share = |f: &Value, k: &str| (f[k]["covered"].as_i64(), f[k]["total"].as_i64());
    let (covered, total) = share(src, "expressions");
    assert!(
        covered.unwrap() > 0 && covered < total,
        "a share between none and all: {}",
        r.text
    );
    assert_eq!(share(src, "branches"), (Some(1), Some(2)), "{}", r.text);
    assert_eq!(src["branches"]["percent"], 50.0);
    assert_eq!(tests["expressions"]["percent"], 100.0, "{}", r.text);
    assert_eq!(tests["uncovered"], json!([]));
    for line in [
        "\n  src/calc.lisp:8: a branch taken one way only",
        "\n  src/calc.lisp:9: not executed",
        "\n  src/calc.lisp:13-14: not executed",
        "\n  tests/calc-tests.lisp: expressions 6/6 (100.0%), branches none",
        "report lisp://coverage/calc/index.html (",
    ] {
        assert!(r.text.contains(line), "{line:?} in {}", r.text);
    }
    let report = Path::new(c["reportPath"].as_str().unwrap()).to_path_buf();
    assert!(report.is_file(), "{}", report.display());
    assert!(r.text.contains(&report.display().to_string()), "{}", r.text);
    // Until the next load the code stays as loaded; the policy is as it was.
    assert_eq!(
        eval(&mut s, 3, INSTRUMENTED).text,
        format!("=> T\n=> {}", &policy_before[3..])
    );

    // The report as resources: listed, its template, the index, a page.
    let list = s.request(json!({"jsonrpc":"2.0","id":4,"method":"resources/list"}));
    let listed = list["result"]["resources"].as_array().unwrap();
    assert!(
        listed
            .iter()
            .any(|e| e["uri"] == "lisp://coverage/calc/index.html" && e["mimeType"] == "text/html"),
        "{list}"
    );
    let templates = s.request(json!({"jsonrpc":"2.0","id":5,"method":"resources/templates/list"}));
    assert!(
        templates
            .to_string()
            .contains("lisp://coverage/{system}/{page}"),
        "{templates}"
    );
    let index = read_resource(&mut s, 6, "lisp://coverage/calc/index.html");
    let page = &index["result"]["contents"][0];
    assert_eq!(page["mimeType"], "text/html", "{index}");
    let html = page["text"].as_str().unwrap();
    assert!(html.contains("<table class='summary'>"), "{html}");
    // The row naming calc.lisp links to its page, which names the file.
    let at = html
        .find(">calc.lisp</a>")
        .unwrap_or_else(|| panic!("{html}"));
    let href_start = html[..at].rfind("href='").unwrap() + "href='".len();
    let link = &html[href_start..at - 1];
    assert!(link.ends_with(".html"), "{link}");
    let page = read_resource(&mut s, 7, &format!("lisp://coverage/calc/{link}"));
    let text = page["result"]["contents"][0]["text"].as_str().unwrap();
    assert!(
        text.contains(&format!(
            "Coverage report: {}",
            root.join("src/calc.lisp").display()
        )),
        "{page}"
    );
    let bad = read_resource(&mut s, 8, "lisp://coverage/calc/..%2Fcover-index.html");
    assert!(bad.get("error").is_some(), "{bad}");
    let none = read_resource(&mut s, 9, "lisp://coverage/nosuch/index.html");
    assert!(none["error"]["message"].as_str().is_some(), "{none}");

    // The next plain run builds normally and says nothing of coverage.
    let r = call(&mut s, 10, "asdf-test-system", json!({"system": "calc"}));
    assert!(!r.is_error, "{}", r.text);
    assert!(r.structured.get("coverage").is_none(), "{}", r.structured);
    assert!(!r.text.contains("Coverage"), "{}", r.text);
    assert_eq!(
        eval(&mut s, 11, INSTRUMENTED).text,
        format!("=> NIL\n=> {}", &policy_before[3..])
    );

    // One image measures: not with a matrix of Lisps.
    let r = call(
        &mut s,
        12,
        "asdf-test-system",
        json!({"system": "calc", "coverage": true, "lisps": ["sbcl"]}),
    );
    assert!(
        r.is_error && r.text.contains("cannot go with `lisps`"),
        "{}",
        r.text
    );
    drop(s);
    let _ = std::fs::remove_dir_all(report.parent().unwrap().parent().unwrap());
}
