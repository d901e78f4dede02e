//! The log phase: every per-request metric and the request's closing log line, in one
//! place.
//!
//! Handles are registered once per endpoint when the gateway is built, so the request
//! path only bumps atomics instead of hashing label sets. A non-streaming request is
//! logged when its response is ready (`respond`); a stream when it ends (its relay's
//! observer, `outcome::StreamLog`), because only then is its final status known.
//! The metrics that need the whole request (tokens, cost, attempts, retries,
//! fallbacks) are recorded with its access line ([`RequestLog::finished`]).
//! Metric names are in [`crate::telemetry`].

use std::time::Instant;

use super::access::{End, Facts};
use crate::config::{Config, Pricing};
use crate::error::GatewayError;
use crate::routing::Registry;
use crate::stats::CircuitState;
use crate::telemetry as t;

/// The metric handles of one endpoint (labels `model`, `endpoint`, and `status` for
/// the request counter).
#[derive(Debug)]
struct EndpointMetrics {
    /// Requests that ended with 200.
    ok: metrics::Counter,
    /// Streams that began with 200 and ended with an error event.
    stream_error: metrics::Counter,
    /// Streams whose client went away first.
    client_gone: metrics::Counter,
    /// Request latency in seconds.
    duration: metrics::Histogram,
    /// Time to first token in seconds (streams).
    ttft: metrics::Histogram,
    /// Served tokens by kind: input, output, cached, reasoning.
    tokens: [metrics::Counter; 4],
    /// Cost in USD, labelled `key` and `org` `all` (only with
    /// `server.metrics_caller_labels` off).
    cost_all: Option<metrics::Gauge>,
    /// Attempts whose answer went to the client, failed attempts, and attempts
    /// still in flight when the client went away.
    attempts_ok: metrics::Counter,
    attempts_failed: metrics::Counter,
    attempts_abandoned: metrics::Counter,
    /// Attempts that repeated this endpoint.
    retries: metrics::Counter,
    /// Attempts here that moved on from another endpoint (labelled by model).
    fallbacks: metrics::Counter,
    /// Its provider's prices.
    pricing: Pricing,
}

impl EndpointMetrics {
    fn new(model: &str, endpoint: &str, pricing: Pricing, caller_labels: bool) -> EndpointMetrics {
        let kind = |kind: &'static str| metrics::counter!(t::TOKENS, "model" => model.to_string(), "endpoint" => endpoint.to_string(), "kind" => kind);
        let attempts = |outcome: &'static str| metrics::counter!(t::ATTEMPTS, "endpoint" => endpoint.to_string(), "outcome" => outcome);
        let counter = |status: &'static str| metrics::counter!(t::REQUESTS, "model" => model.to_string(), "endpoint" => endpoint.to_string(), "status" => status);
        EndpointMetrics {
            ok: counter("200"),
            stream_error: counter("stream_error"),
            client_gone: counter("client_gone"),
            duration: metrics::histogram!(t::DURATION, "model" => model.to_string(), "endpoint" => endpoint.to_string()),
            ttft: metrics::histogram!(t::TTFT, "model" => model.to_string(), "endpoint" => endpoint.to_string()),
            tokens: [kind("input"), kind("output"), kind("cached"), kind("reasoning")],
            cost_all: (!caller_labels).then(|| metrics::gauge!(t::COST, "model" => model.to_string(), "endpoint" => endpoint.to_string(), "key" => "all", "org" => "all")),
            attempts_ok: attempts("ok"),
            attempts_failed: attempts("failed"),
            attempts_abandoned: attempts("abandoned"),
            retries: metrics::counter!(t::RETRIES, "endpoint" => endpoint.to_string()),
            fallbacks: metrics::counter!(t::FALLBACKS, "model" => model.to_string()),
            pricing,
        }
    }
}

/// The status an attempt still in flight when its client went away is recorded with
/// (nginx's 499, "client closed request").
pub const CLIENT_GONE_STATUS: u16 = 499;

/// The `endpoint` label (and `x-switchyard-endpoint` value) of answers served from
/// the cache.
pub const CACHE_ENDPOINT: &str = "cache";

/// How a stream that began with 200 ended, for its request metric.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StreamStatus {
    /// `[DONE]` was sent.
    Completed,
    /// An error event ended it.
    Failed,
    /// The client went away first.
    ClientGone,
}

