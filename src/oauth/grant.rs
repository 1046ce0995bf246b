//! Tokens without a browser, for a service (the MCP authorization extensions): the client
//! credentials grant (SEP-1046; `client_secret_basic`, `client_secret_post` or
//! `private_key_jwt` per RFC 7523 §2.2), the JWT bearer grant (RFC 7523 §2.1) with a workload
//! identity token (SEP-1933) or an identity assertion, and the token exchange (RFC 8693) of a
//! user's ID token for an Identity Assertion JWT Authorization Grant at the enterprise
//! identity provider (SEP-990, enterprise-managed authorization). Every token request may
//! carry a DPoP proof (RFC 9449 §5), and one refused with `use_dpop_nonce` and a
//! `DPoP-Nonce` is sent again once with that nonce (`post_token`, which the authorization
//! code flow uses too).
//!
//! A refusal (`invalid_grant`, `invalid_scope`, `unauthorized_client`, ...) is
//! [`OAuthError::GrantRefused`]: reported as it is, never retried, never answered by another
//! grant.
//!
//! Owns: those requests and their answers. Must not touch: where the configuration, the keys
//! and the tokens are kept (the caller reads and stores them).

use super::client::{AuthMethod, ClientRecord, ClientSource};
use super::fetch::{Fetcher, Reply};
use super::jws::{DpopKey, SigningKey};
use super::record::TokenRecord;
use super::{now_secs, scope, server_text, OAuthError, Sensitive};
use serde_json::Value;
use std::collections::HashMap;
use url::Url;

pub const GRANT_CLIENT_CREDENTIALS: &str = "client_credentials";
pub const GRANT_JWT_BEARER: &str = "urn:ietf:params:oauth:grant-type:jwt-bearer";
pub const GRANT_TOKEN_EXCHANGE: &str = "urn:ietf:params:oauth:grant-type:token-exchange";
const ASSERTION_TYPE_JWT_BEARER: &str = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer";
const TOKEN_TYPE_ID_TOKEN: &str = "urn:ietf:params:oauth:token-type:id_token";
const TOKEN_TYPE_ID_JAG: &str = "urn:ietf:params:oauth:token-type:id-jag";

/// How a service client authenticates at a token endpoint. Its `Debug` shows no secret.
#[derive(Debug, Clone)]
pub enum ClientAuth {
    /// No authentication; the `client_id` in the form when there is one.
    None { client_id: Option<String> },
    /// HTTP Basic (RFC 6749 §2.3.1).
    Basic {
        client_id: String,
        secret: Sensitive,
    },
    /// The id and secret in the form.
    Post {
        client_id: String,
        secret: Sensitive,
    },
    /// A client assertion signed with the client's key (RFC 7523 §2.2), `aud` the issuer.
    PrivateKeyJwt { client_id: String, key: SigningKey },
}

impl ClientAuth {
    /// A client with a secret: `client_secret_post` when it is the method the server's
    /// `token_endpoint_auth_methods_supported` (`listed`) calls for, else Basic.
    pub fn with_secret(
        listed: Option<&[String]>,
        client_id: String,
        secret: Sensitive,
    ) -> ClientAuth {
        match super::client::choose_auth_method(listed, true) {
            AuthMethod::ClientSecretPost => ClientAuth::Post { client_id, secret },
            _ => ClientAuth::Basic { client_id, secret },
        }
    }

    pub fn client_id(&self) -> Option<&str> {
        match self {
            ClientAuth::None { client_id } => client_id.as_deref(),
            ClientAuth::Basic { client_id, .. }
            | ClientAuth::Post { client_id, .. }
            | ClientAuth::PrivateKeyJwt { client_id, .. } => Some(client_id),
        }
    }

    fn method(&self) -> AuthMethod {
        match self {
            ClientAuth::None { .. } => AuthMethod::None,
            ClientAuth::Basic { .. } => AuthMethod::ClientSecretBasic,
            ClientAuth::Post { .. } => AuthMethod::ClientSecretPost,
            ClientAuth::PrivateKeyJwt { .. } => AuthMethod::PrivateKeyJwt,
        }
    }

