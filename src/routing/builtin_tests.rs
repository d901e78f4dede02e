//! The built-in strategies (`examples/policies/builtin/`, as embedded) behave as their headers
//! say: seeded randomness, statistical bounds, no timing.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use super::policy::{embeddable, BUILTIN};
use crate::policy::interp::{StateUpdate, TraceEvent};
use crate::policy::{
    decide, explain, on_outcome, parse_and_check, CheckedPolicySet, Outcome, Registry,
    RegistryEndpoint, RegistryModel, RequestFeatures, SourceMap, StatsSnapshot,
};
use crate::stats::StatsStore;

/// Model `m` with endpoints `(id, weight, USD per 1M in, USD per 1M out)`.
fn registry(eps: &[(&str, u32, f64, f64)]) -> Registry {
    Registry::new(vec![RegistryModel {
        name: "m".into(),
        endpoints: eps
            .iter()
            .map(|(id, weight, i, o)| RegistryEndpoint {
                id: id.to_string(),
                provider: "p".into(),
                model: id.to_string(),
                priority: 1,
                weight: *weight,
                input_per_mtok: *i,
                output_per_mtok: *o,
                context_window: None,
            })
            .collect(),
    }])
}

/// The embedded built-ins plus `route r { default use "m" via STRATEGY }`.
fn set(reg: &Registry, via: &str) -> CheckedPolicySet {
    let mut sources = SourceMap::new();
    for (name, text) in BUILTIN {
        sources.add(*name, embeddable(name, text));
    }
    sources.add(
        "t.policy",
        format!("route r {{ default use \"m\" via {via} }}\n"),
    );
    match parse_and_check(&sources, reg) {
        Ok(s) => s,
        Err(d) => panic!("{}", crate::policy::diagnostic::render_all(&d, &sources)),
    }
}

fn apply(stats: &mut StatsSnapshot, u: StateUpdate) {
    stats.apply(&u);
}

/// Endpoint id → pick probability from a decision's trace.
fn probabilities(events: &[TraceEvent]) -> BTreeMap<String, f64> {
    events
        .iter()
        .filter_map(|e| match e {
            TraceEvent::Candidate {
                endpoint,
                probability: Some(p),
                excluded: None,
                ..
            } => Some((endpoint.clone(), *p)),
            _ => None,
        })
        .collect()
}

#[test]
fn weighted_round_robin_stays_within_one_of_the_exact_share() {
    let weights = [5u32, 3, 2, 1];
    let eps: Vec<(String, u32)> = weights
        .iter()
        .enumerate()
        .map(|(i, w)| (format!("e{i}"), *w))
        .collect();
    let spec: Vec<(&str, u32, f64, f64)> = eps
        .iter()
        .map(|(id, w)| (id.as_str(), *w, 0.0, 0.0))
        .collect();
    let reg = registry(&spec);
    let set = set(&reg, "weighted_round_robin");
    let req = RequestFeatures::for_model("m");
    let mut stats = StatsSnapshot::default();
    let total: u32 = weights.iter().sum();
    let mut counts = vec![0u32; weights.len()];
    for n in 1..=1000u32 {
        let d = decide(&set, &req, &stats, u64::from(n));
        let ep = d.endpoint.as_deref().unwrap().to_string();
        counts[eps.iter().position(|(id, _)| *id == ep).unwrap()] += 1;
        for u in d.state_updates {
            apply(&mut stats, u);
        }
        for (i, w) in weights.iter().enumerate() {
            let exact = f64::from(n) * f64::from(*w) / f64::from(total);
            assert!(
                (f64::from(counts[i]) - exact).abs() <= 1.0,
                "after {n} picks e{i} has {} (exact {exact})",
                counts[i]
            );
        }
    }
    // 1000 * 5/11 = 454.5, 272.7, 181.8, 90.9
    assert_eq!(counts.iter().sum::<u32>(), 1000);
}

