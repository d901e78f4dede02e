//! Strategy evaluation: candidates → filter → score → pick → order, and state
//! updates as a pure function of the old state and an outcome.

use std::collections::BTreeMap;

use crate::policy::ast::{Event, JoinMode, PickMode};
use crate::policy::checked::*;
use crate::policy::features::{EpStats, Outcome, RequestFeatures, StatsSource};
use crate::policy::registry::EndpointRef;

use smallvec::SmallVec;

use super::eval::{EpCtx, Evaluator, StateSlots, StratCtx};
use super::hash::SplitMix64;
use super::{StateUpdate, TraceEvent};

/// What a strategy produced.
pub struct Ranked<'a> {
    /// Candidates in plan order: the pick first, then by score.
    pub order: Vec<EpCtx<'a>>,
    /// Trace events (one per candidate).
    pub events: Vec<TraceEvent>,
}

/// Registry priority ascending, then weight descending, then config order.
pub fn builtin_order<'a>(cands: &mut [EndpointRef<'a>]) {
    let order = |a: &EndpointRef<'_>, b: &EndpointRef<'_>| {
        a.endpoint
            .priority
            .cmp(&b.endpoint.priority)
            .then(b.endpoint.weight.cmp(&a.endpoint.weight))
    };
    // A model's endpoints are usually listed in this order already (or all alike):
    // checking costs a few instructions per endpoint, the stable sort several times
    // that, and sorting sorted input changes nothing.
    if !cands.is_sorted_by(|a, b| order(a, b).is_le()) {
        cands.sort_by(order);
    }
}

/// The built-in `priority` strategy's draw: among the leading candidates of equal
/// (lowest) priority, moves one to the front with probability proportional to its
/// `weight` (seed 001 "Model Mapping": traffic split by weight within a priority).
/// Endpoints of weight 0 are never drawn; the rest keep [`builtin_order`].
pub fn weighted_first(cands: &mut [EndpointRef<'_>], rng: &mut SplitMix64) {
    let Some(first) = cands.first() else { return };
    let top = first.endpoint.priority;
    let group = cands
        .iter()
        .take_while(|c| c.endpoint.priority == top)
        .count();
    let total: u64 = cands[..group]
        .iter()
        .map(|c| u64::from(c.endpoint.weight))
        .sum();
    if group < 2 || total == 0 {
        return;
    }
    let mut draw = rng.next_u64() % total;
    for i in 0..group {
        let w = u64::from(cands[i].endpoint.weight);
        if draw < w {
            cands[..=i].rotate_right(1);
            return;
        }
        draw -= w;
    }
}

/// Builds endpoint contexts with initialized state slots: each candidate's
/// statistics for the request's task, and for a strategy with state, its slots
/// ([`state_values`]).
pub fn contexts<'a>(
    set: &'a CheckedPolicySet,
    s: Option<&'a CStrategy>,
    args: &'a [Const],
    req: &'a RequestFeatures,
    stats: &'a dyn StatsSource,
    cands: &[EndpointRef<'a>],
) -> Vec<EpCtx<'a>> {
    // A strategy that reads no statistics field cannot tell them from the
    // defaults: skip reading them.
    let read = s.is_none_or(|s| s.reads_stats);
    let states = match s {
        Some(s) => state_values(set, s, args, req, stats, cands),
        None => SmallVec::new(),
    };
    let n = s.map_or(0, |s| s.states.len());
    cands
        .iter()
        .enumerate()
        .map(|(k, r)| EpCtx {
            reg: *r,
            stats: if read {
                stats.stats(r.index, &r.endpoint.id, &req.task)
            } else {
                EpStats::UNKNOWN
            },
            state: states
                .get(k * n..(k + 1) * n)
                .map(StateSlots::from_slice)
                .unwrap_or_default(),
            score: 0.0,
            probability: 1.0,
        })
        .collect()
}

/// The state slot values of strategy `s` for `cands`: `s.states.len()` values per
/// candidate (by slot index), candidate after candidate, each as
/// [`state_column`] gives it. Empty for a strategy without state. The
/// interpreter's contexts take their state from here; the JIT's endpoint vectors
/// take each slot's column from [`state_column`].
pub fn state_values<'a>(
    set: &'a CheckedPolicySet,
    s: &'a CStrategy,
    args: &'a [Const],
    req: &'a RequestFeatures,
    stats: &dyn StatsSource,
    cands: &[EndpointRef<'a>],
) -> SmallVec<[f64; 16]> {
    let n = s.states.len();
    if n == 0 {
        return SmallVec::new();
    }
    let mut out: SmallVec<[f64; 16]> = smallvec::smallvec![0.0; cands.len() * n];
    let mut known: SmallVec<[Option<f64>; 16]> = SmallVec::new();
    for slot in 0..n {
        let join = state_column(set, s, args, req, stats, cands, slot, &mut known);
        for (v, k) in out.chunks_exact_mut(n).zip(&known) {
            if let Some(v) = v.get_mut(slot) {
                *v = k.unwrap_or(join);
            }
        }
    }
    out
}

