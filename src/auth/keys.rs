//! API keys: a set of [`KeyEntry`] looked up by the SHA-256 of the presented secret.
//!
//! Only hashes are stored. A request's secret is hashed once and looked up by its
//! digest; the digest found is then compared with the stored one in constant time
//! (`subtle`). A lookup keyed on a SHA-256 digest leaks, through its timing, only
//! facts about digests, which an attacker cannot steer towards a stored one without
//! a preimage; the final comparison does not depend on where two digests differ.
//!
//! Hashing a secret was about 2,500 instructions of each request (2% of a proxied
//! JSON request, `benches/load/callgrind.sh`), for the same few secrets over and
//! over. Each serving thread remembers the digests of the last [`RECENT_SECRETS`]
//! secrets that matched a key (`Recent`), each under a 128-bit tag of the secret
//! (SipHash-1-3 under two keys drawn at random for the thread, a keyed function an
//! attacker cannot steer a guess towards without the keys); the secret itself is
//! not kept, so memory holds no more of a key than before: its digest. A tag is
//! compared in constant time. Only the digest is remembered, not the key it
//! matched: the lookup by digest and its constant-time check run as before, against
//! the set in force, so a key revoked or removed by a reload is refused at once.

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
    by_digest: foldhash::HashMap<[u8; 32], Arc<StoredKey>>,
}

/// A key entry as the set keeps it: the entry, and its id and organization shared,
/// so that a request's principal, caller, policy features, rate-limit permit and
/// access line each hold the key's id by a count, not a copy (issue 17: two
/// allocations per request and place, about ten in all).
#[derive(Debug)]
pub struct StoredKey {
    /// The configured entry.
    pub entry: KeyEntry,
    /// `entry.id`, shared.
    pub id: Arc<str>,
    /// `entry.org`, shared.
    pub org: Option<Arc<str>>,
}

impl std::ops::Deref for StoredKey {
    type Target = KeyEntry;

