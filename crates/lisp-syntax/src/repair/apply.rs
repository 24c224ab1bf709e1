//! The edits of the indentation rule applied to the text.

use super::lines::{Ctx, Edit};
use super::Change;

/// The repaired text and its changes.
pub(super) fn apply(ctx: &Ctx, edits: &[(usize, Edit)]) -> (String, Vec<Change>) {
    let text = ctx.text;
    let mut out = String::with_capacity(text.len() + 16);
    let mut changes = Vec::with_capacity(edits.len());
    let mut pos = 0;
    for &(g, e) in edits {
        let change = ctx.change_of(g, &e);
        if e.new > e.old {
            out.push_str(&text[pos..change.offset]);
            out.push_str(&")".repeat(e.new - e.old));
            pos = change.offset;
        } else {
            let grp = &ctx.groups[g];
            for t in grp.trail.end - (e.old - e.new)..grp.trail.end {
                let tok = ctx.toks[t];
                out.push_str(&text[pos..tok.start]);
                pos = tok.end;
            }
        }
        changes.push(change);
    }
    out.push_str(&text[pos..]);
    (out, changes)
}
