//! `albedo-mcp ui` (issue 17), the real binary in a real terminal: tmux runs it (its own
//! server socket per test, a 100×30 window), the test types with `send-keys` and reads the
//! screen with `capture-pane`, against a live daemon and real servers (server-everything
//! over stdio, FastMCP with its in-memory OAuth provider).
//!
//! What it checks: the list shows a configured server; a stdio server added by typing a quoted
//! command (and a secret env entry) is saved and listed with its tools; a mistyped command
//! keeps the form open with the daemon's error and both settings files unchanged byte for
//! byte (and so does an unbalanced quote); editing with a blank secret keeps it and with `-`
//! removes it; `e` re-enables a server switched off; delete after a confirmation; a masked field never shows its secret in any capture;
//! no daemon (at start, or one that stops meanwhile) is said on screen; SIGTERM gives the
//! terminal back; a sign-in with ALBEDO_NO_BROWSER and a pasted callback URL, and esc
//! cancelling one; the extensions view switching `mcp` and `editor-mcp` for every session and for
//! one.

mod common;
use common::*;
use serde_json::{json, Value};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

const SECRET: &str = "tui-env-7f3a19-never-on-screen";

static N: AtomicUsize = AtomicUsize::new(0);

/// `albedo-mcp ui` in a tmux window of its own server; killed when dropped.
struct Tui {
    socket: String,
    pidfile: tempfile::NamedTempFile,
    /// Every screen captured, to look for secrets in.
    seen: std::cell::RefCell<String>,
}

impl Tui {
    /// Run `albedo-mcp ui` with `ALBEDO_HOME=home` (and `env`; `--daemon` at `daemon`'s
    /// address) in a 100×30 window.
    fn start(home: &Path, daemon: Option<&Daemon>, env: &[(&str, &str)]) -> Tui {
        Self::start_with(home, daemon, "", env)
    }

    /// The same with more arguments after `ui`.
    fn start_with(home: &Path, daemon: Option<&Daemon>, more: &str, env: &[(&str, &str)]) -> Tui {
        let socket = format!(
            "albedo-tui-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::SeqCst)
        );
        let pidfile = tempfile::NamedTempFile::new().unwrap();
        let mut vars = format!(
            "ALBEDO_HOME='{}' ALBEDO_NO_BROWSER=1 TERM=xterm-256color",
            home.display()
        );
        for (k, v) in env {
            vars.push_str(&format!(" {k}='{v}'"));
        }
        // The inner shell writes its pid and becomes the ui, so the test can signal it; the
        // outer one says how it ended and keeps the window open.
        let at = daemon
            .map(|d| format!(" --daemon {}", d.base))
            .unwrap_or_default();
        let cmd = format!(
            "env -u ALBEDO_DAEMON -u ALBEDO_TOKEN -u ALBEDO_LISTEN {vars} sh -c 'echo $$ > {}; exec {} ui{at}{more}'; echo EXITED $?; sleep 600",
            pidfile.path().display(),
            env!("CARGO_BIN_EXE_albedo-mcp"),
        );
        let st = Command::new("tmux")
            .args([
                "-L",
                &socket,
                "-f",
                "/dev/null",
                "new-session",
                "-d",
                "-x",
                "100",
                "-y",
                "30",
            ])
            .arg(cmd)
            .status()
            .expect("tmux");
        assert!(st.success(), "tmux new-session failed");
        Tui {
            socket,
            pidfile,
            seen: Default::default(),
        }
    }

