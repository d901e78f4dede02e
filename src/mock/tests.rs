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
