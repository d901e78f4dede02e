//! The socket wrapper every accepted connection is served through: connection
//! deadlines on the read side, JSON for hyper's own error answers on the write side.
//!
//! # Why a wrapper and not hyper's timers
//! hyper-util's `auto::Builder` first sniffs the protocol (`ReadVersion` in
//! `server/conn/auto/mod.rs` reads until the 24-byte HTTP/2 preface matches or
//! differs) with no deadline, so a silent socket, or one that sends `PRI * HTTP/2.0\r\n`
//! and stops, is held forever. hyper's HTTP/1 `header_read_timeout` starts only after
//! that sniff, and it restarts whenever the connection goes idle (`State::idle` in
//! `proto/h1/conn.rs` re-arms it for the next head), so one setting measures keep-alive
//! idle *plus* the next head: a 75 s idle allowance would also give a slow head 75 s.
//! HTTP/2 has only keep-alive pings, which a live but idle client answers forever.
//!
//! The wrapper sees every read, and [`Activity`] tells it whether a request is in
//! flight (the service counts requests in; the response body's [`RequestGuard`] counts
//! them out when hyper drops it), so one small mechanism covers both protocols and the
//! sniff:
//!
//! 1. While no request is in flight a deadline is armed: `first_byte_timeout` on a new
//!    connection, `idle_timeout` once a response is done (noticed when hyper flushes
//!    the last of it; for HTTP/2 the last stream's guard wakes the connection task).
//! 2. The first byte read while armed (HTTP/1, or any connection before its first
//!    request) re-arms it to `header_timeout`. HTTP/2 control frames (pings, window
//!    updates) after the first request do not: there only open streams count. A
//!    pipelined head read while the previous request was in flight is parsed from
//!    hyper's buffer without a read, so if it is partial `idle_timeout` bounds it.
//! 3. While a request is in flight nothing is armed: the body has its own bound in
//!    `ingress` and the answer the upstream timeouts.
//! 4. A read (or a stuck write) that would wait past the deadline fails with
//!    `TimedOut`; hyper then closes the connection.
//!
//! Per request this costs an `Arc` clone, two counter increments, two clock reads and
//! at most two timer resets (hyper's header timer, now off, reset once per request
//! too); no task, channel or allocation.
//!
//! # JSON for hyper's canned errors
//! When hyper cannot parse a request head it writes a fixed head itself (`on_parse_error`
//! in `proto/h1/conn.rs`, statuses from `Server::on_error` in `proto/h1/role.rs`): `400`,
//! `414` or `431` with `content-length: 0` and `connection: close`, then closes. The
//! service never sees that request, so the wrapper recognises the head on the way out
//! and writes a complete OpenAI error response (see [`super::canned`]) in its place.
//! It only looks when hyper cannot be writing a service's answer: no request in flight,
//! none started since hyper last flushed its buffer empty after the previous answer, so
//! a response body that happens to contain such bytes is never touched. Keep-alive,
//! pipelining, `Expect: 100-continue` (hyper writes `100 Continue` while a request is
//! in flight), streaming and HTTP/2 (binary frames never match) pass through unchanged.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use futures_util::task::AtomicWaker;
use http_body::{Body as HttpBody, Frame, SizeHint};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::time::{Instant, Sleep};

use super::canned::{self, Replacement};
use super::ConnLimits;
use crate::body::{Body, BoxError};

/// Requests of one connection: started by the service, finished when hyper drops the
/// response body. Shared by the connection's IO and its requests (HTTP/2 runs each
/// request in its own task, hence the atomics).
#[derive(Default)]
pub(super) struct Activity {
    /// Requests started; written only by the connection's task (hyper calls the
    /// service there for both protocols).
    started: AtomicU64,
    /// Requests whose response body hyper has dropped.
    finished: AtomicU64,
    /// An HTTP/2 request was seen: control frames then no longer start a head deadline.
    h2: AtomicBool,
    /// The connection task, woken when the last HTTP/2 stream ends in another task so
    /// that the idle deadline is armed on time.
    idle_waker: AtomicWaker,
}

impl Activity {
    /// Counts a request in; the guard counts it out when dropped.
    pub(super) fn start(self: &Arc<Self>, h2: bool) -> RequestGuard {
        if h2 {
            self.h2.store(true, Ordering::Relaxed);
        }
        self.started.fetch_add(1, Ordering::Relaxed);
        RequestGuard(Arc::clone(self))
    }

    /// `(started, whether one is in flight)`.
    fn load(&self) -> (u64, bool) {
        let started = self.started.load(Ordering::Relaxed);
        (started, self.finished.load(Ordering::Acquire) != started)
    }
}

/// One request in flight; travels in its response body.
pub(super) struct RequestGuard(Arc<Activity>);

impl Drop for RequestGuard {
    fn drop(&mut self) {
        let finished = self.0.finished.fetch_add(1, Ordering::AcqRel) + 1;
        if finished == self.0.started.load(Ordering::Relaxed) {
            // Only HTTP/2 registers a waker; for HTTP/1 this finds none.
            self.0.idle_waker.wake();
        }
    }
}

