//! The official MCP Inspector's CLI mode (`inspector --cli`, installed by
//! `scripts/setup.sh` under `target/js`) starts the built binary over stdio,
//! lists its tools with the Inspector's schema portability lint and calls
//! evaluate-lisp in both protocol eras. The Inspector checks a tool result's
//! `structuredContent` against the tool's `outputSchema` and exits non-zero
//! on a mismatch. Without Node this test fails, saying how to install it.

mod common;
mod js_support;

use std::process::{Command, Output};

use serde_json::{json, Value};

/// Runs `inspector --cli --format json ARGS -- cl-mcp-server --project-root
/// <crate>`, keeping the Inspector's own files in a temporary directory.
fn inspector(args: &[&str]) -> (Output, Value) {
    let node = js_support::node();
    let cli =
        js_support::installed("@modelcontextprotocol/inspector/clients/launcher/build/index.js");
    let state = tempfile::tempdir().unwrap();
    let out = Command::new(&node)
        .arg(cli)
        .args(["--cli", "--format", "json"])
        .args(args)
        .args([
            "--",
            common::BIN,
            "--project-root",
            env!("CARGO_MANIFEST_DIR"),
        ])
        .env("MCP_STORAGE_DIR", state.path().join("storage"))
        .env("MCP_CATALOG_PATH", state.path().join("mcp.json"))
        .env("MCP_CLIENT_CONFIG_PATH", state.path().join("client.json"))
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", node.display()));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "inspector {args:?} failed ({}):\n{stdout}\n{stderr}",
        out.status
    );
    let answer: Value = serde_json::from_str(stdout.trim())
        .unwrap_or_else(|e| panic!("inspector printed no JSON ({e}):\n{stdout}\n{stderr}"));
    (out, answer)
}

#[test]
fn inspector_lists_tools_without_schema_findings() {
    // --strict exits 6 on any error-severity schema portability finding and
    // prints each finding as `Error: tool "…"` / `Warning: tool "…"` on stderr.
    let (out, answer) = inspector(&["--strict", "--method", "tools/list"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    // Not even a warning: it used to flag the `["T", "null"]` type arrays of
    // optional arguments and nullable results, which are `anyOf`s now.
    let findings: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with("Error: tool") || l.starts_with("Warning: tool"))
        .collect();
    assert!(findings.is_empty(), "{findings:#?}\n{stderr}");
    let tools = answer["result"]["tools"].as_array().expect("tools");
    let eval = tools
        .iter()
        .find(|t| t["name"] == "evaluate-lisp")
        .unwrap_or_else(|| panic!("no evaluate-lisp: {answer}"));
    assert_eq!(eval["outputSchema"]["type"], "object", "{eval}");
    assert_eq!(eval["inputSchema"]["required"], json!(["code"]), "{eval}");
}

#[test]
fn inspector_calls_evaluate_lisp_in_both_eras() {
    for era in ["legacy", "modern"] {
        let (_, answer) = inspector(&[
            "--protocol-era",
            era,
            "--method",
            "tools/call",
            "--tool-name",
            "evaluate-lisp",
            "--tool-arg",
            "code=(+ 1 2)",
        ]);
        let result = &answer["result"];
        assert_eq!(result["isError"], false, "{era}: {answer}");
        assert_eq!(
            result["structuredContent"]["values"],
            json!(["3"]),
            "{era}: {answer}"
        );
        assert_eq!(result["content"][0]["text"], "=> 3", "{era}: {answer}");
        // A stateless (2026-07-28) result carries the server's stamp.
        let stamped =
            result["_meta"]["io.modelcontextprotocol/serverInfo"]["name"] == "cl-mcp-server";
        assert_eq!(stamped, era == "modern", "{era}: {answer}");
    }
}
