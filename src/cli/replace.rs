//! Replacing a file's contents in one step, for `switchyard fmt` (policy files) and
//! `switchyard keys` (key files).
//!
//! An in-place write (`fs::write`) truncates the file, then writes it: the gateway's
//! policy watch, or anyone reading the file, can see it empty or half written in
//! between. Here the new contents go to a temporary file in the same directory,
//! which is then renamed over the original (a rename within one filesystem is
//! atomic), so a reader sees the old file or the new one, never a mix.
//!
//! What the replacement keeps:
//! - a symbolic link stays a link: the file it points to (after every link in the
//!   chain) is the one replaced, in its own directory;
//! - the permission bits, and on Unix the owner and group where the process may
//!   set them (a file formatted by its owner keeps its owner);
//! - not hard links: another name of the same file keeps the old contents, as
//!   with an editor's save by rename.
//!
//! [`write_file`] also creates a file that does not exist yet, with the mode its
//! caller names whatever the umask (`0600` for a key file). The temporary file is
//! created `0600` on Unix and given its final mode only when written, so contents
//! meant for the owner alone are never readable by others on the way.
//!
//! The temporary file is named `.<name>.<pid>.<n>.tmp`: a dotfile ending in `.tmp`,
//! which the policy watch and the policy directory's listing both skip.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

/// How many temporary names are tried before giving up (each is created with
/// `create_new`, so a name left by a crashed run is never overwritten).
const TEMP_NAMES: u32 = 64;

/// Replaces the contents of `path` (or of the file a symlink at `path` points to)
/// with `contents`, by writing a temporary file beside it and renaming it over.
///
/// # Errors
/// The file cannot be resolved or read for its permissions, the directory is not
/// writable, or the write, sync or rename fails; the temporary file is removed then
/// and the original is untouched.
pub fn replace_file(path: &Path, contents: &[u8]) -> io::Result<()> {
    let target = fs::canonicalize(path)?;
    let meta = fs::metadata(&target)?;
    put(&target, contents, Some(&meta), 0)
}

/// Like [`replace_file`], but a file missing at `path` is created, with permission
/// bits `new_mode` (Unix; elsewhere the platform's default).
///
/// # Errors
/// As [`replace_file`]; also a symbolic link at `path` whose file does not exist
/// (which file to create is then a guess).
pub fn write_file(path: &Path, contents: &[u8], new_mode: u32) -> io::Result<()> {
    match fs::canonicalize(path) {
        Ok(target) => {
            let meta = fs::metadata(&target)?;
            put(&target, contents, Some(&meta), new_mode)
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            if fs::symlink_metadata(path).is_ok() {
                return Err(io::Error::new(
                    io::ErrorKind::NotFound,
                    "it is a symbolic link to a file that does not exist",
                ));
            }
            let Some(name) = path.file_name() else {
                return Err(io::Error::other("not a file in a directory"));
            };
            let dir = match path.parent() {
                Some(d) if !d.as_os_str().is_empty() => fs::canonicalize(d)?,
                _ => std::env::current_dir()?,
            };
            put(&dir.join(name), contents, None, new_mode)
        }
        Err(e) => Err(e),
    }
}

/// An exclusive advisory lock on a directory, released when dropped.
#[derive(Debug)]
pub struct DirLock {
    #[cfg(unix)]
    _dir: File,
}

/// Locks the directory [`write_file`] would write `path` in (a symlink resolved),
/// waiting for another holder. Read-modify-write cycles on one file hold it so that
/// none writes over another's change; the lock is on the directory since the file
/// itself is replaced by each write (a lock on it would stay on the old inode).
/// Unix only (`flock`); elsewhere nothing is locked.
///
/// # Errors
/// The directory cannot be resolved or opened, or the lock fails.
pub fn lock_dir_of(path: &Path) -> io::Result<DirLock> {
    #[cfg(unix)]
    {
        let dir = match fs::canonicalize(path) {
            Ok(t) => t.parent().map(Path::to_path_buf),
            Err(e) if e.kind() == io::ErrorKind::NotFound => match path.parent() {
                Some(d) if !d.as_os_str().is_empty() => Some(fs::canonicalize(d)?),
                _ => Some(std::env::current_dir()?),
            },
            Err(e) => return Err(e),
        };
        let dir = File::open(dir.ok_or_else(|| io::Error::other("not a file in a directory"))?)?;
        dir.lock()?;
        Ok(DirLock { _dir: dir })
    }
    #[cfg(not(unix))]
    {
        let _ = path;
        Ok(DirLock {})
    }
}

/// Writes `target` (a resolved path) by temp-and-rename; `original` is the file's
/// metadata when it exists, else it gets `new_mode`.
fn put(
    target: &Path,
    contents: &[u8],
    original: Option<&fs::Metadata>,
    new_mode: u32,
) -> io::Result<()> {
    let (Some(dir), Some(name)) = (target.parent(), target.file_name()) else {
        return Err(io::Error::other("not a file in a directory"));
    };
    let (tmp, file) = create_temp(dir, &name.to_string_lossy())?;
    let written = fill(file, contents, original, new_mode).and_then(|()| fs::rename(&tmp, target));
    if let Err(e) = written {
        let _ = fs::remove_file(&tmp);
        return Err(e);
    }
    sync_dir(dir);
    Ok(())
}

