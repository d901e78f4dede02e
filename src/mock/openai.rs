//! OpenAI Chat Completions answers: the `chat.completion` object, the
//! `chat.completion.chunk` stream ending in `[DONE]`, and `x-ratelimit-*` headers.
//!
//! Source: OpenAI API reference, "Chat" (the chat completion and chunk objects,
//! `tool_calls` and their streamed deltas, `stream_options.include_usage`) and "Rate
//! limits" (the `x-ratelimit-*` headers).

use bytes::Bytes;
use http::{HeaderMap, HeaderValue};
use serde_json::{json, Value};

use super::{format_reset, sse_data, Finish, Limits, Reply};

fn finish_reason(f: Finish) -> &'static str {
    match f {
        Finish::Stop => "stop",
        Finish::Length => "length",
        Finish::Tool => "tool_calls",
    }
}

fn id(r: &Reply<'_>) -> String {
    format!("chatcmpl-mock{:016x}", r.n)
}

/// The whole `chat.completion` body.
pub(super) fn json(r: &Reply<'_>) -> Value {
    let message = match &r.call {
        Some(c) if c.custom => json!({
            "role": "assistant",
            "content": null,
            "tool_calls": [{
                "id": c.id,
                "type": "custom",
                "custom": {"name": c.name, "input": c.args},
            }],
            "refusal": null,
            "annotations": [],
        }),
        Some(c) => json!({
            "role": "assistant",
            "content": null,
            "tool_calls": [{
                "id": c.id,
                "type": "function",
                "function": {"name": c.name, "arguments": c.args},
            }],
            "refusal": null,
            "annotations": [],
        }),
        None => json!({
            "role": "assistant",
            "content": r.words.concat(),
            "refusal": null,
            "annotations": [],
        }),
    };
    let logprobs = match (&r.call, r.turn.logprobs) {
        (None, Some(top)) => json!({
            "content": r.words.iter().enumerate().map(|(k, w)| token_logprob(k, w, top)).collect::<Vec<_>>(),
            "refusal": null,
        }),
        _ => Value::Null,
    };
    let choices: Vec<Value> = (0..r.turn.choices())
        .map(|index| {
            json!({
                "index": index,
                "message": message,
                "logprobs": logprobs,
                "finish_reason": finish_reason(r.finish),
            })
        })
        .collect();
    json!({
        "id": id(r),
        "object": "chat.completion",
        "created": r.created,
        "model": r.turn.model,
        "choices": choices,
        "usage": usage(r),
        "service_tier": SERVICE_TIER,
        "system_fingerprint": "fp_switchyard_mock",
    })
}

/// A request the emulator cannot answer as asked, refused the way OpenAI refuses an
/// unsupported value, before any other check: a 400 `invalid_request_error` naming
/// the parameter. That is audio output (`modalities` holding `"audio"`, or an
/// `audio` parameter): the emulator answers text only, and an answer without the
/// `message.audio` the client asked for would drop the parameter silently.
pub fn refused(req: &crate::api::ChatRequest) -> Option<http::Response<crate::body::Body>> {
    let audio_modality = req
        .extra
        .get("modalities")
        .and_then(Value::as_array)
        .is_some_and(|m| m.iter().any(|x| x == "audio"));
    let param = if audio_modality {
        "modalities"
    } else if req.extra.get("audio").is_some_and(|a| !a.is_null()) {
        "audio"
    } else {
        return None;
    };
    let body = json!({"error": {
        "message": format!("`{param}`: this model (switchyard mock) does not produce audio; it answers text only"),
        "type": "invalid_request_error",
        "param": param,
        "code": "unsupported_value",
    }});
    Some(crate::body::json(
        http::StatusCode::BAD_REQUEST,
        serde_json::to_vec(&body).unwrap_or_default(),
    ))
}

/// The `service_tier` OpenAI reports for a request that named none.
const SERVICE_TIER: &str = "default";

/// The reply's `usage` with the breakdowns OpenAI always sends
/// (`prompt_tokens_details`, `completion_tokens_details`), all zero here: the
/// emulator caches no prompts and neither reasons nor speaks in this format.
fn usage(r: &Reply<'_>) -> Value {
    json!({
        "prompt_tokens": r.usage.prompt_tokens,
        "completion_tokens": r.usage.completion_tokens,
        "total_tokens": r.usage.total_tokens,
        "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
        "completion_tokens_details": {
            "reasoning_tokens": 0,
            "audio_tokens": 0,
            "accepted_prediction_tokens": 0,
            "rejected_prediction_tokens": 0,
        },
    })
}

