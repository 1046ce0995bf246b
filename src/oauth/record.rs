//! The token record of one server, as stored in `creds.json` under `mcp.<server>.oauth`: the
//! server URL it belongs to (a record for another URL is never sent), the tokens, the account
//! they were granted for (when the answer said), when the
//! access token expires, the scope, the issuer, the `resource`, the token endpoint (to refresh
//! without discovering again), the client, and a pending step-up (scopes the next sign-in asks
//! for after a 403 `insufficient_scope`).
//!
//! Owns: [`TokenRecord`] and what can be read off it (expiry, the `Authorization` value, its
//! URL). Its `Debug` never prints a token or a secret. Must not touch: files (the caller
//! stores it).

use super::client::ClientRecord;
use super::jws::DpopKey;
use super::{scope, Sensitive};
use serde::{Deserialize, Serialize};

/// How long before its expiry an access token is refreshed before use.
pub const REFRESH_MARGIN_SECS: u64 = 60;

/// One server's OAuth tokens.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenRecord {
    /// The MCP server URL these tokens belong to.
    pub server_url: String,
    pub access_token: Sensitive,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refresh_token: Option<Sensitive>,
    /// Unix seconds; `None`: the server said nothing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<u64>,
    /// Space-separated, as granted (or as asked for when the answer did not say).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scope: Option<String>,
    pub token_type: String,
    pub issuer: String,
    /// The RFC 8707 `resource` the tokens were asked for.
    pub resource: String,
    pub token_endpoint: String,
    pub client: ClientRecord,
    /// Scopes the next sign-in asks for (a 403 `insufficient_scope` was met).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub step_up: Vec<String>,
    /// The DPoP key pair a `DPoP` token is bound to (RFC 9449); every request carries a proof
    /// made with it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dpop_key: Option<DpopKey>,
    /// Who signed in, when the token endpoint said (`identity::account`); shown, never trusted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub account: Option<String>,
}

impl std::fmt::Debug for TokenRecord {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenRecord")
            .field("server_url", &self.server_url)
            .field("access_token", &"***")
            .field("refresh_token", &self.refresh_token.as_ref().map(|_| "***"))
            .field("expires_at", &self.expires_at)
            .field("scope", &self.scope)
            .field("token_type", &self.token_type)
            .field("issuer", &self.issuer)
            .field("resource", &self.resource)
            .field("token_endpoint", &self.token_endpoint)
            .field("client", &self.client)
            .field("step_up", &self.step_up)
            .field("dpop_key", &self.dpop_key)
            .field("account", &self.account)
            .finish()
    }
}

impl TokenRecord {
    /// Whether the record may be sent to `server_url` (the URL it was issued for, exactly).
    pub fn belongs_to(&self, server_url: &str) -> bool {
        self.server_url == server_url
    }

    /// Whether the access token expires within [`REFRESH_MARGIN_SECS`] of `now` (refresh it
    /// first). A token with no known expiry is used until refused.
    pub fn needs_refresh(&self, now: u64) -> bool {
        self.expires_at
            .is_some_and(|t| t <= now.saturating_add(REFRESH_MARGIN_SECS))
    }

    /// The `Authorization` header's value: `Bearer`, or `DPoP` for a DPoP-bound token.
    pub fn authorization(&self) -> Sensitive {
        let scheme = if self.dpop().is_some() {
            "DPoP"
        } else {
            "Bearer"
        };
        Sensitive(format!("{scheme} {}", self.access_token.expose()))
    }

    /// The key of a DPoP-bound token (`token_type` DPoP with its key kept).
    pub fn dpop(&self) -> Option<&DpopKey> {
        self.dpop_key
            .as_ref()
            .filter(|_| self.token_type.eq_ignore_ascii_case("dpop"))
    }

    /// For a DPoP-bound token, what makes the proof of one request to `url` (the server URL
    /// as configured, the `htu`): `(method, nonce)` to the `DPoP` header's value (RFC 9449
    /// §7: with `ath`, the token's hash). `None` for a bearer token.
    pub fn dpop_prover(
        &self,
        url: &str,
    ) -> Option<impl Fn(&str, Option<&str>) -> Option<String> + Send + Sync + 'static> {
        let key = self.dpop()?.clone();
        let token = self.access_token.clone();
        let htu = super::jws::htu_of(url);
        Some(move |method: &str, nonce: Option<&str>| {
            key.proof(method, &htu, Some(token.expose()), nonce, super::now_secs())
                .ok()
                .map(|p| p.expose().to_owned())
        })
    }

    /// The scopes granted (or asked for).
    pub fn scopes(&self) -> Vec<String> {
        self.scope.as_deref().map(scope::split).unwrap_or_default()
    }

    /// A 403 `insufficient_scope` challenged `challenged`: the next sign-in asks for the union
    /// of what was asked before (the record's scope and any earlier step-up) and those.
    /// Answers whether that asks for anything new (when it does not, signing in again would
    /// loop).
    pub fn add_step_up(&mut self, challenged: &[String]) -> bool {
        let before = scope::union(&self.scopes(), &self.step_up);
        let after = scope::union(&before, challenged);
        let grew = after.len() > before.len();
        self.step_up = after;
        grew
    }
}

