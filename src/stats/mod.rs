//! Endpoint statistics: what the routing strategies read, updated from every outcome.
//!
//! One slot per endpoint holds atomics only (EWMAs stored as `f64` bits and updated by
//! compare-and-swap), so recording an outcome never takes a lock shared with other
//! endpoints or with the request path. Strategy state (for example Exp3 weights) is
//! kept by the store, one column of atomics per strategy slot (`state`), touched
//! only by strategies that declare state.
//!
//! Formulas (seed 001, "Egress and Health Monitoring" and "Routing Strategies"):
//! - latency and TTFT: EWMA with α = 0.3, the first sample taken as is;
//! - health H(p,t) = α·h + (1−α)·H(p,t−1), α = 0.1, with h = 1 on success, 0 on
//!   failure, and h = 0.5 for a success slower than the endpoint's
//!   `latency_target_ms` when one is configured ("fractional when degraded"; one
//!   fixed step keeps H readable: an endpoint that is always slow settles at 0.5, well
//!   above seed 001's circuit-opening threshold of 0.3, while failures still drive it
//!   down);
//! - error rate: EWMA (α = 0.1) of 1 on failure, 0 on success;
//! - capacity C from rate-limit headers ([`ratelimit`]), back to 1 once the limit
//!   resets;
//! - recovery: while an endpoint gets no outcomes, its missing health decays with a
//!   half-life (`breaker.recovery_half_life_ms`, default 60 s):
//!   H(t) = 1 − (1 − H)·2^(−Δt / half-life). A strategy that prefers healthy
//!   endpoints therefore tries a failed one again after a while instead of never;
//! - the circuit breaker ([`breaker`]) opens on a failure that leaves H below 0.3 and
//!   lets one probe through after its cooldown; an open endpoint is unavailable.
//!
//! [`StatsStore`] holds one slot per endpoint plus the parts that never change
//! (prices, quality scores) and builds the [`StatsSnapshot`] a decision reads.

pub mod breaker;
pub mod ratelimit;
mod state;
mod store;

pub use breaker::{Admission, Breaker, CircuitState, Transition};
pub use store::{EndpointInfo, LiveStats, StatsStore};

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::policy::features::LiveNumber;
#[cfg(doc)]
use crate::policy::StatsSnapshot;
use crate::policy::{EndpointStats, EpStats};

/// EWMA weight of latency and TTFT samples (seed 001, least-latency: α = 0.3).
pub const LATENCY_ALPHA: f64 = 0.3;
/// EWMA weight of health and error-rate samples (seed 001, health: α = 0.1).
pub const HEALTH_ALPHA: f64 = 0.1;
/// Health sample h of a success slower than the endpoint's latency target.
pub const SLOW_SUCCESS_HEALTH: f64 = 0.5;

/// An `f64` in an `AtomicU64`.
#[derive(Debug)]
struct AtomicF64(AtomicU64);

impl AtomicF64 {
    fn new(v: f64) -> Self {
        AtomicF64(AtomicU64::new(v.to_bits()))
    }

    fn get(&self) -> f64 {
        f64::from_bits(self.0.load(Ordering::Relaxed))
    }

    fn set(&self, v: f64) {
        self.0.store(v.to_bits(), Ordering::Relaxed);
    }

    /// Folds `sample` in with weight `alpha`; `first` makes the sample the value.
    fn ewma(&self, sample: f64, alpha: f64, first: bool) {
        let _ = self
            .0
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |bits| {
                let old = f64::from_bits(bits);
                let new = if first {
                    sample
                } else {
                    alpha * sample + (1.0 - alpha) * old
                };
                Some(new.to_bits())
            });
    }
}

/// What the endpoints of one store share so that a decision can tell, from two
/// loads, that every one of them is available, instead of reading each one's
/// throttle and breaker (issue 17: a model's 128 endpoints per decision, each on
/// its own cache lines). Both are kept by the endpoints as they change.
#[derive(Debug, Default)]
pub struct Unavailability {
    /// Circuit breakers of the store now open or half-open.
    not_closed: std::sync::atomic::AtomicUsize,
    /// The latest Unix ms any endpoint of the store was throttled until (0: none
    /// ever was): at or after it no endpoint is throttled.
    throttled_until_ms: AtomicU64,
}

