use super::*;
use crate::policy::jit::engine::self_check;
use crate::policy::{parse_and_check, CompiledPolicySet, Registry, RequestFeatures, SourceMap};

const STRATEGY: &str =
    "strategy s(beta = 0.0) {\n  score = endpoint.latency_ewma_ms + beta\n  pick min\n}\n";

const ROUTES: &str = r#"route a priority 10 when request.model == "gpt-4o-mini" {
  default use "gpt-4o-mini"
}
route b when request.model == "gpt-4o" {
  default use model via s
}
route c {
  default use model
}
"#;

const TESTS: &str = r#"test "t_a" {
  request { model = "gpt-4o-mini" }
  expect route a
}
test "t_b" {
  request { model = "gpt-4o" }
  stats { "azure/gpt-4o" { latency_ewma_ms = 100 } }
  expect route b
  expect endpoint "openai/gpt-4o"
}
test "t_c" {
  request { model = "claude-sonnet" }
  expect route c
}
test "t_s" {
  request { model = "gpt-4o" }
  sample 100 by api_key
  expect share route b = 100% within 0%
}
"#;

fn compiled(strategy: &str, routes: &str, tests: &str, reg: &Registry) -> CompiledPolicySet {
    let mut src = SourceMap::new();
    src.add("s.policy", strategy);
    src.add("routes.policy", routes);
    src.add("tests.policy", tests);
    let set = parse_and_check(&src, reg).unwrap_or_else(|d| panic!("{d:?}"));
    CompiledPolicySet::compile(set)
}

/// Runs the self-check of the set after `previous`; returns (passed, reused, results).
fn check(c: &CompiledPolicySet, previous: Option<&TestResults>) -> (usize, usize, TestResults) {
    let (report, results) = self_check(c, None, previous);
    assert_eq!(report.failed, 0, "{}", report.render());
    (report.passed, report.reused, results)
}

#[test]
fn an_unchanged_set_reuses_every_test_and_a_first_run_none() {
    let reg = Registry::example();
    let c = compiled(STRATEGY, ROUTES, TESTS, &reg);
    let (passed, reused, first) = check(&c, None);
    assert_eq!((passed, reused), (4, 0));
    assert_eq!(first.len(), 4);
    let again = compiled(STRATEGY, ROUTES, TESTS, &reg);
    let (passed, reused, _) = check(&again, Some(&first));
    assert_eq!((passed, reused), (4, 4));
}

#[test]
fn only_tests_that_reached_an_edited_route_run_again() {
    let reg = Registry::example();
    let (_, _, first) = check(&compiled(STRATEGY, ROUTES, TESTS, &reg), None);
    // Route c is the last: only t_c reached it.
    let edited = ROUTES.replace(
        "route c {\n  default use model",
        "route c {\n  rule x when request.stream { use model }\n  default use model",
    );
    let (_, reused, _) = check(&compiled(STRATEGY, &edited, TESTS, &reg), Some(&first));
    assert_eq!(reused, 3);
    // Route a comes first: every test's requests were tried against its condition.
    let edited = ROUTES.replace(
        "\"gpt-4o-mini\" {",
        "\"gpt-4o-mini\" and not request.tools {",
    );
    let (_, reused, _) = check(&compiled(STRATEGY, &edited, TESTS, &reg), Some(&first));
    assert_eq!(reused, 0);
    // An edit of a's rules: only t_a's request was taken by a; the others were
    // passed over on its condition, which is unchanged.
    let edited = ROUTES.replace(
        "  default use \"gpt-4o-mini\"",
        "  rule y when request.stream { use \"gpt-4o-mini\" }\n  default use \"gpt-4o-mini\"",
    );
    let (_, reused, _) = check(&compiled(STRATEGY, &edited, TESTS, &reg), Some(&first));
    assert_eq!(reused, 3);
    // A route inserted after a and before b: t_a keeps its inputs.
    let edited = format!(
        "{ROUTES}route z priority 5 when request.model == \"smollm\" {{\n  default use model\n}}\n"
    );
    let (_, reused, _) = check(&compiled(STRATEGY, &edited, TESTS, &reg), Some(&first));
    assert_eq!(reused, 1);
}

