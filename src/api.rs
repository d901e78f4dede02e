//! OpenAI Chat Completions wire types, as Switchyard's canonical request and response.
//!
//! Every provider adapter translates from [`ChatRequest`] and back to OpenAI's response
//! and chunk shapes (OpenAI API reference, "Create chat completion" and "The chat
//! completion chunk object"). Fields Switchyard does not interpret are kept in `extra`
//! and forwarded untouched, so a new OpenAI parameter works through the gateway on the
//! day it ships.

pub mod counts;
mod de;
pub mod messages;
pub mod validate;

pub use messages::Messages;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::error::{Code, GatewayError};

/// A `POST /v1/chat/completions` body. Read by a hand-written `Deserialize`
/// (`api::de`: the derive's results and errors, but for one error named there,
/// without buffering `extra`).
#[derive(Debug, Clone, Serialize)]
pub struct ChatRequest {
    /// The logical model the client asked for (rewritten per endpoint upstream).
    pub model: String,
    /// The conversation; validated to be non-empty. Reads as a `Vec<Message>`; the
    /// gateway sets a large body's decoded copy aside while it waits on the upstream
    /// ([`Messages::set_aside`]).
    pub messages: Messages,
    /// Server-sent events instead of one JSON body.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stream: Option<bool>,
    /// `{"include_usage": bool}`: a final chunk with `usage` and `choices: []`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stream_options: Option<StreamOptions>,
    /// Output cap in tokens (legacy name, still what most servers read).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u64>,
    /// Output cap in tokens (current name).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_completion_tokens: Option<u64>,
    /// Sampling temperature, 0 to 2.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f64>,
    /// Tool (function) definitions, kept as JSON.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tools: Option<Vec<Value>>,
    /// Every other field, forwarded as is.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
    /// The body exactly as the client sent it (set by [`ChatRequest::parse_bytes`]).
    /// Adapters of OpenAI-format providers forward it with only `model` replaced,
    /// which skips re-serialization. A layer that changes any other field must clear
    /// it (`raw = Bytes::new()`) so adapters serialize the typed fields instead.
    #[serde(skip)]
    pub raw: bytes::Bytes,
    /// The client's request headers that may reach a provider (credentials,
    /// hop-by-hop and framing headers already left out); which of them go to which
    /// provider is [`crate::egress::forward`]'s rule.
    #[serde(skip)]
    pub headers: http::HeaderMap,
    /// The request's id ([`crate::request_id`]), sent to providers as
    /// [`crate::egress::forward::request_id`] says; `None` outside the gateway's
    /// request path (a dry-run, a test's request).
    #[serde(skip)]
    pub request_id: Option<http::HeaderValue>,
}

