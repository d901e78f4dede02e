//! The JSON formatter of the access lines: the same object `tracing-subscriber`'s
//! JSON format writes (`--log-format json`, and every line of the access-log file),
//! serialized straight into a buffer.
//!
//! Why not the stock formatter: it serializes through an adaptor that turns every
//! small `io::Write` call of `serde_json` (a quote, a key, a colon) into a UTF-8
//! check and a `fmt::Write` call, a few dozen per field. For the access line, one
//! per request with about 35 fields, that was 19% of the gateway's instructions per
//! request in the load benchmark (`benches/load/callgrind.sh`). This formatter writes
//! the same object into a reused byte buffer and hands the whole line over once: the
//! structure by hand, strings that need no escaping copied whole, everything else
//! (escaped strings, numbers, spans) through `serde_json` itself, so its output is the
//! stock one byte for byte (tests check it against the stock formatter, on fixed and
//! random strings). Events of other targets go to the stock formatter.

use std::cell::RefCell;
use std::fmt;
use std::io::Write as _;

use serde::ser::{SerializeMap, SerializeSeq};
use tracing::field::{Field, Visit};
use tracing::{Event, Subscriber};
use tracing_subscriber::fmt::format::{Format, Json, Writer};
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields, FormattedFields};
use tracing_subscriber::registry::{LookupSpan, SpanRef};

use crate::json_text::needs_escape;

/// The JSON event format: access lines ([`super::ACCESS_TARGET`]) serialized here,
/// every other event by `tracing-subscriber`'s own JSON format.
#[derive(Debug)]
pub(super) struct AccessJson {
    stock: Format<Json>,
}

impl Default for AccessJson {
    fn default() -> Self {
        AccessJson {
            stock: Format::default().json(),
        }
    }
}

thread_local! {
    /// The line being written, reused across events of the thread.
    static LINE: RefCell<Vec<u8>> = RefCell::new(Vec::with_capacity(1024));
    /// The fields of the access line this thread is emitting, written before its
    /// event by [`with_fields`] (see [`Prerendered`]).
    static PRERENDERED: RefCell<Prerendered> = RefCell::new(Prerendered {
        fields: Vec::with_capacity(1024),
        ready: false,
    });
    /// The member keys of the access callsites this thread has written, each built
    /// once (see [`Keys`]).
    static KEYS: RefCell<Vec<Keys>> = const { RefCell::new(Vec::new()) };
}

/// Most callsites whose keys a thread keeps; past it the list starts over (the
/// access line has a handful of callsites).
const MAX_CALLSITES: usize = 16;

/// One callsite's member keys, `"name":` for each of its fields, escaped as
/// [`json_str`] escapes them, in field-index order. An access line has about 35
/// fields; writing each key afresh (the escape scan, a reserve and four pushes) was
/// 4.3k instructions per request under `benches/load/callgrind.sh`.
struct Keys {
    callsite: tracing::callsite::Identifier,
    /// The keys, one after another.
    bytes: Vec<u8>,
    /// Where key `i` ends in `bytes` (it starts where key `i - 1` ends).
    ends: Vec<u32>,
}

impl Keys {
    /// The keys of every field of `meta`'s callsite.
    fn new(meta: &tracing::Metadata<'_>) -> Result<Self, serde_json::Error> {
        let fields = meta.fields();
        let mut bytes = Vec::new();
        let mut ends = Vec::with_capacity(fields.len());
        for f in fields {
            json_str(&mut bytes, f.name())?;
            bytes.push(b':');
            ends.push(u32::try_from(bytes.len()).map_err(serde::ser::Error::custom)?);
        }
        Ok(Keys {
            callsite: meta.callsite(),
            bytes,
            ends,
        })
    }

