//! Loading the routing policy set the gateway runs: built-in strategies, the operator's
//! `.policy` files, checked against the model registry from config.
//!
//! The built-in strategies of `examples/policies/builtin/` are compiled into the binary, so
//! every policy can say `via least_latency` without copying files. An operator file
//! that defines a strategy of the same name replaces the built-in one (copy it, change
//! a line). The built-in files also carry policy tests and the test-only routes they
//! use, written against the example registry; those are blanked out when embedded
//! ([`embeddable`]), so an operator copying a file keeps its `strategy` and deletes
//! or adapts its routes and tests.
//!
//! A set that fails to parse or check is never used: startup fails with the rendered
//! diagnostics (file:line:col and a caret), and a reload keeps the last good set.

use std::path::{Path, PathBuf};
use std::time::SystemTime;

use crate::config::Config;
use crate::policy::ast::Item;
use crate::policy::diagnostic::{render_all, Diagnostic};
use crate::policy::jit::engine::self_check;
use crate::policy::jit::CompiledPolicySet;
use crate::policy::testing::{TestResults, DEFAULT_TEST_BUDGET};
use crate::policy::{
    parser, CheckedPolicySet, Registry, RegistryEndpoint, RegistryModel, SourceMap,
};

/// The built-in strategies: (file name, text). Each file also holds `test` blocks and
/// the test-only routes they use, written against the example registry
/// (`examples/policies/README.md`); [`embeddable`] drops those when the gateway loads them.
pub const BUILTIN: &[(&str, &str)] = &[
    (
        "builtin/weighted_round_robin.policy",
        include_str!("../../examples/policies/builtin/weighted_round_robin.policy"),
    ),
    (
        "builtin/least_latency.policy",
        include_str!("../../examples/policies/builtin/least_latency.policy"),
    ),
    (
        "builtin/cost_optimized.policy",
        include_str!("../../examples/policies/builtin/cost_optimized.policy"),
    ),
    (
        "builtin/quality_first.policy",
        include_str!("../../examples/policies/builtin/quality_first.policy"),
    ),
    (
        "builtin/exp3.policy",
        include_str!("../../examples/policies/builtin/exp3.policy"),
    ),
    (
        "builtin/adaptive.policy",
        include_str!("../../examples/policies/builtin/adaptive.policy"),
    ),
    (
        "builtin/multi_objective.policy",
        include_str!("../../examples/policies/builtin/multi_objective.policy"),
    ),
];

/// Largest policy file read, in bytes (the parser refuses more than 1 MiB anyway).
pub const MAX_FILE_BYTES: u64 = 2 * 1024 * 1024;

/// Reads one policy file: a regular file of at most [`MAX_FILE_BYTES`], UTF-8.
/// `name` is the file's name in the set (relative to the policy directory for the
/// gateway, [`tool_path`] for the tools): a file that is not UTF-8 is reported
/// under it, as every other diagnostic about the file is.
///
/// # Errors
/// [`LoadError::Io`] naming the file by its path; [`LoadError::NotUtf8`] with the
/// E0106 diagnostic, naming it `name`.
pub fn read_policy_file(path: &Path, name: &str) -> Result<String, LoadError> {
    match read_policy_text(path)? {
        Ok(text) => Ok(text),
        Err((lossy, at, byte)) => {
            let mut sources = SourceMap::new();
            let file = sources.add(name, lossy);
            Err(LoadError::NotUtf8(Box::new(NotUtf8 {
                diagnostics: vec![not_utf8(file, at, byte)],
                sources,
            })))
        }
    }
}

/// The text of the policy file at `path` (checked as [`read_policy_file`] says), or,
/// when it is not UTF-8, its text decoded lossily (U+FFFD for bad bytes) with the
/// offset and value of the first bad byte.
///
/// # Errors
/// [`LoadError::Io`] naming the file by its path.
fn read_policy_text(path: &Path) -> Result<Result<String, (String, usize, u8)>, LoadError> {
    use std::io::Read;
    let err = |e: String| LoadError::Io(format!("cannot read {}: {e}", path.display()));
    let meta = std::fs::metadata(path).map_err(|e| err(e.to_string()))?;
    if !meta.is_file() {
        return Err(err("not a regular file".into()));
    }
    if meta.len() > MAX_FILE_BYTES {
        return Err(err(format!(
            "{} bytes is more than the limit of {MAX_FILE_BYTES}",
            meta.len()
        )));
    }
    let mut bytes = Vec::new();
    std::fs::File::open(path)
        .and_then(|f| f.take(MAX_FILE_BYTES + 1).read_to_end(&mut bytes))
        .map_err(|e| err(e.to_string()))?;
    Ok(String::from_utf8(bytes).map_err(|e| {
        let at = e.utf8_error().valid_up_to();
        let byte = e.as_bytes().get(at).copied().unwrap_or(0);
        (String::from_utf8_lossy(e.as_bytes()).into_owned(), at, byte)
    }))
}

