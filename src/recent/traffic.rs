//! Requests per endpoint in fixed time buckets over the last minutes
//! ([`BUCKET`] × [`BUCKETS`]: 10 s × 30, five minutes).
//!
//! Each endpoint has a ring of [`BUCKETS`] slots, one `AtomicU64` each, holding a
//! bucket's tag and its counts packed together: the bucket number (time since the
//! gateway started divided by [`BUCKET`], plus one so that 0 means "never written")
//! in the high 32 bits, the count in the low 32 bits. Bucket `n` lives in slot
//! `n % BUCKETS`. Counting a request:
//! 1. read the slot; if its tag is the current bucket, add 1 (`fetch_add`) and stop:
//!    the common case, one load and one atomic add;
//! 2. if the tag is older (the slot still holds a bucket from one ring turn ago),
//!    replace the whole word with (current bucket, 1) by compare-and-swap; when
//!    another thread won the swap, go back to 1;
//! 3. if the tag is newer (this thread read the clock, then stalled for a whole turn
//!    of the ring), drop the count: its bucket has left the window.
//!
//! A reader takes, for each of the last [`BUCKETS`] buckets, the slot's count when its
//! tag is that bucket and 0 otherwise, so an idle endpoint's old counts never show.
//! The count cannot reach the tag bits: that would take 2³² requests to one endpoint
//! in one bucket.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde::Serialize;

/// The width of one bucket.
pub const BUCKET: Duration = Duration::from_secs(10);

/// Buckets kept per endpoint (the window is `BUCKET × BUCKETS`).
pub const BUCKETS: usize = 30;

const COUNT_MASK: u64 = 0xffff_ffff;

/// One ring of packed (tag, count) slots.
#[derive(Debug)]
struct Ring([AtomicU64; BUCKETS]);

impl Ring {
    fn new() -> Ring {
        Ring(std::array::from_fn(|_| AtomicU64::new(0)))
    }

    fn add(&self, tag: u32) {
        let slot = &self.0[tag as usize % BUCKETS];
        let mut cur = slot.load(Ordering::Relaxed);
        loop {
            let have = (cur >> 32) as u32;
            if have == tag {
                slot.fetch_add(1, Ordering::Relaxed);
                return;
            }
            if have > tag {
                return;
            }
            match slot.compare_exchange_weak(
                cur,
                (u64::from(tag) << 32) | 1,
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => return,
                Err(now) => cur = now,
            }
        }
    }

    /// Counts of buckets `last - BUCKETS + 1 ..= last`, oldest first.
    fn read(&self, last: u32) -> [u64; BUCKETS] {
        std::array::from_fn(|i| {
            let Some(tag) = (last + 1 + i as u32).checked_sub(BUCKETS as u32) else {
                return 0;
            };
            let v = self.0[tag as usize % BUCKETS].load(Ordering::Relaxed);
            if (v >> 32) as u32 == tag {
                v & COUNT_MASK
            } else {
                0
            }
        })
    }
}

/// Per-endpoint request counts over the last minutes (see the module docs).
#[derive(Debug)]
pub struct Traffic {
    origin: Instant,
    /// Requests that reached the endpoint (its last attempt was there), per endpoint.
    requests: Vec<Ring>,
    /// Of those, the ones that did not end with its answer.
    errors: Vec<Ring>,
}

/// One endpoint's counts in a [`TrafficReport`].
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct EndpointTraffic {
    /// Requests whose last attempt went to the endpoint, per bucket, oldest first
    /// (the last is the current, partial bucket).
    pub requests: Vec<u64>,
    /// Of those, the ones that did not end with its answer, per bucket.
    pub errors: Vec<u64>,
}

/// The counts of every endpoint, as `GET /admin/traffic` shows them (before the
/// endpoint names are added).
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct TrafficReport {
    /// The width of one bucket, seconds.
    pub bucket_secs: u64,
    /// How far into the current (last) bucket the report was taken, ms.
    pub current_bucket_elapsed_ms: u64,
    /// Per endpoint, in registry order.
    pub endpoints: Vec<EndpointTraffic>,
}

