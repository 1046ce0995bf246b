//! Discovery: from a server URL (and the challenge of its 401) to the authorization server to
//! sign in with, checked.
//!
//! - Protected Resource Metadata (RFC 9728): the challenge's `resource_metadata` (https unless
//!   the MCP server is plain http), else the
//!   well-known URI under the endpoint's path (`/.well-known/oauth-protected-resource/mcp` for
//!   `/mcp`), then at the root. Its `resource` must be the server URL or a prefix of it (same
//!   scheme, host and port; its path a prefix of the server's at a segment boundary); it is
//!   sent as the `resource` parameter exactly as published. Its first `authorization_servers`
//!   entry is the issuer.
//! - Authorization server metadata: RFC 8414 then OpenID Connect discovery, in the spec's order
//!   for an issuer with a path (`/.well-known/oauth-authorization-server/<path>`,
//!   `/.well-known/openid-configuration/<path>`, `<path>/.well-known/openid-configuration`) and
//!   without one (`/.well-known/oauth-authorization-server`, `/.well-known/openid-configuration`).
//!   A document whose `issuer` is not the issuer used to build its URL (compared as strings)
//!   is not used. `S256` must be in `code_challenge_methods_supported`. The issuer and every
//!   endpoint must be https, unless the MCP server itself is plain http.
//! - The 2025-03-26 fallbacks, for a server with no Protected Resource Metadata at all: the
//!   authorization server's metadata at the root of the MCP server
//!   (`/.well-known/oauth-authorization-server`; its URL is not built from an issuer, so its
//!   `issuer` is taken as it says, and kept for the `iss` check), and when that is not found
//!   (404), the default endpoints `/authorize`, `/token` and `/register` there.
//!
//! Owns: the candidate URLs and their order, the checks on both documents, the fallbacks.
//! Must not touch: scopes, clients, tokens.

use super::challenge::Challenge;
use super::fetch::{shown, shown_str, Fetcher};
use super::OAuthError;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use url::Url;

const PRM_WELL_KNOWN: &str = "/.well-known/oauth-protected-resource";
const OAUTH_WELL_KNOWN: &str = "/.well-known/oauth-authorization-server";
const OIDC_WELL_KNOWN: &str = "/.well-known/openid-configuration";

/// Protected Resource Metadata, read and checked.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResourceMetadata {
    /// Where it was read.
    pub url: String,
    /// The resource identifier, exactly as published.
    pub resource: String,
    pub authorization_servers: Vec<String>,
    pub scopes_supported: Option<Vec<String>>,
}

/// An authorization server's metadata, read and checked (or the 2025-03-26 defaults).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuthServerMetadata {
    pub issuer: String,
    pub authorization_endpoint: String,
    pub token_endpoint: String,
    pub registration_endpoint: Option<String>,
    pub scopes_supported: Option<Vec<String>>,
    pub code_challenge_methods_supported: Vec<String>,
    /// `None`: not listed (RFC 8414 then means `client_secret_basic`).
    pub token_endpoint_auth_methods_supported: Option<Vec<String>>,
    /// `authorization_response_iss_parameter_supported` (RFC 9207): an `iss` is promised.
    pub iss_parameter_supported: bool,
    pub client_id_metadata_document_supported: bool,
    /// Where it was read; `None` for the 2025-03-26 default endpoints.
    pub metadata_url: Option<String>,
    /// `grant_types_supported` (`None`: not listed).
    #[serde(default)]
    pub grant_types_supported: Option<Vec<String>>,
    /// `dpop_signing_alg_values_supported` (RFC 9449 §5.1): listed, the server takes DPoP.
    #[serde(default)]
    pub dpop_signing_alg_values_supported: Option<Vec<String>>,
}

impl AuthServerMetadata {
    /// Whether DPoP-bound tokens are asked for: the server lists ES256, the algorithm of
    /// albedo's DPoP keys, in `dpop_signing_alg_values_supported`.
    pub fn takes_dpop(&self) -> bool {
        self.dpop_signing_alg_values_supported
            .as_ref()
            .is_some_and(|a| a.iter().any(|a| a == "ES256"))
    }

