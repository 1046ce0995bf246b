//! `albedo-mcp ui`: the terminal screen for the daemon's MCP servers (ratatui on crossterm):
//! the list of configured servers with their state, a form to add or edit one, delete,
//! re-enable, sign in and out, and the extensions view (the `mcp` extension for every
//! session, or for the `--session` given).
//!
//! Owns: the terminal while it runs (raw mode and the alternate screen, given back on exit,
//! on a panic through a panic hook, and on SIGINT, SIGTERM or SIGHUP), the screen's state
//! (`app.rs`, pure: keys and answers in, requests out) and its drawing (`view.rs`), and the
//! requests it makes of the daemon's API (`GET`/`PATCH /settings/mcp`,
//! `GET /settings/mcp/suggest-name`, `/auth/logins/mcp:NAME`, `GET /extensions`,
//! `PUT /extensions/mcp`, `GET /sessions/ID`, `PUT /sessions/ID/extensions/mcp`) through the command line's
//! [`DaemonClient`]. The list is asked for again after each action and every few seconds
//! (there is no daemon-wide events stream to follow yet), and a sign-in in flight every
//! 500 ms.
//!
//! Must not touch: the settings files (`extensions.json`, `creds.json`): it is a client of
//! the API like `albedo-mcp mcp`. Secrets typed in the form are shown masked, sent in the
//! PATCH's `secrets` and never drawn or logged.

pub mod app;
pub mod form;
pub mod view;

use crate::cli::client::{locate, open_in_browser, ClientError, DaemonClient};
use crate::cli::mcp::seg;
use app::{Answer, App, Failure, Key, Mode, Req};
use awc::http::Method;
use crossterm::event::{self, Event, KeyCode, KeyEventKind, KeyModifiers};
use crossterm::terminal;
use serde_json::json;
use std::io::Write;
use std::rc::Rc;
use std::time::{Duration, Instant};
use tokio::sync::mpsc;

/// Give the terminal back: raw mode off, the main screen, the cursor shown.
fn restore() {
    let _ = terminal::disable_raw_mode();
    let mut out = std::io::stdout();
    let _ = crossterm::execute!(
        out,
        event::DisableBracketedPaste,
        terminal::LeaveAlternateScreen,
        crossterm::cursor::Show
    );
    let _ = out.flush();
}

enum Input {
    Key(Key),
    Paste(String),
    Redraw,
}

fn read_input(tx: mpsc::UnboundedSender<Input>) {
    loop {
        let ev = match event::read() {
            Ok(e) => e,
            Err(_) => return,
        };
        let input = match ev {
            Event::Key(k) if k.kind != KeyEventKind::Release => {
                let ctrl = k.modifiers.contains(KeyModifiers::CONTROL);
                let key = match k.code {
                    KeyCode::Char(c) if ctrl => Key::Ctrl(c.to_ascii_lowercase()),
                    KeyCode::Char(c) => Key::Char(c),
                    KeyCode::Enter => Key::Enter,
                    KeyCode::Esc => Key::Esc,
                    KeyCode::Tab => Key::Tab,
                    KeyCode::BackTab => Key::BackTab,
                    KeyCode::Up => Key::Up,
                    KeyCode::Down => Key::Down,
                    KeyCode::Left => Key::Left,
                    KeyCode::Right => Key::Right,
                    KeyCode::Backspace => Key::Backspace,
                    _ => continue,
                };
                Input::Key(key)
            }
            Event::Paste(s) => Input::Paste(s),
            Event::Resize(..) => Input::Redraw,
            _ => continue,
        };
        if tx.send(input).is_err() {
            return;
        }
    }
}

fn failure(e: ClientError) -> Failure {
    Failure {
        unreachable: matches!(
            e,
            ClientError::Unreachable { .. } | ClientError::Broken { .. }
        ),
        text: e.to_string(),
    }
}