    /// Add the authentication to a token request's form (`audience`: the authorization
    /// server's issuer, a client assertion's `aud`); answers HTTP Basic's credentials and the
    /// assertion made (a secret, for the caller's redaction).
    fn apply(
        &self,
        form: &mut Vec<(&'static str, String)>,
        audience: &str,
    ) -> Result<Applied<'_>, OAuthError> {
        if let Some(id) = self.client_id() {
            form.push(("client_id", id.to_owned()));
        }
        match self {
            ClientAuth::None { .. } => Ok((None, None)),
            ClientAuth::Basic { client_id, secret } => Ok((Some((client_id, secret)), None)),
            ClientAuth::Post { secret, .. } => {
                form.push(("client_secret", secret.expose().to_owned()));
                Ok((None, None))
            }
            ClientAuth::PrivateKeyJwt { client_id, key } => {
                let a = key
                    .client_assertion(client_id, audience, now_secs())
                    .map_err(|e| OAuthError::Key(e.to_string()))?;
                form.push(("client_assertion_type", ASSERTION_TYPE_JWT_BEARER.into()));
                form.push(("client_assertion", a.expose().to_owned()));
                Ok((None, Some(a)))
            }
        }
    }

    fn secret(&self) -> Option<&Sensitive> {
        match self {
            ClientAuth::Basic { secret, .. } | ClientAuth::Post { secret, .. } => Some(secret),
            _ => None,
        }
    }
}

/// What [`ClientAuth::apply`] answers: HTTP Basic's credentials, the assertion made.
type Applied<'a> = (Option<(&'a str, &'a Sensitive)>, Option<Sensitive>);

/// The grant of a token request without a browser.
#[derive(Debug, Clone)]
pub enum Grant {
    /// `client_credentials`: the client acts for itself.
    ClientCredentials,
    /// `urn:ietf:params:oauth:grant-type:jwt-bearer` with an assertion: a workload identity
    /// token, or the identity assertion of a token exchange.
    JwtBearer { assertion: Sensitive },
}

impl Grant {
    pub fn grant_type(&self) -> &'static str {
        match self {
            Grant::ClientCredentials => GRANT_CLIENT_CREDENTIALS,
            Grant::JwtBearer { .. } => GRANT_JWT_BEARER,
        }
    }

    /// How it is named in messages.
    pub fn name(&self) -> &'static str {
        match self {
            Grant::ClientCredentials => "client_credentials",
            Grant::JwtBearer { .. } => "jwt-bearer",
        }
    }
}

/// Where and what a service's token request asks for.
#[derive(Debug, Clone, Copy)]
pub struct Target<'a> {
    /// The MCP server URL the token is for (kept in the record).
    pub server_url: &'a str,
    /// The authorization server's issuer (a client assertion's `aud`).
    pub issuer: &'a str,
    pub token_endpoint: &'a str,
    /// The RFC 8707 `resource`.
    pub resource: &'a str,
    pub scopes: &'a [String],
}

impl<'a> Target<'a> {
    /// The token request for `server_url`, to the authorization server `disc` found, for
    /// `scopes`.
    pub fn discovered(
        server_url: &'a str,
        disc: &'a super::discovery::Discovery,
        scopes: &'a [String],
    ) -> Self {
        Target {
            server_url,
            issuer: &disc.auth_server.issuer,
            token_endpoint: &disc.auth_server.token_endpoint,
            resource: &disc.resource,
            scopes,
        }
    }
}

/// A token endpoint's refusal: its `error` and `error_description`, cleaned.
pub(crate) fn refusal(reply: &Reply, secrets: &[&Sensitive]) -> (String, Option<String>) {
    let doc: Value = serde_json::from_slice(&reply.body).unwrap_or(Value::Null);
    let error = doc
        .get("error")
        .and_then(Value::as_str)
        .map(|e| server_text(e, secrets))
        .unwrap_or_else(|| "no error code".to_owned());
    let description = doc
        .get("error_description")
        .and_then(Value::as_str)
        .map(|d| server_text(d, secrets));
    (error, description)
}

/// The most token endpoints whose latest `DPoP-Nonce` is remembered (RFC 9449 §8: a client
/// uses the nonce it was given until the server gives another). Past it the memory is
/// emptied and starts again; a forgotten nonce costs one `use_dpop_nonce` round trip.
pub const MAX_REMEMBERED_AS_NONCES: usize = 64;