#[test]
fn weighted_round_robin_interleaves_like_nginx() {
    let reg = registry(&[("a", 5, 0.0, 0.0), ("b", 1, 0.0, 0.0), ("c", 1, 0.0, 0.0)]);
    let set = set(&reg, "weighted_round_robin");
    let req = RequestFeatures::for_model("m");
    let mut stats = StatsSnapshot::default();
    let mut seq = String::new();
    for i in 0..7 {
        let d = decide(&set, &req, &stats, i);
        seq.push_str(d.endpoint.as_deref().unwrap());
        for u in d.state_updates {
            apply(&mut stats, u);
        }
    }
    assert_eq!(seq, "aabacaa");
}

/// Samples after which an EWMA (α = 0.3) starting at `from` and fed `to` crosses
/// `other`: the smallest n with to + (from − to)·0.7ⁿ past `other`.
fn ewma_crossing(from: f64, to: f64, other: f64) -> u32 {
    let keep = 1.0 - crate::stats::LATENCY_ALPHA;
    (((other - to) / (from - to)).ln() / keep.ln()).floor() as u32 + 1
}

#[test]
fn least_latency_follows_a_change_within_the_ewma_horizon() {
    // (a's latency before, a's latency after, b's steady latency)
    for (before, after, b_ms) in [
        (100.0, 160.0, 150.0),
        (100.0, 300.0, 150.0),
        (100.0, 1_000.0, 120.0),
    ] {
        let reg = registry(&[("a", 1, 0.0, 0.0), ("b", 1, 0.0, 0.0)]);
        let set = set(&reg, "least_latency");
        let req = RequestFeatures::for_model("m");
        let store = StatsStore::new(vec!["a".into(), "b".into()]);
        let (a, b) = (store.slot(0).unwrap(), store.slot(1).unwrap());
        let ms = |x: f64| Duration::from_secs_f64(x / 1e3);
        for _ in 0..30 {
            a.record(ms(before), true);
            b.record(ms(b_ms), true);
        }
        let pick = || {
            decide(&set, &req, &store.snapshot(SystemTime::now()), 0)
                .endpoint
                .unwrap()
                .to_string()
        };
        assert_eq!(pick(), "a");
        let n = ewma_crossing(before, after, b_ms);
        for k in 1..=n {
            a.record(ms(after), true);
            let want = if k < n { "a" } else { "b" };
            assert_eq!(pick(), want, "after {k} of {n} samples at {after} ms");
        }
    }
    assert_eq!(ewma_crossing(100.0, 160.0, 150.0), 6);
}

/// Simulates `rounds` requests against endpoints with mean latencies `means` (ms, ±20%
/// noise) and failure rates `fails`; returns picks per endpoint over the last 1000
/// rounds and the smallest probability any endpoint had.
fn exp3_run(means: &[f64], fails: &[f64], rounds: u64, seed: u64) -> (Vec<u32>, f64) {
    let ids: Vec<String> = (0..means.len()).map(|i| format!("e{i}")).collect();
    let spec: Vec<(&str, u32, f64, f64)> =
        ids.iter().map(|id| (id.as_str(), 1, 0.0, 0.0)).collect();
    let reg = registry(&spec);
    let set = set(&reg, "exp3");
    let req = RequestFeatures::for_model("m");
    let mut stats = StatsSnapshot::default();
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut last = vec![0u32; means.len()];
    let mut min_p = f64::INFINITY;
    for round in 0..rounds {
        let (d, trace) = explain(&set, &req, &stats, seed.wrapping_mul(1_000_003) + round);
        for p in probabilities(&trace.events).values() {
            assert!(p.is_finite(), "round {round}: probability {p}");
            min_p = min_p.min(*p);
        }
        let ep = d.endpoint.as_deref().unwrap().to_string();
        let i = ids.iter().position(|x| *x == ep).unwrap();
        if round >= rounds - 1000 {
            last[i] += 1;
        }
        let success = rng.random::<f64>() >= fails[i];
        let latency_ms = if success {
            means[i] * rng.random_range(0.8..1.2)
        } else {
            60_000.0
        };
        let out = Outcome {
            latency_ms,
            ..Outcome::default()
        };
        if let Some(u) = on_outcome(
            &set,
            d.call.as_ref().unwrap(),
            &req,
            &stats,
            &ep,
            success,
            &out,
        ) {
            apply(&mut stats, u);
        }
    }
    (last, min_p)
}

