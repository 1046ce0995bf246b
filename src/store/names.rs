//! Suggesting a name for a new server (`GET /settings/mcp/suggest-name`): a valid server name
//! that is not taken, from the URL's host (`https://mcp.linear.app/sse` → `linear`) or the
//! command's package (`npx -y @modelcontextprotocol/server-filesystem /x` → `filesystem`,
//! `uvx mcp-server-git` → `git`), or a plain command's file name.
//!
//! Owns: that suggestion. Must not touch: files (the caller says which names are taken).

use super::settings::{valid_server_name, MAX_SERVER_NAME};

#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub enum NameError {
    #[error("the URL cannot be read: {0}")]
    Url(String),
    #[error("the command line cannot be split: {0}")]
    CommandLine(String),
    #[error("the command line is empty")]
    EmptyCommand,
}

/// Host labels that say nothing about which service it is.
const GENERIC_LABELS: [&str; 7] = ["mcp", "api", "www", "server", "servers", "app", "ai"];

/// Runners whose first argument that is not a flag names a package.
const RUNNERS: [&str; 8] = [
    "npx", "uvx", "pipx", "bunx", "pnpx", "dlx", "deno", "docker",
];

/// A name for a server at `url`, not one of `taken`.
pub fn suggest_for_url(url: &str, taken: &[String]) -> Result<String, NameError> {
    let u = url::Url::parse(url.trim()).map_err(|e| NameError::Url(e.to_string()))?;
    let base = match u.host() {
        Some(url::Host::Domain(d)) => {
            let labels: Vec<&str> = d.split('.').filter(|l| !l.is_empty()).collect();
            // The last label is the top-level domain (unless it is the only one).
            let body = if labels.len() > 1 {
                &labels[..labels.len() - 1]
            } else {
                &labels[..]
            };
            body.iter()
                .rev()
                .find(|l| !GENERIC_LABELS.contains(&l.to_ascii_lowercase().as_str()))
                .or(body.last())
                .map(|l| l.to_string())
                .unwrap_or_default()
        }
        Some(_) => String::new(),
        None => String::new(),
    };
    Ok(free(&sanitize(&base), taken))
}

/// A name for a server started by `command_line` (split as a shell would, with no shell),
/// not one of `taken`.
pub fn suggest_for_command(command_line: &str, taken: &[String]) -> Result<String, NameError> {
    let words =
        super::cmdline::split(command_line).map_err(|e| NameError::CommandLine(e.to_string()))?;
    let Some(program) = words.first() else {
        return Err(NameError::EmptyCommand);
    };
    let program_name = file_name(program);
    let base = if RUNNERS.contains(&program_name.as_str()) {
        words[1..]
            .iter()
            .filter(|w| !w.starts_with('-'))
            .find(|w| !["run", "dlx", "exec", "x", "tool"].contains(&w.as_str()))
            .map(|p| package_name(p))
            .unwrap_or(program_name)
    } else if ["python", "python3", "node", "bun", "uv"].contains(&program_name.as_str()) {
        // `python -m pkg`, `node path/to/server.js`, `uv run server.py`.
        let mut it = words[1..].iter().filter(|w| w.as_str() != "run");
        match it.next() {
            Some(m) if m == "-m" => it.next().map(|p| package_name(p)).unwrap_or(program_name),
            Some(script) if !script.starts_with('-') => {
                let f = file_name(script);
                let stem = f.rsplit_once('.').map(|(s, _)| s.to_owned()).unwrap_or(f);
                if ["index", "main", "server", "dist"].contains(&stem.as_str()) {
                    program_name
                } else {
                    package_name(&stem)
                }
            }
            _ => program_name,
        }
    } else {
        program_name
    };
    Ok(free(&sanitize(&base), taken))
}

/// The last path component.
fn file_name(p: &str) -> String {
    p.rsplit('/').next().unwrap_or(p).to_owned()
}

/// `@scope/server-foo@1.2` → `foo`; `mcp-server-git` → `git`; `foo-mcp` → `foo`.
fn package_name(p: &str) -> String {
    let mut s = p.trim_start_matches('@');
    if let Some((_, rest)) = s.rsplit_once('/') {
        s = rest;
    }
    // A version: `name@1.2.3` or `name==1.2`.
    if let Some((name, _)) = s.split_once('@') {
        s = name;
    }
    if let Some((name, _)) = s.split_once("==") {
        s = name;
    }
    let mut s = s.to_ascii_lowercase();
    for prefix in ["mcp-server-", "server-", "mcp-", "mcp_server_", "mcp_"] {
        if let Some(rest) = s.strip_prefix(prefix) {
            if !rest.is_empty() {
                s = rest.to_owned();
                break;
            }
        }
    }
    for suffix in ["-mcp-server", "-server", "-mcp", "_mcp", ".py", ".js"] {
        if let Some(rest) = s.strip_suffix(suffix) {
            if !rest.is_empty() {
                s = rest.to_owned();
                break;
            }
        }
    }
    s
}

