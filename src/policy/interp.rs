//! The reference interpreter: checked set + request + stats snapshot + seed →
//! [`Decision`] (+ [`Trace`] when explaining). The cranelift JIT must match it.
//!
//! Order of evaluation:
//! 1. Routes in checked order (priority, then load order); the first whose `when` holds
//!    takes the request. No route: the built-in decision `use model via priority`
//!    (404 rejection if the model is not in the registry).
//! 2. The route's `set priority` statements in order (each may change
//!    `request.priority` for everything after it).
//! 3. Rules in order (priority, then source order), then `default`. A rule whose
//!    `when` holds applies its `set priority`, `cache`, `hold` and `fallback`, then
//!    its terminal action; `continue` moves on to the next rule. The decision holds
//!    for off-peak when the route or any rule applied on the way says `hold off_peak`.
//! 4. `split`: bucket = FNV-1a(seed ‖ rule ‖ 0xFF ‖ key) mod 10 000 for sticky keys
//!    (an absent key hashes as ""), `next_u64() mod 10 000` of the decision's
//!    SplitMix64 for `random`; the first arm whose cumulative share exceeds the
//!    bucket. A canary arm whose `rollback` guard holds for any endpoint of its target
//!    sends the request to the first stable arm.
//! 5. `use`: the target's available endpoints go through the strategy; the plan is
//!    the pick, the other candidates in strategy order, then each fallback target's
//!    available endpoints in registry priority order, without repeats. An empty plan
//!    is a 503 rejection.

use serde::Serialize;

use super::ast::{Event, PriorityLevel};
use super::checked::*;
use super::features::{Outcome, RequestFeatures, StatsSource};
use super::registry::EndpointRef;
use super::status::FallbackOn;

pub mod eval;
pub mod hash;
pub mod strategy;

use eval::Evaluator;
use hash::SplitMix64;

/// Where the request goes, or why it is refused.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Decision {
    /// The route that took the request (`None`: no route matched).
    pub route: Option<String>,
    /// The rule that decided (`default` for the default).
    pub rule: Option<String>,
    /// The split arm, when a split decided.
    pub split: Option<SplitChoice>,
    /// The target as written (`"gpt-4o"`, `endpoint "x"`, `model`, `any`).
    pub target: Option<String>,
    /// The strategy that chose the endpoint.
    pub strategy: Option<String>,
    /// The chosen endpoint id.
    pub endpoint: Option<String>,
    /// The chosen endpoint's logical model.
    pub model: Option<String>,
    /// The rest of the plan, in order.
    pub fallbacks: Vec<PlanStep>,
    /// The whole plan as endpoint indices (registry order, see
    /// [`super::registry::EndpointRef::index`]): the chosen endpoint, then the
    /// fallbacks. What the gateway dispatches over; the ids above are for people.
    #[serde(skip)]
    pub plan: Vec<usize>,
    /// Extra attempts per endpoint on retryable errors.
    pub retries: u32,
    /// Backoff between retries: first wait and cap, milliseconds.
    pub backoff_ms: Option<(u64, u64)>,
    /// The fallback's `on` statuses: an attempt failing with one of them moves on to
    /// the next endpoint of the plan even if it would otherwise return to the client
    /// ([`FallbackOn::matches`]). `None`: no `on` clause.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fallback_on: Option<FallbackOn>,
    /// The request's final priority.
    pub priority: PriorityLevel,
    /// Cache setting (`None`: the gateway's default).
    pub cache: Option<CacheSetting>,
    /// The taken route or rule says `hold off_peak`: the request may wait for the
    /// off-peak window (`scheduler.off_peak`) when its final priority is low; the
    /// gateway decides.
    pub hold_off_peak: bool,
    /// Set when the request is refused.
    pub reject: Option<Rejection>,
    /// `on pick` state updates to apply.
    pub state_updates: Vec<StateUpdate>,
    /// What to hand back to [`on_outcome`] (not serialized).
    #[serde(skip)]
    pub call: Option<StrategyCall>,
}

/// The split arm chosen.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SplitChoice {
    /// Arm index (0-based, source order) that finally served.
    pub arm: u32,
    /// The bucket in 0..10 000.
    pub bucket: u32,
    /// Whether the sticky key was present.
    pub key_present: bool,
    /// Whether a canary was rolled back to the stable arm.
    pub rolled_back: bool,
}

