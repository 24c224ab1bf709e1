//! The debugger that waits through the built binary against a
//! real SBCL: `evaluate-lisp` with `debug: true`, the `debug` tools, fixing
//! a function while its error waits, nested levels, break, idle abort.

mod common;
mod eval_support;

use std::time::Duration;

use eval_support::{call, eval, eval_with, lisp_server, UserLisp};
use serde_json::json;

const ORDERS: &str = r#"(defpackage :dbg-demo (:use :cl))
(in-package :dbg-demo)

(declaim (optimize (debug 3)))

(defun parse-qty (s)
  (let ((n (parse-integer s :junk-allowed t)))
    (* n 2)))

(defun line-total (line)
  (parse-qty (second line)))

(defun order-total (lines)
  (reduce #'+ (mapcar #'line-total lines)))

(defun checked-qty (s)
  (let ((n (parse-integer s :junk-allowed t)))
    (check-type n integer)
    (* n 2)))
"#;

fn frame_index(structured: &serde_json::Value, name: &str) -> u64 {
    structured["debugger"]["frames"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["frame"].as_str().unwrap().contains(name))
        .unwrap_or_else(|| panic!("no frame {name} in {structured}"))["index"]
        .as_u64()
        .unwrap()
}

#[test]
fn fix_the_function_and_restart_its_frame() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().canonicalize().unwrap();
    std::fs::write(root.join("orders.lisp"), ORDERS).unwrap();
    let root_s = root.to_string_lossy().into_owned();
    let mut s = lisp_server(&["--project-root", &root_s]);
    let r = call(
        &mut s,
        1,
        "lisp-compile-file",
        json!({"path": "orders.lisp"}),
    );
    assert!(!r.is_error, "{}", r.text);

    // An error three frames deep waits in the debugger.
    let r = eval_with(
        &mut s,
        2,
        "(dbg-demo::order-total '((\"a\" \"3\") (\"b\" \"x\")))",
        json!({"debug": true}),
    );
    assert!(r.is_error);
    assert!(r.text.starts_with("[DEBUGGER level 1]"), "{}", r.text);
    // SBCL: every action is offered.
    assert!(
        r.text
            .ends_with("action abort, continue, return, restart, step, next, out)."),
        "{}",
        r.text
    );
    assert!(
        r.text.contains("The value NIL is not of type INTEGER"),
        "{}",
        r.text
    );
    assert!(
        r.text.contains("orders.lisp:"),
        "frames carry source locations: {}",
        r.text
    );
    let d = &r.structured["debugger"];
    assert_eq!(d["level"], 1);
    assert!(d["restarts"]
        .as_array()
        .unwrap()
        .iter()
        .any(|x| x["name"] == "ABORT"));
    let frame = frame_index(&r.structured, "PARSE-QTY");
    let line_frame = frame_index(&r.structured, "LINE-TOTAL");
    // A frame's local, inspected and drilled into.
    let i = call(
        &mut s,
        40,
        "inspect-object",
        json!({"frame": line_frame, "code": "line"}),
    );
    assert!(!i.is_error, "{}", i.text);
    let values: Vec<&str> = i.structured["parts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["value"].as_str().unwrap())
        .collect();
    assert!(values.contains(&"\"x\""), "{}", i.text);
    let i = call(&mut s, 41, "inspect-object", json!({"part": 0}));
    assert!(!i.is_error, "{}", i.text);
    let i = call(&mut s, 42, "inspect-object", json!({"back": true}));
    assert!(!i.is_error, "{}", i.text);
    let e = call(
        &mut s,
        43,
        "inspect-object",
        json!({"frame": line_frame, "code": "no-such-local"}),
    );
    assert!(e.is_error, "{}", e.text);
    assert!(r.text.find("PARSE-QTY").unwrap() < r.text.find("LINE-TOTAL").unwrap());
    assert!(r.text.find("LINE-TOTAL").unwrap() < r.text.find("ORDER-TOTAL").unwrap());

    // The session's turn is free: another evaluation runs meanwhile.
    let r = eval(&mut s, 3, "(+ 1 2)");
    assert_eq!(r.text, "=> 3");
    let r = call(&mut s, 4, "image-info", json!({}));
    assert!(r.text.contains("Pending debugger"), "{}", r.text);

    // The failing frame's locals show the bad value.
    let r = call(&mut s, 5, "debugger-frame", json!({"frame": frame}));
    assert!(!r.is_error, "{}", r.text);
    let locals = r.structured["locals"].as_array().unwrap();
    assert!(
        locals
            .iter()
            .any(|l| l["name"] == "S" && l["value"] == "\"x\""),
        "{}",
        r.text
    );
    assert!(
        locals
            .iter()
            .any(|l| l["name"] == "N" && l["value"] == "NIL"),
        "{}",
        r.text
    );
    assert!(r.structured["path"]
        .as_str()
        .unwrap()
        .ends_with("orders.lisp"));
    assert!(
        r.structured["form"].as_str().unwrap().contains('*'),
        "{}",
        r.text
    );

    // Evaluation in the frame sees its lexical variables.
    let r = call(
        &mut s,
        6,
        "debugger-frame",
        json!({"frame": frame, "code": "(format t \"seen ~a\" s) (list s n)"}),
    );
    assert!(!r.is_error, "{}", r.text);
    assert_eq!(r.structured["values"], json!(["(\"x\" NIL)"]));
    assert_eq!(r.structured["stdout"], "seen x");

    // Fix the function in its file and compile it.
    let r = call(
        &mut s,
        7,
        "lisp-edit-form",
        json!({"path": "orders.lisp", "formType": "defun", "formName": "parse-qty",
               "operation": "replace",
               "content": "(defun parse-qty (s)\n  (let ((n (parse-integer s :junk-allowed t)))\n    (* (or n 0) 2)))"}),
    );
    assert!(!r.is_error, "{}", r.text);
    let r = call(
        &mut s,
        8,
        "lisp-compile-file",
        json!({"path": "orders.lisp"}),
    );
    assert!(!r.is_error, "{}", r.text);

    // Restarting the frame runs the new definition; the suspended
    // evaluation finishes with the corrected value.
    let r = call(
        &mut s,
        9,
        "debugger-restart",
        json!({"action": "restart", "frame": frame}),
    );
    assert!(!r.is_error, "{}", r.text);
    assert_eq!(r.text, "=> 6");
    let r = call(&mut s, 10, "debugger-backtrace", json!({}));
    assert!(
        r.is_error && r.text.contains("no pending debugger"),
        "{}",
        r.text
    );

    // store-value with a value form.
    let r = eval_with(
        &mut s,
        11,
        "(* 10 (dbg-demo::checked-qty \"?\"))",
        json!({"debug": true}),
    );
    assert!(r.text.starts_with("[DEBUGGER level 1]"), "{}", r.text);
    let r = call(
        &mut s,
        12,
        "debugger-restart",
        json!({"restart": "store-value", "values": ["(+ 1 2)"]}),
    );
    assert_eq!(r.text, "=> 60", "{}", r.structured);

    // Paging the backtrace.
    let r = eval_with(
        &mut s,
        13,
        "(dbg-demo::order-total '((\"b\" . \"x\")))",
        json!({"debug": true}),
    );
    assert!(r.text.starts_with("[DEBUGGER level 1]"), "{}", r.text);
    // `start` is a frame number, as listed (they have gaps where machinery
    // frames are left out; it counted listed frames before).
    let all = call(&mut s, 141, "debugger-backtrace", json!({}));
    let second = all.structured["frames"][1]["index"].as_i64().unwrap();
    let r = call(
        &mut s,
        14,
        "debugger-backtrace",
        json!({"start": second, "count": 1}),
    );
    assert!(!r.is_error, "{}", r.text);
    assert_eq!(r.structured["frames"].as_array().unwrap().len(), 1);
    assert_eq!(r.structured["frames"][0]["index"], second, "{}", r.text);
    assert!(
        r.structured["totalFrames"].as_i64().unwrap() >= 2,
        "{}",
        r.text
    );
    assert!(
        r.text
            .contains(&format!("debugger-backtrace with start {}", second + 1)),
        "{}",
        r.text
    );
    let r = call(&mut s, 15, "debugger-restart", json!({"action": "abort"}));
    assert!(r.is_error);
    assert!(r.text.contains("[ERROR] ABORT"), "{}", r.text);
}

#[test]
fn nested_levels_break_and_continue() {
    let mut s = lisp_server(&[]);
    let r = eval_with(
        &mut s,
        1,
        "(list :outer (error \"outer ~a\" 1))",
        json!({"debug": true}),
    );
    assert!(r.text.starts_with("[DEBUGGER level 1]"), "{}", r.text);
    assert!(r.text.contains("outer 1"), "{}", r.text);
    let id = r.structured["debugger"]["debugger"].as_u64().unwrap();

    // An error in code evaluated in a frame enters level 2.
    let r = call(
        &mut s,
        2,
        "debugger-frame",
        json!({"debugger": id, "code": "(error \"inner\")"}),
    );
    assert!(r.is_error);
    assert_eq!(r.structured["nested"]["level"], 2, "{}", r.text);
    assert!(r.text.contains("inner"), "{}", r.text);
    // Its first restart says where it goes in the tools' words, not Swank's
    // ("Return to sldb level 1.", SLDB being Emacs's debugger buffer).
    let first = &r.structured["nested"]["restarts"][0];
    assert_eq!(first["name"], "ABORT", "{}", r.text);
    assert_eq!(
        first["description"], "Leave this error and return to debugger level 1.",
        "{}",
        r.text
    );
    assert!(!r.text.contains("sldb"), "{}", r.text);
    // The debugger lists no frame of the user's (the error is the
    // evaluated form's own): the code ran in the debugger's context, not
    // in a frame of SBCL's (debugger_parity_on_sbcl shows code evaluated
    // in a frame said in words).
    assert!(
        !r.text.contains("COMPILED-FRAME") && r.text.starts_with("[No frame]"),
        "{}",
        r.text
    );

    // ABORT at level 2 returns to level 1.
    let r = call(&mut s, 3, "debugger-restart", json!({"restart": "ABORT"}));
    assert!(r.text.starts_with("[DEBUGGER level 1]"), "{}", r.text);
    assert!(r.text.contains("outer 1"), "{}", r.text);

    // use-value on a plain error has no such restart: said, still pending.
    let r = call(
        &mut s,
        4,
        "debugger-restart",
        json!({"restart": "use-value"}),
    );
    assert!(r.is_error && r.text.contains("still pending"), "{}", r.text);

    let r = call(&mut s, 5, "debugger-restart", json!({"action": "abort"}));
    assert!(r.text.contains("ABORT"), "{}", r.text);

    // use-value with a value form.
    let r = eval_with(
        &mut s,
        51,
        "(* 2 (restart-case (error \"need a number\") (use-value (v) v)))",
        json!({"debug": true}),
    );
    assert!(r.text.starts_with("[DEBUGGER level 1]"), "{}", r.text);
    // Without its value: said, and still pending at level 1 (invoking it
    // opened a level 2 that said only "invalid number of arguments: 0").
    let r = call(
        &mut s,
        53,
        "debugger-restart",
        json!({"restart": "USE-VALUE"}),
    );
    assert!(r.is_error, "{}", r.text);
    assert!(
        r.text.contains("Restart USE-VALUE takes 1 value")
            && r.text.contains("not 0")
            && r.text.contains("still pending"),
        "{}",
        r.text
    );
    let r = call(
        &mut s,
        52,
        "debugger-restart",
        json!({"restart": "USE-VALUE", "values": ["(+ 20 1)"]}),
    );
    assert_eq!(r.text, "=> 42");

    // break waits; continue resumes the evaluation after it.
    let r = eval_with(
        &mut s,
        6,
        "(progn (princ \"before \") (break \"pause ~a\" 7) (princ \"after\") :done)",
        json!({"debug": true}),
    );
    assert!(r.text.starts_with("[DEBUGGER level 1]"), "{}", r.text);
    assert!(r.text.contains("pause 7"), "{}", r.text);
    // No frame of the user's code between BREAK and the evaluation: said
    // so, not an empty list.
    assert!(
        r.text.contains("[Frames]\n(none of the user's code"),
        "{}",
        r.text
    );
    let r = call(&mut s, 7, "debugger-restart", json!({"action": "continue"}));
    assert!(!r.is_error, "{}", r.text);
    assert_eq!(r.text, "before after\n=> :DONE");

    // Without debug, errors unwind as before.
    let r = eval(&mut s, 8, "(error \"plain\")");
    assert!(r.text.starts_with("[ERROR]"), "{}", r.text);
}

/// Code run in a frame keeps its warnings and output to itself; what the
/// evaluation printed before the debugger comes with it; bad frame
/// numbers, unreadable code and bad restart numbers are said plainly
/// without a nested level; a traced call left by an abort is not "still
/// running".
#[test]
fn frame_code_keeps_its_own_warnings_and_bad_input_is_said_plainly() {
    let mut s = lisp_server(&[]);
    let r = eval(
        &mut s,
        1,
        "(defun dbg-w (x) (declare (optimize (debug 2))) \
         (let ((y (* x 2))) (princ \"before\") (break) (+ y 1)))",
    );
    assert!(!r.is_error, "{}", r.text);
    let r = eval_with(&mut s, 2, "(dbg-w 5)", json!({"debug": true}));
    assert!(r.text.starts_with("[DEBUGGER level 1]"), "{}", r.text);
    assert_eq!(r.structured["stdout"], "before", "{}", r.structured);
    assert!(r.text.ends_with("[stdout so far]\nbefore"), "{}", r.text);
    assert_eq!(r.structured["package"], "COMMON-LISP-USER");
    let frame = frame_index(&r.structured, "DBG-W");

    let r = call(
        &mut s,
        3,
        "debugger-frame",
        json!({"frame": frame, "code": "(let ((z (lambda () (undefined-fn-qq)))) (princ :in) (list x y))"}),
    );
    assert!(!r.is_error, "{}", r.text);
    assert_eq!(r.structured["values"], json!(["(5 10)"]), "{}", r.text);
    assert_eq!(r.structured["stdout"], "IN");
    assert!(
        r.structured["warnings"].as_array().is_some_and(|w| w
            .iter()
            .any(|w| w.as_str().unwrap().contains("UNDEFINED-FN-QQ"))),
        "{}",
        r.text
    );

    let r = call(&mut s, 4, "debugger-frame", json!({"frame": 999}));
    assert!(r.is_error, "{}", r.text);
    assert!(r.text.starts_with("There is no frame 999"), "{}", r.text);
    let r = call(
        &mut s,
        5,
        "debugger-frame",
        json!({"frame": frame, "code": "(car"}),
    );
    assert!(r.is_error, "{}", r.text);
    assert!(r.text.starts_with("The code does not read"), "{}", r.text);
    assert!(
        r.text
            .contains("closing parenthesis or string quote is missing"),
        "{}",
        r.text
    );
    // inspect-object in a frame reads first too: a plain error, no
    // reader's stream (#<SB-IMPL::STRING-INPUT-STREAM ...>).
    let r = call(
        &mut s,
        51,
        "inspect-object",
        json!({"frame": frame, "code": "(car"}),
    );
    assert!(
        r.is_error && r.text.starts_with("The code does not read") && !r.text.contains("#<"),
        "{}",
        r.text
    );
    let r = call(
        &mut s,
        6,
        "debugger-restart",
        json!({"action": "return", "frame": 999, "values": ["1"]}),
    );
    assert!(r.text.contains("There is no frame 999"), "{}", r.text);
    let r = call(
        &mut s,
        7,
        "debugger-restart",
        json!({"restart": "continue", "values": ["(car"]}),
    );
    assert!(r.text.contains("does not read"), "{}", r.text);
    let r = call(&mut s, 8, "debugger-restart", json!({"restart": -1}));
    assert!(r.is_error, "{}", r.text);
    assert!(r.text.contains("a restart's number"), "{}", r.text);
    let r = call(&mut s, 9, "debugger-backtrace", json!({}));
    assert_eq!(r.structured["level"], 1, "no nested level: {}", r.text);

    // The evaluation's outcome has none of the frame code's warnings.
    let r = call(
        &mut s,
        10,
        "debugger-restart",
        json!({"action": "continue"}),
    );
    assert!(!r.is_error, "{}", r.text);
    assert_eq!(r.text, "before\n=> 11");
    assert!(
        r.structured.get("warnings").is_none_or(|w| w == &json!([])),
        "{}",
        r.structured
    );

    // A traced call that an abort left is over, not "still running".
    let r = call(&mut s, 11, "trace-functions", json!({"trace": ["dbg-w"]}));
    assert!(!r.is_error, "{}", r.text);
    let r = eval_with(&mut s, 12, "(dbg-w 1)", json!({"debug": true}));
    assert!(r.text.starts_with("[DEBUGGER level 1]"), "{}", r.text);
    call(&mut s, 13, "debugger-restart", json!({"action": "abort"}));
    let r = call(&mut s, 14, "trace-functions", json!({}));
    let records = r.structured["records"].as_array().unwrap();
    assert_eq!(records.len(), 1, "{}", r.text);
    assert_eq!(records[0]["outcome"], "non-local-exit", "{}", r.text);
    let r = call(&mut s, 15, "trace-functions", json!({}));
    assert_eq!(r.structured["records"], json!([]), "{}", r.text);
}

#[test]
fn idle_pending_debugger_is_aborted() {
    let mut s = lisp_server(&["--debugger-idle-secs", "2"]);
    let r = eval_with(&mut s, 1, "(error \"left alone\")", json!({"debug": true}));
    assert!(r.text.starts_with("[DEBUGGER level 1]"), "{}", r.text);
    let r = call(&mut s, 2, "image-info", json!({}));
    assert_eq!(
        r.structured["pendingDebuggers"].as_array().unwrap().len(),
        1
    );
    std::thread::sleep(Duration::from_secs(4));
    let r = call(&mut s, 3, "image-info", json!({}));
    assert!(r.structured.get("pendingDebuggers").is_none(), "{}", r.text);
    let r = call(&mut s, 4, "debugger-backtrace", json!({}));
    assert!(
        r.is_error && r.text.contains("no pending debugger"),
        "{}",
        r.text
    );
    // The image is fine.
    let r = eval(&mut s, 5, "(+ 2 3)");
    assert_eq!(r.text, "=> 5");
}

#[test]
fn cerror_invoke_debugger_return_and_timeout() {
    let mut s = lisp_server(&[]);
    // cerror: continue goes on after it.
    let r = eval_with(
        &mut s,
        1,
        "(progn (cerror \"Go on.\" \"soft ~a\" 1) :went-on)",
        json!({"debug": true}),
    );
    assert!(r.text.starts_with("[DEBUGGER level 1]"), "{}", r.text);
    assert!(r.text.contains("[CONTINUE] Go on."), "{}", r.text);
    let r = call(&mut s, 2, "debugger-restart", json!({"restart": 0}));
    assert_eq!(r.text, "=> :WENT-ON");

    // invoke-debugger on a condition nobody signalled.
    let r = eval_with(
        &mut s,
        3,
        "(invoke-debugger (make-condition 'simple-warning :format-control \"look ~a\" :format-arguments '(2)))",
        json!({"debug": true}),
    );
    assert!(r.text.starts_with("[DEBUGGER level 1]"), "{}", r.text);
    assert!(r.text.contains("look 2"), "{}", r.text);
    let r = call(&mut s, 4, "debugger-restart", json!({"action": "abort"}));
    assert!(r.is_error && r.text.contains("ABORT"), "{}", r.text);

    // A traced function that breaks on entry.
    let r = eval(
        &mut s,
        41,
        "(defun dbg-traced (x) (* x 2)) (trace dbg-traced :break t)",
    );
    assert!(!r.is_error, "{}", r.text);
    let r = eval_with(&mut s, 42, "(dbg-traced 4)", json!({"debug": true}));
    assert!(r.text.starts_with("[DEBUGGER level 1]"), "{}", r.text);
    assert!(r.text.contains("DBG-TRACED"), "{}", r.text);
    let r = call(
        &mut s,
        43,
        "debugger-restart",
        json!({"action": "continue"}),
    );
    assert!(r.text.ends_with("=> 8"), "{}", r.text);
    eval(&mut s, 44, "(untrace dbg-traced)");

    // Returning a value from a frame (compiled with debug 3).
    let r = eval(
        &mut s,
        5,
        "(defun dbg-inner (x) (declare (optimize (debug 3))) (if (> x 0) (error \"too big ~a\" x) x))
         (defun dbg-outer (x) (declare (optimize (debug 3))) (list :got (dbg-inner x)))",
    );
    assert!(!r.is_error, "{}", r.text);
    let r = eval_with(&mut s, 6, "(dbg-outer 5)", json!({"debug": true}));
    assert!(r.text.starts_with("[DEBUGGER level 1]"), "{}", r.text);
    let frame = r.structured["debugger"]["frames"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["frame"].as_str().unwrap().contains("DBG-INNER"))
        .unwrap_or_else(|| panic!("{}", r.text))["index"]
        .clone();
    let r = call(
        &mut s,
        7,
        "debugger-restart",
        json!({"action": "return", "frame": frame, "values": ["(* 6 7)"]}),
    );
    assert_eq!(r.text, "=> (:GOT 42)");

    // A restart whose continuation runs too long is interrupted.
    let r = eval_with(&mut s, 8, "(progn (break) (loop))", json!({"debug": true}));
    assert!(r.text.starts_with("[DEBUGGER level 1]"), "{}", r.text);
    let r = call(
        &mut s,
        9,
        "debugger-restart",
        json!({"action": "continue", "timeoutSeconds": 1}),
    );
    assert!(r.is_error);
    assert!(r.text.contains("[TIMEOUT]"), "{}", r.text);
    assert_eq!(r.structured["interrupted"], true);
    let r = eval(&mut s, 10, "(+ 1 1)");
    assert_eq!(r.text, "=> 2");
}

/// Attach mode: the debugger waits in the user's own image, on a thread of
/// our connection; the user's REPL and image are untouched.
#[test]
fn debugger_in_an_attached_image() {
    let mut user = UserLisp::start();
    let addr = format!("127.0.0.1:{}", user.port);
    let mut s = lisp_server(&["--swank", &addr]);
    // The one-time notice about the project's systems comes first.
    let r = eval(&mut s, 10, "(+ 1 1)");
    assert!(r.text.starts_with("[NOTICE]"), "{}", r.text);
    let r = eval_with(
        &mut s,
        1,
        "(let ((state cl-user::*user-state*)) (list state (error \"bad state ~a\" state)))",
        json!({"debug": true}),
    );
    assert!(r.text.starts_with("[DEBUGGER level 1]"), "{}", r.text);
    assert!(r.text.contains("bad state MINE"), "{}", r.text);
    let r = call(&mut s, 2, "debugger-frame", json!({"code": "(+ 1 2)"}));
    assert_eq!(r.structured["values"], json!(["3"]), "{}", r.text);
    let r = eval(&mut s, 3, "(+ 2 2)");
    assert_eq!(r.text, "=> 4");
    let r = call(&mut s, 4, "debugger-restart", json!({"action": "abort"}));
    assert!(r.text.contains("ABORT"), "{}", r.text);
    drop(s);
    std::thread::sleep(Duration::from_millis(500));
    assert!(
        user.child.try_wait().unwrap().is_none(),
        "the user's image lives on"
    );
}

/// SBCL's single stepper through the debugger: `(step ...)` stops at each
/// call of code compiled with (debug 3); `step` enters a call, `next` steps
/// over one, `out` runs to the end of the function.
#[test]
fn single_stepping_into_over_and_out() {
    let mut s = lisp_server(&[]);
    let r = eval(&mut s, 1, "(declaim (optimize (debug 3)))");
    assert!(!r.is_error, "{}", r.text);
    let r = eval(
        &mut s,
        2,
        "(defun stp-sq (x) (let ((y (* x x))) (+ y 1))) \
         (defun stp-top (n) (+ (stp-sq n) (stp-sq (1+ n))))",
    );
    assert!(!r.is_error, "{}", r.text);
    let r = eval_with(&mut s, 3, "(step (stp-top 3))", json!({"debug": true}));
    assert!(r.text.starts_with("[DEBUGGER level 1]"), "{}", r.text);
    assert!(r.text.contains("STEP-FORM-CONDITION"), "{}", r.text);
    assert!(r.text.contains("(STP-TOP 3)"), "{}", r.text);
    let r = call(&mut s, 4, "debugger-restart", json!({"action": "step"}));
    assert!(
        r.text.contains("(STP-SQ N)"),
        "stepped into STP-TOP: {}",
        r.text
    );
    let r = call(&mut s, 5, "debugger-restart", json!({"action": "next"}));
    assert!(r.text.starts_with("[DEBUGGER level 1]"), "{}", r.text);
    assert!(
        !r.text.contains("(* X X)"),
        "stepped over STP-SQ: {}",
        r.text
    );
    let r = call(&mut s, 6, "debugger-restart", json!({"action": "out"}));
    assert_eq!(r.text, "=> 27", "{}", r.text);
    // Without a stepped form or CONTINUE, stepping says why.
    let r = eval_with(&mut s, 7, "(error \"plain\")", json!({"debug": true}));
    assert!(r.text.starts_with("[DEBUGGER level 1]"), "{}", r.text);
    let r = call(&mut s, 8, "debugger-restart", json!({"action": "next"}));
    assert!(
        r.is_error && r.text.contains("Cannot step here"),
        "{}",
        r.text
    );
    let r = call(&mut s, 9, "debugger-restart", json!({"action": "abort"}));
    assert!(r.is_error, "{}", r.text);
}

/// Backtraces show the user's frames only: a traced function's calls appear
/// as themselves, never as the tracer's wrapper frames (TRACE-CALL), and no
/// frame of Swank or of the server; the numbers still address the frames.
#[test]
fn traced_calls_show_as_the_users_frames() {
    let mut s = lisp_server(&[]);
    let r = eval(
        &mut s,
        1,
        "(declaim (optimize (debug 2))) \
         (defun trc-g (x) (if (= x 0) (error \"boom ~a\" x) (+ 1 (trc-g (1- x))))) \
         (defun trc-f (x) (if (= x 0) (error \"tail ~a\" x) (trc-f (1- x))))",
    );
    assert!(!r.is_error, "{}", r.text);
    let r = call(
        &mut s,
        2,
        "trace-functions",
        json!({"trace": ["trc-g", "trc-f"]}),
    );
    assert!(!r.is_error, "{}", r.text);
    let clean = |text: &str| {
        for word in ["TRACE-CALL", "SWANK", "CL-MCP", "ENCAPSULAT"] {
            assert!(!text.contains(word), "{word} in:\n{text}");
        }
    };
    // The error backtrace of evaluate-lisp.
    let r = eval(&mut s, 3, "(trc-g 2)");
    assert!(r.is_error);
    clean(&r.text);
    let frames: Vec<String> = r.structured["error"]["backtrace"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["frame"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(
        frames,
        ["(TRC-G 0)", "(TRC-G 1)", "(TRC-G 2)"],
        "{}",
        r.text
    );

    // A waiting debugger: the same frames, their numbers address them.
    let r = eval_with(&mut s, 4, "(trc-g 2)", json!({"debug": true}));
    assert!(r.text.starts_with("[DEBUGGER level 1]"), "{}", r.text);
    clean(&r.text);
    let shown: Vec<&str> = r.structured["debugger"]["frames"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["frame"].as_str().unwrap())
        .collect();
    assert_eq!(shown, ["(TRC-G 0)", "(TRC-G 1)", "(TRC-G 2)"], "{}", r.text);
    let one = frame_index(&r.structured, "(TRC-G 1)");
    let r = call(&mut s, 5, "debugger-frame", json!({"frame": one}));
    assert_eq!(r.structured["frame"], "(TRC-G 1)", "{}", r.text);
    assert!(
        r.structured["locals"]
            .as_array()
            .unwrap()
            .iter()
            .any(|l| l["name"] == "X" && l["value"] == "1"),
        "{}",
        r.text
    );
    let r = call(&mut s, 6, "debugger-backtrace", json!({}));
    clean(&r.text);
    let r = call(&mut s, 7, "debugger-restart", json!({"action": "abort"}));
    assert!(r.is_error, "{}", r.text);

    // Tail calls leave only the wrapper's frame: it stands for the call.
    let r = eval_with(&mut s, 8, "(trc-f 2)", json!({"debug": true}));
    clean(&r.text);
    let shown: Vec<&str> = r.structured["debugger"]["frames"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["frame"].as_str().unwrap())
        .collect();
    assert_eq!(shown, ["(TRC-F 0)", "(TRC-F 1)", "(TRC-F 2)"], "{}", r.text);
    let r = call(&mut s, 9, "debugger-restart", json!({"action": "abort"}));
    assert!(r.is_error, "{}", r.text);
    let r = eval(&mut s, 10, "(trc-f 1)");
    clean(&r.text);
    assert!(r.text.contains("1: (TRC-F 1)"), "{}", r.text);
}

/// Whether what the user's SLIME heard comes to hold `text` within 10 s
/// (Swank writes to it after the state the server reads has changed).
fn hears(heard: &std::sync::Mutex<String>, text: &str) -> bool {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        if heard.lock().unwrap().contains(text) {
            return true;
        }
        if std::time::Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Attach mode: a thread of the user's application that enters the debugger
/// goes to the user's SLIME, not to us. The agent sees it (list-threads,
/// debugger-backtrace with its thread: condition, restarts, frames) without
/// touching it, and acts on it only after taking it over explicitly.
#[test]
fn a_users_thread_in_the_debugger_is_seen_and_taken_over_only_when_asked() {
    use std::io::Read;
    use std::sync::{Arc, Mutex};
    let user = UserLisp::start_with(&[
        "(declaim (optimize (debug 2)))",
        "(defvar cl-user::*go* nil)",
        "(defvar cl-user::*served* nil)",
        "(defun cl-user::handle (n) (let ((r (* n 2))) (error \"handler failed on ~a\" r) r))",
        "(defun cl-user::serve () (loop until cl-user::*go* do (sleep 0.02)) \
         (setf cl-user::*served* (restart-case (cl-user::handle 21) \
           (use-value (v) :report \"Use a value.\" v))))",
        "(sb-thread:make-thread #'cl-user::serve :name \"user-handler\")",
    ]);
    let addr = format!("127.0.0.1:{}", user.port);
    // The user's SLIME: a Swank connection of its own, made first.
    let slime = std::net::TcpStream::connect(&addr).unwrap();
    let heard = Arc::new(Mutex::new(String::new()));
    {
        let heard = heard.clone();
        let mut slime = slime.try_clone().unwrap();
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = slime.read(&mut buf) {
                if n == 0 {
                    break;
                }
                heard
                    .lock()
                    .unwrap()
                    .push_str(&String::from_utf8_lossy(&buf[..n]));
            }
        });
    }
    std::thread::sleep(Duration::from_millis(300));
    let mut s = lisp_server(&["--swank", &addr]);
    let r = eval(&mut s, 1, "(setf cl-user::*go* t)");
    assert!(r.text.ends_with("=> T"), "{}", r.text);

    let mut handler = serde_json::Value::Null;
    for i in 0..100 {
        let r = call(&mut s, 100 + i, "list-threads", json!({}));
        if let Some(t) = r.structured["threads"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["name"] == "user-handler" && t["inDebugger"] == true)
        {
            handler = t.clone();
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let r = call(&mut s, 99, "list-threads", json!({}));
    assert!(
        r.text.contains("takeOver"),
        "list-threads says how: {}",
        r.text
    );
    let thread = handler["id"]
        .as_i64()
        .expect("the handler thread waits in the debugger");
    // The thread is in the debugger before Swank's message to the user's
    // SLIME has crossed the socket: wait for it a while.
    assert!(
        hears(&heard, "handler failed on 42"),
        "the user's SLIME got the debugger: {}",
        heard.lock().unwrap()
    );

    // Seen, not touched.
    let r = call(&mut s, 2, "debugger-backtrace", json!({"thread": thread}));
    assert!(!r.is_error, "{}", r.text);
    assert!(r.text.contains("not taken over"), "{}", r.text);
    assert_eq!(r.structured["debugger"], 0, "{}", r.text);
    assert!(r.structured["message"]
        .as_str()
        .unwrap()
        .contains("handler failed on 42"));
    assert!(
        r.structured["restarts"].to_string().contains("USE-VALUE"),
        "{}",
        r.text
    );
    assert!(
        r.structured["frames"].to_string().contains("HANDLE"),
        "{}",
        r.text
    );
    let r = call(&mut s, 3, "debugger-restart", json!({"action": "continue"}));
    assert!(r.is_error, "nothing was taken over: {}", r.text);
    let r = call(&mut s, 4, "list-threads", json!({}));
    assert!(r.structured["threads"].to_string().contains("user-handler"));

    // Taken over when asked: a nested level for the debugger tools.
    let r = call(
        &mut s,
        5,
        "debugger-backtrace",
        json!({"thread": thread, "takeOver": true}),
    );
    assert!(r.text.starts_with("[DEBUGGER level 2]"), "{}", r.text);
    assert_eq!(r.structured["thread"], thread, "{}", r.text);
    assert!(!r.text.contains("SWANK"), "{}", r.text);
    let handle = r.structured["frames"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["frame"].as_str().unwrap().contains("(HANDLE 21)"))
        .unwrap_or_else(|| panic!("{}", r.text))["index"]
        .clone();
    let r = call(&mut s, 6, "debugger-frame", json!({"frame": handle}));
    assert!(
        r.structured["locals"]
            .as_array()
            .unwrap()
            .iter()
            .any(|l| l["name"] == "N" && l["value"] == "21"),
        "{}",
        r.text
    );
    // `abort` hands it back to the user's debugger, where it still waits.
    let r = call(&mut s, 20, "debugger-restart", json!({"action": "abort"}));
    assert!(!r.is_error, "{}", r.text);
    assert!(r.text.contains("[THREAD]"), "{}", r.text);
    let r = call(&mut s, 21, "debugger-backtrace", json!({"thread": thread}));
    assert!(r.text.contains("level 1] not taken over"), "{}", r.text);
    let r = call(
        &mut s,
        22,
        "debugger-backtrace",
        json!({"thread": thread, "takeOver": true}),
    );
    assert!(r.text.starts_with("[DEBUGGER level 2]"), "{}", r.text);
    // So does the session's end.
    let (status, _) = s.close();
    assert!(status.success());
    let mut s = lisp_server(&["--swank", &addr]);
    let r = call(&mut s, 23, "debugger-backtrace", json!({"thread": thread}));
    assert!(r.text.contains("level 1] not taken over"), "{}", r.text);
    let r = call(
        &mut s,
        24,
        "debugger-backtrace",
        json!({"thread": thread, "takeOver": true}),
    );
    assert!(r.text.starts_with("[DEBUGGER level 2]"), "{}", r.text);
    let r = call(
        &mut s,
        7,
        "debugger-restart",
        json!({"restart": "use-value", "values": ["7"]}),
    );
    assert!(!r.is_error, "{}", r.text);
    assert!(r.text.contains("[THREAD]"), "{}", r.text);
    // The user's thread ran on with the value the agent chose.
    let r = eval(&mut s, 8, "cl-user::*served*");
    assert_eq!(r.text, "=> 7");
    assert!(
        hears(&heard, ":debug-return"),
        "the user's SLIME was told its debugger is over"
    );
    drop(slime);
}

/// The debugger on ECL or CLISP through their Swank backends: the user's
/// frame, its locals, evaluation in it, restarts; stepping says plainly
/// that it needs SBCL.
fn debugger_on(lisp: &str) {
    let found = std::env::var_os("PATH")
        .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(lisp).is_file()));
    assert!(found, "{lisp} is not installed: apt-get install {lisp}");
    let mut s = lisp_server(&["--lisp", lisp]);
    let r = eval(
        &mut s,
        1,
        "(defun dbg-h (x) (let ((y (* x 2))) (+ y (error \"bad ~a\" y))))",
    );
    assert!(!r.is_error, "{}", r.text);
    let r = eval_with(
        &mut s,
        2,
        "(restart-case (dbg-h 21) (use-value (v) :report \"Use a value.\" v))",
        json!({"debug": true}),
    );
    assert!(r.text.starts_with("[DEBUGGER level 1]"), "{}", r.text);
    assert!(r.text.contains("bad 42"), "{}", r.text);
    let frames = r.structured["debugger"]["frames"]
        .as_array()
        .unwrap()
        .clone();
    assert!(!frames.is_empty(), "{}", r.text);
    assert!(
        frames[0]["frame"].as_str().unwrap().contains("DBG-H"),
        "{}",
        r.text
    );
    for word in ["CL-MCP", "SWANK", "BYTECODES", "LAMBDA", "frame for"] {
        assert!(!r.text.contains(word), "{word} in:\n{}", r.text);
    }
    let r = call(&mut s, 3, "debugger-frame", json!({"code": "(list x y)"}));
    assert!(!r.is_error, "{}", r.text);
    let locals = r.structured["locals"].to_string();
    assert!(
        locals.contains(r#"{"name":"X","value":"21"}"#),
        "{}",
        r.text
    );
    assert!(
        locals.contains(r#"{"name":"Y","value":"42"}"#),
        "{}",
        r.text
    );
    assert_eq!(r.structured["values"], json!(["(21 42)"]), "{}", r.text);
    let r = call(&mut s, 4, "debugger-restart", json!({"action": "step"}));
    assert!(r.is_error, "{}", r.text);
    assert!(r.text.contains("needs SBCL"), "{}", r.text);
    assert!(r.text.contains("still pending"), "{}", r.text);
    let r = call(
        &mut s,
        5,
        "debugger-restart",
        json!({"restart": "use-value", "values": ["7"]}),
    );
    assert!(!r.is_error, "{}", r.text);
    assert!(r.text.ends_with("=> 7"), "{}", r.text);
    let r = eval_with(&mut s, 6, "(break)", json!({"debug": true}));
    assert!(r.text.starts_with("[DEBUGGER level 1]"), "{}", r.text);
    let r = call(&mut s, 7, "debugger-restart", json!({"action": "continue"}));
    assert!(r.text.ends_with("=> NIL"), "{}", r.text);
    // Without `debug`, the error's backtrace shows the same user frame.
    let r = eval(&mut s, 8, "(dbg-h 21)");
    assert!(r.is_error, "{}", r.text);
    let frame = r.structured["error"]["backtrace"][0]["frame"]
        .as_str()
        .unwrap_or("");
    assert!(frame.starts_with("(DBG-H "), "{}", r.text);
    for word in ["CL-MCP", "SWANK", "BYTECODES", "LAMBDA", "frame for"] {
        assert!(!r.text.contains(word), "{word} in:\n{}", r.text);
    }
    // The debugger words a condition as the error result does (ECL prints
    // an arithmetic error unreadably, #<a DIVISION-BY-ZERO ...>).
    let r = eval_with(&mut s, 9, "(/ 1 (- 1 1))", json!({"debug": true}));
    assert!(r.text.starts_with("[DEBUGGER level 1]"), "{}", r.text);
    let message = r.structured["debugger"]["message"].as_str().unwrap();
    assert!(
        !message.starts_with("#<") && message.to_lowercase().contains("division"),
        "{}",
        r.text
    );
    call(&mut s, 10, "debugger-restart", json!({"action": "abort"}));
}

#[test]
fn debugger_on_ecl() {
    debugger_on("ecl");
}

#[test]
fn debugger_on_clisp() {
    debugger_on("clisp");
}

/// Code run in a frame that does not end is stopped (after 30 s, or when
/// its call is cancelled) and the debugger stays where it was, its thread
/// free for the next call; errors nest only so deep, then a plain refusal
/// (past about ten nested errors SBCL stopped answering, and every later
/// debugger call hung).
#[test]
fn frame_code_is_stopped_and_nesting_is_capped() {
    let mut s = lisp_server(&[]);
    let r = eval_with(
        &mut s,
        1,
        "(list :outer (error \"outer\"))",
        json!({"debug": true}),
    );
    assert!(r.text.starts_with("[DEBUGGER level 1]"), "{}", r.text);
    let id = r.structured["debugger"]["debugger"].as_u64().unwrap();

    // Cancelled: no answer is due; the thread is free again at once.
    s.send(
        &json!({"jsonrpc":"2.0","id":2,"method":"tools/call","params":{
        "name":"debugger-frame","arguments":{"debugger": id, "code": "(loop)"}}}),
    );
    std::thread::sleep(std::time::Duration::from_millis(500));
    s.send(&json!({"jsonrpc":"2.0","method":"notifications/cancelled",
                   "params":{"requestId": 2, "reason": "test"}}));
    let r = call(
        &mut s,
        3,
        "debugger-frame",
        json!({"debugger": id, "code": "(+ 1 2)"}),
    );
    assert!(!r.is_error, "{}", r.text);
    assert_eq!(r.structured["values"], json!(["3"]), "{}", r.text);

    // Timed out: answered, saying so, with what it printed.
    let started = std::time::Instant::now();
    let r = call(
        &mut s,
        4,
        "debugger-frame",
        json!({"debugger": id, "code": "(print :spinning) (loop)"}),
    );
    assert!(r.is_error, "{}", r.text);
    assert!(
        r.text
            .contains("did not finish within 30 s and was stopped")
            && r.text.contains("stays at level 1")
            && r.text.contains(":SPINNING"),
        "{}",
        r.text
    );
    assert!(started.elapsed() < std::time::Duration::from_secs(40));

    // Errors nest up to level 8, then code in a frame is refused.
    for level in 2..=8 {
        let r = call(
            &mut s,
            10 + level,
            "debugger-frame",
            json!({"debugger": id, "code": format!("(error \"level {level}\")")}),
        );
        assert_eq!(r.structured["nested"]["level"], level, "{}", r.text);
    }
    let r = call(
        &mut s,
        30,
        "debugger-frame",
        json!({"debugger": id, "code": "(error \"one too deep\")"}),
    );
    assert!(r.is_error, "{}", r.text);
    assert!(
        r.text.contains("at level 8, the deepest") && r.text.contains("returns to level 7"),
        "{}",
        r.text
    );
    // The debugger still answers: backtrace and abort, level by level.
    let r = call(&mut s, 31, "debugger-backtrace", json!({"debugger": id}));
    assert!(r.text.contains("level 8"), "{}", r.text);
    let r = call(&mut s, 32, "debugger-restart", json!({"restart": "ABORT"}));
    assert!(r.text.starts_with("[DEBUGGER level 7]"), "{}", r.text);
    let r = call(
        &mut s,
        33,
        "debugger-restart",
        json!({"debugger": id, "action": "abort"}),
    );
    assert!(!r.text.starts_with("[DEBUGGER"), "{}", r.text);
    let r = eval_with(&mut s, 34, "(+ 2 2)", json!({}));
    assert_eq!(r.text, "=> 4");
}

const REARMED: &str = "guard page is not re-armed until the debugger returns";

/// After a control stack exhaustion the debugger runs on a stack still
/// that deep, its guard page down: code in a frame (or a value to return)
/// that recursed again ran past the end of the stack and the image died
/// with all its state. Such code is refused, saying why, until a restart
/// unwinds; the image lives on, and a fixed function's frame restarts.
fn stack_exhaustion_in_the_debugger_on(lisp: &str) {
    let mut s = lisp_server(&["--lisp", lisp]);
    let r = eval(
        &mut s,
        1,
        "(defvar *kept* 42) (defun deep (n) (1+ (deep (1+ n))))",
    );
    assert!(!r.is_error, "{}", r.text);
    let r = eval_with(&mut s, 2, "(deep 0)", json!({"debug": true}));
    assert!(r.text.starts_with("[DEBUGGER level 1]"), "{}", r.text);
    let frame = frame_index(&r.structured, "DEEP");
    let r = call(&mut s, 3, "debugger-frame", json!({"code": "(deep 0)"}));
    assert!(r.is_error && r.text.contains(REARMED), "{}", r.text);
    let r = call(
        &mut s,
        4,
        "inspect-object",
        json!({"frame": frame, "code": "(deep 0)"}),
    );
    assert!(r.is_error && r.text.contains(REARMED), "{}", r.text);
    let r = call(
        &mut s,
        5,
        "debugger-restart",
        json!({"action": "return", "frame": frame, "values": ["(deep 0)"]}),
    );
    // ECL returns from no frame at all: said first.
    assert!(
        r.is_error
            && (r.text.contains(REARMED)
                || (lisp == "ecl" && r.text.starts_with("ECL cannot return a value from a frame"))),
        "{}",
        r.text
    );
    assert!(r.text.contains("still pending"), "{}", r.text);
    // The frames still show their locals; the image and its state live.
    let r = call(&mut s, 6, "debugger-frame", json!({"frame": frame}));
    assert!(!r.is_error, "{}", r.text);
    let r = eval(&mut s, 7, "*kept*");
    assert_eq!(r.text, "=> 42");
    let r = call(&mut s, 8, "debugger-restart", json!({"action": "abort"}));
    assert!(!r.text.starts_with("[DEBUGGER"), "{}", r.text);
    // Unwound, the guard is armed again: a second exhaustion is caught.
    let r = eval_with(&mut s, 9, "(deep 0)", json!({"debug": true}));
    assert!(r.text.starts_with("[DEBUGGER level 1]"), "{}", r.text);
    call(&mut s, 10, "debugger-restart", json!({"action": "abort"}));
    let r = eval(&mut s, 11, "*kept*");
    assert_eq!(r.text, "=> 42");
    // An exhaustion the code caught leaves the stack shallow again: a
    // later error's frames take code (the guard is armed again first).
    let r = eval_with(
        &mut s,
        12,
        "(handler-case (deep 0) (storage-condition () nil)) (error \"later\")",
        json!({"debug": true}),
    );
    assert!(r.text.starts_with("[DEBUGGER level 1]"), "{}", r.text);
    let r = call(&mut s, 13, "debugger-frame", json!({"code": "(+ 1 2)"}));
    assert_eq!(r.structured["values"], json!(["3"]), "{}", r.text);
    call(&mut s, 14, "debugger-restart", json!({"action": "abort"}));
    let r = eval_with(&mut s, 15, "(deep 0)", json!({"debug": true}));
    assert!(r.text.starts_with("[DEBUGGER level 1]"), "{}", r.text);
    call(&mut s, 16, "debugger-restart", json!({"action": "abort"}));
    let r = eval(&mut s, 17, "*kept*");
    assert_eq!(r.text, "=> 42");
}

#[test]
fn a_second_stack_exhaustion_in_the_debugger_is_refused() {
    stack_exhaustion_in_the_debugger_on("sbcl");
}

#[test]
fn a_second_stack_exhaustion_in_the_debugger_is_refused_on_ecl() {
    let found = std::env::var_os("PATH")
        .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join("ecl").is_file()));
    assert!(found, "ecl is not installed: apt-get install ecl");
    stack_exhaustion_in_the_debugger_on("ecl");
}

/// The frames a debugger lists after a stack exhaustion are near the
/// stack's end: restarting one (even with the function fixed) ran past
/// the end and killed the image. Refused, saying why; after an abort the
/// guard is armed again and the fixed function runs.
#[test]
fn a_frame_near_the_exhausted_end_of_the_stack_is_not_restarted() {
    let mut s = lisp_server(&[]);
    let r = eval(
        &mut s,
        1,
        "(declaim (optimize (debug 2))) (defun deep (n) (1+ (deep (1+ n))))",
    );
    assert!(!r.is_error, "{}", r.text);
    let r = eval_with(&mut s, 2, "(deep 0)", json!({"debug": true}));
    assert!(r.text.starts_with("[DEBUGGER level 1]"), "{}", r.text);
    let r = call(
        &mut s,
        3,
        "debugger-backtrace",
        json!({"start": 200, "count": 1}),
    );
    let frame = r.structured["frames"][0]["index"].as_u64().unwrap();
    let r = eval(&mut s, 4, "(defun deep (n) (if (> n 10) n (deep (1+ n))))");
    assert!(!r.is_error, "{}", r.text);
    let r = call(
        &mut s,
        5,
        "debugger-restart",
        json!({"action": "restart", "frame": frame}),
    );
    assert!(r.is_error, "{}", r.text);
    assert!(
        r.text.contains("while the stack is exhausted") && r.text.contains("still pending"),
        "{}",
        r.text
    );
    call(&mut s, 6, "debugger-restart", json!({"action": "abort"}));
    let r = eval(&mut s, 7, "(deep 0)");
    assert_eq!(r.text, "=> 11");
    let r = eval(&mut s, 8, "(defun deep2 (n) (1+ (deep2 (1+ n))))");
    assert!(!r.is_error, "{}", r.text);
    let r = eval_with(&mut s, 9, "(deep2 0)", json!({"debug": true}));
    assert!(r.text.starts_with("[DEBUGGER level 1]"), "{}", r.text);
    call(&mut s, 10, "debugger-restart", json!({"action": "abort"}));
    let r = eval(&mut s, 11, "(+ 1 2)");
    assert_eq!(r.text, "=> 3");
}

/// A restarted frame is called as it was: a key or optional argument the
/// call left out stays out (SBCL's own frame restart passed `(f 0)` as
/// `(f 0 :k 1)`, so a supplied-p check saw another call; split-sequence
/// then said "Cannot specify both TEST and TEST-NOT"). A frame that cannot
/// say how it was called is refused with the reason.
#[test]
fn a_restarted_frame_gets_the_arguments_of_its_call() {
    let mut s = lisp_server(&[]);
    let r = eval(
        &mut s,
        1,
        "(declaim (optimize (debug 2))) (defvar *calls* '())
         (defun kf (x &key (k 1 k-p)) (push (list :kf x k k-p) *calls*) (error \"stop ~a\" x))
         (defun two-tests (seq &key (test #'eql test-p) (test-not nil test-not-p) (start 0))
           (when (and test-p test-not-p) (error \"Cannot specify both TEST and TEST-NOT\"))
           (push (list :two-tests seq start (and test-p t) (and test-not-p t)) *calls*)
           (error \"stop ~a ~a\" test test-not))
         (defun opt (a &optional (b 2 b-p) (c 3)) (push (list :opt a b b-p c) *calls*) (error \"stop ~a\" a))
         (defun rest-keys (&rest all &key (k 1)) (push (list :rest-keys all k) *calls*) (error \"stop\"))",
    );
    assert!(!r.is_error, "{}", r.text);
    let cases = [
        ("(kf 0)", "KF", "(:KF 0 1 NIL)"),
        (
            "(two-tests '(1 2) :test-not #'eql)",
            "TWO-TESTS",
            "(:TWO-TESTS (1 2) 0 NIL T)",
        ),
        ("(opt 1)", "OPT", "(:OPT 1 2 NIL 3)"),
        ("(rest-keys)", "REST-KEYS", "(:REST-KEYS NIL 1)"),
    ];
    for (i, (code, name, call_seen)) in cases.iter().enumerate() {
        let id = 10 * (i as i64 + 1);
        let r = eval(&mut s, id, "(setf *calls* '())");
        assert!(!r.is_error, "{}", r.text);
        let r = eval_with(&mut s, id + 1, code, json!({"debug": true}));
        assert!(r.text.starts_with("[DEBUGGER level 1]"), "{}", r.text);
        let frame = frame_index(&r.structured, name);
        let r = call(
            &mut s,
            id + 2,
            "debugger-restart",
            json!({"action": "restart", "frame": frame}),
        );
        // The same error again, from the same call.
        assert!(r.text.starts_with("[DEBUGGER level 1]"), "{}", r.text);
        assert!(!r.text.contains("both TEST"), "{}", r.text);
        let r = eval(&mut s, id + 3, "(format nil \"~s\" *calls*)");
        assert_eq!(
            r.text,
            format!("=> \"({call_seen} {call_seen})\""),
            "{code} restarted"
        );
        call(
            &mut s,
            id + 4,
            "debugger-restart",
            json!({"action": "abort"}),
        );
    }
    // Compiled without a restart point: refused, saying why.
    let r = eval(
        &mut s,
        60,
        "(declaim (optimize (debug 0))) (defun low (x) (if (zerop x) (error \"low\") (low (1- x)))) \
         (declaim (optimize (debug 1)))",
    );
    assert!(!r.is_error, "{}", r.text);
    let r = eval_with(&mut s, 61, "(low 3)", json!({"debug": true}));
    let frame = frame_index(&r.structured, "LOW");
    let r = call(
        &mut s,
        62,
        "debugger-restart",
        json!({"action": "restart", "frame": frame}),
    );
    assert!(r.is_error, "{}", r.text);
    assert!(
        r.text.contains("Cannot restart frame")
            && r.text.contains("(debug 2)")
            && r.text.contains("still pending"),
        "{}",
        r.text
    );
    call(&mut s, 63, "debugger-restart", json!({"action": "abort"}));
}

/// Whether `lisp` is on `PATH`; records a skip (`common::skip_missing`)
/// when it is not.
fn lisp_installed(test: &str, lisp: &str) -> bool {
    let found = std::env::var_os("PATH")
        .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(lisp).is_file()));
    if !found {
        common::skip_missing(test, &format!("{lisp} (apt-get install {lisp})"));
    }
    found
}

/// `tools/list`'s description of `tool` for a server on `lisp`.
fn tool_description(s: &mut common::Server, tool: &str) -> String {
    let r = s.request(json!({"jsonrpc":"2.0","id":900,"method":"tools/list"}));
    r["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == tool)
        .unwrap_or_else(|| panic!("{tool} is listed"))["description"]
        .as_str()
        .unwrap()
        .to_string()
}

const WALK: &str = "(defun walk-inner (x) (let ((y (* x 2))) (error \"inner failed on ~a\" y)))
(defun walk-outer (n) (+ 1 (walk-inner (+ n 1))))
(defun walk-deep (n) (if (zerop n) (walk-outer 20) (+ 1 (walk-deep (1- n)))))";

/// The same functions compiled by the implementation's file compiler
/// (what ASDF loads), where Lisps keep less.
const COMPILED: &str = "(defun cf-inner (x) (let ((y (* x 2))) (error \"cf failed on ~a\" y)))
(defun cf-outer (n) (+ 1 (cf-inner (+ n 1))))
";

/// Whether a tool's description says `lisp` lacks `lacks`: a clause
/// " Not on ECL, ABCL (LACKS)." naming it among the implementations
/// (`tools/list` names every installed one that lacks the same).
fn says_lacks(description: &str, lisp: &str, lacks: &str) -> bool {
    description.split(" Not on ").skip(1).any(|clause| {
        clause.split_once(" (").is_some_and(|(names, rest)| {
            names.split(", ").any(|n| n == lisp) && rest.starts_with(&format!("{lacks})."))
        })
    })
}

/// The debugger walked as a user walks it, on each Lisp: entered within
/// a second from a deep stack, only the listed frames addressable, a
/// nested level that names its error, locals or what the Lisp needs to
/// keep them, and what the backend lacks refused plainly (the debugger
/// left where it was) and said in `tools/list`.
// Long: one walk of the debugger, in the order a user takes it.
fn debugger_parity_on(lisp: &str) {
    let test = format!("debugger_parity_on_{lisp}");
    if !lisp_installed(&test, lisp) {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().canonicalize().unwrap().join("cf.lisp");
    std::fs::write(&file, COMPILED).unwrap();
    let mut s = lisp_server(&["--lisp", lisp]);
    let restart_tool = tool_description(&mut s, "debugger-restart");
    match lisp {
        "sbcl" => assert!(!restart_tool.contains("SBCL"), "{restart_tool}"),
        "ecl" => assert!(
            says_lacks(
                &restart_tool,
                "ECL",
                "no return from a frame; no frame restart; no stepping"
            ),
            "{restart_tool}"
        ),
        _ => assert!(
            says_lacks(&restart_tool, "CLISP", "no stepping"),
            "{restart_tool}"
        ),
    }
    let r = eval(&mut s, 1, WALK);
    assert!(!r.is_error, "{}", r.text);
    let r = eval(
        &mut s,
        2,
        &format!("(load (compile-file {:?}))", file.to_string_lossy()),
    );
    assert!(!r.is_error, "{}", r.text);

    // A deep stack: CLISP typed every frame of it through regular
    // expressions and a Gray stream, seconds before the debugger showed.
    let _ = eval_with(&mut s, 3, "(walk-deep 10)", json!({"debug": true}));
    call(&mut s, 4, "debugger-restart", json!({"action": "abort"}));
    let started = std::time::Instant::now();
    let r = eval_with(&mut s, 5, "(walk-deep 1000)", json!({"debug": true}));
    let entered = started.elapsed();
    assert!(r.text.starts_with("[DEBUGGER level 1]"), "{}", r.text);
    assert!(
        entered < Duration::from_millis(2500),
        "entering the debugger took {entered:?}"
    );
    call(&mut s, 6, "debugger-restart", json!({"action": "abort"}));

    let r = eval_with(&mut s, 7, "(walk-outer 20)", json!({"debug": true}));
    assert!(r.text.starts_with("[DEBUGGER level 1]"), "{}", r.text);
    let inner = frame_index(&r.structured, "WALK-INNER");
    let listed: Vec<u64> = r.structured["debugger"]["frames"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["index"].as_u64().unwrap())
        .collect();
    let r = call(&mut s, 8, "debugger-frame", json!({"frame": inner}));
    assert!(!r.is_error, "{}", r.text);
    let locals = r.structured["locals"].to_string();
    assert!(
        locals.contains(r#"{"name":"X","value":"21"}"#),
        "{}",
        r.text
    );
    // SBCL keeps Y only at (debug 2) or more.
    assert!(
        lisp == "sbcl" || locals.contains(r#"{"name":"Y","value":"42"}"#),
        "{}",
        r.text
    );

    // Code that fails in a frame: a nested level naming its error.
    let r = call(
        &mut s,
        9,
        "debugger-frame",
        json!({"frame": inner, "code": "(error \"nested boom ~a\" 7)"}),
    );
    assert!(r.is_error, "{}", r.text);
    let nested = &r.structured["nested"];
    assert_eq!(nested["level"], 2, "{}", r.text);
    assert_eq!(nested["type"], "SIMPLE-ERROR", "{}", r.text);
    assert_eq!(nested["message"], "nested boom 7", "{}", r.text);
    assert!(r.text.contains("[DEBUGGER level 2]"), "{}", r.text);
    // SBCL's frame of that code, a (LAMBDA (#:G1)) of a
    // #<SB-DI::COMPILED-FRAME ...>, is said in words.
    assert!(
        lisp != "sbcl"
            || (!r.text.contains("COMPILED-FRAME")
                && r.text.contains("0: (code evaluated in a frame)")),
        "{}",
        r.text
    );

    // Only the frames listed at this level: a number below the last listed
    // one that is not listed (the debugger's, Swank's, the server's) is
    // refused, to look into and to run code in, and the level stays.
    let nested_frames: Vec<u64> = nested["frames"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["index"].as_u64().unwrap())
        .collect();
    let hidden = (0..*nested_frames.last().unwrap())
        .find(|i| !nested_frames.contains(i))
        .expect("a frame left out");
    for (id, args) in [
        (10, json!({"frame": hidden})),
        (11, json!({"frame": hidden, "code": "(+ 1 1)"})),
    ] {
        let r = call(&mut s, id, "debugger-frame", args);
        assert!(r.is_error, "{}", r.text);
        assert!(
            r.text.starts_with(&format!(
                "There is no frame {hidden} among those debugger level 2 lists: "
            )),
            "{}",
            r.text
        );
    }
    let r = call(&mut s, 12, "debugger-backtrace", json!({}));
    assert!(r.text.starts_with("[DEBUGGER level 2]"), "{}", r.text);
    assert!(r.text.contains("nested boom 7"), "{}", r.text);
    let r = call(&mut s, 13, "debugger-restart", json!({"restart": "ABORT"}));
    assert!(r.text.starts_with("[DEBUGGER level 1]"), "{}", r.text);
    if let Some(stale) = (0..*listed.last().unwrap()).find(|i| !listed.contains(i)) {
        let r = call(
            &mut s,
            14,
            "debugger-restart",
            json!({"action": "restart", "frame": stale}),
        );
        assert!(
            r.text
                .starts_with(&format!("There is no frame {stale} among")),
            "{}",
            r.text
        );
        assert!(r.text.contains("still pending"), "{}", r.text);
    }
    call(&mut s, 15, "debugger-restart", json!({"action": "abort"}));

    // A compiled function's frame.
    let r = eval_with(&mut s, 16, "(cf-outer 20)", json!({"debug": true}));
    assert!(r.text.starts_with("[DEBUGGER level 1]"), "{}", r.text);
    let cf = frame_index(&r.structured, "CF-INNER");
    let r = call(
        &mut s,
        17,
        "debugger-frame",
        json!({"frame": cf, "code": "(list x)"}),
    );
    let note = r.structured["localsNote"].as_str().unwrap_or("");
    match lisp {
        // Its locals, and code that reads them.
        "ecl" => {
            assert!(!r.is_error, "{}", r.text);
            assert_eq!(r.structured["values"], json!(["(21)"]), "{}", r.text);
            assert!(
                r.structured["locals"]
                    .to_string()
                    .contains(r#"{"name":"X","value":"21"}"#),
                "{}",
                r.text
            );
        }
        // None, and what it takes to have them.
        "clisp" => {
            assert!(
                note.starts_with("none: CLISP keeps no variables in compiled code"),
                "{}",
                r.text
            );
            assert_eq!(r.structured["nested"]["level"], 2, "{}", r.text);
            call(&mut s, 18, "debugger-restart", json!({"restart": "ABORT"}));
        }
        _ => assert!(!r.is_error, "{}", r.text),
    }
    assert!(lisp == "sbcl" || !note.contains("(debug 2)"), "{}", r.text);
    let r = call(
        &mut s,
        19,
        "debugger-restart",
        json!({"action": "return", "frame": cf, "values": ["5"]}),
    );
    match lisp {
        "ecl" => assert!(
            r.text.starts_with(
                "ECL cannot return a value from a frame: its Swank backend has no return-from-frame."
            ),
            "{}",
            r.text
        ),
        "clisp" => assert!(
            r.text.starts_with(&format!(
                "CLISP cannot return from frame {cf}: it is compiled code"
            )),
            "{}",
            r.text
        ),
        _ => {}
    }
    if lisp != "sbcl" {
        assert!(r.text.contains("still pending"), "{}", r.text);
        let r = call(&mut s, 20, "debugger-backtrace", json!({}));
        assert!(r.text.starts_with("[DEBUGGER level 1]"), "{}", r.text);
        assert!(r.text.contains("cf failed on 42"), "{}", r.text);
        let r = call(&mut s, 21, "debugger-restart", json!({"action": "abort"}));
        assert!(r.text.contains("abandoned"), "{}", r.text);
    }
    let r = eval(&mut s, 22, "(+ 2 2)");
    assert_eq!(r.text, "=> 4");
}

#[test]
fn debugger_parity_on_sbcl() {
    debugger_parity_on("sbcl");
}

#[test]
fn debugger_parity_on_ecl() {
    debugger_parity_on("ecl");
}

#[test]
fn debugger_parity_on_clisp() {
    debugger_parity_on("clisp");
}

/// ABCL's Swank backend evaluates no code in a frame and returns from or
/// restarts none: each is refused plainly, no nested level, the debugger
/// where it was (its frames still addressable), and `tools/list` says so.
/// A frame's locals are its arguments, and the answer says that. (One
/// test: ABCL starts a JVM.)
#[test]
fn debugger_on_abcl_refuses_what_its_backend_lacks() {
    if !lisp_installed("debugger_on_abcl_refuses_what_its_backend_lacks", "abcl") {
        return;
    }
    let mut s = lisp_server(&["--lisp", "abcl"]);
    let frame_tool = tool_description(&mut s, "debugger-frame");
    assert!(
        says_lacks(
            &frame_tool,
            "ABCL",
            "no code in a frame; locals: the arguments only"
        ),
        "{frame_tool}"
    );
    let restart_tool = tool_description(&mut s, "debugger-restart");
    assert!(
        says_lacks(
            &restart_tool,
            "ABCL",
            "no return from a frame; no frame restart; no stepping"
        ),
        "{restart_tool}"
    );
    let r = eval(&mut s, 1, WALK);
    assert!(!r.is_error, "{}", r.text);
    // Timed from the second entry (the JVM compiles the first's code).
    let _ = eval_with(&mut s, 20, "(walk-outer 20)", json!({"debug": true}));
    call(&mut s, 21, "debugger-restart", json!({"action": "abort"}));
    let started = std::time::Instant::now();
    let r = eval_with(&mut s, 2, "(walk-outer 20)", json!({"debug": true}));
    assert!(started.elapsed() < Duration::from_secs(1), "{}", r.text);
    assert!(r.text.starts_with("[DEBUGGER level 1]"), "{}", r.text);
    // The closing hint offers only what ABCL can do.
    assert!(r.text.ends_with("action abort, continue)."), "{}", r.text);
    let inner = frame_index(&r.structured, "WALK-INNER");
    let outer = frame_index(&r.structured, "WALK-OUTER");
    let r = call(
        &mut s,
        3,
        "debugger-frame",
        json!({"frame": inner, "code": "(list x)"}),
    );
    assert!(r.is_error, "{}", r.text);
    assert!(
        r.text.starts_with(
            "ABCL cannot evaluate code in a frame: its Swank backend has no eval-in-frame."
        ) && r.text.contains("stays at level 1"),
        "{}",
        r.text
    );
    assert!(r.structured.get("nested").is_none(), "{}", r.text);
    let r = call(&mut s, 4, "debugger-frame", json!({"frame": outer}));
    assert!(!r.is_error, "{}", r.text);
    assert!(r.text.contains("N = 20"), "{}", r.text);
    assert!(
        r.text.contains("(ABCL keeps a frame's arguments only"),
        "{}",
        r.text
    );
    let r = call(
        &mut s,
        5,
        "debugger-restart",
        json!({"action": "restart", "frame": outer}),
    );
    assert!(
        r.text
            .starts_with("ABCL cannot restart a frame: its Swank backend has no restart-frame.")
            && r.text.contains("still pending at the same level"),
        "{}",
        r.text
    );
    let r = call(&mut s, 6, "debugger-backtrace", json!({}));
    assert!(r.text.starts_with("[DEBUGGER level 1]"), "{}", r.text);
    assert!(r.text.contains("inner failed on 42"), "{}", r.text);
    let r = call(&mut s, 7, "debugger-restart", json!({"action": "abort"}));
    assert!(r.text.contains("abandoned"), "{}", r.text);
}

/// Code running in a frame counts as the debugger's use: with
/// `--debugger-idle-secs 2`, `(sleep 5)` in a frame is answered with its
/// value after 5 s (the idle abort used to unwind the debugger under it,
/// and the call was never answered), and the debugger is still there, to
/// be aborted 2 s after that call ended.
#[test]
fn frame_code_running_longer_than_the_idle_time_is_answered() {
    let mut s = lisp_server(&["--debugger-idle-secs", "2"]);
    let r = eval_with(&mut s, 1, "(error \"in use\")", json!({"debug": true}));
    assert!(r.text.starts_with("[DEBUGGER level 1]"), "{}", r.text);
    let started = std::time::Instant::now();
    s.send(
        &json!({"jsonrpc":"2.0","id":2,"method":"tools/call","params":{
        "name":"debugger-frame","arguments":{"code": "(sleep 5) :slept"}}}),
    );
    let msgs = s.collect_until(Duration::from_secs(45), |m| m["id"] == 2);
    let r = eval_support::reply_of(msgs.last().unwrap());
    let took = started.elapsed();
    assert!(!r.is_error, "{}", r.text);
    assert_eq!(r.structured["values"], json!([":SLEPT"]), "{}", r.text);
    assert!(took < Duration::from_secs(15), "took {took:?}");
    let r = call(&mut s, 3, "debugger-backtrace", json!({}));
    assert!(r.text.starts_with("[DEBUGGER level 1]"), "{}", r.text);
    std::thread::sleep(Duration::from_secs(4));
    let r = call(&mut s, 4, "debugger-backtrace", json!({}));
    assert!(
        r.is_error && r.text.contains("no pending debugger"),
        "{}",
        r.text
    );
    let r = eval(&mut s, 5, "(+ 2 3)");
    assert_eq!(r.text, "=> 5");
}
