//! Image benchmark: `cargo bench -p cl-mcp-server --bench image`.
//!
//! Measures, with the built binary over stdio and a real SBCL:
//! - process start → `initialize` answered;
//! - process start → first `(+ 1 2)` result, with a warm core cache and a
//!   cold one (a fresh cache directory: the core is built first);
//! - warm `evaluate-lisp (+ 1 2)` round trip (median, p99);
//! - the same evaluation sent straight to a Swank the benchmark starts
//!   itself, on a fresh thread per call and on a persistent worker thread,
//!   and through our Lisp helper's `eval-request` (capture, warnings,
//!   printing) on a worker, so the server's own overhead is visible;
//! - peak memory (VmHWM) of the server and of its image;
//! - per implementation (SBCL, ECL, CLISP, ABCL, CCL where installed):
//!   spawn → first result with an empty cache (`XDG_CACHE_HOME` a fresh
//!   directory) and a complete one, and ABCL's bare JVM start beside it;
//!   `CL_MCP_BENCH_LISPS=ecl,abcl` measures only those and prints only
//!   that table.
//! - warm start and warm evaluation with `--sandbox off` and `workspace`.
//!
//! Prints a table.

use std::time::{Duration, Instant};

use swank_client::SwankClient;

#[path = "support/raw_swank.rs"]
mod raw_swank;
use raw_swank::start_raw_swank;

const BIN: &str = env!("CARGO_BIN_EXE_cl-mcp-server");

#[path = "support/stdio_server.rs"]
mod stdio_server;
use stdio_server::Server;

/// A server of the build being measured, with `extra` arguments, before
/// its handshake.
fn spawn(extra: &[&str]) -> Server {
    Server::start(BIN, extra)
}

/// `evaluate-lisp` of `code` as request `id`: the answer's line.
fn eval(s: &mut Server, id: u64, code: &str) -> String {
    let msg = serde_json::json!({"jsonrpc":"2.0","id":id,"method":"tools/call",
        "params":{"name":"evaluate-lisp","arguments":{"code":code}}});
    s.roundtrip(&msg.to_string())
}

/// Peak resident memory (KiB) of the server and of its image.
fn peak_memory(s: &Server) -> (u64, u64) {
    let pid = s.pid();
    let server = vm_hwm(pid);
    let image = children(pid).into_iter().map(vm_hwm).max().unwrap_or(0);
    (server, image)
}

fn vm_hwm(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1).map(|v| v.parse().unwrap_or(0)))
        })
        .unwrap_or(0)
}

fn children(pid: u32) -> Vec<u32> {
    let mut out = Vec::new();
    if let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) {
        for t in tasks.flatten() {
            if let Ok(c) = std::fs::read_to_string(t.path().join("children")) {
                out.extend(c.split_whitespace().filter_map(|p| p.parse::<u32>().ok()));
            }
        }
    }
    out
}

fn stats(mut v: Vec<Duration>) -> (f64, f64) {
    v.sort();
    let at = |p: f64| v[((v.len() as f64 - 1.0) * p).round() as usize].as_secs_f64() * 1e3;
    (at(0.5), at(0.99))
}

/// Spawn → first `(+ 1 2)` result, in ms.
fn first_result(extra: &[&str]) -> f64 {
    let t = Instant::now();
    let mut s = spawn(extra);
    s.initialize();
    let r = eval(&mut s, 1, "(+ 1 2)");
    let ms = t.elapsed().as_secs_f64() * 1e3;
    assert!(r.contains("=> 3"), "{r}");
    s.stop();
    ms
}

