//! The stored form of a cached answer, and the answer rebuilt from it in the shape
//! the client asked for (issue 14; seed 001, "Streaming Cache").
//!
//! One [`Entry`] serves both shapes: it always holds the assistant message, finish
//! reason, usage and (when the answer had them) logprobs; a stored whole answer keeps
//! its body, a stored stream its chunks with the gap before each. Bodies and chunks
//! are kept as their JSON without `id` and `created` (the "rest" of the object after
//! its opening brace), so a hit writes a fresh `id` and `created` in front without
//! parsing them again.
//!
//! | stored \ asked | whole | stream |
//! |---|---|---|
//! | whole | the stored body | chunks synthesized: role, content, tool calls, finish |
//! | stream | one `chat.completion` from the message | the chunks replayed |
//!
//! Both shapes end the same way: a stream with the usage chunk only when the client
//! asked (`stream_options.include_usage`), then `[DONE]`.

use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::api::Usage;
use crate::config::Replay;
use crate::sse::SseParser;

/// Format version written into every entry; an entry of another version is a miss.
pub const VERSION: u32 = 1;

/// Largest entry stored, bytes of its encoding: bigger answers are not cached.
pub const MAX_ENTRY_BYTES: usize = 1 << 20;

/// A cached answer.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Entry {
    /// [`VERSION`].
    pub v: u32,
    /// The `model` the answer named (the logical model).
    pub model: String,
    /// The endpoint that produced it (registry id), for USD saved and the logs.
    pub endpoint: String,
    /// Its provider's name.
    pub provider: String,
    /// The upstream model id that produced it.
    pub upstream_model: String,
    /// When it was stored, Unix seconds.
    pub stored_at: u64,
    /// The assistant message (`role`, `content`, `tool_calls`, ...).
    pub message: Value,
    /// The finish reason (present in every stored answer).
    pub finish_reason: String,
    /// Token counts of the original answer: the provider's, else the gateway's
    /// estimate its client got (the gateway stores one with every answer it
    /// writes; `None` only in entries written before it did).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
    /// The choice's `logprobs` (`{"content": [...], "refusal": ...}`) when the answer
    /// had them (`logprobs: true`); a stream's are its chunks' lists joined. They go
    /// into the other shape's answer too.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub logprobs: Option<Value>,
    /// A stored whole answer: its body without `id` and `created` (see the module
    /// doc).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body: Option<String>,
    /// A stored stream: its chunks, in order, without the usage chunk.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chunks: Option<Vec<Chunk>>,
}

/// One recorded stream chunk.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Chunk {
    /// Milliseconds since the chunk before it reached the client (0 for the first).
    pub gap_ms: u32,
    /// The chunk JSON without `id`, `created` and `usage` (see the module doc).
    pub rest: String,
}

/// Who produced an answer (written into its entry).
#[derive(Debug, Clone)]
pub struct Origin {
    /// Registry endpoint id.
    pub endpoint: String,
    /// Provider name.
    pub provider: String,
    /// Upstream model id.
    pub upstream_model: String,
}

impl Entry {
    /// Encodes the entry; `None` past [`MAX_ENTRY_BYTES`].
    pub fn encode(&self) -> Option<Bytes> {
        let v = serde_json::to_vec(self).ok()?;
        (v.len() <= MAX_ENTRY_BYTES).then(|| Bytes::from(v))
    }

    /// Decodes a stored payload; `None` when it is not an entry of this version.
    pub fn decode(payload: &[u8]) -> Option<Entry> {
        serde_json::from_slice::<Entry>(payload)
            .ok()
            .filter(|e| e.v == VERSION)
    }

    /// The entry of a whole `chat.completion` body: `None` unless it has exactly one
    /// choice with a message and a finish reason that ends a complete answer
    /// ([`complete`]).
    pub fn from_whole(body: &[u8], origin: Origin, now: u64) -> Option<Entry> {
        let Value::Object(mut obj) = serde_json::from_slice::<Value>(body).ok()? else {
            return None;
        };
        let choices = obj.get("choices")?.as_array()?;
        let [choice] = choices.as_slice() else {
            return None;
        };
        let message = choice.get("message")?.clone();
        let logprobs = choice.get("logprobs").filter(|l| !l.is_null()).cloned();
        let finish_reason = choice
            .get("finish_reason")?
            .as_str()
            .filter(|f| complete(f))?
            .to_string();
        let usage = obj
            .get("usage")
            .and_then(|u| serde_json::from_value::<Usage>(u.clone()).ok());
        let model = obj.get("model")?.as_str()?.to_string();
        obj.remove("id");
        obj.remove("created");
        Some(Entry {
            v: VERSION,
            model,
            endpoint: origin.endpoint,
            provider: origin.provider,
            upstream_model: origin.upstream_model,
            stored_at: now,
            message,
            finish_reason,
            usage,
            logprobs,
            body: Some(rest_of(&obj)?),
            chunks: None,
        })
    }