#[test]
fn an_edited_strategy_test_or_registry_runs_its_tests_again() {
    let reg = Registry::example();
    let (_, _, first) = check(&compiled(STRATEGY, ROUTES, TESTS, &reg), None);
    // Strategy s is used by route b, which took t_b's and t_s's requests; t_c's went
    // past b (which ran no strategy for them) to c.
    let strategy = STRATEGY.replace("beta = 0.0", "beta = 1.0");
    let (_, reused, _) = check(&compiled(&strategy, ROUTES, TESTS, &reg), Some(&first));
    assert_eq!(
        reused, 2,
        "t_a and t_c: no route using s took their requests"
    );
    // A changed test is a new test.
    let tests = TESTS.replace("expect route c", "expect route c\n  expect rule default");
    let (_, reused, _) = check(&compiled(STRATEGY, ROUTES, &tests, &reg), Some(&first));
    assert_eq!(reused, 3);
    // Another registry: nothing is reused.
    let mut other = reg.clone();
    other.models[0].endpoints[1].priority = 3;
    let (_, reused, _) = check(&compiled(STRATEGY, ROUTES, TESTS, &other), Some(&first));
    assert_eq!(reused, 0);
}

#[test]
fn a_reused_test_whose_compiled_decisions_differ_runs_again_in_full() {
    let reg = Registry::example();
    let c = compiled(STRATEGY, ROUTES, TESTS, &reg);
    let (_, _, first) = check(&c, None);
    let set = c.checked();
    let full = |r: &RequestFeatures, s: &crate::policy::StatsSnapshot, seed: u64| {
        Ok(crate::policy::interp::decide(set, r, s, seed))
    };
    // A "compiled" engine that disagrees on every decision's priority.
    let wrong = |r: &RequestFeatures, s: &crate::policy::StatsSnapshot, seed: u64| {
        let mut d = crate::policy::interp::decide(set, r, s, seed);
        d.priority = crate::policy::ast::PriorityLevel::Critical;
        Ok(d)
    };
    let (report, _) = run_tests_parallel(set, &full, &wrong, None, Some(&first), 2);
    assert_eq!(
        (report.passed, report.reused),
        (4, 0),
        "{}",
        report.render()
    );
    // A full run that fails is reported as usual.
    let failing = |_: &RequestFeatures, _: &crate::policy::StatsSnapshot, _: u64| {
        Err("the engines disagree".to_string())
    };
    let (report, results) = run_tests_parallel(set, &failing, &wrong, None, Some(&first), 2);
    assert_eq!(report.failed, 4, "{}", report.render());
    assert!(results.is_empty(), "failures are not remembered");
    let sample = report.cases.iter().find(|c| c.name == "t_s").unwrap();
    assert!(
        sample.failures[0].contains("request 0: the engines disagree"),
        "{:?}",
        sample.failures
    );
}

#[test]
fn the_report_does_not_depend_on_the_thread_count() {
    let reg = Registry::example();
    let c = compiled(STRATEGY, ROUTES, TESTS, &reg);
    let set = c.checked();
    let decide = |r: &RequestFeatures, s: &crate::policy::StatsSnapshot, seed: u64| {
        Ok(crate::policy::interp::decide(set, r, s, seed))
    };
    let one = run_tests_parallel(set, &decide, &decide, Some(50), None, 1).0;
    let four = run_tests_parallel(set, &decide, &decide, Some(50), None, 4).0;
    assert_eq!(one, four);
    assert_eq!((one.passed, one.skipped), (3, 1), "t_s is over the budget");
}

#[test]
fn changed_declared_stats_or_engine_code_run_the_test_again() {
    let reg = Registry::example();
    let (_, _, first) = check(&compiled(STRATEGY, ROUTES, TESTS, &reg), None);
    // The statistics a test declares are part of it: t_b alone runs again.
    let tests = TESTS.replace("latency_ewma_ms = 100", "latency_ewma_ms = 5_000");
    let c = compiled(STRATEGY, ROUTES, &tests, &reg);
    let (report, results) = self_check(&c, None, Some(&first));
    assert_eq!(
        (report.passed, report.reused),
        (4, 3),
        "{}",
        report.render()
    );
    // ... and its new result is what is remembered: the old stats no longer match.
    let (_, reused, _) = check(&compiled(STRATEGY, ROUTES, TESTS, &reg), Some(&results));
    assert_eq!(reused, 3);
    // Results found by other engine code are not reused at all.
    let other = first.found_by("0.0.0+other");
    let (_, reused, _) = check(&compiled(STRATEGY, ROUTES, TESTS, &reg), Some(&other));
    assert_eq!(reused, 0);
}

