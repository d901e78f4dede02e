//! Authentication (seed 001, "Ingress Layer"): who is calling, verified, as a
//! [`Principal`].
//!
//! The interface is one call, [`Authenticator::authenticate`], from the gateway's
//! admit phase. By `auth.mode`:
//! - `none` (the default): nothing is verified; the principal is what the request
//!   presents (its key id a hash of whatever token it sent, its organization the
//!   `OpenAI-Organization` header), as before authentication existed;
//! - `keys`: the secret must hash to a non-revoked key of `auth.keys` or the key
//!   file ([`keys`]);
//! - `jwt`: the token must be a valid JWT ([`jwt`]);
//! - `keys_or_jwt`: a token that looks like a JWT is checked as one, anything else
//!   as an API key.
//!
//! The credential is the bearer token of `Authorization: Bearer`, else `x-api-key`
//! (the Anthropic SDK's header), else `api-key` (Azure's). Every failure is the same
//! 401 (`invalid_api_key`, with `WWW-Authenticate: Bearer`): a client learns nothing
//! about which part of a credential was wrong; the reason goes to the debug log.
//! With a verified credential the organization is the key's (or the token's claim)
//! and the `OpenAI-Organization` header is ignored.

pub mod admin;
mod file;
pub mod jwt;
pub mod keys;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use http::{HeaderMap, HeaderName};

pub use admin::AdminGuard;
pub use file::{POLL as FILE_POLL, SETTLE as FILE_SETTLE};

use crate::config::{AuthConfig, AuthMode, Budget, RateLimit};
use crate::error::{Code, ErrorKind, GatewayError};
use crate::policy::ast::PriorityLevel;
use file::Reloading;
use keys::KeySet;

/// How a principal was established.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Method {
    /// Not verified (`auth.mode: none`).
    #[default]
    Unverified,
    /// An API key of the config or the key file.
    ApiKey,
    /// A JWT.
    Jwt,
}

/// The caller, as authentication established it: what admission (rate limits,
/// budgets), routing and policies read.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Principal {
    /// The key id (`request.api_key`): the key entry's `id`, the JWT's
    /// `key_id_claim`, or, unverified, `key-` and a hash of the presented token.
    pub key_id: Option<Arc<str>>,
    /// The organization (`request.org`).
    pub org: Option<Arc<str>>,
    /// The starting priority of its requests.
    pub priority: PriorityLevel,
    /// The key entry's `max_priority`: the highest level the `x-switchyard-priority`
    /// header may ask for (`None`: `priority`, or `high` for unverified callers).
    pub max_priority: Option<PriorityLevel>,
    /// Logical models it may call (`None`: all).
    pub models: Option<BTreeSet<String>>,
    /// Providers its requests may go to (`None`: all).
    pub providers: Option<BTreeSet<String>>,
    /// OAuth2 scopes of its token (empty for API keys).
    pub scopes: Vec<String>,
    /// The key entry's `metadata`.
    pub metadata: BTreeMap<String, String>,
    /// The key entry's own rate limits (`limits:`), for the admission layer.
    /// `None` for JWTs, unverified callers and keys without their own.
    pub limits: Option<RateLimit>,
    /// The key entry's own spend budget (`budget:`), like `limits`.
    pub budget: Option<Budget>,
    /// How it was established.
    pub method: Method,
}

impl Principal {
    /// The highest level the `x-switchyard-priority` header may ask for: the key
    /// entry's `max_priority`, else its `priority`; `high` for unverified callers
    /// (`auth.mode: none` trusts them anyway, but only a key reaches `critical`).
    pub fn priority_ceiling(&self) -> PriorityLevel {
        match self.method {
            Method::Unverified => self.max_priority.unwrap_or(PriorityLevel::High),
            _ => self.max_priority.unwrap_or(self.priority),
        }
    }

    /// Whether it may call logical model `model`.
    pub fn allows_model(&self, model: &str) -> bool {
        self.models.as_ref().is_none_or(|m| m.contains(model))
    }

    /// Whether its requests may go to provider `provider`.
    pub fn allows_provider(&self, provider: &str) -> bool {
        self.providers.as_ref().is_none_or(|p| p.contains(provider))
    }
}

/// Longest credential read from a request, in bytes (longer ones are ignored).
pub const MAX_CREDENTIAL_BYTES: usize = 8 * 1024;

/// Longest organization id read from `OpenAI-Organization`, in bytes.
pub const MAX_ORG_BYTES: usize = 256;

/// `x-api-key` (Anthropic's credential header).
const X_API_KEY: HeaderName = HeaderName::from_static("x-api-key");
/// `api-key` (Azure OpenAI's credential header).
const API_KEY: HeaderName = HeaderName::from_static("api-key");
/// `openai-organization`.
const OPENAI_ORGANIZATION: HeaderName = HeaderName::from_static("openai-organization");

/// The trimmed text of the header `name`, if present, text and not empty. Looked
/// up by a [`HeaderName`] constant: a `&str` name is parsed into one on every
/// lookup.
fn text<'h>(headers: &'h HeaderMap, name: &HeaderName) -> Option<&'h str> {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
        .filter(|v| !v.is_empty())
}

/// The credential a request presents: the bearer token of `Authorization: Bearer`,
/// else `x-api-key`, else `api-key` (each at most [`MAX_CREDENTIAL_BYTES`]).
pub fn credential(headers: &HeaderMap) -> Option<&str> {
    // RFC 9110 section 11.4: the scheme, then one or more spaces or tabs.
    let bearer = text(headers, &http::header::AUTHORIZATION).and_then(|v| {
        let (scheme, token) = v.split_once([' ', '\t'])?;
        scheme
            .eq_ignore_ascii_case("bearer")
            .then(|| token.trim())
            .filter(|t| !t.is_empty())
    });
    let usable = |k: &&str| k.len() <= MAX_CREDENTIAL_BYTES;
    bearer
        .filter(usable)
        .or_else(|| text(headers, &X_API_KEY).filter(usable))
        .or_else(|| text(headers, &API_KEY).filter(usable))
}

