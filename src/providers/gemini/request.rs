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
use crate::error::GatewayError;
use crate::providers::common::{
    openai_tool_choice, parts, text_only, tool_calls, unsupported, ImageRef, OpenAiToolChoice, Part,
};

/// Signature Gemini's docs ("Thought signatures") give for function calls replayed
/// without the original `thoughtSignature` (OpenAI clients never carry it); Gemini 3
/// models reject replayed calls that have none.
pub const SKIP_SIGNATURE: &str = "skip_thought_signature_validator";

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
    thought_signature: Option<&'static str>,
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
    parameters_json_schema: Option<&'a Value>,
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

fn part(p: Part<'_>) -> GPart<'_> {
    match p {
        Part::Text(text) => GPart {
            text: Some(text),
            ..GPart::default()
        },
        Part::Image(ImageRef::Inline { mime, data }) => GPart {
            inline_data: Some(Blob {
                mime_type: mime,
                data,
            }),
            ..GPart::default()
        },
        Part::Image(ImageRef::Url(url)) => GPart {
            file_data: Some(FileData {
                mime_type: mime_from_url(url),
                file_uri: url,
            }),
            ..GPart::default()
        },
    }
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
                            return Err(unsupported(
                                format!("messages[{i}].content"),
                                "Gemini takes only text in system messages",
                            ))
                        }
                    }
                }
            }
            "user" => {
                let p = parts(&m.content, i)?.into_iter().map(part).collect();
                push(&mut turns, "user", p);
            }
            "assistant" => {
                let mut p: Vec<GPart<'_>> = parts(&m.content, i)?.into_iter().map(part).collect();
                for (j, c) in tool_calls(m, i)?.into_iter().enumerate() {
                    calls.push((c.id, c.name));
                    p.push(GPart {
                        function_call: Some(FunctionCall {
                            name: c.name,
                            args: c.arguments,
                        }),
                        thought_signature: (j == 0).then_some(SKIP_SIGNATURE),
                        ..GPart::default()
                    });
                }
                push(&mut turns, "model", p);
            }
            "tool" => {
                let param = || format!("messages[{i}].tool_call_id");
                let id = m
                    .extra
                    .get("tool_call_id")
                    .and_then(Value::as_str)
                    .ok_or_else(|| {
                        let param = param();
                        unsupported(&param, format!("`{param}` is required for role \"tool\""))
                    })?;
                let name = calls.iter().rev().find(|(c, _)| *c == id).map(|(_, n)| *n).ok_or_else(|| {
                    let param = param();
                    unsupported(
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
                return Err(unsupported(
                    format!("messages[{i}].role"),
                    format!(
                        "role \"{other}\" is not supported by Gemini; use tools and role \"tool\""
                    ),
                ))
            }
        }
    }
    let n = chat.extra.get("n").and_then(Value::as_u64);
    if chat.is_stream() && n.is_some_and(|n| n > 1) {
        return Err(unsupported(
            "n",
            "Gemini streams one choice; `n` > 1 needs stream: false",
        ));
    }
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
        tools.push(FunctionDeclaration {
            name,
            description: f.get("description").and_then(Value::as_str),
            parameters_json_schema: f.get("parameters"),
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
