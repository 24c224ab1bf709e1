//! A real client nobody here wrote: the official MCP Python SDK (`pip install
//! mcp`) connects to the built binary over stdio in both eras, lists the tools
//! (validating their schemas) and calls one. CI installs the SDK; without it
//! this test fails, saying how to install it.

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
    let (mut http, url) = start_http(root);
    let out = Command::new(&python)
        .args([script, env!("CARGO_BIN_EXE_cl-mcp-server"), root, &url])
        .output()
        .unwrap();
    let _ = http.kill();
    let _ = http.wait();
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
}

/// Starts the HTTP transport on a free port; returns it (the caller kills and
/// waits for it) and its URL.
#[allow(clippy::zombie_processes)]
fn start_http(root: &str) -> (std::process::Child, String) {
    use std::io::{BufRead, BufReader};
    let mut child = Command::new(env!("CARGO_BIN_EXE_cl-mcp-server"))
        .args(["http", "--bind", "127.0.0.1:0", "--project-root", root])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut err = BufReader::new(child.stderr.take().unwrap());
    let mut line = String::new();
    loop {
        line.clear();
        if err.read_line(&mut line).unwrap_or(0) == 0 {
            let status = child.wait();
            panic!("the http server exited before listening: {status:?}");
        }
        if let Some(url) = line.trim().strip_prefix("cl-mcp-server: listening on ") {
            let url = url.to_string();
            std::thread::spawn(move || for _ in err.lines() {});
            return (child, url);
        }
    }
}
