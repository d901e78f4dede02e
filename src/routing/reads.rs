//! Which request facts a checked policy set reads, so the request path computes the
//! costly ones (the BPE count behind `request.input_tokens`) only for sets that
//! read them.
//!
//! The walk visits every expression of every route (conditions, `set priority`
//! guards, canary rollbacks) and of every strategy some route's `use` or split arm
//! calls (state initialisers, lets, filters, the score, `on` updates). The built-in
//! strategies that read `request.input_tokens` (`least_latency`, `cost_optimized`,
//! `multi_objective`) count only when a route uses them.

use crate::policy::checked::{
    CBody, CRoute, CRule, CStrategy, CTerminal, CUse, CheckedPolicySet, ReqField, TExpr, TExprKind,
};

/// Whether any expression of `set` reads `request.input_tokens` (or tests its
/// presence).
pub fn reads_input_tokens(set: &CheckedPolicySet) -> bool {
    let mut used = vec![false; set.strategies.len()];
    for r in &set.routes {
        for rule in r.rules.iter().chain(std::iter::once(&r.default)) {
            let uses: Vec<&CUse> = match &rule.body.terminal {
                Some(CTerminal::Use(u)) => vec![u],
                Some(CTerminal::Split(s)) => s.arms.iter().map(|a| &a.action).collect(),
                _ => Vec::new(),
            };
            for u in uses {
                if let Some(slot) = u.strategy.and_then(|i| used.get_mut(i as usize)) {
                    *slot = true;
                }
            }
        }
    }
    set.routes.iter().any(route_reads)
        || set
            .strategies
            .iter()
            .zip(&used)
            .any(|(s, &u)| u && strategy_reads(s))
}

fn route_reads(r: &CRoute) -> bool {
    r.when.as_ref().is_some_and(expr_reads)
        || r.set_priority
            .iter()
            .any(|p| p.when.as_ref().is_some_and(expr_reads))
        || r.rules.iter().any(rule_reads)
        || rule_reads(&r.default)
}

fn rule_reads(r: &CRule) -> bool {
    r.when.as_ref().is_some_and(expr_reads) || body_reads(&r.body)
}

fn body_reads(b: &CBody) -> bool {
    let split = match &b.terminal {
        Some(CTerminal::Split(s)) => s
            .arms
            .iter()
            .any(|a| a.rollback.as_ref().is_some_and(expr_reads)),
        _ => false,
    };
    split
        || b.set_priority
            .iter()
            .any(|p| p.when.as_ref().is_some_and(expr_reads))
}

fn strategy_reads(s: &CStrategy) -> bool {
    s.exprs().any(expr_reads)
}

fn expr_reads(e: &TExpr) -> bool {
    e.any_node(&mut |k| {
        matches!(
            k,
            TExprKind::Req(ReqField::InputTokens) | TExprKind::Has(ReqField::InputTokens)
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn snap(text: &str) -> bool {
        let (config, _) = crate::config::embedded(|_| false);
        let registry = crate::routing::policy::registry_from_config(&config);
        let mut sources = crate::routing::policy::read_sources(None).unwrap();
        sources.add("t.policy", text);
        let set = crate::policy::parse_and_check(&sources, &registry).expect("checks");
        reads_input_tokens(&set)
    }

    #[test]
    fn finds_input_tokens_in_conditions_and_strategies() {
        assert!(!snap("route r {\n  default use model\n}\n"));
        assert!(snap(
            "route r {\n  rule big when request.input_tokens > 1000 { use model }\n  default use model\n}\n"
        ));
        assert!(snap(
            "strategy s {\n  require endpoint.context_window == 0 or endpoint.context_window > request.input_tokens\n  score = 1.0\n  pick max\n}\nroute r {\n  default use model via s\n}\n"
        ));
        // A built-in strategy that reads it counts only once a route uses it.
        assert!(snap(
            "route r {\n  default use model via least_latency\n}\n"
        ));
    }
}