#[test]
fn exp3_learns_the_fastest_of_three_and_keeps_exploring() {
    let (gamma, k) = (0.2, 3.0);
    for seed in [1, 2, 3] {
        // Rewards 1 - L / 60 s: 0.98, 0.67, 0.33; the slowest also fails 10% of the time.
        let (last, min_p) = exp3_run(&[1_000.0, 20_000.0, 40_000.0], &[0.0, 0.0, 0.1], 3000, seed);
        println!("exp3 seed {seed}: last 1000 picks {last:?}, lowest probability {min_p:.4}");
        assert!(
            last[0] >= 700,
            "seed {seed}: best arm got {last:?} of the last 1000"
        );
        assert!(
            min_p >= gamma / k - 1e-12,
            "seed {seed}: probability {min_p} below gamma/K"
        );
        // Each arm's expected count is at least 1000 γ/K = 66.7; 4 σ below is 35.
        for (i, c) in last.iter().enumerate() {
            assert!(*c >= 35, "seed {seed}: arm {i} got {c} of the last 1000");
        }
    }
}

#[test]
fn exp3_stays_finite_over_a_long_run() {
    // Plain (not log) weights overflow f64 after about 10 000 picks (next test).
    let (last, min_p) = exp3_run(&[1_000.0, 20_000.0, 40_000.0], &[0.0, 0.0, 0.0], 20_000, 9);
    assert!(min_p >= 0.2 / 3.0 - 1e-12);
    assert!(last[0] >= 700, "{last:?}");
}

#[test]
fn plain_exp3_weights_overflow_which_is_why_exp3_keeps_logs() {
    // The first draft of exp3.policy, with weights kept as plain numbers.
    let draft = r#"
strategy exp3_plain(gamma = 0.2, l_max = 60s) {
  state weight = 1.0 join mean
  score = (1 - gamma) * state.weight / sum(state.weight) + gamma / count()
  pick sample
  on success { weight = state.weight * exp(gamma * max(0.0, 1 - outcome.latency_ms / l_max) / (count() * probability)) }
}
route r { default use "m" via exp3_plain }
"#;
    let reg = registry(&[("a", 1, 0.0, 0.0), ("b", 1, 0.0, 0.0), ("c", 1, 0.0, 0.0)]);
    let mut sources = SourceMap::new();
    sources.add("draft.policy", draft);
    let set = parse_and_check(&sources, &reg).unwrap();
    let req = RequestFeatures::for_model("m");
    let mut stats = StatsSnapshot::default();
    let out = Outcome {
        latency_ms: 200.0,
        ..Outcome::default()
    };
    let mut broke = None;
    for round in 0..20_000u64 {
        let d = decide(&set, &req, &stats, round);
        let ep = d.endpoint.clone().unwrap();
        let u = on_outcome(
            &set,
            d.call.as_ref().unwrap(),
            &req,
            &stats,
            &ep,
            true,
            &out,
        )
        .unwrap();
        if u.slots.values().any(|w| !w.is_finite()) {
            broke = Some(round);
            break;
        }
        apply(&mut stats, u);
    }
    let round = broke.expect("plain weights overflow");
    println!("plain exp3 weights overflowed at pick {round}");
}

