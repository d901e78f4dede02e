//! The request path of `POST /v1/chat/completions`, as named phases over one
//! [`RequestCtx`].
//!
//! ```text
//!  normalize ─► admit ─► route ─► cache ─► dispatch ─► respond ─► log
//!  parse,       (auth,    policy   (lookup, attempts    headers,   metrics, the
//!  validate,    limits,   decision  store)  over the     errors →   access line
//!  features,    budgets,  → plan of         plan: one    responses  at the end
//!  caller       queue)    endpoints         exchange                of the body
//!                                           each
//! ```
//!
//! Every request has an id ([`crate::request_id`]), chosen by ingress before any
//! phase runs: every log line of the request sits in its `request` span, every
//! attempt sends it upstream as `x-request-id`, and its one access line
//! ([`access`]) names it.
//!
//! Each phase is a module, and [`Gateway::chat`] reads top to bottom as the chain.
//! Any phase may end the request with an error; the error carries its status, fault
//! and retry safety, and `respond` turns it into the response. Phases with no job
//! yet are not stubbed, only named here with where they go.
//! - **admit** (`admit`): authentication runs first, before the body is parsed
//!   (an unauthenticated client gets 401, never a 400 about its body), then the
//!   model is checked against the caller's scope once normalize has parsed it; the
//!   provider scope filters the plan in `route`. Rate limits and spend budgets
//!   (`limit`) and the request's priority (`schedule`) are its other steps.
//! - **queue** (`schedule`, `crate::sched`): a low-priority request that opted in
//!   waits for the off-peak window before dispatch; each attempt takes a slot of
//!   its endpoint's gate (`max_in_flight`), waiting in a per-priority queue when
//!   the endpoint is full.
//! - **cache** ([`cache`], between route and dispatch): a lookup that can answer at
//!   once, without dispatch, and a store when the exchange completes (a whole
//!   answer here, a stream by its body when it ends cleanly).
//!
//! Each request loads the policy snapshot once and finishes on it, so a reload never
//! mixes versions within a request; the version is sent as `x-switchyard-policy`.
//! What every attempt did flows back into the endpoint statistics (`outcome`).
//! A streamed answer is a `stream` body that keeps the dispatch phase's attempt
//! loop, so it can continue on another endpoint when a stream breaks mid-answer.

pub mod access;
mod admit;
pub mod cache;
mod cache_entry;
mod ctx;
mod dispatch;
mod fit;
mod limit;
mod log;
mod normalize;
mod outcome;
mod respond;
mod route;
mod schedule;
mod stream;

pub use access::Facts;
pub use ctx::RequestCtx;
pub use log::{InFlight, RequestLog};
pub use respond::{
    stamp, ATTEMPTS_HEADER, ENDPOINT_HEADER, POLICY_HEADER, ROUTE_HEADER, RULE_HEADER,
};
pub use schedule::{DEFER_HEADER, HELD_HEADER, PRIORITY_HEADER, QUEUED_HEADER};

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Response};

use crate::body::Body;
use crate::config::Config;
use crate::egress::relay::StreamStop;
use crate::egress::Upstream;
use crate::error::GatewayError;
use crate::routing::features::Caller;
use crate::routing::policy::PolicyCell;
use crate::routing::Registry;
use crate::stats::StatsStore;

