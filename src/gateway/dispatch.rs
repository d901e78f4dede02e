//! The dispatch phase: attempts over the plan (seed 000, Algorithm 1), each one an
//! exchange with one endpoint.
//!
//! Each endpoint of the plan gets up to `retries + 1` attempts while its errors allow
//! a retry on the same endpoint ([`Retry::Any`]: connect failure, timeout, 5xx, the
//! provider's 429), waiting between them the longer of the backoff and the
//! provider's `Retry-After`; an error that allows only another endpoint (an upstream
//! 404 or refused credentials) moves on at once; an error that allows no retry (the
//! client's request is at fault) ends the request. The decision is the error's
//! [`GatewayError::retry`] field alone. Rotation never returns to an endpoint it
//! moved past.
//!
//! Two bounds hold for the whole request (`server:` in config): at most
//! `max_attempts` attempts (default 8), and the retry budget `retry_budget_ms`
//! (default 30 s, seed 004): no attempt starts past it, and a wait that would end past
//! it moves on to the next endpoint instead of sleeping.
//!
//! An endpoint whose circuit is open (or whose one half-open probe is already out) is
//! skipped without an attempt (`stats::breaker`); when that leaves nothing to try,
//! the client gets 503 with `Retry-After` set to the next probe. An endpoint whose
//! provider asked for a pause (`Retry-After` on any error) gets no new attempts
//! until it ends; when only such endpoints are left, the client gets 429 with the
//! shortest remaining wait. A provider's 429 `insufficient_quota`, 402 or
//! Anthropic's "credit balance is too low" (our account is out of quota:
//! [`ErrorKind::QuotaExceeded`]) moves on at once and pauses its
//! endpoint for the breaker's `max_cooldown_ms`; when only endpoints paused so are
//! left, the client gets OpenAI's 429 `insufficient_quota` quoting what each
//! provider said when it paused ([`out_of_quota`]).
//!
//! A context-window error moves to the next endpoint of the plan whose
//! `context_window` is known and larger, else returns to the client. A route's
//! `fallback ... on` statuses move on to the next endpoint even where the status
//! would return to the client.
//!
//! When every attempt failed the client gets one aggregate error listing each
//! attempt (endpoint, status, error, duration). Its status: 429 when every attempt
//! was throttled (with the shortest `Retry-After` any provider gave), 504 when every
//! attempt timed out, else the last attempt's.
//!
//! A stream is committed to the client at its first content ([`SseRelay::poll_commit`]):
//! an error event, cut or stall before it is an attempt failure like any other, so
//! the client only ever sees the stream of the attempt that got that far. The
//! attempt loop lives in a [`Cursor`] that the response body keeps: when a committed
//! stream fails, the body continues the answer on the next endpoint of the plan
//! (`super::stream`), with the same bounds.

use std::fmt::Write as _;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use http::Response;

use super::access::{Facts, Tried, Try};
use super::ctx::RequestCtx;
use super::outcome::{Attempt, DecisionContext};
use super::route::Plan;
use super::stream::ClientStream;
use super::Gateway;
use crate::api::{ChatRequest, Message};
use crate::body::{self, Body};
use crate::config::ProviderKind;
use crate::egress::relay::{collect, SseRelay};
use crate::egress::Upstream;
use crate::error::{Code, ErrorKind, Fault, GatewayError, Retry};
use crate::policy::interp::strategy::PlanRest;
use crate::policy::FallbackOn;
use crate::providers::{Resume, Sent, StreamContext};
use crate::stats::{ratelimit, Admission};

/// What one failed attempt was, for the aggregate error.
struct Failed {
    endpoint: usize,
    error: GatewayError,
    took: Duration,
}

/// What a successful attempt produced.
pub(super) enum Exchanged {
    /// A whole (non-streaming) answer, translated.
    Whole(Response<Body>),
    /// A stream past its commit point.
    Stream(Box<Leg>),
}

/// One committed stream: its relay and the attempt it belongs to.
pub(super) struct Leg {
    /// The relay, holding what arrived up to the commit point.
    pub relay: SseRelay,
    /// The attempt, ended when the stream ends.
    pub attempt: Attempt,
    /// Its endpoint.
    pub ep: usize,
    /// When it was sent.
    pub began: Instant,
    /// Time to its first content, if it had any by the commit point.
    pub ttft: Option<Duration>,
    /// The provider's id of its answer (`crate::request_id::upstream`).
    pub upstream_id: Option<http::HeaderValue>,
    /// The attempt's span, ended when the stream ends.
    pub span: crate::otel::ChildSpan,
}

