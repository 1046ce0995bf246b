//! The API's trust boundary, against the running daemon: the token over TCP (none, wrong,
//! right), the socket (no token; private; stale and live sockets), `Host` and `Origin`, no
//! CORS, JSON-only bounded bodies, validated path parameters, JSON errors for unknown routes
//! and methods, the one-time link and the pane's cookie, the token's rotation, logs that
//! never hold a secret, the CLI, and the listening policy beyond loopback.

mod common;

use common::*;
use serde_json::{json, Value};
use std::io::{Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

/// An answer read off the wire.
#[derive(Debug)]
struct Answer {
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Answer {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
    fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or(Value::Null)
    }
    fn code(&self) -> String {
        self.json()["error"]["code"]
            .as_str()
            .unwrap_or("")
            .to_owned()
    }
    /// No header of the CORS family.
    fn no_cors(&self) -> bool {
        !self
            .headers
            .iter()
            .any(|(k, _)| k.to_ascii_lowercase().starts_with("access-control-"))
    }
}

/// One HTTP/1.1 request written by hand (so that `Host` is exactly what the test says), on
/// a fresh connection that closes after the answer.
fn exchange<S: Read + Write>(
    mut s: S,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Answer {
    let mut req = format!("{method} {path} HTTP/1.1\r\nConnection: close\r\n");
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    let chunked = headers
        .iter()
        .any(|(k, _)| k.eq_ignore_ascii_case("transfer-encoding"));
    if !chunked && (!body.is_empty() || matches!(method, "POST" | "PUT" | "PATCH")) {
        req.push_str(&format!("Content-Length: {}\r\n", body.len()));
    }
    req.push_str("\r\n");
    s.write_all(req.as_bytes()).unwrap();
    // A refused body may be cut short by the daemon; the answer is what counts.
    let _ = s.write_all(body);
    let mut raw = Vec::new();
    let _ = s.read_to_end(&mut raw);
    parse_answer(&raw)
}

fn parse_answer(raw: &[u8]) -> Answer {
    let end = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .unwrap_or_else(|| panic!("no answer head in {:?}", String::from_utf8_lossy(raw)));
    let head = String::from_utf8_lossy(&raw[..end]).into_owned();
    let mut lines = head.split("\r\n");
    let status = lines
        .next()
        .and_then(|l| l.split(' ').nth(1))
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_owned(), v.trim().to_owned()))
        .collect();
    Answer {
        status,
        headers,
        body: raw[end + 4..].to_vec(),
    }
}

fn addr(d: &Daemon) -> String {
    d.base.trim_start_matches("http://").to_owned()
}

fn port(d: &Daemon) -> u16 {
    addr(d).rsplit(':').next().unwrap().parse().unwrap()
}

/// A request over TCP with the `Host` the daemon expects unless `headers` name another.
fn tcp(d: &Daemon, method: &str, path: &str, headers: &[(&str, &str)], body: &[u8]) -> Answer {
    let a = addr(d);
    let mut h: Vec<(&str, &str)> = Vec::new();
    if !headers.iter().any(|(k, _)| k.eq_ignore_ascii_case("host")) {
        h.push(("Host", &a));
    }
    h.extend_from_slice(headers);
    let s = std::net::TcpStream::connect(&a).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    exchange(s, method, path, &h, body)
}

fn sock_path(d: &Daemon) -> PathBuf {
    d.home.path().join("albedo.sock")
}

/// A request over the daemon's socket.
fn uds(d: &Daemon, method: &str, path: &str, headers: &[(&str, &str)], body: &[u8]) -> Answer {
    let s = std::os::unix::net::UnixStream::connect(sock_path(d)).expect("the socket answers");
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    let mut h = Vec::new();
    if !headers.iter().any(|(k, _)| k.eq_ignore_ascii_case("host")) {
        h.push(("Host", "localhost"));
    }
    h.extend_from_slice(headers);
    exchange(s, method, path, &h, body)
}

