//! [`StatsStore`]: every endpoint's live slot plus its static facts, and the
//! [`StatsSnapshot`] a decision reads.
//!
//! What never changes while the gateway runs (endpoint ids, prices per token,
//! leaderboard scores, latency targets) is computed once here. A decision reads the
//! live slots in place through [`LiveStats`] ([`StatsStore::live`]): only the
//! endpoints the policy looks at, when it looks, with the strategy state cloned (under
//! the endpoint's own mutex) only for slots that hold some, and one quality score
//! (the request's task, the only one `endpoint.quality` can read) instead of the
//! whole leaderboard row. A whole [`StatsSnapshot`] is built only for
//! `/admin/endpoints`, logs and tests.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::{Instant, SystemTime};

use super::state::StateTable;
use super::EndpointSlot;
use crate::config::Config;
use crate::policy::features::{LiveNumber, StateSink};
use crate::policy::interp::StateUpdate;
use crate::policy::registry::{EndpointRef, Registry};
use crate::policy::{EndpointStats, EpStats, StatsSnapshot, StatsSource};

/// Source of [`StatsStore`] ids (0 is never handed out).
static NEXT_STORE_ID: AtomicU64 = AtomicU64::new(1);

/// What the store knows about one endpoint that does not change while it runs.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct EndpointInfo {
    /// Endpoint id (registry order gives its index).
    pub id: String,
    /// USD per input token (the provider's price per 1M tokens / 1e6); `None` leaves
    /// the registry's price to the interpreter.
    pub cost_in_per_token: Option<f64>,
    /// USD per output token, likewise.
    pub cost_out_per_token: Option<f64>,
    /// Leaderboard scores by task category, in [0, 1].
    pub quality: BTreeMap<String, f64>,
    /// Successes slower than this many milliseconds count h = 0.5 in health.
    pub latency_target_ms: Option<u64>,
}

/// Statistics of every endpoint, indexed like the routing registry's endpoints.
#[derive(Debug)]
pub struct StatsStore {
    infos: Vec<EndpointInfo>,
    slots: Vec<EndpointSlot>,
    index: HashMap<String, usize>,
    /// Strategy state of every endpoint.
    state: StateTable,
    /// Strategy state writes so far ([`StatsStore::set_state`]).
    state_writes: AtomicU64,
    /// Unique among the stores of this process, for [`StatsStore::live_for`]'s cache.
    id: u64,
    /// Whether every endpoint is available, kept by the endpoints.
    unavailable: std::sync::Arc<super::Unavailability>,
}

impl StatsStore {
    /// A store for endpoints named `ids` (registry order), all at their initial values,
    /// without prices, scores or latency targets.
    pub fn new(ids: Vec<String>) -> StatsStore {
        StatsStore::with_endpoints(
            ids.into_iter()
                .map(|id| EndpointInfo {
                    id,
                    ..EndpointInfo::default()
                })
                .collect(),
        )
    }

    /// A store for `infos` (registry order), with the default breaker thresholds.
    pub fn with_endpoints(infos: Vec<EndpointInfo>) -> StatsStore {
        StatsStore::with_breaker(infos, crate::config::BreakerConfig::default())
    }

    /// A store for `infos` (registry order) whose circuit breakers and health
    /// recovery follow `breaker`.
    pub fn with_breaker(
        infos: Vec<EndpointInfo>,
        breaker: crate::config::BreakerConfig,
    ) -> StatsStore {
        let unavailable = std::sync::Arc::new(super::Unavailability::default());
        let slots = infos
            .iter()
            .map(|i| {
                let target = i.latency_target_ms.map(|t| t as f64);
                EndpointSlot::sharing(target, breaker, unavailable.clone())
            })
            .collect();
        let index = infos
            .iter()
            .enumerate()
            .map(|(i, e)| (e.id.clone(), i))
            .collect();
        StatsStore {
            state: StateTable::new(infos.len()),
            infos,
            slots,
            index,
            state_writes: AtomicU64::new(0),
            id: NEXT_STORE_ID.fetch_add(1, Ordering::Relaxed),
            unavailable,
        }
    }