impl Traffic {
    /// Empty rings for `endpoints` endpoints; buckets count from now.
    pub fn new(endpoints: usize) -> Traffic {
        Traffic {
            origin: Instant::now(),
            requests: (0..endpoints).map(|_| Ring::new()).collect(),
            errors: (0..endpoints).map(|_| Ring::new()).collect(),
        }
    }

    fn tag(&self, at: Instant) -> u32 {
        let n = at.saturating_duration_since(self.origin).as_secs() / BUCKET.as_secs();
        u32::try_from(n + 1).unwrap_or(u32::MAX)
    }

    /// Counts a request that ended at `at` on endpoint `ep` (its last attempt), as an
    /// error unless `ok`. An unknown index is ignored.
    pub fn record(&self, ep: usize, ok: bool, at: Instant) {
        let tag = self.tag(at);
        if let Some(r) = self.requests.get(ep) {
            r.add(tag);
        }
        if !ok {
            if let Some(r) = self.errors.get(ep) {
                r.add(tag);
            }
        }
    }

    /// The last [`BUCKETS`] buckets as of `now`.
    pub fn report(&self, now: Instant) -> TrafficReport {
        let last = self.tag(now);
        let into = now.saturating_duration_since(self.origin).as_millis() as u64
            % BUCKET.as_millis() as u64;
        TrafficReport {
            bucket_secs: BUCKET.as_secs(),
            current_bucket_elapsed_ms: into,
            endpoints: self
                .requests
                .iter()
                .zip(&self.errors)
                .map(|(r, e)| EndpointTraffic {
                    requests: r.read(last).to_vec(),
                    errors: e.read(last).to_vec(),
                })
                .collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn total(v: &[u64]) -> u64 {
        v.iter().sum()
    }

    #[test]
    fn counts_land_in_their_bucket_and_leave_the_window() {
        let t = Traffic::new(2);
        let t0 = t.origin;
        for _ in 0..3 {
            t.record(0, true, t0);
        }
        t.record(1, false, t0 + Duration::from_secs(25));
        let r = t.report(t0 + Duration::from_secs(25));
        assert_eq!(r.endpoints[0].requests[BUCKETS - 3], 3, "two buckets ago");
        assert_eq!(total(&r.endpoints[0].requests), 3);
        assert_eq!(r.endpoints[1].requests[BUCKETS - 1], 1);
        assert_eq!(r.endpoints[1].errors[BUCKETS - 1], 1);
        assert_eq!(total(&r.endpoints[0].errors), 0);
        assert_eq!(r.current_bucket_elapsed_ms, 5000);

        // One whole window later the old counts are gone, even before their slot is
        // written again.
        let later = t0 + BUCKET * BUCKETS as u32 + Duration::from_secs(1);
        let r = t.report(later);
        assert_eq!(total(&r.endpoints[0].requests), 0);
        // A write into the slot of an old bucket replaces it rather than adding.
        t.record(0, true, later);
        let r = t.report(later);
        assert_eq!(r.endpoints[0].requests[BUCKETS - 1], 1);
    }

    #[test]
    fn a_stale_writer_does_not_overwrite_a_newer_bucket() {
        let t = Traffic::new(1);
        let t0 = t.origin;
        let turn = BUCKET * BUCKETS as u32;
        t.record(0, true, t0 + turn);
        // Same slot, one turn earlier: dropped.
        t.record(0, true, t0);
        let r = t.report(t0 + turn);
        assert_eq!(r.endpoints[0].requests[BUCKETS - 1], 1);
        assert_eq!(total(&r.endpoints[0].requests), 1);
    }

    #[test]
    fn concurrent_adds_are_all_counted() {
        let t = std::sync::Arc::new(Traffic::new(1));
        let now = t.origin;
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let t = t.clone();
                std::thread::spawn(move || {
                    for _ in 0..10_000 {
                        t.record(0, true, now);
                    }
                })
            })
            .collect();
        for h in threads {
            h.join().unwrap();
        }
        assert_eq!(total(&t.report(now).endpoints[0].requests), 40_000);
    }

    #[test]
    fn an_unknown_endpoint_is_ignored() {
        let t = Traffic::new(1);
        t.record(5, false, t.origin);
        assert_eq!(total(&t.report(t.origin).endpoints[0].requests), 0);
    }
}
