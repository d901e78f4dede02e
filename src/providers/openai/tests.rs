use super::*;
use crate::sse::SseParser;

fn fixture(name: &str) -> String {
    let path = format!(
        "{}/tests/fixtures/provider-wire/{name}",
        env!("CARGO_MANIFEST_DIR")
    );
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn chat(body: &str) -> ChatRequest {
    ChatRequest::parse(body.as_bytes()).unwrap()
}

#[test]
fn request_replaces_model_and_keeps_extra_fields() {
    let c = chat(
        r#"{"model":"smollm","messages":[{"role":"user","content":"hi"}],"seed":3,"logit_bias":{"1":2}}"#,
    );
    let t = Target {
        base_url: "http://h/v1",
        model: "smollm2",
        api_key: Some("k"),
    };
    let req = OpenAi::standard().request(&t, &c).unwrap();
    assert_eq!(req.uri(), "http://h/v1/chat/completions");
    assert_eq!(req.headers()["authorization"], "Bearer k");
    assert!(req.headers()["authorization"].is_sensitive());
}

#[test]
fn the_uri_and_key_built_once_follow_a_target_that_differs() {
    let c = chat(r#"{"model":"m","messages":[{"role":"user","content":"hi"}]}"#);
    let a = OpenAi::standard();
    let target = |base_url, api_key| Target {
        base_url,
        model: "m2",
        api_key,
    };
    for _ in 0..2 {
        let req = a.request(&target("http://h/v1", Some("k1")), &c).unwrap();
        assert_eq!(req.uri(), "http://h/v1/chat/completions");
        assert_eq!(req.headers()["authorization"], "Bearer k1");
        assert_eq!(req.headers()["content-type"], "application/json");
        assert_eq!(req.headers()["accept"], "application/json");
        assert_eq!(req.method(), http::Method::POST);
    }
    let req = a
        .request(&target("http://other:8/v2", Some("k2")), &c)
        .unwrap();
    assert_eq!(req.uri(), "http://other:8/v2/chat/completions");
    assert_eq!(req.headers()["authorization"], "Bearer k2");
    assert!(req.headers()["authorization"].is_sensitive());
    let req = a.request(&target("http://h/v1", None), &c).unwrap();
    assert!(!req.headers().contains_key("authorization"));
    // The key is never in the adapter's debug form.
    assert!(!format!("{a:?}").contains("k1"));
    // A key that cannot be a header value is refused, not sent.
    assert!(a.request(&target("http://h/v1", Some("k\n")), &c).is_err());
    assert!(a
        .request(&target("http://h/v1", Some("bad\u{7f}key")), &c)
        .is_err());
}

#[test]
fn azure_url_and_header() {
    let c = chat(r#"{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}]}"#);
    let t = Target {
        base_url: "https://r.openai.azure.com",
        model: "prod",
        api_key: Some("k"),
    };
    let req = OpenAi::azure("2024-10-21".into()).request(&t, &c).unwrap();
    assert_eq!(
        req.uri(),
        "https://r.openai.azure.com/openai/deployments/prod/chat/completions?api-version=2024-10-21"
    );
    assert_eq!(req.headers()["api-key"], "k");
}

#[test]
fn recorded_response_reports_logical_model() {
    let body = fixture("openai/openai-text.json");
    let out = OpenAi::standard()
        .response(body.as_bytes(), "gpt-4o")
        .unwrap();
    let v: Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(v["model"], "gpt-4o");
    assert_eq!(v["usage"]["completion_tokens"], 363);
    assert!(v["choices"][0]["message"]["content"]
        .as_str()
        .unwrap()
        .starts_with("**Holiday"));
}

#[test]
fn non_json_response_is_502() {
    let e = OpenAi::standard().response(b"<html>", "m").unwrap_err();
    assert_eq!(e.status(), 502);
}

fn relay(chunks: &str, include_usage: bool, add_done: bool) -> (String, Result<(), GatewayError>) {
    let mut t = OpenAi::standard().stream(StreamContext {
        logical_model: "gpt-4o".into(),
        include_usage,
        prompt_tokens_estimate: 11,
        track: true,
        resume: None,
    });
    let mut out = BytesMut::new();
    let mut parser = SseParser::new();
    for line in chunks.lines().filter(|l| !l.is_empty()) {
        parser.push(format!("data: {line}\n\n").as_bytes()).unwrap();
    }
    if add_done {
        parser.push(b"data: [DONE]\n\n").unwrap();
    }
    while let Some(ev) = parser.next_ref() {
        match t.event(ev, &mut out) {
            Ok(StreamStep::Done) => return (String::from_utf8(out.to_vec()).unwrap(), Ok(())),
            Ok(StreamStep::Continue) => {}
            Err(e) => return (String::from_utf8(out.to_vec()).unwrap(), Err(e)),
        }
    }
    let r = t.end(&mut out);
    (String::from_utf8(out.to_vec()).unwrap(), r)
}

#[test]
fn recorded_stream_is_relayed_with_logical_model() {
    let chunks = fixture("openai/openai-text.chunks.txt");
    let (out, r) = relay(&chunks, false, true);
    r.unwrap();
    let events = events_of(&out);
    assert_eq!(events.last().unwrap().data, "[DONE]");
    let mut text = String::new();
    for e in &events[..events.len() - 1] {
        let v: Value = serde_json::from_str(&e.data).unwrap();
        assert_eq!(v["model"], "gpt-4o");
        if let Some(t) = v["choices"][0]["delta"]["content"].as_str() {
            text.push_str(t);
        }
    }
    let full: Value = serde_json::from_str(&fixture("openai/openai-text.json")).unwrap();
    assert!(text.starts_with("**Holiday Name:**"), "{text}");
    assert!(full["choices"][0]["message"]["content"].is_string());
}

#[test]
fn stream_without_done_but_finished_is_completed() {
    let chunks = fixture("openai/openai-text.chunks.txt");
    let (out, r) = relay(&chunks, false, false);
    r.unwrap();
    assert!(out.ends_with("data: [DONE]\n\n"));
}

#[test]
fn cut_stream_is_an_error() {
    let chunks = fixture("openai/openai-text.chunks.txt");
    let first_three: String = chunks.lines().take(3).collect::<Vec<_>>().join("\n");
    let (_, r) = relay(&first_three, false, false);
    assert_eq!(r.unwrap_err().status(), 502);
}

#[test]
fn mid_stream_error_event_is_an_error() {
    let (_, r) = relay(r#"{"error":{"message":"overloaded"}}"#, false, false);
    assert!(r.unwrap_err().message.contains("overloaded"));
}

#[test]
fn usage_is_estimated_when_the_provider_sends_none() {
    let chunks: String = fixture("openai/openai-text.chunks.txt")
        .lines()
        .filter(|l| !l.contains("\"choices\":[]"))
        .collect::<Vec<_>>()
        .join("\n");
    let (out, r) = relay(&chunks, true, true);
    r.unwrap();
    let events = events_of(&out);
    let usage: Value = serde_json::from_str(&events[events.len() - 2].data).unwrap();
    assert_eq!(usage["choices"], serde_json::json!([]));
    assert_eq!(usage["usage"]["prompt_tokens"], 11);
    assert!(usage["usage"]["completion_tokens"].as_u64().unwrap() > 100);
}

#[test]
fn provider_usage_chunk_passes_through_when_asked() {
    let chunks = fixture("openai/openai-text.chunks.txt");
    let (out, _) = relay(&chunks, true, true);
    assert!(out.contains("\"prompt_tokens\":16"));
    let (out, _) = relay(&chunks, false, true);
    assert!(!out.contains("\"prompt_tokens\""));
}

/// The JSON body `OpenAi::standard()` sends upstream for `c`.
fn sent(c: &ChatRequest) -> Value {
    sent_by(&OpenAi::standard(), c)
}

fn sent_by(adapter: &OpenAi, c: &ChatRequest) -> Value {
    use http_body_util::BodyExt;
    let t = Target {
        base_url: "http://h/v1",
        model: "up",
        api_key: None,
    };
    let req = adapter.request(&t, c).unwrap();
    let bytes = futures_util::FutureExt::now_or_never(req.into_body().collect())
        .unwrap()
        .unwrap()
        .to_bytes();
    serde_json::from_slice(&bytes).unwrap()
}

#[test]
fn streams_always_ask_for_usage_and_other_bytes_stay_as_sent() {
    // No stream_options: spliced in, the rest byte for byte.
    let raw = r#"{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}],"seed":3}"#;
    let c = ChatRequest::parse_bytes(bytes::Bytes::from_static(raw.as_bytes())).unwrap();
    let v = sent(&c);
    assert_eq!(
        v["stream_options"],
        serde_json::json!({"include_usage": true})
    );
    assert_eq!(v["model"], "up");
    assert_eq!(v["seed"], 3);
    // Unless the provider is configured not to (`stream_usage: false`).
    let off = sent_by(&OpenAi::standard().with_stream_usage(false), &c);
    assert!(off.get("stream_options").is_none());
    // stream_options without include_usage: serialized, its other options kept.
    let raw = r#"{"model":"m","stream":true,"stream_options":{"include_usage":false,"x":1},"messages":[{"role":"user","content":"hi"}]}"#;
    let c = ChatRequest::parse_bytes(bytes::Bytes::from_static(raw.as_bytes())).unwrap();
    assert_eq!(
        sent(&c)["stream_options"],
        serde_json::json!({"include_usage": true, "x": 1})
    );
    // `stream_options: null` is replaced, not duplicated.
    let raw = r#"{"model":"m","stream":true,"stream_options":null,"messages":[{"role":"user","content":"hi"}]}"#;
    let c = ChatRequest::parse_bytes(bytes::Bytes::from_static(raw.as_bytes())).unwrap();
    let text = {
        use http_body_util::BodyExt;
        let t = Target {
            base_url: "http://h/v1",
            model: "up",
            api_key: None,
        };
        let req = OpenAi::standard().request(&t, &c).unwrap();
        futures_util::FutureExt::now_or_never(req.into_body().collect())
            .unwrap()
            .unwrap()
            .to_bytes()
    };
    let text = String::from_utf8(text.to_vec()).unwrap();
    assert_eq!(text.matches("stream_options").count(), 1, "{text}");
    assert!(
        text.contains(r#""stream_options":{"include_usage":true}"#),
        "{text}"
    );
    // Not a stream: nothing added.
    let c = ChatRequest::parse_bytes(bytes::Bytes::from_static(
        br#"{"model":"m","messages":[{"role":"user","content":"hi"}]}"#,
    ))
    .unwrap();
    assert!(sent(&c).get("stream_options").is_none());
}

#[test]
fn usage_asked_for_the_gateway_is_stripped_from_every_chunk_and_recorded() {
    let chunks = fixture("openai/openai-text.chunks.txt");
    let mut t = OpenAi::standard().stream(StreamContext {
        logical_model: "gpt-4o".into(),
        include_usage: false,
        prompt_tokens_estimate: 11,
        track: false,
        resume: None,
    });
    let mut out = BytesMut::new();
    let mut parser = SseParser::new();
    for line in chunks.lines().filter(|l| !l.is_empty()) {
        parser.push(format!("data: {line}\n\n").as_bytes()).unwrap();
    }
    parser.push(b"data: [DONE]\n\n").unwrap();
    while let Some(ev) = parser.next_ref() {
        if t.event(ev, &mut out).unwrap() == StreamStep::Done {
            break;
        }
    }
    let text = String::from_utf8(out.to_vec()).unwrap();
    assert!(!text.contains("\"usage\""), "no usage member left");
    assert!(text.contains("\"obfuscation\""), "other members untouched");
    let reported = t.sent().usage.expect("the provider's usage is kept");
    // For the attempt's trace span: the provider's model and finish reason.
    assert_eq!(t.sent().model.as_deref(), Some("gpt-4.1-nano-2025-04-14"));
    assert_eq!(t.sent().finish_reason.as_deref(), Some("stop"));
    assert_eq!(reported.prompt_tokens, 16);
    assert_eq!(reported.completion_tokens, 300);
    assert_eq!(
        reported.prompt_tokens_details.map(|d| d.cached_tokens),
        Some(0)
    );
}

#[test]
fn cache_control_markers_are_removed_for_openai_format_providers() {
    let raw = r#"{"model":"m","messages":[
        {"role":"system","content":[{"type":"text","text":"long","cache_control":{"type":"ephemeral","ttl":"1h"}}]},
        {"role":"user","content":"the words cache_control stay in text","cache_control":{"type":"ephemeral"}}],
        "tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object"}},"cache_control":{"type":"ephemeral"}}]}"#;
    let c = ChatRequest::parse_bytes(bytes::Bytes::from(raw.to_string())).unwrap();
    let v = sent(&c);
    assert_eq!(
        v["messages"][0]["content"][0],
        serde_json::json!({"type": "text", "text": "long"})
    );
    assert!(v["messages"][1].get("cache_control").is_none());
    assert_eq!(
        v["messages"][1]["content"],
        "the words cache_control stay in text"
    );
    assert!(v["tools"][0].get("cache_control").is_none());
    assert_eq!(v["tools"][0]["function"]["name"], "f");
    assert_eq!(v["model"], "up");
    // The typed path (raw cleared by a layer that changed the request) too.
    let mut c = c;
    c.raw = bytes::Bytes::new();
    let v2 = sent(&c);
    assert_eq!(v, v2);
}