    /// `"name":` of `field`, if it is one of this callsite's.
    fn get(&self, field: &Field) -> Option<&[u8]> {
        if field.callsite() != self.callsite {
            return None;
        }
        let i = field.index();
        let end = *self.ends.get(i)? as usize;
        let start = i.checked_sub(1).map_or(0, |p| self.ends[p] as usize);
        Some(&self.bytes[start..end])
    }
}

/// An access line's fields as JSON members, written by the gateway from the
/// request's facts while it emits the line's event ([`with_fields`]), for the JSON
/// format to copy in place of visiting the event's fields one by one.
///
/// Why: visiting is a dynamic call per field through `tracing`'s `Value` and
/// `Visit`, a lookup of the field's key and, for an `Option`, one more call: about
/// 200 instructions per field, and an access line has about 35 fields
/// (`benches/load/callgrind.sh`). The event still carries every field, so the text
/// format, the filters and any other layer see it as before; the members written
/// here are byte for byte what visiting writes (the gateway's test
/// `prerendered_access_fields_are_the_visited_ones` checks both on the same facts).
struct Prerendered {
    fields: Vec<u8>,
    /// `fields` belong to the access event being emitted now.
    ready: bool,
}

/// Largest pre-rendered fields used (64 KiB): beyond it (bodies logged, and large)
/// the line's fields are visited as before, and the buffer is not kept.
const MAX_PRERENDERED: usize = 64 * 1024;

/// Emits an access line: when a JSON layer may format it (`json`), `render` first
/// writes its fields into the thread's reused buffer; then `emit` sends the event,
/// and [`AccessJson`] copies those fields instead of visiting the event's. Without
/// `json`, from inside `render`, or while the thread's locals are being torn down,
/// `emit` runs alone. A call from inside `emit` (no access line makes one) renders
/// again, and its `Done` marks the buffer used, so the outer event is visited.
///
/// The contract: `emit` sends exactly one event with the access target, and
/// nothing else on this thread sends one between `render` and it (the JSON layer
/// copies the fields into the next access event it formats on the thread).
pub(super) fn with_fields(json: bool, render: impl FnOnce(&mut Fields<'_>), emit: impl FnOnce()) {
    if !json {
        return emit();
    }
    let rendered = PRERENDERED.try_with(|cell| {
        let Ok(mut slot) = cell.try_borrow_mut() else {
            return false;
        };
        let slot = &mut *slot;
        slot.fields.clear();
        render(&mut Fields {
            buf: &mut slot.fields,
            first: true,
        });
        slot.ready = slot.fields.len() <= MAX_PRERENDERED;
        true
    });
    if rendered != Ok(true) {
        return emit();
    }
    // Reset even if `emit` unwinds, so no later access event copies these fields.
    let _done = Done;
    emit();
}

/// Marks the thread's pre-rendered fields used when dropped (and drops a buffer
/// grown past [`MAX_PRERENDERED`]).
struct Done;

impl Drop for Done {
    fn drop(&mut self) {
        let _ = PRERENDERED.try_with(|cell| {
            if let Ok(mut slot) = cell.try_borrow_mut() {
                slot.ready = false;
                if slot.fields.capacity() > MAX_PRERENDERED {
                    slot.fields = Vec::with_capacity(1024);
                }
            }
        });
    }
}

/// Writes an access line's fields as JSON members, as [`FieldVisitor`] writes them:
/// `"key":value`, comma separated, a `None` left out as `tracing` leaves out an
/// absent `Option`.
pub struct Fields<'b> {
    buf: &'b mut Vec<u8>,
    first: bool,
}

