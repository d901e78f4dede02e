//! Response header fields written ahead as HTTP/1.1 field lines.
//!
//! Why: the gateway adds about a dozen fields to every chat answer (the
//! `x-ratelimit-*` of its limits, the `x-switchyard-*` of its decision, the request's
//! `x-request-id`), and nothing reads them again before they go on the wire.
//! Inserted one by one into the response's `HeaderMap`, each hashed its name,
//! probed the table and sometimes grew it: about 5,500 instructions per JSON request
//! (6% of them, `benches/load/callgrind.sh`). Here they are appended as
//! `name: value\r\n` to one buffer that travels beside the response, not in it:
//! ingress hands the buffer down to the chat phases and returns it with the answer
//! ([`Answered`]), the server keeps it in the response body's wrapper
//! (`edge_io::Tracked`), the HTTP/1.1 server copies it into the head whole
//! ([`super::h1`]), and an HTTP/2 answer (hyper's server) gets the fields moved into
//! its header map first ([`append_to`]). (Carried as a response extension, the
//! buffer cost the extension map's allocations and hashing: about 900 instructions
//! and four allocations per request.)
//!
//! A field is appended, never replaced: each writer (the respond phase, ingress)
//! adds a name at most once, and no response built by the gateway carries these
//! names in its map.

use http::{HeaderMap, HeaderName, HeaderValue, Response};

use crate::body::Body;

/// Header fields of a response as HTTP/1.1 field lines, `name: value\r\n` each (RFC
/// 9112 section 5), names lowercase. Every name comes from a [`HeaderName`] and
/// every value is a valid field value (a [`HeaderValue`], a number, or text
/// checked by [`HeaderLines::push_str`]), so the lines are well formed by
/// construction.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HeaderLines {
    bytes: Vec<u8>,
}

impl HeaderLines {
    /// Appends the field `name: value`.
    pub fn push(&mut self, name: &HeaderName, value: &HeaderValue) {
        self.push_raw(name, value.as_bytes());
    }

    /// Appends the field `name: n` (decimal).
    pub fn push_u64(&mut self, name: &HeaderName, n: u64) {
        self.push_raw(name, itoa::Buffer::new().format(n).as_bytes());
    }

    /// Appends the field `name: text`, or nothing when `text` cannot be a field value
    /// (a control character other than tab; RFC 9110 section 5.5). Returns whether
    /// it was appended.
    pub fn push_str(&mut self, name: &HeaderName, text: &str) -> bool {
        let fits = text.bytes().all(|b| b == b'\t' || (b >= 0x20 && b != 0x7f));
        if fits {
            self.push_raw(name, text.as_bytes());
        }
        fits
    }

    fn push_raw(&mut self, name: &HeaderName, value: &[u8]) {
        let name = name.as_str().as_bytes();
        let need = name.len() + value.len() + 4;
        // The first field makes room for an answer's at once, allocated only now (an
        // answer's lines are made empty when its request starts, and a request
        // waiting on its upstream holds no buffer).
        let first = self.bytes.capacity() == 0;
        self.bytes
            .reserve(if first { need.max(RESERVED) } else { need });
        // Two copies and four byte pushes: the separators through `push`, not
        // `extend_from_slice` (a `memcpy` call each).
        self.bytes.extend_from_slice(name);
        self.bytes.push(b':');
        self.bytes.push(b' ');
        self.bytes.extend_from_slice(value);
        self.bytes.push(b'\r');
        self.bytes.push(b'\n');
    }

    /// The lines, one after another, each ending in CRLF (empty: no fields).
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// Each field as (name, value).
    pub fn iter(&self) -> impl Iterator<Item = (&[u8], &[u8])> {
        self.bytes
            .split(|&b| b == b'\n')
            .filter_map(|line| line.strip_suffix(b"\r"))
            .filter_map(|line| {
                let colon = line.iter().position(|&b| b == b':')?;
                Some((&line[..colon], line.get(colon + 2..).unwrap_or_default()))
            })
    }

    /// Whether a field named `name` is among the lines.
    pub fn contains(&self, name: &HeaderName) -> bool {
        self.get(name).is_some()
    }

