//! Running a set's tests: within the total budget, spread over the machine's cores,
//! and remembering what passed ([`TestResults`]) so the next load of an edited set
//! runs again only the tests whose result can have changed.
//!
//! # What a cached pass rests on
//!
//! A test's decisions are a function of exactly:
//! - the test's own text (request, statistics, seed, `sample`, expectations);
//! - the registry;
//! - the routes the interpreter tried for its requests, in order: every route up to
//!   the one that took them (all of them when some request matched none). One that
//!   took some of them is a function of its own text (conditions, rules, splits,
//!   fallbacks, names); one that took none passed over them on its `when` condition
//!   alone, since a route whose condition holds takes the request (its default
//!   always decides: the checker refuses a default that `continue`s or decides
//!   nothing), so it is a function of that condition's text. So an edit of a
//!   route's rules runs again only the tests it took, not every test tried against
//!   it;
//! - the strategies used by the routes that took some of its requests (each a
//!   function of its own text). A route tried and passed over ran no strategy: only
//!   a terminal action (`use`, an arm of a `split`) runs one, and the first terminal
//!   action reached ends the decision. So an edit of a strategy runs again only the
//!   tests that some route using it decided, not every test whose requests went past
//!   such a route (issue 17: save to serving);
//! - the code of the engines ([`ENGINE`]).
//!
//! Nothing else of a set reaches a decision (there are no other global definitions,
//! and deciding reads no clock, environment or configuration beyond the registry;
//! interned ids and regex indices are derived from these texts, and the digest of a
//! decision names strategies and strings by content). A passed test is
//! remembered under a content hash of its text, with a hash of that list of inputs in
//! the set it passed in (`Deps::deps`, of the last route position reached and the
//! positions of the routes that took its requests) and a digest of the interpreter's
//! decisions. In the next set, a test whose inputs hash the same would get the same
//! decisions from the interpreter, so its expectations hold again; only the compiled
//! code is new. Such a test is therefore run on the JIT alone, and passes only if the
//! digest of the JIT's decisions equals the interpreter's from before (the comparison
//! `--engine both` makes, through a 128-bit digest) and those decisions meet its
//! expectations; otherwise it runs in full on both engines. A failed test is never
//! remembered.
//!
//! # How much of a remembered pass runs again
//! A `sample N` test with N above [`CHECK_REQUESTS`] is checked on an evenly spread
//! subset of its requests: every `stride`-th (requests 0, s, 2s, ...; at most
//! [`CHECK_REQUESTS`] of them), and the digest remembered from its full run covers
//! that same subset. What the check is for is the freshly compiled code, and a
//! difference of compiled code (a layout, a string table, a code generation fault)
//! shows on any spread of requests, while the expectations were met by the full run
//! whose inputs have not changed. This is what keeps a reload of a set with large
//! distribution tests fast: the shipped examples hold 65,030 test requests, of which
//! a reload with every pass reused now decides about 8,000 (issue 17: save to
//! serving). The share expectations of such a test are not checked again (a subset's
//! shares are not the test's); a test of at most [`CHECK_REQUESTS`] requests is run
//! whole and checked as before.
//!
//! # Strategy state
//! A `sample` test whose requests carry strategy state (some decision of it has
//! `on pick` updates, which the next request is decided on) has no spread subset:
//! each decision depends on all before it, so its full run decides them whole, in
//! order, on one thread. Its check is the prefix instead, its first
//! [`CHECK_REQUESTS`] requests decided in order (the state after request k depends on
//! requests 0 to k only), and the digest of its full run covers that prefix.
//! Checking every request of such tests made a reload of the shipped examples decide
//! all 65,030 again, 101-120 ms of a 122-135 ms save to serving (`cargo test
//! --release --test it save_to_serving -- --ignored`).
//!
//! Whether a test carries state is found, not guessed: a full run first decides a
//! `sample` test in spread chunks on every thread, each chunk on the test's own
//! statistics, and stops a chunk at its first decision with state updates. A test
//! none of whose decisions updated any state was decided exactly as in sequence (the
//! statistics never changed); one that did runs again, whole and in order
//! ([`Carry::Found`]). The remembered pass keeps which it was. (This was a property
//! of the whole set, any route with an `on pick` strategy, which put every `sample`
//! test of the shipped examples on one thread each since the built-in weighted
//! round-robin's test route is in it.)

