//! The HTTP calls of a sign-in, with awc and the daemon's TLS configuration: metadata GETs
//! (a few redirects followed, never from https to http), form and JSON POSTs to the token
//! and registration endpoints (redirects not followed), and following an authorization URL
//! headless up to the redirect back to the redirect URI (read, never requested).
//!
//! Owns: [`Fetcher`], its bounds (every body at most [`MAX_BODY_BYTES`], every call under a
//! timeout, at most [`MAX_REDIRECTS`] redirects) and how URLs are shown in errors (no query:
//! an authorization URL's query is not for error messages). Must not touch: what the bodies
//! mean (the other files of `oauth`).
//!
//! awc's `Client` is not `Send`: a `Fetcher` lives on the arbiter that made it, and its
//! futures run there.

use super::{OAuthError, Sensitive, MAX_BODY_BYTES, MAX_REDIRECTS};
use awc::error::PayloadError;
use awc::http::header::{HeaderValue, ACCEPT, AUTHORIZATION, LOCATION};
use base64::Engine;
use bytes::Bytes;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;
use url::Url;

/// Connect (and, separately, the TLS handshake).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// One call, from sending to the last byte of the body.
const CALL_TIMEOUT: Duration = Duration::from_secs(30);

/// One answer: its status, `Location`, and body (at most [`MAX_BODY_BYTES`]).
#[derive(Debug)]
pub(crate) struct Reply {
    pub status: u16,
    pub location: Option<String>,
    pub body: Bytes,
    /// Where the answer came from (after redirects), as shown in errors.
    pub shown: String,
    /// Its `DPoP-Nonce` header (RFC 9449 §8), when it has a usable one.
    pub dpop_nonce: Option<String>,
}

impl Reply {
    pub fn ok(&self) -> bool {
        (200..300).contains(&self.status)
    }

    pub fn json(&self) -> Result<serde_json::Value, OAuthError> {
        serde_json::from_slice(&self.body).map_err(|e| OAuthError::BadDocument {
            url: self.shown.clone(),
            reason: format!("not JSON ({e})"),
        })
    }
}

/// How a URL is dialled: the identity, unless a caller rewrites it (the conformance client
/// dials `localhost` as 127.0.0.1).
type Dial = Rc<dyn Fn(&Url) -> Url>;

/// The HTTP client of a sign-in.
#[derive(Clone)]
pub struct Fetcher {
    client: awc::Client,
    dial: Option<Dial>,
}

impl std::fmt::Debug for Fetcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Fetcher").finish_non_exhaustive()
    }
}

/// A URL as shown in errors and logs: no userinfo, query or fragment.
pub(crate) fn shown(url: &Url) -> String {
    let mut u = url.clone();
    let _ = u.set_username("");
    let _ = u.set_password(None);
    u.set_query(None);
    u.set_fragment(None);
    u.to_string()
}

/// A URL string as shown in errors (see [`shown`]); an unparsable one is cut.
pub(crate) fn shown_str(url: &str) -> String {
    match Url::parse(url) {
        Ok(u) => shown(&u),
        Err(_) => super::server_text(url.split('?').next().unwrap_or(""), &[]),
    }
}

impl Fetcher {
    /// A client with the given TLS configuration (see `transport::tls`). Must be called on
    /// the arbiter that will use it.
    pub fn new(tls: Arc<rustls::ClientConfig>) -> Fetcher {
        let connector = awc::Connector::new()
            .rustls_0_23(tls)
            .timeout(CONNECT_TIMEOUT)
            .handshake_timeout(CONNECT_TIMEOUT);
        let client = awc::Client::builder()
            .connector(connector)
            .timeout(CALL_TIMEOUT)
            .disable_redirects()
            .finish();
        Fetcher { client, dial: None }
    }

    /// Dial every URL through `f` (the URL the server sees in checks stays the original).
    pub fn with_dial(mut self, f: impl Fn(&Url) -> Url + 'static) -> Fetcher {
        self.dial = Some(Rc::new(f));
        self
    }

    fn target(&self, url: &Url) -> String {
        match &self.dial {
            Some(f) => f(url).to_string(),
            None => url.to_string(),
        }
    }

    async fn finish(
        &self,
        url: &Url,
        sent: Result<awc::ClientResponse, awc::error::SendRequestError>,
    ) -> Result<Reply, OAuthError> {
        let shown = shown(url);
        let mut resp = sent.map_err(|e| OAuthError::Unreachable {
            url: shown.clone(),
            reason: super::server_text(&e.to_string(), &[]),
        })?;
        let status = resp.status().as_u16();
        let location = resp
            .headers()
            .get(LOCATION)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let dpop_nonce = resp
            .headers()
            .get("dpop-nonce")
            .and_then(|v| v.to_str().ok())
            .filter(|n| usable_nonce(n))
            .map(str::to_owned);
        let body = match tokio::time::timeout(CALL_TIMEOUT, resp.body().limit(MAX_BODY_BYTES)).await
        {
            Ok(Ok(b)) => b,
            Ok(Err(PayloadError::Overflow)) => {
                return Err(OAuthError::TooLarge {
                    url: shown,
                    limit: MAX_BODY_BYTES,
                })
            }
            Ok(Err(e)) => {
                return Err(OAuthError::Unreachable {
                    url: shown,
                    reason: format!("the answer could not be read: {e}"),
                })
            }
            Err(_) => {
                return Err(OAuthError::Unreachable {
                    url: shown,
                    reason: "the answer did not arrive in time".into(),
                })
            }
        };
        Ok(Reply {
            status,
            location,
            body,
            shown,
            dpop_nonce,
        })
    }

