//! JIT unit tests: the shipped policies compile and agree with the interpreter, the
//! numeric edge cases, fallback, and module accounting.

use super::engine::{decide_with, run_tests, EngineMode};
use super::*;
use crate::policy::features::{EndpointStats, StatsSnapshot};
use crate::policy::tests::{shipped, with_builtins};

fn compiled(text: &str) -> CompiledPolicySet {
    let set = with_builtins(text).unwrap_or_else(|e| panic!("{e}"));
    let c = CompiledPolicySet::compile(set);
    assert_eq!(c.engine(), Engine::Jit, "{:?}", c.fallback_reason());
    c
}

#[test]
fn shipped_policies_compile_and_their_tests_pass_on_both_engines() {
    let c = CompiledPolicySet::compile(shipped());
    assert_eq!(c.engine(), Engine::Jit, "{:?}", c.fallback_reason());
    let report = run_tests(&c, EngineMode::Both);
    assert_eq!(report.failed, 0, "{}", report.render());
    assert!(report.passed >= 15);
}

#[test]
fn shipped_policies_agree_over_many_requests() {
    let c = CompiledPolicySet::compile(shipped());
    let models = ["gpt-4o", "gpt-4o-mini", "claude-sonnet", "smollm", "nope"];
    let mut stats = StatsSnapshot::default();
    stats.endpoints.insert(
        "openai/gpt-4.1".into(),
        EndpointStats {
            health: 0.5,
            ..EndpointStats::default()
        },
    );
    for i in 0..2000u64 {
        let mut req = RequestFeatures::for_model(models[(i % 5) as usize]);
        req.input_tokens = (i * 7919) % 200_000;
        req.api_key = (i % 3 != 0).then(|| format!("key-{i}").into());
        if i % 4 == 0 {
            req.headers.insert("x-interactive".into(), "1".into());
        }
        req.priority = crate::policy::ast::PriorityLevel::ALL[(i % 4) as usize].1;
        let s = if i % 2 == 0 {
            &stats
        } else {
            &StatsSnapshot::default()
        };
        if let Err(m) = decide_with(&c, EngineMode::Both, &req, s, i) {
            panic!("request {i}: {m}");
        }
    }
}

#[test]
fn integer_edge_cases_match() {
    let cases = [
        "request.input_tokens / 0 == 0",
        "request.input_tokens % 0 == 0",
        "(0 - 9223372036854775807 - 1) / -1 == 9223372036854775807",
        "(0 - 9223372036854775807 - 1) % -1 == 0",
        "9223372036854775807 + request.input_tokens > 0",
        "(0 - 9223372036854775807) - request.input_tokens - 5 < 0",
        "request.input_tokens * 9223372036854775807 >= 0",
        "-(0 - 9223372036854775807 - 1) == 9223372036854775807",
        "abs(0 - 9223372036854775807 - 1) == 9223372036854775807",
        "-7 / 2 == -3 and -7 % 2 == -1",
        "min(request.input_tokens, 3) <= 3 and max(request.input_tokens, 3) >= 3",
    ];
    for (k, cond) in cases.iter().enumerate() {
        for (t, (a, b)) in both_engines_over_input_tokens(cond) {
            assert_eq!(a, b, "case {k}: {cond} with {t}");
        }
    }
}

/// The decisions of both engines (interpreter, JIT) for a route taken when `cond`
/// holds, at each of a few `request.input_tokens` values, with the value.
fn both_engines_over_input_tokens(
    cond: &str,
) -> Vec<(u64, (crate::policy::Decision, crate::policy::Decision))> {
    let text = format!("route r when {cond} {{ default use \"gpt-4o\" }}");
    let c = compiled(&text);
    [0u64, 1, 5, u64::MAX]
        .into_iter()
        .map(|t| {
            let mut req = RequestFeatures::for_model("gpt-4o");
            req.input_tokens = t;
            let a = c.decide_on(Engine::Interp, &req, &StatsSnapshot::default(), 0);
            let b = c.decide_on(Engine::Jit, &req, &StatsSnapshot::default(), 0);
            (t, (a, b))
        })
        .collect()
}

