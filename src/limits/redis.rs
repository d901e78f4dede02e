//! Limit buckets and spend in Redis, shared by every instance that points at it.
//!
//! One admission is one round trip: a Lua script ([`ADMIT`], sent with EVALSHA and
//! loaded on `NOSCRIPT` by the `redis` crate's `Script`) reads every budget's spend,
//! refills every bucket from Redis's own clock (`TIME`, so instances need no clock
//! agreement), and charges all buckets only if all have room. Settling is a second
//! script, sent in the background when the answer ends.
//!
//! Keys: `sy:{sy}:rl:<level>:<id>:<rpm|tpm>` (a hash of level `l` in 1/60,000
//! units and last update `t` in ms, expiring once it would be full again) and
//! `sy:{sy}:spend:<k|o>:<id>:<dYYYYMMDD|mYYYYMM>` (a float of USD, expiring after its
//! period), and beside each spend key `sy:{sy}:held:...` (the USD reserved by
//! requests in flight: added at admission, taken off when they settle; kept apart
//! from the spend, so that neither a huge reservation's float rounding nor a Redis
//! that lost keys meanwhile can change the spend). Every key carries the one hash tag `{sy}`, so a script that touches the
//! global, key and org buckets of a request is valid on Redis Cluster (all its keys
//! are in one slot). The trade-off: all limiter traffic goes to the shard owning that
//! slot. Splitting the tag per key would spread the load but make the global bucket
//! a separate, non-atomic call.
//!
//! Every call is bounded by `state.timeout_ms` (`tokio::time::timeout` over getting
//! the connection and running the script). The connection is the crate's
//! `ConnectionManager`: one multiplexed connection shared by all requests (pipelined,
//! no pool to size), reconnecting by itself after Redis comes back.

use std::sync::Arc;
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::Script;

use super::{Checked, Need, View};
use crate::config::Budget;

/// Key prefix with the hash tag shared by all limiter keys.
pub const PREFIX: &str = "sy:{sy}:";

/// Lifetime of a day's spend key, seconds: two days, so a request admitted late in
/// the day settles into its day's key.
const DAY_KEY_TTL_SECS: u64 = 2 * 86_400;
/// Lifetime of a month's spend key, seconds (32 days).
const MONTH_KEY_TTL_SECS: u64 = 32 * 86_400;

/// The admission script. KEYS: spend keys (`ARGV[1]` of them), then as many
/// reservation keys (one per spend key, same period), then bucket keys. ARGV: the
/// spend key count, each spend key's limit, then per bucket `per_min`, capacity
/// and cost (units), then the USD to reserve (added to every reservation key when
/// admitted) and each reservation key's TTL in seconds. A budget is spent when its
/// spend and reservations reach its limit. Returns `{1, 0, 0, levels.., full_ms..,
/// [left]}` (admitted), `{0, wait_ms or -1, blame, levels.., full_ms.., [left]}` (no
/// room), `{2, index, spent, reserved}` (over budget); `left`, present when a budget
/// applies, is the least USD left among them (USD as strings: Lua numbers become
/// integers in replies).
pub const ADMIT: &str = r#"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local nb = tonumber(ARGV[1])
local left = nil
for i = 1, nb do
  local spent = tonumber(redis.call('GET', KEYS[i]) or '0') or 0
  local held = math.max(0, tonumber(redis.call('GET', KEYS[nb + i]) or '0') or 0)
  local limit = tonumber(ARGV[1 + i])
  if spent + held >= limit then return {2, i - 1, tostring(spent), tostring(held)} end
  if left == nil or limit - spent - held < left then left = limit - spent - held end
end
local base = 1 + nb
local nk = #KEYS - 2 * nb
local levels, rates, caps, costs = {}, {}, {}, {}
local wait, blame = 0, 0
for j = 1, nk do
  local k = KEYS[2 * nb + j]
  local rate = tonumber(ARGV[base + 3 * j - 2])
  local cap = tonumber(ARGV[base + 3 * j - 1]) * 60000
  local cost = tonumber(ARGV[base + 3 * j]) * 60000
  local h = redis.call('HMGET', k, 'l', 't')
  local level, last = tonumber(h[1]), tonumber(h[2])
  if level == nil or last == nil then level, last = cap, now end
  if now > last and level < cap then level = math.min(cap, level + (now - last) * rate) end
  if level > cap then level = cap end
  levels[j], rates[j], caps[j], costs[j] = level, rate, cap, cost
  if level < cost then
    local w = -1
    if cost <= cap and rate > 0 then w = math.ceil((cost - level) / rate) end
    if wait == 0 or (wait > 0 and (w < 0 or w > wait)) then wait, blame = w, j - 1 end
  end
