//! Runs one policy workload a given number of times, for instruction counts under
//! `valgrind --tool=callgrind` (repeatable on a loaded machine, unlike wall time).
//! Run it twice with different counts and divide the difference of the totals by
//! the difference of the counts: setup cancels out.
//!
//! `cargo run --release --example decide_cost -- CASE N`, CASE one of:
//! - `rules10`, `rules1000`, `range1000`: one JIT decision on the sets of
//!   `benches/policy_eval.rs` (a request no rule matches; `least_latency` default);
//! - `priority-E`, `least_latency-E`, `weighted_round_robin-E` (E endpoints of one
//!   model): statistics read in place plus one JIT decision, as `benches/endpoints.rs`;
//! - `compile1000`: parse + check + compile of the 1,000-rule set;
//! - `selfcheck`: the shipped policies' own tests on both engines (what every reload
//!   of that set runs); `selfcheck-jit`: on the JIT alone (what a reload runs for a
//!   test whose inputs did not change).
//!
//! ```sh
//! for n in 100 1100; do valgrind --tool=callgrind --callgrind-out-file=/tmp/cg.$n \
//!   target/release/examples/decide_cost rules1000 $n; done
//! ```

use std::hint::black_box;
use std::time::SystemTime;

use switchyard::policy::jit::engine::EngineMode;
use switchyard::policy::{
    parse_and_check, CompiledPolicySet, Engine, Registry, RequestFeatures, SourceMap, StatsSnapshot,
};

const LEAST_LATENCY: &str = include_str!("policies/builtin/least_latency.policy");

/// The mixed rules of `benches/policy_eval.rs`.
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

/// The range-only rules of `benches/policy_eval.rs`.
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

fn sources(route: String) -> SourceMap {
    let mut src = SourceMap::new();
    src.add("least_latency.policy", LEAST_LATENCY);
    src.add("gen.policy", route);
    src
}

fn compiled(src: &SourceMap) -> CompiledPolicySet {
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

fn decide_loop(route: String, n: u64) {
    let set = compiled(&sources(route));
    let (req, stats) = (request(), StatsSnapshot::default());
    for i in 0..n {
        black_box(set.decide(black_box(&req), &stats, i));
    }
}

/// `benches/endpoints.rs`: one model `m` of `e` endpoints, `strategy` over them.
fn endpoints_loop(strategy: &str, e: usize, n: u64) {
    use switchyard::api::ChatRequest;
    use switchyard::routing::features::{features, Caller};
    use switchyard::routing::policy::{compile, read_sources, registry_from_config};
    use switchyard::stats::StatsStore;
    let eps: Vec<String> = (0..e)
        .map(|i| format!("{{ provider: up, model: up-{i} }}"))
        .collect();
    let yaml = format!(
        "providers: {{ up: {{ kind: mock }} }}\nmodels: {{ m: {{ endpoints: [ {} ] }} }}\n",
        eps.join(", ")
    );
    let config = switchyard::config::parse_str(&yaml, None).expect("config");
    let body = br#"{"model":"m","messages":[{"role":"user","content":"hello there"}]}"#;
    let chat = ChatRequest::parse(body).expect("body");
    let req = features(
        &chat,
        [("content-type", "application/json")],
        &Caller::default(),
        0,
    );
    let mut sources = read_sources(None).expect("built-ins");
    if strategy != "priority" {
        sources.add(
            "bench.policy",
            format!("route r {{\n  default use model via {strategy}\n}}\n"),
        );
    }
    let snap = compile(sources, &registry_from_config(&config)).expect("policy");
    let store = StatsStore::from_config(&config);
    for i in 0..store.len() {
        let slot = store.slot(i).unwrap();
        // Distinct latencies in no particular order (97 is prime to the usual
        // counts), as a live fleet's are: ranked by latency they need a real sort.
        let ms = 100 + (i * 97 % store.len()) as u64;
        slot.record(std::time::Duration::from_millis(ms), true);
        if strategy == "weighted_round_robin" {
            // A few distinct counts in no particular order, as the gateway's
            // endpoints hold them in turn while requests run concurrently.
            let served = [("served".to_string(), (i * 97 % store.len() % 5) as f64)].into();
            store.set_state(i, "weighted_round_robin", &served);
        }
    }
    for i in 0..n {
        // As the gateway reads them: indices trusted once the registry was compared.
        let stats = store.live_for(SystemTime::now(), &snap.set().registry, &snap.stats_aligned);
        black_box(snap.compiled.decide(black_box(&req), &stats, i));
    }
}

fn compile_loop(n: u64) {
    let src = sources(rules(1000));
    let reg = Registry::example();
    for _ in 0..n {
        let set = parse_and_check(&src, &reg).unwrap_or_else(|d| panic!("{d:?}"));
        black_box(CompiledPolicySet::compile(set).engine());
    }
}

fn selfcheck_loop(n: u64, mode: switchyard::policy::jit::engine::EngineMode) {
    use switchyard::policy::jit::engine::run_tests_budgeted;
    use switchyard::policy::testing::DEFAULT_TEST_BUDGET;
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/policies");
    let src = switchyard::routing::policy::read_sources_from(&[root]).expect("shipped policies");
    let set = parse_and_check(&src, &Registry::example()).unwrap_or_else(|d| panic!("{d:?}"));
    let c = CompiledPolicySet::compile(set);
    for _ in 0..n {
        let r = run_tests_budgeted(&c, mode, Some(DEFAULT_TEST_BUDGET));
        assert_eq!(r.failed, 0, "{}", r.render());
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let case = args.get(1).map(String::as_str).unwrap_or("rules1000");
    let n: u64 = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(1000);
    match case {
        "rules10" => decide_loop(rules(10), n),
        "rules1000" => decide_loop(rules(1000), n),
        "range1000" => decide_loop(range_rules(1000), n),
        "compile1000" => compile_loop(n),
        "selfcheck" => selfcheck_loop(n, EngineMode::Both),
        "selfcheck-jit" => selfcheck_loop(n, EngineMode::Jit),
        other => {
            let (strategy, e) = other
                .rsplit_once('-')
                .and_then(|(s, e)| Some((s, e.parse::<usize>().ok()?)))
                .unwrap_or_else(|| panic!("unknown case {other}"));
            endpoints_loop(strategy, e, n)
        }
    }
}
