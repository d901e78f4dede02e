//! The cache phase, between route and dispatch (issue 14; seed 001, "Semantic
//! Cache"): a lookup that can answer at once, and the store of a complete answer.
//!
//! Whether a request uses the cache, in order:
//! 1. The policy decision's `cache off` (route or rule): bypass. `cache on`, or
//!    `cache.enabled: true` with no setting: go on; otherwise caching is not in
//!    play and the response carries no `x-switchyard-cache` header.
//! 2. The request's controls: `x-switchyard-cache: off` or `cache-control:
//!    no-store` bypass (neither read nor store); `cache-control: no-cache` skips the
//!    read but stores the answer.
//! 3. The request must be cacheable: temperature exactly 0 unless
//!    `cache.stochastic` (an absent temperature is OpenAI's default, 1), and `n` at
//!    most 1 (several choices are neither replayed nor assembled), from a caller with
//!    a partition of its own (`partition`).
//!
//! The key is the prompt text (the last user message's text parts) within a scope:
//! an XXH3-128 hash of the caller's partition (`cache.share`: by default its
//! organization, else its API key id, so tenants never see each other's entries)
//! and of everything else that changes the answer — the logical model
//! asked for and the one the decision chose (its plan's first endpoint's), that
//! endpoint's upstream model (so a gateway whose model now maps to another upstream
//! model, or another instance on the same Redis configured so, never serves the old
//! model's answers), the client headers that endpoint's provider is sent and that
//! can change its answer (`forward_headers`, OpenAI's organization and project:
//! [`crate::egress::forward::scoped`]), the
//! temperature, both output caps, the tools (sorted by function name, each as
//! canonical JSON with sorted keys), every other request field except those that
//! only label the request (`user`, `metadata`, `store`, `prompt_cache_key`,
//! `safety_identifier`), the system prompt and every earlier turn, and the last
//! turn's non-text parts (each with its place among the text parts) and fields.
//! Whether the answer is wanted as a stream is not
//! in the scope: one entry serves both shapes (`super::cache_entry`). A request
//! whose last message is not a user turn (a tool result, an assistant prefill) is
//! cached exactly: the whole conversation is the scope and the prompt text is empty.
//! The key is exact (no SimHash approximation) with `cache.mode: exact` or the
//! policy's `cache exact`.
//!
//! A hit answers without dispatch: no upstream attempt, no circuit-breaker probe,
//! and the rate-limit permit is settled with zero usage (no provider tokens were
//! spent; the original counts are still in the answer's `usage`). It is logged as
//! endpoint `cache` and named so in `x-switchyard-endpoint`.
//!
//! Only complete answers are stored: a whole 200 with one choice and a finish
//! reason; a stream that reached `[DONE]` on its first endpoint with the provider's
//! finish reason (not the `stop` the gateway writes for one that sent none) and no
//! error event (not cut, not continued elsewhere); never one ended by the
//! provider's content filter (`content_filter`). A stream's chunks are kept
//! by its body as they go out ([`Tee`]), only for requests that may store; the
//! entry is built and written off the request path. An answer from another upstream
//! model than the key's (a failover's) is not stored.
//!
//! A cache failure never fails a request: the store's L2 errors are misses, and an
//! entry that does not decode is a miss.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue, Response};
use http_body_util::BodyExt as _;
use serde_json::Value;
use xxhash_rust::xxh3::Xxh3;

use super::cache_entry::{Entry, Origin, MAX_ENTRY_BYTES};
use super::ctx::RequestCtx;
use super::Gateway;
use crate::api::{ChatRequest, Usage};
use crate::auth::Method;
use crate::body::{self, Body, BoxError};
use crate::cache::{Cache, Key, Settings, Tier};
use crate::config::{CacheConfig, CacheMode, Config, Pricing, Share};
use crate::error::{ErrorKind, GatewayError};
use crate::policy::checked::CacheSetting;
use crate::policy::CheckedPolicySet;
use crate::routing::features::Caller;
use crate::routing::Registry;
use crate::telemetry as t;

/// `x-switchyard-cache`: `hit`, `miss` or `bypass` (request header: `off` bypasses).
pub const CACHE_HEADER: HeaderName = HeaderName::from_static("x-switchyard-cache");
/// `x-switchyard-cache-distance`: the Hamming distance of a semantic hit.
pub const DISTANCE_HEADER: HeaderName = HeaderName::from_static("x-switchyard-cache-distance");

/// Request fields that label a request without changing its answer: left out of the
/// scope.
const LABELS: [&str; 5] = [
    "user",
    "metadata",
    "store",
    "prompt_cache_key",
    "safety_identifier",
];

/// Largest stream kept for the cache, bytes sent: a longer one is not stored.
const MAX_TEE_BYTES: usize = 2 * MAX_ENTRY_BYTES;

/// What the cache did for a request (the respond phase writes it as headers).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CacheStatus {
    /// Answered from the cache; `distance` of a semantic hit.
    Hit {
        /// Hamming distance of a semantic hit; `None` for an exact one.
        distance: Option<u32>,
    },
    /// Looked up, not found: the answer came from upstream (and is stored when
    /// complete).
    Miss,
    /// The cache was not read (request controls, `cache off`, not cacheable).
    Bypass,
}

