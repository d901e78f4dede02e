//! OpenAI Chat Completions, and everything that speaks it: api.openai.com, Azure
//! OpenAI (deployment URL, `api-key` header), vLLM, llama.cpp, Ollama, Groq, Together,
//! Mistral, DeepSeek and Switchyard's own mock.
//!
//! Source: OpenAI API reference, "Create chat completion", "The chat completion
//! object", "The chat completion chunk object"; Azure OpenAI REST reference,
//! "Chat completions".
//!
//! The body goes upstream as the client sent it, with `model` replaced by the
//! endpoint's model; answers come back with `model` replaced by the logical name.
//! Two more changes, each only when needed:
//! - a stream always asks for usage (`stream_options.include_usage: true`), so the
//!   gateway settles rate limits and spend with the provider's count, not an
//!   estimate; when the client did not ask, the usage chunk and the `usage: null`
//!   member of every chunk are removed on the way back;
//! - Anthropic's prompt-caching `cache_control` markers (on messages, content parts
//!   and tools) are removed: OpenAI-format providers reject unknown members there.

use bytes::{BufMut, Bytes, BytesMut};
use http::{HeaderValue, Method};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::common::Progress;
use super::{splice, Adapter, StreamContext, StreamStep, StreamTranscoder, Target};
use crate::api::{ChatRequest, Message, StreamOptions, Usage};
use crate::body::{self, Body};
use crate::error::{ErrorKind, GatewayError};
use crate::sse::SseEventRef;
use chunk::{ChoiceScan, ChunkScan, UsageEdit};
use view::{ResponseView, ResponseWalk};

/// The OpenAI-format adapter.
#[derive(Debug, Clone)]
pub struct OpenAi {
    /// `Some(api_version)` for Azure OpenAI's URL and header shape.
    azure_api_version: Option<String>,
    /// Ask for usage on every stream (`providers.<name>.stream_usage`).
    stream_usage: bool,
    /// The request URI and key header of the first target, built once: an adapter
    /// serves one provider, whose base URL and key stay the same (a target that
    /// differs gets its own, built per request).
    built: Built,
}

/// A value built from the first target's text, and that text ([`Built::get`]).
type Once<T> = std::sync::OnceLock<(String, T)>;

/// What an OpenAI-shaped request reuses from one to the next: the URI of
/// `{base}/chat/completions` and the `Authorization: Bearer` value. Built per request,
/// they took a string format, a URI parse and a header check each (about 2,000
/// instructions per request, `benches/load/callgrind.sh`).
#[derive(Clone, Default)]
struct Built {
    uri: Once<http::Uri>,
    bearer: Once<HeaderValue>,
}

/// Names what is built, never the key.
impl std::fmt::Debug for Built {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Built")
            .field("uri", &self.uri.get().map(|(_, u)| u))
            .field("bearer", &self.bearer.get().map(|_| "<redacted>"))
            .finish()
    }
}

impl Built {
    /// The value built from `text` by `make`: the kept one when `text` is the text
    /// it was first built from, else built now (and kept if it is the first).
    fn get<T: Clone, E>(
        cell: &Once<T>,
        text: &str,
        make: impl Fn(&str) -> Result<T, E>,
    ) -> Result<T, E> {
        if let Some((from, v)) = cell.get() {
            if from == text {
                return Ok(v.clone());
            }
            return make(text);
        }
        let v = make(text)?;
        // Another thread may have set it first: either way the value is `make(text)`'s.
        let _ = cell.set((text.to_owned(), v.clone()));
        Ok(v)
    }
}

impl OpenAi {
    /// Plain OpenAI shape: `POST {base}/chat/completions`, `Authorization: Bearer`.
    pub fn standard() -> Self {
        OpenAi {
            azure_api_version: None,
            stream_usage: true,
            built: Built::default(),
        }
    }

    /// The same adapter, asking for usage on every stream or not (default: asking).
    pub fn with_stream_usage(mut self, on: bool) -> Self {
        self.stream_usage = on;
        self
    }

    /// Azure shape: `POST {base}/openai/deployments/{deployment}/chat/completions
    /// ?api-version=V`, `api-key` header.
    pub fn azure(api_version: String) -> Self {
        OpenAi {
            azure_api_version: Some(api_version),
            stream_usage: true,
            built: Built::default(),
        }
    }
}

