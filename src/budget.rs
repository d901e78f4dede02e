//! The gateway-wide budget of buffered request body bytes (`server.max_buffered_bytes`,
//! issue 17 "memory bound").
//!
//! Ingress charges every chunk of a request body as it arrives, before keeping it, so
//! however many clients send large bodies at once (or trickle them in slowly), the
//! bytes held never exceed the budget. A chunk that finds no room waits for other
//! requests to release theirs, up to [`WAIT`] for the whole body; then the request
//! gets 503 `overloaded` with `Retry-After` ([`BodyBudget::exhausted`]). A [`Charge`]
//! gives its bytes back when dropped: when the response body ends (the request's
//! buffers, the parsed request and its upstream copies, are gone by then), or when
//! the client goes away mid-body and the request future is dropped.
//!
//! What the budget counts is the body as received. Parsing and the upstream request
//! hold further copies of parts of it for the duration of the request; the budget
//! bounds their number too, since each belongs to a charged body.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Notify;

use crate::error::{Code, ErrorKind, GatewayError};

/// Longest a request waits in total for room in the budget before its 503.
pub const WAIT: Duration = Duration::from_secs(2);

/// The `Retry-After` of the 503 sent when the budget stays full.
pub const RETRY_AFTER: Duration = Duration::from_secs(1);

/// Largest default budget: 512 MiB.
pub const MAX_DEFAULT: usize = 512 * 1024 * 1024;

/// The default budget for this machine: the smaller of its memory / 8 and
/// [`MAX_DEFAULT`]. Memory is the cgroup's limit (`/sys/fs/cgroup/memory.max`) when
/// one is set, else `MemTotal` of `/proc/meminfo`; when neither can be read, 512 MiB.
/// Never below `floor` (`server.max_body_bytes`: one body of the largest accepted
/// size always fits).
pub fn machine_default(floor: usize) -> usize {
    let cgroup = std::fs::read_to_string("/sys/fs/cgroup/memory.max")
        .ok()
        .and_then(|s| s.trim().parse::<u64>().ok());
    let total = cgroup.or_else(|| {
        let info = std::fs::read_to_string("/proc/meminfo").ok()?;
        let line = info.lines().find(|l| l.starts_with("MemTotal:"))?;
        let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
        Some(kib * 1024)
    });
    let by_memory = total.map_or(MAX_DEFAULT, |t| {
        usize::try_from(t / 8).unwrap_or(usize::MAX)
    });
    by_memory.min(MAX_DEFAULT).max(floor)
}

/// The budget: a byte count shared by every request of the gateway.
#[derive(Debug)]
pub struct BodyBudget {
    limit: usize,
    used: AtomicUsize,
    freed: Notify,
}

impl BodyBudget {
    /// A budget of `limit` bytes.
    pub fn new(limit: usize) -> Arc<BodyBudget> {
        Arc::new(BodyBudget {
            limit,
            used: AtomicUsize::new(0),
            freed: Notify::new(),
        })
    }

    /// The budget in bytes.
    pub fn limit(&self) -> usize {
        self.limit
    }

    /// Bytes charged now, across every request.
    pub fn used(&self) -> usize {
        self.used.load(Ordering::Acquire)
    }

    /// An empty charge against this budget, for one request.
    pub fn charge(self: &Arc<Self>) -> Charge {
        Charge {
            budget: self.clone(),
            bytes: 0,
        }
    }

    /// Takes `n` bytes if they fit now.
    fn try_take(&self, n: usize) -> bool {
        self.used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |u| {
                u.checked_add(n).filter(|t| *t <= self.limit)
            })
            .is_ok()
    }

    fn give_back(&self, n: usize) {
        if n > 0 {
            self.used.fetch_sub(n, Ordering::AcqRel);
            self.freed.notify_waiters();
        }
    }

    /// The 503 of a request whose body found no room within [`WAIT`].
    pub fn exhausted(&self) -> GatewayError {
        GatewayError::new(
            ErrorKind::Overloaded,
            format!(
                "the gateway is holding as many request bodies as its buffer budget allows (server.max_buffered_bytes = {} bytes); retry shortly",
                self.limit
            ),
        )
        .with_code(Code::Overloaded)
        .with_retry_after(Some(RETRY_AFTER))
    }
}

/// The bytes one request holds of the [`BodyBudget`]; released when dropped.
#[derive(Debug)]
pub struct Charge {
    budget: Arc<BodyBudget>,
    bytes: usize,
}

impl Charge {
    /// Bytes held.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// An empty charge on the same budget.
    pub fn empty(&self) -> Charge {
        self.budget.charge()
    }

    /// Adds `n` bytes to the charge, waiting for room until `deadline`.
    ///
    /// # Errors
    /// [`BodyBudget::exhausted`] when `n` bytes did not fit by `deadline` (or can never
    /// fit: more than the whole budget).
    pub async fn add(
        &mut self,
        n: usize,
        deadline: tokio::time::Instant,
    ) -> Result<(), GatewayError> {
        loop {
            // Registered before the attempt, so a release between a failed attempt
            // and the wait still wakes this one.
            let freed = self.budget.freed.notified();
            if self.budget.try_take(n) {
                self.bytes += n;
                return Ok(());
            }
            if n > self.budget.limit || tokio::time::timeout_at(deadline, freed).await.is_err() {
                return Err(self.budget.exhausted());
            }
        }
    }
}

impl Drop for Charge {
    fn drop(&mut self) {
        self.budget.give_back(self.bytes);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn charges_wait_for_room_and_drops_release() {
        let b = BodyBudget::new(100);
        let deadline = tokio::time::Instant::now() + WAIT;
        let mut first = b.charge();
        first.add(60, deadline).await.unwrap();
        first.add(40, deadline).await.unwrap();
        assert_eq!(b.used(), 100);
        let mut second = b.charge();
        // No room, nothing released: the wait ends in the 503.
        let e = second.add(1, deadline).await.unwrap_err();
        assert_eq!(e.status(), 503);
        assert_eq!(e.code, Some(Code::Overloaded));
        assert_eq!(e.retry_after, Some(RETRY_AFTER));
        // A release wakes a waiter.
        let waiter = {
            let b = b.clone();
            tokio::spawn(async move {
                let mut c = b.charge();
                let deadline = tokio::time::Instant::now() + WAIT;
                c.add(50, deadline).await.map(|_| c.bytes())
            })
        };
        tokio::task::yield_now().await;
        drop(first);
        assert_eq!(waiter.await.unwrap().unwrap(), 50);
        assert_eq!(b.used(), 0, "the waiter's charge was dropped with its task");
        // More than the whole budget never fits.
        assert!(b.charge().add(101, deadline).await.is_err());
    }

    #[test]
    fn the_machine_default_is_bounded() {
        let d = machine_default(10);
        assert!((10..=MAX_DEFAULT).contains(&d), "{d}");
        assert_eq!(machine_default(MAX_DEFAULT + 1), MAX_DEFAULT + 1);
    }
}
