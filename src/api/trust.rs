//! The API's trust boundary: middleware ([`guard`]) in front of every route, so that only the
//! user's own clients drive the daemon.
//!
//! - **The Unix socket** (`$ALBEDO_HOME/albedo.sock`, 0600 in a 0700 folder): only the user
//!   can open it, so it needs no token. No browser reaches it, so a request there that says
//!   it comes from a web page (`Origin`) came through a proxy and is refused.
//! - **TCP**, in this order:
//!   1. `Host` must name the daemon as it listens: `127.0.0.1`, `localhost` or `[::1]`, the
//!      address the connection arrived on, or a name of `allowed_hosts`, with the port the
//!      connection arrived on. Else 403 (a DNS-rebinding page sends its own name).
//!   2. `Origin`, when present, must be the daemon's own origin (the scheme and the `Host`
//!      just checked), and `Sec-Fetch-Site`, when present, `same-origin` or `none`. Else 403
//!      (another page, including another port of localhost, which is the same *site*).
//!   3. `GET /healthz` and `GET /login` (which checks its one-time value) pass, whatever
//!      credentials they carry; everything
//!      else needs `Authorization: Bearer <token>` (compared in constant time, by digest)
//!      or the web pane's session cookie (same-origin only; a cookie request that changes
//!      anything must carry its `Origin`). Else 401, naming where the token is.
//!
//! No CORS header is ever sent, so a browser never lets another origin read an answer. The
//! token, the one-time values and the cookies are kept as SHA-256 digests and never logged.
//! One-time links live a minute on tokio time; the pane's cookies until the daemon stops or
//! the token is rotated.

use super::ApiError;
use actix_web::body::MessageBody;
use actix_web::dev::{Extensions, ServiceRequest, ServiceResponse};
use actix_web::http::{header, Method, StatusCode};
use actix_web::middleware::Next;
use actix_web::{web, HttpRequest, ResponseError};
use sha2::{Digest, Sha256};
use std::any::Any;
use std::borrow::Cow;
use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::{Mutex, OnceLock, RwLock};
use std::time::Duration;
use tokio::time::Instant;

/// How long a one-time login link works.
pub const LINK_LIFETIME: Duration = Duration::from_secs(60);
/// One-time links outstanding at once (the oldest go first).
const MAX_LINKS: usize = 32;
/// Pane sessions at once (the oldest go first).
const MAX_COOKIES: usize = 64;

/// How a connection reached the daemon (set for each connection by [`on_connect`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Via {
    Socket,
    Tcp { local: SocketAddr, tls: bool },
}

/// `HttpServer::on_connect`: note whether a connection came over the socket or TCP, and
/// where it arrived. A connection with no note is refused by [`guard`] (fail closed).
///
/// A TCP connection also gets `TCP_NODELAY` (actix-web leaves Nagle's algorithm on): an
/// answer written in more than one send (a large result goes out in 64 KiB slices, the event
/// streams an event at a time) otherwise has its last small segment held until the client
/// acknowledges the one before, and a client that delays its ACK holds it up to 40 ms. The
/// bench's 10 MiB results through the API over TCP had a p99 of 57-63 ms for a p50 of
/// 14-17 ms; with it, 20-26 ms.
pub fn on_connect(io: &dyn Any, ext: &mut Extensions) {
    if io.downcast_ref::<tokio::net::UnixStream>().is_some() {
        ext.insert(Via::Socket);
    } else if let Some(s) = io.downcast_ref::<tokio::net::TcpStream>() {
        let _ = s.set_nodelay(true);
        if let Ok(local) = s.local_addr() {
            ext.insert(Via::Tcp { local, tls: false });
        }
    } else if let Some(s) =
        io.downcast_ref::<actix_tls::accept::rustls_0_23::TlsStream<tokio::net::TcpStream>>()
    {
        let _ = s.get_ref().0.set_nodelay(true);
        if let Ok(local) = s.get_ref().0.local_addr() {
            ext.insert(Via::Tcp { local, tls: true });
        }
    }
}

/// Who a request was let in as (in the request's extensions, for handlers).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Principal {
    /// Over the socket.
    Socket,
    /// With the API token.
    Token,
    /// With the web pane's cookie.
    Cookie,
    /// A route open to anyone who passed the Host and Origin checks (`/healthz`, `/login`).
    Anonymous,
}

type Digest32 = [u8; 32];

