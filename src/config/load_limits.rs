//! Validation of `limits:`, `budgets:` and `state:` (a child of `load`, sharing its
//! validator).

use serde_yaml::{Mapping, Value};

use super::super::limits::{
    Budget, BudgetsConfig, LimitsConfig, OnError, RateLimit, StateConfig, MAX_RATE, MAX_USD,
};
use super::{join, Validator};

impl Validator {
    fn rate_limit(&mut self, value: &Value, path: &str) -> RateLimit {
        let mut r = RateLimit::default();
        let Some(map) = self.mapping(value, path) else {
            return r;
        };
        self.unknown_keys(
            map,
            &[
                "requests_per_min",
                "tokens_per_min",
                "burst_requests",
                "burst_tokens",
            ],
            path,
        );
        r.requests_per_min = self.uint(map, "requests_per_min", path, 0, MAX_RATE);
        r.tokens_per_min = self.uint(map, "tokens_per_min", path, 0, MAX_RATE);
        r.burst_requests = self.uint(map, "burst_requests", path, 1, MAX_RATE);
        r.burst_tokens = self.uint(map, "burst_tokens", path, 1, MAX_RATE);
        r
    }

    fn named<T>(
        &mut self,
        map: &Mapping,
        key: &str,
        path: &str,
        mut each: impl FnMut(&mut Self, &Value, &str) -> T,
    ) -> std::collections::BTreeMap<String, T> {
        let mut out = std::collections::BTreeMap::new();
        let path = join(path, key);
        let Some(m) = self.mapping(map.get(key).unwrap_or(&Value::Null), &path) else {
            return out;
        };
        for (k, v) in m {
            match k.as_str() {
                Some(name) => {
                    let p = join(&path, name);
                    let item = each(self, v, &p);
                    out.insert(name.to_string(), item);
                }
                None => self.err(&path, "keys must be strings"),
            }
        }
        out
    }

    pub(super) fn limits(&mut self, value: &Value) -> LimitsConfig {
        let path = "limits";
        let mut cfg = LimitsConfig::default();
        let Some(map) = self.mapping(value, path) else {
            return cfg;
        };
        self.unknown_keys(
            map,
            &[
                "global",
                "per_key",
                "per_org",
                "keys",
                "orgs",
                "default_output_tokens",
            ],
            path,
        );
        let null = Value::Null;
        cfg.global = self.rate_limit(map.get("global").unwrap_or(&null), "limits.global");
        cfg.per_key = self.rate_limit(map.get("per_key").unwrap_or(&null), "limits.per_key");
        cfg.per_org = self.rate_limit(map.get("per_org").unwrap_or(&null), "limits.per_org");
        cfg.keys = self.named(map, "keys", path, |v, val, p| v.rate_limit(val, p));
        cfg.orgs = self.named(map, "orgs", path, |v, val, p| v.rate_limit(val, p));
        if let Some(n) = self.uint(map, "default_output_tokens", path, 0, 10_000_000) {
            cfg.default_output_tokens = n;
        }
        cfg
    }

    fn budget(&mut self, value: &Value, path: &str) -> Budget {
        let mut b = Budget::default();
        let Some(map) = self.mapping(value, path) else {
            return b;
        };
        self.unknown_keys(map, &["usd_per_day", "usd_per_month"], path);
        b.usd_per_day = self.float(map, "usd_per_day", path, 0.0, MAX_USD);
        b.usd_per_month = self.float(map, "usd_per_month", path, 0.0, MAX_USD);
        b
    }

    pub(super) fn budgets(&mut self, value: &Value) -> BudgetsConfig {
        let path = "budgets";
        let mut cfg = BudgetsConfig::default();
        let Some(map) = self.mapping(value, path) else {
            return cfg;
        };
        self.unknown_keys(map, &["per_key", "per_org", "keys", "orgs"], path);
        let null = Value::Null;
        cfg.per_key = self.budget(map.get("per_key").unwrap_or(&null), "budgets.per_key");
        cfg.per_org = self.budget(map.get("per_org").unwrap_or(&null), "budgets.per_org");
        cfg.keys = self.named(map, "keys", path, |v, val, p| v.budget(val, p));
        cfg.orgs = self.named(map, "orgs", path, |v, val, p| v.budget(val, p));
        cfg
    }