use std::borrow::Cow;
use std::collections::{BTreeSet, HashMap};
use std::hash::{Hash, Hasher};
use std::ops::Range;
use std::sync::atomic::{AtomicUsize, Ordering};

use xxhash_rust::xxh3::{xxh3_128, Xxh3};

use super::{field_is, CExpectKind, CTest, CaseResult, TestReport};
use crate::policy::checked::{CSplitKey, CTerminal, CheckedPolicySet, Const};
use crate::policy::interp::strategy::PlanRest;
use crate::policy::interp::Decision;

/// Decides one test request ([`super::DecideFn`]), from several threads at once.
pub type SyncDecide<'a> = super::DecideFn<'a>;

/// Test requests per unit of work handed to a thread.
const CHUNK: u64 = 500;

/// Most requests of one remembered pass decided again (see the module doc).
pub const CHECK_REQUESTS: u64 = 1_000;

/// The spacing of the requests of a test of `n` requests that a remembered pass is
/// checked on (and whose decisions its digest covers): 1 up to [`CHECK_REQUESTS`]
/// requests, so that at most that many are checked.
fn stride(n: u64) -> u64 {
    n.div_ceil(CHECK_REQUESTS).max(1)
}

/// The requests of test `t` that a remembered pass is checked on, and whose
/// decisions its digest covers: every [`stride`]-th, or, when its requests carry
/// strategy state (see the module doc), the first [`CHECK_REQUESTS`] (a
/// decision depends on every decision before it, so none can be decided alone).
#[derive(Clone, Copy)]
struct Checked {
    /// Every `step`-th request, from the first ...
    step: u64,
    /// ... up to this one (excluded).
    end: u64,
}

impl Checked {
    /// The checked requests of `t`, whose requests carry strategy state when
    /// `stateful`.
    fn of(t: &CTest, stateful: bool) -> Checked {
        let n = super::test_requests(t);
        if stateful {
            Checked {
                step: 1,
                end: n.min(CHECK_REQUESTS),
            }
        } else {
            Checked {
                step: stride(n),
                end: n,
            }
        }
    }

    /// Whether request `i`'s decision is checked (and digested).
    fn covers(self, i: u64) -> bool {
        i < self.end && i.is_multiple_of(self.step)
    }

    /// Whether every request of a test of `n` requests is checked.
    fn whole(self, n: u64) -> bool {
        self.step == 1 && self.end == n
    }
}

/// What passed in one run of a set's tests, for the next run ([`run_tests_parallel`]).
#[derive(Debug, Clone)]
pub struct TestResults {
    /// The engine code the passes were found with ([`ENGINE`]).
    engine: &'static str,
    passed: HashMap<u128, Passed>,
}

/// The version of the code that decides and checks (the interpreter, the JIT, this
/// runner): the package version and the commit built from. Results found by other
/// code are never reused. They live in memory only, so today this cannot differ
/// within a process; it keeps a pass from outliving a change of the engines should
/// results ever be kept across processes.
pub const ENGINE: &str = concat!(env!("CARGO_PKG_VERSION"), "+", env!("SWITCHYARD_COMMIT"));

impl Default for TestResults {
    fn default() -> Self {
        TestResults {
            engine: ENGINE,
            passed: HashMap::new(),
        }
    }
}

impl TestResults {
    /// Number of remembered passes.
    pub fn len(&self) -> usize {
        self.passed.len()
    }

    /// Whether nothing is remembered.
    pub fn is_empty(&self) -> bool {
        self.passed.is_empty()
    }

    /// The same passes, as if found by engine code `engine` (tests of the stamp).
    #[cfg(test)]
    fn found_by(mut self, engine: &'static str) -> TestResults {
        self.engine = engine;
        self
    }
}

/// One remembered pass.
#[derive(Debug, Clone, PartialEq)]
struct Passed {
    /// The last route position the test's requests reached (`usize::MAX`: all).
    reach: usize,
    /// The positions of the routes that took some of its requests, ascending.
    taken: Box<[u32]>,
    /// [`Deps::deps`] of `reach` and `taken` in the set it passed in.
    deps: u128,
    /// Whether its requests carried strategy state ([`Checked::of`]).
    stateful: bool,
    /// The interpreter's decisions on the requests [`Checked`] covers, digested
    /// ([`digest`], summed).
    decisions: u128,
}