impl CacheStatus {
    /// The `x-switchyard-cache` value.
    pub fn as_str(self) -> &'static str {
        match self {
            CacheStatus::Hit { .. } => "hit",
            CacheStatus::Miss => "miss",
            CacheStatus::Bypass => "bypass",
        }
    }
}

/// The gateway's cache: the store (built when first needed) and its metrics.
#[derive(Debug)]
pub struct CachePhase {
    config: CacheConfig,
    settings: Settings,
    store: OnceLock<Option<Arc<Cache>>>,
    /// Prices by endpoint id, for USD saved.
    prices: HashMap<Arc<str>, Pricing>,
    /// The store's counters as last exported to `/metrics`.
    exported: [AtomicU64; 3],
    /// Entries this gateway wrote.
    stored: Arc<AtomicU64>,
}

/// What a lookup decided.
pub(super) enum Lookup {
    /// A hit, answered.
    Served(Response<Body>),
    /// Go on to dispatch; store the answer with the ticket when it is complete.
    /// Boxed: the phases hold it through the dispatch, and most requests have none
    /// (192 bytes inline in every request's future, `-Zprint-type-sizes`).
    Dispatch(Option<Box<Ticket>>),
}

/// The right to store one request's answer.
#[derive(Debug)]
pub struct Ticket {
    store: Arc<Cache>,
    key: Key,
    /// The upstream model in the key's scope: an answer from another is not stored.
    upstream_model: String,
    ttl: Duration,
    stored: Arc<AtomicU64>,
    /// The request's estimated input tokens: an answer whose provider reported no
    /// usage is stored with the estimate its client got (or would have got in the
    /// other shape), so a hit replays that, not zeros.
    prompt_estimate: u64,
}

impl CachePhase {
    /// The cache of `config`; the store is built now when `cache.enabled` or a route
    /// or rule of `policy` says `cache on`, else on the first request a reloaded
    /// policy caches.
    pub fn new(config: &Config, registry: &Registry, policy: &CheckedPolicySet) -> CachePhase {
        let c = &config.cache;
        let settings = Settings {
            capacity: c.capacity,
            max_bytes: c.max_bytes,
            tau: c.tau,
            redis: c.redis.clone(),
            redis_timeout: Duration::from_millis(c.redis_timeout_ms),
            ..Settings::default()
        };
        let prices = registry
            .endpoints
            .iter()
            .map(|e| {
                let p = config
                    .providers
                    .get(e.provider)
                    .map(|p| p.pricing)
                    .unwrap_or_default();
                (e.id.clone(), p)
            })
            .collect();
        let phase = CachePhase {
            config: c.clone(),
            settings,
            store: OnceLock::new(),
            prices,
            exported: Default::default(),
            stored: Arc::new(AtomicU64::new(0)),
        };
        if c.enabled || turns_cache_on(policy) {
            phase.store();
        }
        phase
    }

    /// The store, built on first use; `None` when it cannot be built (logged once).
    fn store(&self) -> Option<&Arc<Cache>> {
        self.store
            .get_or_init(|| match Cache::new(&self.settings) {
                Ok(c) => Some(Arc::new(c)),
                Err(e) => {
                    tracing::error!(error = %e, "the response cache cannot be built; caching is off");
                    None
                }
            })
            .as_ref()
    }

    /// Entries this gateway has written since it started (stores run off the
    /// request path, so a complete answer is counted shortly after its response).
    pub fn stored(&self) -> u64 {
        self.stored.load(Ordering::Acquire)
    }

    /// Adds what the store counted since the last call to `/metrics` (evictions, L2
    /// errors, bytes held). Called when `/metrics` renders.
    pub fn export_metrics(&self) {
        let Some(Some(store)) = self.store.get() else {
            return;
        };
        let c = store.counters();
        let now = [
            c.evictions.load(Ordering::Relaxed),
            c.l2_errors.load(Ordering::Relaxed),
            c.bytes.load(Ordering::Relaxed),
        ];
        let prev: Vec<u64> = self
            .exported
            .iter()
            .zip(now)
            .map(|(e, n)| e.swap(n, Ordering::Relaxed))
            .collect();
        metrics::counter!(t::CACHE_EVICTIONS).increment(now[0].saturating_sub(prev[0]));
        metrics::counter!(t::CACHE_L2_ERRORS).increment(now[1].saturating_sub(prev[1]));
        metrics::gauge!(t::CACHE_BYTES).increment(now[2] as f64 - prev[2] as f64);
    }
}

/// Whether a route or rule of `set` says `cache on`.
fn turns_cache_on(set: &CheckedPolicySet) -> bool {
    let on = |c: &Option<CacheSetting>| c.is_some_and(|c| c.on);
    set.routes.iter().any(|r| {
        on(&r.cache)
            || r.rules
                .iter()
                .chain(std::iter::once(&r.default))
                .any(|rule| on(&rule.body.cache))
    })
}

/// How the request's own headers limit caching.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
struct Controls {
    read: bool,
    store: bool,
}

