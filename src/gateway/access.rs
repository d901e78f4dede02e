//! The access line: exactly one structured log line per chat request, written when
//! its response body ends (the last byte sent, the stream's end, or the client gone).
//!
//! The line is one `tracing` event at `info` with target `switchyard::access`, so
//! `--log-format json` makes it one JSON object and `--log` filters it like any other
//! (`--log warn,switchyard::access=info` keeps only it and warnings). Its facts are
//! the ones the phases already recorded in the [`RequestCtx`] ([`Facts`] takes them
//! when the response is ready); the usage is the one the respond phase read for the
//! rate-limit settlement (a whole answer) or the stream relay kept (a stream), never
//! parsed again. The event is formatted once, by the subscriber, and after the answer:
//! the metrics, the recent-requests ring and the OTel span are settled when the
//! request ends, the line itself from a task that runs once the connection task has
//! written the answer's last bytes (`crate::server::drop_later`).
//!
//! Who writes it:
//! - a whole answer, an error, a cache hit: ingress's response body wrapper, from the
//!   [`Facts`] [`super::Gateway::chat`] hands it, when the body ends or is dropped;
//! - a stream from a provider: its body (`super::stream`), when it ends.
//!
//! The same moment records the per-request metrics that need the whole request:
//! tokens, cost, attempts, retries and fallbacks ([`super::log::RequestLog::finished`]).
//!
//! With `telemetry.access_log.bodies` on, the line also carries the bodies
//! ([`LoggedBodies`]): the request as read, the start of the response as sent, and a
//! stream's assistant text, each cut to `max_body_bytes` with its whole size beside
//! it. Off (the default), nothing is kept.

use std::sync::Arc;
use std::time::{Duration, Instant};

use http::HeaderValue;
use smallvec::SmallVec;

use super::cache::CacheStatus;
use super::ctx::RequestCtx;
use super::Gateway;
use crate::api::Usage;
use crate::error::GatewayError;
use crate::policy::ast::PriorityLevel;
use crate::policy::names::Name;
use crate::routing::policy::PolicySnapshot;

/// The access line's `api`: the inbound API of the request.
pub const CHAT_API: &str = "openai.chat_completions";

/// One upstream attempt, as the access line lists it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Try {
    /// Endpoint index (the registry's).
    pub ep: u32,
    /// Its HTTP status: the provider's, or for a failure without one (no answer,
    /// a timeout, a broken stream) the gateway's status for it (502, 504, ...); 200
    /// for the attempt that served.
    pub status: u16,
    /// Milliseconds from sending it to its end (a stream: to its last byte).
    pub ms: u32,
}

impl Try {
    /// Attempt on endpoint `ep` that ended with `status` after `took`.
    pub fn new(ep: usize, status: u16, took: Duration) -> Try {
        Try {
            ep: ep as u32,
            status,
            ms: took.as_millis().min(u128::from(u32::MAX)) as u32,
        }
    }
}

impl Try {
    /// Attempt on endpoint `ep` that failed with `e` after `took`.
    pub fn failed(ep: usize, e: &GatewayError, took: Duration) -> Try {
        Try::new(ep, e.upstream_status.unwrap_or(e.status()), took)
    }
}

/// Every attempt of one request, in order (inline up to four: no allocation).
pub type Tried = SmallVec<[Try; 4]>;

/// How a request ended, for its access line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum End {
    /// The whole answer or the complete stream was sent (`outcome` `ok`).
    Ok,
    /// The request ended with an error (its kind, `GatewayError::metric_kind`).
    Error(&'static str),
    /// A stream that began with 200 ended with an error event.
    StreamError,
    /// The client went away before the end of the body.
    ClientGone,
}

impl End {
    fn outcome(self) -> &'static str {
        match self {
            End::Ok => "ok",
            End::Error(_) => "error",
            End::StreamError => "stream_error",
            End::ClientGone => "client_gone",
        }
    }
}

