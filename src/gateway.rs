//! The request path of `POST /v1/chat/completions`, in one place.
//!
//! ```text
//! parse & validate ─► route ─► dispatch (egress) ─► translate (providers) ─► respond
//!   api::ChatRequest   routing   egress::Upstream    Adapter / SseRelay       metrics
//! ```
//!
//! Each step lives in its own module; this file only chains them and decides what
//! happens on failure: an error before the first byte reaches the client moves on to
//! the next endpoint of the plan when it is retryable (connect failure, timeout, 5xx,
//! 429); after the first byte, the stream ends with an error event.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{HeaderValue, Response, StatusCode};
use metrics_exporter_prometheus::PrometheusHandle;

use crate::api::ChatRequest;
use crate::body::{self, Body};
use crate::config::Config;
use crate::egress::relay::{collect, SseRelay, StreamEnd, StreamObserver};
use crate::egress::Upstream;
use crate::error::{ErrorKind, GatewayError};
use crate::metrics as m;
use crate::providers::StreamContext;
use crate::routing::{Endpoint, Registry};

/// Most endpoints tried for one request before giving up.
pub const MAX_ATTEMPTS: usize = 3;

/// Everything the request path reads, built once from config.
#[derive(Debug)]
pub struct Gateway {
    /// The validated config.
    pub config: Config,
    /// One per provider, in config order.
    pub upstreams: Vec<Upstream>,
    /// Logical models and their endpoints.
    pub registry: Registry,
    /// Renders `/metrics`; `None` when another recorder owns the process.
    pub metrics: Option<PrometheusHandle>,
    /// Metric handles per endpoint, parallel to `registry.endpoints`.
    endpoint_metrics: Vec<Arc<EndpointMetrics>>,
    /// `switchyard_in_flight_requests`.
    pub in_flight: metrics::Gauge,
    draining: AtomicBool,
    models_json: Bytes,
}

/// Metric handles of one endpoint, registered once so the request path only bumps
/// atomics instead of hashing label sets.
#[derive(Debug)]
struct EndpointMetrics {
    ok: metrics::Counter,
    stream_error: metrics::Counter,
    client_gone: metrics::Counter,
    duration: metrics::Histogram,
    ttft: metrics::Histogram,
}

impl EndpointMetrics {
    fn new(model: &str, endpoint: &str) -> EndpointMetrics {
        let counter = |status: &'static str| metrics::counter!(m::REQUESTS, "model" => model.to_string(), "endpoint" => endpoint.to_string(), "status" => status);
        EndpointMetrics {
            ok: counter("200"),
            stream_error: counter("stream_error"),
            client_gone: counter("client_gone"),
            duration: metrics::histogram!(m::DURATION, "model" => model.to_string(), "endpoint" => endpoint.to_string()),
            ttft: metrics::histogram!(m::TTFT, "model" => model.to_string(), "endpoint" => endpoint.to_string()),
        }
    }
}

