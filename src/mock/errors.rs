//! Injected error answers in the shape of each provider's API reference
//! ([`ErrorShape`]), and the retry delay in the header form [`RetryAfterFormat`] picks.
//!
//! Bedrock's shape is a header and a body: `x-amzn-ErrorType: <Type>:<namespace>` and
//! `{"message": ...}` (Amazon Bedrock API reference, "Common errors" and each
//! operation's "Errors"), with an `x-amzn-RequestId`.

use std::time::{Duration, SystemTime};

use http::{HeaderMap, HeaderValue, Response, StatusCode};
use serde_json::{json, Value};

use super::{ErrorShape, RetryAfterFormat};
use crate::body::{self, Body};

/// What an injected error reports.
#[derive(Debug, Clone, Copy)]
pub(super) enum Failure {
    /// A plain failure with this HTTP status (`fail_status`, or a rate-limit 429).
    Status(u16),
    /// HTTP 400: the prompt's estimated `tokens` exceed the context window `limit`.
    ContextLength {
        /// Estimated input tokens of the request.
        tokens: u64,
        /// The configured `context_window`, in tokens.
        limit: u64,
    },
}

impl Failure {
    fn status(self) -> u16 {
        match self {
            Failure::Status(s) => s,
            Failure::ContextLength { .. } => 400,
        }
    }
}

/// The error response for `failure` with a body in `shape`; no retry headers.
pub(super) fn response(shape: ErrorShape, failure: Failure) -> Response<Body> {
    let status =
        StatusCode::from_u16(failure.status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let v = body(shape, failure);
    let mut r = body::json(status, serde_json::to_vec(&v).unwrap_or_default());
    if shape == ErrorShape::Bedrock {
        set_aws_error_type(r.headers_mut(), bedrock_type(failure));
    }
    r
}

/// Namespace AWS appends to the type in `x-amzn-ErrorType` (as recorded from Bedrock).
const AWS_ERROR_NAMESPACE: &str = "http://internal.amazon.com/coral/com.amazon.bedrock/";

/// Sets `x-amzn-ErrorType: <kind>:<namespace>` and an `x-amzn-RequestId`.
pub(super) fn set_aws_error_type(h: &mut HeaderMap, kind: &str) {
    if let Ok(v) = HeaderValue::from_str(&format!("{kind}:{AWS_ERROR_NAMESPACE}")) {
        h.insert("x-amzn-errortype", v);
    }
    h.insert(
        "x-amzn-requestid",
        HeaderValue::from_static("00000000-0000-4000-8000-000000000000"),
    );
}

/// The Bedrock exception type of `failure`, after the Converse API's "Errors" list.
fn bedrock_type(failure: Failure) -> &'static str {
    match failure {
        Failure::ContextLength { .. } => "ValidationException",
        Failure::Status(s) => match s {
            401 | 403 => "AccessDeniedException",
            404 => "ResourceNotFoundException",
            408 => "ModelTimeoutException",
            424 => "ModelErrorException",
            429 => "ThrottlingException",
            400..=499 => "ValidationException",
            503 => "ServiceUnavailableException",
            _ => "InternalServerException",
        },
    }
}

/// The JSON error body a provider of `shape` sends for `failure`.
pub(super) fn body(shape: ErrorShape, failure: Failure) -> Value {
    match shape {
        ErrorShape::OpenAi => openai(failure),
        ErrorShape::Anthropic => anthropic(failure),
        ErrorShape::Gemini => gemini(failure),
        ErrorShape::Bedrock => bedrock(failure),
    }
}

/// Bedrock: `{"message"}`; the type goes in `x-amzn-ErrorType` ([`response`]).
fn bedrock(failure: Failure) -> Value {
    let message = match failure {
        Failure::ContextLength { tokens, limit } => format!(
            "Input is too long for requested model. ({tokens} tokens estimated, the context window is {limit})"
        ),
        Failure::Status(s) => match s {
            401 | 403 => "You don't have access to the model with the specified model ID.",
            404 => "The provided model identifier is invalid.",
            408 => "Model has timed out in processing the request. Try your request again.",
            424 => "The model returned an error (injected by switchyard mock).",
            429 => "Too many requests, please wait before trying again.",
            400..=499 => "Invalid request (injected by switchyard mock).",
            503 => "Bedrock is unable to process your request.",
            _ => "The server encountered an internal error while processing the request.",
        }
        .to_string(),
    };
    json!({ "message": message })
}

/// OpenAI: `{"error":{"message","type","param","code"}}`.
fn openai(failure: Failure) -> Value {
    let (message, kind, param, code) = match failure {
        Failure::ContextLength { tokens, limit } => (
            format!(
                "This model's maximum context length is {limit} tokens. However, your messages resulted in {tokens} tokens. Please reduce the length of the messages."
            ),
            "invalid_request_error",
            Some("messages"),
            Some("context_length_exceeded"),
        ),
        Failure::Status(status) => {
            let (message, kind, code) = match status {
                429 => (
                    "Rate limit reached for requests. Please try again later.",
                    "requests",
                    Some("rate_limit_exceeded"),
                ),
                401 => (
                    "Incorrect API key provided.",
                    "invalid_request_error",
                    Some("invalid_api_key"),
                ),
                404 => (
                    "The model does not exist or you do not have access to it.",
                    "invalid_request_error",
                    Some("model_not_found"),
                ),
                400..=499 => (
                    "Invalid request (injected by switchyard mock).",
                    "invalid_request_error",
                    None,
                ),
                503 => (
                    "The engine is currently overloaded, please try again later.",
                    "server_error",
                    None,
                ),
                _ => (
                    "The server had an error while processing your request. Sorry about that!",
                    "server_error",
                    None,
                ),
            };
            (message.to_string(), kind, None, code)
        }
    };
    json!({"error": {"message": message, "type": kind, "param": param, "code": code}})
}

