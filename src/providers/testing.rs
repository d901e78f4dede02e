//! Helpers for the adapters' tests on recorded wire data
//! (`tests/fixtures/provider-wire/`).

use bytes::BytesMut;
use serde_json::Value;

use crate::error::GatewayError;
use crate::providers::{StreamStep, StreamTranscoder};
use crate::sse::SseParser;

/// A parsed chat request from JSON.
pub fn chat(body: &Value) -> crate::api::ChatRequest {
    crate::api::ChatRequest::parse(body.to_string().as_bytes()).unwrap()
}

/// The upstream request `adapter` builds for `c`, with its JSON body.
pub fn build(
    adapter: &dyn crate::providers::Adapter,
    target: &crate::providers::Target<'_>,
    c: &crate::api::ChatRequest,
) -> (http::Request<crate::body::Body>, Value) {
    use http_body_util::BodyExt;
    let req = adapter.request(target, c).unwrap();
    let (parts, body) = req.into_parts();
    let bytes = futures_util::FutureExt::now_or_never(body.collect())
        .unwrap()
        .unwrap()
        .to_bytes();
    (
        http::Request::from_parts(parts, crate::body::empty()),
        serde_json::from_slice(&bytes).unwrap(),
    )
}

/// A file of `tests/fixtures/provider-wire/`.
pub fn fixture(name: &str) -> String {
    let path = format!(
        "{}/tests/fixtures/provider-wire/{name}",
        env!("CARGO_MANIFEST_DIR")
    );
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// What a transcoder wrote for a replayed stream.
pub struct Replay {
    /// Every `data:` payload parsed as JSON, `[DONE]` excluded.
    pub chunks: Vec<Value>,
    /// Whether the output ended with `data: [DONE]`.
    pub done: bool,
    /// `Ok` when the transcoder finished (by a `Done` step or by `end()`).
    pub result: Result<(), GatewayError>,
    /// Whether `produced_content` was true at the end.
    pub content: bool,
    /// What the transcoder says it sent (`StreamTranscoder::sent`) at the end.
    pub sent: crate::providers::Sent,
}

impl Replay {
    /// Text deltas concatenated.
    pub fn text(&self) -> String {
        self.chunks
            .iter()
            .filter_map(|c| c["choices"][0]["delta"]["content"].as_str())
            .collect()
    }

    /// Refusal deltas (`delta.refusal`) concatenated.
    pub fn refusal(&self) -> String {
        self.chunks
            .iter()
            .filter_map(|c| c["choices"][0]["delta"]["refusal"].as_str())
            .collect()
    }

    /// Per tool call index: (id, name, concatenated arguments).
    pub fn tool_calls(&self) -> Vec<(String, String, String)> {
        let mut out: Vec<(String, String, String)> = Vec::new();
        for c in &self.chunks {
            for t in c["choices"][0]["delta"]["tool_calls"]
                .as_array()
                .into_iter()
                .flatten()
            {
                let i = t["index"].as_u64().unwrap() as usize;
                if i == out.len() {
                    out.push(Default::default());
                }
                let call = &mut out[i];
                if let Some(id) = t["id"].as_str() {
                    call.0 = id.to_string();
                }
                if let Some(n) = t["function"]["name"].as_str() {
                    call.1 = n.to_string();
                }
                call.2
                    .push_str(t["function"]["arguments"].as_str().unwrap_or(""));
            }
        }
        out
    }

    /// The finish reasons seen, in order.
    pub fn finish_reasons(&self) -> Vec<String> {
        self.chunks
            .iter()
            .filter_map(|c| {
                c["choices"][0]["finish_reason"]
                    .as_str()
                    .map(str::to_string)
            })
            .collect()
    }

    /// The usage chunks (`choices: []` with `usage`).
    pub fn usage_chunks(&self) -> Vec<&Value> {
        self.chunks
            .iter()
            .filter(|c| c.get("usage").is_some_and(|u| !u.is_null()))
            .collect()
    }
}

/// Feeds `lines` (one JSON payload per line, as in `*.chunks.txt`) through `t` as SSE,
/// with `event: <type>` lines when `named` (Anthropic's framing).
pub fn replay(mut t: Box<dyn StreamTranscoder>, lines: &str, named: bool) -> Replay {
    let mut parser = SseParser::new();
    for line in lines.lines().filter(|l| !l.trim().is_empty()) {
        if named {
            let v: Value = serde_json::from_str(line).unwrap();
            let kind = v["type"].as_str().unwrap_or("message");
            parser.push(format!("event: {kind}\n").as_bytes()).unwrap();
        }
        parser.push(format!("data: {line}\n\n").as_bytes()).unwrap();
    }
    let mut out = BytesMut::new();
    let mut result = None;
    while let Some(ev) = parser.next_ref() {
        match t.event(ev, &mut out) {
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
    }
    let result = result.unwrap_or_else(|| t.end(&mut out));
    let mut parser = SseParser::new();
    parser.push(&out).unwrap();
    let mut chunks = Vec::new();
    let mut done = false;
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

/// Asserts the OpenAI chunk shape on every chunk: object, id, model, and `role` on
/// the first one only.
pub fn assert_well_formed(r: &Replay, model: &str) {
    assert!(!r.chunks.is_empty());
    let id = r.chunks[0]["id"].as_str().unwrap();
    assert!(!id.is_empty());
    // OpenAI, `stream_options.include_usage`: "all other chunks will also include a
    // usage field, but with a null value"; without it, no chunk has the field.
    let asked = !r.usage_chunks().is_empty();
    for (i, c) in r.chunks.iter().enumerate() {
        assert_eq!(c.get("usage").is_some(), asked, "usage field: {c}");
        assert_eq!(c["object"], "chat.completion.chunk", "{c}");
        assert_eq!(c["model"], model, "{c}");
        assert_eq!(c["id"], id, "{c}");
        assert!(c["created"].is_u64(), "{c}");
        let choices = c["choices"].as_array().unwrap();
        if choices.is_empty() {
            assert!(c["usage"]["total_tokens"].is_u64(), "{c}");
            continue;
        }
        let role = &choices[0]["delta"]["role"];
        if i == 0 {
            assert_eq!(role, "assistant", "{c}");
        } else {
            assert!(role.is_null(), "{c}");
        }
    }
}
