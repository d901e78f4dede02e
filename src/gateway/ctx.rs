//! The per-request context: what every phase reads and writes about one request.
//!
//! One [`RequestCtx`] is made when a chat request arrives and passed by reference
//! through the phases (the model is Pingora's per-request `CTX`). Phases write what
//! they decided (the caller, the route and rule, the plan, the endpoint that served,
//! the attempts made) and the respond and log phases read it, so response headers and
//! request metrics come from one record instead of being patched in at each exit.

use std::sync::Arc;
use std::time::{Duration, Instant};

use http::HeaderValue;

use super::access::Tried;
use crate::api::Usage;
use crate::auth::Principal;
use crate::policy::names::Name;
use crate::routing::features::Caller;
use crate::routing::policy::PolicySnapshot;

/// One request's context.
#[derive(Debug)]
pub struct RequestCtx {
    /// The request id (`x-request-id`, [`crate::request_id`]): echoed, forwarded on
    /// every attempt, and the access line's `request_id`.
    pub id: HeaderValue,
    /// When the request arrived (its headers were read), for latency metrics.
    pub started: Instant,
    /// Who sent it, as policies see it (admit phase: from [`RequestCtx::principal`]).
    pub caller: Caller,
    /// Who sent it, as authentication established it (admit phase): its scope,
    /// metadata and its key entry's own limits and budget for admission.
    pub principal: Principal,
    /// The policy set the request runs on, loaded once: a reload never mixes versions
    /// within a request.
    pub snapshot: Arc<PolicySnapshot>,
    /// Whether the client asked for a stream (normalize phase): a stream's outcome is
    /// logged when it ends, not when its head is sent.
    pub stream: bool,
    /// The logical model asked for (normalize phase; empty before it).
    pub model: String,
    /// The route that took the request (route phase; `None`: none matched).
    pub route: Option<Name>,
    /// The rule (or `default`) that decided (route phase).
    pub rule: Option<Name>,
    /// The strategy behind the decision (route phase; `Some(None)`: the built-in
    /// `priority`; `None`: no strategy ran).
    pub strategy: Option<Option<u32>>,
    /// Endpoint indices to try, in order (route phase; dispatch takes them).
    pub plan: Vec<usize>,
    /// Fallbacks to try after `plan`, not yet ordered (route phase; a long ranking's,
    /// see [`crate::policy::Decision::rest`]); dispatch orders them if it gets past
    /// `plan`.
    pub plan_rest: Option<Box<crate::policy::interp::strategy::PlanRest>>,
    /// Attempts made so far, across endpoints and retries (dispatch phase).
    pub attempts: u32,
    /// Every attempt with its endpoint, status and duration (dispatch phase), for
    /// the access line.
    pub tried: Tried,
    /// The endpoint of the last attempt: the one that served, or the last to fail.
    pub endpoint: Option<usize>,
    /// Whether [`RequestCtx::endpoint`] answered successfully (its response is the
    /// client's).
    pub served: bool,
    /// The request's claim on the rate limits and budgets (admit phase); settle it
    /// with the actual usage when the answer ends ([`crate::limits::Permit::settle`]).
    pub permit: Option<Arc<crate::limits::Permit>>,
    /// What the cache phase did (`None`: caching was not in play).
    pub cache: Option<super::cache::CacheStatus>,
    /// The request's priority: the caller's starting level (admit phase), then the
    /// policy's final one (route phase); what the queues and the hold read.
    pub priority: crate::policy::ast::PriorityLevel,
    /// The caller (`x-switchyard-defer: off-peak`) or the taken route or rule (`hold
    /// off_peak`) opted into the off-peak hold.
    pub hold_off_peak: bool,
    /// How long the request was held for the off-peak window (`None`: not held).
    pub held: Option<Duration>,
    /// How long its attempts waited in endpoint queues, in total (dispatch phase).
    pub queued: Duration,
    /// The served whole answer's usage, as the respond phase read it (streams keep
    /// their own).
    pub usage: Option<Usage>,
    /// The serving provider's id of its answer ([`crate::request_id::upstream`]).
    pub upstream_id: Option<HeaderValue>,
    /// The response body writes the access line itself (a stream from a provider,
    /// which has its own copy of the facts): the respond phase hands none out.
    pub body_logs: bool,
    /// The request body as read, kept for the access line when
    /// `telemetry.access_log.bodies` is on (a reference to the same bytes, no copy).
    pub request_body: Option<bytes::Bytes>,
    /// The request's server span and the parent of its children (empty when
    /// tracing is off, `crate::otel`).
    pub trace: crate::otel::RequestTrace,
}

impl RequestCtx {
    /// A context for request `id` that arrived at `started`, from `caller`, running
    /// on `snapshot`.
    pub fn new(
        id: HeaderValue,
        started: Instant,
        caller: Caller,
        snapshot: Arc<PolicySnapshot>,
    ) -> RequestCtx {
        RequestCtx {
            id,
            started,
            caller,
            principal: Principal::default(),
            snapshot,
            stream: false,
            model: String::new(),
            route: None,
            rule: None,
            strategy: None,
            plan: Vec::new(),
            plan_rest: None,
            attempts: 0,
            tried: Tried::new(),
            endpoint: None,
            served: false,
            permit: None,
            cache: None,
            priority: Default::default(),
            hold_off_peak: false,
            held: None,
            queued: Duration::ZERO,
            usage: None,
            upstream_id: None,
            body_logs: false,
            request_body: None,
            trace: Default::default(),
        }
    }
}
