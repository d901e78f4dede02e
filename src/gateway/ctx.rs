//! The per-request context: what every phase reads and writes about one request.
//!
//! One [`RequestCtx`] is made when a chat request arrives and passed by reference
//! through the phases (the model is Pingora's per-request `CTX`). Phases write what
//! they decided (the caller, the route and rule, the plan, the endpoint that served,
//! the attempts made) and the respond and log phases read it, so response headers and
//! request metrics come from one record instead of being patched in at each exit.

use std::sync::Arc;
use std::time::Instant;

use crate::auth::Principal;
use crate::routing::features::Caller;
use crate::routing::policy::PolicySnapshot;

/// One request's context.
#[derive(Debug)]
pub struct RequestCtx {
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
    /// The route that took the request (route phase; `None`: none matched).
    pub route: Option<String>,
    /// The rule (or `default`) that decided (route phase).
    pub rule: Option<String>,
    /// Endpoint indices to try, in order (route phase).
    pub plan: Vec<usize>,
    /// Attempts made so far, across endpoints and retries (dispatch phase).
    pub attempts: u32,
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
    pub held: Option<std::time::Duration>,
    /// How long its attempts waited in endpoint queues, in total (dispatch phase).
    pub queued: std::time::Duration,
}

impl RequestCtx {
    /// A context for a request that arrived at `started`, from `caller`, running on
    /// `snapshot`.
    pub fn new(started: Instant, caller: Caller, snapshot: Arc<PolicySnapshot>) -> RequestCtx {
        RequestCtx {
            started,
            caller,
            principal: Principal::default(),
            snapshot,
            stream: false,
            route: None,
            rule: None,
            plan: Vec::new(),
            attempts: 0,
            endpoint: None,
            served: false,
            permit: None,
            cache: None,
            priority: Default::default(),
            hold_off_peak: false,
            held: None,
            queued: std::time::Duration::ZERO,
        }
    }
}
