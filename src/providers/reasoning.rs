//! Reasoning ("thinking") in Switchyard's canonical, OpenAI-shaped messages.
//!
//! OpenAI's Chat Completions API has no field for a model's visible reasoning, so
//! Switchyard uses the shape OpenAI-compatible servers and clients already read
//! (DeepSeek's API, vLLM and LiteLLM):
//!
//! - `reasoning_content` (string) on the assistant `message` and on stream `delta`s:
//!   the reasoning text, for display.
//! - `thinking_blocks` (array) on the assistant `message` and on stream `delta`s: the
//!   provider's reasoning blocks with their signatures, exactly as the provider sent
//!   them, as LiteLLM carries Anthropic's: `{"type":"thinking","thinking":..,
//!   "signature":..}` and `{"type":"redacted_thinking","data":..}`. A client that
//!   sends them back on the assistant message of a replayed conversation gets them
//!   replayed to the provider byte for byte (Anthropic requires this for tool use with
//!   extended thinking). In a stream each block arrives whole, once, in the delta that
//!   closes it.

use std::borrow::Cow;

use serde::Serialize;
use serde_json::Value;

use super::common::{field_error, required_str};
use crate::api::Message;
use crate::error::{Code, GatewayError};

/// One reasoning block with what is needed to replay it (see the module doc).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub(crate) enum ThinkingBlock<'a> {
    /// Reasoning text and the provider's signature over it.
    Thinking {
        /// The reasoning text.
        thinking: Cow<'a, str>,
        /// The provider's opaque signature (empty when the provider sent none).
        signature: Cow<'a, str>,
    },
    /// Reasoning the provider encrypted; `data` is opaque.
    RedactedThinking {
        /// The encrypted reasoning.
        data: Cow<'a, str>,
    },
}

/// The `thinking_blocks` of assistant message `i` (empty when it has none), borrowed.
///
/// # Errors
/// 400 naming the field when `thinking_blocks` is not an array, or an entry has an
/// unknown `type` or lacks its string fields (`thinking` and `signature`, or `data`).
pub(crate) fn thinking_blocks(
    m: &Message,
    i: usize,
) -> Result<Vec<ThinkingBlock<'_>>, GatewayError> {
    let Some(blocks) = m.extra.get("thinking_blocks").filter(|v| !v.is_null()) else {
        return Ok(Vec::new());
    };
    let blocks = blocks.as_array().ok_or_else(|| {
        field_error(
            Code::InvalidType,
            format!("messages[{i}].thinking_blocks"),
            "must be an array",
        )
    })?;
    let mut out = Vec::with_capacity(blocks.len());
    for (k, b) in blocks.iter().enumerate() {
        let text = |name: &str| {
            required_str(b.get(name), || {
                format!("messages[{i}].thinking_blocks[{k}].{name}")
            })
        };
        out.push(match b.get("type").and_then(Value::as_str) {
            Some("thinking") => ThinkingBlock::Thinking {
                thinking: Cow::Borrowed(text("thinking")?),
                signature: Cow::Borrowed(text("signature")?),
            },
            Some("redacted_thinking") => ThinkingBlock::RedactedThinking {
                data: Cow::Borrowed(text("data")?),
            },
            _ => {
                return Err(field_error(
                    Code::InvalidValue,
                    format!("messages[{i}].thinking_blocks[{k}].type"),
                    "must be \"thinking\" or \"redacted_thinking\"",
                ));
            }
        });
    }
    Ok(out)
}

/// OpenAI's `reasoning_effort` (OpenAI API reference, "Create chat completion").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Effort {
    /// `"none"`: no reasoning.
    None,
    /// `"minimal"`.
    Minimal,
    /// `"low"`.
    Low,
    /// `"medium"`.
    Medium,
    /// `"high"`.
    High,
    /// `"xhigh"`, the newest OpenAI models' step above high ("Create chat
    /// completion": none, minimal, low, medium, high and xhigh).
    XHigh,
}

/// Smallest extended-thinking budget Claude takes, in tokens (Anthropic's
/// "Extended thinking"; the same on Bedrock).
pub(crate) const MIN_THINKING_BUDGET: u64 = 1024;

/// Claude's thinking budget, in tokens, for each OpenAI `reasoning_effort` (`none`
/// turns thinking off): minimal 1024 (the minimum), low 2048, medium 8192, high
/// 16384, xhigh 24576 (with the default 4,096 tokens of answer room, within the
/// 32,000-token output cap of Claude Opus 4, the lowest of the thinking models).
/// Used by the Anthropic adapter and by Bedrock for Claude models.
pub(crate) fn claude_budget(effort: Effort) -> Option<u64> {
    match effort {
        Effort::None => None,
        Effort::Minimal => Some(MIN_THINKING_BUDGET),
        Effort::Low => Some(2048),
        Effort::Medium => Some(8192),
        Effort::High => Some(16384),
        Effort::XHigh => Some(24576),
    }
}

