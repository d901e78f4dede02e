//! Provider fidelity through the whole gateway: which client headers reach the
//! provider, what the upstream request asks for, and what of an upstream failure
//! the client sees. The upstream records each request it gets.

use std::io::{Read, Write};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::common::{chat, request_with, start_app, InProcess};

/// One request as the upstream received it: head (lowercase header names) and body.
#[derive(Debug, Clone, Default)]
struct Seen {
    headers: Vec<(String, String)>,
    body: String,
}

impl Seen {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

/// An upstream answering every request with `status`, `content_type` and `body`,
/// keeping what it received.
fn recording_upstream(
    status: u16,
    content_type: &'static str,
    body: &'static str,
) -> (SocketAddr, Arc<Mutex<Vec<Seen>>>) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut s) = stream else { return };
            let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
            let mut buf = Vec::new();
            let mut chunk = [0u8; 16384];
            // Read the head, then the body by its content-length.
            let (head_end, length) = loop {
                let Ok(n) = s.read(&mut chunk) else {
                    break (0, 0);
                };
                if n == 0 {
                    break (0, 0);
                }
                buf.extend_from_slice(&chunk[..n]);
                if let Some(p) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                    let head = String::from_utf8_lossy(&buf[..p]).to_ascii_lowercase();
                    let length = head
                        .lines()
                        .find_map(|l| l.strip_prefix("content-length:"))
                        .and_then(|v| v.trim().parse().ok())
                        .unwrap_or(0);
                    break (p + 4, length);
                }
            };
            while buf.len() < head_end + length {
                match s.read(&mut chunk) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => buf.extend_from_slice(&chunk[..n]),
                }
            }
            let head = String::from_utf8_lossy(&buf[..head_end]).to_string();
            let headers = head
                .lines()
                .skip(1)
                .filter_map(|l| l.split_once(':'))
                .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
                .collect();
            let received = String::from_utf8_lossy(&buf[head_end.min(buf.len())..]).to_string();
            log.lock().unwrap().push(Seen {
                headers,
                body: received,
            });
            let _ = write!(
                s,
                "HTTP/1.1 {status} X\r\ncontent-type: {content_type}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    (addr, seen)
}

const COMPLETION: &str = r#"{"id":"x","object":"chat.completion","created":0,"model":"x","choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}],"usage":{"prompt_tokens":34,"completion_tokens":1,"total_tokens":35}}"#;

/// What the OpenAI Python SDK sends, plus trace context and an operator's tag.
const SDK: [(&str, &str); 20] = [
    ("user-agent", "OpenAI/Python 1.55.0"),
    ("accept", "application/json"),
    ("x-stainless-lang", "python"),
    ("x-stainless-package-version", "1.55.0"),
    ("x-stainless-os", "Linux"),
    ("x-stainless-arch", "x64"),
    ("x-stainless-runtime", "CPython"),
    ("x-stainless-runtime-version", "3.12.1"),
    ("x-stainless-async", "false"),
    ("x-stainless-retry-count", "0"),
    ("x-stainless-read-timeout", "600"),
    ("x-stainless-timeout", "600"),
    ("authorization", "Bearer sk-client-secret"),
    ("openai-organization", "org-1"),
    ("openai-project", "proj-1"),
    ("x-api-key", "client-secret-2"),
    ("cookie", "session=client-secret-3"),
    (
        "traceparent",
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
    ),
    ("tracestate", "vendor=x"),
    ("x-request-tag", "blue"),
];