fn main() {
    let starts = start_table(&lisps_to_measure());
    if std::env::var_os("CL_MCP_BENCH_LISPS").is_some() {
        println!("{starts}");
        return;
    }
    let mut rows: Vec<(String, String)> = Vec::new();

    // Warm the core cache once so "warm" means warm.
    first_result(&[]);

    let init: Vec<Duration> = (0..10)
        .map(|_| {
            let t = Instant::now();
            let mut s = spawn(&[]);
            let r = s.initialize();
            let d = t.elapsed();
            assert!(r.contains("protocolVersion"));
            s.stop();
            d
        })
        .collect();
    let (med, p99) = stats(init);
    rows.push((
        "spawn → initialize answered".into(),
        format!("median {med:8.2} ms   p99 {p99:8.2} ms"),
    ));

    let warm: Vec<Duration> = (0..5)
        .map(|_| Duration::from_secs_f64(first_result(&[]) / 1e3))
        .collect();
    let (med, _) = stats(warm);
    rows.push((
        "spawn → first (+ 1 2), warm core".into(),
        format!("median {med:8.1} ms"),
    ));

    // The sandbox (issue 13) should cost nothing measurable per call.
    for mode in ["off", "workspace"] {
        let args = ["--sandbox", mode];
        let starts: Vec<Duration> = (0..5)
            .map(|_| Duration::from_secs_f64(first_result(&args) / 1e3))
            .collect();
        let (start_med, _) = stats(starts);
        let mut s = spawn(&args);
        s.initialize();
        eval(&mut s, 1, "(+ 1 2)");
        let times: Vec<Duration> = (0..1000)
            .map(|i| {
                let t = Instant::now();
                let r = eval(&mut s, 10 + i, "(+ 1 2)");
                let d = t.elapsed();
                debug_assert!(r.contains("=> 3"));
                d
            })
            .collect();
        s.stop();
        let (med, p99) = stats(times);
        rows.push((
            format!("--sandbox {mode}: warm start / eval (n=1000)"),
            format!("start {start_med:6.1} ms   eval median {med:6.3} ms   p99 {p99:6.3} ms"),
        ));
    }

    let cold_dir = tempfile::tempdir().unwrap();
    let cold = first_result(&["--cache-dir", cold_dir.path().to_str().unwrap()]);
    rows.push((
        "spawn → first (+ 1 2), cold core".into(),
        format!("{cold:8.0} ms (builds the core)"),
    ));

    // Warm round trips through the server.
    let mut s = spawn(&[]);
    s.initialize();
    eval(&mut s, 1, "(+ 1 2)");
    let n = 2000;
    let times: Vec<Duration> = (0..n)
        .map(|i| {
            let t = Instant::now();
            let r = eval(&mut s, 10 + i, "(+ 1 2)");
            let d = t.elapsed();
            debug_assert!(r.contains("=> 3"));
            d
        })
        .collect();
    let (med, p99) = stats(times);
    rows.push((
        format!("evaluate-lisp (+ 1 2) over stdio (n={n})"),
        format!("median {:8.3} ms   p99 {:8.3} ms", med, p99),
    ));
    let (server_kib, image_kib) = peak_memory(&s);
    s.stop();

    // The same evaluation straight on Swank, measured here.
    let (mut lisp, port) = start_raw_swank();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let raw_swank::Baselines {
        fresh,
        worker,
        helper,
    } = rt.block_on(async {
        let (client, _events) = SwankClient::connect(("127.0.0.1", port), None)
            .await
            .unwrap();
        raw_swank::swank_baselines(&client, n as usize, 50).await
    });
    let _ = lisp.kill();
    let _ = lisp.wait();
    let (med, p99) = stats(fresh);
    rows.push((
        format!("raw Swank eval, fresh thread (n={n})"),
        format!("median {:8.3} ms   p99 {:8.3} ms", med, p99),
    ));
    let (med, p99) = stats(worker);
    rows.push((
        format!("raw Swank eval, worker thread (n={n})"),
        format!("median {:8.3} ms   p99 {:8.3} ms", med, p99),
    ));
    let (med, p99) = stats(helper);
    rows.push((
        format!("raw Swank cl-mcp:eval-request, worker (n={n})"),
        format!("median {:8.3} ms   p99 {:8.3} ms", med, p99),
    ));
    rows.push((
        "peak memory: server + image".into(),
        format!(
            "{:6.1} MiB + {:6.1} MiB = {:6.1} MiB",
            server_kib as f64 / 1024.0,
            image_kib as f64 / 1024.0,
            (server_kib + image_kib) as f64 / 1024.0
        ),
    ));

    println!("\ncl-mcp-server image benchmark (stdio, SBCL via Swank)");
    println!("{:-<86}", "");
    for (k, v) in &rows {
        println!("{k:<42} {v}");
    }
    println!("{:-<86}", "");
    println!("{starts}");
}