/// `stream_options` (read by `api::de`).
#[derive(Debug, Clone, Serialize, Default)]
pub struct StreamOptions {
    /// Ask for the final usage chunk.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub include_usage: Option<bool>,
    /// Other stream options, forwarded as is.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// One chat message (read by `api::de`).
#[derive(Debug, Clone, Serialize)]
pub struct Message {
    /// `system`, `developer`, `user`, `assistant`, `tool` or `function`.
    pub role: String,
    /// A string, an array of content parts, or null (assistant with tool calls;
    /// also what an absent `content` reads as).
    pub content: Value,
    /// Other message fields (`name`, `tool_calls`, `tool_call_id`, ...).
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl Message {
    /// Bytes of the message's tool calls (`tool_calls`, the legacy `function_call`:
    /// names and JSON arguments, which the model reads back as input), as
    /// [`strings_len`] counts them.
    pub fn calls_len(&self) -> usize {
        ["tool_calls", "function_call"]
            .iter()
            .filter_map(|k| self.extra.get(*k))
            .map(strings_len)
            .sum()
    }

    /// Whether the message carries an Anthropic prompt-caching `cache_control`
    /// marker: on itself, on its `function`, or on a content part.
    pub fn has_cache_control(&self) -> bool {
        self.extra.contains_key("cache_control")
            || self
                .extra
                .get("function")
                .is_some_and(|f| f.get("cache_control").is_some())
            || self
                .content
                .as_array()
                .is_some_and(|parts| parts.iter().any(|p| p.get("cache_control").is_some()))
    }
}

/// Roles OpenAI accepts.
pub const ROLES: [&str; 6] = [
    "system",
    "developer",
    "user",
    "assistant",
    "tool",
    "function",
];

/// `body` read as JSON into a `T`: as text when it is UTF-8 (checked whole by
/// `simdutf8`, one vector pass), so `serde_json` does not check each string it reads
/// again (from bytes, every key and string value is a `str::from_utf8` call: about
/// 580 of the 4,550 instructions of the load benchmark's one-message request body,
/// and 9% of a 3.5 KB body of 20 messages, callgrind of the parse alone), else as
/// bytes, for the error `serde_json` names. Either way the same value or the same
/// error: a body `serde_json` accepts as bytes is UTF-8 throughout (its strings are
/// checked, everything else is ASCII), and text is read by the same parser
/// (`tests::a_body_read_as_text_reads_as_its_bytes` and
/// `tests::any_json_read_as_text_reads_as_its_bytes`).
///
/// Used for the client's request body ([`ChatRequest::parse`]) and the answers of the
/// providers whose wire format is translated (Anthropic, Gemini, Bedrock).
///
/// # Errors
/// `serde_json`'s, as from `serde_json::from_slice`.
pub(crate) fn read_json<'a, T: Deserialize<'a>>(body: &'a [u8]) -> serde_json::Result<T> {
    match simdutf8::basic::from_utf8(body) {
        Ok(text) => serde_json::from_str(text),
        Err(_) => serde_json::from_slice(body),
    }
}

/// `body` with every lone surrogate escape in its strings (`\uD800` to `\uDFFF`
/// not part of a leading-trailing pair) replaced by `\ufffd`, the replacement
/// character; `None` when it has none. The replacement has the escape's length, so
/// nothing else moves.
///
/// Why: RFC 8259 (section 8.2) allows such escapes in JSON text but leaves what
/// they mean to the reader; `serde_json` refuses them in a string. Clients make
/// them: Python's `json.dumps` (the OpenAI and Anthropic SDKs) and JavaScript's
/// `JSON.stringify` write a string cut between the two halves of an emoji as
/// `"...\ud83d"`. Replacing each with U+FFFD is what a UTF-8 encoder does with a
/// lone surrogate (WHATWG Encoding, "UTF-8 encode"; Python's `errors="replace"`).
pub(crate) fn mend_lone_surrogates(body: &[u8]) -> Option<Vec<u8>> {
    /// The code unit of the escape `\uXXXX` at `at`, if there is one.
    fn unit(b: &[u8], at: usize) -> Option<u16> {
        let e = b.get(at..at + 6)?;
        if e[0] != b'\\' || e[1] != b'u' || !e[2..].iter().all(u8::is_ascii_hexdigit) {
            return None;
        }
        let hex = std::str::from_utf8(&e[2..]).ok()?;
        u16::from_str_radix(hex, 16).ok()
    }
    let leading = |u: u16| (0xD800..0xDC00).contains(&u);
    let trailing = |u: u16| (0xDC00..0xE000).contains(&u);
    let mut out: Option<Vec<u8>> = None;
    let (mut i, mut in_string) = (0, false);
    while i < body.len() {
        match body[i] {
            b'"' => {
                in_string = !in_string;
                i += 1;
            }
            b'\\' if in_string => match unit(body, i) {
                Some(u) if leading(u) && unit(body, i + 6).is_some_and(trailing) => i += 12,
                Some(u) if leading(u) || trailing(u) => {
                    let o = out.get_or_insert_with(|| body.to_vec());
                    o[i..i + 6].copy_from_slice(b"\\ufffd");
                    i += 6;
                }
                Some(_) => i += 6,
                // Any other escape: the backslash and the character it escapes.
                None => i += 2,
            },
            _ => i += 1,
        }
    }
    out
}

impl ChatRequest {
    /// Parses and validates a request body, keeping the original bytes in `raw`.
    ///
    /// # Errors
    /// As [`ChatRequest::parse`].
    ///
    /// A body refused only for a lone surrogate escape (`"\ud83d"`, a string cut
    /// inside an emoji by a client that counts UTF-16 units) is read with each lone
    /// surrogate replaced by U+FFFD ([`mend_lone_surrogates`]), and that body is
    /// the one kept and forwarded.
    pub fn parse_bytes(body: bytes::Bytes) -> Result<ChatRequest, GatewayError> {
        let (mut req, body) = match ChatRequest::parse(&body) {
            Ok(req) => (req, body),
            Err(e) => match mend_lone_surrogates(&body) {
                Some(mended) => {
                    let mended = bytes::Bytes::from(mended);
                    (ChatRequest::parse(&mended)?, mended)
                }
                None => return Err(e),
            },
        };
        req.raw = body;
        Ok(req)
    }

