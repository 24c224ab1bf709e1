//! A fast delimiter scanner for Common Lisp text.
//!
//! Why a second reader next to `lisp_syntax::cst`: the CST builds a node for
//! every token (about 13 ms for SBCL's 1 MB `enc-jpn-tbl.lisp`), while
//! paren checking, collapsed views and grep only need to know where forms
//! start and end. This scanner follows exactly the CST reader's lexical
//! rules (strings, `;` and nested `#| |#` comments, `\` and `|...|` escapes,
//! `#\x` characters, the extents of unknown dispatch macros such as `#?"..."`
//! and `#[...]`) but keeps only a stack of open positions, so it runs at
//! memory speed. The unit tests below hold it to the CST on nasty snippets,
//! 20,000 random texts and SBCL's sources: same top-level spans, same
//! delimiter errors. The structural tools still read text with the CST where they
//! need a tree (edit validation, names, lambda lists).

use std::ops::Range;

use lisp_syntax::cst::Extents;

/// Whitespace in the standard readtable.
fn is_ws(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | b'\r' | 0x0C)
}

/// Characters that end a token: whitespace and terminating macro characters.
fn ends_token(b: u8) -> bool {
    is_ws(b) || matches!(b, b'"' | b'\'' | b'(' | b')' | b',' | b';' | b'`')
}

/// Width of the UTF-8 character whose first byte is `b`.
fn utf8_width(b: u8) -> usize {
    match b {
        0..=0x7F => 1,
        0xC0..=0xDF => 2,
        0xE0..=0xEF => 3,
        0xF0..=0xFF => 4,
        _ => 1,
    }
}

/// Something that can be left open.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Opener {
    /// `(`
    List,
    /// `#(`
    Vector,
    /// `"`
    String,
    /// `#|`
    BlockComment,
    /// `|` in a symbol.
    MultipleEscape,
    /// `\` at the end of input.
    SingleEscape,
    /// `#\` at the end of input.
    Character,
}

impl Opener {
    /// The text that opens it.
    pub fn open_text(self) -> &'static str {
        match self {
            Opener::List => "(",
            Opener::Vector => "#(",
            Opener::String => "\"",
            Opener::BlockComment => "#|",
            Opener::MultipleEscape => "|",
            Opener::SingleEscape => "\\",
            Opener::Character => "#\\",
        }
    }

    /// The text that would close it.
    pub fn close_text(self) -> &'static str {
        match self {
            Opener::List | Opener::Vector => ")",
            Opener::String => "\"",
            Opener::BlockComment => "|#",
            Opener::MultipleEscape => "|",
            Opener::SingleEscape | Opener::Character => "a character",
        }
    }

    /// A short name for messages.
    pub fn describe(self) -> &'static str {
        match self {
            Opener::List => "list",
            Opener::Vector => "vector",
            Opener::String => "string",
            Opener::BlockComment => "block comment",
            Opener::MultipleEscape => "|escaped| symbol",
            Opener::SingleEscape => "escape",
            Opener::Character => "character literal",
        }
    }
}

/// A delimiter problem.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Problem {
    /// A `)` at `offset` with nothing open.
    ExtraClose { offset: usize },
    /// `what` opened at `open` never closes. `outer` is the outermost open
    /// list at the end of input (the top-level form), `suspect` the first
    /// `(def...` at column 0 seen inside that form, which usually marks
    /// where a `)` is missing.
    Unclosed {
        what: Opener,
        open: usize,
        outer: usize,
        suspect: Option<usize>,
    },
}

impl Problem {
    /// Where the problem is best shown: the stray `)` or the outermost
    /// unclosed opener.
    pub fn offset(&self) -> usize {
        match self {
            Problem::ExtraClose { offset } => *offset,
            Problem::Unclosed { outer, .. } => *outer,
        }
    }
}

/// What a top-level item is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ItemKind {
    /// A form (reader conditionals and quote prefixes included).
    Form,
    /// A `;` comment (one line, newline excluded).
    LineComment,
    /// A `#| |#` comment.
    BlockComment,
}

