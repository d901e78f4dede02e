//! Open buffers and the policy sets they belong to.
//!
//! A policy set is a directory: the gateway loads every `.policy` file of its
//! `policies.dir`. For a file on disk the server finds the nearest `switchyard.yaml`
//! in the file's directory or above it (else the built-in config, as `switchyard lint`
//! without `--config`); when that config's `policies.dir` holds the file, the set is
//! that directory, read recursively as the gateway reads it; otherwise the set is the
//! `.policy` files of the file's own directory. Open buffers replace the disk text of
//! their files, and an open buffer not yet saved joins the set of its directory.
//!
//! Sets are read and checked with the same functions as `switchyard lint`
//! (`routing::policy::with_builtins`, `cli::policy::lint_context`,
//! `policy::lint::lint_sources_with`), so the codes, spans, messages and help match.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use lsp_types::Url;

use crate::config::Config;
use crate::policy::diagnostic::{codes, Diagnostic};
use crate::policy::lint::{lint_sources_with, LintOptions};
use crate::policy::{Registry, SourceMap};
use crate::routing::policy::{
    builtin_config, config_for_file, is_policy_file, lint_context, policy_dir, policy_files,
    read_policy_file, with_builtins, LoadError, BUILTIN,
};

/// The open buffers, by URI.
#[derive(Debug, Default)]
pub struct Documents {
    /// URI → (version, text).
    pub open: HashMap<Url, (i32, String)>,
}

/// Which files form a set.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum SetKey {
    /// A directory: recursive when it is the config's `policies.dir`.
    Dir {
        /// The directory (canonical when it exists).
        root: PathBuf,
        /// Whether subdirectories belong to the set.
        recursive: bool,
    },
    /// A buffer that is not a file (`untitled:`): a set of its own.
    Buffer(Url),
}

/// One policy set, read: its sources, the registry and options it is checked with,
/// and where each file came from.
pub struct SetView {
    /// Built-ins first, then the operator's files (named by absolute path or URI).
    pub sources: SourceMap,
    /// The registry of the set's config.
    pub registry: Registry,
    /// Lint options implied by the config.
    pub opts: LintOptions,
    /// The config file, when one was found (for definitions of models and
    /// endpoints).
    pub config_path: Option<PathBuf>,
    /// URI of each operator file, by source name; built-ins have none.
    pub uris: BTreeMap<String, Url>,
    /// Problems that stop the set from being checked (an invalid config, a file
    /// that is not UTF-8), as diagnostics to show on the set's open files.
    pub blocked: Vec<(Option<Url>, String, &'static str)>,
}

/// A canonical form of `path`: its directory canonicalized when it exists (the file
/// itself may not exist yet).
pub fn normalize(path: &Path) -> PathBuf {
    match (path.parent(), path.file_name()) {
        (Some(dir), Some(name)) => match std::fs::canonicalize(dir) {
            Ok(d) => d.join(name),
            Err(_) => path.to_path_buf(),
        },
        _ => path.to_path_buf(),
    }
}

/// The local path of a `file:` URI.
pub fn uri_path(uri: &Url) -> Option<PathBuf> {
    if uri.scheme() != "file" {
        return None;
    }
    uri.to_file_path().ok().map(|p| normalize(&p))
}

impl Documents {
    /// The set `uri` belongs to, with the config that governs it.
    pub fn set_key(&self, uri: &Url) -> (SetKey, Result<(Config, Option<PathBuf>), String>) {
        let Some(path) = uri_path(uri) else {
            return (SetKey::Buffer(uri.clone()), Ok((builtin_config(), None)));
        };
        let cfg = config_for_file(&path);
        let dir = path.parent().map(Path::to_path_buf).unwrap_or_default();
        let own = SetKey::Dir {
            root: dir,
            recursive: false,
        };
        let key = match &cfg {
            Ok((c, Some(_))) => match policy_dir(c) {
                Ok(Some(d)) => {
                    let d = std::fs::canonicalize(&d).unwrap_or(d);
                    if path.starts_with(&d) {
                        SetKey::Dir {
                            root: d,
                            recursive: true,
                        }
                    } else {
                        own
                    }
                }
                _ => own,
            },
            _ => own,
        };
        (key, cfg)
    }

