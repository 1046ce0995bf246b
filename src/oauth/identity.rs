//! Who signed in: the account shown in the settings `auth` group, read from what the token
//! endpoint answered. First an OpenID Connect `id_token` (its `iss` must be the issuer the
//! tokens came from and its `aud` must name our client), else an access token that is itself
//! a JWT from that issuer (as Auth0, Keycloak, Entra ID and FastMCP's JWT issuer grant). The
//! claim shown is the first of `email`, `preferred_username`, `upn`, `name`, `sub`.
//!
//! The signature is not checked: the token came straight from the token endpoint over the
//! connection discovery vetted (https unless the MCP server itself is plain http), which OpenID
//! Connect Core 1.0 §3.1.3.7 (6) accepts in place of the signature for an ID token received
//! that way; and the account is only shown, never trusted for anything.
//!
//! Owns: decoding a JWT's claims (bounded) and choosing the account. Must not touch: the
//! network, files, or any token beyond reading its claims; nothing here is logged.

use base64::Engine;
use serde_json::Value;

/// A JWT longer than this is not read (its claims are not worth the decoding).
pub const MAX_JWT_BYTES: usize = 16 * 1024;
/// The account shown is cut to this many bytes (then `…`), control characters replaced.
pub const MAX_ACCOUNT_BYTES: usize = 200;

/// The claims of a compact JWS (`header.payload.signature`), or `None` when `token` is not one.
fn claims(token: &str) -> Option<serde_json::Map<String, Value>> {
    if token.len() > MAX_JWT_BYTES {
        return None;
    }
    let mut parts = token.split('.');
    let (_header, payload, _sig) = (parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() {
        return None; // five parts: an encrypted JWE, whose claims are not ours to read
    }
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(payload.trim_end_matches('='))
        .ok()?;
    match serde_json::from_slice(&bytes).ok()? {
        Value::Object(map) => Some(map),
        _ => None,
    }
}

/// Whether `aud` (a string or an array of strings) names `client_id`.
fn audience_has(aud: Option<&Value>, client_id: &str) -> bool {
    match aud {
        Some(Value::String(s)) => s == client_id,
        Some(Value::Array(a)) => a.iter().any(|v| v.as_str() == Some(client_id)),
        _ => false,
    }
}

/// Issuers compared as RFC 8414 asks, with one trailing slash allowed to differ (issuers are
/// often written both ways, and the claim is only shown).
fn same_issuer(claimed: Option<&Value>, issuer: &str) -> bool {
    claimed
        .and_then(Value::as_str)
        .is_some_and(|c| c.trim_end_matches('/') == issuer.trim_end_matches('/'))
}

fn shown(map: &serde_json::Map<String, Value>) -> Option<String> {
    ["email", "preferred_username", "upn", "name", "sub"]
        .iter()
        .filter_map(|k| map.get(*k).and_then(Value::as_str))
        .map(|v| crate::protocol::text::clean(v.trim(), MAX_ACCOUNT_BYTES))
        .find(|v| !v.is_empty())
}

/// The account the tokens were granted for, when the answer says it.
pub fn account(
    id_token: Option<&str>,
    access_token: &str,
    issuer: &str,
    client_id: &str,
) -> Option<String> {
    if let Some(c) = id_token.and_then(claims) {
        if same_issuer(c.get("iss"), issuer) && audience_has(c.get("aud"), client_id) {
            if let Some(a) = shown(&c) {
                return Some(a);
            }
        }
    }
    claims(access_token)
        .filter(|c| same_issuer(c.get("iss"), issuer))
        .and_then(|c| shown(&c))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn jwt(claims: Value) -> String {
        let e = base64::engine::general_purpose::URL_SAFE_NO_PAD;
        format!(
            "{}.{}.c2ln",
            e.encode(br#"{"alg":"RS256","typ":"JWT"}"#),
            e.encode(claims.to_string())
        )
    }

    #[test]
    fn an_id_token_for_us_from_the_issuer_names_the_account() {
        let id = jwt(serde_json::json!({
            "iss": "https://as.example.com/", "aud": ["other", "client-1"],
            "sub": "u-1", "email": "ada@example.com"
        }));
        assert_eq!(
            account(Some(&id), "opaque", "https://as.example.com", "client-1").as_deref(),
            Some("ada@example.com")
        );
    }

    #[test]
    fn an_id_token_from_another_issuer_or_for_another_client_is_ignored() {
        let other_iss = jwt(
            serde_json::json!({"iss": "https://evil.example", "aud": "client-1", "email": "x@y"}),
        );
        let other_aud = jwt(
            serde_json::json!({"iss": "https://as.example.com", "aud": "client-2", "email": "x@y"}),
        );
        for id in [other_iss, other_aud] {
            assert_eq!(
                account(Some(&id), "opaque", "https://as.example.com", "client-1"),
                None
            );
        }
    }

    #[test]
    fn a_jwt_access_token_from_the_issuer_is_read_when_no_id_token_says() {
        let at = jwt(serde_json::json!({"iss": "https://as.example.com", "sub": "svc-7"}));
        assert_eq!(
            account(None, &at, "https://as.example.com", "c").as_deref(),
            Some("svc-7")
        );
        let foreign = jwt(serde_json::json!({"iss": "https://x.example", "sub": "svc-7"}));
        assert_eq!(account(None, &foreign, "https://as.example.com", "c"), None);
    }

    #[test]
    fn opaque_malformed_huge_and_hostile_tokens_give_nothing_or_clean_text() {
        for t in ["opaque", "a.b.c", "a.!!!.c", "a.b.c.d.e", ""] {
            assert_eq!(account(Some(t), t, "https://as.example.com", "c"), None);
        }
        let huge = jwt(serde_json::json!({"iss": "i", "sub": "x".repeat(MAX_JWT_BYTES)}));
        assert_eq!(account(None, &huge, "i", "c"), None);
        let hostile =
            jwt(serde_json::json!({"iss": "i", "name": format!("\x1b[31m{}", "n".repeat(500))}));
        let a = account(None, &hostile, "i", "c").unwrap();
        assert!(
            !a.contains('\x1b') && a.len() <= MAX_ACCOUNT_BYTES + 3,
            "{a}"
        );
    }
}