/// Reads `x-switchyard-cache` and `cache-control`.
///
/// # Errors
/// 400 when `x-switchyard-cache` is neither `on` nor `off`.
fn controls(headers: &HeaderMap) -> Result<Controls, GatewayError> {
    let mut c = Controls {
        read: true,
        store: true,
    };
    if let Some(v) = headers.get(&CACHE_HEADER) {
        match v.to_str().map(str::trim) {
            Ok(s) if s.eq_ignore_ascii_case("off") => return Ok(Controls::default()),
            Ok(s) if s.eq_ignore_ascii_case("on") => {}
            _ => {
                return Err(GatewayError::new(
                    ErrorKind::InvalidRequest,
                    "header `x-switchyard-cache` must be `on` or `off`",
                )
                .with_code(crate::error::Code::InvalidValue))
            }
        }
    }
    for v in headers.get_all(http::header::CACHE_CONTROL) {
        let Ok(s) = v.to_str() else { continue };
        for d in s.split(',').map(str::trim) {
            if d.eq_ignore_ascii_case("no-store") {
                return Ok(Controls::default());
            }
            if d.eq_ignore_ascii_case("no-cache") {
                c.read = false;
            }
        }
    }
    Ok(c)
}

/// Whether `chat` may be cached: temperature exactly 0 (or any with `stochastic`),
/// and one choice.
fn cacheable(chat: &ChatRequest, stochastic: bool) -> bool {
    let deterministic = chat.temperature == Some(0.0);
    let one_choice = chat
        .extra
        .get("n")
        .is_none_or(|n| n.is_null() || n.as_u64() == Some(1));
    (deterministic || stochastic) && one_choice
}

/// Whether the cache phase has anything to do for a decision whose cache setting is
/// `setting`: false only when the policy says nothing and the cache is off, where
/// [`lookup`] would dispatch at once without a word.
pub(super) fn in_play(gw: &Gateway, setting: Option<CacheSetting>) -> bool {
    setting.is_some() || gw.cache.config.enabled
}

/// The cache phase's lookup: decides (see the module doc), and on a hit answers.
///
/// # Errors
/// 400 for a bad `x-switchyard-cache` header (only when caching is in play).
pub(super) async fn lookup(
    gw: &Gateway,
    ctx: &mut RequestCtx,
    chat: &ChatRequest,
    headers: &HeaderMap,
    setting: Option<CacheSetting>,
) -> Result<Lookup, GatewayError> {
    let phase = &gw.cache;
    let cfg = &phase.config;
    let bypass = |ctx: &mut RequestCtx, reason: &'static str| {
        ctx.cache = Some(CacheStatus::Bypass);
        metrics::counter!(t::CACHE_BYPASSES, "reason" => reason).increment(1);
        Ok(Lookup::Dispatch(None))
    };
    match setting {
        Some(s) if !s.on => return bypass(ctx, "policy"),
        None if !cfg.enabled => return Ok(Lookup::Dispatch(None)),
        _ => {}
    }
    let c = controls(headers)?;
    if !c.store {
        return bypass(ctx, "request");
    }
    if !cacheable(chat, cfg.stochastic) {
        return bypass(ctx, "uncacheable");
    }
    let Some(partition) = partition(cfg.share, &ctx.caller, ctx.principal.method) else {
        return bypass(ctx, "uncacheable");
    };
    let Some(store) = phase.store() else {
        return Ok(Lookup::Dispatch(None));
    };
    // The logical model the decision chose (a rule may send a request elsewhere,
    // an A/B split arms differently): part of the scope, so one arm's answer is
    // never served to the other.
    // Its upstream model too: the answer is that model's.
    let first = ctx.plan.first().and_then(|&i| gw.registry.endpoints.get(i));
    let target = first.map_or("", |e| &*e.model);
    let upstream_model = first.map_or("", |e| e.upstream_model.as_str());
    // The client headers that endpoint's provider is sent (`forward_headers`,
    // OpenAI's organization and project): they can change the answer.
    let forwarded = first
        .and_then(|e| gw.config.providers.get(e.provider))
        .map(|p| crate::egress::forward::scoped(&chat.headers, p.kind, &p.forward_headers))
        .unwrap_or_default();
    let (scope, prompt, whole_conversation) =
        scope(chat, target, upstream_model, partition, &forwarded);
    let exact =
        whole_conversation || cfg.mode == CacheMode::Exact || setting.is_some_and(|s| s.exact);
    let key = store.key(scope, &prompt, exact);
    let ttl = Duration::from_millis(setting.and_then(|s| s.ttl_ms).unwrap_or(cfg.ttl_ms));
    let ticket = Ticket {
        store: store.clone(),
        key,
        upstream_model: upstream_model.to_string(),
        ttl,
        stored: phase.stored.clone(),
        prompt_estimate: chat.estimated_input_tokens(),
    };
    if !c.read {
        ctx.cache = Some(CacheStatus::Bypass);
        metrics::counter!(t::CACHE_BYPASSES, "reason" => "request").increment(1);
        return Ok(Lookup::Dispatch(Some(Box::new(ticket))));
    }
    let hit = store.get(&ticket.key).await;
    let found = hit.and_then(|h| Some((Entry::decode(&h.payload)?, h.distance, h.tier)));
    let Some((entry, distance, tier)) = found else {
        ctx.cache = Some(CacheStatus::Miss);
        metrics::counter!(t::CACHE_MISSES).increment(1);
        return Ok(Lookup::Dispatch(Some(Box::new(ticket))));
    };
    Ok(Lookup::Served(serve(gw, ctx, chat, &entry, distance, tier)))
}

