//! The last [`CAPACITY`] routing decisions: for each request that named a model, the
//! route and rule that decided, the strategy, the endpoint that answered and how the
//! request ended.
//!
//! A ring of slots, each a mutex around a [`Decision`] whose strings are cleared and
//! refilled in place, so once every slot has held a request with names as long as
//! the current ones, recording allocates nothing. A request takes the next slot by an
//! atomic counter and `try_lock`s it: if a reader holds that slot at that instant,
//! the request gives up recording rather than wait (the status page misses one
//! line; the request path never blocks). Each string is cut at [`MAX_FIELD_BYTES`].

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use serde::Serialize;

/// Decisions kept.
pub const CAPACITY: usize = 50;

/// Longest string kept per field, bytes (cut at a character boundary).
pub const MAX_FIELD_BYTES: usize = 128;

/// One request's decision, as `GET /admin/decisions` lists it.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct Decision {
    /// Its place in the order of recorded decisions, from 1.
    pub seq: u64,
    /// When its access line was written, Unix ms.
    pub at_unix_ms: u64,
    /// The request id (`x-request-id`).
    pub request_id: String,
    /// The logical model asked for.
    pub model: String,
    /// The policy version it ran on.
    pub policy: String,
    /// The route that decided (empty: none; the registry's order served it).
    pub route: String,
    /// The rule of that route (empty: none).
    pub rule: String,
    /// The strategy of the decision (empty: none was called).
    pub strategy: String,
    /// The endpoint that answered, `cache` for a cache hit, or the last one tried
    /// when none answered (empty: none was tried).
    pub endpoint: String,
    /// Whether `endpoint` answered.
    pub served: bool,
    /// Attempts made.
    pub attempts: u32,
    /// The final HTTP status.
    pub status: u16,
    /// `ok`, `error`, `stream_error` or `client_gone` (the access line's `outcome`).
    pub outcome: &'static str,
    /// Total latency, ms, to the microsecond (`3.163`, not `3.1630830000000003`).
    pub latency_ms: f64,
}

/// What a request hands [`DecisionRing::record`]; borrowed, so nothing is copied
/// until a slot is taken.
#[derive(Debug, Clone, Copy)]
pub struct DecisionRef<'a> {
    /// See [`Decision::at_unix_ms`].
    pub at_unix_ms: u64,
    /// See [`Decision::request_id`].
    pub request_id: &'a str,
    /// See [`Decision::model`].
    pub model: &'a str,
    /// See [`Decision::policy`].
    pub policy: &'a str,
    /// See [`Decision::route`].
    pub route: &'a str,
    /// See [`Decision::rule`].
    pub rule: &'a str,
    /// See [`Decision::strategy`].
    pub strategy: &'a str,
    /// See [`Decision::endpoint`].
    pub endpoint: &'a str,
    /// See [`Decision::served`].
    pub served: bool,
    /// See [`Decision::attempts`].
    pub attempts: u32,
    /// See [`Decision::status`].
    pub status: u16,
    /// See [`Decision::outcome`].
    pub outcome: &'static str,
    /// See [`Decision::latency_ms`].
    pub latency_ms: f64,
}

/// The ring of the last decisions (see the module docs).
#[derive(Debug)]
pub struct DecisionRing {
    next: AtomicU64,
    slots: Box<[Mutex<Decision>]>,
}

impl Default for DecisionRing {
    fn default() -> Self {
        DecisionRing {
            next: AtomicU64::new(0),
            slots: (0..CAPACITY).map(|_| Mutex::default()).collect(),
        }
    }
}

fn put(dst: &mut String, src: &str) {
    let mut end = src.len().min(MAX_FIELD_BYTES);
    while !src.is_char_boundary(end) {
        end -= 1;
    }
    dst.clear();
    dst.push_str(&src[..end]);
}

