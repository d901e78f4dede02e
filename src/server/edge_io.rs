//! The socket wrapper every accepted connection is served through: connection
//! deadlines on reads and stuck writes, the request accounting they follow, and the
//! watch for a client that leaves while its request is in flight.
//!
//! # Why a wrapper and not per-protocol timers
//! A connection's protocol is sniffed first ([`EdgeIo::sniff`] reads until the 24-byte
//! HTTP/2 preface matches or differs), and a silent socket, or one that sends
//! `PRI * HTTP/2.0\r\n` and stops, must not be held forever there. A header timer
//! that started after the sniff and restarted whenever the connection went idle (as
//! hyper's HTTP/1 `header_read_timeout` did) would measure keep-alive idle *plus* the
//! next head: a 75 s idle allowance would also give a slow head 75 s. HTTP/2 has only
//! keep-alive pings, which a live but idle client answers forever.
//!
//! The wrapper sees every read, and [`Activity`] tells it whether a request is in
//! flight (the service counts requests in; the response body's [`RequestGuard`] counts
//! them out when the server drops it), so one small mechanism covers both protocols
//! and the sniff:
//!
//! 1. While no request is in flight a deadline is armed: `first_byte_timeout` on a new
//!    connection, `idle_timeout` once a response is done (noticed at the next read
//!    of HTTP/1's server, [`super::h1`], or when hyper flushes the last of an HTTP/2
//!    answer; there the last stream's guard wakes the connection task).
//! 2. The first byte read while armed (HTTP/1, or any connection before its first
//!    request) re-arms it to `header_timeout`. HTTP/2 control frames (pings, window
//!    updates) after the first request do not: there only open streams count. A
//!    pipelined head that arrived with the previous request is parsed from the bytes
//!    already read, so if it is partial `idle_timeout` bounds the read of its rest.
//! 3. While a request is in flight no read deadline is armed: the body has its own
//!    bound in `ingress` and the answer the upstream timeouts. Writes are bounded
//!    instead: a write that finds the socket full starts `send_timeout`, and any
//!    write that makes progress ends it (nginx's `send_timeout`), so a client that
//!    stops reading a large answer or a stream cannot hold the connection, and the
//!    upstream work behind it, until shutdown.
//! 4. A read or a write that would wait past its deadline fails with `TimedOut`;
//!    the server then closes the connection.
//!
//! # The sniffed bytes
//! The bytes read by the sniff are handed to the server on its first read together
//! with whatever else has already arrived ([`EdgeIo::poll_read`]), so the first head
//! is usually whole at the first parse.
//!
//! Per request this costs an `Arc` clone, two counter increments, two clock reads and
//! at most two timer resets; no task, channel or allocation.
//!
//! # Watching for a client that leaves
//! The HTTP/1 server reads a connection only for a request's head and body, so a
//! client that closes while its answer is being made would go unnoticed until the
//! answer is written, and the provider would go on generating it. Instead the socket
//! is shared (`Arc<TcpStream>`; reads and writes go through `&TcpStream` as tokio's
//! own do), and the request's future and its response body poll a [`ClientWatch`],
//! which peeks one byte only when the socket is readable: the end of the stream or a
//! reset ends the request (its future is dropped, which cancels the upstream work),
//! while unread bytes are the rest of the body or a pipelined request. (A read for
//! this, as hyper's server made, would also need a buffer per request in flight.)

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Weak};
use std::task::{Context, Poll};

use bytes::Bytes;
use futures_util::task::AtomicWaker;
use http_body::{Body as HttpBody, Frame, SizeHint};
use socket2::SockRef;
use tokio::io::{AsyncRead, AsyncWrite, Interest, ReadBuf};
use tokio::net::TcpStream;
use tokio::time::{Instant, Sleep};

use super::lines::HeaderLines;
use super::ConnLimits;
use crate::body::{Body, BoxError};

/// Requests of one connection: started by the service, finished when the server drops the
/// response body. Shared by the connection's IO and its requests (HTTP/2 runs each
/// request in its own task, hence the atomics).
#[derive(Default)]
pub(super) struct Activity {
    /// Requests started; written only by the connection's task (the server calls the
    /// service there for both protocols).
    started: AtomicU64,
    /// Requests whose response body the server has dropped.
    finished: AtomicU64,
    /// An HTTP/2 request was seen: control frames then no longer start a head deadline.
    h2: AtomicBool,
    /// The connection task, woken when the last HTTP/2 stream ends in another task so
    /// that the idle deadline is armed on time, and when the connection is reclaimed.
    idle_waker: AtomicWaker,
    /// What the connection waits for, for [`Reclaim`]: [`IDLE_NO`], [`IDLE_FIRST_BYTE`]
    /// or [`IDLE_KEEP_ALIVE`]. Written by [`EdgeIo`] when its wait state changes.
    idle: AtomicU8,
    /// The HTTP/1 connection's task while its request waits for its answer, woken
    /// at the shutdown's drain deadline ([`Reclaim::wake_answers`]) so that the
    /// request can answer that it was cut short.
    answer_waker: AtomicWaker,
    /// The same for HTTP/2, whose requests each run in a task of their own: the
    /// tasks of the requests waiting, each registered once and taken out when its
    /// request ends ([`RequestGuard::waiting_h2`]).
    h2_answers: std::sync::Mutex<Vec<std::task::Waker>>,
    /// Set by [`Reclaim`]: the connection closes at its next idle wait.
    reclaim: AtomicBool,
    /// When the connection last went idle between requests ([`IDLE_KEEP_ALIVE`]),
    /// in µs of [`since_start`]: [`Reclaim`] closes the keep-alive connections idle
    /// longest first.
    idle_since_us: AtomicU64,
}

/// `at` in µs since the first call (the process's clock base for
/// [`Activity::idle_since_us`]; only compared with one another).
fn since_start(at: Instant) -> u64 {
    static BASE: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    let base = *BASE.get_or_init(Instant::now);
    u64::try_from(at.saturating_duration_since(base).as_micros()).unwrap_or(u64::MAX)
}

