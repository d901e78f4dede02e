//! Who may call `/admin/*` and `/metrics` (`admin:` in the config).
//!
//! With admin keys configured, `/admin/*` needs `Authorization: Bearer <admin key>`;
//! the key's SHA-256 is compared with every configured hash in constant time. A
//! refusal is one 401 that says nothing about why. Without an `admin:` section the
//! endpoints stay open (as before this existed) and startup logs a warning.
//! `/metrics` may be limited to address ranges (`metrics.allow`) and to holders of
//! an admin key (`metrics.key_required`).

use std::net::IpAddr;

use http::HeaderMap;
use subtle::ConstantTimeEq;

use super::keys::{digest, parse_hash};
use crate::config::auth::{Cidr, MetricsAccess};
use crate::config::AdminConfig;
use crate::error::{Code, ErrorKind, GatewayError};

/// The admin access check.
#[derive(Debug, Clone, Default)]
pub struct AdminGuard {
    hashes: Vec<[u8; 32]>,
    metrics: MetricsAccess,
}

fn refused() -> GatewayError {
    GatewayError::new(
        ErrorKind::Unauthenticated,
        "admin credentials are required; send `Authorization: Bearer <admin key>`",
    )
    .with_code(Code::InvalidApiKey)
}

impl AdminGuard {
    /// The guard for `cfg`.
    pub fn new(cfg: &AdminConfig) -> AdminGuard {
        AdminGuard {
            hashes: cfg.keys.iter().filter_map(|h| parse_hash(h)).collect(),
            metrics: cfg.metrics.clone(),
        }
    }

    /// Whether `/admin/*` is open to anyone (no admin keys configured).
    pub fn is_open(&self) -> bool {
        self.hashes.is_empty()
    }

    fn has_key(&self, headers: &HeaderMap) -> bool {
        let Some(token) = headers
            .get(http::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().split_once([' ', '\t']))
            .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
            .map(|(_, t)| t.trim())
            .filter(|t| !t.is_empty() && t.len() <= super::MAX_CREDENTIAL_BYTES)
        else {
            return false;
        };
        let d = digest(token);
        // Every hash is compared, so the time taken does not depend on which matched.
        self.hashes
            .iter()
            .fold(subtle::Choice::from(0), |acc, h| acc | h.ct_eq(&d))
            .into()
    }

    /// Checks a request for `/admin/*`.
    ///
    /// # Errors
    /// 401 without a valid admin key (when admin keys are configured).
    pub fn check_admin(&self, headers: &HeaderMap) -> Result<(), GatewayError> {
        if self.is_open() || self.has_key(headers) {
            Ok(())
        } else {
            Err(refused())
        }
    }

    /// Checks a request for `/metrics` from `peer`.
    ///
    /// # Errors
    /// 403 from an address outside `metrics.allow`; 401 without an admin key when
    /// `metrics.key_required`.
    pub fn check_metrics(&self, peer: IpAddr, headers: &HeaderMap) -> Result<(), GatewayError> {
        if !self.metrics.allow.is_empty()
            && !self.metrics.allow.iter().any(|c: &Cidr| c.contains(peer))
        {
            return Err(GatewayError::new(
                ErrorKind::PermissionDenied,
                "metrics are not served to this address",
            ));
        }
        if self.metrics.key_required && !self.has_key(headers) {
            return Err(refused());
        }
        Ok(())
    }
}