    /// Parses and validates a request body.
    ///
    /// # Errors
    /// HTTP 400 naming the field at fault: malformed JSON, a wrong type
    /// (`messages[0].role`), a missing field, an empty `messages`, an unknown role, a
    /// `temperature` outside 0..=2, or a zero `max_tokens`.
    pub fn parse(body: &[u8]) -> Result<ChatRequest, GatewayError> {
        // The usual, valid body is parsed without tracking the path: the tracking
        // deserializer copies every object key into a new string (about 30% of the
        // parse, `benches/load/callgrind.sh`). A body that fails is parsed again with
        // it, and that parse's error, path and message are the ones returned.
        let req = match read_json::<ChatRequest>(body) {
            Ok(req) => req,
            Err(_) => Self::parse_tracked(body)?,
        };
        req.validate()?;
        Ok(req)
    }

    /// [`ChatRequest::parse`] without validation, tracking the path for the error.
    fn parse_tracked(body: &[u8]) -> Result<ChatRequest, GatewayError> {
        let mut de = serde_json::Deserializer::from_slice(body);
        let req: ChatRequest = match serde_path_to_error::deserialize(&mut de) {
            Ok(r) => r,
            Err(e) => {
                let path = e.path().to_string();
                let inner = e.into_inner();
                let at_root = path.is_empty() || path == "." || path == "?";
                let message = if inner.is_syntax() || inner.is_eof() {
                    format!("request body is not valid JSON: {inner}")
                } else if at_root {
                    format!("invalid request body: {inner}")
                } else {
                    format!("invalid field `{path}`: {inner}")
                };
                // serde names a missing field only in its message: "missing field `x`".
                let text = inner.to_string();
                let missing = text
                    .strip_prefix("missing field `")
                    .and_then(|r| r.split('`').next());
                let param = if inner.is_syntax() || inner.is_eof() {
                    None
                } else if at_root {
                    missing.map(str::to_string)
                } else {
                    // The missing field itself, not the object it is missing from
                    // (`messages[0].role`, not `messages[0]`).
                    Some(match missing {
                        Some(field) => format!("{path}.{field}"),
                        None => path,
                    })
                };
                let mut err = GatewayError::new(crate::error::ErrorKind::InvalidRequest, message);
                err.param = param;
                // OpenAI's codes for the same classes; a body that is not a JSON
                // object gets none, as OpenAI's "We could not parse the JSON body".
                err.code = if inner.is_syntax() || inner.is_eof() || (at_root && missing.is_none())
                {
                    None
                } else if missing.is_some() {
                    Some(Code::MissingRequiredParameter)
                } else if text.starts_with("invalid type") {
                    Some(Code::InvalidType)
                } else {
                    Some(Code::InvalidValue)
                };
                return Err(err);
            }
        };
        if de.end().is_err() {
            return Err(GatewayError::new(
                crate::error::ErrorKind::InvalidRequest,
                "request body has trailing characters after the JSON object",
            ));
        }
        Ok(req)
    }

