//! The fingerprint key and HMAC-SHA256.
//!
//! A server's fingerprint (under which its catalogue is saved) is an HMAC-SHA256 of its
//! configuration and secret values, keyed with 32 random bytes kept in
//! `$ALBEDO_HOME/fingerprint.key` (64 hexadecimal digits, mode 0600). Without the key, the
//! database does not let anyone test guesses of a secret. The key is created once,
//! exclusively (a temporary file hard-linked into place, so no reader ever sees half a key,
//! and two daemons starting together agree on one); later starts read it. A key file that
//! group or others can read is refused, like `creds.json`.
//!
//! Daemons that share one catalogue store (PostgreSQL) must share the key file too, or they
//! will not recognise each other's saved catalogues.
//!
//! Owns: the key file and the MAC. Must not touch: what is fingerprinted (`settings`).

use crate::store::files::{self, PrivateFileError};
use sha2::{Digest, Sha256};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// The key's length in bytes.
pub const KEY_LEN: usize = 32;
const BLOCK_LEN: usize = 64;

/// `$ALBEDO_HOME/fingerprint.key`.
pub fn key_path(home: &Path) -> PathBuf {
    home.join("fingerprint.key")
}

#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    #[error(transparent)]
    Private(#[from] PrivateFileError),
    #[error(
        "{path} is not a fingerprint key (expected 64 hexadecimal digits); move it away and \
         the daemon makes a new one (saved catalogues are then discovered again)"
    )]
    Malformed { path: String },
    #[error("cannot create the fingerprint key {path}: {source}")]
    Create {
        path: String,
        #[source]
        source: std::io::Error,
    },
}

/// HMAC-SHA256 (RFC 2104), streaming.
#[derive(Clone)]
pub struct HmacSha256 {
    inner: Sha256,
    opad: [u8; BLOCK_LEN],
}

impl HmacSha256 {
    pub fn new(key: &[u8]) -> HmacSha256 {
        let mut block = [0u8; BLOCK_LEN];
        if key.len() > BLOCK_LEN {
            block[..32].copy_from_slice(&Sha256::digest(key));
        } else {
            block[..key.len()].copy_from_slice(key);
        }
        let mut ipad = [0x36u8; BLOCK_LEN];
        let mut opad = [0x5cu8; BLOCK_LEN];
        for i in 0..BLOCK_LEN {
            ipad[i] ^= block[i];
            opad[i] ^= block[i];
        }
        let mut inner = Sha256::new();
        inner.update(ipad);
        HmacSha256 { inner, opad }
    }

    pub fn update(&mut self, data: &[u8]) {
        self.inner.update(data);
    }

    /// Feeds `data` with its length first, so that consecutive fields cannot run into each
    /// other.
    pub fn update_field(&mut self, data: &[u8]) {
        self.inner.update((data.len() as u64).to_be_bytes());
        self.inner.update(data);
    }

    pub fn finalize(self) -> [u8; 32] {
        let inner = self.inner.finalize();
        let mut outer = Sha256::new();
        outer.update(self.opad);
        outer.update(inner);
        let mut out = [0u8; 32];
        out.copy_from_slice(&outer.finalize());
        out
    }
}

/// The fingerprint key. Its `Debug` never shows it.
#[derive(Clone, PartialEq, Eq)]
pub struct FingerprintKey([u8; KEY_LEN]);

impl std::fmt::Debug for FingerprintKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("FingerprintKey(***)")
    }
}

impl Default for FingerprintKey {
    /// A random key made once per process: fingerprints computed with it are stable within
    /// the process and recognised by no other. Daemons use [`FingerprintKey::load_or_create`].
    fn default() -> Self {
        static KEY: OnceLock<FingerprintKey> = OnceLock::new();
        KEY.get_or_init(|| FingerprintKey(rand::random())).clone()
    }
}

