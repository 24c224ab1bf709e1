//! How long the text tools' core (`cst::parse`, `LineIndex`, `repair_parens`)
//! takes on adversarial shapes: runs of closers and openers, one-character
//! lines, a 400k-line file, one long line, CR-only line endings. Run with
//! `cargo bench -p lisp-syntax --bench adversarial`; prints one row per
//! shape and size (`SIZES=1,10` in MB, the default; `SHAPES=closers,long` only the shapes
//! whose names hold one of those words). A shape whose
//! previous size took longer than `CUTOFF` seconds (default 60) is not run
//! at the next size (its row says so).

use std::hint::black_box;
use std::time::{Duration, Instant};

use lisp_syntax::cst::{parse, LineIndex};
use lisp_syntax::repair::{repair_parens, Repair};

#[path = "support/shapes.rs"]
mod shapes;

fn main() {
    let sizes: Vec<usize> = std::env::var("SIZES")
        .unwrap_or_else(|_| "1,10".into())
        .split(',')
        .filter_map(|s| s.trim().parse::<f64>().ok())
        .map(|mb| (mb * 1_000_000.0) as usize)
        .collect();
    let cutoff = Duration::from_secs_f64(
        std::env::var("CUTOFF")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(60.0),
    );
    println!("| shape | size | parse | line index | repair | outcome |\n|---|---|---|---|---|---|");
    let only = std::env::var("SHAPES").unwrap_or_default();
    for (name, make) in shapes::SHAPES {
        if !only.is_empty() && !only.split(',').any(|w| name.contains(w.trim())) {
            continue;
        }
        let mut skip = false;
        for &n in &sizes {
            if skip {
                println!(
                    "| {name} | {:.0} MB | | | skipped | the smaller size took over {cutoff:?} |",
                    n as f64 / 1e6
                );
                continue;
            }
            let text = make(n);
            let t = Instant::now();
            let p = parse(black_box(&text));
            let parse_time = t.elapsed();
            drop(black_box(p));
            let t = Instant::now();
            black_box(LineIndex::new(black_box(&text)));
            let index_time = t.elapsed();
            let t = Instant::now();
            let r = repair_parens(black_box(&text));
            let repair_time = t.elapsed();
            let outcome = match &r {
                Repair::Unchanged => "unchanged".to_string(),
                Repair::Repaired { changes, .. } => format!("repaired, {} changes", changes.len()),
                Repair::Refused(r) => {
                    let s = r.reason.clone();
                    match s.char_indices().nth(50) {
                        Some((i, _)) => format!("refused: {}…", &s[..i]),
                        None => format!("refused: {s}"),
                    }
                }
            };
            println!(
                "| {name} | {:.0} MB | {parse_time:.2?} | {index_time:.2?} | {repair_time:.2?} | {outcome} |",
                text.len() as f64 / 1e6
            );
            if parse_time + repair_time > cutoff {
                skip = true;
            }
        }
    }
}
