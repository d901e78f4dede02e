//! Anthropic Messages API.
//!
//! Source: Anthropic API reference, "Messages" (`POST /v1/messages`, request and
//! response bodies), "Streaming Messages" (event types), "Errors" (error body and
//! HTTP 529 `overloaded_error`) and "Versioning" (`anthropic-version: 2023-06-01`).
//!
//! Requests go to `POST {base_url}/messages` with the key in `x-api-key`. The OpenAI
//! request is translated in `request`, the streamed answer in `stream`; the whole
//! answer and error bodies here.

mod content;
mod request;
mod stream;

pub use request::{DEFAULT_MAX_TOKENS, MIN_THINKING_BUDGET};

use bytes::Bytes;
use http::HeaderMap;
use serde::Deserialize;
use serde_json::Value;

use super::common::{bad_upstream, completion, post_json, Choice};
use super::reasoning::ThinkingBlock;
use super::{upstream_error, Adapter, StreamContext, StreamTranscoder, Target};
use crate::api::{ChatRequest, PromptTokensDetails, Usage};
use crate::body::Body;
use crate::error::{ErrorKind, GatewayError};

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
    /// Takes the counts of a later event (`message_delta`) that are present and not
    /// zero. Anthropic's `message_delta` usage is cumulative, but some servers send
    /// `input_tokens: 0` (or leave it out) there: that must not erase the real count
    /// from `message_start`.
    fn update(&mut self, later: &AnthropicUsage) {
        let keep = |old: &mut Option<u64>, new: Option<u64>| {
            if let Some(n) = new.filter(|&n| n > 0) {
                *old = Some(n);
            }
        };
        keep(&mut self.input_tokens, later.input_tokens);
        keep(&mut self.output_tokens, later.output_tokens);
        keep(
            &mut self.cache_creation_input_tokens,
            later.cache_creation_input_tokens,
        );
        keep(
            &mut self.cache_read_input_tokens,
            later.cache_read_input_tokens,
        );
    }

    /// OpenAI usage: `prompt_tokens` is every input token, cache reads and writes
    /// included (OpenAI counts cached tokens in `prompt_tokens`; LiteLLM adds both
    /// the same way). `prompt_tokens_details.cached_tokens` is the cache read and
    /// `cache_creation_tokens` the cache write, present when Anthropic reported cache
    /// counts. `None` when no input count arrived.
    fn to_openai(self) -> Option<Usage> {
        let read = self.cache_read_input_tokens;
        let creation = self.cache_creation_input_tokens;
        if self.input_tokens.is_none() && read.is_none() && creation.is_none() {
            return None;
        }
        let prompt = self.input_tokens.unwrap_or(0) + read.unwrap_or(0) + creation.unwrap_or(0);
        let mut usage = Usage::new(prompt, self.output_tokens.unwrap_or(0));
        if read.is_some() || creation.is_some() {
            usage.prompt_tokens_details = Some(PromptTokensDetails {
                cached_tokens: read.unwrap_or(0),
                cache_creation_tokens: creation,
            });
        }
        Some(usage)
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
    Thinking {
        thinking: String,
        #[serde(default)]
        signature: String,
    },
    RedactedThinking {
        data: String,
    },
    /// Server tool blocks and block types added later: not part of OpenAI's message.
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
    /// `details` of a 429 or stream error (`{"error_code": ...}`).
    #[serde(default)]
    details: Option<ErrorCode>,
}

#[derive(Deserialize)]
struct ErrorCode {
    #[serde(default)]
    error_code: Option<String>,
}

