//! Source files, spans and line/column lookup.
//!
//! A [`Span`] is a half-open byte range `[start, end)` in one file of a [`SourceMap`].
//! Spans compare equal to every other span (Cedar's rule): two syntax trees that
//! differ only in layout are equal, which is what `fmt` round-trip tests need.

use serde::Serialize;

/// Index of a file in a [`SourceMap`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct FileId(pub u32);

/// A byte range `[start, end)` of one source file.
///
/// Equality ignores the range: every `Span` equals every other `Span`, so AST nodes
/// derive `PartialEq` that compares structure only.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct Span {
    /// The file the range belongs to.
    pub file: FileId,
    /// First byte (inclusive), counted from the start of the file.
    pub start: u32,
    /// Last byte (exclusive).
    pub end: u32,
}

impl PartialEq for Span {
    fn eq(&self, _other: &Span) -> bool {
        true
    }
}

impl Eq for Span {}

impl Span {
    /// A span of `file` from byte `start` to byte `end`.
    pub fn new(file: FileId, start: usize, end: usize) -> Span {
        Span {
            file,
            start: u32::try_from(start).unwrap_or(u32::MAX),
            end: u32::try_from(end).unwrap_or(u32::MAX),
        }
    }

    /// The smallest span covering `self` and `other` (same file assumed).
    pub fn to(self, other: Span) -> Span {
        Span {
            file: self.file,
            start: self.start.min(other.start),
            end: self.end.max(other.end),
        }
    }

    /// Whether two spans cover exactly the same bytes of the same file (the structural
    /// comparison that `==` deliberately does not make).
    pub fn same_range(&self, other: &Span) -> bool {
        self.file == other.file && self.start == other.start && self.end == other.end
    }
}

/// A 1-based line and column (column counted in characters, not bytes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct LineCol {
    /// Line number, starting at 1.
    pub line: u32,
    /// Column number in Unicode scalar values, starting at 1.
    pub col: u32,
}

/// One loaded policy file.
#[derive(Debug, Clone)]
pub struct SourceFile {
    /// The name shown in diagnostics: relative to the policy directory in the
    /// gateway, relative to the current directory in the policy tools.
    pub name: String,
    /// The name within its policy set, which the set's version hashes
    /// ([`crate::policy::check::version`]): relative to the policy directory (its
    /// file name for a file given on its own), so the version does not depend on the
    /// current directory or on how a path was spelt. Usually the same as `name`.
    pub set_name: String,
    /// The full text.
    pub text: String,
    line_starts: Vec<usize>,
}

impl SourceFile {
    fn new(name: String, set_name: String, text: String) -> SourceFile {
        let mut line_starts = vec![0];
        line_starts.extend(text.match_indices('\n').map(|(i, _)| i + 1));
        SourceFile {
            name,
            set_name,
            text,
            line_starts,
        }
    }

    /// Line and column of byte `offset` (clamped to the text).
    pub fn line_col(&self, offset: usize) -> LineCol {
        let offset = floor_char_boundary(&self.text, offset.min(self.text.len()));
        let line = self.line_starts.partition_point(|&s| s <= offset).max(1) - 1;
        let start = self.line_starts[line];
        let col = self.text[start..offset].chars().count();
        LineCol {
            line: u32::try_from(line + 1).unwrap_or(u32::MAX),
            col: u32::try_from(col + 1).unwrap_or(u32::MAX),
        }
    }

    /// The text of 1-based line `line`, without its line break (empty if out of range).
    pub fn line_text(&self, line: u32) -> &str {
        let i = (line as usize).saturating_sub(1);
        let Some(&start) = self.line_starts.get(i) else {
            return "";
        };
        let end = self
            .line_starts
            .get(i + 1)
            .map(|e| e - 1)
            .unwrap_or(self.text.len());
        self.text[start..end].trim_end_matches('\r')
    }

    /// The source text a span covers (empty if the span is out of range).
    pub fn slice(&self, span: Span) -> &str {
        let s = floor_char_boundary(&self.text, (span.start as usize).min(self.text.len()));
        let e = floor_char_boundary(&self.text, (span.end as usize).min(self.text.len()));
        self.text.get(s..e.max(s)).unwrap_or("")
    }
}

fn floor_char_boundary(text: &str, mut i: usize) -> usize {
    while i > 0 && !text.is_char_boundary(i) {
        i -= 1;
    }
    i
}

/// All files of one policy set, addressed by [`FileId`].
#[derive(Debug, Clone, Default)]
pub struct SourceMap {
    files: Vec<SourceFile>,
}

impl SourceMap {
    /// An empty map.
    pub fn new() -> SourceMap {
        SourceMap::default()
    }

    /// Adds a file named `name` (in diagnostics and in the set) and returns its id.
    pub fn add(&mut self, name: impl Into<String>, text: impl Into<String>) -> FileId {
        let name = name.into();
        self.add_as(name.clone(), name, text)
    }

    /// Adds a file shown as `name` whose name within its set is `set_name` (see
    /// [`SourceFile::set_name`]) and returns its id.
    pub fn add_as(
        &mut self,
        name: impl Into<String>,
        set_name: impl Into<String>,
        text: impl Into<String>,
    ) -> FileId {
        let id = FileId(u32::try_from(self.files.len()).unwrap_or(u32::MAX));
        self.files
            .push(SourceFile::new(name.into(), set_name.into(), text.into()));
        id
    }

    /// The file with id `id`.
    pub fn get(&self, id: FileId) -> Option<&SourceFile> {
        self.files.get(id.0 as usize)
    }

    /// All files with their ids, in the order they were added.
    pub fn files(&self) -> impl Iterator<Item = (FileId, &SourceFile)> {
        self.files
            .iter()
            .enumerate()
            .map(|(i, f)| (FileId(i as u32), f))
    }

    /// `name:line:col` of the start of `span` (or `<unknown>` for a foreign span).
    pub fn location(&self, span: Span) -> String {
        match self.get(span.file) {
            Some(f) => {
                let lc = f.line_col(span.start as usize);
                format!("{}:{}:{}", f.name, lc.line, lc.col)
            }
            None => "<unknown>".to_string(),
        }
    }

    /// The source text a span covers.
    pub fn slice(&self, span: Span) -> &str {
        self.get(span.file).map(|f| f.slice(span)).unwrap_or("")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_col_counts_chars() {
        let mut m = SourceMap::new();
        let id = m.add("a.policy", "ab\nçd x\n");
        let f = m.get(id).unwrap();
        assert_eq!(f.line_col(0), LineCol { line: 1, col: 1 });
        assert_eq!(f.line_col(3), LineCol { line: 2, col: 1 });
        // `ç` is two bytes: `x` is byte 7, char column 4.
        assert_eq!(f.line_col(7), LineCol { line: 2, col: 4 });
        assert_eq!(f.line_text(2), "çd x");
        assert_eq!(f.line_text(9), "");
        assert_eq!(m.location(Span::new(id, 7, 8)), "a.policy:2:4");
    }

    #[test]
    fn spans_compare_equal() {
        let a = Span::new(FileId(0), 1, 2);
        let b = Span::new(FileId(3), 7, 9);
        assert_eq!(a, b);
        assert!(!a.same_range(&b));
    }
}