impl DecisionRing {
    /// Records `d` in the next slot, unless a reader holds that slot right now.
    pub fn record(&self, d: DecisionRef<'_>) {
        let seq = self.next.fetch_add(1, Ordering::Relaxed) + 1;
        let Ok(mut slot) = self.slots[(seq % CAPACITY as u64) as usize].try_lock() else {
            return;
        };
        // A slower writer of an older turn of the ring must not replace a newer one.
        if slot.seq > seq {
            return;
        }
        slot.seq = seq;
        slot.at_unix_ms = d.at_unix_ms;
        put(&mut slot.request_id, d.request_id);
        put(&mut slot.model, d.model);
        put(&mut slot.policy, d.policy);
        put(&mut slot.route, d.route);
        put(&mut slot.rule, d.rule);
        put(&mut slot.strategy, d.strategy);
        put(&mut slot.endpoint, d.endpoint);
        slot.served = d.served;
        slot.attempts = d.attempts;
        slot.status = d.status;
        slot.outcome = d.outcome;
        slot.latency_ms = (d.latency_ms * 1e3).round() / 1e3;
    }

    /// The decisions held, newest first.
    pub fn newest_first(&self) -> Vec<Decision> {
        let mut out: Vec<Decision> = self
            .slots
            .iter()
            .map(|s| s.lock().unwrap_or_else(|p| p.into_inner()).clone())
            .filter(|d| d.seq > 0)
            .collect();
        out.sort_by_key(|d| std::cmp::Reverse(d.seq));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(id: &str) -> DecisionRef<'_> {
        DecisionRef {
            at_unix_ms: 1,
            request_id: id,
            model: "m",
            policy: "v1",
            route: "r",
            rule: "",
            strategy: "exp3",
            endpoint: "p/m",
            served: true,
            attempts: 1,
            status: 200,
            outcome: "ok",
            latency_ms: 2.5,
        }
    }

    #[test]
    fn keeps_the_last_capacity_newest_first() {
        let ring = DecisionRing::default();
        assert!(ring.newest_first().is_empty());
        let ids: Vec<String> = (0..CAPACITY + 7).map(|i| format!("req-{i}")).collect();
        for id in &ids {
            ring.record(d(id));
        }
        let got = ring.newest_first();
        assert_eq!(got.len(), CAPACITY);
        assert_eq!(got[0].request_id, format!("req-{}", CAPACITY + 6));
        assert_eq!(got[CAPACITY - 1].request_id, "req-7");
        assert_eq!(got[0].seq, (CAPACITY + 7) as u64);
        assert_eq!((got[0].strategy.as_str(), got[0].outcome), ("exp3", "ok"));
    }

    /// Newcomer walk (issue 18): `/admin/decisions` showed `3.1630830000000003`.
    #[test]
    fn latency_is_kept_to_the_microsecond() {
        let ring = DecisionRing::default();
        let mut r = d("x");
        r.latency_ms = 3.1630830000000003;
        ring.record(r);
        assert_eq!(ring.newest_first()[0].latency_ms, 3.163);
        let text = serde_json::to_string(&ring.newest_first()[0]).unwrap();
        assert!(text.contains("\"latency_ms\":3.163"), "{text}");
    }

    #[test]
    fn long_fields_are_cut_at_a_character_boundary() {
        let ring = DecisionRing::default();
        let long = "é".repeat(100); // 200 bytes
        let mut r = d("x");
        r.model = &long;
        ring.record(r);
        let got = &ring.newest_first()[0];
        assert_eq!(got.model.len(), MAX_FIELD_BYTES);
        assert!(got.model.chars().all(|c| c == 'é'));
    }

    #[test]
    fn a_slot_held_by_a_reader_is_skipped_not_waited_for() {
        let ring = DecisionRing::default();
        let held = ring.slots[1].lock().unwrap();
        ring.record(d("skipped"));
        drop(held);
        ring.record(d("kept"));
        let got = ring.newest_first();
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].request_id, "kept");
    }
}