/// One top-level item; whitespace between items is not recorded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Item {
    pub kind: ItemKind,
    pub span: Range<usize>,
}

/// The result of [`scan`].
#[derive(Clone, Debug, Default)]
pub struct Scan {
    /// Forms and comments at top level, in order.
    pub items: Vec<Item>,
    /// The first delimiter problem, if any. Scanning goes on after an extra
    /// `)`; an unclosed construct runs to the end of input.
    pub problem: Option<Problem>,
}

impl Scan {
    /// The top-level forms (comments left out).
    pub fn forms(&self) -> impl Iterator<Item = &Range<usize>> + '_ {
        self.items
            .iter()
            .filter(|i| i.kind == ItemKind::Form)
            .map(|i| &i.span)
    }
}

/// Scans `src` into top-level items and the first delimiter problem, as
/// Lisp reads it: an unclosed list runs to the end of the input.
pub fn scan(src: &str) -> Scan {
    scan_items(src, false)
}

/// Like [`scan`], but as an editor reads a file with a broken form: an
/// unclosed list ends before the first line inside it that opens a form at
/// column 0, and scanning goes on from there, so one broken form does not
/// hide the forms after it. `problem` is still the first problem.
pub fn scan_recovering(src: &str) -> Scan {
    scan_items(src, true)
}

fn scan_items(src: &str, recover: bool) -> Scan {
    scan_items_with(src, recover, recover)
}

/// `learn`: whether a recovering scan keeps what its first unclosed walk
/// learned (off only in the tests, which compare the two).
fn scan_items_with(src: &str, recover: bool, learn: bool) -> Scan {
    let mut s = Scanner::new(src);
    if learn {
        s.learn = Some(Vec::new());
    }
    let b = src.as_bytes();
    let len = b.len();
    let mut out = Scan::default();
    let mut i = 0;
    while i < len {
        let c = b[i];
        if is_ws(c) {
            i += 1;
            continue;
        }
        if c == b';' {
            let end = memchr::memchr(b'\n', &b[i..]).map_or(len, |n| i + n);
            out.items.push(Item {
                kind: ItemKind::LineComment,
                span: i..end,
            });
            i = end;
            continue;
        }
        if let Some(after) = s.block_comment_start(i) {
            match s.block_comment_end(i, after) {
                Ok(end) => {
                    out.items.push(Item {
                        kind: ItemKind::BlockComment,
                        span: i..end,
                    });
                    i = end;
                }
                Err(p) => {
                    out.items.push(Item {
                        kind: ItemKind::BlockComment,
                        span: i..len,
                    });
                    out.problem.get_or_insert(p);
                    break;
                }
            }
            continue;
        }
        match s.skip_form(i) {
            Ok(end) => {
                out.items.push(Item {
                    kind: ItemKind::Form,
                    span: i..end,
                });
                i = end;
            }
            Err(Problem::ExtraClose { offset }) => {
                if offset > i {
                    out.items.push(Item {
                        kind: ItemKind::Form,
                        span: i..offset,
                    });
                }
                out.problem.get_or_insert(Problem::ExtraClose { offset });
                i = offset + 1;
            }
            Err(p) => {
                let list = matches!(
                    p,
                    Problem::Unclosed {
                        what: Opener::List | Opener::Vector,
                        ..
                    }
                );
                match s.restart.filter(|_| recover && list) {
                    Some(r) => {
                        let end = i + src[i..r].trim_end().len();
                        out.items.push(Item {
                            kind: ItemKind::Form,
                            span: i..end,
                        });
                        out.problem.get_or_insert(p);
                        i = r;
                    }
                    None => {
                        out.items.push(Item {
                            kind: ItemKind::Form,
                            span: i..len,
                        });
                        out.problem.get_or_insert(p);
                        break;
                    }
                }
            }
        }
    }
    out
}