#[tokio::test]
async fn client_headers_reach_the_provider_by_the_documented_rule() {
    let (oa, oa_seen) = recording_upstream(200, "application/json", COMPLETION);
    let (compat, compat_seen) = recording_upstream(200, "application/json", COMPLETION);
    std::env::set_var("FIDELITY_TEST_KEY", "sk-gateway");
    let gw = start_app(
        &format!("providers:\n  oa: {{ kind: openai, base_url: http://{oa}/v1, api_key_env: FIDELITY_TEST_KEY }}\n  c: {{ kind: openai-compatible, base_url: http://{compat}/v1, forward_headers: [X-Request-Tag] }}\nmodels:\n  a: {{ endpoints: [ {{ provider: oa, model: x }} ] }}\n  b: {{ endpoints: [ {{ provider: c, model: x }} ] }}\n"),
        &[],
    )
    .await;
    let url = gw.url("/v1/chat/completions");
    for model in ["a", "b"] {
        let r = request_with("POST", &url, &SDK, chat(model, false, "")).await;
        assert_eq!(r.status, 200, "{}", r.text());
    }
    let version = env!("CARGO_PKG_VERSION");
    let to_openai = oa_seen.lock().unwrap()[0].clone();
    assert_eq!(to_openai.header("authorization"), Some("Bearer sk-gateway"));
    assert_eq!(
        to_openai.header("user-agent").map(str::to_string),
        Some(format!("OpenAI/Python 1.55.0 switchyard/{version}"))
    );
    // Regression (outside attack, 2026-12-07): no `Accept-Encoding` went upstream,
    // which allows any coding (RFC 9110, 12.5.3), and a gzipping proxy's answers
    // were 502s that blamed the endpoint. The SDK's own is not forwarded.
    assert_eq!(to_openai.header("accept-encoding"), Some("identity"));
    assert_eq!(to_openai.header("openai-organization"), Some("org-1"));
    assert_eq!(to_openai.header("openai-project"), Some("proj-1"));
    assert_eq!(to_openai.header("x-stainless-retry-count"), Some("0"));
    assert_eq!(
        to_openai.header("traceparent"),
        Some("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
    );
    assert_eq!(to_openai.header("x-request-tag"), None, "not listed for oa");
    // The SDK sent no id: the gateway's generated one (a UUID) goes as both.
    let id = to_openai
        .header("x-request-id")
        .expect("a generated request id");
    assert_eq!(id.len(), 36, "{id}");
    assert_eq!(to_openai.header("x-client-request-id"), Some(id));
    let to_compat = compat_seen.lock().unwrap()[0].clone();
    assert_eq!(to_compat.header("x-request-tag"), Some("blue"));
    assert_eq!(to_compat.header("tracestate"), Some("vendor=x"));
    assert_eq!(to_compat.header("openai-organization"), None);
    assert_eq!(to_compat.header("x-stainless-lang"), None);
    assert_eq!(
        to_compat.header("x-client-request-id"),
        None,
        "OpenAI's own"
    );
    assert!(to_compat.header("x-request-id").is_some());
    assert_eq!(to_compat.header("authorization"), None, "c has no key");
    for seen in [&to_openai, &to_compat] {
        for (k, v) in &seen.headers {
            assert!(
                !v.contains("client-secret"),
                "{k}: a client credential leaked"
            );
        }
        assert_eq!(seen.header("cookie"), None);
        assert_eq!(seen.header("x-api-key"), None);
    }
}

#[tokio::test]
async fn a_stream_asks_the_upstream_for_usage_and_the_client_sees_none_it_did_not_ask_for() {
    const SSE: &str = "data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"x\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"ok\"},\"finish_reason\":null}],\"usage\":null}\n\ndata: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"x\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}],\"usage\":null}\n\ndata: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"x\",\"choices\":[],\"usage\":{\"prompt_tokens\":34,\"completion_tokens\":1,\"total_tokens\":35}}\n\ndata: [DONE]\n\n";
    let (up, seen) = recording_upstream(200, "text/event-stream", SSE);
    let gw = one_provider_gateway("c", up).await;
    let url = gw.url("/v1/chat/completions");
    let r = request_with("POST", &url, &[], chat("m", true, "")).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let sent: serde_json::Value = serde_json::from_str(&seen.lock().unwrap()[0].body).unwrap();
    assert_eq!(
        sent["stream_options"],
        serde_json::json!({"include_usage": true})
    );
    let text = r.text();
    assert!(text.contains("\"content\":\"ok\""), "{text}");
    assert!(!text.contains("usage"), "{text}");
    assert!(text.ends_with("data: [DONE]\n\n"), "{text}");
    // Asked for: the provider's own count, not an estimate.
    let r = request_with(
        "POST",
        &url,
        &[],
        chat("m", true, r#","stream_options":{"include_usage":true}"#),
    )
    .await;
    assert!(r.text().contains("\"prompt_tokens\":34"), "{}", r.text());
}

#[tokio::test]
async fn an_upstream_5xx_traceback_never_reaches_the_client() {
    const TRACE: &str = "Traceback (most recent call last):\n  File \"/srv/app.py\", line 12, in handler\n    key = os.environ['SECRET_KEY']\nKeyError: 'SECRET_KEY=sk-live-123'";
    let (up, seen) = recording_upstream(500, "text/plain", TRACE);
    let gw = one_provider_gateway("flaky", up).await;
    let r = request_with(
        "POST",
        &gw.url("/v1/chat/completions"),
        &[],
        chat("m", false, ""),
    )
    .await;
    assert_eq!(r.status, 502, "{}", r.text());
    let text = r.text();
    assert!(
        !text.contains("Traceback") && !text.contains("sk-live"),
        "{text}"
    );
    let e = &r.json()["error"];
    let message = e["message"].as_str().unwrap();
    assert!(
        message.contains("`flaky`") && message.contains("HTTP 500"),
        "{message}"
    );
    assert!(!seen.lock().unwrap().is_empty());
}