/// What the access line of one request says, taken from its [`RequestCtx`].
///
/// Made and handed on boxed ([`Facts::take`]): at 448 bytes, it was copied whole at
/// each of its moves from the respond phase to the deferred line (returned up to
/// ingress, into the body's guard, into [`Facts::emit`], into the line, into the
/// thread's deferred list), about 1,000 instructions of `memcpy` per request
/// (`benches/load/callgrind.sh`), for the one allocation a box costs.
#[derive(Debug)]
pub struct Facts {
    /// The request id (`x-request-id`).
    pub id: HeaderValue,
    /// When the request's headers arrived.
    pub started: Instant,
    /// The caller's key id.
    pub key: Option<Arc<str>>,
    /// The caller's organization.
    pub org: Option<Arc<str>>,
    /// The logical model asked for (empty: the body was not parsed).
    pub model: String,
    /// The policy set the request ran on.
    pub snapshot: Arc<PolicySnapshot>,
    /// The route and rule that decided.
    pub route: Option<Name>,
    /// The rule.
    pub rule: Option<Name>,
    /// The strategy of the decision (`Some(None)`: built-in `priority`).
    pub strategy: Option<Option<u32>>,
    /// The request's final priority (after the policy's `set priority`).
    pub priority: PriorityLevel,
    /// Time its attempts waited in endpoint queues (`None`: none waited).
    pub queue_wait: Option<Duration>,
    /// Time it was held for the off-peak window (`None`: not held).
    pub held: Option<Duration>,
    /// Whether the client asked for a stream.
    pub stream: bool,
    /// What the cache phase did.
    pub cache: Option<CacheStatus>,
    /// Every attempt.
    pub tried: Tried,
    /// The endpoint that served (or the last one tried).
    pub endpoint: Option<usize>,
    /// Whether `endpoint` served the answer.
    pub served: bool,
    /// The final HTTP status of the response head.
    pub status: u16,
    /// Time to the first content of a stream.
    pub ttft: Option<Duration>,
    /// The served answer's usage (the provider's, or the gateway's estimate for a
    /// stream that reported none).
    pub usage: Option<Usage>,
    /// The serving provider's id of its answer.
    pub upstream_id: Option<HeaderValue>,
    /// The error the request ended with (its kind), for a response made from one.
    pub error: Option<&'static str>,
    /// The request's server span, ended with the access line.
    pub trace: crate::otel::RequestTrace,
    /// The bodies for the line (`None`: `telemetry.access_log.bodies` is off).
    pub bodies: Option<Box<LoggedBodies>>,
}

/// The bodies of one request for its access line (`telemetry.access_log.bodies`).
#[derive(Debug, Default)]
pub struct LoggedBodies {
    /// The request body as read (shared with the request path: no copy).
    pub request: bytes::Bytes,
    /// The first bytes of the response body as sent to the client, up to the
    /// configured bound.
    pub response: Vec<u8>,
    /// Bytes of the response body sent in all.
    pub response_len: u64,
    /// A stream's assistant text as the client received it (`None`: not a stream,
    /// or its text outgrew what the gateway keeps, 256 KiB).
    pub text: Option<String>,
}

impl LoggedBodies {
    /// Notes a piece of the response body sent to the client, keeping the first
    /// `max` bytes.
    pub fn sent(&mut self, data: &[u8], max: usize) {
        self.response_len += data.len() as u64;
        let room = max.saturating_sub(self.response.len());
        self.response
            .extend_from_slice(&data[..room.min(data.len())]);
    }
}

/// The first `max` bytes of `bytes` as text, cut at a character boundary; bytes that
/// are not UTF-8 become U+FFFD.
fn cut(bytes: &[u8], max: usize) -> std::borrow::Cow<'_, str> {
    let mut end = max.min(bytes.len());
    if let Err(e) = std::str::from_utf8(&bytes[..end]) {
        // A cut inside a character: end before it (an error further in is real
        // invalid UTF-8, shown as U+FFFD below).
        if e.error_len().is_none() {
            end = e.valid_up_to();
        }
    }
    String::from_utf8_lossy(&bytes[..end])
}

