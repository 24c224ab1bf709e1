//! The source tools on adversarial shapes of text: what each tool costs in
//! time and in answer bytes on a file made of one shape (`lisp-syntax`'s
//! shapes, and those that only the server's scanner and views meet:
//! unclosed `#[` and `#?<` lines, many forms on one line).
//!
//! Run: `cargo bench -p cl-mcp-server --bench text_shapes`. The handlers are
//! called in-process through the tool registry, as a `tools/call` runs
//! them. `SIZES=0.5,1,10` (MB, default 1), `SHAPES=word,word` (shapes whose
//! names hold a word), `TOOLS=check,read,signatures,write` and `CUTOFF`
//! seconds (30) after which a tool's larger sizes are skipped for a shape.

use std::sync::Arc;
use std::time::{Duration, Instant};

use cl_mcp_server::config::ServerConfig;
use cl_mcp_server::session::Session;
use cl_mcp_server::tools::{ToolContext, ToolGroup, ToolRegistry};
use serde_json::json;

#[path = "../../lisp-syntax/benches/support/shapes.rs"]
mod shapes;

fn bracket_lines(n: usize) -> String {
    "#[\n".repeat(n / 3)
}

fn interpol_lines(n: usize) -> String {
    "(f #?<\n".repeat(n / 7)
}

fn forms_on_one_line(n: usize) -> String {
    let mut s = String::with_capacity(n + 16);
    let mut i = 0;
    while s.len() < n {
        s.push_str(&format!("(f {i}) "));
        i += 1;
    }
    s.push('\n');
    s
}

fn braces_on_one_line(n: usize) -> String {
    "#{ ".repeat(n / 3)
}

const EXTRA: &[shapes::Shape] = &[
    ("unclosed #[ lines", bracket_lines),
    ("unclosed #?< lines", interpol_lines),
    ("forms on one line", forms_on_one_line),
    ("unclosed #{ on one line", braces_on_one_line),
];

fn main() {
    let sizes: Vec<f64> = std::env::var("SIZES")
        .unwrap_or_else(|_| "1".into())
        .split(',')
        .filter_map(|s| s.trim().parse().ok())
        .collect();
    let wanted: Vec<String> = std::env::var("SHAPES")
        .map(|s| s.split(',').map(|w| w.trim().to_lowercase()).collect())
        .unwrap_or_default();
    let tools: Vec<String> = std::env::var("TOOLS")
        .unwrap_or_else(|_| "check,read,signatures,write".into())
        .split(',')
        .map(|s| s.trim().to_string())
        .collect();
    let cutoff = Duration::from_secs_f64(
        std::env::var("CUTOFF")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(30.0),
    );
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    let config = ServerConfig {
        project_root: Some(root.clone()),
        ..ServerConfig::default()
    };
    let session = Session::new(Arc::new(config));
    let registry = ToolRegistry::standard(&[ToolGroup::Source, ToolGroup::Fs]);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let call = |tool: &str, args: serde_json::Value| -> (Duration, usize, bool) {
        let def = registry.get(tool).expect("tool registered");
        let ctx = ToolContext::new(session.clone(), Default::default());
        let t = Instant::now();
        let out = rt.block_on(def.call(args, ctx));
        (t.elapsed(), out.text.len(), out.is_error)
    };
    println!("source tools on adversarial shapes (one run per cell: time, answer bytes; ! = an error answer)\n");
    print!("{:<36} {:>5}", "shape", "MB");
    for t in &tools {
        print!(" {:>22}", t);
    }
    println!();
    for (name, make) in shapes::SHAPES.iter().chain(EXTRA) {
        if !wanted.is_empty() && !wanted.iter().any(|w| name.contains(w.as_str())) {
            continue;
        }
        let mut slow = vec![false; tools.len()];
        for &mb in &sizes {
            let text = make((mb * (1 << 20) as f64) as usize);
            std::fs::write(root.join("shape.lisp"), &text).unwrap();
            print!("{:<36} {:>5}", name, mb);
            for (k, t) in tools.iter().enumerate() {
                if slow[k] {
                    print!(" {:>22}", "skipped");
                    continue;
                }
                let (took, bytes, error) = match t.as_str() {
                    "check" => call("lisp-check-parens", json!({"path": "shape.lisp"})),
                    "read" => call("lisp-read-file", json!({"path": "shape.lisp"})),
                    "signatures" => call("clgrep-signatures", json!({"path": "shape.lisp"})),
                    "write" => call(
                        "fs-write-file",
                        json!({"path": "written.lisp", "content": text}),
                    ),
                    other => panic!("unknown tool {other} (check, read, signatures, write)"),
                };
                slow[k] = took > cutoff;
                let cell = format!(
                    "{:.2} s {:>7}{}",
                    took.as_secs_f64(),
                    human(bytes),
                    if error { "!" } else { "" }
                );
                print!(" {cell:>22}");
            }
            println!();
        }
    }
}

fn human(bytes: usize) -> String {
    if bytes >= 1 << 20 {
        format!("{:.1} MB", bytes as f64 / (1 << 20) as f64)
    } else if bytes >= 1 << 10 {
        format!("{:.1} KB", bytes as f64 / 1024.0)
    } else {
        format!("{bytes} B")
    }
}
