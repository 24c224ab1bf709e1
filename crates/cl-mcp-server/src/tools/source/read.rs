//! `lisp-read-file`: a Lisp-aware file view. Collapsed by default: one
//! entry per top-level form (`(defun name (args) ...)`) with its line
//! number, `in-package`/`defpackage` whole, comments brief; definitions whose
//! name matches `namePattern` and forms whose text matches `contentPattern`
//! are shown whole.

use std::fmt::Write;
use std::ops::Range;

use lisp_syntax::cst::LineIndex;
use regex::{Regex, RegexBuilder};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::defs::{self, Definition};
use super::scan::{self, ItemKind};
use super::{human_line_count, is_lisp_path, line_window, load_source};
use crate::tools::fs::to_json;
use crate::tools::{off_workers, tool, Annotations, ToolContext, ToolDef, ToolGroup, ToolOutput};

const DEFAULT_LIMIT: usize = 2000;
/// Most lines the collapsed view shows of one signature.
const MAX_SIGNATURE_LINES: usize = 8;
/// Most items the collapsed view shows past `limit` to finish a line; a
/// line with more left (minified code) is cut there.
const MAX_LINE_OVERRUN: usize = 100;
/// Longest line (bytes) the collapsed view prints before cutting it.
const MAX_SHOWN_LINE: usize = 200;

#[derive(Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct ReadArgs {
    path: String,
    collapsed: Option<bool>,
    name_pattern: Option<String>,
    content_pattern: Option<String>,
    /// 0-based first line.
    offset: Option<usize>,
    /// Default 2000.
    limit: Option<usize>,
}

/// Counts describing what was shown.
#[derive(Serialize, JsonSchema, Debug, Default)]
#[serde(rename_all = "camelCase")]
pub struct ReadMeta {
    /// Lines in the file.
    pub total_lines: usize,
    /// Top-level forms in the file (Lisp only).
    pub total_forms: Option<usize>,
    /// Forms starting inside the window (Lisp collapsed view).
    pub shown_forms: Option<usize>,
    /// Forms shown whole (Lisp collapsed view).
    pub expanded_forms: Option<usize>,
    /// True when the window did not cover the whole file.
    pub truncated: bool,
    /// `offset` of the next window, when truncated.
    pub next_offset: Option<usize>,
    /// The file's first delimiter problem, if any (see lisp-check-parens).
    pub syntax_problem: Option<String>,
}

#[derive(Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
struct ReadOutput {
    path: String,
    /// `lisp-collapsed`, `raw` or `text-filtered`.
    mode: &'static str,
    content: String,
    meta: ReadMeta,
}

/// The `lisp-read-file` tool.
pub fn tool_def() -> ToolDef {
    tool(
        "lisp-read-file",
        ToolGroup::Source,
        "Read a Lisp file (collapsed)",
        "Read a Lisp file: top-level forms collapsed to signatures with line \
         numbers; regexes `namePattern`/`contentPattern` show matching definitions/forms whole, \
         `collapsed: false` raw lines; `offset`/`limit` page.",
        Annotations::READ_ONLY,
        |a: ReadArgs, ctx: ToolContext| {
            off_workers(move || {
                let (r, text) = match load_source(&ctx.session, &a.path) {
                    Ok(x) => x,
                    Err(e) => return ToolOutput::error(e),
                };
                let name_re = match a.name_pattern.as_deref().map(|p| compile(p, true)) {
                    Some(Err(e)) => return ToolOutput::error(format!("Bad `namePattern`: {e}")),
                    Some(Ok(r)) => Some(r),
                    None => None,
                };
                let content_re = match a.content_pattern.as_deref().map(|p| compile(p, false)) {
                    Some(Err(e)) => return ToolOutput::error(format!("Bad `contentPattern`: {e}")),
                    Some(Ok(r)) => Some(r),
                    None => None,
                };
                let window = Window {
                    offset: a.offset.unwrap_or(0),
                    limit: a.limit.unwrap_or(DEFAULT_LIMIT).max(1),
                };
                let lisp = is_lisp_path(&r.path);
                let (mode, content, meta) = if lisp && a.collapsed.unwrap_or(true) {
                    let v = collapsed_view(&text, window, name_re.as_ref(), content_re.as_ref());
                    ("lisp-collapsed", v.0, v.1)
                } else if !lisp && content_re.is_some() {
                    let v = filtered_view(&text, content_re.as_ref().unwrap(), window);
                    ("text-filtered", v.0, v.1)
                } else {
                    let v = raw_view(&text, window);
                    ("raw", v.0, v.1)
                };
                let mut shown = format!("{} [{mode}]\n{content}", r.display);
                if let Some(next) = meta.next_offset {
                    let _ = writeln!(
                        shown,
                        "[window ends at line {next} of {}; next: offset={next}]",
                        meta.total_lines
                    );
                }
                if let Some(p) = &meta.syntax_problem {
                    let _ = writeln!(shown, "[warning: {p}]");
                }
                let out = ReadOutput {
                    path: r.display,
                    mode,
                    content,
                    meta,
                };
                ToolOutput::structured(shown, to_json(&out))
            })
        },
    )
    .with_output_schema::<ReadOutput>()
}

