//! The upstream HTTP/1.1 client for plain-`http://` providers (local inference
//! servers, sidecars, internal gateways): a request written straight from the
//! request future, its answer parsed with `httparse`, the connection kept in a
//! per-core idle list while no request uses it.
//!
//! Why not hyper-util's pooled client for these: it runs every upstream connection
//! as a task of its own, behind a request channel, with its own buffers, so each
//! exchange costs a hand-off between two tasks, a pool checkout future and a
//! wrapper, and each upstream connection in use holds about 26 KiB (a 32-slot
//! channel block, 8 KiB write and 6 KiB read buffers, the task: `massif` at 2,048
//! loaded connections, README "Connections"). Issue 17 measured that side at about a
//! quarter of the gateway's instructions per JSON request. Here the request future
//! owns the connection while it writes the request and reads the head; the response
//! body owns it while the body is read, and hands it back to the idle list when the
//! body ends with the connection reusable. An idle connection is a socket and nothing
//! else. `https://` providers keep hyper-util's client (TLS, HTTP/2 by ALPN).
//!
//! The wire rules are RFC 9112's: the request carries `Host` and, for a body of known
//! length, `Content-Length` (else `Transfer-Encoding: chunked`); the answer's framing
//! is read as section 6.3 orders it (no body for `HEAD`, 1xx, 204 and 304; chunked
//! when `Transfer-Encoding` ends in `chunked`; else `Content-Length`, whose copies
//! must agree; else the body runs to the connection's close). Interim 1xx answers
//! are skipped. A connection goes back to the idle list only when its answer was read
//! exactly to its end, it was HTTP/1.1 without `Connection: close`, and nothing
//! follows it; every other connection is closed.
//!
//! Safety against double sends (seed 001, "Egress"): a request is written once. A
//! reused connection is checked before use (a connection the provider closed while
//! idle is readable: its end of file is seen without a read of the socket when the
//! reactor already knows it), and a failure after the request started going out is
//! reported as such (the caller may try another endpoint, not this one again).
//! Idle connections are closed after [`IDLE_TIMEOUT`], and a closed one is found
//! within [`REAP_EVERY`] by a reaper task per idle list, which runs only while the
//! list holds connections.

use std::io::{self, IoSlice};
use std::pin::Pin;
use std::sync::{Arc, Mutex, Weak};
use std::task::{ready, Context, Poll};
use std::time::{Duration, Instant};

use bytes::{Buf, Bytes, BytesMut};
use http::header::{HeaderMap, HeaderName, HeaderValue};
use http::{Method, Request, Response, StatusCode, Version};
use http_body::{Body as _, Frame, SizeHint};
use http_body_util::BodyExt;
use tokio::net::TcpStream;

use crate::body::{Body, BoxError};

/// Idle connections older than this are closed, not reused (90 s, as hyper-util's
/// pool before it).
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(90);

/// How often an idle list is swept for connections the provider closed and for
/// expired ones (5 s), while it holds any.
pub const REAP_EVERY: Duration = Duration::from_secs(5);

/// Largest response head accepted (status line and header fields, 256 KiB); a
/// provider sending more is answering badly.
pub const MAX_HEAD_BYTES: usize = 256 * 1024;

/// Most header fields in a response head (100, hyper's default).
pub const MAX_HEADERS: usize = 100;

/// Longest chunk-size line and most trailer bytes of a chunked body (4 KiB and
/// 64 KiB).
const MAX_CHUNK_LINE: usize = 4 * 1024;
const MAX_TRAILER_BYTES: usize = 64 * 1024;

/// A chunked body's end is read ahead of the reader when no more than this many
/// bytes follow the last data (the terminator, `\r\n0\r\n\r\n`, is 7).
const SETTLE_BELOW: usize = 64;

/// Bytes a read asks the socket for (8 KiB, hyper's first read size).
const READ_CHUNK: usize = 8 * 1024;

/// What went wrong with one exchange, by how far it got: before the request could be
/// sent (nothing reached the provider) or after it started going out.
#[derive(Debug)]
pub enum SendError {
    /// No connection: the name did not resolve, every address refused, ...
    Connect(io::Error),
    /// No connection within the connect timeout.
    ConnectTimeout,
    /// The request was (perhaps partly) written, then writing it or reading the
    /// answer's head failed.
    Exchange(io::Error),
}

impl std::fmt::Display for SendError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SendError::Connect(e) => write!(f, "connect: {e}"),
            SendError::ConnectTimeout => f.write_str("connect timed out"),
            SendError::Exchange(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for SendError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            SendError::Connect(e) | SendError::Exchange(e) => Some(e),
            SendError::ConnectTimeout => None,
        }
    }
}

/// An upstream connection between exchanges.
#[derive(Debug)]
struct Conn {
    tcp: TcpStream,
    /// `host:port` it is connected to.
    key: Arc<str>,
}

