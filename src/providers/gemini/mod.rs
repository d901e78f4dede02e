//! Google Gemini API (`generateContent`).
//!
//! Source: Gemini API reference, "Generating content" (`models.generateContent`,
//! `models.streamGenerateContent`, `GenerateContentResponse`, `FinishReason`,
//! `UsageMetadata`) and "Errors" (Google's `{"error":{"code","message","status",
//! "details"}}` body with `google.rpc.RetryInfo`).
//!
//! Requests go to `POST {base_url}/models/{model}:generateContent`, or
//! `:streamGenerateContent?alt=sse` when streaming, with the key in `x-goog-api-key`.
//! The OpenAI request is translated in `request`, the stream in `stream`.

mod request;
mod schema;
mod stream;

pub use request::SKIP_SIGNATURE;

use bytes::Bytes;
use http::HeaderMap;
use serde::Deserialize;
use serde_json::Value;

use super::common::{bad_upstream, completion, post_json, random_id, Choice};
use super::{upstream_error, Adapter, StreamContext, StreamTranscoder, Target};
use crate::api::{ChatRequest, Usage};
use crate::body::Body;
use crate::error::GatewayError;

/// The Gemini `generateContent` adapter.
#[derive(Debug, Clone, Copy, Default)]
pub struct Gemini;