/// A response body that holds its request's [`RequestGuard`] until hyper drops it.
pub(super) struct Tracked {
    body: Body,
    _guard: RequestGuard,
}

impl Tracked {
    pub(super) fn new(body: Body, guard: RequestGuard) -> Self {
        Tracked {
            body,
            _guard: guard,
        }
    }
}

impl HttpBody for Tracked {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        Pin::new(&mut self.get_mut().body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
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
    stream: TcpStream,
    activity: Arc<Activity>,
    limits: ConnLimits,
    /// `Some` while no request is in flight.
    wait: Option<Wait>,
    deadline: Instant,
    /// Reset to `deadline` lazily, only when a wait has to be registered.
    sleep: Pin<Box<Sleep>>,
    /// `started` when the wait state was last brought up to date.
    seen: u64,
    /// `started` when hyper last flushed its buffer empty with nothing in flight.
    clean: u64,
    replacement: Option<Replacement>,
}

impl EdgeIo {
    /// Wraps a just-accepted stream: the first-byte deadline starts now.
    pub(super) fn new(stream: TcpStream, activity: Arc<Activity>, limits: ConnLimits) -> Self {
        let deadline = Instant::now() + limits.first_byte_timeout;
        EdgeIo {
            stream,
            activity,
            limits,
            wait: Some(Wait::FirstByte),
            deadline,
            sleep: Box::pin(tokio::time::sleep_until(deadline)),
            seen: 0,
            clean: 0,
            replacement: None,
        }
    }

    /// Brings the wait state up to date with the requests; returns whether one is in
    /// flight.
    fn sync(&mut self) -> bool {
        let (started, busy) = self.activity.load();
        if busy {
            self.wait = None;
        } else if self.wait.is_none() || started != self.seen {
            // A request ended since the last look: the connection just went idle.
            self.wait = Some(Wait::Idle);
            self.deadline = Instant::now() + self.limits.idle_timeout;
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

    /// Whether hyper cannot be writing a service's answer now (see the module doc).
    fn may_be_canned(&self) -> bool {
        let (started, busy) = self.activity.load();
        !busy && started == self.clean
    }

    /// Writes the pending replacement; reports the canned head's length once done.
    fn poll_replacement(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<usize>> {
        let Some(r) = self.replacement.as_mut() else {
            return Poll::Ready(Ok(0));
        };
        while !r.is_done() {
            let n = match Pin::new(&mut self.stream).poll_write(cx, r.remaining()) {
                Poll::Ready(Ok(n)) => n,
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Pending => return self.pending_write(cx),
            };
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            r.advance(n);
        }
        let n = r.replaced_len();
        self.replacement = None;
        Poll::Ready(Ok(n))
    }

    /// A write that cannot proceed: fails once the armed deadline has passed, so a
    /// client that stops reading cannot hold an idle connection either.
    fn pending_write<T>(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<T>> {
        self.sync();
        match self.poll_deadline(cx) {
            Poll::Ready(()) => Poll::Ready(Err(self.timed_out())),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl AsyncRead for EdgeIo {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let busy = this.sync();
        let before = buf.filled().len();
        match Pin::new(&mut this.stream).poll_read(cx, buf) {
            Poll::Ready(Ok(())) => {
                let head_starts = matches!(this.wait, Some(Wait::FirstByte | Wait::Idle))
                    && buf.filled().len() > before
                    && !this.activity.h2.load(Ordering::Relaxed);
                if head_starts {
                    this.wait = Some(Wait::Head);
                    this.deadline = Instant::now() + this.limits.header_timeout;
                }
                Poll::Ready(Ok(()))
            }
            Poll::Pending => {
                if busy {
                    if !this.activity.h2.load(Ordering::Relaxed) {
                        return Poll::Pending;
                    }
                    this.activity.idle_waker.register(cx.waker());
                    // The last stream may have ended before the waker was in place.
                    if this.sync() {
                        return Poll::Pending;
                    }
                }
                match this.poll_deadline(cx) {
                    Poll::Ready(()) => Poll::Ready(Err(this.timed_out())),
                    Poll::Pending => Poll::Pending,
                }
            }
            other => other,
        }
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
        if this.replacement.is_none() && this.may_be_canned() {
            this.replacement = canned::recognise(bufs, &this.limits);
        }
        if this.replacement.is_some() {
            return this.poll_replacement(cx);
        }
        match Pin::new(&mut this.stream).poll_write_vectored(cx, bufs) {
            Poll::Pending => this.pending_write(cx),
            done => done,
        }
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        // hyper flushes its IO only once its own buffer is written out: with nothing in
        // flight, every answer so far has left (see `may_be_canned`).
        if !this.sync() {
            this.clean = this.seen;
            // The connection may have just gone idle: register the deadline now, as
            // hyper may not read again before the client does.
            if this.poll_deadline(cx).is_ready() {
                cx.waker().wake_by_ref();
            }
        }
        Pin::new(&mut this.stream).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_shutdown(cx)
    }
}
