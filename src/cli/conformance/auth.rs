//! Signing in, headless, for `albedo-mcp conformance-client`: on a 401 (or a 403
//! `insufficient_scope`) it runs the OAuth flow of [`crate::oauth`] and retries the request
//! with `Authorization: Bearer`. The runner's mock authorization server approves at once (its
//! `/authorize` answers 302 with the code), so the client follows the authorization URL
//! itself ([`Fetcher::follow_authorization`]) and reads the redirect's `Location` instead of
//! opening a browser; the callback is checked and the code exchanged as in the daemon.
//!
//! Per request: a 401 is answered by a refresh when there is a refresh token, and by a new
//! sign-in otherwise or when the refreshed token is refused too; a 403 `insufficient_scope`
//! by one step-up sign-in (the union of the scopes asked for and those challenged), and a
//! repeated 403 stops. At most [`MAX_SIGN_INS`] sign-ins per run.
//!
//! The client: `client_id` / `client_secret` (and the `issuer` they belong to) from the
//! scenario's `MCP_CONFORMANCE_CONTEXT` when it gives them (`auth/pre-registration`); a Client
//! ID Metadata Document URL from its `client_metadata_url`, else
//! [`CONFORMANCE_CLIENT_METADATA_URL`], the URL the runner's `auth/basic-cimd` scenario expects
//! (used only when the authorization server accepts metadata documents); else Dynamic Client
//! Registration, kept per issuer for the run.
//!
//! Without a browser (the authorization extensions, [`crate::oauth::grant`]), from the context
//! too: `private_key_pem` (with `client_id`): the client credentials grant with
//! `private_key_jwt`; `valid_jwt`: the JWT bearer grant with that workload token (SEP-1933);
//! `idp_id_token` (with `idp_token_endpoint`, `idp_client_id`, `client_id`,
//! `client_secret`): enterprise-managed authorization (token exchange at the identity
//! provider, then the JWT bearer grant); a `client_id` and `client_secret` for an
//! authorization server that lists `client_credentials` and not `authorization_code` in
//! `grant_types_supported`: the client credentials grant with its secret. A DPoP-bound token
//! (the authorization server lists ES256 in `dpop_signing_alg_values_supported`) is set on
//! the transport with its prover ([`HttpTransport::set_dpop`]). A refused grant ends the run:
//! never retried, never another grant.

use crate::client::handshake::HandshakeError;
use crate::client::RpcError;
use crate::oauth::flow;
use crate::oauth::grant::{self, ClientAuth, Grant, IdentityExchange, Target};
use crate::oauth::jws::SigningKey;
use crate::oauth::{
    client, discovery, scope, Challenge, ClientRecord, ClientSource, ConfiguredClient, Discovery,
    Fetcher, OAuthError, Sensitive, TokenRecord, DEFAULT_REDIRECT_URI,
};
use crate::transport::http::HttpTransport;
use crate::transport::TransportError;
use serde_json::Value;
use std::sync::Arc;

/// The most sign-ins of one run (the runner's retry-limit scenario allows 3).
pub const MAX_SIGN_INS: u32 = 3;

/// The Client ID Metadata Document URL of the runner's CIMD scenario (its reference client
/// uses the same; the runner never fetches it during the flow).
pub const CONFORMANCE_CLIENT_METADATA_URL: &str =
    "https://conformance-test.local/client-metadata.json";

/// Why a request was refused, for the sign-in code.
#[derive(Debug, Clone, PartialEq)]
pub enum Refusal {
    /// 401: no token, or one the server does not take.
    Unauthorized(Option<Challenge>),
    /// 403 `insufficient_scope`: a step-up.
    InsufficientScope(Challenge),
}

fn refusal(status: u16, www_authenticate: Option<&str>) -> Option<Refusal> {
    let challenge = www_authenticate.and_then(Challenge::parse);
    match status {
        401 => Some(Refusal::Unauthorized(challenge)),
        403 => challenge
            .filter(Challenge::insufficient_scope)
            .map(Refusal::InsufficientScope),
        _ => None,
    }
}

