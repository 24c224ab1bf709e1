//! The reader proper: one pass over the bytes with an explicit stack of open
//! compound nodes, so nesting never recurses (hostile input cannot overflow
//! the stack) and every error is recoverable.
//!
//! Scanning works on bytes: every character that ends a leaf is ASCII, and
//! UTF-8 continuation bytes are never ASCII, so leaf boundaries always fall on
//! character boundaries. The one place a whole character matters (a dispatch
//! sub-character such as `#λ`) decodes its width explicitly.

use std::borrow::Cow;

use super::extent::Extents;
use super::line_index::utf8_width;
use super::{Construct, Node, NodeKind, Parse, SyntaxError, SyntaxErrorKind, MAX_DEPTH};

/// An open compound node. Its children so far are `Reader::pending[first..]`:
/// one shared stack for all frames means each finished node gets exactly one
/// exactly-sized allocation instead of a growing `Vec` per node.
struct Frame {
    kind: NodeKind,
    start: usize,
    first: usize,
    /// What closes it: a `)` (lists, vectors) or a number of forms.
    until: Until,
    /// End of the opening characters: `src[start..opener]` is `(`, `#'`,
    /// `#+`, ..., quoted in error messages ("a form after #'").
    opener: usize,
    /// A lone `.` token was attached directly to this list: check its
    /// place when the list closes.
    has_dot: bool,
    /// The backquote depth before this frame opened, restored when it
    /// closes (a backquote raises the depth for its form, a comma lowers it,
    /// `#.`, `#S` and `#A` reset it to zero as SBCL does).
    depth_before: i32,
}

enum Until {
    Close(Construct),
    Forms(u8),
}

pub(super) struct Reader<'a> {
    src: &'a str,
    bytes: &'a [u8],
    pos: usize,
    stack: Vec<Frame>,
    pending: Vec<Node>,
    /// Current backquote depth (see `Frame::depth_before`): a comma is only
    /// allowed where it is positive.
    backquote_depth: i32,
    /// Open `#+`/`#-` frames. Inside one, dots and commas are not checked:
    /// SBCL checks them only when the feature expression selects the form,
    /// and disabled code is often a sloppy placeholder
    /// (`#+nil (defun replace (..) ..)`).
    conditionals: usize,
    forms: Vec<Node>,
    errors: Vec<SyntaxError>,
    /// Where strings, `|...|` and unknown dispatch macros end.
    extents: Extents<'a>,
}

fn is_whitespace(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | b'\r' | 0x0C)
}

/// Characters that end a token: whitespace and terminating macro characters.
fn ends_token(b: u8) -> bool {
    is_whitespace(b) || matches!(b, b'"' | b'\'' | b'(' | b')' | b',' | b';' | b'`')
}

