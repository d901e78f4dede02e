//! Routing by policy through the running gateway.

use crate::common::*;

const ROUTES: &str = r#"
route tiers when request.model == "m" {
  rule blocked when has(header("x-team")) and header("x-team") == "blocked" {
    reject 451 "This team may not use this model."
  }
  rule to_b when has(header("x-team")) and header("x-team") == "b" {
    use endpoint "b/x"
  }
  default use "m" via weighted_round_robin
  fallback "m" retries 1 backoff 10ms..20ms
}
"#;

fn two(a: &Proc, b: &Proc) -> String {
    config(
        &[("a", a), ("b", b)],
        "",
        "  m:\n    endpoints:\n      - { provider: a, model: x, weight: 3 }\n      - { provider: b, model: x, weight: 1 }\n",
    )
}

async fn post_h(url: &str, body: &str, header: Option<(&str, &str)>) -> Reply {
    use bytes::Bytes;
    use http_body_util::{BodyExt, Full};
    let client: hyper_util::client::legacy::Client<_, Full<Bytes>> =
        hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
            .build_http();
    let mut req = http::Request::builder().method("POST").uri(url);
    if let Some((k, v)) = header {
        req = req.header(k, v);
    }
    let resp = client
        .request(req.body(Full::new(Bytes::from(body.to_string()))).unwrap())
        .await
        .unwrap();
    let status = resp.status().as_u16();
    let headers = resp.headers().clone();
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    Reply {
        status,
        headers,
        body,
    }
}

#[tokio::test]
async fn rules_reject_pin_and_balance() {
    let a = mock(&[]);
    let b = mock(&[]);
    let gw = serve_with_policies(&two(&a, &b), &[("tiers.policy", ROUTES)]);
    let url = gw.url("/v1/chat/completions");
    let body = chat("m", false, "");

    let r = post_h(&url, &body, Some(("x-team", "blocked"))).await;
    assert_eq!(r.status, 451, "{}", r.text());
    assert_eq!(r.json()["error"]["code"], "rejected_by_policy");
    let version = r.headers["x-switchyard-policy"]
        .to_str()
        .unwrap()
        .to_string();
    assert_eq!(version.len(), 16);

    let r = post_h(&url, &body, Some(("x-team", "b"))).await;
    assert_eq!(r.headers["x-switchyard-endpoint"], "b/x");
    assert_eq!(r.headers["x-switchyard-policy"], version.as_str());

    // Smooth weighted round-robin: exactly 3:1 over 40 requests.
    let mut on_a = 0;
    for _ in 0..40 {
        let r = post_h(&url, &body, None).await;
        assert_eq!(r.status, 200);
        if r.headers["x-switchyard-endpoint"] == "a/x" {
            on_a += 1;
        }
    }
    assert_eq!(on_a, 30);

    // The same split under concurrency: decisions with `on pick` updates are made
    // one at a time on fresh state, so 40 concurrent requests still split 30:10.
    let replies = futures_util::future::join_all((0..40).map(|_| post_h(&url, &body, None))).await;
    let on_a = replies
        .iter()
        .inspect(|r| assert_eq!(r.status, 200))
        .filter(|r| r.headers["x-switchyard-endpoint"] == "a/x")
        .count();
    assert_eq!(on_a, 30);
}

#[tokio::test]
async fn fallback_chain_survives_a_failing_endpoint() {
    let a = mock(&["--fail-rate", "1", "--fail-status", "503"]);
    let b = mock(&[]);
    let gw = serve_with_policies(&two(&a, &b), &[("tiers.policy", ROUTES)]);
    let url = gw.url("/v1/chat/completions");
    for stream in [false, true] {
        for _ in 0..5 {
            let r = post_h(&url, &chat("m", stream, ""), None).await;
            assert_eq!(r.status, 200, "{}", r.text());
            assert_eq!(r.headers["x-switchyard-endpoint"], "b/x");
        }
    }
    let metrics = get(&gw.url("/metrics")).await.text();
    assert!(
        metrics.contains(r#"switchyard_upstream_errors_total{endpoint="a/x",kind="bad_upstream"}"#),
        "{metrics}"
    );
}

#[test]
fn invalid_policy_stops_startup_with_a_located_diagnostic() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("policies")).unwrap();
    std::fs::write(
        dir.path().join("policies/bad.policy"),
        "route r when request.model == \"m\" {\n  default use \"nope\" via least_latency\n}\n",
    )
    .unwrap();
    let cfg = dir.path().join("switchyard.yaml");
    std::fs::write(
        &cfg,
        "providers: { p: { kind: mock } }\nmodels: { m: { endpoints: [ { provider: p, model: x } ] } }\n",
    )
    .unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_switchyard"))
        .args(["serve", "--config", cfg.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("bad.policy:2:"), "{err}");
    assert!(err.contains("nope"), "{err}");
    assert!(err.contains('^'), "{err}");
}
