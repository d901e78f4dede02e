//! Decisions on the gateway's live statistics ([`crate::stats::LiveStats`]) equal
//! decisions on a [`StatsSnapshot`] of the same numbers and state, on both engines
//! (issue 17: the live path reads state by column and trusts registry indices, the
//! snapshot path looks everything up by name).

use std::time::{Duration, SystemTime};

use super::policy::{compile, read_sources, registry_from_config, PolicySnapshot};
use crate::policy::jit::Engine;
use crate::policy::{RequestFeatures, StatsSnapshot, StatsSource};
use crate::stats::StatsStore;

/// Model `m` with endpoints of `weights`, and the built-ins plus `route r { default
/// use model via VIA }`.
fn setup(weights: &[u32], via: &str) -> (PolicySnapshot, StatsStore) {
    setup_with(
        weights,
        format!("route r {{\n  default use model via {via}\n}}\n"),
    )
}

/// Model `m` with endpoints of `weights`, and the built-ins plus the policy `text`.
fn setup_with(weights: &[u32], text: String) -> (PolicySnapshot, StatsStore) {
    let eps: Vec<String> = weights
        .iter()
        .enumerate()
        .map(|(i, w)| format!("{{ provider: p, model: e{i}, weight: {w} }}"))
        .collect();
    let yaml = format!(
        "providers: {{ p: {{ kind: mock }} }}\nmodels: {{ m: {{ endpoints: [ {} ] }} }}\n",
        eps.join(", ")
    );
    let config = crate::config::parse_str(&yaml, None).expect("config");
    let mut sources = read_sources(None).expect("built-ins");
    sources.add("t.policy", text);
    let snap = compile(sources, &registry_from_config(&config)).expect("policy");
    (snap, StatsStore::from_config(&config))
}

#[test]
fn weighted_round_robin_on_live_state_matches_the_snapshot_on_both_engines() {
    let (snap, store) = setup(&[5, 3, 0, 2, 1], "weighted_round_robin");
    let wrr = snap
        .set()
        .strategies
        .iter()
        .find(|s| s.name == "weighted_round_robin")
        .unwrap();
    assert!(!wrr.reads_stats, "reads weights and state only");
    let req = RequestFeatures::for_model("m");
    let mut mirror = StatsSnapshot::default();
    let mut seq = Vec::new();
    for seed in 0..60u64 {
        let live = store.live_for(SystemTime::now(), &snap.set().registry, &snap.stats_aligned);
        let on_live = snap.compiled.decide_on(Engine::Jit, &req, &live, seed);
        let on_interp = snap.compiled.decide_on(Engine::Interp, &req, &live, seed);
        let on_snapshot = snap.compiled.decide_on(Engine::Interp, &req, &mirror, seed);
        assert_eq!(on_live.plan, on_snapshot.plan, "pick {seed}");
        assert_eq!(on_interp.plan, on_snapshot.plan, "pick {seed}");
        assert_eq!(on_live.state_updates, on_snapshot.state_updates);
        for u in on_live.state_updates {
            store.set_state(u.index, &u.strategy, &u.slots);
            mirror.apply(&u);
        }
        seq.push(on_live.plan[0]);
    }
    assert_eq!(snap.stats_aligned.get().map(|a| a.1), Some(true));
    // Weight 0 is never picked; the others get their exact share over 11 x 5 picks.
    let count = |i: usize| seq[..55].iter().filter(|&&p| p == i).count();
    assert_eq!(
        [count(0), count(1), count(2), count(3), count(4)],
        [25, 15, 0, 10, 5]
    );
    assert_eq!(
        store.snapshot(SystemTime::now()).endpoints["p/e0"].state["weighted_round_robin"]["served"],
        mirror.endpoints["p/e0"].state["weighted_round_robin"]["served"]
    );
}

#[test]
fn least_latency_reads_statistics_and_matches_the_snapshot() {
    let (snap, store) = setup(&[1, 1, 1], "least_latency");
    let s = snap
        .set()
        .strategies
        .iter()
        .find(|s| s.name == "least_latency");
    assert!(s.unwrap().reads_stats);
    for (i, ms) in [300u64, 100, 200].iter().enumerate() {
        store
            .slot(i)
            .unwrap()
            .record(Duration::from_millis(*ms), true);
    }
    let req = RequestFeatures::for_model("m");
    let now = SystemTime::now();
    let live = store.live_for(now, &snap.set().registry, &snap.stats_aligned);
    let mirror = store.snapshot_for_task(now, &req.task);
    for engine in [Engine::Jit, Engine::Interp] {
        let d = snap.compiled.decide_on(engine, &req, &live, 1);
        assert_eq!(d.plan, vec![1, 2, 0], "{engine:?}");
        assert_eq!(
            d.plan,
            snap.compiled.decide_on(engine, &req, &mirror, 1).plan
        );
    }
}

#[test]
fn a_registry_that_is_not_the_stores_is_read_by_id() {
    let (snap, _) = setup(&[1, 1], "least_latency");
    // The same ids in the other order: index 0 of the registry is index 1 here.
    let store = StatsStore::new(vec!["p/e1".into(), "p/e0".into()]);
    store
        .slot(1)
        .unwrap()
        .record(Duration::from_millis(40), true);
    let reg = &snap.set().registry;
    assert!(!store.aligned_with(reg));
    let live = store.live_for(SystemTime::now(), reg, &snap.stats_aligned);
    assert_eq!(live.stats(0, "p/e0", "").latency_ewma_ms, 40.0);
    assert_eq!(live.stats(1, "p/e1", "").latency_ewma_ms, 0.0);
    // A cell filled for another store is not trusted by this one.
    let (_, other) = setup(&[1, 1], "least_latency");
    let cell = std::sync::OnceLock::new();
    let _ = other.live_for(SystemTime::now(), reg, &cell);
    assert_eq!(cell.get().map(|a| a.1), Some(true));
    let live = store.live_for(SystemTime::now(), reg, &cell);
    assert_eq!(live.stats(0, "p/e0", "").latency_ewma_ms, 40.0);
}

