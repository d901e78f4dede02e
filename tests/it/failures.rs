//! Bad input and bad upstreams: every failure is a clear OpenAI-shaped error or a
//! clean end of stream.

use crate::common::*;

fn single(m: &Proc, provider_extra: &str) -> Proc {
    serve(&config(
        &[("up", m)],
        provider_extra,
        "  m:\n    endpoints:\n      - { provider: up, model: x }\n",
    ))
}

fn assert_openai_error(r: &Reply, status: u16) -> serde_json::Value {
    assert_eq!(r.status, status, "{}", r.text());
    let v = r.json();
    let e = &v["error"];
    assert!(e["message"].is_string(), "{v}");
    assert!(e["type"].is_string(), "{v}");
    assert!(e.get("param").is_some() && e.get("code").is_some(), "{v}");
    v
}

#[tokio::test]
async fn client_errors() {
    let m = mock(&[]);
    let gw = serve(&format!(
        "server: {{ max_body_bytes: 2048 }}\n{}",
        config(
            &[("up", &m)],
            "",
            "  m:\n    endpoints:\n      - { provider: up, model: x }\n"
        )
    ));
    let url = gw.url("/v1/chat/completions");
    let v = assert_openai_error(&post(&url, "{not json").await, 400);
    assert!(v["error"]["message"]
        .as_str()
        .unwrap()
        .contains("not valid JSON"));
    let v = assert_openai_error(&post(&url, r#"{"model":"m"}"#).await, 400);
    assert!(
        v["error"]["message"].as_str().unwrap().contains("messages"),
        "{v}"
    );
    let v = assert_openai_error(
        &post(
            &url,
            r#"{"model":"m","messages":[{"role":"user","content":"x"}],"temperature":"hot"}"#,
        )
        .await,
        400,
    );
    assert_eq!(v["error"]["param"], "temperature");
    let v = assert_openai_error(&post(&url, &chat("nope", false, "")).await, 404);
    assert_eq!(v["error"]["code"], "model_not_found");
    let big = chat("m", false, &format!(r#","user":"{}""#, "x".repeat(4096)));
    assert_openai_error(&post(&url, &big).await, 413);
    let r = get(&url).await;
    assert_openai_error(&r, 405);
    assert_eq!(
        r.headers["x-switchyard-policy"].len(),
        16,
        "every response names the policy version"
    );
    assert_openai_error(&get(&gw.url("/v2/nothing")).await, 404);
    // Binary garbage.
    let r = request("POST", &url, vec![0xff, 0x00, 0xfe, 0x7b]).await;
    assert_openai_error(&r, 400);
}

#[tokio::test]
async fn upstream_500_is_502_and_429_passes_through() {
    let m = mock(&["--fail-rate", "1", "--fail-status", "500"]);
    let gw = single(&m, "");
    let r = post(&gw.url("/v1/chat/completions"), &chat("m", false, "")).await;
    let v = assert_openai_error(&r, 502);
    assert_eq!(v["error"]["type"], "api_error");

    let m = mock(&[
        "--fail-rate",
        "1",
        "--fail-status",
        "429",
        "--retry-after",
        "7",
    ]);
    let gw = single(&m, "");
    let r = post(&gw.url("/v1/chat/completions"), &chat("m", true, "")).await;
    assert_openai_error(&r, 429);
    assert_eq!(r.headers["retry-after"], "7");
}

#[tokio::test]
async fn failover_to_the_next_endpoint_before_the_first_byte() {
    let bad = mock(&["--fail-rate", "1", "--fail-status", "503"]);
    let good = mock(&[]);
    let gw = serve(&config(
        &[("bad", &bad), ("good", &good)],
        "",
        "  m:\n    endpoints:\n      - { provider: bad, model: x, priority: 1 }\n      - { provider: good, model: x, priority: 2 }\n",
    ));
    for stream in [false, true] {
        let r = post(&gw.url("/v1/chat/completions"), &chat("m", stream, "")).await;
        assert_eq!(r.status, 200, "{}", r.text());
        assert_eq!(r.headers["x-switchyard-endpoint"], "good/x");
    }
}

#[tokio::test]
async fn unreachable_upstream_is_502() {
    // Bind and drop a listener to get a port nobody listens on.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let gw = serve(&format!(
        "providers:\n  dead: {{ kind: openai-compatible, base_url: http://127.0.0.1:{port}/v1 }}\nmodels:\n  m: {{ endpoints: [ {{ provider: dead, model: x }} ] }}\n"
    ));
    let r = post(&gw.url("/v1/chat/completions"), &chat("m", false, "")).await;
    let v = assert_openai_error(&r, 502);
    assert_eq!(v["error"]["code"], "upstream_unreachable");
    let metrics = get(&gw.url("/metrics")).await.text();
    assert!(
        metrics
            .contains(r#"switchyard_upstream_errors_total{endpoint="dead/x",kind="unreachable"}"#),
        "{metrics}"
    );
}

#[tokio::test]
async fn slow_first_byte_is_504() {
    let m = mock(&["--latency-ms", "3000"]);
    let gw = single(&m, "    timeouts: { first_byte_ms: 200 }\n");
    let r = post(&gw.url("/v1/chat/completions"), &chat("m", false, "")).await;
    let v = assert_openai_error(&r, 504);
    assert_eq!(v["error"]["code"], "upstream_timeout");
}

#[tokio::test]
async fn cut_mid_stream_ends_with_an_error_event() {
    // Paced, so the first chunks reach the gateway before the cut.
    let m = mock(&["--cut-after-chunks", "4", "--tokens-per-s", "100"]);
    let gw = single(&m, "");
    let r = post(&gw.url("/v1/chat/completions"), &chat("m", true, "")).await;
    assert_eq!(r.status, 200);
    let events = r.events();
    assert!(events.len() >= 4, "{events:?}");
    let last: serde_json::Value = serde_json::from_str(events.last().unwrap()).unwrap();
    assert_eq!(last["error"]["code"], "upstream_stream_cut", "{last}");
    assert!(!r.text().contains("[DONE]"));
}

/// Issue 18: the error event of a stream the provider cut said hyper's words
/// (`error reading a body from connection: unexpected EOF during chunk size line`)
/// instead of what happened.
#[tokio::test]
async fn a_cut_stream_says_the_provider_closed_it_after_n_events() {
    let m = mock(&["--cut-after-chunks", "4", "--tokens-per-s", "100"]);
    let gw = single(&m, "");
    let r = post(&gw.url("/v1/chat/completions"), &chat("m", true, "")).await;
    let events = r.events();
    let last: serde_json::Value = serde_json::from_str(events.last().unwrap()).unwrap();
    let message = last["error"]["message"].as_str().unwrap_or_default();
    // The count is what reached the gateway (the emulator's last event may be lost
    // in the cut), so only its form is checked.
    let after = message
        .split_once("closed the stream after ")
        .map(|(_, rest)| rest)
        .unwrap_or_default();
    let n: String = after.chars().take_while(char::is_ascii_digit).collect();
    assert!(
        !n.is_empty() && after[n.len()..].starts_with(" events"),
        "{message}"
    );
    assert!(!message.contains("error reading a body"), "{message}");
}

#[tokio::test]
async fn stalled_stream_hits_the_idle_timeout() {
    let m = mock(&["--stall-after-chunks", "3", "--stall-ms", "5000"]);
    let gw = single(&m, "    timeouts: { idle_ms: 300 }\n");
    let r = post(&gw.url("/v1/chat/completions"), &chat("m", true, "")).await;
    let events = r.events();
    let last: serde_json::Value = serde_json::from_str(events.last().unwrap()).unwrap();
    assert_eq!(last["error"]["code"], "upstream_timeout", "{last}");
}

#[tokio::test]
async fn upstream_garbage_is_502() {
    // A "provider" that answers 200 with HTML: the mock's /health path stands in.
    let m = mock(&[]);
    let gw = serve(&format!(
        "providers:\n  odd: {{ kind: openai-compatible, base_url: http://{}/health/x }}\nmodels:\n  m: {{ endpoints: [ {{ provider: odd, model: x }} ] }}\n",
        m.addr
    ));
    let r = post(&gw.url("/v1/chat/completions"), &chat("m", false, "")).await;
    // The mock answers 404 JSON for that path: a misconfigured upstream is our fault, 502.
    assert_openai_error(&r, 502);
}

#[test]
fn bad_config_reports_every_problem_and_exits_1() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad.yaml");
    std::fs::write(
        &path,
        "providers:\n  azure: { kind: azure-openai, base_url: https://x.example }\nmodels:\n  gpt-4o:\n    endpoints:\n      - { provider: azure, model: a }\n      - { provider: azur, model: b }\nserver: { listen: nowhere }\n",
    )
    .unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_switchyard"))
        .args(["serve", "--check", "--config", path.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(r#"models.gpt-4o.endpoints[1].provider: unknown provider "azur" (did you mean "azure"?)"#),
        "{err}"
    );
    assert!(err.contains("server.listen"), "{err}");
}

/// An upstream that answers every request (streaming ones too) with a JSON completion
/// saying `content`, one connection per request. With `drop_first`, its first
/// connection is closed as soon as the request arrives instead (like a keep-alive
/// connection the provider dropped).
fn json_upstream(content: &'static str, drop_first: bool) -> std::net::SocketAddr {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for (n, stream) in listener.incoming().enumerate() {
            let Ok(mut s) = stream else { return };
            let mut buf = [0u8; 65536];
            let _ = s.read(&mut buf);
            if drop_first && n == 0 {
                drop(s);
                continue;
            }
            let body = format!(
                r#"{{"id":"x","object":"chat.completion","created":0,"model":"x","choices":[{{"index":0,"message":{{"role":"assistant","content":"{content}"}},"finish_reason":"stop"}}]}}"#
            );
            let _ = write!(
                s,
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    addr
}

/// A connection the provider closed after reading the request is an attempt failure
/// that is never re-sent to that provider (it may have received and billed it): the
/// next endpoint serves, and the attempt is counted.
#[tokio::test]
async fn a_dropped_connection_moves_to_the_next_endpoint_without_a_resend() {
    let addr = json_upstream("ok", true);
    let gw = serve_with_policies(
        &format!(
            "providers:\n  p: {{ kind: openai-compatible, base_url: http://{addr}/v1 }}\n  q: {{ kind: mock }}\nmodels:\n  m: {{ endpoints: [ {{ provider: p, model: x }}, {{ provider: q, model: x }} ] }}\n"
        ),
        &[(
            "r.policy",
            "route r when request.model == \"m\" {\n  default use endpoint \"p/x\"\n  fallback endpoint \"q/x\" retries 1\n}\n",
        )],
    );
    let r = post(&gw.url("/v1/chat/completions"), &chat("m", false, "")).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(
        r.headers["x-switchyard-endpoint"], "q/x",
        "not re-sent to p"
    );
    assert_eq!(r.headers["x-switchyard-attempts"], "2");
}

#[tokio::test]
async fn a_json_answer_to_a_stream_request_falls_back() {
    let odd = json_upstream("json", false);
    let good = mock(&[]);
    let gw = serve(&format!(
        "providers:\n  odd: {{ kind: openai-compatible, base_url: http://{odd}/v1 }}\n  good: {{ kind: openai-compatible, base_url: http://{}/v1 }}\nmodels:\n  m: {{ endpoints: [ {{ provider: odd, model: x, priority: 1 }}, {{ provider: good, model: x, priority: 2 }} ] }}\n",
        good.addr
    ));
    let r = post(&gw.url("/v1/chat/completions"), &chat("m", true, "")).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.headers["x-switchyard-endpoint"], "good/x");
    assert_eq!(r.events().last().map(String::as_str), Some("[DONE]"));
}

/// Writes `head` and `body` whole before reading anything (as most clients do), then
/// reads the answer to the end of the connection.
async fn write_all_then_read(addr: &str, head: String, body: &[u8], chunked: bool) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(head.as_bytes()).await.unwrap();
    if chunked {
        for c in body.chunks(64 * 1024) {
            s.write_all(format!("{:x}\r\n", c.len()).as_bytes())
                .await
                .unwrap();
            s.write_all(c).await.unwrap();
            s.write_all(b"\r\n").await.unwrap();
        }
        s.write_all(b"0\r\n\r\n").await.unwrap();
    } else {
        s.write_all(body).await.unwrap();
    }
    let mut out = Vec::new();
    s.read_to_end(&mut out).await.unwrap();
    String::from_utf8_lossy(&out).into_owned()
}

#[tokio::test]
async fn an_oversized_body_written_whole_still_gets_the_413() {
    let m = mock(&[]);
    let gw = serve(&format!(
        "server: {{ max_body_bytes: 2048 }}\n{}",
        config(
            &[("up", &m)],
            "",
            "  m:\n    endpoints:\n      - { provider: up, model: x }\n"
        )
    ));
    let addr = gw.addr.to_string();
    // 4 MiB: more than loopback socket buffers hold, so a server that answers without
    // reading leaves this client failing to write or reading a reset.
    let body = vec![b'x'; 4 << 20];
    for chunked in [false, true] {
        let length = if chunked {
            "Transfer-Encoding: chunked".to_string()
        } else {
            format!("Content-Length: {}", body.len())
        };
        let head = format!(
            "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n{length}\r\nConnection: close\r\n\r\n"
        );
        let answer = write_all_then_read(&addr, head, &body, chunked).await;
        assert!(
            answer.starts_with("HTTP/1.1 413"),
            "chunked {chunked}: {answer}"
        );
        assert!(answer.contains("request_too_large"), "{answer}");
    }
}

#[tokio::test]
async fn an_oversized_declared_body_with_expect_100_continue_is_refused_unread() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let m = mock(&[]);
    let gw = serve(&format!(
        "server: {{ max_body_bytes: 2048 }}\n{}",
        config(
            &[("up", &m)],
            "",
            "  m:\n    endpoints:\n      - { provider: up, model: x }\n"
        )
    ));
    // The client asks before sending 4 MiB (curl does for large bodies): the answer is
    // the 413 at once, not `100 Continue` (which makes it upload the whole body only
    // for it to be thrown away, or wait for the drain timeout if it sends nothing).
    let mut s = tokio::net::TcpStream::connect(gw.addr).await.unwrap();
    let head = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\nExpect: 100-continue\r\n\r\n",
        4 << 20
    );
    s.write_all(head.as_bytes()).await.unwrap();
    let mut buf = [0u8; 512];
    let n = tokio::time::timeout(std::time::Duration::from_secs(2), s.read(&mut buf))
        .await
        .expect("no answer within 2 s")
        .unwrap();
    let answer = String::from_utf8_lossy(&buf[..n]).into_owned();
    assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
}

/// Found by attack (2026-12-05): a provider that ended its stream's body cleanly
/// before the answer's end (no finish, no `[DONE]`) got an error event saying only
/// "upstream closed the stream", where every other cut names the provider and how
/// far it got.
#[tokio::test]
async fn a_stream_body_ended_before_the_answer_names_the_provider() {
    use std::io::{Read, Write};
    const BODY: &str = "data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"created\":0,\"model\":\"x\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"Hello\"},\"finish_reason\":null}]}\n\n";
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut s) = stream else { return };
            let _ = s.set_read_timeout(Some(std::time::Duration::from_secs(5)));
            let mut buf = [0u8; 65536];
            let _ = s.read(&mut buf);
            let _ = write!(
                s,
                "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{BODY}",
                BODY.len()
            );
        }
    });
    let gw = serve(&format!(
        "providers:\n  early: {{ kind: openai-compatible, base_url: http://{addr}/v1 }}\nmodels:\n  m: {{ endpoints: [ {{ provider: early, model: x }} ] }}\n"
    ));
    let r = post(&gw.url("/v1/chat/completions"), &chat("m", true, "")).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let events = r.events();
    let last: serde_json::Value = serde_json::from_str(events.last().unwrap()).unwrap();
    assert_eq!(last["error"]["code"], "upstream_stream_cut", "{last}");
    let message = last["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("provider `early` closed the stream after 1 event"),
        "{message}"
    );
    assert!(!r.text().contains("[DONE]"));
}