/// The E0106 diagnostic for `file`, read lossily, whose first bad byte `byte` was at
/// offset `at` (where the lossy text shows U+FFFD).
fn not_utf8(file: crate::policy::FileId, at: usize, byte: u8) -> Diagnostic {
    use crate::policy::diagnostic::codes;
    Diagnostic::error(
        codes::NOT_UTF8,
        crate::policy::Span::new(file, at, at + char::REPLACEMENT_CHARACTER.len_utf8()),
        format!("the policy file is not valid UTF-8: byte 0x{byte:02X} at offset {at} does not start or continue a character"),
    )
    .with_span_label("not UTF-8")
    .with_help("policy files are UTF-8 text; convert the file (for example `iconv -f latin1 -t utf-8`) or remove the byte")
}

/// Policy files that are not UTF-8: one E0106 diagnostic each, located in `sources`
/// (the files read, those not UTF-8 decoded lossily: each bad byte as U+FFFD).
#[derive(Debug)]
pub struct NotUtf8 {
    /// One E0106 per file, at its first bad byte.
    pub diagnostics: Vec<Diagnostic>,
    /// The files the diagnostics point into.
    pub sources: SourceMap,
}

impl NotUtf8 {
    /// The diagnostics rendered for people, as every other diagnostic is.
    pub fn render(&self) -> String {
        render_all(&self.diagnostics, &self.sources)
    }
}

/// Largest number of policy files read from a directory.
pub const MAX_FILES: usize = 1_000;

/// A checked policy set ready to serve, with where it came from.
#[derive(Debug)]
pub struct PolicySnapshot {
    /// The checked set with its native code (or the reason it runs interpreted).
    pub compiled: CompiledPolicySet,
    /// Content hash of every file (FNV-1a 64, hex): the `x-switchyard-policy` value.
    pub version: String,
    /// [`PolicySnapshot::version`] as the `x-switchyard-policy` header value, built
    /// once per loaded set rather than once per response.
    pub version_header: http::HeaderValue,
    /// Files in the set, built-ins first (`builtin/...` or paths as read).
    pub files: Vec<String>,
    /// When this set was loaded.
    pub loaded_at: SystemTime,
    /// Whether the set reads `request.input_tokens` ([`super::reads`]): only then
    /// does the request path count input tokens with the model's tokenizer for
    /// the policy (else it gets the cheap estimate).
    pub reads_input_tokens: bool,
    /// The headers and metadata keys the set reads ([`super::reads::read_names`]):
    /// the request's features keep only these.
    pub reads_names: super::reads::ReadNames,
    /// What the set's tests found when it was loaded, so the next load runs again
    /// only the tests whose inputs changed ([`compile_after`]).
    pub test_results: TestResults,
    /// Whether the set's registry is the gateway statistics' (same endpoints, same
    /// order), with the id of the statistics store that was compared: filled by the
    /// first decision ([`crate::stats::StatsStore::live_for`]), so the comparison
    /// runs once per loaded set instead of once per endpoint read.
    pub stats_aligned: std::sync::OnceLock<(u64, bool)>,
}

/// The live policy set: one atomic pointer that requests load once and reloads swap
/// whole, so a request sees the old set or the new one, never a mix.
pub type PolicyCell = std::sync::Arc<arc_swap::ArcSwap<PolicySnapshot>>;

impl PolicySnapshot {
    /// The checked set (rules, strategies, source map).
    pub fn set(&self) -> &CheckedPolicySet {
        self.compiled.checked()
    }

    /// The operator's files of the set (every file but the embedded built-ins), in
    /// load order.
    pub fn operator_files(&self) -> impl Iterator<Item = &str> {
        self.files
            .iter()
            .map(String::as_str)
            .filter(|f| !BUILTIN.iter().any(|(b, _)| b == f))
    }

