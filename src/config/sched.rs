//! `scheduler:` and the endpoint key `max_in_flight`: priority scheduling (issue 15;
//! seed 000, "Priority Queues"), read by [`crate::sched`].
//!
//! ```yaml
//! scheduler:
//!   aging_ms: 5000                 # a queued request rises one level per 5 s waited
//!   max_queued: 1024               # per endpoint, all levels together
//!   queue_timeout_ms: { high: 10000, normal: 30000, low: 60000 }
//!   off_peak: { hours: 0-6, timezone: UTC, max_wait: 6h, max_held: 10000 }
//! models:
//!   m: { endpoints: [ { provider: p, model: x, max_in_flight: 2 } ] }
//! ```
//!
//! Every key is optional. Without `max_in_flight` an endpoint has no queue; without
//! `off_peak` nothing is ever held and `request.off_peak` reads false.

use crate::policy::ast::PriorityLevel;

/// Default `aging_ms`.
pub const DEFAULT_AGING_MS: u64 = 5_000;
/// Default `max_queued`.
pub const DEFAULT_MAX_QUEUED: u32 = 1_024;
/// Default `off_peak.max_held`.
pub const DEFAULT_MAX_HELD: u32 = 10_000;
/// Default `off_peak.max_wait`, ms (6 h).
pub const DEFAULT_MAX_WAIT_MS: u64 = 6 * 3_600_000;
/// Largest `off_peak.max_wait`, ms (24 h: a longer hold would span a whole window).
pub const MAX_WAIT_LIMIT_MS: u64 = 24 * 3_600_000;

/// `scheduler:`.
#[derive(Debug, Clone, PartialEq)]
pub struct SchedConfig {
    /// A queued request's level rises one step per this many ms waited (`aging_ms`,
    /// 1 to 3,600,000; default 5,000): low ranks with normal after one step and with
    /// high after two. See [`crate::sched`] for the rule and its bound.
    pub aging_ms: u64,
    /// Most requests waiting for one endpoint, all levels together (`max_queued`,
    /// 1 to 1,000,000; default 1,024); beyond it a request gets 503 at once.
    pub max_queued: u32,
    /// How long a request of each level may wait for an endpoint slot before it gets
    /// 503 with `Retry-After` (`queue_timeout_ms.{high,normal,low}`, 1 to 3,600,000;
    /// defaults 10 s, 30 s, 60 s). Critical never waits.
    pub queue_timeout_ms: QueueTimeouts,
    /// The off-peak window low-priority requests may be held for (`off_peak`).
    pub off_peak: Option<OffPeakConfig>,
}

impl Default for SchedConfig {
    fn default() -> SchedConfig {
        SchedConfig {
            aging_ms: DEFAULT_AGING_MS,
            max_queued: DEFAULT_MAX_QUEUED,
            queue_timeout_ms: QueueTimeouts::default(),
            off_peak: None,
        }
    }
}

/// Queue timeouts per level, ms.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueueTimeouts {
    /// `high` (default 10,000).
    pub high: u64,
    /// `normal` (default 30,000).
    pub normal: u64,
    /// `low` (default 60,000).
    pub low: u64,
}

impl Default for QueueTimeouts {
    fn default() -> QueueTimeouts {
        QueueTimeouts {
            high: 10_000,
            normal: 30_000,
            low: 60_000,
        }
    }
}

impl QueueTimeouts {
    /// The timeout of `level`, ms (`None` for critical, which never waits).
    pub fn of(&self, level: PriorityLevel) -> Option<u64> {
        match level {
            PriorityLevel::Critical => None,
            PriorityLevel::High => Some(self.high),
            PriorityLevel::Normal => Some(self.normal),
            PriorityLevel::Low => Some(self.low),
        }
    }
}

/// `scheduler.off_peak`: when cheaper capacity is expected (seed 000: low-priority
/// requests "are eligible for delayed dispatch to exploit off-peak pricing windows").
#[derive(Debug, Clone, PartialEq)]
pub struct OffPeakConfig {
    /// First hour of the window, local time, 0 to 23 (`hours: START-END`).
    pub start_hour: u8,
    /// Hour the window ends (exclusive), 1 to 24; below `start_hour` the window wraps
    /// past midnight (`22-6`).
    pub end_hour: u8,
    /// The IANA time zone the hours are in (`timezone`, default `UTC`), e.g.
    /// `America/New_York`; daylight saving time is followed.
    pub timezone: jiff::tz::TimeZone,
    /// Its name as written, for reports.
    pub timezone_name: String,
    /// Longest hold, ms (`max_wait`, a duration like `6h`; 1 s to 24 h; default 6 h):
    /// a held request is dispatched at the window's start or after this, whichever
    /// comes first.
    pub max_wait_ms: u64,
    /// Most requests held at once (`max_held`, 1 to 1,000,000; default 10,000);
    /// beyond it a request that asks to be held is dispatched at once.
    pub max_held: u32,
}

impl OffPeakConfig {
    /// Whether the local hour `hour` (0 to 23) is inside the window.
    pub fn contains_hour(&self, hour: u8) -> bool {
        if self.start_hour < self.end_hour {
            (self.start_hour..self.end_hour).contains(&hour)
        } else {
            hour >= self.start_hour || hour < self.end_hour
        }
    }
}

/// Parses `hours: START-END` (whole hours, `0-6`, `22-6`, `0-24`).
///
/// # Errors
/// A sentence naming what is wrong.
pub fn parse_hours(s: &str) -> Result<(u8, u8), String> {
    let bad = || format!("expected hours like `0-6` or `22-6` (start-end, 0 to 24), found \"{s}\"");
    let (a, b) = s.split_once('-').ok_or_else(bad)?;
    let a: u8 = a.trim().parse().map_err(|_| bad())?;
    let b: u8 = b.trim().parse().map_err(|_| bad())?;
    if a > 23 || b > 24 || b == 0 {
        return Err(bad());
    }
    if a == b {
        return Err(format!(
            "the window `{s}` is empty; `0-24` is the whole day"
        ));
    }
    Ok((a, b))
}
