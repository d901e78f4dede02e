//! Fallback-chain bounds, in process: `Retry-After` honoured within the retry budget,
//! `total_ms` bounding the wait for headers, the configurable attempt cap, the
//! aggregate error, and failures after the first byte in the error metric.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use crate::common::*;

fn two_endpoints(a: std::net::SocketAddr, b: &str, server: &str, extra: &str) -> String {
    format!(
        "server: {{ {server} }}\nproviders:\n  p: {{ kind: openai-compatible, base_url: http://{a}/v1{extra} }}\n  q: {b}\nmodels:\n  m: {{ endpoints: [ {{ provider: p, model: x, priority: 1 }}, {{ provider: q, model: x, priority: 2 }} ] }}\n"
    )
}

const RETRY: &str = r#"
route r when request.model == "m" {
  default use endpoint "p/x"
  fallback endpoint "q/x" retries 1
}
"#;

#[tokio::test]
async fn a_429_with_retry_after_is_retried_after_the_wait() {
    let (a, hits) = sequence_upstream(vec![
        (
            429,
            "retry-after: 1\r\n",
            r#"{"error":{"message":"slow down"}}"#,
        ),
        (200, "", COMPLETION),
    ]);
    let gw = start_app(
        &two_endpoints(a, "{ kind: mock }", "", ""),
        &[("r.policy", RETRY)],
    )
    .await;
    let t = Instant::now();
    let r = post(&gw.url("/v1/chat/completions"), &chat("m", false, "")).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(
        r.headers["x-switchyard-endpoint"], "p/x",
        "retried where it was told to wait"
    );
    assert_eq!(hits.load(Ordering::SeqCst), 2);
    assert!(
        t.elapsed() >= Duration::from_millis(950),
        "waited {:?}",
        t.elapsed()
    );
}

#[tokio::test]
async fn a_retry_after_longer_than_the_budget_moves_on_at_once() {
    let (a, hits) = sequence_upstream(vec![(
        429,
        "retry-after-ms: 20000\r\n",
        r#"{"error":{"message":"slow down"}}"#,
    )]);
    let gw = start_app(
        &two_endpoints(a, "{ kind: mock }", "retry_budget_ms: 2000", ""),
        &[("r.policy", RETRY)],
    )
    .await;
    let t = Instant::now();
    let r = post(&gw.url("/v1/chat/completions"), &chat("m", false, "")).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.headers["x-switchyard-endpoint"], "q/x");
    assert_eq!(
        hits.load(Ordering::SeqCst),
        1,
        "no 20 s sleep for a 2 s budget"
    );
    assert!(
        t.elapsed() < Duration::from_secs(10),
        "took {:?}",
        t.elapsed()
    );
}

// Regression (outside attack, 2026-12-07): a provider's `Retry-After: 7200` reached
// the client as 3600 (the 1 h cap), though the gateway paused the endpoint only
// for `breaker.max_cooldown_ms` and tried it again after that. Expected: the
// client's wait is at most that pause.
#[tokio::test]
async fn a_throttled_clients_wait_is_at_most_the_endpoints_pause() {
    let (a, _) = sequence_upstream(vec![(
        429,
        "retry-after: 7200\r\n",
        r#"{"error":{"message":"slow down"}}"#,
    )]);
    let gw = start_app(
        &format!("breaker: {{ cooldown_ms: 1000, max_cooldown_ms: 20000 }}\nproviders:\n  p: {{ kind: openai-compatible, base_url: http://{a}/v1 }}\nmodels:\n  m: {{ endpoints: [ {{ provider: p, model: x }} ] }}\n"),
        &[],
    )
    .await;
    let r = post(&gw.url("/v1/chat/completions"), &chat("m", false, "")).await;
    assert_eq!(r.status, 429, "{}", r.text());
    assert_eq!(
        r.headers["retry-after"], "20",
        "max_cooldown_ms, in seconds"
    );
}

