//! The authorization code flow: the authorization URL (PKCE S256, `state`, the RFC 8707
//! `resource`, the scopes), the callback (its `state`, then the RFC 9207 `iss`, before
//! anything else in it is acted on), the code exchange and the refresh at the token endpoint
//! (both with `resource`).
//!
//! The `iss` check, as the 2026-07-28 spec's table says: an `iss` in the response must be the
//! issuer recorded at [`begin`], compared as a plain string after form decoding (no case
//! folding, default port, trailing slash or percent-encoding normalization); a response
//! without one is refused when the authorization server promised it
//! (`authorization_response_iss_parameter_supported`), and accepted otherwise. On a mismatch
//! the response's `error` is not acted on nor shown.
//!
//! Owns: [`PendingSignIn`], [`start`] (discovery to authorization URL in one call),
//! [`begin`], [`read_callback`], [`exchange`], [`complete`], [`refresh`]. Must not touch: the
//! loopback listener, the browser, storage.

use super::challenge::Challenge;
use super::client::{self, ClientRecord, ConfiguredClient};
use super::discovery::{self, Discovery};
use super::fetch::{same_endpoint, shown_str, Fetcher, Reply};
use super::grant::{post_token, refusal};
use super::jws::DpopKey;
use super::pkce::{self, Pkce};
use super::record::TokenRecord;
use super::{identity, now_secs, scope, server_text, OAuthError, Sensitive};
use serde_json::Value;
use url::Url;

/// A sign-in between its authorization URL and its callback: what the callback is checked
/// against and what the code exchange needs. Its `Debug` never shows the verifier.
#[derive(Debug, Clone)]
pub struct PendingSignIn {
    pub server_url: String,
    /// Where the user (or [`Fetcher::follow_authorization`]) goes to sign in.
    pub authorization_url: String,
    pub state: String,
    verifier: Sensitive,
    /// The issuer recorded for the `iss` check.
    pub issuer: String,
    /// The authorization server promised an `iss` in its responses.
    pub iss_required: bool,
    pub resource: String,
    pub redirect_uri: String,
    pub scopes: Vec<String>,
    pub token_endpoint: String,
    /// The client signing in; a newly registered one is for the caller to keep (per issuer
    /// and redirect URI).
    pub client: ClientRecord,
    /// The DPoP key the token is asked for bound to: made when the authorization server
    /// takes DPoP with ES256 ([`super::AuthServerMetadata::takes_dpop`]).
    pub dpop: Option<DpopKey>,
}

/// Everything [`start`] needs.
#[derive(Debug, Clone, Copy)]
pub struct SignInOptions<'a> {
    /// The MCP server URL, as configured.
    pub server_url: &'a str,
    /// The 401's (or 403's) `WWW-Authenticate` challenge.
    pub challenge: Option<&'a Challenge>,
    /// The user's `oauth_client` for this server.
    pub configured: Option<&'a ConfiguredClient>,
    /// Registrations kept so far; one for the same issuer and redirect URI is reused.
    pub known_clients: &'a [ClientRecord],
    /// A pending step-up (the record's `step_up`).
    pub step_up: &'a [String],
    pub redirect_uri: &'a str,
}

/// From a refusal to the authorization URL: discovery, scope selection, the client, and
/// [`begin`].
pub async fn start(
    fetcher: &Fetcher,
    opts: SignInOptions<'_>,
) -> Result<(Discovery, PendingSignIn), OAuthError> {
    let disc = discovery::discover(fetcher, opts.server_url, opts.challenge).await?;
    browser_sign_in_offered(&disc)?;
    let scopes = scope::select(
        Some(opts.step_up),
        opts.challenge.and_then(|c| c.scope.as_deref()),
        disc.resource_metadata
            .as_ref()
            .and_then(|m| m.scopes_supported.as_deref()),
        disc.auth_server.scopes_supported.as_deref(),
    );
    let client = client::obtain(
        fetcher,
        &disc.auth_server,
        opts.configured,
        opts.known_clients,
        opts.redirect_uri,
    )
    .await?;
    let pending = begin(&disc, client, scopes)?;
    Ok((disc, pending))
}