impl Unavailability {
    /// Whether every endpoint sharing this is available at Unix ms `now_ms`: no
    /// breaker open or half-open and no provider's `Retry-After` still holding.
    /// `false` means some may not be, not that any is not.
    pub fn none_at(&self, now_ms: u64) -> bool {
        self.not_closed.load(Ordering::SeqCst) == 0
            && self.throttled_until_ms.load(Ordering::Relaxed) <= now_ms
    }
}

/// Live statistics of one endpoint.
#[derive(Debug)]
pub struct EndpointSlot {
    latency_ms: AtomicF64,
    ttft_ms: AtomicF64,
    health: AtomicF64,
    error_rate: AtomicF64,
    samples: AtomicU64,
    ttft_samples: AtomicU64,
    in_flight: AtomicU64,
    capacity: AtomicF64,
    /// Unix ms when `capacity` stops applying (0: no reset known).
    capacity_until_ms: AtomicU64,
    /// Successes slower than this (ms) count h = 0.5.
    latency_target_ms: Option<f64>,
    /// Unix ms of the last health update (0: none yet), for recovery.
    health_at_ms: AtomicU64,
    recovery_half_life_ms: f64,
    breaker: Breaker,
    /// Unix ms until which the provider asked not to be sent requests (its
    /// `Retry-After`); 0: no such wait.
    throttled_until_ms: AtomicU64,
    /// Unix ms until which the endpoint is paused because the provider said our
    /// account is out of quota ([`EndpointSlot::out_of_quota`]); 0: never was.
    quota_until_ms: AtomicU64,
    /// What the provider said when it last paused the endpoint for quota, for the
    /// client's error while the pause holds. Locked only when a quota pause begins
    /// and when a request finds only paused endpoints, never on the success path.
    quota_reason: std::sync::Mutex<Option<std::sync::Arc<str>>>,
    /// Shared with the other endpoints of the store (see [`Unavailability`]).
    shared: std::sync::Arc<Unavailability>,
}

impl Default for EndpointSlot {
    fn default() -> Self {
        EndpointSlot::new(None, crate::config::BreakerConfig::default())
    }
}

impl EndpointSlot {
    /// A slot whose successes slower than `latency_target_ms` count as degraded, with
    /// circuit-breaker thresholds and health recovery from `breaker`.
    pub fn new(latency_target_ms: Option<f64>, breaker: crate::config::BreakerConfig) -> Self {
        EndpointSlot::sharing(latency_target_ms, breaker, std::sync::Arc::default())
    }

    /// [`EndpointSlot::new`], whose throttling and breaker are counted in `shared`
    /// with those of the other endpoints of its store.
    pub fn sharing(
        latency_target_ms: Option<f64>,
        breaker: crate::config::BreakerConfig,
        shared: std::sync::Arc<Unavailability>,
    ) -> Self {
        EndpointSlot {
            latency_ms: AtomicF64::new(0.0),
            ttft_ms: AtomicF64::new(0.0),
            health: AtomicF64::new(1.0),
            error_rate: AtomicF64::new(0.0),
            samples: AtomicU64::new(0),
            ttft_samples: AtomicU64::new(0),
            in_flight: AtomicU64::new(0),
            capacity: AtomicF64::new(1.0),
            capacity_until_ms: AtomicU64::new(0),
            latency_target_ms: latency_target_ms.filter(|t| *t > 0.0),
            health_at_ms: AtomicU64::new(0),
            recovery_half_life_ms: breaker.recovery_half_life_ms as f64,
            breaker: Breaker::sharing(breaker, shared.clone()),
            throttled_until_ms: AtomicU64::new(0),
            quota_until_ms: AtomicU64::new(0),
            quota_reason: std::sync::Mutex::new(None),
            shared,
        }
    }
}

/// `health` last updated at Unix ms `at_ms` (0: never), as recovered by `now_ms`:
/// 1 − (1 − H)·2^(−Δt / half-life).
fn recovered(health: f64, at_ms: u64, now_ms: u64, half_life_ms: f64) -> f64 {
    // Full health stays full (1 − 0·x is 1 for every x the power gives): the
    // usual case, with no `exp2` per endpoint per decision.
    if at_ms == 0 || now_ms <= at_ms || half_life_ms <= 0.0 || health == 1.0 {
        return health;
    }
    let dt = (now_ms - at_ms) as f64;
    1.0 - (1.0 - health) * (-dt / half_life_ms).exp2()
}

