//! The evaluation hot path (issue 14): `cargo bench -p cl-mcp-server --bench hotpath`.
//!
//! One table, in one run, with the built binary over stdio and a real SBCL:
//! - warm `evaluate-lisp` round trips (median, p99) for `(+ 1 2)`, a
//!   `defun`, and a call printing 10 KB;
//! - 10 sequential `defun` calls right after `asdf-load-system` of a 30-file
//!   system (forced rebuild), over several rounds: median and max;
//! - the same `(+ 1 2)` sent straight to a Swank this benchmark starts
//!   itself, on a fresh thread per call and on a persistent worker thread
//!   (the baselines the server is compared with).
//!
//! `HOTPATH_N` sets the number of calls per row (default 2000);
//! `HOTPATH_BIN` runs another build of the server (e.g. an older commit's)
//! instead. `HOTPATH_AB=other-binary` prints a before/after table instead:
//! both servers run side by side and take turns, 20 blocks of `HOTPATH_N`/20
//! calls each, so a slow stretch of a shared machine falls on both.

use std::io::Write;
use std::time::{Duration, Instant};

use swank_client::{SwankClient, Thread};

#[path = "support/raw_swank.rs"]
mod raw_swank;
use raw_swank::start_raw_swank;

const BIN: &str = env!("CARGO_BIN_EXE_cl-mcp-server");

#[path = "support/stdio_server.rs"]
mod stdio_server;
use stdio_server::Server;

/// The server this run measures: `HOTPATH_BIN`, or the one just built.
fn spawn(root: &std::path::Path) -> Server {
    let bin = std::env::var("HOTPATH_BIN").unwrap_or_else(|_| BIN.to_string());
    Server::spawn_bin(&bin, root, &[])
}

/// `evaluate-lisp` of `code`: its round-trip time and the answer.
fn eval(s: &mut Server, code: &str) -> (Duration, String) {
    s.call("evaluate-lisp", serde_json::json!({ "code": code }))
}

fn stats(mut v: Vec<Duration>) -> (f64, f64, f64) {
    v.sort();
    let at = |p: f64| v[((v.len() as f64 - 1.0) * p).round() as usize].as_secs_f64() * 1e3;
    (at(0.5), at(0.99), at(1.0))
}

/// Round trips on an evaluation channel, driven with blocking I/O from
/// here after proving `token`: `(+ 1 2)` alone (the channel's floor), and
/// through our helper.
fn channel_times<S: std::io::Read + Write>(
    ch: &mut S,
    token: &str,
    n: usize,
) -> (Vec<Duration>, Vec<Duration>) {
    let mut call = |payload: &str| -> String {
        ch.write_all(&swank_client::encode_frame(payload).unwrap())
            .unwrap();
        let mut h = [0u8; 6];
        ch.read_exact(&mut h).unwrap();
        let len = usize::from_str_radix(std::str::from_utf8(&h).unwrap(), 16).unwrap();
        let mut b = vec![0u8; len];
        ch.read_exact(&mut b).unwrap();
        String::from_utf8(b).unwrap()
    };
    call(token);
    let mut time = |payload: &str| -> Vec<Duration> {
        (0..n)
            .map(|_| {
                let t = Instant::now();
                call(payload);
                t.elapsed()
            })
            .collect()
    };
    (
        time("(\"CL-USER\" (cl:+ 1 2))"),
        time("(\"CL-USER\" (cl-mcp:eval-request \"(+ 1 2)\"))"),
    )
}

/// A 30-file ASDF system `hotbench` under `root`.
fn write_system(root: &std::path::Path) {
    let mut components = String::new();
    for i in 0..30 {
        let mut src = "(in-package #:cl-user)\n".to_string();
        for j in 0..20 {
            src.push_str(&format!(
                "(defun hotbench-{i}-{j} (x y)\n  (let ((acc (list x y)))\n    (dotimes (k {j}) (push (* k x) acc))\n    (reduce #'+ acc)))\n"
            ));
        }
        std::fs::write(root.join(format!("file-{i:02}.lisp")), src).unwrap();
        components.push_str(&format!(" (:file \"file-{i:02}\")"));
    }
    std::fs::write(
        root.join("hotbench.asd"),
        format!("(asdf:defsystem \"hotbench\" :serial t :components ({components}))\n"),
    )
    .unwrap();
}

