use serde_json::{json, Value};

use super::*;
use crate::error::{Code, ErrorKind};
use crate::providers::testing::{self, assert_well_formed, fixture, replay, Replay};

fn chat(body: Value) -> ChatRequest {
    testing::chat(&body)
}

fn target() -> Target<'static> {
    Target {
        base_url: "https://api.anthropic.com/v1",
        model: "claude-sonnet-4-5",
        api_key: Some("sk-ant"),
    }
}

/// The upstream request and its JSON body.
fn build(c: &ChatRequest) -> (http::Request<Body>, Value) {
    testing::build(&Anthropic, &target(), c)
}

#[test]
fn conversation_with_system_images_tools_and_results() {
    let c = chat(json!({
        "model": "claude",
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "developer", "content": [{"type": "text", "text": "Use tools."}]},
            {"role": "user", "content": [
                {"type": "text", "text": "Weather here?"},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0K"}},
                {"type": "image_url", "image_url": {"url": "https://example.com/a.jpg"}}
            ]},
            {"role": "assistant", "content": "Checking.", "tool_calls": [
                {"id": "toolu_1", "type": "function", "function": {"name": "weather", "arguments": "{\"city\":\"Paris\"}"}},
                {"id": "toolu_2", "type": "function", "function": {"name": "time", "arguments": ""}}
            ]},
            {"role": "tool", "tool_call_id": "toolu_1", "content": "{\"temp\":21}"},
            {"role": "tool", "tool_call_id": "toolu_2", "content": [{"type": "text", "text": "12:00"}]},
            {"role": "user", "content": "Thanks"}
        ],
        "tools": [{"type": "function", "function": {"name": "weather", "description": "Weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}},
                  {"type": "function", "function": {"name": "time"}}],
        "tool_choice": "required",
        "parallel_tool_calls": false,
        "max_completion_tokens": 300,
        "temperature": 0.5,
        "top_p": 0.9,
        "stop": ["END"],
        "stream": true,
        "user": "u-1"
    }));
    let (req, body) = build(&c);
    assert_eq!(req.uri(), "https://api.anthropic.com/v1/messages");
    assert_eq!(req.headers()["x-api-key"], "sk-ant");
    assert!(req.headers()["x-api-key"].is_sensitive());
    assert_eq!(req.headers()["anthropic-version"], "2023-06-01");
    assert_eq!(req.headers()["content-type"], "application/json");
    assert_eq!(req.headers()["accept"], "text/event-stream");
    let expected = json!({
        "model": "claude-sonnet-4-5",
        "max_tokens": 300,
        "system": [{"type": "text", "text": "Be brief."}, {"type": "text", "text": "Use tools."}],
        "messages": [
            {"role": "user", "content": [
                {"type": "text", "text": "Weather here?"},
                {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0K"}},
                {"type": "image", "source": {"type": "url", "url": "https://example.com/a.jpg"}}
            ]},
            {"role": "assistant", "content": [
                {"type": "text", "text": "Checking."},
                {"type": "tool_use", "id": "toolu_1", "name": "weather", "input": {"city": "Paris"}},
                {"type": "tool_use", "id": "toolu_2", "name": "time", "input": {}}
            ]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": [{"type": "text", "text": "{\"temp\":21}"}]},
                {"type": "tool_result", "tool_use_id": "toolu_2", "content": [{"type": "text", "text": "12:00"}]},
                {"type": "text", "text": "Thanks"}
            ]}
        ],
        "temperature": 0.5,
        "top_p": 0.9,
        "stop_sequences": ["END"],
        "stream": true,
        "tools": [
            {"name": "weather", "description": "Weather", "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}}},
            {"name": "time", "input_schema": {"type": "object", "properties": {}}}
        ],
        "tool_choice": {"type": "any", "disable_parallel_tool_use": true},
        "metadata": {"user_id": "u-1"}
    });
    assert_eq!(body, expected);
}

