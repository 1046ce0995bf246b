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

use crate::client::handshake::HandshakeError;
use crate::client::RpcError;
use crate::oauth::flow::{self, SignInOptions};
use crate::oauth::{
    Challenge, ClientRecord, ClientSource, ConfiguredClient, Fetcher, OAuthError, Sensitive,
    TokenRecord, DEFAULT_REDIRECT_URI,
};
use crate::store::settings::Secret;
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

/// The client credentials a scenario's context gives.
pub fn configured_client(context: Option<&Value>) -> ConfiguredClient {
    let get = |k: &str| {
        context
            .and_then(|c| c.get(k))
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
    };
    ConfiguredClient {
        client_id: get("client_id"),
        client_secret: get("client_secret").map(Sensitive::new),
        metadata_url: Some(
            get("client_metadata_url").unwrap_or_else(|| CONFORMANCE_CLIENT_METADATA_URL.into()),
        ),
        issuer: get("issuer"),
    }
}

/// The sign-in state of one run.
pub struct Auth {
    fetcher: Fetcher,
    server_url: String,
    configured: ConfiguredClient,
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
        transport: Arc<HttpTransport>,
    ) -> Auth {
        Auth {
            fetcher,
            server_url: server_url.to_owned(),
            configured,
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
        self.transport
            .set_bearer(Some(Secret::new(r.access_token.expose())))
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
        let (disc, pending) = flow::start(
            &self.fetcher,
            SignInOptions {
                server_url: &self.server_url,
                challenge,
                configured: Some(&self.configured),
                known_clients: &self.clients,
                step_up,
                redirect_uri: DEFAULT_REDIRECT_URI,
            },
        )
        .await?;
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
        };
        assert_eq!(of_handshake(&h), Some(Refusal::Unauthorized(None)));
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