/// The attempt loop over one request's plan, resumable: the response body of a
/// stream keeps it to continue the answer elsewhere after a mid-stream failure.
pub(super) struct Cursor {
    gw: Arc<Gateway>,
    chat: Arc<ChatRequest>,
    decided: Arc<DecisionContext>,
    plan: Vec<usize>,
    /// Fallbacks after `plan` not yet ordered; ordered onto it when the attempts get
    /// past it ([`Cursor::unfold`]).
    rest: Option<Box<PlanRest>>,
    retries: u32,
    backoff_ms: Option<(u64, u64)>,
    /// The route's `fallback ... on` statuses: these move on to the next endpoint.
    fallback_on: Option<FallbackOn>,
    /// When the retry budget ends (`server.retry_budget_ms` after the first
    /// attempt's turn; `None` until then).
    budget_end: Option<Instant>,
    /// The retry budget (`server.retry_budget_ms`).
    budget: Duration,
    /// The request's final priority, for the endpoints' queues.
    priority: crate::policy::ast::PriorityLevel,
    /// Time spent waiting in endpoint queues so far.
    pub queued: Duration,
    /// Next plan position to try, and the retries made there so far.
    pos: usize,
    retry: u32,
    /// Attempts made, across endpoints and retries.
    pub attempts: u32,
    /// The endpoint of the last attempt.
    pub endpoint: Option<usize>,
    /// Every attempt, for the access line.
    pub tried: Tried,
    /// The attempt awaiting its answer: endpoint and when it was sent (`None`
    /// between attempts). What [`Landing`] records when the client goes first.
    in_flight: Option<(usize, Instant)>,
    failed: Vec<Failed>,
    /// The shortest wait until a skipped endpoint's circuit lets a probe through.
    skipped_for: Option<Duration>,
    /// The shortest wait a skipped endpoint's provider asked for (`Retry-After`).
    throttled_for: Option<Duration>,
    /// A skipped endpoint was paused for a reason other than an exhausted quota.
    paused_not_for_quota: bool,
    /// The request's trace: each attempt is a child span of it.
    trace: crate::otel::RequestTrace,
}

/// Tries the plan in `ctx` until one endpoint answers; the aggregate error otherwise.
/// A streamed answer takes `ticket` (its body stores the stream when it ends
/// cleanly); a whole answer leaves it for the caller.
///
/// # Errors
/// One attempt failed: its error. Several: the aggregate error (see the module doc).
/// Nothing could be tried: 503.
///
/// `chat` comes shared: the attempts share it, and a request passed by value would
/// take its size twice more in every request's future (the caller's slot stays).
pub async fn dispatch(
    gw: &Arc<Gateway>,
    ctx: &mut RequestCtx,
    chat: Arc<ChatRequest>,
    plan: &Plan,
    decided: Arc<DecisionContext>,
    ticket: &mut Option<Box<super::cache::Ticket>>,
) -> Result<Response<Body>, GatewayError> {
    let cursor = Cursor {
        gw: gw.clone(),
        chat,
        decided,
        // Nothing reads the context's plan after this: taken, not copied.
        plan: std::mem::take(&mut ctx.plan),
        rest: ctx.plan_rest.take(),
        retries: plan.retries,
        backoff_ms: plan.backoff_ms,
        fallback_on: plan.fallback_on.clone(),
        // From dispatch (the first attempt's turn), not arrival: an off-peak hold is
        // not part of the budget.
        budget_end: None,
        budget: Duration::from_millis(gw.config.server.retry_budget_ms),
        priority: ctx.priority,
        queued: Duration::ZERO,
        pos: 0,
        retry: 0,
        attempts: 0,
        endpoint: None,
        tried: Tried::new(),
        in_flight: None,
        failed: Vec::new(),
        skipped_for: None,
        throttled_for: None,
        paused_not_for_quota: false,
        trace: ctx.trace.clone(),
    };
    let mut landing = Landing {
        ctx,
        cursor: Some(cursor),
    };
    let result = match landing.cursor.as_mut() {
        Some(c) => c.run(None).await,
        None => Err(nothing_tried()),
    };
    let Some(cursor) = landing.cursor.take() else {
        return result.and(Err(nothing_tried()));
    };
    let ctx = &mut *landing.ctx;
    cursor.land(ctx);
    match result {
        Ok(Exchanged::Whole(resp)) => {
            ctx.served = true;
            Ok(resp)
        }
        Ok(Exchanged::Stream(leg)) => {
            ctx.served = true;
            ctx.upstream_id.clone_from(&leg.upstream_id);
            ctx.body_logs = true;
            let prompt_tokens = cursor.chat.estimated_input_tokens();
            let mut body = ClientStream::new(gw.clone(), ctx.started, leg, Box::new(cursor))
                .logging(Facts::copy(ctx), prompt_tokens);
            if let Some(permit) = ctx.permit.clone() {
                body = body.settling(permit, prompt_tokens);
            }
            if let Some(t) = ticket.take() {
                body = body.caching(super::cache::Tee::new(*t));
            }
            Ok(body::event_stream(Body::boxed(body)))
        }
        Err(e) => Err(e),
    }
}

