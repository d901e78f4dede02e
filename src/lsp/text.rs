//! Positions: byte offsets (the policy pipeline's spans) to and from LSP positions
//! (line, UTF-16 code unit), and edits of an open buffer.
//!
//! LSP counts a line's characters in UTF-16 code units unless the client and server
//! agree on another encoding; this server announces `utf-16`. Lines end at `\n`,
//! `\r\n` or a lone `\r`, as the protocol says. Every conversion clamps: a position
//! past the end of its line means the line's end, a line past the end of the text
//! means the end of the text, and a position inside a surrogate pair or a `\r\n`
//! moves back to the start of that character, so no position from a client can make
//! a slice panic.

use lsp_types::{Position, Range, TextDocumentContentChangeEvent};

/// Line starts of one text, for offset/position conversions.
#[derive(Debug, Clone)]
pub struct LineIndex {
    /// Byte offset of the first character of each line.
    starts: Vec<usize>,
}

impl LineIndex {
    /// Indexes `text`.
    pub fn new(text: &str) -> LineIndex {
        let mut starts = vec![0];
        let b = text.as_bytes();
        let mut i = 0;
        while i < b.len() {
            match b[i] {
                b'\n' => starts.push(i + 1),
                b'\r' if b.get(i + 1) != Some(&b'\n') => starts.push(i + 1),
                _ => {}
            }
            i += 1;
        }
        LineIndex { starts }
    }

    /// The byte range of line `line` without its line break (clamped to the text).
    fn line_bounds(&self, text: &str, line: usize) -> (usize, usize) {
        let Some(&start) = self.starts.get(line) else {
            return (text.len(), text.len());
        };
        let mut end = self.starts.get(line + 1).copied().unwrap_or(text.len());
        let b = text.as_bytes();
        if end > start && b.get(end - 1) == Some(&b'\n') {
            end -= 1;
        }
        if end > start && b.get(end - 1) == Some(&b'\r') {
            end -= 1;
        }
        (start, end)
    }

    /// The LSP position of byte `offset` of `text` (clamped; an offset inside a
    /// character counts from that character's start).
    pub fn position(&self, text: &str, offset: usize) -> Position {
        let mut offset = offset.min(text.len());
        while !text.is_char_boundary(offset) {
            offset -= 1;
        }
        let line = self.starts.partition_point(|&s| s <= offset).max(1) - 1;
        let (start, end) = self.line_bounds(text, line);
        let col: usize = text[start..offset.min(end).max(start)]
            .chars()
            .map(char::len_utf16)
            .sum();
        Position::new(u32_of(line), u32_of(col))
    }

    /// The byte offset of LSP position `pos` in `text` (clamped to the text, to the
    /// line's end, and back to a character boundary).
    pub fn offset(&self, text: &str, pos: Position) -> usize {
        let line = pos.line as usize;
        if line >= self.starts.len() {
            return text.len();
        }
        let (start, end) = self.line_bounds(text, line);
        let mut units = 0usize;
        for (i, c) in text[start..end].char_indices() {
            if units + c.len_utf16() > pos.character as usize {
                return start + i;
            }
            units += c.len_utf16();
        }
        end
    }

    /// The LSP range of bytes `start..end` of `text`. An end inside a character
    /// moves forward to that character's end, so a range that touches a character
    /// covers all of it (both UTF-16 units of an emoji), never none of it.
    pub fn range(&self, text: &str, start: usize, end: usize) -> Range {
        let mut end = end.max(start).min(text.len());
        while !text.is_char_boundary(end) {
            end += 1;
        }
        Range::new(self.position(text, start), self.position(text, end))
    }
}

fn u32_of(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

/// Applies one `didChange` content change to `text`: a ranged edit, or the whole
/// new text when the change has no range. Ranges are clamped (see the module doc).
pub fn apply_change(text: &mut String, change: TextDocumentContentChangeEvent) {
    match change.range {
        None => *text = change.text,
        Some(r) => {
            let ix = LineIndex::new(text);
            let a = ix.offset(text, r.start);
            let b = ix.offset(text, r.end);
            let (a, b) = (a.min(b), a.max(b));
            text.replace_range(a..b, &change.text);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utf16_columns_count_surrogate_pairs_and_multibyte_chars() {
        // `é` is 2 bytes and 1 UTF-16 unit; `😀` is 4 bytes and 2 units.
        let text = "ab\né😀x\r\ny";
        let ix = LineIndex::new(text);
        let x = text.find('x').unwrap();
        assert_eq!(ix.position(text, x), Position::new(1, 3));
        assert_eq!(ix.offset(text, Position::new(1, 3)), x);
        // Inside the surrogate pair: back to the emoji's start.
        assert_eq!(
            ix.offset(text, Position::new(1, 2)),
            text.find('😀').unwrap()
        );
        // Past the line's end: the end of the line, before `\r\n`.
        assert_eq!(ix.offset(text, Position::new(1, 99)), x + 1);
        assert_eq!(ix.position(text, text.len()), Position::new(2, 1));
        assert_eq!(ix.offset(text, Position::new(9, 0)), text.len());
        // An offset inside a character counts from its start.
        assert_eq!(ix.position(text, x - 1), Position::new(1, 1));
    }

    #[test]
    fn a_range_ending_inside_a_character_covers_all_of_it() {
        let text = "a😀b\né";
        let ix = LineIndex::new(text);
        let emoji = text.find('😀').unwrap();
        assert_eq!(
            ix.range(text, emoji, emoji + 1),
            Range::new(Position::new(0, 1), Position::new(0, 3))
        );
        let e = text.find('é').unwrap();
        assert_eq!(
            ix.range(text, e, e + 1),
            Range::new(Position::new(1, 0), Position::new(1, 1))
        );
        assert_eq!(
            ix.range(text, text.len(), text.len() + 5),
            Range::new(Position::new(1, 1), Position::new(1, 1))
        );
    }

    #[test]
    fn lone_carriage_returns_end_lines() {
        let text = "a\rb\nc";
        let ix = LineIndex::new(text);
        assert_eq!(ix.position(text, 2), Position::new(1, 0));
        assert_eq!(ix.offset(text, Position::new(2, 0)), 4);
    }

    #[test]
    fn ranged_changes_edit_in_place() {
        let mut t = "route é {\n  default use model\n}\n".to_string();
        apply_change(
            &mut t,
            TextDocumentContentChangeEvent {
                range: Some(Range::new(Position::new(0, 6), Position::new(0, 7))),
                range_length: None,
                text: "e2".into(),
            },
        );
        assert_eq!(t, "route e2 {\n  default use model\n}\n");
        apply_change(
            &mut t,
            TextDocumentContentChangeEvent {
                range: Some(Range::new(Position::new(5, 0), Position::new(0, 0))),
                range_length: None,
                text: "# x\n".into(),
            },
        );
        assert!(t.starts_with("# x\n"), "{t}");
    }
}
