//! A provider emulator: the OpenAI, Anthropic Messages, Gemini and Bedrock Converse
//! wire formats, JSON and SSE (Bedrock: its binary event stream), with token timing,
//! tool calls, injected failures and rate-limit headers.
//!
//! It serves two purposes with one code path: `switchyard mock` runs it as an HTTP
//! server ([`server`]) for testing gateways and applications, and the `kind: mock`
//! provider is an egress [`Transport`] in process ([`InProcess`], OpenAI format), so
//! the embedded default config answers without any network. Both produce the same
//! `http::Response` from the same request bytes.
//!
//! Each format's module ([`openai`], [`anthropic`], [`gemini`], [`bedrock`]) parses its request
//! into a [`Turn`] and renders the planned answer back; planning, faults, pacing and
//! rate limits are shared here.
//!
//! Responses are deterministic for a given seed and request: the text is drawn from a
//! fixed word list by a hash of the seed and the prompt, one word per token. A trailing
//! assistant message is an answer prefix to continue ([`prefill`]). Tools: a request
//! that offers tools and holds no tool result yet is answered with a call of the
//! first tool, or the one an OpenAI `tool_choice` names ([`turn::tool_args`]); one
//! whose last message is a tool result is answered with text quoting it
//! ([`result_words`]). OpenAI only: `n` choices, `logprobs` when asked, JSON text
//! for a `response_format` of `json_object` or `json_schema`, and text cut before a
//! `stop` sequence.
//!
//! Faults for resilience tests: random (`fail_rate`) or leading (`fail_first`) failures,
//! rate-limit 429s, a context window, each with an error body in the shape of OpenAI,
//! Anthropic, Gemini or Bedrock and a retry delay in seconds, ms or an HTTP date
//! (`errors`);
//! and streams that are cut, stall, or end in an error event.

pub mod anthropic;
pub mod bedrock;
mod errors;
pub mod gemini;
mod ledger;
pub mod openai;
pub mod prefill;
pub mod server;
pub mod turn;

pub use crate::config::{ErrorShape, MockOptions, RetryAfterFormat};
pub use turn::{Action, Signature, Turn};

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http::{Response, StatusCode};
use http_body::Frame;
use http_body_util::{BodyExt, StreamBody};

use crate::api::{ChatRequest, Usage};
use crate::body::{self, Body, BoxError};
use crate::egress::{SendFuture, Transport};
use crate::error::{ErrorKind, GatewayError};
use errors::Failure;

/// The wire formats the emulator speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wire {
    /// OpenAI Chat Completions (`POST /v1/chat/completions`).
    OpenAi,
    /// Anthropic Messages (`POST /v1/messages`).
    Anthropic,
    /// Gemini `generateContent` / `streamGenerateContent?alt=sse`.
    Gemini,
    /// Bedrock Converse (`POST /model/{modelId}/converse`, `/converse-stream`).
    Bedrock,
}

impl Wire {
    /// Its name on the command line (`--format`).
    pub fn as_str(self) -> &'static str {
        match self {
            Wire::OpenAi => "openai",
            Wire::Anthropic => "anthropic",
            Wire::Gemini => "gemini",
            Wire::Bedrock => "bedrock",
        }
    }

    /// The error body shape its provider uses.
    pub fn error_shape(self) -> ErrorShape {
        match self {
            Wire::OpenAi => ErrorShape::OpenAi,
            Wire::Anthropic => ErrorShape::Anthropic,
            Wire::Gemini => ErrorShape::Gemini,
            Wire::Bedrock => ErrorShape::Bedrock,
        }
    }
}

/// How an answer ends, named by each format in its own way.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Finish {
    /// The answer is complete.
    Stop,
    /// The output cap cut it.
    Length,
    /// It is a tool call.
    Tool,
}

/// A planned tool call.
#[derive(Debug, Clone)]
struct Call {
    /// Its id (`call_…` or `toolu_…`; Gemini sends none).
    id: String,
    name: String,
    /// The arguments as JSON text (a custom tool's input text).
    args: String,
    /// OpenAI's custom tool call (`type: "custom"`, `custom.input`), not a function.
    custom: bool,
    /// Gemini's `thoughtSignature` for it.
    signature: String,
}

