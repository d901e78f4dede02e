//! OpenAI Chat Completions request → Bedrock Converse request body.
//!
//! Source: Amazon Bedrock API reference, "Converse" (request `messages`, `system`,
//! `inferenceConfig`, `toolConfig`), and the types `Message`, `ContentBlock` (`text`,
//! `image`, `toolUse`, `toolResult`), `ImageBlock` (`format` png | jpeg | gif | webp,
//! `source.bytes` base64 in JSON, or `source.s3Location`), `ToolResultBlock`
//! (`content` of `text` / `json` blocks), `Tool` (`toolSpec` with
//! `inputSchema.json`), `ToolChoice` (`auto`, `any`, `tool`) and `CachePointBlock`
//! (user guide "Prompt caching": at most 4 checkpoints, in system, messages and
//! tools). OpenAI-side `cache_control` markers (Anthropic's shape) become cache
//! points after the block they mark.
//!
//! Bedrock wants user and assistant turns to alternate and rejects blank text blocks,
//! so consecutive messages of one role are merged and blank text is dropped.

use serde::Serialize;
use serde_json::value::RawValue;
use serde_json::Value;

use crate::api::ChatRequest;
use crate::error::{Code, GatewayError};
use crate::providers::common::{
    accepted_media_type, field_error, function_tools, image_part_index, object_schema,
    openai_tool_choice, parts, refuse_untranslated, required_str, text_only, tool_calls,
    tool_use_id, unsupported_parameter, unsupported_value, ImageRef, OpenAiToolChoice, Part,
};
use crate::providers::reasoning::{thinking_blocks, ThinkingBlock};

/// Fields with no Converse equivalent, dropped with a debug note (`reasoning_effort`
/// and `thinking` are read by [`super::thinking`]).
const DROPPED: [&str; 12] = [
    "seed",
    "presence_penalty",
    "frequency_penalty",
    "logit_bias",
    "user",
    "parallel_tool_calls",
    "service_tier",
    "store",
    "metadata",
    "prediction",
    "top_k",
    "safety_identifier",
];

/// The request body, borrowing from the client's request. The model goes in the URL.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct Outgoing<'a> {
    messages: Vec<Turn<'a>>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    system: Vec<SystemBlock<'a>>,
    #[serde(skip_serializing_if = "InferenceConfig::is_empty")]
    inference_config: InferenceConfig<'a>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_config: Option<ToolConfig<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    additional_model_request_fields: Option<super::thinking::Fields<'a>>,
}

impl<'a> Outgoing<'a> {
    /// Adds extended thinking ([`super::thinking::plan`]) and the output cap it needs.
    pub(super) fn think(&mut self, plan: super::thinking::Plan<'a>) {
        self.inference_config.max_tokens = plan.max_tokens;
        self.additional_model_request_fields = Some(plan.fields);
    }

    /// Leaves out the whitespace-only stop sequences, for a Claude model: Claude
    /// refuses them ("stop_sequences: each stop sequence must contain
    /// non-whitespace"), as the Anthropic adapter's `stop_sequences` describes;
    /// other Bedrock models take `"\n"` as a stop sequence.
    pub(super) fn for_claude(&mut self) {
        let stops = &mut self.inference_config.stop_sequences;
        let given = stops.len();
        stops.retain(|s| !s.trim().is_empty());
        if stops.len() < given {
            tracing::debug!(
                dropped = given - stops.len(),
                "blank stop sequences dropped: Claude refuses whitespace-only stop sequences"
            );
        }
    }
}

#[derive(Serialize)]
struct Turn<'a> {
    role: &'static str,
    content: Vec<Block<'a>>,
}

/// A `SystemContentBlock`.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
enum SystemBlock<'a> {
    Text(&'a str),
    CachePoint(CachePoint),
}

/// A `CachePointBlock`: the prompt up to here may be cached ("Prompt caching").
#[derive(Serialize)]
struct CachePoint {
    #[serde(rename = "type")]
    kind: &'static str,
}

const CACHE_POINT: CachePoint = CachePoint { kind: "default" };

