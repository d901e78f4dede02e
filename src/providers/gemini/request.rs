//! OpenAI Chat Completions request → Gemini `GenerateContentRequest` body.
//!
//! Source: Gemini API reference, "Generating content" (`contents`, `systemInstruction`,
//! `tools`, `toolConfig`, `generationConfig`), the `Content` and `Part` types (`text`,
//! `inlineData`, `fileData`, `functionCall`, `functionResponse`), "Function
//! calling" (`functionDeclarations` with `parametersJsonSchema`, `functionCallingConfig`
//! modes) and "Thought signatures" (the validator-skip sentinel for replayed calls).

use std::borrow::Cow;

use serde::Serialize;
use serde_json::value::RawValue;
use serde_json::Value;

use crate::api::ChatRequest;
use crate::error::{Code, GatewayError};
use crate::providers::common::{
    accepted_media_type, function_tools, image_part_index, openai_tool_choice, parts, required_str,
    text_only, tool_calls, unsupported_parameter, unsupported_value, ImageRef, OpenAiToolChoice,
    Part,
};

/// Signature Gemini's docs ("Thought signatures") give for function calls replayed
/// without the original `thoughtSignature`; Gemini 3 models reject replayed calls
/// that have none. Used only when the client's tool call carries no signature (see
/// `replayed_signature`).
pub const SKIP_SIGNATURE: &str = "skip_thought_signature_validator";

/// The marker LiteLLM puts between a tool call id and Gemini's signature
/// (`call_x__thought__<signature>`); read on replay so conversations begun through
/// LiteLLM keep their signatures.
const ID_SIGNATURE_MARKER: &str = "__thought__";

/// The `thoughtSignature` a replayed tool call carries: its
/// `extra_content.google.thought_signature` (what Switchyard and Google's
/// OpenAI-compatible endpoint write), else a signature appended to its id after
/// `__thought__`.
fn replayed_signature<'a>(call: Option<&'a Value>, id: &'a str) -> Option<&'a str> {
    call.and_then(|c| c.get("extra_content"))
        .and_then(|e| e.get("google"))
        .and_then(|g| g.get("thought_signature"))
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .or_else(|| {
            id.split_once(ID_SIGNATURE_MARKER)
                .map(|(_, s)| s)
                .filter(|s| !s.is_empty())
        })
}

/// The request body, borrowing from the client's request. The model goes in the URL.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct Outgoing<'a> {
    contents: Vec<Content<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    system_instruction: Option<Content<'a>>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tools: Vec<Tools<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_config: Option<ToolConfig<'a>>,
    #[serde(skip_serializing_if = "GenerationConfig::is_empty")]
    generation_config: GenerationConfig<'a>,
}

#[derive(Serialize)]
struct Content<'a> {
    #[serde(skip_serializing_if = "str::is_empty")]
    role: &'static str,
    parts: Vec<GPart<'a>>,
}

/// A `Part`: exactly one data field set (plus a signature on replayed calls).
#[derive(Serialize, Default)]
#[serde(rename_all = "camelCase")]
struct GPart<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    text: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    inline_data: Option<Blob<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    file_data: Option<FileData<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    function_call: Option<FunctionCall<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    function_response: Option<FunctionResponse<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    thought_signature: Option<&'a str>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Blob<'a> {
    mime_type: &'a str,
    data: &'a str,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct FileData<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    mime_type: Option<&'static str>,
    file_uri: &'a str,
}

#[derive(Serialize)]
struct FunctionCall<'a> {
    name: &'a str,
    args: &'a RawValue,
}

#[derive(Serialize)]
struct FunctionResponse<'a> {
    name: &'a str,
    response: ResponseValue<'a>,
}

