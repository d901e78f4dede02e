//! Anthropic Messages: the request (`POST /v1/messages`), the `message` answer, the
//! streamed events, errors and `anthropic-ratelimit-*` headers.
//!
//! Source: Anthropic API reference, "Messages" (request fields, content blocks
//! `text`/`tool_use`/`tool_result`, `stop_reason`, `usage`), "Streaming Messages"
//! (`message_start`, `content_block_start`/`_delta`/`_stop` with `text_delta` and
//! `input_json_delta`, `message_delta`, `message_stop`, `ping`, the `error` event),
//! "Errors" (`{"type":"error","error":{"type","message"}}`, 529 `overloaded_error`),
//! "Rate limits" (`anthropic-ratelimit-*` with RFC 3339 reset times, `retry-after`)
//! and "Versioning" (the required `anthropic-version` header). Checked against the
//! recorded answers in `shared/fixtures/provider-wire/anthropic/`.

use std::time::SystemTime;

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Response, StatusCode};
use serde_json::{json, Value};

use super::turn::{result_text, tool_args, Text};
use super::{Action, Finish, Limits, Reply, Signature, Turn};
use crate::body::{self, Body};

/// A 400 in Anthropic's shape: `invalid_request_error` with `message`.
pub fn invalid(message: impl Into<String>) -> Box<Response<Body>> {
    let v = json!({"type": "error", "error": {"type": "invalid_request_error", "message": message.into()}});
    Box::new(body::json(
        StatusCode::BAD_REQUEST,
        serde_json::to_vec(&v).unwrap_or_default(),
    ))
}

/// The text of a message's `content`: a string, or its `text` blocks and the text of
/// its `tool_result` blocks. `Err` names the first empty or blank text block, which
/// the Messages API refuses.
fn content_text(content: &Value, i: usize, text: &mut Text) -> Result<(), String> {
    match content {
        Value::String(s) => text.push(s),
        Value::Array(blocks) => {
            for (j, b) in blocks.iter().enumerate() {
                match b.get("type").and_then(Value::as_str) {
                    Some("text") => {
                        let t = b.get("text").and_then(Value::as_str).ok_or_else(|| {
                            format!("messages.{i}.content.{j}.text: Field required")
                        })?;
                        if t.is_empty() {
                            return Err("messages: text content blocks must be non-empty".into());
                        }
                        if t.trim().is_empty() {
                            return Err(
                                "messages: text content blocks must contain non-whitespace text"
                                    .into(),
                            );
                        }
                        text.push(t);
                    }
                    Some("tool_result") => {
                        text.push(&result_text(b.get("content").unwrap_or(&Value::Null)))
                    }
                    Some(_) => {}
                    None => return Err(format!("messages.{i}.content.{j}.type: Field required")),
                }
            }
        }
        _ => {
            return Err(format!(
                "messages.{i}.content: Input should be a valid list or string"
            ))
        }
    }
    Ok(())
}

/// Whether the request asks to think (`thinking` `enabled` or `adaptive`); `Err` for
/// a budget below 1024 tokens or not below `max_tokens`, as the API refuses them.
fn thinking(t: Option<&Value>, max_tokens: u64) -> Result<bool, Box<Response<Body>>> {
    let Some(t) = t.filter(|t| !t.is_null()) else {
        return Ok(false);
    };
    match t.get("type").and_then(Value::as_str) {
        Some("disabled") => Ok(false),
        Some("adaptive") => Ok(true),
        Some("enabled") => {
            let budget = t
                .get("budget_tokens")
                .and_then(Value::as_u64)
                .ok_or_else(|| invalid("thinking.enabled.budget_tokens: Field required"))?;
            if budget < 1024 {
                return Err(invalid(
                    "thinking.enabled.budget_tokens: Input should be greater than or equal to 1024",
                ));
            }
            if max_tokens <= budget {
                return Err(invalid(
                    "`max_tokens` must be greater than `thinking.budget_tokens`",
                ));
            }
            Ok(true)
        }
        _ => Err(invalid(
            "thinking.type: Input tag does not match any of the expected tags: 'enabled', 'disabled', 'adaptive'",
        )),
    }
}

