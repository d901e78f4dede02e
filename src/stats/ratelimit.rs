//! Remaining rate-limit capacity from a provider's response headers (seed 000,
//! "Adaptive Weight Computation": C = min(r_remaining / r_limit, t_remaining / t_limit)).
//!
//! Sources: OpenAI, "Rate limits", headers `x-ratelimit-{limit,remaining,reset}-
//! {requests,tokens}` with resets written as Go durations (`6m0s`, `1.5s`, `20ms`);
//! Anthropic, "Rate limits", headers `anthropic-ratelimit-{requests,tokens,
//! input-tokens,output-tokens}-{limit,remaining,reset}` with RFC 3339 resets.
//!
//! And how long a provider asks to wait ([`retry_after`]): `retry-after-ms` (OpenAI
//! and Azure OpenAI send it with 429s), else `Retry-After` as delay-seconds or an
//! HTTP-date (RFC 9110, section 10.2.3).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use http::HeaderMap;

/// Longest wait a provider's `Retry-After` is taken at (longer ones are cut to it).
pub const MAX_RETRY_AFTER: Duration = Duration::from_secs(3600);

/// How long the provider asks us to wait before the next request, read at `now`:
/// `retry-after-ms` (milliseconds, fractions allowed), else `Retry-After` as
/// delay-seconds (fractions tolerated) or an HTTP-date (a date in the past is 0).
/// Cut to [`MAX_RETRY_AFTER`]; `None` when absent or unreadable.
pub fn retry_after(h: &HeaderMap, now: SystemTime) -> Option<Duration> {
    let text = |name: &str| h.get(name).and_then(|v| v.to_str().ok()).map(str::trim);
    let wait = if let Some(ms) = text("retry-after-ms").and_then(|v| v.parse::<f64>().ok()) {
        seconds(ms / 1e3)?
    } else {
        let v = text("retry-after")?;
        match v.parse::<f64>() {
            Ok(s) => seconds(s)?,
            Err(_) => {
                let at = httpdate::parse_http_date(v).ok()?;
                at.duration_since(now).unwrap_or(Duration::ZERO)
            }
        }
    };
    Some(wait.min(MAX_RETRY_AFTER))
}

/// `s` seconds as a duration; `None` for negative or non-finite values.
fn seconds(s: f64) -> Option<Duration> {
    (s.is_finite() && s >= 0.0).then(|| Duration::from_secs_f64(s.min(1e9)))
}

/// Capacity read from one response.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Capacity {
    /// C in [0, 1]: the smallest remaining/limit ratio among the limits reported.
    pub fraction: f64,
    /// When the binding limit resets (C reads as 1 after that), if reported.
    pub resets_in: Option<Duration>,
}

/// OpenAI's (limit, remaining, reset) header names, for requests and tokens.
const OPENAI: [(&str, &str, &str); 2] = [
    (
        "x-ratelimit-limit-requests",
        "x-ratelimit-remaining-requests",
        "x-ratelimit-reset-requests",
    ),
    (
        "x-ratelimit-limit-tokens",
        "x-ratelimit-remaining-tokens",
        "x-ratelimit-reset-tokens",
    ),
];

/// Anthropic's (limit, remaining, reset) header names.
const ANTHROPIC: [(&str, &str, &str); 4] = [
    (
        "anthropic-ratelimit-requests-limit",
        "anthropic-ratelimit-requests-remaining",
        "anthropic-ratelimit-requests-reset",
    ),
    (
        "anthropic-ratelimit-tokens-limit",
        "anthropic-ratelimit-tokens-remaining",
        "anthropic-ratelimit-tokens-reset",
    ),
    (
        "anthropic-ratelimit-input-tokens-limit",
        "anthropic-ratelimit-input-tokens-remaining",
        "anthropic-ratelimit-input-tokens-reset",
    ),
    (
        "anthropic-ratelimit-output-tokens-limit",
        "anthropic-ratelimit-output-tokens-remaining",
        "anthropic-ratelimit-output-tokens-reset",
    ),
];

fn num(h: &HeaderMap, name: &str) -> Option<f64> {
    h.get(name)?.to_str().ok()?.trim().parse::<f64>().ok()
}

fn text<'a>(h: &'a HeaderMap, name: &str) -> Option<&'a str> {
    h.get(name)?.to_str().ok().map(str::trim)
}

/// Whether `headers` hold any rate-limit field ([`capacity`] reads): most answers
/// carry none, which one pass over the names (a handful) tells, where the eighteen
/// lookups of [`capacity`] would hash each name.
fn reported(headers: &HeaderMap) -> bool {
    headers.keys().any(|k| {
        let k = k.as_str();
        k.starts_with("x-ratelimit-") || k.starts_with("anthropic-ratelimit-")
    })
}