    fn validate(&self) -> Result<(), GatewayError> {
        if self.model.is_empty() {
            return Err(GatewayError::invalid_param(
                Code::InvalidValue,
                "model",
                "`model` must be a non-empty string",
            ));
        }
        if self.messages.is_empty() {
            return Err(GatewayError::invalid_param(
                Code::EmptyArray,
                "messages",
                "`messages` must contain at least one message",
            ));
        }
        for (i, m) in self.messages.iter().enumerate() {
            if !ROLES.contains(&m.role.as_str()) {
                return Err(GatewayError::invalid_param(
                    Code::InvalidValue,
                    format!("messages[{i}].role"),
                    format!(
                        "`messages[{i}].role` is \"{}\"; expected one of {}",
                        m.role,
                        ROLES.join(", ")
                    ),
                ));
            }
            match &m.content {
                Value::String(_) | Value::Array(_) => {}
                Value::Null if m.role == "assistant" => {}
                Value::Null => {
                    return Err(GatewayError::invalid_param(
                        Code::MissingRequiredParameter,
                        format!("messages[{i}].content"),
                        format!(
                            "`messages[{i}].content` is required for role \"{}\"",
                            m.role
                        ),
                    ))
                }
                _ => {
                    return Err(GatewayError::invalid_param(
                        Code::InvalidType,
                        format!("messages[{i}].content"),
                        format!(
                            "`messages[{i}].content` must be a string or an array of content parts"
                        ),
                    ))
                }
            }
        }
        if self.stream_options.is_some() && self.stream != Some(true) {
            // OpenAI answers the same 400 (and vLLM: "Stream options can only be
            // defined when `stream=True`").
            return Err(GatewayError::invalid_field(
                "stream_options",
                "`stream_options` is only allowed when `stream` is true",
            ));
        }
        if let Some(t) = self.temperature {
            if !(0.0..=2.0).contains(&t) {
                return Err(GatewayError::invalid_param(
                    if t < 0.0 {
                        Code::DecimalBelowMinValue
                    } else {
                        Code::DecimalAboveMaxValue
                    },
                    "temperature",
                    format!("`temperature` is {t}; expected a number from 0 to 2"),
                ));
            }
        }
        for (name, v) in [
            ("max_tokens", self.max_tokens),
            ("max_completion_tokens", self.max_completion_tokens),
        ] {
            if v == Some(0) {
                return Err(GatewayError::invalid_param(
                    Code::IntegerBelowMinValue,
                    name,
                    format!("`{name}` must be at least 1"),
                ));
            }
        }
        if let Some(tools) = &self.tools {
            for (i, t) in tools.iter().enumerate() {
                if !t.is_object() {
                    return Err(GatewayError::invalid_param(
                        Code::InvalidType,
                        format!("tools[{i}]"),
                        format!("`tools[{i}]` must be an object"),
                    ));
                }
            }
        }
        Ok(())
    }

    /// Whether the client asked for server-sent events.
    pub fn is_stream(&self) -> bool {
        self.stream == Some(true)
    }

    /// Whether the client asked for the final usage chunk of a stream.
    pub fn wants_usage_chunk(&self) -> bool {
        self.is_stream()
            && self
                .stream_options
                .as_ref()
                .and_then(|o| o.include_usage)
                .unwrap_or(false)
    }

    /// The output cap in tokens, whichever name the client used.
    pub fn output_cap(&self) -> Option<u64> {
        self.max_completion_tokens.or(self.max_tokens)
    }

    /// All text of the conversation concatenated (for token estimates and the mock).
    pub fn prompt_text(&self) -> String {
        let mut out = String::new();
        for m in &self.messages {
            match &m.content {
                Value::String(s) => out.push_str(s),
                Value::Array(parts) => {
                    for p in parts {
                        if let Some(t) = p.get("text").and_then(Value::as_str) {
                            out.push_str(t);
                        }
                    }
                }
                _ => {}
            }
            out.push('\n');
        }
        out
    }