/// [`Activity::idle`]: a request head or a request is in hand.
const IDLE_NO: u8 = 0;
/// [`Activity::idle`]: a new connection that has sent nothing yet, as its task
/// found when it last read (a connection just accepted is [`IDLE_NO`] until its
/// task has looked: its request may already be waiting in the socket).
const IDLE_FIRST_BYTE: u8 = 1;
/// [`Activity::idle`]: a connection between requests.
const IDLE_KEEP_ALIVE: u8 = 2;

impl Activity {
    /// Counts a request in; the guard counts it out when dropped.
    pub(super) fn start(self: &Arc<Self>, h2: bool) -> RequestGuard {
        if h2 {
            self.h2.store(true, Ordering::Relaxed);
        }
        self.started.fetch_add(1, Ordering::Relaxed);
        RequestGuard(Arc::clone(self))
    }

    /// `Ready` once [`Reclaim`] has asked this connection to close (`cx` is woken
    /// when it does): an HTTP/2 connection then shuts down with a GOAWAY, which
    /// tells its client to send the next request elsewhere (a read error closed it
    /// unannounced, and a request sent meanwhile was lost without a word).
    pub(super) fn poll_reclaimed(&self, cx: &mut Context<'_>) -> Poll<()> {
        if self.reclaim.load(Ordering::Relaxed) {
            return Poll::Ready(());
        }
        self.idle_waker.register(cx.waker());
        if self.reclaim.load(Ordering::Relaxed) {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    }

    /// `(started, whether one is in flight)`.
    fn load(&self) -> (u64, bool) {
        let started = self.started.load(Ordering::Relaxed);
        (started, self.finished.load(Ordering::Acquire) != started)
    }
}

/// The connections one accept loop has started, for closing idle ones when the
/// process runs out of file descriptors.
///
/// # Why
/// An `accept` that fails with `EMFILE` or `ENFILE` leaves the new connection in the
/// kernel's backlog, and without a free descriptor it waits there until a deadline
/// closes some other connection: with the descriptor limit held by connections that
/// sent nothing (or by keep-alive connections between requests), a client with a
/// request in hand waited `first_byte_timeout` (10 s by default) or longer. Like
/// nginx's reuse of idle keep-alive connections when it runs short, the accept loop
/// then closes a few idle connections ([`Reclaim::reclaim`]): first those that have
/// not sent a byte (oldest first), then those between requests that have been idle
/// longest, as nginx drains its reusable connections least recently used first. A
/// connection with a request head or a request in hand is never closed for this.
///
/// One list per process ([`Reclaim::process`]), as the descriptor limit is the
/// process's: with a listener per core (`SO_REUSEPORT`), a list per accept loop left
/// the loop that ran short unable to close idle connections another loop had
/// accepted, and its client waited for their `first_byte_timeout`. The accept loops
/// take its lock once per accepted connection and on an accept error. A weak
/// reference per connection, with the dead ones dropped whenever the list has
/// doubled since the last sweep.
#[derive(Default)]
pub(super) struct Reclaim {
    conns: Vec<Weak<Activity>>,
    /// Live connections at the last sweep.
    live: usize,
}

impl Reclaim {
    /// Connections closed per accept error: nginx drains up to 32 idle
    /// connections each time it runs short.
    pub(super) const BATCH: usize = 32;

    /// The list of every connection the process's accept loops have started.
    pub(super) fn process() -> std::sync::MutexGuard<'static, Reclaim> {
        static LIST: std::sync::Mutex<Reclaim> = std::sync::Mutex::new(Reclaim {
            conns: Vec::new(),
            live: 0,
        });
        LIST.lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Wakes every HTTP/1 request still waiting for its answer (the drain deadline
    /// has passed: polled again, the request answers 503 `gateway_shutdown`).
    pub(super) fn wake_answers(&self) {
        for a in self.conns.iter().filter_map(Weak::upgrade) {
            a.answer_waker.wake();
            for w in lock_wakers(&a.h2_answers).drain(..) {
                w.wake();
            }
        }
    }

    /// Remembers a just-accepted connection.
    pub(super) fn add(&mut self, activity: &Arc<Activity>) {
        if self.conns.len() >= 2 * self.live + 64 {
            self.conns.retain(|c| c.strong_count() > 0);
            self.live = self.conns.len();
        }
        self.conns.push(Arc::downgrade(activity));
    }

    /// Makes up to `n` idle connections close (first those that have sent nothing,
    /// oldest first; then those between requests, idle longest first): connections
    /// asked before that are still open count toward `n`, and only the rest are
    /// asked and woken. Returns `(asked now, asked and still open)`.
    ///
    /// # Why idle longest first
    /// Taken in list order, the keep-alive connections closed were those accepted
    /// first, which under load are as likely as any to be sending their next request
    /// that moment; the client then reads a reset. One idle longest (a client's pool
    /// kept open and unused) is the least likely to be, and the least missed.
    ///
    /// # Why asked ones count
    /// At the descriptor limit `accept` fails with `EMFILE` even when no client
    /// waits (Linux reserves the descriptor before it looks at the backlog), and
    /// the accept loop retries within milliseconds, before the connections it asked
    /// have been polled and closed. Asking a fresh batch each time walked the whole
    /// list down to the newest connections, and closed one a client had just opened
    /// to send its request (the `input_extra.py` regression test, failing with a
    /// broken pipe on a loaded machine).
    pub(super) fn reclaim(&mut self, n: usize) -> (usize, usize) {
        let closing = self
            .conns
            .iter()
            .filter_map(Weak::upgrade)
            .filter(|a| a.reclaim.load(Ordering::Relaxed))
            .count();
        let n = n.saturating_sub(closing);
        let ask = |a: &Activity| {
            if a.reclaim.swap(true, Ordering::Relaxed) {
                return false;
            }
            a.idle_waker.wake();
            true
        };
        let mut asked = 0;
        for c in &self.conns {
            if asked == n {
                return (asked, closing + asked);
            }
            let Some(a) = c.upgrade() else { continue };
            if a.idle.load(Ordering::Relaxed) == IDLE_FIRST_BYTE && ask(&a) {
                asked += 1;
            }
        }
        if asked == n {
            // Enough without the keep-alive ones: no list of them made (an accept
            // loop without its spare calls this every few milliseconds).
            return (asked, closing + asked);
        }
        // (idle since, place in the list): ties go oldest first.
        let mut keep_alive: Vec<((u64, usize), Arc<Activity>)> = self
            .conns
            .iter()
            .enumerate()
            .filter_map(|(i, c)| Some((i, c.upgrade()?)))
            .filter(|(_, a)| {
                a.idle.load(Ordering::Relaxed) == IDLE_KEEP_ALIVE
                    && !a.reclaim.load(Ordering::Relaxed)
            })
            .map(|(i, a)| ((a.idle_since_us.load(Ordering::Relaxed), i), a))
            .collect();
        let take = (n - asked).min(keep_alive.len());
        if take > 0 && take < keep_alive.len() {
            keep_alive.select_nth_unstable_by_key(take - 1, |(key, _)| *key);
        }
        for (_, a) in &keep_alive[..take] {
            if ask(a) {
                asked += 1;
            }
        }
        (asked, closing + asked)
    }
}

/// A descriptor an accept loop keeps open (on `/dev/null`) to give back when the
/// process runs out of them, so that one `accept` can still tell whether a client
/// waits and take it ([`Reclaim`]'s why). Re-opened once there is room again.
///
/// The libev and libuv answer to `EMFILE` holds one the same way (there, to accept
/// and close the connection at once); here the client is served.
pub(super) struct Spare(Option<std::fs::File>);

impl Spare {
    /// A spare, open if a descriptor is free now.
    pub(super) fn open() -> Spare {
        Spare(std::fs::File::open("/dev/null").ok())
    }

