//! Atomic file writes and the modes of the files under `$ALBEDO_HOME`.
//!
//! [`write_atomic`]: a temporary file with a random name beside the target, created
//! exclusively (`O_CREAT|O_EXCL`) with its final mode, written, fsync'd, renamed over the
//! target, then the folder fsync'd. A target that is a symbolic link is written through: the
//! link is resolved, the temporary file goes beside the file it names, and the link stays. An
//! existing file keeps its mode. Nothing is left behind when a write fails.
//!
//! [`create_new_atomic`] creates a file only if it does not exist, whole (`fingerprint.key`).
//! [`create_home`] makes `$ALBEDO_HOME` (mode 0700), [`create_private_file`] a new file of
//! mode 0600 (the catalogue database before SQLite opens it), and [`open_private`] opens a
//! file that must not be readable by group or others (`creds.json`, `fingerprint.key`).
//! Modes are set with `fchmod`/`chmod` after creation, so the umask does not change them.
//!
//! Owns: how files are written and checked. Must not touch: what they contain.

use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// How many symbolic links [`write_atomic`] follows before giving up (Linux's own limit).
const MAX_SYMLINKS: usize = 40;

/// The mode bits of a file or folder (permissions, setuid/setgid/sticky).
pub fn mode_of(meta: &std::fs::Metadata) -> u32 {
    meta.permissions().mode() & 0o7777
}

/// The file a path names after following symbolic links (the path itself when it is not
/// one). The final file need not exist; a dangling link names the file it would create.
pub fn resolve_links(path: &Path) -> std::io::Result<PathBuf> {
    let mut p = path.to_path_buf();
    for _ in 0..MAX_SYMLINKS {
        match std::fs::symlink_metadata(&p) {
            Ok(m) if m.file_type().is_symlink() => {
                let target = std::fs::read_link(&p)?;
                p = if target.is_absolute() {
                    target
                } else {
                    p.parent().unwrap_or(Path::new(".")).join(target)
                };
            }
            Ok(_) => return Ok(p),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(p),
            Err(e) => return Err(e),
        }
    }
    Err(std::io::Error::other(format!(
        "{}: more than {MAX_SYMLINKS} levels of symbolic links",
        path.display()
    )))
}

/// Create `path` exclusively with exactly `mode` (whatever the umask), opened for writing.
fn create_exclusive(path: &Path, mode: u32) -> std::io::Result<std::fs::File> {
    let f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(path)?;
    f.set_permissions(std::fs::Permissions::from_mode(mode))?;
    Ok(f)
}

/// A new temporary file with a random name in `dir`, for `name`.
fn create_temp(dir: &Path, name: &str, mode: u32) -> std::io::Result<(PathBuf, std::fs::File)> {
    let mut last = None;
    for _ in 0..16 {
        let tmp = dir.join(format!(".{name}.tmp-{:016x}", rand::random::<u64>()));
        match create_exclusive(&tmp, mode) {
            Ok(f) => return Ok((tmp, f)),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => last = Some(e),
            Err(e) => return Err(e),
        }
    }
    Err(last.unwrap_or_else(|| std::io::Error::other("no free temporary name")))
}

/// fsync a folder, so that a rename in it survives a crash. File systems that cannot sync a
/// folder say so with `EINVAL`; that is not an error.
fn sync_dir(dir: &Path) -> std::io::Result<()> {
    match std::fs::File::open(dir).and_then(|d| d.sync_all()) {
        Err(e) if e.raw_os_error() == Some(nix::libc::EINVAL) => Ok(()),
        r => r,
    }
}

/// Write `bytes` to `path` atomically: a reader sees the old file or the new one, never a
/// part. `mode` is used for a new file; an existing file keeps its own mode. A symbolic link
/// is written through (its target is replaced, the link stays).
pub fn write_atomic(path: &Path, bytes: &[u8], mode: u32) -> std::io::Result<()> {
    let target = resolve_links(path)?;
    let dir = match target.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    std::fs::create_dir_all(&dir)?;
    let mode = match std::fs::metadata(&target) {
        Ok(m) => mode_of(&m),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => mode,
        Err(e) => return Err(e),
    };
    let name = target
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or("file");
    let (tmp, mut f) = create_temp(&dir, name, mode)?;
    let result = (|| {
        f.write_all(bytes)?;
        f.sync_all()?;
        drop(f);
        std::fs::rename(&tmp, &target)
    })();
    if let Err(e) = result {
        let _ = std::fs::remove_file(&tmp);
        return Err(e);
    }
    sync_dir(&dir)
}

