//! Attacks on the transports and the protocol core (issue 10): clients that
//! never read, floods, oversized batches, fd exhaustion, too many
//! connections, slow HTTP clients, abandoned HTTP requests. Loopback only,
//! each bounded in time.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{Listening, Server, BIN};
use serde_json::{json, Value};

const INIT: &str = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"flood","version":"1"}}}"#;
const INITIALIZED: &str = r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#;
const FLOOD: usize = 20_000;
/// The bound the issue sets for a never-reading client's flood.
const RSS_LIMIT_KB: u64 = 100 * 1024;

/// Peak resident memory (VmHWM) of a process, in KiB.
fn peak_rss_kb(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("/proc status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmHWM in /proc status")
}

/// The handshake and `FLOOD` `tools/list` requests (ids 2..), one per line.
fn flood_input() -> Vec<u8> {
    let mut input = format!("{INIT}\n{INITIALIZED}\n");
    for id in 2..FLOOD + 2 {
        input.push_str(&format!(
            "{{\"jsonrpc\":\"2.0\",\"id\":{id},\"method\":\"tools/list\"}}\n"
        ));
    }
    input.into_bytes()
}

/// Writes `input` on a thread (it blocks once the server stops reading).
fn write_in_background(mut w: impl Write + Send + 'static, input: Vec<u8>) {
    std::thread::spawn(move || {
        let _ = w.write_all(&input);
        let _ = w.flush();
        // Keep the stream open: closing it would end the session.
        std::thread::sleep(Duration::from_secs(600));
    });
}

/// Sends the flood without reading anything for a while, then reads every
/// answer; the server's peak RSS over the whole run must stay small.
fn flood_then_read(pid: u32, reader: impl Read, what: &str) {
    // Long enough for the server to take in all it will take.
    std::thread::sleep(Duration::from_secs(3));
    let unread_peak = peak_rss_kb(pid);
    let mut lines = BufReader::with_capacity(1 << 20, reader);
    let mut answered = 0usize;
    let mut line = String::new();
    let deadline = Instant::now() + Duration::from_secs(400);
    while answered < FLOOD + 1 {
        assert!(Instant::now() < deadline, "{what}: only {answered} answers");
        line.clear();
        let n = lines.read_line(&mut line).unwrap();
        assert!(n > 0, "{what}: the server closed after {answered} answers");
        if line.starts_with(r#"{"jsonrpc":"2.0","id":"#) && line.contains(r#""result":"#) {
            answered += 1;
        }
    }
    let peak = peak_rss_kb(pid);
    eprintln!(
        "{what}: peak RSS {unread_peak} KiB while nothing was read, {peak} KiB after reading all {FLOOD} answers"
    );
    assert!(
        peak < RSS_LIMIT_KB,
        "{what}: peak RSS {peak} KiB under a never-reading client (limit {RSS_LIMIT_KB} KiB)"
    );
}

#[test]
fn a_client_that_never_reads_stdio_keeps_memory_bounded() {
    let (mut child, _kill) = lazy_stdio_server();
    write_in_background(child.stdin.take().unwrap(), flood_input());
    let stdout = child.stdout.take().unwrap();
    flood_then_read(child.id(), stdout, "stdio");
    let _ = child.kill();
    let _ = child.wait();
}

#[test]
fn a_client_that_never_reads_tcp_keeps_memory_bounded() {
    let server = Listening::start(&["tcp", "--port", "0", "--lazy-image"]);
    let stream = TcpStream::connect(tcp_addr(&server)).unwrap();
    write_in_background(stream.try_clone().unwrap(), flood_input());
    flood_then_read(server.child.id(), stream, "tcp");
}

/// `cl-mcp-server --lazy-image` on piped stdio (stderr dropped), killed
/// when the guard goes.
fn lazy_stdio_server() -> (std::process::Child, KillOnDrop) {
    let child = Command::new(BIN)
        .args(["--lazy-image"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let kill = KillOnDrop(child.id());
    (child, kill)
}

struct KillOnDrop(u32);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        // SAFETY: kill(2) of the server process this test started.
        unsafe {
            libc::kill(self.0 as i32, libc::SIGKILL);
        }
    }
}

