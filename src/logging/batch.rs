//! The access file's writer: lines appended to one shared buffer, written to the file
//! in batches by a background thread.
//!
//! Why not a queue of lines: `tracing-appender`'s non-blocking writer sent every line
//! as its own allocation through a channel and woke its thread for about every second
//! line; the thread wrote each line with its own `write(2)` and, waiting for the next,
//! spun on `sched_yield(2)`. Measured under `benches/load` (64 connections, issue 17)
//! that was one `write`, 1.4 `sched_yield` and 0.5 thread wake-ups per request, and
//! 10% of the gateway's CPU on the writer thread. Here a request appends its line
//! under a short lock (a copy of a few hundred bytes); only the line that finds the
//! buffer empty wakes the thread, which then waits [`FLUSH_DELAY`] for more lines and
//! writes everything pending with one `write_all`. Under load that is one wake-up and
//! one write per [`FLUSH_DELAY`]; a line reaches the file at most that much later
//! (nginx's `access_log ... buffer= flush=` makes the same trade).
//!
//! Bounded: when [`MAX_PENDING_BYTES`] are waiting (the disk cannot keep up), new
//! lines are dropped whole and counted ([`BatchFile::dropped`]); a line is never cut.

use std::io::Write;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Duration;

/// How long the writer thread waits, after the first line of a batch arrives, for
/// more lines before it writes the batch: the most a line waits for the file in
/// normal operation.
pub const FLUSH_DELAY: Duration = Duration::from_millis(20);

/// Bytes of access lines that may wait for the writer before new lines are dropped:
/// 8 MiB, about 16,000 ordinary lines (a line with bodies of 4 KiB is under 10 KiB).
pub const MAX_PENDING_BYTES: usize = 8 * 1024 * 1024;

/// Pending bytes at which the writer is woken before [`FLUSH_DELAY`] is over, so a
/// burst is written in pieces of about this size rather than held until the bound.
const EARLY_FLUSH_BYTES: usize = 1024 * 1024;

/// Capacity a buffer keeps after a batch is written; a burst's larger buffer is
/// given back, so the writer holds at most about twice this between bursts.
const KEEP_CAPACITY: usize = 256 * 1024;

/// What the requests and the writer thread share.
#[derive(Default)]
struct Shared {
    state: Mutex<State>,
    /// Signalled when a line finds the buffer empty, when the pending bytes reach
    /// [`EARLY_FLUSH_BYTES`], and at close.
    wake: Condvar,
    dropped: AtomicUsize,
}

#[derive(Default)]
struct State {
    pending: Vec<u8>,
    closing: bool,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock leaves a buffer of whole lines (appending
        // cannot fail halfway), so a poisoned lock is still usable.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Appends one whole line, or drops and counts it when the buffer is full or
    /// the file is closed.
    fn append(&self, line: &[u8]) {
        let mut st = self.lock();
        if st.closing || st.pending.len() + line.len() > MAX_PENDING_BYTES {
            drop(st);
            self.dropped.fetch_add(1, Ordering::Relaxed);
            return;
        }
        let before = st.pending.len();
        st.pending.extend_from_slice(line);
        let after = st.pending.len();
        drop(st);
        if before == 0 || (before < EARLY_FLUSH_BYTES && after >= EARLY_FLUSH_BYTES) {
            self.wake.notify_one();
        }
    }
}

/// The open access file: the buffer requests append to and the thread that writes it.
pub struct BatchFile {
    shared: Arc<Shared>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl BatchFile {
    /// Starts the writer thread (named `thread_name`) over `sink`.
    ///
    /// # Errors
    /// The thread cannot be spawned (the system's reason).
    pub fn start<W: Write + Send + 'static>(sink: W, thread_name: &str) -> std::io::Result<Self> {
        let shared = Arc::new(Shared::default());
        let for_thread = Arc::clone(&shared);
        let thread = std::thread::Builder::new()
            .name(thread_name.to_string())
            .spawn(move || write_batches(&for_thread, sink))?;
        Ok(BatchFile {
            shared,
            thread: Mutex::new(Some(thread)),
        })
    }

    /// A writer for one line (see [`LineWriter`]).
    pub fn writer(&self) -> LineWriter<'_> {
        LineWriter(&self.shared)
    }

    /// Lines dropped so far because [`MAX_PENDING_BYTES`] were waiting, or because
    /// they came after [`BatchFile::close`].
    pub fn dropped(&self) -> usize {
        self.shared.dropped.load(Ordering::Relaxed)
    }

    /// Writes what is pending, stops the writer thread and waits for it; lines
    /// appended afterwards are dropped. A second call does nothing.
    pub fn close(&self) {
        self.shared.lock().closing = true;
        self.shared.wake.notify_one();
        let thread = self.thread.lock().map(|mut t| t.take()).unwrap_or(None);
        if let Some(t) = thread {
            let _ = t.join();
        }
    }
}

/// The writer the access layer formats one event into: each `write` call is one
/// whole line (the `fmt` layer formats an event into its own buffer first and hands
/// it over with a single `write_all`), appended as a unit.
pub struct LineWriter<'a>(&'a Shared);