/// Create `path` holding `bytes` with exactly `mode`, only if it does not exist, so that no
/// reader ever sees a part of it: a temporary file is written and hard-linked into place
/// (`link` fails when the name is taken). Returns whether it created the file (`false`: it
/// was there). On a file system without hard links the file is created exclusively and
/// written in place.
pub fn create_new_atomic(path: &Path, bytes: &[u8], mode: u32) -> std::io::Result<bool> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("file");
    let (tmp, mut f) = create_temp(&dir, name, mode)?;
    let linked = (|| {
        f.write_all(bytes)?;
        f.sync_all()?;
        drop(f);
        std::fs::hard_link(&tmp, path)
    })();
    let _ = std::fs::remove_file(&tmp);
    match linked {
        Ok(()) => sync_dir(&dir).map(|()| true),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(false),
        Err(e)
            if [Some(nix::libc::EPERM), Some(nix::libc::EOPNOTSUPP)]
                .contains(&e.raw_os_error()) =>
        {
            let mut f = match create_exclusive(path, mode) {
                Ok(f) => f,
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => return Ok(false),
                Err(e) => return Err(e),
            };
            f.write_all(bytes)?;
            f.sync_all()?;
            sync_dir(&dir).map(|()| true)
        }
        Err(e) => Err(e),
    }
}

/// What [`create_home`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HomeStatus {
    /// Created now, mode 0700.
    Created,
    /// It was there already with this mode, which group or others can use (a warning; the
    /// mode is not changed).
    Loose(u32),
    /// It was there already, private.
    Private,
}

/// Create `$ALBEDO_HOME` with mode 0700 (its missing parents get the usual modes), or report
/// the mode of the existing one.
pub fn create_home(home: &Path) -> std::io::Result<HomeStatus> {
    match std::fs::metadata(home) {
        Ok(m) if m.is_dir() => {
            let mode = mode_of(&m);
            return Ok(if mode & 0o077 != 0 {
                HomeStatus::Loose(mode)
            } else {
                HomeStatus::Private
            });
        }
        Ok(_) => {
            return Err(std::io::Error::new(
                std::io::ErrorKind::AlreadyExists,
                "it exists and is not a folder",
            ))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    if let Some(parent) = home.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent)?;
    }
    match std::fs::DirBuilder::new().mode(0o700).create(home) {
        Ok(()) => {
            std::fs::set_permissions(home, std::fs::Permissions::from_mode(0o700))?;
            Ok(HomeStatus::Created)
        }
        // Another daemon created it meanwhile.
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => create_home(home),
        Err(e) => Err(e),
    }
}

/// Create `path` empty with mode 0600 if it does not exist. Returns whether it created it.
pub fn create_private_file(path: &Path) -> std::io::Result<bool> {
    match create_exclusive(path, 0o600) {
        Ok(f) => {
            f.sync_all()?;
            Ok(true)
        }
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(false),
        Err(e) => Err(e),
    }
}

/// Why a private file cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum PrivateFileError {
    #[error("cannot read {path}: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "{path} has mode {mode:04o}: group or others can read it, so it is not used; \
         run `chmod 600 {path}`"
    )]
    Readable { path: String, mode: u32 },
}