const QUOTA: &str = r#"{"error":{"message":"You exceeded your current quota, please check your plan and billing details.","type":"insufficient_quota","param":null,"code":"insufficient_quota"}}"#;

/// Found by the conformance review: OpenAI's 429 `insufficient_quota` was handled as
/// a transient rate limit: retried on the same endpoint, which cannot succeed until
/// someone pays, kept in rotation, and reported as `upstream_rate_limited`.
#[tokio::test]
async fn insufficient_quota_was_retried_on_the_same_endpoint_like_a_rate_limit() {
    let (broke, hits) = scripted_upstream(429, QUOTA);
    out_of_credit_fails_over_and_pauses(
        &format!("{{ kind: openai-compatible, base_url: http://{broke}/v1 }}"),
        &hits,
        "You exceeded your current quota",
    )
    .await;
}

/// DeepSeek API, "Error Codes": "402 - Insufficient Balance".
const PAYMENT_REQUIRED: &str = r#"{"error":{"message":"Insufficient Balance","type":"unknown_error","param":null,"code":"invalid_request_error"}}"#;

/// Found by review of the quota pause: a provider's 402 Payment Required (our
/// account is out of credit, as with OpenAI's `insufficient_quota`) moved on to the
/// next endpoint but left its own in rotation, so every later request paid an
/// attempt on an endpoint that could only refuse it again.
#[tokio::test]
async fn a_402_payment_required_did_not_pause_its_endpoint() {
    let (broke, hits) = scripted_upstream(402, PAYMENT_REQUIRED);
    out_of_credit_fails_over_and_pauses(
        &format!("{{ kind: openai-compatible, base_url: http://{broke}/v1 }}"),
        &hits,
        "Insufficient Balance",
    )
    .await;
}