#[test]
fn max_tokens_defaults_and_tool_choice_maps() {
    let (_, body) = build(&chat(
        json!({"model": "m", "messages": [{"role": "user", "content": "hi"}]}),
    ));
    assert_eq!(body["max_tokens"], DEFAULT_MAX_TOKENS);
    assert_eq!(
        body["messages"],
        json!([{"role": "user", "content": [{"type": "text", "text": "hi"}]}])
    );
    assert!(body.get("stream").is_none() && body.get("tool_choice").is_none());
    let (_, body) = build(&chat(
        json!({"model": "m", "max_tokens": 7, "messages": [{"role": "user", "content": "hi"}]}),
    ));
    assert_eq!(body["max_tokens"], 7);
    for (choice, expected) in [
        (json!("auto"), json!({"type": "auto"})),
        (json!("none"), json!({"type": "none"})),
        (
            json!({"type": "function", "function": {"name": "f"}}),
            json!({"type": "tool", "name": "f"}),
        ),
    ] {
        let (_, body) = build(&chat(
            json!({"model": "m", "tool_choice": choice, "messages": [{"role": "user", "content": "hi"}],
                   "tools": [{"type": "function", "function": {"name": "f"}}]}),
        ));
        assert_eq!(body["tool_choice"], expected);
    }
}

