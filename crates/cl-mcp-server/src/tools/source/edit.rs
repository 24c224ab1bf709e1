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
use crate::tools::fs::{read_text_capped, resolve_for, to_json};
use crate::tools::fs_paths::{atomic_write, Access};
use crate::tools::{tool, Annotations, ToolContext, ToolDef, ToolGroup, ToolOutput};

/// What to do with the form.
#[derive(Deserialize, JsonSchema, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Operation {
    /// Replace the form with `content`.
    Replace,
    /// Insert `content` before the form (a blank line between).
    InsertBefore,
    /// Insert `content` after the form (a blank line between).
    InsertAfter,
    /// Remove the form (and the line it stood on).
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
    /// File to edit (relative to the project root).
    path: String,
    /// Definition type of the target form: `defun`, `defmethod`, `defclass`, ...
    form_type: String,
    /// Name of the target. For methods add qualifiers and specializers:
    /// `print-object (point t)`, `initialize-instance :after (widget)`;
    /// setf functions as `(setf foo)`.
    form_name: String,
    /// `replace`, `insert_before`, `insert_after` or `delete`.
    operation: Operation,
    /// The new form(s), complete and balanced (not needed for `delete`).
    content: Option<String>,
    /// Show the diff without writing (default false).
    dry_run: Option<bool>,
    /// Line where the target form starts, to choose among forms with the
    /// same name (e.g. under different reader conditionals).
    line: Option<usize>,
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
}

/// The `lisp-edit-form` tool.
pub fn tool_def() -> ToolDef {
    tool(
        "lisp-edit-form",
        ToolGroup::Source,
        "Edit a Lisp definition",
        "Replaces, deletes, or inserts before/after one top-level definition found by `formType` \
         and `formName` (methods: `print-object :around (point t)`; setf functions: `(setf foo)`; \
         forms inside eval-when/progn count). Everything else in the file stays byte-identical. \
         `content` must be complete forms; if the file would not read afterwards nothing is \
         written. Returns a unified diff; `dryRun: true` only shows it. Writes are atomic.",
        Annotations::DESTRUCTIVE,
        |a: EditArgs, ctx: ToolContext| async move { edit(a, &ctx) },
    )
    .with_output_schema::<EditOutput>()
}

/// Edits are read-modify-write: concurrent calls (clients may run tools in
/// parallel) are serialized so no edit is lost. Each takes milliseconds.
static EDIT_LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn edit(a: EditArgs, ctx: &ToolContext) -> ToolOutput {
    let _serialized = EDIT_LOCK.lock().unwrap_or_else(|e| e.into_inner());
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
    let text = match read_text_capped(&r.path, &r.display) {
        Ok(t) => t,
        Err(e) => return ToolOutput::error(e),
    };
    let content = a.content.as_deref().unwrap_or("");
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
    let new_text = splice(&text, &target, a.operation, content);
    if let Err(e) = check_result(&text, &new_text) {
        return ToolOutput::error(format!(
            "Not written: after this edit {} would not read: {e}",
            r.display
        ));
    }
    let diff = similar::TextDiff::from_lines(&text, &new_text)
        .unified_diff()
        .context_radius(3)
        .header(&format!("a/{}", r.display), &format!("b/{}", r.display))
        .to_string();
    let dry = a.dry_run.unwrap_or(false);
    if !dry {
        if let Err(e) = atomic_write(&r.path, new_text.as_bytes()) {
            return ToolOutput::error(format!("Cannot write '{}': {e}", r.display));
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
            "Applied {} to `{what}` (line {line}) in {}.\n",
            a.operation.name(),
            r.display
        )
    };
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
    };
    ToolOutput::structured(msg, to_json(&out))
}

/// `content` must read cleanly and hold at least one form.
fn check_content(content: &str) -> Result<(), String> {
    let parse = cst::parse(content);
    if let Some(e) = parse.errors.first() {
        let lines = LineIndex::new(content);
        return Err(format!(
            "`content` does not read as complete forms: {} (positions are within `content`). \
             Nothing was changed.",
            e.message(&lines)
        ));
    }
    if parse.top_level_forms().next().is_none() {
        return Err("`content` holds only comments or whitespace; give at least one form.".into());
    }
    Ok(())
}

/// The edited file must read with no more errors than the original.
fn check_result(old: &str, new: &str) -> Result<(), String> {
    let before = cst::parse(old).errors.len();
    let parse = cst::parse(new);
    if parse.errors.len() > before {
        let lines = LineIndex::new(new);
        let e = &parse.errors[0];
        return Err(format!("{} (in the edited file)", e.message(&lines)));
    }
    Ok(())
}

/// What `formName` asks for.
struct Wanted {
    name_key: String,
    qualifiers: Option<Vec<String>>,
    specializers: Option<Vec<String>>,
}

