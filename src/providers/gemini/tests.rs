use serde_json::{json, Value};

use super::*;
use crate::error::{Code, ErrorKind};
use crate::providers::testing::{self, assert_well_formed, fixture, replay, Replay};

fn chat(body: Value) -> ChatRequest {
    testing::chat(&body)
}

fn target() -> Target<'static> {
    Target {
        base_url: "https://generativelanguage.googleapis.com/v1beta",
        model: "gemini-2.5-flash",
        api_key: Some("AIza"),
    }
}

/// The upstream request and its JSON body.
fn build(c: &ChatRequest) -> (http::Request<Body>, Value) {
    testing::build(&Gemini, &target(), c)
}

#[test]
fn conversation_with_system_images_tools_and_results() {
    let c = chat(json!({
        "model": "gemini",
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": [
                {"type": "text", "text": "Weather here?"},
                {"type": "image_url", "image_url": {"url": "data:image/jpeg;base64,/9j/4AAQ"}},
                {"type": "image_url", "image_url": {"url": "https://example.com/photo.PNG?x=1"}}
            ]},
            {"role": "assistant", "content": null, "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "weather", "arguments": "{\"city\":\"Paris\"}"}},
                {"id": "c2", "type": "function", "function": {"name": "time", "arguments": "{}"}}
            ]},
            {"role": "tool", "tool_call_id": "c1", "content": "{\"temp\":21}"},
            {"role": "tool", "tool_call_id": "c2", "content": "12:00"},
            {"role": "assistant", "content": "21 degrees at noon."},
            {"role": "user", "content": "Thanks"}
        ],
        "tools": [{"type": "function", "function": {"name": "weather", "description": "Weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "additionalProperties": false}}}],
        "tool_choice": {"type": "function", "function": {"name": "weather"}},
        "max_tokens": 256,
        "temperature": 0.2,
        "top_p": 0.8,
        "stop": "END",
        "n": 2,
        "seed": 5
    }));
    let (req, body) = build(&c);
    assert_eq!(
        req.uri(),
        "https://generativelanguage.googleapis.com/v1beta/models/gemini-2.5-flash:generateContent"
    );
    assert_eq!(req.headers()["x-goog-api-key"], "AIza");
    assert!(req.headers()["x-goog-api-key"].is_sensitive());
    let expected = json!({
        "contents": [
            {"role": "user", "parts": [
                {"text": "Weather here?"},
                {"inlineData": {"mimeType": "image/jpeg", "data": "/9j/4AAQ"}},
                {"fileData": {"mimeType": "image/png", "fileUri": "https://example.com/photo.PNG?x=1"}}
            ]},
            {"role": "model", "parts": [
                {"functionCall": {"name": "weather", "args": {"city": "Paris"}}, "thoughtSignature": SKIP_SIGNATURE},
                {"functionCall": {"name": "time", "args": {}}}
            ]},
            {"role": "user", "parts": [
                {"functionResponse": {"name": "weather", "response": {"temp": 21}}},
                {"functionResponse": {"name": "time", "response": {"result": "12:00"}}}
            ]},
            {"role": "model", "parts": [{"text": "21 degrees at noon."}]},
            {"role": "user", "parts": [{"text": "Thanks"}]}
        ],
        "systemInstruction": {"parts": [{"text": "Be brief."}]},
        "tools": [{"functionDeclarations": [{"name": "weather", "description": "Weather", "parametersJsonSchema": {"type": "object", "properties": {"city": {"type": "string"}}, "additionalProperties": false}}]}],
        "toolConfig": {"functionCallingConfig": {"mode": "ANY", "allowedFunctionNames": ["weather"]}},
        "generationConfig": {"temperature": 0.2, "topP": 0.8, "maxOutputTokens": 256, "stopSequences": ["END"], "candidateCount": 2, "seed": 5}
    });
    assert_eq!(body, expected);
}

#[test]
fn streaming_url_and_minimal_body() {
    let c = chat(
        json!({"model": "g", "stream": true, "messages": [{"role": "user", "content": "hi"}]}),
    );
    let (req, body) = build(&c);
    assert_eq!(
        req.uri(),
        "https://generativelanguage.googleapis.com/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse"
    );
    assert_eq!(
        body,
        json!({"contents": [{"role": "user", "parts": [{"text": "hi"}]}]})
    );
}

#[test]
fn tool_results_wrap_non_objects_and_json_mode_maps() {
    let c = chat(json!({
        "model": "g",
        "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "object"}}},
        "tool_choice": "none",
        "messages": [
            {"role": "assistant", "content": "", "tool_calls": [{"id": "a", "type": "function", "function": {"name": "f", "arguments": ""}}]},
            {"role": "tool", "tool_call_id": "a", "content": "[1,2]"},
            {"role": "tool", "tool_call_id": "a", "content": [{"type": "text", "text": "{\"ok\":true}"}]}
        ]
    }));
    let (_, body) = build(&c);
    assert_eq!(
        body["contents"][0]["parts"][0]["functionCall"]["args"],
        json!({})
    );
    assert_eq!(
        body["contents"][1]["parts"][0]["functionResponse"]["response"],
        json!({"result": [1, 2]})
    );
    assert_eq!(
        body["contents"][1]["parts"][1]["functionResponse"]["response"],
        json!({"ok": true})
    );
    assert_eq!(
        body["toolConfig"]["functionCallingConfig"],
        json!({"mode": "NONE"})
    );
    assert_eq!(
        body["generationConfig"]["responseMimeType"],
        "application/json"
    );
    assert_eq!(
        body["generationConfig"]["responseJsonSchema"],
        json!({"type": "object"})
    );
}

