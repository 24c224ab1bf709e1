//! How well [`lisp_syntax::repair::repair_parens`] restores real code broken
//! the ways models break it, beside parinfer's indent mode.
//!
//! Run with `cargo bench -p lisp-syntax --bench paren_repair`. Takes every
//! multi-line top-level list starting at column 0 of the libraries Debian
//! ships, and breaks each three ways: the last `)` dropped, one `)` dropped
//! at the end of a line inside the form (a middle one), one `)` too many at
//! the end. Prints, per way, how many repairs give the original back byte
//! for byte, how many give the same forms in another layout (the same
//! tokens; only whitespace and where comments stand differ: a `)` dropped
//! from a line of its own after a comment comes back before the comment),
//! how many are refused, and how many are wrong (other forms, or text that
//! does not read). It does so for two corpora: the libraries the rules were
//! tuned on ([`TUNING`]) and the held-out ones (`scripts/paren-corpus.sh`
//! unpacks them).
//!
//! parinfer's column needs the npm package `parinfer` under
//! `target/parinfer` (`scripts/paren-corpus.sh` installs it) and Node (`target/js/bin/node` or `node` on the PATH); without them it is
//! skipped with a note. `CORPUS=tuning` or `CORPUS=held-out` runs one
//! corpus; `SHOW=wrong,refused,relaid` prints those cases.

use std::path::{Path, PathBuf};
use std::process::Command;

use lisp_syntax::repair::{repair_parens, Repair};

#[path = "support/corpus.rs"]
mod corpus;
use corpus::*;

fn node() -> Option<PathBuf> {
    let local = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/js/bin/node");
    if local.exists() {
        return Some(local);
    }
    Command::new("node")
        .arg("--version")
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|_| PathBuf::from("node"))
}

/// parinfer's indent mode on each case: `Some(text)`, or `None` when it
/// reports failure. `Err` when parinfer is not installed.
fn parinfer(cases: &[String]) -> Result<Vec<Option<String>>, String> {
    let target = target_dir();
    let module = target.join("parinfer/node_modules/parinfer/parinfer.js");
    if !module.exists() {
        return Err(format!(
            "{} not found (npm install --prefix target/parinfer parinfer)",
            module.display()
        ));
    }
    let node = node().ok_or("node not found")?;
    let input = target.join("parinfer/cases.json");
    let json = format!(
        "[{}]",
        cases
            .iter()
            .map(|c| json_string(c))
            .collect::<Vec<_>>()
            .join(",")
    );
    std::fs::write(&input, json).map_err(|e| e.to_string())?;
    let script = "const p=require(process.argv[1]);const fs=require('fs');\
         const cases=JSON.parse(fs.readFileSync(process.argv[2],'utf8'));\
         const out=cases.map(c=>{const r=p.indentMode(c);return r.success?r.text:null;});\
         process.stdout.write(JSON.stringify(out));";
    let out = Command::new(node)
        .arg("-e")
        .arg(script)
        .arg(&module)
        .arg(&input)
        .output()
        .map_err(|e| e.to_string())?;
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).into_owned());
    }
    parse_json_strings(&String::from_utf8_lossy(&out.stdout))
}

fn json_string(s: &str) -> String {
    let mut o = String::with_capacity(s.len() + 2);
    o.push('"');
    for c in s.chars() {
        match c {
            '"' => o.push_str("\\\""),
            '\\' => o.push_str("\\\\"),
            '\n' => o.push_str("\\n"),
            '\r' => o.push_str("\\r"),
            '\t' => o.push_str("\\t"),
            c if (c as u32) < 0x20 => o.push_str(&format!("\\u{:04x}", c as u32)),
            c => o.push(c),
        }
    }
    o.push('"');
    o
}

/// Reads a JSON array of strings and nulls (what the script prints).
fn parse_json_strings(s: &str) -> Result<Vec<Option<String>>, String> {
    let mut out = Vec::new();
    let mut chars = s.trim().chars().peekable();
    if chars.next() != Some('[') {
        return Err("not a JSON array".into());
    }
    loop {
        match chars.next() {
            Some(']') => return Ok(out),
            Some(',') => {}
            Some('n') => {
                for _ in 0..3 {
                    chars.next();
                }
                out.push(None);
            }
            Some('"') => {
                let mut v = String::new();
                loop {
                    match chars.next().ok_or("unterminated string")? {
                        '"' => break,
                        '\\' => match chars.next().ok_or("bad escape")? {
                            'n' => v.push('\n'),
                            'r' => v.push('\r'),
                            't' => v.push('\t'),
                            'b' => v.push('\u{8}'),
                            'f' => v.push('\u{c}'),
                            'u' => {
                                let hex: String = (0..4).filter_map(|_| chars.next()).collect();
                                let code =
                                    u32::from_str_radix(&hex, 16).map_err(|e| e.to_string())?;
                                v.push(char::from_u32(code).unwrap_or('\u{FFFD}'));
                            }
                            c => v.push(c),
                        },
                        c => v.push(c),
                    }
                }
                out.push(Some(v));
            }
            other => return Err(format!("unexpected {other:?}")),
        }
    }
}