/// `functionResponse.response` must be an object: a tool's JSON object goes as is,
/// anything else is wrapped as `{"result": ...}`.
#[derive(Serialize)]
#[serde(untagged)]
enum ResponseValue<'a> {
    Object(&'a RawValue),
    Wrapped { result: Wrapped<'a> },
    Owned(Value),
}

#[derive(Serialize)]
#[serde(untagged)]
enum Wrapped<'a> {
    Json(&'a RawValue),
    Text(&'a str),
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Tools<'a> {
    function_declarations: Vec<FunctionDeclaration<'a>>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct FunctionDeclaration<'a> {
    name: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    description: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    parameters_json_schema: Option<Cow<'a, Value>>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ToolConfig<'a> {
    function_calling_config: FunctionCallingConfig<'a>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct FunctionCallingConfig<'a> {
    mode: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    allowed_function_names: Option<[&'a str; 1]>,
}

#[derive(Serialize, Default)]
#[serde(rename_all = "camelCase")]
struct GenerationConfig<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    temperature: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    top_p: Option<&'a Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_output_tokens: Option<u64>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    stop_sequences: Vec<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    candidate_count: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    seed: Option<&'a Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    presence_penalty: Option<&'a Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    frequency_penalty: Option<&'a Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    response_mime_type: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    response_json_schema: Option<&'a Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    thinking_config: Option<ThinkingConfig>,
}

/// `generationConfig.thinkingConfig` (Gemini API reference, `ThinkingConfig`).
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ThinkingConfig {
    thinking_budget: u32,
    include_thoughts: bool,
}

/// OpenAI `reasoning_effort` → Gemini `thinkingBudget` in tokens, the budgets
/// Google's OpenAI-compatible endpoint documents ("OpenAI compatibility",
/// thinking): `none` 0 (thinking off), `low` 1,024, `medium` 8,192, `high` 24,576;
/// `minimal` (newer OpenAI models) 512, between none and low; `xhigh` (the newest)
/// 24,576 as high, the largest budget every thinking Gemini model takes (2.5
/// Flash's limit). Thought summaries are
/// asked for (`includeThoughts`) whenever thinking is on, and come back as
/// `reasoning_content`.
///
/// # Errors
/// 400 naming `reasoning_effort` for any other value.
fn thinking_config(chat: &ChatRequest) -> Result<Option<ThinkingConfig>, GatewayError> {
    let Some(v) = chat.extra.get("reasoning_effort").filter(|v| !v.is_null()) else {
        return Ok(None);
    };
    let budget = match v.as_str() {
        Some("none") => 0,
        Some("minimal") => 512,
        Some("low") => 1024,
        Some("medium") => 8192,
        Some("high" | "xhigh") => 24576,
        _ => {
            return Err(GatewayError::invalid_param(
                Code::InvalidValue,
                "reasoning_effort",
                format!(
                    "`reasoning_effort` {} is not one of none, minimal, low, medium, high, xhigh",
                    crate::error::bounded(&v.to_string(), 64)
                ),
            ))
        }
    };
    Ok(Some(ThinkingConfig {
        thinking_budget: budget,
        include_thoughts: budget > 0,
    }))
}

impl GenerationConfig<'_> {
    fn is_empty(&self) -> bool {
        self.temperature.is_none()
            && self.top_p.is_none()
            && self.max_output_tokens.is_none()
            && self.stop_sequences.is_empty()
            && self.candidate_count.is_none()
            && self.seed.is_none()
            && self.presence_penalty.is_none()
            && self.frequency_penalty.is_none()
            && self.response_mime_type.is_none()
            && self.thinking_config.is_none()
    }
}

/// A MIME type for an image URL, from its extension (Gemini needs one for `fileData`).
fn mime_from_url(url: &str) -> Option<&'static str> {
    let path = url
        .split(['?', '#'])
        .next()
        .unwrap_or(url)
        .to_ascii_lowercase();
    let ext = path.rsplit('.').next()?;
    Some(match ext {
        "png" => "image/png",
        "jpg" | "jpeg" => "image/jpeg",
        "webp" => "image/webp",
        "gif" => "image/gif",
        "heic" => "image/heic",
        "heif" => "image/heif",
        "pdf" => "application/pdf",
        _ => return None,
    })
}

/// Media types Gemini takes as an image part (Gemini API, "Image understanding":
/// PNG, JPEG, WEBP, HEIC, HEIF) plus PDF ("Document understanding"). A declared type
/// is normalised by [`accepted_media_type`]; Gemini does not take GIF, SVG, BMP,
/// TIFF, ...
const MEDIA_TYPES: [&str; 6] = [
    "image/jpeg",
    "image/png",
    "image/webp",
    "image/heic",
    "image/heif",
    "application/pdf",
];

/// Gemini's media type for a declared one (see [`MEDIA_TYPES`]).
fn gemini_mime(mime: &str) -> Option<&'static str> {
    accepted_media_type(mime, &MEDIA_TYPES)
}

/// 400 naming content part `j` of message `i` for an image Gemini cannot take.
fn refused_image(i: usize, j: usize, mime: &str) -> GatewayError {
    let param = format!("messages[{i}].content[{j}].image_url.url");
    let message = format!(
        "`{param}` has media type \"{}\", which Gemini does not accept; use image/png, image/jpeg, image/webp, image/heic, image/heif or application/pdf",
        crate::error::bounded(mime, 64)
    );
    unsupported_value(param, message)
}

/// The Gemini parts of message `i`'s content, images checked and their media types
/// normalised ([`gemini_mime`]).
///
/// # Errors
/// What [`parts`] refuses, and 400 naming the part for an image whose media type
/// Gemini does not take (before any upstream call).
fn gemini_parts(content: &Value, i: usize) -> Result<Vec<GPart<'_>>, GatewayError> {
    let read = parts(content, i)?;
    let mut out = Vec::with_capacity(read.len());
    // Index of the image among the client's parts, found only when one is refused.
    let position = |nth: usize| image_part_index(content, nth);
    let mut images = 0;
    for p in read {
        out.push(match p {
            Part::Text(text) => GPart {
                text: Some(text),
                ..GPart::default()
            },
            Part::Image(ImageRef::Inline { mime, data }) => {
                let mime_type =
                    gemini_mime(mime).ok_or_else(|| refused_image(i, position(images), mime))?;
                images += 1;
                GPart {
                    inline_data: Some(Blob { mime_type, data }),
                    ..GPart::default()
                }
            }
            Part::Image(ImageRef::Url(url)) => {
                let mime_type = match mime_from_url(url) {
                    Some(m) if gemini_mime(m).is_none() => {
                        return Err(refused_image(i, position(images), m))
                    }
                    m => m,
                };
                images += 1;
                GPart {
                    file_data: Some(FileData {
                        mime_type,
                        file_uri: url,
                    }),
                    ..GPart::default()
                }
            }
        });
    }
    Ok(out)
}

/// Appends a `role` turn, merging into the previous turn of the same role.
fn push<'a>(turns: &mut Vec<Content<'a>>, role: &'static str, parts: Vec<GPart<'a>>) {
    if parts.is_empty() {
        return;
    }
    match turns.last_mut() {
        Some(t) if t.role == role => t.parts.extend(parts),
        _ => turns.push(Content { role, parts }),
    }
}

