//! Anthropic Messages API.
//!
//! Source: Anthropic API reference, "Messages" (`POST /v1/messages`, request and
//! response bodies), "Streaming Messages" (event types), "Errors" (error body and
//! HTTP 529 `overloaded_error`) and "Versioning" (`anthropic-version: 2023-06-01`).
//!
//! Requests go to `POST {base_url}/messages` with the key in `x-api-key`. The OpenAI
//! request is translated in [`request`], the streamed answer in [`stream`]; the whole
//! answer and error bodies here.

mod request;
mod stream;

pub use request::DEFAULT_MAX_TOKENS;

use bytes::Bytes;
use http::HeaderMap;
use serde::Deserialize;
use serde_json::Value;

use super::common::{bad_upstream, completion, post_json, Choice};
use super::{upstream_error, Adapter, StreamContext, StreamTranscoder, Target};
use crate::api::{ChatRequest, Usage};
use crate::body::Body;
use crate::error::GatewayError;

/// The API version header value this adapter speaks.
pub const API_VERSION: &str = "2023-06-01";

/// The Anthropic Messages adapter.
#[derive(Debug, Clone, Copy, Default)]
pub struct Anthropic;

/// Token counts as Anthropic reports them (`usage` of a message, `message_start` and
/// `message_delta`). `input_tokens` excludes prompt-cache reads and writes, which are
/// counted separately; all are in tokens.
#[derive(Debug, Default, Clone, Copy, Deserialize)]
pub(super) struct AnthropicUsage {
    #[serde(default)]
    input_tokens: Option<u64>,
    #[serde(default)]
    output_tokens: Option<u64>,
    #[serde(default)]
    cache_creation_input_tokens: Option<u64>,
    #[serde(default)]
    cache_read_input_tokens: Option<u64>,
}

impl AnthropicUsage {
    /// All input tokens, cached or not (OpenAI's `prompt_tokens` includes cached ones),
    /// or `None` when the event carried no input count.
    fn prompt(&self) -> Option<u64> {
        let input = self.input_tokens?;
        Some(
            input
                + self.cache_creation_input_tokens.unwrap_or(0)
                + self.cache_read_input_tokens.unwrap_or(0),
        )
    }
}

/// Anthropic `stop_reason` → OpenAI `finish_reason`.
fn finish_reason(stop_reason: Option<&str>) -> &'static str {
    match stop_reason {
        Some("max_tokens") | Some("model_context_window_exceeded") => "length",
        Some("tool_use") => "tool_calls",
        Some("refusal") => "content_filter",
        // end_turn, stop_sequence, pause_turn and reasons added later.
        _ => "stop",
    }
}

#[derive(Deserialize)]
struct MessageResponse {
    id: String,
    /// Always `message` for a Messages API answer.
    #[serde(rename = "type")]
    object: String,
    /// Required: an answer without content blocks is not a message.
    content: Vec<ContentBlock>,
    #[serde(default)]
    stop_reason: Option<String>,
    #[serde(default)]
    stop_details: Option<StopDetails>,
    #[serde(default)]
    usage: AnthropicUsage,
}

#[derive(Deserialize)]
struct StopDetails {
    #[serde(default)]
    explanation: Option<String>,
}

#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum ContentBlock {
    Text {
        text: String,
    },
    ToolUse {
        id: String,
        name: String,
        #[serde(default)]
        input: Value,
    },
    /// Thinking, redacted thinking, server tool blocks: not part of OpenAI's message.
    #[serde(other)]
    Other,
}

#[derive(Deserialize)]
struct ErrorBody {
    error: ErrorDetail,
}

#[derive(Deserialize)]
struct ErrorDetail {
    #[serde(rename = "type", default)]
    kind: String,
    #[serde(default)]
    message: String,
}

impl Adapter for Anthropic {
    fn request(
        &self,
        target: &Target<'_>,
        chat: &ChatRequest,
    ) -> Result<http::Request<Body>, GatewayError> {
        let body = request::build(chat, target.model)?;
        post_json(
            format!("{}/messages", target.base_url),
            "x-api-key",
            target.api_key,
            &[("anthropic-version", API_VERSION)],
            chat.is_stream(),
            &body,
        )
    }

    fn response(&self, body: &[u8], logical_model: &str) -> Result<Bytes, GatewayError> {
        let msg: MessageResponse = serde_json::from_slice(body).map_err(|e| {
            bad_upstream(format!(
                "Anthropic sent a response that is not a message: {e}"
            ))
        })?;
        if msg.object != "message" {
            return Err(bad_upstream(format!(
                "Anthropic sent a response of type `{}`, not a message",
                msg.object
            )));
        }
        let mut choice = Choice {
            finish_reason: finish_reason(msg.stop_reason.as_deref()),
            ..Choice::default()
        };
        for block in msg.content {
            match block {
                ContentBlock::Text { text } => match &mut choice.content {
                    Some(c) => c.push_str(&text),
                    None => choice.content = Some(text),
                },
                ContentBlock::ToolUse { id, name, input } => {
                    let args = match input {
                        Value::Null => "{}".to_string(),
                        v => v.to_string(),
                    };
                    choice.tool_calls.push((id, name, args));
                }
                ContentBlock::Other => {}
            }
        }
        if choice.finish_reason == "content_filter" {
            choice.refusal = msg.stop_details.and_then(|d| d.explanation);
        }
        let output = msg.usage.output_tokens.unwrap_or(0);
        let usage = Usage::new(msg.usage.prompt().unwrap_or(0), output);
        Ok(completion(&msg.id, logical_model, &[choice], usage))
    }

    fn stream(&self, ctx: StreamContext) -> Box<dyn StreamTranscoder> {
        Box::new(stream::AnthropicStream::new(ctx))
    }

    /// Maps an error answer like [`upstream_error`], reading Anthropic's body
    /// `{"type":"error","error":{"type","message"}}`. HTTP 529 (`overloaded_error`)
    /// becomes a retryable 502.
    fn error(&self, status: u16, headers: &HeaderMap, body: &[u8]) -> GatewayError {
        let mut e = upstream_error(status, headers, body);
        if let Ok(b) = serde_json::from_slice::<ErrorBody>(body) {
            if status == 529 || b.error.kind == "overloaded_error" {
                e.message = format!(
                    "Anthropic is overloaded (HTTP {status}, {}): {}",
                    b.error.kind, b.error.message
                );
                e = e.with_code(crate::error::Code::UpstreamOverloaded);
            } else if !b.error.kind.is_empty() && status != 401 && status != 403 {
                e.message = format!("{} ({})", e.message, b.error.kind);
            }
        }
        e
    }
}

#[cfg(test)]
mod tests;