/// The events a transcoder gets for raw SSE `text`, run to the end.
fn relay_raw(text: &str) -> (Vec<String>, Result<(), GatewayError>) {
    let mut t = OpenAi::standard().stream(StreamContext {
        logical_model: "m".into(),
        include_usage: false,
        prompt_tokens_estimate: 0,
        track: false,
        resume: None,
    });
    let mut out = BytesMut::new();
    let mut parser = SseParser::new();
    parser.push(text.as_bytes()).unwrap();
    let mut r = None;
    while let Some(ev) = parser.next_ref() {
        match t.event(ev, &mut out) {
            Ok(StreamStep::Continue) => {}
            Ok(StreamStep::Done) => {
                r = Some(Ok(()));
                break;
            }
            Err(e) => {
                r = Some(Err(e));
                break;
            }
        }
    }
    let r = r.unwrap_or_else(|| t.end(&mut out));
    let events = String::from_utf8(out.to_vec())
        .unwrap()
        .split("\n\n")
        .filter_map(|e| e.strip_prefix("data: ").map(str::to_string))
        .collect();
    (events, r)
}

const ROLE: &str = "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"created\":3,\"model\":\"x\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"Hi\"},\"finish_reason\":null}]}\n\n";

#[test]
fn done_without_a_finish_reason_gets_a_stop_finish_chunk() {
    let (events, r) = relay_raw(&format!("{ROLE}data: [DONE]\n\n"));
    r.unwrap();
    assert_eq!(events.len(), 3, "{events:?}");
    let finish: Value = serde_json::from_str(&events[1]).unwrap();
    assert_eq!(finish["choices"][0]["finish_reason"], "stop");
    assert_eq!(finish["id"], "c1");
    assert_eq!(finish["created"], 3);
    assert_eq!(finish["model"], "m");
    assert_eq!(events[2], "[DONE]");
}

