//! JWT bearer tokens (OAuth2 access tokens included), checked with `jsonwebtoken`.
//!
//! 1. The header is read; its `alg` picks the key *family*, never the other way
//!    round: HS256 only ever verifies with the configured HS256 secret, RS256 only
//!    with an RSA key of the JWKS, ES256 only with a P-256 key. So a token signed
//!    with HS256 using an RSA public key as the secret (algorithm confusion) meets
//!    the HS256 secret or nothing. `alg: none` is no algorithm `jsonwebtoken`
//!    knows: such a header does not parse. Any other algorithm is refused.
//! 2. RS256 and ES256 need a `kid` naming a key of the JWKS file (re-read when it
//!    changes, `super::file`); a JWK whose own `alg` differs, or that is
//!    published for another use (`use: enc`, `key_ops` without `verify`), is never
//!    used.
//! 3. The signature, `exp` (required), `nbf` (when present), `iss` and `aud` (when
//!    configured) are checked with `leeway_s` seconds of clock leeway.
//! 4. The key id is the `key_id_claim` (default `sub`), the organization the
//!    `org_claim` (default `org`); scopes come from `scope` (space-separated,
//!    RFC 8693) or `scp` (an array, as Okta and Azure AD send them). With
//!    `auth.jwt.scopes` configured, the caller may use the union of the models and
//!    providers its scopes grant (a scope not in the map grants nothing); without
//!    it, every model and provider.

use std::collections::{BTreeSet, HashMap};
use std::path::Path;
use std::sync::Arc;

use jsonwebtoken::jwk::{
    AlgorithmParameters, EllipticCurve, JwkSet, KeyAlgorithm, KeyOperations, PublicKeyUse,
};
use jsonwebtoken::{Algorithm, DecodingKey, Validation};

use super::file::Reloading;
use super::{Method, Principal};
use crate::config::auth::JwtConfig;

/// The public keys of a JWKS file, by `kid`.
pub struct Jwks {
    keys: HashMap<String, (Algorithm, DecodingKey)>,
}

impl Jwks {
    /// Reads a JWKS file (`{"keys": [...]}`); keys without a `kid`, or of a type
    /// other than RSA or EC P-256, are skipped.
    ///
    /// # Errors
    /// The file cannot be read or is not a JWKS.
    pub fn read(path: &Path) -> Result<Jwks, Vec<String>> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| vec![format!("cannot read JWKS file {}: {e}", path.display())])?;
        let set: JwkSet = serde_json::from_str(&text)
            .map_err(|e| vec![format!("{} is not a JWKS: {e}", path.display())])?;
        let mut keys = HashMap::new();
        for jwk in &set.keys {
            let Some(kid) = jwk.common.key_id.clone() else {
                continue;
            };
            let alg = match &jwk.algorithm {
                AlgorithmParameters::RSA(_) => Algorithm::RS256,
                AlgorithmParameters::EllipticCurve(p) if p.curve == EllipticCurve::P256 => {
                    Algorithm::ES256
                }
                _ => continue,
            };
            let declared_ok = match jwk.common.key_algorithm {
                None => true,
                Some(KeyAlgorithm::RS256) => alg == Algorithm::RS256,
                Some(KeyAlgorithm::ES256) => alg == Algorithm::ES256,
                Some(_) => false,
            };
            // A key published for another use (`"use": "enc"`, or `key_ops`
            // without `verify`) never verifies signatures (RFC 7517 sections 4.2
            // and 4.3: one key, one purpose).
            let for_signatures = !matches!(
                jwk.common.public_key_use,
                Some(PublicKeyUse::Encryption | PublicKeyUse::Other(_))
            ) && jwk
                .common
                .key_operations
                .as_ref()
                .is_none_or(|ops| ops.contains(&KeyOperations::Verify));
            if !declared_ok || !for_signatures {
                continue;
            }
            if let Ok(key) = DecodingKey::from_jwk(jwk) {
                keys.insert(kid, (alg, key));
            }
        }
        Ok(Jwks { keys })
    }
}

/// Shortest HS256 secret accepted, in bytes: RFC 7518 section 3.2 requires a key
/// at least as long as the hash output (256 bits), so a short, guessable secret
/// cannot be brute-forced offline from one token to forge others.
pub const MIN_HS256_SECRET_BYTES: usize = 32;

/// Checks JWTs against one `auth.jwt` config.
pub struct JwtVerifier {
    cfg: JwtConfig,
    hs256: Option<DecodingKey>,
    jwks: Option<Reloading<Jwks>>,
}

