//! Signed JWTs a client makes (JWS compact serialization, RFC 7515), with `ring` (already in
//! the build through rustls): the `private_key_jwt` client assertion (RFC 7523 §2.2, §3) and
//! DPoP proofs (RFC 9449 §4).
//!
//! Keys: a client's signing key from a PEM ([`SigningKey::from_pem`]: PKCS#8 `PRIVATE KEY`
//! with an EC P-256 key, ES256, or an RSA key, RS256; PKCS#1 `RSA PRIVATE KEY` too); a DPoP key
//! ([`DpopKey`]) is an ES256 key pair made in memory, kept (as its PKCS#8) with the token it is
//! bound to. The proof carries the public key as a JWK (`x`, `y`), never the private part.
//!
//! Owns: key parsing, signing, the claims of an assertion and of a proof. Must not touch: I/O.
//! No key, assertion or proof appears in an error or a `Debug` output.

use super::Sensitive;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use ring::rand::SystemRandom;
use ring::signature::{self, EcdsaKeyPair, KeyPair, RsaKeyPair};
use serde_json::{json, Value};
use sha2::Digest;
use std::sync::Arc;

/// How long a client assertion is valid (RFC 7523 §3: short-lived).
pub const ASSERTION_LIFETIME_SECS: u64 = 300;

/// A key that cannot be used; the message never holds the key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    #[error("the private key is not PEM ({0})")]
    NotPem(String),
    #[error(
        "the private key is an EC key in SEC1 form (BEGIN EC PRIVATE KEY); give it as PKCS#8 \
         (openssl pkcs8 -topk8 -nocrypt)"
    )]
    Sec1,
    #[error("the private key is neither an EC P-256 nor an RSA key in PKCS#8 ({0})")]
    Unsupported(String),
    #[error("signing failed")]
    Sign,
}

fn b64(bytes: &[u8]) -> String {
    URL_SAFE_NO_PAD.encode(bytes)
}

/// A fresh `jti`: 128 random bits.
pub fn new_jti() -> String {
    b64(&rand::random::<[u8; 16]>())
}

/// A client's signing key: ES256 or RS256.
#[derive(Clone)]
pub enum SigningKey {
    Es256(Arc<EcdsaKeyPair>),
    Rs256(Arc<RsaKeyPair>),
}

impl std::fmt::Debug for SigningKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SigningKey({}, ***)", self.alg())
    }
}

impl SigningKey {
    /// A key from its PEM text (the first private key in it).
    pub fn from_pem(pem: &str) -> Result<SigningKey, KeyError> {
        use rustls_pki_types::pem::PemObject;
        use rustls_pki_types::PrivateKeyDer;
        let der = PrivateKeyDer::from_pem_slice(pem.as_bytes())
            .map_err(|e| KeyError::NotPem(pem_error(&e)))?;
        match der {
            PrivateKeyDer::Pkcs8(k) => Self::from_pkcs8(k.secret_pkcs8_der()),
            PrivateKeyDer::Pkcs1(k) => RsaKeyPair::from_der(k.secret_pkcs1_der())
                .map(|k| SigningKey::Rs256(Arc::new(k)))
                .map_err(|e| KeyError::Unsupported(e.to_string())),
            PrivateKeyDer::Sec1(_) => Err(KeyError::Sec1),
            _ => Err(KeyError::Unsupported("an unknown key form".into())),
        }
    }

    fn from_pkcs8(der: &[u8]) -> Result<SigningKey, KeyError> {
        let rng = SystemRandom::new();
        if let Ok(k) =
            EcdsaKeyPair::from_pkcs8(&signature::ECDSA_P256_SHA256_FIXED_SIGNING, der, &rng)
        {
            return Ok(SigningKey::Es256(Arc::new(k)));
        }
        RsaKeyPair::from_pkcs8(der)
            .map(|k| SigningKey::Rs256(Arc::new(k)))
            .map_err(|e| KeyError::Unsupported(e.to_string()))
    }