/// Most cache checkpoints Bedrock takes in one request ("Prompt caching").
pub(super) const MAX_CACHE_POINTS: usize = 4;

/// Counts and checks the request's `cache_control` markers, which become
/// `cachePoint` blocks.
#[derive(Default)]
struct Markers {
    count: usize,
}

impl Markers {
    /// Whether `v` (found at `param`) asks for a cache point.
    ///
    /// # Errors
    /// 400 naming `param` when the marker is not `{"type":"ephemeral"}`, or when it is
    /// the fifth of the request.
    fn check(
        &mut self,
        v: Option<&Value>,
        param: impl Fn() -> String,
    ) -> Result<bool, GatewayError> {
        let Some(v) = v.filter(|v| !v.is_null()) else {
            return Ok(false);
        };
        let bad = |code: Code, why: &str| field_error(code, param(), why);
        if v.get("type").and_then(Value::as_str) != Some("ephemeral") {
            return Err(bad(Code::InvalidValue, "must be {\"type\":\"ephemeral\"}"));
        }
        if v.get("ttl").is_some_and(|t| !t.is_null()) {
            tracing::debug!(param = %param(), "cache_control.ttl dropped: Bedrock cache points take the default TTL");
        }
        self.count += 1;
        if self.count > MAX_CACHE_POINTS {
            return Err(bad(
                Code::UnsupportedValue,
                &format!(
                "is cache marker number {}; Bedrock takes at most {MAX_CACHE_POINTS} cache points per request",
                    self.count
                ),
            ));
        }
        Ok(true)
    }
}

/// A `ContentBlock`: exactly one member.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
enum Block<'a> {
    Text(&'a str),
    Image {
        format: &'static str,
        source: ImageSource<'a>,
    },
    ToolUse {
        /// As [`crate::providers::common::tool_use_id`] makes it.
        #[serde(rename = "toolUseId")]
        tool_use_id: std::borrow::Cow<'a, str>,
        name: &'a str,
        input: &'a RawValue,
    },
    ToolResult {
        /// As [`crate::providers::common::tool_use_id`] makes it.
        #[serde(rename = "toolUseId")]
        tool_use_id: std::borrow::Cow<'a, str>,
        content: [ResultBlock<'a>; 1],
    },
    CachePoint(CachePoint),
    ReasoningContent(Reasoning<'a>),
}

/// A `ReasoningContentBlock` replayed from the client's `thinking_blocks`.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
enum Reasoning<'a> {
    ReasoningText {
        text: std::borrow::Cow<'a, str>,
        #[serde(skip_serializing_if = "str::is_empty")]
        signature: std::borrow::Cow<'a, str>,
    },
    RedactedContent(std::borrow::Cow<'a, str>),
}

#[derive(Serialize)]
struct ImageSource<'a> {
    bytes: &'a str,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
enum ResultBlock<'a> {
    Text(std::borrow::Cow<'a, str>),
    Json(&'a RawValue),
    #[serde(rename = "json")]
    OwnedJson(Value),
}

#[derive(Serialize, Default)]
#[serde(rename_all = "camelCase")]
struct InferenceConfig<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    max_tokens: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    temperature: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    top_p: Option<&'a Value>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    stop_sequences: Vec<&'a str>,
}

impl InferenceConfig<'_> {
    fn is_empty(&self) -> bool {
        self.max_tokens.is_none()
            && self.temperature.is_none()
            && self.top_p.is_none()
            && self.stop_sequences.is_empty()
    }
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ToolConfig<'a> {
    tools: Vec<Tool<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_choice: Option<ToolChoice<'a>>,
}

/// A `Tool`: a spec, or a cache point after the tools before it.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
enum Tool<'a> {
    ToolSpec(ToolSpec<'a>),
    CachePoint(CachePoint),
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ToolSpec<'a> {
    name: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    description: Option<&'a str>,
    input_schema: InputSchema<'a>,
}

#[derive(Serialize)]
struct InputSchema<'a> {
    /// As [`object_schema`] makes it.
    json: std::borrow::Cow<'a, Value>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
enum ToolChoice<'a> {
    Auto(Empty),
    Any(Empty),
    Tool { name: &'a str },
}

#[derive(Serialize)]
struct Empty {}

/// Image media types Bedrock takes (`ImageBlock.format` png | jpeg | gif | webp).
const MEDIA_TYPES: [&str; 4] = ["image/png", "image/jpeg", "image/gif", "image/webp"];

/// Bedrock's image `format` for a declared media type, normalised by
/// [`accepted_media_type`]; `None` when Bedrock cannot take it.
pub(super) fn image_format(mime: &str) -> Option<&'static str> {
    accepted_media_type(mime, &MEDIA_TYPES).and_then(|m| m.strip_prefix("image/"))
}