#[tokio::test]
async fn when_every_endpoint_is_throttled_the_client_gets_429_with_retry_after() {
    let (a, _) = sequence_upstream(vec![(
        429,
        "retry-after: 7\r\n",
        r#"{"error":{"message":"slow down"}}"#,
    )]);
    let (b, _) = sequence_upstream(vec![(
        429,
        "retry-after: 3\r\n",
        r#"{"error":{"message":"busy"}}"#,
    )]);
    let q = format!("{{ kind: openai-compatible, base_url: http://{b}/v1 }}");
    let gw = start_app(
        &two_endpoints(a, &q, "retry_budget_ms: 1000", ""),
        &[("r.policy", RETRY)],
    )
    .await;
    let r = post(&gw.url("/v1/chat/completions"), &chat("m", false, "")).await;
    assert_eq!(r.status, 429, "{}", r.text());
    assert_eq!(r.headers["retry-after"], "3", "the shortest wait");
    let msg = r.json()["error"]["message"].as_str().unwrap().to_string();
    assert!(msg.starts_with("all 2 attempts failed"), "{msg}");
    assert!(
        msg.contains("p/x: HTTP 429") && msg.contains("q/x: HTTP 429"),
        "{msg}"
    );
}

#[tokio::test]
async fn the_aggregate_error_lists_each_attempt() {
    let (a, _) = scripted_upstream(503, r#"{"error":{"message":"overloaded"}}"#);
    let (b, _) = scripted_upstream(500, r#"{"error":{"message":"broken"}}"#);
    let q = format!("{{ kind: openai-compatible, base_url: http://{b}/v1 }}");
    let gw = start_app(&two_endpoints(a, &q, "", ""), &[]).await;
    let r = post(&gw.url("/v1/chat/completions"), &chat("m", false, "")).await;
    assert_eq!(r.status, 502, "{}", r.text());
    let msg = r.json()["error"]["message"].as_str().unwrap().to_string();
    assert!(
        msg.contains("1. p/x: HTTP 502") && msg.contains("overloaded"),
        "{msg}"
    );
    assert!(
        msg.contains("2. q/x: HTTP 502") && msg.contains("broken"),
        "{msg}"
    );
    assert_eq!(r.headers["x-switchyard-attempts"], "2");
}

#[tokio::test]
async fn total_ms_bounds_the_wait_for_response_headers() {
    // Accepts and never answers.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = silent.local_addr().unwrap();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for s in silent.incoming().take(4) {
            held.push(s);
        }
        std::thread::sleep(Duration::from_secs(60));
    });
    let gw = start_app(
        &format!("providers:\n  p: {{ kind: openai-compatible, base_url: http://{addr}/v1, timeouts: {{ total_ms: 300 }} }}\nmodels:\n  m: {{ endpoints: [ {{ provider: p, model: x }} ] }}\n"),
        &[],
    )
    .await;
    let t = Instant::now();
    let r = post(&gw.url("/v1/chat/completions"), &chat("m", false, "")).await;
    assert_eq!(r.status, 504, "{}", r.text());
    assert!(r.text().contains("total_ms"), "{}", r.text());
    assert!(
        t.elapsed() < Duration::from_secs(10),
        "took {:?}",
        t.elapsed()
    );
}

#[tokio::test]
async fn the_attempt_cap_is_configurable_so_long_chains_reach_their_fallback() {
    let (a, hits) = scripted_upstream(503, r#"{"error":{"message":"down"}}"#);
    let policy = r#"
route r when request.model == "m" {
  default use endpoint "p/x"
  fallback endpoint "q/x" retries 7
}
"#;
    let gw = start_app(
        &two_endpoints(a, "{ kind: mock }", "max_attempts: 9", ""),
        &[("r.policy", policy)],
    )
    .await;
    let r = post(&gw.url("/v1/chat/completions"), &chat("m", false, "")).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.headers["x-switchyard-endpoint"], "q/x");
    assert_eq!(hits.load(Ordering::SeqCst), 8);
    assert_eq!(r.headers["x-switchyard-attempts"], "9");
}