impl Facts {
    /// Takes the facts out of `ctx` (the strings move; `ctx` is spent), for a
    /// response with `status`.
    pub fn take(ctx: &mut RequestCtx, status: u16) -> Box<Facts> {
        Box::new(Facts {
            id: ctx.id.clone(),
            started: ctx.started,
            key: ctx.caller.api_key.take(),
            org: ctx.caller.org.take(),
            model: std::mem::take(&mut ctx.model),
            snapshot: ctx.snapshot.clone(),
            route: ctx.route.take(),
            rule: ctx.rule.take(),
            strategy: ctx.strategy,
            priority: ctx.priority,
            queue_wait: (!ctx.queued.is_zero()).then_some(ctx.queued),
            held: ctx.held,
            stream: ctx.stream,
            cache: ctx.cache,
            tried: std::mem::take(&mut ctx.tried),
            endpoint: ctx.endpoint,
            served: ctx.served,
            status,
            ttft: None,
            usage: ctx.usage.take(),
            upstream_id: ctx.upstream_id.take(),
            error: None,
            trace: std::mem::take(&mut ctx.trace),
            bodies: ctx.request_body.take().map(|request| {
                Box::new(LoggedBodies {
                    request,
                    ..LoggedBodies::default()
                })
            }),
        })
    }

    /// The facts of request `id` (arrived at `started` with `headers`) that ended
    /// with `e` before the gateway's phases ran (ingress could not read its body:
    /// 413, a body timeout, the buffer budget), sent by `caller` (the default when
    /// unknown). Its server span is started here, so a refused request is traced
    /// like any other (a client's `traceparent` kept).
    pub fn refused(
        gw: &Gateway,
        id: HeaderValue,
        headers: &http::HeaderMap,
        started: Instant,
        caller: crate::routing::features::Caller,
        e: &GatewayError,
    ) -> Box<Facts> {
        let mut ctx = RequestCtx::new(id, started, caller, gw.policy.load_full());
        ctx.trace = crate::otel::RequestTrace::start(&gw.tracer, headers, started, &ctx.id);
        let mut facts = Facts::take(&mut ctx, e.status());
        facts.error = Some(e.metric_kind());
        facts
    }

    /// A copy of the facts of `ctx` for a stream's body, which outlives the respond
    /// phase (the respond phase still reads `ctx` for the response headers).
    pub fn copy(ctx: &RequestCtx) -> Box<Facts> {
        Box::new(Facts {
            id: ctx.id.clone(),
            started: ctx.started,
            key: ctx.caller.api_key.clone(),
            org: ctx.caller.org.clone(),
            model: ctx.model.clone(),
            snapshot: ctx.snapshot.clone(),
            route: ctx.route.clone(),
            rule: ctx.rule.clone(),
            strategy: ctx.strategy,
            priority: ctx.priority,
            queue_wait: (!ctx.queued.is_zero()).then_some(ctx.queued),
            held: ctx.held,
            stream: ctx.stream,
            cache: ctx.cache,
            tried: ctx.tried.clone(),
            endpoint: ctx.endpoint,
            served: ctx.served,
            status: 200,
            ttft: None,
            usage: None,
            upstream_id: ctx.upstream_id.clone(),
            error: None,
            trace: ctx.trace.clone(),
            bodies: ctx.request_body.clone().map(|request| {
                Box::new(LoggedBodies {
                    request,
                    ..LoggedBodies::default()
                })
            }),
        })
    }

    /// Ends a response whose body was sent whole (`complete`) or dropped before its
    /// end (the client went away): [`Facts::emit`].
    pub fn emit_body_end(self: Box<Self>, gw: &Arc<Gateway>, complete: bool) {
        let end = match (self.error, complete) {
            (Some(kind), _) => End::Error(kind),
            (None, true) => End::Ok,
            (None, false) => End::ClientGone,
        };
        self.emit(gw, end);
    }

