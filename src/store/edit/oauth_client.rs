//! `secrets.<server>.oauth_client`, checked and merged over the stored one: the client (id,
//! secret, metadata URL), the grant and what it needs (a private key or its file, a workload
//! token file, a token exchange for enterprise-managed authorization, DPoP). See README, "OAuth
//! for services".
//!
//! Owns: those fields' rules. Must not touch: the rest of a patch, files.

use super::*;

/// The fields of `oauth_client`.
pub(super) const OAUTH_CLIENT_FIELDS: [&str; 9] = [
    "client_id",
    "client_secret",
    "metadata_url",
    "grant",
    "private_key",
    "private_key_file",
    "workload_token_file",
    "token_exchange",
    "dpop",
];
/// The grants a server may use (`oauth_client.grant`).
pub const OAUTH_GRANTS: [&str; 3] = ["authorization_code", "client_credentials", "jwt_bearer"];
/// The largest PEM private key accepted (an RSA 4096-bit key is about 3.3 KiB).
pub const MAX_PRIVATE_KEY_BYTES: usize = 16 * 1024;

/// `secrets.<server>.oauth_client` merged over the stored object and checked: the client (id,
/// secret, metadata URL), the grant and what it needs (see README, "OAuth for services").
pub(super) fn oauth_client(
    f: &str,
    o: &Map<String, Value>,
    old: Option<&Value>,
) -> Result<Map<String, Value>, PatchError> {
    for key in o.keys() {
        if !OAUTH_CLIENT_FIELDS.contains(&key.as_str()) {
            return Err(bad(
                format!("{f}.{key}"),
                format!("unknown field (known: {})", OAUTH_CLIENT_FIELDS.join(", ")),
            ));
        }
    }
    let kept = |k: &str| old.and_then(|c| c.get(k)).cloned();
    let kept_text = |k: &str| kept(k).and_then(|v| v.as_str().map(str::to_owned));
    let text = |k: &str| -> Result<Option<String>, PatchError> {
        match o.get(k) {
            None => Ok(kept_text(k)),
            Some(x) => match given(&format!("{f}.{k}"), x)? {
                Given::Keep => Ok(kept_text(k)),
                Given::Remove => Ok(None),
                Given::Set(s) => Ok(Some(s.to_owned())),
            },
        }
    };
    let path = |k: &str| -> Result<Option<String>, PatchError> {
        let p = text(k)?;
        if let Some(p) = &p {
            if !std::path::Path::new(p).is_absolute() {
                return Err(bad(format!("{f}.{k}"), "must be an absolute file path"));
            }
        }
        Ok(p)
    };
    let id = text("client_id")?;
    let secret = text("client_secret")?;
    let metadata_url = text("metadata_url")?;
    if let Some(u) = &metadata_url {
        let ok = url::Url::parse(u)
            .is_ok_and(|u| u.scheme() == "https" && u.host_str().is_some() && u.path() != "/");
        if !ok {
            return Err(bad(
                format!("{f}.metadata_url"),
                "must be the https URL (with a path) of a Client ID Metadata Document you host",
            ));
        }
    }
    let grant = text("grant")?;
    if let Some(g) = &grant {
        if !OAUTH_GRANTS.contains(&g.as_str()) {
            return Err(bad(
                format!("{f}.grant"),
                format!("must be one of {}", OAUTH_GRANTS.join(", ")),
            ));
        }
    }
    // A PEM has line breaks: not a `given` string.
    let private_key = match o.get("private_key") {
        None => kept_text("private_key"),
        Some(Value::Null) => None,
        Some(Value::String(s)) if s == "-" => None,
        Some(Value::String(s)) if s.is_empty() => kept_text("private_key"),
        Some(Value::String(s)) => {
            let field = format!("{f}.private_key");
            if s.len() > MAX_PRIVATE_KEY_BYTES {
                return Err(bad(field, format!("is over {MAX_PRIVATE_KEY_BYTES} bytes")));
            }
            if s.contains('\0') {
                return Err(bad(field, "may not contain NUL"));
            }
            crate::oauth::jws::SigningKey::from_pem(s).map_err(|e| bad(field, e.to_string()))?;
            Some(s.clone())
        }
        Some(_) => {
            return Err(bad(
                format!("{f}.private_key"),
                "must be a PEM private key (a string), or \"-\" to remove",
            ))
        }
    };
    let private_key_file = path("private_key_file")?;
    let workload_token_file = path("workload_token_file")?;
    let token_exchange = match o.get("token_exchange") {
        None => kept("token_exchange"),
        Some(Value::Null) => None,
        Some(Value::String(s)) if s == "-" => None,
        Some(Value::Object(x)) => Some(token_exchange(&format!("{f}.token_exchange"), x)?),
        Some(_) => {
            return Err(bad(
                format!("{f}.token_exchange"),
                "must be {\"idp_token_endpoint\": ..., \"id_token_file\": ...}, or null",
            ))
        }
    };
    let dpop = match o.get("dpop") {
        None => kept("dpop"),
        Some(Value::Null) => None,
        Some(Value::Bool(b)) => Some(Value::Bool(*b)),
        Some(_) => {
            return Err(bad(
                format!("{f}.dpop"),
                "must be true or false (null: use it when the authorization server takes it)",
            ))
        }
    };
    if (private_key.is_some() || private_key_file.is_some()) && id.is_none() {
        return Err(bad(
            format!("{f}.client_id"),
            "private_key_jwt needs it (the assertion's iss and sub)",
        ));
    }
    match grant.as_deref() {
        Some("client_credentials") => {
            if id.is_none() {
                return Err(bad(
                    format!("{f}.client_id"),
                    "the client_credentials grant needs it",
                ));
            }
            let ways = [
                secret.is_some(),
                private_key.is_some(),
                private_key_file.is_some(),
            ];
            if ways.iter().filter(|w| **w).count() != 1 {
                return Err(bad(
                    format!("{f}.grant"),
                    "client_credentials needs exactly one of client_secret, private_key, \
                     private_key_file",
                ));
            }
        }
        Some("jwt_bearer") => {
            if workload_token_file.is_some() == token_exchange.is_some() {
                return Err(bad(
                    format!("{f}.grant"),
                    "jwt_bearer needs exactly one of workload_token_file (workload identity) \
                     and token_exchange (enterprise-managed authorization)",
                ));
            }
            if token_exchange.is_some() && id.is_none() {
                return Err(bad(
                    format!("{f}.client_id"),
                    "enterprise-managed authorization needs it (the identity assertion names it)",
                ));
            }
            if private_key.is_some() && private_key_file.is_some() {
                return Err(bad(
                    format!("{f}.private_key_file"),
                    "give private_key or private_key_file, not both",
                ));
            }
        }
        _ => {
            if id.is_none() && metadata_url.is_none() {
                return Err(bad(
                    format!("{f}.client_id"),
                    "is required (or a metadata_url)",
                ));
            }
        }
    }
    let mut c = Map::new();
    for (k, v) in [
        ("client_id", id),
        ("client_secret", secret),
        ("metadata_url", metadata_url),
        ("grant", grant),
        ("private_key", private_key),
        ("private_key_file", private_key_file),
        ("workload_token_file", workload_token_file),
    ] {
        if let Some(v) = v {
            c.insert(k.into(), Value::String(v));
        }
    }
    if let Some(x) = token_exchange {
        c.insert("token_exchange".into(), x);
    }
    if let Some(d) = dpop {
        c.insert("dpop".into(), d);
    }
    Ok(c)
}

