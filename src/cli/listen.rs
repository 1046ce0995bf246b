//! Where `serve` listens: TCP (HTTPS when `tls_cert` and `tls_key` are set), the policy for
//! addresses beyond loopback, and the Unix socket `$ALBEDO_HOME/albedo.sock`.
//!
//! - An address beyond loopback (`0.0.0.0:7420`) is refused unless TLS is configured or
//!   `allow_plain_http_remote = true`; the choice is logged. Over TCP the token is always
//!   required (`api::trust`), whatever the address.
//! - The socket is created with mode 0600 inside `$ALBEDO_HOME`, and only when that folder
//!   is the user's own and nobody else can enter it (0700): between `bind` and `chmod`, the
//!   folder is what keeps others out (`$ALBEDO_HOME` is created 0700; an existing looser one
//!   gets no socket, with a warning). A stale socket (nothing answers) is removed at start;
//!   one a daemon answers on stops this one from starting; the socket is removed at exit,
//!   also an exit on an error ([`Socket`]'s `Drop`).

use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use std::net::{SocketAddr, ToSocketAddrs};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub enum ListenError {
    #[error("cannot resolve the listen address {addr}: {source}")]
    Resolve {
        addr: String,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "refusing to listen on {addr}: it is reachable beyond this machine and no TLS is \
         configured. Set tls_cert and tls_key in config.toml, or allow_plain_http_remote = true \
         to accept plain HTTP (the API token and every answer then cross the network in clear), \
         or listen on 127.0.0.1"
    )]
    PlainRemote { addr: String },
    #[error("TLS needs both tls_cert and tls_key in config.toml (only {given} is set)")]
    TlsHalf { given: &'static str },
    #[error("cannot use the TLS {what} {path}: {reason}")]
    TlsFile {
        what: &'static str,
        path: String,
        reason: String,
    },
    #[error("the TLS certificate and key do not make a server configuration: {0}")]
    TlsConfig(String),
    #[error(
        "another daemon answers on {path}: it serves this ALBEDO_HOME already (stop it first, \
         or give this one another ALBEDO_HOME)"
    )]
    SocketInUse { path: String },
}

/// How far the TCP listener reaches, as logged at start.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Exposure {
    /// Loopback only.
    Loopback,
    /// Beyond loopback, over TLS.
    RemoteTls,
    /// Beyond loopback in plain HTTP, because `allow_plain_http_remote = true`.
    RemotePlain,
}

pub fn resolve(listen: &str) -> Result<Vec<SocketAddr>, ListenError> {
    listen
        .to_socket_addrs()
        .map(|a| a.collect())
        .map_err(|source| ListenError::Resolve {
            addr: listen.to_owned(),
            source,
        })
}

/// Decide whether the daemon may listen on `addrs`.
pub fn exposure(
    listen: &str,
    addrs: &[SocketAddr],
    tls: bool,
    allow_plain_http_remote: bool,
) -> Result<Exposure, ListenError> {
    if addrs.iter().all(|a| a.ip().is_loopback()) {
        Ok(Exposure::Loopback)
    } else if tls {
        Ok(Exposure::RemoteTls)
    } else if allow_plain_http_remote {
        Ok(Exposure::RemotePlain)
    } else {
        Err(ListenError::PlainRemote {
            addr: listen.to_owned(),
        })
    }
}

/// Log where the daemon listens and why it may.
pub fn log_exposure(e: Exposure, shown: &str) {
    match e {
        Exposure::Loopback => tracing::info!(
            "listening on loopback only ({shown}); every TCP request but GET /healthz needs the API token"
        ),
        Exposure::RemoteTls => tracing::info!(
            "listening beyond loopback ({shown}) over TLS (tls_cert, tls_key); every request \
             but GET /healthz needs the API token"
        ),
        Exposure::RemotePlain => tracing::warn!(
            "listening beyond loopback ({shown}) in PLAIN HTTP because allow_plain_http_remote = \
             true: the API token and every answer cross the network in clear; every request \
             but GET /healthz needs the token"
        ),
    }
}