end
local ok = wait == 0
local out = {ok and 1 or 0, wait, blame}
for j = 1, nk do
  if ok then levels[j] = levels[j] - costs[j] end
  local full = 0
  if levels[j] < caps[j] then
    if rates[j] > 0 then full = math.ceil((caps[j] - levels[j]) / rates[j]) else full = 86400000 end
  end
  if ok then
    redis.call('HSET', KEYS[2 * nb + j], 'l', levels[j], 't', now)
    redis.call('PEXPIRE', KEYS[2 * nb + j], full + 1000)
  end
  out[3 + j] = math.floor(levels[j] / 60000)
  out[3 + nk + j] = full
end
local reserve = tonumber(ARGV[base + 3 * nk + 1] or '0') or 0
if ok and reserve > 0 then
  for i = 1, nb do
    redis.call('INCRBYFLOAT', KEYS[nb + i], ARGV[base + 3 * nk + 1])
    redis.call('EXPIRE', KEYS[nb + i], tonumber(ARGV[base + 3 * nk + 1 + i]))
  end
end
if left ~= nil then out[4 + 2 * nk] = tostring(left) end
return out
"#;

/// The settle script. KEYS: bucket keys (`ARGV[1]` of them), then spend keys, then
/// as many reservation keys. ARGV: the bucket count, per bucket `per_min`, capacity
/// and the units to give back (negative: to charge); then the USD spent (added to
/// every spend key), the USD reserved at admission (taken off every reservation
/// key, which never goes below zero: a Redis that lost its keys meanwhile keeps
/// none), then each spend key's TTL in seconds.
pub const SETTLE: &str = r#"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local nk = tonumber(ARGV[1])
for j = 1, nk do
  local rate = tonumber(ARGV[3 * j - 1])
  local cap = tonumber(ARGV[3 * j]) * 60000
  local delta = tonumber(ARGV[3 * j + 1]) * 60000
  local h = redis.call('HMGET', KEYS[j], 'l', 't')
  local level, last = tonumber(h[1]), tonumber(h[2])
  if level == nil or last == nil then level, last = cap, now end
  if now > last and level < cap then level = math.min(cap, level + (now - last) * rate) end
  level = math.min(cap, level + delta)
  local full = 86400000
  if rate > 0 then full = math.max(0, math.ceil((cap - level) / rate)) end
  redis.call('HSET', KEYS[j], 'l', level, 't', now)
  redis.call('PEXPIRE', KEYS[j], full + 1000)
end
local usd = tonumber(ARGV[3 * nk + 2])
local held = tonumber(ARGV[3 * nk + 3])
local m = (#KEYS - nk) / 2
for i = 1, m do
  if usd > 0 then
    redis.call('INCRBYFLOAT', KEYS[nk + i], ARGV[3 * nk + 2])
    redis.call('EXPIRE', KEYS[nk + i], tonumber(ARGV[3 * nk + 3 + i]))
  end
  if held > 0 then
    local left = tonumber(redis.call('INCRBYFLOAT', KEYS[nk + m + i], -held))
    if left <= 1e-9 then redis.call('DEL', KEYS[nk + m + i]) end
  end
end
return 1
"#;

/// Why a Redis call failed.
#[derive(Debug)]
pub enum BackendError {
    /// The deadline (`state.timeout_ms`) passed.
    Timeout,
    /// Redis answered with an error, or the connection failed.
    Redis(redis::RedisError),
    /// The script's answer had an unexpected shape.
    Reply,
}

impl std::fmt::Display for BackendError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BackendError::Timeout => write!(f, "no answer within the deadline"),
            BackendError::Redis(e) => write!(f, "{e}"),
            BackendError::Reply => write!(f, "unexpected script reply"),
        }
    }
}

