//! Signing in with OAuth through the built daemon (issue 14), against real OAuth-protected
//! servers: FastMCP 4.2.3 with its in-memory OAuth provider (`tests/servers/fastmcp_oauth.py`:
//! the Python SDK's authorization server routes, auto-approving, refresh tokens that rotate,
//! refreshes that can be slowed or refused, a record of every grant and token) and the
//! TypeScript SDK v1 example `simpleStreamableHttp.js --oauth-strict` (a separate demo
//! authorization server demanding the RFC 8707 resource).
//!
//! The sign-in API as its contract says: a server answering 401 is saved needing a sign-in;
//! `PUT /auth/logins/mcp:NAME` starts a sign-in, whose authorization URL the test follows like
//! a browser up to the redirect, then delivers the callback to the daemon's loopback (or
//! pastes it: `POST .../callback`); `GET` reports it, `DELETE` cancels it (a late callback is
//! refused); the settings report `auth`; sessions call the server's tools with the token; an
//! expiring token is refreshed once however many sessions call at once (counted at the
//! authorization server); a refused refresh means `needs_sign_in` and calls that answer
//! `not_run`; a 403 `insufficient_scope` records a step-up the next sign-in asks for; tokens
//! (the rotated refresh token included) survive a restart; no token goes to a server at
//! another URL; `oauth: null` signs out. `albedo-mcp mcp login` / `logout` do the same from the
//! command line. No token, client secret or authorization code shows in the daemon's log, an
//! API answer, the command line's output or extensions.json; creds.json is 0600.

mod common;
use common::oauth::{count, counts, creds, issued, Recorded};
use common::*;
use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::PermissionsExt;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use url::Url;

/// The API, keeping every answer's text (to look for secrets in it).
type Api<'a> = Recorded<'a>;

impl Recorded<'_> {
    fn patch(&self, body: Value) -> Value {
        let (st, v) = self.req("PATCH", "/settings/mcp", Some(body));
        assert_eq!(st, 200, "PATCH /settings/mcp: {v}");
        v
    }

    /// Save an HTTP server: it answers 401, so it is kept, needing a sign-in.
    fn add(&self, name: &str, url: &str) {
        let v = self.patch(json!({"servers": {name: {"type": "http", "url": url}}}));
        assert_eq!(v["tested"][name]["state"], "needs_sign_in", "{v}");
        assert_eq!(
            v["servers"][name]["status"]["state"], "needs_sign_in",
            "{v}"
        );
        assert_eq!(v["servers"][name]["auth"]["state"], "needs_sign_in", "{v}");
    }

    /// The server's `auth` in the settings.
    fn auth(&self, name: &str) -> Value {
        let (st, v) = self.get("/settings/mcp");
        assert_eq!(st, 200, "{v}");
        v["servers"][name]["auth"].clone()
    }

    fn login_path(name: &str) -> String {
        format!("/auth/logins/mcp:{name}")
    }

    /// `PUT`: a sign-in starts (pending, with its authorization URL).
    fn start(&self, name: &str) -> Value {
        let (st, v) = self.req("PUT", &Self::login_path(name), Some(json!({})));
        assert_eq!(st, 200, "PUT {}: {v}", Self::login_path(name));
        assert_eq!(v["login"], format!("mcp:{name}"), "{v}");
        assert_eq!(v["state"], "pending", "{v}");
        assert!(v["authorization_url"].is_string(), "{v}");
        let r = v["redirect_uri"].as_str().unwrap_or_default();
        assert!(
            r.starts_with("http://127.0.0.1:") && r.ends_with("/callback"),
            "{v}"
        );
        assert!(v["expires_in_secs"].as_u64().unwrap_or(0) > 0, "{v}");
        v
    }

    /// The sign-in's state, once it is `want` (within 30 s).
    fn wait_state(&self, name: &str, want: &str) -> Value {
        let mut last = Value::Null;
        let ok = wait_until(Duration::from_secs(30), || {
            let (_, v) = self.get(&Self::login_path(name));
            let done = v["state"] == want;
            last = v;
            done
        });
        assert!(ok, "the sign-in to {name} is not {want}: {last}");
        last
    }

    /// Sign in through the loopback: start, follow the authorization URL like a browser,
    /// deliver the callback to the daemon; wait until signed in. The callback URL.
    fn sign_in(&self, name: &str) -> String {
        let v = self.start(name);
        let loc = authorize(&v);
        let st = deliver(&loc).unwrap_or_else(|e| panic!("the loopback at {loc}: {e}"));
        assert!(st < 400, "the loopback answered {st}");
        self.wait_state(name, "signed_in");
        loc
    }

    fn session(&self) -> (String, Value) {
        let (st, v) = self.req("POST", "/sessions", Some(json!({})));
        assert_eq!(st, 201, "{v}");
        (v["id"].as_str().unwrap().to_owned(), v)
    }

    /// The session's view of server `name` once it is past `connecting` (within 15 s), with
    /// the session's MCP context lines about it under `context`.
    fn server_in(&self, id: &str, name: &str) -> Value {
        let mut last = Value::Null;
        let mut s = Value::Null;
        wait_until(Duration::from_secs(15), || {
            let (_, v) = self.get(&format!("/sessions/{id}"));
            s = v["servers"]
                .as_array()
                .into_iter()
                .flatten()
                .find(|s| s["name"] == name)
                .cloned()
                .unwrap_or(Value::Null);
            last = v;
            !s.is_null() && s["state"] != "connecting"
        });
        let context: Vec<Value> = last["context"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|c| c.as_str().is_some_and(|c| c.contains(&format!("{name:?}"))))
            .cloned()
            .collect();
        assert!(!s.is_null(), "no server {name} in the session: {last}");
        s["context"] = Value::Array(context);
        if s["state"] == "needs_sign_in" {
            assert!(
                s["context"].to_string().contains("sign in"),
                "no context line says so: {last}"
            );
        }
        s
    }

    fn call(&self, id: &str, tool: &str, args: Value) -> (u16, Value) {
        self.req(
            "POST",
            &format!("/sessions/{id}/tools/{tool}/call"),
            Some(json!({ "arguments": args })),
        )
    }

    /// A call that got through: its text.
    fn call_ok(&self, id: &str, tool: &str, args: Value) -> String {
        let (st, v) = self.call(id, tool, args);
        assert_eq!(st, 200, "{tool}: {v}");
        assert_ne!(v["isError"], true, "{tool}: {v}");
        v["content"][0]["text"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    }

    /// A call refused because the server needs a sign-in: it did not run.
    fn call_needs_sign_in(&self, id: &str, tool: &str) -> Value {
        let (st, v) = self.call(id, tool, json!({"message": "x"}));
        assert_eq!(st, 503, "{tool}: {v}");
        assert_eq!(v["outcome"], "not_run", "{v}");
        assert_eq!(v["error"]["code"], "needs_sign_in", "{v}");
        v
    }
}

