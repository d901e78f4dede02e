//! OpenAI-shaped answers for requests hyper refuses before the service sees them.
//!
//! hyper answers an unparsable HTTP/1 request head itself, with an empty body
//! (`Server::on_error` in `proto/h1/role.rs`): 400 for a malformed request line or
//! header, 414 for a URI over 65,534 bytes, 431 for more than 100 header fields or a
//! head over its 400 KiB read buffer. [`recognise`] knows that head exactly and builds
//! the complete JSON response written in its place; [`error_body`] is the same body for
//! the 431 the service gives a head over `server.max_header_bytes`.
//!
//! Like every other response, these carry an `x-request-id`: a generated one, since
//! the head they refuse could not be read, and the same id is in the log line
//! (`debug`) that records the refusal.

use std::io::IoSlice;

use super::ConnLimits;

/// hyper's longest accepted request URI, in bytes (`MAX_URI_LEN` in `proto/h1/role.rs`).
const MAX_URI_BYTES: usize = u16::MAX as usize - 1;

/// hyper's canned heads are about 100 bytes; anything longer is not one.
const MAX_CANNED_LEN: usize = 256;

/// A JSON error response being written in place of hyper's canned head.
pub(super) struct Replacement {
    bytes: Vec<u8>,
    written: usize,
    /// Length of hyper's head, reported to hyper as written once `bytes` are out.
    replaced_len: usize,
}

impl Replacement {
    pub(super) fn is_done(&self) -> bool {
        self.written == self.bytes.len()
    }

    pub(super) fn remaining(&self) -> &[u8] {
        &self.bytes[self.written..]
    }

    pub(super) fn advance(&mut self, n: usize) {
        self.written += n;
    }

    pub(super) fn replaced_len(&self) -> usize {
        self.replaced_len
    }
}

/// If `bufs` is exactly one of hyper's canned error heads, the JSON response to write
/// instead.
pub(super) fn recognise(bufs: &[IoSlice<'_>], limits: &ConnLimits) -> Option<Replacement> {
    let mut chunks = bufs.iter().filter(|b| !b.is_empty());
    let head: &[u8] = chunks.next()?;
    if chunks.next().is_some() || head.len() > MAX_CANNED_LEN || head[0] != b'H' {
        return None;
    }
    let (version, status, reason, date) = parse_canned(head)?;
    let body = error_body(status, limits);
    let id = crate::request_id::generate();
    let id = crate::request_id::as_str(&id);
    tracing::debug!(
        request_id = id,
        status,
        "refused a request head hyper could not parse"
    );
    let mut bytes = Vec::with_capacity(220 + body.len());
    bytes.extend_from_slice(
        format!(
            "{version} {status} {reason}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\nx-request-id: {id}\r\n",
            body.len()
        )
        .as_bytes(),
    );
    if let Some(date) = date {
        bytes.extend_from_slice(format!("date: {date}\r\n").as_bytes());
    }
    bytes.extend_from_slice(b"\r\n");
    bytes.extend_from_slice(&body);
    Some(Replacement {
        bytes,
        written: 0,
        replaced_len: head.len(),
    })
}

/// `(version, status, reason, date)` of a canned head: the status line, then only
/// `content-length: 0`, `connection: close` and `date` lines.
fn parse_canned(head: &[u8]) -> Option<(&str, u16, &str, Option<&str>)> {
    let text = std::str::from_utf8(head).ok()?.strip_suffix("\r\n\r\n")?;
    let mut lines = text.split("\r\n");
    let (version, status_line) = lines.next()?.split_once(' ')?;
    if version != "HTTP/1.1" && version != "HTTP/1.0" {
        return None;
    }
    let (status, reason) = match status_line {
        "400 Bad Request" => (400, "Bad Request"),
        "414 URI Too Long" => (414, "URI Too Long"),
        "431 Request Header Fields Too Large" => (431, "Request Header Fields Too Large"),
        _ => return None,
    };
    let mut empty = false;
    let mut date = None;
    for line in lines {
        match line {
            "content-length: 0" => empty = true,
            "connection: close" => {}
            _ => date = Some(line.strip_prefix("date: ")?),
        }
    }
    empty.then_some((version, status, reason, date))
}

/// The OpenAI error body for `status` (400, 414 or 431) of a refused request head.
pub(super) fn error_body(status: u16, limits: &ConnLimits) -> Vec<u8> {
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
        _ => (
            "The request is not valid HTTP: its request line or a header is malformed."
                .to_string(),
            "malformed_request",
        ),
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

    const HEAD: &[u8] = b"HTTP/1.1 414 URI Too Long\r\nconnection: close\r\ncontent-length: 0\r\ndate: Tue, 01 Dec 2026 09:06:57 GMT\r\n\r\n";

    fn replace(bufs: &[IoSlice<'_>]) -> Option<String> {
        recognise(bufs, &ConnLimits::default()).map(|r| {
            assert_eq!(r.replaced_len(), HEAD.len());
            String::from_utf8(r.remaining().to_vec()).unwrap()
        })
    }

    #[test]
    fn hypers_head_becomes_a_complete_json_response() {
        let out = replace(&[IoSlice::new(HEAD)]).unwrap();
        let (head, body) = out.split_once("\r\n\r\n").unwrap();
        assert!(head.starts_with("HTTP/1.1 414 URI Too Long\r\n"), "{head}");
        assert!(head.contains("\r\ncontent-type: application/json\r\n"));
        assert!(head.contains(&format!("\r\ncontent-length: {}\r\n", body.len())));
        let id = head
            .split("\r\n")
            .find_map(|l| l.strip_prefix("x-request-id: "))
            .expect("a request id");
        assert!(crate::request_id::is_uuid(id.as_bytes()), "{id}");
        assert!(head.ends_with("\r\ndate: Tue, 01 Dec 2026 09:06:57 GMT"));
        let v: serde_json::Value = serde_json::from_str(body).unwrap();
        assert_eq!(v["error"]["code"], "uri_too_long");
        assert_eq!(v["error"]["type"], "invalid_request_error");
        assert!(v["error"]["param"].is_null());
    }

    #[test]
    fn anything_else_passes() {
        let with_body = [HEAD, b"x"].concat();
        let other_status = b"HTTP/1.1 400 Bad Request\r\ncontent-length: 5\r\n\r\n";
        let extra_header = b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\nx-a: b\r\n\r\n";
        let h2_frame = [0u8, 0, 0, 4, 0, 0, 0, 0, 0];
        for bytes in [
            &with_body[..],
            other_status,
            extra_header,
            &h2_frame,
            &HEAD[..HEAD.len() - 2],
        ] {
            assert!(replace(&[IoSlice::new(bytes)]).is_none());
        }
        assert!(replace(&[IoSlice::new(HEAD), IoSlice::new(b"x")]).is_none());
        assert!(replace(&[IoSlice::new(b""), IoSlice::new(HEAD)]).is_some());
    }
}
