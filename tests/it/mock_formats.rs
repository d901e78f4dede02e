//! `switchyard mock --format anthropic|gemini|bedrock` behind the gateway: the
//! adapters talk to the emulator in the provider's own wire format (Bedrock: SigV4
//! signed, answered in its binary event stream), and an OpenAI client sees a
//! tool-calling round trip with the usage the emulator reported (its
//! `GET /mock/requests` ledger).

use serde_json::{json, Value};

use crate::common::{get, mock, post, serve, Proc};

/// The gateway with provider `p` of `kind` in front of `upstream`, serving model `m`.
fn gateway(kind: &str, base: &str, upstream: &Proc) -> Proc {
    serve(&format!(
        "providers:\n  p: {{ kind: {kind}, base_url: 'http://{}{base}' }}\nmodels:\n  m: {{ endpoints: [ {{ provider: p, model: up-model }} ] }}\n",
        upstream.addr
    ))
}

fn anthropic() -> (Proc, Proc) {
    let up = mock(&["--format", "anthropic"]);
    let gw = gateway("anthropic", "/v1", &up);
    (up, gw)
}

fn gemini() -> (Proc, Proc) {
    let up = mock(&["--format", "gemini"]);
    let gw = gateway("gemini", "/v1beta", &up);
    (up, gw)
}

/// A shared credentials file with a `[mock]` profile, written once into cargo's
/// scratch directory for integration tests.
fn aws_credentials() -> &'static str {
    static PATH: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    PATH.get_or_init(|| {
        let path = format!("{}/mock-bedrock-credentials", env!("CARGO_TARGET_TMPDIR"));
        std::fs::write(
            &path,
            "[mock]\naws_access_key_id = AKIDMOCK\naws_secret_access_key = mocksecret\n",
        )
        .unwrap();
        path
    })
}

/// The gateway with a `bedrock` provider in front of `upstream` (signing with the
/// `[mock]` profile), serving model `m` from Bedrock model `model`.
fn bedrock_gateway(upstream: &Proc, model: &str) -> Proc {
    serve(&format!(
        "providers:\n  p: {{ kind: bedrock, base_url: 'http://{}', region: us-east-1, credentials_file: '{}', profile: mock }}\nmodels:\n  m: {{ endpoints: [ {{ provider: p, model: '{model}' }} ] }}\n",
        upstream.addr,
        aws_credentials()
    ))
}

fn bedrock() -> (Proc, Proc) {
    let up = mock(&["--format", "bedrock"]);
    let gw = bedrock_gateway(&up, "up-model");
    (up, gw)
}

const TOOLS: &str = r#"[{"type":"function","function":{"name":"get_weather","description":"Weather of a city","parameters":{"type":"object","properties":{"city":{"type":"string"},"days":{"type":"integer"}},"required":["city"]}}}]"#;

fn ask(stream: bool, messages: &Value) -> String {
    json!({
        "model": "m",
        "stream": stream,
        "stream_options": if stream { json!({"include_usage": true}) } else { Value::Null },
        "tools": serde_json::from_str::<Value>(TOOLS).unwrap(),
        "messages": messages,
    })
    .to_string()
}

/// The emulator's last ledger entry.
async fn last_report(up: &Proc) -> Value {
    let v = get(&up.url("/mock/requests")).await.json();
    v["requests"].as_array().unwrap().last().unwrap().clone()
}

/// What an OpenAI client reads from a reply: content, tool calls (id, name,
/// arguments), finish reason and usage, from JSON or from the stream's chunks.
struct Seen {
    content: String,
    calls: Vec<(String, String, String)>,
    finish: Vec<String>,
    usage: Value,
}