/// The refusal a failed request carries, if it is one sign-in can answer.
pub fn of_rpc(e: &RpcError) -> Option<Refusal> {
    match e {
        RpcError::NotSent(TransportError::Status {
            status,
            www_authenticate,
            ..
        }) => refusal(*status, www_authenticate.as_deref()),
        _ => None,
    }
}

/// The refusal a failed handshake carries, if it is one sign-in can answer.
pub fn of_handshake(e: &HandshakeError) -> Option<Refusal> {
    match e {
        HandshakeError::NeedsAuth {
            status,
            www_authenticate,
            ..
        } => refusal(*status, www_authenticate.as_deref()),
        HandshakeError::Rpc(e) => of_rpc(e),
        _ => None,
    }
}

/// What one request has tried so far.
#[derive(Debug, Default)]
pub struct Attempt {
    refreshed: bool,
    signed_in: bool,
    stepped_up: bool,
}

/// A non-empty string the scenario's context gives under `k`.
fn context_str(context: Option<&Value>, k: &str) -> Option<String> {
    context
        .and_then(|c| c.get(k))
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
}

/// The client credentials a scenario's context gives.
pub fn configured_client(context: Option<&Value>) -> ConfiguredClient {
    let get = |k: &str| context_str(context, k);
    ConfiguredClient {
        client_id: get("client_id"),
        client_secret: get("client_secret").map(Sensitive::new),
        metadata_url: Some(
            get("client_metadata_url").unwrap_or_else(|| CONFORMANCE_CLIENT_METADATA_URL.into()),
        ),
        issuer: get("issuer"),
    }
}

/// A way to a token without a browser, from the scenario's context.
#[derive(Debug, Clone)]
pub enum Service {
    /// The client credentials grant with the client's secret.
    Secret {
        client_id: String,
        client_secret: Sensitive,
    },
    /// The client credentials grant with `private_key_jwt`.
    PrivateKeyJwt { client_id: String, key: SigningKey },
    /// The JWT bearer grant with a workload identity token.
    Workload {
        client_id: Option<String>,
        token: Sensitive,
    },
    /// Enterprise-managed authorization: the ID token exchanged at the identity provider,
    /// then the JWT bearer grant with the client's secret.
    Enterprise {
        idp_token_endpoint: String,
        idp_client_id: Option<String>,
        id_token: Sensitive,
        client_id: String,
        client_secret: Sensitive,
    },
}

/// The service grant a scenario's context configures, if any; an unusable key is an error.
pub fn service(context: Option<&Value>) -> Result<Option<Service>, String> {
    let get = |k: &str| context_str(context, k);
    if let Some(pem) = get("private_key_pem") {
        let key = SigningKey::from_pem(&pem).map_err(|e| e.to_string())?;
        let client_id = get("client_id").ok_or("private_key_pem comes without a client_id")?;
        return Ok(Some(Service::PrivateKeyJwt { client_id, key }));
    }
    if let Some(jwt) = get("valid_jwt") {
        return Ok(Some(Service::Workload {
            client_id: get("client_id"),
            token: Sensitive::new(jwt),
        }));
    }
    if let Some(id_token) = get("idp_id_token") {
        let need = |k: &str| get(k).ok_or_else(|| format!("idp_id_token comes without {k}"));
        return Ok(Some(Service::Enterprise {
            idp_token_endpoint: need("idp_token_endpoint")?,
            idp_client_id: get("idp_client_id"),
            id_token: Sensitive::new(id_token),
            client_id: need("client_id")?,
            client_secret: Sensitive::new(need("client_secret")?),
        }));
    }
    Ok(None)
}

/// The sign-in state of one run.
pub struct Auth {
    fetcher: Fetcher,
    server_url: String,
    configured: ConfiguredClient,
    service: Option<Service>,
    clients: Vec<ClientRecord>,
    record: Option<TokenRecord>,
    sign_ins: u32,
    transport: Arc<HttpTransport>,
}

