//! Client commands: they talk to a running daemon over its HTTP API, found the way every
//! local client finds it (`store::token`'s contract): `--daemon` or `ALBEDO_DAEMON` when
//! given (a URL, or a socket path); else the socket `$ALBEDO_HOME/albedo.sock` when a daemon
//! answers on it (no token needed); else TCP at the `listen` address of `config.toml`, with
//! the token (`ALBEDO_TOKEN`, else the token file, which is sent to loopback addresses and
//! to the configured address only).

use crate::store::daemon_config::{albedo_home, DaemonConfig};
use crate::store::token::{self, ApiToken};
use actix_service::Service;
use actix_tls::connect::{ConnectError, ConnectInfo, Connection};
use awc::http;
use futures_util::future::LocalBoxFuture;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// Nothing accepts a connection there (refused, no such socket): the daemon is not
    /// running. Exit status 2.
    #[error("no daemon answers at {at} ({reason}); start it with: albedo-mcp serve")]
    Unreachable { at: String, reason: String },
    /// Connected, but the exchange broke (a timeout, a reset, an answer that is not HTTP).
    #[error("the request to the daemon at {at} failed: {reason}")]
    Broken { at: String, reason: String },
    /// The daemon answered with a status that is not a success; its error's code, message
    /// and field (for a setting) when the answer was the API's error JSON.
    #[error("{}", refusal_text(*status, code, message, field))]
    Refused {
        at: String,
        status: u16,
        code: String,
        message: String,
        field: Option<String>,
        /// The whole answer (`null` when empty).
        body: Value,
    },
    #[error("the daemon at {at} sent an answer that is not JSON: {reason}")]
    BadAnswer { at: String, reason: String },
    /// `--daemon` or `ALBEDO_DAEMON` names no usable address.
    #[error("{given:?} is not a daemon address ({reason}); give host:port, http(s)://host:port or a socket path")]
    BadAddress { given: String, reason: String },
    #[error(transparent)]
    Token(#[from] token::TokenError),
}

fn refusal_text(status: u16, code: &str, message: &str, field: &Option<String>) -> String {
    let mut s = format!("the daemon refused (HTTP {status}");
    if !code.is_empty() {
        s.push_str(&format!(", {code}"));
    }
    s.push_str(&format!("): {message}"));
    if let Some(f) = field {
        s.push_str(&format!(" [field: {f}]"));
    }
    s
}

impl ClientError {
    /// The command line's exit status for this error: 2 when no daemon runs there, else 1.
    pub fn exit_code(&self) -> i32 {
        match self {
            ClientError::Unreachable { .. } => 2,
            _ => 1,
        }
    }

    /// The error as the API's error JSON (the daemon's own answer when it refused), for
    /// `--json` output.
    pub fn to_json(&self) -> Value {
        match self {
            ClientError::Refused { body, .. } if body.get("error").is_some() => body.clone(),
            ClientError::Refused {
                status,
                code,
                message,
                ..
            } => json!({"error": {"code": code, "message": message, "status": status}}),
            other => {
                let code = match other {
                    ClientError::Unreachable { .. } => "unreachable",
                    ClientError::Broken { .. } => "broken",
                    ClientError::BadAnswer { .. } => "bad_answer",
                    ClientError::BadAddress { .. } => "bad_address",
                    _ => "token",
                };
                json!({"error": {"code": code, "message": other.to_string()}})
            }
        }
    }
}

/// Where the daemon is.
#[derive(Clone, Debug)]
pub enum Endpoint {
    /// Its Unix socket: no token.
    Socket(PathBuf),
    /// Its TCP address (`http://127.0.0.1:7420`), with the token to send.
    Tcp {
        base: String,
        token: Option<ApiToken>,
    },
}

impl Endpoint {
    pub fn describe(&self) -> String {
        match self {
            Endpoint::Socket(p) => format!("unix:{}", p.display()),
            Endpoint::Tcp { base, .. } => base.clone(),
        }
    }
}

/// Whether a URL names this machine over loopback (`localhost`, `127.0.0.0/8`, `[::1]`).
fn is_loopback_url(base: &str) -> bool {
    let Ok(u) = url::Url::parse(base) else {
        return false;
    };
    match u.host() {
        Some(url::Host::Domain(d)) => d.eq_ignore_ascii_case("localhost"),
        Some(url::Host::Ipv4(a)) => a.is_loopback(),
        Some(url::Host::Ipv6(a)) => a.is_loopback(),
        None => false,
    }
}