/// The `param` of the `n`-th image part of message `i` in the client's own indexing.
fn image_param(content: &Value, i: usize, n: usize) -> String {
    let j = image_part_index(content, n);
    format!("messages[{i}].content[{j}].image_url.url")
}

/// The content blocks of a user or assistant message.
fn blocks<'a>(
    content: &'a Value,
    i: usize,
    images_allowed: bool,
    markers: &mut Markers,
) -> Result<Vec<Block<'a>>, GatewayError> {
    let mut out = Vec::new();
    let mut images = 0;
    // The raw items in step with `parts`, which skips empty text parts.
    let mut raw = content
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or(&[])
        .iter()
        .enumerate()
        .filter(|(_, p)| match p.get("type").and_then(Value::as_str) {
            Some(k @ ("text" | "refusal")) => p
                .get(k)
                .and_then(Value::as_str)
                .is_some_and(|t| !t.is_empty()),
            _ => true,
        });
    for p in parts(content, i)? {
        let marked = match raw.next() {
            Some((j, item)) => markers.check(item.get("cache_control"), || {
                format!("messages[{i}].content[{j}].cache_control")
            })?,
            None => false,
        };
        push_block(&mut out, p, content, i, images, images_allowed)?;
        if matches!(p, Part::Image(_)) {
            images += 1;
        }
        // After the marked part's block (or the last one kept, for a blank part).
        if marked && !out.is_empty() {
            out.push(Block::CachePoint(CACHE_POINT));
        }
    }
    Ok(out)
}

/// Appends the block of part `p` of message `i` (`images` image parts before it).
fn push_block<'a>(
    out: &mut Vec<Block<'a>>,
    p: Part<'a>,
    content: &Value,
    i: usize,
    images: usize,
    images_allowed: bool,
) -> Result<(), GatewayError> {
    match p {
        Part::Text(t) if t.trim().is_empty() => {}
        Part::Text(t) => out.push(Block::Text(t)),
        Part::Image(image) => {
            let param = image_param(content, i, images);
            if !images_allowed {
                return Err(unsupported_value(
                    &param,
                    format!("`{param}`: Bedrock takes images in user messages only"),
                ));
            }
            match image {
                    ImageRef::Inline { mime, data } => {
                        let format = image_format(mime).ok_or_else(|| {
                            unsupported_value(
                                &param,
                                format!(
                                    "`{param}` has media type \"{}\"; Bedrock takes image/png, image/jpeg, image/gif or image/webp",
                                    crate::error::bounded(mime, 64)
                                ),
                            )
                        })?;
                        out.push(Block::Image {
                            format,
                            source: ImageSource { bytes: data },
                        });
                    }
                    ImageRef::Url(_) => {
                        return Err(unsupported_value(
                            &param,
                            format!("`{param}` is an http(s) URL; Bedrock takes images only as base64 data URLs (or from S3), it does not fetch URLs"),
                        ))
                    }
                }
        }
    }
    Ok(())
}

/// Appends a turn, merging into the previous turn of the same role.
fn push<'a>(turns: &mut Vec<Turn<'a>>, role: &'static str, content: Vec<Block<'a>>) {
    if content.is_empty() {
        return;
    }
    match turns.last_mut() {
        Some(t) if t.role == role => t.content.extend(content),
        _ => turns.push(Turn { role, content }),
    }
}

