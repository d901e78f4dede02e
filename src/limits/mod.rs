//! Rate limits and spend budgets: the admission checks of `limits:` and `budgets:`.
//!
//! A request needs room in up to six token buckets ([`bucket::Bucket`]): requests
//! and tokens, at each of three levels: global, its API key id, its organization.
//! Its token cost is its estimated input tokens plus its output cap (`max_tokens` /
//! `max_completion_tokens`, else `limits.default_output_tokens`) for each of its `n`
//! choices. Admission:
//! 1. every budget of the key and the org (`budgets:`) must have spend left for the
//!    UTC day and month, else 429 `budget_exceeded`;
//! 2. every bucket must hold the request's cost; if one does not, nothing is taken
//!    and the answer is 429 `rate_limit_exceeded` with `Retry-After` = the longest
//!    wait among the buckets without room (all need room at once);
//! 3. otherwise every bucket is charged, in the same critical section (in memory one
//!    lock over all buckets: the global bucket is touched by every request anyway; in
//!    Redis one Lua script), so no level is charged unless all admit. (In memory each
//!    bucket takes its cost as it is looked up, one look-up each, and a refusal
//!    gives the costs taken back before the lock is let go: the same to any reader.)
//!
//! The [`Permit`] then travels with the request; [`Permit::settle`] reconciles the
//! token buckets with the actual usage (refund or charge the difference) and adds the
//! spend in USD, from the serving provider's prices, to the budgets and to
//! `switchyard_spend_usd_total`; an answer whose provider reported no `usage` is
//! settled with estimates ([`Permit::prompt_estimate`] in, its text out). A permit
//! never settled (no answer was served) keeps its estimate charged and records no
//! spend.
//!
//! A key's rate limit and budget are its key entry's own (`limits:` / `budget:` of
//! the entry, carried by the [`Caller`]), field by field over `limits.keys.<id>` /
//! `budgets.keys.<id>`, over `per_key`; a key entry's own apply even without any
//! `limits:` or `budgets:` section ([`Limiter::applies`]).
//!
//! State lives in memory, or in Redis with `state.redis` ([`redis`]); while Redis
//! cannot be reached within `state.timeout_ms`, `state.on_error` decides: `open`
//! falls back to this instance's in-memory state, `closed` refuses with 503. Requests
//! of priority `critical` bypass the rate limits (not the budgets).

pub mod bucket;
pub mod budget;
pub mod redis;
pub mod tokens;

use std::borrow::Cow;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Instant, SystemTime};

use http::{HeaderMap, HeaderName, HeaderValue};

use crate::server::lines::HeaderLines;

use crate::api::Usage;
use crate::config::{Budget, Config, OnError, Pricing, RateLimit};
use crate::error::{Code, ErrorKind, Fault, GatewayError};
use crate::policy::ast::PriorityLevel;
use crate::routing::features::Caller;
use crate::routing::Registry;
use crate::telemetry as t;
use bucket::Bucket;

/// Forget full buckets (they equal new ones) after this many new buckets, so
/// unbounded key ids cannot grow the map without end.
const SWEEP_EVERY: u32 = 4096;

/// How long Redis is skipped after a failure, ms (each request during that time
/// takes the `on_error` path at once instead of waiting for the deadline).
const REDIS_BACKOFF_MS: u64 = 1000;

/// What a bucket counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Requests (cost 1).
    Requests,
    /// Tokens (estimated input + output cap).
    Tokens,
}

/// One bucket a request needs room in.
#[derive(Debug, Clone)]
pub struct Need {
    /// `g::rpm`, `k:<key id>:tpm`, `o:<org>:rpm`, ...: the bucket's name (the
    /// global ones static, so a request builds only its key's and org's names).
    pub key: Cow<'static, str>,
    /// What it counts.
    pub kind: Kind,
    /// Refill per minute, units.
    pub per_min: u64,
    /// Capacity, units.
    pub capacity: u64,
    /// This request's cost, units.
    pub cost: u64,
}

/// A bucket's state after an admission decision, for the `x-ratelimit-*` headers.
#[derive(Debug, Clone, Copy)]
pub struct View {
    /// What it counts.
    pub kind: Kind,
    /// Capacity, units.
    pub capacity: u64,
    /// Units left.
    pub remaining: u64,
    /// Milliseconds until full again (`u64::MAX`: never, a bucket of rate 0, whose
    /// `x-ratelimit-reset-*` header is left out).
    pub reset_ms: u64,
}

impl View {
    /// `bucket`, the bucket of `need`, as of `now_ms`.
    fn of(need: &Need, bucket: &mut Bucket, now_ms: u64) -> View {
        View {
            kind: need.kind,
            capacity: bucket.capacity(),
            remaining: bucket.remaining(now_ms),
            reset_ms: bucket.full_in_ms(now_ms),
        }
    }
}

/// A budget a request's spend counts against.
#[derive(Debug, Clone)]
struct BudgetScope {
    /// `k:<key id>` or `o:<org>`.
    scope: String,
    budget: Budget,
}

/// Which state admitted a permit (it is settled there).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Backend {
    Local,
    Redis,
}

/// The outcome of one check over all buckets.
#[derive(Debug)]
pub(crate) enum Checked {
    /// Every bucket had room and was charged; the least budget left, USD (`None`: no
    /// budget applies).
    Admitted(Vec<View>, Option<f64>),
    /// Bucket `blame` had no room: wait `wait_ms` (`None`: never).
    Refused {
        wait_ms: Option<u64>,
        blame: usize,
        views: Vec<View>,
    },
    /// Budget `index` is used up: `spent` USD spent and `reserved` USD held by
    /// requests in flight reach its limit, for its month (`monthly`) or its day.
    OverBudget {
        index: usize,
        spent: f64,
        reserved: f64,
        monthly: bool,
    },
}

#[derive(Debug, Default)]
struct Local {
    /// By bucket name; looked up several times per request, so foldhash (randomly
    /// seeded, as hashbrown's default) rather than SipHash.
    buckets: foldhash::HashMap<String, Bucket>,
    ledger: budget::Ledger,
    /// The USD reserved by admitted requests not yet settled, per scope and
    /// period (kept apart from `ledger`: see [`Permit::settle`]).
    reserved: budget::Ledger,
    new_buckets: u32,
}

