//! The respond phase: the one place a chat request's response is finished.
//!
//! An error becomes its OpenAI-shaped response here ([`GatewayError::to_response`]),
//! the request is counted (a stream later, when it ends), its access-line facts are
//! taken from the context ([`super::access`]), and every `x-switchyard-*`
//! header is written by [`stamp`], which ingress also calls for the responses that
//! never reach the gateway (so they name the policy version serving now).
//!
//! | header | value |
//! |---|---|
//! | `x-switchyard-policy` | version (content hash) of the policy set the request ran on |
//! | `x-switchyard-route` | the route that took the request (absent: none matched) |
//! | `x-switchyard-rule` | the rule that decided, or `default` |
//! | `x-switchyard-endpoint` | the endpoint that served (successful answers only) |
//! | `x-switchyard-attempts` | upstream attempts made, across endpoints and retries |
//! | `x-switchyard-cache` | `hit`, `miss` or `bypass` (absent: caching not in play) |
//! | `x-switchyard-cache-distance` | Hamming distance of a semantic hit |
//! | `x-upstream-request-id` | the serving provider's id of its answer, when it sent one |
//!
//! (`x-request-id`, the request's own id, is written by ingress on every response.)
//!
//! A cache hit names `cache` as its endpoint.

use std::cell::RefCell;
use std::sync::Arc;

use http::{HeaderMap, HeaderName, HeaderValue, Response};

use super::access::Facts;
use super::ctx::RequestCtx;
use super::Gateway;
use crate::body::Body;
use crate::error::GatewayError;
use crate::policy::names::Name;

/// `x-switchyard-policy`: the policy version (content hash) a request ran on.
pub const POLICY_HEADER: HeaderName = HeaderName::from_static("x-switchyard-policy");
/// `x-switchyard-route`: the route that took the request.
pub const ROUTE_HEADER: HeaderName = HeaderName::from_static("x-switchyard-route");
/// `x-switchyard-rule`: the rule that decided.
pub const RULE_HEADER: HeaderName = HeaderName::from_static("x-switchyard-rule");
/// `x-switchyard-endpoint`: the endpoint that served.
pub const ENDPOINT_HEADER: HeaderName = HeaderName::from_static("x-switchyard-endpoint");
/// `x-switchyard-attempts`: upstream attempts made.
pub const ATTEMPTS_HEADER: HeaderName = HeaderName::from_static("x-switchyard-attempts");

/// Finishes a chat request's response from what the phases produced, and returns
/// it with its access-line facts (`None` when its body writes the line: a stream
/// from a provider).
pub fn respond(
    gw: &Gateway,
    mut ctx: RequestCtx,
    result: Result<Response<Body>, GatewayError>,
) -> (Response<Body>, Option<Facts>) {
    let mut error = None;
    let mut resp = match result {
        Ok(mut resp) => {
            if let (Some(ep), false) = (ctx.endpoint, ctx.stream) {
                gw.log.served(ep, ctx.started);
            }
            super::limit::settle_whole(&mut ctx, &mut resp);
            resp
        }
        Err(e) => {
            gw.log.failed(ctx.endpoint, &e);
            error = Some(e.metric_kind());
            e.to_response()
        }
    };
    stamp(
        gw,
        resp.headers_mut(),
        &ctx.snapshot.version_header,
        Some(&ctx),
    );
    if let Some(up) = &ctx.upstream_id {
        resp.headers_mut()
            .insert(crate::request_id::UPSTREAM_HEADER, up.clone());
    }
    if ctx.body_logs {
        return (resp, None);
    }
    if ctx.upstream_id.is_none() {
        ctx.upstream_id = resp
            .headers()
            .get(crate::request_id::UPSTREAM_HEADER)
            .cloned();
    }
    let mut facts = Facts::take(&mut ctx, resp.status().as_u16());
    facts.error = error;
    (resp, Some(facts))
}