    fn deref(&self) -> &KeyEntry {
        &self.entry
    }
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

/// SHA-256 of `secret`, from this thread's remembered digests (`Recent`) when
/// `secret` is among them, else computed and remembered. For `mode: none`, whose
/// key ids hash whatever a caller presents ([`super::key_id`]): the same few
/// secrets on every request, each hashed once per serving thread. A stream of
/// new secrets only cycles the thread's [`RECENT_SECRETS`] slots.
pub fn digest_remembered(secret: &str) -> [u8; 32] {
    if let Some(d) = RECENT.with(|r| r.borrow().digest(secret)) {
        return d;
    }
    let d = digest(secret);
    RECENT.with(|r| r.borrow_mut().remember(secret, d));
    d
}

/// Appends the lowercase hexadecimal digits of `bytes` to `out`, two per byte.
pub fn push_hex(out: &mut String, bytes: &[u8]) {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    for &b in bytes {
        out.push(char::from(DIGITS[usize::from(b >> 4)]));
        out.push(char::from(DIGITS[usize::from(b & 0xf)]));
    }
}

/// `sha256:<hex>` of `secret`, as key entries store it.
pub fn hash_secret(secret: &str) -> String {
    let mut s = String::with_capacity(71);
    s.push_str("sha256:");
    push_hex(&mut s, &digest(secret));
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
                by_digest.insert(
                    d,
                    Arc::new(StoredKey {
                        entry: k.clone(),
                        id: Arc::from(k.id.as_str()),
                        org: k.org.as_deref().map(Arc::from),
                    }),
                );
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
    pub fn find(&self, secret: &str) -> Option<&Arc<StoredKey>> {
        let remembered = RECENT.with(|r| r.borrow().digest(secret));
        let d = remembered.unwrap_or_else(|| digest(secret));
        let (stored, entry) = self.by_digest.get_key_value(&d)?;
        let found = bool::from(stored.ct_eq(&d)).then_some(entry);
        if found.is_some() && remembered.is_none() {
            RECENT.with(|r| r.borrow_mut().remember(secret, d));
        }
        found
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

/// Most secrets whose digests a thread remembers (32); one more replaces the one
/// remembered longest ago.
pub const RECENT_SECRETS: usize = 32;

thread_local! {
    /// This thread's remembered digests (see the module documentation).
    static RECENT: std::cell::RefCell<Recent> = std::cell::RefCell::new(Recent::default());
}

/// The SHA-256 digests of the last secrets that matched a key on this thread (or,
/// in `mode: none`, that were presented: [`digest_remembered`]), each under a
/// 128-bit keyed tag of its secret. The secrets themselves are not kept.
#[derive(Default)]
struct Recent {
    /// Two SipHash-1-3 keys drawn at random for this thread (`RandomState`), one
    /// per half of a tag.
    keys: [std::hash::RandomState; 2],
    slots: Vec<Remembered>,
    /// The slot the next new secret takes once all are in use.
    next: usize,
}

/// One remembered secret: its tag and its digest.
struct Remembered {
    tag: [u8; 16],
    digest: [u8; 32],
}

impl Recent {
    /// The secret's 128-bit tag: SipHash-1-3 of it under each of the thread's keys.
    fn tag(&self, secret: &[u8]) -> [u8; 16] {
        let [a, b] = self
            .keys
            .each_ref()
            .map(|k| std::hash::BuildHasher::hash_one(k, secret));
        let mut tag = [0u8; 16];
        tag[..8].copy_from_slice(&a.to_le_bytes());
        tag[8..].copy_from_slice(&b.to_le_bytes());
        tag
    }

    /// The digest of `secret`, if it is remembered: a slot whose first tag half
    /// matches is checked on the whole tag in constant time.
    fn digest(&self, secret: &str) -> Option<[u8; 32]> {
        if self.slots.is_empty() {
            return None;
        }
        let tag = self.tag(secret.as_bytes());
        self.slots
            .iter()
            .find(|s| s.tag[..8] == tag[..8] && bool::from(s.tag.ct_eq(&tag)))
            .map(|s| s.digest)
    }

    /// Remembers that `secret` hashes to `digest`.
    fn remember(&mut self, secret: &str, digest: [u8; 32]) {
        let slot = Remembered {
            tag: self.tag(secret.as_bytes()),
            digest,
        };
        if self.slots.len() < RECENT_SECRETS {
            self.slots.push(slot);
        } else {
            self.slots[self.next] = slot;
            self.next = (self.next + 1) % RECENT_SECRETS;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_are_found_by_their_hash_only() {
        let s = new_secret();
        assert!(s.starts_with("sy-") && s.len() == 3 + 43, "{s}");
        let set = KeySet::new(&[entry("key-a", &s, false)]);
        assert_eq!(set.find(&s).map(|e| &*e.id), Some("key-a"));
        assert!(set.find("sy-other").is_none());
        assert_eq!(parse_hash(&hash_secret("x")), Some(digest("x")));
        assert_eq!(parse_hash("sha256:zz"), None);
    }

    fn entry(id: &str, secret: &str, revoked: bool) -> KeyEntry {
        KeyEntry {
            id: id.into(),
            hash: hash_secret(secret),
            org: None,
            models: None,
            providers: None,
            priority: Default::default(),
            max_priority: None,
            metadata: Default::default(),
            revoked,
            limits: None,
            budget: None,
        }
    }

    fn remembered(secret: &str) -> Option<[u8; 32]> {
        RECENT.with(|r| r.borrow().digest(secret))
    }

    #[test]
    fn a_matched_secret_is_remembered_and_found_again_against_the_set_in_force() {
        // A thread of its own: the remembered digests are the thread's.
        std::thread::spawn(|| {
            let (a, b) = (new_secret(), new_secret());
            let set = KeySet::new(&[entry("key-a", &a, false), entry("key-b", &b, false)]);
            assert_eq!(remembered(&a), None);
            assert_eq!(set.find(&a).map(|e| &*e.id), Some("key-a"));
            assert_eq!(remembered(&a), Some(digest(&a)));
            assert_eq!(set.find(&a).map(|e| &*e.id), Some("key-a"));
            // A guess is never remembered, and the same length or a one-byte
            // difference from a remembered secret finds nothing.
            let mut near = a.clone().into_bytes();
            *near.last_mut().unwrap() ^= 1;
            let near = String::from_utf8(near).unwrap();
            assert!(set.find(&near).is_none());
            assert_eq!(remembered(&near), None);
            assert_eq!(remembered(&b), None, "not matched yet");
            // After a reload: a removed key is not found, a revoked one is found
            // revoked (the caller refuses it), though both digests are remembered.
            assert_eq!(set.find(&b).map(|e| &*e.id), Some("key-b"));
            let reloaded = KeySet::new(&[entry("key-b", &b, true)]);
            assert!(reloaded.find(&a).is_none());
            assert!(reloaded.find(&b).is_some_and(|e| e.revoked));
            // Past RECENT_SECRETS the oldest is forgotten, and still found by its hash.
            let many: Vec<String> = (0..RECENT_SECRETS).map(|_| new_secret()).collect();
            let entries: Vec<KeyEntry> = many
                .iter()
                .enumerate()
                .map(|(i, s)| entry(&format!("k{i}"), s, false))
                .chain([entry("key-a", &a, false)])
                .collect();
            let big = KeySet::new(&entries);
            for s in &many {
                assert!(big.find(s).is_some());
            }
            assert_eq!(remembered(&a), None, "replaced");
            assert_eq!(big.find(&a).map(|e| &*e.id), Some("key-a"));
            assert_eq!(remembered(&a), Some(digest(&a)));
        })
        .join()
        .unwrap();
    }

    #[test]
    fn a_remembered_digest_is_the_sha256_and_hex_is_lowercase() {
        std::thread::spawn(|| {
            // FIPS 180-2, appendix B.1: SHA-256 of "abc".
            let abc = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad";
            assert_eq!(remembered("abc"), None);
            let first = digest_remembered("abc");
            assert_eq!(remembered("abc"), Some(first));
            assert_eq!(digest_remembered("abc"), first);
            let mut hex = String::new();
            push_hex(&mut hex, &first);
            assert_eq!(hex, abc);
            assert_eq!(hash_secret("abc"), format!("sha256:{abc}"));
            assert_eq!(crate::auth::key_id("abc"), "key-ba7816bf8f01cfea");
            let mut all = String::new();
            push_hex(&mut all, &[0x00, 0x0f, 0xa0, 0xff]);
            assert_eq!(all, "000fa0ff");
        })
        .join()
        .unwrap();
    }

    #[test]
    fn a_tag_must_match_whole_and_no_secret_is_kept() {
        // A slot whose tag matches another secret's in its first half only (forced
        // here) does not hand its digest to that secret; the whole tag does.
        let mut r = Recent::default();
        r.remember("sy-one", digest("sy-one"));
        let two = r.tag(b"sy-two");
        r.slots[0].tag[..8].copy_from_slice(&two[..8]);
        assert_eq!(r.digest("sy-two"), None);
        assert_eq!(r.digest("sy-one"), None, "its own tag no longer matches");
        r.slots[0].tag = two;
        assert_eq!(
            r.digest("sy-two"),
            Some(digest("sy-one")),
            "the tag is the key"
        );
        // Tags of different secrets differ, and a thread's keys are its own.
        assert_ne!(r.tag(b"sy-one"), r.tag(b"sy-onf"));
        assert_ne!(r.tag(b"sy-one"), Recent::default().tag(b"sy-one"));
        // A slot is a tag and a digest: the secret's bytes are not in it.
        assert_eq!(
            std::mem::size_of::<Remembered>(),
            48,
            "a slot holds a 16-byte tag and a 32-byte digest only"
        );
        // Secrets of any length, empty included, are remembered by their tag.
        for s in ["", "x", &"y".repeat(4096), "sy-\u{e9}t\u{e9}"] {
            r.remember(s, digest(s));
            assert_eq!(r.digest(s), Some(digest(s)), "{}", s.len());
        }
    }
}