/// Everything the request path reads, built once at startup (`crate::app`).
#[derive(Debug)]
pub struct Gateway {
    /// The validated config.
    pub config: Config,
    /// One per provider, in config order.
    pub upstreams: Vec<Upstream>,
    /// Logical models and their endpoints: the one endpoint index space of the
    /// request path (the policy registry, the statistics and the plan use it too).
    pub registry: Registry,
    /// The live policy set; replaced whole on reload.
    pub policy: PolicyCell,
    /// Endpoint statistics, indexed like `registry.endpoints`.
    pub stats: StatsStore,
    /// Per-request metrics (the log phase).
    pub log: RequestLog,
    /// Checks client credentials (`auth:`).
    pub auth: crate::auth::Authenticator,
    /// Ends every live stream with an error event when the shutdown drain runs out.
    pub stream_stop: StreamStop,
    /// Rate limits and spend budgets (the admit phase's `limit` step).
    pub limits: crate::limits::Limiter,
    /// The response cache (the cache phase, `cache:`).
    pub cache: cache::CachePhase,
    /// Endpoint queues and the off-peak hold (`scheduler:`, `max_in_flight`).
    pub sched: crate::sched::Scheduler,
    /// Trace export (`telemetry:`; off by default).
    pub tracer: crate::otel::Tracer,
    /// The gateway-wide budget of buffered request body bytes
    /// (`server.max_buffered_bytes`), charged by ingress as bodies arrive.
    pub body_budget: Arc<crate::budget::BodyBudget>,
    /// Serializes every read-modify-write of strategy state: decisions that apply
    /// `on pick` updates (`route`) and `on success` / `on failure` updates
    /// (`outcome`), so stateful strategies see every earlier pick and outcome.
    decision_lock: Mutex<()>,
    /// The `created` of every model object of `GET /v1/models`: Unix seconds when
    /// this gateway built its model registry from the configuration (its start; the
    /// registry is not reloaded while it runs). OpenAI's field is when the model was
    /// created; a logical model of the gateway comes into being with the registry.
    models_created: u64,
    models_json: Bytes,
    /// Per endpoint (indexed like `registry.endpoints`), its id as the
    /// `x-switchyard-endpoint` value; `None` when the id cannot be a header value.
    endpoint_headers: Vec<Option<HeaderValue>>,
    /// Requests per endpoint over the last minutes (written by the log phase, read
    /// by `GET /admin/traffic`).
    pub traffic: crate::recent::Traffic,
    /// The last routing decisions (written by the log phase, read by
    /// `GET /admin/decisions`).
    pub decisions: crate::recent::DecisionRing,
}

impl Gateway {
    /// The gateway for `config`, sending through `upstreams` (one per provider, in
    /// config order), serving the policy set in `policy`, checking credentials with
    /// `auth`, tracing requests with `tracer`.
    pub fn new(
        config: Config,
        upstreams: Vec<Upstream>,
        policy: PolicyCell,
        stream_stop: StreamStop,
        auth: crate::auth::Authenticator,
        tracer: crate::otel::Tracer,
    ) -> Gateway {
        let registry = Registry::from_config(&config, |name| {
            config.providers.iter().position(|p| p.name == name)
        });
        let stats = StatsStore::from_config(&config);
        let models_created = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let models_json = model_list(registry.model_order.iter().map(|m| &**m), models_created);
        let cache = cache::CachePhase::new(&config, &registry, policy.load().set());
        let registry_len = registry.endpoints.len();
        let endpoint_headers = registry
            .endpoints
            .iter()
            .map(|e| HeaderValue::from_str(&e.id).ok())
            .collect();
        let body_budget = crate::budget::BodyBudget::new(
            config
                .server
                .max_buffered_bytes
                .unwrap_or_else(|| crate::budget::machine_default(config.server.max_body_bytes)),
        );
        Gateway {
            body_budget,
            cache,
            sched: crate::sched::Scheduler::new(&config.scheduler, &registry),
            log: RequestLog::new(&config, &registry),
            limits: crate::limits::Limiter::new(&config, &registry),
            tracer,
            config,
            upstreams,
            registry,
            policy,
            stats,
            stream_stop,
            auth,
            decision_lock: Mutex::new(()),
            models_created,
            models_json,
            endpoint_headers,
            traffic: crate::recent::Traffic::new(registry_len),
            decisions: crate::recent::DecisionRing::default(),
        }
    }

    /// Endpoint `index`'s id as the `x-switchyard-endpoint` header value (`None`:
    /// no such endpoint, or its id is not a valid header value).
    pub fn endpoint_header(&self, index: usize) -> Option<&HeaderValue> {
        self.endpoint_headers.get(index)?.as_ref()
    }