/// Reads the capacity from `headers` at time `now`; `None` when the provider sent no
/// rate-limit headers (or only unusable ones).
pub fn capacity(headers: &HeaderMap, now: SystemTime) -> Option<Capacity> {
    reported(headers).then(|| read(headers, now)).flatten()
}

/// [`capacity`] now, with the time it was read at. The clock is read only for an
/// answer that holds a rate-limit field: the request path asks of every answer,
/// and a reading costs about 30 ns.
pub fn capacity_now(headers: &HeaderMap) -> Option<(Capacity, SystemTime)> {
    if !reported(headers) {
        return None;
    }
    let now = SystemTime::now();
    read(headers, now).map(|c| (c, now))
}

/// [`capacity`] without the look for rate-limit fields first.
fn read(headers: &HeaderMap, now: SystemTime) -> Option<Capacity> {
    let mut best: Option<Capacity> = None;
    let mut consider = |limit: Option<f64>, remaining: Option<f64>, reset: Option<Duration>| {
        let (Some(l), Some(r)) = (limit, remaining) else {
            return;
        };
        if l.is_nan() || l <= 0.0 || !r.is_finite() {
            return;
        }
        let fraction = (r / l).clamp(0.0, 1.0);
        if best.is_none_or(|b| fraction < b.fraction) {
            best = Some(Capacity {
                fraction,
                resets_in: reset,
            });
        }
    };
    // Header names are spelled out (no formatting): this runs on every response.
    for (limit, remaining, reset) in OPENAI {
        consider(
            num(headers, limit),
            num(headers, remaining),
            text(headers, reset).and_then(parse_go_duration),
        );
    }
    for (limit, remaining, reset) in ANTHROPIC {
        let reset = text(headers, reset)
            .and_then(parse_rfc3339)
            .map(|t| t.duration_since(now).unwrap_or(Duration::ZERO));
        consider(num(headers, limit), num(headers, remaining), reset);
    }
    best
}

/// Parses a Go-style duration as OpenAI sends it: `20ms`, `1.5s`, `6m0s`, `1h2m3.5s`.
pub fn parse_go_duration(s: &str) -> Option<Duration> {
    let mut total = 0.0f64;
    let mut rest = s.trim();
    if rest.is_empty() {
        return None;
    }
    while !rest.is_empty() {
        let num_end = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let value: f64 = rest[..num_end].parse().ok()?;
        rest = &rest[num_end..];
        let unit_end = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let scale = match &rest[..unit_end] {
            "h" => 3600.0,
            "m" => 60.0,
            "s" => 1.0,
            "ms" => 1e-3,
            "us" | "µs" => 1e-6,
            "ns" => 1e-9,
            _ => return None,
        };
        total += value * scale;
        rest = &rest[unit_end..];
    }
    (total.is_finite() && total >= 0.0).then(|| Duration::from_secs_f64(total))
}

/// Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's
/// `days_from_civil`).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// Parses an RFC 3339 timestamp (`2024-05-01T12:34:56Z`, optional fraction, `Z` or
/// `±hh:mm` offset).
pub fn parse_rfc3339(s: &str) -> Option<SystemTime> {
    let b = s.as_bytes();
    if b.len() < 20 || b[4] != b'-' || b[7] != b'-' || !matches!(b[10], b'T' | b't' | b' ') {
        return None;
    }
    let n = |r: std::ops::Range<usize>| -> Option<i64> { s.get(r)?.parse().ok() };
    let (y, mo, d, h, mi, se) = (
        n(0..4)?,
        n(5..7)?,
        n(8..10)?,
        n(11..13)?,
        n(14..16)?,
        n(17..19)?,
    );
    if !(1..=12).contains(&mo) || !(1..=31).contains(&d) || h > 23 || mi > 59 || se > 60 {
        return None;
    }
    let mut i = 19;
    let mut frac = 0.0;
    if b.get(i) == Some(&b'.') {
        let start = i;
        i += 1;
        while b.get(i).is_some_and(u8::is_ascii_digit) {
            i += 1;
        }
        frac = s.get(start..i)?.parse::<f64>().ok()?;
    }
    let offset = match b.get(i)? {
        b'Z' | b'z' if i + 1 == b.len() => 0,
        b'+' | b'-' if i + 6 == b.len() => {
            let sign = if b[i] == b'-' { -1 } else { 1 };
            sign * (n(i + 1..i + 3)? * 3600 + n(i + 4..i + 6)? * 60)
        }
        _ => return None,
    };
    let secs = days_from_civil(y, mo, d) * 86_400 + h * 3600 + mi * 60 + se - offset;
    let secs = u64::try_from(secs).ok()?;
    Some(UNIX_EPOCH + Duration::from_secs(secs) + Duration::from_secs_f64(frac))
}