/// How a test runs.
#[derive(Debug, Clone, PartialEq)]
enum Mode {
    /// On the engines `full` decides with.
    Full,
    /// A remembered pass: the JIT alone, compared with the remembered digest.
    Check(Passed),
}

/// Whether a run of a test's requests carries strategy state from one to the next.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Carry {
    /// No: its requests are decided in chunks on every thread, each on the test's own
    /// statistics, and a chunk stops at its first decision with state updates
    /// ([`Part::updated`]).
    No,
    /// Yes, as the remembered pass found: the checked prefix, in order.
    Remembered,
    /// Yes, found by a run without: all of them again, in order.
    Found,
}

/// What one range of a test's requests found.
#[derive(Debug, Default)]
struct Part {
    /// Failed expectations (a test without `sample`).
    failures: Vec<String>,
    /// The first request that failed to decide: index and message.
    error: Option<(u64, String)>,
    /// Matches per `expect share` (by expectation index).
    counts: Vec<u64>,
    /// Sum of the digests of the decisions on the requests a check covers
    /// ([`Checked`]).
    digest: u128,
    /// The last route position reached (`usize::MAX`: some request matched none).
    reach: usize,
    /// The positions of the routes that took some request, ascending.
    taken: Vec<u32>,
    /// Some decision had state updates in a run without [`Carry`] (which stopped
    /// there).
    updated: bool,
}

impl Part {
    fn merge(&mut self, o: Part) {
        self.failures.extend(o.failures);
        if let Some((i, e)) = o.error {
            if self.error.as_ref().is_none_or(|(j, _)| i < *j) {
                self.error = Some((i, e));
            }
        }
        if self.counts.len() < o.counts.len() {
            self.counts.resize(o.counts.len(), 0);
        }
        for (a, b) in self.counts.iter_mut().zip(o.counts) {
            *a += b;
        }
        self.digest = self.digest.wrapping_add(o.digest);
        self.reach = self.reach.max(o.reach);
        for r in o.taken {
            self.took(r);
        }
        self.updated |= o.updated;
    }

    /// Notes that route position `r` took a request.
    fn took(&mut self, r: u32) {
        if let Err(at) = self.taken.binary_search(&r) {
            self.taken.insert(at, r);
        }
    }
}