#[test]
fn adaptive_gives_a_tenth_to_a_tenth_of_the_capacity() {
    let reg = registry(&[("full", 1, 0.0, 0.0), ("low", 1, 0.0, 0.0)]);
    let set = set(&reg, "adaptive");
    let req = RequestFeatures::for_model("m");
    let store = StatsStore::new(vec!["full".into(), "low".into()]);
    // The provider says 10 of 100 requests remain (OpenAI headers).
    let mut h = http::HeaderMap::new();
    h.insert("x-ratelimit-limit-requests", "100".parse().unwrap());
    h.insert("x-ratelimit-remaining-requests", "10".parse().unwrap());
    h.insert("x-ratelimit-reset-requests", "6m0s".parse().unwrap());
    let now = SystemTime::now();
    let c = crate::stats::ratelimit::capacity(&h, now).unwrap();
    store.slot(1).unwrap().record_capacity(c, now);
    let snap = store.snapshot(now);
    let (_, trace) = explain(&set, &req, &snap, 0);
    let p = probabilities(&trace.events);
    assert!((p["low"] / p["full"] - 0.1).abs() < 1e-12, "{p:?}");
    let n = 20_000;
    let low = (0..n)
        .filter(|&i| decide(&set, &req, &snap, i).endpoint.as_deref() == Some("low"))
        .count() as f64;
    // p = 1/11; 4 σ over 20 000 draws is 0.8 points.
    assert!((low / n as f64 - 1.0 / 11.0).abs() < 0.008, "{low}");
}

#[test]
fn cost_optimized_never_picks_a_violator_when_a_compliant_endpoint_exists() {
    let mut rng = SmallRng::seed_from_u64(6);
    let spec: Vec<(String, u32, f64, f64)> = (0..6)
        .map(|i| {
            let inp = rng.random_range(0.0..10.0);
            (format!("e{i}"), 1, inp, inp * rng.random_range(1.0..5.0))
        })
        .collect();
    let spec_ref: Vec<(&str, u32, f64, f64)> = spec
        .iter()
        .map(|(id, w, i, o)| (id.as_str(), *w, *i, *o))
        .collect();
    let reg = registry(&spec_ref);
    let mut compliant_cases = 0;
    for (max_ms, min_q) in [(500u64, 0.0), (1_000, 0.5), (2_000, 0.8), (3_000, 0.3)] {
        let set = set(
            &reg,
            &format!("cost_optimized(max_latency = {max_ms}ms, min_quality = {min_q:.1})"),
        );
        for _ in 0..500 {
            let mut req = RequestFeatures::for_model("m");
            req.input_tokens = rng.random_range(0..50_000);
            req.max_tokens = rng.random_bool(0.5).then(|| rng.random_range(1..4_000));
            let mut stats = StatsSnapshot::default();
            for (id, ..) in &spec {
                let e = stats.endpoints.entry(id.clone()).or_default();
                e.latency_ewma_ms = rng.random_range(0.0..4_000.0);
                e.quality.insert("chat".into(), rng.random_range(0.0..1.0));
                e.available = rng.random_bool(0.9);
            }
            let ok = |id: &str| {
                let e = &stats.endpoints[id];
                e.available && e.latency_ewma_ms <= max_ms as f64 && e.quality["chat"] >= min_q
            };
            let cost = |id: &str| {
                let (_, _, i, o) = spec.iter().find(|s| s.0 == id).unwrap();
                let out = req.max_tokens.unwrap_or(500) as f64;
                i / 1e6 * req.input_tokens as f64 + o / 1e6 * out
            };
            let d = decide(&set, &req, &stats, 0);
            let Some(pick) = d.endpoint.as_deref() else {
                assert!(spec.iter().all(|s| !stats.endpoints[&s.0].available));
                continue;
            };
            let compliant: Vec<&str> = spec
                .iter()
                .map(|s| s.0.as_str())
                .filter(|id| ok(id))
                .collect();
            if compliant.is_empty() {
                continue;
            }
            compliant_cases += 1;
            assert!(
                ok(pick),
                "picked violator {pick} though {compliant:?} comply"
            );
            let cheapest = compliant
                .iter()
                .map(|id| cost(id))
                .fold(f64::INFINITY, f64::min);
            assert!(
                cost(pick) <= cheapest * (1.0 + 1e-12),
                "{pick} is not the cheapest compliant"
            );
        }
    }
    assert!(compliant_cases > 1_000, "{compliant_cases}");
}
