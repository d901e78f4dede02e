//! The request path of `POST /v1/chat/completions`, in one place.
//!
//! ```text
//! parse & validate ─► decide (policy) ─► dispatch (egress) ─► translate ─► respond
//!   api::ChatRequest    routing            egress::Upstream     providers    metrics,
//!                                                                            stats
//! ```
//!
//! Each step lives in its own module; this file only chains them and decides what
//! happens on failure. The policy decision gives an ordered plan (the chosen endpoint,
//! then the fallback chain) with a retry count and backoff. Following seed 000,
//! Algorithm 1, each endpoint gets up to `retries + 1` attempts while its errors are
//! retryable (connect failure, timeout, 5xx, 429), sleeping the backoff between them;
//! other upstream errors move on to the next endpoint; errors that are the client's
//! fault end the request at once. Only errors before the first byte reaches the client
//! are retried: after that, the stream ends with an error event.
//!
//! Each request loads the policy snapshot once and finishes on it, so a reload never
//! mixes versions within a request; the version is sent as `x-switchyard-policy`.

mod metrics_handles;
mod outcome;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use arc_swap::ArcSwap;
use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Response, StatusCode};
use metrics_exporter_prometheus::PrometheusHandle;

use crate::api::ChatRequest;
use crate::body::{self, Body};
use crate::config::Config;
use crate::egress::relay::{collect, SseRelay};
use crate::egress::Upstream;
use crate::error::{ErrorKind, GatewayError};
use crate::telemetry as m;
use crate::routing::features::{features, Caller};
use crate::policy::{Decision, RequestFeatures};
use crate::providers::StreamContext;
use crate::routing::policy::PolicySnapshot;
use crate::routing::Registry;
use crate::stats::{ratelimit, StatsStore};

use metrics_handles::EndpointMetrics;
use outcome::{Attempt, StreamLog};

/// Most attempts for one request, across endpoints and retries.
pub const MAX_ATTEMPTS: usize = 8;

/// Everything the request path reads, built once from config.
#[derive(Debug)]
pub struct Gateway {
    /// The validated config.
    pub config: Config,
    /// One per provider, in config order.
    pub upstreams: Vec<Upstream>,
    /// Logical models and their endpoints.
    pub registry: Registry,
    /// The live policy set; replaced whole on reload.
    pub policy: ArcSwap<PolicySnapshot>,
    /// Endpoint statistics, indexed like `registry.endpoints`.
    pub stats: StatsStore,
    /// Renders `/metrics`; `None` when another recorder owns the process.
    pub metrics: Option<PrometheusHandle>,
    /// `switchyard_in_flight_requests`.
    pub in_flight: metrics::Gauge,
    endpoint_metrics: Vec<Arc<EndpointMetrics>>,
    endpoint_index: HashMap<String, usize>,
    /// Serializes every read-modify-write of strategy state: decisions that apply
    /// `on pick` updates (see `decide`) and `on success` / `on failure` updates
    /// (`outcome.rs`), so stateful strategies see every earlier pick and outcome.
    decision_lock: Mutex<()>,
    /// The hot-reload machinery, once started (for `/admin/policies`).
    pub reloader: std::sync::OnceLock<std::sync::Weak<crate::reload::Reloader>>,
    draining: AtomicBool,
    models_json: Bytes,
}