/// Runs the tests of `set` as [`super::run_tests_within`] does (same budget, same
/// report), deciding with `full`, on up to `threads` threads. With `previous` (the
/// results of an earlier run) a test whose inputs are unchanged is run on `jit`
/// alone and checked against its remembered decisions (see the module doc). Returns
/// the report and the passes to remember.
pub fn run_tests_parallel(
    set: &CheckedPolicySet,
    full: &SyncDecide<'_>,
    jit: &SyncDecide<'_>,
    budget: Option<u64>,
    previous: Option<&TestResults>,
    threads: usize,
) -> (TestReport, TestResults) {
    let ctx = Deps::new(set);
    let mut report = TestReport {
        budget,
        ..TestReport::default()
    };
    // Which tests run (the budget, in source order) and how.
    let mut runs: Vec<(usize, u128, Mode)> = Vec::new();
    let mut skipped: HashMap<usize, CaseResult> = HashMap::new();
    for (i, t) in set.tests.iter().enumerate() {
        let cost = super::test_requests(t);
        let left = budget.map(|b| b.saturating_sub(report.requests));
        if let Some(left) = left.filter(|l| cost > *l) {
            skipped.insert(i, super::skipped_case(set, t, cost, left, budget));
            continue;
        }
        report.requests += cost;
        let key = xxh3_128(set.sources.slice(t.span).as_bytes());
        let mode = previous
            .filter(|p| p.engine == ENGINE)
            .and_then(|p| p.passed.get(&key))
            .filter(|p| ctx.deps(p.reach, &p.taken) == p.deps)
            .map_or(Mode::Full, |p| Mode::Check(p.clone()));
        runs.push((i, key, mode));
    }
    // How each run carries strategy state: a remembered pass as its full run found;
    // a full run first without (see the module doc).
    let mut carry: Vec<Carry> = runs
        .iter()
        .map(|(_, _, m)| match m {
            Mode::Check(p) if p.stateful => Carry::Remembered,
            _ => Carry::No,
        })
        .collect();
    let work = |runs: &[&(usize, u128, Mode)], carry: &[Carry]| -> Vec<Part> {
        let mut units = Vec::new();
        for (r, ((i, _, mode), c)) in runs.iter().zip(carry).enumerate() {
            let t = &set.tests[*i];
            let n = super::test_requests(t);
            // Without state, CHUNK requests per unit (a check decides every
            // stride-th: CHUNK of them). With state, one unit in sequence: every
            // request when found, the checked prefix when remembered.
            let (len, chunk) = match (c, mode) {
                (Carry::Found, _) => (n, n),
                (Carry::Remembered, _) => {
                    let end = Checked::of(t, true).end;
                    (end, end)
                }
                (Carry::No, Mode::Full) => (n, CHUNK),
                (Carry::No, Mode::Check(_)) => (n, CHUNK * stride(n)),
            };
            let mut start = 0;
            while start < len {
                let end = (start + chunk).min(len);
                units.push((r, start..end));
                start = end;
            }
        }
        let parts = in_parallel(&units, threads, |(r, range)| {
            let (i, _, mode) = runs[*r];
            let check = matches!(mode, Mode::Check(_));
            let decide = if check { jit } else { full };
            run_range(
                set,
                &ctx,
                &set.tests[*i],
                range.clone(),
                decide,
                check,
                carry[*r],
            )
        });
        let mut merged: Vec<Part> = runs.iter().map(|_| Part::default()).collect();
        for ((r, _), p) in units.iter().zip(parts) {
            merged[*r].merge(p);
        }
        merged
    };
    // A remembered pass holds only if the JIT's decisions equal the interpreter's
    // remembered ones (and carry state as they did) and, belt and braces, meet the
    // test's expectations themselves; otherwise the test runs again in full.
    // (A test checked on a subset: its shares are not the test's, so only the
    // decisions are compared; see the module doc.)
    let holds = |i: usize, c: &Passed, p: &Part| {
        let t = &set.tests[i];
        p.error.is_none()
            && !p.updated
            && p.digest == c.decisions
            && (!Checked::of(t, c.stateful).whole(super::test_requests(t))
                || super::failures_of(set, t, p.failures.clone(), None, &p.counts).is_empty())
    };
    // Rounds: every run; then a failed check in full (as stateful as it was), and a
    // full run that found state in sequence. At most three.
    let mut parts: Vec<Part> = runs.iter().map(|_| Part::default()).collect();
    let mut todo: Vec<usize> = (0..runs.len()).collect();
    while !todo.is_empty() {
        let these: Vec<_> = todo.iter().map(|&r| &runs[r]).collect();
        let carries: Vec<Carry> = todo.iter().map(|&r| carry[r]).collect();
        let done = work(&these, &carries);
        let mut next = Vec::new();
        for (&r, p) in todo.iter().zip(done) {
            let again = match &runs[r].2 {
                Mode::Check(c) if !holds(runs[r].0, c, &p) => {
                    carry[r] = if c.stateful { Carry::Found } else { Carry::No };
                    runs[r].2 = Mode::Full;
                    true
                }
                Mode::Check(_) => false,
                Mode::Full if p.updated && carry[r] == Carry::No => {
                    carry[r] = Carry::Found;
                    true
                }
                Mode::Full => false,
            };
            if again {
                next.push(r);
            }
            parts[r] = p;
        }
        todo = next;
    }
    let mut results = TestResults::default();
    let mut outcomes: HashMap<usize, CaseResult> = HashMap::new();
    for (((i, key, mode), part), c) in runs.into_iter().zip(parts).zip(carry) {
        let t = &set.tests[i];
        let reused = matches!(mode, Mode::Check(_));
        let (failures, remember) = match mode {
            Mode::Check(p) => (Vec::new(), p),
            Mode::Full => {
                let taken: Box<[u32]> = part.taken.into();
                let remember = Passed {
                    reach: part.reach,
                    deps: ctx.deps(part.reach, &taken),
                    taken,
                    stateful: c == Carry::Found,
                    decisions: part.digest,
                };
                (
                    super::failures_of(set, t, part.failures, part.error, &part.counts),
                    remember,
                )
            }
        };
        let passed = failures.is_empty();
        if passed {
            report.passed += 1;
            report.reused += usize::from(reused);
            results.passed.insert(key, remember);
        } else {
            report.failed += 1;
        }
        outcomes.insert(
            i,
            CaseResult {
                name: t.name.clone(),
                at: set.sources.location(t.span),
                passed,
                failures,
                skipped: false,
            },
        );
    }
    for i in 0..set.tests.len() {
        if let Some(c) = skipped.remove(&i) {
            report.skipped += 1;
            report.cases.push(c);
        } else if let Some(c) = outcomes.remove(&i) {
            report.cases.push(c);
        }
    }
    (report, results)
}