fn empty_daemon() -> Daemon {
    Daemon::start(json!({"enabled": {"mcp": true}}))
}

/// The lines of a session's event stream (`GET /sessions/{id}/events`, SSE), as they come
/// (read by a thread that ends with the daemon).
fn sse_lines(d: &Daemon, id: &str) -> std::sync::Arc<std::sync::Mutex<Vec<String>>> {
    let lines = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let r = d
        .request("GET", &format!("/sessions/{id}/events"))
        .call()
        .expect("the session's events");
    let l2 = lines.clone();
    std::thread::spawn(move || {
        for l in BufReader::new(r.into_reader())
            .lines()
            .map_while(Result::ok)
        {
            l2.lock().unwrap().push(l);
        }
    });
    lines
}

/// An HTTP client that follows no redirect (a 3xx is an answer to read).
fn agent() -> ureq::Agent {
    ureq::AgentBuilder::new()
        .redirects(0)
        .timeout(Duration::from_secs(30))
        .build()
}

/// Follow a sign-in's authorization URL the way a browser does, up to the redirect to its
/// redirect URI (the authorization servers here approve at once); that redirect's target,
/// not requested.
fn authorize(signin: &Value) -> String {
    let redirect = signin["redirect_uri"].as_str().unwrap();
    let mut url = signin["authorization_url"].as_str().unwrap().to_owned();
    for _ in 0..5 {
        let r = match agent().get(&url).call() {
            Ok(r) => r,
            Err(ureq::Error::Status(st, r)) => {
                panic!("{url}: {st} {}", r.into_string().unwrap_or_default())
            }
            Err(e) => panic!("{url}: {e}"),
        };
        assert!(
            (300..400).contains(&r.status()),
            "{url}: {} (not a redirect)",
            r.status()
        );
        let loc = r.header("location").expect("a Location").to_owned();
        let next = Url::parse(&url).unwrap().join(&loc).unwrap().to_string();
        if next.starts_with(redirect) {
            return next;
        }
        url = next;
    }
    panic!("no redirect to {redirect} from {signin}")
}

/// Request a callback URL (on the daemon's loopback listener): its status, or why there was
/// none (nothing listens any more).
fn deliver(callback: &str) -> Result<u16, String> {
    match agent().get(callback).call() {
        Ok(r) => Ok(r.status()),
        Err(ureq::Error::Status(st, _)) => Ok(st),
        Err(e) => Err(e.to_string()),
    }
}

/// `callback` with its query parameter `key` set to `value`.
fn with_param(callback: &str, key: &str, value: &str) -> String {
    let mut u = Url::parse(callback).unwrap();
    let pairs: Vec<(String, String)> = u
        .query_pairs()
        .map(|(k, v)| (k.into_owned(), v.into_owned()))
        .filter(|(k, _)| k != key)
        .collect();
    u.query_pairs_mut()
        .clear()
        .extend_pairs(pairs)
        .append_pair(key, value);
    u.to_string()
}

fn param(url: &str, key: &str) -> Option<String> {
    Url::parse(url)
        .ok()?
        .query_pairs()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v.into_owned())
}

/// The server's token record in creds.json (`mcp.<name>.oauth`).
fn record(d: &Daemon, name: &str) -> Value {
    creds(d)["mcp"][name]["oauth"].clone()
}

/// Every string under a key naming a secret, anywhere in `v`.
fn secrets_in(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::Object(m) => {
            for (k, x) in m {
                if matches!(
                    k.as_str(),
                    "access_token" | "refresh_token" | "client_secret"
                ) {
                    if let Some(s) = x.as_str() {
                        out.push(s.to_owned());
                    }
                }
                secrets_in(x, out);
            }
        }
        Value::Array(a) => a.iter().for_each(|x| secrets_in(x, out)),
        _ => {}
    }
}

/// No secret (every token the server granted, every secret creds.json holds, the codes in
/// `extra`) in the daemon's log, any API answer, extensions.json or the settings; creds.json
/// is 0600.
fn nothing_leaked(api: &Api, peer: Option<&HttpPeer>, extra: &[String]) {
    let d = api.d;
    let mut secrets: Vec<String> = peer.map(issued).unwrap_or_default();
    secrets_in(&creds(d), &mut secrets);
    secrets.extend(extra.iter().cloned());
    secrets.retain(|s| s.len() >= 8);
    assert!(!secrets.is_empty(), "no secret to look for");
    api.assert_none_reached(&secrets);
    let mode = std::fs::metadata(d.home.path().join("creds.json"))
        .unwrap()
        .permissions()
        .mode()
        & 0o777;
    assert_eq!(mode, 0o600, "creds.json");
}

/// The end of a log, for a failure's message.
fn tail(log: &str) -> &str {
    let mut at = log.len().saturating_sub(6000);
    while !log.is_char_boundary(at) {
        at += 1;
    }
    &log[at..]
}

fn now_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