    /// A fresh DPoP key when the server takes DPoP (see [`takes_dpop`](Self::takes_dpop)).
    pub fn dpop_key(&self) -> Result<Option<super::jws::DpopKey>, OAuthError> {
        if !self.takes_dpop() {
            return Ok(None);
        }
        super::jws::DpopKey::generate()
            .map(Some)
            .map_err(|e| OAuthError::Key(e.to_string()))
    }

    /// Whether the server lists `grant` in `grant_types_supported`.
    pub fn lists_grant(&self, grant: &str) -> bool {
        self.grant_types_supported
            .as_ref()
            .is_some_and(|g| g.iter().any(|g| g == grant))
    }
}

/// What a sign-in needs to know about a server.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Discovery {
    /// The MCP server URL, as configured.
    pub server_url: String,
    /// The RFC 8707 `resource` sent on authorize, token and refresh requests: the
    /// metadata's `resource` as published, or the server URL for an old server.
    pub resource: String,
    /// `None` for a 2025-03-26 server (no Protected Resource Metadata).
    pub resource_metadata: Option<ResourceMetadata>,
    pub auth_server: AuthServerMetadata,
}

impl Discovery {
    /// A 2025-03-26 server, found through the fallbacks.
    pub fn legacy(&self) -> bool {
        self.resource_metadata.is_none()
    }
}

/// The server URL, checked: http or https, no fragment, no userinfo.
pub fn parse_server_url(server_url: &str) -> Result<Url, OAuthError> {
    let bad = |why: &str| OAuthError::BadServerUrl(shown_str(server_url), why.to_owned());
    let u = Url::parse(server_url).map_err(|e| bad(&e.to_string()))?;
    if u.scheme() != "http" && u.scheme() != "https" {
        return Err(bad("not http or https"));
    }
    if u.fragment().is_some() || !u.username().is_empty() || u.password().is_some() {
        return Err(bad("it carries a fragment or userinfo"));
    }
    if u.host_str().is_none() {
        return Err(bad("no host"));
    }
    Ok(u)
}

fn origin(u: &Url) -> String {
    u.origin().ascii_serialization()
}

/// Where to look for the Protected Resource Metadata, in order: the challenge's
/// `resource_metadata`, the well-known URI under the endpoint's path, the one at the root.
pub fn resource_metadata_urls(server: &Url, challenge: Option<&Challenge>) -> Vec<Url> {
    let mut out = Vec::new();
    if let Some(u) = challenge
        .and_then(|c| c.resource_metadata.as_deref())
        .and_then(|s| server.join(s).ok())
    {
        // Plain http only for a plain-http server (as for the authorization server).
        if u.scheme() == "https" || (u.scheme() == "http" && server.scheme() == "http") {
            out.push(u);
        }
    }
    let path = server.path().trim_end_matches('/');
    let base = origin(server);
    let mut push = |s: String| {
        if let Ok(u) = Url::parse(&s) {
            if !out.contains(&u) {
                out.push(u);
            }
        }
    };
    if !path.is_empty() {
        push(format!("{base}{PRM_WELL_KNOWN}{path}"));
    }
    push(format!("{base}{PRM_WELL_KNOWN}"));
    out
}

/// Where to look for an issuer's metadata, in the spec's order (RFC 8414, then OpenID
/// Connect discovery; for an issuer with a path, both with the path inserted first).
pub fn auth_server_metadata_urls(issuer: &str) -> Result<Vec<Url>, OAuthError> {
    let u = Url::parse(issuer).map_err(|e| OAuthError::BadDocument {
        url: shown_str(issuer),
        reason: format!("the issuer is not a URL ({e})"),
    })?;
    if u.query().is_some() || u.fragment().is_some() {
        return Err(OAuthError::BadDocument {
            url: shown(&u),
            reason: "an issuer has no query or fragment (RFC 8414)".into(),
        });
    }
    let base = origin(&u);
    let path = u.path().trim_end_matches('/');
    let list = if path.is_empty() {
        vec![
            format!("{base}{OAUTH_WELL_KNOWN}"),
            format!("{base}{OIDC_WELL_KNOWN}"),
        ]
    } else {
        vec![
            format!("{base}{OAUTH_WELL_KNOWN}{path}"),
            format!("{base}{OIDC_WELL_KNOWN}{path}"),
            format!("{base}{path}{OIDC_WELL_KNOWN}"),
        ]
    };
    Ok(list.iter().filter_map(|s| Url::parse(s).ok()).collect())
}

