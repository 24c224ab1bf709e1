//! `lisp-check-parens`: finds the first delimiter problem in Lisp text.

use lisp_syntax::cst::LineIndex;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::scan::{self, Opener, Problem};
use super::{line_window, Position};
use crate::tools::fs::{to_json, READ_CAP_BYTES};
use crate::tools::fs_paths::{read_capped, ReadCapError};
use crate::tools::{
    off_workers, tool, Annotations, ToolContext, ToolDef, ToolError, ToolGroup, ToolOutput,
};

#[derive(Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct CheckArgs {
    /// Or give `code`.
    path: Option<String>,
    code: Option<String>,
    /// 0-based first line.
    offset: Option<usize>,
    /// Default: all lines.
    limit: Option<usize>,
}

/// The result of a check.
#[derive(Serialize, JsonSchema, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct CheckOutput {
    /// True when every delimiter is balanced.
    pub ok: bool,
    /// `extra-close`, `mismatch`, `unclosed` or `too-large` when not ok.
    /// (`mismatch` needs a second kind of bracket; in standard syntax `[`
    /// and `{` are ordinary characters, so it does not occur.)
    pub kind: Option<String>,
    /// What should have come (`")"`, `"\""`, `"|#"`).
    pub expected: Option<String>,
    /// What came instead (`")"`, `"end of input"`).
    pub found: Option<String>,
    /// Where: the stray `)`, or the opener that is never closed (for an
    /// unclosed list, the top-level form that contains it). Lines and
    /// offsets count from the start of the file even with `offset`.
    pub position: Option<Position>,
    /// For an unclosed list: the innermost opener left open.
    pub innermost_open: Option<Position>,
    /// A likely place for the missing `)`, when one can be guessed.
    pub hint: Option<String>,
    /// Top-level forms read (when ok).
    pub forms: Option<usize>,
}

/// The `lisp-check-parens` tool.
pub fn tool_def() -> ToolDef {
    tool(
        "lisp-check-parens",
        ToolGroup::Source,
        "Check Lisp delimiters",
        "Find the first unbalanced delimiter in a file (`path`, `offset`/`limit` lines) or \
         `code`: kind, position, the form it is in, and where a `)` is probably missing.",
        Annotations::READ_ONLY,
        |a: CheckArgs, ctx: ToolContext| off_workers(move || {
            let (text, base_line, base_offset, label) = match (&a.path, &a.code) {
                (Some(_), Some(_)) | (None, None) => {
                    return ToolOutput::error("Give exactly one of `path` or `code`.")
                }
                (None, Some(code)) => {
                    if a.offset.is_some() || a.limit.is_some() {
                        return ToolOutput::error(
                            "`offset`/`limit` apply to `path` only; pass the code you want checked.",
                        );
                    }
                    (code.clone(), 0, 0, "code".to_string())
                }
                (Some(path), None) => match windowed_file(&ctx, path, a.offset, a.limit) {
                    Ok(Windowed::Text(t, line, off, label)) => (t, line, off, label),
                    Ok(Windowed::TooLarge(out, text)) => {
                        return ToolOutput::structured(text, to_json(&out))
                    }
                    Err(e) => return ToolOutput::error(e),
                },
            };
            if text.len() > READ_CAP_BYTES {
                let out = too_large(text.len());
                return ToolOutput::structured(
                    format!(
                        "too-large: {label} is {} bytes, over the 2 MB limit.",
                        text.len()
                    ),
                    to_json(&out),
                );
            }
            let (out, message) = check_text(&text, base_line, base_offset);
            ToolOutput::structured(format!("{label}: {message}"), to_json(&out))
        }),
    )
    .with_output_schema::<CheckOutput>()
}

enum Windowed {
    /// The text to check, the number of lines before it, the number of
    /// characters before it, and how to name it.
    Text(String, usize, usize, String),
    TooLarge(CheckOutput, String),
}

