//! The route phase: the policy decision, turned into a plan of endpoint indices.
//!
//! The decision runs on the policy snapshot the request loaded and reads the live
//! endpoint statistics in place ([`crate::stats::LiveStats`]): only the endpoints it
//! looks at, so its cost follows the model's endpoints, not the whole fleet's. A `reject` ends the request here; otherwise the plan (the chosen
//! endpoint, then the fallback chain, without duplicates) goes into the context and
//! the retry settings (retries, backoff, the fallback's `on` statuses) into the
//! returned [`Plan`].

use std::time::SystemTime;

use super::ctx::RequestCtx;
use super::Gateway;
use crate::api::ChatRequest;
use crate::error::{Code, ErrorKind, GatewayError};
use crate::policy::checked::CacheSetting;
use crate::policy::interp::strategy::PlanRest;
use crate::policy::interp::{Bits, StrategyCall};
use crate::policy::{Decision, FallbackOn, RequestFeatures};
use crate::routing::policy::PolicySnapshot;

/// How the plan in the context is to be tried.
#[derive(Debug)]
pub struct Plan {
    /// Extra attempts per endpoint on errors that allow a retry on the same endpoint.
    pub retries: u32,
    /// Backoff between retries: first wait and cap, ms.
    pub backoff_ms: Option<(u64, u64)>,
    /// The policy fallback's `on` statuses (`None`: no `on` clause): an attempt that
    /// fails with an upstream status for which [`FallbackOn::matches`] is true moves
    /// on to the next endpoint of the plan even where that status would otherwise be
    /// returned to the client; other statuses are handled as without it.
    // Filled here; dispatch starts reading it when the resilience issue wires it in.
    pub fallback_on: Option<FallbackOn>,
    /// The strategy invocation behind the choice, for `on success` / `on failure`.
    pub call: Option<StrategyCall>,
    /// The route's or rule's `cache` setting (`None`: the config decides).
    pub cache: Option<CacheSetting>,
}

