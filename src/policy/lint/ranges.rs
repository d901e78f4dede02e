//! W0204 for comparisons outside a field's documented range: `request.input_tokens >
//! 9223372036854775807`, `endpoint.error_rate > 20` (the rate is a fraction in [0, 1],
//! so 20% is `0.20`). Runs over every expression of the set, strategies included,
//! since endpoint fields only occur there and in rollback guards.
//!
//! The ranges are the documented ones (`docs/policy-language.md` "Fields",
//! [`crate::policy::features::EndpointStats`]); integer fields compare exactly in
//! `i64`, so the bounds of `i64` itself are ranges too.

use super::{codes, dnf};
use crate::policy::checked::*;
use crate::policy::diagnostic::Diagnostic;

/// A closed range of values.
#[derive(Debug, Clone, Copy)]
enum Range {
    Int(i64, i64),
    Float(f64, f64),
}

/// The documented range of a field with its name, for the fields that have one.
fn range(e: &TExpr) -> Option<(String, Range)> {
    const U32: i64 = u32::MAX as i64;
    let (name, r) = match &e.kind {
        TExprKind::ToFloat(x) => {
            let (n, r) = range(x)?;
            return Some((n, to_float(r)));
        }
        TExprKind::Req(f) => {
            let r = match f {
                ReqField::InputTokens | ReqField::MaxTokens | ReqField::Messages => {
                    Range::Int(0, i64::MAX)
                }
                ReqField::Hour => Range::Int(0, 23),
                ReqField::Weekday => Range::Int(1, 7),
                _ => return None,
            };
            let name = ReqField::NAMED.iter().find(|(_, g, ..)| g == f)?.0;
            (format!("request.{name}"), r)
        }
        TExprKind::Ep(f) => {
            let r = match f {
                EpField::Health | EpField::Capacity | EpField::ErrorRate | EpField::Quality => {
                    Range::Float(0.0, 1.0)
                }
                EpField::LatencyEwmaMs
                | EpField::TtftEwmaMs
                | EpField::CostIn
                | EpField::CostOut => Range::Float(0.0, f64::INFINITY),
                EpField::InFlight | EpField::ContextWindow => Range::Int(0, i64::MAX),
                EpField::Weight | EpField::Priority => Range::Int(0, U32),
                _ => return None,
            };
            let name = EpField::NAMED.iter().find(|(_, g, ..)| g == f)?.0;
            (format!("endpoint.{name}"), r)
        }
        _ => return None,
    };
    Some((name, r))
}

fn to_float(r: Range) -> Range {
    match r {
        Range::Int(lo, hi) => Range::Float(lo as f64, hi as f64),
        f => f,
    }
}

/// A numeric constant, looking through promotion and negation.
fn number(e: &TExpr) -> Option<Range> {
    match &e.kind {
        TExprKind::Const(Const::Int(i)) => Some(Range::Int(*i, *i)),
        TExprKind::Const(Const::Float(f)) => Some(Range::Float(*f, *f)),
        TExprKind::ToFloat(x) => number(x).map(to_float),
        TExprKind::Neg(x) => match number(x)? {
            Range::Int(i, _) => Some(Range::Int(i.saturating_neg(), i.saturating_neg())),
            Range::Float(f, _) => Some(Range::Float(-f, -f)),
        },
        _ => None,
    }
}

/// The truth of `field op k` over every value of `[lo, hi]`, when it is the same.
fn decide<T: PartialOrd + Copy>(op: CmpOp, lo: T, hi: T, k: T) -> Option<bool> {
    let always = |f: &dyn Fn(T) -> bool| (f(lo) == f(hi)).then_some(f(lo));
    match op {
        CmpOp::Lt => always(&|v| v < k),
        CmpOp::Le => always(&|v| v <= k),
        CmpOp::Gt => always(&|v| v > k),
        CmpOp::Ge => always(&|v| v >= k),
        CmpOp::Eq if k < lo || k > hi => Some(false),
        CmpOp::Ne if k < lo || k > hi => Some(true),
        _ => None,
    }
}