impl std::fmt::Debug for JwtVerifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JwtVerifier")
            .field("hs256", &self.hs256.is_some())
            .field("jwks", &self.jwks)
            .finish()
    }
}

/// Whether `token` looks like a JWT (three base64url segments, a JSON header):
/// how `keys_or_jwt` tells tokens from API keys, whose alphabet has no dot.
pub fn looks_like_jwt(token: &str) -> bool {
    token.starts_with("eyJ") && token.split('.').count() == 3
}

impl JwtVerifier {
    /// The verifier for `cfg`, reading the HS256 secret from `env` and the JWKS file.
    ///
    /// # Errors
    /// A sentence naming every problem at once (the secret's variable is unset, the
    /// JWKS file is bad), `; `-separated, so one `serve --check` shows them all.
    pub fn new(cfg: &JwtConfig, env: &dyn Fn(&str) -> Option<String>) -> Result<Self, String> {
        let mut problems = Vec::new();
        let hs256 = cfg
            .hs256_secret_env
            .as_ref()
            .and_then(|var| match env(var) {
                Some(secret) if secret.len() < MIN_HS256_SECRET_BYTES => {
                    problems.push(format!(
                        "auth.jwt.hs256_secret_env: the secret in {var} is {} bytes; HS256 needs at least {MIN_HS256_SECRET_BYTES} (RFC 7518 section 3.2)",
                        secret.len()
                    ));
                    None
                }
                Some(secret) => Some(DecodingKey::from_secret(secret.as_bytes())),
                None => {
                    problems.push(format!(
                        "auth.jwt.hs256_secret_env: environment variable {var} is not set"
                    ));
                    None
                }
            });
        let jwks =
            cfg.jwks_file
                .as_ref()
                .and_then(|p| match Reloading::new(p.clone(), Jwks::read) {
                    Ok(r) => Some(r),
                    Err(e) => {
                        problems.push(format!("auth.jwt.jwks_file: {}", e.join("; ")));
                        None
                    }
                });
        if !problems.is_empty() {
            return Err(problems.join("; "));
        }
        Ok(JwtVerifier {
            cfg: cfg.clone(),
            hs256,
            jwks,
        })
    }

    /// The principal of a valid `token`; `Err` with the reason (for the debug log
    /// only: the client always gets the same 401).
    pub fn verify(&self, token: &str) -> Result<Principal, String> {
        let header = jsonwebtoken::decode_header(token).map_err(|e| e.to_string())?;
        critical_extensions(token)?;
        let jwks;
        let key = match header.alg {
            Algorithm::HS256 => self.hs256.as_ref().ok_or("HS256 is not configured")?,
            Algorithm::RS256 | Algorithm::ES256 => {
                let kid = header.kid.as_deref().ok_or("the token has no kid")?;
                jwks = self.jwks.as_ref().ok_or("no JWKS is configured")?.get();
                match jwks.keys.get(kid) {
                    Some((alg, key)) if *alg == header.alg => key,
                    _ => return Err(format!("no {:?} key with kid {kid:?}", header.alg)),
                }
            }
            other => return Err(format!("algorithm {other:?} is not accepted")),
        };
        let mut v = Validation::new(header.alg);
        v.algorithms = vec![header.alg];
        v.leeway = self.cfg.leeway_s;
        v.validate_nbf = true;
        // `jsonwebtoken` compares `iss` and `aud` only when the token has them: a
        // configured one must also be required, or a token without the claim passes
        // (RFC 7519 sections 4.1.1 and 4.1.3; RFC 8725 sections 3.8 and 3.9).
        let mut required = vec!["exp"];
        match &self.cfg.issuer {
            Some(iss) => {
                v.set_issuer(&[iss]);
                required.push("iss");
            }
            None => v.iss = None,
        }
        match &self.cfg.audience {
            Some(aud) => {
                v.set_audience(&[aud]);
                required.push("aud");
            }
            None => v.validate_aud = false,
        }
        v.set_required_spec_claims(&required);
        let data =
            jsonwebtoken::decode::<serde_json::Map<String, serde_json::Value>>(token, key, &v)
                .map_err(|e| e.to_string())?;
        claim_types(&data.claims)?;
        Ok(self.principal(&data.claims))
    }