/// The request as sent upstream: the client's fields by reference, model replaced.
#[derive(Serialize)]
struct Outgoing<'a> {
    model: &'a str,
    messages: &'a [Message],
    #[serde(skip_serializing_if = "Option::is_none")]
    stream: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    stream_options: Option<&'a StreamOptions>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_tokens: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_completion_tokens: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    temperature: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tools: Option<&'a [Value]>,
    #[serde(flatten)]
    extra: &'a Map<String, Value>,
}

/// Removes `cache_control` from an object, and from the objects of its `content`
/// array (content parts) or `function` member (tools). Returns whether any was
/// removed.
fn strip_cache_control(obj: &mut Map<String, Value>) -> bool {
    let mut hit = obj.remove("cache_control").is_some();
    if let Some(Value::Array(parts)) = obj.get_mut("content") {
        for p in parts {
            if let Value::Object(p) = p {
                hit |= p.remove("cache_control").is_some();
            }
        }
    }
    if let Some(Value::Object(f)) = obj.get_mut("function") {
        hit |= f.remove("cache_control").is_some();
    }
    hit
}

impl OpenAi {
    /// Serializes the typed request with `model` replaced, asking for stream usage
    /// when `ask_usage`, and without `cache_control` markers when `strip` (used when
    /// the raw body cannot be spliced).
    fn serialize(
        &self,
        target: &Target<'_>,
        chat: &ChatRequest,
        ask_usage: bool,
        strip: bool,
    ) -> Result<Vec<u8>, GatewayError> {
        let stream_options = ask_usage.then(|| StreamOptions {
            include_usage: Some(true),
            extra: chat
                .stream_options
                .as_ref()
                .map(|o| o.extra.clone())
                .unwrap_or_default(),
        });
        let (messages, tools) = if strip {
            let mut messages = chat.messages.to_vec();
            let mut dropped = 0;
            for m in &mut messages {
                dropped += usize::from(strip_cache_control(&mut m.extra));
                if let Value::Array(parts) = &mut m.content {
                    for p in parts {
                        if let Value::Object(p) = p {
                            dropped += usize::from(p.remove("cache_control").is_some());
                        }
                    }
                }
            }
            let mut tools = chat.tools.clone();
            for t in tools.iter_mut().flatten() {
                if let Value::Object(t) = t {
                    dropped += usize::from(strip_cache_control(t));
                }
            }
            if dropped > 0 {
                tracing::debug!(
                    markers = dropped,
                    "cache_control markers removed: OpenAI-format providers do not take them"
                );
            }
            (Some(messages), Some(tools))
        } else {
            (None, None)
        };
        let out = Outgoing {
            model: target.model,
            messages: messages.as_deref().unwrap_or(&chat.messages),
            stream: chat.stream,
            stream_options: stream_options.as_ref().or(chat.stream_options.as_ref()),
            max_tokens: chat.max_tokens,
            max_completion_tokens: chat.max_completion_tokens,
            temperature: chat.temperature,
            tools: match &tools {
                Some(t) => t.as_deref(),
                None => chat.tools.as_deref(),
            },
            extra: &chat.extra,
        };
        let json = serde_json::to_vec(&out).map_err(|e| {
            GatewayError::new(
                ErrorKind::Internal,
                format!("could not encode request: {e}"),
            )
        })?;
        Ok(json)
    }
}