/// The elements of the list or vector whose text is `src[span]` (which must
/// start with `(` or `#(`), in order, as spans. Stops at the closing `)` or
/// at the first problem; reads nothing after `span`.
pub fn elements(src: &str, span: Range<usize>) -> Elements<'_> {
    let b = src.as_bytes();
    let start = if b.get(span.start) == Some(&b'#') {
        // `#(` or `#3(`.
        let mut p = span.start + 1;
        while p < span.end && b[p].is_ascii_digit() {
            p += 1;
        }
        p + 1
    } else {
        span.start + 1
    };
    let is_list = matches!(b.get(start.wrapping_sub(1)), Some(b'('));
    Elements {
        // Reading stops at the span's end: what is after it is not read
        // (a search for the closer of an unknown `#` dispatch would read
        // to the end of the text for every form).
        scanner: Scanner::new(&src[..span.end.min(src.len())]),
        i: if is_list { start } else { span.end },
        end: span.end,
    }
}

/// Iterator returned by [`elements`].
pub struct Elements<'a> {
    scanner: Scanner<'a>,
    i: usize,
    end: usize,
}

impl Iterator for Elements<'_> {
    type Item = Range<usize>;

    fn next(&mut self) -> Option<Range<usize>> {
        let i = self.scanner.skip_trivia(self.i);
        if i >= self.end || self.scanner.b[i] == b')' {
            self.i = self.end;
            return None;
        }
        match self.scanner.skip_form(i) {
            Ok(e) if e <= self.end => {
                self.i = e;
                Some(i..e)
            }
            _ => {
                self.i = self.end;
                None
            }
        }
    }
}

/// If `src[span]` is a reader conditional (`#+feature form`, `#-feature
/// form`), its feature expression and guarded form.
pub fn conditional_parts(src: &str, span: Range<usize>) -> Option<(Range<usize>, Range<usize>)> {
    let b = src.as_bytes();
    if span.end < span.start + 2
        || b[span.start] != b'#'
        || !matches!(b[span.start + 1], b'+' | b'-')
    {
        return None;
    }
    let mut s = Scanner::new(&src[..span.end]);
    let f0 = s.skip_trivia(span.start + 2);
    let f1 = s.skip_form(f0).ok()?;
    let g0 = s.skip_trivia(f1);
    let g1 = s.skip_form(g0).ok()?;
    (g1 <= span.end && g0 < g1).then_some((f0..f1, g0..g1))
}

/// If a reader conditional starts at `start`, where its guarded form
/// starts (without finding where that form ends: unwrapping a chain of
/// conditionals stays linear).
pub fn guarded_start(src: &str, start: usize) -> Option<usize> {
    let b = src.as_bytes();
    if b.len() < start + 2 || b[start] != b'#' || !matches!(b[start + 1], b'+' | b'-') {
        return None;
    }
    let mut s = Scanner::new(src);
    let f0 = s.skip_trivia(start + 2);
    let f1 = s.skip_form(f0).ok()?;
    let g0 = s.skip_trivia(f1);
    (g0 < b.len()).then_some(g0)
}

/// The end of the form starting at `start`, if it reads to its end.
pub fn form_end(src: &str, start: usize) -> Option<usize> {
    Scanner::new(src).skip_form(start).ok()
}

/// The scanning machinery, reusable across calls.
pub struct Scanner<'a> {
    b: &'a [u8],
    /// Where strings, `|...|` and unknown dispatch macros end (the CST
    /// reader's guesses, remembered across walks).
    extents: Extents<'a>,
    stack: Vec<usize>,
    /// After [`Scanner::skip_form`] found a list it opened unclosed: the
    /// first `(` at column 0 inside it (outside strings and comments),
    /// where an editor would take the next top-level form to start.
    restart: Option<usize>,
    /// Set by [`scan_recovering`]: the `(` at column 0 that each walk passes
    /// outside strings and comments, in order, kept for [`Unclosed`].
    learn: Option<Vec<usize>>,
    /// What the first walk that ran to the end of the text with a list open
    /// learned, so that later walks from inside it do not read the rest of
    /// the text again (each would: a file of `(` lines is read once per line).
    unclosed: Option<Unclosed>,
}

