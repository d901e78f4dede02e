//! Policy evaluation benchmarks (issue 4): decision time per request for 10, 100 and
//! 1,000-rule sets on the JIT and the interpreter side by side; parse + check +
//! compile time of 1,000 rules; compiled code size per rule.
//!
//! `cargo bench --bench policy_eval` (release profile). The request matches none of
//! the generated rules, and the default then picks among gpt-4o's endpoints with
//! `least_latency`. The main sets mix equality tests (which the rule index keys on,
//! see `src/policy/jit/index.rs`) with range tests and string atoms;
//! `decide/1000_range_rules` has range tests only, so nothing is skipped and every
//! compiled condition runs. `stats_snapshot/8_endpoints` is what the gateway's
//! statistics snapshot costs per decision (all quality scores, and one task's).

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion};

use switchyard::policy::{
    parse_and_check, CompiledPolicySet, Engine, Registry, RequestFeatures, SourceMap, StatsSnapshot,
};

const LEAST_LATENCY: &str = include_str!("../examples/policies/builtin/least_latency.policy");

/// A route with `n` rules mixing numeric tests, string equality, `in` lists, a
/// priority test and a few shared string atoms.
fn rules(n: usize) -> String {
    let mut s = String::from("route gen when request.model in [\"gpt-4o\", \"gpt-4o-mini\"] {\n");
    for i in 0..n {
        let atom = match i % 4 {
            0 => "starts_with(request.model, \"claude\")",
            1 => "glob(request.task, \"tool*\")",
            2 => "request.priority == \"critical\"",
            _ => "request.temperature > 1.5",
        };
        let atom = if i % 4 == 3 {
            format!("(has(request.temperature) and {atom})")
        } else {
            atom.to_string()
        };
        s.push_str(&format!(
            "  rule r{i} when (request.input_tokens > {} and request.hour != {} and has(header(\"x-team\")) and header(\"x-team\") == \"team-{i}\") or {atom} or request.messages in [{}, {}] {{ use \"gpt-4o-mini\" }}\n",
            i * 10,
            i % 24,
            1000 + i,
            2000 + i
        ));
    }
    s.push_str("  default use \"gpt-4o\" via least_latency\n}\n");
    s
}

/// A route with `n` rules of one test each (`org == "org-i"`, guarded).
fn simple_rules(n: usize) -> String {
    let mut s = String::from("route gen {\n");
    for i in 0..n {
        s.push_str(&format!(
            "  rule r{i} when has(request.org) and request.org == \"org-{i}\" {{ use \"gpt-4o-mini\" }}\n"
        ));
    }
    s.push_str("  default use \"gpt-4o\" via least_latency\n}\n");
    s
}

/// A route with `n` rules of range tests only: nothing for the rule index to key
/// on, so the compiled walk tests every rule (the JIT's worst case).
fn range_rules(n: usize) -> String {
    let mut s = String::from("route gen {\n");
    for i in 0..n {
        s.push_str(&format!(
            "  rule r{i} when request.input_tokens > {} or request.hour > {} {{ use \"gpt-4o-mini\" }}\n",
            5_000 + i * 10,
            24 + i
        ));
    }
    s.push_str("  default use \"gpt-4o\" via least_latency\n}\n");
    s
}

fn sources(n: usize) -> SourceMap {
    let mut src = SourceMap::new();
    src.add("least_latency.policy", LEAST_LATENCY);
    src.add("gen.policy", rules(n));
    src
}

fn compiled(n: usize) -> CompiledPolicySet {
    compiled_from(&sources(n))
}

fn compiled_from(src: &SourceMap) -> CompiledPolicySet {
    let set = parse_and_check(src, &Registry::example()).unwrap_or_else(|d| panic!("{d:?}"));
    let c = CompiledPolicySet::compile(set);
    assert_eq!(c.engine(), Engine::Jit, "{:?}", c.fallback_reason());
    c
}

fn request() -> RequestFeatures {
    let mut r = RequestFeatures::for_model("gpt-4o");
    r.input_tokens = 4_000;
    r.messages = 3;
    r.hour = 13;
    r.headers.insert("x-team".into(), "search".into());
    r.org = Some("acme".into());
    r
}

