//! Abstract domains for condition analysis: a condition becomes a union of *boxes*
//! (disjunctive normal form), each box a conjunction of per-field constraints.
//!
//! - numbers: one interval per field and box (integer fields with integer bounds);
//! - strings: a finite set `in {..}` or a co-finite set `not in {..}`;
//! - booleans and priorities: a subset of their finite universe;
//! - optional fields: which of absent / present is allowed (an absent field reads as
//!   its default value, 0 or "", exactly as the interpreter does).
//!
//! Anything else (arithmetic, string matches, field-to-field comparisons, endpoint
//! fields) is an *opaque atom*: a free boolean variable. Treating atoms as independent
//! over-approximates what is satisfiable, so "empty" answers are always sound: the
//! linter only claims unreachability or implication when a box set is provably empty.

use std::collections::BTreeSet;

use crate::policy::ast::PriorityLevel;
use crate::policy::checked::ReqField;

/// Largest number of boxes kept; beyond it the analysis answers "unknown".
pub const MAX_BOXES: usize = 256;

/// Values of finite-set fields.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum SVal {
    /// A string.
    Str(String),
    /// A boolean.
    Bool(bool),
    /// A priority level.
    Prio(PriorityLevel),
}

/// How a field's values are abstracted.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Kind {
    /// Integer with inclusive bounds of its natural domain.
    Int(f64, f64),
    /// Float (never NaN in requests: JSON has no NaN).
    Float,
    /// String.
    Str,
    /// Boolean.
    Bool,
    /// Priority level.
    Prio,
}

/// The abstraction of `f` and whether it is optional.
pub fn kind(f: ReqField) -> (Kind, bool) {
    const BIG: f64 = 9.2e18;
    match f {
        ReqField::Model | ReqField::Task => (Kind::Str, false),
        ReqField::InputTokens | ReqField::Messages => (Kind::Int(0.0, BIG), false),
        ReqField::MaxTokens => (Kind::Int(0.0, BIG), true),
        ReqField::Temperature => (Kind::Float, true),
        ReqField::BudgetRemaining => (Kind::Float, false),
        ReqField::Stream | ReqField::Tools | ReqField::OffPeak | ReqField::Scope(_) => {
            (Kind::Bool, false)
        }
        ReqField::ApiKey | ReqField::Org | ReqField::Header(_) | ReqField::Metadata(_) => {
            (Kind::Str, true)
        }
        ReqField::Priority => (Kind::Prio, false),
        ReqField::Hour => (Kind::Int(0.0, 23.0), false),
        ReqField::Weekday => (Kind::Int(1.0, 7.0), false),
    }
}

/// An interval of numbers; integer fields keep integer, inclusive bounds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Interval {
    /// Lower bound (may be -inf).
    pub lo: f64,
    /// Whether `lo` is included.
    pub lo_inc: bool,
    /// Upper bound (may be +inf).
    pub hi: f64,
    /// Whether `hi` is included.
    pub hi_inc: bool,
}

impl Interval {
    /// Every number.
    pub const ALL: Interval = Interval {
        lo: f64::NEG_INFINITY,
        lo_inc: false,
        hi: f64::INFINITY,
        hi_inc: false,
    };

    fn normalize(mut self, int: bool) -> Interval {
        if int {
            if self.lo.is_finite() {
                let c = self.lo.ceil();
                self.lo = if c == self.lo && !self.lo_inc {
                    c + 1.0
                } else {
                    c
                };
                self.lo_inc = true;
            }
            if self.hi.is_finite() {
                let f = self.hi.floor();
                self.hi = if f == self.hi && !self.hi_inc {
                    f - 1.0
                } else {
                    f
                };
                self.hi_inc = true;
            }
        }
        self
    }

    /// Whether no number lies in the interval.
    pub fn is_empty(&self) -> bool {
        self.lo > self.hi || (self.lo == self.hi && !(self.lo_inc && self.hi_inc))
    }

    fn meet(&self, o: &Interval) -> Interval {
        let (lo, lo_inc) = if self.lo > o.lo || (self.lo == o.lo && !self.lo_inc) {
            (self.lo, self.lo_inc)
        } else {
            (o.lo, o.lo_inc)
        };
        let (hi, hi_inc) = if self.hi < o.hi || (self.hi == o.hi && !self.hi_inc) {
            (self.hi, self.hi_inc)
        } else {
            (o.hi, o.hi_inc)
        };
        Interval {
            lo,
            lo_inc,
            hi,
            hi_inc,
        }
    }

