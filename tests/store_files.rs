//! The files under `$ALBEDO_HOME`, through the real daemon: the modes it creates them with
//! (whatever the umask), the fingerprint key, a corrupt or locked catalogue database.

mod common;
use common::*;
use diesel::connection::SimpleConnection;
use diesel::Connection;
use serde_json::{json, Value};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn mode(p: &Path) -> u32 {
    std::fs::metadata(p)
        .unwrap_or_else(|e| panic!("{}: {e}", p.display()))
        .permissions()
        .mode()
        & 0o7777
}

fn env_server(extra: &[&str]) -> Value {
    fixture_server("store_env_dump.py", extra)
}

/// Starts the daemon with `ALBEDO_HOME=home` (which may not exist yet) under `umask`, its
/// log and ready file in `dir`. `Err(log)` when it exits instead of listening.
fn spawn(
    dir: tempfile::TempDir,
    home: &Path,
    umask: &str,
    env: &[(&str, &str)],
) -> Result<Daemon, String> {
    let ready = dir.path().join("ready");
    let _ = std::fs::remove_file(&ready);
    let log = dir.path().join("daemon.log");
    let mut cmd = Command::new("sh");
    cmd.arg("-c")
        .arg(format!("umask {umask} && exec \"$0\" \"$@\""))
        .arg(launcher())
        .args(["serve", "--listen", "127.0.0.1:0", "--ready-file"])
        .arg(&ready)
        .env("ALBEDO_HOME", home)
        .env("ALBEDO_LOG", "albedo_mcp=debug,info")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::from(std::fs::File::create(&log).unwrap()));
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().expect("start the daemon");
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Ok(s) = std::fs::read_to_string(&ready) {
            if let Some(addr) = s.lines().next().filter(|l| !l.is_empty()) {
                return Ok(Daemon {
                    base: format!("http://{addr}"),
                    child: Some(child),
                    home: dir,
                });
            }
        }
        if let Ok(Some(_)) = child.try_wait() {
            return Err(std::fs::read_to_string(&log).unwrap_or_default());
        }
        assert!(Instant::now() < deadline, "the daemon did not start");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_new_home_and_its_files_are_private_whatever_the_umask() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("nested/home");
    let d = spawn(tempfile::tempdir().unwrap(), &home, "000", &[]).unwrap();
    assert_eq!(mode(&home), 0o700, "$ALBEDO_HOME");
    assert_eq!(mode(&home.join("fingerprint.key")), 0o600);
    assert_eq!(mode(&home.join("albedo.db")), 0o600);
    // A session that saves a catalogue: SQLite's -wal and -shm files appear.
    std::fs::write(
        home.join("extensions.json"),
        json!({"enabled": {"mcp": true}, "mcp": {"servers": {"e": env_server(&[])}}}).to_string(),
    )
    .unwrap();
    let (id, view) = d.session(json!({}));
    assert_eq!(d.tool_names(&id).len(), 2, "{view}");
    for f in [
        "albedo.db",
        "albedo.db-wal",
        "albedo.db-shm",
        "fingerprint.key",
    ] {
        assert_eq!(mode(&home.join(f)), 0o600, "{f}");
    }
    // The API rewrites extensions.json atomically and keeps its mode.
    std::fs::set_permissions(
        home.join("extensions.json"),
        std::fs::Permissions::from_mode(0o640),
    )
    .unwrap();
    let (st, _) = d.put("/extensions/mcp", json!({"enabled": false}));
    assert_eq!(st, 200);
    assert_eq!(mode(&home.join("extensions.json")), 0o640);
    let leftovers: Vec<_> = std::fs::read_dir(&home)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains(".tmp"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}

#[test]
fn an_existing_loose_home_gets_a_warning_and_keeps_its_mode() {
    let home = tempfile::tempdir().unwrap();
    std::fs::set_permissions(home.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let d = Daemon::start_in(home, &[]);
    assert_eq!(mode(d.home.path()), 0o755, "not changed");
    let log = d.log();
    assert!(
        log.contains("WARN")
            && log.contains("0755")
            && log.contains(&d.home.path().display().to_string()),
        "{log}"
    );
}

#[test]
fn a_key_file_others_can_read_stops_the_daemon_with_the_fix() {
    let home = tempfile::tempdir().unwrap();
    let key = home.path().join("fingerprint.key");
    std::fs::write(&key, format!("{}\n", "ab".repeat(32))).unwrap();
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o644)).unwrap();
    let log = match spawn(tempfile::tempdir().unwrap(), home.path(), "022", &[]) {
        Err(log) => log,
        Ok(_) => panic!("the daemon started with a readable key file"),
    };
    assert!(
        log.contains(&key.display().to_string())
            && log.contains("0644")
            && log.contains(&format!("chmod 600 {}", key.display())),
        "{log}"
    );
    assert!(!log.contains(&"ab".repeat(32)), "{log}");
}

