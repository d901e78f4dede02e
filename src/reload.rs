//! Hot reload: watch the policy directory, rebuild off the request path, swap the new
//! set in atomically, and never serve a broken one.
//!
//! Why the directory and not the files: editors save by writing in place, by writing a
//! temp file and renaming it over the original (vim, VS Code, JetBrains), or by delete
//! and create; a watch on a file dies at the first rename. The directory watch sees all
//! three, and Kubernetes ConfigMap updates (a `..data` symlink swap) too. A policy file
//! that is a symlink to a file outside the directory is the exception: its target's
//! own directory is watched as well (`links`).
//!
//! Pipeline, on any relevant event (debounced), on SIGHUP, or on request:
//! read every file → content hash (unchanged: stop, unless forced) → parse → check →
//! self-check (the set's own policy tests) → swap the [`PolicySnapshot`] into the
//! [`PolicyCell`] the gateway reads. Requests load the snapshot once when they start and finish on
//! it, so the old set (and later its JIT code) is freed when its last request ends.
//! A failure changes nothing that serves traffic: it is logged with rendered
//! diagnostics and shown by `GET /admin/policies` (`admin::policies`).
//!
//! A directory that is gone and one that no longer holds any `.policy` file are the
//! same case, and both are refused while operator files serve: a deploy that deletes
//! and copies (`rm -r policies && cp -r new policies`, `rm *.policy && cp ...`)
//! passes through that state, and serving the built-ins alone for its duration would
//! route traffic no file asked for. To serve only the built-in strategies, leave an
//! empty `.policy` file in the directory. The log and `GET /admin/policies` say which
//! set serves ([`PolicySnapshot::serving`]).
//!
//! At most one rebuild runs at a time: triggers only set a permit on a `Notify`, so a
//! burst of saves during a rebuild coalesces into exactly one more rebuild.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use notify::{RecommendedWatcher, RecursiveMode, Watcher as _};
use serde::Serialize;
use tokio::sync::Notify;

use crate::config::Config;
use crate::policy::Registry;

mod debounce;
mod links;
use crate::routing::policy::{
    compile_after, read_sources, registry_from_config, LoadError, PolicyCell, PolicySnapshot,
    BUILTIN,
};
use crate::telemetry::{RELOADS, RELOAD_DURATION, VERSION_INFO};

/// The advice of a refused reload that found no operator policy file.
const EMPTY_HINT: &str = "refused while operator policy files serve (to serve the built-in strategies only, leave an empty .policy file there)";

/// How many of `sources` are embedded built-ins (named as [`BUILTIN`] names them).
fn sources_builtin_count(sources: &crate::policy::SourceMap) -> usize {
    sources
        .files()
        .filter(|(_, f)| BUILTIN.iter().any(|(b, _)| *b == f.name))
        .count()
}

/// Keeps the policy watch alive; dropping it stops the watch.
pub struct WatchGuard(Arc<Mutex<Option<RecommendedWatcher>>>);

impl Drop for WatchGuard {
    fn drop(&mut self) {
        let mut g = self.0.lock().unwrap_or_else(|p| p.into_inner());
        g.take();
    }
}

/// How long the policy directory must stay quiet after a file event before the set
/// is rebuilt (`debounce`). Editors write a file within a millisecond (in place, or
/// a temp file renamed over it), and a burst that straddles the wait only costs one
/// more rebuild (the permit coalesces triggers, and unchanged files stop at the
/// content hash), so the wait is short: it is part of every save's time to serving.
pub const DEBOUNCE: Duration = Duration::from_millis(10);

/// How long a rebuild from a file event waits, and then reads the files again, when
/// an operator file that had text in the serving set is empty now (blank):
/// an in-place save (`open(O_TRUNC)`, then write) seen between its truncation and
/// its write would otherwise serve an empty file, a valid set without the
/// operator's routes, until the write's own event (reliability attack, 2026-12-06:
/// 45-200 ms of requests routed by the built-ins alone). A file emptied on purpose
/// serves this much later; SIGHUP and `POST /admin/reload` do not wait.
pub const EMPTIED_SETTLE: Duration = Duration::from_secs(1);

/// The operator files of `serving` that had text (not blank) and are blank in
/// `sources` now.
fn emptied_files(serving: &PolicySnapshot, sources: &crate::policy::SourceMap) -> Vec<String> {
    let before = &serving.set().sources;
    sources
        .files()
        .filter(|(_, f)| f.text.trim().is_empty())
        .filter(|(_, f)| {
            before
                .files()
                .any(|(_, b)| b.name == f.name && !b.text.trim().is_empty())
        })
        .map(|(_, f)| f.name.clone())
        .collect()
}