fn digest(s: &str) -> Digest32 {
    Sha256::digest(s.as_bytes()).into()
}

/// Compare digests in constant time.
fn same(a: &Digest32, b: &Digest32) -> bool {
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// The trust boundary's state: the token's digest, the one-time links, the pane's cookies.
pub struct Trust {
    token: RwLock<Digest32>,
    home: PathBuf,
    token_path: PathBuf,
    socket_path: Option<PathBuf>,
    /// Lower-case `name` or `name:port` entries from `allowed_hosts`.
    allowed_hosts: Vec<String>,
    /// Expiry of each one-time value, by digest.
    links: Mutex<HashMap<Digest32, Instant>>,
    /// The pane's cookies, by digest, with when they were made.
    cookies: Mutex<HashMap<Digest32, Instant>>,
    /// The daemon's own TCP origin (`http://127.0.0.1:7420`), known once bound.
    origin: OnceLock<String>,
    /// Log lines about refused requests (10 a minute).
    refusals: crate::protocol::text::LogLimiter,
}

impl Trust {
    pub fn new(
        token: &crate::store::token::ApiToken,
        home: PathBuf,
        socket_path: Option<PathBuf>,
        allowed_hosts: &[String],
    ) -> Trust {
        Trust {
            token: RwLock::new(digest(token.as_str())),
            token_path: crate::store::token::token_path(&home),
            home,
            socket_path,
            allowed_hosts: allowed_hosts
                .iter()
                .map(|h| h.trim().to_ascii_lowercase())
                .filter(|h| !h.is_empty())
                .collect(),
            links: Mutex::new(HashMap::new()),
            cookies: Mutex::new(HashMap::new()),
            origin: OnceLock::new(),
            refusals: crate::protocol::text::LogLimiter::default(),
        }
    }

    pub fn home(&self) -> &std::path::Path {
        &self.home
    }

    /// Record the daemon's own TCP origin, for the login links it hands out.
    pub fn set_origin(&self, origin: String) {
        let _ = self.origin.set(origin);
    }

    pub fn origin(&self) -> Option<&str> {
        self.origin.get().map(String::as_str)
    }

    /// A new token is in force: the old one, the pane's cookies and the links stop working.
    pub fn replace_token(&self, token: &crate::store::token::ApiToken) {
        if let Ok(mut t) = self.token.write() {
            *t = digest(token.as_str());
        }
        if let Ok(mut c) = self.cookies.lock() {
            c.clear();
        }
        if let Ok(mut l) = self.links.lock() {
            l.clear();
        }
    }

    /// A new one-time login value, valid for [`LINK_LIFETIME`] from `now`.
    pub fn issue_link(&self, now: Instant) -> Result<String, ApiError> {
        let value = hex::encode(random32()?);
        let mut links = self
            .links
            .lock()
            .map_err(|_| ApiError::internal("the login links are unavailable"))?;
        links.retain(|_, exp| *exp > now);
        while links.len() >= MAX_LINKS {
            let oldest = links.iter().min_by_key(|(_, e)| **e).map(|(k, _)| *k);
            match oldest {
                Some(k) => links.remove(&k),
                None => break,
            };
        }
        links.insert(digest(&value), now + LINK_LIFETIME);
        Ok(value)
    }

    /// Use a one-time value: true once, and only before it expires.
    pub fn redeem_link(&self, value: &str, now: Instant) -> bool {
        let Ok(mut links) = self.links.lock() else {
            return false;
        };
        matches!(links.remove(&digest(value)), Some(exp) if exp > now)
    }

    /// A new pane session: its cookie value.
    pub fn new_cookie(&self, now: Instant) -> Result<String, ApiError> {
        let value = hex::encode(random32()?);
        let mut cookies = self
            .cookies
            .lock()
            .map_err(|_| ApiError::internal("the pane's sessions are unavailable"))?;
        while cookies.len() >= MAX_COOKIES {
            let oldest = cookies.iter().min_by_key(|(_, t)| **t).map(|(k, _)| *k);
            match oldest {
                Some(k) => cookies.remove(&k),
                None => break,
            };
        }
        cookies.insert(digest(&value), now);
        Ok(value)
    }

    fn cookie_ok(&self, value: &str) -> bool {
        let d = digest(value);
        self.cookies
            .lock()
            .map(|c| c.keys().any(|k| same(k, &d)))
            .unwrap_or(false)
    }

    fn token_ok(&self, value: &str) -> bool {
        let d = digest(value);
        self.token.read().map(|t| same(&t, &d)).unwrap_or(false)
    }

    /// Decide about one request.
    pub fn check(&self, req: &HttpRequest) -> Result<Principal, ApiError> {
        self.check_via(req.conn_data::<Via>().copied(), req)
    }

    fn check_via(&self, via: Option<Via>, req: &HttpRequest) -> Result<Principal, ApiError> {
        match via {
            Some(Via::Socket) => {
                if req.headers().contains_key(header::ORIGIN) {
                    return Err(self.refuse(
                        "origin_refused",
                        "a request on the socket that comes from a web page (it has an Origin)",
                    ));
                }
                Ok(Principal::Socket)
            }
            Some(Via::Tcp { local, tls }) => self.check_tcp(req, local, tls),
            None => Err(self.refuse(
                "connection_refused",
                "a connection the daemon cannot place (neither its socket nor TCP)",
            )),
        }
    }

    fn check_tcp(
        &self,
        req: &HttpRequest,
        local: SocketAddr,
        tls: bool,
    ) -> Result<Principal, ApiError> {
        // 1. Host.
        let host = req
            .headers()
            .get(header::HOST)
            .and_then(|h| h.to_str().ok())
            .or_else(|| req.uri().authority().map(|a| a.as_str()))
            .unwrap_or_default();
        let scheme = if tls { "https" } else { "http" };
        let Some((name, port)) = split_host(host, scheme) else {
            return Err(self.refuse("host_refused", "a request with no usable Host header"));
        };
        if port != local.port() || !self.host_allowed(&name, port, local.ip()) {
            return Err(self.refuse_logged(
                "host_refused",
                format!(
                    "Host {:?} is not this daemon's address; add it to allowed_hosts in config.toml \
                     if it is a name of yours",
                    crate::protocol::text::clean(host, 100)
                ),
            ));
        }
        // 2. Origin and Sec-Fetch-Site.
        let origin = req.headers().get(header::ORIGIN);
        if let Some(o) = origin {
            let own = o
                .to_str()
                .ok()
                .and_then(parse_origin)
                .is_some_and(|(s, n, p)| s == scheme && n == name && p == port);
            if !own {
                return Err(self.refuse_logged(
                    "origin_refused",
                    format!(
                        "a request from another origin ({:?}): only the daemon's own pages may \
                         use its API from a browser",
                        crate::protocol::text::clean(o.to_str().unwrap_or("?"), 100)
                    ),
                ));
            }
        }
        // A static name: one given as text is parsed again on every request.
        const SEC_FETCH_SITE: header::HeaderName =
            header::HeaderName::from_static("sec-fetch-site");
        if let Some(site) = req.headers().get(SEC_FETCH_SITE) {
            let ok = matches!(site.to_str(), Ok("same-origin") | Ok("none"));
            if !ok {
                return Err(self.refuse_logged(
                    "origin_refused",
                    format!(
                        "a request a browser made for another site (Sec-Fetch-Site: {:?})",
                        crate::protocol::text::clean(site.to_str().unwrap_or("?"), 40)
                    ),
                ));
            }
        }
        // 3. Who. The open routes look at no credential (a stale token does not fail a
        // health check).
        let open = matches!(
            (req.method(), req.path()),
            (&Method::GET, "/healthz") | (&Method::GET, "/login")
        );
        if open {
            return Ok(Principal::Anonymous);
        }
        if let Some(auth) = req.headers().get(header::AUTHORIZATION) {
            let presented = auth
                .to_str()
                .ok()
                .and_then(|a| a.split_once(' '))
                .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
                .map(|(_, v)| v.trim());
            return match presented {
                Some(v) if self.token_ok(v) => Ok(Principal::Token),
                _ => Err(self.unauthorized("the API token sent is not this daemon's")),
            };
        }
        if let Some(v) = cookie(req, &cookie_name(port)) {
            if self.cookie_ok(v) {
                let safe = matches!(*req.method(), Method::GET | Method::HEAD);
                if !safe && origin.is_none() {
                    return Err(self.refuse_logged(
                        "origin_refused",
                        "a request with the pane's cookie that changes something must carry its \
                         Origin"
                            .to_owned(),
                    ));
                }
                return Ok(Principal::Cookie);
            }
            return Err(self.unauthorized(
                "the web pane's session is over (the daemon restarted or the token was \
                 rotated); sign in again with the link `albedo-mcp web` prints",
            ));
        }
        Err(self.unauthorized("this request needs the daemon's API token"))
    }

    /// Whether `name` (lower case, IPv6 in brackets) names this daemon.
    fn host_allowed(&self, name: &str, port: u16, local: IpAddr) -> bool {
        if matches!(name, "127.0.0.1" | "localhost" | "[::1]") {
            return true;
        }
        let local_name = match local {
            IpAddr::V4(a) => a.to_string(),
            IpAddr::V6(a) => match a.to_ipv4_mapped() {
                Some(v4) => v4.to_string(),
                None => format!("[{a}]"),
            },
        };
        if name == local_name {
            return true;
        }
        self.allowed_hosts.iter().any(|h| match h.rsplit_once(':') {
            // `name:port` (an IPv6 entry is bracketed, so its colons are inside brackets).
            Some((n, p)) if !h.ends_with(']') => n == name && p.parse() == Ok(port),
            _ => h == name,
        })
    }

    fn refuse(&self, code: &'static str, message: &str) -> ApiError {
        tracing::debug!(code, "refused a request: {message}");
        ApiError::new(StatusCode::FORBIDDEN, code, message)
    }

    /// A refusal worth a warning (a web page or a rebinding name tried the daemon), at most
    /// 10 lines a minute.
    fn refuse_logged(&self, code: &'static str, message: String) -> ApiError {
        if let Some(left_out) = self.refusals.allow() {
            if left_out > 0 {
                tracing::warn!(code, left_out, "refused a request: {message}");
            } else {
                tracing::warn!(code, "refused a request: {message}");
            }
        } else {
            tracing::debug!(code, "refused a request: {message}");
        }
        ApiError::new(StatusCode::FORBIDDEN, code, message)
    }

    fn unauthorized(&self, why: &str) -> ApiError {
        let socket = match &self.socket_path {
            Some(s) => format!(", or use the socket {}, which needs none", s.display()),
            None => String::new(),
        };
        let mut e = ApiError::new(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            format!(
                "{why}: send `Authorization: Bearer <token>` with the token in {} (readable only \
                 by the user who runs the daemon; `albedo-mcp token` prints it){socket}",
                self.token_path.display()
            ),
        );
        e.www_authenticate = true;
        e
    }
}

fn random32() -> Result<[u8; 32], ApiError> {
    crate::store::token::random_bytes::<32>().map_err(|e| ApiError::internal(e.to_string()))
}

/// The pane's cookie for a daemon on `port` (cookies ignore ports: two daemons on one host
/// must not overwrite each other's).
pub fn cookie_name(port: u16) -> String {
    format!("albedo_session_{port}")
}

fn cookie<'a>(req: &'a HttpRequest, name: &str) -> Option<&'a str> {
    req.headers()
        .get_all(header::COOKIE)
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|kv| kv.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v.trim())
}

