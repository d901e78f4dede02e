//! The network [`Transport`]: per provider, the lean HTTP/1.1 client of
//! [`super::h1`] for `http://` base URLs and a pooled hyper-util client for
//! `https://` ones.
//!
//! Connections are kept alive and reused across requests (up to 1,024 idle per host,
//! closed after 90 s idle), TLS goes through rustls with the webpki roots and session
//! reuse, and HTTP/2 is used when the provider offers it by ALPN. Failures are
//! classified here, once, into errors that say where a retry is safe.
//!
//! hyper-util's pool (`https://`) re-sends a request on its own only when it was not
//! yet written on a reused connection the provider had closed (hyper-util's `retry_canceled_requests`,
//! on by default: a fresh connection, or a request already written, is never re-sent).

use std::time::Duration;

use http::Request;
use http_body_util::BodyExt;
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

use super::{SendFuture, Transport};
use crate::body::{Body, BoxError};
use crate::config::Timeouts;
use crate::error::{Code, ErrorKind, GatewayError, Retry};

type HttpClient = Client<HttpsConnector<HttpConnector>, Body>;

/// A pooled HTTP/1.1 + HTTP/2 client for one provider.
#[derive(Debug)]
pub struct HttpTransport {
    provider: String,
    connect_ms: u64,
    /// One pool per serving thread ([`crate::server::core_index`]): index 0 for the
    /// shared runtime, 1 to N for the per-core threads.
    clients: Box<[HttpClient]>,
    /// The client of `http://` requests, with one idle list per serving thread.
    plain: super::h1::H1Client,
}

impl HttpTransport {
    /// The client of provider `provider`, with its `connect_ms` timeout and
    /// `per_core + 1` connection pools: one for each per-core serving thread
    /// ([`crate::server::core_index`] 1 to `per_core`) and one for every other
    /// thread. A request takes the pool of the thread it runs on, so its upstream
    /// connection's task is on that thread too and no wake-up crosses threads.
    ///
    /// The pools share [`MAX_IDLE_PER_HOST`] idle connections between them (each
    /// keeps `MAX_IDLE_PER_HOST / per_core`, at least [`MIN_IDLE_PER_POOL`]): with a
    /// whole cap each, `per_core` pools could keep that many times the idle upstream
    /// connections of the one shared pool (after a 2,048-connection load, two
    /// per-core pools held 1,786 open where the shared pool held 1,025).
    pub fn new(provider: &str, timeouts: &Timeouts, per_core: usize) -> HttpTransport {
        let idle = idle_per_pool(per_core);
        HttpTransport {
            provider: provider.to_string(),
            connect_ms: timeouts.connect_ms,
            clients: (0..=per_core)
                .map(|_| http_client(timeouts, idle))
                .collect(),
            plain: super::h1::H1Client::new(
                per_core + 1,
                idle,
                Duration::from_millis(timeouts.connect_ms),
            ),
        }
    }

    /// The error for a failed request of the `http://` client: as
    /// [`HttpTransport::error`] for hyper-util's.
    fn plain_error(&self, e: super::h1::SendError) -> GatewayError {
        use super::h1::SendError;
        let (failure, cause) = match &e {
            SendError::ConnectTimeout => (Failure::ConnectTimeout, String::new()),
            SendError::Connect(io) => (Failure::Connect, io.to_string()),
            SendError::Exchange(io) => (Failure::Exchange, io.to_string()),
        };
        self.failed(failure, &cause, e)
    }

    /// The error for a failed request of hyper-util's client: its innermost cause,
    /// a connect timeout told by an `io::ErrorKind::TimedOut` in the chain.
    fn error(&self, e: hyper_util::client::legacy::Error) -> GatewayError {
        let mut cause = String::new();
        let mut src: Option<&dyn std::error::Error> = std::error::Error::source(&e);
        let mut timed_out = false;
        while let Some(s) = src {
            if let Some(io) = s.downcast_ref::<std::io::Error>() {
                timed_out |= io.kind() == std::io::ErrorKind::TimedOut;
            }
            cause = s.to_string();
            src = s.source();
        }
        let failure = match (timed_out, e.is_connect()) {
            (true, _) => Failure::ConnectTimeout,
            (false, true) => Failure::Connect,
            (false, false) => Failure::Exchange,
        };
        self.failed(failure, &cause, e)
    }

