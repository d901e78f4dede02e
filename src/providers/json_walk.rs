//! A strict JSON validator that walks the members of a top-level object, for
//! answers the gateway forwards nearly verbatim.
//!
//! A whole (non-streamed) OpenAI-format answer is relayed as the upstream wrote it,
//! with only `model` replaced, but only once it is known to be a JSON object with a
//! `choices` list: anything else (an HTML error page, a cut body) becomes a 502 and
//! the next endpoint of the plan. `serde_json` checked that through its visitor
//! machinery, a few hundred instructions per token, and the splice then scanned the
//! top level again to find `model`: together about 6,500 instructions for a
//! 280-byte answer, 6% of the gateway's work per request (`benches/load/callgrind.sh`).
//! This walk checks the same grammar in one pass over the bytes and hands each
//! top-level member's key and value ranges to its caller, so the splice needs no
//! second scan.
//!
//! What it accepts: exactly the JSON text of RFC 8259 (section 2 to 7) whose
//! top-level value is an object, as UTF-8 (RFC 8259 section 8.1), with containers
//! nested at most [`MAX_DEPTH`] deep (`serde_json`'s own limit). It accepts nothing
//! `serde_json` rejects: the tests hold it to `serde_json` on random and mutated
//! texts. Like `serde_json` when it skips a value, it does not judge what a
//! `\u` escape decodes to (a lone surrogate is well-formed JSON text), nor the
//! magnitude of a number.

use std::ops::Range;

/// Most containers nested in one another, the top-level object included (as
/// `serde_json`, whose recursion limit refuses the 128th).
pub const MAX_DEPTH: u32 = 127;

/// One member of the top-level object: where its key and value lie in the text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    /// The key's bytes between its quotes, as written (escapes not decoded).
    pub key: Range<usize>,
    /// The key holds an escape (a backslash): compare its decoded text.
    pub key_escaped: bool,
    /// The value's bytes (a string's quotes included).
    pub value: Range<usize>,
}

/// Checks that `text` is one JSON object (whitespace around it allowed) and calls
/// `each` with every top-level member, in order, as it is read. `false` (with some
/// members perhaps already reported) when the text is not valid JSON, not UTF-8,
/// nested deeper than [`MAX_DEPTH`] or not an object at its top level.
pub fn object_members(text: &[u8], mut each: impl FnMut(&Member)) -> bool {
    if simdutf8::basic::from_utf8(text).is_err() {
        return false;
    }
    let Some(mut i) = open_object(text) else {
        return false;
    };
    if text.get(i) == Some(&b'}') {
        return ws(text, i + 1) == text.len();
    }
    loop {
        let Some((key_end, key_escaped)) = string(text, i) else {
            return false;
        };
        let key = i + 1..key_end - 1;
        i = ws(text, key_end);
        if text.get(i) != Some(&b':') {
            return false;
        }
        let start = ws(text, i + 1);
        let Some(end) = value(text, start, 1) else {
            return false;
        };
        each(&Member {
            key,
            key_escaped,
            value: start..end,
        });
        i = ws(text, end);
        match text.get(i) {
            Some(b',') => i = ws(text, i + 1),
            Some(b'}') => return ws(text, i + 1) == text.len(),
            _ => return false,
        }
    }
}

/// Whether `text` is one valid JSON value of any kind (whitespace around it
/// allowed), UTF-8, nested at most [`MAX_DEPTH`] deep: the grammar of
/// [`object_members`] without its top-level object, which the tests hold to
/// `serde_json` on texts of every kind.
#[cfg(test)]
fn is_valid(text: &[u8]) -> bool {
    if std::str::from_utf8(text).is_err() {
        return false;
    }
    let start = ws(text, 0);
    value(text, start, 0).is_some_and(|end| ws(text, end) == text.len())
}

/// Index of the first byte after the top-level object's opening brace and any
/// whitespace, or `None` if the text does not start with an object.
fn open_object(text: &[u8]) -> Option<usize> {
    let i = ws(text, 0);
    (text.get(i) == Some(&b'{')).then(|| ws(text, i + 1))
}

/// Index of the first byte at or after `i` that is not JSON whitespace.
fn ws(b: &[u8], mut i: usize) -> usize {
    while let Some(b' ' | b'\t' | b'\n' | b'\r') = b.get(i) {
        i += 1;
    }
    i
}