    /// Ends a request as `end`: records the per-request metrics that need the whole
    /// request, its place in the recent-requests ring and the end of its OTel span
    /// now, and writes its access line, when one would be written anywhere
    /// ([`crate::logging::access_enabled`]), once the answer is on its way
    /// ([`crate::server::drop_later`]: on a per-core serving thread, after the
    /// connection task that ended the request has written its last bytes).
    pub fn emit(self: Box<Self>, gw: &Arc<Gateway>, end: End) {
        let now = Instant::now();
        let latency = now.saturating_duration_since(self.started);
        let cost = gw.log.finished(&self, end);
        let (endpoint_id, provider, hit) = self.served_by(gw);
        self.record_recent(gw, end, now, endpoint_id, hit, ms(latency));
        let error = match end {
            End::Ok => None,
            End::Error(kind) => Some(kind),
            End::StreamError => Some("stream_error"),
            End::ClientGone => Some("client_gone"),
        };
        self.trace.end(self.status, error, || {
            use opentelemetry::KeyValue;
            let mut attrs = vec![
                KeyValue::new("switchyard.policy", self.snapshot.version.clone()),
                KeyValue::new("switchyard.priority", self.priority.as_str()),
                KeyValue::new("switchyard.attempts", self.tried.len() as i64),
                KeyValue::new("switchyard.outcome", end.outcome()),
            ];
            let mut put = |k: &'static str, v: Option<&str>| {
                if let Some(v) = v {
                    attrs.push(KeyValue::new(k, v.to_string()));
                }
            };
            put("switchyard.route", self.route.as_deref());
            put("switchyard.rule", self.rule.as_deref());
            put("switchyard.endpoint", endpoint_id);
            put("switchyard.provider", provider);
            put("switchyard.cache", self.cache.map(CacheStatus::as_str));
            if let Some(u) = self.usage.as_ref() {
                crate::otel::span::push_usage(&mut attrs, u);
            }
            attrs
        });
        // A line nothing would write (no access file, and a log filter that leaves
        // the access target out, as `--log warn` does) is not built: carrying the
        // facts to a deferred task that builds the line's values and then finds
        // the event disabled was about 1,600 instructions of a proxied JSON request
        // (`benches/load/callgrind.sh` with `telemetry:` left out).
        if !crate::logging::access_enabled() {
            return;
        }
        // Formatting the line is about a tenth of a request's instructions (about
        // 10,000 of 111,000 for a JSON answer, `benches/load/callgrind.sh`): written
        // once the answer's last bytes are on their way.
        crate::server::drop_later(Line {
            gw: gw.clone(),
            facts: self,
            end,
            latency,
            cost,
            span: tracing::Span::current(),
        });
    }

    /// The access line's `endpoint` (the cache's name for a hit) and `provider`
    /// (`None`: no endpoint served), and whether the cache answered.
    fn served_by<'g>(&self, gw: &'g Gateway) -> (Option<&'g str>, Option<&'g str>, bool) {
        let endpoint = self
            .endpoint
            .and_then(|i| gw.registry.endpoints.get(i))
            .filter(|_| self.served);
        let hit = matches!(self.cache, Some(CacheStatus::Hit { .. }));
        let provider = endpoint
            .and_then(|e| gw.upstreams.get(e.provider))
            .map(|u| u.name.as_str());
        let endpoint_id = match (endpoint, hit) {
            (_, true) => Some(super::log::CACHE_ENDPOINT),
            (Some(e), false) => Some(&*e.id),
            (None, false) => None,
        };
        (endpoint_id, provider, hit)
    }

    /// The access line itself: one `tracing` event, formatted by the subscriber
    /// (its JSON fields written straight from these facts, [`LineValues::render`]).
    fn write_line(&self, gw: &Gateway, end: End, latency: Duration, cost: Option<f64>) {
        let (endpoint_id, provider, _) = self.served_by(gw);
        let usage = self.usage.as_ref();
        let details = |u: &Usage| {
            (
                u.prompt_tokens_details.map_or(0, |d| d.cached_tokens),
                u.completion_tokens_details
                    .map_or(0, |d| d.reasoning_tokens),
            )
        };
        let (cached, reasoning) = usage.map(details).unzip();
        let error = match end {
            End::Error(kind) => Some(kind),
            _ => None,
        };
        let max = gw.config.telemetry.access_log.max_body_bytes;
        let bodies = self.bodies.as_deref();
        let mut attempts = Attempts::default();
        let request_body = bodies.map(|b| cut(&b.request, max));
        let response_body = bodies.map(|b| cut(&b.response, max));
        let response_text = bodies
            .and_then(|b| b.text.as_deref())
            .map(|t| cut(t.as_bytes(), max));
        let line = LineValues {
            request_id: crate::request_id::as_str(&self.id),
            key: self.key.as_deref(),
            org: self.org.as_deref(),
            model: Some(&*self.model).filter(|m| !m.is_empty()),
            policy: &self.snapshot.version,
            route: self.route.as_deref(),
            rule: self.rule.as_deref(),
            strategy: self.strategy.map(|s| strategy_name(&self.snapshot, s)),
            priority: self.priority.as_str(),
            queue_wait_ms: self.queue_wait.map(ms),
            held_ms: self.held.map(ms),
            attempts: attempts.text(gw, &self.tried),
            attempt_count: self.tried.len() as u64,
            endpoint: endpoint_id,
            provider,
            upstream_request_id: self.upstream_id.as_ref().map(crate::request_id::as_str),
            status: self.status,
            outcome: end.outcome(),
            error,
            stream: self.stream,
            ttft_ms: self.ttft.map(ms),
            latency_ms: ms(latency),
            input_tokens: usage.map(|u| u.prompt_tokens),
            output_tokens: usage.map(|u| u.completion_tokens),
            cached_tokens: cached,
            reasoning_tokens: reasoning,
            cost_usd: cost,
            cache: self.cache.map(CacheStatus::as_str),
            request_body: request_body.as_deref(),
            request_body_bytes: bodies.map(|b| b.request.len() as u64),
            response_body: response_body.as_deref(),
            response_body_bytes: bodies.map(|b| b.response_len),
            response_text: response_text.as_deref(),
        };
        crate::logging::emit_access(|f| line.render(f), || line.emit());
    }
}

