//! What the emulator needs to know of a request, whichever wire format it came in:
//! the model, streaming, the output cap, the conversation's text (the seed of the
//! answer and of the token estimate), a prefill prefix, and whether to call a tool.
//!
//! Each wire module parses its own request body into a [`Turn`]; the answer is then
//! planned once (`MockProvider::respond`) and rendered back in the same format.

use serde_json::{Map, Value};

use crate::api::ChatRequest;

/// A request reduced to what the emulator answers from.
#[derive(Debug, Clone, Default)]
pub struct Turn {
    /// The model the request names (echoed back).
    pub model: String,
    /// Whether the answer is a stream of server-sent events.
    pub stream: bool,
    /// OpenAI only: the client asked for the final usage chunk.
    pub include_usage: bool,
    /// OpenAI only: how many choices to answer with (`n`); 0 and 1 both mean one
    /// (read it with [`Turn::choices`]).
    pub n: u32,
    /// OpenAI only: `Some(top_logprobs)` when the request asked for `logprobs`.
    pub logprobs: Option<u32>,
    /// OpenAI only: the `stop` sequences (a string or an array), empty ones left out.
    pub stop: Vec<String>,
    /// Output cap in tokens (`max_tokens`, `maxOutputTokens`), if any.
    pub cap: Option<u64>,
    /// The conversation's text, one message a line: what the answer is drawn from.
    pub prompt: String,
    /// Estimated input tokens: about 4 characters a token plus 4 a message (the
    /// OpenAI estimate of [`ChatRequest::estimated_input_tokens`]).
    pub prompt_tokens: u64,
    /// Continuation mode: the trailing assistant text, and the prompt without it.
    pub prefix: Option<(String, String)>,
    /// What kind of answer the conversation calls for.
    pub action: Action,
    /// Whether to think before answering (Anthropic `thinking`, Gemini
    /// `thinkingConfig.includeThoughts`).
    pub thinking: bool,
    /// How the current turn's replayed calls (Gemini `thoughtSignature`) or thinking
    /// blocks (Anthropic `signature`) carried their signatures.
    pub signature: Option<Signature>,
}

/// The kind of answer: text, a tool call, or text about a tool's result.
#[derive(Debug, Clone, Default, PartialEq)]
pub enum Action {
    /// No tools, or a plain turn: generated text.
    #[default]
    Text,
    /// The request offers tools and holds no tool result yet: call the first tool
    /// with `args` (see [`tool_args`]).
    Call {
        /// The first tool's name.
        name: String,
        /// Arguments valid for its schema.
        args: Value,
    },
    /// OpenAI only: the request offers a custom tool (`{"type": "custom"}`, free-form
    /// input) and holds no tool result yet: call it with the text `input`.
    Custom {
        /// The tool's name.
        name: String,
        /// The call's input text.
        input: String,
    },
    /// The last message is a tool result: text that quotes it.
    AfterResult(String),
    /// OpenAI's `response_format` asks for JSON: a JSON object as the text, valid for
    /// the `json_schema` given (filled as [`tool_args`] fills arguments), or, for
    /// `json_object` (`None`), `{"answer": <generated text>}`.
    Json(Option<Value>),
}

/// How a replayed Gemini `functionCall` part carried its `thoughtSignature`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signature {
    /// A signature this emulator issued.
    Echoed,
    /// Gemini's documented validator-skip sentinel.
    Skip,
    /// Some other value.
    Foreign,
    /// None at all (refused with HTTP 400, as the providers do).
    Missing,
}

impl Signature {
    /// The ledger's name for it.
    pub fn as_str(self) -> &'static str {
        match self {
            Signature::Echoed => "echoed",
            Signature::Skip => "skip",
            Signature::Foreign => "foreign",
            Signature::Missing => "missing",
        }
    }
}

/// Builds the prompt text and token estimate from the text of each message, in order.
#[derive(Debug, Default)]
pub(super) struct Text {
    prompt: String,
    chars: usize,
    messages: u64,
    /// Where the last message's text starts in `prompt`.
    last_start: usize,
}

impl Text {
    /// Starts a message.
    pub(super) fn message(&mut self) {
        self.last_start = self.prompt.len();
        self.messages += 1;
    }

    /// Adds text to the current message.
    pub(super) fn push(&mut self, t: &str) {
        self.prompt.push_str(t);
        self.chars += t.len();
    }

    /// Ends the current message.
    pub(super) fn end(&mut self) {
        self.prompt.push('\n');
    }

    /// The prompt text without the last message.
    pub(super) fn without_last(&self) -> String {
        self.prompt[..self.last_start].to_string()
    }

