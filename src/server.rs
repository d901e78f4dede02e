//! The HTTP listener shared by `switchyard serve` and `switchyard mock`: accept loop,
//! HTTP/1.1 and HTTP/2 (h2c) on one port, connection deadlines, and graceful shutdown.
//!
//! # A connection's phases
//! Every phase has a bound, so idle or slow sockets cannot pile up until the process
//! runs out of file descriptors (`edge_io` explains the mechanism):
//!
//! ```text
//! accept ──first byte──▶ head ──parsed──▶ request in flight ──response done──▶ idle ─┐
//!   first_byte_timeout   header_timeout   body: ingress BODY_TIMEOUT             idle_timeout
//!                          ▲               answer: upstream timeouts,                 │
//!                          │                 send_timeout per stalled write           │
//!                          └──────────────── next request's first byte ◀──────────────┘
//! ```
//!
//! A deadline that passes closes the connection without an answer, as nginx does. A
//! request head that cannot be parsed (400), with a URI over 65,534 bytes (414) or too
//! large a header section (431) gets an OpenAI error body like every other error
//! (`canned`), with the fields the listener's owner adds to such answers
//! ([`Refusals`]: the gateway's CORS fields).
//!
//! # Protocols
//! HTTP/1.1 is served by our own server side ([`h1`]: no buffer held by an idle
//! connection, one `writev` per answer); HTTP/2 by hyper's. Both reach the handler
//! as a `Request<`[`RequestBody`]`>`.
//!
//! # Threads
//! `server.runtime: per_core` (the default) binds one listener per serving thread on
//! the same address with `SO_REUSEPORT` and runs [`serve`] on each thread in its own
//! single-threaded runtime ([`spawn_per_core`]); egress keeps an upstream pool per
//! thread ([`core_index`]). A request then never changes thread: measured on the
//! 2-core load benchmark, the work-stealing runtime's hand-offs and wake-ups across
//! threads cost about 30% of the gateway's CPU per request. `shared` runs one
//! listener on the process's work-stealing runtime instead.
//!
//! Shutdown follows Pingora's order: stop accepting, tell every connection to finish
//! its in-flight requests (HTTP/1 stops keep-alive, HTTP/2 sends GOAWAY), wait for them
//! up to the drain timeout, then return so the process can exit.

mod canned;
mod edge_io;
pub mod h1;
pub mod lines;

pub use canned::{Refusals, Refused, MAX_GLIMPSED_FIELDS, MAX_GLIMPSED_PATH};

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use futures_util::FutureExt as _;
use http::{HeaderMap, Method, StatusCode, Version};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use tokio::net::TcpListener;

use crate::body::{Body, BoxError};
use crate::config::ServerConfig;
use edge_io::{Activity, ClientWatch, EdgeIo, Reclaim, Spare, Tracked};
use lines::{Answered, HeaderLines};

/// The body of a request as the service receives it, whichever protocol brought it.
#[derive(Debug)]
pub enum RequestBody {
    /// No body: no `Content-Length` (or 0) and no `Transfer-Encoding` on HTTP/1.
    Empty,
    /// Read from an HTTP/1.1 connection by [`h1`], decoded as it is polled.
    H1(h1::Body),
    /// An HTTP/2 stream's data, from hyper.
    H2(Incoming),
}

impl http_body::Body for RequestBody {
    type Data = bytes::Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<bytes::Bytes>, BoxError>>> {
        match self.get_mut() {
            RequestBody::Empty => std::task::Poll::Ready(None),
            RequestBody::H1(b) => std::pin::Pin::new(b).poll_frame(cx),
            RequestBody::H2(b) => std::pin::Pin::new(b)
                .poll_frame(cx)
                .map(|f| f.map(|r| r.map_err(BoxError::from))),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            RequestBody::Empty => true,
            RequestBody::H1(b) => b.is_end_stream(),
            RequestBody::H2(b) => b.is_end_stream(),
        }
    }

    fn size_hint(&self) -> http_body::SizeHint {
        match self {
            RequestBody::Empty => http_body::SizeHint::with_exact(0),
            RequestBody::H1(b) => b.size_hint(),
            RequestBody::H2(b) => b.size_hint(),
        }
    }
}

/// Per-connection limits of the listener (`server:` keys of the config).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnLimits {
    /// From accept to the first byte (`first_byte_timeout_ms`, default 10 s).
    pub first_byte_timeout: Duration,
    /// From a request's first byte to its complete head; on HTTP/2 from the preface to
    /// the first request (`header_timeout_ms`, default 10 s).
    pub header_timeout: Duration,
    /// With no request in flight: HTTP/1 keep-alive between requests, HTTP/2 with no
    /// open stream (`idle_timeout_ms`, default 75 s).
    pub idle_timeout: Duration,
    /// With a request in flight, how long a write may find the socket full before
    /// the connection is closed; any write that moves bytes starts it again
    /// (`send_timeout_ms`, default 60 s, nginx's `send_timeout`).
    pub send_timeout: Duration,
    /// Largest header section in bytes, counted as name + value + 4 per field, request
    /// line excluded (`max_header_bytes`, default 64 KiB); larger heads get 431.
    pub max_header_bytes: usize,
}