    pub(super) fn state(&mut self, value: &Value) -> StateConfig {
        let path = "state";
        let mut cfg = StateConfig::default();
        let Some(map) = self.mapping(value, path) else {
            return cfg;
        };
        self.unknown_keys(map, &["redis", "timeout_ms", "on_error"], path);
        if let Some(url) = self.redis_url(map, "redis", path) {
            cfg.redis = Some(url);
        }
        if let Some(n) = self.uint(map, "timeout_ms", path, 1, 60_000) {
            cfg.timeout_ms = n;
        }
        let modes = [("open", OnError::Open), ("closed", OnError::Closed)];
        if let Some(m) = self.choice(map, "on_error", path, &modes) {
            cfg.on_error = m;
        }
        cfg
    }
}

#[cfg(test)]
mod tests {
    use crate::config::{parse_str, OnError};

    const BASE: &str = "providers: { p: { kind: mock } }\nmodels: { m: { endpoints: [ { provider: p, model: x } ] } }\n";

    #[test]
    fn limits_budgets_and_state_parse() {
        let yaml = format!(
            "{BASE}limits:\n  global: {{ requests_per_min: 600, tokens_per_min: 100000 }}\n  per_key: {{ requests_per_min: 60, burst_requests: 10 }}\n  keys: {{ key-1: {{ requests_per_min: 6 }} }}\nbudgets:\n  per_org: {{ usd_per_day: 5.5 }}\nstate: {{ redis: 'redis://127.0.0.1:6379', timeout_ms: 20, on_error: closed }}\n"
        );
        let c = parse_str(&yaml, None).unwrap();
        assert_eq!(c.limits.global.requests_per_min, Some(600));
        assert_eq!(c.limits.per_key.burst_requests, Some(10));
        assert_eq!(c.limits.keys["key-1"].requests_per_min, Some(6));
        assert_eq!(c.budgets.per_org.usd_per_day, Some(5.5));
        assert_eq!(c.state.timeout_ms, 20);
        assert_eq!(c.state.on_error, OnError::Closed);
    }

    #[test]
    fn every_bad_key_is_reported() {
        let yaml = format!(
            "{BASE}limits:\n  global: {{ request_per_min: 1 }}\n  per_key: {{ tokens_per_min: -1 }}\nstate: {{ redis: 'http://x', on_error: maybe }}\n"
        );
        let errs = parse_str(&yaml, None).unwrap_err();
        let paths: Vec<_> = errs.errors.iter().map(|e| e.path.as_str()).collect();
        assert!(
            paths.contains(&"limits.global.request_per_min"),
            "{paths:?}"
        );
        assert!(
            paths.contains(&"limits.per_key.tokens_per_min"),
            "{paths:?}"
        );
        assert!(paths.contains(&"state.redis"), "{paths:?}");
        assert!(paths.contains(&"state.on_error"), "{paths:?}");
    }

    // Regression (outside attack, 2026-12-07): `rediss://` (no TLS in this build) and
    // URLs the Redis client cannot read passed `serve --check`; at start the limits
    // then stayed in memory on every instance, `on_error: closed` included, and the
    // cache was switched off, with one log line each. Expected: a config error
    // naming the field, without the password.
    #[test]
    fn an_unusable_redis_url_is_a_config_error_naming_the_field() {
        for (section, field) in [("state", "state.redis"), ("cache", "cache.redis")] {
            for url in [
                "rediss://127.0.0.1:6380",
                "redis://127.0.0.1:notaport",
                "redis://:s3cret@127.0.0.1:notaport",
                "redis://:s3/cret@127.0.0.1:notaport",
                "redis://127.0.0.1:6379/abc",
                "redis://",
            ] {
                let yaml = format!("{BASE}{section}: {{ redis: '{url}' }}\n");
                let errs = parse_str(&yaml, None).unwrap_err();
                let e = errs
                    .errors
                    .iter()
                    .find(|e| e.path == field)
                    .unwrap_or_else(|| panic!("{url}: {errs:?}"));
                assert!(
                    !e.message.contains("s3cret") && !e.message.contains("cret@"),
                    "{}",
                    e.message
                );
            }
            for url in [
                "redis://127.0.0.1:6379",
                "redis://127.0.0.1:6379/5",
                "redis://:pw@127.0.0.1:6379/0",
                "redis://user:pw@localhost",
            ] {
                let yaml = format!("{BASE}{section}: {{ redis: '{url}' }}\n");
                let c = parse_str(&yaml, None).unwrap_or_else(|e| panic!("{url}: {e:?}"));
                let got = if section == "state" {
                    c.state.redis
                } else {
                    c.cache.redis
                };
                assert_eq!(got.as_deref(), Some(url));
            }
        }
    }
}
