//! The semantic index of L1: multi-index hashing over four 32-bit bands of the
//! 128-bit SimHash (issue 14, item 3), so a lookup never scans all entries.
//!
//! Each entry sits in four buckets, one per band `b` (bits `32b..32b+32`), keyed by
//! (scope, band index, band value). Pigeonhole: two SimHashes within distance 3 agree
//! exactly on at least one of the four bands, so probing the query's four buckets
//! finds every entry within τ ≤ 3. For 3 < τ ≤ 7, at least one band differs in at
//! most one bit (four bands with two or more would be 8 bits), so the lookup also
//! probes every one-bit neighbour of each band (4 × 33 buckets) and still finds all
//! of them. Above 7 no guarantee holds: entries whose distance is spread over all
//! four bands with ≥ 2 bits each are missed (recall only; precision is unaffected).
//!
//! Cost: a probe is a hash lookup plus, per entry in the bucket, a scope compare and
//! a popcount. Unrelated prompts share a 32-bit band with probability 2⁻³², so buckets
//! hold near-duplicates only; a workload of many prompts from one template in one
//! scope makes its buckets long, and lookups there cost one popcount per entry.

use std::sync::RwLock;

use rustc_hash::{FxHashMap, FxHashSet};
use smallvec::SmallVec;

/// What the index knows of an entry: enough to filter candidates before L1 is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Meta {
    /// The entry's scope (equal scopes only).
    pub scope: u128,
    /// The entry's id within its scope (the hash of its normalized text).
    pub id: u128,
    /// The entry's SimHash.
    pub simhash: u128,
}

/// A candidate: its Hamming distance to the query and what the index knows of it.
pub type Candidate = (u32, Meta);

/// At most this many candidates are verified per lookup, closest first.
pub const MAX_CANDIDATES: usize = 16;

#[derive(Debug, Default)]
struct Inner {
    /// Entries by slot; `None`: free.
    slab: Vec<Option<Meta>>,
    free: Vec<u32>,
    live: usize,
    bands: [FxHashMap<u64, SmallVec<[u32; 2]>>; 4],
}

/// The banded index (module docs). Every method takes `&self` and holds the lock
/// only for its own work: never across a call into L1, whose eviction listener
/// comes back here.
#[derive(Debug, Default)]
pub struct Index {
    inner: RwLock<Inner>,
}

fn band(simhash: u128, b: usize) -> u32 {
    (simhash >> (32 * b)) as u32
}

/// The bucket key of (scope, band value); the band index picks the map. Scopes are
/// themselves hashes, so folding them is safe; a collision only adds candidates
/// that the scope compare drops.
fn bucket(scope: u128, value: u32) -> u64 {
    let s = (scope as u64) ^ ((scope >> 64) as u64).rotate_left(29);
    (s ^ u64::from(value)).wrapping_mul(0x9E37_79B9_7F4A_7C15)
}

impl Index {
    /// Adds `meta`; returns its slot (for [`Index::remove`]).
    pub fn insert(&self, meta: Meta) -> u32 {
        let mut inner = self.inner.write().unwrap_or_else(|p| p.into_inner());
        let slot = match inner.free.pop() {
            Some(s) => {
                inner.slab[s as usize] = Some(meta);
                s
            }
            None => {
                inner.slab.push(Some(meta));
                u32::try_from(inner.slab.len() - 1).unwrap_or(u32::MAX)
            }
        };
        inner.live += 1;
        for b in 0..4 {
            let k = bucket(meta.scope, band(meta.simhash, b));
            inner.bands[b].entry(k).or_default().push(slot);
        }
        slot
    }

    /// Removes the entry in `slot` (a no-op for a free slot).
    pub fn remove(&self, slot: u32) {
        let mut inner = self.inner.write().unwrap_or_else(|p| p.into_inner());
        let Some(meta) = inner.slab.get_mut(slot as usize).and_then(Option::take) else {
            return;
        };
        inner.live -= 1;
        inner.free.push(slot);
        for b in 0..4 {
            let k = bucket(meta.scope, band(meta.simhash, b));
            if let Some(list) = inner.bands[b].get_mut(&k) {
                list.retain(|s| *s != slot);
                if list.is_empty() {
                    inner.bands[b].remove(&k);
                }
            }
        }
    }

    /// Entries indexed now.
    pub fn len(&self) -> usize {
        self.inner.read().unwrap_or_else(|p| p.into_inner()).live
    }

    /// Whether no entry is indexed.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Entries of `scope` within Hamming distance `tau` of `simhash`, closest first,
    /// at most [`MAX_CANDIDATES`], each once.
    pub fn candidates(&self, scope: u128, simhash: u128, tau: u32) -> SmallVec<[Candidate; 8]> {
        let mut out: SmallVec<[Candidate; 8]> = SmallVec::new();
        // Ids already taken: an entry sits in four buckets (and more when one-bit
        // neighbours are probed). A set, not a search of `out`: one template's
        // prompts in one scope fill a bucket with thousands of entries, and a
        // search made each lookup quadratic in them (80-90 ms of CPU at 6,000).
        let mut seen: FxHashSet<u128> = FxHashSet::default();
        let inner = self.inner.read().unwrap_or_else(|p| p.into_inner());
        let flips = if tau > 3 { 32 } else { 0 };
        for b in 0..4 {
            let value = band(simhash, b);
            for f in 0..=flips {
                // f == 0: the band itself; f > 0: the band with bit f - 1 flipped.
                let v = if f == 0 {
                    value
                } else {
                    value ^ (1 << (f - 1))
                };
                let Some(list) = inner.bands[b].get(&bucket(scope, v)) else {
                    continue;
                };
                for slot in list {
                    let Some(meta) = inner.slab[*slot as usize] else {
                        continue;
                    };
                    if meta.scope != scope {
                        continue;
                    }
                    let d = (meta.simhash ^ simhash).count_ones();
                    if d <= tau && seen.insert(meta.id) {
                        out.push((d, meta));
                    }
                }
            }
        }
        drop(inner);
        out.sort_unstable_by_key(|(d, _)| *d);
        out.truncate(MAX_CANDIDATES);
        out
    }