/// A `GenerateContentResponse` (whole answer, or one stream event).
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct GenerateResponse {
    #[serde(default)]
    candidates: Vec<Candidate>,
    #[serde(default)]
    usage_metadata: Option<UsageMetadata>,
    #[serde(default)]
    prompt_feedback: Option<PromptFeedback>,
    #[serde(default)]
    response_id: Option<String>,
    /// The model version that answered (e.g. `gemini-2.5-flash-001`).
    #[serde(default)]
    model_version: Option<String>,
    /// Present when a stream event reports an error instead.
    #[serde(default)]
    error: Option<ErrorDetail>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Candidate {
    #[serde(default)]
    content: Option<CandidateContent>,
    #[serde(default)]
    finish_reason: Option<String>,
    #[serde(default)]
    index: Option<u32>,
}

#[derive(Deserialize)]
struct CandidateContent {
    #[serde(default)]
    parts: Vec<ResponsePart>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ResponsePart {
    #[serde(default)]
    text: Option<String>,
    /// A thought summary, not part of the answer.
    #[serde(default)]
    thought: bool,
    #[serde(default)]
    function_call: Option<FunctionCall>,
    /// Opaque signature of the model's thought context ("Thought signatures"): on a
    /// `functionCall` part it must come back unchanged when the call is replayed.
    #[serde(default)]
    thought_signature: Option<String>,
}

/// A `functionCall` part; in streams with argument streaming, a call arrives as a
/// `name` + `willContinue` part, `partialArgs` parts, and a closing part.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct FunctionCall {
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    args: Option<Value>,
    #[serde(default)]
    partial_args: Vec<PartialArg>,
    #[serde(default)]
    will_continue: bool,
}

/// One streamed argument value at a JSON path (RFC 9535, e.g. `$.location`); with no
/// value field set (`nullValue`), the value is null.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct PartialArg {
    json_path: String,
    #[serde(default)]
    string_value: Option<String>,
    #[serde(default)]
    number_value: Option<serde_json::Number>,
    #[serde(default)]
    bool_value: Option<bool>,
    /// More of this path's string follows.
    #[serde(default)]
    will_continue: bool,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct PromptFeedback {
    #[serde(default)]
    block_reason: Option<String>,
}

/// Token counts in tokens (`UsageMetadata`). `candidatesTokenCount` excludes
/// thinking, which Gemini bills as output and reports as `thoughtsTokenCount`;
/// `promptTokenCount` includes `cachedContentTokenCount`.
#[derive(Deserialize, Default, Clone, Copy)]
#[serde(rename_all = "camelCase")]
struct UsageMetadata {
    #[serde(default)]
    prompt_token_count: Option<u64>,
    #[serde(default)]
    candidates_token_count: Option<u64>,
    #[serde(default)]
    thoughts_token_count: Option<u64>,
    #[serde(default)]
    cached_content_token_count: Option<u64>,
    #[serde(default)]
    tool_use_prompt_token_count: Option<u64>,
}

impl UsageMetadata {
    /// OpenAI usage, counted as Gemini bills:
    /// - `prompt_tokens` = `promptTokenCount` + `toolUsePromptTokenCount` (both input);
    /// - `completion_tokens` = `candidatesTokenCount` + `thoughtsTokenCount` (thinking
    ///   is billed as output, and OpenAI counts reasoning inside completion tokens),
    ///   so `total_tokens` equals Gemini's `totalTokenCount`;
    /// - `completion_tokens_details.reasoning_tokens` = `thoughtsTokenCount`;
    /// - `prompt_tokens_details.cached_tokens` = `cachedContentTokenCount`.
    fn to_openai(self) -> Option<Usage> {
        let prompt = self.prompt_token_count? + self.tool_use_prompt_token_count.unwrap_or(0);
        let output =
            self.candidates_token_count.unwrap_or(0) + self.thoughts_token_count.unwrap_or(0);
        Some(
            Usage::new(prompt, output)
                .with_cached(self.cached_content_token_count)
                .with_reasoning(self.thoughts_token_count),
        )
    }
}

#[derive(Deserialize)]
struct ErrorBody {
    error: ErrorDetail,
}

#[derive(Deserialize, Default)]
struct ErrorDetail {
    /// The HTTP status, as the body repeats it (`429`); read loosely, so that a
    /// body with another `code` still parses.
    #[serde(default)]
    code: Value,
    #[serde(default)]
    message: String,
    #[serde(default)]
    status: String,
    #[serde(default)]
    details: Vec<Value>,
}

impl ErrorDetail {
    /// The details of type `google.rpc.<kind>` (`ErrorInfo`, `QuotaFailure`, ...).
    fn details_of<'a>(&'a self, kind: &'a str) -> impl Iterator<Item = &'a Value> + 'a {
        self.details.iter().filter(move |d| {
            d.get("@type")
                .and_then(Value::as_str)
                .and_then(|t| t.strip_suffix(kind))
                .is_some_and(|t| t.ends_with("google.rpc."))
        })
    }

    /// Whether a `google.rpc.ErrorInfo` detail gives `reason` (Google APIs,
    /// `google/api/error_reason.proto`).
    fn has_reason(&self, reason: &str) -> bool {
        self.details_of("ErrorInfo")
            .any(|d| d.get("reason").and_then(Value::as_str) == Some(reason))
    }

    /// Whether a `google.rpc.ErrorInfo` detail says the API key is not valid (reason
    /// `API_KEY_INVALID`, also sent for an expired key).
    fn bad_key(&self) -> bool {
        self.has_reason("API_KEY_INVALID")
    }

    /// Whether a `google.rpc.QuotaFailure` detail names a per-day quota among its
    /// violations (`quotaId` such as `GenerateRequestsPerDayPerProjectPerModel-FreeTier`):
    /// Gemini API "Rate limits": "Requests per day (RPD) quotas reset at midnight
    /// Pacific time", whatever `RetryInfo` delay comes beside it.
    fn per_day_quota(&self) -> bool {
        self.details_of("QuotaFailure").any(|d| {
            d.get("violations")
                .and_then(Value::as_array)
                .is_some_and(|v| {
                    v.iter().any(|v| {
                        v.get("quotaId")
                            .and_then(Value::as_str)
                            .is_some_and(|id| id.contains("PerDay"))
                    })
                })
        })
    }

    /// The error for an account Gemini will not serve until its billing is fixed,
    /// reported with HTTP status `http` (a stream's error object carries its own
    /// `code`), `at` ("HTTP 403", "mid-stream"); `None` for any other error:
    /// - 402 `RESOURCE_EXHAUSTED`, "Your prepay credit balance is depleted" (Gemini
    ///   API, "API errors": "Don't retry");
    /// - `google.rpc.ErrorInfo` reason `BILLING_DISABLED` (Google APIs,
    ///   `google/api/error_reason.proto`: "The request whose associated billing
    ///   account is disabled"; sent with `PERMISSION_DENIED`).
    ///
    /// Both are 429 `insufficient_quota`
    /// ([`crate::error::ErrorKind::QuotaExceeded`]): not the client's request nor a
    /// refused key, and no wait of a request fixes them.
    fn billing_error(&self, http: u16, at: &str) -> Option<GatewayError> {
        use crate::error::{bounded, Code, ErrorKind};
        let why = if self.has_reason("BILLING_DISABLED") {
            "BILLING_DISABLED"
        } else if http == 402 || self.code.as_u64() == Some(402) {
            "prepay credits depleted"
        } else {
            return None;
        };
        Some(
            GatewayError::new(
                ErrorKind::QuotaExceeded,
                format!(
                    "upstream account is out of quota ({at} {}, {why}): {}",
                    bounded(&self.status, 64),
                    bounded(&self.message, 2_000)
                ),
            )
            .with_code(Code::InsufficientQuota),
        )
    }

    /// The least wait before a `RESOURCE_EXHAUSTED` can be served again, beyond
    /// its `RetryInfo`: until midnight Pacific time when a per-day quota is
    /// exhausted ([`ErrorDetail::per_day_quota`]), else none.
    fn reset_wait(&self) -> Option<std::time::Duration> {
        self.per_day_quota()
            .then(|| until_pacific_midnight(std::time::SystemTime::now()))
            .flatten()
    }

    /// A `google.rpc.RetryInfo` detail's `retryDelay`, in whole seconds rounded up
    /// ("34.4s" → 35 s), at most [`crate::stats::ratelimit::MAX_RETRY_AFTER`].
    fn retry_delay(&self) -> Option<std::time::Duration> {
        // Cut as a `Retry-After` header is: the body's delay is the provider's
        // word too, and an absurd one must not reach the client or a retry.
        self.retry_delay_secs()
            .map(std::time::Duration::from_secs)
            .map(|d| d.min(crate::stats::ratelimit::MAX_RETRY_AFTER))
    }

    /// Seconds from a `google.rpc.RetryInfo` detail's `retryDelay` ("34.4s" → 35).
    fn retry_delay_secs(&self) -> Option<u64> {
        let delay = self
            .details_of("RetryInfo")
            .find_map(|d| d.get("retryDelay")?.as_str())?;
        let secs: f64 = delay.trim().strip_suffix('s')?.parse().ok()?;
        (secs.is_finite() && secs >= 0.0).then(|| secs.ceil() as u64)
    }
}

