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
//! the client gets 503 with `Retry-After` set to the next probe.
//!
//! When every attempt failed the client gets one aggregate error listing each
//! attempt (endpoint, status, error, duration). Its status: 429 when every attempt
//! was throttled (with the shortest `Retry-After` any provider gave), 504 when every
//! attempt timed out, else the last attempt's.
//!
//! Only errors before the first byte reaches the client are retried: after that, the
//! stream ends with an error event (`egress::relay`).

use std::fmt::Write as _;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use http::Response;

use super::ctx::RequestCtx;
use super::outcome::{Attempt, DecisionContext, StreamLog};
use super::route::Plan;
use super::Gateway;
use crate::api::ChatRequest;
use crate::body::{self, Body};
use crate::egress::relay::{collect, SseRelay};
use crate::error::{Code, ErrorKind, Fault, GatewayError, Retry};
use crate::providers::StreamContext;
use crate::stats::{ratelimit, Admission};

/// What one failed attempt was, for the aggregate error.
struct Failed {
    endpoint: usize,
    error: GatewayError,
    took: Duration,
}

/// Tries the plan in `ctx` until one endpoint answers; the aggregate error otherwise.
///
/// # Errors
/// One attempt failed: its error. Several: the aggregate error (see the module doc).
/// Nothing could be tried: 503.
pub async fn dispatch(
    gw: &Arc<Gateway>,
    ctx: &mut RequestCtx,
    chat: &ChatRequest,
    plan: &Plan,
    decided: Arc<DecisionContext>,
) -> Result<Response<Body>, GatewayError> {
    let max_attempts = gw.config.server.max_attempts;
    let budget_end = ctx.started + Duration::from_millis(gw.config.server.retry_budget_ms);
    let mut failed: Vec<Failed> = Vec::new();
    // The shortest wait until a skipped endpoint's circuit lets a probe through.
    let mut skipped_for: Option<Duration> = None;
    'plan: for i in 0..ctx.plan.len() {
        let ep = ctx.plan[i];
        for retry in 0..=plan.retries {
            if ctx.attempts >= max_attempts || (ctx.attempts > 0 && Instant::now() >= budget_end) {
                break 'plan;
            }
            let probe = match admit(gw, ep) {
                Admission::Allow => false,
                Admission::Probe => true,
                Admission::Reject(wait) => {
                    // Open circuit, or its one probe is out: skip it, uncounted.
                    skipped_for = Some(skipped_for.map_or(wait, |w: Duration| w.min(wait)));
                    continue 'plan;
                }
            };
            ctx.attempts += 1;
            ctx.endpoint = Some(ep);
            let began = Instant::now();
            let attempt = Attempt::begin(gw, ep, decided.clone(), ctx.started, probe);
            let e = match exchange(gw, ep, chat, attempt).await {
                Ok(resp) => {
                    ctx.served = true;
                    return Ok(resp);
                }
                Err(e) => e,
            };
            gw.log
                .attempt_failed(ep, ctx.attempts, &ctx.snapshot.version, &e);
            let retry_safety = e.retry;
            let wait = backoff(plan.backoff_ms, retry)
                .unwrap_or_default()
                .max(e.retry_after.unwrap_or_default());
            failed.push(Failed {
                endpoint: ep,
                error: e,
                took: began.elapsed(),
            });
            if !retry_safety.other_endpoint() {
                break 'plan;
            }
            if !retry_safety.same_endpoint() || retry == plan.retries {
                continue 'plan;
            }
            if Instant::now() + wait >= budget_end {
                // The wait would outlast the budget: the next endpoint instead.
                continue 'plan;
            }
            if !wait.is_zero() {
                tokio::time::sleep(wait).await;
            }
        }
    }
    if failed.is_empty() {
        if let Some(wait) = skipped_for {
            return Err(GatewayError::new(
                ErrorKind::NoEndpoint,
                "every endpoint of the plan has an open circuit; retry later",
            )
            .with_code(Code::NoEndpoint)
            .with_retry_after(Some(wait.max(Duration::from_secs(1)))));
        }
    }
    Err(aggregate(gw, failed))
}

/// Asks endpoint `ep`'s circuit breaker whether an attempt may go now, reporting a
/// move to half-open.
fn admit(gw: &Gateway, ep: usize) -> Admission {
    let Some(slot) = gw.stats.slot(ep) else {
        return Admission::Allow;
    };
    let breaker = slot.breaker();
    let (admission, changed) = breaker.admit(Instant::now());
    if let Some(state) = changed {
        gw.log.circuit(ep, state, breaker.cooldown());
    }
    admission
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

/// One attempt on endpoint `ep`: send, read the head, and either translate the whole
/// answer or hand the client a live relay of the stream.
async fn exchange(
    gw: &Arc<Gateway>,
    ep: usize,
    chat: &ChatRequest,
    attempt: Attempt,
) -> Result<Response<Body>, GatewayError> {
    let endpoint = &gw.registry.endpoints[ep];
    let up = &gw.upstreams[endpoint.provider];
    let sent = match up.send(&endpoint.upstream_model, chat).await {
        Ok(s) => s,
        Err(e) => return Err(attempt.failed(e)),
    };
    if let Some(c) = ratelimit::capacity(sent.response.headers(), SystemTime::now()) {
        if let Some(slot) = gw.stats.slot(ep) {
            slot.record_capacity(c, SystemTime::now());
        }
    }
    let deadline =
        tokio::time::Instant::from_std(sent.sent_at + Duration::from_millis(up.timeouts.total_ms));
    let idle = Duration::from_millis(up.timeouts.idle_ms);
    let (parts, upstream_body) = sent.response.into_parts();
    if !parts.status.is_success() {
        let err = match collect(upstream_body, idle, deadline, &up.name).await {
            Ok(bytes) => up
                .adapter()
                .error(parts.status.as_u16(), &parts.headers, &bytes),
            Err(e) => e,
        };
        return Err(attempt.failed(err));
    }
    let content_type = parts
        .headers
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    if chat.is_stream() && !content_type.is_empty() && !content_type.contains("event-stream") {
        // Not a stream (an HTML error page, or JSON from a provider that ignored
        // `stream`): fail before the first byte so the fallback chain can act.
        let e = GatewayError::new(
            ErrorKind::BadUpstream,
            format!(
                "provider `{}` answered a streaming request with `{}`, not an event stream",
                up.name,
                crate::error::bounded(content_type, 128)
            ),
        )
        .with_code(Code::UpstreamBadResponse);
        return Err(attempt.failed(e));
    }
    if chat.is_stream() {
        let transcoder = up.adapter().stream(StreamContext {
            logical_model: chat.model.clone(),
            include_usage: chat.wants_usage_chunk(),
            prompt_tokens_estimate: chat.estimated_input_tokens(),
        });
        let relay = SseRelay::new(
            upstream_body,
            transcoder,
            idle,
            deadline,
            &up.name,
            Box::new(StreamLog::new(attempt)),
            &gw.stream_stop,
        );
        return Ok(body::event_stream(Body::new(relay)));
    }
    let translated = match collect(upstream_body, idle, deadline, &up.name).await {
        Ok(bytes) => up.adapter().response(&bytes, &chat.model),
        Err(e) => Err(e),
    };
    match translated {
        Ok(out) => {
            attempt.succeeded(None);
            Ok(body::json(http::StatusCode::OK, out))
        }
        Err(e) => Err(attempt.failed(e)),
    }
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
