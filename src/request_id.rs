//! Request ids: the `x-request-id` every response carries.
//!
//! A client's `x-request-id` is kept when it is 1 to [`MAX_LEN`] bytes of letters,
//! digits and `-_.:/+=@` (what tracing systems and the OpenAI SDKs send: UUIDs,
//! `req_…`, base64); anything else (too long, spaces, control bytes, several values) is
//! replaced by a generated id, so a log line can never be forged or bloated through
//! it. A generated id is a random (version 4) UUID in its canonical lowercase form,
//! as Envoy generates them.
//!
//! The id is echoed on every response (ingress), sent to the provider on every
//! attempt of the request (see [`upstream_value`] for when), named by the `request` tracing span
//! that every log line of the request sits in, and is the access line's
//! `request_id`. The provider's own id of the answer it served is echoed apart, as
//! [`UPSTREAM_HEADER`], so a client can quote either to whom it concerns.

use http::{HeaderMap, HeaderName, HeaderValue};

/// `x-request-id`: the request's id (the client's, or generated).
pub const HEADER: HeaderName = HeaderName::from_static("x-request-id");

/// `x-upstream-request-id`: the id the serving provider gave its answer (its
/// `x-request-id`, Anthropic's `request-id`, Bedrock's `x-amzn-requestid`), when it
/// sent one.
pub const UPSTREAM_HEADER: HeaderName = HeaderName::from_static("x-upstream-request-id");

/// The longest client request id kept, in bytes.
pub const MAX_LEN: usize = 128;

/// The request id for a request with `headers`: the client's `x-request-id` when it
/// is valid (see the module doc), else a new one.
pub fn of(headers: &HeaderMap) -> HeaderValue {
    let mut values = headers.get_all(HEADER).iter();
    match (values.next(), values.next()) {
        (Some(v), None) if valid(v.as_bytes()) => v.clone(),
        _ => generate(),
    }
}

/// Whether `id` may be kept as a request id.
pub fn valid(id: &[u8]) -> bool {
    (1..=MAX_LEN).contains(&id.len())
        && id
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.:/+=@".contains(b))
}

/// A new request id: a random version 4 UUID (RFC 9562 §5.4), canonical form
/// `xxxxxxxx-xxxx-4xxx-Nxxx-xxxxxxxxxxxx` in lowercase hex (N is 8, 9, a or b).
pub fn generate() -> HeaderValue {
    let bits: u128 = rand::random();
    // Version 4 in bits 48..52 (counting from the most significant), variant 10 in 64..66.
    let bits = (bits & !(0xf << 76) & !(0x3 << 62)) | (0x4 << 76) | (0x2 << 62);
    // Owned by its `Bytes` (one allocation, the text and a count), so the clones a
    // request makes of its id (the upstream request's field, the access line) only
    // count up. From a copied slice it was a `Vec`, which its first clone moved
    // behind a shared header: two allocations per request.
    let buf = bytes::Bytes::from_owner(uuid_text(bits));
    HeaderValue::from_maybe_shared(buf).unwrap_or(HeaderValue::from_static(
        "00000000-0000-4000-8000-000000000000",
    ))
}

/// `bits` in the 8-4-4-4-12 hex form of RFC 9562, lower case: byte by byte from the
/// most significant, a dash before bytes 4, 6, 8 and 10.
fn uuid_text(bits: u128) -> [u8; 36] {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut buf = [b'-'; 36];
    let mut at = 0;
    for (i, byte) in bits.to_be_bytes().into_iter().enumerate() {
        if matches!(i, 4 | 6 | 8 | 10) {
            at += 1;
        }
        buf[at] = HEX[usize::from(byte >> 4)];
        buf[at + 1] = HEX[usize::from(byte & 0xf)];
        at += 2;
    }
    buf
}

/// Whether `id` is a UUID written as 32 hex digits, plain or in the 8-4-4-4-12
/// hyphenated form (either case).
pub fn is_uuid(id: &[u8]) -> bool {
    let hex = |part: &[u8]| part.iter().all(u8::is_ascii_hexdigit);
    match id.len() {
        32 => hex(id),
        // The dashes at their places, then the five groups of digits: each a plain
        // loop, where one loop over all 36 bytes asked at each which kind it was
        // (run at every attempt, about 350 instructions).
        36 => {
            [8, 13, 18, 23].iter().all(|&i| id[i] == b'-')
                && [0..8, 9..13, 14..18, 19..23, 24..36]
                    .into_iter()
                    .all(|r| hex(&id[r]))
        }
        _ => false,
    }
}

