//! The policy directory's file watch, debounced: a burst of file events (an editor's
//! write, rename and chmod of one save; a checkout touching many files) becomes one
//! call of the handler, [`QUIET`](super::DEBOUNCE) after the burst's last event.
//!
//! Why not `notify-debouncer-full`: its thread wakes every quarter of the debounce
//! time whether or not anything happened (157 wake-ups a second of an idle gateway
//! at a 25 ms debounce, measured with `/proc/PID/task/*/status`), and its ticks add
//! up to a quarter of the debounce to every save. Here the thread sleeps on the
//! event channel until an event arrives, then waits until the directory has been
//! quiet for the debounce time: no wake-up while nothing changes.
//!
//! Bounded: a burst is handed over after at most [`MAX_BURST`] or [`MAX_EVENTS`]
//! events even if events keep coming, so a directory written to without pause
//! still reloads and the pending events never grow without limit.

use std::sync::mpsc::{channel, RecvTimeoutError};
use std::time::{Duration, Instant};

use notify::{Event, RecommendedWatcher};

/// Longest a burst is collected before it is handed over, however busy the
/// directory stays.
pub const MAX_BURST: Duration = Duration::from_secs(1);

/// Most events collected into one burst before it is handed over.
pub const MAX_EVENTS: usize = 4096;

/// A watcher (nothing watched yet: call `watch` on it) whose events reach `handler`
/// in bursts, `quiet` after the last event of each burst, on a thread of its own
/// named `policy-watch`. Dropping the watcher ends the thread once it has handed
/// over what is pending.
///
/// # Errors
/// The platform watcher cannot be created (for example, inotify's instance limit),
/// or the thread cannot be spawned.
pub fn watcher<F>(quiet: Duration, mut handler: F) -> notify::Result<RecommendedWatcher>
where
    F: FnMut(Vec<notify::Result<Event>>) + Send + 'static,
{
    let (tx, rx) = channel::<notify::Result<Event>>();
    let watcher = notify::recommended_watcher(move |e| {
        // The receiver is gone only when the thread below ended; nothing to do then.
        let _ = tx.send(e);
    })?;
    std::thread::Builder::new()
        .name("policy-watch".to_string())
        .spawn(move || {
            // Sleeps here until an event comes, or ends when the watcher is dropped.
            while let Ok(first) = rx.recv() {
                let started = Instant::now();
                let mut burst = vec![first];
                let mut open = true;
                while burst.len() < MAX_EVENTS {
                    let left = MAX_BURST.saturating_sub(started.elapsed());
                    if left.is_zero() {
                        break;
                    }
                    match rx.recv_timeout(quiet.min(left)) {
                        Ok(e) => burst.push(e),
                        Err(RecvTimeoutError::Timeout) => break,
                        Err(RecvTimeoutError::Disconnected) => {
                            open = false;
                            break;
                        }
                    }
                }
                handler(burst);
                if !open {
                    return;
                }
            }
        })
        .map_err(|e| {
            notify::Error::generic(&format!("cannot start the policy watch thread: {e}"))
        })?;
    Ok(watcher)
}

#[cfg(test)]
mod tests {
    use super::*;
    use notify::{RecursiveMode, Watcher as _};
    use std::sync::mpsc;

    #[test]
    fn a_burst_of_writes_is_handed_over_once_after_it_settles() {
        let dir = tempfile::tempdir().unwrap();
        let (tx, rx) = mpsc::channel();
        let mut w = watcher(Duration::from_millis(100), move |burst| {
            tx.send(burst.len()).unwrap();
        })
        .unwrap();
        w.watch(dir.path(), RecursiveMode::Recursive).unwrap();
        for i in 0..5 {
            std::fs::write(dir.path().join("a.policy"), format!("// {i}\n")).unwrap();
        }
        let n = rx.recv_timeout(Duration::from_secs(10)).expect("no burst");
        assert!(n >= 5, "one burst holds every event: {n}");
        // Nothing more happened, so nothing more is handed over.
        assert!(rx.recv_timeout(Duration::from_millis(400)).is_err());
    }

    #[test]
    fn the_thread_ends_when_the_watcher_is_dropped() {
        let (tx, rx) = mpsc::channel::<()>();
        let w = watcher(Duration::from_millis(10), move |_| {
            let _ = &tx;
        })
        .unwrap();
        drop(w);
        // The handler (and with it the sender) is dropped when the thread ends.
        assert_eq!(
            rx.recv_timeout(Duration::from_secs(10)),
            Err(mpsc::RecvTimeoutError::Disconnected)
        );
    }
}