/// The implementations of the start table: `CL_MCP_BENCH_LISPS`
/// (comma-separated, e.g. `ecl,abcl`; only that table is printed), else
/// every one the server knows.
fn lisps_to_measure() -> Vec<String> {
    match std::env::var("CL_MCP_BENCH_LISPS") {
        Ok(v) if !v.trim().is_empty() => v.split(',').map(|l| l.trim().to_string()).collect(),
        _ => ["sbcl", "ecl", "clisp", "abcl", "ccl"]
            .map(String::from)
            .to_vec(),
    }
}

fn installed(name: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(name).is_file()))
}

/// Spawn → first `(+ 1 2)` result in ms, with `XDG_CACHE_HOME` at `cache`
/// (the server's cache and ASDF's both under it).
fn first_result_in(cache: &std::path::Path, extra: &[&str]) -> f64 {
    let cache = cache.to_string_lossy();
    let t = Instant::now();
    let mut s = Server::start_with_env(BIN, extra, &[("XDG_CACHE_HOME", &cache)]);
    s.initialize();
    let r = eval(&mut s, 1, "(+ 1 2)");
    let ms = t.elapsed().as_secs_f64() * 1e3;
    assert!(r.contains("=> 3"), "{r}");
    s.stop();
    ms
}

/// Seconds, the median of `runs` and their spread.
fn median_spread(mut ms: Vec<f64>) -> String {
    ms.sort_by(f64::total_cmp);
    let med = ms[ms.len() / 2];
    format!(
        "{:6.2} s ({:.2}–{:.2}, n={})",
        med / 1e3,
        ms[0] / 1e3,
        ms[ms.len() - 1] / 1e3,
        ms.len()
    )
}

/// Per implementation: spawn → first `(+ 1 2)` result with an empty cache
/// (`XDG_CACHE_HOME` a fresh directory: the server's cache and ASDF's
/// compiled files) and with that cache complete (`doctor` finishes what a
/// cold start left building), and for ABCL the JVM's own start
/// (`abcl --noinit --eval '(ext:exit)'`) beside it.
fn start_table(lisps: &[String]) -> String {
    let mut out =
        String::from("\nstart → first evaluate-lisp (+ 1 2) result, per implementation\n");
    out += &format!("{:-<100}\n", "");
    out += &format!(
        "{:<7} {:<34} {:<12} {}\n",
        "lisp", "warm: median (min–max, n)", "cold", "JVM start: median (min–max)"
    );
    for name in lisps {
        if !installed(name) {
            out += &format!("{name:<7} not installed\n");
            continue;
        }
        let cache = tempfile::tempdir().unwrap();
        let args = ["--lisp", name.as_str()];
        let cold = first_result_in(cache.path(), &args);
        // ECL's cold start builds its compiled cache in the background;
        // the server stopped above killed that build: finish it.
        let doctor = std::process::Command::new(BIN)
            .args(["doctor", "--lisp", name])
            .env("XDG_CACHE_HOME", cache.path())
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap();
        assert!(
            doctor.status.success(),
            "doctor --lisp {name}: {}",
            String::from_utf8_lossy(&doctor.stdout)
        );
        let n = if name == "abcl" { 3 } else { 5 };
        let warm: Vec<f64> = (0..n)
            .map(|_| first_result_in(cache.path(), &args))
            .collect();
        let jvm = if name == "abcl" {
            let runs: Vec<f64> = (0..3)
                .map(|_| {
                    let t = Instant::now();
                    let st = std::process::Command::new("abcl")
                        .args(["--noinit", "--eval", "(ext:exit)"])
                        .stdin(std::process::Stdio::null())
                        .stdout(std::process::Stdio::null())
                        .status()
                        .unwrap();
                    assert!(st.success());
                    t.elapsed().as_secs_f64() * 1e3
                })
                .collect();
            median_spread(runs)
        } else {
            String::new()
        };
        out += &format!(
            "{name:<7} {:<34} {:<12} {jvm}\n",
            median_spread(warm),
            format!("{:6.1} s", cold / 1e3)
        );
    }
    out += &format!("{:-<100}", "");
    out
}
