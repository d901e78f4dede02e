//! The HTTP/1.1 server side of a connection: request heads parsed with `httparse`,
//! request bodies decoded as the service reads them, responses framed and written
//! straight to the socket.
//!
//! # Why our own and not hyper's
//! hyper's HTTP/1 server gives every connection an 8 KiB write buffer when the
//! connection is made and an 8 KiB read buffer at its first read, and keeps both for
//! the connection's life (neither can be made smaller: `max_buf_size` cannot go below
//! 8 KiB). Under the 64 to 2,048 connection load of `benches/load/conns.sh` those two
//! buffers were 16 of the 27 to 29 KiB a loaded connection cost (valgrind `massif`),
//! where nginx spends 8 KiB on both sides together; issue 17's target is 16 KB.
//! Here a connection holds no buffer of its own between requests:
//!
//! - A read goes into a per-thread scratch buffer (`SCRATCH_BYTES`) and the bytes
//!   that arrived are copied into a block of exactly their size. The request's
//!   header values, its URI and its body frames are slices of that block (no further
//!   copy), and the block is freed with them. Only a head that arrives in pieces is
//!   joined, bounded by the head cap.
//! - A response head is written into a `Vec` sized to it and sent with the body's
//!   first frame in one `writev`; a stream's events go out one `writev` each,
//!   framed in place (chunk size line, data, CRLF as three slices).
//!
//! It also spends fewer instructions per request than hyper's dispatcher (whose
//! server side was about 17,000 of the gateway's 94,000 per JSON request under
//! `benches/load/callgrind.sh`), since it does only what this gateway needs: one
//! request at a time per connection (pipelined requests wait their turn, as hyper
//! does), no upgrades and no trailers.
//!
//! # What it follows (RFC 9112)
//! - Message framing (§6): a request body is `Transfer-Encoding` with `chunked`
//!   last, or `Content-Length`, or empty. Both together, a `Transfer-Encoding` on an
//!   HTTP/1.0 request, one whose last coding is not `chunked`, or `Content-Length`
//!   values that differ or are not digits get 400 and the connection is closed: a
//!   proxy that guessed could be made to smuggle a request (§11.2). A coding other
//!   than `chunked` before it gets 501 (§6.1: only `chunked` is decoded here).
//!   A chunk size is followed by whitespace, then `;` and extensions or the CRLF.
//! - `Host` (§3.2): an HTTP/1.1 request without one, or any request with two, gets
//!   400 naming the problem.
//! - Persistence (§9.3): HTTP/1.1 keeps the connection unless either side says
//!   `Connection: close`; HTTP/1.0 only with `Connection: keep-alive`. A response
//!   whose request body was not read to its end closes the connection, after the
//!   bytes already received are decoded and dropped (as hyper does), since the rest
//!   would otherwise be read as the next request.
//! - Closing (§9.6): a connection closed while the client may still be sending (an
//!   unread body, a refused head) ends its write side first and reads and drops what
//!   arrives for a few seconds (`close`), so the kernel does not answer the
//!   client's bytes with a reset that can destroy our answer.
//! - `Expect: 100-continue` (RFC 9110 §10.1.1): the interim `100 Continue` is sent
//!   when the service first reads the body, never when it answers without reading it.
//! - Response framing: `Content-Length` when the body's length is known (a JSON
//!   answer), chunked otherwise (a stream), or, for an HTTP/1.0 client, the end of
//!   the connection. `HEAD` answers and `1xx`/`204`/`304` carry no body.
//! - A head that cannot be parsed gets a complete OpenAI error response (400, 414
//!   for a URI over 65,534 bytes, 431 for more than `MAX_HEADERS` fields or a head
//!   past the cap), then the connection closes; the service never sees it. The
//!   listener's owner may add fields to it ([`canned::Refusals`], given a lenient
//!   reading of the refused bytes).
//!
//! Deadlines, the client watch and the request accounting stay in `super::edge_io`:
//! every read and write goes through the connection's `EdgeIo`.

use std::future::Future;
use std::io::{self, IoSlice};
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use http::{header, HeaderMap, HeaderName, HeaderValue, Method, Request, Response, Uri, Version};
use http_body::{Body as HttpBody, Frame, SizeHint};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use super::canned;
use super::edge_io::{EdgeIo, Tracked};
use super::ConnLimits;
use crate::body::BoxError;

/// Most header fields in a request head; more get 431 (hyper's limit too).
pub(super) const MAX_HEADERS: usize = 100;

/// Size of the per-thread buffer every socket read lands in before its bytes are
/// copied into a block of their own (32 KiB: a large body arrives in reads of up to
/// this much).
pub(super) const SCRATCH_BYTES: usize = 32 * 1024;

/// Longest chunk-size line of a chunked body, extensions included (bytes).
const MAX_CHUNK_LINE: usize = 4096;

/// Most bytes of trailer fields after a chunked body's last chunk.
const MAX_TRAILER_BYTES: usize = 16 * 1024;

/// Most body bytes decoded and dropped, without waiting, when a service answered
/// without reading its request's body (beyond it the connection closes).
const DRAIN_NOW_BYTES: usize = 64 * 1024;

thread_local! {
    /// The buffer reads land in ([`SCRATCH_BYTES`]).
    static SCRATCH: std::cell::RefCell<Box<[u8]>> =
        std::cell::RefCell::new(vec![0u8; SCRATCH_BYTES].into_boxed_slice());
    /// The `date` header value of the current second: `(unix seconds, IMF-fixdate)`.
    static DATE: std::cell::Cell<(u64, [u8; DATE_LEN])> =
        const { std::cell::Cell::new((u64::MAX, [0; DATE_LEN])) };
}

/// The connection's read side and socket, shared by the connection's driver
/// ([`serve`]) and the body of its request in flight ([`Body`]). Both run in the
/// connection's task and lock it only inside a poll, so the lock is never contended.
struct Shared {
    io: EdgeIo,
    /// Bytes read and not yet parsed or decoded.
    buf: Bytes,
    /// A request head arriving in pieces, gathered with amortized growth (joining
    /// each read to `buf` would copy the head again per read: quadratic in a head
    /// sent a few bytes at a time); moved to `buf` once its end may have arrived.
    grow: BytesMut,
    /// Bytes of `grow` already searched for the head's end.
    scanned: usize,
    /// The request body being read.
    decode: Decode,
    /// Bytes of `100 Continue` still to write, when the client asked for it and
    /// the service has begun to read the body.
    cont: Continue,
    /// The client ended its side of the connection (a read returned 0).
    eof: bool,
}

/// The `Expect: 100-continue` of the request in flight.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Continue {
    /// Not asked for, or sent.
    No,
    /// Asked for; sent at the body's first read.
    Asked,
    /// Being written: bytes written so far.
    Writing(usize),
}

const CONTINUE: &[u8] = b"HTTP/1.1 100 Continue\r\n\r\n";

