//! The trust boundary against a real browser: headless Chromium (Debian's `chromium`,
//! driven by puppeteer-core from `.peers/browser`, run with Node 22; see
//! `tests/browser/drive.cjs`).
//!
//! The pane signs in with a one-time link and works; then, while it is signed in, pages of
//! other origins (another port of 127.0.0.1, which is the same *site*, and another site) try
//! a `fetch` and a form POST against the daemon; and a page whose name was rebound to the
//! daemon's address (DNS rebinding: same origin as far as the browser knows) tries to read
//! and drive it. None of it may create a session or read an answer.
//!
//! Without Chromium, puppeteer-core or Node 22 the test says SKIPPED, unless `CI=true` or
//! `ALBEDO_TEST_REQUIRE_BROWSER=1` (`.ci/run`): then it fails.

mod common;

use common::browser::{drive, tools};
use common::*;
use serde_json::json;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::unix::fs::PermissionsExt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// Read one request head (up to the blank line).
fn read_head(s: &mut TcpStream) -> Option<Vec<u8>> {
    let mut buf = Vec::new();
    let mut byte = [0u8; 1];
    while !buf.ends_with(b"\r\n\r\n") {
        if s.read(&mut byte).ok()? == 0 || buf.len() > 65536 {
            return None;
        }
        buf.push(byte[0]);
    }
    Some(buf)
}

fn respond(s: &mut TcpStream, status: &str, body: &str) {
    let _ = write!(
        s,
        "HTTP/1.1 {status}\r\nContent-Type: text/html; charset=utf-8\r\nContent-Length: {}\r\n\
         Connection: close\r\nCache-Control: no-store\r\n\r\n{body}",
        body.len()
    );
}

/// The attacker's page: a fetch of each kind and a form POST at the daemon, with the
/// user's cookies where the browser sends them.
fn attack_page(daemon: &str) -> String {
    format!(
        r#"<!doctype html><html><body>
<iframe name="sink"></iframe>
<form id="plain" method="POST" action="{daemon}/sessions" enctype="text/plain" target="sink"><input name='{{"x":"' value='"}}'></form>
<form id="urlenc" method="POST" action="{daemon}/extensions/mcp/reload" target="sink"><input name="a" value="b"></form>
<script>
window.results = {{}};
const D = "{daemon}";
async function attempt(name, f) {{
  try {{ window.results[name] = await f(); }} catch (e) {{ window.results[name] = "blocked: " + e.name; }}
}}
(async () => {{
  await attempt("fetch_post_json", async () => {{
    const r = await fetch(D + "/sessions", {{method: "POST", credentials: "include",
      headers: {{"Content-Type": "application/json"}}, body: "{{}}"}});
    return "read " + r.status + " " + (await r.text());
  }});
  await attempt("fetch_get", async () => {{
    const r = await fetch(D + "/extensions", {{credentials: "include"}});
    return "read " + r.status + " " + (await r.text());
  }});
  await attempt("fetch_no_cors_post", async () => {{
    const r = await fetch(D + "/sessions", {{method: "POST", mode: "no-cors", credentials: "include",
      headers: {{"Content-Type": "text/plain"}}, body: "{{}}"}});
    return "sent, answer " + r.type;
  }});
  document.getElementById("plain").submit();
  await new Promise((r) => setTimeout(r, 1500));
  document.getElementById("urlenc").submit();
  await new Promise((r) => setTimeout(r, 1500));
  window.results.forms = "submitted";
  window.done = true;
}})();
</script></body></html>"#
    )
}

/// The rebinding page: same-origin requests, which the browser lets it read.
const REBIND_PAGE: &str = r#"<!doctype html><html><body><script>
window.results = {};
(async () => {
  for (const [name, path, init] of [
    ["healthz", "/healthz", {}],
    ["extensions", "/extensions", {}],
    ["create", "/sessions", {method: "POST", headers: {"Content-Type": "application/json"}, body: "{}"}],
  ]) {
    try {
      const r = await fetch(path, init);
      window.results[name] = r.status + " " + (await r.text()).slice(0, 300);
    } catch (e) { window.results[name] = "error " + e; }
  }
  window.done = true;
})();
</script></body></html>"#;

/// The attacker's web server on 127.0.0.1 (any Host).
fn attacker_server(page: String) -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for s in l.incoming() {
            let Ok(mut s) = s else { continue };
            let page = page.clone();
            std::thread::spawn(move || {
                if let Some(head) = read_head(&mut s) {
                    if head.starts_with(b"GET / ") {
                        respond(&mut s, "200 OK", &page);
                    } else {
                        respond(&mut s, "404 Not Found", "");
                    }
                }
            });
        }
    });
    port
}