    /// What this set serves, in one sentence for the log and `GET /admin/policies`:
    /// `policy V: 2 operator file(s) (a.policy, b.policy) and the built-in strategies`
    /// or `policy V: the built-in strategies only (no operator policy files)`.
    pub fn serving(&self) -> String {
        let ops: Vec<&str> = self.operator_files().collect();
        if ops.is_empty() {
            format!(
                "policy {}: the built-in strategies only (no operator policy files)",
                self.version
            )
        } else {
            format!(
                "policy {}: {} operator file(s) ({}) and the built-in strategies",
                self.version,
                ops.len(),
                ops.join(", ")
            )
        }
    }
}

/// The startup log line naming the set that serves ([`PolicySnapshot::serving`]).
pub fn serving_line(snap: &PolicySnapshot) -> String {
    format!("serving {}", snap.serving())
}

/// A note for policies that fail to check against `config`'s registry while a
/// directory they came from carries a registry of its own: a `switchyard.yaml` in
/// the directory of a root (or of a file root), or in its parent, that is not the
/// config in use. The example policies (`examples/policies/`) are such a set.
pub fn own_registry_note(roots: &[PathBuf], config: &Config) -> Option<String> {
    let in_use = std::fs::canonicalize(&config.source).ok();
    for root in roots {
        let dir = if root.is_dir() {
            root.clone()
        } else {
            root.parent().map(Path::to_path_buf).unwrap_or_default()
        };
        let dir = if dir.as_os_str().is_empty() {
            PathBuf::from(".")
        } else {
            dir
        };
        for candidate in [dir.join("switchyard.yaml"), dir.join("../switchyard.yaml")] {
            let Ok(found) = std::fs::canonicalize(&candidate) else {
                continue;
            };
            if Some(&found) != in_use.as_ref() {
                let shown = normalize_display(&candidate);
                return Some(format!(
                    "note: these policies come with their own registry, {shown}, and were checked against {} instead; run with `--config {shown}` to use theirs",
                    if config.source.starts_with('<') {
                        "the built-in config".to_string()
                    } else {
                        config.source.clone()
                    }
                ));
            }
        }
    }
    None
}

/// `path` with `x/..` pairs and `.` dropped, for messages.
fn normalize_display(path: &Path) -> String {
    use std::path::Component;
    let mut out: Vec<Component> = Vec::new();
    for c in path.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir if matches!(out.last(), Some(Component::Normal(_))) => {
                out.pop();
            }
            other => out.push(other),
        }
    }
    out.iter().collect::<PathBuf>().display().to_string()
}

/// Why a policy set could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// A file or directory could not be read.
    #[error("{0}")]
    Io(String),
    /// The set's own policy tests failed.
    #[error("{failed} policy test(s) failed:\n{rendered}")]
    TestsFailed {
        /// The test report, rendered.
        rendered: String,
        /// Number of failed cases.
        failed: usize,
    },
    /// Policy files that are not UTF-8 (E0106): the diagnostics themselves, so that
    /// the tools' JSON formats can carry them like any other.
    #[error("{}", .0.render())]
    NotUtf8(Box<NotUtf8>),
    /// Parse or check errors, rendered with locations.
    #[error("{rendered}")]
    Invalid {
        /// Human rendering of every diagnostic.
        rendered: String,
        /// Number of errors.
        count: usize,
    },
}

/// The policy registry (model → endpoints with prices) from the gateway config.
pub fn registry_from_config(config: &Config) -> Registry {
    Registry::new(
        config
            .models
            .iter()
            .map(|m| RegistryModel {
                name: m.name.clone(),
                // Endpoints of unconfigured providers are left out, as the routing
                // registry and the statistics leave them out: all three share one
                // endpoint index space.
                endpoints: m
                    .endpoints
                    .iter()
                    .filter_map(|e| {
                        let pricing = config.provider(&e.provider)?.pricing;
                        Some(RegistryEndpoint {
                            id: e.id.clone(),
                            provider: e.provider.clone(),
                            model: e.model.clone(),
                            priority: e.priority,
                            weight: e.weight,
                            input_per_mtok: pricing.input_per_mtok,
                            output_per_mtok: pricing.output_per_mtok,
                            context_window: e.context_window,
                        })
                    })
                    .collect(),
            })
            .collect(),
    )
}

