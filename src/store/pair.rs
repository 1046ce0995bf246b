//! `extensions.json` and `creds.json` written as one change. A server and its credentials are
//! saved together, so a crash (`kill -9`, a power cut) at any moment must leave the pair as it
//! was or as it became, never one file changed without the other.
//!
//! Each file is written atomically (temporary file, fsync, rename, fsync of the folder), and
//! the pair through a journal: `.settings.pending` (mode 0600, it holds secrets) is written
//! atomically with both new contents first, then `creds.json`, then `extensions.json`, then
//! the journal is removed. At start ([`recover`]) a journal still there is completed: a crash
//! before the journal was in place left both files as they were; one after it is finished.
//!
//! Owns: the pair's write order and the journal. Must not touch: the files' meaning (that is
//! `settings` and `edit`).

use super::files::{write_atomic, PrivateFileError};
use super::settings::{creds_path, extensions_path};
use serde_json::Value;
use std::path::{Path, PathBuf};

/// The one lock every change of the pair takes (the settings API, a sign-in's tokens, a
/// refresh): changes are serialized and none is lost.
pub fn settings_lock() -> &'static tokio::sync::Mutex<()> {
    static LOCK: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
    &LOCK
}

/// Change `creds.json` alone (tokens after a sign-in or a refresh), through the journal like
/// any change of the pair: `extensions.json` is written back as it is. The caller holds
/// [`settings_lock`]. `change` answers whether it changed anything (nothing is written
/// otherwise).
pub fn update_creds(
    home: &Path,
    change: impl FnOnce(&mut serde_json::Map<String, Value>) -> bool,
) -> Result<(), PairError> {
    let creds = super::settings::Credentials::load(home).map_err(|e| PairError::Write {
        path: creds_path(home).display().to_string(),
        source: std::io::Error::other(e.to_string()),
    })?;
    let mut raw = creds.raw;
    if !change(&mut raw) {
        return Ok(());
    }
    let ext = read_bytes(&extensions_path(home))?.unwrap_or_else(|| b"{}\n".to_vec());
    write_pair(home, &ext, &super::settings::to_file_bytes(&raw))
}

/// The journal of a pair being written.
pub fn journal_path(home: &Path) -> PathBuf {
    home.join(".settings.pending")
}

