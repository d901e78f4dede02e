//! Concrete requests from cubes: the "for example" of overlap warnings. A witness is
//! only reported after the reference evaluator confirmed it satisfies the conditions.

use super::domain::{Cube, FieldC, FinSet, SVal, ValC};
use crate::policy::ast::PriorityLevel;
use crate::policy::checked::{CheckedPolicySet, ReqField, TExpr};
use crate::policy::features::RequestFeatures;
use crate::policy::interp::eval::Evaluator;

/// A request inside `cube`, and its description in policy-test syntax
/// (`request { model = "gpt-4o", input_tokens = 100001 }`).
pub fn from_cube(set: &CheckedPolicySet, cube: &Cube) -> (RequestFeatures, String) {
    let mut r = RequestFeatures::for_model("");
    let mut parts = Vec::new();
    for c in &cube.fields {
        if !c.can_be_present() {
            continue; // absent: the default request has no value
        }
        if let ReqField::Scope(_) = c.field {
            // All scopes go in one `scopes = "a b"` assignment, written after the loop.
            assign(set, &mut r, c);
            continue;
        }
        let name = |f: ReqField| match f {
            ReqField::Header(s) => format!("header({:?})", set.strings.resolve(s)),
            ReqField::Metadata(s) => format!("metadata({:?})", set.strings.resolve(s)),
            f => ReqField::NAMED
                .iter()
                .find(|(_, x, ..)| *x == f)
                .map(|(n, ..)| n.to_string())
                .unwrap_or_default(),
        };
        let shown = assign(set, &mut r, c);
        parts.push(format!("{} = {shown}", name(c.field)));
    }
    if !r.scopes.is_empty() {
        parts.push(format!("scopes = {:?}", r.scopes.join(" ")));
    }
    (r, format!("request {{ {} }}", parts.join(", ")))
}

fn pick_str(s: &FinSet) -> String {
    match s {
        FinSet::In(v) => v
            .iter()
            .find_map(|x| {
                if let SVal::Str(s) = x {
                    Some(s.clone())
                } else {
                    None
                }
            })
            .unwrap_or_default(),
        FinSet::NotIn(v) => (0..)
            .map(|i| {
                if i == 0 {
                    "x".to_string()
                } else {
                    format!("x{i}")
                }
            })
            .find(|c| !v.contains(&SVal::Str(c.clone())))
            .unwrap_or_default(),
    }
}

fn assign(set: &CheckedPolicySet, r: &mut RequestFeatures, c: &FieldC) -> String {
    let num = match &c.val {
        ValC::Num(iv) => iv.pick(),
        ValC::Set(_) => 0.0,
    };
    let s = match &c.val {
        ValC::Set(s) => pick_str(s),
        ValC::Num(_) => String::new(),
    };
    let first = |want: fn(&SVal) -> bool| match &c.val {
        ValC::Set(FinSet::In(v)) => v.iter().find(|x| want(x)).cloned(),
        _ => None,
    };
    let u = num.max(0.0) as u64;
    match c.field {
        ReqField::Model => r.model = s.clone(),
        ReqField::Task => r.task = s.clone().into(),
        ReqField::ApiKey => r.api_key = Some(s.as_str().into()),
        ReqField::Org => r.org = Some(s.as_str().into()),
        ReqField::Header(h) => {
            r.headers
                .insert(set.strings.resolve(h).to_string(), s.clone());
        }
        ReqField::Metadata(m) => {
            r.metadata
                .insert(set.strings.resolve(m).to_string(), s.clone());
        }
        ReqField::InputTokens => r.input_tokens = u,
        ReqField::Messages => r.messages = u,
        ReqField::MaxTokens => r.max_tokens = Some(u),
        ReqField::Hour => r.hour = u.min(23) as u8,
        ReqField::Weekday => r.weekday = u.clamp(1, 7) as u8,
        ReqField::Temperature => {
            r.temperature = Some(num);
            return format!("{num:?}");
        }
        ReqField::BudgetRemaining => {
            r.budget_remaining = num;
            return format!("{num:?}");
        }
        ReqField::Stream | ReqField::Tools | ReqField::OffPeak => {
            let b = matches!(
                first(|x| matches!(x, SVal::Bool(_))),
                Some(SVal::Bool(true))
            );
            match c.field {
                ReqField::Stream => r.stream = b,
                ReqField::Tools => r.tools = b,
                _ => r.off_peak = b,
            }
            return b.to_string();
        }
        ReqField::Scope(s) => {
            let b = matches!(
                first(|x| matches!(x, SVal::Bool(_))),
                Some(SVal::Bool(true))
            );
            if b {
                let mut v = std::mem::take(&mut r.scopes);
                v.push(set.strings.resolve(s).to_string());
                r.set_scopes(v);
            }
            return b.to_string();
        }
        ReqField::Priority => {
            let p = match first(|x| matches!(x, SVal::Prio(_))) {
                Some(SVal::Prio(p)) => p,
                _ => PriorityLevel::Normal,
            };
            r.priority = p;
            return format!("{:?}", p.as_str());
        }
    }
    match c.val {
        ValC::Num(_) => u.to_string(),
        ValC::Set(_) => format!("{s:?}"),
    }
}

/// Whether every condition holds for `req` (the interpreter's own evaluator).
pub fn holds(set: &CheckedPolicySet, req: &RequestFeatures, conds: &[&TExpr]) -> bool {
    conds.iter().all(|e| {
        let mut ev = Evaluator {
            set,
            req,
            priority: req.priority,
            ep: None,
            strat: None,
            outcome: None,
            leaves: None,
        };
        ev.truth(e)
    })
}
