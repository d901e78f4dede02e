//! Request ids: the `x-request-id` every response carries.
//!
//! A client's `x-request-id` is kept when it is 1 to [`MAX_LEN`] bytes of letters,
//! digits and `-_.:/+=@` (what tracing systems and the OpenAI SDKs send: UUIDs,
//! `req_…`, base64); anything else (too long, spaces, control bytes, several values) is
//! replaced by a generated id, so a log line can never be forged or bloated through
//! it. A generated id is `req_` and 24 hex digits (96 random bits).
//!
//! The id is echoed on every response (ingress), forwarded to the provider on every
//! attempt of the request (`egress::forward`), named by the `request` tracing span
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

/// A new request id: `req_` and 24 lowercase hex digits.
pub fn generate() -> HeaderValue {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let bits: u128 = rand::random();
    let mut buf = *b"req_000000000000000000000000";
    for (i, b) in buf[4..].iter_mut().enumerate() {
        *b = HEX[((bits >> (4 * i)) & 0xf) as usize];
    }
    HeaderValue::from_bytes(&buf).unwrap_or(HeaderValue::from_static("req_unknown"))
}

/// The provider's id of its answer, from its response `headers` (see
/// [`UPSTREAM_HEADER`]); `None` when it sent none fit to be echoed.
pub fn upstream(headers: &HeaderMap) -> Option<HeaderValue> {
    ["x-request-id", "request-id", "x-amzn-requestid"]
        .iter()
        .find_map(|n| headers.get(*n))
        .filter(|v| valid(v.as_bytes()))
        .cloned()
}

/// The id as text (it is visible ASCII by construction).
pub fn as_str(id: &HeaderValue) -> &str {
    id.to_str().unwrap_or("")
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
        assert!(of(&h).as_bytes().starts_with(b"req_"));
        h.insert(
            HEADER,
            HeaderValue::from_str(&"a".repeat(MAX_LEN + 1)).unwrap(),
        );
        assert!(of(&h).as_bytes().starts_with(b"req_"));
        h.insert(HEADER, HeaderValue::from_str(&"a".repeat(MAX_LEN)).unwrap());
        assert_eq!(of(&h).len(), MAX_LEN);
        h.insert(HEADER, HeaderValue::from_static("one"));
        h.append(HEADER, HeaderValue::from_static("two"));
        assert!(of(&h).as_bytes().starts_with(b"req_"));
        assert!(of(&HeaderMap::new()).as_bytes().starts_with(b"req_"));
        assert!(!valid(b""));
    }

    #[test]
    fn generated_ids_are_distinct_and_well_formed() {
        let (a, b) = (generate(), generate());
        assert_ne!(a, b);
        assert_eq!(a.len(), 28);
        assert!(valid(a.as_bytes()));
    }
}
