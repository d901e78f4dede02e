//! Behaviour knobs of the provider emulator (the `mock` module), shared by
//! `switchyard mock` flags and the `mock:` block of a `kind: mock` provider in
//! `switchyard.yaml`. They live in config so that config depends on nothing above it.

use serde::Deserialize;

/// How the emulator behaves. Every field has a default, so `{}` is a fast, healthy
/// provider.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct MockOptions {
    /// Delay before the response headers, in ms (time to first byte).
    pub latency_ms: u64,
    /// Token generation speed in tokens per second; 0 means no delay between tokens.
    pub tokens_per_s: f64,
    /// Probability in [0, 1] that a request fails with `fail_status`.
    pub fail_rate: f64,
    /// HTTP status of injected failures (default 500).
    pub fail_status: u16,
    /// `Retry-After` seconds sent with injected failures and rate-limit 429s.
    pub retry_after_s: Option<u64>,
    /// Cut the connection after this many stream chunks (no `[DONE]`, no terminal
    /// chunk): a provider dying mid-stream.
    pub cut_after_chunks: Option<u32>,
    /// Stall (send nothing) after this many stream chunks, for `stall_ms`.
    pub stall_after_chunks: Option<u32>,
    /// Length of the stall, in ms (default 60 000).
    pub stall_ms: u64,
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
            fail_status: 500,
            retry_after_s: None,
            cut_after_chunks: None,
            stall_after_chunks: None,
            stall_ms: 60_000,
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
        let opts: MockOptions = serde_yaml::from_value(value.clone()).map_err(|e| e.to_string())?;
        opts.validate()?;
        Ok(opts)
    }

    /// Checks value ranges.
    ///
    /// # Errors
    /// A sentence naming the bad value.
    pub fn validate(&self) -> Result<(), String> {
        if !(0.0..=1.0).contains(&self.fail_rate) {
            return Err(format!(
                "fail_rate {} must be between 0 and 1",
                self.fail_rate
            ));
        }
        if !(self.tokens_per_s >= 0.0 && self.tokens_per_s.is_finite()) {
            return Err(format!(
                "tokens_per_s {} must be 0 or more",
                self.tokens_per_s
            ));
        }
        if !(400..=599).contains(&self.fail_status) {
            return Err(format!(
                "fail_status {} must be an HTTP error status (400-599)",
                self.fail_status
            ));
        }
        if self.completion_tokens == 0 {
            return Err("completion_tokens must be at least 1".into());
        }
        Ok(())
    }
}