/// The values of one access line, in the order of its fields.
struct LineValues<'a> {
    request_id: &'a str,
    key: Option<&'a str>,
    org: Option<&'a str>,
    model: Option<&'a str>,
    policy: &'a str,
    route: Option<&'a str>,
    rule: Option<&'a str>,
    strategy: Option<&'a str>,
    priority: &'static str,
    queue_wait_ms: Option<f64>,
    held_ms: Option<f64>,
    attempts: &'a str,
    attempt_count: u64,
    endpoint: Option<&'a str>,
    provider: Option<&'a str>,
    upstream_request_id: Option<&'a str>,
    status: u16,
    outcome: &'static str,
    error: Option<&'static str>,
    stream: bool,
    ttft_ms: Option<f64>,
    latency_ms: f64,
    input_tokens: Option<u64>,
    output_tokens: Option<u64>,
    cached_tokens: Option<u64>,
    reasoning_tokens: Option<u64>,
    cost_usd: Option<f64>,
    cache: Option<&'static str>,
    request_body: Option<&'a str>,
    request_body_bytes: Option<u64>,
    response_body: Option<&'a str>,
    response_body_bytes: Option<u64>,
    response_text: Option<&'a str>,
}

impl LineValues<'_> {
    /// The line's `tracing` event (target `switchyard::access`, level `info`,
    /// message `access`).
    fn emit(&self) {
        tracing::info!(
            target: "switchyard::access",
            request_id = self.request_id,
            key = self.key,
            org = self.org,
            api = CHAT_API,
            model = self.model,
            policy = self.policy,
            route = self.route,
            rule = self.rule,
            strategy = self.strategy,
            priority = self.priority,
            queue_wait_ms = self.queue_wait_ms,
            held_ms = self.held_ms,
            attempts = %self.attempts,
            attempt_count = self.attempt_count,
            endpoint = self.endpoint,
            provider = self.provider,
            upstream_request_id = self.upstream_request_id,
            status = self.status,
            outcome = self.outcome,
            error = self.error,
            stream = self.stream,
            ttft_ms = self.ttft_ms,
            latency_ms = self.latency_ms,
            input_tokens = self.input_tokens,
            output_tokens = self.output_tokens,
            cached_tokens = self.cached_tokens,
            reasoning_tokens = self.reasoning_tokens,
            cost_usd = self.cost_usd,
            cache = self.cache,
            request_body = self.request_body,
            request_body_bytes = self.request_body_bytes,
            response_body = self.response_body,
            response_body_bytes = self.response_body_bytes,
            response_text = self.response_text,
            "access"
        );
    }

    /// The event's fields as the JSON format writes them, in [`LineValues::emit`]'s
    /// order (its message first, as `tracing` records it).
    fn render(&self, f: &mut crate::logging::Fields<'_>) {
        f.word("message", "access");
        f.str("request_id", self.request_id);
        f.opt_str("key", self.key);
        f.opt_str("org", self.org);
        f.word("api", CHAT_API);
        f.opt_str("model", self.model);
        f.str("policy", self.policy);
        f.opt_str("route", self.route);
        f.opt_str("rule", self.rule);
        f.opt_str("strategy", self.strategy);
        f.word("priority", self.priority);
        f.opt_f64("queue_wait_ms", self.queue_wait_ms);
        f.opt_f64("held_ms", self.held_ms);
        f.str("attempts", self.attempts);
        f.u64("attempt_count", self.attempt_count);
        f.opt_str("endpoint", self.endpoint);
        f.opt_str("provider", self.provider);
        f.opt_str("upstream_request_id", self.upstream_request_id);
        f.u64("status", u64::from(self.status));
        f.word("outcome", self.outcome);
        f.opt_word("error", self.error);
        f.bool("stream", self.stream);
        f.opt_f64("ttft_ms", self.ttft_ms);
        f.f64("latency_ms", self.latency_ms);
        f.opt_u64("input_tokens", self.input_tokens);
        f.opt_u64("output_tokens", self.output_tokens);
        f.opt_u64("cached_tokens", self.cached_tokens);
        f.opt_u64("reasoning_tokens", self.reasoning_tokens);
        f.opt_f64("cost_usd", self.cost_usd);
        f.opt_word("cache", self.cache);
        f.opt_str("request_body", self.request_body);
        f.opt_u64("request_body_bytes", self.request_body_bytes);
        f.opt_str("response_body", self.response_body);
        f.opt_u64("response_body_bytes", self.response_body_bytes);
        f.opt_str("response_text", self.response_text);
    }
}

