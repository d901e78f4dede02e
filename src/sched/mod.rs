//! Priority scheduling (issue 15; seed 000, "Priority Queues"): per-endpoint
//! concurrency limits with four priority levels, aging, queue timeouts, and the
//! off-peak hold for low-priority requests.
//!
//! **Gates.** An endpoint with `max_in_flight: N` has a [`Gate`]: at most N attempts
//! are in flight to it at once, each holding a [`Slot`] from before it is sent until
//! its answer (or stream) ends. An attempt that finds the gate full waits in one of
//! three queues (high, normal, low); an endpoint without `max_in_flight` has no
//! gate, and acquiring costs nothing.
//!
//! **Critical** never waits: it takes a slot at once, even past N (it is counted in
//! flight, so lower levels wait for it to end). It also bypasses the rate limits
//! (`crate::limits`), not the budgets.
//!
//! **Order and aging.** When a slot frees, it goes to the queued request of best
//! rank, the earliest queued among equals. A request queued at level L (high 0,
//! normal 1, low 2) that has waited w ranks as `max(0, L − ⌊w / aging_ms⌋)`: normal
//! ranks with high after one `aging_ms`, low after two. The bound that follows: once
//! a request ranks 0 it is behind only requests queued before it, so a request of
//! level L waits at most `L · aging_ms` plus the time the endpoint takes to serve
//! the requests that were already queued when it arrived, however many
//! higher-priority requests keep arriving after it. Within one level the order is
//! first come, first served. Each queue is a FIFO whose head is its oldest (so most
//! aged) entry, so choosing costs three comparisons, not a scan.
//!
//! **Timeouts and limits.** A request that waits its level's `queue_timeout_ms` gets
//! 503 `queue_timeout` with `Retry-After`; one that finds `max_queued` requests
//! already waiting gets 503 `queue_full` at once. Neither counts against the
//! endpoint's health: the gateway refused, the provider was never asked.
//!
//! **Disconnects.** A queued request is a future owned by the client's connection:
//! when the client goes away the future is dropped and its guard leaves the queue at
//! once (a slot granted to it in that instant is passed on, never lost).
//!
//! **Off-peak hold** ([`OffPeak`]): a low-priority request whose caller opts in
//! (header `x-switchyard-defer: off-peak`) or whose route or rule says `hold
//! off_peak` waits, before dispatch and without a slot, until the configured window
//! opens or `max_wait` passes, whichever is first. Wall-clock time comes from a
//! [`Clock`], so tests can put the gateway just before a window.

use std::collections::VecDeque;
use std::fmt;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::oneshot;
use tokio::time::Instant;

use crate::config::{OffPeakConfig, QueueTimeouts, SchedConfig};
use crate::error::{Code, ErrorKind, Fault, GatewayError, Retry};
use crate::policy::ast::PriorityLevel;
use crate::routing::Registry;
use crate::telemetry as t;

mod report;
#[cfg(test)]
mod tests;

pub use report::{GateReport, LevelReport, OffPeakReport};

/// The queued levels in rank order (critical never queues).
pub const QUEUED_LEVELS: [PriorityLevel; 3] = [
    PriorityLevel::High,
    PriorityLevel::Normal,
    PriorityLevel::Low,
];

/// The queue rank of `level` (high 0, normal 1, low 2); `None` for critical.
fn rank(level: PriorityLevel) -> Option<usize> {
    match level {
        PriorityLevel::Critical => None,
        PriorityLevel::High => Some(0),
        PriorityLevel::Normal => Some(1),
        PriorityLevel::Low => Some(2),
    }
}

/// Wall-clock time for the off-peak window, injectable for tests.
pub trait Clock: Send + Sync + fmt::Debug {
    /// Milliseconds since the Unix epoch, now.
    fn unix_ms(&self) -> u64;
}

/// The system clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn unix_ms(&self) -> u64 {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
    }
}

