//! Gemini `generateContent`: the request, the `GenerateContentResponse` answer, the
//! `streamGenerateContent?alt=sse` stream, errors, and function calls with a
//! `thoughtSignature`.
//!
//! Source: Gemini API reference, "Generating content" (`contents`/`parts`,
//! `systemInstruction`, `tools[].functionDeclarations`, `toolConfig`,
//! `generationConfig.maxOutputTokens`; `candidates`, `finishReason`, `usageMetadata`;
//! each stream event a whole response with only the new parts, no `[DONE]`),
//! "Function calling" (`functionCall` / `functionResponse` parts), "Thought
//! signatures" (returned on function-call parts, required back on the current turn's
//! calls, the `skip_thought_signature_validator` sentinel) and "Errors"
//! (`{"error":{"code","message","status"}}`, `RESOURCE_EXHAUSTED` with
//! `google.rpc.RetryInfo`). Gemini sends no rate-limit headers. Checked against the
//! recorded answers in `shared/fixtures/provider-wire/gemini/`.

use bytes::Bytes;
use http::{Response, StatusCode};
use serde_json::{json, Value};

use super::turn::{result_text, tool_args, Text};
use super::{sse_data, Action, Finish, Reply, Signature, Turn};
use crate::body::{self, Body};

/// What each issued signature starts with once decoded.
const SIGNATURE_TAG: &str = "switchyard-mock:";
/// Gemini's documented sentinel that skips signature validation.
pub(super) const SKIP: &str = "skip_thought_signature_validator";

/// The `thoughtSignature` issued with the tool call of request `n`: base64 of
/// `switchyard-mock:<n in hex>`.
pub(super) fn signature(n: u64) -> String {
    super::turn::issue_signature(SIGNATURE_TAG, n)
}

fn classify(sig: Option<&str>) -> Signature {
    super::turn::classify_signature(sig, SIGNATURE_TAG, Some(SKIP))
}

/// An error in Google's shape with `code` (HTTP status), `status` and `message`.
pub fn error(code: u16, status: &str, message: impl Into<String>) -> Response<Body> {
    let v = json!({"error": {"code": code, "message": message.into(), "status": status}});
    body::json(
        StatusCode::from_u16(code).unwrap_or(StatusCode::BAD_REQUEST),
        serde_json::to_vec(&v).unwrap_or_default(),
    )
}

fn invalid(message: impl Into<String>) -> Box<Response<Body>> {
    Box::new(error(400, "INVALID_ARGUMENT", message))
}

/// The text of a content's parts: `text`, and a `functionResponse`'s `response`.
fn parts_text(parts: &[Value], text: &mut Text) {
    for p in parts {
        if let Some(t) = p.get("text").and_then(Value::as_str) {
            text.push(t);
        } else if let Some(r) = p.get("functionResponse") {
            text.push(&response_text(r));
        }
    }
}

/// A `functionResponse`'s result as text: its `response.result` (or `output`) when
/// present, else the whole `response` object.
fn response_text(r: &Value) -> String {
    let resp = r.get("response").unwrap_or(&Value::Null);
    match resp.get("result").or_else(|| resp.get("output")) {
        Some(v) => result_text(v),
        None => result_text(resp),
    }
}

fn role(c: &Value) -> &str {
    c.get("role").and_then(Value::as_str).unwrap_or("user")
}