/// The base URL of the `listen` address in `config.toml` (or `ALBEDO_LISTEN`, which
/// overrides it; a wildcard address is reached over loopback), and whether it is the API
/// over TLS.
fn configured_base(home: &Path) -> String {
    let (listen, tls) = match DaemonConfig::load(home) {
        Ok(c) => (c.listen, c.tls_cert.is_some()),
        // An unreadable config.toml: the environment's address still holds.
        Err(_) => (
            std::env::var("ALBEDO_LISTEN")
                .ok()
                .filter(|l| !l.trim().is_empty())
                .unwrap_or_else(|| crate::store::daemon_config::DEFAULT_LISTEN.to_owned()),
            false,
        ),
    };
    let scheme = if tls { "https" } else { "http" };
    let listen = listen.trim().to_owned();
    let hostport = match listen.parse::<std::net::SocketAddr>() {
        Ok(a) if a.ip().is_unspecified() => match a {
            std::net::SocketAddr::V4(_) => format!("127.0.0.1:{}", a.port()),
            std::net::SocketAddr::V6(_) => format!("[::1]:{}", a.port()),
        },
        _ => listen,
    };
    format!("{scheme}://{hostport}")
}

/// A daemon named by `--daemon` or `ALBEDO_DAEMON`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Named {
    /// A Unix socket's path.
    Socket(PathBuf),
    /// A base URL (`http://127.0.0.1:7420`, no trailing `/`).
    Url(String),
}

/// Read a daemon address: `unix:PATH` or a path (`/…`, `./…`, `../…`, `~/…`) is a socket;
/// `http://…` and `https://…` are kept (a trailing `/` dropped); a bare `PORT` is
/// `http://127.0.0.1:PORT`; anything else is `host:port` (or `host`, port 7420) over plain
/// HTTP.
pub fn parse_daemon(given: &str) -> Result<Named, ClientError> {
    let bad = |reason: &str| ClientError::BadAddress {
        given: given.to_owned(),
        reason: reason.to_owned(),
    };
    let n = given.trim();
    if n.is_empty() {
        return Err(bad("it is empty"));
    }
    if let Some(p) = n.strip_prefix("unix:") {
        if p.is_empty() {
            return Err(bad("no socket path after unix:"));
        }
        return Ok(Named::Socket(PathBuf::from(p)));
    }
    if n.starts_with('/') || n.starts_with("./") || n.starts_with("../") {
        return Ok(Named::Socket(PathBuf::from(n)));
    }
    if let Some(rest) = n.strip_prefix("~/") {
        let home = std::env::var_os("HOME").ok_or_else(|| bad("HOME is not set"))?;
        return Ok(Named::Socket(PathBuf::from(home).join(rest)));
    }
    let url = if n.contains("://") {
        n.to_owned()
    } else if !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()) {
        format!("http://127.0.0.1:{n}")
    } else {
        // host:port; a bare host gets the daemon's default port.
        let has_port = match n.strip_prefix('[') {
            Some(v6) => v6.contains("]:"),
            None => n.contains(':'),
        };
        if has_port {
            format!("http://{n}")
        } else {
            let port = crate::store::daemon_config::DEFAULT_LISTEN
                .rsplit(':')
                .next()
                .unwrap_or("7420");
            format!("http://{n}:{port}")
        }
    };
    let u = url::Url::parse(&url).map_err(|e| bad(&e.to_string()))?;
    if u.scheme() != "http" && u.scheme() != "https" {
        return Err(bad("the scheme must be http or https"));
    }
    if u.host().is_none() {
        return Err(bad("no host"));
    }
    if u.query().is_some() || u.fragment().is_some() {
        return Err(bad("a query or fragment has no place in it"));
    }
    if !u.username().is_empty() || u.password().is_some() {
        return Err(bad("credentials have no place in it (use ALBEDO_TOKEN)"));
    }
    Ok(Named::Url(u.as_str().trim_end_matches('/').to_owned()))
}

/// Whether the user's own daemon answers on the socket: it is a socket, the user owns it,
/// and a connection is accepted.
fn socket_answers(path: &Path) -> bool {
    use std::os::unix::fs::{FileTypeExt, MetadataExt};
    // SAFETY: geteuid has no preconditions and cannot fail.
    let me = unsafe { nix::libc::geteuid() };
    std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_socket() && m.uid() == me)
        && std::os::unix::net::UnixStream::connect(path).is_ok()
}