#[test]
fn done_after_a_finish_reason_adds_no_second_one() {
    let finish = "data: {\"id\":\"c1\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"length\"}]}\n\n";
    let (events, r) = relay_raw(&format!("{ROLE}{finish}data: [DONE]\n\n"));
    r.unwrap();
    assert_eq!(events.len(), 3, "{events:?}");
    assert_eq!(events[2], "[DONE]");
}

#[test]
fn done_before_any_chunk_is_a_bad_response_not_an_empty_answer() {
    let (events, r) = relay_raw("data: [DONE]\n\n");
    let e = r.unwrap_err();
    assert_eq!(e.code, Some(crate::error::Code::UpstreamBadResponse));
    assert!(events.is_empty(), "{events:?}");
}

#[test]
fn an_unknown_named_event_is_skipped_not_relayed_as_a_chunk() {
    let (events, r) = relay_raw(&format!(
        "event: foo\ndata: {{\"type\":\"foo\"}}\n\n{ROLE}event: message\ndata: {{\"id\":\"c1\",\"choices\":[{{\"index\":0,\"delta\":{{}},\"finish_reason\":\"stop\"}}]}}\n\ndata: [DONE]\n\n"
    ));
    r.unwrap();
    assert_eq!(events.len(), 3, "{events:?}");
    assert!(!events.iter().any(|e| e.contains("foo")), "{events:?}");
}

