//! A quick reader of an OpenAI `usage` object (OpenAI API reference, "The chat
//! completion object", `usage`): the counts the gateway settles budgets and limits
//! with, read from the bytes without `serde_json`.
//!
//! Why: every answer's `usage` is read once more after the adapter has passed it on
//! (the budget and rate-limit settlement, and a stream's usage chunk), and
//! `serde_json`'s derived visitors took about 1,500 instructions for the load
//! benchmark's three counts (`benches/load/callgrind.sh`, 1.7% of a JSON request).
//! This reader handles the shape providers send, an object of non-negative integers
//! with two optional objects of integers (`prompt_tokens_details`,
//! `completion_tokens_details`), and answers [`Read::Unsure`] for anything else (a
//! float, a string, an escaped or repeated key, a nested list, malformed text); the
//! callers then read the value with `serde_json` as before, so the result is always
//! the one `serde_json` gives (tests hold both readers to it on random texts).

/// The counts of a `usage` object the reader understood. A count that is absent is
/// 0, as the callers' `#[serde(default)]` reads it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    /// `prompt_tokens` (input tokens).
    pub prompt_tokens: u64,
    /// `completion_tokens` (output tokens).
    pub completion_tokens: u64,
    /// `prompt_tokens_details`, when present and not `null`.
    pub prompt_details: Option<Details>,
    /// `completion_tokens_details`, when present and not `null`.
    pub completion_details: Option<Details>,
}

/// The counts of one `*_tokens_details` object the gateway reads; each `None` when
/// the object does not have it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Details {
    /// `cached_tokens` (prompt tokens read from the provider's cache).
    pub cached_tokens: Option<u64>,
    /// `cache_creation_tokens` (prompt tokens written to it).
    pub cache_creation_tokens: Option<u64>,
    /// `reasoning_tokens` (output tokens spent on reasoning).
    pub reasoning_tokens: Option<u64>,
}

/// What [`read`] made of a value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Read {
    /// An object of the shape above, and the index just past it.
    Counts(Counts, usize),
    /// `null`, and the index just past it.
    Null(usize),
    /// Something else: read it with `serde_json`.
    Unsure,
}

/// Reads the JSON value at the start of `text` (after any whitespace) as a `usage`
/// object; what follows it is not looked at.
pub fn read(text: &[u8]) -> Read {
    let i = ws(text, 0);
    if text[i..].starts_with(b"null") {
        return Read::Null(i + 4);
    }
    let mut c = Counts::default();
    // Keys already read, one bit each: a repeated one is serde's error, so unsure.
    let mut seen = 0u8;
    let end = object(text, i, |key, v| {
        let (bit, slot) = match key {
            b"prompt_tokens" => (1, Some(&mut c.prompt_tokens)),
            b"completion_tokens" => (2, Some(&mut c.completion_tokens)),
            b"prompt_tokens_details" => (4, None),
            b"completion_tokens_details" => (8, None),
            // Counts the gateway does not read (named here: no check of the name).
            b"total_tokens" => return int(text, v).map(|(_, end)| end),
            // Any other member: only a count is understood.
            _ => return int(text, v).filter(|_| plain(key)).map(|(_, end)| end),
        };
        if seen & bit != 0 {
            return None;
        }
        seen |= bit;
        if let Some(slot) = slot {
            let (n, end) = int(text, v)?;
            *slot = n;
            return Some(end);
        }
        let (details, end) = if text[v..].starts_with(b"null") {
            (None, v + 4)
        } else {
            let (d, end) = details(text, v)?;
            (Some(d), end)
        };
        if bit == 4 {
            c.prompt_details = details;
        } else {
            c.completion_details = details;
        }
        Some(end)
    });
    match end {
        Some(end) => Read::Counts(c, end),
        None => Read::Unsure,
    }
}

