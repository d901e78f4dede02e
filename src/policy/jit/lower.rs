//! Lowering: checked expressions ([`TExpr`]) → the JIT's [`Node`] trees.
//!
//! What happens here:
//! - fields become [`Slot`] loads, allocated in the [`Layout`];
//! - strategy parameters are replaced by the call site's constant arguments, and
//!   `let`s are inlined (the interpreter re-evaluates them too; a node budget stops
//!   pathological blow-up);
//! - strings become ids; string tests (`starts_with`, `glob`, `matches`, …) on a
//!   request or endpoint field become pre-evaluated atom cells, on a constant they are
//!   folded, through `if` they are pushed into both branches;
//! - mixed Int/Float operands get explicit conversions exactly where the interpreter
//!   converts.
//!
//! Anything outside that is a [`LowerError`], and the whole set then runs on the
//! interpreter.

use crate::policy::checked::*;

use super::ir::{LTy, Libm, Node, Slot, Vector};
use super::layout::{prio_code, run_test, AuxSlot, EpSlot, Layout, ReqSlot, TestKey};

/// Most nodes in one compiled function (after `let` inlining).
pub const MAX_NODES: usize = 200_000;

/// Deepest expression nesting after `let` inlining (bounds recursion here and in
/// code generation).
pub const MAX_DEPTH: usize = 1_000;

/// Why an expression cannot be compiled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LowerError(pub String);

/// Where `request.priority` comes from in the function being lowered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PrioFrom {
    /// The selection function's running variable.
    Var,
    /// The aux vector (rollback guards: the priority after `set priority`).
    Aux,
    /// The request vector (strategies see the request's original priority).
    Req,
}

/// The context of one function being lowered.
#[derive(Clone, Copy)]
pub struct Scope<'s> {
    /// Source of `request.priority`.
    pub prio: PrioFrom,
    /// Whether an endpoint is in scope.
    pub endpoint: bool,
    /// The strategy in scope with its argument values.
    pub strategy: Option<(&'s CStrategy, &'s [Const])>,
}

/// Lowers expressions of one set into one [`Layout`].
pub struct Lowerer<'a> {
    /// The set (strings, regexes).
    pub set: &'a CheckedPolicySet,
    /// The layout being built.
    pub layout: &'a mut Layout,
    nodes: usize,
    depth: usize,
}

fn b(n: Node) -> Box<Node> {
    Box::new(n)
}

fn err<T>(msg: impl Into<String>) -> Result<T, LowerError> {
    Err(LowerError(msg.into()))
}

fn is_str_ep(f: EpField) -> bool {
    matches!(
        f,
        EpField::Id
            | EpField::Provider
            | EpField::UpstreamModel
            | EpField::Model
            | EpField::Circuit
    )
}

/// A constant as the interpreter's `V::f()` sees it.
fn const_f(c: Const) -> f64 {
    match c {
        Const::Int(i) => i as f64,
        Const::Float(f) => f,
        _ => 0.0,
    }
}

/// Converts `n` to a float the way `V::f()` does (Int converted, Float kept).
fn to_f(n: Node) -> Result<Node, LowerError> {
    match n.ty() {
        LTy::F => Ok(n),
        LTy::I => Ok(Node::ToFloat(b(n))),
        LTy::B => err("a boolean used as a number"),
    }
}

