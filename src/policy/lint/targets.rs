//! W0206 unused targets: split arms with a 0% share, and fallback targets whose
//! endpoints are all surely in the plan already (the plan never repeats an endpoint,
//! so such a fallback is never tried). Works on the syntax tree (for spans), the
//! checked set (for each `use`'s strategy and arguments) and the registry.
//!
//! The primary's endpoints are in the plan only when its strategy cannot drop them:
//! a `require` or `prefer` that is not provably true for an endpoint ([`super::kept`])
//! may leave it out, and then a fallback naming it does add it back.

use std::collections::{BTreeSet, HashMap};

use super::{codes, kept};
use crate::policy::ast::*;
use crate::policy::checked::{CTerminal, CUse, CheckedPolicySet};
use crate::policy::diagnostic::Diagnostic;
use crate::policy::registry::Registry;

/// Endpoints a target can send to.
#[derive(Debug, Clone, PartialEq)]
enum Eps {
    /// Every endpoint of the registry.
    All,
    /// The requested model's endpoints (unknown statically).
    Requested,
    /// These endpoints.
    Set(BTreeSet<String>),
}

fn eps(reg: &Registry, t: &TargetKind) -> Eps {
    match t {
        TargetKind::Any => Eps::All,
        TargetKind::RequestedModel => Eps::Requested,
        TargetKind::Endpoint(e) => Eps::Set([e.clone()].into()),
        TargetKind::Model(m) => Eps::Set(
            reg.endpoints()
                .filter(|e| &e.model.name == m)
                .map(|e| e.endpoint.id.clone())
                .collect(),
        ),
    }
}

/// The endpoints a primary `use` surely puts in the plan: its target's, less those
/// its strategy may drop.
fn plan_eps(reg: &Registry, set: &CheckedPolicySet, uses: &Uses<'_>, u: &UseAction) -> Eps {
    let all = eps(reg, &u.target.kind);
    let Some(cu) = uses.get(&(u.span.file.0, u.span.start)) else {
        return all;
    };
    let Some(s) = cu.strategy.and_then(|i| set.strategies.get(i as usize)) else {
        return all;
    };
    if s.require.is_empty() && s.prefer.is_empty() {
        return all;
    }
    let keeps = |e| kept::surely_kept(set, s, &cu.args, e);
    match all {
        // Unknown model: only when every endpoint of the registry is surely kept.
        Eps::Requested if reg.endpoints().all(keeps) => Eps::Requested,
        Eps::Requested => Eps::Set(BTreeSet::new()),
        Eps::All if reg.endpoints().all(keeps) => Eps::All,
        Eps::All => Eps::Set(
            reg.endpoints()
                .filter(|e| keeps(*e))
                .map(|e| e.endpoint.id.clone())
                .collect(),
        ),
        Eps::Set(ids) => Eps::Set(
            reg.endpoints()
                .filter(|e| ids.contains(&e.endpoint.id) && keeps(*e))
                .map(|e| e.endpoint.id.clone())
                .collect(),
        ),
    }
}

/// The checked `use` actions by the position of their syntax.
type Uses<'a> = HashMap<(u32, u32), &'a CUse>;

fn index_uses(set: &CheckedPolicySet) -> Uses<'_> {
    let mut m = HashMap::new();
    for r in &set.routes {
        for rule in r.rules.iter().chain(std::iter::once(&r.default)) {
            match &rule.body.terminal {
                Some(CTerminal::Use(u)) => {
                    m.insert((u.span.file.0, u.span.start), u);
                }
                Some(CTerminal::Split(s)) => {
                    for a in &s.arms {
                        m.insert((a.action.span.file.0, a.action.span.start), &a.action);
                    }
                }
                _ => {}
            }
        }
    }
    m
}

/// Whether every endpoint of `t` is among those of `parts` together.
fn covered(reg: &Registry, t: &TargetKind, parts: &[&Eps]) -> bool {
    if parts.iter().any(|p| **p == Eps::All) {
        return true;
    }
    match eps(reg, t) {
        Eps::All => false,
        Eps::Requested => parts.iter().any(|p| **p == Eps::Requested),
        Eps::Set(s) => {
            !s.is_empty()
                && s.iter().all(|id| {
                    parts
                        .iter()
                        .any(|p| matches!(p, Eps::Set(ids) if ids.contains(id)))
                })
        }
    }
}

