//! OpenAI Chat Completions request → Anthropic Messages request body.
//!
//! Source: Anthropic API reference, "Messages" (request body: `system`, `messages`,
//! `tools`, `tool_choice`, `max_tokens`, `stop_sequences`, `temperature` 0 to 1,
//! `top_p`, `top_k`, `metadata.user_id`, `thinking`), "Extended thinking"
//! (`budget_tokens` at least 1024 and below `max_tokens`; thinking blocks replayed
//! first in the assistant turn) and "Prompt caching". Content blocks are built in
//! [`super::content`]. What each OpenAI field becomes is tabled in docs/providers.md.

use serde::Serialize;
use serde_json::Value;

use super::content::{blank, blocks, message_marker, Allow, Block, Markers};
use crate::api::ChatRequest;
use crate::error::{Code, GatewayError};
use crate::providers::common::{
    field_error, function_tools, object_schema, openai_tool_choice, refuse_untranslated,
    required_str, tool_calls, tool_use_id, unsupported_parameter, unsupported_value,
    OpenAiToolChoice,
};
use crate::providers::reasoning::{self, ThinkingBlock};

/// Output cap sent when the client gives none; Anthropic requires `max_tokens`, and
/// 4096 fits every current Claude model's output limit. With extended thinking the
/// default is the thinking budget plus this.
pub const DEFAULT_MAX_TOKENS: u64 = 4096;

/// Smallest thinking budget Anthropic takes, in tokens ("Extended thinking").
pub const MIN_THINKING_BUDGET: u64 = reasoning::MIN_THINKING_BUDGET;

/// OpenAI fields Anthropic has no equivalent for and that do not change what a
/// correct answer looks like: dropped, with a debug log line naming them.
const DROPPED: [&str; 10] = [
    "frequency_penalty",
    "presence_penalty",
    "seed",
    "logit_bias",
    "store",
    "metadata",
    "service_tier",
    "prediction",
    "verbosity",
    "prompt_cache_key",
];

/// The Messages request body, borrowing from the client's request.
#[derive(Serialize)]
pub(super) struct Outgoing<'a> {
    model: &'a str,
    max_tokens: u64,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    system: Vec<Block<'a>>,
    messages: Vec<Turn<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    temperature: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    top_p: Option<&'a Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    top_k: Option<&'a Value>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    stop_sequences: Vec<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    stream: Option<bool>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tools: Vec<Tool<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_choice: Option<ToolChoice<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    metadata: Option<Metadata<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    thinking: Option<Thinking<'a>>,
}

/// `metadata.user_id`, "an external identifier for the user who is associated with
/// the request ... Anthropic may use this id to help detect abuse": OpenAI's
/// `safety_identifier` ("A stable identifier used to help detect users of your
/// application that may be violating OpenAI's usage policies"), or the older `user`
/// it replaces.
#[derive(Serialize)]
struct Metadata<'a> {
    user_id: &'a str,
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

/// One turn: `user` or `assistant` with its content blocks.
#[derive(Serialize)]
struct Turn<'a> {
    role: &'static str,
    content: Vec<Block<'a>>,
}

#[derive(Serialize)]
struct Tool<'a> {
    name: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    description: Option<&'a str>,
    /// As [`object_schema`] makes it.
    input_schema: std::borrow::Cow<'a, Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    cache_control: Option<&'a Value>,
}

#[derive(Serialize)]
struct ToolChoice<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    name: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    disable_parallel_tool_use: Option<bool>,
}

/// Appends `blocks` as a `role` turn, merging into the previous turn of the same role
/// (Anthropic takes alternating turns; consecutive tool results share one user turn).
fn push<'a>(turns: &mut Vec<Turn<'a>>, role: &'static str, blocks: Vec<Block<'a>>) {
    if blocks.is_empty() {
        return;
    }
    match turns.last_mut() {
        Some(t) if t.role == role => t.content.extend(blocks),
        _ => turns.push(Turn {
            role,
            content: blocks,
        }),
    }
}