#[tokio::test]
async fn a_gemini_image_it_cannot_take_is_refused_before_any_upstream_call() {
    let (up, seen) = recording_upstream(200, "application/json", "{}");
    let gw = start_app(
        &format!("providers:\n  g: {{ kind: gemini, base_url: http://{up}/v1beta }}\nmodels:\n  m: {{ endpoints: [ {{ provider: g, model: gemini-2.5-flash }} ] }}\n"),
        &[],
    )
    .await;
    let body = r#"{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"what is this"},{"type":"image_url","image_url":{"url":"data:image/svg+xml;base64,PHN2Zz4="}}]}]}"#;
    let r = request_with("POST", &gw.url("/v1/chat/completions"), &[], body).await;
    assert_eq!(r.status, 400, "{}", r.text());
    let e = &r.json()["error"];
    assert_eq!(e["param"], "messages[0].content[1].image_url.url");
    assert_eq!(e["type"], "invalid_request_error");
    assert!(seen.lock().unwrap().is_empty(), "no upstream call");
}

/// The exact bytes `body` reaches the upstream as, with its Content-Length (the body
/// of a 200 answer; `None` when the gateway refused the request).
async fn forwarded(url: &str, seen: &Mutex<Vec<Seen>>, body: &str) -> Option<(String, usize)> {
    let before = seen.lock().unwrap().len();
    let r = request_with("POST", url, &[], body.to_string()).await;
    if r.status == 400 {
        return None;
    }
    assert_eq!(r.status, 200, "{body:.200}: {}", r.text());
    let got = seen.lock().unwrap()[before].clone();
    assert_eq!(got.header("transfer-encoding"), None, "{body:.200}");
    let length = got
        .header("content-length")
        .and_then(|v| v.parse().ok())
        .expect("a content-length");
    Some((got.body, length))
}