/// Parses a `generateContent` request for `model` (from the URL). `Err` is the 400
/// Gemini would send (`INVALID_ARGUMENT`, naming the field), including a function
/// call of the current turn replayed without its `thoughtSignature`.
pub fn parse(
    model: &str,
    stream: bool,
    body: &[u8],
    prefill: bool,
) -> Result<Turn, Box<Response<Body>>> {
    let v: Value = serde_json::from_slice(body)
        .map_err(|e| invalid(format!("Invalid JSON payload received. {e}")))?;
    let Some(obj) = v.as_object() else {
        return Err(invalid(
            "Invalid JSON payload received. Expected an object.",
        ));
    };
    let contents = match obj.get("contents") {
        Some(Value::Array(c)) if !c.is_empty() => c,
        Some(Value::Array(_)) | None => {
            return Err(invalid(
                "* GenerateContentRequest.contents: contents is not specified",
            ))
        }
        Some(_) => return Err(invalid("Invalid value at 'contents', expected a list")),
    };
    let mut text = Text::default();
    if let Some(parts) = obj
        .get("systemInstruction")
        .and_then(|s| s.get("parts"))
        .and_then(Value::as_array)
    {
        text.message();
        parts_text(parts, &mut text);
        text.end();
    }
    for (i, c) in contents.iter().enumerate() {
        match role(c) {
            "user" | "model" | "function" => {}
            r => {
                return Err(invalid(format!(
                    "Please use a valid role: user, model. (contents[{i}].role is `{r}`)"
                )))
            }
        }
        let parts = c.get("parts").and_then(Value::as_array).ok_or_else(|| {
            invalid(format!(
                "* GenerateContentRequest.contents[{i}].parts: contents.parts must not be empty."
            ))
        })?;
        text.message();
        parts_text(parts, &mut text);
        text.end();
    }

    // The current turn: the contents after the last user text.
    let turn_start = contents
        .iter()
        .rposition(|c| {
            role(c) == "user"
                && c["parts"]
                    .as_array()
                    .is_some_and(|p| p.iter().any(|p| p.get("text").is_some()))
        })
        .map_or(0, |i| i + 1);
    // Gemini checks the first `functionCall` part of each step (a model content)
    // of the current turn: parallel calls carry one signature, on the first call
    // ("Thought signatures": "the signature is only attached to the first
    // functionCall part").
    let mut signature = None;
    for (i, c) in contents.iter().enumerate().skip(turn_start) {
        let mut first_call = true;
        for (j, p) in c["parts"].as_array().into_iter().flatten().enumerate() {
            let Some(call) = p.get("functionCall") else {
                continue;
            };
            let s = classify(p.get("thoughtSignature").and_then(Value::as_str));
            if !std::mem::replace(&mut first_call, false) && s == Signature::Missing {
                continue;
            }
            if s == Signature::Missing {
                let name = call.get("name").and_then(Value::as_str).unwrap_or_default();
                return Err(invalid(format!(
                    "Function call is missing a thought_signature in functionCall parts. This is required for tools to work correctly, and missing thought_signature may lead to degraded model performance. Additional data, function call `default_api:{name}` , position {}. Please refer to https://ai.google.dev/gemini-api/docs/thought-signatures for more details. (contents[{i}].parts[{j}])",
                    j + 1
                )));
            }
            // The worst one seen is what the ledger reports.
            let rank = |s: Signature| match s {
                Signature::Echoed => 0,
                Signature::Skip => 1,
                Signature::Foreign => 2,
                Signature::Missing => 3,
            };
            if signature.is_none_or(|old| rank(s) > rank(old)) {
                signature = Some(s);
            }
        }
    }

    let last = contents.last().unwrap_or(&Value::Null);
    let last_parts = last["parts"].as_array().map(Vec::as_slice).unwrap_or(&[]);
    let result = last_parts
        .iter()
        .rev()
        .find_map(|p| p.get("functionResponse"))
        .map(response_text);
    let trailing = (role(last) == "model"
        && !last_parts.is_empty()
        && last_parts.iter().all(|p| p.get("text").is_some()))
    .then(|| {
        last_parts
            .iter()
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .collect::<String>()
    });
    let first_tool = obj
        .get("tools")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|t| t.get("functionDeclarations").and_then(Value::as_array))
        .flatten()
        .next();
    let no_tools = obj
        .get("toolConfig")
        .and_then(|t| t.get("functionCallingConfig"))
        .and_then(|f| f.get("mode"))
        .and_then(Value::as_str)
        == Some("NONE");
    let action = match (result, first_tool) {
        (Some(r), _) => Action::AfterResult(r),
        (None, Some(f)) if !no_tools && trailing.is_none() => Action::Call {
            name: f
                .get("name")
                .and_then(Value::as_str)
                .unwrap_or("tool")
                .to_string(),
            args: tool_args(
                f.get("parametersJsonSchema")
                    .or_else(|| f.get("parameters")),
            ),
        },
        _ => Action::Text,
    };
    let cap = match obj
        .get("generationConfig")
        .and_then(|g| g.get("maxOutputTokens"))
    {
        None | Some(Value::Null) => None,
        Some(n) => Some(n.as_u64().ok_or_else(|| {
            invalid("Invalid value at 'generation_config.max_output_tokens', expected an integer")
        })?),
    };
    let prefix = match trailing {
        Some(p) if prefill => Some((p, text.without_last())),
        _ => None,
    };
    let thinking = obj
        .get("generationConfig")
        .and_then(|g| g.get("thinkingConfig"))
        .and_then(|t| t.get("includeThoughts"))
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let mut turn = Turn {
        thinking,
        model: model.to_string(),
        stream,
        include_usage: false,
        cap,
        prefix,
        action,
        signature,
        ..Turn::default()
    };
    text.finish(&mut turn);
    Ok(turn)
}

