//! Strategy state (for example Exp3 weights, round-robin pick counts): one column
//! per (strategy, slot name), one cell per endpoint, indexed by endpoint index.
//!
//! A decision of a stateful strategy reads the slots of every candidate. With a
//! map per endpoint behind a mutex per endpoint, that cost a lock and two string
//! lookups per candidate. Here the names are looked up once per decision (one
//! column per slot) and each candidate's value is an atomic load at its index, so
//! the per-candidate cost does not depend on names or locks. Writes (`on pick`,
//! `on success`, `on failure`) look up their columns by name the same way and store
//! atomically; columns are created on first write and live as long as the store,
//! so state survives policy reloads as before (it is keyed by names, not by the
//! indices of one loaded set).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

/// One state slot of one strategy, for every endpoint.
#[derive(Debug)]
pub(crate) struct Column {
    strategy: String,
    slot: String,
    /// The value of endpoint `i` (`f64` bits), meaningful once `present[i]`.
    values: Box<[AtomicU64]>,
    present: Box<[AtomicBool]>,
}

impl Column {
    fn new(strategy: &str, slot: &str, endpoints: usize) -> Column {
        Column {
            strategy: strategy.to_string(),
            slot: slot.to_string(),
            values: (0..endpoints).map(|_| AtomicU64::new(0)).collect(),
            present: (0..endpoints).map(|_| AtomicBool::new(false)).collect(),
        }
    }

    /// Endpoint `i`'s value, if it holds one.
    #[inline]
    pub(crate) fn get(&self, i: usize) -> Option<f64> {
        let held = self.present.get(i)?.load(Ordering::Acquire);
        held.then(|| f64::from_bits(self.values[i].load(Ordering::Relaxed)))
    }

    /// The values of endpoints `start..start + n`, each as [`Column::get`] reads it;
    /// `None` when the range is not inside the column. One bounds check for the run
    /// instead of two per endpoint (a model's endpoints are consecutive indices).
    #[inline]
    pub(crate) fn run(
        &self,
        start: usize,
        n: usize,
    ) -> Option<impl Iterator<Item = Option<f64>> + '_> {
        let range = start..start.checked_add(n)?;
        let (present, values) = (self.present.get(range.clone())?, self.values.get(range)?);
        Some(present.iter().zip(values).map(|(p, v)| {
            p.load(Ordering::Acquire)
                .then(|| f64::from_bits(v.load(Ordering::Relaxed)))
        }))
    }

    fn set(&self, i: usize, v: f64) {
        if let (Some(value), Some(present)) = (self.values.get(i), self.present.get(i)) {
            value.store(v.to_bits(), Ordering::Relaxed);
            present.store(true, Ordering::Release);
        }
    }
}

#[derive(Debug, Default)]
struct Columns {
    /// In creation order.
    all: Vec<Arc<Column>>,
    /// Strategy name → slot name → index into `all`.
    /// Strategy → slot → column index; read on every decision of a stateful
    /// strategy, so foldhash (randomly seeded) rather than SipHash.
    by_name: foldhash::HashMap<String, foldhash::HashMap<String, usize>>,
}

/// The strategy state of every endpoint of a store.
#[derive(Debug)]
pub(crate) struct StateTable {
    endpoints: usize,
    columns: RwLock<Columns>,
}