/// Whether the authorization server offers a sign-in in a browser at all (an authorization
/// endpoint with PKCE S256); one that allows only grants without a browser says so before a
/// client is looked for.
fn browser_sign_in_offered(disc: &Discovery) -> Result<(), OAuthError> {
    let offered = !disc.auth_server.authorization_endpoint.is_empty()
        && disc
            .auth_server
            .code_challenge_methods_supported
            .iter()
            .any(|m| m == "S256");
    if offered {
        return Ok(());
    }
    Err(OAuthError::BadDocument {
        url: disc.auth_server.issuer.clone(),
        reason:
            "this authorization server offers no sign-in in a browser (its grant_types_supported \
                 lists no authorization_code): configure a client_credentials or jwt_bearer \
                 grant in secrets.<server>.oauth_client"
                .into(),
    })
}

/// The authorization URL for a discovered server, a client and the scopes.
pub fn begin(
    disc: &Discovery,
    client: ClientRecord,
    scopes: Vec<String>,
) -> Result<PendingSignIn, OAuthError> {
    browser_sign_in_offered(disc)?;
    let endpoint = &disc.auth_server.authorization_endpoint;
    let mut url = Url::parse(endpoint).map_err(|e| OAuthError::BadDocument {
        url: shown_str(endpoint),
        reason: format!("the authorization endpoint is not a URL ({e})"),
    })?;
    let pkce = Pkce::new();
    let state = pkce::new_state();
    {
        let mut q = url.query_pairs_mut();
        q.append_pair("response_type", "code")
            .append_pair("client_id", &client.client_id)
            .append_pair("redirect_uri", &client.redirect_uri)
            .append_pair("code_challenge", &pkce.challenge)
            .append_pair("code_challenge_method", "S256")
            .append_pair("state", &state)
            .append_pair("resource", &disc.resource);
        if let Some(s) = scope::param(&scopes) {
            q.append_pair("scope", &s);
        }
    }
    Ok(PendingSignIn {
        server_url: disc.server_url.clone(),
        authorization_url: url.to_string(),
        state,
        verifier: pkce.verifier,
        issuer: disc.auth_server.issuer.clone(),
        iss_required: disc.auth_server.iss_parameter_supported,
        resource: disc.resource.clone(),
        redirect_uri: client.redirect_uri.clone(),
        scopes,
        token_endpoint: disc.auth_server.token_endpoint.clone(),
        client,
        dpop: disc.auth_server.dpop_key()?,
    })
}

/// The authorization code of a callback URL, after its checks: it is for the redirect URI,
/// its `state` is this sign-in's, its `iss` (RFC 9207) is the issuer, it carries no error.
pub fn read_callback(pending: &PendingSignIn, callback_url: &str) -> Result<Sensitive, OAuthError> {
    let u = Url::parse(callback_url.trim())
        .map_err(|e| OAuthError::BadCallback(format!("not a URL ({e})")))?;
    let redirect = Url::parse(&pending.redirect_uri)
        .map_err(|e| OAuthError::BadCallback(format!("the redirect URI is not a URL ({e})")))?;
    if !same_endpoint(&u, &redirect) {
        return Err(OAuthError::BadCallback(format!(
            "it is not for the redirect URI {}",
            shown_str(&pending.redirect_uri)
        )));
    }
    let (mut state, mut iss, mut code, mut error, mut description) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for (k, v) in u.query_pairs() {
        match k.as_ref() {
            "state" => state.push(v.into_owned()),
            "iss" => iss.push(v.into_owned()),
            "code" => code.push(v.into_owned()),
            "error" => error.push(v.into_owned()),
            "error_description" => description.push(v.into_owned()),
            _ => {}
        }
    }
    for (name, values) in [
        ("state", &state),
        ("iss", &iss),
        ("code", &code),
        ("error", &error),
    ] {
        if values.len() > 1 {
            return Err(OAuthError::BadCallback(format!(
                "{name} appears more than once"
            )));
        }
    }
    let code = code.into_iter().next().map(Sensitive::new);
    let secrets: Vec<&Sensitive> = code.iter().collect();
    if state.first() != Some(&pending.state) {
        return Err(OAuthError::StateMismatch);
    }
    match iss.first() {
        Some(i) if *i != pending.issuer => {
            return Err(OAuthError::IssMismatch {
                expected: pending.issuer.clone(),
                found: server_text(i, &secrets),
            })
        }
        None if pending.iss_required => {
            return Err(OAuthError::IssMissing {
                expected: pending.issuer.clone(),
            })
        }
        _ => {}
    }
    if let Some(e) = error.first() {
        return Err(OAuthError::Denied {
            error: server_text(e, &secrets),
            description: description.first().map(|d| server_text(d, &secrets)),
        });
    }
    code.filter(|c| !c.expose().is_empty())
        .ok_or(OAuthError::NoCode)
}