/// What an empty or whitespace-only tool result is sent as: Bedrock refuses a blank
/// text block anywhere ("text content blocks must be non-empty"), and a
/// `toolResult` needs content (`ToolResultBlock.content`, "Required: Yes").
pub(super) const EMPTY_TOOL_RESULT: &str = "(empty)";

/// A tool message's content as one `toolResult` content block: a JSON object as
/// `json`, blank text as [`EMPTY_TOOL_RESULT`], anything else as `text`.
fn result_block(text: std::borrow::Cow<'_, str>) -> ResultBlock<'_> {
    use std::borrow::Cow;
    if text.trim().is_empty() {
        return ResultBlock::Text(Cow::Borrowed(EMPTY_TOOL_RESULT));
    }
    let object = text.trim_start().starts_with('{');
    match text {
        Cow::Borrowed(t) if object => match serde_json::from_str::<&RawValue>(t) {
            Ok(raw) => ResultBlock::Json(raw),
            Err(_) => ResultBlock::Text(Cow::Borrowed(t)),
        },
        Cow::Owned(t) if object => match serde_json::from_str::<Value>(&t) {
            Ok(v @ Value::Object(_)) => ResultBlock::OwnedJson(v),
            _ => ResultBlock::Text(Cow::Owned(t)),
        },
        t => ResultBlock::Text(t),
    }
}

/// Translates `chat`.
///
/// # Errors
/// 400 naming the field for what Converse cannot express: `n` > 1, `temperature`
/// above 1, log probabilities, audio, `response_format` JSON modes, legacy functions, roles other
/// than system/developer/user/assistant/tool, image URLs or media types Bedrock does
/// not take, images outside user messages, malformed tool calls, a tool result
/// without `tool_call_id`, tool calls or results in a request without `tools`
/// (Bedrock requires `toolConfig` then) or with `tool_choice: "none"` (which is
/// sent as no tools).
pub(super) fn build(chat: &ChatRequest) -> Result<Outgoing<'_>, GatewayError> {
    refuse_unsupported(chat)?;
    let mut markers = Markers::default();
    let mut system = Vec::new();
    let mut turns: Vec<Turn<'_>> = Vec::with_capacity(chat.messages.len());
    for (i, m) in chat.messages.iter().enumerate() {
        match m.role.as_str() {
            "system" | "developer" => {
                for b in blocks(&m.content, i, false, &mut markers)? {
                    system.push(match b {
                        Block::Text(text) => SystemBlock::Text(text),
                        _ => SystemBlock::CachePoint(CACHE_POINT),
                    });
                }
                if message_marker(m, i, &mut markers)? && !system.is_empty() {
                    system.push(SystemBlock::CachePoint(CACHE_POINT));
                }
            }
            "user" => {
                let mut b = blocks(&m.content, i, true, &mut markers)?;
                if message_marker(m, i, &mut markers)? && !b.is_empty() {
                    b.push(Block::CachePoint(CACHE_POINT));
                }
                push(&mut turns, "user", b);
            }
            "assistant" => {
                // Reasoning first, as the model produced it.
                let mut b: Vec<Block<'_>> = thinking_blocks(m, i)?
                    .into_iter()
                    .map(|t| {
                        Block::ReasoningContent(match t {
                            ThinkingBlock::Thinking {
                                thinking,
                                signature,
                            } => Reasoning::ReasoningText {
                                text: thinking,
                                signature,
                            },
                            ThinkingBlock::RedactedThinking { data } => {
                                Reasoning::RedactedContent(data)
                            }
                        })
                    })
                    .collect();
                let replayed = !b.is_empty();
                b.extend(blocks(&m.content, i, false, &mut markers)?);
                for c in tool_calls(m, i)? {
                    b.push(Block::ToolUse {
                        tool_use_id: tool_use_id(c.id),
                        name: c.name,
                        input: c.arguments,
                    });
                }
                if !replayed
                    && m.extra
                        .get("reasoning_content")
                        .is_some_and(|v| !v.is_null())
                {
                    tracing::debug!(
                        message = i,
                        "reasoning_content dropped: Bedrock replays reasoning only with its signature"
                    );
                }
                push(&mut turns, "assistant", b);
            }
            "tool" => {
                let id = required_str(m.extra.get("tool_call_id"), || {
                    format!("messages[{i}].tool_call_id")
                })?;
                let content = result_block(text_only(&m.content, i)?);
                let mut b = vec![Block::ToolResult {
                    tool_use_id: tool_use_id(id),
                    content: [content],
                }];
                if message_marker(m, i, &mut markers)? {
                    b.push(Block::CachePoint(CACHE_POINT));
                }
                push(&mut turns, "user", b);
            }
            other => {
                return Err(unsupported_value(
                    format!("messages[{i}].role"),
                    format!(
                        "role \"{}\" is not supported by Bedrock; use tools and role \"tool\"",
                        crate::error::bounded(other, 32)
                    ),
                ))
            }
        }
    }
    trim_prefill(&mut turns);
    // Converse takes a conversation that starts with a user turn ("A conversation
    // must start with a user message"), where OpenAI also takes a system prompt
    // alone or an assistant's greeting first: refused here naming the field,
    // before any upstream call (found by attack, 2026-12-07).
    match turns.first().map(|t| t.role) {
        None => {
            return Err(unsupported_value(
                "messages",
                "Bedrock needs a user message: the conversation has none Bedrock can take (a system prompt alone, or only empty text)",
            ))
        }
        Some("assistant") => {
            return Err(unsupported_value(
                "messages",
                "Bedrock needs the conversation to start with a user message, and its first message after the system prompt is the assistant's; begin with the user's turn",
            ))
        }
        Some(_) => {}
    }
    let tool_config = tool_config(chat, &mut markers)?;
    let tool_blocks = turns
        .iter()
        .flat_map(|t| &t.content)
        .any(|b| matches!(b, Block::ToolUse { .. } | Block::ToolResult { .. }));
    if tool_config.is_none() && tool_blocks {
        if chat.tools.as_ref().is_some_and(|t| !t.is_empty())
            && openai_tool_choice(chat)? == OpenAiToolChoice::None
        {
            return Err(unsupported_value(
                "tool_choice",
                "Bedrock has no `tool_choice` \"none\": it is sent as no tools, but a conversation holding tool calls or tool results must send its tools; use \"auto\"",
            ));
        }
        return Err(GatewayError::invalid_param(
            Code::MissingRequiredParameter,
            "tools",
            "Bedrock needs `tools` in every request whose conversation holds tool calls or tool results; send the tool definitions again",
        ));
    }
    Ok(Outgoing {
        messages: turns,
        system,
        inference_config: InferenceConfig {
            max_tokens: chat.output_cap(),
            temperature: chat.temperature,
            top_p: chat.extra.get("top_p").filter(|v| v.is_number()),
            // Bedrock's `stopSequences` are non-empty strings (its service model's
            // `NonEmptyString`; boto3 refuses "" before sending): an empty one,
            // which OpenAI accepts, is left out.
            stop_sequences: match chat.extra.get("stop") {
                Some(Value::String(s)) => vec![s.as_str()],
                Some(Value::Array(a)) => a.iter().filter_map(Value::as_str).collect(),
                _ => Vec::new(),
            }
            .into_iter()
            .filter(|s| !s.is_empty())
            .collect(),
        },
        tool_config,
        additional_model_request_fields: None,
    })
}

