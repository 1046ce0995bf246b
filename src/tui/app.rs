//! The screen's state and what each key does: pure (no terminal, no network), so the
//! runner (`mod.rs`) feeds it keys and the daemon's answers and carries out the requests it
//! asks for.

use crate::cli::mcp::render::target;
use serde_json::{json, Value};
use std::time::{Duration, Instant};

pub use super::form::{masked, Field, Form};

/// How often the list is asked for again while no daemon answers (to find it again). While
/// one answers, the list is read when `GET /settings/mcp/events` says something changed:
/// settings, sign-ins, sessions, connection states.
pub const REFRESH: Duration = Duration::from_secs(10);
/// How often a sign-in in flight is asked for.
pub const LOGIN_POLL: Duration = Duration::from_millis(500);

/// A request for the runner to make of the daemon; its answer comes back as an [`Answer`].
#[derive(Debug, Clone, PartialEq)]
pub enum Req {
    Refresh,
    /// `GET /settings/mcp/suggest-name` with `url` or `command_line`; `gen` ties the answer
    /// to the form's text it was asked for.
    Suggest {
        gen: u64,
        key: &'static str,
        value: String,
    },
    /// `PATCH /settings/mcp`; `what` says what it was for.
    Patch {
        what: PatchFor,
        body: Value,
    },
    /// A sign-in's requests carry the number of the dialog they are for ([`Login::seq`]): an
    /// answer for an earlier dialog (a poll still in flight when it closed) is dropped.
    LoginStart(String, u64),
    LoginPoll(String, u64),
    LoginPaste(String, String, u64),
    LoginCancel(String),
    /// `GET /extensions`.
    Extensions,
    /// `GET /sessions/ID`.
    SessionView(String),
    /// `GET /sessions`: the live sessions, to pick one for the extensions view.
    Sessions,
    /// `PUT /extensions/EXT` (every session), or `PUT /sessions/ID/extensions/EXT`, where EXT
    /// is `mcp` or `editor-mcp`.
    SetExtension {
        extension: &'static str,
        session: Option<String>,
        on: bool,
    },
}

#[derive(Debug, Clone, PartialEq)]
pub enum PatchFor {
    /// The form's save (server name).
    Form(String),
    /// A list action: its description for the message line.
    Action(String),
}

/// The daemon's answer to a [`Req`]: the JSON, or the error's text (and whether no daemon
/// answers at all).
#[derive(Debug, Clone)]
pub struct Answer {
    pub req: Req,
    pub result: Result<Value, Failure>,
}

#[derive(Debug, Clone)]
pub struct Failure {
    pub text: String,
    pub unreachable: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Key {
    Char(char),
    Ctrl(char),
    Enter,
    Esc,
    Tab,
    BackTab,
    Up,
    Down,
    Left,
    Right,
    Backspace,
}

#[derive(Debug, Clone, Default)]
pub struct Login {
    /// This dialog's number, one more than the one before it.
    pub seq: u64,
    pub name: String,
    pub url: Option<String>,
    pub redirect_uri: Option<String>,
    pub state: String,
    pub paste: String,
    pub message: Option<String>,
    pub browser: Option<String>,
    pub done: bool,
    pub next_poll: Option<Instant>,
    /// Reopen the form afterwards (a sign-in started from it).
    pub back_to_form: Option<Box<Form>>,
}

#[derive(Debug, Clone)]
pub enum Mode {
    List,
    Form(Box<Form>),
    ConfirmDelete(String),
    Login(Box<Login>),
    /// The extensions view: the `mcp` and `editor-mcp` extensions' defaults for every
    /// session, or (after `s`) their choice for one session.
    Extensions {
        session_scope: bool,
    },
}

/// The extensions the extensions view switches, in its order.
pub const EXTENSIONS: [&str; 2] = ["mcp", crate::editor::EXTENSION];

/// A session's choice for `extension`, from `GET /sessions/ID`.
pub fn session_choice(view: &Value, extension: &str) -> bool {
    if extension == "mcp" {
        view["enabled"] == true
    } else {
        view["editor_mcp"]["enabled"] == true
    }
}

pub struct App {
    pub daemon: String,
    /// The last `GET /settings/mcp`.
    pub settings: Option<Value>,
    /// The daemon could not be reached (the message), since the last answer.
    pub unreachable: Option<String>,
    pub selected: usize,
    pub mode: Mode,
    /// The message line (what the last action did).
    pub message: Option<(String, bool)>,
    pub quit: bool,
    pub refreshing: bool,
    pub last_refresh: Option<Instant>,
    /// A change the list's actions asked for is in flight.
    pub busy: Option<String>,
    /// Sign-in dialogs opened so far (each [`Login`]'s `seq`).
    logins: u64,
    /// `--session ID`: the session the extensions view can change alone.
    pub session: Option<String>,
    /// `session` was picked from the live sessions (`s` moves to the next one).
    pub picked: bool,
    /// The last `GET /extensions`, and `GET /sessions/ID`.
    pub extensions: Option<Value>,
    pub session_view: Option<Value>,
    /// The extensions view's selected row: 0 `mcp`, 1 `editor-mcp`.
    pub ext_row: usize,
}

/// Whether a sign-in state is final.
pub fn finished(state: &str) -> bool {
    matches!(state, "signed_in" | "failed" | "cancelled" | "expired")
}

impl App {
    pub fn new(daemon: String) -> App {
        App {
            daemon,
            settings: None,
            unreachable: None,
            selected: 0,
            mode: Mode::List,
            message: None,
            quit: false,
            refreshing: false,
            last_refresh: None,
            busy: None,
            logins: 0,
            session: None,
            picked: false,
            extensions: None,
            ext_row: 0,
            session_view: None,
        }
    }

