//! `cache:`: the response cache (issue 14; seed 001, "Semantic Cache"), read by the
//! gateway's cache phase (`crate::gateway`) and the store (`crate::cache`).
//!
//! ```yaml
//! cache:
//!   enabled: true          # false: only routes/rules with `cache on` are cached
//!   mode: semantic         # or exact
//!   tau: 3                 # largest Hamming distance of a semantic hit
//!   ttl: 1h                # default time to live (a policy's `cache on ttl D` wins)
//!   capacity: 10000        # L1 entries
//!   max_bytes: 268435456   # L1 bytes of answers and prompts (256 MiB)
//!   stochastic: false      # true: cache answers to temperature > 0 too
//!   redis: redis://127.0.0.1:6379   # L2 shared by every instance (optional)
//!   redis_timeout_ms: 50
//!   replay: recorded       # or compressed, none: timing of replayed streams
//!   share: org             # or key, all: who may be served another caller's answer
//! ```

/// How the prompt text is matched.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CacheMode {
    /// SimHash within τ, then verification (seed 001).
    #[default]
    Semantic,
    /// The identical prompt text only.
    Exact,
}

/// The inter-chunk timing of a replayed stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Replay {
    /// The gaps as recorded, each capped at [`MAX_RECORDED_GAP_MS`].
    #[default]
    Recorded,
    /// Each gap divided by [`COMPRESS_FACTOR`] and capped at [`COMPRESSED_CAP_MS`].
    Compressed,
    /// No waiting: every chunk at once.
    None,
}

/// Which callers may be served each other's cached answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Share {
    /// Callers of one organization share entries; a caller with no organization
    /// shares with its own API key only; unauthenticated callers share one pool.
    #[default]
    Org,
    /// Each API key has its own entries (callers with no key share one pool).
    Key,
    /// Every caller shares every entry. A `hit` then tells a caller that someone
    /// else sent the same conversation: only for single-tenant deployments.
    All,
}

/// Longest wait between two replayed chunks with `replay: recorded`, ms.
pub const MAX_RECORDED_GAP_MS: u64 = 10_000;
/// `replay: compressed` divides every recorded gap by this.
pub const COMPRESS_FACTOR: u64 = 10;
/// `replay: compressed` waits at most this long between two chunks, ms.
pub const COMPRESSED_CAP_MS: u64 = 50;

/// Longest accepted `ttl`: 30 days, in ms.
pub const MAX_TTL_MS: u64 = 30 * 24 * 3_600_000;

impl Replay {
    /// The wait before a chunk recorded `gap_ms` after the one before it.
    pub fn gap(self, gap_ms: u64) -> std::time::Duration {
        let ms = match self {
            Replay::Recorded => gap_ms.min(MAX_RECORDED_GAP_MS),
            Replay::Compressed => (gap_ms / COMPRESS_FACTOR).min(COMPRESSED_CAP_MS),
            Replay::None => 0,
        };
        std::time::Duration::from_millis(ms)
    }
}

/// `cache:` section.
#[derive(Debug, Clone, PartialEq)]
pub struct CacheConfig {
    /// Cache every cacheable request (`enabled`, default false: only requests whose
    /// route or rule says `cache on`). A policy's `cache off` wins either way.
    pub enabled: bool,
    /// `mode`: `semantic` (default) or `exact`; a policy's `cache exact` makes one
    /// route exact.
    pub mode: CacheMode,
    /// Largest Hamming distance of a semantic hit (`tau`, default 3, 0 to 16).
    pub tau: u32,
    /// Default time to live of an entry, ms (`ttl`, a duration like `90s`, `10m`,
    /// `1h`; default 1 h).
    pub ttl_ms: u64,
    /// L1 capacity in entries (`capacity`, default 10,000).
    pub capacity: u64,
    /// L1 capacity in bytes of stored answers and prompt texts (`max_bytes`,
    /// default 256 MiB, 1 MiB to 1 TiB).
    pub max_bytes: u64,
    /// Cache answers to requests with a temperature other than 0, or none (OpenAI's
    /// default is 1) (`stochastic`, default false).
    pub stochastic: bool,
    /// The L2 Redis URL (`redis`, optional).
    pub redis: Option<String>,
    /// Deadline of every L2 call, ms (`redis_timeout_ms`, default 50, 1 to 10,000).
    pub redis_timeout_ms: u64,
    /// Timing of replayed streams (`replay`, default `recorded`).
    pub replay: Replay,
    /// Who shares entries (`share`, default `org`): part of every key's scope.
    pub share: Share,
}