/// `-9223372036854775808` was refused as too large. Accepted now, it is `i64::MIN` on
/// both engines, and negating it saturates on both, as other arithmetic does.
#[test]
fn i64_min_literal_was_refused_as_too_large_engines_agree() {
    let cases = [
        ("-9223372036854775808 == 0 - 9223372036854775807 - 1", true),
        ("-9223372036854775808 < 0 - 9223372036854775807", true),
        ("-9223372036854775808 <= request.input_tokens", true),
        ("--9223372036854775808 == 9223372036854775807", true),
        ("-(-9223372036854775808) == 9223372036854775807", true),
        ("abs(-9223372036854775808) == 9223372036854775807", true),
        ("-9223372036854775808 / -1 == 9223372036854775807", true),
        ("request.input_tokens in [-9223372036854775808, 5]", false),
        ("request.input_tokens * -9223372036854775808 <= 0", true),
        ("-9223372036854775808 - request.input_tokens < 0", true),
    ];
    for (k, (cond, at_zero)) in cases.iter().enumerate() {
        for (t, (a, b)) in both_engines_over_input_tokens(cond) {
            assert_eq!(a, b, "case {k}: {cond} with {t}");
            if t == 0 {
                assert_eq!(a.route.is_some(), *at_zero, "case {k}: {cond}");
            }
        }
    }
}

#[test]
fn float_edge_cases_match() {
    let cases = [
        "request.temperature / 0.0 > 1.0",
        "0.0 / 0.0 != 0.0 / 0.0",
        "not (0.0 / 0.0 == 0.0 / 0.0)",
        "not (0.0 / 0.0 < 1.0) and not (0.0 / 0.0 >= 1.0)",
        "min(0.0 / 0.0, 1.0) == 1.0",
        "max(0.0 / 0.0, 1.0) == 1.0",
        "exp(request.temperature) > 1.5",
        "ln(request.temperature) < 0.0",
        "pow(request.temperature, 0.5) > 0.2",
        "request.temperature % 0.3 > 0.1",
        "sqrt(request.temperature - 1.0) != sqrt(request.temperature - 1.0)",
        "request.temperature in [0.5, 1.0, 2]",
        "clamp(request.temperature, 0.2, 0.8) == 0.8",
    ];
    for (k, cond) in cases.iter().enumerate() {
        let text = format!(
            "route r when has(request.temperature) and {cond} {{ default use \"gpt-4o\" }}"
        );
        let c = compiled(&text);
        for t in [
            0.0,
            -0.0,
            0.5,
            1.0,
            2.0,
            f64::INFINITY,
            f64::NAN,
            1e308,
            5e-324,
        ] {
            let mut req = RequestFeatures::for_model("gpt-4o");
            req.temperature = Some(t);
            let a = c.decide_on(Engine::Interp, &req, &StatsSnapshot::default(), 0);
            let b = c.decide_on(Engine::Jit, &req, &StatsSnapshot::default(), 0);
            assert_eq!(a, b, "case {k}: {cond} with {t}");
        }
    }
}

#[test]
fn string_atoms_and_foreign_strings_match() {
    let c = compiled(
        r#"route r when glob(request.model, "gpt-4*")
             or (has(header("x-a")) and matches(header("x-a"), "^t[0-9]+$"))
             or (has(header("x-b")) and request.model == header("x-b"))
             or (has(request.org) and starts_with(request.org, "acme")) {
             rule a when request.task in ["code", "nope"] { use "claude-sonnet" }
             default use "gpt-4o"
           }"#,
    );
    let reqs = [
        ("gpt-4o", None, None, None),
        ("unknown", Some("t12"), None, None),
        ("unknown", Some("x12"), Some("unknown"), None),
        ("zz", None, Some("zy"), Some("acme-co")),
        ("zz", None, None, Some("ac")),
    ];
    for (model, a, b, org) in reqs {
        for task in ["chat", "code"] {
            let mut req = RequestFeatures::for_model(model);
            req.task = task.into();
            req.org = org.map(Into::into);
            if let Some(a) = a {
                req.headers.insert("x-a".into(), a.into());
            }
            if let Some(b) = b {
                req.headers.insert("x-b".into(), b.into());
            }
            let r = decide_with(&c, EngineMode::Both, &req, &StatsSnapshot::default(), 3);
            assert!(r.is_ok(), "{model} {a:?} {b:?}: {r:?}");
        }
    }
}