fn compile(pattern: &str, case_insensitive: bool) -> Result<Regex, regex::Error> {
    RegexBuilder::new(pattern)
        .case_insensitive(case_insensitive)
        .size_limit(1 << 22)
        .build()
}

/// A window of 0-based lines.
#[derive(Clone, Copy, Debug)]
pub struct Window {
    pub offset: usize,
    pub limit: usize,
}

/// Appends lines `first..=last` (1-based) of `text` with numbers; `cut`
/// ends the last line early (at a byte offset), adding `tail`.
struct Printer<'a> {
    text: &'a str,
    lines: &'a LineIndex,
    width: usize,
    /// Lines longer than this (bytes) are cut, with a note.
    max_line: usize,
    out: String,
    /// Lines printed so far.
    count: usize,
}

impl Printer<'_> {
    /// Prints line `n`: `body` (cut past `max_line`, with a note), then
    /// `tail`.
    fn line(&mut self, n: usize, body: &str, tail: &str) {
        self.count += 1;
        let _ = write!(self.out, "{n:>w$}: ", w = self.width);
        if body.len() > self.max_line {
            let mut cut = self.max_line;
            while !body.is_char_boundary(cut) {
                cut -= 1;
            }
            let _ = write!(
                self.out,
                "{} [... {} more characters]",
                &body[..cut],
                body.len() - cut
            );
        } else {
            self.out.push_str(body);
        }
        self.out.push_str(tail);
        self.out.push('\n');
    }

    /// Prints the source lines covering `range`, the last up to
    /// `range.end`, followed by `tail`. The first is printed from its
    /// line's start when only indentation comes before `range` on it, and
    /// from `range.start` when other text does (a form after another on one
    /// line is not printed with the ones before it again).
    fn span(&mut self, range: Range<usize>, tail: &str) {
        let (first, _) = self.lines.line_col(range.start);
        let (last, _) = self
            .lines
            .line_col(range.end.saturating_sub(1).max(range.start));
        for n in first..=last {
            let mut s = self.lines.line_start(n).unwrap_or(0);
            if n == first && !self.text[s..range.start].trim_end().is_empty() {
                s = range.start;
            }
            let mut e = self.lines.line_end(n).unwrap_or(self.text.len());
            if n == last {
                e = e.min(range.end);
            }
            let body = self.text[s..e.max(s)].trim_end();
            self.line(n, body, if n == last { tail } else { "" });
        }
    }
}

