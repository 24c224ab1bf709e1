//! The adversarial shapes of text the `adversarial` bench times and the
//! tests in `tests/adversarial.rs` bound: each a function from a size in
//! bytes to a text of about that size.

#![allow(dead_code)]

/// A name and a maker.
pub type Shape = (&'static str, fn(usize) -> String);

pub const SHAPES: &[Shape] = &[
    ("closers on one line", closers),
    ("closers, one per line", closer_lines),
    ("openers on one line", openers),
    ("openers, one per line", opener_lines),
    ("one-character lines", one_char_lines),
    ("forms then stray closers", form_then_closers),
    ("many forms, each one closer short", forms_short),
    ("many forms, one closer short", one_form_short),
    ("one long line", long_line),
    ("CR-only lines, one closer short", cr_only_short),
];

pub fn closers(n: usize) -> String {
    ")".repeat(n)
}

pub fn closer_lines(n: usize) -> String {
    ")\n".repeat(n / 2)
}

pub fn openers(n: usize) -> String {
    "(".repeat(n)
}

pub fn opener_lines(n: usize) -> String {
    "(\n".repeat(n / 2)
}

pub fn one_char_lines(n: usize) -> String {
    "a\n".repeat(n / 2)
}

/// A form, then `n` stray closers on one line.
pub fn form_then_closers(n: usize) -> String {
    format!("(defun f (x)\n  (+ x 1))\n{}\n", ")".repeat(n))
}

const FORM: &str = "(defun f (x)\n  (let ((y (* x 2)))\n    (+ x y)))\n\n";
const SHORT: &str = "(defun f (x)\n  (let ((y (* x 2)))\n    (+ x y))\n\n";

/// Forms of four lines each, every one missing its last closer.
pub fn forms_short(n: usize) -> String {
    SHORT.repeat(n / SHORT.len())
}

/// Forms of four lines each (a 400k-line file at 10 MB), the middle one
/// missing its last closer.
pub fn one_form_short(n: usize) -> String {
    let k = n / FORM.len();
    let mut s = FORM.repeat(k / 2);
    s.push_str(SHORT);
    s.push_str(&FORM.repeat(k - k / 2));
    s
}

/// One line of `n` bytes: a list of symbols, one closer short.
pub fn long_line(n: usize) -> String {
    let mut s = String::with_capacity(n + 16);
    s.push_str("(list");
    while s.len() < n {
        s.push_str(" a (b c)");
    }
    s.push('\n');
    s
}

/// Forms with lines separated by `\r` alone, the middle one a closer short.
pub fn cr_only_short(n: usize) -> String {
    one_form_short(n).replace('\n', "\r")
}
