//! The indentation rule (the module documentation's first part): closers
//! placed where the indentation closes the lists, per segment, with the
//! refusals where the indentation is not evidence enough.

use super::apply::apply;
use super::lines::{
    line_groups, push_element, seg_balance, segments, units, Ctx, Edit, Group, Layout, Segment,
    TokKind, Unit,
};
use super::plausible::{implausible_form, indented_at_top_level};
use super::shape::{lines_up, takes_a_body};
use super::{form_label, Change, Refusal, Repair};
use crate::cst::{self, Construct, LineIndex, SyntaxErrorKind};

/// The lines of a run that does not balance, with the offset of its first
/// token: where the checks on the repaired text look.
type BrokenLines = Vec<(std::ops::RangeInclusive<usize>, usize)>;

/// A refusal, and whether it came from a line after a removed closer that
/// lines up with nothing (where the second reading may still place them).
type SegmentRefusal = (Refusal, bool);

/// The indentation rule (the module documentation's first part).
/// `parse` is `text`'s, and holds trouble with parentheses
/// (`paren_trouble`).
pub(super) fn by_indentation(text: &str, parse: &cst::Parse) -> Repair {
    let layout = Layout::of(text, parse);
    let lines = &layout.lines;
    let kept_groups = line_groups(text, &layout.toks, true);
    let ctx = layout.ctx(text, false);
    if let Some(r) = unclosed_construct(&ctx, parse) {
        return Repair::Refused(r);
    }
    let (mut edits, broken_lines) = match infer_units(&ctx, &kept_groups) {
        Ok(found) => found,
        Err(r) => return Repair::Refused(r),
    };
    if edits.is_empty() {
        let e = &parse.errors[0];
        let at = e.open_offset.unwrap_or(e.offset);
        return Repair::Refused(ctx.refusal(
            ctx.form_start_before(at),
            lines.line_col(e.offset).0,
            e.message(lines),
            "fix the parentheses by hand (lisp-check-parens shows where)".into(),
        ));
    }
    edits.sort_by_key(|(g, _)| *g);
    let (repaired, changes) = apply(&ctx, &edits);
    match check_repaired(&ctx, &repaired, &changes, &broken_lines) {
        Some(r) => Repair::Refused(r),
        None => Repair::Repaired {
            text: repaired,
            changes,
        },
    }
}

/// Constructs no closer can end (an unclosed string, block comment,
/// `|symbol|` or escape): refused before looking at parentheses. (Nesting
/// too deep is refused before the repair starts, in `refused_at_once`.)
fn unclosed_construct(ctx: &Ctx, parse: &cst::Parse) -> Option<Refusal> {
    let lines = ctx.lines;
    let e = parse.errors.iter().find(|e| {
        matches!(
            e.kind,
            SyntaxErrorKind::Unclosed(
                Construct::String
                    | Construct::BlockComment
                    | Construct::MultipleEscape
                    | Construct::SingleEscape
                    | Construct::Character
            )
        )
    })?;
    let at = e.open_offset.unwrap_or(e.offset);
    let (line, column) = lines.line_col(at);
    let (reason, fix) = match e.kind {
        SyntaxErrorKind::Unclosed(Construct::String) => (
            format!("the string opened at line {line}, column {column} never closes"),
            "add the closing `\"` where the string ends (a `\"` inside it is written `\\\"`)"
                .to_string(),
        ),
        SyntaxErrorKind::Unclosed(Construct::BlockComment) => (
            format!("the `#|` comment opened at line {line}, column {column} never closes"),
            "add `|#` where the comment ends".to_string(),
        ),
        SyntaxErrorKind::Unclosed(Construct::MultipleEscape) => (
            format!("the `|` at line {line}, column {column} opens a |symbol| that never closes"),
            "add the closing `|`, or write a literal bar as `\\|`".to_string(),
        ),
        _ => (
            format!("the text ends inside an escape at line {line}, column {column}"),
            "complete the character or escape at the end".to_string(),
        ),
    };
    Some(ctx.refusal(ctx.form_start_before(at), line, reason, fix))
}