/// The refusal of an answer without candidates whose prompt Gemini blocked
/// (`promptFeedback.blockReason`, e.g. `SAFETY`): `message.refusal` of the whole
/// answer, `delta.refusal` of a stream.
fn blocked_refusal(reason: &str) -> String {
    let reason = crate::error::bounded(reason, 64);
    format!("the prompt was blocked by Gemini ({reason})")
}

/// Gemini `finishReason` → OpenAI `finish_reason`; a normal stop with function calls
/// is OpenAI's `tool_calls`. Every reason Gemini documents as the candidate being
/// flagged or blocked is `content_filter`, `LANGUAGE` included ("The response
/// candidate content was flagged for using an unsupported language").
fn finish_reason(reason: &str, tool_calls: bool) -> &'static str {
    match reason {
        "MAX_TOKENS" => "length",
        "SAFETY"
        | "RECITATION"
        | "LANGUAGE"
        | "BLOCKLIST"
        | "PROHIBITED_CONTENT"
        | "SPII"
        | "IMAGE_SAFETY"
        | "IMAGE_PROHIBITED_CONTENT"
        | "IMAGE_RECITATION" => "content_filter",
        _ if tool_calls => "tool_calls",
        // STOP, OTHER and reasons added later (the failures are not finishes:
        // `failed_finish`).
        _ => "stop",
    }
}

/// The failure a `finishReason` that ends a candidate without a usable answer is
/// (Gemini API reference, `FinishReason`): `MALFORMED_FUNCTION_CALL` ("The function
/// call generated by the model is invalid"), `UNEXPECTED_TOOL_CALL` (a tool call
/// with no tools enabled), `TOO_MANY_TOOL_CALLS` (too many tools called in a row, so
/// the system stopped) and `MISSING_THOUGHT_SIGNATURE`. Read as a clean `stop`, a
/// tool loop would take the broken call for the model choosing to answer without
/// one. A 502 (`upstream_bad_response`) that another endpoint may take, or, once a
/// stream has sent content, its one error event, as Bedrock's `malformed_tool_use`
/// is. `None` for every other reason.
fn failed_finish(reason: &str) -> Option<GatewayError> {
    matches!(
        reason,
        "MALFORMED_FUNCTION_CALL"
            | "UNEXPECTED_TOOL_CALL"
            | "TOO_MANY_TOOL_CALLS"
            | "MISSING_THOUGHT_SIGNATURE"
    )
    .then(|| {
        let reason = crate::error::bounded(reason, 64);
        bad_upstream(format!(
            "Gemini stopped the answer with finishReason {reason}: it holds no usable answer"
        ))
    })
}

