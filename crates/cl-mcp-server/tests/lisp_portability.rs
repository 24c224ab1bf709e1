//! The Lisp helpers keep to portable Common Lisp plus Swank's backend, with
//! SBCL specifics behind one layer: they load and work under ECL too.

use std::process::Command;

#[test]
fn helpers_work_under_ecl() {
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/lisp/tests/portable-smoke.lisp"
    );
    let out = Command::new("ecl")
        .args(["--norc", "--load", script])
        .output()
        .unwrap_or_else(|e| {
            panic!("cannot run ecl ({e}): apt-get install ecl (scripts/setup.sh does)")
        });
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("PORTABLE-SMOKE OK"),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
