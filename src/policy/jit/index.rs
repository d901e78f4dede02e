//! Rule indexing: a host-computed candidate mask that lets the compiled rule walk
//! skip rules whose condition cannot hold for this request.
//!
//! Why: a straight rule walk costs a few nanoseconds per rule, so a 1,000-rule route
//! would spend microseconds testing rules that mostly compare one request field
//! against different constants (`header("x-team") == "team-7"`, `request.org in
//! [...]`). Production rule engines index such equality tests (Open Policy Agent's
//! "rule indexing" is the same idea); we do it per route.
//!
//! At compile time every rule condition gets a *key set*: pairs (request cell,
//! value) such that whenever the condition holds, the cell equals at least one of
//! the values ([`keys`]). A condition with no such set (a range test, a negation,
//! an endpoint read) is *unindexed* and always a candidate. Per request the host
//! reads the already filled request vector, looks each indexed cell's value up and
//! sets the bits of the rules keyed on it, plus the unindexed rules' bits, in mask
//! cells of the same request vector ([`RouteIndex::fill`]). Compiled code tests a
//! 64-rule mask word before the group and a rule's bit before its condition.
//!
//! Exactness: the mask is a superset of the rules whose condition holds (the key
//! set is a necessary condition) and the compiled code still evaluates every
//! candidate's full condition in source order, so first-match semantics are
//! unchanged. The request vector does not change during the walk; the priority,
//! which `set priority` can change, is keyed only when the set has no `set priority`.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use super::ir::{LTy, Node, Vector};

/// Routes with at least this many rules (default included) are indexed by default
/// ([`super::compile::JitOptions::index_min_rules`]); below it the walk is cheaper
/// than the host's lookups.
pub const INDEX_MIN_RULES: usize = 32;

/// How a keyed cell's raw `u64` is turned into the looked-up value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum KeyKind {
    /// The bits as they are (integers, string ids, priority codes).
    Raw,
    /// A boolean cell: any nonzero value is 1 (what a `B` load computes).
    Bool,
}

/// A necessary condition: the cell (request vector index, read as `kind`) equals one
/// of the values.
pub type KeySet = BTreeMap<(u32, KeyKind), BTreeSet<u64>>;

/// What [`keys`] may treat as a plain request cell.
#[derive(Debug, Clone, Copy)]
pub struct KeyScope {
    /// The request cell holding the priority when no `set priority` can change it
    /// during the walk (`None`: `Node::Priority` is unindexed).
    pub static_priority: Option<u32>,
}

fn req_cell(n: &Node, sc: KeyScope) -> Option<(u32, KeyKind)> {
    match n {
        Node::Load(s, LTy::I) if s.vector == Vector::Req => Some((s.index, KeyKind::Raw)),
        Node::Load(s, LTy::B) if s.vector == Vector::Req => Some((s.index, KeyKind::Bool)),
        Node::Priority => sc.static_priority.map(|c| (c, KeyKind::Raw)),
        _ => None,
    }
}

fn single(cell: (u32, KeyKind), values: impl IntoIterator<Item = u64>) -> KeySet {
    let mut k = KeySet::new();
    k.insert(cell, values.into_iter().collect());
    k
}

fn size(k: &KeySet) -> usize {
    k.values().map(BTreeSet::len).sum()
}

fn union(mut a: KeySet, b: KeySet) -> KeySet {
    for (cell, vs) in b {
        a.entry(cell).or_default().extend(vs);
    }
    a
}

/// The key set of boolean condition `n`, or `None` when it has none (always a
/// candidate). An empty set means the condition never holds.
///
/// `x and y` takes the better of the two sides (fewest values; a non-boolean cell
/// over a boolean one on ties), `x or y` and `if(c, x, y)` need keys on both result
/// sides and take their union.
pub fn keys(n: &Node, sc: KeyScope) -> Option<KeySet> {
    match n {
        Node::Bool(false) => Some(KeySet::new()),
        Node::Load(..) => {
            let cell = req_cell(n, sc)?;
            (cell.1 == KeyKind::Bool).then(|| single(cell, [1]))
        }
        Node::CmpI(crate::policy::checked::CmpOp::Eq, x, y) => {
            let (cell, v) = match (req_cell(x, sc), req_cell(y, sc), &**x, &**y) {
                (Some(c), _, _, Node::Int(v)) | (_, Some(c), Node::Int(v), _) => (c, *v as u64),
                (Some(c), _, _, Node::Bool(v)) | (_, Some(c), Node::Bool(v), _) => {
                    (c, u64::from(*v))
                }
                _ => return None,
            };
            // An integer constant against a boolean cell never arises from the
            // checker; refuse rather than guess.
            match (cell.1, v) {
                (KeyKind::Bool, 0 | 1) | (KeyKind::Raw, _) => Some(single(cell, [v])),
                _ => None,
            }
        }
        Node::InI(x, list) => {
            let cell = req_cell(x, sc)?;
            if cell.1 == KeyKind::Bool && list.iter().any(|v| !matches!(v, 0 | 1)) {
                // Only 0 and 1 can match a boolean; keep the exact members.
                return Some(single(
                    cell,
                    list.iter()
                        .filter(|v| matches!(v, 0 | 1))
                        .map(|v| *v as u64),
                ));
            }
            Some(single(cell, list.iter().map(|v| *v as u64)))
        }
        Node::And(x, y) => match (keys(x, sc), keys(y, sc)) {
            (Some(a), Some(b)) => Some(better(a, b)),
            (a, b) => a.or(b),
        },
        Node::Or(x, y) => Some(union(keys(x, sc)?, keys(y, sc)?)),
        Node::If(LTy::B, _, x, y) => Some(union(keys(x, sc)?, keys(y, sc)?)),
        _ => None,
    }
}