#[test]
fn a_named_error_event_ends_the_stream_with_its_message() {
    let (_, r) = relay_raw(&format!(
        "{ROLE}event: error\ndata: {{\"error\":{{\"message\":\"model crashed\"}}}}\n\n"
    ));
    let e = r.unwrap_err();
    assert_eq!(e.code, Some(crate::error::Code::UpstreamError));
    assert!(e.message.contains("model crashed"), "{}", e.message);
    let (_, r) = relay_raw(&format!("{ROLE}event: error\ndata: not json\n\n"));
    assert!(r.unwrap_err().message.contains("not json"));
}

/// The client's events for the upstream SSE `text` fed in reads of `step` bytes.
fn relay_split(text: &[u8], step: usize) -> (Vec<String>, Result<(), GatewayError>) {
    let mut t = OpenAi::standard().stream(StreamContext {
        logical_model: "m\u{e9}".into(),
        include_usage: false,
        prompt_tokens_estimate: 0,
        track: true,
        resume: None,
    });
    let mut out = BytesMut::new();
    let mut parser = SseParser::new();
    let mut r = None;
    'reads: for read in text.chunks(step) {
        parser.push(read).unwrap();
        while let Some(ev) = parser.next_ref() {
            match t.event(ev, &mut out) {
                Ok(StreamStep::Continue) => {}
                Ok(StreamStep::Done) => {
                    r = Some(Ok(()));
                    break 'reads;
                }
                Err(e) => {
                    r = Some(Err(e));
                    break 'reads;
                }
            }
        }
    }
    let r = r.unwrap_or_else(|| t.end(&mut out));
    // Read back as a client would: with an SSE parser.
    let mut client = SseParser::new();
    client.push(&out).unwrap();
    let events = std::iter::from_fn(|| client.next_event())
        .map(|e| e.data)
        .collect();
    (events, r)
}

#[test]
fn a_chunk_sent_as_several_data_lines_reaches_the_client_as_one_json_event() {
    // `data:` lines of one event join with `\n` (WHATWG); the chunk's JSON then holds
    // newlines, which must not end the client's event early.
    let text = "data: {\"id\":\"c1\",\r\ndata:\"model\":\"up\",\"choices\":[{\"index\":0,\n: ping\ndata: \"delta\":{\"content\":\"h\u{e9}\\n\"},\"finish_reason\":null}]}\r\r\
                data: {\"id\":\"c1\",\"model\":\"up\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"x\"},\"finish_reason\":null},\r\n\
                data: {\"index\":1,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n\
                data:[DONE]\r\n\r\n";
    for step in 1..=text.len() {
        let (events, r) = relay_split(text.as_bytes(), step);
        r.unwrap_or_else(|e| panic!("reads of {step}: {e:?}"));
        // Choice 0 never finished: `[DONE]` closes it with a `stop` chunk of its own.
        assert_eq!(events.len(), 4, "reads of {step}: {events:?}");
        assert_eq!(events[3], "[DONE]", "reads of {step}");
        let closing: Value = serde_json::from_str(&events[2]).unwrap();
        assert_eq!(closing["choices"][0]["index"], 0, "reads of {step}");
        assert_eq!(closing["choices"][0]["finish_reason"], "stop");
        let mut content = String::new();
        for e in &events[..2] {
            let v: Value = serde_json::from_str(e)
                .unwrap_or_else(|err| panic!("reads of {step}: {err}: {e:?}"));
            assert_eq!(v["model"], "m\u{e9}", "{e}");
            content.push_str(v["choices"][0]["delta"]["content"].as_str().unwrap());
        }
        assert_eq!(content, "h\u{e9}\nx", "reads of {step}");
        let last: Value = serde_json::from_str(&events[1]).unwrap();
        assert_eq!(last["choices"][1]["finish_reason"], "stop");
    }
}

#[test]
fn an_event_without_a_line_count_is_searched_for_joined_lines() {
    // An event made by hand (no parser, `data_lines` 0) whose data holds a newline
    // still goes out as `data:` lines the client joins back, never as a raw newline.
    let mut t = tracking_stream();
    let mut out = BytesMut::new();
    let ev = crate::sse::SseEvent {
        event: None,
        data: "{\"id\":\"c1\",\n\"choices\":[{\"index\":0,\"delta\":{\"content\":\"x\"}}]}".into(),
        data_lines: 0,
    };
    t.event(ev.view(), &mut out).unwrap();
    let text = std::str::from_utf8(&out).unwrap();
    assert!(text.contains("\ndata: "), "{text}");
    let mut client = SseParser::new();
    client.push(&out).unwrap();
    let got: Value = serde_json::from_str(&client.next_event().unwrap().data).unwrap();
    assert_eq!(got["model"], "m");
    assert_eq!(got["choices"][0]["delta"]["content"], "x");
}