    /// The entry of a stream the client received completely: `frames` are the bytes
    /// it was sent with the milliseconds since the frame before; its usage is
    /// `usage` (the provider's), else the usage chunk the client was sent (the
    /// gateway's estimate), else none. `None` when the
    /// stream has no finish reason, holds an error event, more than one choice, or
    /// a chunk that is not JSON, or its finish reason does not end a complete answer
    /// ([`complete`]).
    pub fn from_stream(
        frames: &[(u32, Bytes)],
        usage: Option<Usage>,
        origin: Origin,
        now: u64,
    ) -> Option<Entry> {
        let mut parser = SseParser::new();
        let mut chunks = Vec::new();
        let mut asm = Assembler::default();
        let mut model = None;
        let mut sent_usage = None;
        for (gap, bytes) in frames {
            parser.push(bytes).ok()?;
            let mut gap = *gap;
            while let Some(ev) = parser.next_event() {
                if ev.data == "[DONE]" {
                    continue;
                }
                let Value::Object(mut obj) = serde_json::from_str::<Value>(&ev.data).ok()? else {
                    return None;
                };
                if obj.contains_key("error") {
                    return None;
                }
                let choices = obj.get("choices").and_then(Value::as_array)?;
                if choices.is_empty() {
                    // The usage chunk: rebuilt from `usage` when asked for.
                    if let Some(u) = obj.get("usage").filter(|u| !u.is_null()) {
                        sent_usage = serde_json::from_value::<Usage>(u.clone()).ok();
                    }
                    continue;
                }
                for c in choices {
                    if c.get("index").and_then(Value::as_u64).unwrap_or(0) != 0 {
                        return None;
                    }
                    asm.add(c);
                }
                if model.is_none() {
                    model = obj.get("model").and_then(Value::as_str).map(str::to_string);
                }
                obj.remove("id");
                obj.remove("created");
                obj.remove("usage");
                chunks.push(Chunk {
                    gap_ms: gap,
                    rest: rest_of(&obj)?,
                });
                gap = 0;
            }
        }
        if parser.has_partial() {
            return None;
        }
        let finish_reason = asm.finish_reason.take().filter(|f| complete(f))?;
        if let Some(c) = chunks.first_mut() {
            c.gap_ms = 0;
        }
        Some(Entry {
            v: VERSION,
            model: model?,
            endpoint: origin.endpoint,
            provider: origin.provider,
            upstream_model: origin.upstream_model,
            stored_at: now,
            message: asm.message(),
            finish_reason,
            usage: usage.or(sent_usage),
            logprobs: asm.logprobs(),
            body: None,
            chunks: Some(chunks),
        })
    }

    /// The whole `chat.completion` body, with `id` and `created`.
    pub fn whole(&self, id: &str, created: u64) -> Bytes {
        let mut out = BytesMut::with_capacity(256);
        match &self.body {
            Some(rest) => head(&mut out, id, created, rest),
            None => {
                let mut obj = Map::new();
                obj.insert("object".into(), "chat.completion".into());
                obj.insert("model".into(), self.model.clone().into());
                obj.insert(
                    "choices".into(),
                    serde_json::json!([{
                        "index": 0,
                        "message": self.message,
                        "logprobs": self.logprobs,
                        "finish_reason": self.finish_reason,
                    }]),
                );
                if let Some(u) = &self.usage {
                    obj.insert(
                        "usage".into(),
                        serde_json::to_value(u).unwrap_or(Value::Null),
                    );
                }
                head(&mut out, id, created, &rest_of(&obj).unwrap_or_default());
            }
        }
        out.freeze()
    }