fn windowed_file(
    ctx: &ToolContext,
    path: &str,
    offset: Option<usize>,
    limit: Option<usize>,
) -> Result<Windowed, ToolError> {
    let r = super::super::fs::resolve_existing_file(&ctx.session, path)?;
    // The size comes from the opened handle, which is also what is read.
    let (file, meta) = r.open_regular()?;
    let size = meta.len() as usize;
    if size > READ_CAP_BYTES && offset.is_none() && limit.is_none() {
        return Ok(Windowed::TooLarge(
            too_large(size),
            format!(
                "too-large: {} is {size} bytes, over the 2 MB limit; check it in parts with \
                 `offset`/`limit` (lines), starting and ending between top-level forms.",
                r.display
            ),
        ));
    }
    let most = 64 * READ_CAP_BYTES as u64;
    let text = match read_capped(file, size as u64, most, &r.display) {
        Ok(bytes) if size > READ_CAP_BYTES => String::from_utf8_lossy(&bytes).into_owned(),
        Ok(bytes) if bytes.len() > READ_CAP_BYTES => {
            // Grew past the cap since the size was taken.
            return Err(ToolError::File(format!(
                "'{}' grew past the 2 MB limit while it was read; check it in parts with \
                 `offset`/`limit`.",
                r.display
            )));
        }
        Ok(bytes) => String::from_utf8(bytes).map_err(|e| {
            ToolError::File(format!(
                "'{}' is not UTF-8 text (invalid byte at offset {}).",
                r.display,
                e.utf8_error().valid_up_to()
            ))
        })?,
        Err(ReadCapError::TooBig(n)) => {
            return Err(ToolError::File(format!(
                "'{}' is too big to check ({n} bytes).",
                r.display
            )))
        }
        Err(ReadCapError::Other(m)) => return Err(m),
    };
    if offset.is_none() && limit.is_none() {
        return Ok(Windowed::Text(text, 0, 0, r.display));
    }
    if limit == Some(0) {
        return Err(ToolError::Argument(
            "`limit` must be at least 1 (lines).".into(),
        ));
    }
    let lines = LineIndex::new(&text);
    let offset = offset.unwrap_or(0);
    let human = super::human_line_count(&text, &lines);
    if offset > 0 && offset >= human {
        return Err(ToolError::Argument(format!(
            "`offset` {offset} is past the end of '{}', which has {human} lines (`offset` is \
             0-based).",
            r.display
        )));
    }
    let (start, end) = line_window(&text, &lines, offset, limit.unwrap_or(usize::MAX));
    let before = text[..start].chars().count();
    let label = format!(
        "{} lines {}-{}",
        r.display,
        offset + 1,
        lines.line_col(end.saturating_sub(1).max(start)).0
    );
    Ok(Windowed::Text(
        text[start..end].to_string(),
        offset.min(lines.line_count()),
        before,
        label,
    ))
}

fn too_large(size: usize) -> CheckOutput {
    CheckOutput {
        ok: false,
        kind: Some("too-large".into()),
        expected: Some(format!("at most {READ_CAP_BYTES} bytes")),
        found: Some(format!("{size} bytes")),
        position: None,
        innermost_open: None,
        hint: Some("Check the file in parts with `offset`/`limit` (lines).".into()),
        forms: None,
    }
}

/// Checks `text`; `base_line`/`base_offset` (lines and characters before it
/// in its file) shift the reported positions. Returns the structured result
/// and a sentence for the model.
/// The answer for a text whose delimiters balance: its `n` forms.
fn all_balanced(n: usize) -> (CheckOutput, String) {
    (
        CheckOutput {
            ok: true,
            kind: None,
            expected: None,
            found: None,
            position: None,
            innermost_open: None,
            hint: None,
            forms: Some(n),
        },
        format!(
            "ok: all delimiters balanced ({}).",
            crate::tools::output::counted(n, "top-level form", "top-level forms")
        ),
    )
}

/// Where indentation places the closers, when it can (" By the
/// indentation: ..."), else nothing.
fn closers_by_indentation(text: &str, base_line: usize) -> String {
    match lisp_syntax::repair::repair_parens(text) {
        lisp_syntax::repair::Repair::Repaired { changes, .. } => {
            let said: Vec<String> = changes
                .iter()
                .map(|c| {
                    format!(
                        "{} \"{}\" at line {}, column {}",
                        if c.added { "add" } else { "remove" },
                        ")".repeat(c.count),
                        c.line + base_line,
                        c.column
                    )
                })
                .collect();
            format!(" By the indentation: {}.", said.join("; "))
        }
        _ => String::new(),
    }
}