#[derive(Debug)]
struct Shared {
    client: redis::Client,
    conn: tokio::sync::OnceCell<ConnectionManager>,
    timeout: Duration,
    admit: Script,
    settle: Script,
}

/// The Redis state of one limiter (cheap to clone).
#[derive(Debug, Clone)]
pub struct RedisBackend {
    shared: Arc<Shared>,
}

impl RedisBackend {
    /// A backend for `url` with a deadline of `timeout_ms` per call; `None` if the URL
    /// does not parse (config validation checked its scheme). Connects on first use.
    pub fn new(url: &str, timeout_ms: u64) -> Option<RedisBackend> {
        let client = match redis::Client::open(url) {
            Ok(c) => c,
            Err(e) => {
                tracing::error!(error = %e, "state.redis is not a usable Redis URL; limits stay in memory");
                return None;
            }
        };
        Some(RedisBackend {
            shared: Arc::new(Shared {
                client,
                conn: tokio::sync::OnceCell::new(),
                timeout: Duration::from_millis(timeout_ms),
                admit: Script::new(ADMIT),
                settle: Script::new(SETTLE),
            }),
        })
    }

    async fn conn(&self) -> Result<ConnectionManager, BackendError> {
        let s = &self.shared;
        s.conn
            .get_or_try_init(|| async {
                let cfg = ConnectionManagerConfig::new()
                    .set_connection_timeout(Some(s.timeout))
                    .set_response_timeout(Some(s.timeout))
                    .set_number_of_retries(1);
                ConnectionManager::new_with_config(s.client.clone(), cfg)
                    .await
                    .map_err(BackendError::Redis)
            })
            .await
            .cloned()
    }

    /// One admission check over `needs` and the budgets `scopes` (`(scope, budget)`)
    /// at `unix_secs`, within the deadline; admitted, `reserve_usd` is added to the
    /// spend of every budget.
    pub(super) async fn admit(
        &self,
        needs: &[Need],
        scopes: &[(String, Budget)],
        unix_secs: u64,
        reserve_usd: f64,
    ) -> Result<Checked, BackendError> {
        let (day, month) = super::budget::period_names(unix_secs);
        let mut inv = self.shared.admit.prepare_invoke();
        let mut limits = Vec::new();
        let mut ttls = Vec::new();
        let budget_keys = budget_keys(scopes, &day, &month);
        for (spend, _, limit, ttl) in &budget_keys {
            inv.key(spend);
            limits.push(*limit);
            ttls.push(*ttl);
        }
        for (_, held, _, _) in &budget_keys {
            inv.key(held);
        }
        inv.arg(limits.len());
        for l in &limits {
            inv.arg(l.to_string());
        }
        for n in needs {
            inv.key(format!("{PREFIX}rl:{}", n.key));
            inv.arg(n.per_min).arg(n.capacity).arg(n.cost);
        }
        inv.arg(reserve_usd.to_string());
        for t in &ttls {
            inv.arg(*t);
        }
        let call = async {
            let mut conn = self.conn().await?;
            inv.invoke_async::<redis::Value>(&mut conn)
                .await
                .map_err(BackendError::Redis)
        };
        let reply = tokio::time::timeout(self.shared.timeout, call)
            .await
            .map_err(|_| BackendError::Timeout)??;
        parse_admit(reply, needs, scopes, &limits)
    }

    /// Settles one permit: `delta` units back to each token bucket of `needs`
    /// (negative: charged), `usd` added to the spend of `scopes`.
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn settle(
        &self,
        needs: &[Need],
        delta: i128,
        scopes: &[(String, Budget)],
        usd: f64,
        reserved: f64,
        unix_secs: u64,
    ) -> Result<(), BackendError> {
        let (day, month) = super::budget::period_names(unix_secs);
        let mut inv = self.shared.settle.prepare_invoke();
        inv.arg(needs.len());
        let delta = i64::try_from(delta).unwrap_or(if delta > 0 { i64::MAX } else { i64::MIN });
        for n in needs {
            inv.key(format!("{PREFIX}rl:{}", n.key));
            inv.arg(n.per_min).arg(n.capacity).arg(delta);
        }
        inv.arg(usd.max(0.0).to_string());
        inv.arg(reserved.max(0.0).to_string());
        if usd > 0.0 || reserved > 0.0 {
            let budget_keys = budget_keys(scopes, &day, &month);
            for (spend, _, _, ttl) in &budget_keys {
                inv.key(spend);
                inv.arg(*ttl);
            }
            for (_, held, _, _) in &budget_keys {
                inv.key(held);
            }
        }
        let call = async {
            let mut conn = self.conn().await?;
            inv.invoke_async::<redis::Value>(&mut conn)
                .await
                .map_err(BackendError::Redis)
        };
        tokio::time::timeout(self.shared.timeout, call)
            .await
            .map_err(|_| BackendError::Timeout)??;
        Ok(())
    }
}