/// One step of the endpoint plan.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PlanStep {
    /// Endpoint id.
    pub endpoint: String,
    /// Its logical model.
    pub model: String,
    /// Its provider.
    pub provider: String,
}

/// A refusal.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Rejection {
    /// HTTP status.
    pub status: u16,
    /// Message for the client.
    pub message: String,
}

/// New values of state slots of one endpoint for one strategy.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StateUpdate {
    /// Endpoint id.
    pub endpoint: String,
    /// Strategy name (the key in [`super::EndpointStats::state`]).
    pub strategy: String,
    /// The event that produced it.
    pub event: Event,
    /// Slot → new value.
    pub slots: std::collections::BTreeMap<String, f64>,
}

/// The strategy invocation behind a decision, for outcome updates.
#[derive(Debug, Clone, PartialEq)]
pub struct StrategyCall {
    /// Strategy index (`None`: built-in `priority`).
    pub strategy: Option<u32>,
    /// Argument values.
    pub args: Vec<Const>,
    /// Candidate endpoint ids, in registry order.
    pub candidates: Vec<String>,
}

/// One condition leaf evaluated: comparison, `in`, string test or `has`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Leaf {
    /// `file:line:col`.
    pub at: String,
    /// The source text.
    pub text: String,
    /// Its result.
    pub value: bool,
    /// Operand values it saw.
    pub saw: Vec<String>,
}

/// One step of a decision's explanation.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum TraceEvent {
    /// A condition (route, rule, set priority, rollback) and its leaves.
    Condition {
        /// What it guards, e.g. `route chat`, `rule long_context`.
        owner: String,
        /// `file:line:col`.
        at: String,
        /// Result.
        value: bool,
        /// The comparisons inside, in evaluation order (short-circuit respected).
        leaves: Vec<Leaf>,
    },
    /// A split's bucket.
    Split {
        /// The rule.
        rule: String,
        /// Bucket in 0..10 000.
        bucket: u32,
        /// Arm chosen by the bucket.
        arm: u32,
        /// Whether the sticky key was present.
        key_present: bool,
    },
    /// A strategy candidate.
    Candidate {
        /// Strategy.
        strategy: String,
        /// Endpoint id.
        endpoint: String,
        /// Score (registry priority for the built-in strategy; NaN if excluded).
        score: f64,
        /// Pick probability for weighted/sample picks.
        probability: Option<f64>,
        /// Why it was excluded, if it was.
        excluded: Option<String>,
    },
    /// Anything else worth saying.
    Note {
        /// The note.
        message: String,
    },
}

/// The explanation of one decision, in evaluation order.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Trace {
    /// Steps in order.
    pub events: Vec<TraceEvent>,
}

/// Decides for `req` (no trace). Deterministic given `seed`.
pub fn decide(
    set: &CheckedPolicySet,
    req: &RequestFeatures,
    stats: &dyn StatsSource,
    seed: u64,
) -> Decision {
    Run::new(set, req, stats, seed, false).decide()
}

/// Decides for `req` and explains how.
pub fn explain(
    set: &CheckedPolicySet,
    req: &RequestFeatures,
    stats: &dyn StatsSource,
    seed: u64,
) -> (Decision, Trace) {
    let mut run = Run::new(set, req, stats, seed, true);
    let d = run.decide();
    (d, Trace { events: run.trace })
}

/// State updates for an outcome of a request decided with `call`: the strategy's
/// `on success` or `on failure` block evaluated for `endpoint` against `stats` (the
/// old state). Pure; the caller stores the result. `None` if nothing to update.
pub fn on_outcome(
    set: &CheckedPolicySet,
    call: &StrategyCall,
    req: &RequestFeatures,
    stats: &dyn StatsSource,
    endpoint: &str,
    success: bool,
    outcome: &Outcome,
) -> Option<StateUpdate> {
    let s = set.strategies.get(call.strategy? as usize)?;
    let cands: Vec<EndpointRef<'_>> = set.registry.endpoints_by_id(&call.candidates);
    let event = if success {
        Event::Success
    } else {
        Event::Failure
    };
    strategy::update(
        set,
        s,
        &call.args,
        req,
        stats,
        &cands,
        endpoint,
        event,
        Some(outcome),
    )
}

