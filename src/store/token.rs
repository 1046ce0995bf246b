//! The API token and the socket: how a client of the daemon finds it and is let in.
//!
//! This is the contract every local client follows (the CLI does; the TUI and the Python
//! binding will):
//!
//! - `$ALBEDO_HOME` (default `~/.albedo`) holds [`TOKEN_FILE`] (`api-token`, mode 0600: the
//!   API token, one line) and [`SOCKET_FILE`] (`albedo.sock`, mode 0600, in the 0700 home).
//! - A client prefers the socket: it needs no token, since only the user can open it.
//! - Over TCP a client sends `Authorization: Bearer <token>`: the value of `ALBEDO_TOKEN`
//!   when set, else the file's, and the file's only to a loopback address (a daemon named
//!   elsewhere gets its token from `ALBEDO_TOKEN`, never this machine's file).
//! - `ALBEDO_DAEMON` (a URL, or a socket path) overrides where the daemon is.
//!
//! The daemon creates the token on its first start ([`load_or_create`]) and never logs it;
//! `albedo-mcp token --rotate` replaces it ([`rotate`]). A token file that group or others
//! can read, or that another user owns, is refused unread.
//!
//! Owns: the token file (its name, format, mode). Must not touch: what uses the token.

use std::io::{Read, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// The token file in `$ALBEDO_HOME`.
pub const TOKEN_FILE: &str = "api-token";
/// The daemon's Unix socket in `$ALBEDO_HOME`.
pub const SOCKET_FILE: &str = "albedo.sock";
/// The environment variable a client reads the token from before the file.
pub const TOKEN_ENV: &str = "ALBEDO_TOKEN";
/// The environment variable naming the daemon (a URL, or the path of a socket).
pub const DAEMON_ENV: &str = "ALBEDO_DAEMON";
/// Every token starts with this (so that secret scanners and people recognise one).
const PREFIX: &str = "albedo_";
/// Random bytes in a token (256 bits).
const RANDOM_BYTES: usize = 32;

pub fn token_path(home: &Path) -> PathBuf {
    home.join(TOKEN_FILE)
}

pub fn socket_path(home: &Path) -> PathBuf {
    home.join(SOCKET_FILE)
}

/// The API token. Its `Debug` never shows the value.
#[derive(Clone, PartialEq, Eq)]
pub struct ApiToken(String);

impl std::fmt::Debug for ApiToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ApiToken(..)")
    }
}

impl ApiToken {
    /// A new random token: `albedo_` and 43 base64url characters (32 bytes from the OS).
    pub fn generate() -> Result<ApiToken, TokenError> {
        Ok(ApiToken(format!(
            "{PREFIX}{}",
            base64_url(&random_bytes::<RANDOM_BYTES>()?)
        )))
    }

    /// A token given by the user (`ALBEDO_TOKEN`), checked for shape only.
    pub fn from_user(value: &str) -> Option<ApiToken> {
        let v = value.trim();
        valid(v).then(|| ApiToken(v.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// Random bytes from the operating system.
pub fn random_bytes<const N: usize>() -> Result<[u8; N], TokenError> {
    use rand::TryRng;
    let mut b = [0u8; N];
    rand::rngs::SysRng
        .try_fill_bytes(&mut b)
        .map_err(|e| TokenError::Random(e.to_string()))?;
    Ok(b)
}

fn base64_url(b: &[u8]) -> String {
    use base64::Engine;
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(b)
}

/// A token is printable ASCII with no spaces, 16 to 512 characters (one the user made up is
/// accepted if long enough; ours are 50).
fn valid(v: &str) -> bool {
    (16..=512).contains(&v.len()) && v.bytes().all(|c| c.is_ascii_graphic())
}

#[derive(Debug, thiserror::Error)]
pub enum TokenError {
    #[error("cannot use the API token file {path}: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "the API token file {path} has mode {mode:04o}: group or others can read it, so it is \
         not used; run `albedo-mcp token --rotate` (or `chmod 600 {path}` if no one else read it)"
    )]
    Readable { path: String, mode: u32 },
    #[error("the API token file {path} belongs to another user (uid {uid}); it is not used")]
    NotOwned { path: String, uid: u32 },
    #[error("the API token file {path} does not hold a token; run `albedo-mcp token --rotate`")]
    Malformed { path: String },
    #[error("no random bytes from the system: {0}")]
    Random(String),
}

fn io_err(path: &Path) -> impl Fn(std::io::Error) -> TokenError + '_ {
    move |source| TokenError::Io {
        path: path.display().to_string(),
        source,
    }
}

/// The daemon's start: read the token, or create it (mode 0600, exclusively, so two daemons
/// starting together on one home agree). Answers the token and whether it was created now.
pub fn load_or_create(home: &Path) -> Result<(ApiToken, bool), TokenError> {
    let path = token_path(home);
    if let Some(t) = read_private(&path)? {
        return Ok((t, false));
    }
    let token = ApiToken::generate()?;
    match create_new(&path, &token) {
        Ok(()) => Ok((token, true)),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            let t = read_private(&path)?.ok_or_else(|| TokenError::Malformed {
                path: path.display().to_string(),
            })?;
            Ok((t, false))
        }
        Err(e) => Err(io_err(&path)(e)),
    }
}