/// The metadata's `resource` must be the server URL or a prefix of it.
pub fn check_resource(resource: &str, server: &Url) -> Result<(), OAuthError> {
    let mismatch = || OAuthError::ResourceMismatch {
        resource: shown_str(resource),
        server: shown(server),
    };
    let r = Url::parse(resource).map_err(|_| mismatch())?;
    if r.fragment().is_some() || (r.query().is_some() && r.query() != server.query()) {
        return Err(mismatch());
    }
    if r.scheme() != server.scheme()
        || r.host_str() != server.host_str()
        || r.port_or_known_default() != server.port_or_known_default()
    {
        return Err(mismatch());
    }
    let rp = r.path().trim_end_matches('/');
    let sp = server.path().trim_end_matches('/');
    if rp.is_empty() || sp == rp || sp.starts_with(&format!("{rp}/")) {
        Ok(())
    } else {
        Err(mismatch())
    }
}

fn strings(v: Option<&Value>) -> Option<Vec<String>> {
    v.and_then(Value::as_array).map(|a| {
        a.iter()
            .filter_map(Value::as_str)
            .map(str::to_owned)
            .collect()
    })
}

/// A Protected Resource Metadata document read at `url`.
pub fn parse_resource_metadata(url: &Url, doc: &Value) -> Result<ResourceMetadata, OAuthError> {
    let bad = |reason: &str| OAuthError::BadDocument {
        url: shown(url),
        reason: reason.to_owned(),
    };
    let resource = doc
        .get("resource")
        .and_then(Value::as_str)
        .ok_or_else(|| bad("the protected resource metadata has no resource"))?;
    let servers = strings(doc.get("authorization_servers")).unwrap_or_default();
    if servers.is_empty() {
        return Err(OAuthError::NoAuthorizationServer { url: shown(url) });
    }
    Ok(ResourceMetadata {
        url: url.to_string(),
        resource: resource.to_owned(),
        authorization_servers: servers,
        scopes_supported: strings(doc.get("scopes_supported")),
    })
}

/// An endpoint must be https when the MCP server is.
fn check_https(which: &str, endpoint: &str, server: &Url) -> Result<(), OAuthError> {
    if server.scheme() != "https" {
        return Ok(());
    }
    match Url::parse(endpoint) {
        Ok(u) if u.scheme() == "https" => Ok(()),
        _ => Err(OAuthError::InsecureEndpoint {
            which: which.to_owned(),
            url: shown_str(endpoint),
        }),
    }
}