impl Shared {
    /// The state of a connection on `io`: nothing read yet, no body being read.
    fn new(io: EdgeIo) -> Self {
        Shared {
            io,
            buf: Bytes::new(),
            grow: BytesMut::new(),
            scanned: 0,
            decode: Decode::Done,
            cont: Continue::No,
            eof: false,
        }
    }

    /// Reads once from the socket into the scratch buffer and appends the bytes to
    /// `buf`; `Ready(Ok(0))` at the end of the stream.
    fn poll_fill(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<usize>> {
        if self.eof {
            return Poll::Ready(Ok(0));
        }
        let buf = &mut self.buf;
        read_scratch(&mut self.io, &mut self.eof, cx, |new| {
            *buf = if buf.is_empty() {
                Bytes::copy_from_slice(new)
            } else {
                let mut joined = BytesMut::with_capacity(buf.len() + new.len());
                joined.extend_from_slice(buf);
                joined.extend_from_slice(new);
                joined.freeze()
            };
        })
    }

    /// Reads once from the socket and drops what it read (a lingering close);
    /// `Ready(Ok(0))` at the end of the stream.
    fn poll_discard(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<usize>> {
        self.buf = Bytes::new();
        self.grow = BytesMut::new();
        if self.eof {
            return Poll::Ready(Ok(0));
        }
        read_scratch(&mut self.io, &mut self.eof, cx, |_| {})
    }

    /// Reads more of a request head. The first read of a head goes to `buf` as any
    /// read does (a head usually arrives whole); later ones are gathered in `grow`.
    fn poll_fill_head(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<usize>> {
        if self.grow.is_empty() && self.buf.is_empty() {
            return self.poll_fill(cx);
        }
        if self.eof {
            return Poll::Ready(Ok(0));
        }
        if self.grow.is_empty() {
            self.grow.reserve(2 * self.buf.len());
            self.grow.extend_from_slice(&self.buf);
            // Parsed already (incomplete): only new bytes can end the head.
            self.scanned = self.buf.len();
            self.buf = Bytes::new();
        }
        let grow = &mut self.grow;
        read_scratch(&mut self.io, &mut self.eof, cx, |new| {
            grow.extend_from_slice(new);
        })
    }

    /// Drops empty lines (CRLF or a bare LF) before a request line (RFC 9112 §2.2
    /// lets a server ignore at least one), so that an empty line in hand always ends
    /// a head. A CR not followed by LF is left for the parser, which refuses it.
    fn skip_empty_lines(&mut self) {
        let k = empty_lines(&self.buf);
        if k > 0 {
            let _ = self.buf.split_to(k);
        }
        let k = empty_lines(&self.grow);
        if k > 0 {
            let _ = self.grow.split_to(k);
            self.scanned = self.scanned.saturating_sub(k);
        }
    }

    /// No byte of a next request is in hand (the bytes the protocol sniff read
    /// included).
    fn is_idle(&self) -> bool {
        self.buf.is_empty() && self.grow.is_empty() && !self.io.has_replay()
    }

    /// Moves a head gathered in `grow` to `buf` for parsing once an empty line (its
    /// end) may have arrived or it is over `cap`; searches only the new bytes.
    fn settle_head(&mut self, cap: usize) {
        if self.grow.is_empty() {
            return;
        }
        let from = self.scanned.saturating_sub(2);
        let new = &self.grow[from..];
        let ended = new.windows(2).any(|w| w == b"\n\n") || new.windows(3).any(|w| w == b"\n\r\n");
        self.scanned = self.grow.len();
        if ended || self.grow.len() > cap {
            // Taken whole, spare capacity included: `split` would leave the spare
            // part in `grow`, and with it the whole allocation, held by an idle
            // connection after the request is done.
            self.buf = std::mem::take(&mut self.grow).freeze();
            self.scanned = 0;
        }
    }

    /// Writes what is left of `100 Continue`, if it is being written.
    fn poll_continue(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while let Continue::Writing(at) = self.cont {
            let n =
                std::task::ready!(Pin::new(&mut self.io)
                    .poll_write_vectored(cx, &[IoSlice::new(&CONTINUE[at..])]))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            self.cont = if at + n == CONTINUE.len() {
                Continue::No
            } else {
                Continue::Writing(at + n)
            };
        }
        Poll::Ready(Ok(()))
    }

    /// The next frame of the request body (see [`Body`]).
    fn poll_body(&mut self, cx: &mut Context<'_>) -> Poll<Option<io::Result<Bytes>>> {
        loop {
            if self.decode.is_done() {
                return Poll::Ready(None);
            }
            if !self.buf.is_empty() {
                // The client sent body bytes without waiting: no `100 Continue` now
                // (RFC 9110 §10.1.1 lets a server omit it once content has arrived).
                if self.cont == Continue::Asked {
                    self.cont = Continue::No;
                }
                match self.decode.next(&mut self.buf) {
                    Ok(Some(data)) => return Poll::Ready(Some(Ok(data))),
                    Ok(None) => continue,
                    Err(e) => {
                        self.decode = Decode::Broken;
                        return Poll::Ready(Some(Err(e)));
                    }
                }
            }
            if self.cont == Continue::Asked {
                self.cont = Continue::Writing(0);
            }
            if let Err(e) = std::task::ready!(self.poll_continue(cx)) {
                self.decode = Decode::Broken;
                return Poll::Ready(Some(Err(e)));
            }
            match std::task::ready!(self.poll_fill(cx)) {
                Ok(0) => {
                    self.decode = Decode::Broken;
                    return Poll::Ready(Some(Err(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        "the client closed the connection before the request body was complete",
                    ))));
                }
                Ok(_) => {}
                Err(e) => {
                    self.decode = Decode::Broken;
                    return Poll::Ready(Some(Err(e)));
                }
            }
        }
    }

    /// Settles the request body once the service has answered: a `100 Continue`
    /// partly written is finished first (the final head must not start inside it;
    /// one not begun is not sent at all), then what is left of the body is drained
    /// if it has arrived ([`Shared::drain_now`]). `Ready(true)` if the body was read
    /// to its end, so the connection can serve another request.
    fn poll_settle_body(&mut self, cx: &mut Context<'_>) -> Poll<bool> {
        if matches!(self.cont, Continue::Writing(at) if at > 0) {
            // Told to go on just now (or the write failed): the client sends the
            // body after it, and none of it is in hand.
            let _ = std::task::ready!(self.poll_continue(cx));
            self.cont = Continue::No;
            return Poll::Ready(false);
        }
        let drained = self.drain_now(cx);
        self.cont = Continue::No;
        Poll::Ready(drained)
    }

    /// Decodes and drops what is left of the request body, from the bytes already
    /// read and reads that need no wait, up to [`DRAIN_NOW_BYTES`]; true if the body
    /// ended (the connection can serve another request).
    fn drain_now(&mut self, cx: &mut Context<'_>) -> bool {
        if self.cont != Continue::No {
            // The client waits for our word before it sends the body (or is in the
            // middle of being told to): what it sends next is unknown.
            return false;
        }
        let mut seen = 0usize;
        while !self.decode.is_done() && seen <= DRAIN_NOW_BYTES {
            if self.buf.is_empty() {
                match self.poll_fill(cx) {
                    Poll::Ready(Ok(n)) if n > 0 => {}
                    _ => return false,
                }
            }
            match self.decode.next(&mut self.buf) {
                Ok(Some(data)) => seen += data.len(),
                Ok(None) => {}
                Err(_) => return false,
            }
        }
        self.decode.is_done()
    }
}

/// Reads once from `io` into the per-thread scratch buffer and hands the bytes that
/// arrived, if any, to `keep`; `Ready(Ok(0))` at the end of the stream, which sets
/// `eof`.
fn read_scratch(
    io: &mut EdgeIo,
    eof: &mut bool,
    cx: &mut Context<'_>,
    keep: impl FnOnce(&[u8]),
) -> Poll<io::Result<usize>> {
    let read = SCRATCH.with(|s| {
        let mut scratch = s.borrow_mut();
        let mut rb = ReadBuf::new(&mut scratch[..]);
        match Pin::new(&mut *io).poll_read(cx, &mut rb) {
            Poll::Ready(Ok(())) => {
                let new = rb.filled();
                if !new.is_empty() {
                    keep(new);
                }
                Poll::Ready(Ok(new.len()))
            }
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Pending => Poll::Pending,
        }
    });
    if let Poll::Ready(Ok(0)) = read {
        *eof = true;
    }
    read
}

/// Bytes of whole empty lines (`\r\n` or `\n`) at the start of `bytes`.
fn empty_lines(bytes: &[u8]) -> usize {
    let mut k = 0;
    loop {
        match &bytes[k..] {
            [b'\r', b'\n', ..] => k += 2,
            [b'\n', ..] => k += 1,
            _ => return k,
        }
    }
}

/// Locks the shared state; a poisoned lock (a panic in another poll of the same
/// task) is taken as it is, since the state is only ever changed by whole steps.
fn lock(shared: &Mutex<Shared>) -> MutexGuard<'_, Shared> {
    shared.lock().unwrap_or_else(PoisonError::into_inner)
}

/// How a request body is framed and how far it has been read.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Decode {
    /// `Content-Length`: bytes still to come.
    Length(u64),
    /// `Transfer-Encoding: chunked`.
    Chunked(Chunk),
    /// Read to its end.
    Done,
    /// Failed (bad framing, a read error or an early end): never ends.
    Broken,
}

