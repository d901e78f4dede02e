//! Feeding what happened back into endpoint statistics and strategy state.
//!
//! Every attempt is an [`Attempt`]: it counts as in flight on its endpoint from the
//! moment it is sent until it ends, and its end (success, upstream failure, or a
//! stream's end) updates the endpoint's EWMAs and runs the strategy's `on success` /
//! `on failure` block. Failures that are the client's fault do not count against an
//! endpoint's health; a client that goes away mid-stream counts as neither.

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use super::Gateway;
use crate::error::{ErrorKind, Fault, GatewayError};
use crate::policy::ast::Event;
use crate::policy::interp::StrategyCall;
use crate::policy::{Outcome, RequestFeatures};
use crate::routing::policy::PolicySnapshot;

/// What a decision was made on, kept for outcome updates.
#[derive(Debug)]
pub struct DecisionContext {
    /// The policy set the request started on.
    pub snapshot: Arc<PolicySnapshot>,
    /// The request's features.
    pub features: RequestFeatures,
    /// The strategy invocation behind the decision.
    pub call: Option<StrategyCall>,
}

/// One attempt on one endpoint.
pub struct Attempt {
    gw: Arc<Gateway>,
    ep_idx: usize,
    ctx: Arc<DecisionContext>,
    sent: Instant,
    ended: bool,
    /// The attempt is its endpoint's half-open circuit probe.
    probe: bool,
    /// Its slot of the endpoint's gate (`max_in_flight`), freed when the attempt is
    /// dropped: after its answer, or its stream, ends.
    _slot: Option<crate::sched::Slot>,
}

impl Attempt {
    /// Starts an attempt on endpoint `ep_idx`, in flight since `sent` (the caller's
    /// clock reading of now: one read serves the attempt's records). `probe`: the
    /// circuit breaker admitted it as its half-open probe.
    pub fn begin(
        gw: &Arc<Gateway>,
        ep_idx: usize,
        sent: Instant,
        ctx: Arc<DecisionContext>,
        probe: bool,
    ) -> Attempt {
        if let Some(slot) = gw.stats.slot(ep_idx) {
            slot.enter();
        }
        Attempt {
            gw: gw.clone(),
            ep_idx,
            ctx,
            sent,
            ended: false,
            probe,
            _slot: None,
        }
    }

    /// When the attempt began (its request about to be sent).
    pub fn began(&self) -> Instant {
        self.sent
    }

    /// The attempt holds `slot` (from its endpoint's gate) until it is dropped.
    pub fn holding(mut self, slot: Option<crate::sched::Slot>) -> Attempt {
        self._slot = slot;
        self
    }

    /// Ends the attempt as failed with `e` (returned for the caller to handle).
    pub fn failed(mut self, e: GatewayError) -> GatewayError {
        // Neither the client's mistakes nor our own shutdown say anything about the
        // endpoint; everything else (its failures, and our configuration it refused)
        // counts against its health.
        let counts = e.fault != Fault::Client && e.kind != ErrorKind::ShuttingDown;
        self.end(counts.then_some(false), None);
        e
    }

    /// Ends the attempt as a success; `ttft` for streams.
    pub fn succeeded(mut self, ttft: Option<Duration>) {
        self.end(Some(true), ttft);
    }

    /// Records the time to first token of a stream now.
    pub fn first_token(&self) -> Duration {
        let ttft = self.sent.elapsed();
        if let Some(slot) = self.gw.stats.slot(self.ep_idx) {
            slot.record_ttft(ttft);
        }
        ttft
    }

    /// `success`: `None` when the outcome says nothing about the endpoint.
    fn end(&mut self, success: Option<bool>, ttft: Option<Duration>) {
        if self.ended {
            return;
        }
        self.ended = true;
        let Some(slot) = self.gw.stats.slot(self.ep_idx) else {
            return;
        };
        slot.leave();
        let Some(success) = success else {
            if self.probe {
                // The probe says nothing: let the next request probe instead.
                slot.breaker().probe_abandoned();
            }
            return;
        };
        let now = Instant::now();
        let latency = now.saturating_duration_since(self.sent);
        let changed = slot.record_outcome(latency, success, self.probe, SystemTime::now(), now);
        if let Some(state) = changed {
            self.gw
                .log
                .circuit(self.ep_idx, state, slot.breaker().cooldown());
        }
        self.strategy_update(success, latency, ttft);
    }

    /// Runs the strategy's `on success` / `on failure` block, if it has one.
    fn strategy_update(&self, success: bool, latency: Duration, ttft: Option<Duration>) {
        let Some(call) = &self.ctx.call else { return };
        let compiled = &self.ctx.snapshot.compiled;
        let set = compiled.checked();
        let Some(strategy) = call.strategy.and_then(|i| set.strategies.get(i as usize)) else {
            return;
        };
        let event = if success {
            Event::Success
        } else {
            Event::Failure
        };
        if !strategy.updates.iter().any(|(e, _)| *e == event) {
            return;
        }
        let id = &self.gw.registry.endpoints[self.ep_idx].id;
        // Read-modify-write of the state: under the decision lock, so concurrent
        // outcomes (and `on pick` decisions) of the same strategy never lose updates.
        let _guard = self.gw.lock_decisions();
        let snap = &self.ctx.snapshot;
        let stats =
            self.gw
                .stats
                .live_for(SystemTime::now(), &snap.set().registry, &snap.stats_aligned);
        let outcome = Outcome {
            latency_ms: latency.as_secs_f64() * 1e3,
            ttft_ms: ttft.map(|t| t.as_secs_f64() * 1e3).unwrap_or(0.0),
            input_tokens: self.ctx.features.input_tokens,
            output_tokens: 0,
        };
        let engine = compiled.engine();
        let update = compiled.on_outcome_on(
            engine,
            call,
            &self.ctx.features,
            &stats,
            id,
            success,
            &outcome,
        );
        if let Some(u) = update {
            self.gw.stats.set_state(self.ep_idx, &u.strategy, &u.slots);
        }
    }
}

impl Drop for Attempt {
    fn drop(&mut self) {
        // Dropped without an outcome: the client went away.
        self.end(None, None);
    }
}
