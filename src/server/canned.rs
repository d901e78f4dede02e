//! OpenAI-shaped answers for request heads the server refuses before the service
//! sees them.
//!
//! An unparsable HTTP/1 request head gets 400 (naming what is wrong when the parser
//! knows: a missing Host, conflicting framing headers), a transfer coding other than
//! `chunked` 501, a URI over [`MAX_URI_BYTES`] 414, and more than
//! [`super::h1::MAX_HEADERS`] fields or a head past the cap 431
//! ([`super::h1::parse_head`]); [`response`] is that whole answer, written before
//! the connection closes. [`error_body`] is the same body for the 431 the service
//! gives a head over `server.max_header_bytes`.
//!
//! Like every other response, these carry an `x-request-id`: a generated one, since
//! the head they refuse could not be read, and the same id is in the log line
//! (`debug`) that records the refusal.
//!
//! # Fields added by the application
//! The listener's owner may add header fields to these answers ([`Refusals`]): the
//! gateway adds its CORS fields, so that a page on an allowed origin reads the 414
//! or 431 instead of a network error. It is given what could be read of the
//! request ([`Refused`]): for a head that could not be parsed, a lenient reading
//! of its bytes ([`glimpse`]), which only decides whether fields are added, never
//! how the request is served.
//!
//! What no hook here reaches: HTTP/2 streams refused inside hyper's `h2` (a header
//! list over `SETTINGS_MAX_HEADER_LIST_SIZE`, twice `server.max_header_bytes`, gets
//! a bare 431 HEADERS frame that `h2` writes itself, `h2::proto::streams`; a
//! malformed request is reset with `PROTOCOL_ERROR` and gets no HTTP answer at
//! all), and connections closed at a deadline, which get no answer.

use std::sync::Arc;

use http::{HeaderMap, HeaderName, HeaderValue, Method};

use super::h1::HeadError;
use super::lines::HeaderLines;
use super::ConnLimits;

/// What the server knows of a request it answers by itself, before any service
/// sees it: for [`Refusals`] to decide which fields the answer gets.
#[derive(Debug)]
pub struct Refused<'a> {
    /// The method, when the request line's first token is one.
    pub method: Option<&'a Method>,
    /// The path of the target, from its first `/` (the part after the authority of
    /// an absolute-form target) to its `?`, `#` or end: cut short with the target
    /// when the request line did not arrive whole (a 414), and to
    /// [`MAX_GLIMPSED_PATH`] bytes for a head that could not be parsed. Empty when
    /// there is none.
    pub path: &'a str,
    /// The header fields: all of them for a head that was parsed (a 431 for
    /// `server.max_header_bytes`); for one that could not be, the well-formed
    /// complete field lines that precede the blank line, a folded line (less the
    /// field it continues) or the end of what arrived, at most
    /// [`MAX_GLIMPSED_FIELDS`].
    pub headers: &'a HeaderMap,
}

/// The fields a listener's owner adds to the answers the server gives by itself
/// (a refused HTTP/1 head: 400, 414, 431, 501; a header section over
/// `server.max_header_bytes`: 431), given what was read of the request. Called only
/// for those answers; none by default.
#[derive(Clone, Default)]
pub struct Refusals(Option<Arc<RefusalHook>>);

/// The function behind [`Refusals`].
type RefusalHook = dyn Fn(&Refused<'_>, &mut HeaderLines) + Send + Sync;

impl std::fmt::Debug for Refusals {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Refusals").field(&self.0.is_some()).finish()
    }
}