fn unix_ms(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// Longest provider message kept with a quota pause ([`EndpointSlot::out_of_quota`]),
/// in bytes.
pub const MAX_QUOTA_REASON: usize = 500;

impl EndpointSlot {
    /// The provider asked, at `now`, for `wait` before new requests (`Retry-After` on
    /// a 429 or 503): the endpoint is unavailable until then. A later, shorter wait
    /// does not shorten an earlier one.
    pub fn throttle(&self, wait: Duration, now: SystemTime) {
        let until = unix_ms(now).saturating_add(wait.as_millis() as u64);
        // The store's horizon first: a reader that finds it passed finds this too.
        self.shared
            .throttled_until_ms
            .fetch_max(until, Ordering::Relaxed);
        self.throttled_until_ms.fetch_max(until, Ordering::Relaxed);
    }

    /// The provider said, at `now`, that our account with it is out of quota
    /// (OpenAI's 429 `insufficient_quota`, a 402), in words `reason` (the error's
    /// message, cut to [`MAX_QUOTA_REASON`] bytes): the endpoint is paused for
    /// `wait` as by [`EndpointSlot::throttle`] (no new requests from any client;
    /// the caller picks the breaker's `max_cooldown_ms`), and the pause is
    /// remembered as a quota's, with `reason`, so that a request finding only such
    /// endpoints is told why ([`EndpointSlot::out_of_quota_for`],
    /// [`EndpointSlot::quota_reason`]).
    pub fn out_of_quota(&self, wait: Duration, now: SystemTime, reason: &str) {
        let reason: std::sync::Arc<str> = crate::error::bounded(reason, MAX_QUOTA_REASON).into();
        *self
            .quota_reason
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(reason);
        self.throttle(wait, now);
        let until = unix_ms(now).saturating_add(wait.as_millis() as u64);
        self.quota_until_ms.fetch_max(until, Ordering::Relaxed);
    }

    /// What the provider said when it paused the endpoint for quota
    /// ([`EndpointSlot::out_of_quota`]), while that pause holds at `now`.
    pub fn quota_reason(&self, now: SystemTime) -> Option<std::sync::Arc<str>> {
        self.out_of_quota_for(now)?;
        self.quota_reason
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// How long a pause for an exhausted quota ([`EndpointSlot::out_of_quota`])
    /// still holds at `now`, if one does.
    pub fn out_of_quota_for(&self, now: SystemTime) -> Option<Duration> {
        let until = self.quota_until_ms.load(Ordering::Relaxed);
        let now = unix_ms(now);
        (until > now).then(|| Duration::from_millis(until - now))
    }

    /// How long the provider's last `Retry-After` still holds at `now`, if it does.
    pub fn throttled_for(&self, now: SystemTime) -> Option<Duration> {
        let until = self.throttled_until_ms.load(Ordering::Relaxed);
        let now = unix_ms(now);
        (until > now).then(|| Duration::from_millis(until - now))
    }

    /// [`EndpointSlot::throttled_for`] now. The clock is read only for an endpoint
    /// that has been paused at some time: the request path asks before every
    /// attempt, and a reading costs about 30 ns.
    pub fn throttled_now(&self) -> Option<Duration> {
        if self.throttled_until_ms.load(Ordering::Relaxed) == 0 {
            return None;
        }
        self.throttled_for(SystemTime::now())
    }

    /// The endpoint's circuit breaker.
    pub fn breaker(&self) -> &Breaker {
        &self.breaker
    }

    /// Health at Unix time `now_ms`, with the recovery since the last outcome applied.
    pub fn health_at(&self, now_ms: u64) -> f64 {
        recovered(
            self.health.get(),
            self.health_at_ms.load(Ordering::Relaxed),
            now_ms,
            self.recovery_half_life_ms,
        )
    }

    /// Outcomes recorded so far (successes and failures).
    pub fn samples(&self) -> u64 {
        self.samples.load(Ordering::Relaxed)
    }

    /// One more request is in flight (pair with [`EndpointSlot::leave`]).
    pub fn enter(&self) {
        self.in_flight.fetch_add(1, Ordering::Relaxed);
    }

    /// One request fewer in flight.
    pub fn leave(&self) {
        let _ = self
            .in_flight
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
                Some(n.saturating_sub(1))
            });
    }

    /// One more request is in flight; the guard takes it back when dropped.
    pub fn start(&self) -> InFlight<'_> {
        self.in_flight.fetch_add(1, Ordering::Relaxed);
        InFlight(self)
    }

    /// Records a finished attempt: `latency` to the last byte, `success` or not.
    /// Only successes move the latency EWMA (a failure's latency says nothing about
    /// how fast the endpoint answers).
    pub fn record(&self, latency: Duration, success: bool) {
        let _ = self.record_outcome(latency, success, false, SystemTime::now(), Instant::now());
    }

    /// As [`EndpointSlot::record`], at `now` (`clock` for the breaker), for an attempt
    /// that was the breaker's half-open probe when `probe`; returns the breaker's
    /// state change, if any.
    pub fn record_outcome(
        &self,
        latency: Duration,
        success: bool,
        probe: bool,
        now: SystemTime,
        clock: Instant,
    ) -> Transition {
        let samples = self.samples.fetch_add(1, Ordering::Relaxed) + 1;
        let ms = latency.as_secs_f64() * 1e3;
        if success {
            self.latency_ms.ewma(ms, LATENCY_ALPHA, samples == 1);
        }
        let now_ms = unix_ms(now);
        let sample = self.health_sample(ms, success);
        let last = self.health_at_ms.swap(now_ms, Ordering::Relaxed);
        let half_life = self.recovery_half_life_ms;
        let _ = self
            .health
            .0
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |bits| {
                let base = recovered(f64::from_bits(bits), last, now_ms, half_life);
                Some((HEALTH_ALPHA * sample + (1.0 - HEALTH_ALPHA) * base).to_bits())
            });
        let failed = if success { 0.0 } else { 1.0 };
        self.error_rate.ewma(failed, HEALTH_ALPHA, false);
        self.breaker
            .record(success, probe, self.health.get(), samples, clock)
    }

    /// h for one outcome: 0 failure, 0.5 a success slower than the target, else 1.
    pub fn health_sample(&self, latency_ms: f64, success: bool) -> f64 {
        match (success, self.latency_target_ms) {
            (false, _) => 0.0,
            (true, Some(t)) if latency_ms > t => SLOW_SUCCESS_HEALTH,
            (true, _) => 1.0,
        }
    }

    /// Records a time to first token.
    pub fn record_ttft(&self, ttft: Duration) {
        let first = self.ttft_samples.fetch_add(1, Ordering::Relaxed) == 0;
        self.ttft_ms
            .ewma(ttft.as_secs_f64() * 1e3, LATENCY_ALPHA, first);
    }

    /// Records rate-limit capacity read from response headers at `now`.
    pub fn record_capacity(&self, c: ratelimit::Capacity, now: SystemTime) {
        self.capacity.set(c.fraction);
        let until = c.resets_in.map(|d| unix_ms(now + d)).unwrap_or(0);
        self.capacity_until_ms.store(until, Ordering::Relaxed);
    }

    /// The dynamic statistics as policies see them, at `now` (prices, quality and
    /// strategy state left empty: [`StatsStore`] adds them).
    pub fn view(&self, now: SystemTime) -> EndpointStats {
        self.view_at(unix_ms(now), Instant::now())
    }

    /// [`EndpointSlot::view`] at Unix ms `now_ms` and breaker clock `at`, so a
    /// decision reading many endpoints reads the clocks once.
    pub(crate) fn view_at(&self, now_ms: u64, at: Instant) -> EndpointStats {
        let n = self.numbers_at(now_ms, at);
        EndpointStats {
            available: n.available,
            circuit: n.circuit,
            context_window: None,
            health: n.health,
            latency_ewma_ms: n.latency_ewma_ms,
            ttft_ewma_ms: n.ttft_ewma_ms,
            capacity: n.capacity,
            in_flight: n.in_flight,
            error_rate: n.error_rate,
            cost_in_per_token: None,
            cost_out_per_token: None,
            quality: BTreeMap::new(),
            state: BTreeMap::new(),
        }
    }

    /// The numbers of [`EndpointSlot::view_at`] as a decision reads them (prices
    /// and quality left unset: [`StatsStore`] adds them), without the strategy state
    /// (the store keeps it).
    pub(crate) fn numbers_at(&self, now_ms: u64, at: Instant) -> EpStats {
        let (available, circuit) = self.breaker.offered(at);
        EpStats {
            available: available && !self.throttled_at(now_ms),
            health: self.health_at(now_ms),
            latency_ewma_ms: self.latency_ms.get(),
            ttft_ewma_ms: self.ttft_ms.get(),
            capacity: self.capacity_at(now_ms),
            in_flight: self.in_flight.load(Ordering::Relaxed),
            error_rate: self.error_rate.get(),
            cost_in_per_token: None,
            cost_out_per_token: None,
            quality: 0.0,
            context_window: None,
            circuit: circuit.into(),
        }
    }

    /// Live number `n` of [`EndpointSlot::numbers_at`] at Unix ms `now_ms`, read
    /// alone.
    #[inline]
    pub(crate) fn number_at(&self, n: LiveNumber, now_ms: u64) -> f64 {
        match n {
            LiveNumber::Health => self.health_at(now_ms),
            LiveNumber::LatencyEwmaMs => self.latency_ms.get(),
            LiveNumber::TtftEwmaMs => self.ttft_ms.get(),
            LiveNumber::Capacity => self.capacity_at(now_ms),
            LiveNumber::ErrorRate => self.error_rate.get(),
        }
    }

    /// The capacity estimate at Unix ms `now_ms`: 1 again once the provider's
    /// announced limit window has passed.
    fn capacity_at(&self, now_ms: u64) -> f64 {
        let until = self.capacity_until_ms.load(Ordering::Relaxed);
        if until != 0 && now_ms >= until {
            1.0
        } else {
            self.capacity.get()
        }
    }

    /// Whether strategies are offered the endpoint at Unix ms `now_ms` and breaker
    /// clock `at` ([`EndpointStats::available`] of [`EndpointSlot::view_at`]).
    #[inline]
    pub(crate) fn available_at(&self, now_ms: u64, at: Instant) -> bool {
        !self.throttled_at(now_ms) && self.breaker.available(at)
    }

    fn throttled_at(&self, now_ms: u64) -> bool {
        self.throttled_until_ms.load(Ordering::Relaxed) > now_ms
    }
}

