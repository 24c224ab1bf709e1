//! The parenthesis repair as a client meets it: every case of the
//! held-out corpus (lisp-syntax's `paren_repair` benchmark: Debian's Lisp
//! libraries the repair was not tuned on, each top-level form broken the
//! three ways models break it) sent to the built server over stdio, once
//! as a whole file through `fs-write-file` and once as the new content of a
//! form through `lisp-edit-form`, and the file on disk compared byte for
//! byte with the intended text.
//!
//! Run: `scripts/paren-corpus.sh` (unpacks the held-out libraries under
//! the target directory), then `cargo bench -p cl-mcp-server --bench
//! paren_tools`. `CORPUS=tuning` takes the tuning corpus instead; `LIMIT=N`
//! only the first N cases; `SHOW=wrong` prints each wrong file. Prints
//! per tool and way: restored (the file is the original byte for byte),
//! relaid (the same forms, closers placed elsewhere on their lines),
//! refused (an error result, the file as it was), wrong (other forms
//! written), and unreadable: a file written that does not read, which must
//! stay 0.

use std::time::Instant;

use serde_json::{json, Value};

#[path = "../../lisp-syntax/benches/support/corpus.rs"]
mod corpus;
use corpus::*;

/// The file `lisp-edit-form` edits: the broken form replaces `placeholder`.
const BEFORE: &str = "(in-package :cl-user)\n\n(defvar *before* 1)\n\n";
const PLACEHOLDER: &str = "(defun placeholder ()\n  nil)";
const AFTER: &str = "\n\n(defvar *after* 2)\n";

#[path = "support/stdio_server.rs"]
mod stdio_server;
use stdio_server::Server;

/// Calls `tool`: whether it answered with an error result.
fn is_refused(server: &mut Server, tool: &str, arguments: Value) -> bool {
    let (_, line) = server.call(tool, arguments);
    let r: Value = serde_json::from_str(&line).expect("a JSON answer");
    let result = r
        .get("result")
        .unwrap_or_else(|| panic!("{tool}: no result: {r}"));
    result["isError"] == json!(true)
}

/// With `SHOW=wrong`: a written file that is not the intended one.
fn show(tool: &str, case: &str, written: Option<&str>, intended: &str) {
    if !std::env::var("SHOW").is_ok_and(|s| s.contains("wrong")) {
        return;
    }
    if let Some(w) = written.filter(|w| tokens(w) != tokens(intended)) {
        println!("\n--- wrong ({tool}):\n{case}\n--- written:\n{w}\n--- intended:\n{intended}");
    }
}

fn main() {
    let which = std::env::var("CORPUS").unwrap_or_default();
    let c = if which == "tuning" {
        corpus("tuning corpus", &tuning_libraries())
    } else {
        corpus("held-out corpus", &held_out_libraries())
    };
    if c.cases.is_empty() {
        println!(
            "{}: no Lisp sources found (run scripts/paren-corpus.sh)",
            c.name
        );
        return;
    }
    let limit = std::env::var("LIMIT")
        .ok()
        .and_then(|l| l.parse().ok())
        .unwrap_or(usize::MAX)
        .min(c.cases.len());
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    let mut server = Server::spawn_bin(
        env!("CARGO_BIN_EXE_cl-mcp-server"),
        &root,
        &["--tools", "fs,source"],
    );
    let file = root.join("case.lisp");
    let edited = root.join("edited.lisp");
    let mut write = vec![Tally::default(); WAYS.len()];
    let mut edit = vec![Tally::default(); WAYS.len()];
    let started = Instant::now();
    for i in 0..limit {
        let (case, intended, way) = (&c.cases[i], &c.originals[i], c.ways[i]);
        // fs-write-file: a whole file of one broken form.
        let _ = std::fs::remove_file(&file);
        let refused = is_refused(
            &mut server,
            "fs-write-file",
            json!({"path": "case.lisp", "content": format!("{case}\n")}),
        );
        let written = std::fs::read_to_string(&file).ok();
        assert!(
            !(refused && written.is_some()),
            "fs-write-file refused yet wrote case {i}"
        );
        let want = format!("{intended}\n");
        write[way].count(written.as_deref(), &want);
        show("fs-write-file", case, written.as_deref(), &want);
        // lisp-edit-form: the broken form as the new content of a form in
        // the middle of a file.
        let original = format!("{BEFORE}{PLACEHOLDER}{AFTER}");
        std::fs::write(&edited, &original).unwrap();
        let refused = is_refused(
            &mut server,
            "lisp-edit-form",
            json!({"path": "edited.lisp", "formType": "defun", "formName": "placeholder",
                   "operation": "replace", "content": case}),
        );
        let now = std::fs::read_to_string(&edited).unwrap();
        assert!(
            !(refused && now != original),
            "lisp-edit-form refused yet changed the file for case {i}"
        );
        // (Its new lines take the file's line ending: a form written with
        // CRLF comes back with LF.)
        let want = format!("{BEFORE}{}{AFTER}", intended.replace("\r\n", "\n"));
        edit[way].count((!refused).then_some(now.as_str()), &want);
        show(
            "lisp-edit-form",
            case,
            (!refused).then_some(now.as_str()),
            &want,
        );
    }
    let elapsed = started.elapsed();
    server.stop();
    println!(
        "{}: {} cases of {} ({} forms of {} files), each through both tools in {:.1?}\n",
        c.name,
        limit,
        c.cases.len(),
        c.forms,
        c.files,
        elapsed
    );
    println!(
        "{:<16} {:<30} | {:^7} | restored | relaid | refused | wrong | unreadable",
        "tool", "", "cases"
    );
    for (tool, tallies) in [("fs-write-file", &write), ("lisp-edit-form", &edit)] {
        let mut all = Tally::default();
        for (w, name) in WAYS.iter().enumerate() {
            all.add(&tallies[w]);
            println!(
                "{tool:<16} {name:<30} | {:>7} | {}",
                tallies[w].total(),
                tallies[w].cell(true)
            );
        }
        println!(
            "{tool:<16} {:<30} | {:>7} | {}",
            "all",
            all.total(),
            all.cell(true)
        );
    }
}
