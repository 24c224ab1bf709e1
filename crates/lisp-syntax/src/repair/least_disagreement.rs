//! The second way of the repair, where the indentation rule refuses: the
//! one place for one `)` in the one broken form that leaves the fewest
//! lines lined up with nothing.

use super::lines::{push_element, seg_balance, segments, units, Layout, Segment, TokKind};
use super::plausible::{implausible_form, indented_at_top_level};
use super::shape::{lines_up, wraps_top_level_forms};
use super::Change;
use crate::cst::{self, LineIndex};

/// The second way, where the indentation rule refuses: one form whose
/// parentheses are one short or one too many, in a text whose other forms
/// read. Every place where one `)` could go (the end of each line of the
/// form) or come off (the last `)` of each line) is tried, but for places
/// that would hold lines against the indentation rule
/// (`moves_against_indentation`). The end of the form (its last line) is
/// taken when the text then reads and has fewer lines that line up with
/// nothing in their list (`misaligned_lines`) than with the `)` at any
/// other place; otherwise the refusal stands. This restores the closer a
/// writer dropped or doubled at the end of a form whose own indentation is
/// off in a line (code indented by hand): the rule above refuses it, since
/// that line says nothing, while every other line still points at the end.
/// Inside the form, one line is as likely as another where the indentation
/// cannot tell, so no other place is ever chosen.
pub(super) fn by_least_disagreement(
    text: &str,
    parse: &cst::Parse,
) -> Option<(String, Vec<Change>)> {
    let layout = Layout::of(text, parse);
    let lines = &layout.lines;
    let (start, end, net) = the_broken_form(text, &layout)?;
    let form = &text[start..end];
    let (at, repaired_form) = the_best_place(form, net)?;
    let offset = start + at;
    let (line, column) = lines.line_col(offset);
    let change = Change {
        added: net == 1,
        count: 1,
        offset,
        line,
        column,
    };
    let repaired = format!("{}{}{}", &text[..start], repaired_form, &text[end..]);
    let after = cst::parse(&repaired);
    if !after.is_ok() {
        return None;
    }
    let span = lines.line_col(start).0..=lines.line_col(end.saturating_sub(1).max(start)).0;
    let broken = [(span, start)];
    let changes = vec![change];
    if implausible_form(&repaired, &after, &changes, &broken, false).is_some()
        || indented_at_top_level(&repaired, &after, &broken).is_some()
    {
        return None;
    }
    Some((repaired, changes))
}

/// The one form of `text` whose parentheses do not balance, as the byte
/// range of its lines, with its balance: 1 for one `)` short, -1 for one
/// too many. None when more than one form is broken, the count is off by
/// more than one, or the form is too long to weigh.
fn the_broken_form(text: &str, layout: &Layout) -> Option<(usize, usize, i64)> {
    let (lines, toks, groups) = (&layout.lines, &layout.toks, &layout.groups);
    let ctx = layout.ctx(text, false);
    let segs = segments(groups);
    let mut broken = units(&ctx, &segs).into_iter().filter(|u| !u.balanced);
    let unit = broken.next()?;
    if broken.next().is_some() {
        return None;
    }
    let unit_groups =
        segs[unit.segments.start].groups.start..segs[unit.segments.end - 1].groups.end;
    let (net, low) = seg_balance(
        &ctx,
        &Segment {
            groups: unit_groups.clone(),
        },
    );
    if !((net == 1 && low == 0) || (net == -1 && low == -1)) {
        return None;
    }
    // A list opened after a string that spans lines stands at a column of
    // the string's text: its elements' columns say nothing.
    if unit_groups.clone().any(|g| {
        let first_line = lines.line_col(toks[groups[g].toks.start].start).0;
        groups[g]
            .toks
            .clone()
            .any(|t| toks[t].kind == TokKind::Open && lines.line_col(toks[t].start).0 != first_line)
    }) {
        return None;
    }
    let line_start = |at: usize| text[..at].rfind('\n').map_or(0, |i| i + 1);
    let start = line_start(toks[groups[unit_groups.start].toks.start].start);
    let end = groups
        .get(unit_groups.end)
        .map_or(text.len(), |g| line_start(toks[g.toks.start].start));
    // Each place costs a reading of the form: a long run (an unclosed form
    // near the top of a long file) is left to the rule above.
    if (end - start) * unit_groups.len() > 4 << 20 {
        return None;
    }
    Some((start, end, net))
}