#[cfg(test)]
mod tests {
    use super::super::client::{AuthMethod, ClientSource};
    use super::*;

    pub(crate) fn sample() -> TokenRecord {
        TokenRecord {
            server_url: "https://mcp.example.com/mcp".into(),
            access_token: Sensitive::new("access-token-value-1"),
            refresh_token: Some(Sensitive::new("refresh-token-value-2")),
            expires_at: Some(1_000),
            scope: Some("a b".into()),
            token_type: "Bearer".into(),
            issuer: "https://as.example.com".into(),
            resource: "https://mcp.example.com/mcp".into(),
            token_endpoint: "https://as.example.com/token".into(),
            client: ClientRecord {
                client_id: "client-1".into(),
                client_secret: Some(Sensitive::new("client-secret-value-3")),
                auth_method: AuthMethod::ClientSecretBasic,
                redirect_uri: "http://127.0.0.1:33418/callback".into(),
                issuer: "https://as.example.com".into(),
                source: ClientSource::Registered,
            },
            step_up: Vec::new(),
            dpop_key: None,
            account: None,
        }
    }

    #[test]
    fn a_dpop_bound_token_is_sent_with_the_dpop_scheme_and_a_proof() {
        let mut r = sample();
        assert!(r.dpop_prover("https://mcp.example.com/mcp").is_none());
        r.dpop_key = Some(DpopKey::generate().unwrap());
        // A key kept with a Bearer token is not used.
        assert!(r.dpop().is_none());
        r.token_type = "DPoP".into();
        assert_eq!(r.authorization().expose(), "DPoP access-token-value-1");
        let prove = r.dpop_prover("https://mcp.example.com/mcp?q=1").unwrap();
        let p = prove("POST", Some("n")).unwrap();
        let claims: serde_json::Value = serde_json::from_slice(
            &base64::Engine::decode(
                &base64::engine::general_purpose::URL_SAFE_NO_PAD,
                p.split('.').nth(1).unwrap(),
            )
            .unwrap(),
        )
        .unwrap();
        assert_eq!(claims["htu"], "https://mcp.example.com/mcp");
        assert_eq!(claims["htm"], "POST");
        assert_eq!(claims["nonce"], "n");
        assert!(claims["ath"].is_string());
        let text = serde_json::to_string(&r).unwrap();
        let back: TokenRecord = serde_json::from_str(&text).unwrap();
        assert_eq!(back, r);
        assert!(!format!("{r:?}").contains("pkcs8"));
    }

    #[test]
    fn debug_never_prints_a_token_or_a_secret() {
        let r = sample();
        for shown in [format!("{r:?}"), format!("{r:#?}")] {
            for secret in [
                "access-token-value-1",
                "refresh-token-value-2",
                "client-secret-value-3",
            ] {
                assert!(!shown.contains(secret), "{shown}");
            }
            assert!(shown.contains("client-1"), "{shown}");
        }
        assert!(!format!("{:?}", r.authorization()).contains("access-token-value-1"));
    }

    #[test]
    fn it_round_trips_through_json_as_creds_json_keeps_it() {
        let r = sample();
        let text = serde_json::to_string(&r).unwrap();
        assert!(
            text.contains("\"access_token\":\"access-token-value-1\""),
            "{text}"
        );
        assert!(
            text.contains("\"auth_method\":\"client_secret_basic\""),
            "{text}"
        );
        let back: TokenRecord = serde_json::from_str(&text).unwrap();
        assert_eq!(back, r);
    }

    #[test]
    fn expiry_refresh_margin_and_url() {
        let r = sample();
        assert!(!r.needs_refresh(900));
        assert!(r.needs_refresh(940));
        assert!(r.needs_refresh(2_000));
        let mut n = r.clone();
        n.expires_at = None;
        assert!(!n.needs_refresh(u64::MAX));
        assert!(r.belongs_to("https://mcp.example.com/mcp"));
        assert!(!r.belongs_to("https://mcp.example.com/other"));
        assert_eq!(r.authorization().expose(), "Bearer access-token-value-1");
    }

    #[test]
    fn a_step_up_is_the_union_and_a_repeat_asks_for_nothing_new() {
        let mut r = sample();
        assert!(r.add_step_up(&["c".to_owned()]));
        assert_eq!(r.step_up, vec!["a", "b", "c"]);
        assert!(!r.add_step_up(&["c".to_owned(), "a".to_owned()]));
    }
}