#[test]
fn strategies_with_state_and_aggregates_match_scores_and_updates() {
    let c = compiled(
        r#"route r { default use any via exp3 }
           route s when request.model == "x" { default use any via cost_optimized }"#,
    );
    let mut stats = StatsSnapshot::default();
    for (i, id) in ["openai/gpt-4o", "azure/gpt-4o", "local/smollm"]
        .iter()
        .enumerate()
    {
        let mut e = EndpointStats::default();
        e.state
            .entry("exp3".into())
            .or_default()
            .insert("weight".into(), 0.5 + i as f64);
        e.latency_ewma_ms = 100.0 * i as f64;
        stats.endpoints.insert(id.to_string(), e);
    }
    let req = RequestFeatures::for_model("gpt-4o");
    for seed in 0..50 {
        let a = c.decide_on(Engine::Interp, &req, &stats, seed);
        let b = c.decide_on(Engine::Jit, &req, &stats, seed);
        assert!(engine::diff(&a, &b).is_none(), "{:?}", engine::diff(&a, &b));
        let call = a.call.clone().unwrap();
        let ep = a.endpoint.clone().unwrap();
        let out = Outcome {
            latency_ms: 1234.0,
            ..Outcome::default()
        };
        for ok in [true, false] {
            let u = c.on_outcome_on(Engine::Interp, &call, &req, &stats, &ep, ok, &out);
            let v = c.on_outcome_on(Engine::Jit, &call, &req, &stats, &ep, ok, &out);
            assert_eq!(u, v);
        }
        let (si, _) = c.checked().strategy("exp3").unwrap();
        let x = c.rank_on(
            Engine::Interp,
            si,
            &call.args,
            &call.candidates,
            &req,
            &stats,
            seed,
        );
        let y = c.rank_on(
            Engine::Jit,
            si,
            &call.args,
            &call.candidates,
            &req,
            &stats,
            seed,
        );
        assert_eq!(format!("{x:?}"), format!("{y:?}"));
    }
}

#[test]
fn modules_are_counted_and_freed_when_the_last_clone_drops() {
    // Other tests compile concurrently: check our own contribution via a barrier
    // free property (the count never drops below what we hold).
    let c = compiled("route r { default use \"gpt-4o\" }");
    let d = c.clone();
    assert!(live_compiled_modules() >= 1);
    drop(c);
    assert!(live_compiled_modules() >= 1, "a clone still holds the code");
    let req = RequestFeatures::for_model("gpt-4o");
    assert_eq!(
        d.decide(&req, &StatsSnapshot::default(), 0)
            .endpoint
            .as_deref(),
        Some("openai/gpt-4o")
    );
    drop(d);
}

#[test]
fn interpreted_sets_say_why() {
    let c = CompiledPolicySet::interpreted(shipped());
    assert_eq!(c.engine(), Engine::Interp);
    assert!(c.fallback_reason().is_some());
    let req = RequestFeatures::for_model("gpt-4o");
    assert_eq!(
        c.decide(&req, &StatsSnapshot::default(), 0),
        crate::policy::interp::decide(c.checked(), &req, &StatsSnapshot::default(), 0)
    );
    assert_eq!("both".parse::<EngineMode>(), Ok(EngineMode::Both));
    assert!("fast".parse::<EngineMode>().is_err());
}

#[test]
fn compiled_sets_decide_from_many_threads_and_drop_on_any_of_them() {
    let c = std::sync::Arc::new(CompiledPolicySet::compile(shipped()));
    assert_eq!(c.engine(), Engine::Jit);
    let threads: Vec<_> = (0..2)
        .map(|t| {
            let c = c.clone();
            std::thread::spawn(move || {
                for i in 0..500u64 {
                    let mut req = RequestFeatures::for_model("gpt-4o");
                    req.api_key = Some(format!("key-{t}-{i}").into());
                    req.input_tokens = i * 400;
                    let r = decide_with(&c, EngineMode::Both, &req, &StatsSnapshot::default(), i);
                    assert!(r.is_ok(), "{r:?}");
                }
            })
        })
        .collect();
    drop(c);
    for t in threads {
        assert!(t.join().is_ok());
    }
}

