//! The operator surface (issue 16): request ids echoed, forwarded and generated;
//! exactly one access line per request (whole, stream, error, cache hit, client
//! gone); the token, cost, attempt and build metrics with their HELP; `--version`.

use std::io::{Read, Write};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::common::*;

/// A completion whose usage has cached and reasoning parts.
const ANSWER: &str = r#"{"id":"c","object":"chat.completion","created":0,"model":"x","choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}],"usage":{"prompt_tokens":1000,"completion_tokens":500,"total_tokens":1500,"prompt_tokens_details":{"cached_tokens":200},"completion_tokens_details":{"reasoning_tokens":100}}}"#;

/// An upstream answering its n-th request with `script[n]` (status, extra header
/// lines, body; the last again once it runs out), keeping every request head.
fn recording_upstream(
    script: Vec<(u16, &'static str, &'static str)>,
) -> (SocketAddr, Arc<Mutex<Vec<String>>>) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let heads = Arc::new(Mutex::new(Vec::new()));
    let seen = heads.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut s) = stream else { return };
            let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
            let mut got = Vec::new();
            let mut buf = [0u8; 65536];
            while !got.windows(4).any(|w| w == b"\r\n\r\n") {
                match s.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => got.extend_from_slice(&buf[..n]),
                }
            }
            let head = String::from_utf8_lossy(&got).to_ascii_lowercase();
            let n = {
                let mut h = seen.lock().unwrap();
                h.push(head);
                h.len() - 1
            };
            let (status, headers, body) = script[n.min(script.len() - 1)];
            let ctype = if body.starts_with("data:") {
                "text/event-stream"
            } else {
                "application/json"
            };
            let _ = write!(
                s,
                "HTTP/1.1 {status} X\r\ncontent-type: {ctype}\r\n{headers}content-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    (addr, heads)
}

/// The `x-request-id` values of a recorded request head.
fn forwarded_ids(head: &str) -> Vec<String> {
    head.lines()
        .filter_map(|l| l.strip_prefix("x-request-id:"))
        .map(|v| v.trim().to_string())
        .collect()
}

/// Providers `a` (and `b` when given) at the addresses, priced, and model `m` on
/// `a/x` with fallback `b/x`; `server` is the `server:` block's body.
fn gateway_config(a: SocketAddr, b: Option<SocketAddr>, server: &str) -> String {
    let mut s = format!(
        "server: {{ {server} }}\nproviders:\n  a: {{ kind: openai-compatible, base_url: http://{a}/v1, pricing: {{ input_per_mtok: 2.0, output_per_mtok: 8.0 }} }}\n"
    );
    if let Some(b) = b {
        s.push_str(&format!(
            "  b: {{ kind: openai-compatible, base_url: http://{b}/v1 }}\n"
        ));
        s.push_str("models:\n  m: { endpoints: [ { provider: a, model: x, priority: 1 }, { provider: b, model: x, priority: 2 } ] }\n");
    } else {
        s.push_str("models:\n  m: { endpoints: [ { provider: a, model: x } ] }\n");
    }
    s
}

async fn chat_with_id(gw: &Proc, id: Option<&str>, body: &str) -> Reply {
    let headers: Vec<(&str, &str)> = id.map(|i| ("x-request-id", i)).into_iter().collect();
    request_with(
        "POST",
        &gw.url("/v1/chat/completions"),
        &headers,
        body.to_string(),
    )
    .await
}

/// Sends a request with a fresh id and waits for its access line: every line of
/// earlier requests that was going to be written on the way is there by then
/// (they are written before their responses end).
async fn barrier(gw: &Proc, logs: &Logs, n: u32) {
    let id = format!("barrier-{n}");
    chat_with_id(gw, Some(&id), &chat("m", false, "")).await;
    logs.wait_access(&id).await;
}