/// Everything a format needs to render an answer.
struct Reply<'a> {
    /// The request number (ids are derived from it).
    n: u64,
    /// Unix time in seconds.
    created: u64,
    turn: &'a Turn,
    /// Text tokens (empty for a tool call).
    words: Vec<String>,
    /// Thinking tokens, before the answer (empty unless the request asked to think).
    thinking: Vec<String>,
    call: Option<Call>,
    finish: Finish,
    /// `completion_tokens` counts thinking too, as Anthropic's `output_tokens` does.
    usage: Usage,
    /// The configured latency plus the generation time at the configured pace, ms
    /// (Bedrock reports it as `metrics.latencyMs`).
    latency_ms: u64,
}

impl Reply<'_> {
    /// Output tokens of the answer proper, thinking excluded.
    fn answer_tokens(&self) -> u64 {
        (self.usage.completion_tokens - self.thinking.len() as u64) / u64::from(self.turn.choices())
    }
}

/// Length of the thinking that precedes an answer when a request asks for it, tokens.
pub const THINKING_TOKENS: usize = 8;

/// Output tokens of a tool call: its name and argument text at 4 characters a token.
fn call_tokens(c: &Call) -> u64 {
    ((c.name.len() + c.args.len()) as u64).div_ceil(4).max(1)
}

/// Most words of a tool result quoted in the answer.
const RESULT_WORDS: usize = 64;

/// The answer after a tool result: `The tool returned: <result>`, one word a token,
/// quoting at most the result's first 64 words.
pub fn result_words(result: &str) -> Vec<String> {
    let mut out: Vec<String> = ["The", " tool", " returned:"].map(String::from).into();
    out.extend(
        result
            .split_whitespace()
            .take(RESULT_WORDS)
            .map(|w| format!(" {w}")),
    );
    out
}

const WORDS: [&str; 32] = [
    "the", "gateway", "routes", "each", "request", "to", "a", "healthy", "endpoint", "and",
    "streams", "tokens", "back", "as", "they", "arrive", "while", "policies", "decide", "which",
    "provider", "serves", "it", "with", "low", "latency", "fair", "cost", "high", "quality",
    "today", "again",
];

/// Rate-limit window length (OpenAI limits are per minute).
const WINDOW: Duration = Duration::from_secs(60);

/// The emulator: options plus the counters that failure injection and rate limits read.
#[derive(Debug)]
pub struct MockProvider {
    opts: MockOptions,
    /// Unix time in seconds when the emulator was made ([`MockProvider::started`]).
    started: u64,
    requests: AtomicU64,
    window: Mutex<Window>,
    ledger: ledger::Ledger,
}

#[derive(Debug)]
struct Window {
    start: Instant,
    requests: u64,
    tokens: u64,
}

/// The emulator as an egress transport (`kind: mock` providers): the built request's
/// body is read and answered in process, as `switchyard mock` would answer it over
/// HTTP.
#[derive(Debug)]
pub struct InProcess {
    provider: MockProvider,
}

impl InProcess {
    /// An in-process emulator with `opts`.
    pub fn new(opts: MockOptions) -> InProcess {
        InProcess {
            provider: MockProvider::new(opts),
        }
    }
}

impl Transport for InProcess {
    fn send(&self, req: http::Request<Body>) -> SendFuture<'_> {
        Box::pin(async move {
            if !req.uri().path().ends_with("/chat/completions") {
                let e = GatewayError::new(
                    ErrorKind::NotFound,
                    format!("the mock provider has no {}", req.uri().path()),
                );
                return Ok(e.to_response());
            }
            let bytes = match req.into_body().collect().await {
                Ok(c) => c.to_bytes(),
                Err(e) => {
                    return Err(GatewayError::new(
                        ErrorKind::Internal,
                        format!("could not read the request for the mock provider: {e}"),
                    ))
                }
            };
            match ChatRequest::parse(&bytes) {
                Ok(chat) => Ok(self.provider.chat(&chat).await),
                Err(e) => Ok(e.to_response()),
            }
        })
    }
}

/// Error cutting a stream on purpose (`cut_after_chunks`).
#[derive(Debug, thiserror::Error)]
#[error("mock provider cut the connection after {0} chunks")]
pub struct CutStream(pub u32);

