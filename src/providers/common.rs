//! Pieces shared by the adapters that translate (Anthropic, Gemini): reading OpenAI
//! content parts and tool calls out of a [`Message`], and writing OpenAI's response and
//! chunk shapes (OpenAI API reference, "The chat completion object" and "The chat
//! completion chunk object").
//!
//! Everything here borrows from the client's request: the request path builds the
//! provider body from references and serializes once.

use bytes::{BufMut, Bytes, BytesMut};
use http::{HeaderValue, Method};
use rand::Rng;
use serde::Serialize;
use serde_json::value::RawValue;
use serde_json::Value;

use super::reasoning::ThinkingBlock;
use super::{Sent, StreamContext};
use crate::api::{Message, Usage};
use crate::body::{self, Body};
use crate::error::{Code, ErrorKind, GatewayError};
use crate::json_text::write_str;

/// 502 for a provider answer that does not have the shape its API documents.
pub(crate) fn bad_upstream(message: impl Into<String>) -> GatewayError {
    GatewayError::new(ErrorKind::BadUpstream, message)
        .with_code(crate::error::Code::UpstreamBadResponse)
}

/// 400 for a request field the provider has no equivalent of, whatever its value:
/// OpenAI's `unsupported_parameter`, as OpenAI answers a field a model does not take
/// ("Unsupported parameter: 'max_tokens' is not supported with this model", recorded
/// in `tests/fixtures/provider-wire/openai/reasoning-model-legacy-parameter-error.json`).
/// `param` names the field.
pub(crate) fn unsupported_parameter(
    param: impl Into<String>,
    message: impl Into<String>,
) -> GatewayError {
    GatewayError::invalid_param(Code::UnsupportedParameter, param, message)
}

/// 400 for a value the provider cannot take in a field it has (a role, a media
/// type, `n` above 1): OpenAI's `unsupported_value`, as OpenAI answers a value a
/// model does not take ("Unsupported value: 'temperature' does not support 0.0 with
/// this model. Only the default (1) value is supported."). `param` names the field.
pub(crate) fn unsupported_value(
    param: impl Into<String>,
    message: impl Into<String>,
) -> GatewayError {
    GatewayError::invalid_param(Code::UnsupportedValue, param, message)
}

/// 400 for field `param` with the reason `why` ("must be ..."), as "`param` why",
/// with the `code` of its class of error: the codes request validation gives
/// (`crate::api::validate`: [`Code::MissingRequiredParameter`], [`Code::InvalidType`],
/// [`Code::InvalidValue`], ...), or [`Code::UnsupportedValue`] for a value only this
/// provider refuses.
pub(crate) fn field_error(code: Code, param: String, why: &str) -> GatewayError {
    let message = format!("`{param}` {why}");
    GatewayError::invalid_param(code, param, message)
}

/// The string `v` at field `param` (built only on failure).
///
/// # Errors
/// 400 naming `param`: `missing_required_parameter` when `v` is absent or null,
/// `invalid_type` when it is not a string.
pub(crate) fn required_str(
    v: Option<&Value>,
    param: impl FnOnce() -> String,
) -> Result<&str, GatewayError> {
    match v {
        Some(Value::String(s)) => Ok(s),
        None | Some(Value::Null) => Err(field_error(
            Code::MissingRequiredParameter,
            param(),
            "is required",
        )),
        Some(_) => Err(field_error(Code::InvalidType, param(), "must be a string")),
    }
}

/// OpenAI's `tool_choice`, read once for every adapter (OpenAI API reference, "Create
/// chat completion", `tool_choice`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum OpenAiToolChoice<'a> {
    /// Absent or null.
    Unset,
    /// `"auto"`.
    Auto,
    /// `"none"`.
    None,
    /// `"required"`.
    Required,
    /// `{"type":"function","function":{"name":...}}`.
    Function(&'a str),
}

/// Reads `tool_choice` from `chat`. An `allowed_tools` choice ("Constrains the tools
/// available to the model to a pre-defined set", its `mode` "auto" or "required")
/// reads as its mode: [`function_tools`] leaves out the tools it does not allow.
///
/// # Errors
/// 400 naming `tool_choice` for an unknown string or a function without a name.
pub(crate) fn openai_tool_choice(
    chat: &crate::api::ChatRequest,
) -> Result<OpenAiToolChoice<'_>, GatewayError> {
    use serde_json::Value;
    Ok(match chat.extra.get("tool_choice") {
        None | Some(Value::Null) => OpenAiToolChoice::Unset,
        Some(Value::String(s)) => match s.as_str() {
            "auto" => OpenAiToolChoice::Auto,
            "none" => OpenAiToolChoice::None,
            "required" => OpenAiToolChoice::Required,
            other => {
                return Err(GatewayError::invalid_param(
                    Code::InvalidValue,
                    "tool_choice",
                    format!("`tool_choice` \"{other}\" is not one of auto, none, required"),
                ))
            }
        },
        Some(v) if v.get("type").and_then(Value::as_str) == Some("allowed_tools") => {
            // The tools are narrowed by `function_tools`; the mode is kept here.
            match v
                .get("allowed_tools")
                .and_then(|a| a.get("mode"))
                .and_then(Value::as_str)
            {
                Some("auto") => OpenAiToolChoice::Auto,
                Some("required") => OpenAiToolChoice::Required,
                _ => {
                    return Err(GatewayError::invalid_param(
                        Code::InvalidValue,
                        "tool_choice.allowed_tools.mode",
                        "`tool_choice.allowed_tools.mode` must be \"auto\" or \"required\"",
                    ))
                }
            }
        }
        Some(v) => OpenAiToolChoice::Function(required_str(
            v.get("function").and_then(|f| f.get("name")),
            || "tool_choice.function.name".to_string(),
        )?),
    })
}

/// One OpenAI function tool (`tools[i]` with `type: "function"`), read once for every
/// adapter, which maps it to its own tool shape (OpenAI API reference, "Create chat
/// completion", `tools`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct FunctionTool<'a> {
    /// The `tools[]` entry itself, for keys an adapter reads beside the function
    /// (`cache_control`).
    pub tool: &'a Value,
    /// `tools[i].function`.
    pub function: &'a Value,
    /// `function.name`.
    pub name: &'a str,
    /// `function.description`, when it is a string.
    pub description: Option<&'a str>,
    /// `function.parameters` as sent (possibly `null`); `None` when absent. What a
    /// missing schema means is the adapter's to say.
    pub parameters: Option<&'a Value>,
}

/// The function tools of `chat`, in order, each with its index in `tools`. With
/// `tool_choice` `allowed_tools`, only the functions it names (OpenAI API reference,
/// `tool_choice`, allowed tools: "Constrains the tools available to the model to a
/// pre-defined set"): the providers have no such list, so the others are not sent.
///
/// # Errors
/// Each item is a 400 naming `tools[i]` for a tool that is not a function tool, or
/// `tools[i].function.name` for a function without a name.
pub(crate) fn function_tools(
    chat: &crate::api::ChatRequest,
) -> impl Iterator<Item = Result<(usize, FunctionTool<'_>), GatewayError>> {
    let allowed = allowed_functions(chat);
    chat.tools
        .iter()
        .flatten()
        .enumerate()
        .map(|(i, t)| Ok((i, function_tool(t, i)?)))
        .filter(move |t| match (t, &allowed) {
            (Ok((_, f)), Some(names)) => names.contains(&f.name),
            _ => true,
        })
}

/// The function names a `tool_choice` of type `allowed_tools` allows; `None` for any
/// other `tool_choice` (every tool is available).
fn allowed_functions(chat: &crate::api::ChatRequest) -> Option<Vec<&str>> {
    let choice = chat.extra.get("tool_choice")?;
    if choice.get("type").and_then(Value::as_str) != Some("allowed_tools") {
        return None;
    }
    let tools = choice.get("allowed_tools")?.get("tools")?.as_array()?;
    Some(
        tools
            .iter()
            .filter(|t| t.get("type").and_then(Value::as_str) == Some("function"))
            .filter_map(|t| t.get("function")?.get("name")?.as_str())
            .collect(),
    )
}

/// Reads `tools[i]` (see [`function_tools`]).
fn function_tool(tool: &Value, i: usize) -> Result<FunctionTool<'_>, GatewayError> {
    let kind = tool
        .get("type")
        .and_then(Value::as_str)
        .unwrap_or("function");
    if kind != "function" {
        return Err(unsupported_value(
            format!("tools[{i}].type"),
            format!(
                "`tools[{i}].type` is \"{}\"; only function tools are supported",
                crate::error::bounded(kind, 64)
            ),
        ));
    }
    let function = tool.get("function").ok_or_else(|| {
        field_error(
            Code::MissingRequiredParameter,
            format!("tools[{i}].function"),
            "is required",
        )
    })?;
    let name = required_str(function.get("name"), || format!("tools[{i}].function.name"))?;
    Ok(FunctionTool {
        tool,
        function,
        name,
        description: function.get("description").and_then(Value::as_str),
        parameters: function.get("parameters"),
    })
}

/// A function's `parameters` (as [`FunctionTool::parameters`] reads them) as the
/// object schema Anthropic's `input_schema` and Bedrock's `inputSchema.json` must
/// be: `"type": "object"` at the top (Anthropic API reference, Messages,
/// `tools[].input_schema.type`: "object", required; Bedrock refuses anything else
/// with "The value at toolConfig.tools.0.toolSpec.inputSchema.json.type must be one
/// of the following: object"). OpenAI takes a schema without `type` (`{}`, or only
/// `properties`), and "Omitting `parameters` defines a function with an empty
/// parameter list": absent or null is `{"type":"object","properties":{}}`, an
/// object schema without `type` gets `"type": "object"` added, anything else is
/// sent as the client wrote it.
pub(crate) fn object_schema(parameters: Option<&Value>) -> std::borrow::Cow<'_, Value> {
    use std::borrow::Cow;
    match parameters {
        None | Some(Value::Null) => {
            Cow::Owned(serde_json::json!({"type": "object", "properties": {}}))
        }
        Some(Value::Object(m)) if !m.contains_key("type") => {
            let mut m = m.clone();
            m.insert("type".into(), Value::String("object".into()));
            Cow::Owned(Value::Object(m))
        }
        Some(p) => Cow::Borrowed(p),
    }
}