fn decide(c: &mut Criterion) {
    let req = request();
    let stats = StatsSnapshot::default();
    let sets = [
        ("10_rules", rules(10)),
        ("100_rules", rules(100)),
        ("1000_rules", rules(1000)),
        ("1000_one_test_rules", simple_rules(1000)),
        ("1000_range_rules", range_rules(1000)),
    ];
    for (name, route) in sets {
        let mut src = SourceMap::new();
        src.add("least_latency.policy", LEAST_LATENCY);
        src.add("gen.policy", route);
        let set = compiled_from(&src);
        let a = set.decide_on(Engine::Interp, &req, &stats, 1);
        assert_eq!(a, set.decide_on(Engine::Jit, &req, &stats, 1));
        assert_eq!(a.rule.as_deref(), Some("default"));
        let mut g = c.benchmark_group(format!("decide/{name}"));
        for (id, engine) in [("jit", Engine::Jit), ("interp", Engine::Interp)] {
            g.bench_function(BenchmarkId::from_parameter(id), |bch| {
                bch.iter(|| set.decide_on(engine, black_box(&req), &stats, 1))
            });
        }
        g.finish();
    }
}

fn compile(c: &mut Criterion) {
    let src = sources(1000);
    let reg = Registry::example();
    let mut g = c.benchmark_group("compile/1000_rules");
    g.sample_size(20).measurement_time(Duration::from_secs(8));
    g.bench_function("parse_check", |b| {
        b.iter(|| parse_and_check(black_box(&src), &reg).map(|s| s.routes.len()))
    });
    g.bench_function("parse_check_compile", |b| {
        b.iter(|| {
            let set = parse_and_check(black_box(&src), &reg).unwrap_or_else(|d| panic!("{d:?}"));
            CompiledPolicySet::compile(set).engine()
        })
    });
    g.finish();
}

/// Compiled machine code per rule, and resident memory per rule while 20 compiled
/// 1,000-rule sets are alive (code, layout, the checked set itself excluded).
fn memory_report() {
    let page = 4096.0;
    let rss = || -> f64 {
        std::fs::read_to_string("/proc/self/statm")
            .ok()
            .and_then(|s| {
                s.split_whitespace()
                    .nth(1)
                    .and_then(|v| v.parse::<f64>().ok())
            })
            .unwrap_or(0.0)
            * page
    };
    for n in [10usize, 100, 1000] {
        let c = compiled(n);
        println!(
            "memory: {n:>4} rules: {:>8} bytes of machine code, {:.0} bytes per rule",
            c.code_bytes(),
            c.code_bytes() as f64 / n as f64
        );
    }
    let sets: Vec<_> = (0..20)
        .map(|_| {
            parse_and_check(&sources(1000), &Registry::example())
                .unwrap_or_else(|d| panic!("{d:?}"))
        })
        .collect();
    let before = rss();
    let t = Instant::now();
    let compiled: Vec<_> = sets.into_iter().map(CompiledPolicySet::compile).collect();
    let took = t.elapsed();
    let after = rss();
    println!(
        "memory: 20 x 1000-rule sets compiled in {took:.2?}: resident memory +{:.1} MiB, {:.0} bytes per compiled rule (code, layout, tables)",
        (after - before) / (1 << 20) as f64,
        (after - before) / 20_000.0
    );
    drop(compiled);
    // RSS over 10,000 compile-and-drop cycles: `cargo run --release --example jit_rss`.
}

/// The statistics snapshot a decision reads, for 8 endpoints with three quality
/// scores each: the full one (`/admin/endpoints`) and the per-task one the request
/// path builds.
fn stats_snapshot(c: &mut Criterion) {
    use std::time::SystemTime;
    use switchyard::stats::{EndpointInfo, StatsStore};
    let infos: Vec<EndpointInfo> = (0..8)
        .map(|i| EndpointInfo {
            id: format!("provider/model-{i}"),
            cost_in_per_token: Some(1e-6),
            cost_out_per_token: Some(4e-6),
            quality: [("chat", 0.9), ("code", 0.8), ("tool_use", 0.7)]
                .iter()
                .map(|(k, v)| (k.to_string(), *v))
                .collect(),
            latency_target_ms: None,
        })
        .collect();
    let store = StatsStore::with_endpoints(infos);
    let mut g = c.benchmark_group("stats_snapshot");
    g.bench_function("8_endpoints_full", |b| {
        b.iter(|| black_box(store.snapshot(SystemTime::now())))
    });
    g.bench_function("8_endpoints_for_task", |b| {
        b.iter(|| black_box(store.snapshot_for_task(SystemTime::now(), "code")))
    });
    g.finish();
}

fn main() {
    // `cargo bench` passes `--bench`; `cargo test --all-targets` runs this binary
    // without it, in debug, only to check the benchmarks still run: the memory report
    // (20 compiled 1,000-rule sets) belongs to real benchmark runs only.
    if std::env::args().any(|a| a == "--bench") {
        memory_report();
    }
    let mut c = Criterion::default().configure_from_args();
    decide(&mut c);
    compile(&mut c);
    stats_snapshot(&mut c);
    c.final_summary();
}
