//! Differential test: random well-typed policy sets, random requests and endpoint
//! snapshots; the JIT and the interpreter must give identical decisions, identical
//! strategy rankings and scores, and identical outcome updates. Floats compare
//! bitwise, except that all NaNs are equal (`engine::same_f64`).
//!
//! Size: `JIT_DIFF_POLICIES` policy sets (default 400) × `JIT_DIFF_REQUESTS` requests
//! each (default 250) = 100,000 cases by default. Each policy is generated, checked
//! and compiled once; its requests are decided on both engines.
//!
//! Replay: `JIT_DIFF_SEED=<seed>` runs only the policy set of that seed (the
//! "minimal failing input" a failure prints), deterministically.

mod gen;

use std::sync::atomic::{AtomicU64, Ordering};

use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};

use switchyard::policy::engine::{decide_with, same_f64, EngineMode};
use switchyard::policy::features::StatsSource as _;
use switchyard::policy::{
    parse_and_check, CompiledPolicySet, Engine, JitOptions, Registry, SourceMap,
};

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// What one test run compared.
#[derive(Default)]
struct Counters {
    cases: AtomicU64,
    policies: AtomicU64,
    invalid: AtomicU64,
    scored: AtomicU64,
    /// Candidates whose scores and probabilities the rankings compared.
    rows: AtomicU64,
}

/// One generated set decided on both engines for `requests` requests. Routes have
/// up to `max_rules` rules; odd seeds compile with every route rule-indexed
/// (`index_min_rules: 0`), even seeds with the default options, so both the plain
/// rule walk and the indexed one are compared with the interpreter.
fn one_policy(
    seed: u64,
    requests: u64,
    max_rules: usize,
    n: &Counters,
) -> Result<(), TestCaseError> {
    // Every fourth set is an expression probe (see `gen::probe_policy`).
    let text = if seed.is_multiple_of(4) {
        gen::probe_policy(seed)
    } else {
        gen::policy(seed, max_rules)
    };
    let mut sources = SourceMap::new();
    sources.add("gen.policy", text.clone());
    let registry = Registry::example();
    let set = match parse_and_check(&sources, &registry) {
        Ok(s) => s,
        Err(d) => {
            n.invalid.fetch_add(1, Ordering::Relaxed);
            if std::env::var("JIT_DIFF_SHOW_INVALID").is_ok() {
                eprintln!(
                    "{}\n{}",
                    text,
                    switchyard::policy::diagnostic::render_all(&d, &sources)
                );
            }
            return Ok(());
        }
    };
    n.policies.fetch_add(1, Ordering::Relaxed);
    let opts = if seed % 2 == 1 {
        JitOptions { index_min_rules: 0 }
    } else {
        JitOptions::default()
    };
    let c = CompiledPolicySet::compile_with(std::sync::Arc::new(set), opts);
    prop_assert_eq!(
        c.engine(),
        Engine::Jit,
        "did not compile: {:?}\n{}",
        c.fallback_reason(),
        text
    );
    let mut r = gen::Rng::new(seed ^ 0x5eed);
    for i in 0..requests {
        let req = gen::request(&mut r);
        let stats = gen::stats(&mut r);
        let dseed = r.u64();
        let d = decide_with(&c, EngineMode::Both, &req, &stats, dseed).map_err(|m| {
            TestCaseError::fail(format!("request {i}: {m}\n{req:?}\n{stats:?}\n{text}"))
        })?;
        n.cases.fetch_add(1, Ordering::Relaxed);
        let Some(call) = d.call.as_ref().filter(|c| c.strategy.is_some()) else {
            continue;
        };
        let si = call.strategy.unwrap_or(0);
        // A strategy without `on success` / `on failure` records no candidates (the
        // gateway reads them only for those): rank the registry's available
        // endpoints then, the candidates of `use any`.
        let available: Vec<usize>;
        let cands = if call.candidates.is_empty() {
            available = registry
                .endpoints()
                .filter(|e| stats.available(e.index, &e.endpoint.id))
                .map(|e| e.index)
                .collect();
            &available
        } else {
            &call.candidates
        };
        let a = c.rank_on(Engine::Interp, si, &call.args, cands, &req, &stats, dseed);
        let b = c.rank_on(Engine::Jit, si, &call.args, cands, &req, &stats, dseed);
        let same = match (&a, &b) {
            (Some(x), Some(y)) => {
                x.len() == y.len()
                    && x.iter()
                        .zip(y)
                        .all(|(p, q)| p.0 == q.0 && same_f64(p.1, q.1) && same_f64(p.2, q.2))
            }
            (None, None) => true,
            _ => false,
        };
        n.rows
            .fetch_add(a.as_ref().map_or(0, |v| v.len() as u64), Ordering::Relaxed);
        prop_assert!(
            same,
            "ranking differs for request {}:\n{:?}\n{:?}\n{}",
            i,
            a,
            b,
            text
        );
        n.scored.fetch_add(1, Ordering::Relaxed);
        if let Some(ep) = d.endpoint.as_deref() {
            let out = gen::outcome(&mut r);
            for ok in [true, false] {
                let u = c.on_outcome_on(Engine::Interp, call, &req, &stats, ep, ok, &out);
                let v = c.on_outcome_on(Engine::Jit, call, &req, &stats, ep, ok, &out);
                let same = match (&u, &v) {
                    (Some(x), Some(y)) => {
                        x.endpoint == y.endpoint
                            && x.slots.len() == y.slots.len()
                            && x.slots
                                .iter()
                                .zip(&y.slots)
                                .all(|(p, q)| p.0 == q.0 && same_f64(*p.1, *q.1))
                    }
                    (None, None) => true,
                    _ => false,
                };
                prop_assert!(
                    same,
                    "outcome update differs ({}): {:?} vs {:?}\n{}",
                    ok,
                    u,
                    v,
                    text
                );
            }
        }
    }
    Ok(())
}

