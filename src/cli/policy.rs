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
use crate::policy::lint::{codes as lint_codes, lint_sources};
use crate::policy::{Registry, RegistryEndpoint, RegistryModel, SourceMap};

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
    let path = match path {
        Some(p) => Some(p.to_path_buf()),
        None if Path::new("switchyard.yaml").exists() => Some(PathBuf::from("switchyard.yaml")),
        None => None,
    };
    match path {
        Some(p) => {
            let text = std::fs::read_to_string(&p)
                .map_err(|e| UsageError(format!("cannot read config {}: {e}", p.display())))?;
            config::parse_str(&text, Some(&p))
                .map_err(|e| UsageError(format!("invalid config {}:\n{e}", p.display())))
        }
        None => Ok(config::embedded(|v| std::env::var_os(v).is_some_and(|s| !s.is_empty())).0),
    }
}

/// The policy registry of a gateway config: its models and endpoints, with each
/// endpoint's prices taken from its provider.
pub fn registry(config: &Config) -> Registry {
    Registry::new(
        config
            .models
            .iter()
            .map(|m| RegistryModel {
                name: m.name.clone(),
                endpoints: m
                    .endpoints
                    .iter()
                    .map(|e| {
                        let price = config
                            .provider(&e.provider)
                            .map(|p| p.pricing)
                            .unwrap_or_default();
                        RegistryEndpoint {
                            id: e.id.clone(),
                            provider: e.provider.clone(),
                            model: e.model.clone(),
                            priority: e.priority,
                            weight: e.weight,
                            input_per_mtok: price.input_per_mtok,
                            output_per_mtok: price.output_per_mtok,
                        }
                    })
                    .collect(),
            })
            .collect(),
    )
}

/// The `.policy` files named by `paths` (directories are searched recursively,
/// dotfiles skipped), sorted by path; `default_dir` when `paths` is empty.
pub fn policy_files(paths: &[PathBuf], default_dir: &Path) -> Result<Vec<PathBuf>, UsageError> {
    let roots: Vec<PathBuf> = if paths.is_empty() {
        vec![default_dir.to_path_buf()]
    } else {
        paths.to_vec()
    };
    let mut out = Vec::new();
    for root in roots {
        let meta = std::fs::metadata(&root)
            .map_err(|e| UsageError(format!("cannot read {}: {e}", root.display())))?;
        if meta.is_dir() {
            walk(&root, &mut out, 0)?;
        } else {
            out.push(root);
        }
    }
    out.sort();
    out.dedup();
    Ok(out)
}

fn walk(dir: &Path, out: &mut Vec<PathBuf>, depth: usize) -> Result<(), UsageError> {
    if depth > 16 {
        return Ok(());
    }
    let rd = std::fs::read_dir(dir)
        .map_err(|e| UsageError(format!("cannot read directory {}: {e}", dir.display())))?;
    for e in rd.flatten() {
        let p = e.path();
        if p.file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.starts_with('.'))
        {
            continue;
        }
        if p.is_dir() {
            walk(&p, out, depth + 1)?;
        } else if p.extension().is_some_and(|x| x == "policy") {
            out.push(p);
        }
    }
    Ok(())
}

/// Reads `files` into a source map, named by their paths.
pub fn read_sources(files: &[PathBuf]) -> Result<SourceMap, UsageError> {
    let mut m = SourceMap::new();
    for f in files {
        let text = std::fs::read_to_string(f)
            .map_err(|e| UsageError(format!("cannot read {}: {e}", f.display())))?;
        m.add(f.display().to_string(), text);
    }
    Ok(m)
}

/// Config, registry and sources for the tools.
pub struct Loaded {
    /// The registry from the config.
    pub registry: Registry,
    /// The policy files.
    pub sources: SourceMap,
}

/// Loads config, registry and policy files.
pub fn load(paths: &[PathBuf], config: Option<&Path>) -> Result<Loaded, UsageError> {
    let cfg = load_config(config)?;
    let files = policy_files(paths, &cfg.policies.dir)?;
    Ok(Loaded {
        registry: registry(&cfg),
        sources: read_sources(&files)?,
    })
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
        Err(e) => return usage(e),
    };
    let out = lint_sources(&l.sources, &l.registry);
    let errors = out.diagnostics.iter().filter(|d| d.is_error()).count();
    let warnings = out
        .diagnostics
        .iter()
        .filter(|d| d.severity == Severity::Warning)
        .count();
    match format {
        Format::Human => say!("{}", render_all(&out.diagnostics, &l.sources)),
        Format::Json => {
            let doc = serde_json::json!({
                "schema": "switchyard.lint/1",
                "files": l.sources.files().map(|(_, f)| f.name.clone()).collect::<Vec<_>>(),
                "policy_version": crate::policy::check::version(&l.sources),
                "diagnostics": out.diagnostics.iter().map(|d| {
                    let mut v = d.to_json(&l.sources);
                    if let Some(name) = lint_codes::ALL.iter().find(|(c, _)| *c == d.code).map(|(_, n)| *n) {
                        v["name"] = serde_json::Value::from(name);
                    }
                    v
                }).collect::<Vec<_>>(),
                "summary": { "errors": errors, "warnings": warnings },
            });
            say!(
                "{}\n",
                serde_json::to_string_pretty(&doc).unwrap_or_default()
            );
        }
    }
    if errors > 0 || (deny_warnings && warnings > 0) {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}

/// `switchyard fmt`: rewrites files in place, or with `check` lists the files that
/// would change.
pub fn fmt(paths: &[PathBuf], config: Option<&Path>, check: bool) -> ExitCode {
    let files = match load_config(config).and_then(|c| policy_files(paths, &c.policies.dir)) {
        Ok(f) => f,
        Err(e) => return usage(e),
    };
    let (mut changed, mut broken) = (0, 0);
    for f in &files {
        let text = match std::fs::read_to_string(f) {
            Ok(t) => t,
            Err(e) => return usage(UsageError(format!("cannot read {}: {e}", f.display()))),
        };
        match crate::policy::fmt::format_str(&f.display().to_string(), &text) {
            Ok(new) if new == text => {}
            Ok(new) => {
                changed += 1;
                if check {
                    say!("{}\n", f.display());
                } else if let Err(e) = std::fs::write(f, new) {
                    return usage(UsageError(format!("cannot write {}: {e}", f.display())));
                }
            }
            Err((m, d)) => {
                broken += 1;
                eprint!("{}", render_all(&d, &m));
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
pub fn test(paths: &[PathBuf], config: Option<&Path>, format: Format) -> ExitCode {
    let l = match load(paths, config) {
        Ok(l) => l,
        Err(e) => return usage(e),
    };
    let set = match crate::policy::parse_and_check(&l.sources, &l.registry) {
        Ok(s) => s,
        Err(d) => {
            eprint!("{}", render_all(&d, &l.sources));
            return ExitCode::from(1);
        }
    };
    let report = crate::policy::run_tests(&set);
    match format {
        Format::Human => say!("{}", report.render()),
        Format::Json => say!(
            "{}\n",
            serde_json::to_string_pretty(&report).unwrap_or_default()
        ),
    }
    if report.failed > 0 {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}