/// The edits of every run of segments that does not balance, with the
/// lines of those runs (for the checks on the repaired text).
fn infer_units(
    ctx: &Ctx,
    kept_groups: &[Group],
) -> Result<(Vec<(usize, Edit)>, BrokenLines), Refusal> {
    let segments = segments(ctx.groups);
    let mut edits: Vec<(usize, Edit)> = Vec::new();
    // Lines of the runs that do not balance, for the check below.
    let mut broken_lines = Vec::new();
    for unit in units(ctx, &segments) {
        if unit.balanced {
            continue;
        }
        let first = ctx.groups[segments[unit.segments.start].groups.start]
            .toks
            .start;
        let last = ctx.groups[segments[unit.segments.end - 1].groups.end - 1]
            .toks
            .end
            - 1;
        broken_lines.push((
            ctx.lines.line_col(ctx.toks[first].start).0..=ctx.lines.line_col(ctx.toks[last].end).0,
            ctx.toks[first].start,
        ));
        let mut unit_edits = Vec::new();
        for seg in &segments[unit.segments.clone()] {
            if seg_balance(ctx, seg) == (0, 0) {
                continue;
            }
            unit_edits.extend(infer_segment_either_way(ctx, kept_groups, seg)?);
        }
        let adds = unit_edits.iter().any(|(_, e)| e.new > e.old);
        let removes = unit_edits.iter().any(|(_, e)| e.new < e.old);
        if adds && removes {
            return Err(adds_and_removes(ctx, &segments, &unit, &unit_edits));
        }
        edits.extend(unit_edits);
    }
    Ok((edits, broken_lines))
}

/// The edits of one segment by the indentation rule, or, where a line
/// after a removed closer lines up with nothing, by the second reading.
fn infer_segment_either_way(
    ctx: &Ctx,
    kept_groups: &[Group],
    seg: &Segment,
) -> Result<Vec<(usize, Edit)>, Refusal> {
    // Where a line after a removed closer lines up with nothing,
    // a second reading keeps the lists a line opens and closes
    // itself as written (`(cond ((zerop n)` / `        body)`: a
    // body indented under its clause, not its test). Both readings
    // place closers only at line ends, so their edits apply alike.
    infer_segment(ctx, seg).or_else(|(r, removal)| {
        if !removal {
            return Err(r);
        }
        infer_segment(
            &Ctx {
                groups: kept_groups,
                strict: true,
                ..*ctx
            },
            seg,
        )
        .ok()
        .filter(|e| {
            // Closers it removes come off the segment's last line.
            let last = (seg.groups.clone()).rfind(|&g| ctx.groups[g].code);
            e.iter().all(|(g, e)| e.new > e.old || Some(*g) == last)
        })
        .ok_or(r)
    })
}

/// The refusal of a run whose edits would both add and remove closers.
fn adds_and_removes(
    ctx: &Ctx,
    segments: &[Segment],
    unit: &Unit,
    unit_edits: &[(usize, Edit)],
) -> Refusal {
    let first = &segments[unit.segments.start];
    let changes: Vec<String> = unit_edits
        .iter()
        .map(|(g, e)| ctx.change_of(*g, e).to_string())
        .collect();
    let line = unit_edits
        .iter()
        .find(|(_, e)| e.new < e.old)
        .map_or(0, |(g, _)| ctx.group_line(*g));
    ctx.refusal(
        ctx.toks[ctx.groups[first.groups.start].toks.start].start,
        line,
        "the indentation disagrees with the parentheses in more than one place \
         (it would both add and remove closers)"
            .into(),
        format!(
            "indent the lines as their structure is, or place the closers yourself; \
             the indentation alone suggests: {}",
            changes.join("; ")
        ),
    )
}