#[test]
fn context_window_circuit_and_fallback_on_match_the_interpreter() {
    use crate::policy::features::Circuit;
    let c = compiled(
        "strategy s(room = 1000) {\n  require endpoint.context_window == 0 or endpoint.context_window - request.input_tokens >= room\n  prefer endpoint.circuit == \"closed\" or starts_with(endpoint.circuit, \"half\")\n  score = endpoint.context_window / 1000 + if(endpoint.circuit in [\"open\"], 1, 0)\n  pick max\n}\nroute r {\n  fallback \"smollm\" -> \"claude-sonnet\" on 409, 5xx retries 1\n  default use any via s\n}\n",
    );
    let ids = [
        "openai/gpt-4o",
        "azure/gpt-4o",
        "anthropic/claude-sonnet",
        "local/smollm",
    ];
    for i in 0..400u64 {
        let mut stats = StatsSnapshot::default();
        for (k, id) in ids.iter().enumerate() {
            let x = i.wrapping_mul(2654435761).rotate_left(k as u32 * 7);
            stats.endpoints.insert(
                id.to_string(),
                EndpointStats {
                    circuit: Circuit::ALL[(x % 3) as usize],
                    context_window: match x % 4 {
                        0 => None,
                        1 => Some(0),
                        2 => Some(u64::MAX),
                        _ => Some(x % 300_000),
                    },
                    ..EndpointStats::default()
                },
            );
        }
        let mut req = RequestFeatures::for_model("gpt-4o");
        req.input_tokens = (i * 7919) % 250_000;
        let d = match decide_with(&c, EngineMode::Both, &req, &stats, i) {
            Ok(d) => d,
            Err(m) => panic!("request {i}: {m}"),
        };
        assert!(d
            .fallback_on
            .as_ref()
            .is_some_and(|on| on.matches(409) && on.matches(503) && !on.matches(400)));
    }
}

/// jit_diff seed 12757515039241277360: `-(a) * -(b)` with `b` a NaN (0 × −inf) gave a
/// NaN of one sign in the interpreter and of the other in the JIT (cranelift rewrites
/// it to `a * b`). The plans were sorted with `f64::total_cmp`, which orders NaNs by
/// sign, so under `pick min` the JIT ranked the NaN endpoint first after the pick and
/// the interpreter last. NaN scores rank last on both, for `min` and `max`, and
/// 0.0 ties -0.0 (registry order), as in the pick.
#[test]
fn nan_score_sign_bit_does_not_move_an_endpoint_up_the_plan() {
    let order = |pick: &str, score: &str, stats: &StatsSnapshot| {
        let c = compiled(&format!(
            "strategy s {{\n  score = {score}\n  pick {pick}\n}}\nroute r {{\n  default use any via s\n}}\n"
        ));
        let req = RequestFeatures::for_model("gpt-4o");
        let d = decide_with(&c, EngineMode::Both, &req, stats, 7).unwrap_or_else(|m| panic!("{m}"));
        let mut ids = vec![d.endpoint.as_deref().unwrap_or_default().to_string()];
        ids.extend(d.fallbacks().map(|s| s.endpoint.to_string()));
        ids
    };
    // openai/gpt-4o, the first in registry order, scores NaN.
    let mut stats = StatsSnapshot::default();
    stats.endpoints.insert(
        "openai/gpt-4o".into(),
        EndpointStats {
            ttft_ewma_ms: f64::NEG_INFINITY,
            ..EndpointStats::default()
        },
    );
    let nan = "-(endpoint.health) * -(endpoint.latency_ewma_ms * endpoint.ttft_ewma_ms)";
    for pick in ["min", "max"] {
        let ids = order(pick, nan, &stats);
        assert!(ids.len() > 2, "{ids:?}");
        assert_eq!(
            ids.last().map(String::as_str),
            Some("openai/gpt-4o"),
            "pick {pick}: {ids:?}"
        );
        let ids = order(pick, &format!("0.0 - ({nan})"), &stats);
        assert_eq!(
            ids.last().map(String::as_str),
            Some("openai/gpt-4o"),
            "pick {pick}: {ids:?}"
        );
    }
    // -0.0 ties 0.0: the plan keeps registry order (here after a pick of 0.0).
    let mut stats = StatsSnapshot::default();
    for (id, h) in [("azure/gpt-4o", 0.0), ("anthropic/claude-sonnet", -0.0)] {
        stats.endpoints.insert(
            id.into(),
            EndpointStats {
                health: h,
                ..EndpointStats::default()
            },
        );
    }
    let ids = order("min", "endpoint.health", &stats);
    let azure = ids.iter().position(|i| i == "azure/gpt-4o");
    let claude = ids.iter().position(|i| i == "anthropic/claude-sonnet");
    assert!(azure < claude, "{ids:?}");
}

