//! Compiled code is freed when the last reference drops: the live module count
//! returns to zero and resident memory stays flat over many compile/drop cycles.
//! (One test in its own binary, so no other test compiles concurrently.)

use switchyard::policy::{
    live_compiled_modules, parse_and_check, CompiledPolicySet, Engine, Registry, RequestFeatures,
    SourceMap, StatsSnapshot,
};

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

#[test]
fn compiled_modules_are_counted_and_freed() {
    let mut src = SourceMap::new();
    src.add(
        "canary.policy",
        include_str!("../examples/policies/canary.policy"),
    );
    src.add(
        "exp3.policy",
        include_str!("../examples/policies/builtin/exp3.policy"),
    );
    let reg = Registry::example();
    let set = parse_and_check(&src, &reg).unwrap_or_else(|d| panic!("{d:?}"));
    assert_eq!(live_compiled_modules(), 0);
    let a = CompiledPolicySet::compile(set.clone());
    assert_eq!(a.engine(), Engine::Jit);
    let b = a.clone();
    assert_eq!(live_compiled_modules(), 1);
    drop(a);
    assert_eq!(live_compiled_modules(), 1, "a clone still holds the code");
    let req = RequestFeatures::for_model("gpt-4o");
    assert!(b
        .decide(&req, &StatsSnapshot::default(), 0)
        .endpoint
        .is_some());
    drop(b);
    assert_eq!(live_compiled_modules(), 0);

    // Warm up allocator pools, then check RSS stays flat over more cycles.
    let cycle = |n: usize| {
        for _ in 0..n {
            let c = CompiledPolicySet::compile(set.clone());
            std::hint::black_box(c.decide(&req, &StatsSnapshot::default(), 1));
        }
    };
    cycle(100);
    let before = rss_kib();
    cycle(400);
    let after = rss_kib();
    assert_eq!(live_compiled_modules(), 0);
    eprintln!("RSS over 400 compile/drop cycles: {before} KiB -> {after} KiB");
    assert!(
        after <= before + 4096,
        "RSS grew from {before} KiB to {after} KiB"
    );
}
