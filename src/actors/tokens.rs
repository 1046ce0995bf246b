//! The daemon's OAuth tokens, as connections use them: the access token every request to a
//! server carries, refreshed a minute before it expires and once after a 401, with one refresh
//! per server at a time for the whole daemon (every session's connection shares this book),
//! and what a refused refresh or a 403 `insufficient_scope` leaves behind.
//!
//! Tokens live in `creds.json` under `mcp.<server>`: `oauth` (the record, with the server URL
//! it belongs to: a record for another URL is never sent), `oauth_refused` (why the server
//! needs a sign-in after the authorization server refused a refresh: not tried again),
//! `oauth_clients` (registrations kept per issuer and redirect URI), `oauth_signed_out`.
//! The book keeps what it read or refreshed in memory, so a refresh never waits for the
//! settings lock (a strict save may hold it while it dials); writes go to the file in the
//! background, under that lock.
//!
//! A server whose `oauth_client` names a grant without a browser (`client_credentials`,
//! `jwt_bearer`; [`super::grants`]) gets its token from that grant when it is dialled (no
//! sign-in), a new one a minute before expiry or after a 401, single-flight like a refresh. A
//! refused grant (`invalid_grant`, `invalid_scope`, `unauthorized_client`, ...) is kept as
//! `oauth_refused` with the authorization server's words: never retried, never another grant,
//! until the `oauth_client` settings change or the user signs the server out.
//!
//! A DPoP-bound token ([`Token::prover`]) is set on the transport with its prover: every
//! request carries a fresh proof made with the key kept in the record.
//!
//! Owns: that cache, single-flight refreshes and grants, and their persistence. Must not
//! touch: the HTTP API, transports (the connection sets the token it is given).

use super::grants::{self, ServiceGrant};
use crate::oauth::{flow, Challenge, Fetcher, TokenRecord};
use crate::store::settings::{Credentials, Secret};
use crate::transport::{DpopProver, Transport, TransportError};
use serde_json::{Map, Value};
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

/// An access token as a connection sets it on its transport.
#[derive(Clone)]
pub struct Token {
    pub value: Secret,
    /// For a DPoP-bound token: what makes each request's proof.
    pub prover: Option<DpopProver>,
}

impl std::fmt::Debug for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Token(***, dpop: {})", self.prover.is_some())
    }
}

impl Token {
    /// `record`'s access token for requests to `url` (with its DPoP key's prover, if bound).
    pub(crate) fn of(record: &TokenRecord, url: &str) -> Token {
        Token {
            value: Secret::new(record.access_token.expose()),
            prover: record
                .dpop_prover(url)
                .map(|p| std::sync::Arc::new(p) as DpopProver),
        }
    }

    /// The bare token (to tell a refresh whether it is stale).
    pub fn expose(&self) -> &str {
        self.value.expose()
    }

    /// Set it on a transport: `Authorization: Bearer`, or `DPoP` with a proof per request.
    pub fn set_on(&self, transport: &dyn Transport) -> Result<(), TransportError> {
        match &self.prover {
            Some(p) => transport.set_dpop(self.value.clone(), p.clone()),
            None => transport.set_bearer(Some(self.value.clone())),
        }
    }
}

/// What a connection sends.
#[derive(Debug, Clone)]
pub enum Bearer {
    /// No sign-in is stored for this server (at this URL).
    None,
    Token(Token),
    /// Signed in once, but the tokens cannot be used: the user must sign in again.
    NeedsSignIn(String),
}

/// One server's tokens as the book knows them.
#[derive(Clone, Default)]
struct Entry {
    record: Option<TokenRecord>,
    refused: Option<String>,
    /// The grant without a browser its `oauth_client` names, if any.
    service: Option<Arc<ServiceGrant>>,
    /// When this daemon got the record's token from that grant (Unix seconds).
    granted_at: Option<u64>,
}