    /// A quick estimate of input tokens: about 4 characters per token, plus 4 tokens of
    /// framing per message (OpenAI's rule of thumb from its token-counting cookbook),
    /// of the messages' text and the [`ChatRequest::definitions_len`].
    pub fn estimated_input_tokens(&self) -> u64 {
        ((self.messages.text_len() + self.definitions_len()) as u64).div_ceil(4)
            + 4 * self.messages.count() as u64
    }

    /// Bytes of text outside the messages that the model reads as input: the tool
    /// definitions (`tools`, the legacy `functions`) and the `response_format`
    /// schema, as the strings and member names in them ([`strings_len`]). OpenAI
    /// counts tool definitions in `prompt_tokens`; a limit that left them out would
    /// let a 100 KB tool description through as a few tokens.
    pub fn definitions_len(&self) -> usize {
        let tools = self
            .tools
            .as_ref()
            .map_or(0, |t| t.iter().map(strings_len).sum());
        tools
            + ["functions", "response_format"]
                .iter()
                .filter_map(|k| self.extra.get(*k))
                .map(strings_len)
                .sum::<usize>()
    }
}

/// Bytes of the text in `v`, at any depth: its strings and object member names, and
/// its numbers, booleans and nulls as written (about 4 bytes for a number whose
/// length is not at hand): what a JSON value (a tool definition, a tool call's
/// arguments) puts before a model. An `enum` of 20,000 integers is text too.
pub fn strings_len(v: &Value) -> usize {
    match v {
        Value::String(s) => s.len(),
        Value::Array(a) => a.iter().map(|v| strings_len(v) + 1).sum(),
        Value::Object(o) => o.iter().map(|(k, v)| k.len() + strings_len(v)).sum(),
        Value::Number(n) => match n.as_u64() {
            Some(u) => u.checked_ilog10().map_or(1, |d| d as usize + 1),
            None => 4,
        },
        Value::Bool(_) | Value::Null => 4,
    }
}

/// Token counts of one completion (OpenAI's `usage`).
#[derive(Debug, Clone, Copy, Serialize, Deserialize, Default, PartialEq, Eq)]
pub struct Usage {
    /// Input tokens.
    pub prompt_tokens: u64,
    /// Output tokens.
    pub completion_tokens: u64,
    /// Sum of both.
    pub total_tokens: u64,
    /// Breakdown of `prompt_tokens` (OpenAI's `usage.prompt_tokens_details`), when the
    /// provider reported one; omitted otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_tokens_details: Option<PromptTokensDetails>,
    /// `completion_tokens_details`: of the output tokens, those spent on reasoning
    /// (absent when the provider reports none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completion_tokens_details: Option<CompletionTokensDetails>,
}

/// `usage.prompt_tokens_details`: parts of `prompt_tokens`, in tokens (OpenAI API
/// reference, "The chat completion object", `usage`).
#[derive(Debug, Clone, Copy, Serialize, Deserialize, Default, PartialEq, Eq)]
pub struct PromptTokensDetails {
    /// Input tokens read from the provider's prompt cache (OpenAI's `cached_tokens`;
    /// Anthropic's `cache_read_input_tokens`; Gemini's `cachedContentTokenCount`).
    #[serde(default)]
    pub cached_tokens: u64,
    /// Input tokens written to the provider's prompt cache (Anthropic's
    /// `cache_creation_input_tokens`, under LiteLLM's name); omitted when the provider
    /// reports none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_creation_tokens: Option<u64>,
}

/// OpenAI's `usage.completion_tokens_details`.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, Default, PartialEq, Eq)]
pub struct CompletionTokensDetails {
    /// Output tokens spent on reasoning (included in `completion_tokens`).
    #[serde(default)]
    pub reasoning_tokens: u64,
}

impl Usage {
    /// Usage with `total_tokens` filled in (saturating: the counts come from the
    /// upstream, which may report absurd ones).
    pub fn new(prompt_tokens: u64, completion_tokens: u64) -> Usage {
        Usage {
            prompt_tokens,
            completion_tokens,
            total_tokens: prompt_tokens.saturating_add(completion_tokens),
            prompt_tokens_details: None,
            completion_tokens_details: None,
        }
    }