/// Per budget of `scopes` (day before month, scope by scope): its spend key, its
/// reservation key, its limit (USD) and the keys' TTL (seconds).
fn budget_keys(
    scopes: &[(String, Budget)],
    day: &str,
    month: &str,
) -> Vec<(String, String, f64, u64)> {
    let mut out = Vec::new();
    for (scope, b) in scopes {
        for (limit, period, ttl) in [
            (b.usd_per_day, day, DAY_KEY_TTL_SECS),
            (b.usd_per_month, month, MONTH_KEY_TTL_SECS),
        ] {
            if let Some(limit) = limit {
                out.push((
                    format!("{PREFIX}spend:{scope}:{period}"),
                    format!("{PREFIX}held:{scope}:{period}"),
                    limit,
                    ttl,
                ));
            }
        }
    }
    out
}

fn int(v: &redis::Value) -> Option<i64> {
    match v {
        redis::Value::Int(i) => Some(*i),
        _ => None,
    }
}

fn parse_admit(
    reply: redis::Value,
    needs: &[Need],
    scopes: &[(String, Budget)],
    limits: &[f64],
) -> Result<Checked, BackendError> {
    let redis::Value::Array(items) = reply else {
        return Err(BackendError::Reply);
    };
    let code = items.first().and_then(int).ok_or(BackendError::Reply)?;
    if code == 2 {
        let i = items.get(1).and_then(int).ok_or(BackendError::Reply)?;
        let usd = |v: Option<&redis::Value>| match v {
            Some(redis::Value::BulkString(b)) => {
                String::from_utf8_lossy(b).parse::<f64>().unwrap_or(0.0)
            }
            _ => 0.0,
        };
        let (spent, reserved) = (usd(items.get(2)), usd(items.get(3)));
        // Map the spend-key index back to its scope (each scope has one or two keys).
        let mut k = 0i64;
        let mut index = 0;
        for (si, (_, b)) in scopes.iter().enumerate() {
            let n = i64::from(b.usd_per_day.is_some()) + i64::from(b.usd_per_month.is_some());
            if i < k + n {
                index = si;
                break;
            }
            k += n;
        }
        let _ = limits;
        return Ok(Checked::OverBudget {
            index,
            spent,
            reserved,
        });
    }
    let n = needs.len();
    if items.len() != 3 + 2 * n && items.len() != 4 + 2 * n {
        return Err(BackendError::Reply);
    }
    let left = match items.get(3 + 2 * n) {
        Some(redis::Value::BulkString(b)) => std::str::from_utf8(b)
            .ok()
            .and_then(|s| s.parse::<f64>().ok()),
        _ => None,
    };
    let views = needs
        .iter()
        .enumerate()
        .map(|(j, need)| View {
            kind: need.kind,
            capacity: need.capacity,
            remaining: u64::try_from(int(&items[3 + j]).unwrap_or(0).max(0)).unwrap_or(0),
            reset_ms: u64::try_from(int(&items[3 + n + j]).unwrap_or(0).max(0)).unwrap_or(0),
        })
        .collect();
    if code == 1 {
        return Ok(Checked::Admitted(views, left.map(|l| l.max(0.0))));
    }
    let wait = items.get(1).and_then(int).ok_or(BackendError::Reply)?;
    let blame = usize::try_from(items.get(2).and_then(int).unwrap_or(0)).unwrap_or(0);
    Ok(Checked::Refused {
        wait_ms: u64::try_from(wait).ok(),
        blame: blame.min(n.saturating_sub(1)),
        views,
    })
}