/// In `form`, one `)` short (`net` 1) or over (-1): the place for that
/// `)` and the form with it, when the form's end is the one place that
/// reads and leaves the fewest lines lined up with nothing.
fn the_best_place(form: &str, net: i64) -> Option<(usize, String)> {
    let form_layout = Layout::of(form, &cst::parse(form));
    let (form_toks, form_groups) = (&form_layout.toks, &form_layout.groups);
    // Where a closer could go in (after each line's code and closers) or
    // come off (each line's last closer), as offsets in `form`.
    let places: Vec<usize> = form_groups
        .iter()
        .filter(|g| g.code)
        .filter_map(|g| {
            if net == 1 {
                Some(g.insert_at)
            } else {
                (!g.trail.is_empty()).then(|| form_toks[g.trail.end - 1].start)
            }
        })
        .collect();
    let last_place = *places.last()?;
    let mut scored: Vec<(usize, usize, String)> = Vec::new();
    for at in places {
        let candidate = if net == 1 {
            format!("{}){}", &form[..at], &form[at..])
        } else {
            format!("{}{}", &form[..at], &form[at + 1..])
        };
        let p = cst::parse(&candidate);
        if !p.is_ok() {
            continue;
        }
        if scored.iter().any(|(_, _, t)| *t == candidate) {
            continue;
        }
        let layout = Layout::of(&candidate, &p);
        if moves_against_indentation(&candidate, &layout, at, net == 1)
            || holds_what_no_one_writes(&candidate, &p, at, net == 1)
        {
            continue;
        }
        scored.push((misaligned_lines(&candidate, &layout), at, candidate));
    }
    scored.sort_by_key(|(n, _, _)| *n);
    let (best, at, repaired_form) = scored.first()?;
    if *best == usize::MAX || scored.get(1).is_some_and(|(n, _, _)| n == best) {
        return None;
    }
    // Only the end: where the indentation cannot say, a closer dropped or
    // doubled inside the form is as likely at one line as at another, but
    // the last line is where a writer most often miscounts.
    if *at < last_place {
        return None;
    }
    Some((*at, repaired_form.clone()))
}

/// Whether the list a closer placed at `at` closes (`added`), or the list
/// whose closer came off at `at`, then holds its lines against the
/// indentation rule: a list closed at a line's end while the next code line
/// is indented right of its opener (`(loop for x in l)` /
/// `      collect x`), or a list kept open over a line at or left of its
/// opener.
fn moves_against_indentation(text: &str, layout: &Layout, at: usize, added: bool) -> bool {
    let toks = &layout.toks;
    let mut stack = Vec::new();
    // The list in question, by its opener, and where it closes.
    let mut list: Option<(usize, usize)> = None;
    for (i, t) in toks.iter().enumerate() {
        if !added && list.is_none() && t.start >= at {
            if let Some(&o) = stack.last() {
                list = Some((o, usize::MAX));
            }
        }
        match t.kind {
            TokKind::Open => stack.push(i),
            TokKind::Close => {
                let o = stack.pop();
                match (&mut list, o) {
                    (Some((lo, end)), Some(o)) if *lo == o => *end = i,
                    (None, Some(o)) if added && t.start == at => list = Some((o, i)),
                    _ => {}
                }
            }
            _ => {}
        }
    }
    let Some((open, close)) = list else {
        return false;
    };
    let col = toks[open].col;
    let line_starts = |range: std::ops::Range<usize>| {
        toks[range]
            .iter()
            .filter(|t| t.first_on_line && matches!(t.kind, TokKind::Open | TokKind::Code))
            .map(|t| t.col)
            .collect::<Vec<_>>()
    };
    if added {
        // The next line's start, if it is code.
        let next = toks[close + 1..]
            .iter()
            .find(|t| t.first_on_line && t.kind != TokKind::Comment);
        next.is_some_and(|t| {
            t.kind != TokKind::Close
                && t.col > col
                && lines_up_inside(text, layout, open, close, t.col)
        })
    } else {
        let from = toks.partition_point(|t| t.start < at);
        line_starts(from..close.min(toks.len()))
            .iter()
            .any(|&x| x <= col)
    }
}

