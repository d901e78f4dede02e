//! The circuit breaker of one endpoint (seed 001, "Egress and Health Monitoring").
//!
//! ```text
//!            H < open_below (after min_samples outcomes)
//!   Closed ─────────────────────────────────────────────► Open (cooldown c)
//!     ▲                                                     │ c elapsed
//!     │ probe succeeded                                     ▼
//!     └──────────────────────────────────────────────── HalfOpen: one probe
//!                 probe failed: Open again, c doubled up to max_cooldown
//! ```
//!
//! While open, the endpoint is unavailable: strategies do not see it and dispatch
//! skips it in a plan. Once the cooldown has passed it is half-open: exactly one
//! request is let through as the probe (the first to ask, even under concurrency);
//! everyone else still skips it until the probe ends. A probe that ends without an
//! outcome (its client went away) frees the slot for the next request.
//!
//! The state machine takes the time as an argument, so tests drive it with their own
//! clock; the gateway passes `Instant::now()`.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::config::BreakerConfig;

/// The breaker's state as reported in `/admin/endpoints` and metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CircuitState {
    /// Requests flow.
    Closed,
    /// Requests skip the endpoint until the cooldown ends.
    Open,
    /// One probe request is allowed (or in flight).
    HalfOpen,
}

impl CircuitState {
    /// `closed`, `open` or `half_open`.
    pub fn as_str(self) -> &'static str {
        match self {
            CircuitState::Closed => "closed",
            CircuitState::Open => "open",
            CircuitState::HalfOpen => "half_open",
        }
    }

    /// The value of the `switchyard_circuit_state` gauge: 0 closed, 1 open, 2
    /// half-open.
    pub fn gauge(self) -> f64 {
        match self {
            CircuitState::Closed => 0.0,
            CircuitState::Open => 1.0,
            CircuitState::HalfOpen => 2.0,
        }
    }
}

impl From<CircuitState> for crate::policy::Circuit {
    fn from(s: CircuitState) -> Self {
        match s {
            CircuitState::Closed => crate::policy::Circuit::Closed,
            CircuitState::Open => crate::policy::Circuit::Open,
            CircuitState::HalfOpen => crate::policy::Circuit::HalfOpen,
        }
    }
}

/// What [`Breaker::admit`] says about one attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admission {
    /// Closed: send it.
    Allow,
    /// Half-open: send it as the probe; its outcome decides.
    Probe,
    /// Open (or the probe is out): skip this endpoint; retry after the duration.
    Reject(Duration),
}

#[derive(Debug, Clone, Copy)]
enum State {
    Closed,
    Open { until: Instant },
    HalfOpen { probing: bool },
}

#[derive(Debug)]
struct Inner {
    state: State,
    /// The cooldown the next opening uses.
    cooldown: Duration,
    /// The cooldown of the opening in force (or the last one), zero before any.
    opened_for: Duration,
}

/// One endpoint's circuit breaker.
#[derive(Debug)]
pub struct Breaker {
    cfg: BreakerConfig,
    inner: Mutex<Inner>,
    /// Whether `inner.state` is `Closed`, written under the lock after every change:
    /// the common case (closed) is read without the lock, so a decision over many
    /// endpoints takes no lock per endpoint. A reader that sees `true` while a
    /// transition is being made reads the breaker as it was just before it.
    closed: AtomicBool,
    /// The store's count of breakers not closed, kept by every transition.
    shared: Arc<super::Unavailability>,
}

/// What changed in an outcome or admission, for the caller to report.
pub type Transition = Option<CircuitState>;

impl Breaker {
    /// A closed breaker with thresholds `cfg`.
    pub fn new(cfg: BreakerConfig) -> Breaker {
        Breaker::sharing(cfg, Arc::default())
    }

