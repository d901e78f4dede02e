//! What `/admin/endpoints` shows of the scheduler: each gate's slots and queues,
//! and the off-peak hold.

use std::sync::atomic::Ordering;

use serde::Serialize;

use super::{Gate, OffPeak, QUEUED_LEVELS};

/// One level of one gate.
#[derive(Debug, Clone, Serialize)]
pub struct LevelReport {
    /// `high`, `normal` or `low`.
    pub priority: &'static str,
    /// Requests waiting now.
    pub queued: usize,
    /// How long the oldest waiting request has waited, ms (none: nothing waits).
    pub oldest_wait_ms: Option<u64>,
    /// Requests given a slot since startup (at once or after waiting).
    pub admitted: u64,
    /// Of those, the ones that waited.
    pub admitted_after_wait: u64,
    /// Their mean wait, ms (none: none waited).
    pub mean_wait_ms: Option<f64>,
    /// Requests that got 503 `queue_timeout`.
    pub timed_out: u64,
    /// Requests that got 503 `queue_full`.
    pub refused_full: u64,
    /// Requests whose client went away while they waited.
    pub abandoned: u64,
}

/// The gate of one endpoint (`max_in_flight`).
#[derive(Debug, Clone, Serialize)]
pub struct GateReport {
    /// `max_in_flight`.
    pub max_in_flight: u32,
    /// Slots out now (critical ones included, so this may exceed the maximum).
    pub in_flight: u32,
    /// Critical requests admitted since startup (they never wait).
    pub critical_admitted: u64,
    /// High, normal, low.
    pub levels: Vec<LevelReport>,
}

/// The off-peak hold.
#[derive(Debug, Clone, Serialize)]
pub struct OffPeakReport {
    /// The window, `START-END` local hours.
    pub hours: String,
    /// Its IANA time zone.
    pub timezone: String,
    /// Whether the window holds now (`request.off_peak`).
    pub now: bool,
    /// Time until it opens, ms (none: open now).
    pub opens_in_ms: Option<u64>,
    /// Requests held now.
    pub held: u32,
    /// Requests held since startup.
    pub held_total: u64,
}

impl Gate {
    /// This gate's report, now.
    pub fn report(&self) -> GateReport {
        let now = tokio::time::Instant::now();
        let st = self.lock();
        let in_flight = st.in_flight;
        let depth: Vec<(usize, Option<u64>)> = st
            .queues
            .iter()
            .map(|q| {
                let oldest = q.front().map(|w| {
                    u64::try_from(now.saturating_duration_since(w.since).as_millis())
                        .unwrap_or(u64::MAX)
                });
                (q.len(), oldest)
            })
            .collect();
        drop(st);
        let levels = QUEUED_LEVELS
            .iter()
            .zip(&self.counts)
            .zip(depth)
            .map(|((level, c), (queued, oldest_wait_ms))| {
                let waited = c.waited.load(Ordering::Relaxed);
                LevelReport {
                    priority: level.as_str(),
                    queued,
                    oldest_wait_ms,
                    admitted: c.admitted.load(Ordering::Relaxed),
                    admitted_after_wait: waited,
                    mean_wait_ms: (waited > 0)
                        .then(|| c.waited_ms.load(Ordering::Relaxed) as f64 / waited as f64),
                    timed_out: c.timed_out.load(Ordering::Relaxed),
                    refused_full: c.full.load(Ordering::Relaxed),
                    abandoned: c.abandoned.load(Ordering::Relaxed),
                }
            })
            .collect();
        GateReport {
            max_in_flight: self.max,
            in_flight,
            critical_admitted: self.critical.load(Ordering::Relaxed),
            levels,
        }
    }
}

impl OffPeak {
    /// The hold's report, now.
    pub fn report(&self) -> OffPeakReport {
        let opens_in = self.until_open(self.clock.unix_ms());
        OffPeakReport {
            hours: format!("{}-{}", self.cfg.start_hour, self.cfg.end_hour),
            timezone: self.cfg.timezone_name.clone(),
            now: opens_in.is_none(),
            opens_in_ms: opens_in.map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
            held: self.held(),
            held_total: self.held_total(),
        }
    }
}