/// What a config tells the policy checks: its registry, and the lint options it
/// implies (`server.max_attempts` when the config is a file, `from_file`; the
/// default when it is the built-in config). Shared by `lint`, `test` and the
/// language server, so they check against the same things.
pub fn lint_context(cfg: &Config, from_file: bool) -> (Registry, crate::policy::lint::LintOptions) {
    (
        registry_from_config(cfg),
        crate::policy::lint::LintOptions {
            max_attempts: from_file.then_some(cfg.server.max_attempts),
        },
    )
}

/// The config that governs the policy file `file`, for the language server: the
/// nearest `switchyard.yaml` in the file's directory or above it, else the built-in
/// config (providers enabled by their API-key variables, as `switchyard lint` uses it
/// without `--config` and without `./switchyard.yaml`). Returns the config and the
/// path of its file (`None`: built-in).
///
/// # Errors
/// The found file cannot be read or is not a valid config, as one message.
pub fn config_for_file(file: &Path) -> Result<(Config, Option<PathBuf>), String> {
    let found = file
        .ancestors()
        .skip(1)
        .map(|d| d.join("switchyard.yaml"))
        .find(|p| p.is_file());
    let cfg = match &found {
        Some(p) => crate::config::locate_and_load(Some(p))
            .map(|(c, _)| c)
            .map_err(|e| e.to_string())?,
        None => builtin_config(),
    };
    Ok((cfg, found))
}

/// The built-in config as the tools use it when there is no config file.
pub fn builtin_config() -> Config {
    crate::config::embedded(|v| std::env::var_os(v).is_some_and(|s| !s.is_empty())).0
}

/// Whether `path` is a policy file worth reading: `*.policy`, not hidden, not an
/// editor's swap or backup file.
pub fn is_policy_file(path: &Path) -> bool {
    let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
        return false;
    };
    !name.starts_with('.') && !name.ends_with('~') && name.ends_with(".policy")
}

/// Every policy file under `dir` (recursively, sorted by path).
///
/// # Errors
/// [`LoadError::Io`] when `dir` or a subdirectory cannot be listed, or when there are
/// more than [`MAX_FILES`] files.
pub fn policy_files(dir: &Path) -> Result<Vec<PathBuf>, LoadError> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let entries = std::fs::read_dir(&d).map_err(|e| {
            LoadError::Io(format!("cannot list policy directory {}: {e}", d.display()))
        })?;
        for entry in entries.flatten() {
            let path = entry.path();
            let hidden = path
                .file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with('.'));
            if hidden {
                continue;
            }
            match entry.file_type() {
                Ok(t) if t.is_dir() => stack.push(path),
                // Regular files only (symlinks followed): a FIFO or device named
                // `x.policy` would block the reader forever.
                Ok(_)
                    if is_policy_file(&path)
                        && std::fs::metadata(&path).is_ok_and(|m| m.is_file()) =>
                {
                    out.push(path)
                }
                _ => {}
            }
        }
        if out.len() > MAX_FILES {
            return Err(LoadError::Io(format!(
                "more than {MAX_FILES} policy files under {}",
                dir.display()
            )));
        }
    }
    out.sort();
    Ok(out)
}

/// Reads the sources: built-ins (minus those an operator file replaces), then every
/// file under `dir` named relative to `dir`.
///
/// # Errors
/// [`LoadError::Io`] for unreadable files; [`LoadError::NotUtf8`] with an E0106
/// for every file that is not UTF-8.
pub fn read_sources(dir: Option<&Path>) -> Result<SourceMap, LoadError> {
    let roots: Vec<PathBuf> = dir.map(Path::to_path_buf).into_iter().collect();
    read_roots(&roots, false)
}

/// Like [`read_sources`] for several roots, each a policy file or a directory, for
/// the policy tools: every file is named by its path relative to the current
/// directory (absolute when outside it), however its root was given, so `lint dir`,
/// `lint ./dir/a.policy` and `lint /abs/dir` print the same `dir/a.policy:3:5`.
///
/// # Errors
/// [`LoadError::Io`] for unreadable files or directories; [`LoadError::NotUtf8`] as
/// [`read_sources`].
pub fn read_sources_from(roots: &[PathBuf]) -> Result<SourceMap, LoadError> {
    read_roots(roots, true)
}