/// State slot `slot` (by index) of strategy `s` for `cands`, as one column: the
/// values the source holds into `known` (`known[k]` for `cands[k]`, `None` where it
/// holds none), and the value a missing one takes, returned: the slot's initial
/// value, or for `join mean` the mean of the candidates that hold one (summed in
/// candidate order). A slot `s` does not have gives no values and 0.0. One column
/// at a time, so a ranking reads its state slots straight into its candidates'
/// vectors, without a table of every slot per candidate (issue 17).
#[allow(clippy::too_many_arguments)]
pub fn state_column<'a, A: smallvec::Array<Item = Option<f64>>>(
    set: &'a CheckedPolicySet,
    s: &'a CStrategy,
    args: &'a [Const],
    req: &'a RequestFeatures,
    stats: &dyn StatsSource,
    cands: &[EndpointRef<'a>],
    slot: usize,
    known: &mut SmallVec<A>,
) -> f64 {
    // Made anew, not resized: `SmallVec::resize` pushes one item at a time through
    // an iterator (about 6 instructions per endpoint, issue 17).
    *known = SmallVec::from_elem(None, cands.len());
    let Some(st) = s.states.get(slot) else {
        return 0.0;
    };
    stats.states(cands, &s.name, &[st.name.as_str()], known);
    let mut strat = StratCtx {
        strategy: s,
        args,
        cands: &[],
        aggs: Vec::new(),
    };
    let mut ev = Evaluator::in_strategy(set, req, None, &mut strat);
    let init = ev.number(&st.init);
    if st.join != JoinMode::Mean {
        return init;
    }
    let count = known.iter().flatten().count();
    if count > 0 {
        known.iter().flatten().copied().sum::<f64>() / count as f64
    } else {
        init
    }
}

