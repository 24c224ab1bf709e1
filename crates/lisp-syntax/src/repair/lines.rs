//! The text as the indentation rule sees it: tokens (openers, closers,
//! code, comments) with their visual columns, grouped by line; the lines
//! from one at the base column to the next (segments) and the runs of
//! segments that balance together or do not (units); and `Ctx`, what every
//! step of the repair reads.

use super::{form_label, Change, Refusal};
use crate::cst::{self, LineIndex, NodeKind};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum TokKind {
    /// `(`, `#(`, `#3(`.
    Open,
    /// `)`, matched or not.
    Close,
    /// Any other leaf that is not whitespace or a comment.
    Code,
    Comment,
}

#[derive(Debug, Clone, Copy)]
pub(super) struct Tok {
    pub(super) kind: TokKind,
    pub(super) start: usize,
    pub(super) end: usize,
    /// Visual column of `start` (tabs to multiples of 8), 0-based.
    pub(super) col: usize,
    /// The first leaf on its line, the line not starting inside a string or
    /// block comment.
    pub(super) first_on_line: bool,
}

pub(super) fn tokens(text: &str, parse: &cst::Parse) -> Vec<Tok> {
    let mut toks = Vec::new();
    let mut at_line_start = true;
    let mut columns = Columns::default();
    for leaf in parse.leaves() {
        let s = leaf.text(text);
        let kind = match leaf.kind {
            NodeKind::Whitespace => {
                if s.contains('\n') {
                    at_line_start = true;
                }
                continue;
            }
            NodeKind::LineComment | NodeKind::BlockComment => TokKind::Comment,
            NodeKind::Punct if s.ends_with('(') => TokKind::Open,
            NodeKind::Punct | NodeKind::Error if s == ")" => TokKind::Close,
            _ => TokKind::Code,
        };
        toks.push(Tok {
            kind,
            start: leaf.span.start,
            end: leaf.span.end,
            col: columns.at(text, leaf.span.start),
            first_on_line: at_line_start,
        });
        at_line_start = false;
    }
    toks
}

/// Visual columns of increasing offsets, each found from the last one
/// (tabs to multiples of 8): one pass over the text in all, however long
/// its lines (a search back to the line start for each token was
/// quadratic in a line's length).
#[derive(Default)]
struct Columns {
    /// The last offset asked for, and its column.
    at: usize,
    col: usize,
}

impl Columns {
    /// The column of `at`, not before the last offset asked for.
    fn at(&mut self, text: &str, at: usize) -> usize {
        let from = self.at.min(at);
        for ch in text[from..at].chars() {
            self.col = match ch {
                '\n' => 0,
                '\t' => (self.col / 8 + 1) * 8,
                _ => self.col + 1,
            };
        }
        self.at = at;
        self.col
    }
}

/// The tokens from one line start (outside any string or comment) to the
/// next: one line, or several when a string spans lines.
#[derive(Debug, Clone)]
pub(super) struct Group {
    pub(super) toks: std::ops::Range<usize>,
    /// The indentation that closes lists: the column of the first token,
    /// when it is code or an opener (not for lines starting with a closer or
    /// a comment).
    pub(super) indent: Option<usize>,
    /// For a line starting with a closer: that closer's column. Such a line
    /// closes the lists opened right of it (strictly: a `)` under its `(`
    /// closes that list itself).
    pub(super) closer_indent: Option<usize>,
    /// Holds code (not only comments).
    pub(super) code: bool,
    /// The closers at the end, before any trailing comment.
    pub(super) trail: std::ops::Range<usize>,
    /// Where closers go: after the trail's last closer, else after the last
    /// code token.
    pub(super) insert_at: usize,
}

