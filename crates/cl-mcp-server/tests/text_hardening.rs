//! The text tools on adversarial input, through the built binary: runs of
//! stray closers, a line of hundreds of kilobytes, a form replaced line by
//! line, CR-only line endings. Each took tens of seconds or more (the
//! repair's columns searched back to the line start for every token; the
//! edit's diff compared the whole files) and is held here to a bound a
//! quadratic algorithm misses by far, in a debug build.

mod common;
mod eval_support;

use std::time::{Duration, Instant};

use common::Server;
use eval_support::{call, eval, lisp_server, reply_of};
use serde_json::{json, Value};

/// A server on a fresh project root.
fn server() -> (tempfile::TempDir, std::path::PathBuf, Server) {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    let s = Server::initialized(&[
        "--project-root",
        root.to_str().unwrap(),
        "--log-level",
        "error",
    ]);
    (dir, root, s)
}

fn write(s: &mut Server, id: i64, path: &str, content: &str) -> (eval_support::Reply, Duration) {
    let t = Instant::now();
    let r = call(
        s,
        id,
        "fs-write-file",
        json!({"path": path, "content": content}),
    );
    (r, t.elapsed())
}

#[test]
fn a_run_of_stray_closers_is_refused_at_once_and_nothing_is_written() {
    let (_d, root, mut s) = server();
    let text = format!("(defun f (x)\n  (g x))\n{}\n", ")".repeat(400_000));
    let (r, took) = write(&mut s, 1, "stray.lisp", &text);
    assert!(took < Duration::from_secs(20), "took {took:?}");
    assert!(r.is_error, "{}", r.text);
    assert!(
        r.text.contains("400000 parentheses with no partner"),
        "{}",
        r.text
    );
    assert!(r.text.contains("`(defun f` (line 1)"), "{}", r.text);
    assert!(r.text.contains("repairParens: false"), "{}", r.text);
    assert!(!root.join("stray.lisp").exists());
    // As it is, on request.
    let r = call(
        &mut s,
        2,
        "fs-write-file",
        json!({"path": "stray.lisp", "content": text, "repairParens": false}),
    );
    assert!(!r.is_error, "{}", r.text);
    assert_eq!(
        std::fs::read_to_string(root.join("stray.lisp")).unwrap(),
        text
    );
}