impl Fields<'_> {
    /// `"key":`. Keys are the event's field names, Rust identifiers: never escaped.
    ///
    /// Inlined, with the members' writers below, into the access line's renderer:
    /// each key is then a constant, copied without a `memcpy` call (35 keys a line).
    #[inline]
    fn key(&mut self, key: &'static str) {
        debug_assert!(!needs_escape(key.as_bytes()), "{key}");
        if !self.first {
            self.buf.push(b',');
        }
        self.first = false;
        self.buf.push(b'"');
        self.buf.extend_from_slice(key.as_bytes());
        self.buf.extend_from_slice(b"\":");
    }

    /// A string member (a `&str` field, or the text of a `%` field).
    #[inline]
    pub fn str(&mut self, key: &'static str, value: &str) {
        self.key(key);
        // Writing into a `Vec` cannot fail.
        let _ = json_str(self.buf, value);
    }

    /// A string member whose value is one of the gateway's fixed words (an enum's
    /// name, an error kind, a constant): copied between its quotes without the
    /// escape scan, which cost about 80 instructions per member
    /// (`benches/load/callgrind.sh`). Such words never need escaping (checked in
    /// debug builds, and by the access line's tests against the visited fields).
    #[inline]
    pub fn word(&mut self, key: &'static str, value: &'static str) {
        debug_assert!(!needs_escape(value.as_bytes()), "{value}");
        self.key(key);
        quoted(self.buf, value);
    }

    /// A word member ([`Fields::word`]), or none.
    #[inline]
    pub fn opt_word(&mut self, key: &'static str, value: Option<&'static str>) {
        if let Some(v) = value {
            self.word(key, v);
        }
    }

    /// A string member, or none.
    #[inline]
    pub fn opt_str(&mut self, key: &'static str, value: Option<&str>) {
        if let Some(v) = value {
            self.str(key, v);
        }
    }

    /// An unsigned integer member (`tracing` records every unsigned type as a `u64`).
    #[inline]
    pub fn u64(&mut self, key: &'static str, value: u64) {
        self.key(key);
        self.buf
            .extend_from_slice(itoa::Buffer::new().format(value).as_bytes());
    }

    /// An unsigned integer member, or none.
    #[inline]
    pub fn opt_u64(&mut self, key: &'static str, value: Option<u64>) {
        if let Some(v) = value {
            self.u64(key, v);
        }
    }

    /// A float member, as `serde_json` writes it (a non-finite one as `null`).
    #[inline]
    pub fn f64(&mut self, key: &'static str, value: f64) {
        self.key(key);
        let _ = serde_json::to_writer(&mut *self.buf, &value);
    }

    /// A float member, or none.
    #[inline]
    pub fn opt_f64(&mut self, key: &'static str, value: Option<f64>) {
        if let Some(v) = value {
            self.f64(key, v);
        }
    }

    /// A boolean member.
    #[inline]
    pub fn bool(&mut self, key: &'static str, value: bool) {
        self.key(key);
        self.buf
            .extend_from_slice(if value { b"true" } else { b"false" });
    }
}

impl<S, N> FormatEvent<S, N> for AccessJson
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'w> FormatFields<'w> + 'static,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        if event.metadata().target() != super::ACCESS_TARGET {
            return self.stock.format_event(ctx, writer, event);
        }
        LINE.with(|line| {
            // A nested event (none is logged while formatting) gets its own buffer.
            let mut own = Vec::new();
            let mut borrowed = line.try_borrow_mut();
            let buf = match borrowed.as_mut() {
                Ok(b) => &mut **b,
                Err(_) => &mut own,
            };
            buf.clear();
            write_event::<S, N>(buf, ctx, event).map_err(|_| fmt::Error)?;
            buf.push(b'\n');
            writer.write_str(simdutf8::basic::from_utf8(buf).map_err(|_| fmt::Error)?)
        })
    }
}