/// Answers `chat` from `entry` in the shape it asked for, and records the hit.
fn serve(
    gw: &Gateway,
    ctx: &mut RequestCtx,
    chat: &ChatRequest,
    entry: &Entry,
    distance: Option<u32>,
    tier: Tier,
) -> Response<Body> {
    ctx.cache = Some(CacheStatus::Hit { distance });
    if let Some(permit) = &ctx.permit {
        // No provider tokens were spent: the charged estimate goes back.
        permit.settle(None, &Usage::default());
    }
    let kind = if distance.is_some() {
        "semantic"
    } else {
        "exact"
    };
    let tier = match tier {
        Tier::L1 => "l1",
        Tier::L2 => "l2",
    };
    metrics::counter!(t::CACHE_HITS, "kind" => kind, "tier" => tier).increment(1);
    if let Some(u) = &entry.usage {
        metrics::counter!(t::CACHE_TOKENS_SAVED).increment(u.prompt_tokens + u.completion_tokens);
        if let Some(p) = gw.cache.prices.get(entry.endpoint.as_str()) {
            let usd = (u.prompt_tokens as f64 * p.input_per_mtok
                + u.completion_tokens as f64 * p.output_per_mtok)
                / 1e6;
            if usd > 0.0 {
                metrics::gauge!(t::CACHE_USD_SAVED, "model" => chat.model.clone()).increment(usd);
            }
        }
    }
    gw.log.cache_served(&chat.model, ctx.started);
    let id = format!("chatcmpl-{:024x}", rand::random::<u128>() >> 32);
    let created = unix_now();
    if chat.is_stream() {
        let events = entry.stream(
            &id,
            created,
            chat.wants_usage_chunk(),
            gw.cache.config.replay,
        );
        body::event_stream(replay(events))
    } else {
        body::json(http::StatusCode::OK, entry.whole(&id, created))
    }
}

/// A body sending `events`, each after its wait (all at once when none waits).
fn replay(events: Vec<(Duration, Bytes)>) -> Body {
    use futures_util::StreamExt as _;
    if events.iter().all(|(gap, _)| gap.is_zero()) {
        let mut all = bytes::BytesMut::new();
        for (_, b) in &events {
            all.extend_from_slice(b);
        }
        return body::full(all.freeze());
    }
    let s = futures_util::stream::iter(events).then(|(gap, b)| async move {
        if !gap.is_zero() {
            tokio::time::sleep(gap).await;
        }
        Ok::<_, BoxError>(http_body::Frame::data(b))
    });
    http_body_util::StreamBody::new(s).boxed_unsync().into()
}

/// Stores a whole answer (`resp`, from dispatch) with `ticket` when it is complete.
/// The body is one ready frame; it is taken and put back without waiting, and the
/// entry is built and written off the request path.
pub(super) fn store_whole(
    gw: &Gateway,
    ctx: &RequestCtx,
    ticket: Ticket,
    resp: &mut Response<Body>,
) {
    use futures_util::FutureExt as _;
    if ctx.stream || !ctx.served || resp.status() != http::StatusCode::OK {
        return;
    }
    let Some(origin) = ctx.endpoint.and_then(|ep| origin(gw, ep)) else {
        return;
    };
    if origin.upstream_model != ticket.upstream_model {
        return;
    }
    let mut taken = std::mem::take(resp.body_mut());
    let data = match taken.frame().now_or_never() {
        Some(Some(Ok(frame))) if frame.is_data() && http_body::Body::is_end_stream(&taken) => {
            match frame.into_data() {
                Ok(d) => d,
                Err(_) => return,
            }
        }
        Some(Some(Ok(frame))) => {
            // Not one data frame: put it back as it was and store nothing.
            let rest = taken;
            let head = futures_util::stream::once(std::future::ready(Ok(frame)));
            use futures_util::StreamExt as _;
            *resp.body_mut() =
                http_body_util::StreamBody::new(head.chain(http_body_util::BodyStream::new(rest)))
                    .boxed_unsync()
                    .into();
            return;
        }
        _ => {
            *resp.body_mut() = taken;
            return;
        }
    };
    *resp.body_mut() = body::full(data.clone());
    tokio::spawn(async move {
        let Some(mut entry) = Entry::from_whole(&data, origin, unix_now()) else {
            return;
        };
        if entry.usage.is_none() {
            // What a live stream of this answer would have reported (and what the
            // permit settled): kept for a replay as a stream with the usage chunk.
            let output = super::limit::text_tokens(&data);
            entry.usage = Some(Usage::new(ticket.prompt_estimate, output));
        }
        if let Some(payload) = entry.encode() {
            ticket.put(payload).await;
        }
    });
}

