//! The README is the user's guide: it must name every tool the server offers
//! and every command-line option.

use std::io::Write;
use std::process::{Command, Stdio};

const BIN: &str = env!("CARGO_BIN_EXE_cl-mcp-server");

fn readme() -> String {
    std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../README.md")).unwrap()
}

#[test]
fn readme_names_every_tool() {
    let mut child = Command::new(BIN)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/list\",\"params\":{\"_meta\":{\"io.modelcontextprotocol/protocolVersion\":\"2026-07-28\",\"io.modelcontextprotocol/clientCapabilities\":{}}}}\n")
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let v: serde_json::Value =
        serde_json::from_str(String::from_utf8_lossy(&out.stdout).lines().next().unwrap()).unwrap();
    let readme = readme();
    let tools = v["result"]["tools"].as_array().unwrap();
    assert!(tools.len() >= 10, "{v}");
    for t in tools {
        let name = t["name"].as_str().unwrap();
        // Test-only tools (the test-tools feature): ours and the
        // conformance suite's fixtures, marked in their titles.
        let title = t["title"].as_str().unwrap_or_default();
        if title.ends_with("(test tool)") || title.ends_with("(conformance fixture)") {
            continue;
        }
        assert!(
            readme.contains(&format!("`{name}`")),
            "README does not document the tool {name}"
        );
    }
}

#[test]
fn readme_names_every_option() {
    let readme = readme();
    for sub in [None, Some("stdio"), Some("tcp"), Some("http"), Some("call")] {
        let mut cmd = Command::new(BIN);
        if let Some(s) = sub {
            cmd.arg(s);
        }
        let help = String::from_utf8(cmd.arg("--help").output().unwrap().stdout).unwrap();
        for word in help.split(|c: char| c.is_whitespace() || ",[]()<>".contains(c)) {
            if let Some(opt) = word.strip_prefix("--") {
                let opt = opt.split('=').next().unwrap();
                if opt.is_empty() || opt == "help" || opt == "version" {
                    continue;
                }
                assert!(
                    readme.contains(&format!("--{opt}")),
                    "README does not document --{opt} ({sub:?})"
                );
            }
        }
    }
}
