//! Incremental parser for server-sent events (WHATWG HTML, "Server-sent events",
//! section 9.2.6 "Interpreting an event stream").
//!
//! Providers stream chat completions as SSE. Network reads split events anywhere, so the
//! parser keeps the unfinished tail and yields each event once its blank line arrives.
//! Lines may end in `\n`, `\r\n` or `\r`; several `data:` lines join with `\n`; lines
//! starting with `:` are comments (keep-alives) and are skipped.
//!
//! Received bytes are decoded as UTF-8 once, a read at a time (with SIMD), not line
//! by line. A relay reads events with [`SseParser::next_ref`], which hands out an
//! event of one `data:` line ended by `\n\n` (every event an OpenAI-format server
//! sends) as a view into that text: no copy and no second check. Any other event
//! (named, several lines, `\r` line ends, a comment before it, the stream's first)
//! takes the general path, which builds it in a reused buffer.
//!
//! The writing side is here too: every OpenAI-format event Switchyard emits (translated
//! chunks, error events, `[DONE]`) goes through [`write_event`] and [`write_done`].

use bytes::{BufMut, BytesMut};
use serde::Serialize;

/// One complete event.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SseEvent {
    /// The `event:` field, if any (Anthropic sends one per event).
    pub event: Option<String>,
    /// The joined `data:` lines.
    pub data: String,
    /// How many `data:` lines were joined (a `\n` in [`SseEvent::data`] is one
    /// of their joins exactly when this is more than one).
    pub data_lines: u32,
}

impl SseEvent {
    /// The event as a view ([`SseEventRef`]).
    pub fn view(&self) -> SseEventRef<'_> {
        SseEventRef {
            event: self.event.as_deref(),
            data: &self.data,
            data_lines: self.data_lines,
        }
    }
}

/// One complete event, borrowed: from the parser's read buffer ([`SseParser::next_ref`])
/// or from an [`SseEvent`] ([`SseEvent::view`]). Fields as [`SseEvent`]'s.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SseEventRef<'a> {
    /// The `event:` field, if any.
    pub event: Option<&'a str>,
    /// The joined `data:` lines.
    pub data: &'a str,
    /// How many `data:` lines were joined (0: not counted, for an event made by
    /// hand; a reader then looks for a `\n` in [`SseEventRef::data`]).
    pub data_lines: u32,
}

/// Largest event accepted, in bytes; a provider sending more without a blank line is
/// answering badly, not streaming (protects memory from a broken upstream).
pub const MAX_EVENT_BYTES: usize = 16 * 1024 * 1024;

/// Error: an event grew past [`MAX_EVENT_BYTES`].
#[derive(Debug, thiserror::Error)]
#[error("upstream sent a server-sent event larger than {MAX_EVENT_BYTES} bytes")]
pub struct EventTooLarge;

/// Streaming SSE parser: feed bytes with [`SseParser::push`], take events with
/// [`SseParser::next_ref`] (or [`SseParser::next_event`], owned).
///
/// The bytes are decoded as UTF-8 once, as they are pushed (an invalid sequence
/// becomes U+FFFD, as `String::from_utf8_lossy` reads it; a sequence cut by the end
/// of a read waits for the rest), so every line is text already and an event's data
/// can be lent as a `&str` of the buffer.
#[derive(Debug, Default)]
pub struct SseParser {
    /// Text received; `text[pos..]` is not yet consumed.
    text: String,
    pos: usize,
    /// The first bytes of a UTF-8 sequence cut by the end of the last read (at most 3).
    carry: Vec<u8>,
    /// U+FFFD written for invalid bytes since `text` was last wholly consumed: each
    /// is 3 bytes of text for 1 to 3 received, and [`MAX_EVENT_BYTES`] is counted in
    /// received bytes.
    replaced: usize,
    event: Option<String>,
    data: String,
    has_data: bool,
    /// `data:` lines of the event being read.
    data_lines: u32,
    /// A `\r` ended the last consumed line; a following `\n` belongs to it.
    skip_lf: bool,
    /// Bytes of `text[pos..]` already searched for a line end (keeps parsing linear
    /// when an event arrives in many small reads).
    scanned: usize,
    /// The stream's first bytes were read past a leading byte order mark (WHATWG:
    /// one leading U+FEFF is ignored).
    past_bom: bool,
    /// Bytes at `text[pos..]` that belong to the event last handed out by
    /// [`SseParser::next_ref`] (a view into them), consumed at the next call.
    lent: usize,
    /// The event the general path of [`SseParser::next_ref`] builds, reused.
    built: SseEvent,
}