    fn tmux(&self, args: &[&str]) -> String {
        let out = Command::new("tmux")
            .args(["-L", &self.socket])
            .args(args)
            .output()
            .expect("tmux");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    fn screen(&self) -> String {
        let s = self.tmux(&["capture-pane", "-p"]);
        self.seen.borrow_mut().push_str(&s);
        s
    }

    /// Type text as it is (every character a key).
    fn text(&self, s: &str) {
        self.tmux(&["send-keys", "-l", s]);
    }

    /// Keys by tmux's names (`Enter`, `Tab`, `Right`, `C-s`, `Escape`).
    fn keys(&self, keys: &[&str]) {
        let mut a = vec!["send-keys"];
        a.extend(keys);
        self.tmux(&a);
        std::thread::sleep(Duration::from_millis(150));
    }

    /// The screen once `pred` holds of it (else the test fails, showing the last one).
    fn wait(&self, what: &str, limit: Duration, pred: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + limit;
        loop {
            let s = self.screen();
            if pred(&s) {
                return s;
            }
            assert!(
                Instant::now() < deadline,
                "waited for {what}; the screen:\n{s}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn wait_for(&self, text: &str) -> String {
        self.wait(text, Duration::from_secs(40), |s| s.contains(text))
    }

    fn pid(&self) -> i32 {
        read_pid(self.pidfile.path()).expect("the ui's pid")
    }
}

impl Drop for Tui {
    fn drop(&mut self) {
        self.tmux(&["kill-server"]);
    }
}

fn everything_stdio() -> Value {
    json!({"type": "stdio", "command": "node", "args": [everything_js(), "stdio"]})
}

fn files(d: &Daemon) -> (Vec<u8>, Vec<u8>) {
    let h = d.albedo_home();
    (
        std::fs::read(h.join("extensions.json")).unwrap_or_default(),
        std::fs::read(h.join("creds.json")).unwrap_or_default(),
    )
}

/// Whether tmux is here to run the screen in. Without it the tests say so and pass, unless
/// it is required (CI, or `ALBEDO_TEST_REQUIRE_TMUX=1`; `tests/run-all.sh` lists them as
/// SKIPPED).
fn have_tmux() -> bool {
    let here = Command::new("tmux")
        .arg("-V")
        .output()
        .is_ok_and(|o| o.status.success());
    if !here {
        assert!(
            !(std::env::var("CI").as_deref() == Ok("true") || required("TMUX")),
            "tmux is required here (apt-get install -y tmux)"
        );
        eprintln!("SKIPPED: tmux is not installed");
    }
    here
}

#[test]
fn lists_adds_with_a_quoted_command_refuses_a_mistyped_one_edits_reenables_and_deletes() {
    if !have_tmux() {
        return;
    }
    let mut d = Daemon::start(json!({"mcp": {"servers": {"everything": everything_stdio()}}}));
    let ui = Tui::start(&d.albedo_home(), Some(&d), &[]);
    let s = ui.wait_for("everything");
    assert!(s.contains("NAME") && s.contains("stdio"), "{s}");
    assert!(s.contains("n new"), "no footer of keys: {s}");

    // A stdio server typed as a shell would take it, with a quoted argument and a secret env
    // entry; the name is suggested, then edited.
    ui.keys(&["n"]);
    ui.wait_for("new server");
    ui.keys(&["Right"]);
    ui.wait_for("[stdio]");
    ui.text(&format!("node \"{}\" stdio", everything_js()));
    ui.wait("a suggested name", Duration::from_secs(20), |s| {
        s.contains("(suggested)")
    });
    ui.keys(&["Tab"]);
    // The suggestion is replaced by a name of the test's own.
    ui.keys(&["-N", "40", "BSpace"]);
    ui.text("evr2");
    ui.keys(&["Tab"]);
    ui.text(&format!("EVR_SECRET={SECRET}"));
    let s = ui.wait_for("EVR_SECRET=••");
    assert!(!s.contains(SECRET), "{s}");
    ui.keys(&["Enter"]);
    let s = ui.wait_for("saved evr2");
    assert!(
        s.lines().any(|l| l.contains("evr2") && l.contains("stdio")),
        "{s}"
    );
    let v = d.get("/settings/mcp").1;
    let tools = v["servers"]["evr2"]["status"]["tools"]
        .as_u64()
        .unwrap_or(0);
    assert!(tools > 0, "{v}");
    assert!(s.contains(&format!("saved evr2: {tools} tools")), "{s}");
    assert_eq!(v["servers"]["evr2"]["args"][0], everything_js(), "{v}");
    assert_eq!(
        v["servers"]["evr2"]["secrets"]["env"],
        json!(["EVR_SECRET"]),
        "{v}"
    );
    let creds = std::fs::read_to_string(d.albedo_home().join("creds.json")).unwrap();
    assert!(creds.contains(SECRET), "the secret was not sent");
    let ext = std::fs::read_to_string(d.albedo_home().join("extensions.json")).unwrap();
    assert!(!ext.contains(SECRET), "{ext}");

    // A mistyped command: the daemon refuses, the form stays open with its error, and
    // nothing is written.
    let before = files(&d);
    ui.keys(&["n", "Right"]);
    ui.wait_for("[stdio]");
    ui.text("nodee-no-such-command-4711 --version");
    ui.wait("a suggested name", Duration::from_secs(20), |s| {
        s.contains("(suggested)")
    });
    ui.keys(&["C-s"]);
    let s = ui.wait_for("error:");
    assert!(s.contains("new server"), "the form closed: {s}");
    assert!(s.contains("409") || s.contains("server_failed"), "{s}");
    assert_eq!(
        files(&d),
        before,
        "a refused server changed the settings files"
    );
    // An unbalanced quote: a 400 naming where.
    ui.keys(&["-N", "60", "BSpace"]);
    ui.text("node \"unbalanced");
    ui.keys(&["C-s"]);
    let s = ui.wait("the quote's error", Duration::from_secs(20), |s| {
        s.contains("error:") && s.contains("quote")
    });
    assert!(s.contains("new server"), "{s}");
    assert_eq!(files(&d), before);
    ui.keys(&["Escape"]);
    ui.wait("the list again", Duration::from_secs(10), |s| {
        !s.contains("new server")
    });

    // Edit evr2 (selected since it was saved): a blank secret keeps the stored one, `-`
    // removes it; the command line shown is the one stored, and saved again as it is.
    ui.keys(&["Enter"]);
    let s = ui.wait_for("edit evr2");
    assert!(s.contains("blank keeps"), "{s}");
    ui.keys(&["C-s"]);
    ui.wait_for("saved evr2");
    let v = d.get("/settings/mcp").1;
    assert_eq!(
        v["servers"]["evr2"]["secrets"]["env"],
        json!(["EVR_SECRET"]),
        "{v}"
    );
    assert_eq!(v["servers"]["evr2"]["args"][0], everything_js(), "{v}");
    ui.keys(&["Enter"]);
    ui.wait_for("edit evr2");
    ui.keys(&["Tab", "Tab"]);
    ui.text("EVR_SECRET=-");
    ui.keys(&["Enter"]);
    ui.wait_for("saved evr2");
    let v = d.get("/settings/mcp").1;
    assert_eq!(v["servers"]["evr2"]["secrets"]["env"], json!([]), "{v}");
    let creds = std::fs::read_to_string(d.albedo_home().join("creds.json")).unwrap();
    assert!(!creds.contains(SECRET), "the removed secret stayed");

    // Switched off elsewhere, re-enabled with e.
    let r = d
        .request("PATCH", "/settings/mcp")
        .send_json(json!({"servers": {"evr2": {"enabled": false}}}));
    assert!(r.is_ok(), "{r:?}");
    ui.wait_for("switched off");
    ui.keys(&["e"]);
    ui.wait_for("enabled evr2");
    let v = d.get("/settings/mcp").1;
    assert_ne!(v["servers"]["evr2"]["enabled"], false, "{v}");

    // Delete evr2 after a confirmation; n keeps it.
    ui.keys(&["d"]);
    let s = ui.wait_for("(y/n)");
    assert!(s.contains("Delete evr2"), "{s}");
    ui.keys(&["n"]);
    ui.wait_for("nothing deleted");
    assert!(d.get("/settings/mcp").1["servers"]["evr2"].is_object());
    ui.keys(&["d"]);
    ui.wait_for("(y/n)");
    ui.keys(&["y"]);
    ui.wait_for("deleted evr2");
    let v = d.get("/settings/mcp").1;
    assert!(v["servers"]["evr2"].is_null(), "{v}");

    // The daemon stops meanwhile: said on screen, no crash.
    d.stop(15);
    let s = ui.wait_for("no daemon answers");
    assert!(!s.contains("EXITED"), "{s}");

    assert!(
        !ui.seen.borrow().contains(SECRET),
        "a capture showed the secret"
    );
}

#[test]
fn no_daemon_is_said_then_one_started_is_found_and_q_quits_with_the_terminal_given_back() {
    if !have_tmux() {
        return;
    }
    let home = tempfile::tempdir().unwrap();
    std::fs::set_permissions(home.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
    let port = free_port().to_string();
    let listen = format!("127.0.0.1:{port}");
    let ui = Tui::start(home.path(), None, &[("ALBEDO_LISTEN", &listen)]);
    let s = ui.wait_for("No daemon answers");
    assert!(s.contains("albedo-mcp serve"), "{s}");
    // A daemon started meanwhile in that home is found on its socket.
    std::fs::write(
        home.path().join("extensions.json"),
        json!({"mcp": {"servers": {"everything": everything_stdio()}}}).to_string(),
    )
    .unwrap();
    let _d = Daemon::start_in(home, &[]);
    let s = ui.wait_for("everything");
    assert!(s.contains("daemon unix:"), "{s}");
    ui.keys(&["q"]);
    let s = ui.wait_for("EXITED 0");
    assert!(!s.contains("NAME"), "the screen was not given back: {s}");
}

#[test]
fn sigterm_gives_the_terminal_back() {
    if !have_tmux() {
        return;
    }
    // A private home (0700), so the daemon opens its socket there.
    let home = tempfile::tempdir().unwrap();
    std::fs::set_permissions(home.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
    std::fs::write(
        home.path().join("extensions.json"),
        json!({"mcp": {"servers": {"everything": everything_stdio()}}}).to_string(),
    )
    .unwrap();
    let d = Daemon::start_in(home, &[]);
    // No --daemon: found on the socket in its home.
    let ui = Tui::start(&d.albedo_home(), None, &[]);
    let s = ui.wait_for("everything");
    assert!(s.contains("daemon unix:"), "{s}");
    ui.keys(&["n"]);
    ui.text("typed");
    ui.wait_for("new server");
    unsafe { libc_kill(ui.pid(), 15) };
    let s = ui.wait_for("EXITED 143");
    assert!(!s.contains("new server"), "{s}");
    // tmux says the alternate screen is off.
    let mode = ui.tmux(&["display-message", "-p", "#{alternate_on}"]);
    assert_eq!(mode.trim(), "0", "still on the alternate screen");
}

#[test]
fn the_extensions_view_switches_mcp_for_every_session_and_for_one() {
    if !have_tmux() {
        return;
    }
    let d = Daemon::start(json!({"enabled": {"mcp": true},
                                 "mcp": {"servers": {"everything": everything_stdio()}}}));
    let (id, view) = d.session(json!({}));
    assert_eq!(view["enabled"], true, "{view}");
    let ui = Tui::start_with(&d.albedo_home(), Some(&d), &format!(" --session {id}"), &[]);
    ui.wait_for("everything");
    ui.keys(&["x"]);
    let s = ui.wait_for("every session: on");
    assert!(s.contains(&format!("session {id}: on")), "{s}");
    assert!(s.contains("editor-mcp"), "{s}");
    // The default for every session.
    ui.keys(&["Enter"]);
    ui.wait_for("mcp switched off for every session");
    assert_eq!(d.get("/extensions").1["mcp"]["enabled"], false);
    ui.keys(&["Enter"]);
    ui.wait_for("mcp switched on for every session");
    assert_eq!(d.get("/extensions").1["mcp"]["enabled"], true);
    // s: this session only.
    ui.keys(&["s"]);
    ui.wait_for(&format!("session {id} only"));
    ui.keys(&["Enter"]);
    let s = ui.wait_for(&format!("mcp switched off for session {id}"));
    assert!(s.contains("every session: on"), "{s}");
    assert_eq!(d.get(&format!("/sessions/{id}")).1["enabled"], false);
    assert_eq!(d.get("/extensions").1["mcp"]["enabled"], true);
    // ↓ editor-mcp: for this session, then (s) for every session.
    ui.keys(&["Down", "Enter"]);
    ui.wait_for(&format!("editor-mcp switched off for session {id}"));
    assert_eq!(
        d.get(&format!("/sessions/{id}")).1["editor_mcp"]["enabled"],
        false
    );
    assert_eq!(d.get("/extensions").1["editor-mcp"]["enabled"], true);
    ui.keys(&["s"]);
    ui.wait_for("the default for every session (s: this session only)");
    ui.keys(&["Enter"]);
    ui.wait_for("editor-mcp switched off for every session");
    assert_eq!(d.get("/extensions").1["editor-mcp"]["enabled"], false);
    let ext = std::fs::read_to_string(d.albedo_home().join("extensions.json")).unwrap();
    assert!(ext.contains("\"editor-mcp\": false"), "{ext}");
    ui.keys(&["Escape"]);
    ui.wait("the list again", Duration::from_secs(10), |s| {
        s.contains("n new") && !s.contains("every session:")
    });
}

#[test]
fn the_extensions_view_picks_a_live_session_without_session_given() {
    if !have_tmux() {
        return;
    }
    // Its tools all deferred behind mcp__search: the selected server says how many.
    let mut everything = everything_stdio();
    everything["deferTools"] = json!("always");
    let d = Daemon::start(json!({"enabled": {"mcp": true},
                                 "mcp": {"servers": {"everything": everything}}}));
    let (id, _) = d.session(json!({}));
    let ui = Tui::start(&d.albedo_home(), Some(&d), &[]);
    ui.wait_for("everything");
    ui.wait_for("13 deferred behind mcp__search");
    ui.keys(&["x"]);
    ui.wait_for("s: pick a live session");
    // s picks the one live session; enter changes it alone.
    ui.keys(&["s"]);
    ui.wait_for(&format!("session {id} only"));
    ui.keys(&["Enter"]);
    ui.wait_for(&format!("mcp switched off for session {id}"));
    assert_eq!(d.get(&format!("/sessions/{id}")).1["enabled"], false);
    assert_eq!(d.get("/extensions").1["mcp"]["enabled"], true);
    // s again: past the last one, every session.
    ui.keys(&["s"]);
    ui.wait_for("scope: every session");
}

extern "C" {
    #[link_name = "kill"]
    fn libc_kill(pid: i32, sig: i32) -> i32;
}

/// Follow a sign-in's authorization URL like a browser up to the redirect to the redirect
/// URI; that address, not requested.
fn authorize(signin: &Value) -> String {
    let agent = ureq::AgentBuilder::new()
        .redirects(0)
        .timeout(Duration::from_secs(30))
        .build();
    let redirect = signin["redirect_uri"].as_str().unwrap();
    let mut url = signin["authorization_url"].as_str().unwrap().to_owned();
    for _ in 0..5 {
        let r = agent.get(&url).call().expect("the authorization server");
        assert!((300..400).contains(&r.status()), "{url}: {}", r.status());
        let loc = r.header("location").expect("a Location").to_owned();
        let next = url::Url::parse(&url)
            .unwrap()
            .join(&loc)
            .unwrap()
            .to_string();
        if next.starts_with(redirect) {
            return next;
        }
        url = next;
    }
    panic!("no redirect to {redirect}")
}

#[test]
fn signs_in_to_fastmcp_with_a_pasted_callback_and_esc_cancels_one() {
    if !have_tmux() {
        return;
    }
    let peer = fastmcp_oauth(&[]);
    let d = Daemon::start(json!({"enabled": {"mcp": true}}));
    let ui = Tui::start(&d.albedo_home(), Some(&d), &[]);
    ui.wait_for("No servers configured");
    // Added from the form: it answers 401, is saved, and the form offers the sign-in.
    ui.keys(&["n"]);
    ui.text(&peer.url);
    ui.wait("a suggested name", Duration::from_secs(20), |s| {
        s.contains("(suggested)")
    });
    ui.keys(&["Tab"]);
    ui.keys(&["-N", "40", "BSpace"]);
    ui.text("fm");
    ui.keys(&["C-s"]);
    ui.wait_for("ctrl+l signs in");
    ui.keys(&["C-l"]);
    let s = ui.wait_for("Open this address");
    assert!(s.contains("no browser opened"), "{s}");
    let login = d.get("/auth/logins/mcp:fm").1;
    assert_eq!(login["state"], "pending", "{login}");
    let auth = login["authorization_url"].as_str().unwrap();
    assert!(s.contains(&auth[..30]), "the URL is not shown: {s}");
    let callback = authorize(&login);
    ui.text(&callback);
    ui.keys(&["Enter"]);
    let s = ui.wait_for("signed in to fm");
    let s = if s
        .lines()
        .any(|l| l.contains("fm") && l.contains("signed in"))
    {
        s
    } else {
        ui.wait("the list's sign-in", Duration::from_secs(20), |s| {
            s.lines()
                .any(|l| l.contains("fm ") && l.contains("signed in"))
        })
    };
    assert!(
        !s.contains(&param(&callback, "code")),
        "the code shows after"
    );
    assert_eq!(
        d.get("/settings/mcp").1["servers"]["fm"]["auth"]["state"],
        "signed_in"
    );

    // Another sign-in, cancelled with esc: the daemon's sign-in is cancelled.
    ui.keys(&["C-l"]);
    ui.wait_for("Open this address");
    ui.keys(&["Escape"]);
    ui.wait_for("cancelled");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let st = d.get("/auth/logins/mcp:fm").1["state"].clone();
        if st == "cancelled" {
            break;
        }
        assert!(Instant::now() < deadline, "still {st}");
        std::thread::sleep(Duration::from_millis(100));
    }

    // Sign out with ctrl+u.
    ui.keys(&["C-u"]);
    ui.wait_for("signed out of fm");
    let auth = d.get("/settings/mcp").1["servers"]["fm"]["auth"].clone();
    assert_ne!(auth["state"], "signed_in", "{auth}");
}

fn param(url: &str, key: &str) -> String {
    url::Url::parse(url)
        .unwrap()
        .query_pairs()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v.into_owned())
        .unwrap_or_default()
}

#[test]
fn a_change_made_elsewhere_shows_at_once_from_the_daemons_events() {
    if !have_tmux() {
        return;
    }
    let d = Daemon::start(json!({"mcp": {"servers": {"everything": everything_stdio()}}}));
    let ui = Tui::start(&d.albedo_home(), Some(&d), &[]);
    ui.wait_for("everything");
    // Just after a refresh, so the next poll is 10 s away: the event brings it sooner.
    std::thread::sleep(Duration::from_millis(500));
    let r = d
        .request("PATCH", "/settings/mcp")
        .send_json(json!({"servers": {"elsewhere": {"command": "/bin/true", "enabled": false}}}));
    assert!(r.is_ok(), "{r:?}");
    ui.wait("the server added elsewhere", Duration::from_secs(5), |s| {
        s.contains("elsewhere")
    });
}