    /// The stream's events with the wait before each: the recorded chunks (timed by
    /// `replay`) or, for a stored whole answer, chunks synthesized from it at once;
    /// then the usage chunk when `include_usage`, and `[DONE]`.
    pub fn stream(
        &self,
        id: &str,
        created: u64,
        include_usage: bool,
        replay: Replay,
    ) -> Vec<(Duration, Bytes)> {
        let mut out = Vec::new();
        // With `include_usage`, every chunk but the usage chunk carries `usage: null`
        // (OpenAI's reference: "all other chunks will also include a usage field,
        // but with a null value"); stored chunks are kept without it.
        let event = |rest: &str, null_usage: bool| {
            let mut b = BytesMut::with_capacity(rest.len() + 80);
            b.put_slice(b"data: ");
            head(&mut b, id, created, rest);
            // The object's closing brace moved past one more member (`id` and
            // `created` are always before it).
            if null_usage && b.ends_with(b"}") {
                b.truncate(b.len() - 1);
                b.put_slice(b",\"usage\":null}");
            }
            b.put_slice(b"\n\n");
            b.freeze()
        };
        match &self.chunks {
            Some(chunks) => {
                for c in chunks {
                    out.push((
                        replay.gap(u64::from(c.gap_ms)),
                        event(&c.rest, include_usage),
                    ));
                }
            }
            None => {
                let deltas = self.synthesized_deltas();
                // The logprobs go with the content (else with the first chunk).
                let with_logprobs = if deltas.len() > 1 && deltas[1].get("content").is_some() {
                    1
                } else {
                    0
                };
                for (i, delta) in deltas.into_iter().enumerate() {
                    let logprobs = match &self.logprobs {
                        Some(l) if i == with_logprobs => l.clone(),
                        _ => Value::Null,
                    };
                    let chunk = self.chunk(vec![serde_json::json!({
                        "index": 0, "delta": delta, "logprobs": logprobs, "finish_reason": null,
                    })]);
                    out.push((Duration::ZERO, event(&chunk, include_usage)));
                }
                let fin = self.chunk(vec![serde_json::json!({
                    "index": 0, "delta": {}, "logprobs": null, "finish_reason": self.finish_reason,
                })]);
                out.push((Duration::ZERO, event(&fin, include_usage)));
            }
        }
        if include_usage {
            let mut obj = Map::new();
            obj.insert("object".into(), "chat.completion.chunk".into());
            obj.insert("model".into(), self.model.clone().into());
            obj.insert("choices".into(), Value::Array(Vec::new()));
            // Zeros only for an entry written before estimates were stored.
            let usage = self.usage.unwrap_or_default();
            obj.insert(
                "usage".into(),
                serde_json::to_value(usage).unwrap_or(Value::Null),
            );
            out.push((
                Duration::ZERO,
                event(&rest_of(&obj).unwrap_or_default(), false),
            ));
        }
        out.push((Duration::ZERO, Bytes::from_static(b"data: [DONE]\n\n")));
        out
    }

    /// A chunk's rest with `choices`.
    fn chunk(&self, choices: Vec<Value>) -> String {
        let mut obj = Map::new();
        obj.insert("object".into(), "chat.completion.chunk".into());
        obj.insert("model".into(), self.model.clone().into());
        obj.insert("choices".into(), Value::Array(choices));
        rest_of(&obj).unwrap_or_default()
    }

    /// The deltas of a stream carrying the stored message: the role (with every
    /// other field of the message whole: reasoning, refusal, `thinking_blocks`,
    /// a legacy `function_call`, `annotations`, `audio`, ...), the content, then
    /// every tool call whole.
    fn synthesized_deltas(&self) -> Vec<Value> {
        let m = &self.message;
        let mut first = Map::new();
        first.insert("role".into(), "assistant".into());
        // `""` before text, `null` before tool calls alone, as OpenAI's streams open.
        let text = m.get("content").is_some_and(Value::is_string);
        first.insert("content".into(), if text { "".into() } else { Value::Null });
        for (key, v) in m.as_object().into_iter().flatten() {
            if !matches!(key.as_str(), "role" | "content" | "tool_calls") && !v.is_null() {
                first.insert(key.clone(), v.clone());
            }
        }
        let mut deltas = vec![Value::Object(first)];
        if let Some(text) = m
            .get("content")
            .and_then(Value::as_str)
            .filter(|t| !t.is_empty())
        {
            deltas.push(serde_json::json!({ "content": text }));
        }
        if let Some(calls) = m.get("tool_calls").and_then(Value::as_array) {
            let indexed: Vec<Value> = calls
                .iter()
                .enumerate()
                .map(|(i, c)| {
                    let mut c = c.clone();
                    if let Value::Object(o) = &mut c {
                        o.insert("index".into(), Value::from(i));
                    }
                    c
                })
                .collect();
            if !indexed.is_empty() {
                deltas.push(serde_json::json!({ "tool_calls": indexed }));
            }
        }
        deltas
    }
}