    /// The same usage with `prompt_tokens_details.cached_tokens` set (when `cached`
    /// is `Some`).
    pub fn with_cached(mut self, cached: Option<u64>) -> Usage {
        if let Some(cached_tokens) = cached {
            self.prompt_tokens_details = Some(PromptTokensDetails {
                cached_tokens,
                ..PromptTokensDetails::default()
            });
        }
        self
    }

    /// The same usage with `completion_tokens_details.reasoning_tokens` set (when
    /// `reasoning` is `Some`).
    pub fn with_reasoning(mut self, reasoning: Option<u64>) -> Usage {
        if let Some(reasoning_tokens) = reasoning {
            self.completion_tokens_details = Some(CompletionTokensDetails { reasoning_tokens });
        }
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lone_surrogate_escapes_are_replaced_and_pairs_kept() {
        let mend =
            |s: &str| mend_lone_surrogates(s.as_bytes()).map(|v| String::from_utf8(v).unwrap());
        // A pair, other escapes, an escaped backslash before `u`, and text outside
        // strings are left alone.
        assert_eq!(mend(r#"{"a":"\ud83d\ude00 \n \\ud83d \u00e9"}"#), None);
        assert_eq!(mend(r#"["\ud83d"]"#).as_deref(), Some(r#"["\ufffd"]"#));
        assert_eq!(mend(r#"["\uDE00x"]"#).as_deref(), Some(r#"["\ufffdx"]"#));
        // Two leading halves: each is lone.
        assert_eq!(
            mend(r#"["\ud83d\ud83d\ude00"]"#).as_deref(),
            Some(r#"["\ufffd\ud83d\ude00"]"#)
        );
        // In a key too; a trailing half first, then a pair.
        assert_eq!(
            mend(r#"{"\udc00\ud800\udc00":1}"#).as_deref(),
            Some(r#"{"\ufffd\ud800\udc00":1}"#)
        );
        // A cut escape at the end is left for the parser's error.
        assert_eq!(mend(r#"["\ud8"#), None);
    }

    /// Outside testing (2026-12-07): a message cut inside an emoji by the client
    /// (`json.dumps` writes the lone half as `\ud83d`) was refused as "not valid
    /// JSON: unexpected end of hex escape"; it is read with U+FFFD, and the body
    /// forwarded is the mended one.
    #[test]
    fn a_lone_surrogate_in_a_message_is_read_as_the_replacement_character() {
        let body = r#"{"model":"m","messages":[{"role":"user","content":"cut emoji: \ud83d"}]}"#;
        let req = ChatRequest::parse_bytes(bytes::Bytes::from_static(body.as_bytes())).unwrap();
        assert_eq!(req.messages[0].content, "cut emoji: \u{fffd}");
        assert_eq!(&req.raw[..], body.replace("\\ud83d", "\\ufffd").as_bytes());
        // Anything else wrong with the body is still refused, with its own error.
        let bad = r#"{"model":"m","messages":[{"role":"user","content":"\ud83d"}],}"#;
        let e = ChatRequest::parse_bytes(bytes::Bytes::from_static(bad.as_bytes())).unwrap_err();
        assert!(e.message.contains("not valid JSON"), "{}", e.message);
    }

    proptest::proptest! {
        /// Reading a UTF-8 body as text gives what reading its bytes gives (the
        /// value, or the same error at the same place), and a body that is not
        /// UTF-8 is read as bytes.
        #[test]
        fn a_body_read_as_text_reads_as_its_bytes(
            parts in proptest::collection::vec(proptest::sample::select(vec![
                &b"{"[..], b"}", b"[", b"]", b",", b":", b"\"model\"", b"\"messages\"",
                b"\"role\"", b"\"user\"", b"\"content\"", b"\"x\"", b"\"\\u00e9\"",
                b"\"\\ud800\"", b"\"\xc3\xa9\"", b"\"\xff\"", b"\xe2\x82", b"1", b"-2.5e3",
                b"null", b"true", b" ", b"\n",
            ]), 0..24)
        ) {
            let body = parts.concat();
            let text = read_json::<ChatRequest>(&body).map_err(|e| e.to_string());
            let bytes = serde_json::from_slice::<ChatRequest>(&body).map_err(|e| e.to_string());
            proptest::prop_assert_eq!(
                text.map(|r| serde_json::to_string(&r).unwrap()),
                bytes.map(|r| serde_json::to_string(&r).unwrap())
            );
        }
    }

    proptest::proptest! {
        /// [`read_json`] gives what `serde_json::from_slice` gives, value or error
        /// text, for any bytes, into a tree and into a borrowing type.
        #[test]
        fn any_json_read_as_text_reads_as_its_bytes(
            parts in proptest::collection::vec(proptest::sample::select(vec![
                &b"{"[..], b"}", b"[", b"]", b",", b":", b"\"k\"", b"\"x\"", b"\"\\u00e9\"",
                b"\"\\ud800\"", b"\"\\n\"", b"\"\xc3\xa9\"", b"\"\xff\"", b"\xe2\x82", b"\xc3\xa9",
                b"1", b"-2.5e3", b"1e999", b"null", b"true", b" ", b"\n",
            ]), 0..24)
        ) {
            let body = parts.concat();
            let tree = |r: serde_json::Result<Value>| r.map_err(|e| e.to_string());
            proptest::prop_assert_eq!(
                tree(read_json(&body)),
                tree(serde_json::from_slice(&body))
            );
            type Borrowing<'a> = std::collections::BTreeMap<&'a str, Vec<Option<std::borrow::Cow<'a, str>>>>;
            let borrowing = |r: serde_json::Result<Borrowing<'_>>| {
                r.map(|m| format!("{m:?}")).map_err(|e| e.to_string())
            };
            proptest::prop_assert_eq!(
                borrowing(read_json(&body)),
                borrowing(serde_json::from_slice(&body))
            );
        }
    }

    #[test]
    fn parses_and_keeps_unknown_fields() {
        let r = ChatRequest::parse(
            br#"{"model":"m","messages":[{"role":"user","content":"hi","name":"x"}],"seed":7,"stream":true,"stream_options":{"include_usage":true}}"#,
        )
        .unwrap();
        assert!(r.wants_usage_chunk());
        assert_eq!(r.extra["seed"], 7);
        assert_eq!(r.messages[0].extra["name"], "x");
        let back = serde_json::to_value(&r).unwrap();
        assert_eq!(back["seed"], 7);
        assert_eq!(back["messages"][0]["name"], "x");
    }

    #[test]
    fn errors_name_the_field() {
        let e = ChatRequest::parse(br#"{"model":"m","messages":[{"role":5}]}"#).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("messages[0].role"));
        let e = ChatRequest::parse(br#"{"messages":[]}"#).unwrap_err();
        assert!(e.message.contains("model"), "{}", e.message);
        assert_eq!(e.param.as_deref(), Some("model"));
        let e = ChatRequest::parse(br#"{"model":"m","messages":[]}"#).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("messages"));
        let e = ChatRequest::parse(br#"{"model":"m","messages":[{"role":"robot","content":"x"}]}"#)
            .unwrap_err();
        assert_eq!(e.param.as_deref(), Some("messages[0].role"));
        let e = ChatRequest::parse(
            br#"{"model":"m","messages":[{"role":"user","content":"x"}],"temperature":3}"#,
        )
        .unwrap_err();
        assert_eq!(e.param.as_deref(), Some("temperature"));
    }

    /// Found by the OpenAI-ingress review (2026-12-05): a field missing inside a
    /// message (`{"content": "hi"}` without `role`) named the message as `param`,
    /// `messages[0]`, where OpenAI names the missing field, `messages[0].role`.
    #[test]
    fn a_field_missing_inside_a_message_named_the_message_not_the_field() {
        let e = ChatRequest::parse(br#"{"model":"m","messages":[{"content":"hi"}]}"#).unwrap_err();
        assert_eq!(e.status(), 400);
        assert_eq!(
            e.param.as_deref(),
            Some("messages[0].role"),
            "{}",
            e.message
        );
        assert!(e.message.contains("`role`"), "{}", e.message);
        let e = ChatRequest::parse(
            br#"{"model":"m","messages":[{"role":"user","content":"x"}],"stream":true,"stream_options":{"include_usage":1}}"#,
        )
        .unwrap_err();
        assert_eq!(e.param.as_deref(), Some("stream_options.include_usage"));
    }

    #[test]
    fn the_untracked_parse_equals_the_tracked_one() {
        for ok in [
            &br#"{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"a\"b"}],"name":"x"}],"seed":7,"tools":[{"type":"function","function":{"name":"f"}}]}"#[..],
            br#"{"model":"m","messages":[{"role":"system","content":"s"},{"role":"user","content":"caf\u00e9"}],"stream":true,"stream_options":{"include_usage":true},"temperature":0.5,"max_tokens":9}"#,
            br#" {"messages":[{"role":"assistant","content":null,"tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"{}"}}]},{"role":"tool","tool_call_id":"c","content":"r"}],"model":"m","metadata":{"k":[1,{"x":null}]}} "#,
        ] {
            let fast = serde_json::to_value(ChatRequest::parse(ok).unwrap()).unwrap();
            let tracked = serde_json::to_value(ChatRequest::parse_tracked(ok).unwrap()).unwrap();
            assert_eq!(fast, tracked);
        }
        // A body that fails is parsed again with the path tracked: the error is that
        // parse's, field path included.
        for bad in [
            &br#"{"model":"m","messages":[{"role":5}]}"#[..],
            br#"{"model":"m","messages":[{"role":"user","content":"x"}]} x"#,
            br#"{"model":"m","messages":[{"role":"user","content":"x"}],"temperature":"hot"}"#,
            br#"{"messages":[]}"#,
            b"{",
        ] {
            let e = ChatRequest::parse(bad).unwrap_err();
            let t = ChatRequest::parse_tracked(bad).unwrap_err();
            assert_eq!((e.message, e.param), (t.message, t.param));
        }
    }

    /// Found by attack (2026-12-05): `stream_options` without `stream: true` was
    /// accepted and forwarded; OpenAI answers 400.
    #[test]
    fn stream_options_need_stream_true() {
        for body in [
            &br#"{"model":"m","messages":[{"role":"user","content":"x"}],"stream_options":{"include_usage":true}}"#[..],
            br#"{"model":"m","messages":[{"role":"user","content":"x"}],"stream":false,"stream_options":{}}"#,
        ] {
            let e = ChatRequest::parse(body).unwrap_err();
            assert_eq!((e.status(), e.param.as_deref()), (400, Some("stream_options")));
        }
        for body in [
            &br#"{"model":"m","messages":[{"role":"user","content":"x"}],"stream":true,"stream_options":{"include_usage":true}}"#[..],
            br#"{"model":"m","messages":[{"role":"user","content":"x"}],"stream_options":null}"#,
        ] {
            ChatRequest::parse(body).unwrap();
        }
    }

    #[test]
    fn malformed_json_is_400_without_param() {
        for body in [
            &b"{"[..],
            b"",
            b"[1,2]",
            b"null",
            b"{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]} x",
        ] {
            let e = ChatRequest::parse(body).unwrap_err();
            assert_eq!(e.status(), 400, "{:?}", String::from_utf8_lossy(body));
            assert_eq!(e.param, None, "{:?}", String::from_utf8_lossy(body));
        }
    }
}
