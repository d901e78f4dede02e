//! The host side of a JIT decision: fills the vectors, calls compiled code, and does
//! the string, list and ordering work around it exactly as [`crate::policy::interp`]
//! does (it reuses the interpreter's candidate contexts, reductions, probabilities
//! and pick so the two cannot drift apart).
//!
//! Every function returns `None` if a compiled call is refused (a layout mismatch,
//! which code generation rules out); the caller then decides on the interpreter.

use std::collections::BTreeMap;

use smallvec::SmallVec;

use crate::policy::ast::{Event, PickMode, PriorityLevel};
use crate::policy::checked::*;
use crate::policy::features::{EpStats, LiveNumber, Outcome, RequestFeatures, StatsSource};
use crate::policy::interp::eval::{reduce, EpCtx};
use crate::policy::interp::hash::SplitMix64;
use crate::policy::interp::strategy::{
    self, choose_by, contexts, plan_positions, probabilities_into, state_column, state_values,
    PlanRest,
};
use crate::policy::interp::{
    apply_fallback, available, candidates, name_plan, split_bucket, write_plan, Decision, Refs,
    Rejection, SplitChoice, StateUpdate, StrategyCall, IMPLICIT_USE,
};
use crate::policy::registry::EndpointRef;

use super::codegen::NONE;
use super::compile::{JitCode, StratCode, NO_ARM};
use super::layout::{prio_level, EpSlot, EpView};
use super::RankedCandidate;

/// One JIT decision in progress.
pub struct JRun<'a> {
    set: &'a CheckedPolicySet,
    code: &'a JitCode,
    req: &'a RequestFeatures,
    stats: &'a dyn StatsSource,
    rng: SplitMix64,
    priority: PriorityLevel,
    fv: Cells<48>,
    /// A ranking of at least [`LAZY_FROM`] kept candidates without a fallback chain
    /// leaves its fallbacks unordered ([`Decision::rest`]; [`JRun::lazy_rest`]).
    lazy: bool,
}