/// Refuses what no translating adapter can send on: output other than text
/// (`audio`, or `modalities` holding anything but `"text"`), answered with
/// `text_only` (the provider's words), and `web_search_options` or the legacy
/// `functions` / `function_call`, pointing at `tools` (`provider` names the
/// provider in the message).
///
/// # Errors
/// 400 naming the first such field.
pub(crate) fn refuse_untranslated(
    chat: &crate::api::ChatRequest,
    provider: &str,
    text_only: &'static str,
) -> Result<(), GatewayError> {
    if let Some(field) = non_text_output(chat) {
        return Err(unsupported_value(field, text_only));
    }
    if let Some(field) = untranslated_tool_field(chat) {
        return Err(unsupported_parameter(
            field,
            format!("`{field}` is not supported for {provider}; use `tools`"),
        ));
    }
    Ok(())
}

/// The field of `chat` that asks for output other than text: `audio`, or
/// `modalities` holding anything but `"text"`; `None` when neither does. The
/// translating adapters answer in text only and refuse it in their own words.
fn non_text_output(chat: &crate::api::ChatRequest) -> Option<&'static str> {
    let set = |name: &str| chat.extra.get(name).filter(|v| !v.is_null());
    if set("audio").is_some() {
        return Some("audio");
    }
    set("modalities")
        .and_then(Value::as_array)
        .is_some_and(|m| m.iter().any(|x| x != "text"))
        .then_some("modalities")
}

/// The first of `web_search_options` and the legacy `functions` / `function_call`
/// that `chat` sets (not null): fields the translating adapters refuse, pointing at
/// `tools`.
fn untranslated_tool_field(chat: &crate::api::ChatRequest) -> Option<&'static str> {
    ["web_search_options", "functions", "function_call"]
        .into_iter()
        .find(|f| chat.extra.get(*f).is_some_and(|v| !v.is_null()))
}

/// Seconds since the Unix epoch, for OpenAI's `created`.
pub(crate) fn now_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// A fresh id with `prefix` and 24 random alphanumerics (for ids the provider does not
/// assign, such as Gemini's tool calls).
pub(crate) fn random_id(prefix: &str) -> String {
    let mut rng = rand::rng();
    let mut id = String::with_capacity(prefix.len() + 24);
    id.push_str(prefix);
    id.extend((0..24).map(|_| char::from(rng.sample(rand::distr::Alphanumeric))));
    id
}

/// An image as the client referenced it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ImageRef<'a> {
    /// A `data:<mime>;base64,<data>` URL, split into its media type and base64 payload.
    Inline { mime: &'a str, data: &'a str },
    /// An `http(s)://` URL the provider fetches itself.
    Url(&'a str),
}

/// One OpenAI content part that the translating adapters support.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Part<'a> {
    /// `{"type":"text","text":...}` (also a plain string content, and `refusal` parts).
    Text(&'a str),
    /// `{"type":"image_url","image_url":{"url":...}}`.
    Image(ImageRef<'a>),
}

/// Splits an image URL into what providers take (RFC 2397 `data:` URLs must be base64).
///
/// # Errors
/// Why the URL is unusable (another scheme, a non-base64 data URL), to complete
/// "`<field>` ...".
pub(crate) fn image_ref(url: &str) -> Result<ImageRef<'_>, &'static str> {
    let data_url = url
        .get(..5)
        .is_some_and(|scheme| scheme.eq_ignore_ascii_case("data:"));
    if data_url {
        let (head, data) = url[5..]
            .split_once(',')
            .ok_or("is a data URL without a comma")?;
        let head = base64_head(head).ok_or("must be a base64 data URL (data:<type>;base64,...)")?;
        let mime = head.split(';').next().unwrap_or(head);
        return Ok(ImageRef::Inline { mime, data });
    }
    if url.starts_with("https://") || url.starts_with("http://") {
        return Ok(ImageRef::Url(url));
    }
    Err("must be an http(s) URL or a base64 data URL")
}

/// The media type (with any parameters) of a data URL's `head` (before the comma)
/// that ends in the base64 marker, as the WHATWG Fetch standard's data: URL processor
/// reads it: trailing whitespace dropped, then `;`, any spaces and `base64` in any
/// case (`;BASE64`, `; base64`). `None` when the data is not base64.
fn base64_head(head: &str) -> Option<&str> {
    let head = head.trim_end_matches(|c: char| c.is_ascii_whitespace());
    let at = head.len().checked_sub(6)?;
    let marker = head.get(at..)?;
    if !marker.eq_ignore_ascii_case("base64") {
        return None;
    }
    head[..at].trim_end_matches(' ').strip_suffix(';')
}

/// Media type aliases clients send for images, with the type each one means.
const MEDIA_TYPE_ALIASES: [(&str, &str); 3] = [
    ("image/jpg", "image/jpeg"),
    ("image/pjpeg", "image/jpeg"),
    ("image/x-png", "image/png"),
];

/// The declared media type `mime` of an image (as [`image_ref`] splits it from a data
/// URL), normalised, when it is one of `accepted` (the provider's list, lower case):
/// compared without case or surrounding blanks, with the aliases clients send
/// (`image/jpg` and `image/pjpeg` for `image/jpeg`, `image/x-png` for `image/png`)
/// taken as the type they mean. `None` when the provider does not take it; the
/// adapter then refuses the part in its own words.
pub(crate) fn accepted_media_type(mime: &str, accepted: &[&'static str]) -> Option<&'static str> {
    let mime = mime.trim();
    let mime = MEDIA_TYPE_ALIASES
        .iter()
        .find(|(alias, _)| alias.eq_ignore_ascii_case(mime))
        .map_or(mime, |(_, m)| m);
    accepted
        .iter()
        .find(|t| t.eq_ignore_ascii_case(mime))
        .copied()
}

/// The index in `content` of its `n`-th `image_url` part (counting image parts
/// only, as [`parts`] yields them), for an error naming the client's own part; `n`
/// when `content` is not an array.
pub(crate) fn image_part_index(content: &Value, n: usize) -> usize {
    content
        .as_array()
        .and_then(|items| {
            items
                .iter()
                .enumerate()
                .filter(|(_, p)| p.get("type").and_then(Value::as_str) == Some("image_url"))
                .nth(n)
                .map(|(j, _)| j)
        })
        .unwrap_or(n)
}

/// The content parts of message `i`: a string is one text part; an array is read part
/// by part. Empty text is skipped (providers reject empty text blocks).
///
/// # Errors
/// 400 naming the part for a part type the provider adapters do not translate
/// (audio, files) or a malformed part.
pub(crate) fn parts(content: &Value, i: usize) -> Result<Vec<Part<'_>>, GatewayError> {
    match content {
        Value::String(s) if s.is_empty() => Ok(Vec::new()),
        Value::String(s) => Ok(vec![Part::Text(s)]),
        Value::Array(items) => {
            let mut out = Vec::with_capacity(items.len());
            for (j, p) in items.iter().enumerate() {
                let param = || format!("messages[{i}].content[{j}]");
                let kind = p.get("type").and_then(Value::as_str).unwrap_or("");
                match kind {
                    "text" | "refusal" => {
                        let text = p.get(kind).and_then(Value::as_str).ok_or_else(|| {
                            field_error(
                                Code::InvalidType,
                                format!("{}.{kind}", param()),
                                "must be a string",
                            )
                        })?;
                        if !text.is_empty() {
                            out.push(Part::Text(text));
                        }
                    }
                    "image_url" => {
                        let url = required_str(
                            p.get("image_url").and_then(|u| u.get("url").or(Some(u))),
                            || format!("{}.image_url.url", param()),
                        )?;
                        let image = image_ref(url).map_err(|why| {
                            field_error(
                                Code::InvalidValue,
                                format!("{}.image_url.url", param()),
                                why,
                            )
                        })?;
                        out.push(Part::Image(image));
                    }
                    other => {
                        return Err(unsupported_value(
                            format!("{}.type", param()),
                            format!(
                                "content part type \"{}\" is not supported by this provider",
                                crate::error::bounded(other, 64)
                            ),
                        ))
                    }
                }
            }
            Ok(out)
        }
        _ => Ok(Vec::new()),
    }
}

/// The text of a message whose content must be text only (system, tool results).
///
/// # Errors
/// 400 when the content holds an image or another non-text part.
pub(crate) fn text_only(
    content: &Value,
    i: usize,
) -> Result<std::borrow::Cow<'_, str>, GatewayError> {
    if let Value::String(s) = content {
        return Ok(std::borrow::Cow::Borrowed(s));
    }
    let mut text = String::new();
    for p in parts(content, i)? {
        match p {
            Part::Text(t) => text.push_str(t),
            Part::Image(_) => {
                return Err(unsupported_value(
                    format!("messages[{i}].content"),
                    format!("`messages[{i}].content` may only hold text for this role"),
                ))
            }
        }
    }
    Ok(std::borrow::Cow::Owned(text))
}

/// One tool call of an assistant message, borrowed from the request.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ToolCallRef<'a> {
    /// The call id the tool result will refer to.
    pub id: &'a str,
    /// The function name.
    pub name: &'a str,
    /// The arguments, validated to be a JSON object (`{}` when the client sent "").
    pub arguments: &'a RawValue,
}

/// The `tool_calls` of assistant message `i` (empty when it has none).
///
/// # Errors
/// 400 naming the field when a call lacks an id or name, is not a function call, or has
/// arguments that are not a JSON object.
pub(crate) fn tool_calls(m: &Message, i: usize) -> Result<Vec<ToolCallRef<'_>>, GatewayError> {
    let Some(calls) = m.extra.get("tool_calls").filter(|v| !v.is_null()) else {
        return Ok(Vec::new());
    };
    let calls = calls.as_array().ok_or_else(|| {
        field_error(
            Code::InvalidType,
            format!("messages[{i}].tool_calls"),
            "must be an array",
        )
    })?;
    let mut out = Vec::with_capacity(calls.len());
    for (j, c) in calls.iter().enumerate() {
        let at = |name: &str| format!("messages[{i}].tool_calls[{j}].{name}");
        let id = required_str(c.get("id"), || at("id"))?;
        let f = c.get("function").filter(|f| !f.is_null()).ok_or_else(|| {
            field_error(
                Code::MissingRequiredParameter,
                at("function"),
                "is required",
            )
        })?;
        let name = required_str(f.get("name"), || at("function.name"))?;
        let args = f.get("arguments").and_then(Value::as_str).unwrap_or("");
        let arguments = json_object(args).ok_or_else(|| {
            field_error(
                Code::InvalidValue,
                format!("messages[{i}].tool_calls[{j}].function.arguments"),
                "must be a JSON object encoded as a string",
            )
        })?;
        out.push(ToolCallRef {
            id,
            name,
            arguments,
        });
    }
    Ok(out)
}

