//! Byte offset <-> (line, column) conversion.

/// Maps byte offsets to 1-based (line, column) pairs and back.
///
/// Lines end at `\n` (a `\r` before it is an ordinary character of the line,
/// so CRLF files work). Columns count *characters* (Unicode scalar values),
/// not bytes, because that is what an editor and a model see. The index keeps
/// no reference to the text, so it can be stored next to it freely.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LineIndex {
    /// Byte offset where each line starts; `line_starts[0] == 0`.
    line_starts: Vec<usize>,
    /// Every multi-byte character: (byte offset of its first byte, total
    /// extra bytes of all multi-byte characters up to and including it).
    /// Lets columns be computed without the text.
    wide: Vec<(usize, usize)>,
    len: usize,
}

impl LineIndex {
    /// Indexes `text`. O(n), one pass.
    pub fn new(text: &str) -> LineIndex {
        let mut line_starts = vec![0];
        let mut wide = Vec::new();
        let mut extra_total = 0usize;
        for (i, b) in text.bytes().enumerate() {
            if b == b'\n' {
                line_starts.push(i + 1);
            } else if b >= 0xC0 {
                // First byte of a multi-byte UTF-8 sequence.
                let width = utf8_width(b);
                extra_total += width - 1;
                wide.push((i, extra_total));
            }
        }
        LineIndex {
            line_starts,
            wide,
            len: text.len(),
        }
    }

    /// Number of lines (a text ending in `\n` has an empty last line).
    pub fn line_count(&self) -> usize {
        self.line_starts.len()
    }

    /// Length in bytes of the indexed text.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when the indexed text was empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// 1-based (line, column) of a byte offset. Offsets past the end are
    /// clamped to the end; an offset inside a multi-byte character counts as
    /// that character.
    pub fn line_col(&self, offset: usize) -> (usize, usize) {
        let offset = self.char_start(offset.min(self.len));
        let line = self.line_of(offset);
        let start = self.line_starts[line];
        let column = (offset - start) - (self.extra_before(offset) - self.extra_before(start));
        (line + 1, column + 1)
    }

    /// 0-based line number containing `offset`.
    fn line_of(&self, offset: usize) -> usize {
        match self.line_starts.binary_search(&offset) {
            Ok(i) => i,
            Err(i) => i - 1,
        }
    }

    /// Byte offset where 1-based `line` starts, if the line exists.
    pub fn line_start(&self, line: usize) -> Option<usize> {
        self.line_starts.get(line.checked_sub(1)?).copied()
    }

    /// Byte offset just past the end of 1-based `line`, excluding its `\n`.
    pub fn line_end(&self, line: usize) -> Option<usize> {
        let idx = line.checked_sub(1)?;
        self.line_starts.get(idx)?;
        Some(match self.line_starts.get(idx + 1) {
            Some(next) => next - 1,
            None => self.len,
        })
    }

    /// Byte offset of 1-based (line, column). Column may be one past the last
    /// character of the line (the end-of-line position). `None` when the
    /// line or column does not exist.
    pub fn offset_of(&self, line: usize, column: usize) -> Option<usize> {
        let start = self.line_start(line)?;
        let end = self.line_end(line)?;
        let mut offset = start + column.checked_sub(1)?;
        // Each multi-byte character before the target pushes it right.
        let mut i = self.wide.partition_point(|&(o, _)| o < start);
        while let Some(&(o, _)) = self.wide.get(i) {
            if o >= offset || o >= end {
                break;
            }
            offset += self.width_of_wide(i) - 1;
            i += 1;
        }
        (offset <= end).then_some(offset)
    }

    /// Total extra bytes of multi-byte characters starting before `offset`.
    fn extra_before(&self, offset: usize) -> usize {
        let i = self.wide.partition_point(|&(o, _)| o < offset);
        if i == 0 {
            0
        } else {
            self.wide[i - 1].1
        }
    }

    /// An offset strictly inside a multi-byte character, moved back to the
    /// character's first byte.
    fn char_start(&self, offset: usize) -> usize {
        let i = self.wide.partition_point(|&(o, _)| o < offset);
        if i == 0 {
            return offset;
        }
        let (o, _) = self.wide[i - 1];
        if offset < o + self.width_of_wide(i - 1) {
            o
        } else {
            offset
        }
    }

    fn width_of_wide(&self, i: usize) -> usize {
        let prev = if i == 0 { 0 } else { self.wide[i - 1].1 };
        self.wide[i].1 - prev + 1
    }
}

/// Width in bytes of the UTF-8 sequence starting with `first`.
pub(crate) fn utf8_width(first: u8) -> usize {
    match first {
        0x00..=0x7F => 1,
        0xC0..=0xDF => 2,
        0xE0..=0xEF => 3,
        _ => 4,
    }
}