/// The dispatch's cursor and the request it tries for. Dropped with its cursor
/// still in it, the dispatch was abandoned mid-way (the client closed its
/// connection, and the request's future was dropped): the attempts made so far, the
/// one in flight with status 499 and its time until then, go into the context, so
/// the access line, the decision log and the attempt metrics show the endpoint the
/// request was waiting on (found by attack, 2026-12-07: a client giving up on a slow
/// provider left `attempts` empty and no endpoint, the commonest LLM failure
/// untraceable to its endpoint).
struct Landing<'c> {
    ctx: &'c mut RequestCtx,
    cursor: Option<Cursor>,
}

impl Drop for Landing<'_> {
    fn drop(&mut self) {
        let Some(c) = self.cursor.as_mut() else {
            return;
        };
        if let Some((ep, sent)) = c.in_flight.take() {
            c.tried
                .push(Try::new(ep, super::log::CLIENT_GONE_STATUS, sent.elapsed()));
            // The provider has the request (and may answer it whole, unread): it
            // is charged its input estimate, as a timeout is, not nothing.
            if let Some(permit) = &self.ctx.permit {
                let input = permit.prompt_estimate;
                permit.settle(Some(ep), &crate::api::Usage::new(input, 0));
            }
        }
        c.land(self.ctx);
    }
}

/// 500 for a dispatch left without its cursor (never: [`Landing`] holds it until
/// the dispatch is done with it).
fn nothing_tried() -> GatewayError {
    GatewayError::new(ErrorKind::Internal, "the dispatch lost its plan")
}

impl Cursor {
    /// Copies what the attempts so far were into `ctx`: time queued, attempts, the
    /// last endpoint and every attempt's record.
    fn land(&self, ctx: &mut RequestCtx) {
        ctx.queued = self.queued;
        ctx.attempts = self.attempts;
        ctx.endpoint = self.endpoint;
        ctx.tried.clone_from(&self.tried);
    }

