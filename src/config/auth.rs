//! `auth:` and `admin:` sections: who may call the gateway, and who may call its
//! operator endpoints.
//!
//! Both sections are read with serde into the types below (unknown keys are refused),
//! with the path of the first problem in each section (`auth.keys[2].hash: ...`), and
//! then checked as a whole (a `mode: keys` needs some keys, hashes must be
//! `sha256:<64 hex>`, ...), reporting every problem found there. Key entries have the
//! same shape inline (`auth.keys`) and in a key file (`auth.key_file`), which
//! `crate::auth` reads at startup and again when it changes.

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::limits::{Budget, RateLimit};
use super::ConfigError;
use crate::policy::ast::PriorityLevel;

/// How clients authenticate (`auth.mode`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AuthMode {
    /// Nothing is verified (the default): the caller is what the request presents,
    /// its key id a hash of whatever token it sent.
    #[default]
    None,
    /// API keys from `auth.keys` and `auth.key_file`.
    Keys,
    /// JWT bearer tokens (`auth.jwt`).
    Jwt,
    /// A token that parses as a JWT is checked as one, anything else as an API key.
    KeysOrJwt,
}

/// `auth:` section.
#[derive(Debug, Clone, Default)]
pub struct AuthConfig {
    /// How clients authenticate.
    pub mode: AuthMode,
    /// Keys written in the config itself.
    pub keys: Vec<KeyEntry>,
    /// A key file (resolved against the config's directory), reloaded on change.
    pub key_file: Option<PathBuf>,
    /// JWT settings (required for `jwt` and `keys_or_jwt`).
    pub jwt: Option<JwtConfig>,
}

/// One API key: inline in `auth.keys` or an entry of the key file's `keys:` list.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct KeyEntry {
    /// The key's id, e.g. `key-team-a`: what policies, logs and metrics see.
    pub id: String,
    /// `sha256:<hex>` of the secret; the secret itself is never stored.
    pub hash: String,
    /// The key's organization.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub org: Option<String>,
    /// Logical models the key may call (absent: all).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub models: Option<Vec<String>>,
    /// Providers the key's requests may go to (absent: all).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub providers: Option<Vec<String>>,
    /// The starting priority of its requests (default normal).
    #[serde(default, skip_serializing_if = "is_normal")]
    pub priority: PriorityLevel,
    /// The highest level its requests may ask for with the `x-switchyard-priority`
    /// header (default: `priority`, so the header can only lower it). `critical`
    /// here lets the key's health checks bypass rate limits and queues.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_priority: Option<PriorityLevel>,
    /// Free string labels.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub metadata: BTreeMap<String, String>,
    /// A revoked key is refused like an unknown one.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub revoked: bool,
    /// The key's own rate limits (`requests_per_min`, `tokens_per_min`,
    /// `burst_requests`, `burst_tokens`): field by field over `limits.keys.<id>`,
    /// then `limits.per_key` (`crate::limits`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limits: Option<RateLimit>,
    /// The key's own spend budget in USD (`usd_per_day`, `usd_per_month`): field by
    /// field over `budgets.keys.<id>`, then `budgets.per_key`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget: Option<Budget>,
}

fn is_normal(p: &PriorityLevel) -> bool {
    *p == PriorityLevel::Normal
}

/// A key file: `keys:` and a list of [`KeyEntry`].
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct KeyFile {
    /// The keys, in file order.
    #[serde(default)]
    pub keys: Vec<KeyEntry>,
}

/// What one OAuth2 scope grants (`auth.jwt.scopes.<scope>`).
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScopeGrant {
    /// Logical models (absent: all).
    #[serde(default)]
    pub models: Option<Vec<String>>,
    /// Providers (absent: all).
    #[serde(default)]
    pub providers: Option<Vec<String>>,
}

