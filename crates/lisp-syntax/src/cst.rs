//! Lossless concrete syntax tree of Common Lisp source.
//!
//! # What it gives you
//!
//! ```
//! use lisp_syntax::cst::{parse, LineIndex, NodeKind};
//!
//! let src = "(in-package :foo)\n;; hi\n(defun bar (x) #+sbcl x)\n";
//! let parse = parse(src);
//! assert!(parse.errors.is_empty());
//! let forms: Vec<_> = parse.top_level_forms().collect();
//! assert_eq!(forms.len(), 2);
//! assert_eq!(forms[1].head_name_upper(src).as_deref(), Some("DEFUN"));
//! let name = forms[1].elements().nth(1).unwrap();
//! assert_eq!(name.text(src), "bar");
//! let lines = LineIndex::new(src);
//! assert_eq!(lines.line_col(name.span.start), (3, 8));
//! // Lossless: the leaves rebuild the text byte for byte.
//! let rebuilt: String = parse.leaves().map(|n| n.text(src)).collect();
//! assert_eq!(rebuilt, src);
//! ```
//!
//! - [`parse`]`(text) -> `[`Parse`]: `forms` (every top-level node, trivia
//!   included) and `errors` ([`SyntaxError`]). Parsing never fails and never
//!   panics; errors are collected and reading goes on (an extra `)` becomes an
//!   [`NodeKind::Error`] leaf, an unclosed list/string/comment runs to the end
//!   of the input).
//! - [`Node`]: `kind`, byte `span`, `children`. A node without children is a
//!   *leaf*; every byte of the input is in exactly one leaf, and a compound
//!   node's children cover its span exactly, in order. The fixed characters of
//!   a compound form (`(`, `)`, `'`, `#+`, `#2A`, ...) are [`NodeKind::Punct`]
//!   leaves. Nodes hold spans only, never copies of the text: pass the source
//!   to [`Node::text`].
//! - Navigation: [`Node::elements`] (children minus trivia and punctuation:
//!   a list's elements, a quote's quoted form, a reader conditional's feature
//!   expression and guarded form), [`Node::head_symbol`],
//!   [`Node::head_name_upper`], [`Parse::top_level_forms`],
//!   [`Parse::top_level_form_at`], [`Node::node_at`], [`Node::leaves`],
//!   [`Node::skip_reader_conditionals`].
//! - [`LineIndex`]: byte offset <-> 1-based (line, column in characters).
//! - [`SymbolName::read`]: what symbol a token names (package prefix,
//!   case-converted name), for matching `defun`, `CL:DEFUN`, `|foo|`.
//!
//! # Syntax understood
//!
//! The standard readtable: strings with `\` escapes, `;` comments, nested
//! `#| |#`, tokens with `\` and `|...|` escapes (brackets and braces are
//! ordinary constituents), `'`, `` ` ``, `,`, `,@`, `,.`, and the standard `#`
//! dispatch macros `#\ #' #( #* #: #. #+ #- #p #s #a #= ## #b #o #x #r #c #|`,
//! with optional decimal arguments (`#2A`, `#1=`, `#16r`). Feature expressions
//! are not evaluated: a reader conditional holds both its feature expression
//! and its guarded form. Unknown dispatch macros (cl-interpol's `#?"..."`,
//! `#[...]`, `#{...}`, ...) become [`NodeKind::Opaque`] nodes and never make
//! the input unreadable.
//!
//! Errors are what SBCL's reader would refuse for syntax alone: unclosed
//! lists, vectors, strings, block comments and `|` escapes (with the
//! opener's offset), a `)` with nothing open, a prefix with no form after
//! it, `#<` / `#)` / `#` before whitespace, a token of dots anywhere but as
//! the consing dot of a list, and a comma outside any backquote
//! (SBCL reads `#.`, `#S` and `#A` forms at backquote depth zero; so does this
//! reader). Semantic errors (unknown packages, bad `#S` contents, malformed
//! numbers) are not syntax and are not reported. Inside `#+`/`#-`, dots and
//! commas are not checked: SBCL checks them only when the feature expression
//! selects the form, and disabled code is often a sloppy placeholder
//! (`#+nil (defun replace (..) ..)`).
//!
//! Nesting deeper than [`MAX_DEPTH`] stops structured reading (the rest of
//! the input becomes one error leaf), so recursive consumers of the tree can
//! never overflow the stack on hostile input.
//!
//! # How it is checked
//!
//! `tests/cst_sbcl_differential.rs` compares the extent of every top-level
//! form and every reader-macro construct with SBCL's own reader on all the
//! Lisp sources installed here (SBCL's, ASDF/UIOP, alexandria, cl-ppcre,
//! SLIME, ...) and on generated snippets, broken ones included;
//! `tests/cst_properties.rs` checks losslessness and tree shape on random
//! input; `fuzz/` has a libFuzzer target.