#[test]
fn what_gemini_cannot_express_is_400() {
    for (req, param, code) in [
        (
            // `code: null`, as validation and OpenAI answer a call id no call made.
            json!({"model": "m", "messages": [{"role": "tool", "tool_call_id": "nope", "content": "x"}]}),
            "messages[0].tool_call_id",
            None,
        ),
        (
            json!({"model": "m", "stream": true, "n": 3, "messages": [{"role": "user", "content": "hi"}]}),
            "n",
            Some("unsupported_value"),
        ),
        (
            json!({"model": "m", "logprobs": true, "messages": [{"role": "user", "content": "hi"}]}),
            "logprobs",
            Some("unsupported_parameter"),
        ),
        (
            json!({"model": "m", "messages": [{"role": "user", "content": [{"type": "file", "file": {}}]}]}),
            "messages[0].content[0].type",
            Some("unsupported_value"),
        ),
        (
            json!({"model": "m", "messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "data:image/png,raw"}}]}]}),
            "messages[0].content[0].image_url.url",
            Some("invalid_value"),
        ),
        (
            json!({"model": "m", "messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "data:image/gif;base64,R0lG"}}]}]}),
            "messages[0].content[0].image_url.url",
            Some("unsupported_value"),
        ),
        (
            json!({"model": "m", "tools": [{"type": "function", "function": {"name": "f", "parameters": [1]}}], "messages": [{"role": "user", "content": "hi"}]}),
            "tools[0].function.parameters",
            Some("invalid_function_parameters"),
        ),
        // Outside testing (2026-12-07): a system prompt alone went upstream as
        // `"contents": []` and came back as Gemini's 400 without a `param`.
        (
            json!({"model": "m", "messages": [{"role": "system", "content": "Say hi"}]}),
            "messages",
            Some("unsupported_value"),
        ),
    ] {
        let e = Gemini.request(&target(), &chat(req)).unwrap_err();
        assert_eq!(e.status(), 400, "{}", e.message);
        assert_eq!(e.param.as_deref(), Some(param), "{}", e.message);
        assert_eq!(
            e.to_json()["error"]["code"].as_str(),
            code,
            "{param}: {}",
            e.message
        );
    }
}

fn respond(name: &str) -> Value {
    let out = Gemini.response(fixture(name).as_bytes(), "gem").unwrap();
    let v: Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(v["object"], "chat.completion");
    assert_eq!(v["model"], "gem");
    v
}

#[test]
fn recorded_text_response() {
    let v = respond("gemini/google-text.json");
    assert_eq!(v["id"], "Un6LacrVMcjUxs0PmJfWoQc");
    assert_eq!(
        v["choices"][0]["message"]["content"],
        "There are **3** r's in strawberry.\n\nHere is the breakdown: st**r**awbe**rr**y."
    );
    assert_eq!(v["choices"][0]["finish_reason"], "stop");
    // 28 answer + 244 thinking tokens; the total matches totalTokenCount.
    assert_eq!(
        v["usage"],
        json!({"prompt_tokens": 9, "completion_tokens": 272, "total_tokens": 281,
               "completion_tokens_details": {"reasoning_tokens": 244}})
    );
}

#[test]
fn recorded_tool_call_response() {
    let v = respond("gemini/google-tool-call.json");
    let m = &v["choices"][0]["message"];
    assert!(m["content"].is_null());
    let call = &m["tool_calls"][0];
    assert!(call["id"].as_str().unwrap().starts_with("call_"));
    assert_eq!(call["type"], "function");
    assert_eq!(call["function"]["name"], "weather");
    assert_eq!(
        call["function"]["arguments"],
        r#"{"location":"San Francisco"}"#
    );
    assert_eq!(v["choices"][0]["finish_reason"], "tool_calls");
    assert_eq!(v["usage"]["total_tokens"], 937);
}

#[test]
fn finish_reasons_and_blocked_prompts() {
    for (reason, expected) in [
        ("MAX_TOKENS", "length"),
        ("SAFETY", "content_filter"),
        ("RECITATION", "content_filter"),
        ("BLOCKLIST", "content_filter"),
        ("PROHIBITED_CONTENT", "content_filter"),
        ("OTHER", "stop"),
    ] {
        let body = json!({"candidates": [{"content": {"parts": [{"text": "x"}]}, "finishReason": reason}]});
        let out = Gemini.response(body.to_string().as_bytes(), "g").unwrap();
        let v: Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(v["choices"][0]["finish_reason"], expected, "{reason}");
    }
    let body =
        br#"{"promptFeedback":{"blockReason":"SAFETY"},"usageMetadata":{"promptTokenCount":4}}"#;
    let v: Value = serde_json::from_slice(&Gemini.response(body, "g").unwrap()).unwrap();
    assert_eq!(v["choices"][0]["finish_reason"], "content_filter");
    assert!(v["choices"][0]["message"]["content"].is_null());
    for bad in [
        &b"<html>"[..],
        b"{}",
        br#"{"candidates":[{"content":{"parts":"x"}}]}"#,
    ] {
        assert_eq!(Gemini.response(bad, "g").unwrap_err().status(), 502);
    }
}

fn ctx(include_usage: bool) -> StreamContext {
    StreamContext {
        logical_model: "gem".into(),
        include_usage,
        prompt_tokens_estimate: 3,
        track: true,
        resume: None,
    }
}

fn stream(name: &str, include_usage: bool) -> Replay {
    let t = Gemini.stream(StreamContext {
        logical_model: "gem".into(),
        include_usage,
        prompt_tokens_estimate: 3,
        track: true,
        resume: None,
    });
    let r = replay(t, &fixture(name), false);
    assert!(r.result.is_ok(), "{name}: {:?}", r.result);
    assert!(r.done, "{name}: no [DONE]");
    assert_well_formed(&r, "gem");
    assert_eq!(r.usage_chunks().len(), usize::from(include_usage), "{name}");
    r
}

#[test]
fn recorded_text_stream() {
    for include_usage in [false, true] {
        let r = stream("gemini/google-text.chunks.txt", include_usage);
        assert_eq!(r.chunks[0]["id"], "bH6LaZW8Fp_3nsEPqtaSwQ4");
        let expected: String = fixture("gemini/google-text.chunks.txt")
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter_map(|v| {
                v["candidates"][0]["content"]["parts"][0]["text"]
                    .as_str()
                    .map(str::to_string)
            })
            .collect();
        assert_eq!(r.text(), expected);
        assert!(r
            .text()
            .starts_with("There are **3** \"r\"s in strawberry."));
        assert_eq!(r.finish_reasons(), ["stop"]);
        assert_eq!(r.sent.model.as_deref(), Some("gemini-3-pro-preview"));
        assert_eq!(r.sent.finish_reason.as_deref(), Some("stop"));
        if include_usage {
            let u = &r.usage_chunks()[0]["usage"];
            assert_eq!(u["prompt_tokens"], 9);
            assert_eq!(
                u["total_tokens"].as_u64(),
                Some(
                    u["prompt_tokens"].as_u64().unwrap() + u["completion_tokens"].as_u64().unwrap()
                )
            );
        }
    }
}

#[test]
fn recorded_tool_call_stream_matches_the_whole_response() {
    let r = stream("gemini/google-tool-call.chunks.txt", true);
    let calls = r.tool_calls();
    assert_eq!(calls.len(), 1);
    assert!(calls[0].0.starts_with("call_"));
    let whole = respond("gemini/google-tool-call.json");
    let f = &whole["choices"][0]["message"]["tool_calls"][0]["function"];
    assert_eq!(calls[0].1, f["name"].as_str().unwrap());
    assert_eq!(calls[0].2, f["arguments"].as_str().unwrap());
    assert_eq!(r.finish_reasons(), ["tool_calls"]);
    assert_eq!(r.usage_chunks()[0]["usage"]["prompt_tokens"], 29);
}

#[test]
fn recorded_streamed_arguments() {
    let r = stream("gemini/google-stream-tool-call-arguments.chunks.txt", false);
    let calls = r.tool_calls();
    assert_eq!(calls.len(), 2);
    assert_eq!(
        (calls[0].1.as_str(), calls[1].1.as_str()),
        ("getWeather", "getWeather")
    );
    assert_ne!(calls[0].0, calls[1].0);
    assert_eq!(calls[0].2, r#"{"location":"Boston"}"#);
    assert_eq!(calls[1].2, r#"{"location":"San Francisco"}"#);
    assert_eq!(r.finish_reasons(), ["tool_calls"]);

    let r = stream("gemini/google-stream-no-args-tool-call.chunks.txt", true);
    // The thought summary is relayed as reasoning_content, not as content.
    assert_eq!(r.text(), "");
    let reasoning: String = r
        .chunks
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["reasoning_content"].as_str())
        .collect();
    assert!(
        reasoning
            .ends_with("then proceeding with \"B\" and \"C\" in parallel as instructed.\n\n\n"),
        "{reasoning}"
    );
    let calls: Vec<_> = r.tool_calls().into_iter().map(|c| (c.1, c.2)).collect();
    assert_eq!(
        calls,
        [
            ("read_theme".to_string(), "{}".to_string()),
            ("read_screen".to_string(), r#"{"id":"A"}"#.to_string()),
            ("read_screen".to_string(), r#"{"id":"B"}"#.to_string()),
            ("read_screen".to_string(), r#"{"id":"C"}"#.to_string()),
        ]
    );
    assert_eq!(
        r.usage_chunks()[0]["usage"],
        json!({"prompt_tokens": 249, "completion_tokens": 241, "total_tokens": 490,
               "completion_tokens_details": {"reasoning_tokens": 183}})
    );
}

#[test]
fn stream_errors_and_cuts() {
    let ctx = || StreamContext {
        logical_model: "g".into(),
        include_usage: false,
        prompt_tokens_estimate: 0,
        track: true,
        resume: None,
    };
    let first = fixture("gemini/google-text.chunks.txt")
        .lines()
        .next()
        .unwrap()
        .to_string();
    let r = replay(Gemini.stream(ctx()), &first, false);
    assert_eq!(r.result.unwrap_err().status(), 502);
    assert!(!r.done);
    let r = replay(
        Gemini.stream(ctx()),
        r#"{"error":{"code":500,"message":"Internal error","status":"INTERNAL"}}"#,
        false,
    );
    assert!(r.result.unwrap_err().message.contains("Internal error"));
    let orphan = r#"{"candidates":[{"content":{"parts":[{"functionCall":{"partialArgs":[{"jsonPath":"$.a","stringValue":"x"}]}}]}}]}"#;
    assert_eq!(
        replay(Gemini.stream(ctx()), orphan, false)
            .result
            .unwrap_err()
            .status(),
        502
    );
}

#[test]
fn partial_args_build_nested_values() {
    let ctx = StreamContext {
        logical_model: "g".into(),
        include_usage: false,
        prompt_tokens_estimate: 0,
        track: true,
        resume: None,
    };
    let lines = [
        r#"{"candidates":[{"content":{"parts":[{"functionCall":{"name":"f","willContinue":true}}]}}]}"#,
        r#"{"candidates":[{"content":{"parts":[{"functionCall":{"partialArgs":[{"jsonPath":"$.a.b[1]","numberValue":2},{"jsonPath":"$.ok","boolValue":true},{"jsonPath":"$['n']"}],"willContinue":true}}]}}]}"#,
        r#"{"candidates":[{"content":{"parts":[{"functionCall":{}}]},"finishReason":"STOP"}]}"#,
    ]
    .join("\n");
    let r = replay(Gemini.stream(ctx), &lines, false);
    assert!(r.result.is_ok());
    let args: Value = serde_json::from_str(&r.tool_calls()[0].2).unwrap();
    assert_eq!(args, json!({"a": {"b": [null, 2]}, "ok": true, "n": null}));
}

#[test]
fn error_bodies() {
    let body = fixture("gemini/google-429-retry-info.json");
    let e = Gemini.error(429, &HeaderMap::new(), body.as_bytes());
    assert_eq!(e.status(), 429);
    assert_eq!(e.retry_after_secs(), Some(35));
    assert!(
        e.message.contains("You exceeded your current quota"),
        "{}",
        e.message
    );
    assert!(e.message.contains("RESOURCE_EXHAUSTED"), "{}", e.message);

    let mut h = HeaderMap::new();
    h.insert("retry-after", http::HeaderValue::from_static("3"));
    assert_eq!(
        Gemini.error(429, &h, body.as_bytes()).retry_after_secs(),
        Some(3)
    );

    let body =
        br#"{"error":{"code":400,"message":"Invalid JSON payload","status":"INVALID_ARGUMENT"}}"#;
    let e = Gemini.error(400, &HeaderMap::new(), body);
    assert_eq!(e.status(), 400);
    assert!(e.message.contains("Invalid JSON payload"));
    assert_eq!(
        Gemini
            .error(503, &HeaderMap::new(), b"unavailable")
            .status(),
        502
    );
    // Found by the translation attack of 2026-12-07: Gemini's 503 "The model is
    // overloaded" was `upstream_error`, where Anthropic's 529 and Bedrock's 503 are
    // `upstream_overloaded`.
    let body = br#"{"error":{"code":503,"message":"The model is overloaded. Please try again later.","status":"UNAVAILABLE"}}"#;
    let e = Gemini.error(503, &HeaderMap::new(), body);
    assert_eq!(e.status(), 502);
    assert_eq!(e.code, Some(crate::error::Code::UpstreamOverloaded));
}

/// Found by the billing review: a 429 whose `QuotaFailure` names a per-day quota
/// (reset at midnight Pacific time) was waited for by the `RetryInfo` delay beside
/// it, a minute or less, so its endpoint was tried again every minute all day.
#[test]
fn a_per_day_quota_429_was_waited_for_by_its_one_minute_retry_delay() {
    let per_minute = fixture("gemini/google-429-retry-info.json");
    let per_day = per_minute.replace("PerMinute", "PerDay");
    assert_ne!(per_day, per_minute);
    let e = Gemini.error(429, &HeaderMap::new(), per_day.as_bytes());
    let now = std::time::SystemTime::now();
    assert_eq!((e.status(), e.kind), (429, ErrorKind::RateLimited));
    assert_eq!(e.code, Some(Code::UpstreamRateLimited));
    let midnight = until_pacific_midnight(now).unwrap();
    let wait = e.retry_after.unwrap();
    assert!(
        wait >= midnight.max(std::time::Duration::from_secs(35)),
        "{wait:?} < {midnight:?}"
    );
    assert!(
        wait <= std::time::Duration::from_secs(25 * 3600),
        "{wait:?}"
    );
    // The per-minute quota keeps its delay.
    let e = Gemini.error(429, &HeaderMap::new(), per_minute.as_bytes());
    assert_eq!(e.retry_after_secs(), Some(35));
}

#[test]
fn pacific_midnight_follows_daylight_saving_time() {
    let at = |s: &str| {
        let ms = s.parse::<jiff::Timestamp>().unwrap().as_millisecond();
        std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms as u64)
    };
    let hours = |d: std::time::Duration| d.as_secs_f64() / 3600.0;
    // 23:00 PST; 23:30 PDT.
    assert_eq!(
        hours(until_pacific_midnight(at("2026-01-15T07:00:00Z")).unwrap()),
        1.0
    );
    assert_eq!(
        hours(until_pacific_midnight(at("2026-07-15T06:30:00Z")).unwrap()),
        0.5
    );
    // 01:00 PST on 8 March 2026, a 23-hour day: midnight is 22 hours on.
    assert_eq!(
        hours(until_pacific_midnight(at("2026-03-08T09:00:00Z")).unwrap()),
        22.0
    );
}

/// Found by the billing review: Gemini's 403 `PERMISSION_DENIED` with
/// `ErrorInfo.reason` `BILLING_DISABLED` was read as a refused key.
#[test]
fn billing_disabled_was_read_as_a_refused_key() {
    let body = br#"{"error":{"code":403,"message":"This API method requires billing to be enabled.","status":"PERMISSION_DENIED","details":[{"@type":"type.googleapis.com/google.rpc.ErrorInfo","reason":"BILLING_DISABLED","domain":"googleapis.com","metadata":{"consumer":"projects/123","service":"generativelanguage.googleapis.com"}}]}}"#;
    let e = Gemini.error(403, &HeaderMap::new(), body);
    assert_eq!((e.status(), e.kind), (429, ErrorKind::QuotaExceeded));
    assert_eq!(e.to_json()["error"]["type"], "insufficient_quota");
    assert!(
        e.message.contains("requires billing to be enabled"),
        "{}",
        e.message
    );
    // Another PERMISSION_DENIED stays a refused key, tried elsewhere.
    let body = br#"{"error":{"code":403,"message":"Your API key doesn't have the required permissions.","status":"PERMISSION_DENIED"}}"#;
    let e = Gemini.error(403, &HeaderMap::new(), body);
    assert_eq!(e.code, Some(Code::UpstreamAuthFailed));
    // The prepay 402: out of credit, as any provider's 402.
    let body = br#"{"error":{"code":402,"message":"Your prepayment credits are depleted.","status":"RESOURCE_EXHAUSTED"}}"#;
    let e = Gemini.error(402, &HeaderMap::new(), body);
    assert_eq!((e.status(), e.kind), (429, ErrorKind::QuotaExceeded));
    // The same in a stream's error object; a per-minute RESOURCE_EXHAUSTED there
    // stays a rate limit with its delay.
    let ctx = StreamContext {
        logical_model: "g".into(),
        include_usage: false,
        prompt_tokens_estimate: 0,
        track: false,
        resume: None,
    };
    let r = replay(
        Gemini.stream(ctx.clone()),
        std::str::from_utf8(body).unwrap(),
        false,
    );
    assert_eq!(r.result.unwrap_err().kind, ErrorKind::QuotaExceeded);
    let per_minute = fixture("gemini/google-429-retry-info.json").replace('\n', "");
    let r = replay(Gemini.stream(ctx), &per_minute, false);
    let e = r.result.unwrap_err();
    assert_eq!(
        (e.kind, e.retry_after_secs()),
        (ErrorKind::RateLimited, Some(35))
    );
}

/// The signature Gemini put on a recorded `functionCall` part.
fn recorded_signature(name: &str) -> String {
    let text = fixture(name);
    let at = text.find("\"thoughtSignature\"").unwrap();
    let rest = &text[at + "\"thoughtSignature\"".len()..];
    let start = rest.find('"').unwrap() + 1;
    let end = start + rest[start..].find('"').unwrap();
    rest[start..end].to_string()
}

/// The model turn Gemini is sent when the client replays `assistant` (an OpenAI
/// assistant message) followed by its tool result.
fn replayed_model_turn(assistant: &Value) -> Value {
    let call_id = assistant["tool_calls"][0]["id"].clone();
    let c = chat(json!({
        "model": "gem",
        "messages": [
            {"role": "user", "content": "Weather in San Francisco?"},
            assistant,
            {"role": "tool", "tool_call_id": call_id, "content": "{\"temp\":18}"}
        ]
    }));
    let (_, body) = build(&c);
    body["contents"][1].clone()
}

#[test]
fn a_thought_signature_survives_a_tool_call_round_trip_unchanged() {
    let sig = recorded_signature("gemini/google-tool-call.json");
    let v = respond("gemini/google-tool-call.json");
    let call = &v["choices"][0]["message"]["tool_calls"][0];
    assert_eq!(call["extra_content"]["google"]["thought_signature"], sig);
    // The client sends the assistant message back as it received it.
    let turn = replayed_model_turn(&v["choices"][0]["message"]);
    assert_eq!(turn["role"], "model");
    assert_eq!(turn["parts"][0]["thoughtSignature"], sig);
    assert_eq!(turn["parts"][0]["functionCall"]["name"], "weather");
}

#[test]
fn a_streamed_thought_signature_survives_a_tool_call_round_trip_unchanged() {
    let sig = recorded_signature("gemini/google-tool-call.chunks.txt");
    let r = stream("gemini/google-tool-call.chunks.txt", false);
    let first = r
        .chunks
        .iter()
        .find(|c| c["choices"][0]["delta"]["tool_calls"][0]["id"].is_string())
        .unwrap();
    let piece = &first["choices"][0]["delta"]["tool_calls"][0];
    assert_eq!(piece["extra_content"]["google"]["thought_signature"], sig);
    let (id, name, args) = r.tool_calls().remove(0);
    // What an SDK accumulating the deltas sends back.
    let assistant = json!({"role": "assistant", "content": null, "tool_calls": [{
        "id": id, "type": "function", "function": {"name": name, "arguments": args},
        "extra_content": piece["extra_content"]
    }]});
    let turn = replayed_model_turn(&assistant);
    assert_eq!(turn["parts"][0]["thoughtSignature"], sig);
}

#[test]
fn replayed_calls_without_a_signature_get_the_documented_sentinel_and_litellm_ids_are_read() {
    let turn = replayed_model_turn(&json!({"role": "assistant", "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "a", "arguments": "{}"}},
        {"id": "c2__thought__U2ln", "type": "function", "function": {"name": "b", "arguments": "{}"}}
    ]}));
    assert_eq!(turn["parts"][0]["thoughtSignature"], SKIP_SIGNATURE);
    assert_eq!(turn["parts"][1]["thoughtSignature"], "U2ln");
}

#[test]
fn thoughts_and_cached_tokens_map_to_reasoning_content_and_usage_details() {
    let body = json!({
        "candidates": [{"content": {"role": "model", "parts": [
            {"text": "Let me think.", "thought": true},
            {"text": "Paris."}
        ]}, "finishReason": "STOP", "index": 0}],
        "usageMetadata": {"promptTokenCount": 1200, "cachedContentTokenCount": 1024,
            "candidatesTokenCount": 2, "thoughtsTokenCount": 40, "totalTokenCount": 1242}
    });
    let out = Gemini.response(body.to_string().as_bytes(), "gem").unwrap();
    let v: Value = serde_json::from_slice(&out).unwrap();
    let m = &v["choices"][0]["message"];
    assert_eq!(m["content"], "Paris.");
    assert_eq!(m["reasoning_content"], "Let me think.");
    assert_eq!(
        v["usage"],
        json!({"prompt_tokens": 1200, "completion_tokens": 42, "total_tokens": 1242,
               "prompt_tokens_details": {"cached_tokens": 1024},
               "completion_tokens_details": {"reasoning_tokens": 40}})
    );
    // The same in a stream.
    let r = replay(Gemini.stream(ctx(true)), &body.to_string(), false);
    assert_eq!(r.text(), "Paris.");
    assert_eq!(
        r.chunks[1]["choices"][0]["delta"]["reasoning_content"],
        "Let me think."
    );
    assert_eq!(r.usage_chunks()[0]["usage"], v["usage"]);
}

#[test]
fn reasoning_effort_maps_to_a_thinking_budget() {
    for (effort, budget, thoughts) in [
        ("none", 0, false),
        ("minimal", 512, true),
        ("low", 1024, true),
        ("medium", 8192, true),
        ("high", 24576, true),
        // Found by the translation attack of 2026-12-08: refused as not an
        // OpenAI value.
        ("xhigh", 24576, true),
    ] {
        let c = chat(
            json!({"model": "g", "messages": [{"role": "user", "content": "hi"}], "reasoning_effort": effort}),
        );
        let (_, body) = build(&c);
        assert_eq!(
            body["generationConfig"]["thinkingConfig"],
            json!({"thinkingBudget": budget, "includeThoughts": thoughts}),
            "{effort}"
        );
    }
    let c = chat(
        json!({"model": "g", "messages": [{"role": "user", "content": "hi"}], "reasoning_effort": "max"}),
    );
    let e = Gemini.request(&target(), &c).unwrap_err();
    assert_eq!(e.param.as_deref(), Some("reasoning_effort"));
}

#[test]
fn image_media_types_are_normalised_and_unsupported_ones_refused_naming_the_part() {
    let c = chat(
        json!({"model": "g", "messages": [{"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": "data:image/jpg;base64,/9j/"}},
            {"type": "image_url", "image_url": {"url": "data:IMAGE/PNG;base64,iVBO"}}
        ]}]}),
    );
    let (_, body) = build(&c);
    assert_eq!(
        body["contents"][0]["parts"][0]["inlineData"]["mimeType"],
        "image/jpeg"
    );
    assert_eq!(
        body["contents"][0]["parts"][1]["inlineData"]["mimeType"],
        "image/png"
    );
    let c = chat(json!({"model": "g", "messages": [
        {"role": "user", "content": "first"},
        {"role": "user", "content": [
            {"type": "text", "text": ""},
            {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBO"}},
            {"type": "image_url", "image_url": {"url": "data:image/gif;base64,R0lG"}}
        ]}
    ]}));
    let e = Gemini.request(&target(), &c).unwrap_err();
    assert_eq!(e.status(), 400);
    assert_eq!(
        e.param.as_deref(),
        Some("messages[1].content[2].image_url.url")
    );
    assert!(e.message.contains("image/gif"), "{}", e.message);
    let c = chat(
        json!({"model": "g", "messages": [{"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": "https://example.com/a.gif"}}
        ]}]}),
    );
    let e = Gemini.request(&target(), &c).unwrap_err();
    assert_eq!(
        e.param.as_deref(),
        Some("messages[0].content[0].image_url.url")
    );
}

#[test]
fn tool_schemas_are_lowered_to_what_gemini_takes() {
    let c = chat(
        json!({"model": "g", "messages": [{"role": "user", "content": "hi"}], "tools": [
            {"type": "function", "function": {"name": "ok", "parameters": {"type": "object", "properties": {"a": {"type": "string"}}, "additionalProperties": false}}},
            {"type": "function", "function": {"name": "lowered", "parameters": {"$schema": "http://json-schema.org/draft-07/schema#", "type": "object", "properties": {"u": {"type": ["integer", "null"], "const": 3}}}}}
        ]}),
    );
    let (_, body) = build(&c);
    let decls = &body["tools"][0]["functionDeclarations"];
    assert_eq!(
        decls[0]["parametersJsonSchema"],
        json!({"type": "object", "properties": {"a": {"type": "string"}}, "additionalProperties": false})
    );
    assert_eq!(
        decls[1]["parametersJsonSchema"],
        json!({"type": "object", "properties": {"u": {"anyOf": [{"type": "integer", "enum": [3]}, {"type": "null"}]}}})
    );
}

/// Found by the conformance attack of 2026-12-07: a stream whose prompt Gemini
/// blocked ended with `content_filter` only, where the whole answer says why in
/// `message.refusal`.
#[test]
fn a_blocked_prompt_streams_its_refusal() {
    let lines =
        r#"{"promptFeedback":{"blockReason":"SAFETY"},"usageMetadata":{"promptTokenCount":4}}"#;
    let r = replay(Gemini.stream(ctx(false)), lines, false);
    assert!(r.result.is_ok() && r.done, "{:?}", r.result);
    assert_eq!(r.refusal(), "the prompt was blocked by Gemini (SAFETY)");
    assert_eq!(r.finish_reasons(), ["content_filter"]);
    assert_eq!(r.text(), "");
    let whole: Value =
        serde_json::from_slice(&Gemini.response(lines.as_bytes(), "g").unwrap()).unwrap();
    assert_eq!(whole["choices"][0]["message"]["refusal"], r.refusal());
}

#[test]
fn resource_exhausted_mid_stream_is_a_rate_limit() {
    let lines = "{\"error\":{\"code\":429,\"message\":\"Quota exceeded\",\"status\":\"RESOURCE_EXHAUSTED\",\"details\":[{\"@type\":\"type.googleapis.com/google.rpc.RetryInfo\",\"retryDelay\":\"7s\"}]}}";
    let r = replay(Gemini.stream(ctx(false)), lines, false);
    let e = r.result.unwrap_err();
    assert_eq!(e.status(), 429);
    assert_eq!(e.retry_after, Some(std::time::Duration::from_secs(7)));
}

#[test]
fn output_gemini_is_not_asked_for_is_refused_naming_the_field() {
    for (field, value) in [
        ("logprobs", json!(true)),
        ("top_logprobs", json!(2)),
        ("audio", json!({"voice": "x"})),
        ("modalities", json!(["text", "audio"])),
    ] {
        let mut body = json!({"model": "g", "messages": [{"role": "user", "content": "hi"}]});
        body[field] = value;
        let e = Gemini.request(&target(), &chat(body)).unwrap_err();
        assert_eq!(e.param.as_deref(), Some(field));
        assert_eq!(e.status(), 400);
    }
    // Dropped, not refused: no Gemini equivalent and nothing the client waits for.
    let c = chat(
        json!({"model": "g", "messages": [{"role": "user", "content": "hi"}], "logprobs": false, "user": "u1", "parallel_tool_calls": false, "store": false}),
    );
    let (_, body) = build(&c);
    assert!(body.get("user").is_none());
}

/// Gemini answers a key it does not take with HTTP 400 `INVALID_ARGUMENT` and an
/// `ErrorInfo` reason `API_KEY_INVALID`: the gateway's credentials, not the client's
/// request (LiteLLM maps "API key not valid" to an authentication error too).
#[test]
fn an_invalid_api_key_answered_as_400_is_an_upstream_auth_failure() {
    let body = br#"{"error":{"code":400,"message":"API key not valid. Please pass a valid API key.","status":"INVALID_ARGUMENT","details":[{"@type":"type.googleapis.com/google.rpc.ErrorInfo","reason":"API_KEY_INVALID","domain":"googleapis.com","metadata":{"service":"generativelanguage.googleapis.com"}},{"@type":"type.googleapis.com/google.rpc.LocalizedMessage","locale":"en-US","message":"API key not valid. Please pass a valid API key."}]}}"#;
    let e = Gemini.error(400, &HeaderMap::new(), body);
    assert_eq!(e.status(), 502, "{}", e.message);
    assert_eq!(e.code, Some(crate::error::Code::UpstreamAuthFailed));
    assert!(!e.retry.same_endpoint() && e.retry.other_endpoint());
    // Any other 400 is still the client's.
    let body = br#"{"error":{"code":400,"message":"Invalid value at 'contents'","status":"INVALID_ARGUMENT","details":[{"@type":"type.googleapis.com/google.rpc.BadRequest","fieldViolations":[]}]}}"#;
    assert_eq!(Gemini.error(400, &HeaderMap::new(), body).status(), 400);
}

/// Gemini API "Troubleshooting": 400 `FAILED_PRECONDITION`, "Gemini API free tier
/// is not available in your country. Please enable billing on your project in Google
/// AI Studio." The account's state, not the client's request: not a 400 blaming it.
#[test]
fn failed_precondition_is_the_accounts_state_not_the_clients_request() {
    let body = br#"{"error":{"code":400,"message":"User location is not supported for the API use.","status":"FAILED_PRECONDITION"}}"#;
    let e = Gemini.error(400, &HeaderMap::new(), body);
    assert_eq!(e.status(), 502, "{}", e.message);
    assert_eq!(e.fault, crate::error::Fault::Gateway);
    assert!(e.retry.other_endpoint() && !e.retry.same_endpoint());
    assert!(
        e.message.contains("User location is not supported"),
        "{}",
        e.message
    );
}

/// Gemini API reference, `FinishReason`: "LANGUAGE: The response candidate content
/// was flagged for using an unsupported language." Flagged content is OpenAI's
/// `content_filter` (LiteLLM maps it the same way), not a normal `stop`.
#[test]
fn a_candidate_flagged_for_its_language_is_content_filter() {
    let body = json!({"candidates": [{"content": {"parts": [{"text": "x"}]}, "finishReason": "LANGUAGE"}]});
    let out = Gemini.response(body.to_string().as_bytes(), "g").unwrap();
    let v: Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(v["choices"][0]["finish_reason"], "content_filter");
    let r = replay(
        Gemini.stream(ctx(false)),
        r#"{"candidates":[{"content":{"parts":[{"text":"x"}],"role":"model"},"finishReason":"LANGUAGE","index":0}]}"#,
        false,
    );
    assert_eq!(r.finish_reasons(), ["content_filter"]);
}

/// OpenAI: "Omitting `parameters` defines a function with an empty parameter list";
/// a `null` (which validation reads as absent) was refused with a 400 here.
#[test]
fn a_tool_with_null_parameters_is_a_function_without_parameters() {
    let c = chat(
        json!({"model": "gem", "messages": [{"role": "user", "content": "hi"}],
        "tools": [{"type": "function", "function": {"name": "now", "parameters": null}}]}),
    );
    assert!(crate::api::validate::check(&c).is_ok());
    let (_, body) = build(&c);
    assert_eq!(
        body["tools"][0]["functionDeclarations"][0],
        json!({"name": "now"})
    );
}

/// OpenAI's stream shape for tool calls: a call's first delta carries `index`, `id`,
/// `type`, `function.name` and `arguments: ""`; later deltas only `index` and
/// argument pieces; parallel calls get indices 0, 1, ... Gemini sends each call
/// whole in one part, which went out as one delta with the whole arguments.
#[test]
fn whole_streamed_calls_open_with_empty_arguments_like_openai_deltas() {
    let r = replay(
        Gemini.stream(ctx(false)),
        concat!(
            r#"{"candidates":[{"content":{"parts":[{"functionCall":{"name":"f","args":{"a":1}}},{"functionCall":{"name":"g"}}],"role":"model"},"index":0}]}"#,
            "\n",
            r#"{"candidates":[{"content":{"parts":[{"text":""}],"role":"model"},"finishReason":"STOP","index":0}]}"#
        ),
        false,
    );
    assert!(r.result.is_ok(), "{:?}", r.result);
    let deltas: Vec<&Value> = r
        .chunks
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["tool_calls"].get(0))
        .collect();
    assert_eq!(deltas.len(), 4, "{deltas:?}");
    for (k, (index, name, args)) in [(0, "f", r#"{"a":1}"#), (1, "g", "{}")]
        .into_iter()
        .enumerate()
    {
        let first = deltas[2 * k];
        assert_eq!(first["index"], index);
        assert_eq!(first["type"], "function");
        assert_eq!(first["function"]["name"], name);
        assert_eq!(first["function"]["arguments"], "");
        assert!(first["id"].as_str().is_some_and(|id| !id.is_empty()));
        let rest = deltas[2 * k + 1];
        assert_eq!(
            rest,
            &json!({"index": index, "function": {"arguments": args}})
        );
    }
    assert_eq!(r.finish_reasons(), ["tool_calls"]);
}

/// Found by the translation attack of 2026-12-08: a candidate Gemini ended with
/// `MALFORMED_FUNCTION_CALL` (a function call it could not make) came back as a
/// clean, empty `stop`, which a tool loop reads as the model answering without a
/// call; so did `UNEXPECTED_TOOL_CALL` and `TOO_MANY_TOOL_CALLS`. They are a 502
/// another endpoint may take, or a stream's one error event, as Bedrock's
/// `malformed_tool_use` is.
#[test]
fn a_malformed_function_call_finish_was_a_clean_stop() {
    for reason in [
        "MALFORMED_FUNCTION_CALL",
        "UNEXPECTED_TOOL_CALL",
        "TOO_MANY_TOOL_CALLS",
        "MISSING_THOUGHT_SIGNATURE",
    ] {
        let body = json!({
            "candidates": [{"content": {"parts": [], "role": "model"}, "finishReason": reason, "index": 0}],
            "usageMetadata": {"promptTokenCount": 9, "totalTokenCount": 9}
        });
        let e = Gemini
            .response(body.to_string().as_bytes(), "g")
            .unwrap_err();
        assert_eq!(
            e.code,
            Some(crate::error::Code::UpstreamBadResponse),
            "{reason}"
        );
        assert!(e.message.contains(reason), "{}", e.message);
        // Streamed, after some text: no finish, no [DONE]; the error event.
        let events = format!(
            "{}\n{}",
            json!({"candidates": [{"content": {"parts": [{"text": "Let me"}], "role": "model"}, "index": 0}]}),
            json!({"candidates": [{"content": {"parts": [{"text": ""}], "role": "model"}, "finishReason": reason, "index": 0}]}),
        );
        let r = replay(Gemini.stream(ctx(false)), &events, false);
        assert!(r.finish_reasons().is_empty(), "{reason}");
        assert_eq!(r.result.as_ref().unwrap_err().status(), 502, "{reason}");
        assert!(!r.done, "{reason}");
    }
    // The others finish as before.
    let body =
        json!({"candidates": [{"content": {"parts": [{"text": "x"}]}, "finishReason": "STOP"}]});
    assert!(Gemini.response(body.to_string().as_bytes(), "g").is_ok());
}
