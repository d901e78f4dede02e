//! The response cache (issue 14; seed 001, "Semantic Cache"): the store behind the
//! gateway's cache phase, between route and dispatch.
//!
//! This file is the interface the gateway codes against; the pieces behind it:
//! - [`text`]: normalization and the 128-bit SimHash over character 3-grams;
//! - [`verify`]: the check every semantic candidate passes before it is served
//!   (only case, whitespace, edge punctuation, listed synonyms and a little filler
//!   may differ; never a negation, number or content word);
//! - [`index`]: the banded (multi-index hashing) lookup, no scan of all entries;
//! - [`l1`]: moka with TinyLFU admission and per-entry TTL, the index kept in step
//!   by its eviction listener;
//! - [`l2`]: Redis shared by every instance, under a deadline with a back-off.
//!
//! A lookup: L1 by identical text, then L1 semantic candidates (closest verified
//! wins), then L2 the same way (a hit fills L1). A store writes L1, then L2 within
//! the deadline.
//!
//! The gateway owns what a stored payload means (`Bytes` here) and what goes into a
//! key's `scope`: a 128-bit hash of everything besides the prompt text that changes
//! the answer (logical model, sampling settings, tools — sorted, so their order does
//! not matter —, system prompt, earlier turns).

pub mod index;
pub mod l1;
pub mod l2;
pub mod text;
pub mod verify;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use xxhash_rust::xxh3::xxh3_128_with_seed;

use self::index::Meta;
use self::l1::L1;
use self::l2::{L2Error, L2};

/// How the cache is built (the gateway fills it from the `cache:` config section).
#[derive(Debug, Clone)]
pub struct Settings {
    /// L1 capacity in entries (default 10,000).
    pub capacity: u64,
    /// L1 capacity in bytes of stored answers and prompt texts, the prompt counted
    /// in both forms an entry keeps (normalized and canonical; [`l1::Stored::bytes`];
    /// default 256 MiB): with `capacity`, the bound of the cache's memory
    /// ([`l1::L1::new`]).
    pub max_bytes: u64,
    /// Largest Hamming distance between two prompts' 128-bit SimHashes that may be a
    /// semantic hit (τ, default 3; seed 001). Lookups find every entry within
    /// τ ≤ 7 ([`index`]); above 7 some are missed.
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
            max_bytes: DEFAULT_MAX_BYTES,
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
    /// The prompt text after normalization ([`text::normalize`]); the raw text for
    /// an exact key.
    normalized: String,
    /// [`text::simhash`] of `normalized` (0 for an exact key).
    simhash: u128,
    /// What verification compares (empty for an exact key).
    canon: verify::Canon,
    /// XXH3-128 of `normalized` (seed 0; seed 1 for an exact key): the entry's id in
    /// its scope.
    id: u128,
}

impl Key {
    /// The text the key was made of, normalized (raw for an exact key).
    pub fn text(&self) -> &str {
        &self.normalized
    }

    /// The 128-bit SimHash of [`Key::text`] (0 for an exact key).
    pub fn simhash(&self) -> u128 {
        self.simhash
    }

    /// What verification compares ([`verify::Canon`]; empty for an exact key).
    pub fn canon(&self) -> &verify::Canon {
        &self.canon
    }
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
    /// Bytes held in L1 now: answers and both forms of their prompts
    /// ([`l1::Stored::bytes`]; `switchyard_cache_bytes`).
    pub bytes: AtomicU64,
}

/// Default L1 bound in bytes of stored answers and prompt texts (256 MiB).
pub const DEFAULT_MAX_BYTES: u64 = 256 << 20;

/// The longest time an entry is kept (365 days); longer TTLs are cut to it.
pub const MAX_TTL: Duration = Duration::from_secs(365 * 86_400);

/// The response cache. Shared behind an `Arc`; every method takes `&self`.
#[derive(Debug)]
pub struct Cache {
    settings: Settings,
    l1: L1,
    l2: Option<L2>,
    counters: Arc<Counters>,
}

impl Cache {
    /// A cache built from `settings`. Makes no network call (L2 connects lazily).
    ///
    /// # Errors
    /// A Redis URL that does not parse.
    pub fn new(settings: &Settings) -> Result<Cache, String> {
        let counters = Arc::new(Counters::default());
        let l2 = match &settings.redis {
            Some(url) => Some(L2::new(url, settings.redis_timeout, &settings.namespace)?),
            None => None,
        };
        Ok(Cache {
            settings: settings.clone(),
            l1: L1::new(settings.capacity, settings.max_bytes, counters.clone()),
            l2,
            counters,
        })
    }