/// Decides `chat` (with `features`) and writes the route, rule and plan into `ctx`.
///
/// # Errors
/// The policy's `reject` (its status); 403 when the caller may use none of the
/// plan's providers; 400 `context_length_exceeded` when no endpoint of the plan has
/// room for the request ([`super::fit`]); 404 `model_not_found` when no route took the
/// request and the model is not configured; 503 when no endpoint is available.
pub fn route(
    gw: &Gateway,
    ctx: &mut RequestCtx,
    chat: &ChatRequest,
    features: &RequestFeatures,
) -> Result<Plan, GatewayError> {
    let Decision {
        route,
        rule,
        reject,
        target,
        plan: chosen,
        rest,
        retries,
        backoff_ms,
        fallback_on,
        call,
        cache,
        priority,
        hold_off_peak,
        ..
    } = decide(gw, &ctx.snapshot, features);
    ctx.hold_off_peak |= hold_off_peak;
    ctx.route = route;
    ctx.rule = rule;
    ctx.priority = priority;
    if let Some(r) = reject {
        // No route took the request and its model is not in the registry.
        if ctx.route.is_none() && r.status == 404 {
            return Err(gw
                .registry
                .model(&chat.model)
                .err()
                .unwrap_or_else(|| GatewayError::rejected(404, &r.message)));
        }
        if r.status != 503 {
            return Err(GatewayError::rejected(r.status, &r.message));
        }
        // Nothing available: when open circuits or providers' pauses are why, say
        // when to come back; pauses alone are the providers' 429.
        let probe = next_probe(gw, &chat.model);
        let paused = next_unpause(gw, &chat.model);
        if let (Some(wait), None) = (paused, probe) {
            if all_paused_for_quota(gw, &chat.model) {
                let endpoints = gw
                    .registry
                    .model(&chat.model)
                    .map(|m| &m.endpoints[..])
                    .unwrap_or_default();
                return Err(super::dispatch::out_of_quota(gw, "model", endpoints));
            }
            return Err(GatewayError::new(
                ErrorKind::RateLimited,
                "every endpoint of the model asked for a pause (Retry-After); retry later",
            )
            .with_code(Code::UpstreamRateLimited)
            .with_retry_after(Some(wait)));
        }
        // A decision with a target rejects only when none of the target's endpoints
        // is available (open circuits, all weights 0): `no_endpoint`. The policy's
        // own `reject 503` has no target and keeps `rejected_by_policy`.
        let mut e = match target {
            Some(_) => no_endpoint(gw, &chat.model, probe),
            None => GatewayError::rejected(r.status, &r.message),
        };
        e.retry_after = match (probe, paused) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        return Err(e);
    }
    // The policy's plan, without unknown indices and repeats (one bit per endpoint,
    // so a long plan costs no quadratic search). Unordered fallbacks (a lazy
    // decision: `plan` is then the pick) are a ranking's other candidates, distinct
    // endpoints, so only the pick can repeat among them.
    let mut plan = chosen;
    let limit = gw.registry.endpoints.len();
    Bits::dedup_below(&mut plan, limit);
    let mut rest = rest;
    if let Some(r) = &mut rest {
        // With a rest, `plan` is the pick alone.
        let pick = plan.first().copied();
        r.retain(|i| i < limit && Some(i) != pick);
    }
    restrict(gw, ctx, &mut plan, rest.as_deref_mut(), &chat.model)?;
    super::fit::fit(gw, ctx, &mut plan, rest.as_deref_mut(), chat, features)?;
    ctx.plan_rest = match rest {
        // The first endpoint was dropped: the fallbacks are needed now.
        Some(r) if plan.is_empty() => {
            r.order_into(&mut plan);
            None
        }
        Some(r) if !r.is_empty() => Some(r),
        _ => None,
    };
    if plan.is_empty() {
        return Err(no_endpoint(gw, &chat.model, None));
    }
    ctx.plan = plan;
    Ok(Plan {
        retries,
        backoff_ms,
        fallback_on,
        call,
        cache,
    })
}

/// Removes the endpoints of providers the caller may not use from `plan` and its
/// unordered fallbacks `rest`.
///
/// # Errors
/// 403 `provider_not_allowed` when that leaves nothing of a non-empty plan.
fn restrict(
    gw: &Gateway,
    ctx: &RequestCtx,
    plan: &mut Vec<usize>,
    rest: Option<&mut PlanRest>,
    model: &str,
) -> Result<(), GatewayError> {
    let rest_len = rest.as_ref().map_or(0, |r| r.len());
    if ctx.principal.providers.is_none() || plan.len() + rest_len == 0 {
        return Ok(());
    }
    let allowed = |i: usize| {
        gw.registry
            .endpoints
            .get(i)
            .and_then(|e| gw.config.providers.get(e.provider))
            .is_some_and(|p| ctx.principal.allows_provider(&p.name))
    };
    plan.retain(|&i| allowed(i));
    let rest_len = rest.map_or(0, |r| {
        r.retain(allowed);
        r.len()
    });
    if plan.len() + rest_len == 0 {
        return Err(GatewayError::new(
            ErrorKind::PermissionDenied,
            format!(
                "this credential may not use any provider that serves model `{}`",
                crate::error::bounded(model, crate::routing::MAX_ECHOED_NAME)
            ),
        )
        .with_code(Code::ProviderNotAllowed));
    }
    Ok(())
}

