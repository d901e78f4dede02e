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

use std::sync::Arc;

use serde::Serialize;

use super::ast::{Event, PriorityLevel};
use super::checked::*;
use super::features::{Outcome, RequestFeatures, StateSink, StatsSource};
use super::names::{Name, PlanNames};
use super::registry::EndpointRef;
use super::status::FallbackOn;

pub mod eval;
pub mod hash;
pub mod strategy;

use eval::Evaluator;
use hash::SplitMix64;

/// Where the request goes, or why it is refused.
///
/// Names are shared with the checked set ([`Name`]): a decision copies pointers, and
/// its plan is endpoint indices; [`Decision::fallbacks`] names the rest of the plan.
#[derive(Debug, Clone, PartialEq)]
pub struct Decision {
    /// The route that took the request (`None`: no route matched).
    pub route: Option<Name>,
    /// The rule that decided (`default` for the default).
    pub rule: Option<Name>,
    /// The split arm, when a split decided.
    pub split: Option<SplitChoice>,
    /// The target as written (`"gpt-4o"`, `endpoint "x"`, `model`, `any`).
    pub target: Option<Name>,
    /// The strategy that chose the endpoint.
    pub strategy: Option<Name>,
    /// The chosen endpoint id.
    pub endpoint: Option<Name>,
    /// The chosen endpoint's logical model.
    pub model: Option<Name>,
    /// The whole plan as endpoint indices (registry order, see
    /// [`super::registry::EndpointRef::index`]): the chosen endpoint, then the
    /// fallbacks. What the gateway dispatches over; [`Decision::fallbacks`] and the
    /// names above are for people.
    pub plan: Vec<usize>,
    /// The plan's fallbacks not yet ordered, after `plan` (then only the pick): set
    /// only by [`crate::policy::CompiledPolicySet::decide_lazy`], for a ranking
    /// without a fallback chain. [`strategy::PlanRest::ordered`] gives them in plan
    /// order; [`Decision::fallbacks`] and the JSON form do not list them.
    pub rest: Option<Box<strategy::PlanRest>>,
    /// Extra attempts per endpoint on retryable errors.
    pub retries: u32,
    /// Backoff between retries: first wait and cap, milliseconds.
    pub backoff_ms: Option<(u64, u64)>,
    /// The fallback's `on` statuses: an attempt failing with one of them moves on to
    /// the next endpoint of the plan even if it would otherwise return to the client
    /// ([`FallbackOn::matches`]). `None`: no `on` clause.
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
    pub call: Option<StrategyCall>,
    /// The names of the registry's endpoints, for [`Decision::fallbacks`].
    pub names: PlanNames,
}

impl Decision {
    /// Records the decision's `on pick` state updates ([`Decision::state_updates`])
    /// into `sink`, in order. The one way a decision's picks reach strategy state:
    /// the gateway records every decision it acts on into its live statistics, and a
    /// `sample N` policy test records each of its requests' decisions into the
    /// snapshot the next request reads.
    pub fn record_state(&self, sink: &mut impl StateSink) {
        for u in &self.state_updates {
            sink.record(u);
        }
    }

    /// The rest of the plan after the chosen endpoint, in order, with names.
    pub fn fallbacks(&self) -> impl ExactSizeIterator<Item = PlanStep<'_>> + '_ {
        self.plan.iter().skip(1).map(|&i| match self.names.get(i) {
            Some(n) => PlanStep {
                endpoint: &n.id,
                model: &n.model,
                provider: &n.provider,
            },
            None => PlanStep {
                endpoint: "",
                model: "",
                provider: "",
            },
        })
    }
}

