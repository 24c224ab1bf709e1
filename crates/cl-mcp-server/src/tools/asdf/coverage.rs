//! `asdf-test-system` with `coverage: true` (SBCL's `sb-cover`): where the
//! HTML report goes, what the answer says of it. The Lisp half is
//! `lisp/coverage.lisp` (the flow) and `coverage-report` in
//! `lisp/impl-sbcl.lisp` (sb-cover's data); the report's pages are offered
//! as resources by `resources/coverage.rs`.

use std::path::{Path, PathBuf};

use lisp_syntax::data::Value;
use percent_encoding::{AsciiSet, NON_ALPHANUMERIC};
use schemars::JsonSchema;
use serde::Serialize;

use crate::image::core_cache;
use crate::session::Session;
use crate::tools::error::ToolError;
use crate::tools::fs_paths;
use crate::tools::lisp_call::{plist_i64, plist_items, plist_str};

/// The page sb-cover writes as its index (`lisp://coverage/<system>/index.html`).
pub const INDEX_PAGE: &str = "cover-index.html";

/// A system name as one path segment and one URI segment: everything but
/// letters, digits, `-` and `_` escaped (`my-app/tests` is `my-app%2Ftests`;
/// no name becomes `..`).
const SEGMENT_KEEPS: &AsciiSet = &NON_ALPHANUMERIC.remove(b'-').remove(b'_');

/// `system` as the name of its report directory and URI segment.
pub fn system_segment(system: &str) -> String {
    percent_encoding::utf8_percent_encode(&system.to_ascii_lowercase(), SEGMENT_KEEPS).to_string()
}

/// The directory holding every coverage report of the session's project
/// (`<cache>/coverage/<project key>/`). Starts no image (`resources/list`
/// asks too).
pub fn project_reports(session: &Session) -> PathBuf {
    let cache = session.config.image.cache_dir.clone();
    let cache = cache.unwrap_or_else(core_cache::default_cache_dir);
    core_cache::coverage_dir(&cache, &session.project_root())
}

/// The `lisp://` URI of a report page.
pub fn page_uri(system: &str, page: &str) -> String {
    let page = if page == INDEX_PAGE {
        "index.html"
    } else {
        page
    };
    format!("lisp://coverage/{}/{page}", system_segment(system))
}

/// Prepares `system`'s report directory for a new report: made private,
/// the pages of the last report removed (pages are named by a hash of the
/// source file's path, so a file no longer measured would leave one).
pub fn fresh_report_dir(session: &Session, system: &str) -> Result<PathBuf, ToolError> {
    let project = project_reports(session);
    let dir = project.join(system_segment(system));
    let made = project
        .parent()
        .map_or(Ok(PathBuf::new()), core_cache::private_dir)
        .and_then(|_| core_cache::private_dir(&project))
        .and_then(|_| core_cache::private_dir(&dir));
    made.map_err(|e| {
        ToolError::File(format!(
            "Cannot prepare the coverage report directory {}: {e}",
            dir.display()
        ))
    })?;
    if let Ok(entries) = std::fs::read_dir(&dir) {
        for e in entries.flatten() {
            let p = e.path();
            if p.extension().is_some_and(|x| x == "html") {
                let _ = std::fs::remove_file(p);
            }
        }
    }
    Ok(dir)
}

/// Covered of total, and the share in percent (one decimal; absent when
/// there is nothing to cover).
#[derive(Serialize, JsonSchema, Debug, PartialEq)]
pub struct Share {
    pub covered: i64,
    pub total: i64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub percent: Option<f64>,
}

impl Share {
    fn from_list(v: Option<&Value>) -> Share {
        let items = v.and_then(|v| v.as_list()).unwrap_or(&[]);
        let n = |i: usize| items.get(i).and_then(Value::as_i64).unwrap_or(0);
        let (covered, total) = (n(0), n(1));
        let percent = (total > 0).then(|| (covered as f64 * 1000.0 / total as f64).round() / 10.0);
        Share {
            covered,
            total,
            percent,
        }
    }

    fn text(&self) -> String {
        match self.percent {
            Some(p) => format!("{}/{} ({p:.1}%)", self.covered, self.total),
            None => "none".into(),
        }
    }
}

/// Lines the tests never ran, as sb-cover's report colours them.
#[derive(Serialize, JsonSchema, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct UncoveredRange {
    pub line: i64,
    /// The last line of the range (equal to `line` for one line).
    pub end_line: i64,
    /// `not-executed` (code never run) or `one-branch` (a conditional that
    /// went one way only).
    pub kind: String,
}