/// The object of `tracing-subscriber`'s JSON format with its defaults (timestamp,
/// level, fields, target, the current span and the span list), in its order.
///
/// The top level and the event's fields are written here directly: a string that
/// needs no escaping (every key, and nearly every value of an access line) is copied
/// whole between its quotes, where `serde_json` looks each byte up in its escape
/// table; one that does is escaped by `serde_json` itself, so the bytes are the same
/// either way. Spans, rare on access lines, go through `serde_json` as before.
fn write_event<S, N>(
    buf: &mut Vec<u8>,
    ctx: &FmtContext<'_, S, N>,
    event: &Event<'_>,
) -> Result<(), serde_json::Error>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'w> FormatFields<'w> + 'static,
{
    let meta = event.metadata();
    buf.extend_from_slice(b"{\"timestamp\":\"");
    push_timestamp(buf, std::time::SystemTime::now()).map_err(serde_json::Error::io)?;
    buf.extend_from_slice(b"\",\"level\":");
    // A level's name and the access target are plain words: no escape scan.
    quoted(buf, meta.level().as_str());
    buf.extend_from_slice(b",\"fields\":{");
    let copied = PRERENDERED.try_with(|cell| match cell.try_borrow() {
        Ok(slot) if slot.ready => {
            buf.extend_from_slice(&slot.fields);
            true
        }
        _ => false,
    });
    if copied != Ok(true) {
        visit_fields(buf, meta, event)?;
    }
    buf.extend_from_slice(b"},\"target\":");
    if meta.target() == super::ACCESS_TARGET {
        quoted(buf, meta.target());
    } else {
        json_str(buf, meta.target())?;
    }
    let current = event
        .parent()
        .and_then(|id| ctx.span(id))
        .or_else(|| ctx.lookup_current());
    if let Some(span) = &current {
        buf.extend_from_slice(b",\"span\":");
        serde_json::to_writer(
            &mut *buf,
            &SpanFields::<S, N>(span, std::marker::PhantomData),
        )?;
        buf.extend_from_slice(b",\"spans\":");
        serde_json::to_writer(&mut *buf, &SpanList::<S, N>(ctx))?;
    }
    buf.push(b'}');
    Ok(())
}

/// Writes the event's fields by visiting them ([`FieldVisitor`]), with the keys of
/// its callsite from the thread's cache.
fn visit_fields(
    buf: &mut Vec<u8>,
    meta: &tracing::Metadata<'_>,
    event: &Event<'_>,
) -> Result<(), serde_json::Error> {
    KEYS.with(|cell| {
        // A nested event (none is logged while formatting) writes its keys afresh.
        let mut cached = cell.try_borrow_mut().ok();
        let keys = match cached.as_deref_mut() {
            Some(list) => {
                let at = list.iter().position(|k| k.callsite == meta.callsite());
                let at = match at {
                    Some(at) => at,
                    None => {
                        if list.len() == MAX_CALLSITES {
                            list.clear();
                        }
                        list.push(Keys::new(meta)?);
                        list.len() - 1
                    }
                };
                Some(&list[at])
            }
            None => None,
        };
        let mut v = FieldVisitor {
            buf: &mut *buf,
            keys,
            first: true,
            state: Ok(()),
        };
        event.record(&mut v);
        v.state
    })
}

/// Writes `s` as a JSON string, byte for byte as `serde_json` does
/// ([`crate::json_text::write_str`]); never fails (the `Result` composes with the
/// writers around it).
fn json_str(buf: &mut Vec<u8>, s: &str) -> Result<(), serde_json::Error> {
    crate::json_text::write_str(buf, s);
    Ok(())
}

/// Writes `s`, which needs no escaping ([`needs_escape`]), between quotes.
#[inline]
fn quoted(buf: &mut Vec<u8>, s: &str) {
    buf.reserve(s.len() + 2);
    buf.push(b'"');
    buf.extend_from_slice(s.as_bytes());
    buf.push(b'"');
}

/// Writes the event's fields as the members of a JSON object, as `tracing-serde`
/// writes them: strings and numbers as themselves, everything else through `Debug`
/// as a string.
struct FieldVisitor<'b> {
    buf: &'b mut Vec<u8>,
    /// The event's callsite's keys, when the thread's cache could be borrowed.
    keys: Option<&'b Keys>,
    /// No member written yet (no comma before the next).
    first: bool,
    state: Result<(), serde_json::Error>,
}