/// Chain targets that are never tried for any of the `users` (each the plan
/// endpoints of one primary, split arms separately), with the earlier chain target
/// that already covers it alone, if one does.
fn never_tried<'f>(
    reg: &Registry,
    chain: &'f [Target],
    users: &[Vec<Eps>],
) -> Vec<(&'f Target, Option<&'f Target>)> {
    let mut out = Vec::new();
    let mut earlier: Vec<Eps> = Vec::new();
    for t in chain {
        let all_users = users.iter().flatten().all(|p| {
            let parts: Vec<&Eps> = std::iter::once(p).chain(&earlier).collect();
            covered(reg, &t.kind, &parts)
        });
        if all_users {
            let by = chain
                .iter()
                .take(earlier.len())
                .find(|e| covered(reg, &t.kind, &[&eps(reg, &e.kind)]));
            out.push((t, by));
        }
        earlier.push(eps(reg, &t.kind));
    }
    out
}

/// The primary targets of a body (one per split arm), or `None` if it does not
/// dispatch (reject, continue).
fn primaries(body: &[Action]) -> Option<Vec<&UseAction>> {
    body.iter().find_map(|a| match a {
        Action::Use(u) => Some(vec![u]),
        Action::Split(s) => Some(s.arms.iter().map(|arm| &arm.action).collect()),
        _ => None,
    })
}

fn fallback(body: &[Action]) -> Option<&FallbackDef> {
    body.iter().find_map(|a| {
        if let Action::Fallback(f) = a {
            Some(f)
        } else {
            None
        }
    })
}

/// Lints every route of `files`.
pub fn lint(files: &[PolicyFile], set: &CheckedPolicySet, out: &mut Vec<Diagnostic>) {
    let reg = &set.registry;
    let uses = index_uses(set);
    for r in files.iter().flat_map(|f| &f.items).filter_map(|i| {
        if let Item::Route(r) = i {
            Some(r)
        } else {
            None
        }
    }) {
        let mut bodies: Vec<&[Action]> = Vec::new();
        let mut route_fb = None;
        let mut continues_with_fallback = false;
        for it in &r.items {
            match it {
                RouteItem::Rule(x) => bodies.push(&x.body),
                RouteItem::Default(d) => bodies.push(&d.body),
                RouteItem::Fallback(f) => route_fb = Some(f),
                _ => {}
            }
        }
        for body in &bodies {
            for a in body.iter() {
                if let Action::Split(s) = a {
                    for arm in s.arms.iter().filter(|a| a.share.node == 0) {
                        out.push(
                            Diagnostic::warning(
                                codes::UNUSED_TARGET,
                                arm.span,
                                format!(
                                    "this split arm has a 0% share, so {} never gets traffic",
                                    describe(&arm.action.target.kind)
                                ),
                            )
                            .with_span_label("0% share")
                            .with_help("give the arm a share, or remove it"),
                        );
                    }
                }
            }
            let prim = primaries(body);
            if prim.is_none()
                && body.iter().any(|a| matches!(a, Action::Continue(_)))
                && fallback(body).is_some()
            {
                continues_with_fallback = true;
            }
            if let (Some(f), Some(p)) = (fallback(body), &prim) {
                let p: Vec<Eps> = p.iter().map(|u| plan_eps(reg, set, &uses, u)).collect();
                for (t, by) in never_tried(reg, &f.chain, &[p]) {
                    out.push(unused_fallback(t, by));
                }
            }
        }
        // The route's chain serves every dispatching body without its own chain.
        let Some(f) = route_fb else { continue };
        if continues_with_fallback {
            continue;
        }
        let users: Vec<Vec<Eps>> = bodies
            .iter()
            .filter(|b| fallback(b).is_none())
            .filter_map(|b| primaries(b))
            .map(|p| p.iter().map(|u| plan_eps(reg, set, &uses, u)).collect())
            .collect();
        if users.is_empty() {
            continue;
        }
        for (t, by) in never_tried(reg, &f.chain, &users) {
            out.push(unused_fallback(t, by));
        }
    }
}

fn unused_fallback(t: &Target, by: Option<&Target>) -> Diagnostic {
    if let Some(e) = by {
        return Diagnostic::warning(
            codes::UNUSED_TARGET,
            t.span,
            format!(
                "the fallback target {} is never tried: all of its endpoints are already in the plan through the earlier fallback target {}",
                describe(&t.kind),
                describe(&e.kind)
            ),
        )
        .with_span_label("never tried")
        .with_label(e.span, "these endpoints are already tried here")
        .with_help("remove this target, or fall back to a different model or endpoint");
    }
    Diagnostic::warning(
        codes::UNUSED_TARGET,
        t.span,
        format!("the fallback target {} is never tried: all of its endpoints are already in the plan of every rule it serves", describe(&t.kind)),
    )
    .with_span_label("never tried")
    .with_help("fall back to a different model or endpoint, or remove this target")
}

fn describe(t: &TargetKind) -> String {
    match t {
        TargetKind::Model(m) => format!("\"{m}\""),
        TargetKind::Endpoint(e) => format!("endpoint \"{e}\""),
        TargetKind::RequestedModel => "model".into(),
        TargetKind::Any => "any".into(),
    }
}