/// Where a chunked body's decoder stands (RFC 9112 §7.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Chunk {
    /// In a chunk-size line: the size so far and the bytes of the line seen.
    Size {
        size: u64,
        digits: u8,
        line: usize,
    },
    /// After the size, in whitespace before a `;` or the CR (the `BWS` of RFC 9112
    /// §7.1.1).
    SizeWs {
        size: u64,
        line: usize,
    },
    /// In chunk extensions (after their first `;`), up to the CR.
    Ext {
        size: u64,
        line: usize,
    },
    /// After the size line's CR.
    SizeLf {
        size: u64,
    },
    /// In a chunk's data: bytes still to come.
    Data(u64),
    /// After a chunk's data: its CR, then its LF.
    DataCr,
    DataLf,
    /// After the last chunk: at the start of a trailer line (or the final CRLF).
    TrailerStart {
        seen: usize,
    },
    /// In a trailer field's name (a token), up to its colon.
    TrailerName {
        seen: usize,
    },
    /// In a trailer field's value, up to its CR.
    TrailerValue {
        seen: usize,
    },
    /// After a trailer line's CR.
    TrailerLf {
        seen: usize,
    },
    /// The final CR seen.
    EndLf,
    /// The final CRLF seen: the body ended.
    End,
}

/// A chunked body that breaks RFC 9112 §7.1.
fn bad_chunk(what: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!("invalid chunked request body: {what}"),
    )
}

impl Decode {
    fn is_done(&self) -> bool {
        matches!(self, Decode::Done)
    }

    /// The body's first frame of data out of `buf` (taken from its front, without a
    /// copy), `None` when `buf` holds none yet (it is then empty, or the body ended;
    /// framing bytes are consumed either way).
    ///
    /// # Errors
    /// Chunked framing that breaks RFC 9112 §7.1.
    fn next(&mut self, buf: &mut Bytes) -> io::Result<Option<Bytes>> {
        match self {
            Decode::Length(left) => {
                let n = (*left).min(buf.len() as u64) as usize;
                *left -= n as u64;
                if *left == 0 {
                    *self = Decode::Done;
                }
                Ok((n > 0).then(|| buf.split_to(n)))
            }
            Decode::Chunked(state) => {
                let data = decode_chunked(state, buf)?;
                if *state == Chunk::End {
                    *self = Decode::Done;
                }
                Ok(data)
            }
            Decode::Done => Ok(None),
            Decode::Broken => Err(io::Error::other("the request body failed earlier")),
        }
    }
}

