//! End-to-end: the shipped policies check against the example registry and their
//! policy tests pass; the strategies behave as their headers say.

use super::*;

/// Every shipped policy file, as `(path, text)`.
pub(crate) const SHIPPED: &[(&str, &str)] = &[
    (
        "examples/policies/ab.policy",
        include_str!("../../examples/policies/ab.policy"),
    ),
    (
        "examples/policies/batch.policy",
        include_str!("../../examples/policies/batch.policy"),
    ),
    (
        "examples/policies/canary.policy",
        include_str!("../../examples/policies/canary.policy"),
    ),
    (
        "examples/policies/long_context.policy",
        include_str!("../../examples/policies/long_context.policy"),
    ),
    (
        "examples/policies/reject.policy",
        include_str!("../../examples/policies/reject.policy"),
    ),
    (
        "examples/policies/builtin/adaptive.policy",
        include_str!("../../examples/policies/builtin/adaptive.policy"),
    ),
    (
        "examples/policies/builtin/cost_optimized.policy",
        include_str!("../../examples/policies/builtin/cost_optimized.policy"),
    ),
    (
        "examples/policies/builtin/exp3.policy",
        include_str!("../../examples/policies/builtin/exp3.policy"),
    ),
    (
        "examples/policies/builtin/least_latency.policy",
        include_str!("../../examples/policies/builtin/least_latency.policy"),
    ),
    (
        "examples/policies/builtin/multi_objective.policy",
        include_str!("../../examples/policies/builtin/multi_objective.policy"),
    ),
    (
        "examples/policies/builtin/quality_first.policy",
        include_str!("../../examples/policies/builtin/quality_first.policy"),
    ),
    (
        "examples/policies/builtin/weighted_round_robin.policy",
        include_str!("../../examples/policies/builtin/weighted_round_robin.policy"),
    ),
];

/// The shipped set, checked against [`Registry::example`].
pub(crate) fn shipped() -> CheckedPolicySet {
    let mut sources = SourceMap::new();
    for (name, text) in SHIPPED {
        sources.add(*name, *text);
    }
    match parse_and_check(&sources, &Registry::example()) {
        Ok(set) => set,
        Err(d) => panic!("{}", diagnostic::render_all(&d, &sources)),
    }
}

/// Checks `extra` policy text together with the shipped strategies.
pub(crate) fn with_builtins(extra: &str) -> Result<CheckedPolicySet, String> {
    let mut sources = SourceMap::new();
    for (name, text) in SHIPPED.iter().filter(|(n, _)| n.contains("builtin")) {
        sources.add(*name, *text);
    }
    sources.add("t.policy", extra);
    parse_and_check(&sources, &Registry::example())
        .map_err(|d| diagnostic::render_all(&d, &sources))
}

#[test]
fn shipped_policies_check_and_their_tests_pass() {
    let set = shipped();
    let report = run_tests(&set);
    assert_eq!(report.failed, 0, "{}", report.render());
    assert!(report.passed >= 15, "{}", report.render());
}

#[test]
fn weighted_round_robin_is_exact() {
    let set = with_builtins("route r { default use \"gpt-4o\" via weighted_round_robin }").unwrap();
    let req = RequestFeatures::for_model("gpt-4o");
    let mut stats = StatsSnapshot::default();
    let mut counts = std::collections::BTreeMap::<String, u32>::new();
    for i in 0..1000 {
        let d = decide(&set, &req, &stats, i);
        *counts
            .entry(d.endpoint.as_deref().unwrap().to_string())
            .or_default() += 1;
        for u in &d.state_updates {
            stats.apply(u);
        }
    }
    assert_eq!(counts.values().copied().collect::<Vec<_>>(), vec![500, 500]);
}

#[test]
fn exp3_learns_the_fast_arm_and_keeps_exploring() {
    let set = with_builtins("route r { default use \"claude-sonnet\" via exp3 }").unwrap();
    let req = RequestFeatures::for_model("claude-sonnet");
    let mut stats = StatsSnapshot::default();
    let mut fast = 0;
    for i in 0..3000u64 {
        let d = decide(&set, &req, &stats, i);
        let ep = d.endpoint.as_deref().unwrap().to_string();
        let latency = if ep == "anthropic/claude-sonnet" {
            500.0
        } else {
            20_000.0
        };
        if i >= 2000 && ep == "anthropic/claude-sonnet" {
            fast += 1;
        }
        let call = d.call.as_ref().unwrap();
        let out = Outcome {
            latency_ms: latency,
            ..Outcome::default()
        };
        let u = on_outcome(&set, call, &req, &stats, &ep, true, &out).unwrap();
        stats.apply(&u);
    }
    assert!(fast >= 700, "fast arm got {fast} of the last 1000");
    assert!(fast <= 1000 - 80, "exploration floor gamma/K kept: {fast}");
}