    /// Runs attempts from the current plan position until one succeeds. `resume`: the
    /// attempt continues a stream that failed after sending `resume` to the client.
    ///
    /// # Errors
    /// See [`dispatch`].
    pub(super) async fn run(&mut self, resume: Option<&Sent>) -> Result<Exchanged, GatewayError> {
        let gw = self.gw.clone();
        let max_attempts = gw.config.server.max_attempts;
        while self.has_next() {
            let ep = self.plan[self.pos];
            // One reading of the clock for the budget, the breaker and the attempt's
            // start (read again only after a wait in the endpoint's queue).
            let now = Instant::now();
            let budget_end = *self.budget_end.get_or_insert(now + self.budget);
            if self.attempts >= max_attempts || (self.attempts > 0 && now >= budget_end) {
                break;
            }
            // (A retry here has already waited out the endpoint's own pause.)
            let paused = (self.retry == 0)
                .then(|| gw.stats.slot(ep)?.throttled_now())
                .flatten();
            if let Some(wait) = paused {
                // Its provider asked for a pause (`Retry-After`), or our account with
                // it is out of quota: skip it, uncounted.
                self.throttled_for = Some(self.throttled_for.map_or(wait, |w| w.min(wait)));
                self.paused_not_for_quota |= gw
                    .stats
                    .slot(ep)
                    .is_none_or(|s| s.out_of_quota_for(SystemTime::now()).is_none());
                self.advance();
                continue;
            }
            // A slot of the endpoint's gate (`max_in_flight`), waiting in its queue
            // when it is full; a refusal (queue timeout or full) ends the request.
            let slot = gw.sched.acquire(ep, self.priority).await?;
            let waited = slot
                .as_ref()
                .map_or(Duration::ZERO, crate::sched::Slot::waited);
            self.queued += waited;
            let now = if waited.is_zero() {
                now
            } else {
                Instant::now()
            };
            let probe = match admit(&gw, ep, now) {
                Admission::Allow => false,
                Admission::Probe => true,
                Admission::Reject(wait) => {
                    // Open circuit, or its one probe is out: skip it, uncounted.
                    self.skipped_for = Some(self.skipped_for.map_or(wait, |w| w.min(wait)));
                    self.advance();
                    continue;
                }
            };
            self.attempts += 1;
            self.endpoint = Some(ep);
            let began = now;
            let attempt = Attempt::begin(&gw, ep, began, self.decided.clone(), probe).holding(slot);
            // The text sent is kept for a failover, and for the access line's
            // `response_text` when bodies are logged.
            let track = (self.pos + 1 < self.plan_len() && failover_allowed(&gw, &self.chat))
                || (gw.config.telemetry.access_log.bodies && self.chat.is_stream());
            let mut span = self.attempt_span(ep);
            self.in_flight = Some((ep, began));
            let exchanged = exchange(
                &gw,
                ep,
                &self.chat,
                attempt,
                resume,
                track,
                &mut span,
                &self.trace,
            )
            .await;
            self.in_flight = None;
            let e = match exchanged {
                Ok(Exchanged::Stream(mut leg)) => {
                    self.tried.push(Try::new(ep, 200, began.elapsed()));
                    leg.span = span;
                    return Ok(Exchanged::Stream(leg));
                }
                Ok(x) => {
                    self.tried.push(Try::new(ep, 200, began.elapsed()));
                    span.end();
                    return Ok(x);
                }
                Err(e) => {
                    span.failed(&e);
                    span.end();
                    e
                }
            };
            self.tried.push(Try::failed(ep, &e, began.elapsed()));
            gw.log
                .attempt_failed(ep, self.attempts, &self.decided.snapshot.version, &e);
            pause_after(&gw, ep, &e);
            let mut retry_safety = e.retry;
            let listed = e
                .upstream_status
                .is_some_and(|s| self.fallback_on.as_ref().is_some_and(|on| on.matches(s)));
            if listed && !retry_safety.other_endpoint() {
                // The route lists this status: the next endpoint, not the client.
                retry_safety = Retry::OtherEndpoint;
            }
            let larger = if e.kind == ErrorKind::ContextWindowExceeded && !listed {
                self.unfold();
                Some(self.larger_window(ep))
            } else {
                None
            };
            let wait = backoff(self.backoff_ms, self.retry)
                .unwrap_or_default()
                .max(e.retry_after.unwrap_or_default());
            self.failed.push(Failed {
                endpoint: ep,
                error: e,
                took: began.elapsed(),
            });
            if let Some(larger) = larger {
                // Over this endpoint's context window: on to the next endpoint whose
                // window is known to be larger, else the provider's error.
                self.pos = larger.unwrap_or(self.plan.len());
                self.retry = 0;
                continue;
            }
            if !retry_safety.other_endpoint() {
                self.pos = self.plan_len();
                break;
            }
            if !retry_safety.same_endpoint() || self.retry >= self.retries {
                self.advance();
                continue;
            }
            // Checked: a provider's wait can be past what an `Instant` holds (a
            // Gemini `retryDelay` is read from the body, uncut).
            if Instant::now()
                .checked_add(wait)
                .is_none_or(|t| t >= budget_end)
            {
                // The wait would outlast the budget: the next endpoint instead.
                self.advance();
                continue;
            }
            if !wait.is_zero() {
                tokio::time::sleep(wait).await;
            }
            self.retry += 1;
        }
        if self.failed.is_empty() {
            if self.throttled_for.is_some() && !self.paused_not_for_quota {
                self.unfold();
                return Err(out_of_quota(&gw, "plan", &self.plan));
            }
            if let Some(wait) = self.throttled_for {
                return Err(GatewayError::new(
                    ErrorKind::RateLimited,
                    "every endpoint of the plan asked for a pause (Retry-After); retry later",
                )
                .with_code(Code::UpstreamRateLimited)
                .with_retry_after(Some(wait.max(Duration::from_secs(1)))));
            }
            if let Some(wait) = self.skipped_for {
                return Err(GatewayError::new(
                    ErrorKind::NoEndpoint,
                    "every endpoint of the plan has an open circuit; retry later",
                )
                .with_code(Code::NoEndpoint)
                .with_retry_after(Some(wait.max(Duration::from_secs(1)))));
            }
        }
        let mut e = aggregate(&gw, std::mem::take(&mut self.failed));
        // A provider's wait past the endpoint's pause (`pause_after`: at most the
        // breaker's `max_cooldown_ms`) is not the client's: the gateway tries the
        // endpoint again once the pause is over, so that is when to come back.
        if e.kind == ErrorKind::RateLimited {
            let cap = Duration::from_millis(gw.config.breaker.max_cooldown_ms);
            e.retry_after = e.retry_after.map(|w| w.min(cap));
        }
        Err(e)
    }