fn tcp_addr(server: &Listening) -> String {
    server
        .address
        .strip_prefix("tcp ")
        .expect("tcp address")
        .to_string()
}

#[test]
fn a_batch_is_capped_in_elements_with_per_element_errors() {
    let mut s = Server::initialized(&["--lazy-image"]);
    let batch: Vec<Value> = (0..1500)
        .map(|i| json!({"jsonrpc":"2.0","id":i,"method":"ping"}))
        .collect();
    s.send(&Value::Array(batch));
    let answer = s.recv_within(Duration::from_secs(60));
    let items = answer.as_array().expect("a batch answer");
    assert_eq!(items.len(), 1500, "every request answered once");
    for (i, item) in items.iter().enumerate() {
        assert_eq!(item["id"], i, "answers in order, ids verbatim");
        if i < 1000 {
            assert!(item["result"].is_object(), "{item}");
        } else {
            assert_eq!(item["error"]["code"], -32000, "{item}");
            let why = item["error"]["data"].as_str().unwrap();
            assert!(
                why.contains("1500 elements") && why.contains("first 1000"),
                "{why}"
            );
        }
    }
    // The connection is fine afterwards.
    let r = s.request(json!({"jsonrpc":"2.0","id":"after","method":"ping"}));
    assert!(r["result"].is_object());
}

#[test]
fn a_batch_response_is_capped_in_bytes() {
    let dir = tempfile::tempdir().unwrap();
    // Close to the 2 MB read cap: about 4 MB per answer (text and
    // structured content), so 20 of them pass 32 MiB.
    std::fs::write(dir.path().join("big.txt"), "x".repeat(1_900_000)).unwrap();
    let root = dir.path().to_str().unwrap();
    let mut s = Server::initialized(&["--lazy-image", "--tools", "fs", "--project-root", root]);
    let batch: Vec<Value> = (0..20)
        .map(|i| {
            json!({"jsonrpc":"2.0","id":i,"method":"tools/call",
                "params":{"name":"fs-read-file","arguments":{"path":"big.txt"}}})
        })
        .collect();
    s.send_raw(&Value::Array(batch).to_string());
    let raw = s
        .try_recv_raw(Duration::from_secs(120))
        .expect("the batch is answered");
    assert!(
        raw.len() <= 33 * 1024 * 1024,
        "batch answer of {} bytes",
        raw.len()
    );
    let items: Vec<Value> = serde_json::from_str(&raw).unwrap();
    assert_eq!(items.len(), 20);
    let ok = items.iter().filter(|i| i["result"].is_object()).count();
    let refused: Vec<&Value> = items
        .iter()
        .filter(|i| i["error"]["code"] == -32000)
        .collect();
    assert!(ok >= 4, "some answers fit: {ok}");
    assert_eq!(ok + refused.len(), 20);
    assert!(!refused.is_empty(), "the answers past 32 MiB are refused");
    for r in refused {
        assert!(r["id"].is_number());
        let why = r["error"]["data"].as_str().unwrap();
        assert!(why.contains("33554432-byte limit"), "{why}");
    }
}