#[test]
fn what_anthropic_cannot_express_is_400() {
    for (req, param, code) in [
        (
            json!({"model": "m", "n": 2, "messages": [{"role": "user", "content": "hi"}]}),
            "n",
            "unsupported_value",
        ),
        (
            json!({"model": "m", "logprobs": true, "messages": [{"role": "user", "content": "hi"}]}),
            "logprobs",
            "unsupported_parameter",
        ),
        (
            json!({"model": "m", "messages": [{"role": "user", "content": [{"type": "input_audio", "input_audio": {}}]}]}),
            "messages[0].content[0].type",
            "unsupported_value",
        ),
        (
            json!({"model": "m", "messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "ftp://x"}}]}]}),
            "messages[0].content[0].image_url.url",
            "invalid_value",
        ),
        (
            json!({"model": "m", "messages": [{"role": "tool", "content": "x"}]}),
            "messages[0].tool_call_id",
            "missing_required_parameter",
        ),
        (
            json!({"model": "m", "messages": [{"role": "tool", "tool_call_id": 7, "content": "x"}]}),
            "messages[0].tool_call_id",
            "invalid_type",
        ),
        (
            json!({"model": "m", "messages": [{"role": "assistant", "content": null, "tool_calls": [{"id": "a", "type": "function", "function": {"name": "f", "arguments": "[1]"}}]}]}),
            "messages[0].tool_calls[0].function.arguments",
            "invalid_value",
        ),
        (
            json!({"model": "m", "tool_choice": "sometimes", "messages": [{"role": "user", "content": "hi"}]}),
            "tool_choice",
            "invalid_value",
        ),
        (
            json!({"model": "m", "tool_choice": {"type": "function", "function": {}}, "messages": [{"role": "user", "content": "hi"}]}),
            "tool_choice.function.name",
            "missing_required_parameter",
        ),
        (
            json!({"model": "m", "reasoning_effort": "max", "messages": [{"role": "user", "content": "hi"}]}),
            "reasoning_effort",
            "invalid_value",
        ),
        (
            json!({"model": "m", "messages": [{"role": "assistant", "content": "x", "thinking_blocks": [{"type": "thinking", "thinking": "t"}]}]}),
            "messages[0].thinking_blocks[0].signature",
            "missing_required_parameter",
        ),
        (
            json!({"model": "m", "messages": [{"role": "user", "content": "hi", "cache_control": {"type": "persistent"}}]}),
            "messages[0].cache_control",
            "invalid_value",
        ),
    ] {
        let e = Anthropic.request(&target(), &chat(req)).unwrap_err();
        assert_eq!(e.status(), 400, "{}", e.message);
        assert_eq!(e.param.as_deref(), Some(param), "{}", e.message);
        assert_eq!(e.to_json()["error"]["code"], code, "{param}: {}", e.message);
    }
}

fn respond(name: &str) -> Value {
    let out = Anthropic
        .response(fixture(name).as_bytes(), "claude")
        .unwrap();
    let v: Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(v["object"], "chat.completion");
    assert_eq!(v["model"], "claude");
    assert_eq!(v["choices"][0]["message"]["role"], "assistant");
    v
}

#[test]
fn recorded_text_response() {
    let v = respond("anthropic/anthropic-text.json");
    assert_eq!(v["id"], "msg_01VdEjxAP5ahtHKrrRdNBteQ");
    assert_eq!(
        v["choices"][0]["message"]["content"],
        "Hello! I'm doing well, thanks for asking. How are you doing today? Is there anything I can help you with?"
    );
    assert!(v["choices"][0]["message"].get("tool_calls").is_none());
    assert_eq!(v["choices"][0]["finish_reason"], "stop");
    assert_eq!(
        v["usage"],
        json!({"prompt_tokens": 12, "completion_tokens": 29, "total_tokens": 41,
               "prompt_tokens_details": {"cached_tokens": 0, "cache_creation_tokens": 0}})
    );
}

#[test]
fn recorded_tool_responses() {
    let v = respond("anthropic/anthropic-json-tool.1.json");
    let m = &v["choices"][0]["message"];
    assert!(m["content"].is_null());
    assert_eq!(m["tool_calls"][0]["id"], "toolu_01Q9ExVZnzZj7E2QQYHYtNUa");
    assert_eq!(m["tool_calls"][0]["type"], "function");
    assert_eq!(m["tool_calls"][0]["function"]["name"], "json");
    let args: Value = serde_json::from_str(
        m["tool_calls"][0]["function"]["arguments"]
            .as_str()
            .unwrap(),
    )
    .unwrap();
    let full: Value =
        serde_json::from_str(&fixture("anthropic/anthropic-json-tool.1.json")).unwrap();
    assert_eq!(args, full["content"][0]["input"]);
    assert_eq!(v["choices"][0]["finish_reason"], "tool_calls");
    assert_eq!(v["usage"]["total_tokens"], 1151 + 87);

    let v = respond("anthropic/anthropic-tool-no-args.json");
    let m = &v["choices"][0]["message"];
    assert!(m["content"]
        .as_str()
        .unwrap()
        .ends_with("Okay, I will update the current issue list:"));
    assert_eq!(m["tool_calls"][0]["function"]["name"], "updateIssueList");
    assert_eq!(m["tool_calls"][0]["function"]["arguments"], "{}");
    assert_eq!(v["choices"][0]["finish_reason"], "tool_calls");
}

#[test]
fn recorded_refusal_response() {
    let v = respond("anthropic/anthropic-refusal.json");
    assert!(v["choices"][0]["message"]["content"].is_null());
    assert!(v["choices"][0]["message"]["refusal"]
        .as_str()
        .unwrap()
        .contains("Usage Policy"));
    assert_eq!(v["choices"][0]["finish_reason"], "content_filter");
    assert_eq!(v["usage"]["prompt_tokens"], 18);
}

#[test]
fn malformed_response_is_502() {
    for body in [
        &b"<html>"[..],
        br#"{"content":[]}"#,
        br#"{"id":"m","content":[{"type":"text"}]}"#,
        // An OpenAI-shaped answer, or a message without content, is not a message.
        br#"{"id":"x","object":"chat.completion","choices":[]}"#,
        br#"{"id":"m","type":"message"}"#,
        br#"{"id":"m","type":"error","content":[]}"#,
    ] {
        assert_eq!(Anthropic.response(body, "m").unwrap_err().status(), 502);
    }
}

fn stream(name: &str, include_usage: bool) -> Replay {
    let t = Anthropic.stream(StreamContext {
        logical_model: "claude".into(),
        include_usage,
        prompt_tokens_estimate: 3,
        track: true,
        resume: None,
    });
    let r = replay(t, &fixture(name), true);
    assert!(r.result.is_ok(), "{name}: {:?}", r.result);
    assert!(r.done, "{name}: no [DONE]");
    assert_well_formed(&r, "claude");
    assert_eq!(r.usage_chunks().len(), usize::from(include_usage), "{name}");
    r
}

/// Text deltas of a chunks fixture, concatenated (the expected reassembly).
fn fixture_text(name: &str) -> String {
    fixture(name)
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter_map(|v| v["delta"]["text"].as_str().map(str::to_string))
        .collect()
}

#[test]
fn recorded_text_stream() {
    let name = "anthropic/anthropic-text.chunks.txt";
    for include_usage in [false, true] {
        let r = stream(name, include_usage);
        assert_eq!(r.chunks[0]["id"], "msg_01QC4g3HwBThD4BaNtBckFDJ");
        assert_eq!(r.text(), fixture_text(name));
        assert!(r.text().starts_with("Hello! I'm doing well"));
        assert_eq!(r.finish_reasons(), ["stop"]);
        assert!(r.content);
        // For the attempt's trace span: the model Anthropic named, the reason sent.
        assert_eq!(r.sent.model.as_deref(), Some("claude-sonnet-4-5-20250929"));
        assert_eq!(r.sent.finish_reason.as_deref(), Some("stop"));
        if include_usage {
            assert_eq!(
                r.usage_chunks()[0]["usage"],
                json!({"prompt_tokens": 12, "completion_tokens": 30, "total_tokens": 42,
                       "prompt_tokens_details": {"cached_tokens": 0, "cache_creation_tokens": 0}})
            );
            assert_eq!(r.usage_chunks()[0]["choices"], json!([]));
        }
    }
}

#[test]
fn recorded_tool_streams() {
    let r = stream("anthropic/anthropic-json-tool.1.chunks.txt", true);
    let calls = r.tool_calls();
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0].0, "toolu_01KFbKqPYSuAKujiL6mTfzYA");
    assert_eq!(calls[0].1, "json");
    let args: Value = serde_json::from_str(&calls[0].2).unwrap();
    assert_eq!(args["elements"][0]["location"], "San Francisco");
    assert_eq!(r.finish_reasons(), ["tool_calls"]);
    assert_eq!(r.usage_chunks()[0]["usage"]["completion_tokens"], 47);

    let r = stream("anthropic/anthropic-tool-no-args.chunks.txt", false);
    assert_eq!(r.text(), "I'll update the issue list for you.");
    let calls = r.tool_calls();
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0].1, "updateIssueList");
    assert_eq!(calls[0].2, "{}");
    assert_eq!(r.finish_reasons(), ["tool_calls"]);
}