/// The server's TLS configuration from `tls_cert` and `tls_key` (HTTP/1.1), or `None`.
pub fn tls_config(
    cert: Option<&Path>,
    key: Option<&Path>,
) -> Result<Option<rustls::ServerConfig>, ListenError> {
    let (cert, key) = match (cert, key) {
        (None, None) => return Ok(None),
        (Some(_), None) => return Err(ListenError::TlsHalf { given: "tls_cert" }),
        (None, Some(_)) => return Err(ListenError::TlsHalf { given: "tls_key" }),
        (Some(c), Some(k)) => (c, k),
    };
    crate::transport::tls::install_crypto_provider();
    let file_err =
        |what: &'static str, path: &Path, e: rustls_pki_types::pem::Error| ListenError::TlsFile {
            what,
            path: path.display().to_string(),
            reason: match e {
                rustls_pki_types::pem::Error::Io(io) => io.to_string(),
                other => format!("not valid PEM ({other:?})"),
            },
        };
    let certs = CertificateDer::pem_file_iter(cert)
        .map_err(|e| file_err("certificate", cert, e))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| file_err("certificate", cert, e))?;
    if certs.is_empty() {
        return Err(ListenError::TlsFile {
            what: "certificate",
            path: cert.display().to_string(),
            reason: "no certificate in it".into(),
        });
    }
    let key = PrivateKeyDer::from_pem_file(key).map_err(|e| file_err("key", key, e))?;
    let mut cfg = rustls::ServerConfig::builder()
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(|e| ListenError::TlsConfig(e.to_string()))?;
    cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Some(cfg))
}

/// The daemon's own origin for links it hands out: the first TCP address, a wildcard one
/// reached over loopback.
pub fn own_origin(addr: SocketAddr, tls: bool) -> String {
    let scheme = if tls { "https" } else { "http" };
    let host = match addr {
        SocketAddr::V4(a) if a.ip().is_unspecified() => "127.0.0.1".to_owned(),
        SocketAddr::V4(a) => a.ip().to_string(),
        SocketAddr::V6(a) if a.ip().is_unspecified() => "[::1]".to_owned(),
        SocketAddr::V6(a) => format!("[{}]", a.ip()),
    };
    format!("{scheme}://{host}:{}", addr.port())
}

/// The bound socket: its listener, and what identifies the file (to remove it at exit only
/// if it is still ours).
pub struct Socket {
    pub path: PathBuf,
    pub listener: std::os::unix::net::UnixListener,
    ino: u64,
}

