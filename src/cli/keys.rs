//! `switchyard keys create|list|revoke`: manage a key file (`auth.key_file`).
//!
//! The file holds only hashes. `create` prints the new secret once, on stdout, and
//! never again; `list` shows ids, organizations and revocation, never hashes. The
//! file is rewritten whole by `super::replace::write_file` (a temporary file of
//! its own renamed over it, so a serving gateway never reads half a file); it keeps
//! its permissions, a symlink stays a link, and a new file is made `0600`. Comments
//! in it are not kept.

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

/// The mode of a key file `create` makes: its owner's alone, since whoever reads
/// the hashes may try secrets against them offline.
const NEW_FILE_MODE: u32 = 0o600;

fn read(path: &Path, missing_ok: bool) -> Result<Vec<KeyEntry>, String> {
    match std::fs::read_to_string(path) {
        Ok(text) => parse_key_file(&text, &path.display().to_string()).map_err(|e| e.join("\n")),
        Err(e) if missing_ok && e.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
        Err(e) => Err(format!("cannot read {}: {e}", path.display())),
    }
}

fn write(path: &Path, keys: Vec<KeyEntry>) -> Result<(), String> {
    let text = serde_yaml::to_string(&KeyFile { keys }).map_err(|e| e.to_string())?;
    super::replace::write_file(path, text.as_bytes(), NEW_FILE_MODE)
        .map_err(|e| format!("cannot write {}: {e}", path.display()))
}

/// Holds off other `create` and `revoke` runs on the same file until dropped, so
/// two runs at once cannot both read the file, add their key and write it whole,
/// the later write dropping a key whose secret the earlier run printed.
fn lock(path: &Path) -> Result<super::replace::DirLock, String> {
    super::replace::lock_dir_of(path)
        .map_err(|e| format!("cannot lock the directory of {}: {e}", path.display()))
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
    let _lock = lock(&a.file)?;
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
    let _lock = lock(file)?;
    let mut keys = read(file, false)?;
    let Some(k) = keys.iter_mut().find(|k| k.id == id) else {
        return Err(format!("no key with id \"{id}\" in {}", file.display()));
    };
    k.revoked = true;
    write(file, keys)?;
    eprintln!("revoked key {id}");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    fn args(file: &Path, id: &str) -> CreateArgs {
        CreateArgs {
            file: file.to_path_buf(),
            id: id.into(),
            org: None,
            models: None,
            providers: None,
            priority: "normal".into(),
            max_priority: None,
            requests_per_min: None,
            tokens_per_min: None,
            usd_per_day: None,
            usd_per_month: None,
        }
    }

    fn ids(file: &Path) -> Vec<String> {
        read(file, false)
            .unwrap()
            .into_iter()
            .map(|k| k.id)
            .collect()
    }

    #[cfg(unix)]
    use crate::cli::replace::tests::mode;
    use crate::cli::replace::tests::names;

    #[cfg(unix)]
    #[test]
    fn keys_create_made_a_new_key_file_readable_by_everyone() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("keys.yaml");
        create(args(&p, "key-a")).unwrap();
        assert_eq!(mode(&p), 0o600);
        assert_eq!(ids(&p), ["key-a"]);
        assert_eq!(names(dir.path()), ["keys.yaml"]);
    }

    #[cfg(unix)]
    #[test]
    fn keys_revoke_gave_a_0600_key_file_the_umask_mode() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("keys.yaml");
        create(args(&p, "key-a")).unwrap();
        fs::set_permissions(&p, fs::Permissions::from_mode(0o640)).unwrap();
        create(args(&p, "key-b")).unwrap();
        assert_eq!(mode(&p), 0o640);
        fs::set_permissions(&p, fs::Permissions::from_mode(0o600)).unwrap();
        revoke(&p, "key-a").unwrap();
        assert_eq!(mode(&p), 0o600);
        assert!(read(&p, false).unwrap()[0].revoked);
    }

    #[cfg(unix)]
    #[test]
    fn keys_revoke_replaced_a_symlinked_key_file_by_a_plain_file() {
        use std::os::unix::fs::symlink;
        let dir = tempfile::tempdir().unwrap();
        let secrets = dir.path().join("secrets");
        fs::create_dir(&secrets).unwrap();
        let real = secrets.join("keys.yaml");
        create(args(&real, "key-a")).unwrap();
        let link = dir.path().join("keys.yaml");
        symlink("secrets/keys.yaml", &link).unwrap();
        create(args(&link, "key-b")).unwrap();
        revoke(&link, "key-a").unwrap();
        assert!(fs::symlink_metadata(&link)
            .unwrap()
            .file_type()
            .is_symlink());
        assert_eq!(ids(&real), ["key-a", "key-b"]);
        assert!(read(&real, false).unwrap()[0].revoked);
        assert_eq!(mode(&real), 0o600);
        assert_eq!(names(&secrets), ["keys.yaml"]);
        assert_eq!(names(dir.path()), ["keys.yaml", "secrets"]);
    }

    #[test]
    fn keys_runs_at_once_wrote_through_one_fixed_temporary_file() {
        // Another run's temporary file, half written: this run must neither
        // overwrite it nor rename it over the key file.
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("keys.yaml");
        create(args(&p, "key-a")).unwrap();
        let other = dir.path().join("keys.yaml.tmp");
        fs::write(&other, "keys:\n  - id: half").unwrap();
        revoke(&p, "key-a").unwrap();
        assert_eq!(fs::read_to_string(&other).unwrap(), "keys:\n  - id: half");
        assert_eq!(ids(&p), ["key-a"]);
        assert!(read(&p, false).unwrap()[0].revoked);
    }

    #[test]
    fn keys_create_runs_at_once_lost_keys_whose_secrets_were_printed() {
        // Each run reads the file, adds its key and writes the whole file: two runs
        // interleaved that way both print a secret, but only the later file stays.
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("keys.yaml");
        std::thread::scope(|s| {
            for t in 0..6 {
                let p = &p;
                s.spawn(move || {
                    for n in 0..5 {
                        create(args(p, &format!("key-{t}-{n}"))).unwrap();
                    }
                });
            }
        });
        assert_eq!(ids(&p).len(), 30);
    }
}
