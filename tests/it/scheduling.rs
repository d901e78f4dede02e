//! Priority scheduling (issue 15): `switchyard mock` behind an endpoint with
//! `max_in_flight`, real `switchyard serve` in front. Waiting is observed through
//! `/admin/endpoints` (queue depth per level) and the response headers, never by
//! timing a request.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::common::*;

/// A gateway in front of one mock answering after `latency_ms`, with model `m` on
/// an endpoint of `max_in_flight: max`, and `scheduler` (YAML, may be empty).
fn gateway(latency_ms: u64, max: u32, scheduler: &str) -> (Proc, Proc) {
    let up = mock(&["--latency-ms", &latency_ms.to_string()]);
    let models = format!(
        "  m: {{ endpoints: [ {{ provider: up, model: mock-1, max_in_flight: {max} }} ] }}\n"
    );
    let config = format!("{}{scheduler}", config(&[("up", &up)], "", &models));
    (serve(&config), up)
}

/// The endpoint's gate in `/admin/endpoints`.
async fn queue(gw: &Proc) -> Value {
    let r = get(&gw.url("/admin/endpoints")).await.json();
    r["endpoints"][0]["queue"].clone()
}

/// Requests queued at `level` (`high`, `normal`, `low`) now.
async fn queued(gw: &Proc, level: &str) -> u64 {
    let q = queue(gw).await;
    q["levels"]
        .as_array()
        .and_then(|ls| ls.iter().find(|l| l["priority"] == level))
        .and_then(|l| l["queued"].as_u64())
        .unwrap_or(0)
}