/// What [`TokenBook::held`] answers.
#[derive(Debug, Default)]
pub struct Held {
    pub record: Option<TokenRecord>,
    pub refused: Option<String>,
}

/// Whether a token from a grant is used as it is: not within a minute of its expiry, or (a
/// token that lives a minute or less) not past half its life, so that a short-lived token is
/// not asked for again on every request.
fn grant_usable(rec: &TokenRecord, granted_at: Option<u64>, now: u64) -> bool {
    if !rec.needs_refresh(now) {
        return true;
    }
    match (granted_at, rec.expires_at) {
        // Only a token whose whole life is within the margin: a longer one is renewed a
        // minute before its expiry, like a refreshed one.
        (Some(g), Some(e)) if e.saturating_sub(g) <= crate::oauth::record::REFRESH_MARGIN_SECS => {
            now < g.saturating_add(e.saturating_sub(g) / 2)
        }
        _ => false,
    }
}

struct Inner {
    home: PathBuf,
    tls: Arc<rustls::ClientConfig>,
    cache: Mutex<HashMap<String, Entry>>,
    flights: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    /// Grants the authorization server refused: server -> (the refused configuration's
    /// [`crate::store::settings::grant_key`], why). Kept apart from `cache`, which a settings change empties:
    /// the same configuration is not asked again (a strict save's trial and the sessions
    /// after it ask once in all); another configuration is.
    refusals: Mutex<HashMap<String, (String, String)>>,
}

/// Shared by every connection of the daemon (cheap to clone).
#[derive(Clone)]
pub struct TokenBook(Arc<Inner>);

impl std::fmt::Debug for TokenBook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TokenBook")
    }
}

/// The `mcp.<server>` object of `creds.json`, created when missing.
pub fn server_creds<'a>(
    raw: &'a mut Map<String, Value>,
    server: &str,
) -> &'a mut Map<String, Value> {
    let mcp = raw
        .entry("mcp")
        .or_insert_with(|| Value::Object(Map::new()));
    if !mcp.is_object() {
        *mcp = Value::Object(Map::new());
    }
    let s = mcp
        .as_object_mut()
        .map(|m| {
            m.entry(server.to_owned())
                .or_insert_with(|| Value::Object(Map::new()))
        })
        .filter(|v| v.is_object());
    match s.and_then(Value::as_object_mut) {
        Some(m) => m,
        None => unreachable!("made an object just above"),
    }
}

impl TokenBook {
    pub fn new(home: PathBuf, tls: Arc<rustls::ClientConfig>) -> TokenBook {
        TokenBook(Arc::new(Inner {
            home,
            tls,
            cache: Mutex::new(HashMap::new()),
            flights: Mutex::new(HashMap::new()),
            refusals: Mutex::new(HashMap::new()),
        }))
    }

    pub fn tls(&self) -> Arc<rustls::ClientConfig> {
        self.0.tls.clone()
    }

    /// Read a server's entry from `creds.json`.
    fn load(&self, server: &str) -> Entry {
        let Ok(c) = Credentials::load(&self.0.home) else {
            return Entry::default();
        };
        let s = c.raw.get("mcp").and_then(|m| m.get(server));
        let refused = s
            .and_then(|s| s.get("oauth_refused"))
            .and_then(Value::as_str)
            .map(str::to_owned);
        let refused_grant = s
            .and_then(|s| s.get("oauth_refused_grant"))
            .and_then(Value::as_str);
        if let (Some(why), Some(key)) = (&refused, refused_grant) {
            if let Ok(mut r) = self.0.refusals.lock() {
                r.entry(server.to_owned())
                    .or_insert_with(|| (key.to_owned(), why.clone()));
            }
        }
        Entry {
            record: s
                .and_then(|s| s.get("oauth"))
                .and_then(|r| serde_json::from_value(r.clone()).ok()),
            // A refused grant is in `refusals`; this is a refused refresh.
            refused: refused.filter(|_| refused_grant.is_none()),
            service: s
                .and_then(|s| s.get("oauth_client"))
                .and_then(|c| ServiceGrant::from_text(&c.to_string())),
            granted_at: None,
        }
    }