#[test]
fn cache_control_markers_written_with_escapes_are_removed_too() {
    // `"cache_contro\u006c"` is the key `cache_control` to every JSON reader.
    let raw = r#"{"model":"m","messages":[
        {"role":"system","content":[{"type":"text","text":"long","cache_contro\u006c":{"type":"ephemeral"}}]},
        {"role":"user","content":"hi","\u0063ache_control":{"type":"ephemeral"}}],
        "tools":[{"type":"function","function":{"name":"f"},"cache_co\u006etrol":{"type":"ephemeral"}}]}"#;
    let c = ChatRequest::parse_bytes(bytes::Bytes::from(raw.to_string())).unwrap();
    let v = sent(&c);
    assert_eq!(
        v["messages"][0]["content"][0],
        serde_json::json!({"type": "text", "text": "long"})
    );
    assert!(v["messages"][1].get("cache_control").is_none(), "{v}");
    assert!(v["tools"][0].get("cache_control").is_none(), "{v}");
    assert_eq!(v["model"], "up");
}

#[test]
fn an_upstream_model_named_twice_never_reaches_the_client() {
    // A server that writes `model` twice: whichever one a client's JSON reader keeps,
    // it must be the logical name.
    let body = r#"{"id":"x","model":"up-secret","object":"chat.completion","created":0,"mod\u0065l":"up-secret","choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}]}"#;
    let out = OpenAi::standard().response(body.as_bytes(), "m").unwrap();
    let text = String::from_utf8(out.to_vec()).unwrap();
    assert!(!text.contains("up-secret"), "{text}");
    let v: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["model"], "m");
    assert_eq!(v["choices"][0]["message"]["content"], "ok");
    let chunk = "data: {\"id\":\"c1\",\"model\":\"up-secret\",\"created\":3,\"model\":\"up-secret\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hi\"},\"finish_reason\":\"stop\"}],\"usage\":null}\n\ndata: [DONE]\n\n";
    let (events, r) = relay_raw(chunk);
    r.unwrap();
    assert_eq!(events.len(), 2, "{events:?}");
    assert!(!events[0].contains("up-secret"), "{events:?}");
    let v: Value = serde_json::from_str(&events[0]).unwrap();
    assert_eq!(v["model"], "m");
    assert_eq!(v["choices"][0]["delta"]["content"], "Hi");
    assert!(v.get("usage").is_none(), "{v}");
}

/// The answer as `response` made it before the strict walk: `serde_json`'s view,
/// then the splice's own search for `model`.
fn response_through_serde(body: &[u8], logical: &str) -> Result<Vec<u8>, String> {
    let view: ResponseView<'_> = serde_json::from_slice(body).map_err(|e| e.to_string())?;
    if !view.choices.is_some_and(|c| c.get().starts_with('[')) {
        return Err("no choices".into());
    }
    if view.models > 1 {
        return Err("parsed whole".into());
    }
    splice::set_string(body, "model", logical).ok_or_else(|| "not an object".into())
}

#[test]
fn whole_answers_are_walked_as_serde_json_read_them() {
    use rand::{Rng, SeedableRng};
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    let mut bodies: Vec<Vec<u8>> = [
        "openai/openai-text.json",
        "openai-compatible/deepseek-tool-call.json",
        "openai-compatible/groq-tool-call.json",
    ]
    .iter()
    .map(|f| fixture(f).into_bytes())
    .collect();
    for b in [
        r#"{"choices":[],"model":"a"}"#,
        r#"{"mo\u0064el":"a","choices":[{}]}"#,
        r#"{"model":"a","choices":null}"#,
        r#"{"choices":[],"choices":{}}"#,
        r#"{"choices":{},"choices":[]}"#,
        r#"{"choices":[]}"#,
        r#"{"\ud800":1,"choices":[]}"#,
        r#"{"choices":["\ud800"],"model":7}"#,
        r#"{"model":"a","model":"b","choices":[]}"#,
        r#"<html>bad gateway</html>"#,
        r#"{"choices":[{"message":{"content":"cut"#,
        "{\"choices\":[\"\u{e9}\"],\"model\":\"x\"}",
    ] {
        bodies.push(b.as_bytes().to_vec());
    }
    // Deeper than the walk's limit: refused by the walk, read by serde_json as before.
    let deep = format!(
        r#"{{"model":"m","choices":[{}1{}]}}"#,
        "[".repeat(200),
        "]".repeat(200)
    );
    assert!(ResponseWalk::of(deep.as_bytes()).is_none());
    bodies.push(deep.into_bytes());
    let mut mutated = Vec::new();
    for b in &bodies {
        for _ in 0..300 {
            let mut m = b.clone();
            let at = rng.random_range(0..m.len());
            match rng.random_range(0..3) {
                0 => m[at] = b"{}[]:,\"\\ 0e-x"[rng.random_range(0..13)],
                1 => {
                    m.remove(at);
                }
                _ => m.insert(at, m[at]),
            }
            mutated.push(m);
        }
    }
    bodies.extend(mutated);
    let adapter = OpenAi::standard();
    for body in &bodies {
        let old = response_through_serde(body, "logical");
        let new = adapter.response(body, "logical");
        let show = String::from_utf8_lossy(body);
        match (&old, &new) {
            (Ok(o), Ok(n)) => assert_eq!(&o[..], &n[..], "{show}"),
            (Err(why), Ok(n)) => {
                assert_eq!(why, "parsed whole", "{show}");
                let v: serde_json::Value = serde_json::from_slice(n).expect("valid JSON out");
                assert_eq!(v["model"], "logical", "{show}");
            }
            (Ok(_), Err(e)) => panic!("refused what serde_json read: {show}: {}", e.message),
            (Err(_), Err(_)) => {}
        }
        if let Some(walk) = ResponseWalk::of(body) {
            let view: ResponseView<'_> = serde_json::from_slice(body).expect("walked, so valid");
            let listed = view.choices.is_some_and(|c| c.get().starts_with('['));
            assert_eq!(
                (walk.choices_listed, walk.models),
                (listed, view.models),
                "{show}"
            );
        }
    }
}