#[derive(Debug)]
struct Idle {
    conn: Conn,
    since: Instant,
}

#[derive(Debug, Default)]
struct IdleList {
    /// Oldest first; taken from the back.
    conns: Vec<Idle>,
    /// A reaper task runs for this list.
    reaping: bool,
}

/// The idle connections of one provider, one list per serving thread (indexed as
/// [`crate::server::core_index`]), each of at most `max_idle`.
#[derive(Debug)]
struct Shared {
    lists: Box<[Mutex<IdleList>]>,
    max_idle: usize,
}

/// The HTTP/1.1 client of one `http://` provider. Cheap to share.
#[derive(Debug, Clone)]
pub struct H1Client {
    shared: Arc<Shared>,
    connect_timeout: Duration,
}

impl H1Client {
    /// A client with `lists` idle lists of at most `max_idle` connections each, and
    /// `connect_timeout` for TCP connection setup.
    pub fn new(lists: usize, max_idle: usize, connect_timeout: Duration) -> H1Client {
        H1Client {
            shared: Arc::new(Shared {
                lists: (0..lists.max(1)).map(|_| Mutex::default()).collect(),
                max_idle,
            }),
            connect_timeout,
        }
    }

    /// Sends `req` (an `http://` URI with a host) and resolves to the answer's head;
    /// its body reads the rest from the connection.
    ///
    /// # Errors
    /// [`SendError`]: where the exchange failed, which says whether the provider can
    /// have seen the request.
    ///
    /// Not an `async fn`, so that the future holds the request's head once (an
    /// `async fn` keeps its by-value argument beside the parts taken from it).
    pub fn send(
        &self,
        req: Request<Body>,
    ) -> impl std::future::Future<Output = Result<Response<Body>, SendError>> + Send + '_ {
        let (parts, body) = req.into_parts();
        async move {
            let Some(authority) = parts.uri.authority() else {
                return Err(SendError::Connect(invalid("the request URI has no host")));
            };
            // Written after the other tasks this pass of the runtime woke, not at
            // once: requests that arrived together then reach the provider together,
            // and it is woken once for them instead of once each. Writing at once
            // doubled the rescheduling interrupts between the cores per request
            // (0.13 -> 0.30, `benches/load/wakeups.sh`) and raised the system time;
            // hyper-util's connection task deferred its writes the same way.
            // Before the checkout: nothing is held while waiting, so a request
            // dropped here costs no pooled connection.
            tokio::task::yield_now().await;
            let list = crate::server::core_index().min(self.shared.lists.len() - 1);
            let key = authority.as_str();
            let conn = match self.shared.checkout(list, key) {
                Some(c) => c,
                None => self.connect(authority).await?,
            };
            let head_only = parts.method == Method::HEAD;
            let mut ex = Exchange {
                conn,
                buf: BytesMut::new(),
                early: None,
                closed: false,
            };
            let written = ex.write_request(&parts, authority, body, head_only).await;
            // The head is on the wire: its fields (a map with room for a dozen,
            // 1.25 KB) are not held while the answer is awaited, most of an
            // exchange's life under load (heaptrack, 1,024 loaded connections).
            drop(parts);
            let broken = written.is_err();
            let mut head = match written {
                Ok(()) => ex.read_head(head_only).await.map_err(SendError::Exchange)?,
                Err(Written::Body(e)) => return Err(SendError::Exchange(e)),
                // A provider may answer before it read the whole request (a 413 for a
                // body over its limit) and stop reading or close: the writing stopped
                // there, and that answer is the outcome.
                Err(Written::Answered) => {
                    ex.read_head(head_only).await.map_err(SendError::Exchange)?
                }
                // The write broke: an answer read before the break is still the
                // outcome (the reset that followed it may also have discarded it).
                Err(Written::Socket(e)) => match ex.read_head(head_only).await {
                    Ok(head) => head,
                    Err(_) => return Err(SendError::Exchange(e)),
                },
            };
            if broken {
                head.reusable = false;
            }
            let framing = head.framing;
            let mut res = Response::new(crate::body::empty());
            *res.status_mut() = head.status;
            *res.version_mut() = head.version;
            *res.headers_mut() = head.headers;
            let mut body = H1Body {
                ex: Some(ex),
                framing,
                reusable: head.reusable,
                shared: Arc::clone(&self.shared),
                list,
            };
            if body.framing == Framing::Length(0) {
                // Nothing to read: the connection is free now, whether or not the
                // caller ever polls the empty body.
                body.finish();
            }
            *res.body_mut() = body.boxed_unsync().into();
            Ok(res)
        }
    }

    async fn connect(&self, authority: &http::uri::Authority) -> Result<Conn, SendError> {
        let host = authority.host();
        // An IPv6 literal comes bracketed in a URI.
        let host = host
            .strip_prefix('[')
            .and_then(|h| h.strip_suffix(']'))
            .unwrap_or(host);
        let port = authority.port_u16().unwrap_or(80);
        let attempt = async {
            let mut last = None;
            for addr in tokio::net::lookup_host((host, port)).await? {
                match TcpStream::connect(addr).await {
                    Ok(tcp) => return Ok(tcp),
                    Err(e) => last = Some(e),
                }
            }
            Err(last.unwrap_or_else(|| invalid("the host name resolved to no address")))
        };
        let tcp = match tokio::time::timeout(self.connect_timeout, attempt).await {
            Err(_) => return Err(SendError::ConnectTimeout),
            Ok(Err(e)) => return Err(SendError::Connect(e)),
            Ok(Ok(tcp)) => tcp,
        };
        // Small requests go out at once; a dead peer is found by TCP keepalive.
        let _ = tcp.set_nodelay(true);
        let ka = socket2::TcpKeepalive::new().with_time(Duration::from_secs(60));
        let _ = socket2::SockRef::from(&tcp).set_tcp_keepalive(&ka);
        Ok(Conn {
            tcp,
            key: Arc::from(authority.as_str()),
        })
    }
}

