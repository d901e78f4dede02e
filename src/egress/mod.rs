//! Egress (seed 001, "Egress and Health Monitoring"): sending a built request to a
//! provider and enforcing its timeouts.
//!
//! Each provider gets one pooled hyper client (keep-alive, TLS through rustls with
//! session reuse, HTTP/2 when the server offers it by ALPN), so connections are reused
//! across requests. The `mock` kind skips the network and calls the emulator in
//! process; everything after the response head is the same for both.
//!
//! Timeouts (per provider, `timeouts:` in config): `connect_ms` bounds TCP+TLS setup,
//! `first_byte_ms` bounds the wait for response headers, `idle_ms` bounds silence
//! between body chunks and `total_ms` bounds the whole exchange; the last two are
//! enforced while the body is read ([`relay`]).

pub mod relay;

use std::sync::Arc;
use std::time::{Duration, Instant};

use http::Response;
use http_body_util::BodyExt;
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

use crate::api::ChatRequest;
use crate::body::Body;
use crate::config::{ProviderConfig, ProviderKind, Timeouts};
use crate::error::{ErrorKind, GatewayError};
use crate::mock::MockProvider;
use crate::providers::{adapter_for, Adapter, Target};

type HttpClient = Client<HttpsConnector<HttpConnector>, Body>;

/// How requests reach a provider.
#[derive(Debug)]
enum Transport {
    Http(Box<HttpClient>),
    InProcess(Arc<MockProvider>),
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
    base_url: String,
    api_key: Option<String>,
    adapter: Box<dyn Adapter>,
    transport: Transport,
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
    /// Builds the client for `cfg`, reading the API key from its environment variable
    /// via `env`.
    ///
    /// # Errors
    /// A sentence when the provider kind has no adapter yet.
    pub fn new(
        cfg: &ProviderConfig,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<Upstream, String> {
        let adapter = adapter_for(cfg).ok_or_else(|| {
            format!(
                "providers.{}: kind `{}` has no adapter in this build yet",
                cfg.name,
                cfg.kind.as_str()
            )
        })?;
        let transport = if cfg.kind == ProviderKind::Mock {
            Transport::InProcess(Arc::new(MockProvider::new(cfg.mock.clone())))
        } else {
            Transport::Http(Box::new(http_client(&cfg.timeouts)))
        };
        let api_key = cfg.api_key_env.as_deref().and_then(env);
        if let (Some(var), None) = (&cfg.api_key_env, &api_key) {
            tracing::warn!(
                provider = %cfg.name,
                "providers.{}.api_key_env: {var} is not set; requests go without a key",
                cfg.name
            );
        }
        Ok(Upstream {
            name: cfg.name.clone(),
            kind: cfg.kind,
            timeouts: cfg.timeouts,
            base_url: cfg.base_url.clone(),
            api_key,
            adapter,
            transport,
        })
    }

    /// The wire-format adapter of this provider.
    pub fn adapter(&self) -> &dyn Adapter {
        self.adapter.as_ref()
    }

    /// Sends `chat` for upstream model `model` and waits for the response head (at most
    /// `first_byte_ms`). Non-2xx answers are returned as responses, not errors, so the
    /// caller can read the provider's error body.
    ///
    /// # Errors
    /// 502 when the connection fails, 504 when connect or first byte time out.
    pub async fn send(
        &self,
        model: &str,
        chat: &ChatRequest,
    ) -> Result<UpstreamResponse, GatewayError> {
        let sent_at = Instant::now();
        let first_byte = Duration::from_millis(self.timeouts.first_byte_ms);
        let response = match &self.transport {
            Transport::InProcess(mock) => {
                let mut c = chat.clone();
                c.model = model.to_string();
                match tokio::time::timeout(first_byte, mock.chat(&c)).await {
                    Ok(r) => r,
                    Err(_) => return Err(self.first_byte_timeout()),
                }
            }
            Transport::Http(client) => {
                let target = Target {
                    base_url: &self.base_url,
                    model,
                    api_key: self.api_key.as_deref(),
                };
                let deadline = tokio::time::Instant::now() + first_byte;
                let mut tries = 0;
                loop {
                    tries += 1;
                    let req = self.adapter.request(&target, chat)?;
                    match tokio::time::timeout_at(deadline, client.request(req)).await {
                        Err(_) => return Err(self.first_byte_timeout()),
                        // A pooled keep-alive connection the provider had already
                        // closed fails before any response byte: the provider never
                        // saw a complete request, so one retry on a fresh connection
                        // is safe and hides the race from the client.
                        Ok(Err(e)) if tries == 1 && stale_connection(&e) => {
                            tracing::debug!(provider = %self.name, error = %e, "stale pooled connection; retrying on a new one");
                            continue;
                        }
                        Ok(Err(e)) => return Err(self.connect_error(&e)),
                        Ok(Ok(r)) => {
                            break r.map(|b| {
                                b.map_err(|e| Box::new(e) as crate::body::BoxError)
                                    .boxed_unsync()
                            })
                        }
                    }
                }
            }
        };
        Ok(UpstreamResponse { response, sent_at })
    }

    fn first_byte_timeout(&self) -> GatewayError {
        GatewayError::new(
            ErrorKind::UpstreamTimeout,
            format!(
                "provider `{}` sent no response within {} ms",
                self.name, self.timeouts.first_byte_ms
            ),
        )
        .with_code(crate::error::Code::UpstreamTimeout)
    }

    fn connect_error(&self, e: &hyper_util::client::legacy::Error) -> GatewayError {
        let mut cause = String::new();
        let mut src: Option<&dyn std::error::Error> = std::error::Error::source(e);
        let mut timed_out = false;
        while let Some(s) = src {
            if let Some(io) = s.downcast_ref::<std::io::Error>() {
                timed_out |= io.kind() == std::io::ErrorKind::TimedOut;
            }
            cause = s.to_string();
            src = s.source();
        }
        if timed_out {
            return GatewayError::new(
                ErrorKind::UpstreamTimeout,
                format!(
                    "could not connect to provider `{}` within {} ms",
                    self.name, self.timeouts.connect_ms
                ),
            )
            .with_code(crate::error::Code::UpstreamTimeout);
        }
        let what = if e.is_connect() {
            "could not connect to"
        } else {
            "request failed at"
        };
        GatewayError::new(
            ErrorKind::BadUpstream,
            format!("{what} provider `{}`: {cause}", self.name),
        )
        .with_code(crate::error::Code::UpstreamUnreachable)
    }
}

/// Whether `e` is a reused connection that the peer closed (reset, or closed before
/// the response began), as opposed to a failure to connect or a timeout.
fn stale_connection(e: &hyper_util::client::legacy::Error) -> bool {
    if e.is_connect() {
        return false;
    }
    let mut src: Option<&(dyn std::error::Error + 'static)> = std::error::Error::source(e);
    while let Some(s) = src {
        if let Some(h) = s.downcast_ref::<hyper::Error>() {
            if h.is_incomplete_message() || h.is_canceled() {
                return true;
            }
        }
        if let Some(io) = s.downcast_ref::<std::io::Error>() {
            if matches!(
                io.kind(),
                std::io::ErrorKind::ConnectionReset
                    | std::io::ErrorKind::BrokenPipe
                    | std::io::ErrorKind::ConnectionAborted
            ) {
                return true;
            }
        }
        src = s.source();
    }
    false
}

fn http_client(t: &Timeouts) -> HttpClient {
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
        .pool_max_idle_per_host(1024)
        .pool_timer(hyper_util::rt::TokioTimer::new())
        .build(https)
}
