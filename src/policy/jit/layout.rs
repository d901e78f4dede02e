//! The flat feature vectors compiled code reads, and how the host fills them.
//!
//! Three vectors of `u64` cells, laid out per compiled set as lowering discovers what
//! the policies read (each distinct item gets one cell, deduplicated):
//!
//! | vector | cells | filled |
//! |--------|-------|--------|
//! | request ([`ReqSlot`]) | numeric fields, string ids, `has()` bits, `scope()` bits, string atoms (prefix/suffix/contains/glob/regex of a request string against a constant), rule-index masks ([`super::index`]) | once per decision |
//! | endpoint ([`EpSlot`]) | numeric fields, string ids, string atoms, state slots, score, probability | once per candidate |
//! | aux ([`AuxSlot`]) | current priority, `count()`, outcome fields, aggregate values | per call |
//!
//! Encoding: integers as `i64` bits, floats as `f64` bits, booleans 0/1, strings as
//! ids ([`Strings`]), priorities 0 (`low`) ..= 3 (`critical`). Strings never reach
//! compiled code; regexes and globs run here, on the host, before the call.

use std::collections::HashMap;

use crate::policy::ast::PriorityLevel;
use crate::policy::checked::*;
use crate::policy::features::{EpStats, Outcome, RequestFeatures};
use crate::policy::interp::eval::{context_window, glob, EpCtx};
use crate::policy::registry::EndpointRef;

/// A string test as a hashable key (`StrTest` itself is not `Hash`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TestKey(u8, u32);

impl TestKey {
    /// The key of `t`.
    pub fn of(t: StrTest) -> TestKey {
        match t {
            StrTest::Prefix => TestKey(0, 0),
            StrTest::Suffix => TestKey(1, 0),
            StrTest::Contains => TestKey(2, 0),
            StrTest::Glob => TestKey(3, 0),
            StrTest::Regex(i) => TestKey(4, i),
        }
    }

    /// The test back.
    pub fn test(self) -> StrTest {
        match self.0 {
            0 => StrTest::Prefix,
            1 => StrTest::Suffix,
            2 => StrTest::Contains,
            3 => StrTest::Glob,
            _ => StrTest::Regex(self.1),
        }
    }
}

/// Runs string test `t` with pattern `pat` on `s`, exactly as the interpreter does
/// (an unknown regex index is false).
pub fn run_test(set: &CheckedPolicySet, t: StrTest, s: &str, pat: &str) -> bool {
    match t {
        StrTest::Prefix => s.starts_with(pat),
        StrTest::Suffix => s.ends_with(pat),
        StrTest::Contains => s.contains(pat),
        StrTest::Glob => glob(s, pat),
        StrTest::Regex(i) => set.regexes.get(i as usize).is_some_and(|re| re.is_match(s)),
    }
}

/// One cell of the request vector.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ReqSlot {
    /// The field's value (strings as ids; absent optionals as 0, 0.0 or "").
    Field(ReqField),
    /// Whether an optional field is present.
    Has(ReqField),
    /// A string test of a request string field against a constant pattern.
    Atom(TestKey, ReqField, Sym),
    /// Word `.1` of route `.0`'s candidate mask ([`super::index::RouteIndex`] fills
    /// it after the other cells).
    Mask(u32, u32),
}

/// One cell of the endpoint vector.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EpSlot {
    /// The field's value (strings as ids).
    Field(EpField),
    /// A string test of an endpoint string field against a constant pattern.
    Atom(TestKey, EpField, Sym),
    /// State slot `i` of the strategy in scope.
    State(u32),
    /// The endpoint's score (`on` blocks).
    Score,
    /// The endpoint's pick probability (`on` blocks).
    Probability,
}

/// One cell of the auxiliary vector.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AuxSlot {
    /// The priority as changed by `set priority` so far (rollback guards).
    Priority,
    /// `count()`.
    Count,
    /// An outcome field.
    Outcome(OutcomeField),
    /// Aggregate `i` of the strategy in scope.
    Agg(u32),
}