/// The outcome, for every later walk, of the first walk that ended with
/// lists open at the end of the text. A walk that starts where that one was
/// outside strings and comments reads the rest of the text exactly as it
/// did, so a list it opens at a position that walk left open at the end is
/// open at the end for it too, and the next `(` at column 0 after that
/// position is inside it.
struct Unclosed {
    /// Where the lists (and vectors) still open at the end were opened, in
    /// order (the walk's stack at the end).
    open: Vec<usize>,
    /// Every `(` at column 0 the walk passed outside strings and comments.
    column_0: Vec<usize>,
    /// For each index of `column_0`, the index of the first at or after it
    /// that opens `(def...` (`column_0.len()` when none does).
    next_def: Vec<usize>,
}

/// What a `#` dispatch at token start turned out to be.
enum Dispatch {
    /// An atom ending here.
    Atom(usize),
    /// A prefix taking `n` forms; the next form starts here.
    Prefix(usize, usize),
    /// `#(`: a vector body starts here.
    OpenVector(usize),
    /// `#|`: a block comment body starts here.
    Comment(usize),
}

impl<'a> Scanner<'a> {
    /// A scanner over `src`.
    pub fn new(src: &'a str) -> Scanner<'a> {
        Scanner {
            b: src.as_bytes(),
            extents: Extents::new(src.as_bytes()),
            stack: Vec::new(),
            restart: None,
            learn: None,
            unclosed: None,
        }
    }

    /// What the opener at `i` (`(` or `#(`) opens.
    fn list_or_vector(&self, i: usize) -> Opener {
        if self.b[i] == b'#' {
            Opener::Vector
        } else {
            Opener::List
        }
    }

    /// Whether `i` opens `(def...`.
    fn opens_def(&self, i: usize) -> bool {
        self.b.len() > i + 4 && self.b[i + 1..i + 4].eq_ignore_ascii_case(b"def")
    }

    /// The problem of a walk that opens, at `open`, a list the first walk
    /// left open at the end: what that walk would find by reading on, told
    /// without reading. Nothing is open in this walk then (what it had open
    /// before `open` would be open at the end too, and it stops at the first
    /// of those), so the next `(` at column 0 after `open` is the restart.
    fn known_unclosed(&mut self, open: usize, suspect: Option<usize>) -> Problem {
        debug_assert!(self.stack.is_empty());
        let u = self
            .unclosed
            .as_ref()
            .expect("known_unclosed needs what was learned");
        let k = u.column_0.partition_point(|&c| c <= open);
        let restart = self.restart.or(u.column_0.get(k).copied());
        let suspect =
            suspect.or_else(|| u.next_def.get(k).and_then(|&d| u.column_0.get(d).copied()));
        let innermost = *u.open.last().expect("a list was left open");
        let problem = Problem::Unclosed {
            what: self.list_or_vector(innermost),
            open: innermost,
            outer: open,
            suspect,
        };
        self.restart = restart;
        problem
    }

    /// Keeps what a walk that ended with lists open learned (the first
    /// such walk of a [`scan_recovering`]).
    fn learn_unclosed(&mut self) {
        if self.unclosed.is_some() {
            return;
        }
        let Some(column_0) = self.learn.take() else {
            return;
        };
        let mut next_def = vec![column_0.len(); column_0.len()];
        let mut next = column_0.len();
        for k in (0..column_0.len()).rev() {
            if self.opens_def(column_0[k]) {
                next = k;
            }
            next_def[k] = next;
        }
        self.unclosed = Some(Unclosed {
            open: self.stack.clone(),
            column_0,
            next_def,
        });
    }

    /// Whether the first walk that ended with lists open left the one
    /// opened at `i` open.
    fn known_open(&self, i: usize) -> bool {
        self.unclosed
            .as_ref()
            .is_some_and(|u| u.open.binary_search(&i).is_ok())
    }

    /// Skips whitespace and comments from `i`; returns the next position
    /// that starts something else (or the end). An unclosed comment runs to
    /// the end.
    pub fn skip_trivia(&self, mut i: usize) -> usize {
        let b = self.b;
        let len = b.len();
        while i < len {
            let c = b[i];
            if is_ws(c) {
                i += 1;
            } else if c == b';' {
                i = memchr::memchr(b'\n', &b[i..]).map_or(len, |n| i + n);
            } else if let Some(after) = self.block_comment_start(i) {
                i = self.block_comment_end(i, after).unwrap_or(len);
            } else {
                break;
            }
        }
        i
    }

    /// If a block comment (`#|`, `#3|`) starts at `i`, the position after
    /// its `|`.
    fn block_comment_start(&self, i: usize) -> Option<usize> {
        let b = self.b;
        if b[i] != b'#' {
            return None;
        }
        let mut p = i + 1;
        while p < b.len() && b[p].is_ascii_digit() {
            p += 1;
        }
        (p < b.len() && b[p] == b'|').then_some(p + 1)
    }

    /// End of the block comment opened at `start`, body from `i`.
    fn block_comment_end(&self, start: usize, mut i: usize) -> Result<usize, Problem> {
        let b = self.b;
        let mut depth = 1usize;
        while i + 1 < b.len() {
            match (b[i], b[i + 1]) {
                (b'|', b'#') => {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        return Ok(i);
                    }
                }
                (b'#', b'|') => {
                    depth += 1;
                    i += 2;
                }
                _ => i += 1,
            }
        }
        Err(self.unclosed(Opener::BlockComment, start))
    }