impl Local {
    /// A new, full bucket for `need` (with the full ones swept away every
    /// [`SWEEP_EVERY`] new buckets), for a need that has none.
    fn new_bucket(&mut self, need: &Need, now_ms: u64) -> &mut Bucket {
        self.new_buckets += 1;
        if self.new_buckets >= SWEEP_EVERY {
            self.new_buckets = 0;
            self.buckets.retain(|_, b| !b.is_full(now_ms));
        }
        self.buckets
            .entry(need.key.to_string())
            .or_insert_with(|| Bucket::full(need.per_min, need.capacity, now_ms))
    }

    /// The answer to `needs` when one of their buckets refused, none having taken
    /// anything: the need with the longest wait is blamed (one that can never be
    /// met above all), and every bucket is reported as it is.
    fn refusal(&mut self, needs: &[Need], now_ms: u64) -> Checked {
        let mut refused: Option<(Option<u64>, usize)> = None;
        for (i, n) in needs.iter().enumerate() {
            let b = match self.buckets.get_mut(&*n.key) {
                Some(b) => {
                    b.reconfigure(n.per_min, n.capacity, now_ms);
                    b
                }
                None => self.new_bucket(n, now_ms),
            };
            match b.wait_ms(n.cost, now_ms) {
                Some(0) => {}
                wait => {
                    let longer = match (refused, wait) {
                        (None, _) | (Some((Some(_), _)), None) => true,
                        (Some((Some(a), _)), Some(w)) => w > a,
                        (Some((None, _)), _) => false,
                    };
                    if longer {
                        refused = Some((wait, i));
                    }
                }
            }
        }
        let views = needs
            .iter()
            .filter_map(|n| Some(View::of(n, self.buckets.get_mut(&*n.key)?, now_ms)))
            .collect();
        match refused {
            Some((wait_ms, blame)) => Checked::Refused {
                wait_ms,
                blame,
                views,
            },
            // Not reached: called after a bucket refused, and nothing has changed
            // since. Should it be, the request is refused for a moment, not admitted
            // without its cost taken.
            None => Checked::Refused {
                wait_ms: Some(1),
                blame: 0,
                views,
            },
        }
    }
}

/// The price and model of one registry endpoint.
#[derive(Debug, Clone)]
struct Price {
    model: Arc<str>,
    pricing: Pricing,
}

#[derive(Debug)]
struct Inner {
    limits: crate::config::LimitsConfig,
    budgets: crate::config::BudgetsConfig,
    any_limit: bool,
    any_budget: bool,
    on_error: OnError,
    epoch: Instant,
    local: Mutex<Local>,
    redis: Option<redis::RedisBackend>,
    /// Monotonic ms until which Redis is not tried (after a failure).
    redis_down_until: AtomicU64,
    /// When a call's own Redis failure was last logged (ms, the limiter's clock).
    key_error_logged: AtomicU64,
    prices: Vec<Price>,
    backend_errors: metrics::Counter,
    tokens: tokens::TokenCounter,
    /// `server.metrics_caller_labels`: label `switchyard_spend_usd_total` with the
    /// caller's key id and org (`false`: `all` for both, one series per model).
    caller_labels: bool,
    /// How long a budget reservation in Redis holds if never released, ms: a
    /// request's longest life ([`hold_life_ms`]).
    hold_life_ms: u64,
}

/// The limiter of one gateway: cheap to clone (one shared state).
#[derive(Debug, Clone)]
pub struct Limiter {
    inner: Arc<Inner>,
}

impl Limiter {
    /// The input-token counter (OpenAI's tokenizer by model family, else the
    /// estimate) that this limiter's token buckets charge; the gateway's
    /// `request.input_tokens` and context checks count with the same one.
    pub fn token_counter(&self) -> &tokens::TokenCounter {
        &self.inner.tokens
    }

    /// The limiter of `config`, pricing spend by the endpoints of `registry` (USD per
    /// 1M tokens of each endpoint's provider).
    pub fn new(config: &Config, registry: &Registry) -> Limiter {
        let prices = registry
            .endpoints
            .iter()
            .map(|e| Price {
                model: e.model.clone(),
                pricing: config
                    .providers
                    .get(e.provider)
                    .map(|p| p.pricing)
                    .unwrap_or_default(),
            })
            .collect();
        let redis = config
            .state
            .redis
            .as_deref()
            .and_then(|url| redis::RedisBackend::new(url, config.state.timeout_ms));
        // Parse the vocabularies ahead of the first request only when a tokens
        // bucket is configured or an endpoint's context window is known (the route
        // phase's context check counts then); a key entry's own tokens limit, or a
        // policy reading `request.input_tokens`, loads them on first use instead.
        let l = &config.limits;
        let counts_tokens = [l.global, l.per_key, l.per_org]
            .iter()
            .chain(l.keys.values())
            .chain(l.orgs.values())
            .any(|r| r.tokens_per_min.is_some())
            || registry
                .endpoints
                .iter()
                .any(|e| e.context_window.is_some());
        let tokens = tokens::TokenCounter::new(registry, counts_tokens);
        Limiter {
            inner: Arc::new(Inner {
                any_limit: config.limits.any(),
                any_budget: config.budgets.any(),
                limits: config.limits.clone(),
                budgets: config.budgets.clone(),
                on_error: config.state.on_error,
                epoch: Instant::now(),
                local: Mutex::new(Local::default()),
                redis,
                redis_down_until: AtomicU64::new(0),
                key_error_logged: AtomicU64::new(0),
                prices,
                backend_errors: metrics::counter!(t::LIMIT_BACKEND_ERRORS),
                tokens,
                caller_labels: config.server.metrics_caller_labels,
                hold_life_ms: hold_life_ms(config),
            }),
        }
    }

    /// Whether any rate limit or budget is configured in `limits:` / `budgets:`;
    /// without one (and without a key entry's own, [`Limiter::applies`]), requests
    /// carry no permit and nothing is counted or settled (no work on the request
    /// path).
    pub fn enabled(&self) -> bool {
        self.inner.any_limit || self.inner.any_budget
    }