/// What one endpoint vector is filled from: a candidate's registry entry,
/// statistics, strategy state slots (by slot index), score and pick probability.
/// The interpreter keeps the same in an [`EpCtx`] ([`EpView::of`]); a compiled
/// ranking builds no contexts and fills its vectors from views of its rows, so the
/// two engines read every cell through one function ([`Layout::fill_ep_cells`]).
#[derive(Debug, Clone, Copy)]
pub struct EpView<'v, 'a> {
    /// Registry entry.
    pub reg: EndpointRef<'a>,
    /// Statistics for the request's task.
    pub stats: &'v EpStats,
    /// State slot values, by slot index (missing slots read 0).
    pub state: &'v [f64],
    /// Score (`on` blocks).
    pub score: f64,
    /// Pick probability (`on` blocks).
    pub probability: f64,
}

impl<'v, 'a> EpView<'v, 'a> {
    /// The view of an interpreter context.
    pub fn of(c: &'v EpCtx<'a>) -> EpView<'v, 'a> {
        EpView {
            reg: c.reg,
            stats: &c.stats,
            state: &c.state,
            score: c.score,
            probability: c.probability,
        }
    }
}

/// The value of cell `slot` of endpoint `c`'s vector.
fn ep_value(set: &CheckedPolicySet, strings: &Strings, c: &EpView<'_, '_>, slot: EpSlot) -> u64 {
    let (e, s) = (c.reg.endpoint, c.stats);
    match slot {
        EpSlot::Field(f) => match f {
            EpField::Health => s.health.to_bits(),
            EpField::LatencyEwmaMs => s.latency_ewma_ms.to_bits(),
            EpField::TtftEwmaMs => s.ttft_ewma_ms.to_bits(),
            EpField::Capacity => s.capacity.to_bits(),
            EpField::InFlight => sat(s.in_flight),
            EpField::ErrorRate => s.error_rate.to_bits(),
            EpField::CostIn => s
                .cost_in_per_token
                .unwrap_or(e.input_per_mtok / 1e6)
                .to_bits(),
            EpField::CostOut => s
                .cost_out_per_token
                .unwrap_or(e.output_per_mtok / 1e6)
                .to_bits(),
            EpField::Quality => s.quality.to_bits(),
            EpField::Weight => u64::from(e.weight),
            EpField::Priority => u64::from(e.priority),
            EpField::ContextWindow => context_window(e, s) as u64,
            // Registry strings and circuit states are all in the table.
            _ => u64::from(
                strings
                    .known(ep_str(c, f).unwrap_or(""))
                    .unwrap_or(u32::MAX),
            ),
        },
        EpSlot::Atom(t, f, pat) => {
            let v = ep_str(c, f).unwrap_or("");
            u64::from(run_test(set, t.test(), v, set.strings.resolve(pat)))
        }
        EpSlot::State(i) => c.state.get(i as usize).copied().unwrap_or(0.0).to_bits(),
        EpSlot::Score => c.score.to_bits(),
        EpSlot::Probability => c.probability.to_bits(),
    }
}

/// Slot lists of the three vectors, each with its index.
#[derive(Debug, Default)]
pub struct Layout {
    /// Request cells in order.
    pub req: Vec<ReqSlot>,
    /// Endpoint cells in order.
    pub ep: Vec<EpSlot>,
    /// Aux cells in order.
    pub aux: Vec<AuxSlot>,
    req_ix: HashMap<ReqSlot, u32>,
    ep_ix: HashMap<EpSlot, u32>,
    aux_ix: HashMap<AuxSlot, u32>,
    /// Every endpoint cell index handed out by [`Layout::ep`], in call order (see
    /// [`Layout::ep_reads_since`]).
    ep_reads: Vec<u32>,
}

fn intern_slot<T: Copy + Eq + std::hash::Hash>(
    v: &mut Vec<T>,
    ix: &mut HashMap<T, u32>,
    s: T,
) -> u32 {
    *ix.entry(s).or_insert_with(|| {
        v.push(s);
        (v.len() - 1) as u32
    })
}

impl Layout {
    /// The index of request cell `s`, allocating it.
    pub fn req(&mut self, s: ReqSlot) -> u32 {
        intern_slot(&mut self.req, &mut self.req_ix, s)
    }

    /// The index of endpoint cell `s`, allocating it.
    pub fn ep(&mut self, s: EpSlot) -> u32 {
        let i = intern_slot(&mut self.ep, &mut self.ep_ix, s);
        self.ep_reads.push(i);
        i
    }