impl FieldVisitor<'_> {
    /// Writes the separator and `"name":`; false once an earlier field failed.
    fn key(&mut self, field: &Field) -> bool {
        if self.state.is_err() {
            return false;
        }
        if !self.first {
            self.buf.push(b',');
        }
        self.first = false;
        if let Some(key) = self.keys.and_then(|k| k.get(field)) {
            self.buf.extend_from_slice(key);
            return true;
        }
        self.state = json_str(self.buf, field.name());
        self.buf.push(b':');
        self.state.is_ok()
    }

    /// Writes a number or boolean as `serde_json` does (floats through `ryu`,
    /// non-finite ones as `null`).
    fn value<T: serde::Serialize>(&mut self, field: &Field, value: T) {
        if self.key(field) {
            self.state = serde_json::to_writer(&mut *self.buf, &value);
        }
    }
}

impl Visit for FieldVisitor<'_> {
    fn record_bool(&mut self, field: &Field, value: bool) {
        self.value(field, value);
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        if !self.key(field) {
            return;
        }
        // Formatted in place after the opening quote; escaped afterwards in the rare
        // case the text needs it.
        let start = self.buf.len();
        self.buf.push(b'"');
        if let Err(e) = write!(self.buf, "{value:?}") {
            self.state = Err(serde_json::Error::io(e));
            return;
        }
        if needs_escape(&self.buf[start + 1..]) {
            let text = self.buf.split_off(start + 1);
            self.buf.truncate(start);
            self.state = serde_json::to_writer(&mut *self.buf, &*String::from_utf8_lossy(&text));
        } else {
            self.buf.push(b'"');
        }
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        self.value(field, value);
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        self.value(field, value);
    }

    fn record_f64(&mut self, field: &Field, value: f64) {
        self.value(field, value);
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        if self.key(field) {
            self.state = json_str(self.buf, value);
        }
    }
}

/// One span: its recorded fields (kept by the layer as JSON text, read back as a
/// map, so in key order, as the stock format does), then its name.
struct SpanFields<'a, 'b, S: for<'l> LookupSpan<'l>, N>(
    &'b SpanRef<'a, S>,
    std::marker::PhantomData<N>,
);

impl<S, N> serde::Serialize for SpanFields<'_, '_, S, N>
where
    S: for<'l> LookupSpan<'l>,
    N: for<'w> FormatFields<'w> + 'static,
{
    fn serialize<Z: serde::Serializer>(&self, s: Z) -> Result<Z::Ok, Z::Error> {
        let mut map = s.serialize_map(None)?;
        let ext = self.0.extensions();
        if let Some(data) = ext.get::<FormattedFields<N>>() {
            match serde_json::from_str::<serde_json::Value>(data) {
                Ok(serde_json::Value::Object(fields)) => {
                    for (k, v) in fields {
                        map.serialize_entry(&k, &v)?;
                    }
                }
                Ok(value) => {
                    map.serialize_entry("field", &value)?;
                    map.serialize_entry("field_error", "field was no a valid object")?;
                }
                Err(e) => map.serialize_entry("field_error", &e.to_string())?,
            }
        }
        map.serialize_entry("name", self.0.metadata().name())?;
        map.end()
    }
}

/// The spans of the thread's current scope, from the root.
struct SpanList<'a, 'b, S, N>(&'b FmtContext<'a, S, N>)
where
    S: Subscriber + for<'l> LookupSpan<'l>,
    N: for<'w> FormatFields<'w> + 'static;

impl<S, N> serde::Serialize for SpanList<'_, '_, S, N>
where
    S: Subscriber + for<'l> LookupSpan<'l>,
    N: for<'w> FormatFields<'w> + 'static,
{
    fn serialize<Z: serde::Serializer>(&self, s: Z) -> Result<Z::Ok, Z::Error> {
        let mut seq = s.serialize_seq(None)?;
        if let Some(leaf) = self.0.lookup_current() {
            for span in leaf.scope().from_root() {
                seq.serialize_element(&SpanFields::<S, N>(&span, std::marker::PhantomData))?;
            }
        }
        seq.end()
    }
}

