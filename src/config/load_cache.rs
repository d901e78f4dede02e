//! Validation of `cache:` (a child of `load`, sharing its validator).

use serde_yaml::Value;

use super::super::cache::{parse_duration_ms, CacheConfig, CacheMode, Replay, Share, MAX_TTL_MS};
use super::{describe, join, Validator};

impl Validator {
    pub(super) fn cache(&mut self, value: &Value) -> CacheConfig {
        let path = "cache";
        let mut cfg = CacheConfig::default();
        let Some(map) = self.mapping(value, path) else {
            return cfg;
        };
        self.unknown_keys(
            map,
            &[
                "enabled",
                "mode",
                "tau",
                "ttl",
                "capacity",
                "max_bytes",
                "stochastic",
                "redis",
                "redis_timeout_ms",
                "replay",
                "share",
            ],
            path,
        );
        if let Some(b) = self.boolean(map, "enabled", path) {
            cfg.enabled = b;
        }
        if let Some(b) = self.boolean(map, "stochastic", path) {
            cfg.stochastic = b;
        }
        let modes = [
            ("semantic", CacheMode::Semantic),
            ("exact", CacheMode::Exact),
        ];
        if let Some(m) = self.choice(map, "mode", path, &modes) {
            cfg.mode = m;
        }
        if let Some(n) = self.uint(map, "tau", path, 0, 16) {
            cfg.tau = n as u32;
        }
        if let Some(n) = self.uint(map, "capacity", path, 1, 100_000_000) {
            cfg.capacity = n;
        }
        if let Some(n) = self.uint(map, "max_bytes", path, 1 << 20, 1 << 40) {
            cfg.max_bytes = n;
        }
        if let Some(n) = self.uint(map, "redis_timeout_ms", path, 1, 10_000) {
            cfg.redis_timeout_ms = n;
        }
        match map.get("ttl") {
            None | Some(Value::Null) => {}
            Some(Value::String(s)) => match parse_duration_ms(s) {
                Ok(ms) if (1_000..=MAX_TTL_MS).contains(&ms) => cfg.ttl_ms = ms,
                Ok(_) => self.err(
                    join(path, "ttl"),
                    format!("\"{s}\" is out of range (1s to 30d)"),
                ),
                Err(e) => self.err(join(path, "ttl"), e),
            },
            Some(other) => self.err(
                join(path, "ttl"),
                format!(
                    "expected a duration like `10m` or `1h`, found {}",
                    describe(other)
                ),
            ),
        }
        if let Some(url) = self.redis_url(map, "redis", path) {
            cfg.redis = Some(url);
        }
        let replays = [
            ("recorded", Replay::Recorded),
            ("compressed", Replay::Compressed),
            ("none", Replay::None),
        ];
        if let Some(r) = self.choice(map, "replay", path, &replays) {
            cfg.replay = r;
        }
        let shares = [
            ("org", Share::Org),
            ("key", Share::Key),
            ("all", Share::All),
        ];
        if let Some(sh) = self.choice(map, "share", path, &shares) {
            cfg.share = sh;
        }
        cfg
    }
}

#[cfg(test)]
mod tests {
    use crate::config::{parse_str, CacheMode, Replay};

    const BASE: &str = "providers: { p: { kind: mock } }\nmodels: { m: { endpoints: [ { provider: p, model: x } ] } }\n";

    #[test]
    fn cache_section_parses_with_defaults() {
        let c = parse_str(BASE, None).unwrap();
        assert!(!c.cache.enabled);
        assert_eq!(c.cache.ttl_ms, 3_600_000);
        assert_eq!(c.cache.tau, 3);
        let yaml = format!(
            "{BASE}cache: {{ enabled: true, mode: exact, tau: 2, ttl: 10m, capacity: 50, stochastic: true, redis: 'redis://127.0.0.1:6379', redis_timeout_ms: 20, replay: compressed, share: key }}\n"
        );
        let c = parse_str(&yaml, None).unwrap();
        assert!(c.cache.enabled && c.cache.stochastic);
        assert_eq!(c.cache.mode, CacheMode::Exact);
        assert_eq!(
            (c.cache.tau, c.cache.ttl_ms, c.cache.capacity),
            (2, 600_000, 50)
        );
        assert_eq!(c.cache.redis.as_deref(), Some("redis://127.0.0.1:6379"));
        assert_eq!(c.cache.redis_timeout_ms, 20);
        assert_eq!(c.cache.replay, Replay::Compressed);
        assert_eq!(c.cache.share, crate::config::Share::Key);
    }

    #[test]
    fn every_bad_cache_key_is_reported_with_its_path() {
        let yaml = format!(
            "{BASE}cache: {{ enabeld: true, mode: fuzzy, tau: 99, ttl: 10, redis: 'http://x', replay: fast, capacity: 0 }}\n"
        );
        let errs = parse_str(&yaml, None).unwrap_err();
        let paths: Vec<_> = errs.errors.iter().map(|e| e.path.as_str()).collect();
        for p in [
            "cache.enabeld",
            "cache.mode",
            "cache.tau",
            "cache.ttl",
            "cache.redis",
            "cache.replay",
            "cache.capacity",
        ] {
            assert!(paths.contains(&p), "{p} missing in {paths:?}");
        }
        let text = errs.to_string();
        assert!(text.contains("did you mean \"enabled\""), "{text}");
        let yaml = format!("{BASE}cache: {{ ttl: 1x }}\n");
        let errs = parse_str(&yaml, None).unwrap_err().to_string();
        assert!(
            errs.contains("cache.ttl") && errs.contains("units"),
            "{errs}"
        );
    }
}