/// The JSON form of a decision (`dry-run --json`, test reports): every field but the
/// plan indices and the strategy call, with the fallbacks named.
impl Serialize for Decision {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        #[derive(Serialize)]
        struct View<'a> {
            route: Option<&'a str>,
            rule: Option<&'a str>,
            split: Option<&'a SplitChoice>,
            target: Option<&'a str>,
            strategy: Option<&'a str>,
            endpoint: Option<&'a str>,
            model: Option<&'a str>,
            fallbacks: Vec<PlanStep<'a>>,
            retries: u32,
            backoff_ms: Option<(u64, u64)>,
            #[serde(skip_serializing_if = "Option::is_none")]
            fallback_on: Option<&'a FallbackOn>,
            priority: PriorityLevel,
            cache: Option<CacheSetting>,
            hold_off_peak: bool,
            reject: Option<&'a Rejection>,
            state_updates: &'a [StateUpdate],
        }
        View {
            route: self.route.as_deref(),
            rule: self.rule.as_deref(),
            split: self.split.as_ref(),
            target: self.target.as_deref(),
            strategy: self.strategy.as_deref(),
            endpoint: self.endpoint.as_deref(),
            model: self.model.as_deref(),
            fallbacks: self.fallbacks().collect(),
            retries: self.retries,
            backoff_ms: self.backoff_ms,
            fallback_on: self.fallback_on.as_ref(),
            priority: self.priority,
            cache: self.cache,
            hold_off_peak: self.hold_off_peak,
            reject: self.reject.as_ref(),
            state_updates: &self.state_updates,
        }
        .serialize(s)
    }
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

/// One step of the endpoint plan, named.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct PlanStep<'a> {
    /// Endpoint id.
    pub endpoint: &'a str,
    /// Its logical model.
    pub model: &'a str,
    /// Its provider.
    pub provider: &'a str,
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
    #[serde(serialize_with = "name_str")]
    pub endpoint: Name,
    /// The endpoint's registry index (not serialized).
    #[serde(skip)]
    pub index: usize,
    /// Strategy name (the key in [`super::EndpointStats::state`]).
    #[serde(serialize_with = "name_str")]
    pub strategy: Name,
    /// The event that produced it.
    pub event: Event,
    /// Slot → new value.
    #[serde(serialize_with = "name_map")]
    pub slots: std::collections::BTreeMap<Name, f64>,
}

fn name_str<S: serde::Serializer>(n: &Name, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(n)
}

fn name_map<S: serde::Serializer>(
    m: &std::collections::BTreeMap<Name, f64>,
    s: S,
) -> Result<S::Ok, S::Error> {
    s.collect_map(m.iter().map(|(k, v)| (&**k, v)))
}

/// The strategy invocation behind a decision, for outcome updates.
#[derive(Debug, Clone, PartialEq)]
pub struct StrategyCall {
    /// Strategy index (`None`: built-in `priority`).
    pub strategy: Option<u32>,
    /// Argument values (shared with the `use` that made the call).
    pub args: Arc<[Const]>,
    /// Candidate endpoints by registry index, in registry order; empty when the
    /// strategy has no `on success` or `on failure` block (the built-in `priority`
    /// order, `weighted_round_robin`'s `on pick` only), which is all that reads them.
    pub candidates: Vec<usize>,
}