    /// A mark for [`Layout::ep_reads_since`].
    pub fn ep_mark(&self) -> usize {
        self.ep_reads.len()
    }

    /// The endpoint cells handed out since `mark` (ascending, once each): the
    /// cells the code lowered since then reads.
    pub fn ep_reads_since(&self, mark: usize) -> Vec<u32> {
        let mut v = self.ep_reads.get(mark..).unwrap_or_default().to_vec();
        v.sort_unstable();
        v.dedup();
        v
    }

    /// The index of aux cell `s`, allocating it.
    pub fn aux(&mut self, s: AuxSlot) -> u32 {
        intern_slot(&mut self.aux, &mut self.aux_ix, s)
    }

    /// Vector lengths in cells: request, endpoint, aux.
    pub fn lens(&self) -> [u32; 3] {
        [
            self.req.len() as u32,
            self.ep.len() as u32,
            self.aux.len() as u32,
        ]
    }
}

/// The string table of a compiled set: the checked set's interned strings (so
/// `Sym(n)` is id `n`) plus every registry string (endpoint ids, providers, upstream
/// models, model names). Request strings outside it get per-request ids above it.
#[derive(Debug, Default)]
pub struct Strings {
    // FxHash: looked up for every request string cell; the keys are policy and
    // registry strings, so no hash flooding concern.
    map: rustc_hash::FxHashMap<String, u32>,
    len: u32,
}

impl Strings {
    /// The table for `set`.
    pub fn new(set: &CheckedPolicySet) -> Strings {
        let mut t = Strings::default();
        for i in 0..set.strings.len() {
            t.add(set.strings.resolve(Sym(i as u32)));
        }
        for e in set.registry.endpoints() {
            for s in [
                &e.endpoint.id,
                &e.endpoint.provider,
                &e.endpoint.model,
                &e.model.name,
            ] {
                t.add(s);
            }
        }
        for c in crate::policy::features::Circuit::ALL {
            t.add(c.as_str());
        }
        t
    }

    fn add(&mut self, s: &str) {
        if !self.map.contains_key(s) {
            self.map.insert(s.to_string(), self.len);
            self.len += 1;
        }
    }

    /// The id of a string known at compile time.
    pub fn known(&self, s: &str) -> Option<u32> {
        self.map.get(s).copied()
    }

    /// The id of `s` in one request: its table id, or an id above the table shared by
    /// equal strings of the same request (`foreign` collects them).
    pub fn id<'r>(&self, s: &'r str, foreign: &mut Foreign<'r>) -> u64 {
        if let Some(id) = self.map.get(s) {
            return u64::from(*id);
        }
        let k = match foreign.iter().position(|f| *f == s) {
            Some(k) => k,
            None => {
                foreign.push(s);
                foreign.len() - 1
            }
        };
        u64::from(self.len) + k as u64
    }
}

/// Request strings outside the table, in first-seen order (their ids follow the
/// table's).
pub type Foreign<'r> = smallvec::SmallVec<[&'r str; 4]>;

/// The code of a priority level (its rank, lowest first).
pub fn prio_code(p: PriorityLevel) -> u64 {
    match p {
        PriorityLevel::Low => 0,
        PriorityLevel::Normal => 1,
        PriorityLevel::High => 2,
        PriorityLevel::Critical => 3,
    }
}

/// The level of a priority code (codes above 3 are `critical`).
pub fn prio_level(code: u64) -> PriorityLevel {
    match code {
        0 => PriorityLevel::Low,
        1 => PriorityLevel::Normal,
        2 => PriorityLevel::High,
        _ => PriorityLevel::Critical,
    }
}

fn sat(v: u64) -> u64 {
    i64::try_from(v).unwrap_or(i64::MAX) as u64
}

fn ep_str<'e>(c: &EpView<'e, 'e>, f: EpField) -> Option<&'e str> {
    match f {
        EpField::Id => Some(&c.reg.endpoint.id),
        EpField::Provider => Some(&c.reg.endpoint.provider),
        EpField::UpstreamModel => Some(&c.reg.endpoint.model),
        EpField::Model => Some(&c.reg.model.name),
        EpField::Circuit => Some(c.stats.circuit.as_str()),
        _ => None,
    }
}

