//! Many nodes behind one proxy (issue 25): `cargo bench -p cl-mcp-server
//! --bench nodes`. Three HTTP nodes behind HAProxy (`scripts/haproxy-nodes.sh`);
//! N agents (`NODES_AGENTS`, default 6) each start an image through the
//! proxy (spread by leastconn), then evaluate `(+ 1 2)` by handle, in
//! stateless (2026-07-28) raw HTTP requests: alternately straight to the
//! node and through the proxy, one agent at a time (the latency the proxy
//! adds), then all agents at once (throughput). Prints a table.

#[path = "support/cluster.rs"]
mod cluster;

use std::time::{Duration, Instant};

use serde_json::{json, Value};

const BIN: &str = env!("CARGO_BIN_EXE_cl-mcp-server");
const MODERN: &str = "2026-07-28";
/// Calls per agent in each measurement.
const CALLS: usize = 60;
/// Calls per agent in each round of the throughput measurement.
const BURST: usize = 200;
/// Rounds of the throughput measurement, each way.
const ROUNDS: usize = 5;

/// One stateless `tools/call`, its `image` mirrored in `Mcp-Param-Image`.
async fn call(http: &reqwest::Client, url: &str, tool: &str, args: Value) -> Value {
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": tool, "arguments": args, "_meta": {
            "io.modelcontextprotocol/protocolVersion": MODERN,
            "io.modelcontextprotocol/clientCapabilities": {}}}});
    let mut req = http
        .post(url)
        .header("MCP-Protocol-Version", MODERN)
        .header("Mcp-Method", "tools/call")
        .header("Mcp-Name", tool)
        .header("Accept", "application/json, text/event-stream");
    if let Some(h) = args.get("image").and_then(Value::as_str) {
        req = req.header("Mcp-Param-Image", h);
    }
    let answer: Value = req
        .json(&body)
        .send()
        .await
        .expect("POST")
        .json()
        .await
        .expect("a JSON answer");
    let result = &answer["result"];
    assert_eq!(result["isError"], false, "{tool}: {answer}");
    result["structuredContent"].clone()
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

async fn run(agents: usize) {
    let project = tempfile::tempdir().expect("tempdir");
    let cluster = cluster::Cluster::start(
        BIN,
        &["node-a", "node-b", "node-c"],
        project.path(),
        &["--lazy-image"],
    );
    let http = reqwest::Client::new();
    let proxy = cluster.proxy_url.clone();
    // Images, one per agent, started through the proxy one after another
    // (as agents arriving over time would).
    let mut handles = Vec::new();
    let t0 = Instant::now();
    for _ in 0..agents {
        let s = call(&http, &proxy, "image-start", json!({"lisp": "sbcl"})).await;
        handles.push(s["image"]["handle"].as_str().expect("handle").to_string());
    }
    let start_all = t0.elapsed();
    let node_url = |h: &str| {
        let node = h.split('/').next().unwrap_or_default();
        cluster
            .nodes
            .iter()
            .find(|n| n.name == node)
            .map(|n| n.url.clone())
            .expect("the handle's node")
    };
    let eval = |h: &str| json!({"code": "(+ 1 2)", "image": h});
    // Warm-up, then direct and proxied calls alternating, one at a time.
    let (mut direct, mut proxied) = (Vec::new(), Vec::new());
    for h in &handles {
        call(&http, &node_url(h), "evaluate-lisp", eval(h)).await;
        call(&http, &proxy, "evaluate-lisp", eval(h)).await;
    }
    for i in 0..CALLS {
        for h in &handles {
            let (first, second) = if i % 2 == 0 {
                (node_url(h), proxy.clone())
            } else {
                (proxy.clone(), node_url(h))
            };
            for url in [first, second] {
                let t = Instant::now();
                call(&http, &url, "evaluate-lisp", eval(h)).await;
                let took = ms(t.elapsed());
                if url == proxy {
                    proxied.push(took)
                } else {
                    direct.push(took)
                }
            }
        }
    }
    // Throughput: every agent at once, BURST calls each; ROUNDS rounds,
    // direct and proxied taking turns; the median round.
    let mut rates: [Vec<f64>; 2] = [Vec::new(), Vec::new()];
    for round in 0..2 * ROUNDS {
        let through_proxy = round % 2 == 1;
        let t = Instant::now();
        let runs = handles.iter().map(|h| {
            let url = if through_proxy {
                proxy.clone()
            } else {
                node_url(h)
            };
            let (http, h) = (http.clone(), h.clone());
            async move {
                for _ in 0..BURST {
                    call(
                        &http,
                        &url,
                        "evaluate-lisp",
                        json!({"code": "(+ 1 2)", "image": h}),
                    )
                    .await;
                }
            }
        });
        futures::future::join_all(runs).await;
        rates[usize::from(through_proxy)].push((agents * BURST) as f64 / t.elapsed().as_secs_f64());
    }
    for r in &mut rates {
        r.sort_by(f64::total_cmp);
    }
    let rows = [
        ("direct", rates[0][ROUNDS / 2]),
        ("haproxy", rates[1][ROUNDS / 2]),
    ];
    for v in [&mut direct, &mut proxied] {
        v.sort_by(f64::total_cmp);
    }
    let mut per_node = std::collections::BTreeMap::new();
    for h in &handles {
        *per_node
            .entry(h.split('/').next().unwrap_or_default().to_string())
            .or_insert(0) += 1;
    }
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!(
        "\ncl-mcp-server nodes: 3 nodes behind HAProxy, {agents} agents, stateless raw HTTP, SBCL; load average {}",
        load.split_whitespace().take(3).collect::<Vec<_>>().join(" ")
    );
    println!("| path | median ms | p95 ms | calls/s, {agents} agents at once (median of {ROUNDS} rounds) |");
    println!("|---|---|---|---|");
    for ((label, tput), lat) in rows.iter().zip([&direct, &proxied]) {
        println!(
            "| {label} | {:.2} | {:.2} | {:.0} |",
            percentile(lat, 0.5),
            percentile(lat, 0.95),
            tput
        );
    }
    println!(
        "proxy adds {:.2} ms at the median ({} calls each way, alternating)",
        percentile(&proxied, 0.5) - percentile(&direct, 0.5),
        direct.len()
    );
    println!(
        "images per node: {}; {agents} image-starts through the proxy took {:.1} s",
        per_node
            .iter()
            .map(|(n, c)| format!("{n} {c}"))
            .collect::<Vec<_>>()
            .join(", "),
        start_all.as_secs_f64()
    );
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    if !cluster::haproxy_installed() {
        eprintln!("nodes: haproxy is not installed (apt-get install haproxy)");
        std::process::exit(1);
    }
    let agents = std::env::var("NODES_AGENTS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(6);
    tokio::runtime::Runtime::new()
        .expect("a runtime")
        .block_on(run(agents));
}
