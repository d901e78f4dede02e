//! The targeted scanner of the OpenAI stream relay: one pass over a
//! `chat.completion.chunk` that records, as byte ranges into its text, the few members
//! the relay reads (`model`, `usage`, `error`, `id`, `created`, and per choice
//! `finish_reason`, `delta.content`, `delta.tool_calls`, `delta.reasoning_content`), and
//! skips the rest by bracket
//! depth. The relay then writes the chunk with `model` replaced (and `usage` dropped
//! when the client did not ask for it) straight into the client's buffer: no tree, no
//! re-serialization and no allocation per event.
//!
//! Validation is structural: the top-level object and its choices must be well formed
//! (keys, colons, commas, scalars that are `true`, `false`, `null` or numbers, nothing
//! after the closing brace), and nested values below them must balance their brackets
//! and strings. A cut event (the body ended inside it) always fails. Invalid JSON deep
//! inside a member the relay does not read (a malformed escape in a tool-call argument)
//! is relayed as the upstream sent it, as any byte-level proxy would.
//!
//! # The previous chunk as a template
//! A stream's chunks mostly differ from each other only inside string values: the
//! text of `delta.content`, and, from OpenAI, the random padding of `obfuscation`;
//! `id`, `created`, `model` and the whole structure repeat (the load benchmark's 20
//! content chunks, and the recorded OpenAI streams in `fixtures/provider-wire`).
//! So the scan keeps the last chunk it read and the ranges of the string values it
//! passed at the levels it walks, and a new chunk is first compared with that
//! template ([`ChunkScan::rescan`]): equal bytes are compared sixteen at a time, and
//! where they differ inside one of those string values, the new chunk's string is
//! read to its end and the comparison goes on after both. A chunk that matches
//! that way is the template with some string values replaced by other strings:
//! the same JSON structure, keys and scalars, so the scan's ranges only move by
//! the changed lengths. Anything else (a key, a number, a `null` that became a
//! string, a nested value that changed) falls back to the full scan. Both give
//! the same result (`tests::the_template_path_agrees_with_the_full_scan`).

use std::ops::Range;

use super::super::splice::{skip_string, skip_string_escaped, skip_value, skip_ws};

/// What one choice of a chunk carries, as the relay counts it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct ChoiceScan {
    /// `finish_reason` when present and not `null` (the JSON value's range).
    pub finish: Option<Range<usize>>,
    /// `delta.content` when it is neither `null` nor `""` (the JSON value's range).
    pub content: Option<Range<usize>>,
    /// `delta.tool_calls` is present and not `null`.
    pub tool_calls: bool,
    /// `delta.reasoning_content` (DeepSeek, xAI, vLLM) or `delta.reasoning` (vLLM's
    /// newer name, OpenRouter) is present and neither `null` nor `""`.
    pub reasoning: bool,
    /// The choice's `index`, when it is a number that fits a `u32`.
    pub index: Option<u32>,
}

/// The members of one chunk the relay reads. Value ranges include a string's quotes;
/// a member whose value is `null` is recorded as absent (as serde reads an
/// `Option`), except [`ChunkScan::usage_member`].
#[derive(Debug, Default)]
pub(super) struct ChunkScan {
    /// Index just past the object's opening brace (where a missing `model` goes).
    pub after_brace: usize,
    /// The object has no members.
    pub empty: bool,
    /// The value of `model`, whatever it is (the last one).
    pub model: Option<Range<usize>>,
    /// The chunk has more than one `model` member ([`ChunkScan::write`] replaces
    /// only the last).
    pub model_twice: bool,
    /// The value of `usage`.
    pub usage: Option<Range<usize>>,
    /// The whole `usage` member, `null` or not: key to value with the comma that
    /// separates it from a neighbour, so removing it leaves valid JSON.
    pub usage_member: Option<Range<usize>>,
    /// The value of `error`.
    pub error: Option<Range<usize>>,
    /// The value of `id`.
    pub id: Option<Range<usize>>,
    /// The value of `created`.
    pub created: Option<Range<usize>>,
    /// The elements of `choices` (kept between events so its buffer is reused).
    pub choices: Vec<ChoiceScan>,
    /// The last chunk scanned, the template the next is compared with (empty: none).
    template: Vec<u8>,
    /// The string values of the template at the levels the scan walks, in order:
    /// the parts where a next chunk may differ and still take the template path.
    strings: Vec<(Range<usize>, Slot)>,
}

/// What a string value of the template is to the scan ([`ChunkScan::strings`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Slot {
    /// `delta.content` of the choice at this index (absent when `""`).
    Content(u32),
    /// `delta.reasoning_content` or `delta.reasoning` of the choice at this index
    /// (no reasoning when `""`).
    Reasoning(u32),
    /// Any other (its range, if recorded, only moves).
    Other,
}

/// What [`ChunkScan::write`] does with a chunk's `usage` member (OpenAI API
/// reference, `stream_options.include_usage`: the usage chunk, with `choices: []`,
/// carries the counts, and "all other chunks will also include a usage field, but
/// with a null value").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum UsageEdit {
    /// Written as the upstream sent it (the usage chunk of a client that asked).
    Keep,
    /// Removed (the client did not ask for usage).
    Drop,
    /// `null`, added when absent (a chunk with choices, for a client that asked).
    Null,
}

/// Largest chunk kept as a template, bytes (chunks are a few hundred).
const MAX_TEMPLATE_BYTES: usize = 16 * 1024;

/// Most string values that may differ from the template in one chunk.
const MAX_CHANGES: usize = 4;

/// A key's text: the raw bytes between its quotes, or, for a key written with
/// escapes (`escaped`), its decoded text (`"mo\u0064el"` is `model` to every JSON reader).
pub(super) fn key(raw: &[u8], escaped: bool) -> std::borrow::Cow<'_, [u8]> {
    let inner = &raw[1..raw.len() - 1];
    // Whether it holds an escape was found while its end was (`Members::next`).
    if !escaped {
        return std::borrow::Cow::Borrowed(inner);
    }
    match serde_json::from_slice::<String>(raw) {
        Ok(k) => std::borrow::Cow::Owned(k.into_bytes()),
        // Not a key any reader accepts: matches none of the relay's.
        Err(_) => std::borrow::Cow::Borrowed(b""),
    }
}