/// Kept candidates from which a lazy decision leaves its fallbacks unordered: below
/// it, ordering them costs less than the lists that keep them (a few hundred
/// instructions).
const LAZY_FROM: usize = 8;

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
            lazy: false,
        }
    }

    /// Makes the decision lazy: a ranking of many candidates without a fallback chain
    /// puts only its pick in [`Decision::plan`] and leaves the rest unordered in
    /// [`Decision::rest`] (the same plan once ordered).
    pub fn lazy_rest(mut self) -> JRun<'a> {
        self.lazy = true;
        self
    }

    /// The decision (same result as `interp::decide`), written into `d`, which must
    /// arrive as `Decision::blank` for the set's endpoints. Built in place: a
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

    /// One endpoint vector per context, every cell filled (rollback guards, which
    /// read any endpoint field).
    fn ep_vectors(&self, ctxs: &[EpCtx<'_>]) -> Cells<64> {
        let n = self.code.layout.ep.len();
        let mut v: Cells<64> = smallvec::smallvec![0; n * ctxs.len()];
        if n > 0 {
            let (layout, strings) = (&self.code.layout, &self.code.strings);
            for (c, cell) in ctxs.iter().zip(v.chunks_mut(n)) {
                layout.fill_ep(self.set, strings, &EpView::of(c), cell);
            }
        }
        v
    }

    /// The vectors of a compiled ranking's candidates, row `k` for `cands[k]`, into
    /// `v` (emptied first): only the cells of instance `inst`, from the registry,
    /// the statistics when the strategy reads any, and the state slots, as the
    /// interpreter's contexts would hold them (score 0, probability 1). No context
    /// is built: a model's 128 endpoints made 128 of them, each with a copy of its
    /// statistics, for every decision (issue 17). Registry numbers and state slots
    /// are written a column at a time; any other cell goes through
    /// [`Layout::fill_ep_cells`], a row at a time.
    fn fill_rows(
        &self,
        inst: &StratCode,
        s: &'a CStrategy,
        args: &'a [Const],
        cands: &[EndpointRef<'a>],
        v: &mut Cells<64>,
    ) {
        let n = self.code.layout.ep.len();
        *v = smallvec::smallvec![0; n * cands.len()];
        if n == 0 {
            return;
        }
        let ns = s.states.len();
        let (layout, strings) = (&self.code.layout, &self.code.strings);
        let mut others: SmallVec<[u32; 8]> = SmallVec::new();
        let mut numbers: Rows<f64> = SmallVec::new();
        let mut known: Rows<Option<f64>> = SmallVec::new();
        for &cell in &inst.cells {
            let c = cell as usize;
            let Some(slot) = layout.ep.get(c) else {
                continue;
            };
            let rows = v.chunks_exact_mut(n).zip(cands);
            match *slot {
                EpSlot::Field(EpField::Weight) => {
                    for (row, r) in rows {
                        row[c] = u64::from(r.endpoint.weight);
                    }
                }
                EpSlot::Field(EpField::Priority) => {
                    for (row, r) in rows {
                        row[c] = u64::from(r.endpoint.priority);
                    }
                }
                EpSlot::State(i) if (i as usize) < ns => {
                    let (set, req, stats) = (self.set, self.req, self.stats);
                    let join =
                        state_column(set, s, args, req, stats, cands, i as usize, &mut known);
                    for ((row, _), x) in rows.zip(&known) {
                        row[c] = x.unwrap_or(join).to_bits();
                    }
                }
                // A slot the strategy does not have reads 0.0, whose bits are 0.
                EpSlot::State(_) => {}
                // A live number read as a column, without the rest of each
                // candidate's statistics.
                EpSlot::Field(f) => match LiveNumber::of(f) {
                    Some(live) => {
                        numbers.resize(cands.len(), 0.0);
                        self.stats.numbers(cands, live, &mut numbers);
                        for (row, x) in rows.map(|(row, _)| row).zip(&numbers) {
                            row[c] = x.to_bits();
                        }
                    }
                    None => others.push(cell),
                },
                _ => others.push(cell),
            }
        }
        if others.is_empty() {
            return;
        }
        // The rest a row at a time, with each candidate's whole statistics when one
        // of them comes from there.
        let needs_stats = s.reads_stats
            && others.iter().any(|&c| match layout.ep.get(c as usize) {
                Some(EpSlot::Field(f) | EpSlot::Atom(_, f, _)) => f.from_stats(),
                _ => false,
            });
        // Every state slot per candidate, for cells that read the state otherwise.
        let states = state_values(self.set, s, args, self.req, self.stats, cands);
        for (k, (r, cell)) in cands.iter().zip(v.chunks_exact_mut(n)).enumerate() {
            let read;
            let stats = if needs_stats {
                read = self.stats.stats(r.index, &r.endpoint.id, &self.req.task);
                &read
            } else {
                &EpStats::UNKNOWN
            };
            let view = EpView {
                reg: *r,
                stats,
                state: states.get(k * ns..(k + 1) * ns).unwrap_or_default(),
                score: 0.0,
                probability: 1.0,
            };
            layout.fill_ep_cells(self.set, strings, &view, cell, &others);
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
        let eps = self.ep_vectors(&ctxs);
        let aux = self.aux(self.priority, 0, None, &[]);
        for i in 0..ctxs.len() {
            if self.call(guard, self.ep_of(&eps, i), &aux)? != 0 {
                return Some(true);
            }
        }
        Some(false)
    }

    /// Aggregate values (by index) over candidates `rows` of the `total` whose
    /// vectors are in `eps` (row `i` for candidate `i`; every candidate when `rows`
    /// is `None`).
    fn aggregates(
        &self,
        inst: &StratCode,
        s: &CStrategy,
        eps: &[u64],
        total: usize,
        rows: Option<&[usize]>,
        outcome: Option<&Outcome>,
    ) -> Option<Rows<f64>> {
        let mut out: Rows<f64> = smallvec::smallvec![0.0; s.aggregates as usize];
        if inst.aggs.is_empty() {
            return Some(out);
        }
        let n = rows.map_or(total, <[usize]>::len);
        let aux = self.aux(self.req.priority, n, outcome, &[]);
        let stride = self.code.layout.ep.len();
        let mut values: Rows<f64> = smallvec::smallvec![0.0; n];
        for (idx, f, func, column) in &inst.aggs {
            match *column {
                // An argument that is one cell: the column read straight from the
                // vectors, no call per candidate (issue 17).
                Some(col) if (col.cell as usize) < stride => {
                    let (c, out) = (col.cell as usize, &mut values[..]);
                    if col.int {
                        read_column(eps, stride, c, total, rows, out, |b| b as i64 as f64)?;
                    } else {
                        read_column(eps, stride, c, total, rows, out, f64::from_bits)?;
                    }
                }
                _ => {
                    let call = self.code.native.bind_expr(*func, &self.fv, &aux)?;
                    call.call_rows(eps, stride, total, rows, &mut values, f64::from_bits)?;
                }
            }
            if let Some(slot) = out.get_mut(*idx as usize) {
                *slot = reduce(*f, &values);
            }
        }
        Some(out)
    }

    /// Scores candidates `rows` of the `total` whose vectors are in `eps` (row `i`
    /// for candidate `i`; every candidate when `rows` is `None`) as the
    /// interpreter's `score_all` does: aggregates over exactly these, then each
    /// one's score and pick probability, in the order of `rows`.
    fn score_list(
        &self,
        inst: &StratCode,
        s: &CStrategy,
        eps: &[u64],
        total: usize,
        rows: Option<&[usize]>,
    ) -> Option<Scores> {
        let n = rows.map_or(total, <[usize]>::len);
        let aggs = self.aggregates(inst, s, eps, total, rows, None)?;
        let aux = self.aux(self.req.priority, n, None, &aggs);
        let score = self.code.native.bind_expr(inst.score, &self.fv, &aux)?;
        let mut scores: Rows<f64> = smallvec::smallvec![0.0; n];
        let stride = self.code.layout.ep.len();
        score.call_rows(eps, stride, total, rows, &mut scores, f64::from_bits)?;
        let mut probs: Rows<f64> = smallvec::smallvec![0.0; n];
        probabilities_into(s.pick, &scores, &mut probs);
        Some(Scores {
            aggs,
            score: scores,
            probability: probs,
        })
    }

    /// The interpreter's `strategy::rank` for a compiled instance: the candidates
    /// in plan order with their scores and probabilities.
    pub fn rank(
        &mut self,
        inst: &StratCode,
        s: &'a CStrategy,
        args: &'a [Const],
        cands: &[EndpointRef<'a>],
    ) -> Option<Vec<RankedCandidate>> {
        let mut eps = Cells::new();
        let r = self.rank_rows(inst, s, args, cands, &mut eps, true)?;
        r.pos
            .iter()
            .map(|&k| {
                let k = k as usize;
                let c = cands.get(r.row(k)?)?;
                let (score, p) = (r.list.score.get(k)?, r.list.probability.get(k)?);
                Some((c.endpoint.id.clone(), *score, *p))
            })
            .collect()
    }

    /// Ranks `cands` with a compiled instance: the candidates kept by the
    /// filters, their scores, and the plan order (see [`RankedRows`]); the
    /// candidates' vectors are left in `eps` (row `i` for `cands[i]`). Without
    /// `order_rest`, a ranking of [`LAZY_FROM`] or more kept candidates finds only
    /// its pick (`pos` holds it alone; [`RankedRows::ordered`] is false).
    fn rank_rows(
        &mut self,
        inst: &StratCode,
        s: &'a CStrategy,
        args: &'a [Const],
        cands: &[EndpointRef<'a>],
        eps: &mut Cells<64>,
        order_rest: bool,
    ) -> Option<RankedRows> {
        // One vector per candidate, reused for scoring the kept ones.
        self.fill_rows(inst, s, args, cands, eps);
        let eps: &[u64] = eps;
        let total = cands.len();
        let aux = self.aux(self.req.priority, 0, None, &[]);
        let filter = self.code.native.bind_expr(inst.filter, &self.fv, &aux)?;
        // Bit 0: passes `require`; bit 1: passes `prefer`.
        let mut bits: Rows<u64> = smallvec::smallvec![0; total];
        filter.call_rows(
            eps,
            self.code.layout.ep.len(),
            total,
            None,
            &mut bits,
            |b| b,
        )?;
        // One pass counts the candidates that pass and those also preferred.
        let (mut passing, mut preferred) = (0, 0);
        for &b in &bits {
            passing += (b & 1) as usize;
            preferred += usize::from(b & 3 == 3);
        }
        // With some preferred candidates and some not, only the preferred are kept.
        let keep = if preferred > 0 && preferred < passing {
            3
        } else {
            1
        };
        let n = if keep == 3 { preferred } else { passing };
        // Every candidate kept (the usual case): no list of them, scored by index.
        let rows: Rows<usize> = if n == total {
            Rows::new()
        } else {
            let kept = bits.iter().enumerate().filter(|(_, b)| *b & keep == keep);
            collect_long(n, kept.map(|(i, _)| i))
        };
        let kept = (n < total).then_some(&rows[..]);
        let list = self.score_list(inst, s, eps, total, kept)?;
        // Both are `n` long; cut to it, so a key read needs no check.
        let (score, prob) = (list.score.get(..n)?, list.probability.get(..n)?);
        // The pick first, then the rest by key (candidate order among equals). A
        // min or max pick orders by score alone: its key reads no probability
        // (a bounds check per candidate, issue 17).
        let rng = Some(&mut self.rng);
        let ordered = order_rest || n < LAZY_FROM;
        let pos: Rows<u32> = if ordered {
            let mut pos = SmallVec::with_capacity(n);
            match s.pick {
                PickMode::Min | PickMode::Max => {
                    plan_positions(s.pick, n, |k| (score[k], 1.0), rng, &mut pos);
                }
                PickMode::Weighted | PickMode::Sample => {
                    plan_positions(s.pick, n, |k| (score[k], prob[k]), rng, &mut pos);
                }
            }
            pos
        } else {
            // The candidate `plan_positions` puts first, with the same draw.
            let pick = match s.pick {
                PickMode::Min | PickMode::Max => choose_by(s.pick, n, |k| (score[k], 1.0), rng),
                PickMode::Weighted | PickMode::Sample => {
                    choose_by(s.pick, n, |k| (score[k], prob[k]), rng)
                }
            };
            pick.into_iter().map(|k| k as u32).collect()
        };
        Some(RankedRows {
            scored_all: n == total,
            reuse_aggs: n == total && !inst.aggs_read_scored,
            rows,
            list,
            pos,
            kept: n,
            ordered,
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
        let Some(me) = cands.iter().position(|c| c.endpoint.id == endpoint) else {
            return Some(None);
        };
        let mut eps = Cells::new();
        self.fill_rows(inst, s, args, cands, &mut eps);
        let all = self.score_list(inst, s, &eps, cands.len(), None)?;
        let scoring = Scoring::All(&all);
        self.assign(inst, cands, scoring, &mut eps, me, assigns, event, outcome)
    }

    /// The state update of `assigns` (the block for `event`) for candidate `me` among
    /// `cands`, all of them scored (`scoring`); `eps` are their vectors, filled
    /// before scoring (their score and probability cells are written here). With
    /// [`Scoring::Known`] only `me`'s vector is read.
    #[allow(clippy::too_many_arguments)]
    fn assign(
        &self,
        inst: &StratCode,
        cands: &[EndpointRef<'a>],
        scoring: Scoring<'_>,
        eps: &mut [u64],
        me: usize,
        assigns: &[(u32, usize)],
        event: Event,
        outcome: Option<&Outcome>,
    ) -> Option<Option<StateUpdate>> {
        let s = self.set.strategies.get(inst.strategy as usize)?;
        let n = self.code.layout.ep.len();
        let aggs = match scoring {
            Scoring::Known {
                aggs,
                score,
                probability,
            } => {
                if n > 0 {
                    let cells = eps.get_mut(me * n..(me + 1) * n)?;
                    self.code.layout.fill_scored(score, probability, cells);
                }
                Rows::from_slice(aggs)
            }
            Scoring::All(all) => {
                if n > 0 {
                    let scored = all.score.iter().zip(&all.probability);
                    for ((score, p), cells) in scored.zip(eps.chunks_mut(n)) {
                        self.code.layout.fill_scored(*score, *p, cells);
                    }
                }
                self.aggregates(inst, s, eps, cands.len(), None, outcome)?
            }
        };
        let aux = self.aux(self.req.priority, cands.len(), outcome, &aggs);
        let mut slots = BTreeMap::new();
        for (slot, f) in assigns {
            let v = f64::from_bits(self.call(*f, self.ep_of(eps, me), &aux)?);
            if let Some(name) = self.set.names.slot(inst.strategy, *slot) {
                slots.insert(name, v);
            }
        }
        let index = cands.get(me)?.index;
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
        d.call = Some(StrategyCall::new(u, strat, &cands));
        let code = self.code;
        let inst = match (strat, site) {
            (Some(_), Some(site)) => Some(code.instances.get(*code.sites.get(&site)?)?),
            _ => None,
        };
        // `None`: the plan is already in `d.plan` (a ranking without a fallback
        // chain, written there from its positions).
        let plan: Option<Refs<'a>> = match (strat, inst) {
            (Some(s), Some(inst)) => {
                let mut eps = Cells::new();
                let lazy = self.lazy && fallback.is_none();
                let r = self.rank_rows(inst, s, &u.args, &cands, &mut eps, !lazy)?;
                let all: &[EndpointRef<'a>] = &cands;
                let order = r.pos.iter().filter_map(|&k| all.get(r.row(k as usize)?));
                let plan = if fallback.is_some() {
                    Some(collect_long(r.pos.len(), order.copied()))
                } else if !r.ordered {
                    // The pick, and the others unordered with their keys.
                    let (n, pick) = (r.kept, *r.pos.first()? as usize);
                    d.plan = vec![all.get(r.row(pick)?)?.index];
                    let mut index = Vec::with_capacity(n - 1);
                    if r.scored_all {
                        // Position k is candidate k: two runs, no lookup each.
                        let (before, after) = (all.get(..pick)?, all.get(pick + 1..n)?);
                        index.extend(before.iter().chain(after).map(|c| c.index));
                    } else {
                        for k in (0..pick).chain(pick + 1..n) {
                            index.push(all.get(r.row(k)?)?.index);
                        }
                    }
                    let keys = match s.pick {
                        PickMode::Min | PickMode::Max => r.list.score.get(..n)?,
                        PickMode::Weighted | PickMode::Sample => r.list.probability.get(..n)?,
                    };
                    let mut key = Vec::with_capacity(n - 1);
                    key.extend_from_slice(&keys[..pick]);
                    key.extend_from_slice(&keys[pick + 1..]);
                    d.rest = Some(Box::new(PlanRest::new(s.pick, index, key)));
                    None
                } else {
                    // Written in place: every position names a row (a push per
                    // endpoint through the filter checked the capacity each time,
                    // 26 instructions per endpoint at a model's 128, issue 17).
                    let mut plan = vec![0; r.pos.len()];
                    for (slot, &k) in plan.iter_mut().zip(&r.pos) {
                        *slot = all.get(r.row(k as usize)?)?.index;
                    }
                    d.plan = plan;
                    None
                };
                let pick = inst.updates.iter().find(|(e, _)| *e == Event::Pick);
                if let (Some((_, assigns)), Some(&first)) = (pick, r.pos.first()) {
                    let first = first as usize;
                    let me = r.row(first)?;
                    // `on pick` sees every candidate scored (aggregates over all of
                    // them), as the interpreter's `update` does; the ranking scored
                    // only the kept ones unless that was all.
                    let all;
                    let scoring = if r.reuse_aggs {
                        Scoring::Known {
                            aggs: &r.list.aggs,
                            score: *r.list.score.get(first)?,
                            probability: *r.list.probability.get(first)?,
                        }
                    } else if r.scored_all {
                        Scoring::All(&r.list)
                    } else {
                        all = self.score_list(inst, s, &eps, cands.len(), None)?;
                        Scoring::All(&all)
                    };
                    let up = self.assign(
                        inst,
                        &cands,
                        scoring,
                        &mut eps,
                        me,
                        assigns,
                        Event::Pick,
                        None,
                    )?;
                    d.state_updates.extend(up);
                }
                plan
            }
            (Some(_), None) => return None,
            (None, _) => {
                let mut plan = cands;
                strategy::builtin(&mut plan, Some(&mut self.rng));
                Some(plan)
            }
        };
        let Some(mut plan) = plan else {
            name_plan(d, &u.target);
            return Some(());
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

/// `items` (at most `cap` of them) as a `SmallVec`: pushed to a `Vec` that the
/// `SmallVec` takes over without a copy when `cap` is beyond its inline capacity
/// (a spilled `SmallVec` checks where it lives on every push: a model's 128
/// endpoints per list, issue 17), else pushed inline with no allocation.
fn collect_long<A: smallvec::Array>(
    cap: usize,
    items: impl Iterator<Item = A::Item>,
) -> SmallVec<A> {
    if cap > A::size() {
        let mut v = Vec::with_capacity(cap);
        v.extend(items);
        SmallVec::from_vec(v)
    } else {
        items.collect()
    }
}

/// Writes into `out` the cell `c` of rows `rows` of the `total` vectors of `stride`
/// cells in `eps` (every row when `rows` is `None`), each converted by `value`: an
/// aggregate's argument that is one cell ([`super::compile::AggColumn`]). `None`
/// when `eps` is shorter than `total` rows or a row is not below `total`.
#[inline]
fn read_column(
    eps: &[u64],
    stride: usize,
    c: usize,
    total: usize,
    rows: Option<&[usize]>,
    out: &mut [f64],
    value: impl Fn(u64) -> f64,
) -> Option<()> {
    let eps = eps.get(..total.checked_mul(stride)?)?;
    match rows {
        Some(rows) => {
            for (v, &r) in out.iter_mut().zip(rows) {
                *v = value(*eps.get(r * stride + c)?);
            }
        }
        None => {
            // Rows of `stride` cells (`c` is below it): one read per row, where a
            // `step_by` iterator cost about 12 instructions (issue 17).
            for (v, row) in out.iter_mut().zip(eps.chunks_exact(stride)) {
                *v = value(*row.get(c)?);
            }
        }
    }
    Some(())
}

/// Scores of a candidate list, in its order ([`JRun::score_list`]).
struct Scores {
    /// Aggregate values over the list, by index.
    aggs: Rows<f64>,
    /// Each candidate's score.
    score: Rows<f64>,
    /// Each candidate's pick probability.
    probability: Rows<f64>,
}

/// How the candidates of an `on` block were scored ([`JRun::assign`]).
enum Scoring<'s> {
    /// Every candidate, by candidate index; the block's aggregates are evaluated
    /// afresh (they may read `score` or `probability`).
    All(&'s Scores),
    /// The ranking's aggregates, which the block's equal
    /// ([`StratCode::aggs_read_scored`] is false and every candidate was kept),
    /// and the score and probability of the candidate the block runs for.
    Known {
        aggs: &'s [f64],
        score: f64,
        probability: f64,
    },
}

/// A compiled ranking: the candidates the filters kept (`rows`, indices into the
/// candidates, ascending; none listed when all were), their scores in that order
/// (`list`), and the plan
/// order as positions in `rows` (`pos`: the pick first). The candidates' vectors
/// (row `i` for candidate `i`) stay in the caller's buffer.
struct RankedRows {
    /// Empty when every candidate was kept ([`RankedRows::row`]).
    rows: Rows<usize>,
    list: Scores,
    pos: Rows<u32>,
    /// How many candidates the filters kept (`pos` holds them all when `ordered`).
    kept: usize,
    /// `pos` is the whole plan order; else it holds only the pick.
    ordered: bool,
    /// Every candidate was kept, so `list` is by candidate index.
    scored_all: bool,
    /// `list.aggs` are the aggregates an `on pick` block would compute: every
    /// candidate kept and no aggregate reads `score` or `probability`
    /// ([`StratCode::aggs_read_scored`]).
    reuse_aggs: bool,
}

impl RankedRows {
    /// The candidate index of the kept candidate at position `k`; `None` past them.
    fn row(&self, k: usize) -> Option<usize> {
        if self.scored_all {
            (k < self.list.score.len()).then_some(k)
        } else {
            self.rows.get(k).copied()
        }
    }
}

/// Candidate endpoint refs for registry indices `ids` (unknown ones skipped), as
/// `on_outcome` does.
pub fn refs<'a>(set: &'a CheckedPolicySet, ids: &[usize]) -> Vec<EndpointRef<'a>> {
    set.registry.endpoints_at(ids)
}