impl ConnLimits {
    /// The limits configured in `server`.
    pub fn from_config(server: &ServerConfig) -> Self {
        ConnLimits {
            first_byte_timeout: Duration::from_millis(server.first_byte_timeout_ms),
            header_timeout: Duration::from_millis(server.header_timeout_ms),
            idle_timeout: Duration::from_millis(server.idle_timeout_ms),
            send_timeout: Duration::from_millis(server.send_timeout_ms),
            max_header_bytes: server.max_header_bytes,
        }
    }
}

impl Default for ConnLimits {
    /// The config defaults ([`ServerConfig::default`]).
    fn default() -> Self {
        ConnLimits::from_config(&ServerConfig::default())
    }
}

/// Serves `handler` on `listener` until `shutdown` completes, then drains in-flight
/// connections for at most `drain`. If the drain runs out of time, `on_drain_timeout`
/// runs (the gateway ends its live streams with an error event there) and the
/// connections get one more second to write what it produced. Every connection is
/// held to `limits` (deadlines for each connection phase, the header size cap);
/// the answers the server gives by itself (a refused head, a header section over
/// the cap) get the fields of `refusals`.
///
/// Accept errors (for example too many open files) are logged and retried after a short
/// pause rather than ending the server.
pub async fn serve<H, F>(
    listener: TcpListener,
    handler: H,
    shutdown: impl Future<Output = ()>,
    drain: Duration,
    on_drain_timeout: impl FnOnce(),
    limits: ConnLimits,
    refusals: Refusals,
) where
    H: Fn(Request<RequestBody>, SocketAddr) -> F + Clone + Send + Sync + 'static,
    F: Future<Output: Answered + Send> + Send + 'static,
{
    let mut http2 = hyper::server::conn::http2::Builder::new(TokioExecutor::new());
    http2
        .timer(TokioTimer::new())
        // Pings find dead peers while streams are open; `idle_timeout` ends idle ones.
        .keep_alive_interval(Some(Duration::from_secs(20)))
        // h2 counts 32 bytes per field, `max_header_bytes` 4: with twice the room, the
        // service's check (and its JSON 431) decides for any sensible field count.
        .max_header_list_size(
            u32::try_from(limits.max_header_bytes.saturating_mul(2)).unwrap_or(u32::MAX),
        );
    let http2 = Arc::new(http2);
    // Tells every connection that shutdown started (one being sniffed stops; HTTP/1
    // finishes its request; HTTP/2 sends a GOAWAY and finishes its open streams);
    // the drain waits for every receiver.
    let (stopping_tx, stopping) = tokio::sync::watch::channel(());
    tokio::pin!(shutdown);
    // Accept failures since the last warning, and idle connections closed for them.
    let (mut failures, mut logged) = ((0u64, 0usize), None::<tokio::time::Instant>);
    let mut spare = Spare::open();
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    // Out of file descriptors: idle connections give theirs back
                    // (`Reclaim`), and the accept is retried as soon as they close.
                    let out_of_fds = matches!(e.raw_os_error(), Some(libc::EMFILE | libc::ENFILE));
                    // Linux fails `accept` with `EMFILE` even when no client waits
                    // (the descriptor is reserved before the backlog is read). The
                    // spare descriptor tells: given back, it lets one `accept`
                    // through if a client waits, and that client is served at
                    // once. Idle connections are closed only then: else the
                    // connection accepted last, whose request may be a moment
                    // away, would be the first closed.
                    let mut waiting = None;
                    let (asked, closing) = if !out_of_fds {
                        (0, 0)
                    } else if spare.release() {
                        match listener.accept().now_or_never() {
                            // The spare comes back after it (below).
                            Some(Ok(a)) => {
                                waiting = Some(a);
                                Reclaim::process().reclaim(Reclaim::BATCH)
                            }
                            _ => {
                                spare.refill();
                                (0, 0)
                            }
                        }
                    } else {
                        // No spare (in use since the last shortage): no way to
                        // tell, so a client is assumed to wait.
                        Reclaim::process().reclaim(Reclaim::BATCH)
                    };
                    failures.0 += 1;
                    failures.1 += asked;
                    // At most a line a second: under a flood of connections the
                    // loop below retries every few milliseconds.
                    let now = tokio::time::Instant::now();
                    if logged.is_none_or(|at| now.duration_since(at) >= Duration::from_secs(1)) {
                        tracing::warn!(
                            error = %e,
                            failures = failures.0,
                            idle_connections_closed = failures.1,
                            "accept failed; retrying"
                        );
                        logged = Some(now);
                        failures = (0, 0);
                    }
                    match waiting {
                        Some(a) => a,
                        None => {
                            // Out of descriptors, the backlog is looked at again
                            // within moments: connections closing, or answers
                            // ending, free descriptors at any time, and a client
                            // arriving waits at most this long (with 10 ms, 29%
                            // fewer short requests were served at the limit than
                            // with 2 ms in an attack script mixing them with
                            // HTTP/2 connections). Costs a few system calls per
                            // look, only at the limit.
                            let pause = if out_of_fds || closing > 0 { 2 } else { 50 };
                            tokio::time::sleep(Duration::from_millis(pause)).await;
                            continue;
                        }
                    }
                }
            },
            () = &mut shutdown => break,
        };
        // The spare went to a client in a shortage: back once there is room.
        spare.refill();
        // Streaming tokens must leave at once, not wait for Nagle's algorithm.
        let _ = stream.set_nodelay(true);
        let handler = handler.clone();
        let activity = Arc::new(Activity::default());
        Reclaim::process().add(&activity);
        let mut io = EdgeIo::new(stream, activity.clone(), limits);
        let socket = io.watch();
        let conn_activity = activity.clone();
        let (refusals, refused) = (refusals.clone(), refusals.clone());
        let service = move |req: Request<RequestBody>| {
            let h2 = req.version() == Version::HTTP_2;
            let guard = activity.start(h2);
            // HTTP/1 reads the socket only for heads and bodies: the request's future
            // and its response body watch for the client going away (`ClientWatch`).
            let watch = (!h2).then(|| socket.clone_watch());
            // Without a body, unread bytes on the socket can only be a pipelined
            // request, and the watch stops at them (`ClientWatch::poll_gone`).
            let bodiless = matches!(req.body(), RequestBody::Empty);
            let fits = header_bytes(req.headers()) <= limits.max_header_bytes;
            // Boxed: only a refusal has one, and the answer stays small without.
            let too_large = (!fits).then(|| Box::new(headers_too_large(&limits, &req, &refused)));
            // Boxed per request: the request path's future is kilobytes, and moved
            // by value it would be copied whole at each step (into the answer, into
            // the exchange's box: about 2,000 instructions per request measured by
            // `callgrind.sh`); boxed at once it is copied once, and the HTTP/1
            // server's per-request box (`h1::exchange`) holds a pointer to it.
            Answer {
                fut: fits.then(|| Box::pin(handler(req, peer))),
                too_large,
                watch,
                bodiless,
                guard: Some(guard),
                h2_waiting: None,
            }
        };
        let mut stopping = stopping.clone();
        let http2 = http2.clone();
        tokio::spawn(async move {
            // HTTP/1.1 or HTTP/2 with prior knowledge (h2c), told by the first bytes.
            // Biased: bytes the sniff has read are a request's start, and a sniff
            // that has finished is served even if shutdown began meanwhile.
            let h2 = tokio::select! {
                biased;
                h2 = io.sniff() => h2,
                _ = stopping.changed() => return,
            };
            match h2 {
                Ok(false) => {
                    h1::serve(io, service, stopping, limits, refusals).await;
                }
                // Boxed: HTTP/2's connection state is the larger, and the task holds
                // the larger of the two inline.
                Ok(true) => {
                    // hyper writes the header map only: the field lines join it.
                    let service = service_fn(move |req: Request<Incoming>| {
                        let head = req.method() == Method::HEAD;
                        let answer = service(req.map(RequestBody::H2));
                        async move {
                            let mut resp = answer.await?;
                            let lines = resp.body_mut().take_lines();
                            lines::append_to(&lines, resp.headers_mut());
                            if head {
                                bodiless_head(&mut resp);
                            }
                            Ok::<_, std::io::Error>(resp)
                        }
                    });
                    let mut conn = Box::pin(http2.serve_connection(TokioIo::new(io), service));
                    // Shutdown, or the reclaim at the descriptor limit: a GOAWAY,
                    // and the open streams finish. An answer hyper has handed to
                    // h2 whole (the request counts as ended) but that still waits
                    // for the client's flow-control window keeps the connection
                    // open until it is sent: h2 counts a stream open while it
                    // holds data for it (`tests/e2e/test_descriptor_limit.py`).
                    let asked_to_stop = async {
                        tokio::select! {
                            _ = stopping.changed() => {}
                            () = std::future::poll_fn(|cx| conn_activity.poll_reclaimed(cx)) => {}
                        }
                    };
                    let served = tokio::select! {
                        served = conn.as_mut() => served,
                        () = asked_to_stop => {
                            conn.as_mut().graceful_shutdown();
                            conn.await
                        }
                    };
                    if let Err(e) = served {
                        tracing::debug!(error = %e, %peer, "connection ended with an error");
                    }
                }
                Err(e) => {
                    tracing::debug!(error = %e, %peer, "connection ended before a request");
                }
            }
        });
    }
    drop(listener);
    drop(stopping);
    let _ = stopping_tx.send(());
    tracing::info!(
        drain_ms = drain.as_millis() as u64,
        "shutting down: draining in-flight requests"
    );
    let drained = stopping_tx.closed();
    tokio::pin!(drained);
    if tokio::time::timeout(drain, &mut drained).await.is_err() {
        // Streams still running get an error event instead of a cut connection; give
        // the connections a moment to write it.
        tracing::warn!("drain timeout reached; ending the remaining streams");
        on_drain_timeout();
        Reclaim::process().wake_answers();
        if tokio::time::timeout(Duration::from_secs(1), &mut drained)
            .await
            .is_err()
        {
            tracing::warn!("closing the remaining connections");
        }
    }
}