/// The collapsed view of Lisp `text`: the shown text and its meta.
pub fn collapsed_view(
    text: &str,
    window: Window,
    name_re: Option<&Regex>,
    content_re: Option<&Regex>,
) -> (String, ReadMeta) {
    let lines = LineIndex::new(text);
    let s = scan::scan_recovering(text);
    let total_lines = human_line_count(text, &lines);
    // `offset` is the first source line; `limit` caps the lines shown.
    let (wstart, _) = line_window(text, &lines, window.offset, 1);
    let mut p = Printer {
        text,
        lines: &lines,
        width: total_lines.to_string().len(),
        max_line: MAX_SHOWN_LINE,
        out: String::new(),
        count: 0,
    };
    let mut stopped_at: Option<usize> = None;
    // When the limit is reached inside a line (many forms on one line):
    // that line (1-based) and how many of its items were left out.
    let mut cut_line: Option<(usize, usize)> = None;
    let mut total_forms = 0;
    let mut shown = 0;
    let mut expanded = 0;
    let mut i = 0;
    let items = &s.items;
    while i < items.len() {
        let item = &items[i];
        if item.kind == ItemKind::Form {
            total_forms += 1;
        }
        if stopped_at.is_none() && item.span.start >= wstart && p.count >= window.limit {
            // The next window starts at this item's line; never at the
            // window's own first line (that would page in place forever) nor
            // inside a line whose first item was shown (it would show again).
            let line0 = lines.line_col(item.span.start).0 - 1;
            let shares_line = i > 0
                && lines.line_col(items[i - 1].span.start).0 == line0 + 1
                && items[i - 1].span.start >= wstart;
            if line0 > window.offset && !shares_line {
                stopped_at = Some(line0);
            } else if cut_line.is_none() {
                // Inside a line begun here: a few more of its items are
                // shown (paging could not reach them); many more (minified
                // code) are left out and counted, and the next window starts
                // at the next line.
                let rest = items[i..]
                    .iter()
                    .take_while(|it| lines.line_col(it.span.start).0 == line0 + 1)
                    .count();
                if rest > MAX_LINE_OVERRUN {
                    cut_line = Some((line0 + 1, 0));
                }
            }
        }
        // Until the first item of a later line stops the window above,
        // each item is on the cut line.
        if let (None, Some((_, left))) = (stopped_at, cut_line.as_mut()) {
            *left += 1;
        }
        if item.span.start < wstart || stopped_at.is_some() || cut_line.is_some() {
            i += 1;
            continue;
        }
        match item.kind {
            ItemKind::LineComment => {
                // A comment after a form on the same line belongs to it.
                if i > 0
                    && lines.line_col(items[i - 1].span.end).0 == lines.line_col(item.span.start).0
                {
                    i += 1;
                    continue;
                }
                // A run of comment lines shows as its first line.
                let first = item.span.clone();
                let mut j = i + 1;
                let (mut last_line, _) = lines.line_col(first.start);
                while j < items.len()
                    && items[j].kind == ItemKind::LineComment
                    && lines.line_col(items[j].span.start).0 == last_line + 1
                {
                    last_line += 1;
                    j += 1;
                }
                let more = j - i - 1;
                let tail = if more > 0 {
                    format!(
                        "  [+{}]",
                        crate::tools::output::counted(more, "comment line", "comment lines")
                    )
                } else {
                    String::new()
                };
                p.span(first, &tail);
                i = j;
                continue;
            }
            ItemKind::BlockComment => {
                let (l1, _) = lines.line_col(item.span.start);
                let (l2, _) = lines.line_col(item.span.end.saturating_sub(1));
                if l1 == l2 {
                    p.span(item.span.clone(), "");
                } else {
                    let e = lines.line_end(l1).unwrap_or(item.span.end);
                    p.span(
                        item.span.start..e,
                        &format!(" ... |#  [{} lines]", l2 - l1 + 1),
                    );
                }
            }
            ItemKind::Form => {
                shown += 1;
                if show_form(&mut p, text, item.span.clone(), name_re, content_re) {
                    expanded += 1;
                }
            }
        }
        i += 1;
    }
    if let Some((l, left)) = cut_line.filter(|&(_, left)| left > 0) {
        let _ = writeln!(
            p.out,
            "[{left} more {} on line {l} not shown; a larger `limit` shows them]",
            if left == 1 { "item" } else { "items" }
        );
    }
    let truncated = wstart > 0 || stopped_at.is_some() || cut_line.is_some_and(|c| c.1 > 0);
    let next_offset = stopped_at;
    let meta = ReadMeta {
        total_lines,
        total_forms: Some(total_forms),
        shown_forms: Some(shown),
        expanded_forms: Some(expanded),
        truncated,
        next_offset,
        syntax_problem: s
            .problem
            .as_ref()
            .map(|pr| describe_problem(pr, text, &lines)),
    };
    (p.out, meta)
}

