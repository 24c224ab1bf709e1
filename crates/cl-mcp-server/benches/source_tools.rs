//! Benchmark of the source tools on SBCL's own sources
//! (`/usr/share/sbcl-source`, Debian's sbcl-source package), with GNU
//! `grep -rnE` of the same regexes timed beside the search as the floor.
//!
//! Run: `cargo bench -p cl-mcp-server --bench source_tools`. The tool
//! handlers are called in-process through the tool registry, exactly as a
//! `tools/call` would run them (argument parsing, path policy, output
//! building included). Prints the median and the fastest of N runs.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use cl_mcp_server::config::ServerConfig;
use cl_mcp_server::session::Session;
use cl_mcp_server::tools::{ToolContext, ToolGroup, ToolRegistry};
use serde_json::{json, Value};

const SBCL_SOURCE: &str = "/usr/share/sbcl-source";
const RUNS: usize = 15;

fn main() {
    let root = Path::new(SBCL_SOURCE);
    if !root.is_dir() {
        eprintln!("{SBCL_SOURCE} is missing (apt-get install sbcl-source); nothing to measure.");
        return;
    }
    let largest = largest_lisp_file(root);
    let largest_rel = largest
        .strip_prefix(root)
        .unwrap()
        .to_string_lossy()
        .into_owned();
    let size = std::fs::metadata(&largest).map(|m| m.len()).unwrap_or(0);
    let config = ServerConfig {
        project_root: Some(root.to_path_buf()),
        ..ServerConfig::default()
    };
    let session = Session::new(Arc::new(config));
    let registry = ToolRegistry::standard(&[ToolGroup::Source]);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();

    let call = |tool: &str, args: Value| -> Duration {
        let def = registry.get(tool).expect("tool registered");
        let ctx = ToolContext::new(session.clone(), Default::default());
        let t = Instant::now();
        let out = rt.block_on(def.call(args.clone(), ctx));
        let e = t.elapsed();
        assert!(!out.is_error, "{tool} {args}: {}", out.text);
        e
    };

    println!(
        "source tools on {SBCL_SOURCE} ({} runs each; largest file {largest_rel}, {} KB)\n",
        RUNS,
        size / 1024
    );
    println!("{:<58} {:>10} {:>10}", "what", "median", "fastest");
    let row = |what: &str, f: &mut dyn FnMut() -> Duration| {
        f(); // warm the page cache and allocator
        let mut times: Vec<Duration> = (0..RUNS).map(|_| f()).collect();
        times.sort();
        println!(
            "{:<58} {:>10} {:>10}",
            what,
            ms(times[RUNS / 2]),
            ms(times[0])
        );
    };

    row(&format!("lisp-check-parens {largest_rel}"), &mut || {
        call("lisp-check-parens", json!({"path": largest_rel}))
    });
    row("lisp-read-file (collapsed) same file", &mut || {
        call("lisp-read-file", json!({"path": largest_rel}))
    });
    row("lisp-check-parens contrib/asdf/uiop.lisp", &mut || {
        call(
            "lisp-check-parens",
            json!({"path": "contrib/asdf/uiop.lisp"}),
        )
    });
    row(
        "lisp-read-file (collapsed) contrib/asdf/uiop.lisp",
        &mut || call("lisp-read-file", json!({"path": "contrib/asdf/uiop.lisp"})),
    );
    for pattern in [r"\(defmacro ", "with-[a-z-]+-lock", "zzz-no-such-thing"] {
        row(
            &format!("clgrep-search /{pattern}/ whole tree"),
            &mut || call("clgrep-search", json!({"pattern": pattern, "limit": 100})),
        );
        row(
            &format!("  grep -rnE '{pattern}' whole tree (floor)"),
            &mut || grep(pattern, root),
        );
    }
    row("clgrep-signatures whole tree", &mut || {
        call("clgrep-signatures", json!({}))
    });
}

fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1000.0)
}

/// GNU grep over the whole tree (all files, as a user would run it).
fn grep(pattern: &str, root: &Path) -> Duration {
    let t = Instant::now();
    let out = Command::new("grep")
        .args(["-rnE", pattern])
        .arg(root)
        .output()
        .expect("grep runs");
    let e = t.elapsed();
    std::hint::black_box(out.stdout.len());
    e
}

fn largest_lisp_file(root: &Path) -> PathBuf {
    let mut best = (0u64, PathBuf::new());
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&dir) else {
            continue;
        };
        for e in rd.flatten() {
            let p = e.path();
            let Ok(t) = e.file_type() else { continue };
            if t.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "lisp") {
                let len = e.metadata().map(|m| m.len()).unwrap_or(0);
                if len > best.0 {
                    best = (len, p);
                }
            }
        }
    }
    best.1
}
