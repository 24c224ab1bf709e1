//! `lisp-edit-form`: structural edits of one top-level definition.
//!
//! The edit is a splice: bytes outside the edited form (and the blank line
//! or separator the operation adds or removes) are kept byte for byte. The
//! new content must read as complete forms, and the whole file must read
//! afterwards with no more errors than before; otherwise nothing is
//! written. Writes are atomic.

use std::fmt::Write;
use std::ops::Range;

use lisp_syntax::cst::{self, LineIndex, NodeKind};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::defs::{self, Definition};
use super::scan;
use crate::sync::MutexExt;
use crate::tools::fs::{read_text_capped, resolve_for, to_json};
use crate::tools::fs_paths::{atomic_write, Access};
use crate::tools::parens;
use crate::tools::{
    off_workers, tool, Annotations, ToolContext, ToolDef, ToolError, ToolGroup, ToolOutput,
};

// What to do with the form.
#[derive(Deserialize, JsonSchema, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Operation {
    /// Replace the form with `content` (its `#+`/`#-` guard too when
    /// `content` starts with one).
    Replace,
    /// Insert `content` before the form and the comment lines directly
    /// above it (a blank line between).
    InsertBefore,
    /// Insert `content` after the form (a blank line between).
    InsertAfter,
    /// Remove the form (and the line it stood on, with the comment lines
    /// directly above it and a trailing comment).
    Delete,
}

impl Operation {
    fn name(self) -> &'static str {
        match self {
            Operation::Replace => "replace",
            Operation::InsertBefore => "insert_before",
            Operation::InsertAfter => "insert_after",
            Operation::Delete => "delete",
        }
    }
}

#[derive(Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct EditArgs {
    path: String,
    /// `defun`, `defmethod`, ...
    form_type: String,
    /// Methods: `print-object :after (point t)`; `(setf foo)`.
    form_name: String,
    operation: Operation,
    /// New form(s).
    content: Option<String>,
    /// Diff only, nothing written.
    dry_run: Option<bool>,
    /// To pick among same-named forms.
    line: Option<usize>,
    // Default true: place missing or extra `)` in `content` by its
    // indentation (no schema description: the README has it).
    repair_parens: Option<bool>,
}

#[derive(Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
struct EditOutput {
    path: String,
    operation: &'static str,
    form_type: String,
    form_name: String,
    /// Line where the target form started (before the edit).
    line: usize,
    /// True when the file was written (false for a dry run).
    written: bool,
    /// Unified diff of the change.
    diff: String,
    /// Size of the file after the edit, in bytes.
    bytes: usize,
    /// Closers `content` was missing or had too many, placed by its
    /// indentation (lines of `content`): `added ")" at line 3, column 10`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    repairs: Vec<String>,
}

/// The `lisp-edit-form` tool.
pub fn tool_def() -> ToolDef {
    tool(
        "lisp-edit-form",
        ToolGroup::Source,
        "Edit a Lisp definition",
        "Replace, delete, or insert before/after one top-level definition (`formType`, \
         `formName`); the rest stays byte-identical. Writes nothing unreadable or \
         changing another form. Returns a diff.",
        Annotations::DESTRUCTIVE,
        |a: EditArgs, ctx: ToolContext| off_workers(move || edit(a, &ctx)),
    )
    .with_output_schema::<EditOutput>()
}

