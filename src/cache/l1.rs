//! L1: entries in process memory (issue 14, item 4; seed 001, "Cache Storage").
//!
//! A `moka` cache keyed by (scope, id): TinyLFU admission (a new entry displaces
//! a resident only if it has been asked for more often, by a count-min sketch of
//! recent keys) and eviction by entry count, with each entry's own TTL through
//! moka's `Expiry`. Moka's eviction listener (any removal: evicted for room,
//! expired, replaced, refused at admission) takes the entry out of the banded
//! [`Index`] and out of [`Counters::bytes`], so the index only nominates entries
//! that L1 still holds or is about to drop; a nominated entry L1 no longer has is
//! simply skipped.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use moka::notification::RemovalCause;
use moka::Expiry;

use super::index::{Index, Meta};
use super::verify::Canon;
use super::Counters;

/// One stored answer.
#[derive(Debug)]
pub struct Stored {
    /// What the index knows of it.
    pub meta: Meta,
    /// `true`: stored under an exact key (raw text, never a semantic candidate).
    pub exact: bool,
    /// The normalized text (the raw text for an exact key).
    pub text: Box<str>,
    /// What verification compares (`None` for an exact key).
    pub canon: Option<Canon>,
    /// The gateway's payload.
    pub payload: Bytes,
    /// Time to live from insertion into L1.
    pub ttl: Duration,
    /// Slot in the index.
    slot: u32,
}

impl Stored {
    /// The bytes this entry holds that grow with it: the answer, the prompt text and
    /// the canonical content verification compares (a second form of the prompt,
    /// about as long). What the weigher bounds by `max_bytes` and what
    /// [`Counters::bytes`] counts.
    pub fn bytes(&self) -> u64 {
        let canon = self.canon.as_ref().map_or(0, |c| c.content.len());
        (self.payload.len() + self.text.len() + canon) as u64
    }
}

struct PerEntry;

impl Expiry<(u128, u128), Arc<Stored>> for PerEntry {
    fn expire_after_create(
        &self,
        _: &(u128, u128),
        v: &Arc<Stored>,
        _: Instant,
    ) -> Option<Duration> {
        Some(v.ttl)
    }

    fn expire_after_update(
        &self,
        _: &(u128, u128),
        v: &Arc<Stored>,
        _: Instant,
        _: Option<Duration>,
    ) -> Option<Duration> {
        Some(v.ttl)
    }
}

/// The L1 tier.
pub struct L1 {
    map: moka::sync::Cache<(u128, u128), Arc<Stored>>,
    index: Arc<Index>,
    counters: Arc<Counters>,
}

impl std::fmt::Debug for L1 {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("L1")
            .field("entries", &self.map.entry_count())
            .field("indexed", &self.index.len())
            .finish()
    }
}

impl L1 {
    /// An empty L1 of at most `capacity` entries and `max_bytes` bytes of answers
    /// and prompt texts ([`Stored::bytes`]).
    ///
    /// Why both: an entry may hold up to 1 MiB, so a bound by count alone (10,000
    /// by default) allowed about 10 GiB. moka has one bound, by weight: an entry
    /// weighs its bytes but at least `max_bytes / capacity`, and the weights are
    /// held to `max_bytes`, so neither more than `capacity` entries nor more than
    /// `max_bytes` bytes are kept (moka evicts, or refuses a newcomer, by TinyLFU).
    pub fn new(capacity: u64, max_bytes: u64, counters: Arc<Counters>) -> L1 {
        let index = Arc::new(Index::default());
        let (idx, cnt) = (index.clone(), counters.clone());
        let max_bytes = max_bytes.max(1);
        let floor = u32::try_from((max_bytes / capacity.max(1)).max(1)).unwrap_or(u32::MAX);
        let map = moka::sync::Cache::builder()
            .max_capacity(max_bytes)
            .weigher(move |_, v: &Arc<Stored>| {
                // Every copy counts: the canonical content left out, L1 held about
                // twice `max_bytes` of long prompts (t_mem.py: 32 MiB, RSS +72 MiB).
                u32::try_from(v.bytes()).unwrap_or(u32::MAX).max(floor)
            })
            .expire_after(PerEntry)
            .eviction_listener(move |_, v: Arc<Stored>, cause| {
                idx.remove(v.slot);
                cnt.bytes.fetch_sub(v.bytes(), Ordering::Relaxed);
                if matches!(cause, RemovalCause::Size | RemovalCause::Expired) {
                    cnt.evictions.fetch_add(1, Ordering::Relaxed);
                }
            })
            .build();
        L1 {
            map,
            index,
            counters,
        }
    }

    /// Stores an entry (replacing one with the same scope and id).
    pub fn insert(
        &self,
        meta: Meta,
        exact: bool,
        text: Box<str>,
        canon: Option<Canon>,
        payload: Bytes,
        ttl: Duration,
    ) {
        // Indexed before moka sees it: moka may refuse or evict it during `insert`,
        // and its listener must find the slot to free.
        let slot = if exact {
            u32::MAX
        } else {
            self.index.insert(meta)
        };
        let stored = Arc::new(Stored {
            meta,
            exact,
            text,
            canon,
            payload,
            ttl,
            slot,
        });
        self.counters
            .bytes
            .fetch_add(stored.bytes(), Ordering::Relaxed);
        self.map.insert((meta.scope, meta.id), stored);
    }

    /// The entry stored under (scope, id), if live.
    pub fn get(&self, scope: u128, id: u128) -> Option<Arc<Stored>> {
        self.map.get(&(scope, id))
    }

    /// The banded index over the semantic entries.
    pub fn index(&self) -> &Index {
        &self.index
    }

    /// Runs moka's pending maintenance (evictions, listener calls) now; tests use it
    /// to observe a settled state.
    pub fn settle(&self) {
        self.map.run_pending_tasks();
    }

    /// Every entry held now (a scan: tests compare it with the counters).
    pub fn entries(&self) -> Vec<Arc<Stored>> {
        self.map.iter().map(|(_, v)| v).collect()
    }

    /// Entries held (after [`L1::settle`], exact).
    pub fn len(&self) -> u64 {
        self.map.entry_count()
    }

    /// Whether no entry is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}