/// Whether finish reason `f` ends an answer worth serving again: every reason but
/// `content_filter`, which OpenAI sends when "content was omitted due to a flag from
/// our content filters" — a withheld or cut answer, and a verdict of the provider's
/// filter at that moment, not the model's answer to the prompt.
fn complete(f: &str) -> bool {
    f != "content_filter"
}

/// Writes `{"id":ID,"created":N,` and `rest` (an object's JSON after its brace).
fn head(out: &mut BytesMut, id: &str, created: u64, rest: &str) {
    out.put_slice(b"{\"id\":");
    let _ = serde_json::to_writer(out.writer(), id);
    out.put_slice(b",\"created\":");
    out.put_slice(created.to_string().as_bytes());
    if rest != "}" {
        out.put_u8(b',');
    }
    out.put_slice(rest.as_bytes());
}

/// The JSON of `obj` after its opening brace (`"a":1}`), or `None` for a failure.
fn rest_of(obj: &Map<String, Value>) -> Option<String> {
    let s = serde_json::to_string(obj).ok()?;
    s.strip_prefix('{').map(str::to_string)
}

/// Builds the assistant message of a stream from its choice deltas (OpenAI's
/// chunk object: `delta.content`, `delta.tool_calls[i]` by `index`, ...).
#[derive(Default)]
struct Assembler {
    content: Option<String>,
    reasoning: Option<String>,
    refusal: Option<String>,
    /// Tool calls by their `index`: id, type, name, arguments.
    tool_calls: Vec<(u64, Map<String, Value>, String, String)>,
    finish_reason: Option<String>,
    /// The chunks' `logprobs.content` and `logprobs.refusal` lists, joined (`None`:
    /// no chunk had that list).
    logprobs: [Option<Vec<Value>>; 2],
    /// Every other delta field (`thinking_blocks`, a legacy `function_call`,
    /// `annotations`, `audio`, ...), merged as [`merge`] says.
    other: Map<String, Value>,
}

/// Adds delta value `v` to what the earlier deltas gave for the same field: strings
/// are appended (`function_call.arguments`, `audio.transcript`), lists extended
/// (`thinking_blocks`, `annotations`), objects merged member by member, anything
/// else replaced.
fn merge(slot: &mut Value, v: &Value) {
    match (slot, v) {
        (Value::String(a), Value::String(b)) => a.push_str(b),
        (Value::Array(a), Value::Array(b)) => a.extend(b.iter().cloned()),
        (Value::Object(a), Value::Object(b)) => {
            for (k, x) in b {
                match a.get_mut(k) {
                    Some(s) => merge(s, x),
                    None => {
                        a.insert(k.clone(), x.clone());
                    }
                }
            }
        }
        (slot, v) => *slot = v.clone(),
    }
}