/// Runs `f` over `units` on up to `threads` threads (the calling one included);
/// results in the order of `units`.
fn in_parallel<U: Sync, R: Send>(
    units: &[U],
    threads: usize,
    f: impl Fn(&U) -> R + Sync,
) -> Vec<R> {
    let threads = threads.clamp(1, units.len().max(1));
    if threads == 1 {
        return units.iter().map(&f).collect();
    }
    let next = AtomicUsize::new(0);
    let worker = || {
        let mut out = Vec::new();
        loop {
            let i = next.fetch_add(1, Ordering::Relaxed);
            let Some(u) = units.get(i) else { break };
            out.push((i, f(u)));
        }
        out
    };
    let mut all: Vec<(usize, R)> = std::thread::scope(|s| {
        let others: Vec<_> = (1..threads).map(|_| s.spawn(worker)).collect();
        let mut all = worker();
        for h in others {
            // A worker that panicked: its units are missing; run them here below.
            if let Ok(v) = h.join() {
                all.extend(v);
            }
        }
        all
    });
    all.sort_by_key(|(i, _)| *i);
    let mut out = Vec::with_capacity(units.len());
    let mut got = all.into_iter().peekable();
    for (i, u) in units.iter().enumerate() {
        match got.next_if(|(j, _)| *j == i) {
            Some((_, r)) => out.push(r),
            None => out.push(f(u)),
        }
    }
    out
}

/// Decides requests `range` of `t` (all of a test without `sample`), digesting the
/// decisions on the requests a check covers ([`Checked`]); with `check`, decides only
/// those (and `range` must start at one of them). With `carry` ([`Carry`]), `range`
/// starts at the first request (and holds all of them in a full run) and each
/// decision's `on pick` updates are recorded into the statistics the next request is
/// decided on, as the gateway records them into its live statistics
/// ([`crate::policy::interp::Decision::record_state`]); without, the first decision
/// with updates ends the range ([`Part::updated`]).
fn run_range(
    set: &CheckedPolicySet,
    ctx: &Deps<'_>,
    t: &CTest,
    range: Range<u64>,
    decide: &SyncDecide<'_>,
    check: bool,
    carry: Carry,
) -> Part {
    let mut part = Part {
        counts: vec![0; t.expects.len()],
        ..Part::default()
    };
    let mut buf = Vec::with_capacity(256);
    let Some((_, key)) = &t.sample else {
        match decide(&t.request, &t.stats, t.seed) {
            Ok(d) => {
                part.failures = super::expect_failures(set, t, &d);
                part.digest = digest(set, 0, &d, &mut buf);
                part.reach = ctx.reach(&d);
                if part.reach != usize::MAX {
                    part.took(part.reach as u32);
                }
            }
            Err(e) => part.error = Some((0, e)),
        }
        return part;
    };
    let mut req = t.request.clone();
    let mut k = String::new();
    let mut digits = itoa::Buffer::new();
    let stateful = carry != Carry::No;
    let checked = Checked::of(t, stateful);
    debug_assert!(
        !stateful
            || range.start == 0
                && range.end
                    == if check {
                        checked.end
                    } else {
                        super::test_requests(t)
                    }
    );
    // Copied on the first update only: a stateless test reads the test's own.
    let mut stats = Cow::Borrowed(&t.stats);
    for i in range.step_by(if check {
        usize::try_from(checked.step).unwrap_or(usize::MAX)
    } else {
        1
    }) {
        let mut seed = t.seed;
        k.clear();
        k.push_str("key-");
        k.push_str(digits.format(i));
        match key {
            CSplitKey::ApiKey => set_to(&mut req.api_key, &k),
            CSplitKey::Org => set_to(&mut req.org, &k),
            CSplitKey::Header(h) => set_in(&mut req.headers, h, &k),
            CSplitKey::Metadata(m) => set_in(&mut req.metadata, m, &k),
            CSplitKey::Random => seed = seed.wrapping_add(i),
        }
        let d = match decide(&req, &stats, seed) {
            Ok(d) => d,
            Err(e) => {
                part.error = Some((i, e));
                return part;
            }
        };
        if !d.state_updates.is_empty() {
            if !stateful {
                part.updated = true;
                return part;
            }
            d.record_state(stats.to_mut());
        }
        for (j, e) in t.expects.iter().enumerate() {
            if let CExpectKind::Share(f, v, ..) = &e.kind {
                if field_is(&d, *f, v) {
                    part.counts[j] += 1;
                }
            }
        }
        if checked.covers(i) {
            part.digest = part.digest.wrapping_add(digest(set, i, &d, &mut buf));
        }
        let reach = ctx.reach(&d);
        part.reach = part.reach.max(reach);
        if reach != usize::MAX && part.taken.last() != Some(&(reach as u32)) {
            part.took(reach as u32);
        }
    }
    part
}