impl Refusals {
    /// Refusals that get the fields `add` appends for the request it is given.
    pub fn new(add: impl Fn(&Refused<'_>, &mut HeaderLines) + Send + Sync + 'static) -> Self {
        Refusals(Some(Arc::new(add)))
    }

    /// Whether any fields may be added (a hook was given).
    pub fn is_on(&self) -> bool {
        self.0.is_some()
    }

    /// The fields for a refusal of `request`, as HTTP/1.1 field lines (empty when
    /// there is no hook or it adds none).
    pub fn fields(&self, request: &Refused<'_>) -> HeaderLines {
        let mut lines = HeaderLines::default();
        if let Some(add) = &self.0 {
            add(request, &mut lines);
        }
        lines
    }
}

/// Longest path kept from a head that could not be parsed, in bytes.
pub const MAX_GLIMPSED_PATH: usize = 1024;

/// Most header fields kept from a head that could not be parsed.
pub const MAX_GLIMPSED_FIELDS: usize = 2 * super::h1::MAX_HEADERS;

/// What a lenient reading of a refused head found ([`glimpse`]), owned.
#[derive(Debug, Default)]
pub(super) struct Glimpse {
    method: Option<Method>,
    path: String,
    headers: HeaderMap,
}

impl Glimpse {
    /// As the [`Refused`] that [`Refusals::fields`] takes.
    pub(super) fn refused(&self) -> Refused<'_> {
        Refused {
            method: self.method.as_ref(),
            path: &self.path,
            headers: &self.headers,
        }
    }
}

/// Reads what it can of `head`, the bytes of a request head the parser refused (it
/// may be cut short, malformed, or too large): the method and target path of its
/// request line, and its field lines up to the blank line. A line ends at LF, with
/// or without CR before it. A field line is kept when its name is a token and its
/// value a valid field value (blanks around it trimmed); a line that is not a field
/// is skipped; a folded line (starting with a blank) or a line without its end
/// stops the reading, and a folded line drops the field it continues (that field's
/// value, unfolded, is not the one its first line gives).
pub(super) fn glimpse(head: &[u8]) -> Glimpse {
    let mut g = Glimpse::default();
    let mut lines = head.split_inclusive(|&b| b == b'\n');
    let Some(first) = lines.next() else {
        return g;
    };
    let line = first.strip_suffix(b"\n").unwrap_or(first);
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    let mut words = line.split(|&b| b == b' ');
    g.method = words
        .next()
        .filter(|m| !m.is_empty())
        .and_then(|m| Method::from_bytes(m).ok());
    let target = words.next().unwrap_or_default();
    g.path = path_of(target);
    if !first.ends_with(b"\n") {
        return g;
    }
    // A field is kept once the next line shows it is not continued: a folded line
    // (starting with a blank) would continue it, so it goes with it.
    let mut last: Option<(HeaderName, HeaderValue)> = None;
    for line in lines {
        if matches!(line.first(), Some(b' ' | b'\t')) {
            return g;
        }
        if let Some((name, value)) = last.take() {
            if g.headers.len() >= MAX_GLIMPSED_FIELDS || g.headers.try_append(name, value).is_err()
            {
                return g;
            }
        }
        let Some(line) = line.strip_suffix(b"\n") else {
            break;
        };
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if line.is_empty() {
            break;
        }
        let Some(colon) = line.iter().position(|&b| b == b':') else {
            continue;
        };
        if let (Ok(name), Ok(value)) = (
            HeaderName::from_bytes(&line[..colon]),
            HeaderValue::from_bytes(line[colon + 1..].trim_ascii()),
        ) {
            last = Some((name, value));
        }
    }
    // The last line that arrived whole, at the end of what arrived.
    if let Some((name, value)) = last {
        if g.headers.len() < MAX_GLIMPSED_FIELDS {
            let _ = g.headers.try_append(name, value);
        }
    }
    g
}

/// The path of request target `target` ([`Refused::path`]), cut to
/// [`MAX_GLIMPSED_PATH`] bytes.
fn path_of(target: &[u8]) -> String {
    let start = if target.first() == Some(&b'/') {
        0
    } else {
        // Absolute form: after `scheme://authority`.
        let after_scheme = target
            .windows(3)
            .position(|w| w == b"://")
            .map_or(target.len(), |i| i + 3);
        target[after_scheme..]
            .iter()
            .position(|&b| b == b'/')
            .map_or(target.len(), |i| after_scheme + i)
    };
    let path = &target[start..];
    let end = path
        .iter()
        .position(|&b| b == b'?' || b == b'#')
        .unwrap_or(path.len())
        .min(MAX_GLIMPSED_PATH);
    String::from_utf8_lossy(&path[..end]).into_owned()
}

/// Longest accepted request URI, in bytes (hyper's `MAX_URI_LEN`, kept when the
/// server side became our own).
pub(super) const MAX_URI_BYTES: usize = u16::MAX as usize - 1;