/// Translates `chat` for upstream model `model`.
///
/// Messages left without content (empty or whitespace-only text, no tool calls) are
/// left out; a trailing assistant turn (a prefill) loses its trailing whitespace,
/// which Anthropic rejects there.
///
/// # Errors
/// 400 naming the field for what Anthropic cannot express: `n` > 1, legacy `function`
/// messages and `functions`, audio or file parts, images outside user and tool
/// messages, image media types Anthropic cannot take, malformed tool calls or
/// thinking blocks, bad cache markers, `temperature` above 1, `response_format` JSON
/// modes, `logprobs`, audio output, web search, a thinking budget under 1024 or not
/// below the output cap, and a conversation with no content at all.
pub(super) fn build<'a>(
    chat: &'a ChatRequest,
    model: &'a str,
) -> Result<Outgoing<'a>, GatewayError> {
    refuse_unsupported(chat)?;
    let mut markers = Markers::default();
    let mut system = Vec::new();
    let mut turns: Vec<Turn<'a>> = Vec::with_capacity(chat.messages.len());
    for (i, m) in chat.messages.iter().enumerate() {
        match m.role.as_str() {
            "system" | "developer" => {
                let mut b = blocks(&m.content, i, Allow::Text, &mut markers)?;
                message_marker(m, i, &mut b, &mut markers)?;
                system.extend(b);
            }
            "user" => {
                let mut b = blocks(&m.content, i, Allow::TextAndImages, &mut markers)?;
                message_marker(m, i, &mut b, &mut markers)?;
                push(&mut turns, "user", b);
            }
            "assistant" => {
                let mut b: Vec<Block<'a>> = reasoning::thinking_blocks(m, i)?
                    .into_iter()
                    .map(|t| match t {
                        ThinkingBlock::Thinking {
                            thinking,
                            signature,
                        } => Block::Thinking {
                            thinking,
                            signature,
                        },
                        ThinkingBlock::RedactedThinking { data } => {
                            Block::RedactedThinking { data }
                        }
                    })
                    .collect();
                if b.is_empty() && m.extra.contains_key("reasoning_content") {
                    tracing::debug!(
                        index = i,
                        "reasoning_content dropped: Anthropic replays reasoning only from signed thinking_blocks"
                    );
                }
                b.extend(blocks(&m.content, i, Allow::Text, &mut markers)?);
                for c in tool_calls(m, i)? {
                    b.push(Block::ToolUse {
                        id: tool_use_id(c.id),
                        name: c.name,
                        input: c.arguments,
                        cache_control: None,
                    });
                }
                message_marker(m, i, &mut b, &mut markers)?;
                push(&mut turns, "assistant", b);
            }
            "tool" => {
                let id = required_str(m.extra.get("tool_call_id"), || {
                    format!("messages[{i}].tool_call_id")
                })?;
                let mut content = blocks(&m.content, i, Allow::TextAndImages, &mut markers)?;
                // A marker on a part of a tool message marks the whole result.
                let mut mark = content
                    .iter_mut()
                    .filter_map(Block::marker)
                    .filter_map(Option::take)
                    .last();
                if mark.is_none() {
                    if let Some(v) = m.extra.get("cache_control").filter(|v| !v.is_null()) {
                        mark = markers.check(Some(v), || format!("messages[{i}].cache_control"))?;
                    }
                }
                push(
                    &mut turns,
                    "user",
                    vec![Block::ToolResult {
                        tool_use_id: tool_use_id(id),
                        content,
                        cache_control: mark,
                    }],
                );
            }
            other => {
                return Err(unsupported_value(
                    format!("messages[{i}].role"),
                    format!(
                    "role \"{other}\" is not supported by Anthropic; use tools and role \"tool\""
                ),
                ))
            }
        }
    }
    trim_prefill(&mut turns);
    if turns.is_empty() {
        return Err(field_error(
            Code::UnsupportedValue,
            "messages".into(),
            "has no content Anthropic can take: empty and whitespace-only text is left out, and nothing else is left",
        ));
    }
    let stop_sequences = stop_sequences(chat);
    let (thinking, max_tokens) = thinking(chat)?;
    let tools = tools(chat, &mut markers)?;
    Ok(Outgoing {
        model,
        max_tokens,
        system,
        messages: turns,
        temperature: chat.temperature,
        top_p: chat.extra.get("top_p").filter(|v| v.is_number()),
        top_k: chat.extra.get("top_k").filter(|v| v.is_number()),
        stop_sequences,
        stream: chat.stream.filter(|&s| s),
        tool_choice: tool_choice(chat)?.filter(|_| !tools.is_empty()),
        tools,
        metadata: ["safety_identifier", "user"]
            .into_iter()
            .find_map(|k| chat.extra.get(k).and_then(Value::as_str))
            .map(|user_id| Metadata { user_id }),
        thinking,
    })
}