    fn entry(&self, server: &str) -> Entry {
        if let Ok(c) = self.0.cache.lock() {
            if let Some(e) = c.get(server) {
                return e.clone();
            }
        }
        let e = self.load(server);
        if let Ok(mut c) = self.0.cache.lock() {
            c.insert(server.to_owned(), e.clone());
        }
        e
    }

    /// Forget what the book holds for `server` (its tokens changed on disk: a sign-in, a sign
    /// out, a deleted server); the next use reads `creds.json` again.
    pub fn forget(&self, server: &str) {
        if let Ok(mut c) = self.0.cache.lock() {
            c.remove(server);
        }
    }

    fn flight(&self, server: &str) -> Arc<tokio::sync::Mutex<()>> {
        self.0
            .flights
            .lock()
            .map(|mut f| f.entry(server.to_owned()).or_default().clone())
            .unwrap_or_default()
    }

    /// The bearer for a request to `server` at `url`: its token (refreshed first when within
    /// a minute of expiry), or none, or why it needs a sign-in.
    pub async fn bearer(&self, server: &str, url: &str) -> Bearer {
        self.bearer_as(server, url, None).await
    }

    /// [`bearer`](Self::bearer) for a server resolved with a grant without a browser (its
    /// `oauth_client` as the connection was resolved, read once: a strict save tries a
    /// configuration before `creds.json` holds it).
    pub async fn bearer_as(
        &self,
        server: &str,
        url: &str,
        service: Option<&Arc<ServiceGrant>>,
    ) -> Bearer {
        let mut e = self.entry(server);
        if let Some(g) = service {
            e.service = Some(g.clone());
        }
        if let Some(why) = e.refused {
            return Bearer::NeedsSignIn(why);
        }
        if let Some(why) = self.grant_refusal(server, e.service.as_deref().map(|g| g.key.as_str()))
        {
            return Bearer::NeedsSignIn(why);
        }
        let record = e.record.filter(|r| r.belongs_to(url));
        if let Some(g) = e.service {
            return match record {
                Some(rec) if grant_usable(&rec, e.granted_at, crate::oauth::now_secs()) => {
                    Bearer::Token(Token::of(&rec, url))
                }
                _ => self.grant(server, url, None, &g).await,
            };
        }
        let Some(rec) = record else {
            return Bearer::None;
        };
        if rec.needs_refresh(crate::oauth::now_secs()) {
            return self.refresh(server, url, rec.access_token.expose()).await;
        }
        Bearer::Token(Token::of(&rec, url))
    }

    /// A request that carried `sent` was refused with 401: refresh once (another connection
    /// may have refreshed meanwhile: then its token), or say why a sign-in is needed. A
    /// server with a grant without a browser asks for a new token instead.
    pub async fn refused(&self, server: &str, url: &str, sent: &str) -> Bearer {
        self.refused_as(server, url, sent, None).await
    }

    /// [`refused`](Self::refused) for a server resolved with a grant without a browser (see
    /// [`bearer_as`](Self::bearer_as)).
    pub async fn refused_as(
        &self,
        server: &str,
        url: &str,
        sent: &str,
        service: Option<&Arc<ServiceGrant>>,
    ) -> Bearer {
        let service = service.cloned().or_else(|| self.entry(server).service);
        if let Some(g) = service {
            return self.grant(server, url, Some(sent), &g).await;
        }
        self.refresh(server, url, sent).await
    }