/// An authorization server metadata document read at `url` for `expected_issuer`, checked:
/// the issuer matches (as a string), S256 is supported, the endpoints are URLs (https when the
/// MCP `server` is). `expected_issuer` is `None` for the 2025-03-26 fallback, whose URL was
/// not built from an issuer (the MCP server's origin serves it): its `issuer` is taken as is
/// (the stable runner's mock names `<origin>/oauth` there), and recorded for the `iss` check.
pub fn parse_auth_server_metadata(
    url: &Url,
    doc: &Value,
    expected_issuer: Option<&str>,
    server: &Url,
) -> Result<AuthServerMetadata, OAuthError> {
    let bad = |reason: String| OAuthError::BadDocument {
        url: shown(url),
        reason,
    };
    let issuer = doc
        .get("issuer")
        .and_then(Value::as_str)
        .ok_or_else(|| bad("the authorization server metadata has no issuer".into()))?;
    if let Some(expected) = expected_issuer.filter(|e| *e != issuer) {
        return Err(OAuthError::IssuerMismatch {
            url: shown(url),
            expected: expected.to_owned(),
            found: super::server_text(issuer, &[]),
        });
    }
    let endpoint = |name: &str, required: bool| -> Result<Option<String>, OAuthError> {
        match doc.get(name).and_then(Value::as_str) {
            Some(s) => {
                let u = Url::parse(s).map_err(|e| bad(format!("its {name} is not a URL ({e})")))?;
                if u.scheme() != "https" && u.scheme() != "http" {
                    return Err(bad(format!("its {name} is not http or https")));
                }
                Ok(Some(s.to_owned()))
            }
            None if required => Err(bad(format!("it has no {name}"))),
            None => Ok(None),
        }
    };
    // RFC 8414 §2: `authorization_endpoint` is required unless no grant type the server
    // supports uses it; `grant_types_supported` defaults to authorization_code and implicit.
    // A server that lists only grants without a browser (client credentials, JWT bearer)
    // needs neither it nor PKCE; a sign-in with it is refused (`flow::begin`).
    let grants = strings(doc.get("grant_types_supported"));
    let code_flow = grants.as_ref().is_none_or(|g| {
        g.iter()
            .any(|g| g == "authorization_code" || g == "implicit")
    });
    let authorization_endpoint = endpoint("authorization_endpoint", code_flow)?.unwrap_or_default();
    let token_endpoint = endpoint("token_endpoint", true)?.unwrap_or_default();
    let registration_endpoint = endpoint("registration_endpoint", false)?;
    let methods = strings(doc.get("code_challenge_methods_supported")).unwrap_or_default();
    if code_flow && !methods.iter().any(|m| m == "S256") {
        return Err(OAuthError::NoS256 {
            issuer: issuer.to_owned(),
        });
    }
    check_https("issuer", issuer, server)?;
    if !authorization_endpoint.is_empty() {
        check_https("authorization_endpoint", &authorization_endpoint, server)?;
    }
    check_https("token_endpoint", &token_endpoint, server)?;
    if let Some(r) = &registration_endpoint {
        check_https("registration_endpoint", r, server)?;
    }
    Ok(AuthServerMetadata {
        issuer: issuer.to_owned(),
        authorization_endpoint,
        token_endpoint,
        registration_endpoint,
        scopes_supported: strings(doc.get("scopes_supported")),
        code_challenge_methods_supported: methods,
        token_endpoint_auth_methods_supported: strings(
            doc.get("token_endpoint_auth_methods_supported"),
        ),
        iss_parameter_supported: doc
            .get("authorization_response_iss_parameter_supported")
            .and_then(Value::as_bool)
            .unwrap_or(false),
        client_id_metadata_document_supported: doc
            .get("client_id_metadata_document_supported")
            .and_then(Value::as_bool)
            .unwrap_or(false),
        metadata_url: Some(url.to_string()),
        grant_types_supported: strings(doc.get("grant_types_supported")),
        dpop_signing_alg_values_supported: strings(doc.get("dpop_signing_alg_values_supported")),
    })
}

/// The 2025-03-26 default endpoints at the MCP server's origin (no metadata anywhere).
pub fn legacy_endpoints(server: &Url) -> AuthServerMetadata {
    let base = origin(server);
    AuthServerMetadata {
        issuer: base.clone(),
        authorization_endpoint: format!("{base}/authorize"),
        token_endpoint: format!("{base}/token"),
        registration_endpoint: Some(format!("{base}/register")),
        scopes_supported: None,
        // 2025-03-26 required PKCE S256 of every client; there is no metadata to say more.
        code_challenge_methods_supported: vec!["S256".into()],
        token_endpoint_auth_methods_supported: None,
        iss_parameter_supported: false,
        client_id_metadata_document_supported: false,
        metadata_url: None,
        grant_types_supported: None,
        dpop_signing_alg_values_supported: None,
    }
}

/// The Protected Resource Metadata, from the first candidate that has a usable one.
async fn fetch_resource_metadata(
    fetcher: &Fetcher,
    server: &Url,
    challenge: Option<&Challenge>,
) -> Result<Option<ResourceMetadata>, OAuthError> {
    for url in resource_metadata_urls(server, challenge) {
        let reply = match fetcher.get(&url).await {
            Ok(r) => r,
            Err(e) => {
                tracing::debug!(url = %shown(&url), error = %e, "no protected resource metadata");
                continue;
            }
        };
        if !reply.ok() {
            tracing::debug!(url = %shown(&url), status = reply.status, "no protected resource metadata");
            continue;
        }
        let prm = parse_resource_metadata(&url, &reply.json()?)?;
        check_resource(&prm.resource, server)?;
        return Ok(Some(prm));
    }
    Ok(None)
}