/// `path` as the policy tools print it: relative to the current directory when it
/// is inside it, else absolute; either way with `.` and `..` resolved, so every
/// spelling of one file gives one name (`README.md`, "Command line").
pub fn tool_path(path: &Path) -> String {
    use std::path::Component;
    let cwd = std::env::current_dir().ok();
    let abs = if path.is_absolute() {
        path.to_path_buf()
    } else {
        match &cwd {
            Some(c) => c.join(path),
            None => path.to_path_buf(),
        }
    };
    let mut clean = PathBuf::new();
    for c in abs.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                clean.pop();
            }
            other => clean.push(other.as_os_str()),
        }
    }
    match cwd.as_deref().and_then(|c| clean.strip_prefix(c).ok()) {
        Some(rel) if !rel.as_os_str().is_empty() => rel.display().to_string(),
        _ => clean.display().to_string(),
    }
}

/// Reads `roots`: the gateway names a directory's files relative to it
/// (`tool_names` false: `GET /admin/policies` shows no host path), the tools
/// relative to the current directory ([`tool_path`]).
///
/// Either way a file's name within the set ([`crate::policy::source::SourceFile::set_name`],
/// what the version hashes) is its path relative to its directory root, as the
/// gateway names it, or its file name for a file root: `dry-run`, `lint` and `test`
/// report the version the gateway serves for the same directory, from any cwd.
fn read_roots(roots: &[PathBuf], tool_names: bool) -> Result<SourceMap, LoadError> {
    let mut user: Vec<(String, String)> = Vec::new();
    let mut set_names: Vec<String> = Vec::new();
    // Files that are not UTF-8, by name: offset and value of the first bad byte.
    // Every such file is reported, not just the first.
    let mut bad: Vec<(String, usize, u8)> = Vec::new();
    for root in roots {
        let files = if root.is_dir() {
            policy_files(root)?
        } else {
            vec![root.clone()]
        };
        for path in files {
            let set_name = match path.strip_prefix(root) {
                Ok(rel) if root.is_dir() => rel.display().to_string(),
                _ => path.file_name().map_or_else(
                    || path.display().to_string(),
                    |n| n.to_string_lossy().into_owned(),
                ),
            };
            let name = if tool_names {
                tool_path(&path)
            } else {
                set_name.clone()
            };
            // A file given twice (`lint a.policy ./a.policy`, `lint dir dir/a.policy`)
            // is one file of the set, not two that define everything twice.
            if user.iter().any(|(n, _)| *n == name) {
                continue;
            }
            let text = match read_policy_text(&path)? {
                Ok(text) => text,
                Err((lossy, at, byte)) => {
                    bad.push((name.clone(), at, byte));
                    lossy
                }
            };
            user.push((name, text));
            set_names.push(set_name);
        }
    }
    let sources = with_builtins_as(user, set_names);
    if bad.is_empty() {
        return Ok(sources);
    }
    let diagnostics = bad
        .iter()
        .filter_map(|(name, at, byte)| {
            let (file, _) = sources.files().find(|(_, f)| f.name == *name)?;
            Some(not_utf8(file, *at, *byte))
        })
        .collect();
    Err(LoadError::NotUtf8(Box::new(NotUtf8 {
        diagnostics,
        sources,
    })))
}

/// The sources of a set made of the operator's files `user` (`(name, text)` in load
/// order): the built-in strategies first, minus those a file replaces, then the
/// files. The one place that decides which built-ins a set keeps, for the gateway,
/// the policy tools and the language server alike.
pub fn with_builtins(user: Vec<(String, String)>) -> SourceMap {
    let set_names = user.iter().map(|(n, _)| n.clone()).collect();
    with_builtins_as(user, set_names)
}

/// [`with_builtins`] with each user file's name within the set given apart from its
/// name: `set_names[i]` for `user[i]`.
fn with_builtins_as(user: Vec<(String, String)>, set_names: Vec<String>) -> SourceMap {
    // Strategy names the operator defines; a parse failure here is reported later by
    // the full parse, so it is simply skipped.
    let defined: std::collections::HashSet<String> = user_strategies(&user)
        .into_iter()
        .flatten()
        .flatten()
        .collect();
    let mut sources = SourceMap::new();
    for ((name, _), (names, kept)) in BUILTIN.iter().zip(builtin_info()) {
        if !names.iter().any(|n| defined.contains(n)) {
            sources.add(*name, kept.clone());
        }
    }
    for ((name, text), set_name) in user.into_iter().zip(set_names) {
        sources.add_as(name, set_name, text);
    }
    sources
}