/// Edits are read-modify-write: concurrent calls (clients may run tools in
/// parallel) are serialized so no edit is lost. Each takes milliseconds.
static EDIT_LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn edit(a: EditArgs, ctx: &ToolContext) -> ToolOutput {
    let _serialized = EDIT_LOCK.guard();
    let r = match resolve_for(&ctx.session, &a.path, Access::Write) {
        Ok(r) => r,
        Err(e) => return ToolOutput::error(e.0),
    };
    if !r.exists || r.path.is_dir() {
        return ToolOutput::error(format!(
            "File not found: '{}' (lisp-edit-form edits an existing file; create one with \
             fs-write-file).",
            a.path
        ));
    }
    let text = match read_text_capped(&r) {
        Ok(t) => t,
        Err(e) => return ToolOutput::error(e),
    };
    let (content, repairs, repair_diff) = match repaired_content(&a) {
        Ok(c) => c,
        Err(e) => return ToolOutput::error(e),
    };
    let content = content.as_str();
    if a.operation != Operation::Delete {
        if content.trim().is_empty() {
            return ToolOutput::error(format!(
                "`content` is required for {} and must hold at least one form.",
                a.operation.name()
            ));
        }
        if let Err(e) = check_content(content) {
            return ToolOutput::error(e);
        }
    }
    let target = match find_target(&text, &a.form_type, &a.form_name, a.line) {
        Ok(d) => d,
        Err(e) => return ToolOutput::error(format!("{}: {e}", r.display)),
    };
    let lines = LineIndex::new(&text);
    let line = lines.line_col(target.span.start).0;
    // A broken target can be replaced or deleted (it ends where the next
    // form at column 0 starts); inserting next to it would leave it broken.
    let broken = check_closed(&text, &target).err();
    if let Some(e) = &broken {
        if matches!(
            a.operation,
            Operation::InsertBefore | Operation::InsertAfter
        ) || target.item_span.end == text.len()
        {
            return ToolOutput::error(format!("{}: not edited: {e}", r.display));
        }
    }
    if let Err(e) = check_guard(&text, &target, a.operation, content) {
        return ToolOutput::error(format!("{}: not edited: {e}", r.display));
    }
    let spliced = splice(&text, &target, a.operation, content);
    let new_text = spliced.text;
    if let Err(e) = check_result(&text, &new_text) {
        return ToolOutput::error(format!(
            "Not written: after this edit {} would not read: {e}",
            r.display
        ));
    }
    if let Err(e) = check_outside(&text, &new_text, spliced.range.clone(), spliced.inserted) {
        return ToolOutput::error(format!("Not written: {e} in {}.", r.display));
    }
    let diff = region_diff(
        &r.display,
        &text,
        &new_text,
        &spliced.range,
        spliced.inserted,
    );
    let dry = a.dry_run.unwrap_or(false);
    if !dry {
        if let Err(e) = atomic_write(&r, new_text.as_bytes()) {
            return ToolOutput::error(e);
        }
    }
    let what = format!("{} {}", target.kind, target.full_name());
    let mut msg = if dry {
        format!(
            "Dry run: would {} `{what}` (line {line}) in {}; nothing written.\n",
            a.operation.name(),
            r.display
        )
    } else {
        format!(
            "Applied {} to `{what}` (line {line}) in {}{}.\n",
            a.operation.name(),
            r.display,
            if broken.is_some() {
                ", which was not closed (it ran to the next form at column 1)"
            } else {
                ""
            }
        )
    };
    if !repairs.is_empty() {
        let _ = write!(
            msg,
            "Repaired the parentheses of `content` by its indentation ({}; lines of \
             `content`):\n{repair_diff}",
            parens::changes_phrase(&repairs)
        );
    }
    msg.push_str(&diff);
    let out = EditOutput {
        path: r.display,
        operation: a.operation.name(),
        form_type: a.form_type,
        form_name: a.form_name,
        line,
        written: !dry,
        diff,
        bytes: new_text.len(),
        repairs,
    };
    ToolOutput::structured(msg, to_json(&out))
}

/// Most lines of diff an answer holds; the rest is counted (the edit is
/// applied in full).
const MAX_DIFF_LINES: usize = 200;
/// Most bytes of diff an answer holds.
const MAX_DIFF_BYTES: usize = 16 << 10;
/// Most bytes of one line of diff shown (`…` marks the cut).
const MAX_DIFF_LINE_BYTES: usize = 1 << 10;

/// The unified diff of an edit that replaced `range` of `old` by
/// `inserted` bytes (everything else is the same in `new`): only the lines
/// around the edit are compared, and what the answer shows is capped at
/// [`MAX_DIFF_LINES`] lines and [`MAX_DIFF_BYTES`] bytes, then counted. So
/// the cost and the answer grow with the edit, not with the file.
fn region_diff(
    display: &str,
    old: &str,
    new: &str,
    range: &Range<usize>,
    inserted: usize,
) -> String {
    const CONTEXT: usize = 3;
    // From three lines before the edit to three after, in both texts.
    let mut from = line_start_of(old, range.start);
    for _ in 0..CONTEXT {
        if from == 0 {
            break;
        }
        from = line_start_of(old, from - 1);
    }
    let mut to = range.end;
    for _ in 0..=CONTEXT {
        if to >= old.len() {
            break;
        }
        to = (line_end_of(old, to) + 1).min(old.len());
    }
    let new_to = to - range.end + range.start + inserted;
    let (a, b) = (&old[from..to], &new[from..new_to]);
    let first_line = old[..from].bytes().filter(|&c| c == b'\n').count();
    let diff = similar::TextDiff::configure()
        .deadline(std::time::Instant::now() + std::time::Duration::from_millis(500))
        .diff_lines(a, b);
    // The header comes with the first hunk: no change, no diff.
    let mut out = String::new();
    let mut lines = 0usize;
    let mut left = 0usize;
    let hunk_range = |r: Range<usize>| {
        let (start, len) = (first_line + r.start + 1, r.len());
        match len {
            1 => start.to_string(),
            0 => format!("{},0", start - 1),
            _ => format!("{start},{len}"),
        }
    };
    for group in diff.grouped_ops(CONTEXT) {
        let (Some(first), Some(last)) = (group.first(), group.last()) else {
            continue;
        };
        if out.is_empty() {
            let _ = write!(out, "--- a/{display}\n+++ b/{display}\n");
        }
        let old_r = first.old_range().start..last.old_range().end;
        let new_r = first.new_range().start..last.new_range().end;
        let mut hunk = vec![format!(
            "@@ -{} +{} @@\n",
            hunk_range(old_r),
            hunk_range(new_r)
        )];
        for op in &group {
            for change in diff.iter_changes(op) {
                let sign = match change.tag() {
                    similar::ChangeTag::Delete => '-',
                    similar::ChangeTag::Insert => '+',
                    similar::ChangeTag::Equal => ' ',
                };
                let value = change.value();
                let mut line = if value.len() > MAX_DIFF_LINE_BYTES {
                    let mut cut = MAX_DIFF_LINE_BYTES;
                    while !value.is_char_boundary(cut) {
                        cut -= 1;
                    }
                    format!("{sign}{}…\n", &value[..cut])
                } else {
                    format!("{sign}{value}")
                };
                if change.missing_newline() {
                    line.push_str("\n\\ No newline at end of file\n");
                }
                hunk.push(line);
            }
        }
        for line in hunk {
            if lines >= MAX_DIFF_LINES || out.len() + line.len() > MAX_DIFF_BYTES {
                left += 1;
                continue;
            }
            out.push_str(&line);
            lines += 1;
        }
    }
    if left > 0 {
        let _ = writeln!(
            out,
            "… ({left} more diff lines not shown: the edit was applied in full; read the form \
             with lisp-read-file to see it)"
        );
    }
    out
}