/// The `*_tokens_details` object at `text[i]`, and the index past it.
fn details(text: &[u8], i: usize) -> Option<(Details, usize)> {
    let mut d = Details::default();
    let end = object(text, i, |key, v| {
        let (n, end) = int(text, v)?;
        let slot = match key {
            b"cached_tokens" => &mut d.cached_tokens,
            b"cache_creation_tokens" => &mut d.cache_creation_tokens,
            b"reasoning_tokens" => &mut d.reasoning_tokens,
            _ => return plain(key).then_some(end),
        };
        if slot.replace(n).is_some() {
            return None;
        }
        Some(end)
    })?;
    Some((d, end))
}

/// Walks the object at `text[i] == '{'`: for each member, `each(key, value_start)`
/// reads the value and returns the index past it (`None`: unsure). `key` is the
/// text up to the next quote: `each` takes it only if it is one of its names or
/// [`plain`]. Returns the index past the closing brace.
fn object(
    text: &[u8],
    i: usize,
    mut each: impl FnMut(&[u8], usize) -> Option<usize>,
) -> Option<usize> {
    if text.get(i) != Some(&b'{') {
        return None;
    }
    let mut i = ws(text, i + 1);
    if text.get(i) == Some(&b'}') {
        return Some(i + 1);
    }
    loop {
        if text.get(i) != Some(&b'"') {
            return None;
        }
        let len = memchr::memchr(b'"', &text[i + 1..])?;
        let key = &text[i + 1..i + 1 + len];
        i = ws(text, i + len + 2);
        if text.get(i) != Some(&b':') {
            return None;
        }
        let v = ws(text, i + 1);
        i = ws(text, each(key, v)?);
        match text.get(i) {
            Some(b',') => i = ws(text, i + 1),
            Some(b'}') => return Some(i + 1),
            _ => return None,
        }
    }
}

/// Whether `key` (the bytes between a key's quotes) is printable ASCII without an
/// escape: its text as written is its name.
fn plain(key: &[u8]) -> bool {
    key.iter().all(|&b| (0x20..0x7f).contains(&b) && b != b'\\')
}

/// The JSON integer at `text[i]` (no sign, fraction or exponent; no leading zero)
/// that fits a `u64`, and the index past it.
fn int(text: &[u8], i: usize) -> Option<(u64, usize)> {
    let digits = text[i.min(text.len())..]
        .iter()
        .take_while(|b| b.is_ascii_digit())
        .count();
    if digits == 0 || (digits > 1 && text[i] == b'0') {
        return None;
    }
    let end = i + digits;
    if matches!(text.get(end), Some(b'.' | b'e' | b'E')) {
        return None;
    }
    let mut n: u64 = 0;
    for &b in &text[i..end] {
        n = n.checked_mul(10)?.checked_add(u64::from(b - b'0'))?;
    }
    Some((n, end))
}

/// Index of the first byte at or after `i` that is not JSON whitespace.
fn ws(text: &[u8], mut i: usize) -> usize {
    while let Some(b' ' | b'\t' | b'\n' | b'\r') = text.get(i) {
        i += 1;
    }
    i
}

