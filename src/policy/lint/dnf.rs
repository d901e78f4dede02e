//! Typed conditions → unions of cubes ([`super::domain`]), negation pushed to the
//! leaves. Leaves the domains cannot express exactly become opaque atoms.

use std::collections::{BTreeSet, HashMap};
use std::hash::{Hash, Hasher};

use super::domain::{self, Cube, Dnf, FieldC, FinSet, Interval, Kind, SVal};
use crate::policy::checked::*;

/// Integers beyond this are not represented exactly by `f64`: such comparisons are
/// left opaque.
const EXACT: f64 = 9_007_199_254_740_992.0;

/// Converts conditions of one analysis scope, numbering opaque atoms consistently.
pub struct Conv<'a> {
    set: &'a CheckedPolicySet,
    atoms: Vec<TExpr>,
    /// Atom ids by [`shape`], so finding an atom does not scan every atom (a route
    /// of thousands of rules has thousands of atoms).
    by_shape: HashMap<u64, Vec<u32>>,
    fresh: u32,
    /// When true, every leaf reading `request.priority` is a fresh atom: `set
    /// priority` may change the value between two conditions of the scope.
    pub priority_mutable: bool,
}

/// A leaf on one request field: the field and a constant on the right.
struct FieldLeaf {
    field: ReqField,
    konst: Const,
}