/// Anthropic: `{"type":"error","error":{"type","message"}}`, types from its errors page.
fn anthropic(failure: Failure) -> Value {
    let (kind, message) = match failure {
        Failure::ContextLength { tokens, limit } => (
            "invalid_request_error",
            format!("prompt is too long: {tokens} tokens > {limit} maximum"),
        ),
        Failure::Status(status) => {
            let (kind, message) = match status {
                401 => ("authentication_error", "invalid x-api-key"),
                403 => (
                    "permission_error",
                    "Your API key does not have permission to use the specified resource.",
                ),
                404 => (
                    "not_found_error",
                    "The requested resource could not be found.",
                ),
                413 => (
                    "request_too_large",
                    "Request exceeds the maximum allowed number of bytes.",
                ),
                429 => (
                    "rate_limit_error",
                    "Number of requests has exceeded your rate limit.",
                ),
                400..=499 => (
                    "invalid_request_error",
                    "Invalid request (injected by switchyard mock).",
                ),
                503 | 529 => ("overloaded_error", "Overloaded"),
                _ => ("api_error", "Internal server error"),
            };
            (kind, message.to_string())
        }
    };
    json!({"type": "error", "error": {"type": kind, "message": message}})
}

/// Gemini: `{"error":{"code","message","status"}}` (`google.rpc.Status`).
fn gemini(failure: Failure) -> Value {
    let status = failure.status();
    let (rpc, message) = match failure {
        Failure::ContextLength { tokens, limit } => (
            "INVALID_ARGUMENT",
            format!(
                "The input token count ({tokens}) exceeds the maximum number of tokens allowed ({limit})."
            ),
        ),
        Failure::Status(s) => {
            let (rpc, message) = match s {
                401 => (
                    "UNAUTHENTICATED",
                    "Request had invalid authentication credentials.",
                ),
                403 => ("PERMISSION_DENIED", "The caller does not have permission."),
                404 => ("NOT_FOUND", "Requested entity was not found."),
                429 => (
                    "RESOURCE_EXHAUSTED",
                    "Resource has been exhausted (e.g. check quota).",
                ),
                400..=499 => ("INVALID_ARGUMENT", "Request contains an invalid argument."),
                503 => ("UNAVAILABLE", "The model is overloaded. Please try again later."),
                504 => ("DEADLINE_EXCEEDED", "Deadline exceeded."),
                _ => ("INTERNAL", "An internal error has occurred."),
            };
            (rpc, message.to_string())
        }
    };
    json!({"error": {"code": status, "message": message, "status": rpc}})
}

/// Sets the retry delay `delay_ms` in the header `format` names, as of `now`:
/// `Retry-After: <seconds>` (rounded up), `retry-after-ms: <ms>` (and no
/// `Retry-After`), or `Retry-After: <HTTP date>` (now + delay, rounded up to the
/// second).
pub(super) fn set_retry_after(
    h: &mut HeaderMap,
    format: RetryAfterFormat,
    delay_ms: u64,
    now: SystemTime,
) {
    match format {
        RetryAfterFormat::Seconds => {
            h.insert(
                http::header::RETRY_AFTER,
                HeaderValue::from(delay_ms.div_ceil(1000)),
            );
        }
        RetryAfterFormat::Ms => {
            h.remove(http::header::RETRY_AFTER);
            h.insert("retry-after-ms", HeaderValue::from(delay_ms));
        }
        RetryAfterFormat::Date => {
            if let Ok(v) = HeaderValue::from_str(&http_date(now, delay_ms)) {
                h.insert(http::header::RETRY_AFTER, v);
            }
        }
    }
}

/// `now + delay_ms` as an IMF-fixdate (`Sun, 06 Nov 1994 08:49:37 GMT`), rounded up to
/// the next whole second so that a client waiting until then waits at least the delay.
pub(super) fn http_date(now: SystemTime, delay_ms: u64) -> String {
    let at = now + Duration::from_millis(delay_ms);
    let sub = at
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    let at = if sub > 0 {
        at + Duration::from_nanos(u64::from(1_000_000_000 - sub))
    } else {
        at
    };
    httpdate::fmt_http_date(at)
}

/// Adds Google's quota details to a Gemini 429 body `v`: a `google.rpc.QuotaFailure`
/// and a `google.rpc.RetryInfo` whose `retryDelay` is `delay_ms` in seconds
/// (`"1.5s"`), as Gemini sends on `RESOURCE_EXHAUSTED`.
pub(super) fn add_retry_info(v: &mut Value, delay_ms: u64) {
    let secs = delay_ms as f64 / 1000.0;
    let delay = format!("{secs}s");
    v["error"]["details"] = json!([
        {
            "@type": "type.googleapis.com/google.rpc.QuotaFailure",
            "violations": [{"quotaId": "GenerateRequestsPerMinutePerProjectPerModel"}],
        },
        {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": delay},
    ]);
}