/// U+FEFF, the byte order mark.
const BOM: char = '\u{feff}';

impl SseParser {
    /// A parser with nothing buffered.
    pub fn new() -> Self {
        Self::default()
    }

    /// Appends received bytes.
    ///
    /// # Errors
    /// [`EventTooLarge`] when the unfinished event exceeds [`MAX_EVENT_BYTES`].
    pub fn push(&mut self, bytes: &[u8]) -> Result<(), EventTooLarge> {
        self.settle();
        if self.pos > 0 {
            // What is left is an unfinished event (short) or nothing.
            self.text.drain(..self.pos);
            self.pos = 0;
            if self.text.is_empty() {
                self.replaced = 0;
            }
        }
        if self.carry.is_empty() {
            self.decode(bytes);
        } else {
            let mut joined = std::mem::take(&mut self.carry);
            joined.extend_from_slice(bytes);
            self.decode(&joined);
        }
        // Received bytes, about: a replacement character stands for at least one.
        let text = self.text.len().saturating_sub(2 * self.replaced);
        if text + self.carry.len() + self.data.len() > MAX_EVENT_BYTES {
            return Err(EventTooLarge);
        }
        Ok(())
    }

    /// Appends `bytes` to the text: checked as UTF-8 at once (SIMD, `simdutf8`);
    /// when that fails, read as `String::from_utf8_lossy` reads it (an invalid
    /// sequence as U+FFFD, in one pass), except a sequence cut by the end of the read,
    /// kept in `carry` for the next.
    fn decode(&mut self, bytes: &[u8]) {
        if let Ok(s) = simdutf8::basic::from_utf8(bytes) {
            self.text.push_str(s);
            return;
        }
        let mut chunks = bytes.utf8_chunks().peekable();
        while let Some(c) = chunks.next() {
            self.text.push_str(c.valid());
            let bad = c.invalid();
            if bad.is_empty() {
                continue;
            }
            // The last piece may be the start of a sequence the next read completes.
            let cut = chunks.peek().is_none()
                && std::str::from_utf8(bad).is_err_and(|e| e.error_len().is_none());
            if cut {
                self.carry.extend_from_slice(bad);
            } else {
                self.text.push(char::REPLACEMENT_CHARACTER);
                self.replaced += 1;
            }
        }
    }

    /// The next complete event, if the buffer holds one.
    pub fn next_event(&mut self) -> Option<SseEvent> {
        let mut ev = SseEvent::default();
        self.next_into(&mut ev).then_some(ev)
    }

    /// As [`SseParser::next_event`], writing the event into `ev` (its previous
    /// contents replaced, its buffers reused): a relay that keeps one `SseEvent`
    /// parses without allocating per event. Returns whether an event was written.
    pub fn next_into(&mut self, ev: &mut SseEvent) -> bool {
        self.settle();
        if !self.past_bom {
            let rest = &self.text[self.pos..];
            if rest.is_empty() {
                // Wait for the first character (a byte order mark or not).
                return false;
            }
            if rest.starts_with(BOM) {
                self.pos += BOM.len_utf8();
            }
            self.past_bom = true;
            self.scanned = 0;
        }
        loop {
            if self.skip_lf && self.pos < self.text.len() {
                if self.text.as_bytes()[self.pos] == b'\n' {
                    self.pos += 1;
                    self.scanned = self.scanned.saturating_sub(1);
                }
                self.skip_lf = false;
            }
            let rest = &self.text.as_bytes()[self.pos..];
            let Some(found) = memchr::memchr2(b'\n', b'\r', &rest[self.scanned..]) else {
                self.scanned = rest.len();
                return false;
            };
            let end = self.scanned + found;
            self.scanned = 0;
            if rest[end] == b'\r' {
                self.skip_lf = true;
            }
            if end == 0 {
                self.pos += 1;
                if self.has_data {
                    self.has_data = false;
                    // The parser keeps `ev`'s old buffer for the next event.
                    std::mem::swap(&mut self.data, &mut ev.data);
                    self.data.clear();
                    ev.event = self.event.take();
                    ev.data_lines = std::mem::take(&mut self.data_lines);
                    return true;
                }
                self.event = None;
                continue;
            }
            self.line(end);
            self.pos += end + 1;
        }
    }

