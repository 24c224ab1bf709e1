//! Shared by the tests that drive the built server with official JS clients
//! (the TypeScript SDK, the MCP Inspector CLI): where `scripts/setup.sh`
//! installed them, and the Node it installed beside them.
#![allow(dead_code)]

use std::path::PathBuf;

/// The directory whose `node_modules` holds the JS clients: `CL_MCP_JS_DIR`
/// if set, else `target/js` at the repository root (where
/// `scripts/setup.sh` installs `tests/js/package.json`).
pub fn js_dir() -> PathBuf {
    match std::env::var_os("CL_MCP_JS_DIR") {
        Some(dir) => PathBuf::from(dir),
        None => PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../target/js")),
    }
}

/// `<js_dir>/bin/node`; panics, saying how to install it, when it is missing.
pub fn node() -> PathBuf {
    let node = js_dir().join("bin/node");
    assert!(
        node.is_file(),
        "Node is not installed at {}: run scripts/setup.sh (it installs Node and the MCP JS \
         clients from crates/cl-mcp-server/tests/js/package.json under target/js), \
         or point CL_MCP_JS_DIR at such a directory",
        node.display()
    );
    node
}

/// The file of an installed package, panicking with the same advice when
/// `setup.sh` has not installed it (e.g. an older `target/js`).
pub fn installed(relative: &str) -> PathBuf {
    let path = js_dir().join("node_modules").join(relative);
    assert!(
        path.exists(),
        "{} is missing: run scripts/setup.sh to install crates/cl-mcp-server/tests/js/package.json \
         under {}",
        path.display(),
        js_dir().display()
    );
    path
}

/// Runs the client script `script` (under `tests/sdk`) with Node, giving it
/// the JS directory and then `args`; panics with its output unless it
/// succeeds, naming it `what`. Returns its stdout.
pub fn run_client(script: &str, args: &[&str], what: &str) -> String {
    let node = node();
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/sdk")
        .join(script);
    let out = std::process::Command::new(&node)
        .arg(path)
        .arg(js_dir())
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", node.display()));
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{what} failed:\n{stdout}\n{stderr}");
    stdout
}