impl Gateway {
    /// Builds the gateway state: one upstream client per provider, the registry, the
    /// `/v1/models` body. API keys are read through `env`.
    ///
    /// # Errors
    /// One sentence per provider that cannot be set up.
    pub fn new(
        config: Config,
        metrics: Option<PrometheusHandle>,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<Gateway, Vec<String>> {
        let mut upstreams = Vec::new();
        let mut errors = Vec::new();
        for p in &config.providers {
            match Upstream::new(p, &env) {
                Ok(u) => upstreams.push(u),
                Err(e) => errors.push(e),
            }
        }
        if !errors.is_empty() {
            return Err(errors);
        }
        let registry = Registry::from_config(&config, |name| {
            config.providers.iter().position(|p| p.name == name)
        });
        let data: Vec<serde_json::Value> = registry
            .model_order
            .iter()
            .map(|name| {
                serde_json::json!({
                    "id": &**name,
                    "object": "model",
                    "created": 0,
                    "owned_by": "switchyard",
                })
            })
            .collect();
        let mut endpoint_metrics: Vec<Arc<EndpointMetrics>> = Vec::new();
        for model in registry.models.values() {
            for &i in &model.endpoints {
                while endpoint_metrics.len() <= i {
                    endpoint_metrics.push(Arc::new(EndpointMetrics::new("", "")));
                }
                endpoint_metrics[i] =
                    Arc::new(EndpointMetrics::new(&model.name, &registry.endpoints[i].id));
            }
        }
        let models_json = Bytes::from(
            serde_json::to_vec(&serde_json::json!({"object": "list", "data": data}))
                .unwrap_or_default(),
        );
        Ok(Gateway {
            config,
            upstreams,
            registry,
            metrics,
            endpoint_metrics,
            in_flight: metrics::gauge!(m::IN_FLIGHT),
            draining: AtomicBool::new(false),
            models_json,
        })
    }

    /// The `GET /v1/models` body (OpenAI list shape).
    pub fn models_json(&self) -> Bytes {
        self.models_json.clone()
    }

    /// Marks the gateway as draining: `/ready` answers 503 from now on.
    pub fn start_draining(&self) {
        self.draining.store(true, Ordering::Relaxed);
    }

    /// Whether shutdown has begun.
    pub fn is_draining(&self) -> bool {
        self.draining.load(Ordering::Relaxed)
    }

    /// Serves one chat completion request body.
    pub async fn chat(self: &Arc<Self>, body: Bytes, started: Instant) -> Response<Body> {
        let chat = match ChatRequest::parse_bytes(body) {
            Ok(c) => c,
            Err(e) => return self.fail(None, None, e, started),
        };
        let model = match self.registry.model(&chat.model) {
            Ok(m) => m,
            Err(e) => return self.fail(None, None, e, started),
        };
        let plan = match self.registry.plan(model) {
            Ok(p) => p,
            Err(e) => return self.fail(Some(&model.name), None, e, started),
        };
        let mut last: Option<(GatewayError, usize)> = None;
        for &ep_idx in plan.iter().take(MAX_ATTEMPTS) {
            let ep = &self.registry.endpoints[ep_idx];
            match self.dispatch(ep_idx, &chat, started).await {
                Ok(resp) => return resp,
                Err(e) => {
                    metrics::counter!(m::UPSTREAM_ERRORS, "endpoint" => ep.id.to_string(), "kind" => e.kind.metric_label())
                        .increment(1);
                    tracing::warn!(endpoint = %ep.id, model = %model.name, error = %e, "attempt failed");
                    let retry = e.kind.retryable();
                    last = Some((e, ep_idx));
                    if !retry {
                        break;
                    }
                }
            }
        }
        let (e, ep_idx) = last.unwrap_or_else(|| {
            (
                GatewayError::new(ErrorKind::NoEndpoint, "no endpoint could be tried"),
                plan[0],
            )
        });
        let ep_id = self.registry.endpoints[ep_idx].id.clone();
        self.fail(Some(&model.name), Some(&ep_id), e, started)
    }

    /// One attempt on one endpoint.
    async fn dispatch(
        &self,
        ep_idx: usize,
        chat: &ChatRequest,
        started: Instant,
    ) -> Result<Response<Body>, GatewayError> {
        let ep: &Endpoint = &self.registry.endpoints[ep_idx];
        let up = &self.upstreams[ep.provider];
        let sent = up.send(&ep.upstream_model, chat).await?;
        let deadline = tokio::time::Instant::from_std(
            sent.sent_at + Duration::from_millis(up.timeouts.total_ms),
        );
        let idle = Duration::from_millis(up.timeouts.idle_ms);
        let (parts, upstream_body) = sent.response.into_parts();
        if !parts.status.is_success() {
            let bytes = collect(upstream_body, idle, deadline, &up.name).await?;
            return Err(up
                .adapter()
                .error(parts.status.as_u16(), &parts.headers, &bytes));
        }
        let mut resp = if chat.is_stream() {
            let transcoder = up.adapter().stream(StreamContext {
                logical_model: chat.model.clone(),
                include_usage: chat.wants_usage_chunk(),
                prompt_tokens_estimate: chat.estimated_input_tokens(),
            });
            let observer = Box::new(RequestLog {
                metrics: self.endpoint_metrics[ep_idx].clone(),
                started,
            });
            let relay = SseRelay::new(
                upstream_body,
                transcoder,
                idle,
                deadline,
                &up.name,
                observer,
            );
            let mut r = Response::new(Body::new(relay));
            let h = r.headers_mut();
            h.insert(
                http::header::CONTENT_TYPE,
                HeaderValue::from_static("text/event-stream"),
            );
            h.insert(
                http::header::CACHE_CONTROL,
                HeaderValue::from_static("no-cache"),
            );
            r
        } else {
            let bytes = collect(upstream_body, idle, deadline, &up.name).await?;
            let out = up.adapter().response(&bytes, &chat.model)?;
            let mut r = Response::new(body::full(out));
            r.headers_mut().insert(
                http::header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            );
            let em = &self.endpoint_metrics[ep_idx];
            em.ok.increment(1);
            em.duration.record(started.elapsed().as_secs_f64());
            r
        };
        if let Ok(v) = HeaderValue::from_str(&ep.id) {
            resp.headers_mut().insert("x-switchyard-endpoint", v);
        }
        Ok(resp)
    }

    /// Turns an error into the client's response and records it.
    fn fail(
        &self,
        model: Option<&Arc<str>>,
        endpoint: Option<&Arc<str>>,
        e: GatewayError,
        started: Instant,
    ) -> Response<Body> {
        let status = e.status();
        metrics::counter!(
            m::REQUESTS,
            "model" => model.map(|m| m.to_string()).unwrap_or_else(|| "none".into()),
            "endpoint" => endpoint.map(|m| m.to_string()).unwrap_or_else(|| "none".into()),
            "status" => status.to_string()
        )
        .increment(1);
        if let (Some(model), Some(endpoint)) = (model, endpoint) {
            metrics::histogram!(m::DURATION, "model" => model.to_string(), "endpoint" => endpoint.to_string())
                .record(started.elapsed().as_secs_f64());
        }
        tracing::debug!(status, error = %e, "request failed");
        error_response(&e)
    }
}

/// The OpenAI-shaped error response for `e`, with `Retry-After` when known.
pub fn error_response(e: &GatewayError) -> Response<Body> {
    let mut r = Response::new(body::full(e.to_response_body()));
    *r.status_mut() = StatusCode::from_u16(e.status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    r.headers_mut().insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    if let Some(s) = e.retry_after_s {
        r.headers_mut()
            .insert(http::header::RETRY_AFTER, HeaderValue::from(s));
    }
    r
}

/// Records a finished stream's metrics.
struct RequestLog {
    metrics: Arc<EndpointMetrics>,
    started: Instant,
}

impl StreamObserver for RequestLog {
    fn first_token(&mut self) {
        self.metrics
            .ttft
            .record(self.started.elapsed().as_secs_f64());
    }

    fn finished(&mut self, end: StreamEnd) {
        let m = &self.metrics;
        match end {
            StreamEnd::Completed => m.ok.increment(1),
            StreamEnd::Failed(_) => m.stream_error.increment(1),
            StreamEnd::ClientGone => m.client_gone.increment(1),
        }
        m.duration.record(self.started.elapsed().as_secs_f64());
    }
}