/// The `x-request-id` sent to providers for the request id `id`: `id` itself when it
/// is a UUID ([`is_uuid`]; generated ids always are), else none.
///
/// Why not any id: some OpenAI-compatible servers read `x-request-id` as their own
/// request id and refuse anything but a UUID. llama-cpp-python's server (through
/// `starlette-context`'s request-id plugin) answers such a request with an empty
/// HTTP 400, so a client's `x-request-id: trace-16` would fail every request sent
/// to it. A client id that is not a UUID still names the request's log lines and
/// access line, and is echoed back; the provider's own id comes back as
/// [`UPSTREAM_HEADER`].
pub fn upstream_value(id: &HeaderValue) -> Option<HeaderValue> {
    is_uuid(id.as_bytes()).then(|| id.clone())
}

/// `x-client-request-id`: OpenAI's header for a caller's own id of a request
/// (ASCII, at most 512 characters), which OpenAI records for support lookups. Sent
/// to providers of kind `openai` only, set to the request id unless the client sent
/// one (`egress::forward`).
pub const CLIENT_HEADER: HeaderName = HeaderName::from_static("x-client-request-id");

/// The provider's id of its answer, from its response `headers` (see
/// [`UPSTREAM_HEADER`]); `None` when it sent none fit to be echoed.
///
/// One pass over the answer's fields, each name matched by its text, rather than
/// three hashed lookups: an answer has a dozen fields or so, and the lookups
/// (hashing three names, a probe each, nearly always a miss) cost about three
/// times the pass (`benches/load/callgrind.sh`). A field's values come in order, so
/// the first value of the first name present wins, as `HeaderMap::get` gives it.
pub fn upstream(headers: &HeaderMap) -> Option<HeaderValue> {
    let mut best: Option<(u8, &HeaderValue)> = None;
    for (name, value) in headers {
        let rank = match name.as_str() {
            "x-request-id" => 0,
            "request-id" => 1,
            "x-amzn-requestid" => 2,
            _ => continue,
        };
        if best.is_none_or(|(r, _)| rank < r) {
            best = Some((rank, value));
        }
    }
    best.map(|(_, v)| v)
        .filter(|v| valid(v.as_bytes()))
        .cloned()
}

