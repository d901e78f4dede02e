//! A file read at startup and again when it changes, for the key file and the
//! JWKS file.
//!
//! Polled, not watched: [`Reloading::get`] looks at the file's modification time and
//! length at most once per [`POLL`] (one `stat`, on the request that happens to come
//! first after the interval), and re-reads it when either changed. That bounds how
//! long a new key takes to work (one [`POLL`]) without a watcher thread per file,
//! and it survives the rename-over saves of editors and Kubernetes `..data` swaps,
//! which can kill a watch on the file itself (see `crate::reload`). A file that no
//! longer parses keeps the previous contents serving, with an error logged. A file
//! that reads as blank (for the key file: no keys) while the serving contents are not
//! is taken only once it has stayed so for [`SETTLE`]: an editor's in-place save
//! truncates the file before writing it, and a look in between read the key file as
//! "no keys", refusing every client with 401 until the next look (found by the
//! admission attack of 2026-12-08).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use arc_swap::ArcSwap;

/// Longest time between two looks at a file.
pub const POLL: Duration = Duration::from_millis(500);

/// How long a file that reads as blank must stay unchanged before it replaces
/// contents that are not ([`Reloading::settling_when`]).
pub const SETTLE: Duration = Duration::from_secs(1);

/// Reads one file into a `T`.
pub type Parse<T> = fn(&Path) -> Result<T, Vec<String>>;

/// The current contents of one file, as `T`.
pub struct Reloading<T> {
    path: PathBuf,
    parse: Parse<T>,
    current: ArcSwap<T>,
    stamp: Mutex<Option<(SystemTime, u64)>>,
    epoch: Instant,
    last_check_ms: AtomicU64,
    /// Whether contents read are blank ([`Reloading::settling_when`]).
    blank: Option<fn(&T) -> bool>,
    /// A blank read not taken yet: the file's stamp then and when it was first seen.
    pending: Mutex<Option<((SystemTime, u64), Instant)>>,
}

impl<T> std::fmt::Debug for Reloading<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reloading")
            .field("path", &self.path)
            .finish()
    }
}

fn stamp(path: &Path) -> Option<(SystemTime, u64)> {
    let m = std::fs::metadata(path).ok()?;
    Some((m.modified().ok()?, m.len()))
}

impl<T> Reloading<T> {
    /// Reads `path` with `parse` now.
    ///
    /// # Errors
    /// The problems `parse` found (startup refuses a bad file).
    pub fn new(path: PathBuf, parse: Parse<T>) -> Result<Reloading<T>, Vec<String>> {
        let st = stamp(&path);
        let first = parse(&path)?;
        Ok(Reloading {
            path,
            parse,
            current: ArcSwap::from_pointee(first),
            stamp: Mutex::new(st),
            epoch: Instant::now(),
            last_check_ms: AtomicU64::new(0),
            blank: None,
            pending: Mutex::new(None),
        })
    }

    /// Takes contents for which `blank` holds, while the serving ones are not blank,
    /// only once the file has stayed unchanged for [`SETTLE`] (see the module doc).
    #[must_use]
    pub fn settling_when(mut self, blank: fn(&T) -> bool) -> Reloading<T> {
        self.blank = Some(blank);
        self
    }

    /// The current contents, re-read first if the file changed and [`POLL`] passed
    /// since the last look.
    pub fn get(&self) -> Arc<T> {
        let now = self.epoch.elapsed().as_millis() as u64;
        let last = self.last_check_ms.load(Ordering::Relaxed);
        if now.saturating_sub(last) >= POLL.as_millis() as u64
            && self
                .last_check_ms
                .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        {
            self.refresh();
        }
        self.current.load_full()
    }

    /// Re-reads the file if its modification time or length changed (a blank read
    /// waits for [`SETTLE`], see [`Reloading::settling_when`]).
    pub fn refresh(&self) {
        let st = stamp(&self.path);
        let mut seen = self.stamp.lock().unwrap_or_else(|p| p.into_inner());
        if st == *seen {
            return;
        }
        match (self.parse)(&self.path) {
            Ok(v) => {
                let blank = self
                    .blank
                    .is_some_and(|b| b(&v) && !b(&self.current.load()));
                let mut pending = self.pending.lock().unwrap_or_else(|p| p.into_inner());
                if let (true, Some(st)) = (blank, st) {
                    match *pending {
                        Some((at, since)) if at == st && since.elapsed() >= SETTLE => {}
                        Some((at, _)) if at == st => return,
                        _ => {
                            *pending = Some((st, Instant::now()));
                            tracing::warn!(
                                file = %self.path.display(),
                                "the file reads as empty; the previous contents keep serving unless it stays so for {} ms (a save caught halfway)",
                                SETTLE.as_millis()
                            );
                            return;
                        }
                    }
                }
                *pending = None;
                *seen = st;
                self.current.store(Arc::new(v));
                tracing::info!(file = %self.path.display(), "reloaded");
            }
            Err(es) => {
                *seen = st;
                tracing::error!(
                    file = %self.path.display(),
                    "reload refused; the previous contents keep serving: {}",
                    es.join("; ")
                );
            }
        }
    }
}