/// The latest `DPoP-Nonce` of each token endpoint, kept in memory for the process's life.
static AS_NONCES: std::sync::Mutex<Option<HashMap<String, String>>> = std::sync::Mutex::new(None);

fn remembered_nonce(endpoint: &str) -> Option<String> {
    AS_NONCES
        .lock()
        .ok()
        .and_then(|g| g.as_ref().and_then(|m| m.get(endpoint).cloned()))
}

fn remember_nonce(endpoint: &str, nonce: &str) {
    if let Ok(mut g) = AS_NONCES.lock() {
        let m = g.get_or_insert_with(HashMap::new);
        if m.len() >= MAX_REMEMBERED_AS_NONCES && !m.contains_key(endpoint) {
            m.clear();
        }
        m.insert(endpoint.to_owned(), nonce.to_owned());
    }
}

/// POST a token request, with a DPoP proof when `dpop` is given. The proof carries the
/// endpoint's latest `DPoP-Nonce` when one was given before (remembered per endpoint, see
/// [`MAX_REMEMBERED_AS_NONCES`]); a 400 (or 401) `use_dpop_nonce` that brings a new
/// `DPoP-Nonce` is answered by sending it once more with a proof carrying that nonce
/// (RFC 9449 §8). Any other answer is the caller's.
pub(crate) async fn post_token(
    fetcher: &Fetcher,
    url: &Url,
    form: &[(&str, &str)],
    basic: Option<(&str, &Sensitive)>,
    dpop: Option<&DpopKey>,
) -> Result<Reply, OAuthError> {
    let Some(key) = dpop else {
        return fetcher.post_form(url, form, basic).await;
    };
    let endpoint = url.as_str();
    let proof = |nonce: Option<&str>| {
        key.proof("POST", endpoint, None, nonce, now_secs())
            .map_err(|e| OAuthError::Key(e.to_string()))
    };
    let used = remembered_nonce(endpoint);
    let reply = fetcher
        .post_form_with_proof(url, form, basic, Some(&proof(used.as_deref())?))
        .await?;
    if let Some(n) = &reply.dpop_nonce {
        remember_nonce(endpoint, n);
    }
    match (&reply.dpop_nonce, asks_for_nonce(&reply)) {
        (Some(nonce), true) if used.as_deref() != Some(nonce.as_str()) => {
            let again = proof(Some(nonce))?;
            let reply = fetcher
                .post_form_with_proof(url, form, basic, Some(&again))
                .await?;
            if let Some(n) = &reply.dpop_nonce {
                remember_nonce(endpoint, n);
            }
            Ok(reply)
        }
        _ => Ok(reply),
    }
}

fn asks_for_nonce(reply: &Reply) -> bool {
    (reply.status == 400 || reply.status == 401)
        && serde_json::from_slice::<Value>(&reply.body)
            .ok()
            .and_then(|d| d.get("error").and_then(Value::as_str).map(str::to_owned))
            .is_some_and(|e| e == "use_dpop_nonce")
}