fn invalid(msg: &'static str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg)
}

fn eof(msg: &'static str) -> io::Error {
    io::Error::new(io::ErrorKind::UnexpectedEof, msg)
}

impl Shared {
    /// An idle connection to `key` that is still open, if the list has one.
    fn checkout(&self, list: usize, key: &str) -> Option<Conn> {
        let mut l = self.lists[list].lock().unwrap_or_else(|p| p.into_inner());
        let now = Instant::now();
        while let Some(idle) = l.conns.pop() {
            if now.saturating_duration_since(idle.since) > IDLE_TIMEOUT {
                // The rest are older still.
                l.conns.clear();
                return None;
            }
            if &*idle.conn.key == key && still_open(&idle.conn.tcp) {
                return Some(idle.conn);
            }
        }
        None
    }

    /// Keeps `conn` for reuse (closes it when the list is full), and starts the
    /// list's reaper if none runs.
    fn checkin(self: &Arc<Self>, list: usize, conn: Conn) {
        let mut l = self.lists[list].lock().unwrap_or_else(|p| p.into_inner());
        if l.conns.len() >= self.max_idle {
            return;
        }
        l.conns.push(Idle {
            conn,
            since: Instant::now(),
        });
        if !l.reaping {
            if let Ok(rt) = tokio::runtime::Handle::try_current() {
                l.reaping = true;
                rt.spawn(reap(Arc::downgrade(self), list, REAP_EVERY));
            }
        }
    }
}

/// Closes the idle connections of list `list` that expired or that the provider
/// closed, every `every` ([`REAP_EVERY`]), until the list is empty (or the client
/// is gone).
async fn reap(shared: Weak<Shared>, list: usize, every: Duration) {
    loop {
        tokio::time::sleep(every).await;
        let Some(s) = shared.upgrade() else { return };
        let mut l = s.lists[list].lock().unwrap_or_else(|p| p.into_inner());
        let now = Instant::now();
        l.conns.retain(|i| {
            now.saturating_duration_since(i.since) <= IDLE_TIMEOUT && still_open(&i.conn.tcp)
        });
        if l.conns.is_empty() {
            l.reaping = false;
            return;
        }
    }
}

/// Whether an idle connection can take a request: nothing to read on it. The end
/// of file of a provider that closed it, a reset, or stray bytes all make it
/// readable; readiness the reactor has not seen is not checked by a system call,
/// so this costs one only when the socket was last seen readable.
fn still_open(tcp: &TcpStream) -> bool {
    let mut cx = Context::from_waker(std::task::Waker::noop());
    let mut one = [0u8; 1];
    let mut b = tokio::io::ReadBuf::new(&mut one);
    tcp.poll_peek(&mut cx, &mut b).is_pending()
}

/// A connection in use, with the bytes read from it and not yet consumed.
#[derive(Debug)]
struct Exchange {
    conn: Conn,
    buf: BytesMut,
    /// A final answer's head that arrived while the request was being written.
    early: Option<Head>,
    /// The provider closed its side while the request was being written.
    closed: bool,
}

/// Why a request could not be written whole.
#[derive(Debug)]
enum Written {
    /// The request's own body failed or did not match its length.
    Body(io::Error),
    /// The connection failed.
    Socket(io::Error),
    /// The provider answered (or closed its side) before it took the whole
    /// request: the writing stopped.
    Answered,
}

/// A parsed response head.
#[derive(Debug)]
struct Head {
    status: StatusCode,
    version: Version,
    headers: HeaderMap,
    framing: Framing,
    /// HTTP/1.1 without `Connection: close`, framed by length or chunks.
    reusable: bool,
}

