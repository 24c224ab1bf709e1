//! Where text the reader cannot read ends: unknown `#` dispatch macros
//! (`#[...]`, `#{...}`, `#"..."`, cl-interpol's `#?"..."`), whose extent is
//! guessed by looking for the closer.
//!
//! Both readers of Lisp text (this crate's CST reader and the server's
//! recovering scanner) ask here, so they guess alike. A search that finds
//! no closer reads to the end of the text, and a file of unclosed `#[`
//! lines would be read once per line; so every search remembers what it
//! learned along its way (the closer of each opener it passed, or that
//! there is none), and a later search that starts where an earlier one
//! passed, or meets a position it passed, answers from that.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// The extent guesses for one text; answers are the same as a fresh search
/// would give, only faster when asked again.
pub struct Extents<'a> {
    bytes: &'a [u8],
    /// For an opener (at its position) that a balanced search passed: the
    /// position after its closer, or [`NONE`] when it has none.
    balanced: RefCell<Memo>,
    /// For each closer byte: the smallest start from which a search for it
    /// found none ([`NONE`] when no search failed).
    failed_from: [Cell<usize>; 256],
}

const NONE: usize = usize::MAX;

/// What balanced searches learned, by the opener's position: the end, or
/// [`NONE`]. A map, hashed by one multiplication: SipHash took two thirds
/// of the time on a file of `#[` lines. (Not a table as long as the text:
/// the scanners made for one form each would clear one each.)
#[derive(Default)]
struct Memo {
    at: HashMap<usize, usize, BuildHasherDefault<PositionHasher>>,
}

impl Memo {
    fn get(&self, q: usize) -> Option<usize> {
        self.at.get(&q).copied()
    }

    fn insert(&mut self, q: usize, end: usize) {
        self.at.insert(q, end);
    }
}

/// Hashes a position (the only key [`Memo`] has).
#[derive(Default)]
struct PositionHasher(u64);

impl Hasher for PositionHasher {
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(b)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }

    fn write_usize(&mut self, n: usize) {
        self.0 = (n as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }

    fn finish(&self) -> u64 {
        // The multiplication leaves its best bits high; the table indexes
        // by the low ones.
        self.0.rotate_left(26)
    }
}

impl<'a> Extents<'a> {
    pub fn new(bytes: &'a [u8]) -> Self {
        Extents {
            bytes,
            balanced: RefCell::new(Memo::default()),
            failed_from: std::array::from_fn(|_| Cell::new(NONE)),
        }
    }

    /// Position after the first `close` at or after `i` that no `\`
    /// escapes.
    ///
    /// A search that failed from `f` stepped over every position after it
    /// but those a `\` escaped; a search from `i >= f` whose previous byte
    /// is not a `\` starts on that path (as every search here does: `i`
    /// follows the opening delimiter), so it fails too.
    pub fn closing(&self, i: usize, close: u8) -> Option<usize> {
        let failed = &self.failed_from[close as usize];
        let f = failed.get();
        if i >= f && (i == f || self.bytes[i - 1] != b'\\') {
            return None;
        }
        let b = self.bytes;
        let mut j = i;
        while j < b.len() {
            match b[j] {
                b'\\' => j += 2,
                c if c == close => return Some(j + 1),
                _ => j += 1,
            }
        }
        // The path from `i` covers what the path from `f` covered.
        if i < f {
            failed.set(i);
        }
        None
    }

    /// Position after the `close` matching the `open` just before `i`,
    /// counting nesting and skipping strings and `\` escapes.
    pub fn balanced(&self, i: usize, open: u8, close: u8) -> Option<usize> {
        debug_assert!(i > 0 && self.bytes[i - 1] == open);
        if let Some(end) = self.balanced.borrow().get(i - 1) {
            return (end != NONE).then_some(end);
        }
        let b = self.bytes;
        let mut memo = self.balanced.borrow_mut();
        // The openers passed and not yet closed, outermost first.
        let mut open_at = vec![i - 1];
        let mut j = i;
        let found = loop {
            if j >= b.len() {
                break false;
            }
            match b[j] {
                b'\\' => j += 2,
                b'"' if open != b'"' => match self.closing(j + 1, b'"') {
                    Some(end) => j = end,
                    None => break false,
                },
                c if c == close => {
                    j += 1;
                    let q = open_at.pop().expect("an opener is open");
                    memo.insert(q, j);
                    if open_at.is_empty() {
                        break true;
                    }
                }
                c if c == open => match memo.get(j) {
                    // An earlier search passed this opener: its answer is
                    // what reading on would find.
                    Some(NONE) => break false,
                    Some(end) => j = end,
                    None => {
                        open_at.push(j);
                        j += 1;
                    }
                },
                _ => j += 1,
            }
        };
        if found {
            return Some(j);
        }
        for q in open_at {
            memo.insert(q, NONE);
        }
        None
    }

