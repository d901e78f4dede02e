//! Interpreter tests: decisions, traces with locations, determinism.

use super::*;
use crate::policy::features::StatsSnapshot;
use crate::policy::tests::{shipped, with_builtins};

#[test]
fn trace_shows_conditions_with_locations_and_values() {
    let set = shipped();
    let mut req = RequestFeatures::for_model("gpt-4o");
    req.input_tokens = 150_000;
    let (d, t) = explain(&set, &req, &StatsSnapshot::default(), 0);
    assert_eq!(d.route.as_deref(), Some("long_context"));
    let first = t.events.iter().find_map(|e| match e {
        TraceEvent::Condition {
            owner,
            at,
            value,
            leaves,
        } if owner == "route long_context" => Some((at, value, leaves)),
        _ => None,
    });
    let (at, value, leaves) = first.expect("route condition traced");
    assert_eq!(at, "examples/policies/long_context.policy:4:8");
    assert!(*value);
    assert_eq!(
        leaves[0].saw,
        vec!["150000".to_string(), "100000".to_string()]
    );
    assert!(t.events.iter().any(
        |e| matches!(e, TraceEvent::Candidate { strategy, .. } if strategy == "least_latency")
    ));
    let json = serde_json::to_value(&d).unwrap();
    assert_eq!(json["endpoint"], "anthropic/claude-sonnet");
    assert_eq!(json["fallbacks"][1]["endpoint"], "openai/gpt-4o");
}

#[test]
fn decisions_are_deterministic_given_the_seed() {
    let set = with_builtins("route r { default use any via exp3 }").unwrap();
    let req = RequestFeatures::for_model("gpt-4o");
    let stats = StatsSnapshot::default();
    let a: Vec<_> = (0..50)
        .map(|s| decide(&set, &req, &stats, s).endpoint)
        .collect();
    let b: Vec<_> = (0..50)
        .map(|s| decide(&set, &req, &stats, s).endpoint)
        .collect();
    assert_eq!(a, b);
    assert!(a.iter().collect::<std::collections::BTreeSet<_>>().len() > 2);
}

#[test]
fn rule_priority_continue_and_unknown_model() {
    let set = with_builtins(
        "route r when request.model != \"mock\" {\n\
           rule low_first when request.stream { set priority low continue }\n\
           rule late when request.priority == \"low\" { use \"smollm\" }\n\
           rule early priority 5 when request.tools { reject 429 \"slow down\" }\n\
           default use model\n\
         }",
    )
    .unwrap();
    let mut req = RequestFeatures::for_model("gpt-4o");
    req.stream = true;
    req.tools = true;
    let d = decide(&set, &req, &StatsSnapshot::default(), 0);
    assert_eq!(d.reject.as_ref().map(|r| r.status), Some(429));
    req.tools = false;
    let d = decide(&set, &req, &StatsSnapshot::default(), 0);
    assert_eq!(d.rule.as_deref(), Some("late"));
    assert_eq!(d.priority, PriorityLevel::Low);
    let d = decide(
        &set,
        &RequestFeatures::for_model("nope"),
        &StatsSnapshot::default(),
        0,
    );
    assert_eq!(d.reject.map(|r| r.status), Some(404));
    let d = decide(
        &set,
        &RequestFeatures::for_model("mock"),
        &StatsSnapshot::default(),
        0,
    );
    assert_eq!(
        (d.route, d.endpoint.as_deref()),
        (None, Some("mock/mock-1"))
    );
}

#[test]
fn random_split_uses_the_seed_and_absent_keys_hash_as_empty() {
    let set = with_builtins("route r { rule s { split by random { 50% -> use \"gpt-4o\" 50% -> use \"smollm\" } } default use model }").unwrap();
    let req = RequestFeatures::for_model("gpt-4o");
    let smol = (0..2000)
        .filter(|s| {
            decide(&set, &req, &StatsSnapshot::default(), *s)
                .model
                .as_deref()
                == Some("smollm")
        })
        .count();
    assert!((900..1100).contains(&smol), "{smol}");
    let set = with_builtins("route r { rule s { split by header(\"X-User\") { 50% -> use \"gpt-4o\" 50% -> use \"smollm\" } } default use model }").unwrap();
    let d = decide(&set, &req, &StatsSnapshot::default(), 0);
    let split = d.split.unwrap();
    assert!(!split.key_present);
    assert_eq!(split.bucket, hash::bucket(0, "s", ""));
}

#[test]
fn no_available_endpoint_is_a_503() {
    let set = with_builtins("route r { default use \"smollm\" }").unwrap();
    let mut stats = StatsSnapshot::default();
    stats.endpoints.insert(
        "local/smollm".into(),
        crate::policy::EndpointStats {
            available: false,
            ..Default::default()
        },
    );
    let d = decide(&set, &RequestFeatures::for_model("smollm"), &stats, 0);
    assert_eq!(d.reject.map(|r| r.status), Some(503));
}

