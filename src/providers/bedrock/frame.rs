//! AWS event stream frames (`application/vnd.amazon.eventstream`, the framing of
//! Bedrock's ConverseStream answer), checked and read in place.
//!
//! A frame is a prelude (its total length and its headers' length, big-endian
//! `u32`s, and the CRC-32 of those eight bytes), the headers (each a name of 1 byte
//! length, a value type byte, and the value), the payload, and the CRC-32 of
//! everything before it (AWS SDK reference, "Event stream encoding"; the
//! `aws-smithy-eventstream` crate, whose reader the tests hold this one to).
//!
//! Why not `aws_smithy_eventstream::frame::read_message_from`: it copies every
//! header name and value and the payload into buffers of their own, and computes
//! the CRC a few bytes at a time as it reads; for a stream of short events that was
//! about 4,300 instructions per frame, more than half of a translated Bedrock
//! stream's work (`examples/translate_cost.rs bedrock-stream` under callgrind).
//! Here the checksums are computed once each over their bytes, and the headers and
//! payload are borrowed from the frame.

/// Bytes of the prelude: total length, headers' length, prelude CRC.
const PRELUDE_BYTES: usize = 12;
/// Bytes of the message CRC that ends a frame.
const CRC_BYTES: usize = 4;
/// Smallest valid frame: the prelude and the message CRC.
pub(super) const MIN_FRAME_BYTES: usize = PRELUDE_BYTES + CRC_BYTES;

/// A frame's header value types that have a fixed size, and that size in bytes
/// (`bool` true and false, byte, `i16`, `i32`, `i64`, timestamp, UUID); types 6
/// (bytes) and 7 (string) have a 2-byte length first.
fn fixed_size(value_type: u8) -> Option<usize> {
    match value_type {
        0 | 1 => Some(0),
        2 => Some(1),
        3 => Some(2),
        4 => Some(4),
        5 | 8 => Some(8),
        9 => Some(16),
        _ => None,
    }
}

/// Value type of a string header.
const TYPE_STRING: u8 = 7;
/// Value type of a byte array header.
const TYPE_BYTES: u8 = 6;

/// One checked frame, borrowed.
#[derive(Debug)]
pub(super) struct Frame<'a> {
    /// The headers, checked by [`Frame::read`]: every header whole and of a known
    /// type, every name and string value UTF-8.
    headers: &'a [u8],
    /// The payload (Bedrock's events: JSON).
    pub payload: &'a [u8],
}

/// One header of a frame: its name, and its value when it is a string.
type Header<'a> = (&'a [u8], Option<&'a [u8]>);

impl<'a> Frame<'a> {
    /// Checks and reads `frame`, exactly one whole frame (its length from
    /// [`frame_len`]).
    ///
    /// # Errors
    /// What is wrong with the frame: a length out of bounds, a CRC mismatch, a
    /// header cut short, of an unknown type, or a name or string value that is not
    /// UTF-8.
    pub(super) fn read(frame: &'a [u8]) -> Result<Frame<'a>, String> {
        if frame.len() < MIN_FRAME_BYTES {
            return Err(format!("a frame of {} bytes is too short", frame.len()));
        }
        let total = be32(frame, 0) as usize;
        if total != frame.len() {
            return Err(format!(
                "the frame says it is {total} bytes long, but it is {}",
                frame.len()
            ));
        }
        let prelude_crc = crc32fast::hash(&frame[..8]);
        if prelude_crc != be32(frame, 8) {
            return Err(format!(
                "prelude checksum mismatch: computed {prelude_crc:#010x}, sent {:#010x}",
                be32(frame, 8)
            ));
        }
        let headers_len = be32(frame, 4) as usize;
        if headers_len > total - PRELUDE_BYTES - CRC_BYTES {
            return Err(format!(
                "headers of {headers_len} bytes do not fit in a frame of {total}"
            ));
        }
        let body_end = total - CRC_BYTES;
        let message_crc = crc32fast::hash(&frame[..body_end]);
        if message_crc != be32(frame, body_end) {
            return Err(format!(
                "message checksum mismatch: computed {message_crc:#010x}, sent {:#010x}",
                be32(frame, body_end)
            ));
        }
        let headers = &frame[PRELUDE_BYTES..PRELUDE_BYTES + headers_len];
        let mut rest = headers;
        while !rest.is_empty() {
            let ((name, value), after) = next_header(rest)?;
            if std::str::from_utf8(name).is_err() {
                return Err("a header name is not UTF-8".into());
            }
            if value.is_some_and(|v| std::str::from_utf8(v).is_err()) {
                return Err("a header string value is not UTF-8".into());
            }
            rest = after;
        }
        Ok(Frame {
            headers,
            payload: &frame[PRELUDE_BYTES + headers_len..body_end],
        })
    }

    /// The value of the first header named `name`, when it is a string.
    pub(super) fn header(&self, name: &str) -> Option<&'a str> {
        let mut rest = self.headers;
        while let Ok(((n, value), after)) = next_header(rest) {
            if n == name.as_bytes() {
                // Checked UTF-8 by `read`: this cannot fail.
                return value.and_then(|v| std::str::from_utf8(v).ok());
            }
            rest = after;
        }
        None
    }
}