/// Lower case; anything but letters and digits becomes one `-` (no `_`, which names use
/// sparingly); cut to the name bound; `server` when nothing is left.
pub fn sanitize(s: &str) -> String {
    let mut out = String::new();
    for c in s.chars() {
        if c.is_ascii_alphanumeric() {
            out.push(c.to_ascii_lowercase());
        } else if !out.ends_with('-') && !out.is_empty() {
            out.push('-');
        }
    }
    let mut out = out.trim_matches('-').to_owned();
    // Room for a `-NN` suffix.
    out.truncate(MAX_SERVER_NAME - 4);
    let out = out.trim_matches('-').to_owned();
    if out.is_empty() || !valid_server_name(&out) {
        "server".to_owned()
    } else {
        out
    }
}

/// `base`, or `base-2`, `base-3`, ... : the first not in `taken`.
pub fn free(base: &str, taken: &[String]) -> String {
    if !taken.iter().any(|t| t == base) {
        return base.to_owned();
    }
    (2..)
        .map(|n| format!("{base}-{n}"))
        .find(|c| !taken.iter().any(|t| t == c))
        .unwrap_or_else(|| base.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn url(u: &str) -> String {
        suggest_for_url(u, &[]).unwrap()
    }

    fn cmd(c: &str) -> String {
        suggest_for_command(c, &[]).unwrap()
    }

    #[test]
    fn names_from_urls() {
        assert_eq!(url("https://mcp.linear.app/sse"), "linear");
        assert_eq!(url("https://api.github.com/mcp"), "github");
        assert_eq!(url("https://mcp.example.com/mcp"), "example");
        assert_eq!(url("http://localhost:8080/mcp"), "localhost");
        assert_eq!(url("http://127.0.0.1:9/mcp"), "server");
        assert_eq!(url("https://docs.mcp.cloudflare.com/sse"), "cloudflare");
        assert!(matches!(
            suggest_for_url("not a url", &[]),
            Err(NameError::Url(_))
        ));
    }

    #[test]
    fn names_from_command_lines() {
        assert_eq!(
            cmd("npx -y @modelcontextprotocol/server-filesystem /x"),
            "filesystem"
        );
        assert_eq!(
            cmd("npx -y @modelcontextprotocol/server-everything@2026.8.31"),
            "everything"
        );
        assert_eq!(cmd("uvx mcp-server-git"), "git");
        assert_eq!(cmd("uvx mcp-server-fetch==1.2"), "fetch");
        assert_eq!(cmd("/usr/local/bin/docs-mcp --root /srv"), "docs-mcp");
        assert_eq!(cmd("python -m mcp_server_time"), "time");
        assert_eq!(cmd("node /opt/weather/build/index.js"), "node");
        assert_eq!(cmd("python3 ./notes_server.py"), "notes-server");
        assert_eq!(cmd("docker run -i --rm mcp/postgres"), "postgres");
        assert_eq!(
            cmd(r#"'/opt/my tools/Search Server' "--x y""#),
            "search-server"
        );
        assert!(matches!(
            suggest_for_command("", &[]),
            Err(NameError::EmptyCommand)
        ));
        assert!(matches!(
            suggest_for_command("npx 'unclosed", &[]),
            Err(NameError::CommandLine(_))
        ));
    }

    #[test]
    fn a_taken_name_gets_the_next_free_number_and_every_suggestion_is_valid() {
        let taken = vec!["git".to_owned(), "git-2".to_owned()];
        assert_eq!(
            suggest_for_command("uvx mcp-server-git", &taken).unwrap(),
            "git-3"
        );
        let long = format!("https://{}.example.com/", "a".repeat(200));
        let n = suggest_for_url(&long, &[]).unwrap();
        assert!(valid_server_name(&n), "{n}");
        for c in ["--", "x__y", "ÄÖÜ", "npx -y @@@"] {
            let n = suggest_for_command(c, &[]).unwrap();
            assert!(valid_server_name(&n), "{c:?} → {n:?}");
        }
    }
}