/// What a token endpoint granted.
pub(crate) struct Granted {
    pub(crate) access_token: Sensitive,
    pub(crate) refresh_token: Option<Sensitive>,
    pub(crate) expires_in: Option<u64>,
    pub(crate) scope: Option<String>,
    /// `Bearer`, or `DPoP` (RFC 9449 §5: the token is bound to the proof's key).
    pub(crate) token_type: String,
    /// An OpenID Connect ID token, only read for the account (`identity`).
    pub(crate) id_token: Option<Sensitive>,
}

pub(crate) fn read_granted(reply: &Reply) -> Result<Granted, OAuthError> {
    let doc: Value = serde_json::from_slice(&reply.body)
        .map_err(|e| OAuthError::BadTokenResponse(format!("not JSON ({e})")))?;
    let access_token = doc
        .get("access_token")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .map(Sensitive::new)
        .ok_or_else(|| OAuthError::BadTokenResponse("it has no access_token".into()))?;
    let refresh_token = doc
        .get("refresh_token")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .map(Sensitive::new);
    let token_type = doc
        .get("token_type")
        .and_then(Value::as_str)
        .unwrap_or("Bearer")
        .to_owned();
    let dpop = token_type.eq_ignore_ascii_case("dpop");
    if !token_type.eq_ignore_ascii_case("bearer") && !dpop {
        return Err(OAuthError::BadTokenResponse(format!(
            "token_type {:?} is not supported (only Bearer and DPoP)",
            server_text(&token_type, &[])
        )));
    }
    let expires_in = match doc.get("expires_in") {
        Some(Value::Number(n)) => n.as_u64(),
        Some(Value::String(s)) => s.parse().ok(),
        _ => None,
    };
    Ok(Granted {
        access_token,
        refresh_token,
        expires_in,
        scope: doc.get("scope").and_then(Value::as_str).map(str::to_owned),
        token_type: if dpop { "DPoP" } else { "Bearer" }.to_owned(),
        id_token: doc
            .get("id_token")
            .and_then(Value::as_str)
            .map(Sensitive::new),
    })
}

/// A token answer with `token_type` DPoP (any case, RFC 6749 §7.1) when no proof was sent
/// is not usable.
pub(super) fn check_binding(g: &Granted, dpop: Option<&DpopKey>) -> Result<(), OAuthError> {
    if g.token_type.eq_ignore_ascii_case("dpop") && dpop.is_none() {
        return Err(OAuthError::BadTokenResponse(
            "token_type DPoP, but no DPoP proof was sent".into(),
        ));
    }
    Ok(())
}

pub(super) fn token_url(endpoint: &str) -> Result<Url, OAuthError> {
    Url::parse(endpoint).map_err(|e| OAuthError::BadDocument {
        url: shown_str(endpoint),
        reason: format!("the token endpoint is not a URL ({e})"),
    })
}

/// Exchange an authorization code (from [`read_callback`]) for tokens.
pub async fn exchange(
    fetcher: &Fetcher,
    pending: &PendingSignIn,
    code: &Sensitive,
) -> Result<TokenRecord, OAuthError> {
    let url = token_url(&pending.token_endpoint)?;
    let mut form: Vec<(&'static str, String)> = vec![
        ("grant_type", "authorization_code".into()),
        ("code", code.expose().to_owned()),
        ("redirect_uri", pending.redirect_uri.clone()),
        ("code_verifier", pending.verifier.expose().to_owned()),
        ("resource", pending.resource.clone()),
    ];
    let basic = pending.client.authenticate(&mut form);
    let fields: Vec<(&str, &str)> = form.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let reply = post_token(fetcher, &url, &fields, basic, pending.dpop.as_ref()).await?;
    let mut secrets = vec![code, &pending.verifier];
    secrets.extend(pending.client.client_secret.as_ref());
    if !reply.ok() {
        let (error, description) = refusal(&reply, &secrets);
        return Err(OAuthError::TokenRefused {
            status: reply.status,
            error,
            description,
        });
    }
    let g = read_granted(&reply)?;
    check_binding(&g, pending.dpop.as_ref())?;
    let bound = g.token_type == "DPoP";
    let now = now_secs();
    let account = identity::account(
        g.id_token.as_ref().map(Sensitive::expose),
        g.access_token.expose(),
        &pending.issuer,
        &pending.client.client_id,
    );
    Ok(TokenRecord {
        server_url: pending.server_url.clone(),
        access_token: g.access_token,
        refresh_token: g.refresh_token,
        expires_at: g.expires_in.map(|s| now.saturating_add(s)),
        scope: g.scope.or_else(|| scope::param(&pending.scopes)),
        token_type: g.token_type,
        issuer: pending.issuer.clone(),
        resource: pending.resource.clone(),
        token_endpoint: pending.token_endpoint.clone(),
        client: pending.client.clone(),
        step_up: Vec::new(),
        dpop_key: pending.dpop.clone().filter(|_| bound),
        account,
    })
}

