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

use http::{HeaderMap, HeaderName, HeaderValue, Response};

use super::access::Facts;
use super::ctx::RequestCtx;
use super::Gateway;
use crate::body::Body;
use crate::error::GatewayError;

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
    stamp(gw, resp.headers_mut(), &ctx.snapshot.version, Some(&ctx));
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

/// Writes the `x-switchyard-*` headers: the policy `version` always, and what `ctx`
/// recorded when the request reached the gateway. Values that cannot be header values
/// (non-visible ASCII in a configured name) are left out.
pub fn stamp(gw: &Gateway, h: &mut HeaderMap, version: &str, ctx: Option<&RequestCtx>) {
    put(h, POLICY_HEADER, version);
    let Some(ctx) = ctx else { return };
    if let Some(route) = &ctx.route {
        put(h, ROUTE_HEADER, route);
    }
    if let Some(rule) = &ctx.rule {
        put(h, RULE_HEADER, rule);
    }
    if ctx.served {
        if let Some(ep) = ctx.endpoint.and_then(|i| gw.registry.endpoints.get(i)) {
            put(h, ENDPOINT_HEADER, &ep.id);
        }
    }
    if let Some(status) = ctx.cache {
        if matches!(status, super::cache::CacheStatus::Hit { .. }) {
            put(h, ENDPOINT_HEADER, super::log::CACHE_ENDPOINT);
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

fn put(h: &mut HeaderMap, name: HeaderName, value: &str) {
    if let Ok(v) = HeaderValue::from_str(value) {
        h.insert(name, v);
    }
}