/// The checks on the text with the closers placed: it must read, hold no
/// form no one writes, and no line indented where nothing is open.
fn check_repaired(
    ctx: &Ctx,
    repaired: &str,
    changes: &[Change],
    broken_lines: &BrokenLines,
) -> Option<Refusal> {
    let text = ctx.text;
    let after = cst::parse(repaired);
    if let Some(e) = after.errors.first() {
        let lines_after = LineIndex::new(repaired);
        let at = e.open_offset.unwrap_or(e.offset);
        return Some(ctx.refusal(
            ctx.form_start_before(at.min(text.len())),
            lines_after.line_col(e.offset).0,
            format!(
                "with the closers placed by indentation ({}), the text still does not read: {}",
                changes
                    .iter()
                    .map(|c| c.to_string())
                    .collect::<Vec<_>>()
                    .join("; "),
                e.message(&lines_after)
            ),
            "fix that error; the parentheses may then balance".into(),
        ));
    }
    if let Some(r) = implausible_form(repaired, &after, changes, broken_lines, true) {
        return Some(r);
    }
    if let Some((line, form_at)) = indented_at_top_level(repaired, &after, broken_lines) {
        return Some(ctx.refusal(
            form_at,
            line,
            format!(
                "line {line} is indented as if inside a form, but with the closers its \
                 indentation calls for ({}) nothing is open there",
                changes
                    .iter()
                    .map(|c| c.to_string())
                    .collect::<Vec<_>>()
                    .join("; ")
            ),
            format!(
                "indent line {line} as its structure is (a new top-level form starts at column \
                 0), or place the missing \")\" yourself"
            ),
        ));
    }
    None
}

/// The pairs of the segment's parentheses as the text reads (ignoring
/// indentation): the partner of every closer and the closer of every
/// opener, by token (`usize::MAX` for none).
struct Pairs {
    partner: Vec<usize>,
    closer_of: Vec<usize>,
}

fn pair_closers(ctx: &Ctx, seg: &Segment) -> Pairs {
    let toks = ctx.toks;
    // The partner of every closer as the text reads (ignoring indentation).
    let mut partner = vec![usize::MAX; toks.len()];
    // And the closer of every opener.
    let mut closer_of = vec![usize::MAX; toks.len()];
    let mut stack = Vec::new();
    let range = ctx.groups[seg.groups.start].toks.start..ctx.groups[seg.groups.end - 1].toks.end;
    for i in range {
        match toks[i].kind {
            TokKind::Open => stack.push(i),
            TokKind::Close => {
                if let Some(o) = stack.pop() {
                    partner[i] = o;
                    closer_of[o] = i;
                }
            }
            _ => {}
        }
    }
    Pairs { partner, closer_of }
}

/// What the indentation walk over a segment's lines finds, per group of
/// the segment (by its index in the segment).
struct Walk {
    /// The number of closers the indentation puts at the group's end.
    new_trail: Vec<usize>,
    /// The list the line's first token lands in does not line up with it
    /// (see `lines_up`), with that list's opener.
    misaligned: Vec<Option<usize>>,
    /// The same, for a line after a removed closer: the strict reading.
    misaligned_strict: Vec<Option<usize>>,
    /// The lists its trail closes, by the indentation.
    closed_at: Vec<Vec<usize>>,
}

/// Runs the indentation rule over one segment: the inferred trail of every
/// group whose trail changes. A refusal says too whether it came from a
/// line after a removed closer that lines up with nothing.
fn infer_segment(ctx: &Ctx, seg: &Segment) -> Result<Vec<(usize, Edit)>, SegmentRefusal> {
    let pairs = pair_closers(ctx, seg);
    let walk = walk_lines(ctx, seg, &pairs)?;
    let mut edits = Vec::new();
    for run in &runs_of_closers(ctx, seg) {
        edits.extend(edit_run(ctx, seg, run, &pairs, &walk)?);
    }
    edits.sort_by_key(|(g, _)| *g);
    Ok(edits)
}