/// OpenAI `stop` (a string or an array) → `stop_sequences`, leaving out the empty
/// and whitespace-only ones (`"\n"` is common), which Anthropic refuses with a 400
/// ("stop_sequences: each stop sequence must contain non-whitespace"; LiteLLM drops
/// them for the same reason), with a debug log line.
fn stop_sequences(chat: &ChatRequest) -> Vec<&str> {
    let given: Vec<&str> = match chat.extra.get("stop") {
        Some(Value::String(s)) => vec![s.as_str()],
        Some(Value::Array(a)) => a.iter().filter_map(Value::as_str).collect(),
        _ => Vec::new(),
    };
    let kept: Vec<&str> = given.iter().copied().filter(|s| !blank(s)).collect();
    if kept.len() < given.len() {
        tracing::debug!(
            dropped = given.len() - kept.len(),
            "blank stop sequences dropped: Anthropic refuses whitespace-only stop sequences"
        );
    }
    kept
}

/// A final assistant turn is a prefill: Anthropic rejects trailing whitespace there.
fn trim_prefill(turns: &mut Vec<Turn<'_>>) {
    let Some(last) = turns.last_mut().filter(|t| t.role == "assistant") else {
        return;
    };
    if let Some(Block::Text { text, .. }) = last.content.last_mut() {
        *text = text.trim_end();
        if text.is_empty() {
            last.content.pop();
        }
    }
    if last.content.is_empty() {
        turns.pop();
    }
}

/// 400 for request fields Anthropic cannot honour; a debug note for those dropped.
fn refuse_unsupported(chat: &ChatRequest) -> Result<(), GatewayError> {
    if let Some(n) = chat
        .extra
        .get("n")
        .and_then(Value::as_u64)
        .filter(|&n| n > 1)
    {
        return Err(unsupported_value(
            "n",
            format!("Anthropic returns one choice; `n` is {n}"),
        ));
    }
    if let Some(t) = chat.temperature.filter(|&t| t > 1.0) {
        return Err(unsupported_value(
            "temperature",
            format!("`temperature` is {t}; Anthropic takes 0 to 1"),
        ));
    }
    let set = |name: &str| chat.extra.get(name).filter(|v| !v.is_null());
    if let Some(kind) = set("response_format")
        .and_then(|f| f.get("type"))
        .and_then(Value::as_str)
        .filter(|k| *k != "text")
    {
        return Err(unsupported_value(
            "response_format",
            format!("Anthropic has no `response_format` \"{}\"; ask for JSON with a tool and `tool_choice`", crate::error::bounded(kind, 64)),
        ));
    }
    if set("logprobs").and_then(Value::as_bool) == Some(true) {
        return Err(unsupported_parameter(
            "logprobs",
            "Anthropic does not return log probabilities",
        ));
    }
    if set("top_logprobs").is_some() {
        return Err(unsupported_parameter(
            "top_logprobs",
            "Anthropic does not return log probabilities",
        ));
    }
    refuse_untranslated(chat, "Anthropic", "Anthropic answers in text only")?;
    for field in DROPPED {
        if set(field).is_some() {
            tracing::debug!(field, "dropped: Anthropic has no equivalent of this field");
        }
    }
    Ok(())
}

