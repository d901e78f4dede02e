//! Behaviour knobs of the provider emulator (the `mock` module), shared by
//! `switchyard mock` flags and the `mock:` block of a `kind: mock` provider in
//! `switchyard.yaml`. They live in config so that config depends on nothing above it.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer};

/// How the emulator behaves. Every field has a default, so `{}` is a fast, healthy
/// provider.
///
/// Stream chunk counts (`cut_after_chunks`, `stall_after_chunks`,
/// `error_after_chunks`) all count SSE events from 0 the same way: event 0 is the
/// `role: assistant` chunk, events 1 to n the content tokens, then the finish chunk,
/// the usage chunk (when asked for) and `[DONE]`. `N` means "after N events were sent,
/// before event N", so `N = 1` acts after the role chunk and before any content.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct MockOptions {
    /// Delay before the response headers, in ms (time to first byte).
    pub latency_ms: u64,
    /// Token generation speed in tokens per second; 0 means no delay between tokens.
    pub tokens_per_s: f64,
    /// Probability in [0, 1] that a request fails with `fail_status`.
    pub fail_rate: f64,
    /// The first this-many requests (counted per emulator instance, from its start)
    /// fail with `fail_status`; later ones succeed unless `fail_rate` fails them.
    pub fail_first: u64,
    /// HTTP status of injected failures (default 500).
    pub fail_status: u16,
    /// Retry delay, in seconds, sent with injected failures and rate-limit 429s (in
    /// the header `retry_after_format` picks). Exclusive with `retry_after_ms`.
    pub retry_after_s: Option<u64>,
    /// Retry delay, in milliseconds, sent like `retry_after_s`. Exclusive with it.
    pub retry_after_ms: Option<u64>,
    /// How the retry delay is sent (default `seconds`): see [`RetryAfterFormat`].
    pub retry_after_format: RetryAfterFormat,
    /// Cut the connection after this many stream chunks (no `[DONE]`, no terminal
    /// chunk): a provider dying mid-stream.
    pub cut_after_chunks: Option<u32>,
    /// Stall (send nothing) after this many stream chunks, for `stall_ms`.
    pub stall_after_chunks: Option<u32>,
    /// Length of the stall, in ms (default 60 000).
    pub stall_ms: u64,
    /// After this many stream chunks, send one OpenAI error event
    /// (`data: {"error":{...,"type":"server_error"}}`) and end the body cleanly,
    /// without `[DONE]`. Streams only.
    pub error_after_chunks: Option<u32>,
    /// Context window in tokens: a request whose estimated input tokens exceed it is
    /// answered HTTP 400 with the provider's context-length error (shape from
    /// `error_shape`). None: no limit.
    pub context_window: Option<u64>,
    /// Which provider's JSON shape every injected error body takes (default `openai`).
    pub error_shape: ErrorShape,
    /// Continuation mode (default true): a request whose last message is an assistant
    /// message with string content P gets the answer to the conversation without that
    /// message, minus P when the answer starts with P (`usage.completion_tokens` still
    /// counts the whole answer). False: a trailing assistant message is prompt like
    /// any other.
    pub prefill: bool,
    /// Requests allowed per 60 s window; sends OpenAI's `x-ratelimit-*-requests`
    /// headers and answers 429 once spent.
    pub ratelimit_requests: Option<u64>,
    /// Tokens (prompt estimate + completion) allowed per 60 s window; sends
    /// `x-ratelimit-*-tokens` headers and answers 429 once spent.
    pub ratelimit_tokens: Option<u64>,
    /// Seed for failure injection and generated text; equal seeds give equal runs.
    pub seed: u64,
    /// Completion length in tokens when the request sets no `max_tokens` (default 16).
    pub completion_tokens: u32,
}

impl Default for MockOptions {
    fn default() -> Self {
        MockOptions {
            latency_ms: 0,
            tokens_per_s: 0.0,
            fail_rate: 0.0,
            fail_first: 0,
            fail_status: 500,
            retry_after_s: None,
            retry_after_ms: None,
            retry_after_format: RetryAfterFormat::Seconds,
            cut_after_chunks: None,
            stall_after_chunks: None,
            stall_ms: 60_000,
            error_after_chunks: None,
            context_window: None,
            error_shape: ErrorShape::OpenAi,
            prefill: true,
            ratelimit_requests: None,
            ratelimit_tokens: None,
            seed: 0,
            completion_tokens: 16,
        }
    }
}