    /// The key of `prompt` (the text of the turn being answered) within `scope`.
    /// `exact`: the raw text, hashed; else normalized and SimHashed ([`text`]).
    pub fn key(&self, scope: u128, prompt: &str, exact: bool) -> Key {
        if exact {
            return Key {
                scope,
                exact,
                id: xxh3_128_with_seed(prompt.as_bytes(), 1),
                simhash: 0,
                canon: verify::Canon::default(),
                normalized: prompt.to_string(),
            };
        }
        let normalized = text::normalize(prompt);
        let canon = verify::canon(&normalized);
        Key {
            scope,
            exact,
            id: xxh3_128_with_seed(normalized.as_bytes(), 0),
            simhash: text::simhash_of_canon(&canon.content),
            canon,
            normalized,
        }
    }

    /// The stored answer for `key`, if one is servable. Never fails: an L2 error or
    /// timeout counts in [`Counters::l2_errors`] and is a miss.
    pub async fn get(&self, key: &Key) -> Option<Hit> {
        if let Some(hit) = self.get_l1(key) {
            return Some(hit);
        }
        if let Some(l2) = &self.l2 {
            match l2.get(key, self.settings.tau, verify::equivalent).await {
                Ok(Some(found)) => {
                    let meta = Meta {
                        scope: key.scope,
                        id: found.id,
                        simhash: found.simhash,
                    };
                    let payload = found.payload.clone();
                    let canon = (!found.exact).then(|| verify::canon(&found.text));
                    self.l1.insert(
                        meta,
                        found.exact,
                        found.text,
                        canon,
                        found.payload,
                        found.ttl,
                    );
                    self.count_hit(found.distance);
                    return Some(Hit {
                        payload,
                        distance: found.distance,
                        tier: Tier::L2,
                    });
                }
                Ok(None) | Err(L2Error::BackingOff) => {}
                Err(e) => {
                    tracing::debug!(error = ?e, "cache L2 lookup failed; a miss");
                    self.counters.l2_errors.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
        self.counters.misses.fetch_add(1, Ordering::Relaxed);
        None
    }

    fn count_hit(&self, distance: Option<u32>) {
        let c = match distance {
            None => &self.counters.exact_hits,
            Some(_) => &self.counters.semantic_hits,
        };
        c.fetch_add(1, Ordering::Relaxed);
    }

    /// L1 only: the identical text, else the closest verified candidate.
    fn get_l1(&self, key: &Key) -> Option<Hit> {
        if let Some(e) = self.l1.get(key.scope, key.id) {
            if e.exact == key.exact && *e.text == *key.normalized {
                self.count_hit(None);
                return Some(Hit {
                    payload: e.payload.clone(),
                    distance: None,
                    tier: Tier::L1,
                });
            }
        }
        if key.exact {
            return None;
        }
        // The index lock is released before L1 is read (its listener takes it).
        let candidates = self
            .l1
            .index()
            .candidates(key.scope, key.simhash, self.settings.tau);
        for (d, meta) in candidates {
            let Some(e) = self.l1.get(meta.scope, meta.id) else {
                continue;
            };
            if e.canon
                .as_ref()
                .is_some_and(|c| verify::same(c, &key.canon))
            {
                self.count_hit(Some(d));
                return Some(Hit {
                    payload: e.payload.clone(),
                    distance: Some(d),
                    tier: Tier::L1,
                });
            }
        }
        None
    }

    /// Stores `payload` under `key` for `ttl` (at most [`MAX_TTL`]). Never fails (an
    /// L2 error is counted); returns within `Settings::redis_timeout` of the L1 write.
    /// A zero `ttl` stores nothing.
    pub async fn put(&self, key: &Key, payload: Bytes, ttl: Duration) {
        if ttl.is_zero() {
            return;
        }
        let ttl = ttl.min(MAX_TTL);
        self.counters.inserts.fetch_add(1, Ordering::Relaxed);
        let meta = Meta {
            scope: key.scope,
            id: key.id,
            simhash: key.simhash,
        };
        self.l1.insert(
            meta,
            key.exact,
            key.normalized.as_str().into(),
            (!key.exact).then(|| key.canon.clone()),
            payload.clone(),
            ttl,
        );
        if let Some(l2) = &self.l2 {
            match l2.put(key, &payload, ttl).await {
                Ok(()) | Err(L2Error::BackingOff) => {}
                Err(e) => {
                    tracing::debug!(error = ?e, "cache L2 store failed");
                    self.counters.l2_errors.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
    }

    /// The counters.
    pub fn counters(&self) -> &Counters {
        &self.counters
    }

    /// L1 alone (tests and the benchmark look inside).
    pub fn l1(&self) -> &L1 {
        &self.l1
    }
}

#[cfg(test)]
mod tests;
