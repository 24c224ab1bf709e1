//! Property tests: whatever the input, the reader never panics, is lossless,
//! and builds a well-formed tree; the parenthesis repair never panics and
//! only ever moves closers, into text that reads.

use lisp_syntax::cst::{parse, LineIndex, Node, NodeKind};
use lisp_syntax::repair::{repair_parens, Repair};
use proptest::prelude::*;

/// The invariants every parse must satisfy.
fn check_invariants(src: &str) {
    let p = parse(src);
    let mut at = 0;
    for n in &p.forms {
        assert_eq!(n.span.start, at, "top-level nodes must tile the input");
        check_node(src, n, 0);
        at = n.span.end;
    }
    assert_eq!(at, src.len(), "top-level nodes must cover the input");
    let rebuilt: String = p.leaves().map(|n| n.text(src)).collect();
    assert_eq!(rebuilt, src, "leaves must rebuild the input");
    for e in &p.errors {
        assert!(e.offset <= src.len(), "{e:?}");
        assert!(e.open_offset.is_none_or(|o| o <= e.offset), "{e:?}");
        let _ = e.message(&LineIndex::new(src));
    }
    let has_error_leaf = p.leaves().any(|n| n.kind == NodeKind::Error);
    assert!(
        !has_error_leaf || !p.errors.is_empty(),
        "an Error leaf always comes with an error"
    );
    // A clean parse is compositional: each top-level form read alone is
    // the same single form.
    if p.errors.is_empty() {
        for form in p.top_level_forms() {
            let text = form.text(src);
            let alone = parse(text);
            assert!(alone.errors.is_empty(), "{text:?}: {:?}", alone.errors);
            let forms: Vec<_> = alone.top_level_forms().collect();
            assert_eq!(forms.len(), 1, "{text:?}");
            assert_eq!(forms[0].kind, form.kind, "{text:?}");
        }
    }
}

fn check_node(src: &str, n: &Node, depth: usize) {
    assert!(n.span.start <= n.span.end);
    assert!(
        src.is_char_boundary(n.span.start) && src.is_char_boundary(n.span.end),
        "span {:?} splits a character",
        n.span
    );
    assert!(depth <= lisp_syntax::cst::MAX_DEPTH + 1, "too deep");
    if n.children.is_empty() {
        assert!(
            n.span.start < n.span.end,
            "a leaf is never empty: {n:?} in {src:?}"
        );
        return;
    }
    let mut at = n.span.start;
    for c in &n.children {
        assert_eq!(c.span.start, at, "children contiguous in {n:?}");
        check_node(src, c, depth + 1);
        at = c.span.end;
    }
    assert_eq!(at, n.span.end, "children cover parent {n:?}");
}

/// Pieces of Lisp syntax, glued at random, reach far more interesting states
/// than random characters do.
fn lispish() -> impl Strategy<Value = String> {
    let pieces = vec![
        "(",
        ")",
        "(",
        ")",
        " ",
        "\n",
        "\t",
        "\r\n",
        "a",
        "foo",
        "1.5",
        "'",
        "`",
        ",",
        ",@",
        ",.",
        "\"",
        "\"s\"",
        "\\",
        "\\\"",
        "|",
        "|a b|",
        ";",
        "; c\n",
        "#|",
        "|#",
        "#",
        "#\\",
        "#\\(",
        "#\\)",
        "#\\Space",
        "#'",
        "#(",
        "#*10",
        "#:",
        "#.",
        "#+",
        "#-",
        "#+sbcl",
        "#p",
        "#S(",
        "#2A",
        "#1=",
        "#1#",
        "#x",
        "#b",
        "#36r",
        "#c(",
        "#?",
        "#?\"",
        "#[",
        "]",
        "#{",
        "}",
        "#<",
        "#)",
        "# ",
        "#!",
        "λ",
        "😀",
        "#\\λ",
        "\u{c}",
        "[",
        "{",
        ":",
        "::",
        "pkg:sym",
        ".",
        "#|#",
        "|##|",
        "#\"",
        "#5(",
        "#\\u+1F600",
    ];
    prop::collection::vec(prop::sample::select(pieces), 0..80).prop_map(|v| v.concat())
}

/// `repair_parens` never panics; a repair reads, differs from the input only
/// by `)` characters, and reports as many of them as it moved; text that
/// reads is never changed.
fn check_repair(src: &str) {
    match repair_parens(src) {
        Repair::Unchanged | Repair::Refused(_) => {}
        Repair::Repaired { text, changes } => {
            assert!(!parse(src).is_ok(), "repaired text that read: {src:?}");
            assert!(parse(&text).is_ok(), "{src:?} -> {text:?}");
            let strip = |s: &str| s.replace(')', "");
            assert_eq!(strip(src), strip(&text), "{src:?} -> {text:?}");
            let added: usize = changes.iter().filter(|c| c.added).map(|c| c.count).sum();
            let removed: usize = changes.iter().filter(|c| !c.added).map(|c| c.count).sum();
            let count = |s: &str| s.matches(')').count();
            assert_eq!(
                count(&text) + removed,
                count(src) + added,
                "{src:?} -> {text:?}"
            );
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    #[test]
    fn lispish_inputs(src in lispish()) {
        check_invariants(&src);
    }

    #[test]
    fn lispish_alphabet(src in "[()'`,@#|\\\\\";\n a-z0-9:+\\-.*=?<>\\[\\]{}λ😀\t\r]{0,200}") {
        check_invariants(&src);
    }

    #[test]
    fn arbitrary_bytes(bytes in prop::collection::vec(any::<u8>(), 0..300)) {
        check_invariants(&String::from_utf8_lossy(&bytes));
    }

    #[test]
    fn repairs_only_move_closers_and_always_read(src in lispish()) {
        check_repair(&src);
    }

    #[test]
    fn repairs_of_indented_lines(src in "[()a \n;\"#|]{0,120}") {
        check_repair(&src);
    }

    #[test]
    fn line_index_round_trips(src in "[a\nλ😀\r b]{0,80}") {
        let li = LineIndex::new(&src);
        for (off, _) in src.char_indices().chain([(src.len(), ' ')]) {
            let (line, col) = li.line_col(off);
            prop_assert_eq!(li.offset_of(line, col), Some(off));
        }
    }
}
