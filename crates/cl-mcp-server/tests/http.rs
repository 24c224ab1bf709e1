//! Black-box tests of the Streamable HTTP transport.

mod common;

use common::Listening;
use serde_json::{json, Value};

/// An HTTP server on a free port; `url` is its `/mcp` endpoint.
struct HttpServer {
    server: Listening,
    url: String,
}

impl HttpServer {
    fn log_contains(&self, needle: &str) -> bool {
        self.server.log_contains(needle)
    }
}

fn start(extra: &[&str]) -> HttpServer {
    let mut args = vec!["http", "--bind", "127.0.0.1:0"];
    args.extend_from_slice(extra);
    let server = Listening::start(&args);
    let url = server.address.clone();
    assert!(
        url.starts_with("http://127.0.0.1:"),
        "address announced: {url}"
    );
    HttpServer { server, url }
}

fn client() -> reqwest::Client {
    reqwest::Client::new()
}

const ACCEPT: &str = "application/json, text/event-stream";

fn init_body() -> Value {
    json!({"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{}}})
}

async fn initialize(s: &HttpServer) -> String {
    let r = client()
        .post(&s.url)
        .header("accept", ACCEPT)
        .json(&init_body())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let id = r.headers()["mcp-session-id"].to_str().unwrap().to_string();
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["result"]["protocolVersion"], "2025-11-25");
    id
}

#[tokio::test]
async fn legacy_sessions_lifecycle() {
    let s = start(&[]);
    let id = initialize(&s).await;
    assert!(id.len() >= 32, "session ids are unguessable: {id}");
    // notifications: 202, no body
    let r = client()
        .post(&s.url)
        .header("mcp-session-id", &id)
        .json(&json!({"jsonrpc":"2.0","method":"notifications/initialized"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 202);
    let r = client()
        .post(&s.url)
        .header("accept", ACCEPT)
        .header("mcp-session-id", &id)
        .header("mcp-protocol-version", "2025-11-25")
        .json(&json!({"jsonrpc":"2.0","id":2,"method":"tools/list"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["content-type"], "application/json");
    let v: Value = r.json().await.unwrap();
    assert!(v["result"]["tools"].is_array());
    // Without a session id: 400. Unknown: 404.
    let r = client()
        .post(&s.url)
        .json(&json!({"jsonrpc":"2.0","id":3,"method":"tools/list"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    let r = client()
        .post(&s.url)
        .header("mcp-session-id", "nope")
        .json(&json!({"jsonrpc":"2.0","id":3,"method":"tools/list"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404);
    // A bad protocol version header: 400.
    let r = client()
        .post(&s.url)
        .header("mcp-session-id", &id)
        .header("mcp-protocol-version", "1999-01-01")
        .json(&json!({"jsonrpc":"2.0","id":3,"method":"ping"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    // DELETE ends the session.
    let r = client()
        .delete(&s.url)
        .header("mcp-session-id", &id)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 204);
    let r = client()
        .post(&s.url)
        .header("mcp-session-id", &id)
        .json(&json!({"jsonrpc":"2.0","id":4,"method":"ping"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404);
    // GET: no standalone stream.
    let r = client().get(&s.url).send().await.unwrap();
    assert_eq!(r.status(), 405);
}

#[tokio::test]
async fn non_json_body_gets_a_json_rpc_parse_error() {
    let s = start(&[]);
    let r = client()
        .post(&s.url)
        .header("content-type", "application/json")
        .body("{oops")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["error"]["code"], -32700);
    assert_eq!(v["id"], Value::Null);
}

#[tokio::test]
async fn origin_host_and_token_guards() {
    let s = start(&["--token", "s3cret"]);
    let r = client()
        .post(&s.url)
        .json(&init_body())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    assert!(r.headers().contains_key("www-authenticate"));
    let ok = client()
        .post(&s.url)
        .bearer_auth("s3cret")
        .header("origin", "http://localhost:5173")
        .json(&init_body())
        .send()
        .await
        .unwrap();
    assert_eq!(ok.status(), 200);
    let r = client()
        .post(&s.url)
        .bearer_auth("s3cret")
        .header("origin", "https://evil.example")
        .json(&init_body())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403);
    let v: Value = r.json().await.unwrap();
    assert!(v["error"]["data"]
        .as_str()
        .unwrap()
        .contains("evil.example"));
    let r = client()
        .post(&s.url)
        .bearer_auth("s3cret")
        .header("host", "evil.example")
        .json(&init_body())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403);
    // Parsed strictly and compared exactly: look-alikes of localhost fail.
    for origin in [
        "http://localhost:3000.evil.example",
        "http://localhost.evil.example",
        "http://localhost@evil.example",
        "http://evil.example#localhost",
        "http://localhost:3000/path",
        "localhost",
        "null",
    ] {
        let r = client()
            .post(&s.url)
            .bearer_auth("s3cret")
            .header("origin", origin)
            .json(&init_body())
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 403, "Origin {origin}");
    }
    for host in [
        "localhost:80@evil.example",
        "localhost:3000.evil.example",
        "evil.example:80",
        "localhost:",
        "localhost:99999",
        "127.0.0.1.evil.example",
    ] {
        let r = client()
            .post(&s.url)
            .bearer_auth("s3cret")
            .header("host", host)
            .json(&init_body())
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 403, "Host {host}");
    }
    for (origin, host) in [
        ("http://127.0.0.1:9", "127.0.0.1:9"),
        ("https://LOCALHOST", "localhost"),
        ("http://[::1]:8080", "[0:0:0:0:0:0:0:1]:8080"),
    ] {
        let r = client()
            .post(&s.url)
            .bearer_auth("s3cret")
            .header("origin", origin)
            .header("host", host)
            .json(&init_body())
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "Origin {origin}, Host {host}");
    }
}

fn modern(method: &str, id: i64, mut params: Value) -> Value {
    params["_meta"] = json!({
        "io.modelcontextprotocol/protocolVersion":"2026-07-28",
        "io.modelcontextprotocol/clientCapabilities":{}});
    json!({"jsonrpc":"2.0","id":id,"method":method,"params":params})
}

fn modern_post(s: &HttpServer, body: &Value) -> reqwest::RequestBuilder {
    let mut r = client()
        .post(&s.url)
        .header("accept", ACCEPT)
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", body["method"].as_str().unwrap());
    if let Some(name) = body["params"]["name"]
        .as_str()
        .or(body["params"]["uri"].as_str())
        .or(body["params"]["taskId"].as_str())
    {
        r = r.header("mcp-name", name);
    }
    r.json(body)
}

#[tokio::test]
async fn stateless_posts_need_no_session() {
    let s = start(&[]);
    let body = modern("server/discover", 1, json!({}));
    let r = modern_post(&s, &body)
        .header("mcp-session-id", "stale-and-ignored")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert!(!r.headers().contains_key("mcp-session-id"));
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["result"]["resultType"], "complete");
    let body = modern(
        "tools/call",
        2,
        json!({"name":"test-sleep","arguments":{"seconds":0}}),
    );
    let r = modern_post(&s, &body).send().await.unwrap();
    assert_eq!(r.status(), 200);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["result"]["content"][0]["text"], "slept 0s");
}

#[tokio::test]
async fn stateless_routing_headers_and_status_codes() {
    let s = start(&[]);
    let body = modern("tools/list", 1, json!({}));
    // Headers missing or disagreeing with the body: 400 with -32020.
    let r = client()
        .post(&s.url)
        .header("accept", ACCEPT)
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["error"]["code"], -32020);
    assert_eq!(v["id"], 1);
    // A second, different MCP-Protocol-Version: routing headers must be unique.
    let r = modern_post(&s, &body)
        .header("mcp-protocol-version", "2025-06-18")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    let r = client()
        .post(&s.url)
        .header("mcp-protocol-version", "2025-06-18")
        .header("mcp-method", "tools/list")
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400, "header version differs from _meta's");
    let r = client()
        .post(&s.url)
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", "ping")
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    let call = modern(
        "tools/call",
        2,
        json!({"name":"test-sleep","arguments":{"seconds":0}}),
    );
    let r = modern_post(&s, &call)
        .header("mcp-name", "other-tool")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400, "Mcp-Name must match params.name");
    // Mcp-Name may come base64-wrapped.
    let r = client()
        .post(&s.url)
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", "tools/call")
        .header("mcp-name", "=?base64?dGVzdC1zbGVlcA==?=")
        .json(&call)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    // Unknown method: 404 with -32601. Unsupported version: 400 with -32022.
    let r = modern_post(&s, &modern("frobnicate", 3, json!({})))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404);
    let mut old = modern("tools/list", 4, json!({}));
    old["params"]["_meta"]["io.modelcontextprotocol/protocolVersion"] = json!("2099-01-01");
    let r = client()
        .post(&s.url)
        .header("mcp-protocol-version", "2099-01-01")
        .header("mcp-method", "tools/list")
        .json(&old)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["error"]["code"], -32022);
    // A stateless request in a batch: 400.
    let r = client()
        .post(&s.url)
        .json(&json!([body]))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    // A stateless initialize does not create a session.
    let mut init = init_body();
    init["params"]["_meta"] = modern("x", 0, json!({}))["params"]["_meta"].clone();
    let r = modern_post(&s, &init).send().await.unwrap();
    assert_eq!(r.status(), 404);
    assert!(!r.headers().contains_key("mcp-session-id"));
}

#[tokio::test]
async fn closing_a_stateless_stream_cancels_the_request() {
    let s = start(&[]);
    let call = modern(
        "tools/call",
        7,
        json!({"name":"test-sleep","arguments":{"seconds":20}}),
    );
    let req = modern_post(&s, &call)
        .timeout(std::time::Duration::from_millis(500))
        .send();
    assert!(req.await.is_err(), "the client gave up");
    for _ in 0..50 {
        if s.log_contains("cancelling it") {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    panic!(
        "the server did not cancel the abandoned request: {:?}",
        s.server.log.lock().unwrap()
    );
}

#[tokio::test]
async fn elicitation_travels_on_the_requests_stream() {
    use futures::StreamExt;
    let s = start(&["--require-approval", "test-sleep"]);
    let r = client()
        .post(&s.url)
        .header("accept", ACCEPT)
        .json(
            &json!({"jsonrpc":"2.0","id":1,"method":"initialize","params":{
            "protocolVersion":"2025-11-25","capabilities":{"elicitation":{}}}}),
        )
        .send()
        .await
        .unwrap();
    let id = r.headers()["mcp-session-id"].to_str().unwrap().to_string();
    let r = client()
        .post(&s.url)
        .header("accept", ACCEPT)
        .header("mcp-session-id", &id)
        .json(&json!({"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"test-sleep","arguments":{"seconds":0}}}))
        .send()
        .await
        .unwrap();
    assert!(r.headers()["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/event-stream"));
    let mut stream = r.bytes_stream();
    let mut buf = String::new();
    let mut answered = false;
    while let Some(chunk) = stream.next().await {
        buf.push_str(&String::from_utf8_lossy(&chunk.unwrap()));
        if !answered {
            if let Some(line) = buf.lines().find(|l| l.contains("elicitation/create")) {
                let ask: Value =
                    serde_json::from_str(line.trim_start_matches("data:").trim()).unwrap();
                let r = client()
                    .post(&s.url)
                    .header("mcp-session-id", &id)
                    .json(&json!({"jsonrpc":"2.0","id":ask["id"],"result":{"action":"accept","content":{"approve":true}}}))
                    .send()
                    .await
                    .unwrap();
                assert_eq!(r.status(), 202);
                answered = true;
            }
        }
        if buf.contains("slept 0s") {
            return;
        }
    }
    panic!("no tool result after the approval: {buf}");
}

#[tokio::test]
async fn long_calls_stream_progress_over_sse() {
    let s = start(&[]);
    let id = initialize(&s).await;
    let r = client()
        .post(&s.url)
        .header("accept", ACCEPT)
        .header("mcp-session-id", &id)
        .json(
            &json!({"jsonrpc":"2.0","id":5,"method":"tools/call","params":{
            "_meta":{"progressToken":1},"name":"test-sleep","arguments":{"seconds":1.7}}}),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert!(r.headers()["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/event-stream"));
    let body = r.text().await.unwrap();
    let events: Vec<Value> = body
        .lines()
        .filter_map(|l| l.strip_prefix("data: ").or_else(|| l.strip_prefix("data:")))
        .map(|d| serde_json::from_str(d.trim()).unwrap())
        .collect();
    assert!(events.len() >= 2, "{body}");
    assert!(events
        .iter()
        .any(|e| e["method"] == "notifications/progress"));
    assert_eq!(events.last().unwrap()["id"], 5);
    assert_eq!(
        events.last().unwrap()["result"]["content"][0]["text"],
        "slept 1.7s"
    );
}

#[tokio::test]
async fn stateless_request_without_meta_is_invalid_params_with_its_id() {
    let s = start(&[]);
    // The routing headers say 2026-07-28, the body lost its _meta.
    let body = json!({"jsonrpc":"2.0","id":"req-7","method":"tools/list","params":{}});
    let r = client()
        .post(&s.url)
        .header("accept", ACCEPT)
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", "tools/list")
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["error"]["code"], -32602, "{v}");
    assert_eq!(v["id"], "req-7", "{v}");
    assert!(
        v["error"]["data"].as_str().unwrap().contains("_meta"),
        "{v}"
    );
    // ping and logging/setLevel were removed in 2026-07-28: 404, -32601.
    for (id, method, params) in [
        (8, "ping", json!({})),
        (9, "logging/setLevel", json!({"level":"debug"})),
    ] {
        let r = modern_post(&s, &modern(method, id, params))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 404, "{method}");
        let v: Value = r.json().await.unwrap();
        assert_eq!(v["error"]["code"], -32601, "{v}");
        assert_eq!(v["id"], id, "{v}");
    }
}

#[tokio::test]
async fn session_rejections_carry_the_request_id() {
    let s = start(&[]);
    // No session header.
    let r = client()
        .post(&s.url)
        .header("accept", ACCEPT)
        .json(&json!({"jsonrpc":"2.0","id":41,"method":"tools/list"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["id"], 41, "{v}");
    // Unknown session.
    let r = client()
        .post(&s.url)
        .header("accept", ACCEPT)
        .header("mcp-session-id", "no-such-session")
        .json(&json!({"jsonrpc":"2.0","id":42,"method":"tools/list"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["id"], 42, "{v}");
    // A version header that differs from the session's.
    let sid = initialize(&s).await;
    let r = client()
        .post(&s.url)
        .header("accept", ACCEPT)
        .header("mcp-session-id", &sid)
        .header("mcp-protocol-version", "2025-03-26")
        .json(&json!({"jsonrpc":"2.0","id":43,"method":"tools/list"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["id"], 43, "{v}");
}

#[tokio::test]
async fn mirrored_parameters_must_match_their_mcp_param_headers() {
    let s = start(&[]);
    let list = modern("tools/list", 1, json!({}));
    let v: Value = answer(modern_post(&s, &list)).await;
    let tool = v["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "test_custom_header")
        .unwrap()
        .clone();
    assert_eq!(
        tool["inputSchema"]["properties"]["region"]["x-mcp-header"],
        "Region"
    );
    let call = modern(
        "tools/call",
        2,
        json!({"name":"test_custom_header","arguments":{"region":"eu-west"}}),
    );
    // (header value, accepted?)
    let cases: &[(Option<&str>, bool)] = &[
        (Some("eu-west"), true),
        (Some("=?base64?ZXUtd2VzdA==?="), true),
        (None, false),
        (Some("us-east"), false),
        (Some("=?base64?ZXUtd2VzdA?="), false), // unpadded
        (Some("=?base64?ZXUt!!d2VzdA==?="), false),
    ];
    for (header, accepted) in cases {
        let mut r = modern_post(&s, &call);
        if let Some(h) = header {
            r = r.header("mcp-param-region", *h);
        }
        let r = r.send().await.unwrap();
        let status = r.status();
        let v: Value = r.json().await.unwrap();
        if *accepted {
            assert_eq!(status, 200, "{header:?}: {v}");
            assert_eq!(v["result"]["content"][0]["text"], "region: eu-west");
        } else {
            assert_eq!(status, 400, "{header:?}: {v}");
            assert_eq!(v["error"]["code"], -32020, "{v}");
            assert_eq!(v["id"], 2);
        }
    }
}

/// A stateless request from a client that declares the tasks extension.
fn with_tasks(method: &str, id: i64, params: Value) -> Value {
    let mut body = modern(method, id, params);
    body["params"]["_meta"]["io.modelcontextprotocol/clientCapabilities"] =
        json!({"extensions": {"io.modelcontextprotocol/tasks": {}}});
    body
}

/// The JSON answer to a request.
async fn answer(request: reqwest::RequestBuilder) -> Value {
    request.send().await.unwrap().json().await.unwrap()
}

async fn post_json(s: &HttpServer, body: &Value) -> (u16, Value) {
    let r = modern_post(s, body).send().await.unwrap();
    (r.status().as_u16(), r.json().await.unwrap())
}

/// Polls `tasks/get` until the task leaves `working`.
async fn settled_task(s: &HttpServer, id: &str) -> Value {
    for n in 0..200 {
        let (_, v) = post_json(s, &with_tasks("tasks/get", 100 + n, json!({"taskId": id}))).await;
        if v["result"]["status"] != "working" {
            return v["result"].clone();
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    panic!("task {id} still working after 20 s");
}

#[tokio::test]
async fn stateless_tasks_extension() {
    let s = start(&[]);
    let (_, v) = post_json(&s, &modern("server/discover", 1, json!({}))).await;
    let caps = &v["result"]["capabilities"];
    assert!(
        caps["extensions"]["io.modelcontextprotocol/tasks"].is_object(),
        "{v}"
    );
    assert!(caps.get("tasks").is_none(), "{v}");

    // Without the extension a long call is answered directly, and the
    // tasks methods are refused with -32021.
    let call = json!({"name":"test-sleep","arguments":{"seconds":0.8}});
    let (status, v) = post_json(&s, &modern("tools/call", 2, call.clone())).await;
    assert_eq!(status, 200);
    assert_eq!(v["result"]["resultType"], "complete", "{v}");
    assert_eq!(v["result"]["content"][0]["text"], "slept 0.8s");
    let (status, v) = post_json(&s, &modern("tasks/get", 3, json!({"taskId":"x"}))).await;
    assert_eq!(status, 400);
    assert_eq!(v["error"]["code"], -32021, "{v}");
    assert!(
        v["error"]["data"]["requiredCapabilities"]["extensions"]["io.modelcontextprotocol/tasks"]
            .is_object(),
        "{v}"
    );

    // With it: a quick call is still answered directly, a long one is a task.
    let (_, v) = post_json(
        &s,
        &with_tasks(
            "tools/call",
            4,
            json!({"name":"test-sleep","arguments":{"seconds":0}}),
        ),
    )
    .await;
    assert_eq!(v["result"]["resultType"], "complete", "{v}");
    let (_, v) = post_json(&s, &with_tasks("tools/call", 5, call)).await;
    let created = &v["result"];
    assert_eq!(created["resultType"], "task", "{v}");
    assert_eq!(created["status"], "working", "{v}");
    assert!(created["ttlMs"].as_u64().unwrap() > 0, "{v}");
    assert!(created["pollIntervalMs"].as_u64().unwrap() > 0, "{v}");
    assert!(
        created.get("ttl").is_none() && created.get("task").is_none(),
        "{v}"
    );
    let id = created["taskId"].as_str().unwrap().to_string();
    let done = settled_task(&s, &id).await;
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(done["resultType"], "complete", "{done}");
    assert_eq!(done["result"]["content"][0]["text"], "slept 0.8s", "{done}");
    // The inlined result is a complete CallToolResult of this era.
    assert_eq!(done["result"]["resultType"], "complete", "{done}");

    // The routing header names the task: a different one is -32020.
    let get = with_tasks("tasks/get", 6, json!({"taskId": id}));
    let r = modern_post(&s, &get)
        .header("mcp-name", "another-task")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["error"]["code"], -32020, "{v}");

    // Cancel: an empty ack, the work stops, cancelling again is acked too.
    let (_, v) = post_json(
        &s,
        &with_tasks(
            "tools/call",
            7,
            json!({"name":"test-sleep","arguments":{"seconds":30}}),
        ),
    )
    .await;
    let long = v["result"]["taskId"].as_str().unwrap().to_string();
    for id in [8, 9] {
        let (_, v) = post_json(&s, &with_tasks("tasks/cancel", id, json!({"taskId": long}))).await;
        assert_eq!(v["result"]["resultType"], "complete", "{v}");
        assert!(v["result"].get("status").is_none(), "{v}");
    }
    let (_, v) = post_json(&s, &with_tasks("tasks/get", 10, json!({"taskId": long}))).await;
    assert_eq!(v["result"]["status"], "cancelled", "{v}");

    // tasks/result and tasks/list are gone; an unknown task is -32602.
    for (id, method) in [(11, "tasks/result"), (12, "tasks/list")] {
        let (_, v) = post_json(&s, &with_tasks(method, id, json!({"taskId": long}))).await;
        assert_eq!(v["error"]["code"], -32601, "{method}: {v}");
    }
    let (_, v) = post_json(&s, &with_tasks("tasks/get", 13, json!({"taskId":"nope"}))).await;
    assert_eq!(v["error"]["code"], -32602, "{v}");
}

#[tokio::test]
async fn a_long_evaluation_runs_as_a_task() {
    let s = start(&[]);
    let (_, v) = post_json(
        &s,
        &with_tasks(
            "tools/call",
            1,
            json!({"name":"evaluate-lisp","arguments":{"code":"(progn (sleep 1.5) (* 6 7))"}}),
        ),
    )
    .await;
    assert_eq!(v["result"]["resultType"], "task", "{v}");
    let id = v["result"]["taskId"].as_str().unwrap().to_string();
    let done = settled_task(&s, &id).await;
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(done["result"]["isError"], false, "{done}");
    assert_eq!(
        done["result"]["structuredContent"]["values"],
        json!(["42"]),
        "{done}"
    );
    // A Lisp error is the tool's own: the task completes, with isError.
    let (_, v) = post_json(
        &s,
        &with_tasks(
            "tools/call",
            2,
            json!({"name":"evaluate-lisp","arguments":{"code":"(progn (sleep 1) (car 5))"}}),
        ),
    )
    .await;
    let id = v["result"]["taskId"].as_str().unwrap().to_string();
    let done = settled_task(&s, &id).await;
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(done["result"]["isError"], true, "{done}");
}

/// An image a stateless request starts is addressed by its handle (its
/// `image` mirrored in `Mcp-Param-Image`), keeps its state across requests,
/// and is stopped after `--stateless-image-idle-secs` without a call: the
/// handle is then said lost, as is the handle of an image that died.
#[tokio::test]
async fn a_stateless_image_lives_by_its_handle_until_idle() {
    let s = start(&[
        "--node-id",
        "n1",
        "--stateless-image-idle-secs",
        "1",
        "--lazy-image",
    ]);
    let body = modern(
        "tools/call",
        1,
        json!({"name":"image-start","arguments":{"lisp":"sbcl"}}),
    );
    let v: Value = answer(modern_post(&s, &body)).await;
    let image = &v["result"]["structuredContent"]["image"];
    let handle = image["handle"].as_str().unwrap_or_else(|| panic!("{v}"));
    assert!(handle.starts_with("n1/sbcl-1~"), "{v}");
    assert_eq!(image["name"], "sbcl-1");
    let eval = |code: &str| {
        let body = modern(
            "tools/call",
            2,
            json!({"name":"evaluate-lisp","arguments":{"code":code,"image":handle}}),
        );
        modern_post(&s, &body).header("mcp-param-image", handle)
    };
    for (code, value) in [("(defvar *kept* 5)", "*KEPT*"), ("(* 2 *kept*)", "10")] {
        let v: Value = answer(eval(code)).await;
        assert_eq!(v["result"]["structuredContent"]["values"][0], value, "{v}");
    }
    // An image that dies is lost too, never started again under its handle.
    let v: Value = answer(modern_post(&s, &body)).await;
    let dying = v["result"]["structuredContent"]["image"]["handle"]
        .as_str()
        .unwrap_or_else(|| panic!("{v}"))
        .to_string();
    assert!(dying.starts_with("n1/sbcl-2~"), "{v}");
    let on_dying = |code: &str| {
        let body = modern(
            "tools/call",
            3,
            json!({"name":"evaluate-lisp","arguments":{"code":code,"image":dying}}),
        );
        modern_post(&s, &body).header("mcp-param-image", dying.as_str())
    };
    let v: Value = on_dying("(sb-ext:exit :code 3 :abort t)")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(v["result"]["isError"], true, "{v}");
    let v: Value = answer(on_dying("1")).await;
    let text = v["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default();
    assert!(text.contains(&format!("The image {dying} is lost")), "{v}");
    tokio::time::sleep(std::time::Duration::from_millis(2500)).await;
    let v: Value = answer(eval("*kept*")).await;
    assert_eq!(v["result"]["isError"], true, "{v}");
    let text = v["result"]["content"][0]["text"].as_str().unwrap();
    assert!(
        text.contains(&format!("The image {handle} is lost")) && text.contains("image-start"),
        "{text}"
    );
}

/// A stateless matrix call runs each Lisp on the node's default image when
/// it is of that Lisp, else on an image started for the call, answered by
/// its handle (a name reaches nothing there); a second call never lands on
/// the first call's image, which is another client's as far as the node
/// knows, and the handle a row gives addresses its image.
#[tokio::test]
async fn a_stateless_matrix_runs_on_images_of_its_own() {
    let test = "a_stateless_matrix_runs_on_images_of_its_own";
    let on_path = std::env::var_os("PATH")
        .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join("clisp").is_file()));
    if !on_path {
        common::skip_missing(test, "clisp (apt-get install clisp)");
        return;
    }
    let root = tempfile::tempdir().unwrap();
    std::fs::write(
        root.path().join("tiny.asd"),
        "(defsystem \"tiny\" :components ((:file \"tiny\")))\n",
    )
    .unwrap();
    std::fs::write(
        root.path().join("tiny.lisp"),
        "(defpackage #:tiny (:use #:cl)) (in-package #:tiny) (defun twice (x) (* 2 x))\n",
    )
    .unwrap();
    let root_s = root.path().to_string_lossy().into_owned();
    let s = start(&["--node-id", "n1", "--project-root", &root_s]);
    let load = |id: i64| {
        modern(
            "tools/call",
            id,
            json!({"name":"asdf-load-system","arguments":{"system":"tiny","lisps":["sbcl","clisp"]}}),
        )
    };
    let mut clisp_handles = Vec::new();
    for id in [1, 2] {
        let v: Value = answer(modern_post(&s, &load(id))).await;
        let rows = v["result"]["structuredContent"]["matrix"]["rows"]
            .as_array()
            .unwrap_or_else(|| panic!("{v}"))
            .clone();
        assert_eq!(rows[0]["image"], "sbcl", "{v}");
        assert_eq!(rows[1]["built"], true, "{v}");
        let handle = rows[1]["image"].as_str().unwrap().to_string();
        assert!(handle.starts_with(&format!("n1/clisp-{id}~")), "{v}");
        clisp_handles.push(handle);
    }
    // The row's handle addresses its image, where the system is loaded.
    let handle = &clisp_handles[0];
    let body = modern(
        "tools/call",
        3,
        json!({"name":"evaluate-lisp","arguments":{"code":"(list (lisp-implementation-type) (tiny::twice 21))","image":handle}}),
    );
    let v: Value = answer(modern_post(&s, &body).header("mcp-param-image", handle.as_str())).await;
    assert_eq!(
        v["result"]["structuredContent"]["values"][0], "(\"CLISP\" 42)",
        "{v}"
    );
}

/// A stateless `image-start` names only the Lisps the server was started
/// with: the path of a script written into the project is refused before
/// anything runs (not even its `--version`).
#[tokio::test]
async fn a_stateless_image_start_runs_no_path_it_was_not_started_with() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("ran");
    let planted = dir.path().join("lisp.sh");
    std::fs::write(
        &planted,
        format!("#!/bin/sh\ntouch {}\necho 'SBCL 2.2.9'\n", marker.display()),
    )
    .unwrap();
    std::fs::set_permissions(&planted, std::fs::Permissions::from_mode(0o755)).unwrap();
    let s = start(&["--lazy-image"]);
    let body = modern(
        "tools/call",
        1,
        json!({"name":"image-start","arguments":{"lisp": planted.to_str().unwrap()}}),
    );
    let v: Value = answer(modern_post(&s, &body)).await;
    assert_eq!(v["result"]["isError"], true, "{v}");
    assert!(v.to_string().contains("--allow-lisp"), "{v}");
    assert!(!marker.exists(), "the planted script ran");
}