fn run(label: &str, policies: u64, requests: u64, max_rules: usize) {
    let n = Counters::default();
    // `JIT_DIFF_SEED=<u64>` replays one policy set (the seed a failure reports as
    // "minimal failing input") instead of random ones.
    if let Some(seed) = std::env::var("JIT_DIFF_SEED")
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
    {
        if let Err(e) = one_policy(seed, requests, max_rules, &n) {
            panic!("seed {seed}: {e}");
        }
        eprintln!(
            "jit differential ({label}): seed {seed}, {} decisions compared",
            n.cases.load(Ordering::Relaxed)
        );
        return;
    }
    let start = std::time::Instant::now();
    let mut runner = TestRunner::new(Config {
        cases: policies as u32,
        failure_persistence: None,
        ..Config::default()
    });
    let result = runner.run(&any::<u64>(), |seed| {
        one_policy(seed, requests, max_rules, &n)
    });
    let (cases, valid, invalid) = (
        n.cases.load(Ordering::Relaxed),
        n.policies.load(Ordering::Relaxed),
        n.invalid.load(Ordering::Relaxed),
    );
    eprintln!(
        "jit differential ({label}): {cases} decisions compared over {valid} policy sets ({invalid} generated sets rejected by the checker), {} rankings and their outcome updates, in {:.1?}",
        n.scored.load(Ordering::Relaxed),
        start.elapsed()
    );
    if let Err(e) = result {
        panic!("{e}");
    }
    assert!(
        invalid * 5 <= valid + invalid,
        "the generator makes too many ill-typed sets: {invalid} of {}",
        valid + invalid
    );
}

#[test]
fn jit_and_interpreter_agree_on_random_policies() {
    run(
        "up to 8 rules per route",
        env("JIT_DIFF_POLICIES", 400),
        env("JIT_DIFF_REQUESTS", 250),
        9,
    );
}

/// Long routes (up to 150 rules, so several 64-rule mask words) with the rule index
/// on for odd seeds: skipped groups and skipped rules must not change a decision.
#[test]
fn jit_and_interpreter_agree_on_long_indexed_routes() {
    run(
        "up to 150 rules per route",
        env("JIT_DIFF_LONG_POLICIES", 40),
        env("JIT_DIFF_LONG_REQUESTS", 250),
        151,
    );
}

/// Found by attack (2026-12-06): since a strategy without `on success` / `on failure`
/// records no candidates in its call, the rankings were compared over an empty
/// list for such strategies, among them all three of the expression probes, whose
/// purpose is to compare scores bitwise: the comparison passed having compared
/// nothing.
#[test]
fn probe_rankings_compared_an_empty_candidate_list() {
    let n = Counters::default();
    for seed in (0..16u64).map(|k| k * 4) {
        if let Err(e) = one_policy(seed, 40, 1, &n) {
            panic!("seed {seed}: {e}");
        }
    }
    let (scored, rows) = (
        n.scored.load(Ordering::Relaxed),
        n.rows.load(Ordering::Relaxed),
    );
    assert!(scored > 0, "no ranking compared");
    assert!(
        rows >= scored,
        "{rows} candidates compared over {scored} rankings"
    );
}
