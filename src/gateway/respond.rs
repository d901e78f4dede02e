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

use http::{HeaderName, HeaderValue, Response};

use crate::server::lines::HeaderLines;

use super::access::Facts;
use super::ctx::RequestCtx;
use super::Gateway;
use crate::body::Body;
use crate::error::{ErrorKind, GatewayError};

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

/// Finishes a chat request's response from what the phases produced, with its
/// gateway fields appended to `lines` (the answer's field lines,
/// [`crate::server::lines`]), and returns it with its access-line facts (`None` when
/// its body writes the line: a stream from a provider).
pub fn respond(
    gw: &Gateway,
    mut ctx: RequestCtx,
    result: Result<Response<Body>, GatewayError>,
    lines: &mut HeaderLines,
) -> (Response<Body>, Option<Box<Facts>>) {
    let mut error = None;
    let mut resp = match result {
        Ok(mut resp) => {
            if let (Some(ep), false) = (ctx.endpoint, ctx.stream) {
                gw.log.served(ep, ctx.started);
            }
            super::limit::settle_whole(&mut ctx, &mut resp, lines);
            resp
        }
        Err(e) => {
            if let Some(permit) = &ctx.permit {
                // No answer. Refused before any upstream attempt (route, scope,
                // context, queue), or every attempt failed (unreachable, an error
                // status, a bad answer): no provider tokens were used, and providers
                // do not bill failed requests, so the charged estimate goes back.
                // A timeout keeps its input estimate: the provider may have read
                // the prompt (and may still be answering).
                let usage = if ctx.attempts > 0 && e.kind == ErrorKind::UpstreamTimeout {
                    crate::api::Usage::new(permit.prompt_estimate, 0)
                } else {
                    crate::api::Usage::default()
                };
                permit.settle(None, &usage);
            }
            let model = gw.registry.models.get(ctx.model.as_str()).map(|m| &*m.name);
            gw.log.failed(ctx.endpoint, model, &e);
            error = Some(e.metric_kind());
            e.to_response()
        }
    };
    stamp(gw, lines, &ctx.snapshot.version_header, Some(&ctx));
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

/// Writes the `x-switchyard-*` headers into the response's field lines `h`
/// ([`HeaderLines`]): the policy `version` (the snapshot's
/// [`version_header`](crate::routing::policy::PolicySnapshot::version_header))
/// always, and what `ctx` recorded when the request reached the gateway. Names that
/// cannot be header values (a control character in a configured name) are left out.
///
/// The version and the endpoint ids are header values made once (with the snapshot,
/// and with the gateway: [`Gateway::endpoint_header`]); route and rule names are
/// checked and copied as they are written.
pub fn stamp(gw: &Gateway, h: &mut HeaderLines, version: &HeaderValue, ctx: Option<&RequestCtx>) {
    h.push(&POLICY_HEADER, version);
    let Some(ctx) = ctx else { return };
    if let Some(route) = &ctx.route {
        h.push_str(&ROUTE_HEADER, route);
    }
    if let Some(rule) = &ctx.rule {
        h.push_str(&RULE_HEADER, rule);
    }
    let hit = matches!(ctx.cache, Some(super::cache::CacheStatus::Hit { .. }));
    if hit {
        h.push(
            &ENDPOINT_HEADER,
            &HeaderValue::from_static(super::log::CACHE_ENDPOINT),
        );
    } else if ctx.served {
        if let Some(v) = ctx.endpoint.and_then(|i| gw.endpoint_header(i)) {
            h.push(&ENDPOINT_HEADER, v);
        }
    }
    if let Some(status) = ctx.cache {
        super::cache::stamp(h, status);
    }
    if ctx.attempts > 0 {
        h.push_u64(&ATTEMPTS_HEADER, u64::from(ctx.attempts));
    }
    h.push(
        &super::schedule::PRIORITY_RESPONSE_HEADER,
        &HeaderValue::from_static(ctx.priority.as_str()),
    );
    if let Some(held) = ctx.held {
        h.push_u64(&super::schedule::HELD_HEADER, super::schedule::millis(held));
    }
    if !ctx.queued.is_zero() {
        h.push_u64(
            &super::schedule::QUEUED_HEADER,
            super::schedule::millis(ctx.queued),
        );
    }
}