/// The indentation walk: every code line closes the open lists whose
/// openers stand at or right of its indentation (their closers go at the
/// end of the code line before it); the lists the text ends in close at
/// its last code line.
fn walk_lines(ctx: &Ctx, seg: &Segment, pairs: &Pairs) -> Result<Walk, SegmentRefusal> {
    let toks = ctx.toks;
    let seg_start = toks[ctx.groups[seg.groups.start].toks.start].start;
    // Open lists, each with the columns where its direct elements start.
    let mut stack: Vec<(usize, Vec<usize>)> = Vec::new();
    let mut walk = Walk {
        new_trail: vec![0usize; seg.groups.len()],
        misaligned: vec![None; seg.groups.len()],
        misaligned_strict: vec![None; seg.groups.len()],
        closed_at: vec![Vec::new(); seg.groups.len()],
    };
    let mut last_code: Option<usize> = None;
    for (k, gi) in seg.groups.clone().enumerate() {
        let g = &ctx.groups[gi];
        if !g.code {
            continue;
        }
        let closes = |o: usize| match (g.indent, g.closer_indent) {
            (Some(x), _) => toks[o].col >= x,
            (None, Some(x)) => toks[o].col > x,
            _ => false,
        };
        let before = stack.len();
        while let Some((o, _)) = stack.pop_if(|(o, _)| closes(*o)) {
            if let Some(prev) = last_code {
                walk.closed_at[prev].push(o);
            }
        }
        if let Some(prev) = last_code {
            walk.new_trail[prev] += before - stack.len();
        }
        if let Some(x) = g.indent {
            if k > 0 && stack.is_empty() && before > 0 && x > 0 {
                let line = ctx.lines.line_col(toks[g.toks.start].start).0;
                let prev_line = last_code.map_or(line, |p| ctx.group_line(seg.groups.start + p));
                return Err((
                    ctx.refusal(
                        seg_start,
                        line,
                        format!(
                            "line {line} is indented as if inside the form, but by the \
                             indentation every list open before it already closes at line \
                             {prev_line}"
                        ),
                        format!(
                            "indent line {line} as its structure is (a new top-level form starts \
                             at column 0), or place the missing \")\" yourself"
                        ),
                    ),
                    false,
                ));
            }
            if let Some((o, cols)) = stack.last() {
                if !lines_up(ctx, *o, cols, x, ctx.strict) {
                    walk.misaligned[k] = Some(*o);
                }
                if !lines_up(ctx, *o, cols, x, true) {
                    walk.misaligned_strict[k] = Some(*o);
                }
            }
        }
        read_line(ctx, g, seg_start, pairs, &mut stack)?;
        last_code = Some(k);
    }
    if let Some(prev) = last_code {
        walk.new_trail[prev] += stack.len();
        walk.closed_at[prev].extend(stack.iter().rev().map(|(o, _)| *o));
    }
    Ok(walk)
}

/// The tokens of one line before its trail, on the stack of open lists:
/// openers open, code is an element, and a closer inside the line must
/// close the list it closes as the text reads, or the indentation and the
/// structure disagree there.
fn read_line(
    ctx: &Ctx,
    g: &Group,
    seg_start: usize,
    pairs: &Pairs,
    stack: &mut Vec<(usize, Vec<usize>)>,
) -> Result<(), SegmentRefusal> {
    let toks = ctx.toks;
    let partner = &pairs.partner;
    for t in g.toks.clone() {
        if g.trail.contains(&t) {
            continue;
        }
        match toks[t].kind {
            TokKind::Open | TokKind::Code => push_element(stack, t, toks[t].kind),
            TokKind::Close => {
                let (line, column) = ctx.lines.line_col(toks[t].start);
                match stack.pop().map(|(o, _)| o) {
                    Some(o) if o == partner[t] => {}
                    Some(o) => {
                        let (ol, oc) = ctx.lines.line_col(toks[o].start);
                        let (pl, pc) = if partner[t] == usize::MAX {
                            (ol, oc)
                        } else {
                            ctx.lines.line_col(toks[partner[t]].start)
                        };
                        return Err((
                            ctx.refusal(
                                seg_start,
                                line,
                                format!(
                                    "the \")\" at line {line}, column {column} is inside the \
                                     line; it closes the \"(\" at line {pl}, column {pc}, but \
                                     by the indentation it would close the one at line {ol}, \
                                     column {oc}"
                                ),
                                format!(
                                    "move that \")\" to where the list it closes ends, or \
                                     indent line {line} to match the structure"
                                ),
                            ),
                            false,
                        ));
                    }
                    None => {
                        return Err((
                            ctx.refusal(
                                seg_start,
                                line,
                                format!(
                                    "the \")\" at line {line}, column {column} is inside the \
                                     line and closes nothing"
                                ),
                                "delete that \")\" or add the \"(\" it was meant to close"
                                    .to_string(),
                            ),
                            false,
                        ));
                    }
                }
            }
            TokKind::Comment => {}
        }
    }
    Ok(())
}