/// Ask the token endpoint for a token with `grant` (no refresh token is expected; the caller
/// asks again before expiry). With `dpop`, the token is asked for bound to that key, and
/// kept with it when the server binds it (`token_type` DPoP).
pub async fn request_token(
    fetcher: &Fetcher,
    target: Target<'_>,
    client: &ClientAuth,
    grant: &Grant,
    dpop: Option<&DpopKey>,
) -> Result<TokenRecord, OAuthError> {
    let url = super::flow::token_url(target.token_endpoint)?;
    let mut form: Vec<(&'static str, String)> = vec![("grant_type", grant.grant_type().into())];
    if let Grant::JwtBearer { assertion } = grant {
        form.push(("assertion", assertion.expose().to_owned()));
    }
    form.push(("resource", target.resource.to_owned()));
    if let Some(s) = scope::param(target.scopes) {
        form.push(("scope", s));
    }
    let (basic, assertion) = client.apply(&mut form, target.issuer)?;
    let fields: Vec<(&str, &str)> = form.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let reply = post_token(fetcher, &url, &fields, basic, dpop).await?;
    let mut secrets: Vec<&Sensitive> = Vec::new();
    secrets.extend(client.secret());
    secrets.extend(assertion.as_ref());
    if let Grant::JwtBearer { assertion } = grant {
        secrets.push(assertion);
    }
    if !reply.ok() {
        let (error, description) = refusal(&reply, &secrets);
        return Err(OAuthError::GrantRefused {
            grant: grant.name().into(),
            status: reply.status,
            error,
            description,
        });
    }
    let g = super::flow::read_granted(&reply)?;
    super::flow::check_binding(&g, dpop)?;
    let bound = g.token_type.eq_ignore_ascii_case("dpop");
    let now = now_secs();
    // A service's identity, when its token says (a JWT access token of the issuer).
    let account = super::identity::account(
        g.id_token.as_ref().map(Sensitive::expose),
        g.access_token.expose(),
        target.issuer,
        client.client_id().unwrap_or_default(),
    );
    Ok(TokenRecord {
        server_url: target.server_url.to_owned(),
        access_token: g.access_token,
        refresh_token: g.refresh_token,
        expires_at: g.expires_in.map(|s| now.saturating_add(s)),
        scope: g.scope.or_else(|| scope::param(target.scopes)),
        token_type: g.token_type,
        issuer: target.issuer.to_owned(),
        resource: target.resource.to_owned(),
        token_endpoint: target.token_endpoint.to_owned(),
        client: ClientRecord {
            client_id: client.client_id().unwrap_or_default().to_owned(),
            client_secret: None,
            auth_method: client.method(),
            redirect_uri: String::new(),
            issuer: target.issuer.to_owned(),
            source: ClientSource::Configured,
        },
        step_up: Vec::new(),
        dpop_key: dpop.filter(|_| bound).cloned(),
        account,
    })
}

/// The enterprise identity provider's side of enterprise-managed authorization.
#[derive(Debug, Clone, Copy)]
pub struct IdentityExchange<'a> {
    /// The identity provider's token endpoint.
    pub idp_token_endpoint: &'a str,
    /// How albedo authenticates there (its client at the identity provider).
    pub idp_client: &'a ClientAuth,
    /// The user's ID token (the `subject_token`).
    pub id_token: &'a Sensitive,
}