/// The complete HTTP/1.1 response refusing a request head with `e`'s status (400,
/// 414, 431 or 501) and reason: an OpenAI error body, `connection: close`, a new
/// request id, and the field lines `extra` ([`Refusals::fields`]).
pub(super) fn response(e: &HeadError, limits: &ConnLimits, extra: &HeaderLines) -> Vec<u8> {
    let (status, reason) = (e.status, e.reason);
    let body = error_body(status, e.message, limits);
    let id = crate::request_id::generate();
    let id = crate::request_id::as_str(&id);
    tracing::debug!(
        request_id = id,
        status,
        "refused a request head that could not be served"
    );
    let mut bytes = Vec::with_capacity(256 + extra.as_bytes().len() + body.len());
    bytes.extend_from_slice(
        format!(
            "HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\nx-request-id: {id}\r\ndate: {}\r\n",
            body.len(),
            httpdate::fmt_http_date(std::time::SystemTime::now()),
        )
        .as_bytes(),
    );
    bytes.extend_from_slice(extra.as_bytes());
    bytes.extend_from_slice(b"\r\n");
    bytes.extend_from_slice(&body);
    bytes
}

/// The OpenAI error body for `status` (400, 414, 431 or 501) of a refused request
/// head; `message` says what is wrong for 400 and 501 (the others name their limit).
pub(super) fn error_body(status: u16, message: &str, limits: &ConnLimits) -> Vec<u8> {
    let (message, code) = match status {
        414 => (
            format!("The request URI is longer than {MAX_URI_BYTES} bytes."),
            "uri_too_long",
        ),
        431 => (
            format!(
                "The request header section is too large: at most {} bytes of header fields and 100 fields are accepted.",
                limits.max_header_bytes
            ),
            "headers_too_large",
        ),
        501 => (message.to_string(), "unsupported_transfer_coding"),
        _ => (message.to_string(), "malformed_request"),
    };
    let v = serde_json::json!({
        "error": {
            "message": message,
            "type": "invalid_request_error",
            "param": null,
            "code": code,
        }
    });
    serde_json::to_vec(&v).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refused_head_gets_a_complete_json_response() {
        let e = HeadError {
            status: 414,
            reason: "URI Too Long",
            message: "",
        };
        let out = response(&e, &ConnLimits::default(), &HeaderLines::default());
        let out = String::from_utf8(out).unwrap();
        let (head, body) = out.split_once("\r\n\r\n").unwrap();
        assert!(head.starts_with("HTTP/1.1 414 URI Too Long\r\n"), "{head}");
        assert!(head.contains("\r\ncontent-type: application/json\r\n"));
        assert!(head.contains(&format!("\r\ncontent-length: {}\r\n", body.len())));
        assert!(head.contains("\r\nconnection: close\r\n"));
        let id = head
            .split("\r\n")
            .find_map(|l| l.strip_prefix("x-request-id: "))
            .expect("a request id");
        assert!(crate::request_id::is_uuid(id.as_bytes()), "{id}");
        assert!(head.contains("\r\ndate: "));
        let v: serde_json::Value = serde_json::from_str(body).unwrap();
        assert_eq!(v["error"]["code"], "uri_too_long");
        assert_eq!(v["error"]["type"], "invalid_request_error");
        assert!(v["error"]["param"].is_null());
    }

    #[test]
    fn added_fields_go_in_the_head() {
        let e = HeadError {
            status: 431,
            reason: "Request Header Fields Too Large",
            message: "",
        };
        let mut extra = HeaderLines::default();
        extra.push(
            &http::header::ACCESS_CONTROL_ALLOW_ORIGIN,
            &HeaderValue::from_static("https://app.example.com"),
        );
        let out = String::from_utf8(response(&e, &ConnLimits::default(), &extra)).unwrap();
        let (head, body) = out.split_once("\r\n\r\n").unwrap();
        assert!(
            head.ends_with("\r\naccess-control-allow-origin: https://app.example.com"),
            "{head}"
        );
        assert!(head.contains(&format!("\r\ncontent-length: {}\r\n", body.len())));
    }

    /// `(method, path, origin)` as [`glimpse`] reads `head`.
    fn seen(head: &[u8]) -> (Option<Method>, String, Option<String>) {
        let g = glimpse(head);
        let origin = g
            .headers
            .get(http::header::ORIGIN)
            .map(|v| v.to_str().unwrap().to_string());
        (g.method, g.path, origin)
    }

    #[test]
    fn a_refused_head_is_read_leniently() {
        let app = Some("https://app.example.com".to_string());
        let get = Some(Method::GET);
        // A malformed request line, and a field line without a colon, are read past.
        assert_eq!(
            seen(b"GET /v1/models?x=1 HTTP/1.1 junk\r\nHost: x\r\nnot a field\r\nOrigin:  https://app.example.com \r\n\r\n"),
            (get.clone(), "/v1/models".to_string(), app.clone())
        );
        // Absolute form; bare LF line ends.
        assert_eq!(
            seen(b"OPTIONS http://gw:8080/v1/chat/completions#f HTTP/1.1\nOrigin: https://app.example.com\n"),
            (Some(Method::OPTIONS), "/v1/chat/completions".to_string(), app.clone())
        );
        assert_eq!(seen(b"GET http://gw HTTP/1.1\r\n\r\n").1, "");
        // A request line cut short (a URI too long to arrive whole) keeps its start.
        let cut = seen(format!("GET /v1/models/{}", "a".repeat(5000)).as_bytes());
        assert_eq!(cut.1.len(), MAX_GLIMPSED_PATH);
        assert!(cut.1.starts_with("/v1/models/aaa"));
        // Nothing after the blank line, a folded line or a line without its end.
        for head in [
            &b"GET /v1/x HTTP/1.1\r\nHost: x\r\n\r\nOrigin: https://app.example.com\r\n"[..],
            b"GET /v1/x HTTP/1.1\r\nX-A: 1\r\n 2\r\nOrigin: https://app.example.com\r\n",
            b"GET /v1/x HTTP/1.1\r\nOrigin: https://app.example.com",
            b"GET /v1/x HTTP/1.1\r\nOrigin: https://app.exa\x01mple.com\r\n",
        ] {
            assert_eq!(seen(head).2, None, "{:?}", String::from_utf8_lossy(head));
        }
        // Not a method; not UTF-8; nothing at all.
        assert_eq!(seen(b"G(T /v1/x HTTP/1.1\r\n").0, None);
        assert_eq!(seen(b"GET /v1/\xff HTTP/1.1\r\n").1, "/v1/\u{fffd}");
        assert_eq!(seen(b""), (None, String::new(), None));
        // At most MAX_GLIMPSED_FIELDS fields are kept.
        let many: String = (0..500).map(|i| format!("X-F{i}: v\r\n")).collect();
        let g = glimpse(format!("GET / HTTP/1.1\r\n{many}\r\n").as_bytes());
        assert_eq!(g.headers.len(), MAX_GLIMPSED_FIELDS);
    }

    /// Found by attack (2026-12-06): a field line followed by a folded line (obs-fold,
    /// RFC 9112 section 5.2) was kept as if complete, so an `Origin` whose value
    /// unfolded is not an allowed origin got the allowed origin's CORS fields.
    #[test]
    fn a_field_continued_by_a_folded_line_was_kept_as_complete() {
        for head in [
            &b"GET /v1/x HTTP/1.1\r\nOrigin: https://app.example.com\r\n .evil.example\r\n\r\n"[..],
            b"GET /v1/x HTTP/1.1\r\nOrigin: https://app.example.com\n\t.evil.example\n",
            b"GET /v1/x HTTP/1.1\r\nOrigin: https://app.example.com\r\n\t",
        ] {
            assert_eq!(seen(head).2, None, "{:?}", String::from_utf8_lossy(head));
        }
        // The fields before it stay.
        let g = glimpse(
            b"GET /v1/x HTTP/1.1\r\nOrigin: https://app.example.com\r\nX-A: 1\r\n 2\r\n\r\n",
        );
        assert_eq!(g.headers.len(), 1);
        assert!(g.headers.contains_key(http::header::ORIGIN));
    }
}
