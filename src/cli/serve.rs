//! `albedo-mcp serve`: start the actors and the HTTP API, and shut down cleanly on SIGINT or
//! SIGTERM, closing every connection (which ends every stdio server process).
//!
//! At start it creates `$ALBEDO_HOME` with mode 0700 (an existing one that group or others
//! can use gets a warning; its mode is not changed) and reads or creates the fingerprint key
//! (a key file others can read stops the daemon, naming the fix).
//!
//! The API listens on TCP and on the Unix socket `$ALBEDO_HOME/albedo.sock` (`listen`), behind
//! the trust boundary (`api::trust`); the API token is read or created at start
//! (`store::token`) and never logged.

use crate::actors::connection::ConnContext;
use crate::actors::registry::{CloseAll, Count, Registry};
use crate::actors::runtime::Runtime;
use crate::api::{self, AppState};
use crate::store::daemon_config::{albedo_home, DaemonConfig};
use actix::prelude::*;
use actix_web::{middleware::from_fn, web, App, HttpServer};
use std::path::PathBuf;
use std::sync::Arc;

#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("cannot create {path}: {source}")]
    Home {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Config(#[from] crate::store::daemon_config::ConfigError),
    #[error(transparent)]
    Token(#[from] crate::store::token::TokenError),
    #[error(transparent)]
    Listen(#[from] super::listen::ListenError),
    #[error(transparent)]
    Key(#[from] crate::store::fingerprint::KeyError),
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: String,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Store(#[from] crate::store::catalogue::StoreError),
    #[error(transparent)]
    Tls(#[from] crate::transport::tls::TlsError),
    #[error("the launcher is not available: {0}")]
    Launcher(String),
    #[error("the server failed: {0}")]
    Server(#[source] std::io::Error),
}

/// The first SIGTERM or SIGINT.
async fn stop_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        // Without signal handling the daemon still stops when killed; nothing to wait for.
        return std::future::pending().await;
    };
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
}

pub fn init_logging(format: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_env("ALBEDO_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    use std::io::IsTerminal;
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        // Colour codes only for a terminal, never in a log file or a pipe.
        .with_ansi(std::io::stderr().is_terminal())
        // Every line passes the secret redaction last (`protocol::text`).
        .with_writer(|| crate::protocol::text::RedactingWriter(std::io::stderr()));
    let _ = if format == "json" {
        builder.json().try_init()
    } else {
        builder.try_init()
    };
}

/// Give memory of large messages back to the system when they are freed. glibc raises its
/// mmap threshold each time a large block is freed (up to 32 MiB), after which blocks of a
/// 10 MiB message come from per-thread heaps and stay resident after use, once per thread
/// that handled one: the daemon's peak grew to 6x a message's size. A fixed threshold
/// turns that adjustment off: a block of 1 MiB or more is mapped and unmapped.
fn release_large_buffers() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    unsafe {
        if std::env::var_os("BENCH_NO_MALLOPT").is_none() {
            nix::libc::mallopt(nix::libc::M_MMAP_THRESHOLD, 1 << 20);
        }
    }
}

pub fn run(listen: Option<String>, ready_file: Option<PathBuf>) -> Result<(), ServeError> {
    let home = albedo_home();
    let home_status =
        crate::store::files::create_home(&home).map_err(|source| ServeError::Home {
            path: home.display().to_string(),
            source,
        })?;
    let cfg = DaemonConfig::load(&home)?;
    init_logging(&cfg.log_format);
    if let crate::store::files::HomeStatus::Loose(mode) = home_status {
        tracing::warn!(
            home = %home.display(),
            "{} has mode {mode:04o}: group or others can use it; `chmod 700 {}` keeps the \
             settings and the database private",
            home.display(),
            home.display()
        );
    }
    crate::store::fingerprint::FingerprintKey::load_or_create(&home)?;
    // A settings change a crash interrupted is finished before anything reads the files.
    match crate::store::pair::recover(&home) {
        Ok(crate::store::pair::Recovery::Clean) => {}
        Ok(crate::store::pair::Recovery::Finished) => tracing::warn!(
            "a settings change was interrupted (the daemon stopped while saving); it is finished now"
        ),
        Ok(crate::store::pair::Recovery::MovedAside(p)) => tracing::warn!(
            path = %p.display(),
            "an unreadable settings journal was moved aside; extensions.json and creds.json are left as they are"
        ),
        Err(e) => tracing::error!(error = %e, "cannot finish an interrupted settings change"),
    }
    crate::store::problems::report(&crate::store::problems::check(&home));
    release_large_buffers();
    let listen = listen.unwrap_or_else(|| cfg.listen.clone());
    // The API token: read, or created on the first start; registered with the log writer's
    // redaction so that no log line can carry it.
    let (token, created) = crate::store::token::load_or_create(&home)?;
    crate::protocol::text::register_secrets([token.as_str()]);
    let token_file = crate::store::token::token_path(&home);
    if created {
        tracing::info!(path = %token_file.display(), "created the API token (mode 0600)");
    }
    let tcp_addrs = super::listen::resolve(&listen)?;
    let server_tls = super::listen::tls_config(cfg.tls_cert.as_deref(), cfg.tls_key.as_deref())?;
    let exposure = super::listen::exposure(
        &listen,
        &tcp_addrs,
        server_tls.is_some(),
        cfg.allow_plain_http_remote,
    )?;
    let socket = super::listen::open_socket(&home)?;
    let launcher = crate::transport::stdio::default_launcher()
        .map_err(|e| ServeError::Launcher(e.to_string()))?;
    let store = crate::store::catalogue::CatalogueStore::open(&cfg.database_url(&home))?;
    let tls = crate::transport::tls::client_config(&cfg.ca_files)?;
    let system = actix::System::new();
    system.block_on(async move {
        let threads = std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(2)
            .clamp(1, 8);
        let registry = Registry::new(threads).start();
        let tokens = crate::actors::tokens::TokenBook::new(home.clone(), tls.clone());
        let mut ctx = ConnContext::new(
            launcher,
            Some(Arc::new(crate::actors::connection::AwcOpener { tls })),
        );
        ctx.dials = crate::actors::connection::DialLimit::new(cfg.max_concurrent_dials);
        ctx.checks = crate::actors::connection::DialLimit::new(
            crate::actors::connection::checks_for_cores(threads).min(cfg.max_concurrent_dials),
        );
        ctx.tokens = Some(tokens.clone());
        let (link_states, link_state_events) = tokio::sync::broadcast::channel(1024);
        ctx.state_changes = Some(link_states);
        let signins = crate::actors::signin::SignIns::new(home.clone(), tokens.clone());
        let sign_in_events = signins.events().subscribe();
        let signins = signins.start();
        let runtime = Runtime::new(home.clone(), registry.clone(), ctx, Some(store)).start();
        let limits = api::SessionLimits {
            max_sessions: cfg.max_sessions.max(1),
            idle: std::time::Duration::from_secs(cfg.session_idle_secs.max(1)),
        };
        tracing::info!(
            max_sessions = limits.max_sessions,
            session_idle_secs = limits.idle.as_secs(),
            max_concurrent_dials = cfg.max_concurrent_dials,
            "session limits"
        );
        let mut app_state = AppState::new(home.clone(), runtime, limits);
        app_state.signins = Some(signins);
        app_state.tokens = Some(tokens);
        let state = web::Data::new(app_state);
        actix_rt::spawn(api::sweep_idle_sessions(state.clone()));
        actix_rt::spawn(api::auth::follow_sign_ins(state.clone(), sign_in_events));
        actix_rt::spawn(api::follow_link_states(state.clone(), link_state_events));
        let trust = web::Data::new(api::trust::Trust::new(
            &token,
            home.clone(),
            socket.as_ref().map(|s| s.path.clone()),
            &cfg.allowed_hosts,
        ));
        let bodies = api::BodyLimits {
            call: cfg.max_call_body_bytes.max(1),
            other: cfg.max_body_bytes.max(1),
        };
        let app_trust = trust.clone();
        let server = HttpServer::new(move || {
            App::new()
                .app_data(state.clone())
                .app_data(app_trust.clone())
                .wrap(from_fn(api::trust::guard))
                .configure(|c| api::configure(c, bodies))
        })
        .on_connect(api::trust::on_connect)
        .workers(threads.min(4))
        .shutdown_timeout(3)
        // actix-server's own signal handling stops the whole System 300 ms after a signal,
        // which would drop the connections' transports mid-shutdown (their DELETEs): the
        // daemon handles SIGTERM and SIGINT itself and stops only the HTTP server.
        .disable_signals();
        let tls = server_tls.is_some();
        let server = match server_tls {
            Some(t) => server.bind_rustls_0_23(&tcp_addrs[..], t),
            None => server.bind(&tcp_addrs[..]),
        }
        .map_err(|source| ServeError::Bind {
            addr: listen.clone(),
            source,
        })?;
        // TCP addresses only (a Unix listener shows as a made-up 127.0.0.1:8080).
        let addrs = server.addrs();
        if let Some(first) = addrs.first() {
            trust.set_origin(super::listen::own_origin(*first, tls));
        }
        let scheme = if tls { "https" } else { "http" };
        let shown: Vec<String> = addrs.iter().map(|a| a.to_string()).collect();
        let server = match &socket {
            Some(s) => {
                let l = s.listener.try_clone().map_err(|source| ServeError::Bind {
                    addr: s.path.display().to_string(),
                    source,
                })?;
                server.listen_uds(l).map_err(|source| ServeError::Bind {
                    addr: s.path.display().to_string(),
                    source,
                })?
            }
            None => server,
        };
        let urls: Vec<String> = shown.iter().map(|a| format!("{scheme}://{a}")).collect();
        super::listen::log_exposure(exposure, &urls.join(", "));
        tracing::info!(
            home = %home.display(),
            token = %token_file.display(),
            socket = %socket.as_ref().map(|s| s.path.display().to_string()).unwrap_or_else(|| "none".into()),
            "albedo-mcp listening on {}",
            urls.join(", ")
        );
        if let Some(f) = ready_file {
            let _ = crate::store::files::write_atomic(&f, shown.join("\n").as_bytes(), 0o644);
        }
        let server = server.run();
        let handle = server.handle();
        actix_rt::spawn(async move {
            stop_signal().await;
            tracing::info!("stopping: closing every connection");
            handle.stop(true).await;
        });
        let result = server.await;
        drop(socket);
        let open = registry.send(CloseAll).await.unwrap_or(0);
        // Each HTTP session's DELETE is awaited, 2 s at most for all of them: first every
        // connection actor ends (sessions closed theirs as the server stopped; their Close
        // may still be queued), then every transport's shutdown settles.
        let limit = std::time::Duration::from_secs(2);
        let deadline = tokio::time::Instant::now() + limit;
        while registry.send(Count).await.map(|c| c.0).unwrap_or(0) > 0
            && tokio::time::Instant::now() < deadline
        {
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        let unsettled = crate::transport::http::closing_settled(left).await;
        tracing::info!(
            connections = open,
            unsettled,
            "albedo-mcp stopped; connections closed"
        );
        // Give actors a moment to drop their transports (the launchers end the servers).
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        result.map_err(ServeError::Server)
    })
}