/// How the response body is delimited (RFC 9112 §6.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Framing {
    /// This many bytes remain.
    Length(u64),
    /// Chunked, in this state.
    Chunked(Chunk),
    /// To the connection's close.
    Close,
}

impl Exchange {
    /// Writes the request head and body (`head_only`: as for
    /// [`Exchange::read_head`]), watching for an early answer.
    async fn write_request(
        &mut self,
        parts: &http::request::Parts,
        authority: &http::uri::Authority,
        mut body: Body,
        head_only: bool,
    ) -> Result<(), Written> {
        let exact = body.size_hint().exact();
        let mut head = Vec::with_capacity(256 + 64 * parts.headers.len());
        head.extend_from_slice(parts.method.as_str().as_bytes());
        head.push(b' ');
        let target = parts.uri.path_and_query().map_or("/", |p| p.as_str());
        head.extend_from_slice(if target.is_empty() { "/" } else { target }.as_bytes());
        head.extend_from_slice(b" HTTP/1.1\r\n");
        if !parts.headers.contains_key(http::header::HOST) {
            head.extend_from_slice(b"host: ");
            head.extend_from_slice(authority.as_str().as_bytes());
            head.extend_from_slice(b"\r\n");
        }
        for (name, value) in &parts.headers {
            if is_framing(name) {
                continue;
            }
            head.extend_from_slice(name.as_str().as_bytes());
            head.extend_from_slice(b": ");
            head.extend_from_slice(value.as_bytes());
            head.extend_from_slice(b"\r\n");
        }
        let chunked = match exact {
            Some(0) if matches!(parts.method, Method::GET | Method::HEAD) => false,
            Some(n) => {
                head.extend_from_slice(b"content-length: ");
                head.extend_from_slice(itoa::Buffer::new().format(n).as_bytes());
                head.extend_from_slice(b"\r\n");
                false
            }
            None => {
                head.extend_from_slice(b"transfer-encoding: chunked\r\n");
                true
            }
        };
        head.extend_from_slice(b"\r\n");
        let mut sent: u64 = 0;
        let mut pending_head = Some(head);
        while let Some(frame) = body.frame().await {
            let frame =
                frame.map_err(|e| Written::Body(io::Error::other(format!("request body: {e}"))))?;
            let Ok(data) = frame.into_data() else {
                continue; // request trailers are not sent
            };
            if data.is_empty() {
                continue;
            }
            sent += data.len() as u64;
            if exact.is_some_and(|n| sent > n) {
                return Err(Written::Body(invalid(
                    "the request body is longer than its length",
                )));
            }
            let mut size_line = [0u8; 20];
            let size_line: &[u8] = if chunked {
                hex_line(data.len(), &mut size_line)
            } else {
                &[]
            };
            let head = pending_head.take().unwrap_or_default();
            let end: &[u8] = if chunked { b"\r\n" } else { b"" };
            self.write_all(&[&head, size_line, &data, end], head_only)
                .await?;
        }
        if exact.is_some_and(|n| sent != n) {
            return Err(Written::Body(invalid(
                "the request body is shorter than its length",
            )));
        }
        let head = pending_head.take().unwrap_or_default();
        let end: &[u8] = if chunked { b"0\r\n\r\n" } else { b"" };
        if !head.is_empty() || !end.is_empty() {
            self.write_all(&[&head, end], head_only).await?;
        }
        Ok(())
    }