/// The last reload failure.
#[derive(Debug, Clone, Serialize)]
pub struct ReloadError {
    /// When it happened, Unix milliseconds.
    pub at_unix_ms: u64,
    /// Rendered diagnostics (file:line:col, caret) or the I/O error.
    pub message: String,
}

/// Counters and the last error, shown by `GET /admin/policies`.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ReloadStatus {
    /// Reloads that swapped in a new set.
    pub ok: u64,
    /// Reloads refused (the previous set kept serving).
    pub failed: u64,
    /// Triggers whose files were unchanged.
    pub unchanged: u64,
    /// The last failure, cleared by the next successful reload.
    pub last_error: Option<ReloadError>,
    /// Duration of the last rebuild, ms.
    pub last_duration_ms: f64,
}

/// What one rebuild did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// A new version is serving.
    Swapped(String),
    /// Files unchanged; nothing done.
    Unchanged,
    /// Refused; the message is the rendered error.
    Failed(String),
}

/// The reload machinery of one gateway.
#[derive(Debug)]
pub struct Reloader {
    policy: PolicyCell,
    dir: Option<PathBuf>,
    registry: Registry,
    kick: Notify,
    force: AtomicBool,
    /// Held for the whole of a rebuild: one at a time, whoever asks.
    building: tokio::sync::Mutex<()>,
    /// The watched outside targets of symlinked policy files.
    links: Arc<links::LinkWatch>,
    /// Counters and last error.
    pub status: Mutex<ReloadStatus>,
}

/// Unix milliseconds of `t` (0 before the epoch).
pub fn unix_ms(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// `path` with `.` and `..` resolved lexically (a `..` drops the component before
/// it; symlinks are not followed, so a symlinked policy directory stays watched by
/// its own name).
fn normalized(path: &Path) -> PathBuf {
    use std::path::Component;
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            other => out.push(other.as_os_str()),
        }
    }
    out
}

/// Whether a changed path can matter: not an editor's swap, backup or temp file.
fn relevant(path: &Path) -> bool {
    let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
        return true;
    };
    if name.starts_with("..") {
        return true; // Kubernetes ConfigMap `..data` swaps.
    }
    !(name.starts_with('.')
        || name.ends_with('~')
        || name.ends_with(".swp")
        || name.ends_with(".swx")
        || name.ends_with(".tmp")
        || name == "4913")
}

impl Reloader {
    /// A reloader that swaps new sets into `policy`, reading `dir` (none: built-ins
    /// only) and checking against the registry of `config`.
    pub fn new(policy: PolicyCell, config: &Config, dir: Option<PathBuf>) -> Arc<Reloader> {
        let registry = registry_from_config(config);
        let version = policy.load().version.clone();
        metrics::gauge!(VERSION_INFO, "version" => version).set(1.0);
        Arc::new(Reloader {
            policy,
            dir,
            registry,
            kick: Notify::new(),
            force: AtomicBool::new(false),
            building: tokio::sync::Mutex::new(()),
            links: Arc::new(links::LinkWatch::default()),
            status: Mutex::new(ReloadStatus::default()),
        })
    }

    /// Asks for a rebuild; `force` rebuilds even when the files are unchanged (SIGHUP).
    pub fn request(&self, force: bool) {
        if force {
            self.force.store(true, Ordering::SeqCst);
        }
        self.kick.notify_one();
    }

    /// Marks the next [`Reloader::rebuild`] as forced (used by `POST /admin/reload`).
    pub fn request_sync_force(&self) {
        self.force.store(true, Ordering::SeqCst);
    }

    /// Serves rebuild requests, one at a time, forever.
    pub async fn run(self: Arc<Self>) {
        loop {
            self.kick.notified().await;
            self.rebuild().await;
        }
    }