/// A UTC time as the stock format writes it: `2026-12-02T06:02:35.123456Z`.
struct Timestamp(std::time::SystemTime);

impl serde::Serialize for Timestamp {
    fn serialize<Z: serde::Serializer>(&self, s: Z) -> Result<Z::Ok, Z::Error> {
        s.collect_str(self)
    }
}

impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Seconds and nanoseconds since the epoch, floored (times before it count
        // back), as `tracing-subscriber`'s own `DateTime` does.
        let (secs, nanos) = match self.0.duration_since(std::time::UNIX_EPOCH) {
            Ok(d) => (d.as_secs() as i64, d.subsec_nanos()),
            Err(e) => {
                let d = e.duration();
                match d.subsec_nanos() {
                    0 => (-(d.as_secs() as i64), 0),
                    n => (-(d.as_secs() as i64) - 1, 1_000_000_000 - n),
                }
            }
        };
        let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
        let (year, month, day) = civil_from_days(days);
        if year > 9999 {
            write!(f, "+{year}")?;
        } else if year < 0 {
            write!(f, "{year:05}")?;
        } else {
            write!(f, "{year:04}")?;
        }
        write!(
            f,
            "-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:06}Z",
            rem / 3600,
            rem % 3600 / 60,
            rem % 60,
            nanos / 1_000
        )
    }
}

/// Appends `t` as [`Timestamp`] writes it, digit by digit for the years 1970 to
/// 9999 (every clock a gateway runs on); other times through [`Timestamp`]'s
/// `Display`. The formatting machinery took 2.3k instructions per access line
/// (`benches/load/callgrind.sh`); the digits alone take a few dozen.
fn push_timestamp(buf: &mut Vec<u8>, t: std::time::SystemTime) -> std::io::Result<()> {
    let Ok(d) = t.duration_since(std::time::UNIX_EPOCH) else {
        return write!(buf, "{}", Timestamp(t));
    };
    let secs = d.as_secs();
    let (year, month, day) = civil_from_days((secs / 86_400) as i64);
    if year > 9999 {
        return write!(buf, "{}", Timestamp(t));
    }
    let rem = (secs % 86_400) as u32;
    let two = |v: u32| [b'0' + (v / 10) as u8, b'0' + (v % 10) as u8];
    let year = year as u32;
    let micros = d.subsec_micros();
    let mut out = [0u8; 27];
    out[..4].copy_from_slice(&[
        b'0' + (year / 1000) as u8,
        b'0' + (year / 100 % 10) as u8,
        b'0' + (year / 10 % 10) as u8,
        b'0' + (year % 10) as u8,
    ]);
    out[4] = b'-';
    out[5..7].copy_from_slice(&two(month));
    out[7] = b'-';
    out[8..10].copy_from_slice(&two(day));
    out[10] = b'T';
    out[11..13].copy_from_slice(&two(rem / 3600));
    out[13] = b':';
    out[14..16].copy_from_slice(&two(rem % 3600 / 60));
    out[16] = b':';
    out[17..19].copy_from_slice(&two(rem % 60));
    out[19] = b'.';
    let mut m = micros;
    for i in (20..26).rev() {
        out[i] = b'0' + (m % 10) as u8;
        m /= 10;
    }
    out[26] = b'Z';
    buf.extend_from_slice(&out);
    Ok(())
}

/// The proleptic Gregorian date of a day count since 1970-01-01 (H. Hinnant's
/// `civil_from_days`).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