/// `oauth_client.token_exchange`: the enterprise identity provider's token endpoint, the file
/// holding the user's ID token, and albedo's client there.
pub(super) fn token_exchange(f: &str, x: &Map<String, Value>) -> Result<Value, PatchError> {
    const FIELDS: [&str; 4] = [
        "idp_token_endpoint",
        "id_token_file",
        "idp_client_id",
        "idp_client_secret",
    ];
    let mut out = Map::new();
    for (k, v) in x {
        if !FIELDS.contains(&k.as_str()) {
            return Err(bad(
                format!("{f}.{k}"),
                format!("unknown field (known: {})", FIELDS.join(", ")),
            ));
        }
        match given(&format!("{f}.{k}"), v)? {
            Given::Set(s) => {
                out.insert(k.clone(), Value::String(s.to_owned()));
            }
            Given::Keep | Given::Remove => {}
        }
    }
    let endpoint = out.get("idp_token_endpoint").and_then(Value::as_str);
    if !endpoint.is_some_and(|u| {
        url::Url::parse(u).is_ok_and(|u| matches!(u.scheme(), "https" | "http") && u.has_host())
    }) {
        return Err(bad(
            format!("{f}.idp_token_endpoint"),
            "is required: the http(s) URL of the identity provider's token endpoint",
        ));
    }
    if !out
        .get("id_token_file")
        .and_then(Value::as_str)
        .is_some_and(|p| std::path::Path::new(p).is_absolute())
    {
        return Err(bad(
            format!("{f}.id_token_file"),
            "is required: the absolute path of the file holding the user's ID token",
        ));
    }
    Ok(Value::Object(out))
}