/// Runs the chunked decoder over `buf` until it yields data, needs more bytes, or
/// the body ends (`state` is then [`Chunk::End`]); the framing bytes it passed are
/// taken from `buf`.
fn decode_chunked(state: &mut Chunk, buf: &mut Bytes) -> io::Result<Option<Bytes>> {
    let mut at = 0usize;
    let bytes = &buf[..];
    let result = loop {
        if let Chunk::Data(left) = *state {
            if at < bytes.len() {
                let n = left.min((bytes.len() - at) as u64) as usize;
                let left = left - n as u64;
                *state = if left == 0 {
                    Chunk::DataCr
                } else {
                    Chunk::Data(left)
                };
                let _ = buf.split_to(at);
                return Ok(Some(buf.split_to(n)));
            }
            break None;
        }
        if *state == Chunk::End {
            break None;
        }
        let Some(&b) = bytes.get(at) else {
            break None;
        };
        at += 1;
        *state = match *state {
            Chunk::Size { size, digits, line } => {
                if line >= MAX_CHUNK_LINE {
                    return Err(bad_chunk("chunk-size line too long"));
                }
                let line = line + 1;
                match (b as char).to_digit(16) {
                    Some(d) => {
                        // Leading zeros are allowed; only the value is bounded.
                        let size = size
                            .checked_mul(16)
                            .and_then(|n| n.checked_add(u64::from(d)))
                            .ok_or_else(|| bad_chunk("chunk size too large"))?;
                        Chunk::Size {
                            size,
                            digits: digits.saturating_add(1),
                            line,
                        }
                    }
                    None if digits == 0 => return Err(bad_chunk("chunk size is not hex")),
                    None => match b {
                        b'\r' => Chunk::SizeLf { size },
                        b';' => Chunk::Ext { size, line },
                        b' ' | b'\t' => Chunk::SizeWs { size, line },
                        _ => return Err(bad_chunk("chunk size is not hex")),
                    },
                }
            }
            Chunk::SizeWs { size, line } => {
                if line >= MAX_CHUNK_LINE {
                    return Err(bad_chunk("chunk-size line too long"));
                }
                let line = line + 1;
                match b {
                    b'\r' => Chunk::SizeLf { size },
                    b';' => Chunk::Ext { size, line },
                    b' ' | b'\t' => Chunk::SizeWs { size, line },
                    _ => return Err(bad_chunk("chunk size followed by neither ';' nor CRLF")),
                }
            }
            Chunk::Ext { size, line } => {
                if line >= MAX_CHUNK_LINE {
                    return Err(bad_chunk("chunk extensions too long"));
                }
                match b {
                    b'\r' => Chunk::SizeLf { size },
                    b'\n' => return Err(bad_chunk("bare LF in a chunk-size line")),
                    _ => Chunk::Ext {
                        size,
                        line: line + 1,
                    },
                }
            }
            Chunk::SizeLf { size } => match (b, size) {
                (b'\n', 0) => Chunk::TrailerStart { seen: 0 },
                (b'\n', n) => Chunk::Data(n),
                _ => return Err(bad_chunk("chunk-size line not ended by CRLF")),
            },
            Chunk::DataCr => match b {
                b'\r' => Chunk::DataLf,
                _ => return Err(bad_chunk("chunk data not followed by CRLF")),
            },
            Chunk::DataLf => match b {
                b'\n' => Chunk::Size {
                    size: 0,
                    digits: 0,
                    line: 0,
                },
                _ => return Err(bad_chunk("chunk data not followed by CRLF")),
            },
            Chunk::TrailerStart { seen } => match b {
                b'\r' => Chunk::EndLf,
                _ if is_token(b) => Chunk::TrailerName {
                    seen: trailer_seen(seen)?,
                },
                _ => return Err(bad_chunk("invalid trailer field")),
            },
            Chunk::TrailerName { seen } => match b {
                b':' => Chunk::TrailerValue {
                    seen: trailer_seen(seen)?,
                },
                _ if is_token(b) => Chunk::TrailerName {
                    seen: trailer_seen(seen)?,
                },
                _ => return Err(bad_chunk("invalid trailer field name")),
            },
            Chunk::TrailerValue { seen } => match b {
                b'\r' => Chunk::TrailerLf { seen },
                b'\t' => Chunk::TrailerValue {
                    seen: trailer_seen(seen)?,
                },
                0..=0x1f | 0x7f => return Err(bad_chunk("invalid trailer field value")),
                _ => Chunk::TrailerValue {
                    seen: trailer_seen(seen)?,
                },
            },
            Chunk::TrailerLf { seen } => match b {
                b'\n' => Chunk::TrailerStart {
                    seen: trailer_seen(seen)?,
                },
                _ => return Err(bad_chunk("trailer field not ended by CRLF")),
            },
            Chunk::EndLf => match b {
                b'\n' => Chunk::End,
                _ => return Err(bad_chunk("trailer section not ended by CRLF")),
            },
            Chunk::Data(_) | Chunk::End => unreachable!("handled above"),
        };
    };
    let _ = buf.split_to(at);
    Ok(result)
}

/// One more trailer byte after `seen` of them, within [`MAX_TRAILER_BYTES`].
fn trailer_seen(seen: usize) -> io::Result<usize> {
    if seen >= MAX_TRAILER_BYTES {
        return Err(bad_chunk("trailer section too large"));
    }
    Ok(seen + 1)
}

/// A `tchar` of RFC 9110 §5.6.2 (field names are tokens).
fn is_token(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// The body of a request read by this server: frames decoded from the connection
/// as the service polls them. Dropped before its end, the rest is drained (or the
/// connection closed) once the service has answered.
pub struct Body {
    shared: Arc<Mutex<Shared>>,
}

impl std::fmt::Debug for Body {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("h1::Body")
    }
}

impl HttpBody for Body {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        lock(&self.shared)
            .poll_body(cx)
            .map(|f| f.map(|r| r.map(Frame::data).map_err(BoxError::from)))
    }

    fn is_end_stream(&self) -> bool {
        lock(&self.shared).decode.is_done()
    }

    fn size_hint(&self) -> SizeHint {
        match lock(&self.shared).decode {
            Decode::Length(n) => SizeHint::with_exact(n),
            Decode::Done => SizeHint::with_exact(0),
            _ => SizeHint::default(),
        }
    }
}

/// A request head that cannot be served; answered with `status` and the connection
/// closed.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct HeadError {
    pub(super) status: u16,
    pub(super) reason: &'static str,
    /// What is wrong, for the error body's `message` (400 and 501; 414 and 431 say
    /// their limit instead).
    pub(super) message: &'static str,
}

/// 400 for a head that is not valid HTTP/1.x.
const BAD_REQUEST: HeadError =
    bad_request("The request is not valid HTTP: its request line or a header is malformed.");
/// 400 for a request target in none of the forms its method may use.
const BAD_TARGET: HeadError = bad_request(
    "The request target must be a path starting with `/` or an absolute URI (RFC 9112, section 3.2).",
);
const URI_TOO_LONG: HeadError = HeadError {
    status: 414,
    reason: "URI Too Long",
    message: "",
};
const HEAD_TOO_LARGE: HeadError = HeadError {
    status: 431,
    reason: "Request Header Fields Too Large",
    message: "",
};

/// 501 for a request body in a transfer coding other than `chunked`.
const NOT_IMPLEMENTED: HeadError = HeadError {
    status: 501,
    reason: "Not Implemented",
    message: "The request body's Transfer-Encoding has a coding other than chunked, which this server does not decode.",
};

/// 400 saying what is wrong with the head.
const fn bad_request(message: &'static str) -> HeadError {
    HeadError {
        status: 400,
        reason: "Bad Request",
        message,
    }
}

/// A parsed request head.
#[derive(Debug)]
pub(super) struct Head {
    pub(super) parts: http::request::Parts,
    /// Bytes of `buf` the head took.
    pub(super) len: usize,
    framing: Decode,
    /// The request lets the connection serve another after it (RFC 9112 §9.3).
    pub(super) keep_alive: bool,
    /// `Expect: 100-continue` on a request with a body.
    expects_continue: bool,
}

/// Most bytes a request head may take before it is refused: the longest request line
/// hyper accepted plus twice the header cap (lines are counted with their CRLF here
/// and by `max_header_bytes` with 4 bytes each).
fn head_cap(limits: &ConnLimits) -> usize {
    canned::MAX_URI_BYTES + 64 + limits.max_header_bytes.saturating_mul(2)
}