/// `content` with its parentheses repaired by its indentation (not for a
/// delete, nor with `repairParens: false`): the text, the changes, and
/// their before/after lines.
fn repaired_content(a: &EditArgs) -> Result<(String, Vec<String>, String), ToolError> {
    let content = a.content.as_deref().unwrap_or("").to_string();
    if a.operation == Operation::Delete || a.repair_parens == Some(false) {
        return Ok((content, Vec::new(), String::new()));
    }
    match parens::repair(&content) {
        Ok(None) => Ok((content, Vec::new(), String::new())),
        Ok(Some(r)) => Ok((r.text, r.changes, r.diff)),
        Err(e) => Err(ToolError::Edit(format!(
            "Not written: in `content`, {e} (Lines are lines of `content`; pass \
             `repairParens: false` to get the reader's own error instead.)"
        ))),
    }
}

/// `content` must read cleanly and hold at least one form.
fn check_content(content: &str) -> Result<(), ToolError> {
    let parse = cst::parse(content);
    if let Some(e) = parse.errors.first() {
        let lines = LineIndex::new(content);
        return Err(ToolError::Edit(format!(
            "`content` does not read as complete forms: {} (positions are within `content`). \
             Nothing was changed.",
            e.message(&lines)
        )));
    }
    if parse.top_level_forms().next().is_none() {
        return Err(ToolError::Edit(
            "`content` holds only comments or whitespace; give at least one form.".into(),
        ));
    }
    Ok(())
}

/// A guarded target (`#+sbcl (defun ...)`) replaced by several forms
/// without a guard of their own: the guard would cover only the first, so
/// the others would be read on every implementation.
fn check_guard(text: &str, d: &Definition, op: Operation, content: &str) -> Result<(), ToolError> {
    let content = content.trim_start();
    if op != Operation::Replace
        || d.unit_span.start == d.span.start
        || content.starts_with("#+")
        || content.starts_with("#-")
        || cst::parse(content).top_level_forms().count() < 2
    {
        return Ok(());
    }
    let guard = d.guard(text).unwrap_or_default();
    Err(ToolError::Edit(format!(
        "`{} {}` is guarded by `{guard}`, and `content` holds several forms: the guard would          cover only the first. Write the guard before each form in `content` (`{guard} (...)`),          or replace with one form.",
        d.kind,
        d.full_name()
    )))
}

/// The edited file must read with no more errors than the original.
fn check_result(old: &str, new: &str) -> Result<(), ToolError> {
    let before = cst::parse(old).errors.len();
    let parse = cst::parse(new);
    if parse.errors.len() > before {
        let lines = LineIndex::new(new);
        let e = &parse.errors[0];
        return Err(ToolError::Edit(format!(
            "{} (in the edited file)",
            e.message(&lines)
        )));
    }
    Ok(())
}