/// What a subscriber with this JSON format writes while `emit` runs (tests).
#[cfg(test)]
pub(super) fn written(emit: impl FnOnce()) -> String {
    tests::written(AccessJson::default(), emit)
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use tracing_subscriber::fmt::MakeWriter;
    use tracing_subscriber::layer::SubscriberExt as _;

    use super::*;

    #[derive(Clone, Default)]
    struct Sink(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Sink {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl<'a> MakeWriter<'a> for Sink {
        type Writer = Sink;
        fn make_writer(&'a self) -> Sink {
            self.clone()
        }
    }

    /// What a JSON subscriber with event format `format` writes while `emit` runs.
    pub(in crate::logging) fn written<F>(format: F, emit: impl FnOnce()) -> String
    where
        F: for<'a> FormatEvent<
                tracing_subscriber::Registry,
                tracing_subscriber::fmt::format::JsonFields,
            > + Send
            + Sync
            + 'static,
    {
        let sink = Sink::default();
        let layer = tracing_subscriber::fmt::layer()
            .json()
            .event_format(format)
            .with_writer(sink.clone());
        let sub = tracing_subscriber::registry().with(layer);
        tracing::subscriber::with_default(sub, emit);
        let out = sink.0.lock().unwrap().clone();
        String::from_utf8(out).unwrap()
    }

    /// Lines written by a subscriber with `format`, for a few events inside a span.
    fn lines<F>(format: F) -> String
    where
        F: for<'a> FormatEvent<
                tracing_subscriber::Registry,
                tracing_subscriber::fmt::format::JsonFields,
            > + Send
            + Sync
            + 'static,
    {
        written(format, || {
            let outer = tracing::info_span!("request", id = "3f2b\"8c1e", n = 2);
            let _o = outer.enter();
            let inner = tracing::info_span!("inner");
            let _i = inner.enter();
            tracing::info!(
                target: "switchyard::access",
                request_id = "3f2b",
                key = Some("key-a"),
                org = None::<&str>,
                model = "a \"quoted\" name\n",
                attempts = %"ep@p:200:41",
                attempt_count = 1usize,
                status = 200u16,
                stream = false,
                latency_ms = 41.900001,
                cost_usd = 0.0,
                delta = -3i64,
                nan = f64::NAN,
                debug_escaped = ?"a \"debug\" value\t",
                display_quoted = %"say \"hi\"",
                quote_only = "say \"hi\"",
                backslash_only = "C:\\dir",
                plain = "caf\u{e9} \u{7f} \u{1f600}",
                empty = "",
                control = "\u{1}\u{1f}",
                big = u64::MAX,
                yes = true,
                inf = f64::INFINITY,
                "access"
            );
        })
    }

    #[test]
    fn access_lines_are_the_stock_json_format_byte_for_byte() {
        let stock = lines(Format::default().json());
        let fast = lines(AccessJson::default());
        // Timestamps differ by when each ran; everything after them must not.
        let cut = |s: &str| s.split_once(r#""level""#).unwrap().1.to_string();
        assert_eq!(cut(&fast), cut(&stock), "fast: {fast}\nstock: {stock}");
        assert!(fast.ends_with("}\n"), "{fast}");
        let v: serde_json::Value = serde_json::from_str(fast.trim()).unwrap();
        assert_eq!(v["span"]["name"], "inner");
        assert_eq!(v["spans"][0]["id"], "3f2b\"8c1e");
        assert_eq!(v["fields"]["attempts"], "ep@p:200:41");
    }

    /// The line `format` writes for one access event carrying `text` as a string, a
    /// `Debug` and a `Display` value.
    fn line_with<F>(format: F, text: &str) -> String
    where
        F: for<'a> FormatEvent<
                tracing_subscriber::Registry,
                tracing_subscriber::fmt::format::JsonFields,
            > + Send
            + Sync
            + 'static,
    {
        written(format, || {
            tracing::info!(
                target: "switchyard::access",
                model = text,
                debug = ?text,
                display = %text,
                "access"
            );
        })
    }

    /// Access events from many callsites, interleaved, twice over: more callsites
    /// than a thread keeps keys for, names that need escaping, and one callsite's
    /// fields recorded after another's.
    fn many_callsites() {
        macro_rules! site {
            ($($n:literal),*) => {$(
                tracing::info!(target: "switchyard::access", n = $n, "k\"{}" = "v", other = $n * 2, "access");
            )*};
        }
        for _ in 0..2 {
            site!(1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18);
            tracing::info!(target: "switchyard::access", other = 1, n = 2, "access");
        }
    }

    #[test]
    fn keys_kept_per_callsite_give_the_stock_lines_over_many_callsites() {
        let cut = |s: String| {
            s.lines()
                .map(|l| l.split_once(r#""level""#).unwrap().1.to_string())
                .collect::<Vec<_>>()
        };
        let stock = cut(written(Format::default().json(), many_callsites));
        let fast = cut(written(AccessJson::default(), many_callsites));
        assert_eq!(fast.len(), 38);
        assert_eq!(fast, stock);
        assert!(fast[0].contains(r#""k\"{}":"v""#), "{}", fast[0]);
    }

    #[test]
    fn random_strings_are_written_as_the_stock_format_writes_them() {
        let pool: Vec<char> = "ab \"\\/\u{0}\u{1}\u{8}\t\n\u{c}\r\u{1b}\u{1f}\u{7f}\u{80}\u{e9}\u{2028}\u{fffd}\u{1f600}"
            .chars()
            .collect();
        let mut x = 0x2545_f491_4f6c_dd1du64;
        for _ in 0..300 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let len = (x % 19) as usize;
            let text: String = (0..len)
                .map(|i| pool[((x >> (i * 3 % 60)) as usize) % pool.len()])
                .collect();
            let cut = |s: String| s.split_once(r#""level""#).unwrap().1.to_string();
            let stock = cut(line_with(Format::default().json(), &text));
            let fast = cut(line_with(AccessJson::default(), &text));
            assert_eq!(fast, stock, "{text:?}");
        }
    }

    #[test]
    fn timestamps_are_written_as_the_stock_format_writes_them() {
        use std::time::{Duration, UNIX_EPOCH};
        let at = |s: u64, n: u32| Timestamp(UNIX_EPOCH + Duration::new(s, n)).to_string();
        assert_eq!(at(0, 0), "1970-01-01T00:00:00.000000Z");
        assert_eq!(
            at(1_796_191_355, 123_456_789),
            "2026-12-02T06:02:35.123456Z"
        );
        assert_eq!(at(951_782_400, 0), "2000-02-29T00:00:00.000000Z");
        assert_eq!(
            at(4_107_542_399, 999_999_999),
            "2100-02-28T23:59:59.999999Z"
        );
        let before = Timestamp(UNIX_EPOCH - Duration::new(1, 500_000_000)).to_string();
        assert_eq!(before, "1969-12-31T23:59:58.500000Z");
    }

    #[test]
    fn timestamps_pushed_digit_by_digit_equal_the_display_ones() {
        use std::time::{Duration, UNIX_EPOCH};
        let mut state = 0x9e37_79b9_7f4a_7c15_u64;
        let mut next = || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let mut times: Vec<std::time::SystemTime> = (0..20_000)
            .map(|_| {
                UNIX_EPOCH
                    + Duration::new(next() % 260_000_000_000, (next() % 1_000_000_000) as u32)
            })
            .collect();
        // Day, year and century edges; the last second of 9999; beyond it; before 1970.
        for s in [
            0,
            59,
            86_399,
            86_400,
            951_782_399,
            951_782_400,
            253_402_300_799,
            253_402_300_800,
        ] {
            times.push(UNIX_EPOCH + Duration::new(s, 999_999_999));
        }
        times.push(UNIX_EPOCH - Duration::new(1, 500_000_000));
        for t in times {
            let mut buf = b"x".to_vec();
            push_timestamp(&mut buf, t).unwrap();
            assert_eq!(buf[1..], *Timestamp(t).to_string().as_bytes(), "{t:?}");
        }
    }
}
