//! The command line: `serve` runs the daemon; `launch` is the stdio launcher (internal);
//! `conformance-client` talks to one server directly; the other commands (`mcp …` among
//! them, in `mcp`) are clients of a running daemon's HTTP API (over its socket when it answers there, else over TCP with the
//! API token; see `client`) and never write its files, but for `token --rotate` with no
//! daemon running, which writes the token file the daemon reads at start.

pub mod acp;
pub mod client;
pub mod conformance;
pub mod import;
pub mod listen;
pub mod mcp;
pub mod serve;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "albedo-mcp",
    version,
    about = "Connects agent sessions to MCP servers"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand)]
pub enum Command {
    /// Run the daemon.
    Serve {
        /// Listen address (overrides config.toml and ALBEDO_LISTEN).
        #[arg(long)]
        listen: Option<String>,
        /// Write the bound address to this file once listening (for scripts and tests).
        #[arg(long)]
        ready_file: Option<std::path::PathBuf>,
    },
    /// Internal: run one stdio server in its own process group (used by the daemon).
    #[command(hide = true)]
    Launch {
        command: String,
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// Ask a running daemon for its health.
    Status {
        /// The daemon: a URL, or a socket path (default: $ALBEDO_DAEMON, else the socket in
        /// $ALBEDO_HOME, else the `listen` address of config.toml with the API token).
        #[arg(long)]
        daemon: Option<String>,
    },
    /// Create a session on a running daemon and list its tools.
    Tools {
        /// The daemon (as for `status`).
        #[arg(long)]
        daemon: Option<String>,
    },
    /// Print the API token (to send as `Authorization: Bearer`), or make a new one.
    Token {
        /// Make a new token (through the running daemon, or in the file when none answers):
        /// the old one and every signed-in web pane stop working.
        #[arg(long)]
        rotate: bool,
        /// Print the token file's path instead of the token.
        #[arg(long, conflicts_with = "rotate")]
        path: bool,
        /// The daemon (as for `status`).
        #[arg(long)]
        daemon: Option<String>,
    },
    /// Print a one-time sign-in link to the web pane (good once, for a minute) and open it in
    /// a browser (unless ALBEDO_NO_BROWSER is set or there is none).
    Web {
        /// The daemon (as for `status`).
        #[arg(long)]
        daemon: Option<String>,
    },
    /// Speak ACP v1 over stdio to an editor: each ACP session is a daemon session with the
    /// editor's MCP servers (`editor-mcp`); this agent has no model and only serves tools.
    Acp {
        /// The daemon (as for `status`).
        #[arg(long)]
        daemon: Option<String>,
    },
    /// Manage the daemon's MCP servers: list, show, add, edit, remove, enable, disable,
    /// test, tools, call, import (all through the running daemon's API).
    Mcp(Box<mcp::McpArgs>),
    /// The terminal screen for the daemon's MCP servers: list, add, edit, delete, re-enable,
    /// sign in and out (a client of the running daemon's API).
    Ui {
        /// The daemon (as for `status`).
        #[arg(long)]
        daemon: Option<String>,
        /// A session whose `mcp` extension the extensions view (`x`) can switch alone (`s`).
        #[arg(long)]
        session: Option<String>,
    },
    /// Talk to one HTTP MCP server as the conformance runner's client: do the work of the
    /// scenario named in MCP_CONFORMANCE_SCENARIO and exit (0 when it all worked).
    ConformanceClient {
        /// The server's URL (the runner passes it last).
        url: String,
    },
}