/// Longest tool use id Bedrock takes (and the length [`tool_use_id`] keeps ids to).
pub(crate) const MAX_TOOL_USE_ID: usize = 64;

/// `id`, a tool call id of the client's conversation, as a tool use id Anthropic and
/// Bedrock take: 1 to 64 of `a-z A-Z 0-9 _ -` (Bedrock API reference,
/// `ToolUseBlock.toolUseId` and `ToolResultBlock.toolUseId`: "Length Constraints:
/// Minimum length of 1. Maximum length of 64. Pattern: `[a-zA-Z0-9_-]+`"; Anthropic
/// refuses a `tool_use.id` outside that pattern with a 400, "String should match
/// pattern '^[a-zA-Z0-9_-]+$'"). Conversations begun elsewhere carry other ids
/// (`functions.get_weather:0`, ids with a Gemini signature after `__thought__`).
///
/// An id that fits is kept as is. Any other is rewritten the same way wherever it
/// appears, so a call and its result still match: each other character becomes `_`,
/// cut to 47 characters, followed by `_` and 16 hex digits of a hash (FNV-1a, 64
/// bits) of the whole id, so ids that differ only in rewritten or cut characters stay
/// distinct.
pub(crate) fn tool_use_id(id: &str) -> std::borrow::Cow<'_, str> {
    let allowed = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == '-';
    if !id.is_empty() && id.len() <= MAX_TOOL_USE_ID && id.chars().all(allowed) {
        return std::borrow::Cow::Borrowed(id);
    }
    let hash = id.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    });
    let mut out: String = id
        .chars()
        .map(|c| if allowed(c) { c } else { '_' })
        .take(MAX_TOOL_USE_ID - 17)
        .collect();
    out.push_str(&format!("_{hash:016x}"));
    std::borrow::Cow::Owned(out)
}

/// `text` as a borrowed JSON object; blank text is `{}`. `None` when the text is not
/// a JSON object.
pub(crate) fn json_object(text: &str) -> Option<&RawValue> {
    let text = text.trim();
    let text = if text.is_empty() { "{}" } else { text };
    serde_json::from_str::<&RawValue>(text)
        .ok()
        .filter(|_| text.starts_with('{'))
}

/// Builds a JSON `POST` to `uri` with the API key in header `key_header` (marked
/// sensitive so it never reaches logs) and `extra` headers.
///
/// # Errors
/// 500 when the body cannot be encoded or the key is not a valid header value.
pub(crate) fn post_json(
    uri: String,
    key_header: &'static str,
    key: Option<&str>,
    extra: &[(&'static str, &'static str)],
    stream: bool,
    body: &impl Serialize,
) -> Result<http::Request<Body>, GatewayError> {
    let internal = |m: String| GatewayError::new(ErrorKind::Internal, m);
    let json =
        serde_json::to_vec(body).map_err(|e| internal(format!("could not encode request: {e}")))?;
    let mut b = http::Request::builder()
        .method(Method::POST)
        .uri(uri)
        .header(http::header::CONTENT_TYPE, "application/json")
        .header(
            http::header::ACCEPT,
            if stream {
                "text/event-stream"
            } else {
                "application/json"
            },
        );
    for (name, value) in extra {
        b = b.header(*name, *value);
    }
    if let Some(key) = key {
        let mut v = HeaderValue::from_str(key).map_err(|_| {
            internal("the provider API key is not a valid header value".to_string())
        })?;
        v.set_sensitive(true);
        b = b.header(key_header, v);
    }
    b.body(body::full(json))
        .map_err(|e| internal(format!("could not build upstream request: {e}")))
}

/// One assistant choice of a non-streaming answer, in OpenAI's terms.
#[derive(Debug, Default)]
pub(crate) struct Choice {
    /// Concatenated text, `None` when the model produced none.
    pub content: Option<String>,
    /// OpenAI's `refusal` message, when the provider explained one.
    pub refusal: Option<String>,
    /// Tool calls: id, function name, arguments as a JSON string.
    pub tool_calls: Vec<(String, String, String)>,
    /// Gemini's `thoughtSignature` of tool call `k` (same index as `tool_calls`; may
    /// be shorter), written as the call's `extra_content.google.thought_signature`.
    pub thought_signatures: Vec<Option<String>>,
    /// The model's reasoning (thought summaries), OpenAI-compatible servers'
    /// `message.reasoning_content`; `None` when there was none.
    pub reasoning_content: Option<String>,
    /// Reasoning blocks with their signatures, for replay (see [`super::reasoning`]).
    pub thinking_blocks: Vec<ThinkingBlock<'static>>,
    /// OpenAI finish reason (`stop`, `length`, `tool_calls`, `content_filter`).
    pub finish_reason: &'static str,
}

/// Serializes an OpenAI `chat.completion` object (OpenAI API reference, "The chat
/// completion object"), its members in OpenAI's order: `id`, `object`, `created`,
/// `model`, `choices` (each `index`, `message`, `logprobs: null`, `finish_reason`;
/// a message's `role`, `content` and `refusal`, `null` when absent, then
/// `reasoning_content`, `tool_calls` and `thinking_blocks` when it has them), `usage`.
///
/// Written by hand, strings through [`crate::json_text`], and tool calls, reasoning
/// blocks and usage through `serde`. Building a `serde_json::Value` tree first (a
/// `BTreeMap` per object, a `String` per key and value, then the tree's
/// serialization and drop) was two thirds of a translated Anthropic answer's
/// instructions, about 20,700 of 31,000 (`examples/translate_cost.rs` under
/// callgrind); the tests hold this writer to that tree, member for member.
pub(crate) fn completion(id: &str, model: &str, choices: &[Choice], usage: Usage) -> Bytes {
    let opt_str = |out: &mut Vec<u8>, s: Option<&str>| match s {
        Some(s) => write_str(out, s),
        None => out.extend_from_slice(b"null"),
    };
    let text: usize = choices
        .iter()
        .map(|c| {
            c.content.as_ref().map_or(0, String::len)
                + c.reasoning_content.as_ref().map_or(0, String::len)
                + c.tool_calls
                    .iter()
                    .map(|(i, n, a)| i.len() + n.len() + a.len() + 96)
                    .sum::<usize>()
                + 160
        })
        .sum();
    let mut out = Vec::with_capacity(id.len() + model.len() + text + 192);
    put_object_head(&mut out, id, "chat.completion", now_secs(), model);
    out.push(b'[');
    for (i, c) in choices.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.extend_from_slice(b"{\"index\":");
        out.extend_from_slice(itoa::Buffer::new().format(i).as_bytes());
        out.extend_from_slice(b",\"message\":{\"role\":\"assistant\",\"content\":");
        opt_str(&mut out, c.content.as_deref());
        out.extend_from_slice(b",\"refusal\":");
        opt_str(&mut out, c.refusal.as_deref());
        if let Some(r) = &c.reasoning_content {
            out.extend_from_slice(b",\"reasoning_content\":");
            write_str(&mut out, r);
        }
        // Writing into a `Vec` fails only if a `Serialize` impl does; none here does.
        if !c.tool_calls.is_empty() {
            out.extend_from_slice(b",\"tool_calls\":");
            let _ = serde_json::to_writer(&mut out, &ToolCallsOut(c));
        }
        if !c.thinking_blocks.is_empty() {
            out.extend_from_slice(b",\"thinking_blocks\":");
            let _ = serde_json::to_writer(&mut out, &c.thinking_blocks);
        }
        out.extend_from_slice(b"},\"logprobs\":null,\"finish_reason\":");
        write_str(&mut out, c.finish_reason);
        out.push(b'}');
    }
    out.extend_from_slice(b"],\"usage\":");
    let _ = serde_json::to_writer(&mut out, &usage);
    out.push(b'}');
    Bytes::from(out)
}

/// Appends the members an answer object and each of a stream's chunks begin with,
/// `{"id":…,"object":…,"created":…,"model":…,"choices":`, in OpenAI's order;
/// `object` is `chat.completion` or `chat.completion.chunk` (a constant, written
/// as it is), `created` Unix seconds.
#[inline]
fn put_object_head(out: &mut Vec<u8>, id: &str, object: &str, created: u64, model: &str) {
    out.extend_from_slice(b"{\"id\":");
    write_str(out, id);
    debug_assert!(
        !crate::json_text::needs_escape(object.as_bytes()),
        "{object}"
    );
    out.extend_from_slice(b",\"object\":\"");
    out.extend_from_slice(object.as_bytes());
    out.extend_from_slice(b"\",\"created\":");
    out.extend_from_slice(itoa::Buffer::new().format(created).as_bytes());
    out.extend_from_slice(b",\"model\":");
    write_str(out, model);
    out.extend_from_slice(b",\"choices\":");
}

/// A choice's `message.tool_calls`.
struct ToolCallsOut<'a>(&'a Choice);

impl Serialize for ToolCallsOut<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let c = self.0;
        s.collect_seq(
            c.tool_calls
                .iter()
                .enumerate()
                .map(|(k, (id, name, arguments))| ToolCallOut {
                    id,
                    kind: "function",
                    function: FunctionOut { name, arguments },
                    extra_content: c.thought_signatures.get(k).and_then(Option::as_deref).map(
                        |thought_signature| ExtraContent {
                            google: GoogleExtra { thought_signature },
                        },
                    ),
                }),
        )
    }
}

/// One entry of `message.tool_calls`.
#[derive(Serialize)]
struct ToolCallOut<'a> {
    id: &'a str,
    #[serde(rename = "type")]
    kind: &'static str,
    function: FunctionOut<'a>,
    /// Gemini's thought signature of the call, when it sent one ([`ExtraContent`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    extra_content: Option<ExtraContent<'a>>,
}

/// A tool call's `function`: its name and its arguments as a JSON string.
#[derive(Serialize)]
struct FunctionOut<'a> {
    name: &'a str,
    arguments: &'a str,
}