impl StrategyCall {
    /// The call of `u`'s strategy (`strategy`, `None` for the built-in order) over
    /// `cands`. Only outcome updates need the candidates: a strategy without an
    /// `on success` or `on failure` block records none, so a decision over a
    /// model's 128 endpoints copies no list it never reads (issue 17).
    pub(crate) fn new(
        u: &CUse,
        strategy: Option<&CStrategy>,
        cands: &[EndpointRef<'_>],
    ) -> StrategyCall {
        let outcomes = strategy.is_some_and(|s| {
            s.updates
                .iter()
                .any(|(e, _)| matches!(e, Event::Success | Event::Failure))
        });
        StrategyCall {
            strategy: u.strategy,
            args: u.args.clone(),
            candidates: if outcomes {
                cands.iter().map(|c| c.index).collect()
            } else {
                Vec::new()
            },
        }
    }
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
    let si = call.strategy?;
    let s = set.strategies.get(si as usize)?;
    let cands: Vec<EndpointRef<'_>> = set.registry.endpoints_at(&call.candidates);
    let event = if success {
        Event::Success
    } else {
        Event::Failure
    };
    strategy::update(
        set,
        (si, s),
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
pub(crate) static IMPLICIT_USE: std::sync::LazyLock<CUse> = std::sync::LazyLock::new(|| {
    let target = CTarget::RequestedModel;
    CUse {
        described: Arc::from(target.describe()),
        target,
        strategy: None,
        args: Arc::from([]),
        span: Default::default(),
    }
});

impl Decision {
    /// A decision with nothing decided yet, at `priority`, naming endpoints with
    /// `names`.
    pub(crate) fn blank(priority: PriorityLevel, names: &PlanNames) -> Decision {
        Decision {
            route: None,
            rule: None,
            split: None,
            target: None,
            strategy: None,
            endpoint: None,
            model: None,
            plan: Vec::new(),
            rest: None,
            retries: 0,
            backoff_ms: None,
            fallback_on: None,
            priority,
            cache: None,
            hold_off_peak: false,
            reject: None,
            state_updates: Vec::new(),
            call: None,
            names: names.clone(),
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

/// The registry endpoints of a target that may serve (`weight` above 0); `Err`
/// names a requested model that does not exist.
///
/// An endpoint of `weight: 0` is disabled (README, `models.<name>`): no target
/// offers it, whatever strategy ranks the candidates, so a model whose endpoints all
/// have weight 0 has none (503 `no_endpoint`). Both engines take their candidates
/// and their fallback chains' from here.
pub(crate) fn candidates<'a>(
    set: &'a CheckedPolicySet,
    req: &RequestFeatures,
    t: &CTarget,
) -> Result<Refs<'a>, String> {
    let reg = &set.registry;
    let mut v: Refs<'a> = match t {
        CTarget::Model(m) => reg.model_endpoints(m).map(refs).unwrap_or_default(),
        CTarget::Endpoint(id) => reg.endpoint(id).into_iter().collect(),
        CTarget::RequestedModel => match reg.model_endpoints(&req.model) {
            Some(v) => refs(v),
            None => return Err(req.model.clone()),
        },
        CTarget::Any => reg.endpoints().collect(),
    };
    if v.iter().any(|e| e.endpoint.weight == 0) {
        v.retain(|e| e.endpoint.weight > 0);
    }
    Ok(v)
}

/// `items` as [`Refs`]: more than fit inline are collected into a `Vec` of their
/// exact number, which the list takes over (a spilled `SmallVec` checks where it
/// lives on every push: about 12 instructions per endpoint at a model's 128, issue
/// 17).
fn refs<'a>(items: impl ExactSizeIterator<Item = EndpointRef<'a>>) -> Refs<'a> {
    if items.len() > Refs::new().inline_size() {
        Refs::from_vec(items.collect())
    } else {
        items.collect()
    }
}

/// The endpoints of `v` the runtime offers to strategies.
pub(crate) fn available<'a>(stats: &dyn StatsSource, mut v: Refs<'a>) -> Refs<'a> {
    stats.retain_available(&mut v);
    v
}

