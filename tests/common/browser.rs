//! What the real-browser tests need: the system's Chromium (Debian's `chromium`), Node 22 and
//! puppeteer-core from `.peers/` (tests/peers/install.sh), and a way to run a driver script
//! that prints its results as one JSON line. Without them a test says SKIPPED, unless
//! `CI=true` or `ALBEDO_TEST_REQUIRE_BROWSER=1` (`.ci/run`): then it fails.

use super::{peers, repo, required};
use serde_json::Value;
use std::path::PathBuf;
use std::process::Command;

pub fn must_run() -> bool {
    std::env::var("CI").as_deref() == Ok("true") || required("BROWSER")
}

pub struct Tools {
    pub chromium: PathBuf,
    pub node22: PathBuf,
    pub modules: PathBuf,
}

/// The browser's tools, or `None` (the test is SKIPPED) when one is missing outside CI.
pub fn tools() -> Option<Tools> {
    let chromium = match std::env::var_os("CHROMIUM") {
        Some(c) => Some(PathBuf::from(c)).filter(|p| p.exists()),
        None => ["/usr/bin/chromium", "/usr/bin/chromium-browser"]
            .iter()
            .map(PathBuf::from)
            .find(|p| p.exists()),
    };
    let node22 = peers().join("node22/bin/node");
    let modules = peers().join("browser/node_modules");
    let missing: Vec<&str> = [
        (
            chromium.is_none(),
            "chromium (apt-get install chromium; .ci/run does)",
        ),
        (!node22.exists(), "Node 22 (tests/peers/install.sh)"),
        (
            !modules.join("puppeteer-core").exists(),
            "puppeteer-core (tests/peers/install.sh)",
        ),
    ]
    .iter()
    .filter(|(m, _)| *m)
    .map(|(_, w)| *w)
    .collect();
    if !missing.is_empty() {
        let msg = format!(
            "the browser test cannot run: missing {}",
            missing.join(", ")
        );
        assert!(!must_run(), "{msg}");
        eprintln!("SKIPPED: {msg}");
        return None;
    }
    Some(Tools {
        chromium: chromium?,
        node22,
        modules,
    })
}

/// Run `tests/browser/<script>` with `cfg` under Node 22; its last JSON line. A driver that
/// fails (Chromium cannot start, a step times out) fails the test with its stderr.
pub fn drive(t: &Tools, script: &str, cfg: &Value) -> Value {
    let out = Command::new(&t.node22)
        .arg(repo().join("tests/browser").join(script))
        .arg(cfg.to_string())
        .env("NODE_PATH", &t.modules)
        .output()
        .expect("node 22");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "the browser could not be driven (Chromium must start; in CI this is a failure):\n{stderr}"
    );
    serde_json::from_slice(
        out.stdout
            .split(|&b| b == b'\n')
            .rfind(|l| l.starts_with(b"{"))
            .unwrap_or(b"null"),
    )
    .unwrap_or(Value::Null)
}

/// Where the browser tests keep their screenshots and records (git-ignored).
pub fn artefacts() -> PathBuf {
    let dir = repo().join("target/browser-artefacts");
    let _ = std::fs::create_dir_all(&dir);
    dir
}