    /// A new token from `server`'s grant unless the book's is usable and not `stale` (the
    /// one a 401 refused); one grant per server at a time. A refused grant is remembered and
    /// not tried again.
    async fn grant(
        &self,
        server: &str,
        url: &str,
        stale: Option<&str>,
        service: &ServiceGrant,
    ) -> Bearer {
        let flight = self.flight(server);
        let _one = flight.lock().await;
        let e = self.entry(server);
        if let Some(why) = e.refused {
            return Bearer::NeedsSignIn(why);
        }
        if let Some(why) = self.grant_refusal(server, Some(&service.key)) {
            return Bearer::NeedsSignIn(why);
        }
        let cfg = &service.cfg;
        if let Some(rec) = e.record.filter(|r| r.belongs_to(url)) {
            let fresh = stale.is_none_or(|s| rec.access_token.expose() != s);
            if fresh && grant_usable(&rec, e.granted_at, crate::oauth::now_secs()) {
                return Bearer::Token(Token::of(&rec, url));
            }
        }
        let grant = grants::grant_name(cfg);
        let fetcher = Fetcher::new(self.0.tls.clone());
        match grants::obtain(&fetcher, url, cfg).await {
            Ok(new) => {
                tracing::info!(
                    server,
                    grant,
                    dpop = new.dpop().is_some(),
                    "got an OAuth access token without a browser"
                );
                let token = Token::of(&new, url);
                self.remember(server, &new);
                if let Ok(mut c) = self.0.cache.lock() {
                    if let Some(e) = c.get_mut(server) {
                        e.granted_at = Some(crate::oauth::now_secs());
                    }
                }
                self.persist(server, move |s| {
                    if let Ok(v) = serde_json::to_value(&new) {
                        s.insert("oauth".into(), v);
                    }
                });
                Bearer::Token(token)
            }
            Err(e) if e.refused() => {
                tracing::warn!(server, grant, error = %e, "the authorization server refused the grant; the server is left out until its oauth_client settings change");
                self.refuse_grant(server, &e.to_string(), service.key.clone())
            }
            Err(e) => {
                tracing::warn!(server, grant, error = %e, "no OAuth access token now");
                Bearer::NeedsSignIn(format!("no token from the {grant} grant now: {e}"))
            }
        }
    }

    /// Refresh `server`'s token unless the one in the book is already newer than `stale`;
    /// one refresh per server at a time.
    async fn refresh(&self, server: &str, url: &str, stale: &str) -> Bearer {
        let flight = self.flight(server);
        let _one = flight.lock().await;
        let e = self.entry(server);
        if let Some(why) = e.refused {
            return Bearer::NeedsSignIn(why);
        }
        let Some(rec) = e.record.filter(|r| r.belongs_to(url)) else {
            return Bearer::NeedsSignIn("the server needs the user to sign in".into());
        };
        let now = crate::oauth::now_secs();
        if rec.access_token.expose() != stale && !rec.needs_refresh(now) {
            return Bearer::Token(Token::of(&rec, url));
        }
        if rec.refresh_token.is_none() {
            return self.refuse(
                server,
                "the access token expired and there is no refresh token; the user must sign in again",
            );
        }
        let fetcher = Fetcher::new(self.0.tls.clone());
        match flow::refresh(&fetcher, &rec).await {
            Ok(new) => {
                tracing::info!(server, "refreshed the OAuth access token");
                let token = Token::of(&new, url);
                self.remember(server, &new);
                self.persist(server, move |s| {
                    if let Ok(v) = serde_json::to_value(&new) {
                        s.insert("oauth".into(), v);
                    }
                });
                Bearer::Token(token)
            }
            Err(e) if e.needs_sign_in() => {
                tracing::warn!(server, error = %e, "the authorization server refused the refresh; the server needs a sign-in");
                self.refuse(
                    server,
                    &format!("the refresh was refused ({e}); the user must sign in again"),
                )
            }
            // Not refused: unreachable, a 5xx. The token stays; the next request tries again.
            Err(e) => Bearer::NeedsSignIn(format!("the token could not be refreshed now: {e}")),
        }
    }

