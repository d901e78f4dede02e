//! Validation of a parsed YAML tree into [`Config`], reporting every problem with its
//! path.

use std::collections::HashSet;
use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde_yaml::{Mapping, Value};

use super::MockOptions;
use super::{
    BreakerConfig, Config, EndpointConfig, ModelConfig, PoliciesConfig, Pricing, ProviderConfig,
    ProviderKind, QualityConfig, RuntimeMode, ServerConfig, Timeouts,
};
use crate::suggest::did_you_mean;

#[path = "load_limits.rs"]
mod load_limits;

#[path = "load_cache.rs"]
mod load_cache;

#[path = "load_sched.rs"]
mod load_sched;

#[path = "load_telemetry.rs"]
mod load_telemetry;

/// Largest accepted `context_window`, in tokens.
pub const MAX_CONTEXT_WINDOW: u64 = 100_000_000;

/// One configuration problem: where (a dotted path) and what.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    /// Dotted path of the offending value, e.g. `models.gpt-4o.endpoints[1].provider`.
    pub path: String,
    /// A plain sentence about the problem, with a suggestion where one exists.
    pub message: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.path.is_empty() {
            write!(f, "{}", self.message)
        } else {
            write!(f, "{}: {}", self.path, self.message)
        }
    }
}

/// All problems found in one config file (never empty).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigErrors {
    /// The file, for messages (`<embedded>` for the built-in default).
    pub file: String,
    /// Every problem, in document order.
    pub errors: Vec<ConfigError>,
}

impl fmt::Display for ConfigErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = self.errors.len();
        writeln!(
            f,
            "{}: {} problem{} in configuration:",
            self.file,
            n,
            if n == 1 { "" } else { "s" }
        )?;
        for e in &self.errors {
            writeln!(f, "  {e}")?;
        }
        Ok(())
    }
}

impl std::error::Error for ConfigErrors {}

/// Parses and validates YAML text. `file` names it in messages and anchors relative
/// paths (its parent directory); pass `None` for text not from a file.
///
/// # Errors
/// Every problem found, each with its path.
pub fn parse_str(text: &str, file: Option<&Path>) -> Result<Config, ConfigErrors> {
    let file_name = file
        .map(|p| p.display().to_string())
        .unwrap_or_else(|| "<embedded>".to_string());
    let mut root: Value = match serde_yaml::from_str(text) {
        Ok(v) => v,
        Err(e) => {
            let path = e
                .location()
                .map(|l| format!("line {}, column {}", l.line(), l.column()))
                .unwrap_or_default();
            return Err(ConfigErrors {
                file: file_name,
                errors: vec![ConfigError {
                    path,
                    message: format!("not valid YAML: {e}"),
                }],
            });
        }
    };
    let base_dir = file
        .and_then(|p| p.parent())
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("."));
    let mut errors = Vec::new();
    super::env::substitute(&mut root, "", &super::env::process_env, &mut errors);
    if !errors.is_empty() {
        return Err(ConfigErrors {
            file: file_name,
            errors,
        });
    }
    let mut v = Validator { errors: Vec::new() };
    let config = v.root(&root, &base_dir, &file_name);
    if v.errors.is_empty() {
        Ok(config)
    } else {
        Err(ConfigErrors {
            file: file_name,
            errors: v.errors,
        })
    }
}

struct Validator {
    errors: Vec<ConfigError>,
}

fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

impl Validator {
    fn err(&mut self, path: impl Into<String>, message: impl Into<String>) {
        self.errors.push(ConfigError {
            path: path.into(),
            message: message.into(),
        });
    }

