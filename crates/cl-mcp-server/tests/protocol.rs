//! Black-box tests of the JSON-RPC core and the MCP lifecycle (CONTRACT §1,
//! §2), driving the built binary over stdio. Needs the `test-tools` feature
//! for the slow and panicking test tools.

mod common;

use std::time::{Duration, Instant};

use common::{tool_is_error, tool_text, Server};
use serde_json::{json, Value};

fn error_of(resp: &Value) -> (i64, String, Value) {
    let e = &resp["error"];
    (
        e["code"]
            .as_i64()
            .unwrap_or_else(|| panic!("not an error: {resp}")),
        e["message"].as_str().unwrap().to_string(),
        e["data"].clone(),
    )
}

/// The token an `[APPROVAL REQUIRED]` answer tells the model to pass.
fn approval_token(r: &Value) -> String {
    let text = tool_text(r);
    let after = text
        .split("\"approvalToken\": \"")
        .nth(1)
        .unwrap_or_else(|| panic!("no token in {text}"));
    after.split('"').next().unwrap().to_string()
}

fn modern_meta() -> Value {
    json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {}
    })
}

#[test]
fn seed_complete_session() {
    let mut s = Server::start(&[]);
    s.send_raw(r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-03-26","capabilities":{},"clientInfo":{"name":"test","version":"1.0"}}}"#);
    let r = s.recv();
    assert_eq!(r["id"], 1);
    assert_eq!(r["result"]["protocolVersion"], "2025-03-26");
    assert_eq!(r["result"]["serverInfo"]["name"], "cl-mcp-server");
    assert!(r["result"]["capabilities"]["tools"].is_object());
    assert!(r["result"]["instructions"].as_str().unwrap().len() > 40);
    s.send_raw(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#);
    s.send_raw(r#"{"jsonrpc":"2.0","id":2,"method":"tools/list"}"#);
    let r = s.recv();
    assert_eq!(
        r["id"], 2,
        "the notification got no response; the next line answers id 2"
    );
    let tools = r["result"]["tools"].as_array().unwrap();
    assert!(tools.iter().any(|t| t["name"] == "test-sleep"));
    // Ours (the conformance suite's fixtures are spelled with `_` and carry
    // the schemas that suite asks for).
    for t in tools
        .iter()
        .filter(|t| t["name"].as_str().unwrap().contains('-'))
    {
        assert_eq!(t["inputSchema"]["type"], "object", "{t}");
        // MCP's default dialect (2020-12); no per-schema `$schema`.
        assert!(t["inputSchema"].get("$schema").is_none(), "{t}");
        // Only the hints that differ from the spec's defaults (readOnly
        // false, destructive true, idempotent false, openWorld true);
        // destructive/idempotent only on a tool that changes state (the
        // spec gives them meaning only then).
        let a = &t["annotations"];
        assert_eq!(a["openWorldHint"], false, "{t}");
        assert!(a.get("readOnlyHint").is_none_or(|r| r == true), "{t}");
        if a["readOnlyHint"] == true {
            assert!(a.get("destructiveHint").is_none(), "{t}");
            assert!(a.get("idempotentHint").is_none(), "{t}");
        } else {
            assert!(a.get("destructiveHint").is_none_or(|d| d == false), "{t}");
            assert!(a.get("idempotentHint").is_none_or(|d| d == true), "{t}");
        }
        assert!(t["title"].is_string() && t["description"].is_string());
    }
    let hints =
        |name: &str| tools.iter().find(|t| t["name"] == name).unwrap()["annotations"].clone();
    assert_eq!(
        hints("evaluate-lisp"),
        json!({"destructiveHint": false, "openWorldHint": false})
    );
    assert_eq!(hints("fs-write-file"), json!({"openWorldHint": false}));
    assert_eq!(
        hints("code-find"),
        json!({"readOnlyHint": true, "openWorldHint": false})
    );
    s.send_raw(r#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"test-sleep","arguments":{"seconds":0.1}}}"#);
    let r = s.recv();
    assert_eq!(r["id"], 3);
    assert_eq!(r["result"]["isError"], false);
    assert_eq!(tool_text(&r), "slept 0.1s");
}

#[test]
fn seed_malformed_request_and_unknown_method_exact_lines() {
    let mut s = Server::initialized(&[]);
    // Byte for byte as the seed shows them.
    s.send_raw(r#"{"not-jsonrpc":"2.0","method":"initialize"}"#);
    assert_eq!(
        s.try_recv_raw(Duration::from_secs(10)).unwrap(),
        r#"{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"Invalid Request","data":"Missing required field: jsonrpc"}}"#
    );
    s.send_raw(r#"{"jsonrpc":"2.0","id":1,"method":"unknown-method"}"#);
    assert_eq!(
        s.try_recv_raw(Duration::from_secs(10)).unwrap(),
        r#"{"jsonrpc":"2.0","id":1,"error":{"code":-32601,"message":"Method not found","data":"Method 'unknown-method' is not supported"}}"#
    );
}

#[test]
fn params_nested_too_deeply_are_named_as_such() {
    let mut s = Server::initialized(&["--lazy-image"]);
    for depth in [129, 1000, 100_000] {
        let params = format!("{}{}", "[".repeat(depth), "]".repeat(depth));
        s.send_raw(&format!(
            r#"{{"jsonrpc":"2.0","id":"deep-{depth}","method":"tools/list","params":{params}}}"#
        ));
        let r = s.recv_within(Duration::from_secs(20));
        assert_eq!(r["id"], format!("deep-{depth}"), "{r}");
        assert_eq!(r["error"]["code"], -32602, "{r}");
        let why = r["error"]["data"].as_str().unwrap();
        assert!(
            why.contains("nested too deeply") && why.contains("127"),
            "depth {depth}: {why}"
        );
    }
    // Nested objects too, and 127 levels (params itself and 126 inside) pass.
    let obj = format!("{}1{}", r#"{"a":"#.repeat(200), "}".repeat(200));
    s.send_raw(&format!(
        r#"{{"jsonrpc":"2.0","id":2,"method":"ping","params":{{"x":{obj}}}}}"#
    ));
    let r = s.recv_within(Duration::from_secs(20));
    assert!(r["error"]["data"]
        .as_str()
        .unwrap()
        .contains("nested too deeply"));
    let ok = format!("{}1{}", "[".repeat(126), "]".repeat(126));
    let r = s.request(json!({"jsonrpc":"2.0","id":3,"method":"ping"}));
    assert!(r["result"].is_object());
    s.send_raw(&format!(
        r#"{{"jsonrpc":"2.0","id":4,"method":"ping","params":{{"_meta":{{}},"x":{ok}}}}}"#
    ));
    let r = s.recv_within(Duration::from_secs(20));
    assert!(
        !r.to_string().contains("nested too deeply"),
        "127 levels are accepted: {r}"
    );
}

#[test]
fn every_error_row_of_the_table() {
    let mut s = Server::initialized(&["--tools", "eval"]);
    let cases: Vec<(&str, i64, &str, &str, Value)> = vec![
        ("{not json", -32700, "Parse error", "", Value::Null),
        (
            "42",
            -32600,
            "Invalid Request",
            "Request must be a JSON object",
            Value::Null,
        ),
        (
            r#""str""#,
            -32600,
            "Invalid Request",
            "Request must be a JSON object",
            Value::Null,
        ),
        (
            r#"{"id":5,"method":"ping"}"#,
            -32600,
            "Invalid Request",
            "Missing required field: jsonrpc",
            json!(5),
        ),
        (
            r#"{"jsonrpc":"1.0","id":"a","method":"ping"}"#,
            -32600,
            "Invalid Request",
            "jsonrpc must be \"2.0\"",
            json!("a"),
        ),
        (
            r#"{"jsonrpc":"2.0","id":6}"#,
            -32600,
            "Invalid Request",
            "Missing required field: method",
            json!(6),
        ),
        (
            r#"{"jsonrpc":"2.0","id":7,"method":12}"#,
            -32600,
            "Invalid Request",
            "method must be a string",
            json!(7),
        ),
        (
            r#"{"jsonrpc":"2.0","id":{"a":1},"method":"ping"}"#,
            -32600,
            "Invalid Request",
            "id must be a string or a number",
            Value::Null,
        ),
        (
            r#"{"jsonrpc":"2.0","id":[1],"method":"ping"}"#,
            -32600,
            "Invalid Request",
            "id must be a string or a number",
            Value::Null,
        ),
        (
            r#"{"jsonrpc":"2.0","id":true,"method":"ping"}"#,
            -32600,
            "Invalid Request",
            "id must be a string or a number",
            Value::Null,
        ),
        (
            r#"{"jsonrpc":"2.0","id":null,"method":"ping"}"#,
            -32600,
            "Invalid Request",
            "id must be a string or a number",
            Value::Null,
        ),
        (
            r#"{"jsonrpc":"2.0","id":8,"method":"ping","params":"x"}"#,
            -32602,
            "Invalid params",
            "params must be an object",
            json!(8),
        ),
        (
            r#"{"jsonrpc":"2.0","id":9,"method":"resources/frobnicate"}"#,
            -32601,
            "Method not found",
            "Method 'resources/frobnicate' is not supported",
            json!(9),
        ),
        (
            r#"{"jsonrpc":"2.0","id":10,"method":"tools/call","params":{}}"#,
            -32602,
            "Invalid params",
            "Missing required field: name",
            json!(10),
        ),
        (
            r#"{"jsonrpc":"2.0","id":11,"method":"tools/call","params":{"name":"no-such-tool"}}"#,
            -32602,
            "Invalid params",
            "Unknown tool: no-such-tool",
            json!(11),
        ),
        (
            r#"{"jsonrpc":"2.0","id":12,"method":"tools/call","params":{"name":"test-sleep","arguments":[1]}}"#,
            -32602,
            "Invalid params",
            "arguments must be an object",
            json!(12),
        ),
    ];
    for (line, code, message, data, id) in cases {
        s.send_raw(line);
        let r = s.recv();
        assert_eq!(r["jsonrpc"], "2.0", "{line} -> {r}");
        assert_eq!(r["id"], id, "{line} -> {r}");
        let (c, m, d) = error_of(&r);
        assert_eq!((c, m.as_str()), (code, message), "{line} -> {r}");
        let d = d
            .as_str()
            .unwrap_or_else(|| panic!("data must be a string: {r}"));
        if data.is_empty() {
            assert!(!d.is_empty(), "parse errors say what the parser said: {r}");
        } else {
            assert_eq!(d, data, "{line}");
        }
    }
    // A server bug is -32603 with a short text, and the server lives on.
    let r = s.call_tool(13, "test-panic", json!({}));
    let (c, m, d) = error_of(&r);
    assert_eq!((c, m.as_str()), (-32603, "Internal error"));
    assert!(d.as_str().unwrap().contains("deliberate test panic"));
    assert!(!d.as_str().unwrap().contains("stack backtrace"));
    let r = s.request(json!({"jsonrpc":"2.0","id":14,"method":"ping"}));
    assert_eq!(r["result"], json!({}));
}

#[test]
fn ids_are_echoed_verbatim() {
    let mut s = Server::initialized(&[]);
    for id in [
        "123456789012345678901234567890",
        "-17",
        "0",
        "1.5",
        "\"\"",
        "\"abc-ü-😀\"",
        "18446744073709551617",
    ] {
        s.send_raw(&format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"ping"}}"#));
        let line = s.try_recv_raw(Duration::from_secs(10)).expect("answer");
        assert_eq!(
            line,
            format!(r#"{{"jsonrpc":"2.0","id":{id},"result":{{}}}}"#)
        );
    }
}

#[test]
fn notifications_never_get_a_response() {
    let mut s = Server::initialized(&[]);
    s.send_raw(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#);
    s.send_raw(r#"{"jsonrpc":"2.0","method":"no/such/notification"}"#);
    s.send_raw(r#"{"jsonrpc":"2.0","method":"tools/list","params":5}"#);
    s.send_raw(
        r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":999}}"#,
    );
    s.send_raw(r#"{"jsonrpc":"2.0","id":"after","method":"ping"}"#);
    assert_eq!(
        s.recv()["id"],
        "after",
        "nothing was answered before the ping"
    );
}

#[test]
fn batches() {
    let mut s = Server::initialized(&[]);
    s.send_raw("[]");
    let r = s.recv();
    assert_eq!(error_of(&r).0, -32600);
    assert_eq!(r["id"], Value::Null);

    s.send_raw(r#"[{"jsonrpc":"2.0","id":1,"method":"ping"},{"jsonrpc":"2.0","method":"notifications/initialized"},7,{"jsonrpc":"2.0","id":2,"method":"nope"}]"#);
    let r = s.recv();
    let arr = r.as_array().expect("a batch is answered by an array");
    assert_eq!(arr.len(), 3, "no entry for the notification: {r}");
    assert_eq!(arr[0]["id"], 1);
    assert_eq!(arr[0]["result"], json!({}));
    assert_eq!(arr[1]["error"]["data"], "Request must be a JSON object");
    assert_eq!(arr[2]["error"]["code"], -32601);

    // Only notifications: nothing at all comes back.
    s.send_raw(r#"[{"jsonrpc":"2.0","method":"notifications/initialized"}]"#);
    s.send_raw(r#"{"jsonrpc":"2.0","id":"x","method":"ping"}"#);
    assert_eq!(s.recv()["id"], "x");
}

#[test]
fn long_lines_up_to_16_mib_accepted_longer_skipped() {
    let mut s = Server::initialized(&[]);
    let big = "a".repeat(15 * 1024 * 1024);
    s.send_raw(&format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"ping","params":{{"pad":"{big}"}}}}"#
    ));
    assert_eq!(s.recv()["id"], 1);
    let huge = "b".repeat(17 * 1024 * 1024);
    s.send_raw(&format!(
        r#"{{"jsonrpc":"2.0","id":2,"method":"ping","params":{{"pad":"{huge}"}}}}"#
    ));
    let r = s.recv();
    let (code, _, data) = error_of(&r);
    assert_eq!(code, -32700);
    assert!(
        data.as_str().unwrap().contains("16777216"),
        "data says the limit: {r}"
    );
    assert_eq!(
        r["id"], 2,
        "the id is read from the start of the line, so the call does not hang"
    );
    s.send_raw(r#"{"jsonrpc":"2.0","id":3,"method":"ping"}"#);
    assert_eq!(s.recv()["id"], 3, "the next message is not lost");
}

#[test]
fn invalid_utf8_and_trailing_garbage_are_parse_errors() {
    let mut s = Server::initialized(&[]);
    s.send_bytes(
        b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\",\"params\":{\"x\":\"\xff\xfe\"}}",
    );
    let r = s.recv();
    assert_eq!(error_of(&r).0, -32700);
    assert!(error_of(&r).2.as_str().unwrap().contains("UTF-8"), "{r}");
    s.send_raw("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"} trailing");
    assert_eq!(error_of(&s.recv()).0, -32700);
    s.send_raw("{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"ping\"}\r");
    assert_eq!(s.recv()["id"], 2, "CRLF line endings are accepted");
}

#[test]
fn lifecycle_rules() {
    let mut s = Server::start(&[]);
    // Notification before initialize: ignored.
    s.send_raw(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#);
    // ping works at any time.
    let r = s.request(json!({"jsonrpc":"2.0","id":1,"method":"ping"}));
    assert_eq!(r["result"], json!({}));
    // Other requests are refused, naming both ways to start.
    let r = s.request(json!({"jsonrpc":"2.0","id":2,"method":"tools/list"}));
    let (code, _, data) = error_of(&r);
    assert_eq!(code, -32602);
    let data = data.as_str().unwrap();
    assert!(
        data.contains("initialize") && data.contains("_meta"),
        "{data}"
    );
    // An unsupported version is answered with the newest legacy one.
    let r = s.request(json!({"jsonrpc":"2.0","id":3,"method":"initialize","params":{"protocolVersion":"1999-01-01","capabilities":{}}}));
    assert_eq!(r["result"]["protocolVersion"], "2025-11-25");
    // A second initialize is refused; the connection goes on.
    let r = s.request(json!({"jsonrpc":"2.0","id":4,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{}}}));
    let (code, _, data) = error_of(&r);
    assert_eq!(code, -32600);
    assert!(data.as_str().unwrap().contains("already initialized"));
    let r = s.request(json!({"jsonrpc":"2.0","id":5,"method":"tools/list"}));
    assert!(r["result"]["tools"].is_array());
}

#[test]
fn every_legacy_version_is_echoed() {
    for v in ["2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"] {
        let mut s = Server::start(&[]);
        let r = s.request(json!({"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":v,"capabilities":{}}}));
        assert_eq!(r["result"]["protocolVersion"], v);
    }
    let mut s = Server::start(&[]);
    let r = s.request(
        json!({"jsonrpc":"2.0","id":1,"method":"initialize","params":{"capabilities":{}}}),
    );
    let (code, _, data) = error_of(&r);
    assert_eq!(code, -32602);
    assert!(data.as_str().unwrap().contains("protocolVersion"));
}

#[test]
fn modern_stateless_era() {
    let mut s = Server::start(&[]);
    let r = s.request(json!({"jsonrpc":"2.0","id":"d","method":"server/discover","params":{"_meta":modern_meta()}}));
    let res = &r["result"];
    assert_eq!(res["resultType"], "complete");
    let versions: Vec<&str> = res["supportedVersions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert!(versions.contains(&"2026-07-28") && versions.contains(&"2025-11-25"));
    assert_eq!(res["serverInfo"]["name"], "cl-mcp-server");
    assert_eq!(
        res["_meta"]["io.modelcontextprotocol/serverInfo"]["name"],
        "cl-mcp-server"
    );
    assert!(res["capabilities"]["tools"].is_object());
    assert!(res["ttlMs"].as_u64().unwrap() > 0);
    assert_eq!(res["cacheScope"], "public");

    // Stateless requests need no handshake.
    let r = s.request(
        json!({"jsonrpc":"2.0","id":2,"method":"tools/list","params":{"_meta":modern_meta()}}),
    );
    assert_eq!(r["result"]["resultType"], "complete");
    assert!(r["result"]["tools"].as_array().unwrap().len() >= 2);
    let r = s.request(json!({"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"_meta":modern_meta(),"name":"test-sleep","arguments":{"seconds":0}}}));
    assert_eq!(r["result"]["resultType"], "complete");
    assert_eq!(r["result"]["isError"], false);

    // server/discover without _meta: -32602.
    let r = s.request(json!({"jsonrpc":"2.0","id":4,"method":"server/discover"}));
    assert_eq!(error_of(&r).0, -32602);
    // Missing clientCapabilities: -32602.
    let r = s.request(json!({"jsonrpc":"2.0","id":5,"method":"tools/list","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}));
    let (code, _, data) = error_of(&r);
    assert_eq!(code, -32602);
    assert!(data.as_str().unwrap().contains("clientCapabilities"));
    // Unsupported version: -32022 with supported and requested.
    let r = s.request(json!({"jsonrpc":"2.0","id":6,"method":"tools/list","params":{"_meta":{
        "io.modelcontextprotocol/protocolVersion":"2099-01-01","io.modelcontextprotocol/clientCapabilities":{}}}}));
    let (code, _, data) = error_of(&r);
    assert_eq!(code, -32022);
    assert_eq!(data["requested"], "2099-01-01");
    assert!(data["supported"]
        .as_array()
        .unwrap()
        .contains(&json!("2026-07-28")));
    // Stateless requests did not initialize the legacy session.
    let r = s.request(json!({"jsonrpc":"2.0","id":7,"method":"tools/list"}));
    assert_eq!(error_of(&r).0, -32602);
}

#[test]
fn requests_run_concurrently() {
    let mut s = Server::initialized(&[]);
    let t0 = Instant::now();
    s.send(&json!({"jsonrpc":"2.0","id":"slow","method":"tools/call","params":{"name":"test-sleep","arguments":{"seconds":3}}}));
    s.send(&json!({"jsonrpc":"2.0","id":"fast","method":"ping"}));
    let first = s.recv();
    assert_eq!(first["id"], "fast", "ping is not blocked by a slow tool");
    assert!(t0.elapsed() < Duration::from_secs(2));
    let second = s.recv();
    assert_eq!(second["id"], "slow");
}

#[test]
fn cancellation_suppresses_the_response() {
    let mut s = Server::initialized(&[]);
    s.send(&json!({"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"test-sleep","arguments":{"seconds":2}}}));
    std::thread::sleep(Duration::from_millis(200));
    s.send(&json!({"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":7,"reason":"user"}}));
    // Unknown ids are ignored.
    s.send(
        &json!({"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"nope"}}),
    );
    let t0 = Instant::now();
    let mut seen = Vec::new();
    while t0.elapsed() < Duration::from_secs(3) {
        if let Some(line) = s.try_recv_raw(Duration::from_millis(200)) {
            seen.push(line);
        }
    }
    assert!(
        seen.is_empty(),
        "no response for a cancelled request: {seen:?}"
    );
    let r = s.request(json!({"jsonrpc":"2.0","id":8,"method":"ping"}));
    assert_eq!(r["result"], json!({}));
}

#[test]
fn progress_notifications_for_long_calls() {
    let mut s = Server::initialized(&[]);
    let t0 = Instant::now();
    s.send(
        &json!({"jsonrpc":"2.0","id":1,"method":"tools/call","params":{
        "_meta":{"progressToken":"tok"},"name":"test-sleep","arguments":{"seconds":2.6}}}),
    );
    let msgs = s.collect_until(Duration::from_secs(10), |m| m["id"] == 1);
    let progress: Vec<&Value> = msgs
        .iter()
        .filter(|m| m["method"] == "notifications/progress")
        .collect();
    assert!(
        progress.len() >= 2,
        "expected several progress notifications: {msgs:?}"
    );
    assert!(progress.len() <= 6, "at most every 500 ms: {msgs:?}");
    let mut last = 0.0;
    for p in &progress {
        assert_eq!(p["params"]["progressToken"], "tok");
        let n = p["params"]["progress"].as_f64().unwrap();
        assert!(n > last, "progress increases");
        last = n;
        let m = p["params"]["message"].as_str().unwrap();
        assert!(m.contains("running for") && m.contains("tick"), "{m}");
    }
    assert!(t0.elapsed() >= Duration::from_millis(2500));
    // No progress after the response.
    assert!(s.try_recv_raw(Duration::from_millis(800)).is_none());
    // Without a token, no progress.
    s.send(&json!({"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"test-sleep","arguments":{"seconds":1.5}}}));
    let msgs = s.collect_until(Duration::from_secs(10), |m| m["id"] == 2);
    assert_eq!(msgs.len(), 1, "{msgs:?}");
}

#[test]
fn logging_set_level_and_per_request_level() {
    let mut s = Server::initialized(&[]);
    // Not asked for: no log messages.
    s.send(&json!({"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"test-sleep","arguments":{"seconds":0,"logMessage":"hello"}}}));
    let msgs = s.collect_until(Duration::from_secs(10), |m| m["id"] == 1);
    assert_eq!(msgs.len(), 1);
    let r = s.request(
        json!({"jsonrpc":"2.0","id":2,"method":"logging/setLevel","params":{"level":"info"}}),
    );
    assert_eq!(r["result"], json!({}));
    let r = s.request(
        json!({"jsonrpc":"2.0","id":3,"method":"logging/setLevel","params":{"level":"loud"}}),
    );
    assert_eq!(error_of(&r).0, -32602);
    s.send(&json!({"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"test-sleep","arguments":{"seconds":0,"log_message":"hello"}}}));
    let msgs = s.collect_until(Duration::from_secs(10), |m| m["id"] == 4);
    assert_eq!(msgs.len(), 2, "{msgs:?}");
    assert_eq!(msgs[0]["method"], "notifications/message");
    assert_eq!(msgs[0]["params"]["level"], "info");
    assert_eq!(msgs[0]["params"]["data"], "hello");

    // Modern: only when the request's _meta asks, at or above its level.
    let mut s = Server::start(&[]);
    let mut meta = modern_meta();
    meta["io.modelcontextprotocol/logLevel"] = json!("error");
    s.send(&json!({"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"_meta":meta,"name":"test-sleep","arguments":{"seconds":0,"logMessage":"x"}}}));
    assert_eq!(
        s.collect_until(Duration::from_secs(10), |m| m["id"] == 1)
            .len(),
        1
    );
    meta["io.modelcontextprotocol/logLevel"] = json!("debug");
    s.send(&json!({"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"_meta":meta,"name":"test-sleep","arguments":{"seconds":0,"logMessage":"x"}}}));
    assert_eq!(
        s.collect_until(Duration::from_secs(10), |m| m["id"] == 2)
            .len(),
        2
    );
}

#[test]
fn bad_argument_values_are_tool_errors_naming_the_field() {
    let mut s = Server::initialized(&[]);
    let r = s.call_tool(1, "test-sleep", json!({"seconds":"soon"}));
    assert!(tool_is_error(&r));
    let t = tool_text(&r);
    assert!(t.contains("seconds") && t.contains("invalid type"), "{t}");
    let r = s.call_tool(2, "test-sleep", json!({}));
    assert!(tool_is_error(&r));
    assert!(tool_text(&r).contains("missing field `seconds`"));
    let r = s.call_tool(3, "test-sleep", json!({"seconds":0,"bogus":1}));
    assert!(tool_is_error(&r));
    assert!(tool_text(&r).contains("bogus"));
}

#[test]
fn exits_zero_when_stdin_closes_after_answering_in_flight_requests() {
    let mut s = Server::initialized(&[]);
    s.send(&json!({"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"test-sleep","arguments":{"seconds":1}}}));
    let (status, rest) = s.close();
    assert!(status.success(), "{status:?}");
    assert_eq!(
        rest.len(),
        1,
        "the in-flight response was written: {rest:?}"
    );
    assert!(rest[0].contains(r#""id":1"#));
}

#[test]
fn unknown_tool_group_is_a_clear_startup_error() {
    let out = std::process::Command::new(common::BIN)
        .args(["--tools", "eval,bogus"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("bogus") && err.contains("groups"), "{err}");
    assert!(out.stdout.is_empty());
}

#[test]
fn help_lists_options_with_environment_variables() {
    let out = std::process::Command::new(common::BIN)
        .arg("--help")
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&out.stdout);
    for env in ["MCP_PROJECT_ROOT", "CL_MCP_TOOLS", "MCP_LOG_LEVEL"] {
        assert!(help.contains(env), "--help names {env}:\n{help}");
    }
}

#[test]
fn tcp_transport_serves_the_same_protocol() {
    use std::io::{BufRead, BufReader, Write};
    let server = common::Listening::start(&["tcp", "--port", "0"]);
    let addr = server
        .address
        .strip_prefix("tcp ")
        .expect("tcp address")
        .to_string();
    let stream = std::net::TcpStream::connect(&addr).unwrap();
    let mut w = stream.try_clone().unwrap();
    let mut r = BufReader::new(stream);
    w.write_all(b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\",\"params\":{\"protocolVersion\":\"2025-06-18\",\"capabilities\":{}}}\n{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"tools/list\"}\n").unwrap();
    let mut line = String::new();
    r.read_line(&mut line).unwrap();
    let v: Value = serde_json::from_str(&line).unwrap();
    assert_eq!(v["result"]["protocolVersion"], "2025-06-18");
    line.clear();
    r.read_line(&mut line).unwrap();
    let v: Value = serde_json::from_str(&line).unwrap();
    assert!(v["result"]["tools"].is_array());
}

#[test]
fn project_root_from_the_clients_roots() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    let mut s = Server::start(&[]);
    let r = s.request(
        json!({"jsonrpc":"2.0","id":1,"method":"initialize","params":{
        "protocolVersion":"2025-11-25","capabilities":{"roots":{"listChanged":true}}}}),
    );
    assert!(r["result"].is_object());
    s.send(&json!({"jsonrpc":"2.0","method":"notifications/initialized"}));
    // The server asks for the roots...
    let ask = s.recv();
    assert_eq!(ask["method"], "roots/list", "{ask}");
    let ask_id = ask["id"].clone();
    assert!(ask_id.is_string());
    // ...and a response (ours, or a stray one) is never answered.
    s.send(&json!({"jsonrpc":"2.0","id":"stray","result":{}}));
    s.send(&json!({"jsonrpc":"2.0","id":ask_id,"result":{"roots":[
        {"uri": format!("file://{}", root.display()), "name":"proj"}]}}));
    std::thread::sleep(Duration::from_millis(200));
    let r = s.call_tool(2, "fs-get-project-info", json!({}));
    let info = &r["result"]["structuredContent"];
    assert_eq!(
        info["projectRoot"]
            .as_str()
            .unwrap_or_else(|| panic!("{r}")),
        root.to_str().unwrap(),
        "{r}"
    );
}

#[test]
fn prompts_and_completion() {
    let mut s = Server::initialized(&[]);
    let r = s.request(json!({"jsonrpc":"2.0","id":1,"method":"prompts/list"}));
    let names: Vec<&str> = r["result"]["prompts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    // The server's own prompts; the conformance fixtures (`test_*`, only
    // with the test-tools feature) come after them.
    let own: Vec<&str> = names
        .iter()
        .copied()
        .filter(|n| !n.starts_with("test_"))
        .collect();
    assert_eq!(own, ["repl-driven-development", "debug-error", "add-tests"]);
    let r = s.request(
        json!({"jsonrpc":"2.0","id":2,"method":"prompts/get","params":{
        "name":"debug-error","arguments":{"error":"DIVISION-BY-ZERO in FOO"}}}),
    );
    let text = r["result"]["messages"][0]["content"]["text"]
        .as_str()
        .unwrap();
    assert!(
        text.contains("DIVISION-BY-ZERO in FOO") && text.contains("evaluate-lisp"),
        "{text}"
    );
    assert_eq!(r["result"]["messages"][0]["role"], "user");
    // A missing required argument and an unknown prompt are -32602.
    let r = s.request(
        json!({"jsonrpc":"2.0","id":3,"method":"prompts/get","params":{"name":"add-tests"}}),
    );
    assert_eq!(error_of(&r).0, -32602);
    assert!(error_of(&r).2.as_str().unwrap().contains("target"));
    let r =
        s.request(json!({"jsonrpc":"2.0","id":4,"method":"prompts/get","params":{"name":"nope"}}));
    assert_eq!(error_of(&r).2, "Unknown prompt: nope");
    let r = s.request(json!({"jsonrpc":"2.0","id":5,"method":"completion/complete","params":{
        "ref":{"type":"ref/prompt","name":"add-tests"},"argument":{"name":"framework","value":"p"}}}));
    assert_eq!(r["result"]["completion"]["values"], json!(["parachute"]));
}

#[test]
fn approval_is_refused_when_the_client_cannot_elicit() {
    let mut s = Server::initialized(&["--require-approval", "test-sleep"]);
    let r = s.request(json!({"jsonrpc":"2.0","id":1,"method":"tools/list"}));
    let sleep = r["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "test-sleep")
        .unwrap()
        .clone();
    assert!(sleep["inputSchema"]["properties"]
        .get("approvalToken")
        .is_none());
    let r = s.call_tool(2, "test-sleep", json!({"seconds":0}));
    assert!(tool_is_error(&r));
    let t = tool_text(&r);
    assert!(
        t.starts_with("[APPROVAL REQUIRED]")
            && t.contains("cannot ask its user")
            && t.contains("--approval-fallback token")
            && !t.contains("approvalToken"),
        "{t}"
    );
    // No token the model could replay: a made-up one runs nothing either.
    let r = s.call_tool(3, "test-sleep", json!({"seconds":0,"approvalToken":"x"}));
    assert!(tool_is_error(&r), "{r}");
}

#[test]
fn approval_tokens_when_the_client_cannot_elicit_and_the_user_chose_them() {
    let mut s = Server::initialized(&[
        "--require-approval",
        "test-sleep",
        "--approval-fallback",
        "token",
    ]);
    let r = s.request(json!({"jsonrpc":"2.0","id":1,"method":"tools/list"}));
    let sleep = r["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "test-sleep")
        .unwrap()
        .clone();
    assert!(sleep["inputSchema"]["properties"]["approvalToken"].is_object());

    let r = s.call_tool(2, "test-sleep", json!({"seconds":0}));
    assert!(tool_is_error(&r));
    assert!(tool_text(&r).starts_with("[APPROVAL REQUIRED]"));
    assert!(
        r["result"].get("structuredContent").is_none(),
        "an approval answer is not the tool's result: {r}"
    );
    let token = approval_token(&r);

    // The same call with the token runs (however it is spelled); the token
    // then is used up.
    let r = s.call_tool(3, "test-sleep", json!({"seconds":0,"approval_token":token}));
    assert!(!tool_is_error(&r), "{r}");
    assert_eq!(tool_text(&r), "slept 0s");
    let r = s.call_tool(4, "test-sleep", json!({"seconds":0,"approvalToken":token}));
    assert!(tool_is_error(&r));
    assert!(tool_text(&r).contains("already used"));

    // A token is bound to the exact arguments.
    let r = s.call_tool(5, "test-sleep", json!({"seconds":0}));
    let token = approval_token(&r);
    let r = s.call_tool(6, "test-sleep", json!({"seconds":1,"approvalToken":token}));
    assert!(tool_is_error(&r));
    assert!(tool_text(&r).contains("different call"));
}

#[test]
fn approval_through_elicitation() {
    let mut s = Server::start(&["--require-approval", "test-sleep"]);
    s.request(
        json!({"jsonrpc":"2.0","id":0,"method":"initialize","params":{
        "protocolVersion":"2025-11-25","capabilities":{"elicitation":{}}}}),
    );
    s.send(&json!({"jsonrpc":"2.0","method":"notifications/initialized"}));
    for (id, action, expect_run) in [(1, "accept", true), (2, "decline", false)] {
        s.send(&json!({"jsonrpc":"2.0","id":id,"method":"tools/call","params":{"name":"test-sleep","arguments":{"seconds":0}}}));
        let ask = s.recv();
        assert_eq!(ask["method"], "elicitation/create", "{ask}");
        assert!(ask["params"]["message"]
            .as_str()
            .unwrap()
            .contains("test-sleep"));
        s.send(&json!({"jsonrpc":"2.0","id":ask["id"],"result":{"action":action,"content":{"approve":true}}}));
        let r = s.recv();
        assert_eq!(r["id"], id);
        assert_eq!(!tool_is_error(&r), expect_run, "{r}");
    }
}

#[test]
fn require_approval_of_an_unknown_tool_is_a_startup_error() {
    let out = std::process::Command::new(common::BIN)
        .args(["--require-approval", "fs-wirte-file"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("fs-wirte-file"));
}

#[test]
fn project_documents_are_file_resources() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    std::fs::write(root.join("README.md"), "# hello\n").unwrap();
    std::fs::create_dir(root.join("src")).unwrap();
    std::fs::write(root.join("src/a b.lisp"), "(defun f () 1)\n").unwrap();
    std::fs::write(root.join("image.png"), [0u8, 1, 2]).unwrap();
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("secret.txt"), "no").unwrap();
    let mut s = Server::initialized(&["--project-root", root.to_str().unwrap()]);
    let r = s.request(json!({"jsonrpc":"2.0","id":1,"method":"resources/list"}));
    let list: Vec<&Value> = r["result"]["resources"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|x| x["uri"].as_str().unwrap().starts_with("file://"))
        .collect();
    let names: Vec<&str> = list.iter().map(|x| x["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["README.md", "src/a b.lisp"]);
    let lisp = list[1];
    assert_eq!(lisp["mimeType"], "text/x-lisp");
    let uri = lisp["uri"].as_str().unwrap();
    assert!(
        uri.starts_with("file://") && uri.contains("a%20b.lisp"),
        "{uri}"
    );
    let r =
        s.request(json!({"jsonrpc":"2.0","id":2,"method":"resources/read","params":{"uri":uri}}));
    assert_eq!(r["result"]["contents"][0]["text"], "(defun f () 1)\n");
    // Outside the root: refused.
    let bad = format!(
        "file://{}/secret.txt",
        outside.path().canonicalize().unwrap().display()
    );
    let r =
        s.request(json!({"jsonrpc":"2.0","id":3,"method":"resources/read","params":{"uri":bad}}));
    assert!(r["error"]["code"].as_i64().is_some(), "{r}");
    assert!(!r.to_string().contains("\"no\""));
    let r = s.request(
        json!({"jsonrpc":"2.0","id":4,"method":"resources/read","params":{"uri":"http://x"}}),
    );
    assert_eq!(error_of(&r).0, -32602);
}

#[test]
fn stdin_eof_does_not_wait_for_the_clients_answers() {
    let mut s = Server::start(&[]);
    s.request(
        json!({"jsonrpc":"2.0","id":1,"method":"initialize","params":{
        "protocolVersion":"2025-11-25","capabilities":{"roots":{}}}}),
    );
    s.send(&json!({"jsonrpc":"2.0","method":"notifications/initialized"}));
    assert_eq!(s.recv()["method"], "roots/list");
    let t0 = Instant::now();
    let (status, _) = s.close();
    assert!(status.success());
    assert!(
        t0.elapsed() < Duration::from_secs(5),
        "exit took {:?}",
        t0.elapsed()
    );
}

#[test]
fn tool_calls_wait_for_the_clients_roots() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    let mut s = Server::start(&[]);
    s.request(
        json!({"jsonrpc":"2.0","id":1,"method":"initialize","params":{
        "protocolVersion":"2025-11-25","capabilities":{"roots":{}}}}),
    );
    s.send(&json!({"jsonrpc":"2.0","method":"notifications/initialized"}));
    s.send(&json!({"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"fs-get-project-info","arguments":{}}}));
    let ask = s.recv();
    assert_eq!(ask["method"], "roots/list");
    std::thread::sleep(Duration::from_millis(300));
    s.send(&json!({"jsonrpc":"2.0","id":ask["id"],"result":{"roots":[{"uri":format!("file://{}", root.display())}]}}));
    let r = s.recv();
    assert_eq!(r["id"], 2);
    assert_eq!(
        r["result"]["structuredContent"]["projectRoot"],
        root.to_str().unwrap()
    );
}

#[test]
fn oversized_last_line_without_newline_is_answered() {
    use std::io::Write;
    let mut child = std::process::Command::new(common::BIN)
        .args(["--max-message-bytes", "1024"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all("x".repeat(2048).as_bytes()).unwrap();
    drop(stdin);
    let out = child.wait_with_output().unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("-32700") && text.contains("1024"), "{text}");
}

#[test]
fn modern_resource_reads_carry_cache_fields_and_missing_is_invalid_params() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    std::fs::write(root.join("a.lisp"), "(x)").unwrap();
    let mut s = Server::start(&["--project-root", root.to_str().unwrap()]);
    let uri = format!("file://{}/a.lisp", root.display());
    let r = s.request(json!({"jsonrpc":"2.0","id":1,"method":"resources/read","params":{"uri":uri,"_meta":modern_meta()}}));
    assert_eq!(r["result"]["cacheScope"], "private");
    assert!(r["result"]["ttlMs"].is_u64());
    let missing = format!("file://{}/nope.lisp", root.display());
    let r = s.request(json!({"jsonrpc":"2.0","id":2,"method":"resources/read","params":{"uri":missing,"_meta":modern_meta()}}));
    assert_eq!(error_of(&r).0, -32602);
    assert_eq!(
        error_of(&r).2["uri"],
        missing,
        "SEP-2164: data names the URI"
    );
    let mut s = Server::initialized(&["--project-root", root.to_str().unwrap()]);
    let r = s.request(
        json!({"jsonrpc":"2.0","id":3,"method":"resources/read","params":{"uri":missing}}),
    );
    assert_eq!(error_of(&r).0, -32002, "legacy keeps -32002");
    // A non-string version is a shape error; -32022 lists every version.
    let r = s.request(json!({"jsonrpc":"2.0","id":4,"method":"tools/list","params":{"_meta":{
        "io.modelcontextprotocol/protocolVersion":5,"io.modelcontextprotocol/clientCapabilities":{}}}}));
    assert_eq!(error_of(&r).0, -32602);
    let r = s.request(json!({"jsonrpc":"2.0","id":5,"method":"tools/list","params":{"_meta":{
        "io.modelcontextprotocol/protocolVersion":"2099-01-01","io.modelcontextprotocol/clientCapabilities":{}}}}));
    assert!(error_of(&r).2["supported"]
        .as_array()
        .unwrap()
        .contains(&json!("2025-11-25")));
}

#[test]
fn schemas_use_only_standard_formats() {
    let mut s = Server::initialized(&[]);
    let r = s.request(json!({"jsonrpc":"2.0","id":1,"method":"tools/list"}));
    let text = r.to_string();
    for f in [
        "\"format\":\"uint",
        "\"format\":\"double\"",
        "\"format\":\"int",
    ] {
        assert!(!text.contains(f), "non-standard {f} in the schemas");
    }
    for t in r["result"]["tools"].as_array().unwrap() {
        assert!(
            t["inputSchema"].get("title").is_none(),
            "no Rust type names as titles: {t}"
        );
    }
}

#[test]
fn doctor_checks_everything_and_says_how_to_fix_failures() {
    let out = std::process::Command::new(common::BIN)
        .arg("doctor")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    for check in ["lisp", "swank", "core cache", "image", "eval"] {
        assert!(
            text.contains(&format!("[ok  ] {check}")),
            "{check} in:\n{text}"
        );
    }
    assert!(text.contains("(+ 1 2) => 3"));
    let out = std::process::Command::new(common::BIN)
        .args(["doctor", "--lisp", "/nonexistent/sbcl"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(!out.status.success());
    assert!(
        text.contains("[FAIL] lisp") && text.contains("fix:"),
        "{text}"
    );
}

#[test]
fn stdin_eof_cancels_work_that_outlasts_the_grace_period() {
    let mut s = Server::initialized(&[]);
    s.send(&json!({"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"test-sleep","arguments":{"seconds":120}}}));
    std::thread::sleep(Duration::from_millis(200));
    let t0 = Instant::now();
    let (status, _) = s.close();
    assert!(status.success());
    assert!(
        t0.elapsed() < Duration::from_secs(20),
        "the server gave up on the abandoned call after its grace period: {:?}",
        t0.elapsed()
    );
}

#[test]
fn removed_methods_bad_cursors_and_unknown_resources() {
    let mut s = Server::initialized(&[]);
    // ping and logging/setLevel stay in the legacy era, not in 2026-07-28.
    let r = s.request(json!({"jsonrpc":"2.0","id":1,"method":"ping"}));
    assert_eq!(r["result"], json!({}));
    let r =
        s.request(json!({"jsonrpc":"2.0","id":2,"method":"ping","params":{"_meta":modern_meta()}}));
    assert_eq!(error_of(&r).0, -32601, "{r}");
    let r = s.request(json!({"jsonrpc":"2.0","id":3,"method":"logging/setLevel",
        "params":{"level":"debug","_meta":modern_meta()}}));
    assert_eq!(error_of(&r).0, -32601, "{r}");
    // Every list method refuses a cursor it never gave.
    for (id, method) in [
        (4, "tools/list"),
        (5, "prompts/list"),
        (6, "resources/list"),
        (7, "resources/templates/list"),
    ] {
        let r =
            s.request(json!({"jsonrpc":"2.0","id":id,"method":method,"params":{"cursor":"bogus"}}));
        assert_eq!(error_of(&r).0, -32602, "{method}: {r}");
    }
    // An unknown resource, lisp:// too: -32002 with data.uri.
    for (id, uri) in [(8, "lisp://nonsense/x"), (9, "file:///no/such/file.lisp")] {
        let r = s.request(
            json!({"jsonrpc":"2.0","id":id,"method":"resources/read","params":{"uri":uri}}),
        );
        let (code, _, data) = error_of(&r);
        assert_eq!(code, -32002, "{r}");
        assert_eq!(data["uri"], uri, "{r}");
    }
}

#[test]
fn tool_calls_run_as_tasks() {
    let mut s = Server::start(&[]);
    let init = s.request(
        json!({"jsonrpc":"2.0","id":0,"method":"initialize","params":{
        "protocolVersion":"2025-11-25","capabilities":{}}}),
    );
    assert_eq!(
        init["result"]["capabilities"]["tasks"]["requests"]["tools"]["call"],
        json!({}),
        "{init}"
    );
    s.send(&json!({"jsonrpc":"2.0","method":"notifications/initialized"}));
    let list = s.request(json!({"jsonrpc":"2.0","id":1,"method":"tools/list"}));
    let tools = list["result"]["tools"].as_array().unwrap();
    let support = |n: &str| {
        tools.iter().find(|t| t["name"] == n).unwrap()["execution"]["taskSupport"].clone()
    };
    assert_eq!(support("evaluate-lisp"), "optional");
    assert_eq!(support("asdf-test-system"), "optional");
    assert!(support("fs-read-file").is_null());

    // Created at once, working, then completed with the tool's own result.
    let r = s.request(
        json!({"jsonrpc":"2.0","id":2,"method":"tools/call","params":{
        "name":"test-sleep","arguments":{"seconds":0.5},"task":{"ttl":60000}}}),
    );
    let task = &r["result"]["task"];
    assert_eq!(task["status"], "working", "{r}");
    assert_eq!(task["ttl"], 60000);
    assert!(task["createdAt"].as_str().unwrap().ends_with('Z'), "{task}");
    assert!(r["result"]["_meta"]["io.modelcontextprotocol/model-immediate-response"].is_string());
    let id = task["taskId"].as_str().unwrap().to_string();
    let g = s.request(json!({"jsonrpc":"2.0","id":3,"method":"tasks/get","params":{"taskId":id}}));
    assert_eq!(g["result"]["status"], "working", "{g}");
    // tasks/result blocks until the end; a status notification may come first.
    s.send(&json!({"jsonrpc":"2.0","id":4,"method":"tasks/result","params":{"taskId":id}}));
    let seen = s.collect_until(Duration::from_secs(10), |m| m["id"] == 4);
    let res = seen.last().unwrap();
    assert_eq!(res["result"]["content"][0]["text"], "slept 0.5s", "{res}");
    assert_eq!(
        res["result"]["_meta"]["io.modelcontextprotocol/related-task"]["taskId"],
        id.as_str()
    );
    assert!(
        seen.iter()
            .any(|m| m["method"] == "notifications/tasks/status"
                && m["params"]["taskId"] == id.as_str()
                && m["params"]["status"] == "completed"),
        "{seen:?}"
    );
    let g = s.request(json!({"jsonrpc":"2.0","id":5,"method":"tasks/get","params":{"taskId":id}}));
    assert_eq!(g["result"]["status"], "completed");

    // Cancel: the work stops, the task is cancelled, a second cancel is refused.
    let r = s.request(
        json!({"jsonrpc":"2.0","id":6,"method":"tools/call","params":{
        "name":"test-sleep","arguments":{"seconds":30},"task":{}}}),
    );
    let long = r["result"]["task"]["taskId"].as_str().unwrap().to_string();
    let c =
        s.request(json!({"jsonrpc":"2.0","id":7,"method":"tasks/cancel","params":{"taskId":long}}));
    assert_eq!(c["result"]["status"], "cancelled", "{c}");
    let t0 = Instant::now();
    let res =
        s.request(json!({"jsonrpc":"2.0","id":8,"method":"tasks/result","params":{"taskId":long}}));
    assert!(t0.elapsed() < Duration::from_secs(5), "the work stopped");
    assert!(res["result"]["isError"] == true, "{res}");
    let c =
        s.request(json!({"jsonrpc":"2.0","id":9,"method":"tasks/cancel","params":{"taskId":long}}));
    assert_eq!(c["error"]["code"], -32602, "{c}");

    // Listing shows both; unknown ids and cursors are -32602.
    let l = s.request(json!({"jsonrpc":"2.0","id":10,"method":"tasks/list"}));
    let ids: Vec<&str> = l["result"]["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["taskId"].as_str().unwrap())
        .collect();
    assert_eq!(ids, [id.as_str(), long.as_str()]);
    for (n, m, p) in [
        (11, "tasks/get", json!({"taskId":"nope"})),
        (12, "tasks/result", json!({"taskId":"nope"})),
        (13, "tasks/list", json!({"cursor":"nope"})),
    ] {
        let e = s.request(json!({"jsonrpc":"2.0","id":n,"method":m,"params":p}));
        assert_eq!(e["error"]["code"], -32602, "{m}: {e}");
    }
    // A tool that cannot run as a task says so.
    let e = s.request(
        json!({"jsonrpc":"2.0","id":14,"method":"tools/call","params":{
        "name":"fs-get-project-info","arguments":{},"task":{}}}),
    );
    assert_eq!(e["error"]["code"], -32601, "{e}");
}

/// A small `ttl` neither hides a working task nor bypasses the task cap:
/// a task stays visible and cancellable while its work runs, even past its
/// `ttl` (and goes once it has ended), and 300 working tasks created with
/// `ttl` 0 leave 256 (the cap) created and the rest refused with an error
/// that says why.
#[test]
fn short_ttls_neither_drop_working_tasks_nor_bypass_the_cap() {
    let mut s = Server::initialized(&[]);
    let r = s.request(
        json!({"jsonrpc":"2.0","id":1,"method":"tools/call","params":{
        "name":"test-sleep","arguments":{"seconds":30},"task":{"ttl":1}}}),
    );
    let id = r["result"]["task"]["taskId"].as_str().unwrap().to_string();
    std::thread::sleep(Duration::from_millis(300));
    let g = s.request(json!({"jsonrpc":"2.0","id":2,"method":"tasks/get","params":{"taskId":id}}));
    assert_eq!(g["result"]["status"], "working", "past its ttl: {g}");
    let l = s.request(json!({"jsonrpc":"2.0","id":3,"method":"tasks/list"}));
    assert_eq!(l["result"]["tasks"][0]["taskId"], id.as_str(), "{l}");
    let c =
        s.request(json!({"jsonrpc":"2.0","id":4,"method":"tasks/cancel","params":{"taskId":id}}));
    assert_eq!(c["result"]["status"], "cancelled", "{c}");
    // Ended, and past its ttl: gone.
    std::thread::sleep(Duration::from_millis(300));
    let g = s.request(json!({"jsonrpc":"2.0","id":5,"method":"tasks/get","params":{"taskId":id}}));
    assert_eq!(
        g["error"]["code"], -32602,
        "an ended task past its ttl: {g}"
    );

    let sent = 300;
    for n in 0..sent {
        s.send(
            &json!({"jsonrpc":"2.0","id":1000 + n,"method":"tools/call","params":{
            "name":"test-sleep","arguments":{"seconds":60},"task":{"ttl":0}}}),
        );
    }
    let (mut created, mut refused) = (0, Vec::new());
    while created + refused.len() < sent as usize {
        let m = s.recv_within(Duration::from_secs(30));
        if m["id"].as_i64().is_some_and(|n| n >= 1000) {
            if m["result"]["task"]["status"] == "working" {
                created += 1;
            } else {
                refused.push(m);
            }
        }
    }
    assert_eq!(created, 256, "tasks created past the cap with ttl 0");
    assert_eq!(refused.len(), sent as usize - 256);
    let (code, _, data) = error_of(&refused[0]);
    assert_eq!(code, -32603, "{}", refused[0]);
    let why = data.as_str().unwrap_or_default();
    assert!(
        why.contains("already holds 256 tasks") && why.contains("256 still working"),
        "{why}"
    );
    // The session still answers, and its tasks are all there to cancel.
    let l = s.request(json!({"jsonrpc":"2.0","id":6,"method":"tasks/list"}));
    assert_eq!(l["result"]["tasks"].as_array().unwrap().len(), 100, "{l}");
    assert!(l["result"]["nextCursor"].is_string(), "{l}");
}

/// A stateless request that declares `caps`.
fn meta_with(caps: Value) -> Value {
    json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": caps
    })
}

#[test]
fn input_required_state_is_single_use_and_bound_to_its_request() {
    let mut s = Server::start(&[]);
    let call = |id: i64, tool: &str, extra: Value| {
        let mut params =
            json!({"name": tool, "arguments": {}, "_meta": meta_with(json!({"elicitation": {}}))});
        if let (Value::Object(p), Value::Object(e)) = (&mut params, extra) {
            p.extend(e);
        }
        json!({"jsonrpc":"2.0","id":id,"method":"tools/call","params":params})
    };
    let r = s.request(call(
        1,
        "test_input_required_result_request_state",
        json!({}),
    ));
    assert_eq!(r["result"]["resultType"], "input_required", "{r}");
    assert_eq!(
        r["result"]["inputRequests"]["confirm"]["method"],
        "elicitation/create"
    );
    let state = r["result"]["requestState"].as_str().unwrap().to_string();
    let answer = json!({"confirm": {"action": "accept", "content": {"ok": true}}});
    // Another request cannot use it, and an altered one is unknown.
    let r = s.request(call(
        2,
        "test_input_required_result_tampered_state",
        json!({"inputResponses": answer, "requestState": state}),
    ));
    assert_eq!(error_of(&r).0, -32602, "{r}");
    let r = s.request(call(
        3,
        "test_input_required_result_request_state",
        json!({"inputResponses": answer, "requestState": format!("{state}x")}),
    ));
    assert_eq!(error_of(&r).0, -32602, "{r}");
    // A handle is used up once taken: the first use above (by the wrong
    // request) consumed it, so even its own request cannot replay it.
    let r = s.request(call(
        4,
        "test_input_required_result_request_state",
        json!({"inputResponses": answer, "requestState": state}),
    ));
    assert_eq!(error_of(&r).0, -32602, "{r}");
    // A fresh round trip completes.
    let r = s.request(call(
        5,
        "test_input_required_result_request_state",
        json!({}),
    ));
    let state = r["result"]["requestState"].as_str().unwrap().to_string();
    let r = s.request(call(
        6,
        "test_input_required_result_request_state",
        json!({"inputResponses": answer, "requestState": state}),
    ));
    assert_eq!(r["result"]["resultType"], "complete", "{r}");
    assert!(tool_text(&r).contains("state-ok"), "{r}");
    // A client without the capability is refused before the tool runs.
    let r = s.request(
        json!({"jsonrpc":"2.0","id":7,"method":"tools/call","params":{
        "name":"test_missing_capability","arguments":{},"_meta":modern_meta()}}),
    );
    assert_eq!(error_of(&r).0, -32021, "{r}");
    assert_eq!(
        error_of(&r).2["requiredCapabilities"],
        json!({"sampling": {}})
    );
}

#[test]
fn legacy_tools_ask_the_client_on_the_calls_stream() {
    let mut s = Server::start(&[]);
    s.request(
        json!({"jsonrpc":"2.0","id":0,"method":"initialize","params":{
        "protocolVersion":"2025-11-25","capabilities":{"sampling":{}}}}),
    );
    s.send(
        &json!({"jsonrpc":"2.0","id":1,"method":"tools/call","params":{
        "name":"test_sampling","arguments":{"prompt":"Capital of France?"}}}),
    );
    let ask = s.recv();
    assert_eq!(ask["method"], "sampling/createMessage", "{ask}");
    assert_eq!(
        ask["params"]["messages"][0]["content"]["text"],
        "Capital of France?"
    );
    s.send(&json!({"jsonrpc":"2.0","id":ask["id"],"result":{
        "role":"assistant","content":{"type":"text","text":"Paris"},"model":"m"}}));
    let r = s.recv();
    assert_eq!(r["id"], 1, "{r}");
    assert_eq!(tool_text(&r), "LLM response: Paris");
    // Without the capability declared, the tool says so (legacy: a result).
    let r = s.call_tool(2, "test_elicitation", json!({"message": "hi"}));
    assert!(
        tool_is_error(&r) && tool_text(&r).contains("elicitation"),
        "{r}"
    );
}

#[test]
fn subscribed_resources_notify_their_changes() {
    let mut s = Server::initialized(&[]);
    let r = s.request(json!({"jsonrpc":"2.0","id":1,"method":"resources/subscribe","params":{"uri":"test://nope"}}));
    assert_eq!(error_of(&r).0, -32002, "only existing fixtures: {r}");
    // Not subscribed yet: no notification.
    s.send(
        &json!({"jsonrpc":"2.0","id":2,"method":"tools/call","params":{
        "name":"test_update_watched_resource","arguments":{"text":"one"}}}),
    );
    assert_eq!(s.recv()["id"], 2, "the result comes alone");
    let r = s.request(json!({"jsonrpc":"2.0","id":3,"method":"resources/subscribe","params":{"uri":"test://watched-resource"}}));
    assert_eq!(r["result"], json!({}));
    s.send(
        &json!({"jsonrpc":"2.0","id":4,"method":"tools/call","params":{
        "name":"test_update_watched_resource","arguments":{"text":"two"}}}),
    );
    let n = s.recv();
    assert_eq!(n["method"], "notifications/resources/updated", "{n}");
    assert_eq!(n["params"]["uri"], "test://watched-resource");
    assert_eq!(s.recv()["id"], 4);
    let r = s.request(json!({"jsonrpc":"2.0","id":5,"method":"resources/read","params":{"uri":"test://watched-resource"}}));
    assert_eq!(r["result"]["contents"][0]["text"], "two");
    let r = s.request(json!({"jsonrpc":"2.0","id":6,"method":"resources/unsubscribe","params":{"uri":"test://watched-resource"}}));
    assert_eq!(r["result"], json!({}));
    s.send(
        &json!({"jsonrpc":"2.0","id":7,"method":"tools/call","params":{
        "name":"test_update_watched_resource","arguments":{"text":"three"}}}),
    );
    assert_eq!(s.recv()["id"], 7, "unsubscribed: no notification");
}

/// URIs whose percent-escapes are broken or do not decode to UTF-8 (the
/// first once panicked the decoder, which sliced inside `é`).
const BROKEN_URIS: [&str; 4] = [
    "file:///x%a\u{e9}",
    "file:///x%",
    "file:///%ff%fe",
    "file:///a%2",
];

#[test]
fn initialize_with_a_broken_root_uri_is_answered_and_the_server_serves_on() {
    for uri in BROKEN_URIS {
        let mut s = Server::start(&["--lazy-image"]);
        let r = s.request(
            json!({"jsonrpc":"2.0","id":1,"method":"initialize","params":{
            "protocolVersion":"2025-11-25","capabilities":{},"rootUri":uri,
            "clientInfo":{"name":"test","version":"1"}}}),
        );
        assert_eq!(r["result"]["protocolVersion"], "2025-11-25", "{uri}: {r}");
        s.send(&json!({"jsonrpc":"2.0","method":"notifications/initialized"}));
        let r = s.request(json!({"jsonrpc":"2.0","id":2,"method":"ping"}));
        assert_eq!(r["result"], json!({}), "{uri}: {r}");
        // The root was passed over: the project root is the server's own.
        let r = s.call_tool(3, "fs-get-project-info", json!({}));
        let root = r["result"]["structuredContent"]["projectRoot"]
            .as_str()
            .unwrap_or_else(|| panic!("{uri}: {r}"))
            .to_string();
        assert!(
            !root.contains('%') && !root.contains('\u{fffd}'),
            "{uri}: {root}"
        );
    }
}

#[test]
fn broken_uris_in_the_clients_roots_are_passed_over() {
    let dir = tempfile::tempdir().unwrap();
    let good = dir.path().canonicalize().unwrap();
    let mut s = Server::start(&["--lazy-image"]);
    s.request(
        json!({"jsonrpc":"2.0","id":1,"method":"initialize","params":{
        "protocolVersion":"2025-11-25","capabilities":{"roots":{}}}}),
    );
    s.send(&json!({"jsonrpc":"2.0","method":"notifications/initialized"}));
    let ask = s.recv();
    assert_eq!(ask["method"], "roots/list", "{ask}");
    let mut roots: Vec<Value> = BROKEN_URIS.iter().map(|u| json!({"uri": u})).collect();
    roots.push(json!({"uri": format!("file://{}", good.display())}));
    s.send(&json!({"jsonrpc":"2.0","id":ask["id"],"result":{"roots":roots}}));
    let r = s.request(json!({"jsonrpc":"2.0","id":2,"method":"ping"}));
    assert_eq!(r["result"], json!({}), "{r}");
    // The first usable root is the project root; the broken ones are not
    // roots at all.
    let r = s.call_tool(3, "fs-get-project-info", json!({}));
    assert_eq!(
        r["result"]["structuredContent"]["projectRoot"],
        good.to_str().unwrap(),
        "{r}"
    );
}

#[test]
fn resources_read_with_broken_percent_encoding_is_invalid_params() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    let mut s = Server::initialized(&["--project-root", root.to_str().unwrap(), "--lazy-image"]);
    let base = format!("file://{}", root.display());
    let uris = [
        format!("{base}/x%a\u{e9}"),
        format!("{base}/x%"),
        format!("{base}/%ff%fe"),
        format!("{base}/a%2"),
        format!("{base}/a%00b"),
        "lisp://symbol/CL/x%a\u{e9}".to_string(),
        "lisp://package/%ff".to_string(),
        "lisp://system/a%2".to_string(),
        "test://template/%e9%/data".to_string(),
    ];
    for (n, uri) in uris.iter().enumerate() {
        let r = s.request(
            json!({"jsonrpc":"2.0","id":n,"method":"resources/read","params":{"uri":uri}}),
        );
        let (code, _, data) = error_of(&r);
        assert_eq!(code, -32602, "{uri}: {r}");
        assert!(data.to_string().contains("Cannot read"), "{uri}: {r}");
    }
    let r = s.request(json!({"jsonrpc":"2.0","id":"p","method":"ping"}));
    assert_eq!(r["result"], json!({}), "{r}");
}

#[test]
fn a_panic_in_the_inline_steps_is_answered_and_the_server_serves_on() {
    let mut s = Server::start(&["--lazy-image"]);
    // Before the handshake (where only initialize and ping are served) and
    // after it, as a request, in a batch and as a notification.
    let r = s.request(json!({"jsonrpc":"2.0","id":1,"method":"test/panic-inline"}));
    let (code, _, data) = error_of(&r);
    assert_eq!(code, -32603, "{r}");
    assert!(
        data.as_str()
            .unwrap()
            .contains("deliberate inline test panic"),
        "{r}"
    );
    let r = s.request(
        json!({"jsonrpc":"2.0","id":2,"method":"initialize","params":{
        "protocolVersion":"2025-11-25","capabilities":{}}}),
    );
    assert!(r["result"].is_object(), "{r}");
    s.send(&json!({"jsonrpc":"2.0","method":"notifications/initialized"}));
    s.send(&json!({"jsonrpc":"2.0","method":"test/panic-inline"}));
    s.send_raw(r#"[{"jsonrpc":"2.0","id":"b1","method":"test/panic-inline"},{"jsonrpc":"2.0","id":"b2","method":"ping"}]"#);
    let batch = s.recv();
    let answers = batch.as_array().unwrap_or_else(|| panic!("{batch}"));
    assert_eq!(answers.len(), 2, "{batch}");
    assert_eq!(answers[0]["id"], "b1");
    assert_eq!(answers[0]["error"]["code"], -32603, "{batch}");
    assert_eq!(answers[1]["result"], json!({}), "{batch}");
    let r = s.request(json!({"jsonrpc":"2.0","id":3,"method":"ping"}));
    assert_eq!(r["result"], json!({}), "{r}");
    let (status, _) = s.close();
    assert!(status.success());
}