    /// Rebuilds now and swaps if the set is new and valid.
    pub async fn rebuild(&self) -> Outcome {
        let _one_at_a_time = self.building.lock().await;
        let started = Instant::now();
        let force = self.force.swap(false, Ordering::SeqCst);
        let dir = self.dir.clone();
        let registry = self.registry.clone();
        let serving = self.policy.load_full();
        let current = serving.version.clone();
        let compare = current.clone();
        let had_operator_files = serving.operator_files().next().is_some();
        let serving_now = serving.serving();
        let links = Arc::clone(&self.links);
        let built = tokio::task::spawn_blocking(move || {
            if let Some(d) = dir.as_deref().filter(|d| !d.is_dir()) {
                return Err(LoadError::Io(format!(
                    "the policy directory {} is gone; {}",
                    d.display(),
                    EMPTY_HINT
                )));
            }
            // Before the read: a link made or changed since the last rebuild has its
            // target watched by the time the file is read through it.
            if let Some(d) = dir.as_deref() {
                links.refresh(d);
            }
            let reading = Instant::now();
            let mut sources = read_sources(dir.as_deref())?;
            tracing::debug!(
                read_ms = reading.elapsed().as_secs_f64() * 1e3,
                "policy files read"
            );
            if !force && crate::policy::check::version(&sources) == compare {
                return Ok(None);
            }
            if !force {
                let emptied = emptied_files(&serving, &sources);
                if !emptied.is_empty() {
                    // An in-place save truncates the file and then writes it: caught
                    // between the two, it is an empty file, a valid set that routes
                    // nothing of the operator's. Its content gets time to arrive.
                    tracing::info!(
                        files = %emptied.join(", "),
                        wait_ms = EMPTIED_SETTLE.as_millis() as u64,
                        "a serving policy file is empty now; reading it again before serving it empty"
                    );
                    std::thread::sleep(EMPTIED_SETTLE);
                    sources = read_sources(dir.as_deref())?;
                    if crate::policy::check::version(&sources) == compare {
                        return Ok(None);
                    }
                }
            }
            let builtin_only = sources.files().count() == sources_builtin_count(&sources);
            if let (Some(d), true, true) = (dir.as_deref(), builtin_only, had_operator_files) {
                return Err(LoadError::Io(format!(
                    "the policy directory {} holds no .policy file; {}",
                    d.display(),
                    EMPTY_HINT
                )));
            }
            compile_after(sources, &registry, Some(&serving)).map(Some)
        })
        .await;
        let elapsed = started.elapsed();
        let outcome = match built {
            Ok(Ok(Some(snap))) => self.swap(snap, &current),
            Ok(Ok(None)) => Outcome::Unchanged,
            Ok(Err(e)) => Outcome::Failed(e.to_string()),
            Err(e) => Outcome::Failed(format!("the rebuild task failed: {e}")),
        };
        let label = match &outcome {
            Outcome::Swapped(_) => "ok",
            Outcome::Unchanged => "unchanged",
            Outcome::Failed(_) => "failed",
        };
        metrics::counter!(RELOADS, "outcome" => label).increment(1);
        metrics::histogram!(RELOAD_DURATION).record(elapsed.as_secs_f64());
        let mut st = self.status.lock().unwrap_or_else(|p| p.into_inner());
        st.last_duration_ms = elapsed.as_secs_f64() * 1e3;
        match &outcome {
            Outcome::Swapped(v) => {
                st.ok += 1;
                st.last_error = None;
                let now = self.policy.load().serving();
                tracing::info!(policy = %v, previous = %current, ms = st.last_duration_ms, "policy reloaded: serving {now}");
            }
            Outcome::Unchanged => {
                st.unchanged += 1;
                // The files are the serving set again (a broken save was restored):
                // the last error no longer describes anything on disk.
                st.last_error = None;
            }
            Outcome::Failed(message) => {
                st.failed += 1;
                st.last_error = Some(ReloadError {
                    at_unix_ms: unix_ms(SystemTime::now()),
                    message: message.clone(),
                });
                tracing::error!(policy = %current, "policy reload refused; still serving {serving_now}\n{message}");
            }
        }
        outcome
    }

    fn swap(&self, snap: PolicySnapshot, previous: &str) -> Outcome {
        let version = snap.version.clone();
        self.policy.store(Arc::new(snap));
        metrics::gauge!(VERSION_INFO, "version" => previous.to_string()).set(0.0);
        metrics::gauge!(VERSION_INFO, "version" => version.clone()).set(1.0);
        Outcome::Swapped(version)
    }