/// Milliseconds, as the access line writes durations.
fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// A request's access line, written when this is dropped (in the request's span).
struct Line {
    gw: Arc<Gateway>,
    facts: Box<Facts>,
    end: End,
    latency: Duration,
    cost: Option<f64>,
    span: tracing::Span,
}

impl Drop for Line {
    fn drop(&mut self) {
        let _in = self.span.enter();
        self.facts
            .write_line(&self.gw, self.end, self.latency, self.cost);
    }
}

impl Facts {
    /// Counts the request in its endpoint's traffic ring (not a cache hit: no
    /// endpoint served it) and records its decision (once its body named a model).
    fn record_recent(
        &self,
        gw: &Gateway,
        end: End,
        now: Instant,
        endpoint_id: Option<&str>,
        hit: bool,
        latency_ms: f64,
    ) {
        if let (false, Some(ep)) = (hit, self.endpoint) {
            gw.traffic.record(ep, self.served && end == End::Ok, now);
        }
        if self.model.is_empty() {
            return;
        }
        let tried = self
            .endpoint
            .and_then(|i| gw.registry.endpoints.get(i))
            .map_or("", |e| &*e.id);
        gw.decisions.record(crate::recent::decisions::DecisionRef {
            at_unix_ms: crate::reload::unix_ms(std::time::SystemTime::now()),
            request_id: crate::request_id::as_str(&self.id),
            model: &self.model,
            policy: &self.snapshot.version,
            route: self.route.as_deref().unwrap_or(""),
            rule: self.rule.as_deref().unwrap_or(""),
            strategy: self
                .strategy
                .map_or("", |s| strategy_name(&self.snapshot, s)),
            endpoint: endpoint_id.unwrap_or(tried),
            served: self.served || hit,
            attempts: self.tried.len() as u32,
            status: self.status,
            outcome: end.outcome(),
            latency_ms,
        });
    }
}

/// The name of strategy `index` of `snapshot` (`None`: the built-in `priority`).
fn strategy_name(snapshot: &PolicySnapshot, index: Option<u32>) -> &str {
    match index {
        None => "priority",
        Some(i) => snapshot
            .compiled
            .checked()
            .strategies
            .get(i as usize)
            .map_or("?", |s| s.name.as_str()),
    }
}