/// The id as text (it is visible ASCII by construction: [`valid`] and
/// [`generate`], the only makers of ids, take nothing else).
///
/// Read as UTF-8, which checks ASCII a word at a time, rather than by
/// `HeaderValue::to_str`, which checks each byte for visibility: the same text for
/// these ids, and an access line reads its ids three or four times.
pub fn as_str(id: &HeaderValue) -> &str {
    debug_assert!(id.to_str().is_ok(), "{id:?}");
    std::str::from_utf8(id.as_bytes()).unwrap_or("")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_valid_client_id_is_kept_and_others_replaced() {
        let mut h = HeaderMap::new();
        h.insert(HEADER, HeaderValue::from_static("trace-42:abc/def=="));
        assert_eq!(of(&h), "trace-42:abc/def==");
        h.insert(HEADER, HeaderValue::from_static("has space"));
        assert!(is_uuid(of(&h).as_bytes()));
        h.insert(
            HEADER,
            HeaderValue::from_str(&"a".repeat(MAX_LEN + 1)).unwrap(),
        );
        assert!(is_uuid(of(&h).as_bytes()));
        h.insert(HEADER, HeaderValue::from_str(&"a".repeat(MAX_LEN)).unwrap());
        assert_eq!(of(&h).len(), MAX_LEN);
        h.insert(HEADER, HeaderValue::from_static("one"));
        h.append(HEADER, HeaderValue::from_static("two"));
        assert!(is_uuid(of(&h).as_bytes()));
        assert!(is_uuid(of(&HeaderMap::new()).as_bytes()));
        assert!(!valid(b""));
    }

    #[test]
    fn uuid_text_is_the_hex_of_the_bits_in_rfc_9562_groups() {
        assert_eq!(
            &uuid_text(0x0123_4567_89ab_cdef_fedc_ba98_7654_3210),
            b"01234567-89ab-cdef-fedc-ba9876543210"
        );
        assert_eq!(&uuid_text(0), b"00000000-0000-0000-0000-000000000000");
        assert_eq!(
            &uuid_text(u128::MAX),
            b"ffffffff-ffff-ffff-ffff-ffffffffffff"
        );
    }

    #[test]
    fn the_providers_id_is_taken_from_the_first_name_it_sent_fit_to_echo() {
        let mut h = HeaderMap::new();
        assert_eq!(upstream(&h), None);
        h.insert("X-Amzn-RequestId", HeaderValue::from_static("amzn-1"));
        assert_eq!(upstream(&h).unwrap(), "amzn-1");
        h.insert("request-id", HeaderValue::from_static("req_2"));
        assert_eq!(upstream(&h).unwrap(), "req_2");
        h.insert("x-request-id", HeaderValue::from_static("xr-3"));
        assert_eq!(upstream(&h).unwrap(), "xr-3");
        // The first name present decides; a value unfit to echo is not replaced by
        // a later name's.
        h.insert("x-request-id", HeaderValue::from_static("has space"));
        assert_eq!(upstream(&h), None);
    }

    proptest::proptest! {
        /// The one pass over the fields finds what a lookup of each name in turn
        /// finds, whatever the fields, their order and their repeats.
        #[test]
        fn the_providers_id_is_found_as_by_lookup(
            fields in proptest::collection::vec((0usize..6, "[a-z0-9 _-]{0,6}"), 0..12),
        ) {
            const NAMES: [&str; 6] = [
                "x-request-id",
                "request-id",
                "x-amzn-requestid",
                "content-type",
                "x-request-ids",
                "server",
            ];
            let mut h = HeaderMap::new();
            for (n, v) in &fields {
                h.append(NAMES[*n], HeaderValue::from_str(v).unwrap());
            }
            let looked_up = NAMES[..3]
                .iter()
                .find_map(|n| h.get(*n))
                .filter(|v| valid(v.as_bytes()))
                .cloned();
            proptest::prop_assert_eq!(upstream(&h), looked_up);
        }
    }

    #[test]
    fn generated_ids_are_distinct_and_well_formed() {
        let (a, b) = (generate(), generate());
        assert_ne!(a, b);
        for _ in 0..1000 {
            let id = generate();
            let s = id.to_str().unwrap();
            assert_eq!(s.len(), 36);
            assert!(valid(id.as_bytes()) && is_uuid(id.as_bytes()), "{s}");
            assert_eq!(&s[14..15], "4", "{s}");
            assert!("89ab".contains(&s[19..20]), "{s}");
            assert_eq!(s, s.to_ascii_lowercase());
        }
    }

    #[test]
    fn only_uuid_ids_are_sent_upstream_as_x_request_id() {
        for (id, sent) in [
            ("3f2b8c1e-9a4d-4e7f-8b6a-0c1d2e3f4a5b", true),
            ("3F2B8C1E-9A4D-4E7F-8B6A-0C1D2E3F4A5B", true),
            ("3f2b8c1e9a4d4e7f8b6a0c1d2e3f4a5b", true),
            ("sdk-trace-16", false),
            ("3f2b8c1e-9a4d-4e7f-8b6a-0c1d2e3f4a5", false),
            ("3f2b8c1e-9a4d-4e7f-8b6a_0c1d2e3f4a5b", false),
            ("g f2b8c1e-9a4d-4e7f-8b6a-0c1d2e3f4a5", false),
        ] {
            let v = HeaderValue::from_str(id).unwrap();
            assert_eq!(upstream_value(&v).is_some(), sent, "{id}");
        }
    }

    proptest::proptest! {
        /// The check by groups agrees with the definition byte by byte: dashes at
        /// 8, 13, 18 and 23 of 36, hex digits everywhere else (or 32 hex digits).
        #[test]
        fn the_uuid_check_agrees_with_its_definition(
            id in proptest::collection::vec(proptest::sample::select(b"0123456789abcdefABCDEF0123456789abcdef-g".to_vec()), 30..38),
            dashes in proptest::bool::ANY,
        ) {
            let mut id = id;
            if dashes && id.len() == 36 {
                for i in [8, 13, 18, 23] {
                    id[i] = b'-';
                }
            }
            let defined = match id.len() {
                32 => id.iter().all(u8::is_ascii_hexdigit),
                36 => id.iter().enumerate().all(|(i, b)| match i {
                    8 | 13 | 18 | 23 => *b == b'-',
                    _ => b.is_ascii_hexdigit(),
                }),
                _ => false,
            };
            proptest::prop_assert_eq!(is_uuid(&id), defined);
        }
    }
}