/// One measured file.
#[derive(Serialize, JsonSchema, Debug)]
#[serde(rename_all = "camelCase")]
pub struct CoveredFile {
    /// Relative to the project root when inside it.
    pub path: String,
    pub expressions: Share,
    pub branches: Share,
    /// The first uncovered ranges, in line order.
    pub uncovered: Vec<UncoveredRange>,
    /// How many more ranges the report shows.
    pub more_uncovered: i64,
}

/// `structuredContent.coverage` of `asdf-test-system`.
#[derive(Serialize, JsonSchema, Debug)]
#[serde(rename_all = "camelCase")]
pub struct CoverageOutput {
    /// The system's files and its test systems' (not their dependencies).
    pub files: Vec<CoveredFile>,
    /// The HTML report's index page, on disk.
    pub report_path: String,
    /// The same page as a resource (`resources/read`), with its other pages
    /// beside it.
    pub report_uri: String,
}

impl CoverageOutput {
    /// From the run's `:coverage` plist (`test-system-with-coverage`);
    /// `None` when no report was written (no file of the system to measure).
    pub fn from_plist(v: &Value, root: &Path, system: &str, dir: &Path) -> Option<CoverageOutput> {
        plist_str(v, "index")?;
        let files = plist_items(v, "files", |f| CoveredFile {
            path: fs_paths::display_path(
                root,
                Path::new(&plist_str(f, "path").unwrap_or_default()),
            ),
            expressions: Share::from_list(f.plist_get("expressions")),
            branches: Share::from_list(f.plist_get("branches")),
            uncovered: plist_items(f, "uncovered", |r| UncoveredRange {
                line: plist_i64(r, "line").unwrap_or(0),
                end_line: plist_i64(r, "end-line").unwrap_or(0),
                kind: plist_str(r, "kind").unwrap_or_default(),
            }),
            more_uncovered: plist_i64(f, "more").unwrap_or(0),
        });
        Some(CoverageOutput {
            files,
            report_path: dir.join(INDEX_PAGE).display().to_string(),
            report_uri: page_uri(system, INDEX_PAGE),
        })
    }

    /// The answer's coverage part: a line per file, then the uncovered
    /// ranges as `path:line` (or `path:first-last`) lines.
    pub fn render(&self) -> String {
        if self.files.is_empty() {
            return format!(
                "Coverage: no file of the system was measured (the run ended before they \
                 loaded?); report {} ({})",
                self.report_uri, self.report_path
            );
        }
        let mut text = format!(
            "Coverage (sb-cover) of {} file{}; report {} ({})",
            self.files.len(),
            if self.files.len() == 1 { "" } else { "s" },
            self.report_uri,
            self.report_path
        );
        for f in &self.files {
            text.push_str(&format!(
                "\n  {}: expressions {}, branches {}",
                f.path,
                f.expressions.text(),
                f.branches.text()
            ));
        }
        let mut uncovered = String::new();
        for f in &self.files {
            for r in &f.uncovered {
                let lines = if r.end_line > r.line {
                    format!("{}-{}", r.line, r.end_line)
                } else {
                    r.line.to_string()
                };
                let what = match r.kind.as_str() {
                    "one-branch" => "a branch taken one way only",
                    _ => "not executed",
                };
                uncovered.push_str(&format!("\n  {}:{lines}: {what}", f.path));
            }
            if f.more_uncovered > 0 {
                uncovered.push_str(&format!(
                    "\n  {}: {} more range{} in the report",
                    f.path,
                    f.more_uncovered,
                    if f.more_uncovered == 1 { "" } else { "s" }
                ));
            }
        }
        if uncovered.is_empty() {
            text.push_str("\nEvery instrumented form ran.");
        } else {
            text.push_str("\nNot covered:");
            text.push_str(&uncovered);
        }
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn system_names_become_one_safe_segment() {
        assert_eq!(system_segment("my-app/tests"), "my-app%2Ftests");
        assert_eq!(system_segment(".."), "%2E%2E");
        assert_eq!(system_segment("Cov_Demo"), "cov_demo");
        assert_eq!(
            page_uri("a/b", INDEX_PAGE),
            "lisp://coverage/a%2Fb/index.html"
        );
    }

    #[test]
    fn shares_round_to_one_decimal() {
        let v = lisp_syntax::data::read("(15 22)").unwrap();
        let s = Share::from_list(Some(&v));
        assert_eq!(s.percent, Some(68.2));
        assert_eq!(s.text(), "15/22 (68.2%)");
        let none = lisp_syntax::data::read("(0 0)").unwrap();
        assert_eq!(Share::from_list(Some(&none)).percent, None);
    }
}