/// Exchange the user's ID token at the identity provider for an Identity Assertion JWT
/// Authorization Grant (ID-JAG) for `target`: its authorization server's issuer is the
/// `audience`, its `resource` and scopes are asked for (RFC 8693; SEP-990). The answer is the
/// assertion for [`Grant::JwtBearer`], sent to the same `target`.
pub async fn exchange_identity(
    fetcher: &Fetcher,
    x: IdentityExchange<'_>,
    target: Target<'_>,
) -> Result<Sensitive, OAuthError> {
    let (audience, resource, scopes) = (target.issuer, target.resource, target.scopes);
    let url = super::flow::token_url(x.idp_token_endpoint)?;
    let mut form: Vec<(&'static str, String)> = vec![
        ("grant_type", GRANT_TOKEN_EXCHANGE.into()),
        ("requested_token_type", TOKEN_TYPE_ID_JAG.into()),
        ("subject_token", x.id_token.expose().to_owned()),
        ("subject_token_type", TOKEN_TYPE_ID_TOKEN.into()),
        ("audience", audience.to_owned()),
        ("resource", resource.to_owned()),
    ];
    if let Some(s) = scope::param(scopes) {
        form.push(("scope", s));
    }
    let idp_issuer = url.origin().ascii_serialization();
    let (basic, assertion) = x.idp_client.apply(&mut form, &idp_issuer)?;
    let fields: Vec<(&str, &str)> = form.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let reply = fetcher.post_form(&url, &fields, basic).await?;
    let mut secrets: Vec<&Sensitive> = vec![x.id_token];
    secrets.extend(x.idp_client.secret());
    secrets.extend(assertion.as_ref());
    if !reply.ok() {
        let (error, description) = refusal(&reply, &secrets);
        return Err(OAuthError::GrantRefused {
            grant: "token-exchange".into(),
            status: reply.status,
            error,
            description,
        });
    }
    let doc: Value = serde_json::from_slice(&reply.body)
        .map_err(|e| OAuthError::BadTokenResponse(format!("not JSON ({e})")))?;
    let issued = doc.get("issued_token_type").and_then(Value::as_str);
    if issued != Some(TOKEN_TYPE_ID_JAG) {
        return Err(OAuthError::BadTokenResponse(format!(
            "the identity provider issued {:?}, not an identity assertion ({TOKEN_TYPE_ID_JAG})",
            server_text(issued.unwrap_or("nothing"), &secrets)
        )));
    }
    doc.get("access_token")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .map(Sensitive::new)
        .ok_or_else(|| OAuthError::BadTokenResponse("it has no access_token".into()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reply(status: u16, body: &str, nonce: Option<&str>) -> Reply {
        Reply {
            status,
            location: None,
            body: bytes::Bytes::from(body.to_owned()),
            shown: "https://as.example.com/token".into(),
            dpop_nonce: nonce.map(str::to_owned),
        }
    }

    #[test]
    fn a_token_endpoints_nonce_is_remembered_within_the_bound() {
        let a = "https://as-remember.example.com/token";
        assert_eq!(remembered_nonce(a), None);
        remember_nonce(a, "n-1");
        remember_nonce(a, "n-2");
        assert_eq!(remembered_nonce(a).as_deref(), Some("n-2"));
        for i in 0..MAX_REMEMBERED_AS_NONCES + 3 {
            remember_nonce(&format!("https://as-{i}.example.com/token"), "n");
            let held = AS_NONCES.lock().unwrap().as_ref().map_or(0, HashMap::len);
            assert!(held <= MAX_REMEMBERED_AS_NONCES, "{held}");
        }
    }

    #[test]
    fn a_nonce_is_asked_for_only_by_use_dpop_nonce() {
        assert!(asks_for_nonce(&reply(
            400,
            r#"{"error":"use_dpop_nonce"}"#,
            Some("n")
        )));
        assert!(!asks_for_nonce(&reply(
            400,
            r#"{"error":"invalid_grant"}"#,
            Some("n")
        )));
        assert!(!asks_for_nonce(&reply(
            200,
            r#"{"error":"use_dpop_nonce"}"#,
            None
        )));
    }

    #[test]
    fn client_authentication_goes_where_each_method_says() {
        let mut form = Vec::new();
        let c = ClientAuth::Post {
            client_id: "id".into(),
            secret: Sensitive::new("post-secret-1"),
        };
        let (basic, a) = c.apply(&mut form, "https://as").unwrap();
        assert!(basic.is_none() && a.is_none());
        assert!(form.contains(&("client_secret", "post-secret-1".into())));
        let mut form = Vec::new();
        let c = ClientAuth::Basic {
            client_id: "id".into(),
            secret: Sensitive::new("basic-secret-2"),
        };
        let (basic, _) = c.apply(&mut form, "https://as").unwrap();
        assert_eq!(basic.map(|b| b.0), Some("id"));
        assert!(!form.iter().any(|(_, v)| v.contains("basic-secret-2")));
        assert!(!format!("{c:?}").contains("basic-secret-2"));
        let mut form = Vec::new();
        let key = SigningKey::from_pem(&test_pem()).unwrap();
        let c = ClientAuth::PrivateKeyJwt {
            client_id: "id".into(),
            key,
        };
        let (_, a) = c.apply(&mut form, "https://as").unwrap();
        let a = a.unwrap();
        assert!(form.contains(&("client_assertion", a.expose().to_owned())));
        assert!(form.contains(&("client_assertion_type", ASSERTION_TYPE_JWT_BEARER.into())));
    }

    pub(crate) fn test_pem() -> String {
        use base64::Engine;
        let rng = ring::rand::SystemRandom::new();
        let doc = ring::signature::EcdsaKeyPair::generate_pkcs8(
            &ring::signature::ECDSA_P256_SHA256_FIXED_SIGNING,
            &rng,
        )
        .unwrap();
        format!(
            "-----BEGIN PRIVATE KEY-----\n{}\n-----END PRIVATE KEY-----\n",
            base64::engine::general_purpose::STANDARD.encode(doc.as_ref())
        )
    }
}