/// The member names the relay reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Name {
    Model,
    Usage,
    Error,
    Id,
    Created,
    Choices,
    Delta,
    Content,
    ToolCalls,
    FinishReason,
    /// `reasoning_content` or `reasoning`.
    Reasoning,
    Index,
    /// Any other name.
    Other,
}

impl Name {
    /// Which name the raw key `k` is; a key with an escape is decoded first
    /// ([`key`]), one without is matched as it stands (no `Cow`). Matched as byte
    /// patterns: a match on byte-string literals compared through `memcmp`. Both,
    /// and inlining this, took the scan of the load benchmark's chunks from 3,029 to
    /// about 2,400 instructions per chunk in a loop of its own.
    #[inline(always)]
    fn of(k: Key<'_>) -> Name {
        match k {
            Key(raw, false) => Name::named(&raw[1..raw.len() - 1]),
            Key(raw, true) => Name::named(&key(raw, true)),
        }
    }

    /// Which name the decoded key `text` is.
    #[inline(always)]
    fn named(text: &[u8]) -> Name {
        match text {
            [b'i', b'd'] => Name::Id,
            [b'i', b'n', b'd', b'e', b'x'] => Name::Index,
            [b'm', b'o', b'd', b'e', b'l'] => Name::Model,
            [b'u', b's', b'a', b'g', b'e'] => Name::Usage,
            [b'e', b'r', b'r', b'o', b'r'] => Name::Error,
            [b'd', b'e', b'l', b't', b'a'] => Name::Delta,
            [b'c', b'r', b'e', b'a', b't', b'e', b'd'] => Name::Created,
            [b'c', b'h', b'o', b'i', b'c', b'e', b's'] => Name::Choices,
            [b'c', b'o', b'n', b't', b'e', b'n', b't'] => Name::Content,
            [b't', b'o', b'o', b'l', b'_', b'c', b'a', b'l', b'l', b's'] => Name::ToolCalls,
            [b'f', b'i', b'n', b'i', b's', b'h', b'_', b'r', b'e', b'a', b's', b'o', b'n'] => {
                Name::FinishReason
            }
            b"reasoning_content" | b"reasoning" => Name::Reasoning,
            _ => Name::Other,
        }
    }
}

/// A member's raw key (quotes included) and whether it holds an escape.
#[derive(Clone, Copy)]
struct Key<'a>(&'a [u8], bool);

fn is_null(b: &[u8], v: &Range<usize>) -> bool {
    &b[v.clone()] == b"null"
}

/// The value at `b[i]`, its end checked: strings and containers must close, a scalar
/// must be a literal or look like a number.
fn value(b: &[u8], i: usize) -> Result<Range<usize>, &'static str> {
    const CUT: &str = "the event ends inside a value";
    const NOT_JSON: &str = "a value is not JSON";
    let end = match b.get(i) {
        Some(b'"') => skip_string(b, i).ok_or(CUT)?,
        Some(b'{' | b'[') => skip_value(b, i).ok_or(CUT)?,
        // A number's characters up to the byte that ends it, in the same pass.
        Some(b'-' | b'0'..=b'9') => {
            let mut j = i + 1;
            while let Some(c) = b.get(j) {
                match c {
                    b'0'..=b'9' | b'-' | b'+' | b'.' | b'e' | b'E' => j += 1,
                    b',' | b'}' | b']' | b' ' | b'\t' | b'\n' | b'\r' => break,
                    _ => return Err(NOT_JSON),
                }
            }
            j
        }
        _ => {
            let end = skip_value(b, i).ok_or(CUT)?;
            if !matches!(&b[i..end], b"true" | b"false" | b"null") {
                return Err(NOT_JSON);
            }
            end
        }
    };
    Ok(i..end)
}

/// The members of one object, read in one pass: [`Members::next`] gives a member's
/// raw key and where its value starts; the caller reads the value to its end (with
/// [`value`], or by walking it) and hands that end to [`Members::value_ends`], which
/// checks what follows and returns the member's range (key to value, with the comma
/// that separates it from the next member or, for the last, from the previous one).
struct Members<'a> {
    b: &'a [u8],
    /// Where the next key starts (or the closing brace).
    i: usize,
    key_start: usize,
    /// End of the previous member's value.
    prev_end: Option<usize>,
    /// Index past the closing brace, once read.
    end: Option<usize>,
}

