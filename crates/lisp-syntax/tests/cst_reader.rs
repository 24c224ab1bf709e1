//! Behaviour of the lossless reader on hand-written Common Lisp snippets.

use lisp_syntax::cst::{
    parse, Construct, LineIndex, Node, NodeKind, Parse, SymbolName, SyntaxErrorKind,
};

/// Parses and checks the structural invariants every parse must satisfy.
fn checked(src: &str) -> Parse {
    let p = parse(src);
    let rebuilt: String = p.leaves().map(|n| n.text(src)).collect();
    assert_eq!(rebuilt, src, "leaves must rebuild the input");
    let mut at = 0;
    for n in &p.forms {
        assert_eq!(n.span.start, at);
        check_node(n);
        at = n.span.end;
    }
    assert_eq!(at, src.len());
    p
}

fn check_node(n: &Node) {
    if n.children.is_empty() {
        return;
    }
    let mut at = n.span.start;
    for c in &n.children {
        assert_eq!(c.span.start, at, "children must be contiguous in {n:?}");
        check_node(c);
        at = c.span.end;
    }
    assert_eq!(at, n.span.end, "children must cover the parent {n:?}");
}

/// Kinds and texts of the top-level forms.
fn tops(src: &str) -> Vec<(NodeKind, &str)> {
    let p = checked(src);
    assert!(p.errors.is_empty(), "{src:?}: {:?}", p.errors);
    p.top_level_forms()
        .map(|n| (n.kind, n.text(src)))
        .collect::<Vec<_>>()
}

fn texts(src: &str) -> Vec<&str> {
    tops(src).into_iter().map(|(_, t)| t).collect()
}

#[test]
fn lists_tokens_and_trivia() {
    let src = "(defun f (x) ; c\n  (+ x 1))\n\n#| block #| nested |# |#\nfoo";
    let p = checked(src);
    assert!(p.is_ok());
    let forms: Vec<_> = p.top_level_forms().collect();
    assert_eq!(forms.len(), 2);
    assert_eq!(forms[0].kind, NodeKind::List);
    assert!(forms[0].is_closed());
    assert_eq!(forms[0].head_symbol(src), Some("defun"));
    assert_eq!(forms[0].head_name_upper(src).as_deref(), Some("DEFUN"));
    let elems: Vec<_> = forms[0].elements().map(|n| n.text(src)).collect();
    assert_eq!(elems, ["defun", "f", "(x)", "(+ x 1)"]);
    assert_eq!(forms[1].text(src), "foo");
    let kinds: Vec<_> = p.forms.iter().map(|n| n.kind).collect();
    assert_eq!(
        kinds,
        [
            NodeKind::List,
            NodeKind::Whitespace,
            NodeKind::BlockComment,
            NodeKind::Whitespace,
            NodeKind::Token
        ]
    );
}