    /// The JWS `alg`.
    pub fn alg(&self) -> &'static str {
        match self {
            SigningKey::Es256(_) => "ES256",
            SigningKey::Rs256(_) => "RS256",
        }
    }

    fn sign(&self, input: &[u8]) -> Result<Vec<u8>, KeyError> {
        let rng = SystemRandom::new();
        match self {
            SigningKey::Es256(k) => k
                .sign(&rng, input)
                .map(|s| s.as_ref().to_vec())
                .map_err(|_| KeyError::Sign),
            SigningKey::Rs256(k) => {
                let mut sig = vec![0u8; k.public().modulus_len()];
                k.sign(&signature::RSA_PKCS1_SHA256, &rng, input, &mut sig)
                    .map_err(|_| KeyError::Sign)?;
                Ok(sig)
            }
        }
    }

    /// A signed JWT: `header` (its `alg` set here) and `claims`. Not registered with the log
    /// redaction (a DPoP proof is made per request); a caller that keeps one does.
    fn sign_jwt(&self, header: Value, claims: &Value) -> Result<Sensitive, KeyError> {
        let mut header = header;
        header["alg"] = Value::String(self.alg().into());
        let input = format!(
            "{}.{}",
            b64(header.to_string().as_bytes()),
            b64(claims.to_string().as_bytes())
        );
        let sig = self.sign(input.as_bytes())?;
        Ok(Sensitive(format!("{input}.{}", b64(&sig))))
    }

    /// A `private_key_jwt` client assertion (RFC 7523 §2.2, §3): `iss` and `sub` the client
    /// id, `aud` the authorization server (its issuer identifier), a fresh `jti`, `iat`, and
    /// `exp` five minutes on.
    pub fn client_assertion(
        &self,
        client_id: &str,
        audience: &str,
        now: u64,
    ) -> Result<Sensitive, KeyError> {
        let a = self.sign_jwt(
            json!({"typ": "JWT"}),
            &json!({
                "iss": client_id,
                "sub": client_id,
                "aud": audience,
                "jti": new_jti(),
                "iat": now,
                "exp": now + ASSERTION_LIFETIME_SECS,
            }),
        )?;
        // One per token request: registered, as every secret albedo holds.
        crate::protocol::text::register_secrets([a.expose()]);
        Ok(a)
    }
}

fn pem_error(e: &rustls_pki_types::pem::Error) -> String {
    use rustls_pki_types::pem::Error;
    match e {
        Error::NoItemsFound => "no private key in it".into(),
        Error::MissingSectionEnd { .. } => "a section has no end".into(),
        Error::IllegalSectionStart { .. } => "a section start is not valid".into(),
        Error::Base64Decode(_) => "its base64 is not valid".into(),
        _ => "it cannot be read".into(),
    }
}

/// A DPoP key pair (ES256), made in memory and kept with the token bound to it. Stored as
/// `{"alg": "ES256", "pkcs8": <base64url>}` (the private key: `creds.json` only); its `Debug`
/// shows only the thumbprint.
#[derive(Clone)]
pub struct DpopKey {
    pkcs8: Sensitive,
    pair: Arc<EcdsaKeyPair>,
}

impl std::fmt::Debug for DpopKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "DpopKey(jkt {})", self.thumbprint())
    }
}

impl PartialEq for DpopKey {
    fn eq(&self, other: &Self) -> bool {
        self.pkcs8 == other.pkcs8
    }
}
impl Eq for DpopKey {}

impl serde::Serialize for DpopKey {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        json!({"alg": "ES256", "pkcs8": self.pkcs8.expose()}).serialize(s)
    }
}

impl<'de> serde::Deserialize<'de> for DpopKey {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<DpopKey, D::Error> {
        use serde::de::Error;
        let v = Value::deserialize(d)?;
        if v.get("alg").and_then(Value::as_str) != Some("ES256") {
            return Err(D::Error::custom("a DPoP key must be ES256"));
        }
        let der = v
            .get("pkcs8")
            .and_then(Value::as_str)
            .and_then(|s| URL_SAFE_NO_PAD.decode(s).ok())
            .ok_or_else(|| D::Error::custom("a DPoP key needs its pkcs8"))?;
        DpopKey::from_pkcs8(&der).map_err(|_| D::Error::custom("the DPoP key is not usable"))
    }
}

impl DpopKey {
    /// A new key pair.
    pub fn generate() -> Result<DpopKey, KeyError> {
        let rng = SystemRandom::new();
        let doc = EcdsaKeyPair::generate_pkcs8(&signature::ECDSA_P256_SHA256_FIXED_SIGNING, &rng)
            .map_err(|_| KeyError::Sign)?;
        DpopKey::from_pkcs8(doc.as_ref())
    }

    fn from_pkcs8(der: &[u8]) -> Result<DpopKey, KeyError> {
        let rng = SystemRandom::new();
        let pair = EcdsaKeyPair::from_pkcs8(&signature::ECDSA_P256_SHA256_FIXED_SIGNING, der, &rng)
            .map_err(|e| KeyError::Unsupported(e.to_string()))?;
        Ok(DpopKey {
            pkcs8: Sensitive::new(b64(der)),
            pair: Arc::new(pair),
        })
    }

