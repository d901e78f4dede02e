//! L2: entries in Redis, shared by every instance pointing at it (issue 14, item 4;
//! seed 001, "Cache Storage"). Needs Redis ≥ 7.0 (`PEXPIRE … NX|GT`).
//!
//! Keys (`ns` = `Settings::namespace`, hex is lowercase, ids and scopes 32 digits):
//! - `{ns}:e:{scope}{id}`: one entry, a string with TTL (`PX`): version byte `1`, an
//!   exact flag byte, the SimHash (16 bytes LE), the text length (4 bytes LE), the
//!   normalized text (raw for an exact key), then the payload.
//! - `{ns}:z:{scope}:{band}:{value}` (band 0–3, value 8 hex digits): a sorted set of
//!   the entries in that bucket, each member id (16 bytes LE) + SimHash (16 bytes
//!   LE), so candidates are filtered by distance before their entries are read, with
//!   its entry's expiry (Unix milliseconds) as score. A store drops the members that
//!   have expired (`ZREMRANGEBYSCORE`) and a lookup reads only live ones, so a bucket
//!   holds the live entries of its scope, however long it keeps being written to
//!   (a plain set only grew: its TTL, the longest of its members', was pushed on by
//!   every store). The set's own TTL is the longest of its members' (`PEXPIRE NX`
//!   then `PEXPIRE GT`). A member whose entry went first (an expiry a few
//!   milliseconds apart, another instance's clock) reads as a missing entry and is
//!   skipped.
//!
//! A lookup is at most two pipelined round trips: the exact entry plus the band sets
//! (for τ > 3 also the one-bit neighbours of each band, as in L1's index), then the
//! closest [`MAX_CANDIDATES`] candidates' entries and TTLs. A store is one pipeline.
//!
//! Every call (connecting included) runs under `Settings::redis_timeout`. A failure
//! or timeout is returned as an error (the cache counts it and misses), and starts a
//! [`BACKOFF`] during which calls are not attempted, so a dead Redis costs one
//! deadline per back-off period, not one per request. The connection is the `redis`
//! crate's `ConnectionManager` (one multiplexed connection, reconnecting by itself),
//! opened on first use as in `limits::redis`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::Value;

use super::index::MAX_CANDIDATES;
use super::Key;

/// How long L2 is left alone after a failed call.
pub const BACKOFF: Duration = Duration::from_secs(1);

/// An entry read from L2.
#[derive(Debug)]
pub struct Found {
    /// The entry's id within its scope.
    pub id: u128,
    /// The entry's SimHash.
    pub simhash: u128,
    /// Stored under an exact key.
    pub exact: bool,
    /// Its normalized (exact: raw) text.
    pub text: Box<str>,
    /// The payload.
    pub payload: Bytes,
    /// Time it has left in Redis.
    pub ttl: Duration,
    /// `None`: the text is identical to the query's; else the Hamming distance.
    pub distance: Option<u32>,
}

/// Why an L2 call gave nothing.
#[derive(Debug)]
pub enum L2Error {
    /// Within [`BACKOFF`] of a failure: not attempted (not counted as an error).
    BackingOff,
    /// The deadline passed.
    Timeout,
    /// Redis or the connection failed, or a reply had an unexpected shape.
    Failed(String),
}

/// The L2 tier.
#[derive(Debug)]
pub struct L2 {
    client: redis::Client,
    conn: tokio::sync::OnceCell<ConnectionManager>,
    timeout: Duration,
    ns: String,
    epoch: Instant,
    /// Milliseconds since `epoch` until which calls are not attempted.
    down_until_ms: AtomicU64,
}

fn entry_key(ns: &str, scope: u128, id: u128) -> String {
    format!("{ns}:e:{scope:032x}{id:032x}")
}

fn band_key(ns: &str, scope: u128, b: usize, value: u32) -> String {
    format!("{ns}:z:{scope:032x}:{b}:{value:08x}")
}

/// Now, Unix milliseconds (the clock band members' expiries are written in).
fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

fn encode(exact: bool, simhash: u128, text: &str, payload: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(22 + text.len() + payload.len());
    v.push(1);
    v.push(u8::from(exact));
    v.extend_from_slice(&simhash.to_le_bytes());
    v.extend_from_slice(&u32::try_from(text.len()).unwrap_or(u32::MAX).to_le_bytes());
    v.extend_from_slice(text.as_bytes());
    v.extend_from_slice(payload);
    v
}