/// Check a callback URL and exchange its code: the end of a sign-in.
pub async fn complete(
    fetcher: &Fetcher,
    pending: &PendingSignIn,
    callback_url: &str,
) -> Result<TokenRecord, OAuthError> {
    let code = read_callback(pending, callback_url)?;
    exchange(fetcher, pending, &code).await
}

/// Refresh a record's access token (with its `resource`). A refusal by the authorization
/// server is [`OAuthError::RefreshRefused`]: sign in again, do not retry. The refresh token
/// is kept when the answer brings no new one.
pub async fn refresh(fetcher: &Fetcher, record: &TokenRecord) -> Result<TokenRecord, OAuthError> {
    let Some(rt) = record.refresh_token.as_ref() else {
        return Err(OAuthError::NoRefreshToken);
    };
    let url = token_url(&record.token_endpoint)?;
    let mut form: Vec<(&'static str, String)> = vec![
        ("grant_type", "refresh_token".into()),
        ("refresh_token", rt.expose().to_owned()),
        ("resource", record.resource.clone()),
    ];
    let basic = record.client.authenticate(&mut form);
    let fields: Vec<(&str, &str)> = form.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let reply = post_token(fetcher, &url, &fields, basic, record.dpop_key.as_ref()).await?;
    let mut secrets = vec![rt, &record.access_token];
    secrets.extend(record.client.client_secret.as_ref());
    if !reply.ok() {
        let (error, description) = refusal(&reply, &secrets);
        return Err(if reply.status == 400 || reply.status == 401 {
            OAuthError::RefreshRefused {
                status: reply.status,
                error,
                description,
            }
        } else {
            OAuthError::Http {
                url: reply.shown.clone(),
                status: reply.status,
            }
        });
    }
    let g = read_granted(&reply)?;
    check_binding(&g, record.dpop_key.as_ref())?;
    let now = now_secs();
    // A new ID token (or JWT access token) may name the account; else it stays as it was.
    let account = identity::account(
        g.id_token.as_ref().map(Sensitive::expose),
        g.access_token.expose(),
        &record.issuer,
        &record.client.client_id,
    )
    .or_else(|| record.account.clone());
    Ok(TokenRecord {
        access_token: g.access_token,
        refresh_token: g.refresh_token.or_else(|| record.refresh_token.clone()),
        expires_at: g.expires_in.map(|s| now.saturating_add(s)),
        scope: g.scope.or_else(|| record.scope.clone()),
        token_type: g.token_type,
        account,
        ..record.clone()
    })
}

#[cfg(test)]
mod tests {
    use super::super::client::{AuthMethod, ClientSource};
    use super::super::discovery::{legacy_endpoints, AuthServerMetadata};
    use super::*;

    const REDIRECT: &str = "http://127.0.0.1:33418/callback";
    const ISSUER: &str = "https://as.example.com";

    fn disc(iss_supported: bool) -> Discovery {
        let server = Url::parse("https://mcp.example.com/mcp").unwrap();
        let mut auth_server: AuthServerMetadata = legacy_endpoints(&server);
        auth_server.issuer = ISSUER.into();
        auth_server.authorization_endpoint = format!("{ISSUER}/authorize?tenant=x");
        auth_server.iss_parameter_supported = iss_supported;
        Discovery {
            server_url: server.to_string(),
            resource: "https://mcp.example.com".into(),
            resource_metadata: None,
            auth_server,
        }
    }

    fn client() -> ClientRecord {
        ClientRecord {
            client_id: "client-1".into(),
            client_secret: None,
            auth_method: AuthMethod::None,
            redirect_uri: REDIRECT.into(),
            issuer: ISSUER.into(),
            source: ClientSource::Registered,
        }
    }