impl<'a> Lowerer<'a> {
    /// A lowerer adding cells to `layout`.
    pub fn new(set: &'a CheckedPolicySet, layout: &'a mut Layout) -> Lowerer<'a> {
        Lowerer {
            set,
            layout,
            nodes: 0,
            depth: 0,
        }
    }

    /// Starts a new function (resets the node budget).
    pub fn start_function(&mut self) {
        self.nodes = 0;
    }

    /// Nodes used by the current function (to resume it with [`Lowerer::resume`]
    /// after lowering another function in between).
    pub fn used(&self) -> usize {
        self.nodes
    }

    /// Resumes a function that had used `nodes`.
    pub fn resume(&mut self, nodes: usize) {
        self.nodes = nodes;
    }

    fn tick(&mut self) -> Result<(), LowerError> {
        self.nodes += 1;
        if self.nodes > MAX_NODES {
            return err(format!(
                "a compiled function would exceed {MAX_NODES} nodes"
            ));
        }
        Ok(())
    }

    fn load(&mut self, v: Vector, index: u32, t: LTy) -> Node {
        Node::Load(Slot { vector: v, index }, t)
    }

    fn konst(&self, c: Const) -> Node {
        match c {
            Const::Bool(v) => Node::Bool(v),
            Const::Int(i) => Node::Int(i),
            Const::Float(f) => Node::Float(f),
            Const::Str(s) => Node::Int(i64::from(s.0)),
            Const::Priority(p) => Node::Int(prio_code(p) as i64),
        }
    }

    fn param(&self, i: u32, sc: &Scope<'_>) -> Option<Const> {
        sc.strategy
            .and_then(|(_, args)| args.get(i as usize).copied())
    }

    fn let_expr<'s>(&self, i: u32, sc: &Scope<'s>) -> Option<&'s TExpr> {
        sc.strategy
            .and_then(|(s, _)| s.lets.get(i as usize))
            .map(|(_, e)| e)
    }

    /// Lowers a Bool expression.
    pub fn cond(&mut self, e: &TExpr, sc: &Scope<'_>) -> Result<Node, LowerError> {
        let n = self.expr(e, sc)?;
        if n.ty() != LTy::B {
            return err("a condition that is not a boolean");
        }
        Ok(n)
    }

    /// Lowers a number and converts it to Float (`V::f()`).
    pub fn number(&mut self, e: &TExpr, sc: &Scope<'_>) -> Result<Node, LowerError> {
        let n = self.expr(e, sc)?;
        to_f(n)
    }

    /// Lowers any expression.
    pub fn expr(&mut self, e: &TExpr, sc: &Scope<'_>) -> Result<Node, LowerError> {
        self.tick()?;
        if self.depth >= MAX_DEPTH {
            return err(format!(
                "an expression nested deeper than {MAX_DEPTH} after inlining `let`s"
            ));
        }
        self.depth += 1;
        let r = self.expr_inner(e, sc);
        self.depth -= 1;
        r
    }

    fn expr_inner(&mut self, e: &TExpr, sc: &Scope<'_>) -> Result<Node, LowerError> {
        Ok(match &e.kind {
            TExprKind::Const(c) => self.konst(*c),
            TExprKind::Req(ReqField::Priority) => match sc.prio {
                PrioFrom::Var => Node::Priority,
                PrioFrom::Aux => {
                    let i = self.layout.aux(AuxSlot::Priority);
                    self.load(Vector::Aux, i, LTy::I)
                }
                PrioFrom::Req => {
                    let i = self.layout.req(ReqSlot::Field(ReqField::Priority));
                    self.load(Vector::Req, i, LTy::I)
                }
            },
            TExprKind::Req(f) => {
                let t = match f {
                    ReqField::Stream | ReqField::Tools | ReqField::OffPeak | ReqField::Scope(_) => {
                        LTy::B
                    }
                    ReqField::Temperature | ReqField::BudgetRemaining => LTy::F,
                    _ => LTy::I,
                };
                let i = self.layout.req(ReqSlot::Field(*f));
                self.load(Vector::Req, i, t)
            }
            TExprKind::Has(f) => match f {
                ReqField::MaxTokens
                | ReqField::Temperature
                | ReqField::ApiKey
                | ReqField::Org
                | ReqField::Header(_)
                | ReqField::Metadata(_) => {
                    let i = self.layout.req(ReqSlot::Has(*f));
                    self.load(Vector::Req, i, LTy::B)
                }
                _ => Node::Bool(true),
            },
            TExprKind::Ep(f) => {
                if !sc.endpoint {
                    return err("an endpoint field outside an endpoint context");
                }
                let t = match f {
                    EpField::InFlight
                    | EpField::Weight
                    | EpField::Priority
                    | EpField::ContextWindow => LTy::I,
                    f if is_str_ep(*f) => LTy::I,
                    _ => LTy::F,
                };
                let i = self.layout.ep(EpSlot::Field(*f));
                self.load(Vector::Ep, i, t)
            }
            TExprKind::State(s) => {
                if !sc.endpoint {
                    return err("a state slot outside an endpoint context");
                }
                let i = self.layout.ep(EpSlot::State(*s));
                self.load(Vector::Ep, i, LTy::F)
            }
            TExprKind::Param(i) => match self.param(*i, sc) {
                Some(c) => self.konst(c),
                None => Node::Float(0.0),
            },
            TExprKind::Let(i) => match self.let_expr(*i, sc) {
                Some(x) => self.expr(x, sc)?,
                None => Node::Float(0.0),
            },
            TExprKind::Outcome(f) => {
                let t = match f {
                    OutcomeField::LatencyMs | OutcomeField::TtftMs => LTy::F,
                    _ => LTy::I,
                };
                let i = self.layout.aux(AuxSlot::Outcome(*f));
                self.load(Vector::Aux, i, t)
            }
            TExprKind::Score | TExprKind::Probability => {
                if !sc.endpoint {
                    return err("score outside an endpoint context");
                }
                let s = if matches!(e.kind, TExprKind::Score) {
                    EpSlot::Score
                } else {
                    EpSlot::Probability
                };
                let i = self.layout.ep(s);
                self.load(Vector::Ep, i, LTy::F)
            }
            TExprKind::Count => {
                let i = self.layout.aux(AuxSlot::Count);
                self.load(Vector::Aux, i, LTy::I)
            }
            TExprKind::ToFloat(x) => to_f(self.expr(x, sc)?)?,
            TExprKind::Not(x) => Node::Not(b(self.cond(x, sc)?)),
            TExprKind::Neg(x) => {
                let v = self.expr(x, sc)?;
                match v.ty() {
                    LTy::I => Node::NegI(b(v)),
                    _ => Node::NegF(b(to_f(v)?)),
                }
            }
            TExprKind::And(x, y) => Node::And(b(self.cond(x, sc)?), b(self.cond(y, sc)?)),
            TExprKind::Or(x, y) => Node::Or(b(self.cond(x, sc)?), b(self.cond(y, sc)?)),
            TExprKind::Arith(op, x, y) => {
                let (p, q) = (self.expr(x, sc)?, self.expr(y, sc)?);
                if p.ty() == LTy::I && q.ty() == LTy::I {
                    Node::ArithI(*op, b(p), b(q))
                } else {
                    Node::ArithF(*op, b(to_f(p)?), b(to_f(q)?))
                }
            }
            TExprKind::Cmp(op, x, y) => self.cmp(*op, x, y, sc)?,
            TExprKind::In(x, list, negated) => {
                let found = self.member(x, list, sc)?;
                if *negated {
                    Node::Not(b(found))
                } else {
                    found
                }
            }
            TExprKind::Match(t, x, pat) => self.matches(*t, x, *pat, sc)?,
            TExprKind::Math(f, args) => self.math(*f, args, sc)?,
            TExprKind::If(c, x, y) => {
                let c = self.cond(c, sc)?;
                let (p, q) = (self.expr(x, sc)?, self.expr(y, sc)?);
                let (p, q) = match (p.ty(), q.ty()) {
                    (s, t) if s == t => (p, q),
                    (LTy::B, _) | (_, LTy::B) => return err("`if` branches of different types"),
                    _ => (to_f(p)?, to_f(q)?),
                };
                Node::If(p.ty(), b(c), b(p), b(q))
            }
            TExprKind::Agg(_, idx, _) => {
                if sc.strategy.is_none() {
                    return err("an aggregate outside a strategy");
                }
                let i = self.layout.aux(AuxSlot::Agg(*idx));
                self.load(Vector::Aux, i, LTy::F)
            }
        })
    }

    fn cmp(&mut self, op: CmpOp, x: &TExpr, y: &TExpr, sc: &Scope<'_>) -> Result<Node, LowerError> {
        let (p, q) = (self.expr(x, sc)?, self.expr(y, sc)?);
        // Runtime kinds as the interpreter sees them: strings and priorities compare
        // as themselves, numbers as Int only when both are Int.
        let textual = |t: Ty| matches!(t, Ty::Str | Ty::Priority);
        if textual(x.ty) || textual(y.ty) {
            if x.ty != y.ty || (x.ty == Ty::Str && !matches!(op, CmpOp::Eq | CmpOp::Ne)) {
                return err("a string or priority comparison the JIT does not support");
            }
            return Ok(Node::CmpI(op, b(p), b(q)));
        }
        Ok(match (p.ty(), q.ty()) {
            (LTy::I, LTy::I) | (LTy::B, LTy::B) => Node::CmpI(op, b(p), b(q)),
            (LTy::B, _) | (_, LTy::B) => return err("a comparison of a boolean and a number"),
            _ => Node::CmpF(op, b(to_f(p)?), b(to_f(q)?)),
        })
    }

    fn member(&mut self, x: &TExpr, list: &[Const], sc: &Scope<'_>) -> Result<Node, LowerError> {
        let v = self.expr(x, sc)?;
        let any_float = list.iter().any(|c| matches!(c, Const::Float(_)));
        if x.ty == Ty::Float {
            let fs: Vec<f64> = list.iter().map(|c| const_f(*c)).collect();
            return Ok(Node::InF(b(to_f(v)?), fs));
        }
        if any_float {
            return err("a float list with a non-float operand");
        }
        // Same-kind constants only: a constant of another kind never equals.
        let mut ids = Vec::new();
        for c in list {
            match (x.ty, c) {
                (Ty::Int, Const::Int(i)) => ids.push(*i),
                (Ty::Str, Const::Str(s)) => ids.push(i64::from(s.0)),
                (Ty::Priority, Const::Priority(p)) => ids.push(prio_code(*p) as i64),
                (Ty::Bool, Const::Bool(v)) => ids.push(i64::from(*v)),
                _ => {}
            }
        }
        Ok(Node::InI(b(v), ids))
    }

    fn matches(
        &mut self,
        t: StrTest,
        x: &TExpr,
        pat: Sym,
        sc: &Scope<'_>,
    ) -> Result<Node, LowerError> {
        self.tick()?;
        if self.depth >= MAX_DEPTH {
            return err("a string test nested too deep");
        }
        self.depth += 1;
        let r = self.matches_inner(t, x, pat, sc);
        self.depth -= 1;
        r
    }

    fn matches_inner(
        &mut self,
        t: StrTest,
        x: &TExpr,
        pat: Sym,
        sc: &Scope<'_>,
    ) -> Result<Node, LowerError> {
        let key = TestKey::of(t);
        let fold = |l: &Lowerer<'_>, s: &str| {
            Node::Bool(run_test(l.set, t, s, l.set.strings.resolve(pat)))
        };
        Ok(match &x.kind {
            TExprKind::Const(Const::Str(s)) => fold(self, self.set.strings.resolve(*s)),
            TExprKind::Const(_) => fold(self, ""),
            TExprKind::Param(i) => match self.param(*i, sc) {
                Some(Const::Str(s)) => fold(self, self.set.strings.resolve(s)),
                _ => fold(self, ""),
            },
            TExprKind::Req(f) if f.is_str() => {
                let i = self.layout.req(ReqSlot::Atom(key, *f, pat));
                self.load(Vector::Req, i, LTy::B)
            }
            TExprKind::Ep(f) if is_str_ep(*f) && sc.endpoint => {
                let i = self.layout.ep(EpSlot::Atom(key, *f, pat));
                self.load(Vector::Ep, i, LTy::B)
            }
            TExprKind::Let(i) => match self.let_expr(*i, sc) {
                Some(e) => self.matches(t, e, pat, sc)?,
                None => fold(self, ""),
            },
            TExprKind::If(c, p, q) => Node::If(
                LTy::B,
                b(self.cond(c, sc)?),
                b(self.matches(t, p, pat, sc)?),
                b(self.matches(t, q, pat, sc)?),
            ),
            _ => return err("a string test on a computed string"),
        })
    }

    fn math(&mut self, f: MathFn, args: &[TExpr], sc: &Scope<'_>) -> Result<Node, LowerError> {
        let mut vals = Vec::with_capacity(args.len());
        for a in args {
            vals.push(self.expr(a, sc)?);
        }
        let mut it = vals.into_iter();
        let a = it.next().unwrap_or(Node::Float(0.0));
        let c = it.next().unwrap_or(Node::Float(0.0));
        let d = it.next().unwrap_or(Node::Float(0.0));
        let minmax = |is_min: bool, p: Node, q: Node| -> Result<Node, LowerError> {
            if p.ty() == LTy::I && q.ty() == LTy::I {
                Ok(Node::MinI(is_min, b(p), b(q)))
            } else {
                Ok(Node::MinF(is_min, b(to_f(p)?), b(to_f(q)?)))
            }
        };
        Ok(match f {
            MathFn::Min => minmax(true, a, c)?,
            MathFn::Max => minmax(false, a, c)?,
            MathFn::Clamp => minmax(true, minmax(false, a, c)?, d)?,
            MathFn::Abs => match a.ty() {
                LTy::I => Node::AbsI(b(a)),
                _ => Node::AbsF(b(to_f(a)?)),
            },
            MathFn::Exp => Node::Call(Libm::Exp, vec![to_f(a)?]),
            MathFn::Ln => Node::Call(Libm::Log, vec![to_f(a)?]),
            MathFn::Sqrt => Node::Sqrt(b(to_f(a)?)),
            MathFn::Pow => Node::Call(Libm::Pow, vec![to_f(a)?, to_f(c)?]),
        })
    }
}