fn parse_form_name(form_name: &str) -> Result<Wanted, String> {
    let parse = cst::parse(form_name);
    if !parse.errors.is_empty() {
        return Err(format!(
            "`formName` '{form_name}' does not read (unbalanced parentheses?)."
        ));
    }
    let mut forms = parse.top_level_forms();
    let Some(name) = forms.next() else {
        return Err("`formName` is empty.".into());
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
) -> Result<Definition, String> {
    let wanted = parse_form_name(form_name)?;
    let type_key = {
        let t = form_type.trim().to_lowercase();
        t.rsplit(':').next().unwrap_or(&t).to_string()
    };
    let s = scan::scan(text);
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
            Err(msg)
        }
        _ => {
            let c: Vec<String> = found.iter().map(|d| describe(d)).collect();
            Err(format!(
                "'{form_name}' is ambiguous: {} forms match: {}. Add qualifiers/specializers to \
                 `formName` (e.g. `name :around (class t)`) or pass `line`.",
                found.len(),
                c.join("; ")
            ))
        }
    }
}

/// The new text: `text` with the operation applied around `d`.
fn splice(text: &str, d: &Definition, op: Operation, content: &str) -> String {
    let nl = if text.contains("\r\n") { "\r\n" } else { "\n" };
    let content = content.trim();
    let content = if nl == "\r\n" {
        content.replace("\r\n", "\n").replace('\n', "\r\n")
    } else {
        content.to_string()
    };
    let unit = d.unit_span.clone();
    let line_start = text[..unit.start].rfind('\n').map_or(0, |i| i + 1);
    let before_on_line = &text[line_start..unit.start];
    let indent: String = if before_on_line.trim().is_empty() {
        before_on_line.to_string()
    } else {
        String::new()
    };
    let replace = |range: Range<usize>, with: &str| {
        let mut s = String::with_capacity(text.len() + with.len());
        s.push_str(&text[..range.start]);
        s.push_str(with);
        s.push_str(&text[range.end..]);
        s
    };
    match op {
        Operation::Replace => replace(d.span.clone(), &content),
        Operation::InsertBefore => replace(
            unit.start..unit.start,
            &format!("{content}{nl}{nl}{indent}"),
        ),
        Operation::InsertAfter => {
            // After the form's line when only a comment or spaces follow it.
            let line_end = text[unit.end..]
                .find('\n')
                .map_or(text.len(), |i| unit.end + i);
            let rest = text[unit.end..line_end].trim();
            let at = if rest.is_empty() || rest.starts_with(';') {
                line_end - usize::from(text[..line_end].ends_with('\r'))
            } else {
                unit.end
            };
            replace(at..at, &format!("{nl}{nl}{indent}{content}"))
        }
        Operation::Delete => {
            let mut start = unit.start;
            let mut end = unit.end;
            if before_on_line.trim().is_empty() {
                start = line_start;
            }
            let line_end = text[end..].find('\n').map_or(text.len(), |i| end + i);
            if text[end..line_end].trim().is_empty() && start == line_start {
                end = (line_end + 1).min(text.len());
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
            e.contains("ambiguous") && e.contains("p :around (point t) (line 6)"),
            "{e}"
        );
        let e = find_target(SRC, "defun", "c", None).unwrap_err();
        assert!(e.contains("defun a (line 2); defun b (line 8)"), "{e}");
    }

    #[test]
    fn splices_keep_everything_else() {
        let d = find_target(SRC, "defun", "a", None).unwrap();
        let out = splice(SRC, &d, Operation::Delete, "");
        assert_eq!(out, ";; top\n\n(defmethod p ((o point) s) 1)\n(defmethod p :around ((o point) s) 2)\n\n(defun b () 'b) ; trailing\n");
        let d = find_target(SRC, "defun", "b", None).unwrap();
        let out = splice(SRC, &d, Operation::InsertAfter, "(defun c () 'c)\n");
        assert!(
            out.ends_with("(defun b () 'b) ; trailing\n\n(defun c () 'c)\n"),
            "{out}"
        );
        let out = splice(SRC, &d, Operation::Replace, "  (defun b () 'bb)  ");
        assert!(out.ends_with("(defun b () 'bb) ; trailing\n"), "{out}");
    }

    #[test]
    fn crlf_files_stay_crlf_and_conditionals_go_with_their_form() {
        let src = "(defun a () 1)\r\n\r\n#+sbcl\r\n(defun b () 2)\r\n\r\n(defun c () 3)\r\n";
        let d = find_target(src, "defun", "a", None).unwrap();
        let out = splice(src, &d, Operation::InsertAfter, "(defun a2 ()\n  4)");
        assert_eq!(
            out,
            "(defun a () 1)\r\n\r\n(defun a2 ()\r\n  4)\r\n\r\n#+sbcl\r\n(defun b () 2)\r\n\r\n(defun c () 3)\r\n"
        );
        let d = find_target(src, "defun", "b", None).unwrap();
        let out = splice(src, &d, Operation::Delete, "");
        assert_eq!(out, "(defun a () 1)\r\n\r\n(defun c () 3)\r\n");
    }

    #[test]
    fn a_broken_file_is_named_as_the_likely_reason_for_a_miss() {
        let e =
            find_target("(defun a ()\n  (b)\n(defun c () 1)\n", "defun", "c", None).unwrap_err();
        assert!(e.contains("a delimiter problem at line 1, column 1"), "{e}");
    }
}
