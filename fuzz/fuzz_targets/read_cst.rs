//! Fuzz target: the CST reader never panics, is lossless, and its tree is
//! well formed, for any input.
//!
//! Run from the repository root (stable toolchain):
//!   RUSTC_BOOTSTRAP=1 cargo fuzz run read_cst -- -max_total_time=60 -dict=fuzz/read_cst.dict
#![no_main]

use libfuzzer_sys::fuzz_target;
use lisp_syntax::cst::{parse, LineIndex, Node};

fn check(src: &str, n: &Node) {
    assert!(src.is_char_boundary(n.span.start) && src.is_char_boundary(n.span.end));
    if n.children.is_empty() {
        assert!(n.span.start < n.span.end, "empty leaf {n:?}");
        return;
    }
    let mut at = n.span.start;
    for c in &n.children {
        assert_eq!(c.span.start, at);
        check(src, c);
        at = c.span.end;
    }
    assert_eq!(at, n.span.end);
}

fuzz_target!(|data: &[u8]| {
    let src = String::from_utf8_lossy(data);
    let p = parse(&src);
    let mut at = 0;
    for n in &p.forms {
        assert_eq!(n.span.start, at);
        check(&src, n);
        at = n.span.end;
    }
    assert_eq!(at, src.len());
    let rebuilt: String = p.leaves().map(|n| n.text(&src)).collect();
    assert_eq!(rebuilt, src);
    let lines = LineIndex::new(&src);
    for e in &p.errors {
        assert!(e.offset <= src.len());
        let (l, c) = lines.line_col(e.offset);
        assert_eq!(lines.offset_of(l, c), Some(e.offset));
        let _ = e.message(&lines);
    }
});