/// `auth.jwt:` section.
#[derive(Debug, Clone, PartialEq)]
pub struct JwtConfig {
    /// Environment variable holding the HS256 secret (none: HS256 is refused).
    pub hs256_secret_env: Option<String>,
    /// JWKS file with the RS256 and ES256 public keys (resolved against the config's
    /// directory), reloaded on change; a token's `kid` selects the key.
    pub jwks_file: Option<PathBuf>,
    /// Required `iss`.
    pub issuer: Option<String>,
    /// Required `aud` (one of the token's audiences).
    pub audience: Option<String>,
    /// Clock leeway for `exp` and `nbf`, seconds (default 30).
    pub leeway_s: u64,
    /// Claim holding the organization (default `org`).
    pub org_claim: String,
    /// Claim holding the key id (default `sub`).
    pub key_id_claim: String,
    /// Scope → grant; empty: tokens may call every model and provider.
    pub scopes: BTreeMap<String, ScopeGrant>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawAuth {
    #[serde(default)]
    mode: AuthMode,
    #[serde(default)]
    keys: Vec<KeyEntry>,
    #[serde(default)]
    key_file: Option<String>,
    #[serde(default)]
    jwt: Option<RawJwt>,
}

/// Largest `auth.jwt.leeway_s` accepted, seconds (an hour). RFC 7519 (sections
/// 4.1.4, 4.1.5) allows "some small leeway, usually no more than a few minutes";
/// a leeway past the current Unix time also overflowed `jsonwebtoken`'s
/// `now - leeway` (a panic in debug builds, every token expired in release).
pub const MAX_LEEWAY_S: u64 = 3600;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawJwt {
    #[serde(default)]
    hs256_secret_env: Option<String>,
    #[serde(default)]
    jwks_file: Option<String>,
    #[serde(default)]
    issuer: Option<String>,
    #[serde(default)]
    audience: Option<String>,
    #[serde(default)]
    leeway_s: Option<u64>,
    #[serde(default)]
    org_claim: Option<String>,
    #[serde(default)]
    key_id_claim: Option<String>,
    #[serde(default)]
    scopes: BTreeMap<String, ScopeGrant>,
}

/// `admin:` section: who may call `/admin/*` and `/metrics`, and where.
#[derive(Debug, Clone, Default)]
pub struct AdminConfig {
    /// `sha256:<hex>` hashes of the admin keys (inline `keys`).
    pub keys: Vec<String>,
    /// A file of admin key hashes, one per line (`#` comments), resolved against
    /// the config's directory and read at startup.
    pub key_file: Option<PathBuf>,
    /// A separate listener for `/admin/*` and `/metrics` (then the main listener
    /// answers 404 there).
    pub listen: Option<SocketAddr>,
    /// Who may read `/metrics`.
    pub metrics: MetricsAccess,
    /// Whether the section was present at all (without it the admin endpoints are
    /// open, as before, with a warning at startup).
    pub configured: bool,
}

/// `admin.metrics:`.
#[derive(Debug, Clone, Default)]
pub struct MetricsAccess {
    /// Client address ranges allowed (empty: any address).
    pub allow: Vec<Cidr>,
    /// Whether `/metrics` needs an admin key too.
    pub key_required: bool,
}

/// An address range like `127.0.0.1/32` or `::1/128`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cidr {
    /// The network address.
    pub addr: IpAddr,
    /// Prefix length in bits.
    pub prefix: u8,
}

impl Cidr {
    /// Parses `a.b.c.d/n`, `x::y/n`, or a bare address (a single host).
    pub fn parse(s: &str) -> Option<Cidr> {
        let (a, p) = match s.split_once('/') {
            Some((a, p)) => (a, Some(p)),
            None => (s, None),
        };
        let addr: IpAddr = a.trim().parse().ok()?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        let prefix = match p {
            Some(p) => p.trim().parse::<u8>().ok().filter(|p| *p <= max)?,
            None => max,
        };
        Some(Cidr { addr, prefix })
    }