mod extent;
mod line_index;
mod reader;
mod symbol;

use std::borrow::Cow;
use std::ops::Range;

pub use extent::Extents;
pub use line_index::LineIndex;
pub use symbol::SymbolName;

/// Deepest nesting of compound nodes the reader builds (lists, vectors and
/// prefixes such as `'` each count one level).
pub const MAX_DEPTH: usize = 1000;

/// Reads `text` into a lossless syntax tree. Never panics; see the module
/// documentation.
pub fn parse(text: &str) -> Parse {
    reader::Reader::new(text).run()
}

/// The result of [`parse`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Parse {
    /// Every top-level node in order, trivia (whitespace, comments) included;
    /// their spans tile the whole input.
    pub forms: Vec<Node>,
    /// Problems found, in the order the reader found them (an unclosed
    /// string inside an unclosed list comes before the list). Empty when
    /// the text reads cleanly.
    pub errors: Vec<SyntaxError>,
}

impl Parse {
    /// Top-level nodes that are not whitespace or comments. Reader
    /// conditionals are included (whatever their feature expression) and so
    /// are [`NodeKind::Error`] leaves (a stray `)`).
    pub fn top_level_forms(&self) -> impl Iterator<Item = &Node> + '_ {
        self.forms.iter().filter(|n| !n.is_trivia())
    }

    /// The top-level node (trivia included) whose span contains `offset`.
    /// The end of input belongs to the last node.
    pub fn top_level_form_at(&self, offset: usize) -> Option<&Node> {
        let i = self.forms.partition_point(|n| n.span.end <= offset);
        self.forms.get(i).or_else(|| self.forms.last())
    }

    /// Every leaf of the tree in text order; their texts concatenate to the
    /// input.
    pub fn leaves(&self) -> impl Iterator<Item = &Node> + '_ {
        self.forms.iter().flat_map(|n| n.leaves())
    }

    /// True when there are no errors.
    pub fn is_ok(&self) -> bool {
        self.errors.is_empty()
    }
}

/// One node of the tree. See the module documentation for the invariants.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Node {
    /// What the node is.
    pub kind: NodeKind,
    /// Byte range in the source text.
    pub span: Range<usize>,
    /// Sub-nodes covering `span` exactly (empty for a leaf).
    pub children: Vec<Node>,
}

/// The kinds of [`Node`].
///
/// Leaves: `Whitespace`, `LineComment`, `BlockComment`, `Token`, `String`,
/// `CharLiteral`, `BitVector`, `Uninterned`, `RadixNumber`, `LabelRef`,
/// `Punct`, `Error`, and `Opaque` when it has no children. All others are
/// compound: their first child is the opening `Punct` (`(`, `#(`, `'`,
/// `#+`, `#S`, `#2A`, `#1=`, ...).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NodeKind {
    /// A run of whitespace (space, tab, newline, return, page).
    Whitespace,
    /// `; ...` up to, not including, the newline.
    LineComment,
    /// `#| ... |#`, nesting respected.
    BlockComment,
    /// A symbol or number, escapes included: `foo`, `pkg::x`, `|a b|`, `1.5d0`.
    /// The consing dot of `(a . b)` is a `Token` too, with text `.`.
    Token,
    /// `"..."` with its quotes.
    String,
    /// `#\a`, `#\(`, `#\Space`, `#\u+1F600`.
    CharLiteral,
    /// `#*1011`.
    BitVector,
    /// `#:foo`.
    Uninterned,
    /// `#xFF`, `#b101`, `#o17`, `#16r1F`.
    RadixNumber,
    /// `#1#`.
    LabelRef,
    /// The fixed characters of a compound node: `(`, `)`, `#(`, `'`, `` ` ``,
    /// `,`, `,@`, `#'`, `#.`, `#+`, `#-`, `#P`, `#S`, `#2A`, `#1=`, `#C`, and
    /// the dispatch characters of an [`NodeKind::Opaque`] node.
    Punct,
    /// `( ... )`: open `Punct`, elements and trivia, close `Punct` (missing
    /// when unclosed).
    List,
    /// `#( ... )` (or `#3( ... )`), like `List`.
    Vector,
    /// `'form`
    Quote,
    /// `` `form ``
    Backquote,
    /// `,form`
    Unquote,
    /// `,@form` or `,.form`
    UnquoteSplicing,
    /// `#'form`
    FunctionQuote,
    /// `#+feature form` (`positive`) or `#-feature form`: elements are the
    /// feature expression then the guarded form.
    ReaderConditional {
        /// True for `#+`.
        positive: bool,
    },
    /// `#.form`
    ReadEval,
    /// `#nA form`
    Array,
    /// `#S(name slot value ...)`
    Structure,
    /// `#P"..."`
    Pathname,
    /// `#n=form`
    Label,
    /// `#C(real imag)`
    Complex,
    /// A dispatch macro this reader does not know (`#?"..."`, `#[...]`,
    /// `#{...}`, `#$x`, ...). Kept as one leaf when its extent is delimited
    /// (brackets, a string), else as a `Punct` for the dispatch characters plus
    /// the form that directly follows them, if any.
    Opaque,
    /// Text that cannot start a form: a stray `)`, `#<`, `#` followed by
    /// whitespace, the rest of an input nested too deeply. Always with an
    /// entry in [`Parse::errors`].
    Error,
}

