//! The `source` tool family: Lisp-aware reading, checking, searching and
//! structural editing of source files, in pure Rust (no image needed).

pub mod scan;

use super::ToolDef;

/// The tools of the `source` group.
pub fn tools() -> Vec<ToolDef> {
    Vec::new()
}