impl FingerprintKey {
    /// A given key (tests, tools).
    pub fn from_bytes(bytes: [u8; KEY_LEN]) -> FingerprintKey {
        FingerprintKey(bytes)
    }

    /// A new key from the operating system's random source.
    pub fn generate() -> std::io::Result<FingerprintKey> {
        use rand::TryRng;
        let mut k = [0u8; KEY_LEN];
        rand::rngs::SysRng
            .try_fill_bytes(&mut k)
            .map_err(|e| std::io::Error::other(format!("no random bytes: {e}")))?;
        Ok(FingerprintKey(k))
    }

    /// A MAC keyed with this key.
    pub fn mac(&self) -> HmacSha256 {
        HmacSha256::new(&self.0)
    }

    /// Read `$ALBEDO_HOME/fingerprint.key`, creating it (mode 0600) when it does not exist.
    pub fn load_or_create(home: &Path) -> Result<FingerprintKey, KeyError> {
        let path = key_path(home);
        let shown = || path.display().to_string();
        // Two rounds at most: when another daemon creates it between our look and our
        // creation, we read theirs.
        for _ in 0..2 {
            if let Some(f) = files::open_private(&path)? {
                return read_key(f, &path);
            }
            let key = FingerprintKey::generate().map_err(|source| KeyError::Create {
                path: shown(),
                source,
            })?;
            let text = format!("{}\n", hex::encode(key.0));
            match files::create_new_atomic(&path, text.as_bytes(), 0o600) {
                Ok(true) => return Ok(key),
                Ok(false) => continue,
                Err(source) => {
                    return Err(KeyError::Create {
                        path: shown(),
                        source,
                    })
                }
            }
        }
        match files::open_private(&path)? {
            Some(f) => read_key(f, &path),
            None => Err(KeyError::Create {
                path: shown(),
                source: std::io::Error::other("it disappeared while it was created"),
            }),
        }
    }
}