    /// Closes the spare; whether there was one.
    pub(super) fn release(&mut self) -> bool {
        self.0.take().is_some()
    }

    /// Opens the spare again if it is closed and a descriptor is free (one system
    /// call, only while it is closed).
    pub(super) fn refill(&mut self) {
        if self.0.is_none() {
            *self = Spare::open();
        }
    }
}

/// One request in flight; travels in its response body.
pub(super) struct RequestGuard(Arc<Activity>);

impl RequestGuard {
    /// Registers the HTTP/1 task waiting for this request's answer, woken by
    /// [`Reclaim::wake_answers`].
    pub(super) fn waiting(&self, cx: &Context<'_>) {
        self.0.answer_waker.register(cx.waker());
    }

    /// Registers the HTTP/2 request's own task (once: a task's waker wakes it for
    /// its life); the guard of the answer takes it out again ([`H2Waiting`]).
    pub(super) fn waiting_h2(&self, cx: &Context<'_>) -> H2Waiting {
        lock_wakers(&self.0.h2_answers).push(cx.waker().clone());
        H2Waiting {
            activity: Arc::clone(&self.0),
            waker: cx.waker().clone(),
        }
    }
}

/// An HTTP/2 request's task registered with [`RequestGuard::waiting_h2`]; dropped
/// when the request has answered or is dropped, it takes the task out.
pub(super) struct H2Waiting {
    activity: Arc<Activity>,
    waker: std::task::Waker,
}

impl Drop for H2Waiting {
    fn drop(&mut self) {
        let mut list = lock_wakers(&self.activity.h2_answers);
        if let Some(i) = list.iter().position(|w| w.will_wake(&self.waker)) {
            list.swap_remove(i);
        }
    }
}

/// The list of waiting HTTP/2 tasks (a poisoned lock is taken anyway: a list of
/// wakers has no invariant a panic could break).
fn lock_wakers(
    m: &std::sync::Mutex<Vec<std::task::Waker>>,
) -> std::sync::MutexGuard<'_, Vec<std::task::Waker>> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Drop for RequestGuard {
    fn drop(&mut self) {
        let finished = self.0.finished.fetch_add(1, Ordering::AcqRel) + 1;
        if finished == self.0.started.load(Ordering::Relaxed) {
            // Only HTTP/2 registers a waker; for HTTP/1 this finds none.
            self.0.idle_waker.wake();
        }
    }
}

/// A response body that holds its request's [`RequestGuard`] until the server drops it,
/// and for HTTP/1 watches for the client going away while the body waits for its
/// next frame (a stream between events): the body then fails, so the server closes the
/// connection and drops it, as its own end-of-stream read did before
/// (see [`ClientWatch`]). It also carries the answer's field lines to the server
/// that writes its head ([`super::lines`]).
pub(super) struct Tracked {
    body: Body,
    /// `None` only for an answer the service made twice (never, by `Future`'s contract).
    _guard: Option<RequestGuard>,
    watch: Option<ClientWatch>,
    lines: HeaderLines,
}

impl Tracked {
    pub(super) fn new(
        body: Body,
        guard: Option<RequestGuard>,
        watch: Option<ClientWatch>,
        lines: HeaderLines,
    ) -> Self {
        Tracked {
            body,
            _guard: guard,
            watch,
            lines,
        }
    }

    /// The answer's field lines, written after its header map's fields.
    pub(super) fn lines(&self) -> &HeaderLines {
        &self.lines
    }

    /// Takes the answer's field lines (for a writer that knows only the header
    /// map: hyper's HTTP/2 server).
    pub(super) fn take_lines(&mut self) -> HeaderLines {
        std::mem::take(&mut self.lines)
    }

