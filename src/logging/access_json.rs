//! The JSON formatter of the access lines: the same object `tracing-subscriber`'s
//! JSON format writes (`--log-format json`, and every line of the access-log file),
//! serialized straight into a buffer.
//!
//! Why not the stock formatter: it serializes through an adaptor that turns every
//! small `io::Write` call of `serde_json` (a quote, a key, a colon) into a UTF-8
//! check and a `fmt::Write` call, a few dozen per field. For the access line, one
//! per request with about 25 fields, that was 19% of the gateway's instructions per
//! request in the load benchmark (`benches/load/callgrind.sh`). This formatter makes
//! the same `serde_json` calls in the same order into a reused byte buffer and hands
//! the whole line over once, so its output is the stock one byte for byte (a test
//! checks it against the stock formatter). Events of other targets go to the stock
//! formatter.

use std::cell::RefCell;
use std::fmt;

use serde::ser::{SerializeMap, SerializeSeq, Serializer as _};
use tracing::field::{Field, Visit};
use tracing::{Event, Subscriber};
use tracing_subscriber::fmt::format::{Format, Json, Writer};
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields, FormattedFields};
use tracing_subscriber::registry::{LookupSpan, SpanRef};

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
            writer.write_str(std::str::from_utf8(buf).map_err(|_| fmt::Error)?)
        })
    }
}

/// The object of `tracing-subscriber`'s JSON format with its defaults (timestamp,
/// level, fields, target, the current span and the span list), in its order.
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
    let mut ser = serde_json::Serializer::new(buf);
    let mut map = ser.serialize_map(None)?;
    map.serialize_entry("timestamp", &Timestamp(std::time::SystemTime::now()))?;
    map.serialize_entry("level", meta.level().as_str())?;
    map.serialize_entry("fields", &Fields(event))?;
    map.serialize_entry("target", meta.target())?;
    let current = event
        .parent()
        .and_then(|id| ctx.span(id))
        .or_else(|| ctx.lookup_current());
    if let Some(span) = &current {
        map.serialize_entry("span", &SpanFields::<S, N>(span, std::marker::PhantomData))?;
        map.serialize_entry("spans", &SpanList::<S, N>(ctx))?;
    }
    SerializeMap::end(map)
}

/// The event's fields, as `tracing-serde` writes them: strings and numbers as
/// themselves, everything else through `Debug` as a string.
struct Fields<'a>(&'a Event<'a>);

impl serde::Serialize for Fields<'_> {
    fn serialize<Z: serde::Serializer>(&self, s: Z) -> Result<Z::Ok, Z::Error> {
        let map = s.serialize_map(Some(self.0.fields().count()))?;
        let mut v = FieldVisitor { map, state: Ok(()) };
        self.0.record(&mut v);
        v.state?;
        v.map.end()
    }
}

struct FieldVisitor<M: SerializeMap> {
    map: M,
    state: Result<(), M::Error>,
}

impl<M: SerializeMap> Visit for FieldVisitor<M> {
    fn record_bool(&mut self, field: &Field, value: bool) {
        if self.state.is_ok() {
            self.state = self.map.serialize_entry(field.name(), &value);
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        if self.state.is_ok() {
            self.state = self
                .map
                .serialize_entry(field.name(), &format_args!("{value:?}"));
        }
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        if self.state.is_ok() {
            self.state = self.map.serialize_entry(field.name(), &value);
        }
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        if self.state.is_ok() {
            self.state = self.map.serialize_entry(field.name(), &value);
        }
    }

    fn record_f64(&mut self, field: &Field, value: f64) {
        if self.state.is_ok() {
            self.state = self.map.serialize_entry(field.name(), &value);
        }
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        if self.state.is_ok() {
            self.state = self.map.serialize_entry(field.name(), value);
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
        let sink = Sink::default();
        let layer = tracing_subscriber::fmt::layer()
            .json()
            .event_format(format)
            .with_writer(sink.clone());
        let sub = tracing_subscriber::registry().with(layer);
        tracing::subscriber::with_default(sub, || {
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
                "access"
            );
        });
        let out = sink.0.lock().unwrap().clone();
        String::from_utf8(out).unwrap()
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
}
