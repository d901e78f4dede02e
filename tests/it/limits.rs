//! Rate limits and budgets (`limits:`, `budgets:`, `state:`) through the gateway.

use std::time::{Duration, Instant};

use crate::common::{chat, request_with, start_app, start_redis};

const MOCK: &str = "providers:\n  p: { kind: mock, pricing: { input_per_mtok: 1000, output_per_mtok: 1000 } }\nmodels:\n  m: { endpoints: [ { provider: p, model: x } ] }\n";

async fn send(url: &str, key: &str) -> crate::common::Reply {
    let auth = format!("Bearer {key}");
    request_with(
        "POST",
        url,
        &[("authorization", auth.as_str())],
        chat("m", false, r#","max_tokens":8"#),
    )
    .await
}

#[tokio::test]
async fn a_key_over_its_limit_gets_429_with_retry_after_and_ratelimit_headers() {
    let app = start_app(
        &format!("{MOCK}limits:\n  per_key: {{ requests_per_min: 6, burst_requests: 2, tokens_per_min: 100000 }}\n"),
        &[],
    )
    .await;
    let url = app.url("/v1/chat/completions");
    let ok = send(&url, "sk-a").await;
    assert_eq!(ok.status, 200, "{}", ok.text());
    assert_eq!(ok.headers["x-ratelimit-limit-requests"], "2");
    assert_eq!(ok.headers["x-ratelimit-remaining-requests"], "1");
    assert!(ok.headers.contains_key("x-ratelimit-remaining-tokens"));
    assert_eq!(send(&url, "sk-a").await.status, 200);
    let refused = send(&url, "sk-a").await;
    assert_eq!(refused.status, 429);
    let v = refused.json();
    assert_eq!(v["error"]["code"], "rate_limit_exceeded");
    assert_eq!(v["error"]["type"], "rate_limit_error");
    // 6 per minute: one more request in 10 s.
    let wait: u64 = refused.headers["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!((9..=10).contains(&wait), "Retry-After {wait}");
    assert_eq!(refused.headers["x-ratelimit-remaining-requests"], "0");
    assert_eq!(refused.headers["x-ratelimit-limit-requests"], "2");
    assert!(refused.headers["x-ratelimit-reset-requests"]
        .to_str()
        .unwrap()
        .ends_with('s'));
    // Never an upstream attempt, never blamed on the endpoint.
    assert!(!refused.headers.contains_key("x-switchyard-attempts"));
    // Another key has its own bucket.
    assert_eq!(send(&url, "sk-b").await.status, 200);
}

#[tokio::test]
async fn the_global_limit_binds_across_keys() {
    let app = start_app(
        &format!("{MOCK}limits:\n  global: {{ requests_per_min: 1, burst_requests: 3 }}\n  per_key: {{ requests_per_min: 60 }}\n"),
        &[],
    )
    .await;
    let url = app.url("/v1/chat/completions");
    for key in ["sk-1", "sk-2", "sk-3"] {
        assert_eq!(send(&url, key).await.status, 200);
    }
    let r = send(&url, "sk-4").await;
    assert_eq!(r.status, 429);
    assert!(r.json()["error"]["message"]
        .as_str()
        .unwrap()
        .contains("global"));
}

#[tokio::test]
async fn a_spent_budget_refuses_with_budget_exceeded() {
    // 1000 USD per 1M tokens: one request of some 20 tokens spends about 0.02 USD.
    let app = start_app(
        &format!("{MOCK}budgets:\n  per_key: {{ usd_per_day: 0.001 }}\n"),
        &[],
    )
    .await;
    let url = app.url("/v1/chat/completions");
    assert_eq!(send(&url, "sk-a").await.status, 200);
    let r = send(&url, "sk-a").await;
    assert_eq!(r.status, 429, "{}", r.text());
    let v = r.json();
    assert_eq!(v["error"]["code"], "budget_exceeded");
    assert!(v["error"]["message"].as_str().unwrap().contains("budget"));
    // Regression (outside attack, 2026-12-07): no Retry-After, so clients' retry
    // logic hammered a refusal that cannot change before the day ends.
    let wait: u64 = r.headers["retry-after"].to_str().unwrap().parse().unwrap();
    assert!((1..=86_400).contains(&wait), "until UTC midnight: {wait}");
    assert_eq!(send(&url, "sk-b").await.status, 200);
}

/// Inline keys `sk-own` (id `key-own`, with the entry's `own` fields) and `sk-def`
/// (id `key-def`, nothing of its own).
fn keys_with(own: &str) -> String {
    use switchyard::auth::keys::hash_secret;
    format!(
        "auth:\n  mode: keys\n  keys:\n    - {{ id: key-own, hash: '{}', {own} }}\n    - {{ id: key-def, hash: '{}' }}\n",
        hash_secret("sk-own"),
        hash_secret("sk-def")
    )
}

#[tokio::test]
async fn a_key_entry_with_its_own_limit_is_limited_by_it_and_another_by_the_default() {
    let own = "limits: { requests_per_min: 60, burst_requests: 1 }";
    let app = start_app(
        &format!(
            "{MOCK}{}limits:\n  per_key: {{ requests_per_min: 60, burst_requests: 3 }}\n",
            keys_with(own)
        ),
        &[],
    )
    .await;
    let url = app.url("/v1/chat/completions");
    let first = send(&url, "sk-own").await;
    assert_eq!(first.status, 200, "{}", first.text());
    assert_eq!(first.headers["x-ratelimit-limit-requests"], "1");
    let r = send(&url, "sk-own").await;
    assert_eq!(r.status, 429, "{}", r.text());
    assert_eq!(r.json()["error"]["code"], "rate_limit_exceeded");
    for _ in 0..3 {
        let r = send(&url, "sk-def").await;
        assert_eq!(r.status, 200, "{}", r.text());
        assert_eq!(r.headers["x-ratelimit-limit-requests"], "3");
    }
    assert_eq!(send(&url, "sk-def").await.status, 429);
}

#[tokio::test]
async fn a_key_entry_budget_applies_without_any_budgets_section() {
    // No `limits:` or `budgets:` at all: only key-own's entry sets a budget. 1000
    // USD per 1M tokens: one request of some 20 tokens spends about 0.02 USD.
    let app = start_app(
        &format!("{MOCK}{}", keys_with("budget: { usd_per_day: 0.001 }")),
        &[],
    )
    .await;
    let url = app.url("/v1/chat/completions");
    assert_eq!(send(&url, "sk-own").await.status, 200);
    let r = send(&url, "sk-own").await;
    assert_eq!(r.status, 429, "{}", r.text());
    assert_eq!(r.json()["error"]["code"], "budget_exceeded");
    for _ in 0..3 {
        let r = send(&url, "sk-def").await;
        assert_eq!(r.status, 200, "{}", r.text());
        assert!(!r.headers.contains_key("x-ratelimit-limit-requests"));
    }
}

#[tokio::test]
async fn an_answer_without_usage_still_spends_the_budget() {
    // The upstream's completions carry no `usage`: the spend is estimated (input
    // and output at about 4 characters a token), not skipped. 1000 USD per 1M
    // tokens: some 10 tokens spend about 0.01 USD, over the 0.001 budget.
    let (addr, hits) = crate::common::scripted_upstream(200, crate::common::COMPLETION);
    let app = start_app(
        &format!(
            "providers:\n  a: {{ kind: openai-compatible, base_url: http://{addr}/v1, pricing: {{ input_per_mtok: 1000, output_per_mtok: 1000 }} }}\nmodels:\n  m: {{ endpoints: [ {{ provider: a, model: x }} ] }}\nbudgets:\n  per_key: {{ usd_per_day: 0.001 }}\n"
        ),
        &[],
    )
    .await;
    let url = app.url("/v1/chat/completions");
    let r = send(&url, "sk-a").await;
    assert_eq!(r.status, 200, "{}", r.text());
    let r = send(&url, "sk-a").await;
    assert_eq!(r.status, 429, "{}", r.text());
    assert_eq!(r.json()["error"]["code"], "budget_exceeded");
    assert_eq!(hits.load(std::sync::atomic::Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_request_refused_before_any_upstream_attempt_gets_its_tokens_back() {
    // The context check refuses the first request after admission charged its
    // 900-token output cap; no provider saw it, so the tokens go back (the request
    // still counts against the requests bucket).
    let app = start_app(
        "providers:\n  p: { kind: mock }\nmodels:\n  m: { endpoints: [ { provider: p, model: x, context_window: 500 } ] }\nlimits:\n  per_key: { tokens_per_min: 1000, requests_per_min: 60 }\n",
        &[],
    )
    .await;
    let url = app.url("/v1/chat/completions");
    let post = |max: u32| {
        let url = url.clone();
        async move {
            request_with(
                "POST",
                &url,
                &[("authorization", "Bearer sk-a")],
                chat("m", false, &format!(r#","max_tokens":{max}"#)),
            )
            .await
        }
    };
    let r = post(900).await;
    assert_eq!(r.status, 400, "{}", r.text());
    assert_eq!(r.json()["error"]["code"], "context_length_exceeded");
    let r = post(400).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.headers["x-ratelimit-remaining-requests"], "58");
}

#[tokio::test]
async fn two_instances_sharing_redis_enforce_one_limit_and_fall_back_when_it_dies() {
    let mut redis = start_redis();
    let limits = "limits:\n  per_key: { requests_per_min: 1, burst_requests: 5 }\n";
    let state = |on_error: &str| {
        format!(
            "state: {{ redis: 'redis://127.0.0.1:{}', timeout_ms: 50, on_error: {on_error} }}\n",
            redis.port
        )
    };
    let open = start_app(&format!("{MOCK}{limits}{}", state("open")), &[]).await;
    let closed = start_app(&format!("{MOCK}{limits}{}", state("closed")), &[]).await;
    let urls = [
        open.url("/v1/chat/completions"),
        closed.url("/v1/chat/completions"),
    ];
    let mut admitted = 0;
    for i in 0..12 {
        let r = send(&urls[i % 2], "sk-shared").await;
        match r.status {
            200 => admitted += 1,
            429 => assert_eq!(r.json()["error"]["code"], "rate_limit_exceeded"),
            s => panic!("status {s}: {}", r.text()),
        }
    }
    assert_eq!(
        admitted, 5,
        "two instances together admit one limit's worth"
    );

    // Redis goes away: `open` falls back to its own buckets, `closed` refuses with
    // 503, each within a few deadlines, never hanging.
    let _ = redis.child.kill();
    let _ = redis.child.wait();
    let started = Instant::now();
    let r = send(&urls[0], "sk-shared").await;
    assert_eq!(
        r.status,
        200,
        "open falls back to in-memory buckets: {}",
        r.text()
    );
    let r = send(&urls[1], "sk-shared").await;
    assert_eq!(r.status, 503, "{}", r.text());
    assert_eq!(r.json()["error"]["code"], "rate_limiter_unavailable");
    // Found by the operator attack of 2026-12-07: it was typed `server_error`, where
    // the README's error table gives every 503 `api_error`.
    assert_eq!(r.json()["error"]["type"], "api_error");
    assert!(
        started.elapsed() < Duration::from_millis(1000),
        "fallback took {:?}",
        started.elapsed()
    );
    let metrics = crate::common::get(&open.url("/metrics")).await.text();
    assert!(
        crate::common::metric(&metrics, "switchyard_limit_backend_errors_total", &[]) >= 1.0,
        "backend errors are counted"
    );
}

/// A policy that moves a caller to a cheaper model once its budget runs low, on
/// the spend of real answers (`state` empty: in memory, else the Redis state).
async fn routes_to_the_cheap_model_near_budget(state: &str) {
    let config = format!(
        "providers:\n  p: {{ kind: mock, pricing: {{ input_per_mtok: 1000, output_per_mtok: 1000 }} }}\n  q: {{ kind: mock, pricing: {{ input_per_mtok: 1000, output_per_mtok: 1000 }} }}\nmodels:\n  big: {{ endpoints: [ {{ provider: p, model: x }} ] }}\n  small: {{ endpoints: [ {{ provider: q, model: y }} ] }}\nbudgets:\n  per_key: {{ usd_per_day: 0.1 }}\n{state}"
    );
    let policy = "route thrifty when request.model == \"big\" {\n  rule near_budget when request.budget_remaining < 0.05 {\n    use \"small\"\n  }\n  default use model\n}\n";
    let app = start_app(&config, &[("thrifty.policy", policy)]).await;
    let url = app.url("/v1/chat/completions");
    let auth = "Bearer sk-thrifty";
    let mut served = Vec::new();
    for _ in 0..40 {
        let r = request_with(
            "POST",
            &url,
            &[("authorization", auth)],
            chat("big", false, r#","max_tokens":8"#),
        )
        .await;
        if r.status == 429 {
            assert_eq!(r.json()["error"]["code"], "budget_exceeded", "{}", r.text());
            break;
        }
        assert_eq!(r.status, 200, "{}", r.text());
        let h = |n: &str| r.headers[n].to_str().unwrap().to_string();
        served.push((h("x-switchyard-endpoint"), h("x-switchyard-rule")));
    }
    assert_eq!(served[0], ("p/x".into(), "default".into()), "{served:?}");
    let first_cheap = served
        .iter()
        .position(|(ep, _)| ep == "q/y")
        .unwrap_or_else(|| panic!("never moved to the cheap model: {served:?}"));
    assert!(
        first_cheap >= 2,
        "moved before the budget ran low: {served:?}"
    );
    assert!(
        served[first_cheap..]
            .iter()
            .all(|(ep, rule)| ep == "q/y" && rule == "near_budget"),
        "{served:?}"
    );
    assert!(
        served.len() < 40,
        "the budget was never used up: {served:?}"
    );
}

#[tokio::test]
async fn a_policy_downgrades_to_a_cheaper_model_near_budget() {
    routes_to_the_cheap_model_near_budget("").await;
}

#[tokio::test]
async fn budget_remaining_comes_from_the_redis_admission_script_too() {
    let redis = start_redis();
    let state = format!(
        "state: {{ redis: 'redis://127.0.0.1:{}', timeout_ms: 500, on_error: closed }}\n",
        redis.port
    );
    routes_to_the_cheap_model_near_budget(&state).await;
}

#[tokio::test]
async fn openai_models_are_counted_with_their_tokenizer_and_others_estimated() {
    let app = start_app(
        "providers:\n  p: { kind: mock }\nmodels:\n  gpt-4o: { endpoints: [ { provider: p, model: x } ] }\n  alias: { endpoints: [ { provider: p, model: gpt-4o-mini } ] }\n  other: { endpoints: [ { provider: p, model: y } ] }\nlimits:\n  per_key: { tokens_per_min: 100000 }\n",
        &[],
    )
    .await;
    let url = app.url("/v1/chat/completions");
    let remaining = |r: &crate::common::Reply| -> u64 {
        r.headers["x-ratelimit-remaining-tokens"]
            .to_str()
            .unwrap()
            .parse()
            .unwrap()
    };
    // "hello there" (common::chat's message) with o200k_base, plus 3 per message and
    // 3 per request; and the 8 of max_tokens.
    let bpe = tiktoken_rs::o200k_base_singleton();
    let real = bpe.encode_ordinary("hello there").len() as u64 + 3 + 3 + 8;
    // The estimate: 11 characters at 4 per token, plus 4 per message.
    let estimate = 3 + 4 + 8;
    assert_ne!(real, estimate, "the test must tell them apart");
    for (model, key, want) in [
        ("gpt-4o", "sk-1", real),
        ("alias", "sk-2", real),
        ("other", "sk-3", estimate),
    ] {
        let auth = format!("Bearer {key}");
        let r = request_with(
            "POST",
            &url,
            &[("authorization", auth.as_str())],
            chat(model, false, r#","max_tokens":8"#),
        )
        .await;
        assert_eq!(r.status, 200, "{}", r.text());
        assert_eq!(remaining(&r), 100_000 - want, "{model}");
    }
}

#[tokio::test]
async fn a_redis_that_never_answers_is_bounded_by_the_deadline() {
    // A listener that accepts and never replies (a hung Redis, or a black-holed
    // network path): every admission still ends within a few `timeout_ms`, with
    // `on_error` deciding, instead of waiting on the connection.
    let hung = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = hung.local_addr().unwrap().port();
    let held = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let keep = held.clone();
    std::thread::spawn(move || {
        for s in hung.incoming().flatten() {
            keep.lock().unwrap().push(s);
        }
    });
    let limits = "limits:\n  per_key: { requests_per_min: 1, burst_requests: 1 }\n";
    let state = |on_error: &str| {
        format!("state: {{ redis: 'redis://127.0.0.1:{port}', timeout_ms: 50, on_error: {on_error} }}\n")
    };
    let open = start_app(&format!("{MOCK}{limits}{}", state("open")), &[]).await;
    let closed = start_app(&format!("{MOCK}{limits}{}", state("closed")), &[]).await;
    let started = Instant::now();
    let r = send(&open.url("/v1/chat/completions"), "sk-a").await;
    assert_eq!(r.status, 200, "{}", r.text());
    // The fallback's own bucket (burst 1) is now empty.
    let r = send(&open.url("/v1/chat/completions"), "sk-a").await;
    assert_eq!(r.status, 429, "{}", r.text());
    let r = send(&closed.url("/v1/chat/completions"), "sk-a").await;
    assert_eq!(r.status, 503, "{}", r.text());
    assert_eq!(r.json()["error"]["code"], "rate_limiter_unavailable");
    assert_eq!(r.headers["retry-after"], "1");
    assert!(
        started.elapsed() < Duration::from_millis(1500),
        "admission waited {:?} on a silent Redis",
        started.elapsed()
    );
}

#[tokio::test]
async fn spend_without_caller_labels_is_one_series_per_model() {
    // `auth.mode: none`: every new bearer token is a new key id. With
    // `metrics_caller_labels: false` the spend metric must not grow a series per
    // token, as the cost metric does not.
    let gw = crate::common::serve(&format!(
        "server: {{ metrics_caller_labels: false }}\n{MOCK}budgets:\n  per_key: {{ usd_per_day: 100 }}\n"
    ));
    for key in ["sk-one", "sk-two", "sk-three"] {
        let r = send(&gw.url("/v1/chat/completions"), key).await;
        assert_eq!(r.status, 200, "{}", r.text());
    }
    let m = crate::common::get(&gw.url("/metrics")).await.text();
    let spend: Vec<&str> = m
        .lines()
        .filter(|l| l.starts_with("switchyard_spend_usd_total{"))
        .collect();
    assert_eq!(spend.len(), 1, "{spend:?}");
    assert!(
        spend[0].contains("key=\"all\"") && spend[0].contains("org=\"all\""),
        "{spend:?}"
    );
}

// Regression (outside attack, 2026-12-07): a request whose every upstream attempt
// failed (here the provider is unreachable) kept its whole token charge, input
// estimate and output cap: eleven 502s locked a key out for hours with no token
// used. Expected: no answer, no tokens; the charge goes back.
#[tokio::test]
async fn a_request_that_failed_upstream_gives_its_token_charge_back() {
    let dead = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let app = start_app(
        &format!("providers:\n  p: {{ kind: mock }}\n  gone: {{ kind: openai-compatible, base_url: 'http://127.0.0.1:{dead}/v1' }}\nmodels:\n  m: {{ endpoints: [ {{ provider: p, model: x }} ] }}\n  d: {{ endpoints: [ {{ provider: gone, model: x }} ] }}\nlimits:\n  per_key: {{ tokens_per_min: 6, burst_tokens: 1000 }}\n"),
        &[],
    )
    .await;
    let url = app.url("/v1/chat/completions");
    let auth = [("authorization", "Bearer sk-a")];
    for _ in 0..4 {
        let r = request_with(
            "POST",
            &url,
            &auth,
            chat("d", false, r#","max_tokens":400"#),
        )
        .await;
        assert_eq!(r.status, 502, "unreachable, not refused: {}", r.text());
    }
    let r = request_with(
        "POST",
        &url,
        &auth,
        chat("m", false, r#","max_tokens":400"#),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    let remaining: u64 = r.headers["x-ratelimit-remaining-tokens"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(
        remaining > 500,
        "only this request's charge is out: {remaining}"
    );
}

/// Sends `n` requests from one key at once for model `model` (a name of this test's
/// own: the metrics registry is the test process's) to a mock answering after 300
/// ms, under a daily budget of 0.05 USD (`state`: empty for in memory, else the
/// Redis state); returns how many were answered and the spend the gateway counted.
async fn concurrent_spend(state: &str, model: &str, n: usize) -> (usize, f64) {
    let app = start_app(
        &format!("providers:\n  p: {{ kind: mock, mock: {{ latency_ms: 300, completion_tokens: 8 }}, pricing: {{ input_per_mtok: 1000, output_per_mtok: 1000 }} }}\nmodels:\n  {model}: {{ endpoints: [ {{ provider: p, model: x }} ] }}\nbudgets:\n  per_key: {{ usd_per_day: 0.05 }}\n{state}"),
        &[],
    )
    .await;
    let url = app.url("/v1/chat/completions");
    let sends = (0..n).map(|_| {
        request_with(
            "POST",
            &url,
            &[("authorization", "Bearer sk-a")],
            chat(model, false, r#","max_tokens":8"#),
        )
    });
    let replies = futures_util::future::join_all(sends).await;
    let mut ok = 0;
    for r in &replies {
        match r.status {
            200 => ok += 1,
            429 => assert_eq!(r.json()["error"]["code"], "budget_exceeded", "{}", r.text()),
            s => panic!("{s}: {}", r.text()),
        }
    }
    let metrics = request_with("GET", &app.url("/metrics"), &[], String::new())
        .await
        .text();
    let spent = crate::common::metric(&metrics, "switchyard_spend_usd_total", &[("model", model)]);
    (ok, spent)
}

// Regression (outside attack, 2026-12-07): the budget was read at admission but
// nothing was reserved of it, so every request in flight at once found it unspent:
// 100 concurrent requests under a 0.05 USD daily budget all ran and spent 1.50 USD.
// Expected: a request's most possible spend (input estimate and output cap at the
// model's dearest endpoint) counts against the budget from admission, so only the
// request that crosses it runs on. Each request here reserves about 0.015 USD.
#[tokio::test]
async fn concurrent_requests_cannot_all_pass_one_budget() {
    let (ok, spent) = concurrent_spend("", "budgeted-memory", 40).await;
    assert!((1..=4).contains(&ok), "{ok} answered");
    assert!(spent > 0.0 && spent < 0.1, "spent {spent} by {ok}");
}

#[tokio::test]
async fn concurrent_requests_cannot_all_pass_one_budget_in_redis() {
    let redis = start_redis();
    let state = format!(
        "state: {{ redis: 'redis://127.0.0.1:{}', timeout_ms: 500, on_error: closed }}\n",
        redis.port
    );
    let (ok, spent) = concurrent_spend(&state, "budgeted-redis", 40).await;
    assert!((1..=4).contains(&ok), "{ok} answered");
    assert!(spent > 0.0 && spent < 0.1, "spent {spent} by {ok}");
}

/// Sends `FLUSHALL` to the Redis on `port` (the state lost, as a restart without
/// persistence loses it).
fn flush_redis(port: u16) {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.write_all(b"*1\r\n$8\r\nFLUSHALL\r\n").unwrap();
    let mut ok = [0u8; 5];
    s.read_exact(&mut ok).unwrap();
    assert_eq!(&ok, b"+OK\r\n");
}

// Regression (outside attack, 2026-12-07): Redis lost its keys (a restart) while
// requests were in flight; their settlements then took their reservations off an
// empty key, which went negative, and the budget let that much more through.
// Expected: reservations never below zero, so the spend after the loss still
// stops at the budget.
#[tokio::test]
async fn redis_losing_its_keys_mid_flight_does_not_open_the_budget() {
    let redis = start_redis();
    let app = start_app(
        &format!("providers:\n  p: {{ kind: mock, mock: {{ latency_ms: 400, completion_tokens: 8 }}, pricing: {{ input_per_mtok: 1000, output_per_mtok: 1000 }} }}\nmodels:\n  held: {{ endpoints: [ {{ provider: p, model: x }} ] }}\nbudgets:\n  per_key: {{ usd_per_day: 0.05 }}\nstate: {{ redis: 'redis://127.0.0.1:{}', timeout_ms: 500, on_error: closed }}\n", redis.port),
        &[],
    )
    .await;
    let url = app.url("/v1/chat/completions");
    let one = || {
        request_with(
            "POST",
            &url,
            &[("authorization", "Bearer sk-a")],
            chat("held", false, r#","max_tokens":8"#),
        )
    };
    let in_flight = futures_util::future::join_all((0..3).map(|_| one()));
    let flush = async {
        tokio::time::sleep(Duration::from_millis(150)).await;
        flush_redis(redis.port);
    };
    let (first, ()) = tokio::join!(in_flight, flush);
    assert!(
        first.iter().all(|r| r.status == 200),
        "admitted before the loss"
    );
    // Let the settlements land, then spend until refused.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut more = 0;
    for _ in 0..20 {
        let r = one().await;
        if r.status == 429 {
            break;
        }
        assert_eq!(r.status, 200, "{}", r.text());
        more += 1;
    }
    // Each request spends about 0.015 USD: after the loss the key holds the three
    // settled ones (0.045), so at most the one that crosses runs.
    assert!(more <= 1, "{more} more requests after the loss");
}

// Regression (outside attack, 2026-12-07): a model name only a policy routes
// (`auto`, no endpoints of its own) reserved nothing, so 30 concurrent requests
// all passed a budget that 4 fill. Expected: such a name reserves at the dearest
// endpoint of all.
#[tokio::test]
async fn a_name_only_a_policy_routes_still_reserves_its_budget() {
    let app = start_app(
        "providers:\n  p: { kind: mock, mock: { latency_ms: 300, completion_tokens: 8 }, pricing: { input_per_mtok: 1000, output_per_mtok: 1000 } }\nmodels:\n  routed-m: { endpoints: [ { provider: p, model: x } ] }\nbudgets:\n  per_key: { usd_per_day: 0.05 }\n",
        &[("auto.policy", "route auto when request.model == \"auto\" {\n  default use \"routed-m\"\n}\n")],
    )
    .await;
    let url = app.url("/v1/chat/completions");
    let sends = (0..30).map(|_| {
        request_with(
            "POST",
            &url,
            &[("authorization", "Bearer sk-a")],
            chat("auto", false, r#","max_tokens":8"#),
        )
    });
    let replies = futures_util::future::join_all(sends).await;
    let ok = replies.iter().filter(|r| r.status == 200).count();
    assert!((1..=4).contains(&ok), "{ok} answered");
}

// Regression (outside attack, 2026-12-07): a client that hung up while its request
// was with the provider was charged nothing (the permit, dropped unsettled, gave
// its reservation back), though the provider had the request. Expected: its input
// estimate is spent, as a timeout's is kept.
#[tokio::test]
async fn a_client_that_leaves_mid_attempt_spends_its_input_estimate() {
    let app = start_app(
        "providers:\n  p: { kind: mock, mock: { latency_ms: 2000 }, pricing: { input_per_mtok: 1000, output_per_mtok: 1000 } }\nmodels:\n  gone-m: { endpoints: [ { provider: p, model: x } ] }\nbudgets:\n  per_key: { usd_per_day: 100 }\n",
        &[],
    )
    .await;
    send_and_hang_up(
        &app.url("/v1/chat/completions"),
        &chat("gone-m", false, r#","max_tokens":8"#),
        300,
    )
    .await;
    let mut spent = 0.0;
    for _ in 0..50 {
        tokio::time::sleep(Duration::from_millis(50)).await;
        let metrics = request_with("GET", &app.url("/metrics"), &[], String::new())
            .await
            .text();
        spent = crate::common::metric(
            &metrics,
            "switchyard_spend_usd_total",
            &[("model", "gone-m")],
        );
        if spent > 0.0 {
            break;
        }
    }
    assert!(spent > 0.0, "the input estimate was not spent");
}

/// `redis-cli -p PORT ARGS...`'s output.
fn redis_cli(port: u16, args: &[&str]) -> String {
    let out = std::process::Command::new("redis-cli")
        .arg("-p")
        .arg(port.to_string())
        .args(args)
        .output()
        .expect("redis-cli (Debian: redis-tools, which redis-server depends on)");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

// Regression (outside attack, 2026-12-07): a client that hung up while the Redis
// admission call was in flight dropped the request before any permit existed;
// Redis made the reservation anyway and nothing released it, so the key was
// refused as "held by requests in flight" for the reservation's whole life (about
// 89 minutes with the defaults). Expected: released by id once Redis answers.
#[tokio::test]
async fn a_client_gone_during_the_admission_call_leaves_no_reservation() {
    let redis = start_redis();
    let app = start_app(
        &format!("providers:\n  p: {{ kind: mock, pricing: {{ input_per_mtok: 1000, output_per_mtok: 1000 }} }}\nmodels:\n  admit-m: {{ endpoints: [ {{ provider: p, model: x }} ] }}\nbudgets:\n  per_key: {{ usd_per_day: 1.0 }}\nstate: {{ redis: 'redis://127.0.0.1:{}', timeout_ms: 3000, on_error: closed }}\n", redis.port),
        &[],
    )
    .await;
    // One request first, so the connection to Redis is made and the script loaded.
    let r = request_with(
        "POST",
        &app.url("/v1/chat/completions"),
        &[("authorization", "Bearer sk-a")],
        chat("admit-m", false, r#","max_tokens":8"#),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    let port = redis.port;
    // Redis busy for 0.8 s (a script spinning on its clock: DEBUG SLEEP is off by
    // default), so the admission call is in flight when the client hangs up.
    let busy = "local s = redis.call('TIME') local t0 = s[1] * 1000000 + s[2] while true do local n = redis.call('TIME') if n[1] * 1000000 + n[2] - t0 > 800000 then break end end return 1";
    let sleeper = std::thread::spawn(move || redis_cli(port, &["EVAL", busy, "0"]));
    std::thread::sleep(Duration::from_millis(100));
    send_and_hang_up(
        &app.url("/v1/chat/completions"),
        &chat("admit-m", false, r#","max_tokens":500"#),
        200,
    )
    .await;
    sleeper.join().unwrap();
    let mut held = String::new();
    for _ in 0..40 {
        tokio::time::sleep(Duration::from_millis(50)).await;
        held = redis_cli(port, &["--scan", "--pattern", "sy:{sy}:hold:*"])
            .lines()
            .map(|k| redis_cli(port, &["HLEN", k]).trim().to_string())
            .collect::<Vec<_>>()
            .join(",");
        // Only the `~sum` field left in each hash: no reservation.
        if held
            .split(',')
            .all(|n| n == "1" || n == "0" || n.is_empty())
        {
            break;
        }
    }
    assert!(
        held.split(',')
            .all(|n| n == "1" || n == "0" || n.is_empty()),
        "reservations left: {held}"
    );
}

/// POSTs `body` to `url` as key `sk-a` over a connection of its own, and closes it
/// `ms` later without reading the answer (a client that hangs up).
async fn send_and_hang_up(url: &str, body: &str, ms: u64) {
    use tokio::io::AsyncWriteExt as _;
    let rest = url.trim_start_matches("http://");
    let (addr, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    let req = format!(
        "POST {path} HTTP/1.1\r\nhost: x\r\nauthorization: Bearer sk-a\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes()).await.unwrap();
    tokio::time::sleep(Duration::from_millis(ms)).await;
}

// Regression (outside attack, 2026-12-07): one key of the gateway's in Redis holding
// another type (another program's `SET`) made the admission script fail with
// WRONGTYPE, which the limiter took for Redis being down: it left Redis alone for a
// second, and each retry by that key's caller restarted the pause, so with
// `on_error: closed` every tenant got 503s (98% of requests) for as long as the key
// stayed, and with `open` every tenant fell back to per-instance limits. A spend
// that was not a number made every settlement fail, so reservations piled up.
// Expected: the scripts delete such a key of theirs and go on; no tenant is
// refused, and the keys hold their own types again.
#[tokio::test]
async fn a_key_of_another_type_in_redis_is_repaired_and_fails_no_tenant() {
    let redis = start_redis();
    let app = start_app(
        &format!(
            "{MOCK}limits:\n  per_key: {{ requests_per_min: 600, burst_requests: 100 }}\nbudgets:\n  per_key: {{ usd_per_day: 100 }}\nstate: {{ redis: 'redis://127.0.0.1:{}', timeout_ms: 500, on_error: closed }}\n",
            redis.port
        ),
        &[],
    )
    .await;
    let url = app.url("/v1/chat/completions");
    assert_eq!(send(&url, "sk-poisoned").await.status, 200);
    // Settlements go to Redis after the answer.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let keys = redis_cli(redis.port, &["--scan", "--pattern", "*"]);
    let ours: Vec<&str> = keys
        .lines()
        .filter(|k| k.contains(":rl:") || k.contains(":spend:") || k.contains(":hold:"))
        .collect();
    assert!(
        ours.len() >= 3,
        "bucket, spend and reservation keys in {keys}"
    );
    for k in &ours {
        redis_cli(redis.port, &["DEL", k]);
        // A string where a hash is kept, text where a number is.
        redis_cli(redis.port, &["SET", k, "planted-by-another-program"]);
    }
    for i in 0..10 {
        for key in ["sk-poisoned", "sk-healthy"] {
            let r = send(&url, key).await;
            assert_eq!(r.status, 200, "request {i} of {key}: {}", r.text());
        }
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    for k in ours {
        let kind = redis_cli(redis.port, &["TYPE", k]);
        let want = if k.contains(":spend:") {
            "string"
        } else {
            "hash"
        };
        assert!(kind.trim() == want || kind.trim() == "none", "{k}: {kind}");
        if k.contains(":spend:") {
            let v = redis_cli(redis.port, &["GET", k]);
            assert!(v.trim().parse::<f64>().is_ok(), "{k} holds {v}");
        }
    }
    let held = redis_cli(redis.port, &["--scan", "--pattern", "*:hold:*"]);
    for h in held.lines() {
        let fields = redis_cli(redis.port, &["HKEYS", h]);
        assert!(
            fields.lines().all(|f| f == "~sum"),
            "reservations left in {h}: {fields}"
        );
    }
}

// Regression (outside attack, 2026-12-07): spend settled through Redis never reached
// an instance's own ledger, so when Redis became unreachable (`on_error: open`)
// each instance started from zero and a budget the instances had used up together
// came back whole on every one of them (three instances spent 3.1 times a budget).
// Expected: each instance falls back to at least the spend Redis last reported.
#[tokio::test]
async fn a_budget_spent_through_redis_stays_spent_when_redis_goes_away() {
    let mut redis = start_redis();
    let config = format!(
        "{MOCK}budgets:\n  per_key: {{ usd_per_day: 0.1 }}\nstate: {{ redis: 'redis://127.0.0.1:{}', timeout_ms: 500, on_error: open }}\n",
        redis.port
    );
    let a = start_app(&config, &[]).await;
    let b = start_app(&config, &[]).await;
    let urls = [a.url("/v1/chat/completions"), b.url("/v1/chat/completions")];
    let mut refused = [false, false];
    for i in 0..60 {
        let r = send(&urls[i % 2], "sk-spender").await;
        match r.status {
            200 => {}
            429 => {
                assert_eq!(r.json()["error"]["code"], "budget_exceeded", "{}", r.text());
                refused[i % 2] = true;
            }
            s => panic!("status {s}: {}", r.text()),
        }
        if refused == [true, true] {
            break;
        }
        // Settlements go to Redis after the answer.
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(refused, [true, true], "the budget was never used up");
    let _ = redis.child.kill();
    let _ = redis.child.wait();
    for url in &urls {
        let r = send(url, "sk-spender").await;
        assert_eq!(
            r.status,
            429,
            "the spent budget came back on an instance: {}",
            r.text()
        );
    }
}

/// A TCP proxy on 127.0.0.1 in front of `target` that holds every piece of Redis's
/// answers for `delay`, and a new connection's first answer for `first` more (a
/// Redis a few tens of ms away, whose connection handshake takes round trips).
async fn slow_proxy(target: u16, delay: Duration, first: Duration) -> u16 {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((client, _)) = listener.accept().await {
            let Ok(server) = tokio::net::TcpStream::connect(("127.0.0.1", target)).await else {
                continue;
            };
            let (mut cr, mut cw) = client.into_split();
            let (mut sr, mut sw) = server.into_split();
            tokio::spawn(async move {
                let _ = tokio::io::copy(&mut cr, &mut sw).await;
            });
            tokio::spawn(async move {
                let mut buf = vec![0u8; 65536];
                let mut extra = first;
                while let Ok(n) = sr.read(&mut buf).await {
                    if n == 0 {
                        break;
                    }
                    tokio::time::sleep(delay + std::mem::take(&mut extra)).await;
                    if cw.write_all(&buf[..n]).await.is_err() {
                        break;
                    }
                }
            });
        }
    });
    port
}

// Regression (outside attack, 2026-12-07): the connection to Redis was made inside
// a request's Redis call and given up with it at `timeout_ms`; a Redis whose
// connection handshake takes longer than the default 50 ms (a few round trips to a
// Redis tens of ms away) never connected, and with `on_error: closed` every request
// was refused. Expected: the connection is made by a task of its own, and requests
// are admitted through Redis once it is up.
#[tokio::test]
async fn a_redis_whose_handshake_outlasts_the_deadline_still_connects() {
    let redis = start_redis();
    // The handshake's answer takes 90 ms, each later answer 10 ms.
    let port = slow_proxy(
        redis.port,
        Duration::from_millis(10),
        Duration::from_millis(80),
    )
    .await;
    let app = start_app(
        &format!(
            "{MOCK}limits:\n  per_key: {{ requests_per_min: 600, burst_requests: 100 }}\nstate: {{ redis: 'redis://127.0.0.1:{port}', timeout_ms: 50, on_error: closed }}\n"
        ),
        &[],
    )
    .await;
    let url = app.url("/v1/chat/completions");
    let mut admitted = 0;
    for _ in 0..40 {
        if send(&url, "sk-far").await.status == 200 {
            admitted += 1;
        }
        if admitted >= 3 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        admitted >= 3,
        "never admitted through a Redis whose handshake takes 90 ms"
    );
    let keys = redis_cli(redis.port, &["--scan", "--pattern", "*:rl:*"]);
    assert!(!keys.trim().is_empty(), "the buckets are not in Redis");
}

/// Found by the admission attack of 2026-12-08: a bucket of rate 0 with a burst
/// (`requests_per_min: 0, burst_requests: N`: "N requests in all") was kept in Redis
/// with a 24 h expiry, after which it came back full, so a key got N requests a day;
/// in memory its `x-ratelimit-reset-requests` read `5124095576030h25m52s` (the
/// "never" value printed as a duration), and the refusal said the request needed more
/// than the limit allows at once. Now the key has no expiry, the reset header is left
/// out, and the refusal says the limit is used up.
#[tokio::test]
async fn a_never_refilled_bucket_came_back_full_after_a_day_in_redis() {
    let redis = start_redis();
    let limits = "limits:\n  per_key: { requests_per_min: 0, burst_requests: 2 }\n";
    let state = format!(
        "state: {{ redis: 'redis://127.0.0.1:{}', timeout_ms: 2000, on_error: closed }}\n",
        redis.port
    );
    for shared in [false, true] {
        let config = format!("{MOCK}{limits}{}", if shared { state.as_str() } else { "" });
        let app = start_app(&config, &[]).await;
        let url = app.url("/v1/chat/completions");
        for left in ["1", "0"] {
            let r = send(&url, "sk-once").await;
            assert_eq!(r.status, 200, "{shared}: {}", r.text());
            assert_eq!(r.headers["x-ratelimit-remaining-requests"], left);
            assert!(
                !r.headers.contains_key("x-ratelimit-reset-requests"),
                "{shared}: {:?}",
                r.headers
            );
        }
        let r = send(&url, "sk-once").await;
        assert_eq!(r.status, 429, "{shared}: {}", r.text());
        let message = r.json()["error"]["message"].as_str().unwrap().to_string();
        assert!(message.contains("used up"), "{shared}: {message}");
        assert!(!r.headers.contains_key("retry-after"), "{shared}");
        assert!(!r.headers.contains_key("x-ratelimit-reset-requests"));
        if shared {
            let keys = redis_cli(redis.port, &["--scan", "--pattern", "sy:{sy}:rl:*"]);
            let keys: Vec<&str> = keys.lines().filter(|k| !k.is_empty()).collect();
            assert_eq!(keys.len(), 1, "{keys:?}");
            assert_eq!(redis_cli(redis.port, &["PTTL", keys[0]]).trim(), "-1");
        }
    }
}

/// Found by the admission attack of 2026-12-08: a key whose own limit was raised in
/// the key file after it ran dry was refused (429, `Retry-After: 1`) until the new
/// rate had refilled a unit, in memory; with Redis it was admitted at once. A raised
/// capacity's room is there at once on both backends.
#[tokio::test]
async fn a_raised_key_limit_was_refused_until_the_new_rate_refilled() {
    use switchyard::auth::keys::hash_secret;
    let redis = start_redis();
    let state = format!(
        "state: {{ redis: 'redis://127.0.0.1:{}', timeout_ms: 2000, on_error: closed }}\n",
        redis.port
    );
    let entry = |per_min: u64| {
        format!(
            "keys:\n  - {{ id: key-raised, hash: '{}', limits: {{ requests_per_min: {per_min} }} }}\n",
            hash_secret("sk-raised")
        )
    };
    for shared in [false, true] {
        let keys = tempfile::tempdir().unwrap();
        let file = keys.path().join("keys.yaml");
        std::fs::write(&file, entry(2)).unwrap();
        let config = format!(
            "{MOCK}auth: {{ mode: keys, key_file: '{}' }}\n{}",
            file.display(),
            if shared { state.as_str() } else { "" }
        );
        let app = start_app(&config, &[]).await;
        let url = app.url("/v1/chat/completions");
        for _ in 0..2 {
            let r = send(&url, "sk-raised").await;
            assert_eq!(r.status, 200, "{shared}: {}", r.text());
        }
        assert_eq!(send(&url, "sk-raised").await.status, 429, "{shared}");
        let tmp = keys.path().join("keys.yaml.new");
        std::fs::write(&tmp, entry(600_000)).unwrap();
        std::fs::rename(&tmp, &file).unwrap();
        // The first request one poll after the last look reads the file again.
        tokio::time::sleep(switchyard::auth::FILE_POLL * 3).await;
        let r = send(&url, "sk-raised").await;
        assert_eq!(r.status, 200, "{shared}: {}", r.text());
        assert_eq!(
            r.headers["x-ratelimit-limit-requests"], "600000",
            "{shared}"
        );
    }
}