/// The service's answer to one request: the handler's future run to its
/// response, or failed with [`edge_io::client_gone`] when `watch` (an HTTP/1
/// request's) sees the client close its connection first (the future is then
/// dropped, which cancels the request's upstream work); the 431 made when the
/// header section was too large. The response body is wrapped ([`Tracked`]) to count
/// the request out when the server drops it.
///
/// A future of its own rather than an `async` block, which would hold what it
/// captured and what it awaits in separate slots.
struct Answer<F> {
    fut: Option<std::pin::Pin<Box<F>>>,
    too_large: Option<Box<(Response<Body>, HeaderLines)>>,
    watch: Option<ClientWatch>,
    /// The request has no body: every unread byte is a pipelined request. (With a
    /// body the watch cannot tell the body's rest from a next request, so it peeks
    /// again at each poll; the response body's watch knows the body was read.)
    bodiless: bool,
    guard: Option<edge_io::RequestGuard>,
    /// An HTTP/2 request's task, registered to be woken at the drain deadline.
    h2_waiting: Option<edge_io::H2Waiting>,
}

impl<F: Future<Output: Answered>> Future for Answer<F> {
    type Output = std::io::Result<Response<Tracked>>;

    fn poll(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Self::Output> {
        use std::task::Poll;
        let this = self.get_mut();
        let (resp, lines) = match this.fut.as_mut() {
            Some(fut) => match fut.as_mut().poll(cx) {
                Poll::Ready(answer) => answer.into_answer(),
                Poll::Pending => {
                    let gone = this
                        .watch
                        .as_mut()
                        .is_some_and(|w| w.poll_gone(cx, this.bodiless).is_ready());
                    if gone {
                        this.fut = None;
                        return Poll::Ready(Err(edge_io::client_gone()));
                    }
                    // Woken at the drain deadline: for HTTP/1 (the one with a watch)
                    // the connection's task, for HTTP/2 the request's own.
                    if let Some(guard) = &this.guard {
                        if this.watch.is_some() {
                            guard.waiting(cx);
                        } else if this.h2_waiting.is_none() {
                            this.h2_waiting = Some(guard.waiting_h2(cx));
                        }
                    }
                    return Poll::Pending;
                }
            },
            None => match this.too_large.take() {
                Some(resp) => *resp,
                // Polled again after it answered: never by the servers here.
                None => return Poll::Ready(Err(edge_io::client_gone())),
            },
        };
        this.fut = None;
        this.h2_waiting = None;
        let (guard, watch) = (this.guard.take(), this.watch.take());
        Poll::Ready(Ok(resp.map(|body| Tracked::new(body, guard, watch, lines))))
    }
}

thread_local! {
    /// Which per-core serving thread this is: 1 to N on the threads
    /// [`spawn_per_core`] starts, 0 everywhere else.
    static CORE: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// The per-core serving thread the caller runs on (1 to N), or 0 off those threads
/// (the shared runtime, tests). Egress keeps one upstream connection pool per core
/// indexed by it, so a request and its upstream connection stay on one thread.
pub fn core_index() -> usize {
    CORE.with(std::cell::Cell::get)
}

/// Drops `value` from a task of the per-core serving thread's runtime when called
/// on one ([`spawn_per_core`]), so that its `Drop` (a request's access line) runs
/// after the calling task's current poll and the tasks already woken: a connection
/// task that ends a request writes its answer first. Anywhere else (the shared
/// runtime, other threads) `value` is dropped at once.
///
/// Values deferred while a drop task is already queued join its batch: one task per
/// batch rather than one per value. A task spawned per request (its allocation, its
/// scheduling, its completion) was about 1,200 instructions of the 86,000 of a JSON
/// request under `benches/load/callgrind.sh`.
///
/// `value` is always dropped: a drop task the runtime drops unrun (its shutdown,
/// when the serving thread ends) drops its batch with it, before
/// [`PerCore::run_until`] returns.
pub fn drop_later<T: Send + 'static>(value: T) {
    if core_index() == 0 {
        return drop(value);
    }
    let Ok(rt) = tokio::runtime::Handle::try_current() else {
        return drop(value);
    };
    // `value` moves into the closure: if the thread's locals are being torn down
    // the closure never runs and `value` is dropped with it, at once.
    let first = DEFERRED.try_with(move |q| {
        let mut q = q.borrow_mut();
        q.push_back(Box::new(value));
        q.len() == 1
    });
    if first == Ok(true) {
        // The first of a batch: a task to drop it. Its guard drops the batch when
        // the task runs, or when the runtime drops the task unrun.
        let batch = DeferredBatch;
        drop(rt.spawn(async move { drop(batch) }));
    }
}

thread_local! {
    /// Values [`drop_later`] deferred on this per-core thread, oldest first, dropped
    /// by the one queued [`DeferredBatch`] (empty when none is queued).
    static DEFERRED: std::cell::RefCell<std::collections::VecDeque<Box<dyn Send>>> =
        const { std::cell::RefCell::new(std::collections::VecDeque::new()) };
}

/// Drops this thread's deferred values, oldest first, when dropped ([`drop_later`]).
struct DeferredBatch;

impl Drop for DeferredBatch {
    fn drop(&mut self) {
        // One at a time, the queue not borrowed while a value drops: a value's `Drop`
        // that defers another joins this batch while it lasts (the queue is not
        // empty), and starts a new one once it has ended. A `Drop` that panics
        // (reported by the panic hook) ends only its own value: the batch goes on,
        // so the queue is never left holding values with no task to drop them.
        loop {
            let next = DEFERRED.try_with(|q| q.borrow_mut().pop_front());
            match next {
                Ok(Some(value)) => {
                    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| drop(value)));
                }
                _ => break,
            }
        }
    }
}