    fn unclosed(&self, what: Opener, open: usize) -> Problem {
        Problem::Unclosed {
            what,
            open,
            outer: self.stack.first().copied().unwrap_or(open),
            suspect: None,
        }
    }

    /// End of the token starting at `i`.
    fn token_end(&self, mut i: usize) -> Result<usize, Problem> {
        let b = self.b;
        let len = b.len();
        while i < len {
            let c = b[i];
            if c == b'\\' {
                if i + 1 >= len {
                    return Err(self.unclosed(Opener::SingleEscape, i));
                }
                i += 1 + utf8_width(b[i + 1]);
            } else if c == b'|' {
                match self.extents.closing(i + 1, b'|') {
                    Some(e) => i = e,
                    None => return Err(self.unclosed(Opener::MultipleEscape, i)),
                }
            } else if ends_token(c) {
                return Ok(i);
            } else {
                i += 1;
            }
        }
        Ok(len)
    }

    /// A possibly empty token from `i`.
    fn token_tail(&self, i: usize) -> Result<usize, Problem> {
        if i >= self.b.len() || ends_token(self.b[i]) {
            Ok(i)
        } else {
            self.token_end(i)
        }
    }

    /// Classifies the `#` dispatch at `i`.
    fn dispatch(&self, i: usize) -> Result<Dispatch, Problem> {
        let b = self.b;
        let len = b.len();
        let mut p = i + 1;
        while p < len && b[p].is_ascii_digit() {
            p += 1;
        }
        if p >= len {
            return Ok(Dispatch::Atom(p));
        }
        let sub = b[p];
        let after = p + utf8_width(sub);
        Ok(match sub.to_ascii_lowercase() {
            b'\\' => {
                if after >= len {
                    return Err(self.unclosed(Opener::Character, i));
                }
                let first_end = (after + utf8_width(b[after])).min(len);
                Dispatch::Atom(self.token_tail(first_end)?)
            }
            b'\'' | b'.' | b'p' | b's' | b'a' | b'c' | b'=' => Dispatch::Prefix(after, 1),
            b'+' | b'-' => Dispatch::Prefix(after, 2),
            b'(' => Dispatch::OpenVector(after),
            b'*' | b':' | b'b' | b'o' | b'x' | b'r' => Dispatch::Atom(self.token_tail(after)?),
            b'#' | b'<' => Dispatch::Atom(after),
            b'|' => Dispatch::Comment(after),
            b')' => Dispatch::Atom(p),
            c if is_ws(c) => Dispatch::Atom(p),
            _ => self.opaque(sub, after),
        })
    }