/// The scheduler of one gateway: a gate per endpoint with `max_in_flight`, and the
/// off-peak window.
#[derive(Debug)]
pub struct Scheduler {
    /// Indexed like the registry's endpoints; `None`: no limit.
    gates: Vec<Option<Arc<Gate>>>,
    timeouts: QueueTimeouts,
    off_peak: Option<OffPeak>,
}

impl Scheduler {
    /// The scheduler for `config`'s `scheduler:` section and the endpoints of
    /// `registry`, on the system clock.
    pub fn new(config: &SchedConfig, registry: &Registry) -> Scheduler {
        Scheduler::with_clock(config, registry, Arc::new(SystemClock))
    }

    /// As [`Scheduler::new`], reading wall-clock time from `clock`.
    pub fn with_clock(
        config: &SchedConfig,
        registry: &Registry,
        clock: Arc<dyn Clock>,
    ) -> Scheduler {
        let gates = registry
            .endpoints
            .iter()
            .map(|e| {
                e.max_in_flight
                    .map(|max| Arc::new(Gate::new(&e.id, max, config)))
            })
            .collect();
        Scheduler {
            gates,
            timeouts: config.queue_timeout_ms,
            off_peak: config.off_peak.clone().map(|cfg| OffPeak::new(cfg, clock)),
        }
    }

    /// Whether any endpoint has a gate.
    pub fn any_gate(&self) -> bool {
        self.gates.iter().any(Option::is_some)
    }

    /// The gate of endpoint `ep`, if it has `max_in_flight`.
    pub fn gate(&self, ep: usize) -> Option<&Arc<Gate>> {
        self.gates.get(ep)?.as_ref()
    }

    /// A slot on endpoint `ep` for a request of `level`, waiting in its queue when
    /// the endpoint is full. `Ok(None)`: the endpoint has no limit.
    ///
    /// # Errors
    /// 503 `queue_timeout` after the level's `queue_timeout_ms`, 503 `queue_full`
    /// when `max_queued` requests are already waiting; both with `Retry-After`.
    pub async fn acquire(
        &self,
        ep: usize,
        level: PriorityLevel,
    ) -> Result<Option<Slot>, GatewayError> {
        let Some(gate) = self.gate(ep) else {
            return Ok(None);
        };
        let timeout = self.timeouts.of(level).map(Duration::from_millis);
        gate.acquire(level, timeout).await.map(Some)
    }

    /// The off-peak window, if configured.
    pub fn off_peak(&self) -> Option<&OffPeak> {
        self.off_peak.as_ref()
    }

    /// Whether the off-peak window holds now (`request.off_peak`); false when none is
    /// configured.
    pub fn off_peak_now(&self) -> bool {
        self.off_peak.as_ref().is_some_and(OffPeak::is_now)
    }
}

/// Per-level counts of one gate, for `/admin/endpoints`.
#[derive(Debug, Default)]
struct LevelCounts {
    admitted: AtomicU64,
    timed_out: AtomicU64,
    abandoned: AtomicU64,
    full: AtomicU64,
    /// Total ms waited by admitted requests that waited.
    waited_ms: AtomicU64,
    /// Admitted requests that waited.
    waited: AtomicU64,
}

/// The metric handles of one level of one gate.
#[derive(Debug)]
struct LevelMetrics {
    depth: metrics::Gauge,
    wait: metrics::Histogram,
    admitted: metrics::Counter,
    timed_out: metrics::Counter,
    abandoned: metrics::Counter,
    full: metrics::Counter,
}

impl LevelMetrics {
    fn new(endpoint: &str, level: &'static str) -> LevelMetrics {
        let labels = || {
            [
                ("endpoint", endpoint.to_string()),
                ("priority", level.to_string()),
            ]
        };
        LevelMetrics {
            depth: metrics::gauge!(t::QUEUE_DEPTH, &labels()),
            wait: metrics::histogram!(t::QUEUE_WAIT, &labels()),
            admitted: metrics::counter!(t::QUEUE_ADMITTED, &labels()),
            timed_out: metrics::counter!(t::QUEUE_TIMEOUTS, &labels()),
            abandoned: metrics::counter!(t::QUEUE_ABANDONED, &labels()),
            full: metrics::counter!(t::QUEUE_FULL, &labels()),
        }
    }
}