impl Adapter for OpenAi {
    fn request(
        &self,
        target: &Target<'_>,
        chat: &ChatRequest,
    ) -> Result<http::Request<Body>, GatewayError> {
        // Ask for usage on every stream the client did not ask it for.
        let ask_usage = self.stream_usage && chat.is_stream() && !chat.wants_usage_chunk();
        // Read from the parsed request, whose keys are decoded: a marker written with
        // escapes (`"cache_contro\u006c"`) is one too, which a search of the bytes
        // misses. A handful of map lookups per message, and no pass over the body.
        let strip = chat.messages.has_cache_control()
            || chat.tools.iter().flatten().any(|t| {
                t.get("cache_control").is_some()
                    || t.get("content")
                        .and_then(Value::as_array)
                        .is_some_and(|parts| parts.iter().any(|p| p.get("cache_control").is_some()))
                    || t.get("function")
                        .and_then(|f| f.get("cache_control"))
                        .is_some()
            });
        // The splice path: the client's bytes with `model` replaced, and the usage
        // request added when the client sent no `stream_options` at all.
        // The body is sent as parts of the client's bytes around the new text, not
        // copied: one copy of a large prompt in memory, not two.
        // Built once (a searcher's set-up is a few hundred instructions).
        static STREAM_OPTIONS: std::sync::LazyLock<memchr::memmem::Finder<'static>> =
            std::sync::LazyLock::new(|| memchr::memmem::Finder::new(b"stream_options\""));
        let spliced = if chat.raw.is_empty() || strip {
            None
        } else if !ask_usage {
            splice::set_string_parts(&chat.raw, "model", target.model, None)
        } else if chat.stream_options.is_none()
            // `"stream_options": null` parses as none but is in the bytes (the name
            // inside a message only costs the serializing path), perhaps written with
            // escapes (`"stream_option\u0073"`), which only a walk of the top level
            // tells apart from escapes in the text.
            && STREAM_OPTIONS.find(&chat.raw).is_none()
            && (memchr::memmem::find(&chat.raw, b"\\u").is_none()
                || matches!(
                    splice::find(&chat.raw, "stream_options"),
                    Some(splice::Field::Missing { .. })
                ))
        {
            splice::set_string_parts(
                &chat.raw,
                "model",
                target.model,
                Some(r#""stream_options":{"include_usage":true}"#),
            )
        } else {
            None
        };
        let body = match spliced {
            Some(parts) => body::parts(parts),
            None => body::full(self.serialize(target, chat, ask_usage, strip)?),
        };
        let bad_uri = |e: http::uri::InvalidUri| {
            GatewayError::new(
                ErrorKind::Internal,
                format!("could not build upstream request: {e}"),
            )
        };
        let uri = match &self.azure_api_version {
            None => Built::get(&self.built.uri, target.base_url, |base| {
                http::Uri::try_from(format!("{base}/chat/completions"))
            })
            .map_err(bad_uri)?,
            Some(v) => http::Uri::try_from(format!(
                "{}/openai/deployments/{}/chat/completions?api-version={}",
                target.base_url, target.model, v
            ))
            .map_err(bad_uri)?,
        };
        let mut req = http::Request::new(body);
        *req.method_mut() = Method::POST;
        *req.uri_mut() = uri;
        let headers = req.headers_mut();
        // Room for these three, the forwarded ones and `traceparent` at once.
        headers.reserve(8);
        headers.insert(
            http::header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        headers.insert(
            http::header::ACCEPT,
            HeaderValue::from_static(if chat.is_stream() {
                "text/event-stream"
            } else {
                "application/json"
            }),
        );
        if let Some(key) = target.api_key {
            let bad_key = |_| {
                GatewayError::new(
                    ErrorKind::Internal,
                    "the provider API key is not a valid header value",
                )
            };
            let (name, mut value) = match &self.azure_api_version {
                None => (
                    http::header::AUTHORIZATION,
                    Built::get(&self.built.bearer, key, |key| {
                        HeaderValue::from_str(&format!("Bearer {key}"))
                    })
                    .map_err(bad_key)?,
                ),
                Some(_) => (
                    http::HeaderName::from_static("api-key"),
                    HeaderValue::from_str(key).map_err(bad_key)?,
                ),
            };
            value.set_sensitive(true);
            headers.insert(name, value);
        }
        Ok(req)
    }

    fn response(&self, body: &[u8], logical_model: &str) -> Result<Bytes, GatewayError> {
        let bad = |why: String| {
            GatewayError::new(ErrorKind::BadUpstream, why)
                .with_code(crate::error::Code::UpstreamBadResponse)
        };
        // Validate the shape without building a tree, then splice the model name:
        // one strict pass that also finds `model` (`ResponseWalk`); a body it refuses
        // is read by `serde_json` for the error it names (and taken if serde_json
        // reads it after all: its rules are the ones the gateway always had).
        let (choices_listed, models, model_at) = match ResponseWalk::of(body) {
            Some(walk) => (walk.choices_listed, walk.models, walk.model),
            None => {
                let view: ResponseView<'_> = serde_json::from_slice(body).map_err(|e| {
                    bad(format!(
                        "upstream sent a response that is not a chat completion: {e}"
                    ))
                })?;
                let listed = view.choices.is_some_and(|c| c.get().starts_with('['));
                (listed, view.models, None)
            }
        };
        if !choices_listed {
            return Err(bad("upstream response has no `choices` list".into()));
        }
        if models > 1 {
            // Named twice: parsed whole, so that one `model` (the logical name) is left
            // whichever of the two a client's reader would have kept.
            let mut v: Map<String, Value> = serde_json::from_slice(body)
                .map_err(|e| bad(format!("upstream response is not a JSON object: {e}")))?;
            v.insert("model".into(), Value::String(logical_model.into()));
            return serde_json::to_vec(&v)
                .map(Bytes::from)
                .map_err(|e| bad(format!("could not encode the response: {e}")));
        }
        if let (1, Some(at)) = (models, model_at) {
            return Ok(Bytes::from(splice::set_string_at(body, at, logical_model)));
        }
        splice::set_string(body, "model", logical_model)
            .map(Bytes::from)
            .ok_or_else(|| bad("upstream response is not a JSON object".into()))
    }