impl Default for CacheConfig {
    fn default() -> Self {
        CacheConfig {
            enabled: false,
            mode: CacheMode::Semantic,
            tau: 3,
            ttl_ms: 3_600_000,
            capacity: 10_000,
            max_bytes: 256 << 20,
            stochastic: false,
            redis: None,
            redis_timeout_ms: 50,
            replay: Replay::Recorded,
            share: Share::Org,
        }
    }
}

/// Parses a duration like `250ms`, `1.5s`, `10m`, `1h` or `2d` into whole
/// milliseconds (the policy language's duration syntax, plus days).
///
/// # Errors
/// A sentence about the text when it has no unit, an unknown unit, or is not a
/// whole number of milliseconds.
pub fn parse_duration_ms(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let scale: u64 = match unit {
        "ms" => 1,
        "s" => 1_000,
        "m" => 60_000,
        "h" => 3_600_000,
        "d" => 86_400_000,
        _ => {
            return Err(format!(
                "\"{text}\" is not a duration like `90s`, `10m` or `1h` (units: ms, s, m, h, d)"
            ))
        }
    };
    let bad = || format!("\"{text}\" is not a whole number of milliseconds");
    let (int, frac) = num.split_once('.').unwrap_or((num, ""));
    if int.is_empty() || frac.contains('.') {
        return Err(bad());
    }
    let whole: u64 = int.parse().map_err(|_| bad())?;
    let mut ms = whole.checked_mul(scale).ok_or_else(bad)?;
    if !frac.is_empty() {
        let digits = u32::try_from(frac.len()).map_err(|_| bad())?;
        let f: u64 = frac.parse().map_err(|_| bad())?;
        let den = 10u64.checked_pow(digits).ok_or_else(bad)?;
        let part = f.checked_mul(scale).ok_or_else(bad)?;
        if part % den != 0 {
            return Err(bad());
        }
        ms = ms.checked_add(part / den).ok_or_else(bad)?;
    }
    Ok(ms)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse_to_whole_milliseconds() {
        assert_eq!(parse_duration_ms("250ms"), Ok(250));
        assert_eq!(parse_duration_ms("1.5s"), Ok(1500));
        assert_eq!(parse_duration_ms("10m"), Ok(600_000));
        assert_eq!(parse_duration_ms("1h"), Ok(3_600_000));
        assert_eq!(parse_duration_ms("2d"), Ok(172_800_000));
        assert!(parse_duration_ms("1.5ms").is_err());
        assert!(parse_duration_ms("10").is_err());
        assert!(parse_duration_ms("10w").is_err());
        assert!(parse_duration_ms("s").is_err());
        assert!(parse_duration_ms("1..5s").is_err());
    }

    #[test]
    fn replay_timing_is_recorded_compressed_or_none() {
        use std::time::Duration;
        assert_eq!(Replay::Recorded.gap(120), Duration::from_millis(120));
        assert_eq!(
            Replay::Recorded.gap(60_000),
            Duration::from_millis(MAX_RECORDED_GAP_MS)
        );
        assert_eq!(Replay::Compressed.gap(120), Duration::from_millis(12));
        assert_eq!(
            Replay::Compressed.gap(5_000),
            Duration::from_millis(COMPRESSED_CAP_MS)
        );
        assert_eq!(Replay::None.gap(120), Duration::ZERO);
    }
}