#[test]
fn a_reused_test_cannot_hide_a_failure() {
    let reg = Registry::example();
    let (_, _, first) = check(&compiled(STRATEGY, ROUTES, TESTS, &reg), None);
    // The strategy now prefers the slowest endpoint: t_b's expectation fails, and
    // the failure is reported although t_b passed before.
    let strategy = STRATEGY.replace("pick min", "pick max");
    let c = compiled(&strategy, ROUTES, TESTS, &reg);
    let (report, results) = self_check(&c, None, Some(&first));
    assert_eq!(report.failed, 1, "{}", report.render());
    let failed: Vec<_> = report.cases.iter().filter(|c| !c.passed).collect();
    assert_eq!(failed[0].name, "t_b");
    assert_eq!(results.len(), 3, "a failure is not remembered");
    // Run again on the same set: the failure is found again, not taken from memory.
    let (report, _) = self_check(&c, None, Some(&results));
    assert_eq!(
        (report.failed, report.reused),
        (1, 3),
        "{}",
        report.render()
    );
}

#[test]
fn endpoint_order_in_the_registry_is_an_input_and_its_failure_is_reported() {
    // Equal priorities and weights: the built-in `priority` strategy draws by weight
    // over the endpoints in config order (with the test's seed), and the order is in
    // the registry only: reversing it changes the pick, no policy text changes.
    let mut reg = Registry::example();
    let sonnet = reg
        .models
        .iter_mut()
        .find(|m| m.name == "claude-sonnet")
        .unwrap();
    for e in &mut sonnet.endpoints {
        e.priority = 1;
    }
    let tests = format!(
        "{TESTS}test \"t_order\" {{\n  request {{ model = \"claude-sonnet\" }}\n  expect endpoint \"bedrock/claude-sonnet\"\n}}\n"
    );
    let (passed, _, first) = check(&compiled(STRATEGY, ROUTES, &tests, &reg), None);
    assert_eq!(passed, 5);
    let mut swapped = reg.clone();
    let sonnet = swapped
        .models
        .iter_mut()
        .find(|m| m.name == "claude-sonnet")
        .unwrap();
    sonnet.endpoints.reverse();
    let c = compiled(STRATEGY, ROUTES, &tests, &swapped);
    let (report, _) = self_check(&c, None, Some(&first));
    assert_eq!(
        (report.failed, report.reused),
        (1, 0),
        "{}",
        report.render()
    );
    let failed: Vec<_> = report.cases.iter().filter(|c| !c.passed).collect();
    assert_eq!(failed[0].name, "t_order");
}

/// A reused `sample` test larger than [`CHECK_REQUESTS`] is checked on every
/// stride-th request only (issue 17: save to serving), and a compiled engine that
/// differs on one of those still sends it back to a full run.
/// A reused pass of `c`'s tests (after a first full run), run twice with the
/// interpreter standing in for the JIT: once counting the requests it decides, once
/// deciding the request of api key `wrong_key` wrongly. The count and both reports.
fn reused_passes(c: &CompiledPolicySet, wrong_key: &str) -> (usize, TestReport, TestReport) {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let (_, _, first) = check(c, None);
    let set = c.checked();
    let full = |r: &RequestFeatures, s: &crate::policy::StatsSnapshot, seed: u64| {
        Ok(crate::policy::interp::decide(set, r, s, seed))
    };
    let calls = AtomicUsize::new(0);
    let counted = |r: &RequestFeatures, s: &crate::policy::StatsSnapshot, seed: u64| {
        calls.fetch_add(1, Ordering::Relaxed);
        Ok(crate::policy::interp::decide(set, r, s, seed))
    };
    let (counted_report, _) = run_tests_parallel(set, &full, &counted, None, Some(&first), 2);
    let wrong = |r: &RequestFeatures, s: &crate::policy::StatsSnapshot, seed: u64| {
        let mut d = crate::policy::interp::decide(set, r, s, seed);
        if r.api_key.as_deref() == Some(wrong_key) {
            d.priority = crate::policy::ast::PriorityLevel::Critical;
        }
        Ok(d)
    };
    let (wrong_report, _) = run_tests_parallel(set, &full, &wrong, None, Some(&first), 2);
    (calls.load(Ordering::Relaxed), counted_report, wrong_report)
}

#[test]
fn a_large_reused_sample_test_is_checked_on_a_spread_subset() {
    let reg = Registry::example();
    let tests = TESTS.replace("sample 100 by api_key", "sample 5_000 by api_key");
    let c = compiled(STRATEGY, ROUTES, &tests, &reg);
    // Wrong on request 2,005 only (a multiple of the stride).
    let (calls, report, wrong) = reused_passes(&c, "key-2005");
    assert_eq!(
        (report.passed, report.reused),
        (4, 4),
        "{}",
        report.render()
    );
    // The three one-request tests, and 1,000 of the sample's 5,000 (stride 5).
    assert_eq!(calls, 3 + 1_000);
    // The wrong decision is found.
    assert_eq!((wrong.passed, wrong.reused), (4, 3), "{}", wrong.render());
}