/// Anthropic API, "Errors": an account out of credit is HTTP 400
/// `invalid_request_error` with this message.
const CREDIT_TOO_LOW: &str = r#"{"type":"error","error":{"type":"invalid_request_error","message":"Your credit balance is too low to access the Anthropic API. Please go to Plans & Billing to upgrade or purchase credits."}}"#;

/// Found by review of the quota pause: Anthropic's 400 "Your credit balance is too
/// low" was passed to the client as its own mistake, without trying the next
/// endpoint, and the endpoint stayed in rotation.
#[tokio::test]
async fn anthropics_credit_balance_too_low_was_blamed_on_the_client() {
    let (broke, hits) = scripted_upstream(400, CREDIT_TOO_LOW);
    out_of_credit_fails_over_and_pauses(
        &format!("{{ kind: anthropic, base_url: http://{broke} }}"),
        &hits,
        "Your credit balance is too low",
    )
    .await;
}

/// An account out of credit: provider `p` (`p_yaml`, whose upstream counts its
/// requests in `hits` and always says so, with `reason` in its message) is the
/// default of model `m`, whose fallback `q` serves, and the only endpoint of model
/// `solo`. The first request moves on to `q` at once, without retrying `p`; the next
/// skip `p`, which is paused; `solo` then reads OpenAI's 429 `insufficient_quota`,
/// first with the provider's reason, then from the pause, without asking `p` again.
async fn out_of_credit_fails_over_and_pauses(
    p_yaml: &str,
    hits: &std::sync::atomic::AtomicUsize,
    reason: &str,
) {
    let (good, good_hits) = scripted_upstream(200, COMPLETION);
    let gw = start_app(
        &format!(
            "providers:\n  p: {p_yaml}\n  q: {{ kind: openai-compatible, base_url: http://{good}/v1 }}\nmodels:\n  m: {{ endpoints: [ {{ provider: p, model: x }}, {{ provider: q, model: x }} ] }}\n  solo: {{ endpoints: [ {{ provider: p, model: y }} ] }}\n"
        ),
        &[(
            "r.policy",
            "route r when request.model == \"m\" {\n  default use endpoint \"p/x\"\n  fallback endpoint \"q/x\" retries 2\n}\n",
        )],
    )
    .await;
    let hits = || hits.load(std::sync::atomic::Ordering::SeqCst);
    let url = gw.url("/v1/chat/completions");
    let r = post(&url, &chat("m", false, "")).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.headers["x-switchyard-endpoint"], "q/x");
    assert_eq!(r.headers["x-switchyard-attempts"], "2", "p was retried");
    assert_eq!(hits(), 1);
    // Out of rotation: the next request goes straight to q.
    let r = post(&url, &chat("m", false, "")).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.headers["x-switchyard-attempts"], "1");
    assert_eq!(hits(), 1);
    assert_eq!(good_hits.load(std::sync::atomic::Ordering::SeqCst), 2);
    // With nothing left, the client reads OpenAI's 429 and the provider's reason:
    // first from the provider's answer, then from the pause it caused.
    let solo = post(&url, &chat("solo", false, "")).await;
    for r in [&solo, &post(&url, &chat("solo", false, "")).await] {
        assert_eq!(r.status, 429, "{}", r.text());
        let e = &r.json()["error"];
        assert_eq!(e["type"], "insufficient_quota", "{}", r.text());
        assert_eq!(e["code"], "insufficient_quota", "{}", r.text());
        assert!(!r.headers.contains_key("retry-after"), "{:?}", r.headers);
    }
    let paused = post(&url, &chat("solo", false, "")).await;
    for r in [&solo, &paused] {
        assert!(
            r.json()["error"]["message"]
                .as_str()
                .unwrap()
                .contains(reason),
            "{}",
            r.text()
        );
    }
    assert_eq!(hits(), 2);
}

