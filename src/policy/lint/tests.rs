use super::*;
use crate::policy::registry::Registry;

fn lint_text(text: &str) -> Vec<Diagnostic> {
    let mut m = SourceMap::new();
    m.add("t.policy", text);
    let out = lint_sources(&m, &Registry::example());
    assert!(
        out.set.is_some(),
        "expected a valid policy: {:?}",
        out.diagnostics
    );
    out.diagnostics
}

fn codes_of(text: &str) -> Vec<&'static str> {
    lint_text(text).iter().map(|d| d.code).collect()
}

#[test]
fn unreachable_rule_under_route_condition() {
    let d = lint_text(
        "route r when request.model == \"gpt-4o\" {\n  rule x when request.model == \"smollm\" { use \"smollm\" }\n  default use model\n}\n",
    );
    assert_eq!(d.len(), 1, "{d:?}");
    assert_eq!(d[0].code, codes::UNREACHABLE);
}

#[test]
fn shadowed_rule_names_both() {
    let d = lint_text(
        "route r {\n  rule big priority 2 when request.input_tokens > 1000 { use \"gpt-4o\" }\n  rule huge priority 1 when request.input_tokens > 5000 and request.stream { use \"smollm\" }\n  default use model\n}\n",
    );
    assert_eq!(d.len(), 1, "{d:?}");
    assert_eq!(d[0].code, codes::SHADOWED);
    assert!(d[0].message.contains("`huge`") && d[0].message.contains("`big`"));
}

#[test]
fn overlap_with_verified_witness() {
    let d = lint_text(
        "route r {\n  rule a when request.input_tokens > 1000 { use \"gpt-4o\" }\n  rule b when request.stream { use \"smollm\" }\n  default use model\n}\n",
    );
    assert_eq!(d.len(), 1, "{d:?}");
    assert_eq!(d[0].code, codes::OVERLAP);
    let help = d[0].help.clone().unwrap_or_default();
    assert!(
        help.contains("input_tokens = 1001") && help.contains("stream = true"),
        "{help}"
    );
}

#[test]
fn disjoint_or_prioritized_rules_are_quiet() {
    assert!(codes_of(
        "route r {\n  rule a when request.input_tokens > 1000 { use \"gpt-4o\" }\n  rule b when request.input_tokens <= 1000 { use \"smollm\" }\n  default use model\n}\n"
    )
    .is_empty());
    assert!(codes_of(
        "route r {\n  rule a priority 1 when request.input_tokens > 1000 { use \"gpt-4o\" }\n  rule b when request.stream { use \"smollm\" }\n  default use model\n}\n"
    )
    .is_empty());
}

#[test]
fn constant_conditions() {
    let c = codes_of("route r when request.hour > 30 {\n  default use model\n}\n");
    assert_eq!(c, vec![codes::CONSTANT_CONDITION]);
    let c = codes_of(
        "route r {\n  rule a when request.stream or not request.stream { use \"gpt-4o\" }\n  default use model\n}\n",
    );
    assert_eq!(c, vec![codes::CONSTANT_CONDITION]);
}

#[test]
fn opaque_conditions_never_claim_unreachable() {
    // String matches and arithmetic are opaque: no claims either way.
    let c = codes_of(
        "route r {\n  rule a priority 2 when starts_with(request.model, \"gpt\") { use \"gpt-4o\" }\n  rule b priority 1 when request.model == \"gpt-4o\" { use \"smollm\" }\n  rule c when request.input_tokens * 2 > 10 and request.input_tokens < 3 { use \"smollm\" }\n  default use model\n}\n",
    );
    assert!(
        c.iter()
            .all(|c| *c != codes::UNREACHABLE && *c != codes::SHADOWED),
        "{c:?}"
    );
}

#[test]
fn optional_fields_absent_read_default() {
    // `has(org) or org == "a"` is satisfiable; `not has(org) and org == "a"` is not.
    let c = codes_of(
        "route r {\n  rule a when not has(request.org) and has(request.org) { use \"gpt-4o\" }\n  default use model\n}\n",
    );
    assert_eq!(c, vec![codes::CONSTANT_CONDITION]);
}