fn seen(stream: bool, r: &crate::common::Reply) -> Seen {
    assert_eq!(r.status, 200, "{}", r.text());
    if !stream {
        let v = r.json();
        let m = &v["choices"][0]["message"];
        let calls = m["tool_calls"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|t| {
                (
                    t["id"].as_str().unwrap().to_string(),
                    t["function"]["name"].as_str().unwrap().to_string(),
                    t["function"]["arguments"].as_str().unwrap().to_string(),
                )
            })
            .collect();
        return Seen {
            content: m["content"].as_str().unwrap_or_default().to_string(),
            calls,
            finish: vec![v["choices"][0]["finish_reason"]
                .as_str()
                .unwrap()
                .to_string()],
            usage: v["usage"].clone(),
        };
    }
    let events = r.events();
    assert_eq!(
        events.last().map(String::as_str),
        Some("[DONE]"),
        "{events:?}"
    );
    let mut s = Seen {
        content: String::new(),
        calls: Vec::new(),
        finish: Vec::new(),
        usage: Value::Null,
    };
    for e in &events[..events.len() - 1] {
        let c: Value = serde_json::from_str(e).unwrap();
        assert!(c.get("error").is_none(), "{c}");
        if !c["usage"].is_null() {
            s.usage = c["usage"].clone();
        }
        let Some(choice) = c["choices"].get(0) else {
            continue;
        };
        if let Some(t) = choice["delta"]["content"].as_str() {
            s.content.push_str(t);
        }
        for t in choice["delta"]["tool_calls"]
            .as_array()
            .into_iter()
            .flatten()
        {
            let i = t["index"].as_u64().unwrap() as usize;
            if i == s.calls.len() {
                s.calls.push(Default::default());
            }
            let call = &mut s.calls[i];
            if let Some(id) = t["id"].as_str() {
                call.0 = id.to_string();
            }
            if let Some(n) = t["function"]["name"].as_str() {
                call.1 = n.to_string();
            }
            call.2
                .push_str(t["function"]["arguments"].as_str().unwrap_or_default());
        }
        if let Some(f) = choice["finish_reason"].as_str() {
            s.finish.push(f.to_string());
        }
    }
    s
}

fn assert_usage_is_the_mocks(seen: &Value, report: &Value) {
    let u = &report["usage"];
    assert!(u["prompt_tokens"].as_u64().unwrap() > 0, "{report}");
    assert_eq!(
        seen["prompt_tokens"], u["prompt_tokens"],
        "{seen} vs {report}"
    );
    assert_eq!(
        seen["completion_tokens"], u["completion_tokens"],
        "{seen} vs {report}"
    );
    assert_eq!(
        seen["total_tokens"], u["total_tokens"],
        "{seen} vs {report}"
    );
}

/// The whole round trip: the model calls `get_weather`, the client answers with a
/// result, the model's text quotes it; usage as the emulator reported each time.
async fn round_trip(up: &Proc, gw: &Proc, stream: bool, format: &str) {
    let url = gw.url("/v1/chat/completions");
    let question = json!([{"role": "user", "content": "What is the weather in Paris?"}]);
    let first = seen(stream, &post(&url, &ask(stream, &question)).await);
    let report = last_report(up).await;
    assert_eq!(report["format"], format);
    assert_eq!(report["reply"], "tool_call", "{report}");
    assert_eq!(report["model"], "up-model");
    assert_eq!(first.finish, ["tool_calls"]);
    assert_eq!(first.calls.len(), 1);
    let (id, name, args) = &first.calls[0];
    assert!(!id.is_empty());
    assert_eq!(name, "get_weather");
    assert_eq!(
        serde_json::from_str::<Value>(args).unwrap(),
        json!({"city": "x"})
    );
    assert_usage_is_the_mocks(&first.usage, &report);

    let history = json!([
        {"role": "user", "content": "What is the weather in Paris?"},
        {"role": "assistant", "content": null, "tool_calls": [
            {"id": id, "type": "function", "function": {"name": name, "arguments": args}}]},
        {"role": "tool", "tool_call_id": id, "content": "sunny and 21 degrees"},
    ]);
    let second = seen(stream, &post(&url, &ask(stream, &history)).await);
    let report = last_report(up).await;
    assert_eq!(report["reply"], "tool_result_answer", "{report}");
    assert_eq!(second.finish, ["stop"]);
    assert!(second.calls.is_empty());
    assert_eq!(second.content, "The tool returned: sunny and 21 degrees");
    assert_usage_is_the_mocks(&second.usage, &report);
}