/// A tool message's content as `functionResponse.response`.
fn response_value(text: Cow<'_, str>) -> ResponseValue<'_> {
    match text {
        Cow::Borrowed(text) => match serde_json::from_str::<&RawValue>(text) {
            Ok(raw) if text.trim_start().starts_with('{') => ResponseValue::Object(raw),
            Ok(raw) => ResponseValue::Wrapped {
                result: Wrapped::Json(raw),
            },
            Err(_) => ResponseValue::Wrapped {
                result: Wrapped::Text(text),
            },
        },
        Cow::Owned(text) => match serde_json::from_str::<Value>(&text) {
            Ok(v @ Value::Object(_)) => ResponseValue::Owned(v),
            Ok(v) => ResponseValue::Owned(serde_json::json!({ "result": v })),
            Err(_) => ResponseValue::Owned(serde_json::json!({ "result": text })),
        },
    }
}

/// Translates `chat`.
///
/// # Errors
/// 400 naming the field for what Gemini cannot express: `n` > 1 while streaming,
/// legacy `function` messages, audio or file parts, a tool result whose
/// `tool_call_id` matches no earlier call, malformed tool calls.
pub(super) fn build(chat: &ChatRequest) -> Result<Outgoing<'_>, GatewayError> {
    let mut system: Vec<GPart<'_>> = Vec::new();
    let mut turns: Vec<Content<'_>> = Vec::with_capacity(chat.messages.len());
    // (tool call id, function name) of the calls seen so far.
    let mut calls: Vec<(&str, &str)> = Vec::new();
    for (i, m) in chat.messages.iter().enumerate() {
        match m.role.as_str() {
            "system" | "developer" => {
                for p in parts(&m.content, i)? {
                    match p {
                        Part::Text(text) => system.push(GPart {
                            text: Some(text),
                            ..GPart::default()
                        }),
                        Part::Image(_) => {
                            return Err(unsupported_value(
                                format!("messages[{i}].content"),
                                "Gemini takes only text in system messages",
                            ))
                        }
                    }
                }
            }
            "user" => {
                let p = gemini_parts(&m.content, i)?;
                push(&mut turns, "user", p);
            }
            "assistant" => {
                // `reasoning_content` of a replayed turn is not sent back: Gemini
                // takes the model's thought context from the signatures only.
                let mut p: Vec<GPart<'_>> = gemini_parts(&m.content, i)?;
                let raw = m.extra.get("tool_calls").and_then(Value::as_array);
                for (j, c) in tool_calls(m, i)?.into_iter().enumerate() {
                    calls.push((c.id, c.name));
                    let signature = replayed_signature(raw.and_then(|r| r.get(j)), c.id);
                    p.push(GPart {
                        function_call: Some(FunctionCall {
                            name: c.name,
                            args: c.arguments,
                        }),
                        // Gemini checks the signature of the first call of a turn.
                        thought_signature: signature.or_else(|| (j == 0).then_some(SKIP_SIGNATURE)),
                        ..GPart::default()
                    });
                }
                push(&mut turns, "model", p);
            }
            "tool" => {
                let param = || format!("messages[{i}].tool_call_id");
                let id = required_str(m.extra.get("tool_call_id"), param)?;
                let name = calls.iter().rev().find(|(c, _)| *c == id).map(|(_, n)| *n).ok_or_else(|| {
                    let param = param();
                    // `code: null`, as validation (which refuses this first) and
                    // OpenAI answer it.
                    GatewayError::invalid_field(
                        &param,
                        format!("`{param}` \"{id}\" matches no tool call of an earlier assistant message"),
                    )
                })?;
                let response = response_value(text_only(&m.content, i)?);
                let p = GPart {
                    function_response: Some(FunctionResponse { name, response }),
                    ..GPart::default()
                };
                push(&mut turns, "user", vec![p]);
            }
            other => {
                return Err(unsupported_value(
                    format!("messages[{i}].role"),
                    format!(
                        "role \"{other}\" is not supported by Gemini; use tools and role \"tool\""
                    ),
                ))
            }
        }
    }
    // Gemini refuses a request without `contents` (400 INVALID_ARGUMENT), where
    // OpenAI takes a system prompt alone: refused here naming the field, before
    // any upstream call, as the Anthropic and Bedrock adapters do (outside
    // testing, 2026-12-07).
    if turns.is_empty() {
        return Err(unsupported_value(
            "messages",
            "Gemini needs a user or assistant message: the conversation has only system instructions",
        ));
    }
    check_fields(chat)?;
    let n = chat.extra.get("n").and_then(Value::as_u64);
    if chat.is_stream() && n.is_some_and(|n| n > 1) {
        return Err(unsupported_value(
            "n",
            "Gemini streams one choice; `n` > 1 needs stream: false",
        ));
    }
    let mut tools = Vec::new();
    for tool in function_tools(chat) {
        let (i, f) = tool?;
        tools.push(FunctionDeclaration {
            name: f.name,
            description: f.description,
            // `parameters: null` is a function without parameters, as when absent.
            parameters_json_schema: f
                .parameters
                .filter(|p| !p.is_null())
                .map(|p| super::schema::lower(p, i))
                .transpose()?,
        });
    }
    let format = chat.extra.get("response_format");
    let format_type = format.and_then(|f| f.get("type")).and_then(Value::as_str);
    let number = |k: &str| chat.extra.get(k).filter(|v| v.is_number());
    Ok(Outgoing {
        contents: turns,
        system_instruction: (!system.is_empty()).then_some(Content {
            role: "",
            parts: system,
        }),
        tools: if tools.is_empty() {
            Vec::new()
        } else {
            vec![Tools {
                function_declarations: tools,
            }]
        },
        tool_config: tool_config(chat)?,
        generation_config: GenerationConfig {
            temperature: chat.temperature,
            top_p: number("top_p"),
            max_output_tokens: chat.output_cap(),
            stop_sequences: match chat.extra.get("stop") {
                Some(Value::String(s)) => vec![s.as_str()],
                Some(Value::Array(a)) => a.iter().filter_map(Value::as_str).collect(),
                _ => Vec::new(),
            },
            candidate_count: n,
            seed: number("seed"),
            presence_penalty: number("presence_penalty"),
            frequency_penalty: number("frequency_penalty"),
            response_mime_type: matches!(format_type, Some("json_object" | "json_schema"))
                .then_some("application/json"),
            response_json_schema: format
                .and_then(|f| f.get("json_schema"))
                .and_then(|s| s.get("schema")),
            thinking_config: thinking_config(chat)?,
        },
    })
}