/// Index just past the value starting at `b[i]` (no whitespace before it), with
/// `depth` containers already open around it; `None` if it is not a valid value.
///
/// Iterative: `objects` holds one bit per open container (1 for an object), the
/// innermost lowest, so nesting costs no stack and no allocation.
fn value(b: &[u8], mut i: usize, depth: u32) -> Option<usize> {
    let mut open = 0u32; // containers opened here
    let mut objects: u128 = 0;
    loop {
        // A value starts at `i`.
        match *b.get(i)? {
            b'"' => i = string(b, i)?.0,
            c @ (b'{' | b'[') => {
                open += 1;
                if depth + open > MAX_DEPTH {
                    return None;
                }
                objects = (objects << 1) | u128::from(c == b'{');
                i = ws(b, i + 1);
                let close = if c == b'{' { b'}' } else { b']' };
                if b.get(i) == Some(&close) {
                    i += 1;
                    open -= 1;
                    objects >>= 1;
                } else {
                    if c == b'{' {
                        i = member_key(b, i)?;
                    }
                    continue;
                }
            }
            b't' => i = literal(b, i, b"true")?,
            b'f' => i = literal(b, i, b"false")?,
            b'n' => i = literal(b, i, b"null")?,
            b'-' | b'0'..=b'9' => i = number(b, i)?,
            _ => return None,
        }
        // A value ended at `i`: close the containers it ends, or go on to the next.
        loop {
            if open == 0 {
                return Some(i);
            }
            i = ws(b, i);
            let in_object = objects & 1 == 1;
            match *b.get(i)? {
                b',' => {
                    i = ws(b, i + 1);
                    if in_object {
                        i = member_key(b, i)?;
                    }
                    break;
                }
                b'}' if in_object => {}
                b']' if !in_object => {}
                _ => return None,
            }
            i += 1;
            open -= 1;
            objects >>= 1;
        }
    }
}

/// Index of the member's value: past the key string at `b[i]`, its colon and the
/// whitespace around it.
fn member_key(b: &[u8], i: usize) -> Option<usize> {
    let i = ws(b, string(b, i)?.0);
    (b.get(i) == Some(&b':')).then(|| ws(b, i + 1))
}

/// Index just past `word` at `b[i]`, if it is there.
fn literal(b: &[u8], i: usize, word: &[u8]) -> Option<usize> {
    (b.get(i..i + word.len())? == word).then_some(i + word.len())
}

/// Index just past the number at `b[i]` (RFC 8259 section 6: an optional minus,
/// `0` or digits not starting with `0`, an optional fraction, an optional exponent).
/// What follows is the caller's to check.
fn number(b: &[u8], mut i: usize) -> Option<usize> {
    let digits = |b: &[u8], mut i: usize| -> Option<usize> {
        let start = i;
        while b.get(i).is_some_and(u8::is_ascii_digit) {
            i += 1;
        }
        (i > start).then_some(i)
    };
    if b.get(i) == Some(&b'-') {
        i += 1;
    }
    i = match *b.get(i)? {
        b'0' => i + 1,
        b'1'..=b'9' => digits(b, i)?,
        _ => return None,
    };
    if b.get(i) == Some(&b'.') {
        i = digits(b, i + 1)?;
    }
    if let Some(b'e' | b'E') = b.get(i) {
        i += 1;
        if let Some(b'+' | b'-') = b.get(i) {
            i += 1;
        }
        i = digits(b, i)?;
    }
    Some(i)
}

