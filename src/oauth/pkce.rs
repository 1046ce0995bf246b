//! PKCE (RFC 7636) with S256, and the `state` of a sign-in: both random from the operating
//! system's generator, base64url without padding.
//!
//! Owns: the verifier, its challenge, the state. Must not touch: I/O.

use super::Sensitive;
use base64::Engine;
use sha2::{Digest, Sha256};

/// A verifier (kept until the code exchange, never shown) and its S256 challenge (sent on
/// the authorization URL).
#[derive(Debug, Clone)]
pub struct Pkce {
    pub verifier: Sensitive,
    pub challenge: String,
}

fn b64url(b: &[u8]) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(b)
}

impl Pkce {
    /// A fresh verifier: 32 random bytes, 43 characters.
    pub fn new() -> Pkce {
        let verifier = b64url(&rand::random::<[u8; 32]>());
        let challenge = challenge_of(&verifier);
        Pkce {
            verifier: Sensitive::new(verifier),
            challenge,
        }
    }
}

impl Default for Pkce {
    fn default() -> Self {
        Pkce::new()
    }
}

/// The S256 challenge of a verifier: base64url(SHA-256(verifier)).
pub fn challenge_of(verifier: &str) -> String {
    b64url(&Sha256::digest(verifier.as_bytes()))
}

/// A fresh `state`: 24 random bytes, 32 characters.
pub fn new_state() -> String {
    b64url(&rand::random::<[u8; 24]>())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rfc_7636_example() {
        assert_eq!(
            challenge_of("dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk"),
            "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM"
        );
    }

    #[test]
    fn verifiers_and_states_are_fresh_and_well_formed() {
        let (a, b) = (Pkce::new(), Pkce::new());
        assert_ne!(a.verifier, b.verifier);
        assert_eq!(a.verifier.expose().len(), 43);
        assert_eq!(a.challenge, challenge_of(a.verifier.expose()));
        assert!(a
            .verifier
            .expose()
            .bytes()
            .all(|c| c.is_ascii_alphanumeric() || c == b'-' || c == b'_'));
        assert_ne!(new_state(), new_state());
        assert!(!format!("{a:?}").contains(a.verifier.expose()));
    }
}