    fn principal(&self, claims: &serde_json::Map<String, serde_json::Value>) -> Principal {
        let text = |name: &str| {
            claims
                .get(name)
                .and_then(|v| v.as_str())
                .filter(|s| !s.is_empty() && s.len() <= 256)
                .map(str::to_string)
        };
        let mut scopes: Vec<String> = match (claims.get("scope"), claims.get("scp")) {
            (Some(serde_json::Value::String(s)), _) => {
                s.split_whitespace().map(str::to_string).collect()
            }
            (_, Some(serde_json::Value::Array(a))) => a
                .iter()
                .filter_map(|v| v.as_str().map(str::to_string))
                .collect(),
            (_, Some(serde_json::Value::String(s))) => {
                s.split_whitespace().map(str::to_string).collect()
            }
            _ => Vec::new(),
        };
        scopes.truncate(64);
        let (models, providers) = if self.cfg.scopes.is_empty() {
            (None, None)
        } else {
            let mut models: Option<BTreeSet<String>> = Some(BTreeSet::new());
            let mut providers: Option<BTreeSet<String>> = Some(BTreeSet::new());
            for grant in scopes.iter().filter_map(|s| self.cfg.scopes.get(s)) {
                union(&mut models, grant.models.as_deref());
                union(&mut providers, grant.providers.as_deref());
            }
            (models, providers)
        };
        Principal {
            key_id: text(&self.cfg.key_id_claim).map(Arc::from),
            org: text(&self.cfg.org_claim).map(Arc::from),
            method: Method::Jwt,
            models,
            providers,
            scopes,
            ..Principal::default()
        }
    }
}

/// Refuses a token whose header lists extensions that must be understood (`crit`,
/// RFC 7515 section 4.1.11): Switchyard understands none, so such a token is
/// invalid. (`jsonwebtoken` reads the header into fixed fields and drops it.)
fn critical_extensions(token: &str) -> Result<(), String> {
    use base64::Engine as _;
    let head = token.split('.').next().unwrap_or("");
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(head.trim_end_matches('='))
        .map_err(|e| format!("the header is not base64url: {e}"))?;
    let v: serde_json::Map<String, serde_json::Value> =
        serde_json::from_slice(&bytes).map_err(|e| format!("the header is not JSON: {e}"))?;
    if v.contains_key("crit") {
        return Err(
            "the header lists critical extensions (`crit`), which are not understood".into(),
        );
    }
    Ok(())
}

/// Refuses registered claims of the wrong type, which `jsonwebtoken` skips rather
/// than refuses: `nbf` and `iat` must be NumericDates (numbers) when present, and
/// `iss` a string (RFC 7519 sections 4.1.1, 4.1.5 and 4.1.6), so that `"nbf":
/// "<a time to come>"` cannot pass as no `nbf` at all, nor an `iss` array as the
/// configured issuer.
fn claim_types(claims: &serde_json::Map<String, serde_json::Value>) -> Result<(), String> {
    for name in ["nbf", "iat", "exp"] {
        if claims.get(name).is_some_and(|v| !v.is_number()) {
            return Err(format!("the `{name}` claim is not a number"));
        }
    }
    if claims.get("iss").is_some_and(|v| !v.is_string()) {
        return Err("the `iss` claim is not a string".into());
    }
    Ok(())
}