/// A code line's trail and the lines of closers alone after it (with
/// only comments between) are one run of closers: moving closers within
/// a run changes the layout, not the forms, so only a run's count is
/// compared, and a change goes at the run's end (where a model that
/// writes closers on lines of their own dropped or doubled one). Runs
/// hold groups by their index in the segment.
fn runs_of_closers(ctx: &Ctx, seg: &Segment) -> Vec<Vec<usize>> {
    let mut runs: Vec<Vec<usize>> = Vec::new();
    for (k, gi) in seg.groups.clone().enumerate() {
        let g = &ctx.groups[gi];
        if !g.code {
            continue;
        }
        let closers_only = g.closer_indent.is_some() && g.trail.start == g.toks.start;
        match runs.last_mut() {
            Some(run) if closers_only => run.push(k),
            _ => runs.push(vec![k]),
        }
    }
    runs
}

/// The edits of one run of closers whose count the indentation changes,
/// or a refusal where the indentation is not evidence enough.
///
/// Where a run's count changes, the next code line lands in another list
/// than the text says, and where closers are added, the lists they
/// close hold lines the text put elsewhere: those lines must line up
/// with the list the indentation puts them in, or the indentation is
/// not evidence enough (code indented by hand, off by a column).
fn edit_run(
    ctx: &Ctx,
    seg: &Segment,
    run: &[usize],
    pairs: &Pairs,
    walk: &Walk,
) -> Result<Vec<(usize, Edit)>, SegmentRefusal> {
    let trail_len = |k: usize| ctx.groups[seg.groups.start + k].trail.len();
    let mut edits = Vec::new();
    let (first, last) = (run[0], run[run.len() - 1]);
    let old: usize = run.iter().map(|&k| trail_len(k)).sum();
    let inferred: usize = run.iter().map(|&k| walk.new_trail[k]).sum();
    if old == inferred {
        return Ok(edits);
    }
    // The lists the text itself closes elsewhere (or not at all): the
    // ones whose extent the repair sets.
    let in_run = |c: usize| {
        run.iter()
            .any(|&k| ctx.groups[seg.groups.start + k].trail.contains(&c))
    };
    let closed: Vec<usize> = run
        .iter()
        .flat_map(|&k| walk.closed_at[k].iter().copied())
        .collect();
    let moved: Vec<usize> = closed
        .iter()
        .copied()
        .filter(|&o| !in_run(pairs.closer_of[o]))
        .collect();
    refuse_after_a_string_over_lines(ctx, seg, &moved)?;
    let change = if inferred > old {
        Edit {
            old: trail_len(last),
            new: trail_len(last) + inferred - old,
        }
    } else {
        Edit {
            old: trail_len(last),
            new: trail_len(last).saturating_sub(old - inferred),
        }
    };
    let changed = ctx.change_of(seg.groups.start + last, &change);
    if inferred > old {
        refuse_a_form_without_its_body(ctx, seg, first, &moved)?;
    }
    refuse_a_line_lined_up_with_nothing(ctx, seg, walk, (last, inferred > old), &closed, &changed)?;
    // Closers to remove come off the run's end, line by line.
    let mut surplus = old.saturating_sub(inferred);
    if inferred > old {
        edits.push((seg.groups.start + last, change));
    }
    for &k in run.iter().rev() {
        if surplus == 0 {
            break;
        }
        let have = trail_len(k);
        let take = have.min(surplus);
        if take > 0 {
            edits.push((
                seg.groups.start + k,
                Edit {
                    old: have,
                    new: have - take,
                },
            ));
        }
        surplus -= take;
    }
    Ok(edits)
}

