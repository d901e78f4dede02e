//! `switchyard lint`, `fmt` and `test`: the policy tools, plus what they share with
//! `dry-run` (finding the config, the registry and the policy files).
//!
//! Exit codes: 0 clean, 1 problems in the policies (errors; warnings with
//! `--deny-warnings`; files `fmt --check` would change; failed tests), 2 usage or I/O
//! errors (unreadable files, bad config).

/// Prints to standard output, ignoring a closed pipe (`switchyard lint | head`).
macro_rules! say {
    ($($t:tt)*) => {{
        use std::io::Write as _;
        let _ = write!(std::io::stdout(), $($t)*);
    }};
}
pub(crate) use say;

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use crate::config::{self, Config};
use crate::policy::diagnostic::{render_all, Severity};
use crate::policy::fmt::FmtError;
use crate::policy::lint::{codes as lint_codes, lint_sources_with, LintOptions};
use crate::policy::{Registry, SourceMap};
use crate::routing::policy::{lint_context, read_sources_from, LoadError, NotUtf8};

/// Output formats of the policy tools.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// Text for people.
    Human,
    /// One JSON document (schemas in `docs/lint.md`).
    Json,
}

/// A usage or I/O problem: exit code 2.
pub struct UsageError(pub String);

/// Loads the config as `serve` does: `--config`, else `./switchyard.yaml`, else the
/// embedded default.
pub fn load_config(path: Option<&Path>) -> Result<Config, UsageError> {
    config::locate_and_load(path)
        .map(|(c, _)| c)
        .map_err(|e| UsageError(e.to_string()))
}

/// The `.policy` files named by `paths` (directories searched recursively as the
/// gateway does), sorted by path; the config's policy directory when `paths` is empty.
pub fn policy_files(
    paths: &[PathBuf],
    default_dir: Option<&Path>,
) -> Result<Vec<PathBuf>, UsageError> {
    let roots = roots(paths, default_dir);
    let mut out = Vec::new();
    for root in roots {
        if root.is_dir() {
            out.extend(
                crate::routing::policy::policy_files(&root)
                    .map_err(|e| UsageError(e.to_string()))?,
            );
        } else if root.exists() {
            out.push(root);
        } else {
            return Err(UsageError(format!(
                "cannot read {}: no such file or directory",
                root.display()
            )));
        }
    }
    out.sort();
    out.dedup();
    Ok(out)
}

/// `paths`, or the config's policy directory when none are given.
fn roots(paths: &[PathBuf], default_dir: Option<&Path>) -> Vec<PathBuf> {
    if paths.is_empty() {
        default_dir.map(Path::to_path_buf).into_iter().collect()
    } else {
        paths.to_vec()
    }
}

/// Config, registry and sources for the tools.
pub struct Loaded {
    /// The registry from the config.
    pub registry: Registry,
    /// The policy files.
    pub sources: SourceMap,
    /// `server.max_attempts` of the config file (`None`: no file, the embedded
    /// default config).
    pub max_attempts: Option<u32>,
    /// Printed when the files do not check: they come with a registry of their own
    /// that is not the config in use (`routing::policy::own_registry_note`).
    pub registry_note: Option<String>,
}

/// Loads config, registry and policy files.
///
/// The sources are read exactly as `serve` reads them: the built-in strategies first
/// (unless a file replaces one), then the policy files.
pub fn load(paths: &[PathBuf], config: Option<&Path>) -> Result<Loaded, LoadFailure> {
    let cfg = load_config(config)?;
    let roots = roots(paths, cfg.policies.dir.as_deref());
    if roots.is_empty() {
        eprintln!(
            "note: no policy files given and the config has no policies.dir: only the built-in strategies are read (pass paths or --config)"
        );
    }
    for r in &roots {
        if !r.exists() {
            return Err(UsageError(format!(
                "cannot read {}: no such file or directory",
                r.display()
            ))
            .into());
        }
    }
    let (registry, opts) = lint_context(&cfg, config::locate(config).is_some());
    Ok(Loaded {
        registry_note: crate::routing::policy::own_registry_note(&roots, &cfg),
        max_attempts: opts.max_attempts,
        registry,
        sources: read_sources_from(&roots).map_err(|e| match e {
            // A file that is not UTF-8 is a problem in the policies: its diagnostic
            // has a code and a location, and the exit code is 1.
            LoadError::NotUtf8(e) => LoadFailure::Policy(e),
            e => LoadFailure::Usage(UsageError(e.to_string())),
        })?,
    })
}

