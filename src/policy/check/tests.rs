//! Checker tests: each error class, with its code and line:col.

use crate::policy::tests::with_builtins;

fn errs(src: &str) -> String {
    match with_builtins(src) {
        Ok(_) => panic!("expected errors for:\n{src}"),
        Err(e) => e,
    }
}

#[track_caller]
fn has(out: &str, code: &str, at: &str) {
    assert!(
        out.contains(&format!("[{code}]")),
        "missing {code} in:\n{out}"
    );
    assert!(out.contains(at), "missing {at} in:\n{out}");
}

#[test]
fn unknown_model_and_endpoint_suggest_names() {
    let e = errs("route r {\n  rule a when request.stream { use \"gpt-4\" }\n  default use endpoint \"openai/gpt4o\"\n}");
    has(&e, "E0401", "t.policy:2:36");
    assert!(e.contains("did you mean `gpt-4o`?"), "{e}");
    has(&e, "E0402", "t.policy:3:15");
    assert!(e.contains("did you mean `openai/gpt-4o`?"), "{e}");
}

#[test]
fn unknown_strategy_field_function_and_param() {
    let e = errs("route r when request.modle == \"x\" and lenght(1) {\n  default use model via least_latncy\n}\nroute s { default use model via least_latency(bta = 1.0) }");
    has(&e, "E0203", "t.policy:1:22");
    has(&e, "E0204", "t.policy:1:39");
    has(&e, "E0202", "t.policy:2:25");
    assert!(e.contains("did you mean `least_latency`?"), "{e}");
    has(&e, "E0206", "t.policy:4:47");
}

#[test]
fn type_errors_and_arity() {
    let e = errs("route r when request.input_tokens == \"many\" or request.priority == \"hgh\" or starts_with(request.model) {\n  default use model\n}");
    has(&e, "E0301", "t.policy:1:14");
    assert!(e.contains("did you mean `high`?"), "{e}");
    has(&e, "E0302", "t.policy:1:77");
}

#[test]
fn optional_fields_need_has() {
    let e = errs("route r when header(\"x-team\") == \"a\" {\n  default use model\n}");
    has(&e, "E0303", "t.policy:1:14");
    assert!(e.contains("has(header(\"x-team\"))"), "{e}");
    // Guarded forms are accepted.
    with_builtins("route r when has(header(\"x\")) and header(\"x\") == \"a\" or not has(request.org) or request.org == \"o\" { default use model }").unwrap();
}

#[test]
fn regex_split_sum_ranges_and_cycles() {
    let e = errs(concat!(
        "route r when matches(request.model, \"gpt-(\") {\n",
        "  rule a when request.stream { split by api_key { 60% -> use \"gpt-4o\"\n 30% -> use \"smollm\" } }\n",
        "  rule b when request.tools { use model via exp3(gamma = 1.5) }\n",
        "  default use model\n",
        "  fallback \"gpt-4o\" -> \"smollm\" -> \"gpt-4o\"\n",
        "}\n",
    ));
    has(&e, "E0501", "t.policy:1:37");
    has(&e, "E0502", "t.policy:2:32");
    assert!(e.contains("add up to 90%"), "{e}");
    has(&e, "E0503", "t.policy:4:58");
    has(&e, "E0602", "t.policy:6:36");
}

#[test]
fn structure_errors() {
    let e = errs("route r { rule a when request.stream { } }\nroute r { default use model }");
    has(&e, "E0601", "t.policy:1:7");
    has(&e, "E0603", "t.policy:1:11");
    has(&e, "E0201", "t.policy:2:7");
    assert!(e.contains("first defined here"), "{e}");
    let e =
        errs("strategy s(x = 1) { score = endpoint.health }\nroute q { default use model via s }");
    has(&e, "E0604", "t.policy:1:10");
    let e = errs(
        "route r { rule a { split by api_key { 100% -> canary use model } } default use model }",
    );
    has(&e, "E0605", "t.policy:1:20");
}

