//! The gateway started in process (`App`), and what the request context carries: the
//! caller's identity, the `x-switchyard-*` headers, and errors that keep their code.

use std::sync::atomic::Ordering;

use crate::common::{chat, post, request_with, scripted_upstream, start_app};

const TWO_MOCKS: &str = "providers:\n  a: { kind: mock }\n  b: { kind: mock }\nmodels:\n  m: { endpoints: [ { provider: a, model: x }, { provider: b, model: x } ] }\n";

const SPLIT: &str = r#"
route canary when request.model == "m" {
  rule by_key when has(request.api_key) {
    split by api_key {
      50% -> use endpoint "a/x"
      50% -> use endpoint "b/x"
    }
  }
  default use endpoint "a/x"
}
"#;

async fn served_by(url: &str, headers: &[(&str, &str)]) -> String {
    let r = request_with("POST", url, headers, chat("m", false, "")).await;
    assert_eq!(r.status, 200, "{}", r.text());
    r.headers["x-switchyard-endpoint"]
        .to_str()
        .unwrap()
        .to_string()
}

#[tokio::test]
async fn split_by_api_key_splits_live_serve_traffic() {
    let gw = start_app(TWO_MOCKS, &[("split.policy", SPLIT)]).await;
    let url = gw.url("/v1/chat/completions");
    let mut on_b = 0;
    for i in 0..40 {
        let auth = format!("Bearer sk-caller-{i}");
        let first = served_by(&url, &[("authorization", &auth)]).await;
        // Sticky: the same key lands on the same arm every time.
        for _ in 0..2 {
            assert_eq!(served_by(&url, &[("authorization", &auth)]).await, first);
        }
        // The Anthropic SDK's header names the same key.
        let key = format!("sk-caller-{i}");
        assert_eq!(served_by(&url, &[("x-api-key", &key)]).await, first);
        if first == "b/x" {
            on_b += 1;
        }
    }
    // 40 keys over a 50/50 split: both arms get traffic (the chance that a fair split
    // puts 8 or fewer of 40 on one arm is below 0.01%).
    assert!((9..=31).contains(&on_b), "{on_b} of 40 keys on b/x");
    // Without a key the split does not apply.
    assert_eq!(served_by(&url, &[]).await, "a/x");
}

#[tokio::test]
async fn org_rules_act_on_the_callers_organization() {
    let policy = r#"
route orgs when request.model == "m" {
  rule acme when has(request.org) and request.org == "org-acme" { use endpoint "b/x" }
  default use endpoint "a/x"
}
"#;
    let gw = start_app(TWO_MOCKS, &[("orgs.policy", policy)]).await;
    let url = gw.url("/v1/chat/completions");
    assert_eq!(
        served_by(&url, &[("openai-organization", "org-acme")]).await,
        "b/x"
    );
    assert_eq!(
        served_by(&url, &[("openai-organization", "org-other")]).await,
        "a/x"
    );
}

#[tokio::test]
async fn every_switchyard_header_comes_from_the_request_context() {
    let gw = start_app(TWO_MOCKS, &[("split.policy", SPLIT)]).await;
    let r = request_with(
        "POST",
        &gw.url("/v1/chat/completions"),
        &[],
        chat("m", false, ""),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    let h = |n: &str| r.headers[n].to_str().unwrap().to_string();
    assert_eq!(h("x-switchyard-route"), "canary");
    assert_eq!(h("x-switchyard-rule"), "default");
    assert_eq!(h("x-switchyard-endpoint"), "a/x");
    assert_eq!(h("x-switchyard-attempts"), "1");
    assert_eq!(h("x-switchyard-policy").len(), 16);
    // An error before routing still names the policy version, and nothing else.
    let bad = post(&gw.url("/v1/chat/completions"), "{").await;
    assert_eq!(bad.status, 400);
    assert_eq!(
        bad.headers["x-switchyard-policy"],
        r.headers["x-switchyard-policy"]
    );
    assert!(!bad.headers.contains_key("x-switchyard-endpoint"));
    assert!(!bad.headers.contains_key("x-switchyard-attempts"));
}

#[tokio::test]
async fn an_upstream_context_length_error_reaches_the_client_unchanged_and_is_not_retried() {
    let (addr, hits) = scripted_upstream(
        400,
        r#"{"error":{"message":"This model's maximum context length is 8192 tokens.","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}"#,
    );
    let (spare, spare_hits) = scripted_upstream(500, r#"{"error":{"message":"x"}}"#);
    let gw = start_app(
        &format!("providers:\n  p: {{ kind: openai-compatible, base_url: http://{addr}/v1 }}\n  q: {{ kind: openai-compatible, base_url: http://{spare}/v1 }}\nmodels:\n  m: {{ endpoints: [ {{ provider: p, model: x, priority: 1 }}, {{ provider: q, model: x, priority: 2 }} ] }}\n"),
        &[],
    )
    .await;
    let r = post(&gw.url("/v1/chat/completions"), &chat("m", false, "")).await;
    assert_eq!(r.status, 400, "{}", r.text());
    let e = &r.json()["error"];
    assert_eq!(e["code"], "context_length_exceeded");
    assert_eq!(e["param"], "messages");
    assert_eq!(e["type"], "invalid_request_error");
    assert_eq!(
        hits.load(Ordering::SeqCst),
        1,
        "the client's fault: no retry"
    );
    assert_eq!(spare_hits.load(Ordering::SeqCst), 0, "and no fallback");
    assert_eq!(r.headers["x-switchyard-attempts"], "1");
}

#[tokio::test]
async fn an_upstream_404_moves_to_the_next_endpoint_without_retrying_it() {
    let (addr, hits) = scripted_upstream(404, r#"{"error":{"message":"no such model"}}"#);
    let policy = r#"
route r when request.model == "m" {
  default use endpoint "p/x"
  fallback endpoint "b/x" retries 2
}
"#;
    let gw = start_app(
        &format!("providers:\n  p: {{ kind: openai-compatible, base_url: http://{addr}/v1 }}\n  b: {{ kind: mock }}\nmodels:\n  m: {{ endpoints: [ {{ provider: p, model: x }}, {{ provider: b, model: x }} ] }}\n"),
        &[("r.policy", policy)],
    )
    .await;
    let r = post(&gw.url("/v1/chat/completions"), &chat("m", false, "")).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.headers["x-switchyard-endpoint"], "b/x");
    assert_eq!(hits.load(Ordering::SeqCst), 1, "a 404 is not retried there");
    assert_eq!(r.headers["x-switchyard-attempts"], "2");
}

#[tokio::test]
async fn a_policy_429_is_the_gateways_and_counts_against_no_endpoint() {
    let policy = r#"
route r when request.model == "m" {
  rule busy when has(header("x-busy")) and header("x-busy") == "1" { reject 429 "slow down" }
  default use endpoint "a/x"
}
"#;
    let gw = start_app(TWO_MOCKS, &[("r.policy", policy)]).await;
    let r = request_with(
        "POST",
        &gw.url("/v1/chat/completions"),
        &[("x-busy", "1")],
        chat("m", false, ""),
    )
    .await;
    assert_eq!(r.status, 429);
    assert_eq!(r.json()["error"]["code"], "rejected_by_policy");
    assert_eq!(r.json()["error"]["type"], "rate_limit_error");
    assert!(!r.headers.contains_key("x-switchyard-attempts"));
    let stats = gw
        .app
        .services()
        .gateway
        .stats
        .snapshot(std::time::SystemTime::now());
    assert_eq!(stats.endpoints["a/x"].health, 1.0);
}