    /// Milliseconds on the limiter's monotonic clock.
    pub fn now_ms(&self) -> u64 {
        u64::try_from(self.inner.epoch.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    fn lock(&self) -> MutexGuard<'_, Local> {
        self.inner.local.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether any limit or budget applies to `caller`: one of the config, or the
    /// caller's key entry's own (`limits:` / `budget:` in the entry). Without one the
    /// request carries no permit.
    pub fn applies(&self, caller: &Caller) -> bool {
        self.enabled() || own_limits(caller) || own_budget(caller)
    }

    /// The buckets a request of `tokens` tokens from `caller` needs room in.
    ///
    /// A key's rate limit is its entry's own `limits:`, field by field over
    /// `limits.keys.<id>`, over `limits.per_key`.
    pub fn needs(&self, caller: &Caller, tokens: u64) -> Vec<Need> {
        let l = &self.inner.limits;
        let mut out = Vec::new();
        if !(self.inner.any_limit || own_limits(caller))
            || caller.priority == PriorityLevel::Critical
        {
            return out;
        }
        let mut level = |prefix: &str, id: &str, r: RateLimit| {
            let name = |kind: &'static str| -> Cow<'static, str> {
                if prefix == "g" {
                    return Cow::Borrowed(if kind == "rpm" { "g::rpm" } else { "g::tpm" });
                }
                let mut s = String::with_capacity(prefix.len() + id.len() + 5);
                s.push_str(prefix);
                s.push(':');
                s.push_str(id);
                s.push(':');
                s.push_str(kind);
                Cow::Owned(s)
            };
            if let Some(rpm) = r.requests_per_min {
                out.push(Need {
                    key: name("rpm"),
                    kind: Kind::Requests,
                    per_min: rpm,
                    capacity: r.burst_requests.unwrap_or(rpm),
                    cost: 1,
                });
            }
            if let Some(tpm) = r.tokens_per_min {
                out.push(Need {
                    key: name("tpm"),
                    kind: Kind::Tokens,
                    per_min: tpm,
                    capacity: r.burst_tokens.unwrap_or(tpm),
                    cost: tokens,
                });
            }
        };
        level("g", "", l.global);
        if let Some(id) = &caller.api_key {
            let r = l.keys.get(&**id).map_or(l.per_key, |o| o.over(l.per_key));
            let r = caller.limits.map_or(r, |own| own.over(r));
            level("k", id, r);
        }
        if let Some(org) = &caller.org {
            let r = l.orgs.get(&**org).map_or(l.per_org, |o| o.over(l.per_org));
            level("o", org, r);
        }
        out
    }

    fn budget_scopes(&self, caller: &Caller) -> Vec<BudgetScope> {
        let b = &self.inner.budgets;
        let mut out = Vec::new();
        if !(self.inner.any_budget || own_budget(caller)) {
            return out;
        }
        if let Some(id) = &caller.api_key {
            let budget = b.keys.get(&**id).map_or(b.per_key, |o| o.over(b.per_key));
            let budget = caller.budget.map_or(budget, |own| own.over(budget));
            if !budget.is_empty() {
                out.push(BudgetScope {
                    scope: format!("k:{id}"),
                    budget,
                });
            }
        }
        if let Some(org) = &caller.org {
            let budget = b.orgs.get(&**org).map_or(b.per_org, |o| o.over(b.per_org));
            if !budget.is_empty() {
                out.push(BudgetScope {
                    scope: format!("o:{org}"),
                    budget,
                });
            }
        }
        out
    }

    /// The Unix time in seconds for a check or settlement with budget `scopes`, or 0
    /// when nothing reads it: the budgets' periods (days, months) and the Redis state
    /// need it, token buckets alone do not (they run on the monotonic
    /// [`Limiter::now_ms`]). Then the clock is not read (about 30 ns a reading,
    /// twice per request).
    fn unix_secs_for(&self, scopes: &[BudgetScope]) -> u64 {
        if scopes.is_empty() && self.inner.redis.is_none() {
            return 0;
        }
        unix_now()
    }

    /// The in-memory check of `needs` and `scopes` at `now_ms` / `unix_secs`; an
    /// admitted request's reservation `hold[i]` is added to the reservations of
    /// scope `i` at once (see [`Permit::settle`]).
    fn check_local(
        &self,
        needs: &[Need],
        scopes: &[BudgetScope],
        now_ms: u64,
        unix_secs: u64,
        hold: &[f64],
    ) -> Checked {
        let mut local = self.lock();
        let mut left: Option<f64> = None;
        let mut refused = Vec::new();
        for (index, s) in scopes.iter().enumerate() {
            let (day, month) = local.ledger.spent(&s.scope, unix_secs);
            let (held_day, held_month) = local.reserved.spent(&s.scope, unix_secs);
            for l in [
                s.budget.usd_per_day.map(|l| l - day - held_day),
                s.budget.usd_per_month.map(|l| l - month - held_month),
            ]
            .into_iter()
            .flatten()
            {
                left = Some(left.map_or(l, |b: f64| b.min(l)));
            }
            let over = |used: f64, limit: Option<f64>| limit.is_some_and(|l| used >= l);
            if over(day + held_day, s.budget.usd_per_day) {
                refused.push(Checked::OverBudget {
                    index,
                    spent: day,
                    reserved: held_day,
                    monthly: false,
                });
            }
            if over(month + held_month, s.budget.usd_per_month) {
                refused.push(Checked::OverBudget {
                    index,
                    spent: month,
                    reserved: held_month,
                    monthly: true,
                });
            }
        }
        if let Some(worst) = worst_refusal(refused, scopes.iter().map(|s| s.budget)) {
            return worst;
        }
        // One look-up per bucket when every bucket admits (almost every request):
        // each takes its cost as it is found. The keys are distinct by construction
        // (`needs`), so taking one by one decides as checking all first would.
        let mut views = Vec::with_capacity(needs.len());
        for (i, n) in needs.iter().enumerate() {
            let b = match local.buckets.get_mut(&*n.key) {
                Some(b) => {
                    b.reconfigure(n.per_min, n.capacity, now_ms);
                    b
                }
                None => local.new_bucket(n, now_ms),
            };
            if !b.try_take(n.cost, now_ms) {
                // Refused: the buckets before it get their cost back (at the same
                // `now_ms` exactly their level before), and every bucket is read
                // again for the longest wait and the views.
                for n in &needs[..i] {
                    if let Some(b) = local.buckets.get_mut(&*n.key) {
                        b.refund(n.cost, now_ms);
                    }
                }
                return local.refusal(needs, now_ms);
            }
            views.push(View::of(n, b, now_ms));
        }
        for (s, &usd) in scopes.iter().zip(hold) {
            if usd > 0.0 {
                local.reserved.add(&s.scope, usd, unix_secs);
            }
        }
        Checked::Admitted(views, left.map(|l| l.max(0.0)))
    }

    /// Admits or refuses a request from `caller` of `tokens` tokens (estimated input
    /// plus output cap) on the in-memory state, at `now_ms` (this limiter's monotonic
    /// clock, [`Limiter::now_ms`]) and `unix_secs` (for the budget periods).
    ///
    /// # Errors
    /// 429 `rate_limit_exceeded` or `budget_exceeded` (see the module doc).
    pub fn admit_local_at(
        &self,
        caller: &Caller,
        tokens: u64,
        now_ms: u64,
        unix_secs: u64,
    ) -> Result<Permit, GatewayError> {
        self.admit_local_reserving(caller, tokens, 0.0, now_ms, unix_secs)
    }

    /// [`Limiter::admit_local_at`] reserving `reserve_usd` of the budgets (see
    /// [`Limiter::admit`]).
    ///
    /// # Errors
    /// 429 `rate_limit_exceeded` or `budget_exceeded` (see the module doc).
    pub fn admit_local_reserving(
        &self,
        caller: &Caller,
        tokens: u64,
        reserve_usd: f64,
        now_ms: u64,
        unix_secs: u64,
    ) -> Result<Permit, GatewayError> {
        let needs = self.needs(caller, tokens);
        let scopes = self.budget_scopes(caller);
        let reserve = Reserve::new(&scopes, reserve_usd, unix_secs);
        let checked = self.check_local(&needs, &scopes, now_ms, unix_secs, &reserve.held);
        self.permit(
            caller,
            Ask {
                tokens,
                needs,
                scopes,
                reserve,
            },
            checked,
            Backend::Local,
        )
    }

    /// Admits or refuses a request from `caller`, on Redis when configured (one round
    /// trip), else in memory. `tokens` gives the request's token cost from the
    /// limiter's [`tokens::TokenCounter`]; it is called only when a tokens bucket
    /// applies to the caller (the count may run a tokenizer). `reserve_usd` gives the
    /// most the request may spend, USD ([`Limiter::reserve_usd`]); it is called only
    /// when a budget applies. An admitted request holds that much of each budget
    /// (at most the budget) until it settles, so that requests in flight together
    /// cannot all pass a budget that each alone would find unspent;
    /// [`Permit::settle`] releases it and counts the actual spend.
    ///
    /// # Errors
    /// 429 `rate_limit_exceeded` or `budget_exceeded`; 503 `rate_limiter_unavailable`
    /// when Redis cannot be reached and `state.on_error` is `closed`.
    pub async fn admit(
        &self,
        caller: &Caller,
        tokens: impl FnOnce(&tokens::TokenCounter) -> u64,
        reserve_usd: impl FnOnce(&Limiter) -> f64,
    ) -> Result<Permit, GatewayError> {
        let mut needs = self.needs(caller, 0);
        // Count the request's tokens only if a tokens bucket needs them.
        let tokens = if needs.iter().any(|n| n.kind == Kind::Tokens) {
            let t = tokens(&self.inner.tokens);
            for n in needs.iter_mut().filter(|n| n.kind == Kind::Tokens) {
                n.cost = t;
            }
            t
        } else {
            0
        };
        let scopes = self.budget_scopes(caller);
        let unix_secs = self.unix_secs_for(&scopes);
        let reserve = if scopes.is_empty() {
            Reserve::default()
        } else {
            Reserve::new(&scopes, reserve_usd(self), unix_secs)
        };
        if needs.is_empty() && scopes.is_empty() {
            let checked = Checked::Admitted(Vec::new(), None);
            return self.permit(
                caller,
                Ask {
                    tokens,
                    needs,
                    scopes,
                    reserve,
                },
                checked,
                Backend::Local,
            );
        }
        let now_ms = self.now_ms();
        if let Some(r) = &self.inner.redis {
            if self.inner.redis_down_until.load(Ordering::Relaxed) <= now_ms {
                let redis_scopes = scopes_for_redis(&scopes);
                let hold = redis::Hold {
                    id: &reserve.id,
                    life_ms: self.inner.hold_life_ms,
                    usd: &reserve.held,
                };
                // Until Redis has answered, its reservation may exist with no
                // permit to release it: on a deadline, an error, or this future
                // dropped (the client hung up mid-call), the guard releases it by
                // id (harmless if the admission never ran).
                let mut unclaimed = reserve.holds().then(|| Unclaimed {
                    redis: r.clone(),
                    limiter: self.clone(),
                    scopes: redis_scopes.clone(),
                    id: reserve.id.clone(),
                    unix_secs,
                });
                let answer = r.admit(&needs, &redis_scopes, unix_secs, &hold).await;
                if answer.is_ok() {
                    // A refusal reserved nothing; an admission's permit releases.
                    if let Some(u) = unclaimed.as_mut() {
                        u.id.clear();
                    }
                }
                drop(unclaimed);
                match answer {
                    Ok((checked, seen)) => {
                        self.floor_spend(&redis_scopes, &seen, unix_secs);
                        return self.permit(
                            caller,
                            Ask {
                                tokens,
                                needs,
                                scopes,
                                reserve,
                            },
                            checked,
                            Backend::Redis,
                        );
                    }
                    Err(e) => self.redis_failed("admit", &e),
                }
            }
            if self.inner.on_error == OnError::Closed {
                // `api_error`, as the README's table of errors gives every 503 (the
                // gateway's own 500s are `server_error`).
                return Err(GatewayError::new(
                    ErrorKind::Overloaded,
                    "The rate limiter is unavailable; try again shortly.",
                )
                .with_code(Code::RateLimiterUnavailable)
                .with_fault(Fault::Gateway)
                .with_retry_after(Some(std::time::Duration::from_secs(1))));
            }
        }
        let checked = self.check_local(&needs, &scopes, now_ms, unix_secs, &reserve.held);
        self.permit(
            caller,
            Ask {
                tokens,
                needs,
                scopes,
                reserve,
            },
            checked,
            Backend::Local,
        )
    }

    /// The most a request of `input` tokens in and an output cap of `output` tokens
    /// may spend on any of `endpoints` (registry indices: the model's), USD: the
    /// dearest endpoint's price per 1M tokens. What [`Limiter::admit`] reserves of
    /// the budgets; 0 for unpriced endpoints.
    pub fn reserve_usd(&self, endpoints: &[usize], input: u64, output: u64) -> f64 {
        endpoints
            .iter()
            .filter_map(|&e| self.inner.prices.get(e))
            .map(|p| {
                (input as f64 * p.pricing.input_per_mtok
                    + output as f64 * p.pricing.output_per_mtok)
                    / 1e6
            })
            .fold(0.0, f64::max)
    }

    /// Raises this instance's ledger to the spend Redis reported at an admission
    /// (`seen`, of `scopes`): what every instance spent together is a floor of what
    /// this one falls back to while Redis is skipped (`on_error: open`). Without it a
    /// budget the instances had spent came back whole on each of them during a
    /// Redis outage (three instances spent 3.1 times a budget; outside attack,
    /// 2026-12-07).
    fn floor_spend(&self, scopes: &[(String, Budget)], seen: &[redis::Seen], unix_secs: u64) {
        if seen.is_empty() {
            return;
        }
        let mut local = self.lock();
        for s in seen {
            if let Some((scope, _)) = scopes.get(s.scope) {
                local.ledger.raise(scope, s.monthly, s.usd, unix_secs);
            }
        }
    }

    /// Counts a failed Redis call; one of Redis as a whole
    /// ([`redis::BackendError::is_outage`]) also leaves Redis alone for
    /// [`REDIS_BACKOFF_MS`]. Logged at most once a second for a call's own failure
    /// (a bad key fails every request that touches it).
    fn redis_failed(&self, op: &str, e: &redis::BackendError) {
        self.inner.backend_errors.increment(1);
        let now = self.now_ms();
        if e.is_outage() {
            self.inner
                .redis_down_until
                .store(now + REDIS_BACKOFF_MS, Ordering::Relaxed);
            tracing::warn!(op, error = %e, on_error = ?self.inner.on_error, "rate-limit state (Redis) unavailable");
            return;
        }
        let logged = self.inner.key_error_logged.load(Ordering::Relaxed);
        if (logged == 0 || now >= logged + 1_000)
            && self
                .inner
                .key_error_logged
                .compare_exchange(logged, now, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        {
            tracing::warn!(op, error = %e, on_error = ?self.inner.on_error, "rate-limit state (Redis) refused this request's keys (a key of the gateway's holds a value of another type or not a number); other requests go on using Redis");
        }
    }

    /// The permit of `caller`'s request `ask` that `checked` admitted on `backend`,
    /// or the refusal it names.
    fn permit(
        &self,
        caller: &Caller,
        ask: Ask,
        checked: Checked,
        backend: Backend,
    ) -> Result<Permit, GatewayError> {
        let Ask {
            tokens,
            needs,
            scopes,
            reserve,
        } = ask;
        match checked {
            Checked::Admitted(views, budget_remaining) => {
                let token_needs = needs
                    .into_iter()
                    .filter(|n| n.kind == Kind::Tokens)
                    .collect();
                Ok(Permit {
                    limiter: self.clone(),
                    token_needs,
                    charged_tokens: tokens,
                    backend,
                    key: caller.api_key.clone(),
                    org: caller.org.clone(),
                    scopes,
                    budget_remaining,
                    tight: tightest(&views),
                    prompt_estimate: 0,
                    reserve,
                    settled: AtomicBool::new(false),
                })
            }
            Checked::Refused {
                wait_ms,
                blame,
                views,
            } => {
                let n = &needs[blame];
                let what = match n.kind {
                    Kind::Requests => "requests",
                    Kind::Tokens => "tokens",
                };
                // "needs 1 request", not "1 requests".
                let unit = if n.cost == 1 {
                    what.trim_end_matches('s')
                } else {
                    what
                };
                let level = level_name(&n.key);
                let message = match wait_ms {
                    Some(w) => format!(
                        "Rate limit reached for {level} {what}: limit {} per minute; this request needs {} and may be retried in {} ms.",
                        n.per_min, n.cost, w
                    ),
                    None if n.per_min == 0 && n.cost <= n.capacity => format!(
                        "Rate limit reached for {level} {what}: the limit of {} {what} in all is used up and is not refilled (its per-minute rate is 0).",
                        n.capacity
                    ),
                    None => format!(
                        "This request needs {} {unit}, more than the {level} limit allows at once ({}).",
                        n.cost, n.capacity
                    ),
                };
                let mut e = GatewayError::new(ErrorKind::Throttled, message)
                    .with_code(Code::RateLimitExceeded)
                    .with_headers(rate_headers(&views));
                if let Some(w) = wait_ms {
                    e = e.with_retry_after(Some(std::time::Duration::from_millis(w.max(1))));
                }
                Err(e)
            }
            Checked::OverBudget {
                index,
                spent,
                reserved,
                monthly,
            } => {
                let s = &scopes[index];
                let (who, id) = s.scope.split_once(':').unwrap_or(("k", &s.scope));
                let who = if who == "k" {
                    "API key"
                } else {
                    "organization"
                };
                let _ = id;
                let mut limits = String::new();
                if let Some(d) = s.budget.usd_per_day {
                    let _ = write!(limits, " {d} USD per day");
                }
                if let Some(m) = s.budget.usd_per_month {
                    let _ = write!(limits, " {m} USD per month");
                }
                // `spent` is the refused period's: compared with that period's limit.
                let limit = if monthly {
                    s.budget.usd_per_month
                } else {
                    s.budget.usd_per_day
                };
                let used_up = limit.is_some_and(|l| spent >= l);
                if !used_up {
                    // Held, not spent: requests in flight reserved the rest, and
                    // it comes back as they settle.
                    return Err(GatewayError::new(
                        ErrorKind::Throttled,
                        format!(
                            "The spend budget of this {who} is held by requests in flight ({spent:.4} USD spent, {reserved:.4} USD reserved; budget:{limits}); retry when they end."
                        ),
                    )
                    .with_code(Code::BudgetExceeded)
                    .with_retry_after(Some(std::time::Duration::from_secs(
                        HELD_RETRY_AFTER_SECS,
                    ))));
                }
                // Retry-After: until the spent period ends (the month's when its
                // budget is the one spent, else the day's), so a client's retry
                // logic waits rather than hammering a refusal that cannot change.
                let now = if reserve.unix_secs > 0 {
                    reserve.unix_secs
                } else {
                    unix_now()
                };
                let wait = budget::secs_to_period_end(now, monthly).max(1);
                Err(GatewayError::new(
                    ErrorKind::Throttled,
                    format!(
                        "The spend budget of this {who} is used up ({spent:.4} USD spent; budget:{limits})."
                    ),
                )
                .with_code(Code::BudgetExceeded)
                .with_retry_after(Some(std::time::Duration::from_secs(wait))))
            }
        }
    }
}

/// What a request reserves of budget scope `s`: `usd` (its most possible spend),
/// but no more than that scope's smaller budget (its day's, with a month's too),
/// which it cannot hold more of (a request with an output cap of 10^18 tokens
/// reserves the budget, not 10^15 USD), and nothing that is not a finite positive
/// amount.
fn capped_reserve(s: &BudgetScope, usd: f64) -> f64 {
    let most = [s.budget.usd_per_day, s.budget.usd_per_month]
        .into_iter()
        .flatten()
        .fold(f64::INFINITY, f64::min);
    if usd.is_finite() && usd > 0.0 {
        usd.min(most)
    } else {
        0.0
    }
}

/// A request's longest life after admission, ms: the off-peak hold
/// (`scheduler.off_peak.max_wait_ms`), then `server.max_attempts` attempts, each
/// after the longest queue wait (`scheduler.queue_timeout_ms`) and taking the
/// longest `timeouts.total_ms`, the waits between attempts (backoff and
/// `Retry-After`, within `server.retry_budget_ms`), and a minute; at most two days
/// (a day's spend key's life). A Redis reservation never released holds this long.
fn hold_life_ms(config: &crate::config::Config) -> u64 {
    let total = config
        .providers
        .iter()
        .map(|p| p.timeouts.total_ms)
        .max()
        .unwrap_or(0);
    let q = &config.scheduler.queue_timeout_ms;
    let queue = q.high.max(q.normal).max(q.low);
    let off_peak = config
        .scheduler
        .off_peak
        .as_ref()
        .map_or(0, |o| o.max_wait_ms);
    total
        .saturating_add(queue)
        .saturating_mul(u64::from(config.server.max_attempts.max(1)))
        .saturating_add(config.server.retry_budget_ms)
        .saturating_add(off_peak)
        .saturating_add(60_000)
        .min(2 * 86_400_000)
}

/// A reservation id unique to this request among all gateways sharing a Redis: a
/// per-process random prefix (std's randomly seeded hasher) and a counter.
fn hold_id() -> String {
    use std::hash::{BuildHasher, Hasher};
    static PREFIX: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let prefix = *PREFIX.get_or_init(|| {
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u128(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos()),
        );
        h.write_u32(std::process::id());
        h.finish()
    });
    format!("{prefix:016x}-{:x}", NEXT.fetch_add(1, Ordering::Relaxed))
}

fn own_limits(caller: &Caller) -> bool {
    caller.limits.is_some_and(|l| !l.is_empty())
}

fn own_budget(caller: &Caller) -> bool {
    caller.budget.is_some_and(|b| !b.is_empty())
}

fn scopes_for_redis(scopes: &[BudgetScope]) -> Vec<(String, Budget)> {
    scopes.iter().map(|s| (s.scope.clone(), s.budget)).collect()
}

/// `global`, `API key`, `organization` from a bucket name.
fn level_name(key: &str) -> &'static str {
    match key.as_bytes().first() {
        Some(b'k') => "API key",
        Some(b'o') => "organization",
        _ => "global",
    }
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// OpenAI's duration format of `x-ratelimit-reset-*`: `20ms`, `1s`, `6m0s`, `1h2m3s`.
pub fn reset_text(ms: u64) -> String {
    let mut out = ResetText::default();
    out.write(ms);
    String::from_utf8_lossy(out.as_bytes()).into_owned()
}

/// [`reset_text`] written into a fixed buffer (the longest, for `u64::MAX` ms,
/// is 20 bytes), without the formatting machinery: it is written into every
/// admitted answer's headers.
#[derive(Default)]
struct ResetText {
    buf: [u8; 32],
    len: usize,
}

impl ResetText {
    fn push(&mut self, n: u64, unit: &[u8]) {
        let mut digits = itoa::Buffer::new();
        for part in [digits.format(n).as_bytes(), unit] {
            self.buf[self.len..self.len + part.len()].copy_from_slice(part);
            self.len += part.len();
        }
    }

    fn write(&mut self, ms: u64) {
        if ms < 1000 {
            return self.push(ms, b"ms");
        }
        let s = ms.div_ceil(1000);
        let (h, m, s) = (s / 3600, (s / 60) % 60, s % 60);
        if h > 0 {
            self.push(h, b"h");
        }
        if h > 0 || m > 0 {
            self.push(m, b"m");
        }
        self.push(s, b"s");
    }

    fn as_bytes(&self) -> &[u8] {
        &self.buf[..self.len]
    }

    /// The text (ASCII digits and unit letters by construction).
    fn as_str(&self) -> &str {
        std::str::from_utf8(self.as_bytes()).unwrap_or("")
    }
}

/// `x-ratelimit-{limit,remaining,reset}-{requests,tokens}`, by kind: built once,
/// not per request.
static RATE_NAMES: [[HeaderName; 3]; 2] = [
    [
        HeaderName::from_static("x-ratelimit-limit-requests"),
        HeaderName::from_static("x-ratelimit-remaining-requests"),
        HeaderName::from_static("x-ratelimit-reset-requests"),
    ],
    [
        HeaderName::from_static("x-ratelimit-limit-tokens"),
        HeaderName::from_static("x-ratelimit-remaining-tokens"),
        HeaderName::from_static("x-ratelimit-reset-tokens"),
    ],
];

/// For each kind (requests, tokens), the bucket with the fewest units left: what
/// the `x-ratelimit-*` headers describe.
fn tightest(views: &[View]) -> [Option<View>; 2] {
    let min = |kind: Kind| {
        views
            .iter()
            .filter(|v| v.kind == kind)
            .min_by_key(|v| v.remaining)
            .copied()
    };
    [min(Kind::Requests), min(Kind::Tokens)]
}

/// Writes the `x-ratelimit-*` headers of `tight` ([`tightest`]) into `h`.
fn write_rate_headers(tight: &[Option<View>; 2], h: &mut HeaderMap) {
    for (v, names) in tight.iter().zip(&RATE_NAMES) {
        let Some(v) = v else { continue };
        h.insert(names[0].clone(), HeaderValue::from(v.capacity));
        h.insert(names[1].clone(), HeaderValue::from(v.remaining));
        if v.reset_ms == u64::MAX {
            continue;
        }
        let mut reset = ResetText::default();
        reset.write(v.reset_ms);
        if let Ok(reset) = HeaderValue::from_bytes(reset.as_bytes()) {
            h.insert(names[2].clone(), reset);
        }
    }
}

/// [`write_rate_headers`] as field lines: an admitted answer's, appended once to
/// the lines the HTTP/1.1 server writes whole (no header map insert per field).
fn write_rate_lines(tight: &[Option<View>; 2], l: &mut HeaderLines) {
    for (v, names) in tight.iter().zip(&RATE_NAMES) {
        let Some(v) = v else { continue };
        l.push_u64(&names[0], v.capacity);
        l.push_u64(&names[1], v.remaining);
        if v.reset_ms == u64::MAX {
            continue;
        }
        let mut reset = ResetText::default();
        reset.write(v.reset_ms);
        l.push_str(&names[2], reset.as_str());
    }
}

/// The `x-ratelimit-*` headers of `views` as a map (for a refusal).
fn rate_headers(views: &[View]) -> HeaderMap {
    let mut h = HeaderMap::new();
    write_rate_headers(&tightest(views), &mut h);
    h
}

/// An admitted request's claim on the limits, settled when its answer ends.
#[derive(Debug)]
pub struct Permit {
    limiter: Limiter,
    token_needs: Vec<Need>,
    charged_tokens: u64,
    backend: Backend,
    key: Option<Arc<str>>,
    org: Option<Arc<str>>,
    scopes: Vec<BudgetScope>,
    /// The least budget left (USD) among the caller's budgets for the current UTC
    /// day and month, as of admission (before this request's own spend); `None`: no
    /// budget applies. From the same check that admitted (in memory, or Redis's
    /// admission script), so it costs no extra lock or round trip.
    pub budget_remaining: Option<f64>,
    /// The request's estimated input tokens (about 4 characters per token, set by
    /// the gateway's admit step): what an answer whose provider reported no `usage`
    /// is settled with as its input, so its spend still counts against the budgets.
    pub prompt_estimate: u64,
    /// The buckets its `x-ratelimit-*` headers describe (written into the response,
    /// not kept as a header map).
    tight: [Option<View>; 2],
    /// The spend reserved of the budgets at admission, and when.
    reserve: Reserve,
    settled: AtomicBool,
}

impl Drop for Permit {
    /// A permit dropped unsettled (a path that ends a request without an answer to
    /// settle with) gives its budget reservation back rather than hold it for the
    /// rest of the day: spend is only ever what answers reported.
    fn drop(&mut self) {
        if self.reserve.holds() && !self.settled.load(Ordering::Acquire) {
            self.settle(None, &Usage::default());
        }
    }
}

/// Of the budgets `refused` (each a [`Checked::OverBudget`]; `budgets` the scopes'
/// budgets by index), the one the refusal names: a budget spent for its month, then
/// one spent for its day, then one only held by requests in flight; so its
/// `Retry-After` is the longest wait (a key's day and its organization's month both
/// spent: the month's). `None` when none was refused.
fn worst_refusal(
    refused: Vec<Checked>,
    budgets: impl Iterator<Item = Budget> + Clone,
) -> Option<Checked> {
    let rank = |c: &Checked| match c {
        Checked::OverBudget {
            index,
            spent,
            monthly,
            ..
        } => {
            let b = budgets.clone().nth(*index).unwrap_or_default();
            let limit = if *monthly {
                b.usd_per_month
            } else {
                b.usd_per_day
            };
            match (limit.is_some_and(|l| *spent >= l), monthly) {
                (true, true) => 3,
                (true, false) => 2,
                _ => 1,
            }
        }
        _ => 0,
    };
    refused.into_iter().max_by_key(|c| rank(c))
}

/// `Retry-After` of a budget refusal whose budget is held by requests in flight
/// rather than spent, seconds.
pub const HELD_RETRY_AFTER_SECS: u64 = 1;

/// A Redis reservation made, or perhaps made, by an admission call with no permit
/// yet to release it: released by id when dropped unless claimed (`id` cleared).
struct Unclaimed {
    redis: redis::RedisBackend,
    limiter: Limiter,
    scopes: Vec<(String, Budget)>,
    id: String,
    unix_secs: u64,
}

impl Drop for Unclaimed {
    fn drop(&mut self) {
        if self.id.is_empty() {
            return;
        }
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let (r, limiter) = (self.redis.clone(), self.limiter.clone());
        let (scopes, id, unix_secs) = (
            std::mem::take(&mut self.scopes),
            std::mem::take(&mut self.id),
            self.unix_secs,
        );
        rt.spawn(async move {
            if let Err(e) = r.settle(&[], 0, &scopes, 0.0, &id, unix_secs).await {
                limiter.redis_failed("release", &e);
            }
        });
    }
}

/// What one request asks of the limiter: `tokens` (its token cost), the buckets it
/// `needs`, the budget `scopes` it spends in, and the `reserve` it holds of them.
struct Ask {
    tokens: u64,
    needs: Vec<Need>,
    scopes: Vec<BudgetScope>,
    reserve: Reserve,
}

/// What an admitted request reserved of its budgets, in the UTC day and month of
/// `unix_secs`: `held[i]` USD of scope `i` (none when no budget applies), under
/// reservation `id` (Redis's field for it).
#[derive(Debug, Clone, Default)]
struct Reserve {
    held: Vec<f64>,
    id: String,
    unix_secs: u64,
}

impl Reserve {
    /// The reservation of at most `usd` of each of `scopes` at `unix_secs`.
    fn new(scopes: &[BudgetScope], usd: f64, unix_secs: u64) -> Reserve {
        let held: Vec<f64> = scopes.iter().map(|s| capped_reserve(s, usd)).collect();
        let id = if held.iter().any(|&u| u > 0.0) {
            hold_id()
        } else {
            String::new()
        };
        Reserve {
            held,
            id,
            unix_secs,
        }
    }

    /// Whether anything is held.
    fn holds(&self) -> bool {
        !self.id.is_empty()
    }
}

impl Permit {
    /// The `x-ratelimit-*` headers as of admission, as a new map (the fields
    /// [`Permit::write_lines`] writes).
    pub fn headers(&self) -> HeaderMap {
        let mut h = HeaderMap::new();
        write_rate_headers(&self.tight, &mut h);
        h
    }

    /// Appends the `x-ratelimit-*` headers as of admission to `l`, the successful
    /// response's field lines.
    pub fn write_lines(&self, l: &mut HeaderLines) {
        write_rate_lines(&self.tight, l);
    }

    /// Tokens charged at admission (estimated input + output cap).
    pub fn charged_tokens(&self) -> u64 {
        self.charged_tokens
    }

    /// Reconciles the permit with the answer's actual `usage` on registry endpoint
    /// `endpoint` (the one that served): token buckets get the difference to the
    /// charged estimate refunded or charged, and the spend in USD (the endpoint's
    /// provider prices per 1M tokens) replaces the reservation made of the budgets
    /// at admission (in the day and month of the admission) and is added to
    /// `switchyard_spend_usd_total`. Only the first call counts; never blocks (the
    /// Redis update runs in the background, with its deadline).
    pub fn settle(&self, endpoint: Option<usize>, usage: &Usage) {
        let unix_secs = if self.reserve.unix_secs > 0 {
            self.reserve.unix_secs
        } else {
            self.limiter.unix_secs_for(&self.scopes)
        };
        self.settle_at(endpoint, usage, self.limiter.now_ms(), unix_secs);
    }

    /// The most reserved of any one budget at admission, USD (0: none).
    pub fn reserved_usd(&self) -> f64 {
        self.reserve.held.iter().copied().fold(0.0, f64::max)
    }

    /// [`Permit::settle`] at `now_ms` (the limiter's monotonic clock) and `unix_secs`
    /// (the budget period the spend counts in).
    pub fn settle_at(&self, endpoint: Option<usize>, usage: &Usage, now_ms: u64, unix_secs: u64) {
        if self.settled.swap(true, Ordering::AcqRel) {
            return;
        }
        let inner = &self.limiter.inner;
        let price = endpoint.and_then(|e| inner.prices.get(e));
        let usd = price.map_or(0.0, |p| {
            (usage.prompt_tokens as f64 * p.pricing.input_per_mtok
                + usage.completion_tokens as f64 * p.pricing.output_per_mtok)
                / 1e6
        });
        // (Nothing to add for an unpriced endpoint: skipping saves the labelled
        // gauge's lookup, which clones three label strings.)
        if let Some(p) = price.filter(|_| usd > 0.0) {
            // Without caller labels, `all`: one series per model however many key
            // ids callers present (in `auth.mode: none` any token is a new one).
            let label = |v: &Option<Arc<str>>| match (inner.caller_labels, v) {
                (false, _) => "all".to_string(),
                (true, Some(v)) => v.to_string(),
                (true, None) => "none".to_string(),
            };
            metrics::gauge!(t::SPEND,
                "key" => label(&self.key),
                "org" => label(&self.org),
                "model" => p.model.to_string())
            .increment(usd);
        }
        let actual = usage
            .total_tokens
            .max(usage.prompt_tokens.saturating_add(usage.completion_tokens));
        let delta = i128::from(self.charged_tokens) - i128::from(actual);
        // The budgets get the actual spend, and the reservation made at admission
        // is taken off the reservations (each on its own, so that the arithmetic of
        // a large reservation never touches the spend).
        let usd_spent = if self.scopes.is_empty() { 0.0 } else { usd };
        if self.backend == Backend::Redis {
            if let (Some(r), Ok(rt)) = (&inner.redis, tokio::runtime::Handle::try_current()) {
                let r = r.clone();
                let limiter = self.limiter.clone();
                let needs = self.token_needs.clone();
                let scopes = scopes_for_redis(&self.scopes);
                let hold_id = self.reserve.id.clone();
                rt.spawn(async move {
                    let settled = r
                        .settle(&needs, delta, &scopes, usd_spent, &hold_id, unix_secs)
                        .await;
                    if let Err(e) = settled {
                        limiter.redis_failed("settle", &e);
                    }
                });
            }
            // This instance's own spend is known to it too: with the floors Redis
            // reports at admission ([`Limiter::floor_spend`]), what it falls back to
            // while Redis is skipped.
            if usd_spent > 0.0 {
                let mut local = self.limiter.lock();
                for s in &self.scopes {
                    local.ledger.add(&s.scope, usd_spent, unix_secs);
                }
            }
            return;
        }
        let mut local = self.limiter.lock();
        let units = u64::try_from(delta.unsigned_abs()).unwrap_or(u64::MAX);
        for n in &self.token_needs {
            if delta > 0 {
                // A bucket forgotten meanwhile was full: nothing to give back.
                if let Some(b) = local.buckets.get_mut(&*n.key) {
                    b.refund(units, now_ms);
                }
            } else if delta < 0 {
                // The sweep forgets full buckets, and a long request's bucket may
                // have refilled before its answer ended: overuse is still owed, to
                // a full bucket made again.
                local
                    .buckets
                    .entry(n.key.to_string())
                    .or_insert_with(|| Bucket::full(n.per_min, n.capacity, now_ms))
                    .charge(units, now_ms);
            }
        }
        for (i, s) in self.scopes.iter().enumerate() {
            if usd_spent > 0.0 {
                local.ledger.add(&s.scope, usd_spent, unix_secs);
            }
            let held = self.reserve.held.get(i).copied().unwrap_or(0.0);
            if held > 0.0 {
                local.reserved.add(&s.scope, -held, unix_secs);
            }
        }
    }
}

#[cfg(test)]
mod tests;