/// Runs both repairs over one corpus and prints its table.
fn measure(c: &Corpus) {
    if c.cases.is_empty() {
        println!("{}: no Lisp sources found\n", c.name);
        return;
    }
    let started = std::time::Instant::now();
    let ours: Vec<Option<String>> = c
        .cases
        .iter()
        .map(|case| match repair_parens(case) {
            Repair::Repaired { text, .. } => Some(text),
            Repair::Unchanged => Some(case.clone()),
            Repair::Refused(_) => None,
        })
        .collect();
    let elapsed = started.elapsed();
    let theirs = parinfer(&c.cases);
    let tally = |results: &[Option<String>], way: usize| {
        let mut t = Tally::default();
        for (i, r) in results.iter().enumerate() {
            if c.ways[i] != way {
                continue;
            }
            t.count(r.as_deref(), &c.originals[i]);
        }
        t
    };
    println!(
        "{}: {} files, {} forms broken {} ways = {} cases; our repair took {:.1?} in all\n",
        c.name,
        c.files,
        c.forms,
        WAYS.len(),
        c.cases.len(),
        elapsed
    );
    println!(
        "{:<30} | {:^7} | {:^40} | {:^40}",
        "",
        "cases",
        "ours: restored | relaid | refused | wrong",
        "parinfer: restored | relaid | failed | wrong"
    );
    let mut sum_ours = Tally::default();
    let mut sum_theirs = Tally::default();
    for (w, name) in WAYS.iter().enumerate() {
        let o = tally(&ours, w);
        sum_ours.add(&o);
        let p = match &theirs {
            Ok(t) => {
                let p = tally(t, w);
                sum_theirs.add(&p);
                p.cell(false)
            }
            Err(_) => "skipped".into(),
        };
        println!("{name:<30} | {:>7} | {} | {p}", o.total(), o.cell(false));
    }
    println!(
        "{:<30} | {:>7} | {} | {}\n",
        "all",
        sum_ours.total(),
        sum_ours.cell(false),
        if theirs.is_ok() {
            sum_theirs.cell(false)
        } else {
            "skipped".into()
        }
    );
    if let Err(e) = &theirs {
        println!("parinfer column skipped: {e}\n");
    }
    let show = std::env::var("SHOW").unwrap_or_default();
    for (i, r) in ours.iter().enumerate() {
        match r {
            Some(t) if show.contains("wrong") && tokens(t) != tokens(&c.originals[i]) => {
                println!(
                    "\n--- wrong ({}):\n{}\n--- got:\n{t}\n--- intended:\n{}",
                    WAYS[c.ways[i]], c.cases[i], c.originals[i]
                )
            }
            Some(t) if show.contains("relaid") && *t != c.originals[i] => {
                println!(
                    "\n--- relaid ({}):\n{}\n--- got:\n{t}",
                    WAYS[c.ways[i]], c.cases[i]
                )
            }
            None if show.contains("refused") => {
                if let Repair::Refused(r) = repair_parens(&c.cases[i]) {
                    println!("\n--- refused ({}): {r}\n{}", WAYS[c.ways[i]], c.cases[i]);
                }
            }
            _ => {}
        }
    }
}

fn main() {
    let tuning = tuning_libraries();
    let held = held_out_libraries();
    let only = std::env::var("CORPUS").unwrap_or_default();
    if only != "held-out" {
        measure(&corpus(
            "tuning corpus (the rules were tuned on it)",
            &tuning,
        ));
    }
    if only != "tuning" {
        println!(
            "held out: {}",
            held.iter()
                .filter_map(|p| p.file_name())
                .map(|n| n.to_string_lossy())
                .collect::<Vec<_>>()
                .join(", ")
        );
        measure(&corpus(
            "held-out corpus (never looked at while tuning)",
            &held,
        ));
    }
}