/// `use model via priority`: the decision when no route matches. (Shared with the
/// JIT's host side, like the helpers below, so the engines cannot drift apart.)
pub(crate) static IMPLICIT_USE: std::sync::LazyLock<CUse> = std::sync::LazyLock::new(|| CUse {
    target: CTarget::RequestedModel,
    strategy: None,
    args: Vec::new(),
    span: Default::default(),
});

impl Decision {
    /// A decision with nothing decided yet, at `priority`.
    pub(crate) fn blank(priority: PriorityLevel) -> Decision {
        Decision {
            route: None,
            rule: None,
            split: None,
            target: None,
            strategy: None,
            endpoint: None,
            model: None,
            fallbacks: Vec::new(),
            plan: Vec::new(),
            retries: 0,
            backoff_ms: None,
            fallback_on: None,
            priority,
            cache: None,
            hold_off_peak: false,
            reject: None,
            state_updates: Vec::new(),
            call: None,
        }
    }
}

/// The split bucket (0..10 000) of `req` for split `s` of rule `rule`, and whether
/// the sticky key was present (`random` draws from `rng`).
pub(crate) fn split_bucket(
    s: &CSplit,
    rule: &str,
    req: &RequestFeatures,
    rng: &mut SplitMix64,
) -> (u32, bool) {
    let key: Option<&str> = match &s.key {
        CSplitKey::Random => return ((rng.next_u64() % 10_000) as u32, true),
        CSplitKey::ApiKey => req.api_key.as_deref(),
        CSplitKey::Org => req.org.as_deref(),
        CSplitKey::Header(h) => req.header(h),
        CSplitKey::Metadata(m) => req.metadata.get(m).map(String::as_str),
    };
    (hash::bucket(s.seed, rule, key.unwrap_or("")), key.is_some())
}

/// The registry endpoints of a target; `Err` names a requested model that does not
/// exist.
pub(crate) fn candidates<'a>(
    set: &'a CheckedPolicySet,
    req: &RequestFeatures,
    t: &CTarget,
) -> Result<Vec<EndpointRef<'a>>, String> {
    let reg = &set.registry;
    Ok(match t {
        CTarget::Model(m) => reg
            .model_endpoints(m)
            .map(Iterator::collect)
            .unwrap_or_default(),
        CTarget::Endpoint(id) => reg.endpoint(id).into_iter().collect(),
        CTarget::RequestedModel => match reg.model_endpoints(&req.model) {
            Some(v) => v.collect(),
            None => return Err(req.model.clone()),
        },
        CTarget::Any => reg.endpoints().collect(),
    })
}

/// The endpoints of `v` the runtime offers to strategies.
pub(crate) fn available<'a>(
    stats: &dyn StatsSource,
    v: Vec<EndpointRef<'a>>,
) -> Vec<EndpointRef<'a>> {
    v.into_iter()
        .filter(|e| stats.available(e.index, &e.endpoint.id))
        .collect()
}

struct Run<'a> {
    set: &'a CheckedPolicySet,
    req: &'a RequestFeatures,
    stats: &'a dyn StatsSource,
    rng: SplitMix64,
    explain: bool,
    trace: Vec<TraceEvent>,
    priority: PriorityLevel,
}