#[test]
fn scopes_match_the_interpreter_with_and_without_the_rule_index() {
    // 40 rules keyed on scopes: past INDEX_MIN_RULES, so the rule index keys them.
    let mut text = String::from(
        "route r when request.model == \"gpt-4o\" {\n  set priority high when scope(\"vip\")\n",
    );
    for k in 0..40 {
        let cond = match k % 4 {
            0 => format!("scope(\"s{k}\")"),
            1 => format!("not scope(\"s{k}\") and scope(\"s{}\")", k - 1),
            2 => format!("scope(\"s{k}\") == request.stream"),
            _ => format!("if(scope(\"s{k}\"), request.priority == \"high\", false)"),
        };
        text.push_str(&format!("  rule r{k} when {cond} {{ use \"smollm\" }}\n"));
    }
    text.push_str("  default use model\n}\nroute other when scope(\"other\") { default use \"claude-sonnet\" }\n");
    let c = compiled(&text);
    let names: Vec<String> = (0..40)
        .map(|k| format!("s{k}"))
        .chain(["vip".into(), "other".into(), "unused".into()])
        .collect();
    for i in 0..600u64 {
        let mut req = RequestFeatures::for_model(if i % 5 == 0 { "x" } else { "gpt-4o" });
        req.stream = i % 3 == 0;
        let mut x = i.wrapping_mul(0x9e37_79b9_7f4a_7c15);
        let mut scopes = Vec::new();
        for _ in 0..(i % 4) {
            scopes.push(names[(x % names.len() as u64) as usize].clone());
            x = x.rotate_left(17).wrapping_mul(31);
        }
        req.set_scopes(scopes);
        if let Err(m) = decide_with(&c, EngineMode::Both, &req, &StatsSnapshot::default(), i) {
            panic!("request {i} {:?}: {m}", req.scopes);
        }
    }
}

#[test]
fn budget_remaining_matches_the_interpreter_including_the_no_budget_sentinel() {
    let c = compiled(concat!(
        "route r when request.model == \"gpt-4o\" {\n",
        "  set priority low when request.budget_remaining <= 1.0\n",
        "  rule near when request.budget_remaining < 0.5 and request.budget_remaining * 2.0 >= 0.0 { use \"smollm\" }\n",
        "  rule far when request.budget_remaining > 1e17 { use \"claude-sonnet\" }\n",
        "  default use model\n",
        "}\n",
    ));
    let values = [
        crate::policy::NO_BUDGET,
        0.0,
        -0.0,
        0.25,
        0.5,
        1.0,
        3.0,
        f64::NAN,
        f64::INFINITY,
    ];
    for (i, v) in values.into_iter().enumerate() {
        let mut req = RequestFeatures::for_model("gpt-4o");
        req.budget_remaining = v;
        if let Err(m) = decide_with(&c, EngineMode::Both, &req, &StatsSnapshot::default(), 0) {
            panic!("budget_remaining {v}: {m}");
        }
        let d = decide_with(
            &c,
            EngineMode::Jit,
            &req,
            &StatsSnapshot::default(),
            i as u64,
        )
        .unwrap();
        let want = match v {
            v if v < 0.5 => "near",
            v if v > 1e17 => "far",
            _ => "default",
        };
        assert_eq!(d.rule.as_deref(), Some(want), "budget_remaining {v}");
    }
}