/// Open a file that must be private: `Ok(None)` when it does not exist, an error when group
/// or others have any access to it (nothing is read from it then). The mode is checked on
/// the opened file, so a file swapped meanwhile is not read unchecked.
pub fn open_private(path: &Path) -> Result<Option<std::fs::File>, PrivateFileError> {
    let io = |source| PrivateFileError::Io {
        path: path.display().to_string(),
        source,
    };
    let f = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io(e)),
    };
    let mode = mode_of(&f.metadata().map_err(io)?);
    if mode & 0o077 != 0 {
        return Err(PrivateFileError::Readable {
            path: path.display().to_string(),
            mode,
        });
    }
    Ok(Some(f))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    fn mode(p: &Path) -> u32 {
        mode_of(&std::fs::metadata(p).unwrap())
    }

    /// Every entry of a folder but the named ones.
    fn others(dir: &Path, keep: &[&str]) -> Vec<String> {
        std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| !keep.contains(&n.as_str()))
            .collect()
    }

    #[test]
    fn keeps_mode_and_replaces_whole() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("creds.json");
        write_atomic(&p, b"{}", 0o600).unwrap();
        assert_eq!(mode(&p), 0o600);
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o640)).unwrap();
        write_atomic(&p, b"{\"a\":1}", 0o600).unwrap();
        assert_eq!(mode(&p), 0o640);
        assert_eq!(std::fs::read(&p).unwrap(), b"{\"a\":1}");
        assert_eq!(std::fs::read_dir(d.path()).unwrap().count(), 1);
    }

    #[test]
    fn a_symlink_is_written_through_and_kept() {
        let d = tempfile::tempdir().unwrap();
        let real_dir = d.path().join("dotfiles");
        std::fs::create_dir(&real_dir).unwrap();
        let real = real_dir.join("extensions.json");
        std::fs::write(&real, b"{}").unwrap();
        std::fs::set_permissions(&real, std::fs::Permissions::from_mode(0o640)).unwrap();
        let home = d.path().join("home");
        std::fs::create_dir(&home).unwrap();
        // A relative link, through a second (absolute) link.
        let hop = home.join("hop.json");
        std::os::unix::fs::symlink(&real, &hop).unwrap();
        let link = home.join("extensions.json");
        std::os::unix::fs::symlink("hop.json", &link).unwrap();
        write_atomic(&link, b"{\"new\":true}", 0o644).unwrap();
        assert!(std::fs::symlink_metadata(&link)
            .unwrap()
            .file_type()
            .is_symlink());
        assert_eq!(std::fs::read_link(&link).unwrap(), Path::new("hop.json"));
        assert!(std::fs::symlink_metadata(&hop)
            .unwrap()
            .file_type()
            .is_symlink());
        assert_eq!(std::fs::read(&real).unwrap(), b"{\"new\":true}");
        assert_eq!(mode(&real), 0o640, "the target keeps its mode");
        // The temporary file went beside the target and is gone.
        assert!(others(&real_dir, &["extensions.json"]).is_empty());
        assert!(others(&home, &["extensions.json", "hop.json"]).is_empty());
        // A dangling link creates the file it names.
        let dangling = home.join("new.json");
        std::os::unix::fs::symlink(real_dir.join("made.json"), &dangling).unwrap();
        write_atomic(&dangling, b"{}", 0o600).unwrap();
        assert!(std::fs::symlink_metadata(&dangling)
            .unwrap()
            .file_type()
            .is_symlink());
        assert_eq!(mode(&real_dir.join("made.json")), 0o600);
        // A loop is an error, not a hang.
        let a = home.join("a");
        std::os::unix::fs::symlink("b", &a).unwrap();
        std::os::unix::fs::symlink("a", home.join("b")).unwrap();
        assert!(write_atomic(&a, b"{}", 0o600).is_err());
    }

    #[test]
    fn new_files_get_their_mode_whatever_the_umask() {
        let d = tempfile::tempdir().unwrap();
        // A mode the umask (022 or 077) would change if it applied.
        let p = d.path().join("f");
        write_atomic(&p, b"x", 0o664).unwrap();
        assert_eq!(mode(&p), 0o664);
        let q = d.path().join("db");
        assert!(create_private_file(&q).unwrap());
        assert!(!create_private_file(&q).unwrap());
        assert_eq!(mode(&q), 0o600);
    }

    #[test]
    fn nothing_is_left_behind_after_a_failed_write() {
        let d = tempfile::tempdir().unwrap();
        // The rename fails: the target is a folder that is not empty.
        let target = d.path().join("taken");
        std::fs::create_dir(&target).unwrap();
        std::fs::write(target.join("inside"), b"x").unwrap();
        assert!(write_atomic(&target, b"{}", 0o600).is_err());
        assert!(
            others(d.path(), &["taken"]).is_empty(),
            "temporary file left"
        );
        // A read-only folder (root ignores the mode, so only when not root).
        // SAFETY: geteuid has no preconditions and cannot fail.
        if unsafe { nix::libc::geteuid() } != 0 {
            let ro = d.path().join("ro");
            std::fs::create_dir(&ro).unwrap();
            std::fs::write(ro.join("x.json"), b"{}").unwrap();
            std::fs::set_permissions(&ro, std::fs::Permissions::from_mode(0o555)).unwrap();
            assert!(write_atomic(&ro.join("x.json"), b"{\"a\":1}", 0o600).is_err());
            std::fs::set_permissions(&ro, std::fs::Permissions::from_mode(0o755)).unwrap();
            assert!(others(&ro, &["x.json"]).is_empty());
            assert_eq!(std::fs::read(ro.join("x.json")).unwrap(), b"{}");
        }
        // After a success, only the file.
        let ok = d.path().join("ok.json");
        write_atomic(&ok, b"{}", 0o600).unwrap();
        write_atomic(&ok, b"{\"b\":2}", 0o600).unwrap();
        assert!(others(d.path(), &["taken", "ok.json"]).is_empty());
    }

    #[test]
    fn concurrent_writers_never_leave_a_half_file() {
        let d = tempfile::tempdir().unwrap();
        let p = Arc::new(d.path().join("extensions.json"));
        write_atomic(&p, b"{}", 0o644).unwrap();
        let done = Arc::new(AtomicBool::new(false));
        let writers: Vec<_> = (0..2)
            .map(|w| {
                let p = p.clone();
                std::thread::spawn(move || {
                    for i in 0..1000 {
                        // Big enough to take more than one write.
                        let v = serde_json::json!({"writer": w, "i": i,
                                                   "pad": "x".repeat(64 * 1024 + i)});
                        write_atomic(&p, &serde_json::to_vec(&v).unwrap(), 0o644)
                            .unwrap_or_else(|e| panic!("writer {w}, write {i}: {e}"));
                    }
                })
            })
            .collect();
        let reader = {
            let (p, done) = (p.clone(), done.clone());
            std::thread::spawn(move || {
                let mut reads = 0u64;
                while !done.load(Ordering::Relaxed) {
                    let bytes = std::fs::read(&*p).unwrap();
                    if let Err(e) = serde_json::from_slice::<serde_json::Value>(&bytes) {
                        panic!("read a half file ({} bytes): {e}", bytes.len());
                    }
                    reads += 1;
                }
                reads
            })
        };
        let results: Vec<_> = writers.into_iter().map(|t| t.join()).collect();
        done.store(true, Ordering::Relaxed);
        let reads = reader.join().expect("the reader saw only whole files");
        for r in results {
            r.expect("every write succeeded");
        }
        assert!(reads > 0);
        assert!(others(d.path(), &["extensions.json"]).is_empty());
    }

    #[test]
    fn private_files_are_checked_on_open() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("creds.json");
        assert!(open_private(&p).unwrap().is_none());
        std::fs::write(&p, b"{}").unwrap();
        for loose in [0o644, 0o640, 0o604, 0o660, 0o610] {
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(loose)).unwrap();
            let err = open_private(&p).unwrap_err();
            let msg = err.to_string();
            assert!(
                msg.contains(&p.display().to_string())
                    && msg.contains(&format!("{loose:04o}"))
                    && msg.contains(&format!("chmod 600 {}", p.display())),
                "{msg}"
            );
        }
        for ok in [0o600, 0o400] {
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(ok)).unwrap();
            assert!(open_private(&p).unwrap().is_some());
        }
    }

    #[test]
    fn home_is_created_private_and_a_loose_one_is_reported_not_changed() {
        let d = tempfile::tempdir().unwrap();
        let home = d.path().join("a/b/.albedo");
        assert_eq!(create_home(&home).unwrap(), HomeStatus::Created);
        assert_eq!(mode(&home), 0o700);
        assert_eq!(create_home(&home).unwrap(), HomeStatus::Private);
        std::fs::set_permissions(&home, std::fs::Permissions::from_mode(0o755)).unwrap();
        assert_eq!(create_home(&home).unwrap(), HomeStatus::Loose(0o755));
        assert_eq!(mode(&home), 0o755, "not changed");
        let file = d.path().join("file");
        std::fs::write(&file, b"").unwrap();
        assert!(create_home(&file).is_err());
    }
}
