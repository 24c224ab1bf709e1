//! A real client nobody here wrote: the official MCP Python SDK (`pip install
//! mcp`) connects to the built binary over stdio in both eras, lists the tools
//! (validating their schemas) and calls one. CI installs the SDK; without it
//! this test fails, saying how to install it.

mod common;
mod eval_support;

use std::process::Command;

#[test]
fn official_python_sdk_connects_lists_and_calls() {
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/sdk/python_sdk_client.py"
    );
    let python = std::env::var("PYTHON").unwrap_or_else(|_| "python3".into());
    let probe = Command::new(&python)
        .args(["-c", "import mcp"])
        .output()
        .unwrap_or_else(|e| panic!("cannot run {python}: {e}"));
    assert!(
        probe.status.success(),
        "the MCP Python SDK is not installed: run `{python} -m pip install mcp` (.ci/run does)"
    );
    let root = env!("CARGO_MANIFEST_DIR");
    let http = common::Listening::start(&["http", "--bind", "127.0.0.1:0", "--project-root", root]);
    let url = http.address.clone();
    // An image of the user's, for attach mode: an application thread that
    // hits an error once told to, and waits in the debugger.
    let user = eval_support::UserLisp::start_with(&[
        "(defvar cl-user::*go* nil)",
        "(defvar cl-user::*sdk-served* nil)",
        "(sb-thread:make-thread (lambda () (loop until cl-user::*go* do (sleep 0.02)) \
         (setf cl-user::*sdk-served* (restart-case (error \"sdk handler failed\") \
           (use-value (v) v)))) :name \"sdk-user\")",
    ]);
    let swank = format!("127.0.0.1:{}", user.port);
    // The first start as the SDK makes it: its own minimal environment
    // and an empty cache.
    let cold = tempfile::tempdir().unwrap();
    let out = Command::new(&python)
        .env("CL_MCP_COLD_CACHE", cold.path())
        .args([
            script,
            env!("CARGO_BIN_EXE_cl-mcp-server"),
            root,
            &url,
            &swank,
        ])
        .output()
        .unwrap();
    drop(http);
    drop(user);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "SDK client failed:\n{stdout}\n{stderr}"
    );
    for transport in ["stdio", "http"] {
        assert!(
            stdout.contains(&format!("{transport} auto: protocol 2026-07-28")),
            "{stdout}"
        );
        assert!(
            stdout.contains(&format!("{transport} legacy: protocol 2025-")),
            "{stdout}"
        );
    }
    assert!(
        stdout.contains("attached: a user's thread taken over"),
        "{stdout}"
    );
    assert!(
        stdout.contains("debugger limits: exhausted stack refused"),
        "{stdout}"
    );
    assert!(
        stdout.contains("test run: ") && stdout.contains("failures at their checks"),
        "{stdout}"
    );
    assert!(
        stdout.contains("loose file: 2 failures at their checks"),
        "{stdout}"
    );
    assert!(
        stdout.contains("coverage: calc.lisp:6 not executed; report"),
        "{stdout}"
    );
    assert!(
        stdout.contains("several images: matrix of sbcl, ecl, clisp"),
        "{stdout}"
    );
    for lisp in ["clisp", "sbcl"] {
        assert!(
            stdout.contains(&format!("cold start on {lisp}: SDK environment")),
            "{stdout}"
        );
    }
}