    /// A closed breaker with thresholds `cfg` that counts itself in
    /// `shared.not_closed` while it is open or half-open.
    pub(crate) fn sharing(cfg: BreakerConfig, shared: Arc<super::Unavailability>) -> Breaker {
        Breaker {
            inner: Mutex::new(Inner {
                state: State::Closed,
                cooldown: Duration::from_millis(cfg.cooldown_ms),
                opened_for: Duration::ZERO,
            }),
            cfg,
            closed: AtomicBool::new(true),
            shared,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether the breaker is closed, without the lock (see `closed`).
    fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    /// Sets the state (under the lock `g` of this breaker) and its lock-free mirror,
    /// and counts the breaker in the store's `not_closed` while it is not closed:
    /// counted before the mirror says so and uncounted after, so whoever reads a
    /// count of 0 would also have read every mirror closed.
    fn set(&self, g: &mut Inner, state: State) {
        g.state = state;
        let closed = matches!(state, State::Closed);
        // Only writers hold the lock, so this is the mirror's current value.
        let was = self.closed.load(Ordering::Relaxed);
        if was && !closed {
            self.shared.not_closed.fetch_add(1, Ordering::SeqCst);
        }
        self.closed.store(closed, Ordering::SeqCst);
        if !was && closed {
            self.shared.not_closed.fetch_sub(1, Ordering::SeqCst);
        }
    }

    /// The state at `now` (an open breaker whose cooldown has passed is half-open).
    pub fn state(&self, now: Instant) -> CircuitState {
        if self.is_closed() {
            return CircuitState::Closed;
        }
        match self.lock().state {
            State::Closed => CircuitState::Closed,
            State::Open { until } if now < until => CircuitState::Open,
            State::Open { .. } | State::HalfOpen { .. } => CircuitState::HalfOpen,
        }
    }

    /// Whether strategies are offered the endpoint at `now`: closed, or half-open with
    /// the probe not yet taken.
    #[inline]
    pub fn available(&self, now: Instant) -> bool {
        self.is_closed() || self.available_unless_closed(now)
    }

    /// [`Breaker::available`] past the closed fast path: the state under the lock.
    #[inline(never)]
    fn available_unless_closed(&self, now: Instant) -> bool {
        match self.lock().state {
            State::Closed => true,
            State::Open { until } => now >= until,
            State::HalfOpen { probing } => !probing,
        }
    }

    /// [`Breaker::available`] and [`Breaker::state`] at `now`, under one lock.
    pub fn offered(&self, now: Instant) -> (bool, CircuitState) {
        if self.is_closed() {
            return (true, CircuitState::Closed);
        }
        match self.lock().state {
            State::Closed => (true, CircuitState::Closed),
            State::Open { until } if now < until => (false, CircuitState::Open),
            State::Open { .. } => (true, CircuitState::HalfOpen),
            State::HalfOpen { probing } => (!probing, CircuitState::HalfOpen),
        }
    }

    /// Time until the next probe may go, at `now` (`None`: closed or half-open).
    pub fn next_probe_in(&self, now: Instant) -> Option<Duration> {
        if self.is_closed() {
            return None;
        }
        match self.lock().state {
            State::Open { until } if now < until => Some(until - now),
            _ => None,
        }
    }

    /// The cooldown the next opening will use.
    pub fn cooldown(&self) -> Duration {
        self.lock().cooldown
    }

    /// The cooldown of the opening in force: how long this circuit stays open
    /// before its probe (`None` while closed). The next opening's is
    /// [`Breaker::cooldown`], doubled after each.
    pub fn open_cooldown(&self) -> Option<Duration> {
        if self.is_closed() {
            return None;
        }
        let g = self.lock();
        (!matches!(g.state, State::Closed)).then_some(g.opened_for)
    }

    /// Asks to send one attempt at `now`; a half-open breaker lets exactly one probe
    /// through until that probe ends.
    pub fn admit(&self, now: Instant) -> (Admission, Transition) {
        if self.is_closed() {
            return (Admission::Allow, None);
        }
        let mut g = self.lock();
        match g.state {
            State::Closed => (Admission::Allow, None),
            State::Open { until } if now < until => (Admission::Reject(until - now), None),
            State::Open { .. } => {
                self.set(&mut g, State::HalfOpen { probing: true });
                (Admission::Probe, Some(CircuitState::HalfOpen))
            }
            State::HalfOpen { probing: false } => {
                self.set(&mut g, State::HalfOpen { probing: true });
                (Admission::Probe, None)
            }
            State::HalfOpen { probing: true } => (Admission::Reject(Duration::ZERO), None),
        }
    }

    /// Records the outcome of an attempt at `now`, with the endpoint's health after
    /// it (`health`) and its outcome count (`samples`). `probe`: the attempt was the
    /// half-open probe.
    pub fn record(
        &self,
        success: bool,
        probe: bool,
        health: f64,
        samples: u64,
        now: Instant,
    ) -> Transition {
        let mut g = self.lock();
        let base = Duration::from_millis(self.cfg.cooldown_ms);
        let max = Duration::from_millis(self.cfg.max_cooldown_ms.max(self.cfg.cooldown_ms));
        match (g.state, probe) {
            (State::HalfOpen { .. }, true) if success => {
                self.set(&mut g, State::Closed);
                g.cooldown = base;
                Some(CircuitState::Closed)
            }
            (State::HalfOpen { .. }, true) => {
                let cooldown = g.cooldown;
                self.set(
                    &mut g,
                    State::Open {
                        until: now + cooldown,
                    },
                );
                g.opened_for = cooldown;
                g.cooldown = (cooldown * 2).min(max);
                Some(CircuitState::Open)
            }
            (State::Closed, _)
                if !success && health < self.cfg.open_below && samples >= self.cfg.min_samples =>
            {
                let cooldown = g.cooldown;
                self.set(
                    &mut g,
                    State::Open {
                        until: now + cooldown,
                    },
                );
                g.opened_for = cooldown;
                g.cooldown = (cooldown * 2).min(max);
                Some(CircuitState::Open)
            }
            // Outcomes of requests sent before the breaker opened say nothing new.
            _ => None,
        }
    }

    /// The probe ended without an outcome (its client went away): the next request
    /// may probe.
    pub fn probe_abandoned(&self) {
        let mut g = self.lock();
        if let State::HalfOpen { probing: true } = g.state {
            self.set(&mut g, State::HalfOpen { probing: false });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg() -> BreakerConfig {
        BreakerConfig {
            open_below: 0.3,
            cooldown_ms: 1_000,
            max_cooldown_ms: 3_000,
            min_samples: 5,
            recovery_half_life_ms: 60_000,
        }
    }

    #[test]
    fn opens_below_the_threshold_only_after_enough_samples() {
        let b = Breaker::new(cfg());
        let t = Instant::now();
        assert_eq!(b.record(false, false, 0.1, 4, t), None, "too few samples");
        assert_eq!(b.record(false, false, 0.35, 9, t), None, "above 0.3");
        assert_eq!(
            b.record(true, false, 0.1, 9, t),
            None,
            "a success never opens"
        );
        assert_eq!(
            b.record(false, false, 0.29, 12, t),
            Some(CircuitState::Open)
        );
        assert_eq!(b.state(t), CircuitState::Open);
        assert!(!b.available(t));
        assert_eq!(b.admit(t).0, Admission::Reject(Duration::from_secs(1)));
    }

    #[test]
    fn half_open_lets_exactly_one_probe_through() {
        let b = Breaker::new(cfg());
        let t = Instant::now();
        b.record(false, false, 0.0, 20, t);
        let later = t + Duration::from_millis(1_000);
        assert_eq!(b.state(later), CircuitState::HalfOpen);
        assert!(b.available(later));
        assert_eq!(
            b.admit(later),
            (Admission::Probe, Some(CircuitState::HalfOpen))
        );
        for _ in 0..50 {
            assert_eq!(b.admit(later).0, Admission::Reject(Duration::ZERO));
        }
        assert!(!b.available(later), "the probe is out");
        b.probe_abandoned();
        assert_eq!(
            b.admit(later).0,
            Admission::Probe,
            "an abandoned probe frees the slot"
        );
        assert_eq!(
            b.record(true, true, 0.2, 21, later),
            Some(CircuitState::Closed)
        );
        assert_eq!(b.admit(later).0, Admission::Allow);
        assert_eq!(b.cooldown(), Duration::from_secs(1), "reset on close");
    }

    #[test]
    fn a_failed_probe_doubles_the_cooldown_up_to_the_cap() {
        let b = Breaker::new(cfg());
        let mut t = Instant::now();
        b.record(false, false, 0.0, 20, t);
        let mut waits = Vec::new();
        for _ in 0..4 {
            let wait = b.next_probe_in(t).unwrap();
            waits.push(wait.as_millis());
            t += wait;
            assert_eq!(b.admit(t).0, Admission::Probe);
            assert_eq!(b.record(false, true, 0.0, 20, t), Some(CircuitState::Open));
        }
        assert_eq!(waits, [1_000, 2_000, 3_000, 3_000]);
    }

    // Regression (outside attack, 2026-12-07): `/admin/endpoints` showed the next
    // opening's (doubled) cooldown as the circuit's while it was open for the first.
    #[test]
    fn the_open_cooldown_is_the_one_in_force_not_the_next() {
        let b = Breaker::new(cfg());
        let t = Instant::now();
        assert_eq!(b.open_cooldown(), None);
        b.record(false, false, 0.0, 20, t);
        assert_eq!(b.open_cooldown(), Some(Duration::from_secs(1)));
        assert_eq!(b.cooldown(), Duration::from_secs(2), "the next one");
    }

    #[test]
    fn late_outcomes_of_requests_sent_before_opening_change_nothing() {
        let b = Breaker::new(cfg());
        let t = Instant::now();
        b.record(false, false, 0.0, 20, t);
        assert_eq!(b.record(true, false, 0.5, 21, t), None);
        assert_eq!(b.state(t), CircuitState::Open);
    }
}
