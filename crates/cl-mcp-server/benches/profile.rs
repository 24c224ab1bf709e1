//! `profile-code`'s sampling and flame graph (issue 24):
//! `cargo bench -p cl-mcp-server --bench profile`.
//!
//! With the built binary over stdio and a real SBCL, profiles a function
//! doing nine tenths of its work in `BENCH-HOT` and one tenth in
//! `BENCH-COLD` (about 0.6 s a run), `PROFILE_N` runs (default 5), in a
//! quiet image and in a busy one (another thread of the image spinning),
//! and prints per row the median samples, run time, samples per second,
//! `BENCH-HOT`'s share, and the round trip with and without the flame
//! graph (its drawing cost) with the PNG's size.
//!
//! First, the drawing alone, in process: `flame_graph::draw` (inferno's SVG
//! and resvg's PNG) of 500 made-up stacks 20 frames deep, median of 9.
//!
//! `PROFILE_AB=other-binary` runs that build too (e.g. main's, before the
//! flame graph) in the same rows, taking turns with this one; its rows have
//! no drawing columns.

use std::time::Duration;

const BIN: &str = env!("CARGO_BIN_EXE_cl-mcp-server");

#[path = "support/stdio_server.rs"]
mod stdio_server;
use serde_json::{json, Value};
use stdio_server::Server;

const DEFS: &str = "(defun bench-hot (n)
   (declare (optimize speed) (type fixnum n))
   (let ((s 0)) (declare (type fixnum s))
     (dotimes (i n s) (setf s (logand (+ s (* i 7) (ash s -3)) #xffffff)))))
 (defun bench-cold (n)
   (declare (optimize speed) (type fixnum n))
   (let ((s 0)) (declare (type fixnum s))
     (dotimes (i n s) (setf s (logand (+ s (* i 3) (ash s -3)) #xffffff)))))
 (defun bench-work (reps) (loop repeat reps sum (+ (bench-hot 900000) (bench-cold 100000))))";

const SPIN: &str = "(defvar *bench-spin* (sb-thread:make-thread (lambda () (loop (bench-cold 100000))) :name \"spin\"))";
const STOP_SPIN: &str = "(sb-thread:terminate-thread *bench-spin*)";

/// One measured server.
struct Subject {
    label: String,
    server: Server,
    /// Knows `flameGraph` (this build).
    draws: bool,
}

#[derive(Default)]
struct Runs {
    samples: Vec<f64>,
    elapsed_ms: Vec<f64>,
    per_second: Vec<f64>,
    hot_share: Vec<f64>,
    with_graph: Vec<Duration>,
    without_graph: Vec<Duration>,
    png_bytes: Vec<f64>,
}

fn result_of(line: &str) -> Value {
    let v: Value = serde_json::from_str(line).expect("a JSON answer");
    let r = v["result"].clone();
    assert_eq!(r["isError"], false, "{line}");
    r
}

fn eval(s: &mut Server, code: &str) {
    let (_, line) = s.call("evaluate-lisp", json!({ "code": code }));
    result_of(&line);
}

fn profile(subject: &mut Subject, runs: &mut Runs) {
    let (took, line) = subject
        .server
        .call("profile-code", json!({"code": "(bench-work 500)"}));
    let r = result_of(&line);
    let st = &r["structuredContent"];
    let samples = st["samples"].as_f64().unwrap();
    let elapsed = st["elapsedMs"].as_f64().unwrap().max(1.0);
    let hot = st["functions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["name"] == "BENCH-HOT")
        .map_or(0.0, |f| f["selfPercent"].as_f64().unwrap());
    runs.samples.push(samples);
    runs.elapsed_ms.push(elapsed);
    runs.per_second.push(samples * 1000.0 / elapsed);
    runs.hot_share.push(hot);
    if subject.draws {
        runs.with_graph.push(took);
        let png = r["content"][1]["data"].as_str().map_or(0, str::len);
        runs.png_bytes.push(png as f64 * 3.0 / 4.0);
        let (took, _) = subject.server.call(
            "profile-code",
            json!({"code": "(bench-work 500)", "flameGraph": false}),
        );
        runs.without_graph.push(took);
    }
}

fn median(xs: &[f64]) -> f64 {
    let mut v = xs.to_vec();
    v.sort_by(|a, b| a.total_cmp(b));
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

fn median_ms(xs: &[Duration]) -> String {
    if xs.is_empty() {
        return "-".into();
    }
    format!(
        "{:.0}",
        median(&xs.iter().map(|d| d.as_secs_f64() * 1e3).collect::<Vec<_>>())
    )
}

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ")
}

/// Median time of drawing 500 stacks 20 frames deep, and the PNG's size.
fn drawing_cost() -> (Duration, usize) {
    let stacks: Vec<String> = (0..500)
        .map(|i| {
            let frames: Vec<String> = (0..20)
                .map(|d| format!("PKG::FUNCTION-{}", (i >> (d % 9)) % 7 + d))
                .collect();
            format!("{} {}", frames.join(";"), 1 + i % 13)
        })
        .collect();
    let mut times = Vec::new();
    let mut png = 0;
    for _ in 0..9 {
        let t = std::time::Instant::now();
        let g = cl_mcp_server::tools::flame_graph::draw(&stacks, "bench", "drawing").unwrap();
        times.push(t.elapsed());
        png = g.png.len();
    }
    times.sort();
    (times[times.len() / 2], png)
}

fn main() {
    let (draw, png) = drawing_cost();
    println!(
        "drawing 500 stacks 20 frames deep (SVG and PNG): median {:.1} ms, PNG {png} bytes",
        draw.as_secs_f64() * 1e3
    );
    let n: usize = std::env::var("PROFILE_N")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(5);
    let root = tempfile::tempdir().unwrap();
    let mut subjects = vec![Subject {
        label: "this build".into(),
        server: Server::spawn_bin(BIN, root.path(), &[]),
        draws: true,
    }];
    if let Ok(other) = std::env::var("PROFILE_AB") {
        subjects.push(Subject {
            label: other.clone(),
            server: Server::spawn_bin(&other, root.path(), &[]),
            draws: false,
        });
    }
    for s in &mut subjects {
        eval(&mut s.server, DEFS);
    }
    println!("load average before: {}", load_average());
    println!(
        "| image | server | samples | run ms | samples/s | BENCH-HOT self % | round trip ms, with / without flame graph | PNG bytes |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    for busy in [false, true] {
        if busy {
            for s in &mut subjects {
                eval(&mut s.server, SPIN);
            }
        }
        let mut runs: Vec<Runs> = subjects.iter().map(|_| Runs::default()).collect();
        for _ in 0..n {
            for (s, r) in subjects.iter_mut().zip(runs.iter_mut()) {
                profile(s, r);
            }
        }
        for (s, r) in subjects.iter().zip(&runs) {
            println!(
                "| {} | {} | {:.0} | {:.0} | {:.0} | {:.1} | {} / {} | {} |",
                if busy {
                    "busy (a thread spinning)"
                } else {
                    "quiet"
                },
                s.label,
                median(&r.samples),
                median(&r.elapsed_ms),
                median(&r.per_second),
                median(&r.hot_share),
                median_ms(&r.with_graph),
                median_ms(&r.without_graph),
                if r.png_bytes.is_empty() {
                    "-".to_string()
                } else {
                    format!("{:.0}", median(&r.png_bytes))
                },
            );
        }
        if busy {
            for s in &mut subjects {
                eval(&mut s.server, STOP_SPIN);
            }
        }
    }
    println!("load average after: {}", load_average());
    for s in subjects {
        s.server.stop();
    }
}