pub fn check_text(text: &str, base_line: usize, base_offset: usize) -> (CheckOutput, String) {
    let s = scan::scan(text);
    let Some(problem) = s.problem.clone() else {
        return all_balanced(s.forms().count());
    };
    let lines = LineIndex::new(text);
    let pos = |o: usize| {
        let mut p = Position::of(text, &lines, o);
        p.line += base_line;
        p.offset += base_offset;
        p
    };
    let at = |p: &Position| format!("line {}, column {}", p.line, p.column);
    let by_indentation = closers_by_indentation(text, base_line);
    match problem {
        Problem::ExtraClose { offset } => {
            let p = pos(offset);
            // The top-level form this `)` follows is where a `(` is
            // missing or a `)` too many.
            let before = s.forms().take_while(|f| f.end <= offset).last().cloned();
            let hint = match before {
                Some(f) => format!(
                    "Delete this `)`, or add the missing `(` inside the form that starts at {} \
                     and ends at {}.",
                    at(&pos(f.start)),
                    at(&pos(f.end.saturating_sub(1)))
                ),
                None => "Delete this `)`: no form is open before it.".to_string(),
            };
            let hint = format!("{hint}{by_indentation}");
            let msg = format!(
                "extra-close: `)` at {} closes nothing (no list is open there). {hint}",
                at(&p)
            );
            (
                CheckOutput {
                    ok: false,
                    kind: Some("extra-close".into()),
                    expected: None,
                    found: Some(")".into()),
                    position: Some(p),
                    innermost_open: None,
                    hint: Some(hint),
                    forms: None,
                },
                msg,
            )
        }
        Problem::Unclosed {
            what,
            open,
            outer,
            suspect,
        } => {
            let is_list = matches!(what, Opener::List | Opener::Vector);
            let main = if is_list { outer } else { open };
            let p = pos(main);
            let inner = (is_list && open != outer).then(|| pos(open));
            let hint = match (is_list, suspect) {
                (true, Some(s)) => {
                    let sp = pos(s);
                    Some(format!(
                        "The form opened at line {} is not closed: `{}` starts at column 1 of \
                         line {} inside it, so a `)` is probably missing before line {}.",
                        p.line,
                        first_words(&text[s..]),
                        sp.line,
                        sp.line
                    ))
                }
                (true, None) => Some(format!(
                    "Add the missing `)`{}.",
                    match &inner {
                        Some(i) => format!("; the innermost list left open starts at {}", at(i)),
                        None => String::new(),
                    }
                )),
                (false, _) => Some(format!(
                    "Everything after the {} opener is read as part of it; close it with `{}`.",
                    what.describe(),
                    what.close_text()
                )),
            };
            let hint = hint.map(|h| format!("{h}{by_indentation}"));
            let form = if is_list {
                format!("the form `{}`: ", first_words(&text[outer..]))
            } else {
                String::new()
            };
            let msg = format!(
                "unclosed: {form}{} `{}` opened at {} is never closed (expected `{}` before the \
                 end of input). {}",
                what.describe(),
                what.open_text(),
                at(&p),
                what.close_text(),
                hint.as_deref().unwrap_or("")
            );
            (
                CheckOutput {
                    ok: false,
                    kind: Some("unclosed".into()),
                    expected: Some(what.close_text().into()),
                    found: Some("end of input".into()),
                    position: Some(p),
                    innermost_open: inner,
                    hint,
                    forms: None,
                },
                msg.trim_end().to_string(),
            )
        }
    }
}

/// The first two words of a form, for a hint: `(defun foo`.
pub(super) fn first_words(text: &str) -> String {
    let line = text.lines().next().unwrap_or("");
    let mut words = line.split_whitespace();
    let mut s = words.next().unwrap_or("").to_string();
    if let Some(w) = words.next() {
        s.push(' ');
        s.push_str(w);
    }
    s.chars().take(60).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hint_points_at_the_def_inside_an_unclosed_form() {
        let (out, msg) = check_text("(defun a ()\n  (b)\n\n(defun c () 1)\n", 0, 0);
        assert_eq!(out.kind.as_deref(), Some("unclosed"));
        assert_eq!(out.position.as_ref().unwrap().line, 1);
        assert!(
            msg.contains("(defun c` starts at column 1 of line 4"),
            "{msg}"
        );
        let (out, _) = check_text("(λ))", 0, 0);
        assert_eq!(
            out.position,
            Some(Position {
                offset: 3,
                line: 1,
                column: 4
            }),
            "offsets and columns count characters"
        );
        let (out, _) = check_text("(a))", 10, 100);
        assert_eq!(
            out.position,
            Some(Position {
                offset: 103,
                line: 11,
                column: 4
            })
        );
    }
}