#[test]
fn recorded_refusal_and_late_input_tokens() {
    let r = stream("anthropic/anthropic-refusal.chunks.txt", true);
    assert_eq!(r.text(), "");
    assert!(!r.content);
    assert_eq!(r.finish_reasons(), ["content_filter"]);
    // Found by the conformance attack of 2026-12-07: the explanation the whole
    // answer carries as `message.refusal` was lost when streaming.
    assert_eq!(
        r.refusal(),
        "This request triggered restrictions on violative cyber content and was blocked under Anthropic's Usage Policy."
    );
    let at = |key: &str| {
        r.chunks
            .iter()
            .position(|c| !c["choices"][0]["delta"][key].is_null())
    };
    assert!(
        at("refusal")
            < r.chunks
                .iter()
                .position(|c| !c["choices"][0]["finish_reason"].is_null())
    );
    assert!(r.done && r.result.is_ok());

    let r = stream(
        "anthropic/anthropic-message-delta-input-tokens.chunks.txt",
        true,
    );
    assert_eq!(r.text(), "pong");
    // message_start said 43; the final message_delta's count wins.
    assert_eq!(
        r.usage_chunks()[0]["usage"],
        json!({"prompt_tokens": 61, "completion_tokens": 2, "total_tokens": 63})
    );
}

#[test]
fn stream_errors() {
    let ctx = || StreamContext {
        logical_model: "c".into(),
        include_usage: false,
        prompt_tokens_estimate: 0,
        track: true,
        resume: None,
    };
    let r = replay(
        Anthropic.stream(ctx()),
        r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#,
        true,
    );
    let e = r.result.unwrap_err();
    assert_eq!(e.status(), 502);
    assert!(e.message.contains("Overloaded"), "{}", e.message);

    // Cut before message_delta: an error, not a silent end.
    let cut: String = fixture("anthropic/anthropic-text.chunks.txt")
        .lines()
        .take(5)
        .collect::<Vec<_>>()
        .join("\n");
    let r = replay(Anthropic.stream(ctx()), &cut, true);
    assert_eq!(r.result.unwrap_err().status(), 502);
    assert!(!r.done);

    let r = replay(
        Anthropic.stream(ctx()),
        "{\"type\":\"content_block_delta\"",
        false,
    );
    assert_eq!(r.result.unwrap_err().status(), 502);
}