    /// The public key as a JWK (RFC 7517/7518): `kty`, `crv`, `x`, `y`.
    pub fn jwk(&self) -> Value {
        let p = self.pair.public_key().as_ref();
        // Uncompressed point: 0x04 || X (32) || Y (32).
        json!({"kty": "EC", "crv": "P-256", "x": b64(&p[1..33]), "y": b64(&p[33..65])})
    }

    /// The JWK SHA-256 thumbprint (RFC 7638), the `jkt` a bound token names.
    pub fn thumbprint(&self) -> String {
        let j = self.jwk();
        let canonical = format!(
            r#"{{"crv":"P-256","kty":"EC","x":"{}","y":"{}"}}"#,
            j["x"].as_str().unwrap_or(""),
            j["y"].as_str().unwrap_or("")
        );
        b64(&sha2::Sha256::digest(canonical.as_bytes()))
    }

    /// A proof for one HTTP request (RFC 9449 §4.2): `htm` the method, `htu` the URL without
    /// query and fragment, `iat`, a fresh `jti`; `ath` (the access token's SHA-256) when one
    /// is presented with it, and the server's `nonce` when it gave one. Sent as a sensitive
    /// header, never logged; not registered with the log redaction (one per request: it
    /// would grow without bound, and a proof is bound to its one request).
    pub fn proof(
        &self,
        htm: &str,
        htu: &str,
        access_token: Option<&str>,
        nonce: Option<&str>,
        now: u64,
    ) -> Result<Sensitive, KeyError> {
        let mut claims = json!({
            "htm": htm,
            "htu": htu_of(htu),
            "iat": now,
            "jti": new_jti(),
        });
        if let Some(t) = access_token {
            claims["ath"] = Value::String(b64(&sha2::Sha256::digest(t.as_bytes())));
        }
        if let Some(n) = nonce {
            claims["nonce"] = Value::String(n.to_owned());
        }
        SigningKey::Es256(self.pair.clone())
            .sign_jwt(json!({"typ": "dpop+jwt", "jwk": self.jwk()}), &claims)
    }
}

