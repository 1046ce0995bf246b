//! The OAuth client albedo signs in as, in the spec's order: a client id (and secret) the user
//! configured for the server; else a Client ID Metadata Document, when the user configured the
//! https URL of one they host and the authorization server accepts them
//! (`client_id_metadata_document_supported`); else a registration kept for this issuer and
//! redirect URI (reused while both match); else Dynamic Client Registration (RFC 7591) as a
//! native public client (`application_type: native`). How the client authenticates at the
//! token endpoint: `none`, `client_secret_basic` or `client_secret_post`, as the server
//! supports and the registration says.
//!
//! Owns: choosing the client, the registration request and its answer, the token endpoint's
//! client authentication. Must not touch: where clients are stored (the caller keeps the
//! [`ClientRecord`]s and hands them back).

use super::discovery::AuthServerMetadata;
use super::fetch::{shown_str, Fetcher};
use super::{server_text, OAuthError, Sensitive, CLIENT_NAME};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use url::Url;

/// How the client authenticates at the token endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AuthMethod {
    /// A public client: its `client_id` in the form, no secret.
    None,
    /// HTTP Basic with the id and secret (RFC 6749 §2.3.1).
    ClientSecretBasic,
    /// The id and secret in the form.
    ClientSecretPost,
    /// A JWT signed with the client's private key (RFC 7523 §2.2); service grants only
    /// ([`super::grant`]), the key never in a record.
    PrivateKeyJwt,
}

impl AuthMethod {
    pub fn as_str(self) -> &'static str {
        match self {
            AuthMethod::None => "none",
            AuthMethod::ClientSecretBasic => "client_secret_basic",
            AuthMethod::ClientSecretPost => "client_secret_post",
            AuthMethod::PrivateKeyJwt => "private_key_jwt",
        }
    }

    pub fn parse(s: &str) -> Option<AuthMethod> {
        match s {
            "none" => Some(AuthMethod::None),
            "client_secret_basic" => Some(AuthMethod::ClientSecretBasic),
            "client_secret_post" => Some(AuthMethod::ClientSecretPost),
            "private_key_jwt" => Some(AuthMethod::PrivateKeyJwt),
            _ => None,
        }
    }
}

/// Where a client came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ClientSource {
    /// The user's `oauth_client` (or the conformance runner's context).
    Configured,
    /// A Client ID Metadata Document URL is the client id.
    MetadataDocument,
    /// Dynamic Client Registration.
    Registered,
}

/// A client, as kept with the token (and, registered ones, per issuer and redirect URI).
/// Its `Debug` shows the secret as `***`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClientRecord {
    pub client_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_secret: Option<Sensitive>,
    pub auth_method: AuthMethod,
    pub redirect_uri: String,
    /// The issuer it belongs to: a client is never used with another authorization server.
    pub issuer: String,
    pub source: ClientSource,
}

impl ClientRecord {
    /// Whether this client may be used again for `issuer` and `redirect_uri`.
    pub fn reusable_for(&self, issuer: &str, redirect_uri: &str) -> bool {
        self.issuer == issuer && self.redirect_uri == redirect_uri
    }

    /// Add the client's authentication to a token request's form; answers the HTTP Basic
    /// credentials when that is the method. The `client_id` is in the form with every method,
    /// Basic included (never the secret): the MCP Python SDK's token endpoint
    /// (`mcp/server/auth/middleware/client_auth.py`, which FastMCP serves) refuses a request
    /// without it ("Missing client_id"), and its own client sends it the same way.
    pub(crate) fn authenticate<'a>(
        &'a self,
        form: &mut Vec<(&'static str, String)>,
    ) -> Option<(&'a str, &'a Sensitive)> {
        match (self.auth_method, &self.client_secret) {
            (AuthMethod::ClientSecretBasic, Some(s)) => {
                form.push(("client_id", self.client_id.clone()));
                Some((self.client_id.as_str(), s))
            }
            (AuthMethod::ClientSecretPost, Some(s)) => {
                form.push(("client_id", self.client_id.clone()));
                form.push(("client_secret", s.expose().to_owned()));
                None
            }
            _ => {
                form.push(("client_id", self.client_id.clone()));
                None
            }
        }
    }
}

/// What the user configured for a server (`secrets.oauth_client`): a client id and secret,
/// and/or the https URL of a Client ID Metadata Document they host.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConfiguredClient {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_secret: Option<Sensitive>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata_url: Option<String>,
    /// The issuer the client id was registered with; when set, it is used with that
    /// authorization server only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub issuer: Option<String>,
}

