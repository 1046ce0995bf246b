//! OAuth for services through the built daemon (issue 20): a server whose `oauth_client`
//! names `grant: client_credentials` gets its token without a browser, against our own
//! authorization server (`tests/servers/fastmcp_client_credentials.py`: FastMCP's bearer check
//! in front, an authorization server that allows only the client credentials grant and counts
//! its grants; no packaged server offers these grants).
//!
//! Tool calls go through with no sign-in (client credentials with a secret, or
//! `private_key_jwt` with an ES256 key file or an RS256 PEM in creds.json, keys made by
//! `openssl genpkey`; and the JWT bearer grant with a
//! workload token file, read again on each use; enterprise-managed authorization: the ID token
//! exchanged at an identity provider, then the JWT bearer grant; DPoP-bound, with a fresh proof per request and
//! the nonces of the authorization server and the MCP endpoint honoured); a token near its expiry is renewed once however many
//! sessions call at once (counted at the authorization server); a refused grant
//! (`unauthorized_client`) leaves the server out with the authorization server's words in its
//! `auth.reason` and a warning in the log, and is not tried again; no secret, key or token
//! reaches the log, an API answer or extensions.json. The settings refuse an unusable
//! configuration naming its field.

mod common;
use common::oauth::{count, creds, issued, Recorded};
use common::*;
use serde_json::{json, Value};
use std::time::{Duration, Instant};

const SECRET: &str = "svc-secret-9f8e7d6c5b4a";

/// Our authorization server and MCP server (see its docstring), recording in its folder.
fn peer(extra: &[&str]) -> HttpPeer {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().display().to_string();
    let mut args = vec![
        server_script("fastmcp_client_credentials.py"),
        "--record-dir".into(),
        d,
        "--client-secret".into(),
        SECRET.into(),
    ];
    args.extend(extra.iter().map(|s| s.to_string()));
    HttpPeer::start_in(dir, &venv_python(), &args, "http")
}

/// The API, keeping every answer's text (to look for secrets in it).
type Api<'a> = Recorded<'a>;

impl Recorded<'_> {
    fn patch(&self, body: Value) -> (u16, Value) {
        self.req("PATCH", "/settings/mcp", Some(body))
    }

    fn auth(&self, name: &str) -> Value {
        let (_, v) = self.req("GET", "/settings/mcp", None);
        v["servers"][name]["auth"].clone()
    }

    fn session(&self) -> String {
        let (st, v) = self.req("POST", "/sessions", Some(json!({})));
        assert_eq!(st, 201, "{v}");
        v["id"].as_str().unwrap().to_owned()
    }

    fn call(&self, id: &str, args: Value) -> (u16, Value) {
        self.req(
            "POST",
            &format!("/sessions/{id}/tools/mcp__cc__echo/call"),
            Some(json!({ "arguments": args })),
        )
    }
}

/// Save server `cc` with the client credentials grant (`secret` its client secret).
fn save(api: &Api, url: &str, secret: &str) -> Value {
    let (st, v) = api.patch(json!({
        "servers": {"cc": {"type": "http", "url": url}},
        "secrets": {"cc": {"oauth_client": {
            "client_id": "svc-client", "client_secret": secret, "grant": "client_credentials"}}}
    }));
    assert_eq!(st, 200, "{v}");
    v
}

/// No secret (the client secret, every token granted) in the log, any answer, the settings or
/// extensions.json.
fn nothing_leaked(api: &Api, peer: &HttpPeer) {
    let mut secrets = issued(peer);
    secrets.push(SECRET.to_owned());
    api.assert_none_reached(&secrets);
}