/// Find the daemon: `explicit` (`--daemon`), else `ALBEDO_DAEMON`, else the socket, else TCP.
pub fn locate(explicit: Option<&str>) -> Result<Endpoint, ClientError> {
    let home = albedo_home();
    let named = explicit
        .map(str::to_owned)
        .or_else(|| std::env::var(token::DAEMON_ENV).ok())
        .filter(|s| !s.trim().is_empty());
    if let Some(n) = named {
        let base = match parse_daemon(&n)? {
            Named::Socket(p) => return Ok(Endpoint::Socket(p)),
            Named::Url(u) => u,
        };
        let configured = match parse_daemon(&configured_base(&home)) {
            Ok(Named::Url(c)) => c == base,
            _ => false,
        };
        let token =
            if std::env::var_os(token::TOKEN_ENV).is_some() || is_loopback_url(&base) || configured
            {
                token::client_token(&home)?
            } else {
                None
            };
        return Ok(Endpoint::Tcp { base, token });
    }
    let sock = token::socket_path(&home);
    if socket_answers(&sock) {
        return Ok(Endpoint::Socket(sock));
    }
    Ok(Endpoint::Tcp {
        base: configured_base(&home),
        token: token::client_token(&home)?,
    })
}

/// awc's connector for the socket: every request goes to the one socket, whatever its URL.
#[derive(Clone)]
struct UnixConnector(PathBuf);

impl Service<ConnectInfo<http::Uri>> for UnixConnector {
    type Response = Connection<http::Uri, tokio::net::UnixStream>;
    type Error = ConnectError;
    type Future = LocalBoxFuture<'static, Result<Self::Response, Self::Error>>;

    actix_service::always_ready!();

    fn call(&self, req: ConnectInfo<http::Uri>) -> Self::Future {
        let path = self.0.clone();
        Box::pin(async move {
            let s = tokio::net::UnixStream::connect(&path)
                .await
                .map_err(ConnectError::Io)?;
            Ok(Connection::new(req.request().clone(), s))
        })
    }
}

/// A client of the daemon's API.
pub struct DaemonClient {
    endpoint: Endpoint,
    client: awc::Client,
}

impl DaemonClient {
    pub fn new(endpoint: Endpoint) -> DaemonClient {
        let client = match &endpoint {
            Endpoint::Socket(p) => awc::Client::builder()
                .connector(awc::Connector::new().connector(UnixConnector(p.clone())))
                .finish(),
            Endpoint::Tcp { .. } => {
                let mut c = awc::Connector::new();
                if let Ok(tls) = DaemonConfig::load(&albedo_home())
                    .map_err(|e| e.to_string())
                    .and_then(|cfg| {
                        crate::transport::tls::client_config(&cfg.ca_files)
                            .map_err(|e| e.to_string())
                    })
                {
                    c = c.rustls_0_23(tls);
                }
                awc::Client::builder().connector(c).finish()
            }
        };
        DaemonClient { endpoint, client }
    }

    pub fn endpoint(&self) -> &Endpoint {
        &self.endpoint
    }

    fn request(&self, method: http::Method, path: &str) -> awc::ClientRequest {
        let url = match &self.endpoint {
            Endpoint::Socket(_) => format!("http://localhost{path}"),
            Endpoint::Tcp { base, .. } => format!("{base}{path}"),
        };
        let mut r = self
            .client
            .request(method, url)
            .timeout(std::time::Duration::from_secs(300));
        if let Endpoint::Tcp { token: Some(t), .. } = &self.endpoint {
            r = r.insert_header((
                http::header::AUTHORIZATION,
                format!("Bearer {}", t.as_str()),
            ));
        }
        r
    }

    /// A `GET` whose answer is a stream (server-sent events): the response, its body left to
    /// read as it comes.
    pub async fn open_stream(&self, path: &str) -> Result<awc::ClientResponse, ClientError> {
        let at = self.endpoint.describe();
        let r = self
            .request(http::Method::GET, path)
            .send()
            .await
            .map_err(|e| ClientError::Unreachable {
                at: at.clone(),
                reason: e.to_string(),
            })?;
        if !r.status().is_success() {
            return Err(ClientError::BadAnswer {
                at,
                reason: format!("HTTP {} for {path}", r.status().as_u16()),
            });
        }
        Ok(r)
    }

