use std::time::{Duration, UNIX_EPOCH};

use aws_smithy_types::event_stream::{Header, HeaderValue as EsValue, Message};
use bytes::BytesMut;
use serde_json::{json, Value};

use super::*;
use crate::providers::testing::{self, assert_well_formed, fixture, Replay};
use crate::providers::StreamStep;
use crate::sse::SseParser;

fn chat(body: Value) -> ChatRequest {
    testing::chat(&body)
}

/// The AWS documentation's example key pair (also the SigV4 test suite's).
fn example_keys() -> AwsKeys {
    AwsKeys {
        access_key_id: "AKIDEXAMPLE".into(),
        secret_access_key: "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY".into(),
        session_token: None,
    }
}

fn adapter() -> Bedrock {
    Bedrock::with_keys("us-east-1", example_keys())
}

fn target() -> Target<'static> {
    Target {
        base_url: "",
        model: "anthropic.claude-3-haiku-20240307-v1:0",
        api_key: None,
    }
}

/// The upstream request and its JSON body.
fn build(c: &ChatRequest) -> (http::Request<Body>, Value) {
    testing::build(&adapter(), &target(), c)
}

fn provider_config(yaml: &str) -> ProviderConfig {
    let text = format!(
        "providers:\n  b: {yaml}\nmodels:\n  m: {{ endpoints: [ {{ provider: b, model: x }} ] }}\n"
    );
    crate::config::parse_str(&text, None)
        .expect("valid config")
        .providers
        .remove(0)
}

#[test]
fn sigv4_matches_an_independently_computed_signature() {
    // Expected value computed from the SigV4 spec ("Create a canonical request",
    // "Create a string to sign", "Calculate the signature") by a separate
    // implementation, which reproduces the AWS test suite's `get-vanilla` vector
    // (Signature=5fa00fa3...). The model id's `:` is encoded once in the URI and
    // twice in the canonical path, as the AWS SDKs do for non-S3 services.
    let body = br#"{"messages":[{"role":"user","content":[{"text":"Hi"}]}]}"#.to_vec();
    let time = UNIX_EPOCH + Duration::from_secs(1_440_938_160); // 2015-08-30T12:36:00Z
    let uri = format!(
        "https://bedrock-runtime.us-east-1.amazonaws.com/model/{}/converse",
        path_segment("anthropic.claude-3-haiku-20240307-v1:0")
    );
    assert!(uri.ends_with("/model/anthropic.claude-3-haiku-20240307-v1%3A0/converse"));
    let req = adapter().signed(&uri, false, body, time).unwrap();
    let h = req.headers();
    assert_eq!(h["x-amz-date"], "20150830T123600Z");
    assert_eq!(
        h["authorization"],
        "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/bedrock/aws4_request, \
         SignedHeaders=accept;content-type;host;x-amz-date, \
         Signature=88e6fca0674d4d8e80ab77e73d07f1585a595368a1a45919a49eb4982c36e9cf"
    );
    assert!(h.get("x-amz-security-token").is_none());
}

#[test]
fn a_session_token_is_sent_and_signed() {
    let mut keys = example_keys();
    keys.session_token = Some("tok".into());
    let b = Bedrock::with_keys("eu-west-1", keys);
    let (req, _) = testing::build(
        &b,
        &target(),
        &chat(json!({"model": "m", "messages": [{"role": "user", "content": "Hi"}]})),
    );
    assert_eq!(req.headers()["x-amz-security-token"], "tok");
    let auth = req.headers()["authorization"].to_str().unwrap();
    assert!(auth.contains("/eu-west-1/bedrock/aws4_request"), "{auth}");
    assert!(auth.contains("x-amz-security-token"), "{auth}");
    assert_eq!(
        req.uri().to_string(),
        "https://bedrock-runtime.eu-west-1.amazonaws.com/model/anthropic.claude-3-haiku-20240307-v1%3A0/converse"
    );
}

#[test]
fn credentials_come_from_env_then_the_profile_file_and_their_absence_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("credentials");
    std::fs::write(
        &file,
        "[default]\naws_access_key_id = DEF\naws_secret_access_key = defsecret\n\n# team\n[work]\naws_access_key_id=WORK\naws_secret_access_key = worksecret\naws_session_token = wtok\n",
    )
    .unwrap();
    let path = file.to_str().unwrap().to_string();
    let env_of = |pairs: Vec<(&'static str, String)>| {
        move |k: &str| pairs.iter().find(|(n, _)| *n == k).map(|(_, v)| v.clone())
    };
    let cfg = provider_config("{ kind: bedrock, region: us-west-2 }");
    // Profile file, named profile.
    let env = env_of(vec![
        ("AWS_SHARED_CREDENTIALS_FILE", path.clone()),
        ("AWS_PROFILE", "work".into()),
    ]);
    let b = Bedrock::from_config(&cfg, &env).unwrap();
    assert_eq!(b.region, "us-west-2");
    let (req, _) = testing::build(
        &b,
        &target(),
        &chat(json!({"model": "m", "messages": [{"role": "user", "content": "Hi"}]})),
    );
    let auth = req.headers()["authorization"].to_str().unwrap();
    assert!(
        auth.starts_with("AWS4-HMAC-SHA256 Credential=WORK/"),
        "{auth}"
    );
    assert_eq!(req.headers()["x-amz-security-token"], "wtok");
    // Environment keys win over the file.
    let env = env_of(vec![
        ("AWS_SHARED_CREDENTIALS_FILE", path.clone()),
        ("AWS_ACCESS_KEY_ID", "ENVKEY".into()),
        ("AWS_SECRET_ACCESS_KEY", "envsecret".into()),
    ]);
    let b = Bedrock::from_config(&cfg, &env).unwrap();
    let (req, _) = testing::build(
        &b,
        &target(),
        &chat(json!({"model": "m", "messages": [{"role": "user", "content": "Hi"}]})),
    );
    assert!(req.headers()["authorization"]
        .to_str()
        .unwrap()
        .starts_with("AWS4-HMAC-SHA256 Credential=ENVKEY/"));
    // A Bedrock API key is a bearer token.
    let env = env_of(vec![("AWS_BEARER_TOKEN_BEDROCK", "bedrock-key".into())]);
    let b = Bedrock::from_config(&cfg, &env).unwrap();
    let (req, _) = testing::build(
        &b,
        &target(),
        &chat(json!({"model": "m", "messages": [{"role": "user", "content": "Hi"}]})),
    );
    assert_eq!(req.headers()["authorization"], "Bearer bedrock-key");
    assert!(req.headers().get("x-amz-date").is_none());
    // Nothing: a sentence naming the provider.
    let env = env_of(vec![(
        "HOME",
        dir.path().join("nowhere").to_str().unwrap().to_string(),
    )]);
    let e = Bedrock::from_config(&cfg, &env).unwrap_err();
    assert!(e.starts_with("providers.b: no AWS credentials"), "{e}");
    // No region.
    let cfg = provider_config("{ kind: bedrock }");
    let e = Bedrock::from_config(&cfg, &env_of(vec![])).unwrap_err();
    assert!(e.contains("needs a region"), "{e}");
    let env = env_of(vec![
        ("AWS_DEFAULT_REGION", "ap-south-1".into()),
        ("AWS_BEARER_TOKEN_BEDROCK", "k".into()),
    ]);
    assert_eq!(
        Bedrock::from_config(&cfg, &env).unwrap().region,
        "ap-south-1"
    );
}