    /// One GET, no redirect followed.
    async fn get_once(&self, url: &Url) -> Result<Reply, OAuthError> {
        let sent = self
            .client
            .get(self.target(url))
            .insert_header((ACCEPT, "application/json"))
            .send()
            .await;
        self.finish(url, sent).await
    }

    /// A GET of a metadata document, following at most [`MAX_REDIRECTS`] redirects (never
    /// from https to http). Any final status is answered; the caller judges it.
    pub(crate) async fn get(&self, url: &Url) -> Result<Reply, OAuthError> {
        let mut at = url.clone();
        for _ in 0..=MAX_REDIRECTS {
            let reply = self.get_once(&at).await?;
            if !(300..400).contains(&reply.status) {
                return Ok(reply);
            }
            let Some(next) = reply.location.as_deref().and_then(|l| at.join(l).ok()) else {
                return Ok(reply);
            };
            if at.scheme() == "https" && next.scheme() != "https" {
                return Err(OAuthError::Redirect {
                    url: shown(url),
                    reason: format!("to {}, which is not https", shown(&next)),
                });
            }
            at = next;
        }
        Err(OAuthError::Redirect {
            url: shown(url),
            reason: format!("more than {MAX_REDIRECTS} times"),
        })
    }

    /// A form POST (token endpoint), with HTTP Basic client authentication when given.
    pub(crate) async fn post_form(
        &self,
        url: &Url,
        form: &[(&str, &str)],
        basic: Option<(&str, &Sensitive)>,
    ) -> Result<Reply, OAuthError> {
        self.post_form_with_proof(url, form, basic, None).await
    }

    /// A form POST with, besides, a DPoP proof in the `DPoP` header (RFC 9449 §5).
    pub(crate) async fn post_form_with_proof(
        &self,
        url: &Url,
        form: &[(&str, &str)],
        basic: Option<(&str, &Sensitive)>,
        proof: Option<&Sensitive>,
    ) -> Result<Reply, OAuthError> {
        let mut req = self
            .client
            .post(self.target(url))
            .insert_header((ACCEPT, "application/json"));
        if let Some((id, secret)) = basic {
            req = req.insert_header((AUTHORIZATION, basic_header(id, secret)));
        }
        if let Some(p) = proof {
            if let Ok(mut v) = HeaderValue::from_str(p.expose()) {
                v.set_sensitive(true);
                req = req.insert_header(("DPoP", v));
            }
        }
        let sent = req.send_form(&form).await;
        self.finish(url, sent).await
    }

    /// Ask an MCP server for its challenge: an unauthenticated `initialize` POST (what a
    /// client sends first), and the `WWW-Authenticate` of its 401 or 403. `Ok(None)`: it did
    /// not refuse (or refused without a challenge), so discovery goes by the well-known URLs.
    pub async fn challenge(
        &self,
        server_url: &Url,
    ) -> Result<Option<super::Challenge>, OAuthError> {
        let body = serde_json::json!({
            "jsonrpc": "2.0", "id": 0, "method": "initialize",
            "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                       "clientInfo": {"name": "albedo-mcp", "version": env!("CARGO_PKG_VERSION")}}
        });
        let sent = self
            .client
            .post(self.target(server_url))
            .insert_header((ACCEPT, "application/json, text/event-stream"))
            .send_json(&body)
            .await
            .map_err(|e| OAuthError::Unreachable {
                url: shown(server_url),
                reason: super::server_text(&e.to_string(), &[]),
            })?;
        let status = sent.status().as_u16();
        if status != 401 && status != 403 {
            return Ok(None);
        }
        Ok(sent
            .headers()
            .get(awc::http::header::WWW_AUTHENTICATE)
            .and_then(|v| v.to_str().ok())
            .and_then(super::Challenge::parse))
    }

    /// A JSON POST (registration endpoint).
    pub(crate) async fn post_json(
        &self,
        url: &Url,
        body: &serde_json::Value,
    ) -> Result<Reply, OAuthError> {
        let sent = self
            .client
            .post(self.target(url))
            .insert_header((ACCEPT, "application/json"))
            .send_json(body)
            .await;
        self.finish(url, sent).await
    }