/// Found by review of the quota pause: once every endpoint of a model was paused
/// for quota, the client read only "every endpoint of the model is out of quota
/// with its provider", never what the providers said (which account, which plan),
/// though the request that caused the pause had read it.
#[tokio::test]
async fn every_endpoint_paused_for_quota_answered_without_the_providers_message() {
    let (openai, openai_hits) = scripted_upstream(429, QUOTA);
    let (deepseek, deepseek_hits) = scripted_upstream(402, PAYMENT_REQUIRED);
    // `m` takes the built-in decision, a policy routes `r`.
    let gw = start_app(
        &format!(
            "providers:\n  o: {{ kind: openai-compatible, base_url: http://{openai}/v1 }}\n  d: {{ kind: openai-compatible, base_url: http://{deepseek}/v1 }}\nmodels:\n  m: {{ endpoints: [ {{ provider: o, model: x, priority: 1 }}, {{ provider: d, model: y, priority: 2 }} ] }}\n  r: {{ endpoints: [ {{ provider: o, model: x, name: ro }}, {{ provider: d, model: y, name: rd }} ] }}\n"
        ),
        &[(
            "r.policy",
            "route r when request.model == \"r\" {\n  default use endpoint \"ro\"\n  fallback endpoint \"rd\"\n}\n",
        )],
    )
    .await;
    let url = gw.url("/v1/chat/completions");
    for (model, ids) in [("m", ["o/x", "d/y"]), ("r", ["ro", "rd"])] {
        let hits = || {
            (
                openai_hits.load(std::sync::atomic::Ordering::SeqCst),
                deepseek_hits.load(std::sync::atomic::Ordering::SeqCst),
            )
        };
        let before = hits();
        let first = post(&url, &chat(model, false, "")).await;
        // Both refused it, then both are paused: the next requests reach neither.
        let later = [
            post(&url, &chat(model, false, "")).await,
            post(&url, &chat(model, true, "")).await,
        ];
        assert_eq!(hits(), (before.0 + 1, before.1 + 1), "{model}");
        for r in std::iter::once(&first).chain(&later) {
            assert_eq!(r.status, 429, "{model}: {}", r.text());
            let e = &r.json()["error"];
            assert_eq!(e["type"], "insufficient_quota", "{}", r.text());
            assert_eq!(e["code"], "insufficient_quota", "{}", r.text());
            let message = e["message"].as_str().unwrap();
            for said in [
                ids[0],
                "You exceeded your current quota",
                ids[1],
                "Insufficient Balance",
            ] {
                assert!(message.contains(said), "{model}, {said}: {message}");
            }
        }
        let message = later[0].json()["error"]["message"].to_string();
        assert!(
            message.contains("is out of quota with its provider"),
            "{model}: {message}"
        );
    }
}

