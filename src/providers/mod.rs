//! The transform layer (seed 001, "Provider Transform Layer"): one adapter per wire
//! format behind one trait.
//!
//! An adapter turns Switchyard's canonical request (OpenAI Chat Completions) into the
//! provider's HTTP request, and the provider's answer back into OpenAI's response,
//! chunk and error shapes. It does no I/O: egress sends what the adapter builds and
//! hands back what the provider sent, so adapters are tested on recorded wire data.

pub mod anthropic;
pub mod bedrock;
mod common;
pub mod gemini;
pub mod json_walk;
pub mod openai;
mod reasoning;
pub mod splice;
#[cfg(test)]
mod testing;

use bytes::{Bytes, BytesMut};
use http::HeaderMap;

use crate::api::ChatRequest;
use crate::body::Body;
use crate::config::{ProviderConfig, ProviderKind};
use crate::error::GatewayError;
use crate::sse::SseEventRef;

/// What an adapter needs to know about the endpoint it builds a request for.
#[derive(Debug, Clone)]
pub struct Target<'a> {
    /// Provider base URL without a trailing slash.
    pub base_url: &'a str,
    /// Upstream model id (Azure: the deployment).
    pub model: &'a str,
    /// The API key, if the provider has one.
    pub api_key: Option<&'a str>,
}

/// One provider wire format.
pub trait Adapter: Send + Sync + std::fmt::Debug {
    /// Builds the upstream request for `chat`, sent to `target`.
    ///
    /// # Errors
    /// HTTP 400 when the request uses something this provider cannot express.
    fn request(
        &self,
        target: &Target<'_>,
        chat: &ChatRequest,
    ) -> Result<http::Request<Body>, GatewayError>;

    /// Converts a successful (2xx) non-streaming body into OpenAI's response JSON,
    /// reporting `logical_model` as the model.
    ///
    /// # Errors
    /// HTTP 502 when the body is not what the provider should send.
    fn response(&self, body: &[u8], logical_model: &str) -> Result<Bytes, GatewayError>;

    /// A transcoder for one streamed response.
    fn stream(&self, ctx: StreamContext) -> Box<dyn StreamTranscoder>;

    /// Converts a non-2xx upstream answer into the error the client sees.
    fn error(&self, status: u16, headers: &HeaderMap, body: &[u8]) -> GatewayError {
        upstream_error(status, headers, body)
    }
}

/// What a stream transcoder needs to know about the request.
#[derive(Debug, Clone)]
pub struct StreamContext {
    /// The logical model to report in every chunk.
    pub logical_model: String,
    /// The client asked for the final usage chunk (`stream_options.include_usage`).
    pub include_usage: bool,
    /// Estimated input tokens, used when the provider reports no usage.
    pub prompt_tokens_estimate: u64,
    /// Keep the text sent so far ([`StreamTranscoder::sent`]): the stream may have to
    /// be continued elsewhere if it fails.
    pub track: bool,
    /// This stream continues one that failed after reaching the client.
    pub resume: Option<Resume>,
}

/// Most assistant text kept per stream for a continuation, in bytes (256 KiB, about
/// 64 000 tokens); a longer answer that breaks ends with an error event.
pub const MAX_TRACKED_BYTES: usize = 256 * 1024;