#[test]
fn error_bodies() {
    let h = HeaderMap::new();
    let body = br#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#;
    let e = Anthropic.error(529, &h, body);
    assert_eq!(e.status(), 502);
    assert!(e.retry.same_endpoint());
    assert!(e.message.contains("overloaded"), "{}", e.message);

    let body = br#"{"type":"error","error":{"type":"invalid_request_error","message":"max_tokens: must be positive"}}"#;
    let e = Anthropic.error(400, &h, body);
    assert_eq!(e.status(), 400);
    assert!(
        e.message.contains("max_tokens: must be positive"),
        "{}",
        e.message
    );

    let mut h = HeaderMap::new();
    h.insert("retry-after", http::HeaderValue::from_static("7"));
    let body = br#"{"type":"error","error":{"type":"rate_limit_error","message":"slow down"}}"#;
    let e = Anthropic.error(429, &h, body);
    assert_eq!((e.status(), e.retry_after_secs()), (429, Some(7)));

    let e = Anthropic.error(401, &HeaderMap::new(), br#"{"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key"}}"#);
    assert_eq!(e.status(), 502);
}

/// Anthropic's answer when Switchyard's account is out of credit (HTTP 400
/// `invalid_request_error`, as its API sends it).
const CREDIT_TOO_LOW: &[u8] = br#"{"type":"error","error":{"type":"invalid_request_error","message":"Your credit balance is too low to access the Anthropic API. Please go to Plans & Billing to upgrade or purchase credits."}}"#;

/// Found by review of the quota pause: Anthropic's 400 "Your credit balance is too
/// low" was the client's mistake, returned without trying another endpoint,
/// though it is our account that needs credit.
#[test]
fn a_credit_balance_too_low_400_was_blamed_on_the_request() {
    let e = Anthropic.error(400, &HeaderMap::new(), CREDIT_TOO_LOW);
    assert_eq!(e.kind, crate::error::ErrorKind::QuotaExceeded);
    assert_eq!(e.status(), 429);
    assert_eq!(e.fault, crate::error::Fault::Gateway);
    assert!(e.retry.other_endpoint() && !e.retry.same_endpoint());
    let v = e.to_json();
    assert_eq!(v["error"]["type"], "insufficient_quota");
    assert_eq!(v["error"]["code"], "insufficient_quota");
    assert!(
        e.message.contains("Your credit balance is too low"),
        "{}",
        e.message
    );
    // Matched on the words, whatever the case and the text around them.
    let other = br#"{"type":"error","error":{"type":"invalid_request_error","message":"Credit balance is too low."}}"#;
    let e = Anthropic.error(400, &HeaderMap::new(), other);
    assert_eq!(e.kind, crate::error::ErrorKind::QuotaExceeded);
}

/// Found by the billing review: an `error` event saying the account is out of
/// credit (`billing_error`, a spent monthly cap) was a retryable 502 and a
/// `rate_limit_error` event a 502 too; as HTTP answers they are 429
/// `insufficient_quota` and a 429 rate limit.
#[test]
fn out_of_credit_and_rate_limit_error_events_were_retryable_502s() {
    let ctx = || StreamContext {
        logical_model: "c".into(),
        include_usage: false,
        prompt_tokens_estimate: 0,
        track: false,
        resume: None,
    };
    let start = r#"{"type":"message_start","message":{"id":"msg_1","usage":{"input_tokens":2,"output_tokens":1}}}"#;
    for (event, kind, code) in [
        (
            r#"{"type":"error","error":{"type":"billing_error","message":"Your credit balance is too low to access the Anthropic API."}}"#,
            ErrorKind::QuotaExceeded,
            Code::InsufficientQuota,
        ),
        (
            r#"{"type":"error","error":{"type":"rate_limit_error","message":"You have reached your API usage limits.","details":{"error_code":"enforced_spend_limit_reached"}}}"#,
            ErrorKind::QuotaExceeded,
            Code::InsufficientQuota,
        ),
        (
            r#"{"type":"error","error":{"type":"rate_limit_error","message":"Number of request tokens has exceeded your per-minute rate limit"}}"#,
            ErrorKind::RateLimited,
            Code::UpstreamRateLimited,
        ),
        (
            r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#,
            ErrorKind::BadUpstream,
            Code::UpstreamOverloaded,
        ),
        (
            r#"{"type":"error","error":{"type":"api_error","message":"Internal server error"}}"#,
            ErrorKind::BadUpstream,
            Code::UpstreamError,
        ),
    ] {
        let r = replay(Anthropic.stream(ctx()), &format!("{start}\n{event}"), true);
        let e = r.result.unwrap_err();
        assert_eq!((e.kind, e.code.clone()), (kind, Some(code)), "{event}");
        if kind == ErrorKind::QuotaExceeded {
            assert_eq!(e.status(), 429);
            assert!(!e.retry.same_endpoint() && e.retry.other_endpoint());
            assert!(e.message.contains("mid-stream"), "{}", e.message);
        }
    }
}

/// Anthropic API, "Rate limits": the tier's monthly spend cap, reached (no
/// `retry-after`; retrying fails until the next month).
const SPEND_CAP: &[u8] = br#"{"type":"error","error":{"type":"rate_limit_error","message":"You have reached your API usage limits: your organization has crossed its monthly API usage threshold, set based on your organization's API tier. You will regain access on 2026-09-01 at 00:00 UTC.","details":{"error_code":"enforced_spend_limit_reached"}},"request_id":"req_018EeWyXxfu5pfWkrYcMdjWG"}"#;

/// Found by the billing review: the spent monthly cap (429
/// `enforced_spend_limit_reached`) was a rate limit retried on the same endpoint,
/// and a spend limit the organization set (400 "You have reached your specified
/// API usage limits") the client's invalid request.
#[test]
fn spend_limits_were_a_rate_limit_and_the_clients_request() {
    let e = Anthropic.error(429, &HeaderMap::new(), SPEND_CAP);
    assert_eq!((e.status(), e.kind), (429, ErrorKind::QuotaExceeded));
    assert_eq!(e.to_json()["error"]["code"], "insufficient_quota");
    assert!(
        e.message.contains("monthly API usage threshold"),
        "{}",
        e.message
    );
    assert_eq!(e.retry_after, None);
    for message in [
        "You have reached your specified API usage limits. You will regain access on 2026-09-01 at 00:00 UTC.",
        "You have reached your specified workspace API usage limits. You will regain access on 2026-09-01 at 00:00 UTC.",
    ] {
        let body = json!({"type": "error", "error": {"type": "invalid_request_error", "message": message}});
        let e = Anthropic.error(400, &HeaderMap::new(), body.to_string().as_bytes());
        assert_eq!((e.status(), e.kind), (429, ErrorKind::QuotaExceeded), "{message}");
    }
    // A 402 `billing_error` too; an ordinary 429 stays a rate limit.
    let e = Anthropic.error(402, &HeaderMap::new(), br#"{"type":"error","error":{"type":"billing_error","message":"There is an issue with your billing."}}"#);
    assert_eq!(e.kind, ErrorKind::QuotaExceeded);
    let e = Anthropic.error(
        429,
        &HeaderMap::new(),
        br#"{"type":"error","error":{"type":"rate_limit_error","message":"slow down"}}"#,
    );
    assert_eq!(e.kind, ErrorKind::RateLimited);
}

fn bad_input_ctx() -> StreamContext {
    StreamContext {
        logical_model: "c".into(),
        include_usage: false,
        prompt_tokens_estimate: 0,
        track: false,
        resume: None,
    }
}

#[test]
fn a_message_stop_without_message_start_is_not_a_complete_empty_answer() {
    let r = replay(
        Anthropic.stream(bad_input_ctx()),
        r#"{"type":"message_stop"}"#,
        true,
    );
    let e = r.result.unwrap_err();
    assert_eq!(e.code, Some(crate::error::Code::UpstreamBadResponse));
    assert!(
        e.message.contains("before any message_start"),
        "{}",
        e.message
    );
    assert!(!r.done && r.chunks.is_empty());
}

#[test]
fn unknown_events_and_pings_are_skipped_and_message_stop_alone_supplies_stop() {
    let lines = [
        r#"{"type":"ping"}"#,
        r#"{"type":"message_start","message":{"id":"msg_1","usage":{"input_tokens":2,"output_tokens":1}}}"#,
        r#"{"type":"some_future_event","x":{"y":1}}"#,
        r#"{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}"#,
        r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"hi"}}"#,
        r#"{"type":"ping"}"#,
        r#"{"type":"content_block_stop","index":0}"#,
        r#"{"type":"message_stop"}"#,
    ]
    .join("\n");
    let r = replay(Anthropic.stream(bad_input_ctx()), &lines, true);
    r.result.as_ref().unwrap();
    assert!(r.done);
    assert_eq!(r.text(), "hi");
    assert_eq!(r.finish_reasons(), ["stop"]);
}

