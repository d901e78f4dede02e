//! The Bedrock Converse format: answers and event stream frames checked against the
//! recorded Bedrock answers (`tests/fixtures/provider-wire/bedrock/`), tool calls,
//! thinking, faults, request checks and authentication.

use super::wire_tests::{body_bytes, fixture_json, fixture_lines, json_of, same_names_and_types};
use super::*;
use aws_smithy_types::event_stream::HeaderValue as EsValue;
use http::HeaderValue;
use serde_json::{json, Value};

fn provider(opts: MockOptions) -> MockProvider {
    MockProvider::new(MockOptions {
        error_shape: ErrorShape::Bedrock,
        ..opts
    })
}

fn turn(body: Value, stream: bool) -> Turn {
    bedrock::parse(
        "anthropic.claude-x-v1:0",
        stream,
        body.to_string().as_bytes(),
        true,
    )
    .map_err(|_| "refused")
    .unwrap()
}

fn hello() -> Value {
    json!({"system": [{"text": "be brief"}], "messages": [{"role": "user", "content": [{"text": "hello"}]}]})
}

fn tools(mut body: Value) -> Value {
    body["toolConfig"] = json!({"tools": [{"toolSpec": {
        "name": "get_weather",
        "inputSchema": {"json": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}},
    }}]});
    body
}

/// One decoded frame: a header's string value by name, and the JSON payload.
struct Frame {
    message: aws_smithy_types::event_stream::Message,
}

impl Frame {
    fn header(&self, name: &str) -> Option<String> {
        self.message
            .headers()
            .iter()
            .find(|h| h.name().as_str() == name)
            .and_then(|h| match h.value() {
                EsValue::String(s) => Some(s.as_str().to_string()),
                _ => None,
            })
    }

    fn kind(&self) -> String {
        self.header(":event-type")
            .or_else(|| self.header(":exception-type"))
            .unwrap_or_default()
    }

    fn json(&self) -> Value {
        serde_json::from_slice(self.message.payload()).unwrap()
    }
}

/// The frames of a ConverseStream answer, each decoded with its CRCs checked.
async fn frames(r: Response<Body>) -> Vec<Frame> {
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["content-type"], bedrock::EVENT_STREAM);
    let mut buf = body_bytes(r).await;
    let mut out = Vec::new();
    while !buf.is_empty() {
        let total = u32::from_be_bytes([buf[0], buf[1], buf[2], buf[3]]) as usize;
        let frame = buf.split_to(total);
        let message = aws_smithy_eventstream::frame::read_message_from(frame).unwrap();
        out.push(Frame { message });
    }
    out
}

#[tokio::test]
async fn bedrock_text_matches_the_recorded_answer() {
    let p = provider(MockOptions::default());
    let v = json_of(p.respond(Wire::Bedrock, &turn(hello(), false)).await).await;
    same_names_and_types(&v, &fixture_json("bedrock/amazon-bedrock-text.json"), "$");
    assert_eq!(v["stopReason"], "end_turn");
    assert_eq!(v["output"]["message"]["role"], "assistant");
    assert_eq!(
        v["output"]["message"]["content"][0]["text"],
        generate(0, "be brief\nhello\n", 16).concat()
    );
    assert_eq!(
        v["usage"],
        json!({"inputTokens": 12, "outputTokens": 16, "totalTokens": 28})
    );
    assert!(v["metrics"]["latencyMs"].is_u64());
}