    /// The `GET /v1/models` body (OpenAI's list shape, `{"object":"list","data":[..]}`,
    /// <https://platform.openai.com/docs/api-reference/models/list>) as `principal`
    /// sees it: every model in config order, or those its key's `models` scope allows.
    pub fn models_json(&self, principal: &crate::auth::Principal) -> Bytes {
        if principal.models.is_none() {
            return self.models_json.clone();
        }
        model_list(
            self.registry
                .model_order
                .iter()
                .map(|m| &**m)
                .filter(|m| principal.allows_model(m)),
            self.models_created,
        )
    }

    /// The `GET /v1/models/{model}` body (OpenAI's model object,
    /// <https://platform.openai.com/docs/api-reference/models/retrieve>).
    ///
    /// # Errors
    /// 404 `model_not_found` for a model that does not exist and, alike, for one
    /// `principal` may not use (the answer does not tell which models exist).
    pub fn model_json(
        &self,
        name: &str,
        principal: &crate::auth::Principal,
    ) -> Result<Bytes, GatewayError> {
        if !principal.allows_model(name) {
            return Err(crate::routing::model_not_found(name));
        }
        let model = self.registry.model(name)?;
        Ok(Bytes::from(
            serde_json::to_vec(&model_object(&model.name, self.models_created)).unwrap_or_default(),
        ))
    }

    /// Serves one chat completion request `id`: `body` as read by ingress, the
    /// client's `headers`, `started` when its headers arrived. Returns the response
    /// and the facts of its access line, which the caller writes when the response
    /// body ends ([`Facts::emit`]); `None` when the body writes it itself (a stream
    /// from a provider). The gateway's fields of the answer (`x-switchyard-*`,
    /// `x-ratelimit-*`, the cache's) are appended to `lines`, the answer's field
    /// lines ([`crate::server::lines`]).
    pub async fn chat(
        self: &Arc<Self>,
        body: Bytes,
        headers: &HeaderMap,
        started: Instant,
        id: HeaderValue,
        lines: &mut crate::server::lines::HeaderLines,
    ) -> (Response<Body>, Option<Box<Facts>>) {
        let mut unanswered = Unanswered {
            gw: self,
            ctx: None,
        };
        // Made in a block that ends before the await: a local the context was moved
        // out of kept its 888 bytes in this future beside the `Unanswered` holding
        // it, for the request's whole life (`-Zprint-type-sizes`).
        let ctx = unanswered.ctx.insert({
            let mut ctx = RequestCtx::new(id, started, Caller::default(), self.policy.load_full());
            ctx.trace = crate::otel::RequestTrace::start(&self.tracer, headers, started, &ctx.id);
            if self.config.telemetry.access_log.bodies {
                ctx.request_body = Some(body.clone());
            }
            ctx
        });
        // Boxed: a future is moved whole (its full size, not the part in use) into
        // its parent's state when first awaited, and the phases' future (about
        // 3 KiB, the dispatch's and the cache's inside it) sat inline in this one,
        // in `ingress::route`'s and in the request's box, copied at each of those
        // three steps: about 9 KiB of copies per request (`memcpy` was 8% of the
        // gateway's user time under the JSON load, `perf record --call-graph
        // dwarf`). Boxed here it is copied once, for one allocation.
        let mut phases = Box::pin(self.phases(ctx, body, headers));
        // At the drain deadline of a shutdown a request still waiting for its answer
        // (a provider slow to answer, a queue, the off-peak hold) is answered 503
        // `gateway_shutdown` and its upstream work dropped, instead of the connection
        // being cut under it a second later; the server wakes its task then.
        let result =
            std::future::poll_fn(|cx| match std::future::Future::poll(phases.as_mut(), cx) {
                std::task::Poll::Pending if self.stream_stop.is_stopped() => {
                    std::task::Poll::Ready(Err(shutting_down()))
                }
                polled => polled,
            })
            .await;
        drop(phases);
        match unanswered.ctx.take() {
            Some(ctx) => respond::respond(self, ctx, result, lines),
            // Never: the context is taken only here.
            None => (
                GatewayError::new(crate::error::ErrorKind::Internal, "request context lost")
                    .to_response(),
                None,
            ),
        }
    }