/// Pending connections each listener's accept queue holds (the `listen(2)` backlog),
/// before the kernel caps it at `net.core.somaxconn`.
pub const LISTEN_BACKLOG: u32 = 4096;

/// Binds `n` listeners on `addr` with `SO_REUSEPORT` (the kernel spreads new
/// connections over them), for [`spawn_per_core`]. Port 0 picks one free port for
/// all of them.
///
/// Linux lets any socket of the same user that also sets `SO_REUSEPORT` join a
/// port, another process's included: a second gateway started on a port the
/// first still serves would bind, and the kernel would then split new
/// connections between two configurations. So a fixed port is first bound once
/// without `SO_REUSEPORT` (and dropped): that bind fails with `EADDRINUSE` while
/// anything listens there, as a listener of the shared runtime does.
///
/// # Errors
/// `EADDRINUSE` when something already listens on `addr`; otherwise the bind or
/// listen error of the first listener that fails.
pub fn bind_per_core(addr: SocketAddr, n: usize) -> std::io::Result<Vec<TcpListener>> {
    if addr.port() != 0 {
        drop(bound(addr, false)?);
    }
    let mut listeners: Vec<TcpListener> = Vec::with_capacity(n);
    let mut at = addr;
    for _ in 0..n.max(1) {
        let l = bind_with(at, true)?;
        at = l.local_addr()?;
        listeners.push(l);
    }
    Ok(listeners)
}