/// The text a stream has sent is tracked decoded whether a piece holds escapes or
/// not (plain pieces are taken as they stand, others read as JSON strings), and a
/// raw control character in a piece is refused as before.
#[test]
fn tracked_text_is_decoded_with_and_without_escapes() {
    let mut t = tracking_stream();
    let mut out = BytesMut::new();
    let mut parser = SseParser::new();
    for content in [r#""plain ""#, r#""line\n\"q\" \u00e9""#, r#""\\ end""#] {
        parser
            .push(format!("data: {{\"id\":\"c\",\"model\":\"up\",\"choices\":[{{\"index\":0,\"delta\":{{\"content\":{content}}},\"finish_reason\":null}}]}}\n\n").as_bytes())
            .unwrap();
    }
    while let Some(ev) = parser.next_ref() {
        t.event(ev, &mut out).unwrap();
    }
    assert_eq!(t.sent().text, "plain line\n\"q\" \u{e9}\\ end");
    parser
        .push(b"data: {\"id\":\"c\",\"model\":\"up\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"a\tb\"},\"finish_reason\":null}]}\n\n")
        .unwrap();
    let ev = parser.next_ref().unwrap();
    let e = t.event(ev, &mut out).unwrap_err();
    assert!(
        e.message.contains("`delta.content` is not a string"),
        "{}",
        e.message
    );
}

/// The OpenAI relay of a stream for logical model `m`, no usage asked for, its text
/// tracked.
fn tracking_stream() -> Box<dyn crate::providers::StreamTranscoder> {
    OpenAi::standard().stream(StreamContext {
        logical_model: "m".into(),
        include_usage: false,
        prompt_tokens_estimate: 0,
        track: true,
        resume: None,
    })
}

proptest::proptest! {
    // About one text in eight is a usage object the quick reader reads itself.
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(2000))]
    #[test]
    fn the_quick_usage_reader_of_a_stream_reads_what_serde_reads(
        usage in crate::api::counts::usage_texts()
    ) {
        proptest::prop_assert_eq!(
            super::reported_usage(&usage),
            super::reported_usage_serde(&usage),
            "{}", usage
        );
    }
}

#[test]
fn scalar_values_read_as_serde_reads_them() {
    for raw in [
        r#""chatcmpl-1""#,
        r#""""#,
        r#""a\"b""#,
        r#""a\u0041""#,
        "\"tab\there\"",
        r#""é ü""#,
        r#"""#,
        r#""x"y""#,
        "0",
        "1700000000",
        "01",
        "-5",
        "1.5",
        "1e3",
        "18446744073709551615",
        "18446744073709551616",
        "null",
        "true",
        "[1]",
        "",
    ] {
        let serde: serde_json::Value = serde_json::from_str(raw).unwrap_or_default();
        assert_eq!(super::scalar_value(raw), serde, "{raw}");
    }
}

/// Found by attack (2026-12-05): the relay read only `delta.content` and
/// `delta.tool_calls`, so the reasoning of DeepSeek, xAI and vLLM
/// (`delta.reasoning_content`, or `delta.reasoning`) was held before the commit
/// point as if it were a role chunk (the client saw nothing of it until 64 KiB had
/// piled up or the text began), and a stream cut after its reasoning was continued
/// elsewhere, where a restart streamed the reasoning a second time. Reasoning is
/// content for the commit point and marks the stream as not continuable, as the
/// translating adapters' `reasoning_content` does.
#[test]
fn reasoning_deltas_commit_the_stream_and_stop_its_continuation() {
    let chunks = fixture("openai-compatible/deepseek-tool-call.chunks.txt");
    let mut parser = SseParser::new();
    let mut out = BytesMut::new();
    for name in ["reasoning_content", "reasoning"] {
        let mut t = tracking_stream();
        let first_two = chunks.lines().take(2).collect::<Vec<_>>();
        assert!(first_two[1].contains("\"reasoning_content\":\"The\""));
        for line in first_two {
            let line = line.replace("reasoning_content", name);
            parser.push(format!("data: {line}\n\n").as_bytes()).unwrap();
        }
        let ev = parser.next_ref().unwrap();
        t.event(ev, &mut out).unwrap();
        assert!(!t.produced_content(), "{name}: a role chunk is no content");
        let ev = parser.next_ref().unwrap();
        t.event(ev, &mut out).unwrap();
        assert!(t.produced_content(), "{name}: reasoning commits the stream");
        assert!(t.sent().reasoning, "{name}: reasoning was sent");
        assert!(!t.sent().tool_calls && t.sent().text.is_empty(), "{name}");
    }
    // An empty or null reasoning piece is none, whichever path reads the chunk.
    let mut t = tracking_stream();
    for piece in ["\"\"", "null", "\"\""] {
        parser
            .push(format!("data: {{\"id\":\"c\",\"model\":\"up\",\"choices\":[{{\"index\":0,\"delta\":{{\"reasoning_content\":{piece}}},\"finish_reason\":null}}]}}\n\n").as_bytes())
            .unwrap();
        let ev = parser.next_ref().unwrap();
        t.event(ev, &mut out).unwrap();
        assert!(!t.produced_content() && !t.sent().reasoning, "{piece}");
    }
}