    /// The next complete event, if the buffer holds one, as a view: into the
    /// buffer itself for an event of one `data:` line ended by `\n\n` once the
    /// stream is under way, otherwise into an event built as
    /// [`SseParser::next_into`] builds it. The same events, in the same order, as
    /// [`SseParser::next_event`] (`tests::next_ref_agrees_with_next_event`).
    pub fn next_ref(&mut self) -> Option<SseEventRef<'_>> {
        self.settle();
        if let Some((data, end)) = self.one_line_event() {
            self.lent = end;
            let base = self.pos;
            return Some(SseEventRef {
                event: None,
                data: &self.text[base + data.start..base + data.end],
                data_lines: 1,
            });
        }
        let mut built = std::mem::take(&mut self.built);
        let got = self.next_into(&mut built);
        self.built = built;
        got.then(|| self.built.view())
    }

    /// Where (in `text[pos..]`) the `data:` value of the event at the start of the
    /// buffer lies, and where the event ends, when it is one `data:` line ended by
    /// `\n\n` and the general path holds nothing of it (no field line read, no line
    /// end or byte order mark pending, no search under way).
    #[inline]
    fn one_line_event(&self) -> Option<(std::ops::Range<usize>, usize)> {
        if !self.past_bom || self.has_data || self.event.is_some() || self.skip_lf {
            return None;
        }
        if self.scanned != 0 {
            // Part of a line already searched: the general path goes on from there
            // (so a long event arriving in many reads is searched once).
            return None;
        }
        let b = &self.text.as_bytes()[self.pos..];
        if b.len() < 7 || &b[..5] != b"data:" {
            return None;
        }
        let start = if b[5] == b' ' { 6 } else { 5 };
        let nl = start + memchr::memchr2(b'\n', b'\r', &b[start..])?;
        if b[nl] != b'\n' || b.get(nl + 1) != Some(&b'\n') {
            return None;
        }
        Some((start..nl, nl + 2))
    }

    /// Consumes the event last lent by [`SseParser::next_ref`].
    #[inline]
    fn settle(&mut self) {
        self.pos += std::mem::take(&mut self.lent);
    }

    /// Takes in the line `text[pos..pos + end]` (not empty, its line end excluded).
    fn line(&mut self, end: usize) {
        let line = &self.text[self.pos..self.pos + end];
        if line.as_bytes()[0] == b':' {
            return;
        }
        // The field name is a few bytes ("data"): a plain scan for the colon, not
        // `str::find`'s searcher (an ASCII byte: its index is a character boundary).
        let (field, value) = match line.as_bytes().iter().position(|&b| b == b':') {
            Some(i) => {
                let v = &line[i + 1..];
                (&line[..i], v.strip_prefix(' ').unwrap_or(v))
            }
            None => (line, ""),
        };
        match field {
            "data" => {
                if self.has_data {
                    self.data.push('\n');
                }
                self.data.push_str(value);
                self.has_data = true;
                self.data_lines += 1;
            }
            "event" => self.event = Some(value.to_string()),
            _ => {}
        }
    }

    /// At the end of the body: the event whose blank line never came (its last line
    /// may lack its line end too), if it holds data. The WHATWG algorithm discards
    /// it; providers' events are whole JSON documents, so a cut one still fails to
    /// parse in the adapter, while a whole one (a server that ends its body with
    /// `data: {...}` and no blank line) is not lost.
    pub fn finish(&mut self) -> Option<SseEvent> {
        self.settle();
        if !self.carry.is_empty() {
            // A sequence the body ended inside.
            self.carry.clear();
            self.text.push(char::REPLACEMENT_CHARACTER);
        }
        if !self.has_partial() {
            return None;
        }
        self.text.push_str("\n\n");
        let ev = self.next_event();
        self.text.clear();
        self.pos = 0;
        self.scanned = 0;
        self.replaced = 0;
        ev
    }

    /// Whether bytes of an unfinished event remain (used to tell a clean end of stream
    /// from a cut one).
    pub fn has_partial(&self) -> bool {
        self.has_data
            || !self.carry.is_empty()
            || !self.text.as_bytes()[self.pos + self.lent..]
                .iter()
                .all(|b| b.is_ascii_whitespace())
    }
}