    /// Records that the committed stream of endpoint `ep` failed with `e` after
    /// `took`, and moves past that endpoint: rotation never returns to it.
    pub(super) fn failed_mid_stream(&mut self, ep: usize, e: GatewayError, took: Duration) {
        if let Some(t) = self.tried.last_mut() {
            *t = Try::failed(ep, &e, took);
        }
        self.gw
            .log
            .attempt_failed(ep, self.attempts, &self.decided.snapshot.version, &e);
        self.failed.push(Failed {
            endpoint: ep,
            error: e,
            took,
        });
        self.advance();
    }

    /// Whether a failed stream may be continued by this cursor: failover is on,
    /// the request has one choice, and the plan has endpoints and attempts left.
    pub(super) fn can_continue(&self) -> bool {
        failover_allowed(&self.gw, &self.chat)
            && self.pos + 1 < self.plan_len()
            && self.attempts < self.gw.config.server.max_attempts
            && self.budget_end.is_none_or(|end| Instant::now() < end)
    }

    /// The next plan position after the current one whose endpoint has a known
    /// context window larger than endpoint `ep`'s (any known one when `ep`'s is
    /// unknown) and not known to be too small for the request.
    fn larger_window(&self, ep: usize) -> Option<usize> {
        let endpoints = &self.gw.registry.endpoints;
        let floor = endpoints
            .get(ep)
            .and_then(|e| e.context_window)
            .unwrap_or(0);
        let tokens = self.chat.estimated_input_tokens();
        (self.pos + 1..self.plan.len()).find(|&p| {
            endpoints
                .get(self.plan[p])
                .and_then(|e| e.context_window)
                .is_some_and(|w| w > floor && w >= tokens)
        })
    }

    /// The span of the attempt about to go to endpoint `ep` (empty when the
    /// request is not traced).
    fn attempt_span(&self, ep: usize) -> crate::otel::ChildSpan {
        if !self.trace.is_on() {
            return crate::otel::ChildSpan::default();
        }
        let endpoint = &self.gw.registry.endpoints[ep];
        let up = &self.gw.upstreams[endpoint.provider];
        self.trace.attempt(
            self.attempts,
            &self.chat,
            &endpoint.id,
            &endpoint.upstream_model,
            &up.name,
            up.kind,
            up.base_url(),
        )
    }

    fn advance(&mut self) {
        self.pos += 1;
        self.retry = 0;
    }

    /// Whether the plan has a position `pos`, ordering the unordered fallbacks when
    /// the ordered part ends before it.
    fn has_next(&mut self) -> bool {
        if self.pos >= self.plan.len() {
            self.unfold();
        }
        self.pos < self.plan.len()
    }

    /// The plan's length, with the fallbacks not yet ordered.
    fn plan_len(&self) -> usize {
        self.plan.len() + self.rest.as_ref().map_or(0, |r| r.len())
    }

    /// Orders the unordered fallbacks onto the plan.
    fn unfold(&mut self) {
        if let Some(r) = self.rest.take() {
            r.order_into(&mut self.plan);
        }
    }
}

/// Takes endpoint `ep` out of rotation, for every client, after an attempt there
/// failed with `e`: for the breaker's `max_cooldown_ms` when its provider said our
/// account is out of quota ([`ErrorKind::QuotaExceeded`]: no wait of a request
/// refills an account; after it one request finds out again), else for the wait
/// the provider asked (`Retry-After`), capped at that cooldown (one answer cannot
/// take an endpoint out for the full hour a header may ask). Nothing otherwise.
pub(super) fn pause_after(gw: &Gateway, ep: usize, e: &GatewayError) {
    let Some(slot) = gw.stats.slot(ep) else {
        return;
    };
    let cap = Duration::from_millis(gw.config.breaker.max_cooldown_ms);
    if e.kind == ErrorKind::QuotaExceeded {
        slot.out_of_quota(cap, SystemTime::now(), &e.message);
    } else if let Some(wait) = e.retry_after {
        slot.throttle(wait.min(cap), SystemTime::now());
    }
}

/// Mid-stream failover is on for `chat`: configured, and one choice (`n` > 1
/// streams interleave choices, which cannot be continued one by one).
fn failover_allowed(gw: &Gateway, chat: &ChatRequest) -> bool {
    gw.config.server.stream_failover
        && chat.is_stream()
        && chat
            .extra
            .get("n")
            .and_then(serde_json::Value::as_u64)
            .is_none_or(|n| n <= 1)
}

/// Asks endpoint `ep`'s circuit breaker whether an attempt may go now, reporting a
/// move to half-open.
fn admit(gw: &Gateway, ep: usize, now: Instant) -> Admission {
    let Some(slot) = gw.stats.slot(ep) else {
        return Admission::Allow;
    };
    let breaker = slot.breaker();
    let (admission, changed) = breaker.admit(now);
    if let Some(state) = changed {
        gw.log.circuit(ep, state, breaker.cooldown());
    }
    admission
}