impl Ticket {
    async fn put(self, payload: Bytes) {
        self.store.put(&self.key, payload, self.ttl).await;
        self.stored.fetch_add(1, Ordering::Release);
        metrics::counter!(t::CACHE_STORES).increment(1);
    }
}

/// Who endpoint `ep` is, for its entries.
fn origin(gw: &Gateway, ep: usize) -> Option<Origin> {
    let e = gw.registry.endpoints.get(ep)?;
    Some(Origin {
        endpoint: e.id.to_string(),
        provider: gw.config.providers.get(e.provider)?.name.clone(),
        upstream_model: e.upstream_model.clone(),
    })
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// The chunks of a stream as its client receives them, kept for the cache.
#[derive(Debug)]
pub struct Tee {
    ticket: Ticket,
    /// Each frame sent, with the milliseconds since the one before.
    frames: Vec<(u32, Bytes)>,
    last: Option<Instant>,
    bytes: usize,
}

impl Tee {
    /// A tee storing with `ticket`.
    pub(super) fn new(ticket: Ticket) -> Tee {
        Tee {
            ticket,
            frames: Vec::new(),
            last: None,
            bytes: 0,
        }
    }

    /// Keeps `b` (a reference count, not a copy); `false` once the stream is too
    /// long to store.
    pub(super) fn push(&mut self, b: &Bytes) -> bool {
        let now = Instant::now();
        let gap = self.last.map_or(0, |l| {
            u32::try_from(now.duration_since(l).as_millis()).unwrap_or(u32::MAX)
        });
        self.last = Some(now);
        self.bytes += b.len();
        self.frames.push((gap, b.clone()));
        self.bytes <= MAX_TEE_BYTES
    }

    /// The stream ended cleanly on endpoint `ep` with the provider's `usage` and
    /// `pieces` content pieces sent: builds its entry and stores it, off the
    /// request path. Without the provider's usage the entry keeps the usage chunk
    /// its client got, else the estimate the stream settled with.
    pub(super) fn finish(self, gw: &Gateway, ep: usize, usage: Option<Usage>, pieces: u64) {
        let Some(origin) = origin(gw, ep) else { return };
        if origin.upstream_model != self.ticket.upstream_model {
            return;
        }
        tokio::spawn(async move {
            let entry = Entry::from_stream(&self.frames, usage, origin, unix_now());
            let estimate = Usage::new(self.ticket.prompt_estimate, pieces);
            let entry = entry.map(|mut e| {
                e.usage.get_or_insert(estimate);
                e
            });
            if let Some(payload) = entry.and_then(|e| e.encode()) {
                self.ticket.put(payload).await;
            }
        });
    }
}

/// Which callers' entries this request may read and write (`cache.share`): the
/// organization (else the API key id) by default, the key id, or everyone (`""`).
/// `caller` is the one the admit phase authenticated, by `method`. `None`: a
/// verified caller that names neither what `share` asks for nor a key id (a JWT
/// without the `key_id_claim`, and without the `org_claim` for `share: org`) has no
/// partition of its own, and is not cached; unverified callers without a key
/// (`auth.mode: none`, no credential) share one, as nothing tells them apart.
fn partition(share: Share, caller: &Caller, method: Method) -> Option<String> {
    match (share, &caller.org, &caller.api_key) {
        (Share::All, _, _) => Some(String::new()),
        (Share::Org, Some(org), _) => Some(format!("org:{org}")),
        (Share::Org | Share::Key, _, Some(key)) => Some(format!("key:{key}")),
        (Share::Org | Share::Key, _, None) => (method == Method::Unverified).then(String::new),
    }
}

/// The scope hash, the prompt text, and whether the whole conversation is the
/// scope (the last message is not a user turn). `target` is the logical model the
/// decision chose and `upstream_model` the model id its first endpoint sends;
/// `partition` is [`partition`]'s; `forwarded` the client headers that endpoint's
/// provider is sent ([`crate::egress::forward::scoped`]).
fn scope(
    chat: &ChatRequest,
    target: &str,
    upstream_model: &str,
    partition: String,
    forwarded: &[(&str, &HeaderValue)],
) -> (u128, String, bool) {
    let mut h = Xxh3::new();
    str_(&mut h, "switchyard-cache-scope-v1");
    str_(&mut h, &partition);
    str_(&mut h, &chat.model);
    str_(&mut h, target);
    str_(&mut h, upstream_model);
    h.update(b"H");
    len(&mut h, forwarded.len());
    for (name, v) in forwarded {
        str_(&mut h, name);
        len(&mut h, v.len());
        h.update(v.as_bytes());
    }
    match chat.temperature {
        // 0 and -0 are the same setting.
        Some(0.0) => h.update(b"t0"),
        Some(t) => {
            h.update(b"t");
            h.update(&t.to_bits().to_le_bytes());
        }
        None => h.update(b"t-"),
    }
    for cap in [chat.max_tokens, chat.max_completion_tokens] {
        match cap {
            Some(n) => {
                h.update(b"c");
                h.update(&n.to_le_bytes());
            }
            None => h.update(b"c-"),
        }
    }
    match &chat.tools {
        None => h.update(b"T-"),
        Some(tools) => {
            let mut sorted: Vec<&Value> = tools.iter().collect();
            sorted.sort_by(|a, b| tool_name(a).cmp(tool_name(b)));
            h.update(b"T");
            len(&mut h, sorted.len());
            for tool in sorted {
                value(&mut h, tool);
            }
        }
    }
    let mut extra: Vec<(&String, &Value)> = chat
        .extra
        .iter()
        .filter(|(k, v)| {
            // `n: 1` is the default: the same request as without it.
            !(LABELS.contains(&k.as_str()) || k.as_str() == "n" && v.as_u64() == Some(1))
        })
        .collect();
    extra.sort_by(|a, b| a.0.cmp(b.0));
    h.update(b"X");
    len(&mut h, extra.len());
    for (k, v) in extra {
        str_(&mut h, k);
        value(&mut h, v);
    }
    let last_is_user = chat.messages.last().is_some_and(|m| m.role == "user");
    let earlier = if last_is_user {
        chat.messages.len() - 1
    } else {
        chat.messages.len()
    };
    h.update(b"M");
    len(&mut h, chat.messages.len());
    for m in &chat.messages[..earlier] {
        message(&mut h, m);
    }
    let mut prompt = String::new();
    if let Some(last) = chat.messages.last().filter(|_| last_is_user) {
        // The text parts are the prompt; everything else of the turn is scope.
        h.update(b"L");
        let mut fields: Vec<(&String, &Value)> = last.extra.iter().collect();
        fields.sort_by(|a, b| a.0.cmp(b.0));
        for (k, v) in fields {
            str_(&mut h, k);
            value(&mut h, v);
        }
        match &last.content {
            Value::String(s) => prompt.push_str(s),
            Value::Array(parts) => {
                // Text parts before each other part: where an image sits among the
                // texts changes the question ([T, I1, I2] is not [I1, T, I2]).
                let mut texts = 0;
                for p in parts {
                    match p.get("text").and_then(Value::as_str) {
                        Some(t) if p.get("type").and_then(Value::as_str) == Some("text") => {
                            if !prompt.is_empty() {
                                prompt.push('\n');
                            }
                            prompt.push_str(t);
                            texts += 1;
                        }
                        _ => {
                            len(&mut h, texts);
                            value(&mut h, p);
                        }
                    }
                }
            }
            other => value(&mut h, other),
        }
    }
    (h.digest128(), prompt, !last_is_user)
}

fn tool_name(tool: &Value) -> &str {
    tool.get("function")
        .and_then(|f| f.get("name"))
        .and_then(Value::as_str)
        .unwrap_or("")
}

fn message(h: &mut Xxh3, m: &crate::api::Message) {
    str_(h, &m.role);
    value(h, &m.content);
    let mut fields: Vec<(&String, &Value)> = m.extra.iter().collect();
    fields.sort_by(|a, b| a.0.cmp(b.0));
    len(h, fields.len());
    for (k, v) in fields {
        str_(h, k);
        value(h, v);
    }
}

fn len(h: &mut Xxh3, n: usize) {
    h.update(&(n as u64).to_le_bytes());
}

fn str_(h: &mut Xxh3, s: &str) {
    h.update(b"s");
    len(h, s.len());
    h.update(s.as_bytes());
}

/// Feeds `v` as canonical JSON: object keys sorted, integers by value whichever
/// way they were written (`1` and `1.0` are one number), every item tagged and
/// length-prefixed so no two values feed the same bytes.
fn value(h: &mut Xxh3, v: &Value) {
    match v {
        Value::Null => h.update(b"n"),
        Value::Bool(true) => h.update(b"y"),
        Value::Bool(false) => h.update(b"f"),
        Value::Number(n) => {
            if let Some(i) = n.as_i64() {
                h.update(b"i");
                h.update(&i.to_le_bytes());
            } else if let Some(u) = n.as_u64() {
                h.update(b"u");
                h.update(&u.to_le_bytes());
            } else {
                let f = n.as_f64().unwrap_or(f64::NAN);
                if f.fract() == 0.0 && f.abs() < 9.0e15 {
                    h.update(b"i");
                    h.update(&(f as i64).to_le_bytes());
                } else {
                    h.update(b"d");
                    h.update(&f.to_bits().to_le_bytes());
                }
            }
        }
        Value::String(s) => str_(h, s),
        Value::Array(a) => {
            h.update(b"a");
            len(h, a.len());
            for x in a {
                value(h, x);
            }
        }
        Value::Object(o) => {
            let mut keys: Vec<(&String, &Value)> = o.iter().collect();
            keys.sort_by(|a, b| a.0.cmp(b.0));
            h.update(b"o");
            len(h, keys.len());
            for (k, x) in keys {
                str_(h, k);
                value(h, x);
            }
        }
    }
}

/// Writes the cache headers of `status` into the response's field lines `h`.
pub(super) fn stamp(h: &mut crate::server::lines::HeaderLines, status: CacheStatus) {
    h.push(&CACHE_HEADER, &HeaderValue::from_static(status.as_str()));
    if let CacheStatus::Hit { distance: Some(d) } = status {
        h.push_u64(&DISTANCE_HEADER, u64::from(d));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(body: &str) -> ChatRequest {
        ChatRequest::parse(body.as_bytes()).unwrap()
    }

    fn scope_of(body: &str) -> (u128, String, bool) {
        scope(&parse(body), "m", "x", String::new(), &[])
    }

    #[test]
    fn the_model_the_decision_chose_is_in_the_scope() {
        let body = parse(r#"{"model":"m","messages":[{"role":"user","content":"x"}]}"#);
        assert_ne!(
            scope(&body, "m", "x", String::new(), &[]).0,
            scope(&body, "m-canary", "x", String::new(), &[]).0
        );
        assert_eq!(
            scope(&body, "m", "x", String::new(), &[]).0,
            scope(&body, "m", "x", String::new(), &[]).0
        );
        assert_ne!(
            scope(&body, "m", "x", "org:a".into(), &[]).0,
            scope(&body, "m", "x", "org:b".into(), &[]).0,
            "two organizations never share an entry"
        );
    }

    #[test]
    fn a_verified_caller_naming_no_key_or_organization_gets_no_shared_partition() {
        // Found by audit (2026-12-05): a JWT without the key id claim (and without
        // the organization claim) fell into the partition of everyone, so two such
        // callers, different tenants, were served each other's answers under
        // `share: key` or `share: org`.
        let caller = |org: Option<&str>, key: Option<&str>| Caller {
            org: org.map(Into::into),
            api_key: key.map(Into::into),
            ..Caller::default()
        };
        let nobody = caller(None, None);
        for share in [Share::Org, Share::Key] {
            assert_eq!(partition(share, &nobody, Method::Jwt), None);
            assert_eq!(partition(share, &nobody, Method::ApiKey), None);
            // Unverified callers without a credential: nothing tells them apart.
            assert_eq!(
                partition(share, &nobody, Method::Unverified),
                Some(String::new())
            );
        }
        assert_eq!(
            partition(Share::All, &nobody, Method::Jwt),
            Some(String::new())
        );
        let org_only = caller(Some("o"), None);
        assert_eq!(
            partition(Share::Org, &org_only, Method::Jwt),
            Some("org:o".into())
        );
        assert_eq!(partition(Share::Key, &org_only, Method::Jwt), None);
        assert_eq!(
            partition(Share::Org, &caller(None, Some("k")), Method::Jwt),
            Some("key:k".into())
        );
    }

    #[test]
    fn the_upstream_model_of_the_chosen_endpoint_is_in_the_scope() {
        // Found by audit (2026-12-05): only logical model names were in the scope, so
        // after `m` was pointed at another upstream model (a restart with a new
        // config, or another instance on the same Redis), the old model's answers
        // were still served for `m`.
        let body = parse(r#"{"model":"m","messages":[{"role":"user","content":"x"}]}"#);
        assert_ne!(
            scope(&body, "m", "gpt-4o-mini", String::new(), &[]).0,
            scope(&body, "m", "gpt-4.1", String::new(), &[]).0
        );
    }

    #[test]
    fn the_scope_covers_what_changes_the_answer_and_nothing_else() {
        let base = r#"{"model":"m","temperature":0,"messages":[{"role":"system","content":"be brief"},{"role":"user","content":"hi there"}]}"#;
        let (s, prompt, whole) = scope_of(base);
        assert_eq!(prompt, "hi there");
        assert!(!whole);
        // The prompt text is not in the scope; labels and key order are not either.
        let same = [
            r#"{"model":"m","temperature":0,"messages":[{"role":"system","content":"be brief"},{"role":"user","content":"something else"}]}"#,
            r#"{"temperature":0.0,"model":"m","user":"u1","metadata":{"a":"b"},"messages":[{"content":"be brief","role":"system"},{"role":"user","content":"hi there"}]}"#,
            r#"{"model":"m","temperature":0,"stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"system","content":"be brief"},{"role":"user","content":"hi there"}]}"#,
            r#"{"model":"m","temperature":0,"n":1,"messages":[{"role":"system","content":"be brief"},{"role":"user","content":"hi there"}]}"#,
        ];
        for b in same {
            assert_eq!(scope_of(b).0, s, "{b}");
        }
        let different = [
            r#"{"model":"n","temperature":0,"messages":[{"role":"system","content":"be brief"},{"role":"user","content":"hi there"}]}"#,
            r#"{"model":"m","temperature":0.5,"messages":[{"role":"system","content":"be brief"},{"role":"user","content":"hi there"}]}"#,
            r#"{"model":"m","temperature":0,"max_tokens":5,"messages":[{"role":"system","content":"be brief"},{"role":"user","content":"hi there"}]}"#,
            r#"{"model":"m","temperature":0,"seed":1,"messages":[{"role":"system","content":"be brief"},{"role":"user","content":"hi there"}]}"#,
            r#"{"model":"m","temperature":0,"stop":["x"],"messages":[{"role":"system","content":"be brief"},{"role":"user","content":"hi there"}]}"#,
            r#"{"model":"m","temperature":0,"response_format":{"type":"json_object"},"messages":[{"role":"system","content":"be brief"},{"role":"user","content":"hi there"}]}"#,
            r#"{"model":"m","temperature":0,"messages":[{"role":"system","content":"be long"},{"role":"user","content":"hi there"}]}"#,
            r#"{"model":"m","temperature":0,"messages":[{"role":"system","content":"be brief"},{"role":"user","content":"a"},{"role":"assistant","content":"b"},{"role":"user","content":"hi there"}]}"#,
        ];
        for b in different {
            assert_ne!(scope_of(b).0, s, "{b}");
        }
    }

    /// Found by attack (t_img.py): the last turn's text parts are the prompt and
    /// its other parts went into the scope in order but without their place among
    /// the texts, so [T, I1, I2] and [I1, T, I2] shared an answer.
    #[test]
    fn where_an_image_sits_among_the_text_parts_is_in_the_scope() {
        let turn = |parts: &str| {
            format!(r#"{{"model":"m","messages":[{{"role":"user","content":[{parts}]}}]}}"#)
        };
        let (t, i1, i2) = (
            r#"{"type":"text","text":"compare"}"#,
            r#"{"type":"image_url","image_url":{"url":"data:image/png;base64,AAAA"}}"#,
            r#"{"type":"image_url","image_url":{"url":"data:image/png;base64,BBBB"}}"#,
        );
        let a = scope_of(&turn(&format!("{t},{i1},{i2}")));
        let b = scope_of(&turn(&format!("{i1},{t},{i2}")));
        let c = scope_of(&turn(&format!("{i1},{i2},{t}")));
        assert_eq!((a.1.as_str(), b.1.as_str()), ("compare", "compare"));
        assert_ne!(a.0, b.0);
        assert_ne!(b.0, c.0);
        assert_ne!(a.0, c.0);
        assert_eq!(a.0, scope_of(&turn(&format!("{t},{i1},{i2}"))).0);
        // Plain text: a string and its text parts are still one prompt and scope.
        let plain = scope_of(r#"{"model":"m","messages":[{"role":"user","content":"compare"}]}"#);
        let parts = scope_of(&turn(t));
        assert_eq!((plain.0, plain.1.as_str()), (parts.0, "compare"));
    }

    #[test]
    fn tools_are_sorted_by_name_and_a_tool_result_turn_is_exact() {
        let a = r#"{"model":"m","messages":[{"role":"user","content":"x"}],"tools":[{"type":"function","function":{"name":"a","parameters":{"type":"object"}}},{"type":"function","function":{"name":"b"}}]}"#;
        let b = r#"{"model":"m","messages":[{"role":"user","content":"x"}],"tools":[{"function":{"name":"b"},"type":"function"},{"type":"function","function":{"parameters":{"type":"object"},"name":"a"}}]}"#;
        assert_eq!(scope_of(a).0, scope_of(b).0);
        let c = r#"{"model":"m","messages":[{"role":"user","content":"x"}],"tools":[{"type":"function","function":{"name":"a"}}]}"#;
        assert_ne!(scope_of(a).0, scope_of(c).0);
        let tool = r#"{"model":"m","messages":[{"role":"user","content":"x"},{"role":"assistant","content":null,"tool_calls":[{"id":"1","type":"function","function":{"name":"a","arguments":"{}"}}]},{"role":"tool","tool_call_id":"1","content":"42"}]}"#;
        let (s1, prompt, whole) = scope_of(tool);
        assert!(whole);
        assert!(prompt.is_empty());
        let other = tool.replace("\"42\"", "\"43\"");
        assert_ne!(scope_of(&other).0, s1);
    }

    #[test]
    fn only_temperature_zero_and_one_choice_are_cacheable() {
        let msg = r#""messages":[{"role":"user","content":"x"}]"#;
        let req = |extra: &str| parse(&format!(r#"{{"model":"m",{msg}{extra}}}"#));
        assert!(cacheable(&req(r#","temperature":0"#), false));
        assert!(
            !cacheable(&req(""), false),
            "absent temperature is OpenAI's 1"
        );
        assert!(!cacheable(&req(r#","temperature":0.7"#), false));
        assert!(cacheable(&req(r#","temperature":0.7"#), true));
        assert!(!cacheable(&req(r#","temperature":0,"n":2"#), false));
        assert!(cacheable(&req(r#","temperature":0,"n":1"#), false));
    }

    #[test]
    fn request_controls_are_read() {
        let h = |pairs: &[(&str, &str)]| {
            let mut m = HeaderMap::new();
            for (k, v) in pairs {
                m.append(
                    HeaderName::from_bytes(k.as_bytes()).unwrap(),
                    HeaderValue::from_str(v).unwrap(),
                );
            }
            m
        };
        let all = Controls {
            read: true,
            store: true,
        };
        assert_eq!(controls(&h(&[])).unwrap(), all);
        let none = Controls::default();
        assert_eq!(
            controls(&h(&[("cache-control", "max-age=0, No-Store")])).unwrap(),
            none
        );
        assert_eq!(
            controls(&h(&[("x-switchyard-cache", "OFF")])).unwrap(),
            none
        );
        let no_read = Controls {
            read: false,
            store: true,
        };
        assert_eq!(
            controls(&h(&[("cache-control", "no-cache")])).unwrap(),
            no_read
        );
        assert!(controls(&h(&[("x-switchyard-cache", "maybe")])).is_err());
    }
}