    /// One request; the answer's status and JSON (`null` for an empty body). An answer that
    /// is not a success is an error carrying the daemon's message.
    pub async fn call(
        &self,
        method: http::Method,
        path: &str,
        body: Option<&Value>,
    ) -> Result<Value, ClientError> {
        let at = self.endpoint.describe();
        let req = self.request(method, path);
        let sent = match body {
            Some(b) => req.send_json(b).await,
            None => req.send().await,
        };
        let mut r = sent.map_err(|e| match e {
            awc::error::SendRequestError::Connect(c) => ClientError::Unreachable {
                at: at.clone(),
                reason: connect_reason(&c),
            },
            other => ClientError::Broken {
                at: at.clone(),
                reason: other.to_string(),
            },
        })?;
        let bytes = r
            .body()
            .limit(64 << 20)
            .await
            .map_err(|e| ClientError::BadAnswer {
                at: at.clone(),
                reason: e.to_string(),
            })?;
        let v: Value = if bytes.is_empty() {
            Value::Null
        } else {
            match serde_json::from_slice(&bytes) {
                Ok(v) => v,
                // A refusal that is not the API's JSON (a proxy's page): its text.
                Err(_) if !r.status().is_success() => {
                    Value::String(String::from_utf8_lossy(&bytes[..bytes.len().min(500)]).into())
                }
                Err(e) => {
                    return Err(ClientError::BadAnswer {
                        at: at.clone(),
                        reason: e.to_string(),
                    })
                }
            }
        };
        let status = r.status();
        if !status.is_success() {
            let text = |k: &str| v["error"][k].as_str().map(str::to_owned);
            let message = text("message").unwrap_or_else(|| match &v {
                Value::Null => status.canonical_reason().unwrap_or("no message").to_owned(),
                other => other.to_string(),
            });
            let field = text("field").map(|f| match v["error"]["column"].as_u64() {
                Some(c) => format!("{f}, column {c}"),
                None => f,
            });
            return Err(ClientError::Refused {
                at,
                status: status.as_u16(),
                code: text("code").unwrap_or_default(),
                message,
                field,
                body: v,
            });
        }
        Ok(v)
    }
}

/// Why a connection was not made, in a few words (`connection refused`, `no such socket`).
fn connect_reason(e: &awc::error::ConnectError) -> String {
    match e {
        awc::error::ConnectError::Io(io) => match io.kind() {
            std::io::ErrorKind::ConnectionRefused => "connection refused".to_owned(),
            std::io::ErrorKind::NotFound => "no such socket".to_owned(),
            _ => io.to_string(),
        },
        other => other.to_string(),
    }
}

fn block<F: std::future::Future<Output = i32>>(f: F) -> i32 {
    actix::System::new().block_on(f)
}

fn connect(daemon: Option<&str>) -> Result<DaemonClient, i32> {
    match locate(daemon) {
        Ok(e) => Ok(DaemonClient::new(e)),
        Err(e) => {
            eprintln!("albedo-mcp: {e}");
            Err(e.exit_code())
        }
    }
}

pub fn status(daemon: Option<&str>) -> i32 {
    let c = match connect(daemon) {
        Ok(c) => c,
        Err(code) => return code,
    };
    block(async move {
        match c.call(http::Method::GET, "/healthz", None).await {
            Ok(v) => {
                println!("{v}");
                // What is wrong with the configuration, so that a healthy daemon that would
                // refuse every session does not look fine.
                if let Ok(s) = c.call(http::Method::GET, "/settings/mcp", None).await {
                    for p in s["problems"].as_array().into_iter().flatten() {
                        if let Some(p) = p.as_str() {
                            println!("problem: {p}");
                        }
                    }
                }
                0
            }
            Err(e) => {
                eprintln!("albedo-mcp: {e}");
                e.exit_code()
            }
        }
    })
}