#[tokio::test]
async fn client_request_id_is_echoed_forwarded_and_named_by_one_access_line() {
    const ID: &str = "6c0f3a52-1b7e-4d2a-9f4e-2a7b9c0d1e3f";
    let (up, heads) = recording_upstream(vec![(200, "x-request-id: up-777\r\n", ANSWER)]);
    let (gw, logs) = serve_logged(&gateway_config(up, None, ""));
    let r = chat_with_id(&gw, Some(ID), &chat("m", false, "")).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.headers["x-request-id"], ID);
    assert_eq!(r.headers["x-upstream-request-id"], "up-777");
    assert_eq!(
        forwarded_ids(&heads.lock().unwrap()[0]),
        vec![ID.to_string()]
    );
    logs.wait_access(ID).await;
    barrier(&gw, &logs, 0).await;
    let lines = logs.access(ID);
    assert_eq!(lines.len(), 1, "{lines:?}");
    let l = &lines[0];
    assert_eq!(l["api"], "openai.chat_completions");
    assert_eq!(l["model"], "m");
    assert_eq!(l["status"], 200);
    assert_eq!(l["outcome"], "ok");
    assert_eq!(l["stream"], false);
    assert_eq!(l["endpoint"], "a/x");
    assert_eq!(l["provider"], "a");
    assert!(
        l["attempts"].as_str().unwrap().starts_with("a/x@a:200:"),
        "{l}"
    );
    assert_eq!(l["attempt_count"], 1);
    assert_eq!(l["upstream_request_id"], "up-777");
    assert_eq!(l["input_tokens"], 1000);
    assert_eq!(l["output_tokens"], 500);
    assert_eq!(l["cached_tokens"], 200);
    assert_eq!(l["reasoning_tokens"], 100);
    // 1000 in at $2/M and 500 out at $8/M.
    assert!(
        (l["cost_usd"].as_f64().unwrap() - 0.006).abs() < 1e-9,
        "{l}"
    );
    assert_eq!(
        l["policy"],
        r.headers["x-switchyard-policy"].to_str().unwrap()
    );
    assert_eq!(l["priority"], "normal");
    assert!(l["latency_ms"].as_f64().is_some(), "{l}");
    assert!(l.get("ttft_ms").is_none(), "{l}");
}

/// Whether `id` is a version 4 UUID in canonical lowercase form (what the gateway
/// generates).
fn is_uuid(id: &str) -> bool {
    let b = id.as_bytes();
    b.len() == 36
        && b.iter().enumerate().all(|(i, c)| match i {
            8 | 13 | 18 | 23 => *c == b'-',
            _ => c.is_ascii_digit() || (b'a'..=b'f').contains(c),
        })
        && b[14] == b'4'
        && b"89ab".contains(&b[19])
}

/// The bug: every request failed with an empty 400 behind llama-cpp-python's
/// server once the gateway sent every request id upstream, because that server
/// refuses an `x-request-id` that is not a UUID. Such an id (the client's
/// `sdk-trace-16`) is now kept, echoed and logged, but not sent upstream.
#[tokio::test]
async fn a_client_request_id_that_is_not_a_uuid_is_not_sent_upstream() {
    let (up, heads) = recording_upstream(vec![(200, "", ANSWER)]);
    let (gw, logs) = serve_logged(&gateway_config(up, None, ""));
    let r = chat_with_id(&gw, Some("sdk-trace-16"), &chat("m", false, "")).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.headers["x-request-id"], "sdk-trace-16");
    let head = heads.lock().unwrap()[0].clone();
    assert!(forwarded_ids(&head).is_empty(), "{head}");
    assert!(!head.contains("x-client-request-id"), "OpenAI only: {head}");
    assert_eq!(logs.wait_access("sdk-trace-16").await.len(), 1);
}