    /// A store for every endpoint of `config.models`, in config order (the order of
    /// the routing registry and the policy registry, so endpoint indices agree), with
    /// prices (config `pricing`, USD per 1M tokens, stored per token), latency targets
    /// (endpoint `latency_target_ms`), quality scores (`quality.leaderboard`: the
    /// endpoint's upstream model's row, else its logical model's) and the `breaker:`
    /// thresholds. Endpoints whose provider is not configured are skipped, as the
    /// registry skips them.
    pub fn from_config(config: &Config) -> StatsStore {
        let infos = config
            .models
            .iter()
            .flat_map(|m| m.endpoints.iter().map(move |e| (m, e)))
            .filter_map(|(m, e)| {
                let provider = config.providers.iter().find(|p| p.name == e.provider)?;
                let pricing = provider.pricing;
                Some(EndpointInfo {
                    id: e.id.to_string(),
                    cost_in_per_token: Some(pricing.input_per_mtok / 1e6),
                    cost_out_per_token: Some(pricing.output_per_mtok / 1e6),
                    quality: config
                        .quality
                        .scores_for(&e.model, &m.name)
                        .cloned()
                        .unwrap_or_default(),
                    latency_target_ms: e.latency_target_ms,
                })
            })
            .collect();
        StatsStore::with_breaker(infos, config.breaker)
    }

    /// The slot of endpoint index `i`.
    pub fn slot(&self, i: usize) -> Option<&EndpointSlot> {
        self.slots.get(i)
    }

    /// The static facts of endpoint index `i`.
    pub fn info(&self, i: usize) -> Option<&EndpointInfo> {
        self.infos.get(i)
    }

    /// Number of endpoints.
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    /// Whether the store has no endpoints.
    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// The index of endpoint `id`.
    pub fn index(&self, id: &str) -> Option<usize> {
        self.index.get(id).copied()
    }

    /// The index of the endpoint with (registry) index `index` and id `id`: `index`
    /// itself when the ids agree (the registry and the store share one index space),
    /// else the index of `id`.
    pub fn resolve(&self, index: usize, id: &str) -> Option<usize> {
        match self.infos.get(index) {
            Some(info) if info.id == id => Some(index),
            _ => self.index(id),
        }
    }

    /// Sets strategy state slots of endpoint `i` (slot name → value; other slots
    /// keep their values) and counts the write ([`StatsStore::state_writes`]); an
    /// unknown index is ignored.
    pub fn set_state<K: AsRef<str>>(&self, i: usize, strategy: &str, slots: &BTreeMap<K, f64>) {
        if i < self.slots.len() {
            self.state.set(i, strategy, slots);
            self.state_writes.fetch_add(1, Ordering::Release);
        }
    }

    /// How many strategy state writes [`StatsStore::set_state`] has made: a decision
    /// that read the state after this count was `n`, when the count is still `n`,
    /// saw every write.
    pub fn state_writes(&self) -> u64 {
        self.state_writes.load(Ordering::Acquire)
    }

    /// A snapshot of every endpoint at `now` with every quality score (for
    /// `/admin/endpoints`, logs and `dry-run --stats` files).
    pub fn snapshot(&self, now: SystemTime) -> StatsSnapshot {
        self.build(now, None)
    }

    /// A snapshot for deciding a request of task category `task`: as
    /// [`StatsStore::snapshot`] but with only that category's quality score, the only
    /// one a policy can read for the request.
    pub fn snapshot_for_task(&self, now: SystemTime, task: &str) -> StatsSnapshot {
        self.build(now, Some(task))
    }

