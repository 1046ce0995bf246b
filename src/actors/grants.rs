//! The daemon's tokens without a browser (the MCP authorization extensions), for a server whose
//! `oauth_client` in `creds.json` names a `grant`: `client_credentials` (with
//! `client_secret`, `private_key` or `private_key_file`) or `jwt_bearer` (with a
//! `workload_token_file` the platform keeps fresh, or `token_exchange`: the user's ID token
//! from `id_token_file` exchanged at the enterprise identity provider). Files are read again
//! on each use (at most [`MAX_FILE_BYTES`]); DPoP is used when the authorization server takes
//! ES256 and `dpop` is not `false`.
//!
//! Owns: reading that configuration and those files, and one token request through
//! [`crate::oauth::grant`]. Must not touch: the token cache (the `TokenBook` calls this under
//! its single-flight lock and stores the record), transports, the HTTP API. No key, secret,
//! workload token, ID token or assertion reaches an error or a log line.

use crate::oauth::grant::{self, ClientAuth, Grant, IdentityExchange, Target};
use crate::oauth::jws::SigningKey;
use crate::oauth::Sensitive;
use crate::oauth::{discovery, scope, Discovery, Fetcher, OAuthError, TokenRecord};
use serde::Deserialize;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The most bytes read from a key, workload token or ID token file.
pub const MAX_FILE_BYTES: u64 = 64 * 1024;

/// `oauth_client.token_exchange`.
#[derive(Debug, Clone, Deserialize)]
pub struct ExchangeConfig {
    pub idp_token_endpoint: String,
    pub id_token_file: PathBuf,
    #[serde(default)]
    pub idp_client_id: Option<String>,
    #[serde(default)]
    pub idp_client_secret: Option<Sensitive>,
}

/// A server's `oauth_client` when it names a grant without a browser. Its `Debug` shows no
/// secret.
#[derive(Debug, Clone, Deserialize)]
pub struct ServiceConfig {
    pub grant: String,
    #[serde(default)]
    pub client_id: Option<String>,
    #[serde(default)]
    pub client_secret: Option<Sensitive>,
    #[serde(default)]
    pub private_key: Option<Sensitive>,
    #[serde(default)]
    pub private_key_file: Option<PathBuf>,
    #[serde(default)]
    pub workload_token_file: Option<PathBuf>,
    #[serde(default)]
    pub token_exchange: Option<ExchangeConfig>,
    /// `false`: never DPoP; otherwise when the authorization server takes it.
    #[serde(default)]
    pub dpop: Option<bool>,
}

/// The grant a server's `oauth_client` names (`authorization_code` when it names none).
pub fn grant_of(oauth_client: Option<&Value>) -> &str {
    oauth_client
        .and_then(|c| c.get("grant"))
        .and_then(Value::as_str)
        .unwrap_or("authorization_code")
}

/// The service configuration of an `oauth_client`, when it names `client_credentials` or
/// `jwt_bearer`.
pub fn service_config(oauth_client: Option<&Value>) -> Option<ServiceConfig> {
    let c = oauth_client?;
    if !crate::store::settings::is_service_grant(grant_of(Some(c))) {
        return None;
    }
    let cfg: ServiceConfig = serde_json::from_value(c.clone()).ok()?;
    // Registered with the log writer's redaction, as every secret albedo holds.
    for s in [&cfg.client_secret, &cfg.private_key].into_iter().flatten() {
        crate::protocol::text::register_secrets([s.expose()]);
    }
    Some(cfg)
}

/// A grant without a browser, read once per connection (or per read of `creds.json`): its
/// configuration and the [`crate::store::settings::grant_key`] of the text it was read from.
#[derive(Debug)]
pub struct ServiceGrant {
    pub cfg: ServiceConfig,
    pub key: String,
}

impl ServiceGrant {
    /// From a server's `oauth_client` text (`None` unless it names a grant without a browser).
    pub fn from_text(oauth_client: &str) -> Option<Arc<ServiceGrant>> {
        let v: Value = serde_json::from_str(oauth_client).ok()?;
        let cfg = service_config(Some(&v))?;
        Some(Arc::new(ServiceGrant {
            cfg,
            key: crate::store::settings::grant_key(oauth_client),
        }))
    }

    /// A resolved server's grant without a browser, if it has one.
    pub fn of(server: &crate::store::settings::ResolvedServer) -> Option<Arc<ServiceGrant>> {
        ServiceGrant::from_text(server.service_grant.as_ref()?.expose())
    }
}