/// Why [`load`] failed.
pub enum LoadFailure {
    /// Bad flags, config or unreadable files: exit code 2.
    Usage(UsageError),
    /// Policy files that cannot be read as policies (not UTF-8): their diagnostics,
    /// printed in the command's format, exit code 1.
    Policy(Box<NotUtf8>),
}

impl From<UsageError> for LoadFailure {
    fn from(e: UsageError) -> LoadFailure {
        LoadFailure::Usage(e)
    }
}

/// Reports a failed [`load`]: a usage error on stderr (exit 2), or the policy
/// files' diagnostics on stdout (exit 1), rendered for people or, in the JSON
/// format, as the document `json` makes of them (the command's own).
fn load_failed(
    e: LoadFailure,
    format: Format,
    json: impl FnOnce(&NotUtf8) -> serde_json::Value,
) -> ExitCode {
    match e {
        LoadFailure::Usage(u) => usage(u),
        LoadFailure::Policy(bad) => {
            match format {
                Format::Human => say!("{}", bad.render()),
                Format::Json => say!(
                    "{}\n",
                    serde_json::to_string_pretty(&json(&bad)).unwrap_or_default()
                ),
            }
            ExitCode::from(1)
        }
    }
}

fn usage(e: UsageError) -> ExitCode {
    eprintln!("error: {}", e.0);
    ExitCode::from(2)
}

