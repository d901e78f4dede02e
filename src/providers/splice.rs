//! Replacing one top-level string field of a JSON object without re-serializing it.
//!
//! The OpenAI-format path forwards bodies nearly verbatim: only `model` changes (the
//! logical name on the way in, the upstream name on the way out). Parsing a body into a
//! tree and writing it back costs more than the rest of the proxy; a single scan that
//! finds the field's byte range and splices in the new value costs a few hundred
//! nanoseconds and keeps every other byte exactly as the sender wrote it.
//!
//! The scanner only walks the top level and skips nested values by bracket depth, with
//! string escapes honoured, so a `"model"` key inside a message or a tool schema is
//! never touched. Callers pass text that serde_json has already accepted as an object.

use std::ops::Range;

/// Index of the first byte at or after `i` that is not JSON whitespace.
pub(crate) fn skip_ws(b: &[u8], mut i: usize) -> usize {
    while i < b.len() && matches!(b[i], b' ' | b'\t' | b'\n' | b'\r') {
        i += 1;
    }
    i
}

/// Index just past the string starting at `b[i] == '"'`.
pub(crate) fn skip_string(b: &[u8], i: usize) -> Option<usize> {
    skip_string_escaped(b, i).map(|(end, _)| end)
}

/// Bytes of a string searched eight at a time before the search goes to `memchr2`
/// (whose set-up costs more than a short string: keys and most values of a stream
/// chunk are under 32 bytes).
const WORD_SCAN_BYTES: usize = 32;

/// Index just past the string starting at `b[i] == '"'`, and whether it holds an
/// escape (a backslash), so a caller comparing it with a plain name need not scan
/// it again.
///
/// The first [`WORD_SCAN_BYTES`] are searched a `u64` at a time: with `ONES` in
/// every byte, `(x - ONES) & !x & HIGH` marks the zero bytes of `x` (exactly at the
/// lowest one: a false mark only appears above a true one), and a byte equal to `c`
/// is a zero byte of `w ^ (ONES * c)`. Past that, `memchr2`.
pub(crate) fn skip_string_escaped(b: &[u8], i: usize) -> Option<(usize, bool)> {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    let zero = |x: u64| x.wrapping_sub(ONES) & !x & HIGH;
    let mut j = i + 1;
    let mut escaped = false;
    let mut words_left = WORD_SCAN_BYTES / 8;
    loop {
        // The next quote or backslash at or after `j`.
        let mut found = None;
        while words_left > 0 {
            let Some(w) = b.get(j..j + 8) else { break };
            let w = u64::from_le_bytes([w[0], w[1], w[2], w[3], w[4], w[5], w[6], w[7]]);
            let m = zero(w ^ (ONES * u64::from(b'"'))) | zero(w ^ (ONES * u64::from(b'\\')));
            if m != 0 {
                found = Some(j + (m.trailing_zeros() / 8) as usize);
                break;
            }
            j += 8;
            words_left -= 1;
        }
        let at = match found {
            Some(at) => at,
            None => j + memchr::memchr2(b'"', b'\\', b.get(j..)?)?,
        };
        if b[at] == b'"' {
            return Some((at + 1, escaped));
        }
        escaped = true;
        j = at + 2;
    }
}

/// Index just past the value starting at `b[i]`.
pub(crate) fn skip_value(b: &[u8], i: usize) -> Option<usize> {
    match *b.get(i)? {
        b'"' => skip_string(b, i),
        b'{' | b'[' => {
            let mut depth = 0usize;
            let mut j = i;
            while j < b.len() {
                match b[j] {
                    b'"' => {
                        j = skip_string(b, j)?;
                        continue;
                    }
                    b'{' | b'[' => depth += 1,
                    b'}' | b']' => {
                        depth -= 1;
                        if depth == 0 {
                            return Some(j + 1);
                        }
                    }
                    _ => {}
                }
                j += 1;
            }
            None
        }
        _ => {
            let mut j = i;
            while j < b.len() && !matches!(b[j], b',' | b'}' | b']' | b' ' | b'\t' | b'\n' | b'\r')
            {
                j += 1;
            }
            Some(j)
        }
    }
}

/// Where a top-level key was found: the byte range of its value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Field {
    /// The key exists; its value spans this range (quotes included for strings).
    Found(Range<usize>),
    /// The object has no such key; a new member can go right after this index (the
    /// opening brace), followed by a comma unless the object is empty.
    Missing { after_brace: usize, empty: bool },
}

/// Finds top-level `key` in the JSON object `json`. `None` if `json` is not an object.
pub fn find(json: &[u8], key: &str) -> Option<Field> {
    locate(json, key).map(|(f, _)| f)
}

