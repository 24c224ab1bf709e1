//! A real client nobody here wrote: the official MCP TypeScript SDK, both
//! generations (`@modelcontextprotocol/sdk` 1.x, handshake era only, and
//! `@modelcontextprotocol/client` 2.x, both eras), installed by
//! `scripts/setup.sh` under `target/js`, connects to the built binary over
//! stdio and Streamable HTTP and runs `tests/sdk/ts_sdk_client.mjs`:
//! evaluate-lisp in every outcome, a tool of each family, a resource, a
//! prompt and completions, with the SDK validating every tool result against
//! the tool's `outputSchema`. Without Node this test fails, saying how to
//! install it.

mod common;
mod js_support;

use std::process::Command;

#[test]
fn official_typescript_sdk_drives_every_family_over_stdio_and_http() {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/sdk/ts_sdk_client.mjs");
    let node = js_support::node();
    js_support::installed("@modelcontextprotocol/sdk/package.json");
    js_support::installed("@modelcontextprotocol/client/package.json");
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
    for transport in ["stdio", "http"] {
        for (sdk, mode, protocol) in [
            ("@modelcontextprotocol/sdk 1.", "legacy", "2025-11-25"),
            ("@modelcontextprotocol/client 2.", "legacy", "2025-11-25"),
            ("@modelcontextprotocol/client 2.", "auto", "2026-07-28"),
        ] {
            let line = stdout
                .lines()
                .find(|l| l.starts_with(sdk) && l.contains(&format!(" {transport} {mode}: ")))
                .unwrap_or_else(|| panic!("no {sdk} {transport} {mode} run:\n{stdout}"));
            assert!(line.contains(&format!("protocol {protocol},")), "{line}");
        }
    }
    // Eleven checked results per run (see the client); fewer means a call
    // went unvalidated or was skipped.
    let validated: usize = stdout
        .lines()
        .find_map(|l| l.strip_suffix(" tool results validated against their outputSchema"))
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no validation count:\n{stdout}"));
    assert!(
        validated >= 66,
        "only {validated} results validated:\n{stdout}"
    );
}

/// The official MCP Tasks client (`@modelcontextprotocol/ext-tasks`) over
/// the TypeScript SDK 2.x drives the 2026-07-28 tasks extension over HTTP
/// (`tests/sdk/ts_tasks_client.mjs`): long evaluations as tasks, input
/// inside and before a task, tool and protocol errors, cancellation.
#[test]
fn official_tasks_client_drives_the_tasks_extension() {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/sdk/ts_tasks_client.mjs");
    let node = js_support::node();
    js_support::installed("@modelcontextprotocol/client/package.json");
    js_support::installed("@modelcontextprotocol/ext-tasks/package.json");
    let http = common::Listening::start(&["http", "--bind", "127.0.0.1:0"]);
    let out = Command::new(&node)
        .arg(script)
        .arg(js_support::js_dir())
        .arg(&http.address)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", node.display()));
    drop(http);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "Tasks client failed:\n{stdout}\n{stderr}"
    );
    assert!(
        stdout.contains("tasks client ok: 6 tasks"),
        "{stdout}\n{stderr}"
    );
}