    /// The configured servers, by name.
    pub fn servers(&self) -> Vec<(String, Value)> {
        self.settings
            .as_ref()
            .and_then(|s| s["servers"].as_object())
            .map(|m| m.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
            .unwrap_or_default()
    }

    pub fn selected_server(&self) -> Option<(String, Value)> {
        self.servers().into_iter().nth(self.selected)
    }

    fn flash(&mut self, text: impl Into<String>, error: bool) {
        self.message = Some((text.into(), error));
    }

    /// The server of a sign-in in flight (to cancel when quitting).
    pub fn login_in_flight(&self) -> Option<String> {
        match &self.mode {
            Mode::Login(l) if !l.done => Some(l.name.clone()),
            _ => None,
        }
    }

    /// What is due on a tick: a refresh, a sign-in poll.
    pub fn tick(&mut self, now: Instant) -> Vec<Req> {
        let mut out = Vec::new();
        // Live from the daemon's events (connection states included); read on a timer only
        // while no daemon answers, to find it again.
        let due = match self.last_refresh {
            None => true,
            Some(t) => self.unreachable.is_some() && now >= t + REFRESH,
        };
        if due && !self.refreshing {
            self.refreshing = true;
            out.push(Req::Refresh);
        }
        if let Mode::Login(l) = &mut self.mode {
            if let Some(t) = l.next_poll {
                if now >= t {
                    l.next_poll = None;
                    out.push(Req::LoginPoll(l.name.clone(), l.seq));
                }
            }
        }
        out
    }

    /// The daemon said its settings changed: read them again.
    pub fn changed(&mut self) -> Vec<Req> {
        self.refresh()
    }

    fn refresh(&mut self) -> Vec<Req> {
        if self.refreshing {
            // Asked again once the one in flight answers.
            self.last_refresh = None;
            return vec![];
        }
        self.refreshing = true;
        vec![Req::Refresh]
    }

    pub fn paste(&mut self, text: &str) -> Vec<Req> {
        let text: String = text.chars().filter(|c| !c.is_control()).collect();
        match &mut self.mode {
            Mode::Form(f) => {
                let field = f.focused();
                if let Some(s) = f.text_mut(field) {
                    s.push_str(&text);
                    return self.after_edit(field);
                }
                vec![]
            }
            Mode::Login(l) if !l.done => {
                l.paste.push_str(&text);
                vec![]
            }
            _ => vec![],
        }
    }

    pub fn key(&mut self, k: Key) -> Vec<Req> {
        if k == Key::Ctrl('c') {
            // Quit from anywhere (a sign-in in flight is cancelled on the way out).
            self.quit = true;
            return vec![];
        }
        match std::mem::replace(&mut self.mode, Mode::List) {
            Mode::List => self.list_key(k),
            Mode::Form(f) => {
                self.mode = Mode::Form(f);
                self.form_key(k)
            }
            Mode::ConfirmDelete(name) => match k {
                Key::Char('y') | Key::Char('Y') => {
                    self.busy = Some(format!("deleting {name}"));
                    vec![Req::Patch {
                        what: PatchFor::Action(format!("deleted {name}")),
                        body: json!({"servers": {name: null}}),
                    }]
                }
                Key::Char('n') | Key::Char('N') | Key::Esc => {
                    self.flash("nothing deleted", false);
                    vec![]
                }
                _ => {
                    self.mode = Mode::ConfirmDelete(name);
                    vec![]
                }
            },
            Mode::Login(l) => {
                self.mode = Mode::Login(l);
                self.login_key(k)
            }
            Mode::Extensions { session_scope } => self.extensions_key(k, session_scope),
        }
    }

    /// The extensions' state asked for again.
    fn extension_reqs(&self) -> Vec<Req> {
        let mut r = vec![Req::Extensions];
        if let Some(id) = &self.session {
            r.push(Req::SessionView(id.clone()));
        }
        r
    }

    fn extensions_key(&mut self, k: Key, session_scope: bool) -> Vec<Req> {
        self.mode = Mode::Extensions { session_scope };
        match k {
            Key::Esc | Key::Char('x') => {
                self.mode = Mode::List;
                vec![]
            }
            Key::Char('q') => {
                self.quit = true;
                vec![]
            }
            Key::Char('s') => match &self.session {
                Some(_) if !self.picked => {
                    self.mode = Mode::Extensions {
                        session_scope: !session_scope,
                    };
                    vec![]
                }
                // No `--session`: pick from the live sessions, one after the other, then back
                // to every session.
                _ => vec![Req::Sessions],
            },
            Key::Up | Key::Char('k') => {
                self.ext_row = 0;
                vec![]
            }
            Key::Down | Key::Char('j') => {
                self.ext_row = 1;
                vec![]
            }
            Key::Enter => {
                let session = if session_scope {
                    self.session.clone()
                } else {
                    None
                };
                let extension = EXTENSIONS[self.ext_row.min(1)];
                let now = match &session {
                    Some(_) => self
                        .session_view
                        .as_ref()
                        .map(|v| session_choice(v, extension)),
                    None => self
                        .extensions
                        .as_ref()
                        .map(|v| v[extension]["enabled"] == true),
                };
                match now {
                    Some(on) => {
                        self.busy = Some(format!("switching the {extension} extension"));
                        vec![Req::SetExtension {
                            extension,
                            session,
                            on: !on,
                        }]
                    }
                    None => self.extension_reqs(),
                }
            }
            Key::Char('r') => self.extension_reqs(),
            _ => vec![],
        }
    }

    fn list_key(&mut self, k: Key) -> Vec<Req> {
        let n = self.servers().len();
        match k {
            Key::Char('q') => {
                self.quit = true;
                vec![]
            }
            Key::Down | Key::Char('j') => {
                if n > 0 {
                    self.selected = (self.selected + 1).min(n - 1);
                }
                vec![]
            }
            Key::Up | Key::Char('k') => {
                self.selected = self.selected.saturating_sub(1);
                vec![]
            }
            Key::Char('r') => self.refresh(),
            Key::Char('x') => {
                self.mode = Mode::Extensions {
                    session_scope: false,
                };
                self.message = None;
                self.extension_reqs()
            }
            Key::Char('n') => {
                self.mode = Mode::Form(Box::new(Form {
                    http: true,
                    focus: 1,
                    ..Form::default()
                }));
                self.message = None;
                vec![]
            }
            _ if self.settings.is_none() => vec![],
            Key::Enter => {
                if let Some((name, s)) = self.selected_server() {
                    let http = s["type"] != "stdio" && s["url"].is_string();
                    self.mode = Mode::Form(Box::new(Form {
                        editing: Some(name.clone()),
                        http,
                        target: target(&s),
                        name,
                        name_edited: true,
                        focus: 1,
                        ..Form::default()
                    }));
                    self.message = None;
                }
                vec![]
            }
            Key::Char('d') => {
                if let Some((name, _)) = self.selected_server() {
                    self.mode = Mode::ConfirmDelete(name);
                }
                vec![]
            }
            Key::Char('e') => match self.selected_server() {
                Some((name, _)) => {
                    self.busy = Some(format!("enabling {name}"));
                    vec![Req::Patch {
                        what: PatchFor::Action(format!("enabled {name}")),
                        body: json!({"servers": {name: {"enabled": true}}}),
                    }]
                }
                None => vec![],
            },
            Key::Ctrl('l') => match self.selected_server() {
                Some((name, _)) => self.start_login(name, None),
                None => vec![],
            },
            Key::Ctrl('u') => match self.selected_server() {
                Some((name, _)) => {
                    self.busy = Some(format!("signing out of {name}"));
                    vec![Req::Patch {
                        what: PatchFor::Action(format!("signed out of {name}")),
                        body: json!({"secrets": {name: {"oauth": null}}}),
                    }]
                }
                None => vec![],
            },
            _ => vec![],
        }
    }

    fn start_login(&mut self, name: String, back: Option<Box<Form>>) -> Vec<Req> {
        self.logins = self.logins.wrapping_add(1);
        let seq = self.logins;
        self.mode = Mode::Login(Box::new(Login {
            seq,
            name: name.clone(),
            state: "starting".into(),
            back_to_form: back,
            ..Login::default()
        }));
        vec![Req::LoginStart(name, seq)]
    }

    fn form_key(&mut self, k: Key) -> Vec<Req> {
        let Mode::Form(f) = &mut self.mode else {
            return vec![];
        };
        if f.saving {
            // Only esc while a save is in flight: the form closes, the save goes on.
            if k == Key::Esc {
                self.mode = Mode::List;
            }
            return vec![];
        }
        let n = f.fields().len();
        let field = f.focused();
        match k {
            Key::Esc => {
                self.mode = Mode::List;
                vec![]
            }
            Key::Ctrl('l') if f.needs_sign_in => {
                let name = f.name.trim().to_owned();
                let back = f.clone();
                self.start_login(name, Some(back))
            }
            Key::Ctrl('s') => self.save(),
            Key::Enter if f.focus + 1 >= n => self.save(),
            Key::Enter | Key::Tab | Key::Down => {
                f.focus = (f.focus + 1) % n;
                vec![]
            }
            Key::BackTab | Key::Up => {
                f.focus = (f.focus + n - 1) % n;
                vec![]
            }
            // On the transport field, or while the URL or command is empty.
            Key::Left | Key::Right
                if field == Field::Transport || (field == Field::Target && f.target.is_empty()) =>
            {
                f.http = !f.http;
                f.target.clear();
                f.error = None;
                if !f.name_edited {
                    f.name.clear();
                }
                vec![]
            }
            Key::Backspace => {
                if let Some(s) = f.text_mut(field) {
                    s.pop();
                    return self.after_edit(field);
                }
                vec![]
            }
            Key::Char(c) => {
                if let Some(s) = f.text_mut(field) {
                    s.push(c);
                    return self.after_edit(field);
                }
                vec![]
            }
            _ => vec![],
        }
    }

    /// After the text of `field` changed: the name suggested again (until the user edits it).
    fn after_edit(&mut self, field: Field) -> Vec<Req> {
        let Mode::Form(f) = &mut self.mode else {
            return vec![];
        };
        f.error = None;
        match field {
            Field::Name => {
                f.name_edited = !f.name.is_empty();
                vec![]
            }
            Field::Target if !f.name_edited && f.editing.is_none() => {
                f.suggest_gen += 1;
                if f.target.trim().is_empty() {
                    f.name.clear();
                    f.suggest_error = None;
                    return vec![];
                }
                if f.suggesting {
                    return vec![];
                }
                f.suggest()
            }
            _ => vec![],
        }
    }

    fn save(&mut self) -> Vec<Req> {
        let names: Vec<String> = self.servers().into_iter().map(|(n, _)| n).collect();
        let Mode::Form(f) = &mut self.mode else {
            return vec![];
        };
        match f.patch() {
            Err(_) if f.suggesting && !f.name_edited => {
                f.save_pending = true;
                vec![]
            }
            Ok((name, body)) => {
                if f.editing.is_none() && names.contains(&name) {
                    f.error = Some(format!(
                        "a server named {name} exists: choose another name (enter on the list edits it)"
                    ));
                    return vec![];
                }
                f.saving = true;
                f.error = None;
                vec![Req::Patch {
                    what: PatchFor::Form(name),
                    body,
                }]
            }
            Err(e) => {
                f.error = Some(match &f.suggest_error {
                    Some(why) if f.name.trim().is_empty() => format!("no name: {why}"),
                    _ => e,
                });
                vec![]
            }
        }
    }

    fn login_key(&mut self, k: Key) -> Vec<Req> {
        let Mode::Login(l) = &mut self.mode else {
            return vec![];
        };
        match k {
            Key::Esc => {
                let name = l.name.clone();
                let done = l.done;
                let back = l.back_to_form.take();
                self.mode = match back {
                    Some(f) if done => Mode::Form(f),
                    _ => Mode::List,
                };
                if done {
                    self.refresh()
                } else {
                    self.flash(format!("sign-in to {name} cancelled"), false);
                    let mut r = vec![Req::LoginCancel(name)];
                    r.extend(self.refresh());
                    r
                }
            }
            Key::Enter if !l.done && !l.paste.trim().is_empty() => {
                let url = l.paste.trim().to_owned();
                l.message = Some("sending the callback URL...".into());
                vec![Req::LoginPaste(l.name.clone(), url, l.seq)]
            }
            Key::Backspace => {
                l.paste.pop();
                vec![]
            }
            Key::Char(c) if !l.done => {
                l.paste.push(c);
                vec![]
            }
            _ => vec![],
        }
    }

    /// An answer from the daemon.
    pub fn answer(&mut self, a: Answer, now: Instant) -> Vec<Req> {
        if let Err(f) = &a.result {
            if f.unreachable {
                self.unreachable = Some(f.text.clone());
            }
        } else {
            self.unreachable = None;
        }
        match a.req {
            Req::Refresh => {
                self.refreshing = false;
                let again = self.last_refresh.is_none() && self.settings.is_some();
                self.last_refresh = Some(now);
                match a.result {
                    Ok(v) => {
                        self.settings = Some(v);
                        let n = self.servers().len();
                        self.selected = self.selected.min(n.saturating_sub(1));
                    }
                    Err(f) if !f.unreachable => self.flash(f.text, true),
                    Err(_) => {}
                }
                if again {
                    return self.refresh();
                }
                vec![]
            }
            Req::Suggest { gen, .. } => {
                let Mode::Form(f) = &mut self.mode else {
                    return vec![];
                };
                f.suggesting = false;
                if f.suggest_gen != gen {
                    return f.suggest();
                }
                match (a.result, f.name_edited) {
                    (Ok(v), false) => {
                        f.suggest_error = None;
                        if let Some(n) = v["name"].as_str() {
                            f.name = n.to_owned();
                        }
                    }
                    (Err(e), false) if !e.unreachable => {
                        f.name.clear();
                        f.suggest_error = Some(e.text);
                    }
                    _ => {}
                }
                if std::mem::take(&mut f.save_pending) {
                    return self.save();
                }
                vec![]
            }
            Req::Patch { what, .. } => {
                self.busy = None;
                match what {
                    PatchFor::Form(name) => self.saved(name, a.result),
                    PatchFor::Action(done) => {
                        match a.result {
                            Ok(v) => {
                                self.settings = Some(strip_answer(v));
                                self.flash(done, false);
                            }
                            Err(f) => self.flash(f.text, true),
                        }
                        self.refresh()
                    }
                }
            }
            Req::LoginStart(_, seq) | Req::LoginPoll(_, seq) | Req::LoginPaste(_, _, seq) => {
                let pasted = matches!(a.req, Req::LoginPaste(..));
                // Only the open dialog's own answers: a poll of a sign-in that ended (it said
                // `signed_in` and the list came back) may answer after the next one opened.
                let Mode::Login(l) = &mut self.mode else {
                    return vec![];
                };
                if l.seq != seq {
                    return vec![];
                }
                match a.result {
                    Ok(v) => {
                        if let Some(u) = v["authorization_url"].as_str() {
                            l.url = Some(u.to_owned());
                        }
                        if let Some(u) = v["redirect_uri"].as_str() {
                            l.redirect_uri = Some(u.to_owned());
                        }
                        if pasted {
                            l.message = None;
                            l.paste.clear();
                        }
                        l.state = v["state"].as_str().unwrap_or("?").to_owned();
                        if let Some(e) = v["error"].as_str().or(v["reason"].as_str()) {
                            l.message = Some(e.to_owned());
                        }
                        if finished(&l.state) {
                            l.done = true;
                            l.next_poll = None;
                            if l.state == "signed_in" {
                                let name = l.name.clone();
                                self.mode = Mode::List;
                                self.flash(format!("signed in to {name}"), false);
                                return self.refresh();
                            }
                        } else {
                            l.next_poll = Some(now + LOGIN_POLL);
                        }
                    }
                    Err(f) => {
                        if pasted {
                            // The pasted URL was refused; the sign-in may still be open.
                            l.message = Some(f.text);
                            l.next_poll = Some(now + LOGIN_POLL);
                        } else {
                            l.message = Some(f.text);
                            l.done = true;
                            l.state = "failed".into();
                        }
                    }
                }
                vec![]
            }
            Req::LoginCancel(_) => vec![],
            Req::Extensions => {
                match a.result {
                    Ok(v) => self.extensions = Some(v),
                    Err(f) => self.flash(f.text, true),
                }
                vec![]
            }
            Req::Sessions => {
                let ids: Vec<String> = match a.result {
                    Ok(v) => v["sessions"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .filter_map(|s| s["id"].as_str().map(str::to_owned))
                        .collect(),
                    Err(f) => {
                        self.flash(f.text, true);
                        return vec![];
                    }
                };
                // The one after the current pick; after the last, every session again.
                let next = match (&self.session, self.picked) {
                    (Some(cur), true) => ids
                        .iter()
                        .position(|i| i == cur)
                        .and_then(|p| ids.get(p + 1)),
                    _ => ids.first(),
                }
                .cloned();
                match next {
                    Some(id) => {
                        self.flash(
                            format!("scope: session {id} alone (s: the next one)"),
                            false,
                        );
                        self.session = Some(id.clone());
                        self.picked = true;
                        self.session_view = None;
                        self.mode = Mode::Extensions {
                            session_scope: true,
                        };
                        vec![Req::SessionView(id)]
                    }
                    None => {
                        if ids.is_empty() {
                            self.flash("no live session to change alone", true);
                        } else {
                            self.flash("scope: every session", false);
                        }
                        self.session = None;
                        self.picked = false;
                        self.session_view = None;
                        self.mode = Mode::Extensions {
                            session_scope: false,
                        };
                        vec![]
                    }
                }
            }
            Req::SessionView(id) => {
                match a.result {
                    Ok(v) => self.session_view = Some(v),
                    Err(f) => {
                        self.session_view = None;
                        self.flash(format!("session {id}: {}", f.text), true);
                    }
                }
                vec![]
            }
            Req::SetExtension {
                extension,
                session,
                on,
            } => {
                self.busy = None;
                let state = if on { "on" } else { "off" };
                match (a.result, session) {
                    (Ok(_), Some(id)) => self.flash(
                        format!("{extension} switched {state} for session {id}"),
                        false,
                    ),
                    (Ok(_), None) => self.flash(
                        format!("{extension} switched {state} for every session"),
                        false,
                    ),
                    (Err(f), _) => self.flash(f.text, true),
                }
                self.extension_reqs()
            }
        }
    }

    fn saved(&mut self, name: String, result: Result<Value, Failure>) -> Vec<Req> {
        let Mode::Form(f) = &mut self.mode else {
            // The form was closed meanwhile: say how it went.
            match result {
                Ok(_) => self.flash(format!("saved {name}"), false),
                Err(e) => self.flash(format!("{name} not saved: {}", e.text), true),
            }
            return self.refresh();
        };
        f.saving = false;
        match result {
            Ok(mut v) => {
                v = strip_answer(v);
                let s = &v["servers"][&name];
                let needs = s["status"]["state"] == "needs_sign_in"
                    || s["auth"]["state"] == "needs_sign_in";
                let tools = s["status"]["tools"].as_u64();
                let pos = v["servers"]
                    .as_object()
                    .and_then(|m| m.keys().position(|n| *n == name));
                if let Some(i) = pos {
                    self.selected = i;
                }
                if needs {
                    f.editing = Some(name.clone());
                    f.needs_sign_in = true;
                    f.bearer.clear();
                    f.header_value.clear();
                    f.env.clear();
                    f.error = None;
                } else {
                    self.mode = Mode::List;
                    let t = tools
                        .map(|n| format!(": {n} tool{}", if n == 1 { "" } else { "s" }))
                        .unwrap_or_default();
                    self.flash(format!("saved {name}{t}"), false);
                }
                self.settings = Some(v);
            }
            Err(e) => f.error = Some(e.text),
        }
        self.refresh()
    }
}

/// A PATCH answer is the GET body plus `tested` and `sessions`.
fn strip_answer(mut v: Value) -> Value {
    if let Some(o) = v.as_object_mut() {
        o.remove("tested");
        o.remove("sessions");
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    fn typed(app: &mut App, s: &str) -> Vec<Req> {
        let mut r = vec![];
        for c in s.chars() {
            r.extend(app.key(Key::Char(c)));
        }
        r
    }

    #[test]
    fn form_builds_patches() {
        let mut app = App::new("x".into());
        app.settings = Some(json!({"servers": {}}));
        app.key(Key::Char('n'));
        let r = typed(&mut app, "https://a.example/mcp");
        assert!(matches!(r.last(), Some(Req::Suggest { key: "url", .. })));
        let suggest = |gen| Answer {
            req: Req::Suggest {
                gen,
                key: "url",
                value: String::new(),
            },
            result: Ok(json!({"name": "a"})),
        };
        // One suggestion at a time: the stale answer asks for the text as it is now.
        let again = app.answer(suggest(1), Instant::now());
        assert!(matches!(again[..], [Req::Suggest { gen: 21, .. }]));
        assert!(app.answer(suggest(21), Instant::now()).is_empty());
        app.key(Key::Tab);
        app.key(Key::Tab);
        typed(&mut app, "tok");
        let r = app.key(Key::Ctrl('s'));
        assert_eq!(
            r,
            vec![Req::Patch {
                what: PatchFor::Form("a".into()),
                body: json!({"servers": {"a": {"type": "http", "url": "https://a.example/mcp"}},
                             "secrets": {"a": {"bearer_token": "tok"}}})
            }]
        );
    }

    /// A poll of a sign-in that ended can answer after the next sign-in opened: it does not
    /// close the new dialog (it did once in CI: the list came back, `signed in to fm`, and
    /// the new sign-in's address never showed).
    #[test]
    fn a_stale_sign_in_answer_leaves_the_next_dialog_open() {
        let mut app = App::new("x".into());
        app.settings = Some(json!({"servers": {"fm": {"type": "http", "url": "http://h/mcp"}}}));
        let answer = |req: Req, v: Value| Answer { req, result: Ok(v) };
        let now = Instant::now();
        let first = app.key(Key::Ctrl('l'));
        assert_eq!(first, vec![Req::LoginStart("fm".into(), 1)]);
        app.answer(
            answer(
                Req::LoginStart("fm".into(), 1),
                json!({"state": "pending", "authorization_url": "https://as/1"}),
            ),
            now,
        );
        // The first sign-in ends by its pasted callback; a poll of it is still in flight.
        app.key(Key::Char('u'));
        let paste = app.key(Key::Enter);
        assert_eq!(paste, vec![Req::LoginPaste("fm".into(), "u".into(), 1)]);
        app.answer(answer(paste[0].clone(), json!({"state": "signed_in"})), now);
        assert!(matches!(app.mode, Mode::List));
        // The next sign-in opens; the first one's poll answers now.
        let second = app.key(Key::Ctrl('l'));
        assert_eq!(second, vec![Req::LoginStart("fm".into(), 2)]);
        let stale = app.answer(
            answer(
                Req::LoginPoll("fm".into(), 1),
                json!({"state": "signed_in"}),
            ),
            now,
        );
        assert!(stale.is_empty());
        let Mode::Login(l) = &app.mode else {
            panic!("the dialog closed: {:?}", app.mode);
        };
        assert_eq!((l.seq, l.state.as_str()), (2, "starting"));
        app.answer(
            answer(
                Req::LoginStart("fm".into(), 2),
                json!({"state": "pending", "authorization_url": "https://as/2"}),
            ),
            now,
        );
        let Mode::Login(l) = &app.mode else {
            panic!("the dialog closed: {:?}", app.mode);
        };
        assert_eq!(l.url.as_deref(), Some("https://as/2"));
    }

    #[test]
    fn stdio_env_and_masks() {
        let f = Form {
            http: false,
            name: "s".into(),
            target: "node 'a b.js'".into(),
            env: "A=1 B=-".into(),
            ..Form::default()
        };
        let (_, body) = f.patch().unwrap();
        assert_eq!(
            body,
            json!({"servers": {"s": {"type": "stdio", "command_line": "node 'a b.js'"}},
                   "secrets": {"s": {"env": {"A": "1", "B": "-"}}}})
        );
        assert_eq!(masked(Field::Env, "KEY=abc X=y"), "KEY=••• X=•");
        assert_eq!(masked(Field::Bearer, "abc"), "•••");
        assert_eq!(masked(Field::Target, "abc"), "abc");
    }
}
