//! JSON strings written by hand, byte for byte as `serde_json` writes them.
//!
//! Why: `serde_json` escapes a string one byte at a time and hands each piece (the
//! quotes, every run between escapes) to its writer separately. Where the gateway
//! writes many short strings per request or per streamed event (the access line's
//! fields, the OpenAI chunks a translating adapter writes for every upstream event),
//! that was a fifth of the work: `serialize_str` was 21% of a translated Anthropic
//! stream's instructions (`examples/translate_cost.rs anthropic-stream` under
//! callgrind). Here a string is scanned eight bytes at a time and copied in runs.
//!
//! What is escaped is what `serde_json` escapes (RFC 8259, section 7): the quote, the
//! backslash and the control characters below 0x20, as `\"`, `\\`, `\b`, `\f`, `\n`,
//! `\r`, `\t` or `\u00XX` with lowercase hex digits. DEL and every non-ASCII
//! character are written as they are. The tests check the output against
//! `serde_json` on fixed and random strings.

use bytes::BufMut;

const ONES: u64 = 0x0101_0101_0101_0101;
const HIGH: u64 = 0x8080_8080_8080_8080;

/// The high bit of each byte of `w` that JSON escapes, and possibly of bytes after
/// the first such byte (but never before it): with `ONES` in every byte,
/// `(v - ONES * n) & !v & HIGH` flags a byte of `v` below `n` (for `n` up to 0x80),
/// exactly for the lowest such byte, and a byte equal to `c` is a zero byte of
/// `v ^ (ONES * c)`, below 1.
#[inline]
fn special(w: [u8; 8]) -> u64 {
    let v = u64::from_le_bytes(w);
    let below = |v: u64, n: u64| v.wrapping_sub(ONES * n) & !v & HIGH;
    below(v, 0x20)
        | below(v ^ (ONES * u64::from(b'"')), 1)
        | below(v ^ (ONES * u64::from(b'\\')), 1)
}

/// Whether JSON needs `s` escaped: it holds a quote, a backslash or a control
/// character below 0x20.
pub fn needs_escape(s: &[u8]) -> bool {
    first_escape(s).is_some()
}

/// The index of the first byte of `s` that JSON escapes, eight bytes at a time.
fn first_escape(s: &[u8]) -> Option<usize> {
    let mut words = s.chunks_exact(8);
    let mut at = 0;
    for w in &mut words {
        let mut b = [0u8; 8];
        b.copy_from_slice(w);
        let m = special(b);
        if m != 0 {
            // Little-endian: the lowest flagged byte is the first, and exact.
            return Some(at + (m.trailing_zeros() / 8) as usize);
        }
        at += 8;
    }
    // The last 0..=7 bytes, padded with a letter (never escaped) to a whole word.
    let rest = words.remainder();
    let mut b = [b'a'; 8];
    b[..rest.len()].copy_from_slice(rest);
    let m = special(b);
    (m != 0).then(|| at + (m.trailing_zeros() / 8) as usize)
}

/// Appends `s` to `out` as a JSON string, quotes included, exactly as
/// `serde_json::to_writer(out, s)` writes it.
pub fn write_str(out: &mut impl BufMut, s: &str) {
    let bytes = s.as_bytes();
    out.put_u8(b'"');
    let mut start = 0;
    while let Some(i) = first_escape(&bytes[start..]).map(|i| start + i) {
        out.put_slice(&bytes[start..i]);
        write_escape(out, bytes[i]);
        start = i + 1;
    }
    out.put_slice(&bytes[start..]);
    out.put_u8(b'"');
}

/// Appends the escape of `b`, a byte [`first_escape`] found.
#[cold]
fn write_escape(out: &mut impl BufMut, b: u8) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let short = match b {
        b'"' => b'"',
        b'\\' => b'\\',
        0x08 => b'b',
        0x0c => b'f',
        b'\n' => b'n',
        b'\r' => b'r',
        b'\t' => b't',
        _ => {
            out.put_slice(&[
                b'\\',
                b'u',
                b'0',
                b'0',
                HEX[usize::from(b >> 4)],
                HEX[usize::from(b & 0xf)],
            ]);
            return;
        }
    };
    out.put_slice(&[b'\\', short]);
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn written(s: &str) -> String {
        let mut out = Vec::new();
        write_str(&mut out, s);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn needs_escape_finds_every_byte_json_escapes_at_every_position() {
        for len in 0..20 {
            for at in 0..len {
                for b in 0..=255u8 {
                    let mut s = vec![b'a'; len];
                    s[at] = b;
                    let expected = b < 0x20 || b == b'"' || b == b'\\';
                    assert_eq!(needs_escape(&s), expected, "byte {b:#x} at {at} of {len}");
                    assert_eq!(first_escape(&s), expected.then_some(at), "{b:#x} {at}");
                }
            }
            assert!(!needs_escape(&vec![0x7f; len]));
            assert!(!needs_escape(&vec![0xff; len]));
        }
        // Mixed strings of bytes near each threshold (a borrow across bytes must not
        // find one that is not there, nor one before the first).
        let near = [
            0x00, 0x1f, 0x20, 0x21, 0x22, 0x23, 0x5b, 0x5c, 0x5d, 0x7f, 0x80, 0x81, 0xa0, 0xa2,
            0xdc, 0xff,
        ];
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for _ in 0..20_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let len = (x % 24) as usize;
            let s: Vec<u8> = (0..len)
                .map(|i| near[((x >> (i * 2 % 60)) % 16) as usize])
                .collect();
            let naive = s.iter().position(|&b| b < 0x20 || b == b'"' || b == b'\\');
            assert_eq!(first_escape(&s), naive, "{s:x?}");
            assert_eq!(needs_escape(&s), naive.is_some(), "{s:x?}");
        }
    }

    #[test]
    fn every_character_below_0x80_is_written_as_serde_json_writes_it() {
        for c in 0..0x80u8 {
            let s = format!("a{}bcdefghij{}", c as char, c as char);
            assert_eq!(written(&s), serde_json::to_string(&s).unwrap(), "{c:#x}");
        }
        assert_eq!(written(""), "\"\"");
        assert_eq!(
            written("\u{1f}\u{7f}é\u{2028}"),
            "\"\\u001f\u{7f}é\u{2028}\""
        );
    }

    proptest! {
        /// Any string, and strings dense in escaped characters, are written as
        /// `serde_json` writes them.
        #[test]
        fn any_string_is_written_as_serde_json_writes_it(
            s in prop_oneof![
                any::<String>(),
                "[\"\\\\\u{0}-\u{1f}\u{7f}\u{e9}\u{2028}\u{1f600}a]{0,40}",
                "[a-z \n\"]{0,100}",
            ]
        ) {
            let expected = serde_json::to_string(&s).unwrap();
            prop_assert_eq!(&written(&s), &expected);
            let mut b = bytes::BytesMut::new();
            write_str(&mut b, &s);
            prop_assert_eq!(&b[..], expected.as_bytes());
        }
    }
}