#[test]
fn one_batch_line_of_a_flood_keeps_memory_bounded() {
    let (mut child, _kill) = lazy_stdio_server();
    let batch: Vec<String> = (2..FLOOD + 2)
        .map(|id| format!("{{\"jsonrpc\":\"2.0\",\"id\":{id},\"method\":\"tools/list\"}}"))
        .collect();
    let input = format!("{INIT}\n{INITIALIZED}\n[{}]\n", batch.join(","));
    write_in_background(child.stdin.take().unwrap(), input.into_bytes());
    std::thread::sleep(Duration::from_secs(3));
    let mut lines = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    lines.read_line(&mut line).unwrap();
    assert!(line.contains(r#""protocolVersion""#), "{line}");
    line.clear();
    lines.read_line(&mut line).unwrap();
    let peak = peak_rss_kb(child.id());
    eprintln!(
        "one batch of {FLOOD} tools/list: peak RSS {peak} KiB, answer of {} bytes",
        line.len()
    );
    let items: Vec<Value> = serde_json::from_str(&line).unwrap();
    assert_eq!(items.len(), FLOOD);
    // Every element is answered: the first 1000 run, as many of their
    // answers as fit in 32 MiB are results (how many depends on the size of
    // tools/list), the rest of the 1000 are refused by the byte budget, and
    // everything after the first 1000 by the element cap.
    let results = items.iter().filter(|i| i["result"].is_object()).count();
    assert!((1..=1000).contains(&results), "{results} results");
    let why = |i: &Value| i["error"]["data"].as_str().unwrap_or("").to_string();
    // Ids run from 2; the first 1000 elements are ids 2..=1001.
    let (first, rest): (Vec<&Value>, Vec<&Value>) = items
        .iter()
        .partition(|i| i["id"].as_u64().unwrap() <= 1001);
    assert_eq!(first.len(), 1000);
    assert!(first
        .iter()
        .all(|i| i["result"].is_object() || why(i).contains("33554432-byte limit")));
    assert!(rest.iter().all(|i| why(i).contains("first 1000")));
    assert!(
        peak < RSS_LIMIT_KB,
        "peak RSS {peak} KiB for one batch line (limit {RSS_LIMIT_KB} KiB)"
    );
    let _ = child.kill();
    let _ = child.wait();
}

/// `cl-mcp-server ARGS` started through `prlimit --nofile=N:N`.
fn listening_with_nofile(nofile: u32, args: &[&str]) -> Listening {
    let mut child = Command::new("prlimit")
        .arg(format!("--nofile={nofile}:{nofile}"))
        .arg(BIN)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn prlimit cl-mcp-server");
    let address = wait_listening(&mut child);
    let log = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let sink = log.clone();
    let err = child.stderr.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(err).lines().map_while(Result::ok) {
            sink.lock().unwrap().push(line);
        }
    });
    Listening {
        child,
        address,
        log,
    }
}

fn wait_listening(child: &mut Child) -> String {
    // Read stderr byte by byte up to the "listening" line, leaving the rest.
    let err = child.stderr.as_mut().unwrap();
    let mut line = Vec::new();
    let mut byte = [0u8; 1];
    loop {
        if err.read(&mut byte).unwrap_or(0) == 0 {
            panic!("cl-mcp-server exited before listening");
        }
        if byte[0] != b'\n' {
            line.push(byte[0]);
            continue;
        }
        let text = String::from_utf8_lossy(&line).to_string();
        if let Some(a) = text.strip_prefix("cl-mcp-server: listening on ") {
            return a.to_string();
        }
        line.clear();
    }
}