impl Gateway {
    /// Builds the gateway state: one upstream client per provider, the registry, the
    /// statistics store and the `/v1/models` body, serving `policy`. API keys are read
    /// through `env`.
    ///
    /// # Errors
    /// One sentence per provider that cannot be set up.
    pub fn new(
        config: Config,
        policy: PolicySnapshot,
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
        let endpoint_metrics = registry
            .endpoints
            .iter()
            .map(|e| Arc::new(EndpointMetrics::new(&e.model, &e.id)))
            .collect();
        let endpoint_index = registry
            .endpoints
            .iter()
            .enumerate()
            .map(|(i, e)| (e.id.to_string(), i))
            .collect();
        let stats = StatsStore::from_config(&config);
        let data: Vec<serde_json::Value> = registry
            .model_order
            .iter()
            .map(|name| {
                serde_json::json!({"id": &**name, "object": "model", "created": 0, "owned_by": "switchyard"})
            })
            .collect();
        let models_json = Bytes::from(
            serde_json::to_vec(&serde_json::json!({"object": "list", "data": data}))
                .unwrap_or_default(),
        );
        Ok(Gateway {
            config,
            upstreams,
            registry,
            policy: ArcSwap::from_pointee(policy),
            stats,
            metrics,
            in_flight: metrics::gauge!(m::IN_FLIGHT),
            endpoint_metrics,
            endpoint_index,
            decision_lock: Mutex::new(()),
            reloader: std::sync::OnceLock::new(),
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

    /// Serves one chat completion request body with the client's `headers`.
    pub async fn chat(
        self: &Arc<Self>,
        body: Bytes,
        headers: &HeaderMap,
        started: Instant,
    ) -> Response<Body> {
        let snap = self.policy.load_full();
        let mut resp = self.chat_on(&snap, body, headers, started).await;
        if let Ok(v) = HeaderValue::from_str(&snap.version) {
            resp.headers_mut().insert("x-switchyard-policy", v);
        }
        resp
    }

    async fn chat_on(
        self: &Arc<Self>,
        snap: &Arc<PolicySnapshot>,
        body: Bytes,
        headers: &HeaderMap,
        started: Instant,
    ) -> Response<Body> {
        let chat = match ChatRequest::parse_bytes(body) {
            Ok(c) => c,
            Err(e) => return self.fail(None, e),
        };
        let now = SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        let pairs = headers
            .iter()
            .filter_map(|(k, v)| Some((k.as_str(), v.to_str().ok()?)));
        let features = features(&chat, pairs, &Caller::default(), now);
        let decision = self.decide(snap, &features);
        if let Some(r) = &decision.reject {
            // No route took the request and its model is not in the registry.
            if decision.route.is_none() && r.status == 404 {
                return self.fail(
                    None,
                    self.registry
                        .model(&chat.model)
                        .err()
                        .unwrap_or_else(|| rejection(404, &r.message)),
                );
            }
            return self.fail(None, rejection(r.status, &r.message));
        }
        let plan = self.plan(&decision);
        if plan.is_empty() {
            let e = GatewayError::new(
                ErrorKind::NoEndpoint,
                format!("no endpoint is available for model `{}`", chat.model),
            )
            .with_code(crate::error::Code::NoEndpoint);
            return self.fail(None, e);
        }
        let ctx = Arc::new(outcome::DecisionContext {
            snapshot: snap.clone(),
            features,
            call: decision.call.clone(),
        });
        let mut last: Option<(GatewayError, usize)> = None;
        let mut attempts = 0;
        'plan: for &ep_idx in &plan {
            for retry in 0..=decision.retries {
                if attempts == MAX_ATTEMPTS {
                    break 'plan;
                }
                attempts += 1;
                let attempt = Attempt::begin(self, ep_idx, ctx.clone(), started);
                match self.dispatch(ep_idx, &chat, attempt).await {
                    Ok(resp) => return resp,
                    Err(e) => {
                        let id = &self.registry.endpoints[ep_idx].id;
                        metrics::counter!(m::UPSTREAM_ERRORS, "endpoint" => id.to_string(), "kind" => e.metric_kind())
                            .increment(1);
                        tracing::warn!(policy = %snap.version, endpoint = %id, model = %chat.model, attempt = attempts, error = %e, "attempt failed");
                        let retry_safety = e.retry;
                        last = Some((e, ep_idx));
                        if !retry_safety.other_endpoint() {
                            break 'plan;
                        }
                        if !retry_safety.same_endpoint() {
                            continue 'plan;
                        }
                        if retry < decision.retries {
                            if let Some(wait) = backoff(decision.backoff_ms, retry) {
                                tokio::time::sleep(wait).await;
                            }
                        }
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
        self.fail(Some(ep_idx), e)
    }

    /// Runs the policy for `features` on `snap`, applying `on pick` state updates.
    ///
    /// Decisions run without a lock. Only one that has `on pick` updates to apply
    /// (smooth weighted round-robin, for one) is discarded and made again under
    /// `decision_lock` on a fresh statistics snapshot, so every applied update comes
    /// from a decision that saw all earlier picks, and requests whose strategy keeps no
    /// pick state never wait for one that does.
    fn decide(&self, snap: &PolicySnapshot, features: &RequestFeatures) -> Decision {
        let seed = rand::random::<u64>();
        let stats = self
            .stats
            .snapshot_for_task(SystemTime::now(), &features.task);
        let decision = snap.compiled.decide(features, &stats, seed);
        if decision.state_updates.is_empty() {
            return decision;
        }
        let _guard = self.decision_lock.lock().unwrap_or_else(|p| p.into_inner());
        let stats = self
            .stats
            .snapshot_for_task(SystemTime::now(), &features.task);
        let decision = snap.compiled.decide(features, &stats, seed);
        for u in &decision.state_updates {
            if let Some(slot) = self
                .stats
                .index(&u.endpoint)
                .and_then(|i| self.stats.slot(i))
            {
                slot.set_state(&u.strategy, &u.slots);
            }
        }
        decision
    }

    /// The endpoint indices of a decision's plan, without duplicates.
    fn plan(&self, d: &Decision) -> Vec<usize> {
        let mut plan = Vec::with_capacity(1 + d.fallbacks.len());
        let ids = d
            .endpoint
            .iter()
            .chain(d.fallbacks.iter().map(|s| &s.endpoint));
        for id in ids {
            if let Some(&i) = self.endpoint_index.get(id.as_str()) {
                if !plan.contains(&i) {
                    plan.push(i);
                }
            }
        }
        plan
    }

    /// One attempt on one endpoint.
    async fn dispatch(
        self: &Arc<Self>,
        ep_idx: usize,
        chat: &ChatRequest,
        attempt: Attempt,
    ) -> Result<Response<Body>, GatewayError> {
        let ep = &self.registry.endpoints[ep_idx];
        let up = &self.upstreams[ep.provider];
        let sent = match up.send(&ep.upstream_model, chat).await {
            Ok(s) => s,
            Err(e) => return Err(attempt.failed(e)),
        };
        if let Some(c) = ratelimit::capacity(sent.response.headers(), SystemTime::now()) {
            if let Some(slot) = self.stats.slot(ep_idx) {
                slot.record_capacity(c, SystemTime::now());
            }
        }
        let deadline = tokio::time::Instant::from_std(
            sent.sent_at + Duration::from_millis(up.timeouts.total_ms),
        );
        let idle = Duration::from_millis(up.timeouts.idle_ms);
        let (parts, upstream_body) = sent.response.into_parts();
        if !parts.status.is_success() {
            let err = match collect(upstream_body, idle, deadline, &up.name).await {
                Ok(bytes) => up
                    .adapter()
                    .error(parts.status.as_u16(), &parts.headers, &bytes),
                Err(e) => e,
            };
            return Err(attempt.failed(err));
        }
        let content_type = parts
            .headers
            .get(http::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("");
        if chat.is_stream() && !content_type.is_empty() && !content_type.contains("event-stream") {
            // Not a stream (an HTML error page, or JSON from a provider that ignored
            // `stream`): fail before the first byte so the fallback chain can act.
            let e = GatewayError::new(
                ErrorKind::BadUpstream,
                format!("provider `{}` answered a streaming request with `{content_type}`, not an event stream", up.name),
            )
            .with_code(crate::error::Code::UpstreamBadResponse);
            return Err(attempt.failed(e));
        }
        let mut resp = if chat.is_stream() {
            let transcoder = up.adapter().stream(StreamContext {
                logical_model: chat.model.clone(),
                include_usage: chat.wants_usage_chunk(),
                prompt_tokens_estimate: chat.estimated_input_tokens(),
            });
            let observer = Box::new(StreamLog::new(
                attempt,
                self.endpoint_metrics[ep_idx].clone(),
            ));
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
            let translated = match collect(upstream_body, idle, deadline, &up.name).await {
                Ok(bytes) => up.adapter().response(&bytes, &chat.model),
                Err(e) => Err(e),
            };
            let out = match translated {
                Ok(out) => out,
                Err(e) => return Err(attempt.failed(e)),
            };
            let em = &self.endpoint_metrics[ep_idx];
            em.ok.increment(1);
            em.duration.record(attempt.started.elapsed().as_secs_f64());
            attempt.succeeded(None);
            let mut r = Response::new(body::full(out));
            r.headers_mut().insert(
                http::header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            );
            r
        };
        if let Ok(v) = HeaderValue::from_str(&ep.id) {
            resp.headers_mut().insert("x-switchyard-endpoint", v);
        }
        Ok(resp)
    }

    /// Turns an error into the client's response and records it.
    fn fail(&self, ep_idx: Option<usize>, e: GatewayError) -> Response<Body> {
        let status = e.status();
        let (model, endpoint) = match ep_idx.and_then(|i| self.registry.endpoints.get(i)) {
            Some(ep) => (ep.model.to_string(), ep.id.to_string()),
            None => ("none".to_string(), "none".to_string()),
        };
        metrics::counter!(m::REQUESTS, "model" => model, "endpoint" => endpoint, "status" => status.to_string())
            .increment(1);
        tracing::debug!(status, error = %e, "request failed");
        error_response(&e)
    }
}

/// Backoff before retry number `retry` (0-based): the first wait doubled per retry,
/// capped; `None` without a backoff setting.
fn backoff(setting: Option<(u64, u64)>, retry: u32) -> Option<Duration> {
    let (first, cap) = setting?;
    let ms = first.saturating_mul(1u64 << retry.min(20)).min(cap);
    Some(Duration::from_millis(ms))
}

fn rejection(status: u16, message: &str) -> GatewayError {
    GatewayError::rejected(status, message)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_to_the_cap() {
        assert_eq!(backoff(None, 0), None);
        assert_eq!(
            backoff(Some((100, 2000)), 0),
            Some(Duration::from_millis(100))
        );
        assert_eq!(
            backoff(Some((100, 2000)), 3),
            Some(Duration::from_millis(800))
        );
        assert_eq!(
            backoff(Some((100, 2000)), 10),
            Some(Duration::from_millis(2000))
        );
        assert_eq!(
            backoff(Some((100, 2000)), 60),
            Some(Duration::from_millis(2000))
        );
    }

    #[test]
    fn rejections_keep_their_status() {
        assert_eq!(rejection(429, "slow down").status(), 429);
        assert_eq!(rejection(451, "no").status(), 451);
        assert_eq!(
            rejection(451, "no").to_json()["error"]["code"],
            "rejected_by_policy"
        );
    }
}