/// Binds one listener on `addr` with the backlog of [`LISTEN_BACKLOG`] (tokio's
/// `TcpListener::bind` takes 1,024), for a server without per-core listeners.
///
/// # Errors
/// The bind or listen error.
pub fn bind_listener(addr: SocketAddr) -> std::io::Result<TcpListener> {
    bind_with(addr, false)
}

/// A socket bound to `addr` with `SO_REUSEADDR` (and `SO_REUSEPORT` when
/// `reuseport`), not listening. Without `SO_REUSEPORT` the bind fails while any
/// socket listens on `addr` (with or without it), and succeeds over connections
/// left in `TIME_WAIT`: [`bind_per_core`]'s probe.
fn bound(addr: SocketAddr, reuseport: bool) -> std::io::Result<tokio::net::TcpSocket> {
    let socket = if addr.is_ipv4() {
        tokio::net::TcpSocket::new_v4()?
    } else {
        tokio::net::TcpSocket::new_v6()?
    };
    socket.set_reuseaddr(true)?;
    #[cfg(unix)]
    if reuseport {
        socket.set_reuseport(true)?;
    }
    socket.bind(addr)?;
    Ok(socket)
}

/// A listener on `addr` (`SO_REUSEADDR`, and `SO_REUSEPORT` when `reuseport`).
fn bind_with(addr: SocketAddr, reuseport: bool) -> std::io::Result<TcpListener> {
    let socket = bound(addr, reuseport)?;
    // A burst of connections at once (a client pool opening 2,048) overflowed a
    // queue of 1,024 split over the listeners: the SYNs dropped were sent again by
    // the clients a second later, p99 over a second (`benches/load/conns.sh`, issue
    // 17). The kernel caps this at `net.core.somaxconn` (4,096 by default since
    // Linux 5.4).
    socket.listen(LISTEN_BACKLOG)
}