/// (exact, simhash, text, payload) of a stored entry; `None` if malformed.
fn decode(blob: Vec<u8>) -> Option<(bool, u128, Box<str>, Bytes)> {
    if blob.len() < 22 || blob[0] != 1 {
        return None;
    }
    let exact = blob[1] == 1;
    let simhash = u128::from_le_bytes(blob[2..18].try_into().ok()?);
    let n = u32::from_le_bytes(blob[18..22].try_into().ok()?) as usize;
    let text = std::str::from_utf8(blob.get(22..22 + n)?).ok()?.into();
    let payload = Bytes::from(blob).slice(22 + n..);
    Some((exact, simhash, text, payload))
}

fn member(id: u128, simhash: u128) -> [u8; 32] {
    let mut m = [0u8; 32];
    m[..16].copy_from_slice(&id.to_le_bytes());
    m[16..].copy_from_slice(&simhash.to_le_bytes());
    m
}

fn items(v: Value) -> Vec<Value> {
    match v {
        Value::Array(a) | Value::Set(a) => a,
        _ => Vec::new(),
    }
}

fn blob(v: Value) -> Option<Vec<u8>> {
    match v {
        Value::BulkString(b) => Some(b),
        _ => None,
    }
}

fn ttl(v: &Value) -> Option<Duration> {
    match v {
        Value::Int(ms) if *ms > 0 => Some(Duration::from_millis(*ms as u64)),
        _ => None,
    }
}

impl L2 {
    /// An L2 on `url`; makes no network call.
    ///
    /// # Errors
    /// `url` is not a Redis URL.
    pub fn new(url: &str, timeout: Duration, ns: &str) -> Result<L2, String> {
        let client =
            redis::Client::open(url).map_err(|e| format!("cache redis URL {url:?}: {e}"))?;
        Ok(L2 {
            client,
            conn: tokio::sync::OnceCell::new(),
            timeout,
            ns: ns.to_string(),
            epoch: Instant::now(),
            down_until_ms: AtomicU64::new(0),
        })
    }

    async fn conn(&self) -> Result<ConnectionManager, L2Error> {
        self.conn
            .get_or_try_init(|| async {
                let cfg = ConnectionManagerConfig::new()
                    .set_connection_timeout(Some(self.timeout))
                    .set_response_timeout(Some(self.timeout))
                    .set_number_of_retries(1);
                ConnectionManager::new_with_config(self.client.clone(), cfg)
                    .await
                    .map_err(|e| L2Error::Failed(e.to_string()))
            })
            .await
            .cloned()
    }

