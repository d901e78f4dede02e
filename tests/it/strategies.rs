//! Built-in strategies through the running gateway: three mock upstreams at 20 ms,
//! 80 ms and 200 ms; once warmed up, the fast one serves the majority.

use crate::common::*;

/// Sends `n` requests, `concurrency` at a time; returns how many each endpoint served.
async fn send(url: &str, n: usize, concurrency: usize) -> std::collections::BTreeMap<String, u32> {
    let mut counts = std::collections::BTreeMap::new();
    let body = chat("m", false, "");
    let mut left = n;
    while left > 0 {
        let batch = left.min(concurrency);
        left -= batch;
        let tasks: Vec<_> = (0..batch)
            .map(|_| {
                let (url, body) = (url.to_string(), body.clone());
                tokio::spawn(async move { post(&url, &body).await })
            })
            .collect();
        for t in tasks {
            let r = t.await.unwrap();
            assert_eq!(r.status, 200, "{}", r.text());
            let ep = r.headers["x-switchyard-endpoint"]
                .to_str()
                .unwrap()
                .to_string();
            *counts.entry(ep).or_insert(0) += 1;
        }
    }
    counts
}

/// A gateway routing model `m` over the three mocks with `via`.
fn gateway(mocks: &[Proc; 3], via: &str) -> Proc {
    let cfg = config(
        &[("fast", &mocks[0]), ("mid", &mocks[1]), ("slow", &mocks[2])],
        "",
        "  m:\n    endpoints:\n      - { provider: slow, model: x }\n      - { provider: mid, model: x }\n      - { provider: fast, model: x }\n",
    );
    let route =
        format!("route r when request.model == \"m\" {{\n  default use \"m\" via {via}\n}}\n");
    serve_with_policies(&cfg, &[("r.policy", &route)])
}

fn three_mocks() -> [Proc; 3] {
    [
        mock(&["--latency-ms", "20"]),
        mock(&["--latency-ms", "80"]),
        mock(&["--latency-ms", "200"]),
    ]
}

#[tokio::test]
async fn least_latency_sends_the_majority_to_the_fast_upstream() {
    let mocks = three_mocks();
    let gw = gateway(&mocks, "least_latency");
    let url = gw.url("/v1/chat/completions");
    send(&url, 24, 4).await;
    let counts = send(&url, 60, 4).await;
    let fast = counts.get("fast/x").copied().unwrap_or(0);
    assert!(fast > 30, "{counts:?}");
    eprintln!("least_latency last 60: {counts:?}");
    let admin = get(&gw.url("/admin/endpoints")).await.json();
    let eps = admin["endpoints"].as_array().unwrap();
    let fast_ep = eps.iter().find(|e| e["id"] == "fast/x").unwrap();
    assert_eq!(fast_ep["selection"]["least_latency"], 1.0, "{admin:#}");
    assert!(fast_ep["stats"]["latency_ewma_ms"].as_f64().unwrap() >= 20.0);
}

#[tokio::test]
async fn exp3_learns_to_send_the_majority_to_the_fast_upstream() {
    let mocks = three_mocks();
    // l_max near the slowest latency, as seed 004 advises for sharp learning: rewards
    // 1 - latency / 200 ms are about 0.9, 0.6 and 0 (plus gateway overhead).
    let gw = gateway(&mocks, "exp3(l_max = 200ms)");
    let url = gw.url("/v1/chat/completions");
    send(&url, 400, 8).await;
    let counts = send(&url, 200, 8).await;
    let fast = counts.get("fast/x").copied().unwrap_or(0);
    assert!(fast > 100, "{counts:?}");
    let admin = get(&gw.url("/admin/endpoints")).await.json();
    let p = |id: &str| {
        admin["endpoints"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["id"] == id)
            .unwrap()["selection"]["exp3"]
            .as_f64()
            .unwrap()
    };
    // The admin view uses exp3's default l_max, but the learned weights are the same.
    assert!(p("fast/x") > p("slow/x"), "{admin:#}");
    assert!(p("slow/x") >= 0.2 / 3.0 - 1e-9, "{admin:#}");
    eprintln!(
        "exp3 last 200: {counts:?}; admin probabilities fast {:.2} mid {:.2} slow {:.2}",
        p("fast/x"),
        p("mid/x"),
        p("slow/x")
    );
}

/// An `on success` counter: every outcome's read-modify-write of the state must land,
/// however many requests finish at once.
#[tokio::test]
async fn concurrent_outcome_updates_are_not_lost() {
    let m = mock(&["--latency-ms", "5"]);
    let cfg = config(
        &[("up", &m)],
        "",
        "  m:\n    endpoints:\n      - { provider: up, model: x }\n",
    );
    let policy = "strategy counted() {\n  state done = 0.0\n  score = 1.0\n  pick max\n  on success {\n    done = state.done + 1\n  }\n}\n\nroute r when request.model == \"m\" {\n  default use \"m\" via counted\n}\n";
    let gw = serve_with_policies(&cfg, &[("counted.policy", policy)]);
    let url = gw.url("/v1/chat/completions");
    send(&url, 240, 24).await;
    let admin = get(&gw.url("/admin/endpoints")).await.json();
    let ep = &admin["endpoints"][0];
    assert_eq!(ep["stats"]["state"]["counted"]["done"], 240.0, "{admin:#}");
}