/// [`serve`] on one thread per listener, each with its own single-threaded runtime:
/// a connection, its request futures and its timers stay on the thread that accepted
/// it, with no work stealing and no wake-ups across threads. Starts the threads and
/// returns at once; [`PerCore::run_until`] waits for the shutdown and the drains.
///
/// # Errors
/// A runtime or thread that cannot be started (the threads already started stop).
pub fn spawn_per_core<H, F>(
    listeners: Vec<TcpListener>,
    handler: H,
    drain: Duration,
    on_drain_timeout: impl Fn() + Send + Sync + 'static,
    limits: ConnLimits,
    refusals: Refusals,
) -> std::io::Result<PerCore>
where
    H: Fn(Request<RequestBody>, SocketAddr) -> F + Clone + Send + Sync + 'static,
    F: Future<Output: Answered + Send> + Send + 'static,
{
    let (stop, _) = tokio::sync::watch::channel(false);
    let on_drain_timeout = Arc::new(on_drain_timeout);
    let mut done = Vec::with_capacity(listeners.len());
    for (i, listener) in listeners.into_iter().enumerate() {
        // Deregistered from the caller's runtime, registered again on the thread's.
        let listener = listener.into_std()?;
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let (handler, on_timeout) = (handler.clone(), on_drain_timeout.clone());
        let refusals = refusals.clone();
        let mut rx = stop.subscribe();
        let (tx, finished) = tokio::sync::oneshot::channel::<()>();
        std::thread::Builder::new()
            .name(format!("switchyard-core-{}", i + 1))
            .spawn(move || {
                CORE.with(|c| c.set(i + 1));
                rt.block_on(async move {
                    let listener = match TcpListener::from_std(listener) {
                        Ok(l) => l,
                        Err(e) => {
                            tracing::error!(error = %e, core = i + 1, "cannot register a listener; this thread serves nothing");
                            return;
                        }
                    };
                    serve(
                        listener,
                        handler,
                        async move {
                            // A dropped sender (the gateway gone) stops the thread too.
                            let _ = rx.wait_for(|s| *s).await;
                        },
                        drain,
                        move || on_timeout(),
                        limits,
                        refusals,
                    )
                    .await;
                });
                // Tasks still pending (a cache store, a Redis settle) end with the
                // runtime, as they do on the shared runtime when the process exits.
                drop(rt);
                let _ = tx.send(());
            })?;
        done.push(finished);
    }
    Ok(PerCore { stop, done })
}

/// The per-core serving threads [`spawn_per_core`] started.
#[derive(Debug)]
pub struct PerCore {
    stop: tokio::sync::watch::Sender<bool>,
    done: Vec<tokio::sync::oneshot::Receiver<()>>,
}

impl PerCore {
    /// Waits for `shutdown`, then tells every thread to stop accepting and drain its
    /// own connections for at most the drain time ([`serve`]'s order); returns when
    /// all of them have stopped. Dropping it also stops them.
    pub async fn run_until(self, shutdown: impl Future<Output = ()>) {
        shutdown.await;
        self.stop.send_replace(true);
        for d in self.done {
            let _ = d.await;
        }
    }
}

/// Makes an HTTP/2 answer to `HEAD` carry no body (RFC 9110 §9.3.2; RFC 9113 §8.1:
/// DATA frames on it are a stream error the client answers with `PROTOCOL_ERROR`),
/// keeping the `content-length` a `GET` would get: hyper's HTTP/2 server sends what
/// the body yields whatever the method (its HTTP/1 side, [`h1`], drops it itself).
fn bodiless_head(resp: &mut Response<Tracked>) {
    use http_body::Body as _;
    if let Some(len) = resp.body().size_hint().exact() {
        if !resp.headers().contains_key(http::header::CONTENT_LENGTH) {
            resp.headers_mut()
                .insert(http::header::CONTENT_LENGTH, http::HeaderValue::from(len));
        }
    }
    // The answer's body is dropped unread (a stream's upstream exchange ends with it).
    resp.body_mut().clear();
}

/// Size of a header section as `max_header_bytes` counts it: name, value and 4 bytes
/// (`: ` and CRLF) per field.
fn header_bytes(headers: &HeaderMap) -> usize {
    headers
        .iter()
        .map(|(name, value)| name.as_str().len() + value.len() + 4)
        .sum()
}

/// The 431 for the head of `req`, over `max_header_bytes`, that the server itself
/// accepted: the request's id (the client's when valid, as for any request) and the
/// fields `refusals` gives it.
fn headers_too_large<B>(
    limits: &ConnLimits,
    req: &Request<B>,
    refusals: &Refusals,
) -> (Response<Body>, HeaderLines) {
    let id = crate::request_id::of(req.headers());
    tracing::info!(
        request_id = crate::request_id::as_str(&id),
        status = 431,
        max_header_bytes = limits.max_header_bytes,
        "refused a request whose header section is too large"
    );
    let mut resp = crate::body::json(
        StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
        canned::error_body(431, "", limits),
    );
    resp.headers_mut().insert(crate::request_id::HEADER, id);
    let mut lines = HeaderLines::default();
    if refusals.is_on() {
        let refused = Refused {
            method: Some(req.method()),
            path: req.uri().path(),
            headers: req.headers(),
        };
        lines = refusals.fields(&refused);
    }
    (resp, lines)
}