/// OpenAI `tool_choice` → Gemini `toolConfig.functionCallingConfig`.
fn tool_config(chat: &ChatRequest) -> Result<Option<ToolConfig<'_>>, GatewayError> {
    fn config<'a>(mode: &'static str, name: Option<&'a str>) -> Option<ToolConfig<'a>> {
        Some(ToolConfig {
            function_calling_config: FunctionCallingConfig {
                mode,
                allowed_function_names: name.map(|n| [n]),
            },
        })
    }
    Ok(match openai_tool_choice(chat)? {
        OpenAiToolChoice::Unset => None,
        OpenAiToolChoice::Auto => config("AUTO", None),
        OpenAiToolChoice::None => config("NONE", None),
        OpenAiToolChoice::Required => config("ANY", None),
        OpenAiToolChoice::Function(name) => config("ANY", Some(name)),
    })
}

/// Request fields this adapter translates (besides the typed ones).
const TRANSLATED: [&str; 10] = [
    "tool_choice",
    "n",
    "stop",
    "top_p",
    "seed",
    "presence_penalty",
    "frequency_penalty",
    "response_format",
    "reasoning_effort",
    "stream_options",
];

/// Refuses the OpenAI fields whose absence the client would notice (it asked for
/// output Gemini is not sent a request for), and logs (debug) the fields dropped:
/// `docs/providers.md` lists both.
///
/// # Errors
/// 400 naming `logprobs` (true), `top_logprobs`, `audio`, or `modalities` with
/// anything but `"text"`.
fn check_fields(chat: &ChatRequest) -> Result<(), GatewayError> {
    let mut dropped: Vec<&str> = Vec::new();
    for (k, v) in &chat.extra {
        if v.is_null() || TRANSLATED.contains(&k.as_str()) {
            continue;
        }
        let refused = match k.as_str() {
            "logprobs" => v.as_bool() == Some(true),
            "top_logprobs" | "audio" => true,
            "modalities" => v
                .as_array()
                .is_some_and(|m| m.iter().any(|x| x.as_str() != Some("text"))),
            _ => false,
        };
        if refused {
            let message = format!("`{k}` is not supported by Switchyard's Gemini adapter");
            // A field Gemini has no equivalent of, or (`audio`, `modalities`) output
            // it is not asked for, as the other adapters refuse it.
            return Err(if matches!(k.as_str(), "logprobs" | "top_logprobs") {
                unsupported_parameter(k.as_str(), message)
            } else {
                unsupported_value(k.as_str(), message)
            });
        }
        dropped.push(k);
    }
    if !dropped.is_empty() {
        tracing::debug!(
            fields = %dropped.join(","),
            "request fields Gemini has no equivalent for were dropped"
        );
    }
    Ok(())
}