/// As [`find`], with the byte range of the whole member (key, colon, value, and
/// the comma that separates it from the next member or, for the last, from the
/// previous one) when the key is found.
fn locate(json: &[u8], key: &str) -> Option<(Field, Option<Range<usize>>)> {
    let start = skip_ws(json, 0);
    if json.get(start) != Some(&b'{') {
        return None;
    }
    let mut i = skip_ws(json, start + 1);
    if json.get(i) == Some(&b'}') {
        return Some((
            Field::Missing {
                after_brace: start + 1,
                empty: true,
            },
            None,
        ));
    }
    // End of the previous member's value (for removing a last member's comma).
    let mut prev_end: Option<usize> = None;
    loop {
        let key_start = i;
        if json.get(i) != Some(&b'"') {
            return None;
        }
        let key_end = skip_string(json, i)?;
        let raw_key = &json[i + 1..key_end - 1];
        // A key written with escapes (`"mo\u0064el"`) is the same key to every JSON
        // reader; compare its decoded text so it is found (and replaced) too.
        let is_key = if raw_key.contains(&b'\\') {
            serde_json::from_slice::<String>(&json[i..key_end]).is_ok_and(|k| k == key)
        } else {
            raw_key == key.as_bytes()
        };
        i = skip_ws(json, key_end);
        if json.get(i) != Some(&b':') {
            return None;
        }
        let v = skip_ws(json, i + 1);
        let v_end = skip_value(json, v)?;
        if is_key {
            let after = skip_ws(json, v_end);
            let member = match (json.get(after), prev_end) {
                (Some(b','), _) => key_start..skip_ws(json, after + 1),
                (_, Some(p)) => p..v_end,
                (_, None) => key_start..v_end,
            };
            return Some((Field::Found(v..v_end), Some(member)));
        }
        i = skip_ws(json, v_end);
        prev_end = Some(v_end);
        match json.get(i) {
            Some(b',') => i = skip_ws(json, i + 1),
            Some(b'}') => {
                return Some((
                    Field::Missing {
                        after_brace: start + 1,
                        empty: false,
                    },
                    None,
                ))
            }
            _ => return None,
        }
    }
}

/// `json` with top-level `key` set to the string `value` (as [`set_string`]) and
/// top-level member `drop` removed if present, in one copy. `None` if `json` is not
/// an object.
pub fn set_string_dropping(json: &[u8], key: &str, value: &str, drop: &str) -> Option<Vec<u8>> {
    let (_, Some(member)) = locate(json, drop)? else {
        return set_string(json, key, value);
    };
    let mut rest = Vec::with_capacity(json.len() - member.len());
    rest.extend_from_slice(&json[..member.start]);
    rest.extend_from_slice(&json[member.end..]);
    set_string(&rest, key, value)
}

/// `json` with `member` (`"key":value`, JSON text) added as the first top-level
/// member. `None` if `json` is not an object.
pub fn insert_member(json: &[u8], member: &str) -> Option<Vec<u8>> {
    let start = skip_ws(json, 0);
    if json.get(start) != Some(&b'{') {
        return None;
    }
    let after_brace = start + 1;
    // Only the first member is looked at: the rest of the object is not walked.
    let empty = json.get(skip_ws(json, after_brace)) == Some(&b'}');
    let mut out = Vec::with_capacity(json.len() + member.len() + 1);
    out.extend_from_slice(&json[..after_brace]);
    out.extend_from_slice(member.as_bytes());
    if !empty {
        out.push(b',');
    }
    out.extend_from_slice(&json[after_brace..]);
    Some(out)
}

/// Appends `s` as a JSON string literal (quotes and escapes) to `out`.
pub fn push_json_string(out: &mut Vec<u8>, s: &str) {
    // Writing a &str to a Vec cannot fail.
    let _ = serde_json::to_writer(&mut *out, s);
}

/// `json` with top-level `key` set to the string `value` (added if absent) and, when
/// `first` is given, that member text (`"key":value`) inserted as the first member:
/// the same bytes as [`set_string`] then [`insert_member`], as parts that share
/// `json`'s memory (the client's body is not copied, however large; only the new
/// text is). `None` if `json` is not an object.
pub fn set_string_parts(
    json: &bytes::Bytes,
    key: &str,
    value: &str,
    first: Option<&str>,
) -> Option<Vec<bytes::Bytes>> {
    let mut new = Vec::with_capacity(value.len() + key.len() + 8);
    let cut = match find(json, key)? {
        Field::Found(r) => {
            push_json_string(&mut new, value);
            r
        }
        Field::Missing { after_brace, empty } => {
            push_json_string(&mut new, key);
            new.push(b':');
            push_json_string(&mut new, value);
            if !empty {
                new.push(b',');
            }
            after_brace..after_brace
        }
    };
    let mut parts = Vec::with_capacity(4);
    if let Some(member) = first {
        let after_brace = skip_ws(json, 0) + 1;
        // `key` is a member by now, so a comma always follows.
        let mut m = Vec::with_capacity(member.len() + 1);
        m.extend_from_slice(member.as_bytes());
        m.push(b',');
        parts.push(json.slice(..after_brace));
        parts.push(bytes::Bytes::from(m));
        parts.push(json.slice(after_brace..cut.start));
    } else {
        parts.push(json.slice(..cut.start));
    }
    parts.push(bytes::Bytes::from(new));
    parts.push(json.slice(cut.end..));
    parts.retain(|p| !p.is_empty());
    Some(parts)
}