/// A URL as a proof's `htu`: without query and fragment.
pub fn htu_of(url: &str) -> String {
    match url::Url::parse(url) {
        Ok(mut u) => {
            u.set_query(None);
            u.set_fragment(None);
            u.to_string()
        }
        Err(_) => url.split(['?', '#']).next().unwrap_or("").to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parts(jwt: &str) -> (Value, Value, Vec<u8>) {
        let p: Vec<&str> = jwt.split('.').collect();
        assert_eq!(p.len(), 3);
        let d = |s: &str| URL_SAFE_NO_PAD.decode(s).unwrap();
        (
            serde_json::from_slice(&d(p[0])).unwrap(),
            serde_json::from_slice(&d(p[1])).unwrap(),
            d(p[2]),
        )
    }

    fn verify_es256(jwk: &Value, jwt: &str) -> bool {
        let x = URL_SAFE_NO_PAD.decode(jwk["x"].as_str().unwrap()).unwrap();
        let y = URL_SAFE_NO_PAD.decode(jwk["y"].as_str().unwrap()).unwrap();
        let mut point = vec![4u8];
        point.extend(x);
        point.extend(y);
        let (input, sig) = jwt.rsplit_once('.').unwrap();
        let sig = URL_SAFE_NO_PAD.decode(sig).unwrap();
        signature::UnparsedPublicKey::new(&signature::ECDSA_P256_SHA256_FIXED, point)
            .verify(input.as_bytes(), &sig)
            .is_ok()
    }

    #[test]
    fn a_dpop_proof_is_well_formed_and_verifies_with_its_jwk() {
        let k = DpopKey::generate().unwrap();
        let p = k
            .proof(
                "POST",
                "https://mcp.example.com/mcp?x=1#f",
                Some("tok"),
                Some("n-1"),
                1000,
            )
            .unwrap();
        let (h, c, sig) = parts(p.expose());
        assert_eq!(h["typ"], "dpop+jwt");
        assert_eq!(h["alg"], "ES256");
        assert!(h["jwk"].get("d").is_none());
        assert_eq!(sig.len(), 64);
        assert_eq!(c["htm"], "POST");
        assert_eq!(c["htu"], "https://mcp.example.com/mcp");
        assert_eq!(c["iat"], 1000);
        assert_eq!(c["nonce"], "n-1");
        assert_eq!(
            c["ath"],
            b64(&sha2::Sha256::digest(b"tok")),
            "ath is the base64url SHA-256 of the token"
        );
        assert!(verify_es256(&h["jwk"], p.expose()));
        let q = k.proof("GET", "https://a/b", None, None, 1000).unwrap();
        let (_, c2, _) = parts(q.expose());
        assert_ne!(c["jti"], c2["jti"]);
        assert!(c2.get("ath").is_none() && c2.get("nonce").is_none());
        assert!(!format!("{k:?}").contains(k.pkcs8.expose()));
    }

    #[test]
    fn a_dpop_key_round_trips_through_json() {
        let k = DpopKey::generate().unwrap();
        let v = serde_json::to_value(&k).unwrap();
        let back: DpopKey = serde_json::from_value(v).unwrap();
        assert_eq!(back.jwk(), k.jwk());
        assert_eq!(back.thumbprint(), k.thumbprint());
        assert!(serde_json::from_value::<DpopKey>(json!({"alg": "RS256"})).is_err());
    }

    #[test]
    fn the_thumbprint_follows_rfc_7638() {
        // RFC 7638 §3.1 is an RSA example; check the EC form's members and order instead.
        let k = DpopKey::generate().unwrap();
        let j = k.jwk();
        let canonical = format!(
            r#"{{"crv":"P-256","kty":"EC","x":"{}","y":"{}"}}"#,
            j["x"].as_str().unwrap(),
            j["y"].as_str().unwrap()
        );
        assert_eq!(
            k.thumbprint(),
            b64(&sha2::Sha256::digest(canonical.as_bytes()))
        );
        assert_eq!(k.thumbprint().len(), 43);
    }

    #[test]
    fn a_client_assertion_from_a_pkcs8_ec_pem() {
        let rng = SystemRandom::new();
        let doc = EcdsaKeyPair::generate_pkcs8(&signature::ECDSA_P256_SHA256_FIXED_SIGNING, &rng)
            .unwrap();
        let pem = format!(
            "-----BEGIN PRIVATE KEY-----\n{}\n-----END PRIVATE KEY-----\n",
            base64::engine::general_purpose::STANDARD.encode(doc.as_ref())
        );
        let key = SigningKey::from_pem(&pem).unwrap();
        assert_eq!(key.alg(), "ES256");
        let a = key
            .client_assertion("client-1", "https://as.example.com", 2000)
            .unwrap();
        let (h, c, _) = parts(a.expose());
        assert_eq!(h["alg"], "ES256");
        assert_eq!(c["iss"], "client-1");
        assert_eq!(c["sub"], "client-1");
        assert_eq!(c["aud"], "https://as.example.com");
        assert_eq!(c["iat"], 2000);
        assert_eq!(c["exp"], 2300);
        assert!(c["jti"].as_str().is_some_and(|j| j.len() >= 16));
        let pair = EcdsaKeyPair::from_pkcs8(
            &signature::ECDSA_P256_SHA256_FIXED_SIGNING,
            doc.as_ref(),
            &rng,
        )
        .unwrap();
        let p = pair.public_key().as_ref();
        let jwk = json!({"x": b64(&p[1..33]), "y": b64(&p[33..65])});
        assert!(verify_es256(&jwk, a.expose()));
    }

    #[test]
    fn unusable_keys_are_refused_without_showing_them() {
        let e = SigningKey::from_pem("not a pem secret-bits").unwrap_err();
        assert!(matches!(e, KeyError::NotPem(_)), "{e}");
        assert!(!e.to_string().contains("secret-bits"));
        let sec1 = "-----BEGIN EC PRIVATE KEY-----\nAAAA\n-----END EC PRIVATE KEY-----\n";
        assert_eq!(SigningKey::from_pem(sec1).unwrap_err(), KeyError::Sec1);
        let junk = "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n";
        assert!(matches!(
            SigningKey::from_pem(junk).unwrap_err(),
            KeyError::Unsupported(_)
        ));
    }

    #[test]
    fn htu_drops_query_and_fragment() {
        assert_eq!(
            htu_of("https://a.example/mcp?x=1#y"),
            "https://a.example/mcp"
        );
        assert_eq!(
            htu_of("http://127.0.0.1:9/token"),
            "http://127.0.0.1:9/token"
        );
    }
}