/// The OpenAI message of one candidate.
fn choice(c: Candidate) -> Choice {
    let mut out = Choice::default();
    let append = |to: &mut Option<String>, t: String| match to {
        Some(c) => c.push_str(&t),
        None => *to = Some(t),
    };
    for p in c.content.map(|c| c.parts).unwrap_or_default() {
        if let Some(f) = p.function_call {
            let args = f.args.map_or_else(|| "{}".to_string(), |a| a.to_string());
            let id = f.id.unwrap_or_else(|| random_id("call_"));
            out.tool_calls.push((id, f.name.unwrap_or_default(), args));
            out.thought_signatures.push(p.thought_signature);
        } else if let Some(t) = p.text.filter(|t| !t.is_empty()) {
            if p.thought {
                append(&mut out.reasoning_content, t);
            } else {
                append(&mut out.content, t);
            }
        }
    }
    let reason = c.finish_reason.as_deref().unwrap_or("STOP");
    out.finish_reason = finish_reason(reason, !out.tool_calls.is_empty());
    out
}

impl Adapter for Gemini {
    fn request(
        &self,
        target: &Target<'_>,
        chat: &ChatRequest,
    ) -> Result<http::Request<Body>, GatewayError> {
        let body = request::build(chat)?;
        let model = target.model.strip_prefix("models/").unwrap_or(target.model);
        let uri = if chat.is_stream() {
            format!(
                "{}/models/{model}:streamGenerateContent?alt=sse",
                target.base_url
            )
        } else {
            format!("{}/models/{model}:generateContent", target.base_url)
        };
        post_json(
            uri,
            "x-goog-api-key",
            target.api_key,
            &[],
            chat.is_stream(),
            &body,
        )
    }

    fn response(&self, body: &[u8], logical_model: &str) -> Result<Bytes, GatewayError> {
        let r: GenerateResponse = crate::api::read_json(body).map_err(|e| {
            bad_upstream(format!(
                "Gemini sent a response that is not a GenerateContentResponse: {e}"
            ))
        })?;
        let mut candidates = r.candidates;
        if let Some(e) = candidates
            .iter()
            .find_map(|c| c.finish_reason.as_deref().and_then(failed_finish))
        {
            return Err(e);
        }
        candidates.sort_by_key(|c| c.index.unwrap_or(0));
        let choices: Vec<Choice> = if candidates.is_empty() {
            let blocked = r
                .prompt_feedback
                .and_then(|f| f.block_reason)
                .ok_or_else(|| bad_upstream("Gemini sent a response without candidates"))?;
            vec![Choice {
                refusal: Some(blocked_refusal(&blocked)),
                finish_reason: "content_filter",
                ..Choice::default()
            }]
        } else {
            candidates.into_iter().map(choice).collect()
        };
        let usage = r
            .usage_metadata
            .and_then(UsageMetadata::to_openai)
            .unwrap_or_default();
        let id = r.response_id.unwrap_or_else(|| random_id("chatcmpl-"));
        Ok(completion(&id, logical_model, &choices, usage))
    }

    fn stream(&self, ctx: StreamContext) -> Box<dyn StreamTranscoder> {
        Box::new(stream::GeminiStream::new(ctx))
    }