impl Socket {
    /// Remove the socket file, if it is still the one this daemon made.
    pub fn remove(&self) {
        if std::fs::symlink_metadata(&self.path).is_ok_and(|m| m.ino() == self.ino) {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// The daemon's socket goes with it, also when it stops on an error after opening it.
impl Drop for Socket {
    fn drop(&mut self) {
        self.remove();
    }
}

/// Open the socket in `home`. `Ok(None)` (with a warning logged) when it cannot be opened
/// safely or at all: the daemon then serves over TCP alone. An error only when another
/// daemon answers on it.
pub fn open_socket(home: &Path) -> Result<Option<Socket>, ListenError> {
    let path = crate::store::token::socket_path(home);
    let skip = |why: String| {
        tracing::warn!(
            socket = %path.display(),
            "no Unix socket: {why}; local clients use TCP with the API token"
        );
        Ok(None)
    };
    match std::fs::metadata(home) {
        Ok(m) => {
            // SAFETY: geteuid has no preconditions and cannot fail.
            let me = unsafe { nix::libc::geteuid() };
            let mode = m.permissions().mode() & 0o7777;
            if m.uid() != me {
                return skip(format!(
                    "{} belongs to another user (uid {})",
                    home.display(),
                    m.uid()
                ));
            }
            if mode & 0o077 != 0 {
                return skip(format!(
                    "{} has mode {mode:04o}, so others could reach a socket in it; `chmod 700 {}` \
                     and restart to have one",
                    home.display(),
                    home.display()
                ));
            }
        }
        Err(e) => return skip(format!("cannot read {}: {e}", home.display())),
    }
    match std::fs::symlink_metadata(&path) {
        Ok(m) => {
            use std::os::unix::fs::FileTypeExt;
            if !m.file_type().is_socket() {
                return skip(format!(
                    "{} exists and is not a socket (it was left alone)",
                    path.display()
                ));
            }
            if std::os::unix::net::UnixStream::connect(&path).is_ok() {
                return Err(ListenError::SocketInUse {
                    path: path.display().to_string(),
                });
            }
            tracing::info!(socket = %path.display(), "removing a stale socket (nothing answers on it)");
            if let Err(e) = std::fs::remove_file(&path) {
                return skip(format!("cannot remove the stale socket: {e}"));
            }
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return skip(format!("cannot read {}: {e}", path.display())),
    }
    let listener = match std::os::unix::net::UnixListener::bind(&path) {
        Ok(l) => l,
        Err(e) => return skip(format!("cannot bind it: {e}")),
    };
    let made = std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))
        .and_then(|()| std::fs::symlink_metadata(&path));
    match made {
        Ok(m) => Ok(Some(Socket {
            path,
            listener,
            ino: m.ino(),
        })),
        Err(e) => {
            let _ = std::fs::remove_file(&path);
            skip(format!("cannot make it private: {e}"))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn beyond_loopback_needs_tls_or_the_explicit_choice() {
        let lo = resolve("127.0.0.1:0").unwrap();
        let any = resolve("0.0.0.0:7420").unwrap();
        assert_eq!(
            exposure("x", &lo, false, false).unwrap(),
            Exposure::Loopback
        );
        assert!(matches!(
            exposure("0.0.0.0:7420", &any, false, false),
            Err(ListenError::PlainRemote { .. })
        ));
        assert_eq!(
            exposure("x", &any, true, false).unwrap(),
            Exposure::RemoteTls
        );
        assert_eq!(
            exposure("x", &any, false, true).unwrap(),
            Exposure::RemotePlain
        );
        assert_eq!(
            own_origin("0.0.0.0:7420".parse().unwrap(), false),
            "http://127.0.0.1:7420"
        );
        assert_eq!(
            own_origin("[::1]:9".parse().unwrap(), true),
            "https://[::1]:9"
        );
        assert!(matches!(
            tls_config(Some(Path::new("/c")), None),
            Err(ListenError::TlsHalf { given: "tls_cert" })
        ));
    }

    #[test]
    fn the_socket_is_private_stale_ones_go_live_ones_stop_a_second_daemon() {
        let d = tempfile::tempdir().unwrap();
        std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
        let s = open_socket(d.path()).unwrap().expect("a socket");
        let mode = std::fs::metadata(&s.path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        // Someone listens: a second daemon must not take the socket over.
        assert!(matches!(
            open_socket(d.path()),
            Err(ListenError::SocketInUse { .. })
        ));
        // A clean stop removes it.
        let path = s.path.clone();
        drop(s);
        assert!(!path.exists());
        // Stale: a socket file nothing listens on any more.
        drop(std::os::unix::net::UnixListener::bind(&path).unwrap());
        assert!(path.exists());
        let s2 = open_socket(d.path())
            .unwrap()
            .expect("the stale socket is replaced");
        assert!(std::os::unix::net::UnixStream::connect(&path).is_ok());
        drop(s2);
        assert!(!path.exists());
        // A folder others can enter gets no socket.
        std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        assert!(open_socket(d.path()).unwrap().is_none());
        std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
    }
}
