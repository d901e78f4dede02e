//! Egress (seed 001, "Egress and Health Monitoring"): sending a built request to a
//! provider and enforcing its timeouts.
//!
//! An [`Upstream`] is one configured provider: its adapter (the wire format), its
//! timeouts, and a [`Transport`] that carries built HTTP requests. The transport is
//! the seam where the network is: [`http::HttpTransport`] sends `http://` requests
//! through Switchyard's own HTTP/1.1 client ([`h1`]: keep-alive, an idle connection
//! is its socket alone) and `https://` ones through a pooled hyper client (TLS
//! through rustls with session reuse, HTTP/2 when the server offers it by ALPN),
//! and the provider emulator (`kind: mock`) implements the same trait in
//! process. Circuit breakers and failover wrap transports; nothing in egress knows
//! which one it has.
//!
//! Timeouts (per provider, `timeouts:` in config): `connect_ms` bounds TCP+TLS setup,
//! `first_byte_ms` bounds the wait for response headers, `idle_ms` bounds silence
//! between body chunks and `total_ms` bounds the whole exchange; the last two are
//! enforced while the body is read ([`relay`]).
//!
//! Egress never re-sends a request on its own: a provider bills every request it
//! received. The one safe re-send, of a request not yet written on a reused pooled
//! connection that the provider had closed, is hyper-util's pool's (once; `https://`
//! only: [`h1`] checks an idle connection before it writes on it instead); every
//! other failure goes back to the fallback chain with its retry safety
//! ([`crate::error::Retry`]) and is counted as an attempt.

pub mod forward;
pub mod h1;
pub mod http;
pub mod relay;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ::http::{HeaderValue, Request, Response};

use crate::api::ChatRequest;
use crate::body::Body;
use crate::config::{ProviderConfig, ProviderKind, Timeouts};
use crate::error::{Code, ErrorKind, GatewayError};
use crate::providers::{adapter_for, Adapter, Target};

/// What a transport's `send` returns: the response head (body not yet read), or the
/// failure with its retry safety.
pub type SendFuture<'a> =
    Pin<Box<dyn Future<Output = Result<Response<Body>, GatewayError>> + Send + 'a>>;

/// Carries one built provider request and resolves when the response head arrives.
///
/// Non-2xx answers are responses, not errors (the adapter reads their bodies). An
/// error names the provider and says where a retry is safe. A transport never sends
/// a request twice unless the provider cannot have seen the first. Deadlines are the
/// caller's: [`Upstream::send`] bounds the wait for the head.
pub trait Transport: Send + Sync + std::fmt::Debug {
    /// Sends `req`.
    fn send(&self, req: Request<Body>) -> SendFuture<'_>;
}

/// One configured provider, ready to send requests.
#[derive(Debug)]
pub struct Upstream {
    /// The provider's name in config.
    pub name: String,
    /// Its wire format family.
    pub kind: ProviderKind,
    /// Its timeouts.
    pub timeouts: Timeouts,
    /// It continues a final assistant message (`prefill` in config).
    pub prefill: bool,
    base_url: String,
    api_key: Option<String>,
    forward_headers: Vec<crate::config::headers::Listed>,
    adapter: Box<dyn Adapter>,
    transport: Arc<dyn Transport>,
}

/// A response head and body from a provider, before any translation.
#[derive(Debug)]
pub struct UpstreamResponse {
    /// The provider's response (status, headers, body not yet read).
    pub response: Response<Body>,
    /// When the request was sent; `total_ms` counts from here.
    pub sent_at: Instant,
}

impl Upstream {
    /// The provider's base URL (`base_url` in config).
    pub fn base_url(&self) -> &str {
        &self.base_url
    }