/// The names of the strategies `text` defines (`None`: it does not parse).
fn strategy_names(name: &str, text: &str) -> Option<Vec<String>> {
    let (_, file) = parser::parse_str(name, text).ok()?;
    Some(
        file.items
            .iter()
            .filter_map(|i| match i {
                Item::Strategy(s) => Some(s.name.name.clone()),
                _ => None,
            })
            .collect(),
    )
}

/// Per built-in file, in [`BUILTIN`] order: the strategies it defines and its
/// [`embeddable`] text. The files are compiled in, so this is worked out once per
/// process rather than parsed again on every load and reload.
fn builtin_info() -> &'static [(Vec<String>, String)] {
    static INFO: std::sync::OnceLock<Vec<(Vec<String>, String)>> = std::sync::OnceLock::new();
    INFO.get_or_init(|| {
        BUILTIN
            .iter()
            .map(|(name, text)| {
                let names = strategy_names(name, text).unwrap_or_default();
                (names, embeddable(name, text))
            })
            .collect()
    })
}

/// The strategies each of the operator's files `user` defines (`None`: the file does
/// not parse). A reload sees mostly the files of the last load again, so the answer
/// per file text (an XXH3-128 of it) is kept from one call to the next; only the
/// texts of the latest call are kept, so the memory is that of one set's names.
fn user_strategies(user: &[(String, String)]) -> Vec<Option<Vec<String>>> {
    type Cache = std::collections::HashMap<u128, Option<Vec<String>>>;
    static LAST: std::sync::Mutex<Option<Cache>> = std::sync::Mutex::new(None);
    let last = LAST
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .take()
        .unwrap_or_default();
    let mut now = Cache::with_capacity(user.len());
    let out = user
        .iter()
        .map(|(name, text)| {
            let key = xxhash_rust::xxh3::xxh3_128(text.as_bytes());
            let names = match last.get(&key).or_else(|| now.get(&key)) {
                Some(n) => n.clone(),
                None => strategy_names(name, text),
            };
            now.insert(key, names.clone());
            names
        })
        .collect();
    *LAST.lock().unwrap_or_else(|p| p.into_inner()) = Some(now);
    out
}

/// The text of a built-in file as the gateway embeds it: its `route` and `test` items
/// blanked out (spaces, newlines kept so locations do not move). They exist for the
/// file's policy tests, which name the example registry's models and endpoints; in the
/// gateway they would take traffic or fail to check against the operator's registry.
/// A file that does not parse is returned as is (the full parse reports it).
pub fn embeddable(name: &str, text: &str) -> String {
    let Ok((_, file)) = parser::parse_str(name, text) else {
        return text.to_string();
    };
    let mut bytes = text.as_bytes().to_vec();
    for item in &file.items {
        let span = match item {
            Item::Route(r) => r.span,
            Item::Test(t) => t.span,
            Item::Strategy(_) => continue,
        };
        let (start, end) = (span.start as usize, (span.end as usize).min(bytes.len()));
        for b in bytes.iter_mut().take(end).skip(start) {
            if *b != b'\n' {
                *b = b' ';
            }
        }
    }
    // Only whole items (ASCII keywords to closing braces) were blanked, but any
    // multi-byte character inside them became spaces byte by byte: still valid UTF-8.
    String::from_utf8(bytes).unwrap_or_else(|_| text.to_string())
}

/// Loads, parses and checks the policy set for `config`.
///
/// The directory is `policies.dir` when the config sets it (it must exist); the
/// default `<config dir>/policies` is used only if it exists; the embedded default
/// config has none.
///
/// # Errors
/// [`LoadError`] with every diagnostic rendered.
pub fn load(config: &Config) -> Result<PolicySnapshot, LoadError> {
    let dir = policy_dir(config)?;
    let sources = read_sources(dir.as_deref())?;
    compile(sources, &registry_from_config(config)).map_err(|e| match e {
        LoadError::Invalid { rendered, count } => {
            let roots: Vec<PathBuf> = dir.into_iter().collect();
            let rendered = match own_registry_note(&roots, config) {
                Some(note) => format!("{rendered}{note}\n"),
                None => rendered,
            };
            LoadError::Invalid { rendered, count }
        }
        other => other,
    })
}