/// A tool-call piece of a chunk's `delta.tool_calls`.
#[derive(Debug, Serialize)]
pub(crate) struct ToolDelta<'a> {
    /// Position of the call in the answer (stable across its pieces).
    pub index: u32,
    /// Call id, on the first piece only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub id: Option<&'a str>,
    /// `"function"`, on the first piece only.
    #[serde(rename = "type", skip_serializing_if = "Option::is_none")]
    pub kind: Option<&'static str>,
    /// Name (first piece) and/or a piece of the arguments string.
    pub function: FunctionDelta<'a>,
}

impl<'a> ToolDelta<'a> {
    /// The first piece of call `index`, as OpenAI streams one: its id, type and
    /// name, and `arguments: ""` (the arguments follow in pieces of their own).
    pub(crate) fn opening(index: u32, id: &'a str, name: &'a str) -> Self {
        ToolDelta {
            index,
            id: Some(id),
            kind: Some("function"),
            function: FunctionDelta {
                name: Some(name),
                arguments: "",
            },
        }
    }

    /// A later piece of call `index`: the next part of its JSON arguments string.
    pub(crate) fn arguments(index: u32, arguments: &'a str) -> Self {
        ToolDelta {
            index,
            id: None,
            kind: None,
            function: FunctionDelta {
                name: None,
                arguments,
            },
        }
    }
}

/// `delta.tool_calls[].function`.
#[derive(Debug, Serialize)]
pub(crate) struct FunctionDelta<'a> {
    /// Function name, on the first piece only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<&'a str>,
    /// The next piece of the JSON arguments string.
    pub arguments: &'a str,
}

/// Where a tool call carries Gemini's thought signature for OpenAI clients:
/// `extra_content.google.thought_signature`, the field Google's own
/// OpenAI-compatible endpoint uses ("OpenAI compatibility", thought signatures).
#[derive(Serialize)]
struct ExtraContent<'a> {
    google: GoogleExtra<'a>,
}

#[derive(Serialize)]
struct GoogleExtra<'a> {
    thought_signature: &'a str,
}

/// One `delta.tool_calls[]` element: the piece, plus the signature on a call's
/// first piece.
#[derive(Serialize)]
struct ToolOut<'a> {
    #[serde(flatten)]
    piece: ToolDelta<'a>,
    #[serde(skip_serializing_if = "Option::is_none")]
    extra_content: Option<ExtraContent<'a>>,
}

#[derive(Serialize, Default)]
struct Delta<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    role: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    content: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    reasoning_content: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    refusal: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_calls: Option<[ToolOut<'a>; 1]>,
    #[serde(skip_serializing_if = "Option::is_none")]
    thinking_blocks: Option<[&'a ThinkingBlock<'a>; 1]>,
}

#[derive(Serialize)]
struct ChunkChoice<'a> {
    index: u32,
    delta: Delta<'a>,
    logprobs: (),
    finish_reason: Option<&'a str>,
}

/// Keeps what a stream has sent ([`Sent`]) and drops the start of a continuation
/// that the client already has ([`Resume::skip`]). Shared by every transcoder, so a
/// stream continued on another provider behaves the same whatever its wire format.
#[derive(Debug, Default)]
pub(crate) struct Progress {
    /// What has been sent.
    pub sent: Sent,
    track: bool,
    /// Text still to be matched and dropped, from this byte offset of `skip`.
    skip: Option<(String, usize, bool)>,
    /// Content arrived (before any skipping): the commit point.
    pub content: bool,
    resuming: bool,
}

impl Progress {
    /// Progress of a stream started with `ctx`.
    pub fn new(ctx: &StreamContext) -> Progress {
        let mut p = Progress {
            track: ctx.track,
            ..Progress::default()
        };
        if let Some(r) = &ctx.resume {
            p.resuming = true;
            p.sent = r.sent.clone();
            p.sent.finished = false;
            p.sent.finish_supplied = false;
            p.sent.unmatched = 0;
            if !r.skip.is_empty() {
                p.skip = Some((r.skip.clone(), 0, r.exact));
                if r.exact {
                    p.sent.unmatched = r.skip.len();
                }
            }
        }
        p
    }

    /// Whether this stream continues another (it keeps the first one's identity and
    /// sends no `role` chunk).
    pub fn resuming(&self) -> bool {
        self.resuming
    }

    /// A text piece arrived: returns the part to send (empty while the start of a
    /// continuation is being dropped) and records it.
    ///
    /// # Errors
    /// [`Code::UpstreamStreamDiverged`] when a restarted answer does not begin with
    /// the text already sent.
    pub fn text<'a>(&mut self, text: &'a str) -> Result<&'a str, GatewayError> {
        if text.is_empty() {
            return Ok(text);
        }
        self.content = true;
        let mut rest = text;
        if let Some((want, pos, exact)) = &mut self.skip {
            let wanted = &want[*pos..];
            let mut n = wanted
                .bytes()
                .zip(rest.bytes())
                .take_while(|(a, b)| a == b)
                .count();
            while !rest.is_char_boundary(n) {
                n -= 1;
            }
            if n == wanted.len() {
                rest = &rest[n..];
                self.skip = None;
                self.sent.unmatched = 0;
            } else if n == rest.len() {
                *pos += n;
                if *exact {
                    self.sent.unmatched = want.len() - *pos;
                }
                return Ok("");
            } else if *exact {
                return Err(GatewayError::new(
                    ErrorKind::BadUpstream,
                    "the stream broke, and the endpoint that was to continue it began a different answer than the one already sent",
                )
                .with_code(Code::UpstreamStreamDiverged)
                .with_retry(crate::error::Retry::OtherEndpoint));
            } else {
                rest = &rest[n..];
                self.skip = None;
            }
        }
        if !rest.is_empty() {
            self.sent.pieces += 1;
            if self.track {
                if self.sent.text.len() + rest.len() > super::MAX_TRACKED_BYTES {
                    self.track = false;
                    self.sent.untracked = true;
                    self.sent.text = String::new();
                } else {
                    self.sent.text.push_str(rest);
                }
            }
        }
        Ok(rest)
    }

    /// Whether a continuation is still dropping the start of its answer that the
    /// client already has (see [`Progress::text`]).
    pub fn skipping(&self) -> bool {
        self.skip.is_some()
    }

    /// A text piece arrived that needs no skipping or tracking (neither is on): only
    /// counted, so the pass-through relay need not decode it.
    pub fn counted(&mut self) -> bool {
        if self.track || self.skip.is_some() {
            return false;
        }
        self.content = true;
        self.sent.pieces += 1;
        true
    }

    /// A content piece that is not text was sent (Mistral's reasoning models stream
    /// `delta.content` as a list of `thinking` and `text` parts): content for the
    /// commit point, but the text sent is no longer known, so the stream is not
    /// continued elsewhere ([`Sent::untracked`]).
    ///
    /// # Errors
    /// [`Code::UpstreamStreamDiverged`] when a restart still had text to repeat: what
    /// it sent instead cannot be compared with it.
    pub fn opaque(&mut self) -> Result<(), GatewayError> {
        if let Some((_, _, exact)) = self.skip.take() {
            if exact {
                return Err(GatewayError::new(
                    ErrorKind::BadUpstream,
                    "the stream broke, and the endpoint that was to continue it sent content that is not text instead of repeating the text already sent",
                )
                .with_code(Code::UpstreamStreamDiverged)
                .with_retry(crate::error::Retry::OtherEndpoint));
            }
        }
        self.content = true;
        self.sent.pieces += 1;
        self.track = false;
        self.sent.untracked = true;
        self.sent.text = String::new();
        Ok(())
    }

    /// A tool-call piece was sent.
    pub fn tool(&mut self) {
        self.content = true;
        self.sent.pieces += 1;
        self.sent.tool_calls = true;
    }

    /// A reasoning piece was sent (text or a whole block): content for the commit
    /// point, and the end of any continuation elsewhere ([`Sent::reasoning`]).
    pub fn reasoning(&mut self) {
        self.content = true;
        self.sent.pieces += 1;
        self.sent.reasoning = true;
    }
}

/// Writes OpenAI `chat.completion.chunk` events for one streamed answer: same id,
/// creation time and logical model on each, `role: assistant` on the first (unless
/// the stream continues another, see [`Resume`]).
#[derive(Debug)]
pub(crate) struct ChunkWriter {
    model: String,
    role_sent: bool,
    /// The client asked for usage: every chunk but the usage chunk has `usage: null`.
    usage_null: bool,
    /// What has been sent, and the continuation's skip.
    pub progress: Progress,
    /// The start every chunk of the stream shares,
    /// `{"id":…,"object":"chat.completion.chunk","created":…,"model":…,"choices":`,
    /// written once for the stream's id (empty until the first chunk, and again
    /// after [`ChunkWriter::set_id`]). Writing those four members afresh for every
    /// chunk through `serde_json` was about a third of a translated stream's work.
    head: Vec<u8>,
}

impl ChunkWriter {
    /// A writer reporting the logical model of `ctx`.
    pub fn new(ctx: &StreamContext) -> Self {
        let mut progress = Progress::new(ctx);
        let resuming = progress.resuming();
        if !resuming {
            progress.sent.created = now_secs();
        }
        ChunkWriter {
            model: ctx.logical_model.clone(),
            role_sent: resuming,
            usage_null: ctx.include_usage,
            progress,
            head: Vec::new(),
        }
    }

    /// Sets the completion id (the provider's message id) unless this stream keeps
    /// the id of the one it continues.
    pub fn set_id(&mut self, id: String) {
        if !self.progress.resuming() {
            self.progress.sent.id = id;
            self.head.clear();
        }
    }

    /// Records the model the provider says generated the stream (for the
    /// attempt's trace span; the chunks carry the client's model).
    pub fn set_upstream_model(&mut self, model: String) {
        self.progress.sent.model = Some(model);
    }

    /// The completion id, empty until set.
    pub fn id(&self) -> &str {
        &self.progress.sent.id
    }

    /// Whether any text or tool-call piece has arrived.
    pub fn content(&self) -> bool {
        self.progress.content
    }

    fn write(&mut self, out: &mut BytesMut, delta: Delta<'_>, finish: Option<&str>) {
        let role = if self.role_sent {
            None
        } else {
            Some("assistant")
        };
        self.role_sent = true;
        self.put_chunk(out, Delta { role, ..delta }, finish);
    }

