//! `limits:`, `budgets:` and `state:`: rate limits, spend budgets and where their
//! state lives (see the README, "Rate limits and budgets").

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// One level's rate limit (`requests_per_min`, `tokens_per_min`, `burst_requests`,
/// `burst_tokens`); an absent field sets no limit (or, in a `keys:`/`orgs:` override,
/// keeps the `per_key`/`per_org` default). Also the shape of a key entry's own
/// `limits:` (`crate::config::KeyEntry`), read with serde.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RateLimit {
    /// Requests per minute (the bucket's refill rate).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requests_per_min: Option<u64>,
    /// Tokens per minute (estimated input + output cap, settled to actual usage).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokens_per_min: Option<u64>,
    /// Bucket capacity in requests (default: `requests_per_min`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub burst_requests: Option<u64>,
    /// Bucket capacity in tokens (default: `tokens_per_min`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub burst_tokens: Option<u64>,
}

/// Largest rate or burst accepted, in units per minute (10^12).
pub const MAX_RATE: u64 = 1_000_000_000_000;

/// Largest budget accepted, USD (10^12).
pub const MAX_USD: f64 = 1e12;

impl RateLimit {
    /// `self`'s fields, each falling back to `base`'s when absent.
    pub fn over(self, base: RateLimit) -> RateLimit {
        RateLimit {
            requests_per_min: self.requests_per_min.or(base.requests_per_min),
            tokens_per_min: self.tokens_per_min.or(base.tokens_per_min),
            burst_requests: self.burst_requests.or(base.burst_requests),
            burst_tokens: self.burst_tokens.or(base.burst_tokens),
        }
    }

    /// Whether no limit is set.
    pub fn is_empty(&self) -> bool {
        self.requests_per_min.is_none() && self.tokens_per_min.is_none()
    }

    /// Out-of-range fields, as `(field, sentence)` (rates 0 to [`MAX_RATE`], bursts 1
    /// to [`MAX_RATE`]), for a key entry's `limits:` (the `limits:` section checks the
    /// same ranges through the config validator).
    pub fn problems(&self) -> Vec<(&'static str, String)> {
        let mut out = Vec::new();
        let mut check = |name: &'static str, v: Option<u64>, min: u64| {
            if let Some(v) = v.filter(|v| *v < min || *v > MAX_RATE) {
                out.push((name, format!("{v} is out of range ({min} to {MAX_RATE})")));
            }
        };
        check("requests_per_min", self.requests_per_min, 0);
        check("tokens_per_min", self.tokens_per_min, 0);
        check("burst_requests", self.burst_requests, 1);
        check("burst_tokens", self.burst_tokens, 1);
        out
    }
}

/// Default output cap counted for a request that sets neither `max_tokens` nor
/// `max_completion_tokens`, in tokens (`limits.default_output_tokens`).
pub const DEFAULT_OUTPUT_TOKENS: u64 = 1024;

/// `limits:` section.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LimitsConfig {
    /// One bucket pair shared by every request.
    pub global: RateLimit,
    /// The default of every API key id.
    pub per_key: RateLimit,
    /// The default of every organization.
    pub per_org: RateLimit,
    /// Per key id overrides (field by field over `per_key`).
    pub keys: BTreeMap<String, RateLimit>,
    /// Per organization overrides (field by field over `per_org`).
    pub orgs: BTreeMap<String, RateLimit>,
    /// Output tokens counted when a request sets no output cap.
    pub default_output_tokens: u64,
}

impl Default for LimitsConfig {
    fn default() -> Self {
        LimitsConfig {
            global: RateLimit::default(),
            per_key: RateLimit::default(),
            per_org: RateLimit::default(),
            keys: BTreeMap::new(),
            orgs: BTreeMap::new(),
            default_output_tokens: DEFAULT_OUTPUT_TOKENS,
        }
    }
}

impl LimitsConfig {
    /// Whether any rate limit is configured.
    pub fn any(&self) -> bool {
        !(self.global.is_empty()
            && self.per_key.is_empty()
            && self.per_org.is_empty()
            && self.keys.values().all(RateLimit::is_empty)
            && self.orgs.values().all(RateLimit::is_empty))
    }
}

/// One scope's budget in USD; an absent field sets no budget. Also the shape of a
/// key entry's own `budget:` (`crate::config::KeyEntry`), read with serde.
#[derive(Debug, Clone, Copy, Default, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Budget {
    /// USD per UTC day.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usd_per_day: Option<f64>,
    /// USD per UTC calendar month.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usd_per_month: Option<f64>,
}

impl Budget {
    /// `self`'s fields, each falling back to `base`'s when absent.
    pub fn over(self, base: Budget) -> Budget {
        Budget {
            usd_per_day: self.usd_per_day.or(base.usd_per_day),
            usd_per_month: self.usd_per_month.or(base.usd_per_month),
        }
    }

    /// Whether no budget is set.
    pub fn is_empty(&self) -> bool {
        self.usd_per_day.is_none() && self.usd_per_month.is_none()
    }

    /// Out-of-range fields (not a number from 0 to [`MAX_USD`]), as `(field,
    /// sentence)`, for a key entry's `budget:`.
    pub fn problems(&self) -> Vec<(&'static str, String)> {
        let mut out = Vec::new();
        for (name, v) in [
            ("usd_per_day", self.usd_per_day),
            ("usd_per_month", self.usd_per_month),
        ] {
            if let Some(v) = v.filter(|v| !(0.0..=MAX_USD).contains(v)) {
                out.push((name, format!("{v} is out of range (0 to {MAX_USD})")));
            }
        }
        out
    }
}

/// `budgets:` section.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct BudgetsConfig {
    /// The default of every API key id.
    pub per_key: Budget,
    /// The default of every organization.
    pub per_org: Budget,
    /// Per key id overrides.
    pub keys: BTreeMap<String, Budget>,
    /// Per organization overrides.
    pub orgs: BTreeMap<String, Budget>,
}

impl BudgetsConfig {
    /// Whether any budget is configured.
    pub fn any(&self) -> bool {
        !(self.per_key.is_empty()
            && self.per_org.is_empty()
            && self.keys.values().all(Budget::is_empty)
            && self.orgs.values().all(Budget::is_empty))
    }
}

/// What a limit does while its shared state (Redis) cannot be reached.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum OnError {
    /// Fall back to this instance's in-memory buckets and spend (the default).
    #[default]
    Open,
    /// Refuse with 503 `rate_limiter_unavailable`.
    Closed,
}

/// `state:` section: where limit buckets and spend live.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StateConfig {
    /// `redis://host:port[/db]`; `None`: in memory (the default).
    pub redis: Option<String>,
    /// Deadline of every Redis call, ms (default 50).
    pub timeout_ms: u64,
    /// What happens while Redis is unreachable.
    pub on_error: OnError,
}

impl Default for StateConfig {
    fn default() -> Self {
        StateConfig {
            redis: None,
            timeout_ms: 50,
            on_error: OnError::Open,
        }
    }
}