/// The top-level item holding the target must close: an unclosed form
/// runs to the end of the file, so editing "it" would rewrite (or insert
/// into) everything after it.
fn check_closed(text: &str, d: &Definition) -> Result<(), ToolError> {
    let item = d.item_span.clone();
    let problem = match scan::Scanner::new(text).skip_form(item.start) {
        Ok(end) if end == item.end => return Ok(()),
        Ok(_) => None,
        Err(p) => Some(p),
    };
    let lines = LineIndex::new(text);
    let line = lines.line_col(d.span.start).0;
    let item_line = lines.line_col(item.start).0;
    let mut msg = format!(
        "the form `{} {}` (line {line}) is not closed: ",
        d.kind,
        d.full_name()
    );
    if item_line != line {
        let _ = write!(
            msg,
            "the top-level form around it, opened at line {item_line}, "
        );
    } else {
        msg.push_str("it ");
    }
    msg.push_str("never ends, so it runs to the end of the file");
    if let Some(scan::Problem::Unclosed {
        suspect: Some(s), ..
    }) = problem
    {
        let (sl, _) = lines.line_col(s);
        let _ = write!(
            msg,
            "; `{}` starts at column 1 of line {sl} inside it, so a `)` is probably missing \
             before line {sl}",
            super::check::first_words(&text[s..])
        );
    }
    msg.push_str(
        ". Nothing was changed: fix the parentheses first (lisp-check-parens shows where), \
         then edit.",
    );
    Err(ToolError::Edit(msg))
}

/// Every top-level form and comment outside the edited range must be
/// untouched by the edit: the same items, at the same places, before the
/// range and (shifted by the size change) after it. This catches edits
/// that read fine but re-nest the rest of the file (a comment swallowing
/// the next form, a form absorbing what follows).
fn check_outside(
    old: &str,
    new: &str,
    range: Range<usize>,
    inserted: usize,
) -> Result<(), ToolError> {
    let a = scan::scan_recovering(old);
    let b = scan::scan_recovering(new);
    let before = |s: &scan::Scan| -> Vec<scan::Item> {
        s.items
            .iter()
            .filter(|i| i.span.end <= range.start)
            .cloned()
            .collect()
    };
    let new_end = range.start + inserted;
    let after_old: Vec<(scan::ItemKind, Range<usize>)> = a
        .items
        .iter()
        .filter(|i| i.span.start >= range.end)
        .map(|i| (i.kind, i.span.start - range.end..i.span.end - range.end))
        .collect();
    let after_new: Vec<(scan::ItemKind, Range<usize>)> = b
        .items
        .iter()
        .filter(|i| i.span.start >= new_end)
        .map(|i| (i.kind, i.span.start - new_end..i.span.end - new_end))
        .collect();
    let lines = LineIndex::new(old);
    let (ba, bb) = (before(&a), before(&b));
    if ba != bb {
        let i = ba.iter().zip(&bb).take_while(|(x, y)| x == y).count();
        let at = ba.get(i).map_or(range.start, |it| it.span.start);
        return Err(ToolError::Edit(format!(
            "this edit would change the code before the edited form (the top-level item at \
             line {} would read differently)",
            lines.line_col(at).0
        )));
    }
    if after_old != after_new {
        let i = after_old
            .iter()
            .zip(&after_new)
            .take_while(|(x, y)| x == y)
            .count();
        let at = after_old
            .get(i)
            .map_or(range.end, |(_, r)| r.start + range.end);
        return Err(ToolError::Edit(format!(
            "this edit would change the code after the edited form (the top-level item at \
             line {} would no longer read as it does; a `;` comment or an unbalanced form in \
             `content` can do that)",
            lines.line_col(at).0
        )));
    }
    Ok(())
}

/// What `formName` asks for.
struct Wanted {
    name_key: String,
    qualifiers: Option<Vec<String>>,
    specializers: Option<Vec<String>>,
}

fn parse_form_name(form_name: &str) -> Result<Wanted, ToolError> {
    let parse = cst::parse(form_name);
    if !parse.errors.is_empty() {
        return Err(ToolError::Argument(format!(
            "`formName` '{form_name}' does not read (unbalanced parentheses?)."
        )));
    }
    let mut forms = parse.top_level_forms();
    let Some(name) = forms.next() else {
        return Err(ToolError::Argument("`formName` is empty.".into()));
    };
    let mut qualifiers = Vec::new();
    let mut specializers = None;
    for f in forms {
        if f.kind == NodeKind::List {
            specializers = Some(f.elements().map(|e| defs::key_of(e, form_name)).collect());
        } else {
            qualifiers.push(f.text(form_name).to_lowercase());
        }
    }
    let explicit = specializers.is_some() || !qualifiers.is_empty();
    Ok(Wanted {
        name_key: defs::key_of(name, form_name),
        qualifiers: explicit.then_some(qualifiers),
        specializers,
    })
}

fn matches(d: &Definition, w: &Wanted) -> bool {
    if d.name_key != w.name_key {
        return false;
    }
    if let Some(q) = &w.qualifiers {
        let dq: Vec<String> = d.qualifiers.iter().map(|q| q.to_lowercase()).collect();
        if &dq != q {
            return false;
        }
    }
    if let Some(s) = &w.specializers {
        let ds: Vec<String> = d
            .specializers
            .iter()
            .flatten()
            .map(|s| defs::key_of_text(s))
            .collect();
        if &ds != s {
            return false;
        }
    }
    true
}