    fn stream(&self, ctx: StreamContext) -> Box<dyn StreamTranscoder> {
        let progress = Progress::new(&ctx);
        let (id, created) = if progress.resuming() {
            (
                Value::String(progress.sent.id.clone()),
                Value::from(progress.sent.created),
            )
        } else {
            (Value::Null, Value::Null)
        };
        Box::new(OpenAiStream {
            model_json: serde_json::to_string(&ctx.logical_model).unwrap_or_default(),
            scan: None,
            model: ctx.logical_model,
            include_usage: ctx.include_usage,
            prompt_tokens: ctx.prompt_tokens_estimate,
            finished: false,
            choices: Vec::new(),
            chunks: false,
            usage_sent: false,
            usage_held: None,
            deltas: 0,
            id,
            created,
            progress,
        })
    }
}

/// Most choices tracked one by one (OpenAI's `n` is at most 128); a higher `index`
/// is counted as this one.
const MAX_CHOICES: usize = 128;

/// Relays OpenAI chunks, rewriting `model` and dropping a usage chunk the client did
/// not ask for.
///
/// A stream that continues another ([`super::Resume`]) is the slow path: each chunk
/// is parsed whole and rewritten with the first stream's `id` and `created`, without
/// `role`, and with the start the client already has dropped from its text.
///
/// Some OpenAI-compatible servers (llama-cpp-python among them) ignore
/// `stream_options.include_usage`. When the client asked for usage and the stream ends
/// without it, the transcoder writes the usage chunk itself, estimating: input tokens
/// by [`ChatRequest::estimated_input_tokens`], output tokens as one per content delta
/// (what token-by-token servers send).
struct OpenAiStream {
    model: String,
    include_usage: bool,
    prompt_tokens: u64,
    /// Every choice seen has had its `finish_reason`.
    finished: bool,
    /// Per choice `index` seen (indices past [`MAX_CHOICES`] count as the last):
    /// whether its `finish_reason` has come. With `n` > 1 each choice finishes in
    /// a chunk of its own, and the answer is whole only once all have.
    choices: Vec<bool>,
    /// A chunk has been seen (an answer that is only `[DONE]` is not one).
    chunks: bool,
    /// The usage chunk (`choices: []`, the counts) has been written for the client.
    usage_sent: bool,
    /// The counts the upstream reported on a chunk with choices (Groq, DeepSeek and
    /// Mistral put them on the finish chunk, and send no usage chunk): they go out
    /// in the usage chunk written before `[DONE]`.
    usage_held: Option<Value>,
    /// Chunks that carried content (text or tool-call pieces).
    deltas: u64,
    id: Value,
    created: Value,
    progress: Progress,
    /// `model` as the JSON string literal written into every chunk.
    model_json: String,
    /// The last chunk's scan, kept so its buffers are reused (made by the first
    /// chunk); boxed, so that taking it out for a chunk moves a pointer, not its few
    /// hundred bytes.
    scan: Option<Box<ChunkScan>>,
}