/// DNS rebinding, as the browser sees it: `rebind.test` first answers with the attacker's
/// page, then resolves to the daemon. Here it resolves to 127.0.0.2 on the daemon's port,
/// where this serves the page to the first `GET /` and then passes every connection,
/// untouched, to the daemon on 127.0.0.1.
fn rebinding_proxy(daemon_port: u16) -> std::io::Result<()> {
    let l = TcpListener::bind(("127.0.0.2", daemon_port))?;
    let served = Arc::new(AtomicBool::new(false));
    std::thread::spawn(move || {
        for s in l.incoming() {
            let Ok(mut s) = s else { continue };
            let served = served.clone();
            std::thread::spawn(move || {
                let Some(head) = read_head(&mut s) else {
                    return;
                };
                if head.starts_with(b"GET / ") && !served.swap(true, Ordering::SeqCst) {
                    respond(&mut s, "200 OK", REBIND_PAGE);
                    return;
                }
                let Ok(mut up) = TcpStream::connect(("127.0.0.1", daemon_port)) else {
                    return;
                };
                if up.write_all(&head).is_err() {
                    return;
                }
                let (Ok(mut s2), Ok(mut up2)) = (s.try_clone(), up.try_clone()) else {
                    return;
                };
                let t = std::thread::spawn(move || {
                    let _ = std::io::copy(&mut up2, &mut s2);
                    let _ = s2.shutdown(std::net::Shutdown::Write);
                });
                let _ = std::io::copy(&mut s, &mut up);
                let _ = up.shutdown(std::net::Shutdown::Write);
                let _ = t.join();
            });
        }
    });
    Ok(())
}

#[test]
fn a_real_browser_signs_in_and_other_pages_and_rebinding_get_nothing() {
    let Some(t) = tools() else { return };
    let home = tempfile::tempdir().unwrap();
    std::fs::set_permissions(home.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
    let ext = json!({"enabled": {"mcp": true}, "mcp": {"servers": {
        "fx": fixture_server("exits_mid_call.py", &[])}}});
    std::fs::write(home.path().join("extensions.json"), ext.to_string()).unwrap();
    let d = Daemon::start_in(home, &[]);
    let port: u16 = d.base.rsplit(':').next().unwrap().parse().unwrap();
    let own = format!("http://127.0.0.1:{port}");
    // The one-time link, as `albedo-mcp web` gets it.
    let (st, v) = d.post("/login/once", json!(null));
    assert_eq!(st, 200, "{v}");
    let link = v["url"].as_str().unwrap().to_owned();
    let attacker = attacker_server(attack_page(&own));
    rebinding_proxy(port).expect("127.0.0.2 on the daemon's port");
    let attackers = vec![
        // Another port of the daemon's own host: the same site, so the cookie goes along.
        format!("http://127.0.0.1:{attacker}/"),
        // Another site.
        format!("http://attacker.test:{attacker}/"),
    ];
    let cfg = json!({
        "chromium": t.chromium,
        "link": link,
        "attackers": attackers,
        "rebind": format!("http://rebind.test:{port}/"),
        "rules": "MAP attacker.test 127.0.0.1, MAP rebind.test 127.0.0.2",
    });
    let r = drive(&t, "drive.cjs", &cfg);
    eprintln!("{}", serde_json::to_string_pretty(&r).unwrap());
    // The pane: signed in with the link, on the daemon's own origin, and working.
    assert_eq!(r["signin"]["url"], format!("{own}/"), "{r}");
    assert_eq!(r["signin"]["status"], 200, "{r}");
    assert_eq!(r["pane_health"], "the daemon is running", "{r}");
    assert!(
        r["pane_session"]
            .as_str()
            .unwrap()
            .starts_with("session s1-"),
        "{r}"
    );
    assert_eq!(r["pane_servers"], json!(["fx:connected"]), "{r}");
    let cookie = &r["cookies"][0];
    assert_eq!(cookie["name"], format!("albedo_session_{port}"));
    assert_eq!(cookie["httpOnly"], true);
    assert_eq!(cookie["sameSite"], "Strict");
    // Other origins: nothing read, nothing done.
    for a in &attackers {
        let got = &r["attacks"][a];
        for k in ["fetch_post_json", "fetch_get"] {
            let s = got[k].as_str().unwrap_or("");
            assert!(s.starts_with("blocked"), "{a} {k}: {s}");
        }
        assert_eq!(got["forms"], "submitted", "{a}: {got}");
    }
    // The rebinding page reached the daemon (through the name it resolved) and was refused.
    for k in ["healthz", "extensions", "create"] {
        let s = r["rebind"][k].as_str().unwrap_or("");
        assert!(
            s.starts_with("403 ") && s.contains("host_refused"),
            "rebind {k}: {s}"
        );
    }
    // Only the pane's session exists: the next one is the second.
    let (st, v) = d.post("/sessions", json!({}));
    assert_eq!(st, 201);
    assert!(
        v["id"].as_str().unwrap().starts_with("s2-"),
        "a page of another origin created a session: {v}"
    );
    // The reload the url-encoded form asked for never ran: the pane's session was not
    // prepared again.
    let pane_id = r["pane_session"]
        .as_str()
        .unwrap()
        .trim_start_matches("session ");
    let (st, v) = d.get(&format!("/sessions/{pane_id}"));
    assert_eq!(st, 200, "{v}");
    assert_eq!(
        v["generation"], 1,
        "a page of another origin reloaded the settings: {v}"
    );
    // The daemon says why it refused.
    let log = d.log();
    assert!(log.contains("origin_refused"), "{log}");
    assert!(log.contains("host_refused"), "{log}");
    // Headless Chromium reports itself.
    assert!(r["version"].as_str().unwrap_or("").contains("Chrom"), "{r}");
}