/// Daemons sharing one store recognise each other's saved catalogues only with the same key.
#[test]
fn daemons_sharing_a_store_need_the_same_key() {
    let shared = tempfile::tempdir().unwrap();
    let db = shared.path().join("shared.db");
    let db = db.to_str().unwrap();
    let server_log = shared.path().join("server.log");
    let ext = json!({"enabled": {"mcp": true}, "mcp": {"servers": {
        "e": env_server(&["--log", server_log.to_str().unwrap()])}}});
    let start = |home: tempfile::TempDir| {
        std::fs::write(home.path().join("extensions.json"), ext.to_string()).unwrap();
        Daemon::start_in(home, &[("ALBEDO_DATABASE_URL", db)])
    };
    let a = start(tempfile::tempdir().unwrap());
    a.session(json!({}));
    assert!(
        !logged(&server_log).is_empty(),
        "discovered by the first daemon"
    );
    // Another home, its own key: the saved catalogue is not recognised (and the row is
    // saved again under this daemon's fingerprint).
    std::fs::write(&server_log, "").unwrap();
    let b = start(tempfile::tempdir().unwrap());
    b.session(json!({}));
    assert!(
        logged(&server_log)
            .iter()
            .any(|m| m["method"] == "tools/list"),
        "a daemon with another key discovered the server again"
    );
    let key_b = std::fs::read(b.home.path().join("fingerprint.key")).unwrap();
    assert_ne!(
        key_b,
        std::fs::read(a.home.path().join("fingerprint.key")).unwrap()
    );
    drop(b);
    // The same key copied over: opened from the saved catalogue, the server not asked.
    std::fs::write(&server_log, "").unwrap();
    let home_c = tempfile::tempdir().unwrap();
    let key_c = home_c.path().join("fingerprint.key");
    std::fs::write(&key_c, &key_b).unwrap();
    std::fs::set_permissions(&key_c, std::fs::Permissions::from_mode(0o600)).unwrap();
    let c = start(home_c);
    let (id, _) = c.session(json!({}));
    assert!(c.tool_names(&id).contains(&"mcp__e__env".to_owned()));
    assert!(
        logged(&server_log).is_empty(),
        "the shared key recognised the saved catalogue"
    );
}

#[test]
fn a_corrupt_database_is_moved_aside_and_sessions_work() {
    let home = tempfile::tempdir().unwrap();
    std::fs::write(
        home.path().join("extensions.json"),
        json!({"enabled": {"mcp": true}, "mcp": {"servers": {"e": env_server(&[])}}}).to_string(),
    )
    .unwrap();
    std::fs::write(home.path().join("albedo.db"), vec![b'z'; 8192]).unwrap();
    let d = Daemon::start_in(home, &[]);
    let (id, view) = d.session(json!({}));
    let (st, r) = d.call(&id, "mcp__e__echo", json!({"message": "hi"}));
    assert_eq!(st, 200, "{r} {view}");
    let log = d.log();
    assert!(
        log.contains("WARN") && log.contains("corrupt") && log.contains("albedo.db.corrupt-"),
        "{log}"
    );
    let aside: Vec<_> = std::fs::read_dir(d.home.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("albedo.db.corrupt-"))
        .collect();
    assert_eq!(aside.len(), 1, "{aside:?}");
    assert_eq!(mode(&d.home.path().join("albedo.db")), 0o600);
}

/// Another process holds the database's write lock: the first session that has a catalogue
/// to save waits about a second, once; the next ones do not wait; one warning is logged.
#[test]
fn a_locked_database_costs_a_session_open_one_short_wait() {
    let home = tempfile::tempdir().unwrap();
    let ext = |name: &str| {
        json!({"enabled": {"mcp": true}, "mcp": {"servers": {
            "e": env_server(&["--name", name])}}})
        .to_string()
    };
    std::fs::write(home.path().join("extensions.json"), ext("a")).unwrap();
    let d = Daemon::start_in(home, &[]);
    let t = Instant::now();
    d.session(json!({}));
    let unlocked = t.elapsed();
    let db = d.home.path().join("albedo.db");
    let mut outside = diesel::SqliteConnection::establish(db.to_str().unwrap()).unwrap();
    outside.batch_execute("BEGIN EXCLUSIVE;").unwrap();
    // Each configuration is new: discovered, and its catalogue saved during preparation.
    let mut opens = Vec::new();
    for name in ["b", "c", "d"] {
        std::fs::write(d.home.path().join("extensions.json"), ext(name)).unwrap();
        let t = Instant::now();
        let (id, view) = d.session(json!({}));
        opens.push(t.elapsed());
        let (st, r) = d.call(&id, "mcp__e__echo", json!({"message": name}));
        assert_eq!(st, 200, "{r} {view}");
    }
    outside.batch_execute("COMMIT;").unwrap();
    // Before: every open waited the 10 s busy timeout.
    assert!(
        opens[0] < unlocked + Duration::from_secs(4),
        "{opens:?}, unlocked {unlocked:?}"
    );
    for later in &opens[1..] {
        assert!(
            *later < unlocked + Duration::from_secs(2),
            "{opens:?}, unlocked {unlocked:?}"
        );
    }
    let log = d.log();
    let warnings = log
        .lines()
        .filter(|l| l.contains("WARN") && l.contains("catalogue database is unavailable"))
        .count();
    assert_eq!(warnings, 1, "{log}");
}
