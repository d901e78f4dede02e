//! The host side of a JIT decision: fills the vectors, calls compiled code, and does
//! the string, list and ordering work around it exactly as [`crate::policy::interp`]
//! does (it reuses the interpreter's candidate contexts, reductions, probabilities
//! and pick so the two cannot drift apart).
//!
//! Every function returns `None` if a compiled call is refused (a layout mismatch,
//! which code generation rules out); the caller then decides on the interpreter.

use std::collections::BTreeMap;

use smallvec::SmallVec;

use crate::policy::ast::{Event, PriorityLevel};
use crate::policy::checked::*;
use crate::policy::features::{Outcome, RequestFeatures, StatsSource};
use crate::policy::interp::eval::{reduce, EpCtx};
use crate::policy::interp::hash::SplitMix64;
use crate::policy::interp::strategy::{
    self, choose_by, contexts, order_rest_by, probabilities_into,
};
use crate::policy::interp::{
    apply_fallback, available, candidates, split_bucket, write_plan, Decision, Refs, Rejection,
    SplitChoice, StateUpdate, StrategyCall, IMPLICIT_USE,
};
use crate::policy::registry::EndpointRef;

use super::codegen::NONE;
use super::compile::{JitCode, StratCode, NO_ARM};
use super::layout::prio_level;

/// One JIT decision in progress.
pub struct JRun<'a> {
    set: &'a CheckedPolicySet,
    code: &'a JitCode,
    req: &'a RequestFeatures,
    stats: &'a dyn StatsSource,
    rng: SplitMix64,
    priority: PriorityLevel,
    fv: Cells<48>,
}

/// Vector cells, on the stack up to `N`.
type Cells<const N: usize> = SmallVec<[u64; N]>;

/// Candidate rows and flags, on the stack up to 8 candidates.
type Rows<T> = SmallVec<[T; 8]>;

fn rule_at(route: &CRoute, i: u64) -> Option<&CRule> {
    let i = usize::try_from(i).ok()?;
    if i == route.rules.len() {
        Some(&route.default)
    } else {
        route.rules.get(i)
    }
}

