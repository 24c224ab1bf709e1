//! Cross-checks of the read-depth guard (`lisp_syntax::depth`) against the
//! CST: the guard scans text without building anything, the CST reads it
//! fully; both must agree on how deeply the text nests.
//!
//! The guard counts each open list and each reader prefix (`'`, `` ` ``,
//! `,`, `,@`, `#'`, `#.`, and any other `#x` dispatch) as one level of the
//! Lisp reader's recursion. For text made of lists, vectors, the quoting
//! prefixes and leaves, that is exactly the CST's nesting of `List`,
//! `Vector`, `Quote`, `Backquote`, `Unquote`, `UnquoteSplicing`,
//! `FunctionQuote` and `ReadEval` nodes. For any text that reads, it is
//! never less than the CST's nesting of lists and vectors alone (what
//! exhausts a reader's stack), whatever comments, strings, `|…|` symbols
//! and character literals hide.

use lisp_syntax::cst::{parse, Node, NodeKind, SyntaxErrorKind};
use lisp_syntax::depth::nesting_depth;
use proptest::prelude::*;

/// The deepest nesting below `nodes` of the kinds `counts` accepts.
fn cst_depth(nodes: &[Node], counts: &dyn Fn(NodeKind) -> bool) -> usize {
    // An explicit stack: generated text may nest deeper than a test
    // thread's stack allows recursion for.
    let mut max = 0;
    let mut stack: Vec<(&Node, usize)> = nodes.iter().map(|n| (n, 0)).collect();
    while let Some((node, above)) = stack.pop() {
        let here = above + usize::from(counts(node.kind));
        max = max.max(here);
        stack.extend(node.children.iter().map(|c| (c, here)));
    }
    max
}

fn quoting(kind: NodeKind) -> bool {
    matches!(
        kind,
        NodeKind::List
            | NodeKind::Vector
            | NodeKind::Quote
            | NodeKind::Backquote
            | NodeKind::Unquote
            | NodeKind::UnquoteSplicing
            | NodeKind::FunctionQuote
            | NodeKind::ReadEval
    )
}

fn lists(kind: NodeKind) -> bool {
    matches!(kind, NodeKind::List | NodeKind::Vector)
}

/// Text of lists, vectors, quoting prefixes and leaves (tokens, strings,
/// comments, character literals, `|…|` symbols), nested up to `depth`.
fn quoting_form(depth: u32) -> impl Strategy<Value = String> {
    let leaf = prop::sample::select(vec![
        "a",
        "foo",
        "pkg:sym",
        "1.5",
        ":key",
        "\"s (((\"",
        "\"a\\\"((\"",
        "|a (( b|",
        "#\\(",
        "#\\)",
        "#\\Space",
        "#\\λ",
        "a\\(b",
        "λ",
    ])
    .prop_map(str::to_string);
    leaf.prop_recursive(depth, 256, 6, |inner| {
        let prefix = prop::sample::select(vec!["'", "`", ",", ",@", "#'", "#."]);
        let gap = prop::sample::select(vec![" ", "\n", " ; c ((\n", " #| (( #| ( |# |# ", "\t"]);
        prop_oneof![
            (prefix, inner.clone()).prop_map(|(p, f)| format!("{p}{f}")),
            (
                prop::sample::select(vec!["(", "#("]),
                prop::collection::vec((inner, gap), 0..5)
            )
                .prop_map(|(open, items)| {
                    let body: String = items.iter().map(|(f, g)| format!("{f}{g}")).collect();
                    format!("{open}{body})")
                }),
        ]
    })
}

/// Top-level text: forms separated by whitespace and comments, each under
/// a backquote (so its commas read).
fn quoting_text() -> impl Strategy<Value = String> {
    prop::collection::vec(quoting_form(12), 0..4).prop_map(|forms| {
        forms
            .iter()
            .map(|f| format!("`{f}"))
            .collect::<Vec<_>>()
            .join("\n;; ((\n")
    })
}

