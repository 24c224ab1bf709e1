//! Each MCP session has its own image by default; `--shared-image` makes
//! them share one. Two HTTP sessions of one server are used.

mod common;

use common::Listening;
use serde_json::{json, Value};

struct Http {
    server: Listening,
}

impl Http {
    async fn post(&self, session: Option<&str>, body: Value) -> (Option<String>, Value) {
        let mut r = reqwest::Client::new()
            .post(&self.server.address)
            .header("accept", "application/json, text/event-stream");
        if let Some(id) = session {
            r = r.header("mcp-session-id", id);
        }
        let resp = r.json(&body).send().await.unwrap();
        let id = resp
            .headers()
            .get("mcp-session-id")
            .map(|v| v.to_str().unwrap().to_string());
        let text = resp.text().await.unwrap();
        // JSON, or SSE whose last data line is the response.
        let json_text = text
            .lines()
            .rev()
            .find_map(|l| l.strip_prefix("data:"))
            .unwrap_or(&text)
            .trim()
            .to_string();
        (id, serde_json::from_str(&json_text).unwrap())
    }

    async fn session(&self) -> String {
        let (id, v) = self
            .post(
                None,
                json!({"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{}}}),
            )
            .await;
        assert!(v["result"].is_object(), "{v}");
        id.unwrap()
    }

    async fn eval(&self, session: &str, code: &str) -> String {
        let (_, v) = self
            .post(
                Some(session),
                json!({"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"evaluate-lisp","arguments":{"code":code}}}),
            )
            .await;
        v["result"]["content"][0]["text"]
            .as_str()
            .unwrap()
            .to_string()
    }

    async fn image_pid(&self, session: &str) -> u64 {
        let (_, v) = self
            .post(
                Some(session),
                json!({"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"image-info","arguments":{}}}),
            )
            .await;
        v["result"]["structuredContent"]["pid"]
            .as_u64()
            .unwrap_or_else(|| panic!("{v}"))
    }
}

#[tokio::test]
async fn sessions_have_their_own_images() {
    let http = Http {
        server: Listening::start(&["http", "--bind", "127.0.0.1:0"]),
    };
    let a = http.session().await;
    let b = http.session().await;
    assert_eq!(http.eval(&a, "(defvar *who* :a)").await, "=> *WHO*");
    assert_eq!(http.eval(&b, "(boundp '*who*)").await, "=> NIL");
    assert_ne!(http.image_pid(&a).await, http.image_pid(&b).await);
}

#[tokio::test]
async fn shared_image_is_shared() {
    let http = Http {
        server: Listening::start(&["http", "--bind", "127.0.0.1:0", "--shared-image"]),
    };
    let a = http.session().await;
    let b = http.session().await;
    assert_eq!(http.eval(&a, "(defvar *who* :a)").await, "=> *WHO*");
    assert_eq!(http.eval(&b, "*who*").await, "=> :A");
    assert_eq!(http.image_pid(&a).await, http.image_pid(&b).await);
    // Each session keeps its own current package even in a shared image.
    http.eval(&a, "(defpackage :sess-a (:use :cl)) (in-package :sess-a)")
        .await;
    assert_eq!(
        http.eval(&b, "(package-name *package*)").await,
        "=> \"COMMON-LISP-USER\""
    );
}

/// A session's pending debuggers are aborted when it ends: in a shared
/// image the suspended evaluation does not outlive its session.
#[tokio::test]
async fn ending_a_session_aborts_its_pending_debuggers() {
    let http = Http {
        server: Listening::start(&["http", "--bind", "127.0.0.1:0", "--shared-image"]),
    };
    let a = http.session().await;
    let b = http.session().await;
    let (_, v) = http
        .post(
            Some(&a),
            json!({"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"evaluate-lisp",
                   "arguments":{"code":"(error \"waits\")","debug":true}}}),
        )
        .await;
    let text = v["result"]["content"][0]["text"].as_str().unwrap();
    assert!(text.starts_with("[DEBUGGER level 1]"), "{text}");
    // Running now: the suspended one and the one that counts.
    let count = "(length (cl-mcp::running-evaluations))";
    assert_eq!(http.eval(&b, count).await, "=> 2");
    let status = reqwest::Client::new()
        .delete(&http.server.address)
        .header("mcp-session-id", &a)
        .send()
        .await
        .unwrap()
        .status();
    assert!(status.is_success(), "{status}");
    let mut left = String::new();
    for _ in 0..50 {
        left = http.eval(&b, count).await;
        if left == "=> 1" {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert_eq!(left, "=> 1", "the suspended evaluation was aborted");
}

/// In a shared image a session's traces are its own and end with it
/// (HTTP DELETE): the function is untraced for everyone.
#[tokio::test]
async fn ending_a_session_untraces_its_functions() {
    let http = Http {
        server: Listening::start(&["http", "--bind", "127.0.0.1:0", "--shared-image"]),
    };
    let a = http.session().await;
    let b = http.session().await;
    assert_eq!(http.eval(&a, "(defun sess-tr (x) x)").await, "=> SESS-TR");
    let (_, v) = http
        .post(
            Some(&a),
            json!({"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"trace-functions",
                   "arguments":{"trace":["sess-tr"]}}}),
        )
        .await;
    assert_eq!(
        v["result"]["structuredContent"]["traced"],
        json!(["SESS-TR"]),
        "{v}"
    );
    assert_eq!(http.eval(&b, "(trace)").await, "=> (SESS-TR)");
    let status = reqwest::Client::new()
        .delete(&http.server.address)
        .header("mcp-session-id", &a)
        .send()
        .await
        .unwrap()
        .status();
    assert!(status.is_success(), "{status}");
    assert_eq!(http.eval(&b, "(trace)").await, "=> NIL");
}

/// In a shared image every session sees every thread, but a suspended
/// evaluation is its own session's: another session cannot take its
/// debugger over (`list-threads` + `takeOver` once let it), only read it.
#[tokio::test]
async fn a_session_cannot_take_over_another_sessions_debugger() {
    let http = Http {
        server: Listening::start(&["http", "--bind", "127.0.0.1:0", "--shared-image"]),
    };
    let a = http.session().await;
    let b = http.session().await;
    let tool = |session: String, id: i64, name: &'static str, args: Value| {
        let http = &http;
        async move {
            let (_, v) = http
                .post(
                    Some(&session),
                    json!({"jsonrpc":"2.0","id":id,"method":"tools/call",
                           "params":{"name":name,"arguments":args}}),
                )
                .await;
            v["result"].clone()
        }
    };
    let r = tool(
        a.clone(),
        1,
        "evaluate-lisp",
        json!({"code":"(error \"mine\")","debug":true}),
    )
    .await;
    let text = r["content"][0]["text"].as_str().unwrap();
    assert!(text.starts_with("[DEBUGGER level 1]"), "{text}");
    // B finds it through list-threads.
    let r = tool(b.clone(), 2, "list-threads", json!({})).await;
    let thread = r["structuredContent"]["threads"]
        .as_array()
        .and_then(|ts| ts.iter().find(|t| t["inDebugger"] == true))
        .and_then(|t| t["id"].as_i64())
        .unwrap_or_else(|| panic!("{r}"));
    let r = tool(
        b.clone(),
        3,
        "debugger-backtrace",
        json!({"thread": thread, "takeOver": true}),
    )
    .await;
    let text = r["content"][0]["text"].as_str().unwrap();
    assert_eq!(r["isError"], true, "{text}");
    assert!(text.contains("another session"), "{text}");
    // Still A's: it continues there.
    let r = tool(a.clone(), 4, "debugger-restart", json!({"action": "abort"})).await;
    assert!(r.to_string().contains("evaluation was abandoned"), "{r}");
    assert_eq!(http.eval(&b, "(+ 1 2)").await, "=> 3");
}
