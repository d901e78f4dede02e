//! Amazon Bedrock Converse: the request (`POST /model/{modelId}/converse` and
//! `/converse-stream`), the Converse answer, the ConverseStream binary event stream,
//! errors, and authentication as far as a test needs it.
//!
//! Source: Amazon Bedrock API reference, "Converse" (request `messages`, `system`,
//! `inferenceConfig.maxTokens`, `toolConfig.tools[].toolSpec` with
//! `inputSchema.json`, `additionalModelRequestFields`; answer `output.message`,
//! `stopReason` `end_turn` | `tool_use` | `max_tokens`, `usage` `inputTokens` /
//! `outputTokens` / `totalTokens`, `metrics.latencyMs`), "ConverseStream" (events
//! `messageStart`, `contentBlockStart` for a `toolUse`, `contentBlockDelta` with
//! `text`, `toolUse.input` or `reasoningContent` `text` / `signature`,
//! `contentBlockStop`, `messageStop`, `metadata`; the `modelStreamErrorException`),
//! the types `ContentBlock`, `ToolResultBlock` and `ReasoningContentBlock`, "Common
//! errors" (`x-amzn-ErrorType` and a `{"message"}` body) and the user guide's
//! "Extended thinking" for Claude (`additionalModelRequestFields.thinking` with
//! `budget_tokens` of at least 1024, below `maxTokens`). The stream is AWS's event
//! stream encoding (`application/vnd.amazon.eventstream`), framed with
//! `aws-smithy-eventstream`; each event's JSON carries a `p` padding field as
//! Bedrock's does. Checked against the recorded answers in
//! `shared/fixtures/provider-wire/bedrock/`.
//!
//! Authentication: a request without `Authorization` gets Bedrock's 403
//! (`AccessDeniedException`, `{"Message":"Authorization header is missing"}`, as
//! recorded from Bedrock); a SigV4 header must have its `Credential`,
//! `SignedHeaders` and `Signature` parts and an `x-amz-date`, but the signature is
//! not verified; a `Bearer` key is accepted as is. Bedrock sends no rate-limit
//! headers: throttling is a 429 `ThrottlingException` with no delay unless one is
//! configured.

use aws_smithy_types::event_stream::{Header, HeaderValue as EsValue, Message};
use bytes::Bytes;
use http::{HeaderMap, Response, StatusCode};
use serde_json::{json, Value};

use super::turn::{tool_args, Text};
use super::{Action, Finish, Reply, Signature, Turn};
use crate::body::{self, Body};

/// The content type of a ConverseStream answer.
pub const EVENT_STREAM: &str = "application/vnd.amazon.eventstream";

/// What each issued reasoning signature starts with once decoded.
const THINKING_TAG: &str = "switchyard-mock-bedrock-thinking:";

/// Smallest `budget_tokens` Claude takes ("Extended thinking").
const MIN_BUDGET: u64 = 1024;

/// An error in Bedrock's shape: HTTP `status`, `x-amzn-ErrorType: kind:...` and
/// `{"message": message}`.
pub fn error(status: u16, kind: &str, message: impl Into<String>) -> Response<Body> {
    let v = json!({"message": message.into()});
    let mut r = body::json(
        StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_REQUEST),
        serde_json::to_vec(&v).unwrap_or_default(),
    );
    super::errors::set_aws_error_type(r.headers_mut(), kind);
    r
}

fn invalid(message: impl Into<String>) -> Box<Response<Body>> {
    Box::new(error(400, "ValidationException", message))
}

/// AWS's request validation message for a missing member.
fn missing(at: &str) -> Box<Response<Body>> {
    invalid(format!(
        "1 validation error detected: Value null at '{at}' failed to satisfy constraint: Member must not be null"
    ))
}