#[test]
fn fastmcp_signs_in_through_the_loopback_calls_tools_and_signs_out() {
    let peer = fastmcp_oauth(&[]);
    let d = empty_daemon();
    let api = Api::new(&d);
    api.add("fm", &peer.url);
    // A session opened before the sign-in: the server is left out, saying it needs one; its
    // events will tell of the sign-in.
    let (early, _) = api.session();
    assert_eq!(api.server_in(&early, "fm")["state"], "needs_sign_in");
    let events = sse_lines(&d, &early);
    // Nothing started yet; no such server; a stdio server has no sign-in.
    let (st, v) = api.get("/auth/logins/mcp:fm");
    assert_eq!(st, 404, "{v}");
    assert_eq!(v["error"]["code"], "no_sign_in", "{v}");
    let (st, v) = api.req("PUT", "/auth/logins/mcp:nosuch", Some(json!({})));
    assert_eq!(st, 404, "{v}");
    assert_eq!(v["error"]["code"], "unknown_server", "{v}");
    api.patch(
        json!({"servers": {"local": {"type": "stdio", "command": venv_python(),
        "args": [server_script("py_mcp_server.py")]}}}),
    );
    let (st, v) = api.req("PUT", "/auth/logins/mcp:local", Some(json!({})));
    assert_eq!(st, 400, "{v}");
    assert_eq!(v["error"]["code"], "not_http", "{v}");

    let started = api.start("fm");
    // The authorization request: PKCE S256, state, the RFC 8707 resource, the redirect.
    let url = started["authorization_url"].as_str().unwrap();
    assert!(
        url.starts_with(&peer.url.replace("/mcp", "/authorize")),
        "{url}"
    );
    assert_eq!(param(url, "response_type").as_deref(), Some("code"));
    assert_eq!(param(url, "code_challenge_method").as_deref(), Some("S256"));
    assert!(param(url, "code_challenge").is_some_and(|c| c.len() >= 43));
    assert!(param(url, "state").is_some_and(|s| !s.is_empty()));
    assert_eq!(param(url, "resource").as_deref(), Some(peer.url.as_str()));
    assert_eq!(
        param(url, "redirect_uri").as_deref(),
        started["redirect_uri"].as_str()
    );
    // A second PUT answers the sign-in in progress.
    let (st, again) = api.req("PUT", "/auth/logins/mcp:fm", Some(json!({})));
    assert_eq!(st, 200, "{again}");
    assert_eq!(again["authorization_url"], started["authorization_url"]);
    let (st, v) = api.get("/auth/logins/mcp:fm");
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["state"], "pending", "{v}");

    let loc = authorize(&started);
    assert_eq!(param(&loc, "state"), param(url, "state"));
    let code = param(&loc, "code").expect("a code");
    let st = deliver(&loc).expect("the daemon's loopback answers");
    assert!(st < 400, "the loopback answered {st}");
    api.wait_state("fm", "signed_in");
    // The early session heard of it, and gets the server once signed in (it reloads).
    let heard = wait_until(Duration::from_secs(10), || {
        let e = events.lock().unwrap().join("\n");
        e.contains("sign-in pending") && e.contains("sign-in signed_in")
    });
    assert!(heard, "session events: {:?}", events.lock().unwrap());
    assert!(events.lock().unwrap().iter().any(|l| l == "event: sign_in"));
    let joined = wait_until(Duration::from_secs(20), || {
        api.call(&early, "mcp__fm__echo", json!({"message": "early"}))
            .0
            == 200
    });
    assert!(
        joined,
        "the early session did not get the server: {}",
        api.server_in(&early, "fm")
    );
    assert_eq!(api.server_in(&early, "fm")["state"], "connected");

    // What the settings say: signed in, never a token.
    let auth = api.auth("fm");
    assert_eq!(auth["state"], "signed_in", "{auth}");
    assert_eq!(auth["scope"], "mcp:tools", "{auth}");
    assert!(
        auth["expires_at"].as_u64().unwrap_or(0) > now_secs(),
        "{auth}"
    );
    assert_eq!(auth["client"]["source"], "registered", "{auth}");
    // Opaque tokens and no ID token: the account is not known, and not made up.
    assert_eq!(auth["account"], Value::Null, "{auth}");
    assert!(auth["client"]["client_id"].is_string(), "{auth}");
    // The authorization server saw one registration, one authorization, one code grant, all
    // for this resource.
    let c = counts(&peer);
    assert_eq!(c["register"], 1, "{c}");
    assert_eq!(c["code"], 1, "{c}");
    assert_eq!(c["refresh"], 0, "{c}");
    assert_eq!(c["resources"], json!([peer.url]), "{c}");
    // The tokens are in creds.json, for this URL.
    let rec = record(&d, "fm");
    assert_eq!(rec["server_url"], peer.url.as_str(), "{rec}");
    let access = rec["access_token"]
        .as_str()
        .expect("an access token stored");
    assert!(issued(&peer).iter().any(|t| t == access));
    assert!(rec["refresh_token"].is_string());
    assert_eq!(auth["client"]["client_id"], rec["client"]["client_id"]);

    // A session calls its tools with the token.
    let (id, _) = api.session();
    assert_eq!(api.server_in(&id, "fm")["state"], "connected");
    assert_eq!(
        api.call_ok(&id, "mcp__fm__echo", json!({"message": "hi"})),
        "hi"
    );
    let who: Value = serde_json::from_str(&api.call_ok(&id, "mcp__fm__whoami", json!({}))).unwrap();
    assert_eq!(who["client_id"], rec["client"]["client_id"], "{who}");
    assert_eq!(who["scopes"], json!(["mcp:tools"]), "{who}");
    assert_eq!(
        api.call_ok(&id, "mcp__fm__add", json!({"a": 2, "b": 3})),
        "5"
    );
    nothing_leaked(&api, Some(&peer), &[code]);

    // Sign out: the tokens are gone from creds.json, the server needs a sign-in again.
    let v = api.patch(json!({"secrets": {"fm": {"oauth": null}}}));
    assert_eq!(v["servers"]["fm"]["auth"]["state"], "signed_out", "{v}");
    assert!(
        record(&d, "fm")["access_token"].is_null(),
        "{}",
        record(&d, "fm")
    );
    assert_eq!(api.auth("fm")["state"], "signed_out");
    // A new session leaves it out (its fingerprint changed: no saved catalogue), saying it
    // needs a sign-in; a call by name answers that it needs one and did not run.
    let (id2, _) = api.session();
    assert_eq!(api.server_in(&id2, "fm")["state"], "needs_sign_in");
    api.call_needs_sign_in(&id2, "mcp__fm__echo");
    api.call_needs_sign_in(&id2, "fm%2Fecho");
    // The session that used the server before: its calls do not run either.
    api.call_needs_sign_in(&id, "mcp__fm__echo");
    // A tool of no server is still 404.
    let (st, v) = api.call(&id2, "mcp__nosuch__echo", json!({}));
    assert_eq!(st, 404, "{v}");
    nothing_leaked(&api, Some(&peer), &[]);
}