#[derive(Debug, thiserror::Error)]
pub enum PairError {
    #[error("cannot write {path}: {source}")]
    Write {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot read {path}: {source}")]
    Read {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Private(#[from] PrivateFileError),
}

fn write(path: &Path, bytes: &[u8], mode: u32) -> Result<(), PairError> {
    write_atomic(path, bytes, mode).map_err(|source| PairError::Write {
        path: path.display().to_string(),
        source,
    })
}

/// The bytes of a file, `None` when it does not exist.
pub fn read_bytes(path: &Path) -> Result<Option<Vec<u8>>, PairError> {
    match std::fs::read(path) {
        Ok(b) => Ok(Some(b)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(PairError::Read {
            path: path.display().to_string(),
            source,
        }),
    }
}

/// Write both files as one change: the journal, `creds.json` (0600), `extensions.json`
/// (0644, or the mode it has), then the journal goes.
pub fn write_pair(home: &Path, extensions: &[u8], creds: &[u8]) -> Result<(), PairError> {
    let journal = journal_path(home);
    let record = serde_json::json!({
        "version": 1,
        "extensions": String::from_utf8_lossy(extensions),
        "creds": String::from_utf8_lossy(creds),
    });
    let bytes = serde_json::to_vec(&record).unwrap_or_default();
    write(&journal, &bytes, 0o600)?;
    finish(home, extensions, creds)?;
    Ok(())
}

/// The two files from a journal, then the journal removed (and its removal synced).
fn finish(home: &Path, extensions: &[u8], creds: &[u8]) -> Result<(), PairError> {
    write(&creds_path(home), creds, 0o600)?;
    write(&extensions_path(home), extensions, 0o644)?;
    let journal = journal_path(home);
    match std::fs::remove_file(&journal) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(source) => {
            return Err(PairError::Write {
                path: journal.display().to_string(),
                source,
            })
        }
    }
    if let Ok(d) = std::fs::File::open(home) {
        let _ = d.sync_all();
    }
    Ok(())
}

/// What [`recover`] found.
#[derive(Debug, PartialEq, Eq)]
pub enum Recovery {
    /// No journal: the pair is as the last write left it.
    Clean,
    /// A write was interrupted after its journal was in place; it is finished now.
    Finished,
    /// A journal that cannot be read (not ours, or damaged outside the daemon) was moved
    /// aside to this path; the pair is left as it is.
    MovedAside(PathBuf),
}

/// Make the pair consistent at start: finish a write a crash interrupted.
pub fn recover(home: &Path) -> Result<Recovery, PairError> {
    let journal = journal_path(home);
    let Some(bytes) = read_bytes(&journal)? else {
        return Ok(Recovery::Clean);
    };
    let parsed: Option<(String, String)> = serde_json::from_slice::<Value>(&bytes)
        .ok()
        .filter(|v| v["version"] == 1)
        .and_then(|v| {
            Some((
                v["extensions"].as_str()?.to_owned(),
                v["creds"].as_str()?.to_owned(),
            ))
        });
    match parsed {
        Some((ext, creds)) => {
            finish(home, ext.as_bytes(), creds.as_bytes())?;
            Ok(Recovery::Finished)
        }
        None => {
            let aside = home.join(format!(
                ".settings.pending.unreadable-{}",
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map(|d| d.as_secs())
                    .unwrap_or(0)
            ));
            std::fs::rename(&journal, &aside).map_err(|source| PairError::Write {
                path: journal.display().to_string(),
                source,
            })?;
            Ok(Recovery::MovedAside(aside))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::files::mode_of;

    #[test]
    fn writes_both_and_leaves_no_journal() {
        let d = tempfile::tempdir().unwrap();
        write_pair(d.path(), b"{\"a\":1}\n", b"{\"s\":\"x\"}\n").unwrap();
        assert_eq!(
            std::fs::read(extensions_path(d.path())).unwrap(),
            b"{\"a\":1}\n"
        );
        assert_eq!(
            std::fs::read(creds_path(d.path())).unwrap(),
            b"{\"s\":\"x\"}\n"
        );
        let m = mode_of(&std::fs::metadata(creds_path(d.path())).unwrap());
        assert_eq!(m & 0o777, 0o600);
        assert!(!journal_path(d.path()).exists());
        assert_eq!(recover(d.path()).unwrap(), Recovery::Clean);
    }

    #[test]
    fn a_journal_left_by_a_crash_is_finished_at_start() {
        let d = tempfile::tempdir().unwrap();
        write_pair(d.path(), b"{\"old\":1}\n", b"{}\n").unwrap();
        // A crash after the journal and creds.json, before extensions.json.
        let record = serde_json::json!({"version": 1, "extensions": "{\"new\":1}\n", "creds": "{\"k\":\"v\"}\n"});
        std::fs::write(journal_path(d.path()), record.to_string()).unwrap();
        std::fs::write(creds_path(d.path()), "{\"k\":\"v\"}\n").unwrap();
        assert_eq!(recover(d.path()).unwrap(), Recovery::Finished);
        assert_eq!(
            std::fs::read(extensions_path(d.path())).unwrap(),
            b"{\"new\":1}\n"
        );
        assert_eq!(
            std::fs::read(creds_path(d.path())).unwrap(),
            b"{\"k\":\"v\"}\n"
        );
        assert!(!journal_path(d.path()).exists());
    }

    #[test]
    fn an_unreadable_journal_is_moved_aside_and_nothing_changes() {
        let d = tempfile::tempdir().unwrap();
        write_pair(d.path(), b"{}\n", b"{}\n").unwrap();
        std::fs::write(journal_path(d.path()), "garbage").unwrap();
        assert!(matches!(
            recover(d.path()).unwrap(),
            Recovery::MovedAside(_)
        ));
        assert_eq!(std::fs::read(extensions_path(d.path())).unwrap(), b"{}\n");
        assert!(!journal_path(d.path()).exists());
    }
}
