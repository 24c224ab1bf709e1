//! A real client nobody here wrote: the official MCP TypeScript SDK
//! (`@modelcontextprotocol/sdk`, installed by `scripts/setup.sh` under
//! `target/js`) connects to the built binary over stdio and Streamable HTTP
//! and runs `tests/sdk/ts_sdk_client.mjs`: evaluate-lisp in every outcome,
//! a tool of each family, a resource, a prompt and completions, with the
//! SDK validating every tool result against the tool's `outputSchema`.
//! Without Node this test fails, saying how to install it.

mod common;
mod js_support;

use std::process::Command;

#[test]
fn official_typescript_sdk_drives_every_family_over_stdio_and_http() {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/sdk/ts_sdk_client.mjs");
    let node = js_support::node();
    js_support::installed("@modelcontextprotocol/sdk/package.json");
    let root = env!("CARGO_MANIFEST_DIR");
    let http = common::Listening::start(&["http", "--bind", "127.0.0.1:0", "--project-root", root]);
    let out = Command::new(&node)
        .arg(script)
        .arg(js_support::js_dir())
        .args([common::BIN, root, &http.address])
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", node.display()));
    drop(http);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "TypeScript SDK client failed:\n{stdout}\n{stderr}"
    );
    assert!(stdout.contains("@modelcontextprotocol/sdk 1."), "{stdout}");
    for transport in ["stdio", "http"] {
        assert!(
            stdout.contains(&format!("{transport} legacy: protocol 2025-11-25,")),
            "{stdout}"
        );
    }
    // Eleven checked results per transport (see the client); fewer means a
    // call went unvalidated or was skipped.
    let validated: usize = stdout
        .lines()
        .find_map(|l| {
            l.strip_suffix(" tool results validated against their outputSchema by the SDK")
        })
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no validation count:\n{stdout}"));
    assert!(
        validated >= 22,
        "only {validated} results validated:\n{stdout}"
    );
}
