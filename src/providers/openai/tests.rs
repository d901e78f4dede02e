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
    while let Some(ev) = parser.next_event() {
        match t.event(&ev, &mut out) {
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
    let mut parser = SseParser::new();
    parser.push(out.as_bytes()).unwrap();
    let events: Vec<_> = std::iter::from_fn(|| parser.next_event()).collect();
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
    let mut parser = SseParser::new();
    parser.push(out.as_bytes()).unwrap();
    let events: Vec<_> = std::iter::from_fn(|| parser.next_event()).collect();
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
