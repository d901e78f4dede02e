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
