//! Bedrock's ConverseStream answer → OpenAI chunks.
//!
//! Source: Amazon Bedrock API reference, "ConverseStream" (events `messageStart`,
//! `contentBlockStart` with a `toolUse` start, `contentBlockDelta` with `text`,
//! `toolUse.input` or `reasoningContent`, `contentBlockStop`, `messageStop` with
//! `stopReason`, `metadata` with `usage` and `metrics`; exceptions
//! `internalServerException`, `modelStreamErrorException`, `validationException`,
//! `throttlingException`, `serviceUnavailableException`), and the AWS event stream
//! encoding (`application/vnd.amazon.eventstream`: frames of a prelude with total
//! and header lengths and its CRC32, typed headers, the payload, and a CRC32 of the
//! whole message).
//!
//! The body is binary, so this transcoder takes the raw bytes
//! ([`StreamTranscoder::raw`]) and frames them itself: a frame split across reads
//! waits for its remaining bytes, a frame is at most [`MAX_FRAME_BYTES`], and a
//! checksum mismatch ends the stream with an error. `metadata` may come before or
//! after `messageStop`; the stream is complete once both arrived (or the body ends
//! after `messageStop`).

use std::borrow::Cow;

use bytes::{Buf, BytesMut};
use serde::Deserialize;

use super::frame::{frame_len, Frame, MIN_FRAME_BYTES};
use super::{finish_reason, TokenUsage};
use crate::api::Usage;
use crate::error::{bounded, Code, ErrorKind, GatewayError};
use crate::providers::common::{
    bad_upstream, end_of_body, hold, random_id, ChunkWriter, ToolDelta,
};
use crate::providers::reasoning::ThinkingBlock;
use crate::providers::{StreamContext, StreamStep, StreamTranscoder};
use crate::sse::SseEventRef;