impl<'a> Members<'a> {
    /// The members of the object at `b[i] == '{'`.
    fn of(b: &'a [u8], i: usize) -> Members<'a> {
        let i = skip_ws(b, i + 1);
        let end = (b.get(i) == Some(&b'}')).then_some(i + 1);
        Members {
            b,
            i,
            key_start: i,
            prev_end: None,
            end,
        }
    }

    /// The next member's raw key (quotes included, with whether it holds an
    /// escape) and the index where its value starts; `None` after the closing
    /// brace.
    fn next(&mut self) -> Result<Option<(Key<'a>, usize)>, &'static str> {
        if self.end.is_some() {
            return Ok(None);
        }
        let (b, i) = (self.b, self.i);
        if b.get(i) != Some(&b'"') {
            return Err("a member does not start with a key");
        }
        let (key_end, escaped) = skip_string_escaped(b, i).ok_or("the event ends inside a key")?;
        let colon = skip_ws(b, key_end);
        if b.get(colon) != Some(&b':') {
            return Err("a key is not followed by `:`");
        }
        self.key_start = i;
        let v = skip_ws(b, colon + 1);
        if v >= b.len() {
            return Err("the event ends inside a value");
        }
        Ok(Some((Key(&b[i..key_end], escaped), v)))
    }

    /// The value of the member [`Members::next`] gave ended at `v_end`: moves past
    /// the `,` or `}` after it and returns the member's range.
    fn value_ends(&mut self, v_end: usize) -> Result<Range<usize>, &'static str> {
        let b = self.b;
        let after = skip_ws(b, v_end);
        let prev_end = self.prev_end.replace(v_end);
        match b.get(after) {
            Some(b',') => {
                self.i = skip_ws(b, after + 1);
                Ok(self.key_start..self.i)
            }
            Some(b'}') => {
                self.end = Some(after + 1);
                Ok(prev_end.unwrap_or(self.key_start)..v_end)
            }
            Some(_) => Err("members are not separated by `,`"),
            None => Err("the event ends inside an object"),
        }
    }

    /// Index past the closing brace (once [`Members::next`] returned `None`).
    fn end(&self) -> usize {
        self.end.unwrap_or(self.b.len())
    }
}

/// Records `v` in `strings` when it is a string value.
fn note_string(b: &[u8], v: &Range<usize>, slot: Slot, strings: &mut Vec<(Range<usize>, Slot)>) {
    if b[v.start] == b'"' {
        strings.push((v.clone(), slot));
    }
}

/// Reads the element of `choices` at `b[i] == '{'` (the `index`-th) into a
/// [`ChoiceScan`], its string values into `strings`; returns it and the index past
/// it.
fn choice(
    b: &[u8],
    i: usize,
    index: u32,
    strings: &mut Vec<(Range<usize>, Slot)>,
) -> Result<(ChoiceScan, usize), &'static str> {
    let mut c = ChoiceScan::default();
    let mut m = Members::of(b, i);
    while let Some((k, vs)) = m.next()? {
        let v_end = match Name::of(k) {
            Name::Delta if b[vs] == b'{' => {
                let mut d = Members::of(b, vs);
                while let Some((k, vs)) = d.next()? {
                    let v = value(b, vs)?;
                    match Name::of(k) {
                        Name::Content => {
                            let raw = &b[v.clone()];
                            c.content = (raw != b"null" && raw != b"\"\"").then_some(v.clone());
                            note_string(b, &v, Slot::Content(index), strings);
                        }
                        Name::ToolCalls => c.tool_calls = !is_null(b, &v),
                        Name::Reasoning => {
                            let raw = &b[v.clone()];
                            c.reasoning |= raw != b"null" && raw != b"\"\"";
                            note_string(b, &v, Slot::Reasoning(index), strings);
                        }
                        _ => note_string(b, &v, Slot::Other, strings),
                    }
                    d.value_ends(v.end)?;
                }
                d.end()
            }
            Name::Delta => {
                let v = value(b, vs)?;
                if !is_null(b, &v) {
                    return Err("`delta` is not an object");
                }
                v.end
            }
            name => {
                let v = value(b, vs)?;
                note_string(b, &v, Slot::Other, strings);
                let end = v.end;
                if name == Name::FinishReason {
                    c.finish = (!is_null(b, &v)).then_some(v);
                } else if name == Name::Index {
                    c.index = std::str::from_utf8(&b[v]).ok().and_then(|n| n.parse().ok());
                }
                end
            }
        };
        m.value_ends(v_end)?;
    }
    Ok((c, m.end()))
}

/// Reads the `choices` list at `b[i] == '['` into `out` (their string values into
/// `strings`); returns the index past it.
fn choices(
    b: &[u8],
    i: usize,
    out: &mut Vec<ChoiceScan>,
    strings: &mut Vec<(Range<usize>, Slot)>,
) -> Result<usize, &'static str> {
    let mut i = skip_ws(b, i + 1);
    if b.get(i) == Some(&b']') {
        return Ok(i + 1);
    }
    loop {
        match b.get(i) {
            Some(b'{') => {}
            None => return Err("the event ends inside a value"),
            Some(_) => {
                // Still a cut or malformed value first, as the scan reads it.
                value(b, i)?;
                return Err("an element of `choices` is not an object");
            }
        }
        let index = u32::try_from(out.len()).unwrap_or(u32::MAX);
        let (c, end) = choice(b, i, index, strings)?;
        out.push(c);
        i = skip_ws(b, end);
        match b.get(i) {
            Some(b',') => i = skip_ws(b, i + 1),
            Some(b']') => return Ok(i + 1),
            None => return Err("the event ends inside a value"),
            _ => return Err("elements of a list are not separated by `,`"),
        }
    }
}

/// Where the sixteen bytes of `a` and `b` at `at` first differ, if they do.
#[inline(always)]
fn diff16(a: &[u8], b: &[u8], at: usize) -> Option<usize> {
    let word = |s: &[u8]| u128::from_le_bytes(s[at..at + 16].try_into().unwrap_or([0; 16]));
    let d = word(a) ^ word(b);
    (d != 0).then(|| at + (d.trailing_zeros() / 8) as usize)
}

/// Bytes at the start of `a` and `b` that are equal: compared 32 at a time (a
/// comparison of fixed length the compiler does with two vector compares, no call),
/// the block that differs and the last 16-31 bytes sixteen at a time, windows
/// overlapping bytes already known equal (sixteen at a time and a byte-wise tail
/// was about 1,000 instructions more per 24-event stream, `callgrind.sh`).
fn common_prefix(a: &[u8], b: &[u8]) -> usize {
    let n = a.len().min(b.len());
    let (a, b) = (&a[..n], &b[..n]);
    if n < 16 {
        return a.iter().zip(b).take_while(|(x, y)| x == y).count();
    }
    let mut i = 0;
    while i + 32 <= n {
        if a[i..i + 32] != b[i..i + 32] {
            return diff16(a, b, i)
                .or_else(|| diff16(a, b, i + 16))
                .unwrap_or(i + 32);
        }
        i += 32;
    }
    if i + 16 <= n {
        if let Some(d) = diff16(a, b, i) {
            return d;
        }
    }
    // The last sixteen, from before `i` when fewer are left: those are equal.
    diff16(a, b, n - 16).unwrap_or(n)
}

impl ChunkScan {
    /// An empty scan with room for a stream's chunks: a template of 512 bytes, 16
    /// string values and one choice. A stream makes one; grown from empty, its
    /// buffers were reallocated two or three times in the first chunks (about 600
    /// instructions per 24-event stream, `benches/load/callgrind.sh`).
    pub fn new() -> ChunkScan {
        ChunkScan {
            choices: Vec::with_capacity(1),
            template: Vec::with_capacity(512),
            strings: Vec::with_capacity(16),
            ..ChunkScan::default()
        }
    }

