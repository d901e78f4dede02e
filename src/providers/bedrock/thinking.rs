//! Extended thinking for Anthropic models on Bedrock: the client's request fields →
//! `additionalModelRequestFields.thinking`, and Converse `reasoningContent` blocks
//! → `reasoning_content` and `thinking_blocks` (see [`crate::providers::reasoning`]).
//!
//! Source: Amazon Bedrock user guide, "Extended thinking" for Claude (the Anthropic
//! `thinking` object `{type, budget_tokens}` goes in `additionalModelRequestFields`;
//! `budget_tokens` at least 1024 and below `inferenceConfig.maxTokens`, which counts
//! the thinking), and the API reference's `ReasoningContentBlock`
//! (`reasoningText {text, signature}` or `redactedContent`). Bedrock hands
//! `additionalModelRequestFields` to the model, so only Claude models (a model id
//! holding `anthropic.claude`, which covers inference profiles such as
//! `us.anthropic.claude-...` and ARNs naming them) get it; for other models the
//! fields are dropped with a debug note.
//!
//! The request side follows the Anthropic adapter: the client's `thinking` passes
//! through (an `enabled` one checked), else OpenAI's `reasoning_effort` becomes a
//! budget with the same table; with a budget and no client cap, `maxTokens` is the
//! budget plus [`DEFAULT_ANSWER_TOKENS`]. Replaying `thinking_blocks` on assistant
//! messages is in [`super::request`], the stream's reasoning deltas in
//! [`super::stream`].

use std::borrow::Cow;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::api::ChatRequest;
use crate::error::{Code, GatewayError};
use crate::providers::common::{field_error, Choice};
use crate::providers::reasoning::{self, ThinkingBlock};

/// Room for the answer beside the thinking budget when the client sets no output
/// cap, in tokens (the Anthropic adapter's default `max_tokens`).
pub const DEFAULT_ANSWER_TOKENS: u64 = 4096;

/// Whether Bedrock model id `model` is an Anthropic Claude model.
pub(super) fn is_claude(model: &str) -> bool {
    model.contains("anthropic.claude")
}

/// `additionalModelRequestFields` carrying `thinking`.
#[derive(Serialize)]
pub(super) struct Fields<'a> {
    thinking: Thinking<'a>,
}

/// `thinking`: the client's own object, or one built from `reasoning_effort`.
#[derive(Serialize)]
#[serde(untagged)]
enum Thinking<'a> {
    Client(&'a Value),
    Budget {
        #[serde(rename = "type")]
        kind: &'static str,
        budget_tokens: u64,
    },
}

/// What thinking adds to a Converse request.
pub(super) struct Plan<'a> {
    /// The `additionalModelRequestFields`.
    pub(super) fields: Fields<'a>,
    /// `inferenceConfig.maxTokens` (the client's cap when it has one).
    pub(super) max_tokens: Option<u64>,
}

/// The thinking of `chat` for Bedrock model `model`; `None` when it asks for none
/// or the model is not Claude.
///
/// # Errors
/// 400 naming the field: `thinking` without `type`, an `enabled` one without a
/// `budget_tokens` of at least 1024, a `reasoning_effort` that is not an OpenAI
/// value, or an output cap (`max_tokens` / `max_completion_tokens`) not above the
/// budget.
pub(super) fn plan<'a>(
    chat: &'a ChatRequest,
    model: &str,
) -> Result<Option<Plan<'a>>, GatewayError> {
    let client = chat.extra.get("thinking").filter(|v| !v.is_null());
    let effort = reasoning::effort(chat)?;
    if !is_claude(model) {
        if client.is_some() || effort.is_some() {
            tracing::debug!(
                model = %crate::error::bounded(model, 128),
                "thinking and reasoning_effort dropped: Bedrock takes `thinking` for Claude models only"
            );
        }
        return Ok(None);
    }
    let (thinking, budget) = match client {
        Some(t) => {
            let budget = reasoning::client_budget(t)?;
            if effort.is_some() {
                tracing::debug!("reasoning_effort ignored: the request sets `thinking`");
            }
            (Thinking::Client(t), budget)
        }
        None => match reasoning::claude_effort_budget(chat)? {
            Some(b) => (
                Thinking::Budget {
                    kind: "enabled",
                    budget_tokens: b,
                },
                Some(b),
            ),
            None => return Ok(None),
        },
    };
    let max_tokens = match (budget, chat.output_cap()) {
        (None, cap) => cap,
        (Some(b), None) => Some(b + DEFAULT_ANSWER_TOKENS),
        (Some(b), Some(cap)) if cap > b => Some(cap),
        (Some(b), Some(cap)) => {
            let name = if chat.max_completion_tokens.is_some() {
                "max_completion_tokens"
            } else {
                "max_tokens"
            };
            return Err(field_error(
                Code::IntegerBelowMinValue,
                name.into(),
                &format!(
                    "is {cap}, but Bedrock counts the thinking budget of {b} tokens in it; set it above {b}"
                ),
            ));
        }
    };
    Ok(Some(Plan {
        fields: Fields { thinking },
        max_tokens,
    }))
}

