//! Build script: records the git commit the binary is built from as
//! `SWITCHYARD_COMMIT` (`switchyard --version`, `switchyard_build_info`).
//!
//! The commit is `$SWITCHYARD_COMMIT` when set (the container build passes it), else
//! `git rev-parse --short=12 HEAD`; `unknown` when the source is not a
//! git checkout or git is not installed (a crate tarball, a bare copy). Uncommitted
//! edits are not marked: telling them apart would rerun this script on every edit.

use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    if !out.status.success() {
        return None;
    }
    let s = String::from_utf8(out.stdout).ok()?;
    Some(s.trim().to_string())
}

fn main() {
    // A build without .git (the container image's) passes the commit in.
    println!("cargo:rerun-if-env-changed=SWITCHYARD_COMMIT");
    let given = std::env::var("SWITCHYARD_COMMIT")
        .ok()
        .filter(|c| !c.is_empty() && c != "unknown");
    let commit =
        given.or_else(|| git(&["rev-parse", "--short=12", "HEAD"]).filter(|c| !c.is_empty()));
    let commit = commit.unwrap_or_else(|| "unknown".to_string());
    println!("cargo:rustc-env=SWITCHYARD_COMMIT={commit}");
    // Rerun when HEAD moves (a commit, a checkout); in a worktree these files live
    // under its own git dir. (A path that does not exist would rerun it every build.)
    let mut watched = vec!["HEAD".to_string(), "packed-refs".to_string()];
    watched.extend(git(&["symbolic-ref", "-q", "HEAD"]));
    for what in watched {
        if let Some(p) = git(&["rev-parse", "--git-path", &what]) {
            if std::path::Path::new(&p).exists() {
                println!("cargo:rerun-if-changed={p}");
            }
        }
    }
    println!("cargo:rerun-if-changed=build.rs");
}