fn set_to(slot: &mut Option<std::sync::Arc<str>>, v: &str) {
    *slot = Some(v.into());
}

fn set_in(map: &mut std::collections::BTreeMap<String, String>, key: &str, v: &str) {
    match map.get_mut(key) {
        Some(s) => {
            s.clear();
            s.push_str(v);
        }
        None => {
            map.insert(key.to_string(), v.to_string());
        }
    }
}

/// The inputs of a test's decisions in one set (see the module doc).
struct Deps<'s> {
    set: &'s CheckedPolicySet,
    registry: u128,
    /// Route name → position in evaluation order (looked up once per test request;
    /// the names are the set's own).
    position: rustc_hash::FxHashMap<&'s str, usize>,
    /// Per route, the strategies its rules use (indices).
    strategies: Vec<BTreeSet<u32>>,
    /// Per route, the text a request it passed over depends on: its `when`
    /// condition's, when the route takes every request that condition admits (its
    /// default decides); else (no condition, or a default that might not decide) all
    /// of it.
    passed_over: Vec<&'s str>,
}

impl<'s> Deps<'s> {
    fn new(set: &'s CheckedPolicySet) -> Deps<'s> {
        // Debug rather than serde: it cannot fail and tells every float apart (JSON
        // writes NaN and infinities alike as null).
        let registry = xxh3_128(format!("{:?}", set.registry).as_bytes());
        let position = set
            .routes
            .iter()
            .enumerate()
            .map(|(i, r)| (r.name.as_str(), i))
            .collect();
        let strategies: Vec<BTreeSet<u32>> = set
            .routes
            .iter()
            .map(|r| {
                let mut used = BTreeSet::new();
                for rule in r.rules.iter().chain(std::iter::once(&r.default)) {
                    match &rule.body.terminal {
                        Some(CTerminal::Use(u)) => used.extend(u.strategy),
                        Some(CTerminal::Split(s)) => {
                            used.extend(s.arms.iter().filter_map(|a| a.action.strategy))
                        }
                        Some(CTerminal::Reject { .. }) | None => {}
                    }
                }
                used
            })
            .collect();
        let passed_over = set
            .routes
            .iter()
            .map(|r| match &r.when {
                Some(w) if r.default.body.terminal.is_some() => set.sources.slice(w.span),
                _ => set.sources.slice(r.span),
            })
            .collect();
        Deps {
            set,
            registry,
            position,
            strategies,
            passed_over,
        }
    }

    /// The route position that decided `d` (`usize::MAX`: no route did).
    fn reach(&self, d: &Decision) -> usize {
        d.route
            .as_deref()
            .and_then(|r| self.position.get(r).copied())
            .unwrap_or(usize::MAX)
    }

    /// A hash of the registry; in order, of every route up to position `reach`,
    /// the whole text of the ones at positions `taken` (the ones that took a
    /// request) and the condition of the others ([`Deps::passed_over`]); and of the
    /// text of every strategy the routes at `taken` use (a route passed over ran
    /// none).
    fn deps(&self, reach: usize, taken: &[u32]) -> u128 {
        let set = self.set;
        let mut h = Xxh3::new();
        h.update(&self.registry.to_le_bytes());
        let last = reach.min(set.routes.len().saturating_sub(1));
        for (p, r) in set.routes.iter().enumerate().take(last + 1) {
            let took = u32::try_from(p).is_ok_and(|p| taken.binary_search(&p).is_ok());
            if took {
                h.update(b"\x01");
                text(&mut h, set.sources.slice(r.span));
            } else {
                h.update(b"\x02");
                text(&mut h, self.passed_over[p]);
            }
        }
        let mut used = BTreeSet::new();
        for r in taken {
            used.extend(
                self.strategies
                    .get(*r as usize)
                    .into_iter()
                    .flatten()
                    .copied(),
            );
        }
        h.update(b"\xffstrategies");
        for s in used.iter().filter_map(|i| set.strategies.get(*i as usize)) {
            text(&mut h, set.sources.slice(s.span));
        }
        h.digest128()
    }
}

fn text(h: &mut Xxh3, s: &str) {
    h.update(&(s.len() as u64).to_le_bytes());
    h.update(s.as_bytes());
}

/// A std `Hasher` over XXH3 (the 64-bit `finish` is unused: [`digest`] takes the
/// 128-bit value).
struct H<'b>(&'b mut Vec<u8>);

