//! How deeply a text nests, as the Lisp reader would recurse over it.
//!
//! The Lisp reader recurses once per open list and once per prefix
//! (`'`, `` ` ``, `,`, `,@`, `#'`, `#.`, `#+`/`#-` …), so a text nested
//! tens of thousands deep exhausts the image's control stack. This scan
//! measures that depth without building anything and without recursing
//! itself, so the server can refuse such text before the image reads it.

/// The deepest nesting of lists and reader prefixes in `text`: `0` for
/// atoms, `1` for `(a b)`, `2` for `'(a)` or `((a))`. Strings, comments
/// (`;`, nested `#|…|#`), `|…|` symbols, character literals (`#\(`) and
/// escaped characters do not count. Unbalanced text is measured as far as
/// it goes.
pub fn nesting_depth(text: &str) -> usize {
    let b = text.as_bytes();
    let mut i = 0;
    // Per open list: the prefixes pending when it opened.
    let mut stack: Vec<usize> = Vec::new();
    let mut total = 0usize; // lists + their prefixes currently open
    let mut prefixes = 0usize; // prefixes waiting for their datum
    let mut max = 0usize;
    while i < b.len() {
        match b[i] {
            b'(' => {
                stack.push(prefixes);
                total += prefixes + 1;
                prefixes = 0;
                max = max.max(total);
                i += 1;
            }
            b')' => {
                if let Some(p) = stack.pop() {
                    total -= p + 1;
                }
                prefixes = 0;
                i += 1;
            }
            b'\'' | b'`' | b',' => {
                prefixes += 1;
                max = max.max(total + prefixes);
                i += 1;
                if b[i - 1] == b',' && b.get(i) == Some(&b'@') {
                    i += 1;
                }
            }
            b';' => {
                while i < b.len() && b[i] != b'\n' {
                    i += 1;
                }
            }
            b'"' | b'|' => {
                let quote = b[i];
                i += 1;
                while i < b.len() && b[i] != quote {
                    i += if b[i] == b'\\' { 2 } else { 1 };
                }
                i += 1;
                prefixes = 0;
            }
            b'\\' => {
                i += 2;
                prefixes = 0;
            }
            b'#' => match b.get(i + 1) {
                Some(b'|') => {
                    let mut level = 1;
                    i += 2;
                    while i < b.len() && level > 0 {
                        if b[i..].starts_with(b"|#") {
                            level -= 1;
                            i += 2;
                        } else if b[i..].starts_with(b"#|") {
                            level += 1;
                            i += 2;
                        } else {
                            i += 1;
                        }
                    }
                }
                Some(b'\\') => {
                    // The character after `#\` is literal, whatever it is.
                    i += 2;
                    if i < b.len() {
                        i += utf8_len(b[i]);
                    }
                    prefixes = 0;
                }
                Some(b'(') => i += 1, // a vector: the `(` counts as a list
                Some(d) if d.is_ascii_digit() => {
                    let mut j = i + 1;
                    while j < b.len() && b[j].is_ascii_digit() {
                        j += 1;
                    }
                    match b.get(j) {
                        // `#1#`: a reference to a labelled datum, itself a datum.
                        Some(b'#') => {
                            prefixes = 0;
                            i = j + 1;
                        }
                        // `#3(`: a vector with its length; the `(` counts next.
                        Some(b'(') => i = j,
                        // `#1=`, `#2A`, `#36r`: a prefix to the next datum.
                        _ => {
                            prefixes += 1;
                            max = max.max(total + prefixes);
                            i = j + 1;
                        }
                    }
                }
                Some(_) => {
                    // `#'`, `#.`, `#+x`, `#1=`, `#S`…: a prefix to the next datum.
                    prefixes += 1;
                    max = max.max(total + prefixes);
                    i += 2;
                }
                None => i += 1,
            },
            c if c.is_ascii_whitespace() => i += 1,
            _ => {
                // An atom: consumes the pending prefixes.
                prefixes = 0;
                while i < b.len() && !is_terminator(b[i]) {
                    i += if b[i] == b'\\' { 2 } else { 1 };
                }
            }
        }
    }
    max
}

fn is_terminator(c: u8) -> bool {
    c.is_ascii_whitespace() || matches!(c, b'(' | b')' | b'\'' | b'`' | b',' | b';' | b'"')
}

fn utf8_len(first: u8) -> usize {
    match first {
        0xF0..=0xFF => 4,
        0xE0..=0xEF => 3,
        0xC0..=0xDF => 2,
        _ => 1,
    }
}

#[cfg(test)]
mod tests {
    use super::nesting_depth;

    #[test]
    fn counts_lists_and_prefixes() {
        assert_eq!(nesting_depth("a"), 0);
        assert_eq!(nesting_depth("(a b)"), 1);
        assert_eq!(nesting_depth("((a) (b (c)))"), 3);
        assert_eq!(nesting_depth("'(a)"), 2);
        assert_eq!(nesting_depth("'''''x"), 5);
        assert_eq!(nesting_depth("`(a ,@(b))"), 4);
        assert_eq!(nesting_depth("#'(lambda (x) x)"), 3);
        assert_eq!(nesting_depth("(a) (b) (c)"), 1);
        assert_eq!(nesting_depth("#(1 (2))"), 2);
        assert_eq!(nesting_depth(&"(list #1=(a) #1#)\n".repeat(50)), 3);
        assert_eq!(nesting_depth("#3(1 2 3)"), 1);
        assert_eq!(nesting_depth("#2A((1 2) (3 4))"), 3);
        assert_eq!(nesting_depth(&"(progn ".repeat(20_000)), 20_000);
    }

    #[test]
    fn ignores_strings_comments_and_characters() {
        assert_eq!(nesting_depth("\"((((\" (a)"), 1);
        assert_eq!(nesting_depth("; ((((\n(a)"), 1);
        assert_eq!(nesting_depth("#| (( #| (( |# (( |# (a)"), 1);
        assert_eq!(nesting_depth("(#\\( #\\) x)"), 1);
        assert_eq!(nesting_depth("|((| a\\(b"), 0);
        assert_eq!(nesting_depth("\"a\\\"((\" x"), 0);
        assert_eq!(nesting_depth("(#\\λ)"), 1);
    }
}