impl MockProvider {
    /// A new emulator with `opts`.
    pub fn new(opts: MockOptions) -> Self {
        MockProvider {
            opts,
            started: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_secs()),
            requests: AtomicU64::new(0),
            window: Mutex::new(Window {
                start: Instant::now(),
                requests: 0,
                tokens: 0,
            }),
            ledger: ledger::Ledger::default(),
        }
    }

    /// The options in force.
    pub fn options(&self) -> &MockOptions {
        &self.opts
    }

    /// When the emulator was made, in Unix seconds: the `created` of the model it
    /// lists (`GET /v1/models`; OpenAI API reference, "The model object": "The Unix
    /// timestamp (in seconds) when the model was created"), the same on every call.
    pub fn started(&self) -> u64 {
        self.started
    }

    /// Answers a chat completion request as an OpenAI server would: JSON, or SSE when
    /// `stream` is true, after the configured latency; or an injected failure; or a
    /// 400 for what it cannot emulate ([`openai::refused`]: audio output).
    pub async fn chat(&self, req: &ChatRequest) -> Response<Body> {
        if let Some(refused) = openai::refused(req) {
            return refused;
        }
        self.respond(Wire::OpenAi, &Turn::from_openai(req, self.opts.prefill))
            .await
    }

    /// Answers `turn` in `wire`'s format: JSON, or SSE when the turn streams, after
    /// the configured latency; or an injected failure in the `error_shape`.
    ///
    /// Faults are checked in this order, after `latency_ms`: the context window (400,
    /// not counted against rate limits), the rate-limit window (429), then `fail_first`
    /// and `fail_rate` (`fail_status`). Every request counts towards `fail_first`.
    pub async fn respond(&self, wire: Wire, turn: &Turn) -> Response<Body> {
        let n = self.requests.fetch_add(1, Ordering::Relaxed);
        let prompt_tokens = turn.prompt_tokens;
        let (words, call, answer_tokens, finish) = self.plan(wire, n, turn);
        let thinking = if turn.thinking {
            generate(
                self.opts.seed ^ 0x0074_6869_6e6b,
                &turn.prompt,
                THINKING_TOKENS,
            )
        } else {
            Vec::new()
        };
        // Every choice is the same answer, and OpenAI counts the tokens of all of them.
        let completion_tokens = answer_tokens * u64::from(turn.choices()) + thinking.len() as u64;
        let too_long = self.opts.context_window.filter(|&w| prompt_tokens > w);
        let limits = if too_long.is_some() {
            Ok(Limits::default())
        } else {
            self.admit(wire, prompt_tokens + completion_tokens)
        };

        if self.opts.latency_ms > 0 {
            tokio::time::sleep(Duration::from_millis(self.opts.latency_ms)).await;
        }
        if let Some(limit) = too_long {
            let failure = Failure::ContextLength {
                tokens: prompt_tokens,
                limit,
            };
            self.ledger.record(n, wire, turn, 400, None, call.as_ref());
            return errors::response(self.opts.error_shape, failure);
        }
        if let Err(resp) = limits {
            self.ledger.record(n, wire, turn, 429, None, call.as_ref());
            return *resp;
        }
        let limits = limits.unwrap_or_default();
        let injected = n < self.opts.fail_first
            || (self.opts.fail_rate > 0.0 && unit_hash(self.opts.seed, n) < self.opts.fail_rate);
        if injected {
            let mut resp = self.error_response(self.opts.fail_status, None);
            add_headers(wire, &mut resp, &limits);
            let status = self.opts.fail_status;
            self.ledger
                .record(n, wire, turn, status, None, call.as_ref());
            return resp;
        }

        let usage = Usage::new(prompt_tokens, completion_tokens);
        self.ledger.record(
            n,
            wire,
            turn,
            200,
            Some((usage, thinking.len())),
            call.as_ref(),
        );
        let reply = Reply {
            n,
            created: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map(|d| d.as_secs())
                .unwrap_or_default(),
            turn,
            words,
            thinking,
            call,
            finish,
            usage,
            latency_ms: self.opts.latency_ms
                + if self.opts.tokens_per_s > 0.0 {
                    (completion_tokens as f64 * 1000.0 / self.opts.tokens_per_s) as u64
                } else {
                    0
                },
        };
        let mut resp = if turn.stream {
            let (chunks, error) = match wire {
                Wire::OpenAi => (openai::chunks(&reply), openai::stream_error()),
                Wire::Anthropic => (anthropic::chunks(&reply), anthropic::stream_error()),
                Wire::Gemini => (gemini::chunks(&reply), gemini::stream_error()),
                Wire::Bedrock => (bedrock::chunks(&reply), bedrock::stream_error()),
            };
            let mut r = self.stream_response(chunks, error);
            if wire == Wire::Bedrock {
                r.headers_mut().insert(
                    http::header::CONTENT_TYPE,
                    http::HeaderValue::from_static(bedrock::EVENT_STREAM),
                );
            }
            r
        } else {
            if self.opts.tokens_per_s > 0.0 {
                let gen = completion_tokens as f64 / self.opts.tokens_per_s;
                tokio::time::sleep(Duration::from_secs_f64(gen)).await;
            }
            let body = match wire {
                Wire::OpenAi => openai::json(&reply),
                Wire::Anthropic => anthropic::json(&reply),
                Wire::Gemini => gemini::json(&reply),
                Wire::Bedrock => bedrock::json(&reply),
            };
            body::json(
                StatusCode::OK,
                serde_json::to_vec(&body).unwrap_or_default(),
            )
        };
        add_headers(wire, &mut resp, &limits);
        resp
    }

    /// The answer: its text tokens or its tool call, its output tokens and how it
    /// ends. Text is `completion_tokens` long, or the cap when that is lower (then
    /// `Length`); the quote of a tool result is as long as it is, cut at the cap; a
    /// tool call is not capped (see [`call_tokens`]).
    fn plan(&self, wire: Wire, n: u64, turn: &Turn) -> (Vec<String>, Option<Call>, u64, Finish) {
        let capped = |natural: u64| match turn.cap {
            Some(cap) if cap < natural => (cap, Finish::Length),
            _ => (natural, Finish::Stop),
        };
        match &turn.action {
            Action::Call { name, args } => {
                let call = Call {
                    id: match wire {
                        Wire::Anthropic => format!("toolu_mock{n:016x}"),
                        Wire::Bedrock => format!("tooluse_mock{n:016x}"),
                        _ => format!("call_mock{n:016x}"),
                    },
                    name: name.clone(),
                    args: args.to_string(),
                    custom: false,
                    signature: gemini::signature(n),
                };
                let tokens = call_tokens(&call);
                (Vec::new(), Some(call), tokens, Finish::Tool)
            }
            Action::Custom { name, input } => {
                let call = Call {
                    id: format!("call_mock{n:016x}"),
                    name: name.clone(),
                    args: input.clone(),
                    custom: true,
                    signature: String::new(),
                };
                let tokens = call_tokens(&call);
                (Vec::new(), Some(call), tokens, Finish::Tool)
            }
            Action::AfterResult(result) => {
                let mut words = result_words(result);
                let (tokens, finish) = capped(words.len() as u64);
                words.truncate(tokens as usize);
                (words, None, tokens, finish)
            }
            Action::Text => {
                let (tokens, finish) = capped(u64::from(self.opts.completion_tokens));
                let words = self.answer(turn, tokens as usize);
                match cut_at_stop(&words, &turn.stop) {
                    Some(kept) => {
                        let tokens = kept.len() as u64;
                        (kept, None, tokens, Finish::Stop)
                    }
                    None => (words, None, tokens, finish),
                }
            }
            Action::Json(schema) => {
                let value = match schema {
                    Some(schema) => turn::tool_args(Some(schema)),
                    None => {
                        let words = self.answer(turn, self.opts.completion_tokens as usize);
                        serde_json::json!({"answer": words.concat()})
                    }
                };
                // The JSON text in tokens of at most 4 bytes (as a tool call's
                // arguments are counted), cut at the cap like any text.
                let mut words: Vec<String> = openai::pieces_of(&value.to_string(), 4)
                    .into_iter()
                    .map(str::to_string)
                    .collect();
                let (tokens, finish) = capped(words.len() as u64);
                words.truncate(tokens as usize);
                (words, None, tokens, finish)
            }
        }
    }

    /// The tokens to send: `len` words drawn from the seed and prompt; in continuation
    /// mode (see [`prefill`]) drawn from the prompt without the trailing assistant
    /// message, and only those after its prefix when the answer starts with it.
    fn answer(&self, turn: &Turn, len: usize) -> Vec<String> {
        let Some((p, base)) = turn.prefix.as_ref().filter(|_| self.opts.prefill) else {
            return generate(self.opts.seed, &turn.prompt, len);
        };
        let full = generate(self.opts.seed, base, len);
        prefill::continuation(&full, p).unwrap_or(full)
    }

    /// The recent requests this emulator answered, oldest first (`GET /mock/requests`).
    pub fn ledger(&self) -> serde_json::Value {
        self.ledger.to_json()
    }

    /// A stream of `chunks`, paced and with the stream faults applied; `error` is the
    /// format's in-stream error event (`error_after_chunks`).
    fn stream_response(&self, mut chunks: Vec<Bytes>, error: Bytes) -> Response<Body> {
        if let Some(k) = self.opts.error_after_chunks.map(|k| k as usize) {
            if k < chunks.len() {
                chunks.truncate(k);
                chunks.push(error);
            }
        }

        let interval = if self.opts.tokens_per_s > 0.0 {
            Some(Duration::from_secs_f64(1.0 / self.opts.tokens_per_s))
        } else {
            None
        };
        let state = StreamState {
            chunks,
            next: 0,
            interval,
            cut_after: self.opts.cut_after_chunks,
            stall_after: self.opts.stall_after_chunks,
            stall: Duration::from_millis(self.opts.stall_ms),
        };
        let stream = futures_util::stream::unfold(state, |mut s| async move {
            if s.next >= s.chunks.len() {
                return None;
            }
            let sent = s.next as u32;
            if s.cut_after == Some(sent) {
                s.next = s.chunks.len();
                let err: BoxError = Box::new(CutStream(sent));
                return Some((Err(err), s));
            }
            if s.stall_after == Some(sent) {
                tokio::time::sleep(s.stall).await;
            }
            // Token pacing applies between content chunks, not before the first one.
            if let (Some(iv), true) = (s.interval, s.next > 0) {
                tokio::time::sleep(iv).await;
            }
            let bytes = s.chunks[s.next].clone();
            s.next += 1;
            Some((Ok(Frame::data(bytes)), s))
        });
        body::event_stream(StreamBody::new(stream).boxed_unsync().into())
    }

    /// Counts the request against the rate-limit window; `Err` is the 429 to send.
    fn admit(&self, wire: Wire, tokens: u64) -> Result<Limits, Box<Response<Body>>> {
        if self.opts.ratelimit_requests.is_none() && self.opts.ratelimit_tokens.is_none() {
            return Ok(Limits::default());
        }
        let mut w = self.window.lock().unwrap_or_else(|p| p.into_inner());
        let now = Instant::now();
        if now.duration_since(w.start) >= WINDOW {
            w.start = now;
            w.requests = 0;
            w.tokens = 0;
        }
        let reset = WINDOW.saturating_sub(now.duration_since(w.start));
        let req_over = self
            .opts
            .ratelimit_requests
            .is_some_and(|l| w.requests >= l);
        let tok_over = self
            .opts
            .ratelimit_tokens
            .is_some_and(|l| w.tokens + tokens > l);
        if !req_over && !tok_over {
            w.requests += 1;
            w.tokens += tokens;
        }
        let limits = Limits {
            requests: self
                .opts
                .ratelimit_requests
                .map(|l| (l, l.saturating_sub(w.requests))),
            tokens: self
                .opts
                .ratelimit_tokens
                .map(|l| (l, l.saturating_sub(w.tokens))),
            reset,
        };
        drop(w);
        if req_over || tok_over {
            // Bedrock's ThrottlingException carries no delay of its own.
            let default_delay = (wire != Wire::Bedrock).then_some(reset);
            let mut resp = self.error_response(429, default_delay);
            add_headers(wire, &mut resp, &limits);
            return Err(Box::new(resp));
        }
        Ok(limits)
    }

    /// An injected failure with `status`: a body in `error_shape`, and the retry
    /// delay (`retry_after_s` / `retry_after_ms`, else `default_delay`) in
    /// `retry_after_format`'s header. A Gemini-shaped 429 also carries the delay in
    /// the body, as Google's `google.rpc.RetryInfo` detail.
    fn error_response(&self, status: u16, default_delay: Option<Duration>) -> Response<Body> {
        let delay = self
            .opts
            .retry_after()
            .or_else(|| default_delay.map(|d| (d.as_millis() as u64).max(1)));
        let failure = Failure::Status(status);
        let mut r = match (self.opts.error_shape, status, delay) {
            (ErrorShape::Gemini, 429, Some(ms)) => {
                let mut v = errors::body(ErrorShape::Gemini, failure);
                errors::add_retry_info(&mut v, ms);
                body::json(
                    StatusCode::TOO_MANY_REQUESTS,
                    serde_json::to_vec(&v).unwrap_or_default(),
                )
            }
            _ => errors::response(self.opts.error_shape, failure),
        };
        if let Some(ms) = delay {
            errors::set_retry_after(
                r.headers_mut(),
                self.opts.retry_after_format,
                ms,
                SystemTime::now(),
            );
        }
        r
    }
}

