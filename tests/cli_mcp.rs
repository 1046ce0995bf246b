//! The `albedo-mcp mcp` command line, run as the built binary: with no daemon every
//! subcommand exits 2 and says how to start one; against a real daemon (real peers:
//! server-everything over stdio and streamable HTTP) it lists, shows, adds, edits, enables,
//! disables, tests, removes, lists tools and calls them, `--json` output parses, a server
//! that cannot start is refused with the daemon's message (exit 1), and no secret given on
//! the command line (or on its standard input) appears in any output or in extensions.json.

mod common;
use common::*;
use serde_json::{json, Value};
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::process::{Command, Stdio};

const BEARER: &str = "cli-bearer-5e1f0a-never-print-me";
const HEADER: &str = "cli-header-9b2d77-never-print-me";
const ENV: &str = "cli-env-41c3aa-never-print-me";
const ENV2: &str = "cli-env2-0d9e13-never-print-me";

/// What one run of the command line did.
#[derive(Debug)]
struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

impl Run {
    fn json(&self) -> Value {
        serde_json::from_str(&self.stdout)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.stdout))
    }
}

/// Run `albedo-mcp ARGS` with `ALBEDO_HOME=home` (and nothing else of the test's own
/// environment that names a daemon), `stdin` on its standard input.
fn cli_in(home: &std::path::Path, env: &[(&str, &str)], args: &[&str], stdin: &str) -> Run {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_albedo-mcp"));
    cmd.args(args)
        .env("ALBEDO_HOME", home)
        .env_remove("ALBEDO_DAEMON")
        .env_remove("ALBEDO_TOKEN")
        .env_remove("ALBEDO_LISTEN")
        .env("ALBEDO_NO_BROWSER", "1")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().expect("run albedo-mcp");
    if let Some(mut i) = child.stdin.take() {
        let _ = i.write_all(stdin.as_bytes());
    }
    let out = child.wait_with_output().expect("wait for albedo-mcp");
    Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// Every subcommand that talks to the daemon (import is `cli::import`'s).
fn every_subcommand() -> Vec<Vec<&'static str>> {
    vec![
        vec!["mcp", "list"],
        vec!["mcp", "show", "x"],
        vec!["mcp", "add", "x", "--url", "http://127.0.0.1:9/mcp"],
        vec!["mcp", "add", "x", "--", "node", "server.js"],
        vec!["mcp", "edit", "x", "--disabled"],
        vec!["mcp", "remove", "x"],
        vec!["mcp", "enable", "x"],
        vec!["mcp", "disable", "x"],
        vec!["mcp", "tools"],
        vec!["mcp", "tools", "x"],
        vec!["mcp", "call", "x/echo", "{}"],
        vec!["mcp", "test", "x"],
        vec!["mcp", "reload"],
        vec!["mcp", "login", "x"],
        vec!["mcp", "logout", "x"],
        vec!["status"],
        vec!["tools"],
        vec!["web"],
        vec!["token", "--rotate", "--daemon", "/nonexistent/albedo.sock"],
    ]
}