fn better(a: KeySet, b: KeySet) -> KeySet {
    let only_bool = |k: &KeySet| !k.is_empty() && k.keys().all(|(_, kind)| *kind == KeyKind::Bool);
    match size(&a).cmp(&size(&b)) {
        std::cmp::Ordering::Less => a,
        std::cmp::Ordering::Greater => b,
        std::cmp::Ordering::Equal if only_bool(&a) && !only_bool(&b) => b,
        std::cmp::Ordering::Equal => a,
    }
}

/// One keyed cell of a route: value → the rules (indices in the route) keyed on it.
#[derive(Debug)]
struct CellIndex {
    cell: u32,
    kind: KeyKind,
    rules: rustc_hash::FxHashMap<u64, Box<[u32]>>,
}

/// The index of one route: where its candidate mask lives in the request vector and
/// how the host fills it.
#[derive(Debug)]
pub struct RouteIndex {
    /// First mask cell; word `w` holds the bits of rules `64w ..= 64w + 63`.
    pub mask_cell: u32,
    /// Bits of the unindexed rules (always candidates), one word per 64 rules.
    always: Box<[u64]>,
    cells: Box<[CellIndex]>,
}

/// Mask words for `rules` rules.
pub fn words(rules: usize) -> usize {
    rules.div_ceil(64)
}

impl RouteIndex {
    /// The index of a route whose rules (default included, in walk order) have key
    /// sets `keysets` (`None`: unindexed), with its mask at `mask_cell`.
    pub fn new(keysets: &[Option<KeySet>], mask_cell: u32) -> RouteIndex {
        let mut always = vec![0u64; words(keysets.len())];
        let mut by_cell: BTreeMap<(u32, KeyKind), HashMap<u64, Vec<u32>>> = BTreeMap::new();
        for (ki, k) in keysets.iter().enumerate() {
            match k {
                None => {
                    if let Some(w) = always.get_mut(ki / 64) {
                        *w |= 1 << (ki % 64);
                    }
                }
                Some(k) => {
                    for (cell, values) in k {
                        let m = by_cell.entry(*cell).or_default();
                        for v in values {
                            let rules = m.entry(*v).or_default();
                            // One rule can key the same value twice (two disjuncts).
                            if rules.last() != Some(&(ki as u32)) {
                                rules.push(ki as u32);
                            }
                        }
                    }
                }
            }
        }
        let cells = by_cell
            .into_iter()
            .map(|((cell, kind), m)| CellIndex {
                cell,
                kind,
                rules: m
                    .into_iter()
                    .map(|(v, r)| (v, r.into_boxed_slice()))
                    .collect(),
            })
            .collect();
        RouteIndex {
            mask_cell,
            always: always.into_boxed_slice(),
            cells,
        }
    }

    /// Number of mask words.
    pub fn words(&self) -> usize {
        self.always.len()
    }

