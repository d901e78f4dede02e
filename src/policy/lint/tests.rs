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
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/policies");
    let mut paths = Vec::new();
    for dir in [root.to_string(), format!("{root}/builtin")] {
        for e in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            if e.path().extension().is_some_and(|x| x == "policy") {
                paths.push(e.path());
            }
        }
    }
    paths.sort();
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