    /// Appends the event of one chunk of a single choice, `delta` and `finish`, as
    /// OpenAI writes it: `"logprobs":null`, and with `include_usage`, `"usage":null`
    /// ("all other chunks will also include a usage field, but with a null value").
    /// The members are in the order of [`Delta`], [`ChunkChoice`] and the chunk
    /// object; a delta of text, reasoning text or none (every chunk of a text
    /// answer) is written by hand, a tool call, reasoning block or refusal through
    /// `serde`.
    fn put_chunk(&mut self, out: &mut BytesMut, delta: Delta<'_>, finish: Option<&str>) {
        let text = delta.content.map_or(0, str::len) + delta.reasoning_content.map_or(0, str::len);
        self.put_head(out, text + 128);
        if delta.tool_calls.is_none() && delta.thinking_blocks.is_none() && delta.refusal.is_none()
        {
            out.put_slice(b"[{\"index\":0,\"delta\":{");
            let mut sep: &[u8] = b"";
            if let Some(role) = delta.role {
                out.put_slice(b"\"role\":");
                write_str(out, role);
                sep = b",";
            }
            if let Some(content) = delta.content {
                out.put_slice(sep);
                out.put_slice(b"\"content\":");
                write_str(out, content);
                sep = b",";
            }
            if let Some(reasoning) = delta.reasoning_content {
                out.put_slice(sep);
                out.put_slice(b"\"reasoning_content\":");
                write_str(out, reasoning);
            }
            out.put_slice(b"},\"logprobs\":null,\"finish_reason\":");
            match finish {
                Some(reason) => write_str(out, reason),
                None => out.put_slice(b"null"),
            }
            out.put_slice(b"}]");
        } else {
            let choices = [ChunkChoice {
                index: 0,
                delta,
                logprobs: (),
                finish_reason: finish,
            }];
            let mut w = out.writer();
            // Writing into memory fails only if a `Serialize` impl does; none here does.
            let _ = serde_json::to_writer(&mut w, &choices);
        }
        out.put_slice(if self.usage_null {
            b",\"usage\":null}\n\n"
        } else {
            b"}\n\n"
        });
    }

    /// Appends `data: ` and the chunks' shared start ([`ChunkWriter::head`], built
    /// first if need be), with room for `more` bytes after it.
    fn put_head(&mut self, out: &mut BytesMut, more: usize) {
        if self.head.is_empty() {
            let sent = &self.progress.sent;
            self.head.reserve(sent.id.len() + self.model.len() + 80);
            put_object_head(
                &mut self.head,
                &sent.id,
                "chat.completion.chunk",
                sent.created,
                &self.model,
            );
        }
        out.reserve(6 + self.head.len() + more);
        out.put_slice(b"data: ");
        out.put_slice(&self.head);
    }

    /// The opening chunk: `role: assistant` with empty content (OpenAI sends the same).
    pub fn start(&mut self, out: &mut BytesMut) {
        if !self.role_sent {
            self.write(
                out,
                Delta {
                    content: Some(""),
                    ..Delta::default()
                },
                None,
            );
        }
    }

    /// A text piece.
    ///
    /// # Errors
    /// See [`Progress::text`].
    pub fn text(&mut self, out: &mut BytesMut, text: &str) -> Result<(), GatewayError> {
        let text = self.progress.text(text)?;
        if !text.is_empty() {
            self.write(
                out,
                Delta {
                    content: Some(text),
                    ..Delta::default()
                },
                None,
            );
        }
        Ok(())
    }

    /// A reasoning piece (`delta.reasoning_content`, as DeepSeek, vLLM and LiteLLM
    /// stream it). It is the commit point like text, but is not part of the answer
    /// text a continuation repeats or prefills; a stream that has sent reasoning is
    /// marked so (see [`Progress::reasoning`]).
    pub fn reasoning(&mut self, out: &mut BytesMut, text: &str) {
        if text.is_empty() {
            return;
        }
        // A restart's reasoning comes before the text it repeats: not passed on,
        // but the restart is under way (its commit point, as skipped text is).
        if self.progress.skipping() {
            self.progress.content = true;
            return;
        }
        self.progress.reasoning();
        self.write(
            out,
            Delta {
                reasoning_content: Some(text),
                ..Delta::default()
            },
            None,
        );
    }

    /// A whole reasoning block with its signature (`delta.thinking_blocks`, one entry).
    pub fn thinking_block(&mut self, out: &mut BytesMut, block: &ThinkingBlock<'_>) {
        if self.progress.skipping() {
            self.progress.content = true;
            return;
        }
        self.progress.reasoning();
        self.write(
            out,
            Delta {
                thinking_blocks: Some([block]),
                ..Delta::default()
            },
            None,
        );
    }

    /// A tool-call piece.
    pub fn tool(&mut self, out: &mut BytesMut, piece: ToolDelta<'_>) {
        self.tool_signed(out, piece, None);
    }

    /// A tool-call piece carrying Gemini's thought signature (see [`ExtraContent`]).
    pub fn tool_signed(
        &mut self,
        out: &mut BytesMut,
        piece: ToolDelta<'_>,
        thought_signature: Option<&str>,
    ) {
        self.progress.tool();
        let extra_content = thought_signature.map(|s| ExtraContent {
            google: GoogleExtra {
                thought_signature: s,
            },
        });
        self.write(
            out,
            Delta {
                tool_calls: Some([ToolOut {
                    piece,
                    extra_content,
                }]),
                ..Delta::default()
            },
            None,
        );
    }

    /// The provider's explanation of a refusal (`delta.refusal`, OpenAI's
    /// `ChatCompletionChunk` schema; the whole answer's `message.refusal`), written
    /// just before the `content_filter` finish chunk. Not answer content: the
    /// finish follows in the same step, so nothing is left to fail over, and a
    /// stream that is only a refusal stays one without content, as before.
    pub fn refusal(&mut self, out: &mut BytesMut, text: &str) {
        if text.is_empty() {
            return;
        }
        self.write(
            out,
            Delta {
                refusal: Some(text),
                ..Delta::default()
            },
            None,
        );
    }

    /// The chunk carrying the finish reason, with an empty delta.
    pub fn finish(&mut self, out: &mut BytesMut, reason: &str) {
        self.progress.sent.finished = true;
        self.progress.sent.finish_reason = Some(reason.to_string());
        self.write(out, Delta::default(), Some(reason));
    }

    /// Closes the answer: a `stop` finish chunk when none was sent (`finish` is the
    /// transcoder's finish reason, set to `stop` then), the usage chunk when the
    /// client asked for one (`usage`), and `[DONE]`.
    pub fn close(
        &mut self,
        out: &mut BytesMut,
        finish: &mut Option<&'static str>,
        usage: Option<Usage>,
    ) {
        if finish.is_none() {
            *finish = Some("stop");
            self.finish(out, "stop");
            self.progress.sent.finish_supplied = true;
        }
        if let Some(usage) = usage {
            self.usage(out, usage);
        }
        super::openai::write_done(out);
    }

    /// The final usage chunk (`choices: []`), for clients that asked for it.
    pub fn usage(&mut self, out: &mut BytesMut, usage: Usage) {
        self.put_head(out, 256);
        out.put_slice(b"[],\"usage\":");
        let mut w = out.writer();
        // Writing into memory fails only if a `Serialize` impl does; `Usage`'s does not.
        let _ = serde_json::to_writer(&mut w, &usage);
        w.into_inner().put_slice(b"}\n\n");
    }
}

/// Most bytes of one piece of a stream an adapter holds until its block closes (a
/// reasoning block's text or signature, a Gemini call's streamed arguments): 16 MiB,
/// the bound on one server-sent event ([`crate::sse::MAX_EVENT_BYTES`]). A provider
/// sending more is answering badly, and memory is protected from it.
pub(crate) const MAX_HELD_BLOCK_BYTES: usize = crate::sse::MAX_EVENT_BYTES;

/// Appends `piece` to `held`, a part of a block kept until the block closes.
///
/// # Errors
/// 502 `upstream_bad_response` when `held` would pass [`MAX_HELD_BLOCK_BYTES`]
/// (`what` names the block in the message).
pub(crate) fn hold(held: &mut String, piece: &str, what: &str) -> Result<(), GatewayError> {
    if held.len() + piece.len() > MAX_HELD_BLOCK_BYTES {
        return Err(bad_upstream(format!(
            "upstream sent a {what} larger than {MAX_HELD_BLOCK_BYTES} bytes"
        )));
    }
    held.push_str(piece);
    Ok(())
}

/// 502 for a stream that ended before the provider's finish marker.
pub(crate) fn stream_cut() -> GatewayError {
    GatewayError::new(
        ErrorKind::BadUpstream,
        "upstream closed the stream before the answer was complete",
    )
    .with_code(crate::error::Code::UpstreamStreamCut)
}

/// What a transcoder's [`super::StreamTranscoder::end`] does when the upstream body
/// ends: `close` the answer when a finish reason arrived (`finish`), else the stream
/// was cut.
///
/// # Errors
/// [`stream_cut`] when no finish reason arrived.
pub(crate) fn end_of_body(finish: Option<&str>, close: impl FnOnce()) -> Result<(), GatewayError> {
    if finish.is_none() {
        return Err(stream_cut());
    }
    close();
    Ok(())
}

#[cfg(test)]
mod progress_tests {
    use super::*;
    use crate::providers::Resume;

    /// A stream that restarts after "Hello wor" (2 pieces) was sent, skipping `skip`.
    fn restarting(skip: &str, exact: bool) -> StreamContext {
        StreamContext {
            logical_model: "m".into(),
            include_usage: false,
            prompt_tokens_estimate: 0,
            track: true,
            resume: Some(Resume {
                sent: Sent {
                    id: "c1".into(),
                    created: 5,
                    text: "Hello wor".into(),
                    pieces: 2,
                    ..Sent::default()
                },
                skip: skip.into(),
                exact,
            }),
        }
    }

    fn resumed(skip: &str, exact: bool) -> Progress {
        Progress::new(&restarting(skip, exact))
    }

    #[test]
    fn a_restart_drops_the_repeated_text_across_pieces_and_passes_the_rest() {
        let mut p = resumed("Hello wor", true);
        assert_eq!(p.text("Hel").unwrap(), "");
        assert_eq!(p.text("lo").unwrap(), "");
        assert_eq!(p.text(" world").unwrap(), "ld");
        assert_eq!(p.text("!").unwrap(), "!");
        assert_eq!(p.sent.text, "Hello world!");
        assert_eq!(p.sent.pieces, 4);
        assert!(p.resuming() && p.content);
    }

