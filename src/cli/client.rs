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
    #[error("the daemon does not answer at {at}: {reason}")]
    Unreachable { at: String, reason: String },
    #[error("the daemon at {at} answered HTTP {status}: {message}")]
    Refused {
        at: String,
        status: u16,
        message: String,
    },
    #[error("the daemon at {at} sent an answer that is not JSON: {reason}")]
    BadAnswer { at: String, reason: String },
    #[error(transparent)]
    Token(#[from] token::TokenError),
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

/// The base URL of the `listen` address in `config.toml` (a wildcard address is reached over
/// loopback), and whether it is the API over TLS.
fn configured_base(home: &Path) -> String {
    let (listen, tls) = match DaemonConfig::load(home) {
        Ok(c) => (c.listen, c.tls_cert.is_some()),
        Err(_) => (
            crate::store::daemon_config::DEFAULT_LISTEN.to_owned(),
            false,
        ),
    };
    let scheme = if tls { "https" } else { "http" };
    let hostport = match listen.parse::<std::net::SocketAddr>() {
        Ok(a) if a.ip().is_unspecified() => match a {
            std::net::SocketAddr::V4(_) => format!("127.0.0.1:{}", a.port()),
            std::net::SocketAddr::V6(_) => format!("[::1]:{}", a.port()),
        },
        _ => listen,
    };
    format!("{scheme}://{hostport}")
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
        let n = n.trim().trim_end_matches('/').to_owned();
        if let Some(p) = n.strip_prefix("unix:") {
            return Ok(Endpoint::Socket(PathBuf::from(p)));
        }
        if n.starts_with('/') {
            return Ok(Endpoint::Socket(PathBuf::from(n)));
        }
        let token = if std::env::var_os(token::TOKEN_ENV).is_some()
            || is_loopback_url(&n)
            || n == configured_base(&home)
        {
            token::client_token(&home)?
        } else {
            None
        };
        return Ok(Endpoint::Tcp { base: n, token });
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
        let mut r = sent.map_err(|e| ClientError::Unreachable {
            at: at.clone(),
            reason: e.to_string(),
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
            serde_json::from_slice(&bytes).map_err(|e| ClientError::BadAnswer {
                at: at.clone(),
                reason: e.to_string(),
            })?
        };
        let status = r.status();
        if !status.is_success() {
            let message = v["error"]["message"]
                .as_str()
                .map(str::to_owned)
                .unwrap_or_else(|| v.to_string());
            return Err(ClientError::Refused {
                at,
                status: status.as_u16(),
                message,
            });
        }
        Ok(v)
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
            Err(1)
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
                0
            }
            Err(e) => {
                eprintln!("albedo-mcp: {e}");
                1
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
                return 1;
            }
        };
        let listed = c
            .call(http::Method::GET, &format!("/sessions/{id}/tools"), None)
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
                1
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
                1
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
                return 1;
            }
        };
        let Some(link) = v["url"].as_str() else {
            eprintln!("albedo-mcp: the daemon gave no link");
            return 1;
        };
        println!("{link}");
        if let Some(b) = browser() {
            let opened = std::process::Command::new(&b)
                .arg(link)
                .stdin(std::process::Stdio::null())
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .spawn();
            if let Err(e) = opened {
                eprintln!("albedo-mcp: could not start {}: {e}", b.display());
            }
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
}