impl Auth {
    pub fn new(
        fetcher: Fetcher,
        server_url: &str,
        configured: ConfiguredClient,
        service: Option<Service>,
        transport: Arc<HttpTransport>,
    ) -> Auth {
        Auth {
            fetcher,
            server_url: server_url.to_owned(),
            configured,
            service,
            clients: Vec::new(),
            record: None,
            sign_ins: 0,
            transport,
        }
    }

    /// Answer a refusal so that the request may be sent again; an error when it may not.
    pub async fn recover(
        &mut self,
        refusal: &Refusal,
        attempt: &mut Attempt,
    ) -> Result<(), String> {
        match refusal {
            Refusal::Unauthorized(challenge) => {
                if !attempt.refreshed && !attempt.signed_in {
                    attempt.refreshed = true;
                    if self.refresh().await {
                        return Ok(());
                    }
                }
                if attempt.signed_in {
                    return Err("the server refused the token of a fresh sign-in (HTTP 401)".into());
                }
                attempt.signed_in = true;
                let step_up = self
                    .record
                    .as_ref()
                    .map(|r| r.step_up.clone())
                    .unwrap_or_default();
                self.sign_in(challenge.as_ref(), &step_up).await
            }
            Refusal::InsufficientScope(challenge) => {
                if attempt.stepped_up {
                    return Err(
                        "the server refused the stepped-up token with insufficient_scope again; \
                         not signing in again"
                            .into(),
                    );
                }
                attempt.stepped_up = true;
                let challenged = challenge.scope.clone().unwrap_or_default();
                let step_up = match self.record.as_mut() {
                    Some(r) => {
                        r.add_step_up(&challenged);
                        r.step_up.clone()
                    }
                    None => challenged,
                };
                self.sign_in(Some(challenge), &step_up).await
            }
        }
    }

    /// Refresh the token once; whether a new one is in use.
    async fn refresh(&mut self) -> bool {
        let Some(record) = self.record.as_ref() else {
            return false;
        };
        if record.refresh_token.is_none() {
            return false;
        }
        match flow::refresh(&self.fetcher, record).await {
            Ok(r) => {
                super::note("refreshed the access token");
                self.use_record(r).is_ok()
            }
            Err(e) => {
                super::note(&format!("refresh failed: {e}"));
                false
            }
        }
    }

    fn use_record(&mut self, r: TokenRecord) -> Result<(), String> {
        crate::actors::tokens::Token::of(&r, &self.server_url)
            .set_on(self.transport.as_ref())
            .map_err(|e| e.to_string())?;
        self.record = Some(r);
        Ok(())
    }

    async fn sign_in(
        &mut self,
        challenge: Option<&Challenge>,
        step_up: &[String],
    ) -> Result<(), String> {
        if self.sign_ins >= MAX_SIGN_INS {
            return Err(format!(
                "the server still refuses after {MAX_SIGN_INS} sign-ins; giving up"
            ));
        }
        self.sign_ins += 1;
        let r = self.sign_in_once(challenge, step_up).await;
        r.map_err(|e| format!("signing in failed: {e}"))
    }