/// How the host fills the request vector of one compiled set, made once per set
/// from its [`Layout`]: each distinct request string a cell reads (a header, a
/// metadata key, the API key, ...) is looked up once per request however many cells
/// read it (`has(header("x"))` and `header("x") == ...` are two cells of one
/// lookup), and every cell's work is decided here rather than per request.
#[derive(Debug, Default)]
pub struct ReqFill {
    /// The request strings the cells read, looked up once per request.
    sources: Vec<ReqField>,
    /// Per cell of the request vector, in order.
    ops: Vec<ReqOp>,
}

/// What one request cell holds ([`ReqFill`]).
#[derive(Debug, Clone, Copy)]
enum ReqOp {
    /// A numeric, boolean or priority field, or a `scope()` bit.
    Value(ReqField),
    /// Whether a numeric optional field is present.
    Present(ReqField),
    /// The id of string source `.0` ("" when absent).
    Id(u32),
    /// Whether string source `.0` is present.
    Has(u32),
    /// String test `.0` of source `.1` ("" when absent) against pattern `.2`.
    Atom(TestKey, u32, Sym),
    /// A rule-index mask word, filled by [`super::index::RouteIndex`] after these.
    Zero,
}

/// Request string `f` (a source of [`ReqFill`]); `None` when absent.
fn source<'r>(set: &CheckedPolicySet, r: &'r RequestFeatures, f: ReqField) -> Option<&'r str> {
    match f {
        ReqField::Model => Some(&r.model),
        ReqField::Task => Some(&r.task),
        ReqField::ApiKey => r.api_key.as_deref(),
        ReqField::Org => r.org.as_deref(),
        // The checker lowercases `header()` names and requests keep theirs
        // lowercased: one lookup, without `RequestFeatures::header`'s second try.
        ReqField::Header(s) => r.headers.get(set.strings.resolve(s)).map(String::as_str),
        ReqField::Metadata(s) => r.metadata.get(set.strings.resolve(s)).map(String::as_str),
        _ => None,
    }
}

impl ReqFill {
    /// The fill of `layout`'s request vector.
    pub fn new(layout: &Layout) -> ReqFill {
        let mut sources: Vec<ReqField> = Vec::new();
        let mut src = |f: ReqField| -> u32 {
            let i = match sources.iter().position(|s| *s == f) {
                Some(i) => i,
                None => {
                    sources.push(f);
                    sources.len() - 1
                }
            };
            // Each source is a literal name in the set's text: far fewer than 2^32.
            u32::try_from(i).unwrap_or(u32::MAX)
        };
        let ops = layout
            .req
            .iter()
            .map(|slot| match *slot {
                ReqSlot::Field(f) if f.is_str() => ReqOp::Id(src(f)),
                ReqSlot::Field(f) => ReqOp::Value(f),
                ReqSlot::Has(f) if f.is_str() => ReqOp::Has(src(f)),
                ReqSlot::Has(f) => ReqOp::Present(f),
                ReqSlot::Atom(t, f, pat) if f.is_str() => ReqOp::Atom(t, src(f), pat),
                // No other field is a string: the test runs on "" as before.
                ReqSlot::Atom(t, _, pat) => ReqOp::Atom(t, u32::MAX, pat),
                ReqSlot::Mask(..) => ReqOp::Zero,
            })
            .collect();
        ReqFill { sources, ops }
    }