/// One queued request.
struct Waiter {
    id: u64,
    since: Instant,
    grant: oneshot::Sender<()>,
}

/// What the gate's lock guards.
struct GateState {
    in_flight: u32,
    queues: [VecDeque<Waiter>; 3],
    next_id: u64,
}

impl GateState {
    fn queued(&self) -> usize {
        self.queues.iter().map(VecDeque::len).sum()
    }

    /// Removes waiter `id` from queue `rank`; false when it is no longer there (it
    /// was granted a slot).
    fn remove(&mut self, rank: usize, id: u64) -> bool {
        let q = &mut self.queues[rank];
        match q.iter().position(|w| w.id == id) {
            Some(at) => {
                q.remove(at);
                true
            }
            None => false,
        }
    }
}

/// The concurrency gate of one endpoint (see the module docs).
///
/// Invariant: while fewer than `max` slots are out, every queue is empty (a freed
/// slot is handed to a waiter under the same lock that frees it).
pub struct Gate {
    max: u32,
    aging_ms: u64,
    max_queued: usize,
    state: Mutex<GateState>,
    counts: [LevelCounts; 3],
    critical: AtomicU64,
    /// EWMA (α = 0.3) of the wait of admitted requests that waited, ms: the
    /// `Retry-After` of a refusal.
    ewma_wait_ms: AtomicU64,
    metrics: [LevelMetrics; 3],
    critical_admitted: metrics::Counter,
    in_flight_gauge: metrics::Gauge,
}

impl fmt::Debug for Gate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Gate")
            .field("max", &self.max)
            .field("aging_ms", &self.aging_ms)
            .finish_non_exhaustive()
    }
}

impl Gate {
    /// A gate of `max` slots for endpoint `endpoint` (metric label), with
    /// `config`'s aging and queue bound.
    pub fn new(endpoint: &str, max: u32, config: &SchedConfig) -> Gate {
        Gate {
            max: max.max(1),
            aging_ms: config.aging_ms.max(1),
            max_queued: config.max_queued as usize,
            state: Mutex::new(GateState {
                in_flight: 0,
                queues: Default::default(),
                next_id: 0,
            }),
            counts: Default::default(),
            critical: AtomicU64::new(0),
            ewma_wait_ms: AtomicU64::new(0),
            metrics: [
                LevelMetrics::new(endpoint, "high"),
                LevelMetrics::new(endpoint, "normal"),
                LevelMetrics::new(endpoint, "low"),
            ],
            critical_admitted: metrics::counter!(t::QUEUE_ADMITTED, "endpoint" => endpoint.to_string(), "priority" => "critical"),
            in_flight_gauge: metrics::gauge!(t::ENDPOINT_IN_FLIGHT, "endpoint" => endpoint.to_string()),
        }
    }