/// The built-in `priority` strategy over `cands`, in place: [`builtin_order`], then
/// (with `rng`) [`weighted_first`]. It reads no statistics.
pub fn builtin(cands: &mut [EndpointRef<'_>], rng: Option<&mut SplitMix64>) {
    builtin_order(cands);
    if let Some(rng) = rng {
        weighted_first(cands, rng);
    }
}

/// The trace events of the built-in strategy's order `cands` (score: registry
/// priority).
pub fn builtin_events(cands: &[EndpointRef<'_>]) -> Vec<TraceEvent> {
    cands
        .iter()
        .map(|c| TraceEvent::Candidate {
            strategy: super::super::check::BUILTIN_PRIORITY.to_string(),
            endpoint: c.endpoint.id.clone(),
            score: f64::from(c.endpoint.priority),
            probability: None,
            excluded: None,
        })
        .collect()
}

/// Runs strategy `s` over `cands`.
#[allow(clippy::too_many_arguments)]
pub fn rank<'a>(
    set: &'a CheckedPolicySet,
    s: &'a CStrategy,
    args: &'a [Const],
    req: &'a RequestFeatures,
    stats: &'a dyn StatsSource,
    cands: &[EndpointRef<'a>],
    rng: Option<&mut SplitMix64>,
    explain: bool,
) -> Ranked<'a> {
    let name = s.name.clone();
    let all = contexts(set, Some(s), args, req, stats, cands);
    let mut events = Vec::new();
    // Filters see every candidate; aggregates range over the survivors.
    let mut kept = Vec::new();
    let mut preferred = Vec::new();
    for c in all {
        let mut strat = StratCtx {
            strategy: s,
            args,
            cands: &[],
            aggs: Vec::new(),
        };
        let mut ev = Evaluator::in_strategy(set, req, Some(&c), &mut strat);
        if !s.require.iter().all(|r| ev.truth(r)) {
            if explain {
                events.push(excluded(&name, &c, "fails `require`"));
            }
            continue;
        }
        let pref = s.prefer.iter().all(|p| ev.truth(p));
        preferred.push(pref);
        kept.push(c);
    }
    if preferred.iter().any(|p| *p) && preferred.iter().any(|p| !*p) {
        let mut i = 0;
        kept.retain(|c| {
            let keep = preferred[i];
            i += 1;
            if !keep && explain {
                events.push(excluded(&name, c, "fails `prefer`"));
            }
            keep
        });
    }
    score_all(set, s, args, req, &mut kept);
    let chosen = choose(s.pick, &kept, rng);
    let mut order: Vec<EpCtx<'a>> = Vec::with_capacity(kept.len());
    let mut rest: Vec<EpCtx<'a>> = Vec::new();
    for (i, c) in kept.into_iter().enumerate() {
        if Some(i) == chosen {
            order.push(c);
        } else {
            rest.push(c);
        }
    }
    order_rest(s.pick, &mut rest);
    order.extend(rest);
    if explain {
        for c in &order {
            events.push(TraceEvent::Candidate {
                strategy: name.clone(),
                endpoint: c.reg.endpoint.id.clone(),
                score: c.score,
                probability: matches!(s.pick, PickMode::Weighted | PickMode::Sample)
                    .then_some(c.probability),
                excluded: None,
            });
        }
    }
    Ranked { order, events }
}

fn excluded(strategy: &str, c: &EpCtx<'_>, why: &str) -> TraceEvent {
    TraceEvent::Candidate {
        strategy: strategy.to_string(),
        endpoint: c.reg.endpoint.id.clone(),
        score: f64::NAN,
        probability: None,
        excluded: Some(why.to_string()),
    }
}

/// Fills `score` and `probability` of every candidate.
fn score_all<'a>(
    set: &'a CheckedPolicySet,
    s: &'a CStrategy,
    args: &'a [Const],
    req: &'a RequestFeatures,
    cands: &mut [EpCtx<'a>],
) {
    let snapshot: Vec<EpCtx<'a>> = cands.to_vec();
    let mut strat = StratCtx {
        strategy: s,
        args,
        cands: &snapshot,
        aggs: vec![None; s.aggregates as usize],
    };
    let scores: Vec<f64> = snapshot
        .iter()
        .map(|c| {
            let mut ev = Evaluator::in_strategy(set, req, Some(c), &mut strat);
            ev.number(&s.score)
        })
        .collect();
    let probs = probabilities(s.pick, &scores);
    for (i, c) in cands.iter_mut().enumerate() {
        c.score = scores[i];
        c.probability = probs[i];
    }
}

/// Pick probabilities from scores (shared with the JIT): for `weighted`/`sample`,
/// score / Σ scores with non-positive and non-finite scores counting 0 (all zero:
/// uniform); 1 for `min`/`max`.
pub fn probabilities(pick: PickMode, scores: &[f64]) -> Vec<f64> {
    let mut out = vec![0.0; scores.len()];
    probabilities_into(pick, scores, &mut out);
    out
}

/// [`probabilities`] written into `out` (as long as `scores`).
pub fn probabilities_into(pick: PickMode, scores: &[f64], out: &mut [f64]) {
    if !matches!(pick, PickMode::Weighted | PickMode::Sample) {
        // Min and max picks: every candidate 1, with no pass summing the weights.
        let n = scores.len().min(out.len());
        out[..n].fill(1.0);
        return;
    }
    let weight = |x: f64| if x.is_finite() && x > 0.0 { x } else { 0.0 };
    let total: f64 = scores.iter().map(|&x| weight(x)).sum();
    let n = scores.len().max(1) as f64;
    for (p, &x) in out.iter_mut().zip(scores) {
        *p = match pick {
            PickMode::Weighted | PickMode::Sample if total > 0.0 && total.is_finite() => {
                weight(x) / total
            }
            PickMode::Weighted | PickMode::Sample => 1.0 / n,
            _ => 1.0,
        };
    }
}

/// Orders the candidates after the pick (shared with the JIT). Min/max: by score, NaN
/// scores last; weighted/sample: by probability, highest first. Equal keys keep
/// candidate order, and 0.0 equals -0.0, as in `choose`.
///
/// Not `f64::total_cmp`: it orders NaNs by their sign bit, which IEEE 754 leaves
/// unspecified and which the engines need not agree on (cranelift rewrites
/// `-a * -b` to `a * b`, so a NaN product can come out with the other sign). Under
/// `pick min` a negative NaN then sorted before every number, against "NaN scores
/// lose".
pub fn order_rest(mode: PickMode, rest: &mut [EpCtx<'_>]) {
    order_rest_by(mode, rest, |c| (c.score, c.probability));
}

/// [`order_rest`] over any items, given each one's (score, probability).
pub fn order_rest_by<T>(mode: PickMode, rest: &mut [T], key: impl Fn(&T) -> (f64, f64)) {
    use std::cmp::Ordering;
    fn nan_last(a: f64, b: f64) -> Ordering {
        match (a.is_nan(), b.is_nan()) {
            (true, true) => Ordering::Equal,
            (true, false) => Ordering::Greater,
            (false, true) => Ordering::Less,
            (false, false) => a.partial_cmp(&b).unwrap_or(Ordering::Equal),
        }
    }
    match mode {
        PickMode::Min => rest.sort_by(|a, b| nan_last(key(a).0, key(b).0)),
        PickMode::Max => rest.sort_by(|a, b| nan_last(-key(a).0, -key(b).0)),
        _ => rest.sort_by(|a, b| nan_last(-key(a).1, -key(b).1)),
    }
}

/// Appends to `out` the positions `0..n` other than `skip`, in the order
/// [`order_rest_by`] gives items whose keys are `key(position)`: the JIT's plan
/// order after its pick. Each
/// key is read (once; again past `FEW_KEYS` distinct keys) and mapped to a `u64`
/// that orders as `order_rest_by` compares
/// (NaN last, 0.0 equal to -0.0), and positions are put in (key, position) order,
/// which keeps equal keys in their order as the stable sort does: a counting sort
/// when there are at most `FEW_KEYS` distinct keys, else an integer sort.
/// Ordering the 127 fallbacks of a model's 128 endpoints through a float
/// comparator was the largest single cost of a decision (issue 17).
pub fn rest_positions(
    mode: PickMode,
    n: usize,
    skip: Option<usize>,
    key: impl Fn(usize) -> (f64, f64),
    out: &mut impl PositionList,
) {
    if n < 2 {
        out.extend((0..n).filter(|&k| Some(k) != skip).map(|k| k as u32));
        return;
    }
    // One loop per mode, so the mode is not matched again for every key.
    match mode {
        PickMode::Min => positions_by_key(n, skip, |k| key(k).0, out),
        PickMode::Max => positions_by_key(n, skip, |k| -key(k).0, out),
        PickMode::Weighted | PickMode::Sample => {
            positions_by_key(n, skip, |k| -key(k).1, out);
        }
    }
}

/// A list that [`rest_positions`] and [`plan_positions`] append positions to: a
/// `Vec` or a `SmallVec`. Positions are written in place where a counting sort puts
/// them, so no list of them is built first and copied over.
pub trait PositionList: Extend<u32> {
    /// Appends `count` zeros and returns them, to be overwritten.
    fn grow(&mut self, count: usize) -> &mut [u32];
}

impl PositionList for Vec<u32> {
    fn grow(&mut self, count: usize) -> &mut [u32] {
        let at = self.len();
        self.resize(at + count, 0);
        &mut self[at..]
    }
}

impl<A: smallvec::Array<Item = u32>> PositionList for SmallVec<A> {
    fn grow(&mut self, count: usize) -> &mut [u32] {
        let at = self.len();
        self.resize(at + count, 0);
        &mut self[at..]
    }
}

/// [`rest_positions`] once each position's key is one float, ascending.
///
/// Rankings usually score their candidates with a few distinct values (weighted
/// round-robin: its counts, which differ by one or, while requests run
/// concurrently, a few): then a counting sort by each key's place among them keeps
/// positions in order within a key, the stable order, at a few instructions per
/// item where a comparison sort of 127 items cost about 10,000 (issue 17). One pass
/// reads each key, finds its place among the distinct keys found so far (in the
/// order they were found), counts it and notes whether the keys already ascend;
/// a second writes each position where its key's positions go. The ninth distinct
/// key ends the first pass: the keys are read again for [`sort_many_keys`]. (Keys,
/// places, counts and positions in separate passes cost about 88 instructions per
/// item at 128 endpoints, `benches/load/endpoints.sh` with `CALLGRIND=1`.)
fn positions_by_key(
    n: usize,
    skip: Option<usize>,
    pick_key: impl Fn(usize) -> f64,
    out: &mut impl PositionList,
) {
    // Each kept position's place among the distinct keys; on the stack up to 256.
    // Written in place (a push checks where the list lives and its capacity).
    let skipped = usize::from(skip.is_some_and(|s| s < n));
    let mut ranks: SmallVec<[u8; 256]> = smallvec::smallvec![0; n - skipped];
    let (mut distinct, mut found) = ([0u64; FEW_KEYS], 0);
    let mut counts = [0usize; FEW_KEYS];
    // Whether the keys already ascend, found while they are read (positions do).
    let (mut ascending, mut last) = (true, 0);
    let mut few = true;
    let kept = (0..n).filter(|&k| Some(k) != skip);
    for (slot, k) in ranks.iter_mut().zip(kept) {
        let key = ascending_key(pick_key(k));
        ascending &= key >= last;
        last = key;
        let mut r = 0;
        while r < found && distinct[r] != key {
            r += 1;
        }
        if r == found {
            if found == FEW_KEYS {
                few = false;
                break;
            }
            distinct[found] = key;
            found += 1;
        }
        *slot = r as u8;
        counts[r] += 1;
    }
    if !few {
        sort_many_keys(n, skip, &pick_key, out);
        return;
    }
    if ascending {
        out.extend((0..n).filter(|&k| Some(k) != skip).map(|k| k as u32));
        return;
    }
    // Where each key's positions start in the output, by the order found.
    let mut by_key: [usize; FEW_KEYS] = std::array::from_fn(|i| i);
    by_key[..found].sort_unstable_by_key(|&r| distinct[r]);
    let (mut starts, mut at) = ([0usize; FEW_KEYS], 0);
    for &r in &by_key[..found] {
        starts[r] = at;
        at += counts[r];
    }
    let placed = out.grow(ranks.len());
    // The i-th kept position is i, or i + 1 from the skipped one on.
    let from = skip.unwrap_or(usize::MAX);
    for (i, &r) in ranks.iter().enumerate() {
        let k = if i < from { i } else { i + 1 };
        let start = &mut starts[usize::from(r) % FEW_KEYS];
        if let Some(p) = placed.get_mut(*start) {
            *p = k as u32;
        }
        *start += 1;
    }
}

/// The positions `0..n` other than `skip` in (key, position) order, appended to
/// `out`, each position's key `ascending_key(pick_key(position))`: for many distinct
/// keys.
///
/// Each item is one `u64`: the key's high bits with the position in the low `b`
/// bits that positions below `n` need (7 for 128 endpoints), so the sort compares
/// single integers (least_latency's 127 fallbacks: about 12,700 instructions as
/// 128-bit (key, position) pairs). Items whose keys share the high bits are in
/// position order after it; such a run is sorted again by (whole key, position),
/// the whole keys read again, unless all its keys are equal (equal keys, such as
/// endpoints never measured, are the usual reason for a run, and are already
/// right). Keys that already ascend (positions do) need no sort.
fn sort_many_keys(
    n: usize,
    skip: Option<usize>,
    pick_key: impl Fn(usize) -> f64,
    out: &mut impl Extend<u32>,
) {
    let kept = (0..n).filter(|&k| Some(k) != skip);
    let bits = (usize::BITS - n.saturating_sub(1).leading_zeros()).max(1);
    if bits > 32 {
        // Positions are u32, so this is never taken: (key, position) as 128 bits.
        let mut packed: Vec<u128> = kept
            .map(|k| u128::from(ascending_key(pick_key(k))) << 32 | k as u128)
            .collect();
        packed.sort_unstable();
        out.extend(packed.iter().map(|&x| x as u32));
        return;
    }
    let low = (1u64 << bits) - 1;
    // Written in place (a push checks the capacity per item).
    let skipped = usize::from(skip.is_some_and(|s| s < n));
    let mut packed: Vec<u64> = vec![0; n - skipped];
    let (mut ascending, mut last) = (true, 0);
    for (slot, k) in packed.iter_mut().zip(kept) {
        let key = ascending_key(pick_key(k));
        ascending &= key >= last;
        last = key;
        *slot = (key & !low) | k as u64;
    }
    if ascending {
        out.extend(packed.iter().map(|&x| (x & low) as u32));
        return;
    }
    packed.sort_unstable();
    // Runs are rare: one cheap pass says whether there is any.
    if !packed.windows(2).any(|w| (w[0] ^ w[1]) & !low == 0) {
        out.extend(packed.iter().map(|&x| (x & low) as u32));
        return;
    }
    let whole = |x: u64| ascending_key(pick_key((x & low) as usize));
    let mut i = 0;
    while i < packed.len() {
        let high = packed[i] & !low;
        let mut j = i + 1;
        while j < packed.len() && packed[j] & !low == high {
            j += 1;
        }
        if j - i > 1 {
            let run = &mut packed[i..j];
            let first = whole(run[0]);
            if run.iter().any(|&x| whole(x) != first) {
                run.sort_unstable_by_key(|&x| (whole(x), x & low));
            }
        }
        i = j;
    }
    out.extend(packed.iter().map(|&x| (x & low) as u32));
}

/// The whole plan order of `n` candidates as positions, appended to `out`: the
/// pick of [`choose_by`] first, then the rest as [`rest_positions`] orders them.
/// For `pick min` and `pick max` that is one stable sort of every candidate by its
/// key: the first of the minimal keys (NaN last, 0.0 equal to -0.0) is exactly
/// the candidate `choose_by` picks (the first best score, or the first candidate
/// when every score is NaN), so the separate pass that found it is skipped (issue
/// 17: a pass over a model's 128 endpoints per decision). Weighted and sampled
/// picks draw from `rng`, then order the rest.
pub fn plan_positions(
    mode: PickMode,
    n: usize,
    key: impl Fn(usize) -> (f64, f64),
    rng: Option<&mut SplitMix64>,
    out: &mut impl PositionList,
) {
    match mode {
        PickMode::Min | PickMode::Max => rest_positions(mode, n, None, key, out),
        PickMode::Weighted | PickMode::Sample => {
            if let Some(c) = choose_by(mode, n, &key, rng) {
                out.extend([c as u32]);
                rest_positions(mode, n, Some(c), key, out);
            }
        }
    }
}

/// The fallbacks of a ranked plan, kept unordered until a failover needs them: a
/// plan whose ranking has no fallback chain is its pick, then the other kept
/// candidates in [`rest_positions`] order. The gateway's first attempt needs only the
/// pick, so [`crate::policy::CompiledPolicySet::decide_lazy`] leaves the order of the
/// others to [`PlanRest::ordered`], run when the first endpoint fails (issue 17:
/// ordering a model's 128 endpoints was about 7,000 instructions of every
/// decision). The result is the same plan: each candidate keeps its key and its
/// place among the others, which breaks ties, and [`PlanRest::retain`] keeps both.
#[derive(Debug, Clone, PartialEq)]
pub struct PlanRest {
    /// How the ranking picked: scores order `pick min` and `pick max` plans,
    /// probabilities the weighted and sampled ones.
    mode: PickMode,
    /// Registry index of each candidate other than the pick, in candidate order.
    index: Vec<usize>,
    /// Each one's key, as [`rest_positions`] reads it: its score for `pick min` and
    /// `pick max`, else its probability.
    key: Vec<f64>,
}

impl PlanRest {
    /// The candidates other than the pick, `(registry index, key)` in candidate
    /// order, of a ranking with pick `mode`.
    pub fn new(mode: PickMode, index: Vec<usize>, key: Vec<f64>) -> PlanRest {
        debug_assert_eq!(index.len(), key.len());
        PlanRest { mode, index, key }
    }

    /// Fallbacks left.
    pub fn len(&self) -> usize {
        self.index.len()
    }

    /// No fallback left.
    pub fn is_empty(&self) -> bool {
        self.index.is_empty()
    }

    /// The fallbacks' registry indices in candidate order (not plan order).
    pub fn indices(&self) -> impl Iterator<Item = usize> + '_ {
        self.index.iter().copied()
    }

    /// Keeps the fallbacks whose registry index passes `keep`; the plan order of
    /// those kept is unchanged.
    pub fn retain(&mut self, mut keep: impl FnMut(usize) -> bool) {
        // Usually every one is kept: found by reading alone.
        let Some(mut at) = self.index.iter().position(|&i| !keep(i)) else {
            return;
        };
        for i in at + 1..self.index.len() {
            if keep(self.index[i]) {
                self.index[at] = self.index[i];
                self.key[at] = self.key[i];
                at += 1;
            }
        }
        self.index.truncate(at);
        self.key.truncate(at);
    }

    /// The fallbacks' registry indices in plan order, appended to `plan`.
    pub fn order_into(&self, plan: &mut Vec<usize>) {
        let key = &self.key[..self.index.len().min(self.key.len())];
        let mut pos: Vec<u32> = Vec::with_capacity(key.len());
        rest_positions(self.mode, key.len(), None, |k| (key[k], key[k]), &mut pos);
        plan.extend(pos.iter().filter_map(|&k| self.index.get(k as usize)));
    }

    /// The fallbacks' registry indices in plan order.
    pub fn ordered(&self) -> Vec<usize> {
        let mut plan = Vec::with_capacity(self.len());
        self.order_into(&mut plan);
        plan
    }

    /// The whole plan in order: `plan`, then the fallbacks `rest` (if any) ordered
    /// after it; for a plan's readers (traces, test digests), not its dispatch.
    pub fn whole(plan: &[usize], rest: Option<&PlanRest>) -> Vec<usize> {
        let mut whole = Vec::with_capacity(plan.len() + rest.map_or(0, PlanRest::len));
        whole.extend_from_slice(plan);
        if let Some(r) = rest {
            r.order_into(&mut whole);
        }
        whole
    }
}

/// At most this many distinct keys are ordered without a comparison sort
/// ([`rest_positions`]).
const FEW_KEYS: usize = 8;

/// A `u64` that orders as [`order_rest_by`] orders floats ascending: numbers by
/// value with -0.0 equal to 0.0, every NaN (whatever its sign) after every number
/// and equal to each other.
fn ascending_key(x: f64) -> u64 {
    if x.is_nan() {
        return u64::MAX;
    }
    // -0.0 == 0.0, so this maps both zeros to +0.0.
    let bits = if x == 0.0 { 0 } else { x.to_bits() };
    if bits >> 63 == 1 {
        !bits
    } else {
        bits | 1 << 63
    }
}

/// The index of the pick. Min/max: NaN scores lose; ties go to the earlier candidate.
/// Weighted/sample: one draw `u` in [0, 1); the first candidate whose cumulative
/// probability exceeds `u`. `None` only without candidates. (Public for the JIT.)
pub fn choose(mode: PickMode, cands: &[EpCtx<'_>], rng: Option<&mut SplitMix64>) -> Option<usize> {
    choose_by(
        mode,
        cands.len(),
        |i| (cands[i].score, cands[i].probability),
        rng,
    )
}

/// [`choose`] over `n` candidates, given candidate `i`'s (score, probability).
pub fn choose_by(
    mode: PickMode,
    n: usize,
    key: impl Fn(usize) -> (f64, f64),
    rng: Option<&mut SplitMix64>,
) -> Option<usize> {
    if n == 0 {
        return None;
    }
    match mode {
        PickMode::Min | PickMode::Max => {
            // Max is min of the negated scores. From the first number on, a strict
            // `<` keeps the earlier of equal scores and never takes a NaN (it
            // compares false); a loop per decision over a model's endpoints, so
            // it matches no mode and no `Option` per candidate (issue 17).
            let sign = if mode == PickMode::Min { 1.0 } else { -1.0 };
            let at = |i: usize| sign * key(i).0;
            let Some(first) = (0..n).find(|&i| !at(i).is_nan()) else {
                return Some(0);
            };
            let (mut best, mut pick) = (at(first), first);
            for i in first + 1..n {
                let x = at(i);
                if x < best {
                    best = x;
                    pick = i;
                }
            }
            Some(pick)
        }
        PickMode::Weighted | PickMode::Sample => {
            let u = rng.map(|r| r.unit()).unwrap_or(0.0);
            let mut acc = 0.0;
            for i in 0..n {
                acc += key(i).1;
                if u < acc {
                    return Some(i);
                }
            }
            Some(n - 1)
        }
    }
}

/// Evaluates the `on EVENT` block of `s` for `endpoint` among `cands`; all right-hand
/// sides read the old state. `None` when the strategy has no such block or the
/// endpoint is not a candidate.
#[allow(clippy::too_many_arguments)]
pub fn update<'a>(
    set: &'a CheckedPolicySet,
    (si, s): (u32, &'a CStrategy),
    args: &'a [Const],
    req: &'a RequestFeatures,
    stats: &'a dyn StatsSource,
    cands: &[EndpointRef<'a>],
    endpoint: &str,
    event: Event,
    outcome: Option<&'a Outcome>,
) -> Option<StateUpdate> {
    let assigns = &s.updates.iter().find(|(e, _)| *e == event)?.1;
    let mut ctxs = contexts(set, Some(s), args, req, stats, cands);
    score_all(set, s, args, req, &mut ctxs);
    let me = ctxs.iter().position(|c| c.reg.endpoint.id == endpoint)?;
    let mut strat = StratCtx {
        strategy: s,
        args,
        cands: &ctxs,
        aggs: vec![None; s.aggregates as usize],
    };
    let mut ev = Evaluator {
        outcome,
        ..Evaluator::in_strategy(set, req, Some(&ctxs[me]), &mut strat)
    };
    let mut slots = BTreeMap::new();
    for (slot, value) in assigns {
        let v = ev.number(value);
        if let Some(name) = set.names.slot(si, *slot) {
            slots.insert(name, v);
        }
    }
    let me = &ctxs[me].reg;
    Some(StateUpdate {
        endpoint: set.names.endpoints().get(me.index)?.id.clone(),
        index: me.index,
        strategy: set.names.strategy(Some(si)),
        event,
        slots,
    })
}

#[cfg(test)]
mod weighted_first_tests {
    use super::*;
    use crate::policy::registry::{Registry, RegistryEndpoint, RegistryModel};

    fn ep(id: &str, priority: u32, weight: u32) -> RegistryEndpoint {
        RegistryEndpoint {
            id: id.into(),
            provider: "p".into(),
            model: id.into(),
            priority,
            weight,
            input_per_mtok: 0.0,
            output_per_mtok: 0.0,
            context_window: None,
        }
    }

    #[test]
    fn priority_first_then_weighted_draw() {
        let reg = Registry::new(vec![RegistryModel {
            name: "m".into(),
            endpoints: vec![
                ep("x", 2, 1),
                ep("heavy", 1, 3),
                ep("light", 1, 1),
                ep("off", 1, 0),
            ],
        }]);
        let mut rng = SplitMix64::new(7);
        let mut heavy_first = 0;
        for _ in 0..4000 {
            let mut cands: Vec<EndpointRef<'_>> = reg.endpoints().collect();
            builtin_order(&mut cands);
            weighted_first(&mut cands, &mut rng);
            let ids: Vec<&str> = cands.iter().map(|c| c.endpoint.id.as_str()).collect();
            assert_ne!(ids[0], "off", "weight 0 is never drawn");
            assert_eq!(ids[3], "x", "lower priority comes last");
            if ids[0] == "heavy" {
                heavy_first += 1;
            }
        }
        // Expected 3000 of 4000; 6 sigma is about 165.
        assert!((2835..=3165).contains(&heavy_first), "{heavy_first}");
    }
}

#[cfg(test)]
mod order_tests {
    use super::*;

    /// Scores drawn from a small pool with every special case: duplicates, both
    /// zeros, infinities, NaNs of both signs.
    fn draw(rng: &mut SplitMix64) -> f64 {
        const POOL: [f64; 12] = [
            0.0,
            -0.0,
            1.0,
            -1.0,
            2.5,
            -2.5,
            1e-300,
            -1e-300,
            f64::INFINITY,
            f64::NEG_INFINITY,
            f64::NAN,
            -f64::NAN,
        ];
        POOL[(rng.next_u64() % POOL.len() as u64) as usize]
    }

    #[test]
    fn plan_positions_equal_the_pick_then_the_ordered_rest_for_every_pick_mode() {
        let mut rng = SplitMix64::new(23);
        for round in 0..3000 {
            let len = (round % 40) as usize;
            let keys: Vec<(f64, f64)> = (0..len)
                .map(|_| (draw(&mut rng), draw(&mut rng).abs()))
                .collect();
            for mode in [
                PickMode::Min,
                PickMode::Max,
                PickMode::Weighted,
                PickMode::Sample,
            ] {
                // The same draw for both: the pick, then the rest in order.
                let (mut a, mut b) = (SplitMix64::new(round), SplitMix64::new(round));
                let mut expected: Vec<u32> = Vec::new();
                if let Some(c) = choose_by(mode, len, |i| keys[i], Some(&mut a)) {
                    expected.push(c as u32);
                    rest_positions(mode, len, Some(c), |i| keys[i], &mut expected);
                }
                let mut fused: Vec<u32> = Vec::new();
                plan_positions(mode, len, |i| keys[i], Some(&mut b), &mut fused);
                assert_eq!(fused, expected, "{mode:?} {keys:?}");
            }
        }
    }

    /// Dropping fallbacks of an unordered rest (the gateway's provider and context
    /// checks) and then ordering it gives the ordered rest with those dropped.
    #[test]
    fn a_plan_rest_filtered_then_ordered_is_the_ordered_rest_filtered() {
        let mut rng = SplitMix64::new(41);
        for round in 0..500u64 {
            let len = (round % 30) as usize;
            // Few distinct keys half the time (the counting sort), else many.
            let keys: Vec<f64> = (0..len)
                .map(|_| match round % 2 {
                    0 => (rng.next_u64() % 3) as f64,
                    _ => draw(&mut rng),
                })
                .collect();
            let index: Vec<usize> = (0..len).map(|k| 100 + 7 * k).collect();
            for mode in [PickMode::Min, PickMode::Max, PickMode::Weighted] {
                let rest = PlanRest::new(mode, index.clone(), keys.clone());
                let drop = |i: usize| (i / 7 + round as usize).is_multiple_of(3);
                let mut expected = rest.ordered();
                expected.retain(|&i| !drop(i));
                let mut filtered = rest.clone();
                filtered.retain(|i| !drop(i));
                assert_eq!(filtered.ordered(), expected, "{mode:?} {keys:?}");
                assert_eq!(filtered.len(), expected.len());
                // The order is the stable order of the keys.
                let mut stable: Vec<usize> = (0..len).collect();
                order_rest_by(mode, &mut stable, |&k| (keys[k], keys[k]));
                let stable: Vec<usize> = stable.iter().map(|&k| index[k]).collect();
                assert_eq!(rest.ordered(), stable, "{mode:?} {keys:?}");
            }
        }
    }

    /// Many distinct keys that differ only in their lowest bits (where the packed
    /// sort keeps the position) and repeat: the order is still the stable float
    /// order, for lists long enough to need 1 to 9 position bits.
    #[test]
    fn rest_positions_of_keys_differing_in_their_last_bits_keep_the_stable_order() {
        let mut rng = SplitMix64::new(5);
        for round in 0..2000u64 {
            let len = 9 + (rng.next_u64() % 300) as usize;
            let base = [1.0f64, -3.5, 250.0, 1e-9][(round % 4) as usize];
            let keys: Vec<(f64, f64)> = (0..len)
                .map(|_| {
                    // One of 40 neighbours of `base`, a few ulps apart, or NaN.
                    let ulps = rng.next_u64() % 40;
                    let x = if ulps == 39 {
                        f64::NAN
                    } else {
                        f64::from_bits(base.to_bits() + ulps)
                    };
                    (x, x.abs())
                })
                .collect();
            for mode in [PickMode::Min, PickMode::Max, PickMode::Weighted] {
                let skip = (round % 3 != 0).then(|| (round as usize * 11) % len);
                let mut stable: Vec<usize> = (0..len).filter(|&i| Some(i) != skip).collect();
                order_rest_by(mode, &mut stable, |&i| keys[i]);
                let mut positions: Vec<u32> = Vec::new();
                rest_positions(mode, len, skip, |i| keys[i], &mut positions);
                let got: Vec<usize> = positions.iter().map(|&k| k as usize).collect();
                assert_eq!(got, stable, "{mode:?} len {len} skip {skip:?}");
            }
        }
    }

    /// Long lists (past the 256 places kept on the stack) of one to nine distinct
    /// keys, the ninth (which ends the counting sort) first seen anywhere: the
    /// order is still the stable float order, with and without a skipped pick.
    #[test]
    fn rest_positions_of_long_lists_with_few_keys_keep_the_stable_order() {
        let mut rng = SplitMix64::new(29);
        for round in 0..600u64 {
            let len = 2 + (rng.next_u64() % 600) as usize;
            let kinds = 1 + (round % 9);
            let keys: Vec<(f64, f64)> = (0..len)
                .map(|_| {
                    let x = (rng.next_u64() % kinds) as f64 * 0.25 - 1.0;
                    (x, x.abs())
                })
                .collect();
            for mode in [PickMode::Min, PickMode::Max, PickMode::Weighted] {
                let skip = (round % 2 == 0).then(|| (round as usize * 13) % len);
                let mut stable: Vec<usize> = (0..len).filter(|&i| Some(i) != skip).collect();
                order_rest_by(mode, &mut stable, |&i| keys[i]);
                let mut positions: SmallVec<[u32; 8]> = SmallVec::new();
                rest_positions(mode, len, skip, |i| keys[i], &mut positions);
                let got: Vec<usize> = positions.iter().map(|&k| k as usize).collect();
                assert_eq!(
                    got, stable,
                    "{mode:?} len {len} skip {skip:?} kinds {kinds}"
                );
            }
        }
    }

    #[test]
    fn rest_positions_equal_the_stable_float_order_for_every_pick_mode() {
        let mut rng = SplitMix64::new(17);
        for round in 0..3000 {
            let len = (round % 40) as usize;
            let keys: Vec<(f64, f64)> =
                (0..len).map(|_| (draw(&mut rng), draw(&mut rng))).collect();
            for mode in [
                PickMode::Min,
                PickMode::Max,
                PickMode::Weighted,
                PickMode::Sample,
            ] {
                let skip = (len > 0).then(|| (round as usize * 7) % len);
                let mut stable: Vec<usize> = (0..len).filter(|&i| Some(i) != skip).collect();
                order_rest_by(mode, &mut stable, |&i| keys[i]);
                let mut positions: Vec<u32> = Vec::new();
                rest_positions(mode, len, skip, |i| keys[i], &mut positions);
                let keyed: Vec<usize> = positions.iter().map(|&k| k as usize).collect();
                assert_eq!(keyed, stable, "{mode:?} {keys:?}");
            }
        }
    }
}