/// What a stream has sent the client so far: the chunk identity, and (when the
/// transcoder tracks it) the assistant text, so that a failed stream can be continued
/// on another endpoint (seed 000, mid-stream failover with prefill).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Sent {
    /// The chunk `id` the client saw.
    pub id: String,
    /// The chunk `created` the client saw, Unix seconds.
    pub created: u64,
    /// The assistant text sent, concatenated (only with [`StreamContext::track`]).
    pub text: String,
    /// Content pieces sent (text or tool-call deltas); about one token each on
    /// servers that stream token by token.
    pub pieces: u64,
    /// A tool-call piece was sent: a continuation could break its JSON arguments.
    pub tool_calls: bool,
    /// Reasoning was sent (`reasoning_content` or `thinking_blocks`): a continuation
    /// would restart or lose it, so the stream is not continued.
    pub reasoning: bool,
    /// The transcoder wrote the finish reason: the answer itself is complete, unless
    /// a restart wrote it while [`Sent::unmatched`] was above zero (the relay drops
    /// what a restart writes before it has repeated the text already sent, its
    /// finish chunk included).
    pub finished: bool,
    /// The provider ended the stream without a finish reason and the gateway wrote
    /// `stop` for it (the client reads a finished answer). Such a stream is not
    /// stored in the cache: nothing says the provider's answer was complete.
    pub finish_supplied: bool,
    /// The text outgrew [`MAX_TRACKED_BYTES`], or content that is not text was sent
    /// (a list of parts), and the text is no longer kept: the stream can no longer
    /// be continued elsewhere.
    pub untracked: bool,
    /// Bytes of a restart's [`Resume::skip`] not yet matched: a restart that
    /// finishes with some left did not repeat the text already sent.
    pub unmatched: usize,
    /// The usage the provider reported in the stream, if it did (what the gateway
    /// settles rate limits and spend with, instead of an estimate).
    pub usage: Option<crate::api::Usage>,
    /// The finish reason sent to the client (OpenAI's words: `stop`, `length`,
    /// `tool_calls`, ...), once sent; for the attempt's trace span
    /// (`gen_ai.response.finish_reasons`). With `n` > 1, the last one sent.
    pub finish_reason: Option<String>,
    /// The model the provider said generated the stream (OpenAI's chunk `model`,
    /// Anthropic's `message_start` `message.model`, Gemini's `modelVersion`), for
    /// `gen_ai.response.model`; `None` when the provider does not say.
    pub model: Option<String>,
}

/// How a stream continues another one that failed after its commit point.
///
/// The continuation writes chunks with the failed stream's `id` and `created`, never
/// repeats the `role` chunk, and drops the start of its answer that the client
/// already has (`skip`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resume {
    /// What the failed stream (and any continuation before this one) sent.
    pub sent: Sent,
    /// Text the new answer begins with that the client already has: dropped.
    pub skip: String,
    /// The new answer must begin with `skip` exactly (a restart from scratch): if it
    /// does not, the stream fails ([`crate::error::Code::UpstreamStreamDiverged`]).
    /// When false (whitespace trimmed off a prefill), a matching start is dropped
    /// and anything else passes.
    pub exact: bool,
}

/// What a transcoder saw in an event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StreamStep {
    /// Keep reading.
    Continue,
    /// The provider's stream is complete; `[DONE]` has been written.
    Done,
}

/// Turns one provider's stream events into OpenAI SSE bytes.
pub trait StreamTranscoder: Send {
    /// Handles one event (a view into the relay's read buffer or a built event:
    /// [`crate::sse::SseParser::next_ref`]), appending zero or more complete SSE
    /// events to `out`.
    ///
    /// # Errors
    /// HTTP 502 when the event is malformed or reports an error.
    fn event(
        &mut self,
        event: SseEventRef<'_>,
        out: &mut BytesMut,
    ) -> Result<StreamStep, GatewayError>;

    /// Called when the upstream body ends without a `Done` step. Returns `Ok` (after
    /// writing `[DONE]`) when what arrived was a complete answer (a finish reason was
    /// seen), or the error to report.
    ///
    /// # Errors
    /// HTTP 502: the upstream closed the stream before finishing the answer.
    fn end(&mut self, out: &mut BytesMut) -> Result<(), GatewayError>;

    /// Handles raw body bytes, for a provider whose stream is not SSE (Bedrock's
    /// binary event stream): `None` (the default) when the transcoder reads SSE, and
    /// the relay parses the body and calls [`StreamTranscoder::event`]; otherwise what
    /// `event` would return for the complete events in `data` (split events wait for
    /// their remaining bytes).
    fn raw(
        &mut self,
        _data: &[u8],
        _out: &mut BytesMut,
    ) -> Option<Result<StreamStep, GatewayError>> {
        None
    }

    /// Whether any content (text or tool call) has arrived yet; the first one marks
    /// the time to first token and the stream's commit point.
    fn produced_content(&self) -> bool;

    /// What has been sent so far (see [`Sent`]).
    fn sent(&self) -> &Sent;
}