fn check_exact(src: &str) {
    let p = parse(src);
    // A comma nested deeper than its backquotes is an error to the
    // reader, but the tree is built all the same.
    assert!(
        p.errors
            .iter()
            .all(|e| e.kind == SyntaxErrorKind::CommaOutsideBackquote),
        "{src:?}: {:?}",
        p.errors
    );
    assert_eq!(
        nesting_depth(src),
        cst_depth(&p.forms, &quoting),
        "guard and CST disagree on {src:?}"
    );
}

/// For text that reads, the guard never counts less than the CST's lists.
fn check_bound(src: &str) {
    let p = parse(src);
    if p.errors.is_empty() {
        let guard = nesting_depth(src);
        let lists = cst_depth(&p.forms, &lists);
        assert!(
            guard >= lists,
            "guard {guard} < CST lists {lists} on {src:?}"
        );
    }
}

/// Pieces of Lisp syntax, glued at random (every dispatch macro the CST
/// knows among them).
fn lispish() -> impl Strategy<Value = String> {
    let pieces = vec![
        "(", ")", "(", ")", " ", "\n", "a", "foo", "'", "`", ",", ",@", "\"s\"", "\"((\"", "|a b|",
        "|((|", "; c\n", "; ((\n", "#| (( |#", "#\\(", "#\\)", "#\\Space", "#'", "#(", "#*10",
        "#:g", "#.", "#+sbcl ", "#-ecl ", "#p\"x\"", "#S(", "#2A", "#1=", "#1#", "#xFF", "#c(",
        "λ",
    ];
    prop::collection::vec(prop::sample::select(pieces), 0..80).prop_map(|v| v.concat())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    #[test]
    fn guard_equals_cst_depth_on_quoting_text(src in quoting_text()) {
        check_exact(&src);
    }

    #[test]
    fn guard_never_below_cst_lists(src in lispish()) {
        check_bound(&src);
    }
}

#[test]
fn guard_equals_cst_depth_far_down() {
    for depth in [100, 2_000, 20_000] {
        let src = format!("{}x{}", "(progn '".repeat(depth), ")".repeat(depth));
        let p = parse(&src);
        // The CST stops building below its own limit; the guard goes on.
        if depth * 2 <= lisp_syntax::cst::MAX_DEPTH {
            check_exact(&src);
        } else {
            assert!(!p.errors.is_empty());
            assert_eq!(nesting_depth(&src), depth * 2);
        }
    }
}

/// Real source: the server's own Lisp helpers and the CST's test corpus.
#[test]
fn guard_never_below_cst_lists_on_real_text() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let dirs = [root.join("../cl-mcp-server/lisp"), root.join("tests")];
    let mut checked = 0;
    for dir in dirs {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|e| e == "lisp") {
                let text = std::fs::read_to_string(&path).unwrap();
                let p = parse(&text);
                assert!(p.errors.is_empty(), "{}: {:?}", path.display(), p.errors);
                let guard = nesting_depth(&text);
                let lists = cst_depth(&p.forms, &lists);
                let all = cst_depth(&p.forms, &|k| {
                    !matches!(k, NodeKind::Punct) && k != NodeKind::Error
                });
                assert!(
                    guard >= lists,
                    "{}: guard {guard} < lists {lists}",
                    path.display()
                );
                // Every level the guard counts is a node of the CST (leaves
                // such as `#:g` or `#xFF` one level at most).
                assert!(
                    guard <= all,
                    "{}: guard {guard} > CST {all}",
                    path.display()
                );
                checked += 1;
            }
        }
    }
    assert!(checked >= 10, "only {checked} files");
}

/// Found by the cross-check: a label reference `#1#` right before a
/// closing parenthesis was scanned as two prefixes, the second one (`#)`)
/// swallowing the `)`, so the guard counted the list as still open and
/// overcounted every list after it (text of many such lists was refused as
/// too deep).
#[test]
fn guard_reads_label_references_before_a_closer() {
    let src = "(list #1=(a) #1#)\n".repeat(50);
    let p = parse(&src);
    assert!(p.errors.is_empty());
    // The label `#1=` counts as a level (the reader recurses for it), one
    // more than the CST's quoting depth; and never more.
    assert_eq!(nesting_depth(&src), cst_depth(&p.forms, &quoting) + 1);
}