#[test]
fn scope_is_true_only_for_a_scope_the_caller_carries() {
    let set = with_builtins(concat!(
        "route r when request.model == \"gpt-4o\" {\n",
        "  rule beta when scope(\"beta\") and not scope(\"banned\") { use \"smollm\" }\n",
        "  default use model\n",
        "}",
    ))
    .unwrap();
    let stats = StatsSnapshot::default();
    let rule = |scopes: &[&str]| {
        let mut req = RequestFeatures::for_model("gpt-4o");
        req.set_scopes(scopes.iter().copied());
        decide(&set, &req, &stats, 0).rule
    };
    assert_eq!(rule(&["pro", "beta"]).as_deref(), Some("beta"));
    assert_eq!(rule(&["beta", "beta"]).as_deref(), Some("beta"));
    assert_eq!(rule(&[]).as_deref(), Some("default"));
    // Exact and case-sensitive, like OAuth2 scope tokens.
    assert_eq!(rule(&["Beta", "beta:read"]).as_deref(), Some("default"));
    assert_eq!(rule(&["beta", "banned"]).as_deref(), Some("default"));
    // An unsorted hand-built list answers the same.
    let mut req = RequestFeatures::for_model("gpt-4o");
    req.scopes = vec!["zeta".into(), "beta".into()];
    assert_eq!(decide(&set, &req, &stats, 0).rule.as_deref(), Some("beta"));
}

#[test]
fn fallback_chain_adds_each_endpoint_once_after_the_plan() {
    // Issue 17: the chain's duplicate check is a bitset over registry indices (it
    // was a search of the plan per endpoint); the plan keeps its order and no
    // endpoint repeats, whichever target names it again.
    let set = with_builtins(
        "route r { fallback \"gpt-4o\" -> any -> \"claude-sonnet\" default use \"gpt-4o\" }",
    )
    .unwrap();
    let req = RequestFeatures::for_model("gpt-4o");
    for seed in 0..20 {
        let d = decide(&set, &req, &StatsSnapshot::default(), seed);
        let mut seen = std::collections::BTreeSet::new();
        assert!(d.plan.iter().all(|i| seen.insert(*i)), "{:?}", d.plan);
        assert_eq!(
            d.plan.len(),
            set.registry.endpoints().count(),
            "{:?}",
            d.plan
        );
        let ids: Vec<String> = d.plan[..2]
            .iter()
            .map(|&i| d.names.get(i).unwrap().id.to_string())
            .collect();
        assert_eq!(
            ids,
            ["openai/gpt-4o", "azure/gpt-4o"],
            "the use's plan leads"
        );
    }
}

#[test]
fn bits_insert_reports_new_indices_and_grows_past_its_first_words() {
    let mut b = Bits::default();
    assert!(b.insert(3));
    assert!(!b.insert(3));
    assert!(b.insert(64));
    assert!(b.insert(1_000));
    assert!(!b.insert(1_000));
    assert!(!b.insert(64));
    assert!(b.insert(999));
}

#[test]
fn only_a_strategy_with_outcome_updates_records_its_candidates() {
    // Only `on success` / `on failure` read a call's candidates: the built-in order
    // and a strategy with `on pick` alone (weighted round-robin) copy no list.
    let set = with_builtins(
        "route a when request.model == \"gpt-4o\" { default use model }\n\
         route b when request.model == \"claude-sonnet\" { default use model via weighted_round_robin }\n\
         route c { default use model via exp3 }",
    )
    .unwrap();
    let stats = StatsSnapshot::default();
    let call_for = |model: &str| {
        let d = decide(&set, &RequestFeatures::for_model(model), &stats, 0);
        d.call.expect("a use records its call")
    };
    let call = call_for("gpt-4o");
    assert_eq!(call.strategy, None);
    assert!(call.candidates.is_empty());
    let call = call_for("claude-sonnet");
    assert!(call.strategy.is_some());
    assert!(call.candidates.is_empty());
    let call = call_for("gpt-4o-mini");
    assert!(call.strategy.is_some());
    assert!(!call.candidates.is_empty());
}

#[test]
fn dedup_below_keeps_first_occurrences_of_known_indices_in_order() {
    let mut v = vec![5, 2, 5, 300, 2, 0, 7, 64, 7];
    Bits::dedup_below(&mut v, 70);
    assert_eq!(v, [5, 2, 0, 7, 64]);
    // Nothing to drop; the first item to drop is the first or the last.
    let mut v: Vec<usize> = (0..200).rev().collect();
    Bits::dedup_below(&mut v, 200);
    assert_eq!(v, (0..200).rev().collect::<Vec<_>>());
    let mut v = vec![200, 3, 1, 3];
    Bits::dedup_below(&mut v, 200);
    assert_eq!(v, [3, 1]);
    let mut v = vec![9, 8, 199, 9];
    Bits::dedup_below(&mut v, 200);
    assert_eq!(v, [9, 8, 199]);
    let mut v: Vec<usize> = vec![];
    Bits::dedup_below(&mut v, 0);
    assert!(v.is_empty());
}