#[test]
fn split_keys() {
    let c = codes_of(
        "route r {\n  rule a when request.stream {\n    split by random { 50% -> use \"gpt-4o\" 50% -> use \"smollm\" }\n  }\n  default {\n    split by api_key { 50% -> use \"gpt-4o\" 50% -> use \"smollm\" }\n  }\n}\n",
    );
    assert_eq!(
        c,
        vec![codes::SPLIT_NOT_STICKY, codes::SPLIT_KEY_MAY_BE_ABSENT]
    );
    let c = codes_of(
        "route r {\n  rule a when has(request.api_key) {\n    split by api_key { 50% -> use \"gpt-4o\" 50% -> use \"smollm\" }\n  }\n  default use model\n}\n",
    );
    assert!(c.is_empty(), "{c:?}");
}

#[test]
fn unused_targets() {
    let c = codes_of(
        "route r {\n  fallback \"gpt-4o\"\n  rule a when request.stream { use \"gpt-4o\" }\n  default {\n    split by random { 100% -> use \"gpt-4o\" }\n  }\n}\n",
    );
    assert!(
        c.contains(&codes::UNUSED_TARGET)
            && c.iter().filter(|x| **x == codes::UNUSED_TARGET).count() == 1,
        "{c:?}"
    );
}

#[test]
fn priority_set_by_the_route_is_not_analysed_as_the_original() {
    // The route sets priority before its rules: the rule's test is not unreachable.
    let c = codes_of(
        "route r when request.priority == \"high\" {\n  set priority low\n  rule a when request.priority == \"low\" { use \"smollm\" }\n  default use model\n}\n",
    );
    assert!(!c.contains(&codes::UNREACHABLE), "{c:?}");
}

#[test]
fn shipped_policies_lint_clean() {
    let mut m = SourceMap::new();
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/policies");
    let mut paths = Vec::new();
    for dir in [root.to_string(), format!("{root}/builtin")] {
        for e in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            if e.path().extension().is_some_and(|x| x == "policy") {
                paths.push(e.path());
            }
        }
    }
    paths.sort();
    assert!(paths.len() > 5, "no shipped policies under {root}");
    for p in &paths {
        m.add(
            p.display().to_string(),
            std::fs::read_to_string(p).unwrap_or_default(),
        );
    }
    let out = lint_sources(&m, &Registry::example());
    let text = crate::policy::diagnostic::render_all(&out.diagnostics, &m);
    assert!(out.diagnostics.is_empty(), "{text}");
}

fn lint_with_cap(text: &str, max_attempts: Option<u32>) -> Vec<Diagnostic> {
    let mut m = SourceMap::new();
    m.add("t.policy", text);
    let out = lint_sources_with(&m, &Registry::example(), &LintOptions { max_attempts });
    assert!(
        out.set.is_some(),
        "expected a valid policy: {:?}",
        out.diagnostics
    );
    out.diagnostics
}

#[test]
fn fallback_on_that_changes_nothing_is_flagged() {
    let d = lint_text(
        "route r {\n  fallback \"smollm\" on 401, 403, 429, 5xx\n  default use \"gpt-4o\"\n}\n",
    );
    assert_eq!(d.len(), 1, "{d:?}");
    assert_eq!(d[0].code, codes::FALLBACK_ON_NO_EFFECT);
    assert!(d[0].message.contains("changes nothing"), "{}", d[0].message);
    // One status that is otherwise returned to the client gives the clause a meaning.
    assert!(codes_of(
        "route r {\n  fallback \"smollm\" on 409, 5xx\n  default use \"gpt-4o\"\n}\n"
    )
    .is_empty());
}

