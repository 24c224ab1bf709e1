//! Attacks on the Lisp image through the tools, against a real SBCL
//! (issue 10, items 7, 8, 9, 13): deeply nested text for the reader, a
//! flood of image output into the log, evaluations that cannot be
//! interrupted, and a stopped image process.

mod common;
mod eval_support;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::Server;
use eval_support::{call, eval, eval_with, lisp_server};
use serde_json::json;

fn nested(head: &str, depth: usize) -> String {
    format!(
        "{}1{}",
        format!("({head} ").repeat(depth),
        ")".repeat(depth)
    )
}

#[test]
fn deeply_nested_text_is_refused_before_the_reader_and_the_image_lives() {
    let mut s = lisp_server(&[]);
    let r = eval(&mut s, 1, "(defvar *hardening-state* 42)");
    assert!(!r.is_error, "{}", r.text);

    let deep = nested("progn", 20_000);
    // Twice: the second call used to kill the image (guard page not reset).
    for id in [2, 3] {
        let r = call(&mut s, id, "code-macroexpand", json!({"form": deep}));
        assert!(r.is_error, "{}", r.text);
        assert!(r.text.contains("nests 20000 levels"), "{}", r.text);
        assert!(r.text.contains("at most 1000"), "{}", r.text);
        assert!(!r.text.contains("Lisp helpers"), "{}", r.text);
    }
    let r = eval(&mut s, 4, &deep);
    assert!(
        r.is_error && r.text.contains("nests 20000 levels"),
        "{}",
        r.text
    );
    let r = eval(&mut s, 5, &format!("{}x", "'".repeat(50_000)));
    assert!(
        r.is_error && r.text.contains("nests 50000 levels"),
        "{}",
        r.text
    );
    let r = call(
        &mut s,
        6,
        "code-describe",
        json!({"symbol": nested("a", 5000)}),
    );
    assert!(
        r.is_error && r.text.contains("nests 5000 levels"),
        "{}",
        r.text
    );

    // Within the bound, deep forms still work.
    let r = call(
        &mut s,
        7,
        "code-macroexpand",
        json!({"form": nested("progn", 500)}),
    );
    assert!(!r.is_error, "{}", r.text);
    let r = eval(&mut s, 12, "*hardening-state*");
    assert_eq!(r.text, "=> 42", "the image and its state survived");
}