/// Decrements an endpoint's in-flight count when dropped.
#[derive(Debug)]
pub struct InFlight<'a>(&'a EndpointSlot);

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_health_halves_every_half_life_without_outcomes() {
        assert_eq!(recovered(0.2, 0, 10_000, 60_000.0), 0.2, "never updated");
        assert!((recovered(0.2, 1_000, 61_000, 60_000.0) - 0.6).abs() < 1e-9);
        assert!((recovered(0.2, 1_000, 121_000, 60_000.0) - 0.8).abs() < 1e-9);
        assert_eq!(
            recovered(0.2, 5_000, 4_000, 60_000.0),
            0.2,
            "clock went back"
        );
        // A slot whose last failure was long ago reads healthy again, so a strategy
        // that prefers H >= 0.3 tries it again.
        let s = EndpointSlot::default();
        let t0 = UNIX_EPOCH + Duration::from_secs(1_000_000);
        for _ in 0..20 {
            s.record_outcome(Duration::from_millis(5), false, false, t0, Instant::now());
        }
        assert!(s.health_at(unix_ms(t0)) < 0.3);
        assert!(s.health_at(unix_ms(t0 + Duration::from_secs(120))) > 0.7);
    }

    #[test]
    fn a_quota_pause_keeps_the_providers_words_while_it_holds() {
        let s = EndpointSlot::default();
        let now = SystemTime::now();
        assert_eq!(s.quota_reason(now), None);
        s.throttle(Duration::from_secs(5), now);
        assert_eq!(
            s.quota_reason(now),
            None,
            "a Retry-After pause is not a quota's"
        );
        s.out_of_quota(
            Duration::from_secs(60),
            now,
            "You exceeded your current quota",
        );
        assert_eq!(
            s.quota_reason(now + Duration::from_secs(59)).as_deref(),
            Some("You exceeded your current quota")
        );
        assert!(s.throttled_for(now + Duration::from_secs(59)).is_some());
        assert_eq!(s.quota_reason(now + Duration::from_secs(61)), None);
        s.out_of_quota(Duration::from_secs(60), now, &"x".repeat(10_000));
        let kept = s.quota_reason(now).unwrap();
        assert!(kept.len() <= MAX_QUOTA_REASON + 3, "{}", kept.len());
    }

    #[test]
    fn the_policy_view_reports_the_circuit() {
        use crate::policy::Circuit;
        let s = EndpointSlot::default();
        let now = SystemTime::now();
        assert_eq!(s.view(now).circuit, Circuit::Closed);
        for _ in 0..20 {
            s.record_outcome(Duration::from_millis(5), false, false, now, Instant::now());
        }
        let v = s.view(now);
        assert_eq!((v.circuit, v.available), (Circuit::Open, false));
        assert_eq!(v.context_window, None, "the registry's window applies");
    }

    #[test]
    fn ewma_follows_the_formula() {
        // Recorded and read at one fixed time (see slow_successes_count_half).
        let t = SystemTime::now();
        let record = |s: &EndpointSlot, ms: u64, ok: bool| {
            let _ = s.record_outcome(Duration::from_millis(ms), ok, false, t, Instant::now());
        };
        let s = EndpointSlot::default();
        record(&s, 100, true);
        assert_eq!(s.view(t).latency_ewma_ms, 100.0);
        record(&s, 200, true);
        let v = s.view(t);
        assert!((v.latency_ewma_ms - 130.0).abs() < 1e-9);
        assert!((v.health - 1.0).abs() < 1e-12);
        record(&s, 0, false);
        let v = s.view(t);
        assert!((v.health - 0.9).abs() < 1e-12);
        assert!((v.error_rate - 0.1).abs() < 1e-12);
        assert!(
            (v.latency_ewma_ms - 130.0).abs() < 1e-9,
            "failures do not move latency"
        );
    }

    #[test]
    fn slow_successes_count_half() {
        // One fixed time for every record and view: health read a millisecond after
        // a failure has begun to recover (`recovered`), which made this test fail
        // when a read crossed a millisecond (the flake this fixes).
        let t = SystemTime::now();
        let record = |s: &EndpointSlot, ms: u64, ok: bool| {
            let _ = s.record_outcome(Duration::from_millis(ms), ok, false, t, Instant::now());
        };
        let s = EndpointSlot::new(Some(100.0), crate::config::BreakerConfig::default());
        record(&s, 50, true);
        assert_eq!(s.view(t).health, 1.0);
        record(&s, 150, true);
        let v = s.view(t);
        assert!((v.health - 0.95).abs() < 1e-12, "{}", v.health);
        assert_eq!(v.error_rate, 0.0, "slow is not an error");
        record(&s, 150, false);
        assert!((s.view(t).health - 0.855).abs() < 1e-12);
        // Always slow settles at 0.5.
        for _ in 0..400 {
            record(&s, 500, true);
        }
        assert!((s.view(t).health - 0.5).abs() < 1e-9);
        // No target: every success counts 1.
        let plain = EndpointSlot::default();
        record(&plain, 60_000, true);
        assert_eq!(plain.view(t).health, 1.0);
    }

    #[test]
    fn capacity_resets() {
        let s = EndpointSlot::default();
        let now = SystemTime::now();
        s.record_capacity(
            ratelimit::Capacity {
                fraction: 0.1,
                resets_in: Some(Duration::from_secs(10)),
            },
            now,
        );
        assert_eq!(s.view(now).capacity, 0.1);
        assert_eq!(s.view(now + Duration::from_secs(11)).capacity, 1.0);
    }

    #[test]
    fn in_flight_guard() {
        let s = EndpointSlot::default();
        {
            let _a = s.start();
            let _b = s.start();
            assert_eq!(s.view(SystemTime::now()).in_flight, 2);
        }
        assert_eq!(s.view(SystemTime::now()).in_flight, 0);
    }

    #[test]
    fn concurrent_updates_lose_nothing() {
        let s = std::sync::Arc::new(EndpointSlot::default());
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let s = s.clone();
                std::thread::spawn(move || {
                    for _ in 0..10_000 {
                        s.record(Duration::from_millis(50), true);
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(s.samples.load(Ordering::Relaxed), 40_000);
        assert!((s.view(SystemTime::now()).latency_ewma_ms - 50.0).abs() < 1e-9);
    }
}