    fn pending(iss_supported: bool) -> PendingSignIn {
        begin(&disc(iss_supported), client(), vec!["a".into(), "b".into()]).unwrap()
    }

    fn callback(p: &PendingSignIn, extra: &[(&str, &str)]) -> String {
        let mut u = Url::parse(REDIRECT).unwrap();
        {
            let mut q = u.query_pairs_mut();
            q.append_pair("code", "the-code-value-xyz");
            for (k, v) in extra {
                q.append_pair(k, &v.replace("$STATE", &p.state));
            }
        }
        u.to_string()
    }

    #[test]
    fn the_authorization_url_carries_pkce_state_resource_and_scope() {
        let p = pending(true);
        let u = Url::parse(&p.authorization_url).unwrap();
        let q: std::collections::HashMap<_, _> = u.query_pairs().into_owned().collect();
        assert_eq!(q["tenant"], "x");
        assert_eq!(q["response_type"], "code");
        assert_eq!(q["client_id"], "client-1");
        assert_eq!(q["redirect_uri"], REDIRECT);
        assert_eq!(q["code_challenge_method"], "S256");
        assert_eq!(q["code_challenge"], pkce::challenge_of(p.verifier.expose()));
        assert_eq!(q["state"], p.state);
        assert_eq!(q["resource"], "https://mcp.example.com");
        assert_eq!(q["scope"], "a b");
        assert!(!p.authorization_url.contains(p.verifier.expose()));
        assert!(!format!("{p:?}").contains(p.verifier.expose()));
        let none = begin(&disc(true), client(), Vec::new()).unwrap();
        assert!(!none.authorization_url.contains("scope="));
    }

    #[test]
    fn a_good_callback_gives_its_code() {
        let p = pending(true);
        let code =
            read_callback(&p, &callback(&p, &[("state", "$STATE"), ("iss", ISSUER)])).unwrap();
        assert_eq!(code.expose(), "the-code-value-xyz");
        // Not promised and absent: accepted.
        let p = pending(false);
        read_callback(&p, &callback(&p, &[("state", "$STATE")])).unwrap();
    }

    #[test]
    fn a_state_that_does_not_match_is_refused() {
        let p = pending(false);
        for extra in [
            vec![("state", "other")],
            vec![],
            vec![("state", "$STATE"), ("state", "$STATE")],
        ] {
            let e = read_callback(&p, &callback(&p, &extra)).unwrap_err();
            assert!(
                matches!(e, OAuthError::StateMismatch | OAuthError::BadCallback(_)),
                "{e}"
            );
        }
        let e = read_callback(&p, &callback(&p, &[("state", "nope")])).unwrap_err();
        assert_eq!(e, OAuthError::StateMismatch);
    }

    #[test]
    fn a_wrong_or_missing_iss_is_refused() {
        let p = pending(true);
        let e = read_callback(&p, &callback(&p, &[("state", "$STATE")])).unwrap_err();
        assert!(matches!(e, OAuthError::IssMissing { .. }), "{e}");
        for wrong in [
            "https://evil.example.com",
            "https://as.example.com/",
            "https://AS.example.com",
            "https://as.example.com:443",
        ] {
            let e = read_callback(&p, &callback(&p, &[("state", "$STATE"), ("iss", wrong)]))
                .unwrap_err();
            assert!(matches!(e, OAuthError::IssMismatch { .. }), "{wrong}: {e}");
        }
        // Not promised, but present and wrong: refused too.
        let p = pending(false);
        let e = read_callback(
            &p,
            &callback(
                &p,
                &[("state", "$STATE"), ("iss", "https://evil.example.com")],
            ),
        )
        .unwrap_err();
        assert!(matches!(e, OAuthError::IssMismatch { .. }), "{e}");
        // An error response with a wrong iss is refused as a mismatch, its error not shown.
        let e = read_callback(
            &p,
            &callback(
                &p,
                &[
                    ("state", "$STATE"),
                    ("iss", "https://evil"),
                    ("error", "access_denied"),
                ],
            ),
        )
        .unwrap_err();
        assert!(matches!(e, OAuthError::IssMismatch { .. }), "{e}");
        assert!(!e.to_string().contains("access_denied"));
    }

    fn reply(status: u16, body: &str) -> Reply {
        Reply {
            status,
            location: None,
            body: bytes::Bytes::from(body.to_owned()),
            shown: "https://as.example.com/token".into(),
            dpop_nonce: None,
        }
    }