/// `keep_closed_lists`: closers at a line's end that close a list opened
/// on the same line stay as written (they are not part of the trail).
pub(super) fn line_groups(text: &str, toks: &[Tok], keep_closed_lists: bool) -> Vec<Group> {
    // Per closer: whether it closes a list opened on its own line.
    let mut same_line = vec![false; toks.len()];
    if keep_closed_lists {
        let mut stack = Vec::new();
        let mut line = 0usize;
        for (i, t) in toks.iter().enumerate() {
            if t.first_on_line {
                line += 1;
            }
            match t.kind {
                TokKind::Open => stack.push(line),
                TokKind::Close => {
                    if let Some(l) = stack.pop() {
                        same_line[i] = l == line;
                    }
                }
                _ => {}
            }
        }
    }
    let mut groups = Vec::new();
    let mut i = 0;
    while i < toks.len() {
        let mut j = i + 1;
        while j < toks.len() && !toks[j].first_on_line {
            j += 1;
        }
        let range = i..j;
        let code = toks[range.clone()]
            .iter()
            .any(|t| t.kind != TokKind::Comment);
        let mut end = j;
        while end > i && toks[end - 1].kind == TokKind::Comment {
            end -= 1;
        }
        let mut trail_start = end;
        while trail_start > i && toks[trail_start - 1].kind == TokKind::Close {
            trail_start -= 1;
        }
        while trail_start < end && same_line[trail_start] {
            trail_start += 1;
        }
        let insert_at = if end > i {
            toks[end - 1].end
        } else {
            toks[i].start
        };
        let indent = matches!(toks[i].kind, TokKind::Open | TokKind::Code).then_some(toks[i].col);
        let _ = text;
        let closer_indent = (toks[i].kind == TokKind::Close).then_some(toks[i].col);
        groups.push(Group {
            toks: range,
            indent,
            closer_indent,
            code,
            trail: trail_start..end,
            insert_at,
        });
        i = j;
    }
    groups
}

/// Groups from one line at the base indentation to the next.
#[derive(Debug, Clone)]
pub(super) struct Segment {
    pub(super) groups: std::ops::Range<usize>,
}

pub(super) fn segments(groups: &[Group]) -> Vec<Segment> {
    let base = groups.iter().find_map(|g| g.indent).unwrap_or(0);
    let mut starts: Vec<usize> = groups
        .iter()
        .enumerate()
        .filter(|(_, g)| g.indent.is_some_and(|x| x <= base))
        .map(|(i, _)| i)
        .collect();
    if starts.first() != Some(&0) {
        starts.insert(0, 0);
    }
    let mut segs = Vec::new();
    for (k, &s) in starts.iter().enumerate() {
        let e = starts.get(k + 1).copied().unwrap_or(groups.len());
        if s < e {
            segs.push(Segment { groups: s..e });
        }
    }
    segs
}

/// (net opens minus closes, lowest running depth as a non-positive number).
pub(super) fn seg_balance(ctx: &Ctx, seg: &Segment) -> (i64, i64) {
    let (mut n, mut min) = (0i64, 0i64);
    for g in &ctx.groups[seg.groups.clone()] {
        for t in &ctx.toks[g.toks.clone()] {
            match t.kind {
                TokKind::Open => n += 1,
                TokKind::Close => {
                    n -= 1;
                    min = min.min(n);
                }
                _ => {}
            }
        }
    }
    (n, min)
}

/// Consecutive segments whose parentheses balance together, or a run that
/// does not balance (ending at the segment where a closer has nothing to
/// close, or at the end of the text).
pub(super) struct Unit {
    pub(super) segments: std::ops::Range<usize>,
    pub(super) balanced: bool,
}

pub(super) fn units(ctx: &Ctx, segs: &[Segment]) -> Vec<Unit> {
    let mut units = Vec::new();
    let mut i = 0;
    while i < segs.len() {
        let (mut n, mut min) = (0i64, 0i64);
        let mut j = i;
        let balanced = loop {
            let (sn, smin) = seg_balance(ctx, &segs[j]);
            min = min.min(n + smin);
            n += sn;
            if min < 0 {
                break false;
            }
            if n == 0 {
                break true;
            }
            if j + 1 == segs.len() {
                break false;
            }
            j += 1;
        };
        units.push(Unit {
            segments: i..j + 1,
            balanced,
        });
        i = j + 1;
    }
    units
}

/// A group's trail: `old` closers written, `new` inferred.
#[derive(Debug, Clone, Copy)]
pub(super) struct Edit {
    pub(super) old: usize,
    pub(super) new: usize,
}