/// A list opened after a string that spans lines: its column is one
/// of the string's last line, which says little about where the
/// lines after it belong.
fn refuse_after_a_string_over_lines(
    ctx: &Ctx,
    seg: &Segment,
    moved: &[usize],
) -> Result<(), SegmentRefusal> {
    let toks = ctx.toks;
    let seg_start = toks[ctx.groups[seg.groups.start].toks.start].start;
    if let Some(&o) = moved.iter().find(|&&o| {
        let g = ctx.groups.partition_point(|g| g.toks.end <= o);
        ctx.lines.line_col(toks[o].start).0
            != ctx.lines.line_col(toks[ctx.groups[g].toks.start].start).0
    }) {
        let (ol, oc) = ctx.lines.line_col(toks[o].start);
        return Err((
            ctx.refusal(
                seg_start,
                ol,
                format!(
                    "the list opened at line {ol}, column {oc} follows a string that spans \
                     lines, so its indentation does not say where it ends"
                ),
                "place the missing or extra \")\" yourself".into(),
            ),
            false,
        ));
    }
    Ok(())
}

/// An operator that takes a body (see `takes_a_body`) that added closers
/// would close on the run's first line.
fn refuse_a_form_without_its_body(
    ctx: &Ctx,
    seg: &Segment,
    first: usize,
    moved: &[usize],
) -> Result<(), SegmentRefusal> {
    let toks = ctx.toks;
    let seg_start = toks[ctx.groups[seg.groups.start].toks.start].start;
    if let Some(&o) = moved.iter().find(|&&o| {
        ctx.lines.line_col(toks[o].start).0 == ctx.group_line(seg.groups.start + first)
            && takes_a_body(ctx, o)
    }) {
        let (ol, _) = ctx.lines.line_col(toks[o].start);
        return Err((
            ctx.refusal(
                seg_start,
                ol,
                format!(
                    "by the indentation `{}` would close on its own line {ol}, without a \
                     body, and the lines after it would stand at top level",
                    form_label(&ctx.text[toks[o].start..])
                ),
                "indent its body under it, or place the missing \")\" yourself".into(),
            ),
            false,
        ));
    }
    Ok(())
}

/// The next code line after the run (`last`, its last group) and, where
/// closers are added (`adds`), every line inside the lists they close
/// (`closed`; the text may have paired those lists with other closers, so
/// all of them count) must line up with the list the indentation puts them
/// in. `changed` is the run's change, for the message.
fn refuse_a_line_lined_up_with_nothing(
    ctx: &Ctx,
    seg: &Segment,
    walk: &Walk,
    (last, adds): (usize, bool),
    closed: &[usize],
    changed: &Change,
) -> Result<(), SegmentRefusal> {
    let toks = ctx.toks;
    let seg_start = toks[ctx.groups[seg.groups.start].toks.start].start;
    let next = (last + 1..seg.groups.len()).find(|&j| {
        let g = &ctx.groups[seg.groups.start + j];
        g.code && g.indent.is_some()
    });
    // Where closers are added, every line inside the lists they close
    // (the text may have paired those lists with other closers, so all
    // of them count).
    let inside = adds
        .then(|| {
            walk.misaligned
                .iter()
                .enumerate()
                .find_map(|(j, m)| m.filter(|o| closed.contains(o)).map(|o| (j, o)))
        })
        .flatten();
    let after = if adds {
        &walk.misaligned
    } else {
        &walk.misaligned_strict
    };
    if let Some((j, o)) = next.and_then(|j| after[j].map(|o| (j, o))).or(inside) {
        let g = &ctx.groups[seg.groups.start + j];
        let (line, column) = ctx.lines.line_col(toks[g.toks.start].start);
        let (ol, oc) = ctx.lines.line_col(toks[o].start);
        return Err((
            ctx.refusal(
                seg_start,
                line,
                format!(
                    "by the indentation line {line} belongs to the list opened at line {ol}, \
                     column {oc} (which needs {changed}), but its column {column} lines up \
                     with nothing in that list"
                ),
                format!(
                    "indent line {line} under the list it belongs to, or place the closers \
                     yourself (the indentation alone suggests: {changed})"
                ),
            ),
            !adds,
        ));
    }
    Ok(())
}