/// Writes `contents`, gives the file the original's owner and permissions (or
/// `new_mode` for a new file), and flushes it to disk before the rename makes it
/// visible.
fn fill(
    mut file: File,
    contents: &[u8],
    original: Option<&fs::Metadata>,
    new_mode: u32,
) -> io::Result<()> {
    file.write_all(contents)?;
    let Some(original) = original else {
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            file.set_permissions(fs::Permissions::from_mode(new_mode))?;
        }
        #[cfg(not(unix))]
        let _ = new_mode;
        return file.sync_all();
    };
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt as _;
        // Best effort: only root may give a file to another user; for the owner
        // formatting their own file this is a no-op. Before the mode, since a
        // change of owner may clear set-id bits.
        let _ = std::os::unix::fs::fchown(&file, Some(original.uid()), Some(original.gid()));
    }
    file.set_permissions(original.permissions())?;
    file.sync_all()
}

/// Creates a new, empty temporary file in `dir` for a file named `name`.
fn create_temp(dir: &Path, name: &str) -> io::Result<(PathBuf, File)> {
    let pid = std::process::id();
    for n in 0..TEMP_NAMES {
        let tmp = dir.join(format!(".{name}.{pid}.{n}.tmp"));
        let mut options = OpenOptions::new();
        options.write(true).create_new(true);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
        match options.open(&tmp) {
            Ok(f) => return Ok((tmp, f)),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(e) => {
                return Err(io::Error::new(
                    e.kind(),
                    format!("cannot create a temporary file in {}: {e}", dir.display()),
                ))
            }
        }
    }
    Err(io::Error::new(
        io::ErrorKind::AlreadyExists,
        format!(
            "cannot create a temporary file in {}: {TEMP_NAMES} names taken",
            dir.display()
        ),
    ))
}

/// Flushes the directory entry of the rename to disk (Unix; best effort: the
/// contents are already safe, and some filesystems refuse to sync a directory).
fn sync_dir(dir: &Path) {
    #[cfg(unix)]
    if let Ok(d) = File::open(dir) {
        let _ = d.sync_all();
    }
    #[cfg(not(unix))]
    let _ = dir;
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    /// The names in `dir`, sorted (a temporary file left behind shows here).
    pub(in crate::cli) fn names(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> = fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }

    /// The permission bits of `p` (setuid, setgid and sticky included).
    #[cfg(unix)]
    pub(in crate::cli) fn mode(p: &Path) -> u32 {
        use std::os::unix::fs::PermissionsExt as _;
        fs::metadata(p).unwrap().permissions().mode() & 0o7777
    }

    #[test]
    fn replaces_by_rename_and_leaves_no_temporary_file() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("a.policy");
        fs::write(&p, "old").unwrap();
        replace_file(&p, b"new").unwrap();
        assert_eq!(fs::read_to_string(&p).unwrap(), "new");
        assert_eq!(names(dir.path()), ["a.policy"]);
    }

    #[cfg(unix)]
    #[test]
    fn keeps_permissions_and_follows_a_chain_of_symlinks() {
        use std::os::unix::fs::{symlink, PermissionsExt as _};
        let dir = tempfile::tempdir().unwrap();
        let real = dir.path().join("real");
        fs::create_dir(&real).unwrap();
        let target = real.join("t.policy");
        fs::write(&target, "old").unwrap();
        fs::set_permissions(&target, fs::Permissions::from_mode(0o640)).unwrap();
        let mid = dir.path().join("mid.policy");
        symlink(&target, &mid).unwrap();
        let link = dir.path().join("a.policy");
        symlink("mid.policy", &link).unwrap();
        replace_file(&link, b"new").unwrap();
        assert_eq!(fs::read_to_string(&target).unwrap(), "new");
        assert!(fs::symlink_metadata(&link)
            .unwrap()
            .file_type()
            .is_symlink());
        assert!(fs::symlink_metadata(&mid).unwrap().file_type().is_symlink());
        let mode = fs::metadata(&target).unwrap().permissions().mode() & 0o7777;
        assert_eq!(mode, 0o640);
        assert_eq!(names(&real), ["t.policy"]);
        assert_eq!(names(dir.path()), ["a.policy", "mid.policy", "real"]);
    }

    #[cfg(unix)]
    #[test]
    fn a_read_only_file_keeps_its_mode_and_a_failure_leaves_the_original() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("a.policy");
        fs::write(&p, "old").unwrap();
        fs::set_permissions(&p, fs::Permissions::from_mode(0o444)).unwrap();
        replace_file(&p, b"new").unwrap();
        assert_eq!(fs::read_to_string(&p).unwrap(), "new");
        assert_eq!(
            fs::metadata(&p).unwrap().permissions().mode() & 0o777,
            0o444
        );
        // The rename's target is a directory: the rename fails, the temporary file
        // goes, the directory is untouched.
        let d = dir.path().join("d.policy");
        fs::create_dir(&d).unwrap();
        assert!(replace_file(&d, b"x").is_err());
        assert!(d.is_dir());
        assert_eq!(names(dir.path()), ["a.policy", "d.policy"]);
    }

    #[cfg(unix)]
    #[test]
    fn write_file_creates_a_missing_file_with_its_mode_but_not_behind_a_dangling_link() {
        use std::os::unix::fs::{symlink, PermissionsExt as _};
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("keys.yaml");
        write_file(&p, b"one", 0o600).unwrap();
        assert_eq!(
            fs::metadata(&p).unwrap().permissions().mode() & 0o777,
            0o600
        );
        fs::set_permissions(&p, fs::Permissions::from_mode(0o640)).unwrap();
        write_file(&p, b"two", 0o600).unwrap();
        assert_eq!(fs::read_to_string(&p).unwrap(), "two");
        assert_eq!(
            fs::metadata(&p).unwrap().permissions().mode() & 0o777,
            0o640
        );
        let link = dir.path().join("gone.yaml");
        symlink("nowhere/gone.yaml", &link).unwrap();
        assert!(write_file(&link, b"x", 0o600).is_err());
        assert_eq!(names(dir.path()), ["gone.yaml", "keys.yaml"]);
    }
}