    /// The end of the unknown dispatch macro whose sub-character `sub` ends
    /// just before `after`, when its syntax shows one: `#[...]`, `#{...}`,
    /// `#(...)`-like brackets up to the matching closer, `#"..."` up to the
    /// next `"`, and cl-interpol's `#?"..."`, `#?(...)`, `#?<...>`,
    /// `#?/.../`. `None` when it shows none (or its closer is missing); the
    /// reader then takes the dispatch characters and the form after them.
    pub fn dispatch_end(&self, sub: u8, after: usize) -> Option<usize> {
        if let Some(close) = closer(sub) {
            if let Some(end) = self.balanced(after, sub, close) {
                return Some(end);
            }
        }
        if sub == b'"' {
            if let Some(end) = self.closing(after, b'"') {
                return Some(end);
            }
        }
        if sub == b'?' {
            let &d = self.bytes.get(after)?;
            let end = if d == b'"' {
                self.closing(after + 1, b'"')
            } else if let Some(close) = closer(d).or((d == b'<').then_some(b'>')) {
                self.balanced(after + 1, d, close)
            } else if d.is_ascii_punctuation() {
                self.closing(after + 1, d)
            } else {
                None
            };
            return end.map(|e| e.min(self.bytes.len()));
        }
        None
    }
}

fn closer(open: u8) -> Option<u8> {
    match open {
        b'[' => Some(b']'),
        b'{' => Some(b'}'),
        b'(' => Some(b')'),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The searches as they were, without memory: what every answer must
    /// equal.
    fn fresh_closing(b: &[u8], mut i: usize, close: u8) -> Option<usize> {
        while i < b.len() {
            match b[i] {
                b'\\' => i += 2,
                c if c == close => return Some(i + 1),
                _ => i += 1,
            }
        }
        None
    }

    fn fresh_balanced(b: &[u8], mut i: usize, open: u8, close: u8) -> Option<usize> {
        let mut depth = 1usize;
        while i < b.len() {
            match b[i] {
                b'\\' => i += 2,
                b'"' if open != b'"' => i = fresh_closing(b, i + 1, b'"')?,
                c if c == close => {
                    depth -= 1;
                    i += 1;
                    if depth == 0 {
                        return Some(i);
                    }
                }
                c if c == open => {
                    depth += 1;
                    i += 1;
                }
                _ => i += 1,
            }
        }
        None
    }

    /// Asked in any order, about any position, the remembering searches
    /// answer what fresh ones do (random texts of brackets, strings and
    /// escapes; positions asked as a reader would, after the delimiter).
    #[test]
    fn remembering_answers_what_a_fresh_search_answers() {
        const PIECES: &[u8] = b"[[]]{}\"\"\\\\ a/";
        let mut seed: u64 = 0x9E37_79B9_7F4A_7C15;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for _ in 0..5_000 {
            let n = (next() % 30) as usize;
            let text: Vec<u8> = (0..n)
                .map(|_| PIECES[(next() % PIECES.len() as u64) as usize])
                .collect();
            let e = Extents::new(&text);
            for _ in 0..20 {
                if text.is_empty() {
                    break;
                }
                let i = 1 + (next() % text.len() as u64) as usize;
                // Any start, also one after a `\\` (no caller asks there,
                // but the answer must still be right).
                if next() % 4 == 0 {
                    let c = if next() % 2 == 0 { b'"' } else { b'/' };
                    assert_eq!(e.closing(i, c), fresh_closing(&text, i, c));
                    continue;
                }
                match text[i - 1] {
                    b'[' => assert_eq!(
                        e.balanced(i, b'[', b']'),
                        fresh_balanced(&text, i, b'[', b']'),
                        "{:?} at {i}",
                        String::from_utf8_lossy(&text)
                    ),
                    b'{' => assert_eq!(
                        e.balanced(i, b'{', b'}'),
                        fresh_balanced(&text, i, b'{', b'}'),
                    ),
                    c @ (b'"' | b'/') => assert_eq!(
                        e.closing(i, c),
                        fresh_closing(&text, i, c),
                        "{:?} at {i}",
                        String::from_utf8_lossy(&text)
                    ),
                    _ => {}
                }
            }
        }
    }

    /// Every unclosed opener of a file of them is answered without reading
    /// the rest of the file again.
    #[test]
    fn a_file_of_unclosed_openers_is_searched_once() {
        let text = "#[\n".repeat(200_000);
        let e = Extents::new(text.as_bytes());
        let t = std::time::Instant::now();
        for line in 0..200_000 {
            assert_eq!(e.dispatch_end(b'[', line * 3 + 2), None);
        }
        assert!(
            t.elapsed() < std::time::Duration::from_secs(10),
            "{:?}",
            t.elapsed()
        );
    }
}