/// `reasoningContent` of a Converse answer: `reasoningText {text, signature}` or
/// `redactedContent` (base64 in JSON).
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct ReasoningBlock {
    #[serde(default)]
    reasoning_text: Option<ReasoningText>,
    #[serde(default)]
    redacted_content: Option<String>,
}

#[derive(Deserialize)]
struct ReasoningText {
    #[serde(default)]
    text: String,
    #[serde(default)]
    signature: Option<String>,
}

/// Adds an answer's reasoning block to `c`: its text to `reasoning_content`, and the
/// block with its signature (or the redacted data) to `thinking_blocks`.
pub(super) fn add_to_choice(c: &mut Choice, r: ReasoningBlock) {
    if let Some(t) = r.reasoning_text {
        match &mut c.reasoning_content {
            Some(s) => s.push_str(&t.text),
            None => c.reasoning_content = Some(t.text.clone()),
        }
        c.thinking_blocks.push(ThinkingBlock::Thinking {
            thinking: Cow::Owned(t.text),
            signature: Cow::Owned(t.signature.unwrap_or_default()),
        });
    } else if let Some(data) = r.redacted_content {
        c.thinking_blocks
            .push(ThinkingBlock::RedactedThinking { data: data.into() });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::providers::testing::chat;
    use serde_json::json;

    const CLAUDE: &str = "us.anthropic.claude-sonnet-4-20250514-v1:0";

    fn fields(body: Value, model: &str) -> Result<Option<(Value, Option<u64>)>, GatewayError> {
        let c = chat(&body);
        Ok(plan(&c, model)?.map(|p| (serde_json::to_value(&p.fields).unwrap(), p.max_tokens)))
    }

    fn hi(extra: Value) -> Value {
        let mut v = json!({"model": "m", "messages": [{"role": "user", "content": "hi"}]});
        for (k, x) in extra.as_object().unwrap() {
            v[k] = x.clone();
        }
        v
    }

    #[test]
    fn reasoning_effort_becomes_a_budget_with_room_for_the_answer() {
        for (effort, budget) in [
            ("minimal", 1024),
            ("low", 2048),
            ("medium", 8192),
            ("high", 16384),
            ("xhigh", 24576),
        ] {
            let (f, max) = fields(hi(json!({"reasoning_effort": effort})), CLAUDE)
                .unwrap()
                .unwrap();
            assert_eq!(
                f,
                json!({"thinking": {"type": "enabled", "budget_tokens": budget}})
            );
            assert_eq!(max, Some(budget + DEFAULT_ANSWER_TOKENS));
        }
        assert!(fields(hi(json!({"reasoning_effort": "none"})), CLAUDE)
            .unwrap()
            .is_none());
        let (_, max) = fields(
            hi(json!({"reasoning_effort": "low", "max_tokens": 3000})),
            CLAUDE,
        )
        .unwrap()
        .unwrap();
        assert_eq!(max, Some(3000));
    }

    /// Found by the translation attack of 2026-12-07 (as for Anthropic directly):
    /// the second turn of a tool loop asked with `reasoning_effort` was refused,
    /// its replayed tool-use turn lacking the thinking Claude requires.
    #[test]
    fn reasoning_effort_is_not_applied_to_a_tool_turn_replayed_without_thinking() {
        let body = json!({"model": "m", "reasoning_effort": "low", "messages": [
            {"role": "user", "content": "weather?"},
            {"role": "assistant", "content": null, "tool_calls": [
                {"id": "t1", "type": "function", "function": {"name": "get", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": "t1", "content": "sunny"}]});
        assert!(fields(body, CLAUDE).unwrap().is_none());
    }

    #[test]
    fn the_clients_thinking_passes_through_and_wins_over_reasoning_effort() {
        let t = json!({"type": "enabled", "budget_tokens": 2000});
        let (f, max) = fields(
            hi(json!({"thinking": t, "reasoning_effort": "high", "max_completion_tokens": 5000})),
            CLAUDE,
        )
        .unwrap()
        .unwrap();
        assert_eq!(f, json!({"thinking": t}));
        assert_eq!(max, Some(5000));
        let (f, max) = fields(hi(json!({"thinking": {"type": "adaptive"}})), CLAUDE)
            .unwrap()
            .unwrap();
        assert_eq!(f, json!({"thinking": {"type": "adaptive"}}));
        assert_eq!(max, None);
    }

    #[test]
    fn bad_thinking_requests_are_400_naming_the_field() {
        let param = |body: Value| fields(body, CLAUDE).err().and_then(|e| e.param);
        assert_eq!(
            param(hi(
                json!({"thinking": {"type": "enabled", "budget_tokens": 512}})
            ))
            .as_deref(),
            Some("thinking.budget_tokens")
        );
        assert_eq!(
            param(hi(json!({"thinking": {"budget_tokens": 2000}}))).as_deref(),
            Some("thinking.type")
        );
        assert_eq!(
            param(hi(
                json!({"reasoning_effort": "medium", "max_tokens": 8192})
            ))
            .as_deref(),
            Some("max_tokens")
        );
        assert_eq!(
            param(hi(json!({"reasoning_effort": "extreme"}))).as_deref(),
            Some("reasoning_effort")
        );
    }

    #[test]
    fn models_other_than_claude_get_no_thinking() {
        assert!(!is_claude("amazon.nova-pro-v1:0"));
        assert!(is_claude(
            "arn:aws:bedrock:us-east-1::foundation-model/anthropic.claude-3-7-sonnet-20250219-v1:0"
        ));
        let body = hi(
            json!({"reasoning_effort": "high", "thinking": {"type": "enabled", "budget_tokens": 2000}}),
        );
        assert!(fields(body, "amazon.nova-pro-v1:0").unwrap().is_none());
    }

    #[test]
    fn the_converse_body_carries_thinking_for_claude_only() {
        let adapter = super::super::Bedrock::with_keys(
            "us-east-1",
            super::super::AwsKeys {
                access_key_id: "AKIDEXAMPLE".into(),
                secret_access_key: "secret".into(),
                session_token: None,
            },
        );
        let c = chat(&hi(json!({"reasoning_effort": "medium", "temperature": 1})));
        let body = |model: &str| {
            let target = crate::providers::Target {
                base_url: "",
                model,
                api_key: None,
            };
            crate::providers::testing::build(&adapter, &target, &c).1
        };
        let b = body(CLAUDE);
        assert_eq!(
            b["additionalModelRequestFields"],
            json!({"thinking": {"type": "enabled", "budget_tokens": 8192}})
        );
        assert_eq!(
            b["inferenceConfig"],
            json!({"maxTokens": 8192 + DEFAULT_ANSWER_TOKENS, "temperature": 1.0})
        );
        let b = body("amazon.nova-pro-v1:0");
        assert!(b.get("additionalModelRequestFields").is_none(), "{b}");
        assert_eq!(b["inferenceConfig"], json!({"temperature": 1.0}));
    }

    #[test]
    fn reasoning_blocks_fill_reasoning_content_and_thinking_blocks() {
        let mut c = Choice::default();
        for b in [
            json!({"reasoningText": {"text": "Let me", "signature": "c2ln"}}),
            json!({"redactedContent": "ZW5j"}),
            json!({"reasoningText": {"text": " think."}}),
        ] {
            add_to_choice(&mut c, serde_json::from_value(b).unwrap());
        }
        assert_eq!(c.reasoning_content.as_deref(), Some("Let me think."));
        assert_eq!(
            serde_json::to_value(&c.thinking_blocks).unwrap(),
            json!([
                {"type": "thinking", "thinking": "Let me", "signature": "c2ln"},
                {"type": "redacted_thinking", "data": "ZW5j"},
                {"type": "thinking", "thinking": " think.", "signature": ""}
            ])
        );
    }
}
