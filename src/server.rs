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
//!                          ▲               answer: upstream timeouts                  │
//!                          └──────────────── next request's first byte ◀──────────────┘
//! ```
//!
//! A deadline that passes closes the connection without an answer, as nginx does. A
//! request head hyper cannot parse (400), with a URI over 65,534 bytes (414) or too
//! large a header section (431) gets an OpenAI error body like every other error
//! (`canned`).
//!
//! Shutdown follows Pingora's order: stop accepting, tell every connection to finish
//! its in-flight requests (HTTP/1 stops keep-alive, HTTP/2 sends GOAWAY), wait for them
//! up to the drain timeout, then return so the process can exit.

mod canned;
mod edge_io;

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use http::{HeaderMap, StatusCode, Version};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::TcpListener;

use crate::body::Body;
use crate::config::ServerConfig;
use edge_io::{Activity, EdgeIo, Tracked};

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
/// held to `limits` (deadlines for each connection phase, the header size cap).
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
) where
    H: Fn(Request<Incoming>, SocketAddr) -> F + Clone + Send + Sync + 'static,
    F: Future<Output = Response<Body>> + Send + 'static,
{
    let mut builder = auto::Builder::new(TokioExecutor::new());
    // The connection deadlines replace hyper's header timer, which would also cut
    // keep-alive idle at the header timeout (see `edge_io`).
    builder.http1().header_read_timeout(None);
    builder
        .http2()
        .timer(TokioTimer::new())
        // Pings find dead peers while streams are open; `idle_timeout` ends idle ones.
        .keep_alive_interval(Some(Duration::from_secs(20)))
        // h2 counts 32 bytes per field, `max_header_bytes` 4: with twice the room, the
        // service's check (and its JSON 431) decides for any sensible field count.
        .max_header_list_size(
            u32::try_from(limits.max_header_bytes.saturating_mul(2)).unwrap_or(u32::MAX),
        );
    let graceful = GracefulShutdown::new();
    tokio::pin!(shutdown);
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    tracing::warn!(error = %e, "accept failed; retrying");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        // Streaming tokens must leave at once, not wait for Nagle's algorithm.
        let _ = stream.set_nodelay(true);
        let handler = handler.clone();
        let activity = Arc::new(Activity::default());
        let io = EdgeIo::new(stream, activity.clone(), limits);
        let service = service_fn(move |req: Request<Incoming>| {
            let guard = activity.start(req.version() == Version::HTTP_2);
            let fits = header_bytes(req.headers()) <= limits.max_header_bytes;
            let too_large = (!fits).then(|| crate::request_id::of(req.headers()));
            let fut = fits.then(|| handler(req, peer));
            async move {
                let resp = match (fut, too_large) {
                    (Some(fut), _) => fut.await,
                    (None, id) => {
                        headers_too_large(&limits, id.unwrap_or_else(crate::request_id::generate))
                    }
                };
                Ok::<_, Infallible>(resp.map(|body| Tracked::new(body, guard)))
            }
        });
        let conn = builder
            .serve_connection(TokioIo::new(io), service)
            .into_owned();
        let conn = graceful.watch(conn);
        tokio::spawn(async move {
            if let Err(e) = conn.await {
                tracing::debug!(error = %e, %peer, "connection ended with an error");
            }
        });
    }
    drop(listener);
    tracing::info!(
        drain_ms = drain.as_millis() as u64,
        "shutting down: draining in-flight requests"
    );
    let drained = graceful.shutdown();
    tokio::pin!(drained);
    if tokio::time::timeout(drain, &mut drained).await.is_err() {
        // Streams still running get an error event instead of a cut connection; give
        // the connections a moment to write it.
        tracing::warn!("drain timeout reached; ending the remaining streams");
        on_drain_timeout();
        if tokio::time::timeout(Duration::from_secs(1), &mut drained)
            .await
            .is_err()
        {
            tracing::warn!("closing the remaining connections");
        }
    }
}

/// Size of a header section as `max_header_bytes` counts it: name, value and 4 bytes
/// (`: ` and CRLF) per field.
fn header_bytes(headers: &HeaderMap) -> usize {
    headers
        .iter()
        .map(|(name, value)| name.as_str().len() + value.len() + 4)
        .sum()
}

/// The 431 for a head over `max_header_bytes` that hyper itself accepted, with
/// request id `id` (the client's when valid, as for any request).
fn headers_too_large(limits: &ConnLimits, id: http::HeaderValue) -> Response<Body> {
    tracing::info!(
        request_id = crate::request_id::as_str(&id),
        status = 431,
        max_header_bytes = limits.max_header_bytes,
        "refused a request whose header section is too large"
    );
    let mut resp = crate::body::json(
        StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
        canned::error_body(431, limits),
    );
    resp.headers_mut().insert(crate::request_id::HEADER, id);
    resp
}

/// Resolves when the process receives SIGTERM or SIGINT (Ctrl-C).
pub async fn shutdown_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = term.recv() => {},
                    _ = tokio::signal::ctrl_c() => {},
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}