    #[test]
    fn a_token_endpoint_refusal_never_echoes_a_secret() {
        let code = Sensitive::new("code-secret-value-77");
        let client_secret = Sensitive::new("client-secret-value-88");
        let r = reply(
            400,
            r#"{"error": "invalid_grant code-secret-value-77", "error_description": "client-secret-value-88 was\nwrong"}"#,
        );
        let (error, description) = refusal(&r, &[&code, &client_secret]);
        let e = OAuthError::TokenRefused {
            status: 400,
            error,
            description,
        };
        let shown = format!("{e} {e:?}");
        assert!(!shown.contains("code-secret-value-77"), "{shown}");
        assert!(!shown.contains("client-secret-value-88"), "{shown}");
        assert!(!shown.contains('\n'), "{shown}");
    }

    #[test]
    fn a_granted_token_is_read_and_registered_with_the_log_redaction() {
        let g = read_granted(&reply(
            200,
            r#"{"access_token": "granted-access-token-99", "token_type": "bearer", "expires_in": "3600", "refresh_token": "granted-refresh-token-98", "scope": "a"}"#,
        ))
        .unwrap();
        assert_eq!(g.expires_in, Some(3600));
        assert_eq!(g.token_type, "Bearer");
        for t in ["granted-access-token-99", "granted-refresh-token-98"] {
            let line = format!("a log line naming {t}");
            let logged = crate::protocol::text::redact_logged(line.as_bytes());
            assert!(!String::from_utf8_lossy(&logged).contains(t), "{t}");
        }
        let e = read_granted(&reply(200, r#"{"access_token": "x", "token_type": "MAC"}"#));
        assert!(matches!(e, Err(OAuthError::BadTokenResponse(_))));
        let g = read_granted(&reply(
            200,
            r#"{"access_token": "x", "token_type": "dpop"}"#,
        ))
        .unwrap();
        assert_eq!(g.token_type, "DPoP");
        assert!(check_binding(&g, None).is_err());
        let e = read_granted(&reply(200, r#"{"token_type": "Bearer"}"#));
        assert!(matches!(e, Err(OAuthError::BadTokenResponse(_))));
    }

    #[test]
    fn errors_and_foreign_callbacks_are_refused_without_the_code() {
        let p = pending(false);
        let e = read_callback(
            &p,
            &callback(
                &p,
                &[
                    ("state", "$STATE"),
                    ("error", "access_denied"),
                    ("error_description", "no\nthanks"),
                ],
            ),
        )
        .unwrap_err();
        assert!(matches!(e, OAuthError::Denied { .. }), "{e}");
        let e =
            read_callback(&p, "http://127.0.0.1:1/callback?code=the-code-value-xyz").unwrap_err();
        assert!(matches!(e, OAuthError::BadCallback(_)), "{e}");
        let no_code = format!("{REDIRECT}?state={}", p.state);
        assert_eq!(read_callback(&p, &no_code).unwrap_err(), OAuthError::NoCode);
        // No error message names the code or the verifier.
        for url in [
            callback(&p, &[("state", "x")]),
            callback(&p, &[("state", "$STATE"), ("iss", "the-code-value-xyz")]),
            callback(&p, &[("state", "$STATE"), ("error", "the-code-value-xyz")]),
            "http://127.0.0.1:1/callback?code=the-code-value-xyz".to_owned(),
            "not a url the-code-value-xyz".to_owned(),
        ] {
            if let Err(e) = read_callback(&p, &url) {
                let shown = format!("{e} {e:?}");
                assert!(!shown.contains("the-code-value-xyz"), "{shown}");
                assert!(!shown.contains(p.verifier.expose()), "{shown}");
            }
        }
    }

    /// A token endpoint that answers `replies` in turn (one connection each) and keeps what
    /// it was sent (head and body).
    async fn token_endpoint(
        replies: Vec<(u16, &'static str)>,
    ) -> (String, std::rc::Rc<std::cell::RefCell<Vec<String>>>) {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/token", l.local_addr().unwrap());
        let seen = std::rc::Rc::new(std::cell::RefCell::new(Vec::new()));
        let log = seen.clone();
        tokio::task::spawn_local(async move {
            for (status, body) in replies {
                let (mut sock, _) = l.accept().await.unwrap();
                let mut buf = Vec::new();
                loop {
                    let mut b = [0u8; 4096];
                    let n = sock.read(&mut b).await.unwrap();
                    buf.extend_from_slice(&b[..n]);
                    let text = String::from_utf8_lossy(&buf).to_string();
                    if let Some(i) = text.find("\r\n\r\n") {
                        let len = text[..i]
                            .lines()
                            .find_map(|l| {
                                l.to_ascii_lowercase()
                                    .strip_prefix("content-length:")
                                    .map(|v| v.trim().parse::<usize>().unwrap())
                            })
                            .unwrap_or(0);
                        if buf.len() >= i + 4 + len || n == 0 {
                            break;
                        }
                    }
                }
                log.borrow_mut()
                    .push(String::from_utf8_lossy(&buf).to_string());
                let head = format!(
                    "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                    body.len()
                );
                sock.write_all(head.as_bytes()).await.unwrap();
                sock.write_all(body.as_bytes()).await.unwrap();
                sock.shutdown().await.ok();
            }
        });
        (url, seen)
    }

    fn record_for(token_endpoint: &str) -> TokenRecord {
        TokenRecord {
            server_url: "https://mcp.example.com/mcp".into(),
            access_token: Sensitive::new("old-access-token-11"),
            refresh_token: Some(Sensitive::new("old-refresh-token-12")),
            expires_at: Some(1),
            scope: Some("a b".into()),
            token_type: "Bearer".into(),
            issuer: ISSUER.into(),
            resource: "https://mcp.example.com".into(),
            token_endpoint: token_endpoint.into(),
            client: ClientRecord {
                client_secret: Some(Sensitive::new("client-secret-13")),
                auth_method: AuthMethod::ClientSecretPost,
                ..client()
            },
            step_up: Vec::new(),
            dpop_key: None,
            account: None,
        }
    }

    fn fetcher() -> Fetcher {
        Fetcher::new(crate::transport::tls::client_config(&[]).unwrap())
    }

    #[actix_rt::test]
    async fn a_refresh_sends_the_resource_and_keeps_the_refresh_token_when_none_comes_back() {
        let (url, seen) = token_endpoint(vec![(
            200,
            r#"{"access_token": "new-access-token-14", "token_type": "Bearer", "expires_in": 60}"#,
        )])
        .await;
        let old = record_for(&url);
        let new = refresh(&fetcher(), &old).await.unwrap();
        assert_eq!(new.access_token.expose(), "new-access-token-14");
        assert_eq!(new.refresh_token, old.refresh_token);
        assert_eq!(new.scope.as_deref(), Some("a b"));
        assert!(new.expires_at.unwrap() >= now_secs() + 59);
        let sent = seen.borrow()[0].clone();
        assert!(sent.starts_with("POST /token "), "{sent}");
        let body = sent.split("\r\n\r\n").nth(1).unwrap();
        let form: std::collections::HashMap<String, String> =
            url::form_urlencoded::parse(body.as_bytes())
                .into_owned()
                .collect();
        assert_eq!(form["grant_type"], "refresh_token");
        assert_eq!(form["refresh_token"], "old-refresh-token-12");
        assert_eq!(form["resource"], "https://mcp.example.com");
        assert_eq!(form["client_id"], "client-1");
        assert_eq!(form["client_secret"], "client-secret-13");
    }

    #[actix_rt::test]
    async fn a_refused_refresh_means_signing_in_again_and_shows_no_secret() {
        let (url, _) = token_endpoint(vec![
            (400, r#"{"error": "invalid_grant", "error_description": "old-refresh-token-12 is revoked"}"#),
            (503, "{}"),
        ])
        .await;
        let old = record_for(&url);
        let e = refresh(&fetcher(), &old).await.unwrap_err();
        assert!(
            matches!(e, OAuthError::RefreshRefused { status: 400, .. }),
            "{e}"
        );
        assert!(e.needs_sign_in());
        let shown = format!("{e} {e:?}");
        assert!(!shown.contains("old-refresh-token-12"), "{shown}");
        // A server error is not a refusal: try again later.
        let e = refresh(&fetcher(), &old).await.unwrap_err();
        assert!(matches!(e, OAuthError::Http { status: 503, .. }), "{e}");
        assert!(!e.needs_sign_in());
        let mut none = old.clone();
        none.refresh_token = None;
        assert_eq!(
            refresh(&fetcher(), &none).await.unwrap_err(),
            OAuthError::NoRefreshToken
        );
    }
}