/// The request metrics of one gateway.
#[derive(Debug)]
pub struct RequestLog {
    endpoints: Vec<EndpointMetrics>,
    /// `endpoint` / `model` label values, indexed like the registry.
    labels: Vec<(String, String)>,
    in_flight: metrics::Gauge,
    circuits: Vec<metrics::Gauge>,
    /// Per logical model: requests answered by the cache (endpoint `cache`, status
    /// 200) and their latency.
    cached: std::collections::HashMap<String, (metrics::Counter, metrics::Histogram)>,
}

impl RequestLog {
    /// Registers the handles of every endpoint of `registry`, priced by the
    /// providers of `config`.
    pub fn new(config: &Config, registry: &Registry) -> RequestLog {
        RequestLog {
            endpoints: registry
                .endpoints
                .iter()
                .map(|e| {
                    let pricing = config
                        .providers
                        .get(e.provider)
                        .map(|p| p.pricing)
                        .unwrap_or_default();
                    EndpointMetrics::new(
                        &e.model,
                        &e.id,
                        pricing,
                        config.server.metrics_caller_labels,
                    )
                })
                .collect(),
            labels: registry
                .endpoints
                .iter()
                .map(|e| (e.id.to_string(), e.model.to_string()))
                .collect(),
            in_flight: metrics::gauge!(t::IN_FLIGHT),
            circuits: registry
                .endpoints
                .iter()
                .map(|e| {
                    let g = metrics::gauge!(t::CIRCUIT_STATE, "endpoint" => e.id.to_string());
                    g.set(0.0);
                    g
                })
                .collect(),
            cached: registry
                .model_order
                .iter()
                .map(|m| {
                    let model = m.to_string();
                    let c = metrics::counter!(t::REQUESTS, "model" => model.clone(), "endpoint" => CACHE_ENDPOINT, "status" => "200");
                    let d = metrics::histogram!(t::DURATION, "model" => model.clone(), "endpoint" => CACHE_ENDPOINT);
                    (model, (c, d))
                })
                .collect(),
        }
    }

    /// A request for `model` answered from the cache (whole or stream), logged as
    /// endpoint `cache` with status 200 when its answer is ready.
    pub fn cache_served(&self, model: &str, started: Instant) {
        let took = started.elapsed().as_secs_f64();
        match self.cached.get(model) {
            Some((c, d)) => {
                c.increment(1);
                d.record(took);
            }
            // A model only a policy knows (not in the registry): labelled as asked.
            None => {
                metrics::counter!(t::REQUESTS, "model" => model.to_string(), "endpoint" => CACHE_ENDPOINT, "status" => "200").increment(1);
                metrics::histogram!(t::DURATION, "model" => model.to_string(), "endpoint" => CACHE_ENDPOINT).record(took);
            }
        }
        tracing::debug!(model, "answered from the cache");
    }

    /// Records the metrics of a request that ended as `end` (its access line is
    /// being written): attempts, retries and fallbacks from its attempts; tokens and
    /// cost from its usage on the serving endpoint. Returns the cost in USD (`None`:
    /// no endpoint served, or no usage).
    pub fn finished(&self, f: &Facts, end: End) -> Option<f64> {
        let mut previous: Option<u32> = None;
        let last = f.tried.len().saturating_sub(1);
        for (n, a) in f.tried.iter().enumerate() {
            let Some(m) = self.endpoints.get(a.ep as usize) else {
                continue;
            };
            let served = n == last && f.served && a.status == 200;
            if served {
                m.attempts_ok.increment(1);
            } else if a.status == CLIENT_GONE_STATUS {
                // The client left while it was in flight (dispatch records it as
                // 499): not the endpoint's failure.
                m.attempts_abandoned.increment(1);
            } else {
                m.attempts_failed.increment(1);
            }
            match previous {
                Some(p) if p == a.ep => m.retries.increment(1),
                Some(_) => m.fallbacks.increment(1),
                None => {}
            }
            previous = Some(a.ep);
        }
        if !f.served || matches!(end, End::Error(_)) {
            return None;
        }
        let usage = f.usage.as_ref()?;
        let m = self.endpoints.get(f.endpoint?)?;
        let cached = usage.prompt_tokens_details.map_or(0, |d| d.cached_tokens);
        let reasoning = usage
            .completion_tokens_details
            .map_or(0, |d| d.reasoning_tokens);
        let counts = [
            usage.prompt_tokens,
            usage.completion_tokens,
            cached,
            reasoning,
        ];
        for (c, n) in m.tokens.iter().zip(counts) {
            if n > 0 {
                c.increment(n);
            }
        }
        let usd = (usage.prompt_tokens as f64 * m.pricing.input_per_mtok
            + usage.completion_tokens as f64 * m.pricing.output_per_mtok)
            / 1e6;
        if usd > 0.0 {
            if let Some(all) = &m.cost_all {
                all.increment(usd);
            } else {
                // Caller labels are per request: a labelled lookup (it clones the
                // label strings), skipped for unpriced endpoints.
                let (id, model) = &self.labels[f.endpoint?];
                metrics::gauge!(t::COST,
                    "model" => model.clone(),
                    "endpoint" => id.clone(),
                    "key" => f.key.clone().unwrap_or_else(|| "none".into()),
                    "org" => f.org.clone().unwrap_or_else(|| "none".into()))
                .increment(usd);
            }
        }
        Some(usd)
    }