/// `host[:port]` → lower-case name (IPv6 kept in brackets) and port (the scheme's default
/// when absent). `None` for anything malformed. The name is borrowed unless it had upper
/// case: every request over TCP passes here.
fn split_host<'a>(host: &'a str, scheme: &str) -> Option<(Cow<'a, str>, u16)> {
    let host = host.trim();
    if host.is_empty() || host.len() > 255 {
        return None;
    }
    let default = if scheme == "https" { 443 } else { 80 };
    let (name, port) = if let Some(rest) = host.strip_prefix('[') {
        let (inside, after) = rest.split_once(']')?;
        let port = match after {
            "" => default,
            p => p.strip_prefix(':')?.parse().ok()?,
        };
        // `[inside]`, brackets included.
        (&host[..inside.len() + 2], port)
    } else {
        match host.rsplit_once(':') {
            Some((n, p)) => (n, p.parse().ok()?),
            None => (host, default),
        }
    };
    let ok = name
        .bytes()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'.' | b'-' | b'_' | b'[' | b']' | b':'));
    if !ok {
        return None;
    }
    if name.bytes().any(|c| c.is_ascii_uppercase()) {
        Some((Cow::Owned(name.to_ascii_lowercase()), port))
    } else {
        Some((Cow::Borrowed(name), port))
    }
}