/// `thinking` and `max_tokens`: the client's `thinking` passes through (an
/// `enabled` one checked), else `reasoning_effort` becomes a budget
/// ([`reasoning::claude_budget`]); `reasoning_effort` beside `thinking` is ignored. With a
/// budget, the output cap (which Anthropic, like OpenAI, counts reasoning in) must
/// exceed it; without a client cap it is the budget plus [`DEFAULT_MAX_TOKENS`].
fn thinking(chat: &ChatRequest) -> Result<(Option<Thinking<'_>>, u64), GatewayError> {
    let (thinking, budget) = match chat.extra.get("thinking").filter(|v| !v.is_null()) {
        Some(t) => {
            let budget = reasoning::client_budget(t)?;
            if reasoning::effort(chat)?.is_some() {
                tracing::debug!("reasoning_effort ignored: the request sets `thinking`");
            }
            (Some(Thinking::Client(t)), budget)
        }
        None => {
            let budget = reasoning::claude_effort_budget(chat)?;
            let thinking = budget.map(|budget_tokens| Thinking::Budget {
                kind: "enabled",
                budget_tokens,
            });
            (thinking, budget)
        }
    };
    let max_tokens = match (budget, chat.output_cap()) {
        (None, cap) => cap.unwrap_or(DEFAULT_MAX_TOKENS),
        (Some(b), None) => b + DEFAULT_MAX_TOKENS,
        (Some(b), Some(cap)) if cap > b => cap,
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
                    "is {cap}, but Anthropic counts the thinking budget of {b} tokens in it; set it above {b}"
                ),
            ));
        }
    };
    Ok((thinking, max_tokens))
}

/// OpenAI function tools → Anthropic tools; a tool's `cache_control` is kept, on
/// the tool or inside its `function` (where LiteLLM's users put it, and where the
/// Bedrock adapter reads it too: found by attack, 2026-12-07, silently dropped here).
fn tools<'a>(chat: &'a ChatRequest, markers: &mut Markers) -> Result<Vec<Tool<'a>>, GatewayError> {
    let mut tools = Vec::new();
    for tool in function_tools(chat) {
        let (i, f) = tool?;
        let marker = f
            .tool
            .get("cache_control")
            .or_else(|| f.function.get("cache_control"));
        tools.push(Tool {
            name: f.name,
            description: f.description,
            input_schema: object_schema(f.parameters),
            cache_control: markers.check(marker, || format!("tools[{i}].cache_control"))?,
        });
    }
    Ok(tools)
}

/// OpenAI `tool_choice` (+ `parallel_tool_calls: false`) → Anthropic `tool_choice`.
/// Sent only with tools: Anthropic answers any `tool_choice` (`none` included) on a
/// request without `tools` with a 400 ("tool_choice may only be specified while
/// providing tools"), so without tools it is dropped (the answer is the same: no
/// tool can be called).
fn tool_choice(chat: &ChatRequest) -> Result<Option<ToolChoice<'_>>, GatewayError> {
    let no_parallel = chat
        .extra
        .get("parallel_tool_calls")
        .and_then(Value::as_bool)
        == Some(false);
    let choice = |kind, name| ToolChoice {
        kind,
        name,
        disable_parallel_tool_use: (no_parallel && kind != "none").then_some(true),
    };
    Ok(match openai_tool_choice(chat)? {
        OpenAiToolChoice::Unset => no_parallel.then(|| choice("auto", None)),
        OpenAiToolChoice::Auto => Some(choice("auto", None)),
        OpenAiToolChoice::None => Some(choice("none", None)),
        OpenAiToolChoice::Required => Some(choice("any", None)),
        OpenAiToolChoice::Function(name) => Some(choice("tool", Some(name))),
    })
}