impl OpenAiStream {
    /// Handles one chunk (the data of an event that is neither `[DONE]` nor empty),
    /// read with the targeted scanner ([`chunk`]): no JSON tree is built unless the
    /// chunk reports an error, carries `usage`, is the first one (its `id` and
    /// `created`), or the stream continues another.
    fn chunk(
        &mut self,
        data: &str,
        scan: &mut ChunkScan,
        one_line: bool,
        out: &mut BytesMut,
    ) -> Result<StreamStep, GatewayError> {
        let b = data.as_bytes();
        scan.scan(b).map_err(|why| {
            bad_chunk(format!(
                "upstream sent a stream event that is not a chunk: {why}"
            ))
        })?;
        if let Some(err) = &scan.error {
            let v: Value = serde_json::from_slice(&b[err.clone()]).unwrap_or(Value::Null);
            return Err(mid_stream_error(&v));
        }
        self.chunks = true;
        if let Some(u) = &scan.usage {
            self.progress.sent.usage = reported_usage(&data[u.clone()]);
            if scan.choices.is_empty() {
                if !self.include_usage {
                    return Ok(StreamStep::Continue);
                }
                self.usage_sent = true;
            } else if self.include_usage {
                self.usage_held = serde_json::from_str(&data[u.clone()]).ok();
            }
        }
        let usage = self.usage_edit(scan.usage.is_some(), !scan.choices.is_empty());
        // Azure OpenAI's first chunk carries only `prompt_filter_results`, with
        // `"id": ""` and `"created": 0`: the answer's id and time come with the next,
        // and the chunks the gateway writes itself (a finish or usage chunk, a
        // continuation's) must carry those.
        let unnamed = self.id.is_null()
            || (!self.progress.resuming() && self.id.as_str().is_some_and(str::is_empty));
        if unnamed {
            let parse = |r: &Option<std::ops::Range<usize>>| {
                r.clone().map_or(Value::Null, |r| scalar_value(&data[r]))
            };
            self.id = parse(&scan.id);
            self.created = parse(&scan.created);
            if let Value::String(id) = &self.id {
                self.progress.sent.id = id.clone();
            }
            if let Value::String(m) = parse(&scan.model) {
                self.progress.sent.model = Some(m);
            }
            self.progress.sent.created = self.created.as_u64().unwrap_or_default();
        }
        // A chunk that only repeats the finish of choices already finished (some
        // servers send the finish chunk twice) is dropped: a client reads one
        // `finish_reason` per choice.
        let mut repeats = scan.usage.is_none() && !scan.choices.is_empty();
        for (pos, c) in scan.choices.iter().enumerate() {
            let i = (c.index.map_or(pos, |i| i as usize)).min(MAX_CHOICES);
            if self.choices.len() <= i {
                self.choices.resize(i + 1, false);
            }
            let was = self.choices[i];
            self.choices[i] = was || c.finish.is_some();
            repeats &=
                was && c.finish.is_some() && c.content.is_none() && !c.tool_calls && !c.reasoning;
            if let Some(r) = c.finish.as_ref().filter(|_| !was) {
                self.progress.sent.finish_reason = match scalar_value(&data[r.clone()]) {
                    Value::String(s) => Some(s),
                    _ => None,
                };
            }
        }
        if repeats {
            return Ok(StreamStep::Continue);
        }
        if !scan.choices.is_empty() {
            self.finished = self.choices.iter().all(|&f| f);
            self.progress.sent.finished = self.finished;
        }
        for c in &scan.choices {
            if c.content.is_some() || c.tool_calls || c.reasoning {
                self.deltas += 1;
            }
            // Reasoning streams as it arrives (it is the commit point, as text is),
            // and a stream that sent some is not continued elsewhere: a restart
            // would send it again.
            if c.reasoning {
                self.progress.reasoning();
            }
        }
        if self.progress.resuming() {
            self.resumed(data, out)?;
            return Ok(StreamStep::Continue);
        }
        for c in &scan.choices {
            self.track(data, c)?;
        }
        if scan.model_twice {
            // Named twice: parsed whole, so that one `model` (the logical name) is left
            // whichever of the two a client's reader would have kept.
            let mut v: Map<String, Value> = serde_json::from_str(data).map_err(|e| {
                bad_chunk(format!(
                    "upstream sent a stream event that is not a chunk: {e}"
                ))
            })?;
            v.insert("model".into(), Value::String(self.model.clone()));
            edit_usage(&mut v, usage);
            write_event(out, &v);
            return Ok(StreamStep::Continue);
        }
        // The client did not ask for usage (it was asked for on its behalf): every
        // chunk's `usage` member (null, or a count on the last content chunk of
        // some servers) is removed. When it did, only the usage chunk carries
        // the counts, and every other chunk `"usage": null`.
        out.put_slice(b"data: ");
        if one_line {
            scan.write(b, self.model_json.as_bytes(), usage, out);
        } else {
            // The upstream sent the chunk as several `data:` lines (joined with `\n`,
            // JSON whitespace): written raw, a newline would end the client's line
            // and cut the event. Each line goes out as a `data:` line of its own, so
            // the client joins the same text.
            let mut one = BytesMut::with_capacity(b.len() + self.model_json.len() + 10);
            scan.write(b, self.model_json.as_bytes(), usage, &mut one);
            for (i, line) in one[..].split(|&c| c == b'\n').enumerate() {
                if i > 0 {
                    out.put_slice(b"\ndata: ");
                }
                out.put_slice(line);
            }
        }
        out.put_slice(b"\n\n");
        Ok(StreamStep::Continue)
    }

