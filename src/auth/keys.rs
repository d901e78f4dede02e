//! API keys: a set of [`KeyEntry`] looked up by the SHA-256 of the presented secret.
//!
//! Only hashes are stored. A request's secret is hashed once and looked up by its
//! digest; the digest found is then compared with the stored one in constant time
//! (`subtle`). A lookup keyed on a SHA-256 digest leaks, through its timing, only
//! facts about digests, which an attacker cannot steer towards a stored one without
//! a preimage; the final comparison does not depend on where two digests differ.

use std::path::Path;
use std::sync::Arc;

use base64::Engine as _;
use subtle::ConstantTimeEq;

use crate::config::auth::read_key_file;
use crate::config::KeyEntry;

/// Prefix of secrets made by `switchyard keys create`.
pub const SECRET_PREFIX: &str = "sy-";

/// Keys by the digest of their secret.
#[derive(Debug, Default)]
pub struct KeySet {
    /// By the SHA-256 of the key; foldhash (randomly seeded) rather than SipHash:
    /// the digest of a caller's key is not a value the caller can choose.
    by_digest: foldhash::HashMap<[u8; 32], Arc<KeyEntry>>,
}

/// The 32 bytes of a `sha256:<hex>` hash (`None` when malformed).
pub fn parse_hash(h: &str) -> Option<[u8; 32]> {
    let hex = h.strip_prefix("sha256:")?;
    if hex.len() != 64 {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, o) in out.iter_mut().enumerate() {
        *o = u8::from_str_radix(hex.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(out)
}

/// SHA-256 of `secret`.
pub fn digest(secret: &str) -> [u8; 32] {
    let d = ring::digest::digest(&ring::digest::SHA256, secret.as_bytes());
    let mut out = [0u8; 32];
    out.copy_from_slice(d.as_ref());
    out
}

/// `sha256:<hex>` of `secret`, as key entries store it.
pub fn hash_secret(secret: &str) -> String {
    use std::fmt::Write;
    let mut s = String::with_capacity(71);
    s.push_str("sha256:");
    for b in digest(secret) {
        let _ = write!(s, "{b:02x}");
    }
    s
}

/// A new secret: [`SECRET_PREFIX`] and 32 random bytes, base64url without padding.
pub fn new_secret() -> String {
    let bytes: [u8; 32] = rand::random();
    format!(
        "{SECRET_PREFIX}{}",
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
    )
}

impl KeySet {
    /// The set of `keys` (entries with a malformed hash are left out; the config
    /// check refuses them before this).
    pub fn new(keys: &[KeyEntry]) -> KeySet {
        let mut by_digest =
            foldhash::HashMap::with_capacity_and_hasher(keys.len(), Default::default());
        for k in keys {
            if let Some(d) = parse_hash(&k.hash) {
                by_digest.insert(d, Arc::new(k.clone()));
            }
        }
        KeySet { by_digest }
    }

    /// Reads a key file into a set.
    ///
    /// # Errors
    /// One sentence per problem.
    pub fn read(path: &Path) -> Result<KeySet, Vec<String>> {
        read_key_file(path).map(|k| KeySet::new(&k))
    }

    /// The entry whose secret is `secret` (revoked entries included: the caller
    /// decides).
    pub fn find(&self, secret: &str) -> Option<&Arc<KeyEntry>> {
        let d = digest(secret);
        let (stored, entry) = self.by_digest.get_key_value(&d)?;
        bool::from(stored.ct_eq(&d)).then_some(entry)
    }

    /// Number of keys.
    pub fn len(&self) -> usize {
        self.by_digest.len()
    }

    /// Whether the set has no keys.
    pub fn is_empty(&self) -> bool {
        self.by_digest.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_are_found_by_their_hash_only() {
        let s = new_secret();
        assert!(s.starts_with("sy-") && s.len() == 3 + 43, "{s}");
        let entry = KeyEntry {
            id: "key-a".into(),
            hash: hash_secret(&s),
            org: None,
            models: None,
            providers: None,
            priority: Default::default(),
            max_priority: None,
            metadata: Default::default(),
            revoked: false,
            limits: None,
            budget: None,
        };
        let set = KeySet::new(&[entry]);
        assert_eq!(set.find(&s).map(|e| e.id.as_str()), Some("key-a"));
        assert!(set.find("sy-other").is_none());
        assert_eq!(parse_hash(&hash_secret("x")), Some(digest("x")));
        assert_eq!(parse_hash("sha256:zz"), None);
    }
}
