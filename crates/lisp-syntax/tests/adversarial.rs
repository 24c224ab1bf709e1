//! The repair and the reader on adversarial shapes (`benches/support/shapes.rs`,
//! shared with the `adversarial` bench), each within a time a quadratic
//! algorithm misses by far: at these sizes the search back to the line
//! start for every token took tens of seconds in a release build, where
//! these bounds hold for a debug build on a loaded machine.

use std::time::{Duration, Instant};

use lisp_syntax::cst::{parse, LineIndex};
use lisp_syntax::repair::{repair_parens, Repair, MAX_PAREN_ERRORS};

#[path = "../benches/support/shapes.rs"]
mod shapes;

/// Size of each shape, in bytes.
const SIZE: usize = 400_000;
/// What a shape may take, reading and repair together.
const BOUND: Duration = Duration::from_secs(6);

fn timed(name: &str, text: &str) -> Repair {
    let t = Instant::now();
    let p = parse(text);
    let lines = LineIndex::new(text);
    assert_eq!(lines.len(), text.len());
    drop(p);
    let r = repair_parens(text);
    let took = t.elapsed();
    assert!(took < BOUND, "{name}: {took:?} for {} bytes", text.len());
    r
}

fn refused(r: &Repair) -> String {
    match r {
        Repair::Refused(r) => r.to_string(),
        other => panic!("not refused: {other:?}"),
    }
}

#[test]
fn every_shape_is_read_and_repaired_in_linear_time() {
    for (name, make) in shapes::SHAPES {
        timed(name, &make(SIZE));
    }
}

#[test]
fn a_run_of_closers_on_one_line_is_refused_quickly() {
    let r = timed("closers", &shapes::closers(SIZE));
    let why = refused(&r);
    assert!(
        why.contains(&format!("more than the {MAX_PAREN_ERRORS}")),
        "{why}"
    );
    let r = timed("after a form", &shapes::form_then_closers(SIZE));
    let why = refused(&r);
    assert!(why.contains("`(defun f` (line 1)"), "{why}");
}

#[test]
fn a_few_stray_closers_after_a_long_line_are_still_removed() {
    // One line of 400 kB, then closers the repair takes off: the columns of
    // a long line cost one pass, not one per token.
    let mut text = shapes::long_line(SIZE);
    text.insert(text.len() - 1, ')');
    text.push_str("(defun g ()\n  2)))\n");
    match timed("long line", &text) {
        Repair::Repaired { text, changes } => {
            assert_eq!(changes.len(), 1, "{changes:?}");
            assert!(
                text.ends_with("(defun g ()\n  2)\n"),
                "{}",
                &text[text.len() - 40..]
            );
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_long_file_one_form_short_is_repaired_at_that_form() {
    let text = shapes::one_form_short(SIZE);
    match timed("one form short", &text) {
        Repair::Repaired { changes, .. } => {
            assert_eq!(changes.len(), 1);
            let lines = text.lines().count();
            assert!(changes[0].line > lines / 3 && changes[0].line < 2 * lines / 3);
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn nesting_deeper_than_the_reader_follows_is_refused_not_passed() {
    // A run of openers, and a file of forms each a closer short: the
    // reader stops following at its depth bound, and the repair said
    // "unchanged" (no parenthesis error was left to see), so such files
    // were written without a word.
    for (name, text) in [
        ("openers", shapes::openers(SIZE)),
        ("each one closer short", shapes::forms_short(SIZE)),
    ] {
        let why = refused(&timed(name, &text));
        assert!(
            why.contains("nest deeper than 1000 levels"),
            "{name}: {why}"
        );
    }
    let why = refused(&repair_parens(&"(defun f (x)\n  (g x)\n\n".repeat(1_200)));
    assert!(why.contains("`(defun f` (line 1)"), "{why}");
    // Below the bound, deep text that reads is left alone.
    let deep = format!("{}{}", "(".repeat(900), ")".repeat(900));
    assert_eq!(repair_parens(&deep), Repair::Unchanged);
}

#[test]
fn cr_only_line_endings_are_refused_not_swallowed() {
    // Old Mac files: lines end in `\r` alone. Read by `\n`, the file is one
    // line, and a repair would close the first form at the end of the text,
    // swallowing `(defun h () 1)`.
    let text = "(defun f (x)\r  (g x)\r\r(defun h () 1)\r";
    let why = refused(&repair_parens(text));
    assert!(why.contains("carriage return alone"), "{why}");
    assert!(why.contains("`(defun f` (line 1)"), "{why}");
    // CRLF files are repaired as ever, and a text that reads is left alone.
    match repair_parens("(defun f (x)\r\n  (g x)\r\n\r\n(defun h () 1)\r\n") {
        Repair::Repaired { text, .. } => {
            assert_eq!(text, "(defun f (x)\r\n  (g x))\r\n\r\n(defun h () 1)\r\n")
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(repair_parens("(defun h ()\r  1)\r"), Repair::Unchanged);
    // And the bound holds at size.
    let why = refused(&timed("CR-only", &shapes::cr_only_short(SIZE)));
    assert!(why.contains("carriage return alone"), "{why}");
}

#[test]
fn stray_closers_up_to_the_bound_are_repaired() {
    // Forms each with one closer too many, each on a line of its own: up
    // to the bound, every one is taken off.
    let n = MAX_PAREN_ERRORS / 2;
    let text = "(defun f (x)\n  (g x)))\n\n".repeat(n);
    match timed("stray closers", &text) {
        Repair::Repaired { changes, text } => {
            assert_eq!(changes.len(), n);
            assert_eq!(text, "(defun f (x)\n  (g x))\n\n".repeat(n));
        }
        other => panic!("{other:?}"),
    }
}