/// Anthropic API, "Rate limits": the monthly spend cap of the organization's tier,
/// reached. "API usage pauses until 00:00 UTC on the first day of the next month";
/// the answer has no `retry-after` and retrying fails until then.
const ANTHROPIC_SPEND_CAP: &str = r#"{"type":"error","error":{"type":"rate_limit_error","message":"You have reached your API usage limits: your organization has crossed its monthly API usage threshold, set based on your organization's API tier. You will regain access on 2026-09-01 at 00:00 UTC.","details":{"error_code":"enforced_spend_limit_reached"}},"request_id":"req_018EeWyXxfu5pfWkrYcMdjWG"}"#;

/// Found by the billing review: Anthropic's 429 for a spent monthly cap
/// (`details.error_code: enforced_spend_limit_reached`) was a rate limit, retried on
/// the same endpoint, which can only refuse it again until next month.
#[tokio::test]
async fn anthropics_spend_cap_429_was_retried_like_a_rate_limit() {
    let (broke, hits) = scripted_upstream(429, ANTHROPIC_SPEND_CAP);
    out_of_credit_fails_over_and_pauses(
        &format!("{{ kind: anthropic, base_url: http://{broke} }}"),
        &hits,
        "crossed its monthly API usage threshold",
    )
    .await;
}