#[tokio::test]
async fn anthropic_mock_tool_round_trip_through_the_gateway() {
    let (up, gw) = anthropic();
    round_trip(&up, &gw, false, "anthropic").await;
}

#[tokio::test]
async fn anthropic_mock_tool_round_trip_streamed_through_the_gateway() {
    let (up, gw) = anthropic();
    round_trip(&up, &gw, true, "anthropic").await;
}

#[tokio::test]
async fn gemini_mock_tool_round_trip_through_the_gateway() {
    let (up, gw) = gemini();
    round_trip(&up, &gw, false, "gemini").await;
}

#[tokio::test]
async fn gemini_mock_tool_round_trip_streamed_through_the_gateway() {
    let (up, gw) = gemini();
    round_trip(&up, &gw, true, "gemini").await;
}

#[tokio::test]
async fn bedrock_mock_tool_round_trip_through_the_gateway() {
    let (up, gw) = bedrock();
    round_trip(&up, &gw, false, "bedrock").await;
}

#[tokio::test]
async fn bedrock_mock_tool_round_trip_streamed_through_the_gateway() {
    let (up, gw) = bedrock();
    round_trip(&up, &gw, true, "bedrock").await;
}

#[tokio::test]
async fn streamed_and_whole_text_answers_agree_in_each_format() {
    for (up, gw) in [anthropic(), gemini(), bedrock()] {
        let url = gw.url("/v1/chat/completions");
        let body = |stream: bool| {
            json!({"model": "m", "stream": stream, "max_tokens": 5,
                   "stream_options": if stream { json!({"include_usage": true}) } else { Value::Null },
                   "messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hello"}]})
            .to_string()
        };
        let whole = seen(false, &post(&url, &body(false)).await);
        let report = last_report(&up).await;
        let streamed = seen(true, &post(&url, &body(true)).await);
        assert_eq!(whole.content.split(' ').count(), 5, "{}", whole.content);
        assert_eq!(whole.content, streamed.content);
        assert_eq!(whole.finish, ["length"]);
        assert_eq!(streamed.finish, ["length"]);
        assert_usage_is_the_mocks(&whole.usage, &report);
        assert_usage_is_the_mocks(&streamed.usage, &last_report(&up).await);
    }
}

#[tokio::test]
async fn gemini_sees_the_replayed_call_with_a_signature() {
    let (up, gw) = gemini();
    let url = gw.url("/v1/chat/completions");
    let history = json!([
        {"role": "user", "content": "What is the weather in Paris?"},
        {"role": "assistant", "content": null, "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\":\"x\"}"}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
    ]);
    let r = post(&url, &ask(false, &history)).await;
    assert_eq!(r.status, 200, "{}", r.text());
    // A client that never saw a signature: the gateway must send one Gemini accepts
    // (the mock, like Gemini 3, refuses a current-turn call without one).
    let report = last_report(&up).await;
    assert!(
        ["skip", "echoed"].contains(&report["thought_signature"].as_str().unwrap()),
        "{report}"
    );
}