#[test]
fn a_thinking_block_larger_than_the_held_bound_ends_the_stream_with_an_error() {
    let mut t = Anthropic.stream(bad_input_ctx());
    let mut out = bytes::BytesMut::new();
    let ev = |data: String| crate::sse::SseEvent {
        event: None,
        data,
        data_lines: 1,
    };
    for data in [
        r#"{"type":"message_start","message":{"id":"msg_1","usage":{"input_tokens":2,"output_tokens":1}}}"#,
        r#"{"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":"","signature":""}}"#,
    ] {
        t.event(ev(data.into()).view(), &mut out).unwrap();
    }
    let delta = json!({"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking": "t".repeat(9 * 1024 * 1024)}}).to_string();
    t.event(ev(delta.clone()).view(), &mut out).unwrap();
    let e = t.event(ev(delta).view(), &mut out).unwrap_err();
    assert_eq!(e.code, Some(crate::error::Code::UpstreamBadResponse));
    assert!(
        e.message.contains("thinking block larger than"),
        "{}",
        e.message
    );
}

/// Found by the translation attack of 2026-12-08: a stream with a server-tool block
/// (`server_tool_use`, `mcp_tool_use`) failed with 502 "tool input for content block
/// 1, which is not a tool call" at the block's `input_json_delta`, the way Anthropic
/// streams a server tool's input, while the same answer unstreamed was relayed with
/// the block dropped. The block's deltas are dropped with it; an input delta for a
/// block that never started is still refused.
#[test]
fn a_server_tool_block_in_a_stream_was_a_502() {
    for kind in ["server_tool_use", "mcp_tool_use"] {
        let lines = [
            r#"{"type":"message_start","message":{"id":"msg_1","usage":{"input_tokens":2,"output_tokens":1}}}"#.to_string(),
            r#"{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}"#.to_string(),
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Searching."}}"#.to_string(),
            r#"{"type":"content_block_stop","index":0}"#.to_string(),
            format!(r#"{{"type":"content_block_start","index":1,"content_block":{{"type":"{kind}","id":"srvtoolu_1","name":"web_search","input":{{}}}}}}"#),
            r#"{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"{\"query\": \"oslo weather\"}"}}"#.to_string(),
            r#"{"type":"content_block_stop","index":1}"#.to_string(),
            r#"{"type":"content_block_start","index":2,"content_block":{"type":"text","text":""}}"#.to_string(),
            r#"{"type":"content_block_delta","index":2,"delta":{"type":"text_delta","text":" Sunny."}}"#.to_string(),
            r#"{"type":"content_block_stop","index":2}"#.to_string(),
            r#"{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":9}}"#.to_string(),
            r#"{"type":"message_stop"}"#.to_string(),
        ]
        .join("\n");
        let r = replay(Anthropic.stream(bad_input_ctx()), &lines, true);
        r.result.as_ref().unwrap();
        assert!(r.done, "{kind}");
        assert_eq!(r.text(), "Searching. Sunny.", "{kind}");
        assert!(r.tool_calls().is_empty(), "{kind}");
        assert_eq!(r.finish_reasons(), ["stop"], "{kind}");
    }
    let orphan = [
        r#"{"type":"message_start","message":{"id":"msg_1","usage":{"input_tokens":2,"output_tokens":1}}}"#,
        r#"{"type":"content_block_delta","index":3,"delta":{"type":"input_json_delta","partial_json":"{}"}}"#,
    ]
    .join("\n");
    let r = replay(Anthropic.stream(bad_input_ctx()), &orphan, true);
    assert_eq!(r.result.unwrap_err().status(), 502);
}