    /// A translated restart's reasoning before it has repeated the text already sent
    /// is not written (Bedrock's reader handles a whole read of events at once, so
    /// the relay's per-event hold-back does not see each of them); after it, it is.
    #[test]
    fn a_restart_writes_no_reasoning_before_the_repeated_text() {
        let mut w = ChunkWriter::new(&restarting("Hello wor", true));
        let mut out = BytesMut::new();
        w.reasoning(&mut out, "thinking first");
        let block = ThinkingBlock::RedactedThinking { data: "x".into() };
        w.thinking_block(&mut out, &block);
        w.text(&mut out, "Hello wor").unwrap();
        assert!(out.is_empty(), "{out:?}");
        assert!(!w.progress.sent.reasoning && w.content());
        w.reasoning(&mut out, "then more");
        assert!(String::from_utf8_lossy(&out).contains("then more"));
        assert!(w.progress.sent.reasoning);
    }

    #[test]
    fn text_past_the_tracking_bound_is_dropped_and_the_stream_marked_untracked() {
        let mut p = Progress::new(&StreamContext {
            logical_model: "m".into(),
            include_usage: false,
            prompt_tokens_estimate: 0,
            track: true,
            resume: None,
        });
        let piece = "x".repeat(1024);
        for _ in 0..(crate::providers::MAX_TRACKED_BYTES / 1024) {
            assert_eq!(p.text(&piece).unwrap(), piece);
        }
        assert!(!p.sent.untracked);
        assert_eq!(p.text("y").unwrap(), "y", "still relayed");
        assert!(p.sent.untracked);
        assert!(p.sent.text.is_empty(), "memory given back");
    }

    #[test]
    fn a_restart_that_differs_fails_as_diverged() {
        let mut p = resumed("Hello wor", true);
        assert_eq!(p.text("Hello").unwrap(), "");
        let e = p.text(" there").unwrap_err();
        assert_eq!(e.code, Some(Code::UpstreamStreamDiverged));
    }

    #[test]
    fn trimmed_prefill_whitespace_is_dropped_when_it_comes_back_and_not_required() {
        let mut p = resumed(" ", false);
        assert_eq!(p.text(" next").unwrap(), "next");
        let mut q = resumed(" ", false);
        assert_eq!(q.text("next").unwrap(), "next");
    }

    #[test]
    fn a_divergence_inside_a_multibyte_character_cuts_on_a_boundary() {
        let mut p = resumed("é", false);
        // "é" is C3 A9, "è" is C3 A8: they share the first byte only.
        assert_eq!(p.text("è!").unwrap(), "è!");
    }
}

#[cfg(test)]
mod tool_tests {
    use super::*;
    use crate::providers::testing::chat;
    use serde_json::json;

    fn read(tools: Value) -> Vec<Result<(usize, FunctionTool<'static>), GatewayError>> {
        let c = Box::leak(Box::new(chat(&json!({
            "model": "m",
            "messages": [{"role": "user", "content": "hi"}],
            "tools": tools,
        }))));
        function_tools(c).collect()
    }

    #[test]
    fn a_function_tool_is_read_with_its_name_description_and_parameters() {
        let got = read(json!([
            {"type": "function", "function": {"name": "a", "description": "d", "parameters": {"type": "object"}}},
            {"function": {"name": "b", "parameters": null}, "cache_control": {"type": "ephemeral"}},
        ]));
        let (i, a) = got[0].as_ref().unwrap();
        assert_eq!((*i, a.name, a.description), (0, "a", Some("d")));
        assert_eq!(a.parameters, Some(&json!({"type": "object"})));
        let (i, b) = got[1].as_ref().unwrap();
        assert_eq!((*i, b.name, b.description), (1, "b", None));
        assert_eq!(
            b.parameters,
            Some(&Value::Null),
            "null is kept for the adapter"
        );
        assert!(b.tool.get("cache_control").is_some());
        assert_eq!(b.function["name"], "b");
    }

    fn body(extra: Value) -> crate::api::ChatRequest {
        let mut v = json!({"model": "m", "messages": [{"role": "user", "content": "hi"}]});
        v.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        chat(&v)
    }

    #[test]
    fn output_other_than_text_is_named_by_its_field() {
        assert_eq!(non_text_output(&body(json!({}))), None);
        assert_eq!(non_text_output(&body(json!({"audio": null}))), None);
        assert_eq!(
            non_text_output(&body(json!({"modalities": ["text"]}))),
            None
        );
        assert_eq!(
            non_text_output(&body(json!({"modalities": ["text", "audio"]}))),
            Some("modalities")
        );
        assert_eq!(
            non_text_output(&body(
                json!({"audio": {"voice": "x"}, "modalities": ["audio"]})
            )),
            Some("audio")
        );
    }

    #[test]
    fn untranslated_fields_are_refused_in_the_providers_words() {
        assert!(refuse_untranslated(&body(json!({})), "P", "P answers in text only").is_ok());
        let e = refuse_untranslated(&body(json!({"modalities": ["audio"]})), "P", "P: text only")
            .unwrap_err();
        assert_eq!(
            (e.param.as_deref(), e.message.as_str()),
            (Some("modalities"), "P: text only")
        );
        let e = refuse_untranslated(&body(json!({"functions": []})), "P", "x").unwrap_err();
        assert_eq!(e.param.as_deref(), Some("functions"));
        assert_eq!(e.message, "`functions` is not supported for P; use `tools`");
    }

    #[test]
    fn the_first_untranslated_tool_field_is_named() {
        assert_eq!(
            untranslated_tool_field(&body(json!({"functions": null}))),
            None
        );
        assert_eq!(
            untranslated_tool_field(&body(json!({"function_call": "auto", "functions": []}))),
            Some("functions")
        );
        assert_eq!(
            untranslated_tool_field(&body(json!({"web_search_options": {}}))),
            Some("web_search_options")
        );
    }

    #[test]
    fn a_tool_that_is_not_a_function_or_has_no_name_is_refused_naming_the_field() {
        let got = read(json!([
            {"type": "function", "function": {"name": "ok"}},
            {"type": "web_search"},
            {"type": "function", "function": {"description": "nameless"}},
        ]));
        assert!(got[0].is_ok());
        let e = got[1].as_ref().unwrap_err();
        assert_eq!(e.param.as_deref(), Some("tools[1].type"));
        assert_eq!(e.code, Some(Code::UnsupportedValue));
        assert!(e.message.contains("only function tools"), "{}", e.message);
        let e = got[2].as_ref().unwrap_err();
        assert_eq!(e.param.as_deref(), Some("tools[2].function.name"));
        assert_eq!(e.code, Some(Code::MissingRequiredParameter));
        assert!(e.message.contains("is required"), "{}", e.message);
    }
}

#[cfg(test)]
mod allowed_tools_tests {
    use crate::providers::testing::{build, chat};
    use crate::providers::{anthropic::Anthropic, bedrock, gemini::Gemini, Target};
    use serde_json::{json, Value};

    /// OpenAI API reference, `tool_choice` allowed tools: "Constrains the tools
    /// available to the model to a pre-defined set", `mode` "auto" or "required".
    /// Validation takes it; the translating adapters refused it as a function choice
    /// without a name ("`tool_choice.function.name` is required").
    #[test]
    fn allowed_tools_narrow_the_tools_sent_and_keep_the_mode() {
        let req = |mode: &str| {
            chat(
                &json!({"model": "m", "messages": [{"role": "user", "content": "hi"}],
                "tools": [
                    {"type": "function", "function": {"name": "a"}},
                    {"type": "function", "function": {"name": "b"}},
                    {"type": "function", "function": {"name": "c"}}
                ],
                "tool_choice": {"type": "allowed_tools", "allowed_tools": {"mode": mode,
                    "tools": [{"type": "function", "function": {"name": "a"}},
                              {"type": "function", "function": {"name": "c"}}]}}}),
            )
        };
        for mode in ["auto", "required"] {
            assert!(crate::api::validate::check(&req(mode)).is_ok());
        }
        let t = Target {
            base_url: "https://x",
            model: "m",
            api_key: Some("k"),
        };
        let names = |v: &Value, at: &str, key: &str| -> Vec<String> {
            v.pointer(at)
                .and_then(Value::as_array)
                .unwrap()
                .iter()
                .map(|x| x.pointer(key).and_then(Value::as_str).unwrap().to_string())
                .collect()
        };
        let b = build(&Anthropic, &t, &req("auto")).1;
        assert_eq!(names(&b, "/tools", "/name"), ["a", "c"]);
        assert_eq!(b["tool_choice"], json!({"type": "auto"}));
        let b = build(&Anthropic, &t, &req("required")).1;
        assert_eq!(b["tool_choice"], json!({"type": "any"}));

        let b = build(&Gemini, &t, &req("required")).1;
        assert_eq!(
            names(&b, "/tools/0/functionDeclarations", "/name"),
            ["a", "c"]
        );
        assert_eq!(b["toolConfig"]["functionCallingConfig"]["mode"], "ANY");

        let keys = bedrock::AwsKeys {
            access_key_id: "AKID".into(),
            secret_access_key: "s".into(),
            session_token: None,
        };
        let br = bedrock::Bedrock::with_keys("us-east-1", keys);
        let b = build(&br, &t, &req("auto")).1;
        assert_eq!(names(&b, "/toolConfig/tools", "/toolSpec/name"), ["a", "c"]);
        assert_eq!(b["toolConfig"]["toolChoice"], json!({"auto": {}}));
    }
}

