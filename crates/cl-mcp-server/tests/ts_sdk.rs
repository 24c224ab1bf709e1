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

#[test]
fn official_typescript_sdk_drives_every_family_over_stdio_and_http() {
    js_support::installed("@modelcontextprotocol/sdk/package.json");
    js_support::installed("@modelcontextprotocol/client/package.json");
    let root = env!("CARGO_MANIFEST_DIR");
    let http = common::Listening::start(&["http", "--bind", "127.0.0.1:0", "--project-root", root]);
    let stdout = js_support::run_client(
        "ts_sdk_client.mjs",
        &[common::BIN, root, &http.address],
        "TypeScript SDK client",
    );
    drop(http);
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
    js_support::installed("@modelcontextprotocol/client/package.json");
    js_support::installed("@modelcontextprotocol/ext-tasks/package.json");
    let http = common::Listening::start(&["http", "--bind", "127.0.0.1:0"]);
    let stdout = js_support::run_client("ts_tasks_client.mjs", &[&http.address], "Tasks client");
    drop(http);
    assert!(stdout.contains("tasks client ok: 6 tasks"), "{stdout}");
}