    /// The statistics of every endpoint read in place at `now` ([`LiveStats`]): what
    /// a decision reads, with nothing copied up front.
    pub fn live(&self, now: SystemTime) -> LiveStats<'_> {
        LiveStats {
            store: self,
            now_ms: super::unix_ms(now),
            clock: Instant::now(),
            aligned: false,
        }
    }

    /// As [`StatsStore::live`], for decisions on policies checked against
    /// `registry`: when the registry's endpoints are this store's, in the same order
    /// (as when both come from one config), the [`LiveStats`] takes the index a
    /// decision passes as is, without comparing the endpoint's id per read. The
    /// comparison (one pass over the endpoints) runs once per registry and store:
    /// `aligned` keeps its result (pass a cell that lives with `registry`, such as
    /// the policy snapshot's); a cell filled for another store is not trusted, the
    /// comparison then runs again.
    pub fn live_for(
        &self,
        now: SystemTime,
        registry: &Registry,
        aligned: &OnceLock<(u64, bool)>,
    ) -> LiveStats<'_> {
        let (id, ok) = *aligned.get_or_init(|| (self.id, self.aligned_with(registry)));
        let ok = if id == self.id {
            ok
        } else {
            self.aligned_with(registry)
        };
        LiveStats {
            aligned: ok,
            ..self.live(now)
        }
    }

    /// Whether endpoint `i` of `registry` is endpoint `i` here, for every `i`.
    pub fn aligned_with(&self, registry: &Registry) -> bool {
        let mut n = 0;
        for e in registry.endpoints() {
            match self.infos.get(e.index) {
                Some(info) if info.id == e.endpoint.id => n += 1,
                _ => return false,
            }
        }
        n == self.infos.len()
    }

    fn build(&self, now: SystemTime, task: Option<&str>) -> StatsSnapshot {
        let (now_ms, clock) = (super::unix_ms(now), Instant::now());
        let endpoints = (0..self.slots.len())
            .map(|i| {
                (
                    self.infos[i].id.clone(),
                    self.stats_at(i, now_ms, clock, task),
                )
            })
            .collect();
        StatsSnapshot { endpoints }
    }

    /// Endpoint `i`'s statistics as policies see them, with its prices and its
    /// quality scores (only `task`'s when given).
    fn stats_at(&self, i: usize, now_ms: u64, clock: Instant, task: Option<&str>) -> EndpointStats {
        let info = &self.infos[i];
        let mut st: EndpointStats = self.slots[i].view_at(now_ms, clock);
        st.cost_in_per_token = info.cost_in_per_token;
        st.cost_out_per_token = info.cost_out_per_token;
        st.state = self.state.all_of(i);
        st.quality = match task {
            None => info.quality.clone(),
            Some(t) => info
                .quality
                .get_key_value(t)
                .map(|(k, v)| (k.clone(), *v))
                .into_iter()
                .collect(),
        };
        st
    }
}

/// The gateway records a decision's `on pick` updates here
/// ([`crate::policy::interp::Decision::record_state`]): each to its endpoint, found by
/// the update's registry index and id ([`StatsStore::resolve`]); an endpoint the
/// store does not know is skipped.
impl StateSink for &StatsStore {
    fn record(&mut self, u: &StateUpdate) {
        if let Some(i) = self.resolve(u.index, &u.endpoint) {
            self.set_state(i, &u.strategy, &u.slots);
        }
    }
}

/// The live statistics of a [`StatsStore`] as a decision's [`StatsSource`]: each
/// endpoint the policy looks at is read from its slot's atomics when it looks, at
/// one `now` for the whole decision. A decision over a model of N endpoints thus
/// reads N slots, not every endpoint of every model, and allocates nothing: strategy
/// state is read in place, one atomic per candidate and slot
/// ([`StatsSource::states`]).
///
/// The registry index the policy passes is the store's index (the registry, the
/// statistics and the policy registry share one endpoint index space); an index
/// whose id does not match (a registry that is not the store's) falls back to the
/// id, and an unknown endpoint reads as the defaults, as in a [`StatsSnapshot`].
/// Made by [`StatsStore::live_for`] for a registry known to be the store's, it
/// takes the index without comparing ids.
#[derive(Debug, Clone, Copy)]
pub struct LiveStats<'s> {
    store: &'s StatsStore,
    now_ms: u64,
    clock: Instant,
    /// The policy registry's indices are this store's ([`StatsStore::aligned_with`]).
    aligned: bool,
}

