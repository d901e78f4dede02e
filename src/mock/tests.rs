use super::*;
use crate::sse::SseParser;

fn req(body: &str) -> ChatRequest {
    ChatRequest::parse(body.as_bytes()).unwrap()
}

async fn body_bytes(r: Response<Body>) -> Result<Bytes, BoxError> {
    Ok(r.into_body().collect().await?.to_bytes())
}

#[test]
fn reset_format_matches_openai() {
    assert_eq!(format_reset(Duration::from_millis(20)), "20ms");
    assert_eq!(format_reset(Duration::from_millis(1500)), "1.5s");
    assert_eq!(format_reset(Duration::from_secs(2)), "2s");
    assert_eq!(format_reset(Duration::from_secs(360)), "6m0s");
}

#[test]
fn text_is_deterministic_per_seed_and_prompt() {
    assert_eq!(generate(1, "hi", 8), generate(1, "hi", 8));
    assert_ne!(generate(1, "hi", 8), generate(2, "hi", 8));
    assert_eq!(generate(1, "hi", 5).len(), 5);
}

#[tokio::test]
async fn json_reply_reports_requested_model_and_usage() {
    let p = MockProvider::new(MockOptions::default());
    let r = p
        .chat(&req(
            r#"{"model":"m1","messages":[{"role":"user","content":"hello"}],"max_tokens":3}"#,
        ))
        .await;
    assert_eq!(r.status(), 200);
    let v: serde_json::Value = serde_json::from_slice(&body_bytes(r).await.unwrap()).unwrap();
    assert_eq!(v["model"], "m1");
    assert_eq!(v["usage"]["completion_tokens"], 3);
    assert_eq!(v["choices"][0]["finish_reason"], "length");
}

#[tokio::test]
async fn stream_has_usage_chunk_and_done() {
    let p = MockProvider::new(MockOptions::default());
    let r = p
        .chat(&req(
            r#"{"model":"m","messages":[{"role":"user","content":"x"}],"stream":true,"stream_options":{"include_usage":true}}"#,
        ))
        .await;
    let bytes = body_bytes(r).await.unwrap();
    let mut parser = SseParser::new();
    parser.push(&bytes).unwrap();
    let events: Vec<_> = std::iter::from_fn(|| parser.next_event()).collect();
    assert_eq!(events.last().unwrap().data, "[DONE]");
    let usage: serde_json::Value = serde_json::from_str(&events[events.len() - 2].data).unwrap();
    assert_eq!(usage["choices"].as_array().unwrap().len(), 0);
    assert_eq!(usage["usage"]["completion_tokens"], 16);
    // role chunk + 16 tokens + finish chunk + usage + DONE
    assert_eq!(events.len(), 20);
}

#[tokio::test]
async fn cut_after_chunks_ends_the_body_with_an_error() {
    let p = MockProvider::new(MockOptions {
        cut_after_chunks: Some(3),
        ..MockOptions::default()
    });
    let r = p
        .chat(&req(
            r#"{"model":"m","messages":[{"role":"user","content":"x"}],"stream":true}"#,
        ))
        .await;
    assert!(body_bytes(r).await.is_err());
}

#[tokio::test]
async fn fail_rate_one_always_fails_with_retry_after() {
    let p = MockProvider::new(MockOptions {
        fail_rate: 1.0,
        fail_status: 503,
        retry_after_s: Some(2),
        ..MockOptions::default()
    });
    let r = p
        .chat(&req(
            r#"{"model":"m","messages":[{"role":"user","content":"x"}]}"#,
        ))
        .await;
    assert_eq!(r.status(), 503);
    assert_eq!(r.headers()["retry-after"], "2");
    let v: serde_json::Value = serde_json::from_slice(&body_bytes(r).await.unwrap()).unwrap();
    assert_eq!(v["error"]["type"], "server_error");
}

