//! The routing decision's cost as a model's endpoint count grows (issue 17: "cost
//! does not grow with the number of endpoints a model has"): the statistics the
//! decision reads plus the policy decision itself, for 1, 16 and 128 endpoints of
//! one model, on the built-in `priority` order and on the stateful
//! `least_latency` strategy.
//!
//! `cargo bench --bench endpoints` (release profile).

use std::hint::black_box;
use std::time::SystemTime;

use criterion::Criterion;

use switchyard::api::ChatRequest;
use switchyard::routing::features::{features, Caller};
use switchyard::routing::policy::{compile, read_sources, registry_from_config};
use switchyard::stats::StatsStore;

/// A config with one model `m` of `n` endpoints on one provider.
fn config(n: usize) -> switchyard::config::Config {
    let eps: Vec<String> = (0..n)
        .map(|i| format!("{{ provider: up, model: up-{i} }}"))
        .collect();
    let yaml = format!(
        "providers: {{ up: {{ kind: mock }} }}\nmodels: {{ m: {{ endpoints: [ {} ] }} }}\n",
        eps.join(", ")
    );
    switchyard::config::parse_str(&yaml, None).expect("bench config")
}

fn main() {
    let mut c = Criterion::default().configure_from_args();
    let body = br#"{"model":"m","messages":[{"role":"user","content":"hello there"}]}"#;
    let chat = ChatRequest::parse(body).expect("bench body");
    let req = features(
        &chat,
        [("content-type", "application/json")],
        &Caller::default(),
        0,
    );
    for (strategy, policy) in [
        ("priority", None),
        (
            "least_latency",
            Some("route r {\n  default use model via least_latency\n}\n"),
        ),
    ] {
        for n in [1usize, 16, 128] {
            let config = config(n);
            let mut sources = read_sources(None).expect("built-in strategies");
            if let Some(p) = policy {
                sources.add("bench.policy", p);
            }
            let snap = compile(sources, &registry_from_config(&config)).expect("policy");
            let store = StatsStore::from_config(&config);
            // Some history, so the EWMAs are not all at their initial values.
            for i in 0..store.len() {
                let slot = store.slot(i).unwrap();
                slot.record(std::time::Duration::from_millis(100 + i as u64), true);
            }
            let mut seed = 0u64;
            c.bench_function(&format!("decide: {strategy}, {n} endpoints"), |b| {
                b.iter(|| {
                    seed = seed.wrapping_add(1);
                    let stats = store.live(SystemTime::now());
                    black_box(snap.compiled.decide(black_box(&req), &stats, seed))
                })
            });
        }
    }
    c.final_summary();
}
