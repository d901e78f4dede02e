//! `switchyard fmt`: one canonical layout for policy files.
//!
//! The layout: two-space indentation; one statement per line; one blank line between
//! top-level definitions; blank lines between statements kept (at most one), none
//! after `{` or before `}`; single spaces around operators; the fewest parentheses
//! that keep the meaning, plus parentheses around `and` inside `or` and around
//! compound operands of `not`; literals spelt as written (`100_000`, `2s`, `5%`).
//! Those clarifying parentheses are left out of a file where they would nest
//! brackets deeper than the parser accepts ([`super::parser::MAX_NESTING`]): each
//! one adds a level, so a file near the limit would come out unparsable; such a file
//! gets the fewest parentheses only, which never nest deeper than its source did.
//!
//! A safety net backs that up: [`format_str`] parses its own output and returns it
//! only if it parses to the same items (spans aside) as the input did.
//!
//! Two choices are the author's and are kept, so that a long condition can be laid
//! out readably: a line break before a clause's `when`, and line breaks before the
//! top-level `and`/`or` of a condition (continuation lines indent four spaces). Small
//! `on` and `stats` blocks written on one line stay on one line.
//!
//! Comments are kept: a comment on its own line stays before the statement it
//! preceded, a trailing comment stays at the end of its line. In a statement laid
//! out on several lines (the kept breaks above, a canary's `rollback`), a comment
//! stays with the line it was written on, or before the line it preceded. Inside
//! a part that `fmt` joins onto one line (`a +` and `b` on two lines), comments go
//! to the end of that line. `fmt` of formatted text is the same text (tested on
//! every shipped policy and on generated policies).

use std::cell::RefCell;

use super::ast::*;
use super::diagnostic::Diagnostic;
use super::source::SourceMap;

mod expr;
mod items;

/// Formats one parsed file. `sources` must hold the text `file` was parsed from.
///
/// With the clarifying parentheses unless they would nest brackets more than
/// [`super::parser::MAX_NESTING`] levels deep (see the module comment). The output
/// is not re-parsed here; [`format_str`] does that.
pub fn format_file(sources: &SourceMap, file: &PolicyFile) -> String {
    let text = sources
        .get(file.file)
        .map(|f| f.text.as_str())
        .unwrap_or("");
    let clarified = print(text, file, true);
    let too_deep = super::parser::prescan(&clarified, file.file)
        .err()
        .is_some_and(|d| d.code == super::diagnostic::codes::TOO_DEEP);
    if too_deep {
        print(text, file, false)
    } else {
        clarified
    }
}

/// `file` laid out, with the clarifying parentheses if `clarify`.
fn print(text: &str, file: &PolicyFile, clarify: bool) -> String {
    let mut p = Printer {
        src: text,
        clarify,
        comments: &file.comments,
        next_comment: 0,
        out: Vec::new(),
        cursor: 0,
        blank_ok: false,
        breaks: RefCell::new(Vec::new()),
    };
    for item in &file.items {
        let start = item_span(item).start as usize;
        p.top_level_gap(start);
        match item {
            Item::Route(r) => p.route(r),
            Item::Strategy(s) => p.strategy(s),
            Item::Test(t) => p.test(t),
        }
    }
    p.flush(usize::MAX, 0);
    let mut s = p.out.join("\n");
    s.push('\n');
    if s.trim().is_empty() {
        return String::new();
    }
    s
}

/// Why [`format_str`] returns no text.
#[derive(Debug)]
pub enum FmtError {
    /// The input does not parse: its diagnostics, with the source map to render them.
    Parse(SourceMap, Vec<Diagnostic>),
    /// The formatted text would not parse, or would parse to different items than
    /// the input: a bug in `fmt`, caught before anything is written. The sentence
    /// says which (with the re-parse's first error, if any), without the file name.
    Unsafe(String),
}

/// Parses and formats `text` (named `name` in diagnostics), then parses the result
/// again and checks that it has the same items as `text` (spans aside, comments
/// not compared): what `fmt` writes always parses and means the same.
///
/// # Errors
/// [`FmtError::Parse`] when `text` does not parse; [`FmtError::Unsafe`] when the
/// formatted text fails that check.
pub fn format_str(name: &str, text: &str) -> Result<String, FmtError> {
    let (sources, file) =
        super::parser::parse_str(name, text).map_err(|(m, d)| FmtError::Parse(m, d))?;
    let out = format_file(&sources, &file);
    match super::parser::parse_str(name, &out) {
        Ok((_, again)) if again.items == file.items => Ok(out),
        Ok(_) => Err(FmtError::Unsafe(
            "the formatted text would parse to a different policy".to_string(),
        )),
        Err((_, d)) => Err(FmtError::Unsafe(format!(
            "the formatted text would not parse: {}",
            d.first().map_or("", |d| d.message.as_str())
        ))),
    }
}

fn item_span(i: &Item) -> Span {
    match i {
        Item::Route(r) => r.span,
        Item::Strategy(s) => s.span,
        Item::Test(t) => t.span,
    }
}