#[tokio::test]
async fn provider_shaped_errors_reach_the_client_as_openai_errors() {
    // Anthropic's 429 with retry-after and Gemini's RESOURCE_EXHAUSTED with RetryInfo.
    let a = mock(&[
        "--format",
        "anthropic",
        "--ratelimit-requests",
        "1",
        "--retry-after",
        "7",
    ]);
    let g = mock(&[
        "--format",
        "gemini",
        "--ratelimit-requests",
        "1",
        "--retry-after-ms",
        "7000",
        "--retry-after-format",
        "ms",
    ]);
    // Bedrock's ThrottlingException has no delay of its own; this one is configured.
    let b = mock(&[
        "--format",
        "bedrock",
        "--ratelimit-requests",
        "1",
        "--retry-after",
        "7",
    ]);
    for (up, gw) in [
        (&a, gateway("anthropic", "/v1", &a)),
        (&g, gateway("gemini", "/v1beta", &g)),
        (&b, bedrock_gateway(&b, "up-model")),
    ] {
        let url = gw.url("/v1/chat/completions");
        let body = r#"{"model":"m","messages":[{"role":"user","content":"hi"}]}"#;
        assert_eq!(post(&url, body).await.status, 200);
        let r = post(&url, body).await;
        assert_eq!(r.status, 429, "{}", r.text());
        let v = r.json();
        assert!(v["error"]["message"].is_string(), "{v}");
        let ra: u64 = r.headers["retry-after"].to_str().unwrap().parse().unwrap();
        assert_eq!(ra, 7, "the provider's delay, from its own header or body");
        assert_eq!(last_report(up).await["status"], 429);
    }
}

#[tokio::test]
async fn a_provider_error_event_mid_stream_never_looks_like_a_complete_answer() {
    for (format, base) in [("anthropic", "/v1"), ("gemini", "/v1beta"), ("bedrock", "")] {
        // Anthropic: message_start, block start, ping, two tokens; Gemini: five
        // tokens; Bedrock: messageStart and four tokens, then an exception frame.
        let up = mock(&["--format", format, "--error-after-chunks", "5"]);
        let gw = if format == "bedrock" {
            bedrock_gateway(&up, "up-model")
        } else {
            gateway(format, base, &up)
        };
        let r = post(
            &gw.url("/v1/chat/completions"),
            &crate::common::chat("m", true, ""),
        )
        .await;
        assert_eq!(r.status, 200, "{}", r.text());
        let events = r.events();
        assert!(
            events.iter().any(|e| e.contains("\"error\"")),
            "{format}: {events:?}"
        );
        assert!(
            !events
                .iter()
                .any(|e| e.contains("\"finish_reason\":\"stop\"")),
            "{format}: {events:?}"
        );
        assert!(
            !events.iter().any(|e| e == "[DONE]"),
            "{format}: {events:?}"
        );
    }
}

/// A Claude model id, so that the Bedrock adapter sends extended thinking.
const CLAUDE: &str = "us.anthropic.claude-sonnet-4-20250514-v1:0";