/// Finds the one definition `form_type`/`form_name` (at `line`, if given)
/// names; the error lists candidates.
fn find_target(
    text: &str,
    form_type: &str,
    form_name: &str,
    line: Option<usize>,
) -> Result<Definition, ToolError> {
    let wanted = parse_form_name(form_name)?;
    let type_key = {
        let t = form_type.trim().to_lowercase();
        t.rsplit(':').next().unwrap_or(&t).to_string()
    };
    // As an editor reads it: a broken form ends where the next form at
    // column 0 starts, so the forms after it (and it) can still be edited.
    let s = scan::scan_recovering(text);
    let all = defs::definitions(text, s.forms());
    let lines = LineIndex::new(text);
    let line_of = |d: &Definition| lines.line_col(d.span.start).0;
    let describe = |d: &Definition| format!("{} {} (line {})", d.kind, d.full_name(), line_of(d));
    let same_type: Vec<&Definition> = all.iter().filter(|d| d.kind_key == type_key).collect();
    let mut found: Vec<&Definition> = same_type
        .iter()
        .copied()
        .filter(|d| matches(d, &wanted))
        .collect();
    if let Some(l) = line {
        found.retain(|d| line_of(d) == l || lines.line_col(d.unit_span.start).0 == l);
    }
    match found.len() {
        1 => Ok(found[0].clone()),
        0 => {
            let same_name: Vec<String> = all
                .iter()
                .filter(|d| d.name_key == wanted.name_key)
                .map(describe)
                .collect();
            let mut msg = format!("no {type_key} named '{form_name}'");
            if let Some(l) = line {
                let _ = write!(msg, " starting at line {l}");
            }
            msg.push('.');
            if !same_name.is_empty() {
                let _ = write!(msg, " Forms with that name: {}.", same_name.join("; "));
            } else if !same_type.is_empty() {
                let names: Vec<String> = same_type.iter().take(40).map(|d| describe(d)).collect();
                let _ = write!(
                    msg,
                    " The {type_key} forms in this file: {}{}.",
                    names.join("; "),
                    if same_type.len() > 40 { "; ..." } else { "" }
                );
            } else {
                let _ = write!(
                    msg,
                    " The file has no {type_key} forms (use clgrep-signatures to list its definitions)."
                );
            }
            if let Some(problem) = &s.problem {
                let (l, c) = lines.line_col(problem.offset());
                let _ = write!(
                    msg,
                    " Note: the file does not read cleanly (a delimiter problem at line {l}, \
                     column {c}), so forms after it may be hidden; see lisp-check-parens."
                );
            }
            Err(ToolError::Edit(msg))
        }
        _ => {
            // The first few are what a choice needs; a file of thousands
            // of alike forms must not answer with all of them.
            let c: Vec<String> = found.iter().take(40).map(|d| describe(d)).collect();
            Err(ToolError::Edit(format!(
                "'{form_name}' is ambiguous: {} forms match: {}{}. Add qualifiers/specializers to \
                 `formName` (e.g. `name :around (class t)`) or pass `line`.",
                found.len(),
                c.join("; "),
                if found.len() > 40 { "; ..." } else { "" }
            )))
        }
    }
}

/// The result of [`splice`]: the new text, and the byte range of the old
/// text that was replaced by `inserted` bytes.
struct Spliced {
    text: String,
    range: Range<usize>,
    inserted: usize,
}

/// Whether `content` (trimmed) ends inside a `;` comment, so that code
/// following it on the same line would be commented out.
fn ends_in_line_comment(content: &str) -> bool {
    scan::scan(content)
        .items
        .last()
        .is_some_and(|i| i.kind == scan::ItemKind::LineComment)
}

/// Start of the line holding `at`.
fn line_start_of(text: &str, at: usize) -> usize {
    text[..at].rfind('\n').map_or(0, |i| i + 1)
}

/// End of the line holding `at` (the position of its `\n`, or the end).
fn line_end_of(text: &str, at: usize) -> usize {
    text[at..].find('\n').map_or(text.len(), |i| at + i)
}

/// The run of whole-line `;` comments directly above the line starting at
/// `line_start` (no blank line in between, nothing before `lower`): where
/// its first comment starts. Such comments describe the form below them,
/// so they go with it on delete and stay with it on insert_before.
/// `;;;;` lines are file or section headings by convention and end the run.
fn leading_comments(text: &str, line_start: usize, lower: usize) -> Option<usize> {
    let mut first = None;
    let mut ls = line_start;
    while ls > lower && ls > 0 {
        let prev = line_start_of(text, ls - 1);
        if prev < lower {
            break;
        }
        let line = &text[prev..ls - 1];
        let body = line.trim_start();
        if !body.starts_with(';') || body.starts_with(";;;;") {
            break;
        }
        first = Some(prev + (line.len() - body.len()));
        ls = prev;
    }
    first
}

