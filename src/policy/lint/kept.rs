//! Which endpoints a strategy surely keeps among its candidates, for W0206.
//!
//! A strategy's `require` drops the endpoints it is false for, and its `prefer`
//! drops them whenever another candidate passes; a fallback target can then add a
//! dropped endpoint back to the plan, so it is only "already in the plan" when the
//! filters are provably true for it. This evaluates the filters in three-valued
//! logic over what is known before any request: the call's arguments, the strategy's
//! `let`s, and the endpoint's registry fields (`id`, `provider`, `model`,
//! `upstream_model`, `weight`, `priority`). Everything else (statistics, request
//! fields, state, arithmetic) is unknown, and an unknown filter keeps nothing.

use crate::policy::checked::*;
use crate::policy::registry::EndpointRef;

/// A value known without a request.
#[derive(Debug, Clone, PartialEq)]
enum V {
    Bool(bool),
    Num(f64),
    Str(String),
    Prio(crate::policy::ast::PriorityLevel),
}

/// Whether strategy `s` called with `args` keeps `e` among its candidates whatever
/// the request and the statistics: every `require` and `prefer` is provably true.
pub fn surely_kept(set: &CheckedPolicySet, s: &CStrategy, args: &[Const], e: EndpointRef) -> bool {
    let cx = Cx { set, s, args, e };
    s.require
        .iter()
        .chain(&s.prefer)
        .all(|f| cx.eval(f, 0) == Some(V::Bool(true)))
}

struct Cx<'a> {
    set: &'a CheckedPolicySet,
    s: &'a CStrategy,
    args: &'a [Const],
    e: EndpointRef<'a>,
}

/// `let`s may refer to earlier `let`s only, so the depth is bounded by their number;
/// the cap guards against a malformed set all the same.
const MAX_DEPTH: u32 = 256;

impl Cx<'_> {
    fn konst(&self, c: &Const) -> V {
        match c {
            Const::Bool(b) => V::Bool(*b),
            Const::Int(i) => V::Num(*i as f64),
            Const::Float(f) => V::Num(*f),
            Const::Str(s) => V::Str(self.set.strings.resolve(*s).to_string()),
            Const::Priority(p) => V::Prio(*p),
        }
    }

    fn eval(&self, x: &TExpr, depth: u32) -> Option<V> {
        if depth > MAX_DEPTH {
            return None;
        }
        let d = depth + 1;
        match &x.kind {
            TExprKind::Const(c) => Some(self.konst(c)),
            TExprKind::Param(i) => self.args.get(*i as usize).map(|c| self.konst(c)),
            TExprKind::Let(i) => self.eval(&self.s.lets.get(*i as usize)?.1, d),
            TExprKind::Ep(f) => self.endpoint(*f),
            TExprKind::ToFloat(a) => self.eval(a, d),
            TExprKind::Not(a) => match self.eval(a, d)? {
                V::Bool(b) => Some(V::Bool(!b)),
                _ => None,
            },
            TExprKind::And(a, b) | TExprKind::Or(a, b) => {
                let and = matches!(x.kind, TExprKind::And(..));
                // The side that decides alone: false for `and`, true for `or`.
                let decisive = !and;
                let (l, r) = (self.eval(a, d), self.eval(b, d));
                if l == Some(V::Bool(decisive)) || r == Some(V::Bool(decisive)) {
                    return Some(V::Bool(decisive));
                }
                match (l?, r?) {
                    (V::Bool(_), V::Bool(_)) => Some(V::Bool(!decisive)),
                    _ => None,
                }
            }
            TExprKind::If(c, a, b) => match self.eval(c, d)? {
                V::Bool(true) => self.eval(a, d),
                V::Bool(false) => self.eval(b, d),
                _ => None,
            },
            TExprKind::Cmp(op, a, b) => {
                let (l, r) = (self.eval(a, d)?, self.eval(b, d)?);
                cmp(*op, &l, &r).map(V::Bool)
            }
            TExprKind::In(a, list, not) => {
                let v = self.eval(a, d)?;
                let found = list.iter().any(|c| self.konst(c) == v);
                Some(V::Bool(found != *not))
            }
            _ => None,
        }
    }

    fn endpoint(&self, f: EpField) -> Option<V> {
        let ep = self.e.endpoint;
        Some(match f {
            EpField::Id => V::Str(ep.id.clone()),
            EpField::Provider => V::Str(ep.provider.clone()),
            EpField::UpstreamModel => V::Str(ep.model.clone()),
            EpField::Model => V::Str(self.e.model.name.clone()),
            EpField::Weight => V::Num(f64::from(ep.weight)),
            EpField::Priority => V::Num(f64::from(ep.priority)),
            _ => return None,
        })
    }
}

fn cmp(op: CmpOp, l: &V, r: &V) -> Option<bool> {
    use std::cmp::Ordering;
    let ord = match (l, r) {
        (V::Num(a), V::Num(b)) => a.partial_cmp(b)?,
        (V::Str(a), V::Str(b)) => a.cmp(b),
        (V::Bool(a), V::Bool(b)) => a.cmp(b),
        (V::Prio(a), V::Prio(b)) => a.partial_cmp(b)?,
        _ => return None,
    };
    Some(match op {
        CmpOp::Eq => ord == Ordering::Equal,
        CmpOp::Ne => ord != Ordering::Equal,
        CmpOp::Lt => ord == Ordering::Less,
        CmpOp::Le => ord != Ordering::Greater,
        CmpOp::Gt => ord == Ordering::Greater,
        CmpOp::Ge => ord != Ordering::Less,
    })
}