    fn lock(&self) -> MutexGuard<'_, GateState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A slot for a request of `level`, waiting at most `timeout` (`None`: no limit)
    /// when all `max` are out.
    ///
    /// # Errors
    /// 503 `queue_timeout` / `queue_full` (see [`Scheduler::acquire`]).
    pub async fn acquire(
        self: &Arc<Self>,
        level: PriorityLevel,
        timeout: Option<Duration>,
    ) -> Result<Slot, GatewayError> {
        let (rank, id, since, rx) = match self.enter(level) {
            Enter::Admitted => return Ok(self.slot()),
            Enter::Full => {
                return Err(self.refusal(
                    Code::QueueFull,
                    format!(
                        "the endpoint's queue is full ({} requests waiting); retry later",
                        self.max_queued
                    ),
                ))
            }
            Enter::Queued {
                rank,
                id,
                since,
                rx,
            } => (rank, id, since, rx),
        };
        let mut waiting = Waiting {
            gate: self.clone(),
            rank,
            id,
            rx,
            done: false,
        };
        let granted = match timeout {
            Some(t) => tokio::time::timeout(t, &mut waiting.rx).await.ok(),
            None => Some((&mut waiting.rx).await),
        };
        let granted = match granted {
            Some(r) => r.is_ok(),
            // Timed out, unless a slot was granted in the same instant.
            None => !self.leave_on_timeout(rank, id) && waiting.rx.try_recv().is_ok(),
        };
        waiting.done = true;
        if !granted {
            self.counts[rank].timed_out.fetch_add(1, Ordering::Relaxed);
            self.metrics[rank].timed_out.increment(1);
            let level_name = QUEUED_LEVELS[rank];
            return Err(self.refusal(
                Code::QueueTimeout,
                format!(
                    "no slot on the endpoint within the {} queue timeout ({} ms); retry later",
                    level_name.as_str(),
                    timeout.map_or(0, |t| t.as_millis())
                ),
            ));
        }
        let waited = since.elapsed();
        let ms = u64::try_from(waited.as_millis()).unwrap_or(u64::MAX);
        let c = &self.counts[rank];
        c.admitted.fetch_add(1, Ordering::Relaxed);
        c.waited.fetch_add(1, Ordering::Relaxed);
        c.waited_ms.fetch_add(ms, Ordering::Relaxed);
        let old = self.ewma_wait_ms.load(Ordering::Relaxed);
        self.ewma_wait_ms
            .store((old * 7 + ms * 3) / 10, Ordering::Relaxed);
        self.metrics[rank].admitted.increment(1);
        self.metrics[rank].wait.record(waited.as_secs_f64());
        Ok(self.slot_after(waited))
    }

    /// Takes a slot at once (critical, or a free slot with nobody waiting), refuses
    /// (queue full), or queues the request, under one lock.
    fn enter(&self, level: PriorityLevel) -> Enter {
        let mut st = self.lock();
        let Some(rank) = rank(level) else {
            st.in_flight += 1;
            self.in_flight_gauge.set(f64::from(st.in_flight));
            drop(st);
            self.critical.fetch_add(1, Ordering::Relaxed);
            self.critical_admitted.increment(1);
            return Enter::Admitted;
        };
        if st.in_flight < self.max && st.queued() == 0 {
            st.in_flight += 1;
            self.in_flight_gauge.set(f64::from(st.in_flight));
            drop(st);
            self.counts[rank].admitted.fetch_add(1, Ordering::Relaxed);
            self.metrics[rank].admitted.increment(1);
            return Enter::Admitted;
        }
        if st.queued() >= self.max_queued {
            drop(st);
            self.counts[rank].full.fetch_add(1, Ordering::Relaxed);
            self.metrics[rank].full.increment(1);
            return Enter::Full;
        }
        let id = st.next_id;
        st.next_id += 1;
        let since = Instant::now();
        let (grant, rx) = oneshot::channel();
        st.queues[rank].push_back(Waiter { id, since, grant });
        self.metrics[rank].depth.increment(1.0);
        Enter::Queued {
            rank,
            id,
            since,
            rx,
        }
    }

    /// Whether the timed-out waiter `id` is still queued (then it is removed and
    /// refused); false when a slot was granted to it in the same instant.
    fn leave_on_timeout(&self, rank: usize, id: u64) -> bool {
        let mut st = self.lock();
        let removed = st.remove(rank, id);
        if removed {
            self.metrics[rank].depth.decrement(1.0);
        }
        removed
    }

    fn slot(self: &Arc<Self>) -> Slot {
        self.slot_after(Duration::ZERO)
    }

    fn slot_after(self: &Arc<Self>, waited: Duration) -> Slot {
        Slot {
            gate: self.clone(),
            waited,
        }
    }