/// With thinking on, a conversation continuing after tool results: the assistant
/// message with the `tool_use` blocks must start with its thinking block (the API
/// refuses it otherwise); how that block's `signature` came back.
fn replayed_thinking(messages: &[Value]) -> Result<Option<Signature>, Box<Response<Body>>> {
    let [.., assistant, last] = messages else {
        return Ok(None);
    };
    let blocks = assistant.get("content").and_then(Value::as_array);
    let has_tool_use = blocks
        .into_iter()
        .flatten()
        .any(|b| b.get("type").and_then(Value::as_str) == Some("tool_use"));
    if last_tool_result(last).is_none() || !has_tool_use {
        return Ok(None);
    }
    let i = messages.len() - 2;
    let first = blocks.and_then(|b| b.first());
    match first.and_then(|b| b.get("type")).and_then(Value::as_str) {
        Some("thinking") => {
            let sig = first.and_then(|b| b.get("signature")).and_then(Value::as_str);
            match super::turn::classify_signature(sig, THINKING_TAG, None) {
                Signature::Missing => Err(invalid(format!(
                    "messages.{i}.content.0.thinking.signature: Field required"
                ))),
                s => Ok(Some(s)),
            }
        }
        Some("redacted_thinking") => Ok(Some(Signature::Foreign)),
        found => Err(invalid(format!(
            "messages.{i}.content.0.type: Expected `thinking` or `redacted_thinking`, but found `{}`. When `thinking` is enabled, a final `assistant` message must start with a thinking block (preceeding the lastmost set of `tool_use` and `tool_result` blocks). We recommend you include thinking blocks from previous turns. To avoid this requirement, disable `thinking`.",
            found.unwrap_or("text")
        ))),
    }
}

/// The text of a trailing assistant message (the prefill), if the last message is one.
fn assistant_text(m: &Value) -> Option<String> {
    if m.get("role").and_then(Value::as_str) != Some("assistant") {
        return None;
    }
    match m.get("content")? {
        Value::String(s) => Some(s.clone()),
        Value::Array(blocks) => {
            let mut out = String::new();
            for b in blocks {
                if b.get("type").and_then(Value::as_str) != Some("text") {
                    return None;
                }
                out.push_str(b.get("text").and_then(Value::as_str).unwrap_or_default());
            }
            Some(out)
        }
        _ => None,
    }
}

/// The text of the last `tool_result` block of a trailing user message.
fn last_tool_result(m: &Value) -> Option<String> {
    if m.get("role").and_then(Value::as_str) != Some("user") {
        return None;
    }
    let blocks = m.get("content")?.as_array()?;
    let r = blocks
        .iter()
        .rev()
        .find(|b| b.get("type").and_then(Value::as_str) == Some("tool_result"))?;
    Some(result_text(r.get("content").unwrap_or(&Value::Null)))
}