/// A final assistant turn is a prefill: Bedrock refuses trailing whitespace there
/// ("messages: final assistant content cannot end with trailing whitespace"), so the
/// last text block loses it (and goes when nothing is left, as does a turn left
/// empty).
fn trim_prefill(turns: &mut Vec<Turn<'_>>) {
    let Some(last) = turns.last_mut().filter(|t| t.role == "assistant") else {
        return;
    };
    if let Some(Block::Text(text)) = last.content.last_mut() {
        *text = text.trim_end();
        if text.is_empty() {
            last.content.pop();
        }
    }
    if last.content.is_empty() {
        turns.pop();
    }
}

/// Whether message `i` carries a message-level `cache_control` marker.
fn message_marker(
    m: &crate::api::Message,
    i: usize,
    markers: &mut Markers,
) -> Result<bool, GatewayError> {
    markers.check(m.extra.get("cache_control"), || {
        format!("messages[{i}].cache_control")
    })
}

/// OpenAI `tools` and `tool_choice` → `toolConfig`.
fn tool_config<'a>(
    chat: &'a ChatRequest,
    markers: &mut Markers,
) -> Result<Option<ToolConfig<'a>>, GatewayError> {
    let mut tools = Vec::new();
    for tool in function_tools(chat) {
        let (i, f) = tool?;
        tools.push(Tool::ToolSpec(ToolSpec {
            name: f.name,
            // A `NonEmptyString` too: an empty description is no description.
            description: f.description.filter(|d| !d.is_empty()),
            input_schema: InputSchema {
                json: object_schema(f.parameters),
            },
        }));
        let marker = f
            .tool
            .get("cache_control")
            .or_else(|| f.function.get("cache_control"));
        if markers.check(marker, || format!("tools[{i}].cache_control"))? {
            tools.push(Tool::CachePoint(CACHE_POINT));
        }
    }
    let choice = openai_tool_choice(chat)?;
    if tools.is_empty() {
        return Ok(None);
    }
    let tool_choice = match choice {
        OpenAiToolChoice::Unset => None,
        OpenAiToolChoice::Auto => Some(ToolChoice::Auto(Empty {})),
        OpenAiToolChoice::Required => Some(ToolChoice::Any(Empty {})),
        OpenAiToolChoice::Function(name) => Some(ToolChoice::Tool { name }),
        // Converse has no "none" (`ToolChoice` is auto, any or tool): without tools
        // the model calls none, which is what "none" asks.
        OpenAiToolChoice::None => return Ok(None),
    };
    Ok(Some(ToolConfig { tools, tool_choice }))
}