#[tokio::test]
async fn bedrock_stream_frames_match_the_recorded_events() {
    let p = provider(MockOptions::default());
    let f = frames(p.respond(Wire::Bedrock, &turn(hello(), true)).await).await;
    // The recording holds one JSON line per event: {"<event type>": payload}.
    let real: Vec<(String, Value)> = fixture_lines("bedrock/amazon-bedrock-text.chunks.txt")
        .into_iter()
        .map(|l| {
            let (k, v) = l.as_object().unwrap().iter().next().unwrap();
            (k.clone(), v.clone())
        })
        .collect();
    for fr in &f {
        assert_eq!(fr.header(":message-type").as_deref(), Some("event"));
        assert_eq!(
            fr.header(":content-type").as_deref(),
            Some("application/json")
        );
        let mut data = fr.json();
        assert!(data["p"].is_string(), "padding like Bedrock's");
        data.as_object_mut().unwrap().remove("p");
        let kind = fr.kind();
        let (_, recorded) = real
            .iter()
            .find(|(k, _)| *k == kind)
            .unwrap_or_else(|| panic!("{kind} is not in the recording"));
        same_names_and_types(&data, recorded, &kind);
    }
    let kinds: Vec<String> = f.iter().map(Frame::kind).collect();
    assert_eq!(kinds.len(), 1 + 16 + 3);
    assert_eq!(kinds[0], "messageStart");
    assert!(kinds[1..17].iter().all(|k| k == "contentBlockDelta"));
    assert_eq!(kinds[17..], ["contentBlockStop", "messageStop", "metadata"]);
    let text: String = f[1..17]
        .iter()
        .map(|fr| fr.json()["delta"]["text"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(text, generate(0, "be brief\nhello\n", 16).concat());
    assert_eq!(f[18].json()["stopReason"], "end_turn");
    assert_eq!(f[19].json()["usage"]["outputTokens"], 16);
    assert_eq!(f[19].json()["usage"]["totalTokens"], 28);
}

#[tokio::test]
async fn bedrock_tool_call_targets_the_first_tool_in_json_and_stream() {
    let p = provider(MockOptions::default());
    let v = json_of(p.respond(Wire::Bedrock, &turn(tools(hello()), false)).await).await;
    // That recording has no `metrics` (the text one does, checked above).
    let mut no_metrics = v.clone();
    no_metrics.as_object_mut().unwrap().remove("metrics");
    same_names_and_types(
        &no_metrics,
        &fixture_json("bedrock/amazon-bedrock-tool-call.1.json"),
        "$",
    );
    assert_eq!(v["stopReason"], "tool_use");
    let call = &v["output"]["message"]["content"][0]["toolUse"];
    assert_eq!(call["name"], "get_weather");
    assert_eq!(call["input"], json!({"city": "x"}));
    assert!(call["toolUseId"].as_str().unwrap().starts_with("tooluse_"));

    let f = frames(p.respond(Wire::Bedrock, &turn(tools(hello()), true)).await).await;
    let kinds: Vec<String> = f.iter().map(Frame::kind).collect();
    assert_eq!(kinds[1], "contentBlockStart");
    let start = f[1].json();
    assert_eq!(start["start"]["toolUse"]["name"], "get_weather");
    let input: String = f
        .iter()
        .filter(|fr| fr.kind() == "contentBlockDelta")
        .map(|fr| {
            fr.json()["delta"]["toolUse"]["input"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    assert_eq!(
        serde_json::from_str::<Value>(&input).unwrap(),
        json!({"city": "x"})
    );
    let stop = f.iter().find(|fr| fr.kind() == "messageStop").unwrap();
    assert_eq!(stop.json()["stopReason"], "tool_use");
}

#[tokio::test]
async fn bedrock_tool_result_is_quoted_in_the_answer() {
    let body = tools(json!({"messages": [
        {"role": "user", "content": [{"text": "weather?"}]},
        {"role": "assistant", "content": [{"toolUse": {"toolUseId": "t1", "name": "get_weather", "input": {"city": "x"}}}]},
        {"role": "user", "content": [{"toolResult": {"toolUseId": "t1", "content": [{"text": "sunny"}, {"json": {"c": 21}}]}}]},
    ]}));
    let t = turn(body, false);
    assert_eq!(t.action, Action::AfterResult("sunny {\"c\":21}".into()));
    let v = json_of(
        provider(MockOptions::default())
            .respond(Wire::Bedrock, &t)
            .await,
    )
    .await;
    assert_eq!(
        v["output"]["message"]["content"][0]["text"],
        "The tool returned: sunny {\"c\":21}"
    );
    assert_eq!(v["stopReason"], "end_turn");
}

#[tokio::test]
async fn bedrock_max_tokens_cuts_the_answer() {
    let mut body = hello();
    body["inferenceConfig"] = json!({"maxTokens": 3});
    let v = json_of(
        provider(MockOptions::default())
            .respond(Wire::Bedrock, &turn(body, false))
            .await,
    )
    .await;
    assert_eq!(v["stopReason"], "max_tokens");
    assert_eq!(v["usage"]["outputTokens"], 3);
}

async fn refusal(body: &str) -> String {
    let r = *bedrock::parse("m", false, body.as_bytes(), true).unwrap_err();
    assert_eq!(r.status(), 400);
    assert!(r.headers()["x-amzn-errortype"]
        .to_str()
        .unwrap()
        .starts_with("ValidationException:"));
    json_of(r).await["message"].as_str().unwrap().to_string()
}

#[tokio::test]
async fn bedrock_requests_are_checked_like_converse() {
    for (body, want) in [
        ("{", "Malformed input request"),
        ("{}", "Value null at 'messages'"),
        (r#"{"messages":[]}"#, "must start with a user message"),
        (
            r#"{"messages":[{"role":"assistant","content":[{"text":"hi"}]}]}"#,
            "must start with a user message",
        ),
        (
            r#"{"messages":[{"role":"user","content":[{"text":"a"}]},{"role":"user","content":[{"text":"b"}]}]}"#,
            "must alternate between user and assistant",
        ),
        (
            r#"{"messages":[{"role":"user","content":[{"text":"  "}]}]}"#,
            "messages.0.content.0 is blank",
        ),
        (
            r#"{"messages":[{"role":"system","content":[{"text":"a"}]}]}"#,
            "enum value set: [user, assistant]",
        ),
        (
            r#"{"messages":[{"role":"user","content":[{"toolResult":{"toolUseId":"t","content":[{"text":"r"}]}}]}]}"#,
            "toolConfig field must be defined",
        ),
        (
            r#"{"messages":[{"role":"user","content":[{"text":"a","image":{}}]}]}"#,
            "exactly one member",
        ),
        (
            r#"{"messages":[{"role":"user","content":[{"text":"a"}]}],"inferenceConfig":{"maxTokens":2000},"additionalModelRequestFields":{"thinking":{"type":"enabled","budget_tokens":4000}}}"#,
            "`max_tokens` must be greater than `thinking.budget_tokens`",
        ),
        (
            r#"{"messages":[{"role":"user","content":[{"text":"a"}]}],"additionalModelRequestFields":{"thinking":{"type":"enabled","budget_tokens":100}}}"#,
            "greater than or equal to 1024",
        ),
    ] {
        let got = refusal(body).await;
        assert!(got.contains(want), "{body}: {got}");
    }
}

#[tokio::test]
async fn bedrock_errors_carry_the_aws_error_type_and_throttling_has_no_invented_delay() {
    let p = provider(MockOptions {
        ratelimit_requests: Some(1),
        ..MockOptions::default()
    });
    let t = turn(hello(), false);
    let ok = p.respond(Wire::Bedrock, &t).await;
    assert_eq!(ok.status(), 200);
    assert!(!ok
        .headers()
        .keys()
        .any(|k| k.as_str().contains("ratelimit")));
    let r = p.respond(Wire::Bedrock, &t).await;
    assert_eq!(r.status(), 429);
    assert!(r.headers()["x-amzn-errortype"]
        .to_str()
        .unwrap()
        .starts_with("ThrottlingException:"));
    assert!(r.headers().get("retry-after").is_none());
    let v = json_of(r).await;
    assert_eq!(
        v,
        json!({"message": "Too many requests, please wait before trying again."})
    );

    // A configured delay is still sent.
    let p = provider(MockOptions {
        ratelimit_requests: Some(1),
        retry_after_s: Some(3),
        ..MockOptions::default()
    });
    p.respond(Wire::Bedrock, &t).await;
    assert_eq!(
        p.respond(Wire::Bedrock, &t).await.headers()["retry-after"],
        "3"
    );

    let p = provider(MockOptions {
        fail_first: 1,
        fail_status: 503,
        ..MockOptions::default()
    });
    let r = p.respond(Wire::Bedrock, &t).await;
    assert_eq!(r.status(), 503);
    assert!(r.headers()["x-amzn-errortype"]
        .to_str()
        .unwrap()
        .starts_with("ServiceUnavailableException:"));

    let p = provider(MockOptions {
        context_window: Some(5),
        ..MockOptions::default()
    });
    let r = p.respond(Wire::Bedrock, &t).await;
    assert_eq!(r.status(), 400);
    let v = json_of(r).await;
    assert!(
        v["message"].as_str().unwrap().contains("Input is too long"),
        "{v}"
    );
}

#[tokio::test]
async fn bedrock_stream_error_is_an_exception_frame_and_no_message_stop() {
    let p = provider(MockOptions {
        error_after_chunks: Some(3),
        ..MockOptions::default()
    });
    let f = frames(p.respond(Wire::Bedrock, &turn(hello(), true)).await).await;
    assert_eq!(f.len(), 4);
    let last = &f[3];
    assert_eq!(last.header(":message-type").as_deref(), Some("exception"));
    assert_eq!(last.kind(), "modelStreamErrorException");
    assert!(last.json()["message"].is_string());
    assert!(!f.iter().any(|fr| fr.kind() == "messageStop"));
}

#[tokio::test]
async fn bedrock_thinking_comes_first_with_a_signature_and_counts_as_output() {
    let think = |mut b: Value| {
        b["inferenceConfig"] = json!({"maxTokens": 2048});
        b["additionalModelRequestFields"] =
            json!({"thinking": {"type": "enabled", "budget_tokens": 1024}});
        b
    };
    let p = provider(MockOptions::default());
    let v = json_of(
        p.respond(Wire::Bedrock, &turn(think(tools(hello())), false))
            .await,
    )
    .await;
    let content = v["output"]["message"]["content"].as_array().unwrap();
    let r = &content[0]["reasoningContent"]["reasoningText"];
    assert!(!r["text"].as_str().unwrap().is_empty());
    let sig = r["signature"].as_str().unwrap().to_string();
    assert!(content[1].get("toolUse").is_some());
    let call_tokens = v["usage"]["outputTokens"].as_u64().unwrap();
    assert!(call_tokens > THINKING_TOKENS as u64);

    let f = frames(p.respond(Wire::Bedrock, &turn(think(hello()), true)).await).await;
    let deltas: Vec<Value> = f
        .iter()
        .filter(|fr| fr.kind() == "contentBlockDelta")
        .map(|fr| fr.json())
        .collect();
    let reasoning: Vec<&Value> = deltas
        .iter()
        .take_while(|d| d["delta"].get("reasoningContent").is_some())
        .collect();
    assert_eq!(reasoning.len(), THINKING_TOKENS + 1);
    assert!(reasoning.iter().all(|d| d["contentBlockIndex"] == 0));
    assert!(reasoning[THINKING_TOKENS]["delta"]["reasoningContent"]["signature"].is_string());
    assert!(deltas[THINKING_TOKENS + 1]["delta"]["text"].is_string());
    assert_eq!(deltas[THINKING_TOKENS + 1]["contentBlockIndex"], 1);
    let meta = f.iter().find(|fr| fr.kind() == "metadata").unwrap().json();
    assert_eq!(meta["usage"]["outputTokens"], 16 + THINKING_TOKENS as u64);

    // The replayed conversation: the signed block must lead the tool-use turn.
    let replay = |first: Value| {
        think(tools(json!({"messages": [
            {"role": "user", "content": [{"text": "weather?"}]},
            {"role": "assistant", "content": [first, {"toolUse": {"toolUseId": "t1", "name": "get_weather", "input": {"city": "x"}}}]},
            {"role": "user", "content": [{"toolResult": {"toolUseId": "t1", "content": [{"text": "sunny"}]}}]},
        ]})))
    };
    let echoed =
        replay(json!({"reasoningContent": {"reasoningText": {"text": "t", "signature": sig}}}));
    assert_eq!(turn(echoed, false).signature, Some(Signature::Echoed));
    let foreign = replay(
        json!({"reasoningContent": {"reasoningText": {"text": "t", "signature": "b3RoZXI="}}}),
    );
    assert_eq!(turn(foreign, false).signature, Some(Signature::Foreign));
    let got = refusal(&replay(json!({"text": "calling"})).to_string()).await;
    assert!(got.contains("must start with a thinking block"), "{got}");
    let got =
        refusal(&replay(json!({"reasoningContent": {"reasoningText": {"text": "t"}}})).to_string())
            .await;
    assert!(got.contains("signature: Field required"), "{got}");
}

#[tokio::test]
async fn bedrock_auth_is_required_but_not_verified() {
    let with = |pairs: &[(&'static str, &'static str)]| {
        let mut h = http::HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, HeaderValue::from_static(v));
        }
        bedrock::check_auth(&h)
    };
    let r = *with(&[]).unwrap_err();
    assert_eq!(r.status(), 403);
    assert!(r.headers()["x-amzn-errortype"]
        .to_str()
        .unwrap()
        .starts_with("AccessDeniedException:"));
    assert_eq!(
        body_bytes(r).await,
        r#"{"Message":"Authorization header is missing"}"#
    );
    assert!(with(&[("authorization", "Bearer bedrock-api-key")]).is_ok());
    let sigv4 = "AWS4-HMAC-SHA256 Credential=AKID/20261201/us-east-1/bedrock/aws4_request, SignedHeaders=host;x-amz-date, Signature=00ff";
    assert!(with(&[("authorization", sigv4), ("x-amz-date", "20261201T000000Z")]).is_ok());
    let r = *with(&[("authorization", sigv4)]).unwrap_err();
    assert_eq!(r.status(), 403);
    let r = *with(&[
        (
            "authorization",
            "AWS4-HMAC-SHA256 Credential=AKID/x, SignedHeaders=host",
        ),
        ("x-amz-date", "20261201T000000Z"),
    ])
    .unwrap_err();
    assert!(r.headers()["x-amzn-errortype"]
        .to_str()
        .unwrap()
        .starts_with("IncompleteSignatureException:"));
    assert!(json_of(r).await["message"]
        .as_str()
        .unwrap()
        .contains("'Signature'"));
    assert!(with(&[("authorization", "Basic Zm9vOmJhcg==")]).is_err());
}

#[test]
fn bedrock_routes_decode_the_model_id() {
    assert_eq!(
        bedrock::route("/model/anthropic.claude-3-haiku-20240307-v1%3A0/converse"),
        Some(("anthropic.claude-3-haiku-20240307-v1:0".to_string(), false))
    );
    assert_eq!(
        bedrock::route("/model/m/converse-stream"),
        Some(("m".to_string(), true))
    );
    assert_eq!(bedrock::route("/model/m/invoke"), None);
    assert_eq!(bedrock::route("/model//converse"), None);
    assert_eq!(bedrock::route("/model/%zz/converse"), None);
}