/// A home only the user can enter (the daemon opens its socket only in such a home).
fn private_home(ext: Value, config: &str) -> tempfile::TempDir {
    let home = tempfile::tempdir().unwrap();
    std::fs::set_permissions(home.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
    std::fs::write(home.path().join("extensions.json"), ext.to_string()).unwrap();
    if !config.is_empty() {
        std::fs::write(home.path().join("config.toml"), config).unwrap();
    }
    home
}

fn mode(p: &Path) -> u32 {
    std::fs::metadata(p).unwrap().permissions().mode() & 0o777
}

fn echo_ext() -> Value {
    json!({"enabled": {"mcp": true}, "mcp": {"servers": {
        "fx": fixture_server("exits_mid_call.py", &[])}}})
}

const JSON: (&str, &str) = ("Content-Type", "application/json");

#[test]
fn tcp_needs_the_token_and_the_token_file_is_private() {
    let d = Daemon::start_in(private_home(json!({}), ""), &[]);
    let token_file = d.home.path().join("api-token");
    assert_eq!(mode(&token_file), 0o600);
    assert!(d.token().starts_with("albedo_") && d.token().len() >= 40);
    let bearer = d.bearer();
    // No token: 401, saying where the token is.
    let a = tcp(&d, "POST", "/sessions", &[], b"");
    assert_eq!(a.status, 401, "{a:?}");
    assert_eq!(a.code(), "unauthorized");
    let msg = a.json()["error"]["message"].as_str().unwrap().to_owned();
    assert!(msg.contains(&token_file.display().to_string()), "{msg}");
    assert!(!msg.contains(&d.token()));
    assert_eq!(
        a.header("www-authenticate"),
        Some("Bearer realm=\"albedo-mcp\"")
    );
    // A wrong token, and the right one in the wrong scheme.
    for auth in [
        "Bearer albedo_not-the-token-at-all".to_owned(),
        format!("Basic {}", d.token()),
        format!("Bearer {}x", d.token()),
    ] {
        let a = tcp(&d, "POST", "/sessions", &[("Authorization", &auth)], b"");
        assert_eq!(a.status, 401, "{auth}: {a:?}");
    }
    // The right one.
    let a = tcp(&d, "POST", "/sessions", &[("Authorization", &bearer)], b"");
    assert_eq!(a.status, 201, "{a:?}");
    assert_eq!(
        a.json()["id"].as_str().unwrap().split('-').next(),
        Some("s1")
    );
    // Every route but /healthz, including unknown ones and the pane.
    for (m, p) in [
        ("GET", "/extensions"),
        ("GET", "/sessions/s1-0/tools"),
        ("GET", "/"),
        ("GET", "/no/such/route"),
        ("POST", "/login/once"),
        ("POST", "/token/rotate"),
    ] {
        assert_eq!(tcp(&d, m, p, &[], b"").status, 401, "{m} {p}");
    }
    assert_eq!(tcp(&d, "GET", "/healthz", &[], b"").status, 200);
    // Only the session made with the token exists.
    let a = tcp(&d, "POST", "/sessions", &[("Authorization", &bearer)], b"");
    assert_eq!(
        a.json()["id"].as_str().unwrap().split('-').next(),
        Some("s2")
    );
}

#[test]
fn the_socket_needs_no_token_is_private_and_refuses_web_pages() {
    let d = Daemon::start_in(private_home(json!({}), ""), &[]);
    let s = sock_path(&d);
    assert_eq!(mode(&s), 0o600);
    assert_eq!(mode(d.home.path()), 0o700);
    // No token, a wrong one (ignored: the socket needs none), the right one.
    let bearer = d.bearer();
    for h in [
        vec![JSON],
        vec![JSON, ("Authorization", "Bearer albedo_wrong-wrong-wrong")],
        vec![JSON, ("Authorization", bearer.as_str())],
    ] {
        let a = uds(&d, "POST", "/sessions", &h, b"{}");
        assert_eq!(a.status, 201, "{h:?}: {a:?}");
    }
    // Any Host goes on the socket (no browser reaches it), but not a web page's Origin.
    let a = uds(
        &d,
        "GET",
        "/extensions",
        &[("Host", "anything.example")],
        b"",
    );
    assert_eq!(a.status, 200);
    let a = uds(
        &d,
        "GET",
        "/extensions",
        &[("Origin", "https://attacker.example")],
        b"",
    );
    assert_eq!((a.status, a.code().as_str()), (403, "origin_refused"));
}

#[test]
fn a_home_others_can_enter_gets_no_socket_and_tcp_still_works() {
    // tempfile's folders follow the umask (0755 here): the daemon warns and serves TCP only.
    let home = tempfile::tempdir().unwrap();
    std::fs::set_permissions(home.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::write(home.path().join("extensions.json"), "{}").unwrap();
    let d = Daemon::start_in(home, &[]);
    assert!(!sock_path(&d).exists());
    assert!(d.log().contains("no Unix socket"), "{}", d.log());
    assert!(d.log().contains("chmod 700"));
    assert_eq!(d.post("/sessions", json!({})).0, 201);
    assert_eq!(
        mode(d.home.path()),
        0o755,
        "the daemon changed the home's mode"
    );
}

#[test]
fn a_stale_socket_is_replaced_and_a_live_one_stops_a_second_daemon() {
    let mut a = Daemon::start_in(private_home(json!({}), ""), &[]);
    // A second daemon on the same home: it must not take the socket over.
    let err = refused_start(a.home.path(), "127.0.0.1:0");
    assert!(err.contains("another daemon answers"), "{err}");
    assert_eq!(uds(&a, "GET", "/healthz", &[], b"").status, 200);
    // Killed: the socket file stays behind, stale; the next daemon replaces it.
    a.stop(9);
    let home = std::mem::replace(&mut a.home, tempfile::tempdir().unwrap());
    assert!(home.path().join("albedo.sock").exists());
    std::fs::remove_file(home.path().join("ready")).unwrap();
    let b = Daemon::start_in(home, &[]);
    assert!(b.log().contains("removing a stale socket"), "{}", b.log());
    assert_eq!(uds(&b, "GET", "/healthz", &[], b"").status, 200);
    // A clean stop removes it.
    let path = sock_path(&b);
    drop(b);
    assert!(!path.exists());
}

#[test]
fn host_and_origin_must_be_the_daemons_own_and_no_cors_is_sent() {
    let home = private_home(json!({}), "allowed_hosts = [\"box.example\"]\n");
    let d = Daemon::start_in(home, &[]);
    let bearer = d.bearer();
    let p = port(&d);
    let auth = ("Authorization", bearer.as_str());
    let own = format!("http://127.0.0.1:{p}");
    let cases: Vec<(String, Option<String>, u16, &str)> = vec![
        (format!("127.0.0.1:{p}"), None, 200, ""),
        (format!("localhost:{p}"), None, 200, ""),
        (format!("LocalHost:{p}"), None, 200, ""),
        (format!("box.example:{p}"), None, 200, ""),
        (format!("attacker.example:{p}"), None, 403, "host_refused"),
        ("attacker.example".into(), None, 403, "host_refused"),
        (
            format!("127.0.0.1:{}", p.wrapping_add(1)),
            None,
            403,
            "host_refused",
        ),
        (
            format!("box.example.attacker.example:{p}"),
            None,
            403,
            "host_refused",
        ),
        (format!("127.0.0.1:{p}"), Some(own.clone()), 200, ""),
        (
            format!("127.0.0.1:{p}"),
            Some("https://attacker.example".into()),
            403,
            "origin_refused",
        ),
        // Another port of localhost is the same site, not the same origin.
        (
            format!("127.0.0.1:{p}"),
            Some("http://127.0.0.1:1".into()),
            403,
            "origin_refused",
        ),
        (
            format!("127.0.0.1:{p}"),
            Some("null".into()),
            403,
            "origin_refused",
        ),
    ];
    for (host, origin, want, code) in &cases {
        let mut h = vec![("Host", host.as_str()), auth];
        if let Some(o) = origin {
            h.push(("Origin", o.as_str()));
        }
        let a = tcp(&d, "GET", "/extensions", &h, b"");
        assert_eq!(a.status, *want, "Host {host} Origin {origin:?}: {a:?}");
        if !code.is_empty() {
            assert_eq!(a.code(), *code);
        }
        assert!(a.no_cors(), "{a:?}");
    }
    // A rebinding page cannot even read /healthz.
    let a = tcp(&d, "GET", "/healthz", &[("Host", "attacker.example")], b"");
    assert_eq!(a.status, 403);
    // A cross-site form post (text/plain, no token) and a CORS preflight: refused, no CORS.
    let a = tcp(
        &d,
        "POST",
        "/sessions",
        &[
            ("Origin", "https://attacker.example"),
            ("Content-Type", "text/plain"),
        ],
        b"{}",
    );
    assert_eq!((a.status, a.code().as_str()), (403, "origin_refused"));
    let a = tcp(
        &d,
        "OPTIONS",
        "/sessions",
        &[
            ("Origin", "https://attacker.example"),
            ("Access-Control-Request-Method", "POST"),
            ("Access-Control-Request-Headers", "content-type"),
        ],
        b"",
    );
    assert_eq!(a.status, 403);
    assert!(a.no_cors(), "{a:?}");
    // Fetch metadata from another site.
    let a = tcp(
        &d,
        "GET",
        "/extensions",
        &[auth, ("Sec-Fetch-Site", "cross-site")],
        b"",
    );
    assert_eq!(a.status, 403);
    // Nothing was created by the refused requests.
    let (_, v) = d.post("/sessions", json!({}));
    assert_eq!(
        v["id"].as_str().unwrap().split('-').next(),
        Some("s1"),
        "{v}"
    );
}

#[test]
fn bodies_are_json_only_and_bounded_and_parameters_are_checked() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("log");
    let ext = json!({"enabled": {"mcp": true}, "mcp": {"servers": {
        "fx": fixture_server("exits_mid_call.py", &["--log", log.to_str().unwrap()])}}});
    let d = Daemon::start_in(private_home(ext, "max_call_body_bytes = 4096\n"), &[]);
    let (id, _) = d.session(json!({}));
    let bearer = d.bearer();
    let auth = ("Authorization", bearer.as_str());
    let call = format!("/sessions/{id}/tools/mcp__fx__echo/call");
    let routes: Vec<(&str, String, &str)> = vec![
        ("PUT", "/extensions/mcp".into(), r#"{"enabled": true}"#),
        ("POST", "/extensions/mcp/reload".into(), "{}"),
        ("POST", "/sessions".into(), "{}"),
        (
            "PUT",
            format!("/sessions/{id}/extensions/mcp"),
            r#"{"enabled": true}"#,
        ),
        (
            "PUT",
            format!("/sessions/{id}/servers/fx"),
            r#"{"enabled": true}"#,
        ),
        (
            "POST",
            format!("/sessions/{id}/activity"),
            r#"{"kind": "submit"}"#,
        ),
        ("POST", call.clone(), r#"{"arguments": {"message": "x"}}"#),
        // The same call by way of actix-web's router (a `%` in the path keeps it out of the
        // hot lane, `api::hot`): refused the same way.
        (
            "POST",
            format!("/sessions/{id}/tools/fx%2Fecho/call"),
            r#"{"arguments": {"message": "x"}}"#,
        ),
    ];
    for (m, p, body) in &routes {
        // text/plain (what a form can send), with the body and empty.
        for b in [body.as_bytes(), b""] {
            let a = tcp(&d, m, p, &[auth, ("Content-Type", "text/plain")], b);
            assert_eq!(a.status, 400, "{m} {p} text/plain {b:?}: {a:?}");
            assert_eq!(a.json()["outcome"], "not_run");
        }
        // Not JSON, though it says it is.
        let a = tcp(&d, m, p, &[auth, JSON], b"enabled=true");
        assert_eq!(a.status, 400, "{m} {p}: {a:?}");
        // The real thing passes.
        let a = tcp(&d, m, p, &[auth, JSON], body.as_bytes());
        assert!(a.status < 400, "{m} {p}: {a:?}");
    }
    // Routes that need a body refuse none at all; those where it is optional take `{}`.
    let a = tcp(&d, "PUT", "/extensions/mcp", &[auth], b"");
    assert_eq!(a.status, 400);
    // Past the limits: 413 (1 MiB by default; the call's limit is set to 4 KiB here).
    let big = format!(r#"{{"enabled": true, "pad": "{}"}}"#, "x".repeat(1 << 20));
    let a = tcp(&d, "PUT", "/extensions/mcp", &[auth, JSON], big.as_bytes());
    assert_eq!(
        (a.status, a.code().as_str()),
        (413, "body_too_large"),
        "{a:?}"
    );
    let calls_before = logged(&log)
        .iter()
        .filter(|m| m["method"] == "tools/call")
        .count();
    let big_call = format!(r#"{{"arguments": {{"message": "{}"}}}}"#, "y".repeat(5000));
    let a = tcp(&d, "POST", &call, &[auth, JSON], big_call.as_bytes());
    assert_eq!(a.status, 413, "{a:?}");
    assert_eq!(a.json()["outcome"], "not_run");
    // The router's way to the call route has the call's limit too, and the same answer.
    let routed = format!("/sessions/{id}/tools/fx%2Fecho/call");
    let b = tcp(&d, "POST", &routed, &[auth, JSON], big_call.as_bytes());
    assert_eq!((b.status, b.json()), (a.status, a.json()), "{b:?}");
    // The same without a Content-Length (chunked), counted as it arrives.
    let s = std::net::TcpStream::connect(addr(&d)).unwrap();
    let chunk = big_call.as_bytes();
    let mut body = format!("{:x}\r\n", chunk.len()).into_bytes();
    body.extend_from_slice(chunk);
    body.extend_from_slice(b"\r\n0\r\n\r\n");
    let a = exchange(
        s,
        "POST",
        &call,
        &[
            ("Host", &addr(&d)),
            auth,
            JSON,
            ("Transfer-Encoding", "chunked"),
        ],
        &body,
    );
    assert_eq!(a.status, 413, "{a:?}");
    let calls_after = logged(&log)
        .iter()
        .filter(|m| m["method"] == "tools/call")
        .count();
    assert_eq!(
        calls_before, calls_after,
        "a refused call reached the server"
    );
    // Path parameters.
    for (m, p) in [
        ("GET", "/sessions/not%20an%20id".to_owned()),
        ("GET", format!("/sessions/{}", "a".repeat(65))),
        ("POST", format!("/sessions/{id}/tools/%FF%FE/call")),
        ("POST", format!("/sessions/{id}/tools/a%0Ab/call")),
        ("GET", format!("/sessions/{id}/tools/{}", "t".repeat(300))),
        ("PUT", format!("/sessions/{id}/servers/bad__name")),
        ("PUT", format!("/sessions/{id}/servers/%2E%2E")),
    ] {
        let a = tcp(&d, m, &p, &[auth, JSON], br#"{"enabled": true}"#);
        assert_eq!(a.status, 400, "{m} {p}: {a:?}");
        assert_eq!(a.code(), "bad_request");
    }
    // `server%2Ftool` still names a tool.
    let (st, v) = d.call(&id, "fx%2Fecho", json!({"message": "slash"}));
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["content"][0]["text"], "slash");
    // Unknown routes and methods: the documented JSON error.
    let a = tcp(&d, "GET", "/no/such/route", &[auth], b"");
    assert_eq!((a.status, a.code().as_str()), (404, "not_found"));
    let a = tcp(&d, "PUT", "/sessions", &[auth], b"");
    assert_eq!((a.status, a.code().as_str()), (405, "method_not_allowed"));
    assert_eq!(a.header("allow"), Some("GET, POST"));
    let a = tcp(&d, "PATCH", &format!("/sessions/{id}"), &[auth], b"");
    assert_eq!(a.status, 405);
    assert_eq!(a.header("allow"), Some("GET, DELETE"));
}

/// The pane's sign-in: link → cookie → the pane and the API, same origin only.
#[test]
fn the_one_time_link_signs_the_pane_in_once() {
    let d = Daemon::start_in(private_home(json!({}), ""), &[]);
    let p = port(&d);
    let own = format!("http://127.0.0.1:{p}");
    let a = uds(&d, "POST", "/login/once", &[], b"");
    assert_eq!(a.status, 200, "{a:?}");
    let v = a.json();
    let url = v["url"].as_str().unwrap().to_owned();
    assert!(url.starts_with(&format!("{own}/login?once=")), "{url}");
    assert_eq!(v["expires_in_secs"], 60);
    let target = url.trim_start_matches(&own).to_owned();
    // Used once: a cookie and a redirect to the pane.
    let a = tcp(&d, "GET", &target, &[], b"");
    assert_eq!(a.status, 303, "{a:?}");
    assert_eq!(a.header("location"), Some("/"));
    let set = a.header("set-cookie").unwrap().to_owned();
    for attr in ["HttpOnly", "SameSite=Strict", "Path=/"] {
        assert!(set.contains(attr), "{set}");
    }
    assert!(
        !set.contains("Secure"),
        "plain http cannot keep a Secure cookie"
    );
    let cookie = set.split(';').next().unwrap().to_owned();
    assert!(cookie.starts_with(&format!("albedo_session_{p}=")));
    // Twice: refused.
    let a = tcp(&d, "GET", &target, &[], b"");
    assert_eq!((a.status, a.code().as_str()), (401, "login_link_invalid"));
    // A made-up value too.
    let a = tcp(&d, "GET", "/login?once=00", &[], b"");
    assert_eq!(a.status, 401);
    let a = tcp(&d, "GET", "/login", &[], b"");
    assert_eq!(a.status, 400);
    // The cookie opens the pane and its files.
    let c = ("Cookie", cookie.as_str());
    let a = tcp(&d, "GET", "/", &[c], b"");
    assert_eq!(a.status, 200);
    assert!(a.header("content-type").unwrap().starts_with("text/html"));
    assert!(a
        .header("content-security-policy")
        .unwrap()
        .contains("frame-ancestors 'none'"));
    let html = String::from_utf8_lossy(&a.body);
    assert!(
        html.contains("pane.js") && html.contains("Open a session"),
        "{html}"
    );
    assert_eq!(tcp(&d, "GET", "/pane.js", &[c], b"").status, 200);
    assert_eq!(tcp(&d, "GET", "/extensions", &[c], b"").status, 200);
    // Changes need the pane's own Origin; another origin is refused, cookie or not.
    let a = tcp(&d, "POST", "/sessions", &[c, JSON], b"{}");
    assert_eq!((a.status, a.code().as_str()), (403, "origin_refused"));
    let a = tcp(
        &d,
        "POST",
        "/sessions",
        &[c, JSON, ("Origin", own.as_str())],
        b"{}",
    );
    assert_eq!(a.status, 201, "{a:?}");
    let a = tcp(
        &d,
        "POST",
        "/sessions",
        &[c, JSON, ("Origin", "https://attacker.example")],
        b"{}",
    );
    assert_eq!(a.status, 403);
    // The cookie cannot mint links or rotate the token.
    let a = tcp(
        &d,
        "POST",
        "/login/once",
        &[c, ("Origin", own.as_str())],
        b"",
    );
    assert_eq!(a.status, 403);
    let a = tcp(
        &d,
        "POST",
        "/token/rotate",
        &[c, ("Origin", own.as_str())],
        b"",
    );
    assert_eq!(a.status, 403);
    // With the token, over TCP, a link can be had too.
    let bearer = d.bearer();
    let a = tcp(
        &d,
        "POST",
        "/login/once",
        &[("Authorization", &bearer)],
        b"",
    );
    assert_eq!(a.status, 200);
}

/// A link is good for a minute of the daemon's time (the same rule on paused time in
/// `api::trust`'s unit test); here, against the running daemon, after 61 real seconds.
#[test]
fn a_one_time_link_expires_after_a_minute() {
    let d = Daemon::start_in(private_home(json!({}), ""), &[]);
    let own = format!("http://127.0.0.1:{}", port(&d));
    let url = uds(&d, "POST", "/login/once", &[], b"").json()["url"]
        .as_str()
        .unwrap()
        .to_owned();
    std::thread::sleep(Duration::from_secs(61));
    let a = tcp(&d, "GET", url.trim_start_matches(&own), &[], b"");
    assert_eq!((a.status, a.code().as_str()), (401, "login_link_invalid"));
}

fn cli(home: &Path, args: &[&str], env: &[(&str, &str)]) -> (bool, String, String) {
    let mut c = Command::new(launcher());
    c.args(args)
        .env("ALBEDO_HOME", home)
        .env_remove("ALBEDO_TOKEN")
        .env_remove("ALBEDO_DAEMON")
        .env("ALBEDO_NO_BROWSER", "1")
        .stdin(Stdio::null());
    for (k, v) in env {
        c.env(k, v);
    }
    let out = c.output().unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn the_cli_works_unchanged_over_the_socket_and_over_tcp_with_the_token() {
    let d = Daemon::start_in(private_home(echo_ext(), ""), &[]);
    let home = d.home.path();
    // Over the socket (found in ALBEDO_HOME).
    let (ok, out, err) = cli(home, &["status"], &[]);
    assert!(ok, "{err}");
    assert_eq!(out.trim(), r#"{"ok":true}"#);
    let (ok, out, err) = cli(home, &["tools"], &[]);
    assert!(ok, "{err}");
    assert!(out.lines().any(|l| l == "mcp__fx__echo"), "{out}");
    // Over TCP, with the token file (loopback).
    let (ok, out, err) = cli(home, &["tools", "--daemon", &d.base], &[]);
    assert!(ok, "{err}");
    assert!(out.lines().any(|l| l == "mcp__fx__echo"), "{out}");
    // ALBEDO_TOKEN wins over the file: a wrong one is refused with the daemon's message.
    let (ok, _, err) = cli(
        home,
        &["status", "--daemon", &d.base],
        &[("ALBEDO_TOKEN", "albedo_wrong-wrong-wrong")],
    );
    assert!(ok, "healthz needs no token: {err}");
    let (ok, _, err) = cli(
        home,
        &["tools", "--daemon", &d.base],
        &[("ALBEDO_TOKEN", "albedo_wrong-wrong-wrong")],
    );
    assert!(!ok);
    assert!(err.contains("401") && err.contains("api-token"), "{err}");
    // `token` prints it and its path.
    let (ok, out, _) = cli(home, &["token"], &[]);
    assert!(ok);
    assert_eq!(out.trim(), d.token());
    let (_, out, _) = cli(home, &["token", "--path"], &[]);
    assert_eq!(out.trim(), home.join("api-token").display().to_string());
    // `web` prints a link that signs in once.
    let (ok, out, err) = cli(home, &["web"], &[]);
    assert!(ok, "{err}");
    let link = out.trim().to_owned();
    let own = format!("http://127.0.0.1:{}", port(&d));
    assert!(link.starts_with(&format!("{own}/login?once=")), "{link}");
    let a = tcp(&d, "GET", link.trim_start_matches(&own), &[], b"");
    assert_eq!(a.status, 303);
}

#[test]
fn rotating_the_token_ends_the_old_one_and_every_pane_session() {
    let mut d = Daemon::start_in(private_home(json!({}), ""), &[]);
    let home = d.home.path().to_path_buf();
    let old = d.bearer();
    let own = format!("http://127.0.0.1:{}", port(&d));
    let url = uds(&d, "POST", "/login/once", &[], b"").json()["url"]
        .as_str()
        .unwrap()
        .to_owned();
    let set = tcp(&d, "GET", url.trim_start_matches(&own), &[], b"");
    let cookie = set
        .header("set-cookie")
        .unwrap()
        .split(';')
        .next()
        .unwrap()
        .to_owned();
    assert_eq!(tcp(&d, "GET", "/", &[("Cookie", &cookie)], b"").status, 200);
    let (ok, out, err) = cli(&home, &["token", "--rotate"], &[]);
    assert!(ok, "{err}");
    assert!(out.contains("uses it now"), "{out}");
    assert_eq!(mode(&home.join("api-token")), 0o600);
    assert_ne!(d.bearer(), old);
    let a = tcp(&d, "GET", "/extensions", &[("Authorization", &old)], b"");
    assert_eq!(a.status, 401);
    assert_eq!(tcp(&d, "GET", "/", &[("Cookie", &cookie)], b"").status, 401);
    assert_eq!(d.get("/extensions").0, 200);
    // With no daemon running, the file is rotated; the next daemon uses it.
    d.stop(15);
    let before = home_token(&home);
    let (ok, out, err) = cli(&home, &["token", "--rotate"], &[]);
    assert!(ok, "{err}");
    assert!(out.contains("no daemon answered"), "{out}");
    assert_ne!(home_token(&home), before);
    assert_eq!(mode(&home.join("api-token")), 0o600);
}

#[test]
fn no_secret_reaches_a_log() {
    for format in ["text", "json"] {
        let home = private_home(echo_ext(), &format!("log_format = \"{format}\"\n"));
        let mut d = Daemon::start_in(home, &[("ALBEDO_LOG", "trace")]);
        let home = d.home.path().to_path_buf();
        let own = format!("http://127.0.0.1:{}", port(&d));
        let mut secrets = vec![d.token()];
        let (id, _) = d.session(json!({}));
        let (st, _) = d.call(&id, "mcp__fx__echo", json!({"message": "hi"}));
        assert_eq!(st, 200);
        // A wrong token that shares the right one's start.
        let near = format!("Bearer {}", &d.token()[..20]);
        assert_eq!(
            tcp(&d, "GET", "/extensions", &[("Authorization", &near)], b"").status,
            401
        );
        let url = uds(&d, "POST", "/login/once", &[], b"").json()["url"]
            .as_str()
            .unwrap()
            .to_owned();
        secrets.push(url.rsplit('=').next().unwrap().to_owned());
        let set = tcp(&d, "GET", url.trim_start_matches(&own), &[], b"");
        let cookie = set
            .header("set-cookie")
            .unwrap()
            .split(';')
            .next()
            .unwrap()
            .to_owned();
        secrets.push(cookie.split('=').nth(1).unwrap().to_owned());
        assert_eq!(tcp(&d, "GET", "/", &[("Cookie", &cookie)], b"").status, 200);
        assert!(cli(&home, &["token", "--rotate"], &[]).0);
        secrets.push(home_token(&home));
        assert_eq!(d.get("/extensions").0, 200);
        d.stop(15);
        let log = d.log();
        assert!(
            log.contains("API token"),
            "the log is not the daemon's: {log}"
        );
        for s in &secrets {
            assert!(
                !log.contains(s.as_str()),
                "{format} log holds a secret:\n{log}"
            );
        }
    }
}

#[test]
fn beyond_loopback_needs_tls_or_the_explicit_choice() {
    // Refused: 0.0.0.0 in plain HTTP.
    let home = private_home(json!({}), "");
    let err = refused_start(home.path(), "0.0.0.0:0");
    assert!(
        err.contains("refusing to listen") && err.contains("allow_plain_http_remote"),
        "{err}"
    );
    // Allowed in plain HTTP by the explicit choice, logged, and the token still required.
    let home = private_home(json!({}), "allow_plain_http_remote = true\n");
    let d = start_listening(home, "0.0.0.0:0");
    assert!(d.log().contains("PLAIN HTTP"), "{}", d.log());
    let p = port(&d);
    let s = std::net::TcpStream::connect(("127.0.0.1", p)).unwrap();
    let a = exchange(
        s,
        "GET",
        "/extensions",
        &[("Host", &format!("127.0.0.1:{p}"))],
        b"",
    );
    assert_eq!(a.status, 401);
    drop(d);
    // With TLS.
    let certs = tempfile::tempdir().unwrap();
    let (ca, cert, key) = make_certs(certs.path());
    let home = private_home(
        json!({}),
        &format!(
            "tls_cert = {:?}\ntls_key = {:?}\n",
            cert.display().to_string(),
            key.display().to_string()
        ),
    );
    let d = start_listening(home, "0.0.0.0:0");
    assert!(d.log().contains("over TLS"), "{}", d.log());
    let p = port(&d);
    let curl = |args: &[&str]| {
        let out = Command::new("curl")
            .args(["-s", "-o", "/dev/null", "-w", "%{http_code}", "--cacert"])
            .arg(&ca)
            .args(args)
            .output()
            .expect("curl");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let base = format!("https://127.0.0.1:{p}");
    assert_eq!(curl(&[&format!("{base}/healthz")]), "200");
    assert_eq!(curl(&[&format!("{base}/extensions")]), "401");
    let auth = format!("Authorization: {}", d.bearer());
    assert_eq!(curl(&["-H", &auth, &format!("{base}/extensions")]), "200");
    // The link it hands out is https, and its cookie Secure.
    let url = uds(&d, "POST", "/login/once", &[], b"").json()["url"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(url.starts_with(&format!("{base}/login?once=")), "{url}");
    let out = Command::new("curl")
        .args(["-s", "-D", "-", "-o", "/dev/null", "--cacert"])
        .arg(&ca)
        .arg(&url)
        .output()
        .unwrap();
    let head = String::from_utf8_lossy(&out.stdout).to_ascii_lowercase();
    assert!(
        head.contains("set-cookie:") && head.contains("; secure"),
        "{head}"
    );
}

/// Start `serve` and expect it to stop by itself with an error within 20 s (a daemon that
/// starts instead is killed, and the test fails); answers what it wrote on stderr.
fn refused_start(home: &Path, listen: &str) -> String {
    let log = home.join("refused.log");
    let mut child = Command::new(launcher())
        .args(["serve", "--listen", listen])
        .env("ALBEDO_HOME", home)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let mut status = None;
    wait_until(Duration::from_secs(20), || {
        status = child.try_wait().unwrap();
        status.is_some()
    });
    if status.is_none() {
        let _ = child.kill();
        let _ = child.wait();
    }
    let err = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(
        status.is_some_and(|s| !s.success()),
        "the daemon started on {listen} ({status:?}): {err}"
    );
    err
}

/// `Daemon::start_in` with another listen address (the ready file holds the bound one).
fn start_listening(home: tempfile::TempDir, listen: &str) -> Daemon {
    std::fs::write(
        home.path().join("config.toml"),
        format!(
            "{}listen = {listen:?}\n",
            std::fs::read_to_string(home.path().join("config.toml")).unwrap_or_default()
        ),
    )
    .unwrap();
    // `--listen 127.0.0.1:0` from the harness wins over config.toml: start by hand.
    let ready = home.path().join("ready");
    let child = Command::new(launcher())
        .args(["serve", "--ready-file"])
        .arg(&ready)
        .env("ALBEDO_HOME", home.path())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(home.path().join("daemon.log")).unwrap())
        .spawn()
        .unwrap();
    assert!(
        wait_until(Duration::from_secs(20), || {
            std::fs::read_to_string(&ready).is_ok_and(|s| !s.is_empty())
        }),
        "the daemon did not start: {}",
        std::fs::read_to_string(home.path().join("daemon.log")).unwrap_or_default()
    );
    let addr = std::fs::read_to_string(&ready)
        .unwrap()
        .lines()
        .next()
        .unwrap()
        .to_owned();
    Daemon {
        child: Some(child),
        base: format!("http://{addr}"),
        home,
    }
}