/// The output being built, with the comment side table and source position.
struct Printer<'a> {
    src: &'a str,
    /// Whether to add the clarifying parentheses (`and` inside `or`, compound
    /// operands of `not`) as well as the ones the meaning needs.
    clarify: bool,
    comments: &'a [Comment],
    next_comment: usize,
    out: Vec<String>,
    /// Source offset up to which everything has been printed.
    cursor: usize,
    /// Whether a blank line from the source may be kept before the next line.
    blank_ok: bool,
    /// For the statement being built: the source offset where each of its lines
    /// after the first begins (pushed by whoever writes the `\n`, in any order;
    /// lines follow the source, so sorted they match the lines). [`Printer::stmt`]
    /// takes them to print each comment beside the line it was written on.
    breaks: RefCell<Vec<usize>>,
}

impl Printer<'_> {
    fn gap_has_blank(&self, to: usize) -> bool {
        let from = self.cursor.min(self.src.len());
        let to = to.clamp(from, self.src.len());
        let segs: Vec<&str> = self.src.get(from..to).unwrap_or("").split('\n').collect();
        segs.len() >= 3 && segs[1..segs.len() - 1].iter().any(|l| l.trim().is_empty())
    }

    fn blank(&mut self) {
        if self.out.last().is_some_and(|l| !l.is_empty()) {
            self.out.push(String::new());
        }
    }

    /// Prints comments that start before `pos`.
    fn flush(&mut self, pos: usize, indent: usize) {
        while let Some(c) = self.comments.get(self.next_comment) {
            if c.span.start as usize >= pos {
                break;
            }
            self.next_comment += 1;
            let text = format!("#{}", c.text.trim_end());
            let last_is_code = self
                .out
                .last()
                .is_some_and(|l| !l.trim().is_empty() && !l.trim_start().starts_with('#'));
            if c.trailing && last_is_code {
                if let Some(l) = self.out.last_mut() {
                    l.push(' ');
                    l.push_str(&text);
                }
            } else {
                if self.blank_ok && self.gap_has_blank(c.span.start as usize) {
                    self.blank();
                }
                self.out.push(format!("{}{text}", " ".repeat(indent)));
                self.blank_ok = true;
            }
            self.cursor = c.span.end as usize;
        }
    }

    fn top_level_gap(&mut self, start: usize) {
        // Leading comments of the item: one blank line before them (not at the top).
        if self
            .comments
            .get(self.next_comment)
            .is_some_and(|c| (c.span.start as usize) < start && !c.trailing)
            && !self.out.is_empty()
        {
            self.blank();
        }
        self.flush(start, 0);
        if !self.out.is_empty()
            && (self.gap_has_blank(start) || !self.out.last().is_some_and(|l| l.starts_with('#')))
        {
            self.blank();
        }
        self.blank_ok = false;
    }

    /// Starts a new line of the statement being built at source offset `at`: returns
    /// the `\n` to write there.
    fn line_break(&self, at: usize) -> &'static str {
        self.breaks.borrow_mut().push(at);
        "\n"
    }

    /// Emits one statement that covers `span` in the source: `text`, whose lines
    /// after the first carry their own indentation. The comments written inside the
    /// statement before a line's source offset are printed before that line (a
    /// trailing one at the end of the line above).
    fn stmt(&mut self, indent: usize, span: Span, text: String) {
        let mut breaks = self.breaks.take();
        breaks.sort_unstable();
        self.flush(span.start as usize, indent);
        if self.blank_ok && self.gap_has_blank(span.start as usize) {
            self.blank();
        }
        let lines: Vec<&str> = text.split('\n').collect();
        // Should a break have gone unrecorded, the comments go after the statement.
        let anchored = breaks.len() + 1 == lines.len();
        for (i, l) in lines.into_iter().enumerate() {
            let pad = if i == 0 { indent } else { 0 };
            if i > 0 && anchored {
                // No blank line from the source inside a statement.
                self.blank_ok = false;
                let own = l.len() - l.trim_start().len();
                self.flush(breaks[i - 1], own);
            }
            self.out.push(format!("{}{l}", " ".repeat(pad)));
        }
        self.cursor = span.end as usize;
        self.blank_ok = true;
    }

    /// Emits a block header line; children follow, then [`Printer::close`].
    fn open(&mut self, indent: usize, span: Span, header: String) {
        self.stmt(indent, span, header);
        self.cursor = span.start as usize;
        self.blank_ok = false;
    }

    fn close(&mut self, indent: usize, span: Span) {
        self.flush(span.end as usize, indent + 2);
        self.out.push(format!("{}}}", " ".repeat(indent)));
        self.cursor = span.end as usize;
        self.blank_ok = true;
    }

    /// The source text of `span`, whitespace and comments removed after a leading `-`
    /// (the comments are printed from the side table).
    fn tok(&self, span: Span) -> String {
        let s = self
            .src
            .get(span.start as usize..span.end as usize)
            .unwrap_or("")
            .trim();
        match s.strip_prefix('-') {
            Some(rest) => format!("-{}", skip_gap(rest)),
            None => s.to_string(),
        }
    }

    /// Whether the source between two offsets contains a line break.
    fn broken(&self, from: usize, to: usize) -> bool {
        self.src
            .get(from.min(to)..to)
            .is_some_and(|g| g.contains('\n'))
    }
}

/// `s` without the whitespace and `#` comments it starts with: the gap between two
/// tokens that one span covers (`-` and its number, `endpoint` and its id).
fn skip_gap(s: &str) -> &str {
    let mut s = s.trim_start();
    while let Some(comment) = s.strip_prefix('#') {
        s = comment
            .split_once('\n')
            .map_or("", |(_, rest)| rest)
            .trim_start();
    }
    s
}

#[cfg(test)]
mod tests;