/// What the rules read of a text: its line index, tokens and line groups
/// (closers at a line's end all in its trail).
pub(super) struct Layout {
    pub(super) lines: LineIndex,
    pub(super) toks: Vec<Tok>,
    pub(super) groups: Vec<Group>,
}

impl Layout {
    pub(super) fn of(text: &str, parse: &cst::Parse) -> Layout {
        let toks = tokens(text, parse);
        let groups = line_groups(text, &toks, false);
        Layout {
            lines: LineIndex::new(text),
            toks,
            groups,
        }
    }

    /// The context the rules run in over `text`, this layout's text.
    pub(super) fn ctx<'a>(&'a self, text: &'a str, strict: bool) -> Ctx<'a> {
        Ctx {
            text,
            lines: &self.lines,
            toks: &self.toks,
            groups: &self.groups,
            strict,
        }
    }
}

pub(super) struct Ctx<'a> {
    pub(super) text: &'a str,
    pub(super) lines: &'a LineIndex,
    pub(super) toks: &'a [Tok],
    pub(super) groups: &'a [Group],
    /// Every line must line up as an editor indents a call (see
    /// `lines_up`), also where closers are added: for the second reading.
    pub(super) strict: bool,
}

impl Ctx<'_> {
    pub(super) fn group_line(&self, g: usize) -> usize {
        let grp = &self.groups[g];
        let at = if grp.trail.is_empty() {
            grp.insert_at
        } else {
            self.toks[grp.trail.start].start
        };
        self.lines.line_col(at).0
    }

    pub(super) fn change_of(&self, g: usize, e: &Edit) -> Change {
        let grp = &self.groups[g];
        let offset = if e.new > e.old {
            // After the last code line, a text that ends in an indented
            // line of its own (before the file's final newline, if any) is
            // where its writer was about to close: the closers go there
            // (after any comment between), not before.
            let rest = &self.text[grp.insert_at..];
            let body = rest
                .strip_suffix("\r\n")
                .or_else(|| rest.strip_suffix('\n'))
                .unwrap_or(rest);
            let last_line = body.rsplit('\n').next().unwrap_or("");
            let ends_indented = body.contains('\n')
                && !last_line.is_empty()
                && last_line.chars().all(|c| c == ' ' || c == '\t');
            if ends_indented && self.groups[g + 1..].iter().all(|x| !x.code) {
                grp.insert_at + body.len()
            } else {
                grp.insert_at
            }
        } else {
            // The last `old - new` closers of the trail go.
            self.toks[grp.trail.end - (e.old - e.new)].start
        };
        let (line, column) = self.lines.line_col(offset);
        Change {
            added: e.new > e.old,
            count: e.new.abs_diff(e.old),
            offset,
            line,
            column,
        }
    }

    /// Start of the top-level form around `at`: the last line at column 0
    /// (outside strings and comments) holding code, at or before `at`.
    pub(super) fn form_start_before(&self, at: usize) -> usize {
        self.groups
            .iter()
            .map(|g| &self.toks[g.toks.start])
            .rfind(|t| t.start <= at && t.col == 0 && t.kind != TokKind::Comment)
            .or_else(|| self.toks.iter().find(|t| t.kind != TokKind::Comment))
            .map_or(0, |t| t.start)
    }

    pub(super) fn refusal(
        &self,
        form_at: usize,
        line: usize,
        reason: String,
        fix: String,
    ) -> Refusal {
        Refusal {
            form_line: self.lines.line_col(form_at).0,
            form: form_label(&self.text[form_at..]),
            line,
            reason,
            fix,
        }
    }
}

/// One step of a walk over the tokens with the stack of open lists (each
/// with its opener and the tokens that start its elements): token `t`, an
/// opener or an atom, is an element of the innermost open list, and an
/// opener then opens a list of its own.
pub(super) fn push_element(stack: &mut Vec<(usize, Vec<usize>)>, t: usize, kind: TokKind) {
    if let Some((_, elements)) = stack.last_mut() {
        elements.push(t);
    }
    if kind == TokKind::Open {
        stack.push((t, Vec::new()));
    }
}
