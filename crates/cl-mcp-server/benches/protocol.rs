//! Protocol benchmark: `cargo bench -p cl-mcp-server --bench protocol`.
//!
//! Spawns the built binary, does the handshake, then measures over stdio:
//! sequential `ping` and `tools/list` round trips (median, p99) and sustained
//! pipelined requests per second. Prints a table.

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_cl-mcp-server");

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i]
}

fn main() {
    let mut child = Command::new(BIN)
        .args(["--log-level", "error"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn cl-mcp-server");
    let mut stdin = child.stdin.take().unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    let mut roundtrip = |stdin: &mut std::process::ChildStdin, msg: &str, line: &mut String| {
        stdin.write_all(msg.as_bytes()).unwrap();
        stdin.flush().unwrap();
        line.clear();
        stdout.read_line(line).unwrap();
    };
    let t0 = Instant::now();
    roundtrip(
        &mut stdin,
        "{\"jsonrpc\":\"2.0\",\"id\":0,\"method\":\"initialize\",\"params\":{\"protocolVersion\":\"2025-11-25\",\"capabilities\":{}}}\n",
        &mut line,
    );
    let init = t0.elapsed();
    assert!(line.contains("protocolVersion"), "{line}");
    stdin
        .write_all(b"{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}\n")
        .unwrap();

    let mut rows: Vec<(String, String)> = Vec::new();
    for (name, method, n) in [
        ("ping", "ping", 5000usize),
        ("tools/list", "tools/list", 2000),
    ] {
        let mut times = Vec::with_capacity(n);
        for i in 0..n {
            let msg = format!("{{\"jsonrpc\":\"2.0\",\"id\":{i},\"method\":\"{method}\"}}\n");
            let t = Instant::now();
            roundtrip(&mut stdin, &msg, &mut line);
            times.push(t.elapsed());
        }
        times.sort();
        rows.push((
            format!("{name} round trip (n={n})"),
            format!(
                "median {:>7.1} µs   p99 {:>7.1} µs",
                percentile(&times, 0.5).as_secs_f64() * 1e6,
                percentile(&times, 0.99).as_secs_f64() * 1e6
            ),
        ));
    }

    // Sustained: a writer thread pipelines requests while we read answers.
    let total = 100_000usize;
    let writer = std::thread::spawn(move || {
        let mut buf = Vec::with_capacity(64 * 1024);
        for i in 0..total {
            buf.extend_from_slice(
                format!("{{\"jsonrpc\":\"2.0\",\"id\":{i},\"method\":\"ping\"}}\n").as_bytes(),
            );
            if buf.len() > 60 * 1024 {
                stdin.write_all(&buf).unwrap();
                buf.clear();
            }
        }
        stdin.write_all(&buf).unwrap();
        stdin.flush().unwrap();
        stdin
    });
    let t = Instant::now();
    for _ in 0..total {
        line.clear();
        stdout.read_line(&mut line).unwrap();
    }
    let elapsed = t.elapsed();
    let stdin = writer.join().unwrap();
    rows.push((
        format!("sustained pipelined ping (n={total})"),
        format!("{:>9.0} requests/s", total as f64 / elapsed.as_secs_f64()),
    ));
    rows.insert(
        0,
        (
            "spawn → initialize answered".into(),
            format!("{:>7.2} ms", init.as_secs_f64() * 1e3),
        ),
    );
    drop(stdin);
    let _ = child.wait();

    // What a model pays to see the tools (name, title, description and
    // input schema of each) and tools/list's whole result (with the output
    // schemas clients validate with), in bytes, for every group and for
    // each group alone.
    rows.push((
        "tools/list size (groups)".into(),
        "model  tools  model/tool   whole list".into(),
    ));
    for groups in [
        "eval,image,code,asdf,source,fs,debug",
        "eval",
        "image",
        "code",
        "asdf",
        "source",
        "fs",
        "debug",
    ] {
        let (bytes, model, tools) = tool_list_size(groups);
        let label = if groups.contains(',') { "all" } else { groups };
        rows.push((
            format!("  {label}"),
            format!(
                "{model:>5} {tools:>6} {:>11} {bytes:>12}",
                model / tools.max(1)
            ),
        ));
    }

    println!("\ncl-mcp-server protocol benchmark (stdio, {})", BIN);
    println!("{:-<78}", "");
    for (k, v) in &rows {
        println!("{k:<38} {v}");
    }
    println!("{:-<78}", "");
}

/// Bytes of the compact JSON `result` of `tools/list` with `--tools groups`,
/// of the same list keeping only what a model reads of each tool (name,
/// title, description, input schema), and how many tools it lists.
fn tool_list_size(groups: &str) -> (usize, usize, usize) {
    let mut child = Command::new(BIN)
        .args(["--log-level", "error", "--tools", groups])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn cl-mcp-server");
    let mut stdin = child.stdin.take().unwrap();
    stdin
        .write_all(
            concat!(
                "{\"jsonrpc\":\"2.0\",\"id\":0,\"method\":\"initialize\",\"params\":{\"protocolVersion\":\"2025-11-25\",\"capabilities\":{}}}\n",
                "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}\n",
                "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/list\"}\n"
            )
            .as_bytes(),
        )
        .unwrap();
    drop(stdin);
    let out = child.wait_with_output().expect("tools/list");
    let text = String::from_utf8_lossy(&out.stdout);
    let list: serde_json::Value = text
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|m| m["id"] == 1)
        .expect("tools/list answered");
    let result = &list["result"];
    let listed = result["tools"].as_array().cloned().unwrap_or_default();
    let read: Vec<serde_json::Value> = listed
        .iter()
        .map(|t| {
            serde_json::json!({
                "name": t["name"],
                "title": t["title"],
                "description": t["description"],
                "inputSchema": t["inputSchema"],
            })
        })
        .collect();
    let model = serde_json::json!({ "tools": read }).to_string().len();
    (
        serde_json::to_string(result).unwrap().len(),
        model,
        listed.len(),
    )
}