#[test]
fn a_pasted_callback_url_signs_in_and_a_forged_or_refused_one_does_not() {
    // This authorization server also answers an OpenID Connect ID token: the account shows.
    let peer = fastmcp_oauth(&["--id-token-email", "ada@example.com"]);
    let d = empty_daemon();
    let api = Api::new(&d);
    api.add("fm", &peer.url);
    let started = api.start("fm");
    let loc = authorize(&started);
    let cb = "/auth/logins/mcp:fm/callback";
    // Another state: refused, and the sign-in goes on.
    let forged = with_param(&loc, "state", "forged-state");
    let (st, v) = api.req("POST", cb, Some(json!({ "url": forged })));
    assert_eq!(st, 400, "{v}");
    assert_eq!(v["error"]["code"], "bad_callback", "{v}");
    assert_eq!(api.get("/auth/logins/mcp:fm").1["state"], "pending");
    assert_eq!(count(&peer, "code"), 0);
    // The real one, pasted.
    let (st, v) = api.req("POST", cb, Some(json!({ "url": loc })));
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["state"], "signed_in", "{v}");
    let auth = api.auth("fm");
    assert_eq!(auth["state"], "signed_in");
    assert_eq!(auth["account"], "ada@example.com", "{auth}");
    assert_eq!(record(&d, "fm")["account"], "ada@example.com");
    // The same callback on the loopback afterwards is not exchanged again.
    // (Or nothing listens any more.)
    if let Ok(st) = deliver(&loc) {
        assert!(st >= 400, "a second callback was taken: {st}");
    }
    let _ = api.req("POST", cb, Some(json!({ "url": loc })));
    assert_eq!(count(&peer, "code"), 1, "the code was exchanged once");
    let (id, _) = api.session();
    assert_eq!(
        api.call_ok(&id, "mcp__fm__echo", json!({"message": "pasted"})),
        "pasted"
    );

    // Signing in again, and the user refuses at the authorization server: a callback with
    // error=access_denied and the right state ends that sign-in; the tokens kept still work.
    let again = api.start("fm");
    let loc2 = authorize(&again);
    let state2 = param(&loc2, "state").unwrap();
    let mut denied = Url::parse(again["redirect_uri"].as_str().unwrap()).unwrap();
    denied
        .query_pairs_mut()
        .append_pair("error", "access_denied")
        .append_pair("error_description", "the user said no")
        .append_pair("state", &state2);
    let (st, v) = api.req("POST", cb, Some(json!({ "url": denied.to_string() })));
    assert_eq!(st, 400, "{v}");
    assert_eq!(v["error"]["code"], "bad_callback", "{v}");
    let (_, g) = api.get("/auth/logins/mcp:fm");
    assert_eq!(g["state"], "failed", "{g}");
    assert!(g["error"].is_string() || g["error"].is_object(), "{g}");
    assert_eq!(api.auth("fm")["state"], "signed_in");
    assert_eq!(
        api.call_ok(&id, "mcp__fm__echo", json!({"message": "still"})),
        "still"
    );
    let codes = [param(&loc, "code").unwrap(), param(&loc2, "code").unwrap()];
    nothing_leaked(&api, Some(&peer), &codes);
}

#[test]
fn deleting_a_sign_in_cancels_it_and_a_late_callback_is_refused() {
    let peer = fastmcp_oauth(&[]);
    let d = empty_daemon();
    let api = Api::new(&d);
    api.add("fm", &peer.url);
    let started = api.start("fm");
    let loc = authorize(&started);
    let (st, v) = api.req("DELETE", "/auth/logins/mcp:fm", None);
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["state"], "cancelled", "{v}");
    assert_eq!(api.get("/auth/logins/mcp:fm").1["state"], "cancelled");
    // The browser comes back late, on the loopback and pasted: both refused.
    if let Ok(st) = deliver(&loc) {
        assert!(st >= 400, "a cancelled sign-in took a callback: {st}");
    }
    let (st, v) = api.req(
        "POST",
        "/auth/logins/mcp:fm/callback",
        Some(json!({ "url": loc })),
    );
    assert!((400..500).contains(&st), "{st}: {v}");
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(
        count(&peer, "code"),
        0,
        "a cancelled sign-in exchanged its code"
    );
    assert_eq!(api.get("/auth/logins/mcp:fm").1["state"], "cancelled");
    assert_eq!(api.auth("fm")["state"], "needs_sign_in");
    assert!(record(&d, "fm")["access_token"].is_null());
    nothing_leaked(&api, Some(&peer), &[param(&loc, "code").unwrap()]);
}

/// Sign in to a server whose tokens live `ttl` seconds, make `n` sessions and call once in
/// each (the token is fresh: no refresh yet); the sessions, and when the sign-in ended.
fn signed_in_sessions(api: &Api, peer: &HttpPeer, n: usize) -> (Vec<String>, Instant) {
    api.add("fm", &peer.url);
    api.sign_in("fm");
    let at = Instant::now();
    let ids: Vec<String> = (0..n).map(|_| api.session().0).collect();
    for id in &ids {
        assert_eq!(
            api.call_ok(id, "mcp__fm__echo", json!({"message": "a"})),
            "a"
        );
    }
    (ids, at)
}