impl<'a> Reader<'a> {
    pub(super) fn new(src: &'a str) -> Reader<'a> {
        Reader {
            src,
            bytes: src.as_bytes(),
            pos: 0,
            stack: Vec::new(),
            pending: Vec::new(),
            backquote_depth: 0,
            conditionals: 0,
            forms: Vec::new(),
            errors: Vec::new(),
            extents: Extents::new(src.as_bytes()),
        }
    }

    pub(super) fn run(mut self) -> Parse {
        let len = self.bytes.len();
        while self.pos < len {
            let start = self.pos;
            let b = self.bytes[start];
            match b {
                _ if is_whitespace(b) => {
                    let end = self.skip_while(start, is_whitespace);
                    self.trivia(NodeKind::Whitespace, start, end);
                }
                b';' => {
                    let end = self.skip_while(start, |b| b != b'\n');
                    self.trivia(NodeKind::LineComment, start, end);
                }
                b'(' => self.open_seq(NodeKind::List, Construct::List, start, start + 1),
                b')' => self.close_paren(start),
                b'"' => {
                    let end = self.scan_string(start);
                    self.form(Node::leaf(NodeKind::String, start..end));
                }
                b'\'' => self.prefix(NodeKind::Quote, 1, start, start + 1),
                b'`' => self.prefix_at_depth(
                    NodeKind::Backquote,
                    self.backquote_depth + 1,
                    start,
                    start + 1,
                ),
                b',' => {
                    let (kind, end) = match self.bytes.get(start + 1) {
                        Some(b'@' | b'.') => (NodeKind::UnquoteSplicing, start + 2),
                        _ => (NodeKind::Unquote, start + 1),
                    };
                    let inside = self.backquote_depth > 0;
                    if !inside && self.conditionals == 0 {
                        self.errors.push(SyntaxError {
                            kind: SyntaxErrorKind::CommaOutsideBackquote,
                            offset: start,
                            open_offset: None,
                            expected: None,
                            found: Some(format!("\"{}\"", &self.src[start..end]).into()),
                        });
                    }
                    // Outside a backquote the comma is still read as a
                    // prefix: that is what its author meant.
                    let depth = (self.backquote_depth - 1).max(0);
                    self.prefix_at_depth(kind, depth, start, end);
                }
                b'#' => self.dispatch(start),
                _ => {
                    let end = self.scan_token(start);
                    if self.bytes[start..end].iter().all(|&b| b == b'.') {
                        self.dot_token(start, end);
                    }
                    self.form(Node::leaf(NodeKind::Token, start..end));
                }
            }
        }
        self.unwind_at_eof();
        Parse {
            forms: self.forms,
            errors: self.errors,
        }
    }

    fn skip_while(&self, mut i: usize, pred: impl Fn(u8) -> bool) -> usize {
        while i < self.bytes.len() && pred(self.bytes[i]) {
            i += 1;
        }
        i
    }

    // ----- tree building -------------------------------------------------

    fn trivia(&mut self, kind: NodeKind, start: usize, end: usize) {
        self.pos = end;
        self.push_child(Node::leaf(kind, start..end));
    }

    fn push_child(&mut self, node: Node) {
        if self.stack.is_empty() {
            self.forms.push(node);
        } else {
            self.pending.push(node);
        }
    }

    /// Pops the top frame into a node ending at `end`.
    fn finish_top(&mut self, end: usize) -> Node {
        let frame = self.stack.pop().expect("frame present");
        self.backquote_depth = frame.depth_before;
        if let NodeKind::ReaderConditional { .. } = frame.kind {
            self.conditionals -= 1;
        }
        Node {
            kind: frame.kind,
            span: frame.start..end,
            children: self.pending.split_off(frame.first),
        }
    }

    /// A complete form: attach it, then complete every prefix frame it
    /// satisfies.
    fn form(&mut self, node: Node) {
        self.pos = self.pos.max(node.span.end);
        let mut node = node;
        loop {
            let Some(frame) = self.stack.last_mut() else {
                self.forms.push(node);
                return;
            };
            self.pending.push(node);
            match &mut frame.until {
                Until::Forms(n) if *n <= 1 => {
                    node = self.finish_top(self.pos);
                }
                Until::Forms(n) => {
                    *n -= 1;
                    return;
                }
                Until::Close(_) => return,
            }
        }
    }

    fn can_open(&mut self, start: usize) -> bool {
        if self.stack.len() < MAX_DEPTH {
            return true;
        }
        // Give up on structure: the rest is one error leaf, and every open
        // frame is closed without further complaint.
        self.errors.push(SyntaxError {
            kind: SyntaxErrorKind::TooDeep,
            offset: start,
            open_offset: None,
            expected: None,
            found: None,
        });
        let end = self.bytes.len();
        self.push_child(Node::leaf(NodeKind::Error, start..end));
        self.pos = end;
        while !self.stack.is_empty() {
            let node = self.finish_top(end);
            self.push_child(node);
        }
        false
    }

    /// Opens a list or vector whose opener is `start..open_end`.
    /// Returns false when the input is nested too deeply to open it.
    fn open(&mut self, kind: NodeKind, until: Until, start: usize, open_end: usize) -> bool {
        if !self.can_open(start) {
            return false;
        }
        self.pos = open_end;
        self.stack.push(Frame {
            kind,
            start,
            first: self.pending.len(),
            until,
            opener: open_end,
            depth_before: self.backquote_depth,
            has_dot: false,
        });
        self.pending
            .push(Node::leaf(NodeKind::Punct, start..open_end));
        if let NodeKind::ReaderConditional { .. } = kind {
            self.conditionals += 1;
        }
        true
    }

    /// Opens a one-form prefix frame during which the backquote depth is
    /// `depth`.
    fn prefix_at_depth(&mut self, kind: NodeKind, depth: i32, start: usize, end: usize) {
        if self.open(kind, Until::Forms(1), start, end) {
            self.backquote_depth = depth;
        }
    }

    /// Opens a prefix node (`'`, `#+`, ...) that completes after `forms`
    /// more forms.
    fn prefix(&mut self, kind: NodeKind, forms: u8, start: usize, prefix_end: usize) {
        self.open(kind, Until::Forms(forms), start, prefix_end);
    }

    /// Opens a list or vector, closed by `)`.
    fn open_seq(&mut self, kind: NodeKind, what: Construct, start: usize, open_end: usize) {
        self.open(kind, Until::Close(what), start, open_end);
    }

    fn close_paren(&mut self, at: usize) {
        self.close_pending_prefixes(at, "\")\"");
        match self.stack.last() {
            Some(Frame {
                until: Until::Close(_),
                ..
            }) => {
                if self.stack.last().is_some_and(|f| f.kind == NodeKind::List) {
                    self.check_dots_in_list();
                }
                self.pending.push(Node::leaf(NodeKind::Punct, at..at + 1));
                self.pos = at + 1;
                let node = self.finish_top(at + 1);
                self.form(node);
            }
            _ => {
                self.errors.push(SyntaxError {
                    kind: SyntaxErrorKind::ExtraClose,
                    offset: at,
                    open_offset: None,
                    expected: None,
                    found: Some(Cow::Borrowed("\")\"")),
                });
                self.pos = at + 1;
                self.form(Node::leaf(NodeKind::Error, at..at + 1));
            }
        }
    }

    /// A token made only of dots, about to be attached. Directly in a list
    /// it may be a consing dot, checked when the list closes; anywhere else
    /// it is an error.
    fn dot_token(&mut self, start: usize, end: usize) {
        let in_list = self
            .stack
            .last()
            .is_some_and(|f| f.kind == NodeKind::List && matches!(f.until, Until::Close(_)));
        if in_list && end - start == 1 {
            self.stack.last_mut().expect("list frame").has_dot = true;
        } else {
            self.misplaced_dot(start, end);
        }
    }

    /// The list on top of the stack is about to close: a consing dot must
    /// stand between the last two elements, as in `(a b . c)`.
    fn check_dots_in_list(&mut self) {
        let frame = self.stack.last().expect("list frame");
        if !frame.has_dot {
            return;
        }
        let elements: Vec<&Node> = self.pending[frame.first..]
            .iter()
            .filter(|n| !n.is_trivia() && n.kind != NodeKind::Punct)
            .collect();
        let dots: Vec<(usize, usize, usize)> = elements
            .iter()
            .enumerate()
            .filter(|(_, n)| {
                n.kind == NodeKind::Token && n.span.len() == 1 && self.bytes[n.span.start] == b'.'
            })
            .map(|(i, n)| (i, n.span.start, n.span.end))
            .collect();
        // Only the first dot may be right: after some element, and before
        // exactly one form. A reader conditional after it may read as no
        // form at all (`(a . #+x () #-x (b))` is SBCL's own idiom), so it
        // takes exactly one element that is not a conditional, or else at
        // least one conditional.
        let first_dot_ok = |i: usize| {
            let rest = &elements[i + 1..];
            let plain = rest
                .iter()
                .filter(|n| !matches!(n.kind, NodeKind::ReaderConditional { .. }))
                .count();
            i >= 1 && plain <= 1 && !rest.is_empty()
        };
        let misplaced: Vec<(usize, usize)> = dots
            .iter()
            .enumerate()
            .filter(|&(k, &(i, _, _))| !(k == 0 && first_dot_ok(i)))
            .map(|(_, &(_, start, end))| (start, end))
            .collect();
        for (start, end) in misplaced {
            self.misplaced_dot(start, end);
        }
    }

    fn misplaced_dot(&mut self, start: usize, end: usize) {
        if self.conditionals > 0 {
            return;
        }
        self.errors.push(SyntaxError {
            kind: SyntaxErrorKind::MisplacedDot,
            offset: start,
            open_offset: None,
            expected: Some(
                "a dot only between the last two elements of a list, as in (a . b)".into(),
            ),
            found: Some(format!("\"{}\"", &self.src[start..end]).into()),
        });
    }

    /// Prefix frames on top of the stack that will never get their form
    /// (because `found` comes next) are closed with an error each.
    fn close_pending_prefixes(&mut self, at: usize, found: &'static str) {
        while let Some(Frame {
            until: Until::Forms(_),
            ..
        }) = self.stack.last()
        {
            let frame = self.stack.last().expect("frame present");
            let (start, first) = (frame.start, frame.first);
            let src = self.src;
            let prefix_text = &src[frame.start..frame.opener];
            let expected = match frame.kind {
                NodeKind::ReaderConditional { .. }
                    if self.pending[first..]
                        .iter()
                        .any(|n| !n.is_trivia() && n.kind != NodeKind::Punct) =>
                {
                    format!("the form guarded by {prefix_text}")
                }
                NodeKind::ReaderConditional { .. } => {
                    format!("a feature expression after {prefix_text}")
                }
                _ => format!("a form after {prefix_text}"),
            };
            self.errors.push(SyntaxError {
                kind: SyntaxErrorKind::MissingForm,
                offset: at,
                open_offset: Some(start),
                expected: Some(expected.into()),
                found: Some(found.into()),
            });
            // Trailing trivia belongs to whatever encloses the prefix.
            let split = first
                + self.pending[first..]
                    .iter()
                    .rposition(|n| !n.is_trivia())
                    .map_or(0, |i| i + 1);
            let trailing = self.pending.split_off(split);
            let end = self.pending.last().map_or(start, |n| n.span.end);
            let node = self.finish_top(end);
            // Attach without letting it complete an enclosing prefix: that
            // one lacks a real form too and is reported on the next round.
            self.push_child(node);
            for t in trailing {
                self.push_child(t);
            }
        }
    }

    fn unwind_at_eof(&mut self) {
        let end = self.bytes.len();
        loop {
            self.close_pending_prefixes(end, "end of input");
            let Some(frame) = self.stack.last() else {
                return;
            };
            let construct = match frame.until {
                Until::Close(c) => c,
                Until::Forms(_) => unreachable!("prefix frames were closed"),
            };
            let opener = self.src[frame.start..frame.opener].to_string();
            let open_offset = frame.start;
            self.errors.push(SyntaxError {
                kind: SyntaxErrorKind::Unclosed(construct),
                offset: end,
                open_offset: Some(open_offset),
                expected: Some(format!("\")\" to close the \"{opener}\"").into()),
                found: Some("end of input".into()),
            });
            let node = self.finish_top(end);
            // The unclosed list still is the form an enclosing prefix wanted.
            self.form(node);
        }
    }

    fn error_leaf(&mut self, start: usize, end: usize, kind: SyntaxErrorKind, found: String) {
        self.errors.push(SyntaxError {
            kind,
            offset: start,
            open_offset: None,
            expected: None,
            found: Some(found.into()),
        });
        self.form(Node::leaf(NodeKind::Error, start..end));
    }

    fn unclosed(&mut self, what: Construct, open: usize, expected: &'static str) {
        self.errors.push(SyntaxError {
            kind: SyntaxErrorKind::Unclosed(what),
            offset: self.bytes.len(),
            open_offset: Some(open),
            expected: Some(expected.into()),
            found: Some("end of input".into()),
        });
    }

    // ----- leaves ----------------------------------------------------------

    /// A string starting at the `"` at `start`; returns its end.
    fn scan_string(&mut self, start: usize) -> usize {
        match self.extents.closing(start + 1, b'"') {
            Some(end) => end,
            None => {
                self.unclosed(Construct::String, start, "a closing \"");
                self.bytes.len()
            }
        }
    }

    /// A token whose first character is at `start` (already known to be
    /// part of it); returns its end. Handles `\x` and `|...|` escapes.
    fn scan_token(&mut self, start: usize) -> usize {
        let bytes = self.bytes;
        let mut i = start;
        while i < bytes.len() {
            match bytes[i] {
                b'\\' => {
                    if i + 1 >= bytes.len() {
                        self.unclosed(Construct::SingleEscape, i, "a character after \\");
                        return bytes.len();
                    }
                    i += 1 + utf8_width(bytes[i + 1]);
                }
                b'|' => match self.extents.closing(i + 1, b'|') {
                    Some(end) => i = end,
                    None => {
                        self.unclosed(Construct::MultipleEscape, i, "a closing |");
                        return bytes.len();
                    }
                },
                b if ends_token(b) => return i,
                _ => i += 1,
            }
        }
        // An escape can step past the end by one byte.
        i.min(bytes.len())
    }

    /// A token that may be empty, starting at `i` (after `#:`, `#x`, ...).
    fn scan_token_tail(&mut self, i: usize) -> usize {
        if i >= self.bytes.len() || ends_token(self.bytes[i]) {
            i
        } else {
            self.scan_token(i)
        }
    }

    // ----- # dispatch --------------------------------------------------------

    fn dispatch(&mut self, start: usize) {
        let bytes = self.bytes;
        let len = bytes.len();
        let p = self.skip_while(start + 1, |b| b.is_ascii_digit());
        if p >= len {
            self.error_leaf(
                start,
                p,
                SyntaxErrorKind::InvalidDispatch,
                "\"#\" at end of input".into(),
            );
            return;
        }
        let sub = bytes[p];
        let after = p + utf8_width(sub);
        match sub.to_ascii_lowercase() {
            b'\\' => {
                if after >= len {
                    self.unclosed(Construct::Character, start, "a character after #\\");
                    self.form(Node::leaf(NodeKind::CharLiteral, start..len));
                    return;
                }
                // The first character is taken whatever it is; a name may
                // follow (#\Space, #\u+1F600).
                let first_end = after + utf8_width(bytes[after]);
                let end = self.scan_token_tail(first_end.min(len));
                self.form(Node::leaf(NodeKind::CharLiteral, start..end));
            }
            b'\'' => self.prefix(NodeKind::FunctionQuote, 1, start, after),
            b'(' => self.open_seq(NodeKind::Vector, Construct::Vector, start, after),
            b'*' => {
                let end = self.scan_token_tail(after);
                self.form(Node::leaf(NodeKind::BitVector, start..end));
            }
            b':' => {
                let end = self.scan_token_tail(after);
                self.form(Node::leaf(NodeKind::Uninterned, start..end));
            }
            b'b' | b'o' | b'x' | b'r' => {
                let end = self.scan_token_tail(after);
                self.form(Node::leaf(NodeKind::RadixNumber, start..end));
            }
            b'#' => self.form(Node::leaf(NodeKind::LabelRef, start..after)),
            // Read-time evaluation, arrays and structures take no commas:
            // SBCL reads their form at backquote depth zero.
            b'.' => self.prefix_at_depth(NodeKind::ReadEval, 0, start, after),
            b'+' => self.prefix(
                NodeKind::ReaderConditional { positive: true },
                2,
                start,
                after,
            ),
            b'-' => self.prefix(
                NodeKind::ReaderConditional { positive: false },
                2,
                start,
                after,
            ),
            b'p' => self.prefix(NodeKind::Pathname, 1, start, after),
            b's' => self.prefix_at_depth(NodeKind::Structure, 0, start, after),
            b'a' => self.prefix_at_depth(NodeKind::Array, 0, start, after),
            b'c' => self.prefix(NodeKind::Complex, 1, start, after),
            b'=' => self.prefix(NodeKind::Label, 1, start, after),
            b'|' => {
                let end = self.scan_block_comment(start, after);
                self.trivia(NodeKind::BlockComment, start, end);
            }
            b'<' => self.error_leaf(
                start,
                after,
                SyntaxErrorKind::InvalidDispatch,
                "\"#<\" (an unreadable object)".into(),
            ),
            b')' => self.error_leaf(start, p, SyntaxErrorKind::InvalidDispatch, "\"#)\"".into()),
            b if is_whitespace(b) => self.error_leaf(
                start,
                p,
                SyntaxErrorKind::InvalidDispatch,
                "\"#\" followed by whitespace".into(),
            ),
            _ => self.opaque(start, sub, after),
        }
    }

    /// `#|` at `start`, body from `i`; returns the end of the comment.
    fn scan_block_comment(&mut self, start: usize, mut i: usize) -> usize {
        let bytes = self.bytes;
        let mut depth = 1usize;
        while i + 1 < bytes.len() {
            match (bytes[i], bytes[i + 1]) {
                (b'|', b'#') => {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        return i;
                    }
                }
                (b'#', b'|') => {
                    depth += 1;
                    i += 2;
                }
                _ => i += 1,
            }
        }
        self.unclosed(Construct::BlockComment, start, "a closing |#");
        bytes.len()
    }

    /// An unknown dispatch macro whose dispatch characters are
    /// `start..after`. Its extent is guessed so that reading goes on sensibly.
    fn opaque(&mut self, start: usize, sub: u8, after: usize) {
        let bytes = self.bytes;
        if let Some(end) = self.extents.dispatch_end(sub, after) {
            self.form(Node::leaf(NodeKind::Opaque, start..end));
            return;
        }
        // Otherwise: the dispatch characters plus the form right after them.
        match bytes.get(after) {
            Some(&b) if !is_whitespace(b) && b != b')' => {
                self.prefix(NodeKind::Opaque, 1, start, after)
            }
            _ => self.form(Node::leaf(NodeKind::Opaque, start..after)),
        }
    }
}