/// Connects, pings, and returns the answer line (or panics within `within`).
fn tcp_ping(addr: &str, within: Duration) -> String {
    let deadline = Instant::now() + within;
    loop {
        let attempt = (|| -> std::io::Result<String> {
            let stream = TcpStream::connect(addr)?;
            stream.set_read_timeout(Some(Duration::from_secs(2)))?;
            (&stream).write_all(b"{\"jsonrpc\":\"2.0\",\"id\":\"p\",\"method\":\"ping\"}\n")?;
            let mut line = String::new();
            BufReader::new(&stream).read_line(&mut line)?;
            Ok(line)
        })();
        match attempt {
            Ok(line) if line.contains(r#""id":"p""#) => return line,
            other => {
                assert!(
                    Instant::now() < deadline,
                    "no ping answer within {within:?}: {other:?}"
                );
                std::thread::sleep(Duration::from_millis(200));
            }
        }
    }
}

#[test]
fn tcp_survives_running_out_of_file_descriptors() {
    let mut server = listening_with_nofile(64, &["tcp", "--port", "0", "--lazy-image"]);
    let addr = tcp_addr(&server);
    // More idle connections than the process may open files.
    let idle: Vec<TcpStream> = (0..100)
        .map(|_| TcpStream::connect(&addr).expect("the kernel queues the connection"))
        .collect();
    let deadline = Instant::now() + Duration::from_secs(10);
    while !server.log_contains("out of resources") {
        assert!(
            Instant::now() < deadline,
            "no fd exhaustion logged: {:?}",
            server.log.lock().unwrap()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    std::thread::sleep(Duration::from_secs(1));
    assert!(
        server.child.try_wait().unwrap().is_none(),
        "the server exited on EMFILE: {:?}",
        server.log.lock().unwrap()
    );
    drop(idle);
    // With the connections gone it serves again.
    let answer = tcp_ping(&addr, Duration::from_secs(20));
    assert!(answer.contains(r#""result":{}"#), "{answer}");
    assert!(server.child.try_wait().unwrap().is_none());
}

#[test]
fn http_survives_running_out_of_file_descriptors() {
    let mut server = listening_with_nofile(
        64,
        &[
            "http",
            "--bind",
            "127.0.0.1:0",
            "--lazy-image",
            "--header-timeout-secs",
            "60",
        ],
    );
    let hostport = server
        .address
        .strip_prefix("http://")
        .and_then(|a| a.strip_suffix("/mcp"))
        .unwrap()
        .to_string();
    let idle: Vec<TcpStream> = (0..100)
        .map(|_| TcpStream::connect(&hostport).unwrap())
        .collect();
    wait_for_log(&server, "out of resources");
    std::thread::sleep(Duration::from_secs(1));
    assert!(
        server.child.try_wait().unwrap().is_none(),
        "the server exited on EMFILE"
    );
    drop(idle);
    // Serves again: a request over a fresh connection.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let answer = (|| -> std::io::Result<String> {
            let s = TcpStream::connect(&hostport)?;
            s.set_read_timeout(Some(Duration::from_secs(3)))?;
            let body = r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#;
            write!(
                &s,
                "POST /mcp HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\n\
                 accept: application/json, text/event-stream\r\nmcp-session-id: none\r\n\
                 connection: close\r\ncontent-length: {}\r\n\r\n{body}",
                body.len()
            )?;
            let mut all = String::new();
            (&s).read_to_string(&mut all)?;
            Ok(all)
        })();
        match answer {
            // Unknown session: 404 with the request's id, from a live server.
            Ok(a) if a.starts_with("HTTP/1.1 404") && a.contains(r#""id":1"#) => break,
            other => {
                assert!(Instant::now() < deadline, "http did not recover: {other:?}");
                std::thread::sleep(Duration::from_millis(200));
            }
        }
    }
}

#[test]
fn tcp_refuses_connections_over_the_cap_with_a_reason() {
    let server = Listening::start(&[
        "tcp",
        "--port",
        "0",
        "--lazy-image",
        "--max-connections",
        "2",
    ]);
    let addr = tcp_addr(&server);
    let held: Vec<TcpStream> = (0..2)
        .map(|_| {
            let s = TcpStream::connect(&addr).unwrap();
            s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
            (&s).write_all(b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}\n")
                .unwrap();
            let mut line = String::new();
            BufReader::new(&s).read_line(&mut line).unwrap();
            assert!(line.contains(r#""result""#), "{line}");
            s
        })
        .collect();
    let third = TcpStream::connect(&addr).unwrap();
    third
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut all = String::new();
    BufReader::new(&third).read_to_string(&mut all).unwrap();
    let refusal: Value = serde_json::from_str(all.trim()).expect("one JSON line, then EOF");
    assert_eq!(refusal["error"]["code"], -32000, "{refusal}");
    assert!(
        refusal["error"]["data"]
            .as_str()
            .unwrap()
            .contains("2 connections (--max-connections)"),
        "{refusal}"
    );
    wait_for_log(&server, "connection limit reached");
    // A freed slot is reused.
    drop(held);
    let answer = tcp_ping(&addr, Duration::from_secs(10));
    assert!(answer.contains(r#""result":{}"#), "{answer}");
}

fn http_start(extra: &[&str]) -> (Listening, String) {
    let mut args = vec!["http", "--bind", "127.0.0.1:0", "--lazy-image"];
    args.extend_from_slice(extra);
    let server = Listening::start(&args);
    let hostport = server
        .address
        .strip_prefix("http://")
        .and_then(|a| a.strip_suffix("/mcp"))
        .expect("http address")
        .to_string();
    (server, hostport)
}

/// Reads what the server sends until it closes the connection (or `within`
/// passes: then panics), returning it and how long it took.
fn read_until_closed(stream: &TcpStream, within: Duration) -> (String, Duration) {
    let started = Instant::now();
    stream.set_read_timeout(Some(within)).unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match (&*stream).read(&mut buf) {
            Ok(0) => break,
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => break,
            Err(e) => panic!(
                "the server kept the connection open past {within:?} ({e}); got {:?}",
                String::from_utf8_lossy(&got)
            ),
        }
    }
    (String::from_utf8_lossy(&got).to_string(), started.elapsed())
}

#[test]
fn http_refuses_connections_over_the_cap_with_503() {
    let (server, hostport) = http_start(&["--max-connections", "2"]);
    let held: Vec<TcpStream> = (0..2)
        .map(|_| TcpStream::connect(&hostport).unwrap())
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    let third = TcpStream::connect(&hostport).unwrap();
    (&third)
        .write_all(b"POST /mcp HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-length: 2\r\n\r\n{}")
        .unwrap();
    let (reply, _) = read_until_closed(&third, Duration::from_secs(5));
    assert!(reply.starts_with("HTTP/1.1 503"), "{reply}");
    assert!(
        reply.contains("2 connections (--max-connections)"),
        "{reply}"
    );
    wait_for_log(&server, "connection limit reached");
    drop(held);
}

/// Waits (briefly) for the server's log to show `needle`.
fn wait_for_log(server: &Listening, needle: &str) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while !server.log_contains(needle) {
        assert!(
            Instant::now() < deadline,
            "the log never showed {needle:?}: {:?}",
            server.log.lock().unwrap()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn http_closes_slow_header_connections() {
    let (_server, hostport) = http_start(&["--header-timeout-secs", "1"]);
    let silent = TcpStream::connect(&hostport).unwrap();
    let slow = TcpStream::connect(&hostport).unwrap();
    (&slow)
        .write_all(b"POST /mcp HTTP/1.1\r\nhost: 127.0.0.1\r\nx-slow: ")
        .unwrap();
    for stream in [&silent, &slow] {
        let (_, took) = read_until_closed(stream, Duration::from_secs(6));
        assert!(took < Duration::from_secs(5), "closed after {took:?}");
    }
}

#[test]
fn http_bounds_request_bodies_in_size_and_time() {
    let (_server, hostport) =
        http_start(&["--max-message-bytes", "4096", "--body-timeout-secs", "1"]);
    // Declared too large: refused before any of it is sent.
    let big = TcpStream::connect(&hostport).unwrap();
    (&big)
        .write_all(
            b"POST /mcp HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\n\
              content-length: 16000000\r\n\r\n",
        )
        .unwrap();
    let (reply, took) = read_until_closed(&big, Duration::from_secs(5));
    assert!(reply.starts_with("HTTP/1.1 413"), "{reply}");
    assert!(reply.contains("4096-byte limit"), "{reply}");
    assert!(took < Duration::from_secs(3), "413 after {took:?}");
    // A body that trickles: 408 once the body timeout passes.
    let slow = TcpStream::connect(&hostport).unwrap();
    (&slow)
        .write_all(
            b"POST /mcp HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\n\
              content-length: 100\r\n\r\n{\"jsonrpc\"",
        )
        .unwrap();
    let (reply, took) = read_until_closed(&slow, Duration::from_secs(6));
    assert!(reply.starts_with("HTTP/1.1 408"), "{reply}");
    assert!(reply.contains("--body-timeout-secs"), "{reply}");
    assert!(took < Duration::from_secs(4), "408 after {took:?}");
}

#[test]
fn http_bounds_the_bodies_held_across_connections() {
    let (server, hostport) = http_start(&["--body-timeout-secs", "20"]);
    let head = b"POST /mcp HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\n\
                 content-length: 16000000\r\n\r\n";
    // Four uploads of almost 16 MB that stall one byte short: 64 MB held.
    let stalled: Vec<TcpStream> = (0..4)
        .map(|_| {
            let s = TcpStream::connect(&hostport).unwrap();
            (&s).write_all(head).unwrap();
            (&s).write_all(&vec![b' '; 15_999_999]).unwrap();
            s
        })
        .collect();
    std::thread::sleep(Duration::from_millis(500));
    // A fifth would pass the 64 MiB budget: refused at once, not held.
    let fifth = TcpStream::connect(&hostport).unwrap();
    (&fifth).write_all(head).unwrap();
    let started = Instant::now();
    let mut sent = 0usize;
    let chunk = vec![b' '; 64 * 1024];
    fifth
        .set_write_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    while sent < 3_200_000 {
        match (&fifth).write(&chunk[..chunk.len().min(3_200_000 - sent)]) {
            Ok(n) => sent += n,
            Err(_) => break,
        }
    }
    let (reply, _) = read_until_closed(&fifth, Duration::from_secs(5));
    assert!(reply.starts_with("HTTP/1.1 503"), "{reply:.200}");
    assert!(reply.contains("request bodies"), "{reply:.400}");
    assert!(started.elapsed() < Duration::from_secs(5));
    wait_for_log(&server, "exceed their budget");
    let peak = peak_rss_kb(server.child.id());
    eprintln!("http: peak RSS {peak} KiB with 64 MB of stalled bodies");
    assert!(peak < 160 * 1024, "peak RSS {peak} KiB");
    drop(stalled);
}

/// `evaluate-lisp` over a legacy HTTP session.
fn eval_body(id: i64, code: &str) -> Value {
    json!({"jsonrpc":"2.0","id":id,"method":"tools/call",
        "params":{"name":"evaluate-lisp","arguments":{"code":code}}})
}

#[tokio::test]
async fn dropping_a_legacy_http_post_interrupts_its_evaluation() {
    let (server, hostport) = {
        let server = Listening::start(&["http", "--bind", "127.0.0.1:0"]);
        let url = server.address.clone();
        (server, url)
    };
    let url = hostport;
    let client = reqwest::Client::new();
    let accept = "application/json, text/event-stream";
    let r = client
        .post(&url)
        .header("accept", accept)
        .json(
            &json!({"jsonrpc":"2.0","id":1,"method":"initialize","params":{
            "protocolVersion":"2025-11-25","capabilities":{}}}),
        )
        .send()
        .await
        .unwrap();
    let session = r.headers()["mcp-session-id"].to_str().unwrap().to_string();
    let post = |body: Value| {
        client
            .post(&url)
            .header("accept", accept)
            .header("mcp-session-id", &session)
            .json(&body)
    };
    let _ = post(json!({"jsonrpc":"2.0","method":"notifications/initialized"}))
        .send()
        .await
        .unwrap();
    // Warm up: the image is running.
    let warm: Value = post(eval_body(2, "(+ 1 2)"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert!(
        warm.to_string().contains('3'),
        "first evaluation answered: {warm}"
    );
    // A runaway evaluation whose client gives up after a second.
    let abandoned = post(eval_body(3, "(loop)"))
        .timeout(Duration::from_secs(1))
        .send()
        .await;
    assert!(abandoned.is_err(), "the client gave up");
    let started = Instant::now();
    let next: Value = post(eval_body(4, "(* 6 7)"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let took = started.elapsed();
    assert!(next.to_string().contains("42"), "{next}");
    assert!(
        took < Duration::from_secs(8),
        "the next evaluation waited {took:?} for the abandoned one"
    );
    wait_for_log(&server, "cancelling it");
}

#[tokio::test]
async fn dropping_a_legacy_http_post_cancels_its_request() {
    let server = Listening::start(&["http", "--bind", "127.0.0.1:0", "--lazy-image"]);
    let url = server.address.clone();
    let client = reqwest::Client::new();
    let r = client
        .post(&url)
        .header("accept", "application/json, text/event-stream")
        .json(
            &json!({"jsonrpc":"2.0","id":1,"method":"initialize","params":{
            "protocolVersion":"2025-11-25","capabilities":{}}}),
        )
        .send()
        .await
        .unwrap();
    let session = r.headers()["mcp-session-id"].to_str().unwrap().to_string();
    let abandoned = client
        .post(&url)
        .header("accept", "application/json, text/event-stream")
        .header("mcp-session-id", &session)
        .json(&json!({"jsonrpc":"2.0","id":2,"method":"tools/call",
            "params":{"name":"test-sleep","arguments":{"seconds":20}}}))
        .timeout(Duration::from_millis(500))
        .send()
        .await;
    assert!(abandoned.is_err());
    for _ in 0..50 {
        if server.log_contains("cancelling it") {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!(
        "the abandoned legacy request was not cancelled: {:?}",
        server.log.lock().unwrap()
    );
}

/// The ids of the answers in `text`, one JSON message per line, in order
/// (requests run concurrently, so their answers may come in any order).
fn answered_ids(text: &str) -> Vec<i64> {
    let mut ids: Vec<i64> = text
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .filter_map(|v| v["id"].as_i64())
        .collect();
    ids.sort_unstable();
    ids
}

/// Pipes (what the SDKs in Python and Rust give a server), a socket pair
/// (what Node's child processes get) and plain files (a script replaying a
/// session) all carry the same session: the first two are served on the
/// runtime's poller, files by the blocking threads.
#[test]
fn stdio_is_served_over_a_socket_pair_and_over_files() {
    let session = format!(
        "{INIT}\n{INITIALIZED}\n{}\n{}\n",
        r#"{"jsonrpc":"2.0","id":2,"method":"ping"}"#,
        r#"{"jsonrpc":"2.0","id":3,"method":"tools/list"}"#
    );

    // One socket end as both stdin and stdout.
    let (ours, theirs) = std::os::unix::net::UnixStream::pair().unwrap();
    let mut child = Command::new(BIN)
        .arg("--lazy-image")
        .stdin(Stdio::from(std::os::fd::OwnedFd::from(
            theirs.try_clone().unwrap(),
        )))
        .stdout(Stdio::from(std::os::fd::OwnedFd::from(theirs)))
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let _kill = KillOnDrop(child.id());
    (&ours).write_all(session.as_bytes()).unwrap();
    ours.shutdown(std::net::Shutdown::Write).unwrap();
    ours.set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let mut out = String::new();
    (&ours).read_to_string(&mut out).unwrap();
    assert_eq!(
        answered_ids(&out),
        [1, 2, 3],
        "{}",
        &out[..out.len().min(2000)]
    );
    assert!(child.wait().unwrap().success());

    // A file in, a file out.
    let dir = tempfile::tempdir().unwrap();
    let (input, output) = (dir.path().join("in.jsonl"), dir.path().join("out.jsonl"));
    std::fs::write(&input, &session).unwrap();
    let status = Command::new(BIN)
        .arg("--lazy-image")
        .stdin(std::fs::File::open(&input).unwrap())
        .stdout(std::fs::File::create(&output).unwrap())
        .stderr(Stdio::null())
        .status()
        .unwrap();
    assert!(status.success());
    let out = std::fs::read_to_string(&output).unwrap();
    assert_eq!(
        answered_ids(&out),
        [1, 2, 3],
        "{}",
        &out[..out.len().min(2000)]
    );
}
