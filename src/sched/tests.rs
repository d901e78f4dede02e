//! The gate's order, aging bound, timeouts, disconnects and the off-peak hold, on
//! tokio's paused clock (time advances only when every task waits).

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::time::Instant;

use super::*;
use crate::config::sched::parse_hours;

fn config(aging_ms: u64) -> SchedConfig {
    SchedConfig {
        aging_ms,
        ..SchedConfig::default()
    }
}

fn gate(max: u32, aging_ms: u64) -> Arc<Gate> {
    Arc::new(Gate::new("test", max, &config(aging_ms)))
}

/// Queues a request of `level` on `gate` in a task that reports `tag` on `done` when
/// it gets its slot, then holds the slot for `hold`.
fn queue(
    gate: &Arc<Gate>,
    level: PriorityLevel,
    tag: &'static str,
    hold: Duration,
    done: &mpsc::UnboundedSender<(&'static str, Instant)>,
) -> tokio::task::JoinHandle<()> {
    let (gate, done) = (gate.clone(), done.clone());
    tokio::spawn(async move {
        let slot = gate.acquire(level, None).await.expect("slot");
        let _ = done.send((tag, Instant::now()));
        tokio::time::sleep(hold).await;
        drop(slot);
    })
}

/// Lets every spawned task run until it waits.
async fn settle() {
    for _ in 0..10 {
        tokio::task::yield_now().await;
    }
}

#[tokio::test(start_paused = true)]
async fn empty_gate_admits_at_once_and_counts_slots() {
    let g = gate(2, 1_000);
    let a = g.acquire(PriorityLevel::Normal, None).await.expect("a");
    let b = g.acquire(PriorityLevel::Low, None).await.expect("b");
    assert_eq!(g.in_flight(), 2);
    drop(a);
    assert_eq!(g.in_flight(), 1);
    drop(b);
    assert_eq!(g.in_flight(), 0);
    let r = g.report();
    assert_eq!(r.levels[1].admitted, 1);
    assert_eq!(r.levels[2].admitted, 1);
    assert_eq!(r.levels[1].admitted_after_wait, 0);
}

#[tokio::test(start_paused = true)]
async fn queued_high_is_served_before_queued_low() {
    let g = gate(1, 60_000);
    let (tx, mut rx) = mpsc::unbounded_channel();
    let first = g.acquire(PriorityLevel::Normal, None).await.expect("first");
    // Low queues first, high after it; both wait for `first`.
    let _l = queue(
        &g,
        PriorityLevel::Low,
        "low",
        Duration::from_millis(10),
        &tx,
    );
    settle().await;
    let _h = queue(
        &g,
        PriorityLevel::High,
        "high",
        Duration::from_millis(10),
        &tx,
    );
    settle().await;
    let _n = queue(
        &g,
        PriorityLevel::Normal,
        "normal",
        Duration::from_millis(10),
        &tx,
    );
    settle().await;
    assert_eq!(g.report().levels.iter().map(|l| l.queued).sum::<usize>(), 3);
    drop(first);
    let order: Vec<&str> = [rx.recv().await, rx.recv().await, rx.recv().await]
        .into_iter()
        .map(|m| m.expect("served").0)
        .collect();
    assert_eq!(order, ["high", "normal", "low"]);
}

#[tokio::test(start_paused = true)]
async fn critical_never_waits_even_when_the_gate_is_full() {
    let g = gate(1, 1_000);
    let _held = g.acquire(PriorityLevel::High, None).await.expect("held");
    let (tx, _rx) = mpsc::unbounded_channel();
    let _queued = queue(&g, PriorityLevel::High, "high", Duration::ZERO, &tx);
    settle().await;
    let started = Instant::now();
    let c = g
        .acquire(PriorityLevel::Critical, None)
        .await
        .expect("critical");
    assert_eq!(Instant::now(), started, "critical waited");
    assert_eq!(g.in_flight(), 2);
    drop(c);
    // Freeing the critical slot does not admit the queued request: one slot is still
    // out of a maximum of one.
    settle().await;
    assert_eq!(g.report().levels[0].queued, 1);
    assert_eq!(g.report().critical_admitted, 1);
}

#[tokio::test(start_paused = true)]
async fn low_is_served_within_the_aging_bound_under_continuous_high_load() {
    let aging = Duration::from_millis(1_000);
    let g = gate(1, 1_000);
    let (tx, mut rx) = mpsc::unbounded_channel();
    let service = Duration::from_millis(100);
    let first = g.acquire(PriorityLevel::High, None).await.expect("first");
    let queued_at = Instant::now();
    let _low = queue(&g, PriorityLevel::Low, "low", service, &tx);
    settle().await;
    // A high request arrives every 50 ms, twice as fast as the endpoint serves.
    let feeder = {
        let (g, tx) = (g.clone(), tx.clone());
        tokio::spawn(async move {
            loop {
                drop(queue(&g, PriorityLevel::High, "high", service, &tx));
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        })
    };
    tokio::time::sleep(Duration::from_millis(10)).await;
    drop(first);
    let low_at = loop {
        let (tag, at) = rx.recv().await.expect("served");
        if tag == "low" {
            break at;
        }
        assert!(at - queued_at < Duration::from_secs(60), "low starved");
    };
    feeder.abort();
    // Bound: 2 aging steps, plus the service of what was queued ahead of it when
    // it arrived (nothing), plus one service time for the slot in use when it
    // ranked 0.
    let bound = 2 * aging + 2 * service;
    assert!(
        low_at - queued_at <= bound,
        "low waited {:?}, bound {:?}",
        low_at - queued_at,
        bound
    );
    // And it was not served before it had aged to high's rank.
    assert!(low_at - queued_at >= 2 * aging - service);
}

#[tokio::test(start_paused = true)]
async fn a_request_that_waits_its_queue_timeout_gets_503_with_retry_after() {
    let g = gate(1, 1_000);
    let _held = g.acquire(PriorityLevel::Normal, None).await.expect("held");
    let e = g
        .acquire(PriorityLevel::Low, Some(Duration::from_millis(500)))
        .await
        .expect_err("timed out");
    assert_eq!(e.status(), 503);
    assert_eq!(e.code.as_ref().map(Code::as_str), Some("queue_timeout"));
    assert!(e.retry_after.is_some_and(|d| d >= Duration::from_secs(1)));
    let r = g.report();
    assert_eq!(r.levels[2].timed_out, 1);
    assert_eq!(r.levels[2].queued, 0);
}

#[tokio::test(start_paused = true)]
async fn a_full_queue_refuses_at_once() {
    let cfg = SchedConfig {
        max_queued: 1,
        ..SchedConfig::default()
    };
    let g = Arc::new(Gate::new("test", 1, &cfg));
    let _held = g.acquire(PriorityLevel::Normal, None).await.expect("held");
    let (tx, _rx) = mpsc::unbounded_channel();
    let _q = queue(&g, PriorityLevel::Normal, "q", Duration::ZERO, &tx);
    settle().await;
    let e = g
        .acquire(PriorityLevel::High, None)
        .await
        .expect_err("full");
    assert_eq!(e.code.as_ref().map(Code::as_str), Some("queue_full"));
    assert_eq!(e.status(), 503);
}

#[tokio::test(start_paused = true)]
async fn a_disconnected_queued_client_leaves_the_queue_at_once() {
    let g = gate(1, 1_000);
    let (tx, mut rx) = mpsc::unbounded_channel();
    let held = g.acquire(PriorityLevel::Normal, None).await.expect("held");
    let gone = queue(&g, PriorityLevel::High, "gone", Duration::ZERO, &tx);
    settle().await;
    let _next = queue(&g, PriorityLevel::Low, "next", Duration::ZERO, &tx);
    settle().await;
    assert_eq!(g.report().levels[0].queued, 1);
    gone.abort();
    settle().await;
    let r = g.report();
    assert_eq!(r.levels[0].queued, 0, "the gone client is still queued");
    assert_eq!(r.levels[0].abandoned, 1);
    drop(held);
    assert_eq!(rx.recv().await.expect("served").0, "next");
}

#[tokio::test(start_paused = true)]
async fn a_slot_granted_to_a_client_that_left_is_passed_on() {
    let g = gate(1, 1_000);
    let (tx, mut rx) = mpsc::unbounded_channel();
    let held = g.acquire(PriorityLevel::Normal, None).await.expect("held");
    let gone = queue(&g, PriorityLevel::High, "gone", Duration::ZERO, &tx);
    settle().await;
    let _next = queue(&g, PriorityLevel::Low, "next", Duration::from_secs(1), &tx);
    settle().await;
    // The slot goes to `gone` under the lock; its task is aborted before it runs.
    drop(held);
    gone.abort();
    assert_eq!(rx.recv().await.expect("served").0, "next");
    assert_eq!(g.in_flight(), 1);
}

/// A wall clock that starts at `base` and moves with tokio's (paused) clock.
#[derive(Debug)]
struct FakeClock {
    base_ms: u64,
    start: Instant,
}

impl Clock for FakeClock {
    fn unix_ms(&self) -> u64 {
        self.base_ms + self.start.elapsed().as_millis() as u64
    }
}

fn off_peak(hours: &str, tz: &str, max_wait_ms: u64, at: &str) -> OffPeak {
    let (start_hour, end_hour) = parse_hours(hours).expect("hours");
    let cfg = OffPeakConfig {
        start_hour,
        end_hour,
        timezone: jiff::tz::TimeZone::get(tz).expect("tz"),
        timezone_name: tz.into(),
        max_wait_ms,
        max_held: 2,
    };
    let base: jiff::Timestamp = at.parse().expect("timestamp");
    let clock = FakeClock {
        base_ms: base.as_millisecond() as u64,
        start: Instant::now(),
    };
    OffPeak::new(cfg, Arc::new(clock))
}

#[tokio::test(start_paused = true)]
async fn off_peak_hold_releases_at_the_window_start() {
    let w = off_peak("0-6", "UTC", 6 * 3_600_000, "2026-12-01T23:59:00Z");
    assert!(!w.is_now());
    let started = Instant::now();
    let (held, why) = w.hold().await.expect("held");
    assert_eq!(why, Release::Window);
    assert_eq!(held, Duration::from_secs(60));
    assert_eq!(Instant::now() - started, Duration::from_secs(60));
    assert!(w.is_now(), "the window is open when the hold ends");
    assert_eq!(w.held(), 0);
}

#[tokio::test(start_paused = true)]
async fn off_peak_hold_ends_at_max_wait_when_the_window_is_further() {
    let w = off_peak("0-6", "UTC", 3_600_000, "2026-12-01T12:00:00Z");
    let (held, why) = w.hold().await.expect("held");
    assert_eq!((held, why), (Duration::from_secs(3_600), Release::MaxWait));
}

#[tokio::test(start_paused = true)]
async fn off_peak_does_not_hold_inside_the_window_or_past_max_held() {
    let inside = off_peak("22-6", "UTC", 3_600_000, "2026-12-01T23:00:00Z");
    assert!(inside.is_now());
    assert!(inside.hold().await.is_none());
    let w = Arc::new(off_peak("0-6", "UTC", 3_600_000, "2026-12-01T12:00:00Z"));
    let a = tokio::spawn({
        let w = w.clone();
        async move { w.hold().await }
    });
    let b = tokio::spawn({
        let w = w.clone();
        async move { w.hold().await }
    });
    settle().await;
    assert_eq!(w.held(), 2);
    // max_held is 2: a third request is dispatched at once.
    assert!(w.hold().await.is_none());
    a.abort();
    settle().await;
    assert_eq!(w.held(), 1, "an aborted hold still counts");
    assert!(b.await.expect("b").is_some());
}

#[test]
fn until_open_follows_the_time_zone_and_its_daylight_saving_time() {
    // New York is UTC-5 in winter, UTC-4 in summer: 01:00 local is 06:00 or 05:00 UTC.
    let winter = off_peak("1-5", "America/New_York", 1_000, "2026-12-01T05:00:00Z");
    assert_eq!(
        winter.until_open(winter.clock.unix_ms()),
        Some(Duration::from_secs(3_600))
    );
    let summer = off_peak("1-5", "America/New_York", 1_000, "2026-07-01T04:00:00Z");
    assert_eq!(
        summer.until_open(summer.clock.unix_ms()),
        Some(Duration::from_secs(3_600))
    );
    // After today's window has passed, the next opens tomorrow.
    let later = off_peak("0-6", "UTC", 1_000, "2026-12-01T07:00:00Z");
    assert_eq!(
        later.until_open(later.clock.unix_ms()),
        Some(Duration::from_secs(17 * 3_600))
    );
}

#[test]
fn hours_parse_and_wrap() {
    assert_eq!(parse_hours("0-6"), Ok((0, 6)));
    assert_eq!(parse_hours("22-6"), Ok((22, 6)));
    assert_eq!(parse_hours("0-24"), Ok((0, 24)));
    assert!(parse_hours("6").is_err());
    assert!(parse_hours("3-3").is_err());
    assert!(parse_hours("24-2").is_err());
    assert!(parse_hours("a-b").is_err());
}
