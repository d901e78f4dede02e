//! The JIT's small intermediate form: typed expression trees over three flat `u64`
//! vectors, with strings already turned into ids or pre-evaluated atoms.
//!
//! Every value is one of three machine types ([`LTy`]); strings are `I` (an id in the
//! compiled set's string table, equal ids ⇔ equal strings), priorities are `I`
//! (`low` = 0 .. `critical` = 3), booleans are `B`. A [`Slot`] names one `u64` of the
//! request, endpoint or auxiliary vector; [`super::layout`] decides what lives where
//! and the host fills it before each call.

use crate::policy::checked::{ArithOp, CmpOp};

/// Machine type of a lowered value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LTy {
    /// Boolean (0 or 1 in memory; `i8` in registers).
    B,
    /// 64-bit signed integer (also string ids and priorities).
    I,
    /// IEEE binary64.
    F,
}

/// Which vector a slot lives in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Vector {
    /// Per request ([`super::layout::ReqSlot`]).
    Req,
    /// Per endpoint ([`super::layout::EpSlot`]).
    Ep,
    /// Per call ([`super::layout::AuxSlot`]): priority, count, outcome, aggregates.
    Aux,
}

/// One `u64` of a vector.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Slot {
    /// The vector.
    pub vector: Vector,
    /// Index in `u64` units (byte offset = 8 × index).
    pub index: u32,
}

/// C math library functions the JIT calls (the same symbols Rust's `f64::exp`, `ln`,
/// `powf` and `%` lower to on this target, so results agree bit for bit).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Libm {
    /// `exp(x)`
    Exp,
    /// `log(x)` (natural)
    Log,
    /// `pow(x, y)`
    Pow,
    /// `fmod(x, y)`
    Fmod,
}

impl Libm {
    /// Every function, in declaration order.
    pub const ALL: [Libm; 4] = [Libm::Exp, Libm::Log, Libm::Pow, Libm::Fmod];

    /// The C symbol name.
    pub fn symbol(self) -> &'static str {
        match self {
            Libm::Exp => "exp",
            Libm::Log => "log",
            Libm::Pow => "pow",
            Libm::Fmod => "fmod",
        }
    }

    /// Number of `f64` arguments.
    pub fn arity(self) -> usize {
        match self {
            Libm::Exp | Libm::Log => 1,
            Libm::Pow | Libm::Fmod => 2,
        }
    }
}

/// A lowered expression.
#[derive(Debug, Clone, PartialEq)]
pub enum Node {
    /// Boolean constant.
    Bool(bool),
    /// Integer constant.
    Int(i64),
    /// Float constant.
    Float(f64),
    /// A vector slot read as the given type.
    Load(Slot, LTy),
    /// The request priority as changed by `set priority` so far (selection function
    /// only; elsewhere lowered to a [`Node::Load`]).
    Priority,
    /// Int → Float (nearest).
    ToFloat(Box<Node>),
    /// Boolean not.
    Not(Box<Node>),
    /// Saturating integer negation.
    NegI(Box<Node>),
    /// Float negation.
    NegF(Box<Node>),
    /// Short-circuit and.
    And(Box<Node>, Box<Node>),
    /// Short-circuit or.
    Or(Box<Node>, Box<Node>),
    /// Total integer arithmetic (saturating; `/ 0` and `% 0` are 0).
    ArithI(ArithOp, Box<Node>, Box<Node>),
    /// IEEE arithmetic (`%` calls `fmod`).
    ArithF(ArithOp, Box<Node>, Box<Node>),
    /// Integer (or boolean, as 0/1) comparison.
    CmpI(CmpOp, Box<Node>, Box<Node>),
    /// Float comparison (NaN: all false except `!=`).
    CmpF(CmpOp, Box<Node>, Box<Node>),
    /// `if(c, a, b)` of the given type; only the chosen branch runs.
    If(LTy, Box<Node>, Box<Node>, Box<Node>),
    /// `min`/`max` by `a <= b` / `a >= b` (first operand wins ties), integer.
    MinI(bool, Box<Node>, Box<Node>),
    /// Same for floats (a NaN first operand yields the second).
    MinF(bool, Box<Node>, Box<Node>),
    /// Saturating integer `abs`.
    AbsI(Box<Node>),
    /// Float `abs` (clears the sign bit).
    AbsF(Box<Node>),
    /// Float square root.
    Sqrt(Box<Node>),
    /// A C math call.
    Call(Libm, Vec<Node>),
    /// Membership of an integer, id, priority code or boolean (as 0/1) in constants.
    InI(Box<Node>, Vec<i64>),
    /// Membership of a float in constants (`==`, so NaN is never a member).
    InF(Box<Node>, Vec<f64>),
}

impl Node {
    /// The machine type of the node's value.
    pub fn ty(&self) -> LTy {
        match self {
            Node::Bool(_)
            | Node::Not(_)
            | Node::And(..)
            | Node::Or(..)
            | Node::CmpI(..)
            | Node::CmpF(..)
            | Node::InI(..)
            | Node::InF(..) => LTy::B,
            Node::Int(_) | Node::Priority | Node::NegI(_) | Node::ArithI(..) => LTy::I,
            Node::MinI(..) | Node::AbsI(_) => LTy::I,
            Node::Float(_) | Node::ToFloat(_) | Node::NegF(_) | Node::ArithF(..) => LTy::F,
            Node::MinF(..) | Node::AbsF(_) | Node::Sqrt(_) | Node::Call(..) => LTy::F,
            Node::Load(_, t) | Node::If(t, ..) => *t,
        }
    }
}