    /// Whether `ip` is in the range (an IPv4-mapped IPv6 address counts as IPv4).
    pub fn contains(&self, ip: IpAddr) -> bool {
        let ip = match ip {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map(IpAddr::V4).unwrap_or(ip),
            v4 => v4,
        };
        match (self.addr, ip) {
            (IpAddr::V4(n), IpAddr::V4(a)) => {
                let mask = u32::MAX
                    .checked_shl(32 - u32::from(self.prefix))
                    .unwrap_or(0);
                u32::from(n) & mask == u32::from(a) & mask
            }
            (IpAddr::V6(n), IpAddr::V6(a)) => {
                let mask = u128::MAX
                    .checked_shl(128 - u32::from(self.prefix))
                    .unwrap_or(0);
                u128::from(n) & mask == u128::from(a) & mask
            }
            _ => false,
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawAdmin {
    #[serde(default)]
    keys: Vec<String>,
    #[serde(default)]
    key_file: Option<String>,
    #[serde(default)]
    listen: Option<String>,
    #[serde(default)]
    metrics: Option<RawMetrics>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawMetrics {
    #[serde(default)]
    allow: Vec<String>,
    #[serde(default)]
    key_required: bool,
}

fn serde_error(section: &str, e: serde_path_to_error::Error<serde_yaml::Error>) -> ConfigError {
    let inner = e.path().to_string();
    let path = if inner == "." || inner.is_empty() {
        section.to_string()
    } else {
        format!("{section}.{inner}")
    };
    let message = e.into_inner().to_string();
    // serde_yaml appends " at line N column M" for positions in its own text, which
    // is a re-serialized subtree here: drop it.
    let message = match message.find(" at line ") {
        Some(i) => message[..i].to_string(),
        None => message,
    };
    let message = crate::suggest::unknown_field_hint(message);
    ConfigError { path, message }
}

/// Whether `h` is `sha256:` and 64 hex digits.
pub fn valid_hash(h: &str) -> bool {
    h.strip_prefix("sha256:")
        .is_some_and(|x| x.len() == 64 && x.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// Checks key entries (ids unique and non-empty, hashes well-formed), with
/// problems under `path` (`auth.keys` or the key file's name).
pub fn check_keys(keys: &[KeyEntry], path: &str) -> Vec<ConfigError> {
    let mut errors = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for (i, k) in keys.iter().enumerate() {
        let at = format!("{path}[{i}]");
        if k.id.trim().is_empty() {
            errors.push(ConfigError {
                path: format!("{at}.id"),
                message: "a key needs a non-empty id".into(),
            });
        } else if !seen.insert(k.id.as_str()) {
            errors.push(ConfigError {
                path: format!("{at}.id"),
                message: format!("key id \"{}\" is used twice", k.id),
            });
        }
        if !valid_hash(&k.hash) {
            errors.push(ConfigError {
                path: format!("{at}.hash"),
                message: "expected \"sha256:\" and 64 hex digits (the SHA-256 of the secret)"
                    .into(),
            });
        }
        if k.priority == PriorityLevel::Critical {
            errors.push(ConfigError {
                path: format!("{at}.priority"),
                message: "a key's priority is one of low, normal, high (a request reaches \
                          critical through `max_priority` and the `x-switchyard-priority` \
                          header, or a policy's `set priority critical`)"
                    .into(),
            });
        }
        if k.max_priority.is_some_and(|m| m < k.priority) {
            errors.push(ConfigError {
                path: format!("{at}.max_priority"),
                message: format!(
                    "is below the key's priority `{}`; it is the highest level the \
                     x-switchyard-priority header may ask for",
                    k.priority.as_str()
                ),
            });
        }
        let limits = k.limits.map(|l| l.problems()).unwrap_or_default();
        let budget = k.budget.map(|b| b.problems()).unwrap_or_default();
        for (section, list) in [("limits", limits), ("budget", budget)] {
            for (field, message) in list {
                errors.push(ConfigError {
                    path: format!("{at}.{section}.{field}"),
                    message,
                });
            }
        }
    }
    errors
}

/// Reads a key file.
///
/// # Errors
/// One sentence per problem, naming the file (never a secret: the file holds none).
pub fn read_key_file(path: &Path) -> Result<Vec<KeyEntry>, Vec<String>> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| vec![format!("cannot read key file {}: {e}", path.display())])?;
    parse_key_file(&text, &path.display().to_string())
}

/// Parses key-file text (`name` for messages; an empty file has no keys).
///
/// # Errors
/// One sentence per problem.
pub fn parse_key_file(text: &str, name: &str) -> Result<Vec<KeyEntry>, Vec<String>> {
    if text.trim().is_empty() {
        return Ok(Vec::new());
    }
    let de = serde_yaml::Deserializer::from_str(text);
    let file: KeyFile = serde_path_to_error::deserialize(de)
        .map_err(|e| vec![format!("{name}: {}", serde_error("keys file", e))])?;
    let errors = check_keys(&file.keys, "keys");
    if errors.is_empty() {
        Ok(file.keys)
    } else {
        Err(errors.iter().map(|e| format!("{name}: {e}")).collect())
    }
}

/// Validates `auth:` (`value`), resolving files against `base_dir`.
pub fn auth(
    value: &serde_yaml::Value,
    base_dir: &Path,
    errors: &mut Vec<ConfigError>,
) -> AuthConfig {
    if value.is_null() {
        return AuthConfig::default();
    }
    let raw: RawAuth = match serde_path_to_error::deserialize(value.clone()) {
        Ok(r) => r,
        Err(e) => {
            errors.push(serde_error("auth", e));
            return AuthConfig::default();
        }
    };
    errors.extend(check_keys(&raw.keys, "auth.keys"));
    let key_file = raw.key_file.map(|f| base_dir.join(f));
    if let Some(f) = &key_file {
        if let Err(es) = read_key_file(f) {
            for message in es {
                errors.push(ConfigError {
                    path: "auth.key_file".into(),
                    message,
                });
            }
        }
    }
    if let Some(l) = raw
        .jwt
        .as_ref()
        .and_then(|j| j.leeway_s)
        .filter(|l| *l > MAX_LEEWAY_S)
    {
        errors.push(ConfigError {
            path: "auth.jwt.leeway_s".into(),
            message: format!("{l} is out of range (0 to {MAX_LEEWAY_S} seconds)"),
        });
    }
    let jwt = raw.jwt.map(|j| JwtConfig {
        hs256_secret_env: j.hs256_secret_env,
        jwks_file: j.jwks_file.map(|f| base_dir.join(f)),
        issuer: j.issuer,
        audience: j.audience,
        leeway_s: j.leeway_s.unwrap_or(30),
        org_claim: j.org_claim.unwrap_or_else(|| "org".into()),
        key_id_claim: j.key_id_claim.unwrap_or_else(|| "sub".into()),
        scopes: j.scopes,
    });
    let cfg = AuthConfig {
        mode: raw.mode,
        keys: raw.keys,
        key_file,
        jwt,
    };
    let wants_keys = matches!(cfg.mode, AuthMode::Keys | AuthMode::KeysOrJwt);
    let wants_jwt = matches!(cfg.mode, AuthMode::Jwt | AuthMode::KeysOrJwt);
    if wants_keys && cfg.keys.is_empty() && cfg.key_file.is_none() {
        errors.push(ConfigError {
            path: "auth".into(),
            message: "this mode checks API keys but none are configured".into(),
        });
    }
    match &cfg.jwt {
        None if wants_jwt => errors.push(ConfigError {
            path: "auth.jwt".into(),
            message: "this mode checks JWTs but `auth.jwt` is missing".into(),
        }),
        Some(j) if j.hs256_secret_env.is_none() && j.jwks_file.is_none() => {
            errors.push(ConfigError {
                path: "auth.jwt".into(),
                message: "give `hs256_secret_env` or `jwks_file` (or both)".into(),
            });
        }
        _ => {}
    }
    cfg
}

/// Validates `admin:` (`value`), resolving files against `base_dir`.
pub fn admin(
    value: &serde_yaml::Value,
    base_dir: &Path,
    errors: &mut Vec<ConfigError>,
) -> AdminConfig {
    if value.is_null() {
        return AdminConfig::default();
    }
    let raw: RawAdmin = match serde_path_to_error::deserialize(value.clone()) {
        Ok(r) => r,
        Err(e) => {
            errors.push(serde_error("admin", e));
            return AdminConfig {
                configured: true,
                ..AdminConfig::default()
            };
        }
    };
    let mut cfg = AdminConfig {
        configured: true,
        key_file: raw.key_file.map(|f| base_dir.join(f)),
        ..AdminConfig::default()
    };
    for (i, k) in raw.keys.iter().enumerate() {
        if !valid_hash(k) {
            errors.push(ConfigError {
                path: format!("admin.keys[{i}]"),
                message: "expected \"sha256:\" and 64 hex digits (the SHA-256 of the admin key)"
                    .into(),
            });
        }
    }
    cfg.keys = raw.keys;
    if let Some(f) = &cfg.key_file {
        match std::fs::read_to_string(f) {
            Ok(text) => {
                for (n, line) in text.lines().enumerate() {
                    let line = line.trim();
                    if line.is_empty() || line.starts_with('#') {
                        continue;
                    }
                    if valid_hash(line) {
                        cfg.keys.push(line.to_string());
                    } else {
                        errors.push(ConfigError {
                            path: "admin.key_file".into(),
                            message: format!(
                                "line {}: expected \"sha256:\" and 64 hex digits",
                                n + 1
                            ),
                        });
                    }
                }
            }
            Err(e) => errors.push(ConfigError {
                path: "admin.key_file".into(),
                message: format!("cannot read {}: {e}", f.display()),
            }),
        }
    }
    if let Some(l) = raw.listen {
        match l.parse() {
            Ok(a) => cfg.listen = Some(a),
            Err(_) => errors.push(ConfigError {
                path: "admin.listen".into(),
                message: format!("\"{l}\" is not an address like 127.0.0.1:9090"),
            }),
        }
    }
    if let Some(m) = raw.metrics {
        cfg.metrics.key_required = m.key_required;
        for (i, a) in m.allow.iter().enumerate() {
            match Cidr::parse(a) {
                Some(c) => cfg.metrics.allow.push(c),
                None => errors.push(ConfigError {
                    path: format!("admin.metrics.allow[{i}]"),
                    message: format!("\"{a}\" is not an address range like 127.0.0.1/32"),
                }),
            }
        }
        if cfg.metrics.key_required && cfg.keys.is_empty() {
            errors.push(ConfigError {
                path: "admin.metrics.key_required".into(),
                message: "no admin keys are configured to require".into(),
            });
        }
    }
    cfg
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cidrs_match_their_ranges() {
        let c = Cidr::parse("10.1.0.0/16").unwrap();
        assert!(c.contains("10.1.200.3".parse().unwrap()));
        assert!(!c.contains("10.2.0.1".parse().unwrap()));
        assert!(Cidr::parse("::1/128")
            .unwrap()
            .contains("::1".parse().unwrap()));
        assert!(Cidr::parse("127.0.0.1/32")
            .unwrap()
            .contains("::ffff:127.0.0.1".parse().unwrap()));
        assert!(Cidr::parse("0.0.0.0/0")
            .unwrap()
            .contains("8.8.8.8".parse().unwrap()));
        assert!(Cidr::parse("1.2.3.4/33").is_none());
    }

    #[test]
    fn bad_entries_are_reported_with_paths() {
        let v: serde_yaml::Value = serde_yaml::from_str(
            "mode: keys\nkeys:\n  - { id: a, hash: 'sha256:00' }\n  - { id: a, hash: 'x' }\n",
        )
        .unwrap();
        let mut errors = Vec::new();
        auth(&v, Path::new("."), &mut errors);
        let paths: Vec<_> = errors.iter().map(|e| e.path.as_str()).collect();
        assert_eq!(
            paths,
            ["auth.keys[0].hash", "auth.keys[1].id", "auth.keys[1].hash"]
        );
        let v: serde_yaml::Value = serde_yaml::from_str("mode: keys\nkeyz: []\n").unwrap();
        let mut errors = Vec::new();
        auth(&v, Path::new("."), &mut errors);
        assert!(
            errors[0].message.contains("unknown field `keyz`"),
            "{errors:?}"
        );
    }

    #[test]
    fn a_jwt_leeway_over_an_hour_is_refused() {
        let check = |leeway: u64| {
            let v: serde_yaml::Value = serde_yaml::from_str(&format!(
                "mode: jwt\njwt: {{ hs256_secret_env: S, leeway_s: {leeway} }}\n"
            ))
            .unwrap();
            let mut errors = Vec::new();
            auth(&v, Path::new("."), &mut errors);
            errors
        };
        assert!(check(MAX_LEEWAY_S).is_empty());
        let errors = check(u64::MAX);
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert_eq!(errors[0].path, "auth.jwt.leeway_s");
    }

    #[test]
    fn a_key_entry_carries_its_own_limits_and_budget() {
        let h = format!("sha256:{}", "0".repeat(64));
        let text = format!(
            "keys:\n  - {{ id: a, hash: '{h}', limits: {{ requests_per_min: 6, burst_tokens: 500 }}, budget: {{ usd_per_day: 2.5 }} }}\n"
        );
        let keys = parse_key_file(&text, "keys.yaml").unwrap();
        assert_eq!(keys[0].limits.unwrap().requests_per_min, Some(6));
        assert_eq!(keys[0].limits.unwrap().burst_tokens, Some(500));
        assert_eq!(keys[0].budget.unwrap().usd_per_day, Some(2.5));
        // Written back the same way (`switchyard keys create` rewrites the file).
        let again = serde_yaml::to_string(&KeyFile { keys: keys.clone() }).unwrap();
        assert_eq!(parse_key_file(&again, "k").unwrap(), keys);

        let bad = format!(
            "keys:\n  - {{ id: a, hash: '{h}', limits: {{ burst_requests: 0 }}, budget: {{ usd_per_day: -1 }} }}\n"
        );
        let errs = parse_key_file(&bad, "keys.yaml").unwrap_err();
        assert!(
            errs[0].contains("keys[0].limits.burst_requests"),
            "{errs:?}"
        );
        assert!(errs[1].contains("keys[0].budget.usd_per_day"), "{errs:?}");
        let typo = format!("keys:\n  - {{ id: a, hash: '{h}', limits: {{ rpm: 6 }} }}\n");
        let errs = parse_key_file(&typo, "keys.yaml").unwrap_err();
        assert!(errs[0].contains("unknown field `rpm`"), "{errs:?}");
    }
}