/// `reasoning_effort` reaches the Bedrock mock as `additionalModelRequestFields.thinking`;
/// the client sees `reasoning_content` and signed `thinking_blocks`, and replaying
/// them on the assistant message of the next turn gets the signature back to the
/// mock unchanged, streamed or not.
#[tokio::test]
async fn bedrock_thinking_reaches_the_client_and_its_signature_survives_the_round_trip() {
    let up = mock(&["--format", "bedrock"]);
    let gw = bedrock_gateway(&up, CLAUDE);
    let url = gw.url("/v1/chat/completions");
    let question = json!([{"role": "user", "content": "What is the weather in Paris?"}]);
    for stream in [false, true] {
        let mut body: Value = serde_json::from_str(&ask(stream, &question)).unwrap();
        body["reasoning_effort"] = json!("low");
        let r = post(&url, &body.to_string()).await;
        assert_eq!(r.status, 200, "{}", r.text());
        let report = last_report(&up).await;
        assert_eq!(report["model"], CLAUDE);
        assert_eq!(report["reasoning_tokens"], 8, "{report}");
        let (reasoning, blocks, call) = if stream {
            let mut text = String::new();
            let mut blocks = Vec::new();
            let mut call = json!({"arguments": ""});
            for e in r.events().iter().filter(|e| *e != "[DONE]") {
                let c: Value = serde_json::from_str(e).unwrap();
                let Some(d) = c["choices"].get(0).map(|c| &c["delta"]) else {
                    continue;
                };
                text.push_str(d["reasoning_content"].as_str().unwrap_or_default());
                blocks.extend(
                    d["thinking_blocks"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .cloned(),
                );
                if let Some(t) = d["tool_calls"].get(0) {
                    for k in ["id", "name"] {
                        if let Some(v) = t.get(k).or_else(|| t["function"].get(k)) {
                            call[k] = v.clone();
                        }
                    }
                    let args = call["arguments"].as_str().unwrap().to_string()
                        + t["function"]["arguments"].as_str().unwrap_or_default();
                    call["arguments"] = json!(args);
                }
            }
            (text, blocks, call)
        } else {
            let v = r.json();
            let m = &v["choices"][0]["message"];
            let t = &m["tool_calls"][0];
            let call = json!({"id": t["id"], "name": t["function"]["name"], "arguments": t["function"]["arguments"]});
            (
                m["reasoning_content"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
                m["thinking_blocks"].as_array().cloned().unwrap_or_default(),
                call,
            )
        };
        assert!(
            !reasoning.is_empty(),
            "stream {stream}: no reasoning_content"
        );
        assert_eq!(blocks.len(), 1, "{blocks:?}");
        assert_eq!(blocks[0]["type"], "thinking");
        assert_eq!(blocks[0]["thinking"], reasoning.as_str());
        assert!(!blocks[0]["signature"].as_str().unwrap().is_empty());

        let history = json!([
            question[0],
            {"role": "assistant", "content": null, "reasoning_content": reasoning, "thinking_blocks": blocks,
             "tool_calls": [{"id": call["id"], "type": "function",
                             "function": {"name": call["name"], "arguments": call["arguments"]}}]},
            {"role": "tool", "tool_call_id": call["id"], "content": "sunny"},
        ]);
        let mut body: Value = serde_json::from_str(&ask(stream, &history)).unwrap();
        body["reasoning_effort"] = json!("low");
        let r = post(&url, &body.to_string()).await;
        assert_eq!(r.status, 200, "{}", r.text());
        let report = last_report(&up).await;
        assert_eq!(report["reply"], "tool_result_answer", "{report}");
        assert_eq!(report["thought_signature"], "echoed", "{report}");
    }
}

/// A Bedrock event stream cut mid-answer (connection dropped after three frames)
/// reaches the client as an error, never as a complete answer.
#[tokio::test]
async fn a_cut_bedrock_event_stream_never_looks_complete() {
    // Paced, so the first frames reach the gateway before the cut.
    let up = mock(&[
        "--format",
        "bedrock",
        "--cut-after-chunks",
        "3",
        "--tokens-per-s",
        "100",
    ]);
    let gw = bedrock_gateway(&up, "up-model");
    let r = post(
        &gw.url("/v1/chat/completions"),
        &crate::common::chat("m", true, ""),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    let events = r.events();
    let last: Value = serde_json::from_str(events.last().unwrap()).unwrap();
    assert_eq!(last["error"]["code"], "upstream_stream_cut", "{last}");
    // Content got through before the cut (the frame just before it may be lost with
    // the connection).
    let text: String = events[..events.len() - 1]
        .iter()
        .filter_map(|e| serde_json::from_str::<Value>(e).ok())
        .filter_map(|c| {
            c["choices"][0]["delta"]["content"]
                .as_str()
                .map(String::from)
        })
        .collect();
    assert!(!text.is_empty(), "{events:?}");
    assert!(
        !events.iter().any(|e| e.contains("finish_reason\":\"")),
        "{events:?}"
    );
    assert!(!events.iter().any(|e| e == "[DONE]"), "{events:?}");
}

/// Found by the conformance review: `switchyard mock`'s `GET /v1/models` said
/// `"created": 0` (1970), where OpenAI's model object has a Unix time; the gateway's
/// own list was fixed, the emulator's was not.
#[tokio::test]
async fn the_mocks_model_list_said_created_0() {
    let before = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let up = mock(&[]);
    let list = get(&up.url("/v1/models")).await.json();
    let created = list["data"][0]["created"].as_u64().expect("a number");
    assert!(created >= before && created <= before + 60, "{list}");
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    let again = get(&up.url("/models")).await.json();
    assert_eq!(
        again["data"][0]["created"], created,
        "the mock's start time"
    );
}