/// 429 `insufficient_quota` for a request whose every endpoint (`endpoints`, of its
/// `what`: plan or model) is paused because its provider said our account is out
/// of quota (OpenAI's answer for the same, in its shape; no `Retry-After`, as
/// OpenAI sends none: it is not a wait). The message says so and quotes, endpoint
/// by endpoint, what the provider said when it paused it
/// ([`crate::stats::EndpointSlot::quota_reason`]), as the request that met the
/// provider's answer itself read it: `every endpoint of the model is out of quota
/// with its provider (insufficient_quota): p/x: upstream account is out of quota:
/// You exceeded your current quota, ...`.
pub(super) fn out_of_quota(gw: &Gateway, what: &str, endpoints: &[usize]) -> GatewayError {
    let now = SystemTime::now();
    let mut message = format!(
        "every endpoint of the {what} is out of quota with its provider (insufficient_quota)"
    );
    let mut said = 0;
    for &ep in endpoints {
        let Some(reason) = gw.stats.slot(ep).and_then(|s| s.quota_reason(now)) else {
            continue;
        };
        let id = gw.registry.endpoints.get(ep).map_or("?", |e| &*e.id);
        let _ = write!(
            message,
            "{} {id}: {reason}",
            if said == 0 { ":" } else { ";" }
        );
        said += 1;
    }
    if said == 0 {
        message.push_str("; the providers' plans and billing need attention");
    }
    GatewayError::new(ErrorKind::QuotaExceeded, message).with_code(Code::InsufficientQuota)
}

/// The client's error when every attempt in `failed` failed (see the module doc).
fn aggregate(gw: &Gateway, mut failed: Vec<Failed>) -> GatewayError {
    let Some(last) = failed.pop() else {
        return GatewayError::new(ErrorKind::NoEndpoint, "no endpoint could be tried")
            .with_code(Code::NoEndpoint);
    };
    // One attempt, or a refusal of the request itself: that answer is the client's,
    // as the provider gave it.
    if failed.is_empty() || last.error.fault == Fault::Client {
        return last.error;
    }
    failed.push(last);
    let all = |k: ErrorKind| failed.iter().all(|f| f.error.kind == k);
    let kind = if all(ErrorKind::RateLimited) {
        Some(ErrorKind::RateLimited)
    } else if all(ErrorKind::UpstreamTimeout) {
        Some(ErrorKind::UpstreamTimeout)
    } else {
        None
    };
    let mut message = format!("all {} attempts failed:", failed.len());
    for (n, f) in failed.iter().enumerate() {
        let id = gw
            .registry
            .endpoints
            .get(f.endpoint)
            .map(|e| &*e.id)
            .unwrap_or("?");
        let _ = write!(
            message,
            "{} {}. {id}: HTTP {} after {} ms: {}",
            if n == 0 { "" } else { ";" },
            n + 1,
            f.error.status(),
            f.took.as_millis(),
            crate::error::bounded(&f.error.message, 300)
        );
    }
    let shortest_wait = failed.iter().filter_map(|f| f.error.retry_after).min();
    let mut e = match failed.pop() {
        Some(f) => f.error,
        None => GatewayError::new(ErrorKind::NoEndpoint, ""),
    };
    if let Some(k) = kind {
        e = e.with_kind(k);
    }
    e.message = message;
    e.retry = Retry::Never;
    if kind == Some(ErrorKind::RateLimited) {
        e.retry_after = shortest_wait;
    }
    e
}

/// Backoff before retry number `retry` (0-based): the first wait doubled per retry,
/// capped; `None` without a backoff setting.
fn backoff(setting: Option<(u64, u64)>, retry: u32) -> Option<Duration> {
    let (first, cap) = setting?;
    let ms = first.saturating_mul(1u64 << retry.min(20)).min(cap);
    Some(Duration::from_millis(ms))
}