#[cfg(test)]
mod tests {

    #[test]
    fn retry_after_reads_all_three_forms() {
        let now = UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        let with = |pairs: &[(&str, &str)]| retry_after(&headers(pairs), now);
        assert_eq!(with(&[]), None);
        assert_eq!(with(&[("retry-after", "2")]), Some(Duration::from_secs(2)));
        assert_eq!(
            with(&[("retry-after", "1.5")]),
            Some(Duration::from_millis(1500))
        );
        assert_eq!(
            with(&[("retry-after-ms", "250"), ("retry-after", "9")]),
            Some(Duration::from_millis(250)),
            "the precise header wins"
        );
        let date = httpdate::fmt_http_date(now + Duration::from_secs(30));
        assert_eq!(
            with(&[("retry-after", &date)]),
            Some(Duration::from_secs(30))
        );
        let past = httpdate::fmt_http_date(now - Duration::from_secs(30));
        assert_eq!(with(&[("retry-after", &past)]), Some(Duration::ZERO));
        assert_eq!(with(&[("retry-after", "-3")]), None);
        assert_eq!(with(&[("retry-after", "soon")]), None);
        assert_eq!(with(&[("retry-after", "99999999")]), Some(MAX_RETRY_AFTER));
    }

    use super::*;

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(
                http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                v.parse().unwrap(),
            );
        }
        h
    }

    #[test]
    fn go_durations() {
        assert_eq!(parse_go_duration("20ms"), Some(Duration::from_millis(20)));
        assert_eq!(parse_go_duration("1.5s"), Some(Duration::from_millis(1500)));
        assert_eq!(parse_go_duration("6m0s"), Some(Duration::from_secs(360)));
        assert_eq!(parse_go_duration("1h2m3s"), Some(Duration::from_secs(3723)));
        assert_eq!(parse_go_duration("soon"), None);
        assert_eq!(parse_go_duration(""), None);
    }

    #[test]
    fn rfc3339() {
        let t = parse_rfc3339("2026-11-29T14:20:00Z").unwrap();
        assert_eq!(
            t.duration_since(UNIX_EPOCH).unwrap().as_secs(),
            1_795_962_000
        );
        let t2 = parse_rfc3339("2026-11-29T15:20:00.5+01:00").unwrap();
        assert_eq!(
            t2.duration_since(UNIX_EPOCH).unwrap().as_millis(),
            1_795_962_000_500
        );
        assert!(parse_rfc3339("yesterday").is_none());
        assert!(parse_rfc3339("2026-13-01T00:00:00Z").is_none());
    }

    #[test]
    fn openai_capacity_is_the_smaller_ratio() {
        let h = headers(&[
            ("x-ratelimit-limit-requests", "100"),
            ("x-ratelimit-remaining-requests", "50"),
            ("x-ratelimit-reset-requests", "30s"),
            ("x-ratelimit-limit-tokens", "10000"),
            ("x-ratelimit-remaining-tokens", "1000"),
            ("x-ratelimit-reset-tokens", "6m0s"),
        ]);
        let c = capacity(&h, SystemTime::now()).unwrap();
        assert!((c.fraction - 0.1).abs() < 1e-12);
        assert_eq!(c.resets_in, Some(Duration::from_secs(360)));
    }

    #[test]
    fn anthropic_capacity() {
        let now = parse_rfc3339("2026-11-29T14:20:00Z").unwrap();
        let h = headers(&[
            ("anthropic-ratelimit-requests-limit", "50"),
            ("anthropic-ratelimit-requests-remaining", "5"),
            ("anthropic-ratelimit-requests-reset", "2026-11-29T14:20:30Z"),
        ]);
        let c = capacity(&h, now).unwrap();
        assert!((c.fraction - 0.1).abs() < 1e-12);
        assert_eq!(c.resets_in, Some(Duration::from_secs(30)));
    }

    #[test]
    fn no_headers_no_capacity() {
        assert!(capacity(&HeaderMap::new(), SystemTime::now()).is_none());
        let h = headers(&[
            ("x-ratelimit-limit-requests", "0"),
            ("x-ratelimit-remaining-requests", "0"),
        ]);
        assert!(capacity(&h, SystemTime::now()).is_none());
    }
}