/// `HOTPATH_AB`: this build (A) against another (B), taking turns.
fn compare(other: &str, n: usize) {
    let root = tempfile::tempdir().unwrap();
    let mut servers = [
        Server::spawn_bin(BIN, root.path(), &[]),
        Server::spawn_bin(other, root.path(), &[]),
    ];
    let blocks = 20;
    let per = (n / blocks).max(1);
    type Code = fn(usize) -> String;
    let cases: [(&str, Code); 3] = [
        ("(+ 1 2)", |_| "(+ 1 2)".to_string()),
        ("defun", |i| format!("(defun hot-f (x) (+ x {i}))")),
        ("printing 10 KB", |_| {
            "(write-string (make-string 10000 :initial-element #\\a)) nil".to_string()
        }),
    ];
    for s in servers.iter_mut() {
        for _ in 0..200 {
            eval(s, "(+ 1 2)");
        }
    }
    println!("\ncl-mcp-server hot path, A = this build, B = {other} (stdio, SBCL, {blocks} alternating blocks of {per})");
    println!("{:-<120}", "");
    for (name, code) in cases {
        let mut times: [Vec<Duration>; 2] = [Vec::new(), Vec::new()];
        for block in 0..blocks {
            for (k, s) in servers.iter_mut().enumerate() {
                for i in 0..per {
                    times[k].push(eval(s, &code(block * per + i)).0);
                }
            }
        }
        for (k, t) in times.into_iter().enumerate() {
            let (med, p99, max) = stats(t);
            println!(
                "{:<52} median {med:7.3} ms   p99 {p99:7.3} ms   max {max:7.3} ms   p99/median {:4.2}",
                format!("{} evaluate-lisp {name}", ["A", "B"][k]),
                p99 / med
            );
        }
    }
    println!("{:-<120}", "");
    for s in servers {
        s.stop();
    }
}