#[test]
fn bedrock_only_settings_are_refused_elsewhere() {
    let text = "providers:\n  a: { kind: anthropic, region: us-east-1 }\nmodels:\n  m: { endpoints: [ { provider: a, model: x } ] }\n";
    let e = crate::config::parse_str(text, None)
        .unwrap_err()
        .to_string();
    assert!(e.contains("providers.a.region"), "{e}");
}

#[test]
fn conversation_with_system_images_tools_and_results() {
    let c = chat(json!({
        "model": "m",
        "max_tokens": 300,
        "temperature": 0.2,
        "top_p": 0.9,
        "stop": ["END"],
        "stream": true,
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": [
                {"type": "text", "text": "Weather here?"},
                {"type": "text", "text": "  "},
                {"type": "image_url", "image_url": {"url": "data:image/jpg;base64,/9j/4AAQ"}}
            ]},
            {"role": "assistant", "content": null, "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "weather", "arguments": "{\"city\":\"Paris\"}"}},
                {"id": "c2", "type": "function", "function": {"name": "time", "arguments": ""}}
            ]},
            {"role": "tool", "tool_call_id": "c1", "content": "{\"temp\":21}"},
            {"role": "tool", "tool_call_id": "c2", "content": "12:00"},
            {"role": "assistant", "content": "21 degrees at noon."},
            {"role": "user", "content": "Thanks"}
        ],
        "tools": [
            {"type": "function", "function": {"name": "weather", "description": "Weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}},
            {"type": "function", "function": {"name": "time"}}
        ],
        "tool_choice": {"type": "function", "function": {"name": "weather"}}
    }));
    let (req, body) = build(&c);
    assert_eq!(
        req.uri().path(),
        "/model/anthropic.claude-3-haiku-20240307-v1%3A0/converse-stream"
    );
    assert_eq!(
        req.headers()["accept"],
        "application/vnd.amazon.eventstream"
    );
    assert_eq!(
        body,
        json!({
            "messages": [
                {"role": "user", "content": [
                    {"text": "Weather here?"},
                    {"image": {"format": "jpeg", "source": {"bytes": "/9j/4AAQ"}}}
                ]},
                {"role": "assistant", "content": [
                    {"toolUse": {"toolUseId": "c1", "name": "weather", "input": {"city": "Paris"}}},
                    {"toolUse": {"toolUseId": "c2", "name": "time", "input": {}}}
                ]},
                {"role": "user", "content": [
                    {"toolResult": {"toolUseId": "c1", "content": [{"json": {"temp": 21}}]}},
                    {"toolResult": {"toolUseId": "c2", "content": [{"text": "12:00"}]}}
                ]},
                {"role": "assistant", "content": [{"text": "21 degrees at noon."}]},
                {"role": "user", "content": [{"text": "Thanks"}]}
            ],
            "system": [{"text": "Be brief."}],
            "inferenceConfig": {"maxTokens": 300, "temperature": 0.2, "topP": 0.9, "stopSequences": ["END"]},
            "toolConfig": {
                "tools": [
                    {"toolSpec": {"name": "weather", "description": "Weather", "inputSchema": {"json": {"type": "object", "properties": {"city": {"type": "string"}}}}}},
                    {"toolSpec": {"name": "time", "inputSchema": {"json": {"type": "object", "properties": {}}}}}
                ],
                "toolChoice": {"tool": {"name": "weather"}}
            }
        })
    );
}

#[test]
fn tool_choice_required_is_any_and_auto_is_auto() {
    let tools = json!([{"type": "function", "function": {"name": "f"}}]);
    for (choice, want) in [
        ("required", json!({"any": {}})),
        ("auto", json!({"auto": {}})),
    ] {
        let (_, body) = build(&chat(json!({
            "model": "m", "messages": [{"role": "user", "content": "x"}],
            "tools": tools, "tool_choice": choice
        })));
        assert_eq!(body["toolConfig"]["toolChoice"], want);
    }
}

