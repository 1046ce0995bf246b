//! What is wrong with the daemon's configuration, said clearly: `extensions.json` (a file that
//! does not parse, a server entry that is invalid, unknown fields, an enabled server whose
//! variable or stored secret is missing), `creds.json` (unreadable, or readable by others) and
//! `config.toml` (unknown keys, bad values). The list is shown by `GET /settings/mcp` and
//! `albedo-mcp mcp list`, and [`report`] logs each problem once: at start and whenever the
//! files change (the daemon reads them on every preparation and settings request).
//!
//! Owns: that list and the memory of what was logged. Must not touch: actors, the API.

use super::daemon_config::DaemonConfig;
use super::settings::{self, Credentials, ExtensionsFile};
use std::collections::BTreeSet;
use std::path::Path;
use std::sync::Mutex;

/// Keys `config.toml` knows (see `daemon_config`).
pub const CONFIG_KEYS: [&str; 13] = [
    "listen",
    "database_url",
    "log_format",
    "ca_files",
    "max_sessions",
    "session_idle_secs",
    "max_concurrent_dials",
    "allowed_hosts",
    "tls_cert",
    "tls_key",
    "allow_plain_http_remote",
    "max_body_bytes",
    "max_call_body_bytes",
];

/// Problems of `config.toml`.
pub fn config_problems(home: &Path) -> Vec<String> {
    let path = home.join("config.toml");
    let mut out = Vec::new();
    if !path.exists() {
        return out;
    }
    match config::Config::builder()
        .add_source(config::File::from(path.clone()).format(config::FileFormat::Toml))
        .build()
        .and_then(|c| c.try_deserialize::<std::collections::HashMap<String, config::Value>>())
    {
        Ok(keys) => {
            for k in keys.keys() {
                if !CONFIG_KEYS.contains(&k.as_str()) {
                    out.push(format!(
                        "config.toml: unknown key `{k}` is ignored (known: {})",
                        CONFIG_KEYS.join(", ")
                    ));
                }
            }
        }
        Err(e) => out.push(format!("config.toml: {e}")),
    }
    if let Err(e) = DaemonConfig::load(home) {
        out.push(format!("config.toml: {e}"));
    }
    out
}

/// Problems of `extensions.json` and `creds.json` as read (`env` reads the daemon's
/// environment).
pub fn settings_problems(
    ext: &Result<ExtensionsFile, settings::SettingsError>,
    creds: &Result<Credentials, settings::SettingsError>,
    env: &dyn Fn(&str) -> Option<String>,
) -> Vec<String> {
    let mut out = Vec::new();
    let ext = match ext {
        Ok(e) => e,
        Err(e) => {
            out.push(format!("extensions.json: {e}"));
            return out;
        }
    };
    if let Err(e) = creds {
        out.push(format!("creds.json: {e}"));
    }
    let (mcp, bad) = match settings::parse_mcp_each(ext.raw.get("mcp")) {
        Ok(x) => x,
        Err(e) => {
            out.push(format!("extensions.json: {e}"));
            return out;
        }
    };
    for (_, e) in &bad {
        out.push(format!("extensions.json: {e}"));
    }
    for w in &mcp.warnings {
        out.push(format!("extensions.json: {w}"));
    }
    if let Ok(creds) = creds {
        for s in mcp.servers.iter().filter(|s| s.enabled) {
            if let Err(e) = settings::resolve(s, env, creds) {
                out.push(format!("extensions.json: {e}"));
            }
        }
    }
    out
}

/// Every problem of the three files.
pub fn check(home: &Path) -> Vec<String> {
    let ext = ExtensionsFile::load(home);
    let creds = Credentials::load(home);
    let env = |k: &str| std::env::var(k).ok();
    let mut out = settings_problems(&ext, &creds, &env);
    out.extend(config_problems(home));
    out
}

/// The modification time and length of each file the problems come from.
type Stamps = Vec<Option<(std::time::SystemTime, u64)>>;

static LAST_STAMPS: Mutex<Option<(std::path::PathBuf, Stamps)>> = Mutex::new(None);

fn stamps(home: &Path) -> Stamps {
    ["extensions.json", "creds.json", "config.toml"]
        .iter()
        .map(|f| {
            std::fs::metadata(home.join(f))
                .ok()
                .and_then(|m| Some((m.modified().ok()?, m.len())))
        })
        .collect()
}

/// Check and report again only when one of the files changed since the last call (a few
/// `stat`s otherwise): called on every preparation, so each change is logged once.
pub fn report_on_change(home: &Path) {
    let now = stamps(home);
    if let Ok(mut last) = LAST_STAMPS.lock() {
        if last
            .as_ref()
            .is_some_and(|(h, s)| h.as_path() == home && *s == now)
        {
            return;
        }
        *last = Some((home.to_path_buf(), now));
    }
    report(&check(home));
}

/// What was logged last: a problem is logged when it appears, and again only after it was
/// gone for a while (fixed, then broken again).
static LOGGED: Mutex<BTreeSet<String>> = Mutex::new(BTreeSet::new());

/// Log the problems not logged yet (at `warn`), and forget the ones that are gone.
/// Answers how many were new.
pub fn report(problems: &[String]) -> usize {
    let Ok(mut logged) = LOGGED.lock() else {
        return 0;
    };
    let now: BTreeSet<String> = problems.iter().cloned().collect();
    let mut new = 0;
    for p in now.difference(&logged) {
        tracing::warn!("configuration problem: {p}");
        new += 1;
    }
    *logged = now;
    new
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_unknown_keys_invalid_servers_and_missing_variables() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(
            d.path().join("config.toml"),
            "listen = \"127.0.0.1:1\"\nlisten_adress = \"x\"\n",
        )
        .unwrap();
        std::fs::write(
            d.path().join("extensions.json"),
            r#"{"mcp": {"servers": {
                "ok": {"command": "/bin/true"},
                "bad": {"type": "stdio"},
                "novar": {"command": "x", "env": {"K": {"env": "ALBEDO_TEST_SURELY_UNSET_VAR"}}},
                "odd": {"command": "x", "colour": "red"}
            }, "retry": 5}}"#,
        )
        .unwrap();
        let p = check(d.path());
        let all = p.join("\n");
        assert!(all.contains("unknown key `listen_adress`"), "{all}");
        assert!(
            all.contains("\"bad\"") && all.contains("needs `command`"),
            "{all}"
        );
        assert!(all.contains("ALBEDO_TEST_SURELY_UNSET_VAR"), "{all}");
        assert!(all.contains("unknown field `colour`"), "{all}");
        assert!(all.contains("mcp.retry"), "{all}");
        assert!(!all.contains("\"ok\""), "{all}");
        assert_eq!(p.len(), 5, "{all}");
    }

    #[test]
    fn a_file_that_does_not_parse_is_one_problem() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("extensions.json"), "{\"mcp\": ").unwrap();
        let p = check(d.path());
        assert_eq!(p.len(), 1, "{p:?}");
        assert!(p[0].starts_with("extensions.json:"), "{p:?}");
    }
}