/// Parses the request head at the start of `buf`: `Ok(None)` if it is not complete
/// yet (and within the cap).
///
/// # Errors
/// A [`HeadError`] for a head that is not valid HTTP/1.x, too large, or framed
/// ambiguously (see the module doc).
pub(super) fn parse_head(buf: &Bytes, limits: &ConnLimits) -> Result<Option<Head>, HeadError> {
    let mut fields = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut req = httparse::Request::new(&mut fields);
    let len = match req.parse(buf) {
        Ok(httparse::Status::Complete(len)) => len,
        Ok(httparse::Status::Partial) => {
            if buf.len() <= head_cap(limits) {
                return Ok(None);
            }
            let line_ended = buf
                .windows(2)
                .take(canned::MAX_URI_BYTES + 64)
                .any(|w| w == b"\r\n");
            return Err(if line_ended {
                HEAD_TOO_LARGE
            } else {
                URI_TOO_LONG
            });
        }
        Err(httparse::Error::TooManyHeaders) => return Err(HEAD_TOO_LARGE),
        Err(_) => return Err(BAD_REQUEST),
    };
    let (Some(method), Some(path), Some(minor)) = (req.method, req.path, req.version) else {
        return Err(BAD_REQUEST);
    };
    if path.len() > canned::MAX_URI_BYTES {
        return Err(URI_TOO_LONG);
    }
    let method = Method::from_bytes(method.as_bytes()).map_err(|_| BAD_REQUEST)?;
    let uri = Uri::from_maybe_shared(buf.slice_ref(path.as_bytes())).map_err(|_| BAD_REQUEST)?;
    // RFC 9112 section 3.2: origin-form (`/path`) or absolute-form (`http://h/path`);
    // authority-form (`host:port`) is for CONNECT only and asterisk-form (`*`) for
    // OPTIONS only. Anything else (`GET health`) is malformed, not a path to 404.
    let target_ok = path.starts_with('/')
        || uri.scheme().is_some()
        || (path == "*" && method == Method::OPTIONS)
        || method == Method::CONNECT;
    if !target_ok {
        return Err(BAD_TARGET);
    }
    let version = if minor == 0 {
        Version::HTTP_10
    } else {
        Version::HTTP_11
    };
    let mut headers = HeaderMap::with_capacity(req.headers.len());
    let mut length: Option<u64> = None;
    let mut chunked = None::<bool>;
    let mut close = false;
    let mut keep_alive = false;
    let mut expects_continue = false;
    let mut other_coding = false;
    let mut hosts = 0u32;
    for field in req.headers.iter() {
        let name = HeaderName::from_bytes(field.name.as_bytes()).map_err(|_| BAD_REQUEST)?;
        let value =
            HeaderValue::from_maybe_shared(buf.slice_ref(field.value)).map_err(|_| BAD_REQUEST)?;
        if name == header::CONTENT_LENGTH {
            for part in field.value.split(|b| *b == b',') {
                let n = parse_length(part.trim_ascii()).ok_or(bad_request(
                    "The Content-Length header is not a decimal number of bytes.",
                ))?;
                if length.is_some_and(|l| l != n) {
                    return Err(bad_request(
                        "The request has Content-Length values that differ.",
                    ));
                }
                length = Some(n);
            }
        } else if name == header::TRANSFER_ENCODING {
            // Only the last coding decides; `chunked` before it is an error, and a
            // field with no coding at all leaves the framing unknown (400 below).
            let mut any = false;
            for coding in field.value.split(|b| *b == b',') {
                let coding = coding.trim_ascii();
                if coding.is_empty() {
                    continue;
                }
                if chunked == Some(true) {
                    return Err(bad_request(
                        "The Transfer-Encoding header has a coding after chunked.",
                    ));
                }
                any = true;
                let is_chunked = coding.eq_ignore_ascii_case(b"chunked");
                other_coding |= !is_chunked;
                chunked = Some(is_chunked);
            }
            if !any {
                chunked = Some(false);
            }
        } else if name == header::HOST {
            hosts += 1;
            if !is_host(field.value) {
                return Err(bad_request(
                    "The request's Host header is not a host with an optional port.",
                ));
            }
        } else if name == header::CONNECTION {
            for token in field.value.split(|b| *b == b',') {
                let token = token.trim_ascii();
                close |= token.eq_ignore_ascii_case(b"close");
                keep_alive |= token.eq_ignore_ascii_case(b"keep-alive");
            }
        } else if name == header::EXPECT {
            expects_continue = field
                .value
                .trim_ascii()
                .eq_ignore_ascii_case(b"100-continue");
        }
        headers.append(name, value);
    }
    // RFC 9112 §3.2: an HTTP/1.1 request carries exactly one Host; HTTP/1.0 at
    // most one.
    if hosts > 1 {
        return Err(bad_request("The request has more than one Host header."));
    }
    if hosts == 0 && version == Version::HTTP_11 {
        return Err(bad_request("The HTTP/1.1 request has no Host header."));
    }
    let framing = match (chunked, length) {
        (Some(_), Some(_)) => {
            return Err(bad_request(
                "The request has both Transfer-Encoding and Content-Length.",
            ))
        }
        (Some(_), None) if version == Version::HTTP_10 => {
            return Err(bad_request(
                "An HTTP/1.0 request cannot use Transfer-Encoding.",
            ))
        }
        // RFC 9112 §6.1: a coding the server does not understand gets 501; only
        // `chunked` is decoded here (a compressed body would reach the service
        // still compressed).
        (Some(true), None) if other_coding => return Err(NOT_IMPLEMENTED),
        (Some(true), None) => Decode::Chunked(Chunk::Size {
            size: 0,
            digits: 0,
            line: 0,
        }),
        (Some(false), None) => {
            return Err(bad_request(
                "The request's Transfer-Encoding does not end with chunked, so its body length is unknown.",
            ))
        }
        (None, Some(n)) if n > 0 => Decode::Length(n),
        (None, _) => Decode::Done,
    };
    let keep_alive = !close && (version == Version::HTTP_11 || keep_alive);
    let expects_continue = expects_continue && version == Version::HTTP_11 && !framing.is_done();
    let mut parts = Request::new(()).into_parts().0;
    parts.method = method;
    parts.uri = uri;
    parts.version = version;
    parts.headers = headers;
    Ok(Some(Head {
        parts,
        len,
        framing,
        keep_alive,
        expects_continue,
    }))
}

/// A valid `Host` value (RFC 9112 §3.2: `uri-host [ ":" port ]` of RFC 3986, or
/// empty): an IP literal in brackets or a registered name or IPv4 address (letters,
/// digits, `-._~`, `%`, sub-delims), then optionally `:` and digits. A list
/// (`a, b`, the form a proxy makes of two Host lines), userinfo or a path is not
/// one. Checked by hand: `http::uri::Authority` would copy the value.
fn is_host(v: &[u8]) -> bool {
    let (host, rest) = if v.first() == Some(&b'[') {
        let Some(close) = v.iter().position(|&b| b == b']') else {
            return false;
        };
        let inner = &v[1..close];
        if inner.is_empty()
            || !inner
                .iter()
                .all(|&b| b.is_ascii_hexdigit() || matches!(b, b':' | b'.' | b'v' | b'V'))
        {
            return false;
        }
        (&v[..0], &v[close + 1..])
    } else {
        let end = v.iter().position(|&b| b == b':').unwrap_or(v.len());
        (&v[..end], &v[end..])
    };
    let name_ok = host
        .iter()
        .all(|&b| b.is_ascii_alphanumeric() || b"-._~%!$&'()*+,;=".contains(&b));
    let port_ok = match rest {
        [] => true,
        [b':', port @ ..] => port.iter().all(u8::is_ascii_digit),
        _ => false,
    };
    name_ok && port_ok
}

