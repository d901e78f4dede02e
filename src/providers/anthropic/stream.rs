//! Anthropic's streamed message → OpenAI chunks.
//!
//! Source: Anthropic API reference, "Streaming Messages": `message_start`, then per
//! content block `content_block_start` / `content_block_delta` (`text_delta`,
//! `input_json_delta`, `thinking_delta`, `signature_delta`) / `content_block_stop`,
//! then `message_delta` (stop reason and cumulative usage) and `message_stop`; `ping`
//! keep-alives and `error` events may come anywhere, and new event types may be added
//! (they are ignored).
//!
//! Thinking text goes out as `delta.reasoning_content` as it arrives; when a thinking
//! block closes, the whole block with its signature goes out once as a
//! `delta.thinking_blocks` entry (a redacted block as soon as it starts), for the
//! client to send back (see [`crate::providers::reasoning`]).

use std::borrow::Cow;

use bytes::BytesMut;
use serde::Deserialize;

use super::{finish_reason, AnthropicUsage, ErrorDetail};
use crate::api::Usage;
use crate::error::{ErrorKind, GatewayError};
use crate::providers::common::{bad_upstream, end_of_body, hold, ChunkWriter, ToolDelta};
use crate::providers::reasoning::ThinkingBlock;
use crate::providers::{StreamContext, StreamStep, StreamTranscoder};
use crate::sse::SseEventRef;

#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum Event<'a> {
    MessageStart {
        message: StartMessage,
    },
    ContentBlockStart {
        index: u64,
        #[serde(borrow)]
        content_block: StartBlock<'a>,
    },
    ContentBlockDelta {
        index: u64,
        #[serde(borrow)]
        delta: BlockDelta<'a>,
    },
    ContentBlockStop {
        index: u64,
    },
    MessageDelta {
        delta: MessageDeltaBody,
        #[serde(default)]
        usage: AnthropicUsage,
    },
    MessageStop,
    Error {
        error: ErrorDetail,
    },
    /// `ping` and event types added after this adapter was written.
    #[serde(other)]
    Other,
}

/// The error for a stream's `error` event (Anthropic API, "Streaming Messages":
/// "errors may be sent in the event stream", with the error types of "Errors"): an
/// account out of quota or over a spend limit ([`ErrorDetail::out_of_quota`]) as
/// its HTTP answer would be (429 `insufficient_quota`, the endpoint paused); a
/// `rate_limit_error` as a rate limit (429 `upstream_rate_limited`, retried after
/// the backoff); anything else a retryable 502 (`upstream_overloaded` for
/// `overloaded_error`).
fn stream_error(error: &ErrorDetail) -> GatewayError {
    use crate::error::{bounded, Code};
    if let Some(why) = error.out_of_quota() {
        return error.quota_error(why, "mid-stream");
    }
    let text = format!(
        "Anthropic reported an error mid-stream ({}): {}",
        bounded(&error.kind, 64),
        bounded(&error.message, 500)
    );
    match error.kind.as_str() {
        "rate_limit_error" => {
            GatewayError::new(ErrorKind::RateLimited, text).with_code(Code::UpstreamRateLimited)
        }
        "overloaded_error" => {
            GatewayError::new(ErrorKind::BadUpstream, text).with_code(Code::UpstreamOverloaded)
        }
        _ => GatewayError::new(ErrorKind::BadUpstream, text).with_code(Code::UpstreamError),
    }
}

#[derive(Deserialize)]
struct StartMessage {
    id: String,
    #[serde(default)]
    model: Option<String>,
    #[serde(default)]
    usage: AnthropicUsage,
}

#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum StartBlock<'a> {
    Text {
        #[serde(borrow, default)]
        text: Cow<'a, str>,
    },
    ToolUse {
        #[serde(borrow)]
        id: Cow<'a, str>,
        #[serde(borrow)]
        name: Cow<'a, str>,
    },
    Thinking {
        #[serde(borrow, default)]
        thinking: Cow<'a, str>,
        #[serde(borrow, default)]
        signature: Cow<'a, str>,
    },
    RedactedThinking {
        #[serde(borrow)]
        data: Cow<'a, str>,
    },
    /// Server-tool blocks and block types added later: not relayed.
    #[serde(other)]
    Other,
}

#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum BlockDelta<'a> {
    TextDelta {
        #[serde(borrow)]
        text: Cow<'a, str>,
    },
    InputJsonDelta {
        #[serde(borrow)]
        partial_json: Cow<'a, str>,
    },
    ThinkingDelta {
        #[serde(borrow)]
        thinking: Cow<'a, str>,
    },
    SignatureDelta {
        #[serde(borrow)]
        signature: Cow<'a, str>,
    },
    /// Citation deltas and delta types added later: not relayed.
    #[serde(other)]
    Other,
}

#[derive(Deserialize)]
struct MessageDeltaBody {
    #[serde(default)]
    stop_reason: Option<String>,
}

/// A `tool_use` content block being streamed.
struct ToolBlock {
    /// Anthropic's content block index.
    block: u64,
    /// The OpenAI `tool_calls[].index`.
    call: u32,
    /// Whether any argument text was relayed.
    args: bool,
}

/// A `thinking` content block being streamed: its text and signature so far.
struct Thinking {
    /// Anthropic's content block index.
    block: u64,
    text: String,
    signature: String,
}

/// The transcoder for one Anthropic stream.
pub(super) struct AnthropicStream {
    w: ChunkWriter,
    include_usage: bool,
    prompt_estimate: u64,
    /// Token counts from `message_start`, updated by `message_delta` (see
    /// [`AnthropicUsage::update`]).
    usage: AnthropicUsage,
    tools: Vec<ToolBlock>,
    thinking: Option<Thinking>,
    /// The finish reason, once its chunk has been written.
    finish: Option<&'static str>,
    /// `message_start` or a content block event has arrived.
    started: bool,
}