impl Node {
    /// A node without children.
    pub fn leaf(kind: NodeKind, span: Range<usize>) -> Node {
        Node {
            kind,
            span,
            children: Vec::new(),
        }
    }

    /// The node's text.
    pub fn text<'a>(&self, src: &'a str) -> &'a str {
        &src[self.span.clone()]
    }

    /// Whitespace or a comment.
    pub fn is_trivia(&self) -> bool {
        matches!(
            self.kind,
            NodeKind::Whitespace | NodeKind::LineComment | NodeKind::BlockComment
        )
    }

    /// True for a node without children.
    pub fn is_leaf(&self) -> bool {
        self.children.is_empty()
    }

    /// Children that are neither trivia nor punctuation: a list's or
    /// vector's elements, a prefix form's (`'`, `#'`, `#.`, `#S`, ...)
    /// operand, a reader conditional's feature expression and guarded form.
    pub fn elements(&self) -> impl Iterator<Item = &Node> + '_ {
        self.children
            .iter()
            .filter(|n| !n.is_trivia() && n.kind != NodeKind::Punct)
    }

    /// Same as [`Node::elements`] (the name the design notes used).
    pub fn significant_children(&self) -> impl Iterator<Item = &Node> + '_ {
        self.elements()
    }

    /// For a `List` whose first element is a token, that token's text as
    /// written (`defun`, `cl:defun`, `DEFUN`). `None` for anything else.
    pub fn head_symbol<'a>(&self, src: &'a str) -> Option<&'a str> {
        if self.kind != NodeKind::List {
            return None;
        }
        let head = self.elements().next()?;
        (head.kind == NodeKind::Token).then(|| head.text(src))
    }

    /// For a `List` whose first element is a symbol token, the symbol's name
    /// as the standard reader would intern it: package prefix dropped,
    /// unescaped characters upcased (`cl:defun` -> `DEFUN`, `|foo|` ->
    /// `foo`).
    pub fn head_name_upper(&self, src: &str) -> Option<String> {
        Some(SymbolName::read(self.head_symbol(src)?).name)
    }

    /// The form a reader conditional guards, looking through nested ones
    /// (`#+sbcl #-win32 (defun f ...)` gives the `defun` list); any other
    /// node is returned as is. `None` when a conditional lacks its form.
    /// Lets tools that look for definitions see the ones under `#+`.
    pub fn skip_reader_conditionals(&self) -> Option<&Node> {
        let mut node = self;
        while let NodeKind::ReaderConditional { .. } = node.kind {
            node = node.elements().nth(1)?;
        }
        Some(node)
    }

    /// For `List` and `Vector`: whether the closing `)` is present.
    pub fn is_closed(&self) -> bool {
        matches!(self.kind, NodeKind::List | NodeKind::Vector)
            && self.children.len() >= 2
            && self
                .children
                .last()
                .is_some_and(|n| n.kind == NodeKind::Punct)
    }

    /// Every leaf under this node (itself if it is a leaf), in text order.
    pub fn leaves(&self) -> Leaves<'_> {
        Leaves { stack: vec![self] }
    }

    /// The innermost node under this one whose span contains `offset`
    /// (spans are half-open; an offset at the very end matches the last
    /// leaf).
    pub fn node_at(&self, offset: usize) -> Option<&Node> {
        if !(self.span.start <= offset && offset <= self.span.end) {
            return None;
        }
        let mut node = self;
        loop {
            let i = node.children.partition_point(|n| n.span.end <= offset);
            match node.children.get(i).or_else(|| node.children.last()) {
                Some(child) => node = child,
                None => return Some(node),
            }
        }
    }
}

/// Iterator over the leaves of a node; see [`Node::leaves`].
#[derive(Debug, Clone)]
pub struct Leaves<'a> {
    stack: Vec<&'a Node>,
}

impl<'a> Iterator for Leaves<'a> {
    type Item = &'a Node;

    fn next(&mut self) -> Option<&'a Node> {
        while let Some(node) = self.stack.pop() {
            if node.children.is_empty() {
                return Some(node);
            }
            self.stack.extend(node.children.iter().rev());
        }
        None
    }
}

