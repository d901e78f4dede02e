//! JSON-RPC over stdio with LSP's `Content-Length` framing.
//!
//! lsp-server's own stdio transport ends the connection at the first malformed
//! message; the protocol wants an error reply and the connection kept. So frames are
//! read here: a body that is not JSON is answered with `-32700 Parse error`, JSON
//! that is not a request, response or notification with `-32600 Invalid Request`
//! (both with a `null` id when none can be read), and the next frame is read. A frame
//! without a usable `Content-Length` is skipped up to its blank line with a parse
//! error. Bodies over [`MAX_BODY`] are read past and refused.

use std::io::{self, BufRead, Read, Write};

use lsp_server::Message;
use serde_json::{json, Value};

/// Largest message body accepted, in bytes (64 MiB: far above the 1 MiB policy file
/// limit, with room for JSON escaping).
pub const MAX_BODY: usize = 64 << 20;

/// Longest header line read, in bytes.
const MAX_HEADER_LINE: u64 = 8 << 10;

/// What the reader got from the client.
#[derive(Debug)]
pub enum Incoming {
    /// A well-formed message.
    Message(Message),
    /// A frame that could not be used: the error reply to send (code, message, id).
    Bad(i32, String, Value),
    /// The input ended.
    Eof,
}

/// Reads the next frame of `r`.
///
/// # Errors
/// Only I/O errors of the input; malformed content is [`Incoming::Bad`].
pub fn read(r: &mut impl BufRead) -> io::Result<Incoming> {
    let mut length: Option<usize> = None;
    let mut bad_header = None;
    let mut saw_any = false;
    loop {
        let mut line = Vec::new();
        let n = r
            .by_ref()
            .take(MAX_HEADER_LINE)
            .read_until(b'\n', &mut line)?;
        if n == 0 {
            return Ok(if saw_any {
                Incoming::Bad(
                    -32700,
                    "the input ended inside a message header".into(),
                    Value::Null,
                )
            } else {
                Incoming::Eof
            });
        }
        saw_any = true;
        let text = String::from_utf8_lossy(&line);
        let text = text.trim_end_matches(['\r', '\n']);
        if text.is_empty() {
            if !line.ends_with(b"\n") {
                continue;
            }
            break;
        }
        match text.split_once(':') {
            Some((k, v)) if k.trim().eq_ignore_ascii_case("content-length") => {
                match v.trim().parse::<usize>() {
                    Ok(n) => length = Some(n),
                    Err(_) => bad_header = Some(format!("bad Content-Length `{}`", v.trim())),
                }
            }
            Some(_) => {}
            None => bad_header = Some(format!("malformed header line `{text}`")),
        }
    }
    let Some(len) = length.filter(|_| bad_header.is_none()) else {
        let why = bad_header.unwrap_or_else(|| "a message header without Content-Length".into());
        return Ok(Incoming::Bad(-32700, why, Value::Null));
    };
    if len > MAX_BODY {
        io::copy(&mut r.by_ref().take(len as u64), &mut io::sink())?;
        return Ok(Incoming::Bad(
            -32600,
            format!("a message of {len} bytes is over the limit of {MAX_BODY}"),
            Value::Null,
        ));
    }
    let mut body = vec![0; len];
    r.read_exact(&mut body)?;
    Ok(parse(&body))
}

/// Turns a body into a message or the error to reply.
pub fn parse(body: &[u8]) -> Incoming {
    let v: Value = match serde_json::from_slice(body) {
        Ok(v) => v,
        Err(e) => return Incoming::Bad(-32700, format!("parse error: {e}"), Value::Null),
    };
    let id = match v.get("id") {
        Some(id @ (Value::Number(_) | Value::String(_))) => id.clone(),
        _ => Value::Null,
    };
    if !v.is_object() {
        return Incoming::Bad(
            -32600,
            "invalid request: a message must be a JSON object (batches are not used by LSP)".into(),
            Value::Null,
        );
    }
    match serde_json::from_value::<Message>(v) {
        Ok(m) => Incoming::Message(m),
        Err(e) => Incoming::Bad(-32600, format!("invalid request: {e}"), id),
    }
}

/// Writes one message with its header.
///
/// # Errors
/// I/O errors of the output.
pub fn write(w: &mut impl Write, msg: &Message) -> io::Result<()> {
    msg.write(w)
}

/// Writes an error reply whose id may be `null` (which lsp-server's `Response`
/// cannot carry).
///
/// # Errors
/// I/O errors of the output.
pub fn write_error(w: &mut impl Write, code: i32, message: &str, id: Value) -> io::Result<()> {
    let body = json!({ "jsonrpc": "2.0", "id": id, "error": { "code": code, "message": message } })
        .to_string();
    write!(w, "Content-Length: {}\r\n\r\n{body}", body.len())?;
    w.flush()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frames(input: &str) -> Vec<String> {
        let mut r = io::BufReader::new(input.as_bytes());
        let mut out = Vec::new();
        loop {
            match read(&mut r).unwrap() {
                Incoming::Eof => return out,
                Incoming::Message(m) => {
                    out.push(format!("msg {}", serde_json::to_string(&m).unwrap()))
                }
                Incoming::Bad(code, _, id) => out.push(format!("bad {code} {id}")),
            }
        }
    }

    #[test]
    fn malformed_frames_get_errors_and_reading_goes_on() {
        let ok = r#"{"jsonrpc":"2.0","method":"initialized","params":{}}"#;
        let input = format!(
            "Content-Length: 5\r\n\r\n{{oops\
             Content-Length: 9\r\n\r\n[1, 2, 3]\
             Content-Length: 20\r\n\r\n{{\"id\": 7, \"x\": true}}\
             Content-Type: x\r\n\r\n\
             Content-Length: {}\r\n\r\n{ok}",
            ok.len()
        );
        assert_eq!(
            frames(&input),
            vec![
                "bad -32700 null".to_string(),
                "bad -32600 null".to_string(),
                "bad -32600 7".to_string(),
                "bad -32700 null".to_string(),
                r#"msg {"method":"initialized","params":{}}"#.to_string(),
            ]
        );
    }
}