/// Parses a Messages request. `Err` is the 400 Anthropic would send, naming the
/// field: a missing `anthropic-version` header, `model`, `max_tokens` or `messages`,
/// a bad role or content, an empty or blank text block, or a final assistant message
/// ending in whitespace.
pub fn parse(headers: &HeaderMap, body: &[u8], prefill: bool) -> Result<Turn, Box<Response<Body>>> {
    if !headers.contains_key("anthropic-version") {
        return Err(invalid("anthropic-version: header is required"));
    }
    let v: Value = serde_json::from_slice(body)
        .map_err(|e| invalid(format!("The request body is not valid JSON: {e}")))?;
    let Some(obj) = v.as_object() else {
        return Err(invalid("The request body must be a JSON object"));
    };
    let model = match obj.get("model") {
        Some(Value::String(m)) => m.clone(),
        Some(_) => return Err(invalid("model: Input should be a valid string")),
        None => return Err(invalid("model: Field required")),
    };
    let cap = match obj.get("max_tokens") {
        Some(n) => n
            .as_u64()
            .ok_or_else(|| invalid("max_tokens: Input should be a valid integer"))?,
        None => return Err(invalid("max_tokens: Field required")),
    };
    let messages = match obj.get("messages") {
        Some(Value::Array(m)) if !m.is_empty() => m,
        Some(Value::Array(_)) => return Err(invalid("messages: at least one message is required")),
        Some(_) => return Err(invalid("messages: Input should be a valid list")),
        None => return Err(invalid("messages: Field required")),
    };
    let mut text = Text::default();
    match obj.get("system") {
        None | Some(Value::Null) => {}
        Some(s) => {
            text.message();
            content_text(s, 0, &mut text)
                .map_err(|_| invalid("system: Input should be a valid list or string"))?;
            text.end();
        }
    }
    for (i, m) in messages.iter().enumerate() {
        match m.get("role").and_then(Value::as_str) {
            Some("user" | "assistant") => {}
            Some(r) => {
                return Err(invalid(format!(
                    "messages.{i}.role: Input should be 'user' or 'assistant', not '{r}'"
                )))
            }
            None => return Err(invalid(format!("messages.{i}.role: Field required"))),
        }
        let content = m
            .get("content")
            .ok_or_else(|| invalid(format!("messages.{i}.content: Field required")))?;
        text.message();
        content_text(content, i, &mut text).map_err(invalid)?;
        text.end();
    }
    let last = messages.last().unwrap_or(&Value::Null);
    let trailing = assistant_text(last);
    if trailing.as_deref().is_some_and(|t| t != t.trim_end()) {
        return Err(invalid(
            "messages: final assistant content cannot end with trailing whitespace",
        ));
    }
    let thinking = thinking(obj.get("thinking"), cap)?;
    let signature = if thinking {
        replayed_thinking(messages)?
    } else {
        None
    };
    let tools = obj.get("tools").and_then(Value::as_array);
    let no_tools = obj
        .get("tool_choice")
        .and_then(|c| c.get("type"))
        .and_then(Value::as_str)
        == Some("none");
    let action = match (last_tool_result(last), tools.and_then(|t| t.first())) {
        (Some(r), _) => Action::AfterResult(r),
        (None, Some(t)) if !no_tools && trailing.is_none() => Action::Call {
            name: t
                .get("name")
                .and_then(Value::as_str)
                .unwrap_or("tool")
                .to_string(),
            args: tool_args(t.get("input_schema")),
        },
        _ => Action::Text,
    };
    let prefix = match trailing {
        Some(p) if prefill => Some((p, text.without_last())),
        _ => None,
    };
    let mut turn = Turn {
        thinking,
        signature,
        model,
        stream: obj.get("stream").and_then(Value::as_bool).unwrap_or(false),
        include_usage: false,
        cap: Some(cap),
        prefix,
        action,
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

fn id(r: &Reply<'_>) -> String {
    format!("msg_mock{:016x}", r.n)
}

/// `usage` as the Messages API reports it (no prompt caching: cache counts are 0).
fn usage(input: u64, output: u64) -> Value {
    json!({
        "input_tokens": input,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
        "output_tokens": output,
    })
}

/// The tool call's `input` object.
fn input(args: &str) -> Value {
    serde_json::from_str(args).unwrap_or_else(|_| json!({}))
}

/// What each issued thinking signature starts with once decoded.
const THINKING_TAG: &str = "switchyard-mock-thinking:";

/// The `signature` of request `n`'s thinking block.
fn thinking_signature(n: u64) -> String {
    super::turn::issue_signature(THINKING_TAG, n)
}

/// The whole `message` body.
pub(super) fn json(r: &Reply<'_>) -> Value {
    let mut content = Vec::new();
    if !r.thinking.is_empty() {
        content.push(json!({"type": "thinking", "thinking": r.thinking.concat(), "signature": thinking_signature(r.n)}));
    }
    match &r.call {
        Some(c) => content
            .push(json!({"type": "tool_use", "id": c.id, "name": c.name, "input": input(&c.args)})),
        None if r.words.is_empty() => {}
        None => content.push(json!({"type": "text", "text": r.words.concat()})),
    }
    let mut u = usage(r.usage.prompt_tokens, r.usage.completion_tokens);
    u["service_tier"] = json!("standard");
    json!({
        "id": id(r),
        "type": "message",
        "role": "assistant",
        "model": r.turn.model,
        "content": content,
        "stop_reason": stop_reason(r.finish),
        "stop_sequence": null,
        "usage": u,
    })
}

/// One event: `event: <type>` then `data: <json>`.
fn event(v: &Value) -> Bytes {
    let kind = v.get("type").and_then(Value::as_str).unwrap_or("message");
    let mut out = Vec::with_capacity(128);
    out.extend_from_slice(b"event: ");
    out.extend_from_slice(kind.as_bytes());
    out.extend_from_slice(b"\ndata: ");
    let _ = serde_json::to_writer(&mut out, v);
    out.extend_from_slice(b"\n\n");
    Bytes::from(out)
}

/// The stream's events: `message_start`; when thinking, a `thinking` block (a
/// `thinking_delta` a token, then its `signature_delta`); the answer's block (`text`
/// with a `text_delta` a token, or `tool_use` with its input in `input_json_delta`
/// pieces); a `ping` after the first block's start; each block's
/// `content_block_stop`; `message_delta` (stop reason, cumulative usage) and
/// `message_stop`.
pub(super) fn chunks(r: &Reply<'_>) -> Vec<Bytes> {
    let mut u = usage(r.usage.prompt_tokens, 1);
    u["service_tier"] = json!("standard");
    let mut out = vec![event(&json!({
        "type": "message_start",
        "message": {
            "id": id(r), "type": "message", "role": "assistant", "model": r.turn.model,
            "content": [], "stop_reason": null, "stop_sequence": null, "usage": u,
        },
    }))];
    let delta =
        |i: u32, d: Value| event(&json!({"type": "content_block_delta", "index": i, "delta": d}));
    let start = |i: u32, block: Value| {
        event(&json!({"type": "content_block_start", "index": i, "content_block": block}))
    };
    let stop = |i: u32| event(&json!({"type": "content_block_stop", "index": i}));
    let ping = || event(&json!({"type": "ping"}));
    let mut index = 0;
    if !r.thinking.is_empty() {
        out.push(start(
            0,
            json!({"type": "thinking", "thinking": "", "signature": ""}),
        ));
        out.push(ping());
        for w in &r.thinking {
            out.push(delta(0, json!({"type": "thinking_delta", "thinking": w})));
        }
        let sig = thinking_signature(r.n);
        out.push(delta(
            0,
            json!({"type": "signature_delta", "signature": sig}),
        ));
        out.push(stop(0));
        index = 1;
    }
    match &r.call {
        Some(c) => {
            let block = json!({"type": "tool_use", "id": c.id, "name": c.name, "input": {}});
            out.push(start(index, block));
            if index == 0 {
                out.push(ping());
            }
            let piece = |p: &str| json!({"type": "input_json_delta", "partial_json": p});
            out.push(delta(index, piece("")));
            for p in super::openai::pieces(&c.args) {
                out.push(delta(index, piece(p)));
            }
        }
        None => {
            out.push(start(index, json!({"type": "text", "text": ""})));
            if index == 0 {
                out.push(ping());
            }
            for w in &r.words {
                out.push(delta(index, json!({"type": "text_delta", "text": w})));
            }
        }
    }
    out.push(stop(index));
    out.push(event(&json!({
        "type": "message_delta",
        "delta": {"stop_reason": stop_reason(r.finish), "stop_sequence": null},
        "usage": usage(r.usage.prompt_tokens, r.usage.completion_tokens),
    })));
    out.push(event(&json!({"type": "message_stop"})));
    out
}

/// The `error` event of `error_after_chunks`, as the streaming docs show it.
pub(super) fn stream_error() -> Bytes {
    event(&json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}))
}