    /// Writes all of `parts` in as few `writev` calls as the socket allows, reading
    /// what the provider sends meanwhile: stops with [`Written::Answered`] once a
    /// final answer's head has arrived or the provider closed its side (RFC 9112
    /// §9.6: a server may answer and stop reading a request it refuses), so a
    /// refused large body ends with the provider's answer, not a broken write or a
    /// wait for the first-byte timeout.
    async fn write_all(&mut self, parts: &[&[u8]], head_only: bool) -> Result<(), Written> {
        let mut bufs: smallvec::SmallVec<[IoSlice<'_>; 4]> = parts
            .iter()
            .filter(|p| !p.is_empty())
            .map(|p| IoSlice::new(p))
            .collect();
        let mut bufs = &mut bufs[..];
        std::future::poll_fn(|cx| {
            while !bufs.is_empty() {
                self.poll_answer(cx, head_only)?;
                if self.early.is_some() || self.closed {
                    return Poll::Ready(Err(Written::Answered));
                }
                let tcp = Pin::new(&mut self.conn.tcp);
                let n = ready!(tokio::io::AsyncWrite::poll_write_vectored(tcp, cx, bufs))
                    .map_err(Written::Socket)?;
                if n == 0 {
                    return Poll::Ready(Err(Written::Socket(io::ErrorKind::WriteZero.into())));
                }
                IoSlice::advance_slices(&mut bufs, n);
            }
            Poll::Ready(Ok(()))
        })
        .await
    }

    /// Reads what has arrived while the request is written (registering for more),
    /// setting [`Exchange::early`] once a final answer's head is complete (interim
    /// 1xx heads are dropped) and [`Exchange::closed`] at end of file.
    fn poll_answer(&mut self, cx: &mut Context<'_>, head_only: bool) -> Result<(), Written> {
        while self.early.is_none() && !self.closed {
            match self.poll_fill(cx) {
                Poll::Pending => return Ok(()),
                Poll::Ready(Err(e)) => return Err(Written::Socket(e)),
                Poll::Ready(Ok(0)) => self.closed = true,
                Poll::Ready(Ok(_)) => {
                    while let Some(head) = self.parse_head(head_only).map_err(Written::Socket)? {
                        if !head.status.is_informational()
                            || head.status == StatusCode::SWITCHING_PROTOCOLS
                        {
                            self.early = Some(head);
                            break;
                        }
                    }
                    if self.early.is_none() && self.buf.len() > MAX_HEAD_BYTES {
                        return Err(Written::Socket(invalid(
                            "the response head is larger than 256 KiB",
                        )));
                    }
                }
            }
        }
        Ok(())
    }

    /// Reads until the buffer holds at least one more byte; `Ok(0)` at end of file.
    ///
    /// Through `AsyncRead::poll_read`, not `try_read`: a read shorter than the room
    /// offered clears the socket's readiness (tokio's edge-triggered reading), so
    /// an idle connection's liveness check ([`still_open`]) needs no system call
    /// (with `try_read` it made a `recv` per reuse: 3 instead of 2 per request,
    /// `benches/load/syscalls.sh`, and more CPU per request than the instructions
    /// it saved).
    ///
    /// Room is reserved only once the socket is readable: a request waiting for its
    /// answer (most of an exchange's life under load) holds no read buffer, where
    /// reserving first held [`READ_CHUNK`] bytes per in-flight request for the whole
    /// wait (`benches/load/conns.sh`: memory per loaded connection). Checking the
    /// readiness costs no system call.
    fn poll_fill(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<usize>> {
        if self.buf.capacity() - self.buf.len() < READ_CHUNK / 8 {
            ready!(self.conn.tcp.poll_read_ready(cx))?;
            self.buf.reserve(READ_CHUNK);
        }
        tokio_util::io::poll_read_buf(Pin::new(&mut self.conn.tcp), cx, &mut self.buf)
    }

    /// Reads the response head (past any interim 1xx answers) of a request whose
    /// answer has no body when `head_only` (`HEAD`).
    async fn read_head(&mut self, head_only: bool) -> io::Result<Head> {
        loop {
            let head = match self.early.take() {
                Some(h) => Some(h),
                None => self.parse_head(head_only)?,
            };
            if let Some(head) = head {
                if head.status == StatusCode::SWITCHING_PROTOCOLS {
                    return Err(invalid("the provider switched protocols unasked"));
                }
                if head.status.is_informational() {
                    continue;
                }
                return Ok(head);
            }
            if self.buf.len() > MAX_HEAD_BYTES {
                return Err(invalid("the response head is larger than 256 KiB"));
            }
            let n = std::future::poll_fn(|cx| self.poll_fill(cx)).await?;
            if n == 0 {
                return Err(eof(if self.buf.is_empty() {
                    "connection closed before the response"
                } else {
                    "connection closed inside the response head"
                }));
            }
        }
    }

    /// The head at the start of the buffer, consumed from it, if it is all there;
    /// `head_only` as for [`Exchange::read_head`].
    fn parse_head(&mut self, head_only: bool) -> io::Result<Option<Head>> {
        if self.buf.is_empty() {
            return Ok(None);
        }
        let mut fields = [httparse::EMPTY_HEADER; MAX_HEADERS];
        let mut res = httparse::Response::new(&mut fields);
        let len = match res.parse(&self.buf) {
            Ok(httparse::Status::Complete(len)) if len <= MAX_HEAD_BYTES => len,
            Ok(httparse::Status::Complete(_)) => {
                return Err(invalid("the response head is larger than 256 KiB"))
            }
            Ok(httparse::Status::Partial) => return Ok(None),
            Err(httparse::Error::TooManyHeaders) => {
                return Err(invalid("the response has more than 100 header fields"))
            }
            Err(_) => return Err(invalid("the response head is not HTTP/1.1")),
        };
        let status = res
            .code
            .and_then(|c| StatusCode::from_u16(c).ok())
            .ok_or_else(|| invalid("the response status is not valid"))?;
        let version = if res.version == Some(1) {
            Version::HTTP_11
        } else {
            Version::HTTP_10
        };
        let base = self.buf.as_ptr() as usize;
        // Where each field's name and value lie in the buffer, so the values can
        // share it once it is frozen.
        let mut spans: smallvec::SmallVec<[(usize, usize, usize, usize); 24]> =
            smallvec::SmallVec::new();
        for f in res.headers.iter() {
            let n = f.name.as_ptr() as usize - base;
            let v = f.value.as_ptr() as usize - base;
            spans.push((n, n + f.name.len(), v, v + f.value.len()));
        }
        let head = self.buf.split_to(len).freeze();
        let mut headers = HeaderMap::with_capacity(spans.len());
        let mut length: Option<u64> = None;
        let mut chunked = false;
        let mut encoded = false;
        let mut reusable = version == Version::HTTP_11;
        for &(ns, ne, vs, ve) in &spans {
            let raw_name = &head[ns..ne];
            let raw_value = &head[vs..ve];
            if is_name(raw_name, b"content-length") {
                let n = parse_length(raw_value)?;
                if length.is_some_and(|l| l != n) {
                    return Err(invalid("the response has two different Content-Length"));
                }
                length = Some(n);
            } else if is_name(raw_name, b"transfer-encoding") {
                encoded = true;
                // The last coding decides; a later field continues the list.
                chunked = last_token(raw_value).eq_ignore_ascii_case(b"chunked");
            } else if is_name(raw_name, b"connection")
                && raw_value
                    .split(|&b| b == b',')
                    .any(|t| t.trim_ascii().eq_ignore_ascii_case(b"close"))
            {
                reusable = false;
            }
            if unread(raw_name) {
                continue;
            }
            let name = HeaderName::from_bytes(raw_name)
                .map_err(|_| invalid("a response header name is not valid"))?;
            let value = HeaderValue::from_maybe_shared(head.slice(vs..ve))
                .map_err(|_| invalid("a response header value is not valid"))?;
            headers.append(name, value);
        }
        let bodiless = head_only
            || status.is_informational()
            || status == StatusCode::NO_CONTENT
            || status == StatusCode::NOT_MODIFIED;
        let framing = match (encoded, chunked, length) {
            _ if bodiless => Framing::Length(0),
            (true, true, _) => Framing::Chunked(Chunk::Size),
            (true, false, _) => Framing::Close,
            (false, _, Some(n)) => Framing::Length(n),
            (false, _, None) => Framing::Close,
        };
        // With both framings the length is ignored (RFC 9112 §6.3 item 3) and the
        // connection is not trusted after the answer.
        if (encoded && length.is_some() && !bodiless) || framing == Framing::Close {
            reusable = false;
        }
        Ok(Some(Head {
            status,
            version,
            headers,
            framing,
            reusable,
        }))
    }
}

/// Headers the client writes itself (the body's framing, the host) or that are
/// about one connection (RFC 9110 §7.6.1), never copied from the request's map.
fn is_framing(name: &HeaderName) -> bool {
    use http::header;
    name == header::CONTENT_LENGTH
        || name == header::TRANSFER_ENCODING
        || name == header::CONNECTION
        || name == header::TE
        || name == header::UPGRADE
        || name == header::TRAILER
        || name.as_str() == "keep-alive"
        || name.as_str() == "proxy-connection"
}

/// Response header fields the gateway never reads from a provider's answer, left
/// out of the answer's map: building a name and a value and hashing them into the
/// map cost about 500 instructions per field (`benches/load/callgrind.sh`), and a
/// provider sends many of them (OpenAI: `date`, `server`, `cf-ray`, two
/// `set-cookie`, `strict-transport-security`, `alt-svc`, ...). The gateway answers
/// with headers of its own and relays none of these; `connection` is read from the
/// raw head before this filter. Whatever is not listed here stays in the map (the
/// framing fields too: a `HEAD` answer's `content-length` is its information).
fn unread(name: &[u8]) -> bool {
    let is = |n: &[u8]| is_name(name, n);
    match name.len() {
        4 => is(b"date") || is(b"etag") || is(b"vary"),
        6 => is(b"server") || is(b"cf-ray"),
        7 => is(b"alt-svc"),
        10 => is(b"set-cookie") || is(b"connection") || is(b"keep-alive"),
        13 => is(b"last-modified") || is(b"accept-ranges"),
        15 => is(b"cf-cache-status"),
        22 => is(b"x-content-type-options"),
        25 => is(b"strict-transport-security"),
        _ => false,
    }
}

/// Whether the field name `name` is `lower` in any case. `name` is a token as
/// `httparse` accepts it (RFC 9110 §5.6.2 `tchar`: letters, digits and
/// ``!#$%&'*+-.^_`|~``), and `lower` is made of lowercase letters, digits and `-`.
///
/// Eight bytes at a time, each with bit 0x20 set on both sides: that bit is what
/// tells a capital letter from its small one, and for these inputs it tells nothing
/// else (the bytes it would confuse with a digit or `-` are control characters, never
/// in a token). `[u8]::eq_ignore_ascii_case` folds each byte of both sides on its
/// own: about 640 instructions for the eight fields of an nginx answer's head, most
/// of them compares that match (`benches/load/callgrind.sh`).
fn is_name(name: &[u8], lower: &[u8]) -> bool {
    const CASE: u64 = 0x2020_2020_2020_2020;
    let word = |b: &[u8]| {
        let mut w = [0u8; 8];
        w[..b.len()].copy_from_slice(b);
        u64::from_le_bytes(w) | CASE
    };
    name.len() == lower.len()
        && name
            .chunks(8)
            .zip(lower.chunks(8))
            .all(|(a, b)| word(a) == word(b))
}

/// The last element of a comma-separated list, empty elements skipped (RFC 9110
/// §5.6.1).
fn last_token(b: &[u8]) -> &[u8] {
    b.rsplit(|&c| c == b',')
        .map(<[u8]>::trim_ascii)
        .find(|t| !t.is_empty())
        .unwrap_or(b"")
}

/// A `Content-Length` value: decimal digits only (a list of equal values, which
/// some servers send, is accepted as RFC 9112 §6.3 item 5 allows).
fn parse_length(v: &[u8]) -> io::Result<u64> {
    let mut value: Option<u64> = None;
    for part in v.split(|&b| b == b',') {
        let part = part.trim_ascii();
        if part.is_empty() || part.len() > 19 || !part.iter().all(u8::is_ascii_digit) {
            return Err(invalid("the response's Content-Length is not a number"));
        }
        let n = part
            .iter()
            .fold(0u64, |acc, d| acc * 10 + u64::from(d - b'0'));
        if value.is_some_and(|x| x != n) {
            return Err(invalid("the response has two different Content-Length"));
        }
        value = Some(n);
    }
    value.ok_or_else(|| invalid("the response's Content-Length is empty"))
}

/// `{len:x}\r\n`, the size line of a chunk.
fn hex_line(len: usize, out: &mut [u8; 20]) -> &[u8] {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut i = out.len() - 2;
    out[i] = b'\r';
    out[i + 1] = b'\n';
    let mut n = len;
    loop {
        i -= 1;
        out[i] = HEX[n & 15];
        n >>= 4;
        if n == 0 {
            return &out[i..];
        }
    }
}

/// Where a chunked body's decoder is (RFC 9112 §7.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Chunk {
    /// Before a chunk-size line.
    Size,
    /// Inside a chunk's data, this many bytes left.
    Data(u64),
    /// After a chunk's data, before its CRLF.
    DataEnd,
    /// After the last chunk, in the trailer section; this many trailer bytes read.
    Trailers(usize),
    /// The whole body was read.
    Done,
}

/// One step of the chunked decoder over `buf`.
#[derive(Debug, PartialEq, Eq)]
enum Step {
    /// Some of a chunk's data.
    Data(Bytes),
    /// The buffer holds too little to go on.
    More,
    /// The body ended (its trailers read and dropped).
    Done,
}

impl Chunk {
    /// Decodes from the start of `buf`, consuming what it reads.
    fn step(&mut self, buf: &mut BytesMut) -> io::Result<Step> {
        loop {
            match *self {
                Chunk::Size => {
                    let Some(nl) = memchr::memchr(b'\n', buf) else {
                        if buf.len() > MAX_CHUNK_LINE {
                            return Err(invalid("a chunk-size line is too long"));
                        }
                        return Ok(Step::More);
                    };
                    let line = &buf[..nl];
                    let digits = line.iter().take_while(|b| b.is_ascii_hexdigit()).count();
                    let rest = &line[digits..];
                    let rest = rest.strip_suffix(b"\r").unwrap_or(rest);
                    // Leading zeros are allowed in any number; the value must fit.
                    let zeros = line[..digits].iter().take_while(|&&b| b == b'0').count();
                    let significant = &line[zeros.min(digits.saturating_sub(1))..digits];
                    if digits == 0
                        || significant.len() > 16
                        || !(rest.is_empty() || matches!(rest[0], b';' | b' ' | b'\t'))
                    {
                        return Err(invalid("a chunk size is not valid"));
                    }
                    let size = significant.iter().fold(0u64, |acc, &d| {
                        acc << 4 | u64::from((d as char).to_digit(16).unwrap_or(0))
                    });
                    buf.advance(nl + 1);
                    *self = if size == 0 {
                        Chunk::Trailers(0)
                    } else {
                        Chunk::Data(size)
                    };
                }
                Chunk::Data(left) => {
                    if buf.is_empty() {
                        return Ok(Step::More);
                    }
                    let take = usize::try_from(left).unwrap_or(usize::MAX).min(buf.len());
                    let data = buf.split_to(take).freeze();
                    let left = left - take as u64;
                    *self = if left == 0 {
                        Chunk::DataEnd
                    } else {
                        Chunk::Data(left)
                    };
                    return Ok(Step::Data(data));
                }
                Chunk::DataEnd => match &buf[..] {
                    [b'\r', b'\n', ..] => {
                        buf.advance(2);
                        *self = Chunk::Size;
                    }
                    [b'\n', ..] => {
                        buf.advance(1);
                        *self = Chunk::Size;
                    }
                    [] | [b'\r'] => return Ok(Step::More),
                    _ => return Err(invalid("chunk data is not followed by CRLF")),
                },
                Chunk::Trailers(read) => {
                    let Some(nl) = memchr::memchr(b'\n', buf) else {
                        if read + buf.len() > MAX_TRAILER_BYTES {
                            return Err(invalid("the chunked trailers are too large"));
                        }
                        return Ok(Step::More);
                    };
                    let line = &buf[..nl];
                    let empty = line.is_empty() || line == b"\r";
                    buf.advance(nl + 1);
                    if empty {
                        *self = Chunk::Done;
                    } else {
                        *self = Chunk::Trailers(read + nl + 1);
                        if read + nl + 1 > MAX_TRAILER_BYTES {
                            return Err(invalid("the chunked trailers are too large"));
                        }
                    }
                }
                Chunk::Done => return Ok(Step::Done),
            }
        }
    }
}

/// A response body read from its connection; the connection goes back to the idle
/// list when the body was read to its end and can be reused, and is closed when the
/// body is dropped before that.
#[derive(Debug)]
struct H1Body {
    ex: Option<Exchange>,
    framing: Framing,
    reusable: bool,
    shared: Arc<Shared>,
    list: usize,
}

impl H1Body {
    /// The body was read to its end: the connection is kept when reusable and
    /// nothing follows the answer.
    fn finish(&mut self) {
        if let Some(ex) = self.ex.take() {
            if self.reusable && ex.buf.is_empty() {
                self.shared.checkin(self.list, ex.conn);
            }
        }
        self.framing = Framing::Length(0);
    }