/// Anthropic API, "Errors": "The API also returns a 400 when usage reaches an
/// organization or workspace spend limit you set".
const ANTHROPIC_SPEND_LIMIT: &str = r#"{"type":"error","error":{"type":"invalid_request_error","message":"You have reached your specified API usage limits. You will regain access on 2026-09-01 at 00:00 UTC."}}"#;

/// Found by the billing review: Anthropic's 400 for a spend limit the organization
/// set was passed to the client as its own mistake, never tried elsewhere.
#[tokio::test]
async fn anthropics_spend_limit_400_was_blamed_on_the_client() {
    let (broke, hits) = scripted_upstream(400, ANTHROPIC_SPEND_LIMIT);
    out_of_credit_fails_over_and_pauses(
        &format!("{{ kind: anthropic, base_url: http://{broke} }}"),
        &hits,
        "reached your specified API usage limits",
    )
    .await;
}

/// Google APIs, `google/api/error_reason.proto`, `BILLING_DISABLED`: "The request
/// whose associated billing account is disabled", with its example `ErrorInfo`.
const GEMINI_BILLING_DISABLED: &str = r#"{"error":{"code":403,"message":"This API method requires billing to be enabled. Please enable billing on project #123 by visiting https://console.developers.google.com/billing/enable?project=123 then retry.","status":"PERMISSION_DENIED","details":[{"@type":"type.googleapis.com/google.rpc.ErrorInfo","reason":"BILLING_DISABLED","domain":"googleapis.com","metadata":{"consumer":"projects/123","service":"generativelanguage.googleapis.com"}}]}}"#;

/// Found by the billing review: Gemini's 403 `PERMISSION_DENIED` whose `ErrorInfo`
/// says `BILLING_DISABLED` was reported as refused credentials ("check the
/// provider's api_key_env") and left its endpoint in rotation.
#[tokio::test]
async fn geminis_billing_disabled_403_was_taken_for_a_refused_key() {
    let (broke, hits) = scripted_upstream(403, GEMINI_BILLING_DISABLED);
    out_of_credit_fails_over_and_pauses(
        &format!("{{ kind: gemini, base_url: http://{broke} }}"),
        &hits,
        "requires billing to be enabled",
    )
    .await;
}

/// Gemini API, "API errors": 402 `RESOURCE_EXHAUSTED`, "Your prepay credit balance
/// is depleted" (Google's announcement "Depleted prepay credits now return HTTP 402
/// instead of 429" gives this body).
const GEMINI_PREPAY_DEPLETED: &str = r#"{"error":{"code":402,"message":"Your prepayment credits are depleted. Please go to AI Studio at https://ai.studio/projects to manage your project and billing. Learn more at https://ai.google.dev/gemini-api/docs/billing#prepay.","status":"RESOURCE_EXHAUSTED"}}"#;

/// Gemini's 402 for depleted prepaid credits is an account out of credit like any
/// provider's 402 (kept as a check of the Gemini adapter's own error mapping).
#[tokio::test]
async fn geminis_prepay_depleted_402_fails_over_and_pauses() {
    let (broke, hits) = scripted_upstream(402, GEMINI_PREPAY_DEPLETED);
    out_of_credit_fails_over_and_pauses(
        &format!("{{ kind: gemini, base_url: http://{broke} }}"),
        &hits,
        "prepayment credits are depleted",
    )
    .await;
}

/// Found by the billing review: an Anthropic stream whose `error` event said the
/// account was out of credit (`billing_error`, or a `rate_limit_error` for the
/// spent monthly cap) was a retryable 502: tried again on the same endpoint, which
/// stayed in rotation, and reported as `upstream_error`.
#[tokio::test]
async fn an_out_of_credit_error_event_in_an_anthropic_stream_was_a_retried_502() {
    let start = "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"type\":\"message\",\"role\":\"assistant\",\"content\":[],\"model\":\"x\",\"stop_reason\":null,\"usage\":{\"input_tokens\":5,\"output_tokens\":1}}}\n\n";
    for (error, reason) in [
        (
            r#"{"type":"error","error":{"type":"billing_error","message":"Your credit balance is too low to access the Anthropic API."}}"#,
            "billing_error",
        ),
        (
            r#"{"type":"error","error":{"type":"rate_limit_error","message":"You have reached your API usage limits.","details":{"error_code":"enforced_spend_limit_reached"}}}"#,
            "enforced_spend_limit_reached",
        ),
    ] {
        let (broke, seen) = crate::sse_script::sse_upstream(vec![format!(
            "{start}event: error\ndata: {error}\n\n"
        )]);
        let gw = start_app(
            &format!(
                "providers:\n  a: {{ kind: anthropic, base_url: http://{broke} }}\n  q: {{ kind: mock }}\nmodels:\n  m: {{ endpoints: [ {{ provider: a, model: x }}, {{ provider: q, model: x }} ] }}\n  solo: {{ endpoints: [ {{ provider: a, model: y }} ] }}\n"
            ),
            &[(
                "r.policy",
                "route r when request.model == \"m\" {\n  default use endpoint \"a/x\"\n  fallback endpoint \"q/x\" retries 2\n}\n",
            )],
        )
        .await;
        let url = gw.url("/v1/chat/completions");
        let asked = || seen.lock().unwrap().len();
        let r = post(&url, &chat("m", true, "")).await;
        assert_eq!(r.status, 200, "{reason}: {}", r.text());
        assert_eq!(r.headers["x-switchyard-endpoint"], "q/x");
        assert_eq!(
            r.headers["x-switchyard-attempts"], "2",
            "{reason}: a was retried"
        );
        assert_eq!(asked(), 1, "{reason}");
        // Paused: the next request goes to q at once.
        let r = post(&url, &chat("m", true, "")).await;
        assert_eq!(r.headers["x-switchyard-attempts"], "1", "{reason}");
        assert_eq!(asked(), 1, "{reason}");
        // `solo` (its own endpoint on `a`) reads why, from the event, then from
        // the pause it caused.
        for _ in 0..2 {
            let r = post(&url, &chat("solo", true, "")).await;
            assert_eq!(r.status, 429, "{reason}: {}", r.text());
            let e = &r.json()["error"];
            assert_eq!(e["code"], "insufficient_quota", "{}", r.text());
            assert!(
                e["message"].as_str().unwrap().contains(reason),
                "{}",
                r.text()
            );
        }
        assert_eq!(asked(), 2, "{reason}");
    }
}

