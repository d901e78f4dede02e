//! The response cache (issue 14; seed 001, "Semantic Cache"): the store behind the
//! gateway's cache phase, between route and dispatch.
//!
//! This file is the interface the gateway codes against. The store below is the
//! first, exact-only version (a whole-text match within a scope, in one map, with
//! per-entry expiry); SimHash keys, the banded index, verification, TinyLFU L1 and
//! the Redis L2 replace its insides without changing the interface.
//!
//! The gateway owns what a stored payload means (`Bytes` here) and what goes into a
//! key's `scope`: a 128-bit hash of everything besides the prompt text that changes
//! the answer (logical model, sampling settings, tools, system prompt, earlier turns).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use bytes::Bytes;

/// How the cache is built (the gateway fills it from the `cache:` config section).
#[derive(Debug, Clone)]
pub struct Settings {
    /// L1 capacity in entries (default 10,000).
    pub capacity: u64,
    /// Largest Hamming distance between two prompts' 128-bit SimHashes that may be a
    /// semantic hit (τ, default 3; seed 001).
    pub tau: u32,
    /// The L2 Redis URL (`redis://host:port/db`); `None`: L1 only.
    pub redis: Option<String>,
    /// Deadline of every L2 call; past it the call counts as an error and a miss.
    pub redis_timeout: Duration,
    /// Prefix of every Redis key the cache writes.
    pub namespace: String,
}

impl Default for Settings {
    fn default() -> Settings {
        Settings {
            capacity: 10_000,
            tau: 3,
            redis: None,
            redis_timeout: Duration::from_millis(50),
            namespace: "sy:cache".into(),
        }
    }
}

/// A lookup or store key: the scope that must be equal and the prompt text.
#[derive(Debug, Clone)]
pub struct Key {
    /// Everything besides the prompt text that must be equal for a hit (a hash).
    pub scope: u128,
    /// `true`: only the identical text hits (`cache exact`).
    pub exact: bool,
    /// The prompt text after normalization.
    normalized: String,
}

/// Which tier answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tier {
    /// In-process memory.
    L1,
    /// Redis, shared by every instance.
    L2,
}

/// A cached answer.
#[derive(Debug, Clone)]
pub struct Hit {
    /// The payload stored with [`Cache::put`].
    pub payload: Bytes,
    /// Hamming distance of the semantic match; `None` for an exact (identical-text) hit.
    pub distance: Option<u32>,
    /// Which tier answered.
    pub tier: Tier,
}

/// Cumulative counters since start (the gateway exports them on `/metrics`).
#[derive(Debug, Default)]
pub struct Counters {
    /// Hits on identical (normalized) text.
    pub exact_hits: AtomicU64,
    /// Hits on a near-identical text within τ that passed verification.
    pub semantic_hits: AtomicU64,
    /// Lookups that found nothing servable.
    pub misses: AtomicU64,
    /// Entries evicted for room or expired.
    pub evictions: AtomicU64,
    /// L2 calls that failed or ran past their deadline.
    pub l2_errors: AtomicU64,
    /// Entries stored.
    pub inserts: AtomicU64,
    /// Payload bytes held in L1 now.
    pub bytes: AtomicU64,
}

/// The response cache. Shared behind an `Arc`; every method takes `&self`.
#[derive(Debug)]
pub struct Cache {
    settings: Settings,
    map: Mutex<HashMap<(u128, String), (Bytes, Instant)>>,
    counters: Counters,
}

impl Cache {
    /// A cache built from `settings`. Makes no network call (L2 connects lazily).
    ///
    /// # Errors
    /// A Redis URL that does not parse.
    pub fn new(settings: &Settings) -> Result<Cache, String> {
        Ok(Cache {
            settings: settings.clone(),
            map: Mutex::new(HashMap::new()),
            counters: Counters::default(),
        })
    }

    /// The key of `prompt` (the text of the turn being answered) within `scope`.
    pub fn key(&self, scope: u128, prompt: &str, exact: bool) -> Key {
        let normalized = if exact {
            prompt.to_string()
        } else {
            prompt.split_whitespace().collect::<Vec<_>>().join(" ").to_lowercase()
        };
        Key {
            scope,
            exact,
            normalized,
        }
    }

    /// The stored answer for `key`, if one is servable. Never fails: an L2 error or
    /// timeout counts in [`Counters::l2_errors`] and is a miss.
    pub async fn get(&self, key: &Key) -> Option<Hit> {
        let map = self.map.lock().unwrap_or_else(|p| p.into_inner());
        match map.get(&(key.scope, key.normalized.clone())) {
            Some((payload, until)) if *until > Instant::now() => {
                self.counters.exact_hits.fetch_add(1, Ordering::Relaxed);
                Some(Hit {
                    payload: payload.clone(),
                    distance: None,
                    tier: Tier::L1,
                })
            }
            _ => {
                self.counters.misses.fetch_add(1, Ordering::Relaxed);
                None
            }
        }
    }

    /// Stores `payload` under `key` for `ttl`. Never fails (an L2 error is counted).
    pub async fn put(&self, key: &Key, payload: Bytes, ttl: Duration) {
        let mut map = self.map.lock().unwrap_or_else(|p| p.into_inner());
        if map.len() as u64 >= self.settings.capacity {
            return;
        }
        self.counters.inserts.fetch_add(1, Ordering::Relaxed);
        self.counters
            .bytes
            .fetch_add(payload.len() as u64, Ordering::Relaxed);
        map.insert(
            (key.scope, key.normalized.clone()),
            (payload, Instant::now() + ttl),
        );
    }

    /// The counters.
    pub fn counters(&self) -> &Counters {
        &self.counters
    }
}