    /// Records the text and tool-call pieces of a pass-through chunk's choice; the
    /// text is decoded only when it is tracked or skipped.
    fn track(&mut self, data: &str, choice: &ChoiceScan) -> Result<(), GatewayError> {
        if let Some(t) = &choice.content {
            if !self.progress.counted() {
                let raw = &data[t.clone()];
                // A string without escapes or control characters is its own text
                // (most pieces): no JSON reader for it.
                let inner = raw
                    .strip_prefix('"')
                    .and_then(|r| r.strip_suffix('"'))
                    .filter(|i| i.bytes().all(|c| c >= 0x20 && c != b'\\'));
                if let Some(text) = inner {
                    self.progress.text(text)?;
                } else if !raw.starts_with('"') {
                    // Not text: Mistral's reasoning models stream `delta.content` as
                    // a list of `thinking` and `text` parts. Relayed as it came.
                    self.progress.opaque()?;
                } else {
                    let text: std::borrow::Cow<'_, str> = serde_json::from_str(raw)
                        .map_err(|e| bad_chunk(format!("`delta.content` is not a string: {e}")))?;
                    self.progress.text(&text)?;
                }
            }
        }
        if choice.tool_calls {
            self.progress.tool();
        }
        Ok(())
    }

    /// Writes a chunk of a continuation: parsed whole, rewritten (see the type doc);
    /// dropped when nothing is left in it.
    fn resumed(&mut self, data: &str, out: &mut BytesMut) -> Result<(), GatewayError> {
        let mut v: Value = serde_json::from_str(data).map_err(|e| {
            bad_chunk(format!(
                "upstream sent a stream event that is not a chunk: {e}"
            ))
        })?;
        let Some(obj) = v.as_object_mut() else {
            return Err(bad_chunk(
                "upstream stream event is not a JSON object".into(),
            ));
        };
        obj.insert("id".into(), self.id.clone());
        obj.insert("created".into(), self.created.clone());
        obj.insert("model".into(), Value::String(self.model.clone()));
        let choices = obj
            .get("choices")
            .and_then(Value::as_array)
            .is_some_and(|c| !c.is_empty());
        let usage = self.usage_edit(obj.get("usage").is_some_and(|u| !u.is_null()), choices);
        edit_usage(obj, usage);
        let mut keep = usage == UsageEdit::Keep && obj.get("usage").is_some_and(|u| !u.is_null());
        if let Some(Value::Array(choices)) = obj.get_mut("choices") {
            for c in choices.iter_mut() {
                if c.get("finish_reason").is_some_and(|f| !f.is_null()) {
                    keep = true;
                    self.progress.sent.finished = true;
                }
                let Some(Value::Object(d)) = c.get_mut("delta") else {
                    continue;
                };
                d.remove("role");
                match d.remove("content") {
                    Some(Value::String(t)) => {
                        let pass = self.progress.text(&t)?;
                        if !pass.is_empty() {
                            d.insert("content".into(), Value::String(pass.to_string()));
                        }
                    }
                    Some(other) if !other.is_null() => {
                        self.progress.opaque()?;
                        d.insert("content".into(), other);
                    }
                    _ => {}
                }
                if d.get("tool_calls").is_some_and(|t| !t.is_null()) {
                    self.progress.tool();
                }
                keep |= d.values().any(|v| !v.is_null());
            }
        }
        if keep {
            write_event(out, &v);
        }
        Ok(())
    }