#[test]
fn image_output_floods_are_rate_limited_in_the_log() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("server.log");
    let cache = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("cl-mcp-server-test-cache");
    let cache = cache.to_string_lossy().into_owned();
    let mut s = Server::start_with_stderr(
        &[],
        &[("CL_MCP_CACHE_DIR", cache.as_str())],
        Stdio::from(std::fs::File::create(&log).unwrap()),
    );
    let r = s.request(json!({"jsonrpc":"2.0","id":0,"method":"initialize","params":{
        "protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"test","version":"1"}}}));
    assert!(r.get("result").is_some(), "{r}");
    s.send(&json!({"jsonrpc":"2.0","method":"notifications/initialized"}));
    let r = eval(&mut s, 1, "(+ 1 1)");
    assert_eq!(r.text, "=> 2");
    let before = std::fs::metadata(&log).unwrap().len();

    // 3 s of write-line from a thread of its own, plus one 1 MB line.
    let r = eval(
        &mut s,
        2,
        "(sb-thread:make-thread
           (lambda ()
             (write-line (make-string 1000000 :initial-element #\\x) *terminal-io*)
             (let ((end (+ (get-internal-real-time) (* 3 internal-time-units-per-second))))
               (loop while (< (get-internal-real-time) end)
                     do (write-line \"flood flood flood flood flood\" *terminal-io*)))
             (write-line \"flood over\" *terminal-io*)
             (finish-output *terminal-io*)))
         :started",
    );
    assert_eq!(r.text, "=> :STARTED");
    std::thread::sleep(Duration::from_secs(5));
    let r = eval(&mut s, 3, "(+ 2 2)");
    assert_eq!(r.text, "=> 4", "the server still answers");
    let text = std::fs::read_to_string(&log).unwrap();
    let grown = text.len() as u64 - before;
    assert!(text.contains("flood flood"), "the first lines are logged");
    assert!(text.contains("lines suppressed"), "the rest are counted");
    assert!(grown < 1_000_000, "the log grew by {grown} bytes");
    let longest = text.lines().map(str::len).max().unwrap_or(0);
    assert!(longest < 10_000, "a log line of {longest} bytes");
    assert!(text.contains("[line cut: "), "the long line was cut");
}

#[test]
fn uninterruptible_evaluations_do_not_wedge_the_session() {
    let mut s = lisp_server(&[]);
    let r = eval(&mut s, 1, "(defvar *hardening-kept* :kept)");
    assert!(!r.is_error, "{}", r.text);

    // Printing the result runs a looping PRINT-OBJECT: interrupted like
    // evaluation, within the timeout.
    let r = eval(
        &mut s,
        2,
        "(defstruct hardening-looper) (defmethod print-object ((o hardening-looper) s) (loop))",
    );
    assert!(!r.is_error, "{}", r.text);
    let started = Instant::now();
    let r = eval_with(
        &mut s,
        3,
        "(make-hardening-looper)",
        json!({"timeoutSeconds": 1}),
    );
    assert!(r.is_error, "{}", r.text);
    assert_eq!(r.structured["interrupted"], json!(true), "{}", r.text);
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );

    // Code that truly cannot be interrupted: the session moves on to a
    // fresh evaluation thread, with the image's state.
    for (id, code) in [
        (4, "(sb-sys:without-interrupts (loop))"),
        (6, "(unwind-protect (loop) (loop))"),
    ] {
        let r = eval_with(&mut s, id, code, json!({"timeoutSeconds": 1}));
        assert!(r.is_error, "{}", r.text);
        assert!(r.text.contains("cannot be interrupted"), "{}", r.text);
        assert!(r.text.contains("fresh thread"), "{}", r.text);
        assert!(r.text.contains("image-restart"), "{}", r.text);
        // What the stuck thread costs: a loop uses (nearly) a whole core.
        assert!(
            r.text.contains("busiest thread (OS thread ") && r.text.contains("% of a core"),
            "{}",
            r.text
        );
        let started = Instant::now();
        let r = eval(&mut s, id + 1, "*hardening-kept*");
        assert_eq!(r.text, "=> :KEPT", "state kept, next call answers");
        assert!(
            started.elapsed() < Duration::from_secs(3),
            "{:?}",
            started.elapsed()
        );
    }
    // The stuck threads burn CPU: stop the image.
    let r = call(&mut s, 8, "image-restart", json!({}));
    assert!(!r.is_error, "{}", r.text);
}

#[test]
fn a_stopped_image_is_described_as_stopped() {
    let mut s = lisp_server(&[]);
    let r = call(&mut s, 1, "image-info", json!({}));
    let pid = r.structured["pid"].as_i64().unwrap().to_string();
    let signal = |sig: &str| {
        assert!(Command::new("kill")
            .args([sig, pid.as_str()])
            .status()
            .unwrap()
            .success());
    };
    signal("-STOP");
    let r = eval_with(&mut s, 2, "(+ 1 2)", json!({"timeoutSeconds": 1}));
    signal("-CONT");
    assert!(r.is_error, "{}", r.text);
    assert!(r.text.contains("is stopped"), "{}", r.text);
    assert!(!r.text.contains("without interrupts"), "{}", r.text);
    let r = eval(&mut s, 3, "(+ 2 3)");
    assert_eq!(r.text, "=> 5", "resumed, the image answers");
}

#[test]
fn stack_exhaustion_in_macroexpansion_leaves_the_image_alive() {
    let mut s = lisp_server(&[]);
    let r = eval(&mut s, 1, "(defvar *hardening-state* 42)");
    assert!(!r.is_error, "{}", r.text);
    let r = eval(
        &mut s,
        2,
        "(defmacro hardening-deep (n) (if (zerop n) 0 `(1+ (hardening-deep ,(1- n)))))",
    );
    assert!(!r.is_error, "{}", r.text);
    for id in [3, 4] {
        let r = call(
            &mut s,
            id,
            "code-macroexpand",
            json!({"form": "(hardening-deep 1000000)"}),
        );
        assert!(r.is_error, "{}", r.text);
        assert!(!r.text.contains("Lisp helpers"), "{}", r.text);
    }
    let r = eval(&mut s, 5, "*hardening-state*");
    assert_eq!(r.text, "=> 42", "the image and its state survived");
}

#[test]
fn memory_limit_turns_a_huge_allocation_into_a_lisp_error() {
    let mut s = lisp_server(&["--memory-limit", "512"]);
    // The runtime's heap is 2 × 512 + 256 MiB: room for the collections
    // that find the soft limit passed.
    let r = eval(
        &mut s,
        1,
        "(defvar *memory-kept* :yes) (sb-ext:dynamic-space-size)",
    );
    assert_eq!(r.text, format!("=> {}", 1280 * 1024 * 1024), "{}", r.text);
    // More than the runtime's heap: SBCL's own error.
    let r = eval(
        &mut s,
        2,
        "(length (make-array (* 2000 1024 1024) :element-type '(unsigned-byte 8)))",
    );
    assert!(r.is_error, "{}", r.text);
    assert!(r.text.contains("HEAP-EXHAUSTED"), "{}", r.text);
    // Within the heap but more than the limit, and kept: the soft limit.
    let r = eval_with(
        &mut s,
        3,
        "(let ((a (make-array (* 700 1024 1024) :element-type '(unsigned-byte 8)))) \
           (setf (aref a 0) 1) (length a))",
        json!({"timeoutSeconds": 240}),
    );
    assert!(r.is_error, "{}", r.text);
    assert!(r.text.contains("MEMORY-LIMIT-EXCEEDED"), "{}", r.text);
    let r = eval(&mut s, 4, "*memory-kept*");
    assert_eq!(r.text, "=> :YES", "the image and its state survived");
    // Too small a limit is a start-up error, not a broken image.
    let out = std::process::Command::new(common::BIN)
        .args(["--memory-limit", "64"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--memory-limit"));
}

/// A runaway allocation of many small objects (issue 19, item 8): SBCL
/// would run out of heap inside a collection, which kills the image; the
/// soft limit stops the evaluation first and the image lives on.
#[test]
fn memory_limit_stops_a_runaway_evaluation_and_keeps_the_image() {
    let mut s = lisp_server(&["--memory-limit", "512"]);
    let r = eval(&mut s, 1, "(defun memory-kept () :still-here)");
    assert!(!r.is_error, "{}", r.text);
    let pid = call(&mut s, 2, "image-info", json!({})).structured["pid"].clone();
    let started = Instant::now();
    let r = eval_with(
        &mut s,
        3,
        "(let (l) (loop (push (make-list 1000) l)))",
        json!({"timeoutSeconds": 240}),
    );
    eprintln!("stopped after {:?}: {}", started.elapsed(), r.text);
    assert!(r.is_error, "{}", r.text);
    assert!(
        r.text.contains("MEMORY-LIMIT-EXCEEDED")
            && r.text.contains("512 MB memory limit (--memory-limit)")
            && r.text.contains("definitions are kept"),
        "{}",
        r.text
    );
    let r = eval(&mut s, 4, "(memory-kept)");
    assert_eq!(r.text, "=> :STILL-HERE", "{}", r.text);
    let r = eval(&mut s, 5, "(+ 1 2)");
    assert_eq!(r.text, "=> 3", "{}", r.text);
    let info = call(&mut s, 6, "image-info", json!({}));
    assert_eq!(info.structured["pid"], pid, "the same image");
    // The data was freed: the heap holds about what it held at the start.
    let r = eval(&mut s, 7, "(< (sb-kernel:dynamic-usage) (* 200 1024 1024))");
    assert_eq!(r.text, "=> T", "{}", r.text);
}

/// An image that dies of heap exhaustion says so in the result of the call
/// it died in, with SBCL's last words and the user's function from the
/// backtrace SBCL printed (issue 19, item 7).
#[test]
fn a_heap_exhaustion_death_names_its_cause_and_the_users_function() {
    let mut s = lisp_server(&["--lisp-arg=--dynamic-space-size", "--lisp-arg=256"]);
    // A recoverable exhaustion (HEAP-EXHAUSTED-ERROR) is taken and the
    // consing goes on, until SBCL runs out of heap inside a collection.
    let r = eval_with(
        &mut s,
        1,
        "(defun hog () \
           (let (l) \
             (loop (handler-case (loop (push (make-list 1000) l)) \
                     (storage-condition () nil))))) \
         (hog)",
        json!({"timeoutSeconds": 240}),
    );
    assert!(r.is_error, "{}", r.text);
    assert!(
        r.text.contains("the Lisp image died (heap exhausted"),
        "{}",
        r.text
    );
    // SBCL's own words: its game-over line, or (when its report of the
    // full heap fails an assertion of its own, "GC invariant lost") the
    // line that began the report.
    assert!(
        r.text.contains("Heap exhausted, game over.")
            || r.text.contains("Heap exhausted during garbage collection"),
        "{}",
        r.text
    );
    assert!(
        r.text.contains("fatal error encountered in SBCL"),
        "{}",
        r.text
    );
    assert!(r.text.contains("In your code"), "{}", r.text);
    assert!(r.text.contains("CL-USER::HOG"), "{}", r.text);
    let r = eval(&mut s, 2, "(+ 1 2)");
    assert!(r.text.contains("=> 3"), "a fresh image: {}", r.text);
}

/// SBCL's runtime catches SIGABRT and exits with status 1: the result says
/// it was aborted, not just "exit status 1".
#[test]
fn a_sigabrt_death_is_named() {
    let mut s = lisp_server(&[]);
    let r = eval(
        &mut s,
        1,
        // raise(3): the signal goes to this thread (kill(2) to the process
        // goes to the main thread, and the call could return first).
        "(sb-alien:alien-funcall \
           (sb-alien:extern-alien \"raise\" (function sb-alien:int sb-alien:int)) 6) \
         (sleep 10)",
    );
    assert!(r.is_error, "{}", r.text);
    assert!(
        r.text
            .contains("the Lisp image died (aborted: the process received SIGABRT"),
        "{}",
        r.text
    );
    assert!(r.text.contains("SIGABRT received."), "{}", r.text);
    let r = eval(&mut s, 2, "(+ 1 2)");
    assert!(r.text.contains("=> 3"), "a fresh image: {}", r.text);
}