/// Matches what Anthropic and Bedrock take as a tool use id (`[a-zA-Z0-9_-]`, 1 to
/// 64 characters).
#[cfg(test)]
pub(crate) fn is_tool_use_id(id: &str) -> bool {
    (1..=MAX_TOOL_USE_ID).contains(&id.len())
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

#[cfg(test)]
mod tool_use_id_tests {
    use super::*;

    #[test]
    fn tool_call_ids_outside_the_anthropic_and_bedrock_pattern_are_rewritten_consistently() {
        for fits in [
            "call_abc123",
            "toolu_01A09q90qw90lq917835lq9",
            "a-b_C",
            &"x".repeat(64),
        ] {
            assert!(matches!(tool_use_id(fits), std::borrow::Cow::Borrowed(s) if s == fits));
        }
        let signed = format!("call_1__thought__{}", "Q2l+/=".repeat(40));
        for id in [
            "functions.get_weather:0",
            "call 1",
            "call.1",
            "ид",
            "",
            &"y".repeat(65),
            &signed,
        ] {
            let out = tool_use_id(id);
            assert!(is_tool_use_id(&out), "{id:?} -> {out:?}");
            // The same id always becomes the same one (a call and its result match).
            assert_eq!(out, tool_use_id(id));
        }
        assert!(tool_use_id("functions.get_weather:0").starts_with("functions_get_weather_0_"));
        // Ids differing only in rewritten characters stay distinct.
        assert_ne!(tool_use_id("call.1"), tool_use_id("call:1"));
        assert_ne!(tool_use_id("call.1"), tool_use_id("call_1"));
    }
}

#[cfg(test)]
mod image_tests {
    use super::*;
    use serde_json::json;

    const TAKEN: [&str; 3] = ["image/jpeg", "image/png", "image/webp"];

    #[test]
    fn a_media_type_is_normalised_and_checked_against_the_providers_list() {
        assert_eq!(accepted_media_type("image/png", &TAKEN), Some("image/png"));
        assert_eq!(
            accepted_media_type(" IMAGE/WebP ", &TAKEN),
            Some("image/webp")
        );
        assert_eq!(accepted_media_type("image/jpg", &TAKEN), Some("image/jpeg"));
        assert_eq!(
            accepted_media_type("Image/PJPEG", &TAKEN),
            Some("image/jpeg")
        );
        assert_eq!(
            accepted_media_type("image/x-png", &TAKEN),
            Some("image/png")
        );
        assert_eq!(accepted_media_type("image/gif", &TAKEN), None);
        assert_eq!(accepted_media_type("image/jpg", &["image/png"]), None);
        assert_eq!(accepted_media_type("", &TAKEN), None);
    }

    #[test]
    fn a_data_url_splits_into_media_type_and_base64_payload() {
        assert_eq!(
            image_ref("data:image/jpg;base64,AAAA"),
            Ok(ImageRef::Inline {
                mime: "image/jpg",
                data: "AAAA"
            })
        );
        assert_eq!(
            image_ref("data:image/png;name=x.png;base64,QQ=="),
            Ok(ImageRef::Inline {
                mime: "image/png",
                data: "QQ=="
            })
        );
        assert!(image_ref("data:image/png,raw").is_err());
        assert!(image_ref("ftp://x/y.png").is_err());
    }

    /// Found by the translation attack of 2026-12-08: `data:image/png;BASE64,...`
    /// (and `; base64`) was refused as "must be a base64 data URL", where the WHATWG
    /// Fetch standard's data: URL processor takes the marker in any case after any
    /// spaces, and the scheme in any case.
    #[test]
    fn an_upper_case_base64_marker_was_refused() {
        let png = |mime| ImageRef::Inline { mime, data: "QQ==" };
        for url in [
            "data:image/png;BASE64,QQ==",
            "data:image/png; base64,QQ==",
            "data:image/png;  Base64 ,QQ==",
            "DATA:image/png;base64,QQ==",
        ] {
            assert_eq!(image_ref(url), Ok(png("image/png")), "{url}");
        }
        for url in [
            "data:image/pngbase64,QQ==",
            "data:image/png;base6,QQ==",
            "data:base64,QQ==",
            "data:;base64é,QQ==",
            "data:éé,QQ==",
            "data:aéé,QQ==",
        ] {
            assert!(image_ref(url).is_err(), "{url}");
        }
        // The media type is checked per provider afterwards (accepted_media_type).
        assert_eq!(image_ref("data:;base64,QQ=="), Ok(png("")));
        assert_eq!(image_ref("data:é;base64,QQ=="), Ok(png("é")));
    }

    #[test]
    fn the_nth_image_part_is_found_among_the_clients_parts() {
        let content = json!([
            {"type": "text", "text": "a"},
            {"type": "image_url", "image_url": {"url": "https://x/1.png"}},
            {"type": "text", "text": ""},
            {"type": "image_url", "image_url": {"url": "https://x/2.png"}},
        ]);
        assert_eq!(image_part_index(&content, 0), 1);
        assert_eq!(image_part_index(&content, 1), 3);
        assert_eq!(image_part_index(&json!("text"), 2), 2);
    }
}

#[cfg(test)]
mod stream_end_tests {
    use super::*;

    fn writer() -> ChunkWriter {
        let mut w = ChunkWriter::new(&StreamContext {
            logical_model: "m".into(),
            include_usage: true,
            prompt_tokens_estimate: 0,
            track: false,
            resume: None,
        });
        w.set_id("c1".into());
        w
    }

    fn events(out: &BytesMut) -> Vec<String> {
        String::from_utf8_lossy(out)
            .split("\n\n")
            .filter_map(|e| e.strip_prefix("data: ").map(str::to_string))
            .collect()
    }

    #[test]
    fn closing_without_a_finish_reason_sends_stop_then_usage_then_done() {
        let mut w = writer();
        let mut out = BytesMut::new();
        let mut finish = None;
        w.close(&mut out, &mut finish, Some(Usage::new(3, 4)));
        assert_eq!(finish, Some("stop"));
        let e = events(&out);
        assert_eq!(e.len(), 3, "{e:?}");
        let stop: Value = serde_json::from_str(&e[0]).unwrap();
        assert_eq!(stop["choices"][0]["finish_reason"], "stop");
        let usage: Value = serde_json::from_str(&e[1]).unwrap();
        assert_eq!(usage["usage"]["completion_tokens"], 4);
        assert_eq!(e[2], "[DONE]");
        assert!(w.progress.sent.finished);
    }

    #[test]
    fn closing_after_a_finish_reason_adds_no_second_one_and_no_usage_unasked() {
        let mut w = writer();
        let mut out = BytesMut::new();
        let mut finish = Some("length");
        w.close(&mut out, &mut finish, None);
        assert_eq!(finish, Some("length"));
        assert_eq!(events(&out), ["[DONE]"]);
    }

    #[test]
    fn a_held_block_is_bounded() {
        let mut held = "x".repeat(MAX_HELD_BLOCK_BYTES - 1);
        hold(&mut held, "y", "block").unwrap();
        let e = hold(&mut held, "z", "thinking block").unwrap_err();
        assert_eq!(e.code, Some(Code::UpstreamBadResponse));
        assert!(
            e.message.contains("thinking block larger than"),
            "{}",
            e.message
        );
        assert_eq!(
            held.len(),
            MAX_HELD_BLOCK_BYTES,
            "nothing appended past the bound"
        );
    }

    #[test]
    fn the_end_of_the_body_closes_a_finished_answer_and_cuts_an_unfinished_one() {
        let mut closed = false;
        assert!(end_of_body(Some("stop"), || closed = true).is_ok());
        assert!(closed);
        let mut closed = false;
        let e = end_of_body(None, || closed = true).unwrap_err();
        assert!(!closed);
        assert_eq!(e.code, Some(Code::UpstreamStreamCut));
    }
}

#[cfg(test)]
mod completion_tests {
    use proptest::prelude::*;
    use serde_json::{json, Value};

    use super::*;

    /// The `chat.completion` object as `completion` wrote it before it serialized
    /// directly: built as a `serde_json::Value` tree. The reference the direct
    /// writer must equal, member for member (key order aside: the tree sorted them).
    fn completion_as_tree(id: &str, model: &str, choices: &[Choice], usage: Usage) -> Value {
        let choices: Vec<Value> = choices
            .iter()
            .enumerate()
            .map(|(i, c)| {
                let mut msg = json!({
                    "role": "assistant",
                    "content": c.content,
                    "refusal": c.refusal,
                });
                if let Some(r) = &c.reasoning_content {
                    msg["reasoning_content"] = Value::String(r.clone());
                }
                if !c.tool_calls.is_empty() {
                    msg["tool_calls"] = c
                        .tool_calls
                        .iter()
                        .enumerate()
                        .map(|(k, (id, name, args))| {
                            let mut call = json!({
                                "id": id,
                                "type": "function",
                                "function": {"name": name, "arguments": args},
                            });
                            if let Some(Some(sig)) = c.thought_signatures.get(k) {
                                call["extra_content"] =
                                    json!({"google": {"thought_signature": sig}});
                            }
                            call
                        })
                        .collect();
                }
                if !c.thinking_blocks.is_empty() {
                    msg["thinking_blocks"] = serde_json::to_value(&c.thinking_blocks).unwrap();
                }
                json!({
                    "index": i,
                    "message": msg,
                    "logprobs": null,
                    "finish_reason": c.finish_reason,
                })
            })
            .collect();
        json!({
            "id": id,
            "object": "chat.completion",
            "model": model,
            "choices": choices,
            "usage": usage,
        })
    }

    /// `body` parsed, with its `created` checked to be a number and taken out (the
    /// reference has none: it is the clock's).
    fn parsed_without_created(body: &[u8]) -> Value {
        let mut v: Value = serde_json::from_slice(body).unwrap();
        let created = v.as_object_mut().unwrap().remove("created");
        assert!(created.as_ref().is_some_and(Value::is_u64), "{created:?}");
        v
    }

    #[test]
    fn a_text_answer_is_written_in_openais_member_order() {
        let choice = Choice {
            content: Some("Hello \"there\"\n\u{e9}".into()),
            finish_reason: "stop",
            ..Choice::default()
        };
        let body = completion("msg_1", "claude", &[choice], Usage::new(12, 29));
        let text = std::str::from_utf8(&body).unwrap();
        let created = now_secs();
        let rest = text
            .split_once(",\"created\":")
            .and_then(|(_, r)| r.split_once(','))
            .map(|(n, r)| (n.parse::<u64>().unwrap(), r))
            .unwrap();
        assert!(rest.0.abs_diff(created) <= 5, "{text}");
        assert!(text.starts_with("{\"id\":\"msg_1\",\"object\":\"chat.completion\","));
        assert_eq!(
            rest.1,
            "\"model\":\"claude\",\"choices\":[{\"index\":0,\"message\":{\"role\":\"assistant\",\
             \"content\":\"Hello \\\"there\\\"\\n\u{e9}\",\"refusal\":null},\"logprobs\":null,\
             \"finish_reason\":\"stop\"}],\"usage\":{\"prompt_tokens\":12,\
             \"completion_tokens\":29,\"total_tokens\":41}}"
        );
    }

    #[test]
    fn an_answer_with_every_member_matches_the_tree() {
        let choices = [
            Choice {
                content: None,
                refusal: Some("no".into()),
                tool_calls: vec![
                    ("call_1".into(), "get".into(), "{\"a\":1}".into()),
                    ("call_2".into(), "put".into(), "{}".into()),
                    ("call_3".into(), "del".into(), "{}".into()),
                ],
                thought_signatures: vec![Some("c2ln".into()), None],
                reasoning_content: Some("because".into()),
                thinking_blocks: vec![
                    ThinkingBlock::Thinking {
                        thinking: "because".into(),
                        signature: "sig".into(),
                    },
                    ThinkingBlock::RedactedThinking { data: "x".into() },
                ],
                finish_reason: "tool_calls",
            },
            Choice {
                content: Some(String::new()),
                finish_reason: "length",
                ..Choice::default()
            },
        ];
        let usage = Usage::new(3, 4).with_cached(Some(2));
        let body = completion("id", "m", &choices, usage);
        assert_eq!(
            parsed_without_created(&body),
            completion_as_tree("id", "m", &choices, usage)
        );
        let v: Value = serde_json::from_slice(&body).unwrap();
        let calls = &v["choices"][0]["message"]["tool_calls"];
        assert_eq!(
            calls[0]["extra_content"]["google"]["thought_signature"],
            "c2ln"
        );
        assert!(calls[1].get("extra_content").is_none());
        assert!(calls[2].get("extra_content").is_none());
        assert!(v["choices"][1]["message"].get("tool_calls").is_none());
    }

    fn text() -> impl Strategy<Value = String> {
        prop_oneof![
            "[a-z ]{0,12}",
            any::<String>(),
            "[\"\\\\\u{0}-\u{1f}\u{7f}\u{e9}\u{2028}\u{1f600}a]{0,8}",
        ]
    }

    fn choice() -> impl Strategy<Value = Choice> {
        let call = (text(), text(), text());
        let block = prop_oneof![
            (text(), text()).prop_map(|(t, s)| ThinkingBlock::Thinking {
                thinking: t.into(),
                signature: s.into(),
            }),
            text().prop_map(|d| ThinkingBlock::RedactedThinking { data: d.into() }),
        ];
        (
            proptest::option::of(text()),
            proptest::option::of(text()),
            proptest::collection::vec(call, 0..4),
            proptest::collection::vec(proptest::option::of(text()), 0..5),
            proptest::option::of(text()),
            proptest::collection::vec(block, 0..3),
            prop_oneof![Just("stop"), Just("length"), Just("tool_calls")],
        )
            .prop_map(
                |(content, refusal, tool_calls, sigs, reasoning, blocks, finish)| Choice {
                    content,
                    refusal,
                    tool_calls,
                    thought_signatures: sigs,
                    reasoning_content: reasoning,
                    thinking_blocks: blocks,
                    finish_reason: finish,
                },
            )
    }

    proptest! {
        /// Any answer is written as the tree-building writer wrote it, member for
        /// member, and as valid JSON.
        #[test]
        fn any_answer_is_written_as_the_tree_wrote_it(
            id in text(),
            model in text(),
            choices in proptest::collection::vec(choice(), 0..3),
            counts in (any::<u32>(), any::<u32>(), proptest::option::of(any::<u32>())),
        ) {
            let usage = Usage::new(counts.0.into(), counts.1.into())
                .with_cached(counts.2.map(u64::from));
            let body = completion(&id, &model, &choices, usage);
            prop_assert_eq!(
                parsed_without_created(&body),
                completion_as_tree(&id, &model, &choices, usage)
            );
        }
    }
}

#[cfg(test)]
mod chunk_writer_tests {
    use proptest::prelude::*;

    use super::*;
    use crate::providers::Resume;

    /// A chunk as `serde_json` writes it from the chunk's types: the reference the
    /// hand-written chunks must equal byte for byte.
    #[derive(Serialize)]
    struct Chunk<'a> {
        id: &'a str,
        object: &'static str,
        created: u64,
        model: &'a str,
        choices: &'a [ChunkChoice<'a>],
        #[serde(skip_serializing_if = "Option::is_none")]
        usage: Option<Option<Usage>>,
    }

    fn writer(id: &str, created: u64, model: &str, include_usage: bool) -> ChunkWriter {
        let mut w = ChunkWriter::new(&StreamContext {
            logical_model: model.into(),
            include_usage,
            prompt_tokens_estimate: 0,
            track: false,
            resume: None,
        });
        w.progress.sent.created = created;
        w.set_id(id.into());
        w
    }

    fn event(chunk: &Chunk<'_>) -> Vec<u8> {
        let mut out = b"data: ".to_vec();
        serde_json::to_writer(&mut out, chunk).unwrap();
        out.extend_from_slice(b"\n\n");
        out
    }

    fn text() -> impl Strategy<Value = String> {
        prop_oneof![
            "[a-z ]{0,12}",
            any::<String>(),
            "[\"\\\\\u{0}-\u{1f}\u{7f}\u{e9}\u{2028}a]{0,8}",
        ]
    }

    /// The parts of one delta: role, content, reasoning, a tool-call piece (id,
    /// name, arguments, signature) and a reasoning block.
    type Parts = (
        bool,
        Option<String>,
        Option<String>,
        Option<(Option<String>, Option<String>, String, Option<String>)>,
        Option<(String, String)>,
    );

    fn parts() -> impl Strategy<Value = Parts> {
        (
            any::<bool>(),
            proptest::option::of(text()),
            proptest::option::of(text()),
            proptest::option::weighted(
                0.3,
                (
                    proptest::option::of(text()),
                    proptest::option::of(text()),
                    text(),
                    proptest::option::of(text()),
                ),
            ),
            proptest::option::weighted(0.2, (text(), text())),
        )
    }

    /// A stream continuing another keeps that one's id and creation time in every
    /// chunk, whatever id its provider gives, and sends no second `role`.
    #[test]
    fn a_continued_stream_writes_the_first_ones_id_and_created() {
        let mut w = ChunkWriter::new(&StreamContext {
            logical_model: "m".into(),
            include_usage: false,
            prompt_tokens_estimate: 0,
            track: true,
            resume: Some(Resume {
                sent: Sent {
                    id: "chatcmpl-first".into(),
                    created: 42,
                    ..Sent::default()
                },
                skip: String::new(),
                exact: false,
            }),
        });
        w.set_id("msg_second".into());
        let mut out = BytesMut::new();
        w.start(&mut out);
        w.text(&mut out, "more").unwrap();
        w.usage(&mut out, Usage::new(1, 2));
        assert_eq!(
            std::str::from_utf8(&out).unwrap(),
            "data: {\"id\":\"chatcmpl-first\",\"object\":\"chat.completion.chunk\",\"created\":42,\
             \"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"more\"},\
             \"logprobs\":null,\"finish_reason\":null}]}\n\n\
             data: {\"id\":\"chatcmpl-first\",\"object\":\"chat.completion.chunk\",\"created\":42,\
             \"model\":\"m\",\"choices\":[],\"usage\":{\"prompt_tokens\":1,\
             \"completion_tokens\":2,\"total_tokens\":3}}\n\n"
        );
    }

    proptest! {
        /// Every chunk, of any delta, finish reason, id and model, with and
        /// without `include_usage`, is written as `serde_json` writes the chunk's
        /// types; so is the usage chunk; and the shared start follows a new id.
        #[test]
        fn chunks_are_written_as_serde_writes_them(
            ids in (text(), text()),
            created in any::<u64>(),
            model in text(),
            include_usage in any::<bool>(),
            deltas in proptest::collection::vec(
                (parts(), proptest::option::of(text())),
                1..4,
            ),
            counts in (any::<u32>(), any::<u32>()),
        ) {
            let mut w = writer(&ids.0, created, &model, include_usage);
            for (n, ((role, content, reasoning, tool, block), finish)) in
                deltas.iter().enumerate()
            {
                if n == 2 {
                    w.set_id(ids.1.clone());
                }
                let id = if n >= 2 { &ids.1 } else { &ids.0 };
                let block = block.as_ref().map(|(t, s)| ThinkingBlock::Thinking {
                    thinking: t.as_str().into(),
                    signature: s.as_str().into(),
                });
                let delta = || Delta {
                    role: role.then_some("assistant"),
                    content: content.as_deref(),
                    reasoning_content: reasoning.as_deref(),
                    refusal: None,
                    tool_calls: tool.as_ref().map(|(id, name, args, sig)| {
                        [ToolOut {
                            piece: ToolDelta {
                                index: 1,
                                id: id.as_deref(),
                                kind: id.as_ref().map(|_| "function"),
                                function: FunctionDelta {
                                    name: name.as_deref(),
                                    arguments: args,
                                },
                            },
                            extra_content: sig.as_deref().map(|s| ExtraContent {
                                google: GoogleExtra {
                                    thought_signature: s,
                                },
                            }),
                        }]
                    }),
                    thinking_blocks: block.as_ref().map(|b| [b]),
                };
                let mut out = BytesMut::new();
                w.put_chunk(&mut out, delta(), finish.as_deref());
                let choices = [ChunkChoice {
                    index: 0,
                    delta: delta(),
                    logprobs: (),
                    finish_reason: finish.as_deref(),
                }];
                let expected = event(&Chunk {
                    id,
                    object: "chat.completion.chunk",
                    created,
                    model: &model,
                    choices: &choices,
                    usage: include_usage.then_some(None),
                });
                prop_assert_eq!(
                    String::from_utf8_lossy(&out),
                    String::from_utf8_lossy(&expected)
                );
            }
            let usage = Usage::new(counts.0.into(), counts.1.into()).with_cached(Some(3));
            let mut out = BytesMut::new();
            w.usage(&mut out, usage);
            let id = if deltas.len() > 2 { &ids.1 } else { &ids.0 };
            let expected = event(&Chunk {
                id,
                object: "chat.completion.chunk",
                created,
                model: &model,
                choices: &[],
                usage: Some(Some(usage)),
            });
            prop_assert_eq!(
                String::from_utf8_lossy(&out),
                String::from_utf8_lossy(&expected)
            );
        }
    }
}