/// The length of the frame `buf` starts with, once its first four bytes arrived
/// (`None` before).
///
/// # Errors
/// The length, when it is out of bounds (below the 16 bytes of prelude and CRC, or
/// above `max`).
pub(super) fn frame_len(buf: &[u8], max: usize) -> Result<Option<usize>, usize> {
    if buf.len() < 4 {
        return Ok(None);
    }
    let total = be32(buf, 0) as usize;
    if !(MIN_FRAME_BYTES..=max).contains(&total) {
        return Err(total);
    }
    Ok(Some(total))
}

/// The first header of `headers` and the bytes after it.
fn next_header(headers: &[u8]) -> Result<(Header<'_>, &[u8]), String> {
    let cut = || "a header is cut short".to_string();
    let (&name_len, rest) = headers.split_first().ok_or_else(cut)?;
    let name = rest.get(..usize::from(name_len)).ok_or_else(cut)?;
    let rest = &rest[name.len()..];
    let (&value_type, rest) = rest.split_first().ok_or_else(cut)?;
    if let Some(n) = fixed_size(value_type) {
        let after = rest.get(n..).ok_or_else(cut)?;
        return Ok(((name, None), after));
    }
    if value_type != TYPE_STRING && value_type != TYPE_BYTES {
        return Err(format!("a header has an unknown value type {value_type}"));
    }
    let len = rest.get(..2).ok_or_else(cut)?;
    let len = usize::from(u16::from_be_bytes([len[0], len[1]]));
    let value = rest.get(2..2 + len).ok_or_else(cut)?;
    let after = &rest[2 + len..];
    Ok(((name, (value_type == TYPE_STRING).then_some(value)), after))
}

/// The big-endian `u32` at `at` of `b` (the caller checked there are four bytes).
fn be32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

#[cfg(test)]
mod tests {
    use aws_smithy_types::event_stream::{Header as EsHeader, HeaderValue, Message};
    use bytes::Bytes;
    use proptest::prelude::*;

    use super::*;

    fn encode(headers: Vec<EsHeader>, payload: &[u8]) -> Vec<u8> {
        let mut m = Message::new(payload.to_vec());
        for h in headers {
            m = m.add_header(h);
        }
        let mut out = Vec::new();
        aws_smithy_eventstream::frame::write_message_to(&m, &mut out).unwrap();
        out
    }

    /// `frame` read here and by `aws-smithy-eventstream`: both fail, or both read
    /// the same payload and the same string headers (the first of each name).
    fn agree(frame: &[u8]) -> Result<(), TestCaseError> {
        let ours = Frame::read(frame);
        let theirs =
            aws_smithy_eventstream::frame::read_message_from(Bytes::copy_from_slice(frame));
        match (&ours, &theirs) {
            (Ok(f), Ok(m)) => {
                prop_assert_eq!(f.payload, &m.payload()[..]);
                for h in m.headers() {
                    let name = h.name().as_str();
                    let first = m
                        .headers()
                        .iter()
                        .find(|x| x.name().as_str() == name)
                        .unwrap();
                    let want = match first.value() {
                        HeaderValue::String(s) => Some(s.as_str()),
                        _ => None,
                    };
                    prop_assert_eq!(f.header(name), want, "{}", name);
                }
            }
            (Err(_), Err(_)) => {}
            _ => prop_assert!(
                false,
                "ours {:?}, theirs {:?}",
                ours.as_ref().err(),
                theirs.as_ref().err()
            ),
        }
        Ok(())
    }

    fn header_value() -> impl Strategy<Value = HeaderValue> {
        prop_oneof![
            any::<bool>().prop_map(HeaderValue::Bool),
            any::<i8>().prop_map(HeaderValue::Byte),
            any::<i16>().prop_map(HeaderValue::Int16),
            any::<i32>().prop_map(HeaderValue::Int32),
            any::<i64>().prop_map(HeaderValue::Int64),
            proptest::collection::vec(any::<u8>(), 0..20)
                .prop_map(|b| HeaderValue::ByteArray(Bytes::from(b))),
            "[a-zA-Z:/ -]{0,20}".prop_map(|s| HeaderValue::String(s.into())),
            any::<String>().prop_map(|s| HeaderValue::String(s.into())),
            (0i64..4_000_000_000_000)
                .prop_map(|ms| HeaderValue::Timestamp(aws_smithy_types::DateTime::from_millis(ms))),
            any::<u128>().prop_map(HeaderValue::Uuid),
        ]
    }

    fn headers() -> impl Strategy<Value = Vec<EsHeader>> {
        proptest::collection::vec(
            (
                prop_oneof![
                    Just(":event-type".to_string()),
                    Just(":message-type".to_string()),
                    "[a-z:-]{0,12}",
                ],
                header_value(),
            )
                .prop_map(|(n, v)| EsHeader::new(n, v)),
            0..5,
        )
    }