    fn contains(&self, v: f64) -> bool {
        (v > self.lo || (self.lo_inc && v == self.lo))
            && (v < self.hi || (self.hi_inc && v == self.hi))
    }

    /// A number in the interval (the interval must not be empty).
    pub fn pick(&self) -> f64 {
        match (self.lo.is_finite(), self.hi.is_finite()) {
            (true, _) if self.lo_inc => self.lo,
            (true, true) => (self.lo + self.hi) / 2.0,
            (true, false) => self.lo + 1.0,
            (false, true) if self.hi_inc => self.hi.min(0.0),
            (false, true) => (self.hi - 1.0).min(0.0),
            (false, false) => 0.0,
        }
    }
}

/// A set of finite-set values: `In` lists the allowed ones, `NotIn` the excluded ones.
#[derive(Debug, Clone, PartialEq)]
pub enum FinSet {
    /// Exactly these.
    In(BTreeSet<SVal>),
    /// Anything but these.
    NotIn(BTreeSet<SVal>),
}

impl FinSet {
    fn meet(&self, o: &FinSet) -> FinSet {
        match (self, o) {
            (FinSet::In(a), FinSet::In(b)) => FinSet::In(a.intersection(b).cloned().collect()),
            (FinSet::In(a), FinSet::NotIn(b)) | (FinSet::NotIn(b), FinSet::In(a)) => {
                FinSet::In(a.difference(b).cloned().collect())
            }
            (FinSet::NotIn(a), FinSet::NotIn(b)) => FinSet::NotIn(a.union(b).cloned().collect()),
        }
    }

    fn contains(&self, v: &SVal) -> bool {
        match self {
            FinSet::In(s) => s.contains(v),
            FinSet::NotIn(s) => !s.contains(v),
        }
    }

    fn is_empty(&self) -> bool {
        matches!(self, FinSet::In(s) if s.is_empty())
    }
}

/// The value part of a field constraint.
#[derive(Debug, Clone, PartialEq)]
pub enum ValC {
    /// A numeric field.
    Num(Interval),
    /// A finite-set field.
    Set(FinSet),
}

/// What a box allows for one field.
#[derive(Debug, Clone, PartialEq)]
pub struct FieldC {
    /// The field.
    pub field: ReqField,
    /// Whether the field may be absent (optional fields only).
    pub absent: bool,
    /// Whether the field may be present.
    pub present: bool,
    /// Allowed values (of the effective value: the default when absent).
    pub val: ValC,
}

impl FieldC {
    /// No constraint beyond the field's natural domain.
    pub fn full(field: ReqField) -> FieldC {
        let (k, optional) = kind(field);
        let val = match k {
            Kind::Int(lo, hi) => ValC::Num(Interval {
                lo,
                lo_inc: true,
                hi,
                hi_inc: true,
            }),
            Kind::Float => ValC::Num(Interval::ALL),
            Kind::Str => ValC::Set(FinSet::NotIn(BTreeSet::new())),
            Kind::Bool => ValC::Set(FinSet::In([SVal::Bool(false), SVal::Bool(true)].into())),
            Kind::Prio => ValC::Set(FinSet::In(
                PriorityLevel::ALL
                    .iter()
                    .map(|(_, l)| SVal::Prio(*l))
                    .collect(),
            )),
        };
        FieldC {
            field,
            absent: optional,
            present: true,
            val,
        }
    }

    /// The field restricted to numbers in `iv`.
    pub fn num(field: ReqField, iv: Interval) -> FieldC {
        let int = matches!(kind(field).0, Kind::Int(..));
        let mut c = FieldC::full(field);
        let base = match c.val {
            ValC::Num(b) => b,
            ValC::Set(_) => Interval::ALL,
        };
        c.val = ValC::Num(base.meet(&iv).normalize(int));
        c
    }

    /// The field restricted to the finite-set values `s`.
    pub fn set(field: ReqField, s: FinSet) -> FieldC {
        let mut c = FieldC::full(field);
        c.val = ValC::Set(s);
        c
    }