#[test]
fn strings_and_escapes() {
    assert_eq!(
        texts(r#""a \"b\" (" x |a ) b| c\ d e\(f"#),
        [r#""a \"b\" (""#, "x", "|a ) b|", r"c\ d", r"e\(f"]
    );
    assert_eq!(texts("|a\\|b|c d"), ["|a\\|b|c", "d"]);
}

#[test]
fn character_literals() {
    assert_eq!(
        tops(r"#\( #\) #\Space #\u+1F600 #\; #\a(b) #\λ #\\"),
        [
            (NodeKind::CharLiteral, r"#\("),
            (NodeKind::CharLiteral, r"#\)"),
            (NodeKind::CharLiteral, r"#\Space"),
            (NodeKind::CharLiteral, r"#\u+1F600"),
            (NodeKind::CharLiteral, r"#\;"),
            (NodeKind::CharLiteral, r"#\a"),
            (NodeKind::List, "(b)"),
            (NodeKind::CharLiteral, r"#\λ"),
            (NodeKind::CharLiteral, r"#\\"),
        ]
    );
    // Inside a list, #\) does not close it.
    let src = r"(list #\) #\()";
    assert_eq!(texts(src), [src]);
}

#[test]
fn quote_family() {
    let src = "'a `(b ,c ,@d ,.e) #'f ' g";
    let p = checked(src);
    assert!(p.is_ok());
    let forms: Vec<_> = p.top_level_forms().collect();
    let kinds: Vec<_> = forms.iter().map(|n| n.kind).collect();
    assert_eq!(
        kinds,
        [
            NodeKind::Quote,
            NodeKind::Backquote,
            NodeKind::FunctionQuote,
            NodeKind::Quote
        ]
    );
    assert_eq!(forms[3].text(src), "' g");
    let inner: Vec<_> = forms[1]
        .elements()
        .next()
        .unwrap()
        .elements()
        .map(|n| n.kind)
        .collect();
    assert_eq!(
        inner,
        [
            NodeKind::Token,
            NodeKind::Unquote,
            NodeKind::UnquoteSplicing,
            NodeKind::UnquoteSplicing
        ]
    );
    assert_eq!(forms[2].elements().next().unwrap().text(src), "f");
}

#[test]
fn sharp_dispatch_forms() {
    assert_eq!(
        tops("#(1 2) #3(a) #*1011 #:foo #.(+ 1 2) #p\"/tmp/\" #S(point :x 1) #2A((1 2) (3 4)) #1=(a . #1#) #x1F #b101 #o17 #36rZZ #c(1 2) #+sbcl x #-(or a b) (y)"),
        [
            (NodeKind::Vector, "#(1 2)"),
            (NodeKind::Vector, "#3(a)"),
            (NodeKind::BitVector, "#*1011"),
            (NodeKind::Uninterned, "#:foo"),
            (NodeKind::ReadEval, "#.(+ 1 2)"),
            (NodeKind::Pathname, "#p\"/tmp/\""),
            (NodeKind::Structure, "#S(point :x 1)"),
            (NodeKind::Array, "#2A((1 2) (3 4))"),
            (NodeKind::Label, "#1=(a . #1#)"),
            (NodeKind::RadixNumber, "#x1F"),
            (NodeKind::RadixNumber, "#b101"),
            (NodeKind::RadixNumber, "#o17"),
            (NodeKind::RadixNumber, "#36rZZ"),
            (NodeKind::Complex, "#c(1 2)"),
            (NodeKind::ReaderConditional { positive: true }, "#+sbcl x"),
            (NodeKind::ReaderConditional { positive: false }, "#-(or a b) (y)"),
        ]
    );
}

#[test]
fn reader_conditional_holds_feature_and_form() {
    let src = "#+(and sbcl (not win32)) ; why\n (defun f ())";
    let p = checked(src);
    let rc = p.top_level_forms().next().unwrap();
    let parts: Vec<_> = rc.elements().map(|n| n.text(src)).collect();
    assert_eq!(parts, ["(and sbcl (not win32))", "(defun f ())"]);
    assert_eq!(
        rc.skip_reader_conditionals()
            .unwrap()
            .head_name_upper(src)
            .as_deref(),
        Some("DEFUN")
    );
    // Nested conditionals: the guarded form is itself a conditional.
    let src = "#+a #-b c d";
    assert_eq!(texts(src), ["#+a #-b c", "d"]);
    let p = checked(src);
    let first = p.top_level_forms().next().unwrap();
    assert_eq!(first.skip_reader_conditionals().unwrap().text(src), "c");
    let p = checked("#+a");
    assert!(p.forms[0].skip_reader_conditionals().is_none());
}

#[test]
fn unknown_dispatch_macros_are_opaque() {
    assert_eq!(
        tops(r#"#?"interp ${x} \" q" #[1 2 [3] "]"] #{a b} #$foo bar #! #?/a\/b/"#),
        [
            (NodeKind::Opaque, r#"#?"interp ${x} \" q""#),
            (NodeKind::Opaque, r#"#[1 2 [3] "]"]"#),
            (NodeKind::Opaque, "#{a b}"),
            (NodeKind::Opaque, "#$foo"),
            (NodeKind::Token, "bar"),
            (NodeKind::Opaque, "#!"),
            (NodeKind::Opaque, r"#?/a\/b/"),
        ]
    );
    // Unclosed bracket: the dispatch characters and the next form, then
    // normal reading.
    let p = checked("#[a (b)");
    assert!(p.is_ok());
    let kinds: Vec<_> = p
        .top_level_forms()
        .map(|n| (n.kind, n.span.clone()))
        .collect();
    assert_eq!(kinds, [(NodeKind::Opaque, 0..3), (NodeKind::List, 4..7)]);
}

#[test]
fn brackets_are_constituents() {
    assert_eq!(texts("[a b] {c}"), ["[a", "b]", "{c}"]);
}

#[test]
fn extra_close_is_an_error_leaf_and_reading_goes_on() {
    let src = "(a)) (b)";
    let p = checked(src);
    assert_eq!(p.errors.len(), 1);
    let e = &p.errors[0];
    assert_eq!(e.kind, SyntaxErrorKind::ExtraClose);
    assert_eq!(e.offset, 3);
    let kinds: Vec<_> = p.top_level_forms().map(|n| n.kind).collect();
    assert_eq!(kinds, [NodeKind::List, NodeKind::Error, NodeKind::List]);
    assert!(e.to_string().contains("offset 3"), "{e}");
}

#[test]
fn unclosed_constructs_report_their_opener() {
    let cases: &[(&str, Construct, usize)] = &[
        ("(a (b c)\n", Construct::List, 0),
        ("x #(1 2", Construct::Vector, 2),
        ("(a \"bc)", Construct::String, 3),
        ("a #| x #| y |# z", Construct::BlockComment, 2),
        ("(a |bc)", Construct::MultipleEscape, 3),
        ("a\\", Construct::SingleEscape, 1),
        ("#\\", Construct::Character, 0),
    ];
    for &(src, what, open) in cases {
        let p = checked(src);
        let e = p
            .errors
            .iter()
            .find(|e| e.kind == SyntaxErrorKind::Unclosed(what))
            .unwrap_or_else(|| panic!("{src:?}: {:?}", p.errors));
        assert_eq!(e.open_offset, Some(open), "{src:?}");
        assert_eq!(e.offset, src.len(), "{src:?}");
    }
    // An unclosed list runs to the end and holds everything after it.
    let src = "(defun f ()\n  (g)\n";
    let p = checked(src);
    assert_eq!(p.forms.len(), 1);
    assert!(!p.forms[0].is_closed());
    let msg = p.errors[0].message(&LineIndex::new(src));
    assert!(msg.contains("line 1, column 1"), "{msg}");
}

#[test]
fn prefix_without_form() {
    let src = "(a ') 'b #+sbcl";
    let p = checked(src);
    let kinds: Vec<_> = p.errors.iter().map(|e| (e.kind, e.offset)).collect();
    assert_eq!(
        kinds,
        [
            (SyntaxErrorKind::MissingForm, 4),
            (SyntaxErrorKind::MissingForm, src.len())
        ]
    );
    // The list still closes at its own paren.
    assert_eq!(p.forms[0].text(src), "(a ')");
    assert!(
        p.errors[1].to_string().contains("guarded by #+"),
        "{}",
        p.errors[1]
    );
    // Quote of an unclosed list is a quote, not a missing form.
    let p = checked("'(a");
    assert_eq!(p.errors.len(), 1);
    assert_eq!(p.errors[0].kind, SyntaxErrorKind::Unclosed(Construct::List));
    assert_eq!(p.forms[0].kind, NodeKind::Quote);
}

#[test]
fn invalid_dispatch() {
    for src in ["#<foo>", "# a", "#)", "#"] {
        let p = checked(src);
        assert_eq!(
            p.errors.first().map(|e| e.kind),
            Some(SyntaxErrorKind::InvalidDispatch),
            "{src:?}"
        );
    }
}

#[test]
fn deep_nesting_is_cut_off_not_overflowed() {
    let src = "(".repeat(200_000) + &")".repeat(200_000);
    let p = checked(&src);
    assert!(p.errors.iter().any(|e| e.kind == SyntaxErrorKind::TooDeep));
    let quotes = "'".repeat(100_000) + "x";
    checked(&quotes);
}

#[test]
fn line_index_counts_characters() {
    let src = "ab\nλx y\r\n\nz😀w";
    let li = LineIndex::new(src);
    assert_eq!(li.line_col(0), (1, 1));
    assert_eq!(li.line_col(2), (1, 3));
    assert_eq!(li.line_col(3), (2, 1));
    let x = src.find('x').unwrap();
    assert_eq!(li.line_col(x), (2, 2));
    assert_eq!(li.line_col(x - 1), (2, 1), "inside λ counts as λ");
    let w = src.find('w').unwrap();
    assert_eq!(li.line_col(w), (4, 3));
    assert_eq!(li.line_col(src.len()), (4, 4));
    for (off, _) in src.char_indices().chain([(src.len(), ' ')]) {
        let (l, c) = li.line_col(off);
        assert_eq!(li.offset_of(l, c), Some(off), "offset {off} -> {l}:{c}");
    }
    assert_eq!(li.offset_of(1, 4), None);
    assert_eq!(li.offset_of(5, 1), None);
    assert_eq!(li.offset_of(0, 1), None);
    assert_eq!(li.line_count(), 4);
}

#[test]
fn symbol_names() {
    let s = SymbolName::read("cl:defun");
    assert_eq!(
        (s.package.as_deref(), s.name.as_str(), s.internal),
        (Some("CL"), "DEFUN", false)
    );
    let s = SymbolName::read("foo::|Bar baz|x\\y");
    assert_eq!(
        (s.package.as_deref(), s.name.as_str(), s.internal),
        (Some("FOO"), "Bar bazXy", true)
    );
    let s = SymbolName::read(":key");
    assert_eq!(
        (s.package.as_deref(), s.name.as_str()),
        (Some("KEYWORD"), "KEY")
    );
    let s = SymbolName::read("#:Foo");
    assert_eq!((s.package.as_deref(), s.name.as_str()), (Some(""), "FOO"));
    let s = SymbolName::read("|a:b|");
    assert_eq!((s.package, s.name.as_str()), (None, "a:b"));
}

#[test]
fn node_at_and_top_level_form_at() {
    let src = "(a (b c))\n(d)";
    let p = checked(src);
    let top = p.top_level_form_at(4).unwrap();
    assert_eq!(top.text(src), "(a (b c))");
    assert_eq!(top.node_at(4).unwrap().text(src), "b");
    assert_eq!(p.top_level_form_at(src.len()).unwrap().text(src), "(d)");
    assert_eq!(p.top_level_form_at(9).unwrap().kind, NodeKind::Whitespace);
}

#[test]
fn commas_must_be_inside_a_backquote() {
    let comma_errors = |src: &str| -> Vec<usize> {
        let p = checked(src);
        p.errors
            .iter()
            .filter(|e| e.kind == SyntaxErrorKind::CommaOutsideBackquote)
            .map(|e| e.offset)
            .collect()
    };
    assert_eq!(
        comma_errors("`(a ,b ,@c (d ,.e) `(f ,,g))"),
        Vec::<usize>::new()
    );
    assert_eq!(comma_errors(",a (b ,c)"), [0, 6]);
    // One comma too many.
    assert_eq!(comma_errors("`(a ,(b ,c))"), [8]);
    // #. #S #A read their form as if outside any backquote, like SBCL.
    assert_eq!(
        comma_errors("`(#.,a #S(p ,b) #1A(,c) #(,d) #p,e)"),
        [4, 12, 20]
    );
    // The comma is still read as an unquote of the form after it.
    let src = ",(a b)";
    let p = checked(src);
    assert_eq!(p.forms[0].kind, NodeKind::Unquote);
    assert_eq!(p.forms[0].span, 0..src.len());
    assert!(p.errors[0].to_string().contains("not inside a backquote"));
}

#[test]
fn dots_only_as_the_consing_dot() {
    let dot_errors = |src: &str| -> Vec<usize> {
        let p = checked(src);
        p.errors
            .iter()
            .filter(|e| e.kind == SyntaxErrorKind::MisplacedDot)
            .map(|e| e.offset)
            .collect()
    };
    // Accepted, as by SBCL.
    for src in [
        "(a . b)",
        "(a b . c)",
        "(a . #|x|# b)",
        "(a \\. b)",
        "(a |.| b)",
        "(a .b)",
        "(a . (b))",
        "`(a . ,b)",
    ] {
        assert_eq!(dot_errors(src), Vec::<usize>::new(), "{src:?}");
    }
    // Refused, as by SBCL.
    assert_eq!(dot_errors("."), [0]);
    assert_eq!(dot_errors("(. a)"), [1]);
    assert_eq!(dot_errors("(a .)"), [3]);
    assert_eq!(dot_errors("(a . b c)"), [3]);
    assert_eq!(dot_errors("(a ..)"), [3]);
    assert_eq!(dot_errors("'."), [1]);
    assert_eq!(dot_errors("#(a . b)"), [4]);
    assert_eq!(dot_errors("(a . b . c)"), [3, 7]);
    let p = checked("(a . b c)");
    assert!(
        p.errors[0].to_string().contains("misplaced dot"),
        "{}",
        p.errors[0]
    );
    // SBCL's own idiom: one of the conditionals supplies the tail.
    assert_eq!(dot_errors("(a . #+x () #-x (b))"), Vec::<usize>::new());
    assert_eq!(dot_errors("(a . #+x b c)"), Vec::<usize>::new());
    assert_eq!(dot_errors("(a . b #+x c)"), Vec::<usize>::new());
    assert_eq!(dot_errors("(a . b c #+x d)"), [3]);
    // Disabled code is not checked (SBCL does not check it either).
    assert!(checked("#+nil (defun f (..) ..) #-(or) ,x").is_ok());
    assert_eq!(dot_errors("#+nil (a) (..)"), [11]);
}
