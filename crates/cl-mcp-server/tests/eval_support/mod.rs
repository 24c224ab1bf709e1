//! Shared by the eval/image/code/asdf black-box tests: a server with a real
//! SBCL image behind it, and tool calls that return what a client sees.
#![allow(dead_code)]

use std::time::Duration;

use serde_json::{json, Value};

use crate::common::Server;

/// What a `tools/call` returned.
pub struct Reply {
    pub text: String,
    pub is_error: bool,
    pub structured: Value,
}

/// Starts the server (with `args`) on a shared core cache directory, so the
/// core is built once per machine and the tests start images in ~100 ms.
pub fn lisp_server(args: &[&str]) -> Server {
    let cache = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("cl-mcp-server-test-cache");
    let cache = cache.to_string_lossy().into_owned();
    let mut s = Server::start_with_env(args, &[("CL_MCP_CACHE_DIR", cache.as_str())]);
    let r = s.request(json!({"jsonrpc":"2.0","id":0,"method":"initialize","params":{
        "protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"test","version":"1"}}}));
    assert!(r.get("result").is_some(), "initialize failed: {r}");
    s.send(&json!({"jsonrpc":"2.0","method":"notifications/initialized"}));
    s
}

/// Calls a tool and waits for its response (a first call may wait for the
/// image to start, or even for the core to be built).
pub fn call(s: &mut Server, id: i64, tool: &str, args: Value) -> Reply {
    s.send(&json!({"jsonrpc":"2.0","id":id,"method":"tools/call",
        "params":{"name":tool,"arguments":args}}));
    let msgs = s.collect_until(Duration::from_secs(300), |m| {
        m.get("id") == Some(&json!(id)) && (m.get("result").is_some() || m.get("error").is_some())
    });
    reply_of(msgs.last().unwrap())
}

pub fn reply_of(resp: &Value) -> Reply {
    let result = resp
        .get("result")
        .unwrap_or_else(|| panic!("not a tool result: {resp}"));
    Reply {
        text: result["content"][0]["text"]
            .as_str()
            .unwrap_or_else(|| panic!("no text in {resp}"))
            .to_string(),
        is_error: result["isError"].as_bool().unwrap_or(false),
        structured: result
            .get("structuredContent")
            .cloned()
            .unwrap_or(Value::Null),
    }
}

/// `evaluate-lisp` on `code` with extra arguments merged in.
pub fn eval_with(s: &mut Server, id: i64, code: &str, extra: Value) -> Reply {
    let mut args = json!({ "code": code });
    if let Value::Object(m) = extra {
        for (k, v) in m {
            args[k] = v;
        }
    }
    call(s, id, "evaluate-lisp", args)
}

pub fn eval(s: &mut Server, id: i64, code: &str) -> Reply {
    eval_with(s, id, code, json!({}))
}

/// A Lisp with Swank the way a SLIME user runs it, for attach mode.
pub struct UserLisp {
    pub child: std::process::Child,
    pub port: u16,
}

impl UserLisp {
    pub fn start() -> UserLisp {
        UserLisp::start_with(&[])
    }

    /// Starts it after evaluating `forms` (the user's own code, e.g. an
    /// application thread).
    pub fn start_with(forms: &[&str]) -> UserLisp {
        use std::io::{BufRead, BufReader};
        let mut args: Vec<&str> = vec![
            "--noinform",
            "--no-userinit",
            "--no-sysinit",
            "--eval",
            "(load \"/usr/share/common-lisp/source/slime/swank-loader.lisp\")",
            "--eval",
            "(swank-loader:init)",
        ];
        for f in forms {
            args.extend(["--eval", f]);
        }
        args.extend([
            "--eval",
            "(progn (defvar cl-user::*user-state* :mine) \
             (format t \"~&USER-SWANK-PORT ~D~%\" (swank:create-server :port 0 :dont-close t)) \
             (finish-output))",
            "--eval",
            "(loop (sleep 1))",
        ]);
        let mut child = std::process::Command::new("sbcl")
            .args(args)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("start sbcl");
        let stdout = child.stdout.take().unwrap();
        let mut lines = BufReader::new(stdout).lines();
        let port = loop {
            let line = lines
                .next()
                .expect("the user's Lisp printed its Swank port")
                .unwrap();
            if let Some(p) = line.trim().strip_prefix("USER-SWANK-PORT ") {
                break p.parse().unwrap();
            }
        };
        // Keep draining its output so it never blocks on a full pipe.
        std::thread::spawn(move || for _ in lines {});
        UserLisp { child, port }
    }
}

impl Drop for UserLisp {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