/// Checks that the request is authenticated the way Bedrock takes it (see the
/// module doc); the signature itself is not verified.
///
/// # Errors
/// The 403 Bedrock sends: `AccessDeniedException` without `Authorization`,
/// `IncompleteSignatureException` for a SigV4 header missing a part or its
/// `x-amz-date`, or for another scheme.
pub fn check_auth(headers: &HeaderMap) -> Result<(), Box<Response<Body>>> {
    let Some(auth) = headers.get(http::header::AUTHORIZATION) else {
        // Recorded from Bedrock: this one error spells its field `Message`.
        let mut r = error(403, "AccessDeniedException", "");
        *r.body_mut() = body::full(r#"{"Message":"Authorization header is missing"}"#);
        return Err(Box::new(r));
    };
    let auth = auth.to_str().unwrap_or_default();
    let incomplete = |why: &str| Box::new(error(403, "IncompleteSignatureException", why));
    if let Some(key) = auth.strip_prefix("Bearer ") {
        if key.trim().is_empty() {
            return Err(incomplete("The Bearer token is empty."));
        }
        return Ok(());
    }
    let Some(params) = auth.strip_prefix("AWS4-HMAC-SHA256 ") else {
        return Err(incomplete(
            "Authorization header requires the AWS4-HMAC-SHA256 scheme or a Bearer token.",
        ));
    };
    for part in ["Credential", "SignedHeaders", "Signature"] {
        let present = params.split(',').any(|p| {
            p.trim()
                .strip_prefix(part)
                .is_some_and(|v| v.starts_with('='))
        });
        if !present {
            return Err(incomplete(&format!(
                "Authorization header requires '{part}' parameter."
            )));
        }
    }
    if !headers.contains_key("x-amz-date") && !headers.contains_key(http::header::DATE) {
        return Err(incomplete(
            "Authorization header requires existence of either a 'X-Amz-Date' or a 'Date' header.",
        ));
    }
    Ok(())
}

/// `(model, stream)` of a path `/model/{modelId}/converse[-stream]`, the model id
/// percent-decoded (ids hold `:`, sent as `%3A`).
pub fn route(path: &str) -> Option<(String, bool)> {
    let rest = path.strip_prefix("/model/")?;
    let (model, op) = rest.rsplit_once('/')?;
    let stream = match op {
        "converse" => false,
        "converse-stream" => true,
        _ => return None,
    };
    let model = percent_decode(model)?;
    (!model.is_empty()).then_some((model, stream))
}

fn percent_decode(s: &str) -> Option<String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = std::str::from_utf8(b.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// The text of a `toolResult`'s `content`: its `text` blocks and its `json` blocks
/// as JSON text, joined by spaces.
fn result_text(result: &Value) -> String {
    result
        .get("content")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|c| match (c.get("text"), c.get("json")) {
            (Some(Value::String(t)), _) => Some(t.clone()),
            (_, Some(j)) => Some(j.to_string()),
            _ => None,
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// Adds the text of message `i`'s content blocks; `Err` for a block that is not an
/// object with one known member, or a blank `text`.
fn content_text(blocks: &[Value], i: usize, text: &mut Text) -> Result<(), Box<Response<Body>>> {
    const KNOWN: [&str; 9] = [
        "text",
        "image",
        "document",
        "video",
        "toolUse",
        "toolResult",
        "reasoningContent",
        "cachePoint",
        "guardContent",
    ];
    for (j, b) in blocks.iter().enumerate() {
        let Some(obj) = b.as_object().filter(|o| o.len() == 1) else {
            return Err(invalid(format!(
                "The ContentBlock object at messages.{i}.content.{j} must set exactly one member."
            )));
        };
        let (name, v) = obj.iter().next().expect("one member");
        if !KNOWN.contains(&name.as_str()) {
            return Err(invalid(format!(
                "The ContentBlock object at messages.{i}.content.{j} has an unknown member `{name}`."
            )));
        }
        match name.as_str() {
            "text" => {
                let t = v.as_str().unwrap_or_default();
                if t.trim().is_empty() {
                    return Err(invalid(format!(
                        "The text field in the ContentBlock object at messages.{i}.content.{j} is blank. Add text to the text field, and try again."
                    )));
                }
                text.push(t);
            }
            "toolResult" => text.push(&result_text(v)),
            _ => {}
        }
    }
    Ok(())
}

fn role(m: &Value) -> Option<&str> {
    m.get("role").and_then(Value::as_str)
}

fn blocks(m: &Value) -> &[Value] {
    m.get("content")
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice)
}

/// Whether `additionalModelRequestFields.thinking` asks to think; `Err` for a
/// budget under 1024 or not below `maxTokens`, as Claude refuses them (relayed by
/// Bedrock as a `ValidationException`).
fn thinking(
    obj: &serde_json::Map<String, Value>,
    cap: Option<u64>,
) -> Result<bool, Box<Response<Body>>> {
    let Some(t) = obj
        .get("additionalModelRequestFields")
        .and_then(|f| f.get("thinking"))
        .filter(|t| !t.is_null())
    else {
        return Ok(false);
    };
    let model_error = |m: &str| invalid(format!("The model returned the following errors: {m}"));
    match t.get("type").and_then(Value::as_str) {
        Some("disabled") => Ok(false),
        Some("adaptive") => Ok(true),
        Some("enabled") => {
            let budget = t
                .get("budget_tokens")
                .and_then(Value::as_u64)
                .ok_or_else(|| model_error("thinking.enabled.budget_tokens: Field required"))?;
            if budget < MIN_BUDGET {
                return Err(model_error(
                    "thinking.enabled.budget_tokens: Input should be greater than or equal to 1024",
                ));
            }
            if cap.is_some_and(|c| c <= budget) {
                return Err(model_error(
                    "`max_tokens` must be greater than `thinking.budget_tokens`",
                ));
            }
            Ok(true)
        }
        _ => Err(model_error(
            "thinking.type: Input tag does not match any of the expected tags: 'enabled', 'disabled', 'adaptive'",
        )),
    }
}

/// With thinking on and the conversation continuing after tool results: the
/// assistant message holding the `toolUse` blocks must start with its
/// `reasoningContent` (Claude refuses it otherwise); how its signature came back.
fn replayed_thinking(messages: &[Value]) -> Result<Option<Signature>, Box<Response<Body>>> {
    let [.., assistant, last] = messages else {
        return Ok(None);
    };
    let has_tool_use = blocks(assistant).iter().any(|b| b.get("toolUse").is_some());
    let has_result = blocks(last).iter().any(|b| b.get("toolResult").is_some());
    if !has_tool_use || !has_result {
        return Ok(None);
    }
    let i = messages.len() - 2;
    let Some(r) = blocks(assistant)
        .first()
        .and_then(|b| b.get("reasoningContent"))
    else {
        return Err(invalid(format!(
            "The model returned the following errors: messages.{i}.content.0.type: Expected `thinking` or `redacted_thinking`, but found `text`. When `thinking` is enabled, a final `assistant` message must start with a thinking block."
        )));
    };
    if r.get("redactedContent").is_some() {
        return Ok(Some(Signature::Foreign));
    }
    let sig = r
        .get("reasoningText")
        .and_then(|t| t.get("signature"))
        .and_then(Value::as_str);
    match super::turn::classify_signature(sig, THINKING_TAG, None) {
        Signature::Missing => Err(invalid(format!(
            "The model returned the following errors: messages.{i}.content.0.thinking.signature: Field required"
        ))),
        s => Ok(Some(s)),
    }
}

/// Parses a Converse request for `model` (from the URL). `Err` is the 400
/// `ValidationException` Bedrock would send: not JSON, no `messages`, a first
/// message that is not the user's, roles that do not alternate, a bad content
/// block, tool blocks without `toolConfig`, or a bad thinking request.
pub fn parse(
    model: &str,
    stream: bool,
    body: &[u8],
    prefill: bool,
) -> Result<Turn, Box<Response<Body>>> {
    let v: Value = serde_json::from_slice(body).map_err(|e| {
        invalid(format!(
            "Malformed input request: {e}, please reformat your input and try again."
        ))
    })?;
    let Some(obj) = v.as_object() else {
        return Err(invalid(
            "Malformed input request: the body must be a JSON object, please reformat your input and try again.",
        ));
    };
    let messages = match obj.get("messages") {
        Some(Value::Array(m)) if !m.is_empty() => m,
        Some(Value::Array(_)) => {
            return Err(invalid(
                "A conversation must start with a user message. Try again with a conversation that starts with a user message.",
            ))
        }
        Some(_) => return Err(invalid("Malformed input request: `messages` must be a list.")),
        None => return Err(missing("messages")),
    };
    let mut text = Text::default();
    if let Some(system) = obj.get("system").filter(|s| !s.is_null()) {
        let parts = system
            .as_array()
            .ok_or_else(|| invalid("Malformed input request: `system` must be a list."))?;
        text.message();
        for s in parts {
            if let Some(t) = s.get("text").and_then(Value::as_str) {
                text.push(t);
            }
        }
        text.end();
    }
    let mut previous = None;
    for (i, m) in messages.iter().enumerate() {
        let r = match role(m) {
            Some(r @ ("user" | "assistant")) => r,
            Some(r) => {
                return Err(invalid(format!(
                    "1 validation error detected: Value '{}' at 'messages.{}.member.role' failed to satisfy constraint: Member must satisfy enum value set: [user, assistant]",
                    crate::error::bounded(r, 32),
                    i + 1
                )))
            }
            None => return Err(missing(&format!("messages.{}.member.role", i + 1))),
        };
        if i == 0 && r != "user" {
            return Err(invalid(
                "A conversation must start with a user message. Try again with a conversation that starts with a user message.",
            ));
        }
        if previous == Some(r) {
            return Err(invalid(
                "A conversation must alternate between user and assistant roles. Make sure the conversation alternates between user and assistant roles and try again.",
            ));
        }
        previous = Some(r);
        let content = m
            .get("content")
            .and_then(Value::as_array)
            .ok_or_else(|| missing(&format!("messages.{}.member.content", i + 1)))?;
        text.message();
        content_text(content, i, &mut text)?;
        text.end();
    }
    let tools = obj
        .get("toolConfig")
        .and_then(|t| t.get("tools"))
        .and_then(Value::as_array);
    let tool_blocks = messages
        .iter()
        .flat_map(blocks)
        .any(|b| b.get("toolUse").is_some() || b.get("toolResult").is_some());
    if tool_blocks && tools.is_none() {
        return Err(invalid(
            "The toolConfig field must be defined when using toolUse and toolResult content blocks.",
        ));
    }
    let cap = match obj
        .get("inferenceConfig")
        .and_then(|c| c.get("maxTokens"))
    {
        None | Some(Value::Null) => None,
        Some(n) => Some(n.as_u64().filter(|&n| n >= 1).ok_or_else(|| {
            invalid("1 validation error detected: Value at 'inferenceConfig.maxTokens' failed to satisfy constraint: Member must have value greater than or equal to 1")
        })?),
    };
    let thinking = thinking(obj, cap)?;
    let signature = if thinking {
        replayed_thinking(messages)?
    } else {
        None
    };

    let last = messages.last().unwrap_or(&Value::Null);
    let result = (role(last) == Some("user"))
        .then(|| {
            blocks(last)
                .iter()
                .rev()
                .find_map(|b| b.get("toolResult"))
                .map(result_text)
        })
        .flatten();
    let trailing = (role(last) == Some("assistant")
        && blocks(last).iter().all(|b| b.get("text").is_some()))
    .then(|| {
        blocks(last)
            .iter()
            .filter_map(|b| b.get("text").and_then(Value::as_str))
            .collect::<String>()
    });
    let first_tool = tools.into_iter().flatten().find_map(|t| t.get("toolSpec"));
    let action = match (result, first_tool) {
        (Some(r), _) => Action::AfterResult(r),
        (None, Some(spec)) if trailing.is_none() => Action::Call {
            name: spec
                .get("name")
                .and_then(Value::as_str)
                .unwrap_or("tool")
                .to_string(),
            args: tool_args(spec.get("inputSchema").and_then(|s| s.get("json"))),
        },
        _ => Action::Text,
    };
    let prefix = match trailing {
        Some(p) if prefill => Some((p, text.without_last())),
        _ => None,
    };
    let mut turn = Turn {
        model: model.to_string(),
        stream,
        include_usage: false,
        cap,
        prefix,
        action,
        thinking,
        signature,
        ..Turn::default()
    };
    text.finish(&mut turn);
    Ok(turn)
}

fn stop_reason(f: Finish) -> &'static str {
    match f {
        Finish::Stop => "end_turn",
        Finish::Length => "max_tokens",
        Finish::Tool => "tool_use",
    }
}

/// The `signature` of request `n`'s reasoning block.
fn thinking_signature(n: u64) -> String {
    super::turn::issue_signature(THINKING_TAG, n)
}

fn usage(r: &Reply<'_>) -> Value {
    json!({
        "inputTokens": r.usage.prompt_tokens,
        "outputTokens": r.usage.completion_tokens,
        "totalTokens": r.usage.prompt_tokens + r.usage.completion_tokens,
    })
}

/// The tool call's `input` object.
fn input(args: &str) -> Value {
    serde_json::from_str(args).unwrap_or_else(|_| json!({}))
}

/// The whole Converse answer.
pub(super) fn json(r: &Reply<'_>) -> Value {
    let mut content = Vec::new();
    if !r.thinking.is_empty() {
        content.push(json!({"reasoningContent": {"reasoningText": {
            "text": r.thinking.concat(),
            "signature": thinking_signature(r.n),
        }}}));
    }
    match &r.call {
        Some(c) => content.push(json!({"toolUse": {
            "toolUseId": c.id, "name": c.name, "input": input(&c.args),
        }})),
        None if r.words.is_empty() => {}
        None => content.push(json!({"text": r.words.concat()})),
    }
    json!({
        "output": {"message": {"role": "assistant", "content": content}},
        "stopReason": stop_reason(r.finish),
        "usage": usage(r),
        "metrics": {"latencyMs": r.latency_ms},
    })
}

/// Padding Bedrock adds to each event (`p`), so that event sizes do not reveal the
/// text; its length here varies with the event's position.
const PAD: &str = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123";

/// One event stream frame: `headers` (string values) and `payload`.
fn frame(headers: [(&'static str, &'static str); 3], payload: &[u8]) -> Bytes {
    let mut m = Message::new(Bytes::copy_from_slice(payload));
    for (name, value) in headers {
        m = m.add_header(Header::new(name, EsValue::String(value.into())));
    }
    let mut out = Vec::with_capacity(payload.len() + 96);
    // Only headers over 255 bytes or frames over 16 MiB fail; ours are neither.
    let _ = aws_smithy_eventstream::frame::write_message_to(&m, &mut out);
    Bytes::from(out)
}

/// An event of `kind` with JSON `v` (and its `p` padding).
fn event(kind: &'static str, mut v: Value, seq: usize) -> Bytes {
    v["p"] = json!(&PAD[..(seq * 7) % PAD.len() + 1]);
    let payload = serde_json::to_vec(&v).unwrap_or_default();
    frame(
        [
            (":event-type", kind),
            (":content-type", "application/json"),
            (":message-type", "event"),
        ],
        &payload,
    )
}

/// The stream's events: `messageStart`; when thinking, `reasoningContent` deltas of
/// block 0 (one a token, then its `signature`) and its `contentBlockStop`; the
/// answer's block (text deltas one a token, or a `contentBlockStart` with the
/// `toolUse` then its input in `toolUse.input` pieces) and its `contentBlockStop`;
/// `messageStop` with `stopReason`; `metadata` with `usage` and `metrics`. Text
/// blocks have no `contentBlockStart`, as recorded from Bedrock.
pub(super) fn chunks(r: &Reply<'_>) -> Vec<Bytes> {
    let mut out = Vec::new();
    let mut push = |kind: &'static str, v: Value| {
        let seq = out.len();
        out.push(event(kind, v, seq));
    };
    push("messageStart", json!({"role": "assistant"}));
    let delta = |i: u32, d: Value| json!({"contentBlockIndex": i, "delta": d});
    let mut index = 0;
    if !r.thinking.is_empty() {
        for w in &r.thinking {
            push(
                "contentBlockDelta",
                delta(0, json!({"reasoningContent": {"text": w}})),
            );
        }
        let sig = thinking_signature(r.n);
        push(
            "contentBlockDelta",
            delta(0, json!({"reasoningContent": {"signature": sig}})),
        );
        push("contentBlockStop", json!({"contentBlockIndex": 0}));
        index = 1;
    }
    match &r.call {
        Some(c) => {
            push(
                "contentBlockStart",
                json!({"contentBlockIndex": index, "start": {"toolUse": {"toolUseId": c.id, "name": c.name}}}),
            );
            for p in super::openai::pieces(&c.args) {
                push(
                    "contentBlockDelta",
                    delta(index, json!({"toolUse": {"input": p}})),
                );
            }
            push("contentBlockStop", json!({"contentBlockIndex": index}));
        }
        None if r.words.is_empty() => {}
        None => {
            for w in &r.words {
                push("contentBlockDelta", delta(index, json!({"text": w})));
            }
            push("contentBlockStop", json!({"contentBlockIndex": index}));
        }
    }
    push("messageStop", json!({"stopReason": stop_reason(r.finish)}));
    push(
        "metadata",
        json!({"usage": usage(r), "metrics": {"latencyMs": r.latency_ms}}),
    );
    out
}

/// The exception frame of `error_after_chunks`: a `modelStreamErrorException`.
pub(super) fn stream_error() -> Bytes {
    let payload = json!({
        "message": "The model encountered an error while streaming (injected by switchyard mock).",
        "originalStatusCode": 500,
        "originalMessage": "Internal server error",
    });
    frame(
        [
            (":exception-type", "modelStreamErrorException"),
            (":content-type", "application/json"),
            (":message-type", "exception"),
        ],
        &serde_json::to_vec(&payload).unwrap_or_default(),
    )
}
