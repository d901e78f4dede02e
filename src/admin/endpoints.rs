//! `GET /admin/endpoints` and the periodic statistics log line: every endpoint's
//! statistics and, per strategy, how likely it is to be chosen now (seed 004 logs
//! its bandit's `Probs: [...]` the same way).
//!
//! Selection is evaluated per logical model, among its available endpoints, for a
//! plain request to that model (`RequestFeatures::for_model`: task `chat`, no tokens)
//! with each strategy's default parameters, against the live snapshot, without
//! applying any state update. For strategies that sample (`pick weighted|sample`:
//! `exp3`, `adaptive`) the value is the probability of being picked; for
//! deterministic ones (`pick min|max`) it is 1 for the endpoint the next such request
//! would get and 0 for the others. Unavailable endpoints read 0.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use http::{Response, StatusCode};
use serde::Serialize;

use crate::body::{self, Body};
use crate::gateway::Gateway;
use crate::policy::ast::PickMode;
use crate::policy::checked::CheckedPolicySet;
use crate::policy::interp::{strategy, TraceEvent};
use crate::policy::{EndpointStats, RequestFeatures, StatsSnapshot};

/// How often the statistics line is logged (when anything changed).
pub const LOG_EVERY: Duration = Duration::from_secs(5);

/// One endpoint in the `/admin/endpoints` report.
#[derive(Debug, Clone, Serialize)]
pub struct EndpointReport {
    /// Endpoint id.
    pub id: String,
    /// Its logical model.
    pub model: String,
    /// Its provider's name.
    pub provider: String,
    /// Outcomes recorded so far.
    pub samples: u64,
    /// Statistics as strategies read them (the `StatsSnapshot` entry).
    pub stats: EndpointStats,
    /// Strategy name → selection probability in [0, 1] (see the module docs).
    pub selection: BTreeMap<String, f64>,
    /// Its circuit breaker.
    pub circuit: CircuitReport,
    /// How long its provider's last `Retry-After` still holds, ms (none: no pause);
    /// the endpoint gets no new requests meanwhile.
    pub throttled_for_ms: Option<u64>,
    /// Its concurrency gate and priority queues (only with `max_in_flight`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub queue: Option<crate::sched::GateReport>,
}

/// An endpoint's circuit breaker in the `/admin/endpoints` report.
#[derive(Debug, Clone, Serialize)]
pub struct CircuitReport {
    /// `closed`, `open` or `half_open`.
    pub state: &'static str,
    /// Time until the half-open probe may go, ms (open circuits only).
    pub next_probe_in_ms: Option<u64>,
    /// The open period in force, ms: how long an open or half-open circuit was
    /// opened for; for a closed one, what its next opening will use.
    pub cooldown_ms: u64,
    /// What the next opening will use, ms (doubled after each opening, up to
    /// `breaker.max_cooldown_ms`; back to `breaker.cooldown_ms` once closed).
    pub next_cooldown_ms: u64,
}

/// The whole `/admin/endpoints` body.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// The policy set the selection was computed with.
    pub policy_version: String,
    /// Every endpoint, in registry order.
    pub endpoints: Vec<EndpointReport>,
    /// The off-peak hold (only with `scheduler.off_peak`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub off_peak: Option<crate::sched::OffPeakReport>,
}

/// Endpoint id → strategy → selection probability, per logical model of `set`.
pub fn selection(
    set: &CheckedPolicySet,
    stats: &StatsSnapshot,
) -> BTreeMap<String, BTreeMap<String, f64>> {
    let mut out: BTreeMap<String, BTreeMap<String, f64>> = BTreeMap::new();
    for model in &set.registry.models {
        let req = RequestFeatures::for_model(model.name.clone());
        let cands: Vec<_> = set
            .registry
            .endpoints()
            .filter(|e| e.model.name == model.name && stats.get(&e.endpoint.id).available)
            .collect();
        for s in &set.strategies {
            let args: Vec<_> = s.params.iter().map(|p| p.default).collect();
            let ranked = strategy::rank(set, s, &args, &req, stats, &cands, None, true);
            let sampled = matches!(s.pick, PickMode::Weighted | PickMode::Sample);
            let first = ranked.order.first().map(|c| c.reg.endpoint.id.as_str());
            for e in model.endpoints.iter() {
                let p = if sampled {
                    ranked
                        .events
                        .iter()
                        .find_map(|ev| match ev {
                            TraceEvent::Candidate {
                                endpoint,
                                probability: Some(p),
                                excluded: None,
                                ..
                            } if *endpoint == e.id => Some(*p),
                            _ => None,
                        })
                        .unwrap_or(0.0)
                } else if first == Some(e.id.as_str()) {
                    1.0
                } else {
                    0.0
                };
                out.entry(e.id.clone())
                    .or_default()
                    .insert(s.name.clone(), p);
            }
        }
    }
    out
}