    /// Maps an error answer like [`upstream_error`]; a 429 without `Retry-After` takes
    /// its wait from the body's `RetryInfo.retryDelay`. A key Gemini does not take
    /// comes back as HTTP 400 `INVALID_ARGUMENT` with a `google.rpc.ErrorInfo` reason
    /// `API_KEY_INVALID` ("API key not valid. Please pass a valid API key."): that is
    /// Switchyard's configuration, not the client's request, so it is mapped as a
    /// 401 (502 `upstream_auth_failed`, tried on the next endpoint). A 400
    /// `FAILED_PRECONDITION` is the account's state, not the request (Gemini API
    /// "Troubleshooting": "Gemini API free tier is not available in your country.
    /// Please enable billing on your project in Google AI Studio."; also "User
    /// location is not supported"): 502 `upstream_error` at Switchyard's fault,
    /// tried on the next endpoint.
    ///
    /// Billing and quotas (Gemini API, "API errors" and "Rate limits"; Google APIs'
    /// `google/api/error_reason.proto`):
    /// - 402 `RESOURCE_EXHAUSTED`, "Your prepay credit balance is depleted" ("Don't
    ///   retry"): as any provider's 402 ([`upstream_error`]), 429
    ///   `insufficient_quota`, the endpoint paused.
    /// - a 4xx whose `google.rpc.ErrorInfo` reason is `BILLING_DISABLED` (its
    ///   PERMISSION_DENIED: "The request whose associated billing account is
    ///   disabled"): not refused credentials but the account's billing, the same 429
    ///   `insufficient_quota`.
    /// - 429 `RESOURCE_EXHAUSTED` ("You've exceeded one of the API rate limits (RPM,
    ///   TPM, RPD, spend, and so on)", whose solution is to wait and retry): a rate
    ///   limit, waited for by its `RetryInfo` delay; when its `google.rpc.QuotaFailure`
    ///   names a per-day quota, which resets at midnight Pacific time, at least
    ///   until then (the delay beside it can be a minute).
    fn error(&self, status: u16, headers: &HeaderMap, body: &[u8]) -> GatewayError {
        use crate::error::{bounded, Code, ErrorKind, Fault, Retry};
        let parsed = serde_json::from_slice::<ErrorBody>(body).ok();
        if let Some(e) = parsed
            .as_ref()
            .filter(|_| (400..500).contains(&status))
            .and_then(|b| b.error.billing_error(status, &format!("HTTP {status}")))
        {
            return e;
        }
        if let Some(b) = parsed
            .as_ref()
            .filter(|b| status == 400 && b.error.status == "FAILED_PRECONDITION")
        {
            return GatewayError::new(
                ErrorKind::BadUpstream,
                format!(
                    "Gemini refused the request for the state of Switchyard's account (HTTP 400 FAILED_PRECONDITION): {}",
                    bounded(&b.error.message, 500)
                ),
            )
            .with_code(Code::UpstreamError)
            .with_fault(Fault::Gateway)
            .with_retry(Retry::OtherEndpoint);
        }
        let status = match &parsed {
            Some(b) if status == 400 && b.error.bad_key() => 401,
            _ => status,
        };
        let mut e = upstream_error(status, headers, body);
        if status == 503 {
            // `UNAVAILABLE`: "The service may be temporarily overloaded or down"
            // (Gemini's troubleshooting guide; "The model is overloaded" in the
            // body): `upstream_overloaded`, as Anthropic's 529 and Bedrock's 503 are.
            e = e.with_code(Code::UpstreamOverloaded);
        }
        if let Some(b) = parsed {
            if e.kind == ErrorKind::RateLimited {
                e.retry_after = e
                    .retry_after
                    .or(b.error.retry_delay())
                    .max(b.error.reset_wait());
            } else if e.retry_after.is_none() {
                e.retry_after = b.error.retry_delay();
            }
            if !b.error.status.is_empty() && status != 401 && status != 403 {
                e.message = format!("{} ({})", e.message, b.error.status);
            }
        }
        e
    }
}

/// How long from `now` until the next midnight in Pacific time
/// (`America/Los_Angeles`), when Gemini's per-day quotas reset; `None` if the
/// time cannot be placed in that zone.
fn until_pacific_midnight(now: std::time::SystemTime) -> Option<std::time::Duration> {
    let tz = jiff::tz::TimeZone::get("America/Los_Angeles").ok()?;
    let ts = jiff::Timestamp::try_from(now).ok()?;
    let midnight = ts
        .to_zoned_datetime(tz.clone())
        .date()
        .tomorrow()
        .ok()?
        .to_zoned_datetime(tz)
        .ok()?;
    let ms = midnight.timestamp().as_millisecond() - ts.as_millisecond();
    Some(std::time::Duration::from_millis(u64::try_from(ms).ok()?))
}

#[cfg(test)]
mod tests;