    /// The extent of an unknown dispatch macro, as the CST reader guesses it.
    fn opaque(&self, sub: u8, after: usize) -> Dispatch {
        if let Some(end) = self.extents.dispatch_end(sub, after) {
            return Dispatch::Atom(end);
        }
        let b = self.b;
        match b.get(after) {
            Some(&c) if !is_ws(c) && c != b')' => Dispatch::Prefix(after, 1),
            _ => Dispatch::Atom(after),
        }
    }

    /// The end of the form starting at `start` (which is not trivia).
    pub fn skip_form(&mut self, start: usize) -> Result<usize, Problem> {
        let b = self.b;
        let len = b.len();
        self.stack.clear();
        self.restart = None;
        if let Some(seen) = self.learn.as_mut() {
            seen.clear();
        }
        let mut suspect: Option<usize> = None;
        let mut need = 1usize;
        let mut i = start;
        loop {
            if i >= len {
                return match self.stack.last() {
                    Some(&open) => {
                        self.learn_unclosed();
                        Err(Problem::Unclosed {
                            what: self.list_or_vector(open),
                            open,
                            outer: self.stack[0],
                            suspect,
                        })
                    }
                    None => Ok(len),
                };
            }
            let c = b[i];
            let atom_end = match c {
                b' ' | b'\t' | b'\n' | b'\r' | 0x0C => {
                    i += 1;
                    continue;
                }
                b';' => {
                    i = memchr::memchr(b'\n', &b[i..]).map_or(len, |n| i + n);
                    continue;
                }
                b'(' => {
                    let line_start = i == 0 || b[i - 1] == b'\n';
                    let at_column_0 = !self.stack.is_empty() && line_start;
                    if self.known_open(i) {
                        return Err(self.known_unclosed(i, suspect));
                    }
                    if line_start {
                        if let Some(seen) = self.learn.as_mut() {
                            seen.push(i);
                        }
                    }
                    if at_column_0 && self.restart.is_none() {
                        self.restart = Some(i);
                    }
                    if suspect.is_none() && at_column_0 && self.opens_def(i) {
                        suspect = Some(i);
                    }
                    self.stack.push(i);
                    i += 1;
                    continue;
                }
                b')' => {
                    if self.stack.pop().is_none() {
                        return Err(Problem::ExtraClose { offset: i });
                    }
                    i += 1;
                    if !self.stack.is_empty() {
                        continue;
                    }
                    i
                }
                b'"' => match self.extents.closing(i + 1, b'"') {
                    Some(e) => e,
                    None => return Err(self.unclosed(Opener::String, i)),
                },
                b'\'' | b'`' => {
                    i += 1;
                    continue;
                }
                b',' => {
                    i += if matches!(b.get(i + 1), Some(b'@' | b'.')) {
                        2
                    } else {
                        1
                    };
                    continue;
                }
                b'#' => match self.dispatch(i)? {
                    Dispatch::Atom(e) => e,
                    Dispatch::Prefix(after, n) => {
                        if self.stack.is_empty() {
                            need += n - 1;
                        }
                        i = after;
                        continue;
                    }
                    Dispatch::OpenVector(after) => {
                        if self.known_open(i) {
                            return Err(self.known_unclosed(i, suspect));
                        }
                        self.stack.push(i);
                        i = after;
                        continue;
                    }
                    Dispatch::Comment(after) => {
                        i = self.block_comment_end(i, after)?;
                        continue;
                    }
                },
                _ => self.token_end(i)?,
            };
            i = atom_end;
            if self.stack.is_empty() {
                need -= 1;
                if need == 0 {
                    return Ok(i);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use lisp_syntax::cst::{self, NodeKind, SyntaxErrorKind};

    fn forms(src: &str) -> Vec<&str> {
        scan(src).forms().map(|r| &src[r.clone()]).collect()
    }

    #[test]
    fn top_level_forms_and_nasty_lexemes() {
        let src = "(a \"(\" #\\( |a)b| #| ( #| ) |# |# ; )\n b)\n#+sbcl (x) 'y #?\"(\" #[ ( ] z";
        assert_eq!(
            forms(src),
            vec![
                "(a \"(\" #\\( |a)b| #| ( #| ) |# |# ; )\n b)",
                "#+sbcl (x)",
                "'y",
                "#?\"(\"",
                "#[ ( ]",
                "z"
            ]
        );
        assert!(scan(src).problem.is_none());
    }

    #[test]
    fn recovering_scans_go_on_after_a_broken_form() {
        let src =
            "(defun a () 1)\n(defun b ()\n  (x \"\n(not a form\")\n  (y)\n\n(defun c () 3)\n(d";
        let s = scan_recovering(src);
        let forms: Vec<&str> = s.forms().map(|f| &src[f.clone()]).collect();
        assert_eq!(
            forms,
            vec![
                "(defun a () 1)",
                "(defun b ()\n  (x \"\n(not a form\")\n  (y)",
                "(defun c () 3)",
                "(d"
            ]
        );
        assert_eq!(s.problem.unwrap().offset(), 15);
        // As Lisp reads it, the broken form runs to the end.
        assert_eq!(scan(src).forms().count(), 2);
    }

    #[test]
    fn problems() {
        assert_eq!(
            scan("(a))").problem,
            Some(Problem::ExtraClose { offset: 3 })
        );
        let p = scan("(defun a ()\n  (b)\n(defun c () 1)\n")
            .problem
            .unwrap();
        assert_eq!(
            p,
            Problem::Unclosed {
                what: Opener::List,
                open: 0,
                outer: 0,
                suspect: Some(18)
            }
        );
        assert!(matches!(
            scan("(a \"b)").problem,
            Some(Problem::Unclosed {
                what: Opener::String,
                open: 3,
                ..
            })
        ));
        assert!(matches!(
            scan("#| x").problem,
            Some(Problem::Unclosed {
                what: Opener::BlockComment,
                ..
            })
        ));
    }

    #[test]
    fn elements_and_conditionals() {
        let src = "(defmethod foo :around ((a point) b) ; c\n body)";
        let els: Vec<&str> = elements(src, 0..src.len()).map(|r| &src[r]).collect();
        assert_eq!(
            els,
            vec!["defmethod", "foo", ":around", "((a point) b)", "body"]
        );
        let src = "#+(or sbcl ccl) (defun x ())";
        let (f, g) = conditional_parts(src, 0..src.len()).unwrap();
        assert_eq!(&src[f], "(or sbcl ccl)");
        assert_eq!(&src[g], "(defun x ())");
    }

    /// Holds the scanner to the CST reader on the given text: the same
    /// top-level form spans, and a delimiter problem exactly when the CST
    /// reports one.
    fn agrees_with_cst(src: &str) -> Result<(), String> {
        let parse = cst::parse(src);
        let s = scan(src);
        let cst_delim_error = parse.errors.iter().any(|e| {
            matches!(
                e.kind,
                SyntaxErrorKind::ExtraClose | SyntaxErrorKind::Unclosed(_)
            )
        });
        if cst_delim_error != s.problem.is_some() {
            return Err(format!(
                "problem mismatch: cst {:?} scan {:?}",
                parse.errors, s.problem
            ));
        }
        // Spans are compared when the text reads cleanly (error leaves such
        // as `#<` split forms differently by design).
        if parse.errors.is_empty() {
            let a: Vec<_> = parse
                .top_level_forms()
                .filter(|n| n.kind != NodeKind::Error)
                .map(|n| n.span.clone())
                .collect();
            let b: Vec<_> = s.forms().cloned().collect();
            if a != b {
                let i = a.iter().zip(&b).position(|(x, y)| x != y).unwrap_or(0);
                return Err(format!(
                    "form spans differ at #{i}: cst {:?} scan {:?}",
                    a.get(i),
                    b.get(i)
                ));
            }
        }
        Ok(())
    }

    #[test]
    fn agrees_with_cst_on_nasty_snippets() {
        for src in [
            "(a b) (c",
            "(a))",
            "#+sbcl",
            "'",
            "(a #\\) b)",
            "#\\",
            "foo\\",
            "|abc",
            "#?\"${(x)}\" (y)",
            "#{a (b} c)",
            "(#1=(a) #1#)",
            "#<foo> (a)",
            "(a #) b)",
            "#3|x|# (a)",
            "#2A((1 2) (3 4))",
            "(a . b) #p\"/x\" #s(foo :a 1) #c(1 2) #.(+ 1 2)",
            "(x ,@y ,.z `(a ,b))",
            "#+(and) #-(or) a b c",
            "(λ #\\λ \"λ\")",
        ] {
            agrees_with_cst(src).unwrap_or_else(|e| panic!("{src:?}: {e}"));
        }
    }

    /// `count` texts of up to `max_len - 1` pieces each, drawn by a
    /// xorshift generator from `seed` (the same texts every run).
    fn random_texts(seed: u64, pieces: &[&str], count: usize, max_len: u64) -> Vec<String> {
        let mut seed = seed;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        (0..count)
            .map(|_| {
                let n = next() % max_len;
                (0..n)
                    .map(|_| pieces[(next() % pieces.len() as u64) as usize])
                    .collect()
            })
            .collect()
    }

    /// Random texts built from the pieces that trip readers up.
    #[test]
    fn agrees_with_cst_on_random_texts() {
        const PIECES: [&str; 30] = [
            "(", ")", "(", ")", "\"", "\\", "|", "#", ";", "\n", " ", "a", "#|", "|#", "#\\", "'",
            "`", ",@", "#+", "#-", "#?", "[", "]", "{", "}", "#(", "λ", "#:", "1", "#'",
        ];
        for text in random_texts(0x9E37_79B9_7F4A_7C15, &PIECES, 20_000, 24) {
            agrees_with_cst(&text).unwrap_or_else(|e| panic!("{text:?}: {e}"));
        }
    }

    /// Recovery reads what a walk left open only once; what it finds is
    /// what reading it again from every restart finds, on random texts rich
    /// in column-0 openers and on the shapes that made it quadratic.
    #[test]
    fn recovering_once_finds_what_recovering_again_finds() {
        const PIECES: [&str; 16] = [
            "(", "(", ")", "\n(", "\n(", "\n(def", "\n#(", "\n", " ", "a", "\"", ";", "#|", "|#",
            "#+", "'",
        ];
        let same = |text: &str| {
            let once = scan_items_with(text, true, true);
            let again = scan_items_with(text, true, false);
            assert_eq!(once.items, again.items, "{text:?}");
            assert_eq!(once.problem, again.problem, "{text:?}");
        };
        for text in random_texts(0x2545_F491_4F6C_DD1D, &PIECES, 20_000, 40) {
            same(&text);
        }
        same(&"(\n".repeat(300));
        same(&"(a\n(b)\n (\n".repeat(100));
        same(&"(defun f (x)\n  (let (\n(y 1))\n".repeat(100));
    }

    /// A file of `(` lines, each a form that never closes, is read in
    /// linear time (it was read once per line: 0.2 MB took 36 s).
    #[test]
    fn recovering_a_file_of_unclosed_lines_is_linear() {
        let text = "(\n".repeat(1_000_000);
        let t = std::time::Instant::now();
        let s = scan_recovering(&text);
        assert_eq!(s.items.len(), 1_000_000);
        assert!(
            t.elapsed() < std::time::Duration::from_secs(10),
            "{:?}",
            t.elapsed()
        );
    }

    #[test]
    fn agrees_with_cst_on_sbcl_sources() {
        let root = std::path::Path::new("/usr/share/sbcl-source/src/code");
        let Ok(rd) = std::fs::read_dir(root) else {
            eprintln!("sbcl-source not installed; skipped");
            return;
        };
        let mut n = 0;
        for e in rd.flatten() {
            let p = e.path();
            if p.extension().is_some_and(|x| x == "lisp") {
                if let Ok(src) = std::fs::read_to_string(&p) {
                    agrees_with_cst(&src).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
                    n += 1;
                }
            }
        }
        assert!(n > 100, "only {n} files checked");
    }
}