/// The line ending new text gets next to the unit `unit`: the one most of
/// the lines around the edit end with (the line before the unit, the
/// unit's last line and the line after it; a tie goes to the unit's own
/// line). A file's convention is what the lines around the edit use, so one
/// stray CRLF line in an LF file, even the edited one, changes nothing.
fn newline_at(text: &str, unit: Range<usize>) -> &'static str {
    // The ending of the line whose `\n` is at `nl`: true for CRLF.
    let crlf = |nl: usize| text[..nl].ends_with('\r');
    let own = line_end_of(text, unit.end);
    let mut endings = Vec::with_capacity(3);
    if own < text.len() {
        endings.push(crlf(own));
    }
    let start = line_start_of(text, unit.start);
    if start > 0 {
        endings.push(crlf(start - 1));
    }
    if own < text.len() {
        let next = line_end_of(text, own + 1);
        if next < text.len() {
            endings.push(crlf(next));
        }
    }
    let crlfs = endings.iter().filter(|&&c| c).count();
    let lfs = endings.len() - crlfs;
    let is_crlf = match crlfs.cmp(&lfs) {
        std::cmp::Ordering::Greater => true,
        std::cmp::Ordering::Less => false,
        std::cmp::Ordering::Equal => own < text.len() && crlf(own),
    };
    if is_crlf {
        "\r\n"
    } else {
        "\n"
    }
}