/// Appends one event `data: <json>\n\n` to `out` (the JSON written in place, no
/// intermediate string).
pub fn write_event(out: &mut BytesMut, json: &impl Serialize) {
    out.put_slice(b"data: ");
    let mut w = out.writer();
    let _ = serde_json::to_writer(&mut w, json);
    let out = w.into_inner();
    out.put_slice(b"\n\n");
}

/// Appends OpenAI's stream terminator `data: [DONE]\n\n` to `out`.
pub fn write_done(out: &mut BytesMut) {
    out.put_slice(b"data: [DONE]\n\n");
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all(p: &mut SseParser) -> Vec<SseEvent> {
        std::iter::from_fn(|| p.next_event()).collect()
    }

    #[test]
    fn splits_anywhere() {
        let text = b"event: a\ndata: {\"x\":1}\n\n: keepalive\n\ndata: l1\r\ndata: l2\r\n\r\ndata: [DONE]\n\n";
        for cut in 0..text.len() {
            let mut p = SseParser::new();
            p.push(&text[..cut]).unwrap();
            let mut ev = all(&mut p);
            p.push(&text[cut..]).unwrap();
            ev.extend(all(&mut p));
            assert_eq!(ev.len(), 3, "cut at {cut}");
            assert_eq!(ev[0].event.as_deref(), Some("a"));
            assert_eq!(ev[0].data, "{\"x\":1}");
            assert_eq!(ev[1].data, "l1\nl2");
            assert_eq!(ev[2].data, "[DONE]");
            assert!(!p.has_partial());
        }
    }

    #[test]
    fn the_last_event_without_its_blank_line_is_taken_at_the_end() {
        for tail in ["", "\n", "\r", "\r\n"] {
            let mut p = SseParser::new();
            p.push(format!("data: a\n\nevent: e\ndata: {{\"x\":1}}{tail}").as_bytes())
                .unwrap();
            assert_eq!(p.next_event().unwrap().data, "a");
            assert!(p.next_event().is_none());
            let last = p.finish().unwrap();
            assert_eq!(
                (last.event.as_deref(), last.data.as_str()),
                (Some("e"), "{\"x\":1}"),
                "{tail:?}"
            );
            assert!(p.finish().is_none());
        }
        let mut p = SseParser::new();
        p.push(b"data: a\n\n: keep-alive\n").unwrap();
        assert!(p.next_event().is_some());
        assert!(p.finish().is_none(), "a comment is no event");
    }

    #[test]
    fn a_reused_event_is_overwritten_whole() {
        let mut p = SseParser::new();
        p.push(b"event: e\ndata: first, longer\n\ndata: 2\n\ndata: 3\n\n")
            .unwrap();
        let mut ev = SseEvent::default();
        let mut got = Vec::new();
        while p.next_into(&mut ev) {
            got.push(ev.clone());
        }
        assert_eq!(
            got,
            [("e", "first, longer"), ("", "2"), ("", "3")].map(|(e, d)| SseEvent {
                event: (!e.is_empty()).then(|| e.to_string()),
                data: d.to_string(),
                data_lines: 1,
            })
        );
        assert!(!p.next_into(&mut ev));
    }

    #[test]
    fn a_leading_byte_order_mark_is_ignored_wherever_the_reads_split_it() {
        // WHATWG 9.2.6: one leading U+FEFF is ignored; the first line is a field.
        let text = "\u{feff}data: {\"x\":1}\r\n\r\ndata: \u{feff}b\n\n";
        for cut in 0..=text.len() {
            let mut p = SseParser::new();
            let mut got = Vec::new();
            for part in [&text.as_bytes()[..cut], &text.as_bytes()[cut..]] {
                for b in part.chunks(1) {
                    p.push(b).unwrap();
                    got.extend(all(&mut p).into_iter().map(|e| e.data));
                }
            }
            assert_eq!(got, ["{\"x\":1}", "\u{feff}b"], "cut at {cut}");
        }
        let mut p = SseParser::new();
        p.push("\u{feff}".as_bytes()).unwrap();
        assert!(p.next_event().is_none() && p.finish().is_none());
    }

    /// Every event `next_ref` hands out, owned, reading `parts` one after another.
    fn by_ref(parts: &[&[u8]]) -> Vec<SseEvent> {
        let mut p = SseParser::new();
        let mut got = Vec::new();
        for part in parts {
            p.push(part).unwrap();
            while let Some(ev) = p.next_ref() {
                got.push(SseEvent {
                    event: ev.event.map(str::to_string),
                    data: ev.data.to_string(),
                    data_lines: ev.data_lines,
                });
            }
        }
        got.extend(p.finish());
        got
    }

    /// As [`by_ref`], with `next_event`.
    fn by_event(parts: &[&[u8]]) -> Vec<SseEvent> {
        let mut p = SseParser::new();
        let mut got = Vec::new();
        for part in parts {
            p.push(part).unwrap();
            got.extend(all(&mut p));
        }
        got.extend(p.finish());
        got
    }

    const MIXED: &[u8] = b"data: {\"a\":1}\n\ndata:{\"b\":2}\n\nevent: e\ndata: x\n\ndata: l1\ndata: l2\n\n: ping\n\ndata: r\r\n\r\ndata: \n\ndata:\n\ndata: caf\xc3\xa9 \xe2\x82\xac\n\ndata: bad \xff here\n\ndata: after\n\nid: 7\ndata: with id\n\ndata: [DONE]\n\ndata: tail";

    #[test]
    fn next_ref_agrees_with_next_event() {
        let whole = by_event(&[MIXED]);
        assert_eq!(whole.len(), 13, "{whole:?}");
        assert_eq!(by_ref(&[MIXED]), whole);
        for cut in 0..=MIXED.len() {
            let parts = [&MIXED[..cut], &MIXED[cut..]];
            assert_eq!(by_ref(&parts), whole, "cut at {cut}");
        }
        let bytes: Vec<&[u8]> = MIXED.chunks(1).collect();
        assert_eq!(by_ref(&bytes), whole, "a byte at a time");
        let mut bom = b"\xEF\xBB\xBF".to_vec();
        bom.extend_from_slice(MIXED);
        assert_eq!(by_ref(&[&bom]), whole, "after a byte order mark");
    }

    #[test]
    fn a_one_line_event_is_lent_from_the_read_buffer() {
        let mut p = SseParser::new();
        p.push(b"data: first\n\ndata: {\"x\":1}\n\ndata: caf\xc3\xa9\n\n")
            .unwrap();
        // The stream's first event takes the general path (a byte order mark?).
        assert_eq!(p.next_ref().unwrap().data, "first");
        assert_eq!(p.lent, 0);
        let ev = p.next_ref().unwrap();
        assert_eq!((ev.event, ev.data, ev.data_lines), (None, "{\"x\":1}", 1));
        assert_eq!(p.lent, 15, "lent from the buffer");
        assert_eq!(p.next_ref().unwrap().data, "caf\u{e9}");
        assert!(p.lent > 0);
        assert!(p.next_ref().is_none());
        assert!(!p.has_partial());
    }

    #[test]
    fn utf8_cut_by_a_read_or_invalid_is_read_as_the_general_path_reads_it() {
        // "é" cut between two reads: valid once whole.
        assert_eq!(
            by_ref(&[b"data: a\n\ndata: caf\xc3", b"\xa9\n\ndata: b\n\n"]),
            by_event(&[b"data: a\n\ndata: caf\xc3\xa9\n\ndata: b\n\n"])
        );
        // An invalid byte: replaced, the events after it unharmed.
        let got = by_ref(&[b"data: a\n\ndata: \xff\n\ndata: b\n\ndata: \xc3\xa9\n\n"]);
        let data: Vec<&str> = got.iter().map(|e| e.data.as_str()).collect();
        assert_eq!(data, ["a", "\u{fffd}", "b", "\u{e9}"]);
    }

    proptest::proptest! {
        /// Any stream of events cut into any reads gives the same events whichever
        /// way it is read.
        #[test]
        fn next_ref_agrees_with_next_event_on_any_stream(
            lines in proptest::collection::vec(
                proptest::sample::select(vec![
                    &b"data: {\"x\":1}\n"[..], b"data:y\n", b"data: \n", b"\n", b"\n",
                    b"\n", b"event: e\n", b": c\n", b"data: z\r\n", b"\r\n", b"\r",
                    b"data: \xc3\xa9\n", b"data: \xff\n", b"id: 1\n", b"data", b"\xe2\x82\xac",
                    b"\xc3", b"\xa9", b"\xe2\x82", b"\xef\xbb\xbf", b"x",
                ]),
                0..40,
            ),
            cuts in proptest::collection::vec(0usize..400, 0..6),
        ) {
            let text: Vec<u8> = lines.concat();
            let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c.min(text.len())).collect();
            cuts.sort_unstable();
            let mut parts = Vec::new();
            let mut at = 0;
            for c in cuts {
                parts.push(&text[at..c]);
                at = c;
            }
            parts.push(&text[at..]);
            // The text read as `String::from_utf8_lossy` reads it, however cut.
            let lossy = String::from_utf8_lossy(&text);
            let whole = by_event(&[lossy.as_bytes()]);
            proptest::prop_assert_eq!(&by_event(&parts), &whole);
            proptest::prop_assert_eq!(by_ref(&parts), whole);
        }
    }

    /// Found by attack (2026-12-05): an event of 6 MB of invalid bytes was refused as
    /// larger than 16 MiB, its U+FFFD (3 bytes each) counted instead of the bytes
    /// received. The bound is on received bytes; a valid event past it still fails.
    #[test]
    fn the_event_size_bound_counts_received_bytes_not_replacements() {
        let mut p = SseParser::new();
        p.push(b"data: ").unwrap();
        for _ in 0..96 {
            p.push(&[0xFF; 64 * 1024]).unwrap();
        }
        p.push(b"\n\n").unwrap();
        let ev = p.next_event().unwrap();
        assert_eq!(ev.data.chars().count(), 96 * 64 * 1024);
        let mut p = SseParser::new();
        p.push(b"data: ").unwrap();
        let big = vec![b'a'; 1 << 20];
        let refused = (0..17).any(|_| p.push(&big).is_err());
        assert!(refused, "17 MiB of one event");
    }

    #[test]
    fn partial_is_detected() {
        let mut p = SseParser::new();
        p.push(b"data: {\"x\"").unwrap();
        assert!(p.next_event().is_none());
        assert!(p.has_partial());
    }

    #[test]
    fn data_lines_counts_the_lines_each_event_joined() {
        let mut p = SseParser::new();
        p.push(b"data: a\ndata: b\r\ndata: c\n\nevent: e\ndata: d\n\n: note\n\ndata:\n\n")
            .unwrap();
        let mut ev = SseEvent::default();
        let mut got = Vec::new();
        while p.next_into(&mut ev) {
            got.push((ev.data.clone(), ev.data_lines));
        }
        assert_eq!(
            got,
            [("a\nb\nc".to_string(), 3), ("d".into(), 1), ("".into(), 1)]
        );
    }
}