/// Whether `text`, a form with one `)` added or removed at `at`, holds a
/// form no one writes (`implausible_form`: an operator without its body, a
/// form with too many arguments) or a line indented where nothing is open.
fn holds_what_no_one_writes(text: &str, parse: &cst::Parse, at: usize, added: bool) -> bool {
    let lines = LineIndex::new(text);
    let (line, column) = lines.line_col(at);
    let change = Change {
        added,
        count: 1,
        offset: at,
        line,
        column,
    };
    let all = [(1..=lines.line_count(), 0)];
    implausible_form(text, parse, &[change], &all, false).is_some()
        || indented_at_top_level(text, parse, &all).is_some()
}

/// Whether a line at visual column `x` lines up as an element of the list
/// opened by token `open` and closed by token `close` (strictly, as an
/// editor indents: see `lines_up`).
fn lines_up_inside(text: &str, layout: &Layout, open: usize, close: usize, x: usize) -> bool {
    let toks = &layout.toks;
    let ctx = layout.ctx(text, true);
    let mut elements = Vec::new();
    let mut depth = 0usize;
    for (i, t) in toks.iter().enumerate().take(close).skip(open + 1) {
        match t.kind {
            TokKind::Open => {
                if depth == 0 {
                    elements.push(i);
                }
                depth += 1;
            }
            TokKind::Close => depth = depth.saturating_sub(1),
            TokKind::Code if depth == 0 => elements.push(i),
            _ => {}
        }
    }
    lines_up(&ctx, open, &elements, x, true)
}

/// How many code lines of `text` (which reads) start at a column that
/// lines up with nothing in the list they stand in (`lines_up`), or, at top
/// level, right of the base column. A line at the base column in a
/// wrapper of top-level forms opened there (`(eval-when (...)` /
/// `(defun f ...)`, a body written flush left) counts as lined up; in any
/// other list it disqualifies the text (`usize::MAX`).
fn misaligned_lines(text: &str, layout: &Layout) -> usize {
    let (toks, groups) = (&layout.toks, &layout.groups);
    let ctx = layout.ctx(text, false);
    let base = groups.iter().find_map(|g| g.indent).unwrap_or(0);
    let mut stack: Vec<(usize, Vec<usize>)> = Vec::new();
    let mut count = 0;
    for g in groups.iter().filter(|g| g.code) {
        if let Some(x) = g.indent {
            let off = match stack.last() {
                Some((o, elements)) => {
                    if x == base && !(toks[*o].col == base && wraps_top_level_forms(&ctx, *o)) {
                        // A line at the base column inside a form starts the
                        // next form: no count makes up for that.
                        return usize::MAX;
                    }
                    !lines_up(&ctx, *o, elements, x, false) && x != base
                }
                None => x != base,
            };
            count += usize::from(off);
        }
        for t in g.toks.clone() {
            match toks[t].kind {
                TokKind::Open | TokKind::Code => push_element(&mut stack, t, toks[t].kind),
                TokKind::Close => {
                    stack.pop();
                }
                TokKind::Comment => {}
            }
        }
    }
    count
}
