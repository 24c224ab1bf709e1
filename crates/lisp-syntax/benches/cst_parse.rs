//! How long `cst::parse` takes on the biggest real Lisp files installed here
//! (SBCL's 1 MB encoding tables, UIOP). Run with
//! `cargo bench -p lisp-syntax --bench cst_parse`; prints the best of 30 runs
//! per file, parse and drop of the tree separately, and the line index.

use std::hint::black_box;
use std::time::{Duration, Instant};

use lisp_syntax::cst::{parse, LineIndex};

const FILES: &[&str] = &[
    "/usr/share/sbcl-source/src/code/external-formats/enc-jpn-tbl.lisp",
    "/usr/share/sbcl-source/src/code/external-formats/enc-cn-tbl.lisp",
    "/usr/share/sbcl-source/contrib/asdf/uiop.lisp",
    "/usr/share/sbcl-source/src/compiler/ir1tran.lisp",
];

fn best_of(runs: usize, mut f: impl FnMut() -> Duration) -> Duration {
    (0..runs).map(|_| f()).min().unwrap_or_default()
}

fn main() {
    for path in FILES {
        let Ok(text) = std::fs::read_to_string(path) else {
            eprintln!("{path}: not found (install sbcl-source), skipped");
            continue;
        };
        let mut nodes = 0;
        let parse_time = best_of(30, || {
            let t = Instant::now();
            let p = parse(black_box(&text));
            let elapsed = t.elapsed();
            nodes = p.leaves().count();
            elapsed
        });
        let drop_time = best_of(30, || {
            let p = parse(&text);
            let t = Instant::now();
            drop(black_box(p));
            t.elapsed()
        });
        let index_time = best_of(30, || {
            let t = Instant::now();
            black_box(LineIndex::new(black_box(&text)));
            t.elapsed()
        });
        println!(
            "{path}: {} KiB, {nodes} leaves: parse {parse_time:.2?}, drop {drop_time:.2?}, line index {index_time:.2?} ({:.0} MB/s)",
            text.len() / 1024,
            text.len() as f64 / parse_time.as_secs_f64() / 1e6,
        );
    }
}