fn main() {
    let n: usize = std::env::var("HOTPATH_N")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2000);
    if let Ok(other) = std::env::var("HOTPATH_AB") {
        return compare(&other, n);
    }
    let mut rows: Vec<(String, String)> = Vec::new();
    let row = |rows: &mut Vec<(String, String)>, name: String, v: Vec<Duration>| {
        let (med, p99, max) = stats(v);
        rows.push((
            name,
            format!(
                "median {med:7.3} ms   p99 {p99:7.3} ms   max {max:7.3} ms   p99/median {:4.2}",
                p99 / med
            ),
        ));
    };

    let root = tempfile::tempdir().unwrap();
    write_system(root.path());
    let mut s = spawn(root.path());
    for _ in 0..200 {
        let (_, r) = eval(&mut s, "(+ 1 2)");
        assert!(r.contains("=> 3"), "{r}");
    }
    let times: Vec<Duration> = (0..n).map(|_| eval(&mut s, "(+ 1 2)").0).collect();
    row(&mut rows, format!("evaluate-lisp (+ 1 2) (n={n})"), times);
    // The transport and engine alone (no image): `ping`.
    let times: Vec<Duration> = (0..n)
        .map(|i| {
            let msg = format!(r#"{{"jsonrpc":"2.0","id":"p{i}","method":"ping"}}"#);
            let t = Instant::now();
            s.roundtrip(&msg);
            t.elapsed()
        })
        .collect();
    row(
        &mut rows,
        format!("ping over stdio, no image (n={n})"),
        times,
    );

    let times: Vec<Duration> = (0..n)
        .map(|i| {
            let (d, r) = eval(&mut s, &format!("(defun hot-f (x) (+ x {i}))"));
            debug_assert!(r.contains("HOT-F"), "{r}");
            d
        })
        .collect();
    row(&mut rows, format!("evaluate-lisp defun (n={n})"), times);

    let times: Vec<Duration> = (0..n / 4)
        .map(|_| {
            let (d, r) = eval(
                &mut s,
                "(write-string (make-string 10000 :initial-element #\\a)) nil",
            );
            debug_assert!(r.len() > 10000, "{r}");
            d
        })
        .collect();
    row(
        &mut rows,
        format!("evaluate-lisp printing 10 KB (n={})", n / 4),
        times,
    );

    // 10 defuns right after a (forced) build of a 30-file system.
    let rounds = 5;
    let mut all = Vec::new();
    let mut worst_round_total = 0.0f64;
    for round in 0..rounds {
        let (_, r) = s.call(
            "asdf-load-system",
            serde_json::json!({"system": "hotbench", "force": true}),
        );
        assert!(!r.contains("\"isError\":true"), "{r}");
        let mut total = 0.0;
        for i in 0..10 {
            let (d, r) = eval(
                &mut s,
                &format!("(defun after-build-{round}-{i} (x) (* x {i}))"),
            );
            assert!(r.contains("AFTER-BUILD"), "{r}");
            total += d.as_secs_f64() * 1e3;
            all.push(d);
        }
        worst_round_total = worst_round_total.max(total);
    }
    let (med, _, max) = stats(all);
    rows.push((
        format!("10 defuns after asdf-load-system, 30 files (x{rounds})"),
        format!("median {med:7.3} ms   max {max:7.3} ms   worst 10-call total {worst_round_total:6.1} ms"),
    ));
    s.stop();

    // Raw Swank baselines, same run.
    let (mut lisp, port) = start_raw_swank();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let (fresh, worker, helper, chan, unix) = rt.block_on(async {
        let (client, _events) = SwankClient::connect(("127.0.0.1", port), None)
            .await
            .unwrap();
        let raw_swank::Baselines {
            fresh,
            worker,
            helper,
        } = raw_swank::swank_baselines(&client, n, 200).await;
        // The evaluation channel (lisp/direct.lisp) of the same image, driven
        // with blocking I/O from here: its floor, and with our helper.
        let token = "0123456789abcdef";
        let opened = client
            .rex(
                &format!("(cl-mcp-server::start-direct-channel \"{token}\")"),
                "CL-USER",
                Thread::T,
            )
            .await
            .unwrap();
        let swank_client::RexOutcome::Ok(v) = opened else {
            panic!("start-direct-channel: {opened:?}")
        };
        let port = v.as_list().unwrap()[0].as_i64().unwrap() as u16;
        let mut ch = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
        ch.set_nodelay(true).unwrap();
        let chan = channel_times(&mut ch, token, n);
        // The same over the abstract Unix socket the server uses on SBCL.
        let name = format!("cl-mcp-hotpath-{}", std::process::id());
        let opened = client
            .rex(
                &format!("(cl-mcp-server::start-direct-channel \"{token}\" :local \"{name}\")"),
                "CL-USER",
                Thread::T,
            )
            .await
            .unwrap();
        assert!(
            matches!(opened, swank_client::RexOutcome::Ok(_)),
            "{opened:?}"
        );
        let mut ux = {
            use std::os::linux::net::SocketAddrExt;
            let addr = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
            std::os::unix::net::UnixStream::connect_addr(&addr).unwrap()
        };
        let unix = channel_times(&mut ux, token, n);
        (fresh, worker, helper, chan, unix)
    });
    let _ = lisp.kill();
    let _ = lisp.wait();
    row(
        &mut rows,
        format!("raw Swank (+ 1 2), fresh thread (n={n})"),
        fresh,
    );
    row(
        &mut rows,
        format!("raw Swank (+ 1 2), worker thread (n={n})"),
        worker,
    );
    row(
        &mut rows,
        format!("raw Swank cl-mcp:eval-request, worker (n={n})"),
        helper,
    );
    row(
        &mut rows,
        format!("raw eval channel, TCP, (+ 1 2) (n={n})"),
        chan.0,
    );
    row(
        &mut rows,
        format!("raw eval channel, TCP, eval-request (n={n})"),
        chan.1,
    );
    row(
        &mut rows,
        format!("raw eval channel, Unix, (+ 1 2) (n={n})"),
        unix.0,
    );
    row(
        &mut rows,
        format!("raw eval channel, Unix, eval-request (n={n})"),
        unix.1,
    );

    println!("\ncl-mcp-server hot path (stdio, SBCL)");
    println!("{:-<120}", "");
    for (k, v) in &rows {
        println!("{k:<52} {v}");
    }
    println!("{:-<120}", "");
}