/// `switchyard lint`.
pub fn lint(
    paths: &[PathBuf],
    config: Option<&Path>,
    format: Format,
    deny_warnings: bool,
) -> ExitCode {
    let l = match load(paths, config) {
        Ok(l) => l,
        // No set to lint: the document has the files' diagnostics and no version.
        Err(e) => {
            return load_failed(e, format, |bad| {
                lint_json(
                    &bad.sources,
                    serde_json::Value::Null,
                    &bad.diagnostics,
                    bad.diagnostics.len(),
                    0,
                )
            })
        }
    };
    let opts = LintOptions {
        max_attempts: l.max_attempts,
    };
    let out = lint_sources_with(&l.sources, &l.registry, &opts);
    let errors = out.diagnostics.iter().filter(|d| d.is_error()).count();
    let warnings = out
        .diagnostics
        .iter()
        .filter(|d| d.severity == Severity::Warning)
        .count();
    match format {
        Format::Human => say!("{}", render_all(&out.diagnostics, &l.sources)),
        Format::Json => {
            let version = crate::policy::check::version(&l.sources).into();
            let doc = lint_json(&l.sources, version, &out.diagnostics, errors, warnings);
            say!(
                "{}\n",
                serde_json::to_string_pretty(&doc).unwrap_or_default()
            );
        }
    }
    if let Some(note) = l.registry_note.as_ref().filter(|_| errors > 0) {
        eprintln!("{note}");
    }
    if errors > 0 || (deny_warnings && warnings > 0) {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}

/// `lint --format json`'s document (`docs/lint.md`) for `sources`.
fn lint_json(
    sources: &SourceMap,
    policy_version: serde_json::Value,
    diags: &[crate::policy::Diagnostic],
    errors: usize,
    warnings: usize,
) -> serde_json::Value {
    serde_json::json!({
        "schema": "switchyard.lint/1",
        "files": sources.files().map(|(_, f)| f.name.clone()).collect::<Vec<_>>(),
        "policy_version": policy_version,
        "diagnostics": diagnostics_json(diags, sources),
        "summary": { "errors": errors, "warnings": warnings },
    })
}

/// `diags` as the `diagnostics` array of the JSON documents (`docs/lint.md`): each
/// [`crate::policy::Diagnostic::to_json`], with `name` for a lint warning.
fn diagnostics_json(
    diags: &[crate::policy::Diagnostic],
    sources: &SourceMap,
) -> Vec<serde_json::Value> {
    diags
        .iter()
        .map(|d| {
            let mut v = d.to_json(sources);
            if let Some(name) = lint_codes::ALL
                .iter()
                .find(|(c, _)| *c == d.code)
                .map(|(_, n)| *n)
            {
                v["name"] = serde_json::Value::from(name);
            }
            v
        })
        .collect()
}

/// `switchyard fmt`: rewrites the files that change (each replaced in one step, so
/// the policy watch never sees one half written; see `super::replace`), or with
/// `check` lists them.
pub fn fmt(paths: &[PathBuf], config: Option<&Path>, check: bool) -> ExitCode {
    let files =
        match load_config(config).and_then(|c| policy_files(paths, c.policies.dir.as_deref())) {
            Ok(f) => f,
            Err(e) => return usage(e),
        };
    if files.is_empty() && paths.is_empty() {
        // As lint and test say: with nothing to read, say so rather than pass silently.
        eprintln!(
            "note: no policy files given and the config has no policies.dir: nothing to format (pass paths or --config)"
        );
    }
    let (mut changed, mut broken) = (0, 0);
    for f in &files {
        // Read as lint reads it: a file that is not UTF-8 is a diagnostic (E0106) and
        // the other files are still formatted.
        let name = crate::routing::policy::tool_path(f);
        let text = match crate::routing::policy::read_policy_file(f, &name) {
            Ok(t) => t,
            Err(LoadError::NotUtf8(bad)) => {
                broken += 1;
                eprint!("{}", bad.render());
                continue;
            }
            Err(e) => return usage(UsageError(e.to_string())),
        };
        match crate::policy::fmt::format_str(&name, &text) {
            Ok(new) if new == text => {}
            Ok(new) => {
                changed += 1;
                if check {
                    say!("{name}\n");
                } else if let Err(e) = super::replace::replace_file(f, new.as_bytes()) {
                    return usage(UsageError(format!("cannot write {}: {e}", f.display())));
                }
            }
            Err(FmtError::Parse(m, d)) => {
                broken += 1;
                eprint!("{}", render_all(&d, &m));
            }
            Err(FmtError::Unsafe(why)) => {
                // A bug in fmt, caught before writing: say so, leave the file alone.
                broken += 1;
                eprintln!(
                    "error: fmt: {name}: {why}; the file is left unchanged (a bug in `switchyard fmt`: please report it with the file)"
                );
            }
        }
    }
    if check && changed > 0 {
        eprintln!("{changed} file(s) would be reformatted");
    }
    if broken > 0 || (check && changed > 0) {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}

/// `switchyard test`.
pub fn test(
    paths: &[PathBuf],
    config: Option<&Path>,
    format: Format,
    engine: crate::policy::jit::engine::EngineMode,
    budget: Option<u64>,
) -> ExitCode {
    let l = match load(paths, config) {
        Ok(l) => l,
        // As for a set that does not check: no test ran, and the reasons.
        Err(e) => {
            return load_failed(e, format, |bad| {
                test_json(
                    &crate::policy::TestReport {
                        budget,
                        ..Default::default()
                    },
                    diagnostics_json(&bad.diagnostics, &bad.sources),
                )
            })
        }
    };
    let set = match crate::policy::parse_and_check(&l.sources, &l.registry) {
        Ok(s) => s,
        Err(d) => {
            match format {
                Format::Human => eprint!("{}", render_all(&d, &l.sources)),
                // The document still comes, with no test run and the reasons.
                Format::Json => say_test_json(
                    &crate::policy::TestReport {
                        budget,
                        ..Default::default()
                    },
                    diagnostics_json(&d, &l.sources),
                ),
            }
            if let Some(note) = &l.registry_note {
                eprintln!("{note}");
            }
            return ExitCode::from(1);
        }
    };
    let compiled = crate::policy::jit::CompiledPolicySet::compile(set);
    if let (
        Some(why),
        crate::policy::jit::engine::EngineMode::Jit | crate::policy::jit::engine::EngineMode::Both,
    ) = (compiled.fallback_reason(), engine)
    {
        eprintln!("note: the set runs on the interpreter: {why}");
    }
    let report = crate::policy::jit::engine::run_tests_budgeted(&compiled, engine, budget);
    match format {
        Format::Human => say!("{}", report.render()),
        Format::Json => say_test_json(&report, Vec::new()),
    }
    if report.skipped > 0 {
        eprintln!(
            "note: {} test(s) skipped: together the tests need more than the budget of {} requests; raise it with --test-budget N (0: unlimited)",
            report.skipped,
            budget.unwrap_or(u64::MAX)
        );
    }
    if report.failed > 0 || report.skipped > 0 {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}

/// Prints `test --format json`'s document ([`test_json`]).
fn say_test_json(report: &crate::policy::TestReport, diagnostics: Vec<serde_json::Value>) {
    let doc = test_json(report, diagnostics);
    say!(
        "{}\n",
        serde_json::to_string_pretty(&doc).unwrap_or_default()
    );
}

/// `test --format json`'s document: the report's fields and `diagnostics`, why the
/// set did not check or could not be read (empty when it did; then the tests ran).
fn test_json(
    report: &crate::policy::TestReport,
    diagnostics: Vec<serde_json::Value>,
) -> serde_json::Value {
    let mut doc = serde_json::to_value(report).unwrap_or_default();
    doc["diagnostics"] = serde_json::Value::from(diagnostics);
    doc
}