/// How a client with (or without) a secret authenticates, given what the server lists
/// (`None`: not listed, which RFC 8414 reads as `client_secret_basic`).
pub fn choose_auth_method(supported: Option<&[String]>, has_secret: bool) -> AuthMethod {
    if !has_secret {
        return AuthMethod::None;
    }
    let Some(list) = supported else {
        return AuthMethod::ClientSecretBasic;
    };
    let has = |m: &str| list.iter().any(|s| s == m);
    if has("client_secret_basic") {
        AuthMethod::ClientSecretBasic
    } else if has("client_secret_post") {
        AuthMethod::ClientSecretPost
    } else if has("none") {
        AuthMethod::None
    } else {
        AuthMethod::ClientSecretBasic
    }
}

/// The method a native client asks for when it registers: `none` (a public client) unless the
/// server lists methods without it.
pub fn registration_method(supported: Option<&[String]>) -> AuthMethod {
    let Some(list) = supported else {
        return AuthMethod::None;
    };
    let has = |m: &str| list.iter().any(|s| s == m);
    if has("none") {
        AuthMethod::None
    } else if has("client_secret_basic") {
        AuthMethod::ClientSecretBasic
    } else if has("client_secret_post") {
        AuthMethod::ClientSecretPost
    } else {
        AuthMethod::None
    }
}

/// The RFC 7591 registration request of a native client.
pub fn registration_request(redirect_uri: &str, method: AuthMethod) -> Value {
    json!({
        "client_name": CLIENT_NAME,
        "redirect_uris": [redirect_uri],
        "grant_types": ["authorization_code", "refresh_token"],
        "response_types": ["code"],
        "token_endpoint_auth_method": method.as_str(),
        "application_type": "native",
    })
}

/// The client a registration answered.
pub fn parse_registration(
    url: &str,
    doc: &Value,
    requested: AuthMethod,
    issuer: &str,
    redirect_uri: &str,
) -> Result<ClientRecord, OAuthError> {
    let client_id = doc
        .get("client_id")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .ok_or_else(|| OAuthError::Registration {
            url: shown_str(url),
            reason: "the answer has no client_id".into(),
        })?;
    let client_secret = doc
        .get("client_secret")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .map(Sensitive::new);
    let mut auth_method = doc
        .get("token_endpoint_auth_method")
        .and_then(Value::as_str)
        .and_then(AuthMethod::parse)
        .filter(|m| *m != AuthMethod::PrivateKeyJwt)
        .unwrap_or(requested);
    if client_secret.is_none() {
        auth_method = AuthMethod::None;
    }
    Ok(ClientRecord {
        client_id: client_id.to_owned(),
        client_secret,
        auth_method,
        redirect_uri: redirect_uri.to_owned(),
        issuer: issuer.to_owned(),
        source: ClientSource::Registered,
    })
}

/// A Client ID Metadata Document URL must be https with a path.
fn metadata_url_usable(u: &str) -> bool {
    Url::parse(u).is_ok_and(|u| u.scheme() == "https" && u.path() != "/" && !u.path().is_empty())
}

