//! Rate-limit admission benchmark (issue 12): the in-memory check of one request
//! against six buckets (requests and tokens, global + key + org) and a key budget,
//! charging all of them, over 1,000 distinct keys. Target: at most 5 µs per request.
//!
//! Also the token count of the cost: `limits::tokens::count_with` (OpenAI's
//! `o200k_base`, tokenizing at most `limits::tokens::MAX_TOKENIZED_BYTES` and
//! extrapolating the rest) on a 1 KiB and a 64 KiB prompt, against the
//! 4-characters-per-token estimate used for other families.
//!
//! `cargo bench --bench limits` (release profile).

use std::hint::black_box;

use criterion::Criterion;

use switchyard::config::parse_str;
use switchyard::limits::Limiter;
use switchyard::routing::features::Caller;
use switchyard::routing::Registry;

const CONFIG: &str = "providers: { p: { kind: mock } }\nmodels: { m: { endpoints: [ { provider: p, model: x } ] } }\nlimits:\n  global: { requests_per_min: 100000000, tokens_per_min: 1000000000000 }\n  per_key: { requests_per_min: 100000000, tokens_per_min: 1000000000000 }\n  per_org: { requests_per_min: 100000000, tokens_per_min: 1000000000000 }\nbudgets:\n  per_key: { usd_per_day: 1000 }\n";

fn main() {
    let config = parse_str(CONFIG, None).expect("valid config");
    let registry = Registry::from_config(&config, |_| Some(0));
    let limiter = Limiter::new(&config, &registry);
    let callers: Vec<Caller> = (0..1000)
        .map(|i| Caller {
            api_key: Some(format!("key-{i:016x}").into()),
            org: Some(format!("org-{}", i % 10).into()),
            ..Caller::default()
        })
        .collect();
    let mut c = Criterion::default().configure_from_args();
    let mut i = 0usize;
    c.bench_function("admit/in_memory_6_buckets_1_budget", |b| {
        b.iter(|| {
            i = (i + 1) % callers.len();
            let now = limiter.now_ms();
            let permit = limiter.admit_local_at(black_box(&callers[i]), 1200, now, 1_700_000_000);
            black_box(permit.is_ok())
        })
    });
    let prose = "Rate limits keep one caller from starving the others; the gateway counts \
        each request's tokens before it is sent upstream, then settles with the usage. ";
    let chat = |bytes: usize| {
        let text: String = prose.chars().cycle().take(bytes).collect();
        let body = serde_json::json!({
            "model": "gpt-4o",
            "messages": [
                {"role": "system", "content": "You are terse."},
                {"role": "user", "content": text},
            ],
        });
        switchyard::api::ChatRequest::parse(&serde_json::to_vec(&body).unwrap()).unwrap()
    };
    let bpe = tiktoken_rs::o200k_base_singleton();
    for kib in [1usize, 64] {
        let req = chat(kib * 1024);
        c.bench_function(&format!("tokens/o200k_{kib}kib"), |b| {
            b.iter(|| black_box(switchyard::limits::tokens::count_with(bpe, black_box(&req))))
        });
        c.bench_function(&format!("tokens/estimate_{kib}kib"), |b| {
            b.iter(|| black_box(black_box(&req).estimated_input_tokens()))
        });
    }
    c.final_summary();
}
