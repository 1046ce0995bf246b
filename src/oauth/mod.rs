//! Signing in to an HTTP MCP server with OAuth, as the MCP authorization spec describes
//! (2025-11-25 and 2026-07-28 `basic/authorization`, with the 2025-03-26 fallbacks for old
//! servers): the protocol and nothing else. The daemon's HTTP transport (sign-in API, token
//! storage, refresh before a request) and `albedo-mcp conformance-client` both drive it.
//!
//! What a caller does, in order:
//! 1. a request is refused with 401 (or 403 `insufficient_scope`): parse its
//!    `WWW-Authenticate` with [`Challenge::parse`];
//! 2. [`discovery::discover`] finds the Protected Resource Metadata and the authorization
//!    server's metadata, and checks them (the `resource` prefix rule, the `issuer` match,
//!    `S256`, https endpoints);
//! 3. [`scope::select`] picks the scopes (a pending step-up, else the challenge's, else the
//!    resource's `scopes_supported`, plus `offline_access` when the authorization server lists
//!    it);
//! 4. [`client::obtain`] finds the client (configured, a Client ID Metadata Document URL, a
//!    registration kept for this issuer and redirect, else Dynamic Client Registration);
//! 5. [`flow::begin`] builds the authorization URL (PKCE S256, `state`, `resource`) and keeps
//!    what the callback needs in a [`flow::PendingSignIn`];
//! 6. the user's browser (or, headless, [`Fetcher::follow_authorization`]) comes back with a
//!    callback URL: [`flow::complete`] checks it (`state`, RFC 9207 `iss`) and exchanges the
//!    code for a [`TokenRecord`];
//! 7. every request carries [`TokenRecord::authorization`]; [`flow::refresh`] renews a token
//!    near its expiry or refused with 401 ([`OAuthError::RefreshRefused`] means the user must
//!    sign in again).
//!
//! Without a browser (the authorization extensions), a caller runs discovery and then
//! [`grant::request_token`]: client credentials, or the JWT bearer grant with a workload token
//! or the identity assertion [`grant::exchange_identity`] got; a refusal is
//! [`OAuthError::GrantRefused`], never retried. Where the authorization server takes DPoP
//! (ES256), the token is bound to a [`jws::DpopKey`] kept in the record, and
//! [`TokenRecord::dpop_prover`] makes each request's proof.
//!
//! Owns: the protocol of each step, one concern per file: [`challenge`] (`WWW-Authenticate`),
//! [`discovery`] (RFC 9728, RFC 8414 / OpenID Connect discovery, the checks on both),
//! [`scope`], [`client`] (configured, CIMD, RFC 7591 registration, the token endpoint's
//! client authentication), [`pkce`] (S256 and `state`), [`flow`] (authorize URL, callback,
//! code exchange, refresh, all with the RFC 8707 `resource`), [`record`] (the token record
//! stored in `creds.json` under `mcp.<server>.oauth`), `fetch` ([`Fetcher`]: the bounded HTTP
//! calls), [`grant`] (grants without a browser, every token request's DPoP proof and nonce
//! retry), [`jws`] (signing keys, client assertions, DPoP keys and proofs). Must not touch: the MCP transports and the client core, actors, the HTTP API,
//! storage (a caller stores the [`TokenRecord`] and the [`ClientRecord`]).
//!
//! Secrets: no access or refresh token, authorization code, PKCE verifier, client secret,
//! private key, assertion, workload or ID token, or DPoP proof appears in an error message, a
//! log line or a `Debug` output ([`Sensitive`]); each one is
//! registered with the log writer's redaction when it is made or received. Text from the
//! authorization server (`error_description`) is cleaned and cut before it reaches an error.
//!
//! Bounds: every response body read is at most [`MAX_BODY_BYTES`]; metadata documents follow
//! at most [`MAX_REDIRECTS`] redirects (never from https to http); the token and registration
//! endpoints' redirects are not followed; following an authorization URL headless stops at
//! the first redirect to the redirect URI, which is read, never requested.

pub mod challenge;
pub mod client;
pub mod discovery;
mod fetch;
pub mod flow;
pub mod grant;
pub mod identity;
pub mod jws;
pub mod pkce;
pub mod record;
pub mod scope;

pub use challenge::Challenge;
pub use client::{AuthMethod, ClientRecord, ClientSource, ConfiguredClient};
pub use discovery::{AuthServerMetadata, Discovery, ResourceMetadata};
pub use fetch::{usable_nonce, Fetcher};
pub use flow::PendingSignIn;
pub use record::TokenRecord;

use serde::{Deserialize, Serialize};

/// The most bytes read from any response of an authorization or resource server.
pub const MAX_BODY_BYTES: usize = 1024 * 1024;
/// The most redirects followed for a metadata document, and while following an
/// authorization URL headless.
pub const MAX_REDIRECTS: usize = 5;
/// The daemon's loopback callback; an ephemeral port is used when it is busy.
pub const DEFAULT_REDIRECT_URI: &str = "http://127.0.0.1:33418/callback";
/// The `client_name` albedo registers.
pub const CLIENT_NAME: &str = "albedo-mcp";

/// A value that must never be shown: a token, an authorization code, a PKCE verifier, a
/// client secret. Its `Debug` prints `***`, it has no `Display`, and it serializes as the
/// plain string (for `creds.json`, which is private).
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Sensitive(String);

impl Sensitive {
    /// Wrap a value and register it with the log writer's redaction.
    pub fn new(value: impl Into<String>) -> Sensitive {
        let v = value.into();
        crate::protocol::text::register_secrets([v.as_str()]);
        Sensitive(v)
    }

    /// The value, for the one place that sends it (a header, a form field).
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Sensitive {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("***")
    }
}