fn finish_reason(f: Finish) -> &'static str {
    match f {
        Finish::Length => "MAX_TOKENS",
        // Gemini ends a function call with STOP too.
        Finish::Stop | Finish::Tool => "STOP",
    }
}

fn id(r: &Reply<'_>) -> String {
    format!("mock{:016x}", r.n)
}

/// `usageMetadata` with `output` candidate tokens and `thoughts` thinking tokens
/// (which `candidatesTokenCount` excludes and `totalTokenCount` includes).
fn usage(prompt: u64, output: u64, thoughts: u64) -> Value {
    let mut u = json!({
        "promptTokenCount": prompt,
        "candidatesTokenCount": output,
        "totalTokenCount": prompt + output + thoughts,
        "promptTokensDetails": [{"modality": "TEXT", "tokenCount": prompt}],
    });
    if thoughts > 0 {
        u["thoughtsTokenCount"] = json!(thoughts);
    }
    u
}

/// A response of `parts`, with `output` answer and `thoughts` thinking tokens so far.
fn response(
    r: &Reply<'_>,
    parts: Value,
    finish: Option<&str>,
    (output, thoughts): (u64, u64),
) -> Value {
    let mut candidate = json!({"content": {"parts": parts, "role": "model"}, "index": 0});
    if let Some(f) = finish {
        candidate["finishReason"] = json!(f);
    }
    json!({
        "candidates": [candidate],
        "usageMetadata": usage(r.usage.prompt_tokens, output, thoughts),
        "modelVersion": r.turn.model,
        "responseId": id(r),
    })
}

fn call_part(r: &Reply<'_>) -> Option<Value> {
    let c = r.call.as_ref()?;
    let args: Value = serde_json::from_str(&c.args).unwrap_or_else(|_| json!({}));
    Some(json!({"functionCall": {"name": c.name, "args": args}, "thoughtSignature": c.signature}))
}

/// The whole `GenerateContentResponse`.
pub(super) fn json(r: &Reply<'_>) -> Value {
    let mut parts = Vec::new();
    if !r.thinking.is_empty() {
        parts.push(json!({"text": r.thinking.concat(), "thought": true}));
    }
    parts.push(call_part(r).unwrap_or_else(|| json!({"text": r.words.concat()})));
    let counts = (r.answer_tokens(), r.thinking.len() as u64);
    let mut v = response(
        r,
        Value::Array(parts),
        Some(finish_reason(r.finish)),
        counts,
    );
    if r.call.is_some() {
        // Only whole answers carry it (recorded from Gemini).
        v["candidates"][0]["finishMessage"] = json!("Model generated function call(s).");
    }
    v
}

/// The stream's events, each a whole response with only the new parts and the usage
/// so far: thought parts first (one a token) when thinking, then one a token, the last
/// with `finishReason`; a function call comes whole in one event, then an empty text
/// part with `finishReason` (as recorded from Gemini).
pub(super) fn chunks(r: &Reply<'_>) -> Vec<Bytes> {
    let finish = finish_reason(r.finish);
    let total = r.answer_tokens();
    let thoughts = r.thinking.len() as u64;
    let mut out: Vec<Bytes> = r
        .thinking
        .iter()
        .enumerate()
        .map(|(i, w)| {
            let parts = json!([{"text": w, "thought": true}]);
            sse_data(&response(r, parts, None, (0, i as u64 + 1)))
        })
        .collect();
    let end = json!([{"text": ""}]);
    if let Some(p) = call_part(r) {
        out.push(sse_data(&response(r, json!([p]), None, (total, thoughts))));
        out.push(sse_data(&response(r, end, Some(finish), (total, thoughts))));
        return out;
    }
    if r.words.is_empty() {
        out.push(sse_data(&response(r, end, Some(finish), (0, thoughts))));
        return out;
    }
    let last = r.words.len() - 1;
    out.extend(r.words.iter().enumerate().map(|(i, w)| {
        let f = (i == last).then_some(finish);
        let counts = (i as u64 + 1, thoughts);
        sse_data(&response(r, json!([{"text": w}]), f, counts))
    }));
    out
}

/// The error event of `error_after_chunks`: a response holding only Google's error.
pub(super) fn stream_error() -> Bytes {
    sse_data(&json!({"error": {
        "code": 500,
        "message": "An internal error has occurred. Please retry or report in https://developers.generativeai.google/guide/troubleshooting",
        "status": "INTERNAL",
    }}))
}