impl<'a> JRun<'a> {
    /// Prepares a decision: fills the request vector.
    pub fn new(
        set: &'a CheckedPolicySet,
        code: &'a JitCode,
        req: &'a RequestFeatures,
        stats: &'a dyn StatsSource,
        seed: u64,
    ) -> JRun<'a> {
        let mut fv = Cells::from_elem(0, code.layout.req.len());
        code.req_fill.fill(set, &code.strings, req, &mut fv);
        for ix in &code.index {
            ix.fill(&mut fv);
        }
        JRun {
            set,
            code,
            req,
            stats,
            rng: SplitMix64::new(seed),
            priority: req.priority,
            fv,
        }
    }

    /// The decision (same result as `interp::decide`), written into `d`, which must
    /// arrive as [`Decision::blank`] for the set's endpoints. Built in place: a
    /// `Decision` is a few hundred bytes, and returning it up the chain of calls
    /// below copied it at every level (issue 17, `examples/decide_cost.rs`). `None`:
    /// a compiled call was refused, and `d` holds a partial decision to discard.
    pub fn decide_into(&mut self, d: &mut Decision) -> Option<()> {
        let out = self.code.native.call_select(self.code.select, &self.fv)?;
        self.priority = prio_level(out[2]);
        if out[0] == NONE {
            d.priority = self.priority;
            return self.dispatch(d, &IMPLICIT_USE, None, None);
        }
        let ri = usize::try_from(out[0]).ok()?;
        let route = self.set.routes.get(ri)?;
        let rule = rule_at(route, out[1])?;
        let cache = match out[3] {
            NONE => route.cache,
            k => rule_at(route, k)?.body.cache,
        };
        let fallback = match out[4] {
            NONE => route.fallback.as_ref(),
            k => rule_at(route, k)?.body.fallback.as_ref(),
        };
        let site = (ri as u32, out[1] as u32);
        d.priority = self.priority;
        self.terminal(d, rule.body.terminal.as_ref()?, &rule.name, fallback, site)?;
        d.route = self.set.names.route(ri);
        d.rule = self.set.names.rule(ri, usize::try_from(out[1]).ok()?);
        d.cache = cache;
        d.hold_off_peak = out[5] != 0;
        d.priority = self.priority;
        Some(())
    }

    /// Decides by terminal `t` into `d` (blank, with the request's final priority).
    fn terminal(
        &mut self,
        d: &mut Decision,
        t: &'a CTerminal,
        rule: &str,
        fallback: Option<&CFallback>,
        site: (u32, u32),
    ) -> Option<()> {
        match t {
            CTerminal::Reject {
                status, message, ..
            } => {
                d.reject = Some(Rejection {
                    status: *status,
                    message: message.clone(),
                });
                Some(())
            }
            CTerminal::Use(u) => self.dispatch(d, u, fallback, Some((site.0, site.1, NO_ARM))),
            CTerminal::Split(s) => {
                let (bucket, present) = split_bucket(s, rule, self.req, &mut self.rng);
                let mut arm = s
                    .arms
                    .iter()
                    .position(|a| bucket < a.upto_bp)
                    .unwrap_or(s.arms.len().saturating_sub(1));
                let mut rolled_back = false;
                if let (Some(a), Some(stable)) = (s.arms.get(arm), s.stable_arm) {
                    if a.canary && a.rollback.is_some() {
                        let g = *self.code.guards.get(&(site.0, site.1, arm as u32))?;
                        if self.rollback_fires(&a.action, g)? {
                            arm = stable as usize;
                            rolled_back = true;
                        }
                    }
                }
                let Some(a) = s.arms.get(arm) else {
                    return Some(());
                };
                self.dispatch(d, &a.action, fallback, Some((site.0, site.1, arm as u32)))?;
                d.split = Some(SplitChoice {
                    arm: arm as u32,
                    bucket,
                    key_present: present,
                    rolled_back,
                });
                Some(())
            }
        }
    }

    /// One endpoint vector per context; with `cells`, only those cells are filled
    /// (the rest stay 0): for the functions of an instance, which read no other.
    fn ep_vectors(&self, ctxs: &[EpCtx<'_>], cells: Option<&[u32]>) -> Cells<64> {
        let mut v = Cells::new();
        self.ep_vectors_into(ctxs, cells, &mut v);
        v
    }

    /// [`JRun::ep_vectors`] into `v` (emptied first), which the caller keeps on its
    /// stack: returning the vectors by value copied their inline cells.
    fn ep_vectors_into(&self, ctxs: &[EpCtx<'_>], cells: Option<&[u32]>, v: &mut Cells<64>) {
        let n = self.code.layout.ep.len();
        v.clear();
        v.resize(n * ctxs.len(), 0);
        if n > 0 {
            let (layout, strings) = (&self.code.layout, &self.code.strings);
            for (c, cell) in ctxs.iter().zip(v.chunks_mut(n)) {
                match cells {
                    Some(cells) => layout.fill_ep_cells(self.set, strings, c, cell, cells),
                    None => layout.fill_ep(self.set, strings, c, cell),
                }
            }
        }
    }

    fn ep_of<'v>(&self, v: &'v [u64], i: usize) -> &'v [u64] {
        let n = self.code.layout.ep.len();
        v.get(i * n..(i + 1) * n).unwrap_or(&[])
    }

    fn aux(
        &self,
        priority: PriorityLevel,
        count: usize,
        outcome: Option<&Outcome>,
        aggs: &[f64],
    ) -> Cells<16> {
        let mut a = Cells::from_elem(0, self.code.layout.aux.len());
        self.code
            .layout
            .fill_aux(priority, count, outcome, aggs, &mut a);
        a
    }

    fn call(&self, f: usize, ep: &[u64], aux: &[u64]) -> Option<u64> {
        self.code.native.call_expr(f, &self.fv, ep, aux)
    }

    fn rollback_fires(&mut self, u: &CUse, guard: usize) -> Option<bool> {
        let cands = candidates(self.set, self.req, &u.target).unwrap_or_default();
        let ctxs = contexts(self.set, None, &[], self.req, self.stats, &cands);
        let eps = self.ep_vectors(&ctxs, None);
        let aux = self.aux(self.priority, 0, None, &[]);
        for i in 0..ctxs.len() {
            if self.call(guard, self.ep_of(&eps, i), &aux)? != 0 {
                return Some(true);
            }
        }
        Some(false)
    }

    /// Aggregate values (by index) over `n` candidates: candidate `i`'s vector is
    /// row `rows[i]` of `eps` (row `i` when `rows` is `None`).
    fn aggregates(
        &self,
        inst: &StratCode,
        s: &CStrategy,
        eps: &[u64],
        n: usize,
        rows: Option<&[usize]>,
        outcome: Option<&Outcome>,
    ) -> Option<Rows<f64>> {
        let mut out: Rows<f64> = smallvec::smallvec![0.0; s.aggregates as usize];
        if inst.aggs.is_empty() {
            return Some(out);
        }
        let aux = self.aux(self.req.priority, n, outcome, &[]);
        let mut values: Rows<f64> = SmallVec::with_capacity(n);
        for (idx, f, func) in &inst.aggs {
            let call = self.code.native.bind_expr(*func, &self.fv, &aux)?;
            values.clear();
            for i in 0..n {
                let row = rows.map_or(Some(i), |r| r.get(i).copied())?;
                values.push(f64::from_bits(call.call(self.ep_of(eps, row))?));
            }
            if let Some(slot) = out.get_mut(*idx as usize) {
                *slot = reduce(*f, &values);
            }
        }
        Some(out)
    }

    /// Scores the contexts `ctxs[rows[i]]` (every context when `rows` is `None`),
    /// aggregates over exactly these, filling `score` and `probability` as the
    /// interpreter's `score_all` does; returns the aggregate values (by index).
    /// Context `j`'s vector is row `j` of `eps`; the vectors must have been filled
    /// before scoring (score 0, probability 1, as `contexts` makes them).
    fn score_rows(
        &self,
        inst: &StratCode,
        s: &CStrategy,
        ctxs: &mut [EpCtx<'a>],
        eps: &[u64],
        rows: Option<&[usize]>,
    ) -> Option<Rows<f64>> {
        let n = rows.map_or(ctxs.len(), <[usize]>::len);
        let aggs = self.aggregates(inst, s, eps, n, rows, None)?;
        let aux = self.aux(self.req.priority, n, None, &aggs);
        let mut scores: Rows<f64> = SmallVec::with_capacity(n);
        let score = self.code.native.bind_expr(inst.score, &self.fv, &aux)?;
        for i in 0..n {
            let row = rows.map_or(Some(i), |r| r.get(i).copied())?;
            scores.push(f64::from_bits(score.call(self.ep_of(eps, row))?));
        }
        let mut probs: Rows<f64> = smallvec::smallvec![0.0; n];
        probabilities_into(s.pick, &scores, &mut probs);
        for i in 0..n {
            let row = rows.map_or(Some(i), |r| r.get(i).copied())?;
            let c = ctxs.get_mut(row)?;
            c.score = scores[i];
            c.probability = probs[i];
        }
        Some(aggs)
    }

    /// The interpreter's `strategy::rank` for a compiled instance.
    pub fn rank(
        &mut self,
        inst: &StratCode,
        s: &'a CStrategy,
        args: &'a [Const],
        cands: &[EndpointRef<'a>],
    ) -> Option<Vec<EpCtx<'a>>> {
        let mut eps = Cells::new();
        let r = self.rank_rows(inst, s, args, cands, &mut eps)?;
        Some(
            r.order
                .iter()
                .filter_map(|&i| r.all.get(i).cloned())
                .collect(),
        )
    }

    /// Ranks `cands` with a compiled instance: every candidate's context, and the
    /// plan order as indices into them (see [`RankedRows`]); their vectors are left
    /// in `eps` (row `i` for context `i`).
    fn rank_rows(
        &mut self,
        inst: &StratCode,
        s: &'a CStrategy,
        args: &'a [Const],
        cands: &[EndpointRef<'a>],
        eps: &mut Cells<64>,
    ) -> Option<RankedRows<'a>> {
        let mut all = contexts(self.set, Some(s), args, self.req, self.stats, cands);
        // One vector per candidate, reused for scoring the kept ones.
        self.ep_vectors_into(&all, Some(&inst.cells), eps);
        let eps: &[u64] = eps;
        let aux = self.aux(self.req.priority, 0, None, &[]);
        let mut rows: Rows<usize> = SmallVec::with_capacity(all.len());
        let (mut any_preferred, mut any_plain) = (false, false);
        let mut preferred: Rows<bool> = SmallVec::with_capacity(all.len());
        let filter = self.code.native.bind_expr(inst.filter, &self.fv, &aux)?;
        for i in 0..all.len() {
            let bits = filter.call(self.ep_of(eps, i))?;
            if bits & 1 == 0 {
                continue;
            }
            let p = bits & 2 != 0;
            any_preferred |= p;
            any_plain |= !p;
            preferred.push(p);
            rows.push(i);
        }
        if any_preferred && any_plain {
            let mut i = 0;
            rows.retain(|_| {
                i += 1;
                preferred[i - 1]
            });
        }
        let aggs = self.score_rows(inst, s, &mut all, eps, Some(&rows))?;
        let scored_all = rows.len() == all.len();
        let key = |i: usize| {
            all.get(i)
                .map_or((f64::NAN, 0.0), |c| (c.score, c.probability))
        };
        let chosen = choose_by(s.pick, rows.len(), |k| key(rows[k]), Some(&mut self.rng));
        if let Some(c) = chosen.filter(|c| *c > 0) {
            // The pick first, the rest in their order before the sort below.
            rows[..=c].rotate_right(1);
        }
        let rest = rows
            .get_mut(usize::from(chosen.is_some())..)
            .unwrap_or_default();
        order_rest_by(s.pick, rest, |&i| key(i));
        Some(RankedRows {
            all,
            order: rows,
            scored_all,
            aggs: (scored_all && !inst.aggs_read_scored).then_some(aggs),
        })
    }

    /// The interpreter's `strategy::update` for a compiled instance (`Some(None)`: no
    /// block for `event`, or `endpoint` is not a candidate).
    #[allow(clippy::too_many_arguments)]
    pub fn update(
        &self,
        inst: &StratCode,
        s: &'a CStrategy,
        args: &'a [Const],
        cands: &[EndpointRef<'a>],
        endpoint: &str,
        event: Event,
        outcome: Option<&Outcome>,
    ) -> Option<Option<StateUpdate>> {
        let Some((_, assigns)) = inst.updates.iter().find(|(e, _)| *e == event) else {
            return Some(None);
        };
        let mut ctxs = contexts(self.set, Some(s), args, self.req, self.stats, cands);
        let Some(me) = ctxs.iter().position(|c| c.reg.endpoint.id == endpoint) else {
            return Some(None);
        };
        let mut eps = self.ep_vectors(&ctxs, Some(&inst.cells));
        self.score_rows(inst, s, &mut ctxs, &eps, None)?;
        self.assign(inst, &ctxs, &mut eps, me, assigns, event, outcome, None)
    }

    /// The state update of `assigns` (the block for `event`) for context `me` among
    /// `ctxs`, scored over all of them; `eps` are their vectors, filled before
    /// scoring (their score and probability cells are written here). `known`: the
    /// aggregates over `ctxs` as scored, when the ranking already has them
    /// ([`RankedRows::aggs`]); only `me`'s vector is then read.
    #[allow(clippy::too_many_arguments)]
    fn assign(
        &self,
        inst: &StratCode,
        ctxs: &[EpCtx<'a>],
        eps: &mut [u64],
        me: usize,
        assigns: &[(u32, usize)],
        event: Event,
        outcome: Option<&Outcome>,
        known: Option<&[f64]>,
    ) -> Option<Option<StateUpdate>> {
        let s = self.set.strategies.get(inst.strategy as usize)?;
        let n = self.code.layout.ep.len();
        let aggs = match known {
            Some(aggs) => {
                if n > 0 {
                    let cells = eps.get_mut(me * n..(me + 1) * n)?;
                    self.code.layout.fill_scored(ctxs.get(me)?, cells);
                }
                Rows::from_slice(aggs)
            }
            None => {
                if n > 0 {
                    for (c, cells) in ctxs.iter().zip(eps.chunks_mut(n)) {
                        self.code.layout.fill_scored(c, cells);
                    }
                }
                self.aggregates(inst, s, eps, ctxs.len(), None, outcome)?
            }
        };
        let aux = self.aux(self.req.priority, ctxs.len(), outcome, &aggs);
        let mut slots = BTreeMap::new();
        for (slot, f) in assigns {
            let v = f64::from_bits(self.call(*f, self.ep_of(eps, me), &aux)?);
            if let Some(name) = self.set.names.slot(inst.strategy, *slot) {
                slots.insert(name, v);
            }
        }
        let index = ctxs.get(me)?.reg.index;
        Some(Some(StateUpdate {
            endpoint: self.set.names.endpoints().get(index)?.id.clone(),
            index,
            strategy: self.set.names.strategy(Some(inst.strategy)),
            event,
            slots,
        }))
    }

    /// Decides by `use` `u` into `d` (blank, with the request's final priority).
    fn dispatch(
        &mut self,
        d: &mut Decision,
        u: &'a CUse,
        fallback: Option<&CFallback>,
        site: Option<(u32, u32, u32)>,
    ) -> Option<()> {
        d.target = Some(u.described.clone());
        let mut cands = match candidates(self.set, self.req, &u.target) {
            Ok(c) => c,
            Err(model) => {
                d.reject = Some(Rejection {
                    status: 404,
                    message: format!("The model `{model}` does not exist."),
                });
                return Some(());
            }
        };
        // `available` in place: passing the candidates through it by value copied them.
        self.stats.retain_available(&mut cands);
        let strat = u.strategy.and_then(|i| self.set.strategies.get(i as usize));
        d.strategy = Some(self.set.names.strategy(u.strategy));
        d.call = Some(StrategyCall::new(u, &cands));
        let code = self.code;
        let inst = match (strat, site) {
            (Some(_), Some(site)) => Some(code.instances.get(*code.sites.get(&site)?)?),
            _ => None,
        };
        let mut plan: Refs<'a> = match (strat, inst) {
            (Some(s), Some(inst)) => {
                let mut eps = Cells::new();
                let mut r = self.rank_rows(inst, s, &u.args, &cands, &mut eps)?;
                let plan = r.order.iter().filter_map(|&i| r.all.get(i)).map(|c| c.reg);
                let plan = plan.collect();
                let pick = inst.updates.iter().find(|(e, _)| *e == Event::Pick);
                if let (Some((_, assigns)), Some(&me)) = (pick, r.order.first()) {
                    // `on pick` sees every candidate scored (aggregates over all of
                    // them), as the interpreter's `update` does; the ranking scored
                    // only the kept ones unless that was all.
                    if !r.scored_all {
                        self.score_rows(inst, s, &mut r.all, &eps, None)?;
                    }
                    let known = r.aggs.as_deref();
                    let up = self.assign(
                        inst,
                        &r.all,
                        &mut eps,
                        me,
                        assigns,
                        Event::Pick,
                        None,
                        known,
                    )?;
                    d.state_updates.extend(up);
                }
                plan
            }
            (Some(_), None) => return None,
            (None, _) => {
                let mut plan = cands;
                strategy::builtin(&mut plan, Some(&mut self.rng));
                plan
            }
        };
        if let Some(f) = fallback {
            apply_fallback(d, &mut plan, f, |t| {
                available(
                    self.stats,
                    candidates(self.set, self.req, t).unwrap_or_default(),
                )
            });
        }
        write_plan(d, &plan, &u.target);
        Some(())
    }
}

/// A compiled ranking: every candidate's context (`all`, scored: all of them when
/// `scored_all`, else the kept ones) and the plan order as indices into `all`. The
/// candidates' vectors (row `i` for `all[i]`) stay in the caller's buffer.
struct RankedRows<'a> {
    all: Vec<EpCtx<'a>>,
    order: Rows<usize>,
    scored_all: bool,
    /// The ranking's aggregates, when an `on pick` block would compute the same
    /// values (every candidate scored, no aggregate reads `score` or
    /// `probability`: [`StratCode::aggs_read_scored`]).
    aggs: Option<Rows<f64>>,
}

/// Candidate endpoint refs for registry indices `ids` (unknown ones skipped), as
/// `on_outcome` does.
pub fn refs<'a>(set: &'a CheckedPolicySet, ids: &[usize]) -> Vec<EndpointRef<'a>> {
    set.registry.endpoints_at(ids)
}