/// Runs the policy for `features` on `snap`, applying `on pick` state updates.
///
/// Decisions run without a lock. One that has `on pick` updates to apply (smooth
/// weighted round-robin, for one) takes the gateway's decision lock; if some strategy
/// state was written since it started reading ([`crate::stats::StatsStore::state_writes`]),
/// it is discarded and made again under the lock on fresh statistics. So every
/// applied update comes from a decision that saw all earlier picks, requests whose
/// strategy keeps no pick state never wait for one that does, and an uncontended
/// stateful request decides once.
fn decide(gw: &Gateway, snap: &PolicySnapshot, features: &RequestFeatures) -> Decision {
    let seed = rand::random::<u64>();
    let writes = gw.stats.state_writes();
    // Lazy: the fallbacks of a long ranking are ordered only if the first fails.
    let live = || {
        gw.stats
            .live_for(SystemTime::now(), &snap.set().registry, &snap.stats_aligned)
    };
    let stats = live();
    let decision = snap.compiled.decide_lazy(features, &stats, seed);
    if decision.state_updates.is_empty() {
        return decision;
    }
    let _guard = gw.lock_decisions();
    let decision = if gw.stats.state_writes() == writes {
        decision
    } else {
        let stats = live();
        snap.compiled.decide_lazy(features, &stats, seed)
    };
    decision.record_state(&mut &gw.stats);
    decision
}

/// 503 `no_endpoint` for `model`: none of its endpoints may be tried now. With
/// `probe` (the wait before an open circuit breaker's next probe, [`next_probe`])
/// the message says the circuits are why and when to come back (the caller sets
/// `Retry-After`); when every endpoint of the model has `weight: 0` it says they
/// are disabled.
fn no_endpoint(gw: &Gateway, model: &str, probe: Option<std::time::Duration>) -> GatewayError {
    let disabled = || {
        gw.registry.models.get(model).is_some_and(|m| {
            m.endpoints
                .iter()
                .all(|&i| gw.registry.endpoints.get(i).is_some_and(|e| e.weight == 0))
        })
    };
    let shown = crate::error::bounded(model, crate::routing::MAX_ECHOED_NAME);
    let message = match probe {
        Some(wait) => format!(
            "no endpoint is available for model `{shown}`: its endpoints' circuit breakers are open after repeated failures; retry in {} s",
            wait.as_secs().max(1)
        ),
        None if disabled() => format!(
            "no endpoint is available for model `{shown}`: every endpoint of it has `weight: 0` (disabled) in the config"
        ),
        None => format!("no endpoint is available for model `{shown}`"),
    };
    GatewayError::new(ErrorKind::NoEndpoint, message).with_code(Code::NoEndpoint)
}

/// The soonest a provider's pause (`Retry-After`) among `model`'s endpoints ends (at
/// least 1 s), if any is paused.
fn next_unpause(gw: &Gateway, model: &str) -> Option<std::time::Duration> {
    let now = SystemTime::now();
    let m = gw.registry.model(model).ok()?;
    m.endpoints
        .iter()
        .filter_map(|&i| gw.stats.slot(i)?.throttled_for(now))
        .min()
        .map(|d| d.max(std::time::Duration::from_secs(1)))
}

/// Whether every paused endpoint of `model` is paused because our account with its
/// provider is out of quota (none paused for a `Retry-After` alone).
fn all_paused_for_quota(gw: &Gateway, model: &str) -> bool {
    let now = SystemTime::now();
    let Ok(m) = gw.registry.model(model) else {
        return false;
    };
    m.endpoints.iter().all(|&i| {
        gw.stats
            .slot(i)
            .is_none_or(|s| s.throttled_for(now).is_none() || s.out_of_quota_for(now).is_some())
    })
}

/// The soonest an open circuit among `model`'s endpoints lets a probe through
/// (at least 1 s), if any is open.
fn next_probe(gw: &Gateway, model: &str) -> Option<std::time::Duration> {
    let now = std::time::Instant::now();
    let m = gw.registry.model(model).ok()?;
    m.endpoints
        .iter()
        .filter_map(|&i| gw.stats.slot(i)?.breaker().next_probe_in(now))
        .min()
        .map(|d| d.max(std::time::Duration::from_secs(1)))
}