    /// The value of the first field named `name`, if any.
    pub fn get(&self, name: &HeaderName) -> Option<&[u8]> {
        let name = name.as_str().as_bytes();
        self.iter().find(|(n, _)| *n == name).map(|(_, v)| v)
    }
}

/// Bytes reserved for a response's field lines at its first field: room for a chat
/// answer's (six `x-ratelimit-*`, up to ten `x-switchyard-*`, `x-request-id`: about
/// 700 bytes) without growing the buffer field by field.
const RESERVED: usize = 1024;

/// What a request handler answers with: the response, and the field lines to write
/// after its header map's fields (none for a plain `Response`).
pub trait Answered {
    /// The response and its field lines.
    fn into_answer(self) -> (Response<Body>, HeaderLines);
}

impl Answered for Response<Body> {
    fn into_answer(self) -> (Response<Body>, HeaderLines) {
        (self, HeaderLines::default())
    }
}

impl Answered for (Response<Body>, HeaderLines) {
    fn into_answer(self) -> (Response<Body>, HeaderLines) {
        self
    }
}

/// Appends each field of `lines` to `headers`.
pub fn append_to(lines: &HeaderLines, headers: &mut HeaderMap) {
    for (name, value) in lines.iter() {
        // Well formed by construction; a line that were not is left out.
        if let (Ok(n), Ok(v)) = (HeaderName::from_bytes(name), HeaderValue::from_bytes(value)) {
            headers.append(n, v);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: HeaderName = HeaderName::from_static("x-a");
    const B: HeaderName = HeaderName::from_static("x-b");

    #[test]
    fn lines_are_written_in_order_and_read_back() {
        let mut l = HeaderLines::default();
        l.push(&A, &HeaderValue::from_static("one two"));
        l.push_u64(&B, 1_234);
        assert!(l.push_str(&A, "three\tfour"));
        assert_eq!(
            l.as_bytes(),
            b"x-a: one two\r\nx-b: 1234\r\nx-a: three\tfour\r\n"
        );
        let fields: Vec<_> = l.iter().collect();
        assert_eq!(
            fields,
            [
                (&b"x-a"[..], &b"one two"[..]),
                (b"x-b", b"1234"),
                (b"x-a", b"three\tfour")
            ]
        );
        assert_eq!(l.get(&A), Some(&b"one two"[..]));
        assert!(l.contains(&B));
        assert!(!l.contains(&HeaderName::from_static("x-c")));
    }

    #[test]
    fn text_that_cannot_be_a_field_value_is_left_out() {
        let mut l = HeaderLines::default();
        assert!(!l.push_str(&A, "bad\r\nx-injected: 1"));
        assert!(!l.push_str(&A, "nul\0"));
        assert!(!l.push_str(&A, "del\x7f"));
        assert!(l.as_bytes().is_empty());
        assert!(l.push_str(&A, ""));
        assert_eq!(l.get(&A), Some(&b""[..]));
    }

    #[test]
    fn append_to_adds_the_lines_to_the_map_after_its_fields() {
        let mut headers = HeaderMap::new();
        headers.insert(http::header::CONTENT_TYPE, HeaderValue::from_static("a/b"));
        let mut lines = HeaderLines::default();
        lines.push_u64(&A, 7);
        lines.push(&A, &HeaderValue::from_static("8"));
        append_to(&lines, &mut headers);
        let a: Vec<_> = headers.get_all(&A).iter().collect();
        assert_eq!(a, ["7", "8"]);
        assert_eq!(headers[http::header::CONTENT_TYPE], "a/b");
        // No lines: the map is left as it was.
        append_to(&HeaderLines::default(), &mut headers);
        assert_eq!(headers.len(), 3);
    }

    #[test]
    fn a_plain_response_answers_with_no_lines() {
        let (_, lines) = crate::body::json(http::StatusCode::OK, "{}").into_answer();
        assert!(lines.as_bytes().is_empty());
        let mut l = HeaderLines::default();
        l.push_u64(&A, 1);
        assert!(
            l.bytes.capacity() >= RESERVED,
            "room for an answer's fields at once"
        );
        let (_, lines) = (crate::body::json(http::StatusCode::OK, "{}"), l.clone()).into_answer();
        assert_eq!(lines, l);
    }
}