    #[test]
    fn a_bedrock_event_is_read_with_its_headers_and_payload() {
        let frame = encode(
            vec![
                EsHeader::new(
                    ":event-type",
                    HeaderValue::String("contentBlockDelta".into()),
                ),
                EsHeader::new(
                    ":content-type",
                    HeaderValue::String("application/json".into()),
                ),
                EsHeader::new(":message-type", HeaderValue::String("event".into())),
            ],
            br#"{"contentBlockIndex":0,"delta":{"text":"Hi"}}"#,
        );
        assert_eq!(frame_len(&frame, 1 << 24), Ok(Some(frame.len())));
        assert_eq!(frame_len(&frame[..3], 1 << 24), Ok(None));
        let f = Frame::read(&frame).unwrap();
        assert_eq!(f.header(":event-type"), Some("contentBlockDelta"));
        assert_eq!(f.header(":message-type"), Some("event"));
        assert_eq!(f.header(":exception-type"), None);
        assert_eq!(
            f.payload,
            br#"{"contentBlockIndex":0,"delta":{"text":"Hi"}}"#
        );
        agree(&frame).unwrap();
    }

    #[test]
    fn bad_lengths_and_checksums_are_refused_as_the_aws_reader_refuses_them() {
        let frame = encode(
            vec![EsHeader::new(
                ":event-type",
                HeaderValue::String("x".into()),
            )],
            b"{}",
        );
        for at in 0..frame.len() {
            for flip in [0x01, 0x80, 0xff] {
                let mut bad = frame.clone();
                bad[at] ^= flip;
                assert!(Frame::read(&bad).is_err(), "byte {at} ^ {flip:#x}");
                agree(&bad).unwrap();
            }
        }
        assert!(Frame::read(&frame[..frame.len() - 1]).is_err());
        assert_eq!(frame_len(&[0, 0, 0, 15], 1 << 24), Err(15));
        assert_eq!(frame_len(&[1, 0, 0, 1], 1 << 24), Err((1 << 24) + 1));
    }

    /// A frame of arbitrary headers bytes, with correct lengths and checksums.
    fn framed(headers: &[u8], payload: &[u8]) -> Vec<u8> {
        let total = PRELUDE_BYTES + headers.len() + payload.len() + CRC_BYTES;
        let mut out = Vec::new();
        out.extend_from_slice(&(total as u32).to_be_bytes());
        out.extend_from_slice(&(headers.len() as u32).to_be_bytes());
        out.extend_from_slice(&crc32fast::hash(&out).to_be_bytes());
        out.extend_from_slice(headers);
        out.extend_from_slice(payload);
        out.extend_from_slice(&crc32fast::hash(&out).to_be_bytes());
        out
    }

    #[test]
    fn malformed_headers_are_refused_as_the_aws_reader_refuses_them() {
        let cases: [&[u8]; 9] = [
            b"\x01",                  // cut in the name length's header
            b"\x05:ab",               // name longer than the headers
            b"\x01a",                 // no value type
            b"\x01a\x0a",             // unknown value type
            b"\x01a\x07\x00",         // string length cut
            b"\x01a\x07\x00\x05abc",  // string longer than the headers
            b"\x01a\x04\x00\x00",     // i32 cut
            b"\x01\xffa\x00",         // name not UTF-8
            b"\x01a\x07\x00\x01\xff", // string value not UTF-8
        ];
        for headers in cases {
            let frame = framed(headers, b"{}");
            assert!(Frame::read(&frame).is_err(), "{headers:x?}");
            agree(&frame).unwrap();
        }
        let frame = framed(b"\x01a\x06\x00\x01\xff\x01b\x07\x00\x02ok", b"p");
        let f = Frame::read(&frame).unwrap();
        assert_eq!((f.header("a"), f.header("b")), (None, Some("ok")));
        agree(&frame).unwrap();
    }

    proptest! {
        /// Any frame the AWS writer makes, and any byte of it changed, is read as
        /// the AWS reader reads it.
        #[test]
        fn any_frame_reads_as_the_aws_reader_reads_it(
            headers in headers(),
            payload in proptest::collection::vec(any::<u8>(), 0..64),
            damage in proptest::option::of((any::<prop::sample::Index>(), 1..=255u8)),
        ) {
            let mut frame = encode(headers, &payload);
            if let Some((at, x)) = damage {
                let at = at.index(frame.len());
                frame[at] ^= x;
            }
            agree(&frame)?;
        }

        /// Any header bytes, framed with correct lengths and checksums, are read or
        /// refused as the AWS reader reads or refuses them.
        #[test]
        fn any_header_bytes_read_as_the_aws_reader_reads_them(
            headers in proptest::collection::vec(
                prop_oneof![Just(0u8), Just(1), Just(2), Just(7), Just(6), Just(b'a'), any::<u8>()],
                0..24,
            ),
            payload in proptest::collection::vec(any::<u8>(), 0..8),
        ) {
            agree(&framed(&headers, &payload))?;
        }
    }
}