/// Resolves when the process receives SIGTERM or SIGINT (Ctrl-C). The handlers are
/// installed by this call, not when the future is first polled: a signal that comes
/// in between is seen here rather than taking its default action (terminating the
/// process undrained).
pub fn shutdown_signal() -> impl std::future::Future<Output = ()> {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        let mut term = signal(SignalKind::terminate()).ok();
        let mut int = signal(SignalKind::interrupt()).ok();
        async move {
            let term = async {
                match term.as_mut() {
                    Some(t) => {
                        t.recv().await;
                    }
                    None => std::future::pending::<()>().await,
                }
            };
            let int = async {
                match int.as_mut() {
                    Some(i) => {
                        i.recv().await;
                    }
                    None => std::future::pending::<()>().await,
                }
            };
            tokio::select! {
                () = term => {},
                () = int => {},
            }
        }
    }
    #[cfg(not(unix))]
    {
        async {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// Counts its drops.
    struct Dropped(Arc<std::sync::atomic::AtomicUsize>);

    impl Drop for Dropped {
        fn drop(&mut self) {
            self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
    }

    /// A current-thread runtime on a thread that says it is per-core thread 1.
    fn on_a_core_thread<R: Send + 'static>(
        f: impl FnOnce(tokio::runtime::Runtime) -> R + Send + 'static,
    ) -> R {
        std::thread::spawn(move || {
            CORE.with(|c| c.set(1));
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            f(rt)
        })
        .join()
        .unwrap()
    }

    #[test]
    fn drop_later_drops_after_the_calling_task_on_a_per_core_thread() {
        let n = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let seen = n.clone();
        let (during, after) = on_a_core_thread(move |rt| {
            rt.block_on(async move {
                drop_later(Dropped(seen.clone()));
                let during = seen.load(std::sync::atomic::Ordering::SeqCst);
                tokio::task::yield_now().await;
                (during, seen.load(std::sync::atomic::Ordering::SeqCst))
            })
        });
        assert_eq!((during, after), (0, 1));
        assert_eq!(n.load(std::sync::atomic::Ordering::SeqCst), 1);
    }

    #[test]
    fn drop_later_still_drops_when_the_runtime_ends_before_its_task_runs() {
        let n = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let seen = n.clone();
        let during = on_a_core_thread(move |rt| {
            let during = rt.block_on(async move {
                drop_later(Dropped(seen.clone()));
                seen.load(std::sync::atomic::Ordering::SeqCst)
            });
            drop(rt);
            during
        });
        assert_eq!(during, 0, "deferred on a per-core thread");
        assert_eq!(
            n.load(std::sync::atomic::Ordering::SeqCst),
            1,
            "dropped with the runtime"
        );
    }

    /// Records the order it is dropped in.
    struct Ordered(usize, Arc<std::sync::Mutex<Vec<usize>>>);

    impl Drop for Ordered {
        fn drop(&mut self) {
            self.1.lock().unwrap().push(self.0);
            // A drop that defers another (the first one only) joins the batch.
            if self.0 == 0 {
                drop_later(Ordered(100, self.1.clone()));
            }
        }
    }

    #[test]
    fn values_deferred_in_one_poll_drop_together_oldest_first() {
        let order = Arc::new(std::sync::Mutex::new(Vec::new()));
        let seen = order.clone();
        let (during, after) = on_a_core_thread(move |rt| {
            rt.block_on(async move {
                for i in 0..3 {
                    drop_later(Ordered(i, seen.clone()));
                }
                let during = seen.lock().unwrap().len();
                tokio::task::yield_now().await;
                let after = seen.lock().unwrap().clone();
                // Deferred again after the batch ended: a batch of its own.
                drop_later(Ordered(7, seen.clone()));
                tokio::task::yield_now().await;
                (during, after)
            })
        });
        assert_eq!(during, 0);
        assert_eq!(after, [0, 1, 2, 100]);
        assert_eq!(*order.lock().unwrap(), [0, 1, 2, 100, 7]);
    }

    /// Panics when dropped.
    struct Panics;

    impl Drop for Panics {
        fn drop(&mut self) {
            panic!("a value whose drop panics");
        }
    }

    #[test]
    fn a_deferred_value_whose_drop_panics_leaves_the_rest_of_its_batch_dropped() {
        let n = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let seen = n.clone();
        let after = on_a_core_thread(move |rt| {
            rt.block_on(async move {
                drop_later(Dropped(seen.clone()));
                drop_later(Panics);
                drop_later(Dropped(seen.clone()));
                tokio::task::yield_now().await;
                let after = seen.load(std::sync::atomic::Ordering::SeqCst);
                // The queue is empty again: the next value starts a batch of its own.
                drop_later(Dropped(seen.clone()));
                tokio::task::yield_now().await;
                after
            })
        });
        assert_eq!(after, 2);
        assert_eq!(n.load(std::sync::atomic::Ordering::SeqCst), 3);
    }

    #[tokio::test]
    async fn drop_later_drops_at_once_off_the_per_core_threads() {
        let n = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        drop_later(Dropped(n.clone()));
        assert_eq!(n.load(std::sync::atomic::Ordering::SeqCst), 1);
        // A per-core thread outside its runtime (a task dropped after it) too.
        let seen = n.clone();
        let during = on_a_core_thread(move |_rt| {
            drop_later(Dropped(seen.clone()));
            seen.load(std::sync::atomic::Ordering::SeqCst)
        });
        assert_eq!(during, 2);
    }

    #[tokio::test]
    async fn per_core_listeners_share_one_port() {
        let ls = bind_per_core("127.0.0.1:0".parse().unwrap(), 3).unwrap();
        assert_eq!(ls.len(), 3);
        let port = ls[0].local_addr().unwrap().port();
        assert_ne!(port, 0);
        assert!(ls.iter().all(|l| l.local_addr().unwrap().port() == port));
    }

    /// Outside testing (2026-12-07): a second `serve` on the port a running one
    /// served started too, and the kernel split new connections between the two.
    #[tokio::test]
    async fn a_second_per_core_bind_on_a_served_port_fails() {
        let first = bind_per_core("127.0.0.1:0".parse().unwrap(), 2).unwrap();
        let served = first[0].local_addr().unwrap();
        let second = bind_per_core(served, 2).unwrap_err();
        assert_eq!(second.kind(), std::io::ErrorKind::AddrInUse);
        drop(first);
        // Once the first has closed, the port binds again.
        assert_eq!(bind_per_core(served, 2).unwrap().len(), 2);
    }

    #[tokio::test]
    async fn per_core_bind_fails_on_a_port_taken_without_reuseport() {
        let plain = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let taken = plain.local_addr().unwrap();
        assert!(bind_per_core(taken, 2).is_err());
    }

    /// One request on its own connection; the answer's body.
    async fn get(addr: SocketAddr) -> String {
        let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
        s.write_all(b"GET / HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
            .await
            .unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).await.unwrap();
        out.rsplit("\r\n\r\n").next().unwrap().to_string()
    }

    /// A connection that has sent nothing when shutdown starts (still being sniffed)
    /// does not hold the drain until its first-byte deadline.
    #[tokio::test]
    async fn a_silent_connection_ends_at_shutdown_not_at_its_first_byte_deadline() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let limits = ConnLimits {
            first_byte_timeout: Duration::from_secs(600),
            ..ConnLimits::default()
        };
        let (stop, mut rx) = tokio::sync::watch::channel(false);
        let server = tokio::spawn(serve(
            listener,
            |_req, _peer| async { crate::body::json(StatusCode::OK, "{}") },
            async move {
                let _ = rx.wait_for(|s| *s).await;
            },
            Duration::from_secs(600),
            || {},
            limits,
            Refusals::default(),
        ));
        let mut silent = tokio::net::TcpStream::connect(addr).await.unwrap();
        // Served before and after: the silent one is accepted and being sniffed.
        assert_eq!(get(addr).await, "{}");
        stop.send_replace(true);
        tokio::time::timeout(Duration::from_secs(30), server)
            .await
            .expect("the server returned without waiting for the silent connection")
            .unwrap();
        let mut buf = [0u8; 1];
        assert_eq!(
            silent.read(&mut buf).await.unwrap(),
            0,
            "closed by the server"
        );
    }

    #[tokio::test]
    async fn per_core_threads_each_serve_their_connections_and_stop_on_shutdown() {
        let ls = bind_per_core("127.0.0.1:0".parse().unwrap(), 2).unwrap();
        let addr = ls[0].local_addr().unwrap();
        let (stop, mut rx) = tokio::sync::watch::channel(false);
        let server = spawn_per_core(
            ls,
            |_req, _peer| async {
                // Which serving thread answered, and that its upstream pool index
                // matches the thread.
                let name = std::thread::current().name().unwrap_or("").to_string();
                crate::body::json(StatusCode::OK, format!("{}:{name}", core_index()))
            },
            Duration::from_secs(1),
            || {},
            ConnLimits::default(),
            Refusals::default(),
        )
        .unwrap();
        let server = tokio::spawn(server.run_until(async move {
            let _ = rx.wait_for(|s| *s).await;
        }));
        let mut seen = std::collections::BTreeSet::new();
        for _ in 0..32 {
            let body = get(addr).await;
            let (i, name) = body.split_once(':').unwrap();
            assert_eq!(name, format!("switchyard-core-{i}"), "{body}");
            seen.insert(i.to_string());
        }
        // 32 connections from distinct ports all hashed to one of two listeners
        // would be a 1 in 2^31 chance.
        assert_eq!(seen.len(), 2, "{seen:?}");
        stop.send_replace(true);
        tokio::time::timeout(Duration::from_secs(5), server)
            .await
            .expect("every thread stopped")
            .unwrap();
        assert!(tokio::net::TcpStream::connect(addr).await.is_err());
    }
}