/// The adapter for a provider, reading what it needs at startup (Bedrock: region
/// and AWS credentials) through `env`.
///
/// # Errors
/// A sentence naming the provider when its adapter cannot be set up (Bedrock without
/// a region or credentials).
pub fn adapter_for(
    cfg: &ProviderConfig,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Box<dyn Adapter>, String> {
    Ok(match cfg.kind {
        ProviderKind::OpenAi | ProviderKind::OpenAiCompatible | ProviderKind::Mock => {
            Box::new(openai::OpenAi::standard().with_stream_usage(cfg.stream_usage))
        }
        ProviderKind::AzureOpenAi => Box::new(
            openai::OpenAi::azure(
                cfg.api_version
                    .clone()
                    .unwrap_or_else(|| "2024-10-21".to_string()),
            )
            .with_stream_usage(cfg.stream_usage),
        ),
        ProviderKind::Anthropic => Box::new(anthropic::Anthropic),
        ProviderKind::Gemini => Box::new(gemini::Gemini),
        ProviderKind::Bedrock => Box::new(bedrock::Bedrock::from_config(cfg, env)?),
    })
}

/// Maps an upstream error answer to the client-facing error (shared by adapters).
///
/// - 400, 413, 422 and every other 4xx not named below: the client's request is at
///   fault. The provider's message, `code`
///   and `param` pass through unchanged (so OpenAI's `context_length_exceeded`
///   reaches the client as OpenAI sent it); a prompt over the context window (OpenAI's
///   code, Anthropic's "prompt is too long", Gemini's "input token count ... exceeds")
///   is [`crate::error::ErrorKind::ContextWindowExceeded`]. Never retried.
/// - 429: the provider's rate limit, with its wait (`retry-after-ms`, `Retry-After`
///   seconds or HTTP-date); retried here after that wait, or elsewhere. Except a 429
///   whose error `type` or `code` is `insufficient_quota` (OpenAI API reference,
///   "Error codes": "You exceeded your current quota, please check your plan and
///   billing details"): our account is out of quota, which no wait of a request
///   fixes; [`crate::error::ErrorKind::QuotaExceeded`], tried on the next endpoint only, and the
///   provider's message kept for the client. Anthropic's 429 is always
///   `rate_limit_error` and Gemini's is
///   `RESOURCE_EXHAUSTED` with a `RetryInfo` delay even for "You exceeded your
///   current quota" (a per-minute or per-day quota that refills): both stay rate
///   limits.
/// - A 4xx whose message says "credit balance is too low" (any case): Anthropic's
///   answer when our account is out of credit, though it sends it as HTTP 400
///   `invalid_request_error` ("Your credit balance is too low to access the
///   Anthropic API. Please go to Plans & Billing to upgrade or purchase credits.").
///   Not the client's request: [`crate::error::ErrorKind::QuotaExceeded`], as below.
/// - 402 Payment Required: our account with the provider is out of credit
///   (DeepSeek API, "Error Codes": "402 - Insufficient Balance: You have run out of
///   balance"; OpenRouter's "402: Your account or API key has insufficient
///   credits"): the same as a 429 `insufficient_quota`, [`crate::error::ErrorKind::QuotaExceeded`]
///   with the provider's message, which the client reads in OpenAI's 429
///   `insufficient_quota` (OpenAI's API has no 402, and it is not the client who
///   must pay).
/// - 401/403: the provider refused our credentials, 404: it does not know the
///   configured model id. Both are our configuration, not the client's request:
///   502, tried on the next endpoint only (this one can only fail the same way).
/// - 408 and 5xx: 502, retried here or elsewhere. The body is never relayed: it can
///   hold anything (one provider's held a Python traceback). The client reads
///   "upstream answered HTTP {status}", plus the provider's `error.message` only when
///   the body is a JSON error object, cut to [`MAX_5XX_MESSAGE`] bytes, on one line,
///   and only when it does not look like a stack trace. The egress layer adds the
///   provider's name.
pub fn upstream_error(status: u16, headers: &HeaderMap, body: &[u8]) -> GatewayError {
    use crate::error::{bounded, Code, ErrorKind, Fault, Retry, MAX_PASSTHROUGH};
    let parsed = serde_json::from_slice::<serde_json::Value>(body).ok();
    let error = parsed.as_ref().and_then(|v| v.get("error"));
    let field = |name: &str| {
        error
            .and_then(|e| e.get(name))
            .and_then(|c| c.as_str())
            .filter(|c| !c.is_empty())
    };
    let detail = error
        .and_then(|e| {
            e.get("message")
                .and_then(|m| m.as_str())
                .or_else(|| e.as_str())
        })
        .map(|m| bounded(m, 2_000).into_owned())
        .unwrap_or_else(|| {
            let text = String::from_utf8_lossy(&body[..body.len().min(200)]);
            text.trim().to_string()
        });
    let retry_after = crate::stats::ratelimit::retry_after(headers, std::time::SystemTime::now());
    let lower = detail.to_ascii_lowercase();
    match status {
        400..=499
            if !matches!(status, 401 | 402 | 403 | 404 | 408 | 429)
                && lower.contains("credit balance is too low") =>
        {
            GatewayError::new(
                ErrorKind::QuotaExceeded,
                format!("upstream account is out of credit (HTTP {status}): {detail}"),
            )
            .with_code(Code::InsufficientQuota)
        }
        400..=499 if !matches!(status, 401 | 402 | 403 | 404 | 408 | 429) => {
            let code = field("code").map(Code::provider);
            let too_long = code == Some(Code::ContextLengthExceeded) || context_overflow(&lower);
            let kind = if too_long {
                ErrorKind::ContextWindowExceeded
            } else {
                ErrorKind::InvalidRequest
            };
            let mut e = GatewayError::new(kind, format!("upstream rejected the request: {detail}"))
                .with_code(code.unwrap_or(if too_long {
                    Code::ContextLengthExceeded
                } else {
                    Code::UpstreamInvalidRequest
                }));
            if let Some(p) = field("param") {
                e = e.with_param(bounded(p, MAX_PASSTHROUGH));
            }
            // The provider's status as it sent it (409 Conflict, 413 Content Too
            // Large, 422 Unprocessable Content: the client's SDK maps each to its
            // own error), but a context overflow is OpenAI's 400 whoever said it.
            if !too_long {
                e = e.with_status(status);
            }
            e
        }
        429 if field("type") == Some("insufficient_quota")
            || field("code") == Some("insufficient_quota") =>
        {
            GatewayError::new(
                ErrorKind::QuotaExceeded,
                format!("upstream account is out of quota: {detail}"),
            )
            .with_code(Code::InsufficientQuota)
        }
        429 => GatewayError::new(ErrorKind::RateLimited, format!("upstream rate limit: {detail}"))
            .with_code(Code::UpstreamRateLimited)
            .with_retry_after(retry_after),
        401 | 403 => GatewayError::new(
            ErrorKind::BadUpstream,
            format!("upstream refused Switchyard's credentials (HTTP {status}); check the provider's api_key_env"),
        )
        .with_code(Code::UpstreamAuthFailed)
        .with_fault(Fault::Gateway)
        .with_retry(Retry::OtherEndpoint),
        402 => GatewayError::new(
            ErrorKind::QuotaExceeded,
            format!("upstream account is out of credit (HTTP 402 Payment Required): {detail}"),
        )
        .with_code(Code::InsufficientQuota),
        404 => GatewayError::new(
            ErrorKind::BadUpstream,
            format!("upstream does not know the configured model (HTTP 404): {detail}"),
        )
        .with_code(Code::UpstreamModelNotFound)
        .with_fault(Fault::Gateway)
        .with_retry(Retry::OtherEndpoint),
        _ => GatewayError::new(ErrorKind::BadUpstream, {
            let safe = error
                .and_then(|e| e.get("message"))
                .and_then(|m| m.as_str())
                .and_then(safe_message);
            match safe {
                Some(m) => format!("upstream answered HTTP {status}: {m}"),
                None => format!("upstream answered HTTP {status}"),
            }
        })
        .with_code(Code::UpstreamError)
        .with_retry_after(retry_after),
    }
}

/// Whether a provider's 4xx message (lowercased) says the prompt, with the output
/// asked for, does not fit the model's context window: OpenAI's and Llama's
/// "maximum context length", Anthropic's "prompt is too long" and, when `max_tokens`
/// is what overflows, "input length and `max_tokens` exceed context limit" (as
/// Claude answers directly and through Bedrock), Gemini's "input token count ...
/// exceeds" (Bedrock adds its own "too long" and "context window"). Such an error moves
/// on to an endpoint with a larger window (`context_length_exceeded`).
pub(crate) fn context_overflow(lower: &str) -> bool {
    lower.contains("prompt is too long")
        || (lower.contains("input token count") && lower.contains("exceeds"))
        || lower.contains("maximum context length")
        || lower.contains("exceed context limit")
        || lower.contains("exceeds context limit")
        || lower.contains("exceeds the context window")
}

/// The `error.message` of a JSON error body (`{"error": {"message": ...}}`, or
/// `{"error": "..."}`), fit to show the client as a 5xx body's is (one line, at most
/// [`MAX_5XX_MESSAGE`] bytes, never a stack trace); `None` when the body is not one.
pub(crate) fn json_error_message(body: &[u8]) -> Option<String> {
    let v: serde_json::Value = serde_json::from_slice(body).ok()?;
    let e = v.get("error")?;
    let m = e
        .get("message")
        .and_then(|m| m.as_str())
        .or_else(|| e.as_str())?;
    safe_message(m)
}

/// Longest upstream `error.message` of a 5xx answer shown to the client, in bytes.
pub const MAX_5XX_MESSAGE: usize = 200;

/// `message` fit to show the client from a 5xx body: one line of at most
/// [`MAX_5XX_MESSAGE`] bytes with control characters removed; `None` when it is
/// empty or looks like a stack trace or file path dump.
fn safe_message(message: &str) -> Option<String> {
    let lower = message.to_ascii_lowercase();
    let trace = [
        "traceback",
        "stack trace",
        "exception in",
        "  file \"",
        ".py\", line",
        "\n    at ",
        "panicked at",
    ];
    if trace.iter().any(|t| lower.contains(t)) {
        return None;
    }
    let line: String = message
        .split(['\n', '\r'])
        .next()
        .unwrap_or("")
        .chars()
        .filter(|c| !c.is_control())
        .collect();
    let line = line.trim();
    if line.is_empty() {
        return None;
    }
    Some(crate::error::bounded(line, MAX_5XX_MESSAGE).into_owned())
}

#[cfg(test)]
mod error_tests {
    use super::*;

    #[test]
    fn an_upstream_5xx_body_is_never_relayed_verbatim() {
        let h = HeaderMap::new();
        let trace = b"Traceback (most recent call last):\n  File \"/srv/app.py\", line 12, in handler\nKeyError: 'OPENAI_KEY=sk-live-123'";
        let e = upstream_error(500, &h, trace);
        assert_eq!(e.message, "upstream answered HTTP 500");
        assert_eq!(e.status(), 502);
        let json =
            br#"{"error":{"message":"Traceback (most recent call last):\n  File \"x.py\""}}"#;
        assert_eq!(
            upstream_error(503, &h, json).message,
            "upstream answered HTTP 503"
        );
        let json =
            br#"{"error":{"message":"The server is overloaded.\nline two","type":"server_error"}}"#;
        assert_eq!(
            upstream_error(503, &h, json).message,
            "upstream answered HTTP 503: The server is overloaded."
        );
        let long = format!(r#"{{"error":{{"message":"{}"}}}}"#, "x".repeat(5000));
        assert!(upstream_error(500, &h, long.as_bytes()).message.len() < MAX_5XX_MESSAGE + 40);
    }

    /// DeepSeek API, "Error Codes": "402 - Insufficient Balance. Cause: You have run
    /// out of balance." The gateway's account, not the client's request: it was a 400
    /// blaming the request, never tried on another endpoint. It is an exhausted
    /// quota, as OpenAI's 429 `insufficient_quota` is.
    #[test]
    fn a_402_payment_required_is_the_gateways_account_not_the_clients_request() {
        let body = br#"{"error":{"message":"Insufficient Balance","type":"unknown_error","param":null,"code":"invalid_request_error"}}"#;
        let e = upstream_error(402, &HeaderMap::new(), body);
        assert_eq!(e.kind, crate::error::ErrorKind::QuotaExceeded);
        assert_eq!(e.status(), 429, "{}", e.message);
        assert_eq!(e.to_json()["error"]["code"], "insufficient_quota");
        assert_eq!(e.fault, crate::error::Fault::Gateway);
        assert!(e.retry.other_endpoint() && !e.retry.same_endpoint());
        assert!(e.message.contains("Insufficient Balance"), "{}", e.message);
    }

    /// Found by the conformance review: OpenAI's 429 `insufficient_quota` was a
    /// rate limit, retried on the same endpoint although no wait fixes an account
    /// out of quota, and the client read `upstream_rate_limited`.
    #[test]
    fn an_insufficient_quota_429_was_treated_as_a_transient_rate_limit() {
        let body = br#"{"error":{"message":"You exceeded your current quota, please check your plan and billing details.","type":"insufficient_quota","param":null,"code":"insufficient_quota"}}"#;
        let e = upstream_error(429, &HeaderMap::new(), body);
        assert_eq!(e.kind, crate::error::ErrorKind::QuotaExceeded);
        assert_eq!(e.status(), 429);
        assert!(e.retry.other_endpoint() && !e.retry.same_endpoint());
        let v = e.to_json();
        assert_eq!(v["error"]["type"], "insufficient_quota");
        assert_eq!(v["error"]["code"], "insufficient_quota");
        assert!(
            e.message.contains("You exceeded your current quota"),
            "{}",
            e.message
        );
        // Gemini's quota 429 (recorded) names a refilling quota: still a rate limit.
        let gemini =
            include_bytes!("../../tests/fixtures/provider-wire/gemini/google-429-retry-info.json");
        let e = upstream_error(429, &HeaderMap::new(), gemini);
        assert_eq!(e.kind, crate::error::ErrorKind::RateLimited);
        let plain = br#"{"error":{"message":"Rate limit reached","type":"requests","code":"rate_limit_exceeded"}}"#;
        let e = upstream_error(429, &HeaderMap::new(), plain);
        assert_eq!(e.kind, crate::error::ErrorKind::RateLimited);
    }

    #[test]
    fn a_json_error_body_gives_its_message_fit_to_show() {
        let m = |b: &str| json_error_message(b.as_bytes());
        assert_eq!(
            m(r#"{"error":{"message":"quota\nsecond line","type":"x"}}"#).as_deref(),
            Some("quota")
        );
        assert_eq!(
            m(r#"{"error":"overloaded"}"#).as_deref(),
            Some("overloaded")
        );
        assert_eq!(
            m(r#"{"error":{"message":"Traceback (most recent call last)"}}"#),
            None
        );
        assert_eq!(m(r#"{"id":"c","choices":[]}"#), None);
        assert_eq!(m("<html>502</html>"), None);
    }

    /// Found by the translation attack of 2026-12-07: Anthropic's 400 for a prompt
    /// that fits but not with its `max_tokens` ("input length and `max_tokens`
    /// exceed context limit") was an ordinary invalid request, so the request did
    /// not move on to an endpoint with a larger context window.
    #[test]
    fn input_plus_max_tokens_over_the_window_is_a_context_overflow() {
        let body = br#"{"type":"error","error":{"type":"invalid_request_error","message":"input length and `max_tokens` exceed context limit: 196395 + 64000 > 204698, decrease input length or `max_tokens` and try again"}}"#;
        let e = upstream_error(400, &HeaderMap::new(), body);
        assert_eq!(e.kind, crate::error::ErrorKind::ContextWindowExceeded);
        assert_eq!(e.to_json()["error"]["code"], "context_length_exceeded");
        let other = br#"{"type":"error","error":{"type":"invalid_request_error","message":"temperature: range: 0..1"}}"#;
        assert_eq!(
            upstream_error(400, &HeaderMap::new(), other).kind,
            crate::error::ErrorKind::InvalidRequest
        );
    }

    #[test]
    fn a_client_error_keeps_the_providers_code_and_param() {
        let body = br#"{"error":{"message":"This model's maximum context length is 8192 tokens.","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}"#;
        let e = upstream_error(400, &HeaderMap::new(), body);
        assert_eq!(e.status(), 400);
        let v = e.to_json();
        assert_eq!(v["error"]["code"], "context_length_exceeded");
        assert_eq!(v["error"]["param"], "messages");
    }
}