    /// Fills the request vector (`out.len()` must be the request length; extra cells
    /// are left alone). Strings are ids of `strings`; absent optionals read 0, 0.0
    /// or "" (and `false` in their `has()` cell).
    pub fn fill(
        &self,
        set: &CheckedPolicySet,
        strings: &Strings,
        r: &RequestFeatures,
        out: &mut [u64],
    ) {
        let found: smallvec::SmallVec<[Option<&str>; 16]> =
            self.sources.iter().map(|f| source(set, r, *f)).collect();
        let text = |i: u32| {
            usize::try_from(i)
                .ok()
                .and_then(|i| found.get(i))
                .copied()
                .flatten()
        };
        let mut foreign = Foreign::new();
        for (cell, op) in out.iter_mut().zip(&self.ops) {
            *cell = match *op {
                ReqOp::Value(f) => match f {
                    ReqField::InputTokens => sat(r.input_tokens),
                    ReqField::MaxTokens => sat(r.max_tokens.unwrap_or(0)),
                    ReqField::Temperature => r.temperature.unwrap_or(0.0).to_bits(),
                    ReqField::BudgetRemaining => r.budget_remaining.to_bits(),
                    ReqField::Stream => u64::from(r.stream),
                    ReqField::Tools => u64::from(r.tools),
                    ReqField::OffPeak => u64::from(r.off_peak),
                    ReqField::Messages => sat(r.messages),
                    ReqField::Priority => prio_code(r.priority),
                    ReqField::Hour => u64::from(r.hour),
                    ReqField::Weekday => u64::from(r.weekday),
                    // One cell per distinct scope literal, answered here once per
                    // decision, so compiled code only loads a boolean.
                    ReqField::Scope(s) => u64::from(r.has_scope(set.strings.resolve(s))),
                    // String fields are sources (`ReqOp::Id`).
                    _ => 0,
                },
                ReqOp::Present(f) => u64::from(match f {
                    ReqField::MaxTokens => r.max_tokens.is_some(),
                    ReqField::Temperature => r.temperature.is_some(),
                    _ => true,
                }),
                ReqOp::Id(i) => strings.id(text(i).unwrap_or(""), &mut foreign),
                ReqOp::Has(i) => u64::from(text(i).is_some()),
                ReqOp::Atom(t, i, pat) => u64::from(run_test(
                    set,
                    t.test(),
                    text(i).unwrap_or(""),
                    set.strings.resolve(pat),
                )),
                ReqOp::Zero => 0,
            };
        }
    }
}

impl Layout {
    /// Fills one endpoint vector from endpoint `c`.
    pub fn fill_ep(
        &self,
        set: &CheckedPolicySet,
        strings: &Strings,
        c: &EpView<'_, '_>,
        out: &mut [u64],
    ) {
        for (cell, slot) in out.iter_mut().zip(&self.ep) {
            *cell = ep_value(set, strings, c, *slot);
        }
    }

    /// Fills only the cells `cells` of one endpoint vector (the others keep their
    /// values): for code that reads no other cell ([`Layout::ep_reads_since`]).
    pub fn fill_ep_cells(
        &self,
        set: &CheckedPolicySet,
        strings: &Strings,
        c: &EpView<'_, '_>,
        out: &mut [u64],
        cells: &[u32],
    ) {
        for &i in cells {
            let i = i as usize;
            if let (Some(cell), Some(slot)) = (out.get_mut(i), self.ep.get(i)) {
                *cell = ep_value(set, strings, c, *slot);
            }
        }
    }

    /// Writes the score and probability cells of one endpoint vector (filled by
    /// [`Layout::fill_ep`] before the endpoint was scored).
    pub fn fill_scored(&self, score: f64, probability: f64, out: &mut [u64]) {
        for (cell, slot) in out.iter_mut().zip(&self.ep) {
            match slot {
                EpSlot::Score => *cell = score.to_bits(),
                EpSlot::Probability => *cell = probability.to_bits(),
                _ => {}
            }
        }
    }

    /// Fills the aux vector. `aggs` holds aggregate values by index (missing: 0).
    pub fn fill_aux(
        &self,
        priority: PriorityLevel,
        count: usize,
        outcome: Option<&Outcome>,
        aggs: &[f64],
        out: &mut [u64],
    ) {
        let o = outcome.copied().unwrap_or_default();
        for (cell, slot) in out.iter_mut().zip(&self.aux) {
            *cell = match *slot {
                AuxSlot::Priority => prio_code(priority),
                AuxSlot::Count => count as u64,
                AuxSlot::Outcome(f) => match f {
                    OutcomeField::LatencyMs => o.latency_ms.to_bits(),
                    OutcomeField::TtftMs => o.ttft_ms.to_bits(),
                    OutcomeField::InputTokens => sat(o.input_tokens),
                    OutcomeField::OutputTokens => sat(o.output_tokens),
                },
                AuxSlot::Agg(i) => aggs.get(i as usize).copied().unwrap_or(0.0).to_bits(),
            };
        }
    }
}