/// A `Content-Length` value: ASCII digits only, no sign, no overflow.
fn parse_length(s: &[u8]) -> Option<u64> {
    if s.is_empty() || s.len() > 19 || !s.iter().all(u8::is_ascii_digit) {
        return None;
    }
    s.iter().try_fold(0u64, |n, d| {
        n.checked_mul(10)?.checked_add(u64::from(d - b'0'))
    })
}

/// What the driver does after a request head was awaited.
// The request is the case that matters and is moved once; boxing it would cost an
// allocation per request to save stack in the rare ones.
#[allow(clippy::large_enum_variant)]
enum Next {
    Request(Head),
    /// The client ended the connection between requests (or mid-head), or a read
    /// failed (a deadline passed).
    Close,
    Refuse(HeadError),
}

/// Waits for the next request head (see [`parse_head`]).
fn poll_head(shared: &Mutex<Shared>, cx: &mut Context<'_>, limits: &ConnLimits) -> Poll<Next> {
    let mut s = lock(shared);
    loop {
        s.skip_empty_lines();
        s.settle_head(head_cap(limits));
        if !s.buf.is_empty() {
            match parse_head(&s.buf, limits) {
                Ok(Some(head)) => {
                    let _ = s.buf.split_to(head.len);
                    return Poll::Ready(Next::Request(head));
                }
                Ok(None) => {}
                Err(e) => return Poll::Ready(Next::Refuse(e)),
            }
        }
        match std::task::ready!(s.poll_fill_head(cx)) {
            Ok(0) | Err(_) => return Poll::Ready(Next::Close),
            Ok(_) => {}
        }
    }
}

/// Most slices given to one `writev` (a batch of [`BATCH_FRAMES`] chunks takes three
/// each, plus the head and the last chunk).
const WRITE_SLICES: usize = 3 * BATCH_FRAMES + 2;

/// Most response frames gathered into one write.
const BATCH_FRAMES: usize = 16;

/// Gathering more ready frames stops once this many body bytes are in hand (64 KiB).
const BATCH_BYTES: usize = 64 * 1024;

/// Writes `parts` whole, in as few `writev` calls as the socket takes.
async fn write_all(shared: &Mutex<Shared>, parts: &[&[u8]]) -> io::Result<()> {
    let mut part = 0usize;
    let mut at = 0usize;
    std::future::poll_fn(|cx| {
        let mut s = lock(shared);
        loop {
            while part < parts.len() && at == parts[part].len() {
                part += 1;
                at = 0;
            }
            if part == parts.len() {
                return Poll::Ready(Ok(()));
            }
            let mut slices = [IoSlice::new(&[]); WRITE_SLICES];
            let mut k = 0;
            for (i, p) in parts[part..].iter().take(WRITE_SLICES).enumerate() {
                slices[k] = IoSlice::new(if i == 0 { &p[at..] } else { p });
                k += 1;
            }
            let mut n =
                std::task::ready!(Pin::new(&mut s.io).poll_write_vectored(cx, &slices[..k]))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            while n > 0 {
                let left = parts[part].len() - at;
                if n < left {
                    at += n;
                    n = 0;
                } else {
                    n -= left;
                    part += 1;
                    at = 0;
                }
            }
        }
    })
    .await
}

/// Ends the connection's write side (the client reads the end of the stream), then,
/// if `linger` and the client may still be sending (an unread or broken request body, bytes of
/// a refused or pipelined request), reads and drops what it sends until it closes
/// too, for at most [`LINGER_TOTAL`] and [`LINGER_QUIET`] without a byte.
///
/// # Why linger
/// Closing a socket with unread bytes in its receive queue makes Linux send a reset
/// instead of a FIN, and a reset can make the client drop our answer (a 413, 400 or
/// 401) still in its own receive queue before reading it: it sees "connection reset"
/// while still uploading (RFC 9112 §9.6, nginx's `lingering_close`). Reads land in
/// the per-thread scratch buffer, so lingering costs no memory.
async fn close(shared: &Mutex<Shared>, linger: bool) {
    let _ = std::future::poll_fn(|cx| Pin::new(&mut lock(shared).io).poll_shutdown(cx)).await;
    // Bytes already read that are not a whole request, or bytes still in the
    // kernel (a next request that arrived while the answer was made).
    let may_send = linger
        && std::future::poll_fn(|cx| {
            let s = lock(shared);
            let done = s.decode.is_done() && s.buf.is_empty() && s.grow.is_empty();
            Poll::Ready(!s.eof && (!done || s.io.poll_has_unread(cx)))
        })
        .await;
    if !may_send {
        return;
    }
    let linger = async {
        loop {
            let read = tokio::time::timeout(
                LINGER_QUIET,
                std::future::poll_fn(|cx| lock(shared).poll_discard(cx)),
            )
            .await;
            if !matches!(read, Ok(Ok(n)) if n > 0) {
                return;
            }
        }
    };
    let _ = tokio::time::timeout(LINGER_TOTAL, linger).await;
}

/// Longest a closing connection reads and drops what its client still sends
/// ([`close`]; nginx's `lingering_time` is 30 s, shorter here since shutdown waits
/// for it).
const LINGER_TOTAL: Duration = Duration::from_secs(5);

/// Longest a lingering close waits for the client's next bytes (nginx's
/// `lingering_timeout`).
const LINGER_QUIET: Duration = Duration::from_secs(1);

/// How a response body is framed on the wire.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Framing {
    /// No body bytes (`HEAD`, 1xx, 204, 304).
    None,
    /// `Content-Length`: bytes still to write.
    Length(u64),
    Chunked,
    /// Until the connection closes (an HTTP/1.0 client, length unknown).
    Close,
}

/// Length of an IMF-fixdate (`Sun, 06 Nov 1994 08:49:37 GMT`, RFC 9110 §5.6.7).
const DATE_LEN: usize = 29;

/// The `date` header value for now (RFC 9110 §6.6.1), formatted once a second per
/// thread.
fn date() -> [u8; DATE_LEN] {
    let now = std::time::SystemTime::now();
    let secs = now
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    DATE.with(|d| {
        let (at, value) = d.get();
        if at == secs {
            return value;
        }
        let mut value = [b' '; DATE_LEN];
        let text = httpdate::fmt_http_date(now);
        let n = text.len().min(DATE_LEN);
        value[..n].copy_from_slice(&text.as_bytes()[..n]);
        d.set((secs, value));
        value
    })
}