#[tokio::test]
async fn the_forwarded_body_is_the_clients_bytes_with_only_model_replaced() {
    const SSE: &str = "data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"x\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"ok\"},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n";
    let (json_up, json_seen) = recording_upstream(200, "application/json", COMPLETION);
    let (sse_up, sse_seen) = recording_upstream(200, "text/event-stream", SSE);
    let gw = start_app(
        &format!("providers:\n  j: {{ kind: openai-compatible, base_url: http://{json_up}/v1 }}\n  s: {{ kind: openai-compatible, base_url: http://{sse_up}/v1 }}\nmodels:\n  m: {{ endpoints: [ {{ provider: j, model: \"up-\u{e9}/\u{1f600}\" }} ] }}\n  st: {{ endpoints: [ {{ provider: s, model: \"up-\u{e9}/\u{1f600}\" }} ] }}\n"),
        &[],
    )
    .await;
    let url = gw.url("/v1/chat/completions");
    let new = "\"up-\u{e9}/\u{1f600}\"";
    let big = "\u{e9}x\\\"{[".repeat(6000); // past 16 KiB: sent as parts, not joined
    let cases: Vec<(String, String)> = [
        (r#"{"model":"m","messages":[{"role":"user","content":"hi"}]}"#.to_string(), "m"),
        (" \r\n\t{ \n\"messages\" :\r\n [ { \"role\" : \"user\" , \"content\" : \"the \\\"model\\\": \\\"m\\\"\" , \"model\":\"m\" } ] ,\n\t\"model\"\r\n:\t\"m\"\n ,\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":{\"model\":{\"type\":\"string\"}}}}]\n}\n\r\n".to_string(), "m"),
        (r#"{"mo\u0064el":"m","messages":[{"role":"user","content":"hi"}]}"#.to_string(), "m"),
        (format!(r#"{{"messages":[{{"role":"user","content":"{big}"}}],"model":"m","seed":1}}"#), "m"),
        (format!(r#"{{"model":"m","messages":[{{"role":"user","content":"{big}"}}]}}"#), "m"),
    ]
    .into_iter()
    .map(|(body, logical)| {
        // The logical name is the last top-level string equal to it in these bodies.
        let (key_at, _) = body
            .rmatch_indices(&format!("\"{logical}\""))
            .next()
            .unwrap();
        let want = format!("{}{new}{}", &body[..key_at], &body[key_at + logical.len() + 2..]);
        (body, want)
    })
    .collect();
    for (body, want) in &cases {
        let (got, length) = forwarded(&url, &json_seen, body).await.expect("accepted");
        assert_eq!(&got, want, "{body:.300}");
        assert_eq!(length, want.len(), "{body:.300}");
    }
    // Streams without stream_options: the usage request goes first, the rest as sent.
    for (body, want) in &cases {
        let body = body.replacen("\"m\"", "\"st\"", usize::MAX);
        let want = want.replacen("\"m\"", "\"st\"", usize::MAX);
        let body = body.replacen("\"messages\"", "\"stream\":true,\"messages\"", 1);
        let want = want.replacen("\"messages\"", "\"stream\":true,\"messages\"", 1);
        let brace = want.find('{').unwrap() + 1;
        let want = format!(
            "{}\"stream_options\":{{\"include_usage\":true}},{}",
            &want[..brace],
            &want[brace..]
        );
        let (got, length) = forwarded(&url, &sse_seen, &body).await.expect("accepted");
        assert_eq!(got, want, "{body:.300}");
        assert_eq!(length, want.len(), "{body:.300}");
    }
    // A stream_options the upstream would read as null (written with an escape) is
    // not left beside the inserted one: the upstream must see include_usage: true.
    let body = r#"{"model":"st","stream":true,"stream_option\u0073":null,"messages":[{"role":"user","content":"hi"}]}"#;
    let (got, _) = forwarded(&url, &sse_seen, body).await.expect("accepted");
    let v: serde_json::Value = serde_json::from_str(&got).unwrap();
    assert_eq!(
        v["stream_options"],
        serde_json::json!({"include_usage": true}),
        "{got}"
    );
    // Two `model` keys, or a byte order mark: refused (400), never half-replaced.
    for body in [
        r#"{"model":"m","messages":[{"role":"user","content":"hi"}],"model":"m"}"#,
        r#"{"model":"m","messages":[{"role":"user","content":"hi"}],"mo\u0064el":"m"}"#,
        "\u{feff}{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}",
    ] {
        assert_eq!(forwarded(&url, &json_seen, body).await, None, "{body}");
    }
}

#[tokio::test]
async fn an_upstream_stream_in_any_legal_sse_framing_reaches_the_client_whole() {
    // A byte order mark, CRLF and CR line ends, a comment, `data:` without its space,
    // and one chunk spread over three `data:` lines.
    const SSE: &str = "\u{feff}: ping\r\ndata:{\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"created\":1,\r\ndata: \"model\":\"up\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"h\u{e9}\"},\r\ndata: \"finish_reason\":null}]}\r\n\r\ndata: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"up\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"llo\"},\"finish_reason\":null},{\"index\":1,\"delta\":{},\"finish_reason\":\"stop\"}]}\r\rdata: [DONE]\r\r";
    let (up, _) = recording_upstream(200, "text/event-stream", SSE);
    let gw = one_provider_gateway("c", up).await;
    let r = request_with(
        "POST",
        &gw.url("/v1/chat/completions"),
        &[],
        chat("m", true, ""),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    let mut parser = switchyard::sse::SseParser::new();
    parser.push(&r.body).unwrap();
    let events: Vec<String> = std::iter::from_fn(|| parser.next_event())
        .map(|e| e.data)
        .collect();
    assert_eq!(
        events.last().map(String::as_str),
        Some("[DONE]"),
        "{events:?}"
    );
    let mut text = String::new();
    for e in &events[..events.len() - 1] {
        let v: serde_json::Value =
            serde_json::from_str(e).unwrap_or_else(|err| panic!("{err}: {e:?}"));
        assert_eq!(v["model"], "m", "{e}");
        if let Some(t) = v["choices"][0]["delta"]["content"].as_str() {
            text.push_str(t);
        }
    }
    assert_eq!(text, "h\u{e9}llo", "{events:?}");
}

/// The gateway in process with model `m` served by one OpenAI-compatible provider
/// `name` at `up` (its upstream model `x`).
async fn one_provider_gateway(name: &str, up: SocketAddr) -> InProcess {
    start_app(
        &format!("providers:\n  {name}: {{ kind: openai-compatible, base_url: http://{up}/v1 }}\nmodels:\n  m: {{ endpoints: [ {{ provider: {name}, model: x }} ] }}\n"),
        &[],
    )
    .await
}