struct StreamState {
    chunks: Vec<Bytes>,
    next: usize,
    interval: Option<Duration>,
    cut_after: Option<u32>,
    stall_after: Option<u32>,
    stall: Duration,
}

/// Rate-limit state to report: (limit, remaining) pairs and time to window reset.
#[derive(Debug, Default, Clone, Copy)]
struct Limits {
    requests: Option<(u64, u64)>,
    tokens: Option<(u64, u64)>,
    reset: Duration,
}

/// The rate-limit headers of `wire`: OpenAI's `x-ratelimit-*`, Anthropic's
/// `anthropic-ratelimit-*`; Gemini and Bedrock send none (their quotas show only in
/// 429 answers: `RESOURCE_EXHAUSTED`, `ThrottlingException`).
fn add_headers(wire: Wire, resp: &mut Response<Body>, limits: &Limits) {
    match wire {
        Wire::OpenAi => openai::limit_headers(resp.headers_mut(), limits),
        Wire::Anthropic => anthropic::limit_headers(resp.headers_mut(), limits, SystemTime::now()),
        Wire::Gemini | Wire::Bedrock => {}
    }
}

/// Formats a reset delay the way OpenAI does in `x-ratelimit-reset-*`: `6m0s`, `1.5s`,
/// `20ms`.
pub fn format_reset(d: Duration) -> String {
    let ms = d.as_millis() as u64;
    if ms < 1000 {
        format!("{ms}ms")
    } else if ms < 60_000 {
        let s = ms as f64 / 1000.0;
        let text = format!("{s:.3}");
        let text = text.trim_end_matches('0').trim_end_matches('.');
        format!("{text}s")
    } else {
        format!("{}m{}s", ms / 60_000, (ms % 60_000) / 1000)
    }
}