/// `scheme://host[:port]` → (scheme, name, port); `None` for `null` and anything else.
fn parse_origin(o: &str) -> Option<(String, String, u16)> {
    let (scheme, rest) = o.trim().split_once("://")?;
    let scheme = scheme.to_ascii_lowercase();
    if scheme != "http" && scheme != "https" || rest.contains('/') {
        return None;
    }
    let (name, port) = split_host(rest, &scheme)?;
    Some((scheme, name.into_owned(), port))
}

/// The middleware: every request passes [`Trust::check`] first; answers carry
/// `X-Content-Type-Options: nosniff` and never a CORS header.
pub async fn guard(
    req: ServiceRequest,
    next: Next<impl MessageBody + 'static>,
) -> Result<ServiceResponse<impl MessageBody>, actix_web::Error> {
    let decision = match req.app_data::<web::Data<Trust>>() {
        Some(t) => t.check(req.request()),
        None => Err(ApiError::internal("the trust boundary is not configured")),
    };
    match decision {
        Ok(_) => {
            // Let in: a tool call takes the hot lane, anything else the router.
            let mut res = super::hot::route(req, next).await?;
            res.headers_mut().insert(
                header::X_CONTENT_TYPE_OPTIONS,
                header::HeaderValue::from_static("nosniff"),
            );
            Ok(res)
        }
        Err(e) => {
            let mut res = e.error_response();
            res.headers_mut().insert(
                header::X_CONTENT_TYPE_OPTIONS,
                header::HeaderValue::from_static("nosniff"),
            );
            Ok(req.into_response(res).map_into_boxed_body())
        }
    }
}