impl<'a> Run<'a> {
    fn new(
        set: &'a CheckedPolicySet,
        req: &'a RequestFeatures,
        stats: &'a dyn StatsSource,
        seed: u64,
        explain: bool,
    ) -> Run<'a> {
        Run {
            set,
            req,
            stats,
            rng: SplitMix64::new(seed),
            explain,
            trace: Vec::new(),
            priority: req.priority,
        }
    }

    fn cond(&mut self, e: &TExpr, owner: impl FnOnce() -> String) -> bool {
        let mut ev = Evaluator {
            set: self.set,
            req: self.req,
            priority: self.priority,
            ep: None,
            strat: None,
            outcome: None,
            leaves: self.explain.then(Vec::new),
        };
        let v = ev.truth(e);
        if self.explain {
            self.trace.push(TraceEvent::Condition {
                owner: owner(),
                at: self.set.sources.location(e.span),
                value: v,
                leaves: ev.leaves.unwrap_or_default(),
            });
        }
        v
    }

    fn decide(&mut self) -> Decision {
        let set = self.set;
        for route in &set.routes {
            if let Some(w) = &route.when {
                if !self.cond(w, || format!("route {}", route.name)) {
                    continue;
                }
            }
            for sp in &route.set_priority {
                self.set_priority(sp, &route.name);
            }
            let mut cache = route.cache;
            let mut hold = route.hold_off_peak;
            let mut fallback = route.fallback.as_ref();
            for rule in route.rules.iter().chain(std::iter::once(&route.default)) {
                if let Some(w) = &rule.when {
                    if !self.cond(w, || format!("rule {}", rule.name)) {
                        continue;
                    }
                }
                for sp in &rule.body.set_priority {
                    self.set_priority(sp, &rule.name);
                }
                cache = rule.body.cache.or(cache);
                hold |= rule.body.hold_off_peak;
                fallback = rule.body.fallback.as_ref().or(fallback);
                let Some(terminal) = &rule.body.terminal else {
                    continue;
                };
                let mut d = self.terminal(terminal, &rule.name, fallback);
                d.route = Some(route.name.clone());
                d.rule = Some(rule.name.clone());
                d.cache = cache;
                d.hold_off_peak = hold;
                d.priority = self.priority;
                return d;
            }
        }
        if self.explain {
            self.trace.push(TraceEvent::Note { message: "no route matched: using the requested model via the built-in `priority` strategy".into() });
        }
        self.dispatch(&IMPLICIT_USE, None)
    }

    fn set_priority(&mut self, sp: &CSetPriority, owner: &str) {
        let ok = match &sp.when {
            Some(w) => self.cond(w, || {
                format!("set priority {} ({owner})", sp.level.as_str())
            }),
            None => true,
        };
        if ok {
            self.priority = sp.level;
        }
    }

    fn terminal(&mut self, t: &'a CTerminal, rule: &str, fallback: Option<&CFallback>) -> Decision {
        match t {
            CTerminal::Reject {
                status, message, ..
            } => {
                let mut d = Decision::blank(self.priority);
                d.reject = Some(Rejection {
                    status: *status,
                    message: message.clone(),
                });
                d
            }
            CTerminal::Use(u) => self.dispatch(u, fallback),
            CTerminal::Split(s) => {
                let (bucket, present) = split_bucket(s, rule, self.req, &mut self.rng);
                let mut arm = s
                    .arms
                    .iter()
                    .position(|a| bucket < a.upto_bp)
                    .unwrap_or(s.arms.len().saturating_sub(1));
                if self.explain {
                    self.trace.push(TraceEvent::Split {
                        rule: rule.to_string(),
                        bucket,
                        arm: arm as u32,
                        key_present: present,
                    });
                }
                let mut rolled_back = false;
                if let (Some(a), Some(stable)) = (s.arms.get(arm), s.stable_arm) {
                    if let (true, Some(guard)) = (a.canary, &a.rollback) {
                        if self.rollback_fires(&a.action, guard, rule) {
                            arm = stable as usize;
                            rolled_back = true;
                        }
                    }
                }
                let Some(a) = s.arms.get(arm) else {
                    return Decision::blank(self.priority);
                };
                let mut d = self.dispatch(&a.action, fallback);
                d.split = Some(SplitChoice {
                    arm: arm as u32,
                    bucket,
                    key_present: present,
                    rolled_back,
                });
                d
            }
        }
    }

    fn rollback_fires(&mut self, u: &'a CUse, guard: &TExpr, rule: &str) -> bool {
        let cands = candidates(self.set, self.req, &u.target).unwrap_or_default();
        let ctxs = strategy::contexts(self.set, None, &[], self.req, self.stats, &cands);
        for c in &ctxs {
            let mut ev = Evaluator {
                set: self.set,
                req: self.req,
                priority: self.priority,
                ep: Some(c),
                strat: None,
                outcome: None,
                leaves: self.explain.then(Vec::new),
            };
            let v = ev.truth(guard);
            if self.explain {
                self.trace.push(TraceEvent::Condition {
                    owner: format!("rollback ({rule}) for {}", c.reg.endpoint.id),
                    at: self.set.sources.location(guard.span),
                    value: v,
                    leaves: ev.leaves.unwrap_or_default(),
                });
            }
            if v {
                return true;
            }
        }
        false
    }

    fn dispatch(&mut self, u: &'a CUse, fallback: Option<&CFallback>) -> Decision {
        let mut d = Decision::blank(self.priority);
        d.target = Some(u.target.describe());
        let cands = match candidates(self.set, self.req, &u.target) {
            Ok(c) => available(self.stats, c),
            Err(model) => {
                d.reject = Some(Rejection {
                    status: 404,
                    message: format!("The model `{model}` does not exist."),
                });
                return d;
            }
        };
        let strat = u.strategy.and_then(|i| self.set.strategies.get(i as usize));
        d.strategy = Some(
            strat
                .map(|s| s.name.clone())
                .unwrap_or_else(|| "priority".to_string()),
        );
        d.call = Some(StrategyCall {
            strategy: u.strategy,
            args: u.args.clone(),
            candidates: cands.iter().map(|c| c.endpoint.id.clone()).collect(),
        });
        let ranked = strategy::rank(
            self.set,
            strat,
            &u.args,
            self.req,
            self.stats,
            cands.clone(),
            Some(&mut self.rng),
            self.explain,
        );
        self.trace.extend(ranked.events);
        let mut plan: Vec<EndpointRef<'a>> = ranked.order.iter().map(|c| c.reg).collect();
        if let (Some(s), Some(first)) = (strat, ranked.order.first()) {
            let id = first.reg.endpoint.id.clone();
            if let Some(up) = strategy::update(
                self.set,
                s,
                &u.args,
                self.req,
                self.stats,
                &cands,
                &id,
                Event::Pick,
                None,
            ) {
                d.state_updates.push(up);
            }
        }
        if let Some(f) = fallback {
            apply_fallback(&mut d, &mut plan, f, |t| {
                available(
                    self.stats,
                    candidates(self.set, self.req, t).unwrap_or_default(),
                )
            });
        }
        write_plan(&mut d, plan, &u.target);
        d
    }
}