/// 400 for request fields Converse cannot honour; a debug note for those dropped.
fn refuse_unsupported(chat: &ChatRequest) -> Result<(), GatewayError> {
    let set = |name: &str| chat.extra.get(name).filter(|v| !v.is_null());
    if let Some(n) = set("n").and_then(Value::as_u64).filter(|&n| n > 1) {
        return Err(unsupported_value(
            "n",
            format!("Bedrock returns one choice; `n` is {n}"),
        ));
    }
    // InferenceConfiguration.temperature: "Valid Range: Minimum value of 0. Maximum
    // value of 1." (OpenAI takes 0 to 2.)
    if let Some(t) = chat.temperature.filter(|&t| t > 1.0) {
        return Err(unsupported_value(
            "temperature",
            format!("`temperature` is {t}; Bedrock Converse takes 0 to 1"),
        ));
    }
    if let Some(kind) = set("response_format")
        .and_then(|f| f.get("type"))
        .and_then(Value::as_str)
        .filter(|k| *k != "text")
    {
        return Err(unsupported_value(
            "response_format",
            format!(
                "Bedrock Converse has no `response_format` \"{}\"; ask for JSON with a tool and `tool_choice`",
                crate::error::bounded(kind, 64)
            ),
        ));
    }
    if set("logprobs").and_then(Value::as_bool) == Some(true) || set("top_logprobs").is_some() {
        let field = if set("top_logprobs").is_some() {
            "top_logprobs"
        } else {
            "logprobs"
        };
        return Err(unsupported_parameter(
            field,
            "Bedrock does not return log probabilities",
        ));
    }
    refuse_untranslated(
        chat,
        "Bedrock",
        "Bedrock Converse answers in text only here",
    )?;
    for field in DROPPED {
        if set(field).is_some() {
            tracing::debug!(
                field,
                "dropped: Bedrock Converse has no equivalent of this field"
            );
        }
    }
    Ok(())
}