/// The principal a request was let in as: [`Trust::check`] once more, for the few routes
/// that ask (keeping it from the middleware in the request's extensions would cost every
/// request two allocations). A token rotated in between makes it `Anonymous`.
pub fn principal(req: &HttpRequest) -> Principal {
    req.app_data::<web::Data<Trust>>()
        .and_then(|t| t.check(req).ok())
        .unwrap_or(Principal::Anonymous)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::token::ApiToken;
    use actix_web::test::TestRequest;

    fn trust(allowed: &[&str]) -> (Trust, ApiToken) {
        let t = ApiToken::generate().unwrap();
        let allowed: Vec<String> = allowed.iter().map(|s| s.to_string()).collect();
        (Trust::new(&t, PathBuf::from("/h"), None, &allowed), t)
    }

    fn tcp(port: u16) -> Via {
        Via::Tcp {
            local: SocketAddr::from(([127, 0, 0, 1], port)),
            tls: false,
        }
    }

    fn req(headers: &[(&str, &str)], method: Method, path: &str) -> HttpRequest {
        let mut r = TestRequest::default().method(method).uri(path);
        for (k, v) in headers {
            r = r.insert_header((*k, *v));
        }
        r.to_http_request()
    }

    fn code(r: Result<Principal, ApiError>) -> Result<Principal, &'static str> {
        r.map_err(|e| e.code)
    }

    #[test]
    fn the_checks_in_order() {
        let (t, tok) = trust(&["box.lan"]);
        let bearer = format!("Bearer {}", tok.as_str());
        let v = Some(tcp(7420));
        let get = |h: &[(&str, &str)], path: &str| code(t.check_via(v, &req(h, Method::GET, path)));
        let h = ("host", "127.0.0.1:7420");
        assert_eq!(get(&[h], "/healthz"), Ok(Principal::Anonymous));
        assert_eq!(get(&[h], "/sessions/x"), Err("unauthorized"));
        assert_eq!(
            get(&[h, ("authorization", "Bearer nope")], "/healthz"),
            Ok(Principal::Anonymous)
        );
        assert_eq!(
            get(&[h, ("authorization", "Bearer nope")], "/x"),
            Err("unauthorized")
        );
        assert_eq!(
            get(&[h, ("authorization", &bearer)], "/x"),
            Ok(Principal::Token)
        );
        assert_eq!(
            get(
                &[("host", "localhost:7420"), ("authorization", &bearer)],
                "/x"
            ),
            Ok(Principal::Token)
        );
        assert_eq!(
            get(
                &[("host", "box.lan:7420"), ("authorization", &bearer)],
                "/x"
            ),
            Ok(Principal::Token)
        );
        // The wrong port, another name, no Host at all.
        assert_eq!(
            get(
                &[("host", "127.0.0.1:7421"), ("authorization", &bearer)],
                "/x"
            ),
            Err("host_refused")
        );
        assert_eq!(
            get(
                &[
                    ("host", "attacker.example:7420"),
                    ("authorization", &bearer)
                ],
                "/healthz"
            ),
            Err("host_refused")
        );
        assert_eq!(
            get(&[("authorization", &bearer)], "/x"),
            Err("host_refused")
        );
        // Origins.
        assert_eq!(
            get(
                &[
                    h,
                    ("origin", "http://127.0.0.1:7420"),
                    ("authorization", &bearer)
                ],
                "/x"
            ),
            Ok(Principal::Token)
        );
        assert_eq!(
            get(
                &[
                    h,
                    ("origin", "https://attacker.example"),
                    ("authorization", &bearer)
                ],
                "/x"
            ),
            Err("origin_refused")
        );
        assert_eq!(
            get(
                &[
                    h,
                    ("origin", "http://localhost:7420"),
                    ("authorization", &bearer)
                ],
                "/x"
            ),
            Err("origin_refused")
        );
        assert_eq!(
            get(&[h, ("origin", "null")], "/healthz"),
            Err("origin_refused")
        );
        assert_eq!(
            get(
                &[
                    h,
                    ("sec-fetch-site", "same-site"),
                    ("authorization", &bearer)
                ],
                "/x"
            ),
            Err("origin_refused")
        );
        assert_eq!(
            get(&[h, ("sec-fetch-site", "none")], "/healthz"),
            Ok(Principal::Anonymous)
        );
        // The socket needs no token, but no web page may come through it.
        let s = |hs: &[(&str, &str)]| {
            code(t.check_via(Some(Via::Socket), &req(hs, Method::POST, "/sessions")))
        };
        assert_eq!(s(&[]), Ok(Principal::Socket));
        assert_eq!(
            s(&[("origin", "http://127.0.0.1:7420")]),
            Err("origin_refused")
        );
        // A connection nobody placed is refused.
        assert_eq!(
            code(t.check_via(None, &req(&[h], Method::GET, "/healthz"))),
            Err("connection_refused")
        );
        // The pane's cookie: same origin, and a change carries its Origin.
        let c = t.new_cookie(Instant::now()).unwrap();
        let cookie = format!("other=1; albedo_session_7420={c}");
        assert_eq!(get(&[h, ("cookie", &cookie)], "/x"), Ok(Principal::Cookie));
        assert_eq!(
            get(&[h, ("cookie", "albedo_session_7420=nope")], "/x"),
            Err("unauthorized")
        );
        assert_eq!(
            get(&[h, ("cookie", &format!("albedo_session_7421={c}"))], "/x"),
            Err("unauthorized")
        );
        let post = |hs: &[(&str, &str)]| code(t.check_via(v, &req(hs, Method::POST, "/sessions")));
        assert_eq!(post(&[h, ("cookie", &cookie)]), Err("origin_refused"));
        assert_eq!(
            post(&[h, ("cookie", &cookie), ("origin", "http://127.0.0.1:7420")]),
            Ok(Principal::Cookie)
        );
    }

    #[test]
    fn hosts_and_origins() {
        assert_eq!(
            split_host("127.0.0.1:7420", "http"),
            Some(("127.0.0.1".into(), 7420))
        );
        assert_eq!(
            split_host("LOCALHOST", "http"),
            Some(("localhost".into(), 80))
        );
        assert_eq!(split_host("[::1]:9", "http"), Some(("[::1]".into(), 9)));
        assert_eq!(split_host("a b:1", "http"), None);
        assert_eq!(split_host("x:99999", "http"), None);
        assert_eq!(
            parse_origin("https://Example.com"),
            Some(("https".into(), "example.com".into(), 443))
        );
        assert_eq!(parse_origin("null"), None);
        let (t, _) = trust(&["box.lan", "proxy.example:8443"]);
        let lo = IpAddr::from([127, 0, 0, 1]);
        assert!(t.host_allowed("localhost", 7420, lo));
        assert!(t.host_allowed("box.lan", 7420, lo));
        assert!(t.host_allowed("proxy.example", 8443, lo));
        assert!(!t.host_allowed("proxy.example", 7420, lo));
        assert!(!t.host_allowed("attacker.example", 7420, lo));
        assert!(t.host_allowed("10.0.0.5", 7420, IpAddr::from([10, 0, 0, 5])));
        assert!(!t.host_allowed("10.0.0.6", 7420, IpAddr::from([10, 0, 0, 5])));
    }

    /// One-time links run on tokio time: tested with paused time, no sleeping.
    #[actix_rt::test]
    async fn a_link_works_once_and_for_a_minute() {
        tokio::time::pause();
        let (t, _) = trust(&[]);
        let a = t.issue_link(Instant::now()).unwrap();
        let b = t.issue_link(Instant::now()).unwrap();
        assert_ne!(a, b);
        tokio::time::advance(Duration::from_secs(59)).await;
        assert!(t.redeem_link(&a, Instant::now()));
        assert!(!t.redeem_link(&a, Instant::now()), "a link worked twice");
        tokio::time::advance(Duration::from_secs(2)).await;
        assert!(
            !t.redeem_link(&b, Instant::now()),
            "a link outlived its minute"
        );
        assert!(!t.redeem_link("not-a-link", Instant::now()));
        // Rotation ends every link and cookie.
        let c = t.issue_link(Instant::now()).unwrap();
        let cookie = t.new_cookie(Instant::now()).unwrap();
        assert!(t.cookie_ok(&cookie));
        t.replace_token(&ApiToken::generate().unwrap());
        assert!(!t.cookie_ok(&cookie));
        assert!(!t.redeem_link(&c, Instant::now()));
    }

    #[test]
    fn links_and_cookies_are_bounded() {
        let (t, _) = trust(&[]);
        let now = Instant::now();
        let first = t.issue_link(now).unwrap();
        for _ in 0..MAX_LINKS {
            t.issue_link(now).unwrap();
        }
        assert_eq!(t.links.lock().unwrap().len(), MAX_LINKS);
        let _ = first;
        for _ in 0..MAX_COOKIES + 5 {
            t.new_cookie(now).unwrap();
        }
        assert_eq!(t.cookies.lock().unwrap().len(), MAX_COOKIES);
    }

    /// What the checks cost per request (not a pass/fail test; run it in release:
    /// `cargo test --release --lib api::trust::tests::cost_per_request -- --ignored --nocapture`).
    #[test]
    #[ignore]
    fn cost_per_request() {
        let (t, tok) = trust(&["box.lan"]);
        let bearer = format!("Bearer {}", tok.as_str());
        let cookie = format!(
            "albedo_session_7420={}",
            t.new_cookie(Instant::now()).unwrap()
        );
        let cases = [
            (
                "token",
                vec![
                    ("host", "127.0.0.1:7420"),
                    ("authorization", bearer.as_str()),
                ],
            ),
            (
                "cookie+origin",
                vec![
                    ("host", "127.0.0.1:7420"),
                    ("cookie", cookie.as_str()),
                    ("origin", "http://127.0.0.1:7420"),
                ],
            ),
            (
                "refused host",
                vec![
                    ("host", "attacker.example:7420"),
                    ("authorization", bearer.as_str()),
                ],
            ),
        ];
        for (name, h) in cases {
            let r = req(&h, Method::GET, "/sessions/s1-0/tools");
            let n = 200_000u32;
            let start = std::time::Instant::now();
            for _ in 0..n {
                std::hint::black_box(
                    t.check_via(Some(tcp(7420)), std::hint::black_box(&r))
                        .is_ok(),
                );
            }
            println!(
                "{name}: {:.0} ns per request",
                start.elapsed().as_nanos() as f64 / n as f64
            );
        }
    }

    #[test]
    fn the_token_is_compared_by_digest() {
        let (t, tok) = trust(&[]);
        assert!(t.token_ok(tok.as_str()));
        assert!(!t.token_ok("albedo_wrong"));
        assert!(!t.token_ok(""));
    }

    #[tokio::test]
    async fn a_tcp_connection_is_noted_and_sends_without_delay() {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let (_client, accepted) = tokio::join!(tokio::net::TcpStream::connect(addr), l.accept());
        let (server, _) = accepted.unwrap();
        assert!(!server.nodelay().unwrap(), "a fresh socket has Nagle on");
        let mut ext = Extensions::new();
        on_connect(&server, &mut ext);
        assert!(server.nodelay().unwrap());
        assert_eq!(
            ext.get::<Via>(),
            Some(&Via::Tcp {
                local: addr,
                tls: false
            })
        );
    }
}