impl Write for LineWriter<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.append(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The writer thread: waits for a first line, gives the batch [`FLUSH_DELAY`] (less
/// when it reaches [`EARLY_FLUSH_BYTES`] or the file closes), then writes and
/// flushes everything pending at once. Ends after writing what is pending at close.
fn write_batches<W: Write>(shared: &Shared, mut sink: W) {
    let mut spare = Vec::new();
    let mut failing = false;
    loop {
        let mut st = shared
            .wake
            .wait_while(shared.lock(), |s| s.pending.is_empty() && !s.closing)
            .unwrap_or_else(|p| p.into_inner());
        if !st.closing {
            st = shared
                .wake
                .wait_timeout_while(st, FLUSH_DELAY, |s| {
                    !s.closing && s.pending.len() < EARLY_FLUSH_BYTES
                })
                .map(|(g, _)| g)
                .unwrap_or_else(|p| p.into_inner().0);
        }
        let closing = st.closing;
        std::mem::swap(&mut st.pending, &mut spare);
        drop(st);
        if !spare.is_empty() {
            match sink.write_all(&spare).and_then(|()| sink.flush()) {
                Ok(()) => failing = false,
                Err(e) => {
                    // Said once per run of failures, not once per batch.
                    if !failing {
                        tracing::warn!(error = %e, "cannot write the access log file; its lines are lost until a write succeeds");
                    }
                    failing = true;
                }
            }
            spare.clear();
            spare.shrink_to(KEEP_CAPACITY);
        }
        if closing {
            let st = shared.lock();
            if st.pending.is_empty() {
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A sink the test can read after the writer wrote to it, counting writes.
    #[derive(Clone, Default)]
    struct Sink(Arc<Mutex<(Vec<u8>, usize)>>);

    impl Write for Sink {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            let mut s = self.0.lock().unwrap();
            s.0.extend_from_slice(buf);
            s.1 += 1;
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn every_line_reaches_the_file_whole_and_in_order_at_close() {
        let sink = Sink::default();
        let file = BatchFile::start(sink.clone(), "test-access").unwrap();
        std::thread::scope(|s| {
            for t in 0..4 {
                let file = &file;
                s.spawn(move || {
                    for i in 0..2000 {
                        let line = format!("{{\"t\":{t},\"i\":{i}}}\n");
                        file.writer().write_all(line.as_bytes()).unwrap();
                    }
                });
            }
        });
        file.close();
        let (bytes, _) = sink.0.lock().unwrap().clone();
        let text = String::from_utf8(bytes).unwrap();
        let mut last = [-1i64; 4];
        let mut n = 0;
        for line in text.lines() {
            let v: serde_json::Value = serde_json::from_str(line).unwrap();
            let (t, i) = (v["t"].as_u64().unwrap() as usize, v["i"].as_i64().unwrap());
            assert_eq!(i, last[t] + 1, "thread {t}'s lines out of order");
            last[t] = i;
            n += 1;
        }
        assert_eq!(n, 8000);
        assert_eq!(file.dropped(), 0);
    }

    #[test]
    fn many_lines_are_written_in_few_writes() {
        let sink = Sink::default();
        let file = BatchFile::start(sink.clone(), "test-access").unwrap();
        for i in 0..1000 {
            file.writer()
                .write_all(format!("line {i}\n").as_bytes())
                .unwrap();
        }
        file.close();
        let (bytes, writes) = sink.0.lock().unwrap().clone();
        assert_eq!(bytes.iter().filter(|b| **b == b'\n').count(), 1000);
        // One batch per wake-up: far fewer writes than lines (the first line may
        // be written alone if the thread wakes before the rest are appended).
        assert!(writes < 100, "{writes} writes for 1,000 lines");
    }

    #[test]
    fn lines_beyond_the_bound_are_dropped_whole_and_counted() {
        /// A sink that blocks until released, so nothing pending is written.
        struct Stuck(Arc<(Mutex<bool>, Condvar)>, Sink);
        impl Write for Stuck {
            fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
                let (m, c) = &*self.0;
                let _g = c.wait_while(m.lock().unwrap(), |go| !*go).unwrap();
                self.1.write(buf)
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let gate = Arc::new((Mutex::new(false), Condvar::new()));
        let sink = Sink::default();
        let file = BatchFile::start(Stuck(Arc::clone(&gate), sink.clone()), "test-access").unwrap();
        let line = vec![b'x'; 1023]
            .into_iter()
            .chain([b'\n'])
            .collect::<Vec<u8>>();
        // Enough lines for two full buffers: the writer holds at most one batch
        // (stuck in the sink) and MAX_PENDING_BYTES more.
        let total = 2 * MAX_PENDING_BYTES / line.len() + 100;
        for _ in 0..total {
            file.writer().write_all(&line).unwrap();
        }
        assert!(file.dropped() >= 100, "dropped {}", file.dropped());
        *gate.0.lock().unwrap() = true;
        gate.1.notify_all();
        file.close();
        let (bytes, _) = sink.0.lock().unwrap().clone();
        assert_eq!(bytes.len() % line.len(), 0, "a line was cut");
        assert_eq!(bytes.len() / line.len() + file.dropped(), total);
        // After close, lines are dropped, not kept.
        file.writer().write_all(&line).unwrap();
        assert_eq!(bytes.len() / line.len() + file.dropped(), total + 1);
    }
}