/// The organization a request claims (`OpenAI-Organization`), unverified.
pub fn claimed_org(headers: &HeaderMap) -> Option<&str> {
    text(headers, &OPENAI_ORGANIZATION).filter(|o| o.len() <= MAX_ORG_BYTES)
}

/// The id of an unverified API key `key`: `key-` and the first 16 hex digits (64
/// bits) of the key's SHA-256. Stable across instances and restarts (a `split by
/// api_key` stays sticky), and the key cannot be recovered from it.
///
/// Every request of `mode: none` that presents a credential computes it (the
/// caller's `request.api_key`): the digest comes from the serving thread's
/// remembered ones ([`keys::digest_remembered`]) and the digits from a table, where
/// a SHA-256 and `fmt` per request were about 4,300 instructions, 6% of a proxied
/// JSON request with every feature off (`benches/load/callgrind.sh`).
pub fn key_id(key: &str) -> String {
    let digest = keys::digest_remembered(key);
    let mut id = String::with_capacity(20);
    id.push_str("key-");
    keys::push_hex(&mut id, &digest[..8]);
    id
}

/// The one 401 of authentication, whatever was wrong.
pub fn unauthenticated() -> GatewayError {
    GatewayError::new(
        ErrorKind::Unauthenticated,
        "invalid or missing API key or token; send it as `Authorization: Bearer <key>`",
    )
    .with_code(Code::InvalidApiKey)
}

/// Checks credentials for one `auth:` config.
#[derive(Debug)]
pub struct Authenticator {
    mode: AuthMode,
    inline: KeySet,
    file: Option<Reloading<KeySet>>,
    jwt: Option<jwt::JwtVerifier>,
}

impl Default for Authenticator {
    /// `mode: none`.
    fn default() -> Self {
        Authenticator {
            mode: AuthMode::None,
            inline: KeySet::default(),
            file: None,
            jwt: None,
        }
    }
}

impl Authenticator {
    /// The authenticator of `cfg`, reading the key file, the JWKS file, and the
    /// HS256 secret through `env`.
    ///
    /// # Errors
    /// A sentence: a file that cannot be read or parsed, an unset variable.
    pub fn new(cfg: &AuthConfig, env: &dyn Fn(&str) -> Option<String>) -> Result<Self, String> {
        let file = match &cfg.key_file {
            Some(p) if cfg.mode != AuthMode::None => Some(
                Reloading::new(p.clone(), KeySet::read)
                    .map_err(|e| format!("auth.key_file: {}", e.join("; ")))?
                    .settling_when(KeySet::is_empty),
            ),
            _ => None,
        };
        let jwt = match &cfg.jwt {
            Some(j) if matches!(cfg.mode, AuthMode::Jwt | AuthMode::KeysOrJwt) => {
                Some(jwt::JwtVerifier::new(j, env)?)
            }
            _ => None,
        };
        Ok(Authenticator {
            mode: cfg.mode,
            inline: KeySet::new(&cfg.keys),
            file,
            jwt,
        })
    }

    /// The configured mode.
    pub fn mode(&self) -> AuthMode {
        self.mode
    }

    /// The principal behind a request's `headers`.
    ///
    /// # Errors
    /// 401 `invalid_api_key` for missing, unknown, revoked, expired or otherwise
    /// invalid credentials (never in `mode: none`).
    pub fn authenticate(&self, headers: &HeaderMap) -> Result<Principal, GatewayError> {
        let presented = credential(headers);
        if self.mode == AuthMode::None {
            return Ok(Principal {
                key_id: presented.map(|k| Arc::from(key_id(k))),
                org: claimed_org(headers).map(Arc::from),
                ..Principal::default()
            });
        }
        let Some(token) = presented else {
            tracing::debug!("authentication failed: no credentials");
            return Err(unauthenticated());
        };
        let as_jwt = match self.mode {
            AuthMode::Jwt => true,
            AuthMode::KeysOrJwt => jwt::looks_like_jwt(token),
            _ => false,
        };
        let result = if as_jwt {
            match &self.jwt {
                Some(j) => j.verify(token),
                None => Err("JWTs are not configured".into()),
            }
        } else {
            self.verify_key(token)
        };
        result.map_err(|reason| {
            tracing::debug!(%reason, "authentication failed");
            unauthenticated()
        })
    }

    fn verify_key(&self, secret: &str) -> Result<Principal, String> {
        let from_file;
        let found = match self.inline.find(secret) {
            Some(e) => e,
            None => {
                from_file = self.file.as_ref().map(|f| f.get());
                from_file
                    .as_deref()
                    .and_then(|s| s.find(secret))
                    .ok_or("unknown API key")?
            }
        };
        let entry = found;
        if entry.revoked {
            return Err(format!("key {} is revoked", entry.id));
        }
        Ok(Principal {
            key_id: Some(entry.id.clone()),
            org: entry.org.clone(),
            priority: entry.priority,
            max_priority: entry.max_priority,
            models: entry.models.as_ref().map(|m| m.iter().cloned().collect()),
            providers: entry
                .providers
                .as_ref()
                .map(|p| p.iter().cloned().collect()),
            scopes: Vec::new(),
            metadata: entry.metadata.clone(),
            limits: entry.limits,
            budget: entry.budget,
            method: Method::ApiKey,
        })
    }
}
