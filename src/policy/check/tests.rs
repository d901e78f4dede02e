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