    /// Drops the answer's body unread and yields nothing instead (an answer to
    /// `HEAD`); the request's guard stays until the server drops this.
    pub(super) fn clear(&mut self) {
        self.body = crate::body::empty();
    }
}

impl HttpBody for Tracked {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = self.get_mut();
        match Pin::new(&mut this.body).poll_frame(cx) {
            Poll::Pending => match this.watch.as_mut().map(|w| w.poll_gone(cx, true)) {
                Some(Poll::Ready(())) => Poll::Ready(Some(Err(client_gone().into()))),
                _ => Poll::Pending,
            },
            polled => polled,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

/// The error a request or response body ends with when [`ClientWatch`] saw the
/// client go: the server closes the connection on it.
pub(super) fn client_gone() -> io::Error {
    io::Error::new(
        io::ErrorKind::ConnectionAborted,
        "the client closed the connection while its request was in flight",
    )
}

/// Which deadline is armed, for the error message.
#[derive(Clone, Copy)]
enum Wait {
    FirstByte,
    Head,
    Idle,
}

/// An accepted TCP stream with the connection deadlines and the canned-error
/// substitution described in the module doc.
pub(super) struct EdgeIo {
    /// Shared with the connection's [`ClientWatch`]es (HTTP/1 requests in flight).
    stream: Arc<TcpStream>,
    activity: Arc<Activity>,
    limits: ConnLimits,
    /// `Some` while no request is in flight.
    wait: Option<Wait>,
    deadline: Instant,
    /// Reset to `deadline` lazily, only when a wait has to be registered.
    sleep: Pin<Box<Sleep>>,
    /// `started` when the wait state was last brought up to date.
    seen: u64,
    /// While a request is in flight and a write found the socket full: when the
    /// write fails unless one makes progress first (`send_timeout` after the first
    /// such write). Cleared by every write that moves bytes.
    stalled: Option<Instant>,
    /// The bytes [`EdgeIo::sniff`] read, replayed to the server from `pre_at` to `pre_len`.
    pre: [u8; PREFACE.len()],
    pre_at: u8,
    pre_len: u8,
}

/// `TCP_NOTSENT_LOWAT` of every client socket, bytes: a write waits once this much
/// of it is still unsent, and the socket is writable again when half of that has
/// gone out.
///
/// # Why
/// `send_timeout` counts from the first write that found the socket full to the next
/// that moves bytes, and the kernel wakes a writer only when the socket is writable
/// again. Without a cap that is when a third of the send buffer has drained, and the
/// buffer autotunes up to `tcp_wmem`'s maximum (4 MiB on Linux by default): a
/// client reading steadily at under about 22 KB/s would be cut by the 60 s
/// default while it reads. With the cap a writer is woken after every 64 KiB the
/// client takes (about 1 KB/s against the default). It also keeps a stalled
/// client's answer in the gateway's own buffers rather than megabytes of kernel
/// memory; answers below it (every JSON answer and stream event) are unaffected.
#[cfg(any(target_os = "linux", target_os = "android"))]
const NOTSENT_LOWAT: u32 = 128 * 1024;

/// The HTTP/2 client connection preface (RFC 9113 §3.4); an HTTP/1 request never
/// starts with it.
const PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

impl EdgeIo {
    /// Wraps a just-accepted stream: the first-byte deadline starts now. On Linux the
    /// socket's unsent bytes are capped at [`NOTSENT_LOWAT`] (see there).
    pub(super) fn new(stream: TcpStream, activity: Arc<Activity>, limits: ConnLimits) -> Self {
        #[cfg(any(target_os = "linux", target_os = "android"))]
        let _ = SockRef::from(&stream).set_tcp_notsent_lowat(NOTSENT_LOWAT);
        let deadline = Instant::now() + limits.first_byte_timeout;
        // Not reclaimable until the first read has found the socket empty
        // (`read_stream`).
        activity.idle.store(IDLE_NO, Ordering::Relaxed);
        EdgeIo {
            stream: Arc::new(stream),
            activity,
            limits,
            wait: Some(Wait::FirstByte),
            deadline,
            sleep: Box::pin(tokio::time::sleep_until(deadline)),
            seen: 0,
            stalled: None,
            pre: [0; PREFACE.len()],
            pre_at: 0,
            pre_len: 0,
        }
    }

    /// Bytes read by [`EdgeIo::sniff`] that the server has not read yet: the start
    /// of a request, which shutdown must not drop as if the connection were idle.
    pub(super) fn has_replay(&self) -> bool {
        self.pre_at < self.pre_len
    }

    /// Whether bytes the server has not read are waiting in the socket now (a
    /// one-byte non-blocking peek; `cx` is registered for readiness when there are
    /// none): a next request that reached the kernel while an answer was being made.
    pub(super) fn poll_has_unread(&self, cx: &mut Context<'_>) -> bool {
        let mut byte = [std::mem::MaybeUninit::uninit(); 1];
        let mut buf = ReadBuf::uninit(&mut byte);
        matches!(self.stream.poll_peek(cx, &mut buf), Poll::Ready(Ok(n)) if n > 0)
    }

    /// A watch on this connection's socket for a client that goes away while one of
    /// its HTTP/1 requests is in flight ([`ClientWatch`]).
    pub(super) fn watch(&self) -> ClientWatch {
        ClientWatch::on(&self.stream)
    }

    /// Reads the start of a new connection until it is known to be HTTP/2 (the whole
    /// preface arrived: `true`) or not (a byte differs, or the peer closed first:
    /// `false`). The bytes read are replayed to the server by the next reads.
    ///
    /// # Errors
    /// A read error, or `TimedOut` once `first_byte_timeout` or `header_timeout` passes
    /// (the sniff is read through the connection deadlines like any other read).
    pub(super) async fn sniff(&mut self) -> io::Result<bool> {
        let mut pre = [0u8; PREFACE.len()];
        let mut len = 0;
        let h2 = loop {
            let n = std::future::poll_fn(|cx| {
                let mut buf = ReadBuf::new(&mut pre[len..]);
                match self.read_stream(cx, &mut buf) {
                    Poll::Ready(Ok(())) => Poll::Ready(Ok(buf.filled().len())),
                    Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
                    Poll::Pending => Poll::Pending,
                }
            })
            .await?;
            len += n;
            if n == 0 || pre[..len] != PREFACE[..len] {
                break false;
            }
            if len == PREFACE.len() {
                break true;
            }
        };
        self.pre = pre;
        self.pre_at = 0;
        self.pre_len = len as u8; // at most 24
        Ok(h2)
    }

    /// A read from the socket with the connection deadlines (the module doc, 1-4).
    fn read_stream(&mut self, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let busy = self.sync();
        let before = buf.filled().len();
        match read_shared(&self.stream, cx, buf) {
            Poll::Ready(Ok(())) => {
                let head_starts = matches!(self.wait, Some(Wait::FirstByte | Wait::Idle))
                    && buf.filled().len() > before
                    && !self.activity.h2.load(Ordering::Relaxed);
                if head_starts {
                    self.wait = Some(Wait::Head);
                    self.deadline = Instant::now() + self.limits.header_timeout;
                    self.activity.idle.store(IDLE_NO, Ordering::Relaxed);
                    // A connection picked to close that has just started a request
                    // is serving again: it is not closed under that request.
                    self.activity.reclaim.store(false, Ordering::Relaxed);
                    // Nor woken for it: the waker of the idle wait would otherwise be
                    // woken when the request ends (`RequestGuard`), an extra poll of
                    // the connection's task per HTTP/1 request.
                    drop(self.activity.idle_waker.take());
                }
                Poll::Ready(Ok(()))
            }
            Poll::Pending => {
                if busy {
                    if !self.activity.h2.load(Ordering::Relaxed) {
                        return Poll::Pending;
                    }
                    self.activity.idle_waker.register(cx.waker());
                    // The last stream may have ended before the waker was in place.
                    if self.sync() {
                        return Poll::Pending;
                    }
                }
                if !busy && matches!(self.wait, Some(Wait::FirstByte | Wait::Idle)) {
                    // Waiting for a request: [`Reclaim`] may ask for the socket back.
                    if matches!(self.wait, Some(Wait::FirstByte)) {
                        self.activity.idle.store(IDLE_FIRST_BYTE, Ordering::Relaxed);
                    }
                    self.activity.idle_waker.register(cx.waker());
                    // An HTTP/2 connection is not cut here: its task closes it with
                    // a GOAWAY once asked (`Activity::poll_reclaimed`).
                    if self.activity.reclaim.load(Ordering::Relaxed)
                        && !self.activity.h2.load(Ordering::Relaxed)
                    {
                        return Poll::Ready(Err(io::Error::new(
                            io::ErrorKind::TimedOut,
                            "idle connection closed: the process ran out of file descriptors",
                        )));
                    }
                }
                match self.poll_deadline(cx) {
                    Poll::Ready(()) => Poll::Ready(Err(self.timed_out())),
                    Poll::Pending => Poll::Pending,
                }
            }
            other => other,
        }
    }

    /// Brings the wait state up to date with the requests; returns whether one is in
    /// flight.
    fn sync(&mut self) -> bool {
        let (started, busy) = self.activity.load();
        if busy {
            if self.wait.take().is_some() {
                self.activity.idle.store(IDLE_NO, Ordering::Relaxed);
            }
        } else if self.wait.is_none() || started != self.seen {
            // A request ended since the last look: the connection just went idle.
            self.wait = Some(Wait::Idle);
            let now = Instant::now();
            self.deadline = now + self.limits.idle_timeout;
            self.activity
                .idle_since_us
                .store(since_start(now), Ordering::Relaxed);
            self.activity.idle.store(IDLE_KEEP_ALIVE, Ordering::Relaxed);
        }
        if !busy {
            // A stall of an answer that has ended says nothing about the next one.
            self.stalled = None;
        }
        self.seen = started;
        busy
    }

    /// Registers the armed deadline with `cx`; `Ready` once it has passed.
    fn poll_deadline(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        if self.wait.is_none() {
            return Poll::Pending;
        }
        if self.sleep.deadline() != self.deadline {
            self.sleep.as_mut().reset(self.deadline);
        }
        self.sleep.as_mut().poll(cx)
    }

    fn timed_out(&self) -> io::Error {
        let what = match self.wait {
            Some(Wait::FirstByte) => "no request bytes within first_byte_timeout_ms",
            Some(Wait::Head) => "request head not complete within header_timeout_ms",
            _ => "connection idle for idle_timeout_ms",
        };
        io::Error::new(io::ErrorKind::TimedOut, what)
    }

    /// A write that cannot proceed. With no request in flight it fails once the
    /// armed read deadline has passed, so a client that stops reading cannot hold an
    /// idle connection either; with one in flight, `send_timeout` after the first
    /// write that found the socket full, unless a write makes progress first.
    fn pending_write<T>(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<T>> {
        if !self.sync() {
            return match self.poll_deadline(cx) {
                Poll::Ready(()) => Poll::Ready(Err(self.timed_out())),
                Poll::Pending => Poll::Pending,
            };
        }
        // Reads register no deadline while a request is in flight (HTTP/1 reads
        // none then, HTTP/2 waits for its streams), so the timer is free to use.
        let send_timeout = self.limits.send_timeout;
        let at = *self
            .stalled
            .get_or_insert_with(|| Instant::now() + send_timeout);
        if self.sleep.deadline() != at {
            self.sleep.as_mut().reset(at);
        }
        match self.sleep.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "the client read nothing of the answer within send_timeout_ms",
            ))),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl AsyncRead for EdgeIo {
    /// Replays the sniffed bytes first, then reads the socket. A read that replays
    /// them also takes whatever else has arrived (the rest of a request head, usually),
    /// so the server sees the head whole; that socket read's `Pending` or error is left for
    /// the next read to meet again.
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.pre_at < this.pre_len {
            let pre = &this.pre[usize::from(this.pre_at)..usize::from(this.pre_len)];
            let n = pre.len().min(buf.remaining());
            buf.put_slice(&pre[..n]);
            this.pre_at += n as u8; // n ≤ 24
            if buf.remaining() > 0 {
                let _ = this.read_stream(cx, buf);
            }
            return Poll::Ready(Ok(()));
        }
        this.read_stream(cx, buf)
    }
}

impl AsyncWrite for EdgeIo {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.poll_write_vectored(cx, &[io::IoSlice::new(buf)])
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        match write_shared(&this.stream, cx, bufs) {
            Poll::Pending => this.pending_write(cx),
            done => {
                if matches!(done, Poll::Ready(Ok(n)) if n > 0) {
                    this.stalled = None;
                }
                done
            }
        }
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        // With nothing in flight the connection may have just gone idle: register the
        // deadline now, as hyper (HTTP/2) may not read again before the client does.
        if !this.sync() && this.poll_deadline(cx).is_ready() {
            cx.waker().wake_by_ref();
        }
        // A TCP socket buffers nothing of its own to flush.
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        // What tokio's `TcpStream::poll_shutdown` does: the write side, at once.
        Poll::Ready(SockRef::from(&*self.stream).shutdown(std::net::Shutdown::Write))
    }
}

/// A read from the shared socket as tokio's own `TcpStream::poll_read` makes it
/// (through `&TcpStream`, which has no `AsyncRead`): wait for readiness, read,
/// and clear the readiness on `WouldBlock` or on a read that did not fill the
/// buffer (with edge-triggered epoll a short read shows the socket drained, so the
/// next read waits for the next edge without a system call).
fn read_shared(s: &TcpStream, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
    if buf.remaining() == 0 {
        return Poll::Ready(Ok(()));
    }
    let len = buf.remaining();
    loop {
        std::task::ready!(s.poll_read_ready(cx))?;
        let mut short = false;
        // `try_read_buf` reads into the unfilled part and advances `buf`; the outer
        // `try_io` turns a short read into `WouldBlock`, which clears the readiness.
        let read = s.try_io(Interest::READABLE, || {
            let n = s.try_read_buf(buf)?;
            if 0 < n && n < len {
                short = true;
                return Err(io::ErrorKind::WouldBlock.into());
            }
            Ok(n)
        });
        match read {
            Ok(_) => return Poll::Ready(Ok(())),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock && short => return Poll::Ready(Ok(())),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(e) => return Poll::Ready(Err(e)),
        }
    }
}

/// A vectored write to the shared socket, as tokio's `TcpStream::poll_write_vectored`
/// makes it (the readiness cleared on `WouldBlock`).
fn write_shared(
    s: &TcpStream,
    cx: &mut Context<'_>,
    bufs: &[io::IoSlice<'_>],
) -> Poll<io::Result<usize>> {
    loop {
        std::task::ready!(s.poll_write_ready(cx))?;
        match s.try_write_vectored(bufs) {
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
            done => return Poll::Ready(done),
        }
    }
}

/// Notices an HTTP/1 client that closes (or resets) its connection while its request
/// is in flight, by peeking at the connection's socket.
///
/// The HTTP/1 server ([`super::h1`]) reads only a request's head and body, and the
/// request's future and its response body poll this between: a one-byte `MSG_PEEK`
/// only when the socket is readable, so a quiet socket costs no system call and no
/// buffer. (hyper's server read a busy connection instead, `mid_message_detect_eof`,
/// which took a second 8 KiB read buffer per request in flight.)
pub(crate) struct ClientWatch {
    stream: Arc<TcpStream>,
    /// Unread bytes were seen once the request had been read: a pipelined request,
    /// which the server reads after this answer. Watching stops (hyper's server, too,
    /// stopped looking for the end of a busy connection once it held unread bytes).
    quiet_only: bool,
}

impl ClientWatch {
    /// Another watch on the same socket (one per request).
    pub(crate) fn clone_watch(&self) -> ClientWatch {
        ClientWatch::on(&self.stream)
    }

    /// A fresh watch on `stream`.
    fn on(stream: &Arc<TcpStream>) -> ClientWatch {
        ClientWatch {
            stream: Arc::clone(stream),
            quiet_only: false,
        }
    }

    /// `Ready` once the client has closed its connection (end of stream) or it was
    /// reset; `Pending` otherwise, with `cx` registered for the socket's next
    /// readiness while it is quiet. Unread bytes on the socket are the rest of the
    /// request's body while `body_read` is false (looked at again on the next poll:
    /// the body's reads wake the task) and a pipelined request once it is true
    /// (watching stops).
    pub(crate) fn poll_gone(&mut self, cx: &mut Context<'_>, body_read: bool) -> Poll<()> {
        if self.quiet_only {
            return Poll::Pending;
        }
        let mut byte = [std::mem::MaybeUninit::uninit(); 1];
        let mut buf = ReadBuf::uninit(&mut byte);
        match self.stream.poll_peek(cx, &mut buf) {
            Poll::Ready(Ok(0) | Err(_)) => Poll::Ready(()),
            Poll::Ready(Ok(_)) => {
                self.quiet_only = body_read;
                Poll::Pending
            }
            Poll::Pending => Poll::Pending,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    /// A connected pair: the client's end and the server's end wrapped in [`EdgeIo`].
    async fn pair(limits: ConnLimits) -> (TcpStream, EdgeIo) {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let client = TcpStream::connect(l.local_addr().unwrap()).await.unwrap();
        let (server, _) = l.accept().await.unwrap();
        let io = EdgeIo::new(server, Arc::new(Activity::default()), limits);
        (client, io)
    }

    /// Connections in the `idle` states, oldest first, each listed in a new
    /// [`Reclaim`]; a test closes one by setting it to `None`.
    fn listed(idle: &[u8]) -> (Vec<Option<Arc<Activity>>>, Reclaim) {
        let mut r = Reclaim::default();
        let conns = idle
            .iter()
            .map(|&state| {
                let c = Arc::new(Activity::default());
                c.idle.store(state, Ordering::Relaxed);
                r.add(&c);
                Some(c)
            })
            .collect();
        (conns, r)
    }

    /// A connection that has sent nothing is closed first, then one between
    /// requests; one with a request head in hand never; each only once.
    #[tokio::test]
    async fn reclaim_closes_silent_then_keep_alive_connections_never_a_busy_one() {
        let (mut conns, mut r) =
            listed(&[IDLE_KEEP_ALIVE, IDLE_NO, IDLE_FIRST_BYTE, IDLE_KEEP_ALIVE]);
        let asked = |c: &Option<Arc<Activity>>| c.as_ref().unwrap().reclaim.load(Ordering::Relaxed);
        assert_eq!(r.reclaim(1), (1, 1));
        assert!(
            asked(&conns[2]) && !asked(&conns[0]),
            "the silent one first"
        );
        conns[2] = None; // it closed
        assert_eq!(r.reclaim(1), (1, 1));
        assert!(
            asked(&conns[0]) && !asked(&conns[3]),
            "then the oldest keep-alive one"
        );
        conns[0] = None;
        assert_eq!(r.reclaim(8), (1, 1));
        assert!(!asked(&conns[1]), "never one with a request in hand");
        assert_eq!(r.reclaim(8), (0, 1), "a connection is asked once");
        conns[3] = None;
        assert_eq!(r.reclaim(8), (0, 0));
    }

    /// Keep-alive connections were closed in the order they were accepted: one
    /// answered a moment ago (its client likely sending the next request) as soon
    /// as one idle for minutes. They are closed idle longest first.
    #[tokio::test]
    async fn keep_alive_connections_idle_longest_are_reclaimed_first() {
        let (conns, mut r) = listed(&[IDLE_KEEP_ALIVE; 5]);
        for (c, since) in conns.iter().zip([500, 20, 900, 10, 20]) {
            c.as_ref()
                .unwrap()
                .idle_since_us
                .store(since, Ordering::Relaxed);
        }
        let asked = || -> Vec<bool> {
            conns
                .iter()
                .map(|c| c.as_ref().unwrap().reclaim.load(Ordering::Relaxed))
                .collect()
        };
        assert_eq!(r.reclaim(3), (3, 3));
        assert_eq!(asked(), [false, true, false, true, true]);
        assert_eq!(r.reclaim(4), (1, 4));
        assert_eq!(
            asked(),
            [true, true, false, true, true],
            "the one answered last is left"
        );
    }

    /// A connection records when it went idle after each request: the later
    /// answer, the later time.
    #[tokio::test]
    async fn a_connection_going_idle_records_when() {
        let (_a_client, mut a) = pair(ConnLimits::default()).await;
        let (_b_client, mut b) = pair(ConnLimits::default()).await;
        let mut buf = [0u8; 8];
        for io in [&mut a, &mut b] {
            drop(io.activity.start(false));
            let mut read = ReadBuf::new(&mut buf);
            let waker = futures_util::task::noop_waker();
            let polled = io.read_stream(&mut Context::from_waker(&waker), &mut read);
            assert!(polled.is_pending());
            assert_eq!(io.activity.idle.load(Ordering::Relaxed), IDLE_KEEP_ALIVE);
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        let since = |io: &EdgeIo| io.activity.idle_since_us.load(Ordering::Relaxed);
        assert!(since(&a) < since(&b), "{} {}", since(&a), since(&b));
        let mut r = Reclaim::default();
        r.add(&b.activity);
        r.add(&a.activity);
        assert_eq!(r.reclaim(1), (1, 1));
        assert!(a.activity.reclaim.load(Ordering::Relaxed), "idle longer");
    }

    /// Regression (`input_extra.py`'s idle-descriptor test failing with a broken
    /// pipe): accept errors that came before the asked connections had closed each
    /// asked a new batch, down to a connection a client had just opened to send its
    /// request. Connections still closing now count toward the batch.
    #[tokio::test]
    async fn accept_errors_before_the_asked_connections_closed_asked_newer_ones_too() {
        let (mut conns, mut r) = listed(&[IDLE_FIRST_BYTE; 40]);
        let asked = |c: &Option<Arc<Activity>>| {
            c.as_ref()
                .is_some_and(|c| c.reclaim.load(Ordering::Relaxed))
        };
        assert_eq!(r.reclaim(Reclaim::BATCH), (32, 32));
        assert!(conns[..32].iter().all(asked), "the oldest first");
        for _ in 0..5 {
            assert_eq!(
                r.reclaim(Reclaim::BATCH),
                (0, 32),
                "none asked before they close"
            );
        }
        assert!(!conns[32..].iter().any(asked), "the newest were left alone");
        for c in &mut conns[..10] {
            *c = None;
        }
        assert_eq!(
            r.reclaim(Reclaim::BATCH),
            (8, 30),
            "as many as closed, up to the last"
        );
    }

    /// Regression (`last_fd.py` of an outside attack): a connection just accepted
    /// counted as one that had sent nothing before its task had looked, and was
    /// the first closed at the descriptor limit, its request a moment away. It is
    /// not idle until a read has found its socket empty.
    #[tokio::test]
    async fn a_just_accepted_connection_is_not_idle_until_its_task_has_looked() {
        let (_client, mut io) = pair(ConnLimits::default()).await;
        let mut reclaim = Reclaim::default();
        reclaim.add(&io.activity);
        assert_eq!(reclaim.reclaim(Reclaim::BATCH), (0, 0), "not looked at yet");
        let activity = io.activity.clone();
        let read = tokio::spawn(async move { io.sniff().await });
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert_eq!(activity.idle.load(Ordering::Relaxed), IDLE_FIRST_BYTE);
        assert_eq!(reclaim.reclaim(Reclaim::BATCH), (1, 1), "found empty: idle");
        let err = read.await.unwrap().unwrap_err();
        assert!(err.to_string().contains("file descriptors"), "{err}");
    }

    /// The spare descriptor is given back once and taken again when there is room.
    #[test]
    fn the_spare_descriptor_is_released_once_and_refilled() {
        let mut spare = Spare::open();
        assert!(spare.release(), "opened while descriptors are free");
        assert!(!spare.release(), "released once");
        spare.refill();
        assert!(spare.release(), "refilled");
    }

    /// A read waiting for a first byte fails once its connection is reclaimed, and
    /// a connection that has started a request is not closed under it.
    #[tokio::test]
    async fn a_reclaimed_connection_closes_only_while_it_waits_for_a_request() {
        let (_client, mut io) = pair(ConnLimits::default()).await;
        let activity = io.activity.clone();
        let mut reclaim = Reclaim::default();
        reclaim.add(&activity);
        let read = tokio::spawn(async move { io.sniff().await });
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert_eq!(reclaim.reclaim(Reclaim::BATCH), (1, 1));
        let err = tokio::time::timeout(Duration::from_secs(5), read)
            .await
            .expect("the waiting read was woken")
            .unwrap()
            .unwrap_err();
        assert!(err.to_string().contains("file descriptors"), "{err}");

        let (mut client, mut io) = pair(ConnLimits::default()).await;
        let mut reclaim = Reclaim::default();
        reclaim.add(&io.activity);
        client.write_all(b"GET /he").await.unwrap();
        assert!(!io.sniff().await.unwrap());
        assert_eq!(
            reclaim.reclaim(Reclaim::BATCH),
            (0, 0),
            "a head has started"
        );
        client.write_all(b"alth HTTP/1.1\r\n\r\n").await.unwrap();
        let mut buf = [0u8; 64];
        assert!(io.read(&mut buf).await.unwrap() > 0);
    }

    /// Regression (issue 17, 16 KiB read buffers): hyper-util's `Rewind` replayed the
    /// sniffed 24 bytes alone, so hyper met a partial head and grew its buffer.
    #[tokio::test]
    async fn sniffed_bytes_reach_hyper_with_the_rest_of_the_head() {
        let (mut client, mut io) = pair(ConnLimits::default()).await;
        let req = b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-length: 2\r\n\r\n{}";
        client.write_all(req).await.unwrap();
        assert!(!io.sniff().await.unwrap());
        let mut buf = vec![0u8; 8192];
        let n = io.read(&mut buf).await.unwrap();
        assert_eq!(
            &buf[..n],
            &req[..],
            "the whole request in hyper's first read"
        );
    }

    #[tokio::test]
    async fn an_http2_preface_in_pieces_is_sniffed_and_replayed_whole() {
        let (mut client, mut io) = pair(ConnLimits::default()).await;
        let writer = tokio::spawn(async move {
            client.write_all(&PREFACE[..16]).await.unwrap();
            tokio::time::sleep(Duration::from_millis(20)).await;
            client.write_all(&PREFACE[16..]).await.unwrap();
            client.write_all(b"frames").await.unwrap();
            client
        });
        assert!(io.sniff().await.unwrap());
        let _client = writer.await.unwrap();
        let mut got = Vec::new();
        let mut buf = [0u8; 64];
        while got.len() < PREFACE.len() + 6 {
            let n = io.read(&mut buf).await.unwrap();
            assert_ne!(n, 0, "ended early after {got:?}");
            got.extend_from_slice(&buf[..n]);
        }
        assert_eq!(&got[..PREFACE.len()], &PREFACE[..]);
        assert_eq!(&got[PREFACE.len()..], b"frames");
    }

    #[tokio::test]
    async fn a_request_starting_like_the_preface_is_http1_and_replayed_in_order() {
        // "PRI" is a valid HTTP/1 method token; the request differs at "/".
        let (mut client, mut io) = pair(ConnLimits::default()).await;
        let req = b"PRI /x HTTP/1.1\r\nhost: x\r\n\r\n";
        client.write_all(req).await.unwrap();
        assert!(!io.sniff().await.unwrap());
        let mut got = Vec::new();
        let mut buf = [0u8; 8];
        while got.len() < req.len() {
            let n = io.read(&mut buf).await.unwrap();
            got.extend_from_slice(&buf[..n]);
        }
        assert_eq!(
            &got[..],
            &req[..],
            "replayed across reads smaller than the prefix"
        );
    }

    #[tokio::test]
    async fn a_peer_that_closes_at_once_is_http1_with_nothing_to_replay() {
        let (client, mut io) = pair(ConnLimits::default()).await;
        drop(client);
        assert!(!io.sniff().await.unwrap());
        let mut buf = [0u8; 16];
        assert_eq!(io.read(&mut buf).await.unwrap(), 0);
    }

    #[tokio::test]
    async fn a_silent_peer_fails_the_sniff_at_the_first_byte_deadline() {
        let limits = ConnLimits {
            first_byte_timeout: Duration::from_millis(50),
            ..ConnLimits::default()
        };
        let (_client, mut io) = pair(limits).await;
        let e = io.sniff().await.unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::TimedOut);
    }

    /// Polls `w` once.
    async fn gone_now(w: &mut ClientWatch, body_read: bool) -> bool {
        std::future::poll_fn(|cx| Poll::Ready(w.poll_gone(cx, body_read).is_ready())).await
    }

    #[tokio::test]
    async fn the_client_watch_sees_a_close_and_a_reset_but_not_a_quiet_socket() {
        let (client, io) = pair(ConnLimits::default()).await;
        let mut w = io.watch();
        assert!(!gone_now(&mut w, false).await, "a quiet socket");
        drop(client);
        // Woken by the close, then gone.
        std::future::poll_fn(|cx| w.poll_gone(cx, false)).await;

        let (client, io) = pair(ConnLimits::default()).await;
        let mut w = io.watch();
        SockRef::from(&client)
            .set_linger(Some(Duration::ZERO))
            .unwrap();
        drop(client); // a reset
        std::future::poll_fn(|cx| w.poll_gone(cx, false)).await;
    }

    #[tokio::test]
    async fn the_client_watch_leaves_unread_bytes_and_stops_at_a_pipelined_request() {
        let (mut client, mut io) = pair(ConnLimits::default()).await;
        let mut w = io.watch();
        client.write_all(b"GET / HTTP/1.1\r\n").await.unwrap();
        tokio::time::sleep(Duration::from_millis(20)).await;
        // The rest of a body: not gone, and looked at again.
        assert!(!gone_now(&mut w, false).await);
        assert!(!w.quiet_only);
        // Once the request was read, unread bytes are a pipelined request.
        assert!(!gone_now(&mut w, true).await);
        assert!(w.quiet_only);
        drop(client);
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(!gone_now(&mut w, true).await, "watching stopped");
        // The bytes were only peeked: the connection still reads them.
        let mut buf = [0u8; 64];
        let n = io.read(&mut buf).await.unwrap();
        assert_eq!(&buf[..n], b"GET / HTTP/1.1\r\n");
    }

    #[tokio::test]
    async fn reads_through_the_shared_socket_get_every_byte_and_the_end() {
        let (mut client, mut io) = pair(ConnLimits::default()).await;
        let writer = tokio::spawn(async move {
            for i in 0..200u32 {
                client.write_all(&[i as u8; 1000]).await.unwrap();
                if i % 50 == 0 {
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
            }
        });
        let mut got = Vec::new();
        let mut buf = vec![0u8; 3000];
        loop {
            let n = io.read(&mut buf).await.unwrap();
            if n == 0 {
                break;
            }
            got.extend_from_slice(&buf[..n]);
        }
        writer.await.unwrap();
        assert_eq!(got.len(), 200_000);
        assert!(got
            .chunks(1000)
            .enumerate()
            .all(|(i, c)| c.iter().all(|&b| b == i as u8)));
    }
}