#[tokio::test]
async fn a_missing_or_invalid_request_id_is_replaced_by_a_generated_one() {
    let (up, heads) = recording_upstream(vec![(200, "", ANSWER)]);
    let (gw, logs) = serve_logged(&gateway_config(up, None, ""));
    let long = "x".repeat(129);
    for (n, sent) in [None, Some("has space"), Some(long.as_str())]
        .into_iter()
        .enumerate()
    {
        let r = chat_with_id(&gw, sent, &chat("m", false, "")).await;
        assert_eq!(r.status, 200, "{}", r.text());
        let id = r.headers["x-request-id"].to_str().unwrap().to_string();
        assert!(is_uuid(&id), "{id}");
        assert_eq!(forwarded_ids(&heads.lock().unwrap()[n]), vec![id.clone()]);
        assert_eq!(logs.wait_access(&id).await.len(), 1);
    }
    // Responses that never reach an upstream carry one too.
    for path in ["/v1/models", "/health", "/v1/nope"] {
        let r = get(&gw.url(path)).await;
        assert!(
            is_uuid(r.headers["x-request-id"].to_str().unwrap()),
            "{path}"
        );
    }
}

#[tokio::test]
async fn errors_have_the_id_and_one_access_line() {
    let (up, _) = recording_upstream(vec![(200, "", ANSWER)]);
    let (gw, logs) = serve_logged(&gateway_config(up, None, "max_body_bytes: 2000"));
    // Unknown model: the gateway's 404.
    let r = chat_with_id(&gw, Some("err-model"), &chat("nope", false, "")).await;
    assert_eq!(r.status, 404, "{}", r.text());
    assert_eq!(r.headers["x-request-id"], "err-model");
    // Bad body: 400 before a model is known.
    let r = chat_with_id(&gw, Some("err-json"), "{not json").await;
    assert_eq!(r.status, 400, "{}", r.text());
    // Too large: refused by ingress before the gateway.
    let big = chat("m", false, &format!(r#","user":"{}""#, "y".repeat(3000)));
    let r = chat_with_id(&gw, Some("err-large"), &big).await;
    assert_eq!(r.status, 413, "{}", r.text());
    assert_eq!(r.headers["x-request-id"], "err-large");
    barrier(&gw, &logs, 1).await;
    for (id, status, model) in [
        ("err-model", 404, Some("nope")),
        ("err-json", 400, None),
        ("err-large", 413, None),
    ] {
        let lines = logs.access(id);
        assert_eq!(lines.len(), 1, "{id}: {lines:?}");
        let l = &lines[0];
        assert_eq!(l["status"], status, "{l}");
        assert_eq!(l["outcome"], "error", "{l}");
        assert!(l["error"].is_string(), "{l}");
        assert_eq!(l.get("model").and_then(|m| m.as_str()), model, "{l}");
        assert!(l.get("cost_usd").is_none(), "{l}");
    }
}

#[tokio::test]
async fn every_attempt_is_forwarded_the_id_and_listed_in_the_line() {
    const TWO: &str = "0d9e8f7a-6b5c-4d3e-a2f1-0e9d8c7b6a59";
    let (a, a_heads) = recording_upstream(vec![(500, "", r#"{"error":{"message":"boom"}}"#)]);
    let (b, b_heads) = recording_upstream(vec![(200, "request-id: b-9\r\n", ANSWER)]);
    let (gw, logs) = serve_logged(&gateway_config(a, Some(b), ""));
    let before = metric(
        &get(&gw.url("/metrics")).await.text(),
        "switchyard_fallbacks_total",
        &[("model", "m")],
    );
    let r = chat_with_id(&gw, Some(TWO), &chat("m", false, "")).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.headers["x-upstream-request-id"], "b-9");
    let a_ids: Vec<String> = a_heads
        .lock()
        .unwrap()
        .iter()
        .flat_map(|h| forwarded_ids(h))
        .collect();
    assert!(
        !a_ids.is_empty() && a_ids.iter().all(|i| i == TWO),
        "{a_ids:?}"
    );
    assert_eq!(forwarded_ids(&b_heads.lock().unwrap()[0]), vec![TWO]);
    let lines = logs.wait_access(TWO).await;
    let l = &lines[0];
    let attempts = l["attempts"].as_str().unwrap();
    let parts: Vec<&str> = attempts.split(',').collect();
    assert_eq!(parts.len() as u64, l["attempt_count"].as_u64().unwrap());
    // The provider's own status, not the gateway's 502 for it.
    assert!(
        parts[..parts.len() - 1]
            .iter()
            .all(|p| p.starts_with("a/x@a:500:")),
        "{attempts}"
    );
    assert!(
        parts[parts.len() - 1].starts_with("b/x@b:200:"),
        "{attempts}"
    );
    assert_eq!(l["endpoint"], "b/x");
    // Provider b has no prices: no cost.
    assert_eq!(l["cost_usd"], 0.0);
    let m = get(&gw.url("/metrics")).await.text();
    assert_eq!(
        metric(&m, "switchyard_fallbacks_total", &[("model", "m")]) - before,
        1.0,
        "{m}"
    );
    assert!(
        metric(
            &m,
            "switchyard_attempts_total",
            &[("endpoint", "a/x"), ("outcome", "failed")]
        ) >= 1.0
    );
    assert!(
        metric(
            &m,
            "switchyard_attempts_total",
            &[("endpoint", "b/x"), ("outcome", "ok")]
        ) >= 1.0
    );
}

/// An OpenAI stream of `words`, with a usage chunk.
const STREAM: &str = "data: {\"id\":\"s\",\"object\":\"chat.completion.chunk\",\"created\":0,\"model\":\"x\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"hi\"},\"finish_reason\":null}]}\n\ndata: {\"id\":\"s\",\"object\":\"chat.completion.chunk\",\"created\":0,\"model\":\"x\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\ndata: {\"id\":\"s\",\"object\":\"chat.completion.chunk\",\"created\":0,\"model\":\"x\",\"choices\":[],\"usage\":{\"prompt_tokens\":40,\"completion_tokens\":2,\"total_tokens\":42}}\n\ndata: [DONE]\n\n";

#[tokio::test]
async fn a_stream_has_the_id_and_one_line_when_it_ends() {
    let (up, heads) = recording_upstream(vec![(200, "x-request-id: up-s\r\n", STREAM)]);
    let (gw, logs) = serve_logged(&gateway_config(up, None, ""));
    let r = chat_with_id(&gw, Some("stream-1"), &chat("m", true, "")).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(r.text().contains("[DONE]"), "{}", r.text());
    assert_eq!(r.headers["x-request-id"], "stream-1");
    assert_eq!(r.headers["x-upstream-request-id"], "up-s");
    // Not a UUID: kept and echoed, but not sent upstream (see the next test).
    assert!(forwarded_ids(&heads.lock().unwrap()[0]).is_empty());
    logs.wait_access("stream-1").await;
    barrier(&gw, &logs, 2).await;
    let lines = logs.access("stream-1");
    assert_eq!(lines.len(), 1, "{lines:?}");
    let l = &lines[0];
    assert_eq!(l["stream"], true);
    assert_eq!(l["outcome"], "ok");
    assert_eq!(l["endpoint"], "a/x");
    assert_eq!(l["input_tokens"], 40);
    assert_eq!(l["output_tokens"], 2);
    assert!(l["ttft_ms"].as_f64().is_some(), "{l}");
    assert!(
        l["attempts"].as_str().unwrap().starts_with("a/x@a:200:"),
        "{l}"
    );
}

#[tokio::test]
async fn a_client_that_leaves_mid_stream_gets_one_client_gone_line() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let m = mock(&["--tokens-per-s", "20"]);
    let cfg = format!(
        "providers:\n  a: {{ kind: openai-compatible, base_url: http://{}/v1 }}\nmodels:\n  m: {{ endpoints: [ {{ provider: a, model: x }} ] }}\n",
        m.addr
    );
    let (gw, logs) = serve_logged(&cfg);
    let body = chat("m", true, r#","max_tokens":400"#);
    let mut s = tokio::net::TcpStream::connect(gw.addr).await.unwrap();
    let req = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nx-request-id: gone-1\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes()).await.unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    while !String::from_utf8_lossy(&got).contains("data: {") {
        let n = tokio::time::timeout(Duration::from_secs(10), s.read(&mut buf))
            .await
            .expect("a first chunk within 10 s")
            .unwrap();
        assert!(n > 0, "closed early: {}", String::from_utf8_lossy(&got));
        got.extend_from_slice(&buf[..n]);
    }
    assert!(String::from_utf8_lossy(&got).contains("x-request-id: gone-1"));
    drop(s);
    let lines = logs.wait_access("gone-1").await;
    barrier(&gw, &logs, 3).await;
    assert_eq!(logs.access("gone-1").len(), 1, "{lines:?}");
    assert_eq!(lines[0]["outcome"], "client_gone", "{}", lines[0]);
    assert_eq!(lines[0]["stream"], true);
}

/// Found by attack (2026-12-05): a client that left before the answer's head (here
/// while a whole answer was still being generated) got no access line at all.
#[tokio::test]
async fn a_client_that_leaves_before_the_answer_still_gets_one_access_line() {
    use tokio::io::AsyncWriteExt;
    let m = mock(&["--tokens-per-s", "20"]);
    let cfg = format!(
        "providers:\n  a: {{ kind: openai-compatible, base_url: http://{}/v1 }}\nmodels:\n  m: {{ endpoints: [ {{ provider: a, model: x }} ] }}\n",
        m.addr
    );
    let (gw, logs) = serve_logged(&cfg);
    // 400 tokens at 20 a second: the whole answer would take 20 s.
    let body = chat("m", false, r#","max_tokens":400"#);
    let mut s = tokio::net::TcpStream::connect(gw.addr).await.unwrap();
    let req = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nx-request-id: left-1\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes()).await.unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    drop(s);
    let lines = logs.wait_access("left-1").await;
    barrier(&gw, &logs, 2).await;
    assert_eq!(logs.access("left-1").len(), 1, "{lines:?}");
    assert_eq!(lines[0]["outcome"], "client_gone", "{}", lines[0]);
    assert_eq!(lines[0]["status"], 499, "{}", lines[0]);
    assert_eq!(lines[0]["stream"], false);
    // Found by the operator attack of 2026-12-07: the attempt the client gave up
    // on was in no view (`attempts` empty, no attempt metric, no endpoint in the
    // decision log). `endpoint` stays null: it names what served.
    assert!(lines[0]["endpoint"].is_null(), "{}", lines[0]);
    assert_eq!(lines[0]["attempt_count"], 1, "{}", lines[0]);
    let attempts = lines[0]["attempts"].as_str().unwrap();
    assert!(
        attempts.contains("a/x") && attempts.contains("499"),
        "{attempts}"
    );
    // And (outside attack, 2026-12-07) it is `abandoned`, not `failed`: the
    // endpoint did nothing wrong.
    let metrics = get(&gw.url("/metrics")).await.text();
    let abandoned = [("endpoint", "a/x"), ("outcome", "abandoned")];
    assert!(
        metric(&metrics, "switchyard_attempts_total", &abandoned) > 0.0,
        "{metrics}"
    );
    let failed = [("endpoint", "a/x"), ("outcome", "failed")];
    assert_eq!(
        metric(&metrics, "switchyard_attempts_total", &failed),
        0.0,
        "{metrics}"
    );
}

/// Found by the operator attack of 2026-12-07: a client that closed its connection
/// halfway through its body was logged as a 400 `invalid_request` (nothing was ever
/// sent to it), and a 413 was missing from `switchyard_requests_total`.
#[tokio::test]
async fn a_body_cut_short_is_client_gone_and_a_413_is_counted() {
    use tokio::io::AsyncWriteExt;
    let m = mock(&[]);
    let cfg = format!(
        "server: {{ max_body_bytes: 1000 }}\nproviders:\n  a: {{ kind: openai-compatible, base_url: http://{}/v1 }}\nmodels:\n  m: {{ endpoints: [ {{ provider: a, model: x }} ] }}\n",
        m.addr
    );
    let (gw, logs) = serve_logged(&cfg);
    let mut s = tokio::net::TcpStream::connect(gw.addr).await.unwrap();
    s.write_all(b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nx-request-id: cut-1\r\ncontent-type: application/json\r\ncontent-length: 500\r\n\r\n{\"model\":\"m\",")
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    drop(s);
    let lines = logs.wait_access("cut-1").await;
    assert_eq!(lines[0]["status"], 499, "{}", lines[0]);
    assert_eq!(lines[0]["outcome"], "client_gone", "{}", lines[0]);
    let big = chat("m", false, &format!(r#","user":"{}""#, "x".repeat(5000)));
    let r = chat_with_id(&gw, Some("big-1"), &big).await;
    assert_eq!(r.status, 413, "{}", r.text());
    let metrics = get(&gw.url("/metrics")).await.text();
    let requests = |status| {
        metric(
            &metrics,
            "switchyard_requests_total{",
            &[("status", status)],
        )
    };
    assert!(requests("413") > 0.0, "{metrics}");
    assert_eq!(requests("499"), 0.0, "{metrics}");
}

#[tokio::test]
async fn a_cache_hit_has_one_line_naming_the_cache() {
    let (up, heads) = recording_upstream(vec![(200, "", ANSWER)]);
    let mut cfg = gateway_config(up, None, "");
    cfg.push_str("cache: { enabled: true }\n");
    let (gw, logs) = serve_logged(&cfg);
    let body = chat("m", false, r#","temperature":0"#);
    let mut hit = None;
    for n in 0..200 {
        let id = format!("cache-{n}");
        let r = chat_with_id(&gw, Some(&id), &body).await;
        assert_eq!(r.status, 200, "{}", r.text());
        if r.headers
            .get("x-switchyard-cache")
            .is_some_and(|v| v == "hit")
        {
            hit = Some(id);
            break;
        }
        // The store runs off the request path.
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let id = hit.expect("a cache hit");
    assert_eq!(heads.lock().unwrap().len(), 1);
    logs.wait_access(&id).await;
    barrier(&gw, &logs, 4).await;
    let lines = logs.access(&id);
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert_eq!(lines[0]["cache"], "hit");
    assert_eq!(lines[0]["endpoint"], "cache");
    assert_eq!(lines[0]["attempt_count"], 0);
    assert_eq!(logs.access("cache-0")[0]["cache"], "miss");
}

/// The series names of a Prometheus text rendering (histograms by base name).
fn series(text: &str) -> std::collections::BTreeSet<String> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|l| {
            let name = l.split(['{', ' ']).next().unwrap();
            ["_bucket", "_sum", "_count"]
                .iter()
                .find_map(|s| name.strip_suffix(s))
                .unwrap_or(name)
                .to_string()
        })
        .collect()
}

#[tokio::test]
async fn token_cost_and_build_metrics_are_exported_with_help() {
    let (up, _) = recording_upstream(vec![(200, "", ANSWER)]);
    let (gw, _logs) = serve_logged(&gateway_config(up, None, ""));
    let r = request_with(
        "POST",
        &gw.url("/v1/chat/completions"),
        &[
            ("authorization", "Bearer sk-test-1"),
            ("openai-organization", "org-1"),
        ],
        chat("m", false, ""),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    let m = get(&gw.url("/metrics")).await.text();
    for (kind, n) in [
        ("input", 1000.0),
        ("output", 500.0),
        ("cached", 200.0),
        ("reasoning", 100.0),
    ] {
        assert_eq!(
            metric(
                &m,
                "switchyard_tokens_total",
                &[("model", "m"), ("endpoint", "a/x"), ("kind", kind)]
            ),
            n,
            "{kind}: {m}"
        );
    }
    let cost = m
        .lines()
        .find(|l| l.starts_with("switchyard_cost_usd_total{"))
        .unwrap_or_else(|| panic!("{m}"));
    assert!(
        cost.contains("org=\"org-1\"") && cost.contains("key=\"key-"),
        "{cost}"
    );
    assert!(cost.ends_with(" 0.006"), "{cost}");
    let build = m
        .lines()
        .find(|l| l.starts_with("switchyard_build_info{"))
        .unwrap_or_else(|| panic!("{m}"));
    assert!(
        build.contains(&format!("version=\"{}\"", env!("CARGO_PKG_VERSION"))),
        "{build}"
    );
    assert!(
        build.contains("commit=\"") && build.ends_with(" 1"),
        "{build}"
    );
    // The standard process metrics, read from /proc at scrape time.
    let value = |name: &str| -> f64 {
        m.lines()
            .find_map(|l| l.strip_prefix(&format!("{name} ")))
            .unwrap_or_else(|| panic!("no {name} in {m}"))
            .trim()
            .parse()
            .unwrap()
    };
    assert!(value("process_resident_memory_bytes") > 1e6);
    assert!(value("process_open_fds") >= 3.0);
    assert!(value("process_threads") >= 1.0);
    assert!(value("process_max_fds") >= value("process_open_fds"));
    let started = value("process_start_time_seconds");
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    assert!(
        started > now - 3600.0 && started <= now + 5.0,
        "{started} vs {now}"
    );
    assert!(value("process_cpu_seconds_total") >= 0.0);
    for name in series(&m) {
        assert!(m.contains(&format!("# HELP {name} ")), "no HELP for {name}");
    }
}

#[tokio::test]
async fn cost_without_caller_labels_is_one_series_per_endpoint() {
    let (up, _) = recording_upstream(vec![(200, "", ANSWER)]);
    let (gw, _logs) = serve_logged(&gateway_config(up, None, "metrics_caller_labels: false"));
    let r = request_with(
        "POST",
        &gw.url("/v1/chat/completions"),
        &[("authorization", "Bearer sk-test-2")],
        chat("m", false, ""),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    let m = get(&gw.url("/metrics")).await.text();
    let costs: Vec<&str> = m
        .lines()
        .filter(|l| l.starts_with("switchyard_cost_usd_total{"))
        .collect();
    assert_eq!(costs.len(), 1, "{costs:?}");
    assert!(
        costs[0].contains("key=\"all\"") && costs[0].contains("org=\"all\""),
        "{costs:?}"
    );
}

#[test]
fn version_prints_the_version_and_commit() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_switchyard"))
        .arg("--version")
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    let expected_commit = std::process::Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_else(|| "unknown".to_string());
    assert_eq!(
        text.trim(),
        format!(
            "switchyard {} (commit {expected_commit})",
            env!("CARGO_PKG_VERSION")
        )
    );
}

/// The phases before the dispatch run as a future of their own (`Gateway::prepare`):
/// a client that leaves while its request is held there (here the off-peak hold)
/// still gets its one access line.
#[tokio::test]
async fn a_client_that_leaves_during_the_off_peak_hold_gets_one_access_line() {
    use tokio::io::AsyncWriteExt;
    let m = mock(&[]);
    let hour = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
        / 3600;
    let cfg = format!(
        "providers:\n  a: {{ kind: openai-compatible, base_url: http://{}/v1 }}\nmodels:\n  m: {{ endpoints: [ {{ provider: a, model: x }} ] }}\nscheduler: {{ off_peak: {{ hours: \"{}-{}\", timezone: UTC, max_wait: 1h }} }}\n",
        m.addr,
        (hour + 2) % 24,
        (hour + 2) % 24 + 1
    );
    let (gw, logs) = serve_logged(&cfg);
    let body = chat("m", false, "");
    let mut s = tokio::net::TcpStream::connect(gw.addr).await.unwrap();
    let req = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nx-request-id: held-1\r\nx-switchyard-priority: low\r\nx-switchyard-defer: off-peak\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes()).await.unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    drop(s);
    let lines = logs.wait_access("held-1").await;
    barrier(&gw, &logs, 2).await;
    assert_eq!(logs.access("held-1").len(), 1, "{lines:?}");
    assert_eq!(lines[0]["outcome"], "client_gone", "{}", lines[0]);
    assert_eq!(lines[0]["status"], 499, "{}", lines[0]);
}