    /// The provider of `cfg`, sending through `transport`, with the API key read from
    /// its environment variable via `env`.
    ///
    /// # Errors
    /// A sentence when the provider's adapter cannot be set up (Bedrock without a
    /// region or credentials).
    pub fn new(
        cfg: &ProviderConfig,
        env: impl Fn(&str) -> Option<String>,
        transport: Arc<dyn Transport>,
    ) -> Result<Upstream, String> {
        let adapter = adapter_for(cfg, &env)?;
        let api_key = cfg.api_key_env.as_deref().and_then(&env);
        if let (Some(var), None) = (&cfg.api_key_env, &api_key) {
            let then = if cfg.kind == crate::config::ProviderKind::Bedrock {
                "requests use AWS_BEARER_TOKEN_BEDROCK or AWS credentials instead"
            } else {
                "requests go without a key"
            };
            tracing::warn!(
                provider = %cfg.name,
                "providers.{}.api_key_env: {var} is not set; {then}",
                cfg.name
            );
        }
        Ok(Upstream {
            name: cfg.name.clone(),
            kind: cfg.kind,
            timeouts: cfg.timeouts,
            prefill: cfg.prefill,
            base_url: cfg.base_url.clone(),
            api_key,
            forward_headers: cfg.forward_headers.clone(),
            adapter,
            transport,
        })
    }

    /// The wire-format adapter of this provider.
    pub fn adapter(&self) -> &dyn Adapter {
        self.adapter.as_ref()
    }

    /// Sends `chat` for upstream model `model` and waits for the response head (at most
    /// `first_byte_ms`, and never past `total_ms`). Non-2xx answers are returned as
    /// responses, not errors, so the caller can read the provider's error body.
    ///
    /// # Errors
    /// The adapter's 400 when the request cannot be expressed for this provider; 502
    /// when the provider cannot be reached or the connection failed mid-exchange; 504
    /// when connect or first byte time out.
    ///
    /// `traceparent` (the attempt's span, when traced) replaces the client's
    /// `traceparent`; without one the client's is forwarded as it came. `sent_at`:
    /// when the attempt began, from which the first-byte deadline counts (and the
    /// answer's [`UpstreamResponse::sent_at`]).
    pub async fn send(
        &self,
        model: &str,
        chat: &ChatRequest,
        traceparent: Option<HeaderValue>,
        sent_at: Instant,
    ) -> Result<UpstreamResponse, GatewayError> {
        let target = Target {
            base_url: &self.base_url,
            model,
            api_key: self.api_key.as_deref(),
        };
        // `total_ms` bounds the whole exchange, the wait for the head included.
        let head_ms = self.timeouts.first_byte_ms.min(self.timeouts.total_ms);
        // The request is built in a block, so its slot ends when the transport takes
        // it instead of staying in this future while the answer is awaited.
        let sending = {
            let mut req = self.adapter.request(&target, chat)?;
            forward::apply(
                &chat.headers,
                self.kind,
                &self.forward_headers,
                req.headers_mut(),
            );
            if let Some(id) = &chat.request_id {
                forward::request_id(id, self.kind, &self.forward_headers, req.headers_mut());
            }
            if let Some(tp) = traceparent {
                req.headers_mut().insert(crate::otel::TRACEPARENT, tp);
            }
            self.transport.send(req)
        };
        // The deadline from `sent_at`, not from a new reading of the clock: the
        // attempt began microseconds ago, and each reading costs about 30 ns.
        let head_deadline =
            tokio::time::Instant::from_std(sent_at + Duration::from_millis(head_ms));
        match tokio::time::timeout_at(head_deadline, sending).await {
            Err(_) => Err(self.first_byte_timeout()),
            Ok(Ok(response)) => Ok(UpstreamResponse { response, sent_at }),
            Ok(Err(e)) => Err(e),
        }
    }

    fn first_byte_timeout(&self) -> GatewayError {
        let (ms, which) = if self.timeouts.total_ms < self.timeouts.first_byte_ms {
            (self.timeouts.total_ms, "total_ms")
        } else {
            (self.timeouts.first_byte_ms, "first_byte_ms")
        };
        GatewayError::new(
            ErrorKind::UpstreamTimeout,
            format!(
                "provider `{}` sent no response within {ms} ms ({which})",
                self.name
            ),
        )
        .with_code(Code::UpstreamTimeout)
    }
}