    /// Fills `turn.prompt` and `turn.prompt_tokens`.
    pub(super) fn finish(self, turn: &mut Turn) {
        turn.prompt_tokens = (self.chars as u64).div_ceil(4) + 4 * self.messages;
        turn.prompt = self.prompt;
    }
}

/// A tool call's arguments, valid for the JSON Schema `schema` in the simplest way:
/// every `required` property gets a placeholder of its `type` (string `"x"`, number
/// and integer `0`, boolean `false`, array `[]`, object `{}`, null `null`; an enum
/// its first value); optional properties are left out. No schema: `{}`.
pub fn tool_args(schema: Option<&Value>) -> Value {
    let mut out = Map::new();
    let Some(schema) = schema else {
        return Value::Object(out);
    };
    let props = schema.get("properties").and_then(Value::as_object);
    let required = schema.get("required").and_then(Value::as_array);
    for name in required.into_iter().flatten().filter_map(Value::as_str) {
        let prop = props.and_then(|p| p.get(name));
        out.insert(name.to_string(), placeholder(prop));
    }
    Value::Object(out)
}

fn placeholder(prop: Option<&Value>) -> Value {
    let Some(p) = prop else {
        return Value::String("x".into());
    };
    if let Some(first) = p
        .get("enum")
        .and_then(Value::as_array)
        .and_then(|e| e.first())
    {
        return first.clone();
    }
    let kind = match p.get("type") {
        Some(Value::String(t)) => t.to_ascii_lowercase(),
        Some(Value::Array(ts)) => ts
            .iter()
            .filter_map(Value::as_str)
            .find(|t| *t != "null")
            .unwrap_or("string")
            .to_ascii_lowercase(),
        _ => "string".into(),
    };
    match kind.as_str() {
        "number" | "integer" => Value::from(0),
        "boolean" => Value::Bool(false),
        "array" => Value::Array(Vec::new()),
        "object" => tool_args(Some(p)),
        "null" => Value::Null,
        _ => Value::String("x".into()),
    }
}

/// The text of a tool result's content: a string, or the `text` of its parts, or its
/// JSON.
pub(super) fn result_text(content: &Value) -> String {
    match content {
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join(" "),
        Value::Null => String::new(),
        v => v.to_string(),
    }
}

/// Most choices the emulator answers with (OpenAI's largest `n`).
pub const MAX_CHOICES: u32 = 128;

/// Most alternatives per token in `top_logprobs` (OpenAI's largest).
pub const MAX_TOP_LOGPROBS: u32 = 20;

/// The input of a custom tool call (its format, text or grammar, is not read): the
/// placeholder a string argument gets.
pub const CUSTOM_INPUT: &str = "x";

impl Turn {
    /// How many choices the answer has: the request's `n`, at least 1.
    pub fn choices(&self) -> u32 {
        self.n.max(1)
    }

    /// The turn of an OpenAI Chat Completions request: the tool result is a trailing
    /// `role: tool` message; tools are `tools[].function` with `parameters`; the tool
    /// called is the one `tool_choice` names, else the first; no call with
    /// `tool_choice: "none"` or after a trailing assistant message (a prefill).
    pub fn from_openai(req: &ChatRequest, prefill: bool) -> Turn {
        let last = req.messages.last();
        let action = match last {
            Some(m) if m.role == "tool" || m.role == "function" => {
                Action::AfterResult(result_text(&m.content))
            }
            Some(m) if m.role == "assistant" => Action::Text,
            _ if req.extra.get("tool_choice").and_then(Value::as_str) == Some("none") => {
                json_action(req)
            }
            _ => match chosen_tool(req) {
                Some(t) if t.get("type").and_then(Value::as_str) == Some("custom") => {
                    Action::Custom {
                        name: t
                            .get("custom")
                            .and_then(|c| c.get("name"))
                            .and_then(Value::as_str)
                            .unwrap_or("tool")
                            .to_string(),
                        input: CUSTOM_INPUT.to_string(),
                    }
                }
                Some(t) => {
                    let f = t.get("function").unwrap_or(t);
                    Action::Call {
                        name: f
                            .get("name")
                            .and_then(Value::as_str)
                            .unwrap_or("tool")
                            .to_string(),
                        args: tool_args(f.get("parameters")),
                    }
                }
                None => json_action(req),
            },
        };
        let prefix = if prefill {
            super::prefill::prefix(req)
                .map(|p| (p.to_string(), super::prefill::prompt_without_last(req)))
        } else {
            None
        };
        Turn {
            model: req.model.clone(),
            stream: req.is_stream(),
            include_usage: req.wants_usage_chunk(),
            n: req
                .extra
                .get("n")
                .and_then(Value::as_u64)
                .map_or(1, |n| n.clamp(1, MAX_CHOICES.into()) as u32),
            logprobs: (req.extra.get("logprobs") == Some(&Value::Bool(true))).then(|| {
                req.extra
                    .get("top_logprobs")
                    .and_then(Value::as_u64)
                    .map_or(0, |k| k.min(MAX_TOP_LOGPROBS.into()) as u32)
            }),
            stop: match req.extra.get("stop") {
                Some(Value::String(s)) => vec![s.clone()],
                Some(Value::Array(a)) => a
                    .iter()
                    .filter_map(Value::as_str)
                    .map(str::to_string)
                    .collect(),
                _ => Vec::new(),
            }
            .into_iter()
            .filter(|s| !s.is_empty())
            .collect(),
            cap: req.output_cap(),
            prompt: req.prompt_text(),
            prompt_tokens: req.estimated_input_tokens(),
            prefix,
            action,
            thinking: false,
            signature: None,
        }
    }
}

