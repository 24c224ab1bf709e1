//! A source location as the tools show it: relative to the project root
//! when inside it.

use crate::tools::fs_paths;
use crate::tools::lisp_call::{plist_i64, plist_str};
use lisp_syntax::data::Value;
use schemars::JsonSchema;
use serde::Serialize;
use std::path::Path;

/// A source location as the tools show it.
#[derive(Serialize, JsonSchema, Debug, Clone, PartialEq)]
pub struct Location {
    /// Relative to the project root when inside it, else absolute; absent
    /// when the image does not know the file.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub line: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub column: Option<i64>,
}

impl Location {
    pub fn from_plist(v: &Value, root: &Path) -> Location {
        Location {
            path: plist_str(v, "path").map(|p| fs_paths::display_path(root, Path::new(&p))),
            line: plist_i64(v, "line"),
            column: plist_i64(v, "column"),
        }
    }

    /// `path:line:column` (as much as is known).
    pub fn prefix(&self) -> String {
        match (&self.path, self.line, self.column) {
            (Some(p), Some(l), Some(c)) => format!("{p}:{l}:{c}"),
            (Some(p), Some(l), None) => format!("{p}:{l}"),
            (Some(p), None, _) => p.clone(),
            (None, _, _) => "<no file>".to_string(),
        }
    }
}

pub(super) fn inside_root(v: &Value, root: &Path) -> bool {
    plist_str(v, "path").is_some_and(|p| Path::new(&p).starts_with(root))
}