#[test]
fn a_long_line_is_repaired_in_linear_time_while_the_server_answers() {
    let (_d, root, mut s) = server();
    // One line of 300 kB with a closer too many, then a form.
    let line: String = std::iter::once("(list".to_string())
        .chain((0..37_500).map(|i| format!(" {i:>3} ")))
        .collect();
    let text = format!("{line}))\n\n(defun g ()\n  2)\n");
    let t = Instant::now();
    s.send(&json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": "fs-write-file", "arguments": {"path": "long.lisp", "content": text}}}));
    s.send(&json!({"jsonrpc": "2.0", "id": 2, "method": "ping"}));
    let msgs = s.collect_until(Duration::from_secs(60), |m| m.get("id") == Some(&json!(1)));
    let took = t.elapsed();
    let ids: Vec<&Value> = msgs.iter().filter_map(|m| m.get("id")).collect();
    assert_eq!(ids, [&json!(2), &json!(1)], "the ping waited for the write");
    assert!(took < Duration::from_secs(20), "took {took:?}");
    let r = reply_of(msgs.last().unwrap());
    assert!(!r.is_error, "{}", &r.text[..r.text.len().min(500)]);
    assert_eq!(
        std::fs::read_to_string(root.join("long.lisp")).unwrap(),
        format!("{line})\n\n(defun g ()\n  2)\n")
    );
    // The answer shows the change, not the line.
    assert!(r.text.len() < 2_000, "{} bytes", r.text.len());
    assert!(r.text.contains("removed \")\" at line 1"), "{}", r.text);
}

#[test]
fn replacing_a_long_form_line_by_line_answers_with_a_short_diff() {
    let (_d, root, mut s) = server();
    let n = 20_000;
    let old = format!(
        "(defun g (x)\n{}  x)\n\n(defun h () 1)\n",
        "  a\n".repeat(n)
    );
    std::fs::write(root.join("big.lisp"), &old).unwrap();
    let content = format!("(defun g (x)\n{}  x)", "  b\n".repeat(n));
    let t = Instant::now();
    let r = call(
        &mut s,
        1,
        "lisp-edit-form",
        json!({"path": "big.lisp", "formType": "defun", "formName": "g",
               "operation": "replace", "content": content}),
    );
    let took = t.elapsed();
    assert!(took < Duration::from_secs(15), "took {took:?}");
    assert!(!r.is_error, "{}", r.text);
    assert!(r.text.len() < 20_000, "{} bytes of answer", r.text.len());
    assert!(r.text.contains("more diff lines not shown"), "{}", r.text);
    let diff = r.structured["diff"].as_str().unwrap();
    assert!(
        diff.starts_with("--- a/big.lisp\n+++ b/big.lisp\n@@ -1,"),
        "{diff}"
    );
    assert_eq!(
        std::fs::read_to_string(root.join("big.lisp")).unwrap(),
        format!("{content}\n\n(defun h () 1)\n")
    );
}

#[test]
fn cr_only_lines_are_refused_not_swallowed() {
    let (_d, root, mut s) = server();
    let text = "(defun f (x)\r  (g x)\r\r(defun h () 1)\r";
    let (r, _) = write(&mut s, 1, "mac.lisp", text);
    assert!(r.is_error, "{}", r.text);
    assert!(r.text.contains("carriage return alone"), "{}", r.text);
    assert!(!root.join("mac.lisp").exists());
    // lisp-edit-form's content the same way.
    std::fs::write(root.join("e.lisp"), "(defun f (x)\n  x)\n").unwrap();
    let r = call(
        &mut s,
        2,
        "lisp-edit-form",
        json!({"path": "e.lisp", "formType": "defun", "formName": "f",
               "operation": "replace", "content": text}),
    );
    assert!(r.is_error, "{}", r.text);
    assert!(r.text.contains("carriage return alone"), "{}", r.text);
    assert_eq!(
        std::fs::read_to_string(root.join("e.lisp")).unwrap(),
        "(defun f (x)\n  x)\n"
    );
}

#[test]
fn evaluate_lisp_with_stray_closers_answers_its_repair_note_quickly() {
    let mut s = lisp_server(&[]);
    assert_eq!(eval(&mut s, 1, "(+ 1 2)").text, "=> 3");
    // Far more stray closers than a repair places: refused at once.
    let t = Instant::now();
    let code = format!("(+ 1 2){}", ")".repeat(300_000));
    let r = eval(&mut s, 2, &code);
    assert!(
        t.elapsed() < Duration::from_secs(20),
        "took {:?}",
        t.elapsed()
    );
    assert!(r.text.contains("[REPAIR]"), "{}", r.text);
    assert!(
        r.text.contains("300000 parentheses with no partner"),
        "{}",
        r.text
    );
    // A line of 300 kB with one closer too many: repaired, and the note
    // does not repeat the code.
    let line: String = (0..50_000).map(|i| format!(" {i:>4}")).collect();
    let code = format!("(list {line}))\n");
    let t = Instant::now();
    let r = eval(&mut s, 3, &code);
    assert!(
        t.elapsed() < Duration::from_secs(20),
        "took {:?}",
        t.elapsed()
    );
    assert!(
        r.text.contains("[REPAIR] Only the extra"),
        "{}",
        &r.text[..r.text.len().min(500)]
    );
    assert!(r.text.len() < 4_000, "{} bytes", r.text.len());
    // The next evaluation waits for nothing.
    let t = Instant::now();
    assert_eq!(eval(&mut s, 4, "(+ 2 3)").text, "=> 5");
    assert!(
        t.elapsed() < Duration::from_secs(5),
        "took {:?}",
        t.elapsed()
    );
}

/// Files of openers that never close, one per line: each was read once per
/// line by every tool that reads the file (a `(` file of 0.2 MB took 36 s
/// for `clgrep-signatures`; a `#[` file of 120 kB took 4 s for each tool).
#[test]
fn files_of_unclosed_lines_are_read_once_by_every_tool() {
    let (_d, root, mut s) = server();
    std::fs::write(root.join("lists.lisp"), "(\n".repeat(200_000)).unwrap();
    std::fs::write(root.join("brackets.lisp"), "#[\n".repeat(100_000)).unwrap();
    std::fs::write(root.join("interpol.lisp"), "(f #?<\n".repeat(50_000)).unwrap();
    let mut id = 0;
    for file in ["lists.lisp", "brackets.lisp", "interpol.lisp"] {
        for (tool, args) in [
            ("lisp-check-parens", json!({"path": file})),
            ("clgrep-signatures", json!({"path": file})),
            ("lisp-read-file", json!({"path": file})),
        ] {
            id += 1;
            let t = Instant::now();
            let r = call(&mut s, id, tool, args);
            let took = t.elapsed();
            assert!(
                took < Duration::from_secs(20),
                "{tool} on {file} took {took:?}"
            );
            assert!(
                r.text.len() < 200_000,
                "{tool} on {file}: {} bytes",
                r.text.len()
            );
        }
    }
    // What the check says of the `(` file: the first line is not closed.
    let r = call(
        &mut s,
        99,
        "lisp-check-parens",
        json!({"path": "lists.lisp"}),
    );
    assert!(r.text.contains("line 1"), "{}", r.text);
}

/// Many forms on one line (minified code, a CR-only file) are shown each
/// from its own start, and paging stops inside the line: the view printed
/// the line from its start again for every form (10 MB for 2 MB of text)
/// and never stopped inside a line.
#[test]
fn many_forms_on_one_line_are_shown_once_each_and_paged() {
    let (_d, root, mut s) = server();
    let line: String = (0..20_000).map(|i| format!("(f {i}) ")).collect();
    std::fs::write(
        root.join("one-line.lisp"),
        format!("{line}\n(defun g () 2)\n"),
    )
    .unwrap();
    let r = call(
        &mut s,
        1,
        "lisp-read-file",
        json!({"path": "one-line.lisp", "limit": 50}),
    );
    assert!(!r.is_error, "{}", r.text);
    assert!(r.text.len() < 4_000, "{} bytes:\n{}", r.text.len(), r.text);
    assert!(r.text.contains("1: (f 0)\n"), "{}", r.text);
    assert!(r.text.contains("1: (f 1)\n"), "{}", r.text);
    assert!(r.text.contains("19950 more items on line 1"), "{}", r.text);
    let meta = &r.structured["meta"];
    assert_eq!(meta["nextOffset"], json!(1), "{meta}");
    assert_eq!(meta["truncated"], json!(true), "{meta}");
    // The next window is the next line.
    let r = call(
        &mut s,
        2,
        "lisp-read-file",
        json!({"path": "one-line.lisp", "offset": 1, "limit": 50}),
    );
    assert!(r.text.contains("2: (defun g () 2)"), "{}", r.text);
    // A name that thousands of forms share is answered with a few of them.
    std::fs::write(root.join("alike.lisp"), "(defun f () 1)\n".repeat(20_000)).unwrap();
    let r = call(
        &mut s,
        3,
        "lisp-edit-form",
        json!({"path": "alike.lisp", "formType": "defun", "formName": "f",
               "operation": "replace", "content": "(defun f () 2)"}),
    );
    assert!(r.is_error, "{}", r.text);
    assert!(
        r.text.contains("20000 forms match"),
        "{}",
        &r.text[..r.text.len().min(500)]
    );
    assert!(r.text.len() < 4_000, "{} bytes", r.text.len());
}
