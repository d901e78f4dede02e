//! Tool `parameters` as JSON Schema draft 2020-12 (the `jsonschema` crate), with a
//! bounded cache of results per distinct schema.
//!
//! A schema is valid when it passes the 2020-12 meta-schema and then compiles,
//! which resolves every `$ref` (including recursive ones through `$defs`) within the
//! document. The crate is built without its HTTP and file resolvers, so a remote
//! `$ref` fails to resolve instead of being fetched. Unknown keywords are allowed
//! (draft 2020-12 ignores them).
//!
//! Clients send the same tool list on every turn, so results are cached by a
//! 128-bit XXH3 hash of the schema's JSON tree (object keys in sorted order, as
//! `serde_json` keeps them, so byte-different spellings of one schema share an
//! entry): a repeated schema costs one walk of its tree and one cache lookup, not
//! a meta-validation and compile. The cache holds at most [`CACHE_ENTRIES`] results
//! (moka's TinyLFU eviction), invalid ones included.

use std::sync::{Arc, OnceLock};

use serde_json::Value;
use xxhash_rust::xxh3::Xxh3;

/// Most cached schema results.
pub const CACHE_ENTRIES: u64 = 4096;

/// `None` for a valid schema, else why it is not.
type Verdict = Option<Arc<str>>;

fn cache() -> &'static moka::sync::Cache<u128, Verdict> {
    static CACHE: OnceLock<moka::sync::Cache<u128, Verdict>> = OnceLock::new();
    CACHE.get_or_init(|| moka::sync::Cache::new(CACHE_ENTRIES))
}

/// Checks `schema` as a draft 2020-12 document: `None` when valid, else a sentence
/// naming where in the schema (a JSON pointer) and what is wrong.
pub fn check(schema: &Value) -> Option<Arc<str>> {
    let key = hash(schema);
    if let Some(v) = cache().get(&key) {
        return v;
    }
    let verdict = check_uncached(schema);
    cache().insert(key, verdict.clone());
    verdict
}

/// [`check`] without the cache (what it caches).
pub fn check_uncached(schema: &Value) -> Verdict {
    if let Err(e) = jsonschema::draft202012::meta::validate(schema) {
        let at = e.instance_path().to_string();
        let at = if at.is_empty() { "/".to_string() } else { at };
        return Some(format!("at `{at}`: {}", bounded_error(&e.to_string())).into());
    }
    match jsonschema::draft202012::options().build(schema) {
        Ok(_) => None,
        Err(e) => Some(format!("it does not compile: {}", bounded_error(&e.to_string())).into()),
    }
}

/// The crate's messages quote the offending value, which may be large.
fn bounded_error(s: &str) -> String {
    crate::error::bounded(s, 300).to_string()
}

/// XXH3-128 of the JSON tree of `v` (type-tagged, length-prefixed).
pub fn hash(v: &Value) -> u128 {
    let mut h = Xxh3::new();
    feed(&mut h, v);
    h.digest128()
}

fn feed(h: &mut Xxh3, v: &Value) {
    match v {
        Value::Null => h.update(b"n"),
        Value::Bool(b) => h.update(if *b { b"t" } else { b"f" }),
        Value::Number(n) => {
            if let Some(u) = n.as_u64() {
                h.update(b"u");
                h.update(&u.to_le_bytes());
            } else if let Some(i) = n.as_i64() {
                h.update(b"i");
                h.update(&i.to_le_bytes());
            } else {
                h.update(b"d");
                h.update(&n.as_f64().unwrap_or(f64::NAN).to_bits().to_le_bytes());
            }
        }
        Value::String(s) => {
            h.update(b"s");
            h.update(&(s.len() as u64).to_le_bytes());
            h.update(s.as_bytes());
        }
        Value::Array(a) => {
            h.update(b"a");
            h.update(&(a.len() as u64).to_le_bytes());
            for x in a {
                feed(h, x);
            }
        }
        Value::Object(m) => {
            h.update(b"o");
            h.update(&(m.len() as u64).to_le_bytes());
            for (k, x) in m {
                h.update(&(k.len() as u64).to_le_bytes());
                h.update(k.as_bytes());
                feed(h, x);
            }
        }
    }
}
