//! Drives the built `cl-mcp-server` over stdio for the fs and source tool
//! tests: spawn with `--project-root`, `initialize`, then `tools/call`.

#![allow(dead_code)]

use std::path::Path;

use serde_json::{json, Value};

use crate::common;

/// The binary under test.
pub const BIN: &str = common::BIN;

/// A running server with an initialized MCP session.
pub struct Server {
    inner: common::Server,
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
        Server::start_with(root, &[])
    }

    /// Like [`Server::start`], with more command-line arguments.
    pub fn start_with(root: &Path, extra: &[&str]) -> Server {
        let root = root.to_str().expect("UTF-8 temp path");
        let mut args = vec!["--project-root", root, "--log-level", "error"];
        args.extend_from_slice(extra);
        let mut s = Server {
            inner: common::Server::start(&args),
            next_id: 1,
        };
        let r = s.request(
            "initialize",
            json!({"protocolVersion": "2025-06-18", "capabilities": {},
                   "clientInfo": {"name": "source-tests", "version": "1"}}),
        );
        assert!(r.get("result").is_some(), "initialize failed: {r}");
        s.inner
            .send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        s
    }

    /// The server's process id.
    pub fn pid(&self) -> u32 {
        self.inner.child.id()
    }

    /// Sends a request and returns the response with the same id (skipping
    /// notifications).
    pub fn request(&mut self, method: &str, params: Value) -> Value {
        let id = self.next_id;
        self.next_id += 1;
        self.inner
            .request(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))
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

/// A canonical temporary project directory.
pub fn project() -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    (dir, root)
}