    /// The upstream's `[DONE]`: closes the answer ([`OpenAiStream::close`]). Some
    /// servers end with `[DONE]` and no `finish_reason`; the client then gets a
    /// `stop` finish chunk first, as the translating adapters write one when the
    /// provider's stop event came without a reason.
    ///
    /// # Errors
    /// 502 `upstream_bad_response` when `[DONE]` came before any chunk: an answer
    /// with nothing in it is not a complete one.
    fn done(&mut self, out: &mut BytesMut) -> Result<(), GatewayError> {
        if !self.chunks {
            return Err(bad_chunk(
                "upstream ended the stream with [DONE] before sending any chunk".into(),
            ));
        }
        if !self.finished {
            if self.choices.is_empty() {
                self.choices.push(false);
            }
            for i in 0..self.choices.len() {
                if self.choices[i] {
                    continue;
                }
                let mut chunk = serde_json::json!({
                    "id": self.id,
                    "object": "chat.completion.chunk",
                    "created": self.created,
                    "model": self.model,
                    "choices": [{"index": i, "delta": {}, "finish_reason": "stop"}],
                });
                if self.include_usage {
                    chunk["usage"] = Value::Null;
                }
                write_event(out, &chunk);
                self.choices[i] = true;
            }
            self.finished = true;
            self.progress.sent.finished = true;
            self.progress.sent.finish_supplied = true;
        }
        self.close(out);
        Ok(())
    }

    /// What becomes of the `usage` member of a chunk that has one with counts
    /// (`counts`) and has choices (`choices`): see [`UsageEdit`].
    fn usage_edit(&self, counts: bool, choices: bool) -> UsageEdit {
        if !self.include_usage {
            UsageEdit::Drop
        } else if counts && !choices {
            UsageEdit::Keep
        } else {
            UsageEdit::Null
        }
    }

    /// Writes the usage chunk if one is owed (with the counts the upstream put on a
    /// chunk with choices, else estimated), then `[DONE]`.
    fn close(&mut self, out: &mut BytesMut) {
        if self.include_usage && !self.usage_sent {
            let usage = self.usage_held.take().unwrap_or_else(|| {
                serde_json::to_value(Usage::new(self.prompt_tokens, self.deltas))
                    .unwrap_or_default()
            });
            let chunk = serde_json::json!({
                "id": self.id,
                "object": "chat.completion.chunk",
                "created": self.created,
                "model": self.model,
                "choices": [],
                "usage": usage,
            });
            write_event(out, &chunk);
            self.usage_sent = true;
        }
        write_done(out);
    }
}

pub use crate::sse::{write_done, write_event};

/// The JSON value `raw` (a chunk's `id`, `created`, `model` or `finish_reason`), or
/// `null` when it is not JSON. A string with no escape or control character and a
/// plain integer are read here; anything else by `serde_json`, whose reading this
/// is (`tests::scalar_values_read_as_serde_reads_them`): `serde_json`'s visitor
/// for four values was about 1,500 instructions of every stream
/// (`benches/load/callgrind.sh`).
fn scalar_value(raw: &str) -> Value {
    let b = raw.as_bytes();
    if let [b'"', inner @ .., b'"'] = b {
        if inner.iter().all(|&c| c >= 0x20 && c != b'\\' && c != b'"') {
            return Value::String(raw[1..raw.len() - 1].to_string());
        }
    } else if matches!(b, [b'1'..=b'9', ..] | [b'0']) && b.iter().all(u8::is_ascii_digit) {
        if let Ok(n) = raw.parse::<u64>() {
            return Value::from(n);
        }
    }
    serde_json::from_str(raw).unwrap_or(Value::Null)
}

/// The counts of an upstream `usage` object (missing counts are 0, the total is
/// recomputed; cached and reasoning details kept when present).
fn reported_usage(raw: &str) -> Option<Usage> {
    use crate::api::counts::{read, Read};
    let text = raw.as_bytes();
    match read(text) {
        Read::Counts(c, end) if text[end..].trim_ascii().is_empty() => Some(
            Usage::new(c.prompt_tokens, c.completion_tokens)
                .with_cached(c.prompt_details.and_then(|d| d.cached_tokens))
                .with_reasoning(c.completion_details.and_then(|d| d.reasoning_tokens)),
        ),
        // Not a usage object, as `serde_json` reads `null` into one.
        Read::Null(end) if text[end..].trim_ascii().is_empty() => None,
        _ => reported_usage_serde(raw),
    }
}

