//! The `source` tool family: Lisp-aware reading, checking, searching and
//! structural editing of source files, in pure Rust (no image needed).
//!
//! - [`scan`]: fast delimiter scanner (top-level spans, paren problems).
//! - [`defs`]: what each top-level form defines; shared by every tool here.
//! - `check` (`lisp-check-parens`), `read` (`lisp-read-file`), `grep`
//!   (`clgrep-search`, `clgrep-signatures`), `edit` (`lisp-edit-form`).
//! - [`parens`]: closers repaired by indentation before a write.

pub mod check;
pub mod defs;
pub mod edit;
pub mod grep;
pub mod read;
pub mod scan;

use lisp_syntax::cst::LineIndex;
use schemars::JsonSchema;
use serde::Serialize;

use super::fs::{read_text_capped, resolve_existing_file};
use super::fs_paths::ResolvedPath;
pub use super::parens::{is_lisp_path, LISP_EXTENSIONS};
use super::{ToolDef, ToolError};
use crate::session::Session;

/// The tools of the `source` group.
pub fn tools() -> Vec<ToolDef> {
    vec![
        check::tool_def(),
        read::tool_def(),
        edit::tool_def(),
        grep::search_tool_def(),
        grep::signatures_tool_def(),
    ]
}

/// Resolves `path` for reading and loads it as text (2 MB cap).
pub fn load_source(session: &Session, path: &str) -> Result<(ResolvedPath, String), ToolError> {
    let r = resolve_existing_file(session, path)?;
    let text = read_text_capped(&r)?;
    Ok((r, text))
}

/// A position in a text, for structured output.
#[derive(Clone, Debug, Serialize, JsonSchema, PartialEq, Eq)]
pub struct Position {
    /// 0-based character offset from the start of the file (or `code`).
    pub offset: usize,
    /// 1-based line.
    pub line: usize,
    /// 1-based column, in characters.
    pub column: usize,
}

impl Position {
    /// The position of byte `offset` in `text`.
    pub fn of(text: &str, lines: &LineIndex, offset: usize) -> Position {
        let (line, column) = lines.line_col(offset);
        let offset = offset.min(text.len());
        let mut b = offset;
        while b > 0 && !text.is_char_boundary(b) {
            b -= 1;
        }
        Position {
            offset: text[..b].chars().count(),
            line,
            column,
        }
    }
}

/// The byte range of 0-based lines `offset..offset+limit` of `text`, and
/// the number of lines in `text`.
pub fn line_window(text: &str, lines: &LineIndex, offset: usize, limit: usize) -> (usize, usize) {
    let total = lines.line_count();
    let first = offset.min(total) + 1;
    let last = offset.saturating_add(limit).min(total);
    let start = lines.line_start(first).unwrap_or(text.len());
    let end = if last >= total {
        text.len()
    } else {
        lines.line_start(last + 1).unwrap_or(text.len())
    };
    (start, end.max(start))
}

/// Number of lines as a person counts them (a final newline does not
/// start another line).
pub fn human_line_count(text: &str, lines: &LineIndex) -> usize {
    if text.ends_with('\n') {
        lines.line_count() - 1
    } else {
        lines.line_count()
    }
}