    fn next(&mut self, cx: &mut Context<'_>) -> Poll<Option<io::Result<Bytes>>> {
        loop {
            let Some(ex) = self.ex.as_mut() else {
                return Poll::Ready(None);
            };
            match &mut self.framing {
                Framing::Length(0) => {
                    self.finish();
                    return Poll::Ready(None);
                }
                Framing::Length(left) => {
                    if !ex.buf.is_empty() {
                        let take = usize::try_from(*left)
                            .unwrap_or(usize::MAX)
                            .min(ex.buf.len());
                        let data = ex.buf.split_to(take).freeze();
                        *left -= take as u64;
                        if *left == 0 {
                            self.finish();
                        }
                        return Poll::Ready(Some(Ok(data)));
                    }
                }
                Framing::Chunked(state) => match state.step(&mut ex.buf) {
                    Err(e) => {
                        self.ex = None;
                        return Poll::Ready(Some(Err(e)));
                    }
                    Ok(Step::Done) => {
                        self.finish();
                        return Poll::Ready(None);
                    }
                    Ok(Step::Data(data)) => {
                        // The terminator often came with the last data: settle it
                        // now so the connection is free even if the reader stops
                        // at the last frame.
                        if *state == Chunk::DataEnd && ex.buf.len() <= SETTLE_BELOW {
                            let mut ahead = *state;
                            let mut peek = ex.buf.clone();
                            if ahead.step(&mut peek).ok() == Some(Step::Done) {
                                ex.buf = peek;
                                self.finish();
                            }
                        }
                        return Poll::Ready(Some(Ok(data)));
                    }
                    Ok(Step::More) => {}
                },
                Framing::Close => {
                    if !ex.buf.is_empty() {
                        return Poll::Ready(Some(Ok(ex.buf.split().freeze())));
                    }
                }
            }
            match ready!(ex.poll_fill(cx)) {
                Ok(0) => {
                    if self.framing == Framing::Close {
                        self.ex = None;
                        return Poll::Ready(None);
                    }
                    self.ex = None;
                    return Poll::Ready(Some(Err(eof(
                        "connection closed before the response body was complete",
                    ))));
                }
                Ok(_) => {}
                Err(e) => {
                    self.ex = None;
                    return Poll::Ready(Some(Err(e)));
                }
            }
        }
    }
}

impl http_body::Body for H1Body {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = self.get_mut();
        this.next(cx)
            .map(|r| r.map(|d| d.map(Frame::data).map_err(BoxError::from)))
    }

    fn is_end_stream(&self) -> bool {
        self.ex.is_none()
    }

    fn size_hint(&self) -> SizeHint {
        match self.framing {
            Framing::Length(n) => SizeHint::with_exact(n),
            _ => SizeHint::default(),
        }
    }
}

#[cfg(test)]
mod tests;