/// The response head's bytes and the body's framing; `keep_alive` is cleared when
/// the answer says `Connection: close` or cannot be framed without closing.
/// `lines` are the answer's field lines ([`super::lines`]), written after its
/// header map's fields.
///
/// The service's own `Transfer-Encoding` and `Connection` fields are replaced by
/// the framing and persistence decided here; its `Content-Length`, when valid, is
/// kept and decides the framing (a `HEAD` answer's says what a `GET` would carry).
fn encode_head<B: HttpBody>(
    resp: &Response<B>,
    lines: &[u8],
    method: &Method,
    version: Version,
    keep_alive: &mut bool,
) -> (Vec<u8>, Framing) {
    use http::StatusCode;
    let status = resp.status();
    let headers = resp.headers();
    let bodiless = status.is_informational() || status == StatusCode::NO_CONTENT;
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| parse_length(v.as_bytes()));
    let length = declared.or_else(|| resp.body().size_hint().exact());
    let framing = if bodiless || status == StatusCode::NOT_MODIFIED || *method == Method::HEAD {
        Framing::None
    } else {
        match length {
            Some(n) => Framing::Length(n),
            None if version == Version::HTTP_11 => Framing::Chunked,
            None => Framing::Close,
        }
    };
    let says_close = headers.get_all(header::CONNECTION).iter().any(|v| {
        v.as_bytes()
            .split(|b| *b == b',')
            .any(|t| t.trim_ascii().eq_ignore_ascii_case(b"close"))
    });
    if framing == Framing::Close || says_close {
        *keep_alive = false;
    }
    let mut size = 128 + lines.len();
    for (name, value) in headers {
        size += name.as_str().len() + value.len() + 4;
    }
    let mut head = Vec::with_capacity(size);
    head.extend_from_slice(b"HTTP/1.1 ");
    head.extend_from_slice(status.as_str().as_bytes());
    head.push(b' ');
    head.extend_from_slice(status.canonical_reason().unwrap_or("").as_bytes());
    head.extend_from_slice(b"\r\n");
    for (name, value) in headers {
        if name == header::TRANSFER_ENCODING
            || name == header::CONNECTION
            || name == header::CONTENT_LENGTH
        {
            continue;
        }
        head.extend_from_slice(name.as_str().as_bytes());
        head.extend_from_slice(b": ");
        head.extend_from_slice(value.as_bytes());
        head.extend_from_slice(b"\r\n");
    }
    head.extend_from_slice(lines);
    let length_field = match length {
        _ if bodiless => None,
        _ if status == StatusCode::NOT_MODIFIED => declared,
        _ if framing == Framing::Chunked => {
            head.extend_from_slice(b"transfer-encoding: chunked\r\n");
            None
        }
        n => n,
    };
    if let Some(n) = length_field {
        head.extend_from_slice(b"content-length: ");
        head.extend_from_slice(itoa::Buffer::new().format(n).as_bytes());
        head.extend_from_slice(b"\r\n");
    }
    if !headers.contains_key(header::DATE) {
        head.extend_from_slice(b"date: ");
        head.extend_from_slice(&date());
        head.extend_from_slice(b"\r\n");
    }
    if !*keep_alive {
        head.extend_from_slice(b"connection: close\r\n");
    } else if version == Version::HTTP_10 {
        head.extend_from_slice(b"connection: keep-alive\r\n");
    }
    head.extend_from_slice(b"\r\n");
    (head, framing)
}

/// A response body's next frame, as `poll_frame` gives it (`None` at its end).
type NextFrame = Option<Result<Frame<Bytes>, BoxError>>;

/// Polls `body` once: `Some` with its next frame if one is ready now.
fn poll_once(body: &mut Tracked) -> impl Future<Output = Option<NextFrame>> + '_ {
    std::future::poll_fn(move |cx| match Pin::new(&mut *body).poll_frame(cx) {
        Poll::Ready(f) => Poll::Ready(Some(f)),
        Poll::Pending => Poll::Ready(None),
    })
}

/// Writes the response: head, then the body's frames as they come. `Ok(true)` if
/// the connection can serve another request.
///
/// Frames that are ready together go out in one `writev` (up to [`BATCH_FRAMES`]
/// and [`BATCH_BYTES`]): the head with a JSON answer's body, a stream's events that
/// one upstream read produced with the last chunk after them. A stream's head goes
/// out alone when its first event is not ready yet, so the client has it at once.
///
/// # Errors
/// A write that failed; a body that failed or was shorter than its length ends the
/// connection (`Ok(false)`) without the rest, so the client sees a cut answer, not a
/// complete-looking one.
async fn respond(
    shared: &Mutex<Shared>,
    resp: Response<Tracked>,
    method: &Method,
    version: Version,
    mut keep_alive: bool,
) -> io::Result<bool> {
    let lines = resp.body().lines().as_bytes();
    let (head, mut framing) = encode_head(&resp, lines, method, version, &mut keep_alive);
    let mut body = resp.into_body();
    // In the head now: the buffer (1 KiB) is not held for the rest of a stream.
    drop(body.take_lines());
    if framing == Framing::None {
        write_all(shared, &[&head]).await?;
        return Ok(keep_alive);
    }
    let mut head = Some(head);
    let mut batch: Vec<Bytes> = Vec::new();
    loop {
        let mut next = poll_once(&mut body).await;
        if next.is_none() {
            if let Some(head) = head.take() {
                write_all(shared, &[&head]).await?;
            }
            next = Some(std::future::poll_fn(|cx| Pin::new(&mut body).poll_frame(cx)).await);
        }
        // Gather what is ready: `ended` is Some(whole) once the body is done.
        let mut ended = None;
        let mut bytes = 0usize;
        while let Some(frame) = next {
            match frame {
                None => {
                    ended = Some(true);
                    break;
                }
                Some(Err(e)) => {
                    tracing::debug!(error = %e, "response body failed; closing the connection");
                    ended = Some(false);
                    break;
                }
                // Trailers are not sent (no answer of ours has them).
                Some(Ok(frame)) => {
                    if let Ok(data) = frame.into_data() {
                        if !data.is_empty() {
                            bytes += data.len();
                            batch.push(data);
                        }
                    }
                }
            }
            if bytes >= BATCH_BYTES || batch.len() >= BATCH_FRAMES {
                break;
            }
            next = poll_once(&mut body).await;
        }
        // Frame the batch.
        let mut whole = ended.unwrap_or(true);
        if let Framing::Length(left) = &mut framing {
            for data in &mut batch {
                if data.len() as u64 > *left {
                    // Longer than it said: the rest cannot be sent on this connection.
                    data.truncate(*left as usize);
                    whole = false;
                }
                *left -= data.len() as u64;
            }
            if ended == Some(true) && *left > 0 {
                // Shorter than it said: the client must not take it as whole.
                whole = false;
            }
        }
        let mut lines = [[0u8; 18]; BATCH_FRAMES];
        let mut line_lens = [0usize; BATCH_FRAMES];
        if framing == Framing::Chunked {
            for (k, data) in batch.iter().enumerate() {
                line_lens[k] = chunk_line(data.len(), &mut lines[k]).len();
            }
        }
        let mut parts: Vec<&[u8]> = Vec::with_capacity(WRITE_SLICES);
        if let Some(head) = &head {
            parts.push(head);
        }
        for (k, data) in batch.iter().enumerate() {
            if framing == Framing::Chunked {
                parts.push(&lines[k][18 - line_lens[k]..]);
                parts.push(data);
                parts.push(b"\r\n");
            } else {
                parts.push(data);
            }
        }
        if framing == Framing::Chunked && ended == Some(true) {
            parts.push(b"0\r\n\r\n");
        }
        write_all(shared, &parts).await?;
        drop(parts);
        head = None;
        batch.clear();
        if !whole {
            return Ok(false);
        }
        if ended.is_some() {
            return Ok(keep_alive && framing != Framing::Close);
        }
    }
}

