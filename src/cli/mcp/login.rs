//! `albedo-mcp mcp login NAME` and `albedo-mcp mcp logout NAME`: signing in to an HTTP
//! server with OAuth through the daemon's sign-in API, and signing out.
//!
//! Owns: the command's side of the sign-in (`/auth/logins/mcp:NAME`): start it (`PUT`),
//! print the authorization URL and open a browser on it (not with `--no-browser` or
//! `ALBEDO_NO_BROWSER`), then wait, asking (`GET`) every 500 ms, until the sign-in is over
//! (signed in, failed, cancelled, expired). `--paste` also takes the callback URL the browser
//! shows from standard input and hands it to the daemon (`POST .../callback`), for a browser
//! on another machine whose redirect cannot reach the daemon's loopback; whichever of the two
//! comes first completes. Ctrl-C cancels the sign-in (`DELETE`). Signing out is the settings
//! patch `{"secrets": {NAME: {"oauth": null}}}`.
//!
//! Output: text for people, or with `--json` one JSON document a line: the `PUT` answer
//! first (it holds `authorization_url`), the sign-in's last state at the end. Exit status: 0
//! signed in (or out), 1 refused, failed, cancelled or expired, 2 no daemon answers.
//!
//! Must not touch: tokens. The daemon keeps them; nothing here sees one (the callback URL
//! carries an authorization code, sent to the daemon and never printed).

use super::{need_server, seg, McpError, Out};
use crate::cli::client::{open_in_browser, ClientError, DaemonClient};
use awc::http::Method;
use serde_json::{json, Value};
use std::time::Duration;

/// How often the sign-in's state is asked for.
const POLL: Duration = Duration::from_millis(500);

/// The API path of the sign-in to server `name`.
fn login_path(name: &str) -> String {
    format!("/auth/logins/mcp:{}", seg(name))
}

/// A sign-in's state is final: nothing more will happen to it.
fn finished(state: &str) -> bool {
    matches!(state, "signed_in" | "failed" | "cancelled" | "expired")
}

/// The error of a refused sign-in: a server the daemon does not know is said the way every
/// `mcp` command says it.
fn refused(name: &str, e: ClientError) -> McpError {
    match e {
        ClientError::Refused {
            status: 404,
            ref code,
            ..
        } if code == "unknown_server" => McpError::NoSuchServer(name.to_owned()),
        other => other.into(),
    }
}