    async fn sign_in_once(
        &mut self,
        challenge: Option<&Challenge>,
        step_up: &[String],
    ) -> Result<(), OAuthError> {
        let disc = discovery::discover(&self.fetcher, &self.server_url, challenge).await?;
        let chosen = self.service.clone().or_else(|| self.secret_service(&disc));
        if let Some(service) = chosen {
            let record = self
                .service_token(&disc, &service, challenge, step_up)
                .await?;
            return self
                .use_record(record)
                .map_err(|e| OAuthError::BadTokenResponse(e.to_string()));
        }
        let scopes = scope::select(
            Some(step_up),
            challenge.and_then(|c| c.scope.as_deref()),
            disc.resource_metadata
                .as_ref()
                .and_then(|m| m.scopes_supported.as_deref()),
            disc.auth_server.scopes_supported.as_deref(),
        );
        let client = client::obtain(
            &self.fetcher,
            &disc.auth_server,
            Some(&self.configured),
            &self.clients,
            DEFAULT_REDIRECT_URI,
        )
        .await?;
        let pending = flow::begin(&disc, client, scopes)?;
        if pending.client.source == ClientSource::Registered
            && !self.clients.contains(&pending.client)
        {
            self.clients.push(pending.client.clone());
        }
        super::note(&format!(
            "signing in with {} as a {:?} client ({}), scope {:?}{}",
            disc.auth_server.issuer,
            pending.client.source,
            pending.client.auth_method.as_str(),
            pending.scopes.join(" "),
            if disc.legacy() {
                " (2025-03-26 fallbacks)"
            } else {
                ""
            }
        ));
        let callback = self
            .fetcher
            .follow_authorization(&pending.authorization_url, &pending.redirect_uri)
            .await?;
        let record = flow::complete(&self.fetcher, &pending, &callback).await?;
        super::note(&format!(
            "signed in: scope {:?}, expires in {}",
            record.scope.as_deref().unwrap_or(""),
            record
                .expires_at
                .map(|t| format!("{} s", t.saturating_sub(crate::oauth::now_secs())))
                .unwrap_or_else(|| "(not said)".into())
        ));
        self.use_record(record)
            .map_err(|e| OAuthError::BadTokenResponse(e.to_string()))
    }

    /// The client credentials grant with the configured secret, for an authorization server
    /// that offers it and not the authorization code grant.
    fn secret_service(&self, disc: &Discovery) -> Option<Service> {
        let a = &disc.auth_server;
        if !a.lists_grant(grant::GRANT_CLIENT_CREDENTIALS) || a.lists_grant("authorization_code") {
            return None;
        }
        Some(Service::Secret {
            client_id: self.configured.client_id.clone()?,
            client_secret: self.configured.client_secret.clone()?,
        })
    }

    /// A token without a browser.
    async fn service_token(
        &self,
        disc: &Discovery,
        service: &Service,
        challenge: Option<&Challenge>,
        step_up: &[String],
    ) -> Result<TokenRecord, OAuthError> {
        let scopes = scope::select(
            Some(step_up),
            challenge.and_then(|c| c.scope.as_deref()),
            disc.resource_metadata
                .as_ref()
                .and_then(|m| m.scopes_supported.as_deref()),
            None,
        );
        let target = Target::discovered(&self.server_url, disc, &scopes);
        let dpop = disc.auth_server.dpop_key()?;
        let (client, grant) = match service {
            Service::Secret {
                client_id,
                client_secret,
            } => (
                secret_auth(disc, client_id, client_secret),
                Grant::ClientCredentials,
            ),
            Service::PrivateKeyJwt { client_id, key } => (
                ClientAuth::PrivateKeyJwt {
                    client_id: client_id.clone(),
                    key: key.clone(),
                },
                Grant::ClientCredentials,
            ),
            Service::Workload { client_id, token } => (
                ClientAuth::None {
                    client_id: client_id.clone(),
                },
                Grant::JwtBearer {
                    assertion: token.clone(),
                },
            ),
            Service::Enterprise {
                idp_token_endpoint,
                idp_client_id,
                id_token,
                client_id,
                client_secret,
            } => {
                let idp_client = ClientAuth::None {
                    client_id: idp_client_id.clone(),
                };
                let assertion = grant::exchange_identity(
                    &self.fetcher,
                    IdentityExchange {
                        idp_token_endpoint,
                        idp_client: &idp_client,
                        id_token,
                    },
                    target,
                )
                .await?;
                super::note("exchanged the ID token for an identity assertion");
                (
                    secret_auth(disc, client_id, client_secret),
                    Grant::JwtBearer { assertion },
                )
            }
        };
        let record =
            grant::request_token(&self.fetcher, target, &client, &grant, dpop.as_ref()).await?;
        super::note(&format!(
            "got a token with the {} grant ({}), {}",
            grant.name(),
            client_method(&client),
            if record.dpop().is_some() {
                "DPoP-bound"
            } else {
                "bearer"
            }
        ));
        Ok(record)
    }
}