#[test]
fn contexts_are_enforced() {
    let e = errs("route r when endpoint.health > 0.5 { default use model }");
    has(&e, "E0207", "t.policy:1:14");
    let e = errs("strategy s { require sum(endpoint.health) > 1.0 score = 1.0 pick min }\nroute q { default use model via s }");
    has(&e, "E0207", "t.policy:1:22");
}

#[test]
fn all_errors_are_reported_not_just_the_first() {
    let e = errs("route r {\n  rule a when x { use \"nope\" }\n  rule b when request.stream { use \"nada\" }\n}");
    assert!(e.matches("error[").count() >= 4, "{e}");
}

#[test]
fn bad_tests_are_errors() {
    let e = errs("route r { default use model }\ntest \"t\" { request { modell = \"gpt-4o\" } expect endpoint \"openai/gpt4o\" }");
    has(&e, "E0801", "t.policy:2:22");
    assert!(e.contains("did you mean `model`?"), "{e}");
}

#[test]
fn a_test_naming_a_rule_that_failed_to_check_gets_no_follow_on_error() {
    let e = errs("route r {\n  rule a when request.stream == 1 { use \"gpt-4o\" }\n  default use model\n}\ntest \"t\" { request { model = \"gpt-4o\" } expect rule \"a\" }");
    has(&e, "E0301", "t.policy:2:15");
    assert!(!e.contains("E0801"), "{e}");
    // A name declared nowhere is still an error.
    let e = errs("route r {\n  rule a when request.stream == 1 { use \"gpt-4o\" }\n  default use model\n}\ntest \"t\" { request { model = \"gpt-4o\" } expect rule \"b\" }");
    has(&e, "E0801", "t.policy:5:");
}

#[test]
fn fallback_on_statuses_out_of_range_and_duplicates() {
    let e = errs("route r {\n  fallback \"gpt-4o\" on 200, 409, 6xx, 409, 5xx, 503, 600\n  default use model\n}\n");
    has(&e, "E0503", "t.policy:2:24");
    assert!(e.contains("`200` is not an error status"), "{e}");
    has(&e, "E0503", "t.policy:2:34");
    assert!(e.contains("`6xx` is not an error status"), "{e}");
    has(&e, "E0201", "t.policy:2:39");
    assert!(e.contains("`409` is listed twice"), "{e}");
    has(&e, "E0201", "t.policy:2:49");
    assert!(e.contains("`503` is already covered by `5xx`"), "{e}");
    assert!(e.contains("`600` is not an error status"), "{e}");
    assert!(e.contains("^^^"), "{e}");
    let e = errs("route r {\n  fallback \"gpt-4o\" on 429, 4xx\n  default use model\n}\n");
    has(&e, "E0201", "t.policy:2:29");
    assert!(e.contains("`4xx` covers `429`, listed earlier"), "{e}");
}