fn flip(op: CmpOp) -> CmpOp {
    match op {
        CmpOp::Lt => CmpOp::Gt,
        CmpOp::Le => CmpOp::Ge,
        CmpOp::Gt => CmpOp::Lt,
        CmpOp::Ge => CmpOp::Le,
        o => o,
    }
}

fn show(r: Range) -> String {
    match r {
        Range::Int(lo, hi) => format!("[{lo}, {hi}]"),
        Range::Float(lo, hi) if hi.is_infinite() => format!("[{lo}, ∞)"),
        Range::Float(lo, hi) => format!("[{lo}, {hi}]"),
    }
}

/// The W0204 warning for one comparison, if it is constant over the field's range.
fn check(e: &TExpr) -> Option<Diagnostic> {
    let TExprKind::Cmp(op, l, r) = &e.kind else {
        return None;
    };
    let ((name, fr), k, op) = match (range(l), number(r)) {
        (Some(f), Some(k)) => (f, k, *op),
        _ => (range(r)?, number(l)?, flip(*op)),
    };
    let value = match (fr, k) {
        (Range::Int(lo, hi), Range::Int(k, _)) => decide(op, lo, hi, k)?,
        (Range::Float(lo, hi), Range::Float(k, _)) => decide(op, lo, hi, k)?,
        (Range::Int(lo, hi), Range::Float(k, _)) => decide(op, lo as f64, hi as f64, k)?,
        (Range::Float(lo, hi), Range::Int(k, _)) => decide(op, lo, hi, k as f64)?,
    };
    let mut d = Diagnostic::warning(
        codes::CONSTANT_CONDITION,
        e.span,
        format!(
            "this comparison is always {value}: `{name}` is in {}",
            show(fr)
        ),
    )
    .with_span_label(format!("always {value}"));
    let kv = match k {
        Range::Int(i, _) => i as f64,
        Range::Float(f, _) => f,
    };
    d = if matches!(fr, Range::Float(lo, hi) if lo == 0.0 && hi == 1.0) && kv > 1.0 && kv <= 100.0 {
        let frac = kv / 100.0;
        d.with_help(format!(
            "`{name}` is a fraction, not a percentage: write {frac:.2} (or {kv}%) for {kv} percent"
        ))
    } else {
        d.with_help(format!(
            "compare with a value inside {}, or remove the comparison",
            show(fr)
        ))
    };
    Some(d)
}

/// Every expression of the set, each once.
fn roots(set: &CheckedPolicySet) -> Vec<&TExpr> {
    let mut v: Vec<&TExpr> = Vec::new();
    for r in &set.routes {
        v.extend(&r.when);
        v.extend(r.set_priority.iter().filter_map(|s| s.when.as_ref()));
        for rule in r.rules.iter().chain(std::iter::once(&r.default)) {
            v.extend(&rule.when);
            v.extend(
                rule.body
                    .set_priority
                    .iter()
                    .filter_map(|s| s.when.as_ref()),
            );
            if let Some(CTerminal::Split(s)) = &rule.body.terminal {
                v.extend(s.arms.iter().filter_map(|a| a.rollback.as_ref()));
            }
        }
    }
    for s in &set.strategies {
        v.extend(s.lets.iter().map(|(_, e)| e));
        v.extend(&s.require);
        v.extend(&s.prefer);
        v.push(&s.score);
        v.extend(s.updates.iter().flat_map(|(_, u)| u.iter().map(|(_, e)| e)));
    }
    v
}

/// Appends W0204 for every comparison outside its field's range that is not inside
/// a condition already reported as constant.
pub fn lint(set: &CheckedPolicySet, out: &mut Vec<Diagnostic>) {
    let reported: Vec<_> = out
        .iter()
        .filter(|d| d.code == codes::CONSTANT_CONDITION)
        .filter_map(|d| d.span)
        .collect();
    let mut found = Vec::new();
    for e in roots(set) {
        dnf::visit(e, &mut |x| {
            if let Some(d) = check(x) {
                let s = d.span.unwrap_or(x.span);
                let inside = reported
                    .iter()
                    .any(|r| r.file == s.file && r.start <= s.start && s.end <= r.end);
                if !inside {
                    found.push(d);
                }
            }
        });
    }
    out.extend(found);
}