#[tokio::test]
async fn fail_rate_is_close_to_the_setting() {
    let p = MockProvider::new(MockOptions {
        fail_rate: 0.3,
        seed: 7,
        ..MockOptions::default()
    });
    let r = req(r#"{"model":"m","messages":[{"role":"user","content":"x"}],"max_tokens":1}"#);
    let mut failed = 0;
    for _ in 0..2000 {
        if p.chat(&r).await.status() != 200 {
            failed += 1;
        }
    }
    assert!((500..700).contains(&failed), "{failed} of 2000 failed");
}

#[tokio::test]
async fn rate_limit_headers_and_429() {
    let p = MockProvider::new(MockOptions {
        ratelimit_requests: Some(2),
        ratelimit_tokens: Some(10_000),
        ..MockOptions::default()
    });
    let r = req(r#"{"model":"m","messages":[{"role":"user","content":"x"}]}"#);
    let first = p.chat(&r).await;
    assert_eq!(first.headers()["x-ratelimit-limit-requests"], "2");
    assert_eq!(first.headers()["x-ratelimit-remaining-requests"], "1");
    assert!(first.headers().contains_key("x-ratelimit-reset-tokens"));
    assert_eq!(p.chat(&r).await.status(), 200);
    let third = p.chat(&r).await;
    assert_eq!(third.status(), 429);
    assert_eq!(third.headers()["x-ratelimit-remaining-requests"], "0");
    assert!(third.headers().contains_key("retry-after"));
}

// ---- fault modes for resilience tests ----

const USER: &str = r#"{"model":"m","messages":[{"role":"user","content":"x"}]}"#;

async fn json_body(r: Response<Body>) -> serde_json::Value {
    serde_json::from_slice(&body_bytes(r).await.unwrap()).unwrap()
}

/// The SSE `data` fields of a complete (not cut) stream body.
async fn events(r: Response<Body>) -> Vec<String> {
    let bytes = body_bytes(r).await.unwrap();
    let mut parser = SseParser::new();
    parser.push(&bytes).unwrap();
    std::iter::from_fn(|| parser.next_event())
        .map(|e| e.data)
        .collect()
}

/// The `delta.content` of each chunk event that has one (role chunk included).
fn contents(events: &[String]) -> Vec<String> {
    events
        .iter()
        .filter_map(|e| serde_json::from_str::<serde_json::Value>(e).ok())
        .filter_map(|v| {
            v["choices"][0]["delta"]["content"]
                .as_str()
                .map(String::from)
        })
        .collect()
}

#[tokio::test]
async fn fail_first_fails_exactly_the_first_n_requests() {
    let p = MockProvider::new(MockOptions {
        fail_first: 2,
        fail_status: 401,
        ..MockOptions::default()
    });
    let r = req(USER);
    let mut statuses = Vec::new();
    for _ in 0..5 {
        statuses.push(p.chat(&r).await.status().as_u16());
    }
    assert_eq!(statuses, [401, 401, 200, 200, 200]);
}

#[tokio::test]
async fn fail_first_then_fail_rate_applies() {
    let p = MockProvider::new(MockOptions {
        fail_first: 3,
        fail_rate: 1.0,
        fail_status: 503,
        ..MockOptions::default()
    });
    for _ in 0..5 {
        assert_eq!(p.chat(&req(USER)).await.status(), 503);
    }
}

#[tokio::test]
async fn retry_after_ms_in_seconds_format_rounds_up() {
    let p = MockProvider::new(MockOptions {
        fail_first: 1,
        retry_after_ms: Some(1500),
        ..MockOptions::default()
    });
    let r = p.chat(&req(USER)).await;
    assert_eq!(r.status(), 500);
    assert_eq!(r.headers()["retry-after"], "2");
    assert!(!r.headers().contains_key("retry-after-ms"));
}

#[tokio::test]
async fn retry_after_ms_format_sends_only_retry_after_ms() {
    let p = MockProvider::new(MockOptions {
        fail_first: 1,
        retry_after_s: Some(3),
        retry_after_format: RetryAfterFormat::Ms,
        ..MockOptions::default()
    });
    let r = p.chat(&req(USER)).await;
    assert_eq!(r.headers()["retry-after-ms"], "3000");
    assert!(!r.headers().contains_key("retry-after"));
}

#[tokio::test]
async fn retry_after_date_format_sends_an_http_date() {
    let p = MockProvider::new(MockOptions {
        fail_first: 1,
        retry_after_s: Some(30),
        retry_after_format: RetryAfterFormat::Date,
        ..MockOptions::default()
    });
    let r = p.chat(&req(USER)).await;
    let v = r.headers()["retry-after"].to_str().unwrap();
    assert!(v.ends_with(" GMT"), "{v}");
    httpdate::parse_http_date(v).unwrap();
    assert!(!r.headers().contains_key("retry-after-ms"));
}

#[test]
fn http_date_is_imf_fixdate_rounded_up() {
    // RFC 9110's example date.
    let t = UNIX_EPOCH + Duration::from_secs(784_111_777);
    assert_eq!(errors::http_date(t, 0), "Sun, 06 Nov 1994 08:49:37 GMT");
    assert_eq!(errors::http_date(t, 1000), "Sun, 06 Nov 1994 08:49:38 GMT");
    assert_eq!(errors::http_date(t, 1500), "Sun, 06 Nov 1994 08:49:39 GMT");
    assert_eq!(
        errors::http_date(t, 86_400_000),
        "Mon, 07 Nov 1994 08:49:37 GMT"
    );
}

#[tokio::test]
async fn rate_limit_429_uses_the_retry_after_format() {
    let p = MockProvider::new(MockOptions {
        ratelimit_requests: Some(1),
        retry_after_format: RetryAfterFormat::Ms,
        error_shape: ErrorShape::Anthropic,
        ..MockOptions::default()
    });
    assert_eq!(p.chat(&req(USER)).await.status(), 200);
    let r = p.chat(&req(USER)).await;
    assert_eq!(r.status(), 429);
    // No delay configured: the time to the window's reset, at most 60 s.
    let ms: u64 = r.headers()["retry-after-ms"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!((1..=60_000).contains(&ms), "{ms}");
    assert!(!r.headers().contains_key("retry-after"));
    let v = json_body(r).await;
    assert_eq!(v["type"], "error");
    assert_eq!(v["error"]["type"], "rate_limit_error");
}

#[test]
fn options_validation_names_the_option() {
    let both = MockOptions {
        retry_after_s: Some(1),
        retry_after_ms: Some(1000),
        ..MockOptions::default()
    };
    let e = both.validate().unwrap_err();
    assert!(
        e.contains("retry_after_s") && e.contains("retry_after_ms"),
        "{e}"
    );
    let zero = MockOptions {
        context_window: Some(0),
        fail_status: 200,
        ..MockOptions::default()
    };
    let e = zero.validate().unwrap_err();
    assert!(
        e.contains("context_window") && e.contains("fail_status"),
        "{e}"
    );

    let yaml = |s: &str| MockOptions::from_yaml(&serde_yaml::from_str(s).unwrap());
    let e = yaml("{ retry_after_format: minutes }").unwrap_err();
    assert!(
        e.contains("retry_after_format") && e.contains("date"),
        "{e}"
    );
    let e = yaml("{ error_shape: cohere }").unwrap_err();
    assert!(e.contains("error_shape") && e.contains("gemini"), "{e}");
    let e = yaml("{ retry_after_s: 1, retry_after_ms: 5 }").unwrap_err();
    assert!(e.contains("retry_after_ms"), "{e}");
    let all = yaml(
        "{ fail_first: 2, retry_after_ms: 250, retry_after_format: date, error_after_chunks: 1, context_window: 8192, error_shape: gemini, prefill: false }",
    )
    .unwrap();
    assert_eq!(all.fail_first, 2);
    assert_eq!(all.retry_after(), Some(250));
    assert_eq!(all.retry_after_format, RetryAfterFormat::Date);
    assert_eq!(all.error_after_chunks, Some(1));
    assert_eq!(all.context_window, Some(8192));
    assert_eq!(all.error_shape, ErrorShape::Gemini);
    assert!(!all.prefill);
}

const STREAM: &str =
    r#"{"model":"m","messages":[{"role":"user","content":"x"}],"stream":true,"max_tokens":4}"#;

#[tokio::test]
async fn error_after_one_chunk_sends_the_role_chunk_then_an_error_event() {
    let p = MockProvider::new(MockOptions {
        error_after_chunks: Some(1),
        ..MockOptions::default()
    });
    let ev = events(p.chat(&req(STREAM)).await).await;
    assert_eq!(ev.len(), 2, "{ev:?}");
    let role: serde_json::Value = serde_json::from_str(&ev[0]).unwrap();
    assert_eq!(role["choices"][0]["delta"]["role"], "assistant");
    assert_eq!(role["choices"][0]["delta"]["content"], "");
    let err: serde_json::Value = serde_json::from_str(&ev[1]).unwrap();
    assert_eq!(
        err,
        serde_json::json!({"error": {
            "message": "The server had an error while processing your request. Sorry about that!",
            "type": "server_error",
            "code": null,
        }})
    );
}

#[tokio::test]
async fn error_after_three_chunks_sends_two_tokens_first() {
    let p = MockProvider::new(MockOptions {
        error_after_chunks: Some(3),
        ..MockOptions::default()
    });
    let ev = events(p.chat(&req(STREAM)).await).await;
    assert_eq!(ev.len(), 4);
    let words = generate(0, &req(STREAM).prompt_text(), 4);
    assert_eq!(contents(&ev), ["", &words[0], &words[1]]);
    assert!(ev[3].contains("server_error"));
    assert!(!ev.iter().any(|e| e == "[DONE]"));
}

#[tokio::test]
async fn error_after_the_whole_stream_changes_nothing() {
    // role + 4 tokens + finish + [DONE] = 7 events.
    let p = MockProvider::new(MockOptions {
        error_after_chunks: Some(7),
        ..MockOptions::default()
    });
    let ev = events(p.chat(&req(STREAM)).await).await;
    assert_eq!(ev.len(), 7);
    assert_eq!(ev[6], "[DONE]");
    let p = MockProvider::new(MockOptions {
        error_after_chunks: Some(6),
        ..MockOptions::default()
    });
    let ev = events(p.chat(&req(STREAM)).await).await;
    assert_eq!(ev.len(), 7);
    assert!(ev[6].contains("server_error"), "replaces [DONE]: {ev:?}");
}

/// Data frames a body yields at once, and whether it then ended, failed or waits.
async fn frames_now(r: Response<Body>) -> (usize, &'static str) {
    use futures_util::FutureExt;
    let mut body = r.into_body();
    let mut n = 0;
    loop {
        match body.frame().now_or_never() {
            None => return (n, "pending"),
            Some(None) => return (n, "end"),
            Some(Some(Err(_))) => return (n, "error"),
            Some(Some(Ok(_))) => n += 1,
        }
    }
}

#[tokio::test]
async fn cut_stall_and_error_count_chunks_the_same_way() {
    for k in [0u32, 1, 3] {
        let with = |o: MockOptions| MockProvider::new(o);
        let cut = with(MockOptions {
            cut_after_chunks: Some(k),
            ..MockOptions::default()
        });
        let stall = with(MockOptions {
            stall_after_chunks: Some(k),
            ..MockOptions::default()
        });
        let error = with(MockOptions {
            error_after_chunks: Some(k),
            ..MockOptions::default()
        });
        let n = k as usize;
        assert_eq!(frames_now(cut.chat(&req(STREAM)).await).await, (n, "error"));
        assert_eq!(
            frames_now(stall.chat(&req(STREAM)).await).await,
            (n, "pending")
        );
        assert_eq!(
            frames_now(error.chat(&req(STREAM)).await).await,
            (n + 1, "end")
        );
    }
}

/// A request of about `tokens` estimated input tokens (4 characters a token, plus 4 of
/// framing for its one message).
fn long_request(tokens: u64) -> ChatRequest {
    let text = "abcd".repeat((tokens - 4) as usize);
    let r = req(&format!(
        r#"{{"model":"m","messages":[{{"role":"user","content":"{text}"}}]}}"#
    ));
    assert_eq!(r.estimated_input_tokens(), tokens);
    r
}

fn windowed(shape: ErrorShape) -> MockProvider {
    MockProvider::new(MockOptions {
        context_window: Some(8192),
        error_shape: shape,
        ..MockOptions::default()
    })
}

#[tokio::test]
async fn context_window_answers_400_in_each_shape() {
    let cases = [
        (
            ErrorShape::OpenAi,
            serde_json::json!({"error": {
                "message": "This model's maximum context length is 8192 tokens. However, your messages resulted in 9000 tokens. Please reduce the length of the messages.",
                "type": "invalid_request_error",
                "param": "messages",
                "code": "context_length_exceeded",
            }}),
        ),
        (
            ErrorShape::Anthropic,
            serde_json::json!({"type": "error", "error": {
                "type": "invalid_request_error",
                "message": "prompt is too long: 9000 tokens > 8192 maximum",
            }}),
        ),
        (
            ErrorShape::Gemini,
            serde_json::json!({"error": {
                "code": 400,
                "message": "The input token count (9000) exceeds the maximum number of tokens allowed (8192).",
                "status": "INVALID_ARGUMENT",
            }}),
        ),
    ];
    for (shape, want) in cases {
        let p = windowed(shape);
        assert_eq!(p.chat(&long_request(8192)).await.status(), 200);
        let r = p.chat(&long_request(9000)).await;
        assert_eq!(r.status(), 400);
        assert_eq!(r.headers()["content-type"], "application/json");
        assert_eq!(json_body(r).await, want, "{shape}");
    }
}

#[tokio::test]
async fn the_adapters_recognise_every_context_length_shape() {
    use crate::providers::Adapter;
    let headers = http::HeaderMap::new();
    for shape in [
        ErrorShape::OpenAi,
        ErrorShape::Anthropic,
        ErrorShape::Gemini,
    ] {
        let r = windowed(shape).chat(&long_request(9000)).await;
        let body = body_bytes(r).await.unwrap();
        let kinds = [
            crate::providers::upstream_error(400, &headers, &body).kind,
            crate::providers::anthropic::Anthropic
                .error(400, &headers, &body)
                .kind,
            crate::providers::gemini::Gemini
                .error(400, &headers, &body)
                .kind,
        ];
        for kind in kinds {
            assert_eq!(kind, ErrorKind::ContextWindowExceeded, "{shape}");
        }
    }
}

#[test]
fn injected_error_bodies_follow_each_providers_reference() {
    use errors::{body, Failure::Status};
    let a = |s| body(ErrorShape::Anthropic, Status(s))["error"]["type"].clone();
    assert_eq!(a(429), "rate_limit_error");
    assert_eq!(a(529), "overloaded_error");
    assert_eq!(a(500), "api_error");
    assert_eq!(a(401), "authentication_error");
    assert_eq!(a(404), "not_found_error");
    assert_eq!(body(ErrorShape::Anthropic, Status(500))["type"], "error");
    let g = |s| body(ErrorShape::Gemini, Status(s))["error"].clone();
    assert_eq!(g(429)["status"], "RESOURCE_EXHAUSTED");
    assert_eq!(g(429)["code"], 429);
    assert_eq!(g(500)["status"], "INTERNAL");
    assert_eq!(g(503)["status"], "UNAVAILABLE");
    assert_eq!(g(404)["status"], "NOT_FOUND");
    let o = |s| body(ErrorShape::OpenAi, Status(s))["error"].clone();
    assert_eq!(o(429)["code"], "rate_limit_exceeded");
    assert_eq!(o(401)["code"], "invalid_api_key");
    assert_eq!(o(404)["code"], "model_not_found");
    assert_eq!(o(500)["type"], "server_error");
}

#[tokio::test]
async fn fail_status_body_takes_the_error_shape() {
    let p = MockProvider::new(MockOptions {
        fail_first: 1,
        fail_status: 503,
        error_shape: ErrorShape::Gemini,
        retry_after_s: Some(1),
        ..MockOptions::default()
    });
    let r = p.chat(&req(USER)).await;
    assert_eq!(r.status(), 503);
    assert_eq!(r.headers()["retry-after"], "1");
    assert_eq!(
        json_body(r).await,
        serde_json::json!({"error": {"code": 503, "message": "The model is overloaded. Please try again later.", "status": "UNAVAILABLE"}})
    );
}

// ---- continuation mode ----

const CONVERSATION: &str =
    r#"{"role":"system","content":"be brief"},{"role":"user","content":"tell me about gateways"}"#;

fn conversation(extra: &str, stream: bool) -> ChatRequest {
    req(&format!(
        r#"{{"model":"m","stream":{stream},"messages":[{CONVERSATION}{extra}]}}"#
    ))
}

fn with_prefix(p: &str, stream: bool) -> ChatRequest {
    let p = serde_json::to_string(p).unwrap();
    conversation(&format!(r#",{{"role":"assistant","content":{p}}}"#), stream)
}

/// The uninterrupted answer's tokens.
fn full_answer() -> Vec<String> {
    generate(0, &conversation("", false).prompt_text(), 16)
}

#[test]
fn continuation_splits_at_the_answers_token_boundaries() {
    let a: Vec<String> = ["The", " gateway", " routes."].map(String::from).into();
    let c = |p| prefill::continuation(&a, p);
    assert_eq!(c(""), Some(a.clone()));
    assert_eq!(c("The"), Some(vec![" gateway".into(), " routes.".into()]));
    assert_eq!(c("The gate"), Some(vec!["way".into(), " routes.".into()]));
    assert_eq!(c("The gateway "), Some(vec!["routes.".into()]));
    assert_eq!(c("The gateway routes."), Some(vec![]));
    assert_eq!(c("The gateways"), None);
    assert_eq!(c("A"), None);
}

#[tokio::test]
async fn prefill_streams_the_remainder_at_the_same_boundaries() {
    let full = full_answer();
    let text = full.concat();
    // Ending inside a token; at a token boundary with the following space trimmed;
    // and ending with a space (the next token starts without one).
    let long = (1..full.len()).find(|&i| full[i].len() >= 4).unwrap();
    let before: usize = full[..long].iter().map(String::len).sum();
    let inside = &text[..before + 2];
    let trimmed = &text[..full[0].len() + full[1].len()];
    let spaced = &text[..full[0].len() + full[1].len() + 1];
    for p in [inside, trimmed, spaced] {
        let provider = MockProvider::new(MockOptions::default());
        let ev = events(provider.chat(&with_prefix(p, true)).await).await;
        let c = contents(&ev);
        assert_eq!(c[0], "", "the role chunk comes first");
        let rest = &c[1..];
        assert_eq!(format!("{p}{}", rest.concat()), text, "prefix {p:?}");
        let want = prefill::continuation(&full, p).unwrap();
        assert_eq!(rest, &want[..]);
        // The tokens after the first are the uninterrupted answer's own.
        assert_eq!(rest[1..], full[full.len() - rest.len() + 1..]);
        assert_eq!(ev.last().unwrap(), "[DONE]");
    }
    assert!(inside.ends_with(|c: char| c.is_ascii_alphabetic()));
    assert!(!trimmed.ends_with(' ') && full[2].starts_with(' '));
}

#[tokio::test]
async fn prefill_answers_json_with_the_remainder() {
    let full = full_answer();
    let text = full.concat();
    let p = &text[..10];
    let r = MockProvider::new(MockOptions::default())
        .chat(&with_prefix(p, false))
        .await;
    let v = json_body(r).await;
    assert_eq!(v["choices"][0]["message"]["content"], &text[10..]);
    assert_eq!(v["choices"][0]["finish_reason"], "stop");
    assert_eq!(
        v["usage"]["completion_tokens"], 16,
        "the full answer's tokens"
    );
}

#[tokio::test]
async fn prefill_that_does_not_match_gets_the_full_answer() {
    let r = MockProvider::new(MockOptions::default())
        .chat(&with_prefix("Certainly! Here", false))
        .await;
    let v = json_body(r).await;
    assert_eq!(
        v["choices"][0]["message"]["content"],
        full_answer().concat()
    );
}

#[tokio::test]
async fn prefill_false_treats_the_assistant_message_as_prompt() {
    let text = full_answer().concat();
    let r = with_prefix(&text[..10], false);
    let p = MockProvider::new(MockOptions {
        prefill: false,
        ..MockOptions::default()
    });
    let v = json_body(p.chat(&r).await).await;
    let want = generate(0, &r.prompt_text(), 16).concat();
    assert_eq!(v["choices"][0]["message"]["content"], want);
    assert_ne!(want, text);
}

#[test]
fn stop_sequences_cut_the_words_before_the_first_one() {
    let words: Vec<String> = ["Hello", " big", " world", "."].map(String::from).into();
    let cut = |stop: &[&str]| {
        cut_at_stop(
            &words,
            &stop.iter().map(|s| s.to_string()).collect::<Vec<_>>(),
        )
    };
    assert_eq!(
        cut(&["."]),
        Some(vec!["Hello".into(), " big".into(), " world".into()])
    );
    assert_eq!(
        cut(&["zzz", " w"]),
        Some(vec!["Hello".into(), " big".into()])
    );
    assert_eq!(cut(&["ig wor"]), Some(vec!["Hello".into(), " b".into()]));
    assert_eq!(cut(&["Hello"]), Some(vec![]));
    assert_eq!(cut(&["zzz"]), None);
    assert_eq!(cut(&[]), None);
}