/// The stream's events: per choice (`n`, one after the other, each chunk naming its
/// `index`), the role chunk, one chunk a token (or the tool call's name, then its
/// arguments in pieces) and the finish chunk; then the usage chunk when asked for,
/// and `[DONE]`.
pub(super) fn chunks(r: &Reply<'_>) -> Vec<Bytes> {
    let id = id(r);
    let include_usage = r.turn.include_usage;
    let chunk_with = |index: u32, delta: Value, logprobs: Value, finish: Option<&str>| {
        let mut c = json!({
            "id": id,
            "object": "chat.completion.chunk",
            "created": r.created,
            "model": r.turn.model,
            "service_tier": SERVICE_TIER,
            "system_fingerprint": "fp_switchyard_mock",
            "choices": [{"index": index, "delta": delta, "logprobs": logprobs, "finish_reason": finish}],
        });
        if include_usage {
            c["usage"] = Value::Null;
        }
        sse_data(&c)
    };
    let chunk = |index: u32, delta: Value, finish: Option<&str>| {
        chunk_with(index, delta, Value::Null, finish)
    };
    let choices = r.turn.choices();
    let mut out = Vec::with_capacity((r.words.len() + 2) * choices as usize + 2);
    for index in 0..choices {
        match &r.call {
            Some(c) => {
                // A custom tool's input streams as a function's arguments do, under
                // its own member names.
                let (kind, field) = if c.custom {
                    ("custom", "input")
                } else {
                    ("function", "arguments")
                };
                out.push(chunk(
                    index,
                    json!({"role": "assistant", "content": null, "tool_calls": [{
                        "index": 0, "id": c.id, "type": kind,
                        kind: {"name": c.name, field: ""},
                    }]}),
                    None,
                ));
                for piece in pieces(&c.args) {
                    out.push(chunk(
                        index,
                        json!({"tool_calls": [{"index": 0, kind: {field: piece}}]}),
                        None,
                    ));
                }
            }
            None => {
                out.push(chunk(
                    index,
                    json!({"role": "assistant", "content": "", "refusal": null}),
                    None,
                ));
                for (k, w) in r.words.iter().enumerate() {
                    let logprobs = match r.turn.logprobs {
                        Some(top) => {
                            json!({"content": [token_logprob(k, w, top)], "refusal": null})
                        }
                        None => Value::Null,
                    };
                    out.push(chunk_with(index, json!({"content": w}), logprobs, None));
                }
            }
        }
        out.push(chunk(index, json!({}), Some(finish_reason(r.finish))));
    }
    if include_usage {
        let u = json!({
            "id": id,
            "object": "chat.completion.chunk",
            "created": r.created,
            "model": r.turn.model,
            "service_tier": SERVICE_TIER,
            "system_fingerprint": "fp_switchyard_mock",
            "choices": [],
            "usage": usage(r),
        });
        out.push(sse_data(&u));
    }
    out.push(Bytes::from_static(b"data: [DONE]\n\n"));
    out
}

/// The `logprobs.content` entry of the `k`th token `token`, with `top` alternatives
/// in `top_logprobs` (the token itself first, then other words of the list, each
/// less likely): made-up but deterministic numbers, in OpenAI's shape (`token`,
/// `logprob`, its UTF-8 `bytes`, `top_logprobs`).
fn token_logprob(k: usize, token: &str, top: u32) -> Value {
    let logprob = -(((k % 7) as f64) + 1.0) / 8.0;
    let entry = |t: &str, lp: f64| json!({"token": t, "logprob": lp, "bytes": t.as_bytes()});
    let lead = if token.starts_with(' ') { " " } else { "" };
    let word = token.trim().trim_end_matches('.');
    let alternatives = super::WORDS
        .iter()
        .cycle()
        .skip(k % super::WORDS.len())
        .filter(|w| **w != word)
        .take(top.saturating_sub(1) as usize);
    let mut top_logprobs = Vec::with_capacity(top as usize);
    if top > 0 {
        top_logprobs.push(entry(token, logprob));
    }
    for (j, w) in alternatives.enumerate() {
        top_logprobs.push(entry(&format!("{lead}{w}"), logprob - 1.0 - j as f64));
    }
    let mut e = entry(token, logprob);
    e["top_logprobs"] = Value::Array(top_logprobs);
    e
}

/// Most bytes of tool-call arguments in one streamed piece.
const PIECE: usize = 16;

/// `args` cut into pieces of at most 16 bytes at character boundaries, as providers
/// stream arguments in fragments that are not valid JSON on their own.
pub(super) fn pieces(args: &str) -> Vec<&str> {
    pieces_of(args, PIECE)
}

/// `text` cut into pieces of at most `len` bytes (more for a character longer than
/// that) at character boundaries.
pub(super) fn pieces_of(text: &str, len: usize) -> Vec<&str> {
    let mut out = Vec::new();
    let mut rest = text;
    while !rest.is_empty() {
        let mut end = rest.len().min(len);
        while !rest.is_char_boundary(end) {
            end += 1;
        }
        out.push(&rest[..end]);
        rest = &rest[end..];
    }
    out
}

/// The error event of `error_after_chunks`: OpenAI's in-stream error object.
pub(super) fn stream_error() -> Bytes {
    sse_data(&json!({"error": {
        "message": "The server had an error while processing your request. Sorry about that!",
        "type": "server_error",
        "code": null,
    }}))
}

/// `x-ratelimit-{limit,remaining,reset}-{requests,tokens}`, the reset as `6m0s`.
pub(super) fn limit_headers(h: &mut HeaderMap, limits: &Limits) {
    let reset = format_reset(limits.reset);
    if let Some((limit, remaining)) = limits.requests {
        h.insert("x-ratelimit-limit-requests", HeaderValue::from(limit));
        h.insert(
            "x-ratelimit-remaining-requests",
            HeaderValue::from(remaining),
        );
        if let Ok(v) = HeaderValue::from_str(&reset) {
            h.insert("x-ratelimit-reset-requests", v);
        }
    }
    if let Some((limit, remaining)) = limits.tokens {
        h.insert("x-ratelimit-limit-tokens", HeaderValue::from(limit));
        h.insert("x-ratelimit-remaining-tokens", HeaderValue::from(remaining));
        if let Ok(v) = HeaderValue::from_str(&reset) {
            h.insert("x-ratelimit-reset-tokens", v);
        }
    }
}