/// The request that continues, on endpoint `ep`, a stream that failed after sending
/// `sent`, and how its answer joins the text already sent (see [`Resume`]).
///
/// Where the provider takes a prefill, the text sent goes as a final assistant
/// message (trailing whitespace trimmed for Anthropic, which refuses it, and dropped
/// from the answer if it comes back), and the output cap shrinks by the pieces sent
/// (about one token each). Elsewhere the request is sent again unchanged and the new
/// answer must begin with the text sent.
fn continuation(up: &Upstream, chat: &ChatRequest, sent: &Sent) -> (Option<ChatRequest>, Resume) {
    if !up.prefill || sent.text.is_empty() {
        let resume = Resume {
            sent: sent.clone(),
            skip: sent.text.clone(),
            exact: true,
        };
        return (None, resume);
    }
    let prefix = if up.kind == ProviderKind::Anthropic {
        sent.text.trim_end()
    } else {
        &sent.text[..]
    };
    let mut next = chat.clone();
    next.raw = bytes::Bytes::new();
    next.messages.push(Message {
        role: "assistant".into(),
        content: serde_json::Value::String(prefix.to_string()),
        extra: serde_json::Map::new(),
    });
    let shrink = |cap: Option<u64>| cap.map(|c| c.saturating_sub(sent.pieces).max(1));
    next.max_tokens = shrink(next.max_tokens);
    next.max_completion_tokens = shrink(next.max_completion_tokens);
    let resume = Resume {
        sent: sent.clone(),
        skip: sent.text[prefix.len()..].to_string(),
        exact: false,
    };
    (Some(next), resume)
}