/// Why a sign-in step failed. No variant carries a token, a code, a verifier or a secret;
/// text from a server is cleaned and cut ([`server_text`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OAuthError {
    #[error("the server URL {0:?} is not usable: {1}")]
    BadServerUrl(String, String),
    #[error("cannot reach {url}: {reason}")]
    Unreachable { url: String, reason: String },
    #[error("{url} answered HTTP {status}")]
    Http { url: String, status: u16 },
    #[error("{url}: {reason}")]
    BadDocument { url: String, reason: String },
    #[error("the answer of {url} is over the {limit}-byte limit")]
    TooLarge { url: String, limit: usize },
    #[error("{url} redirected: {reason}")]
    Redirect { url: String, reason: String },
    #[error(
        "the protected resource metadata names the resource {resource:?}, which is neither the \
         server URL {server:?} nor a prefix of it"
    )]
    ResourceMismatch { resource: String, server: String },
    #[error("the protected resource metadata at {url} names no authorization server")]
    NoAuthorizationServer { url: String },
    #[error(
        "the authorization server metadata at {url} names the issuer {found:?}, not {expected:?}; \
         it is not used"
    )]
    IssuerMismatch {
        url: String,
        expected: String,
        found: String,
    },
    #[error("no authorization server metadata found for the issuer {issuer:?} (tried {tried})")]
    NoAuthServerMetadata { issuer: String, tried: String },
    #[error(
        "the authorization server {issuer:?} does not list S256 in \
         code_challenge_methods_supported; PKCE S256 is required"
    )]
    NoS256 { issuer: String },
    #[error(
        "the authorization server's {which} {url:?} is not https, and the MCP server is; refused"
    )]
    InsecureEndpoint { which: String, url: String },
    #[error(
        "no client for the authorization server {issuer:?}: nothing is configured, it accepts no \
         client metadata document and offers no dynamic client registration"
    )]
    NoClient { issuer: String },
    #[error("dynamic client registration at {url} failed: {reason}")]
    Registration { url: String, reason: String },
    #[error("the callback URL is not valid: {0}")]
    BadCallback(String),
    #[error("the callback's state does not match this sign-in; refused")]
    StateMismatch,
    #[error(
        "the authorization response carries no iss, which the authorization server {expected:?} \
         promised (authorization_response_iss_parameter_supported); refused"
    )]
    IssMissing { expected: String },
    #[error("the authorization response's iss {found:?} is not the issuer {expected:?}; refused")]
    IssMismatch { expected: String, found: String },
    #[error("the authorization server refused the sign-in: {error}{}", describe(.description))]
    Denied {
        error: String,
        description: Option<String>,
    },
    #[error("the callback carries no authorization code")]
    NoCode,
    #[error("the token endpoint refused the code (HTTP {status}): {error}{}", describe(.description))]
    TokenRefused {
        status: u16,
        error: String,
        description: Option<String>,
    },
    #[error(
        "the authorization server refused the refresh (HTTP {status}): {error}{}; the user must \
         sign in again",
        describe(.description)
    )]
    RefreshRefused {
        status: u16,
        error: String,
        description: Option<String>,
    },
    #[error("there is no refresh token; the user must sign in again")]
    NoRefreshToken,
    #[error("the token endpoint's answer is not usable: {0}")]
    BadTokenResponse(String),
    #[error("the authorization URL did not lead back to the redirect URI: {0}")]
    NotRedirected(String),
    #[error(
        "the authorization server refused the {grant} grant (HTTP {status}): {error}{}; not \
         retried",
        describe(.description)
    )]
    GrantRefused {
        grant: String,
        status: u16,
        error: String,
        description: Option<String>,
    },
    #[error("the client's key cannot be used: {0}")]
    Key(String),
}

fn describe(d: &Option<String>) -> String {
    match d {
        Some(d) if !d.is_empty() => format!(" ({d})"),
        _ => String::new(),
    }
}

impl OAuthError {
    /// The user has to sign in again (nothing to retry on its own).
    pub fn needs_sign_in(&self) -> bool {
        matches!(
            self,
            OAuthError::RefreshRefused { .. } | OAuthError::NoRefreshToken
        )
    }
}

/// The most bytes of a server's text kept in an error.
const SERVER_TEXT_BYTES: usize = 200;

/// Text from a server made fit for an error: the known secrets replaced by `***`, control and
/// formatting characters replaced by spaces (`protocol::text::clean`), cut to 200 bytes.
pub(crate) fn server_text(text: &str, secrets: &[&Sensitive]) -> String {
    let mut s = std::borrow::Cow::Borrowed(text);
    for secret in secrets.iter().map(|s| s.expose()).filter(|s| !s.is_empty()) {
        if s.contains(secret) {
            s = std::borrow::Cow::Owned(s.replace(secret, "***"));
        }
    }
    crate::protocol::text::clean(s.trim(), SERVER_TEXT_BYTES)
}

/// Seconds since the Unix epoch.
pub fn now_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sensitive_values_never_show_in_debug() {
        let s = Sensitive::new("tok-abcdef-123456");
        assert_eq!(format!("{s:?}"), "***");
        assert_eq!(format!("{:?}", Some(s.clone())), "Some(***)");
        assert_eq!(serde_json::to_string(&s).unwrap(), "\"tok-abcdef-123456\"");
    }

    #[test]
    fn server_text_drops_known_secrets_and_control_characters() {
        let s = Sensitive::new("the-code-123");
        let t = server_text("bad code the-code-123\x1b[31m\nx", &[&s]);
        assert!(!t.contains("the-code-123"), "{t}");
        assert!(!t.contains('\x1b'), "{t}");
    }
}