/// Index just past the string starting at `b[i]` (which must be a quote), and
/// whether it holds an escape; `None` for an unclosed string, a control character
/// (below U+0020) in it or an escape RFC 8259 section 7 does not define.
///
/// Eight bytes at a time: with `ONES` in every byte, `(x - ONES * n) & !x & HIGH`
/// marks the bytes of `x` below `n` (exact at the lowest mark; a false mark only
/// appears above a true one), and a byte equal to `c` is a zero byte of
/// `x ^ (ONES * c)`.
fn string(b: &[u8], i: usize) -> Option<(usize, bool)> {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    let below = |x: u64, n: u8| x.wrapping_sub(ONES * u64::from(n)) & !x & HIGH;
    if b.get(i) != Some(&b'"') {
        return None;
    }
    let mut j = i + 1;
    let mut escaped = false;
    loop {
        // The next quote, backslash or control character at or after `j`.
        while let Some(w) = b.get(j..j + 8) {
            let x = u64::from_le_bytes([w[0], w[1], w[2], w[3], w[4], w[5], w[6], w[7]]);
            let m = below(x ^ (ONES * u64::from(b'"')), 1)
                | below(x ^ (ONES * u64::from(b'\\')), 1)
                | below(x, 0x20);
            if m != 0 {
                j += (m.trailing_zeros() / 8) as usize;
                break;
            }
            j += 8;
        }
        while !matches!(*b.get(j)?, b'"' | b'\\' | 0..=0x1f) {
            j += 1;
        }
        match b[j] {
            b'"' => return Some((j + 1, escaped)),
            b'\\' => {
                escaped = true;
                j = match *b.get(j + 1)? {
                    b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => j + 2,
                    b'u' => {
                        let hex = b.get(j + 2..j + 6)?;
                        if !hex.iter().all(u8::is_ascii_hexdigit) {
                            return None;
                        }
                        j + 6
                    }
                    _ => return None,
                };
            }
            _ => return None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What `serde_json` says of `text` when it skips the whole value and the text
    /// is UTF-8 (which [`is_valid`] also requires).
    fn serde_says(text: &[u8]) -> bool {
        std::str::from_utf8(text).is_ok()
            && serde_json::from_slice::<serde::de::IgnoredAny>(text).is_ok()
    }

    fn depth_of(text: &[u8]) -> u32 {
        // Brackets outside strings; only called on texts serde accepted.
        let (mut d, mut max, mut in_str, mut esc) = (0u32, 0u32, false, false);
        for &c in text {
            if in_str {
                match (esc, c) {
                    (true, _) => esc = false,
                    (false, b'\\') => esc = true,
                    (false, b'"') => in_str = false,
                    _ => {}
                }
                continue;
            }
            match c {
                b'"' => in_str = true,
                b'{' | b'[' => {
                    d += 1;
                    max = max.max(d);
                }
                b'}' | b']' => d = d.saturating_sub(1),
                _ => {}
            }
        }
        max
    }

    fn agree(text: &[u8]) {
        let mine = is_valid(text);
        let serde = serde_says(text);
        if mine {
            assert!(
                serde,
                "accepted what serde_json rejects: {:?}",
                String::from_utf8_lossy(text)
            );
        } else if serde && depth_of(text) <= MAX_DEPTH {
            panic!(
                "rejected what serde_json accepts: {:?}",
                String::from_utf8_lossy(text)
            );
        }
    }

    #[test]
    fn fixed_texts_are_judged_as_serde_json_judges_them() {
        let cases: &[&[u8]] = &[
            b"{}",
            b" { } ",
            b"[]",
            b"0",
            b"-0",
            b"-",
            b"01",
            b"1.",
            b".5",
            b"1.5e",
            b"1e+",
            b"1E-7",
            b"-12.5e+3",
            b"1e400",
            b"true",
            b"tru",
            b"nul",
            b"null ",
            b"\"a\"",
            b"\"\\u00e9\"",
            b"\"\\ud800\"",
            b"\"\\uZZZZ\"",
            b"\"\\x\"",
            b"\"\\u12\"",
            b"\"a\tb\"",
            b"\"a\x01b\"",
            b"\"\x7f\"",
            "\"é\"".as_bytes(),
            b"\"\xff\"",
            b"{\"a\":1,}",
            b"{,}",
            b"[1,]",
            b"[,1]",
            b"[1 2]",
            b"{\"a\" 1}",
            b"{\"a\":}",
            b"{\"a\":1 \"b\":2}",
            b"{1:2}",
            b"[1]]",
            b"[[1]",
            b"{}{}",
            b"{} x",
            b"",
            b"   ",
            b"{\"a\":[1,{\"b\":[true,false,null,\"x\\\"]\"]}],\"c\":{}}",
            b"[\"unterminated",
            b"\"ends in backslash\\",
            b"[1,[2,[3,[4]]]]",
            b"{\"a\":1}\n",
            b"\t[\r\n]\t",
            b"[-]",
            b"[- 1]",
            b"[00]",
            b"[0.0e0]",
            b"{\"k\\u0041\":0}",
            b"\"abcdefghijklmnopqrstuvwxyz\x1f\"",
            b"\"abcdefgh\\\"ijklmnop\"",
            b"\"12345678\"",
            b"\"\xc3\xa9\x01234567\"",
            b"\"1234567\xe2\x82\xac\"",
            b"\"123456\xe2\x82\xac\"",
            b"\"1234567\xe2\x82\"",
            b"\"\xe2\x82\xac\\\"\xc3\xa9\"",
            b"[\"\xc3\xa9\"]\xc3\xa9",
            b"\"12345678\xc3\xa9\x1f\"",
            b"\"\xed\xa0\x80\"",
            b"\"\xf4\x90\x80\x80\"",
            b"\"1234567\"",
        ];
        for c in cases {
            agree(c);
        }
    }

    #[test]
    fn nesting_is_refused_where_serde_json_refuses_it() {
        for n in [1usize, 2, 100, 126, 127, 128, 129, 300] {
            let text = format!("{}{}", "[".repeat(n), "]".repeat(n));
            assert_eq!(is_valid(text.as_bytes()), n <= MAX_DEPTH as usize, "{n}");
            assert_eq!(
                serde_json::from_slice::<serde_json::Value>(text.as_bytes()).is_ok(),
                n <= MAX_DEPTH as usize,
                "serde_json's own limit moved: {n}"
            );
            let objects = format!("{}1{}", "{\"k\":".repeat(n), "}".repeat(n));
            assert_eq!(is_valid(objects.as_bytes()), n <= MAX_DEPTH as usize, "{n}");
            assert_eq!(
                object_members(objects.as_bytes(), |_| {}),
                n <= MAX_DEPTH as usize,
                "{n}"
            );
            let obj = format!("{{\"a\":{}{}}}", "[".repeat(n), "]".repeat(n));
            assert_eq!(
                object_members(obj.as_bytes(), |_| {}),
                n < MAX_DEPTH as usize,
                "{n}"
            );
        }
    }

    #[test]
    fn members_are_reported_with_their_ranges() {
        let text = br#" {"id":"x", "mo\u0064el" : "m1","choices":[{"a":[1]}],"n":-1.5e3, "o":{}} "#;
        let mut seen = Vec::new();
        assert!(object_members(text, |m| seen.push(m.clone())));
        let show: Vec<(&str, bool, &str)> = seen
            .iter()
            .map(|m| {
                (
                    std::str::from_utf8(&text[m.key.clone()]).unwrap(),
                    m.key_escaped,
                    std::str::from_utf8(&text[m.value.clone()]).unwrap(),
                )
            })
            .collect();
        assert_eq!(
            show,
            [
                ("id", false, "\"x\""),
                ("mo\\u0064el", true, "\"m1\""),
                ("choices", false, "[{\"a\":[1]}]"),
                ("n", false, "-1.5e3"),
                ("o", false, "{}"),
            ]
        );
        for bad in [
            &b"[1]"[..],
            b"\"s\"",
            b"{\"a\":1",
            b"{\"a\":1}}",
            b"{\"a\":1,}",
            b"{\"a\"}",
        ] {
            assert!(
                !object_members(bad, |_| {}),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
        assert!(object_members(b"{}", |_| panic!("no members")));
    }

    /// Small random texts from JSON's own alphabet, and valid documents with one
    /// byte changed, dropped or repeated: each judged as `serde_json` judges it.
    #[test]
    fn random_and_mutated_texts_are_judged_as_serde_json_judges_them() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(17);
        const ALPHABET: &[u8] =
            b"{}[]:,\"\\/ \t\n-+.eE0123456789abfnrtuluesx\x01\x7f\xc3\xa9\xe2\x82\xac\xff";
        let mut valid = 0;
        for _ in 0..200_000 {
            let len = rng.random_range(0..20);
            let text: Vec<u8> = (0..len)
                .map(|_| ALPHABET[rng.random_range(0..ALPHABET.len())])
                .collect();
            valid += usize::from(is_valid(&text));
            agree(&text);
        }
        assert!(
            valid > 100,
            "the generator hardly makes valid texts: {valid}"
        );
        let docs: [&[u8]; 3] = [
            br#"{"id":"chatcmpl-1","object":"chat.completion","created":1700000000,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"He said \"hi\"\n\u00e9"},"finish_reason":"stop","logprobs":null}],"usage":{"prompt_tokens":12,"completion_tokens":7,"total_tokens":19}}"#,
            br#"[1.5e-3,-0,true,false,null,{"a":{"b":[[],{}]}},"\/\b\f\r\t"]"#,
            "{\"text\":\"caf\u{e9} \u{1f600}\",\"n\":[0,10,-2.25E+2]}".as_bytes(),
        ];
        for doc in docs {
            assert!(is_valid(doc));
            for at in 0..doc.len() {
                for _ in 0..4 {
                    let mut m = doc.to_vec();
                    match rng.random_range(0..3) {
                        0 => m[at] = ALPHABET[rng.random_range(0..ALPHABET.len())],
                        1 => {
                            m.remove(at);
                        }
                        _ => m.insert(at, m[at]),
                    }
                    agree(&m);
                    let members = object_members(&m, |_| {});
                    let object = serde_says(&m) && m.get(ws(&m, 0)) == Some(&b'{');
                    assert_eq!(members, object, "{:?}", String::from_utf8_lossy(&m));
                }
            }
        }
    }
}