impl StateTable {
    /// An empty table for `endpoints` endpoints.
    pub(crate) fn new(endpoints: usize) -> StateTable {
        StateTable {
            endpoints,
            columns: RwLock::new(Columns::default()),
        }
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Columns> {
        self.columns.read().unwrap_or_else(|p| p.into_inner())
    }

    /// The column of `strategy`'s slot `slot`, if some endpoint ever held it.
    pub(crate) fn column(&self, strategy: &str, slot: &str) -> Option<Arc<Column>> {
        let c = self.read();
        let i = *c.by_name.get(strategy)?.get(slot)?;
        c.all.get(i).cloned()
    }

    /// Sets endpoint `i`'s slots of `strategy` (creating a column only for a slot
    /// no endpoint held before); an index outside the table is ignored.
    pub(crate) fn set<K: AsRef<str>>(&self, i: usize, strategy: &str, slots: &BTreeMap<K, f64>) {
        if i >= self.endpoints {
            return;
        }
        for (k, v) in slots {
            let slot = k.as_ref();
            let col = match self.column(strategy, slot) {
                Some(c) => c,
                None => self.create(strategy, slot),
            };
            col.set(i, *v);
        }
    }

    /// The column of (`strategy`, `slot`), made if no other writer made it first.
    fn create(&self, strategy: &str, slot: &str) -> Arc<Column> {
        let mut c = self.columns.write().unwrap_or_else(|p| p.into_inner());
        if let Some(&i) = c.by_name.get(strategy).and_then(|m| m.get(slot)) {
            return c.all[i].clone();
        }
        let col = Arc::new(Column::new(strategy, slot, self.endpoints));
        let i = c.all.len();
        c.all.push(col.clone());
        c.by_name
            .entry(strategy.to_string())
            .or_default()
            .insert(slot.to_string(), i);
        col
    }

    /// Endpoint `i`'s slots of `strategy` (slot name → value), if it holds any.
    pub(crate) fn strategy_of(&self, i: usize, strategy: &str) -> Option<BTreeMap<String, f64>> {
        let c = self.read();
        let mut out = BTreeMap::new();
        for (slot, &k) in c.by_name.get(strategy)? {
            if let Some(v) = c.all[k].get(i) {
                out.insert(slot.clone(), v);
            }
        }
        (!out.is_empty()).then_some(out)
    }

    /// Every slot endpoint `i` holds, by strategy and slot name.
    pub(crate) fn all_of(&self, i: usize) -> BTreeMap<String, BTreeMap<String, f64>> {
        let c = self.read();
        let mut out: BTreeMap<String, BTreeMap<String, f64>> = BTreeMap::new();
        for col in &c.all {
            if let Some(v) = col.get(i) {
                out.entry(col.strategy.clone())
                    .or_default()
                    .insert(col.slot.clone(), v);
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_are_kept_per_endpoint_strategy_and_name() {
        let t = StateTable::new(3);
        assert!(t.column("exp3", "w").is_none());
        t.set(1, "exp3", &BTreeMap::from([("w", 2.5), ("n", 1.0)]));
        t.set(2, "exp3", &BTreeMap::from([("w", -0.0)]));
        t.set(0, "rr", &BTreeMap::from([("served", 7.0)]));
        t.set(9, "rr", &BTreeMap::from([("served", 1.0)]));
        let w = t.column("exp3", "w").unwrap();
        assert_eq!((w.get(0), w.get(1), w.get(3)), (None, Some(2.5), None));
        assert!(w.get(2).unwrap().is_sign_negative(), "bits kept");
        assert!(t.column("exp3", "served").is_none());
        assert_eq!(
            t.strategy_of(1, "exp3"),
            Some(BTreeMap::from([
                ("n".to_string(), 1.0),
                ("w".to_string(), 2.5)
            ]))
        );
        assert_eq!(t.strategy_of(2, "rr"), None);
        assert_eq!(t.strategy_of(0, "rr").unwrap()["served"], 7.0);
        let all = t.all_of(1);
        assert_eq!(all.len(), 1);
        assert_eq!(all["exp3"].len(), 2);
        // A later write replaces the value.
        t.set(1, "exp3", &BTreeMap::from([("w", 3.0)]));
        assert_eq!(w.get(1), Some(3.0));
    }

    /// Writers adding different columns at once must all land, and a column found
    /// before a later one was added still sees writes made after.
    #[test]
    fn columns_added_at_once_from_several_threads_all_land() {
        let t = Arc::new(StateTable::new(4));
        t.set(0, "s", &BTreeMap::from([("first", 1.0)]));
        let first = t.column("s", "first").unwrap();
        let writers: Vec<_> = (0..4)
            .map(|w| {
                let t = t.clone();
                std::thread::spawn(move || {
                    for k in 0..50 {
                        let slot = format!("w{w}-{k}");
                        t.set(w, "s", &BTreeMap::from([(slot.as_str(), f64::from(k))]));
                    }
                })
            })
            .collect();
        for w in writers {
            w.join().unwrap();
        }
        for w in 0..4usize {
            for k in 0..50 {
                let col = t.column("s", &format!("w{w}-{k}")).unwrap();
                assert_eq!(col.get(w), Some(f64::from(k)), "w{w}-{k}");
            }
        }
        t.set(3, "s", &BTreeMap::from([("first", 2.0)]));
        assert_eq!((first.get(0), first.get(3)), (Some(1.0), Some(2.0)));
        assert_eq!(t.all_of(0).get("s").map(BTreeMap::len), Some(51));
    }
}