/// The metadata of `issuer`, from the first candidate whose document is for that issuer.
async fn fetch_auth_server_metadata(
    fetcher: &Fetcher,
    issuer: &str,
    server: &Url,
) -> Result<AuthServerMetadata, OAuthError> {
    let urls = auth_server_metadata_urls(issuer)?;
    let mut refused: Option<OAuthError> = None;
    for url in &urls {
        let reply = match fetcher.get(url).await {
            Ok(r) => r,
            Err(e) => {
                tracing::debug!(url = %shown(url), error = %e, "no authorization server metadata");
                continue;
            }
        };
        if !reply.ok() {
            continue;
        }
        match parse_auth_server_metadata(url, &reply.json()?, Some(issuer), server) {
            Ok(m) => return Ok(m),
            // Not this issuer's document: not used; the next candidate may be.
            Err(e @ OAuthError::IssuerMismatch { .. }) => {
                tracing::warn!(error = %e, "authorization server metadata not used");
                refused = Some(e);
            }
            Err(e) => return Err(e),
        }
    }
    Err(refused.unwrap_or_else(|| OAuthError::NoAuthServerMetadata {
        issuer: shown_str(issuer),
        tried: urls.iter().map(shown).collect::<Vec<_>>().join(", "),
    }))
}

/// Discover how to sign in to `server_url`, given the challenge of its 401 or 403 if any.
pub async fn discover(
    fetcher: &Fetcher,
    server_url: &str,
    challenge: Option<&Challenge>,
) -> Result<Discovery, OAuthError> {
    let server = parse_server_url(server_url)?;
    if let Some(prm) = fetch_resource_metadata(fetcher, &server, challenge).await? {
        let issuer = prm.authorization_servers[0].clone();
        let auth_server = fetch_auth_server_metadata(fetcher, &issuer, &server).await?;
        return Ok(Discovery {
            server_url: server_url.to_owned(),
            resource: prm.resource.clone(),
            resource_metadata: Some(prm),
            auth_server,
        });
    }
    // A 2025-03-26 server: the authorization server is the MCP server's origin.
    let base = origin(&server);
    let url = Url::parse(&format!("{base}{OAUTH_WELL_KNOWN}")).map_err(|e| {
        OAuthError::BadServerUrl(shown(&server), format!("no metadata URL for it ({e})"))
    })?;
    let reply = fetcher.get(&url).await?;
    let auth_server = if reply.ok() {
        parse_auth_server_metadata(&url, &reply.json()?, None, &server)?
    } else if reply.status == 404 {
        legacy_endpoints(&server)
    } else {
        return Err(OAuthError::Http {
            url: reply.shown,
            status: reply.status,
        });
    };
    Ok(Discovery {
        server_url: server_url.to_owned(),
        resource: server_url.to_owned(),
        resource_metadata: None,
        auth_server,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn url(s: &str) -> Url {
        Url::parse(s).unwrap()
    }

    fn strs(v: &[Url]) -> Vec<String> {
        v.iter().map(Url::to_string).collect()
    }

    #[test]
    fn resource_metadata_order_challenge_then_path_then_root() {
        let server = url("https://example.com/public/mcp");
        let c = Challenge {
            resource_metadata: Some("https://example.com/custom/prm.json".into()),
            ..Challenge::default()
        };
        assert_eq!(
            strs(&resource_metadata_urls(&server, Some(&c))),
            vec![
                "https://example.com/custom/prm.json",
                "https://example.com/.well-known/oauth-protected-resource/public/mcp",
                "https://example.com/.well-known/oauth-protected-resource",
            ]
        );
        let plain = Challenge {
            resource_metadata: Some("http://example.com/prm".into()),
            ..Challenge::default()
        };
        assert_eq!(
            resource_metadata_urls(&server, Some(&plain)).len(),
            2,
            "an http metadata URL is not read for an https server"
        );
        assert_eq!(
            strs(&resource_metadata_urls(&url("https://example.com/"), None)),
            vec!["https://example.com/.well-known/oauth-protected-resource"]
        );
    }

    #[test]
    fn auth_server_metadata_order_with_and_without_a_path() {
        assert_eq!(
            strs(&auth_server_metadata_urls("https://auth.example.com/tenant1").unwrap()),
            vec![
                "https://auth.example.com/.well-known/oauth-authorization-server/tenant1",
                "https://auth.example.com/.well-known/openid-configuration/tenant1",
                "https://auth.example.com/tenant1/.well-known/openid-configuration",
            ]
        );
        assert_eq!(
            strs(&auth_server_metadata_urls("https://auth.example.com").unwrap()),
            vec![
                "https://auth.example.com/.well-known/oauth-authorization-server",
                "https://auth.example.com/.well-known/openid-configuration",
            ]
        );
        assert!(auth_server_metadata_urls("not a url").is_err());
    }

    #[test]
    fn the_resource_is_the_server_url_or_a_prefix_of_it() {
        let server = url("https://mcp.example.com/v1/mcp");
        for ok in [
            "https://mcp.example.com/v1/mcp",
            "https://mcp.example.com/v1/mcp/",
            "https://mcp.example.com/v1",
            "https://mcp.example.com",
            "https://MCP.example.com:443/v1",
        ] {
            assert_eq!(check_resource(ok, &server), Ok(()), "{ok}");
        }
        for bad in [
            "https://evil.example.com/v1/mcp",
            "http://mcp.example.com/v1/mcp",
            "https://mcp.example.com:8443/v1/mcp",
            "https://mcp.example.com/v1/mc",
            "https://mcp.example.com/v1/mcp/more",
            "https://mcp.example.com/v1/mcp#frag",
            "not a url",
        ] {
            assert!(
                matches!(
                    check_resource(bad, &server),
                    Err(OAuthError::ResourceMismatch { .. })
                ),
                "{bad}"
            );
        }
    }

    fn as_doc(issuer: &str) -> Value {
        json!({
            "issuer": issuer,
            "authorization_endpoint": format!("{issuer}/authorize"),
            "token_endpoint": format!("{issuer}/token"),
            "registration_endpoint": format!("{issuer}/register"),
            "code_challenge_methods_supported": ["S256"],
            "authorization_response_iss_parameter_supported": true,
            "scopes_supported": ["a", "offline_access"],
        })
    }

    #[test]
    fn auth_server_metadata_is_read() {
        let server = url("https://mcp.example.com/mcp");
        let at = url("https://as.example.com/.well-known/oauth-authorization-server");
        let m = parse_auth_server_metadata(
            &at,
            &as_doc("https://as.example.com"),
            Some("https://as.example.com"),
            &server,
        )
        .unwrap();
        assert_eq!(m.token_endpoint, "https://as.example.com/token");
        assert!(m.iss_parameter_supported);
        assert!(!m.client_id_metadata_document_supported);
        assert_eq!(m.token_endpoint_auth_methods_supported, None);
    }

    #[test]
    fn an_issuer_mismatch_is_refused_as_a_plain_string() {
        let server = url("https://mcp.example.com/mcp");
        let at = url("https://as.example.com/.well-known/oauth-authorization-server");
        for other in [
            "https://attacker.example.com",
            "https://as.example.com/",
            "https://AS.example.com",
        ] {
            let e = parse_auth_server_metadata(
                &at,
                &as_doc(other),
                Some("https://as.example.com"),
                &server,
            )
            .unwrap_err();
            assert!(
                matches!(e, OAuthError::IssuerMismatch { .. }),
                "{other}: {e}"
            );
        }
    }

    #[test]
    fn the_2025_03_26_fallback_takes_the_metadata_issuer_as_it_says() {
        let server = url("http://127.0.0.1:9000/mcp");
        let at = url("http://127.0.0.1:9000/.well-known/oauth-authorization-server");
        let m =
            parse_auth_server_metadata(&at, &as_doc("http://127.0.0.1:9000/oauth"), None, &server)
                .unwrap();
        assert_eq!(m.issuer, "http://127.0.0.1:9000/oauth");
    }

    #[test]
    fn no_s256_is_refused() {
        let server = url("https://mcp.example.com/mcp");
        let at = url("https://as.example.com/.well-known/oauth-authorization-server");
        for methods in [json!(["plain"]), json!([]), Value::Null] {
            let mut doc = as_doc("https://as.example.com");
            if methods.is_null() {
                doc.as_object_mut()
                    .unwrap()
                    .remove("code_challenge_methods_supported");
            } else {
                doc["code_challenge_methods_supported"] = methods;
            }
            let e = parse_auth_server_metadata(&at, &doc, Some("https://as.example.com"), &server)
                .unwrap_err();
            assert!(matches!(e, OAuthError::NoS256 { .. }), "{e}");
        }
        // A server that lists only grants without a browser needs neither PKCE nor an
        // authorization endpoint (RFC 8414 §2).
        let mut doc = as_doc("https://as.example.com");
        let m = doc.as_object_mut().unwrap();
        m.remove("code_challenge_methods_supported");
        m.remove("authorization_endpoint");
        doc["grant_types_supported"] = json!(["client_credentials"]);
        let md =
            parse_auth_server_metadata(&at, &doc, Some("https://as.example.com"), &server).unwrap();
        assert_eq!(md.authorization_endpoint, "");
        // Listing the code grant, it needs both again.
        doc["grant_types_supported"] = json!(["client_credentials", "authorization_code"]);
        assert!(
            parse_auth_server_metadata(&at, &doc, Some("https://as.example.com"), &server).is_err()
        );
    }

    #[test]
    fn http_endpoints_are_refused_for_an_https_server_only() {
        let at = url("https://as.example.com/.well-known/oauth-authorization-server");
        let mut doc = as_doc("https://as.example.com");
        doc["token_endpoint"] = json!("http://as.example.com/token");
        let e = parse_auth_server_metadata(
            &at,
            &doc,
            Some("https://as.example.com"),
            &url("https://mcp.example.com/mcp"),
        )
        .unwrap_err();
        assert!(
            matches!(&e, OAuthError::InsecureEndpoint { which, .. } if which == "token_endpoint"),
            "{e}"
        );
        // A plain-http MCP server (a LAN or tailnet address) may use plain-http endpoints.
        let http_doc = as_doc("http://as.lan");
        parse_auth_server_metadata(
            &at,
            &http_doc,
            Some("http://as.lan"),
            &url("http://mcp.lan/mcp"),
        )
        .unwrap();
        // An http issuer for an https server is refused too.
        let e = parse_auth_server_metadata(
            &at,
            &http_doc,
            Some("http://as.lan"),
            &url("https://mcp.example.com/mcp"),
        )
        .unwrap_err();
        assert!(matches!(e, OAuthError::InsecureEndpoint { .. }), "{e}");
    }

    #[test]
    fn resource_metadata_needs_a_resource_and_an_authorization_server() {
        let at = url("https://mcp.example.com/.well-known/oauth-protected-resource");
        let m = parse_resource_metadata(
            &at,
            &json!({"resource": "https://mcp.example.com", "authorization_servers": ["https://as"],
                    "scopes_supported": ["x"]}),
        )
        .unwrap();
        assert_eq!(m.resource, "https://mcp.example.com");
        assert_eq!(m.scopes_supported, Some(vec!["x".to_owned()]));
        assert!(parse_resource_metadata(&at, &json!({"authorization_servers": ["x"]})).is_err());
        assert!(matches!(
            parse_resource_metadata(&at, &json!({"resource": "x", "authorization_servers": []})),
            Err(OAuthError::NoAuthorizationServer { .. })
        ));
    }

    #[test]
    fn legacy_endpoints_sit_at_the_servers_origin() {
        let m = legacy_endpoints(&url("http://127.0.0.1:9000/some/mcp"));
        assert_eq!(m.issuer, "http://127.0.0.1:9000");
        assert_eq!(m.authorization_endpoint, "http://127.0.0.1:9000/authorize");
        assert_eq!(m.token_endpoint, "http://127.0.0.1:9000/token");
        assert_eq!(
            m.registration_endpoint.as_deref(),
            Some("http://127.0.0.1:9000/register")
        );
    }

    #[test]
    fn server_urls_are_checked() {
        assert!(parse_server_url("https://mcp.example.com/mcp").is_ok());
        assert!(parse_server_url("ftp://x/y").is_err());
        assert!(parse_server_url("https://u:p@x/y").is_err());
        assert!(parse_server_url("https://x/y#f").is_err());
    }
}