impl Hasher for H<'_> {
    fn write(&mut self, bytes: &[u8]) {
        self.0.extend_from_slice(bytes);
    }
    fn finish(&self) -> u64 {
        0
    }
}

/// Float bits as `--engine both` compares them: every NaN alike.
fn float_bits(v: f64) -> u64 {
    if v.is_nan() {
        f64::NAN.to_bits()
    } else {
        v.to_bits()
    }
}

fn consts(set: &CheckedPolicySet, h: &mut H<'_>, args: &[Const]) {
    for a in args {
        match a {
            Const::Bool(v) => (0u8, u64::from(*v)).hash(h),
            Const::Int(i) => (1u8, *i as u64).hash(h),
            Const::Float(f) => (2u8, float_bits(*f)).hash(h),
            Const::Str(s) => (3u8, set.strings.resolve(*s)).hash(h),
            Const::Priority(p) => (4u8, p.as_str()).hash(h),
        }
    }
}

/// The digest of decision `d` of request `i`: every field `--engine both` compares
/// (the fallbacks through the plan, which determines them for a given registry),
/// 128 bits.
pub(crate) fn digest(set: &CheckedPolicySet, i: u64, d: &Decision, buf: &mut Vec<u8>) -> u128 {
    // Destructured without `..`: a new field of `Decision` must be added here.
    let Decision {
        route,
        rule,
        split,
        target,
        strategy,
        endpoint,
        model,
        plan,
        rest,
        retries,
        backoff_ms,
        fallback_on,
        priority,
        cache,
        hold_off_peak,
        reject,
        state_updates,
        call,
        names: _,
    } = d;
    buf.clear();
    let h = &mut H(buf);
    i.hash(h);
    for s in [route, rule, target, strategy, endpoint, model] {
        s.as_deref().hash(h);
    }
    split
        .as_ref()
        .map(|s| (s.arm, s.bucket, s.key_present, s.rolled_back))
        .hash(h);
    // The whole plan: an unordered rest (a lazy decision) digests as its order.
    match rest {
        None => plan.hash(h),
        Some(r) => PlanRest::whole(plan, Some(r)).hash(h),
    }
    (retries, backoff_ms).hash(h);
    fallback_on.hash(h);
    priority.as_str().hash(h);
    cache.map(|c| (c.on, c.ttl_ms, c.exact)).hash(h);
    hold_off_peak.hash(h);
    reject.as_ref().map(|r| (r.status, &r.message)).hash(h);
    state_updates.len().hash(h);
    for u in state_updates {
        (&*u.endpoint, &*u.strategy, u.event).hash(h);
        u.slots.len().hash(h);
        for (k, v) in &u.slots {
            (k, float_bits(*v)).hash(h);
        }
    }
    match call {
        None => 0u8.hash(h),
        Some(c) => {
            // By name and content, not by index or interned id: those depend on the
            // rest of the set, the decision does not.
            let strategy = c
                .strategy
                .map(|s| set.strategies.get(s as usize).map(|s| s.name.as_str()));
            (1u8, strategy, &c.candidates).hash(h);
            consts(set, h, &c.args);
        }
    }
    xxh3_128(buf)
}

#[cfg(test)]
mod tests;