pub fn tools(daemon: Option<&str>) -> i32 {
    let c = match connect(daemon) {
        Ok(c) => c,
        Err(code) => return code,
    };
    block(async move {
        let id = match c
            .call(http::Method::POST, "/sessions", Some(&json!({})))
            .await
        {
            Ok(v) => v
                .get("id")
                .and_then(|x| x.as_str())
                .unwrap_or("")
                .to_owned(),
            Err(e) => {
                eprintln!("albedo-mcp: cannot create a session: {e}");
                return e.exit_code();
            }
        };
        let listed = c
            // Every tool, the deferred ones too (a person's listing, not a model's context).
            .call(
                http::Method::GET,
                &format!("/sessions/{id}/tools?all=true"),
                None,
            )
            .await;
        let _ = c
            .call(http::Method::DELETE, &format!("/sessions/{id}"), None)
            .await;
        match listed {
            Ok(v) => {
                for t in v
                    .get("tools")
                    .and_then(|t| t.as_array())
                    .into_iter()
                    .flatten()
                {
                    println!("{}", t.get("name").and_then(|n| n.as_str()).unwrap_or(""));
                }
                0
            }
            Err(e) => {
                eprintln!("albedo-mcp: {e}");
                e.exit_code()
            }
        }
    })
}

/// `albedo-mcp token`: print the token (for `curl -H "Authorization: Bearer $(albedo-mcp
/// token)"`), or its file's path; `--rotate` makes a new one through the running daemon, or
/// in the file when no daemon answers.
pub fn token(daemon: Option<&str>, rotate: bool, path: bool) -> i32 {
    let home = albedo_home();
    let file = token::token_path(&home);
    if path {
        println!("{}", file.display());
        return 0;
    }
    if !rotate {
        return match token::read_private(&file) {
            Ok(Some(t)) => {
                println!("{}", t.as_str());
                0
            }
            Ok(None) => {
                eprintln!(
                    "albedo-mcp: no API token yet: the daemon creates {} on its first start \
                     (albedo-mcp serve)",
                    file.display()
                );
                1
            }
            Err(e) => {
                eprintln!("albedo-mcp: {e}");
                1
            }
        };
    }
    let c = match connect(daemon) {
        Ok(c) => c,
        Err(code) => return code,
    };
    block(async move {
        match c.call(http::Method::POST, "/token/rotate", None).await {
            Ok(_) => {
                println!(
                    "a new API token is in {} (the daemon at {} uses it now; the old one and \
                     every signed-in web pane no longer work)",
                    file.display(),
                    c.endpoint().describe()
                );
                0
            }
            Err(ClientError::Unreachable { at, .. }) => match token::rotate(&home) {
                Ok(_) => {
                    println!(
                        "a new API token is in {} (no daemon answered at {at}: a daemon started \
                         later reads it; one running elsewhere on this home keeps the old token \
                         until it restarts)",
                        file.display()
                    );
                    0
                }
                Err(e) => {
                    eprintln!("albedo-mcp: {e}");
                    1
                }
            },
            Err(e) => {
                eprintln!("albedo-mcp: {e}");
                e.exit_code()
            }
        }
    })
}

/// A browser to open the pane with: `$BROWSER`, else `xdg-open`, `sensible-browser` or
/// `open`, whichever is on `PATH`. `None` when `ALBEDO_NO_BROWSER` is set or none exists.
fn browser() -> Option<PathBuf> {
    if std::env::var_os("ALBEDO_NO_BROWSER").is_some() {
        return None;
    }
    let find = |name: &str| -> Option<PathBuf> {
        let p = Path::new(name);
        if p.is_absolute() {
            return p.is_file().then(|| p.to_path_buf());
        }
        std::env::split_paths(&std::env::var_os("PATH")?)
            .map(|d| d.join(name))
            .find(|c| c.is_file())
    };
    if let Ok(b) = std::env::var("BROWSER") {
        if let Some(first) = b.split(':').map(str::trim).find(|s| !s.is_empty()) {
            if let Some(p) = find(first) {
                return Some(p);
            }
        }
    }
    ["xdg-open", "sensible-browser", "open"]
        .iter()
        .find_map(|n| find(n))
}

/// Open `url` in the browser [`browser`] finds: `None` when there is none (or
/// `ALBEDO_NO_BROWSER` is set), else whether it could be started (not waited for).
pub fn open_in_browser(url: &str) -> Option<Result<(), String>> {
    let b = browser()?;
    let opened = std::process::Command::new(&b)
        .arg(url)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn();
    Some(
        opened
            .map(drop)
            .map_err(|e| format!("could not start {}: {e}", b.display())),
    )
}

