//! Compiles and drops policy sets in a loop and reports resident memory (issue 4:
//! "no RSS growth after compiling and dropping 10,000 policy sets").
//!
//! `cargo run --release --example jit_rss [-- ITERATIONS]` (default 10,000). Prints
//! RSS (from /proc/self/statm) after a warm-up of 500 sets and at the end, and the
//! live compiled module count (must be 0 after the loop).

use switchyard::policy::{
    live_compiled_modules, parse_and_check, CompiledPolicySet, Engine, Registry, RequestFeatures,
    SourceMap, StatsSnapshot,
};

const POLICIES: &[(&str, &str)] = &[
    ("canary.policy", include_str!("policies/canary.policy")),
    ("ab.policy", include_str!("policies/ab.policy")),
    ("batch.policy", include_str!("policies/batch.policy")),
    (
        "long_context.policy",
        include_str!("policies/long_context.policy"),
    ),
    ("reject.policy", include_str!("policies/reject.policy")),
    (
        "cost_optimized.policy",
        include_str!("policies/builtin/cost_optimized.policy"),
    ),
    ("exp3.policy", include_str!("policies/builtin/exp3.policy")),
    (
        "least_latency.policy",
        include_str!("policies/builtin/least_latency.policy"),
    ),
    (
        "wrr.policy",
        include_str!("policies/builtin/weighted_round_robin.policy"),
    ),
];

fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| {
            s.split_whitespace()
                .nth(1)
                .and_then(|v| v.parse::<u64>().ok())
        })
        .unwrap_or(0)
        * 4
}

fn main() {
    let n: u64 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(10_000);
    let mut src = SourceMap::new();
    for (name, text) in POLICIES {
        src.add(*name, *text);
    }
    let reg = Registry::example();
    let req = RequestFeatures::for_model("gpt-4o");
    let stats = StatsSnapshot::default();
    let warmup = 500.min(n);
    let start = std::time::Instant::now();
    let mut after_warmup = 0;
    for i in 0..n {
        let set = parse_and_check(&src, &reg).unwrap_or_else(|d| panic!("{d:?}"));
        let c = CompiledPolicySet::compile(set);
        assert_eq!(c.engine(), Engine::Jit, "{:?}", c.fallback_reason());
        std::hint::black_box(c.decide(&req, &stats, i));
        drop(c);
        if i + 1 == warmup {
            after_warmup = rss_kib();
            println!(
                "after {warmup:>6} sets: RSS {after_warmup} KiB, live modules {}",
                live_compiled_modules()
            );
        }
    }
    let end = rss_kib();
    println!(
        "after {n:>6} sets: RSS {end} KiB, live modules {}",
        live_compiled_modules()
    );
    println!(
        "RSS growth from set {warmup} to set {n}: {} KiB ({:.2?} total, {:.0} µs per parse+check+compile+decide+drop)",
        end as i64 - after_warmup as i64,
        start.elapsed(),
        start.elapsed().as_secs_f64() * 1e6 / n as f64
    );
}