/// Why no token was had.
#[derive(Debug, thiserror::Error)]
pub enum GrantError {
    /// A file named in the settings cannot be read (it may appear later).
    #[error("cannot read {what} {path}: {reason}")]
    File {
        what: &'static str,
        path: String,
        reason: String,
    },
    #[error("the oauth_client settings are not usable: {0}")]
    Config(String),
    #[error(transparent)]
    OAuth(#[from] OAuthError),
}

impl GrantError {
    /// The authorization server (or identity provider) refused the grant: not retried.
    pub fn refused(&self) -> bool {
        matches!(self, GrantError::OAuth(OAuthError::GrantRefused { .. }))
    }
}

/// A file's text, trimmed, read whole (at most [`MAX_FILE_BYTES`]); never shown.
fn read_secret_file(what: &'static str, path: &Path) -> Result<Sensitive, GrantError> {
    let fail = |reason: String| GrantError::File {
        what,
        path: path.display().to_string(),
        reason,
    };
    let meta = std::fs::metadata(path).map_err(|e| fail(e.kind().to_string()))?;
    if meta.len() > MAX_FILE_BYTES {
        return Err(fail(format!("it is over {MAX_FILE_BYTES} bytes")));
    }
    let text = std::fs::read_to_string(path).map_err(|e| fail(e.kind().to_string()))?;
    let t = text.trim();
    if t.is_empty() {
        return Err(fail("it is empty".into()));
    }
    Ok(Sensitive::new(t))
}

fn signing_key(cfg: &ServiceConfig) -> Result<Option<SigningKey>, GrantError> {
    let pem = match (&cfg.private_key, &cfg.private_key_file) {
        (Some(k), _) => k.clone(),
        (None, Some(p)) => read_secret_file("the private key file", p)?,
        (None, None) => return Ok(None),
    };
    SigningKey::from_pem(pem.expose())
        .map(Some)
        .map_err(|e| GrantError::Config(format!("private key: {e}")))
}

/// How the client authenticates: its key (`private_key_jwt`), its secret (`client_secret_basic`
/// unless the server lists only `client_secret_post`), else none.
fn client_auth(cfg: &ServiceConfig, disc: &Discovery) -> Result<ClientAuth, GrantError> {
    let id = cfg.client_id.clone();
    if let Some(key) = signing_key(cfg)? {
        let client_id =
            id.ok_or_else(|| GrantError::Config("private_key_jwt needs a client_id".into()))?;
        return Ok(ClientAuth::PrivateKeyJwt { client_id, key });
    }
    if let (Some(client_id), Some(secret)) = (id.clone(), cfg.client_secret.clone()) {
        let listed = disc
            .auth_server
            .token_endpoint_auth_methods_supported
            .as_deref();
        return Ok(ClientAuth::with_secret(listed, client_id, secret));
    }
    Ok(ClientAuth::None { client_id: id })
}

/// The name of the grant a configuration uses, for messages.
pub fn grant_name(cfg: &ServiceConfig) -> &'static str {
    match (cfg.grant.as_str(), cfg.token_exchange.is_some()) {
        ("client_credentials", _) => "client_credentials",
        (_, true) => "jwt_bearer (enterprise-managed authorization)",
        _ => "jwt_bearer (workload identity)",
    }
}

/// Ask for a token for the MCP server at `server_url` with its configured grant.
pub async fn obtain(
    fetcher: &Fetcher,
    server_url: &str,
    cfg: &ServiceConfig,
) -> Result<TokenRecord, GrantError> {
    let disc = discovery::discover(fetcher, server_url, None).await?;
    let scopes = scope::select(
        None,
        None,
        disc.resource_metadata
            .as_ref()
            .and_then(|m| m.scopes_supported.as_deref()),
        None,
    );
    let client = client_auth(cfg, &disc)?;
    let target = Target::discovered(server_url, &disc, &scopes);
    let grant = match (
        cfg.grant.as_str(),
        &cfg.workload_token_file,
        &cfg.token_exchange,
    ) {
        ("client_credentials", _, _) => Grant::ClientCredentials,
        ("jwt_bearer", Some(path), _) => Grant::JwtBearer {
            assertion: read_secret_file("the workload token file", path)?,
        },
        ("jwt_bearer", None, Some(x)) => {
            let id_token = read_secret_file("the ID token file", &x.id_token_file)?;
            let idp_client = match (&x.idp_client_id, &x.idp_client_secret) {
                (Some(id), Some(secret)) => ClientAuth::Basic {
                    client_id: id.clone(),
                    secret: secret.clone(),
                },
                (id, _) => ClientAuth::None {
                    client_id: id.clone(),
                },
            };
            let assertion = grant::exchange_identity(
                fetcher,
                IdentityExchange {
                    idp_token_endpoint: &x.idp_token_endpoint,
                    idp_client: &idp_client,
                    id_token: &id_token,
                },
                target,
            )
            .await?;
            Grant::JwtBearer { assertion }
        }
        (g, _, _) => {
            return Err(GrantError::Config(format!(
                "the grant {g:?} needs a workload_token_file or a token_exchange"
            )))
        }
    };
    let dpop = match cfg.dpop {
        Some(false) => None,
        _ => disc.auth_server.dpop_key()?,
    };
    Ok(grant::request_token(fetcher, target, &client, &grant, dpop.as_ref()).await?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn only_grants_without_a_browser_are_service_configurations() {
        assert!(service_config(None).is_none());
        assert!(service_config(Some(&json!({"client_id": "a"}))).is_none());
        assert!(service_config(Some(
            &json!({"client_id": "a", "grant": "authorization_code"})
        ))
        .is_none());
        let c = service_config(Some(
            &json!({"client_id": "a", "grant": "client_credentials",
            "client_secret": "service-secret-9"}),
        ))
        .unwrap();
        assert!(!format!("{c:?}").contains("service-secret-9"));
        assert_eq!(grant_name(&c), "client_credentials");
        assert_eq!(grant_of(None), "authorization_code");
    }

    #[test]
    fn secret_files_are_read_trimmed_and_bounded_and_never_shown() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("token");
        std::fs::write(&p, "workload-jwt-value\n").unwrap();
        assert_eq!(
            read_secret_file("the workload token file", &p)
                .unwrap()
                .expose(),
            "workload-jwt-value"
        );
        std::fs::write(&p, vec![b'x'; MAX_FILE_BYTES as usize + 1]).unwrap();
        let e = read_secret_file("the workload token file", &p).unwrap_err();
        assert!(e.to_string().contains("over"), "{e}");
        std::fs::write(&p, "  \n").unwrap();
        assert!(read_secret_file("f", &p).is_err());
        let e = read_secret_file("f", &d.path().join("missing")).unwrap_err();
        assert!(!e.refused());
    }
}