    fn meet(&self, o: &FieldC) -> FieldC {
        let int = matches!(kind(self.field).0, Kind::Int(..));
        let val = match (&self.val, &o.val) {
            (ValC::Num(a), ValC::Num(b)) => ValC::Num(a.meet(b).normalize(int)),
            (ValC::Set(a), ValC::Set(b)) => ValC::Set(a.meet(b)),
            // Mixed kinds cannot happen for one field; keep the left side (sound: it
            // only loses precision, never claims emptiness).
            (a, _) => a.clone(),
        };
        FieldC {
            field: self.field,
            absent: self.absent && o.absent,
            present: self.present && o.present,
            val,
        }
    }

    /// Whether the default value (read when the field is absent) is allowed.
    fn default_allowed(&self) -> bool {
        match &self.val {
            ValC::Num(iv) => iv.contains(0.0),
            ValC::Set(s) => s.contains(&SVal::Str(String::new())),
        }
    }

    fn value_nonempty(&self) -> bool {
        match &self.val {
            ValC::Num(iv) => !iv.is_empty(),
            ValC::Set(s) => !s.is_empty(),
        }
    }

    /// Whether some request satisfies the constraint.
    pub fn is_sat(&self) -> bool {
        (self.present && self.value_nonempty()) || (self.absent && self.default_allowed())
    }

    /// Whether a satisfying request can have the field present.
    pub fn can_be_present(&self) -> bool {
        self.present && self.value_nonempty()
    }
}

/// A conjunction of field constraints and opaque atoms.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Cube {
    /// Constrained fields (at most one entry per field).
    pub fields: Vec<FieldC>,
    /// Opaque atoms with their required truth value.
    pub atoms: Vec<(u32, bool)>,
}

impl Cube {
    /// The cube of one field constraint (`None` if unsatisfiable).
    pub fn of_field(c: FieldC) -> Option<Cube> {
        c.is_sat().then(|| Cube {
            fields: vec![c],
            atoms: Vec::new(),
        })
    }

    /// The cube of one atom.
    pub fn of_atom(id: u32, value: bool) -> Cube {
        Cube {
            fields: Vec::new(),
            atoms: vec![(id, value)],
        }
    }

    /// The intersection, or `None` if provably empty.
    pub fn meet(&self, o: &Cube) -> Option<Cube> {
        let mut out = self.clone();
        for c in &o.fields {
            match out.fields.iter_mut().find(|x| x.field == c.field) {
                Some(x) => {
                    *x = x.meet(c);
                    if !x.is_sat() {
                        return None;
                    }
                }
                None => out.fields.push(c.clone()),
            }
        }
        for &(id, v) in &o.atoms {
            match out.atoms.iter().find(|(i, _)| *i == id) {
                Some(&(_, w)) if w != v => return None,
                Some(_) => {}
                None => out.atoms.push((id, v)),
            }
        }
        Some(out)
    }

    /// The constraint on `f`, if any.
    pub fn field(&self, f: ReqField) -> Option<&FieldC> {
        self.fields.iter().find(|c| c.field == f)
    }
}

/// A union of cubes; `None` stands for "too large to analyse" (unknown).
pub type Dnf = Option<Vec<Cube>>;

/// Always true.
pub fn top() -> Dnf {
    Some(vec![Cube::default()])
}

/// The conjunction of two unions.
pub fn and(a: &Dnf, b: &Dnf) -> Dnf {
    let (a, b) = (a.as_ref()?, b.as_ref()?);
    let mut out = Vec::new();
    for x in a {
        for y in b {
            if let Some(c) = x.meet(y) {
                out.push(c);
                if out.len() > MAX_BOXES {
                    return None;
                }
            }
        }
    }
    Some(out)
}

/// The disjunction of two unions.
pub fn or(a: Dnf, b: Dnf) -> Dnf {
    let (mut a, b) = (a?, b?);
    a.extend(b);
    (a.len() <= MAX_BOXES).then_some(a)
}

/// `Some(true)` if provably empty, `Some(false)` if not (or unknown: `None`).
pub fn is_empty(d: &Dnf) -> Option<bool> {
    d.as_ref().map(|v| v.is_empty())
}