impl ErrorDetail {
    /// Why this error (an HTTP error body's or a stream's `error` event's) says
    /// Switchyard's account with Anthropic cannot be served until someone pays or
    /// raises a limit, rather than anything about the request or a passing rate
    /// limit; `None` when it does not. Anthropic API, "Errors" and "Rate limits":
    ///
    /// - `billing_error` (HTTP 402): "There's an issue with your billing or payment
    ///   information";
    /// - `rate_limit_error` with `details.error_code` `enforced_spend_limit_reached`:
    ///   the organization reached its tier's monthly spend cap ("API usage pauses
    ///   until 00:00 UTC on the first day of the next month"; no `retry-after`,
    ///   and "Retrying, including the SDKs' automatic retries, fails" until then);
    /// - `invalid_request_error` saying "You have reached your specified (workspace)
    ///   API usage limits": "The API also returns a 400 when usage reaches an
    ///   organization or workspace spend limit you set";
    /// - any error saying "credit balance is too low" (the prepaid credits are spent;
    ///   [`upstream_error`] reads it in HTTP answers from any provider).
    fn out_of_quota(&self) -> Option<&'static str> {
        let lower = self.message.to_ascii_lowercase();
        if self.kind == "billing_error" {
            Some("billing_error")
        } else if self.details.as_ref().and_then(|d| d.error_code.as_deref())
            == Some("enforced_spend_limit_reached")
        {
            Some("enforced_spend_limit_reached")
        } else if lower.contains("credit balance is too low") {
            Some("credit balance too low")
        } else if self.kind == "invalid_request_error"
            && lower.contains("you have reached your specified")
            && lower.contains("api usage limits")
        {
            Some("spend limit reached")
        } else {
            None
        }
    }

    /// The client's error for an account out of quota ([`ErrorDetail::out_of_quota`]
    /// said `why`), reported by Anthropic `at` ("HTTP 429", "mid-stream"): 429
    /// `insufficient_quota` with Anthropic's message, tried on the next endpoint and
    /// pausing this one ([`crate::error::ErrorKind::QuotaExceeded`]).
    fn quota_error(&self, why: &str, at: &str) -> GatewayError {
        use crate::error::{bounded, Code, ErrorKind};
        GatewayError::new(
            ErrorKind::QuotaExceeded,
            format!(
                "upstream account is out of quota ({at}, {why}): {}",
                bounded(&self.message, 2_000)
            ),
        )
        .with_code(Code::InsufficientQuota)
    }
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
        let msg: MessageResponse = crate::api::read_json(body).map_err(|e| {
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
                ContentBlock::Thinking {
                    thinking,
                    signature,
                } => {
                    choice
                        .reasoning_content
                        .get_or_insert_with(String::new)
                        .push_str(&thinking);
                    choice.thinking_blocks.push(ThinkingBlock::Thinking {
                        thinking: thinking.into(),
                        signature: signature.into(),
                    });
                }
                ContentBlock::RedactedThinking { data } => {
                    choice
                        .thinking_blocks
                        .push(ThinkingBlock::RedactedThinking { data: data.into() });
                }
                ContentBlock::Other => {}
            }
        }
        if choice.finish_reason == "content_filter" {
            choice.refusal = msg.stop_details.and_then(|d| d.explanation);
        }
        let usage = msg
            .usage
            .to_openai()
            .unwrap_or_else(|| Usage::new(0, msg.usage.output_tokens.unwrap_or(0)));
        Ok(completion(&msg.id, logical_model, &[choice], usage))
    }

    fn stream(&self, ctx: StreamContext) -> Box<dyn StreamTranscoder> {
        Box::new(stream::AnthropicStream::new(ctx))
    }

    /// Maps an error answer like [`upstream_error`] (status, retry class, wait),
    /// reading Anthropic's body `{"type":"error","error":{"type","message"}}`:
    ///
    /// - a client error (4xx but 401/403/404/429): Anthropic's `message` reaches the
    ///   client, and its error `type` (`invalid_request_error`, `request_too_large`,
    ///   ...) becomes the error `code`, unless it is a prompt over the context window
    ///   (`context_length_exceeded`). Its 400 "Your credit balance is too low" is
    ///   not the client's: an exhausted quota, as [`upstream_error`] reads it.
    /// - any answer saying the account is out of quota or over a spend limit
    ///   (`ErrorDetail::out_of_quota`: a 400 for a spend limit the organization
    ///   set, a 429 `enforced_spend_limit_reached` for its tier's cap, a
    ///   `billing_error`): 429 `insufficient_quota`, the next endpoint at once and
    ///   this one paused, not the client's request nor a rate limit to wait out.
    /// - 5xx, and HTTP 529 `overloaded_error` (a retryable 502 with code
    ///   `upstream_overloaded`): the body is never relayed (it may hold anything, a
    ///   traceback included); the message names the status and Anthropic's error
    ///   type only.
    fn error(&self, status: u16, headers: &HeaderMap, body: &[u8]) -> GatewayError {
        use crate::error::{bounded, Code};
        let parsed = serde_json::from_slice::<ErrorBody>(body).ok();
        if let Some((b, why)) = parsed
            .as_ref()
            .filter(|_| (400..500).contains(&status) && !matches!(status, 401 | 403 | 404))
            .and_then(|b| Some((b, b.error.out_of_quota()?)))
        {
            return b.error.quota_error(why, &format!("HTTP {status}"));
        }
        let mut e = upstream_error(status, headers, body);
        let kind = parsed
            .as_ref()
            .map(|b| bounded(&b.error.kind, 64).into_owned())
            .filter(|k| !k.is_empty() && k.bytes().all(|b| b.is_ascii_lowercase() || b == b'_'));
        if status >= 500 || kind.as_deref() == Some("overloaded_error") {
            let named = kind
                .as_deref()
                .map(|k| format!(", {k}"))
                .unwrap_or_default();
            e.message = if status == 529 || kind.as_deref() == Some("overloaded_error") {
                e = e.with_code(Code::UpstreamOverloaded);
                format!("Anthropic is overloaded (HTTP {status}{named}); retry later")
            } else {
                format!("Anthropic answered an error (HTTP {status}{named})")
            };
        } else if let Some(kind) = kind.filter(|_| {
            matches!(
                e.kind,
                ErrorKind::InvalidRequest | ErrorKind::ContextWindowExceeded
            )
        }) {
            if e.code != Some(Code::ContextLengthExceeded) {
                e = e.with_code(Code::provider(&kind));
            }
        }
        e
    }
}

#[cfg(test)]
mod fidelity_tests;
#[cfg(test)]
mod tests;