/// The client to sign in with at `auth_server`, registering one if need be. `known` are the
/// registrations kept so far (any issuer); a new one is answered with
/// [`ClientSource::Registered`] for the caller to keep.
pub async fn obtain(
    fetcher: &Fetcher,
    auth_server: &AuthServerMetadata,
    configured: Option<&ConfiguredClient>,
    known: &[ClientRecord],
    redirect_uri: &str,
) -> Result<ClientRecord, OAuthError> {
    let issuer = auth_server.issuer.as_str();
    let supported = auth_server.token_endpoint_auth_methods_supported.as_deref();
    if let Some(c) = configured {
        let for_this_issuer = c.issuer.as_deref().is_none_or(|i| i == issuer);
        if let (Some(id), true) = (c.client_id.as_deref(), for_this_issuer) {
            return Ok(ClientRecord {
                client_id: id.to_owned(),
                client_secret: c.client_secret.clone(),
                auth_method: choose_auth_method(supported, c.client_secret.is_some()),
                redirect_uri: redirect_uri.to_owned(),
                issuer: issuer.to_owned(),
                source: ClientSource::Configured,
            });
        }
        if let Some(url) = c.metadata_url.as_deref() {
            if auth_server.client_id_metadata_document_supported && metadata_url_usable(url) {
                return Ok(ClientRecord {
                    client_id: url.to_owned(),
                    client_secret: None,
                    auth_method: AuthMethod::None,
                    redirect_uri: redirect_uri.to_owned(),
                    issuer: issuer.to_owned(),
                    source: ClientSource::MetadataDocument,
                });
            }
        }
    }
    if let Some(c) = known
        .iter()
        .find(|c| c.source == ClientSource::Registered && c.reusable_for(issuer, redirect_uri))
    {
        return Ok(c.clone());
    }
    let Some(endpoint) = auth_server.registration_endpoint.as_deref() else {
        return Err(OAuthError::NoClient {
            issuer: issuer.to_owned(),
        });
    };
    let url = Url::parse(endpoint).map_err(|e| OAuthError::Registration {
        url: shown_str(endpoint),
        reason: format!("not a URL ({e})"),
    })?;
    let method = registration_method(supported);
    let reply = fetcher
        .post_json(&url, &registration_request(redirect_uri, method))
        .await?;
    if !reply.ok() {
        let doc = reply.json().unwrap_or(Value::Null);
        let what = [doc.get("error"), doc.get("error_description")]
            .iter()
            .flatten()
            .filter_map(|v| v.as_str())
            .collect::<Vec<_>>()
            .join(": ");
        return Err(OAuthError::Registration {
            url: reply.shown.clone(),
            reason: format!("HTTP {} {}", reply.status, server_text(&what, &[])),
        });
    }
    let client = parse_registration(endpoint, &reply.json()?, method, issuer, redirect_uri)?;
    tracing::info!(issuer, "registered an OAuth client");
    Ok(client)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(s: &[&str]) -> Vec<String> {
        s.iter().map(|x| x.to_string()).collect()
    }

    #[test]
    fn the_token_endpoint_method_follows_what_the_server_supports() {
        assert_eq!(choose_auth_method(None, false), AuthMethod::None);
        assert_eq!(
            choose_auth_method(None, true),
            AuthMethod::ClientSecretBasic
        );
        let post = v(&["client_secret_post"]);
        assert_eq!(
            choose_auth_method(Some(&post), true),
            AuthMethod::ClientSecretPost
        );
        let both = v(&["none", "client_secret_post", "client_secret_basic"]);
        assert_eq!(
            choose_auth_method(Some(&both), true),
            AuthMethod::ClientSecretBasic
        );
        assert_eq!(registration_method(Some(&both)), AuthMethod::None);
        assert_eq!(
            registration_method(Some(&post)),
            AuthMethod::ClientSecretPost
        );
        assert_eq!(registration_method(None), AuthMethod::None);
    }

    #[test]
    fn a_registration_answer_decides_the_method_and_a_missing_secret_means_none() {
        let c = parse_registration(
            "https://as/register",
            &json!({"client_id": "c1", "client_secret": "s1", "token_endpoint_auth_method": "client_secret_post"}),
            AuthMethod::None,
            "https://as",
            "http://127.0.0.1:33418/callback",
        )
        .unwrap();
        assert_eq!(c.auth_method, AuthMethod::ClientSecretPost);
        assert_eq!(c.source, ClientSource::Registered);
        let c = parse_registration(
            "https://as/register",
            &json!({"client_id": "c1", "client_secret": "s1"}),
            AuthMethod::None,
            "https://as",
            "r",
        )
        .unwrap();
        assert_eq!(c.auth_method, AuthMethod::None);
        let c = parse_registration(
            "https://as/register",
            &json!({"client_id": "c1"}),
            AuthMethod::ClientSecretBasic,
            "https://as",
            "r",
        )
        .unwrap();
        assert_eq!(c.auth_method, AuthMethod::None);
        assert!(parse_registration(
            "https://as/register",
            &json!({}),
            AuthMethod::None,
            "i",
            "r"
        )
        .is_err());
    }

    #[test]
    fn the_registration_request_is_a_native_public_client() {
        let r = registration_request("http://127.0.0.1:33418/callback", AuthMethod::None);
        assert_eq!(r["application_type"], "native");
        assert_eq!(r["token_endpoint_auth_method"], "none");
        assert_eq!(
            r["grant_types"],
            json!(["authorization_code", "refresh_token"])
        );
        assert_eq!(
            r["redirect_uris"],
            json!(["http://127.0.0.1:33418/callback"])
        );
    }

    #[test]
    fn the_client_authenticates_as_its_method_says() {
        let mut c = ClientRecord {
            client_id: "id".into(),
            client_secret: Some(Sensitive::new("client-secret-value")),
            auth_method: AuthMethod::ClientSecretBasic,
            redirect_uri: "r".into(),
            issuer: "i".into(),
            source: ClientSource::Configured,
        };
        let mut form = Vec::new();
        assert!(c.authenticate(&mut form).is_some());
        assert_eq!(form, vec![("client_id", "id".to_owned())]);
        c.auth_method = AuthMethod::ClientSecretPost;
        let mut form = Vec::new();
        assert!(c.authenticate(&mut form).is_none());
        assert_eq!(form.len(), 2);
        c.auth_method = AuthMethod::None;
        let mut form = Vec::new();
        assert!(c.authenticate(&mut form).is_none());
        assert_eq!(form, vec![("client_id", "id".to_owned())]);
        assert!(!format!("{c:?}").contains("client-secret-value"));
        assert!(c.reusable_for("i", "r"));
        assert!(!c.reusable_for("other", "r"));
        assert!(!c.reusable_for("i", "http://127.0.0.1:1/callback"));
    }

    #[test]
    fn metadata_document_urls_are_https_with_a_path() {
        assert!(metadata_url_usable("https://example.com/client.json"));
        assert!(!metadata_url_usable("https://example.com/"));
        assert!(!metadata_url_usable("http://example.com/client.json"));
    }
}
