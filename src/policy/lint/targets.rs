//! W0206 unused targets: split arms with a 0% share, and fallback targets whose
//! endpoints are all already in the plan (the plan never repeats an endpoint, so such
//! a fallback is never tried). Works on the syntax tree and the registry.

use std::collections::BTreeSet;

use super::codes;
use crate::policy::ast::*;
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

/// Whether every endpoint of `t` is already among `primary`'s.
fn covered(reg: &Registry, t: &TargetKind, primary: &Eps) -> bool {
    match (primary, eps(reg, t)) {
        (Eps::All, _) => true,
        (Eps::Requested, Eps::Requested) => true,
        (Eps::Set(p), Eps::Set(s)) => !s.is_empty() && s.is_subset(p),
        _ => false,
    }
}

/// The primary targets of a body (one per split arm), or `None` if it does not
/// dispatch (reject, continue).
fn primaries(body: &[Action]) -> Option<Vec<&TargetKind>> {
    body.iter().find_map(|a| match a {
        Action::Use(u) => Some(vec![&u.target.kind]),
        Action::Split(s) => Some(s.arms.iter().map(|arm| &arm.action.target.kind).collect()),
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
pub fn lint(files: &[PolicyFile], reg: &Registry, out: &mut Vec<Diagnostic>) {
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
                            .with_span_label("0% share"),
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
                check_chain(reg, f, p, out);
            }
        }
        // The route's chain serves every dispatching body without its own chain.
        let Some(f) = route_fb else { continue };
        if continues_with_fallback {
            continue;
        }
        let users: Vec<Vec<&TargetKind>> = bodies
            .iter()
            .filter(|b| fallback(b).is_none())
            .filter_map(|b| primaries(b))
            .collect();
        if users.is_empty() {
            continue;
        }
        let mut unused = Vec::new();
        for t in &f.chain {
            if users
                .iter()
                .all(|p| p.iter().all(|x| covered(reg, &t.kind, &eps(reg, x))))
            {
                unused.push(t);
            }
        }
        for t in unused {
            out.push(unused_fallback(t));
        }
    }
}

fn check_chain(reg: &Registry, f: &FallbackDef, prim: &[&TargetKind], out: &mut Vec<Diagnostic>) {
    for t in &f.chain {
        if prim.iter().all(|p| covered(reg, &t.kind, &eps(reg, p))) {
            out.push(unused_fallback(t));
        }
    }
}

fn unused_fallback(t: &Target) -> Diagnostic {
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
