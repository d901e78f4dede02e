//! Policy files that are symlinks to files outside the policy directory
//! (`policies/main.policy -> /etc/switchyard/main.policy`): their targets are
//! watched too.
//!
//! The directory watch sees a link being made, removed or replaced, but not a write
//! to the file it points to: that happens in another directory. So every link is
//! followed hop by hop, and each hop that lands outside the directory is watched
//! through its own directory (never the file itself: an editor's temp-and-rename
//! save would silently end a watch on the file, ENGINE-NOTES). An event there
//! counts only when it names one of those hops, so a busy directory such as `/tmp`
//! holding a target triggers no rebuild for its other files.
//!
//! Links change (`ln -sf`, a new file in the directory), so the hops are resolved
//! again before every rebuild reads the files ([`LinkWatch::refresh`]), and the
//! directories no hop needs any more are unwatched. A hop inside the policy
//! directory needs nothing: the directory's recursive watch already sees it (the
//! Kubernetes ConfigMap layout, `main.policy -> ..data/main.policy`).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, Weak};

use notify::{RecommendedWatcher, RecursiveMode, Watcher as _};

use crate::routing::policy::is_policy_file;

/// Most hops followed from one link (Linux's own limit is 40).
const MAX_HOPS: usize = 40;

/// The watches on the outside targets of a policy directory's symlinked files.
#[derive(Debug, Default)]
pub(super) struct LinkWatch {
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    /// The policy directory's watcher (set by [`LinkWatch::attach`]).
    watcher: Weak<Mutex<Option<RecommendedWatcher>>>,
    /// The policy directory's parent as its watch names it, and that directory
    /// resolved: already watched, so never watched or unwatched here.
    parent: Option<(PathBuf, PathBuf)>,
    /// Directories watched for hops.
    dirs: BTreeSet<PathBuf>,
    /// The hops, as the events of their directory's watch name them.
    hops: BTreeSet<PathBuf>,
}

impl LinkWatch {
    /// Adds and removes the outside targets' watches through `watcher`, the one
    /// whose watch on `parent` (the policy directory's parent, as watched) already
    /// exists.
    pub(super) fn attach(
        &self,
        watcher: Weak<Mutex<Option<RecommendedWatcher>>>,
        parent: Option<PathBuf>,
    ) {
        let mut g = self.lock();
        g.parent = parent.map(|p| {
            let real = std::fs::canonicalize(&p).unwrap_or_else(|_| p.clone());
            (p, real)
        });
        g.watcher = watcher;
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether an event on `path` is a change of some link's outside target.
    pub(super) fn matches(&self, path: &Path) -> bool {
        self.lock().hops.contains(path)
    }

    /// Resolves the links under `dir` again and watches the directories of the hops
    /// outside it, unwatching those no longer needed. Call it before reading the
    /// files, so that a write after the read is seen.
    pub(super) fn refresh(&self, dir: &Path) {
        let mut g = self.lock();
        let parent = g.parent.clone();
        let mut hops = BTreeSet::new();
        let mut dirs = BTreeSet::new();
        for hop in outside_hops(dir) {
            let (Some(d), Some(name)) = (hop.parent(), hop.file_name()) else {
                continue;
            };
            match &parent {
                // Events there are named by the parent's watch, with its spelling.
                Some((as_watched, real)) if d == real => {
                    hops.insert(as_watched.join(name));
                }
                _ => {
                    dirs.insert(d.to_path_buf());
                    hops.insert(hop);
                }
            }
        }
        if let Some(shared) = g.watcher.upgrade() {
            let mut w = shared.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(w) = w.as_mut() {
                for gone in g.dirs.difference(&dirs) {
                    let _ = w.unwatch(gone);
                }
                for new in dirs.difference(&g.dirs) {
                    if let Err(e) = w.watch(new, RecursiveMode::NonRecursive) {
                        tracing::warn!(dir = %new.display(), error = %e, "cannot watch the directory of a symlinked policy file's target; its saves need SIGHUP");
                    }
                }
            }
        }
        g.dirs = dirs;
        g.hops = hops;
    }
}

/// Every hop of every policy-file symlink under `dir` (recursively, as the files are
/// read) that lies outside `dir`: its directory resolved, joined with its name.
/// Dangling links count (their target may appear).
fn outside_hops(dir: &Path) -> Vec<PathBuf> {
    let Ok(root) = std::fs::canonicalize(dir) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for link in links(dir) {
        let mut at = link;
        for _ in 0..MAX_HOPS {
            let Ok(to) = std::fs::read_link(&at) else {
                break;
            };
            let next = match at.parent() {
                Some(p) if to.is_relative() => p.join(&to),
                _ => to,
            };
            let (Some(d), Some(name)) = (next.parent(), next.file_name()) else {
                break;
            };
            let Ok(real) = std::fs::canonicalize(d) else {
                break; // Its directory is missing: nothing to watch there.
            };
            let hop = real.join(name);
            if !hop.starts_with(&root) {
                out.push(hop);
            }
            at = next;
        }
    }
    out
}

/// The symlinks named like policy files under `dir`, through real subdirectories
/// and skipping hidden names, as [`crate::routing::policy::policy_files`] walks.
fn links(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            match entry.file_type() {
                Ok(t) if t.is_dir() && is_visible(&path) => stack.push(path),
                Ok(t) if t.is_symlink() && is_policy_file(&path) => out.push(path),
                _ => {}
            }
        }
    }
    out
}

fn is_visible(path: &Path) -> bool {
    !path
        .file_name()
        .and_then(|n| n.to_str())
        .is_some_and(|n| n.starts_with('.'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_hops_outside_the_directory_are_listed() {
        let root = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(root.path()).unwrap();
        let (dir, out) = (root.join("policies"), root.join("elsewhere"));
        std::fs::create_dir_all(dir.join("..2024_a")).unwrap();
        std::fs::create_dir_all(&out).unwrap();
        std::fs::write(out.join("target.policy"), "").unwrap();
        std::fs::write(dir.join("..2024_a/cm.policy"), "").unwrap();
        // Outside, through a relative second link outside too.
        std::os::unix::fs::symlink(out.join("via.policy"), dir.join("a.policy")).unwrap();
        std::os::unix::fs::symlink("target.policy", out.join("via.policy")).unwrap();
        // Dangling, outside.
        std::os::unix::fs::symlink(out.join("later.policy"), dir.join("b.policy")).unwrap();
        // A ConfigMap: inside.
        std::os::unix::fs::symlink("..2024_a", dir.join("..data")).unwrap();
        std::os::unix::fs::symlink("..data/cm.policy", dir.join("cm.policy")).unwrap();
        let mut hops = outside_hops(&dir);
        hops.sort();
        assert_eq!(
            hops,
            vec![
                out.join("later.policy"),
                out.join("target.policy"),
                out.join("via.policy"),
            ]
        );
    }
}