/// Applies a fallback's retries, backoff and `on` statuses to `d` and appends each chain target's
/// endpoints (`endpoints_of`, in built-in order) to `plan`, skipping ones already in
/// it. Shared by the interpreter and the JIT's host side so the plans cannot drift.
pub fn apply_fallback<'a>(
    d: &mut Decision,
    plan: &mut Vec<EndpointRef<'a>>,
    f: &CFallback,
    mut endpoints_of: impl FnMut(&CTarget) -> Vec<EndpointRef<'a>>,
) {
    d.retries = f.retries;
    d.fallback_on = f.on.clone();
    if f.backoff_max_ms > 0 {
        d.backoff_ms = Some((f.backoff_min_ms, f.backoff_max_ms));
    }
    for t in &f.chain {
        let mut more = endpoints_of(t);
        strategy::builtin_order(&mut more);
        for e in more {
            if !plan.iter().any(|p| p.endpoint.id == e.endpoint.id) {
                plan.push(e);
            }
        }
    }
}

/// Writes `plan` into `d`: its first endpoint is the choice, the rest the fallbacks;
/// an empty plan is a 503 rejection naming `target`.
pub fn write_plan(d: &mut Decision, plan: Vec<EndpointRef<'_>>, target: &CTarget) {
    d.plan = plan.iter().map(|e| e.index).collect();
    let mut steps = plan.into_iter();
    match steps.next() {
        Some(first) => {
            d.endpoint = Some(first.endpoint.id.clone());
            d.model = Some(first.model.name.clone());
            d.fallbacks = steps
                .map(|e| PlanStep {
                    endpoint: e.endpoint.id.clone(),
                    model: e.model.name.clone(),
                    provider: e.endpoint.provider.clone(),
                })
                .collect();
        }
        None => {
            d.reject = Some(Rejection {
                status: 503,
                message: format!("No endpoint is available for {}.", target.describe()),
            });
        }
    }
}

#[cfg(test)]
mod tests;