#[test]
fn with_no_daemon_every_subcommand_exits_2_and_says_how_to_start_one() {
    let home = tempfile::tempdir().unwrap();
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    for args in every_subcommand() {
        // Found through ALBEDO_LISTEN (no config.toml, no socket).
        let r = cli_in(home.path(), &[("ALBEDO_LISTEN", &listen)], &args, "");
        if args[0] == "token" {
            // No daemon: the token is rotated in the file instead (exit 0).
            assert_eq!(r.code, 0, "{args:?}: {r:?}");
            continue;
        }
        assert_eq!(r.code, 2, "{args:?}: {r:?}");
        assert!(
            r.stderr.contains("start it with: albedo-mcp serve"),
            "{args:?}: {r:?}"
        );
        assert!(r.stderr.contains(&listen), "{args:?}: {r:?}");
    }
    // --daemon in every accepted form, and a socket that is not there.
    let sock = home.path().join("nothing.sock");
    for daemon in [
        listen.clone(),
        format!("http://{listen}"),
        format!("http://{listen}/"),
        port.to_string(),
        sock.display().to_string(),
        format!("unix:{}", sock.display()),
    ] {
        let r = cli_in(home.path(), &[], &["mcp", "list", "--daemon", &daemon], "");
        assert_eq!(r.code, 2, "{daemon}: {r:?}");
        assert!(r.stderr.contains("start it with"), "{daemon}: {r:?}");
        assert!(!r.stderr.contains("http://http"), "{daemon}: {r:?}");
        // --json: the error as JSON on standard output too.
        let r = cli_in(
            home.path(),
            &[("ALBEDO_DAEMON", &daemon)],
            &["mcp", "show", "x", "--json"],
            "",
        );
        assert_eq!(r.code, 2, "{daemon}: {r:?}");
        assert_eq!(r.json()["error"]["code"], "unreachable", "{r:?}");
    }
    // A bad address is refused (exit 1), as are bad arguments, before any daemon is asked.
    for args in [
        vec!["mcp", "list", "--daemon", "ftp://127.0.0.1:1"],
        vec!["mcp", "add", "x"],
        vec!["mcp", "call", "x/y", "not json"],
        vec!["mcp", "edit", "x"],
    ] {
        let r = cli_in(home.path(), &[("ALBEDO_LISTEN", &listen)], &args, "");
        assert_eq!(r.code, 1, "{args:?}: {r:?}");
        assert!(!r.stderr.contains("start it with"), "{args:?}: {r:?}");
    }
}

/// The value of `key` in `show`'s or `test`'s two columns.
fn field<'a>(text: &'a str, key: &str) -> &'a str {
    text.lines()
        .find_map(|l| {
            l.strip_prefix(key)
                .filter(|rest| rest.starts_with("  "))
                .map(str::trim)
        })
        .unwrap_or("")
}

/// A daemon on a private home (0700, so it also listens on the socket), MCP on by default.
fn daemon() -> Daemon {
    let home = tempfile::tempdir().unwrap();
    std::fs::set_permissions(home.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
    std::fs::write(
        home.path().join("extensions.json"),
        json!({"enabled": {"mcp": true}, "mcp": {"servers": {}}}).to_string(),
    )
    .unwrap();
    Daemon::start_in(home, &[])
}

/// Runs against one daemon, keeping every output to look for secrets in.
struct Cli<'a> {
    d: &'a Daemon,
    seen: Vec<String>,
}

impl Cli<'_> {
    fn run_with(&mut self, args: &[&str], stdin: &str) -> Run {
        let r = cli_in(&self.d.albedo_home(), &[], args, stdin);
        // What it printed (its arguments, which hold secrets here, are not output).
        self.seen.push(format!("{}\n{}", r.stdout, r.stderr));
        r
    }

    fn run(&mut self, args: &[&str]) -> Run {
        self.run_with(args, "")
    }

    fn ok(&mut self, args: &[&str]) -> Run {
        let r = self.run(args);
        assert_eq!(r.code, 0, "{args:?}: {r:?}");
        r
    }

    fn servers(&mut self) -> Value {
        self.ok(&["mcp", "list", "--json"]).json()["servers"].clone()
    }

    fn no_secret_anywhere(&self) {
        let ext = std::fs::read_to_string(self.d.albedo_home().join("extensions.json")).unwrap();
        for s in [BEARER, HEADER, ENV, ENV2] {
            assert!(!ext.contains(s), "{s} in extensions.json: {ext}");
            for out in &self.seen {
                assert!(!out.contains(s), "{s} printed: {out}");
            }
        }
    }
}