/// Writes the `x-switchyard-*` headers: the policy `version` (the snapshot's
/// [`version_header`](crate::routing::policy::PolicySnapshot::version_header))
/// always, and what `ctx` recorded when the request reached the gateway. Names that
/// cannot be header values (non-visible ASCII in a configured name) are left out.
///
/// The values are built once, not per response: the version with its snapshot, the
/// endpoint ids with the gateway ([`Gateway::endpoint_header`]), and the route and
/// rule names through a per-thread cache of the last ones written ([`named`]).
pub fn stamp(gw: &Gateway, h: &mut HeaderMap, version: &HeaderValue, ctx: Option<&RequestCtx>) {
    h.insert(POLICY_HEADER, version.clone());
    let Some(ctx) = ctx else { return };
    if let Some(route) = &ctx.route {
        if let Some(v) = named(0, route) {
            h.insert(ROUTE_HEADER, v);
        }
    }
    if let Some(rule) = &ctx.rule {
        if let Some(v) = named(1, rule) {
            h.insert(RULE_HEADER, v);
        }
    }
    if ctx.served {
        if let Some(v) = ctx.endpoint.and_then(|i| gw.endpoint_header(i)) {
            h.insert(ENDPOINT_HEADER, v.clone());
        }
    }
    if let Some(status) = ctx.cache {
        if matches!(status, super::cache::CacheStatus::Hit { .. }) {
            h.insert(
                ENDPOINT_HEADER,
                HeaderValue::from_static(super::log::CACHE_ENDPOINT),
            );
        }
        super::cache::stamp(h, status);
    }
    if ctx.attempts > 0 {
        h.insert(ATTEMPTS_HEADER, HeaderValue::from(ctx.attempts));
    }
    h.insert(
        super::schedule::PRIORITY_RESPONSE_HEADER,
        HeaderValue::from_static(ctx.priority.as_str()),
    );
    if let Some(held) = ctx.held {
        h.insert(
            super::schedule::HELD_HEADER,
            HeaderValue::from(super::schedule::millis(held)),
        );
    }
    if !ctx.queued.is_zero() {
        h.insert(
            super::schedule::QUEUED_HEADER,
            HeaderValue::from(super::schedule::millis(ctx.queued)),
        );
    }
}

thread_local! {
    /// Per thread, the last route name (slot 0) and rule name (slot 1) written, with
    /// their header values. The name is held, so its address cannot be reused by
    /// another name while it is the key.
    static NAMED: RefCell<[Option<(Name, HeaderValue)>; 2]> = const { RefCell::new([None, None]) };
}

/// The header value of a route or rule `name` (`slot` 0 or 1): the last one this
/// thread built when `name` is the same name (the same allocation: names come from
/// the policy set, one per route and rule), else built now and kept. `None` when the
/// name cannot be a header value.
///
/// Every request of a route shares its name, so building the value (validating and
/// copying it into a new allocation) once per name and thread, not once per
/// response, is what this saves (`benches/load/callgrind.sh`).
fn named(slot: usize, name: &Name) -> Option<HeaderValue> {
    let build = || HeaderValue::from_str(name).ok();
    // Reached from a thread-local destructor or re-entered: built without the cache.
    let cached = NAMED.try_with(|cell| {
        let mut cache = cell.try_borrow_mut().ok()?;
        let entry = &mut cache[slot];
        if let Some((n, v)) = entry {
            if Arc::ptr_eq(n, name) {
                return Some(v.clone());
            }
        }
        let v = build()?;
        *entry = Some((name.clone(), v.clone()));
        Some(v)
    });
    match cached {
        Ok(Some(v)) => Some(v),
        Ok(None) | Err(_) => build(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn named_values_follow_the_name_not_the_last_one_kept() {
        let a: Name = Arc::from("route-a");
        let b: Name = Arc::from("route-b");
        let a_again: Name = Arc::from("route-a");
        assert_eq!(named(0, &a).unwrap(), "route-a");
        assert_eq!(named(0, &a).unwrap(), "route-a");
        assert_eq!(named(0, &b).unwrap(), "route-b");
        // The other slot is its own.
        assert_eq!(named(1, &a).unwrap(), "route-a");
        assert_eq!(named(0, &b).unwrap(), "route-b");
        // Equal text in another allocation: built again, the same value.
        assert_eq!(named(0, &a_again).unwrap(), "route-a");
        // Not a header value: left out, and the next name still gets its own.
        let bad: Name = Arc::from("bad\nname");
        assert!(named(0, &bad).is_none());
        assert!(named(0, &bad).is_none());
        assert_eq!(named(0, &a).unwrap(), "route-a");
    }
}