#[test]
fn what_bedrock_cannot_take_is_refused_naming_the_field() {
    let cases = [
        (json!({"n": 2}), "n", "unsupported_value"),
        (
            json!({"logprobs": true}),
            "logprobs",
            "unsupported_parameter",
        ),
        (
            json!({"temperature": 1.5}),
            "temperature",
            "unsupported_value",
        ),
        (
            json!({"response_format": {"type": "json_object"}}),
            "response_format",
            "unsupported_value",
        ),
        (
            json!({"functions": []}),
            "functions",
            "unsupported_parameter",
        ),
        (
            json!({"thinking": {"type": "enabled", "budget_tokens": 512}}),
            "thinking.budget_tokens",
            "integer_below_min_value",
        ),
        (
            json!({"thinking": {"budget_tokens": 2048}}),
            "thinking.type",
            "missing_required_parameter",
        ),
        (
            json!({"messages": [
                {"role": "user", "content": "go"},
                {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
                {"role": "tool", "tool_call_id": "c1", "content": "x"}
            ]}),
            "tools",
            "missing_required_parameter",
        ),
        (
            json!({"tools": [{"type": "function", "function": {"name": "f"}}], "tool_choice": "none",
                   "messages": [
                {"role": "user", "content": "go"},
                {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
                {"role": "tool", "tool_call_id": "c1", "content": "x"}
            ]}),
            "tool_choice",
            "unsupported_value",
        ),
        (
            json!({"messages": [{"role": "tool", "content": "x"}]}),
            "messages[0].tool_call_id",
            "missing_required_parameter",
        ),
    ];
    for (extra, param, code) in cases {
        let mut body = json!({"model": "m", "messages": [{"role": "user", "content": "x"}]});
        body.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        let e = adapter().request(&target(), &chat(body)).unwrap_err();
        assert_eq!(e.status(), 400, "{param}");
        assert_eq!(e.param.as_deref(), Some(param));
        assert_eq!(e.to_json()["error"]["code"], code, "{param}: {}", e.message);
    }
}

#[test]
fn image_urls_and_unknown_media_types_are_refused_naming_the_part() {
    for (url, why) in [
        ("https://example.com/cat.png", "does not fetch URLs"),
        ("data:image/tiff;base64,AAAA", "image/tiff"),
    ] {
        let c = chat(json!({"model": "m", "messages": [
            {"role": "user", "content": "first"},
            {"role": "user", "content": [
                {"type": "text", "text": "look"},
                {"type": "image_url", "image_url": {"url": url}}
            ]}
        ]}));
        let e = adapter().request(&target(), &c).unwrap_err();
        assert_eq!(e.status(), 400);
        assert_eq!(
            e.param.as_deref(),
            Some("messages[1].content[1].image_url.url")
        );
        assert_eq!(e.to_json()["error"]["code"], "unsupported_value");
        assert!(e.message.contains(why), "{}", e.message);
    }
}

#[test]
fn dropped_fields_do_not_reach_bedrock() {
    let (_, body) = build(&chat(json!({
        "model": "m", "messages": [{"role": "user", "content": "x"}],
        "seed": 1, "presence_penalty": 0.5, "user": "u", "parallel_tool_calls": true
    })));
    assert_eq!(
        body,
        json!({"messages": [{"role": "user", "content": [{"text": "x"}]}]})
    );
}

#[test]
fn golden_text_response() {
    let out = adapter()
        .response(fixture("bedrock/amazon-bedrock-text.json").as_bytes(), "m")
        .unwrap();
    let v: Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(v["object"], "chat.completion");
    assert_eq!(v["model"], "m");
    let msg = &v["choices"][0]["message"];
    assert_eq!(msg["role"], "assistant");
    assert!(msg["content"]
        .as_str()
        .unwrap()
        .starts_with("Let me count the \"r\"s in \"strawberry\""));
    assert_eq!(v["choices"][0]["finish_reason"], "stop");
    assert_eq!(
        v["usage"],
        json!({"prompt_tokens": 22, "completion_tokens": 57, "total_tokens": 79})
    );
}

#[test]
fn golden_tool_call_response() {
    let out = adapter()
        .response(
            fixture("bedrock/amazon-bedrock-tool-call.1.json").as_bytes(),
            "m",
        )
        .unwrap();
    let v: Value = serde_json::from_slice(&out).unwrap();
    let c = &v["choices"][0];
    assert_eq!(c["finish_reason"], "tool_calls");
    assert!(c["message"]["content"].is_null());
    assert_eq!(
        c["message"]["tool_calls"],
        json!([{"id": "tool-use-id", "type": "function", "function": {"name": "bash", "arguments": "{\"command\":\"ls -l\"}"}}])
    );
    assert_eq!(v["usage"]["total_tokens"], 30);
}

#[test]
fn cache_tokens_reasoning_and_stop_reasons() {
    let body = json!({
        "output": {"message": {"role": "assistant", "content": [
            {"reasoningContent": {"reasoningText": {"text": "Hmm.", "signature": "sig"}}},
            {"text": "Answer."}
        ]}},
        "stopReason": "max_tokens",
        "usage": {"inputTokens": 10, "outputTokens": 5, "totalTokens": 115, "cacheReadInputTokens": 100, "cacheWriteInputTokens": 0}
    });
    let out = adapter()
        .response(body.to_string().as_bytes(), "m")
        .unwrap();
    let v: Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(v["choices"][0]["finish_reason"], "length");
    assert_eq!(v["choices"][0]["message"]["reasoning_content"], "Hmm.");
    assert_eq!(
        v["choices"][0]["message"]["thinking_blocks"],
        json!([{"type": "thinking", "thinking": "Hmm.", "signature": "sig"}])
    );
    assert_eq!(v["choices"][0]["message"]["content"], "Answer.");
    assert_eq!(
        v["usage"],
        json!({"prompt_tokens": 110, "completion_tokens": 5, "total_tokens": 115, "prompt_tokens_details": {"cached_tokens": 100}})
    );
    for (reason, want) in [
        ("end_turn", "stop"),
        ("stop_sequence", "stop"),
        ("tool_use", "tool_calls"),
        ("guardrail_intervened", "content_filter"),
        ("content_filtered", "content_filter"),
    ] {
        assert_eq!(finish_reason(Some(reason), false), want, "{reason}");
    }
}

#[test]
fn error_bodies_map_like_the_other_adapters() {
    let mut h = HeaderMap::new();
    h.insert(
        "x-amzn-errortype",
        "ValidationException:http://internal.amazon.com/coral/com.amazon.bedrock/"
            .parse()
            .unwrap(),
    );
    let e = adapter().error(400, &h, br#"{"message":"Malformed input request"}"#);
    assert_eq!(e.status(), 400);
    assert!(
        e.message.contains("Malformed input request"),
        "{}",
        e.message
    );
    assert_eq!(
        e.code,
        Some(crate::error::Code::provider("ValidationException"))
    );
    let e = adapter().error(
        400,
        &h,
        br#"{"message":"Input is too long for requested model."}"#,
    );
    assert_eq!(e.kind, ErrorKind::ContextWindowExceeded);
    // Found by the translation attack of 2026-12-07: Claude's overflow of input plus
    // `max_tokens`, and Llama's "maximum context length", were a plain 400 coded
    // `ValidationException` (no failover to a larger window).
    for message in [
        "input length and `max_tokens` exceed context limit: 196395 + 64000 > 204698, decrease input length or `max_tokens` and try again",
        "This model's maximum context length is 8192 tokens. Please reduce the length of the prompt.",
    ] {
        let body = serde_json::to_vec(&json!({ "message": message })).unwrap();
        let e = adapter().error(400, &h, &body);
        assert_eq!(e.kind, ErrorKind::ContextWindowExceeded, "{message}");
        assert_eq!(e.code, Some(crate::error::Code::ContextLengthExceeded), "{message}");
    }
    let e = adapter().error(
        429,
        &HeaderMap::new(),
        br#"{"message":"Too many requests"}"#,
    );
    assert_eq!(e.status(), 429);
    let e = adapter().error(
        500,
        &HeaderMap::new(),
        br#"{"message":"Traceback (most recent call last)"}"#,
    );
    assert_eq!(e.status(), 502);
    assert!(!e.message.contains("Traceback"), "{}", e.message);
    let mut h = HeaderMap::new();
    h.insert(
        "x-amzn-errortype",
        "ServiceUnavailableException".parse().unwrap(),
    );
    let e = adapter().error(503, &h, br#"{"message":"busy"}"#);
    assert_eq!(e.code, Some(crate::error::Code::UpstreamOverloaded));
}

/// Found by the billing review: `ServiceQuotaExceededException` (HTTP 400, "You
/// can resubmit your request later") was the client's invalid request, never
/// retried; `AccessDeniedException` (403, including a model the account has no
/// access to) told the operator to check an API key.
#[test]
fn service_quota_exceeded_was_the_clients_invalid_request() {
    let typed = |t: &'static str| {
        let mut h = HeaderMap::new();
        h.insert("x-amzn-errortype", t.parse().unwrap());
        h
    };
    let e = adapter().error(
        400,
        &typed("ServiceQuotaExceededException:http://internal.amazon.com/coral/com.amazon.bedrock/"),
        br#"{"message":"Your request exceeds the service quota for your account. You can view your quotas at Viewing service quotas. You can resubmit your request later."}"#,
    );
    assert_eq!((e.status(), e.kind), (429, ErrorKind::RateLimited));
    assert_eq!(e.code, Some(crate::error::Code::UpstreamRateLimited));
    assert!(e.retry.same_endpoint());
    assert!(
        e.message.contains("resubmit your request later"),
        "{}",
        e.message
    );
    let e = adapter().error(
        429,
        &typed("ThrottlingException"),
        br#"{"message":"Too many requests, please wait before trying again."}"#,
    );
    assert_eq!((e.status(), e.kind), (429, ErrorKind::RateLimited));
    let e = adapter().error(
        403,
        &typed("AccessDeniedException"),
        br#"{"message":"You don't have access to the model with the specified model ID."}"#,
    );
    assert_eq!(e.status(), 502);
    assert_eq!(e.code, Some(crate::error::Code::UpstreamAuthFailed));
    assert!(!e.retry.same_endpoint() && e.retry.other_endpoint());
    assert!(e.message.contains("AccessDeniedException"), "{}", e.message);
    assert!(e.message.contains("access to the model"), "{}", e.message);
    assert!(!e.message.contains("api_key_env"), "{}", e.message);
}

// ---- ConverseStream ----

/// One event stream frame of `kind` with `payload`.
fn frame(message_type: &str, kind: &str, payload: &str) -> Vec<u8> {
    let type_header = if message_type == "exception" {
        ":exception-type"
    } else {
        ":event-type"
    };
    let m = Message::new(payload.as_bytes().to_vec())
        .add_header(Header::new(
            ":message-type",
            EsValue::String(message_type.to_string().into()),
        ))
        .add_header(Header::new(
            type_header,
            EsValue::String(kind.to_string().into()),
        ))
        .add_header(Header::new(
            ":content-type",
            EsValue::String("application/json".into()),
        ));
    let mut out = Vec::new();
    aws_smithy_eventstream::frame::write_message_to(&m, &mut out).unwrap();
    out
}

/// A `*.chunks.txt` fixture (one `{"<eventType>": payload}` object per line) as
/// the event stream Bedrock sends.
fn encode_fixture(lines: &str) -> Vec<u8> {
    let mut out = Vec::new();
    for line in lines.lines().filter(|l| !l.trim().is_empty()) {
        let v: Value = serde_json::from_str(line).unwrap();
        let (kind, payload) = v.as_object().unwrap().iter().next().unwrap();
        out.extend(frame("event", kind, &payload.to_string()));
    }
    out
}

fn ctx(include_usage: bool) -> StreamContext {
    StreamContext {
        logical_model: "m".into(),
        include_usage,
        prompt_tokens_estimate: 7,
        track: false,
        resume: None,
    }
}

/// Feeds `bytes` to a fresh transcoder in pieces of the given sizes (cycled), then
/// ends the body.
fn replay_bytes(bytes: &[u8], sizes: &[usize], include_usage: bool) -> Replay {
    let mut t = adapter().stream(ctx(include_usage));
    let mut out = BytesMut::new();
    let mut result = None;
    let mut pos = 0;
    let mut k = 0;
    while pos < bytes.len() {
        let n = sizes[k % sizes.len()].max(1).min(bytes.len() - pos);
        k += 1;
        match t
            .raw(&bytes[pos..pos + n], &mut out)
            .expect("Bedrock takes raw bytes")
        {
            Ok(StreamStep::Continue) => {}
            Ok(StreamStep::Done) => {
                result = Some(Ok(()));
                break;
            }
            Err(e) => {
                result = Some(Err(e));
                break;
            }
        }
        pos += n;
    }
    let result = result.unwrap_or_else(|| t.end(&mut out));
    let mut parser = SseParser::new();
    parser.push(&out).unwrap();
    let (mut chunks, mut done) = (Vec::new(), false);
    while let Some(ev) = parser.next_event() {
        assert!(!done, "an event after [DONE]");
        if ev.data == "[DONE]" {
            done = true;
        } else {
            chunks.push(serde_json::from_str(&ev.data).expect("chunk is JSON"));
        }
    }
    Replay {
        chunks,
        done,
        result,
        content: t.produced_content(),
        sent: t.sent().clone(),
    }
}

/// Pseudo-random piece sizes from 1 to 40 (a fixed LCG: the test is repeatable).
fn random_sizes() -> Vec<usize> {
    let mut x: u64 = 0x2545_F491_4F6C_DD1D;
    (0..97)
        .map(|_| {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (x >> 33) as usize % 40 + 1
        })
        .collect()
}

#[test]
fn golden_text_stream_whole_split_bytewise_and_randomly() {
    let bytes = encode_fixture(&fixture("bedrock/amazon-bedrock-text.chunks.txt"));
    let want = "Let me count the \"r\"s in \"strawberry\":\n\ns-t-**r**-a-w-b-e-**r**-**r**-y\n\nThere are **3** r's in \"strawberry.\"";
    for sizes in [vec![bytes.len()], vec![1], random_sizes()] {
        let r = replay_bytes(&bytes, &sizes, true);
        r.result.as_ref().unwrap();
        assert!(r.done && r.content);
        assert_well_formed(&r, "m");
        assert_eq!(r.text(), want);
        assert_eq!(r.finish_reasons(), ["stop"]);
        let usage = r.usage_chunks();
        assert_eq!(usage.len(), 1);
        assert_eq!(
            usage[0]["usage"],
            json!({"prompt_tokens": 22, "completion_tokens": 55, "total_tokens": 77})
        );
    }
}

#[test]
fn golden_tool_call_stream_with_metadata_before_message_stop() {
    let bytes = encode_fixture(&fixture("bedrock/amazon-bedrock-tool-call.1.chunks.txt"));
    for sizes in [vec![bytes.len()], vec![1], random_sizes()] {
        let r = replay_bytes(&bytes, &sizes, false);
        r.result.as_ref().unwrap();
        assert!(r.done);
        assert_well_formed(&r, "m");
        assert_eq!(
            r.tool_calls(),
            [(
                "tool-use-id".to_string(),
                "test-tool".to_string(),
                "{\"value\":\"Sparkle Day\"}".to_string()
            )]
        );
        assert_eq!(r.finish_reasons(), ["tool_calls"]);
        assert!(r.usage_chunks().is_empty(), "not asked for");
    }
}

#[test]
fn a_tool_without_input_gets_empty_object_arguments_and_reasoning_is_relayed() {
    let mut bytes = Vec::new();
    bytes.extend(frame("event", "messageStart", r#"{"role":"assistant"}"#));
    bytes.extend(frame(
        "event",
        "contentBlockDelta",
        r#"{"contentBlockIndex":0,"delta":{"reasoningContent":{"text":"Think."}}}"#,
    ));
    bytes.extend(frame(
        "event",
        "contentBlockDelta",
        r#"{"contentBlockIndex":0,"delta":{"reasoningContent":{"signature":"c2ln"}}}"#,
    ));
    bytes.extend(frame(
        "event",
        "contentBlockStop",
        r#"{"contentBlockIndex":0}"#,
    ));
    bytes.extend(frame(
        "event",
        "contentBlockStart",
        r#"{"contentBlockIndex":1,"start":{"toolUse":{"toolUseId":"t1","name":"now"}}}"#,
    ));
    bytes.extend(frame(
        "event",
        "contentBlockStop",
        r#"{"contentBlockIndex":1}"#,
    ));
    bytes.extend(frame(
        "event",
        "messageStop",
        r#"{"stopReason":"tool_use"}"#,
    ));
    // The body ends without metadata: complete (finish seen), usage estimated.
    let r = replay_bytes(&bytes, &[5], true);
    r.result.as_ref().unwrap();
    assert!(r.done);
    let reasoning: String = r
        .chunks
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["reasoning_content"].as_str())
        .collect();
    assert_eq!(reasoning, "Think.");
    let blocks: Vec<&Value> = r
        .chunks
        .iter()
        .filter_map(|c| c["choices"][0]["delta"].get("thinking_blocks"))
        .collect();
    assert_eq!(
        blocks,
        [&json!([{"type": "thinking", "thinking": "Think.", "signature": "c2ln"}])]
    );
    assert_eq!(
        r.tool_calls(),
        [("t1".to_string(), "now".to_string(), "{}".to_string())]
    );
    assert_eq!(r.usage_chunks()[0]["usage"]["prompt_tokens"], 7);
}

#[test]
fn exceptions_map_to_the_client_error() {
    for (kind, status) in [
        ("throttlingException", 429),
        ("validationException", 400),
        ("modelStreamErrorException", 502),
        ("internalServerException", 502),
    ] {
        let mut bytes = frame("event", "messageStart", r#"{"role":"assistant"}"#);
        bytes.extend(frame("exception", kind, r#"{"message":"slow down"}"#));
        let r = replay_bytes(&bytes, &[3], false);
        let e = r.result.unwrap_err();
        assert_eq!(e.status(), status, "{kind}");
        assert!(
            e.message.contains(kind) && e.message.contains("slow down"),
            "{}",
            e.message
        );
        assert!(!r.done);
    }
}

#[test]
fn a_bad_crc_an_oversized_frame_and_a_cut_end_the_stream_with_an_error() {
    let good = encode_fixture(&fixture("bedrock/amazon-bedrock-text.chunks.txt"));
    // Flip a payload byte of the second frame: its message CRC no longer matches.
    let first = u32::from_be_bytes(good[0..4].try_into().unwrap()) as usize;
    let second = u32::from_be_bytes(good[first..first + 4].try_into().unwrap()) as usize;
    let mut bad = good.clone();
    bad[first + second - 6] ^= 0x01;
    let r = replay_bytes(&bad, &[1], false);
    let e = r.result.unwrap_err();
    assert_eq!(e.status(), 502);
    assert!(
        e.message.contains("bad event stream frame"),
        "{}",
        e.message
    );
    assert!(!r.done);
    // A damaged prelude CRC.
    let mut bad = good.clone();
    bad[9] ^= 0xff;
    assert!(replay_bytes(&bad, &[7], false).result.is_err());
    // A length over the bound is refused at once, without waiting for the bytes.
    let mut t = adapter().stream(ctx(false));
    let mut out = BytesMut::new();
    let huge = ((stream::MAX_FRAME_BYTES + 1) as u32).to_be_bytes();
    let e = t.raw(&huge, &mut out).unwrap().unwrap_err();
    assert!(e.message.contains("frame of"), "{}", e.message);
    // A body that stops mid-answer is a cut, not a complete stream.
    let r = replay_bytes(&good[..good.len() / 2], &[good.len()], false);
    assert!(r.result.is_err());
    assert!(!r.done);
}

#[test]
fn parse_credentials_file_reads_one_profile() {
    let text = "[default]\naws_access_key_id=A\naws_secret_access_key=B\n[profile dev]\naws_access_key_id = C\n; no secret\n";
    assert_eq!(
        parse_credentials_file(text, "default"),
        Some(AwsKeys {
            access_key_id: "A".into(),
            secret_access_key: "B".into(),
            session_token: None
        })
    );
    assert_eq!(parse_credentials_file(text, "dev"), None);
    assert_eq!(parse_credentials_file(text, "missing"), None);
}

#[test]
fn cache_markers_become_cache_points_where_they_stand() {
    let c = chat(json!({
        "model": "m",
        "messages": [
            {"role": "system", "content": [
                {"type": "text", "text": "Long rules.", "cache_control": {"type": "ephemeral"}}
            ]},
            {"role": "user", "content": [
                {"type": "text", "text": ""},
                {"type": "text", "text": "Doc.", "cache_control": {"type": "ephemeral", "ttl": "1h"}},
                {"type": "text", "text": "Question?"}
            ]},
            {"role": "assistant", "content": null, "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
            ]},
            {"role": "tool", "tool_call_id": "c1", "content": "ok", "cache_control": {"type": "ephemeral"}}
        ],
        "tools": [{"type": "function", "function": {"name": "f"}, "cache_control": {"type": "ephemeral"}}]
    }));
    let (_, body) = build(&c);
    let point = json!({"cachePoint": {"type": "default"}});
    assert_eq!(body["system"], json!([{"text": "Long rules."}, point]));
    assert_eq!(
        body["messages"][0]["content"],
        json!([{"text": "Doc."}, point, {"text": "Question?"}])
    );
    assert_eq!(body["messages"][2]["content"][1], point);
    assert_eq!(body["toolConfig"]["tools"][1], point);
    // A fifth marker, or one of another type, is refused naming it.
    let mut five = c.clone();
    five.messages[1].content[2]["cache_control"] = json!({"type": "ephemeral"});
    let e = adapter().request(&target(), &five).unwrap_err();
    assert_eq!(e.param.as_deref(), Some("tools[0].cache_control"));
    let mut odd = c.clone();
    odd.messages[0].content[0]["cache_control"] = json!({"type": "persistent"});
    let e = adapter().request(&target(), &odd).unwrap_err();
    assert_eq!(
        e.param.as_deref(),
        Some("messages[0].content[0].cache_control")
    );
}

#[test]
fn thinking_blocks_are_replayed_as_reasoning_content_blocks() {
    let (_, body) = build(&chat(json!({
        "model": "m",
        "messages": [
            {"role": "user", "content": "Weather?"},
            {"role": "assistant", "content": null, "reasoning_content": "Think.",
             "thinking_blocks": [
                {"type": "thinking", "thinking": "Think.", "signature": "c2ln"},
                {"type": "redacted_thinking", "data": "ZW5j"}
             ],
             "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "sunny"}
        ],
        "tools": [{"type": "function", "function": {"name": "f"}}]
    })));
    assert_eq!(
        body["messages"][1]["content"],
        json!([
            {"reasoningContent": {"reasoningText": {"text": "Think.", "signature": "c2ln"}}},
            {"reasoningContent": {"redactedContent": "ZW5j"}},
            {"toolUse": {"toolUseId": "c1", "name": "f", "input": {}}}
        ])
    );
}

#[test]
fn a_message_stop_without_message_start_is_not_a_complete_empty_answer() {
    let mut bytes = frame("event", "messageStop", r#"{"stopReason":"end_turn"}"#);
    bytes.extend(frame(
        "event",
        "metadata",
        r#"{"usage":{"inputTokens":1,"outputTokens":0,"totalTokens":1}}"#,
    ));
    let r = replay_bytes(&bytes, &[bytes.len()], false);
    let e = r.result.unwrap_err();
    assert_eq!(e.code, Some(crate::error::Code::UpstreamBadResponse));
    assert!(
        e.message.contains("before any messageStart"),
        "{}",
        e.message
    );
    assert!(!r.done);
}

#[test]
fn an_unknown_event_type_frame_is_skipped() {
    let mut bytes = frame("event", "someFutureEvent", r#"{"x":1}"#);
    bytes.extend(frame("event", "messageStart", r#"{"role":"assistant"}"#));
    bytes.extend(frame("event", "someFutureEvent", "not even json"));
    bytes.extend(frame(
        "event",
        "contentBlockDelta",
        r#"{"contentBlockIndex":0,"delta":{"text":"hi"}}"#,
    ));
    bytes.extend(frame(
        "event",
        "messageStop",
        r#"{"stopReason":"end_turn"}"#,
    ));
    let r = replay_bytes(&bytes, &[3], false);
    r.result.as_ref().unwrap();
    assert!(r.done);
    assert_eq!(r.text(), "hi");
    assert_eq!(r.finish_reasons(), ["stop"]);
}

#[test]
fn a_converse_response_without_output_message_is_a_bad_response_not_an_empty_answer() {
    for body in [
        r#"{"output":{},"stopReason":"end_turn"}"#,
        r#"{"output":{"message":null}}"#,
    ] {
        let e = adapter().response(body.as_bytes(), "m").unwrap_err();
        assert_eq!(
            e.code,
            Some(crate::error::Code::UpstreamBadResponse),
            "{body}"
        );
        assert!(e.message.contains("output.message"), "{}", e.message);
    }
    // A message with no blocks is an (empty) answer.
    let out = adapter()
        .response(
            br#"{"output":{"message":{"role":"assistant","content":[]}},"stopReason":"end_turn"}"#,
            "m",
        )
        .unwrap();
    let v: Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(v["choices"][0]["finish_reason"], "stop");
}

/// Bedrock API reference, `ToolUseBlock.toolUseId` / `ToolResultBlock.toolUseId`:
/// "Length Constraints: Minimum length of 1. Maximum length of 64. Pattern:
/// [a-zA-Z0-9_-]+". Other ids are rewritten, the call and its result the same way.
#[test]
fn tool_call_ids_outside_bedrocks_pattern_or_length_are_rewritten_in_call_and_result() {
    let long = format!("call_1__thought__{}", "c2ln+/=".repeat(30));
    let req = testing::chat(&json!({"model": "m", "messages": [
        {"role": "user", "content": "weather?"},
        {"role": "assistant", "content": null, "tool_calls": [
            {"id": "functions.get_weather:0", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}},
            {"id": long, "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}
        ]},
        {"role": "tool", "tool_call_id": "functions.get_weather:0", "content": "sunny"},
        {"role": "tool", "tool_call_id": long, "content": "rainy"}
    ], "tools": [{"type": "function", "function": {"name": "get_weather"}}]}));
    let (_, b) = build(&req);
    for k in 0..2 {
        let id = b["messages"][1]["content"][k]["toolUse"]["toolUseId"]
            .as_str()
            .unwrap();
        assert!(crate::providers::common::is_tool_use_id(id), "{id}");
        assert_eq!(
            b["messages"][2]["content"][k]["toolResult"]["toolUseId"],
            id
        );
    }
}

/// Bedrock refuses blank text blocks ("text content blocks must be non-empty"), a
/// tool result's included, and `ToolResultBlock.content` is "Required: Yes": a tool
/// that returned nothing must not wedge the conversation.
#[test]
fn an_empty_tool_result_is_sent_as_non_blank_text() {
    for content in [
        json!(""),
        json!("  \n"),
        json!([{"type": "text", "text": ""}]),
    ] {
        let req = testing::chat(&json!({"model": "m", "messages": [
            {"role": "user", "content": "run it"},
            {"role": "assistant", "content": null, "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "run", "arguments": "{}"}}
            ]},
            {"role": "tool", "tool_call_id": "call_1", "content": content}
        ], "tools": [{"type": "function", "function": {"name": "run"}}]}));
        let (_, b) = build(&req);
        let result = &b["messages"][2]["content"][0]["toolResult"];
        assert_eq!(result["toolUseId"], "call_1");
        let text = result["content"][0]["text"].as_str().unwrap();
        assert!(!text.trim().is_empty(), "{content}: {result}");
        assert_eq!(text, request::EMPTY_TOOL_RESULT);
    }
}

/// Bedrock API reference, Converse "Errors": `ModelErrorException` "The request
/// failed due to an error while processing the model. HTTP Status Code: 424". The
/// model failed, not the client's request: a retryable 502, not a 400.
#[test]
fn a_model_error_exception_424_is_an_upstream_failure_not_the_clients() {
    let mut h = HeaderMap::new();
    h.insert("x-amzn-errortype", "ModelErrorException".parse().unwrap());
    let body = br#"{"message":"Received error from model","originalStatusCode":500,"resourceName":"anthropic.claude"}"#;
    let e = adapter().error(424, &h, body);
    assert_eq!(e.status(), 502, "{}", e.message);
    assert!(e.retry.same_endpoint());
    assert!(e.message.contains("424"), "{}", e.message);
    assert!(e.message.contains("ModelErrorException"), "{}", e.message);
    // Without the header too.
    assert_eq!(adapter().error(424, &HeaderMap::new(), body).status(), 502);
}

/// Bedrock refuses a tool schema without a top-level object type: "The value at
/// toolConfig.tools.0.toolSpec.inputSchema.json.type must be one of the following:
/// object". OpenAI takes `parameters: {}` or only `properties`.
#[test]
fn tool_parameters_without_type_get_the_object_type_bedrock_requires() {
    for (params, expected) in [
        (json!({}), json!({"type": "object"})),
        (
            json!({"properties": {"a": {"type": "string"}}}),
            json!({"type": "object", "properties": {"a": {"type": "string"}}}),
        ),
        (json!(null), json!({"type": "object", "properties": {}})),
    ] {
        let req = testing::chat(
            &json!({"model": "m", "messages": [{"role": "user", "content": "hi"}],
            "tools": [{"type": "function", "function": {"name": "f", "parameters": params}}]}),
        );
        let (_, b) = build(&req);
        assert_eq!(
            b["toolConfig"]["tools"][0]["toolSpec"]["inputSchema"]["json"], expected,
            "{params}"
        );
    }
}

/// OpenAI: `tool_choice` "none" means "the model will not call any tool and instead
/// generates a message". Converse's `ToolChoice` has no such member, but a request
/// without `toolConfig` cannot call tools: the tools are withheld (it was refused).
#[test]
fn tool_choice_none_is_sent_as_no_tools() {
    let req = testing::chat(
        &json!({"model": "m", "messages": [{"role": "user", "content": "hi"}],
        "tools": [{"type": "function", "function": {"name": "f"}}], "tool_choice": "none"}),
    );
    let (_, b) = build(&req);
    assert!(b.get("toolConfig").is_none(), "{b}");
}

/// Bedrock (Claude) refuses a final assistant turn ending in whitespace: "messages:
/// final assistant content cannot end with trailing whitespace" (fixed the same way
/// in langchain-aws and the AWS .NET SDK's chat client). The prefill is trimmed;
/// earlier assistant turns are left as they are.
#[test]
fn a_trailing_assistant_prefill_loses_its_trailing_whitespace() {
    let req = testing::chat(&json!({"model": "m", "messages": [
        {"role": "user", "content": "a"},
        {"role": "assistant", "content": "kept as is \n"},
        {"role": "user", "content": "b"},
        {"role": "assistant", "content": "The answer is: "}
    ]}));
    let (_, b) = build(&req);
    assert_eq!(
        b["messages"][1]["content"],
        json!([{"text": "kept as is \n"}])
    );
    assert_eq!(
        b["messages"][3]["content"],
        json!([{"text": "The answer is:"}])
    );
    // A prefill of only whitespace is left out.
    let req = testing::chat(&json!({"model": "m", "messages": [
        {"role": "user", "content": "a"},
        {"role": "assistant", "content": "  \n"}
    ]}));
    let (_, b) = build(&req);
    assert_eq!(b["messages"].as_array().unwrap().len(), 1, "{b}");
}

/// Bedrock API reference, `InferenceConfiguration.temperature`: "Valid Range:
/// Minimum value of 0. Maximum value of 1." OpenAI takes up to 2; above 1 is refused
/// naming the field before any upstream call, as for Anthropic.
#[test]
fn a_temperature_above_one_is_refused_naming_it() {
    let e = adapter()
        .request(
            &target(),
            &chat(json!({"model": "m", "temperature": 1.5, "messages": [{"role": "user", "content": "x"}]})),
        )
        .unwrap_err();
    assert_eq!(e.status(), 400);
    assert_eq!(e.param.as_deref(), Some("temperature"));
    let (_, b) = build(&chat(
        json!({"model": "m", "temperature": 1.0, "messages": [{"role": "user", "content": "x"}]}),
    ));
    assert_eq!(b["inferenceConfig"]["temperature"], 1.0);
}

/// The bytes written for `bytes` fed in pieces ending at `cuts` (then the rest),
/// with the stream's random id replaced by `ID` and its clock's `created` by 0, and
/// whether it ended `Done`, with
/// an error, or needing more.
fn feed_cut(bytes: &[u8], cuts: &[usize]) -> (String, &'static str) {
    let mut t = adapter().stream(ctx(true));
    let mut out = BytesMut::new();
    let mut start = 0;
    let mut step = "more";
    for end in cuts.iter().copied().chain([bytes.len()]) {
        match t.raw(&bytes[start..end], &mut out).unwrap() {
            Ok(StreamStep::Continue) => {}
            Ok(StreamStep::Done) => {
                step = "done";
                break;
            }
            Err(_) => {
                step = "error";
                break;
            }
        }
        start = end;
    }
    let (id, created) = (&t.sent().id, t.sent().created);
    let text = String::from_utf8(out.to_vec()).unwrap();
    let text = text
        .replace(id.as_str(), "ID")
        .replace(&format!("\"created\":{created},"), "\"created\":0,");
    (text, step)
}

#[test]
fn a_stream_cut_anywhere_in_two_or_three_reads_writes_the_bytes_of_the_whole() {
    let bytes = encode_fixture(&fixture("bedrock/amazon-bedrock-text.chunks.txt"));
    let whole = feed_cut(&bytes, &[]);
    assert_eq!(whole.1, "done");
    assert!(whole.0.ends_with("data: [DONE]\n\n"));
    for at in 0..=bytes.len() {
        assert_eq!(feed_cut(&bytes, &[at]), whole, "cut at {at}");
    }
    for a in (0..bytes.len()).step_by(11) {
        for b in (a..=bytes.len()).step_by(31) {
            assert_eq!(feed_cut(&bytes, &[a, b]), whole, "cuts at {a}, {b}");
        }
    }
}

#[test]
fn frames_after_the_end_or_after_a_bad_frame_in_the_same_read_are_not_read() {
    let good = encode_fixture(&fixture("bedrock/amazon-bedrock-text.chunks.txt"));
    let whole = feed_cut(&good, &[]);
    // Anything after the end of the answer, in the same read, changes nothing.
    let extra = frame(
        "event",
        "contentBlockDelta",
        r#"{"contentBlockIndex":0,"delta":{"text":"late"}}"#,
    );
    let mut after = good.clone();
    after.extend_from_slice(&extra);
    after.extend_from_slice(b"\0\0\0\x05garbage");
    assert_eq!(feed_cut(&after, &[]), whole);
    // A damaged frame after good ones in one read: the good ones' chunks, then the
    // error; a split before the damage gives the same.
    let first = frame("event", "messageStart", r#"{"role":"assistant"}"#);
    let second = frame(
        "event",
        "contentBlockDelta",
        r#"{"contentBlockIndex":0,"delta":{"text":"Hi"}}"#,
    );
    let mut bad = frame(
        "event",
        "contentBlockDelta",
        r#"{"contentBlockIndex":0,"delta":{"text":"no"}}"#,
    );
    let n = bad.len();
    bad[n - 5] ^= 1;
    let stream = [first.clone(), second.clone(), bad, extra].concat();
    let (text, step) = feed_cut(&stream, &[]);
    assert_eq!(step, "error");
    assert!(text.contains(r#""content":"Hi""#), "{text}");
    assert!(!text.contains("no") && !text.contains("late"), "{text}");
    assert_eq!(feed_cut(&stream, &[first.len() + 3]), (text, step));
}

/// Found by the translation attack of 2026-12-07: a `stopReason` of
/// `malformed_model_output` or `malformed_tool_use` was a clean `stop` (or
/// `tool_calls`) finish; it is a failure of the answer (a 502 another endpoint may
/// take, or one error event once content was sent).
#[test]
fn a_malformed_stop_reason_is_a_bad_response_not_a_finish() {
    for reason in ["malformed_model_output", "malformed_tool_use"] {
        let body = format!(
            r#"{{"output":{{"message":{{"role":"assistant","content":[{{"text":"Hi"}}]}}}},"stopReason":"{reason}","usage":{{"inputTokens":3,"outputTokens":1,"totalTokens":4}}}}"#
        );
        let e = adapter().response(body.as_bytes(), "m").unwrap_err();
        assert_eq!(
            e.code,
            Some(crate::error::Code::UpstreamBadResponse),
            "{reason}"
        );
        assert!(e.message.contains(reason), "{}", e.message);
        let mut bytes = frame("event", "messageStart", r#"{"role":"assistant"}"#);
        bytes.extend(frame(
            "event",
            "contentBlockDelta",
            r#"{"contentBlockIndex":0,"delta":{"text":"Hi"}}"#,
        ));
        bytes.extend(frame(
            "event",
            "messageStop",
            &format!(r#"{{"stopReason":"{reason}"}}"#),
        ));
        let r = replay_bytes(&bytes, &[bytes.len()], false);
        assert!(r.result.is_err(), "{reason}");
        assert!(r.finish_reasons().is_empty(), "{reason}");
        assert!(!r.done);
    }
}

/// Found by the translation attack of 2026-12-07: a stream whose `metadata` event
/// never came reported `completion_tokens: 0` in its usage chunk although text was
/// sent, undercounting rate limits and budgets; it is estimated from the pieces sent.
#[test]
fn a_stream_without_metadata_estimates_its_output_tokens() {
    let mut bytes = frame("event", "messageStart", r#"{"role":"assistant"}"#);
    for piece in ["Hel", "lo", " there"] {
        bytes.extend(frame(
            "event",
            "contentBlockDelta",
            &format!(r#"{{"contentBlockIndex":0,"delta":{{"text":"{piece}"}}}}"#),
        ));
    }
    bytes.extend(frame(
        "event",
        "messageStop",
        r#"{"stopReason":"end_turn"}"#,
    ));
    let r = replay_bytes(&bytes, &[bytes.len()], true);
    r.result.as_ref().unwrap();
    assert!(r.done);
    let usage = &r.usage_chunks()[0]["usage"];
    assert_eq!(usage["prompt_tokens"], 7);
    assert_eq!(usage["completion_tokens"], 3, "{usage}");
}

/// Found by the translation attack of 2026-12-07: an empty stop sequence and an
/// empty tool description, which OpenAI accepts, were sent to Bedrock, whose
/// `stopSequences` and `description` are non-empty strings (boto3 refuses them).
#[test]
fn empty_stop_sequences_and_tool_descriptions_are_left_out() {
    let (_, body) = build(&chat(json!({
        "model": "m",
        "messages": [{"role": "user", "content": "u1"}],
        "stop": ["", "x"],
        "tools": [{"type": "function", "function": {"name": "get", "description": ""}}]
    })));
    assert_eq!(body["inferenceConfig"]["stopSequences"], json!(["x"]));
    assert!(
        body["toolConfig"]["tools"][0]["toolSpec"]
            .get("description")
            .is_none(),
        "{body}"
    );
    let (_, body) = build(&chat(json!({
        "model": "m",
        "messages": [{"role": "user", "content": "u1"}],
        "stop": ""
    })));
    assert!(
        body["inferenceConfig"].get("stopSequences").is_none(),
        "{body}"
    );
}

/// Outside testing (2026-12-07): `stop: ["END", "\n"]` went to a Claude model on
/// Bedrock whole, where the Anthropic adapter leaves `"\n"` out because Claude
/// refuses whitespace-only stop sequences; other Bedrock models still get it.
#[test]
fn whitespace_only_stop_sequences_are_not_sent_to_claude_on_bedrock() {
    let c = chat(json!({
        "model": "m",
        "messages": [{"role": "user", "content": "u1"}],
        "stop": ["END", "\n", " \t"]
    }));
    let (_, body) = build(&c);
    assert_eq!(body["inferenceConfig"]["stopSequences"], json!(["END"]));
    let nova = Target {
        model: "amazon.nova-lite-v1:0",
        ..target()
    };
    let (_, body) = testing::build(&adapter(), &nova, &c);
    assert_eq!(
        body["inferenceConfig"]["stopSequences"],
        json!(["END", "\n", " \t"])
    );
}

/// Found by the translation attack of 2026-12-07: a conversation that begins with
/// the assistant's greeting, or is a system prompt alone, was sent and refused by
/// Bedrock ("A conversation must start with a user message"); it is refused here,
/// naming `messages`, before any upstream call.
#[test]
fn a_conversation_not_starting_with_the_user_is_refused_naming_messages() {
    for messages in [
        json!([{"role": "system", "content": "S"}, {"role": "assistant", "content": "Hello, how can I help?"}, {"role": "user", "content": "hi"}]),
        json!([{"role": "system", "content": "S"}]),
    ] {
        let c = chat(json!({"model": "m", "messages": messages}));
        let e = adapter().request(&target(), &c).unwrap_err();
        assert_eq!(e.status(), 400, "{messages}");
        assert_eq!(e.param.as_deref(), Some("messages"), "{messages}");
    }
}