    /// Reads the set of `uri` (disk files, with open buffers in place of their disk
    /// text).
    pub fn read_set(&self, uri: &Url) -> (SetKey, SetView) {
        let (key, cfg) = self.set_key(uri);
        let mut blocked = Vec::new();
        let (cfg, config_path) = match cfg {
            Ok(c) => c,
            Err(e) => {
                blocked.push((None, format!("the config cannot be used: {e}"), "config"));
                (builtin_config(), None)
            }
        };
        let (registry, opts) = lint_context(&cfg, config_path.is_some());
        let mut user: Vec<(String, String)> = Vec::new();
        let mut uris = BTreeMap::new();
        match &key {
            SetKey::Buffer(u) => {
                let text = self.open.get(u).map(|(_, t)| t.clone()).unwrap_or_default();
                user.push((u.to_string(), text));
                uris.insert(u.to_string(), u.clone());
            }
            SetKey::Dir { root, recursive } => {
                let mut paths = disk_files(root, *recursive);
                // Open buffers by canonical path: the client's URI may name the file
                // through a symbolic link, and diagnostics must go to that URI.
                let open_at: HashMap<PathBuf, &Url> = self
                    .open
                    .keys()
                    .filter_map(|u| uri_path(u).map(|p| (p, u)))
                    .collect();
                for u in self.open.keys() {
                    if let Some(p) = uri_path(u) {
                        let inside = if *recursive {
                            p.starts_with(root)
                        } else {
                            p.parent() == Some(root.as_path())
                        };
                        if inside && is_policy_file(&p) && !paths.contains(&p) {
                            paths.push(p);
                        }
                    }
                }
                // The asking buffer belongs to its set even under another file name
                // (a language mode chosen by hand).
                if let Some(p) =
                    uri_path(uri).filter(|p| self.open.contains_key(uri) && !paths.contains(p))
                {
                    paths.push(p);
                }
                paths.sort();
                for p in paths {
                    let u = match open_at.get(&p) {
                        Some(u) => (*u).clone(),
                        None => match Url::from_file_path(&p) {
                            Ok(u) => u,
                            Err(()) => continue,
                        },
                    };
                    let text = match self.open.get(&u) {
                        Some((_, t)) => t.clone(),
                        None => match read_policy_file(&p, &p.display().to_string()) {
                            Ok(t) => t,
                            Err(LoadError::NotUtf8(e)) => {
                                let msg = e
                                    .diagnostics
                                    .first()
                                    .map(|d| d.message.clone())
                                    .unwrap_or_default();
                                blocked.push((Some(u), msg, codes::NOT_UTF8));
                                continue;
                            }
                            // Gone or unreadable since it was listed: not in the set.
                            Err(_) => continue,
                        },
                    };
                    let name = p.display().to_string();
                    uris.insert(name.clone(), u);
                    user.push((name, text));
                }
            }
        }
        let view = SetView {
            sources: with_builtins(user),
            registry,
            opts,
            config_path,
            uris,
            blocked,
        };
        (key, view)
    }
}

/// The `.policy` files of `root` on disk: recursively as the gateway lists them, or
/// only its own.
fn disk_files(root: &Path, recursive: bool) -> Vec<PathBuf> {
    if recursive {
        return policy_files(root).unwrap_or_default();
    }
    let Ok(entries) = std::fs::read_dir(root) else {
        return Vec::new();
    };
    let mut out: Vec<PathBuf> = entries
        .flatten()
        .map(|e| e.path())
        .filter(|p| is_policy_file(p) && std::fs::metadata(p).is_ok_and(|m| m.is_file()))
        .collect();
    out.sort();
    out
}

impl SetView {
    /// Whether source `name` is an embedded built-in strategy file.
    pub fn is_builtin(name: &str) -> bool {
        BUILTIN.iter().any(|(b, _)| *b == name)
    }

    /// Parses, checks and lints the set: what `switchyard lint` reports for it.
    pub fn lint(&self) -> Vec<Diagnostic> {
        lint_sources_with(&self.sources, &self.registry, &self.opts).diagnostics
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CONFIG: &str = "policies: { dir: policies }\nproviders: { p: { kind: mock } }\nmodels: { m: { endpoints: [ { provider: p, model: mock-1 } ] } }\n";

    fn url(p: &Path) -> Url {
        Url::from_file_path(p).unwrap()
    }

    #[test]
    fn the_set_is_the_configs_policy_dir_or_the_files_directory() {
        let dir = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(dir.path()).unwrap();
        std::fs::write(root.join("switchyard.yaml"), CONFIG).unwrap();
        std::fs::create_dir_all(root.join("policies/team")).unwrap();
        std::fs::create_dir_all(root.join("scratch")).unwrap();
        std::fs::write(
            root.join("policies/a.policy"),
            "route a when not request.stream { default use \"m\" }\n",
        )
        .unwrap();
        let nested = root.join("policies/team/b.policy");
        std::fs::write(
            &nested,
            "route b when request.stream { default use \"m\" }\n",
        )
        .unwrap();
        let mut docs = Documents::default();
        // In the config's policies.dir (here in a subdirectory): the whole dir.
        let (key, view) = docs.read_set(&url(&nested));
        assert_eq!(
            key,
            SetKey::Dir {
                root: root.join("policies"),
                recursive: true
            }
        );
        assert_eq!(view.uris.len(), 2);
        assert!(view.config_path.is_some() && view.blocked.is_empty());
        assert!(view.lint().is_empty(), "{:?}", view.lint());
        // An open, unsaved buffer of the set is checked with it: a duplicate route.
        let new = url(&root.join("policies/new.policy"));
        docs.open
            .insert(new.clone(), (1, "route a { default use \"m\" }\n".into()));
        let (_, view) = docs.read_set(&new);
        assert_eq!(view.uris.len(), 3);
        assert!(view.lint().iter().any(|d| d.code == "E0201"));
        // Outside policies.dir: the file's own directory, still the config's registry.
        let other = root.join("scratch/c.policy");
        docs.open
            .insert(url(&other), (1, "route c { default use \"m\" }\n".into()));
        let (key, view) = docs.read_set(&url(&other));
        assert_eq!(
            key,
            SetKey::Dir {
                root: root.join("scratch"),
                recursive: false
            }
        );
        assert!(view.lint().is_empty(), "{:?}", view.lint());
        // A config that does not load blocks the set with one message.
        std::fs::write(root.join("switchyard.yaml"), "models: [").unwrap();
        let (_, view) = docs.read_set(&url(&other));
        assert_eq!(view.blocked.len(), 1);
        assert!(view.blocked[0].1.starts_with("the config cannot be used"));
    }
}