/// `json` with top-level `key` set to the string `value` (added if absent), every other
/// byte unchanged. `None` if `json` is not an object.
pub fn set_string(json: &[u8], key: &str, value: &str) -> Option<Vec<u8>> {
    match find(json, key)? {
        Field::Found(r) => Some(set_string_at(json, r, value)),
        Field::Missing { after_brace, empty } => {
            let mut out = Vec::with_capacity(json.len() + value.len() + key.len() + 8);
            out.extend_from_slice(&json[..after_brace]);
            push_json_string(&mut out, key);
            out.push(b':');
            push_json_string(&mut out, value);
            if !empty {
                out.push(b',');
            }
            out.extend_from_slice(&json[after_brace..]);
            Some(out)
        }
    }
}

/// `json` with the value at `at` (a byte range a scan found, such as
/// [`Field::Found`]'s) replaced by the string `value`, every other byte unchanged.
///
/// # Panics
/// If `at` is not a range of `json`.
pub fn set_string_at(json: &[u8], at: Range<usize>, value: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(json.len() - at.len() + value.len() + 8);
    out.extend_from_slice(&json[..at.start]);
    push_json_string(&mut out, value);
    out.extend_from_slice(&json[at.end..]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The end of the string at `b[i]` and whether it has an escape, a byte at a
    /// time.
    fn naive_string_end(b: &[u8], i: usize) -> Option<(usize, bool)> {
        let (mut j, mut escaped) = (i + 1, false);
        loop {
            match *b.get(j)? {
                b'"' => return Some((j + 1, escaped)),
                b'\\' => {
                    escaped = true;
                    j += 2;
                }
                _ => j += 1,
            }
        }
    }

    #[test]
    fn strings_end_where_a_byte_at_a_time_scan_says_across_the_word_scan() {
        let mut state = 0x2545_f491_4f6c_dd1d_u64;
        let mut next = || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let alphabet = [
            b'a',
            b'"',
            b'\\',
            0x80,
            0xff,
            0x00,
            b' ',
            0x22 ^ 0x80,
            0x5c ^ 0x01,
        ];
        for case in 0..20_000 {
            let len = (next() % 90) as usize;
            // Mostly plain text, with quotes, backslashes and near-miss bytes placed
            // sparsely, so ends fall in every word and past the word scan.
            let mut b = vec![b'"'];
            for _ in 0..len {
                let r = next();
                b.push(if r % 13 == 0 {
                    alphabet[(r >> 8) as usize % alphabet.len()]
                } else {
                    b'a' + (r % 26) as u8
                });
            }
            if case % 3 == 0 {
                b.push(b'"');
            }
            assert_eq!(skip_string_escaped(&b, 0), naive_string_end(&b, 0), "{b:?}");
            assert_eq!(
                skip_string(&b, 0),
                naive_string_end(&b, 0).map(|e| e.0),
                "{b:?}"
            );
        }
        // A backslash as the last byte: the string never ends.
        assert_eq!(skip_string_escaped(b"\"abc\\", 0), None);
        assert_eq!(skip_string_escaped(b"\"\\\"\"", 0), Some((4, true)));
    }

    #[test]
    fn a_member_is_dropped_wherever_it_sits_and_the_rest_kept() {
        let cases = [
            (
                r#"{"usage":null,"model":"a","x":1}"#,
                r#"{"model":"b","x":1}"#,
            ),
            (
                r#"{"model":"a", "usage" : {"p":1} ,"x":1}"#,
                r#"{"model":"b", "x":1}"#,
            ),
            (
                r#"{"model":"a","x":1,"usage":null}"#,
                r#"{"model":"b","x":1}"#,
            ),
            (r#"{"usage":null}"#, r#"{"model":"b"}"#),
            (
                r#"{"model":"a","x":{"usage":1}}"#,
                r#"{"model":"b","x":{"usage":1}}"#,
            ),
        ];
        for (input, want) in cases {
            let out = set_string_dropping(input.as_bytes(), "model", "b", "usage").unwrap();
            assert_eq!(String::from_utf8(out).unwrap(), want, "{input}");
        }
    }

    #[test]
    fn a_member_is_inserted_first() {
        let out = insert_member(br#" {"a":1}"#, r#""s":{"k":true}"#).unwrap();
        assert_eq!(out, br#" {"s":{"k":true},"a":1}"#);
        let out = insert_member(b"{}", r#""s":1"#).unwrap();
        assert_eq!(out, br#"{"s":1}"#);
        assert!(insert_member(b"[1]", r#""s":1"#).is_none());
    }

    #[test]
    fn parts_are_the_bytes_of_set_string_and_insert_member() {
        let member = r#""stream_options":{"include_usage":true}"#;
        for json in [
            r#"{"model":"a","messages":[{"model":"x"}]}"#,
            r#" { "messages" : [] , "model" : "a" } "#,
            r#"{"messages":[]}"#,
            r#"{}"#,
            r#"{ }"#,
            r#"{"mod\u0065l":"a","x":1}"#,
        ] {
            let bytes = bytes::Bytes::from(json);
            let joined = |parts: Vec<bytes::Bytes>| -> Vec<u8> { parts.concat() };
            let set = set_string(json.as_bytes(), "model", "b\"c").unwrap();
            let parts = set_string_parts(&bytes, "model", "b\"c", None).unwrap();
            assert_eq!(joined(parts), set, "{json}");
            let both = insert_member(&set, member).unwrap();
            let parts = set_string_parts(&bytes, "model", "b\"c", Some(member)).unwrap();
            assert_eq!(joined(parts), both, "{json}");
        }
        assert!(set_string_parts(&bytes::Bytes::from_static(b"[1]"), "model", "b", None).is_none());
    }

    fn set(json: &str, v: &str) -> String {
        String::from_utf8(set_string(json.as_bytes(), "model", v).unwrap()).unwrap()
    }

    #[test]
    fn replaces_only_the_top_level_key() {
        let j = r#"{"messages":[{"role":"user","content":"the \"model\": x","model":"inner"}],"tools":[{"p":{"model":{"type":"string"}}}], "model" : "gpt-4o","n":1}"#;
        let out = set(j, "smol\"lm");
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(v["model"], "smol\"lm");
        assert_eq!(v["messages"][0]["model"], "inner");
        assert_eq!(v["tools"][0]["p"]["model"]["type"], "string");
        assert_eq!(out.replace("\"smol\\\"lm\"", "\"gpt-4o\""), j);
    }

    #[test]
    fn escaped_keys_are_the_same_key() {
        let out = set(r#"{"mo\u0064el":"cheap","messages":[]}"#, "up");
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(v["model"], "up");
        assert_eq!(
            out.matches("model").count() + out.matches("mo\\u0064el").count(),
            1,
            "{out}"
        );
    }

    #[test]
    fn adds_the_key_when_missing() {
        assert_eq!(set("{}", "m"), r#"{"model":"m"}"#);
        assert_eq!(
            set(r#" { "a" : [1, {"b":"}"}] }"#, "m"),
            r#" {"model":"m", "a" : [1, {"b":"}"}] }"#
        );
    }

    #[test]
    fn non_objects_are_refused() {
        assert!(set_string(b"[1]", "model", "m").is_none());
        assert!(set_string(b"\"x\"", "model", "m").is_none());
        assert!(set_string(b"{\"a\":", "model", "m").is_none());
    }

    #[test]
    fn agrees_with_serde_on_random_objects() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::SmallRng::seed_from_u64(7);
        let leaves = [
            r#""x""#,
            "1",
            "-2.5e3",
            "true",
            "null",
            r#""a\"b\\""#,
            "[]",
            "{}",
        ];
        for _ in 0..2000 {
            let mut obj = serde_json::Map::new();
            for k in 0..rng.random_range(0..6) {
                let key = if rng.random_bool(0.3) {
                    "model".to_string()
                } else {
                    format!("k{k}")
                };
                let leaf: serde_json::Value =
                    serde_json::from_str(leaves[rng.random_range(0..leaves.len())]).unwrap();
                let val = if rng.random_bool(0.5) {
                    serde_json::json!({"model": leaf, "list": [leaf.clone(), {"model": "deep"}]})
                } else {
                    leaf
                };
                obj.insert(key, val);
            }
            let text =
                serde_json::to_string_pretty(&serde_json::Value::Object(obj.clone())).unwrap();
            let out = set(&text, "NEW");
            let got: serde_json::Value = serde_json::from_str(&out).unwrap();
            obj.insert("model".into(), "NEW".into());
            assert_eq!(got, serde_json::Value::Object(obj), "{text}");
        }
    }
}