/// [`reported_usage`] read by `serde_json`: what it answers whenever the quick
/// reader is unsure.
fn reported_usage_serde(raw: &str) -> Option<Usage> {
    #[derive(Deserialize)]
    struct Cached {
        #[serde(default)]
        cached_tokens: Option<u64>,
    }
    #[derive(Deserialize)]
    struct Reasoning {
        #[serde(default)]
        reasoning_tokens: Option<u64>,
    }
    #[derive(Deserialize)]
    struct Counts {
        #[serde(default)]
        prompt_tokens: u64,
        #[serde(default)]
        completion_tokens: u64,
        #[serde(default)]
        prompt_tokens_details: Option<Cached>,
        #[serde(default)]
        completion_tokens_details: Option<Reasoning>,
    }
    let c: Counts = serde_json::from_str(raw).ok()?;
    Some(
        Usage::new(c.prompt_tokens, c.completion_tokens)
            .with_cached(c.prompt_tokens_details.and_then(|d| d.cached_tokens))
            .with_reasoning(c.completion_tokens_details.and_then(|d| d.reasoning_tokens)),
    )
}

/// 502 `upstream_error` for an error the upstream reported mid-stream, `v` being its
/// error object (or a string); the message is bounded to 500 bytes.
fn mid_stream_error(v: &Value) -> GatewayError {
    let msg = v
        .get("message")
        .and_then(Value::as_str)
        .or_else(|| v.as_str())
        .unwrap_or("unknown error");
    GatewayError::new(
        ErrorKind::BadUpstream,
        format!(
            "upstream reported an error mid-stream: {}",
            crate::error::bounded(msg, 500)
        ),
    )
    .with_code(crate::error::Code::UpstreamError)
}

/// The error of an `event: error` event, whose data is `{"error": {...}}`, the error
/// object itself, or text.
fn named_error(data: &str) -> GatewayError {
    let v: Value = serde_json::from_str(data).unwrap_or_else(|_| Value::String(data.into()));
    mid_stream_error(v.get("error").unwrap_or(&v))
}

/// Applies `edit` to the `usage` member of a chunk parsed whole.
fn edit_usage(chunk: &mut Map<String, Value>, edit: UsageEdit) {
    match edit {
        UsageEdit::Keep => {}
        UsageEdit::Drop => {
            chunk.remove("usage");
        }
        UsageEdit::Null => {
            chunk.insert("usage".into(), Value::Null);
        }
    }
}

/// 502 for a stream chunk that is not what OpenAI documents.
fn bad_chunk(why: String) -> GatewayError {
    GatewayError::new(ErrorKind::BadUpstream, why)
        .with_code(crate::error::Code::UpstreamBadResponse)
}

impl StreamTranscoder for OpenAiStream {
    fn event(
        &mut self,
        event: SseEventRef<'_>,
        out: &mut BytesMut,
    ) -> Result<StreamStep, GatewayError> {
        // JSON's whitespace is ASCII (RFC 8259, section 2).
        let data = event.data.trim_ascii();
        match event.event {
            // Chat Completions chunks carry no event name (`message` is the SSE
            // default one).
            None | Some("" | "message") => {}
            Some("error") => return Err(named_error(data)),
            Some(other) => {
                tracing::debug!(
                    event = %crate::error::bounded(other, 64),
                    "OpenAI-format stream event type not handled; skipped"
                );
                return Ok(StreamStep::Continue);
            }
        }
        if data == "[DONE]" {
            self.done(out)?;
            return Ok(StreamStep::Done);
        }
        if data.is_empty() {
            return Ok(StreamStep::Continue);
        }
        // One `data:` line, by the parser's count (an event made otherwise, with no
        // count, is searched for a join).
        let one_line = match event.data_lines {
            0 => memchr::memchr(b'\n', data.as_bytes()).is_none(),
            n => n == 1,
        };
        let mut scan = self
            .scan
            .take()
            .unwrap_or_else(|| Box::new(ChunkScan::new()));
        let step = self.chunk(data, &mut scan, one_line, out);
        self.scan = Some(scan);
        step
    }

    fn end(&mut self, out: &mut BytesMut) -> Result<(), GatewayError> {
        if self.finished {
            self.close(out);
            Ok(())
        } else {
            Err(GatewayError::new(
                ErrorKind::BadUpstream,
                "upstream closed the stream before the answer was complete",
            )
            .with_code(crate::error::Code::UpstreamStreamCut))
        }
    }

    fn produced_content(&self) -> bool {
        self.progress.content
    }

    fn sent(&self) -> &super::Sent {
        &self.progress.sent
    }
}

mod chunk;
#[cfg(test)]
mod tests;
mod view;