#[test]
fn fallback_on_a_request_error_is_flagged() {
    let d = lint_text(
        "route r {\n  fallback \"smollm\" on 400, 422, 413\n  default use \"gpt-4o\"\n}\n",
    );
    let codes: Vec<_> = d
        .iter()
        .map(|d| (d.code, d.span.map(|s| s.start)))
        .collect();
    assert_eq!(
        codes,
        [
            (codes::FALLBACK_ON_REQUEST_ERROR, Some(33)),
            (codes::FALLBACK_ON_REQUEST_ERROR, Some(43))
        ],
        "{d:?}"
    );
    assert!(
        d[0].message
            .starts_with("`400` holds the request itself at fault"),
        "{}",
        d[0].message
    );
    let d = lint_text("route r {\n  rule a when request.stream {\n    use \"smollm\"\n    fallback \"gpt-4o\" on 4xx\n  }\n  default use model\n}\n");
    assert_eq!(d.len(), 1, "{d:?}");
    assert!(
        d[0].message.contains("`4xx` includes statuses such as 400"),
        "{}",
        d[0].message
    );
}

#[test]
fn chain_past_max_attempts_names_the_targets_never_tried() {
    let text = "route r {\n  fallback \"smollm\" -> \"claude-sonnet\" retries 3\n  default use \"gpt-4o\"\n}\n";
    let d = lint_text(text);
    assert_eq!(d.len(), 1, "{d:?}");
    assert_eq!(d[0].code, codes::ATTEMPTS_EXCEED_CAP);
    assert_eq!(
        d[0].message,
        "fallback chain of 3 targets (the rule's choice and 2 fallbacks) with retries 3 needs up to 12 attempts; server.max_attempts is 8 (the default: lint ran without a config), so \"claude-sonnet\" is never tried"
    );
    assert_eq!(d[0].span.map(|s| s.start), Some(33));
    // With the config's cap: 12 fits, 3 hides both fallbacks.
    assert!(lint_with_cap(text, Some(12)).is_empty());
    let d = lint_with_cap(text, Some(4));
    assert_eq!(d.len(), 1, "{d:?}");
    assert!(
        d[0].message.ends_with(
            "server.max_attempts is 4, so \"smollm\" and \"claude-sonnet\" are never tried"
        ),
        "{}",
        d[0].message
    );
    // 2 targets x 4 attempts = 8: the last target gets its attempts.
    assert!(
        codes_of("route r {\n  fallback \"smollm\" retries 3\n  default use \"gpt-4o\"\n}\n")
            .is_empty()
    );
}

#[test]
fn scopes_are_boolean_facts_with_witnesses() {
    let d = lint_text(
        "route r {\n  rule a when scope(\"pro\") { use \"gpt-4o\" }\n  rule b when scope(\"beta\") { use \"smollm\" }\n  default use model\n}\n",
    );
    assert_eq!(d.len(), 1, "{d:?}");
    assert_eq!(d[0].code, codes::OVERLAP);
    let help = d[0].help.clone().unwrap_or_default();
    assert!(help.contains("scopes = \"beta pro\""), "{help}");
    let d = lint_text(
        "route r {\n  rule a when scope(\"pro\") and not scope(\"pro\") { use \"gpt-4o\" }\n  rule b when scope(\"pro\") and not scope(\"beta\") { use \"smollm\" }\n  rule c when scope(\"beta\") { use \"smollm\" }\n  default use model\n}\n",
    );
    assert_eq!(
        d.iter().map(|d| d.code).collect::<Vec<_>>(),
        vec![codes::CONSTANT_CONDITION],
        "{d:?}"
    );
}

/// Lints `text` with the built-in strategies against `reg`; the diagnostics of `text`
/// only (the built-in files lint clean on their own, `shipped_policies_lint_clean`).
fn lint_with_builtins(text: &str, reg: &Registry) -> Vec<Diagnostic> {
    let mut m = SourceMap::new();
    for (name, body) in crate::policy::tests::SHIPPED
        .iter()
        .filter(|(n, _)| n.contains("/builtin/"))
    {
        m.add(*name, *body);
    }
    let id = m.add("t.policy", text);
    let out = lint_sources(&m, reg);
    assert!(
        out.set.is_some(),
        "expected a valid policy: {:?}",
        out.diagnostics
    );
    out.diagnostics
        .into_iter()
        .filter(|d| d.span.is_some_and(|s| s.file == id))
        .collect()
}