/// Builds the report from the gateway's live state.
pub fn report(gw: &Gateway) -> Report {
    let snap = gw.policy.load_full();
    let stats = gw.stats.snapshot(SystemTime::now());
    let mut sel = selection(snap.set(), &stats);
    let endpoints = gw
        .registry
        .endpoints
        .iter()
        .enumerate()
        .map(|(i, e)| EndpointReport {
            id: e.id.to_string(),
            model: e.model.to_string(),
            provider: gw
                .upstreams
                .get(e.provider)
                .map(|u| u.name.clone())
                .unwrap_or_default(),
            samples: gw.stats.slot(i).map(|s| s.samples()).unwrap_or(0),
            stats: stats.get(&e.id).into_owned(),
            selection: sel.remove(&*e.id).unwrap_or_default(),
            circuit: circuit(gw, i),
            throttled_for_ms: gw
                .stats
                .slot(i)
                .and_then(|s| s.throttled_for(SystemTime::now()))
                .map(|d| d.as_millis() as u64),
            queue: gw.sched.gate(i).map(|g| g.report()),
        })
        .collect();
    Report {
        policy_version: snap.version.clone(),
        endpoints,
        off_peak: gw.sched.off_peak().map(crate::sched::OffPeak::report),
    }
}

fn circuit(gw: &Gateway, i: usize) -> CircuitReport {
    let now = std::time::Instant::now();
    match gw.stats.slot(i).map(|s| s.breaker()) {
        Some(b) => CircuitReport {
            state: b.state(now).as_str(),
            next_probe_in_ms: b.next_probe_in(now).map(|d| d.as_millis() as u64),
            cooldown_ms: b
                .open_cooldown()
                .unwrap_or_else(|| b.cooldown())
                .as_millis() as u64,
            next_cooldown_ms: b.cooldown().as_millis() as u64,
        },
        None => CircuitReport {
            state: "closed",
            next_probe_in_ms: None,
            cooldown_ms: 0,
            next_cooldown_ms: 0,
        },
    }
}

/// The `GET /admin/endpoints` response.
pub fn handle(gw: &Gateway) -> Response<Body> {
    let bytes = serde_json::to_vec_pretty(&report(gw)).unwrap_or_default();
    body::json(StatusCode::OK, bytes)
}

/// One log line per logical model: each endpoint's latency, health, capacity and
/// in-flight count, then the probabilities of the sampling strategies, e.g.
/// `m: [a/x 21ms H=1.00 C=1.00 in=0, ...] exp3: [('a/x', 0.87), ...]`.
pub fn log_lines(r: &Report) -> Vec<String> {
    let mut by_model: BTreeMap<&str, Vec<&EndpointReport>> = BTreeMap::new();
    for e in &r.endpoints {
        by_model.entry(e.model.as_str()).or_default().push(e);
    }
    by_model
        .into_iter()
        .map(|(model, eps)| {
            let stats: Vec<String> = eps
                .iter()
                .map(|e| {
                    format!(
                        "{} {:.0}ms H={:.2} C={:.2} in={}{}",
                        e.id,
                        e.stats.latency_ewma_ms,
                        e.stats.health,
                        e.stats.capacity,
                        e.stats.in_flight,
                        if e.stats.available {
                            ""
                        } else {
                            " unavailable"
                        }
                    )
                })
                .collect();
            let mut line = format!("{model}: [{}]", stats.join(", "));
            for strat in ["exp3", "adaptive"] {
                let probs: Vec<String> = eps
                    .iter()
                    .filter_map(|e| {
                        e.selection
                            .get(strat)
                            .map(|p| format!("('{}', {p:.2})", e.id))
                    })
                    .collect();
                if !probs.is_empty() {
                    line.push_str(&format!(" {strat}: [{}]", probs.join(", ")));
                }
            }
            line
        })
        .collect()
}

/// Logs [`log_lines`] every `every` while outcomes keep arriving (silent when idle).
pub async fn log_every(gw: Arc<Gateway>, every: Duration) {
    let mut last = 0u64;
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let total: u64 = (0..gw.stats.len())
            .filter_map(|i| gw.stats.slot(i))
            .map(|s| s.samples())
            .sum();
        if total == last {
            continue;
        }
        last = total;
        for line in log_lines(&report(&gw)) {
            tracing::info!(target: "switchyard::endpoints", "{line}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::{parse_and_check, Registry, SourceMap};
    use crate::routing::policy::{embeddable, BUILTIN};

    #[test]
    fn selection_per_strategy() {
        let mut sources = SourceMap::new();
        for (name, text) in BUILTIN {
            sources.add(*name, embeddable(name, text));
        }
        let set = parse_and_check(&sources, &Registry::example()).unwrap();
        let mut stats = StatsSnapshot::default();
        let slow = stats
            .endpoints
            .entry("anthropic/claude-sonnet".into())
            .or_default();
        slow.latency_ewma_ms = 900.0;
        slow.capacity = 0.1;
        stats
            .endpoints
            .entry("bedrock/claude-sonnet".into())
            .or_default()
            .latency_ewma_ms = 300.0;
        stats
            .endpoints
            .entry("azure/gpt-4o".into())
            .or_default()
            .available = false;
        let sel = selection(&set, &stats);
        let a = &sel["anthropic/claude-sonnet"];
        let b = &sel["bedrock/claude-sonnet"];
        assert_eq!((a["least_latency"], b["least_latency"]), (0.0, 1.0));
        assert!((a["adaptive"] - 0.1 / 1.1).abs() < 1e-12);
        assert!((a["exp3"] - 0.5).abs() < 1e-12);
        assert_eq!(sel["azure/gpt-4o"]["exp3"], 0.0, "unavailable");
        assert_eq!(sel["openai/gpt-4o"]["exp3"], 1.0);
    }
}