    /// The 503 of a refusal, with `Retry-After` the recent mean wait (1 to 60 s).
    fn refusal(&self, code: Code, message: String) -> GatewayError {
        let wait_ms = self
            .ewma_wait_ms
            .load(Ordering::Relaxed)
            .clamp(1_000, 60_000);
        GatewayError::new(ErrorKind::NoEndpoint, message)
            .with_code(code)
            .with_fault(Fault::Gateway)
            .with_retry(Retry::Never)
            .with_retry_after(Some(Duration::from_millis(wait_ms.div_ceil(1_000) * 1_000)))
    }

    /// Frees one slot and hands free slots to the best-ranked waiters.
    fn release_locked(&self, st: &mut GateState) {
        st.in_flight = st.in_flight.saturating_sub(1);
        let now = Instant::now();
        while st.in_flight < self.max {
            let Some((rank, w)) = self.pop_next(st, now) else {
                break;
            };
            self.metrics[rank].depth.decrement(1.0);
            if w.grant.send(()).is_ok() {
                st.in_flight += 1;
            }
        }
        self.in_flight_gauge.set(f64::from(st.in_flight));
    }

    /// The waiter of best aged rank, the earliest queued among equals (see the
    /// module docs), removed from its queue.
    fn pop_next(&self, st: &mut GateState, now: Instant) -> Option<(usize, Waiter)> {
        let mut best: Option<(u64, Instant, usize)> = None;
        for (rank, q) in st.queues.iter().enumerate() {
            let Some(head) = q.front() else { continue };
            let waited = u64::try_from(now.saturating_duration_since(head.since).as_millis())
                .unwrap_or(u64::MAX);
            let aged = (rank as u64).saturating_sub(waited / self.aging_ms);
            if best.is_none_or(|(r, since, _)| (aged, head.since) < (r, since)) {
                best = Some((aged, head.since, rank));
            }
        }
        let (_, _, rank) = best?;
        st.queues[rank].pop_front().map(|w| (rank, w))
    }

    /// Slots out now (critical ones included).
    pub fn in_flight(&self) -> u32 {
        self.lock().in_flight
    }

    /// `max_in_flight`.
    pub fn max(&self) -> u32 {
        self.max
    }
}

/// What [`Gate::enter`] did.
enum Enter {
    Admitted,
    Full,
    Queued {
        rank: usize,
        id: u64,
        since: Instant,
        rx: oneshot::Receiver<()>,
    },
}

/// A queued request's place, left when it is dropped (the client went away).
struct Waiting {
    gate: Arc<Gate>,
    rank: usize,
    id: u64,
    rx: oneshot::Receiver<()>,
    /// The outcome was taken (slot or refusal): nothing to undo.
    done: bool,
}

impl Drop for Waiting {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        let gate = &self.gate;
        let mut st = gate.lock();
        if st.remove(self.rank, self.id) {
            gate.metrics[self.rank].depth.decrement(1.0);
        } else {
            // Granted a slot in the instant the client left: pass it on.
            gate.release_locked(&mut st);
        }
        drop(st);
        gate.counts[self.rank]
            .abandoned
            .fetch_add(1, Ordering::Relaxed);
        gate.metrics[self.rank].abandoned.increment(1);
    }
}

/// One slot of an endpoint's gate, held by an attempt; dropping it frees the slot
/// for the next queued request.
pub struct Slot {
    gate: Arc<Gate>,
    waited: Duration,
}

impl Slot {
    /// How long the request waited in the queue for it (zero: admitted at once).
    pub fn waited(&self) -> Duration {
        self.waited
    }
}

impl fmt::Debug for Slot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Slot")
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut st = self.gate.lock();
        self.gate.release_locked(&mut st);
    }
}

/// The off-peak window and the requests held for it.
#[derive(Debug)]
pub struct OffPeak {
    cfg: OffPeakConfig,
    clock: Arc<dyn Clock>,
    held: AtomicU32,
    held_total: AtomicU64,
    held_gauge: metrics::Gauge,
    released_window: metrics::Counter,
    released_max_wait: metrics::Counter,
    not_held_full: metrics::Counter,
}