/// `anthropic-ratelimit-{requests,tokens}-{limit,remaining,reset}`, the reset as an
/// RFC 3339 time (`now` plus the time to the window's reset).
pub(super) fn limit_headers(h: &mut HeaderMap, limits: &Limits, now: SystemTime) {
    let reset = rfc3339(now + limits.reset);
    let mut set = |kind: &str, (limit, remaining): (u64, u64)| {
        let name = |what: &str| format!("anthropic-ratelimit-{kind}-{what}");
        if let Ok(n) = http::HeaderName::try_from(name("limit")) {
            h.insert(n, HeaderValue::from(limit));
        }
        if let Ok(n) = http::HeaderName::try_from(name("remaining")) {
            h.insert(n, HeaderValue::from(remaining));
        }
        if let (Ok(n), Ok(v)) = (
            http::HeaderName::try_from(name("reset")),
            HeaderValue::from_str(&reset),
        ) {
            h.insert(n, v);
        }
    };
    if let Some(r) = limits.requests {
        set("requests", r);
    }
    if let Some(t) = limits.tokens {
        set("tokens", t);
    }
}

/// `t` as an RFC 3339 UTC time to the second, rounded up (`2026-12-01T14:33:00Z`).
pub fn rfc3339(t: SystemTime) -> String {
    let d = t.duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default();
    let secs = d.as_secs() + u64::from(d.subsec_nanos() > 0);
    let (days, rem) = (secs / 86_400, secs % 86_400);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        (rem % 3600) / 60,
        rem % 60
    )
}