/// Found by the billing review: Bedrock's `ServiceQuotaExceededException` (HTTP
/// 400: "Your request exceeds the service quota for your account ... You can
/// resubmit your request later") was returned to the client as its own invalid
/// request, never retried nor tried on the next endpoint.
#[tokio::test]
async fn bedrocks_service_quota_exceeded_was_blamed_on_the_clients_request() {
    let (quota, hits) = sequence_upstream(vec![(
        400,
        "x-amzn-errortype: ServiceQuotaExceededException:http://internal.amazon.com/coral/com.amazon.bedrock/\r\n",
        r#"{"message":"Your request exceeds the service quota for your account. You can view your quotas at Viewing service quotas. You can resubmit your request later."}"#,
    )]);
    let (good, _) = scripted_upstream(200, COMPLETION);
    let dir = tempfile::tempdir().unwrap();
    let credentials = aws_credentials(&dir);
    let gw = start_app(
        &format!(
            "providers:\n  b: {{ kind: bedrock, base_url: http://{quota}, region: us-east-1, credentials_file: {} }}\n  q: {{ kind: openai-compatible, base_url: http://{good}/v1 }}\nmodels:\n  m: {{ endpoints: [ {{ provider: b, model: x, priority: 1 }}, {{ provider: q, model: x, priority: 2 }} ] }}\n  solo: {{ endpoints: [ {{ provider: b, model: y }} ] }}\n",
            credentials.display()
        ),
        &[],
    )
    .await;
    let url = gw.url("/v1/chat/completions");
    let r = post(&url, &chat("m", false, "")).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.headers["x-switchyard-endpoint"], "q/x");
    let r = post(&url, &chat("solo", false, "")).await;
    assert_eq!(r.status, 429, "{}", r.text());
    let e = &r.json()["error"];
    assert_eq!(e["type"], "rate_limit_error", "{}", r.text());
    assert_eq!(e["code"], "upstream_rate_limited", "{}", r.text());
    assert!(
        e["message"]
            .as_str()
            .unwrap()
            .contains("ServiceQuotaExceededException"),
        "{}",
        r.text()
    );
    assert!(hits.load(std::sync::atomic::Ordering::SeqCst) >= 2);
}

/// A Gemini 429 whose `RetryInfo` asks for an absurd delay (a provider's bug, or a
/// hostile one): the body's delay is not cut like a `Retry-After` header's.
const GEMINI_ABSURD_DELAY: &str = r#"{"error":{"code":429,"message":"Resource has been exhausted (e.g. check quota).","status":"RESOURCE_EXHAUSTED","details":[{"@type":"type.googleapis.com/google.rpc.RetryInfo","retryDelay":"1e300s"}]}}"#;

/// Found by attack (2026-12-06): with retries left, the wait before retrying was
/// added to the current instant to compare it with the retry budget, and a wait
/// past what an `Instant` can hold (a Gemini `retryDelay` of `1e300s`) panicked in
/// the request's task: the client's connection closed without an answer.
#[tokio::test]
async fn a_retry_delay_beyond_any_instant_panicked_the_request() {
    let (g, hits) = scripted_upstream(429, GEMINI_ABSURD_DELAY);
    let (good, _) = scripted_upstream(200, COMPLETION);
    let gw = start_app(
        &format!(
            "providers:\n  g: {{ kind: gemini, base_url: http://{g} }}\n  q: {{ kind: openai-compatible, base_url: http://{good}/v1 }}\nmodels:\n  m: {{ endpoints: [ {{ provider: g, model: x }}, {{ provider: q, model: x }} ] }}\n  solo: {{ endpoints: [ {{ provider: g, model: y }} ] }}\n"
        ),
        &[(
            "r.policy",
            "route r when request.model == \"m\" {\n  default use endpoint \"g/x\"\n  fallback endpoint \"q/x\" retries 2\n}\n",
        )],
    )
    .await;
    let url = gw.url("/v1/chat/completions");
    let r = post(&url, &chat("m", false, "")).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.headers["x-switchyard-endpoint"], "q/x");
    assert_eq!(hits.load(std::sync::atomic::Ordering::SeqCst), 1);
    // The client is asked to wait at most the hour a `Retry-After` header is
    // taken at, not 18,446,744,073,709,551,615 seconds.
    let r = post(&url, &chat("solo", false, "")).await;
    assert_eq!(r.status, 429, "{}", r.text());
    let secs: u64 = r.headers["retry-after"].to_str().unwrap().parse().unwrap();
    assert!((1..=3600).contains(&secs), "{secs}");
}