impl AnthropicStream {
    pub(super) fn new(ctx: StreamContext) -> Self {
        AnthropicStream {
            started: false,
            w: ChunkWriter::new(&ctx),
            include_usage: ctx.include_usage,
            prompt_estimate: ctx.prompt_tokens_estimate,
            usage: AnthropicUsage::default(),
            tools: Vec::new(),
            thinking: None,
            finish: None,
        }
    }

    /// Writes the finish chunk (once), the usage chunk if asked, and `[DONE]`.
    fn close(&mut self, out: &mut BytesMut) {
        let usage = self.include_usage.then(|| {
            self.usage.to_openai().unwrap_or_else(|| {
                Usage::new(self.prompt_estimate, self.usage.output_tokens.unwrap_or(0))
            })
        });
        self.w.close(out, &mut self.finish, usage);
    }
}

impl AnthropicStream {
    /// The thinking block open at content block `index`.
    ///
    /// # Errors
    /// 502 when no thinking block is open there.
    fn thinking_block(&mut self, index: u64) -> Result<&mut Thinking, GatewayError> {
        self.thinking.as_mut().filter(|t| t.block == index).ok_or_else(|| {
            bad_upstream(format!(
                "Anthropic sent a thinking delta for content block {index}, which is not a thinking block"
            ))
        })
    }
}

impl StreamTranscoder for AnthropicStream {
    fn event(
        &mut self,
        event: SseEventRef<'_>,
        out: &mut BytesMut,
    ) -> Result<StreamStep, GatewayError> {
        let data = event.data.trim();
        if data.is_empty() {
            return Ok(StreamStep::Continue);
        }
        let ev: Event<'_> = serde_json::from_str(data).map_err(|e| {
            bad_upstream(format!(
                "Anthropic sent a stream event that is not valid: {e}"
            ))
        })?;
        if matches!(
            ev,
            Event::MessageStart { .. }
                | Event::ContentBlockStart { .. }
                | Event::ContentBlockDelta { .. }
                | Event::ContentBlockStop { .. }
        ) {
            self.started = true;
        }
        match ev {
            Event::MessageStart { message } => {
                self.w.set_id(message.id);
                if let Some(m) = message.model {
                    self.w.set_upstream_model(m);
                }
                self.usage = message.usage;
                self.w.start(out);
            }
            Event::ContentBlockStart {
                index,
                content_block,
            } => match content_block {
                StartBlock::Text { text } if !text.is_empty() => self.w.text(out, &text)?,
                StartBlock::ToolUse { id, name } => {
                    let call = self.tools.len() as u32;
                    self.tools.push(ToolBlock {
                        block: index,
                        call,
                        args: false,
                    });
                    let piece = ToolDelta::opening(call, &id, &name);
                    self.w.tool(out, piece);
                }
                StartBlock::Thinking {
                    thinking,
                    signature,
                } => {
                    self.w.reasoning(out, &thinking);
                    self.thinking = Some(Thinking {
                        block: index,
                        text: thinking.into_owned(),
                        signature: signature.into_owned(),
                    });
                }
                StartBlock::RedactedThinking { data } => {
                    self.w
                        .thinking_block(out, &ThinkingBlock::RedactedThinking { data });
                }
                _ => {}
            },
            Event::ContentBlockDelta { index, delta } => match delta {
                BlockDelta::TextDelta { text } if !text.is_empty() => self.w.text(out, &text)?,
                BlockDelta::InputJsonDelta { partial_json } if !partial_json.is_empty() => {
                    let tool = self.tools.iter_mut().find(|t| t.block == index).ok_or_else(|| {
                        bad_upstream(format!(
                            "Anthropic sent tool input for content block {index}, which is not a tool call"
                        ))
                    })?;
                    tool.args = true;
                    let piece = ToolDelta::arguments(tool.call, &partial_json);
                    self.w.tool(out, piece);
                }
                BlockDelta::ThinkingDelta { thinking } => {
                    let block = self.thinking_block(index)?;
                    hold(&mut block.text, &thinking, "thinking block")?;
                    self.w.reasoning(out, &thinking);
                }
                BlockDelta::SignatureDelta { signature } => {
                    let block = self.thinking_block(index)?;
                    hold(&mut block.signature, &signature, "thinking signature")?;
                }
                _ => {}
            },
            Event::ContentBlockStop { index } => {
                if let Some(t) = self.thinking.take_if(|t| t.block == index) {
                    let block = ThinkingBlock::Thinking {
                        thinking: t.text.into(),
                        signature: t.signature.into(),
                    };
                    self.w.thinking_block(out, &block);
                }
                // A tool called without arguments streams no input; OpenAI clients
                // expect a JSON object string.
                if let Some(t) = self.tools.iter_mut().find(|t| t.block == index && !t.args) {
                    t.args = true;
                    let piece = ToolDelta::arguments(t.call, "{}");
                    self.w.tool(out, piece);
                }
            }
            Event::MessageDelta { delta, usage } => {
                self.usage.update(&usage);
                if self.finish.is_none() {
                    if let Some(reason) = delta.stop_reason.as_deref() {
                        let reason = finish_reason(Some(reason));
                        self.finish = Some(reason);
                        self.w.finish(out, reason);
                    }
                }
            }
            Event::MessageStop => {
                // A stream that is only its end is not an (empty) answer.
                if !self.started {
                    return Err(bad_upstream(
                        "Anthropic ended the stream (message_stop) before any message_start or content block",
                    ));
                }
                self.close(out);
                return Ok(StreamStep::Done);
            }
            Event::Error { error } => return Err(stream_error(&error)),
            Event::Other => {}
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