    /// Follow an authorization URL without a browser, for an authorization server that
    /// approves at once (the conformance runner's mock, test servers): GET it and each
    /// redirect until one points at `redirect_uri`, and answer that URL (never requested).
    /// A page that waits for a user ends it with [`OAuthError::NotRedirected`].
    pub async fn follow_authorization(
        &self,
        authorization_url: &str,
        redirect_uri: &str,
    ) -> Result<String, OAuthError> {
        let redirect = Url::parse(redirect_uri)
            .map_err(|e| OAuthError::BadCallback(format!("the redirect URI is not a URL: {e}")))?;
        let mut at = Url::parse(authorization_url).map_err(|e| {
            OAuthError::NotRedirected(format!("the authorization URL is not a URL: {e}"))
        })?;
        for _ in 0..=MAX_REDIRECTS {
            let reply = self.get_once(&at).await?;
            if !(300..400).contains(&reply.status) {
                return Err(OAuthError::NotRedirected(format!(
                    "{} answered HTTP {} (a page that waits for a user?)",
                    reply.shown, reply.status
                )));
            }
            let next = reply
                .location
                .as_deref()
                .and_then(|l| at.join(l).ok())
                .ok_or_else(|| {
                    OAuthError::NotRedirected(format!(
                        "{} redirected with no usable Location",
                        reply.shown
                    ))
                })?;
            if same_endpoint(&next, &redirect) {
                return Ok(next.to_string());
            }
            at = next;
        }
        Err(OAuthError::NotRedirected(format!(
            "more than {MAX_REDIRECTS} redirects"
        )))
    }
}

/// Whether `u` is at the endpoint `base` (scheme, host, port, path), whatever its query.
pub(crate) fn same_endpoint(u: &Url, base: &Url) -> bool {
    u.scheme() == base.scheme()
        && u.host_str() == base.host_str()
        && u.port_or_known_default() == base.port_or_known_default()
        && u.path() == base.path()
}

/// The most bytes of a `DPoP-Nonce` kept.
pub const MAX_NONCE_BYTES: usize = 256;

/// A nonce fit to be sent back: at most `MAX_NONCE_BYTES` (256), visible ASCII (RFC 9449 §8.1's
/// `NQCHAR`: no `"`, no backslash).
pub fn usable_nonce(n: &str) -> bool {
    !n.is_empty()
        && n.len() <= MAX_NONCE_BYTES
        && n.bytes()
            .all(|b| (0x21..=0x7e).contains(&b) && b != b'"' && b != b'\\')
}

/// `Authorization: Basic` of RFC 6749 §2.3.1: both parts form-urlencoded first.
fn basic_header(id: &str, secret: &Sensitive) -> HeaderValue {
    let enc = |s: &str| url::form_urlencoded::byte_serialize(s.as_bytes()).collect::<String>();
    let raw = format!("{}:{}", enc(id), enc(secret.expose()));
    let b64 = base64::engine::general_purpose::STANDARD.encode(raw.as_bytes());
    let mut v = HeaderValue::from_str(&format!("Basic {b64}"))
        .unwrap_or_else(|_| HeaderValue::from_static("Basic"));
    v.set_sensitive(true);
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dpop_nonce_is_kept_only_within_its_bound() {
        assert!(usable_nonce(&"n".repeat(MAX_NONCE_BYTES)));
        assert!(!usable_nonce(&"n".repeat(MAX_NONCE_BYTES + 1)));
        assert!(!usable_nonce("a b") && !usable_nonce("") && !usable_nonce("a\"b"));
    }

    #[test]
    fn urls_are_shown_without_query_or_userinfo() {
        let u = Url::parse("https://u:p@as.example.com/authorize?code=abc&state=x#f").unwrap();
        assert_eq!(shown(&u), "https://as.example.com/authorize");
        assert_eq!(shown_str("nonsense?code=abc"), "nonsense");
    }

    #[test]
    fn basic_credentials_are_form_encoded_then_base64() {
        let v = basic_header("id:1", &Sensitive::new("s p"));
        let b64 = v.to_str().unwrap().strip_prefix("Basic ").unwrap();
        let raw = base64::engine::general_purpose::STANDARD
            .decode(b64)
            .unwrap();
        assert_eq!(String::from_utf8(raw).unwrap(), "id%3A1:s+p");
        assert!(v.is_sensitive());
    }

    #[test]
    fn the_redirect_endpoint_is_matched_without_its_query() {
        let base = Url::parse("http://127.0.0.1:33418/callback").unwrap();
        assert!(same_endpoint(
            &Url::parse("http://127.0.0.1:33418/callback?code=x&state=y").unwrap(),
            &base
        ));
        assert!(!same_endpoint(
            &Url::parse("http://127.0.0.1:33419/callback?code=x").unwrap(),
            &base
        ));
        assert!(!same_endpoint(
            &Url::parse("http://127.0.0.1:33418/other").unwrap(),
            &base
        ));
    }
}