/// The policy directory for `config`, if any.
///
/// # Errors
/// [`LoadError::Io`] when an explicitly configured directory does not exist.
pub fn policy_dir(config: &Config) -> Result<Option<PathBuf>, LoadError> {
    let Some(dir) = &config.policies.dir else {
        return Ok(None);
    };
    match (config.policies.explicit, dir.is_dir()) {
        (_, true) => Ok(Some(dir.clone())),
        (true, false) => Err(LoadError::Io(format!(
            "policies.dir: {} is not a directory",
            dir.display()
        ))),
        (false, false) => Ok(None),
    }
}

/// Parses and checks `sources` against `registry`, then runs the set's own policy
/// tests (the self-check): a set whose tests fail is refused like one that does not
/// check.
///
/// # Errors
/// [`LoadError::Invalid`] with every diagnostic rendered, or
/// [`LoadError::TestsFailed`] with the failing cases.
pub fn compile(sources: SourceMap, registry: &Registry) -> Result<PolicySnapshot, LoadError> {
    compile_after(sources, registry, None)
}

/// [`compile`] for a reload after `previous` (the set serving now): tests whose
/// inputs are unchanged since `previous` was loaded (their text, the registry, the
/// routes their requests reached and the strategies those use) run on the compiled
/// code alone and must reproduce the interpreter's remembered decisions; the others
/// run in full on both engines ([`crate::policy::testing::run`]).
///
/// # Errors
/// As [`compile`].
pub fn compile_after(
    sources: SourceMap,
    registry: &Registry,
    previous: Option<&PolicySnapshot>,
) -> Result<PolicySnapshot, LoadError> {
    let files: Vec<String> = sources.files().map(|(_, f)| f.name.clone()).collect();
    let started = std::time::Instant::now();
    let set =
        crate::policy::parse_and_check(&sources, registry).map_err(|diags| LoadError::Invalid {
            rendered: render_all(&diags, &sources),
            count: diags.len(),
        })?;
    let version = set.version.clone();
    let checked = started.elapsed();
    let compiled = CompiledPolicySet::compile(set);
    let compiled_at = started.elapsed();
    if let Some(why) = compiled.fallback_reason() {
        tracing::warn!(policy = %version, "policy set runs on the interpreter: {why}");
    }
    // The self-check runs the set's own tests on both engines: a disagreement between
    // the compiled code and the interpreter refuses the set like a failing test. The
    // tests share one budget of test requests, so a huge `sample` cannot stall a
    // reload: what does not fit is skipped and reported, the rest must pass.
    let (report, test_results) = self_check(
        &compiled,
        Some(DEFAULT_TEST_BUDGET),
        previous.map(|p| &p.test_results),
    );
    // Where a load's time goes, for `RUST_LOG=switchyard::routing=debug` (issue 17).
    let ms = |d: std::time::Duration| d.as_secs_f64() * 1e3;
    tracing::debug!(
        policy = %version,
        parse_check_ms = ms(checked),
        compile_ms = ms(compiled_at - checked),
        tests_ms = ms(started.elapsed() - compiled_at),
        tests = report.cases.len(),
        tests_reused = report.reused,
        test_requests = report.requests,
        "policy set built"
    );
    if report.failed > 0 {
        return Err(LoadError::TestsFailed {
            rendered: report.render(),
            failed: report.failed,
        });
    }
    if report.skipped > 0 {
        let skipped: Vec<String> = report
            .cases
            .iter()
            .filter(|c| c.skipped)
            .map(|c| format!("{} ({})", c.name, c.at))
            .collect();
        tracing::warn!(
            policy = %version,
            budget = DEFAULT_TEST_BUDGET,
            "{} policy test(s) not run on load, over the total test budget of {DEFAULT_TEST_BUDGET} requests: {}; run them with `switchyard test --test-budget N`",
            report.skipped,
            skipped.join(", ")
        );
    }
    Ok(PolicySnapshot {
        test_results,
        reads_input_tokens: super::reads::reads_input_tokens(compiled.checked()),
        reads_names: super::reads::read_names(compiled.checked()),
        // Hex digits: always a valid header value.
        version_header: http::HeaderValue::from_str(&version)
            .unwrap_or_else(|_| http::HeaderValue::from_static("invalid")),
        version,
        compiled,
        files,
        loaded_at: SystemTime::now(),
        stats_aligned: std::sync::OnceLock::new(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtins_check_against_any_registry() {
        let (config, _) = crate::config::embedded(|_| false);
        let snap = compile(read_sources(None).unwrap(), &registry_from_config(&config)).unwrap();
        assert_eq!(snap.files.len(), BUILTIN.len());
        assert_eq!(snap.version.len(), 16);
    }

    #[test]
    fn embedded_builtins_keep_only_their_strategies() {
        for (name, text) in BUILTIN {
            let kept = embeddable(name, text);
            assert_eq!(kept.lines().count(), text.lines().count(), "{name}");
            let (_, file) = parser::parse_str(name, &kept).unwrap();
            assert_eq!(file.items.len(), 1, "{name}");
            assert!(matches!(file.items[0], Item::Strategy(_)), "{name}");
        }
    }

    #[test]
    fn operator_strategy_replaces_the_builtin() {
        let dir = tempfile::tempdir().unwrap();
        let (name, text) = BUILTIN
            .iter()
            .find(|(n, _)| n.ends_with("least_latency.policy"))
            .unwrap();
        std::fs::write(dir.path().join("mine.policy"), embeddable(name, text)).unwrap();
        std::fs::write(dir.path().join(".mine.policy.swp"), "garbage").unwrap();
        std::fs::write(dir.path().join("notes.txt"), "garbage").unwrap();
        let sources = read_sources(Some(dir.path())).unwrap();
        let names: Vec<String> = sources.files().map(|(_, f)| f.name.clone()).collect();
        assert!(names.contains(&"mine.policy".to_string()));
        assert!(!names.iter().any(|n| n == "builtin/least_latency.policy"));
        let (config, _) = crate::config::embedded(|_| false);
        compile(sources, &registry_from_config(&config)).unwrap();
    }

    /// The gateway named a directory's files relative to it, except one that is not
    /// UTF-8 (E0106): that one by its full host path (`/srv/./policies/zz.policy`).
    #[test]
    fn e0106_named_the_file_by_its_host_path() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("sub")).unwrap();
        std::fs::write(dir.path().join("sub/zz.policy"), b"#\xFF\n").unwrap();
        let spelt = dir.path().join(".");
        let Err(LoadError::NotUtf8(e)) = read_sources(Some(&spelt)) else {
            panic!("a file that is not UTF-8 was read");
        };
        let rendered = e.render();
        assert!(rendered.contains("--> sub/zz.policy:1:2"), "{rendered}");
        assert!(
            !rendered.contains(&*dir.path().display().to_string()),
            "{rendered}"
        );
    }

    /// The tools hashed each file's name relative to the current directory, so
    /// `dry-run` printed a different version from every directory, none of them
    /// the gateway's `x-switchyard-policy`.
    #[test]
    fn policy_version_depended_on_the_current_directory() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("sub")).unwrap();
        std::fs::write(
            dir.path().join("a.policy"),
            "route r { default use model }\n",
        )
        .unwrap();
        std::fs::write(dir.path().join("sub/b.policy"), "# b\n").unwrap();
        let serve = crate::policy::check::version(&read_sources(Some(dir.path())).unwrap());
        let spellings = [
            dir.path().to_path_buf(),
            dir.path().join("."),
            dir.path().join("sub/.."),
        ];
        for root in spellings {
            let tools = read_sources_from(std::slice::from_ref(&root)).unwrap();
            assert_eq!(
                crate::policy::check::version(&tools),
                serve,
                "{}",
                root.display()
            );
        }
        // The names shown stay the tools' own (here absolute: outside the cwd).
        let tools = read_sources_from(&[dir.path().to_path_buf()]).unwrap();
        assert!(tools
            .files()
            .any(|(_, f)| f.name.starts_with('/') && f.set_name == "sub/b.policy"));
    }

    #[test]
    fn invalid_policy_is_rendered_with_location() {
        let mut sources = SourceMap::new();
        sources.add("bad.policy", "route r { default use \"nope\" }\n");
        let (config, _) = crate::config::embedded(|_| false);
        let err = compile(sources, &registry_from_config(&config)).unwrap_err();
        let text = err.to_string();
        assert!(text.contains("bad.policy:1:"), "{text}");
    }
}