/// The chunk-size line for `len` bytes (hex, CRLF), written into `out`.
fn chunk_line(len: usize, out: &mut [u8; 18]) -> &[u8] {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut i = 16;
    let mut n = len;
    loop {
        i -= 1;
        out[i] = HEX[n & 15];
        n >>= 4;
        if n == 0 {
            break;
        }
    }
    out[16] = b'\r';
    out[17] = b'\n';
    &out[i..]
}

/// Serves HTTP/1.1 requests on `io` (already sniffed as not HTTP/2) one after
/// another until the client or a deadline ends the connection, a request or answer
/// says `Connection: close`, or `stopping` changes (the server's graceful shutdown:
/// an idle connection closes at once, a busy one after its answer).
///
/// `service` answers a request; `Err` (the client went away, see
/// [`super::edge_io::client_gone`]) ends the connection without an answer.
///
/// Not an `async fn`, and each request's work in a box of its own ([`exchange`]):
/// the connection's future is what every open connection holds for its whole life,
/// so it keeps only what waiting for the next head needs (the shared state, the
/// service, the shutdown watch; about 0.6 KiB), and a request's head, the service's
/// future and the answer being written live in an allocation made for the request
/// and freed with it (the request path's own future, kilobytes, is boxed by the
/// service). An `async fn` would also keep each by-value argument twice, in its slot
/// and in the local it is moved to.
pub(super) fn serve<S, F>(
    io: EdgeIo,
    service: S,
    stopping: tokio::sync::watch::Receiver<()>,
    limits: ConnLimits,
    refusals: canned::Refusals,
) -> impl Future<Output = ()>
where
    S: Fn(Request<crate::server::RequestBody>) -> F,
    F: Future<Output = io::Result<Response<Tracked>>>,
{
    let shared = Arc::new(Mutex::new(Shared::new(io)));
    let mut stopping = stopping;
    async move {
        loop {
            // Bytes waiting in the kernel are a request begun too: read, answered
            // and the connection closed, not dropped with a reset.
            let idle = std::future::poll_fn(|cx| {
                let s = lock(&shared);
                Poll::Ready(s.is_idle() && !s.io.poll_has_unread(cx))
            });
            if stopping.has_changed().unwrap_or(true) && idle.await {
                return;
            }
            // The head is taken into the exchange's box in the statement that read
            // it: a local holding it (or the `Next` it came in) would stay in this
            // future beside the box for the request's life (two of 264 bytes each,
            // `-Zprint-type-sizes`).
            let exchanged = match next_head(&shared, &limits, &mut stopping).await {
                Some(Next::Request(head)) => {
                    Ok(Box::pin(exchange(&shared, &service, head, &stopping)))
                }
                Some(Next::Refuse(e)) => Err(Some(e)),
                // The client ended, a read failed or a deadline passed: nothing to
                // linger for.
                Some(Next::Close) => Err(None),
                None => return,
            };
            let keep = match exchanged {
                Ok(answered) => answered.await,
                Err(None) => {
                    close(&shared, false).await;
                    return;
                }
                Err(Some(e)) => {
                    // The refused head is still in `buf` (`poll_head` leaves it).
                    let extra = if refusals.is_on() {
                        let seen = canned::glimpse(&lock(&shared).buf);
                        refusals.fields(&seen.refused())
                    } else {
                        Default::default()
                    };
                    let answer = canned::response(&e, &limits, &extra);
                    let _ = write_all(&shared, &[&answer]).await;
                    false
                }
            };
            if !keep {
                close(&shared, true).await;
                return;
            }
        }
    }
}

/// The next request head on the connection (or why there is none), read within
/// the connection's deadlines; `None` when shutdown (`stopping`) ends the wait while
/// no byte of a head is in hand. A head that has begun is read and answered (within
/// `header_timeout`), then the connection closes.
async fn next_head(
    shared: &Arc<Mutex<Shared>>,
    limits: &ConnLimits,
    stopping: &mut tokio::sync::watch::Receiver<()>,
) -> Option<Next> {
    let mut stop = std::pin::pin!(stopping.changed());
    std::future::poll_fn(|cx| {
        if let Poll::Ready(next) = poll_head(shared, cx, limits) {
            return Poll::Ready(Some(next));
        }
        if lock(shared).is_idle() && stop.as_mut().poll(cx).is_ready() {
            return Poll::Ready(None);
        }
        Poll::Pending
    })
    .await
}

/// Serves one request: its body handed to `service` as [`Body`], the answer
/// written. Returns whether the connection can serve another.
fn exchange<'a, S, F>(
    shared: &'a Arc<Mutex<Shared>>,
    service: &S,
    head: Head,
    stopping: &'a tokio::sync::watch::Receiver<()>,
) -> impl Future<Output = bool> + 'a
where
    S: Fn(Request<crate::server::RequestBody>) -> F,
    F: Future<Output = io::Result<Response<Tracked>>> + 'a,
{
    // Not an `async fn`: the head is taken apart and the request handed to the
    // service here, so the future holds neither (an `async fn` kept its `head`
    // argument and the `parts` moved out of it, 488 bytes, for the request's whole
    // life: `-Zprint-type-sizes`, 1,544 bytes per request before).
    let Head {
        parts,
        framing,
        keep_alive,
        expects_continue,
        ..
    } = head;
    let (method, version) = (parts.method.clone(), parts.version);
    let body = if framing.is_done() {
        crate::server::RequestBody::Empty
    } else {
        let mut s = lock(shared);
        s.decode = framing;
        s.cont = if expects_continue {
            Continue::Asked
        } else {
            Continue::No
        };
        crate::server::RequestBody::H1(Body {
            shared: shared.clone(),
        })
    };
    let answer = service(Request::from_parts(parts, body));
    async move {
        let Ok(resp) = answer.await else {
            return false;
        };
        // The service has answered; whatever of the body it left is drained now if
        // it has arrived, else the connection closes after the answer.
        let read_whole = std::future::poll_fn(|cx| lock(shared).poll_settle_body(cx)).await;
        let stop = stopping.has_changed().unwrap_or(true);
        let keep_alive = keep_alive && read_whole && !stop;
        matches!(
            respond(shared, resp, &method, version, keep_alive).await,
            Ok(true)
        )
    }
}

#[cfg(test)]
mod tests;