impl Assembler {
    fn add(&mut self, choice: &Value) {
        if let Some(f) = choice.get("finish_reason").and_then(Value::as_str) {
            self.finish_reason = Some(f.to_string());
        }
        if let Some(l) = choice.get("logprobs").filter(|l| !l.is_null()) {
            for (slot, key) in self.logprobs.iter_mut().zip(["content", "refusal"]) {
                if let Some(items) = l.get(key).and_then(Value::as_array) {
                    slot.get_or_insert_with(Vec::new)
                        .extend(items.iter().cloned());
                }
            }
        }
        let Some(delta) = choice.get("delta") else {
            return;
        };
        let append = |slot: &mut Option<String>, v: Option<&Value>| {
            if let Some(s) = v.and_then(Value::as_str) {
                slot.get_or_insert_with(String::new).push_str(s);
            }
        };
        for (k, v) in delta.as_object().into_iter().flatten() {
            let known = matches!(
                k.as_str(),
                "role" | "content" | "reasoning_content" | "refusal" | "tool_calls"
            );
            if !known && !v.is_null() {
                match self.other.get_mut(k) {
                    Some(slot) => merge(slot, v),
                    None => {
                        self.other.insert(k.clone(), v.clone());
                    }
                }
            }
        }
        append(&mut self.content, delta.get("content"));
        append(&mut self.reasoning, delta.get("reasoning_content"));
        append(&mut self.refusal, delta.get("refusal"));
        for call in delta
            .get("tool_calls")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let index = call.get("index").and_then(Value::as_u64).unwrap_or(0);
            let at = match self.tool_calls.iter().position(|t| t.0 == index) {
                Some(i) => i,
                None => {
                    self.tool_calls
                        .push((index, Map::new(), String::new(), String::new()));
                    self.tool_calls.len() - 1
                }
            };
            let slot = &mut self.tool_calls[at];
            for key in ["id", "type"] {
                if let Some(v) = call.get(key).filter(|v| !v.is_null()) {
                    slot.1.insert(key.into(), v.clone());
                }
            }
            if let Some(f) = call.get("function") {
                if let Some(n) = f.get("name").and_then(Value::as_str) {
                    slot.2.push_str(n);
                }
                if let Some(a) = f.get("arguments").and_then(Value::as_str) {
                    slot.3.push_str(a);
                }
            }
        }
    }

    /// The answer's `logprobs` object, when a chunk had any.
    fn logprobs(&mut self) -> Option<Value> {
        if self.logprobs.iter().all(Option::is_none) {
            return None;
        }
        let [content, refusal] = std::mem::take(&mut self.logprobs);
        Some(serde_json::json!({ "content": content, "refusal": refusal }))
    }

    fn message(&mut self) -> Value {
        let mut m = Map::new();
        m.insert("role".into(), "assistant".into());
        let has_calls = !self.tool_calls.is_empty();
        let content = match self.content.take() {
            Some(c) if !(c.is_empty() && has_calls) => Value::String(c),
            Some(_) | None if has_calls => Value::Null,
            _ => Value::String(String::new()),
        };
        m.insert("content".into(), content);
        if let Some(r) = self.reasoning.take() {
            m.insert("reasoning_content".into(), r.into());
        }
        if let Some(r) = self.refusal.take() {
            m.insert("refusal".into(), r.into());
        }
        for (k, v) in std::mem::take(&mut self.other) {
            m.entry(k).or_insert(v);
        }
        if has_calls {
            self.tool_calls.sort_by_key(|t| t.0);
            let calls: Vec<Value> = self
                .tool_calls
                .drain(..)
                .map(|(_, mut head, name, args)| {
                    head.entry("type").or_insert_with(|| "function".into());
                    head.insert(
                        "function".into(),
                        serde_json::json!({ "name": name, "arguments": args }),
                    );
                    Value::Object(head)
                })
                .collect();
            m.insert("tool_calls".into(), Value::Array(calls));
        }
        Value::Object(m)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn origin() -> Origin {
        Origin {
            endpoint: "p/x".into(),
            provider: "p".into(),
            upstream_model: "x".into(),
        }
    }

    fn events(frames: &[(Duration, Bytes)]) -> Vec<Value> {
        frames
            .iter()
            .filter_map(|(_, b)| {
                let s = std::str::from_utf8(b).unwrap();
                let d = s.strip_prefix("data: ")?.trim_end();
                (d != "[DONE]").then(|| serde_json::from_str(d).unwrap())
            })
            .collect()
    }

    const WHOLE: &str = r#"{"id":"a","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"Hello"},"finish_reason":"stop"}],"usage":{"prompt_tokens":5,"completion_tokens":2,"total_tokens":7},"service_tier":"default"}"#;

    /// Found by the cache attack of 2026-12-08: a stored tool-call answer (`content:
    /// null`) replayed as a stream opened with a role delta of `"content": ""`, where
    /// OpenAI's stream of tool calls opens with `null`.
    #[test]
    fn a_replayed_tool_call_stream_opened_with_empty_content() {
        let whole = r#"{"id":"a","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{}"}}]},"finish_reason":"tool_calls"}]}"#;
        let e = Entry::from_whole(whole.as_bytes(), origin(), 10).unwrap();
        let ev = events(&e.stream("new", 99, false, Replay::Recorded));
        let first = &ev[0]["choices"][0]["delta"];
        assert_eq!(first["role"], "assistant");
        assert!(first["content"].is_null(), "{first}");
        assert_eq!(ev[1]["choices"][0]["delta"]["tool_calls"][0]["id"], "c1");
        // Text answers still open with "".
        let e = Entry::from_whole(WHOLE.as_bytes(), origin(), 10).unwrap();
        let ev = events(&e.stream("new", 99, false, Replay::Recorded));
        assert_eq!(ev[0]["choices"][0]["delta"]["content"], "");
    }

    #[test]
    fn a_whole_answer_comes_back_whole_with_a_fresh_id_and_as_a_stream() {
        let e = Entry::from_whole(WHOLE.as_bytes(), origin(), 10).unwrap();
        let e = Entry::decode(&e.encode().unwrap()).unwrap();
        let body: Value = serde_json::from_slice(&e.whole("new", 99)).unwrap();
        assert_eq!(body["id"], "new");
        assert_eq!(body["created"], 99);
        assert_eq!(body["service_tier"], "default");
        assert_eq!(body["choices"][0]["message"]["content"], "Hello");
        assert_eq!(body["usage"]["total_tokens"], 7);

        let s = e.stream("new", 99, true, Replay::Recorded);
        assert_eq!(&s.last().unwrap().1[..], b"data: [DONE]\n\n");
        let ev = events(&s);
        assert_eq!(ev[0]["choices"][0]["delta"]["role"], "assistant");
        assert_eq!(ev[1]["choices"][0]["delta"]["content"], "Hello");
        assert_eq!(ev[2]["choices"][0]["finish_reason"], "stop");
        assert_eq!(ev[3]["usage"]["prompt_tokens"], 5);
        assert!(ev.iter().all(|c| c["id"] == "new" && c["created"] == 99));
        // Found by attack (2026-12-05): a replayed stream's chunks lacked the
        // `usage: null` OpenAI puts on every chunk but the last with include_usage.
        for c in &ev[..3] {
            assert!(c.get("usage").is_some_and(Value::is_null), "{c}");
        }
        // Without include_usage there is no usage chunk.
        let ev = events(&e.stream("new", 99, false, Replay::Recorded));
        assert!(ev.iter().all(|c| c.get("usage").is_none()), "{ev:?}");
    }

    fn frame(chunks: &[&str]) -> Bytes {
        let mut s = String::new();
        for c in chunks {
            s.push_str("data: ");
            s.push_str(c);
            s.push_str("\n\n");
        }
        Bytes::from(s)
    }

    #[test]
    fn a_stream_is_replayed_with_its_gaps_and_assembled_whole() {
        let frames = vec![
            (
                0,
                frame(&[
                    r#"{"id":"s","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}"#,
                ]),
            ),
            (
                40,
                frame(&[
                    r#"{"id":"s","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"Hel"},"finish_reason":null}]}"#,
                    r#"{"id":"s","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"lo"},"finish_reason":null}]}"#,
                ]),
            ),
            (
                30,
                frame(&[
                    r#"{"id":"s","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"c1","type":"function","function":{"name":"f","arguments":"{\"a\""}}]},"finish_reason":null}]}"#,
                    r#"{"id":"s","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":":1}"}}]},"finish_reason":"tool_calls"}]}"#,
                    r#"{"id":"s","object":"chat.completion.chunk","created":1,"model":"m","choices":[],"usage":{"prompt_tokens":3,"completion_tokens":4,"total_tokens":7}}"#,
                    "[DONE]",
                ]),
            ),
        ];
        let usage = Some(Usage::new(3, 4));
        let e = Entry::from_stream(&frames, usage, origin(), 10).unwrap();
        let chunks = e.chunks.as_ref().unwrap();
        assert_eq!(chunks.len(), 5, "the usage chunk is not kept");
        let gaps: Vec<u32> = chunks.iter().map(|c| c.gap_ms).collect();
        assert_eq!(gaps, [0, 40, 0, 30, 0]);
        let s = e.stream("n", 5, false, Replay::Recorded);
        assert_eq!(s[1].0, Duration::from_millis(40));
        let s = e.stream("n", 5, false, Replay::Compressed);
        assert_eq!(s[1].0, Duration::from_millis(4));
        let ev = events(&s);
        assert_eq!(ev.len(), 5);
        assert_eq!(ev[1]["choices"][0]["delta"]["content"], "Hel");
        assert_eq!(ev[1]["id"], "n");
        assert!(ev.iter().all(|c| c.get("usage").is_none()), "{ev:?}");
        // Replayed with include_usage: `usage: null` on each recorded chunk, the
        // counts on the last.
        let ev = events(&e.stream("n", 5, true, Replay::Compressed));
        assert_eq!(ev.len(), 6);
        for c in &ev[..5] {
            assert!(c.get("usage").is_some_and(Value::is_null), "{c}");
            assert_eq!(c["id"], "n");
        }
        assert_eq!(ev[5]["usage"]["total_tokens"], 7);

        let body: Value = serde_json::from_slice(&e.whole("w", 7)).unwrap();
        let m = &body["choices"][0]["message"];
        assert_eq!(m["content"], "Hello");
        assert_eq!(m["tool_calls"][0]["id"], "c1");
        assert_eq!(m["tool_calls"][0]["function"]["arguments"], "{\"a\":1}");
        assert_eq!(body["choices"][0]["finish_reason"], "tool_calls");
        assert_eq!(body["usage"]["completion_tokens"], 4);
        assert_eq!(body["object"], "chat.completion");
    }

    #[test]
    fn incomplete_or_failed_streams_make_no_entry() {
        let no_finish = vec![(
            0,
            frame(&[
                r#"{"id":"s","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"Hel"},"finish_reason":null}]}"#,
            ]),
        )];
        assert!(Entry::from_stream(&no_finish, None, origin(), 0).is_none());
        let error = vec![(
            0,
            frame(&[
                r#"{"id":"s","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"x"},"finish_reason":"stop"}]}"#,
                r#"{"error":{"message":"boom"}}"#,
            ]),
        )];
        assert!(Entry::from_stream(&error, None, origin(), 0).is_none());
        assert!(Entry::from_whole(br#"{"model":"m","choices":[]}"#, origin(), 0).is_none());
        assert!(Entry::decode(br#"{"v":99}"#).is_none());
    }

    #[test]
    fn logprobs_survive_a_change_of_shape() {
        // Found by audit (2026-12-05): a request with `logprobs: true` served from the
        // other shape's entry got `logprobs: null` (whole from a stored stream, and
        // a stream synthesized from a stored whole answer).
        let lp = r#"{"content":[{"token":"Hel","logprob":-0.1,"bytes":[72,101,108],"top_logprobs":[]},{"token":"lo","logprob":-0.2,"bytes":[108,111],"top_logprobs":[]}],"refusal":null}"#;
        let whole = WHOLE.replace(
            r#""finish_reason":"stop""#,
            &format!(r#""logprobs":{lp},"finish_reason":"stop""#),
        );
        let e = Entry::from_whole(whole.as_bytes(), origin(), 0).unwrap();
        let e = Entry::decode(&e.encode().unwrap()).unwrap();
        let ev = events(&e.stream("n", 1, false, Replay::None));
        let want: Value = serde_json::from_str(lp).unwrap();
        assert_eq!(ev[1]["choices"][0]["delta"]["content"], "Hello");
        assert_eq!(ev[1]["choices"][0]["logprobs"], want);
        assert!(ev[0]["choices"][0]["logprobs"].is_null());

        let chunk = |content: &str, logprobs: &str, finish: &str| {
            format!(
                r#"{{"id":"s","object":"chat.completion.chunk","created":1,"model":"m","choices":[{{"index":0,"delta":{{"content":"{content}"}},"logprobs":{logprobs},"finish_reason":{finish}}}]}}"#
            )
        };
        let frames = vec![(
            0,
            frame(&[
                &chunk("", "null", "null"),
                &chunk(
                    "Hel",
                    r#"{"content":[{"token":"Hel","logprob":-0.1,"bytes":[72,101,108],"top_logprobs":[]}],"refusal":null}"#,
                    "null",
                ),
                &chunk(
                    "lo",
                    r#"{"content":[{"token":"lo","logprob":-0.2,"bytes":[108,111],"top_logprobs":[]}],"refusal":null}"#,
                    "null",
                ),
                &chunk("", "null", r#""stop""#),
                "[DONE]",
            ]),
        )];
        let e = Entry::from_stream(&frames, None, origin(), 0).unwrap();
        let e = Entry::decode(&e.encode().unwrap()).unwrap();
        let body: Value = serde_json::from_slice(&e.whole("w", 1)).unwrap();
        assert_eq!(body["choices"][0]["message"]["content"], "Hello");
        assert_eq!(body["choices"][0]["logprobs"], want);
        // Without logprobs the answer says `null`, as before.
        let plain = Entry::from_whole(WHOLE.as_bytes(), origin(), 0).unwrap();
        assert!(plain.logprobs.is_none());
        let ev = events(&plain.stream("n", 1, false, Replay::None));
        assert!(ev.iter().all(|c| c["choices"][0]["logprobs"].is_null()));
    }

    #[test]
    fn thinking_blocks_and_a_function_call_survive_a_change_of_shape() {
        // Found by audit (2026-12-05): fields of the message other than content,
        // reasoning, refusal and tool calls were dropped when an entry was served in
        // the other shape: a legacy `function_call` answer replayed as a stream was
        // empty, and Anthropic's signed `thinking_blocks` (which the client must send
        // back on its next turn) were lost either way.
        let whole = WHOLE
            .replace(
                r#""content":"Hello"}"#,
                r#""content":null,"function_call":{"name":"f","arguments":"{\"a\":1}"},"thinking_blocks":[{"type":"thinking","thinking":"hm","signature":"sig"}]}"#,
            )
            .replace(r#""finish_reason":"stop""#, r#""finish_reason":"function_call""#);
        let e = Entry::from_whole(whole.as_bytes(), origin(), 0).unwrap();
        let ev = events(&e.stream("n", 1, false, Replay::None));
        let delta = &ev[0]["choices"][0]["delta"];
        assert_eq!(delta["function_call"]["arguments"], "{\"a\":1}");
        assert_eq!(delta["thinking_blocks"][0]["signature"], "sig");

        let chunk = |delta: &str, finish: &str| {
            format!(
                r#"{{"id":"s","object":"chat.completion.chunk","created":1,"model":"m","choices":[{{"index":0,"delta":{delta},"finish_reason":{finish}}}]}}"#
            )
        };
        let frames = vec![(
            0,
            frame(&[
                &chunk(r#"{"role":"assistant","content":null}"#, "null"),
                &chunk(r#"{"reasoning_content":"hm"}"#, "null"),
                &chunk(
                    r#"{"thinking_blocks":[{"type":"thinking","thinking":"hm","signature":"sig"}]}"#,
                    "null",
                ),
                &chunk(r#"{"function_call":{"name":"f","arguments":""}}"#, "null"),
                &chunk(r#"{"function_call":{"arguments":"{\"a\""}}"#, "null"),
                &chunk(r#"{"function_call":{"arguments":":1}"}}"#, "null"),
                &chunk("{}", r#""function_call""#),
                "[DONE]",
            ]),
        )];
        let e = Entry::from_stream(&frames, None, origin(), 0).unwrap();
        let body: Value = serde_json::from_slice(&e.whole("w", 1)).unwrap();
        let m = &body["choices"][0]["message"];
        assert_eq!(m["function_call"]["name"], "f");
        assert_eq!(m["function_call"]["arguments"], "{\"a\":1}");
        assert_eq!(m["thinking_blocks"][0]["signature"], "sig");
        assert_eq!(m["thinking_blocks"].as_array().unwrap().len(), 1);
        assert_eq!(m["reasoning_content"], "hm");
    }

    #[test]
    fn a_content_filter_answer_makes_no_entry() {
        // Found by audit (2026-12-05): an answer the provider's content filter cut or
        // withheld (`finish_reason: content_filter`) was stored and served again.
        let filtered = WHOLE.replace(
            r#""finish_reason":"stop""#,
            r#""finish_reason":"content_filter""#,
        );
        assert!(Entry::from_whole(filtered.as_bytes(), origin(), 0).is_none());
        let cut = vec![(
            0,
            frame(&[
                r#"{"id":"s","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":"Hel"},"finish_reason":null}]}"#,
                r#"{"id":"s","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{},"finish_reason":"content_filter"}]}"#,
                "[DONE]",
            ]),
        )];
        assert!(Entry::from_stream(&cut, None, origin(), 0).is_none());
        // `length` is a complete answer to a request with that cap: stored.
        let capped = WHOLE.replace(r#""finish_reason":"stop""#, r#""finish_reason":"length""#);
        assert!(Entry::from_whole(capped.as_bytes(), origin(), 0).is_some());
    }
}