    /// The gateway's error for a request that failed as `failure`, whichever client
    /// sent it: 504 for a connect timeout, else 502 `upstream_unreachable` with its
    /// retry safety; `e` kept as the source.
    fn failed(
        &self,
        failure: Failure,
        cause: &str,
        e: impl std::error::Error + Send + Sync + 'static,
    ) -> GatewayError {
        let (what, retry) = match failure {
            Failure::ConnectTimeout => {
                return GatewayError::new(
                    ErrorKind::UpstreamTimeout,
                    format!(
                        "could not connect to provider `{}` within {} ms",
                        self.provider, self.connect_ms
                    ),
                )
                .with_code(Code::UpstreamTimeout)
                .with_source(e)
            }
            Failure::Connect => ("could not connect to", Retry::Any),
            // The connection broke after the request went out: the provider may have
            // received it (and bill it), so it is not sent there again; the next
            // endpoint may take it.
            Failure::Exchange => ("request failed at", Retry::OtherEndpoint),
        };
        GatewayError::new(
            ErrorKind::BadUpstream,
            format!("{what} provider `{}`: {cause}", self.provider),
        )
        .with_code(Code::UpstreamUnreachable)
        .with_retry(retry)
        .with_source(e)
    }
}

/// How far a failed upstream request got, for [`HttpTransport::failed`].
#[derive(Debug, Clone, Copy)]
enum Failure {
    /// No connection within `connect_ms`.
    ConnectTimeout,
    /// No connection: nothing was sent.
    Connect,
    /// The request went out, perhaps partly.
    Exchange,
}

impl Transport for HttpTransport {
    fn send(&self, req: Request<Body>) -> SendFuture<'_> {
        if req.uri().scheme() == Some(&http::uri::Scheme::HTTP) {
            return Box::pin(
                async move { self.plain.send(req).await.map_err(|e| self.plain_error(e)) },
            );
        }
        let i = crate::server::core_index();
        // Index 0 always exists; a thread beyond the pools (none today) shares it.
        let client = self.clients.get(i).unwrap_or(&self.clients[0]);
        let fut = client.request(req);
        Box::pin(async move {
            match fut.await {
                Ok(r) => {
                    Ok(r.map(|b| b.map_err(|e| Box::new(e) as BoxError).boxed_unsync().into()))
                }
                Err(e) => Err(self.error(e)),
            }
        })
    }
}

/// Idle upstream connections kept per provider host, over all of a provider's pools.
pub const MAX_IDLE_PER_HOST: usize = 1024;

/// The fewest idle connections one pool keeps, however many threads share the cap.
pub const MIN_IDLE_PER_POOL: usize = 32;

/// Idle connections per pool with `per_core` per-core pools (0: the one shared pool
/// keeps [`MAX_IDLE_PER_HOST`]).
fn idle_per_pool(per_core: usize) -> usize {
    (MAX_IDLE_PER_HOST / per_core.max(1)).max(MIN_IDLE_PER_POOL)
}

fn http_client(t: &Timeouts, max_idle: usize) -> HttpClient {
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    http.set_nodelay(true);
    http.set_connect_timeout(Some(Duration::from_millis(t.connect_ms)));
    http.set_keepalive(Some(Duration::from_secs(60)));
    let https = hyper_rustls::HttpsConnectorBuilder::new()
        .with_webpki_roots()
        .https_or_http()
        .enable_http1()
        .enable_http2()
        .wrap_connector(http);
    Client::builder(TokioExecutor::new())
        .pool_idle_timeout(Duration::from_secs(90))
        .pool_max_idle_per_host(max_idle)
        .pool_timer(hyper_util::rt::TokioTimer::new())
        .build(https)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn per_core_pools_share_the_idle_cap() {
        assert_eq!(
            idle_per_pool(0),
            MAX_IDLE_PER_HOST,
            "the shared runtime's one pool"
        );
        assert_eq!(idle_per_pool(1), MAX_IDLE_PER_HOST);
        assert_eq!(idle_per_pool(2), MAX_IDLE_PER_HOST / 2);
        assert_eq!(
            idle_per_pool(256),
            MIN_IDLE_PER_POOL,
            "never below the floor"
        );
    }
}
