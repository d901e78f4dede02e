//! A pure token bucket B(r, c): rate r = `per_min / 60` units per second, capacity c.
//!
//! No hidden time: every call takes `now_ms`, milliseconds on a monotonic clock the
//! caller owns (the limiter's epoch, or a test's counter). The level is kept in
//! integer sub-units of 1/60,000 unit, so one millisecond adds exactly `per_min`
//! sub-units and a refill after any idle time is exact (no float drift).
//! The level may go below zero: a request that used more tokens than it was charged
//! for at admission pays the difference afterwards ([`Bucket::charge`]), and the
//! bucket refuses until the debt is refilled.

/// Sub-units per unit: 60,000 (ms per minute), so a rate per minute is the refill per
/// millisecond in sub-units.
pub const SUB: i128 = 60_000;

/// One token bucket's state and parameters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bucket {
    /// Refill rate in units per minute (sub-units per ms).
    per_min: u64,
    /// Capacity in units (requests or tokens).
    capacity: u64,
    /// Current level in sub-units (may be negative: debt).
    level: i128,
    /// When the level was last brought up to date, ms.
    last_ms: u64,
}

impl Bucket {
    /// A full bucket refilling `per_min` units per minute up to `capacity` units, as
    /// of `now_ms`.
    pub fn full(per_min: u64, capacity: u64, now_ms: u64) -> Bucket {
        Bucket {
            per_min,
            capacity,
            level: i128::from(capacity) * SUB,
            last_ms: now_ms,
        }
    }

    /// Capacity in units.
    pub fn capacity(&self) -> u64 {
        self.capacity
    }

    /// Refill rate in units per minute.
    pub fn per_min(&self) -> u64 {
        self.per_min
    }

    /// Takes refill rate `per_min` and capacity `capacity` from `now_ms` on (the
    /// level refilled at the old rate until then; a larger capacity's extra room
    /// available at once, as a fresh bucket of the new size would have it; cut to a
    /// smaller one): a key entry's own `limits:` can change while its bucket lives
    /// (the key file is re-read), and the new limit must apply at once. A key whose
    /// limit was raised after it ran dry was refused until the new rate had refilled
    /// a unit (found by the admission attack of 2026-12-08; the Redis backend reads
    /// the capacity of the last update for the same rule). Same parameters: no-op.
    pub fn reconfigure(&mut self, per_min: u64, capacity: u64, now_ms: u64) {
        if self.per_min == per_min && self.capacity == capacity {
            return;
        }
        self.refill(now_ms);
        if capacity > self.capacity {
            self.level += i128::from(capacity - self.capacity) * SUB;
        }
        self.per_min = per_min;
        self.capacity = capacity;
        self.level = self.level.min(i128::from(capacity) * SUB);
    }

    /// Brings the level up to `now_ms` (a `now_ms` before the last update changes
    /// nothing).
    pub fn refill(&mut self, now_ms: u64) {
        let cap = i128::from(self.capacity) * SUB;
        if now_ms > self.last_ms {
            let gained = i128::from(now_ms - self.last_ms) * i128::from(self.per_min);
            self.level = (self.level + gained).min(cap.max(self.level));
            self.last_ms = now_ms;
        }
    }

    /// Whole units available at `now_ms` (0 when in debt).
    pub fn remaining(&mut self, now_ms: u64) -> u64 {
        self.refill(now_ms);
        u64::try_from(div(self.level, SUB).max(0)).unwrap_or(u64::MAX)
    }

    /// Milliseconds from `now_ms` until `cost` units are available: `Some(0)` if they
    /// are now, `None` if never (`cost` above the capacity, or no refill).
    pub fn wait_ms(&mut self, cost: u64, now_ms: u64) -> Option<u64> {
        self.refill(now_ms);
        let need = i128::from(cost) * SUB - self.level;
        if need <= 0 {
            return Some(0);
        }
        if cost > self.capacity || self.per_min == 0 {
            return None;
        }
        let per_ms = i128::from(self.per_min);
        u64::try_from(div(need + per_ms - 1, per_ms)).ok()
    }

    /// Milliseconds from `now_ms` until the bucket is full again (`u64::MAX`: never).
    pub fn full_in_ms(&mut self, now_ms: u64) -> u64 {
        self.refill(now_ms);
        let need = i128::from(self.capacity) * SUB - self.level;
        if need <= 0 {
            return 0;
        }
        if self.per_min == 0 {
            return u64::MAX;
        }
        let per_ms = i128::from(self.per_min);
        u64::try_from(div(need + per_ms - 1, per_ms)).unwrap_or(u64::MAX)
    }

    /// Takes `cost` units if available at `now_ms`; false (and nothing taken)
    /// otherwise.
    pub fn try_take(&mut self, cost: u64, now_ms: u64) -> bool {
        if self.wait_ms(cost, now_ms) == Some(0) {
            self.level -= i128::from(cost) * SUB;
            true
        } else {
            false
        }
    }

    /// Takes `units` unconditionally (the level may go negative): the part of a
    /// request's usage beyond what admission charged.
    pub fn charge(&mut self, units: u64, now_ms: u64) {
        self.refill(now_ms);
        self.level -= i128::from(units) * SUB;
    }

    /// Gives back `units` (a request used less than it was charged), up to the
    /// capacity.
    pub fn refund(&mut self, units: u64, now_ms: u64) {
        self.refill(now_ms);
        let cap = i128::from(self.capacity) * SUB;
        self.level = (self.level + i128::from(units) * SUB).min(cap);
    }