/// Make one request and send its answer back.
fn spawn_req(c: Rc<DaemonClient>, req: Req, tx: mpsc::UnboundedSender<Answer>) {
    actix_rt::spawn(async move {
        let login = |n: &str| format!("/auth/logins/mcp:{}", seg(n));
        let result = match &req {
            Req::Refresh => c.call(Method::GET, "/settings/mcp", None).await,
            Req::Suggest { key, value, .. } => {
                let q: String = url::form_urlencoded::Serializer::new(String::new())
                    .append_pair(key, value)
                    .finish();
                c.call(
                    Method::GET,
                    &format!("/settings/mcp/suggest-name?{q}"),
                    None,
                )
                .await
            }
            Req::Patch { body, .. } => c.call(Method::PATCH, "/settings/mcp", Some(body)).await,
            Req::LoginStart(n, _) => c.call(Method::PUT, &login(n), Some(&json!({}))).await,
            Req::LoginPoll(n, _) => c.call(Method::GET, &login(n), None).await,
            Req::LoginPaste(n, url, _) => {
                c.call(
                    Method::POST,
                    &format!("{}/callback", login(n)),
                    Some(&json!({ "url": url })),
                )
                .await
            }
            Req::LoginCancel(n) => c.call(Method::DELETE, &login(n), None).await,
            Req::Extensions => c.call(Method::GET, "/extensions", None).await,
            Req::Sessions => c.call(Method::GET, "/sessions", None).await,
            Req::SessionView(id) => {
                c.call(Method::GET, &format!("/sessions/{}", seg(id)), None)
                    .await
            }
            Req::SetExtension {
                extension,
                session,
                on,
            } => {
                let path = match session {
                    Some(id) => format!("/sessions/{}/extensions/{extension}", seg(id)),
                    None => format!("/extensions/{extension}"),
                };
                c.call(Method::PUT, &path, Some(&json!({ "enabled": on })))
                    .await
            }
        };
        let _ = tx.send(Answer {
            req,
            result: result.map_err(failure),
        });
    });
}

/// `albedo-mcp ui [--daemon ADDR]`: the exit status (0, or 2 when the daemon's address is
/// not usable or there is no terminal).
pub fn run(daemon: Option<&str>, session: Option<&str>) -> i32 {
    let endpoint = match locate(daemon) {
        Ok(e) => e,
        Err(e) => {
            eprintln!("albedo-mcp: {e}");
            return e.exit_code();
        }
    };
    if !std::io::IsTerminal::is_terminal(&std::io::stdout()) {
        eprintln!("albedo-mcp: ui needs a terminal (use `albedo-mcp mcp` in scripts)");
        return 2;
    }
    let client = DaemonClient::new(endpoint);
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        restore();
        previous(info);
    }));
    if let Err(e) = terminal::enable_raw_mode() {
        eprintln!("albedo-mcp: cannot set up the terminal: {e}");
        return 2;
    }
    let _ = crossterm::execute!(
        std::io::stdout(),
        terminal::EnterAlternateScreen,
        event::EnableBracketedPaste
    );
    let explicit = daemon.map(str::to_owned);
    let session = session.map(str::to_owned);
    let code = actix::System::new().block_on(main_loop(client, explicit, session));
    restore();
    code
}

