//! `switchyard keys create|list|revoke`: manage a key file (`auth.key_file`).
//!
//! The file holds only hashes. `create` prints the new secret once, on stdout, and
//! never again; `list` shows ids, organizations and revocation, never hashes. The
//! file is rewritten whole (a temporary file renamed over it, so a serving gateway
//! never reads half a file); comments in it are not kept.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use crate::auth::keys::{hash_secret, new_secret};
use crate::config::auth::{parse_key_file, KeyFile};
use crate::config::{Budget, KeyEntry, RateLimit};
use crate::policy::ast::PriorityLevel;

/// `switchyard keys` subcommands.
#[derive(Debug, clap::Subcommand)]
pub enum KeysCommand {
    /// Add a key and print its secret (once).
    Create(CreateArgs),
    /// List the keys: id, organization, revoked.
    List(FileArg),
    /// Mark a key revoked (refused from the next reload of the file).
    Revoke(RevokeArgs),
}

/// `--file`.
#[derive(Debug, clap::Args)]
pub struct FileArg {
    /// The key file.
    #[arg(long)]
    pub file: PathBuf,
}

/// `keys create` flags.
#[derive(Debug, clap::Args)]
pub struct CreateArgs {
    /// The key file (created if missing).
    #[arg(long)]
    pub file: PathBuf,
    /// The key's id, e.g. `key-team-a`.
    #[arg(long)]
    pub id: String,
    /// Its organization.
    #[arg(long)]
    pub org: Option<String>,
    /// Allowed logical models, comma-separated (default: all).
    #[arg(long, value_delimiter = ',')]
    pub models: Option<Vec<String>>,
    /// Allowed providers, comma-separated (default: all).
    #[arg(long, value_delimiter = ',')]
    pub providers: Option<Vec<String>>,
    /// Starting priority: low, normal or high.
    #[arg(long, default_value = "normal")]
    pub priority: String,
    /// Highest level the `x-switchyard-priority` header may ask for: low, normal,
    /// high or critical (default: the starting priority).
    #[arg(long, value_name = "LEVEL")]
    pub max_priority: Option<String>,
    /// The key's own requests per minute (the refill of its requests bucket).
    #[arg(long, value_name = "N")]
    pub requests_per_min: Option<u64>,
    /// The key's own tokens per minute (the refill of its tokens bucket).
    #[arg(long, value_name = "N")]
    pub tokens_per_min: Option<u64>,
    /// The key's own spend budget per UTC day, USD.
    #[arg(long, value_name = "USD")]
    pub usd_per_day: Option<f64>,
    /// The key's own spend budget per UTC calendar month, USD.
    #[arg(long, value_name = "USD")]
    pub usd_per_month: Option<f64>,
}

/// `keys revoke` flags.
#[derive(Debug, clap::Args)]
pub struct RevokeArgs {
    /// The key file.
    #[arg(long)]
    pub file: PathBuf,
    /// The id of the key to revoke.
    #[arg(long)]
    pub id: String,
}

fn read(path: &Path, missing_ok: bool) -> Result<Vec<KeyEntry>, String> {
    match std::fs::read_to_string(path) {
        Ok(text) => parse_key_file(&text, &path.display().to_string()).map_err(|e| e.join("\n")),
        Err(e) if missing_ok && e.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
        Err(e) => Err(format!("cannot read {}: {e}", path.display())),
    }
}

fn write(path: &Path, keys: Vec<KeyEntry>) -> Result<(), String> {
    let text = serde_yaml::to_string(&KeyFile { keys }).map_err(|e| e.to_string())?;
    let tmp = path.with_extension("yaml.tmp");
    std::fs::write(&tmp, text)
        .and_then(|()| std::fs::rename(&tmp, path))
        .map_err(|e| format!("cannot write {}: {e}", path.display()))
}

/// Runs one `keys` subcommand.
pub fn run(cmd: KeysCommand) -> ExitCode {
    let result = match cmd {
        KeysCommand::Create(a) => create(a),
        KeysCommand::List(a) => list(&a.file),
        KeysCommand::Revoke(a) => revoke(&a.file, &a.id),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(1)
        }
    }
}

fn create(a: CreateArgs) -> Result<(), String> {
    let priority = match PriorityLevel::parse(&a.priority) {
        Some(p) if p != PriorityLevel::Critical => p,
        _ => {
            return Err(format!(
                "--priority `{}` is not one of low, normal, high",
                a.priority
            ))
        }
    };
    let max_priority = match a
        .max_priority
        .as_deref()
        .map(|m| (m, PriorityLevel::parse(m)))
    {
        None => None,
        Some((_, Some(m))) if m >= priority => Some(m),
        Some((m, Some(_))) => {
            return Err(format!(
                "--max-priority `{m}` is below --priority `{}`",
                priority.as_str()
            ))
        }
        Some((m, None)) => {
            return Err(format!(
                "--max-priority `{m}` is not one of low, normal, high, critical"
            ))
        }
    };
    let mut keys = read(&a.file, true)?;
    if a.id.trim().is_empty() {
        return Err("--id must not be empty".into());
    }
    if keys.iter().any(|k| k.id == a.id) {
        return Err(format!("a key with id \"{}\" exists already", a.id));
    }
    let limits = RateLimit {
        requests_per_min: a.requests_per_min,
        tokens_per_min: a.tokens_per_min,
        ..RateLimit::default()
    };
    let budget = Budget {
        usd_per_day: a.usd_per_day,
        usd_per_month: a.usd_per_month,
    };
    let mut problems = limits.problems().into_iter().chain(budget.problems());
    if let Some((field, message)) = problems.next() {
        return Err(format!("--{}: {message}", field.replace('_', "-")));
    }
    let secret = new_secret();
    keys.push(KeyEntry {
        id: a.id.clone(),
        hash: hash_secret(&secret),
        org: a.org,
        models: a.models,
        providers: a.providers,
        priority,
        max_priority,
        metadata: Default::default(),
        revoked: false,
        limits: (!limits.is_empty()).then_some(limits),
        budget: (!budget.is_empty()).then_some(budget),
    });
    write(&a.file, keys)?;
    eprintln!(
        "created key {} in {}; its secret follows and is not shown again:",
        a.id,
        a.file.display()
    );
    println!("{secret}");
    Ok(())
}

fn list(file: &Path) -> Result<(), String> {
    let keys = read(file, false)?;
    println!("{:<32} {:<24} REVOKED", "ID", "ORG");
    for k in keys {
        println!(
            "{:<32} {:<24} {}",
            k.id,
            k.org.as_deref().unwrap_or("-"),
            if k.revoked { "yes" } else { "no" }
        );
    }
    Ok(())
}

fn revoke(file: &Path, id: &str) -> Result<(), String> {
    let mut keys = read(file, false)?;
    let Some(k) = keys.iter_mut().find(|k| k.id == id) else {
        return Err(format!("no key with id \"{id}\" in {}", file.display()));
    };
    k.revoked = true;
    write(file, keys)?;
    eprintln!("revoked key {id}");
    Ok(())
}