/// Read the token file the way the daemon does: `None` when it does not exist; refused when
/// group or others have any access to it, or another user owns it (nothing is read then).
pub fn read_private(path: &Path) -> Result<Option<ApiToken>, TokenError> {
    let f = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io_err(path)(e)),
    };
    let meta = f.metadata().map_err(io_err(path))?;
    let mode = meta.permissions().mode() & 0o7777;
    if mode & 0o077 != 0 {
        return Err(TokenError::Readable {
            path: path.display().to_string(),
            mode,
        });
    }
    // SAFETY: geteuid has no preconditions and cannot fail.
    let me = unsafe { nix::libc::geteuid() };
    if meta.uid() != me {
        return Err(TokenError::NotOwned {
            path: path.display().to_string(),
            uid: meta.uid(),
        });
    }
    let mut s = String::new();
    f.take(4096).read_to_string(&mut s).map_err(io_err(path))?;
    let v = s.trim();
    if !valid(v) {
        return Err(TokenError::Malformed {
            path: path.display().to_string(),
        });
    }
    Ok(Some(ApiToken(v.to_owned())))
}

/// A client's token: `ALBEDO_TOKEN` when set, else the file in `home` (`None` when neither).
pub fn client_token(home: &Path) -> Result<Option<ApiToken>, TokenError> {
    if let Some(v) = std::env::var_os(TOKEN_ENV) {
        return Ok(v.to_str().and_then(ApiToken::from_user));
    }
    read_private(&token_path(home))
}

/// Replace the token with a new one (a temporary file of mode 0600 renamed over it, whatever
/// the old file's mode was). The running daemon must be told (`POST /token/rotate` does both).
pub fn rotate(home: &Path) -> Result<ApiToken, TokenError> {
    let path = token_path(home);
    let token = ApiToken::generate()?;
    let tmp = home.join(format!(
        ".{TOKEN_FILE}.tmp.{}",
        hex::encode(random_bytes::<8>()?)
    ));
    let r = create_new(&tmp, &token).and_then(|()| std::fs::rename(&tmp, &path));
    if r.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    r.map_err(io_err(&path))?;
    sync_dir(home);
    Ok(token)
}

/// Create `path` exclusively with mode 0600 (whatever the umask) holding the token.
fn create_new(path: &Path, token: &ApiToken) -> std::io::Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)?;
    let r = (|| {
        f.set_permissions(std::fs::Permissions::from_mode(0o600))?;
        f.write_all(format!("{}\n", token.as_str()).as_bytes())?;
        f.sync_all()
    })();
    if r.is_err() {
        let _ = std::fs::remove_file(path);
    }
    r?;
    if let Some(dir) = path.parent() {
        sync_dir(dir);
    }
    Ok(())
}

fn sync_dir(dir: &Path) {
    if let Ok(d) = std::fs::File::open(dir) {
        let _ = d.sync_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mode(p: &Path) -> u32 {
        std::fs::metadata(p).unwrap().permissions().mode() & 0o777
    }

    #[test]
    fn created_once_private_and_kept() {
        let d = tempfile::tempdir().unwrap();
        let (a, created) = load_or_create(d.path()).unwrap();
        assert!(created);
        assert!(a.as_str().starts_with("albedo_") && a.as_str().len() == 50);
        assert_eq!(mode(&token_path(d.path())), 0o600);
        let (b, created) = load_or_create(d.path()).unwrap();
        assert!(!created);
        assert_eq!(a, b);
        assert_eq!(format!("{a:?}"), "ApiToken(..)");
        assert!(!format!("{a:?}").contains(a.as_str()));
    }

    #[test]
    fn a_readable_or_malformed_file_is_refused_and_rotation_makes_it_private() {
        let d = tempfile::tempdir().unwrap();
        let p = token_path(d.path());
        let (old, _) = load_or_create(d.path()).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert!(matches!(
            load_or_create(d.path()),
            Err(TokenError::Readable { mode: 0o644, .. })
        ));
        let new = rotate(d.path()).unwrap();
        assert_ne!(new, old);
        assert_eq!(mode(&p), 0o600);
        assert_eq!(load_or_create(d.path()).unwrap().0, new);
        // Nothing left beside it.
        let names: Vec<_> = std::fs::read_dir(d.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, [TOKEN_FILE]);
        std::fs::write(&p, "short\n").unwrap();
        assert!(matches!(
            load_or_create(d.path()),
            Err(TokenError::Malformed { .. })
        ));
    }

    #[test]
    fn user_tokens_are_checked_for_shape() {
        assert!(ApiToken::from_user("albedo_0123456789abcdef").is_some());
        assert!(ApiToken::from_user(" albedo_0123456789abcdef\n").is_some());
        assert!(ApiToken::from_user("short").is_none());
        assert!(ApiToken::from_user("has a space in the middle of it").is_none());
    }
}
