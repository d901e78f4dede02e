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

use super::h1::HeadError;
use super::ConnLimits;

/// Longest accepted request URI, in bytes (hyper's `MAX_URI_LEN`, kept when the
/// server side became our own).
pub(super) const MAX_URI_BYTES: usize = u16::MAX as usize - 1;

/// The complete HTTP/1.1 response refusing a request head with `e`'s status (400,
/// 414, 431 or 501) and reason: an OpenAI error body, `connection: close`, a new
/// request id.
pub(super) fn response(e: &HeadError, limits: &ConnLimits) -> Vec<u8> {
    let (status, reason) = (e.status, e.reason);
    let body = error_body(status, e.message, limits);
    let id = crate::request_id::generate();
    let id = crate::request_id::as_str(&id);
    tracing::debug!(
        request_id = id,
        status,
        "refused a request head that could not be served"
    );
    let mut bytes = Vec::with_capacity(256 + body.len());
    bytes.extend_from_slice(
        format!(
            "HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\nx-request-id: {id}\r\ndate: {}\r\n\r\n",
            body.len(),
            httpdate::fmt_http_date(std::time::SystemTime::now()),
        )
        .as_bytes(),
    );
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
        let out = response(&e, &ConnLimits::default());
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
}