impl<'a> Conv<'a> {
    /// A converter for conditions of `set`.
    pub fn new(set: &'a CheckedPolicySet, priority_mutable: bool) -> Conv<'a> {
        Conv {
            set,
            atoms: Vec::new(),
            by_shape: HashMap::new(),
            fresh: 1 << 30,
            priority_mutable,
        }
    }

    /// The union of cubes where `e` (or, with `neg`, `not e`) holds; `None` of
    /// `Option<Dnf>` never happens: `Dnf` itself carries "unknown".
    pub fn dnf(&mut self, e: &TExpr, neg: bool) -> Dnf {
        match &e.kind {
            TExprKind::Const(Const::Bool(b)) => {
                if *b != neg {
                    domain::top()
                } else {
                    Some(Vec::new())
                }
            }
            TExprKind::Not(x) => self.dnf(x, !neg),
            TExprKind::And(a, b) | TExprKind::Or(a, b) => {
                let conj = matches!(e.kind, TExprKind::And(..)) != neg;
                let (x, y) = (self.dnf(a, neg), self.dnf(b, neg));
                if conj {
                    domain::and(&x, &y)
                } else {
                    domain::or(x, y)
                }
            }
            TExprKind::If(c, a, b) => {
                let (ct, cf) = (self.dnf(c, false), self.dnf(c, true));
                let (x, y) = (self.dnf(a, neg), self.dnf(b, neg));
                domain::or(domain::and(&ct, &x), domain::and(&cf, &y))
            }
            TExprKind::Has(f) if !self.opaque_field(*f) => {
                let mut c = FieldC::full(*f);
                c.present = !neg;
                c.absent = c.absent && neg;
                Some(Cube::of_field(c).into_iter().collect())
            }
            TExprKind::Req(f) if e.ty == Ty::Bool && !self.opaque_field(*f) => {
                let s = FinSet::In([SVal::Bool(!neg)].into());
                Some(Cube::of_field(FieldC::set(*f, s)).into_iter().collect())
            }
            TExprKind::Cmp(op, l, r) => match self.field_leaf(l, r, *op) {
                Some((leaf, op)) => self.cmp(leaf, op, neg).unwrap_or_else(|| self.atom(e, neg)),
                None => self.atom(e, neg),
            },
            TExprKind::In(x, list, not) => {
                let leaf = field_of(x).filter(|f| !self.opaque_field(*f));
                match leaf.and_then(|f| self.member(f, list, neg != *not)) {
                    Some(d) => d,
                    None => self.atom(e, neg),
                }
            }
            _ => self.atom(e, neg),
        }
    }

    fn opaque_field(&self, f: ReqField) -> bool {
        self.priority_mutable && f == ReqField::Priority
    }

    fn atom(&mut self, e: &TExpr, neg: bool) -> Dnf {
        let id = if self.priority_mutable && reads_priority(e) {
            self.fresh += 1;
            self.fresh
        } else {
            let ids = self.by_shape.entry(shape(e)).or_default();
            match ids.iter().find(|&&i| self.atoms[i as usize] == *e) {
                Some(&i) => i,
                None => {
                    let id = self.atoms.len() as u32;
                    self.atoms.push(e.clone());
                    ids.push(id);
                    id
                }
            }
        };
        Some(vec![Cube::of_atom(id, !neg)])
    }

    fn field_leaf(&self, l: &TExpr, r: &TExpr, op: CmpOp) -> Option<(FieldLeaf, CmpOp)> {
        if let (Some(field), Some(konst)) = (field_of(l), const_of(r)) {
            return (!self.opaque_field(field)).then_some((FieldLeaf { field, konst }, op));
        }
        let (field, konst) = (field_of(r)?, const_of(l)?);
        let flipped = match op {
            CmpOp::Lt => CmpOp::Gt,
            CmpOp::Le => CmpOp::Ge,
            CmpOp::Gt => CmpOp::Lt,
            CmpOp::Ge => CmpOp::Le,
            o => o,
        };
        (!self.opaque_field(field)).then_some((FieldLeaf { field, konst }, flipped))
    }

    fn sval(&self, c: Const) -> Option<SVal> {
        match c {
            Const::Str(s) => Some(SVal::Str(self.set.strings.resolve(s).to_string())),
            Const::Bool(b) => Some(SVal::Bool(b)),
            Const::Priority(p) => Some(SVal::Prio(p)),
            _ => None,
        }
    }

    fn cmp(&self, leaf: FieldLeaf, op: CmpOp, neg: bool) -> Option<Dnf> {
        let op = if neg { negate(op) } else { op };
        let f = leaf.field;
        let cubes =
            |cs: Vec<FieldC>| -> Dnf { Some(cs.into_iter().filter_map(Cube::of_field).collect()) };
        match domain::kind(f).0 {
            Kind::Int(..) | Kind::Float => {
                let v = match leaf.konst {
                    Const::Int(i) => i as f64,
                    Const::Float(x) => x,
                    _ => return None,
                };
                if !v.is_finite() || v.abs() >= EXACT {
                    return None;
                }
                let iv = |lo: f64, lo_inc, hi: f64, hi_inc| Interval {
                    lo,
                    lo_inc,
                    hi,
                    hi_inc,
                };
                let (ninf, pinf) = (f64::NEG_INFINITY, f64::INFINITY);
                Some(match op {
                    CmpOp::Eq => cubes(vec![FieldC::num(f, iv(v, true, v, true))]),
                    CmpOp::Ne => cubes(vec![
                        FieldC::num(f, iv(ninf, false, v, false)),
                        FieldC::num(f, iv(v, false, pinf, false)),
                    ]),
                    CmpOp::Lt => cubes(vec![FieldC::num(f, iv(ninf, false, v, false))]),
                    CmpOp::Le => cubes(vec![FieldC::num(f, iv(ninf, false, v, true))]),
                    CmpOp::Gt => cubes(vec![FieldC::num(f, iv(v, false, pinf, false))]),
                    CmpOp::Ge => cubes(vec![FieldC::num(f, iv(v, true, pinf, false))]),
                })
            }
            Kind::Str | Kind::Bool => {
                let v = self.sval(leaf.konst)?;
                let s: BTreeSet<SVal> = [v].into();
                Some(match op {
                    CmpOp::Eq => cubes(vec![FieldC::set(f, FinSet::In(s))]),
                    CmpOp::Ne => cubes(vec![FieldC::set(f, FinSet::NotIn(s))]),
                    _ => return None,
                })
            }
            Kind::Prio => {
                let Const::Priority(p) = leaf.konst else {
                    return None;
                };
                let ok: BTreeSet<SVal> = crate::policy::ast::PriorityLevel::ALL
                    .iter()
                    .map(|(_, l)| *l)
                    .filter(|l| match op {
                        CmpOp::Eq => *l == p,
                        CmpOp::Ne => *l != p,
                        CmpOp::Lt => *l < p,
                        CmpOp::Le => *l <= p,
                        CmpOp::Gt => *l > p,
                        CmpOp::Ge => *l >= p,
                    })
                    .map(SVal::Prio)
                    .collect();
                Some(cubes(vec![FieldC::set(f, FinSet::In(ok))]))
            }
        }
    }

    /// `f in list` (or `not in` when `negated`).
    fn member(&self, f: ReqField, list: &[Const], negated: bool) -> Option<Dnf> {
        match domain::kind(f).0 {
            Kind::Int(..) | Kind::Float => {
                if list.len() > 64 {
                    return None;
                }
                let mut out: Dnf = Some(if negated {
                    vec![Cube::default()]
                } else {
                    Vec::new()
                });
                for c in list {
                    let leaf = FieldLeaf {
                        field: f,
                        konst: *c,
                    };
                    let d = self.cmp(leaf, CmpOp::Eq, negated)?;
                    out = if negated {
                        domain::and(&out, &d)
                    } else {
                        domain::or(out, d)
                    };
                }
                Some(out)
            }
            _ => {
                let s: BTreeSet<SVal> =
                    list.iter().map(|c| self.sval(*c)).collect::<Option<_>>()?;
                // Priorities and booleans have a finite universe: `not in` is the
                // rest of it, so a list naming every level is provably always true.
                let universe: Option<BTreeSet<SVal>> = match domain::kind(f).0 {
                    Kind::Prio => Some(
                        crate::policy::ast::PriorityLevel::ALL
                            .iter()
                            .map(|(_, l)| SVal::Prio(*l))
                            .collect(),
                    ),
                    Kind::Bool => Some([SVal::Bool(false), SVal::Bool(true)].into()),
                    _ => None,
                };
                let s = match (negated, universe) {
                    (true, Some(u)) => FinSet::In(u.difference(&s).cloned().collect()),
                    (true, None) => FinSet::NotIn(s),
                    (false, _) => FinSet::In(s),
                };
                Some(Some(
                    Cube::of_field(FieldC::set(f, s)).into_iter().collect(),
                ))
            }
        }
    }
}

fn negate(op: CmpOp) -> CmpOp {
    match op {
        CmpOp::Eq => CmpOp::Ne,
        CmpOp::Ne => CmpOp::Eq,
        CmpOp::Lt => CmpOp::Ge,
        CmpOp::Le => CmpOp::Gt,
        CmpOp::Gt => CmpOp::Le,
        CmpOp::Ge => CmpOp::Lt,
    }
}

/// The request field `e` reads, looking through int→float promotion.
fn field_of(e: &TExpr) -> Option<ReqField> {
    match &e.kind {
        TExprKind::Req(f) => Some(*f),
        TExprKind::ToFloat(x) => field_of(x),
        _ => None,
    }
}

/// The constant `e` denotes, looking through promotion and negation of numbers.
fn const_of(e: &TExpr) -> Option<Const> {
    match &e.kind {
        TExprKind::Const(c) => Some(*c),
        TExprKind::ToFloat(x) => match const_of(x)? {
            Const::Int(i) => Some(Const::Float(i as f64)),
            c => Some(c),
        },
        TExprKind::Neg(x) => match const_of(x)? {
            Const::Int(i) => Some(Const::Int(i.saturating_neg())),
            Const::Float(f) => Some(Const::Float(-f)),
            _ => None,
        },
        _ => None,
    }
}

/// A hash of `e`'s structure (node kinds and constants, not spans): equal
/// expressions have equal shapes.
fn shape(e: &TExpr) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    visit(e, &mut |x| {
        std::mem::discriminant(&x.kind).hash(&mut h);
        match &x.kind {
            TExprKind::Const(c) => match c {
                Const::Bool(b) => b.hash(&mut h),
                Const::Int(i) => i.hash(&mut h),
                Const::Float(f) => f.to_bits().hash(&mut h),
                Const::Str(s) => s.hash(&mut h),
                Const::Priority(p) => p.hash(&mut h),
            },
            TExprKind::Req(f) | TExprKind::Has(f) => f.hash(&mut h),
            TExprKind::Param(i) | TExprKind::Let(i) | TExprKind::State(i) => i.hash(&mut h),
            _ => {}
        }
    });
    h.finish()
}

/// Whether `e` reads `request.priority` anywhere.
fn reads_priority(e: &TExpr) -> bool {
    let mut found = false;
    visit(e, &mut |x| {
        found |= matches!(x.kind, TExprKind::Req(ReqField::Priority))
    });
    found
}

/// Calls `f` on `e` and every sub-expression.
pub fn visit(e: &TExpr, f: &mut dyn FnMut(&TExpr)) {
    f(e);
    match &e.kind {
        TExprKind::ToFloat(x)
        | TExprKind::Not(x)
        | TExprKind::Neg(x)
        | TExprKind::In(x, ..)
        | TExprKind::Match(_, x, _)
        | TExprKind::Agg(_, _, x) => visit(x, f),
        TExprKind::And(a, b)
        | TExprKind::Or(a, b)
        | TExprKind::Arith(_, a, b)
        | TExprKind::Cmp(_, a, b) => {
            visit(a, f);
            visit(b, f);
        }
        TExprKind::If(a, b, c) => {
            visit(a, f);
            visit(b, f);
            visit(c, f);
        }
        TExprKind::Math(_, xs) => xs.iter().for_each(|x| visit(x, f)),
        _ => {}
    }
}