/// Why a held request was let go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Release {
    /// The window opened.
    Window,
    /// `max_wait` passed first.
    MaxWait,
}

impl OffPeak {
    /// The window of `cfg` on `clock`.
    pub fn new(cfg: OffPeakConfig, clock: Arc<dyn Clock>) -> OffPeak {
        OffPeak {
            cfg,
            clock,
            held: AtomicU32::new(0),
            held_total: AtomicU64::new(0),
            held_gauge: metrics::gauge!(t::OFFPEAK_HELD),
            released_window: metrics::counter!(t::OFFPEAK_RELEASED, "reason" => "window"),
            released_max_wait: metrics::counter!(t::OFFPEAK_RELEASED, "reason" => "max_wait"),
            not_held_full: metrics::counter!(t::OFFPEAK_RELEASED, "reason" => "full"),
        }
    }

    /// Whether the window holds now.
    pub fn is_now(&self) -> bool {
        self.until_open(self.clock.unix_ms()).is_none()
    }

    /// How long until the window opens, from `unix_ms`; `None` when it is open.
    pub fn until_open(&self, unix_ms: u64) -> Option<Duration> {
        let ts = jiff::Timestamp::from_millisecond(i64::try_from(unix_ms).ok()?).ok()?;
        let now = ts.to_zoned_datetime(self.cfg.timezone.clone());
        if self.cfg.contains_hour(now.hour().try_into().unwrap_or(0)) {
            return None;
        }
        let start = |date: jiff::civil::Date| {
            date.at(i8::try_from(self.cfg.start_hour).unwrap_or(0), 0, 0, 0)
                .to_zoned_datetime(self.cfg.timezone.clone())
                .ok()
        };
        let today = start(now.date())?;
        let next = if today.timestamp() > ts {
            today
        } else {
            start(now.date().tomorrow().ok()?)?
        };
        let ms = next.timestamp().as_millisecond() - ts.as_millisecond();
        Some(Duration::from_millis(u64::try_from(ms).unwrap_or(0)))
    }

    /// Holds the calling request until the window opens or `max_wait` passes.
    /// Returns at once with `None` when the window is open now or `max_held`
    /// requests are already held (the request is dispatched at once); otherwise
    /// the time held and why it ended. Dropping the future (the client went away)
    /// leaves the hold.
    pub async fn hold(&self) -> Option<(Duration, Release)> {
        let until = self.until_open(self.clock.unix_ms())?;
        let max = self.cfg.max_held;
        let Ok(before) = self
            .held
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
                (n < max).then_some(n + 1)
            })
        else {
            self.not_held_full.increment(1);
            return None;
        };
        let _guard = HeldGuard(self);
        self.held_gauge.set(f64::from(before + 1));
        self.held_total.fetch_add(1, Ordering::Relaxed);
        let started = Instant::now();
        let max_wait = Duration::from_millis(self.cfg.max_wait_ms);
        let (wait, why) = if until <= max_wait {
            (until, Release::Window)
        } else {
            (max_wait, Release::MaxWait)
        };
        tokio::time::sleep(wait).await;
        match why {
            Release::Window => self.released_window.increment(1),
            Release::MaxWait => self.released_max_wait.increment(1),
        }
        Some((started.elapsed(), why))
    }

    /// Requests held now.
    pub fn held(&self) -> u32 {
        self.held.load(Ordering::Relaxed)
    }

    /// Requests held since startup.
    pub fn held_total(&self) -> u64 {
        self.held_total.load(Ordering::Relaxed)
    }

    /// The configuration.
    pub fn config(&self) -> &OffPeakConfig {
        &self.cfg
    }
}

/// Counts a held request out when its hold ends (released, or dropped because the
/// client went away).
struct HeldGuard<'a>(&'a OffPeak);

impl Drop for HeldGuard<'_> {
    fn drop(&mut self) {
        let before = self.0.held.fetch_sub(1, Ordering::Relaxed);
        self.0.held_gauge.set(f64::from(before.saturating_sub(1)));
    }
}