/// An edit of the shipped least-latency strategy ran again every test of the shipped
/// examples (114 ms of save to serving, over the 100 ms target of issue 17): its
/// test route comes first, and a test depended on the strategies of every route its
/// requests were tried against. Only the routes that took them count now.
#[test]
fn an_edited_strategy_ran_again_every_test_whose_requests_went_past_its_route() {
    let reg = Registry::example();
    // b, which uses s, is tried first; only t_b's request is taken by it.
    let routes = ROUTES.replace("route b when", "route b priority 20 when");
    let (_, _, first) = check(&compiled(STRATEGY, &routes, TESTS, &reg), None);
    let strategy = STRATEGY.replace("beta = 0.0", "beta = 2.0");
    let (passed, reused, _) = check(&compiled(&strategy, &routes, TESTS, &reg), Some(&first));
    assert_eq!((passed, reused), (4, 2), "t_a and t_c are reused");
    // An edit of the route's rules runs again the tests it took (see
    // only_tests_that_reached_an_edited_route_run_again for its condition).
    let edited = routes.replace("use model via s", "use model via s(beta = 1.0)");
    let (_, reused, _) = check(&compiled(STRATEGY, &edited, TESTS, &reg), Some(&first));
    assert_eq!(reused, 2);
}

/// Weighted round-robin as shipped (`examples/policies/builtin/`), over `a/m` (weight
/// 3) and `b/m` (weight 1), and a test of `a/m`'s share of 1,000 requests.
fn weighted(share: &str) -> CompiledPolicySet {
    weighted_sample(share, 1_000)
}

/// Weighted round-robin as shipped (`examples/policies/builtin/`).
const WRR: &str = "strategy weighted_round_robin() {\n  state served = 0.0\n  require endpoint.weight > 0\n  score = (sum(state.served) + 1) * endpoint.weight - sum(endpoint.weight) * state.served\n  pick max\n  on pick { served = state.served + 1 }\n}\n";

/// A free endpoint `id` (its provider the id's first letter) serving `model` with
/// weight `weight`.
fn endpoint(id: &str, model: &str, weight: u32) -> crate::policy::RegistryEndpoint {
    crate::policy::RegistryEndpoint {
        id: id.into(),
        provider: id[..1].into(),
        model: model.into(),
        priority: 1,
        weight,
        input_per_mtok: 0.0,
        output_per_mtok: 0.0,
        context_window: None,
    }
}

/// [`weighted`], with a sample of `n` requests.
fn weighted_sample(share: &str, n: u64) -> CompiledPolicySet {
    use crate::policy::RegistryModel;
    let reg = Registry::new(vec![RegistryModel {
        name: "mock".into(),
        endpoints: vec![endpoint("a/m", "mock-1", 3), endpoint("b/m", "mock-1", 1)],
    }]);
    let strategy = WRR;
    let routes =
        "route r when request.model == \"mock\" { default use model via weighted_round_robin }\n";
    let tests = format!(
        "test \"3:1\" {{\n  request {{ model = \"mock\" }}\n  sample {n} by api_key\n  expect share endpoint \"a/m\" = {share}\n}}\n"
    );
    compiled(strategy, routes, &tests, &reg)
}

/// Outside tester (atkB/wrr): every request of a `sample` test was decided on the
/// test's own statistics, so weighted round-robin's pick counts never grew and every
/// request went to `a/m` ("got 100.00%") while the gateway splits 3:1. The requests
/// of a sample now carry their `on pick` state from one to the next, on every engine
/// and in a reused pass.
#[test]
fn sample_ignored_strategy_state_so_weighted_round_robin_got_100_percent() {
    use crate::policy::jit::engine::{run_tests, EngineMode};
    // Smooth weighted round-robin is exact: 750 of 1,000.
    let c = weighted("75% within 0%");
    let interp = super::super::run_tests(c.checked());
    assert_eq!(
        (interp.passed, interp.failed),
        (1, 0),
        "{}",
        interp.render()
    );
    for mode in [EngineMode::Interp, EngineMode::Jit, EngineMode::Both] {
        let r = run_tests(&c, mode);
        assert_eq!((r.passed, r.failed), (1, 0), "{mode:?}: {}", r.render());
    }
    let (_, _, first) = check(&c, None);
    let (passed, reused, _) = check(&weighted("75% within 0%"), Some(&first));
    assert_eq!((passed, reused), (1, 1));
    // A wrong expectation still fails, naming the share found.
    let c = weighted("50% within 5%");
    for mode in [EngineMode::Interp, EngineMode::Jit, EngineMode::Both] {
        let r = run_tests(&c, mode);
        assert_eq!((r.passed, r.failed), (0, 1), "{mode:?}: {}", r.render());
        assert!(
            r.cases[0].failures[0].ends_with("got 75.00%"),
            "{}",
            r.render()
        );
    }
}