/// `albedo-mcp web`: a one-time sign-in link to the web pane (good once, for a minute),
/// printed, and opened in a browser when there is one.
pub fn web(daemon: Option<&str>) -> i32 {
    let c = match connect(daemon) {
        Ok(c) => c,
        Err(code) => return code,
    };
    block(async move {
        let v = match c.call(http::Method::POST, "/login/once", None).await {
            Ok(v) => v,
            Err(e) => {
                eprintln!("albedo-mcp: {e}");
                return e.exit_code();
            }
        };
        let Some(link) = v["url"].as_str() else {
            eprintln!("albedo-mcp: the daemon gave no link");
            return 1;
        };
        println!("{link}");
        if let Some(Err(e)) = open_in_browser(link) {
            eprintln!("albedo-mcp: {e}");
        }
        eprintln!("(the link works once, within a minute)");
        0
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_urls() {
        assert!(is_loopback_url("http://127.0.0.1:7420"));
        assert!(is_loopback_url("http://127.1.2.3:1"));
        assert!(is_loopback_url("http://localhost:7420"));
        assert!(is_loopback_url("https://[::1]:7420"));
        assert!(!is_loopback_url("http://10.0.0.1:7420"));
        assert!(!is_loopback_url("http://localhost.attacker.example:7420"));
        assert!(!is_loopback_url("not a url"));
    }

    fn url(s: &str) -> Named {
        Named::Url(s.to_owned())
    }

    #[test]
    fn daemon_addresses() {
        // host:port with no scheme is plain HTTP (url::Url alone would read `localhost:` as a
        // scheme).
        assert_eq!(
            parse_daemon("localhost:7420").unwrap(),
            url("http://localhost:7420")
        );
        assert_eq!(
            parse_daemon("127.0.0.1:9000").unwrap(),
            url("http://127.0.0.1:9000")
        );
        assert_eq!(
            parse_daemon("[::1]:7420").unwrap(),
            url("http://[::1]:7420")
        );
        assert_eq!(
            parse_daemon("example.com").unwrap(),
            url("http://example.com:7420")
        );
        assert_eq!(parse_daemon("[::1]").unwrap(), url("http://[::1]:7420"));
        assert_eq!(parse_daemon("7421").unwrap(), url("http://127.0.0.1:7421"));
        // A scheme is kept, a trailing slash dropped, spaces trimmed.
        assert_eq!(
            parse_daemon(" http://127.0.0.1:7420/ ").unwrap(),
            url("http://127.0.0.1:7420")
        );
        assert_eq!(
            parse_daemon("https://albedo.example:8443").unwrap(),
            url("https://albedo.example:8443")
        );
        assert_eq!(
            parse_daemon("https://proxy.example/albedo/").unwrap(),
            url("https://proxy.example/albedo")
        );
        // Sockets.
        assert_eq!(
            parse_daemon("/run/albedo.sock").unwrap(),
            Named::Socket("/run/albedo.sock".into())
        );
        assert_eq!(
            parse_daemon("unix:/tmp/a.sock").unwrap(),
            Named::Socket("/tmp/a.sock".into())
        );
        assert_eq!(
            parse_daemon("./a.sock").unwrap(),
            Named::Socket("./a.sock".into())
        );
        // Refused.
        for bad in [
            "",
            "   ",
            "unix:",
            "ftp://example.com",
            "http://",
            "http://u:p@localhost:7420",
            "http://localhost:7420/?x=1",
            "localhost:notaport",
        ] {
            let e = parse_daemon(bad).unwrap_err();
            assert!(matches!(e, ClientError::BadAddress { .. }), "{bad:?}: {e}");
            assert_eq!(e.exit_code(), 1);
        }
    }

    #[test]
    fn refusals_read_the_api_error() {
        let e = ClientError::Refused {
            at: "x".into(),
            status: 400,
            code: "invalid_settings".into(),
            message: "bad url".into(),
            field: Some("servers.a.url".into()),
            body: json!({"error": {"code": "invalid_settings", "message": "bad url"}}),
        };
        assert_eq!(
            e.to_string(),
            "the daemon refused (HTTP 400, invalid_settings): bad url [field: servers.a.url]"
        );
        assert_eq!(e.exit_code(), 1);
        assert_eq!(e.to_json()["error"]["code"], "invalid_settings");
        let u = ClientError::Unreachable {
            at: "http://127.0.0.1:7420".into(),
            reason: "connection refused".into(),
        };
        assert_eq!(u.exit_code(), 2);
        assert!(u.to_string().contains("start it with: albedo-mcp serve"));
        assert_eq!(u.to_json()["error"]["code"], "unreachable");
    }
}