impl LiveStats<'_> {
    #[inline]
    fn resolve(&self, index: usize, id: &str) -> Option<usize> {
        if self.aligned && index < self.store.slots.len() {
            return Some(index);
        }
        self.store.resolve(index, id)
    }

    /// Where `eps` starts in the store when its endpoints are the store's run of
    /// consecutive indices from there (a model's endpoints, none left out) and the
    /// indices are the registry's: read as one run, with one bounds check instead of
    /// a lookup and checks per endpoint (about 23 instructions each at a model's
    /// 128, issue 17). `None` otherwise, and for an empty list.
    #[inline]
    fn run_start(&self, eps: &[EndpointRef<'_>]) -> Option<usize> {
        let first = eps.first()?.index;
        let consecutive = eps
            .iter()
            .enumerate()
            .all(|(k, e)| e.index.wrapping_sub(k) == first);
        (self.aligned && consecutive).then_some(first)
    }

    /// Live number `n` of each endpoint of `eps` into `out`, read by `read` from the
    /// endpoint's slot (an endpoint the store does not hold reads as unknown).
    #[inline]
    fn column(
        &self,
        eps: &[EndpointRef<'_>],
        n: LiveNumber,
        out: &mut [f64],
        read: impl Fn(&EndpointSlot) -> f64,
    ) {
        let run = self
            .run_start(eps)
            .and_then(|at| self.store.slots.get(at..at.checked_add(eps.len())?));
        if let Some(slots) = run {
            for (v, slot) in out.iter_mut().zip(slots) {
                *v = read(slot);
            }
            return;
        }
        for (v, e) in out.iter_mut().zip(eps) {
            *v = match self.resolve(e.index, &e.endpoint.id) {
                Some(i) => read(&self.store.slots[i]),
                None => EpStats::UNKNOWN.number(n),
            };
        }
    }
}

impl StatsSource for LiveStats<'_> {
    fn stats(&self, index: usize, id: &str, task: &str) -> EpStats {
        let Some(i) = self.resolve(index, id) else {
            return EpStats::default();
        };
        let info = &self.store.infos[i];
        let mut st = self.store.slots[i].numbers_at(self.now_ms, self.clock);
        st.cost_in_per_token = info.cost_in_per_token;
        st.cost_out_per_token = info.cost_out_per_token;
        st.quality = info.quality.get(task).copied().unwrap_or(0.0);
        st
    }

    fn state(
        &self,
        index: usize,
        id: &str,
        strategy: &str,
        f: &mut dyn FnMut(&BTreeMap<String, f64>),
    ) {
        if let Some(m) = self
            .resolve(index, id)
            .and_then(|i| self.store.state.strategy_of(i, strategy))
        {
            f(&m);
        }
    }

    fn states(
        &self,
        eps: &[EndpointRef<'_>],
        strategy: &str,
        slots: &[&str],
        out: &mut [Option<f64>],
    ) {
        let n = slots.len();
        if let [slot] = slots {
            // One slot (a ranking reads its state a column at a time): no stride.
            if let Some(col) = self.store.state.column(strategy, slot) {
                // The store's indices are the registry's and `eps` a run of
                // consecutive ones (a model's endpoints, none left out): read as one
                // run (about 23 instructions per endpoint one by one, issue 17).
                let run = self.run_start(eps).and_then(|at| col.run(at, eps.len()));
                if let Some(run) = run {
                    for (cell, v) in out.iter_mut().zip(run) {
                        *cell = v;
                    }
                    return;
                }
                for (cell, e) in out.iter_mut().zip(eps) {
                    if let Some(i) = self.resolve(e.index, &e.endpoint.id) {
                        *cell = col.get(i);
                    }
                }
            }
            return;
        }
        for (j, slot) in slots.iter().enumerate() {
            let Some(col) = self.store.state.column(strategy, slot) else {
                continue;
            };
            for (k, e) in eps.iter().enumerate() {
                if let (Some(i), Some(cell)) = (
                    self.resolve(e.index, &e.endpoint.id),
                    out.get_mut(k * n + j),
                ) {
                    *cell = col.get(i);
                }
            }
        }
    }

    fn numbers(&self, eps: &[EndpointRef<'_>], n: LiveNumber, out: &mut [f64]) {
        // One loop per number, so the number is not matched again per endpoint.
        let now = self.now_ms;
        match n {
            LiveNumber::Health => {
                self.column(eps, n, out, |s| s.number_at(LiveNumber::Health, now))
            }
            LiveNumber::LatencyEwmaMs => {
                self.column(eps, n, out, |s| s.number_at(LiveNumber::LatencyEwmaMs, now));
            }
            LiveNumber::TtftEwmaMs => {
                self.column(eps, n, out, |s| s.number_at(LiveNumber::TtftEwmaMs, now));
            }
            LiveNumber::Capacity => {
                self.column(eps, n, out, |s| s.number_at(LiveNumber::Capacity, now));
            }
            LiveNumber::ErrorRate => {
                self.column(eps, n, out, |s| s.number_at(LiveNumber::ErrorRate, now));
            }
        }
    }

    fn retain_available(&self, v: &mut smallvec::SmallVec<[EndpointRef<'_>; 8]>) {
        // No breaker open or half-open and no throttle holding: all are available,
        // without reading each endpoint's (the usual case).
        if self.store.unavailable.none_at(self.now_ms) {
            return;
        }
        crate::policy::features::retain_where(v, |e| self.available(e.index, &e.endpoint.id));
    }

    #[inline]
    fn available(&self, index: usize, id: &str) -> bool {
        self.resolve(index, id)
            .is_none_or(|i| self.store.slots[i].available_at(self.now_ms, self.clock))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn store() -> StatsStore {
        StatsStore::with_endpoints(vec![
            EndpointInfo {
                id: "a".into(),
                cost_in_per_token: Some(2.5e-6),
                cost_out_per_token: Some(1e-5),
                quality: [("chat".to_string(), 0.9), ("code".to_string(), 0.8)].into(),
                latency_target_ms: Some(100),
            },
            EndpointInfo {
                id: "b".into(),
                ..EndpointInfo::default()
            },
        ])
    }

    #[test]
    fn snapshot_carries_static_and_live_parts() {
        let s = store();
        s.slot(0).unwrap().record(Duration::from_millis(300), true);
        let snap = s.snapshot(SystemTime::now());
        let a = &snap.endpoints["a"];
        assert_eq!(a.cost_in_per_token, Some(2.5e-6));
        assert_eq!(a.quality.len(), 2);
        assert_eq!(a.latency_ewma_ms, 300.0);
        // Health recovers toward 1 with time (half-life 60 s: about 6e-7 per ms), and
        // the snapshot may be taken a few milliseconds after the outcome on a loaded
        // machine; exact equality failed whenever a millisecond passed between them.
        assert!(
            (a.health - 0.95).abs() < 1e-4,
            "slower than the 100 ms target: {}",
            a.health
        );
        let b = &snap.endpoints["b"];
        assert_eq!(b.cost_in_per_token, None);
        assert!(b.quality.is_empty());
        let task = s.snapshot_for_task(SystemTime::now(), "code");
        assert_eq!(
            task.endpoints["a"].quality,
            [("code".to_string(), 0.8)].into()
        );
        assert!(
            s.snapshot_for_task(SystemTime::now(), "tool_use").endpoints["a"]
                .quality
                .is_empty()
        );
    }

    /// A state column or a live number read as one run (aligned indices,
    /// consecutive candidates) gives what the endpoint-by-endpoint reading gives, and lists that are not one
    /// run (reversed, with a gap, a repeat whose first and last span the list's
    /// length, past the store's end) are read one by one.
    #[test]
    fn columns_read_as_a_run_equal_the_one_by_one_reading() {
        let reg = Registry::example();
        let all: Vec<EndpointRef<'_>> = reg.endpoints().collect();
        let s = StatsStore::with_endpoints(
            all.iter()
                .map(|e| EndpointInfo {
                    id: e.endpoint.id.clone(),
                    ..EndpointInfo::default()
                })
                .collect(),
        );
        // Every other endpoint holds a value.
        for i in (0..all.len()).step_by(2) {
            s.set_state(i, "wrr", &BTreeMap::from([("served", i as f64 + 0.5)]));
        }
        let now = SystemTime::now();
        let read = |aligned: bool, eps: &[EndpointRef<'_>]| {
            let live = LiveStats {
                aligned,
                ..s.live(now)
            };
            let mut out = vec![None; eps.len()];
            live.states(eps, "wrr", &["served"], &mut out);
            out
        };
        let pick = |ix: &[usize]| -> Vec<EndpointRef<'_>> { ix.iter().map(|&i| all[i]).collect() };
        let n = all.len();
        let lists: Vec<Vec<EndpointRef<'_>>> = vec![
            all.clone(),
            pick(&[1, 2, 3]),
            pick(&[3, 2, 1]),
            pick(&[0, 2, 3]),
            pick(&[0, 0, 2]),
            pick(&[n - 1]),
            Vec::new(),
        ];
        // Every third endpoint has answered, at its own latency.
        for i in (0..all.len()).step_by(3) {
            s.slot(i)
                .unwrap()
                .record(Duration::from_millis(10 * i as u64 + 5), true);
        }
        let numbers = |aligned: bool, eps: &[EndpointRef<'_>], n: LiveNumber| {
            let live = LiveStats {
                aligned,
                ..s.live(now)
            };
            let mut out = vec![f64::NAN; eps.len()];
            live.numbers(eps, n, &mut out);
            out.iter().map(|x| x.to_bits()).collect::<Vec<u64>>()
        };
        for eps in &lists {
            for n in [LiveNumber::LatencyEwmaMs, LiveNumber::Health] {
                assert_eq!(
                    numbers(true, eps, n),
                    numbers(false, eps, n),
                    "{n:?} {:?}",
                    ids(eps)
                );
            }
            let expected: Vec<Option<f64>> = eps
                .iter()
                .map(|e| (e.index % 2 == 0).then_some(e.index as f64 + 0.5))
                .collect();
            assert_eq!(read(true, eps), expected, "aligned {:?}", ids(eps));
            assert_eq!(read(false, eps), expected, "one by one {:?}", ids(eps));
        }
    }

    fn ids(eps: &[EndpointRef<'_>]) -> Vec<usize> {
        eps.iter().map(|e| e.index).collect()
    }

    /// The shortcut of `retain_available` (no breaker open or half-open, no throttle
    /// holding: nothing to read) never keeps an endpoint the endpoint-by-endpoint
    /// reading drops: through a throttle, its end, a breaker opening, its probe and
    /// its closing, the kept endpoints equal those `available` accepts.
    #[test]
    fn retain_available_keeps_exactly_the_available_endpoints_through_breakers_and_throttles() {
        let reg = Registry::example();
        let eps: Vec<EndpointRef<'_>> = reg.endpoints().collect();
        let s = StatsStore::with_endpoints(
            eps.iter()
                .map(|e| EndpointInfo {
                    id: e.endpoint.id.clone(),
                    ..EndpointInfo::default()
                })
                .collect(),
        );
        let (t0, clock) = (SystemTime::now(), Instant::now());
        let check = |now: SystemTime, clock: Instant, what: &str| -> Vec<String> {
            let live = LiveStats {
                clock,
                ..s.live(now)
            };
            let mut kept: smallvec::SmallVec<[EndpointRef<'_>; 8]> = eps.iter().copied().collect();
            live.retain_available(&mut kept);
            let expected: Vec<String> = eps
                .iter()
                .filter(|e| live.available(e.index, &e.endpoint.id))
                .map(|e| e.endpoint.id.clone())
                .collect();
            let kept: Vec<String> = kept.iter().map(|e| e.endpoint.id.clone()).collect();
            assert_eq!(kept, expected, "{what}");
            kept
        };
        assert_eq!(check(t0, clock, "fresh").len(), eps.len());
        // A throttle holds for 2 s, then ends.
        s.slot(1).unwrap().throttle(Duration::from_secs(2), t0);
        assert_eq!(check(t0, clock, "throttled").len(), eps.len() - 1);
        let later = t0 + Duration::from_secs(3);
        assert_eq!(check(later, clock, "throttle over").len(), eps.len());
        // Failures open endpoint 0's breaker (cooldown 30 s by default).
        let slot = s.slot(0).unwrap();
        for _ in 0..20 {
            let _ = slot.record_outcome(Duration::from_millis(5), false, false, later, clock);
        }
        assert_eq!(check(later, clock, "open").len(), eps.len() - 1);
        // After the cooldown it is offered again, then taken by its probe.
        let after = clock + Duration::from_secs(31);
        assert_eq!(check(later, after, "half-open").len(), eps.len());
        let (admission, _) = slot.breaker().admit(after);
        assert_eq!(admission, super::super::breaker::Admission::Probe);
        assert_eq!(check(later, after, "probing").len(), eps.len() - 1);
        // The probe succeeds: closed, and the shortcut applies again.
        let _ = slot.record_outcome(Duration::from_millis(5), true, true, later, after);
        assert_eq!(check(later, after, "closed").len(), eps.len());
        assert!(s.unavailable.none_at(super::super::unix_ms(later)));
    }

    /// A column of live numbers (`StatsSource::numbers`, what a compiled ranking
    /// reads instead of each candidate's whole statistics) equals the same number of
    /// `stats`, for every field it serves, for endpoints found by index, found by id
    /// (the registry's order differs from the store's) and unknown to the store.
    #[test]
    fn number_columns_equal_the_whole_statistics_field_by_field() {
        let reg = Registry::example();
        let ids: Vec<String> = reg.endpoints().map(|e| e.endpoint.id.clone()).collect();
        // The store holds the registry's endpoints but the first, in reverse order.
        let s = StatsStore::with_endpoints(
            ids.iter()
                .skip(1)
                .rev()
                .map(|id| EndpointInfo {
                    id: id.clone(),
                    ..EndpointInfo::default()
                })
                .collect(),
        );
        let now = SystemTime::now();
        for (i, ms) in [(0, 120), (1, 40), (2, 900)] {
            let slot = s.slot(i).unwrap();
            slot.record(Duration::from_millis(ms), i != 1);
            slot.record_ttft(Duration::from_millis(ms / 3));
        }
        s.slot(1).unwrap().record_capacity(
            super::super::ratelimit::Capacity {
                fraction: 0.25,
                resets_in: Some(Duration::from_secs(60)),
            },
            now,
        );
        s.slot(2).unwrap().record_capacity(
            super::super::ratelimit::Capacity {
                fraction: 0.5,
                resets_in: None,
            },
            now,
        );
        let live = s.live(now);
        let eps: Vec<EndpointRef<'_>> = reg.endpoints().collect();
        let mut served = 0;
        for (_, f, _, _) in crate::policy::checked::EpField::NAMED {
            let Some(n) = LiveNumber::of(f) else {
                continue;
            };
            let mut out = vec![-1.0; eps.len()];
            live.numbers(&eps, n, &mut out);
            served += 1;
            for (e, v) in eps.iter().zip(&out) {
                let whole = live.stats(e.index, &e.endpoint.id, "chat").number(n);
                assert_eq!(v.to_bits(), whole.to_bits(), "{f:?} of {}", e.endpoint.id);
            }
        }
        assert_eq!(served, 5, "health, latency, TTFT, capacity, error rate");
    }

    #[test]
    fn endpoints_are_indexed_in_order_and_offered() {
        let s = store();
        assert_eq!(s.index("b"), Some(1));
        let snap = s.snapshot(SystemTime::now());
        assert!(snap.endpoints["a"].available && snap.endpoints["b"].available);
    }

    #[test]
    fn from_config_reads_prices_scores_and_targets() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("lb.yaml"),
            "m: { chat: 0.5 }\nx-1: { chat: 0.9 }\n",
        )
        .unwrap();
        let yaml = "quality: { leaderboard: lb.yaml }\nproviders: { p: { kind: mock, pricing: { input_per_mtok: 3, output_per_mtok: 15 } } }\nmodels: { m: { endpoints: [ { provider: p, model: x-1, latency_target_ms: 80 }, { provider: p, model: x-2 } ] } }\n";
        let c = crate::config::parse_str(yaml, Some(&dir.path().join("s.yaml"))).unwrap();
        let s = StatsStore::from_config(&c);
        let snap = s.snapshot(SystemTime::now());
        let one = &snap.endpoints["p/x-1"];
        assert_eq!(one.cost_in_per_token, Some(3e-6));
        assert_eq!(one.cost_out_per_token, Some(15e-6));
        assert_eq!(one.quality["chat"], 0.9, "upstream model row");
        assert_eq!(
            snap.endpoints["p/x-2"].quality["chat"], 0.5,
            "logical model row"
        );
        assert_eq!(s.info(0).unwrap().latency_target_ms, Some(80));
        assert_eq!(s.info(1).unwrap().latency_target_ms, None);
    }
}