    /// Returns the mapping at `value`, or records an error and returns an empty one.
    fn mapping<'a>(&mut self, value: &'a Value, path: &str) -> Option<&'a Mapping> {
        match value {
            Value::Mapping(m) => Some(m),
            Value::Null => None,
            other => {
                self.err(
                    path,
                    format!("expected a mapping, found {}", describe(other)),
                );
                None
            }
        }
    }

    /// Reports keys of `map` not in `allowed`, with a suggestion.
    fn unknown_keys(&mut self, map: &Mapping, allowed: &[&str], path: &str) {
        for key in map.keys() {
            match key.as_str() {
                Some(k) if allowed.contains(&k) => {}
                Some(k) => {
                    let hint = did_you_mean(k, allowed.iter().copied())
                        .map(|s| format!(" (did you mean \"{s}\"?)"))
                        .unwrap_or_else(|| format!(" (expected one of: {})", allowed.join(", ")));
                    self.err(join(path, k), format!("unknown key \"{k}\"{hint}"));
                }
                None => self.err(
                    path,
                    format!("keys must be strings, found {}", describe(key)),
                ),
            }
        }
    }

    /// The Redis URL under `key` (`state.redis`, `cache.redis`), checked as the
    /// client will read it when the gateway starts: `redis://[user:password@]host:port[/db]`.
    /// `rediss://` is refused (this build has no TLS for Redis), as is a URL the
    /// client cannot read (a port that is not a number, a database that is not an
    /// index): either was accepted and then left the limits in memory (or the
    /// cache off) on every instance, with one log line (outside attack,
    /// 2026-12-07). The message never repeats a password.
    pub(super) fn redis_url(&mut self, map: &Mapping, key: &str, path: &str) -> Option<String> {
        let url = self.string(map, key, path)?;
        let shown = redacted(&url);
        let problem = if url.starts_with("rediss://") {
            Some("rediss:// (Redis over TLS) is not built into this gateway; use redis:// (a TLS tunnel such as stunnel or a sidecar can carry it)".to_string())
        } else if !url.starts_with("redis://") {
            Some("expected a URL like redis://127.0.0.1:6379".to_string())
        } else {
            redis::IntoConnectionInfo::into_connection_info(url.as_str())
                .err()
                .map(|e| format!("not a usable Redis URL ({e}); expected redis://[user:password@]host:port[/db]"))
        };
        match problem {
            Some(p) => {
                self.err(join(path, key), format!("\"{shown}\": {p}"));
                None
            }
            None => Some(url),
        }
    }

    fn string(&mut self, map: &Mapping, key: &str, path: &str) -> Option<String> {
        match map.get(key) {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) => Some(s.clone()),
            Some(other) => {
                self.err(
                    join(path, key),
                    format!("expected a string, found {}", describe(other)),
                );
                None
            }
        }
    }

    /// The value of `key` when it is one of `choices`' names; an error naming the
    /// field and listing the names otherwise (`None` when absent or null too).
    fn choice<T: Copy>(
        &mut self,
        map: &Mapping,
        key: &str,
        path: &str,
        choices: &[(&str, T)],
    ) -> Option<T> {
        let s = self.string(map, key, path)?;
        if let Some(&(_, v)) = choices.iter().find(|(name, _)| *name == s) {
            return Some(v);
        }
        let names: Vec<&str> = choices.iter().map(|(n, _)| *n).collect();
        self.err(
            join(path, key),
            format!("\"{s}\" is not one of: {}", names.join(", ")),
        );
        None
    }

    fn boolean(&mut self, map: &Mapping, key: &str, path: &str) -> Option<bool> {
        match map.get(key) {
            None | Some(Value::Null) => None,
            Some(Value::Bool(b)) => Some(*b),
            Some(other) => {
                self.err(
                    join(path, key),
                    format!("expected true or false, found {}", describe(other)),
                );
                None
            }
        }
    }

    fn uint(&mut self, map: &Mapping, key: &str, path: &str, min: u64, max: u64) -> Option<u64> {
        match map.get(key) {
            None | Some(Value::Null) => None,
            Some(Value::Number(n)) if n.as_u64().is_some() => {
                let v = n.as_u64().unwrap_or_default();
                if v < min || v > max {
                    self.err(
                        join(path, key),
                        format!("{v} is out of range (expected {min}..={max})"),
                    );
                    None
                } else {
                    Some(v)
                }
            }
            Some(other) => {
                self.err(
                    join(path, key),
                    format!("expected a non-negative integer, found {}", describe(other)),
                );
                None
            }
        }
    }

    fn float(&mut self, map: &Mapping, key: &str, path: &str, min: f64, max: f64) -> Option<f64> {
        match map.get(key) {
            None | Some(Value::Null) => None,
            Some(Value::Number(n)) => {
                let v = n.as_f64().unwrap_or(f64::NAN);
                if !(min..=max).contains(&v) {
                    self.err(
                        join(path, key),
                        format!("{v} is out of range (expected {min} to {max})"),
                    );
                    None
                } else {
                    Some(v)
                }
            }
            Some(other) => {
                self.err(
                    join(path, key),
                    format!("expected a number, found {}", describe(other)),
                );
                None
            }
        }
    }

    fn root(&mut self, root: &Value, base_dir: &Path, source: &str) -> Config {
        let empty = Mapping::new();
        let map = self.mapping(root, "").unwrap_or(&empty);
        self.unknown_keys(
            map,
            &[
                "server",
                "policies",
                "providers",
                "models",
                "quality",
                "breaker",
                "auth",
                "admin",
                "limits",
                "budgets",
                "state",
                "cache",
                "scheduler",
                "telemetry",
            ],
            "",
        );
        let server = self.server(map.get("server").unwrap_or(&Value::Null));
        let policies = self.policies(map.get("policies").unwrap_or(&Value::Null), base_dir);
        let providers = self.providers(map.get("providers").unwrap_or(&Value::Null));
        let models = self.models(map.get("models").unwrap_or(&Value::Null), &providers);
        let quality = self.quality(map.get("quality").unwrap_or(&Value::Null), base_dir);
        let breaker = self.breaker(map.get("breaker").unwrap_or(&Value::Null));
        let auth = super::auth::auth(
            map.get("auth").unwrap_or(&Value::Null),
            base_dir,
            &mut self.errors,
        );
        let admin = super::auth::admin(
            map.get("admin").unwrap_or(&Value::Null),
            base_dir,
            &mut self.errors,
        );
        // One socket cannot be both listeners: `serve` would fail to bind the second
        // ("Address already in use") where `--check` passed.
        let clash = |a: std::net::SocketAddr, b: std::net::SocketAddr| {
            a.port() != 0
                && a.port() == b.port()
                && (a.ip() == b.ip() || a.ip().is_unspecified() || b.ip().is_unspecified())
        };
        if admin.listen.is_some_and(|a| clash(a, server.listen)) {
            self.errors.push(ConfigError {
                path: "admin.listen".into(),
                message: format!(
                    "is the port of `server.listen` ({}) too; the admin listener needs an address of its own (or leave `admin.listen` out to serve the admin API on the main listener)",
                    server.listen
                ),
            });
        }
        let limits = self.limits(map.get("limits").unwrap_or(&Value::Null));
        let budgets = self.budgets(map.get("budgets").unwrap_or(&Value::Null));
        let state = self.state(map.get("state").unwrap_or(&Value::Null));
        let cache = self.cache(map.get("cache").unwrap_or(&Value::Null));
        let scheduler = self.scheduler(map.get("scheduler").unwrap_or(&Value::Null));
        let telemetry = self.telemetry(map.get("telemetry").unwrap_or(&Value::Null), base_dir);
        Config {
            server,
            policies,
            providers,
            models,
            quality,
            breaker,
            auth,
            admin,
            limits,
            budgets,
            state,
            cache,
            scheduler,
            telemetry,
            source: source.to_string(),
        }
    }

    fn server(&mut self, value: &Value) -> ServerConfig {
        let path = "server";
        let mut cfg = ServerConfig::default();
        let Some(map) = self.mapping(value, path) else {
            return cfg;
        };
        self.unknown_keys(
            map,
            &[
                "listen",
                "max_body_bytes",
                "max_buffered_bytes",
                "drain_timeout_ms",
                "first_byte_timeout_ms",
                "header_timeout_ms",
                "idle_timeout_ms",
                "send_timeout_ms",
                "max_header_bytes",
                "retry_budget_ms",
                "max_attempts",
                "stream_failover",
                "metrics_caller_labels",
                "runtime",
                "threads",
                "cors_origins",
            ],
            path,
        );
        cfg.cors_origins = self.cors_origins(map, path);
        if let Some(m) = self.choice(
            map,
            "runtime",
            path,
            &[
                ("per_core", RuntimeMode::PerCore),
                ("shared", RuntimeMode::Shared),
            ],
        ) {
            cfg.runtime = m;
        }
        if let Some(n) = self.uint(map, "threads", path, 1, 256) {
            cfg.threads = Some(n as usize);
        }
        if let Some(b) = self.boolean(map, "stream_failover", path) {
            cfg.stream_failover = b;
        }
        if let Some(b) = self.boolean(map, "metrics_caller_labels", path) {
            cfg.metrics_caller_labels = b;
        }
        if let Some(listen) = self.string(map, "listen", path) {
            match listen.parse::<SocketAddr>() {
                Ok(a) => cfg.listen = a,
                Err(_) => self.err(
                    join(path, "listen"),
                    format!("\"{listen}\" is not an address like 127.0.0.1:8080"),
                ),
            }
        }
        if let Some(n) = self.uint(map, "max_body_bytes", path, 1, 1 << 32) {
            cfg.max_body_bytes = n as usize;
        }
        if let Some(n) = self.uint(map, "max_buffered_bytes", path, 1, 1 << 40) {
            if (n as usize) < cfg.max_body_bytes {
                self.err(
                    join(path, "max_buffered_bytes"),
                    format!(
                        "{n} is smaller than server.max_body_bytes ({}): a body of the largest accepted size could never be buffered",
                        cfg.max_body_bytes
                    ),
                );
            } else {
                cfg.max_buffered_bytes = Some(n as usize);
            }
        }
        if let Some(n) = self.uint(map, "drain_timeout_ms", path, 0, 3_600_000) {
            cfg.drain_timeout_ms = n;
        }
        if let Some(n) = self.uint(map, "retry_budget_ms", path, 0, 3_600_000) {
            cfg.retry_budget_ms = n;
        }
        if let Some(n) = self.uint(map, "max_attempts", path, 1, 64) {
            cfg.max_attempts = n as u32;
        }
        // Above hyper's 400 KiB read buffer the setting would have no effect.
        if let Some(n) = self.uint(map, "max_header_bytes", path, 1024, 256 * 1024) {
            cfg.max_header_bytes = n as usize;
        }
        // Connection deadlines cannot be switched off: an unbounded phase is what lets
        // idle sockets exhaust the file descriptors.
        for (key, field) in [
            ("first_byte_timeout_ms", &mut cfg.first_byte_timeout_ms),
            ("header_timeout_ms", &mut cfg.header_timeout_ms),
            ("idle_timeout_ms", &mut cfg.idle_timeout_ms),
            ("send_timeout_ms", &mut cfg.send_timeout_ms),
        ] {
            if let Some(n) = self.uint(map, key, path, 1, 3_600_000) {
                *field = n;
            }
        }
        cfg
    }

    /// `server.cors_origins`: each entry an origin or `*` ([`super::check_origin`]),
    /// `*` alone. Every bad entry is reported.
    fn cors_origins(&mut self, map: &Mapping, path: &str) -> Vec<String> {
        let key = join(path, "cors_origins");
        let seq = match map.get("cors_origins") {
            None | Some(Value::Null) => return Vec::new(),
            Some(Value::Sequence(seq)) => seq,
            Some(other) => {
                self.err(
                    key,
                    format!(
                        "expected a list of origins like [\"https://app.example.com\"], found {}",
                        describe(other)
                    ),
                );
                return Vec::new();
            }
        };
        let mut origins = Vec::new();
        for (i, entry) in seq.iter().enumerate() {
            let at = format!("{key}[{i}]");
            match entry.as_str().map(super::check_origin) {
                Some(Ok(o)) => origins.push(o),
                Some(Err(e)) => self.err(at, e),
                None => self.err(at, format!("expected an origin, found {}", describe(entry))),
            }
        }
        if origins.len() > 1 && origins.iter().any(|o| o == "*") {
            self.err(
                key,
                "\"*\" allows every origin; list it alone or list origins without it",
            );
        }
        origins
    }

    fn breaker(&mut self, value: &Value) -> BreakerConfig {
        let path = "breaker";
        let mut cfg = BreakerConfig::default();
        let Some(map) = self.mapping(value, path) else {
            return cfg;
        };
        self.unknown_keys(
            map,
            &[
                "open_below",
                "cooldown_ms",
                "max_cooldown_ms",
                "min_samples",
                "recovery_half_life_ms",
            ],
            path,
        );
        if let Some(v) = self.float(map, "open_below", path, 0.0, 1.0) {
            cfg.open_below = v;
        }
        if let Some(n) = self.uint(map, "cooldown_ms", path, 1, 3_600_000) {
            cfg.cooldown_ms = n;
        }
        if let Some(n) = self.uint(map, "max_cooldown_ms", path, 1, 3_600_000) {
            cfg.max_cooldown_ms = n;
        }
        if cfg.max_cooldown_ms < cfg.cooldown_ms {
            self.err(
                join(path, "max_cooldown_ms"),
                format!(
                    "{} is below cooldown_ms ({})",
                    cfg.max_cooldown_ms, cfg.cooldown_ms
                ),
            );
        }
        if let Some(n) = self.uint(map, "min_samples", path, 1, 1_000_000) {
            cfg.min_samples = n;
        }
        if let Some(n) = self.uint(map, "recovery_half_life_ms", path, 1, 86_400_000) {
            cfg.recovery_half_life_ms = n;
        }
        cfg
    }

    fn policies(&mut self, value: &Value, base_dir: &Path) -> PoliciesConfig {
        let path = "policies";
        let mut cfg = PoliciesConfig {
            dir: Some(base_dir.join("policies")),
            explicit: false,
        };
        let Some(map) = self.mapping(value, path) else {
            return cfg;
        };
        self.unknown_keys(map, &["dir"], path);
        if let Some(dir) = self.string(map, "dir", path) {
            let full = base_dir.join(&dir);
            // Reported with every other problem (exit 1), not as a policy load's I/O
            // error once the config passed (found by attack, 2026-12-07).
            if !full.is_dir() {
                let why = if full.exists() {
                    "is not a directory"
                } else {
                    "does not exist"
                };
                self.err(
                    join(path, "dir"),
                    format!("`{}` {why}: create it, or point `policies.dir` at the directory of your .policy files", full.display()),
                );
            }
            cfg.dir = Some(full);
            cfg.explicit = true;
        }
        cfg
    }

    fn quality(&mut self, value: &Value, base_dir: &Path) -> QualityConfig {
        let path = "quality";
        let mut cfg = QualityConfig::default();
        let Some(map) = self.mapping(value, path) else {
            return cfg;
        };
        self.unknown_keys(map, &["leaderboard"], path);
        if let Some(file) = self.string(map, "leaderboard", path) {
            let file = base_dir.join(file);
            match super::quality::read_leaderboard(&file) {
                Ok(scores) => cfg.scores = scores,
                Err(errors) => {
                    for e in errors {
                        self.err(join(path, "leaderboard"), e);
                    }
                }
            }
            cfg.leaderboard = Some(file);
        }
        cfg
    }

    fn providers(&mut self, value: &Value) -> Vec<ProviderConfig> {
        let mut out = Vec::new();
        let Some(map) = self.mapping(value, "providers") else {
            return out;
        };
        for (key, body) in map {
            let Some(name) = key.as_str() else {
                self.err("providers", "provider names must be strings");
                continue;
            };
            if let Some(p) = self.provider(name, body) {
                out.push(p);
            }
        }
        out
    }

    fn provider(&mut self, name: &str, value: &Value) -> Option<ProviderConfig> {
        let path = format!("providers.{name}");
        if !valid_name(name) {
            self.err(
                &path,
                format!("provider name \"{name}\" may use only letters, digits, '-', '_' and '.'"),
            );
        }
        let empty = Mapping::new();
        let map = match self.mapping(value, &path) {
            Some(m) => m,
            None => {
                self.err(&path, "a provider needs at least `kind`");
                &empty
            }
        };
        self.unknown_keys(
            map,
            &[
                "kind",
                "base_url",
                "api_key_env",
                "api_version",
                "timeouts",
                "pricing",
                "mock",
                "prefill",
                "forward_headers",
                "stream_usage",
                "region",
                "credentials_file",
                "profile",
            ],
            &path,
        );
        let prefill = self.boolean(map, "prefill", &path);
        let stream_usage = self.boolean(map, "stream_usage", &path);
        let mut forward_headers = Vec::new();
        match map.get("forward_headers") {
            None | Some(Value::Null) => {}
            Some(Value::Sequence(seq)) => {
                for (i, entry) in seq.iter().enumerate() {
                    let at = format!("{}[{i}]", join(&path, "forward_headers"));
                    match entry.as_str().map(super::headers::Listed::parse) {
                        Some(Ok(l)) => forward_headers.push(l),
                        Some(Err(e)) => self.err(at, e),
                        None => self.err(
                            at,
                            format!("expected a header name, found {}", describe(entry)),
                        ),
                    }
                }
            }
            Some(other) => self.err(
                join(&path, "forward_headers"),
                format!("expected a list of header names, found {}", describe(other)),
            ),
        }
        let kind_name = self.string(map, "kind", &path);
        let kind = match kind_name.as_deref() {
            None => {
                self.err(
                    join(&path, "kind"),
                    "missing; expected one of: openai, azure-openai, anthropic, gemini, bedrock, openai-compatible, mock",
                );
                None
            }
            Some(k) => match ProviderKind::ALL.iter().find(|(s, _)| *s == k) {
                Some((_, kind)) => Some(*kind),
                None => {
                    let names = ProviderKind::ALL.iter().map(|(s, _)| *s);
                    let hint = did_you_mean(k, names)
                        .map(|s| format!(" (did you mean \"{s}\"?)"))
                        .unwrap_or_default();
                    self.err(
                        join(&path, "kind"),
                        format!("unknown provider kind \"{k}\"{hint}"),
                    );
                    None
                }
            },
        };
        let base_url = self.string(map, "base_url", &path);
        if let Some(url) = &base_url {
            if !(url.starts_with("http://") || url.starts_with("https://")) {
                self.err(
                    join(&path, "base_url"),
                    format!("\"{url}\" must start with http:// or https://"),
                );
            } else if url.parse::<http::Uri>().is_err() {
                self.err(
                    join(&path, "base_url"),
                    format!("\"{url}\" is not a valid URL"),
                );
            }
        }
        let api_key_env = self.string(map, "api_key_env", &path);
        if let Some(env) = &api_key_env {
            if env.is_empty() || !env.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
                self.err(
                    join(&path, "api_key_env"),
                    "must be the NAME of an environment variable (letters, digits, '_'), never the key itself",
                );
            }
        }
        let api_version = self.string(map, "api_version", &path);
        let timeouts = self.timeouts(map.get("timeouts").unwrap_or(&Value::Null), &path);
        let pricing = self.pricing(map.get("pricing").unwrap_or(&Value::Null), &path);
        let mock = match map.get("mock") {
            None | Some(Value::Null) => MockOptions::default(),
            Some(v) => match MockOptions::from_yaml(v) {
                Ok(m) => m,
                Err(e) => {
                    self.err(join(&path, "mock"), e);
                    MockOptions::default()
                }
            },
        };
        let region = self.string(map, "region", &path);
        let credentials_file = self.string(map, "credentials_file", &path);
        let profile = self.string(map, "profile", &path);
        let kind = kind?;
        for key in ["region", "credentials_file", "profile"] {
            if kind != ProviderKind::Bedrock && map.contains_key(key) {
                self.err(
                    join(&path, key),
                    format!("only providers of kind `bedrock` take `{key}`"),
                );
            }
        }
        if kind != ProviderKind::AzureOpenAi && map.contains_key("api_version") {
            // Read by Azure OpenAI's adapter only; elsewhere it would be ignored
            // silently (found by attack, 2026-12-07).
            self.err(
                join(&path, "api_version"),
                "only providers of kind `azure-openai` take `api_version`",
            );
        }
        if kind != ProviderKind::Mock && map.contains_key("mock") {
            self.err(
                join(&path, "mock"),
                "only providers of kind `mock` take `mock` settings",
            );
        }
        let base_url = match (base_url, kind.default_base_url()) {
            (Some(u), _) => u.trim_end_matches('/').to_string(),
            (None, Some(d)) => d.to_string(),
            // Bedrock's default depends on the region, settled at startup.
            (None, None) if matches!(kind, ProviderKind::Mock | ProviderKind::Bedrock) => {
                String::new()
            }
            (None, None) => {
                self.err(
                    join(&path, "base_url"),
                    format!(
                        "missing; providers of kind `{}` need a base_url",
                        kind.as_str()
                    ),
                );
                String::new()
            }
        };
        Some(ProviderConfig {
            name: name.to_string(),
            kind,
            base_url,
            api_key_env,
            api_version,
            timeouts,
            pricing,
            mock,
            prefill: prefill.unwrap_or(kind == ProviderKind::Anthropic),
            forward_headers,
            stream_usage: stream_usage.unwrap_or(true),
            region,
            credentials_file,
            profile,
        })
    }

    fn timeouts(&mut self, value: &Value, parent: &str) -> Timeouts {
        let path = join(parent, "timeouts");
        let mut t = Timeouts::default();
        let Some(map) = self.mapping(value, &path) else {
            return t;
        };
        self.unknown_keys(
            map,
            &[
                "connect_ms",
                "first_byte_ms",
                "first_content_ms",
                "idle_ms",
                "total_ms",
            ],
            &path,
        );
        let max = 24 * 3_600_000;
        if let Some(v) = self.uint(map, "connect_ms", &path, 1, max) {
            t.connect_ms = v;
        }
        if let Some(v) = self.uint(map, "first_byte_ms", &path, 1, max) {
            t.first_byte_ms = v;
        }
        if let Some(v) = self.uint(map, "first_content_ms", &path, 1, max) {
            t.first_content_ms = v;
        }
        if let Some(v) = self.uint(map, "idle_ms", &path, 1, max) {
            t.idle_ms = v;
        }
        if let Some(v) = self.uint(map, "total_ms", &path, 1, max) {
            t.total_ms = v;
        }
        t
    }

    fn pricing(&mut self, value: &Value, parent: &str) -> Pricing {
        let path = join(parent, "pricing");
        let mut p = Pricing::default();
        let Some(map) = self.mapping(value, &path) else {
            return p;
        };
        self.unknown_keys(map, &["input_per_mtok", "output_per_mtok"], &path);
        if let Some(v) = self.float(map, "input_per_mtok", &path, 0.0, 1e6) {
            p.input_per_mtok = v;
        }
        if let Some(v) = self.float(map, "output_per_mtok", &path, 0.0, 1e6) {
            p.output_per_mtok = v;
        }
        p
    }

    fn models(&mut self, value: &Value, providers: &[ProviderConfig]) -> Vec<ModelConfig> {
        let mut out = Vec::new();
        let Some(map) = self.mapping(value, "models") else {
            return out;
        };
        let mut ids = HashSet::new();
        for (key, body) in map {
            let Some(name) = key.as_str() else {
                self.err("models", "model names must be strings");
                continue;
            };
            let path = format!("models.{name}");
            if name.is_empty() || name.chars().any(|c| c.is_control() || c == '"') {
                self.err(
                    &path,
                    "model names must be non-empty and printable, without '\"'",
                );
            }
            let Some(m) = self.mapping(body, &path) else {
                self.err(&path, "a model needs `endpoints`");
                continue;
            };
            self.unknown_keys(m, &["endpoints"], &path);
            let mut endpoints = Vec::new();
            match m.get("endpoints") {
                Some(Value::Sequence(seq)) if !seq.is_empty() => {
                    for (i, ep) in seq.iter().enumerate() {
                        let ep_path = format!("{path}.endpoints[{i}]");
                        if let Some(e) = self.endpoint(ep, &ep_path, providers, &mut ids) {
                            endpoints.push(e);
                        }
                    }
                }
                Some(Value::Sequence(_)) | None | Some(Value::Null) => {
                    self.err(join(&path, "endpoints"), "needs at least one endpoint")
                }
                Some(other) => self.err(
                    join(&path, "endpoints"),
                    format!("expected a list of endpoints, found {}", describe(other)),
                ),
            }
            out.push(ModelConfig {
                name: name.to_string(),
                endpoints,
            });
        }
        out
    }

    fn endpoint(
        &mut self,
        value: &Value,
        path: &str,
        providers: &[ProviderConfig],
        ids: &mut HashSet<String>,
    ) -> Option<EndpointConfig> {
        let map = self.mapping(value, path)?;
        self.unknown_keys(
            map,
            &[
                "name",
                "provider",
                "model",
                "deployment",
                "priority",
                "weight",
                "region",
                "latency_target_ms",
                "context_window",
                "max_output_tokens",
                "max_in_flight",
            ],
            path,
        );
        let provider = self.string(map, "provider", path);
        let provider_kind = match &provider {
            None => {
                self.err(join(path, "provider"), "missing; name a key of `providers`");
                None
            }
            Some(p) => match providers.iter().find(|c| &c.name == p) {
                Some(c) => Some(c.kind),
                None => {
                    let names = providers
                        .iter()
                        .map(|c| c.name.as_str())
                        .chain(ProviderKind::ALL.iter().map(|(s, _)| *s));
                    let hint = did_you_mean(p, names)
                        .map(|s| format!(" (did you mean \"{s}\"?)"))
                        .unwrap_or_default();
                    self.err(
                        join(path, "provider"),
                        format!("unknown provider \"{p}\"{hint}"),
                    );
                    None
                }
            },
        };
        let model = self.string(map, "model", path);
        let deployment = self.string(map, "deployment", path);
        let upstream_model = match (model, deployment) {
            (Some(m), None) | (None, Some(m)) if !m.is_empty() => Some(m),
            (Some(_), Some(_)) => {
                self.err(path, "give either `model` or `deployment`, not both");
                None
            }
            _ => {
                self.err(
                    join(path, "model"),
                    "missing; the upstream model id (or `deployment` for Azure OpenAI)",
                );
                None
            }
        };
        let priority = self.uint(map, "priority", path, 0, 1_000_000).unwrap_or(1) as u32;
        let weight = self.uint(map, "weight", path, 0, 1_000_000).unwrap_or(1) as u32;
        let region = self.string(map, "region", path);
        let latency_target_ms = self.uint(map, "latency_target_ms", path, 1, 3_600_000);
        let context_window = self.uint(map, "context_window", path, 1, MAX_CONTEXT_WINDOW);
        let max_output_tokens = self.uint(map, "max_output_tokens", path, 1, MAX_CONTEXT_WINDOW);
        let max_in_flight = self
            .uint(map, "max_in_flight", path, 1, 1_000_000)
            .map(|n| n as u32);
        let name = self.string(map, "name", path);
        let (provider, upstream_model) = (provider?, upstream_model?);
        provider_kind?;
        let id = match name {
            Some(n) => {
                if !valid_name(&n.replace('/', "")) {
                    self.err(
                        join(path, "name"),
                        format!("endpoint name \"{n}\" may use only letters, digits, '-', '_', '.' and '/'"),
                    );
                }
                if !ids.insert(n.clone()) {
                    self.err(
                        join(path, "name"),
                        format!("duplicate endpoint name \"{n}\""),
                    );
                }
                n
            }
            None => {
                let base = format!("{provider}/{upstream_model}");
                let mut id = base.clone();
                let mut n = 2;
                while !ids.insert(id.clone()) {
                    id = format!("{base}#{n}");
                    n += 1;
                }
                id
            }
        };
        Some(EndpointConfig {
            id,
            provider,
            model: upstream_model,
            priority,
            weight,
            region,
            latency_target_ms,
            context_window,
            max_output_tokens,
            max_in_flight,
        })
    }
}

fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

fn describe(v: &Value) -> &'static str {
    match v {
        Value::Null => "nothing",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Sequence(_) => "a list",
        Value::Mapping(_) => "a mapping",
        Value::Tagged(_) => "a tagged value",
    }
}

/// `url` with the user and password of its authority (before the last `@`) shown
/// as `***`, for messages.
fn redacted(url: &str) -> std::borrow::Cow<'_, str> {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.into();
    };
    // The last `@` anywhere: a password may hold `/`, `?` or `#` (one with `/` was
    // shown whole when the search stopped at the first `/`; review, 2026-12-07).
    match rest.rfind('@') {
        Some(at) => format!("{scheme}://***@{}", &rest[at + 1..]).into(),
        None => url.into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"
server: { listen: 127.0.0.1:9000, max_body_bytes: 1024, idle_timeout_ms: 5000 }
policies: { dir: ./pol }
providers:
  local:
    kind: openai-compatible
    base_url: http://127.0.0.1:8081/v1/
    api_key_env: LOCAL_API_KEY
    timeouts: { connect_ms: 100, first_byte_ms: 200, idle_ms: 300, total_ms: 400 }
    pricing: { input_per_mtok: 0.5, output_per_mtok: 1.5 }
  azure:
    kind: azure-openai
    base_url: https://example.openai.azure.com
models:
  smollm:
    endpoints:
      - { provider: local, model: smollm2, priority: 1, weight: 3 }
      - { provider: local, model: smollm2, priority: 2 }
"#;

    #[test]
    fn parses_the_documented_shape() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("pol")).unwrap();
        let c = parse_str(GOOD, Some(&dir.path().join("switchyard.yaml"))).unwrap();
        assert_eq!(c.server.listen.port(), 9000);
        assert_eq!(c.server.max_body_bytes, 1024);
        assert_eq!(c.server.idle_timeout_ms, 5000);
        assert_eq!(c.server.header_timeout_ms, 10_000);
        assert_eq!(c.server.max_header_bytes, 64 * 1024);
        assert_eq!(c.policies.dir, Some(dir.path().join("./pol")));
        assert!(c.policies.explicit);
        let local = c.provider("local").unwrap();
        assert_eq!(local.base_url, "http://127.0.0.1:8081/v1");
        assert_eq!(local.timeouts.idle_ms, 300);
        assert_eq!(local.pricing.output_per_mtok, 1.5);
        let m = c.model("smollm").unwrap();
        assert_eq!(m.endpoints.len(), 2);
        assert_eq!(m.endpoints[0].id, "local/smollm2");
        assert_eq!(m.endpoints[1].id, "local/smollm2#2");
        assert_eq!(m.endpoints[0].weight, 3);
        assert_eq!(m.endpoints[1].weight, 1);
    }

    #[test]
    fn reports_every_problem_with_its_path() {
        let bad = r#"
server: { listen: nowhere, max_bodybytes: 3, header_timeout_ms: 0 }
providers:
  azure: { kind: azure-openai, base_url: https://x.example }
  local: { kind: openai-compat, base_url: ftp://x }
models:
  gpt-4o:
    endpoints:
      - { provider: azure, model: gpt-4o }
      - { provider: azur, model: gpt-4o }
  empty: { endpoints: [] }
"#;
        let errs = parse_str(bad, None).unwrap_err();
        let text: Vec<String> = errs.errors.iter().map(|e| e.to_string()).collect();
        let want = [
            "server.listen: \"nowhere\" is not an address like 127.0.0.1:8080",
            "server.max_bodybytes: unknown key \"max_bodybytes\" (did you mean \"max_body_bytes\"?)",
            "server.header_timeout_ms: 0 is out of range (expected 1..=3600000)",
            "providers.local.kind: unknown provider kind \"openai-compat\"",
            "providers.local.base_url: \"ftp://x\" must start with http:// or https://",
            "models.gpt-4o.endpoints[1].provider: unknown provider \"azur\" (did you mean \"azure\"?)",
            "models.empty.endpoints: needs at least one endpoint",
        ];
        for w in want {
            assert!(
                text.iter().any(|t| t.starts_with(w)),
                "missing {w:?} in {text:#?}"
            );
        }
    }

    #[test]
    fn server_runtime_and_threads() {
        let c = parse_str("server: { runtime: shared, threads: 3 }\n", None).unwrap();
        assert_eq!(c.server.runtime, RuntimeMode::Shared);
        assert_eq!(c.server.serving_threads(), 3);
        let d = parse_str("server: {}\n", None).unwrap();
        assert_eq!(d.server.runtime, RuntimeMode::PerCore);
        assert_eq!(d.server.threads, None);
        assert!(d.server.serving_threads() >= 1);
        let errs = parse_str("server: { runtime: per-core, threads: 0 }\n", None).unwrap_err();
        let text: Vec<String> = errs.errors.iter().map(ToString::to_string).collect();
        assert!(
            text.iter()
                .any(|e| e
                    .starts_with("server.runtime: \"per-core\" is not one of: per_core, shared")),
            "{text:?}"
        );
        assert!(
            text.iter().any(|e| e.starts_with("server.threads:")),
            "{text:?}"
        );
    }

    #[test]
    fn server_cors_origins_are_origins_or_a_lone_star() {
        let c = parse_str(
            "server: { cors_origins: [\"https://App.example.com\", \"http://localhost:5173\"] }\n",
            None,
        )
        .unwrap();
        assert_eq!(
            c.server.cors_origins,
            ["https://app.example.com", "http://localhost:5173"]
        );
        assert!(parse_str("server: {}\n", None)
            .unwrap()
            .server
            .cors_origins
            .is_empty());
        let errs = parse_str(
            "server: { cors_origins: [\"https://a.example/\", 3, \"*\", \"https://b.example\"] }\n",
            None,
        )
        .unwrap_err();
        let text: Vec<String> = errs.errors.iter().map(ToString::to_string).collect();
        assert_eq!(text.len(), 3, "{text:?}");
        assert!(text[0].starts_with("server.cors_origins[0]: \"https://a.example/\" has a path"));
        assert!(text[1].starts_with("server.cors_origins[1]: expected an origin"));
        assert!(text[2].starts_with("server.cors_origins: \"*\" allows every origin"));
        let errs = parse_str("server: { cors_origins: \"*\" }\n", None).unwrap_err();
        assert!(errs.errors[0]
            .message
            .starts_with("expected a list of origins"));
    }

    #[test]
    fn bad_yaml_is_one_clear_error() {
        let errs = parse_str("server: [", None).unwrap_err();
        assert_eq!(errs.errors.len(), 1);
        assert!(errs.errors[0].message.starts_with("not valid YAML"));
    }

    #[test]
    fn leaderboard_and_latency_target() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("lb.yaml"),
            "mock-1: { chat: 0.7, code: 0.4 }\n",
        )
        .unwrap();
        let yaml = "quality: { leaderboard: lb.yaml }\nproviders: { p: { kind: mock } }\nmodels: { m: { endpoints: [ { provider: p, model: mock-1, latency_target_ms: 250 } ] } }\n";
        let c = parse_str(yaml, Some(&dir.path().join("switchyard.yaml"))).unwrap();
        assert_eq!(c.quality.scores["mock-1"]["code"], 0.4);
        assert_eq!(c.models[0].endpoints[0].latency_target_ms, Some(250));

        std::fs::write(dir.path().join("lb.yaml"), "mock-1: { chat: 2 }\n").unwrap();
        let errs = parse_str(yaml, Some(&dir.path().join("switchyard.yaml"))).unwrap_err();
        assert_eq!(errs.errors[0].path, "quality.leaderboard");
        assert!(
            errs.errors[0]
                .message
                .ends_with("mock-1.chat: 2 is out of range (expected 0 to 1)"),
            "{errs}"
        );

        let missing = yaml.replace("lb.yaml", "nope.yaml");
        let errs = parse_str(&missing, Some(&dir.path().join("switchyard.yaml"))).unwrap_err();
        assert!(
            errs.to_string()
                .contains("quality.leaderboard: cannot read"),
            "{errs}"
        );
        let bad = yaml.replace("latency_target_ms: 250", "latency_target_ms: 0");
        let errs = parse_str(&bad, Some(&dir.path().join("switchyard.yaml"))).unwrap_err();
        assert!(
            errs.to_string()
                .contains("latency_target_ms: 0 is out of range"),
            "{errs}"
        );
    }

    #[test]
    fn lint_assumes_the_real_default_max_attempts() {
        assert_eq!(
            ServerConfig::default().max_attempts,
            crate::policy::lint::DEFAULT_MAX_ATTEMPTS
        );
    }

    #[test]
    fn context_window_is_a_positive_token_count() {
        let yaml = "providers: { p: { kind: mock } }\nmodels: { m: { endpoints: [ { provider: p, model: a, context_window: 128000 }, { provider: p, model: b } ] } }\n";
        let c = parse_str(yaml, None).unwrap();
        assert_eq!(c.models[0].endpoints[0].context_window, Some(128_000));
        assert_eq!(c.models[0].endpoints[1].context_window, None);
        for (bad, why) in [
            ("0", "0 is out of range (expected 1..=100000000)"),
            ("-5", "expected a non-negative integer"),
            ("\"big\"", "expected a non-negative integer"),
            ("1.5", "expected a non-negative integer"),
        ] {
            let errs = parse_str(&yaml.replace("128000", bad), None).unwrap_err();
            assert_eq!(
                errs.errors[0].path, "models.m.endpoints[0].context_window",
                "{errs}"
            );
            assert!(errs.errors[0].message.contains(why), "{bad}: {errs}");
        }
    }

    /// Found by the operator attack of 2026-12-07: `serve --check` passed a config
    /// whose admin listener had the main listener's address, which `serve` then
    /// could not bind ("What `--check` passes, `serve` starts").
    #[test]
    fn the_admin_listener_on_the_main_listeners_port_is_refused() {
        let base = "providers: { p: { kind: mock } }\nmodels: { m: { endpoints: [ { provider: p, model: a } ] } }\n";
        for (server, admin, clash) in [
            ("127.0.0.1:18111", "127.0.0.1:18111", true),
            ("0.0.0.0:18111", "127.0.0.1:18111", true),
            ("127.0.0.1:18111", "127.0.0.1:18112", false),
            ("127.0.0.1:0", "127.0.0.1:0", false),
        ] {
            let yaml = format!(
                "server: {{ listen: \"{server}\" }}\nadmin: {{ listen: \"{admin}\" }}\n{base}"
            );
            match parse_str(&yaml, None) {
                Ok(_) => assert!(!clash, "{server} {admin}"),
                Err(errs) => {
                    assert!(clash, "{server} {admin}: {errs}");
                    assert_eq!(errs.errors[0].path, "admin.listen", "{errs}");
                }
            }
        }
    }

    /// Found by the operator attack of 2026-12-07: a `policies.dir` that does not
    /// exist passed the config check and stopped `serve` later as an I/O error
    /// (exit 2), alone, where a config problem is exit 1 with every other one.
    #[test]
    fn a_missing_policies_dir_is_a_config_problem() {
        let dir = tempfile::tempdir().unwrap();
        let errs = parse_str(
            "policies: { dir: nowhere }\nproviders: { x: { kind: openai-compatible } }\nmodels: {}",
            Some(&dir.path().join("switchyard.yaml")),
        )
        .unwrap_err();
        let paths: Vec<&str> = errs.errors.iter().map(|e| e.path.as_str()).collect();
        assert!(paths.contains(&"policies.dir"), "{errs}");
        assert!(paths.contains(&"providers.x.base_url"), "{errs}");
        assert!(errs.to_string().contains("does not exist"), "{errs}");
    }

    /// Found by the operator attack of 2026-12-07: `api_version` on a provider of
    /// another kind than `azure-openai` was accepted and ignored.
    #[test]
    fn api_version_is_for_azure_only() {
        let errs = parse_str(
            "providers: { c: { kind: anthropic, api_version: '2024-10-21' } }\nmodels: {}",
            None,
        )
        .unwrap_err();
        assert_eq!(errs.errors[0].path, "providers.c.api_version", "{errs}");
        parse_str(
            "providers: { z: { kind: azure-openai, base_url: 'https://x.openai.azure.com', api_version: '2024-10-21' } }\nmodels: {}",
            None,
        )
        .unwrap();
    }

    /// Found by the operator attack of 2026-12-07: the sections read through serde
    /// (`auth`, `admin`, a provider's `mock`) gave no "did you mean".
    #[test]
    fn serde_read_sections_suggest_the_field_meant() {
        let errs = parse_str(
            "admin: { kyes: [] }\nproviders: { m: { kind: mock, mock: { latncy_ms: 5 } } }\nmodels: {}",
            None,
        )
        .unwrap_err()
        .to_string();
        assert!(errs.contains("did you mean `keys`?"), "{errs}");
        assert!(errs.contains("did you mean `latency_ms`?"), "{errs}");
    }

    #[test]
    fn missing_base_url_for_compatible_kind() {
        let errs = parse_str(
            "providers: { x: { kind: openai-compatible } }\nmodels: {}",
            None,
        )
        .unwrap_err();
        assert_eq!(errs.errors[0].path, "providers.x.base_url");
    }
}