/// Waits (up to 20 s) until `check` holds for the gateway's report.
async fn until<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let start = Instant::now();
    while !check().await {
        assert!(start.elapsed() < Duration::from_secs(20), "never: {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Sends a chat request at priority `level` in a task; the reply and its position
/// in completion order (from `order`) come back through the handle.
fn send(
    gw: &Proc,
    level: &'static str,
    order: &Arc<AtomicUsize>,
) -> tokio::task::JoinHandle<(Reply, usize)> {
    let (url, order) = (gw.url("/v1/chat/completions"), order.clone());
    tokio::spawn(async move {
        let r = request_with(
            "POST",
            &url,
            &[("x-switchyard-priority", level)],
            chat("m", false, ""),
        )
        .await;
        (r, order.fetch_add(1, Ordering::SeqCst))
    })
}

#[tokio::test]
async fn queued_high_requests_are_served_before_queued_low_ones() {
    let (gw, _up) = gateway(400, 2, "scheduler: { aging_ms: 600000 }\n");
    let order = Arc::new(AtomicUsize::new(0));
    let fillers = [send(&gw, "normal", &order), send(&gw, "normal", &order)];
    until("both slots taken", || async {
        queue(&gw).await["in_flight"].as_u64() == Some(2)
    })
    .await;
    let lows = [send(&gw, "low", &order), send(&gw, "low", &order)];
    until("two lows queued", || async {
        queued(&gw, "low").await == 2
    })
    .await;
    let highs = [send(&gw, "high", &order), send(&gw, "high", &order)];
    until("two highs queued", || async {
        queued(&gw, "high").await == 2
    })
    .await;
    for f in fillers {
        assert_eq!(f.await.unwrap().0.status, 200);
    }
    let mut high_pos = Vec::new();
    for h in highs {
        let (r, pos) = h.await.unwrap();
        assert_eq!(r.status, 200, "{}", r.text());
        assert_eq!(r.headers["x-switchyard-priority"], "high");
        assert!(r.headers.contains_key("x-switchyard-queued-ms"));
        high_pos.push(pos);
    }
    let mut low_pos = Vec::new();
    for l in lows {
        let (r, pos) = l.await.unwrap();
        assert_eq!(r.status, 200, "{}", r.text());
        low_pos.push(pos);
    }
    // With two slots, both highs start before either low does.
    assert!(
        high_pos.iter().max() < low_pos.iter().min(),
        "high {high_pos:?} low {low_pos:?}"
    );
    // Each of the four waited in the queue. (At least: on a loaded machine an attempt
    // may time out upstream and its retry queue again, which counts once more.)
    let q = queue(&gw).await;
    for level in [0, 2] {
        let waited = q["levels"][level]["admitted_after_wait"].as_u64();
        assert!(waited.is_some_and(|n| n >= 2), "{q}");
    }
}

#[tokio::test]
async fn critical_never_waits() {
    let up = mock(&["--latency-ms", "400"]);
    let models =
        "  m: { endpoints: [ { provider: up, model: mock-1, max_in_flight: 1 } ] }\n".to_string();
    let policy = r#"
route all when request.model == "m" {
  set priority critical when has(header("x-health")) and header("x-health") == "1"
  default use "m" via priority
}
"#;
    let gw = serve_with_policies(
        &config(&[("up", &up)], "", &models),
        &[("health.policy", policy)],
    );
    let order = Arc::new(AtomicUsize::new(0));
    let filler = send(&gw, "normal", &order);
    until("the slot is taken", || async {
        queue(&gw).await["in_flight"].as_u64() == Some(1)
    })
    .await;
    let waiting = send(&gw, "high", &order);
    until("a high request waits", || async {
        queued(&gw, "high").await == 1
    })
    .await;
    let r = request_with(
        "POST",
        &gw.url("/v1/chat/completions"),
        &[("x-health", "1")],
        chat("m", false, ""),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.headers["x-switchyard-priority"], "critical");
    assert!(
        !r.headers.contains_key("x-switchyard-queued-ms"),
        "critical waited: {:?}",
        r.headers
    );
    assert_eq!(queue(&gw).await["critical_admitted"], 1);
    assert_eq!(filler.await.unwrap().0.status, 200);
    assert_eq!(waiting.await.unwrap().0.status, 200);
}

#[tokio::test]
async fn a_low_request_is_served_within_the_aging_bound_under_continuous_high_load() {
    // One slot, 150 ms per answer, aging 300 ms: a low request ranks with high
    // after 600 ms. Six clients keep the high queue full until the low one is
    // served (or 30 s pass, which without aging is what would happen).
    let (gw, _up) = gateway(150, 1, "scheduler: { aging_ms: 300 }\n");
    let served = Arc::new(AtomicBool::new(false));
    let started = Instant::now();
    let mut feeders = Vec::new();
    for _ in 0..6 {
        let (url, served) = (gw.url("/v1/chat/completions"), served.clone());
        feeders.push(tokio::spawn(async move {
            let mut n = 0u32;
            while !served.load(Ordering::SeqCst) && started.elapsed() < Duration::from_secs(30) {
                let r = request_with(
                    "POST",
                    &url,
                    &[("x-switchyard-priority", "high")],
                    chat("m", false, ""),
                )
                .await;
                assert_eq!(r.status, 200, "{}", r.text());
                n += 1;
            }
            n
        }));
    }
    until("highs queue", || async { queued(&gw, "high").await >= 3 }).await;
    let r = request_with(
        "POST",
        &gw.url("/v1/chat/completions"),
        &[("x-switchyard-priority", "low")],
        chat("m", false, ""),
    )
    .await;
    served.store(true, Ordering::SeqCst);
    let load_went_on = started.elapsed() < Duration::from_secs(30);
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(r.headers.contains_key("x-switchyard-queued-ms"));
    let mut highs = 0;
    for f in feeders {
        highs += f.await.unwrap();
    }
    assert!(
        load_went_on,
        "the low request was served only after the high load stopped ({highs} highs)"
    );
}

#[tokio::test]
async fn a_queue_timeout_gives_503_with_retry_after() {
    let (gw, _up) = gateway(3000, 1, "scheduler: { queue_timeout_ms: { low: 300 } }\n");
    let order = Arc::new(AtomicUsize::new(0));
    let filler = send(&gw, "normal", &order);
    until("the slot is taken", || async {
        queue(&gw).await["in_flight"].as_u64() == Some(1)
    })
    .await;
    let r = request_with(
        "POST",
        &gw.url("/v1/chat/completions"),
        &[("x-switchyard-priority", "low")],
        chat("m", false, ""),
    )
    .await;
    assert_eq!(r.status, 503, "{}", r.text());
    let e = r.json();
    assert_eq!(e["error"]["code"], "queue_timeout", "{e}");
    assert!(r.headers.contains_key("retry-after"));
    assert_eq!(queue(&gw).await["levels"][2]["timed_out"], 1);
    // Found by the operator attack of 2026-12-07: the refusal was counted under
    // `model="none"` although its model was known.
    let metrics = get(&gw.url("/metrics")).await.text();
    let refused = [("model", "m"), ("endpoint", "none"), ("status", "503")];
    assert!(
        metric(&metrics, "switchyard_requests_total{", &refused) > 0.0,
        "{metrics}"
    );
    // The stream form ends the same way before any event.
    assert_eq!(filler.await.unwrap().0.status, 200);
}

#[tokio::test]
async fn a_disconnected_queued_client_is_dropped_from_the_queue() {
    use tokio::io::AsyncWriteExt;
    let (gw, _up) = gateway(5000, 1, "");
    let order = Arc::new(AtomicUsize::new(0));
    let filler = send(&gw, "normal", &order);
    until("the slot is taken", || async {
        queue(&gw).await["in_flight"].as_u64() == Some(1)
    })
    .await;
    let body = chat("m", false, "");
    let mut conn = tokio::net::TcpStream::connect(gw.addr).await.unwrap();
    let head = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    conn.write_all(head.as_bytes()).await.unwrap();
    until("the request queues", || async {
        queued(&gw, "normal").await == 1
    })
    .await;
    drop(conn);
    until("the gone client leaves the queue", || async {
        let q = queue(&gw).await;
        q["levels"][1]["queued"] == 0 && q["levels"][1]["abandoned"] == 1
    })
    .await;
    // It left while the slot was still taken (the filler takes 5 s).
    assert!(!filler.is_finished());
    assert_eq!(filler.await.unwrap().0.status, 200);
    let m = get(&gw.url("/metrics")).await.text();
    assert_eq!(
        metric(
            &m,
            "switchyard_queue_abandoned_total",
            &[("priority", "normal")]
        ),
        1.0,
        "{m}"
    );
    assert!(m.contains("# HELP switchyard_queue_depth"));
}

/// An off-peak window of one hour that starts `from_now` hours after the current
/// UTC hour.
fn window(from_now: u64) -> String {
    let hour = (std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
        / 3600
        + from_now)
        % 24;
    format!("{hour}-{}", hour + 1)
}

#[tokio::test]
async fn a_low_request_that_opts_in_is_held_until_max_wait_outside_the_window() {
    // The window opens in two hours; max_wait (1 s) lets the request go first.
    let sched = format!(
        "scheduler: {{ off_peak: {{ hours: \"{}\", timezone: UTC, max_wait: 1s }} }}\n",
        window(2)
    );
    let (gw, _up) = gateway(0, 4, &sched);
    let report = get(&gw.url("/admin/endpoints")).await.json();
    assert_eq!(report["off_peak"]["now"], false, "{report}");
    let held = request_with(
        "POST",
        &gw.url("/v1/chat/completions"),
        &[
            ("x-switchyard-priority", "low"),
            ("x-switchyard-defer", "off-peak"),
        ],
        chat("m", false, ""),
    )
    .await;
    assert_eq!(held.status, 200, "{}", held.text());
    let ms: u64 = held.headers["x-switchyard-held-ms"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(ms >= 1000, "held {ms} ms");
    // Not low priority: the opt-in does not hold it.
    let normal = request_with(
        "POST",
        &gw.url("/v1/chat/completions"),
        &[("x-switchyard-defer", "off-peak")],
        chat("m", false, ""),
    )
    .await;
    assert_eq!(normal.status, 200);
    assert!(!normal.headers.contains_key("x-switchyard-held-ms"));
    let report = get(&gw.url("/admin/endpoints")).await.json();
    assert_eq!(report["off_peak"]["held_total"], 1, "{report}");
}

#[tokio::test]
async fn inside_the_window_nothing_is_held() {
    let sched = format!(
        "scheduler: {{ off_peak: {{ hours: \"{}\", max_wait: 1h }} }}\n",
        window(0)
    );
    let (gw, _up) = gateway(0, 4, &sched);
    let r = request_with(
        "POST",
        &gw.url("/v1/chat/completions"),
        &[
            ("x-switchyard-priority", "low"),
            ("x-switchyard-defer", "off-peak"),
        ],
        chat("m", false, ""),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(!r.headers.contains_key("x-switchyard-held-ms"));
    let report = get(&gw.url("/admin/endpoints")).await.json();
    assert_eq!(report["off_peak"]["now"], true, "{report}");
}

#[tokio::test]
async fn bad_priority_and_defer_headers_get_errors_naming_the_header() {
    let (gw, _up) = gateway(0, 4, "");
    let url = gw.url("/v1/chat/completions");
    let r = request_with(
        "POST",
        &url,
        &[("x-switchyard-priority", "urgent")],
        chat("m", false, ""),
    )
    .await;
    assert_eq!(r.status, 400, "{}", r.text());
    assert_eq!(r.json()["error"]["param"], "x-switchyard-priority");
    // Without a key (auth.mode none) the header reaches high, not critical.
    let r = request_with(
        "POST",
        &url,
        &[("x-switchyard-priority", "critical")],
        chat("m", false, ""),
    )
    .await;
    assert_eq!(r.status, 403, "{}", r.text());
    assert_eq!(r.json()["error"]["code"], "priority_not_allowed");
    let r = request_with(
        "POST",
        &url,
        &[("x-switchyard-defer", "tomorrow")],
        chat("m", false, ""),
    )
    .await;
    assert_eq!(r.status, 400, "{}", r.text());
    assert_eq!(r.json()["error"]["param"], "x-switchyard-defer");
}

#[tokio::test]
async fn a_key_reaches_critical_only_up_to_its_max_priority() {
    let up = mock(&[]);
    let secret = "sk-sched-test-1";
    let hash = switchyard::auth::keys::hash_secret(secret);
    let other = "sk-sched-test-2";
    let other_hash = switchyard::auth::keys::hash_secret(other);
    let models = "  m: { endpoints: [ { provider: up, model: mock-1, max_in_flight: 1 } ] }\n";
    let cfg = format!(
        "auth:\n  mode: keys\n  keys:\n    - {{ id: health, hash: \"{hash}\", max_priority: critical }}\n    - {{ id: app, hash: \"{other_hash}\" }}\n{}",
        config(&[("up", &up)], "", models)
    );
    let gw = serve(&cfg);
    let url = gw.url("/v1/chat/completions");
    let ask = |key: &'static str, level: &'static str| {
        let url = url.clone();
        async move {
            let auth = format!("Bearer {key}");
            request_with(
                "POST",
                &url,
                &[
                    ("authorization", auth.as_str()),
                    ("x-switchyard-priority", level),
                ],
                chat("m", false, ""),
            )
            .await
        }
    };
    let r = ask(secret, "critical").await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.headers["x-switchyard-priority"], "critical");
    let r = ask(other, "high").await;
    assert_eq!(r.status, 403, "{}", r.text());
    let r = ask(other, "low").await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.headers["x-switchyard-priority"], "low");
}

/// Found by the operator attack of 2026-12-07: a refused priority header (above the
/// key's `max_priority`, or not a level) answered `x-switchyard-priority: normal`,
/// not the key's own level.
#[tokio::test]
async fn a_refused_priority_header_answers_with_the_keys_level() {
    let up = mock(&[]);
    let secret = "sk-sched-test-3";
    let hash = switchyard::auth::keys::hash_secret(secret);
    let cfg = format!(
        "auth:\n  mode: keys\n  keys:\n    - {{ id: batch, hash: \"{hash}\", priority: low, max_priority: high }}\n{}",
        config(&[("up", &up)], "", "  m: { endpoints: [ { provider: up, model: mock-1 } ] }\n")
    );
    let gw = serve(&cfg);
    let url = gw.url("/v1/chat/completions");
    let auth = format!("Bearer {secret}");
    for (level, status) in [("critical", 403), ("bogus", 400), ("", 200)] {
        let mut headers = vec![("authorization", auth.as_str())];
        if !level.is_empty() {
            headers.push(("x-switchyard-priority", level));
        }
        let r = request_with("POST", &url, &headers, chat("m", false, "")).await;
        assert_eq!(r.status, status, "{level}: {}", r.text());
        assert_eq!(r.headers["x-switchyard-priority"], "low", "{level}");
    }
}

/// A gateway whose policy holds every request to `m` for the off-peak window
/// (`hold off_peak` at priority low) and names the rule that reads the window.
fn policy_gateway(window_hours: &str) -> (Proc, Proc) {
    let up = mock(&[]);
    let policy = r#"
route nightly when request.model == "m" {
  set priority low
  rule in_window when request.off_peak {
    use model
  }
  default {
    hold off_peak
    use model
  }
}
"#;
    let cfg = format!(
        "{}scheduler: {{ off_peak: {{ hours: \"{window_hours}\", max_wait: 1s }} }}\n",
        config(
            &[("up", &up)],
            "",
            "  m: { endpoints: [ { provider: up, model: mock-1 } ] }\n"
        )
    );
    (serve_with_policies(&cfg, &[("nightly.policy", policy)]), up)
}

#[tokio::test]
async fn a_policy_holds_with_hold_off_peak_and_reads_request_off_peak() {
    let (gw, _up) = policy_gateway(&window(2));
    let r = post(&gw.url("/v1/chat/completions"), &chat("m", false, "")).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.headers["x-switchyard-rule"], "default");
    assert_eq!(r.headers["x-switchyard-priority"], "low");
    assert!(
        r.headers.contains_key("x-switchyard-held-ms"),
        "{:?}",
        r.headers
    );
    let (gw, _up) = policy_gateway(&window(0));
    let r = post(&gw.url("/v1/chat/completions"), &chat("m", false, "")).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.headers["x-switchyard-rule"], "in_window");
    assert!(!r.headers.contains_key("x-switchyard-held-ms"));
}