/// The thinking budget of a client's `thinking` object `t` (Anthropic's shape, which
/// Bedrock takes for Claude too): `Some` for `"type": "enabled"` with its
/// `budget_tokens`, `None` for any other type (`"disabled"`).
///
/// # Errors
/// 400 naming the field: `thinking.type` absent (`missing_required_parameter`), or
/// an `enabled` one whose `budget_tokens` is absent (`missing_required_parameter`),
/// not an integer (`invalid_type`) or below [`MIN_THINKING_BUDGET`]
/// (`integer_below_min_value`).
pub(crate) fn client_budget(t: &Value) -> Result<Option<u64>, GatewayError> {
    match t.get("type").and_then(Value::as_str) {
        Some("enabled") => {
            let b = t.get("budget_tokens").filter(|b| !b.is_null());
            let code = match b {
                None => Code::MissingRequiredParameter,
                Some(v) => match v.as_u64() {
                    Some(n) if n >= MIN_THINKING_BUDGET => return Ok(Some(n)),
                    Some(_) => Code::IntegerBelowMinValue,
                    None if v.is_i64() => Code::IntegerBelowMinValue,
                    None => Code::InvalidType,
                },
            };
            Err(field_error(
                code,
                "thinking.budget_tokens".into(),
                "is required with type \"enabled\" and must be an integer of at least 1024",
            ))
        }
        Some(_) => Ok(None),
        None => Err(field_error(
            Code::MissingRequiredParameter,
            "thinking.type".into(),
            "is required (\"enabled\" with `budget_tokens`, or \"disabled\")",
        )),
    }
}

/// The Claude thinking budget `reasoning_effort` asks for (Anthropic directly and on
/// Bedrock), `None` for none, for `"none"`, and when the conversation's last
/// assistant message made tool calls without its `thinking_blocks`.
///
/// Why the last: with thinking on, Claude refuses a tool-use turn replayed without
/// its thinking ("When `thinking` is enabled, a final `assistant` message must
/// start with a thinking block"; Anthropic's "Extended thinking with tool use"),
/// and an OpenAI client never sends `thinking_blocks` back (OpenAI's Chat
/// Completions has no such field): the second turn of every tool loop asked with
/// `reasoning_effort` was a 400. Such a request runs without thinking, as the error
/// itself advises. A client's own `thinking` object is its own choice and is not
/// changed.
///
/// # Errors
/// As [`effort`].
pub(crate) fn claude_effort_budget(
    chat: &crate::api::ChatRequest,
) -> Result<Option<u64>, GatewayError> {
    let Some(budget) = effort(chat)?.and_then(claude_budget) else {
        return Ok(None);
    };
    let unreplayed = chat
        .messages
        .iter()
        .rev()
        .find(|m| m.role == "assistant")
        .is_some_and(|m| {
            let non_empty = |k: &str| {
                m.extra
                    .get(k)
                    .and_then(Value::as_array)
                    .is_some_and(|a| !a.is_empty())
            };
            non_empty("tool_calls") && !non_empty("thinking_blocks")
        });
    if unreplayed {
        tracing::debug!(
            "reasoning_effort not applied: the last assistant turn made tool calls without its thinking_blocks, which Claude refuses with thinking on"
        );
        return Ok(None);
    }
    Ok(Some(budget))
}

/// Reads `reasoning_effort` from the request (`None` when absent or null).
///
/// # Errors
/// 400 naming `reasoning_effort` for anything but none, minimal, low, medium, high,
/// xhigh.
pub(crate) fn effort(chat: &crate::api::ChatRequest) -> Result<Option<Effort>, GatewayError> {
    let v = match chat.extra.get("reasoning_effort") {
        None | Some(Value::Null) => return Ok(None),
        Some(v) => v,
    };
    Ok(Some(match v.as_str() {
        Some("none") => Effort::None,
        Some("minimal") => Effort::Minimal,
        Some("low") => Effort::Low,
        Some("medium") => Effort::Medium,
        Some("high") => Effort::High,
        Some("xhigh") => Effort::XHigh,
        _ => {
            return Err(GatewayError::invalid_param(
                Code::InvalidValue,
                "reasoning_effort",
                "`reasoning_effort` must be one of none, minimal, low, medium, high, xhigh",
            ))
        }
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::providers::testing::chat;
    use serde_json::json;

    #[test]
    fn thinking_blocks_are_read_borrowed_and_checked() {
        let c = chat(&json!({"model": "m", "messages": [
            {"role": "assistant", "content": "x", "thinking_blocks": [
                {"type": "thinking", "thinking": "a\nb", "signature": "c2ln"},
                {"type": "redacted_thinking", "data": "ZW5j"}
            ]},
            {"role": "assistant", "content": "x", "thinking_blocks": [{"type": "thinking", "thinking": "t"}]},
            {"role": "assistant", "content": "x", "thinking_blocks": [{"type": "other"}]}
        ]}));
        let b = thinking_blocks(&c.messages[0], 0).unwrap();
        assert_eq!(
            serde_json::to_value(&b).unwrap(),
            json!([
                {"type": "thinking", "thinking": "a\nb", "signature": "c2ln"},
                {"type": "redacted_thinking", "data": "ZW5j"}
            ])
        );
        let e = thinking_blocks(&c.messages[1], 1).unwrap_err();
        assert_eq!(
            e.param.as_deref(),
            Some("messages[1].thinking_blocks[0].signature")
        );
        let e = thinking_blocks(&c.messages[2], 2).unwrap_err();
        assert_eq!(
            e.param.as_deref(),
            Some("messages[2].thinking_blocks[0].type")
        );
    }

    #[test]
    fn reasoning_effort_values() {
        let with = |v: Value| {
            chat(
                &json!({"model": "m", "reasoning_effort": v, "messages": [{"role": "user", "content": "hi"}]}),
            )
        };
        assert_eq!(effort(&with(json!("low"))).unwrap(), Some(Effort::Low));
        assert_eq!(
            effort(&with(json!("minimal"))).unwrap(),
            Some(Effort::Minimal)
        );
        assert_eq!(effort(&with(Value::Null)).unwrap(), None);
        // Found by the translation attack of 2026-12-08: OpenAI's newest value was
        // refused as an invalid one.
        assert_eq!(effort(&with(json!("xhigh"))).unwrap(), Some(Effort::XHigh));
        assert_eq!(claude_budget(Effort::XHigh), Some(24576));
        let e = effort(&with(json!("max"))).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("reasoning_effort"));
    }
}