#[tokio::test]
async fn a_stream_failing_after_its_first_byte_counts_as_an_upstream_error() {
    let gw = start_app(
        "providers:\n  cutstream: { kind: mock, mock: { cut_after_chunks: 2 } }\nmodels:\n  m: { endpoints: [ { provider: cutstream, model: x } ] }\n",
        &[],
    )
    .await;
    let r = post(&gw.url("/v1/chat/completions"), &chat("m", true, "")).await;
    assert_eq!(r.status, 200);
    assert!(r.events().last().unwrap().contains("error"), "{}", r.text());
    let m = get(&gw.url("/metrics")).await.text();
    let n = metric(
        &m,
        "switchyard_upstream_errors_total",
        &[("endpoint", "cutstream/x")],
    );
    assert!(n >= 1.0, "not counted:\n{m}");
}

/// Primary `p/x` answers from `primary`; secondary `q/x` is the in-process mock.
fn breaker_config(primary: std::net::SocketAddr) -> String {
    format!(
        "breaker: {{ cooldown_ms: 600, max_cooldown_ms: 60000 }}\nproviders:\n  p: {{ kind: openai-compatible, base_url: http://{primary}/v1 }}\n  q: {{ kind: mock }}\nmodels:\n  m: {{ endpoints: [ {{ provider: p, model: x, priority: 1 }}, {{ provider: q, model: x, priority: 2 }} ] }}\n"
    )
}

async fn circuit_of(gw: &InProcess, id: &str) -> serde_json::Value {
    let report = get(&gw.url("/admin/endpoints")).await.json();
    report["endpoints"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["id"] == id)
        .unwrap()["circuit"]
        .clone()
}

