//! Incremental parser for server-sent events (WHATWG HTML, "Server-sent events",
//! section 9.2.6 "Interpreting an event stream").
//!
//! Providers stream chat completions as SSE. Network reads split events anywhere, so the
//! parser keeps the unfinished tail and yields each event once its blank line arrives.
//! Lines may end in `\n`, `\r\n` or `\r`; several `data:` lines join with `\n`; lines
//! starting with `:` are comments (keep-alives) and are skipped.
//!
//! The writing side is here too: every OpenAI-format event Switchyard emits (translated
//! chunks, error events, `[DONE]`) goes through [`write_event`] and [`write_done`].

use bytes::{Buf, BufMut, BytesMut};
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

/// Largest event accepted, in bytes; a provider sending more without a blank line is
/// answering badly, not streaming (protects memory from a broken upstream).
pub const MAX_EVENT_BYTES: usize = 16 * 1024 * 1024;

/// Error: an event grew past [`MAX_EVENT_BYTES`].
#[derive(Debug, thiserror::Error)]
#[error("upstream sent a server-sent event larger than {MAX_EVENT_BYTES} bytes")]
pub struct EventTooLarge;

/// Streaming SSE parser: feed bytes with [`SseParser::push`], take events with
/// [`SseParser::next_event`].
#[derive(Debug, Default)]
pub struct SseParser {
    buf: BytesMut,
    event: Option<String>,
    data: String,
    has_data: bool,
    /// `data:` lines of the event being read.
    data_lines: u32,
    /// A `\r` ended the last consumed line; a following `\n` belongs to it.
    skip_lf: bool,
    /// Bytes of `buf` already searched for a line end (keeps parsing linear when an
    /// event arrives in many small reads).
    scanned: usize,
    /// The stream's first bytes were read past a leading byte order mark (WHATWG:
    /// one leading U+FEFF is ignored).
    past_bom: bool,
}

/// U+FEFF in UTF-8.
const BOM: &[u8] = b"\xEF\xBB\xBF";

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
        self.buf.extend_from_slice(bytes);
        if self.buf.len() + self.data.len() > MAX_EVENT_BYTES {
            return Err(EventTooLarge);
        }
        Ok(())
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
        if !self.past_bom {
            if self.buf.len() < BOM.len() && BOM.starts_with(&self.buf) {
                // Perhaps a byte order mark cut by the read: wait for the rest.
                return false;
            }
            if self.buf.starts_with(BOM) {
                self.buf.advance(BOM.len());
            }
            self.past_bom = true;
            self.scanned = 0;
        }
        loop {
            if self.skip_lf && !self.buf.is_empty() {
                if self.buf[0] == b'\n' {
                    self.buf.advance(1);
                    self.scanned = self.scanned.saturating_sub(1);
                }
                self.skip_lf = false;
            }
            let Some(found) = memchr::memchr2(b'\n', b'\r', &self.buf[self.scanned..]) else {
                self.scanned = self.buf.len();
                return false;
            };
            let end = self.scanned + found;
            self.scanned = 0;
            if self.buf[end] == b'\r' {
                self.skip_lf = true;
            }
            if end == 0 {
                self.buf.advance(1);
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
            self.buf.advance(end + 1);
        }
    }

    /// Takes in the line `buf[..end]` (not empty, its line end excluded).
    fn line(&mut self, end: usize) {
        let raw = &self.buf[..end];
        if raw[0] == b':' {
            return;
        }
        // Valid UTF-8 (every provider sends it) is checked without a copy, with SIMD
        // (`simdutf8`: a line is a whole chunk, a few hundred bytes); anything else
        // is read with replacement characters.
        let line = match simdutf8::basic::from_utf8(raw) {
            Ok(s) => std::borrow::Cow::Borrowed(s),
            Err(_) => String::from_utf8_lossy(raw),
        };
        // The field name is a few bytes ("data"): a plain scan for the colon, not
        // `str::find`'s searcher (an ASCII byte: its index is a character boundary).
        let (field, value) = match line.as_bytes().iter().position(|&b| b == b':') {
            Some(i) => {
                let v = &line[i + 1..];
                (&line[..i], v.strip_prefix(' ').unwrap_or(v))
            }
            None => (&line[..], ""),
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
        if !self.has_partial() {
            return None;
        }
        self.buf.extend_from_slice(b"\n\n");
        let ev = self.next_event();
        self.buf.clear();
        self.scanned = 0;
        ev
    }

    /// Whether bytes of an unfinished event remain (used to tell a clean end of stream
    /// from a cut one).
    pub fn has_partial(&self) -> bool {
        self.has_data || !self.buf.iter().all(|b| b.is_ascii_whitespace())
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