#[test]
fn hold_off_peak_and_request_off_peak_match_the_interpreter() {
    // Route-wide hold, a held rule, continue rules that hold (tracked at run time),
    // and an indexed route (40 keyed rules) whose continue rules hold.
    let mut text = String::from(concat!(
        "route all_held when request.model == \"smollm\" {\n",
        "  hold off_peak\n",
        "  rule mark when request.tools {\n    hold off_peak\n    continue\n  }\n",
        "  rule s when request.stream { use model }\n",
        "  default use model\n",
        "}\n",
        "route r when request.model == \"gpt-4o\" {\n",
        "  set priority low when request.off_peak\n",
        "  rule mark when request.tools and not request.off_peak {\n    hold off_peak\n    continue\n  }\n",
        "  rule s when request.stream {\n    hold off_peak\n    use \"smollm\"\n  }\n",
        "  rule low when request.priority == \"low\" { reject 429 \"later\" }\n",
        "  default use model\n",
        "}\n",
        "route wide when request.model == \"claude-sonnet\" {\n",
    ));
    for k in 0..40 {
        let body = if k % 3 == 0 {
            "hold off_peak\n    continue"
        } else if k % 3 == 1 {
            "hold off_peak\n    use \"smollm\""
        } else {
            "use \"gpt-4o\""
        };
        text.push_str(&format!(
            "  rule r{k} when has(header(\"x-team\")) and header(\"x-team\") == \"t{k}\" {{\n    {body}\n  }}\n"
        ));
    }
    text.push_str("  default use model\n}\n");
    let c = compiled(&text);
    let models = ["smollm", "gpt-4o", "claude-sonnet", "nope"];
    let (mut held, mut free) = (0, 0);
    for i in 0..1200u64 {
        let mut req = RequestFeatures::for_model(models[(i % 4) as usize]);
        req.stream = i % 3 == 0;
        req.tools = i % 5 < 2;
        req.off_peak = i % 7 < 3;
        req.headers
            .insert("x-team".into(), format!("t{}", (i / 4) % 45));
        match decide_with(&c, EngineMode::Both, &req, &StatsSnapshot::default(), i) {
            Ok(d) if d.hold_off_peak => held += 1,
            Ok(_) => free += 1,
            Err(m) => panic!("request {i}: {m}"),
        }
    }
    assert!(held > 100 && free > 100, "held {held}, free {free}");
}

#[test]
fn on_pick_updates_match_when_the_ranking_aggregates_are_reused_or_recomputed() {
    // Issue 17: an `on pick` block reuses the ranking's aggregates when every
    // candidate was scored and no aggregate reads `score` or `probability`
    // (`picks_sum`); otherwise it evaluates them again over the scored candidates
    // (`picks_scored`, and `picks_some`, whose filter drops a candidate). The state
    // updates must be the interpreter's in every case.
    let c = compiled(
        r#"strategy picks_sum() {
             state n = 0.0
             score = endpoint.weight - state.n
             pick max
             on pick { n = state.n + sum(state.n) / (count() + 1) + score }
           }
           strategy picks_scored() {
             state n = 0.0
             score = endpoint.weight - state.n
             pick max
             on pick { n = state.n + sum(score * probability) + probability }
           }
           strategy picks_some() {
             state n = 0.0
             require state.n < 2.5
             score = endpoint.weight - state.n
             pick max
             on pick { n = state.n + sum(state.n) + 1 }
           }
           route a when request.model == "gpt-4o" { default use any via picks_sum }
           route b when request.model == "claude-sonnet" { default use any via picks_scored }
           route c { default use any via picks_some }"#,
    );
    for model in ["gpt-4o", "claude-sonnet", "smollm"] {
        let req = RequestFeatures::for_model(model);
        let mut stats = StatsSnapshot::default();
        let mut updates = 0;
        for step in 0..12u64 {
            let a = c.decide_on(Engine::Interp, &req, &stats, step);
            let b = c.decide_on(Engine::Jit, &req, &stats, step);
            assert!(
                engine::diff(&a, &b).is_none(),
                "{model} step {step}: {:?}",
                engine::diff(&a, &b)
            );
            assert!(a.state_updates.len() <= 1, "{model}: one pick, one update");
            updates += a.state_updates.len();
            for u in &a.state_updates {
                stats.apply(u);
            }
        }
        assert!(updates >= 3, "{model}: {updates} picks");
    }
}