/// Largest event stream frame accepted, in bytes (16 MiB, the bound the AWS SDKs
/// apply to one message).
pub const MAX_FRAME_BYTES: usize = 16 * 1024 * 1024;

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct BlockStart<'a> {
    #[serde(default)]
    content_block_index: u64,
    #[serde(borrow, default)]
    start: Option<Start<'a>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Start<'a> {
    #[serde(borrow, default)]
    tool_use: Option<ToolStart<'a>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ToolStart<'a> {
    #[serde(borrow)]
    tool_use_id: Cow<'a, str>,
    #[serde(borrow)]
    name: Cow<'a, str>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct BlockDelta<'a> {
    #[serde(default)]
    content_block_index: u64,
    #[serde(borrow)]
    delta: Delta<'a>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Delta<'a> {
    #[serde(borrow, default)]
    text: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    tool_use: Option<ToolInput<'a>>,
    #[serde(borrow, default)]
    reasoning_content: Option<ReasoningDelta<'a>>,
}

#[derive(Deserialize)]
struct ToolInput<'a> {
    #[serde(borrow, default)]
    input: Cow<'a, str>,
}

/// `reasoningContent` delta: `text`, `signature` or `redactedContent` (base64).
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ReasoningDelta<'a> {
    #[serde(borrow, default)]
    text: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    signature: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    redacted_content: Option<Cow<'a, str>>,
}

/// A reasoning content block being streamed: text, signature and redacted data so
/// far, sent whole as a `thinking_blocks` entry when the block stops.
struct Thinking {
    block: u64,
    text: String,
    signature: String,
    redacted: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct BlockStop {
    #[serde(default)]
    content_block_index: u64,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct MessageStop {
    #[serde(default)]
    stop_reason: Option<String>,
}

#[derive(Deserialize)]
struct Metadata {
    #[serde(default)]
    usage: Option<TokenUsage>,
}

#[derive(Deserialize)]
struct ExceptionBody {
    #[serde(default, alias = "Message")]
    message: String,
}

/// A `toolUse` content block being streamed.
struct ToolBlock {
    block: u64,
    /// The OpenAI `tool_calls[].index`.
    call: u32,
    args: bool,
}

/// The transcoder for one ConverseStream answer.
pub(super) struct BedrockStream {
    w: ChunkWriter,
    include_usage: bool,
    prompt_estimate: u64,
    /// Received bytes not yet framed.
    buf: BytesMut,
    usage: Option<TokenUsage>,
    metadata: bool,
    tools: Vec<ToolBlock>,
    thinking: Option<Thinking>,
    /// The finish reason, once its chunk has been written.
    finish: Option<&'static str>,
    /// `[DONE]` written, or the stream failed: later bytes are ignored.
    over: bool,
    /// `[DONE]` written.
    done: bool,
    /// `messageStart` or a content block event has arrived (recorded streams do
    /// not all begin with `messageStart`).
    started: bool,
}

impl BedrockStream {
    pub(super) fn new(ctx: StreamContext) -> Self {
        let mut w = ChunkWriter::new(&ctx);
        w.set_id(random_id("chatcmpl-"));
        BedrockStream {
            w,
            include_usage: ctx.include_usage,
            prompt_estimate: ctx.prompt_tokens_estimate,
            buf: BytesMut::new(),
            usage: None,
            metadata: false,
            tools: Vec::new(),
            thinking: None,
            finish: None,
            over: false,
            done: false,
            started: false,
        }
    }

    /// Writes the finish chunk (once), the usage chunk if asked, and `[DONE]`.
    fn close(&mut self, out: &mut BytesMut) {
        let usage = self.include_usage.then(|| {
            self.usage
                .and_then(TokenUsage::to_openai)
                // No `metadata` event (cut after `messageStop`): estimated, about
                // one token per content piece sent, as the OpenAI-format relay
                // counts a stream without usage (0 undercounted rate limits and
                // budgets).
                .unwrap_or_else(|| Usage::new(self.prompt_estimate, self.w.progress.sent.pieces))
        });
        self.w.close(out, &mut self.finish, usage);
        self.done = true;
        self.over = true;
    }

    /// Handles one checked frame.
    fn message(&mut self, m: &Frame<'_>, out: &mut BytesMut) -> Result<StreamStep, GatewayError> {
        let header = |name: &str| m.header(name);
        match header(":message-type").unwrap_or("event") {
            "event" => {}
            "exception" => {
                let kind = header(":exception-type").unwrap_or("exception");
                let message = serde_json::from_slice::<ExceptionBody>(m.payload)
                    .map(|b| b.message)
                    .unwrap_or_default();
                return Err(exception(kind, &message));
            }
            _ => {
                let code = header(":error-code").unwrap_or("error");
                let message = header(":error-message").unwrap_or("");
                return Err(exception(code, message));
            }
        }
        let payload = m.payload;
        let parse_err = |e: serde_json::Error, what: &str| {
            bad_upstream(format!(
                "Bedrock sent a `{what}` event that is not valid: {e}"
            ))
        };
        let kind = header(":event-type").unwrap_or("");
        if kind == "messageStart" || kind.starts_with("contentBlock") {
            self.started = true;
        }
        match kind {
            "messageStart" => self.w.start(out),
            "contentBlockStart" => {
                let ev: BlockStart<'_> = crate::api::read_json(payload)
                    .map_err(|e| parse_err(e, "contentBlockStart"))?;
                if let Some(t) = ev.start.and_then(|s| s.tool_use) {
                    let call = self.tools.len() as u32;
                    self.tools.push(ToolBlock {
                        block: ev.content_block_index,
                        call,
                        args: false,
                    });
                    let piece = ToolDelta::opening(call, &t.tool_use_id, &t.name);
                    self.w.tool(out, piece);
                }
            }
            "contentBlockDelta" => {
                let ev: BlockDelta<'_> = crate::api::read_json(payload)
                    .map_err(|e| parse_err(e, "contentBlockDelta"))?;
                let index = ev.content_block_index;
                if let Some(text) = ev.delta.text.filter(|t| !t.is_empty()) {
                    self.w.text(out, &text)?;
                } else if let Some(input) = ev.delta.tool_use.filter(|t| !t.input.is_empty()) {
                    let tool = self.tools.iter_mut().find(|t| t.block == index).ok_or_else(|| {
                        bad_upstream(format!(
                            "Bedrock sent tool input for content block {index}, which is not a tool call"
                        ))
                    })?;
                    tool.args = true;
                    let piece = ToolDelta::arguments(tool.call, &input.input);
                    self.w.tool(out, piece);
                } else if let Some(r) = ev.delta.reasoning_content {
                    let t = self.thinking.get_or_insert_with(|| Thinking {
                        block: index,
                        text: String::new(),
                        signature: String::new(),
                        redacted: String::new(),
                    });
                    if t.block != index {
                        return Err(bad_upstream(format!(
                            "Bedrock sent reasoning for content block {index} while block {} was open",
                            t.block
                        )));
                    }
                    if let Some(text) = r.text {
                        hold(&mut t.text, &text, "reasoning block")?;
                        self.w.reasoning(out, &text);
                    }
                    if let Some(sig) = r.signature {
                        hold(&mut t.signature, &sig, "reasoning signature")?;
                    }
                    if let Some(data) = r.redacted_content {
                        hold(&mut t.redacted, &data, "redacted reasoning block")?;
                    }
                }
            }
            "contentBlockStop" => {
                let ev: BlockStop =
                    crate::api::read_json(payload).map_err(|e| parse_err(e, "contentBlockStop"))?;
                if let Some(t) = self.thinking.take_if(|t| t.block == ev.content_block_index) {
                    let block = if t.redacted.is_empty() {
                        ThinkingBlock::Thinking {
                            thinking: t.text.into(),
                            signature: t.signature.into(),
                        }
                    } else {
                        ThinkingBlock::RedactedThinking {
                            data: t.redacted.into(),
                        }
                    };
                    self.w.thinking_block(out, &block);
                }
                // A tool called without arguments streams no input; OpenAI clients
                // expect a JSON object string.
                if let Some(t) = self
                    .tools
                    .iter_mut()
                    .find(|t| t.block == ev.content_block_index && !t.args)
                {
                    t.args = true;
                    let piece = ToolDelta::arguments(t.call, "{}");
                    self.w.tool(out, piece);
                }
            }
            "messageStop" => {
                // A stream that is only its end is not an (empty) answer.
                if !self.started {
                    return Err(bad_upstream(
                        "Bedrock ended the stream (messageStop) before any messageStart or content block",
                    ));
                }
                let ev: MessageStop =
                    crate::api::read_json(payload).map_err(|e| parse_err(e, "messageStop"))?;
                if let Some(e) = super::malformed_stop(ev.stop_reason.as_deref()) {
                    return Err(e);
                }
                if self.finish.is_none() {
                    let reason = finish_reason(ev.stop_reason.as_deref(), !self.tools.is_empty());
                    self.finish = Some(reason);
                    self.w.finish(out, reason);
                }
                if self.metadata {
                    self.close(out);
                    return Ok(StreamStep::Done);
                }
            }
            "metadata" => {
                let ev: Metadata =
                    crate::api::read_json(payload).map_err(|e| parse_err(e, "metadata"))?;
                self.usage = ev.usage.or(self.usage);
                self.metadata = true;
                if self.finish.is_some() {
                    self.close(out);
                    return Ok(StreamStep::Done);
                }
            }
            other => {
                tracing::debug!(
                    event = %bounded(other, 64),
                    "Bedrock stream event type not handled; skipped"
                );
            }
        }
        Ok(StreamStep::Continue)
    }
}

/// The error for a stream exception (`kind` is its `:exception-type`).
fn exception(kind: &str, message: &str) -> GatewayError {
    let text = format!(
        "Bedrock reported {} mid-stream: {}",
        bounded(kind, 64),
        bounded(message, 500)
    );
    match kind {
        "throttlingException" => {
            GatewayError::new(ErrorKind::RateLimited, text).with_code(Code::UpstreamRateLimited)
        }
        "validationException" => GatewayError::new(ErrorKind::InvalidRequest, text)
            .with_code(Code::UpstreamInvalidRequest),
        "serviceUnavailableException" => {
            GatewayError::new(ErrorKind::BadUpstream, text).with_code(Code::UpstreamOverloaded)
        }
        // internalServerException, modelStreamErrorException, modelTimeoutException
        // and exceptions added later.
        _ => GatewayError::new(ErrorKind::BadUpstream, text).with_code(Code::UpstreamError),
    }
}

impl StreamTranscoder for BedrockStream {
    /// Bedrock streams are binary; an SSE event can only come from a misrouted
    /// answer.
    fn event(
        &mut self,
        _event: SseEventRef<'_>,
        _out: &mut BytesMut,
    ) -> Result<StreamStep, GatewayError> {
        Err(bad_upstream(
            "Bedrock answered a ConverseStream request with server-sent events, not an event stream",
        ))
    }

    fn raw(&mut self, data: &[u8], out: &mut BytesMut) -> Option<Result<StreamStep, GatewayError>> {
        if self.over {
            return Some(Ok(StreamStep::Done));
        }
        // Frames are read where they are: in `data`, or, when a frame was split
        // across reads, in the bytes kept from before with `data` appended. Only
        // the start of a frame not yet whole is kept for the next read.
        let mut kept = std::mem::take(&mut self.buf);
        let joined = !kept.is_empty();
        if joined {
            kept.extend_from_slice(data);
        }
        let input: &[u8] = if joined { &kept } else { data };
        let mut at = 0;
        let step = loop {
            let total = match frame_len(&input[at..], MAX_FRAME_BYTES) {
                Ok(Some(total)) if input.len() - at >= total => total,
                Ok(_) => break Ok(StreamStep::Continue),
                Err(total) => {
                    break Err(bad_upstream(format!(
                        "Bedrock sent an event stream frame of {total} bytes (accepted: {MIN_FRAME_BYTES} to {MAX_FRAME_BYTES})"
                    )))
                }
            };
            let frame = match Frame::read(&input[at..at + total]) {
                Ok(frame) => frame,
                Err(e) => {
                    break Err(bad_upstream(format!(
                        "Bedrock sent a bad event stream frame: {e}"
                    )))
                }
            };
            at += total;
            match self.message(&frame, out) {
                Ok(StreamStep::Continue) => {}
                done_or_error => break done_or_error,
            }
        };
        match step {
            Ok(StreamStep::Continue) => {
                if joined {
                    kept.advance(at);
                    self.buf = kept;
                } else if at < data.len() {
                    self.buf.extend_from_slice(&data[at..]);
                }
            }
            Ok(StreamStep::Done) => {}
            Err(_) => self.over = true,
        }
        Some(step)
    }

    fn end(&mut self, out: &mut BytesMut) -> Result<(), GatewayError> {
        if self.done {
            return Ok(());
        }
        end_of_body(self.finish, || self.close(out))
    }

    fn produced_content(&self) -> bool {
        self.w.content()
    }

    fn sent(&self) -> &crate::providers::Sent {
        &self.w.progress.sent
    }
}