/// Found by attack (2026-12-05): Azure OpenAI opens a stream with a chunk of
/// `prompt_filter_results` only, `"id": ""` and `"created": 0` (Azure OpenAI
/// reference, "Content filtering": annotations in streaming). The relay took the
/// stream's id and time from that first chunk, so every chunk it wrote itself (the
/// finish chunk after a bare `[DONE]`, the estimated usage chunk, and a
/// continuation's chunks) carried `"id": ""` and `"created": 0`, unlike the
/// answer's own chunks.
#[test]
fn an_azure_prompt_filter_chunk_does_not_name_the_stream() {
    let chunks = [
        r#"{"choices":[],"created":0,"id":"","model":"","object":"","prompt_filter_results":[{"prompt_index":0,"content_filter_results":{"hate":{"filtered":false,"severity":"safe"}}}]}"#,
        r#"{"choices":[{"content_filter_results":{},"delta":{"content":"","role":"assistant"},"finish_reason":null,"index":0}],"created":1733000000,"id":"chatcmpl-az1","model":"gpt-4o-2024-08-06","object":"chat.completion.chunk"}"#,
        r#"{"choices":[{"content_filter_results":{},"delta":{"content":"Hi"},"finish_reason":null,"index":0}],"created":1733000000,"id":"chatcmpl-az1","model":"gpt-4o-2024-08-06","object":"chat.completion.chunk"}"#,
    ]
    .join("\n");
    let (out, r) = relay(&chunks, true, true);
    r.unwrap();
    let events = events_of(&out);
    assert_eq!(events.last().unwrap().data, "[DONE]");
    let written: Vec<Value> = events[3..events.len() - 1]
        .iter()
        .map(|e| serde_json::from_str(&e.data).unwrap())
        .collect();
    assert_eq!(written.len(), 2, "a finish and a usage chunk: {out}");
    assert_eq!(written[0]["choices"][0]["finish_reason"], "stop");
    assert!(written[1]["usage"].is_object(), "{out}");
    for v in &written {
        assert_eq!(v["id"], "chatcmpl-az1", "{out}");
        assert_eq!(v["created"], 1733000000, "{out}");
    }
}

/// Found by attack (2026-12-05): Groq, DeepSeek and Mistral put the stream's usage
/// on the finish chunk (beside its choice) and send no usage chunk (the recorded
/// streams in `fixtures/provider-wire/openai-compatible`). Relayed as they came, a
/// client that asked for `stream_options.include_usage` got no chunk with
/// `choices: []` and the counts, and a finish chunk whose `usage` was not `null`,
/// against OpenAI's reference ("an additional chunk will be streamed before the
/// data: [DONE] message ... the choices field will always be an empty array. All
/// other chunks will also include a usage field, but with a null value"). The
/// counts now go out in a usage chunk of their own, every other chunk with
/// `"usage": null`; a client that did not ask gets no usage member at all.
#[test]
fn usage_on_the_finish_chunk_goes_out_in_a_usage_chunk_of_its_own() {
    for (name, prompt) in [
        ("openai-compatible/groq-tool-call.chunks.txt", 210),
        (
            "openai-compatible/mistral-incremental-tool-call.chunks.txt",
            171,
        ),
        ("openai-compatible/deepseek-tool-call.chunks.txt", -1),
    ] {
        let chunks = fixture(name);
        let (out, r) = relay(&chunks, true, true);
        r.unwrap();
        let events = events_of(&out);
        assert_eq!(events.last().unwrap().data, "[DONE]", "{name}");
        let chunks: Vec<Value> = events[..events.len() - 1]
            .iter()
            .map(|e| serde_json::from_str(&e.data).unwrap())
            .collect();
        let (last, rest) = chunks.split_last().unwrap();
        assert_eq!(last["choices"], serde_json::json!([]), "{name}: {out}");
        assert!(last["usage"]["completion_tokens"].is_u64(), "{name}: {out}");
        if prompt >= 0 {
            assert_eq!(last["usage"]["prompt_tokens"], prompt, "{name}");
        }
        assert_eq!(last["model"], "gpt-4o");
        for c in rest {
            assert!(c.get("usage").is_some_and(Value::is_null), "{name}: {c}");
            assert!(!c["choices"].as_array().unwrap().is_empty(), "{name}: {c}");
        }
        let finishes = rest
            .iter()
            .filter(|c| !c["choices"][0]["finish_reason"].is_null())
            .count();
        assert_eq!(finishes, 1, "{name}: {out}");
        let (out, r) = relay(&fixture(name), false, true);
        r.unwrap();
        for e in events_of(&out) {
            if e.data != "[DONE]" {
                let c: Value = serde_json::from_str(&e.data).unwrap();
                assert!(c.get("usage").is_none(), "{name}: {out}");
            }
        }
    }
}