#[tokio::test]
async fn many_concurrent_requests_never_exceed_max_in_flight_and_leave_no_slot_behind() {
    let (gw, _up) = gateway(30, 2, "");
    let order = Arc::new(AtomicUsize::new(0));
    let levels = ["low", "normal", "high"];
    let tasks: Vec<_> = (0..40).map(|i| send(&gw, levels[i % 3], &order)).collect();
    let mut most = 0;
    while tasks.iter().any(|t| !t.is_finished()) {
        most = most.max(queue(&gw).await["in_flight"].as_u64().unwrap_or(0));
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    for t in tasks {
        assert_eq!(t.await.unwrap().0.status, 200);
    }
    assert!(most <= 2, "{most} in flight");
    let q = queue(&gw).await;
    assert_eq!(q["in_flight"], 0, "{q}");
    let queued: u64 = (0..3)
        .map(|l| q["levels"][l]["queued"].as_u64().unwrap())
        .sum();
    assert_eq!(queued, 0, "{q}");
}

#[tokio::test]
async fn a_stream_holds_its_slot_until_the_client_leaves_mid_stream() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    // One token a second, six tokens: the stream outlasts the steps below.
    let up = mock(&["--tokens-per-s", "1", "--completion-tokens", "6"]);
    let models = "  m: { endpoints: [ { provider: up, model: mock-1, max_in_flight: 1 } ] }\n";
    let gw = serve(&config(&[("up", &up)], "", models));
    let body = chat("m", true, "");
    let mut conn = tokio::net::TcpStream::connect(gw.addr).await.unwrap();
    let head = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    conn.write_all(head.as_bytes()).await.unwrap();
    let mut buf = [0u8; 4096];
    let n = tokio::time::timeout(Duration::from_secs(10), conn.read(&mut buf))
        .await
        .expect("stream head")
        .unwrap();
    assert!(String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 200"));
    assert_eq!(queue(&gw).await["in_flight"], 1);
    let order = Arc::new(AtomicUsize::new(0));
    let next = send(&gw, "normal", &order);
    until("the next request queues behind the stream", || async {
        queued(&gw, "normal").await == 1
    })
    .await;
    drop(conn);
    let (r, _) = next.await.unwrap();
    assert_eq!(r.status, 200, "{}", r.text());
    until("no slot left behind", || async {
        queue(&gw).await["in_flight"] == 0
    })
    .await;
}
