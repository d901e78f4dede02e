//! Gemini's `streamGenerateContent?alt=sse` → OpenAI chunks.
//!
//! Source: Gemini API reference, "Generating content", `streamGenerateContent`: each
//! SSE `data:` is a whole `GenerateContentResponse` holding only the new parts; the
//! last carries `finishReason` and `usageMetadata`; no `[DONE]` follows, the body just
//! ends. With function-call argument streaming (Vertex AI reference, `FunctionCall`
//! `partialArgs`/`willContinue`), a call opens with its name, its arguments arrive as
//! values at JSON paths, and a part without `willContinue` closes it.

use bytes::BytesMut;
use serde_json::{Map, Value};

use super::{failed_finish, finish_reason, FunctionCall, GenerateResponse, PartialArg};
use crate::api::Usage;
use crate::error::{ErrorKind, GatewayError};
use crate::providers::common::{
    bad_upstream, end_of_body, random_id, ChunkWriter, ToolDelta, MAX_HELD_BLOCK_BYTES,
};
use crate::providers::{StreamContext, StreamStep, StreamTranscoder};
use crate::sse::SseEventRef;

/// A function call whose arguments are still streaming.
struct Pending {
    /// Its OpenAI `tool_calls[].index`.
    index: u32,
    args: Value,
    /// The JSON path whose string value continues in the next partial argument.
    continues: Option<String>,
    /// Bytes of paths and values received for `args`, bounded by
    /// [`MAX_HELD_BLOCK_BYTES`].
    held: usize,
}

/// The transcoder for one Gemini stream.
pub(super) struct GeminiStream {
    w: ChunkWriter,
    include_usage: bool,
    prompt_estimate: u64,
    usage: Option<Usage>,
    /// Tool calls started so far.
    calls: u32,
    pending: Option<Pending>,
    /// The finish reason, once its chunk has been written.
    finish: Option<&'static str>,
}

/// One step of a JSON path.
enum Step<'a> {
    Key(&'a str),
    Index(usize),
}

/// Splits a JSON path of member names and indexes (`$.a.b[0]['c']`).
fn steps(path: &str) -> Option<Vec<Step<'_>>> {
    let mut rest = path.strip_prefix('$')?;
    let mut out = Vec::new();
    while !rest.is_empty() {
        if let Some(r) = rest.strip_prefix('.') {
            let end = r.find(['.', '[']).unwrap_or(r.len());
            out.push(Step::Key(&r[..end]));
            rest = &r[end..];
        } else if let Some(r) = rest.strip_prefix("['") {
            let end = r.find("']")?;
            out.push(Step::Key(&r[..end]));
            rest = &r[end + 2..];
        } else if let Some(r) = rest.strip_prefix('[') {
            let end = r.find(']')?;
            out.push(Step::Index(r[..end].parse().ok()?));
            rest = &r[end + 1..];
        } else {
            return None;
        }
    }
    Some(out)
}

/// The slot at `path` in `root`, creating objects, arrays and nulls on the way.
fn slot<'v>(root: &'v mut Value, path: &str) -> Option<&'v mut Value> {
    let mut at = root;
    for step in steps(path)? {
        at = match step {
            Step::Key(k) => {
                if !at.is_object() {
                    *at = Value::Object(Map::new());
                }
                at.as_object_mut()?.entry(k).or_insert(Value::Null)
            }
            Step::Index(i) => {
                if !at.is_array() {
                    *at = Value::Array(Vec::new());
                }
                let a = at.as_array_mut()?;
                if i > a.len() + 1024 {
                    return None;
                }
                if a.len() <= i {
                    a.resize(i + 1, Value::Null);
                }
                &mut a[i]
            }
        };
    }
    Some(at)
}

impl GeminiStream {
    pub(super) fn new(ctx: StreamContext) -> Self {
        GeminiStream {
            w: ChunkWriter::new(&ctx),
            include_usage: ctx.include_usage,
            prompt_estimate: ctx.prompt_tokens_estimate,
            usage: None,
            calls: 0,
            pending: None,
            finish: None,
        }
    }

    /// Writes the arguments of the call being streamed, if any.
    fn flush(&mut self, out: &mut BytesMut) {
        if let Some(p) = self.pending.take() {
            let args = match &p.args {
                Value::Object(m) if !m.is_empty() => p.args.to_string(),
                _ => "{}".to_string(),
            };
            let piece = ToolDelta::arguments(p.index, &args);
            self.w.tool(out, piece);
        }
    }

    fn apply(&mut self, arg: PartialArg) -> Result<(), GatewayError> {
        let p = self.pending.as_mut().ok_or_else(|| {
            bad_upstream("Gemini streamed function arguments outside a function call")
        })?;
        p.held += arg.json_path.len() + arg.string_value.as_ref().map_or(8, String::len);
        if p.held > MAX_HELD_BLOCK_BYTES {
            return Err(bad_upstream(format!(
                "Gemini streamed function arguments larger than {MAX_HELD_BLOCK_BYTES} bytes"
            )));
        }
        let append = p.continues.as_deref() == Some(arg.json_path.as_str());
        let at = slot(&mut p.args, &arg.json_path).ok_or_else(|| {
            bad_upstream(format!(
                "Gemini sent an unusable argument path `{}`",
                arg.json_path
            ))
        })?;
        match (arg.string_value, at) {
            (Some(s), Value::String(prev)) if append => prev.push_str(&s),
            (Some(s), at) => *at = Value::String(s),
            (None, at) => {
                *at = if let Some(n) = arg.number_value {
                    Value::Number(n)
                } else if let Some(b) = arg.bool_value {
                    Value::Bool(b)
                } else {
                    Value::Null
                }
            }
        }
        p.continues = arg.will_continue.then_some(arg.json_path);
        Ok(())
    }