    fn now_ms(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// Runs `call` under the deadline and the back-off rule (module docs).
    async fn guarded<T>(
        &self,
        call: impl std::future::Future<Output = Result<T, L2Error>>,
    ) -> Result<T, L2Error> {
        if self.now_ms() < self.down_until_ms.load(Ordering::Relaxed) {
            return Err(L2Error::BackingOff);
        }
        let r = match tokio::time::timeout(self.timeout, call).await {
            Ok(r) => r,
            Err(_) => Err(L2Error::Timeout),
        };
        if r.is_err() {
            let until = self.now_ms() + u64::try_from(BACKOFF.as_millis()).unwrap_or(1000);
            self.down_until_ms.store(until, Ordering::Relaxed);
        }
        r
    }

    /// The entry for `key`: the identical text if stored, else the closest verified
    /// candidate within `tau` (`verify(stored_text, query_text)`).
    pub async fn get(
        &self,
        key: &Key,
        tau: u32,
        verify: impl Fn(&str, &str) -> bool,
    ) -> Result<Option<Found>, L2Error> {
        self.guarded(self.lookup(key, tau, verify)).await
    }

    async fn lookup(
        &self,
        key: &Key,
        tau: u32,
        verify: impl Fn(&str, &str) -> bool,
    ) -> Result<Option<Found>, L2Error> {
        let mut conn = self.conn().await?;
        let fail = |e: redis::RedisError| L2Error::Failed(e.to_string());
        let mut p = redis::pipe();
        let exact_key = entry_key(&self.ns, key.scope, key.id);
        p.cmd("GET").arg(&exact_key).cmd("PTTL").arg(&exact_key);
        if !key.exact {
            let now = unix_ms();
            let flips = if tau > 3 { 32 } else { 0 };
            for b in 0..4 {
                let value = (key.simhash >> (32 * b)) as u32;
                for f in 0..=flips {
                    let v = if f == 0 {
                        value
                    } else {
                        value ^ (1 << (f - 1))
                    };
                    p.cmd("ZRANGE")
                        .arg(band_key(&self.ns, key.scope, b, v))
                        .arg(now)
                        .arg("+inf")
                        .arg("BYSCORE");
                }
            }
        }
        let mut replies = p
            .query_async::<Vec<Value>>(&mut conn)
            .await
            .map_err(fail)?
            .into_iter();
        let (first, first_ttl) = (replies.next(), replies.next());
        if let (Some(b), Some(t)) = (first.and_then(blob), first_ttl.as_ref().and_then(ttl)) {
            if let Some((exact, simhash, text, payload)) = decode(b) {
                if exact == key.exact && *text == *key.normalized {
                    return Ok(Some(Found {
                        id: key.id,
                        simhash,
                        exact,
                        text,
                        payload,
                        ttl: t,
                        distance: None,
                    }));
                }
            }
        }
        if key.exact {
            return Ok(None);
        }
        let mut cands: Vec<(u32, u128)> = Vec::new();
        for set in replies {
            for m in items(set) {
                let Some(m) = blob(m) else { continue };
                let (Ok(id), Ok(sh)) = (
                    <[u8; 16]>::try_from(&m[..m.len().min(16)]),
                    <[u8; 16]>::try_from(m.get(16..).unwrap_or(&[])),
                ) else {
                    continue;
                };
                let (id, sh) = (u128::from_le_bytes(id), u128::from_le_bytes(sh));
                let d = (sh ^ key.simhash).count_ones();
                if d <= tau && id != key.id && !cands.iter().any(|c| c.1 == id) {
                    cands.push((d, id));
                }
            }
        }
        if cands.is_empty() {
            return Ok(None);
        }
        cands.sort_unstable_by_key(|c| c.0);
        cands.truncate(MAX_CANDIDATES);
        let mut p = redis::pipe();
        for (_, id) in &cands {
            let k = entry_key(&self.ns, key.scope, *id);
            p.cmd("GET").arg(&k).cmd("PTTL").arg(&k);
        }
        let mut replies = p
            .query_async::<Vec<Value>>(&mut conn)
            .await
            .map_err(fail)?
            .into_iter();
        for (d, id) in cands {
            let (b, t) = (replies.next(), replies.next());
            let (Some(b), Some(t)) = (b.and_then(blob), t.as_ref().and_then(ttl)) else {
                continue;
            };
            let Some((exact, simhash, text, payload)) = decode(b) else {
                continue;
            };
            if !exact && verify(&text, &key.normalized) {
                return Ok(Some(Found {
                    id,
                    simhash,
                    exact,
                    text,
                    payload,
                    ttl: t,
                    distance: Some(d),
                }));
            }
        }
        Ok(None)
    }

    /// Stores `payload` under `key` for `ttl` (at least 1 ms).
    pub async fn put(&self, key: &Key, payload: &[u8], ttl: Duration) -> Result<(), L2Error> {
        let ms = u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX).max(1);
        let blob = encode(key.exact, key.simhash, &key.normalized, payload);
        let call = async {
            let mut conn = self.conn().await?;
            let mut p = redis::pipe();
            p.cmd("SET")
                .arg(entry_key(&self.ns, key.scope, key.id))
                .arg(blob)
                .arg("PX")
                .arg(ms)
                .ignore();
            if !key.exact {
                let m = member(key.id, key.simhash);
                let now = unix_ms();
                for b in 0..4 {
                    let k = band_key(&self.ns, key.scope, b, (key.simhash >> (32 * b)) as u32);
                    p.cmd("ZADD")
                        .arg(&k)
                        .arg(now.saturating_add(ms))
                        .arg(&m[..])
                        .ignore();
                    p.cmd("ZREMRANGEBYSCORE")
                        .arg(&k)
                        .arg("-inf")
                        .arg(format!("({now}"))
                        .ignore();
                    p.cmd("PEXPIRE").arg(&k).arg(ms).arg("NX").ignore();
                    p.cmd("PEXPIRE").arg(&k).arg(ms).arg("GT").ignore();
                }
            }
            p.query_async::<()>(&mut conn)
                .await
                .map_err(|e| L2Error::Failed(e.to_string()))
        };
        self.guarded(call).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_round_trip_and_reject_garbage() {
        let b = encode(false, 42, "hello world", b"{\"x\":1}");
        let (exact, sh, text, payload) = decode(b).unwrap();
        assert!(!exact);
        assert_eq!(sh, 42);
        assert_eq!(&*text, "hello world");
        assert_eq!(&payload[..], b"{\"x\":1}");
        assert!(decode(vec![1, 0, 0]).is_none());
        let mut bad = encode(true, 1, "abc", b"");
        bad[18] = 200;
        assert!(decode(bad).is_none());
    }
}