#[test]
fn client_credentials_serve_calls_without_a_sign_in_and_renew_once_for_concurrent_calls() {
    // 70 s tokens: fresh for 10 s, then renewed before use (the 60 s margin); each grant takes
    // a second, so concurrent grants would overlap.
    let peer = peer(&["--token-ttl", "70", "--grant-delay", "1"]);
    let d = Daemon::start(json!({"enabled": {"mcp": true}}));
    let api = Api::new(&d);
    let v = save(&api, &peer.url, SECRET);
    assert_eq!(v["tested"]["cc"]["state"], "connected", "{v}");
    let at = Instant::now();
    let ids: Vec<String> = (0..4).map(|_| api.session()).collect();
    for id in &ids {
        let (st, v) = api.call(id, json!({"message": "a"}));
        assert_eq!(st, 200, "{v}\n{}", d.log());
        assert_eq!(v["content"][0]["text"], "a");
    }
    // The settings show the token in use at once (creds.json gets it in the background).
    let auth = api.auth("cc");
    assert_eq!(auth["state"], "signed_in", "{auth}");
    assert_eq!(auth["grant"], "client_credentials", "{auth}");
    assert!(auth["expires_at"].as_u64().is_some(), "{auth}");
    // There is no browser sign-in for it.
    let (st, v) = api.req("PUT", "/auth/logins/mcp:cc", Some(json!({})));
    assert_eq!(st, 409, "{v}");
    assert_eq!(v["error"]["code"], "no_sign_in", "{v}");
    assert_eq!(count(&peer, "authorize"), 0, "no browser grant was tried");
    // The authorization server lists no authorization endpoint (client credentials only): a
    // server saved without a grant of its own cannot be signed in to in a browser, and is
    // told why.
    let (st, v) = api.patch(json!({"servers": {"plain": {"type": "http", "url": peer.url}}}));
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["tested"]["plain"]["state"], "needs_sign_in", "{v}");
    let (st, v) = api.req("PUT", "/auth/logins/mcp:plain", Some(json!({})));
    assert!(st >= 400, "{st} {v}");
    let said = v.to_string();
    assert!(
        said.contains("no sign-in in a browser") && said.contains("client_credentials"),
        "{v}"
    );
    assert_eq!(count(&peer, "authorize"), 0, "no browser grant was tried");
    if at.elapsed() < Duration::from_secs(9) {
        // One for the strict save's trial (creds.json did not hold the server yet), one for
        // the sessions, whatever their number.
        assert!(count(&peer, "grants") <= 2, "one token for the sessions");
    }
    let before = count(&peer, "grants");
    std::thread::sleep(Duration::from_secs(11));
    let barrier = std::sync::Barrier::new(ids.len());
    let answers: Vec<(u16, Value)> = std::thread::scope(|s| {
        let hs: Vec<_> = ids
            .iter()
            .enumerate()
            .map(|(i, id)| {
                let barrier = &barrier;
                let d = &d;
                s.spawn(move || {
                    barrier.wait();
                    d.call(id, "mcp__cc__echo", json!({"message": format!("m{i}")}))
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for (i, (st, v)) in answers.into_iter().enumerate() {
        assert_eq!(st, 200, "{v}");
        assert_eq!(v["content"][0]["text"], format!("m{i}"), "{v}");
    }
    assert_eq!(
        count(&peer, "grants"),
        before + 1,
        "one new grant for all the calls"
    );
    assert_eq!(count(&peer, "refused"), 0);
    // The token is kept in creds.json (0600), never in extensions.json.
    assert!(wait_until(Duration::from_secs(10), || {
        let c = creds(&d);
        c["mcp"]["cc"]["oauth"]["access_token"].as_str() == issued(&peer).last().map(|s| s.as_str())
    }));
    nothing_leaked(&api, &peer);
}

#[test]
fn a_refused_grant_leaves_the_server_out_with_the_reason_and_is_not_tried_again() {
    let peer = peer(&["--refuse-client", "svc-client"]);
    let d = Daemon::start(json!({"enabled": {"mcp": true}}));
    let api = Api::new(&d);
    let v = save(&api, &peer.url, SECRET);
    assert_eq!(v["tested"]["cc"]["state"], "needs_sign_in", "{v}");
    let tried = v["tested"]["cc"]["last_error"].as_str().unwrap_or_default();
    assert!(tried.contains("unauthorized_client"), "{v}");
    // The strict save's trial was refused; the sessions after it keep that refusal of the
    // same configuration: the grant was asked for once in all.
    let id = api.session();
    let (st, v) = api.call(&id, json!({"message": "x"}));
    assert_ne!(st, 200, "{v}");
    let refused = count(&peer, "refused");
    assert_eq!(refused, 1, "the refused grant was asked again");
    let auth = api.auth("cc");
    assert_eq!(auth["state"], "needs_sign_in", "{auth}");
    let reason = auth["reason"].as_str().unwrap_or_default();
    assert!(
        reason.contains("unauthorized_client") && reason.contains("client_credentials"),
        "{auth}"
    );
    assert!(reason.contains("not retried"), "{auth}");
    // Sessions leave it out, and their calls do not run; the grant is not asked again.
    for _ in 0..2 {
        let id = api.session();
        let (st, v) = api.call(&id, json!({"message": "x"}));
        assert_ne!(st, 200, "{v}");
    }
    assert_eq!(
        count(&peer, "refused"),
        refused,
        "the refused grant was tried again"
    );
    assert_eq!(count(&peer, "grants"), 0);
    assert!(
        d.log().contains("refused the grant"),
        "no warning in the log"
    );
    // Saving the same configuration again does not ask again; a restart does not either
    // (the refusal is kept in creds.json with the configuration it was made to).
    let same = json!({"secrets": {"cc": {"oauth_client": {
        "client_id": "svc-client", "client_secret": SECRET, "grant": "client_credentials"}}}});
    let (st, v) = api.patch(same);
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["tested"]["cc"]["state"], "needs_sign_in", "{v}");
    assert_eq!(
        count(&peer, "refused"),
        refused,
        "asked again on the same configuration"
    );
    nothing_leaked(&api, &peer);
    let d = d.restart();
    let api = Api::new(&d);
    let id = api.session();
    let (st, v) = api.call(&id, json!({"message": "x"}));
    assert_ne!(st, 200, "{v}");
    assert_eq!(api.auth("cc")["state"], "needs_sign_in");
    assert_eq!(
        count(&peer, "refused"),
        refused,
        "asked again after a restart"
    );
    // A new configuration gets a new try.
    let (st, v) = api.patch(json!({"secrets": {"cc": {"oauth_client": {"client_id": "other"}}}}));
    assert_eq!(st, 200, "{v}");
    assert_eq!(api.auth("cc")["state"], "needs_sign_in");
    if count(&peer, "refused") == refused {
        let id = api.session();
        let _ = api.call(&id, json!({"message": "x"}));
    }
    assert_eq!(
        count(&peer, "refused"),
        refused + 1,
        "the new configuration was tried once"
    );
    nothing_leaked(&api, &peer);
}

#[test]
fn the_settings_refuse_an_unusable_service_configuration_naming_the_field() {
    let d = Daemon::start(json!({"enabled": {"mcp": true}}));
    let api = Api::new(&d);
    let (st, v) = api.patch(json!({"servers": {"x": {"type": "http",
        "url": "http://127.0.0.1:9/mcp", "enabled": false}}}));
    assert_eq!(st, 200, "{v}");
    for (client, field) in [
        (
            json!({"client_id": "a", "grant": "password"}),
            "secrets.x.oauth_client.grant",
        ),
        (
            json!({"client_id": "a", "grant": "client_credentials"}),
            "secrets.x.oauth_client.grant",
        ),
        (
            json!({"client_id": "a", "grant": "client_credentials",
                   "private_key": "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n"}),
            "secrets.x.oauth_client.private_key",
        ),
        (
            json!({"grant": "jwt_bearer", "workload_token_file": "relative/token"}),
            "secrets.x.oauth_client.workload_token_file",
        ),
        (
            json!({"grant": "jwt_bearer"}),
            "secrets.x.oauth_client.grant",
        ),
        (
            json!({"client_id": "a", "grant": "jwt_bearer",
                   "token_exchange": {"idp_token_endpoint": "ftp://idp/token", "id_token_file": "/t"}}),
            "secrets.x.oauth_client.token_exchange.idp_token_endpoint",
        ),
    ] {
        let (st, v) = api.patch(json!({"secrets": {"x": {"oauth_client": client}}}));
        assert_eq!(st, 400, "{v}");
        assert_eq!(v["error"]["field"], field, "{v}");
    }
    // A workload identity configuration is saved to creds.json, nothing of it elsewhere.
    let (st, v) = api.patch(json!({"secrets": {"x": {"oauth_client": {
        "grant": "jwt_bearer", "workload_token_file": "/var/run/secrets/tokens/mcp"}}}}));
    assert_eq!(st, 200, "{v}");
    let ext = std::fs::read_to_string(d.home.path().join("extensions.json")).unwrap();
    assert!(!ext.contains("workload_token_file"), "{ext}");
    assert_eq!(api.auth("x")["grant"], "jwt_bearer");
}

#[test]
fn a_workload_token_file_is_exchanged_with_the_jwt_bearer_grant_and_read_on_each_use() {
    let dir = tempfile::tempdir().unwrap();
    let trusted = dir.path().join("trusted");
    let workload = dir.path().join("workload-token");
    let first = "workload-jwt-aaaaaaaaaaaaaaaa";
    std::fs::write(&trusted, first).unwrap();
    std::fs::write(&workload, format!("{first}\n")).unwrap();
    let peer = peer(&[
        "--jwt-bearer-file",
        trusted.to_str().unwrap(),
        "--token-ttl",
        "3600",
    ]);
    let d = Daemon::start(json!({"enabled": {"mcp": true}}));
    let api = Api::new(&d);
    let (st, v) = api.patch(json!({
        "servers": {"cc": {"type": "http", "url": peer.url}},
        "secrets": {"cc": {"oauth_client": {"grant": "jwt_bearer",
            "workload_token_file": workload.to_str().unwrap()}}}
    }));
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["tested"]["cc"]["state"], "connected", "{v}");
    let id = api.session();
    let (st, v) = api.call(&id, json!({"message": "w"}));
    assert_eq!(st, 200, "{v}\n{}", d.log());
    assert!(count(&peer, "jwt_bearer") >= 1);
    assert_eq!(count(&peer, "grants"), 0, "no client credentials grant");
    let auth = api.auth("cc");
    assert_eq!(auth["state"], "signed_in", "{auth}");
    assert_eq!(auth["grant"], "jwt_bearer");
    // The platform rotates the token; signing out drops the stored one, and the next dial
    // reads the file again.
    let second = "workload-jwt-bbbbbbbbbbbbbbbb";
    std::fs::write(&trusted, second).unwrap();
    std::fs::write(&workload, second).unwrap();
    let before = count(&peer, "jwt_bearer");
    let (st, v) = api.patch(json!({"secrets": {"cc": {"oauth": null}}}));
    assert_eq!(st, 200, "{v}");
    let id = api.session();
    let (st, v) = api.call(&id, json!({"message": "x"}));
    assert_eq!(st, 200, "{v}\n{}", d.log());
    assert!(count(&peer, "jwt_bearer") > before);
    assert_eq!(count(&peer, "refused"), 0);
    let mut secrets = issued(&peer);
    secrets.extend([first.to_owned(), second.to_owned()]);
    api.assert_none_reached(&secrets);
}

#[test]
fn a_dpop_bound_token_goes_with_a_fresh_proof_on_every_request_and_nonces_are_honoured() {
    // The authorization server and the MCP endpoint both demand DPoP and a nonce.
    // Tokens live 4 s, so that one is renewed while the test runs.
    let peer = peer(&[
        "--dpop",
        "--dpop-nonce",
        "nonce-from-the-server",
        "--token-ttl",
        "4",
    ]);
    let d = Daemon::start(json!({"enabled": {"mcp": true}}));
    let api = Api::new(&d);
    let v = save(&api, &peer.url, SECRET);
    assert_eq!(v["tested"]["cc"]["state"], "connected", "{v}\n{}", d.log());
    let id = api.session();
    for m in ["a", "b"] {
        let (st, v) = api.call(&id, json!({"message": m}));
        assert_eq!(st, 200, "{v}\n{}", d.log());
        assert_eq!(v["content"][0]["text"], m);
    }
    assert!(
        count(&peer, "as_nonce") >= 1,
        "the token endpoint's nonce was asked for"
    );
    // A renewal (past half the 4 s life) starts with the token endpoint's nonce it was given:
    // no second challenge.
    let challenged = count(&peer, "as_nonce");
    let grants = count(&peer, "grants");
    assert!(wait_until(Duration::from_secs(20), || {
        let (st, v) = api.call(&id, json!({"message": "again"}));
        assert_eq!(st, 200, "{v}\n{}", d.log());
        std::thread::sleep(Duration::from_millis(200));
        count(&peer, "grants") > grants
    }));
    assert_eq!(
        count(&peer, "as_nonce"),
        challenged,
        "the renewal did not use the remembered nonce"
    );
    assert!(
        count(&peer, "rs_nonce") >= 1,
        "the MCP endpoint's nonce was asked for"
    );
    assert!(count(&peer, "dpop_ok") >= 3, "requests with valid proofs");
    assert_eq!(
        count(&peer, "dpop_bad"),
        0,
        "a missing, replayed or bad proof"
    );
    // The key is kept with the token it is bound to, in creds.json only.
    let mut key = String::new();
    assert!(wait_until(Duration::from_secs(10), || {
        let c = creds(&d);
        let r = &c["mcp"]["cc"]["oauth"];
        key = r["dpop_key"]["pkcs8"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        r["token_type"] == "DPoP" && !key.is_empty()
    }));
    for text in [
        d.log(),
        api.seen.borrow().clone(),
        std::fs::read_to_string(d.home.path().join("extensions.json")).unwrap_or_default(),
    ] {
        assert!(!text.contains(&key), "the DPoP key leaked");
    }
    nothing_leaked(&api, &peer);
}

/// A key pair made with openssl in `dir`: (private PKCS#8 PEM, public PEM).
fn key_pair(dir: &std::path::Path, kind: &str) -> (String, std::path::PathBuf) {
    let private = dir.join(format!("{kind}.pem"));
    let public = dir.join(format!("{kind}.pub.pem"));
    let algo: &[&str] = if kind == "ec" {
        &["-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256"]
    } else {
        &["-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048"]
    };
    let ok = std::process::Command::new("openssl")
        .arg("genpkey")
        .args(algo)
        .arg("-out")
        .arg(&private)
        .status()
        .unwrap()
        .success();
    assert!(ok, "openssl genpkey");
    let ok = std::process::Command::new("openssl")
        .args(["pkey", "-pubout", "-in"])
        .arg(&private)
        .arg("-out")
        .arg(&public)
        .status()
        .unwrap()
        .success();
    assert!(ok, "openssl pkey -pubout");
    (std::fs::read_to_string(&private).unwrap(), public)
}

#[test]
fn private_key_jwt_from_a_key_file_and_from_a_stored_pem() {
    let dir = tempfile::tempdir().unwrap();
    let d = Daemon::start(json!({"enabled": {"mcp": true}}));
    let api = Api::new(&d);
    let mut pems = Vec::new();
    for (kind, name) in [("ec", "ec"), ("rsa", "rs")] {
        let (pem, public) = key_pair(dir.path(), kind);
        let peer = peer(&["--client-public-key", public.to_str().unwrap()]);
        // ES256 from a file the daemon reads on each use; RS256 from a PEM in creds.json.
        let client = if kind == "ec" {
            let path = dir.path().join("ec.pem");
            json!({"grant": "client_credentials", "client_id": "svc-client",
                   "private_key_file": path.to_str().unwrap()})
        } else {
            json!({"grant": "client_credentials", "client_id": "svc-client", "private_key": pem})
        };
        let (st, v) = api.patch(json!({
            "servers": {name: {"type": "http", "url": peer.url}},
            "secrets": {name: {"oauth_client": client}}
        }));
        assert_eq!(st, 200, "{v}");
        assert_eq!(v["tested"][name]["state"], "connected", "{v}\n{}", d.log());
        let id = api.session();
        let (st, v) = api.req(
            "POST",
            &format!("/sessions/{id}/tools/mcp__{name}__echo/call"),
            Some(json!({"arguments": {"message": "k"}})),
        );
        assert_eq!(st, 200, "{v}");
        assert!(
            count(&peer, "assertions") >= 1,
            "the client assertion was verified"
        );
        assert_eq!(count(&peer, "refused"), 0);
        pems.push(pem);
        let mut secrets = issued(&peer);
        // The key's base64 body, line by line.
        secrets.extend(
            pems.iter()
                .flat_map(|p| p.lines().filter(|l| !l.starts_with("-----")))
                .map(str::to_owned),
        );
        for s in secrets.iter().filter(|s| s.len() >= 16) {
            for text in [
                d.log(),
                api.seen.borrow().clone(),
                std::fs::read_to_string(d.home.path().join("extensions.json")).unwrap(),
            ] {
                assert!(!text.contains(s.as_str()), "a secret leaked");
            }
        }
    }
}

#[test]
fn enterprise_managed_authorization_exchanges_the_id_token_then_uses_the_jwt_bearer_grant() {
    let dir = tempfile::tempdir().unwrap();
    let id_token_file = dir.path().join("id_token");
    let id_token = "user-id-token-cccccccccccccccc";
    std::fs::write(&id_token_file, id_token).unwrap();
    let peer = peer(&["--idp-id-token-file", id_token_file.to_str().unwrap()]);
    let d = Daemon::start(json!({"enabled": {"mcp": true}}));
    let api = Api::new(&d);
    let base = peer.url.trim_end_matches("/mcp").to_owned();
    let (st, v) = api.patch(json!({
        "servers": {"cc": {"type": "http", "url": peer.url}},
        "secrets": {"cc": {"oauth_client": {"grant": "jwt_bearer",
            "client_id": "svc-client", "client_secret": SECRET,
            "token_exchange": {"idp_token_endpoint": format!("{base}/idp/token"),
                "id_token_file": id_token_file.to_str().unwrap(), "idp_client_id": "albedo"}}}}
    }));
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["tested"]["cc"]["state"], "connected", "{v}\n{}", d.log());
    let id = api.session();
    let (st, v) = api.call(&id, json!({"message": "e"}));
    assert_eq!(st, 200, "{v}");
    assert!(count(&peer, "exchanges") >= 1);
    assert!(count(&peer, "jwt_bearer") >= 1);
    assert_eq!(count(&peer, "refused"), 0);
    let mut secrets = issued(&peer);
    secrets.push(id_token.to_owned());
    for s in &secrets {
        for text in [
            d.log(),
            api.seen.borrow().clone(),
            std::fs::read_to_string(d.home.path().join("extensions.json")).unwrap(),
        ] {
            assert!(!text.contains(s.as_str()), "a secret leaked");
        }
    }
    nothing_leaked(&api, &peer);
}

#[test]
fn a_refused_workload_token_is_reported_as_it_is_and_never_switched_to_another_grant() {
    // The authorization server trusts one workload token; the file holds another. The
    // configuration also names a client and its secret, so a client credentials grant
    // could be tried instead: it never is.
    let dir = tempfile::tempdir().unwrap();
    let (trusted, workload) = (dir.path().join("trusted"), dir.path().join("workload"));
    std::fs::write(&trusted, "workload-jwt-trusted-aaaaaaaa").unwrap();
    std::fs::write(&workload, "workload-jwt-untrusted-bbbbbbbb").unwrap();
    let peer = peer(&["--jwt-bearer-file", trusted.to_str().unwrap()]);
    let d = Daemon::start(json!({"enabled": {"mcp": true}}));
    let api = Api::new(&d);
    let (st, v) = api.patch(json!({
        "servers": {"cc": {"type": "http", "url": peer.url}},
        "secrets": {"cc": {"oauth_client": {"grant": "jwt_bearer",
            "client_id": "svc-client", "client_secret": SECRET,
            "workload_token_file": workload.to_str().unwrap()}}}
    }));
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["tested"]["cc"]["state"], "needs_sign_in", "{v}");
    let tried = v["tested"]["cc"]["last_error"].as_str().unwrap_or_default();
    assert!(tried.contains("invalid_grant"), "{v}");
    for _ in 0..2 {
        let id = api.session();
        let (st, v) = api.call(&id, json!({"message": "x"}));
        assert_ne!(st, 200, "{v}");
    }
    let auth = api.auth("cc");
    assert_eq!(auth["state"], "needs_sign_in", "{auth}");
    assert_eq!(auth["grant"], "jwt_bearer", "{auth}");
    assert!(
        auth["reason"]
            .as_str()
            .unwrap_or_default()
            .contains("invalid_grant"),
        "{auth}"
    );
    assert_eq!(count(&peer, "refused"), 1, "the refused grant was retried");
    assert_eq!(count(&peer, "grants"), 0, "switched to client credentials");
    assert_eq!(count(&peer, "jwt_bearer"), 0);
    let mut secrets = vec![SECRET.to_owned(), "workload-jwt-untrusted-bbbbbbbb".into()];
    secrets.extend(issued(&peer));
    api.assert_none_reached(&secrets);
}

#[test]
fn a_dpop_key_is_kept_with_its_token_across_a_restart() {
    // The token is bound to the key's thumbprint at the authorization server: after a
    // restart the daemon uses the stored token with the stored key (a new key would make
    // every proof bad), and asks for no new token.
    let peer = peer(&["--dpop", "--token-ttl", "3600"]);
    let d = Daemon::start(json!({"enabled": {"mcp": true}}));
    let api = Api::new(&d);
    let v = save(&api, &peer.url, SECRET);
    assert_eq!(v["tested"]["cc"]["state"], "connected", "{v}\n{}", d.log());
    let id = api.session();
    let (st, v) = api.call(&id, json!({"message": "before"}));
    assert_eq!(st, 200, "{v}\n{}", d.log());
    assert!(wait_until(Duration::from_secs(10), || {
        creds(&d)["mcp"]["cc"]["oauth"]["token_type"] == "DPoP"
    }));
    let (grants, ok) = (count(&peer, "grants"), count(&peer, "dpop_ok"));
    drop(api);
    let d = d.restart();
    let api = Api::new(&d);
    let id = api.session();
    let (st, v) = api.call(&id, json!({"message": "after"}));
    assert_eq!(st, 200, "{v}\n{}", d.log());
    assert_eq!(v["content"][0]["text"], "after");
    assert_eq!(
        count(&peer, "grants"),
        grants,
        "a new token after the restart"
    );
    assert!(count(&peer, "dpop_ok") > ok, "no proof after the restart");
    assert_eq!(count(&peer, "dpop_bad"), 0, "a proof with another key");
    nothing_leaked(&api, &peer);
}
