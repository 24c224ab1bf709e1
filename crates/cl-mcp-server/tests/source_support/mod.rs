//! Drives the built `cl-mcp-server` over stdio for the fs and source tool
//! tests: spawn with `--project-root`, `initialize`, then `tools/call`.

#![allow(dead_code)]

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};

use serde_json::{json, Value};

/// The binary under test.
pub const BIN: &str = env!("CARGO_BIN_EXE_cl-mcp-server");

/// A running server with an initialized MCP session.
pub struct Server {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    next_id: u64,
}

/// What a `tools/call` returned.
#[derive(Debug)]
pub struct CallResult {
    /// The text content shown to the model.
    pub text: String,
    /// `structuredContent` (Null when absent).
    pub structured: Value,
    pub is_error: bool,
}

impl Server {
    /// Starts the server with `root` as its project root and initializes.
    pub fn start(root: &Path) -> Server {
        let mut child = Command::new(BIN)
            .arg("--project-root")
            .arg(root)
            .arg("--log-level")
            .arg("error")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn cl-mcp-server");
        let stdin = child.stdin.take().unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        let mut s = Server {
            child,
            stdin,
            stdout,
            next_id: 1,
        };
        let r = s.request(
            "initialize",
            json!({"protocolVersion": "2025-06-18", "capabilities": {},
                   "clientInfo": {"name": "source-tests", "version": "1"}}),
        );
        assert!(r.get("result").is_some(), "initialize failed: {r}");
        s.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        s
    }

    fn send(&mut self, msg: &Value) {
        let mut line = serde_json::to_string(msg).unwrap();
        line.push('\n');
        self.stdin.write_all(line.as_bytes()).unwrap();
        self.stdin.flush().unwrap();
    }

    /// Sends a request and returns the response with the same id (skipping
    /// notifications).
    pub fn request(&mut self, method: &str, params: Value) -> Value {
        let id = self.next_id;
        self.next_id += 1;
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        loop {
            let mut line = String::new();
            let n = self.stdout.read_line(&mut line).unwrap();
            assert!(
                n > 0,
                "server closed stdout while waiting for response {id}"
            );
            let v: Value = serde_json::from_str(&line).expect("stdout line is JSON");
            if v.get("id") == Some(&json!(id)) {
                return v;
            }
        }
    }

    /// Calls a tool and returns what the user would see.
    pub fn call(&mut self, tool: &str, args: Value) -> CallResult {
        let r = self.request("tools/call", json!({"name": tool, "arguments": args}));
        let result = r
            .get("result")
            .unwrap_or_else(|| panic!("tools/call {tool} failed: {r}"));
        CallResult {
            text: result["content"][0]["text"]
                .as_str()
                .unwrap_or("")
                .to_string(),
            structured: result
                .get("structuredContent")
                .cloned()
                .unwrap_or(Value::Null),
            is_error: result["isError"].as_bool().unwrap_or(false),
        }
    }

    /// Calls a tool that must succeed.
    pub fn ok(&mut self, tool: &str, args: Value) -> CallResult {
        let r = self.call(tool, args.clone());
        assert!(!r.is_error, "{tool} {args} failed: {}", r.text);
        r
    }

    /// Calls a tool that must fail.
    pub fn err(&mut self, tool: &str, args: Value) -> CallResult {
        let r = self.call(tool, args.clone());
        assert!(
            r.is_error,
            "{tool} {args} should have failed but said: {}",
            r.text
        );
        r
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A canonical temporary project directory.
pub fn project() -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    (dir, root)
}