/// The request fill looks each request string up once however many cells read it
/// (`has()`, its value, string tests); every combination of present, absent, equal
/// and foreign values must decide as the interpreter does.
#[test]
fn request_strings_read_by_several_cells_agree_with_the_interpreter() {
    let c = compiled(
        r#"route r when request.model == "gpt-4o" {
  rule a when has(header("X-Team")) and header("x-team") == "red" {
    use endpoint "azure/gpt-4o"
  }
  rule b when has(header("x-team")) and starts_with(header("x-team"), "bl") and has(metadata("tier")) and has(request.api_key) and metadata("tier") == request.api_key {
    use endpoint "azure/gpt-4o"
  }
  rule c when has(request.api_key) and has(request.org) and glob(request.org, "acme*") and not has(metadata("tier")) {
    use endpoint "azure/gpt-4o"
  }
  rule d when has(metadata("tier")) and has(header("X-TEAM")) and metadata("tier") == header("x-team") and has(request.org) {
    use endpoint "azure/gpt-4o"
  }
  default use endpoint "openai/gpt-4o"
}"#,
    );
    let values = [None, Some("red"), Some("blue"), Some("acme-1"), Some("")];
    let mut rules_taken = std::collections::BTreeSet::new();
    for (i, team) in values.iter().enumerate() {
        for tier in values {
            for key in values {
                for org in values {
                    let mut req = RequestFeatures::for_model("gpt-4o");
                    if let Some(t) = team {
                        req.headers.insert("x-team".into(), (*t).into());
                    }
                    if let Some(t) = tier {
                        req.metadata.insert("tier".into(), t.into());
                    }
                    req.api_key = key.map(Into::into);
                    req.org = org.map(Into::into);
                    let a = c.decide_on(Engine::Interp, &req, &StatsSnapshot::default(), 0);
                    let b = c.decide_on(Engine::Jit, &req, &StatsSnapshot::default(), 0);
                    assert_eq!(a, b, "team {team:?} tier {tier:?} key {key:?} org {org:?}");
                    rules_taken.insert(a.rule.as_deref().map(str::to_string));
                }
            }
        }
        assert!(i < values.len());
    }
    // Every rule was taken by some request: the cases reach each cell's reading.
    assert_eq!(rules_taken.len(), 5, "{rules_taken:?}");
}