    /// One more request in flight until the returned guard is dropped (ingress keeps
    /// it until the response body ends, streams included).
    pub fn in_flight(&self) -> InFlight {
        InFlight::new(self.in_flight.clone())
    }

    /// A request answered with a whole 200 by endpoint `ep` (non-streaming).
    pub fn served(&self, ep: usize, started: Instant) {
        if let Some(m) = self.endpoints.get(ep) {
            m.ok.increment(1);
            m.duration.record(started.elapsed().as_secs_f64());
        }
    }

    /// A stream on endpoint `ep` relayed its first content.
    pub fn first_token(&self, ep: usize, started: Instant) {
        if let Some(m) = self.endpoints.get(ep) {
            m.ttft.record(started.elapsed().as_secs_f64());
        }
    }

    /// A stream on endpoint `ep` ended as `status`.
    pub fn stream_ended(&self, ep: usize, started: Instant, status: StreamStatus) {
        let Some(m) = self.endpoints.get(ep) else {
            return;
        };
        m.duration.record(started.elapsed().as_secs_f64());
        match status {
            StreamStatus::Completed => m.ok.increment(1),
            StreamStatus::Failed => m.stream_error.increment(1),
            StreamStatus::ClientGone => m.client_gone.increment(1),
        }
    }

    /// A request that ended with error `e`; `ep` is the last endpoint tried (`None`:
    /// it failed before one was tried, its endpoint labelled `none`), `model` its
    /// logical model when the config has it (else `none`: a name the client made up
    /// never becomes a series).
    pub fn failed(&self, ep: Option<usize>, model: Option<&str>, e: &GatewayError) {
        let (endpoint, model) = match ep.and_then(|i| self.labels.get(i)) {
            Some((id, model)) => (id.clone(), model.clone()),
            None => ("none".to_string(), model.unwrap_or("none").to_string()),
        };
        let status = e.status();
        metrics::counter!(t::REQUESTS, "model" => model, "endpoint" => endpoint, "status" => status.to_string())
            .increment(1);
        tracing::debug!(status, error = %e, "request failed");
    }

    /// Attempt number `attempt` on endpoint `ep` failed with `e` before its response
    /// began (the request may still succeed elsewhere).
    pub fn attempt_failed(&self, ep: usize, attempt: u32, policy: &str, e: &GatewayError) {
        let id = self.upstream_error(ep, e);
        tracing::warn!(policy = %policy, endpoint = %id, attempt, error = %e, "attempt failed");
    }

    /// Endpoint `ep`'s circuit moved to `state`; `cooldown` is what its next opening
    /// will wait.
    pub fn circuit(&self, ep: usize, state: CircuitState, cooldown: std::time::Duration) {
        if let Some(g) = self.circuits.get(ep) {
            g.set(state.gauge());
        }
        let id = self
            .labels
            .get(ep)
            .map(|(id, _)| id.as_str())
            .unwrap_or("none");
        tracing::warn!(endpoint = %id, state = state.as_str(), next_cooldown_ms = cooldown.as_millis() as u64, "circuit {}", state.as_str());
    }

    /// Counts `e` against endpoint `ep` in `switchyard_upstream_errors_total`: every
    /// failed attempt, before or after its first byte. Returns the endpoint id.
    pub fn upstream_error(&self, ep: usize, e: &GatewayError) -> &str {
        let id = self
            .labels
            .get(ep)
            .map(|(id, _)| id.as_str())
            .unwrap_or("none");
        metrics::counter!(t::UPSTREAM_ERRORS, "endpoint" => id.to_string(), "kind" => e.metric_kind())
            .increment(1);
        id
    }
}

/// Holds one unit of the in-flight gauge; gives it back when dropped.
#[derive(Debug)]
pub struct InFlight(metrics::Gauge);

impl InFlight {
    fn new(g: metrics::Gauge) -> InFlight {
        g.increment(1.0);
        InFlight(g)
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.decrement(1.0);
    }
}