    /// Hold `record` as `server`'s tokens (a refresh, a step-up), in use at once.
    fn remember(&self, server: &str, record: &TokenRecord) {
        if let Ok(mut c) = self.0.cache.lock() {
            let e = c.entry(server.to_owned()).or_default();
            e.record = Some(record.clone());
            e.refused = None;
        }
        self.clear_refusal(server);
    }

    /// The refusal of `server`'s grant when it was for the configuration `key`.
    fn grant_refusal(&self, server: &str, key: Option<&str>) -> Option<String> {
        let key = key?;
        let r = self.0.refusals.lock().ok()?;
        r.get(server)
            .filter(|(k, _)| k == key)
            .map(|(_, why)| why.clone())
    }

    /// What the book holds for `server` now: the tokens in use (when it has read them) and why
    /// it needs a sign-in (a refused refresh, or a refused grant made to `oauth_client`, the
    /// server's configuration in `creds.json`). The book writes these to the file in the
    /// background, so a view of the file alone can lag it.
    pub fn held(&self, server: &str, oauth_client: Option<&Value>) -> Held {
        let (record, refreshed) = self
            .0
            .cache
            .lock()
            .ok()
            .and_then(|c| c.get(server).map(|e| (e.record.clone(), e.refused.clone())))
            .unwrap_or_default();
        let refused = refreshed.or_else(|| {
            let key = oauth_client.map(|c| crate::store::settings::grant_key(&c.to_string()));
            self.grant_refusal(server, key.as_deref())
        });
        Held { record, refused }
    }

    /// Forget that `server`'s grant was refused (a sign-out, a deletion, a token had): the
    /// next dial asks again.
    pub fn clear_refusal(&self, server: &str) {
        if let Ok(mut r) = self.0.refusals.lock() {
            r.remove(server);
        }
    }

    /// `server`'s grant, configured as `key`, was refused: not asked again while that is
    /// its configuration (kept in `creds.json` as `oauth_refused` and `oauth_refused_grant`).
    fn refuse_grant(&self, server: &str, why: &str, key: String) -> Bearer {
        if let Ok(mut r) = self.0.refusals.lock() {
            r.insert(server.to_owned(), (key.clone(), why.to_owned()));
        }
        let w = why.to_owned();
        self.persist(server, move |s| {
            s.insert("oauth_refused".into(), Value::String(w));
            s.insert("oauth_refused_grant".into(), Value::String(key));
        });
        Bearer::NeedsSignIn(why.to_owned())
    }

    /// Mark `server` as needing a sign-in: it is not refreshed again until one.
    fn refuse(&self, server: &str, why: &str) -> Bearer {
        if let Ok(mut c) = self.0.cache.lock() {
            let e = c.entry(server.to_owned()).or_default();
            e.refused = Some(why.to_owned());
        }
        let w = why.to_owned();
        self.persist(server, move |s| {
            s.insert("oauth_refused".into(), Value::String(w));
        });
        Bearer::NeedsSignIn(why.to_owned())
    }

    /// A 403 `insufficient_scope`: keep the token and record the union of the scopes asked
    /// for and challenged as a step-up for the next sign-in. Answers the reason the request
    /// needs a sign-in (a step-up that asks for nothing new says so: it would loop).
    pub fn insufficient_scope(&self, server: &str, url: &str, challenge: &Challenge) -> String {
        let challenged: Vec<String> = challenge.scope.clone().unwrap_or_default();
        let e = self.entry(server);
        let Some(mut rec) = e.record.filter(|r| r.belongs_to(url)) else {
            return "the server needs a sign-in with more scope".into();
        };
        let grew = rec.add_step_up(&challenged);
        self.remember(server, &rec);
        self.persist(server, move |s| {
            if let Ok(v) = serde_json::to_value(&rec) {
                s.insert("oauth".into(), v);
            }
        });
        if grew {
            "the server needs more scope (insufficient_scope): the user must sign in again, \
             asking for it"
                .into()
        } else {
            "the server still refuses with insufficient_scope after a sign-in that asked for \
             that scope; not asking again"
                .into()
        }
    }