    /// Starts watching the policy directory; the returned guard stops the watch when
    /// dropped. `None` when there is no directory to watch.
    ///
    /// The parent directory is watched too (not recursively): a policy directory that
    /// is deleted and created again (`rm -r policies && cp -r new policies`, a
    /// checkout) takes its old watch with it, so when it reappears it is watched
    /// again and the set is rebuilt.
    ///
    /// # Errors
    /// The watcher's error (for example, too many inotify watches).
    pub fn watch(self: &Arc<Self>) -> Result<Option<WatchGuard>, String> {
        let Some(dir) = self.dir.clone() else {
            return Ok(None);
        };
        // Absolute and without `.`/`..` (symlinks kept), so the parent is the real
        // parent and event paths compare.
        let dir = normalized(&std::path::absolute(&dir).unwrap_or(dir));
        let me = Arc::downgrade(self);
        let shared: Arc<Mutex<Option<RecommendedWatcher>>> = Arc::new(Mutex::new(None));
        let handle = Arc::downgrade(&shared);
        let watched = dir.clone();
        let debouncer = debounce::watcher(DEBOUNCE, move |burst| {
            let Some(me) = me.upgrade() else { return };
            let mut events = Vec::with_capacity(burst.len());
            let mut failed = false;
            for res in burst {
                match res {
                    Ok(e) => events.push(e),
                    Err(e) => {
                        tracing::warn!(error = %e, "policy watcher error");
                        failed = true;
                    }
                }
            }
            let reappeared = events.iter().any(|e| {
                matches!(
                    e.kind,
                    notify::EventKind::Create(_)
                        | notify::EventKind::Modify(notify::event::ModifyKind::Name(_))
                ) && e.paths.contains(&watched)
            });
            if reappeared {
                // Watch again off this thread, as a reload may take a while and the
                // watch's lock is the guard's.
                let (handle, dir) = (handle.clone(), watched.clone());
                let me = Arc::clone(&me);
                std::thread::spawn(move || {
                    if let Some(shared) = handle.upgrade() {
                        let mut guard = shared.lock().unwrap_or_else(|p| p.into_inner());
                        if let Some(d) = guard.as_mut() {
                            // Drop the old watch first: when the path now names
                            // another directory (a symlink swapped, a directory
                            // renamed away and another renamed in) the old
                            // directory's watches stay alive otherwise, and its
                            // saves keep triggering rebuilds. Gone already (a
                            // deleted directory) is fine.
                            let _ = d.unwatch(&dir);
                            match d.watch(&dir, RecursiveMode::Recursive) {
                                Ok(()) => tracing::info!(dir = %dir.display(), "policy directory reappeared; watching it again"),
                                Err(e) => tracing::warn!(dir = %dir.display(), error = %e, "cannot watch the policy directory again"),
                            }
                        }
                    }
                    me.request(false);
                });
                return;
            }
            // Reads (open, close-after-read) are access events: the rebuild's own
            // reads would otherwise trigger the next rebuild, forever.
            let changed = events.iter().any(|e| {
                !matches!(e.kind, notify::EventKind::Access(_))
                    && e.paths.iter().any(|p| {
                        (p.starts_with(&watched) && relevant(p)) || me.links.matches(p)
                    })
            });
            if changed || failed {
                me.request(false);
            }
        })
        .map_err(|e| format!("cannot start the policy watcher: {e}"))?;
        let mut guard = shared.lock().unwrap_or_else(|p| p.into_inner());
        let d = guard.insert(debouncer);
        d.watch(&dir, RecursiveMode::Recursive)
            .map_err(|e| format!("cannot watch {}: {e}", dir.display()))?;
        let parent = dir.parent().filter(|p| !p.as_os_str().is_empty());
        let mut parent_watched = None;
        if let Some(parent) = parent {
            match d.watch(parent, RecursiveMode::NonRecursive) {
                Ok(()) => parent_watched = Some(parent.to_path_buf()),
                Err(e) => {
                    tracing::warn!(dir = %parent.display(), error = %e, "cannot watch the policy directory's parent; a deleted and recreated policy directory needs SIGHUP")
                }
            }
        }
        drop(guard);
        // Symlinked files' outside targets; from now on every rebuild refreshes them.
        self.links.attach(Arc::downgrade(&shared), parent_watched);
        self.links.refresh(&dir);
        tracing::info!(dir = %dir.display(), "watching policies for changes");
        Ok(Some(WatchGuard(shared)))
    }

    /// The set serving now.
    pub fn current(&self) -> Arc<PolicySnapshot> {
        self.policy.load_full()
    }

    /// The watched policy directory (`None`: built-ins only).
    pub fn dir(&self) -> Option<&Path> {
        self.dir.as_deref()
    }

    /// Counters and the last error, as of now.
    pub fn status(&self) -> ReloadStatus {
        self.status
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn policy_directories_are_normalized_lexically() {
        for (given, want) in [
            ("/srv/app/policies", "/srv/app/policies"),
            ("/srv/app/policies/", "/srv/app/policies"),
            ("/srv/app/./policies", "/srv/app/policies"),
            ("/srv/app/policies/..", "/srv/app"),
            ("/srv/app/x/../policies", "/srv/app/policies"),
            ("/..", "/"),
        ] {
            assert_eq!(normalized(Path::new(given)), PathBuf::from(want), "{given}");
        }
    }

    #[test]
    fn editor_droppings_are_ignored() {
        assert!(relevant(Path::new("/p/a.policy")));
        assert!(relevant(Path::new("/p/..data")));
        assert!(relevant(Path::new("/p/sub")));
        for junk in [
            ".a.policy.swp",
            "a.policy~",
            "4913",
            ".#a.policy",
            "a.policy.tmp",
        ] {
            assert!(!relevant(Path::new(junk)), "{junk}");
        }
    }
}