/// Endpoints of a target or a plan, on the stack up to eight.
pub type Refs<'a> = smallvec::SmallVec<[EndpointRef<'a>; 8]>;

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
        for (ri, route) in set.routes.iter().enumerate() {
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
            let rules = route.rules.iter().chain(std::iter::once(&route.default));
            for (ki, rule) in rules.enumerate() {
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
                d.route = set.names.route(ri);
                d.rule = set.names.rule(ri, ki);
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
                let mut d = Decision::blank(self.priority, self.set.names.endpoints());
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
                    return Decision::blank(self.priority, self.set.names.endpoints());
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
        let mut d = Decision::blank(self.priority, self.set.names.endpoints());
        d.target = Some(u.described.clone());
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
        d.strategy = Some(self.set.names.strategy(u.strategy));
        d.call = Some(StrategyCall::new(u, strat, &cands));
        let (mut plan, first) = match strat {
            None => {
                let mut plan = cands.clone();
                strategy::builtin(&mut plan, Some(&mut self.rng));
                if self.explain {
                    self.trace.extend(strategy::builtin_events(&plan));
                }
                (plan, None)
            }
            Some(s) => {
                let ranked = strategy::rank(
                    self.set,
                    s,
                    &u.args,
                    self.req,
                    self.stats,
                    &cands,
                    Some(&mut self.rng),
                    self.explain,
                );
                self.trace.extend(ranked.events);
                let plan: Refs<'a> = ranked.order.iter().map(|c| c.reg).collect();
                let first = plan.first().copied();
                (plan, first)
            }
        };
        if let (Some(si), Some(s), Some(first)) = (u.strategy, strat, first) {
            let id: &str = &first.endpoint.id;
            if let Some(up) = strategy::update(
                self.set,
                (si, s),
                &u.args,
                self.req,
                self.stats,
                &cands,
                id,
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
        write_plan(&mut d, &plan, &u.target);
        d
    }
}

/// Applies a fallback's retries, backoff and `on` statuses to `d` and appends each chain target's
/// endpoints (`endpoints_of`, in built-in order) to `plan`, skipping ones already in
/// it. Shared by the interpreter and the JIT's host side so the plans cannot drift.
pub fn apply_fallback<'a>(
    d: &mut Decision,
    plan: &mut Refs<'a>,
    f: &CFallback,
    mut endpoints_of: impl FnMut(&CTarget) -> Refs<'a>,
) {
    d.retries = f.retries;
    d.fallback_on = f.on.clone();
    if f.backoff_max_ms > 0 {
        d.backoff_ms = Some((f.backoff_min_ms, f.backoff_max_ms));
    }
    if f.chain.is_empty() {
        return;
    }
    // Registry indices already in the plan, one bit each: a chain over a model's
    // hundreds of endpoints costs no quadratic search (issue 17). Indices and ids
    // name endpoints one to one within a registry.
    let mut seen = Bits::default();
    for e in plan.iter() {
        seen.insert(e.index);
    }
    for t in &f.chain {
        let mut more = endpoints_of(t);
        strategy::builtin_order(&mut more);
        for e in more {
            if seen.insert(e.index) {
                plan.push(e);
            }
        }
    }
}

/// A set of small integers (registry indices), one bit each, on the stack up to 256.
#[derive(Default)]
pub(crate) struct Bits(smallvec::SmallVec<[u64; 4]>);

impl Bits {
    /// Adds `i`; `true` when it was not in the set yet.
    #[inline]
    pub(crate) fn insert(&mut self, i: usize) -> bool {
        let b = 1u64 << (i % 64);
        let w = match self.0.get_mut(i / 64) {
            Some(w) => w,
            None => self.grow(i / 64),
        };
        let fresh = *w & b == 0;
        *w |= b;
        fresh
    }

    #[cold]
    #[inline(never)]
    fn grow(&mut self, w: usize) -> &mut u64 {
        self.0.resize(w + 1, 0);
        &mut self.0[w]
    }

    /// Keeps in `v` the first occurrence of each index below `limit`, in order,
    /// compacting in place over fixed words (the gateway's check of a decision's
    /// plan: no unknown endpoint, none twice, in one pass however long the plan).
    pub(crate) fn dedup_below(v: &mut Vec<usize>, limit: usize) {
        let mut words: smallvec::SmallVec<[u64; 4]> = smallvec::smallvec![0; limit.div_ceil(64)];
        let words = words.as_mut_slice();
        // Marks `i` seen; whether it is known and was not seen before.
        let mut fresh = |i: usize| {
            let Some(w) = words.get_mut(i / 64).filter(|_| i < limit) else {
                return false;
            };
            let bit = 1 << (i % 64);
            let new = *w & bit == 0;
            *w |= bit;
            new
        };
        // A plan without repeats or unknown indices (the usual one) is only read,
        // in a plain loop (`Vec::retain` paid for its drop guard per item: 23
        // instructions per endpoint, issue 17).
        let Some(first) = v.iter().position(|&i| !fresh(i)) else {
            return;
        };
        let mut kept = first;
        for j in first + 1..v.len() {
            let i = v[j];
            if fresh(i) {
                v[kept] = i;
                kept += 1;
            }
        }
        v.truncate(kept);
    }
}

/// Writes `plan` into `d`: its first endpoint is the choice, the rest the fallbacks;
/// an empty plan is a 503 rejection naming `target`.
pub fn write_plan(d: &mut Decision, plan: &[EndpointRef<'_>], target: &CTarget) {
    d.plan = plan.iter().map(|e| e.index).collect();
    name_plan(d, target);
}

/// Names the choice of the plan already in `d.plan` (its first endpoint's id and
/// model); an empty plan is a 503 rejection naming `target`. The JIT writes a plan
/// without a fallback chain straight into `d.plan` from its ranking's positions,
/// with no list of endpoint references in between (issue 17: a pass and a copy
/// per endpoint at a model's 128).
pub fn name_plan(d: &mut Decision, target: &CTarget) {
    match d.plan.first().and_then(|&first| d.names.get(first)) {
        Some(first) => {
            d.endpoint = Some(first.id.clone());
            d.model = Some(first.model.clone());
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