#[tokio::test]
async fn a_dead_primary_opens_its_circuit_and_gets_exactly_one_probe_under_concurrency() {
    let (a, hits) = scripted_upstream(503, r#"{"error":{"message":"down"}}"#);
    let gw = start_app(&breaker_config(a), &[]).await;
    let url = gw.url("/v1/chat/completions");
    // 20 requests, not more: on a loaded machine 100 sequential requests can outlast
    // the 600 ms cooldown, and the half-open probe that follows is correct behaviour.
    for _ in 0..20 {
        let r = post(&url, &chat("m", false, "")).await;
        assert_eq!(r.status, 200, "{}", r.text());
        assert_eq!(r.headers["x-switchyard-endpoint"], "q/x");
    }
    // H = 0.9^n falls below 0.3 at the 12th failure; after that, nothing.
    let opened_after = hits.load(Ordering::SeqCst);
    assert_eq!(opened_after, 12, "the dead primary kept being tried");
    assert_eq!(circuit_of(&gw, "p/x").await["state"], "open");
    let m = get(&gw.url("/metrics")).await.text();
    assert_eq!(
        metric(&m, "switchyard_circuit_state", &[("endpoint", "p/x")]),
        1.0
    );
    // After the cooldown: one probe, however many requests arrive at once.
    tokio::time::sleep(Duration::from_millis(700)).await;
    let all = (0..50).map(|_| {
        let url = url.clone();
        tokio::spawn(async move { post(&url, &chat("m", false, "")).await })
    });
    for r in futures_util::future::join_all(all).await {
        let r = r.unwrap();
        assert_eq!(r.status, 200, "{}", r.text());
        assert_eq!(r.headers["x-switchyard-endpoint"], "q/x");
    }
    assert_eq!(
        hits.load(Ordering::SeqCst),
        opened_after + 1,
        "exactly one probe"
    );
    // The probe failed: open again, for twice the cooldown.
    let c = circuit_of(&gw, "p/x").await;
    assert_eq!(c["state"], "open", "{c}");
    assert_eq!(c["cooldown_ms"], 1200, "{c}");
    assert_eq!(c["next_cooldown_ms"], 2400, "{c}");
}

#[tokio::test]
async fn a_recovered_primary_gets_its_traffic_back_through_the_probe() {
    let mut script = vec![(503, "", r#"{"error":{"message":"down"}}"#); 12];
    script.push((200, "", COMPLETION));
    let (a, hits) = sequence_upstream(script);
    let gw = start_app(&breaker_config(a), &[]).await;
    let url = gw.url("/v1/chat/completions");
    for _ in 0..20 {
        assert_eq!(post(&url, &chat("m", false, "")).await.status, 200);
    }
    assert_eq!(hits.load(Ordering::SeqCst), 12);
    tokio::time::sleep(Duration::from_millis(700)).await;
    let probe = post(&url, &chat("m", false, "")).await;
    assert_eq!(probe.headers["x-switchyard-endpoint"], "p/x", "the probe");
    assert_eq!(circuit_of(&gw, "p/x").await["state"], "closed");
    let next = post(&url, &chat("m", false, "")).await;
    assert_eq!(
        next.headers["x-switchyard-endpoint"], "p/x",
        "traffic is back"
    );
}

#[tokio::test]
async fn with_every_circuit_open_the_client_gets_503_with_retry_after() {
    let (a, _) = scripted_upstream(503, r#"{"error":{"message":"down"}}"#);
    let gw = start_app(
        &format!("breaker: {{ cooldown_ms: 20000 }}\nproviders:\n  p: {{ kind: openai-compatible, base_url: http://{a}/v1 }}\nmodels:\n  m: {{ endpoints: [ {{ provider: p, model: x }} ] }}\n"),
        &[],
    )
    .await;
    let url = gw.url("/v1/chat/completions");
    for _ in 0..12 {
        assert_eq!(post(&url, &chat("m", false, "")).await.status, 502);
    }
    let r = post(&url, &chat("m", false, "")).await;
    assert_eq!(r.status, 503, "{}", r.text());
    let wait: u64 = r.headers["retry-after"].to_str().unwrap().parse().unwrap();
    assert!((1..=20).contains(&wait), "{wait}");
}

// Regression: with every endpoint's circuit open, the 503 said code
// `rejected_by_policy` and "No endpoint is available for model." (the decision's
// empty plan went through the policy `reject` path), although no policy rejected
// anything; a client or dashboard keyed on the code blamed the operator's policy.
// (Seen with ../shared/reliability/memory.py: 980 of 1,000 cut streams.)
#[tokio::test]
async fn every_circuit_open_is_no_endpoint_not_rejected_by_policy() {
    let (a, _) = scripted_upstream(503, r#"{"error":{"message":"down"}}"#);
    let policy = "route blocked when request.model == \"b\" {\n  default reject 503 \"closed for maintenance\"\n}\n";
    let gw = start_app(
        &format!("breaker: {{ cooldown_ms: 20000 }}\nproviders:\n  p: {{ kind: openai-compatible, base_url: http://{a}/v1 }}\nmodels:\n  m: {{ endpoints: [ {{ provider: p, model: x }} ] }}\n  b: {{ endpoints: [ {{ provider: p, model: y }} ] }}\n"),
        &[("r.policy", policy)],
    )
    .await;
    let url = gw.url("/v1/chat/completions");
    for _ in 0..12 {
        assert_eq!(post(&url, &chat("m", false, "")).await.status, 502);
    }
    for stream in [false, true] {
        let r = post(&url, &chat("m", stream, "")).await;
        assert_eq!(r.status, 503, "{}", r.text());
        let e = &r.json()["error"];
        assert_eq!(e["code"], "no_endpoint", "{e}");
        assert_eq!(e["type"], "api_error", "{e}");
        let message = e["message"].as_str().unwrap();
        assert!(message.contains("model `m`"), "{message}");
        assert!(message.contains("circuit breakers are open"), "{message}");
        assert!(r.headers.contains_key("retry-after"));
    }
    // The policy's own `reject 503` keeps its code and message.
    let r = post(&url, &chat("b", false, "")).await;
    assert_eq!(r.status, 503, "{}", r.text());
    assert_eq!(r.json()["error"]["code"], "rejected_by_policy");
    assert_eq!(r.json()["error"]["message"], "closed for maintenance");
}

/// `p/x` then `q/x`, both in-process mocks (`p` and `q` their options), with
/// `retries 2` on the chain.
fn mock_chain(p: &str, q: &str) -> (String, &'static str) {
    (
        format!("providers:\n  p: {{ kind: mock, mock: {p} }}\n  q: {{ kind: mock, mock: {q} }}\nmodels:\n  m: {{ endpoints: [ {{ provider: p, model: x, priority: 1 }}, {{ provider: q, model: x, priority: 2 }} ] }}\n"),
        "route r when request.model == \"m\" {\n  default use endpoint \"p/x\"\n  fallback endpoint \"q/x\" retries 2\n}\n",
    )
}

async fn attempts_for(p: &str, q: &str) -> Reply {
    let (config, policy) = mock_chain(p, q);
    let gw = start_app(&config, &[("r.policy", policy)]).await;
    post(&gw.url("/v1/chat/completions"), &chat("m", false, "")).await
}

#[tokio::test]
async fn a_burst_of_500s_is_retried_on_the_same_endpoint_until_it_succeeds() {
    let r = attempts_for("{ fail_first: 2, fail_status: 500 }", "{}").await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.headers["x-switchyard-endpoint"], "p/x");
    assert_eq!(r.headers["x-switchyard-attempts"], "3");
}

#[tokio::test]
async fn a_400_from_the_provider_is_returned_at_once() {
    let r = attempts_for("{ fail_first: 5, fail_status: 400 }", "{}").await;
    assert_eq!(r.status, 400, "{}", r.text());
    assert_eq!(r.headers["x-switchyard-attempts"], "1");
}

#[tokio::test]
async fn a_401_or_404_moves_to_the_next_endpoint_without_retrying_this_one() {
    for status in [401, 403, 404] {
        let r = attempts_for(&format!("{{ fail_first: 5, fail_status: {status} }}"), "{}").await;
        assert_eq!(r.status, 200, "{status}: {}", r.text());
        assert_eq!(r.headers["x-switchyard-endpoint"], "q/x", "{status}");
        assert_eq!(
            r.headers["x-switchyard-attempts"], "2",
            "{status}: tried once"
        );
    }
}

#[tokio::test]
async fn a_529_overloaded_is_retried_like_a_5xx() {
    let r = attempts_for(
        "{ fail_first: 1, fail_status: 529, error_shape: anthropic }",
        "{}",
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.headers["x-switchyard-endpoint"], "p/x");
    assert_eq!(r.headers["x-switchyard-attempts"], "2");
}

#[tokio::test]
async fn a_stream_cut_mid_answer_continues_on_a_mock_that_takes_the_prefill() {
    let (config, policy) = mock_chain("{ cut_after_chunks: 6 }", "{ seed: 0 }");
    let config = config.replace("q: { kind: mock,", "q: { kind: mock, prefill: true,");
    let gw = start_app(&config, &[("r.policy", policy)]).await;
    let r = post(&gw.url("/v1/chat/completions"), &chat("m", true, "")).await;
    let whole = {
        let (config, policy) = mock_chain("{}", "{}");
        let gw = start_app(&config, &[("r.policy", policy)]).await;
        post(&gw.url("/v1/chat/completions"), &chat("m", true, "")).await
    };
    let text = |r: &Reply| {
        r.events()
            .iter()
            .filter(|e| *e != "[DONE]")
            .filter_map(|e| {
                let v: serde_json::Value = serde_json::from_str(e).unwrap();
                v["choices"][0]["delta"]["content"]
                    .as_str()
                    .map(str::to_string)
            })
            .collect::<String>()
    };
    assert_eq!(
        r.events().last().map(String::as_str),
        Some("[DONE]"),
        "{}",
        r.text()
    );
    assert_eq!(text(&r), text(&whole));
}

/// A prompt of about 150 tokens (Switchyard estimates 4 bytes a token).
fn long_prompt_chat() -> String {
    let words = "lorem ipsum ".repeat(50);
    format!(r#"{{"model":"m","messages":[{{"role":"user","content":"{words}"}}]}}"#)
}

/// p's upstream has a 50-token window that the registry does not declare, so the
/// route phase's context check keeps p in the plan and the provider's own
/// `context_length_exceeded` is what dispatch reacts to.
fn windows_config(q_window: &str) -> String {
    format!(
        "providers:\n  p: {{ kind: mock, mock: {{ context_window: 50 }} }}\n  q: {{ kind: mock }}\nmodels:\n  m: {{ endpoints: [ {{ provider: p, model: x, priority: 1 }}, {{ provider: q, model: x, priority: 2{q_window} }} ] }}\n"
    )
}

const CHAIN_NO_RETRIES: &str =
    "route r when request.model == \"m\" {\n  default use endpoint \"p/x\"\n  fallback endpoint \"q/x\"\n}\n";

#[tokio::test]
async fn a_context_window_error_moves_to_the_endpoint_with_a_larger_window() {
    let gw = start_app(
        &windows_config(", context_window: 128000"),
        &[("r.policy", CHAIN_NO_RETRIES)],
    )
    .await;
    let r = post(&gw.url("/v1/chat/completions"), &long_prompt_chat()).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.headers["x-switchyard-endpoint"], "q/x");
    assert_eq!(r.headers["x-switchyard-attempts"], "2");
}

#[tokio::test]
async fn a_context_window_error_with_no_larger_window_known_returns_to_the_client() {
    let gw = start_app(&windows_config(""), &[("r.policy", CHAIN_NO_RETRIES)]).await;
    let r = post(&gw.url("/v1/chat/completions"), &long_prompt_chat()).await;
    assert_eq!(r.status, 400, "{}", r.text());
    assert_eq!(r.json()["error"]["code"], "context_length_exceeded");
    assert_eq!(r.headers["x-switchyard-attempts"], "1");
}

#[tokio::test]
async fn fallback_on_moves_a_listed_client_error_status_to_the_next_endpoint() {
    let (config, _) = mock_chain("{ fail_first: 5, fail_status: 422 }", "{}");
    let policy = "route r when request.model == \"m\" {\n  default use endpoint \"p/x\"\n  fallback endpoint \"q/x\" on 422\n}\n";
    let gw = start_app(&config, &[("r.policy", policy)]).await;
    let r = post(&gw.url("/v1/chat/completions"), &chat("m", false, "")).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.headers["x-switchyard-endpoint"], "q/x");
    // Unlisted, the same status goes back to the client.
    let (config, _) = mock_chain("{ fail_first: 5, fail_status: 422 }", "{}");
    let gw = start_app(&config, &[("r.policy", CHAIN_NO_RETRIES)]).await;
    let r = post(&gw.url("/v1/chat/completions"), &chat("m", false, "")).await;
    assert_eq!(r.status, 422, "{}", r.text());
}

#[tokio::test]
async fn an_endpoint_that_said_retry_after_gets_no_new_requests_until_then() {
    let (config, _) = mock_chain(
        "{ fail_first: 1, fail_status: 429, retry_after_s: 30 }",
        "{}",
    );
    let gw = start_app(&config, &[("r.policy", CHAIN_NO_RETRIES)]).await;
    let r = post(&gw.url("/v1/chat/completions"), &chat("m", false, "")).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.headers["x-switchyard-endpoint"], "q/x");
    assert_eq!(r.headers["x-switchyard-attempts"], "2");
    // The primary would answer now, but it asked for 30 s: not tried.
    let r = post(&gw.url("/v1/chat/completions"), &chat("m", false, "")).await;
    assert_eq!(r.headers["x-switchyard-endpoint"], "q/x");
    assert_eq!(r.headers["x-switchyard-attempts"], "1");
    let report = get(&gw.url("/admin/endpoints")).await.json();
    let p = report["endpoints"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["id"] == "p/x")
        .unwrap()
        .clone();
    let left = p["throttled_for_ms"].as_u64().expect("throttled_for_ms");
    assert!(left > 20_000 && left <= 30_000, "{left}");
    assert_eq!(p["stats"]["available"], false);
}

#[tokio::test]
async fn a_canary_rolled_back_on_its_health_guard_gets_traffic_again_once_it_recovers() {
    let config = "breaker: { recovery_half_life_ms: 100, min_samples: 1000 }\nproviders:\n  c: { kind: mock, mock: { fail_first: 3 } }\n  s: { kind: mock }\nmodels:\n  m: { endpoints: [ { provider: c, model: x }, { provider: s, model: x } ] }\n";
    let policy = r#"
route r when request.model == "m" {
  default split by random {
    50% -> canary use endpoint "c/x" rollback when endpoint.health < 0.8
    50% -> use endpoint "s/x"
  }
  fallback endpoint "s/x"
}
"#;
    let gw = start_app(config, &[("r.policy", policy)]).await;
    let served_by_canary = |n: usize| {
        let url = gw.url("/v1/chat/completions");
        async move {
            let mut c = 0;
            for _ in 0..n {
                let r = post(&url, &chat("m", false, "")).await;
                assert_eq!(r.status, 200, "{}", r.text());
                if r.headers["x-switchyard-endpoint"] == "c/x" {
                    c += 1;
                }
            }
            c
        }
    };
    // The canary's first 3 answers fail (each falls back to s/x): its health drops
    // below the guard and the split rolls back to the stable arm.
    served_by_canary(40).await;
    // Unused, its missing health recovers (half-life 100 ms) past the guard, and the
    // canary (healthy by now) gets its share again.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let later = served_by_canary(40).await;
    assert!(later >= 8, "canary served {later} of 40 after recovering");
}

/// Weighted round-robin over a model's twelve endpoints, listed in no order of
/// weight: its first pick is the heaviest, and the fallbacks, which the decision
/// leaves unordered (issue 17: a long ranking orders them only when the first
/// endpoint fails), are tried heaviest first. Model `m` has nine failing endpoints
/// and three answering ones; model `n` only failing ones, so the aggregate error
/// lists every attempt in order.
#[tokio::test]
async fn a_long_ranking_fails_over_in_plan_order_after_its_first_endpoint() {
    let m = [
        ("bad", "e0", 5),
        ("good", "g0", 2),
        ("bad", "e1", 12),
        ("bad", "e2", 7),
        ("good", "g1", 3),
        ("bad", "e3", 9),
        ("bad", "e4", 4),
        ("good", "g2", 1),
        ("bad", "e5", 11),
        ("bad", "e6", 6),
        ("bad", "e7", 10),
        ("bad", "e8", 8),
    ];
    let n = [5, 12, 7, 9, 4, 11, 6, 10, 8];
    let list = |eps: Vec<(&str, String, u32)>| {
        eps.iter()
            .map(|(p, x, w)| format!("{{ provider: {p}, model: {x}, weight: {w} }}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let config = format!(
        "server: {{ max_attempts: 16 }}\nproviders:\n  bad: {{ kind: mock, mock: {{ fail_rate: 1.0, fail_status: 500 }} }}\n  good: {{ kind: mock }}\nmodels:\n  m: {{ endpoints: [ {} ] }}\n  n: {{ endpoints: [ {} ] }}\n",
        list(m.iter().map(|&(p, x, w)| (p, x.to_string(), w)).collect()),
        list(n.iter().map(|&w| ("bad", format!("n{w}"), w)).collect()),
    );
    let policy = r#"
route r when request.model in ["m", "n"] {
  default use model via weighted_round_robin
}
"#;
    let gw = start_app(&config, &[("r.policy", policy)]).await;
    let r = post(&gw.url("/v1/chat/completions"), &chat("m", false, "")).await;
    assert_eq!(r.status, 200, "{:?}", r.body);
    assert_eq!(r.headers["x-switchyard-endpoint"], "good/g1");
    assert_eq!(r.headers["x-switchyard-attempts"], "10");

    let r = post(&gw.url("/v1/chat/completions"), &chat("n", false, "")).await;
    assert!(r.status >= 500, "{} {:?}", r.status, r.body);
    let message = r.json()["error"]["message"].as_str().unwrap().to_string();
    let at = |w: u32| {
        message
            .find(&format!(". bad/n{w}:"))
            .unwrap_or_else(|| panic!("n{w} not in {message}"))
    };
    let order: Vec<usize> = [12, 11, 10, 9, 8, 7, 6, 5, 4]
        .iter()
        .map(|&w| at(w))
        .collect();
    assert!(order.windows(2).all(|p| p[0] < p[1]), "{message}");
    assert!(message.starts_with("all 9 attempts failed:"), "{message}");
}