pub(super) async fn login(
    c: &DaemonClient,
    out: Out,
    name: &str,
    no_browser: bool,
    paste: bool,
) -> Result<i32, McpError> {
    let path = login_path(name);
    // Ctrl-C is caught from here on (a handler made now, not when first waited for: a
    // Ctrl-C as soon as the URL shows still cancels the sign-in).
    let mut ctrl_c = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())
        .map_err(|e| McpError::Usage(format!("cannot catch Ctrl-C: {e}")))?;
    let started = c
        .call(Method::PUT, &path, Some(&json!({})))
        .await
        .map_err(|e| refused(name, e))?;
    let url = started["authorization_url"].as_str().unwrap_or_default();
    if started["state"] == "signed_in" {
        return Ok(end(out, name, &started));
    }
    if url.is_empty() {
        return Err(McpError::Answer("the authorization URL"));
    }
    if out.json {
        println!("{started}");
    } else {
        eprintln!("Sign in to {name} at this address:");
        println!("{url}");
    }
    if !no_browser {
        if let Some(Err(e)) = open_in_browser(url) {
            eprintln!("albedo-mcp: {e}");
        }
    }
    if !out.json {
        if paste {
            eprintln!(
                "Then paste here the address the browser shows after signing in \
                 (it starts with {}):",
                started["redirect_uri"]
                    .as_str()
                    .unwrap_or("the redirect URI")
            );
        } else {
            eprintln!("Waiting for the sign-in to finish (Ctrl-C cancels it)...");
        }
    }
    // A line from standard input, read on a thread of its own (reading blocks).
    let (tx, mut pasted) = tokio::sync::mpsc::unbounded_channel::<String>();
    if paste {
        std::thread::spawn(move || {
            let mut line = String::new();
            if std::io::stdin().read_line(&mut line).unwrap_or(0) > 0 {
                let _ = tx.send(line.trim().to_owned());
            }
        });
    } else {
        drop(tx);
    }
    let mut stdin_open = paste;
    loop {
        tokio::select! {
            _ = ctrl_c.recv() => {
                let _ = c.call(Method::DELETE, &path, None).await;
                if out.json {
                    println!("{}", json!({"login": format!("mcp:{name}"), "state": "cancelled"}));
                } else {
                    eprintln!("albedo-mcp: sign-in to {name} cancelled");
                }
                return Ok(1);
            }
            line = pasted.recv(), if stdin_open => {
                match line {
                    Some(l) if !l.is_empty() => {
                        match c.call(Method::POST, &format!("{path}/callback"),
                                     Some(&json!({"url": l}))).await {
                            Ok(v) if v["state"] == "signed_in" => return Ok(end(out, name, &v)),
                            Ok(_) => {}
                            // A pasted URL the daemon refused; the loopback may still win,
                            // but the user will not paste twice: say it and stop.
                            Err(e @ ClientError::Refused { .. }) => {
                                let now = c.call(Method::GET, &path, None).await;
                                if let Ok(v) = &now {
                                    if v["state"] == "signed_in" {
                                        return Ok(end(out, name, v));
                                    }
                                }
                                return Err(e.into());
                            }
                            Err(e) => return Err(e.into()),
                        }
                    }
                    _ => stdin_open = false,
                }
            }
            _ = tokio::time::sleep(POLL) => {
                let v = c.call(Method::GET, &path, None).await?;
                if finished(v["state"].as_str().unwrap_or("")) {
                    return Ok(end(out, name, &v));
                }
            }
        }
    }
}

/// Say how the sign-in ended; its exit status.
fn end(out: Out, name: &str, v: &Value) -> i32 {
    let state = v["state"].as_str().unwrap_or("?");
    let ok = state == "signed_in";
    if out.json {
        println!("{v}");
    } else if ok {
        println!("signed in to {name}");
    } else {
        let mut line = format!(
            "albedo-mcp: the sign-in to {name} {}",
            state.replace('_', " ")
        );
        if let Some(e) = v["error"].as_str().or(v["error"]["message"].as_str()) {
            line.push_str(&format!(": {e}"));
        }
        eprintln!("{line}");
    }
    if ok {
        0
    } else {
        1
    }
}

pub(super) async fn logout(c: &DaemonClient, out: Out, name: &str) -> Result<i32, McpError> {
    need_server(c, name).await?;
    let a = super::apply(c, &json!({"secrets": {name: {"oauth": null}}})).await?;
    if out.json {
        out.json(&a);
    } else {
        let state = a["servers"][name]["auth"]["state"]
            .as_str()
            .unwrap_or("signed_out")
            .replace('_', " ");
        println!("signed out of {name} (sign-in: {state})");
        super::warn_sessions(&a);
    }
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_and_final_states() {
        assert_eq!(login_path("files"), "/auth/logins/mcp:files");
        assert_eq!(login_path("a b/c"), "/auth/logins/mcp:a%20b%2Fc");
        for s in ["signed_in", "failed", "cancelled", "expired"] {
            assert!(finished(s));
        }
        assert!(!finished("pending"));
        assert!(!finished(""));
    }

    #[test]
    fn an_unknown_server_is_said_as_every_command_says_it() {
        let e = refused(
            "x",
            ClientError::Refused {
                at: "d".into(),
                status: 404,
                code: "unknown_server".into(),
                message: "m".into(),
                field: None,
                body: Value::Null,
            },
        );
        assert!(matches!(e, McpError::NoSuchServer(n) if n == "x"));
        let e = refused(
            "x",
            ClientError::Refused {
                at: "d".into(),
                status: 400,
                code: "not_http".into(),
                message: "m".into(),
                field: None,
                body: Value::Null,
            },
        );
        assert_eq!(e.exit_code(), 1);
    }
}