fn codes(d: &[Diagnostic]) -> Vec<&'static str> {
    d.iter().map(|d| d.code).collect()
}

#[test]
fn w0206_is_quiet_when_the_strategy_can_drop_what_the_fallback_adds_back() {
    let reg = Registry::example();
    // `prefer` drops unhealthy endpoints; the fallback brings them back.
    let d = lint_with_builtins(
        "route r {\n  fallback \"claude-sonnet\"\n  default use \"claude-sonnet\" via least_latency\n}\n",
        &reg,
    );
    assert!(d.is_empty(), "{d:?}");
    let d = lint_with_builtins(
        "route r {\n  fallback \"gpt-4o\"\n  default use any via cost_optimized(max_latency = 1s)\n}\n",
        &reg,
    );
    assert!(d.is_empty(), "{d:?}");
    // `require endpoint.weight > 0` drops a weight-0 endpoint for good.
    let mut zero = Registry::example();
    for m in &mut zero.models {
        for e in &mut m.endpoints {
            if e.id == "azure/gpt-4o" {
                e.weight = 0;
            }
        }
    }
    let wrr = "route r {\n  fallback endpoint \"azure/gpt-4o\"\n  default use \"gpt-4o\" via weighted_round_robin\n}\n";
    assert!(lint_with_builtins(wrr, &zero).is_empty());
    // With every weight positive the filter provably keeps both: the warning stays.
    assert_eq!(
        codes(&lint_with_builtins(wrr, &reg)),
        [codes::UNUSED_TARGET]
    );
    // A filter that is true for the call's arguments drops nothing either.
    let d = lint_with_builtins(
        "route r {\n  rule s when request.stream {\n    use \"gpt-4o\" via cost_optimized(strict = false)\n    fallback \"gpt-4o\"\n  }\n  default use model\n}\n",
        &reg,
    );
    assert!(d.is_empty(), "prefer is still unknown: {d:?}");
}

#[test]
fn a_fallback_covered_by_an_earlier_fallback_is_never_tried() {
    let d = lint_text(
        "route r {\n  fallback \"claude-sonnet\" -> endpoint \"bedrock/claude-sonnet\"\n  default use \"gpt-4o\"\n}\n",
    );
    assert_eq!(codes(&d), [codes::UNUSED_TARGET], "{d:?}");
    assert!(
        d[0].message
            .contains("through the earlier fallback target \"claude-sonnet\""),
        "{}",
        d[0].message
    );
    assert_eq!(d[0].labels.len(), 1);
    // Different endpoints: both are tried.
    assert!(codes_of(
        "route r {\n  fallback \"claude-sonnet\" -> \"smollm\"\n  default use \"gpt-4o\"\n}\n"
    )
    .is_empty());
}

#[test]
fn constant_conditions_on_request_priority() {
    for cond in [
        "request.priority >= \"low\"",
        "request.priority in [\"low\", \"normal\", \"high\", \"critical\"]",
        "request.priority > \"critical\"",
        "request.priority < \"low\"",
    ] {
        let d = lint_text(&format!(
            "route r when {cond} {{\n  default use model\n}}\n"
        ));
        assert_eq!(codes(&d), [codes::CONSTANT_CONDITION], "{cond}: {d:?}");
        assert!(d[0].help.is_some(), "{cond}: W0204 has a help line");
    }
    let d = lint_text(
        "route r {\n  set priority high when request.priority < \"low\"\n  default use model\n}\n",
    );
    assert_eq!(codes(&d), [codes::CONSTANT_CONDITION], "{d:?}");
    assert!(
        d[0].message.contains("`set priority high`"),
        "{}",
        d[0].message
    );
    // A real test on the priority stays quiet.
    assert!(
        codes_of("route r when request.priority >= \"high\" {\n  default use model\n}\n")
            .is_empty()
    );
}

