//! The HTTP listener shared by `switchyard serve` and `switchyard mock`: accept loop,
//! HTTP/1.1 and HTTP/2 (h2c) on one port, and graceful shutdown.
//!
//! Shutdown follows Pingora's order: stop accepting, tell every connection to finish
//! its in-flight requests (HTTP/1 stops keep-alive, HTTP/2 sends GOAWAY), wait for them
//! up to the drain timeout, then return so the process can exit.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::time::Duration;

use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::TcpListener;

use crate::body::Body;

/// Serves `handler` on `listener` until `shutdown` completes, then drains in-flight
/// connections for at most `drain`. If the drain runs out of time, `on_drain_timeout`
/// runs (the gateway ends its live streams with an error event there) and the
/// connections get one more second to write what it produced.
///
/// Accept errors (for example too many open files) are logged and retried after a short
/// pause rather than ending the server.
pub async fn serve<H, F>(
    listener: TcpListener,
    handler: H,
    shutdown: impl Future<Output = ()>,
    drain: Duration,
    on_drain_timeout: impl FnOnce(),
) where
    H: Fn(Request<Incoming>, SocketAddr) -> F + Clone + Send + Sync + 'static,
    F: Future<Output = Response<Body>> + Send + 'static,
{
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder.http1().timer(hyper_util::rt::TokioTimer::new());
    builder
        .http2()
        .timer(hyper_util::rt::TokioTimer::new())
        .keep_alive_interval(Some(Duration::from_secs(20)));
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
        let service = service_fn(move |req: Request<Incoming>| {
            let fut = handler(req, peer);
            async move { Ok::<_, Infallible>(fut.await) }
        });
        let conn = builder
            .serve_connection(TokioIo::new(stream), service)
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
