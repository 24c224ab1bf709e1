//! Runs the Lisp-side test suite of the helpers (`lisp/tests/run.lisp`) in a
//! fresh SBCL with Swank loaded: a fast safety net for the Lisp code that does
//! not depend on the Rust image supervisor.

use std::path::PathBuf;
use std::process::Command;

#[test]
fn lisp_helpers_pass_their_own_tests() {
    let lisp_dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("lisp");
    let sbcl = std::env::var("CL_MCP_LISP").unwrap_or_else(|_| "sbcl".to_string());
    let output = Command::new(&sbcl)
        .args([
            "--non-interactive",
            "--no-userinit",
            "--no-sysinit",
            "--load",
        ])
        .arg(lisp_dir.join("tests/load.lisp"))
        .arg("--load")
        .arg(lisp_dir.join("tests/run.lisp"))
        .current_dir(&lisp_dir)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {sbcl}: {e} (install SBCL or set CL_MCP_LISP)"));
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "Lisp-side tests failed ({}):\n--- stdout ---\n{stdout}\n--- stderr ---\n{stderr}",
        output.status
    );
    assert!(
        stdout.contains(" checks, 0 failures"),
        "the test script did not report its summary:\n{stdout}"
    );
}
