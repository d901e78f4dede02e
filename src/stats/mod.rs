//! Endpoint statistics: what the routing strategies read, updated from every outcome.
//!
//! One slot per endpoint holds atomics only (EWMAs stored as `f64` bits and updated by
//! compare-and-swap), so recording an outcome never takes a lock shared with other
//! endpoints or with the request path. Strategy state (for example Exp3 weights) is a
//! small map per endpoint behind its own mutex, touched only by strategies that
//! declare state.
//!
//! Formulas (seed 001, "Egress and Health Monitoring" and "Routing Strategies"):
//! - latency and TTFT: EWMA with α = 0.3, the first sample taken as is;
//! - health H(p,t) = α·h + (1−α)·H(p,t−1), α = 0.1, h = 1 on success, 0 on failure;
//! - error rate: EWMA (α = 0.1) of 1 on failure, 0 on success;
//! - capacity C from rate-limit headers ([`ratelimit`]), back to 1 once the limit
//!   resets.

pub mod ratelimit;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::policy::{EndpointStats, StatsSnapshot};

/// EWMA weight of latency and TTFT samples (seed 001, least-latency: α = 0.3).
pub const LATENCY_ALPHA: f64 = 0.3;
/// EWMA weight of health and error-rate samples (seed 001, health: α = 0.1).
pub const HEALTH_ALPHA: f64 = 0.1;

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
    state: Mutex<BTreeMap<String, BTreeMap<String, f64>>>,
}

impl Default for EndpointSlot {
    fn default() -> Self {
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
            state: Mutex::new(BTreeMap::new()),
        }
    }
}

fn unix_ms(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

impl EndpointSlot {
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
    pub fn record(&self, latency: Duration, success: bool) {
        let first = self.samples.fetch_add(1, Ordering::Relaxed) == 0;
        if success {
            self.latency_ms
                .ewma(latency.as_secs_f64() * 1e3, LATENCY_ALPHA, first);
        }
        let h = if success { 1.0 } else { 0.0 };
        self.health.ewma(h, HEALTH_ALPHA, false);
        self.error_rate.ewma(1.0 - h, HEALTH_ALPHA, false);
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

    /// Sets strategy state slots.
    pub fn set_state(&self, strategy: &str, slots: &BTreeMap<String, f64>) {
        let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        st.entry(strategy.to_string())
            .or_default()
            .extend(slots.iter().map(|(k, v)| (k.clone(), *v)));
    }

    /// The statistics as policies see them, at `now`.
    pub fn view(&self, now: SystemTime) -> EndpointStats {
        let until = self.capacity_until_ms.load(Ordering::Relaxed);
        let capacity = if until != 0 && unix_ms(now) >= until {
            1.0
        } else {
            self.capacity.get()
        };
        EndpointStats {
            available: true,
            health: self.health.get(),
            latency_ewma_ms: self.latency_ms.get(),
            ttft_ewma_ms: self.ttft_ms.get(),
            capacity,
            in_flight: self.in_flight.load(Ordering::Relaxed),
            error_rate: self.error_rate.get(),
            cost_in_per_token: None,
            cost_out_per_token: None,
            quality: BTreeMap::new(),
            state: self.state.lock().unwrap_or_else(|p| p.into_inner()).clone(),
        }
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

/// Statistics of every endpoint, indexed like the routing registry's endpoints.
#[derive(Debug)]
pub struct StatsStore {
    ids: Vec<String>,
    slots: Vec<EndpointSlot>,
}

impl StatsStore {
    /// A store for endpoints named `ids` (registry order), all at their initial values.
    pub fn new(ids: Vec<String>) -> StatsStore {
        let slots = ids.iter().map(|_| EndpointSlot::default()).collect();
        StatsStore { ids, slots }
    }

    /// The slot of endpoint index `i`.
    pub fn slot(&self, i: usize) -> Option<&EndpointSlot> {
        self.slots.get(i)
    }

    /// The index of endpoint `id`.
    pub fn index(&self, id: &str) -> Option<usize> {
        self.ids.iter().position(|x| x == id)
    }

    /// A snapshot of every endpoint at `now`, as policies read it.
    pub fn snapshot(&self, now: SystemTime) -> StatsSnapshot {
        StatsSnapshot {
            endpoints: self
                .ids
                .iter()
                .zip(&self.slots)
                .map(|(id, s)| (id.clone(), s.view(now)))
                .collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ewma_follows_the_formula() {
        let s = EndpointSlot::default();
        s.record(Duration::from_millis(100), true);
        assert_eq!(s.view(SystemTime::now()).latency_ewma_ms, 100.0);
        s.record(Duration::from_millis(200), true);
        let v = s.view(SystemTime::now());
        assert!((v.latency_ewma_ms - 130.0).abs() < 1e-9);
        assert!((v.health - 1.0).abs() < 1e-12);
        s.record(Duration::from_millis(0), false);
        let v = s.view(SystemTime::now());
        assert!((v.health - 0.9).abs() < 1e-12);
        assert!((v.error_rate - 0.1).abs() < 1e-12);
        assert!(
            (v.latency_ewma_ms - 130.0).abs() < 1e-9,
            "failures do not move latency"
        );
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