/// An aggregate whose argument is one endpoint cell is read as a column
/// (`AggColumn`), which a change to the lowering could lose silently (the decisions
/// would still agree, only slower): weighted round-robin's two sums are columns, a
/// float one (`state.served`) and an integer one (`endpoint.weight`); an argument
/// that computes anything is not.
#[test]
fn aggregates_over_one_endpoint_cell_are_read_as_columns() {
    let set = with_builtins(
        "strategy spread() {\n  state load = 0.0\n  score = sum(state.load + 1.0) - state.load\n  pick max\n  on pick { load = state.load + 1 }\n}\nroute spread_test priority 1000 when has(metadata(\"spread\")) {\n  default use \"gpt-4o\" via spread\n}\n",
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let code = compile::compile(&set, JitOptions::default()).unwrap();
    let columns = |name: &str| -> Vec<Option<compile::AggColumn>> {
        let si = set.strategies.iter().position(|s| s.name == name).unwrap() as u32;
        let inst = code.instances.iter().find(|i| i.strategy == si);
        inst.map(|i| i.aggs.iter().map(|a| a.3).collect())
            .unwrap_or_default()
    };
    let wrr = columns("weighted_round_robin");
    assert_eq!(wrr.len(), 2, "{wrr:?}");
    assert!(wrr.iter().all(Option::is_some), "{wrr:?}");
    assert_eq!(
        wrr.iter().flatten().filter(|c| c.int).count(),
        1,
        "endpoint.weight is an integer cell: {wrr:?}"
    );
    assert_eq!(columns("spread"), vec![None]);
}

/// The JIT writes a ranking without a fallback chain straight into the plan, and a
/// strategy without `on success` / `on failure` records no candidates: every
/// built-in strategy and a custom one with outcome updates, each with and without a
/// fallback chain, in a split, over `any`, over no available endpoint and for an
/// unknown model, decide, rank and update alike on both engines.
#[test]
fn every_strategy_agrees_with_and_without_a_fallback_chain_in_splits_and_over_empty_sets() {
    let builtins = [
        "adaptive",
        "cost_optimized",
        "exp3",
        "least_latency",
        "multi_objective",
        "quality_first",
        "weighted_round_robin",
    ];
    let reg = crate::policy::Registry::example();
    let ids: Vec<String> = reg.endpoints().map(|e| e.endpoint.id.clone()).collect();
    let mut snapshots = vec![StatsSnapshot::default()];
    let mut varied = StatsSnapshot::default();
    for (i, id) in ids.iter().enumerate() {
        let mut e = EndpointStats {
            health: 0.2 + 0.1 * i as f64,
            latency_ewma_ms: 50.0 * (i % 3) as f64,
            available: i % 4 != 1,
            ..EndpointStats::default()
        };
        for (s, slot) in [
            ("tally", "wins"),
            ("exp3", "log_weight"),
            ("weighted_round_robin", "served"),
        ] {
            e.state
                .entry(s.into())
                .or_default()
                .insert(slot.into(), (i % 3) as f64);
        }
        varied.endpoints.insert(id.clone(), e);
    }
    snapshots.push(varied);
    let mut none_available = StatsSnapshot::default();
    for id in &ids {
        let e = EndpointStats {
            available: false,
            ..EndpointStats::default()
        };
        none_available.endpoints.insert(id.clone(), e);
    }
    snapshots.push(none_available);
    let models = [
        "gpt-4o",
        "gpt-4o-mini",
        "claude-sonnet",
        "smollm",
        "mock",
        "nope",
    ];
    // Decisions by shape: split (1), fallbacks (2), rejected 404 (4) or 503 (8).
    let mut shapes = [0u32; 12];
    for name in builtins {
        let c = compiled(&format!(
            r#"strategy tally(bonus = 1.0) {{
  state wins = 1.0
  score = state.wins + bonus
  pick max
  on success {{ wins = state.wins + 1.0 }}
  on failure {{ wins = state.wins * 0.5 }}
}}
route plain when request.model == "gpt-4o" {{ default use model via {name} }}
route chained when request.model == "gpt-4o-mini" {{
  fallback "claude-sonnet" -> "smollm" retries 1
  default use "gpt-4o" via {name}
}}
route split when request.model == "claude-sonnet" {{
  default split by api_key {{ 50% -> use any via {name} 50% -> use "gpt-4o" via tally }}
}}
route tallied when request.model == "smollm" {{
  rule chained when request.input_tokens > 100 {{ fallback "gpt-4o" retries 1  use any via tally }}
  default use any via tally
}}
"#
        ));
        for (k, stats) in snapshots.iter().enumerate() {
            let available: Vec<usize> = reg
                .endpoints()
                .filter(|e| {
                    crate::policy::features::StatsSource::available(stats, e.index, &e.endpoint.id)
                })
                .map(|e| e.index)
                .collect();
            for i in 0..120u64 {
                let mut req = RequestFeatures::for_model(models[(i % 6) as usize]);
                req.api_key = Some(format!("key-{i}").into());
                req.input_tokens = (i * 37) % 300;
                let d = decide_with(&c, EngineMode::Both, &req, stats, i)
                    .unwrap_or_else(|m| panic!("{name}, stats {k}, request {i}: {m}"));
                // The JIT decided itself: `decide_on` would hand a run it gives up
                // on to the interpreter, and the comparison would be with itself.
                let code = c.code.as_ref().unwrap();
                let mut own = Decision::blank(req.priority, c.set.names.endpoints());
                let mut run = run::JRun::new(&c.set, code, &req, stats, i);
                assert!(
                    run.decide_into(&mut own).is_some(),
                    "{name}, stats {k}, request {i}"
                );
                shapes[usize::from(d.split.is_some())
                    + 2 * usize::from(d.fallbacks().len() > 0)
                    + 4 * d
                        .reject
                        .as_ref()
                        .map_or(0, |r| if r.status == 404 { 1 } else { 2 })] += 1;
                let Some(call) = d.call.as_ref() else {
                    continue;
                };
                let Some(si) = call.strategy else { continue };
                let x = c.rank_on(Engine::Interp, si, &call.args, &available, &req, stats, i);
                let y = c.rank_on(Engine::Jit, si, &call.args, &available, &req, stats, i);
                assert_eq!(
                    format!("{x:?}"),
                    format!("{y:?}"),
                    "{name}, stats {k}, request {i}"
                );
                let Some(ep) = d.endpoint.as_deref() else {
                    continue;
                };
                let out = Outcome {
                    latency_ms: 250.0,
                    ..Outcome::default()
                };
                for ok in [true, false] {
                    let u = c.on_outcome_on(Engine::Interp, call, &req, stats, ep, ok, &out);
                    let v = c.on_outcome_on(Engine::Jit, call, &req, stats, ep, ok, &out);
                    assert_eq!(u, v, "{name}, stats {k}, request {i}");
                }
            }
        }
    }
    for shape in [0, 1, 2, 3, 4, 8, 9] {
        assert!(
            shapes[shape] > 0,
            "no decision of shape {shape}: {shapes:?}"
        );
    }
}