/// The access line's `attempts`: `endpoint@provider:status:ms` per attempt, comma
/// separated (`?` for an endpoint index the registry does not hold).
///
/// Written into an inline buffer with `itoa` and handed to the line as one string:
/// through `fmt`'s `write!` of four arguments per attempt it took about 850
/// instructions per request (`benches/load/callgrind.sh`), a fifth of them the
/// formatting machinery's dispatch.
#[derive(Default)]
struct Attempts {
    text: SmallVec<[u8; 128]>,
}

impl Attempts {
    /// The text of `tried`, endpoints named from `gw`'s registry.
    fn text(&mut self, gw: &Gateway, tried: &[Try]) -> &str {
        self.text_with(tried, |i| {
            let ep = gw.registry.endpoints.get(i);
            let id = ep.map_or("?", |e| &*e.id);
            let provider = ep
                .and_then(|e| gw.upstreams.get(e.provider))
                .map_or("?", |u| u.name.as_str());
            (id, provider)
        })
    }

    /// The text of `tried`, endpoint `i` named `(id, provider)` by `name(i)`.
    fn text_with<'n>(&mut self, tried: &[Try], name: impl Fn(usize) -> (&'n str, &'n str)) -> &str {
        let out = &mut self.text;
        out.clear();
        let mut digits = itoa::Buffer::new();
        for (n, t) in tried.iter().enumerate() {
            let (id, provider) = name(t.ep as usize);
            if n > 0 {
                out.push(b',');
            }
            out.extend_from_slice(id.as_bytes());
            out.push(b'@');
            out.extend_from_slice(provider.as_bytes());
            out.push(b':');
            out.extend_from_slice(digits.format(t.status).as_bytes());
            out.push(b':');
            out.extend_from_slice(digits.format(t.ms).as_bytes());
        }
        // Only whole `str`s and ASCII were written: always UTF-8.
        let text = std::str::from_utf8(out);
        debug_assert!(text.is_ok());
        text.unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A line with every field set, strings that need escaping, and the float
    /// values JSON writes specially.
    fn full<'a>(text: &'a str, cost: f64) -> LineValues<'a> {
        LineValues {
            request_id: "3f2b8c1e-0000-4000-8000-000000000001",
            key: Some("key-a"),
            org: Some(text),
            model: Some("gpt-4o"),
            policy: "9c1e",
            route: Some("r"),
            rule: Some("default"),
            strategy: Some("priority"),
            priority: "normal",
            queue_wait_ms: Some(0.25),
            held_ms: Some(1e-7),
            attempts: "a/x@a:502:3,b/x@b:200:41",
            attempt_count: 2,
            endpoint: Some("b/x"),
            provider: Some("b"),
            upstream_request_id: Some("req_1"),
            status: 200,
            outcome: "ok",
            error: Some("upstream_error"),
            stream: true,
            ttft_ms: Some(12.5),
            latency_ms: 41.900001,
            input_tokens: Some(12),
            output_tokens: Some(u64::MAX),
            cached_tokens: Some(0),
            reasoning_tokens: Some(3),
            cost_usd: Some(cost),
            cache: Some("miss"),
            request_body: Some(text),
            request_body_bytes: Some(17),
            response_body: Some("{\"id\":\"x\"}"),
            response_body_bytes: Some(10),
            response_text: Some(text),
        }
    }

    /// The same line with every optional field absent.
    fn bare() -> LineValues<'static> {
        LineValues {
            request_id: "id",
            key: None,
            org: None,
            model: None,
            policy: "v",
            route: None,
            rule: None,
            strategy: None,
            priority: "low",
            queue_wait_ms: None,
            held_ms: None,
            attempts: "",
            attempt_count: 0,
            endpoint: None,
            provider: None,
            upstream_request_id: None,
            status: 400,
            outcome: "error",
            error: None,
            stream: false,
            ttft_ms: None,
            latency_ms: 0.0,
            input_tokens: None,
            output_tokens: None,
            cached_tokens: None,
            reasoning_tokens: None,
            cost_usd: None,
            cache: None,
            request_body: None,
            request_body_bytes: None,
            response_body: None,
            response_body_bytes: None,
            response_text: None,
        }
    }

    /// The JSON line of `line`, its fields rendered first (`rendered`) or visited;
    /// the timestamp cut off.
    fn json(line: &LineValues<'_>, rendered: bool) -> String {
        let out = crate::logging::json_written(|| {
            crate::logging::emit_access_with(rendered, |f| line.render(f), || line.emit())
        });
        out.split_once(r#""level""#).unwrap().1.to_string()
    }

    #[test]
    fn prerendered_access_fields_are_the_visited_ones() {
        let texts = [
            "plain",
            "",
            "say \"hi\"\n\tC:\\dir \u{1} caf\u{e9} \u{2028} \u{1f600}",
        ];
        let costs = [0.0, 0.000123, 1e21, f64::NAN, f64::INFINITY, -0.0];
        let mut lines: Vec<LineValues<'_>> = vec![bare()];
        for t in texts {
            for c in costs {
                lines.push(full(t, c));
            }
        }
        for line in &lines {
            let visited = json(line, false);
            let rendered = json(line, true);
            assert_eq!(rendered, visited);
            // Nothing left over for the next line.
            assert_eq!(json(line, false), visited);
        }
        let whole = |s: String| -> serde_json::Value {
            serde_json::from_str(&format!("{{\"level\"{s}")).unwrap()
        };
        let v = whole(json(&lines[1], true));
        assert_eq!(v["fields"]["message"], "access");
        assert_eq!(v["fields"]["attempts"], "a/x@a:502:3,b/x@b:200:41");
        assert_eq!(v["fields"]["output_tokens"], u64::MAX);
        assert_eq!(v["target"], "switchyard::access");
        assert!(json(&bare(), true)
            .contains(r#""fields":{"message":"access","request_id":"id","api":"#));
    }

    #[test]
    fn attempts_read_endpoint_at_provider_status_ms_comma_separated() {
        let names = |i: usize| match i {
            0 => ("openai/gpt-4o", "openai"),
            1 => ("local/x", "local"),
            _ => ("?", "?"),
        };
        let tried = [
            Try {
                ep: 0,
                status: 429,
                ms: 0,
            },
            Try {
                ep: 1,
                status: 502,
                ms: u32::MAX,
            },
            Try {
                ep: 9,
                status: 200,
                ms: 41,
            },
        ];
        let mut a = Attempts::default();
        assert_eq!(a.text_with(&[], names), "");
        assert_eq!(
            a.text_with(&tried[..1], names),
            "openai/gpt-4o@openai:429:0"
        );
        let want = tried
            .iter()
            .map(|t| {
                let (id, p) = names(t.ep as usize);
                format!("{id}@{p}:{}:{}", t.status, t.ms)
            })
            .collect::<Vec<_>>()
            .join(",");
        assert_eq!(a.text_with(&tried, names), want);
        assert_eq!(
            want,
            "openai/gpt-4o@openai:429:0,local/x@local:502:4294967295,?@?:200:41"
        );
    }

    #[test]
    fn the_json_format_copies_the_rendered_fields_of_the_line_being_emitted() {
        let line = bare();
        // What the render wrote is what the line holds, proof that the copy is used.
        let out = crate::logging::json_written(|| {
            crate::logging::emit_access_with(true, |f| f.str("message", "rendered"), || line.emit())
        });
        assert!(out.contains(r#""fields":{"message":"rendered"},"#), "{out}");
        // Not rendered: visited, as before.
        let out = crate::logging::json_written(|| {
            crate::logging::emit_access_with(
                false,
                |f| f.str("message", "rendered"),
                || line.emit(),
            )
        });
        assert!(out.contains(r#""fields":{"message":"access","#), "{out}");
        // A render past the bound is not used.
        let big = "x".repeat(70 * 1024);
        let out = crate::logging::json_written(|| {
            crate::logging::emit_access_with(true, |f| f.str("message", &big), || line.emit())
        });
        assert!(out.contains(r#""fields":{"message":"access","#) && !out.contains(&big));
        // An emit that unwinds leaves nothing ready for the next access event.
        let unwound = std::panic::catch_unwind(|| {
            crate::logging::emit_access_with(true, |f| f.str("message", "stale"), || panic!("emit"))
        });
        assert!(unwound.is_err());
        let out = crate::logging::json_written(|| line.emit());
        assert!(out.contains(r#""fields":{"message":"access","#), "{out}");
    }
}