/// The SSE events of a relayed stream `out`, in order.
fn events_of(out: &str) -> Vec<crate::sse::SseEvent> {
    let mut parser = SseParser::new();
    parser.push(out.as_bytes()).unwrap();
    std::iter::from_fn(|| parser.next_event()).collect()
}

/// A chunk of choice `index` of a stream with `n` > 1.
fn nth(index: u32, delta: &str, finish: &str) -> String {
    format!(
        r#"{{"id":"c","object":"chat.completion.chunk","created":1,"model":"up","choices":[{{"index":{index},"delta":{delta},"finish_reason":{finish}}}]}}"#
    )
}

/// The finish reasons of `out` per choice index, in order.
fn finishes(out: &str) -> Vec<(u64, String)> {
    events_of(out)
        .into_iter()
        .filter(|e| e.data != "[DONE]")
        .flat_map(|e| {
            let v: Value = serde_json::from_str(&e.data).unwrap();
            let cs = v["choices"].as_array().cloned().unwrap_or_default();
            cs.into_iter()
                .filter(|c| !c["finish_reason"].is_null())
                .map(|c| (c["index"].as_u64().unwrap(), c["finish_reason"].to_string()))
                .collect::<Vec<_>>()
        })
        .collect()
}

/// Found by attack (2026-12-05): with `n` > 1 each choice finishes in a chunk of its
/// own (OpenAI: one chunk stream, choices told by `index`), but the relay took the
/// first `finish_reason` for the end of the whole answer. A stream cut after choice
/// 0 finished, while choice 1 was still streaming, ended as a clean close would,
/// with `[DONE]`: choice 1 was silently truncated. A bare `[DONE]` got no finish
/// for the unfinished choice; a repeated finish chunk went out twice.
#[test]
fn with_several_choices_the_answer_is_whole_only_once_each_has_finished() {
    let start = [
        nth(0, r#"{"role":"assistant","content":""}"#, "null"),
        nth(1, r#"{"role":"assistant","content":""}"#, "null"),
        nth(0, r#"{"content":"a"}"#, "null"),
        nth(1, r#"{"content":"b"}"#, "null"),
        nth(0, "{}", r#""stop""#),
    ]
    .join("\n");
    let (_, r) = relay(&start, false, false);
    let e = r.unwrap_err();
    assert_eq!(
        e.code,
        Some(crate::error::Code::UpstreamStreamCut),
        "{}",
        e.message
    );
    let (out, r) = relay(&start, false, true);
    r.unwrap();
    assert_eq!(
        finishes(&out),
        [(0, "\"stop\"".to_string()), (1, "\"stop\"".to_string())],
        "{out}"
    );
    let whole = format!(
        "{start}\n{}\n{}\n{}",
        nth(1, "{}", r#""length""#),
        nth(1, "{}", r#""length""#),
        nth(0, "{}", r#""stop""#)
    );
    let (out, r) = relay(&whole, false, false);
    r.unwrap();
    assert_eq!(
        finishes(&out),
        [(0, "\"stop\"".to_string()), (1, "\"length\"".to_string())],
        "one finish per choice: {out}"
    );
    assert!(out.ends_with("data: [DONE]\n\n"), "{out}");
}

/// Found by attack (2026-12-05): Mistral's reasoning models (Magistral) stream
/// `delta.content` as a list of `thinking` and `text` parts. When the stream's text
/// was tracked for a failover (any plan with a next endpoint), the relay read every
/// piece as a JSON string and failed the stream at the first list ("`delta.content`
/// is not a string"), so such an endpoint never streamed with a fallback behind it.
/// A list is relayed as it came, commits the stream, and stops its continuation
/// (its text is not known).
#[test]
fn content_sent_as_a_list_of_parts_is_relayed_not_refused() {
    let mut t = tracking_stream();
    let mut out = BytesMut::new();
    let mut parser = SseParser::new();
    let thinking = r#"[{"type":"thinking","thinking":[{"type":"text","text":"Hmm."}]}]"#;
    let text = r#"[{"type":"text","text":"Hi"}]"#;
    for content in [r#""""#, thinking, text, r#"" there""#] {
        parser
            .push(format!("data: {{\"id\":\"c\",\"model\":\"magistral\",\"choices\":[{{\"index\":0,\"delta\":{{\"content\":{content}}},\"finish_reason\":null}}]}}\n\n").as_bytes())
            .unwrap();
    }
    let mut n = 0;
    while let Some(ev) = parser.next_ref() {
        t.event(ev, &mut out).unwrap();
        n += 1;
        assert_eq!(t.produced_content(), n > 1, "chunk {n}");
    }
    let out = String::from_utf8(out.to_vec()).unwrap();
    assert!(out.contains(thinking) && out.contains(text), "{out}");
    assert!(t.sent().untracked, "not continued: its text is not known");
    assert!(t.sent().text.is_empty());
}