/// The new text: `text` with the operation applied around `d`.
// Long: the four operations share the layout of the target's lines read first.
fn splice(text: &str, d: &Definition, op: Operation, content: &str) -> Spliced {
    let unit = d.unit_span.clone();
    let nl = newline_at(text, unit.clone());
    let content = content.trim().replace("\r\n", "\n");
    let mut content = if nl == "\r\n" {
        content.replace('\n', "\r\n")
    } else {
        content
    };
    let comment_at_end = ends_in_line_comment(&content);
    let line_start = line_start_of(text, unit.start);
    let before_on_line = &text[line_start..unit.start];
    let alone_on_line = before_on_line.trim().is_empty();
    let indent: String = if alone_on_line {
        before_on_line.to_string()
    } else {
        String::new()
    };
    // Leading comments count only when the form starts its line; they may
    // not reach back into the previous top-level item.
    let lower = scan::scan(&text[..line_start])
        .items
        .iter()
        .rev()
        .find(|i| i.kind != scan::ItemKind::LineComment)
        .map_or(0, |i| i.span.end);
    let comments = if alone_on_line {
        leading_comments(text, line_start, lower)
    } else {
        None
    };
    // What follows the unit on its line: nothing, a trailing comment, or code.
    let unit_line_end = line_end_of(text, unit.end);
    let rest = text[unit.end..unit_line_end].trim();
    let rest_is_trivia = rest.is_empty() || rest.starts_with(';');
    let replace = |range: Range<usize>, with: &str| {
        let mut s = String::with_capacity(text.len() + with.len());
        s.push_str(&text[..range.start]);
        s.push_str(with);
        s.push_str(&text[range.end..]);
        Spliced {
            text: s,
            range,
            inserted: with.len(),
        }
    };
    match op {
        Operation::Replace => {
            // A guarded target (`#+sbcl (defun ...)`) replaced by content
            // that carries its own guard: the old guard goes too.
            let guarded_content = content.starts_with("#+") || content.starts_with("#-");
            let range = if guarded_content && unit.start != d.span.start {
                unit.start..d.span.end
            } else {
                d.span.clone()
            };
            let follows = text[range.end..line_end_of(text, range.end)].trim();
            if comment_at_end && !follows.is_empty() {
                content.push_str(nl);
                content.push_str(&indent);
            }
            replace(range, &content)
        }
        Operation::InsertBefore => {
            // Above the leading comments, indented as they are; when the
            // form does not start its line, right before it.
            let (at, indent) = match comments {
                Some(c) => (c, &text[line_start_of(text, c)..c]),
                None => (unit.start, indent.as_str()),
            };
            replace(at..at, &format!("{content}{nl}{nl}{indent}"))
        }
        Operation::InsertAfter => {
            // After the form's line (and its line ending, which stays that
            // line's) when only a comment or spaces follow it.
            if rest_is_trivia && unit_line_end < text.len() {
                let at = unit_line_end + 1;
                return replace(at..at, &format!("{nl}{indent}{content}{nl}"));
            }
            let at = if rest_is_trivia {
                unit_line_end
            } else {
                unit.end
            };
            if comment_at_end && !rest_is_trivia {
                content.push_str(nl);
                content.push_str(&indent);
            }
            replace(at..at, &format!("{nl}{nl}{indent}{content}"))
        }
        Operation::Delete => {
            let mut start = unit.start;
            let mut end = unit.end;
            if alone_on_line {
                start = comments.map_or(line_start, |c| line_start_of(text, c));
            }
            if rest_is_trivia && alone_on_line {
                end = (unit_line_end + 1).min(text.len());
                // Do not leave two blank lines where one separated forms.
                let prev_blank =
                    text[..start].ends_with("\n\n") || text[..start].ends_with("\n\r\n");
                if prev_blank || start == 0 {
                    let next = &text[end..];
                    if next.starts_with('\n') {
                        end += 1;
                    } else if next.starts_with("\r\n") {
                        end += 2;
                    }
                }
            }
            if end == text.len() && start > 0 {
                // The last form of the file: the blank lines that separated
                // it go too, and the file ends as it did (with a line ending
                // or without one).
                let kept = text[..start].trim_end();
                if !kept.is_empty() {
                    let first_nl = text[kept.len()..start].find('\n').map_or(0, |i| i + 1);
                    start = kept.len() + if text.ends_with('\n') { first_nl } else { 0 };
                }
            }
            replace(start..end, "")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SRC: &str = ";; top\n(defun a (x)\n  x)\n\n(defmethod p ((o point) s) 1)\n(defmethod p :around ((o point) s) 2)\n\n(defun b () 'b) ; trailing\n";

    #[test]
    fn finds_methods_by_specializers_and_qualifiers() {
        let d = find_target(SRC, "defmethod", "p (point t)", None).unwrap();
        assert_eq!(d.qualifiers, Vec::<String>::new());
        let d = find_target(SRC, "defmethod", "p :around (point t)", None).unwrap();
        assert_eq!(d.qualifiers, vec![":around".to_string()]);
        let e = find_target(SRC, "defmethod", "p", None).unwrap_err();
        assert!(
            e.to_string().contains("ambiguous")
                && e.to_string().contains("p :around (point t) (line 6)"),
            "{e}"
        );
        let e = find_target(SRC, "defun", "c", None).unwrap_err();
        assert!(
            e.to_string().contains("defun a (line 2); defun b (line 8)"),
            "{e}"
        );
    }

    #[test]
    fn splices_keep_everything_else() {
        let d = find_target(SRC, "defun", "a", None).unwrap();
        let out = splice(SRC, &d, Operation::Delete, "").text;
        // The comment directly above goes with the form.
        assert_eq!(out, "(defmethod p ((o point) s) 1)\n(defmethod p :around ((o point) s) 2)\n\n(defun b () 'b) ; trailing\n");
        let d = find_target(SRC, "defun", "b", None).unwrap();
        let out = splice(SRC, &d, Operation::InsertAfter, "(defun c () 'c)\n").text;
        assert!(
            out.ends_with("(defun b () 'b) ; trailing\n\n(defun c () 'c)\n"),
            "{out}"
        );
        let out = splice(SRC, &d, Operation::Replace, "  (defun b () 'bb)  ").text;
        assert!(out.ends_with("(defun b () 'bb) ; trailing\n"), "{out}");
    }

    /// The diff of the lines around an edit is the diff of the whole
    /// files, line numbers and all.
    #[test]
    fn the_diff_around_an_edit_is_the_whole_files_diff() {
        let src = format!("{}(defun z () 'z)", SRC.repeat(3));
        for (name, op, content) in [
            ("a", Operation::Replace, "(defun a ()\n  'aa)"),
            ("b", Operation::Delete, ""),
            ("b", Operation::InsertAfter, "(defun c () 'c)"),
            ("z", Operation::Replace, "(defun z ()\n 'zz)"),
            ("z", Operation::InsertBefore, "(defun y () 'y)"),
        ] {
            let all = find_target(&src, "defun", name, None);
            let d = match all {
                Ok(d) => d,
                Err(_) => {
                    let line = src
                        .lines()
                        .position(|l| l.starts_with(&format!("(defun {name} ")));
                    find_target(&src, "defun", name, line.map(|l| l + 1)).unwrap()
                }
            };
            let spliced = splice(&src, &d, op, content);
            let whole = similar::TextDiff::from_lines(&src, &spliced.text)
                .unified_diff()
                .context_radius(3)
                .header("a/f.lisp", "b/f.lisp")
                .to_string();
            let around = region_diff(
                "f.lisp",
                &src,
                &spliced.text,
                &spliced.range,
                spliced.inserted,
            );
            assert_eq!(around, whole, "{name} {op:?}");
        }
    }

    #[test]
    fn crlf_files_stay_crlf_and_conditionals_go_with_their_form() {
        let src = "(defun a () 1)\r\n\r\n#+sbcl\r\n(defun b () 2)\r\n\r\n(defun c () 3)\r\n";
        let d = find_target(src, "defun", "a", None).unwrap();
        let out = splice(src, &d, Operation::InsertAfter, "(defun a2 ()\n  4)").text;
        assert_eq!(
            out,
            "(defun a () 1)\r\n\r\n(defun a2 ()\r\n  4)\r\n\r\n#+sbcl\r\n(defun b () 2)\r\n\r\n(defun c () 3)\r\n"
        );
        let d = find_target(src, "defun", "b", None).unwrap();
        let out = splice(src, &d, Operation::Delete, "").text;
        assert_eq!(out, "(defun a () 1)\r\n\r\n(defun c () 3)\r\n");
    }

    #[test]
    fn new_lines_follow_the_lines_around_the_edit() {
        // One CRLF line among LF lines: edits elsewhere stay LF.
        let src = ";;;; header\r\n(defun a () 1)\n\n(defun b () 2)\n";
        let d = find_target(src, "defun", "b", None).unwrap();
        let out = splice(src, &d, Operation::InsertAfter, "(defun c ()\r\n  3)").text;
        assert_eq!(
            out,
            ";;;; header\r\n(defun a () 1)\n\n(defun b () 2)\n\n(defun c ()\n  3)\n"
        );
        let d = find_target(src, "defun", "a", None).unwrap();
        let out = splice(src, &d, Operation::InsertBefore, "(defun z () 0)").text;
        assert_eq!(
            out,
            ";;;; header\r\n(defun z () 0)\n\n(defun a () 1)\n\n(defun b () 2)\n"
        );
        // The last line without a line ending takes the one before it.
        assert_eq!(newline_at("(a)\r\n(b)", 5..8), "\r\n");
        assert_eq!(newline_at("(a)", 0..3), "\n");
        // The one CRLF line is the edited one: its neighbours decide.
        let src = "(defun a () 1)\n(defun b () 2)\r\n\n(defun c () 3)\n";
        let d = find_target(src, "defun", "b", None).unwrap();
        let out = splice(src, &d, Operation::InsertAfter, "(defun b2 () 22)").text;
        assert_eq!(
            out,
            "(defun a () 1)\n(defun b () 2)\r\n\n(defun b2 () 22)\n\n(defun c () 3)\n"
        );
    }

    #[test]
    fn deleting_the_last_form_leaves_no_blank_line() {
        for (src, want) in [
            ("(defun a () 1)\n\n(defun b () 2)\n", "(defun a () 1)\n"),
            (
                "(defun a () 1)\r\n\r\n(defun b () 2)\r\n",
                "(defun a () 1)\r\n",
            ),
            ("(defun a () 1)\n\n(defun b () 2)", "(defun a () 1)"),
            (
                "(defun a () 1) ; c\n\n\n(defun b () 2) ; t\n",
                "(defun a () 1) ; c\n",
            ),
            ("(defun b () 2)\n", ""),
        ] {
            let d = find_target(src, "defun", "b", None).unwrap();
            assert_eq!(splice(src, &d, Operation::Delete, "").text, want, "{src:?}");
        }
    }

    #[test]
    fn several_forms_do_not_replace_a_guarded_one() {
        let src = "#+sbcl (defun b () 2)\n";
        let d = find_target(src, "defun", "b", None).unwrap();
        let e =
            check_guard(src, &d, Operation::Replace, "(defun b () 3) (defun c () 4)").unwrap_err();
        assert!(e.to_string().contains("guarded by `#+sbcl`"), "{e}");
        assert!(check_guard(src, &d, Operation::Replace, "(defun b () 3)").is_ok());
        assert!(check_guard(
            src,
            &d,
            Operation::Replace,
            "#+sbcl (defun b () 3) #+sbcl (c)"
        )
        .is_ok());
        assert!(check_guard(src, &d, Operation::InsertAfter, "(a) (b)").is_ok());
    }

    #[test]
    fn a_broken_form_hides_no_other_form_and_is_named_for_a_miss() {
        let src = "(defun a ()\n  (b)\n(defun c () 1)\n";
        // The form after the broken one is found (reading resumes at the
        // next form at column 0), and so is the broken one.
        assert_eq!(find_target(src, "defun", "c", None).unwrap().span, 18..32);
        assert_eq!(find_target(src, "defun", "a", None).unwrap().span, 0..17);
        let e = find_target(src, "defun", "d", None).unwrap_err();
        assert!(
            e.to_string()
                .contains("a delimiter problem at line 1, column 1"),
            "{e}"
        );
    }

    #[test]
    fn edits_that_change_other_forms_are_refused() {
        let old = "(defun zeta () 2) (defun eta () 3)\n";
        // What splicing a trailing comment without a newline would give:
        // it reads without errors, but `eta` is gone into the comment.
        let new = "(defun zeta () 22) ; now 22 (defun eta () 3)\n";
        assert!(check_result(old, new).is_ok());
        let e = check_outside(old, new, 0..17, 27).unwrap_err();
        assert!(
            e.to_string()
                .contains("after the edited form (the top-level item at line 1"),
            "{e}"
        );
        let fine = "(defun zeta () 22) (defun eta () 3)\n";
        assert!(check_outside(old, fine, 0..17, 18).is_ok());
        // Content that glues onto the token before the range is caught too.
        let e = check_outside("a (b)\n", "ac\n", 1..5, 1).unwrap_err();
        assert!(e.to_string().contains("before the edited form"), "{e}");
    }
}
