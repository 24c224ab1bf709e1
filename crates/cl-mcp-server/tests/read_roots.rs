//! File tools may read an ASDF system's source directory once the image
//! knows the system, and still nothing else outside
//! the project root.

mod common;

use common::{tool_is_error, tool_text, Server};
use serde_json::json;

#[test]
fn loaded_systems_sources_become_readable() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = Server::initialized(&["--project-root", dir.path().to_str().unwrap()]);
    let source = std::fs::canonicalize("/usr/share/common-lisp/source/alexandria")
        .expect("Debian's cl-alexandria is installed");
    let package = std::fs::read_dir(&source)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|x| x == "asd"))
        .expect("alexandria's .asd");
    let path = package.to_str().unwrap();
    let r = s.call_tool(1, "fs-read-file", json!({"path": path}));
    assert!(
        tool_is_error(&r),
        "outside the root before the system is loaded: {r}"
    );

    let r = s.call_tool(2, "asdf-load-system", json!({"system": "alexandria"}));
    assert!(!tool_is_error(&r), "{}", tool_text(&r));
    let r = s.call_tool(3, "fs-read-file", json!({"path": path}));
    assert!(!tool_is_error(&r), "{}", tool_text(&r));
    assert!(tool_text(&r).contains("defsystem"));
    let r = s.call_tool(4, "lisp-read-file", json!({"path": path}));
    assert!(!tool_is_error(&r), "{}", tool_text(&r));
    // Writes stay inside the project root.
    let r = s.call_tool(5, "fs-write-file", json!({"path": path, "content": "x"}));
    assert!(tool_is_error(&r));
    // Other places outside the root stay closed.
    let r = s.call_tool(6, "fs-read-file", json!({"path": "/etc/passwd"}));
    assert!(tool_is_error(&r));
}