fn describe_problem(p: &scan::Problem, text: &str, lines: &LineIndex) -> String {
    let (l, c) = lines.line_col(p.offset());
    match p {
        scan::Problem::ExtraClose { .. } => {
            format!("extra `)` at line {l}, column {c}; forms after it may be misread")
        }
        scan::Problem::Unclosed {
            what: scan::Opener::List | scan::Opener::Vector,
            outer,
            ..
        } => format!(
            "the form `{}` at line {l} is not closed; the forms after it are shown from the \
             next line that opens a form at column 1",
            super::check::first_words(&text[*outer..])
        ),
        scan::Problem::Unclosed { what, .. } => format!(
            "unclosed {} from line {l}, column {c} to the end of the file",
            what.describe()
        ),
    }
}

/// Prints one top-level form; returns true when it was shown whole.
fn show_form(
    p: &mut Printer<'_>,
    text: &str,
    span: Range<usize>,
    name_re: Option<&Regex>,
    content_re: Option<&Regex>,
) -> bool {
    let form_text = &text[span.clone()];
    let ds = defs::definitions(text, std::iter::once(&span));
    let head = defs::head_of(text, span.clone()).map(|h| defs::one_line(&text[h]).to_lowercase());
    let head_key = head
        .as_deref()
        .map(|h| h.rsplit(':').next().unwrap_or(h).to_string());
    let always_whole = matches!(
        head_key.as_deref(),
        Some("in-package" | "defpackage" | "define-package")
    );
    let matched = content_re.is_some_and(|re| re.is_match(form_text))
        || name_re.is_some_and(|re| ds.iter().any(|d| re.is_match(&d.name)));
    if always_whole || matched {
        // Shown whole means every character of it.
        let cap = std::mem::replace(&mut p.max_line, usize::MAX);
        p.span(span, "");
        p.max_line = cap;
        return matched;
    }
    let (l1, _) = p.lines.line_col(span.start);
    let (l2, _) = p.lines.line_col(span.end.saturating_sub(1));
    if l1 == l2 {
        // A one-line form costs no more than its summary.
        p.span(span, "");
        return false;
    }
    match ds.as_slice() {
        [] => {
            // Not a definition: its first line.
            let e = p.lines.line_end(l1).unwrap_or(span.end).min(span.end);
            p.span(span.start..e, " ...");
        }
        [d] if d.span == span || d.depth == 0 => show_definition(p, text, d),
        many => {
            // A container (eval-when, progn, ...): its first line, then
            // each definition inside.
            let first_def_line = p.lines.line_col(many[0].unit_span.start).0;
            if first_def_line > l1 {
                let e = p.lines.line_end(l1).unwrap_or(span.end);
                p.span(span.start..e, "");
            }
            for d in many {
                show_definition(p, text, d);
            }
        }
    }
    false
}