#[test]
fn comparisons_outside_a_fields_range_are_constant() {
    let d = lint_text(
        "route r {\n  rule a when request.input_tokens > 9223372036854775807 { use \"smollm\" }\n  default use model\n}\n",
    );
    assert_eq!(codes(&d), [codes::CONSTANT_CONDITION], "{d:?}");
    assert!(d[0].message.contains("always false"), "{}", d[0].message);
    let d = lint_text(
        "strategy calm() {\n  require endpoint.error_rate < 20\n  score = endpoint.latency_ewma_ms\n  pick min\n}\nroute r {\n  default use model via calm\n}\n",
    );
    assert_eq!(codes(&d), [codes::CONSTANT_CONDITION], "{d:?}");
    assert_eq!(
        d[0].message,
        "this comparison is always true: `endpoint.error_rate` is in [0, 1]"
    );
    let help = d[0].help.clone().unwrap_or_default();
    assert!(help.contains("0.20") && help.contains("20%"), "{help}");
    // Inside the range, or as a percentage: quiet.
    assert!(codes_of(
        "strategy calm() {\n  require endpoint.error_rate < 20%\n  score = endpoint.latency_ewma_ms\n  pick min\n}\nroute r {\n  default use model via calm\n}\n"
    )
    .is_empty());
    // A condition already reported as constant is not reported again per comparison.
    let c = codes_of("route r when request.hour > 30 {\n  default use model\n}\n");
    assert_eq!(c, [codes::CONSTANT_CONDITION]);
}

#[test]
fn w0201_and_w0207_help_lines() {
    let d = lint_text(
        "route r when request.model == \"gpt-4o\" {\n  rule x when request.model == \"smollm\" { use \"smollm\" }\n  default use model\n}\n",
    );
    assert_eq!(codes(&d), [codes::UNREACHABLE]);
    assert!(d[0].help.is_some());
    let d = lint_text(
        "route r {\n  default {\n    split by api_key { 50% -> use \"gpt-4o\" 50% -> use \"smollm\" }\n  }\n}\n",
    );
    assert_eq!(codes(&d), [codes::SPLIT_KEY_MAY_BE_ABSENT]);
    let help = d[0].help.clone().unwrap_or_default();
    assert!(!help.contains("the rule's condition"), "{help}");
    assert!(help.contains("rule `when has(request.api_key)`"), "{help}");
}

/// A pseudo-random route of `n` rules over a few fields (tenant strings, token
/// ranges, booleans, priorities, an opaque match), mixing priorities and targets.
fn generated_route(n: usize, seed: u64) -> String {
    let mut x = seed | 1;
    let mut next = move |m: u64| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x % m
    };
    let mut s = String::from("route r {\n");
    for i in 0..n {
        let mut parts = Vec::new();
        if next(3) > 0 {
            parts.push(format!(
                "has(metadata(\"t\")) and metadata(\"t\") == \"t{}\"",
                next(12)
            ));
        }
        if next(2) == 0 {
            let lo = next(8) * 100;
            parts.push(format!(
                "request.input_tokens >= {lo} and request.input_tokens < {}",
                lo + 100 * (1 + next(3))
            ));
        }
        match next(5) {
            0 => parts.push("request.stream".into()),
            1 => parts.push("not request.tools".into()),
            2 => parts.push("request.priority >= \"high\"".into()),
            3 => parts.push("starts_with(request.model, \"gpt\")".into()),
            _ => {}
        }
        let when = if parts.is_empty() {
            String::new()
        } else {
            format!(" when {}", parts.join(" and "))
        };
        let target = ["\"gpt-4o\"", "\"smollm\"", "model"][next(3) as usize];
        s.push_str(&format!(
            "  rule r{i} priority {}{when} {{ use {target} }}\n",
            next(2)
        ));
    }
    s.push_str("  default use model\n}\n");
    s
}

#[test]
fn index_matches_pairwise_scan() {
    for seed in 1..=12u64 {
        let text = generated_route(60, seed);
        let fast = lint_text(&text);
        super::index::EXHAUSTIVE.with(|e| e.set(true));
        let slow = lint_text(&text);
        super::index::EXHAUSTIVE.with(|e| e.set(false));
        assert_eq!(fast, slow, "seed {seed}:\n{text}");
        assert!(
            !slow.is_empty(),
            "seed {seed}: the generated route exercises the analyses"
        );
    }
}
