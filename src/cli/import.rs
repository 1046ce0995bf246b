//! `albedo-mcp mcp import FILE`: reads the server lists users already have (Claude Desktop /
//! Claude Code `.mcp.json`, Cursor and VS Code `mcp.json`, Codex `config.toml`) and adds them
//! through `PATCH /settings/mcp`, so an import is strict like any save.
//!
//! Owns: reading those formats into a settings patch. Must not touch: the settings files.

use std::path::Path;

/// Import `file` into the daemon at `daemon`; `dry_run` shows what would be added. The exit
/// status: 0 ok, 1 the daemon refused, 2 the daemon is not running.
pub fn run(daemon: Option<&str>, file: &Path, dry_run: bool, json: bool) -> i32 {
    let _ = (daemon, dry_run, json);
    eprintln!(
        "albedo-mcp: importing {} is not built in this revision",
        file.display()
    );
    1
}