/// Texts shaped like `usage` values, valid and not, for the tests that hold a caller
/// of [`read`] to its `serde_json` reading: objects of the keys providers send and
/// near misses, with integers, floats, signs, leading zeros, overflows, `null`,
/// strings, lists, nested details objects, repeated and escaped keys, whitespace,
/// and cut or trailing text.
#[cfg(test)]
pub(crate) fn usage_texts() -> impl proptest::strategy::Strategy<Value = String> {
    use proptest::prelude::*;
    // The keys the reader reads are listed twice: drawn twice as often.
    const KEYS: [&str; 16] = [
        "prompt_tokens",
        "completion_tokens",
        "total_tokens",
        "prompt_tokens_details",
        "prompt_tokens_details",
        "completion_tokens_details",
        "completion_tokens_details",
        "cached_tokens",
        "cached_tokens",
        "reasoning_tokens",
        "reasoning_tokens",
        "cache_creation_tokens",
        "cache_creation_tokens",
        "audio_tokens",
        "prompt\\u005ftokens",
        "cached\\u005ftokens",
    ];
    const BAD: [&str; 9] = [
        "18446744073709551616",
        "012",
        "1.5",
        "-1",
        "1e3",
        "null",
        "\"x\"",
        "[1]",
        "true",
    ];
    const WS: [&str; 3] = ["", " ", "\n\t"];
    let member = |value: BoxedStrategy<String>| {
        (0..KEYS.len(), value, 0..WS.len())
            .prop_map(|(k, v, w)| format!("{}\"{}\":{}{v}", WS[w], KEYS[k], WS[w]))
    };
    // Mostly counts (most texts then are usage objects the quick reader reads).
    let scalar = prop_oneof![
        8 => any::<u32>().prop_map(|n| n.to_string()),
        1 => Just(u64::MAX.to_string()),
        1 => (0..BAD.len()).prop_map(|i| BAD[i].to_string()),
    ]
    .boxed();
    let nested = proptest::collection::vec(member(scalar.clone()), 0..4)
        .prop_map(|ms| format!("{{{}}}", ms.join(",")))
        .boxed();
    let value = prop_oneof![2 => scalar, 2 => nested, 1 => Just("null".to_string())].boxed();
    (
        proptest::collection::vec(member(value), 0..7),
        0..WS.len(),
        0..6u8,
        any::<u16>(),
    )
        .prop_map(|(ms, w, shape, cut)| {
            let text = format!("{}{{{}}}", WS[w], ms.join(","));
            match shape {
                0 => text[..usize::from(cut) % (text.len() + 1)].to_string(),
                1 => format!("{text},\"x\":1}}"),
                2 => format!("{}null", WS[w]),
                _ => text,
            }
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_counts_providers_send() {
        let text = br#"{"prompt_tokens":19,"completion_tokens":10,"total_tokens":29,
            "prompt_tokens_details":{"cached_tokens":3,"audio_tokens":0},
            "completion_tokens_details":{"reasoning_tokens":4,"audio_tokens":0}} ,"x":1}"#;
        let Read::Counts(c, end) = read(text) else {
            panic!("unsure")
        };
        assert_eq!(&text[end..end + 2], b" ,");
        assert_eq!((c.prompt_tokens, c.completion_tokens), (19, 10));
        assert_eq!(c.prompt_details.unwrap().cached_tokens, Some(3));
        assert_eq!(c.completion_details.unwrap().reasoning_tokens, Some(4));
        assert_eq!(c.completion_details.unwrap().cached_tokens, None);
    }

    #[test]
    fn anything_but_integers_and_plain_keys_is_left_to_serde() {
        for text in [
            &br#"{"prompt_tokens":1.0}"#[..],
            br#"{"prompt_tokens":-1}"#,
            br#"{"prompt_tokens":01}"#,
            br#"{"prompt_tokens":1e2}"#,
            br#"{"prompt_tokens":18446744073709551616}"#,
            br#"{"prompt_tokens":1,"prompt_tokens":2}"#,
            br#"{"prompt\u005ftokens":1}"#,
            br#"{"prompt_tokens":null}"#,
            br#"{"model":"x"}"#,
            br#"{"prompt_tokens_details":{"cached_tokens":null}}"#,
            br#"{"prompt_tokens_details":{"cached_tokens":1,"cached_tokens":1}}"#,
            br#"{"prompt_tokens":1"#,
            br#"{"prompt_tokens":1,}"#,
            br#"[1,2]"#,
            b"",
        ] {
            assert_eq!(
                read(text),
                Read::Unsure,
                "{}",
                String::from_utf8_lossy(text)
            );
        }
        assert_eq!(read(b" null,"), Read::Null(5));
        assert_eq!(read(b"{ }"), Read::Counts(Counts::default(), 3));
    }
}