/// Follow `GET /settings/mcp/events` for the screen's life: every event wakes the loop, and
/// so do the stream's opening and its end; a stream that ends or cannot open is opened again
/// 2 s later (the daemon may come back).
async fn follow_settings_events(client: Rc<DaemonClient>, wake: mpsc::UnboundedSender<()>) {
    use futures_util::StreamExt;
    loop {
        if let Ok(mut r) = client.open_stream("/settings/mcp/events").await {
            // (Re)opened: what happened while it was closed is read at once.
            if wake.send(()).is_err() {
                return;
            }
            while let Some(Ok(chunk)) = r.next().await {
                if chunk.windows(7).any(|w| w == b"event: ") && wake.send(()).is_err() {
                    return;
                }
            }
            // Ended: the daemon may have stopped; reading the list says so.
            if wake.send(()).is_err() {
                return;
            }
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
}

async fn main_loop(client: DaemonClient, explicit: Option<String>, session: Option<String>) -> i32 {
    let mut client = Rc::new(client);
    use tokio::signal::unix::{signal, SignalKind};
    let mut terminal =
        match ratatui::Terminal::new(ratatui::backend::CrosstermBackend::new(std::io::stdout())) {
            Ok(t) => t,
            Err(e) => {
                restore();
                eprintln!("albedo-mcp: cannot set up the terminal: {e}");
                return 2;
            }
        };
    let (sig_int, sig_term, sig_hup) = (
        signal(SignalKind::interrupt()),
        signal(SignalKind::terminate()),
        signal(SignalKind::hangup()),
    );
    let (Ok(mut sig_int), Ok(mut sig_term), Ok(mut sig_hup)) = (sig_int, sig_term, sig_hup) else {
        return 2;
    };
    let (in_tx, mut inputs) = mpsc::unbounded_channel();
    std::thread::spawn(move || read_input(in_tx));
    let (ans_tx, mut answers) = mpsc::unbounded_channel::<Answer>();
    // The daemon's settings events (saves, sign-ins, sessions, connection states): each one
    // means "read the list again".
    let (wake_tx, mut wakes) = mpsc::unbounded_channel::<()>();
    let follow = tokio::task::spawn_local(follow_settings_events(client.clone(), wake_tx));
    let mut app = App::new(client.endpoint().describe());
    app.session = session;
    let mut ticker = tokio::time::interval(Duration::from_millis(250));
    let mut code = 0;
    loop {
        if let Err(e) = terminal.draw(|f| view::draw(f, &app)) {
            restore();
            eprintln!("albedo-mcp: cannot draw: {e}");
            return 1;
        }
        let reqs: Vec<Req> = tokio::select! {
            _ = sig_int.recv() => { code = 130; break }
            _ = sig_term.recv() => { code = 143; break }
            _ = sig_hup.recv() => { code = 129; break }
            i = inputs.recv() => match i {
                Some(Input::Key(k)) => app.key(k),
                Some(Input::Paste(s)) => app.paste(&s),
                Some(Input::Redraw) => vec![],
                None => break,
            },
            a = answers.recv() => match a {
                Some(a) => {
                    let started = matches!(a.req, Req::LoginStart(..));
                    let refresh = matches!(a.req, Req::Refresh);
                    let r = app.answer(a, Instant::now());
                    if started {
                        open_browser(&mut app);
                    }
                    if refresh && app.unreachable.is_some() {
                        // Looked for again: a daemon started since may be on its socket.
                        if let Ok(e) = locate(explicit.as_deref()) {
                            if e.describe() != client.endpoint().describe() {
                                app.daemon = e.describe();
                                client = Rc::new(DaemonClient::new(e));
                            }
                        }
                    }
                    r
                }
                None => vec![],
            },
            _ = ticker.tick() => app.tick(Instant::now()),
            Some(()) = wakes.recv() => app.changed(),
        };
        for r in reqs {
            spawn_req(client.clone(), r, ans_tx.clone());
        }
        if app.quit {
            break;
        }
    }
    follow.abort();
    // A sign-in in flight is cancelled, whatever ended the screen.
    if let Some(name) = app.login_in_flight() {
        let path = format!("/auth/logins/mcp:{}", seg(&name));
        let _ = tokio::time::timeout(
            Duration::from_secs(3),
            client.call(Method::DELETE, &path, None),
        )
        .await;
    }
    code
}

/// Once a sign-in's URL is known: a browser opened on it (unless `ALBEDO_NO_BROWSER`).
fn open_browser(app: &mut App) {
    let Mode::Login(l) = &mut app.mode else {
        return;
    };
    let Some(url) = l.url.clone() else { return };
    l.browser = Some(match open_in_browser(&url) {
        None => "(no browser opened)".to_owned(),
        Some(Ok(())) => "A browser was opened on it.".to_owned(),
        Some(Err(e)) => e,
    });
}
