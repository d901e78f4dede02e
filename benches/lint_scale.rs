//! Lint time against the number of rules in one route (issue 19): parse, check and
//! every lint analysis of a generated route of 1,000, 2,000 and 10,000 rules, for
//! two shapes. Target: 10,000 rules in at most 2 s (release).
//!
//! - `tenants`: one rule per tenant, `metadata("tenant") == "tN"` (the shape of a
//!   per-customer routing file); disjoint, so each rule is only compared with the
//!   few others its index bucket holds (`src/policy/lint/index.rs`).
//! - `token_bands`: disjoint `request.input_tokens` bands of 10 tokens: no
//!   finite-set field to bucket by, so every earlier rule is a candidate and only
//!   the cheap footprint test separates them.
//!
//! `cargo bench --bench lint_scale`. Under `cargo test --all-targets` (no `--bench`)
//! it runs each case once at the small sizes only, to check it still runs.

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion};

use switchyard::policy::lint::lint_sources;
use switchyard::policy::{Registry, SourceMap};

fn tenants(n: usize) -> String {
    let mut s = String::from("route tenants {\n");
    for i in 0..n {
        s.push_str(&format!(
            "  rule t{i} when has(metadata(\"tenant\")) and metadata(\"tenant\") == \"t{i}\" {{ use \"gpt-4o\" }}\n"
        ));
    }
    s.push_str("  default use model\n}\n");
    s
}

fn token_bands(n: usize) -> String {
    let mut s = String::from("route bands {\n");
    for i in 0..n {
        let m = ["gpt-4o", "smollm", "gpt-4o-mini"][i % 3];
        s.push_str(&format!(
            "  rule b{i} when request.input_tokens >= {} and request.input_tokens < {} {{ use \"{m}\" }}\n",
            i * 10,
            i * 10 + 10
        ));
    }
    s.push_str("  default use model\n}\n");
    s
}

fn lint_once(text: &str) -> usize {
    let mut m = SourceMap::new();
    m.add("gen.policy", text);
    let out = lint_sources(&m, &Registry::example());
    assert!(out.set.is_some(), "the generated route checks");
    out.diagnostics.len()
}

fn main() {
    let bench = std::env::args().any(|a| a == "--bench");
    let sizes: &[usize] = if bench {
        &[1_000, 2_000, 10_000]
    } else {
        &[100]
    };
    if bench {
        // One timed run of the target case, printed beside criterion's statistics.
        for (name, text) in [
            ("tenants", tenants(10_000)),
            ("token_bands", token_bands(10_000)),
        ] {
            let t = Instant::now();
            let n = lint_once(&text);
            println!(
                "lint {name}/10000: {:.2} s, {n} diagnostic(s), {} KiB",
                t.elapsed().as_secs_f64(),
                text.len() / 1024
            );
        }
    }
    let mut c = Criterion::default().configure_from_args();
    let mut g = c.benchmark_group("lint");
    g.sample_size(10).measurement_time(Duration::from_secs(10));
    for &n in sizes {
        for (shape, text) in [("tenants", tenants(n)), ("token_bands", token_bands(n))] {
            g.bench_with_input(BenchmarkId::new(shape, n), &text, |b, t| {
                b.iter(|| black_box(lint_once(t)))
            });
        }
    }
    g.finish();
    c.final_summary();
}