impl MockOptions {
    /// Reads options from a YAML mapping (the `mock:` block of a provider).
    ///
    /// # Errors
    /// A sentence naming the bad key or value.
    pub fn from_yaml(value: &serde_yaml::Value) -> Result<MockOptions, String> {
        let opts: MockOptions = serde_yaml::from_value(value.clone())
            .map_err(|e| crate::suggest::unknown_field_hint(e.to_string()))?;
        opts.validate()?;
        Ok(opts)
    }

    /// The retry delay in ms, from `retry_after_s` or `retry_after_ms`.
    pub fn retry_after(&self) -> Option<u64> {
        self.retry_after_ms
            .or_else(|| self.retry_after_s.map(|s| s.saturating_mul(1000)))
    }

    /// Checks value ranges and combinations.
    ///
    /// # Errors
    /// Every problem found, as sentences naming the option, joined by `; `.
    pub fn validate(&self) -> Result<(), String> {
        let mut errors: Vec<String> = Vec::new();
        if !(0.0..=1.0).contains(&self.fail_rate) {
            errors.push(format!(
                "fail_rate {} must be between 0 and 1",
                self.fail_rate
            ));
        }
        if !(self.tokens_per_s >= 0.0 && self.tokens_per_s.is_finite()) {
            errors.push(format!(
                "tokens_per_s {} must be 0 or more",
                self.tokens_per_s
            ));
        }
        if !(400..=599).contains(&self.fail_status) {
            errors.push(format!(
                "fail_status {} must be an HTTP error status (400-599)",
                self.fail_status
            ));
        }
        if self.completion_tokens == 0 {
            errors.push("completion_tokens must be at least 1".into());
        }
        if self.retry_after_s.is_some() && self.retry_after_ms.is_some() {
            errors.push(
                "retry_after_s and retry_after_ms both set the retry delay; set only one".into(),
            );
        }
        if self.context_window == Some(0) {
            errors.push("context_window must be at least 1 token".into());
        }
        if errors.is_empty() {
            Ok(())
        } else {
            Err(errors.join("; "))
        }
    }
}

/// How the emulator sends its retry delay.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RetryAfterFormat {
    /// `Retry-After: <seconds>`, rounded up to a whole second.
    #[default]
    Seconds,
    /// `retry-after-ms: <milliseconds>` (read by OpenAI's SDKs), and no `Retry-After`.
    Ms,
    /// `Retry-After: <HTTP date>` (IMF-fixdate, RFC 9110 §5.6.7) of now plus the delay,
    /// rounded up to a whole second.
    Date,
}

/// The JSON shape of injected error bodies, after each provider's API reference.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ErrorShape {
    /// `{"error":{"message","type","param","code"}}`.
    #[default]
    OpenAi,
    /// `{"type":"error","error":{"type","message"}}`.
    Anthropic,
    /// `{"error":{"code","message","status"}}` (Google's `google.rpc.Status`).
    Gemini,
    /// `{"message"}` with the error type in the `x-amzn-ErrorType` header (AWS).
    Bedrock,
}

impl FromStr for RetryAfterFormat {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "seconds" => Ok(RetryAfterFormat::Seconds),
            "ms" => Ok(RetryAfterFormat::Ms),
            "date" => Ok(RetryAfterFormat::Date),
            _ => Err(format!(
                "retry_after_format `{s}` is not one of seconds, ms, date"
            )),
        }
    }
}

impl fmt::Display for RetryAfterFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            RetryAfterFormat::Seconds => "seconds",
            RetryAfterFormat::Ms => "ms",
            RetryAfterFormat::Date => "date",
        })
    }
}

impl FromStr for ErrorShape {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "openai" => Ok(ErrorShape::OpenAi),
            "anthropic" => Ok(ErrorShape::Anthropic),
            "gemini" => Ok(ErrorShape::Gemini),
            "bedrock" => Ok(ErrorShape::Bedrock),
            _ => Err(format!(
                "error_shape `{s}` is not one of openai, anthropic, gemini, bedrock"
            )),
        }
    }
}

impl fmt::Display for ErrorShape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ErrorShape::OpenAi => "openai",
            ErrorShape::Anthropic => "anthropic",
            ErrorShape::Gemini => "gemini",
            ErrorShape::Bedrock => "bedrock",
        })
    }
}

/// Deserializes a string through `FromStr`, so the error names the option.
fn via_from_str<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: FromStr<Err = String>,
{
    let s = String::deserialize(d)?;
    s.parse().map_err(serde::de::Error::custom)
}

impl<'de> Deserialize<'de> for RetryAfterFormat {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        via_from_str(d)
    }
}

impl<'de> Deserialize<'de> for ErrorShape {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        via_from_str(d)
    }
}
