//! The TLS configuration of HTTP servers: rustls with the `ring` provider, the system's root
//! certificates (`rustls-native-certs`, read once per process) plus the CA files the user
//! names in `config.toml` (`ca_files`), HTTP/1.1 only (ALPN `http/1.1`).
//!
//! awc's `rustls-0_23` feature brings no default configuration, so the daemon builds this
//! once at start and hands it to every HTTP transport. rustls panics when more than one
//! crypto provider is compiled in and none is installed, so the `ring` provider is installed
//! as the process default here, once.

use rustls::{ClientConfig, RootCertStore};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::CertificateDer;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

#[derive(Debug, Clone, thiserror::Error)]
pub enum TlsError {
    #[error("cannot read the CA file {path}: {reason}")]
    CaFile { path: String, reason: String },
    #[error("the CA file {path} holds no PEM certificate")]
    NoCertificate { path: String },
    #[error("a certificate in the CA file {path} is not usable: {reason}")]
    BadCertificate { path: String, reason: String },
    #[error("cannot build the TLS configuration: {0}")]
    Config(String),
}

/// Install the `ring` provider as rustls' process default (once; later calls do nothing).
pub fn install_crypto_provider() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // Err means another provider was installed first, which is as good.
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}

/// The system's root certificates, read once.
fn native_roots() -> &'static [CertificateDer<'static>] {
    static ROOTS: OnceLock<Vec<CertificateDer<'static>>> = OnceLock::new();
    ROOTS.get_or_init(|| {
        let found = rustls_native_certs::load_native_certs();
        for e in &found.errors {
            tracing::debug!(error = %e, "a system root certificate could not be read");
        }
        if found.certs.is_empty() {
            tracing::warn!(
                "no system root certificates found; only configured CA files are trusted"
            );
        }
        found.certs
    })
}

/// Read every certificate of a PEM file.
pub fn read_ca_file(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let shown = path.display().to_string();
    let iter = CertificateDer::pem_file_iter(path).map_err(|e| TlsError::CaFile {
        path: shown.clone(),
        reason: pem_reason(&e),
    })?;
    let certs = iter
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| TlsError::CaFile {
            path: shown.clone(),
            reason: pem_reason(&e),
        })?;
    if certs.is_empty() {
        return Err(TlsError::NoCertificate { path: shown });
    }
    Ok(certs)
}

fn pem_reason(e: &rustls_pki_types::pem::Error) -> String {
    match e {
        rustls_pki_types::pem::Error::Io(io) => io.to_string(),
        other => format!("not valid PEM ({other:?})"),
    }
}

/// The client configuration: system roots plus `ca_files`.
pub fn client_config(ca_files: &[PathBuf]) -> Result<Arc<ClientConfig>, TlsError> {
    build(native_roots(), ca_files)
}

/// A configuration that trusts only `ca_files` (tests, and servers pinned to a private CA).
pub fn client_config_without_system_roots(
    ca_files: &[PathBuf],
) -> Result<Arc<ClientConfig>, TlsError> {
    build(&[], ca_files)
}

fn build(
    system: &[CertificateDer<'static>],
    ca_files: &[PathBuf],
) -> Result<Arc<ClientConfig>, TlsError> {
    install_crypto_provider();
    let mut roots = RootCertStore::empty();
    let (_, ignored) = roots.add_parsable_certificates(system.iter().cloned());
    if ignored > 0 {
        tracing::debug!(
            ignored,
            "system root certificates rustls cannot use were skipped"
        );
    }
    for path in ca_files {
        for cert in read_ca_file(path)? {
            roots.add(cert).map_err(|e| TlsError::BadCertificate {
                path: path.display().to_string(),
                reason: e.to_string(),
            })?;
        }
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut cfg = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError::Config(e.to_string()))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(cfg))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_ca_file_is_named() {
        let e = client_config(&[PathBuf::from("/nonexistent/ca.pem")]).unwrap_err();
        let msg = e.to_string();
        assert!(msg.contains("/nonexistent/ca.pem"), "{msg}");
    }

    #[test]
    fn a_file_without_certificates_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("empty.pem");
        std::fs::write(&p, "not a certificate\n").unwrap();
        let e = client_config(std::slice::from_ref(&p)).unwrap_err();
        assert!(matches!(e, TlsError::NoCertificate { .. }), "{e}");
        assert!(e.to_string().contains("empty.pem"));
    }

    #[test]
    fn a_garbled_certificate_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("bad.pem");
        std::fs::write(
            &p,
            "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n",
        )
        .unwrap();
        let e = client_config(&[p]).unwrap_err();
        assert!(matches!(e, TlsError::BadCertificate { .. }), "{e}");
    }

    #[test]
    fn system_roots_alone_build_an_http11_config() {
        let cfg = client_config(&[]).unwrap();
        assert_eq!(cfg.alpn_protocols, vec![b"http/1.1".to_vec()]);
        // Built twice: the provider is installed once and the roots are cached.
        let _ = client_config(&[]).unwrap();
    }

    #[test]
    fn a_generated_ca_is_accepted() {
        // openssl is on our machines; skip quietly where it is not.
        let dir = tempfile::tempdir().unwrap();
        let key = dir.path().join("ca.key");
        let crt = dir.path().join("ca.pem");
        let ok = std::process::Command::new("openssl")
            .args([
                "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
            ])
            .args(["-subj", "/CN=albedo test CA"])
            .arg("-keyout")
            .arg(&key)
            .arg("-out")
            .arg(&crt)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .map(|s| s.success())
            .unwrap_or(false);
        if !ok {
            eprintln!("openssl not available; skipped");
            return;
        }
        assert_eq!(read_ca_file(&crt).unwrap().len(), 1);
        client_config_without_system_roots(&[crt]).unwrap();
    }
}