    /// Writes the mask cells of the filled request vector `fv` from its other cells.
    /// Cells outside `fv` (a layout mismatch, which compilation rules out) leave
    /// every rule a candidate.
    pub fn fill(&self, fv: &mut [u64]) {
        let m = self.mask_cell as usize;
        let Some(mask) = fv.get_mut(m..m + self.always.len()) else {
            return;
        };
        mask.copy_from_slice(&self.always);
        for c in self.cells.iter() {
            let Some(&raw) = fv.get(c.cell as usize) else {
                if let Some(mask) = fv.get_mut(m..m + self.always.len()) {
                    mask.fill(u64::MAX);
                }
                return;
            };
            let v = match c.kind {
                KeyKind::Raw => raw,
                KeyKind::Bool => u64::from(raw != 0),
            };
            if let Some(rules) = c.rules.get(&v) {
                for r in rules.iter() {
                    if let Some(w) = fv.get_mut(m + *r as usize / 64) {
                        *w |= 1 << (r % 64);
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::checked::CmpOp;
    use crate::policy::jit::ir::Slot;

    fn cell(i: u32, t: LTy) -> Box<Node> {
        Box::new(Node::Load(
            Slot {
                vector: Vector::Req,
                index: i,
            },
            t,
        ))
    }

    fn eq(i: u32, v: i64) -> Node {
        Node::CmpI(CmpOp::Eq, cell(i, LTy::I), Box::new(Node::Int(v)))
    }

    const SC: KeyScope = KeyScope {
        static_priority: Some(9),
    };

    fn set(v: &[(u32, KeyKind, &[u64])]) -> KeySet {
        v.iter()
            .map(|(c, k, vs)| ((*c, *k), vs.iter().copied().collect()))
            .collect()
    }

    #[test]
    fn equalities_and_memberships_are_keys() {
        assert_eq!(keys(&eq(3, 7), SC), Some(set(&[(3, KeyKind::Raw, &[7])])));
        let m = Node::InI(cell(4, LTy::I), vec![1, 2]);
        assert_eq!(keys(&m, SC), Some(set(&[(4, KeyKind::Raw, &[1, 2])])));
        let p = Node::CmpI(CmpOp::Eq, Box::new(Node::Int(3)), Box::new(Node::Priority));
        assert_eq!(keys(&p, SC), Some(set(&[(9, KeyKind::Raw, &[3])])));
        let no_static = KeyScope {
            static_priority: None,
        };
        assert_eq!(keys(&p, no_static), None);
        assert_eq!(
            keys(&cell(5, LTy::B), SC),
            Some(set(&[(5, KeyKind::Bool, &[1])]))
        );
        assert_eq!(keys(&Node::Bool(false), SC), Some(KeySet::new()));
    }

    #[test]
    fn other_tests_have_no_keys() {
        let gt = Node::CmpI(CmpOp::Gt, cell(3, LTy::I), Box::new(Node::Int(7)));
        let ne = Node::CmpI(CmpOp::Ne, cell(3, LTy::I), Box::new(Node::Int(7)));
        let not = Node::Not(cell(5, LTy::B));
        for n in [gt, ne, not, Node::Bool(true)] {
            assert_eq!(keys(&n, SC), None, "{n:?}");
        }
        let ep = Node::CmpI(
            CmpOp::Eq,
            Box::new(Node::Load(
                Slot {
                    vector: Vector::Ep,
                    index: 0,
                },
                LTy::I,
            )),
            Box::new(Node::Int(1)),
        );
        assert_eq!(keys(&ep, SC), None);
    }

    #[test]
    fn and_takes_the_better_side_or_needs_both() {
        let gt = || Node::CmpI(CmpOp::Gt, cell(3, LTy::I), Box::new(Node::Int(7)));
        let and = Node::And(Box::new(gt()), Box::new(eq(4, 1)));
        assert_eq!(keys(&and, SC), Some(set(&[(4, KeyKind::Raw, &[1])])));
        // A non-boolean cell wins a tie against a boolean one.
        let and = Node::And(cell(5, LTy::B), Box::new(eq(4, 1)));
        assert_eq!(keys(&and, SC), Some(set(&[(4, KeyKind::Raw, &[1])])));
        let or = Node::Or(Box::new(eq(4, 1)), Box::new(eq(6, 2)));
        assert_eq!(
            keys(&or, SC),
            Some(set(&[(4, KeyKind::Raw, &[1]), (6, KeyKind::Raw, &[2])]))
        );
        let or = Node::Or(Box::new(eq(4, 1)), Box::new(gt()));
        assert_eq!(keys(&or, SC), None);
    }

    #[test]
    fn the_mask_holds_unindexed_rules_and_the_matching_keys() {
        // Rules: 0 keyed on cell 0 == 5, 1 unindexed, 2 never, 70 keyed on cell 1 (bool).
        let mut ks: Vec<Option<KeySet>> = vec![Some(KeySet::new()); 72];
        ks[0] = Some(set(&[(0, KeyKind::Raw, &[5])]));
        ks[1] = None;
        ks[70] = Some(set(&[(1, KeyKind::Bool, &[1])]));
        let ix = RouteIndex::new(&ks, 2);
        assert_eq!(ix.words(), 2);
        let mut fv = [5, 7, 0, 0];
        ix.fill(&mut fv);
        assert_eq!(fv[2..], [0b11, 1 << 6]);
        let mut fv = [4, 0, 0, 0];
        ix.fill(&mut fv);
        assert_eq!(fv[2..], [0b10, 0]);
        // A vector too short for the mask is left alone.
        let mut short = [5, 1, 0];
        ix.fill(&mut short);
        assert_eq!(short, [5, 1, 0]);
    }
}