    /// Reference implementation for tests and the benchmark: every entry of
    /// `scope` within `tau`, by a scan of all entries.
    pub fn scan(&self, scope: u128, simhash: u128, tau: u32) -> Vec<Candidate> {
        let inner = self.inner.read().unwrap_or_else(|p| p.into_inner());
        let mut out: Vec<Candidate> = inner
            .slab
            .iter()
            .flatten()
            .filter(|m| m.scope == scope)
            .map(|m| ((m.simhash ^ simhash).count_ones(), *m))
            .filter(|(d, _)| *d <= tau)
            .collect();
        out.sort_unstable_by_key(|(d, _)| *d);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn flip(mut h: u128, bits: &[u8]) -> u128 {
        for b in bits {
            h ^= 1 << (b % 128);
        }
        h
    }

    proptest! {
        /// Every entry within τ ≤ 7 is found, exactly as the scan finds it.
        #[test]
        fn banded_lookup_finds_what_the_scan_finds(
            base in any::<u128>(),
            others in proptest::collection::vec(any::<u128>(), 0..20),
            flips in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..8), 1..10),
            tau in 0u32..8,
        ) {
            let index = Index::default();
            let scope = 7;
            for (i, h) in others.iter().enumerate() {
                index.insert(Meta { scope, id: 1000 + i as u128, simhash: *h });
                index.insert(Meta { scope: 8, id: 2000 + i as u128, simhash: *h });
            }
            for (i, f) in flips.iter().enumerate() {
                index.insert(Meta { scope, id: i as u128, simhash: flip(base, f) });
                index.insert(Meta { scope: 9, id: i as u128, simhash: flip(base, f) });
            }
            let mut got: Vec<u128> = index.candidates(scope, base, tau).iter().map(|c| c.1.id).collect();
            let mut want: Vec<u128> = index.scan(scope, base, tau).iter().map(|c| c.1.id).collect();
            want.truncate(MAX_CANDIDATES);
            got.sort_unstable();
            want.sort_unstable();
            prop_assert_eq!(got.len(), want.len());
            if want.len() < MAX_CANDIDATES { prop_assert_eq!(got, want); }
        }
    }

    /// Found by attack (t_dos.py): 6,000 entries of one SimHash in one scope made
    /// each lookup cost 80-90 ms of CPU, deduplicating by a search of the results
    /// so far. Checks the result over such a bucket (the cost is linear now).
    #[test]
    fn thousands_of_entries_in_one_bucket_give_each_closest_candidate_once() {
        let index = Index::default();
        let base = 0x0123_4567_89ab_cdef_0011_2233_4455_6677u128;
        // 6,000 at distance 2 (the top band differs) and 10 identical ones added
        // last, all in the buckets of the three lower bands.
        for i in 0..6_000u128 {
            index.insert(Meta {
                scope: 1,
                id: 100 + i,
                simhash: base ^ (0b11 << 100),
            });
        }
        for i in 0..10u128 {
            index.insert(Meta {
                scope: 1,
                id: i,
                simhash: base,
            });
            index.insert(Meta {
                scope: 2,
                id: i,
                simhash: base,
            });
        }
        for tau in [3, 7] {
            let got = index.candidates(1, base, tau);
            assert_eq!(got.len(), MAX_CANDIDATES);
            let mut ids: Vec<u128> = got.iter().map(|c| c.1.id).collect();
            let distances: Vec<u32> = got.iter().map(|c| c.0).collect();
            assert_eq!(&distances[..10], &[0; 10], "the closest come first");
            assert!(distances[10..].iter().all(|d| *d == 2), "{distances:?}");
            assert!(got.iter().all(|c| c.1.scope == 1));
            ids[..10].sort_unstable();
            assert_eq!(&ids[..10], &(0..10).collect::<Vec<u128>>()[..]);
            ids.sort_unstable();
            ids.dedup();
            assert_eq!(ids.len(), MAX_CANDIDATES, "each entry once");
        }
        assert!(index.candidates(1, !base, 7).is_empty());
    }

    #[test]
    fn removed_entries_leave_no_bucket_behind() {
        let index = Index::default();
        let slots: Vec<u32> = (0..100u128)
            .map(|i| {
                index.insert(Meta {
                    scope: 1,
                    id: i,
                    simhash: i * 0x1234_5678_9abc_def1,
                })
            })
            .collect();
        assert_eq!(index.len(), 100);
        for s in slots {
            index.remove(s);
            index.remove(s);
        }
        assert!(index.is_empty());
        let inner = index.inner.read().unwrap();
        assert!(inner.bands.iter().all(|b| b.is_empty()));
        assert!(index.candidates(1, 0x1234_5678_9abc_def1, 3).is_empty());
    }
}