    /// Whether the bucket is full at `now_ms` (then it is the same as a new one and
    /// may be forgotten).
    pub fn is_full(&mut self, now_ms: u64) -> bool {
        self.refill(now_ms);
        self.level >= i128::from(self.capacity) * SUB
    }
}

/// `a / b` rounded toward zero, as `i128`'s `/`, for a positive `b`. Levels and waits
/// of any realistic bucket fit an `i64` (its capacity below 1.5 × 10^14 units), and
/// a 64-bit division is one instruction where a 128-bit one is a call into the
/// compiler's runtime (`__divti3`, about 60 instructions; eight per request under
/// the load benchmark's four buckets), so that case takes the short way.
fn div(a: i128, b: i128) -> i128 {
    match (i64::try_from(a), i64::try_from(b)) {
        (Ok(a), Ok(b)) if b > 0 => i128::from(a / b),
        _ => a / b,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn refill_after_idle_is_exact() {
        // 60 per minute = 1 per second; capacity 10.
        let mut b = Bucket::full(60, 10, 0);
        assert!(b.try_take(10, 0));
        assert_eq!(b.remaining(0), 0);
        assert_eq!(b.wait_ms(1, 0), Some(1000));
        assert_eq!(b.remaining(999), 0);
        assert_eq!(b.remaining(1000), 1);
        assert_eq!(b.remaining(7_000), 7);
        assert_eq!(b.remaining(1_000_000), 10);
        assert_eq!(b.wait_ms(11, 1_000_000), None);
    }

    /// A key whose limit was raised after it ran dry was refused until the new
    /// rate had refilled a unit (admission attack, 2026-12-08): a larger capacity's
    /// room is there at once; a smaller one cuts the level.
    #[test]
    fn a_raised_limit_was_refused_until_the_new_rate_refilled() {
        let mut b = Bucket::full(2, 2, 0);
        assert!(b.try_take(2, 0));
        b.reconfigure(600_000, 600_000, 3_000);
        assert_eq!(b.remaining(3_000), 599_998);
        assert!(b.try_take(1, 3_000));
        b.reconfigure(60, 10, 3_000);
        assert_eq!(b.remaining(3_000), 10);
        // A rate raised alone adds nothing at once.
        let mut b = Bucket::full(60, 10, 0);
        assert!(b.try_take(10, 0));
        b.reconfigure(6_000, 10, 0);
        assert_eq!(b.remaining(0), 0);
        assert_eq!(b.remaining(10), 1);
    }

    #[test]
    fn debt_delays_the_next_admission() {
        let mut b = Bucket::full(60, 10, 0);
        assert!(b.try_take(10, 0));
        b.charge(5, 0);
        assert_eq!(b.wait_ms(1, 0), Some(6000));
        b.refund(100, 0);
        assert_eq!(b.remaining(0), 10);
    }

    #[test]
    fn concurrent_takes_never_double_spend() {
        use std::sync::{Arc, Mutex};
        let b = Arc::new(Mutex::new(Bucket::full(0, 1000, 0)));
        let handles: Vec<_> = (0..8)
            .map(|_| {
                let b = b.clone();
                std::thread::spawn(move || {
                    let mut won = 0u64;
                    for _ in 0..500 {
                        if b.lock().unwrap().try_take(1, 0) {
                            won += 1;
                        }
                    }
                    won
                })
            })
            .collect();
        let total: u64 = handles.into_iter().map(|h| h.join().unwrap()).sum();
        assert_eq!(total, 1000);
    }

    proptest! {
        /// The short division agrees with `i128`'s everywhere: in and beyond the
        /// `i64` range, negative levels (debt) included.
        #[test]
        fn division_agrees_with_i128s(
            a in prop_oneof![any::<i64>().prop_map(i128::from), any::<i128>()],
            b in prop_oneof![1i64..=i64::MAX, Just(i64::MAX)].prop_map(i128::from),
            wide in 1i128..=i128::MAX,
        ) {
            prop_assert_eq!(div(a, b), a / b);
            prop_assert_eq!(div(a, wide), a / wide);
        }

        /// Over any window [t_i, t_j], the cost admitted is at most r·t + c.
        #[test]
        fn admitted_cost_is_bounded_by_rate_times_window_plus_capacity(
            per_min in 0u64..100_000,
            capacity in 1u64..1_000,
            events in proptest::collection::vec((0u64..5_000, 1u64..300), 1..60),
        ) {
            let mut b = Bucket::full(per_min, capacity, 0);
            let mut now = 0u64;
            let mut admitted: Vec<(u64, u64)> = Vec::new();
            for (dt, cost) in events {
                now += dt;
                if b.try_take(cost, now) {
                    admitted.push((now, cost));
                }
            }
            for i in 0..admitted.len() {
                let mut sum = 0u128;
                for &(t, cost) in &admitted[i..] {
                    sum += u128::from(cost);
                    let window_ms = u128::from(t - admitted[i].0);
                    // r·t + c in sub-units: per_min sub-units per ms.
                    let bound = window_ms * u128::from(per_min) + u128::from(capacity) * 60_000;
                    prop_assert!(sum * 60_000 <= bound, "sum {sum} over {window_ms} ms");
                }
            }
        }

        /// After idle time d from empty, the level is exactly min(c, r·d) (whole units).
        #[test]
        fn refill_is_exact(per_min in 1u64..1_000_000, capacity in 1u64..1_000_000, idle in 0u64..10_000_000) {
            let mut b = Bucket::full(per_min, capacity, 0);
            prop_assert!(b.try_take(capacity, 0));
            let expect = (u128::from(idle) * u128::from(per_min) / 60_000).min(u128::from(capacity));
            prop_assert_eq!(u128::from(b.remaining(idle)), expect);
        }
    }
}