/// Call echo in every session at once (a thread each); every answer's status and body.
fn call_all_at_once(d: &Daemon, ids: &[String]) -> Vec<(u16, Value)> {
    let barrier = std::sync::Barrier::new(ids.len());
    std::thread::scope(|s| {
        let hs: Vec<_> = ids
            .iter()
            .enumerate()
            .map(|(i, id)| {
                let barrier = &barrier;
                s.spawn(move || {
                    barrier.wait();
                    d.call(id, "mcp__fm__echo", json!({"message": format!("m{i}")}))
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

#[test]
fn a_token_near_its_expiry_is_refreshed_once_for_sessions_calling_at_once() {
    // 70 s tokens: fresh for 10 s, then refreshed before use (the 60 s margin). The refresh
    // takes a second at the authorization server, so concurrent refreshes would overlap (and
    // the second would present a refresh token the first rotated away).
    let peer = fastmcp_oauth(&["--token-ttl", "70", "--refresh-delay", "1"]);
    let d = empty_daemon();
    let api = Api::new(&d);
    let (ids, at) = signed_in_sessions(&api, &peer, 4);
    if at.elapsed() < Duration::from_secs(9) {
        assert_eq!(count(&peer, "refresh"), 0, "{}", counts(&peer));
    }
    // Every token granted so far (a slow start may have refreshed once already) is within a
    // minute of its expiry 11 s from now.
    let before = count(&peer, "refresh");
    let first = record(&d, "fm")["access_token"].clone();
    std::thread::sleep(Duration::from_secs(11));
    for (i, (st, v)) in call_all_at_once(&d, &ids).into_iter().enumerate() {
        assert_eq!(st, 200, "{v}");
        assert_eq!(v["content"][0]["text"], format!("m{i}"), "{v}");
    }
    let c = counts(&peer);
    assert_eq!(
        c["refresh"],
        before + 1,
        "one refresh for all the calls: {c}"
    );
    assert_eq!(c["refresh_refused"], 0, "{c}");
    // Stored (in the background: the calls did not wait for the file).
    assert!(
        wait_until(Duration::from_secs(10), || record(&d, "fm")["access_token"]
            != first),
        "the new token is not stored"
    );
    let rec = record(&d, "fm");
    assert_eq!(
        issued(&peer).iter().rev().nth(1).map(String::as_str),
        rec["access_token"].as_str(),
        "the last token granted is the one stored"
    );
    // The new token is fresh: calling again refreshes nothing.
    for (st, v) in call_all_at_once(&d, &ids) {
        assert_eq!(st, 200, "{v}");
    }
    assert_eq!(count(&peer, "refresh"), before + 1);
    assert_eq!(api.auth("fm")["state"], "signed_in");
    nothing_leaked(&api, Some(&peer), &[]);
}

#[test]
fn a_token_the_server_refuses_with_401_is_refreshed_once_and_the_calls_go_through() {
    // Tokens granted without expires_in that die after 4 s: the daemon learns of the expiry
    // from the 401, refreshes once (single-flight) and posts each call again.
    let peer = fastmcp_oauth(&["--token-ttl", "4", "--hide-expiry", "--refresh-delay", "1"]);
    let d = empty_daemon();
    let api = Api::new(&d);
    let (ids, _) = signed_in_sessions(&api, &peer, 3);
    assert!(api.auth("fm")["expires_at"].is_null());
    // Every token granted so far (a slow start may have refreshed already) is dead 5 s from
    // now (4 s, and the server's whole-second expiry).
    let before = count(&peer, "refresh");
    std::thread::sleep(Duration::from_millis(5500));
    for (i, (st, v)) in call_all_at_once(&d, &ids).into_iter().enumerate() {
        assert_eq!(st, 200, "{v}\n{}\n{}", counts(&peer), tail(&d.log()));
        assert_eq!(v["content"][0]["text"], format!("m{i}"), "{v}");
    }
    let c = counts(&peer);
    assert_eq!(
        c["refresh"],
        before + 1,
        "one refresh for all the calls: {c}"
    );
    assert_eq!(c["refresh_refused"], 0, "{c}");
    assert_eq!(api.auth("fm")["state"], "signed_in");
    nothing_leaked(&api, Some(&peer), &[]);
}

#[test]
fn a_refused_refresh_asks_for_a_sign_in_and_calls_do_not_run_until_then() {
    let peer = fastmcp_oauth(&["--token-ttl", "70", "--refuse-refresh-file", "{dir}/refuse"]);
    let refuse = peer.file("refuse");
    let d = empty_daemon();
    let api = Api::new(&d);
    let (ids, _) = signed_in_sessions(&api, &peer, 1);
    let id = &ids[0];
    let redirect_before = api.get("/auth/logins/mcp:fm").1["redirect_uri"].clone();
    std::fs::write(&refuse, "").unwrap();
    std::thread::sleep(Duration::from_secs(11));
    api.call_needs_sign_in(id, "mcp__fm__echo");
    let c = counts(&peer);
    assert_eq!(c["refresh_refused"], 1, "{c}");
    // The settings say so at once: the token book's refusal, before its write to creds.json
    // (in the background) has landed.
    let auth = api.auth("fm");
    assert_eq!(auth["state"], "needs_sign_in", "{auth}");
    assert!(auth["reason"].is_string(), "{auth}");
    // Not tried again: the next call does not run either, and asks nothing of the server.
    api.call_needs_sign_in(id, "mcp__fm__echo");
    assert_eq!(count(&peer, "refresh_refused"), 1);
    // A new session lists it (its saved catalogue) as needing a sign-in; its calls say so.
    let (id3, _) = api.session();
    assert_eq!(api.server_in(&id3, "fm")["state"], "needs_sign_in");
    api.call_needs_sign_in(&id3, "mcp__fm__echo");
    // Signing in again: the registration is kept (same issuer and redirect), calls run.
    std::fs::remove_file(&refuse).unwrap();
    api.sign_in("fm");
    let redirect_now = api.get("/auth/logins/mcp:fm").1["redirect_uri"].clone();
    if redirect_now == redirect_before {
        assert_eq!(count(&peer, "register"), 1, "{}", counts(&peer));
    }
    assert_eq!(count(&peer, "code"), 2);
    let (id2, _) = api.session();
    assert_eq!(
        api.call_ok(&id2, "mcp__fm__echo", json!({"message": "back"})),
        "back"
    );
    // The session that met the refusal gets the server back too (it joins like a returning
    // server, after a moment).
    let ok = wait_until(Duration::from_secs(30), || {
        api.call(id, "mcp__fm__echo", json!({"message": "x"})).0 == 200
    });
    assert!(ok, "the first session did not get the server back");
    nothing_leaked(&api, Some(&peer), &[]);
}

#[test]
fn the_typescript_sdk_example_server_signs_in_and_answers_a_tool() {
    // --oauth-strict: its authorization server grants only for this server's resource.
    let peer = ts_oauth_example(&["--oauth-strict"]);
    let d = empty_daemon();
    let api = Api::new(&d);
    api.add("ts", &peer.url);
    let loc = api.sign_in("ts");
    let auth = api.auth("ts");
    assert_eq!(auth["state"], "signed_in", "{auth}");
    assert_eq!(auth["client"]["source"], "registered", "{auth}");
    let (id, _) = api.session();
    let text = api.call_ok(&id, "mcp__ts__greet", json!({"name": "albedo"}));
    assert_eq!(text, "Hello, albedo!");
    nothing_leaked(&api, None, &[param(&loc, "code").unwrap()]);
}

// ---- albedo-mcp mcp login / logout -------------------------------------------------------

/// `albedo-mcp ARGS --daemon <d>` with the daemon's home (its token), no browser.
fn cli(d: &Daemon, args: &[&str]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_albedo-mcp"));
    cmd.args(args)
        .arg("--daemon")
        .arg(&d.base)
        .env("ALBEDO_HOME", d.home.path())
        .env_remove("ALBEDO_DAEMON")
        .env_remove("ALBEDO_TOKEN")
        .env("ALBEDO_NO_BROWSER", "1")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    cmd
}

/// A running `albedo-mcp mcp login`, its standard output read line by line.
struct Login {
    child: Child,
    lines: std::sync::mpsc::Receiver<String>,
    stdout: Vec<String>,
}

impl Login {
    fn start(d: &Daemon, args: &[&str]) -> Login {
        let mut child = cli(d, args).spawn().expect("run albedo-mcp");
        let out = child.stdout.take().unwrap();
        let (tx, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for l in BufReader::new(out).lines().map_while(Result::ok) {
                let _ = tx.send(l);
            }
        });
        Login {
            child,
            lines,
            stdout: Vec::new(),
        }
    }

    /// The next line it prints (within 30 s).
    fn line(&mut self) -> String {
        let l = self
            .lines
            .recv_timeout(Duration::from_secs(30))
            .expect("a line from albedo-mcp mcp login");
        self.stdout.push(l.clone());
        l
    }

    /// Its exit status (within 60 s), the rest of its output and its standard error.
    fn finish(mut self) -> (i32, String, String) {
        let deadline = Instant::now() + Duration::from_secs(60);
        let status = loop {
            if let Some(s) = self.child.try_wait().unwrap() {
                break s;
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                panic!("albedo-mcp mcp login did not exit");
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        std::thread::sleep(Duration::from_millis(100));
        while let Ok(l) = self.lines.try_recv() {
            self.stdout.push(l);
        }
        let mut err = String::new();
        if let Some(mut e) = self.child.stderr.take() {
            let _ = std::io::Read::read_to_string(&mut e, &mut err);
        }
        (status.code().unwrap_or(-1), self.stdout.join("\n"), err)
    }
}

/// A sign-in's authorization URL as `GET` reports it (the command line started it).
fn pending(api: &Api, name: &str) -> Value {
    api.wait_state(name, "pending")
}

#[test]
fn mcp_login_prints_the_url_waits_for_the_callback_and_logout_signs_out() {
    let peer = fastmcp_oauth(&[]);
    let d = empty_daemon();
    let api = Api::new(&d);
    // Added from the command line: kept, and the command says how to sign in.
    let o = cli(&d, &["mcp", "add", "fm", "--url", &peer.url])
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(0), "{o:?}");
    assert!(
        out.contains("needs sign in (sign in with: albedo-mcp mcp login fm)"),
        "{out}"
    );
    assert_eq!(api.auth("fm")["state"], "needs_sign_in");
    let mut all_output = String::new();

    // Through the loopback: the URL is printed, the test's "browser" follows it.
    let mut run = Login::start(&d, &["mcp", "login", "fm"]);
    let url = run.line();
    assert!(url.starts_with("http://127.0.0.1:"), "{url}");
    assert!(url.contains("/authorize?"), "{url}");
    let signin = pending(&api, "fm");
    assert_eq!(signin["authorization_url"], url.as_str());
    let signin = json!({"authorization_url": url,
                        "redirect_uri": param(&url, "redirect_uri").unwrap()});
    let loc = authorize(&signin);
    assert!(deliver(&loc).expect("the loopback") < 400);
    let (code, out, err) = run.finish();
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(out.contains("signed in to fm"), "{out}");
    all_output.push_str(&out);
    all_output.push_str(&err);
    assert_eq!(api.auth("fm")["state"], "signed_in");
    let (id, _) = api.session();
    assert_eq!(
        api.call_ok(&id, "mcp__fm__echo", json!({"message": "cli"})),
        "cli"
    );

    // Sign out.
    let o = cli(&d, &["mcp", "logout", "fm"]).output().unwrap();
    let (out, err) = (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    );
    assert_eq!(o.status.code(), Some(0), "{out}\n{err}");
    assert!(out.contains("signed out of fm"), "{out}");
    all_output.push_str(&out);
    all_output.push_str(&err);
    assert_eq!(api.auth("fm")["state"], "signed_out");

    // Pasted, with --json: the first line is the PUT's answer, the last the final state.
    let mut run = Login::start(&d, &["mcp", "login", "fm", "--paste", "--json"]);
    let first: Value = serde_json::from_str(&run.line()).unwrap();
    assert_eq!(first["state"], "pending", "{first}");
    let loc2 = authorize(&first);
    {
        let stdin = run.child.stdin.as_mut().unwrap();
        writeln!(stdin, "{loc2}").unwrap();
    }
    let (code, out, err) = run.finish();
    assert_eq!(code, 0, "{out}\n{err}");
    let last: Value = serde_json::from_str(out.lines().last().unwrap()).unwrap();
    assert_eq!(last["state"], "signed_in", "{out}");
    all_output.push_str(&out);
    all_output.push_str(&err);
    assert_eq!(api.auth("fm")["state"], "signed_in");

    // No such server: exit 1, said the way every mcp command says it.
    let o = cli(&d, &["mcp", "login", "nosuch"]).output().unwrap();
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("no server named"));
    let o = cli(&d, &["mcp", "logout", "nosuch"]).output().unwrap();
    assert_eq!(o.status.code(), Some(1));

    // The codes never reach the output (tokens never could: the command never sees one).
    let mut secrets = issued(&peer);
    secrets.push(param(&loc, "code").unwrap());
    secrets.push(param(&loc2, "code").unwrap());
    for s in &secrets {
        assert!(!all_output.contains(s.as_str()), "a secret was printed");
    }
    nothing_leaked(&api, Some(&peer), &secrets);
}

#[test]
fn ctrl_c_during_mcp_login_cancels_the_sign_in() {
    let peer = fastmcp_oauth(&[]);
    let d = empty_daemon();
    let api = Api::new(&d);
    api.add("fm", &peer.url);
    let mut run = Login::start(&d, &["mcp", "login", "fm", "--no-browser"]);
    let url = run.line();
    assert!(url.contains("/authorize?"), "{url}");
    let st = Command::new("kill")
        .args(["-INT", &run.child.id().to_string()])
        .status()
        .unwrap();
    assert!(st.success());
    let (code, out, err) = run.finish();
    assert_eq!(code, 1, "{out}\n{err}");
    assert!(err.contains("cancelled"), "{err}");
    assert_eq!(api.get("/auth/logins/mcp:fm").1["state"], "cancelled");
    assert_eq!(api.auth("fm")["state"], "needs_sign_in");
}

/// The tokens a server's MCP endpoint was presented (`presented.txt`).
fn presented(peer: &HttpPeer) -> Vec<String> {
    std::fs::read_to_string(peer.file("presented.txt"))
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

#[test]
fn tokens_survive_a_restart_and_the_rotated_refresh_token_is_the_one_kept() {
    // Refresh tokens rotate: the one a refresh granted must be the one creds.json keeps, or
    // the next refresh after a restart presents a dead one.
    let peer = fastmcp_oauth(&["--token-ttl", "70"]);
    let d = empty_daemon();
    {
        let api = Api::new(&d);
        api.add("fm", &peer.url);
        api.sign_in("fm");
        let (id, _) = api.session();
        assert_eq!(
            api.call_ok(&id, "mcp__fm__echo", json!({"message": "1"})),
            "1"
        );
        std::thread::sleep(Duration::from_secs(11));
        assert_eq!(
            api.call_ok(&id, "mcp__fm__echo", json!({"message": "2"})),
            "2"
        );
        assert_eq!(count(&peer, "refresh"), 1);
        let granted = issued(&peer);
        let (access, refresh) = (&granted[granted.len() - 2], &granted[granted.len() - 1]);
        assert!(
            wait_until(Duration::from_secs(10), || {
                let r = record(&d, "fm");
                r["access_token"] == access.as_str() && r["refresh_token"] == refresh.as_str()
            }),
            "creds.json does not hold the refreshed tokens"
        );
        nothing_leaked(&api, Some(&peer), &[]);
    }
    let d = d.restart();
    let api = Api::new(&d);
    assert_eq!(api.auth("fm")["state"], "signed_in");
    let (id, _) = api.session();
    assert_eq!(
        api.call_ok(&id, "mcp__fm__echo", json!({"message": "3"})),
        "3"
    );
    let refreshes = count(&peer, "refresh");
    std::thread::sleep(Duration::from_secs(11));
    assert_eq!(
        api.call_ok(&id, "mcp__fm__echo", json!({"message": "4"})),
        "4"
    );
    let c = counts(&peer);
    assert_eq!(c["refresh"], refreshes + 1, "{c}");
    assert_eq!(c["refresh_refused"], 0, "{c}");
    assert_eq!(c["code"], 1, "no new sign-in: {c}");
    assert_eq!(api.auth("fm")["state"], "signed_in");
    nothing_leaked(&api, Some(&peer), &[]);
}

#[test]
fn a_token_is_never_sent_to_another_url() {
    let a = fastmcp_oauth(&[]);
    let b = fastmcp_oauth(&[]);
    let d = empty_daemon();
    let api = Api::new(&d);
    api.add("fm", &a.url);
    api.sign_in("fm");
    let (id, _) = api.session();
    assert_eq!(
        api.call_ok(&id, "mcp__fm__echo", json!({"message": "a"})),
        "a"
    );
    assert!(!presented(&a).is_empty());
    // The same name, another server: the record is for A's URL.
    let v = api.patch(json!({"servers": {"fm": {"url": b.url}}}));
    assert_eq!(v["tested"]["fm"]["state"], "needs_sign_in", "{v}");
    assert_eq!(v["servers"]["fm"]["auth"]["state"], "needs_sign_in", "{v}");
    let (id2, _) = api.session();
    assert_eq!(api.server_in(&id2, "fm")["state"], "needs_sign_in");
    api.call_needs_sign_in(&id2, "mcp__fm__echo");
    let from_a = issued(&a);
    for t in presented(&b) {
        assert!(!from_a.contains(&t), "B was sent a token A granted");
    }
    // Signing in to B: its own tokens, for its URL.
    api.sign_in("fm");
    assert_eq!(record(&d, "fm")["server_url"], b.url.as_str());
    assert_eq!(counts(&b)["resources"], json!([b.url]));
    let (id3, _) = api.session();
    assert_eq!(
        api.call_ok(&id3, "mcp__fm__echo", json!({"message": "b"})),
        "b"
    );
    for t in presented(&b) {
        assert!(!from_a.contains(&t), "B was sent a token A granted");
    }
    let mut secrets = issued(&a);
    secrets.extend(issued(&b));
    nothing_leaked(&api, Some(&b), &secrets);
}

#[test]
fn a_busy_callback_port_means_an_ephemeral_one_and_the_sign_in_still_works() {
    // Held by this test (when no other test's daemon holds it right now: busy either way).
    let held = std::net::TcpListener::bind(("127.0.0.1", 33418)).ok();
    let peer = fastmcp_oauth(&[]);
    let d = empty_daemon();
    let api = Api::new(&d);
    api.add("fm", &peer.url);
    let started = api.start("fm");
    let redirect = Url::parse(started["redirect_uri"].as_str().unwrap()).unwrap();
    assert_eq!(redirect.host_str(), Some("127.0.0.1"));
    if held.is_some() {
        assert_ne!(redirect.port(), Some(33418), "{started}");
    }
    let loc = authorize(&started);
    assert!(deliver(&loc).expect("the loopback") < 400);
    api.wait_state("fm", "signed_in");
    let (id, _) = api.session();
    assert_eq!(
        api.call_ok(&id, "mcp__fm__echo", json!({"message": "e"})),
        "e"
    );
    // The listener is gone once the sign-in is over.
    assert!(wait_until(Duration::from_secs(10), || {
        std::net::TcpStream::connect(("127.0.0.1", redirect.port().unwrap())).is_err()
    }));
    drop(held);
}

#[test]
fn a_server_whose_authorization_server_cannot_be_found_fails_to_start_a_sign_in() {
    // The Python SDK's bearer check (a static token): it answers 401 and publishes Protected
    // Resource Metadata naming an authorization server that serves no metadata.
    let peer = HttpPeer::py_with_token("static-token-never-given");
    let d = empty_daemon();
    let api = Api::new(&d);
    api.add("static", &peer.url);
    let (st, v) = api.req("PUT", "/auth/logins/mcp:static", Some(json!({})));
    assert_eq!(st, 502, "{v}");
    assert_eq!(v["error"]["code"], "sign_in_failed", "{v}");
    assert!(
        !v["error"]["message"].as_str().unwrap_or("").is_empty(),
        "{v}"
    );
    // The command line says why and exits 1.
    let o = cli(&d, &["mcp", "login", "static"]).output().unwrap();
    assert_eq!(o.status.code(), Some(1), "{o:?}");
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("sign_in_failed"),
        "{o:?}"
    );
    assert_eq!(api.auth("static")["state"], "needs_sign_in");
}

#[test]
fn two_servers_sign_in_at_once_each_on_its_own_listener() {
    let fm = fastmcp_oauth(&[]);
    let ts = ts_oauth_example(&[]);
    let d = empty_daemon();
    let api = Api::new(&d);
    api.add("fm", &fm.url);
    api.add("ts", &ts.url);
    let a = api.start("fm");
    let b = api.start("ts");
    assert_ne!(a["redirect_uri"], b["redirect_uri"], "{a} {b}");
    let (la, lb) = (authorize(&a), authorize(&b));
    // A callback delivered to the other sign-in's listener is refused there.
    let crossed = with_param(&lb, "x", "1").replace(
        b["redirect_uri"].as_str().unwrap(),
        a["redirect_uri"].as_str().unwrap(),
    );
    assert!(deliver(&crossed).expect("A's listener") >= 400);
    assert_eq!(api.get("/auth/logins/mcp:fm").1["state"], "pending");
    assert!(deliver(&lb).expect("B's listener") < 400);
    assert!(deliver(&la).expect("A's listener") < 400);
    api.wait_state("fm", "signed_in");
    api.wait_state("ts", "signed_in");
    let (id, _) = api.session();
    assert_eq!(
        api.call_ok(&id, "mcp__fm__echo", json!({"message": "f"})),
        "f"
    );
    assert_eq!(
        api.call_ok(&id, "mcp__ts__greet", json!({"name": "t"})),
        "Hello, t!"
    );
    let codes = [param(&la, "code").unwrap(), param(&lb, "code").unwrap()];
    nothing_leaked(&api, Some(&fm), &codes);
}

/// A scope list as a sorted set of words.
fn words(v: &Value) -> Vec<String> {
    let mut w: Vec<String> = match v {
        Value::String(s) => s.split_whitespace().map(str::to_owned).collect(),
        Value::Array(a) => a
            .iter()
            .filter_map(|x| x.as_str().map(str::to_owned))
            .collect(),
        _ => vec![],
    };
    w.sort();
    w.dedup();
    w
}

#[test]
fn a_403_insufficient_scope_records_a_step_up_that_the_next_sign_in_asks_for() {
    // The server needs mcp:tools and mcp:admin; the first approval grants mcp:tools only.
    let peer = fastmcp_oauth(&[
        "--scopes",
        "mcp:tools mcp:admin",
        "--required-scopes",
        "mcp:tools mcp:admin",
        "--grant-first-only",
        "mcp:tools",
    ]);
    let d = empty_daemon();
    let api = Api::new(&d);
    api.add("fm", &peer.url);
    let first = api.start("fm");
    // The challenge's scope is asked for.
    assert_eq!(
        words(&json!(param(
            first["authorization_url"].as_str().unwrap(),
            "scope"
        ))),
        ["mcp:admin", "mcp:tools"]
    );
    assert!(deliver(&authorize(&first)).expect("the loopback") < 400);
    api.wait_state("fm", "signed_in");
    assert_eq!(words(&api.auth("fm")["scope"]), ["mcp:tools"]);
    // The server refuses the token with 403 insufficient_scope: a step-up is recorded, the
    // server needs a sign-in in the session, and nothing is refreshed.
    let (id, _) = api.session();
    assert_eq!(api.server_in(&id, "fm")["state"], "needs_sign_in");
    assert!(
        wait_until(Duration::from_secs(5), || {
            words(&api.auth("fm")["step_up"]) == ["mcp:admin", "mcp:tools"]
        }),
        "{}",
        api.auth("fm")
    );
    // The settings say the server needs a sign-in, and why.
    let auth = api.auth("fm");
    assert_eq!(auth["state"], "needs_sign_in", "{auth}");
    assert!(
        auth["reason"]
            .as_str()
            .is_some_and(|r| r.contains("insufficient_scope")),
        "{auth}"
    );
    assert_eq!(count(&peer, "refresh"), 0);
    // The next sign-in asks for the step-up, and the server opens.
    let again = api.start("fm");
    assert_eq!(
        words(&json!(param(
            again["authorization_url"].as_str().unwrap(),
            "scope"
        ))),
        ["mcp:admin", "mcp:tools"]
    );
    assert!(deliver(&authorize(&again)).expect("the loopback") < 400);
    api.wait_state("fm", "signed_in");
    let auth = api.auth("fm");
    assert_eq!(words(&auth["scope"]), ["mcp:admin", "mcp:tools"], "{auth}");
    assert_eq!(auth["step_up"], json!([]), "{auth}");
    let (id2, _) = api.session();
    let who: Value =
        serde_json::from_str(&api.call_ok(&id2, "mcp__fm__whoami", json!({}))).unwrap();
    assert_eq!(words(&who["scopes"]), ["mcp:admin", "mcp:tools"], "{who}");
    nothing_leaked(&api, Some(&peer), &[]);
}