/// A lazy decision (the gateway's: a long ranking's fallbacks left unordered) gives,
/// once its fallbacks are ordered, the plan the eager decision gives, with the same
/// pick and state updates, for every built-in strategy over endpoints with
/// different latencies, errors and picks so far (issue 17).
#[test]
fn a_lazy_decision_once_ordered_is_the_eager_plan_for_every_builtin_strategy() {
    let weights: Vec<u32> = (0..20).map(|i| [1, 2, 3, 0, 5][i % 5]).collect();
    for via in [
        "weighted_round_robin",
        "least_latency",
        "adaptive",
        "cost_optimized",
        "exp3",
        "multi_objective",
        "quality_first",
    ] {
        let (snap, store) = setup(&weights, via);
        for i in 0..weights.len() {
            let slot = store.slot(i).unwrap();
            for k in 0..(i % 4) {
                slot.record(
                    Duration::from_millis(40 + 17 * (i as u64 % 7) + k as u64),
                    k != 2,
                );
            }
        }
        let req = RequestFeatures::for_model("m");
        let mut lazy_seen = 0;
        for seed in 0..40u64 {
            let live = store.live_for(SystemTime::now(), &snap.set().registry, &snap.stats_aligned);
            let eager = snap.compiled.decide_on(Engine::Jit, &req, &live, seed);
            let lazy = snap.compiled.decide_lazy(&req, &live, seed);
            assert!(
                eager.rest.is_none(),
                "{via}: only decide_lazy leaves a rest"
            );
            let mut whole = lazy.plan.clone();
            if let Some(r) = &lazy.rest {
                lazy_seen += 1;
                assert_eq!(lazy.plan.len(), 1, "{via}: the pick alone before the rest");
                assert_eq!(r.ordered(), eager.plan[1..], "{via} seed {seed}");
                r.order_into(&mut whole);
            }
            assert_eq!(whole, eager.plan, "{via} seed {seed}");
            assert_eq!(lazy.endpoint, eager.endpoint, "{via} seed {seed}");
            assert_eq!(lazy.state_updates, eager.state_updates, "{via} seed {seed}");
            for u in eager.state_updates {
                store.set_state(u.index, &u.strategy, &u.slots);
            }
        }
        assert_eq!(
            lazy_seen, 40,
            "{via}: 16 endpoints of weight > 0 rank lazily"
        );
    }
}

/// Model `m` with endpoints of `weights` and `route r { default use model via s }`,
/// `s` being the strategy source `strategy`.
fn setup_custom(weights: &[u32], strategy: &str) -> (PolicySnapshot, StatsStore) {
    setup_with(
        weights,
        format!("{strategy}\nroute r {{\n  default use model via s\n}}\n"),
    )
}

/// Scores with NaN, +-infinity, -0.0 and 0.0 and many ties, every pick mode, with and
/// without a filter (rankings that keep every candidate or some): the lazy decision
/// once ordered is the eager one on the compiled engine and the interpreter's.
#[test]
fn a_lazy_decision_with_nan_infinite_and_signed_zero_scores_is_the_eager_plan() {
    let scores = [
        "1.0 / (endpoint.weight - 2.0) + (endpoint.weight - 4.0) / (endpoint.weight - 4.0)",
        "(endpoint.weight - 3.0) * 0.0",
        "0.0 - 1.0 / (endpoint.weight - 2.0) * (endpoint.weight - 5.0) / (endpoint.weight - 5.0)",
        "endpoint.weight * 1.0",
    ];
    let filters = ["", "require endpoint.weight != 1"];
    let mut rng = crate::policy::interp::hash::SplitMix64::new(7);
    let mut lazy_seen = 0;
    for score in scores {
        for filter in filters {
            for pick in ["min", "max", "weighted", "sample"] {
                let strategy =
                    format!("strategy s() {{\n  {filter}\n  score = {score}\n  pick {pick}\n}}\n");
                for round in 0..6 {
                    let n = 8 + (rng.next_u64() % 14) as usize;
                    let weights: Vec<u32> = (0..n).map(|_| (rng.next_u64() % 7) as u32).collect();
                    let (snap, store) = setup_custom(&weights, &strategy);
                    let req = RequestFeatures::for_model("m");
                    for seed in 0..8u64 {
                        let live = store.live_for(
                            SystemTime::now(),
                            &snap.set().registry,
                            &snap.stats_aligned,
                        );
                        let eager = snap.compiled.decide_on(Engine::Jit, &req, &live, seed);
                        let interp = snap.compiled.decide_on(Engine::Interp, &req, &live, seed);
                        let lazy = snap.compiled.decide_lazy(&req, &live, seed);
                        let mut whole = lazy.plan.clone();
                        if let Some(r) = &lazy.rest {
                            lazy_seen += 1;
                            r.order_into(&mut whole);
                        }
                        let at = format!("{strategy} {weights:?} round {round} seed {seed}");
                        assert_eq!(whole, eager.plan, "lazy vs eager: {at}");
                        assert_eq!(eager.plan, interp.plan, "jit vs interp: {at}");
                        assert_eq!(lazy.endpoint, eager.endpoint, "{at}");
                    }
                }
            }
        }
    }
    assert!(lazy_seen > 0);
}
