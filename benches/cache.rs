//! Cache lookup benchmark (issue 14): `Cache::get` in L1 among 1,000,000 entries
//! (target: median ≤ 5 µs) against a linear scan of the same entries doing the same
//! work (every entry's scope and Hamming distance, then the closest verified), in the
//! same run (target: the banded lookup ≥ 100× faster). Also the key of a typical
//! prompt (normalization + SimHash), which the gateway computes once per request.
//!
//! Entries: prompts of 8–16 words from a 600-word vocabulary (so texts share
//! n-grams the way real prompts do), spread over 64 scopes. Queries: stored prompts
//! with a word swapped for a listed synonym (a semantic hit at distance 0 through the
//! index, not the identical-text path), and prompts never stored (a miss).
//!
//! `cargo bench --bench cache` (release profile); medians in
//! `target/criterion/cache_*/new/estimates.json`.

use std::future::Future;
use std::hint::black_box;
use std::pin::pin;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use bytes::Bytes;
use criterion::Criterion;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use switchyard::cache::{verify, Cache, Settings};

/// Entries stored under `cargo bench` (the million).
const ENTRIES: usize = 1_000_000;
/// Entries stored when `cargo test --all-targets` smoke-runs this binary in the
/// debug profile (no `--bench`): enough to exercise every path, fast enough for CI
/// (storing the million in debug took over 4 minutes there).
const SMOKE_ENTRIES: usize = 10_000;
const SCOPES: u128 = 64;

/// Runs a future that never waits (L1 only, no Redis) to completion.
fn ready<F: Future>(f: F) -> F::Output {
    let mut f = pin!(f);
    match f.as_mut().poll(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready(v) => v,
        Poll::Pending => panic!("an L1-only cache call waited"),
    }
}

fn prompt(rng: &mut SmallRng, vocab: &[String]) -> String {
    let n = rng.random_range(8..=16);
    let mut words: Vec<&str> = (0..n)
        .map(|_| vocab[rng.random_range(0..vocab.len())].as_str())
        .collect();
    // Every prompt starts with a verb that has a listed synonym.
    words.insert(0, "explain");
    words.join(" ")
}

fn main() {
    let entries = if std::env::args().any(|a| a == "--bench") {
        ENTRIES
    } else {
        SMOKE_ENTRIES
    };
    let mut rng = SmallRng::seed_from_u64(14);
    let vocab: Vec<String> = (0..600)
        .map(|i| {
            let len = rng.random_range(3..=9);
            let mut w: String = (0..len)
                .map(|_| char::from(b'a' + rng.random_range(0..26u8)))
                .collect();
            w.push_str(&(i % 7).to_string().repeat(usize::from(i % 5 == 0)));
            w
        })
        .collect();
    let cache = Cache::new(&Settings {
        capacity: entries as u64 + 1000,
        ..Settings::default()
    })
    .expect("cache");
    let payload = Bytes::from_static(b"{\"choices\":[]}");
    let mut stored = Vec::with_capacity(1000);
    eprintln!("storing {entries} entries...");
    for i in 0..entries {
        let text = prompt(&mut rng, &vocab);
        let scope = i as u128 % SCOPES;
        ready(cache.put(
            &cache.key(scope, &text, false),
            payload.clone(),
            Duration::from_secs(3600),
        ));
        if i % (entries / 1000) == 0 {
            stored.push((scope, text));
        }
    }
    cache.l1().settle();
    eprintln!(
        "{} entries in L1, {} indexed",
        cache.l1().len(),
        cache.l1().index().len()
    );
    let hits: Vec<_> = stored
        .iter()
        .map(|(s, t)| cache.key(*s, &t.replacen("explain", "describe", 1), false))
        .collect();
    let misses: Vec<_> = (0..1000)
        .map(|i| cache.key(i as u128 % SCOPES, &prompt(&mut rng, &vocab), false))
        .collect();
    assert!(hits
        .iter()
        .all(|k| ready(cache.get(k)).is_some_and(|h| h.distance == Some(0))));

    let mut c = Criterion::default().configure_from_args();
    let mut i = 0usize;
    c.bench_function("cache_get/semantic_hit_1m", |b| {
        b.iter(|| {
            i = (i + 1) % hits.len();
            black_box(ready(cache.get(black_box(&hits[i]))).is_some())
        })
    });
    c.bench_function("cache_get/miss_1m", |b| {
        b.iter(|| {
            i = (i + 1) % misses.len();
            black_box(ready(cache.get(black_box(&misses[i]))).is_some())
        })
    });
    let mut group = c.benchmark_group("cache_scan");
    group.sample_size(10);
    group.bench_function("linear_scan_semantic_hit_1m", |b| {
        b.iter(|| {
            i = (i + 1) % hits.len();
            let k = &hits[i];
            let found = cache
                .l1()
                .index()
                .scan(k.scope, k.simhash(), Settings::default().tau)
                .into_iter()
                .find_map(|(_, m)| {
                    cache
                        .l1()
                        .get(m.scope, m.id)
                        .filter(|e| e.canon.as_ref().is_some_and(|c| verify::same(c, k.canon())))
                });
            black_box(found.is_some())
        })
    });
    group.finish();
    let text = "Explain how TCP congestion control reacts to packet loss on a long, fat network.";
    c.bench_function("cache_key/80_chars", |b| {
        b.iter(|| black_box(cache.key(1, black_box(text), false).simhash()))
    });
    c.final_summary();
}