fn read_key(f: std::fs::File, path: &Path) -> Result<FingerprintKey, KeyError> {
    let mut text = Vec::with_capacity(2 * KEY_LEN + 1);
    f.take(4096)
        .read_to_end(&mut text)
        .map_err(|source| PrivateFileError::Io {
            path: path.display().to_string(),
            source,
        })?;
    let malformed = || KeyError::Malformed {
        path: path.display().to_string(),
    };
    let digits = std::str::from_utf8(&text)
        .map_err(|_| malformed())?
        .trim_ascii();
    let mut k = [0u8; KEY_LEN];
    hex::decode_to_slice(digits, &mut k).map_err(|_| malformed())?;
    Ok(FingerprintKey(k))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn hmac(key: &[u8], data: &[u8]) -> String {
        let mut m = HmacSha256::new(key);
        m.update(data);
        hex::encode(m.finalize())
    }

    /// RFC 4231, test cases 1 to 7 (case 5, a truncated output, compares a prefix).
    #[test]
    fn rfc_4231_vectors() {
        assert_eq!(
            hmac(&[0x0b; 20], b"Hi There"),
            "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7"
        );
        assert_eq!(
            hmac(b"Jefe", b"what do ya want for nothing?"),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
        assert_eq!(
            hmac(&[0xaa; 20], &[0xdd; 50]),
            "773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe"
        );
        let key4: Vec<u8> = (1..=25).collect();
        assert_eq!(
            hmac(&key4, &[0xcd; 50]),
            "82558a389a443c0ea4cc819899f2083a85f0faa3e578f8077a2e3ff46729665b"
        );
        assert!(hmac(&[0x0c; 20], b"Test With Truncation")
            .starts_with("a3b6167473100ee06e0c796c2955552b"));
        assert_eq!(
            hmac(
                &[0xaa; 131],
                b"Test Using Larger Than Block-Size Key - Hash Key First"
            ),
            "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54"
        );
        assert_eq!(
            hmac(
                &[0xaa; 131],
                b"This is a test using a larger than block-size key and a larger than \
                  block-size data. The key needs to be hashed before being used by the \
                  HMAC algorithm."
            ),
            "9b09ffa71b942fcb27635fbcd5b0e944bfdc63644f0713938a7f51535c3a35e2"
        );
        // Streaming in pieces is the same as at once.
        let mut m = HmacSha256::new(b"Jefe");
        m.update(b"what do ya want ");
        m.update(b"for nothing?");
        assert_eq!(
            hex::encode(m.finalize()),
            hmac(b"Jefe", b"what do ya want for nothing?")
        );
    }

    #[test]
    fn the_key_is_made_once_private_and_read_again() {
        let d = tempfile::tempdir().unwrap();
        let k1 = FingerprintKey::load_or_create(d.path()).unwrap();
        let p = key_path(d.path());
        let meta = std::fs::metadata(&p).unwrap();
        assert_eq!(meta.permissions().mode() & 0o7777, 0o600);
        let text = std::fs::read_to_string(&p).unwrap();
        assert_eq!(text.len(), 65, "{text:?}");
        assert_eq!(FingerprintKey::load_or_create(d.path()).unwrap(), k1);
        assert_ne!(
            FingerprintKey::load_or_create(tempfile::tempdir().unwrap().path()).unwrap(),
            k1
        );
        assert_eq!(format!("{k1:?}"), "FingerprintKey(***)");
        assert!(!format!("{k1:?}").contains(text.trim()));
        // Nothing else was left in the folder.
        assert_eq!(std::fs::read_dir(d.path()).unwrap().count(), 1);
    }

    #[test]
    fn daemons_starting_together_agree_on_one_key() {
        let d = tempfile::tempdir().unwrap();
        let home = std::sync::Arc::new(d.path().to_path_buf());
        let barrier = std::sync::Arc::new(std::sync::Barrier::new(8));
        let keys: Vec<_> = (0..8)
            .map(|_| {
                let (home, barrier) = (home.clone(), barrier.clone());
                std::thread::spawn(move || {
                    barrier.wait();
                    FingerprintKey::load_or_create(&home).unwrap()
                })
            })
            .collect::<Vec<_>>()
            .into_iter()
            .map(|t| t.join().unwrap())
            .collect();
        assert!(keys.windows(2).all(|w| w[0] == w[1]));
        assert_eq!(std::fs::read_dir(d.path()).unwrap().count(), 1);
    }

    #[test]
    fn a_readable_or_malformed_key_is_refused_without_showing_it() {
        let d = tempfile::tempdir().unwrap();
        FingerprintKey::load_or_create(d.path()).unwrap();
        let p = key_path(d.path());
        let text = std::fs::read_to_string(&p).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o644)).unwrap();
        let err = FingerprintKey::load_or_create(d.path()).unwrap_err();
        let msg = err.to_string();
        assert!(
            msg.contains(&p.display().to_string())
                && msg.contains("0644")
                && msg.contains("chmod 600"),
            "{msg}"
        );
        assert!(std::error::Error::source(&err).is_none() || !msg.contains(text.trim()));
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
        let secretish = "not-hex-but-maybe-a-password";
        std::fs::write(&p, secretish).unwrap();
        let err = FingerprintKey::load_or_create(d.path()).unwrap_err();
        assert!(matches!(err, KeyError::Malformed { .. }), "{err:?}");
        assert!(!err.to_string().contains(secretish), "{err}");
        std::fs::write(&p, &text[..40]).unwrap();
        assert!(matches!(
            FingerprintKey::load_or_create(d.path()),
            Err(KeyError::Malformed { .. })
        ));
        // A key written by hand, with its newline or not, is read.
        std::fs::write(&p, "00".repeat(32)).unwrap();
        assert_eq!(
            FingerprintKey::load_or_create(d.path()).unwrap(),
            FingerprintKey::from_bytes([0; 32])
        );
    }
}