// Regression (outside attack, 2026-12-07): an answer sent with `Content-Encoding:
// gzip` (a compressing proxy in front of a provider) was read as text and refused
// as "not a chat completion: expected value at line 1 column 1". Expected: the
// next endpoint serves, and the failed attempt says which coding came.
#[tokio::test]
async fn a_gzip_encoded_answer_fails_over_naming_the_coding() {
    let (gz, _) = sequence_upstream(vec![(200, "content-encoding: gzip\r\n", COMPLETION)]);
    let (ok, _) = scripted_upstream(200, COMPLETION);
    let gw = start_app(
        &format!("providers:\n  gz: {{ kind: openai-compatible, base_url: 'http://{gz}/v1' }}\n  ok: {{ kind: openai-compatible, base_url: 'http://{ok}/v1' }}\nmodels:\n  m: {{ endpoints: [ {{ provider: gz, model: x, priority: 1 }}, {{ provider: ok, model: x, priority: 2 }} ] }}\n  g: {{ endpoints: [ {{ provider: gz, model: x }} ] }}\n"),
        &[],
    )
    .await;
    let url = gw.url("/v1/chat/completions");
    let r = request("POST", &url, chat("m", false, "")).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.headers["x-switchyard-endpoint"], "ok/x");
    let r = request("POST", &url, chat("g", false, "")).await;
    assert_eq!(r.status, 502, "{}", r.text());
    let m = r.json()["error"]["message"].as_str().unwrap().to_string();
    assert!(m.contains("Content-Encoding: gzip"), "{m}");
}

// Regression (outside attack, 2026-12-07): an upstream 409 reached the client as 400
// `upstream_invalid_request`, though the failover table promises the provider's
// error unchanged for a 4xx about the request itself. Expected: 409 and 422 as
// sent, with the provider's code, not retried elsewhere.
#[tokio::test]
async fn an_upstream_409_or_422_keeps_its_status() {
    for (status, body) in [
        (
            409,
            r#"{"error":{"message":"conflict","type":"invalid_request_error","code":"conflict"}}"#,
        ),
        (
            422,
            r#"{"error":{"message":"bad schema","type":"invalid_request_error","code":null}}"#,
        ),
    ] {
        let (up, hits) = sequence_upstream(vec![(status, "", body)]);
        let (other, other_hits) = scripted_upstream(200, COMPLETION);
        let gw = start_app(
            &format!("providers:\n  a: {{ kind: openai-compatible, base_url: 'http://{up}/v1' }}\n  b: {{ kind: openai-compatible, base_url: 'http://{other}/v1' }}\nmodels:\n  m: {{ endpoints: [ {{ provider: a, model: x, priority: 1 }}, {{ provider: b, model: x, priority: 2 }} ] }}\n"),
            &[],
        )
        .await;
        let r = request(
            "POST",
            &gw.url("/v1/chat/completions"),
            chat("m", false, ""),
        )
        .await;
        assert_eq!(r.status, status, "{}", r.text());
        let v = r.json();
        assert_eq!(v["error"]["type"], "invalid_request_error", "{v}");
        if status == 409 {
            assert_eq!(v["error"]["code"], "conflict", "{v}");
        } else {
            assert_eq!(v["error"]["code"], "upstream_invalid_request", "{v}");
        }
        assert_eq!(hits.load(std::sync::atomic::Ordering::SeqCst), 1);
        assert_eq!(other_hits.load(std::sync::atomic::Ordering::SeqCst), 0);
    }
}

// Regression (outside attack, 2026-12-07): a gzip-encoded 4xx body had its raw bytes
// pasted into the client's error message ("upstream rejected the request: \x1f\x8b...").
// Expected: the status as sent, and a message without the unreadable body.
#[tokio::test]
async fn an_encoded_error_body_is_not_pasted_into_the_message() {
    let (up, _) = sequence_upstream(vec![(409, "content-encoding: gzip\r\n", "GARBLED-BYTES")]);
    let gw = start_app(
        &format!("providers:\n  a: {{ kind: openai-compatible, base_url: 'http://{up}/v1' }}\nmodels:\n  m: {{ endpoints: [ {{ provider: a, model: x }} ] }}\n"),
        &[],
    )
    .await;
    let r = request(
        "POST",
        &gw.url("/v1/chat/completions"),
        chat("m", false, ""),
    )
    .await;
    assert_eq!(r.status, 409, "{}", r.text());
    assert!(!r.text().contains("GARBLED"), "{}", r.text());
}
