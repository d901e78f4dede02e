//! OpenAI Chat Completions request → Anthropic Messages request body.
//!
//! Source: Anthropic API reference, "Messages" (request body: `system`, `messages`,
//! content blocks `text`/`image`/`tool_use`/`tool_result`, `tools`, `tool_choice`,
//! `max_tokens`, `stop_sequences`) and "Vision" (image sources `base64` and `url`).

use serde::Serialize;
use serde_json::value::RawValue;
use serde_json::Value;

use crate::api::ChatRequest;
use crate::error::GatewayError;
use crate::providers::common::{
    openai_tool_choice, parts, text_only, tool_calls, unsupported, ImageRef, OpenAiToolChoice, Part,
};

/// Output cap sent when the client gives none; Anthropic requires `max_tokens`, and
/// 4096 fits every current Claude model's output limit.
pub const DEFAULT_MAX_TOKENS: u64 = 4096;

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
}

#[derive(Serialize)]
struct Metadata<'a> {
    user_id: &'a str,
}

/// One turn: `user` or `assistant` with its content blocks.
#[derive(Serialize)]
struct Turn<'a> {
    role: &'static str,
    content: Vec<Block<'a>>,
}

#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum Block<'a> {
    Text {
        text: &'a str,
    },
    /// A tool result's text, built from parts, so owned.
    #[serde(rename = "text")]
    OwnedText {
        text: String,
    },
    Image {
        source: Source<'a>,
    },
    ToolUse {
        id: &'a str,
        name: &'a str,
        input: &'a RawValue,
    },
    ToolResult {
        tool_use_id: &'a str,
        content: Vec<Block<'a>>,
    },
}

#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum Source<'a> {
    Base64 { media_type: &'a str, data: &'a str },
    Url { url: &'a str },
}

#[derive(Serialize)]
struct Tool<'a> {
    name: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    description: Option<&'a str>,
    input_schema: &'a Value,
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

/// A JSON Schema for a function without parameters.
fn empty_schema() -> &'static Value {
    static EMPTY: std::sync::OnceLock<Value> = std::sync::OnceLock::new();
    EMPTY.get_or_init(|| serde_json::json!({"type": "object", "properties": {}}))
}

fn block<'a>(p: Part<'a>) -> Block<'a> {
    match p {
        Part::Text(text) => Block::Text { text },
        Part::Image(ImageRef::Inline { mime, data }) => Block::Image {
            source: Source::Base64 {
                media_type: mime,
                data,
            },
        },
        Part::Image(ImageRef::Url(url)) => Block::Image {
            source: Source::Url { url },
        },
    }
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
/// # Errors
/// 400 naming the field for what Anthropic cannot express: `n` > 1, legacy `function`
/// messages, audio or file parts, images outside user turns, malformed tool calls.
pub(super) fn build<'a>(
    chat: &'a ChatRequest,
    model: &'a str,
) -> Result<Outgoing<'a>, GatewayError> {
    let mut system = Vec::new();
    let mut turns: Vec<Turn<'a>> = Vec::with_capacity(chat.messages.len());
    for (i, m) in chat.messages.iter().enumerate() {
        match m.role.as_str() {
            "system" | "developer" => {
                for p in parts(&m.content, i)? {
                    match p {
                        Part::Text(text) => system.push(Block::Text { text }),
                        Part::Image(_) => {
                            return Err(unsupported(
                                format!("messages[{i}].content"),
                                "Anthropic takes only text in system messages",
                            ))
                        }
                    }
                }
            }
            "user" => {
                let blocks = parts(&m.content, i)?.into_iter().map(block).collect();
                push(&mut turns, "user", blocks);
            }
            "assistant" => {
                let mut blocks: Vec<Block<'a>> = Vec::new();
                for p in parts(&m.content, i)? {
                    match p {
                        Part::Text(text) => blocks.push(Block::Text { text }),
                        Part::Image(_) => {
                            return Err(unsupported(
                                format!("messages[{i}].content"),
                                "Anthropic takes images only in user messages",
                            ))
                        }
                    }
                }
                for c in tool_calls(m, i)? {
                    blocks.push(Block::ToolUse {
                        id: c.id,
                        name: c.name,
                        input: c.arguments,
                    });
                }
                push(&mut turns, "assistant", blocks);
            }
            "tool" => {
                let id = m
                    .extra
                    .get("tool_call_id")
                    .and_then(Value::as_str)
                    .ok_or_else(|| {
                        unsupported(
                            format!("messages[{i}].tool_call_id"),
                            format!("`messages[{i}].tool_call_id` is required for role \"tool\""),
                        )
                    })?;
                let text = text_only(&m.content, i)?;
                let content = if text.is_empty() {
                    Vec::new()
                } else {
                    vec![match text {
                        std::borrow::Cow::Borrowed(text) => Block::Text { text },
                        std::borrow::Cow::Owned(text) => Block::OwnedText { text },
                    }]
                };
                push(
                    &mut turns,
                    "user",
                    vec![Block::ToolResult {
                        tool_use_id: id,
                        content,
                    }],
                );
            }
            other => {
                return Err(unsupported(
                    format!("messages[{i}].role"),
                    format!(
                    "role \"{other}\" is not supported by Anthropic; use tools and role \"tool\""
                ),
                ))
            }
        }
    }
    if let Some(n) = chat
        .extra
        .get("n")
        .and_then(Value::as_u64)
        .filter(|&n| n > 1)
    {
        return Err(unsupported(
            "n",
            format!("Anthropic returns one choice; `n` is {n}"),
        ));
    }
    let stop_sequences = match chat.extra.get("stop") {
        Some(Value::String(s)) => vec![s.as_str()],
        Some(Value::Array(a)) => a.iter().filter_map(Value::as_str).collect(),
        _ => Vec::new(),
    };
    let mut tools = Vec::new();
    for (i, t) in chat.tools.iter().flatten().enumerate() {
        let f = t
            .get("function")
            .filter(|_| t.get("type").and_then(Value::as_str).unwrap_or("function") == "function")
            .ok_or_else(|| {
                unsupported(format!("tools[{i}]"), "only function tools are supported")
            })?;
        let name = f.get("name").and_then(Value::as_str).ok_or_else(|| {
            unsupported(format!("tools[{i}].function.name"), "a tool needs a name")
        })?;
        tools.push(Tool {
            name,
            description: f.get("description").and_then(Value::as_str),
            input_schema: f.get("parameters").unwrap_or_else(|| empty_schema()),
        });
    }
    Ok(Outgoing {
        model,
        max_tokens: chat.output_cap().unwrap_or(DEFAULT_MAX_TOKENS),
        system,
        messages: turns,
        temperature: chat.temperature,
        top_p: chat.extra.get("top_p").filter(|v| v.is_number()),
        stop_sequences,
        stream: chat.stream.filter(|&s| s),
        tools,
        tool_choice: tool_choice(chat)?,
        metadata: chat
            .extra
            .get("user")
            .and_then(Value::as_str)
            .map(|user_id| Metadata { user_id }),
    })
}

/// OpenAI `tool_choice` (+ `parallel_tool_calls: false`) → Anthropic `tool_choice`.
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