/// A reload of the shipped examples decided all 65,030 of their test requests again
/// (101-120 ms of a 122-135 ms save to serving, issue 17), since a reused `sample`
/// test whose requests carry strategy state was checked on every request. It is
/// checked on its first [`CHECK_REQUESTS`] requests, in order; a compiled engine
/// that differs there still sends it back to a full run.
#[test]
fn a_large_reused_sample_test_with_strategy_state_is_checked_on_its_first_requests() {
    let c = weighted_sample("75% within 0%", 5_000);
    // Wrong on the prefix's last request.
    let (calls, report, wrong) = reused_passes(&c, &format!("key-{}", CHECK_REQUESTS - 1));
    assert_eq!(
        (report.passed, report.reused),
        (1, 1),
        "{}",
        report.render()
    );
    assert_eq!(calls, CHECK_REQUESTS as usize);
    // The wrong decision is found, and the test runs again in full (and passes: the
    // full run decides on both engines of `full`).
    assert_eq!((wrong.passed, wrong.reused), (1, 0), "{}", wrong.render());
}

/// Every `sample` test of a set in which some route used an `on pick` strategy ran
/// its requests in sequence, on one thread, and was checked on its first requests
/// only: the shipped examples' weighted round-robin test route made all of their
/// 65,000 sample requests sequential. Whether a test carries state is now found by
/// its run: one whose requests no such route takes is decided in spread chunks and
/// checked on a spread subset, and one whose requests are is still decided in order.
#[test]
fn one_on_pick_strategy_in_a_set_made_every_sample_test_sequential() {
    use crate::policy::RegistryModel;
    let reg = Registry::new(vec![
        RegistryModel {
            name: "mock".into(),
            endpoints: vec![endpoint("a/m", "mock-1", 3), endpoint("b/m", "mock-1", 1)],
        },
        RegistryModel {
            name: "plain".into(),
            endpoints: vec![endpoint("a/p", "plain-1", 1)],
        },
    ]);
    let routes = "route r when request.model == \"mock\" { default use model via weighted_round_robin }\nroute p { default use model }\n";
    let tests = "test \"3:1\" {\n  request { model = \"mock\" }\n  sample 4_000 by api_key\n  expect share endpoint \"a/m\" = 75% within 0%\n}\ntest \"plain\" {\n  request { model = \"plain\" }\n  sample 5_000 by api_key\n  expect share endpoint \"a/p\" = 100% within 0%\n}\n";
    let c = compiled(WRR, routes, tests, &reg);
    // Wrong on request 2,005 of "plain" (a multiple of its stride, 5, and past the
    // first 1,000): only a check on the spread subset sees it.
    let (calls, report, wrong) = reused_passes(&c, "key-2005");
    assert_eq!(
        (report.passed, report.reused),
        (2, 2),
        "{}",
        report.render()
    );
    // The prefix of the stateful test, a spread 1,000 of the other.
    assert_eq!(calls, 2 * CHECK_REQUESTS as usize);
    assert_eq!((wrong.passed, wrong.reused), (2, 1), "{}", wrong.render());
    // The stateful test's shares are exact on every engine (its requests carried
    // their state), in a full run with any number of threads.
    for threads in [1, 2, 4] {
        let set = c.checked();
        let full = |r: &RequestFeatures, s: &crate::policy::StatsSnapshot, seed: u64| {
            Ok(crate::policy::interp::decide(set, r, s, seed))
        };
        let (r, results) = run_tests_parallel(set, &full, &full, None, None, threads);
        assert_eq!((r.passed, r.failed), (2, 0), "{threads}: {}", r.render());
        let stateful: Vec<bool> = set
            .tests
            .iter()
            .map(|t| results.passed[&xxh3_128(set.sources.slice(t.span).as_bytes())].stateful)
            .collect();
        assert_eq!(stateful, [true, false]);
    }
}