    /// admit (authenticate, priority) → normalize → admit (model scope, limits and
    /// budgets, which set `request.budget_remaining`) → features → route → cache (a
    /// hit ends here) → the off-peak hold → dispatch (a queue slot per attempt) →
    /// cache (store a whole answer).
    async fn phases(
        self: &Arc<Self>,
        ctx: &mut RequestCtx,
        body: Bytes,
        headers: &HeaderMap,
    ) -> Result<Response<Body>, GatewayError> {
        let (chat, plan, decided, mut ticket) = match self.prepare(ctx, body, headers).await? {
            Prepared::Served(resp) => return Ok(resp),
            Prepared::Dispatch(chat, plan, decided, ticket) => (chat, plan, decided, ticket),
        };
        let mut resp = dispatch::dispatch(self, ctx, chat, &plan, decided, &mut ticket).await?;
        if let Some(ticket) = ticket {
            cache::store_whole(self, ctx, *ticket, &mut resp);
        }
        Ok(resp)
    }

    /// The phases before the dispatch ([`Gateway::phases`]), in a future of their
    /// own. Their request and features are held across three awaits (admission,
    /// cache lookup, off-peak hold); in the phases' own future such locals were laid
    /// out apart from every other state's, so their 616 bytes stayed in it for the
    /// whole dispatch (`-Zprint-type-sizes`: 3,184 bytes). Awaited as one future, its
    /// room is shared with the dispatch's.
    async fn prepare(
        self: &Arc<Self>,
        ctx: &mut RequestCtx,
        body: Bytes,
        headers: &HeaderMap,
    ) -> Result<Prepared, GatewayError> {
        admit::authenticate(self, ctx, headers)?;
        schedule::admit(ctx, headers)?;
        let mut chat = normalize::parse(ctx, body, headers)?;
        ctx.trace.requested(&chat);
        chat.headers = crate::egress::forward::candidates(headers);
        // Every attempt sends the request's id as `x-request-id` when it is a UUID
        // (`request_id::upstream_value` says why not otherwise), and as
        // `x-client-request-id` where the forwarding rule sends that name, unless
        // the client set it (`egress::forward::request_id`).
        chat.request_id = Some(ctx.id.clone());
        admit::check_model(ctx, &chat)?;
        limit::admit(self, ctx, &chat).await?;
        let features = normalize::request_features(self, ctx, &chat, headers);
        let began = ctx.trace.now();
        let mut plan = route::route(self, ctx, &chat, &features)?;
        ctx.strategy = plan.call.as_ref().map(|c| c.strategy);
        ctx.trace
            .child_since("decide", began, || self.decision_attributes(ctx));
        let began = ctx.trace.now();
        // Boxed, and only when the cache is in play: its future (1.8 KB) inline set
        // this one's size for the whole request (`-Zprint-type-sizes`).
        let looked = if cache::in_play(self, plan.cache) {
            Box::pin(cache::lookup(self, ctx, &chat, headers, plan.cache)).await
        } else {
            Ok(cache::Lookup::Dispatch(None))
        };
        if let Some(status) = ctx.cache {
            ctx.trace.child_since("cache lookup", began, || {
                vec![opentelemetry::KeyValue::new(
                    "switchyard.cache",
                    status.as_str(),
                )]
            });
        }
        let ticket = match looked? {
            cache::Lookup::Served(resp) => return Ok(Prepared::Served(resp)),
            cache::Lookup::Dispatch(ticket) => ticket,
        };
        normalize::set_aside_messages(&mut chat);
        schedule::hold(self, ctx).await;
        let decided = Arc::new(outcome::DecisionContext {
            snapshot: ctx.snapshot.clone(),
            features,
            call: plan.call.take(),
        });
        Ok(Prepared::Dispatch(Arc::new(chat), plan, decided, ticket))
    }