/// The text answer of an OpenAI request: JSON when its `response_format` is
/// `json_object` or `json_schema` (then with the schema of `json_schema.schema`), else
/// generated text.
fn json_action(req: &ChatRequest) -> Action {
    let format = req.extra.get("response_format");
    match format.and_then(|f| f.get("type")).and_then(Value::as_str) {
        Some("json_object") => Action::Json(None),
        Some("json_schema") => Action::Json(Some(
            format
                .and_then(|f| f.get("json_schema"))
                .and_then(|j| j.get("schema"))
                .cloned()
                .unwrap_or_else(|| serde_json::json!({"type": "object"})),
        )),
        _ => Action::Text,
    }
}

/// The tool an OpenAI request's answer calls: the function or custom tool its
/// `tool_choice` names (`{"type": "function", "function": {"name"}}`, the same with
/// `custom`, or the first of `allowed_tools.tools`) when it declares one of that kind
/// and name, else its first tool.
fn chosen_tool(req: &ChatRequest) -> Option<&Value> {
    let tools = req.tools.as_deref()?;
    let named = req.extra.get("tool_choice").and_then(|c| {
        let c = match c.get("type")?.as_str()? {
            "function" | "custom" => c,
            "allowed_tools" => c.get("allowed_tools")?.get("tools")?.as_array()?.first()?,
            _ => return None,
        };
        let kind = c.get("type")?.as_str()?;
        Some((kind, c.get(kind)?.get("name")?.as_str()?))
    });
    named
        .and_then(|(kind, name)| {
            tools.iter().find(|t| {
                t.get("type").and_then(Value::as_str) == Some(kind)
                    && t.get(kind)
                        .and_then(|f| f.get("name"))
                        .and_then(Value::as_str)
                        == Some(name)
            })
        })
        .or_else(|| tools.first())
}

/// Base64 of `tag` and `n` in hex: a signature this emulator issues.
pub(super) fn issue_signature(tag: &str, n: u64) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(format!("{tag}{n:016x}"))
}

/// How a replayed signature relates to the ones issued with `tag`: `skip` (a
/// documented sentinel, if any) gives [`Signature::Skip`].
pub(super) fn classify_signature(sig: Option<&str>, tag: &str, skip: Option<&str>) -> Signature {
    use base64::Engine as _;
    match sig {
        None | Some("") => Signature::Missing,
        Some(s) if Some(s) == skip => Signature::Skip,
        Some(s) => match base64::engine::general_purpose::STANDARD.decode(s) {
            Ok(b) if b.starts_with(tag.as_bytes()) => Signature::Echoed,
            _ => Signature::Foreign,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn tool_args_fill_required_properties_by_type() {
        let schema = json!({
            "type": "object",
            "properties": {
                "city": {"type": "string"},
                "days": {"type": "integer"},
                "unit": {"type": "string", "enum": ["c", "f"]},
                "detail": {"type": ["boolean", "null"]},
                "where": {"type": "object", "properties": {"lat": {"type": "number"}}, "required": ["lat"]},
                "optional": {"type": "string"}
            },
            "required": ["city", "days", "unit", "detail", "where"]
        });
        assert_eq!(
            tool_args(Some(&schema)),
            json!({"city": "x", "days": 0, "unit": "c", "detail": false, "where": {"lat": 0}})
        );
        assert_eq!(tool_args(None), json!({}));
        assert_eq!(tool_args(Some(&json!({"type": "object"}))), json!({}));
    }
}