fn show_definition(p: &mut Printer<'_>, text: &str, d: &Definition) {
    let rest = text
        .get(d.sig_end..d.span.end.saturating_sub(1))
        .unwrap_or("");
    let one_line = p.lines.line_col(d.unit_span.start).0 == p.lines.line_col(d.span.end).0;
    if one_line || (rest.trim().is_empty() && d.span.len() <= 400) {
        p.span(d.unit_span.start..d.span.end, "");
        return;
    }
    // A signature is a few lines; a longer one is cut.
    let first = p.lines.line_col(d.unit_span.start).0;
    let last = p.lines.line_col(d.sig_end).0;
    if last - first >= MAX_SIGNATURE_LINES {
        let cut = p
            .lines
            .line_end(first + MAX_SIGNATURE_LINES - 1)
            .unwrap_or(d.sig_end);
        p.span(d.unit_span.start..cut, " ...");
    } else {
        p.span(d.unit_span.start..d.sig_end, " ...)");
    }
}

/// Lines of the window as they are, numbered.
pub fn raw_view(text: &str, window: Window) -> (String, ReadMeta) {
    let lines = LineIndex::new(text);
    let total_lines = human_line_count(text, &lines);
    let (start, end) = line_window(text, &lines, window.offset, window.limit);
    let mut p = Printer {
        text,
        lines: &lines,
        width: total_lines.to_string().len(),
        // The raw view shows lines whole.
        max_line: usize::MAX,
        out: String::new(),
        count: 0,
    };
    if end > start {
        p.span(start..end, "");
    }
    let next_offset =
        (end < text.len()).then(|| window.offset.saturating_add(window.limit).min(total_lines));
    (
        p.out,
        ReadMeta {
            total_lines,
            truncated: start > 0 || end < text.len(),
            next_offset,
            ..ReadMeta::default()
        },
    )
}

/// Lines matching `re`, each with 5 lines of context, gaps marked.
pub fn filtered_view(text: &str, re: &Regex, window: Window) -> (String, ReadMeta) {
    let all: Vec<&str> = text.lines().collect();
    let first = window.offset.min(all.len());
    let last = first.saturating_add(window.limit).min(all.len());
    let mut keep = vec![false; all.len()];
    for (i, l) in all.iter().enumerate().take(last).skip(first) {
        if re.is_match(l) {
            for k in keep
                .iter_mut()
                .take((i + 6).min(last))
                .skip(i.saturating_sub(5).max(first))
            {
                *k = true;
            }
        }
    }
    let width = all.len().to_string().len();
    let mut out = String::new();
    let mut prev: Option<usize> = None;
    for (i, k) in keep.iter().enumerate() {
        if *k {
            if prev.is_some_and(|p| p + 1 != i) {
                out.push_str("--\n");
            }
            let _ = writeln!(out, "{:>width$}: {}", i + 1, all[i]);
            prev = Some(i);
        }
    }
    if out.is_empty() {
        out.push_str("(no line matches)\n");
    }
    (
        out,
        ReadMeta {
            total_lines: all.len(),
            truncated: first > 0 || last < all.len(),
            next_offset: (last < all.len()).then_some(last),
            ..ReadMeta::default()
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn collapsed_shows_signatures_and_expands_matches() {
        let src = ";;;; header\n;;;; more\n(in-package :foo)\n\n(defun foo (a b)\n  \"Doc.\"\n  (+ a b))\n\n(defun bar ()\n  (foo 1 2))\n(eval-when (:compile-toplevel)\n  (defmacro m (x)\n    x))\n";
        let w = Window {
            offset: 0,
            limit: 2000,
        };
        let (out, meta) = collapsed_view(src, w, None, None);
        assert_eq!(
            out,
            " 1: ;;;; header  [+1 comment line]\n 3: (in-package :foo)\n 5: (defun foo (a b) ...)\n 9: (defun bar () ...)\n11: (eval-when (:compile-toplevel)\n12:   (defmacro m (x) ...)\n"
        );
        assert_eq!(meta.total_forms, Some(4));
        let re = Regex::new("(?i)^BAR$").unwrap();
        let (out, meta) = collapsed_view(src, w, Some(&re), None);
        assert!(
            out.contains(" 9: (defun bar ()\n10:   (foo 1 2))\n"),
            "{out}"
        );
        assert_eq!(meta.expanded_forms, Some(1));
    }
}