    /// One `functionCall` part; `signature` is the part's `thoughtSignature`, sent
    /// on the call's first piece.
    fn call(
        &mut self,
        f: FunctionCall,
        signature: Option<&str>,
        out: &mut BytesMut,
    ) -> Result<(), GatewayError> {
        if let Some(name) = f.name.as_deref() {
            self.flush(out);
            let index = self.calls;
            self.calls += 1;
            let id = f.id.clone().unwrap_or_else(|| random_id("call_"));
            let complete = !f.will_continue && f.partial_args.is_empty();
            // OpenAI's shape: the call's first piece has its id, type, name and
            // empty arguments; the arguments follow in pieces of their own.
            let piece = ToolDelta::opening(index, &id, name);
            self.w.tool_signed(out, piece, signature);
            if complete {
                let args = f
                    .args
                    .as_ref()
                    .map_or_else(|| "{}".to_string(), Value::to_string);
                let piece = ToolDelta::arguments(index, &args);
                self.w.tool(out, piece);
                return Ok(());
            }
            let args = f.args.unwrap_or_else(|| Value::Object(Map::new()));
            self.pending = Some(Pending {
                index,
                args,
                continues: None,
                held: 0,
            });
        }
        for arg in f.partial_args {
            self.apply(arg)?;
        }
        if !f.will_continue {
            self.flush(out);
        }
        Ok(())
    }

    /// Writes the usage chunk if asked, and `[DONE]`.
    /// Closes a finished answer (see [`ChunkWriter::close`]).
    fn close(&mut self, out: &mut BytesMut) {
        let usage = self
            .include_usage
            .then(|| self.usage.unwrap_or(Usage::new(self.prompt_estimate, 0)));
        self.w.close(out, &mut self.finish, usage);
    }
}

impl StreamTranscoder for GeminiStream {
    fn event(
        &mut self,
        event: SseEventRef<'_>,
        out: &mut BytesMut,
    ) -> Result<StreamStep, GatewayError> {
        let data = event.data.trim();
        if data.is_empty() {
            return Ok(StreamStep::Continue);
        }
        if data == "[DONE]" {
            self.end(out)?;
            return Ok(StreamStep::Done);
        }
        let r: GenerateResponse = serde_json::from_str(data).map_err(|e| {
            bad_upstream(format!("Gemini sent a stream event that is not valid: {e}"))
        })?;
        if let Some(e) = r.error {
            // Billing, as the HTTP answer would say it (`ErrorDetail::billing_error`).
            if let Some(billing) = e.billing_error(200, "mid-stream") {
                return Err(billing);
            }
            let message = format!(
                "Gemini reported an error mid-stream ({}): {}",
                e.status,
                crate::error::bounded(&e.message, 500)
            );
            // RESOURCE_EXHAUSTED is Gemini's rate limit (HTTP 429 outside a stream).
            return Err(if e.status == "RESOURCE_EXHAUSTED" {
                GatewayError::new(ErrorKind::RateLimited, message)
                    .with_code(crate::error::Code::UpstreamRateLimited)
                    .with_retry_after(e.retry_delay().max(e.reset_wait()))
            } else {
                GatewayError::new(ErrorKind::BadUpstream, message)
                    .with_code(crate::error::Code::UpstreamError)
            });
        }
        if self.w.id().is_empty() {
            self.w
                .set_id(r.response_id.unwrap_or_else(|| random_id("chatcmpl-")));
            if let Some(m) = r.model_version {
                self.w.set_upstream_model(m);
            }
        }
        self.w.start(out);
        if let Some(u) = r.usage_metadata.and_then(|u| u.to_openai()) {
            self.usage = Some(u);
            self.w.progress.sent.usage = Some(u);
        }
        if self.finish.is_some() {
            return Ok(StreamStep::Continue);
        }
        if r.candidates.is_empty() {
            if let Some(blocked) = r.prompt_feedback.and_then(|f| f.block_reason) {
                self.w.refusal(out, &super::blocked_refusal(&blocked));
                self.finish = Some("content_filter");
                self.w.finish(out, "content_filter");
            }
            return Ok(StreamStep::Continue);
        }
        // One choice is streamed (`n` > 1 is refused for streams): candidate 0.
        let Some(c) = r.candidates.into_iter().find(|c| c.index.unwrap_or(0) == 0) else {
            return Ok(StreamStep::Continue);
        };
        for p in c.content.map(|c| c.parts).unwrap_or_default() {
            if let Some(f) = p.function_call {
                self.call(f, p.thought_signature.as_deref(), out)?;
            } else if let Some(t) = p.text.filter(|t| !t.is_empty()) {
                if p.thought {
                    self.w.reasoning(out, &t);
                } else {
                    self.w.text(out, &t)?;
                }
            }
        }
        if let Some(reason) = c.finish_reason.as_deref() {
            if let Some(e) = failed_finish(reason) {
                return Err(e);
            }
            self.flush(out);
            let reason = finish_reason(reason, self.calls > 0);
            self.finish = Some(reason);
            self.w.finish(out, reason);
        }
        Ok(StreamStep::Continue)
    }

    fn end(&mut self, out: &mut BytesMut) -> Result<(), GatewayError> {
        end_of_body(self.finish, || self.close(out))
    }

    fn produced_content(&self) -> bool {
        self.w.content()
    }

    fn sent(&self) -> &crate::providers::Sent {
        &self.w.progress.sent
    }
}