    /// Scans the chunk `b` into `self` (cleared first).
    ///
    /// # Errors
    /// What is wrong with the chunk, in a few words ("the event ends inside a
    /// value", "`choices` is not a list"), when it is not a JSON object of the shape
    /// above.
    pub fn scan(&mut self, b: &[u8]) -> Result<(), &'static str> {
        if b.len() > MAX_TEMPLATE_BYTES {
            // Not kept: a stream's one large chunk (a tool call's arguments whole)
            // would hold its size for the rest of the stream.
            self.template = Vec::new();
            self.strings.clear();
            let scanned = self.full_scan(b);
            self.strings.clear();
            return scanned;
        }
        if self.rescan(b) {
            return Ok(());
        }
        self.template.clear();
        self.strings.clear();
        self.full_scan(b)?;
        self.template.extend_from_slice(b);
        Ok(())
    }

    /// The scan of `b` read from the template when `b` differs from it only inside
    /// string values the template recorded (see the module doc); false, with
    /// nothing changed, when it does not.
    fn rescan(&mut self, b: &[u8]) -> bool {
        let t = &self.template[..];
        if t.is_empty() || b.len() > MAX_TEMPLATE_BYTES {
            return false;
        }
        // (index in `strings`, the new string's length) per changed value.
        let mut changes = [(0usize, 0usize); MAX_CHANGES];
        let mut n = 0;
        let (mut ti, mut bi, mut k) = (0usize, 0usize, 0usize);
        // Where `b` first differs from the template: the bytes before it are the
        // template's already.
        let mut first = None;
        loop {
            let same = common_prefix(&t[ti..], &b[bi..]);
            ti += same;
            bi += same;
            if ti == t.len() && bi == b.len() {
                break;
            }
            first.get_or_insert(bi);
            // The first difference must be inside a recorded string value, after
            // its opening quote (the closing one included: a longer string).
            while self.strings.get(k).is_some_and(|(r, _)| r.end <= ti) {
                k += 1;
            }
            let Some((r, _)) = self.strings.get(k) else {
                return false;
            };
            if !(r.start < ti && ti < r.end) || n == MAX_CHANGES {
                return false;
            }
            let start = bi - (ti - r.start);
            let Some(end) = skip_string(b, start) else {
                return false;
            };
            changes[n] = (k, end - start);
            n += 1;
            ti = r.end;
            bi = end;
            k += 1;
        }
        let Some(first) = first else {
            // The same bytes: the same scan, and the template is the chunk.
            return true;
        };
        // Each change as where its value ended in the template and by how much
        // it grew, and the changed values' slots.
        let mut shifts = [(0usize, 0isize); MAX_CHANGES];
        let mut slots = [(0usize, 0usize, Slot::Other); MAX_CHANGES];
        for (j, &(k, len)) in changes[..n].iter().enumerate() {
            let (r, slot) = &self.strings[k];
            shifts[j] = (r.end, len as isize - r.len() as isize);
            slots[j] = (r.start, r.end, *slot);
        }
        let shifts = &shifts[..n];
        // A position of the template to the same place in `b`: moved by the change
        // of every value that ends at or before it. One change (a content chunk's
        // text) is most chunks: no loop then.
        let one = (n == 1).then(|| shifts[0]);
        let at = |q: usize| -> usize {
            if let Some((end, grew)) = one {
                return if end <= q {
                    (q as isize + grew) as usize
                } else {
                    q
                };
            }
            let mut moved = q as isize;
            for &(end, grew) in shifts {
                if end <= q {
                    moved += grew;
                }
            }
            moved as usize
        };
        let map = |r: &Range<usize>| at(r.start)..at(r.end);
        let opt = |r: &mut Option<Range<usize>>| {
            if let Some(r) = r {
                *r = map(r);
            }
        };
        self.after_brace = at(self.after_brace);
        opt(&mut self.model);
        opt(&mut self.usage);
        opt(&mut self.usage_member);
        opt(&mut self.error);
        opt(&mut self.id);
        opt(&mut self.created);
        for c in &mut self.choices {
            opt(&mut c.finish);
            opt(&mut c.content);
        }
        // The strings before the first changed one end before it: they stay put.
        for s in &mut self.strings[changes[0].0..] {
            s.0 = map(&s.0);
        }
        // A changed `delta.content` is content unless it became `""`; so is a
        // changed reasoning piece reasoning (a delta holds one of its two names).
        for &(start, end, slot) in &slots[..n] {
            match slot {
                Slot::Content(i) => {
                    let r = map(&(start..end));
                    let c = &mut self.choices[i as usize];
                    c.content = (&b[r.clone()] != b"\"\"").then_some(r);
                }
                Slot::Reasoning(i) => {
                    let r = map(&(start..end));
                    self.choices[i as usize].reasoning = &b[r] != b"\"\"";
                }
                Slot::Other => {}
            }
        }
        self.template.truncate(first);
        self.template.extend_from_slice(&b[first..]);
        true
    }

    /// The scan of `b` from its first byte, recording its string values for the
    /// template path.
    fn full_scan(&mut self, b: &[u8]) -> Result<(), &'static str> {
        self.model = None;
        self.model_twice = false;
        self.usage = None;
        self.usage_member = None;
        self.error = None;
        self.id = None;
        self.created = None;
        self.choices.clear();
        let start = skip_ws(b, 0);
        if b.get(start) != Some(&b'{') {
            return Err("it is not a JSON object");
        }
        self.after_brace = start + 1;
        self.empty = b.get(skip_ws(b, start + 1)) == Some(&b'}');
        let mut m = Members::of(b, start);
        while let Some((k, vs)) = m.next()? {
            let k = Name::of(k);
            if k == Name::Choices && b[vs] == b'[' {
                // Walked once, element by element: nothing is skipped first.
                let end = choices(b, vs, &mut self.choices, &mut self.strings)?;
                m.value_ends(end)?;
                continue;
            }
            let v = value(b, vs)?;
            let member = m.value_ends(v.end)?;
            note_string(b, &v, Slot::Other, &mut self.strings);
            let present = !is_null(b, &v);
            match k {
                Name::Model => {
                    self.model_twice |= self.model.is_some();
                    self.model = Some(v);
                }
                Name::Choices if present => return Err("`choices` is not a list"),
                Name::Usage => {
                    self.usage_member = Some(member);
                    self.usage = present.then_some(v);
                }
                Name::Error => self.error = present.then_some(v),
                Name::Id => self.id = present.then_some(v),
                Name::Created => self.created = present.then_some(v),
                _ => {}
            }
        }
        if skip_ws(b, m.end()) != b.len() {
            return Err("there is text after the object");
        }
        Ok(())
    }

    /// Forgets the template (the next chunk is scanned in full).
    #[cfg(test)]
    fn forget(&mut self) {
        self.template.clear();
        self.strings.clear();
    }

    /// Appends the chunk `b` (as scanned) to `out` with `model` set to `model_json`
    /// (a JSON string literal), added first when absent, and its `usage` member as
    /// `usage` says; every other byte as the upstream sent it.
    pub fn write(&self, b: &[u8], model_json: &[u8], usage: UsageEdit, out: &mut bytes::BytesMut) {
        let mut pos = 0;
        let mut edits: [(Range<usize>, &[u8]); 2] = [(0..0, &[]), (0..0, &[])];
        let mut n = 0;
        if let Some(m) = &self.model {
            edits[n] = (m.clone(), model_json);
            n += 1;
        }
        let drop_usage = usage == UsageEdit::Drop;
        match (usage, &self.usage_member, &self.usage) {
            (UsageEdit::Drop, Some(u), _) => {
                edits[n] = (u.clone(), &[]);
                n += 1;
            }
            (UsageEdit::Null, _, Some(v)) => {
                edits[n] = (v.clone(), b"null");
                n += 1;
            }
            // No `usage` member: one goes before the closing brace (the chunk ends
            // with it: nothing but whitespace follows the object).
            (UsageEdit::Null, None, None) if !self.empty => {
                if let Some(close) = b.iter().rposition(|&c| c == b'}') {
                    edits[n] = (close..close, b",\"usage\":null");
                    n += 1;
                }
            }
            _ => {}
        }
        let edits = &mut edits[..n];
        edits.sort_unstable_by_key(|(r, _)| r.start);
        out.reserve(b.len() + model_json.len() + 24);
        if self.model.is_none() {
            out.extend_from_slice(&b[..self.after_brace]);
            out.extend_from_slice(b"\"model\":");
            out.extend_from_slice(model_json);
            // The usage member may have been the only one.
            let rest_empty = self.empty
                || (drop_usage && edits.len() == 1 && {
                    let r = &edits[0].0;
                    skip_ws(b, self.after_brace) == r.start
                        && b.get(skip_ws(b, r.end)) == Some(&b'}')
                });
            if !rest_empty {
                out.extend_from_slice(b",");
            }
            pos = self.after_brace;
        }
        for (r, with) in edits.iter() {
            out.extend_from_slice(&b[pos..r.start]);
            out.extend_from_slice(with);
            pos = r.end;
        }
        out.extend_from_slice(&b[pos..]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scan(s: &str) -> Result<ChunkScan, &'static str> {
        let mut c = ChunkScan::default();
        c.scan(s.as_bytes()).map(|()| c)
    }

    fn rewrite(s: &str, drop_usage: bool) -> String {
        let usage = if drop_usage {
            UsageEdit::Drop
        } else {
            UsageEdit::Keep
        };
        rewritten(s, usage)
    }

    fn rewritten(s: &str, usage: UsageEdit) -> String {
        let c = scan(s).unwrap();
        let mut out = bytes::BytesMut::new();
        c.write(s.as_bytes(), br#""gpt-4o""#, usage, &mut out);
        String::from_utf8(out.to_vec()).unwrap()
    }

    /// A chunk with choices, for a client that asked for usage: its `usage` is
    /// `null`, replaced or added (OpenAI: "all other chunks will also include a
    /// usage field, but with a null value").
    #[test]
    fn usage_is_nulled_or_added_as_null_on_request() {
        let null = |s: &str| rewritten(s, UsageEdit::Null);
        assert_eq!(
            null(r#"{"id":"c","model":"up","choices":[{"index":0}],"usage":{"prompt_tokens":1}}"#),
            r#"{"id":"c","model":"gpt-4o","choices":[{"index":0}],"usage":null}"#
        );
        assert_eq!(
            null(r#"{"id":"c","model":"up","choices":[{"index":0}],"usage":null}"#),
            r#"{"id":"c","model":"gpt-4o","choices":[{"index":0}],"usage":null}"#
        );
        assert_eq!(
            null(r#"{"id":"c","model":"up","choices":[{"index":0}]} "#),
            r#"{"id":"c","model":"gpt-4o","choices":[{"index":0}],"usage":null} "#
        );
        assert_eq!(
            null(r#"{"choices":[{"index":0}]}"#),
            r#"{"model":"gpt-4o","choices":[{"index":0}],"usage":null}"#
        );
        for s in [
            r#"{"id":"c","choices":[{"delta":{"content":"}"}}],"x":"}"}"#,
            r#"{"usage":{"a":{"b":2}},"choices":[{"index":0}]}"#,
        ] {
            let v: serde_json::Value = serde_json::from_str(&null(s)).unwrap();
            assert!(v["usage"].is_null() && v.get("usage").is_some(), "{s}");
            assert_eq!(v["model"], "gpt-4o");
        }
    }

    #[test]
    fn the_members_the_relay_reads_are_found_and_null_ones_are_absent() {
        let s = r#"{"id":"c1","created":17,"model":"m","choices":[{"index":0,"delta":{"content":"hi","tool_calls":null},"finish_reason":null},{"delta":{"content":"","tool_calls":[{"index":0}]},"finish_reason":"stop"}],"usage":null,"error":null}"#;
        let c = scan(s).unwrap();
        let at = |r: &Option<Range<usize>>| r.clone().map(|r| &s[r]);
        assert_eq!(at(&c.id), Some(r#""c1""#));
        assert_eq!(at(&c.created), Some("17"));
        assert_eq!(at(&c.model), Some(r#""m""#));
        assert_eq!((at(&c.usage), at(&c.error)), (None, None));
        assert_eq!(at(&c.usage_member), Some(r#""usage":null,"#));
        assert_eq!(c.choices.len(), 2);
        assert_eq!(at(&c.choices[0].content), Some(r#""hi""#));
        assert!(!c.choices[0].tool_calls && c.choices[0].finish.is_none());
        assert_eq!(c.choices[1].content, None, "empty text is no content");
        assert!(c.choices[1].tool_calls);
        assert_eq!(at(&c.choices[1].finish), Some(r#""stop""#));
    }

    #[test]
    fn model_is_replaced_in_place_and_usage_dropped_on_request() {
        let s = r#"{"id":"c","model":"up-1","choices":[],"usage":{"prompt_tokens":1}}"#;
        assert_eq!(
            rewrite(s, false),
            r#"{"id":"c","model":"gpt-4o","choices":[],"usage":{"prompt_tokens":1}}"#
        );
        assert_eq!(
            rewrite(s, true),
            r#"{"id":"c","model":"gpt-4o","choices":[]}"#
        );
        let s = r#"{"usage":null, "model":"up","id":"c"}"#;
        assert_eq!(rewrite(s, true), r#"{"model":"gpt-4o","id":"c"}"#);
        let s = r#"{"id":"c","model":"up","usage":null}"#;
        assert_eq!(rewrite(s, true), r#"{"id":"c","model":"gpt-4o"}"#);
        let s = r#"{"id":"c","usage":null,"choices":[]}"#;
        assert_eq!(
            rewrite(s, true),
            r#"{"model":"gpt-4o","id":"c","choices":[]}"#
        );
        assert_eq!(rewrite(r#"{"usage":null}"#, true), r#"{"model":"gpt-4o"}"#);
        assert_eq!(rewrite(r#"{ }"#, true), r#"{"model":"gpt-4o" }"#);
        assert_eq!(rewrite(r#"{"a":1}"#, false), r#"{"model":"gpt-4o","a":1}"#);
    }

    #[test]
    fn only_top_level_and_escaped_keys_count() {
        let s = r#"{"choices":[{"delta":{"content":"x","model":"inner"}}],"mod\u0065l":"up"}"#;
        assert_eq!(
            rewrite(s, false),
            r#"{"choices":[{"delta":{"content":"x","model":"inner"}}],"mod\u0065l":"gpt-4o"}"#
        );
    }

    #[test]
    fn a_cut_or_malformed_chunk_is_refused() {
        let whole = r#"{"id":"c","choices":[{"delta":{"content":"a\"b"},"finish_reason":null}],"created":17}"#;
        for cut in 0..whole.len() {
            assert!(
                scan(&whole[..cut]).is_err(),
                "cut at {cut}: {}",
                &whole[..cut]
            );
        }
        assert!(scan(whole).is_ok());
        for bad in [
            "[1]",
            "not json",
            r#"{"a":tru}"#,
            r#"{"a":1}x"#,
            r#"{"a" 1}"#,
            r#"{"a":1 "b":2}"#,
            r#"{"choices":{}}"#,
            r#"{"choices":[1]}"#,
            r#"{"choices":[{"delta":"x"}]}"#,
            r#"{a:1}"#,
        ] {
            assert!(scan(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn names_are_told_exactly_not_by_their_length_or_first_bytes() {
        // Every name the relay reads, next to keys of the same length or prefix that
        // are not it: only the exact name (or its escaped spelling) counts.
        for (k, name) in [
            ("id", Name::Id),
            ("model", Name::Model),
            ("usage", Name::Usage),
            ("error", Name::Error),
            ("delta", Name::Delta),
            ("created", Name::Created),
            ("choices", Name::Choices),
            ("content", Name::Content),
            ("tool_calls", Name::ToolCalls),
            ("finish_reason", Name::FinishReason),
            ("index", Name::Index),
            ("reasoning", Name::Reasoning),
            ("reasoning_content", Name::Reasoning),
            ("indexes", Name::Other),
            ("reasoning_contents", Name::Other),
            ("mo\\u0064el", Name::Model),
            ("\\u0069d", Name::Id),
            ("ix", Name::Other),
            ("Id", Name::Other),
            ("models", Name::Other),
            ("mode", Name::Other),
            ("modeL", Name::Other),
            ("usagE", Name::Other),
            ("errors", Name::Other),
            ("deltas", Name::Other),
            ("creates", Name::Other),
            ("choicex", Name::Other),
            ("contents", Name::Other),
            ("tool_call", Name::Other),
            ("tool_callz", Name::Other),
            ("finish_reasons", Name::Other),
            ("finish_reasoN", Name::Other),
            ("", Name::Other),
            ("mo\\u0064els", Name::Other),
        ] {
            let text = format!("\"{k}\"");
            let escaped = k.contains('\\');
            assert_eq!(Name::of(Key(text.as_bytes(), escaped)), name, "{text}");
        }
    }

    #[test]
    fn numbers_and_literals_are_read_to_their_end_and_checked() {
        let c = scan(r#"{"created":17e3,"x":-1.5E+2,"y":true,"z":[0],"id":null}"#).unwrap();
        assert_eq!(c.created, Some(11..15));
        assert_eq!(c.id, None);
        assert!(scan(r#"{"created":17}"#).is_ok());
        assert!(scan(r#"{"created":17 }"#).is_ok());
        for bad in [
            r#"{"created":17x}"#,
            r#"{"created":17"}"#,
            r#"{"created":1:2}"#,
            r#"{"created":nul}"#,
            r#"{"created":nulls}"#,
            r#"{"created":17"#,
            r#"{"created":-"#,
        ] {
            assert!(scan(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn each_refusal_names_its_reason() {
        for (bad, why) in [
            ("[1]", "it is not a JSON object"),
            (r#"{"a":tru}"#, "a value is not JSON"),
            (r#"{"a":17x}"#, "a value is not JSON"),
            (r#"{"a":1}x"#, "there is text after the object"),
            (r#"{"a" 1}"#, "a key is not followed by `:`"),
            (r#"{"a":1 "b":2}"#, "members are not separated by `,`"),
            (r#"{a:1}"#, "a member does not start with a key"),
            (r#"{"a"#, "the event ends inside a key"),
            (r#"{"a":"#, "the event ends inside a value"),
            (r#"{"a":"x"#, "the event ends inside a value"),
            (r#"{"a":1"#, "the event ends inside an object"),
            (r#"{"choices":{}}"#, "`choices` is not a list"),
            (
                r#"{"choices":[1]}"#,
                "an element of `choices` is not an object",
            ),
            (r#"{"choices":[{}"#, "the event ends inside a value"),
            (
                r#"{"choices":[{} {}]}"#,
                "elements of a list are not separated by `,`",
            ),
            (r#"{"choices":[{"delta":"x"}]}"#, "`delta` is not an object"),
        ] {
            assert_eq!(scan(bad).err(), Some(why), "{bad}");
        }
    }

    #[test]
    fn agrees_with_serde_on_which_members_are_present() {
        // Random chunks built from the members the relay reads, null or not, in any
        // order, with whitespace: the scan finds what serde_json finds.
        let mut seed = 0x9e3779b97f4a7c15u64;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let values = [r#"null"#, r#""x""#, r#"{"k":[1,{"a":"}"}]}"#, "12", r#""""#];
        for _ in 0..500 {
            let mut members = Vec::new();
            for key in ["id", "model", "usage", "error", "created", "other"] {
                if next() % 3 != 0 {
                    members.push(format!("\"{key}\" : {}", values[(next() % 5) as usize]));
                }
            }
            let content = values[(next() % 5) as usize];
            members.push(format!(
                r#""choices":[{{"delta":{{"content":{content}}},"finish_reason":{}}}]"#,
                values[(next() % 2) as usize]
            ));
            let n = members.len();
            members.swap(0, (next() as usize) % n);
            let text = format!("{{ {} }}", members.join(" ,"));
            let c = scan(&text).unwrap();
            let v: serde_json::Value = serde_json::from_str(&text).unwrap();
            let present = |k: &str| v.get(k).is_some_and(|x| !x.is_null());
            assert_eq!(c.usage.is_some(), present("usage"), "{text}");
            assert_eq!(c.error.is_some(), present("error"), "{text}");
            assert_eq!(c.id.is_some(), present("id"), "{text}");
            assert_eq!(c.model.is_some(), v.get("model").is_some(), "{text}");
            let d = &v["choices"][0]["delta"]["content"];
            assert_eq!(
                c.choices[0].content.is_some(),
                !d.is_null() && d != "",
                "{text}"
            );
            let out = rewrite(&text, true);
            let w: serde_json::Value = serde_json::from_str(&out).unwrap();
            assert_eq!(w["model"], "gpt-4o", "{out}");
            assert!(w.get("usage").is_none(), "{out}");
            let mut v = v;
            v.as_object_mut().unwrap().remove("usage");
            v["model"] = "gpt-4o".into();
            assert_eq!(w, v, "{text}");
        }
    }

    /// Scans each of `chunks` in turn with one scanner (the template path where it
    /// applies) and with a fresh one (always the full scan): the same result, or the
    /// same error, every time. Returns how many took the template path.
    fn agree(chunks: &[Vec<u8>]) -> usize {
        let mut kept = ChunkScan::default();
        let mut hits = 0;
        for b in chunks {
            let had_template = !kept.template.is_empty();
            let mut fresh = ChunkScan::default();
            let want = fresh.scan(b).map(|()| format!("{fresh:?}"));
            let fast = kept.rescan(b);
            if !fast {
                kept.forget();
            }
            let got = if fast {
                Ok(format!("{kept:?}"))
            } else {
                kept.scan(b).map(|()| format!("{kept:?}"))
            };
            assert_eq!(got, want, "{}", String::from_utf8_lossy(b));
            hits += usize::from(fast && had_template);
        }
        hits
    }

    /// A reasoning piece that becomes empty (or text again) from one chunk to the
    /// next is read from the template as the full scan reads it.
    #[test]
    fn reasoning_that_empties_is_told_on_the_template_path() {
        let chunk = |r: &str| {
            format!(r#"{{"id":"c","model":"m","choices":[{{"index":0,"delta":{{"content":null,"reasoning_content":{r}}},"finish_reason":null}}]}}"#)
                .into_bytes()
        };
        let chunks = [
            chunk(r#""think""#),
            chunk(r#""""#),
            chunk(r#""more""#),
            chunk("null"),
        ];
        assert_eq!(agree(&chunks), 2, "two chunks read from the template");
        let mut c = ChunkScan::default();
        let seen: Vec<bool> = chunks
            .iter()
            .map(|b| {
                c.scan(b).unwrap();
                c.choices[0].reasoning
            })
            .collect();
        assert_eq!(seen, [true, false, true, false]);
    }

    fn fixture_chunks(name: &str) -> Vec<Vec<u8>> {
        let path = format!(
            "{}/tests/fixtures/provider-wire/{name}",
            env!("CARGO_MANIFEST_DIR")
        );
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
        text.lines()
            .map(|l| l.strip_prefix("data: ").unwrap_or(l))
            .filter(|l| l.starts_with('{'))
            .map(|l| l.as_bytes().to_vec())
            .collect()
    }

    /// The recorded streams of real providers, chunk after chunk: the template
    /// path gives what the full scan gives, and takes most of OpenAI's chunks
    /// (whose `obfuscation` differs in each).
    #[test]
    fn the_template_path_agrees_with_the_full_scan() {
        for name in [
            "openai/openai-text.chunks.txt",
            "openai-compatible/deepseek-tool-call.chunks.txt",
            "openai-compatible/groq-tool-call.chunks.txt",
            "openai-compatible/mistral-incremental-tool-call.chunks.txt",
            "openai-compatible/xai-tool-call.chunks.txt",
            "openai-compatible/anthropic-fallback-tool-call.sse",
        ] {
            let chunks = fixture_chunks(name);
            assert!(chunks.len() > 2, "{name}");
            let hits = agree(&chunks);
            if name.starts_with("openai/") {
                assert!(
                    hits * 2 > chunks.len(),
                    "{name}: {hits} of {}",
                    chunks.len()
                );
            }
        }
    }

    #[test]
    fn the_template_path_follows_lengths_escapes_and_emptied_content() {
        let chunk = |content: &str, pad: &str| {
            format!(r#"{{"id":"c","model":"m","choices":[{{"index":0,"delta":{{"content":{content}}},"finish_reason":null}}],"usage":null,"obfuscation":"{pad}"}}"#)
                .into_bytes()
        };
        let chunks = [
            chunk(r#""a""#, "x"),
            chunk(r#""longer text""#, "xyz"),
            chunk(r#""q\"uote\\""#, ""),
            chunk(r#""""#, "p"),
            chunk(r#""back""#, "p"),
            chunk("null", "p"),
            chunk(r#""\u00e9""#, "pp"),
            chunk(r#""cut"#, "p"),
            chunk(r#""a""#, "x"),
        ];
        let hits = agree(&chunks);
        // The null and the chunk after it, and the cut one and the one after it,
        // are scanned in full.
        assert_eq!(hits, 4);
        let mut s = ChunkScan::default();
        s.scan(&chunks[0]).unwrap();
        s.scan(&chunks[1]).unwrap();
        let mut out = bytes::BytesMut::new();
        s.write(&chunks[1], br#""gpt""#, UsageEdit::Drop, &mut out);
        assert_eq!(
            &out[..],
            br#"{"id":"c","model":"gpt","choices":[{"index":0,"delta":{"content":"longer text"},"finish_reason":null}],"obfuscation":"xyz"}"#
        );
    }

    #[test]
    fn common_prefix_is_the_length_of_the_equal_start() {
        let naive = |a: &[u8], b: &[u8]| a.iter().zip(b).take_while(|(x, y)| x == y).count();
        for n in 0..100usize {
            let a: Vec<u8> = (0..n).map(|i| (i * 7 % 251) as u8).collect();
            assert_eq!(common_prefix(&a, &a), n);
            for m in 0..=n {
                assert_eq!(common_prefix(&a, &a[..m]), m, "n {n}, prefix {m}");
            }
            for at in 0..n {
                let mut b = a.clone();
                b[at] ^= 0x20;
                assert_eq!(common_prefix(&a, &b), at, "n {n}, differs at {at}");
                b.push(1);
                assert_eq!(common_prefix(&b, &a), naive(&b, &a));
            }
        }
    }

    proptest::proptest! {
        /// Any edit of a chunk (bytes replaced, inserted or removed anywhere, string
        /// values rewritten) scans alike on the template path and in full.
        #[test]
        fn any_edit_scans_alike_on_both_paths(
            base in 0usize..3,
            edits in proptest::collection::vec(
                (0usize..400, proptest::sample::select(&b"\"\\{}[],:0a n\xc3"[..]), 0u8..3),
                0..4,
            ),
            texts in proptest::collection::vec("[a-z\"\\\\ ]{0,12}", 1..4),
        ) {
            let bases = [
                r#"{"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"hi"},"logprobs":null,"finish_reason":null}],"usage":null,"obfuscation":"ab"}"#,
                r#"{"id":"c","model":"m","choices":[{"delta":{"role":"assistant","content":""},"finish_reason":"stop"},{"delta":{"content":"x"}}],"error":null}"#,
                r#"{"choices":[],"usage":{"prompt_tokens":1},"model":"m","model":"n"}"#,
            ];
            let mut chunks = vec![bases[base].as_bytes().to_vec()];
            for t in &texts {
                // String values rewritten: "hi" and "ab" and "x" replaced.
                let escaped = serde_json::to_string(t).unwrap();
                let b = bases[base]
                    .replace(r#""hi""#, &escaped)
                    .replace(r#""ab""#, &escaped)
                    .replace(r#""x""#, &escaped);
                chunks.push(b.into_bytes());
            }
            let mut edited = chunks.last().unwrap().clone();
            for (at, byte, how) in edits {
                let at = at % (edited.len() + 1);
                match how {
                    0 if at < edited.len() => edited[at] = byte,
                    1 => edited.insert(at, byte),
                    _ if at < edited.len() => {
                        edited.remove(at);
                    }
                    _ => {}
                }
            }
            chunks.push(edited);
            chunks.push(bases[base].as_bytes().to_vec());
            agree(&chunks);
        }
    }

    proptest::proptest! {
        /// A stream's chunks read through [`ChunkScan::scan`] (the template path
        /// where it applies, a full scan where not, a failed chunk, a chunk over
        /// the template cap) give what a fresh scan of each chunk alone gives, and
        /// after each chunk read the template is that chunk.
        #[test]
        fn chunks_read_in_turn_scan_as_each_alone(
            steps in proptest::collection::vec(
                (0u8..6, "[a-z\"\\\\ ]{0,10}", 0usize..300),
                1..12,
            ),
        ) {
            let chunk = |id: &str, content: &str, pad: &str| {
                let q = |t: &str| serde_json::to_string(t).unwrap();
                format!(
                    r#"{{"id":{},"object":"chat.completion.chunk","created":1,"model":"m","choices":[{{"index":0,"delta":{{"content":{}}},"finish_reason":null}}],"usage":null,"obfuscation":{}}}"#,
                    q(id),
                    q(content),
                    q(pad)
                )
                .into_bytes()
            };
            let mut kept = ChunkScan::new();
            let mut last = chunk("c", "hi", "ab");
            for (kind, text, at) in steps {
                let b = match kind {
                    // The same bytes again.
                    0 => last.clone(),
                    // One value changed, or three at once.
                    1 => chunk("c", &text, "ab"),
                    2 => chunk(&text, &text, &text),
                    // Cut short (the template's prefix), or one byte changed.
                    3 => last[..at.min(last.len())].to_vec(),
                    4 => {
                        let mut b = last.clone();
                        let byte = text.bytes().next().unwrap_or(b'{');
                        match b.len() {
                            0 => b.push(byte),
                            n => b[at % n] = byte,
                        }
                        b
                    }
                    // Over the template cap.
                    _ => chunk("c", &"x".repeat(MAX_TEMPLATE_BYTES), &text),
                };
                let mut fresh = ChunkScan::default();
                let want = fresh.scan(&b).map(|()| format!("{fresh:?}"));
                let got = kept.scan(&b).map(|()| format!("{kept:?}"));
                proptest::prop_assert_eq!(&got, &want);
                if got.is_ok() && b.len() <= MAX_TEMPLATE_BYTES {
                    proptest::prop_assert_eq!(&kept.template, &b);
                }
                last = b;
            }
        }
    }

    /// A chunk over the template cap is scanned in full and not kept, so a large
    /// one does not hold its size for the rest of the stream.
    #[test]
    fn a_large_chunk_is_not_kept_as_the_template() {
        let small = br#"{"id":"c","choices":[{"delta":{"content":"a"}}]}"#.to_vec();
        let big = format!(
            r#"{{"id":"c","choices":[{{"delta":{{"content":"{}"}}}}]}}"#,
            "x".repeat(MAX_TEMPLATE_BYTES)
        )
        .into_bytes();
        let mut s = ChunkScan::default();
        s.scan(&small).unwrap();
        assert!(!s.template.is_empty());
        s.scan(&big).unwrap();
        assert_eq!(s.template.capacity(), 0);
        assert_eq!(agree(&[small.clone(), big, small.clone(), small]), 1);
    }
}
