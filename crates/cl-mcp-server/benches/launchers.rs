//! Launcher benchmark: `cargo bench -p cl-mcp-server --bench launchers`.
//!
//! The same SBCL image started three ways, with the built binary over
//! stdio and a warm core cache: the built-in local start, the
//! `scripts/launchers/local` launcher, and `scripts/launchers/netns` (its
//! own network namespace; only as root, else its row says why). Per way:
//! server spawn → first `(+ 1 2)` result, `image-restart` → first result
//! (stop through the launcher + a fresh launch), and the warm
//! `evaluate-lisp (+ 1 2)` round trip (a launched image's evaluations take
//! Swank, the local one's the evaluation channel). `LAUNCHERS_N` warm calls
//! per row (default 1000), `LAUNCHERS_RUNS` starts and restarts (default 5).
//! Prints a table.

use std::path::Path;
use std::time::{Duration, Instant};

#[path = "support/stdio_server.rs"]
mod stdio_server;
use stdio_server::Server;

const BIN: &str = env!("CARGO_BIN_EXE_cl-mcp-server");

fn env_n(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn median_p99(mut v: Vec<Duration>) -> (f64, f64) {
    v.sort();
    let at = |p: f64| v[((v.len() as f64 - 1.0) * p).round() as usize].as_secs_f64() * 1e3;
    (at(0.5), at(0.99))
}

fn first_eval(s: &mut Server) {
    let (_, r) = s.call("evaluate-lisp", serde_json::json!({"code": "(+ 1 2)"}));
    assert!(r.contains("=> 3"), "{r}");
}

/// One way of starting the image: its row of the table.
fn measure(args: &[&str], runs: usize, n: usize) -> String {
    let starts: Vec<Duration> = (0..runs)
        .map(|_| {
            let t = Instant::now();
            let mut s = Server::start(BIN, args);
            s.initialize();
            first_eval(&mut s);
            let d = t.elapsed();
            s.stop();
            d
        })
        .collect();
    let mut s = Server::start(BIN, args);
    s.initialize();
    first_eval(&mut s);
    let restarts: Vec<Duration> = (0..runs)
        .map(|_| {
            let t = Instant::now();
            let (_, r) = s.call("image-restart", serde_json::json!({}));
            assert!(!r.contains("\"isError\":true"), "{r}");
            first_eval(&mut s);
            t.elapsed()
        })
        .collect();
    let evals: Vec<Duration> = (0..n)
        .map(|_| {
            s.call("evaluate-lisp", serde_json::json!({"code": "(+ 1 2)"}))
                .0
        })
        .collect();
    s.stop();
    let (start, _) = median_p99(starts);
    let (restart, _) = median_p99(restarts);
    let (eval, p99) = median_p99(evals);
    format!("{start:9.0} ms {restart:11.0} ms {eval:11.3} ms {p99:9.3} ms")
}

fn main() {
    let runs = env_n("LAUNCHERS_RUNS", 5);
    let n = env_n("LAUNCHERS_N", 1000);
    let launchers = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/launchers");
    let script = |name: &str| {
        launchers
            .join(name)
            .canonicalize()
            .unwrap()
            .to_string_lossy()
            .into_owned()
    };
    // Warm the core cache (and build it if missing) before measuring.
    let mut s = Server::start(BIN, &[]);
    s.initialize();
    first_eval(&mut s);
    s.stop();

    println!(
        "{:<34} {:>12} {:>14} {:>14} {:>12}",
        "start (median of runs)", "spawn→(+ 1 2)", "restart→(+ 1 2)", "warm eval", "p99"
    );
    let local = script("local");
    let netns = script("netns");
    let ways: [(&str, Vec<&str>); 3] = [
        ("built-in local", vec![]),
        ("--image-launcher local", vec!["--image-launcher", &local]),
        ("--image-launcher netns", vec!["--image-launcher", &netns]),
    ];
    for (name, args) in ways {
        // SAFETY: geteuid(2) has no preconditions.
        if name.ends_with("netns") && unsafe { libc::geteuid() } != 0 {
            println!("{name:<34} (not measured: needs root)");
            continue;
        }
        println!("{name:<34} {}", measure(&args, runs, n));
    }
    println!("(runs={runs}, warm evals={n})");
}