/// One SSE event: `data: <json>` and a blank line.
pub(crate) fn sse_data(v: &serde_json::Value) -> Bytes {
    let mut out = Vec::with_capacity(256);
    out.extend_from_slice(b"data: ");
    // Serializing a Value cannot fail.
    let _ = serde_json::to_writer(&mut out, v);
    out.extend_from_slice(b"\n\n");
    Bytes::from(out)
}

/// FNV-1a 64 over `bytes`, continuing from `h`.
fn fnv1a(mut h: u64, bytes: &[u8]) -> u64 {
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// SplitMix64 finalizer: a well-mixed 64-bit value from `x`.
fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// A number in [0, 1) from the seed and request number: the failure draw.
fn unit_hash(seed: u64, n: u64) -> f64 {
    (mix(seed ^ mix(n)) >> 11) as f64 / (1u64 << 53) as f64
}

/// `words` cut before the first place their text holds one of the `stop` sequences
/// (OpenAI's `stop`: the sequence itself is not returned, and the answer finishes
/// with `stop`); a token the cut falls inside keeps its part before it. `None` when
/// no sequence occurs.
fn cut_at_stop(words: &[String], stop: &[String]) -> Option<Vec<String>> {
    let text = words.concat();
    let at = stop.iter().filter_map(|s| text.find(s.as_str())).min()?;
    let mut kept = Vec::new();
    let mut start = 0;
    for w in words {
        if start + w.len() <= at {
            kept.push(w.clone());
        } else {
            if start < at {
                kept.push(w[..at - start].to_string());
            }
            break;
        }
        start += w.len();
    }
    Some(kept)
}

/// The reply's tokens: `n` words chosen by hashing the seed and prompt, each but the
/// first with a leading space, like a BPE tokenizer's output.
pub fn generate(seed: u64, prompt: &str, n: usize) -> Vec<String> {
    let mut h = fnv1a(0xcbf2_9ce4_8422_2325 ^ seed, prompt.as_bytes());
    (0..n)
        .map(|i| {
            h = mix(h);
            let w = WORDS[(h % WORDS.len() as u64) as usize];
            if i == 0 {
                let mut s = w.to_string();
                if let Some(f) = s.get_mut(0..1) {
                    f.make_ascii_uppercase();
                }
                s
            } else if i + 1 == n {
                format!(" {w}.")
            } else {
                format!(" {w}")
            }
        })
        .collect()
}

#[cfg(test)]
mod bedrock_tests;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod wire_tests;
