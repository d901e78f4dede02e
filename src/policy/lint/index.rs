//! Which earlier units (routes, or rules of one route) can matter to a later one, so
//! the shadowing and overlap analyses need not compare every pair.
//!
//! Both analyses look only at an earlier unit `a` whose condition meets the later
//! unit's condition in context: an overlap needs a common request, and a shadowing
//! `a` must contain the later unit's (non-empty) requests. Two conditions cannot meet
//! when, on some field both constrain in every box, their values are disjoint (a
//! string in `{"t1"}` against `{"t2"}`, `input_tokens` in `[0, 9]` against `[10,
//! 19]`): every pair of boxes then fails on that field, exactly as
//! [`super::domain::and`] would find. The index keeps, per unit, the union of each
//! field's values over its boxes (its *footprint*), buckets the units by the values
//! of the most selective finite-set field, and filters the candidates of a bucket by
//! the whole footprint. Candidates come back in unit order, so the analyses see the
//! same units in the same order as a scan over all of them, minus ones that cannot
//! meet: the findings are identical (`tests::index_matches_pairwise_scan`).

use std::collections::{BTreeMap, BTreeSet, HashMap};

use super::domain::{Dnf, FinSet, SVal, ValC};
use crate::policy::checked::ReqField;

/// The values one field takes over all boxes of a condition.
#[derive(Debug, Clone)]
enum Foot {
    /// One of these finite-set values.
    Set(BTreeSet<SVal>),
    /// A number in `[lo, hi]` (bounds widened to closed).
    Num(f64, f64),
}

impl Foot {
    fn disjoint(&self, o: &Foot) -> bool {
        match (self, o) {
            (Foot::Set(a), Foot::Set(b)) => a.is_disjoint(b),
            (Foot::Num(a, b), Foot::Num(c, d)) => b < c || d < a,
            _ => false,
        }
    }
}

/// A condition's footprint: fields constrained in every box, with their values.
/// `None`: the condition is provably empty (it meets nothing).
type Footprint = Option<Vec<(ReqField, Foot)>>;

fn foot_of(v: &ValC) -> Option<Foot> {
    match v {
        ValC::Set(FinSet::In(s)) => Some(Foot::Set(s.clone())),
        ValC::Set(FinSet::NotIn(_)) => None,
        ValC::Num(iv) => Some(Foot::Num(iv.lo, iv.hi)),
    }
}

fn join(a: Foot, b: Foot) -> Option<Foot> {
    match (a, b) {
        (Foot::Set(mut x), Foot::Set(y)) => {
            x.extend(y);
            Some(Foot::Set(x))
        }
        (Foot::Num(a, b), Foot::Num(c, d)) => Some(Foot::Num(a.min(c), b.max(d))),
        _ => None,
    }
}

fn footprint(d: &Dnf) -> Footprint {
    let Some(cubes) = d else {
        return Some(Vec::new());
    };
    let (first, rest) = cubes.split_first()?;
    let mut out: Vec<(ReqField, Foot)> = first
        .fields
        .iter()
        .filter_map(|c| Some((c.field, foot_of(&c.val)?)))
        .collect();
    for cube in rest {
        out = out
            .into_iter()
            .filter_map(|(f, foot)| {
                let c = cube.field(f)?;
                Some((f, join(foot, foot_of(&c.val)?)?))
            })
            .collect();
        if out.is_empty() {
            break;
        }
    }
    Some(out)
}

fn meets(a: &[(ReqField, Foot)], b: &[(ReqField, Foot)]) -> bool {
    !a.iter().any(|(f, x)| {
        b.iter()
            .find(|(g, _)| g == f)
            .is_some_and(|(_, y)| x.disjoint(y))
    })
}

/// Candidate earlier units per unit.
pub struct Index {
    feet: Vec<Footprint>,
    key: Option<ReqField>,
    buckets: BTreeMap<SVal, Vec<usize>>,
    /// Units without a finite set on the key field (candidates for every query).
    wild: Vec<usize>,
    /// Units added so far (a prefix of the unit order).
    added: usize,
}

impl Index {
    /// An empty index over units whose conditions are `conds` (in unit order).
    pub fn new(conds: &[Dnf]) -> Index {
        let feet: Vec<Footprint> = conds.iter().map(footprint).collect();
        // The key: the finite-set field most units are bucketed by.
        let mut count: HashMap<ReqField, usize> = HashMap::new();
        for f in feet.iter().flatten() {
            for (field, foot) in f {
                if matches!(foot, Foot::Set(_)) {
                    *count.entry(*field).or_default() += 1;
                }
            }
        }
        let key = count
            .into_iter()
            .max_by_key(|(f, n)| (*n, format!("{f:?}")))
            .map(|(f, _)| f);
        Index {
            feet,
            key,
            buckets: BTreeMap::new(),
            wild: Vec::new(),
            added: 0,
        }
    }

    fn key_set(&self, i: usize) -> Option<&BTreeSet<SVal>> {
        let key = self.key?;
        self.feet[i]
            .as_ref()?
            .iter()
            .find(|(f, _)| *f == key)
            .and_then(|(_, foot)| match foot {
                Foot::Set(s) => Some(s),
                Foot::Num(..) => None,
            })
    }

    /// Makes unit `i` (the next in order) a candidate for later queries.
    pub fn add(&mut self, i: usize) {
        debug_assert_eq!(i, self.added);
        self.added = i + 1;
        if self.feet[i].is_none() {
            return;
        }
        match self.key_set(i).cloned() {
            Some(s) => {
                for v in s {
                    self.buckets.entry(v).or_default().push(i);
                }
            }
            None => self.wild.push(i),
        }
    }

    /// The units added so far whose condition may meet unit `j`'s, ascending.
    pub fn candidates(&self, j: usize) -> Vec<usize> {
        let Some(fj) = &self.feet[j] else {
            return Vec::new();
        };
        #[cfg(test)]
        if EXHAUSTIVE.with(|e| e.get()) {
            return (0..self.added).collect();
        }
        let mut out: Vec<usize> = match self.key_set(j) {
            Some(s) => {
                let mut v = self.wild.clone();
                for x in s {
                    v.extend(self.buckets.get(x).into_iter().flatten());
                }
                v.sort_unstable();
                v.dedup();
                v
            }
            None => (0..self.added).collect(),
        };
        out.retain(|&i| self.feet[i].as_ref().is_some_and(|fi| meets(fi, fj)));
        out
    }
}

#[cfg(test)]
thread_local! {
    /// Test switch: every earlier unit is a candidate (the pairwise scan the index
    /// replaces), to compare findings against.
    pub static EXHAUSTIVE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}
