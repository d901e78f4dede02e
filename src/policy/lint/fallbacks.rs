//! Fallback chains against what dispatch does with them:
//!
//! - W0208 an `on` list whose statuses all move on to the next endpoint anyway (401,
//!   403, 404, 408, 429 and every 5xx do, README "How each failure is handled"), so
//!   the clause changes nothing;
//! - W0209 an `on` item that is a 4xx the request itself is blamed for (anything but
//!   401, 403, 404, 408, 409, 422 and 429, e.g. 400 or 413, or the whole `4xx`): the
//!   next endpoint will most likely refuse the same request;
//! - W0210 a chain longer than `server.max_attempts` can reach: a plan of n targets
//!   with `retries r` needs up to n × (r + 1) attempts, counting the rule's own choice
//!   and one endpoint per target (a lower bound: a model target with several endpoints
//!   needs more), so a target whose first attempt would be past the cap is never tried.

use super::codes;
use crate::policy::ast::*;
use crate::policy::diagnostic::Diagnostic;

/// What the linter knows of the gateway config.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LintOptions {
    /// `server.max_attempts` of the config the policies run under; `None` when lint
    /// runs without a config file (the default, [`DEFAULT_MAX_ATTEMPTS`], is assumed
    /// and the warning says so).
    pub max_attempts: Option<u32>,
}

/// The default of `server.max_attempts` (`config::ServerConfig`).
pub const DEFAULT_MAX_ATTEMPTS: u32 = 8;

/// Statuses dispatch already moves on from without an `on` clause.
fn moves_on_anyway(item: StatusLit) -> bool {
    match item {
        StatusLit::Code(c) => matches!(c, 401 | 403 | 404 | 408 | 429 | 500..=599),
        StatusLit::Class(k) => k == 5,
    }
}

/// 4xx statuses that can depend on the endpoint (credentials, model id, conflicts,
/// validation rules, limits); the others blame the request itself.
const ENDPOINT_4XX: [i64; 7] = [401, 403, 404, 408, 409, 422, 429];

fn text(item: StatusLit) -> String {
    match item {
        StatusLit::Code(c) => c.to_string(),
        StatusLit::Class(k) => format!("{k}xx"),
    }
}

/// Lints every `fallback` of `files`.
pub fn lint(files: &[PolicyFile], opts: &LintOptions, out: &mut Vec<Diagnostic>) {
    for f in files
        .iter()
        .flat_map(|f| &f.items)
        .filter_map(|i| match i {
            Item::Route(r) => Some(r),
            _ => None,
        })
        .flat_map(route_fallbacks)
    {
        if let Some(on) = &f.on {
            statuses(on, out);
        }
        attempts(f, opts, out);
    }
}

fn route_fallbacks(r: &RouteDef) -> Vec<&FallbackDef> {
    let mut v = Vec::new();
    for it in &r.items {
        let body = match it {
            RouteItem::Fallback(f) => {
                v.push(f);
                continue;
            }
            RouteItem::Rule(x) => &x.body,
            RouteItem::Default(d) => &d.body,
            _ => continue,
        };
        v.extend(body.iter().filter_map(|a| match a {
            Action::Fallback(f) => Some(f),
            _ => None,
        }));
    }
    v
}

fn statuses(on: &FallbackOnDef, out: &mut Vec<Diagnostic>) {
    if !on.items.is_empty() && on.items.iter().all(|i| moves_on_anyway(i.node)) {
        out.push(
            Diagnostic::warning(
                codes::FALLBACK_ON_NO_EFFECT,
                on.span,
                "every status of this `on` list already moves on to the next endpoint, so the clause changes nothing",
            )
            .with_span_label("no effect")
            .with_help("401, 403, 404, 408, 429 and 5xx always move on; `on` matters for statuses otherwise returned to the client, such as 409 or 422"),
        );
    }
    for i in &on.items {
        let blamed = match i.node {
            StatusLit::Code(c) => (400..=499).contains(&c) && !ENDPOINT_4XX.contains(&c),
            StatusLit::Class(k) => k == 4,
        };
        if blamed {
            out.push(
                Diagnostic::warning(
                    codes::FALLBACK_ON_REQUEST_ERROR,
                    i.span,
                    format!(
                        "`{}` {} the request itself at fault, so the next endpoint will most likely refuse it too",
                        text(i.node),
                        if matches!(i.node, StatusLit::Class(_)) { "includes statuses such as 400 and 413 that hold" } else { "holds" },
                    ),
                )
                .with_span_label("request error")
                .with_help("keep it only if the endpoints of the chain accept different requests (context window, parameters); otherwise the client waits for the same error twice"),
            );
        }
    }
}

fn attempts(f: &FallbackDef, opts: &LintOptions, out: &mut Vec<Diagnostic>) {
    let cap = u64::from(opts.max_attempts.unwrap_or(DEFAULT_MAX_ATTEMPTS));
    let per = f
        .retries
        .as_ref()
        .map_or(0, |r| r.node.clamp(0, 1_000) as u64)
        + 1;
    let targets = f.chain.len() as u64 + 1;
    // Chain target k (0-based) is plan position k + 1: its first attempt is number
    // (k + 1) × per + 1.
    let never: Vec<&Target> = f
        .chain
        .iter()
        .enumerate()
        .filter(|(k, _)| (*k as u64 + 1) * per >= cap)
        .map(|(_, t)| t)
        .collect();
    let Some(first) = never.first() else { return };
    let names: Vec<String> = never.iter().map(|t| describe(&t.kind)).collect();
    let cap_text = match opts.max_attempts {
        Some(n) => format!("server.max_attempts is {n}"),
        None => format!(
            "server.max_attempts is {DEFAULT_MAX_ATTEMPTS} (the default: lint ran without a config)"
        ),
    };
    out.push(
        Diagnostic::warning(
            codes::ATTEMPTS_EXCEED_CAP,
            first.span,
            format!(
                "fallback chain of {targets} targets (the rule's choice and {} fallbacks) with retries {} needs up to {} attempts; {cap_text}, so {} {} never tried",
                f.chain.len(),
                per - 1,
                targets * per,
                names.join(" and "),
                if names.len() == 1 { "is" } else { "are" },
            ),
        )
        .with_span_label("never tried")
        .with_help("lower `retries`, shorten the chain, or raise `server.max_attempts`"),
    );
}

fn describe(t: &TargetKind) -> String {
    match t {
        TargetKind::Model(m) => format!("\"{m}\""),
        TargetKind::Endpoint(e) => format!("endpoint \"{e}\""),
        TargetKind::RequestedModel => "model".into(),
        TargetKind::Any => "any".into(),
    }
}