#[test]
fn against_a_real_daemon_the_commands_manage_servers_and_call_tools() {
    let d = daemon();
    let mut c = Cli {
        d: &d,
        seen: vec![],
    };
    let ev = everything_js();

    let r = c.ok(&["mcp", "list"]);
    assert!(r.stdout.contains("no MCP servers"), "{r:?}");
    assert_eq!(c.servers(), json!({}));

    // Add a stdio server (the daemon starts it before saving), a secret env var with it.
    let env_arg = format!("API_KEY={ENV}");
    let r = c.ok(&[
        "mcp", "add", "ev", "--env", &env_arg, "--", "node", &ev, "stdio",
    ]);
    assert!(r.stdout.contains("added ev: connected"), "{r:?}");
    let r = c.run(&["mcp", "add", "ev", "--", "node", &ev, "stdio"]);
    assert_eq!(r.code, 1, "{r:?}");
    assert!(r.stderr.contains("already a server named \"ev\""), "{r:?}");

    let r = c.ok(&["mcp", "list"]);
    let line = r
        .stdout
        .lines()
        .find(|l| l.starts_with("ev "))
        .unwrap_or_else(|| panic!("{r:?}"));
    assert!(
        line.contains("stdio") && line.contains("yes") && line.contains("node"),
        "{line}"
    );
    let s = c.servers();
    assert_eq!(s["ev"]["type"], "stdio", "{s}");
    assert_eq!(s["ev"]["command"], "node", "{s}");
    assert_eq!(s["ev"]["secrets"]["env"], json!(["API_KEY"]), "{s}");

    let r = c.ok(&["mcp", "show", "ev"]);
    assert!(r.stdout.contains("API_KEY (secret)"), "{r:?}");
    assert_eq!(field(&r.stdout, "secrets set"), "env API_KEY", "{r:?}");
    let v = c.ok(&["mcp", "show", "ev", "--json"]).json();
    assert_eq!(v["type"], "stdio", "{v}");
    let r = c.run(&["mcp", "show", "nope"]);
    assert_eq!(r.code, 1, "{r:?}");
    assert!(r.stderr.contains("no server named \"nope\""), "{r:?}");

    // Its tools, through a session.
    let r = c.ok(&["mcp", "tools", "ev"]);
    assert!(r.stdout.contains("mcp__ev__echo"), "{r:?}");
    let v = c.ok(&["mcp", "tools", "--json"]).json();
    let tools = v["tools"].as_array().unwrap();
    assert!(!tools.is_empty(), "{v}");
    assert!(tools.iter().all(|t| t["server"] == "ev"), "{v}");
    assert_eq!(c.run(&["mcp", "tools", "nope"]).code, 1);

    // Calls, by advertised name and by server/tool.
    let r = c.ok(&[
        "mcp",
        "call",
        "mcp__ev__echo",
        r#"{"message": "hello cli"}"#,
    ]);
    assert!(r.stdout.contains("hello cli"), "{r:?}");
    let v = c
        .ok(&["mcp", "call", "ev/echo", r#"{"message": "hi"}"#, "--json"])
        .json();
    assert_eq!(v["outcome"], "ok", "{v}");
    assert_ne!(v["isError"], true, "{v}");
    assert_eq!(v["content"][0]["text"], "Echo: hi", "{v}");
    let r = c.run(&["mcp", "call", "ev/no_such_tool"]);
    assert_eq!(r.code, 1, "{r:?}");
    assert!(r.stderr.contains("no_such_tool"), "{r:?}");
    let r = c.run(&["mcp", "call", "ev/no_such_tool", "--json"]);
    assert_eq!(r.code, 1, "{r:?}");
    assert!(r.json()["error"]["code"].is_string(), "{r:?}");

    // A test run.
    let r = c.ok(&["mcp", "test", "ev"]);
    assert_eq!(field(&r.stdout, "discovered"), "✓", "{r:?}");
    assert!(r.stdout.contains("the server works"), "{r:?}");
    let v = c.ok(&["mcp", "test", "ev", "--json"]).json();
    assert_eq!(v["discovered"], true, "{v}");
    assert_eq!(c.run(&["mcp", "test", "nope"]).code, 1);

    // Off and on again.
    let r = c.ok(&["mcp", "disable", "ev"]);
    assert!(r.stdout.contains("disabled ev"), "{r:?}");
    assert_eq!(c.servers()["ev"]["enabled"], false);
    c.ok(&["mcp", "enable", "ev"]);
    assert_ne!(c.servers()["ev"]["enabled"], false);

    // Edit: a second secret read from standard input; a server that is not there.
    let r = c.run_with(
        &["mcp", "edit", "ev", "--env", "SECOND=-"],
        &format!("{ENV2}\n"),
    );
    assert_eq!(r.code, 0, "{r:?}");
    let mut env = c.servers()["ev"]["secrets"]["env"].clone();
    env.as_array_mut().unwrap().sort_by_key(|v| v.to_string());
    assert_eq!(env, json!(["API_KEY", "SECOND"]));
    c.ok(&["mcp", "edit", "ev", "--remove-env", "SECOND"]);
    assert_eq!(c.servers()["ev"]["secrets"]["env"], json!(["API_KEY"]));
    let r = c.run(&["mcp", "edit", "nope", "--disabled"]);
    assert_eq!(r.code, 1, "{r:?}");
    assert!(r.stderr.contains("no server named"), "{r:?}");

    // A mistyped command: the daemon refuses, saying why; nothing is saved.
    let r = c.run(&["mcp", "add", "bad", "--", "/nonexistent/cmd"]);
    assert_eq!(r.code, 1, "{r:?}");
    assert!(r.stderr.contains("server_failed"), "{r:?}");
    assert!(r.stderr.contains("could not start"), "{r:?}");
    assert!(!r.stderr.contains("Content type"), "{r:?}");
    let r = c.run(&["mcp", "add", "bad", "--json", "--", "/nonexistent/cmd"]);
    assert_eq!(r.code, 1, "{r:?}");
    assert_eq!(r.json()["error"]["code"], "server_failed", "{r:?}");
    assert!(c.servers().get("bad").is_none());
    // Bad input: the field named.
    let r = c.run(&["mcp", "add", "q", "--command-line", "node \"unclosed"]);
    assert_eq!(r.code, 1, "{r:?}");
    assert!(r.stderr.contains("invalid_settings"), "{r:?}");
    assert!(r.stderr.contains("field: servers.q"), "{r:?}");

    // An HTTP server with a bearer token from standard input and a secret header.
    let peer = HttpPeer::everything();
    let header = format!("X-Api-Key={HEADER}");
    let r = c.run_with(
        &[
            "mcp",
            "add",
            "web",
            "--url",
            &peer.url,
            "--bearer-token",
            "-",
            "--header",
            &header,
        ],
        &format!("{BEARER}\n"),
    );
    assert_eq!(r.code, 0, "{r:?}");
    assert!(r.stdout.contains("added web: connected"), "{r:?}");
    let r = c.ok(&["mcp", "show", "web"]);
    assert_eq!(
        field(&r.stdout, "secrets set"),
        "bearer token; header X-Api-Key",
        "{r:?}"
    );
    assert_eq!(field(&r.stdout, "bearer token"), "secret", "{r:?}");
    c.ok(&["mcp", "show", "web", "--json"]).json();
    let r = c.ok(&["mcp", "tools", "web"]);
    assert!(r.stdout.contains("mcp__web__echo"), "{r:?}");
    // An HTTP server that is not there: refused, the secrets in no message.
    let r = c.run_with(
        &[
            "mcp",
            "add",
            "gone",
            "--url",
            &format!("http://127.0.0.1:{}/mcp", free_port()),
            "--bearer-token",
            "-",
        ],
        &format!("{BEARER}\n"),
    );
    assert_eq!(r.code, 1, "{r:?}");
    c.ok(&["mcp", "edit", "web", "--remove-header"]);
    assert!(c.servers()["web"]["secrets"]["header"].is_null());

    // The daemon named by --daemon host:port (no scheme), the token read from its home.
    let addr = d.base.trim_start_matches("http://").to_owned();
    let r = c.ok(&["mcp", "list", "--daemon", &addr]);
    assert!(r.stdout.contains("web"), "{r:?}");
    let r = c.ok(&["mcp", "list", "--daemon", &d.base]);
    assert!(r.stdout.contains("web"), "{r:?}");

    c.no_secret_anywhere();
    assert!(!d.log().contains(BEARER) && !d.log().contains(ENV));

    // Remove both.
    let r = c.ok(&["mcp", "remove", "ev"]);
    assert!(r.stdout.contains("removed ev"), "{r:?}");
    c.ok(&["mcp", "remove", "web", "--json"]).json();
    assert_eq!(c.run(&["mcp", "remove", "web"]).code, 1);
    assert_eq!(c.servers(), json!({}));
    c.no_secret_anywhere();
    let creds = std::fs::read_to_string(d.albedo_home().join("creds.json")).unwrap_or_default();
    assert!(!creds.contains(ENV) && !creds.contains(BEARER), "{creds}");
}