/// `client_secret_basic` unless the authorization server lists only `client_secret_post`.
fn secret_auth(disc: &Discovery, client_id: &str, secret: &Sensitive) -> ClientAuth {
    ClientAuth::with_secret(
        disc.auth_server
            .token_endpoint_auth_methods_supported
            .as_deref(),
        client_id.to_owned(),
        secret.clone(),
    )
}

fn client_method(c: &ClientAuth) -> &'static str {
    match c {
        ClientAuth::None { .. } => "no client authentication",
        ClientAuth::Basic { .. } => "client_secret_basic",
        ClientAuth::Post { .. } => "client_secret_post",
        ClientAuth::PrivateKeyJwt { .. } => "private_key_jwt",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn refusals_that_a_sign_in_answers() {
        let e = RpcError::NotSent(TransportError::Status {
            status: 401,
            detail: String::new(),
            rpc_error: None,
            www_authenticate: Some(r#"Bearer scope="a""#.into()),
        });
        assert!(
            matches!(of_rpc(&e), Some(Refusal::Unauthorized(Some(c))) if c.scope == Some(vec!["a".into()]))
        );
        let forbidden = |h: &str| {
            of_rpc(&RpcError::NotSent(TransportError::Status {
                status: 403,
                detail: String::new(),
                rpc_error: None,
                www_authenticate: Some(h.into()),
            }))
        };
        assert!(matches!(
            forbidden(r#"Bearer error="insufficient_scope", scope="w""#),
            Some(Refusal::InsufficientScope(_))
        ));
        assert_eq!(forbidden(r#"Bearer error="invalid_token""#), None);
        let h = HandshakeError::NeedsAuth {
            status: 401,
            www_authenticate: None,
            reason: None,
        };
        assert_eq!(of_handshake(&h), Some(Refusal::Unauthorized(None)));
    }

    #[test]
    fn the_context_gives_a_grant_without_a_browser() {
        assert!(service(None).unwrap().is_none());
        assert!(service(Some(
            &json!({"client_id": "a", "client_secret": "client-secret-value-3"})
        ))
        .unwrap()
        .is_none());
        let w = service(Some(
            &json!({"client_id": "w", "valid_jwt": "workload-jwt-value-1"}),
        ))
        .unwrap();
        assert!(matches!(
            w,
            Some(Service::Workload {
                client_id: Some(_),
                ..
            })
        ));
        let e = service(Some(
            &json!({"idp_id_token": "id-token-value-2", "idp_token_endpoint": "http://i/t",
            "client_id": "c", "client_secret": "client-secret-value-3"}),
        ))
        .unwrap();
        assert!(matches!(e, Some(Service::Enterprise { .. })));
        let e = service(Some(
            &json!({"idp_id_token": "id-token-value-2", "client_id": "c"}),
        ))
        .unwrap_err();
        assert!(e.contains("idp_token_endpoint"), "{e}");
        let e = service(Some(&json!({"private_key_pem": "nope", "client_id": "c"}))).unwrap_err();
        assert!(!e.contains("nope"), "{e}");
    }

    #[test]
    fn the_context_gives_the_client() {
        let c = configured_client(Some(&json!({"client_id": "id", "client_secret": "s",
            "issuer": "http://localhost:1"})));
        assert_eq!(c.client_id.as_deref(), Some("id"));
        assert_eq!(c.issuer.as_deref(), Some("http://localhost:1"));
        assert_eq!(
            c.metadata_url.as_deref(),
            Some(CONFORMANCE_CLIENT_METADATA_URL)
        );
        let c = configured_client(None);
        assert_eq!(c.client_id, None);
        let c = configured_client(Some(&json!({"client_metadata_url": "https://x/c.json"})));
        assert_eq!(c.metadata_url.as_deref(), Some("https://x/c.json"));
    }
}