    /// The `decide` span's attributes: the route, rule, strategy, priority and plan
    /// the policy decision produced (traced requests only).
    fn decision_attributes(&self, ctx: &RequestCtx) -> Vec<opentelemetry::KeyValue> {
        use opentelemetry::KeyValue;
        let mut attrs = vec![
            KeyValue::new("switchyard.policy", ctx.snapshot.version.to_string()),
            KeyValue::new("switchyard.priority", ctx.priority.as_str()),
        ];
        if let Some(r) = &ctx.route {
            attrs.push(KeyValue::new("switchyard.route", r.clone()));
        }
        if let Some(r) = &ctx.rule {
            attrs.push(KeyValue::new("switchyard.rule", r.clone()));
        }
        let order =
            crate::policy::interp::strategy::PlanRest::whole(&ctx.plan, ctx.plan_rest.as_deref());
        let plan: Vec<opentelemetry::StringValue> = order
            .iter()
            .filter_map(|&i| self.registry.endpoints.get(i))
            .map(|e| e.id.to_string().into())
            .collect();
        attrs.push(KeyValue::new(
            "switchyard.plan",
            opentelemetry::Value::Array(plan.into()),
        ));
        attrs
    }

    /// Takes the decision lock (see the field); a poisoned lock is taken anyway, as
    /// the state it guards is a plain value map.
    fn lock_decisions(&self) -> MutexGuard<'_, ()> {
        self.decision_lock.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// One model as OpenAI's model object (`id`, `object: "model"`, `created`,
/// `owned_by`; OpenAI API reference, "The model object"). `created` is Unix seconds:
/// when the gateway built its model registry ([`Gateway`]'s `models_created`), not
/// when a provider trained the model behind it, which the gateway does not know.
fn model_object(name: &str, created: u64) -> serde_json::Value {
    serde_json::json!({"id": name, "object": "model", "created": created, "owned_by": "switchyard"})
}

/// The models `names` as OpenAI's list (`{"object":"list","data":[..]}`), each
/// `created` at Unix second `created`.
fn model_list<'a>(names: impl Iterator<Item = &'a str>, created: u64) -> Bytes {
    let data: Vec<serde_json::Value> = names.map(|n| model_object(n, created)).collect();
    Bytes::from(
        serde_json::to_vec(&serde_json::json!({"object": "list", "data": data}))
            .unwrap_or_default(),
    )
}

/// The answer to a request still waiting for its own when the shutdown's drain
/// deadline passes (503, `gateway_shutdown`; the stream's error event says the same).
#[cold]
fn shutting_down() -> GatewayError {
    GatewayError::new(
        crate::error::ErrorKind::ShuttingDown,
        "the gateway is shutting down and the answer did not come before its drain deadline (server.drain_timeout_ms); retry the request",
    )
    .with_code(crate::error::Code::GatewayShutdown)
}

/// What the phases before the dispatch ([`Gateway::prepare`]) end with.
enum Prepared {
    /// The answer, from the cache.
    Served(Response<Body>),
    /// The request to dispatch (shared by its attempts), the routing plan, the
    /// decision's context for outcome updates, and the cache's ticket to store the
    /// answer under.
    Dispatch(
        Arc<crate::api::ChatRequest>,
        route::Plan,
        Arc<outcome::DecisionContext>,
        Option<Box<cache::Ticket>>,
    ),
}

/// A chat request whose answer has not been made yet ([`Gateway::chat`]). Dropped so,
/// its future dropped because the client left (while the request was held, queued
/// or waiting on a whole answer) or the gateway's drain ran out, it writes the
/// request's access line as `client_gone` with nginx's status 499 for a client that
/// closed before the answer: every chat request gets its one line (README, "Access
/// log"), where such a request got none (found by attack, 2026-12-05). The request
/// metrics are untouched: they count answers.
struct Unanswered<'g> {
    gw: &'g Arc<Gateway>,
    /// The request while its answer is being made (`None` once answered).
    ctx: Option<RequestCtx>,
}

impl Drop for Unanswered<'_> {
    fn drop(&mut self) {
        if let Some(mut ctx) = self.ctx.take() {
            access::Facts::take(&mut ctx, 499).emit(self.gw, access::End::ClientGone);
        }
    }
}