/// What went wrong, with where; see [`SyntaxError::message`] for a text
/// with line and column (its `Display` gives byte offsets instead).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", self.render(&|o| format!("offset {o}")))]
pub struct SyntaxError {
    /// The kind of problem.
    pub kind: SyntaxErrorKind,
    /// Byte offset where the problem shows: the stray `)`, the end of input
    /// for an unclosed construct, the prefix lacking its form.
    pub offset: usize,
    /// Byte offset of the opener for unclosed constructs, of the prefix for
    /// a missing form.
    pub open_offset: Option<usize>,
    /// What the reader wanted there (`")"`, `"a form after '"`, ...).
    /// Borrowed when fixed text: a run of millions of stray `)` makes as
    /// many errors, and an allocation each was a third of their cost.
    pub expected: Option<Cow<'static, str>>,
    /// What it found (`")"`, `"end of input"`, ...).
    pub found: Option<Cow<'static, str>>,
}

/// The kinds of [`SyntaxError`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SyntaxErrorKind {
    /// A `)` with no open list or vector.
    ExtraClose,
    /// A construct that starts at `open_offset` and never ends.
    Unclosed(Construct),
    /// A prefix (`'`, `#'`, `#+`, `#S`, ...) with no form after it.
    MissingForm,
    /// `#` followed by something no reader accepts: `#<`, `#)`, whitespace,
    /// end of input.
    InvalidDispatch,
    /// Nesting deeper than [`MAX_DEPTH`].
    TooDeep,
    /// A token of dots only (`.`, `..`) anywhere but as the consing dot
    /// between the last two elements of a list (`(a . b)`).
    MisplacedDot,
    /// A `,` (or `,@`, `,.`) that is not inside a backquote, or one comma
    /// too many in nested backquotes. The reader still takes the comma and
    /// its form as an unquote node.
    CommaOutsideBackquote,
}

/// Constructs that can be left unclosed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Construct {
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
    /// `\` at the very end of the input.
    SingleEscape,
    /// `#\` at the very end of the input.
    Character,
}

impl Construct {
    fn describe(self) -> &'static str {
        match self {
            Construct::List => "list",
            Construct::Vector => "vector",
            Construct::String => "string",
            Construct::BlockComment => "block comment",
            Construct::MultipleEscape => "|escaped| symbol",
            Construct::SingleEscape => "escape",
            Construct::Character => "character literal",
        }
    }
}

impl SyntaxError {
    /// The error as a sentence with 1-based line:column positions, e.g.
    /// `unclosed list: "(" opened at line 3, column 1 is never closed
    /// (expected ")" before end of input at line 9, column 1)`.
    pub fn message(&self, lines: &LineIndex) -> String {
        self.render(&|o| {
            let (l, c) = lines.line_col(o);
            format!("line {l}, column {c}")
        })
    }

    fn render(&self, at: &dyn Fn(usize) -> String) -> String {
        let here = at(self.offset);
        let expected = self.expected.as_deref().unwrap_or("?");
        let found = self.found.as_deref().unwrap_or("?");
        match self.kind {
            SyntaxErrorKind::ExtraClose => format!(
                "extra close parenthesis at {here}: no list is open there (delete it, or add the missing \"(\" earlier)"
            ),
            SyntaxErrorKind::Unclosed(what) => {
                let opened = self.open_offset.map(at).unwrap_or_else(|| "?".into());
                format!(
                    "unclosed {}: opened at {opened} and never closed (expected {expected} before {found} at {here})",
                    what.describe()
                )
            }
            SyntaxErrorKind::MissingForm => {
                let prefix = self.open_offset.map(at).unwrap_or_else(|| "?".into());
                format!("expected {expected} (the prefix at {prefix}) at {here}, found {found}")
            }
            SyntaxErrorKind::InvalidDispatch => format!(
                "unreadable dispatch macro at {here}: found {found}, which no Lisp reader accepts"
            ),
            SyntaxErrorKind::MisplacedDot => format!(
                "misplaced dot {found} at {here}: a dot is allowed only between the last two elements of a list, as in (a . b)"
            ),
            SyntaxErrorKind::CommaOutsideBackquote => format!(
                "comma {found} at {here} is not inside a backquote: only a backquoted form such as `(a ,b) may contain , or ,@"
            ),
            SyntaxErrorKind::TooDeep => format!(
                "nesting deeper than {MAX_DEPTH} levels at {here}; the rest of the input is not read"
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_error_displays_with_byte_offsets_and_reads_with_lines() {
        let src = "(a)\n)";
        let p = parse(src);
        assert_eq!(
            p.errors[0].to_string(),
            "extra close parenthesis at offset 4: no list is open there (delete it, or add the missing \"(\" earlier)"
        );
        assert_eq!(
            p.errors[0].message(&LineIndex::new(src)),
            "extra close parenthesis at line 2, column 1: no list is open there (delete it, or add the missing \"(\" earlier)"
        );
    }
}