/// Adds a grant's list to an allowed set; `None` (everything) absorbs.
fn union(set: &mut Option<BTreeSet<String>>, grant: Option<&[String]>) {
    match grant {
        None => *set = None,
        Some(items) => {
            if let Some(s) = set {
                s.extend(items.iter().cloned());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use jsonwebtoken::{encode, EncodingKey, Header};
    use serde_json::json;

    const SECRET: &str = "a-test-secret-of-at-least-thirty-two-bytes";

    fn config(issuer: Option<&str>, audience: Option<&str>) -> JwtConfig {
        JwtConfig {
            hs256_secret_env: Some("SECRET".into()),
            jwks_file: None,
            issuer: issuer.map(str::to_string),
            audience: audience.map(str::to_string),
            leeway_s: 5,
            org_claim: "org".into(),
            key_id_claim: "sub".into(),
            scopes: Default::default(),
        }
    }

    fn verifier(issuer: Option<&str>, audience: Option<&str>) -> JwtVerifier {
        JwtVerifier::new(&config(issuer, audience), &|_| Some(SECRET.into())).unwrap()
    }

    #[test]
    fn a_jwk_published_for_encryption_never_verifies() {
        let rsa: serde_json::Value =
            serde_json::from_str(include_str!("../../tests/fixtures/test_rsa_jwk.json")).unwrap();
        let with = |kid: &str, extra: serde_json::Value| {
            let mut k = rsa.clone();
            k["kid"] = json!(kid);
            for (name, v) in extra.as_object().unwrap() {
                k[name] = v.clone();
            }
            k
        };
        let set = json!({"keys": [
            with("plain", json!({})),
            with("sig", json!({"use": "sig"})),
            with("verify", json!({"key_ops": ["verify"]})),
            with("enc", json!({"use": "enc"})),
            with("wrap", json!({"key_ops": ["wrapKey", "encrypt"]})),
        ]});
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("jwks.json");
        std::fs::write(&path, set.to_string()).unwrap();
        let jwks = Jwks::read(&path).unwrap();
        let mut kids: Vec<&str> = jwks.keys.keys().map(String::as_str).collect();
        kids.sort_unstable();
        assert_eq!(kids, ["plain", "sig", "verify"]);
    }

    #[test]
    fn a_short_hs256_secret_is_refused_at_startup() {
        let e = JwtVerifier::new(&config(None, None), &|_| Some("secret".into())).unwrap_err();
        assert!(e.contains("auth.jwt.hs256_secret_env"), "{e}");
        assert!(e.contains("6 bytes"), "{e}");
        let at_least = "x".repeat(MIN_HS256_SECRET_BYTES);
        assert!(JwtVerifier::new(&config(None, None), &|_| Some(at_least.clone())).is_ok());
    }

    fn token(claims: &serde_json::Value) -> String {
        encode(
            &Header::new(Algorithm::HS256),
            claims,
            &EncodingKey::from_secret(SECRET.as_bytes()),
        )
        .unwrap()
    }

    fn exp() -> u64 {
        jsonwebtoken::get_current_timestamp() + 600
    }

    #[test]
    fn configured_issuer_and_audience_are_required_claims() {
        let v = verifier(Some("https://idp.test"), Some("switchyard"));
        let ok = json!({"sub": "s", "iss": "https://idp.test", "aud": "switchyard", "exp": exp()});
        assert!(v.verify(&token(&ok)).is_ok());
        let no_iss = json!({"sub": "s", "aud": "switchyard", "exp": exp()});
        assert!(v.verify(&token(&no_iss)).is_err(), "a token without iss");
        let no_aud = json!({"sub": "s", "iss": "https://idp.test", "exp": exp()});
        assert!(v.verify(&token(&no_aud)).is_err(), "a token without aud");
        let no_exp = json!({"sub": "s", "iss": "https://idp.test", "aud": "switchyard"});
        assert!(v.verify(&token(&no_exp)).is_err(), "a token without exp");
        // Without `issuer` / `audience`, neither claim is needed.
        let open = verifier(None, None);
        assert!(open
            .verify(&token(&json!({"sub": "s", "exp": exp()})))
            .is_ok());
    }

    // Regression (outside attack, 2026-12-07): `nbf` as a string (a time to come),
    // `"zz"` or `true` passed as if absent; an `iss` array holding the configured
    // issuer passed; a `crit` header was ignored.
    #[test]
    fn registered_claims_of_the_wrong_type_and_crit_headers_are_refused() {
        let v = verifier(Some("https://idp.test"), None);
        let later = (exp() + 1_000_000).to_string();
        for bad in [
            json!({"sub": "s", "iss": "https://idp.test", "exp": exp(), "nbf": later}),
            json!({"sub": "s", "iss": "https://idp.test", "exp": exp(), "nbf": "zz"}),
            json!({"sub": "s", "iss": "https://idp.test", "exp": exp(), "nbf": true}),
            json!({"sub": "s", "iss": "https://idp.test", "exp": exp(), "iat": "now"}),
            json!({"sub": "s", "iss": ["https://idp.test"], "exp": exp()}),
        ] {
            assert!(v.verify(&token(&bad)).is_err(), "{bad}");
        }
        let good = json!({"sub": "s", "iss": "https://idp.test", "exp": exp(), "nbf": 1, "iat": 1});
        assert!(v.verify(&token(&good)).is_ok());
        // The same claims under a header with `crit`.
        use base64::Engine as _;
        let t = token(&good);
        let rest = &t[t.find('.').unwrap()..];
        let signed = |header: &[u8]| {
            let head = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(header);
            let signing = format!("{head}{}", &rest[..rest.rfind('.').unwrap()]);
            let sig = jsonwebtoken::crypto::sign(
                signing.as_bytes(),
                &EncodingKey::from_secret(SECRET.as_bytes()),
                Algorithm::HS256,
            )
            .unwrap();
            format!("{signing}.{sig}")
        };
        assert!(v.verify(&signed(br#"{"alg":"HS256","typ":"JWT"}"#)).is_ok());
        let crit = signed(br#"{"alg":"HS256","typ":"JWT","crit":["exp"]}"#);
        assert!(v.verify(&crit).is_err(), "crit");
    }
}