    /// Write a change of `mcp.<server>` to `creds.json` in the background, under the settings
    /// lock. A server deleted meanwhile is not brought back.
    fn persist(&self, server: &str, change: impl FnOnce(&mut Map<String, Value>) + Send + 'static) {
        let home = self.0.home.clone();
        let server = server.to_owned();
        tokio::spawn(async move {
            let _serial = crate::store::pair::settings_lock().lock().await;
            let r = tokio::task::spawn_blocking(move || {
                crate::store::pair::update_creds(&home, |raw| {
                    let exists = raw
                        .get("mcp")
                        .and_then(|m| m.get(&server))
                        .is_some_and(Value::is_object);
                    if !exists {
                        return false;
                    }
                    change(server_creds(raw, &server));
                    true
                })
            })
            .await;
            if let Ok(Err(e)) = r {
                tracing::warn!(error = %e, "cannot save the OAuth tokens");
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// A token endpoint on 127.0.0.1 that counts refresh grants: answers a new token each
    /// time, or 400 `invalid_grant` when `refuse` is set.
    async fn token_endpoint(refuse: bool) -> (String, Arc<AtomicUsize>) {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = l.local_addr().unwrap().port();
        let count = Arc::new(AtomicUsize::new(0));
        let c2 = count.clone();
        tokio::spawn(async move {
            loop {
                let Ok((mut s, _)) = l.accept().await else {
                    return;
                };
                let c3 = c2.clone();
                tokio::spawn(async move {
                    let mut buf = Vec::new();
                    let mut chunk = [0u8; 4096];
                    // Head, then the body its Content-Length names.
                    loop {
                        let n = s.read(&mut chunk).await.unwrap_or(0);
                        if n == 0 {
                            return;
                        }
                        buf.extend_from_slice(&chunk[..n]);
                        let text = String::from_utf8_lossy(&buf).to_string();
                        if let Some(end) = text.find("\r\n\r\n") {
                            let len = text
                                .lines()
                                .find_map(|l| {
                                    l.to_ascii_lowercase()
                                        .strip_prefix("content-length:")
                                        .map(|v| v.trim().parse::<usize>().unwrap_or(0))
                                })
                                .unwrap_or(0);
                            if buf.len() >= end + 4 + len {
                                break;
                            }
                        }
                    }
                    let n = c3.fetch_add(1, Ordering::SeqCst) + 1;
                    // Slow enough that concurrent refreshes overlap.
                    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                    let (status, body) = if refuse {
                        ("400 Bad Request", r#"{"error":"invalid_grant"}"#.to_owned())
                    } else {
                        (
                            "200 OK",
                            format!(
                                r#"{{"access_token":"fresh-token-{n}","token_type":"Bearer","expires_in":3600}}"#
                            ),
                        )
                    };
                    let resp = format!(
                        "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                        body.len()
                    );
                    let _ = s.write_all(resp.as_bytes()).await;
                });
            }
        });
        (format!("http://127.0.0.1:{port}/token"), count)
    }

    fn home_with_record(token_endpoint: &str, expires_at: u64) -> tempfile::TempDir {
        let d = tempfile::tempdir().unwrap();
        let record = serde_json::json!({
            "server_url": "http://127.0.0.1:9/mcp",
            "access_token": "old-token",
            "refresh_token": "refresh-me",
            "expires_at": expires_at,
            "token_type": "Bearer",
            "issuer": "http://127.0.0.1:9",
            "resource": "http://127.0.0.1:9/mcp",
            "token_endpoint": token_endpoint,
            "client": {"client_id": "c", "auth_method": "none",
                       "redirect_uri": "http://127.0.0.1:33418/callback",
                       "issuer": "http://127.0.0.1:9", "source": "registered"},
        });
        std::fs::write(d.path().join("extensions.json"), "{}\n").unwrap();
        crate::store::files::write_atomic(
            &d.path().join("creds.json"),
            serde_json::json!({"mcp": {"s": {"oauth": record}}})
                .to_string()
                .as_bytes(),
            0o600,
        )
        .unwrap();
        d
    }

    fn tls() -> Arc<rustls::ClientConfig> {
        crate::transport::tls::client_config(&[]).unwrap()
    }

    #[actix_rt::test]
    async fn many_refused_requests_make_one_refresh() {
        let (endpoint, count) = token_endpoint(false).await;
        let home = home_with_record(&endpoint, crate::oauth::now_secs() + 3600);
        let book = TokenBook::new(home.path().to_path_buf(), tls());
        let url = "http://127.0.0.1:9/mcp";
        let tokens =
            futures_util::future::join_all((0..8).map(|_| book.refused("s", url, "old-token")))
                .await;
        assert_eq!(
            count.load(Ordering::SeqCst),
            1,
            "one refresh for eight refusals"
        );
        for t in tokens {
            match t {
                Bearer::Token(t) => assert_eq!(t.expose(), "fresh-token-1"),
                other => panic!("{other:?}"),
            }
        }
        // Near expiry: refreshed before use, once.
        let home = home_with_record(&endpoint, crate::oauth::now_secs() + 10);
        let book = TokenBook::new(home.path().to_path_buf(), tls());
        let before = count.load(Ordering::SeqCst);
        let b = futures_util::future::join_all((0..4).map(|_| book.bearer("s", url))).await;
        assert_eq!(count.load(Ordering::SeqCst), before + 1);
        assert!(b.iter().all(|t| matches!(t, Bearer::Token(_))));
        // A record for another URL is never sent.
        assert!(matches!(
            book.bearer("s", "http://127.0.0.1:9/other").await,
            Bearer::None
        ));
    }

    #[actix_rt::test]
    async fn a_refusal_is_seen_before_it_reaches_the_file() {
        // A strict save holds the settings lock while it dials: the refusal's write waits
        // behind it, and the settings view must not say less than the book knows.
        let (endpoint, _) = token_endpoint(true).await;
        let home = home_with_record(&endpoint, crate::oauth::now_secs() + 10);
        let book = TokenBook::new(home.path().to_path_buf(), tls());
        let held = crate::store::pair::settings_lock().lock().await;
        let url = "http://127.0.0.1:9/mcp";
        assert!(matches!(
            book.bearer("s", url).await,
            Bearer::NeedsSignIn(_)
        ));
        let on_disk = Credentials::load(home.path()).unwrap();
        let view = |now| super::super::signin::auth_view(Some(&on_disk), "s", Some(url), true, now);
        assert!(
            view(Held::default())["reason"].is_null(),
            "the write is still waiting"
        );
        let now = book.held("s", None);
        let why = now.refused.clone().unwrap_or_default();
        assert!(why.contains("invalid_grant"), "{why}");
        let v = view(now);
        assert_eq!(v["state"], "needs_sign_in", "{v}");
        assert_eq!(v["reason"], why.as_str(), "{v}");
        // A refused grant counts for the configuration it was made to, and no other.
        let client = serde_json::json!({"grant": "client_credentials", "client_id": "a"});
        let key = crate::store::settings::grant_key(&client.to_string());
        book.refuse_grant("g", "invalid_client", key);
        let refused = |c| book.held("g", c).refused;
        assert_eq!(refused(Some(&client)).as_deref(), Some("invalid_client"));
        let other = serde_json::json!({"grant": "client_credentials", "client_id": "b"});
        assert_eq!(refused(Some(&other)), None);
        assert_eq!(refused(None), None);
        drop(held);
    }

    #[test]
    fn a_short_lived_granted_token_is_used_for_half_its_life() {
        let mut rec: TokenRecord = serde_json::from_value(serde_json::json!({
            "server_url": "http://127.0.0.1:9/mcp", "access_token": "t", "expires_at": 1030,
            "token_type": "Bearer", "issuer": "i", "resource": "r", "token_endpoint": "e",
            "client": {"client_id": "c", "auth_method": "none", "redirect_uri": "",
                       "issuer": "i", "source": "configured"}}))
        .unwrap();
        // Granted at 1000 for 30 s: used until 1015, then asked for again.
        assert!(grant_usable(&rec, Some(1000), 1010));
        assert!(!grant_usable(&rec, Some(1000), 1015));
        assert!(
            !grant_usable(&rec, None, 1010),
            "not granted by this daemon"
        );
        // A long-lived one: the minute's margin.
        rec.expires_at = Some(5000);
        assert!(grant_usable(&rec, None, 4900));
        assert!(!grant_usable(&rec, None, 4950));
        // 70 s granted by this daemon: renewed a minute before its expiry (after 10 s), not
        // kept for half its life.
        rec.expires_at = Some(1070);
        assert!(grant_usable(&rec, Some(1000), 1009));
        assert!(!grant_usable(&rec, Some(1000), 1011));
    }

    #[actix_rt::test]
    async fn a_dpop_bound_record_gives_a_token_with_its_prover() {
        let home = home_with_record("http://127.0.0.1:9/token", crate::oauth::now_secs() + 3600);
        let path = home.path().join("creds.json");
        let mut creds: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        let key = crate::oauth::jws::DpopKey::generate().unwrap();
        creds["mcp"]["s"]["oauth"]["token_type"] = "DPoP".into();
        creds["mcp"]["s"]["oauth"]["dpop_key"] = serde_json::to_value(&key).unwrap();
        crate::store::files::write_atomic(&path, creds.to_string().as_bytes(), 0o600).unwrap();
        let book = TokenBook::new(home.path().to_path_buf(), tls());
        let Bearer::Token(t) = book.bearer("s", "http://127.0.0.1:9/mcp").await else {
            panic!("no token")
        };
        assert_eq!(t.expose(), "old-token");
        let prove = t.prover.clone().expect("a DPoP-bound token has a prover");
        let proof = prove("POST", Some("n")).unwrap();
        let claims: Value = serde_json::from_slice(
            &base64::Engine::decode(
                &base64::engine::general_purpose::URL_SAFE_NO_PAD,
                proof.split('.').nth(1).unwrap(),
            )
            .unwrap(),
        )
        .unwrap();
        assert_eq!(claims["htu"], "http://127.0.0.1:9/mcp");
        assert_eq!(claims["nonce"], "n");
        assert!(!format!("{t:?}").contains("old-token"));
    }

    #[actix_rt::test]
    async fn a_refused_refresh_needs_a_sign_in_and_is_not_tried_again() {
        let (endpoint, count) = token_endpoint(true).await;
        let home = home_with_record(&endpoint, crate::oauth::now_secs() + 3600);
        let book = TokenBook::new(home.path().to_path_buf(), tls());
        let url = "http://127.0.0.1:9/mcp";
        assert!(matches!(
            book.refused("s", url, "old-token").await,
            Bearer::NeedsSignIn(_)
        ));
        assert!(matches!(
            book.bearer("s", url).await,
            Bearer::NeedsSignIn(_)
        ));
        assert!(matches!(
            book.refused("s", url, "old-token").await,
            Bearer::NeedsSignIn(_)
        ));
        assert_eq!(count.load(Ordering::SeqCst), 1, "not tried again");
        // Written to creds.json in the background: a new book knows it too.
        let mut marked = false;
        for _ in 0..100 {
            marked = std::fs::read_to_string(home.path().join("creds.json"))
                .is_ok_and(|c| c.contains("oauth_refused"));
            if marked {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        assert!(marked, "the refusal was not saved");
        let again = TokenBook::new(home.path().to_path_buf(), tls());
        assert!(matches!(
            again.bearer("s", url).await,
            Bearer::NeedsSignIn(_)
        ));
    }
}