#[test]
fn fallback_on_reaches_the_decision() {
    let set = with_builtins(
        "route r {\n  fallback \"smollm\" on 409, 5xx retries 1\n  default use \"gpt-4o\"\n}\n",
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let d = crate::policy::decide(
        &set,
        &crate::policy::RequestFeatures::for_model("gpt-4o"),
        &crate::policy::StatsSnapshot::default(),
        0,
    );
    let on = d.fallback_on.expect("fallback_on in the decision");
    assert!(on.matches(409) && on.matches(502) && !on.matches(400) && !on.matches(429));
    assert_eq!(d.retries, 1);
}

#[test]
fn endpoint_context_window_is_an_int_and_circuit_a_state() {
    let ok = "strategy s {\n  require endpoint.context_window >= request.input_tokens and endpoint.circuit in [\"closed\", \"half_open\"]\n  prefer endpoint.circuit != \"open\"\n  score = 1.0\n  pick weighted\n}\nroute r { default use model via s }\n";
    with_builtins(ok).unwrap_or_else(|e| panic!("{e}"));
    let e = errs("strategy s {\n  prefer endpoint.circuit == \"half-open\"\n  require endpoint.context_window > 0.5\n  require endpoint.circuit in [\"closed\", \"shut\"]\n  score = 1.0\n  pick weighted\n}\nroute r { default use model via s }\n");
    has(&e, "E0301", "t.policy:2:30");
    assert!(e.contains("\"half-open\" is not a circuit state"), "{e}");
    assert!(e.contains("did you mean `half_open`?"), "{e}");
    has(&e, "E0301", "t.policy:4:42");
    assert!(
        e.contains("the states are \"closed\", \"half_open\" and \"open\""),
        "{e}"
    );
    let e = errs("strategy s {\n  require endpoint.circuit > 1\n  score = 1.0\n  pick weighted\n}\nroute r { default use model via s }\n");
    has(&e, "E0301", "t.policy:2:11");
}

#[test]
fn scope_takes_one_nonempty_literal_scope_name() {
    // Good uses: alone, negated, combined, in `set priority` and a split rule.
    let set = with_builtins(concat!(
        "route r when scope(\"beta\") or not scope(\"chat:write\") {\n",
        "  set priority high when scope(\"pro\") and request.stream\n",
        "  rule a when scope(\"pro\") and has(request.org) { use \"smollm\" }\n",
        "  default use model\n",
        "}",
    ))
    .unwrap();
    assert!(set.strings.lookup("chat:write").is_some());
    // A non-literal, an empty name, a name with a space, wrong arity, a non-Bool use.
    let e = errs(concat!(
        "route r when scope(request.model) {\n",
        "  rule a when scope(\"\") { use \"smollm\" }\n",
        "  rule b when scope(\"pro beta\") { use \"smollm\" }\n",
        "  rule c when scope() { use \"smollm\" }\n",
        "  rule d when scope(\"pro\") == \"yes\" { use \"smollm\" }\n",
        "  default use model\n",
        "}",
    ));
    has(&e, "E0304", "t.policy:1:20");
    assert!(
        e.contains("the argument of `scope` must be a string literal"),
        "{e}"
    );
    has(&e, "E0104", "t.policy:2:21");
    assert!(e.contains("the scope name is empty"), "{e}");
    assert!(e.contains("t.policy:3:21"), "{e}");
    assert!(e.contains("a scope name cannot contain spaces"), "{e}");
    has(&e, "E0302", "t.policy:4:15");
    has(&e, "E0301", "t.policy:5:15");
    // Always present: `has()` does not apply, and a typo suggests the function.
    let e = errs("route r when has(scope(\"x\")) or scop(\"x\") { default use model }");
    has(&e, "E0301", "t.policy:1:18");
    assert!(e.contains("did you mean `scope`?"), "{e}");
}

#[test]
fn cache_exact_fills_the_exact_setting_for_the_route_and_a_rule() {
    let set = with_builtins(
        "route r {\n  cache exact ttl 30s\n  rule plain when request.stream {\n    cache on\n    use \"gpt-4o\"\n  }\n  rule strict when request.tools {\n    cache exact\n    use \"gpt-4o\"\n  }\n  default use \"gpt-4o\"\n}\n",
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let decide = |stream: bool, tools: bool| {
        let mut req = crate::policy::RequestFeatures::for_model("gpt-4o");
        req.stream = stream;
        req.tools = tools;
        crate::policy::decide(&set, &req, &crate::policy::StatsSnapshot::default(), 0).cache
    };
    let setting =
        |on, ttl_ms, exact| Some(crate::policy::checked::CacheSetting { on, ttl_ms, exact });
    assert_eq!(decide(false, false), setting(true, Some(30_000), true));
    assert_eq!(decide(true, false), setting(true, None, false));
    assert_eq!(decide(false, true), setting(true, None, true));
    let e = errs("route r {\n  cache exact ttl 0ms\n  default use model\n}");
    has(&e, "E0503", "t.policy:2:19");
    let e = errs("route r {\n  cache exact\n  cache on\n  default use model\n}");
    assert!(e.contains("cache setting"), "{e}");
}

#[test]
fn expect_cache_exact_passes_only_for_an_exact_setting() {
    let set = with_builtins(
        "route r {\n  cache exact\n  rule s when request.stream {\n    cache on\n    use \"gpt-4o\"\n  }\n  default use \"gpt-4o\"\n}\n\ntest \"exact\" {\n  request { model = \"gpt-4o\" }\n  expect cache exact\n}\n\ntest \"on is not exact\" {\n  request { model = \"gpt-4o\", stream = true }\n  expect cache exact\n}\n\ntest \"on\" {\n  request { model = \"gpt-4o\", stream = true }\n  expect cache on\n}\n",
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let report = crate::policy::testing::run_tests(&set);
    let failed: Vec<&str> = report
        .cases
        .iter()
        .filter(|c| !c.passed)
        .map(|c| c.name.as_str())
        .collect();
    assert_eq!(failed, ["on is not exact"], "{}", report.render());
    let e = errs("route r { default use model }\ntest \"t\" {\n  request { model = \"gpt-4o\" }\n  expect cache exactly\n}\n");
    assert!(
        e.contains("E0801") && e.contains("did you mean `exact`?"),
        "{e}"
    );
}

#[test]
fn hold_off_peak_applies_from_the_route_the_taken_rule_and_continue_rules() {
    let set = with_builtins(concat!(
        "route held when request.model == \"smollm\" {\n",
        "  hold off_peak\n",
        "  rule s when request.stream { use model }\n",
        "  default use model\n",
        "}\n",
        "route r {\n",
        "  rule mark when request.tools {\n    hold off_peak\n    continue\n  }\n",
        "  rule s when request.stream {\n    hold off_peak\n    use \"gpt-4o\"\n  }\n",
        "  rule m when request.messages > 3 { use \"gpt-4o\" }\n",
        "  default use \"gpt-4o\"\n",
        "}\n",
    ))
    .unwrap_or_else(|e| panic!("{e}"));
    let decide = |model: &str, stream: bool, tools: bool, messages: u64| {
        let mut req = crate::policy::RequestFeatures::for_model(model);
        req.stream = stream;
        req.tools = tools;
        req.messages = messages;
        let d = crate::policy::decide(&set, &req, &crate::policy::StatsSnapshot::default(), 0);
        (d.rule.unwrap_or_default(), d.hold_off_peak)
    };
    // The route's hold covers each of its rules.
    assert_eq!(decide("smollm", true, false, 0), ("s".into(), true));
    assert_eq!(decide("smollm", false, false, 0), ("default".into(), true));
    // A rule's hold only when that rule applies.
    assert_eq!(decide("gpt-4o", true, false, 0), ("s".into(), true));
    assert_eq!(decide("gpt-4o", false, false, 5), ("m".into(), false));
    assert_eq!(decide("gpt-4o", false, false, 0), ("default".into(), false));
    // A `continue` rule's hold carries on, like its other settings.
    assert_eq!(decide("gpt-4o", false, true, 5), ("m".into(), true));
    assert_eq!(decide("gpt-4o", false, true, 0), ("default".into(), true));
}

#[test]
fn hold_takes_only_off_peak_and_once() {
    let e = errs("route r {\n  hold of_peak\n  default use model\n}\n");
    has(&e, "E0503", "t.policy:2:8");
    assert!(
        e.contains("a request cannot be held for `of_peak`")
            && e.contains("did you mean `off_peak`?"),
        "{e}"
    );
    let e = errs("route r {\n  rule a when request.stream {\n    hold forever\n    use model\n  }\n  default use model\n}\n");
    has(&e, "E0503", "t.policy:3:10");
    assert!(
        e.contains("`hold off_peak` lets a low-priority request"),
        "{e}"
    );
    let e = errs(
        "route r {\n  default {\n    hold off_peak\n    hold off_peak\n    use model\n  }\n}\n",
    );
    has(&e, "E0201", "t.policy:4:5");
    assert!(e.contains("only one `hold` is allowed here"), "{e}");
}

#[test]
fn expect_hold_checks_the_decision_and_request_off_peak_is_a_bool() {
    let set = with_builtins(concat!(
        "route r {\n",
        "  rule in_window when request.off_peak { use \"gpt-4o\" }\n",
        "  default {\n    hold off_peak\n    use \"gpt-4o\"\n  }\n",
        "}\n",
        "test \"held\" {\n  request { model = \"gpt-4o\" }\n  expect hold off_peak\n}\n",
        "test \"window\" {\n  request { model = \"gpt-4o\", off_peak = true }\n  expect hold none\n  expect rule in_window\n}\n",
        "test \"wrong\" {\n  request { model = \"gpt-4o\", off_peak = true }\n  expect hold off_peak\n}\n",
    ))
    .unwrap_or_else(|e| panic!("{e}"));
    let report = crate::policy::testing::run_tests(&set);
    let failed: Vec<&str> = report
        .cases
        .iter()
        .filter(|c| !c.passed)
        .map(|c| c.name.as_str())
        .collect();
    assert_eq!(failed, ["wrong"], "{}", report.render());
    let e = errs("route r { default use model }\ntest \"t\" {\n  request { model = \"gpt-4o\" }\n  expect hold off_peek\n}\n");
    assert!(
        e.contains("E0801") && e.contains("did you mean `off_peak`?"),
        "{e}"
    );
    let e = errs("route r { default use model }\ntest \"t\" {\n  request { model = \"gpt-4o\", off_peak = 1 }\n  expect rule default\n}\n");
    assert!(
        e.contains("E0801") && e.contains("`true` or `false`"),
        "{e}"
    );
    let e = errs("route r when request.off_peak > 1 { default use model }\n");
    has(&e, "E0301", "t.policy:1:14");
}

#[test]
fn a_test_with_hour_99_a_second_seed_or_an_endpoint_twice_was_silently_changed() {
    let e = errs("route r { default use model }\ntest \"t\" {\n  request { model = \"gpt-4o\", hour = 99, weekday = 0 }\n  stats { \"openai/gpt-4o\" { health = 0.5 } \"openai/gpt-4o\" { latency_ewma_ms = 3 } }\n  seed 1\n  seed 2\n  expect rule default\n}");
    has(&e, "E0801", "t.policy:3:38");
    assert!(e.contains("`hour` is 0 to 23"), "{e}");
    has(&e, "E0801", "t.policy:3:52");
    assert!(e.contains("`weekday` is 1 (Monday) to 7 (Sunday)"), "{e}");
    has(&e, "E0801", "t.policy:4:44");
    assert!(e.contains("given twice"), "{e}");
    has(&e, "E0801", "t.policy:6:8");
    assert!(e.contains("only one `seed`"), "{e}");
}

/// "`<` cannot order a string values": the singular type name with its article
/// went into sentences about several values (also "`+` needs numbers, but these
/// are a string").
#[test]
fn type_errors_about_several_values_said_a_string_values() {
    let order = |cond: &str| errs(&format!("route r when {cond} {{ default use model }}"));
    let e = order("request.model < \"a\"");
    assert!(
        e.contains("`<` cannot order strings; use `==` or `!=`"),
        "{e}"
    );
    let e = order("request.stream >= false");
    assert!(e.contains("`>=` cannot order booleans;"), "{e}");
    let e = order("request.model + \"a\" == \"b\"");
    assert!(
        e.contains("`+` needs numbers, but these are strings"),
        "{e}"
    );
    let e = order("max(request.model, \"a\") == \"b\"");
    assert!(
        e.contains("`max` needs numbers, but these are strings"),
        "{e}"
    );
    assert!(
        !e.contains(" a string values") && !e.contains("are a "),
        "{e}"
    );
}