/// One attempt on endpoint `ep`: send, read the head, and either translate the whole
/// answer or read the stream to its commit point. `resume`: the stream continues
/// one that already sent this; `track`: keep the text sent, for a later failover;
/// `span`: the attempt's span, whose `traceparent` goes upstream and which records
/// a whole answer (the caller ends it, or a stream's body); `trace`: the
/// request's, which records what the client received of a whole answer.
#[allow(clippy::too_many_arguments)]
async fn exchange(
    gw: &Arc<Gateway>,
    ep: usize,
    chat: &ChatRequest,
    attempt: Attempt,
    resume: Option<&Sent>,
    track: bool,
    span: &mut crate::otel::ChildSpan,
    trace: &crate::otel::RequestTrace,
) -> Result<Exchanged, GatewayError> {
    let endpoint = &gw.registry.endpoints[ep];
    let up = &gw.upstreams[endpoint.provider];
    let (continued, resume) = match resume {
        Some(sent) => {
            let (c, r) = continuation(up, chat, sent);
            // Boxed: held across the exchange, and only a continuation has one.
            (c.map(Box::new), Some(r))
        }
        None => (None, None),
    };
    let request = continued.as_deref().unwrap_or(chat);
    let sent = match up
        .send(
            &endpoint.upstream_model,
            request,
            span.traceparent(),
            attempt.began(),
        )
        .await
    {
        Ok(s) => s,
        Err(e) => return Err(attempt.failed(e)),
    };
    let upstream_id = crate::request_id::upstream(sent.response.headers());
    if let (Some((c, now)), Some(slot)) = (
        ratelimit::capacity_now(sent.response.headers()),
        gw.stats.slot(ep),
    ) {
        slot.record_capacity(c, now);
    }
    let sent_at = sent.sent_at;
    let deadline =
        tokio::time::Instant::from_std(sent_at + Duration::from_millis(up.timeouts.total_ms));
    let idle = Duration::from_millis(up.timeouts.idle_ms);
    let (parts, upstream_body) = sent.response.into_parts();
    // A content coding other than `identity`, though the gateway asked for it
    // (`egress::forward`): a body it cannot read.
    let coding = parts
        .headers
        .get(http::header::CONTENT_ENCODING)
        .map(|v| v.to_str().unwrap_or("?").trim())
        .filter(|c| !c.is_empty() && !c.eq_ignore_ascii_case("identity"));
    if !parts.status.is_success() {
        let mut err = match collect(upstream_body, idle, deadline, &up.name).await {
            Ok(bytes) => {
                // An encoded error body is not read (its bytes would be pasted
                // into the message): the status alone says what happened.
                let body: &[u8] = if coding.is_some() { b"" } else { &bytes };
                let mut err = up
                    .adapter()
                    .error(parts.status.as_u16(), &parts.headers, body);
                if parts.status.is_server_error() {
                    // The adapter's message is gateway-made (never the upstream
                    // body): name the provider so the client knows which one failed.
                    err.message = format!("provider `{}`: {}", up.name, err.message);
                }
                err
            }
            // Reading the body failed: that message names the provider already.
            Err(e) => e,
        };
        err.upstream_status = Some(parts.status.as_u16());
        return Err(attempt.failed(err));
    }
    if let Some(coding) = coding {
        // A compressed answer is one the gateway cannot read, and saying so beats
        // "not JSON".
        let e = GatewayError::new(
            ErrorKind::BadUpstream,
            format!(
                "provider `{}` sent its answer with `Content-Encoding: {}` though the gateway asked for `identity`",
                up.name,
                crate::error::bounded(coding, 64)
            ),
        )
        .with_code(Code::UpstreamBadResponse);
        return Err(attempt.failed(e));
    }
    let content_type = parts
        .headers
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    // `text/event-stream`, or Bedrock's `application/vnd.amazon.eventstream`; media
    // types are case-insensitive (RFC 9110, section 8.3.1).
    let streamed = holds_ignoring_case(content_type, "event-stream")
        || holds_ignoring_case(content_type, "eventstream");
    if chat.is_stream() && !content_type.is_empty() && !streamed {
        // Not a stream (an HTML error page, or JSON from a provider that ignored
        // `stream`): fail before the first byte so the fallback chain can act.
        let mut message = format!(
            "provider `{}` answered a streaming request with `{}`, not an event stream",
            up.name,
            crate::error::bounded(content_type, 128)
        );
        // Some providers and proxies answer a failed stream with 200 and a JSON
        // error body: its message says what went wrong.
        if holds_ignoring_case(content_type, "json") {
            if let Ok(body) = collect(upstream_body, idle, deadline, &up.name).await {
                if let Some(m) = crate::providers::json_error_message(&body) {
                    message.push_str(": ");
                    message.push_str(&m);
                }
            }
        }
        let e =
            GatewayError::new(ErrorKind::BadUpstream, message).with_code(Code::UpstreamBadResponse);
        return Err(attempt.failed(e));
    }
    if chat.is_stream() {
        let transcoder = up.adapter().stream(StreamContext {
            logical_model: chat.model.clone(),
            include_usage: chat.wants_usage_chunk(),
            prompt_tokens_estimate: chat.estimated_input_tokens(),
            track: track || resume.is_some(),
            resume,
        });
        // The leg is boxed before the wait for the commit point, not after: its
        // relay (464 bytes) inline in this future set the future's size, held by
        // every request, streamed or not, while it waits for its answer
        // (`-Zprint-type-sizes`: 1,400 bytes).
        let mut leg = Box::new(Leg {
            relay: SseRelay::new(
                upstream_body,
                transcoder,
                idle,
                deadline,
                &up.name,
                &gw.stream_stop,
            ),
            attempt,
            ep,
            began: sent_at,
            ttft: None,
            upstream_id,
            span: Default::default(),
        });
        let first_content = tokio::time::sleep_until(deadline.min(tokio::time::Instant::from_std(
            sent_at + Duration::from_millis(up.timeouts.first_content_ms),
        )));
        tokio::pin!(first_content);
        let committed =
            std::future::poll_fn(|cx| leg.relay.poll_commit(cx, first_content.as_mut())).await;
        if let Err(e) = committed {
            return Err(leg.attempt.failed(e));
        }
        if leg.relay.produced_content() {
            leg.ttft = Some(leg.attempt.first_token());
        }
        return Ok(Exchanged::Stream(leg));
    }
    let mut upstream_model = None;
    let translated = match collect(upstream_body, idle, deadline, &up.name).await {
        Ok(bytes) => {
            if span.is_on() {
                upstream_model = crate::otel::Answer::parse(&bytes).model;
            }
            up.adapter().response(&bytes, &chat.model)
        }
        Err(e) => Err(e),
    };
    match translated {
        Ok(out) => {
            attempt.succeeded(None);
            if span.is_on() {
                let mut answer = crate::otel::Answer::parse(&out);
                trace.answered(&answer);
                if upstream_model.is_some() {
                    answer.model = upstream_model;
                }
                span.answered(parts.status.as_u16(), &answer);
            }
            let mut resp = body::json(http::StatusCode::OK, out);
            if let Some(id) = upstream_id {
                resp.headers_mut()
                    .insert(crate::request_id::UPSTREAM_HEADER, id);
            }
            Ok(Exchanged::Whole(resp))
        }
        Err(e) => Err(attempt.failed(e)),
    }
}

/// Whether `text` holds `part`, ASCII letters compared without case (a plain scan:
/// `str::contains` sets up a substring searcher, several hundred instructions, for
/// a header value of a few dozen bytes).
fn holds_ignoring_case(text: &str, part: &str) -> bool {
    let (text, part) = (text.as_bytes(), part.as_bytes());
    text.len() >= part.len()
        && text
            .windows(part.len())
            .any(|w| w.eq_ignore_ascii_case(part))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_to_the_cap() {
        assert_eq!(backoff(None, 0), None);
        assert_eq!(
            backoff(Some((100, 2000)), 0),
            Some(Duration::from_millis(100))
        );
        assert_eq!(
            backoff(Some((100, 2000)), 3),
            Some(Duration::from_millis(800))
        );
        assert_eq!(
            backoff(Some((100, 2000)), 10),
            Some(Duration::from_millis(2000))
        );
        assert_eq!(
            backoff(Some((100, 2000)), 60),
            Some(Duration::from_millis(2000))
        );
    }
}
